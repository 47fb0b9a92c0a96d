/* scope.c - the user module each kernel's code belongs to (kernels.h).
 *
 * Instructions carry the user module whose forward staged them (Inst.scope, Program.scopes).
 * A kernel belongs to the innermost module that holds all its instructions: `--emit kernels`
 * names it, `--profile` sums the kernels by it, and the C target writes an entry's kernels grouped by the user module whose forward
 * staged their instructions (Inst.scope, Program.scopes): each module call's kernels
 * are a static function named after the entry, the module's path and the phase
 * (train_step_h_0_attn_forward, train_step_h_0_attn_backward), nested as the modules
 * are and called in order from the enclosing module's function or from the entry
 * (emit_c.c). A kernel that holds instructions of several modules (a residual add
 * fused after a block's last layer) goes in the innermost module that holds them
 * all; every kernel of a time loop (kernels/reroll.c) in the one that holds the whole
 * loop, so that a loop never crosses a function. */
#include <string.h>
#include "kernels.h"

/* The Program.scopes index of path's first n bytes, or -1 (0 for ""). */
static int scope_of_prefix(const Program *p, const char *path, size_t n) {
  if (n == 0) return 0;
  for (int i = 1; i < p->scopes.len; i++)
    if (strlen(p->scopes.data[i].path) == n && strncmp(p->scopes.data[i].path, path, n) == 0) return i;
  return -1;
}

/* The innermost scope that holds both a and b: their paths' longest common prefix of
 * whole components, or the nearest enclosing one that is a module call. */
static int common_scope(const Program *p, int a, int b) {
  if (a == b) return a;
  if (a <= 0 || b <= 0) return 0;
  const char *x = p->scopes.data[a].path, *y = p->scopes.data[b].path;
  size_t n = 0, end = 0;
  for (; x[n] && x[n] == y[n]; n++)
    if (x[n] == '.') end = n;
  if (!x[n] && (!y[n] || y[n] == '.')) end = n;   /* one is an ancestor of the other */
  else if (!y[n] && x[n] == '.') end = n;
  for (;;) {
    int s = scope_of_prefix(p, x, end);
    if (s >= 0) return s;
    while (end > 0 && x[end - 1] != '.') end--;
    end = end > 0 ? end - 1 : 0;
  }
}

int kn_scope_chain(const Program *p, int sc, int *chain, int cap) {
  if (sc <= 0) return 0;
  const char *x = p->scopes.data[sc].path;
  int n = 0;
  for (size_t i = 0;; i++)
    if (x[i] == '.' || !x[i]) {
      int s = scope_of_prefix(p, x, i);
      if (s > 0 && n < cap) chain[n++] = s;
      if (!x[i]) break;
    }
  return n;
}

void kn_kernel_scopes(const Program *p, const Func *f, const KnSchedule *s, const KnLoops *loops, int *scope, int *phase) {
  for (int k = 0; k < s->kernels.len; k++) {
    const Kernel *kn = &s->kernels.data[k];
    scope[k] = -1;   /* no code: it stays where the kernel before it is */
    phase[k] = PH_FORWARD;
    if (kn->kind == KN_VIEW) continue;
    for (int i = kn->first; i <= kn->last; i++) {
      const Inst *in = &f->insts.data[i];
      if (in->op == IR_CONST) continue;
      if (scope[k] < 0) phase[k] = in->phase;
      scope[k] = scope[k] < 0 ? in->scope : common_scope(p, scope[k], in->scope);
    }
  }
  for (int li = 0; loops && li < loops->loops.len; li++) {   /* a time loop: all of it in one function */
    const KnLoop *lp = &loops->loops.data[li];
    int end = lp->first + lp->count * lp->len, sc = -1, ph = PH_FORWARD;
    for (int k = lp->first; k < end; k++)
      if (scope[k] >= 0) {
        if (sc < 0) ph = phase[k];
        sc = sc < 0 ? scope[k] : common_scope(p, sc, scope[k]);
      }
    for (int k = lp->first; k < end; k++)
      if (scope[k] >= 0) scope[k] = sc, phase[k] = ph;
  }
}
