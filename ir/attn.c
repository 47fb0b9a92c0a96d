/* attn.c - fused attention: the staged chain of scaled dot-product attention
 *
 *   s = matmul(q, k^T)              (k^T: the transpose flag, or a PERMUTE of k's last two axes)
 *   s = s * c | c * s | s / c       (optional: a scalar literal)
 *   s = where(mask, -inf, s) | s + mask | mask + s   (optional: a mask that is causal)
 *   m = reduce_max(s) (detached); z = s - m; e = exp(z); t = reduce_sum(e); p = e / t
 *   y = matmul(p, v)
 *
 * with, under autocast to bf16, a round_bf16 after the scores, the scale, the mask and p
 * (each optional: Inst.attr[2], IR_ATTN_ROUND_*) where the target's kernel has them
 * (Program.fuse_attention & IR_FUSE_ATTN_ROUNDED: the C target, keys in one block)
 *
 * (t_softmax's steps, torchlib/tensor.c) becomes y = attention(q, k, v) (ops.def), when
 * q, k and v have one type [..., T, D], every intermediate is used only by the next step
 * and the mask is causal: evaluated at compile time (ir_const_eval, from the parameters'
 * initial values through slices, comparisons and casts), a where's mask is True exactly
 * above the diagonal and an added mask is -inf exactly there and 0 elsewhere. Anything
 * else (dropout on p, another mask, p used elsewhere) is left as staged: correct, unfused.
 *
 * y's instruction becomes the attention and the rest of the chain stays as it was, unused
 * (DCE removes it): nothing is inserted or deleted, so instruction indices, and any value
 * the staging code still holds, stay valid. (A rounding of k^T becomes a rounding of k, and
 * the scores' matmul, which read it, reads k^T itself.) */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "ir.h"

/* Whether parameter i keeps the values <model>_init gives it as far as the compiled
 * code can tell: a buffer or one of ctc's constants that no entry writes (an
 * nn.Parameter is trained; a weights file is checked at load: Param.assumed). */
static int fixed_param(const Program *p, int i) {
  const Param *pr = &p->params.data[i];
  if (!pr->is_buffer && !pr->is_state) return 0;
  for (int k = 0; k < p->funcs.len; k++) {
    const Func *g = p->funcs.data[k];
    for (int j = 0; j < g->update_params.len; j++)
      if (g->update_params.data[j] == i) return 0;
  }
  return 1;
}

int ir_const_eval(const Program *p, const Func *f, ValId v, double *out, Arena *a, int depth) {
  const Value *val = &f->values.data[v];
  Type t = val->type;
  int64_t n = ir_numel(&t);
  if (depth > 32 || n > ((int64_t)1 << 22)) return 0;
  if (val->kind == V_INPUT) return 0;
  if (val->kind == V_PARAM) {
    const Param *pr = &p->params.data[val->index];
    if (!fixed_param(p, val->index)) return 0;
    for (int64_t i = 0; i < n; i++)
      out[i] = pr->init == PINIT_DATA ? pr->init_data[i] : pr->init == PINIT_CONST ? pr->init_a
                                                         : pr->init == PINIT_ZERO  ? 0
                                                                                   : NAN;
    return pr->init == PINIT_DATA || pr->init == PINIT_CONST || pr->init == PINIT_ZERO;
  }
  const Inst *in = &f->insts.data[val->def];
  const double **ops = arena_alloc(a, sizeof(double *) * (size_t)(in->nargs + 1));
  for (int k = 0; k < in->nargs; k++) {
    double *o = arena_alloc(a, sizeof(double) * (size_t)(ir_numel(&f->values.data[in->args[k]].type) + 1));
    if (!ir_const_eval(p, f, in->args[k], o, a, depth + 1)) return 0;
    ops[k] = o;
  }
  return ir_eval_inst(f, in, ops, out);
}

void ir_assume_params(Program *p, const Func *f, ValId v, const char *why) {
  const Value *val = &f->values.data[v];
  if (val->kind == V_PARAM) {
    Param *pr = &p->params.data[val->index];
    if (!pr->assumed) pr->assumed = why;
    return;
  }
  if (val->kind != V_INST) return;
  const Inst *in = &f->insts.data[val->def];
  for (int k = 0; k < in->nargs; k++) ir_assume_params(p, f, in->args[k], why);
}

typedef struct Chain {
  Program *p;
  Func *f;
  int *uses;
} Chain;

/* v's defining instruction if it is op, used exactly `uses` times; NULL otherwise */
static Inst *def(Chain *c, ValId v, Op op, int uses) {
  const Value *val = &c->f->values.data[v];
  if (val->kind != V_INST || c->uses[v] != uses) return NULL;
  Inst *in = &c->f->insts.data[val->def];
  return in->dead || in->op != op ? NULL : in;
}

/* v is a scalar literal: its value */
static int literal(const Func *f, ValId v, double *x) {
  const Value *val = &f->values.data[v];
  if (val->kind != V_INST || val->type.ndim != 0) return 0;
  const Inst *in = &f->insts.data[val->def];
  if (in->op != IR_CONST) return 0;
  *x = in->fattr;
  return 1;
}

/* Whether v's compile-time values, broadcast over [..., T, T], are `above` strictly above
 * the diagonal and `below` elsewhere (bool masks: 1 and 0). */
static int causal_values(const Chain *c, ValId v, int64_t T, double above, double below) {
  const Type *t = &c->f->values.data[v].type;
  if (t->ndim < 2 || t->dims[t->ndim - 1] != T || t->dims[t->ndim - 2] != T) return 0;
  int64_t n = ir_numel(t);
  Arena *a = arena_new();
  double *x = arena_alloc(a, sizeof(double) * (size_t)(n + 1));
  int ok = ir_const_eval(c->p, c->f, v, x, a, 0);
  for (int64_t i = 0; ok && i < n; i++) {
    int64_t j = i % T, r = i / T % T;
    ok = x[i] == (j > r ? above : below);
  }
  arena_free(a);
  return ok;
}

static int reduces_last(const Inst *in, const Type *t) { return in->attr[0] == ((int64_t)1 << (t->ndim - 1)); }

/* The rounding op of a chain's roundings so far (*rnd): bf16's, or f16's with IR_ATTN_ROUND_F16 */
static Op round_op(int rnd) { return rnd & IR_ATTN_ROUND_F16 ? IR_ROUND_F16 : IR_ROUND_BF16; }

/* *x is autocast's round_bf16 (or round_f16; the chain's first rounding decides, the others must
 * be of its kind) of a value used `uses` times: *x becomes that value (used once, by the
 * rounding), and the flag is added to *rnd */
static void skip_round(Chain *c, ValId *x, int *uses, int *rnd, int flag) {
  Inst *r = def(c, *x, round_op(*rnd), *uses);
  if (!r && !*rnd && (r = def(c, *x, IR_ROUND_F16, *uses))) *rnd |= IR_ATTN_ROUND_F16;
  if (r) *x = r->args[0], *uses = 1, *rnd |= flag;
}

/* Tries the chain ending at instruction i (a MATMUL); rewrites it when it matches. */
static int try_chain(Chain *c, int i) {
  Func *f = c->f;
  Inst *y = &f->insts.data[i];
  if (y->op != IR_MATMUL || y->attr[0] || y->attr[1]) return 0;
  ValId P = y->args[0], v = y->args[1];
  const Type *tv = &f->values.data[v].type;
  if (!ir_dtype_is_float(tv->dtype) || tv->ndim < 2 || !ir_type_eq(tv, &f->values.data[y->res].type)) return 0;
  int64_t T = tv->dims[tv->ndim - 2];
  int rnd = 0, one = 1;   /* IR_ATTN_ROUND_*: autocast's roundings in the chain */
  skip_round(c, &P, &one, &rnd, IR_ATTN_ROUND_P);
  Inst *div = def(c, P, IR_DIV, 1);
  if (!div) return 0;
  ValId e = div->args[0];
  Inst *sum = def(c, div->args[1], IR_REDUCE_SUM, 1), *ex = def(c, e, IR_EXP, 2);
  if (!sum || !ex || sum->args[0] != e || !reduces_last(sum, &f->values.data[e].type)) return 0;
  Inst *sub = def(c, ex->args[0], IR_SUB, 1);
  if (!sub) return 0;
  ValId x = sub->args[0], mv = sub->args[1];
  Inst *det = def(c, mv, IR_DETACH, 1);
  Inst *mx = def(c, det ? det->args[0] : mv, IR_REDUCE_MAX, 1);
  if (!mx || mx->args[0] != x || !reduces_last(mx, &f->values.data[x].type)) return 0;
  /* the mask */
  int causal = 0, uses = 2;
  ValId mask = -1;
  skip_round(c, &x, &uses, &rnd, IR_ATTN_ROUND_MASKED);
  const Type *tx = &f->values.data[x].type;
  if (tx->ndim != tv->ndim || tx->dims[tx->ndim - 1] != T || tx->dims[tx->ndim - 2] != T) return 0;
  Inst *w = def(c, x, IR_WHERE, uses);
  double lit;
  if (w) {
    if (!literal(f, w->args[1], &lit) || lit != -INFINITY || !causal_values(c, w->args[0], T, 1, 0)) return 0;
    causal = 1, mask = w->args[0], x = w->args[2], uses = 1;
  } else if ((w = def(c, x, IR_ADD, uses))) {
    const Type *t0 = &f->values.data[w->args[0]].type;
    int k = ir_type_eq(t0, tx) && causal_values(c, w->args[1], T, -INFINITY, 0) ? 0
            : causal_values(c, w->args[0], T, -INFINITY, 0)                     ? 1
                                                                                : -1;
    if (k < 0 || !ir_type_eq(&f->values.data[w->args[k]].type, tx)) return 0;
    causal = 1, mask = w->args[1 - k], x = w->args[k], uses = 1;
  }
  /* the scale */
  double scale = 1;
  int divide = 0;
  skip_round(c, &x, &uses, &rnd, IR_ATTN_ROUND_SCALED);
  Inst *sc = def(c, x, IR_MUL, uses);
  if (!sc && (sc = def(c, x, IR_DIV, uses))) divide = 1;
  if (sc) {
    int k = literal(f, sc->args[1], &scale) ? 0 : !divide && literal(f, sc->args[0], &scale) ? 1 : -1;
    if (k < 0 || !ir_type_eq(&f->values.data[sc->args[k]].type, tx)) return 0;
    x = sc->args[k], uses = 1;
  }
  skip_round(c, &x, &uses, &rnd, IR_ATTN_ROUND_SCORES);
  Inst *mm = def(c, x, IR_MATMUL, uses);
  if (!mm || mm->attr[0]) return 0;
  /* with roundings: the C target's kernel, f32 */
  if (rnd && (!(c->p->fuse_attention & IR_FUSE_ATTN_ROUNDED) || tv->dtype != DT_F32)) return 0;
  ValId q = mm->args[0], k = mm->args[1];
  Inst *rk = NULL;   /* autocast's rounding of k^T (round(k.transpose(-2, -1))): made a rounding of k */
  if (!mm->attr[1]) {   /* k^T as a permute of the last two axes */
    if (rnd && (rk = def(c, k, round_op(rnd), 1))) k = rk->args[0];
    const Value *kv = &f->values.data[k];
    if (kv->kind != V_INST) return 0;
    const Inst *pm = &f->insts.data[kv->def];
    int nd = kv->type.ndim;
    if (pm->dead || pm->op != IR_PERMUTE || nd < 2 || pm->attr[nd - 1] != nd - 2 || pm->attr[nd - 2] != nd - 1) return 0;
    for (int a = 0; a < nd - 2; a++)
      if (pm->attr[a] != a) return 0;
    k = pm->args[0];
  }
  if (!ir_type_eq(&f->values.data[q].type, tv) || !ir_type_eq(&f->values.data[k].type, tv)) return 0;
  if (rk) {   /* its only use, the scores' matmul (left unused), reads k^T unrounded instead */
    mm->args[1] = rk->args[0];
    rk->args[0] = k;
    f->values.data[rk->res].type = *tv;
    k = rk->res;
  }
  /* rewrite: the mask's buffers must keep the values it was judged causal on */
  if (causal) {
    const char *file = y->loc.file && y->loc.file->path ? y->loc.file->path : ir_source_name(c->p);
    const char *base = strrchr(file, '/');
    ir_assume_params(c->p, f, mask, arena_printf(c->p->arena, "fused attention at %s:%d takes its values as a causal mask",
                                                 base ? base + 1 : file, y->loc.line));
  }
  ValId *args = arena_alloc(c->p->arena, sizeof(ValId) * 3);
  args[0] = q, args[1] = k, args[2] = v;
  y->op = IR_ATTENTION;
  y->nargs = 3;
  y->args = args;
  for (int a = 0; a < IR_MAX_ATTRS; a++) y->attr[a] = 0;
  y->attr[0] = causal;
  y->attr[1] = divide;
  y->attr[2] = rnd;
  y->fattr = scale;
  return 1;
}

int ir_fuse_attention(Program *p, Func *f, int from) {
  int *uses = calloc((size_t)f->values.len + 1, sizeof(int));
  CHECK(uses != NULL);
  for (int i = 0; i < f->insts.len; i++) {
    const Inst *in = &f->insts.data[i];
    if (in->dead) continue;
    for (int k = 0; k < in->nargs; k++) uses[in->args[k]]++;
  }
  for (int i = 0; i < f->outputs.len; i++) uses[f->outputs.data[i]]++;
  for (int i = 0; i < f->updates.len; i++) uses[f->updates.data[i]]++;
  for (int i = 0; i < f->sync.len; i++) uses[f->sync.data[i]]++;
  Chain c = {p, f, uses};
  int n = 0;
  for (int i = from < 0 ? 0 : from; i < f->insts.len; i++)
    if (!f->insts.data[i].dead) n += try_chain(&c, i);
  free(uses);
  return n;
}
