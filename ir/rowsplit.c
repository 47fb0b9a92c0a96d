/* rowsplit.c - a sum over the last axis and others split into row sums and a sum of them.
 *
 * BatchNorm's statistics and the gradients of its weight, bias and input are sums over every
 * axis but the channels of [N, C, H, W]: a reduction that is an op of its own (KN_OP), so the
 * elementwise value it sums is stored by the kernel that computes it and read back (the
 * normalisation's backward: five such sums, each a pass over the tensor out and one back).
 * Here such a sum of an elementwise value, in float32, becomes
 *
 *     c  = cast(x, f64)                        (elementwise: joins x's kernel)
 *     r1 = reduce_sum(c) over H and W          ([N, C, 1, 1]: a row reduction over the trailing
 *                                               axes, so x's kernel becomes a KN_ROW (rows of
 *                                               H * W) that stores no x)
 *     r2 = reduce_sum(r1) over the other axes  (over N: a pass over H * W times fewer elements)
 *     y  = cast(r2, f32)                       (the original result)
 *
 * The sums are in double, as the C target's float sums are: each row's in its lane order, then
 * the rows' in order, so y is the double sum of the same floats, rounded once (its bits equal
 * the one-pass sum's unless that double lands within rounding of a float's halfway point).
 * Only for the hosted C target (Program.row_sums; a freestanding float32 build sums in float,
 * a GPU runs a row kernel as a block per row), and only rows of at least ROWSPLIT_MIN_ROW
 * elements, whose per-row sums cost less than the pass they save. */
#include <stdlib.h>
#include <string.h>
#include "ir.h"

#define ROWSPLIT_MIN_ROW 16

/* The trailing axes of in's operand that in sums (the rows) when in is such a sum: float32, of
 * an elementwise value (not a view or a literal), over the last axes (ROWSPLIT_MIN_ROW or more
 * elements) and another of more than one element; else 0. */
static int splits(const Func *f, const Inst *in) {
  if (in->op != IR_REDUCE_SUM) return 0;
  const Type *t = &f->values.data[in->args[0]].type;
  uint64_t m = (uint64_t)in->attr[0];
  int n = t->ndim, tail = 0, other = 0;
  int64_t row = 1;
  for (int k = n - 1; k >= 0 && (m >> k & 1); k--) tail++, row *= t->dims[k];
  for (int k = 0; k < n - tail; k++) other |= (m >> k & 1) && t->dims[k] > 1;
  if (t->dtype != DT_F32 || !tail || !other || row < ROWSPLIT_MIN_ROW) return 0;
  const Inst *d = ir_def(f, in->args[0]);
  return d && d->op != IR_CONST && ir_ops[d->op].kind == K_ELEM && !ir_is_view(f, in->args[0]) ? tail : 0;
}

/* The attribute of a sum over the last `tail` of n axes. */
static int64_t tail_mask(int n, int tail) { return (((int64_t)1 << tail) - 1) << (n - tail); }

/* The cast and the row sums of in's operand (c and r1 above); returns r1. */
static ValId row_sums(Program *p, Func *f, const Inst *in) {
  f->phase = in->phase, f->scope = in->scope, f->grad_mode = in->nograd;
  const char *name = f->values.data[in->res].name;
  const int tail = splits(f, in);
  Type t = f->values.data[in->args[0]].type;
  const int64_t rows = tail_mask(t.ndim, tail);
  t.dtype = DT_F64;
  ValId c = ir_emit(p, f, IR_CAST, &in->args[0], 1, t, NULL, 0, 0, in->loc, name);
  for (int k = t.ndim - tail; k < t.ndim; k++) t.dims[k] = 1;
  return ir_emit(p, f, IR_REDUCE_SUM, &c, 1, t, &rows, 1, 0, in->loc, name);
}

void ir_pass_rowsplit(Program *p, Func *f) {
  if (!p->row_sums) return;
  int ni = f->insts.len, nv = f->values.len, any = 0;
  /* per value: the first split sum of it in the phase of its definition (its row sums go right
   * after the definition, in its kernel); per such first sum its row sums once made */
  int *early = malloc(sizeof(int) * (size_t)(nv + 1));
  ValId *rows = malloc(sizeof(ValId) * (size_t)(ni + 1));
  CHECK(early && rows);
  for (int v = 0; v < nv; v++) early[v] = -1;
  for (int i = 0; i < ni; i++) rows[i] = -1;
  int *lead = malloc(sizeof(int) * (size_t)(ni + 1));   /* per split sum: the first of its value's, or -1 */
  CHECK(lead);
  for (int i = 0; i < ni; i++) {
    const Inst *in = &f->insts.data[i];
    lead[i] = -1;
    if (in->dead || !splits(f, in)) continue;
    const Inst *d = ir_def(f, in->args[0]);
    const int e = early[in->args[0]];
    if (e < 0 && d->phase == in->phase) early[in->args[0]] = lead[i] = i, any = 1;
    else if (e >= 0 && f->insts.data[e].attr[0] == in->attr[0] && f->insts.data[e].phase == in->phase)
      lead[i] = e;   /* the same sum again (a gradient two BatchNorms read): the same row sums, merged by CSE */
  }
  if (!any) {
    free(early);
    free(rows);
    free(lead);
    return;
  }
  Inst *old = ir_insts_take(f);
  const int phase = f->phase, scope = f->scope, grad = f->grad_mode;
  for (int i = 0; i < ni; i++) {
    Inst in = old[i];
    if (lead[i] >= 0 && rows[lead[i]] >= 0) {   /* the sum of the rows, cast back: the result, as before */
      f->phase = in.phase, f->scope = in.scope, f->grad_mode = in.nograd;
      const int64_t rest = in.attr[0] & ~tail_mask(f->values.data[in.args[0]].type.ndim, splits(f, &in));
      Type t = f->values.data[in.res].type;
      t.dtype = DT_F64;
      ValId r2 = ir_emit(p, f, IR_REDUCE_SUM, &rows[lead[i]], 1, t, &rest, 1, 0, in.loc, f->values.data[in.res].name);
      ValId *args = arena_alloc(p->arena, sizeof(ValId));
      args[0] = r2;
      in.op = IR_CAST, in.nargs = 1, in.args = args;
      memset(in.attr, 0, sizeof in.attr);
    }
    ir_inst_push(p, f, in);
    if (!in.dead && early[in.res] >= 0) rows[early[in.res]] = row_sums(p, f, &old[early[in.res]]);
  }
  f->phase = phase, f->scope = scope, f->grad_mode = grad;
  free(old);
  free(early);
  free(rows);
  free(lead);
}
