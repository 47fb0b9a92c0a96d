/* attention.c - the kernel IR of a fused attention kernel (ops.def's ATTENTION and
 * ATTENTION_BWD, made by ir/attn.c): one KS_CALL of a microkernel over the operands
 * viewed as [n0, n1, T, D] (n1 the axis before T, n0 the axes before it). Operands are
 * read in place through strides (KnLayout: the head transposes and the q/k/v split of
 * a fused projection copy nothing, as for GEMMs); the result is contiguous. The C
 * renderer prints it as a call of ctc_attention_<dt> / ctc_attention_bwd_<dt>
 * (codegen_c/attn_c.c, which also holds their text). */
#include <string.h>
#include "kir.h"

int kn_attention_operand(const Type *t, const KnLayout *l, int64_t st[3]) {
  int nd = t->ndim;
  if (nd < 2 || (l->st[nd - 1] != 1 && t->dims[nd - 1] != 1)) return -1;
  st[2] = l->st[nd - 2];
  st[1] = nd >= 3 ? l->st[nd - 3] : 0;
  st[0] = 0;
  int64_t want = -1;   /* axes 0 .. nd-4 must merge into one */
  for (int i = nd - 4; i >= 0; i--) {
    if (t->dims[i] == 1) continue;
    if (want >= 0 && l->st[i] != want) return -1;
    if (want < 0) st[0] = l->st[i];
    want = l->st[i] * t->dims[i];
  }
  return 0;
}

Kir *kir_call_new(Arena *a, const Func *f, const Kernel *kn, const Inst *in, const Type *space, const char *fn) {
  Kir *k = arena_alloc(a, sizeof *k);
  KirStmt *st = arena_alloc(a, sizeof *st);
  KirCall *c = arena_alloc(a, sizeof *c);
  memset(k, 0, sizeof *k);
  memset(st, 0, sizeof *st);
  memset(c, 0, sizeof *c);
  k->f = f;
  k->kn = kn;
  k->space = *space;
  c->fn = fn;
  st->kind = KS_CALL;
  st->v = in->res;
  st->in = in;
  st->call = c;
  vec_push(a, &k->body, st);
  return k;
}

Kir *kir_build_call(Arena *a, const Func *f, const KnSchedule *s, const Kernel *kn) {
  if (kn->kind != KN_OP) return NULL;
  const Inst *in = NULL;
  for (int i = kn->first; i <= kn->last; i++) {   /* the op (a kernel also holds the literals after it) */
    const Inst *x = &f->insts.data[i];
    if (x->op != IR_CONST && in) return NULL;
    if (x->op != IR_CONST) in = x;
  }
  return in ? kir_build_inst_call(a, f, s, kn, in) : NULL;
}

Kir *kir_build_inst_call(Arena *a, const Func *f, const KnSchedule *s, const Kernel *kn, const Inst *in) {
  switch (in->op) {
  case IR_MATMUL: return kir_build_gemm(a, f, s, kn, in);
  case IR_CONV2D:
  case IR_CONV2D_BWD_INPUT:
  case IR_CONV2D_BWD_WEIGHT: return kir_build_conv(a, f, kn, in);
  case IR_ATTENTION:
  case IR_ATTENTION_BWD: break;
  default: return NULL;
  }
  const Type *q = &f->values.data[in->args[0]].type;
  int64_t T = q->dims[q->ndim - 2], D = q->dims[q->ndim - 1];
  Kir *k = kir_call_new(a, f, kn, in, &kn->space, ir_ops[in->op].name);   /* attention, attention_bwd */
  KirCall *c = k->body.data[0]->call;
  c->nargs = in->nargs;
  for (int i = 0; i < in->nargs; i++) {
    KnLayout l;
    if (kn_layout(f, s, in->args[i], &l) < 0 || kn_attention_operand(q, &l, c->st[i]) < 0)
      BUG("attention operand %d not addressable through strides", i);
    c->args[i] = l.root;
    c->off[i] = l.off;
  }
  c->strided = 1;
  c->ints[0] = q->ndim >= 3 ? q->dims[q->ndim - 3] : 1;   /* n1 */
  c->ints[1] = ir_numel(q) / (T * D);                     /* n0 * n1 */
  c->ints[2] = T;
  c->ints[3] = D;
  c->ints[4] = in->attr[0];             /* causal */
  c->ints[5] = in->attr[1];             /* divide by the scale */
  c->ints[6] = in->attr[2];             /* bf16 roundings (IR_ATTN_ROUND_*) */
  c->ints[7] = 0;                       /* which operands hold bf16 values: 1 q, 2 k, 4 v, 8 g */
  for (int i = 0; i < in->nargs; i++)
    if (i != 3 && in->attr[2] && ir_low_kind(f, in->args[i]) == 1) c->ints[7] |= i == 4 ? 8 : 1 << i;
  c->nint = 8;
  c->real = in->fattr;
  return k;
}
