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
 * unrolled (a step whose code differs: the backward's first and last) costs nothing but
 * its layout.
 *
 * Deterministic: signatures hash the IR only (no addresses), the scan is in order. */
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
