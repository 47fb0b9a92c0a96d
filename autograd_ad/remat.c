/* remat.c - rematerialisation: reverse mode recomputes cheap forward values
 * instead of keeping them alive until the backward sweep reads them.
 *
 * A forward value (made before the sweep started) is rematerialised when it
 * is an elementwise op whose cone - the elementwise ops it is computed from,
 * back to non-elementwise results (GEMMs, reductions, gathers: "anchors"),
 * parameters, inputs and literals - has at most REMAT_MAX_OPS ops and anchors
 * of at most as many bytes as the value itself (anchors of at most 1/16 of its
 * size, per-row statistics such as a softmax's max and sum, count as free). Then every backward
 * instruction that reads it reads a clone of its cone emitted just before it
 * (reused by later reads up to the next non-elementwise instruction, which
 * ends a fused loop; after it the cone is recomputed again), which the kernel
 * layer fuses into the consumer's loop. An operand of a GEMM or convolution is not
 * rematerialised: the forward stores it for the GEMM anyway, and a clone for the weight
 * gradient would be a pass of its own. GELU's tanh form keeps two tensors (the GEMM
 * output, and GELU's output for the next GEMM) instead of six; layer norm's normalised
 * input is recomputed from the centred input and the row statistics; softmax from its
 * logits. The clones are the same ops on the same values, so the results are bit for bit
 * those of the forward pass. */
#include <stdlib.h>
#include "ad_int.h"

#define REMAT_MAX_OPS 16

static const Inst *def_in(const Func *f, ValId v, int end) {
  const Value *x = &f->values.data[v];
  if (x->kind != V_INST || x->def < 0 || x->def >= end) return NULL;
  const Inst *in = &f->insts.data[x->def];
  return in->res == v ? in : NULL;
}

static int64_t bytes(const Func *f, ValId v) {
  const Type *t = &f->values.data[v].type;
  return ir_numel(t) * (int64_t)ir_dtype_size(t->dtype);
}

/* What keeping v for the backward sweep costs: a rounded value is kept as bf16/f16
 * (ir_pass_low_store), half its float32 bytes */
static int64_t kept_bytes(const Ad *ad, ValId v) {
  return ir_low_store_dtype(ad->p, ad->f, v) != DT_F32 ? bytes(ad->f, v) / 2 : bytes(ad->f, v);
}

/* Whether v, made by in, costs more to recompute than to keep: a pass of tanh, sigmoid (its exp in
 * double) or erf is 1.3-2 ns an element on one AVX2 core, a store in the forward and a load in the
 * backward about 0.5 (the bench gpt's GELU and llama's SwiGLU, 1 thread: train step 293 -> 285 and
 * 278 -> 271 ms, 16 and 11 MiB more arena). Only from REMAT_COSTLY_ELEMS elements: a smaller value
 * stays in the cache either way, and a recurrence's per-step gates, kept, left a step of its
 * backward out of the time loop. */
#define REMAT_COSTLY_ELEMS 65536

static int costly(const Func *f, const Inst *in) {
  return (in->op == IR_TANH || in->op == IR_SIGMOID || in->op == IR_ERF) &&
         ir_numel(&f->values.data[in->res].type) >= REMAT_COSTLY_ELEMS;
}

/* Walks v's cone: counts its ops into *ops and adds each anchor's bytes once
 * (seen[x] == stamp marks what this walk counted). */
static void cone(const Ad *ad, ValId v, int *ops, int64_t *anchor, int *seen, int stamp, int64_t small) {
  const Func *f = ad->f;
  if (seen[v] == stamp || *ops > REMAT_MAX_OPS) return;
  seen[v] = stamp;
  const Inst *in = def_in(f, v, ad->fwd_end);
  if (!in || in->op == IR_CONST) return;   /* a parameter, input or literal: free */
  if (!ad->remat[v]) {   /* (a costly op's result is kept whatever reads it: free here) */
    if (bytes(f, v) > small && !costly(f, in)) *anchor += kept_bytes(ad, v);
    return;
  }
  ++*ops;
  for (int k = 0; k < in->nargs; k++) cone(ad, in->args[k], ops, anchor, seen, stamp, small);
}

void ad_remat_init(Ad *ad, int fwd_end) {
  Func *f = ad->f;
  if (ad->p->no_remat) return;   /* ad->remat stays NULL: ad_remat is the identity */
  int nv = f->values.len;
  ad->fwd_end = fwd_end;
  ad->nv0 = nv;
  ad->remat = calloc((size_t)nv + 1, 1);
  ad->clone = malloc(sizeof(ValId) * ((size_t)nv + 1));
  int *seen = calloc((size_t)nv + 1, sizeof *seen);
  if (!ad->remat || !ad->clone || !seen) BUG("out of memory");
  for (int v = 0; v < nv; v++) ad->clone[v] = -1;
  /* An operand of a GEMM or convolution is stored by the forward pass anyway (the GEMM reads
   * it from memory), and the backward's weight gradient reads it again: a clone there would be
   * a pass of its own writing the same bytes, so it stays (GELU's output before c_proj: its
   * tanh was computed a third time for c_proj's weight gradient, 2.1 ms of the bench gpt's
   * 360 ms step per layer). */
  char *kept = calloc((size_t)nv + 1, 1);
  if (!kept) BUG("out of memory");
  for (int i = 0; i < fwd_end; i++) {
    const Inst *in = &f->insts.data[i];
    if (!in->dead && (in->op == IR_MATMUL || in->op == IR_CONV2D))
      for (int k = 0; k < in->nargs; k++) kept[in->args[k]] = 1;
  }
  for (int i = 0; i < fwd_end; i++) {   /* in order: a value's operands are decided first */
    const Inst *in = &f->insts.data[i];
    if (in->dead || ir_ops[in->op].kind != K_ELEM || in->op == IR_CONST || kept[in->res] || costly(f, in)) continue;
    int ops = 1;
    int64_t anchor = 0;
    seen[in->res] = i + 1;
    for (int k = 0; k < in->nargs; k++) cone(ad, in->args[k], &ops, &anchor, seen, i + 1, bytes(f, in->res) / 16);
    ad->remat[in->res] = ops <= REMAT_MAX_OPS && anchor <= kept_bytes(ad, in->res);
  }
  free(kept);
  free(seen);
}

ValId ad_remat(Ad *ad, ValId v) {
  if (!ad->remat || v >= ad->nv0 || !ad->remat[v]) return v;
  if (ad->clone[v] >= 0) return ad->clone[v];
  Func *f = ad->f;
  const Inst *d = def_in(f, v, ad->fwd_end);
  Inst in = *d;   /* a copy: emitting grows f->insts */
  ValId args[3];   /* elementwise ops take at most 3 operands (where) */
  CHECK(in.nargs <= 3);
  for (int k = 0; k < in.nargs; k++) args[k] = ad_remat(ad, in.args[k]);
  ValId c = ir_emit(ad->p, f, in.op, args, in.nargs, f->values.data[v].type, in.attr,
                    ir_op_nattrs(in.op, &f->values.data[v].type, in.nargs ? ir_type(f, in.args[0]) : NULL, in.attr),
                    in.fattr, in.loc, f->values.data[v].name);
  /* the clone is the forward op: a constant to later sweeps if that was (no_grad) */
  f->insts.data[f->values.data[c].def].nograd = in.nograd;
  ad->clone[v] = c;
  return c;
}

void ad_remat_forget(Ad *ad) {
  for (int v = 0; v < ad->nv0; v++) ad->clone[v] = -1;
}

void ad_remat_free(Ad *ad) {
  free(ad->remat);
  free(ad->clone);
  ad->remat = NULL;
  ad->clone = NULL;
}
