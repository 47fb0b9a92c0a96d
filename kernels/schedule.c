/* schedule.c - partitioning an entry into kernels (see kernels.h).
 *
 * One walk over the instructions in order keeps one open KN_ELEM kernel and
 * decides for each instruction whether it joins it (the fusion rule in
 * kernels.h) or closes it. Because kernels are contiguous runs, the kernel
 * index is a valid time step for the memory plan. Then the uses of every value
 * decide which kernel results are stored (outputs) and which stay scalar
 * locals (PlanHints.nostore). */
#include <string.h>
#include "kernels.h"

static const Inst *def_of(const Func *f, ValId v) { return ir_def(f, v); }

static int is_literal(const Func *f, ValId v) {
  const Inst *in = def_of(f, v);
  return in && in->op == IR_CONST;
}

static int same_shape(const Type *a, const Type *b) {
  if (a->ndim != b->ndim) return 0;
  for (int k = 0; k < a->ndim; k++)
    if (a->dims[k] != b->dims[k]) return 0;
  return 1;
}

/* A reduction over the trailing axes of an array, of more than one element per row: the
 * reduction a KN_ROW kernel is built around. Returns how many trailing axes (0: not one): the
 * last axis; or several (merged into one row: a BatchNorm's H and W, an average over a
 * feature map's positions) when there are at least KN_MERGE_MIN_ROWS rows to share out and the
 * operand is not read through a folded view. */
#define KN_MERGE_MIN_ROWS 8
static int row_reduction(const Func *f, const KnSchedule *s, const Inst *in) {
  if (in->op != IR_REDUCE_SUM && in->op != IR_REDUCE_MAX) return 0;
  const Type *a = &f->values.data[in->args[0]].type;
  if (is_literal(f, in->args[0]) || a->ndim < 1) return 0;
  uint64_t mask = (uint64_t)in->attr[0];
  int m = 0;
  int64_t n = 1, rows = 1;
  for (int k = a->ndim - 1; k >= 0 && (mask >> k & 1); k--) m++, n *= a->dims[k];
  for (int k = 0; k < a->ndim - m; k++) rows *= a->dims[k];
  if (m == 0 || mask != (((uint64_t)1 << m) - 1) << (a->ndim - m) || a->dims[a->ndim - 1] <= 1) return 0;
  if (m > 1 && (rows < KN_MERGE_MIN_ROWS || n <= 1 || kn_root(f, s, in->args[0]) != kn_root(f, NULL, in->args[0])))
    return 0;   /* (a folded view's strides are the unmerged axes') */
  return m;
}

int kn_collapse(const Kernel *kn, const Type *t, Type *out) {
  *out = *t;
  if (kn->merge < 2 || t->ndim == 0) return 0;
  int m = kn->merge < t->ndim ? kn->merge : t->ndim;
  int64_t n = 1;
  for (int k = t->ndim - m; k < t->ndim; k++) n *= t->dims[k];
  if (n != 1 && !(m == kn->merge && n == kn->space.dims[kn->space.ndim - 1])) return -1;
  out->ndim = t->ndim - m + 1;
  out->dims[out->ndim - 1] = n;
  return 0;
}

/* v's type in kn's terms (kn_collapse); 0 if it has none (the caller then refuses). */
static int kn_type(const Func *f, const Kernel *kn, ValId v, Type *out) {
  return kn_collapse(kn, &f->values.data[v].type, out) == 0;
}

/* The per-row shape of a row kernel's space: the last dim made 1. */
static Type row_shape(const Type *space) {
  Type r = *space;
  r.dims[r.ndim - 1] = 1;
  return r;
}

/* Whether elementwise instruction in (result type rt) may join kernel kn:
 * KN_ELEM: its result has the space's shape, and it reads the values of the
 * kernel at the same element; KN_ROW: its result is a full row element (the
 * space's shape) or a per-row value (row_shape), reading the kernel's values
 * of either kind. Memory operands may broadcast in any legal way. */
static int joins(const Func *f, const KnSchedule *s, const Kernel *kn, const Inst *in) {
  Type row = kn->kind == KN_ROW ? row_shape(&kn->space) : kn->space, rt, at;
  if (!kn_type(f, kn, in->res, &rt)) return 0;
  if (!same_shape(&rt, &kn->space) && !(kn->kind == KN_ROW && same_shape(&rt, &row))) return 0;
  for (int a = 0; a < in->nargs; a++) {
    const Inst *d = def_of(f, in->args[a]);
    if (d && d->op == IR_CONST) continue;
    if (!kn_type(f, kn, in->args[a], &at)) return 0;
    if (kn->merge > 1 && (!d || (int)(d - f->insts.data) < kn->first) &&
        kn_root(f, s, in->args[a]) != kn_root(f, NULL, in->args[a]))
      return 0;   /* a folded view's strides are the unmerged axes' */
    if (!d || (int)(d - f->insts.data) < kn->first) continue;   /* memory */
    if (!same_shape(&at, &rt) && !(kn->kind == KN_ROW && same_shape(&at, &row))) return 0;
  }
  return 1;
}

/* Whether open kernel kn (KN_ELEM over the operand of a reduction over its last m axes) may
 * become that reduction's KN_ROW with the axes merged: every value and operand of it in the
 * merged terms (kn_collapse), none read through a folded view. Sets *out. */
static int merges(const Func *f, const KnSchedule *s, const Kernel *kn, int m, Kernel *out) {
  *out = *kn;
  out->merge = m;
  for (int k = kn->space.ndim - m; k < kn->space.ndim; k++)
    if (k > kn->space.ndim - m) out->space.dims[kn->space.ndim - m] *= kn->space.dims[k];
  out->space.ndim = kn->space.ndim - m + 1;
  out->kind = KN_ROW;
  for (int i = kn->first; i <= kn->last; i++) {
    const Inst *in = &f->insts.data[i];
    if (in->op != IR_CONST && !joins(f, s, out, in)) return 0;
  }
  return 1;
}

int kn_epilogue_operand(const Type *t, const Type *space) {
  if (same_shape(t, space)) return 0;
  int64_t n = ir_numel(t);
  if (n == 1) return 2;
  if (t->ndim < 1 || space->ndim < 1 || t->dims[t->ndim - 1] != space->dims[space->ndim - 1] ||
      n != t->dims[t->ndim - 1] || t->ndim > space->ndim)
    return -1;
  return 1;
}

/* ---- strided views ------------------------------------------------------------ */

static int is_folded(const KnSchedule *s, ValId v) { return s && s->fold && s->fold[v]; }

/* Strides of a reshape of dims/st (old) to t (new) without copying, as a
 * view: each run of old axes that is contiguous in memory maps onto new axes
 * whose element counts match it. Returns -1 if the new shape splits across
 * such runs (the reshape needs a copy). */
static int reshape_strides(int on, const int64_t *od, const int64_t *os, const Type *t, int64_t *ns) {
  int nd = t->ndim, vd = nd - 1;
  if (on == 0) {
    for (int k = 0; k < nd; k++) ns[k] = 1;
    return 0;
  }
  int64_t base = os[on - 1], tn = 1, vn = 1;
  for (int d = on - 1; d >= 0; d--) {
    tn *= od[d];
    if (d == 0 || (od[d - 1] != 1 && os[d - 1] != tn * base)) {
      while (vd >= 0 && (vn < tn || t->dims[vd] == 1)) {
        ns[vd] = vn * base;
        vn *= t->dims[vd];
        vd--;
      }
      if (vn != tn) return -1;
      if (d > 0) base = os[d - 1], tn = 1, vn = 1;
    }
  }
  return vd == -1 ? 0 : -1;
}

int kn_layout(const Func *f, const KnSchedule *s, ValId v, KnLayout *l) {
  const Inst *d = def_of(f, v);
  const Type *t = &f->values.data[v].type;
  if (!d || !(ir_is_view(f, v) || is_folded(s, v))) {
    l->root = v, l->off = 0;
    int64_t st = 1;
    for (int k = t->ndim - 1; k >= 0; k--) l->st[k] = st, st *= t->dims[k];
    return 0;
  }
  KnLayout a;
  if (kn_layout(f, s, d->args[0], &a) < 0) return -1;
  const Type *at = &f->values.data[d->args[0]].type;
  l->root = a.root, l->off = a.off;
  switch (d->op) {
  case IR_SLICE:
    for (int k = 0; k < t->ndim; k++) l->off += d->attr[2 * k] * a.st[k], l->st[k] = a.st[k] * d->attr[2 * k + 1];
    return 0;
  case IR_PERMUTE:
    for (int k = 0; k < t->ndim; k++) l->st[k] = a.st[d->attr[k]];
    return 0;
  default:   /* RESHAPE, DETACH */
    return reshape_strides(at->ndim, at->dims, a.st, t, l->st);
  }
}

int kn_gemm_operand(const Type *t, const KnLayout *l, int trans, int *blas_t, int64_t *ld) {
  int n = t->ndim;
  if (n < 2) return -1;
  int64_t R = t->dims[n - 2], C = t->dims[n - 1], sr = l->st[n - 2], sc = l->st[n - 1];
  if (C == 1) sc = 1;                  /* a size-1 axis has any stride */
  if (R == 1) sr = sc == 1 ? C : 1;
  if (sc == 1 && sr >= (C > 1 ? C : 1)) {
    *blas_t = trans, *ld = sr;         /* row-major [R, C] with row stride sr */
    return 0;
  }
  if (sr == 1 && sc >= (R > 1 ? R : 1)) {
    *blas_t = !trans, *ld = sc;        /* its transpose is row-major [C, R] */
    return 0;
  }
  return -1;
}

/* Whether every reader of v indexes it through strides: folded views, reshapes
 * of it whose readers do, GEMM operands that BLAS can read in place, and
 * elementwise operands of the same phase (a fused kernel loads them through their
 * layout's strides and offset, kir.c: a recurrence's gate slices are read in place;
 * such an operand keeps its op out of a GEMM's epilogue, joins_epilogue).
 * Outputs and updates are copied out contiguously: not foldable. */
/* The instructions that read each value: those reading v are
 * inst[start[v]] .. inst[start[v + 1] - 1] (once per operand slot). */
typedef struct Readers {
  int *start, *inst;
} Readers;

static Readers readers_of(Arena *A, const Func *f) {
  int nv = f->values.len, ni = f->insts.len, total = 0;
  Readers r;
  r.start = arena_alloc(A, sizeof(int) * (size_t)(nv + 1));
  for (int i = 0; i < ni; i++)
    for (int a = 0; a < f->insts.data[i].nargs; a++) r.start[f->insts.data[i].args[a] + 1]++, total++;
  for (int v = 0; v < nv; v++) r.start[v + 1] += r.start[v];
  r.inst = arena_alloc(A, sizeof(int) * (size_t)(total + 1));
  int *fill = arena_alloc(A, sizeof(int) * (size_t)(nv + 1));
  for (int i = 0; i < ni; i++)
    for (int a = 0; a < f->insts.data[i].nargs; a++) {
      ValId v = f->insts.data[i].args[a];
      r.inst[r.start[v] + fill[v]++] = i;
    }
  return r;
}

static int readers_strided(const Func *f, const KnSchedule *s, const Readers *rd, ValId v, int depth) {
  if (depth > 64) return 0;
  for (int o = 0; o < f->outputs.len; o++)
    if (f->outputs.data[o] == v) return 0;
  for (int o = 0; o < f->updates.len; o++)
    if (f->updates.data[o] == v) return 0;
  KnLayout l;
  if (kn_layout(f, s, v, &l) < 0) return 0;
  for (int r = rd->start[v]; r < rd->start[v + 1]; r++) {
    if (r > rd->start[v] && rd->inst[r] == rd->inst[r - 1]) continue;   /* an instruction reading v twice: once */
    const Inst *in = &f->insts.data[rd->inst[r]];
    for (int a = 0; a < in->nargs; a++) {
      if (in->args[a] != v) continue;
      if (is_folded(s, in->res)) continue;   /* checked as a folded value itself */
      if (ir_is_view(f, in->res)) {
        if (!readers_strided(f, s, rd, in->res, depth + 1)) return 0;
        continue;
      }
      /* (a backward or optimizer reader of a forward slice would keep its whole root alive
       * until then: the slice is copied, and only the copy saved) */
      const Inst *dv = def_of(f, v);
      if ((ir_ops[in->op].kind == K_ELEM || in->op == IR_CONCAT) && (!dv || dv->phase == in->phase)) continue;
      int64_t ast[3];   /* fused attention reads its operands through strides too (attention.c) */
      if ((in->op == IR_ATTENTION || in->op == IR_ATTENTION_BWD) &&
          kn_attention_operand(&f->values.data[v].type, &l, ast) == 0)
        continue;
      int bt;
      int64_t ld;
      if (in->op != IR_MATMUL || a > 1 || kn_gemm_operand(&f->values.data[v].type, &l, (int)in->attr[a], &bt, &ld) < 0)
        return 0;
    }
  }
  return 1;
}

/* Folds SLICE and PERMUTE results into their readers where all of them index
 * through strides (readers_strided), to a fixed point: un-folding one value
 * can make its operand's readers non-strided. */
static void fold_views(Arena *A, const Func *f, KnSchedule *s, int fuse) {
  int nv = f->values.len;
  s->fold = arena_alloc(A, (size_t)(nv ? nv : 1));
  if (!fuse) return;
  for (int i = 0; i < f->insts.len; i++) {
    const Inst *in = &f->insts.data[i];
    if ((in->op == IR_SLICE || in->op == IR_PERMUTE) && !is_literal(f, in->args[0]) &&
        ir_numel(&f->values.data[in->res].type) > 0)
      s->fold[in->res] = 1;
  }
  Readers rd = readers_of(A, f);
  for (int changed = 1; changed;) {
    changed = 0;
    for (ValId v = 0; v < nv; v++)
      if (s->fold[v] && !readers_strided(f, s, &rd, v, 0)) s->fold[v] = 0, changed = 1;
  }
}

ValId kn_root(const Func *f, const KnSchedule *s, ValId v) {
  while (ir_is_view(f, v) || is_folded(s, v)) v = def_of(f, v)->args[0];
  return v;
}

/* Whether v is read through a folded slice or permute (not contiguously from its root). */
static int strided(const Func *f, const KnSchedule *s, ValId v) { return kn_root(f, s, v) != kn_root(f, NULL, v); }

int kn_single_gemm(const Func *f, const KnSchedule *s, const Inst *in) {
  if (in->op != IR_MATMUL) return 0;
  const Type *a = &f->values.data[in->args[0]].type, *b = &f->values.data[in->args[1]].type;
  const Type *r = &f->values.data[in->res].type;
  if ((r->dtype != DT_F32 && r->dtype != DT_F64) || r->ndim < 2 || ir_numel(r) == 0) return 0;
  for (int k = 0; k < 2; k++)
    if (kn_root(f, s, in->args[k]) != kn_root(f, NULL, in->args[k])) return 0;
  if (r->ndim == 2) return 1;
  int64_t ba = 1, bb = 1, br = 1;
  for (int k = 0; k < a->ndim - 2; k++) ba *= a->dims[k];
  for (int k = 0; k < b->ndim - 2; k++) bb *= b->dims[k];
  for (int k = 0; k < r->ndim - 2; k++) br *= r->dims[k];
  return !in->attr[0] && bb == 1 && ba == br;
}

static int reads_value(const Func *f, int first, int last, ValId v) {
  for (int i = first; i <= last; i++) {
    const Inst *x = &f->insts.data[i];
    for (int a = 0; a < x->nargs; a++)
      if (x->args[a] == v) return 1;
  }
  return 0;
}

Kernel kn_epilogue(const Program *p, const Func *f, const Kernel *kn, int *nops) {
  Kernel ep = *kn;
  ValId g = f->insts.data[kn->first].res;
  ep.kind = KN_ELEM;
  ep.first = kn->first + 1;
  memset(&ep.inputs, 0, sizeof ep.inputs);
  memset(&ep.outputs, 0, sizeof ep.outputs);
  for (int j = 0; j < kn->inputs.len; j++)
    if (reads_value(f, ep.first, ep.last, kn->inputs.data[j])) vec_push(p->arena, &ep.inputs, kn->inputs.data[j]);
  if (reads_value(f, ep.first, ep.last, g)) vec_push(p->arena, &ep.inputs, g);
  for (int j = 0; j < kn->outputs.len; j++)
    if (kn->outputs.data[j] != g) vec_push(p->arena, &ep.outputs, kn->outputs.data[j]);
  *nops = 0;
  for (int i = ep.first; i <= ep.last; i++) *nops += f->insts.data[i].op != IR_CONST;
  return ep;
}

/* Whether elementwise instruction in may join KN_GEMM kernel kn as its
 * epilogue: joins(), it reads the GEMM's result or an epilogue value (not an
 * unrelated op that happens to have the same shape) or is optimizer code, and every memory operand
 * tiles (kn_epilogue_operand). */
static int joins_epilogue(const Func *f, const KnSchedule *s, const Kernel *kn, const Inst *in) {
  if (!joins(f, s, kn, in)) return 0;
  int inner = 0;
  for (int a = 0; a < in->nargs; a++) {
    const Inst *d = def_of(f, in->args[a]);
    if (d && d->op == IR_CONST) continue;
    if (strided(f, s, in->args[a])) return 0;   /* the epilogue reads memory contiguously */
    if (d && (int)(d - f->insts.data) >= kn->first) {
      inner = 1;
      continue;
    }
    if (kn_epilogue_operand(&f->values.data[in->args[a]].type, &kn->space) < 0) return 0;
  }
  /* an optimizer's per-element value that precedes the use of the gradient (a state times its
   * decay, ir/hoist.c leaves it in place) belongs to the update that follows the GEMM */
  return inner || in->phase == PH_OPTIMIZER;
}

/* Parameter updates computed in place (PlanHints.update_into): update i
 * (parameter P := value v) where v is a stored result of a KN_ELEM kernel k (or
 * a KN_GEMM's epilogue whose GEMM does not read P) of
 * P's shape and dtype, every read of P (or a view of it) is in a kernel before
 * k or in k at v's own element (a same-shaped operand of the elementwise loop,
 * which loads all its inputs of an element before storing any output), and no
 * output or other update value is P or a view of it (those are copied out
 * after the last kernel). An optimizer step then writes parameter and state
 * in its own loop: one pass over parameter, gradient and state. */
static int *updates_in_place(Arena *A, const Func *f, const KnSchedule *s) {
  int nv = f->values.len, ni = f->insts.len;
  int *into = arena_alloc(A, sizeof(int) * (size_t)(nv ? nv : 1));
  for (int v = 0; v < nv; v++) into[v] = -1;
  for (int u = 0; u < f->updates.len; u++) {
    ValId v = f->updates.data[u], pv = -1;
    int P = f->update_params.data[u];
    const Inst *d = def_of(f, v);
    if (!d || d->op == IR_CONST || ir_is_view(f, v) || s->hints.nostore[v] || into[v] >= 0) continue;
    int k = s->kernel_of[d - f->insts.data];
    const Kernel *kn = &s->kernels.data[k];
    for (int w = 0; w < nv && pv < 0; w++)
      if (f->values.data[w].kind == V_PARAM && f->values.data[w].index == P) pv = w;
    const Type *vt = &f->values.data[v].type;
    if ((kn->kind != KN_ELEM && kn->kind != KN_GEMM) || pv < 0 || !same_shape(vt, &f->values.data[pv].type) ||
        vt->dtype != f->values.data[pv].type.dtype)
      continue;
    int ok = 1;
    for (int i = 0; i < ni && ok; i++) {
      const Inst *in = &f->insts.data[i];
      if (ir_is_view(f, in->res) || is_folded(s, in->res)) continue;   /* a view reads nothing; its readers do */
      for (int a = 0; a < in->nargs && ok; a++) {
        ValId x = in->args[a];
        if (kn_root(f, s, x) != pv) continue;
        if (s->kernel_of[i] > k) ok = 0;
        else if (s->kernel_of[i] == k)   /* (a KN_GEMM's GEMM reads its operands whole) */
          ok = same_shape(&f->values.data[x].type, &kn->space) && !strided(f, s, x) &&
               !(kn->kind == KN_GEMM && i == kn->first);
      }
    }
    for (int o = 0; o < f->outputs.len && ok; o++) ok = kn_root(f, s, f->outputs.data[o]) != pv;
    for (int o = 0; o < f->updates.len && ok; o++) ok = o == u || kn_root(f, s, f->updates.data[o]) != pv;
    if (ok) into[v] = P;
  }
  return into;
}

/* An optimizer's update of parameters of one shape is one chain per parameter, which the
 * walk fuses into one kernel (a horizontal fusion of independent loops). Each KN_ELEM
 * kernel of optimizer code whose instructions fall into independent chains (connected
 * through the kernel's own values), each a contiguous run, is split into one kernel per
 * chain: every parameter's update is then the same kernel, on its own arrays, which
 * kernels/foreach.c writes as one loop over a table of the parameters. Literals stay in
 * the kernel of the range they sit in. */
static int uf_find(int *up, int i) {
  while (up[i] != i) i = up[i] = up[up[i]];
  return i;
}

static void split_updates(Arena *A, const Func *f, KnSchedule *s) {
  int ni = f->insts.len, any = 0;
  int *up = arena_alloc(A, sizeof(int) * (size_t)(ni ? ni : 1));
  int *hi = arena_alloc(A, sizeof(int) * (size_t)(ni ? ni : 1));   /* per chain root: its last instruction */
  unsigned char *cut = arena_alloc(A, (size_t)(ni ? ni : 1));      /* a kernel starts at this instruction */
  for (int k = 0; k < s->kernels.len; k++) {
    const Kernel *kn = &s->kernels.data[k];
    if (kn->kind != KN_ELEM || kn->first == kn->last) continue;
    int opt = 1;
    for (int i = kn->first; i <= kn->last && opt; i++)
      opt = f->insts.data[i].op == IR_CONST || f->insts.data[i].phase == PH_OPTIMIZER;
    if (!opt) continue;
    for (int i = kn->first; i <= kn->last; i++) up[i] = i;
    for (int i = kn->first; i <= kn->last; i++) {
      const Inst *in = &f->insts.data[i];
      if (in->op == IR_CONST) continue;
      for (int a = 0; a < in->nargs; a++) {
        const Inst *d = def_of(f, in->args[a]);
        int di = d ? (int)(d - f->insts.data) : -1;
        if (di < kn->first || di > kn->last || d->op == IR_CONST) continue;
        up[uf_find(up, di)] = uf_find(up, i);
      }
    }
    for (int i = kn->first; i <= kn->last; i++) hi[uf_find(up, i)] = i;
    /* a cut before instruction i when every chain met before i ends before it */
    int reach = -1, seen = 0;
    for (int i = kn->first; i <= kn->last; i++) {
      if (f->insts.data[i].op == IR_CONST) continue;
      if (seen && reach < i) cut[i] = 1, any = 1;
      int h = hi[uf_find(up, i)];
      if (h > reach) reach = h;
      seen = 1;
    }
  }
  if (!any) return;
  int nold = s->kernels.len;
  Kernel *old = s->kernels.data;
  memset(&s->kernels, 0, sizeof s->kernels);
  for (int k = 0; k < nold; k++) {
    Kernel kn = old[k];
    int start = kn.first;
    for (int i = kn.first; i <= kn.last + 1; i++) {
      if (i <= kn.last && !cut[i]) continue;
      Kernel part = kn;
      part.first = start;
      part.last = i <= kn.last ? i - 1 : kn.last;
      for (int j = part.first; j <= part.last; j++) s->kernel_of[j] = s->kernels.len;
      vec_push(A, &s->kernels, part);
      start = i;
    }
  }
}

KnSchedule *kn_schedule(const Program *p, const Func *f, int fuse) {
  Arena *A = p->arena;
  int ni = f->insts.len, nv = f->values.len;
  KnSchedule *s = arena_alloc(A, sizeof *s);
  s->kernel_of = arena_alloc(A, sizeof(int) * (size_t)(ni ? ni : 1));
  s->phase = arena_alloc(A, sizeof(int) * (size_t)(ni ? ni : 1));
  s->rowbuf = arena_alloc(A, (size_t)(nv ? nv : 1));
  unsigned char *nostore = arena_alloc(A, (size_t)(nv ? nv : 1));
  fold_views(A, f, s, fuse);
  /* Distributed builds: a gradient all-reduced while backward runs (Func.sync)
   * ends its kernel, it and the views down to its storage, so that it is stored
   * and every reader comes in a later kernel (after the wait for its bucket). */
  unsigned char *barrier = NULL;
  if (f->sync.len) {
    barrier = arena_alloc(A, (size_t)(nv ? nv : 1));
    for (int k = 0; k < f->sync.len; k++)
      for (ValId v = f->sync.data[k]; def_of(f, v); v = def_of(f, v)->args[0]) {
        barrier[v] = 1;
        if (!ir_is_view(f, v)) break;
      }
  }
  int open = -1;   /* the KN_ELEM, KN_ROW or KN_GEMM kernel instructions may still join, or -1 */
  for (int i = 0; i < ni; i++) {
    const Inst *in = &f->insts.data[i];
    const Type *rt = &f->values.data[in->res].type;
    if (in->op == IR_CONST && s->kernels.len) {   /* a literal: no code, no storage */
      s->kernel_of[i] = s->kernels.len - 1;
      s->kernels.data[s->kernels.len - 1].last = i;
      continue;
    }
    int k = s->kernels.len, m = 0;
    if (fuse && open >= 0) {
      Kernel *kn = &s->kernels.data[open];
      int ok = 0;
      if (kn->kind == KN_GEMM) {
        ok = ir_ops[in->op].kind == K_ELEM && joins_epilogue(f, s, kn, in);
      } else if ((m = row_reduction(f, s, in)) != 0) {
        Type at;
        if (m < 2 && kn->merge < 2 && same_shape(&f->values.data[in->args[0]].type, &kn->space)) {
          kn->kind = KN_ROW;   /* an elementwise kernel over the rows becomes the prologue */
          ok = 1;
        } else if (m > 1 && kn->kind == KN_ROW && kn->merge == m && kn_type(f, kn, in->args[0], &at) &&
                   same_shape(&at, &kn->space)) {
          ok = 1;   /* another reduction over the merged rows */
        } else if (m > 1 && kn->kind == KN_ELEM && same_shape(&f->values.data[in->args[0]].type, &kn->space)) {
          Kernel merged;
          if ((ok = merges(f, s, kn, m, &merged)) != 0) *kn = merged;
        }
      } else if (ir_ops[in->op].kind == K_ELEM) {
        ok = joins(f, s, kn, in);
      }
      if (ok) {
        s->kernel_of[i] = open;
        kn->last = i;
        if (barrier && barrier[in->res]) open = -1;
        continue;
      }
    }
    /* a new kernel */
    Kernel kn;
    memset(&kn, 0, sizeof kn);
    kn.first = kn.last = i;
    kn.space = *rt;
    if (in->op == IR_CONST || ir_is_view(f, in->res) || s->fold[in->res]) kn.kind = KN_VIEW;
    else if (fuse && (m = row_reduction(f, s, in)) != 0) {
      kn.kind = KN_ROW, kn.space = f->values.data[in->args[0]].type;
      if (m > 1) merges(f, s, &(Kernel){.space = kn.space, .first = i, .last = i - 1}, m, &kn);
      kn.first = kn.last = i;
    }
    else if (fuse && kn_single_gemm(f, s, in)) kn.kind = KN_GEMM;
    else kn.kind = ir_ops[in->op].kind == K_ELEM ? KN_ELEM : KN_OP;
    vec_push(A, &s->kernels, kn);
    s->kernel_of[i] = k;
    /* a view closes the open kernel (kernels are contiguous) */
    open = (kn.kind == KN_ELEM || kn.kind == KN_ROW || kn.kind == KN_GEMM) && !(barrier && barrier[in->res]) ? k : -1;
  }
  if (fuse) split_updates(A, f, s);
  /* Which results leave their kernel. */
  /* The fused instructions: those of KN_ELEM and KN_ROW kernels and a KN_GEMM's
   * epilogue (its GEMM writes memory). */
  unsigned char *fusedi = arena_alloc(A, (size_t)(ni ? ni : 1));
  for (int i = 0; i < ni; i++) {
    const Kernel *kn = &s->kernels.data[s->kernel_of[i]];
    fusedi[i] = kn->kind == KN_ELEM || kn->kind == KN_ROW || (kn->kind == KN_GEMM && i != kn->first);
  }
  unsigned char *used_out = arena_alloc(A, (size_t)(nv ? nv : 1));
  for (int i = 0; i < ni; i++) {
    const Inst *in = &f->insts.data[i];
    if (s->kernels.data[s->kernel_of[i]].kind == KN_GEMM && i == s->kernels.data[s->kernel_of[i]].first)
      used_out[in->res] = 1;
    for (int a = 0; a < in->nargs; a++) {
      const Inst *d = def_of(f, in->args[a]);
      if (!d) continue;
      int di = (int)(d - f->insts.data);
      if (s->kernel_of[di] != s->kernel_of[i] || ir_is_view(f, in->res) || s->fold[in->res] || !fusedi[i])
        used_out[in->args[a]] = 1;
    }
  }
  for (int i = 0; i < f->outputs.len; i++) used_out[f->outputs.data[i]] = 1;
  for (int i = 0; i < f->updates.len; i++) used_out[f->updates.data[i]] = 1;
  for (int i = 0; i < ni; i++) used_out[f->insts.data[i].res] |= f->insts.data[i].keep != 0;
  /* Row kernels: the loop over the row each instruction runs in (phase).
   * A reduction runs in its operand's loop and its value exists from the next
   * loop on; a row element runs in the first loop where all its operands
   * exist; a per-row value is computed before the loop where it first exists
   * (`avail`, kept in phase). A row element read in a later loop than its own
   * is kept in a per-row array (rowbuf), or, over KN_MAX_ROWBUF bytes, stored. */
  int *avail = arena_alloc(A, sizeof(int) * (size_t)(nv ? nv : 1));
  for (int k = 0; k < s->kernels.len; k++) {
    Kernel *kn = &s->kernels.data[k];
    if (kn->kind != KN_ROW) continue;
    for (int i = kn->first; i <= kn->last; i++) {
      const Inst *in = &f->insts.data[i];
      if (in->op == IR_CONST) continue;
      Type rt;
      int full = kn_type(f, kn, in->res, &rt) && same_shape(&rt, &kn->space), ph = 0;
      for (int a = 0; a < in->nargs; a++) {
        const Inst *d = def_of(f, in->args[a]);
        if (!d || d->op == IR_CONST || s->kernel_of[d - f->insts.data] != k) continue;
        int q = avail[in->args[a]];
        if (q > ph) ph = q;
      }
      s->phase[i] = ph;
      if (row_reduction(f, s, in)) {
        avail[in->res] = ph + 1;
        if (ph + 1 > kn->nloops) kn->nloops = ph + 1;
      } else {
        avail[in->res] = ph;
        if (full && ph + 1 > kn->nloops) kn->nloops = ph + 1;
      }
    }
    int64_t rowbytes = kn->space.dims[kn->space.ndim - 1] * 8;
    for (int i = kn->first; i <= kn->last; i++) {
      const Inst *in = &f->insts.data[i];
      for (int a = 0; a < in->nargs; a++) {
        ValId v = in->args[a];
        const Inst *d = def_of(f, v);
        if (!d || d->op == IR_CONST || s->kernel_of[d - f->insts.data] != k) continue;
        Type vt;
        if (!kn_type(f, kn, v, &vt) || !same_shape(&vt, &kn->space) || s->phase[d - f->insts.data] == s->phase[i])
          continue;
        if (used_out[v]) continue;   /* read back from its array */
        if (rowbytes <= KN_MAX_ROWBUF) s->rowbuf[v] = 1;
        else used_out[v] = 1;
      }
    }
  }
  int *input_of = arena_alloc(A, sizeof(int) * (size_t)(nv ? nv : 1));   /* 1 + the kernel v was made an input of */
  for (int i = 0; i < ni; i++) {
    const Inst *in = &f->insts.data[i];
    Kernel *kn = &s->kernels.data[s->kernel_of[i]];
    int fused = fusedi[i];
    if (in->op == IR_CONST) continue;
    if (fused && !used_out[in->res]) nostore[in->res] = 1;
    else if (kn->kind != KN_VIEW) vec_push(A, &kn->outputs, in->res);
    for (int a = 0; a < in->nargs; a++) {
      ValId v = in->args[a];
      const Inst *d = def_of(f, v);
      if (is_literal(f, v) || (d && s->kernel_of[d - f->insts.data] == s->kernel_of[i] && fused)) continue;
      /* (a KN_GEMM epilogue reads its GEMM's result from memory, but within the kernel: no input) */
      if (input_of[v] != s->kernel_of[i] + 1) vec_push(A, &kn->inputs, v);
      input_of[v] = s->kernel_of[i] + 1;
    }
  }
  /* In place (KN_ELEM): each stored result may take over the bytes of one input
   * of the same shape and element size (read only at the result's own
   * element); the plan does it when that input dies in this kernel. KN_GEMM:
   * one epilogue result may take over the GEMM's result (each thread reads and
   * writes only its own block); no other input, which another thread's GEMM
   * block may still be reading. */
  ValId *inplace = arena_alloc(A, sizeof(ValId) * (size_t)(nv ? nv : 1));
  unsigned char *viewed = arena_alloc(A, (size_t)(nv ? nv : 1));   /* a kernel's roots read through folded views */
  for (int v = 0; v < nv; v++) inplace[v] = -1;
  for (int k = 0; k < s->kernels.len && fuse; k++) {
    Kernel *kn = &s->kernels.data[k];
    if (kn->kind == KN_GEMM) {
      ValId g = f->insts.data[kn->first].res;
      const Type *gt = &f->values.data[g].type;
      for (int o = 0; o < kn->outputs.len; o++) {
        ValId r = kn->outputs.data[o];
        const Type *rt = &f->values.data[r].type;
        if (r != g && same_shape(rt, gt) && ir_dtype_size(rt->dtype) == ir_dtype_size(gt->dtype)) {
          inplace[r] = g;
          break;
        }
      }
      continue;
    }
    if (kn->kind != KN_ELEM) continue;
    /* claimed[j]: input j is taken by an earlier output; the search starts after
     * the prefix of claimed inputs, so a kernel of many same-shaped results and
     * inputs (a split, then elementwise ops) is matched in linear time */
    int nin = kn->inputs.len, start = 0;
    unsigned char *claimed = arena_alloc(A, (size_t)nin + 1);
    for (int q = 0; q < nin; q++)
      if (strided(f, s, kn->inputs.data[q])) viewed[kn_root(f, s, kn->inputs.data[q])] = 1;
    for (int o = 0; o < kn->outputs.len; o++) {
      ValId r = kn->outputs.data[o];
      const Type *rt = &f->values.data[r].type;
      while (start < nin && claimed[start]) start++;
      for (int j = start; j < nin; j++) {
        ValId v = kn->inputs.data[j];
        const Type *vt = &f->values.data[v].type;
        const Inst *d = def_of(f, v);
        /* (not one also read through a folded view: at other elements) */
        if (!claimed[j] && d && d->op != IR_CONST && !ir_is_view(f, v) && !s->fold[v] && !viewed[v] &&
            same_shape(vt, rt) && ir_dtype_size(vt->dtype) == ir_dtype_size(rt->dtype)) {
          inplace[r] = v;
          claimed[j] = 1;
          break;
        }
      }
    }
    for (int q = 0; q < nin; q++) viewed[kn_root(f, s, kn->inputs.data[q])] = 0;
  }
  for (int k = 0; k < s->kernels.len; k++) s->ncode += s->kernels.data[k].kind != KN_VIEW;
  s->hints.step = s->kernel_of;
  s->hints.nostore = nostore;
  s->hints.inplace = inplace;
  s->hints.update_into = updates_in_place(A, f, s);
  s->hints.strided = s->fold;
  kn_reroll(p, f, s);   /* repeated steps: families for the plan, runs for the renderers */
  return s;
}

static void print_val(FILE *out, const Func *f, ValId v) {
  fprintf(out, " %%%s.%d", f->values.data[v].name, v);
}

void kn_print(FILE *out, const Program *p, const Func *f, const KnSchedule *s) {
  char tb[256];
  static const char *const kind[] = {"elementwise", "row", "op", "view", "gemm with epilogue"};
  fprintf(out, "func %s: %d instructions, %d kernels (%d with code)\n", f->name, f->insts.len, s->kernels.len,
          s->ncode);
  for (int r = 0; r < s->runs.len; r++) {
    const KnRun *run = &s->runs.data[r];
    fprintf(out, "  repeated steps: kernels %d..%d, %d steps of %d kernels\n", run->first,
            run->first + run->count * run->len - 1, run->count, run->len);
  }
  int *sc = arena_alloc(p->arena, sizeof *sc * (size_t)(s->kernels.len + 1));
  int *ph = arena_alloc(p->arena, sizeof *ph * (size_t)(s->kernels.len + 1));
  kn_kernel_scopes(p, f, s, NULL, sc, ph);
  for (int k = 0; k < s->kernels.len; k++) {
    const Kernel *kn = &s->kernels.data[k];
    Type rt;
    fprintf(out, "  kernel %d: %s over %s", k, kind[kn->kind], ir_type_str(&kn->space, tb, sizeof tb));
    if (kn->kind == KN_ROW)
      fprintf(out, ", rows of %lld, %d loop%s per row", (long long)kn->space.dims[kn->space.ndim - 1], kn->nloops,
              kn->nloops == 1 ? "" : "s");
    if (sc[k] > 0) fprintf(out, ", in %s", p->scopes.data[sc[k]].path);   /* the user module it belongs to */
    fprintf(out, "\n");
    fprintf(out, "    inputs:");
    for (int j = 0; j < kn->inputs.len; j++) print_val(out, f, kn->inputs.data[j]);
    fprintf(out, "\n    outputs:");
    for (int j = 0; j < kn->outputs.len; j++) print_val(out, f, kn->outputs.data[j]);
    fprintf(out, "\n");
    for (int i = kn->first; i <= kn->last; i++) {
      const Inst *in = &f->insts.data[i];
      if (in->op == IR_CONST) continue;
      fprintf(out, "    %%%s.%d = %s%s : %s", f->values.data[in->res].name, in->res, ir_ops[in->op].name,
              s->fold[in->res] ? " (strided, read in place by its readers)"
              : kn_internal(s, in->res) ? s->rowbuf[in->res] ? " (row array)" : " (local)" : "",
              ir_type_str(&f->values.data[in->res].type, tb, sizeof tb));
      if (kn->kind == KN_ROW)
        fprintf(out, "  [%s %d]", (kn_type(f, kn, in->res, &rt) && same_shape(&rt, &kn->space)) || row_reduction(f, s, in)
                                      ? "loop" : "per row, before loop", s->phase[i]);
      if (in->loc.line > 0) fprintf(out, "    ; line %d", in->loc.line);
      fprintf(out, "\n");
    }
  }
}
