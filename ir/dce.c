/* dce.c - dead code elimination.
 *
 * The function's outputs, parameter update values and kept instructions (Inst.keep) are
 * the roots. Walking
 * the instructions backwards, an instruction is live when its result is used by
 * a live instruction or is a root; the operands of a live instruction become
 * used. Everything else is marked dead and removed by ir_compact. Straight-line
 * SSA makes one backward sweep exact (uses always come after definitions). */
#include <stdlib.h>
#include <string.h>
#include "ir.h"

void ir_pass_dce(Program *p, Func *f) {
  (void)p;
  if (f->insts.len == 0) return;
  unsigned char *used = calloc((size_t)f->values.len + 1, 1);
  CHECK(used != NULL);
  for (int i = 0; i < f->outputs.len; i++) used[f->outputs.data[i]] = 1;
  for (int i = 0; i < f->updates.len; i++) used[f->updates.data[i]] = 1;
  for (int i = f->insts.len - 1; i >= 0; i--) {
    Inst *in = &f->insts.data[i];
    if (in->dead || !(used[in->res] || in->keep)) {
      in->dead = 1;
      continue;
    }
    for (int k = 0; k < in->nargs; k++) used[in->args[k]] = 1;
  }
  free(used);
  ir_compact(f);
}
