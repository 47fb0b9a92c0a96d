/* lowstore.c - autocast's saved activations stored as bf16 / f16.
 *
 * Autocast (and a .bfloat16() / .half() model) computes in float32 and rounds each
 * low-precision result (round_bf16 / round_f16, ops.def): the rounded value is a float
 * buffer holding a bf16 number. A training step keeps many of them from forward to
 * backward (a linear layer's input for its weight gradient, gelu's input), and those
 * are most of its peak memory. This pass stores each such value a second time, in the
 * 16-bit storage dtype (a CAST, which rounds as round_bf16 does, and so is exact here),
 * and every backward instruction that read the float value reads a cast of the 16-bit
 * copy back to float32, placed just before it: a fused elementwise kernel loads the
 * 16-bit copy itself, a GEMM or other call reads a short-lived float32 copy. The float
 * value then lives only as long as forward uses it (often not at all, when its forward
 * uses are in the kernel that computes it); the values are the same bits, so nothing
 * a program computes changes.
 *
 * The same holds for a float32 read of 16-bit storage (a .bfloat16() model's weight, a cast
 * of its parameter, made once per entry by lowering): a later phase's instruction reads a
 * cast of the parameter of its own, just before it, so the float32 copies of the weights do
 * not live from forward to backward and the optimizer (which read them for the update).
 *
 * Only float32 values that an instruction of a later phase reads (Inst.phase: backward,
 * optimizer) are stored so, whatever their size (a threshold would stage a batch chosen at
 * run time differently at different sizes, compiler/batch.c); a value only forward reads is
 * short-lived already. Program.low_store turns it on (the C and CUDA targets). */
#include <stdlib.h>
#include <string.h>
#include "ir.h"

DType ir_low_store_dtype(const Program *p, const Func *f, ValId v) {
  const Inst *d = ir_def(f, v);
  const Type *t = &f->values.data[v].type;
  if (!p->low_store || !d || t->dtype != DT_F32) return DT_F32;
  return d->op == IR_ROUND_BF16 ? DT_BF16 : d->op == IR_ROUND_F16 ? DT_F16 : DT_F32;
}

void ir_pass_low_store(Program *p, Func *f) {
  if (!p->low_store || f->insts.len == 0) return;
  const int ni = f->insts.len, nv = f->values.len;
  DType *low = calloc((size_t)nv + 1, sizeof *low);   /* per value: the storage dtype it gets, or DT_F32 (0) */
  ValId *copy = calloc((size_t)nv + 1, sizeof *copy);  /* its 16-bit copy, once made (a cast's: its operand) */
  CHECK(low && copy);
  int any = 0;
  for (int i = 0; i < ni; i++) {
    const Inst *in = &f->insts.data[i];
    for (int k = 0; k < in->nargs && in->phase != PH_FORWARD; k++) {
      const ValId a = in->args[k];
      const Inst *d = ir_def(f, a);
      if (!d || d->phase != PH_FORWARD) continue;
      const DType dt = ir_low_store_dtype(p, f, a);
      if (dt != DT_F32) low[a] = dt, any = 1;
      if (d->op != IR_CAST || f->values.data[a].type.dtype != DT_F32) continue;
      const DType from = f->values.data[d->args[0]].type.dtype;
      if (ir_dtype_is_low(from)) low[a] = from, copy[a] = d->args[0], any = 1;   /* 16-bit storage: read it again */
    }
  }
  if (!any) {
    free(low);
    free(copy);
    return;
  }
  Inst *old = ir_insts_take(f);
  const int phase = f->phase, scope = f->scope, grad = f->grad_mode;
  for (int i = 0; i < ni; i++) {
    Inst in = old[i];
    if (in.phase != PH_FORWARD) {   /* reads of stored values: a cast back to float32 each, just before */
      ValId *args = NULL;
      for (int k = 0; k < in.nargs; k++) {
        const ValId a = in.args[k];
        if (!low[a]) continue;
        if (!args) {
          args = arena_alloc(p->arena, sizeof(ValId) * (size_t)in.nargs);
          memcpy(args, in.args, sizeof(ValId) * (size_t)in.nargs);
        }
        ValId done = 0;
        for (int j = 0; j < k && !done; j++)   /* (an operand read twice: one cast) */
          if (in.args[j] == a) done = args[j];
        if (!done) {
          f->phase = in.phase, f->scope = in.scope, f->grad_mode = in.nograd;
          Type t = f->values.data[a].type;
          done = ir_emit(p, f, IR_CAST, &copy[a], 1, t, NULL, 0, 0, in.loc, f->values.data[a].name);
        }
        args[k] = done;
      }
      if (args) in.args = args;
    }
    ir_inst_push(p, f, in);
    if (low[in.res] && in.op != IR_CAST) {   /* the 16-bit copy, made from the same float value the rounding reads */
      f->phase = in.phase, f->scope = in.scope, f->grad_mode = in.nograd;
      Type t = f->values.data[in.res].type;
      t.dtype = low[in.res];
      copy[in.res] = ir_emit(p, f, IR_CAST, &in.args[0], 1, t, NULL, 0, 0, in.loc, f->values.data[in.res].name);
    }
  }
  f->phase = phase, f->scope = scope, f->grad_mode = grad;
  free(old);
  free(low);
  free(copy);
  ir_pass_dce(p, f);   /* a rounding now only backward read */
}
