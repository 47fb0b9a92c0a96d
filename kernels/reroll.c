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
 * Whether a run is then written as a loop is the renderer's decision on its text
 * (codegen_c/reroll_c.c checks that every step's code is step 0's with affine
 * offsets); a run the renderer keeps unrolled costs nothing but its layout.
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
