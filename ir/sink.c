/* sink.c - a view moved down to just before its first reader.
 *
 * A view (a reshape or detach of a value in memory: no code) stands where the staging wrote
 * it, and as kernels are contiguous runs of instructions it closes the open kernel there.
 * Reverse mode writes BatchNorm's weight and bias gradients as channel sums reshaped to the
 * parameters' shapes, which only the optimizer reads, between the ops of the input gradient:
 * they split its statistics and the elementwise ops around them into five kernels where one
 * row kernel reads each array a few times and stores only the result. Moving a view later, to
 * just before the first instruction that reads it, computes the same values (it is pure, and
 * its readers stay after it), in whatever phase that reader is (no code runs for a view). One
 * that nothing reads, and a view of a parameter or input (ir_pass_hoist's), stay. Not in
 * entries with synchronised gradients (their all-reduce hooks follow kernels). */
#include <stdlib.h>
#include "ir.h"

void ir_pass_sink_views(Program *p, Func *f) {
  (void)p;
  int ni = f->insts.len, nv = f->values.len;
  if (ni < 3 || f->sync.len) return;
  int *first = malloc(sizeof(int) * (size_t)(nv + 1)), *target = malloc(sizeof(int) * (size_t)(ni + 1));
  int *order = malloc(sizeof(int) * (size_t)(ni + 1)), *stack = malloc(sizeof(int) * (size_t)(ni + 1));
  Inst *old = malloc(sizeof(Inst) * (size_t)(ni + 1));
  CHECK(first && target && order && stack && old);
  for (int v = 0; v < nv; v++) first[v] = -1;
  for (int i = 0; i < ni; i++)
    for (int k = 0; k < f->insts.data[i].nargs; k++) {
      ValId v = f->insts.data[i].args[k];
      if (first[v] < 0) first[v] = i;
    }
  /* target[i]: the instruction a view moves before (-1: it stays): its first reader (a
   * gradient's view the optimizer reads goes to the parameter's update; a view read first by a
   * view that moves goes with it, found from the end). A view of a parameter or an input stays:
   * hoist put it at the entry's start. */
  int any = 0;
  for (int i = ni - 1; i >= 0; i--) {
    const Inst *in = &f->insts.data[i];
    int u = first[in->res];
    target[i] = -1;
    if (in->op == IR_CONST || !ir_is_view(f, in->res) || u < 0) continue;
    ValId root = in->args[0];
    while (f->values.data[root].kind == V_INST && ir_is_view(f, root)) root = f->insts.data[f->values.data[root].def].args[0];
    if (f->values.data[root].kind != V_INST) continue;
    if (u <= i + 1 && !(u == i + 1 && target[u] >= 0)) continue;
    target[i] = u;
    any = 1;
  }
  if (any) {
    /* per target, the views that move before it, in their order (head/next: a list each) */
    int *head = malloc(sizeof(int) * (size_t)(ni + 1)), *next = malloc(sizeof(int) * (size_t)(ni + 1));
    int *tail = malloc(sizeof(int) * (size_t)(ni + 1));
    CHECK(head && next && tail);
    for (int i = 0; i < ni; i++) head[i] = tail[i] = next[i] = -1;
    for (int j = 0; j < ni; j++) {
      int u = target[j];
      if (u < 0) continue;
      if (tail[u] < 0) head[u] = j;
      else next[tail[u]] = j;
      tail[u] = j;
    }
    /* each instruction that stays, in order, after the views that move before it (and before
     * each of those, the ones that move before it: a view of a moved view) */
    int n = 0;
    for (int i = 0; i < ni; i++) {
      if (target[i] >= 0) continue;
      int top = 0;
      stack[top++] = i;
      while (top) {   /* a depth-first walk: an instruction is emitted after its list */
        int x = stack[top - 1];
        if (head[x] >= 0) {   /* its next view first (the list consumed as it goes) */
          int j = head[x];
          head[x] = next[j];
          stack[top++] = j;
          continue;
        }
        order[n++] = x;
        top--;
      }
    }
    CHECK(n == ni);
    for (int i = 0; i < ni; i++) old[i] = f->insts.data[i];
    for (int i = 0; i < ni; i++) {
      f->insts.data[i] = old[order[i]];
      f->values.data[old[order[i]].res].def = i;
    }
    free(head);
    free(next);
    free(tail);
  }
  free(first);
  free(target);
  free(order);
  free(stack);
  free(old);
}
