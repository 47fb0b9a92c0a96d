/* reroll.c - finding time loops in an unrolled schedule (see kernels.h).
 *
 * Staging unrolls Python loops (a recurrence over the sequence in nn.GRU, a
 * hand-written `for t in range(T): h = cell(x[:, t], h)`, and the backward sweep
 * through them), so an entry holds the same few kernels once per step. Here
 * each kernel gets a structural signature (its kind, and per instruction the op,
 * attributes but a slice's starts, result type, and each operand as a literal's value, an earlier
 * instruction of the same kernel, a parameter (which one: the steps of a loop share their
 * weights, so layers with weights of their own stay unrolled), or another value from
 * memory of some type), and a
 * greedy scan in kernel order finds runs of consecutive steps whose kernels'
 * signatures repeat with a period of `len` kernels, at least KN_REROLL_MIN times.
 *
 * The values a run's kernels compute form families (the value of the i-th
 * instruction of every step), which PlanHints.family hands to the memory plan:
 * it lays a family out at one stride, so step t's value sits at base + t*stride.
 *
 * Once planned, kn_reroll_loops decides which steps of each run are one loop, on the
 * kernels and the plan (never on generated text): steps t0..t1 when every value step t
 * names (operands, the roots of folded views, results) sits at step t0's address plus
 * (t - t0) times a constant, weights are shared, and every instruction with code has step
 * t0's attributes and literals (a folded slice's start is its view's address instead). A
 * renderer that writes loops (codegen_c/emit_c.c) then writes step t0's kernels once inside
 * `for (t ...)`, each moved value named `(name + t * d)` (KnLoops.move); a run it keeps
 * unrolled costs nothing but its layout. For such renderers kn_reroll_pad first pads the
 * steps just outside a run (a backward's first and last, whose code differs) to its step.
 *
 * Deterministic: signatures hash the IR only (no addresses), the scan is in order. */
#include <stdlib.h>
#include <string.h>
#include "kernels.h"

/* Longest step (in kernels) looked for. */
#define REROLL_MAX_LEN 1024

static uint64_t mix(uint64_t h, uint64_t x) {
  h ^= x + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
  return h * 0x100000001b3ULL;
}

static uint64_t mix_type(uint64_t h, const Type *t) {
  h = mix(h, (uint64_t)t->dtype);
  h = mix(h, (uint64_t)t->ndim);
  for (int k = 0; k < t->ndim; k++) h = mix(h, (uint64_t)t->dims[k]);
  return h;
}

static uint64_t signature(const Func *f, const KnSchedule *s, const Kernel *kn) {
  uint64_t h = mix(0xcbf29ce484222325ULL, (uint64_t)kn->kind);
  h = mix(h, (uint64_t)(kn->last - kn->first));
  h = mix(h, (uint64_t)kn->nloops);
  h = mix_type(h, &kn->space);
  for (int i = kn->first; i <= kn->last; i++) {
    const Inst *in = &f->insts.data[i];
    const Value *rv = &f->values.data[in->res];
    h = mix(h, (uint64_t)in->op);
    h = mix_type(h, &rv->type);
    int na = ir_nattrs(f, in);
    for (int k = 0; k < na && k < IR_MAX_ATTRS; k++)   /* a slice's starts move with the step */
      if (!((in->op == IR_SLICE || in->op == IR_UNSLICE) && k % 2 == 0)) h = mix(h, (uint64_t)in->attr[k]);
    if (in->op == IR_CONST) {
      uint64_t bits;
      memcpy(&bits, &in->fattr, sizeof bits);
      h = mix(h, bits);
    }
    h = mix(h, (uint64_t)s->phase[i]);
    h = mix(h, (uint64_t)(s->hints.nostore[in->res] | s->rowbuf[in->res] << 1 | s->fold[in->res] << 2));
    h = mix(h, (uint64_t)in->nargs);
    for (int a = 0; a < in->nargs; a++) {
      ValId v = in->args[a];
      const Value *av = &f->values.data[v];
      int d = av->kind == V_INST ? av->def : -1;
      if (d >= kn->first && d <= kn->last) {   /* this kernel's: by position */
        h = mix(h, 1);
        h = mix(h, (uint64_t)(d - kn->first));
      } else if (d >= 0 && f->insts.data[d].op == IR_CONST) {   /* a literal: by value */
        uint64_t bits;
        memcpy(&bits, &f->insts.data[d].fattr, sizeof bits);
        h = mix(mix(h, 2), bits);
        h = mix_type(h, &av->type);
      } else {   /* from memory; a parameter by its identity: a loop's body shares its weights */
        ValId r = kn_root(f, s, v);
        h = mix(mix(h, 3), (uint64_t)av->kind);
        h = mix_type(h, &av->type);
        if (f->values.data[r].kind == V_PARAM) h = mix(mix(h, 4), (uint64_t)f->values.data[r].index);
      }
    }
  }
  return h;
}

void kn_reroll(const Program *p, const Func *f, KnSchedule *s) {
  Arena *A = p->arena;
  int n = s->kernels.len, nv = f->values.len;
  s->runs.len = 0;
  s->hints.family = NULL;
  s->hints.family_ix = NULL;
  if (n < 2 * KN_REROLL_MIN) return;
  uint64_t *sig = arena_alloc(A, sizeof *sig * (size_t)n);
  for (int k = 0; k < n; k++) sig[k] = signature(f, s, &s->kernels.data[k]);
  for (int a = 0; a < n;) {
    int best_len = 0, best_count = 0;
    for (int L = 1; L <= REROLL_MAX_LEN && a + KN_REROLL_MIN * L <= n; L++) {
      int m = 0;   /* kernels from a on that equal the one L later */
      while (a + m + L < n && sig[a + m] == sig[a + m + L]) m++;
      int count = 1 + m / L;
      if (count >= KN_REROLL_MIN && count * L > best_count * best_len) best_len = L, best_count = count;
    }
    int code = 0;   /* a step of views only (a q/k/v split read in place) is no loop */
    for (int j = 0; j < best_len && !code; j++) code = s->kernels.data[a + j].kind != KN_VIEW;
    if (!best_len || !code) {
      a += best_len ? best_len * best_count : 1;
      continue;
    }
    vec_push(A, &s->runs, ((KnRun){a, best_len, best_count}));
    a += best_len * best_count;
  }
  if (!s->runs.len) return;
  int *fam = arena_alloc(A, sizeof(int) * (size_t)(nv ? nv : 1));
  int *fix = arena_alloc(A, sizeof(int) * (size_t)(nv ? nv : 1));
  for (int v = 0; v < nv; v++) fam[v] = -1;
  int nfam = 0;
  for (int r = 0; r < s->runs.len; r++) {
    const KnRun *run = &s->runs.data[r];
    int width = 0;   /* instructions per step */
    for (int t = 0; t < run->count; t++) {
      int q = 0;
      for (int j = 0; j < run->len; j++) {
        const Kernel *kn = &s->kernels.data[run->first + t * run->len + j];
        for (int i = kn->first; i <= kn->last; i++, q++) {
          ValId v = f->insts.data[i].res;
          if (f->insts.data[i].op == IR_CONST || s->hints.nostore[v]) continue;
          fam[v] = nfam + q;
          fix[v] = t + 1;
        }
      }
      width = q;
    }
    /* The values step 0 reads where every later step reads the step before's (an
     * initial state computed before the run) join that family as its step -1. */
    const Kernel *k0 = &s->kernels.data[run->first], *k1 = &s->kernels.data[run->first + run->len];
    int n0 = s->kernels.data[run->first + run->len - 1].last + 1 - k0->first;
    for (int q = 0; q < n0; q++) {
      const Inst *a = &f->insts.data[k0->first + q], *b = &f->insts.data[k1->first + q];
      for (int j = 0; j < a->nargs && j < b->nargs; j++) {
        ValId w = kn_root(f, s, a->args[j]), u = kn_root(f, s, b->args[j]);   /* views read their roots */
        if (fam[w] < 0 && fam[u] >= nfam && fix[u] == 1 && f->values.data[w].kind == V_INST &&
            f->values.data[w].def < k0->first && !s->hints.nostore[w]) {
          fam[w] = fam[u];
          fix[w] = 0;
        }
      }
    }
    nfam += width;
  }
  s->hints.family = fam;
  s->hints.family_ix = fix;
}

/* ---- loops: which steps of a run one step's code runs, on the memory plan ------------------ */

int64_t kn_value_addr(const Func *f, const KnSchedule *s, const FuncPlan *fp, ValId v, int *base) {
  const Loc *lc = &fp->loc[v];
  *base = lc->base;
  if (lc->base == LOC_LOCAL || lc->base == LOC_NONE) return 0;
  KnLayout l;
  if (kn_layout(f, s, v, &l) < 0) return -1;
  return lc->offset + l.off * (int64_t)ir_dtype_size(f->values.data[v].type.dtype);
}

/* The values step t of run names, in order: per instruction of its kernels its operands
 * (and, for an operand read through a folded view, that view's root), then its result. */
static int named(const Func *f, const KnSchedule *s, const KnRun *run, int t, ValId *out) {
  int n = 0;
  for (int j = 0; j < run->len; j++) {
    const Kernel *kn = &s->kernels.data[run->first + t * run->len + j];
    for (int i = kn->first; i <= kn->last; i++) {
      const Inst *in = &f->insts.data[i];
      for (int a = 0; a < in->nargs; a++) {
        out[n++] = in->args[a];
        out[n++] = kn_root(f, s, in->args[a]);
      }
      out[n++] = in->res;
    }
  }
  return n;
}

static int is_param(const Func *f, ValId v) { return f->values.data[v].kind == V_PARAM; }

/* Whether instruction in reads an operand through a folded view at the view's own name plus
 * its offset (a fused kernel's load, kir.c; a strided GEMM, codegen_c) rather than at its
 * root's name plus an offset (fused attention): the root's offset must then stay the same
 * over the steps. */
static int reads_by_view(const Inst *in) { return ir_ops[in->op].kind == K_ELEM || in->op == IR_MATMUL; }

KnLoops *kn_reroll_loops(Arena *A, const Func *f, const KnSchedule *s, const FuncPlan *fp) {
  KnLoops *L = arena_alloc(A, sizeof *L);
  int nv = f->values.len;
  L->move = arena_alloc(A, sizeof(int64_t) * (size_t)(nv ? nv : 1));
  for (int r = 0; r < s->runs.len; r++) {
    const KnRun *run = &s->runs.data[r];
    int cap = 0;   /* named values per step */
    for (int j = 0; j < run->len; j++) {
      const Kernel *kn = &s->kernels.data[run->first + j];
      for (int i = kn->first; i <= kn->last; i++) cap += 1 + 2 * f->insts.data[i].nargs;
    }
    ValId *v0 = arena_alloc(A, sizeof(ValId) * (size_t)(cap + 1)), *vt = arena_alloc(A, sizeof(ValId) * (size_t)(cap + 1));
    int64_t *d = arena_alloc(A, sizeof(int64_t) * (size_t)(cap + 1));
    for (int t0 = 0; t0 < run->count;) {
      int n = named(f, s, run, t0, v0), t1 = t0 + 1;
      for (; t1 < run->count; t1++) {   /* step t1 is step t0's code with addresses moved by (t1 - t0) d */
        if (named(f, s, run, t1, vt) != n) break;
        int ok = 1;
        for (int q = 0; q < n && ok; q++) {
          ValId a = v0[q], b = vt[q];
          if (a == b) {
            if (t1 == t0 + 1) d[q] = 0;
            ok = d[q] == 0;
            continue;
          }
          const Value *va = &f->values.data[a], *vb = &f->values.data[b];
          if (is_param(f, a) || is_param(f, b) || va->type.dtype != vb->type.dtype) {
            ok = 0;   /* a loop's steps share their weights */
            break;
          }
          int ba, bb;
          int64_t xa = kn_value_addr(f, s, fp, a, &ba), xb = kn_value_addr(f, s, fp, b, &bb);
          if (ba != bb || xa < 0 || xb < 0) {
            ok = 0;
            break;
          }
          if (ba == LOC_LOCAL || ba == LOC_NONE) continue;   /* a kernel's local, or a literal */
          int64_t es = (int64_t)ir_dtype_size(va->type.dtype), m = xb - xa;
          if (m % es || (m / es) % (t1 - t0)) {
            ok = 0;
            break;
          }
          if (t1 == t0 + 1) d[q] = m / es;
          ok = m / es == d[q] * (t1 - t0);
        }
        /* what else the code prints: attributes of instructions with code, the root offsets of
         * folded views read at their root's name */
        for (int j = 0; j < run->len && ok; j++) {
          const Kernel *ka = &s->kernels.data[run->first + t0 * run->len + j];
          const Kernel *kb = &s->kernels.data[run->first + t1 * run->len + j];
          for (int i = 0; i <= ka->last - ka->first && ok; i++) {
            const Inst *x = &f->insts.data[ka->first + i], *y = &f->insts.data[kb->first + i];
            int view = ir_is_view(f, x->res) || (s->fold && s->fold[x->res]);
            if (!view && (memcmp(x->attr, y->attr, sizeof x->attr) || memcmp(&x->fattr, &y->fattr, sizeof x->fattr)))
              ok = 0;
            for (int a = 0; a < x->nargs && ok && !view && !reads_by_view(x); a++) {
              KnLayout la, lb;
              if (kn_root(f, s, x->args[a]) == kn_root(f, NULL, x->args[a])) continue;
              ok = kn_layout(f, s, x->args[a], &la) == 0 && kn_layout(f, s, y->args[a], &lb) == 0 && la.off == lb.off;
            }
          }
        }
        if (!ok) break;
      }
      if (t1 - t0 < KN_REROLL_MIN) {
        t0++;
        continue;
      }
      /* the values step t0 names move by d per iteration; one value named at two places moves alike */
      int clash = 0;
      for (int q = 0; q < n; q++) L->move[v0[q]] = INT64_MIN;
      for (int q = 0; q < n && !clash; q++) {
        if (L->move[v0[q]] != INT64_MIN && L->move[v0[q]] != d[q]) clash = 1;
        L->move[v0[q]] = d[q];
      }
      for (int q = 0; q < n; q++)
        if (L->move[v0[q]] == INT64_MIN || clash) L->move[v0[q]] = 0;
      if (clash) {
        t0++;
        continue;
      }
      vec_push(A, &L->loops, ((KnLoop){run->first + t0 * run->len, run->len, t1 - t0, t0, run->count}));
      t0 = t1;
    }
  }
  return L;
}

/* ---- padding a run's boundary steps: kn_reroll_pad ------------------------------------------
 *
 * A recurrence's backward sweep leaves its steps at the ends different from the others: the
 * first has no incoming recurrent gradient and starts the weight gradients' sums (the step's
 * `add(carried, x)` are missing: x alone is the sum so far), and the last drops the gradient
 * of the initial state, which nothing reads (the instructions computing it are gone). Both
 * are the loop body's code with a carried value zero or a result unread, so they are padded
 * back to it: the missing adds become `add(zeros, x)` (zeros: a broadcast 0 written before the
 * step, which the run's family then takes as its step -1), the missing dead instructions are
 * computed again and kept (Inst.keep). Each pad keeps every value (x + 0 = x; -0 + 0 = +0 aside)
 * and only adds a few small ops; it is kept when the new schedule leaves fewer kernels with
 * code outside runs, else undone. The alignment is structural (same_inst, operands at the
 * same places of the two steps), on the instructions, never on generated text. */

enum { PAD_UNSEEN = -1, PAD_SKIP = -2 };

static int def_ix(const Func *f, ValId v) { return f->values.data[v].kind == V_INST ? f->values.data[v].def : -1; }

static int is_const_inst(const Func *f, int d) { return d >= 0 && f->insts.data[d].op == IR_CONST; }

/* Whether instructions a and b do the same: op, result type, attributes (a slice's starts
 * aside: they move with the step) and literal. */
static int same_inst(const Func *f, const Inst *a, const Inst *b) {
  if (a->op != b->op || a->nargs != b->nargs) return 0;
  if (!ir_type_eq(&f->values.data[a->res].type, &f->values.data[b->res].type)) return 0;
  int na = ir_nattrs(f, a);
  for (int k = 0; k < na && k < IR_MAX_ATTRS; k++)
    if (!((a->op == IR_SLICE || a->op == IR_UNSLICE) && k % 2 == 0) && a->attr[k] != b->attr[k]) return 0;
  return a->op != IR_CONST || !memcmp(&a->fattr, &b->fattr, sizeof a->fattr);
}

/* Whether the boundary step may read pv where the body step reads bv, a value from outside
 * the body step (and not of the step before it): the same parameter or literal, or a value
 * of the same kind and type defined outside the instructions [lo, hi). */
static int same_outside(const Func *f, ValId bv, ValId pv, int lo, int hi) {
  const Value *a = &f->values.data[bv], *b = &f->values.data[pv];
  if (a->kind == V_PARAM || b->kind == V_PARAM) return bv == pv;
  int da = def_ix(f, bv), db = def_ix(f, pv);
  if (is_const_inst(f, da) || is_const_inst(f, db))
    return is_const_inst(f, da) && is_const_inst(f, db) && same_inst(f, &f->insts.data[da], &f->insts.data[db]);
  return a->kind == b->kind && ir_type_eq(&a->type, &b->type) && (db < lo || db >= hi);
}

/* The IR of f before a pad, to undo it: the instructions (their operand arrays are never
 * written in place, set_arg copies them) and the number of values. */
typedef struct Snap {
  Inst *insts;
  int ni, nv;
} Snap;

static void snap_save(const Func *f, Snap *sn) {
  sn->ni = f->insts.len;
  sn->nv = f->values.len;
  sn->insts = malloc(sizeof(Inst) * (size_t)(sn->ni ? sn->ni : 1));
  CHECK(sn->insts);
  memcpy(sn->insts, f->insts.data, sizeof(Inst) * (size_t)sn->ni);
}

static void snap_restore(Func *f, const Snap *sn) {
  memcpy(f->insts.data, sn->insts, sizeof(Inst) * (size_t)sn->ni);
  f->insts.len = sn->ni;
  f->values.len = sn->nv;
  for (int i = 0; i < sn->ni; i++) f->values.data[f->insts.data[i].res].def = i;
}

static void set_arg(Program *p, Inst *in, int k, ValId v) {
  ValId *a = arena_alloc(p->arena, sizeof(ValId) * (size_t)in->nargs);
  memcpy(a, in->args, sizeof(ValId) * (size_t)in->nargs);
  a[k] = v;
  in->args = a;
}

/* Moves the instructions appended from n0 on, the k-th to just before instruction before[k]
 * of the first n0 (n0: the end), keeping their order. */
static void place(Func *f, int n0, const int *before) {
  int n = f->insts.len, w = 0;
  Inst *old = malloc(sizeof(Inst) * (size_t)n);
  CHECK(old);
  memcpy(old, f->insts.data, sizeof(Inst) * (size_t)n);
  for (int q = 0; q <= n0; q++) {
    for (int k = 0; k < n - n0; k++)
      if (before[k] == q) f->insts.data[w++] = old[n0 + k];
    if (q < n0) f->insts.data[w++] = old[q];
  }
  for (int i = 0; i < n; i++) f->values.data[f->insts.data[i].res].def = i;
  free(old);
}

/* A new instruction like body instruction b (its location, phase, module and grad mode). */
static ValId emit_like(Program *p, Func *f, const Inst *b, Op op, const ValId *args, int nargs, Type t,
                       const int64_t *attr, int nattr, double fattr, const char *name) {
  ValId r = ir_emit(p, f, op, args, nargs, t, attr, nattr, fattr, b->loc, name);
  Inst *in = &f->insts.data[f->insts.len - 1];
  in->phase = b->phase;
  in->scope = b->scope;
  in->nograd = b->nograd;
  return r;
}

/* Body instruction b (of a step starting at instruction B0) as a missing add of a first
 * step: `add(carried, x)` of one type, carried from before the step, x of the step. Which
 * operand is carried, or -1. */
static int carried_add(const Func *f, const Inst *b, int B0) {
  if (b->op != IR_ADD || b->nargs != 2 || !ir_dtype_is_float(f->values.data[b->res].type.dtype)) return -1;
  const Type *t = &f->values.data[b->res].type;
  if (t->ndim == 0) return -1;   /* (no zeros in memory to read) */
  for (int k = 0; k < 2; k++)
    if (!ir_type_eq(&f->values.data[b->args[k]].type, t)) return -1;
  int d0 = def_ix(f, b->args[0]), d1 = def_ix(f, b->args[1]);
  if (is_const_inst(f, d0) || is_const_inst(f, d1)) return -1;
  if (d0 >= 0 && d0 < B0 && d1 >= B0) return 0;
  if (d1 >= 0 && d1 < B0 && d0 >= B0) return 1;
  return -1;
}

/* The step before run's first: aligned backwards with the run's step 0, which may have adds
 * the boundary lacks (carried_add); those are padded with zeros. 1 if f changed. */
static int pad_front(Program *p, Func *f, const KnSchedule *s, const KnRun *run) {
  int B0 = s->kernels.data[run->first].first, B1 = s->kernels.data[run->first + run->len - 1].last + 1, m = B1 - B0;
  int *bm = malloc(sizeof(int) * (size_t)m), *ins = malloc(sizeof(int) * (size_t)m);
  ValId *sp = malloc(sizeof(ValId) * (size_t)m);
  CHECK(bm && ins && sp);
  for (int q = 0; q < m; q++) bm[q] = PAD_UNSEEN;
  int j = B1 - 1, i = B0 - 1, nskip = 0;
  while (j >= B0 && i >= 0) {
    const Inst *b = &f->insts.data[j];
    if (same_inst(f, b, &f->insts.data[i])) {
      bm[j-- - B0] = i--;
    } else if (carried_add(f, b, B0) >= 0) {
      bm[j - B0] = PAD_SKIP;
      ins[j-- - B0] = i + 1;
      nskip++;
    } else
      break;
  }
  int P0 = i + 1, ok = nskip > 0;
  for (int q = B0; q <= j && ok; q++)   /* what stays unaligned: views of the step before's values */
    ok = s->kernels.data[s->kernel_of[q]].kind == KN_VIEW;
  for (int q = j + 1; q < B1 && ok; q++) {
    const Inst *b = &f->insts.data[q];
    if (bm[q - B0] == PAD_SKIP) {   /* carried from the boundary step, x aligned */
      int k = carried_add(f, b, B0), dx = def_ix(f, b->args[1 - k]);
      ok = def_ix(f, b->args[k]) >= P0 && dx < B1 && bm[dx - B0] >= 0;
      continue;
    }
    const Inst *a = &f->insts.data[bm[q - B0]];
    for (int k = 0; k < b->nargs && ok; k++) {
      ValId bv = b->args[k], pv = a->args[k];
      int d = def_ix(f, bv);
      if (d >= B0 && d < B1) {   /* the step's own: its counterpart (a padded add's: its x's) */
        int t = bm[d - B0];
        if (t == PAD_SKIP) {
          const Inst *s0 = &f->insts.data[d];
          int dx = def_ix(f, s0->args[1 - carried_add(f, s0, B0)]);
          t = bm[dx - B0];
        }
        ok = t >= 0 && pv == f->insts.data[t].res;
      } else if (d >= P0 && d < B0) {   /* the step before's: an initial value read from memory */
        int dp = def_ix(f, pv);
        ok = dp >= 0 && dp < P0 && !is_const_inst(f, dp) && ir_type_eq(ir_type(f, bv), ir_type(f, pv));
      } else
        ok = same_outside(f, bv, pv, P0, B0);
    }
  }
  if (ok) {
    int n0 = f->insts.len, nnew = 0, Z = P0;   /* the zeros go before the views just before the step */
    while (Z > 0 && s->kernels.data[s->kernel_of[Z - 1]].kind == KN_VIEW) Z--;
    int *before = malloc(sizeof(int) * (size_t)(3 * nskip));
    CHECK(before);
    for (int q = j + 1; q < B1; q++) {
      if (bm[q - B0] != PAD_SKIP) continue;
      const Inst b = f->insts.data[q];   /* (a copy: emitting grows insts) */
      int k = carried_add(f, &b, B0);
      Type t = f->values.data[b.res].type;
      ValId zero = emit_like(p, f, &b, IR_CONST, NULL, 0, (Type){.dtype = t.dtype}, NULL, 0, 0, "c");
      before[nnew++] = Z;
      ValId z = emit_like(p, f, &b, IR_BROADCAST, &zero, 1, t, NULL, 0, 0, f->values.data[b.args[k]].name);
      before[nnew++] = Z;
      ValId args[2];
      args[k] = z;
      args[1 - k] = f->insts.data[bm[def_ix(f, b.args[1 - k]) - B0]].res;
      sp[q - B0] = emit_like(p, f, &b, IR_ADD, args, 2, t, NULL, 0, 0, f->values.data[b.res].name);
      before[nnew++] = ins[q - B0];
    }
    for (int q = j + 1; q < B1; q++) {
      const Inst *b = &f->insts.data[q];
      if (bm[q - B0] == PAD_SKIP) {   /* step 0 reads the boundary's sum where it read x' */
        int k = carried_add(f, b, B0);
        for (int r = j + 1; r < B1; r++)
          if (bm[r - B0] == PAD_SKIP &&
              f->insts.data[def_ix(f, sp[r - B0])].args[1 - carried_add(f, &f->insts.data[r], B0)] == b->args[k])
            set_arg(p, &f->insts.data[q], k, sp[r - B0]);
        continue;
      }
      for (int k = 0; k < b->nargs; k++) {
        int d = def_ix(f, b->args[k]);
        if (d >= B0 && d < B1 && bm[d - B0] == PAD_SKIP) set_arg(p, &f->insts.data[bm[q - B0]], k, sp[d - B0]);
      }
    }
    place(f, n0, before);
    free(before);
  }
  free(bm);
  free(ins);
  free(sp);
  return ok;
}

/* The step after run's last: aligned forwards with it, which may compute values the boundary
 * lacks, read only by the step after (a dead carried gradient) or by other such values; those
 * are computed again in the boundary and kept. 1 if f changed. */
static int pad_back(Program *p, Func *f, const KnSchedule *s, const KnRun *run) {
  int last = run->first + (run->count - 1) * run->len;
  int L0 = s->kernels.data[last].first, L1 = s->kernels.data[last + run->len - 1].last + 1, m = L1 - L0, ni = f->insts.len;
  if (L0 - m < 0) return 0;
  int *bm = malloc(sizeof(int) * (size_t)m), *ins = malloc(sizeof(int) * (size_t)m);
  /* dead[q]: step count-2's value at q - m is read only by the step after it (a carried value,
   * which the boundary's step after does not exist to read) or by such values of its own step */
  unsigned char *dead = calloc((size_t)m, 1), *bad = calloc((size_t)m, 1), *next = calloc((size_t)m, 1),
                *own = calloc((size_t)m, 1), *notc = calloc((size_t)m, 1);
  ValId *cl = malloc(sizeof(ValId) * (size_t)m);
  CHECK(bm && ins && dead && bad && next && own && notc && cl);
  for (int q = 0; q < m; q++) bm[q] = PAD_UNSEEN;
  for (int o = 0; o < f->outputs.len + f->updates.len; o++) {
    int d = def_ix(f, o < f->outputs.len ? f->outputs.data[o] : f->updates.data[o - f->outputs.len]) - (L0 - m);
    if (d >= 0 && d < m) bad[d] = 1;
  }
  for (int u = L0; u < ni; u++)
    for (int k = 0; k < f->insts.data[u].nargs; k++) {
      int d = def_ix(f, f->insts.data[u].args[k]) - (L0 - m);
      if (d >= 0 && d < m) (u < L1 ? next : bad)[d] = 1;
    }
  for (int u = m - 1; u >= 0; u--) {
    const Inst *in = &f->insts.data[L0 - m + u];
    dead[u] = !bad[u] && !notc[u] && (next[u] || own[u]);
    for (int k = 0; k < in->nargs; k++) {
      int d = def_ix(f, in->args[k]) - (L0 - m);
      if (d < 0 || d >= u) continue;
      own[d] = 1;
      notc[d] |= !dead[u];
    }
  }
  int j = L0, i = L1, nskip = 0;
  while (j < L1) {
    if (i < ni && same_inst(f, &f->insts.data[j], &f->insts.data[i])) {
      bm[j++ - L0] = i++;
    } else if (dead[j - L0]) {
      bm[j - L0] = PAD_SKIP;
      ins[j++ - L0] = i;
      nskip += f->insts.data[j - 1].op != IR_CONST;
    } else
      break;
  }
  int E = i, ok = j == L1 && nskip > 0 && 4 * nskip <= m;
  for (int q = L0; q < L1 && ok; q++) {
    const Inst *b = &f->insts.data[q];
    const Inst *a = bm[q - L0] >= 0 ? &f->insts.data[bm[q - L0]] : NULL;
    for (int k = 0; k < b->nargs && ok; k++) {
      ValId bv = b->args[k];
      int d = def_ix(f, bv);
      if (d >= L0 && d < L1)   /* the step's own: a recomputed value reads a recomputed one or its counterpart */
        ok = a ? bm[d - L0] >= 0 && a->args[k] == f->insts.data[bm[d - L0]].res : 1;
      else if (d >= L0 - m && d < L0)   /* the step before's: the boundary reads the last step's */
        ok = !a || a->args[k] == f->insts.data[d + m].res;
      else if (a)
        ok = same_outside(f, bv, a->args[k], L0 - m, E);
      else   /* a recomputed value reads the step's values, parameters and literals only */
        ok = f->values.data[bv].kind == V_PARAM || is_const_inst(f, d);
    }
  }
  if (ok) {
    int n0 = f->insts.len, nnew = 0;
    int *before = malloc(sizeof(int) * (size_t)(nskip + m));
    CHECK(before);
    for (int q = L0; q < L1; q++) {
      if (bm[q - L0] != PAD_SKIP) continue;
      const Inst b = f->insts.data[q];   /* (a copy: emitting grows insts) */
      ValId args[8], *a = b.nargs <= 8 ? args : malloc(sizeof(ValId) * (size_t)b.nargs);
      CHECK(a);
      for (int k = 0; k < b.nargs; k++) {
        int d = def_ix(f, b.args[k]);
        a[k] = d >= L0 && d < L1   ? (bm[d - L0] >= 0 ? f->insts.data[bm[d - L0]].res : cl[d - L0])
               : d >= L0 - m && d < L0 ? f->insts.data[d + m].res
                                        : b.args[k];
      }
      cl[q - L0] = emit_like(p, f, &b, b.op, a, b.nargs, f->values.data[b.res].type, b.attr, ir_nattrs(f, &b), b.fattr,
                             f->values.data[b.res].name);
      if (a != args) free(a);
      int used = 0;   /* read after the step: nothing reads it here, keep it */
      for (int u = L1; u < n0 && !used; u++)
        for (int k = 0; k < f->insts.data[u].nargs && !used; k++) used = f->insts.data[u].args[k] == b.res;
      f->insts.data[f->insts.len - 1].keep = used;
      before[nnew++] = ins[q - L0];
    }
    place(f, n0, before);
    free(before);
  }
  free(bm);
  free(ins);
  free(dead);
  free(bad);
  free(next);
  free(own);
  free(notc);
  free(cl);
  return ok;
}

/* Kernels with code outside every run. */
static int unrolled(const KnSchedule *s) {
  int n = s->ncode;
  for (int r = 0; r < s->runs.len; r++) {
    const KnRun *run = &s->runs.data[r];
    for (int k = run->first; k < run->first + run->len * run->count; k++) n -= s->kernels.data[k].kind != KN_VIEW;
  }
  return n;
}

KnSchedule *kn_reroll_pad(Program *p, Func *f, KnSchedule *s, int fuse) {
  if (!fuse || f->batch_max) return s;
  for (int round = 0; round < 4 * s->runs.len + 4; round++) {
    int better = 0;
    for (int r = 0; r < s->runs.len && !better; r++)
      for (int side = 0; side < 2 && !better; side++) {
        Snap sn;
        snap_save(f, &sn);
        if (side ? pad_back(p, f, s, &s->runs.data[r]) : pad_front(p, f, s, &s->runs.data[r])) {
          if (ir_verify(p, f, stderr) < 0) BUG("invalid IR after padding a run of %s", f->name);
          KnSchedule *t = kn_schedule(p, f, fuse);
          if (unrolled(t) < unrolled(s)) s = t, better = 1;
          else snap_restore(f, &sn);
        }
        free(sn.insts);
      }
    if (!better) break;
  }
  return s;
}
