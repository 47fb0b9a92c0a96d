/* hoist.c - moving small invariant elementwise values to the start of an entry.
 *
 * An elementwise instruction whose operands are all parameters (buffers),
 * literals or values hoisted before it, and whose result is small (at most
 * HOIST_MAX_BYTES), moves to the front of the function, keeping the order among
 * the moved ones (the literals they read move with them). Such a value (a
 * causal mask compared with 0) otherwise sits between the ops around it and,
 * as kernels are contiguous runs of instructions, splits them: after hoisting,
 * an attention's scaled scores, mask select and softmax are one row kernel.
 * Reading a parameter earlier is always safe: updates are written at the end,
 * or computed in place only where no later kernel reads the parameter.
 * An optimizer's per-element values (a state times its decay) stay where they
 * are: they belong to their parameter's update, which runs as one pass at the
 * end (and as one table loop for all parameters, kernels/foreach.c); its
 * scalars (Adam's bias corrections) still move. A reshape of a parameter or of
 * a moved value moves too, whatever its size: it is a view, no code, but where
 * it stands it closes the open kernel (BatchNorm's weight as [C,1,1] between
 * the normalisation's ops made eval-mode BatchNorm three passes, not one). Moved
 * instructions are the entry's own prologue (Inst.scope 0), not their module's. */
#include <stdlib.h>
#include "ir.h"

#define HOIST_MAX_BYTES 65536

void ir_pass_hoist(Program *p, Func *f) {
  (void)p;
  int ni = f->insts.len, nv = f->values.len;
  if (ni == 0) return;
  unsigned char *up = calloc((size_t)nv + 1, 1), *moved = calloc((size_t)ni + 1, 1);
  Inst *old = malloc(sizeof(Inst) * (size_t)ni);
  CHECK(up && moved && old);
  for (int v = 0; v < nv; v++) up[v] = f->values.data[v].kind == V_PARAM;
  int any = 0;
  for (int i = 0; i < ni; i++) {
    const Inst *in = &f->insts.data[i];
    if (in->op == IR_RESHAPE && up[in->args[0]]) {   /* a view of a parameter (BatchNorm's [C] as [C,1,1]) */
      up[in->res] = 1;
      moved[i] = 1;
      any = 1;
      continue;
    }
    if (in->op == IR_CONST || ir_ops[in->op].kind != K_ELEM) continue;
    const Type *t = &f->values.data[in->res].type;
    int ok = ir_numel(t) * (int64_t)ir_dtype_size(t->dtype) <= HOIST_MAX_BYTES &&
             !(in->phase == PH_OPTIMIZER && ir_numel(t) > 1);
    for (int k = 0; k < in->nargs && ok; k++) {
      const Value *a = &f->values.data[in->args[k]];
      ok = up[in->args[k]] || (a->kind == V_INST && f->insts.data[a->def].op == IR_CONST);
    }
    if (!ok) continue;
    up[in->res] = 1;
    moved[i] = 1;
    any = 1;
    for (int k = 0; k < in->nargs; k++) {   /* its literals move with it */
      const Value *a = &f->values.data[in->args[k]];
      if (a->kind == V_INST && f->insts.data[a->def].op == IR_CONST) moved[a->def] = 1;
    }
  }
  if (any) {
    for (int i = 0; i < ni; i++) old[i] = f->insts.data[i];
    int n = 0;
    for (int pass = 0; pass < 2; pass++)
      for (int i = 0; i < ni; i++)
        if (moved[i] == (pass == 0)) {
          f->insts.data[n] = old[i];
          if (pass == 0) f->insts.data[n].scope = 0;   /* the entry's prologue, no module's code */
          f->values.data[old[i].res].def = n;
          n++;
        }
  }
  free(up);
  free(moved);
  free(old);
}
