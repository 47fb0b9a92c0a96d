/* regroup.c - an elementwise run moved up to the run of the same shape whose result it reads.
 *
 * Kernels are contiguous runs of instructions, so a GEMM between two elementwise runs over the
 * same tensor splits them even when the second does not need the GEMM: reverse mode writes
 * SwiGLU's backward as one run for w3's input gradient (g * silu(w1)), then w3's two GEMMs,
 * then a run for w1's (g * w3 * silu'(w1)), which reads the first run's g * w3 and recomputes
 * sigmoid(w1). Here such a later run moves up to follow the earlier one when it reads one of
 * its results, recomputes one of its values and every other value it reads exists by then: the
 * two become one loop, the value between them is never stored, and CSE (after this pass)
 * computes the sigmoid once. Without a recomputation a run moves only across a light gap:
 * reductions, views, literals and values of at most 1/16 of its elements, never a GEMM or a
 * convolution. BatchNorm's backward is the relu's gradient, its sums and per-channel factors,
 * then the terms of the input's gradient: one loop (with ir/rowsplit.c's row sums in it). What
 * the run reads in the gap (a recomputed rsqrt of the variance) moves with it, before the
 * earlier run, unless that would part the earlier run from a GEMM or a row reduction whose
 * kernel it may join.
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

/* The first instruction of run r that is not a literal (those before it are its literals). */
static const Inst *first_op(const Func *f, const Run *r) {
  int i = r->first;
  while (i < r->last && is_lit(&f->insts.data[i])) i++;
  return &f->insts.data[i];
}

/* Whether instruction i may stand in a gap crossed without a recomputation: a literal, a view,
 * a reduction, a value nothing reads (a broadcast unbroadcast.c left for DCE) or an elementwise
 * value of at most 1/16 of the runs' elements (BatchNorm's statistics between its normalisation's
 * passes); not a GEMM or convolution (a recurrence's steps, whose time loop would no longer
 * repeat). */
static int light(const Func *f, int i, int64_t big, const unsigned char *used) {
  const Inst *in = &f->insts.data[i];
  if (is_lit(in) || ir_is_view(f, in->res) || ir_ops[in->op].kind == K_REDUCE || !used[in->res]) return 1;
  return ir_ops[in->op].kind == K_ELEM && ir_numel(&f->values.data[in->res].type) * 16 <= big;
}

/* Whether a run of type t after instruction p may be in p's kernel: a GEMM's epilogue, or a row
 * kernel's (after its reduction over the trailing axes, or a per-row value: t with its last
 * dims 1). */
static int may_join(const Func *f, const Inst *p, const Type *t) {
  if (p->op == IR_MATMUL) return 1;
  const Type *pt = &f->values.data[p->res].type;
  if ((ir_ops[p->op].kind != K_REDUCE && ir_ops[p->op].kind != K_ELEM) || pt->ndim != t->ndim || t->ndim == 0)
    return 0;
  int k = t->ndim;
  while (k > 0 && pt->dims[k - 1] == 1) k--;   /* the trailing 1s */
  if (k == t->ndim || (k == 0 && ir_ops[p->op].kind == K_ELEM)) return 0;   /* (a scalar is no row kernel's) */
  for (int j = 0; j < k; j++)
    if (pt->dims[j] != t->dims[j]) return 0;
  return 1;
}

/* Whether instructions a (of run q) and b (of run r) read one value of the runs' size made before r
 * (a forward value backward keeps: SwiGLU's sigmoid(w1) and w1, which both runs of its backward
 * read): together the runs load it once. */
static int shared_read(const Func *f, const Run *r, const Inst *a, const Inst *b, int64_t big) {
  for (int k = 0; k < a->nargs; k++) {
    const Value *v = &f->values.data[a->args[k]];
    if ((v->kind == V_INST && v->def >= r->first) || ir_numel(&v->type) != big) continue;
    for (int l = 0; l < b->nargs; l++)
      if (b->args[l] == a->args[k]) return 1;
  }
  return 0;
}

/* Whether run q may follow run r: the same phase and shape, q reads a result of r, and every
 * other value q reads is defined by r's end or in the gap between them by instructions that can
 * move before r (dep[i - r.last - 1] set for those, the gap's D: literals, views and small
 * elementwise values that read nothing of r or of the rest of the gap). Either q recomputes a
 * value of r (reverse mode's rematerialisation, which CSE then merges: SwiGLU's backward across
 * its GEMMs), or the gap is light (a value stored and loaded again saved). */
static int may_follow(const Func *f, const Run *r, const Run *q, unsigned char *dep, const unsigned char *used) {
  const Inst *a = first_op(f, r), *b = first_op(f, q);
  if (a->phase != b->phase || !same_dims(&f->values.data[a->res].type, &f->values.data[b->res].type)) return 0;
  int64_t big = ir_numel(&f->values.data[a->res].type);
  if (q->first - r->last > REGROUP_GAP || big < REGROUP_MIN_ELEMS) return 0;
  int g0 = r->last + 1, ng = q->first - g0, reads = 0, nd = 0;
  memset(dep, 0, (size_t)ng);
  for (int i = q->last; i >= g0; i--) {   /* q's operands, then D's, backwards */
    if (i < q->first && !dep[i - g0]) continue;
    const Inst *in = &f->insts.data[i];
    if (is_lit(in)) continue;
    for (int k = 0; k < in->nargs; k++) {
      const Value *v = &f->values.data[in->args[k]];
      if (v->kind != V_INST) continue;
      int d = v->def;
      if (d >= q->first && d <= q->last) continue;
      if (d >= r->first && d <= r->last) {
        if (i < q->first) return 0;   /* D must move before r */
        reads = 1;
      } else if (d >= g0 && d < q->first) {
        if (!light(f, d, big, used)) return 0;
        if (!dep[d - g0]) dep[d - g0] = 1, nd++;
      }
    }
  }
  if (!reads) return 0;
  if (nd && r->first > 0 && may_join(f, &f->insts.data[r->first - 1], &f->values.data[a->res].type))
    return 0;   /* D goes before r, not between r and the kernel it may join */
  for (int i = q->first; i <= q->last; i++)
    for (int j = r->first; j <= r->last; j++)
      if (!is_lit(&f->insts.data[i]) &&
          (ir_inst_same(f, &f->insts.data[i], &f->insts.data[j]) || shared_read(f, r, &f->insts.data[i], &f->insts.data[j], big)))
        return 1;
  for (int i = g0; i < q->first; i++)
    if (!light(f, i, big, used)) return 0;
  return 1;
}

void ir_pass_regroup(Program *p, Func *f) {
  (void)p;
  int ni = f->insts.len;
  if (ni < 3 || f->sync.len) return;
  Run *runs = malloc(sizeof(Run) * (size_t)ni);
  Inst *tmp = malloc(sizeof(Inst) * (size_t)ni);
  unsigned char *dep = malloc((size_t)ni), *used = calloc((size_t)f->values.len + 1, 1);
  CHECK(runs && tmp && dep && used);
  for (int i = 0; i < ni; i++)
    for (int k = 0; k < f->insts.data[i].nargs; k++) used[f->insts.data[i].args[k]] = 1;
  for (int k = 0; k < f->outputs.len; k++) used[f->outputs.data[k]] = 1;
  for (int k = 0; k < f->updates.len; k++) used[f->updates.data[k]] = 1;
  int from = 1;   /* the first run that may move: those before the last move's earlier run stay as they were */
  for (int moves = 0; moves < ni; moves++) {   /* one move at a time, the runs found again after each */
    int nr = find_runs(f, runs), done = 0;
    for (int qi = from; qi < nr && !done; qi++)
      for (int ri = qi - 1; ri >= 0 && !done; ri--) {
        if (runs[qi].first - runs[ri].last > REGROUP_GAP) break;
        if (runs[ri].last + 1 == runs[qi].first || !may_follow(f, &runs[ri], &runs[qi], dep, used)) continue;
        /* [r.first, q.last] becomes D, r, q, then the rest of the gap */
        int r0 = runs[ri].first, g0 = runs[ri].last + 1, q0 = runs[qi].first, q1 = runs[qi].last, n = 0;
        for (int i = g0; i < q0; i++)
          if (dep[i - g0]) tmp[n++] = f->insts.data[i];
        for (int i = r0; i < g0; i++) tmp[n++] = f->insts.data[i];
        for (int i = q0; i <= q1; i++) tmp[n++] = f->insts.data[i];
        for (int i = g0; i < q0; i++)
          if (!dep[i - g0]) tmp[n++] = f->insts.data[i];
        memcpy(&f->insts.data[r0], tmp, sizeof(Inst) * (size_t)n);
        for (int i = r0; i <= q1; i++) f->values.data[f->insts.data[i].res].def = i;
        done = 1;
        from = ri > 1 ? ri : 1;
      }
    if (!done) break;
  }
  free(runs);
  free(tmp);
  free(dep);
  free(used);
}
