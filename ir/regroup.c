/* regroup.c - an elementwise run moved up to the run of the same shape whose result it reads.
 *
 * Kernels are contiguous runs of instructions, so a GEMM between two elementwise runs over the
 * same tensor splits them even when the second does not need the GEMM: reverse mode writes
 * SwiGLU's backward as one run for w3's input gradient (g * silu(w1)), then w3's two GEMMs,
 * then a run for w1's (g * w3 * silu'(w1)), which reads the first run's g * w3 and recomputes
 * sigmoid(w1). Here such a later run moves up to follow the earlier one when it reads one of
 * its results, recomputes one of its values and every other value it reads exists by then: the
 * two become one loop, the value between them is never stored, and CSE (after this pass)
 * computes the sigmoid once. Only such moves are made: one that saves a recomputation, not
 * just a store and a load.
 *
 * A run: consecutive elementwise instructions (literals among and just before them) of one
 * phase whose results have one shape. Only a whole run moves, with its literals, so no value of
 * it is stored for want of a neighbour; to the latest earlier run of its shape and phase it
 * reads from, and at
 * most REGROUP_GAP instructions back (a recomputation that could move anywhere stays near its
 * uses), over at least REGROUP_MIN_ELEMS elements: a loop whose arrays stay in the cache gains
 * little, and a recurrence's steps are small (the first step of a GRU's backward regrouped where
 * the others did not, which left it out of the time loop). Moving a pure instruction earlier,
 * after its operands, computes the same values.
 * Not in entries with synchronised gradients (their all-reduce hooks follow kernels). */
#include <stdlib.h>
#include <string.h>
#include "ir.h"

#define REGROUP_GAP 32
#define REGROUP_MIN_ELEMS 65536

typedef struct Run {
  int first, last;   /* instruction indices (in the current order) */
} Run;

static int same_dims(const Type *a, const Type *b) {
  if (a->ndim != b->ndim) return 0;
  for (int k = 0; k < a->ndim; k++)
    if (a->dims[k] != b->dims[k]) return 0;
  return 1;
}

static int is_lit(const Inst *in) { return in->op == IR_CONST; }

static int is_elem(const Func *f, const Inst *in) {
  return !is_lit(in) && ir_ops[in->op].kind == K_ELEM && !ir_is_view(f, in->res);
}

/* The runs of f in order (first..last hold elementwise instructions and literals). */
static int find_runs(const Func *f, Run *runs) {
  int n = 0, ni = f->insts.len, end = -1;   /* (end: the last run's last instruction) */
  for (int i = 0; i < ni;) {
    const Inst *in = &f->insts.data[i];
    if (!is_elem(f, in)) {
      i++;
      continue;
    }
    const Type *t = &f->values.data[in->res].type;
    int last = i, j = i + 1;
    for (; j < ni; j++) {
      const Inst *x = &f->insts.data[j];
      if (is_lit(x)) continue;
      if (!is_elem(f, x) || x->phase != in->phase || !same_dims(&f->values.data[x->res].type, t)) break;
      last = j;
    }
    int first = i;   /* with the literals just before it */
    while (first - 1 > end && is_lit(&f->insts.data[first - 1])) first--;
    runs[n++] = (Run){first, last};
    i = end = last;
    i++;
  }
  return n;
}

/* Whether run q may follow run r: the same phase and shape, q reads a result of r and
 * recomputes a value of r (reverse mode's rematerialisation, which CSE then merges), and every
 * other value q reads is defined by r's end (its literals move with it). */
static int may_follow(const Func *f, const Run *r, const Run *q) {
  const Inst *a = &f->insts.data[r->first], *b = &f->insts.data[q->first];
  if (a->phase != b->phase || !same_dims(&f->values.data[a->res].type, &f->values.data[b->res].type)) return 0;
  if (q->first - r->last > REGROUP_GAP || ir_numel(&f->values.data[a->res].type) < REGROUP_MIN_ELEMS) return 0;
  int reads = 0;
  for (int i = q->first; i <= q->last; i++) {
    const Inst *in = &f->insts.data[i];
    if (is_lit(in)) continue;
    for (int k = 0; k < in->nargs; k++) {
      const Value *v = &f->values.data[in->args[k]];
      if (v->kind != V_INST) continue;
      int d = v->def;
      if (d >= q->first && d <= q->last) continue;
      if (is_lit(&f->insts.data[d]) && d > r->last) return 0;   /* a literal of the gap: not moved */
      if (d > r->last) return 0;
      if (d >= r->first) reads = 1;
    }
  }
  for (int i = q->first; i <= q->last && reads; i++)
    for (int j = r->first; j <= r->last; j++)
      if (!is_lit(&f->insts.data[i]) && ir_inst_same(f, &f->insts.data[i], &f->insts.data[j])) return 1;
  return 0;
}

void ir_pass_regroup(Program *p, Func *f) {
  (void)p;
  int ni = f->insts.len;
  if (ni < 3 || f->sync.len) return;
  Run *runs = malloc(sizeof(Run) * (size_t)ni);
  Inst *tmp = malloc(sizeof(Inst) * (size_t)ni);
  CHECK(runs && tmp);
  for (int moves = 0; moves < ni; moves++) {   /* one move at a time, the runs found again after each */
    int n = find_runs(f, runs), done = 0;
    for (int qi = 1; qi < n && !done; qi++)
      for (int ri = qi - 1; ri >= 0 && !done; ri--) {
        if (runs[qi].first - runs[ri].last > REGROUP_GAP) break;
        if (runs[ri].last + 1 == runs[qi].first || !may_follow(f, &runs[ri], &runs[qi])) continue;
        /* [r.last + 1, q.first) (the gap) and q swap places */
        int g0 = runs[ri].last + 1, q0 = runs[qi].first, q1 = runs[qi].last, nq = q1 - q0 + 1, ng = q0 - g0;
        memcpy(tmp, &f->insts.data[q0], sizeof(Inst) * (size_t)nq);
        memcpy(tmp + nq, &f->insts.data[g0], sizeof(Inst) * (size_t)ng);
        memcpy(&f->insts.data[g0], tmp, sizeof(Inst) * (size_t)(nq + ng));
        for (int i = g0; i <= q1; i++) f->values.data[f->insts.data[i].res].def = i;
        done = 1;
      }
    if (!done) break;
  }
  free(runs);
  free(tmp);
}
