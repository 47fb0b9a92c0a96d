/* unbroadcast.c - elementwise ops read broadcast operands in place.
 *
 * Reverse mode gives the gradient of a reduction as an explicit BROADCAST of
 * the per-row (or per-column) adjoint back to the full shape (layer norm's and
 * softmax's backward: a [B,T,1] value spread over [B,T,C]). Every elementwise op
 * already broadcasts its operands numpy-style to its result, so an elementwise
 * operand that is a BROADCAST can be the BROADCAST's own operand, as long as the
 * operands still broadcast to the same result. The kernel layer then reads the
 * small value with stride 0 inside the consumer's loop; DCE removes BROADCASTs
 * left without uses, which would otherwise be a full-size copy each.
 *
 * A BROADCAST that another kind of op reads (a GEMM operand: a recurrence's zero
 * initial state) is written anyway, and its elementwise readers keep reading it: the
 * first step of a recurrence is then the same code as every later one, which reads
 * the state the step before wrote (kernels/reroll.c makes them one loop). */
#include <stdlib.h>
#include "ir.h"

void ir_pass_unbroadcast(Program *p, Func *f) {
  (void)p;
  unsigned char *kept = calloc((size_t)f->values.len + 1, 1);   /* read by an op that is not elementwise */
  CHECK(kept);
  for (int i = 0; i < f->insts.len; i++) {
    const Inst *in = &f->insts.data[i];
    if (in->dead || ir_ops[in->op].kind == K_ELEM) continue;
    for (int k = 0; k < in->nargs; k++) kept[in->args[k]] = 1;
  }
  for (int i = 0; i < f->insts.len; i++) {
    Inst *in = &f->insts.data[i];
    if (in->dead || ir_ops[in->op].kind != K_ELEM) continue;
    const Type *r = &f->values.data[in->res].type;
    for (int k = 0; k < in->nargs; k++) {
      ValId a = in->args[k];
      const Value *av = &f->values.data[a];
      if (av->kind != V_INST || f->insts.data[av->def].op != IR_BROADCAST || kept[a]) continue;
      ValId src = f->insts.data[av->def].args[0];
      /* the operands with this one replaced must still broadcast to the result */
      Type acc = {0};
      int ok = 1;
      for (int j = 0; j < in->nargs && ok; j++) {
        Type t = f->values.data[j == k ? src : in->args[j]].type;
        t.dtype = r->dtype;
        acc.dtype = r->dtype;
        ok = ir_broadcast_shapes(&acc, &t, &acc) == 0;
      }
      acc.dtype = r->dtype;
      if (ok && ir_type_eq(&acc, r)) in->args[k] = src;
    }
  }
  free(kept);
}
