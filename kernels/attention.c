/* attention.c - the kernel IR of a fused attention kernel (ops.def's ATTENTION and
 * ATTENTION_BWD, made by ir/attn.c): one KS_CALL of a microkernel over the operands
 * viewed as [batch, T, D] (every axis before the last two is the batch). The C
 * renderer prints it as a call of ctc_attention_<dt> / ctc_attention_bwd_<dt>
 * (codegen_c/attn_c.c, which also holds their text). */
#include <string.h>
#include "kir.h"

Kir *kir_build_call(Arena *a, const Func *f, const KnSchedule *s, const Kernel *kn) {
  (void)s;
  if (kn->kind != KN_OP) return NULL;
  const Inst *in = NULL;
  for (int i = kn->first; i <= kn->last; i++) {   /* the op (a kernel also holds the literals after it) */
    const Inst *x = &f->insts.data[i];
    if (x->op == IR_ATTENTION || x->op == IR_ATTENTION_BWD) in = x;
    else if (x->op != IR_CONST) return NULL;
  }
  if (!in) return NULL;
  const Type *q = &f->values.data[in->args[0]].type;
  int64_t T = q->dims[q->ndim - 2], D = q->dims[q->ndim - 1];
  Kir *k = arena_alloc(a, sizeof *k);
  k->f = f;
  k->kn = kn;
  k->space = kn->space;
  KirStmt *st = arena_alloc(a, sizeof *st);
  KirCall *c = arena_alloc(a, sizeof *c);
  st->kind = KS_CALL;
  st->v = in->res;
  st->in = in;
  st->call = c;
  c->fn = in->op == IR_ATTENTION ? "attention" : "attention_bwd";
  c->nargs = in->nargs;
  for (int i = 0; i < in->nargs; i++) c->args[i] = in->args[i];
  c->ints[0] = ir_numel(q) / (T * D);   /* batch */
  c->ints[1] = T;
  c->ints[2] = D;
  c->ints[3] = in->attr[0];             /* causal */
  c->ints[4] = in->attr[1];             /* divide by the scale */
  c->nint = 5;
  c->real = in->fattr;
  vec_push(a, &k->body, st);
  return k;
}
