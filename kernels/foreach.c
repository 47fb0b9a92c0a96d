/* foreach.c - an optimizer's per-parameter updates as one loop over a table.
 *
 * optimizer.step() stages the same update rule once per parameter; the schedule
 * makes each parameter's chain one KN_ELEM kernel (schedule.c splits chains of
 * same-shaped parameters that the walk fused into one loop, hoist.c leaves their
 * per-element ops in place), so the step ends in a run of kernels that differ only
 * in their arrays and element counts. Here such a run is found on the kernels and
 * the memory plan: the same instructions (ops, result types but shapes, attributes,
 * literals, what is stored and what stays a local), operands in the same places
 * (a value of the kernel by its position, a literal by its value, an array from
 * memory by its slot), every array a whole contiguous array of the kernel's
 * elements, or one element, in the arena. A renderer writes the run as one loop
 * over a static table of the arrays' offsets and counts, running one kernel's loop
 * per row: each element sees the same operations in the same order as before.
 * Slots whose arrays are the same in every kernel (a bias correction) are not
 * columns; slots at the same address in every kernel (a state read and its update
 * written in place) share one. */
#include <string.h>
#include "kernels.h"

static int same_shape(const Type *a, const Type *b) {
  if (a->ndim != b->ndim) return 0;
  for (int k = 0; k < a->ndim; k++)
    if (a->dims[k] != b->dims[k]) return 0;
  return 1;
}

static const Inst *literal(const Func *f, ValId v) {
  const Value *val = &f->values.data[v];
  if (val->kind != V_INST) return NULL;
  const Inst *in = &f->insts.data[val->def];
  return in->op == IR_CONST ? in : NULL;
}

static int inside(const Kernel *kn, const Func *f, ValId v) {
  const Value *val = &f->values.data[v];
  return val->kind == V_INST && val->def >= kn->first && val->def <= kn->last && !literal(f, v);
}

static int stored(const Kernel *kn, ValId v) {
  for (int j = 0; j < kn->outputs.len; j++)
    if (kn->outputs.data[j] == v) return 1;
  return 0;
}

/* Whether v, read or stored by kn, is a whole contiguous array of the space's shape (or
 * one element) at the start of its storage in the arena. */
static int plain_array(const Func *f, const KnSchedule *s, const FuncPlan *fp, const Kernel *kn, ValId v) {
  const Type *t = &f->values.data[v].type;
  int base;
  if (kn_value_addr(f, s, fp, v, &base) < 0 || base != LOC_ARENA) return 0;
  KnLayout l;
  if (kn_layout(f, s, v, &l) < 0 || l.off) return 0;
  if (ir_numel(t) == 1) return 1;
  if (!same_shape(t, &kn->space)) return 0;
  int64_t st = 1;
  for (int k = t->ndim - 1; k >= 0; k--) {
    if (t->dims[k] != 1 && l.st[k] != st) return 0;
    st *= t->dims[k];
  }
  return 1;
}

/* Whether kernel kn may be in a run: a KN_ELEM kernel of optimizer code over more than one
 * element whose arrays are all plain_array. */
static int eligible(const Func *f, const KnSchedule *s, const FuncPlan *fp, const Kernel *kn) {
  if (kn->kind != KN_ELEM || ir_numel(&kn->space) < 2) return 0;
  for (int i = kn->first; i <= kn->last; i++) {
    const Inst *in = &f->insts.data[i];
    if (in->op == IR_CONST) continue;
    if (in->phase != PH_OPTIMIZER || ir_ops[in->op].kind != K_ELEM) return 0;
    for (int a = 0; a < in->nargs; a++)
      if (!inside(kn, f, in->args[a]) && !literal(f, in->args[a]) && !plain_array(f, s, fp, kn, in->args[a]))
        return 0;
    if (stored(kn, in->res) && !plain_array(f, s, fp, kn, in->res)) return 0;
  }
  return 1;
}

/* The slots of kn in order (the operands from memory and their roots, the results stored);
 * their number. out may be NULL. */
static int slots(const Func *f, const KnSchedule *s, const Kernel *kn, ValId *out) {
  int n = 0;
  for (int i = kn->first; i <= kn->last; i++) {
    const Inst *in = &f->insts.data[i];
    if (in->op == IR_CONST) continue;
    for (int a = 0; a < in->nargs; a++) {
      ValId v = in->args[a];
      if (inside(kn, f, v) || literal(f, v)) continue;
      if (out) out[n] = v, out[n + 1] = kn_root(f, s, v);
      n += 2;
    }
    if (stored(kn, in->res)) {
      if (out) out[n] = in->res;
      n++;
    }
  }
  return n;
}

/* Whether b computes what a does: the same instructions in the same order, operands in the
 * same places, the same values stored and kept local. */
/* The position of instruction i among kn's instructions that are not literals. */
static int op_pos(const Func *f, const Kernel *kn, int i) {
  int n = 0;
  for (int j = kn->first; j < i; j++) n += f->insts.data[j].op != IR_CONST;
  return n;
}

/* The n-th instruction of kn that is not a literal, or -1. */
static int nth_op(const Func *f, const Kernel *kn, int n) {
  for (int j = kn->first; j <= kn->last; j++)
    if (f->insts.data[j].op != IR_CONST && n-- == 0) return j;
  return -1;
}

/* Whether b computes what a does: the same instructions (literals aside: the first
 * parameter's kernel holds the literals the others share) in the same order, operands in
 * the same places, the same values stored and kept local. */
static int same_kernel(const Func *f, const KnSchedule *s, const Kernel *a, const Kernel *b) {
  int nops = op_pos(f, a, a->last + 1);
  if (nops != op_pos(f, b, b->last + 1) || a->outputs.len != b->outputs.len) return 0;
  int64_t na = ir_numel(&a->space), nb = ir_numel(&b->space);
  for (int i = 0; i < nops; i++) {
    const Inst *x = &f->insts.data[nth_op(f, a, i)], *y = &f->insts.data[nth_op(f, b, i)];
    const Type *tx = &f->values.data[x->res].type, *ty = &f->values.data[y->res].type;
    if (x->op != y->op || x->nargs != y->nargs || tx->dtype != ty->dtype) return 0;
    if ((ir_numel(tx) == na) != (ir_numel(ty) == nb) || (ir_numel(tx) == 1) != (ir_numel(ty) == 1)) return 0;
    if (memcmp(x->attr, y->attr, sizeof x->attr)) return 0;
    if (stored(a, x->res) != stored(b, y->res) || s->hints.nostore[x->res] != s->hints.nostore[y->res]) return 0;
    for (int k = 0; k < x->nargs; k++) {
      ValId u = x->args[k], w = y->args[k];
      const Type *tu = &f->values.data[u].type, *tw = &f->values.data[w].type;
      if (tu->dtype != tw->dtype || inside(a, f, u) != inside(b, f, w)) return 0;
      if (inside(a, f, u)) {
        if (op_pos(f, a, f->values.data[u].def) != op_pos(f, b, f->values.data[w].def)) return 0;
        continue;
      }
      const Inst *lu = literal(f, u), *lw = literal(f, w);
      if (!lu != !lw) return 0;
      if (lu) {
        if (memcmp(&lu->fattr, &lw->fattr, sizeof lu->fattr) || !same_shape(tu, tw)) return 0;
        continue;
      }
      if ((ir_numel(tu) == 1) != (ir_numel(tw) == 1)) return 0;
    }
  }
  return 1;
}

/* The columns of run fe (its slots filled): slots with one value in every kernel are shared;
 * others are columns, one per address sequence (or value sequence). */
static void columns(Arena *A, const Func *f, const KnSchedule *s, const FuncPlan *fp, KnForeach *fe) {
  int ns = fe->nslot, nk = fe->count;
  int64_t *addr = arena_alloc(A, sizeof *addr * (size_t)(nk * ns));
  for (int j = 0; j < nk; j++)
    for (int q = 0; q < ns; q++) {
      int base;
      addr[j * ns + q] = kn_value_addr(f, s, fp, fe->slot[j * ns + q], &base);
    }
  fe->slot_col = arena_alloc(A, sizeof(int) * (size_t)ns);
  int *first = arena_alloc(A, sizeof(int) * (size_t)ns);   /* per column: its first slot */
  fe->ncol = 0;
  for (int q = 0; q < ns; q++) {
    int shared = 1;
    for (int j = 1; j < nk && shared; j++) shared = fe->slot[j * ns + q] == fe->slot[q];
    fe->slot_col[q] = -1;
    if (shared) continue;
    DType dt = f->values.data[fe->slot[q]].type.dtype;
    for (int c = 0; c < fe->ncol && fe->slot_col[q] < 0; c++) {
      int r = first[c], same = f->values.data[fe->slot[r]].type.dtype == dt;
      for (int j = 0; j < nk && same; j++)
        same = fe->slot[j * ns + q] == fe->slot[j * ns + r] || addr[j * ns + q] == addr[j * ns + r];
      if (same) fe->slot_col[q] = c;
    }
    if (fe->slot_col[q] < 0) first[fe->ncol] = q, fe->slot_col[q] = fe->ncol++;
  }
  int nc = fe->ncol;
  fe->off = arena_alloc(A, sizeof(int64_t) * (size_t)(nk * nc + 1));
  fe->val = arena_alloc(A, sizeof(ValId) * (size_t)(nk * nc + 1));
  fe->store = arena_alloc(A, (size_t)nc + 1);
  for (int c = 0; c < nc; c++)
    for (int j = 0; j < nk; j++) {
      fe->off[j * nc + c] = addr[j * ns + first[c]];
      fe->val[j * nc + c] = fe->slot[j * ns + first[c]];
    }
  const Kernel *k0 = &s->kernels.data[fe->first];
  for (int q = 0; q < ns; q++)
    if (fe->slot_col[q] >= 0 && stored(k0, fe->slot[q])) fe->store[fe->slot_col[q]] = 1;
}

KnForeachs *kn_foreach(Arena *A, const Func *f, const KnSchedule *s, const FuncPlan *fp) {
  KnForeachs *r = arena_alloc(A, sizeof *r);
  int n = s->kernels.len;
  for (int k = 0; k < n;) {
    const Kernel *a = &s->kernels.data[k];
    int m = 1;
    if (eligible(f, s, fp, a))
      while (k + m < n && eligible(f, s, fp, &s->kernels.data[k + m]) && same_kernel(f, s, a, &s->kernels.data[k + m]))
        m++;
    if (m < 2) {
      k++;
      continue;
    }
    KnForeach fe;
    memset(&fe, 0, sizeof fe);
    fe.first = k;
    fe.count = m;
    fe.n = arena_alloc(A, sizeof(int64_t) * (size_t)m);
    fe.nslot = slots(f, s, a, NULL);
    fe.slot = arena_alloc(A, sizeof(ValId) * (size_t)(m * fe.nslot + 1));
    for (int j = 0; j < m; j++) {
      const Kernel *kn = &s->kernels.data[k + j];
      fe.n[j] = ir_numel(&kn->space);
      if (fe.n[j] > fe.n[fe.big]) fe.big = j;
      CHECK(slots(f, s, kn, fe.slot + j * fe.nslot) == fe.nslot);
    }
    columns(A, f, s, fp, &fe);
    vec_push(A, &r->runs, fe);
    k += m;
  }
  return r;
}
