/* plan_check.c - an independent check of a memory plan.
 *
 * Recomputes every value's lifetime from the rules stated in plan.c (a value
 * lives from its defining instruction to its last use, or a use of one of its
 * views; outputs and update values to the end; scratch during its
 * instruction; time counted in kernels when the plan has PlanHints) and
 * verifies, without trusting the packer:
 *   - kernels are in instruction order; a kernel-local value (nostore) has no
 *     storage, is no constant, view operand, output or update, and every use
 *     is in its own kernel; every other instruction result is stored;
 *   - parameters are 64-byte aligned, disjoint and inside the parameter region;
 *   - a view has its operand's location; a scalar constant has none;
 *   - every activation and scratch buffer is 64-byte aligned and lies inside the
 *     function's peak, which fits the arena; scratch exactly where needed;
 *   - a parameter update computed in its parameter (PlanHints.update_into) sits
 *     on it, and no later kernel, output or other update reads the parameter;
 *   - no two blocks that are live at the same instruction share a byte, except a
 *     result written in place over an operand (FuncPlan.shares, allowed by
 *     PlanHints.inplace) of its shape and element size that dies in its kernel.
 * compiler/main.c runs it after planning, on every compile.
 *
 * The last check is a sweep in order of definition over an active set ordered by
 * offset (a treap). The blocks in the set are pairwise disjoint (each was checked
 * on entry), so a new block shares a byte with one of them exactly when it shares
 * one with its neighbour below or above in offset order: O(n log n), where the
 * all-pairs scan of the live blocks was quadratic in a 16000-way split. A block
 * of no bytes shares none and is not in the set. */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include "ir.h"

typedef struct Blk {
  int64_t off, size;
  int start, end;     /* closed interval of instruction indices */
  ValId v;            /* -1: scratch of instruction `start` */
  int seq;            /* order of creation (instruction order): ties of the sort */
} Blk;

static int cmp_int(int64_t x, int64_t y) { return (x > y) - (x < y); }

static int by_start(const void *a, const void *b) {
  const Blk *x = a, *y = b;
  int c = cmp_int(x->start, y->start);
  if (!c) c = cmp_int(x->off, y->off);
  return c ? c : cmp_int(x->seq, y->seq);
}

static int by_end(const void *a, const void *b) {
  const Blk *x = *(const Blk *const *)a, *y = *(const Blk *const *)b;
  int c = cmp_int(x->end, y->end);
  return c ? c : cmp_int(x->seq, y->seq);
}

/* ---- the active set: a treap of block indices ordered by (offset, index) ---------- */

typedef struct Treap {
  const Blk *b;     /* the blocks, sorted by start; a node is an index into them */
  int *l, *r;       /* children (-1: none) */
  int root;
} Treap;

static unsigned prio(int k) {   /* a fixed pseudo-random priority per node (deterministic) */
  uint32_t x = (uint32_t)k * 0x9E3779B9u;
  x ^= x >> 16;
  x *= 0x85EBCA6Bu;
  return x ^ (x >> 13);
}

static int key_less(const Treap *t, int x, int y) { return t->b[x].off != t->b[y].off ? t->b[x].off < t->b[y].off : x < y; }

/* Splits the tree at n into the nodes ordered before key k (*lo) and the others (*hi). */
static void split(Treap *t, int n, int k, int *lo, int *hi) {
  if (n < 0) {
    *lo = *hi = -1;
  } else if (key_less(t, n, k)) {
    split(t, t->r[n], k, &t->r[n], hi);
    *lo = n;
  } else {
    split(t, t->l[n], k, lo, &t->l[n]);
    *hi = n;
  }
}

static int merge(Treap *t, int x, int y) {   /* every key of x before every key of y */
  if (x < 0 || y < 0) return x < 0 ? y : x;
  if (prio(x) > prio(y)) {
    t->r[x] = merge(t, t->r[x], y);
    return x;
  }
  t->l[y] = merge(t, x, t->l[y]);
  return y;
}

static void insert(Treap *t, int k) {
  int lo, hi;
  t->l[k] = t->r[k] = -1;
  split(t, t->root, k, &lo, &hi);
  t->root = merge(t, merge(t, lo, k), hi);
}

static void erase(Treap *t, int k) {
  int *at = &t->root;
  while (*at != k) at = key_less(t, k, *at) ? &t->l[*at] : &t->r[*at];
  *at = merge(t, t->l[k], t->r[k]);
}

/* The node just before key k (below = 1) or just after it (below = 0); -1: none. */
static int neighbour(const Treap *t, int k, int below) {
  int n = t->root, best = -1;
  while (n >= 0)
    if (below ? key_less(t, n, k) : key_less(t, k, n)) {
      best = n;
      n = below ? t->r[n] : t->l[n];
    } else {
      n = below ? t->l[n] : t->r[n];
    }
  return best;
}

static int fail(FILE *out, const Func *f, const char *fmt, ...) CTC_PRINTF(3, 4);
static int fail(FILE *out, const Func *f, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(out, "memory plan of '%s': ", f->name);
  vfprintf(out, fmt, ap);
  fprintf(out, "\n");
  va_end(ap);
  return -1;
}

static int64_t bytes_of(const Type *t) { return ir_numel(t) * (int64_t)ir_dtype_size(t->dtype); }

/* Whether b (a result) legally takes over a's bytes in place: the plan says
 * so, the schedule allowed the pair, a dies in b's kernel, same place and size. */
static int in_place(const Func *f, const FuncPlan *fp, const PlanHints *h, const Blk *a, const Blk *b) {
  if (a->v < 0 || b->v < 0 || !fp->shares || fp->shares[b->v] != a->v || !h->inplace || h->inplace[b->v] != a->v)
    return 0;
  const Type *ta = &f->values.data[a->v].type, *tb = &f->values.data[b->v].type;
  if (ta->ndim != tb->ndim || ir_dtype_size(ta->dtype) != ir_dtype_size(tb->dtype)) return 0;
  for (int k = 0; k < ta->ndim; k++)
    if (ta->dims[k] != tb->dims[k]) return 0;
  return a->end == b->start && a->off == b->off && a->size == b->size;
}

/* A parameter update computed in its parameter's bytes (PlanHints.update_into):
 * it sits exactly on the parameter, and nothing reads the parameter (or a view
 * of it) in a later kernel, as an output or as another update. (Reads in its
 * own kernel are element by element, which the schedule guarantees.) */
static int check_update_into(const Func *f, const MemPlan *mp, const FuncPlan *fp, ValId v, int def,
                             const ValId *root, FILE *out) {
  const PlanHints *h = &fp->hints;
  int P = h->update_into[v], n = 0;
  for (int u = 0; u < f->updates.len; u++) n += f->updates.data[u] == v && f->update_params.data[u] == P;
  const Loc *l = &fp->loc[v];
  if (!n || l->base != LOC_ARENA || l->offset != mp->param_offset[P])
    return fail(out, f, "%s is computed into a parameter it does not update or is not at it", f->values.data[v].name);
  for (int i = 0; i < f->insts.len; i++) {
    const Inst *in = &f->insts.data[i];
    for (int k = 0; k < in->nargs; k++) {
      const Value *r = &f->values.data[root[in->args[k]]];
      if (r->kind == V_PARAM && r->index == P && (h->step ? h->step[i] > h->step[def] : i > def))
        return fail(out, f, "%s overwrites its parameter before instruction %d reads it", f->values.data[v].name, i);
    }
  }
  for (int o = 0; o < f->outputs.len + f->updates.len; o++) {
    ValId w = o < f->outputs.len ? f->outputs.data[o] : f->updates.data[o - f->outputs.len];
    const Value *r = &f->values.data[root[w]];
    if (w != v && r->kind == V_PARAM && r->index == P)
      return fail(out, f, "%s overwrites its parameter, which is copied out at the end", f->values.data[v].name);
  }
  return 0;
}

static int check_func(const Program *p, const Func *f, const MemPlan *mp, const FuncPlan *fp, FILE *out) {
  int nv = f->values.len, ni = f->insts.len;
  const PlanHints *h = &fp->hints;
#define STEP(i) (h->step ? h->step[i] : (i))
  int nsteps = ni ? STEP(ni - 1) + 1 : 0;
  ValId *root = malloc(sizeof(ValId) * (size_t)(nv + 1));
  int *last = malloc(sizeof(int) * (size_t)(nv + 1));
  Blk *b = malloc(sizeof(Blk) * (size_t)(nv + ni + 1));
  int nb = 0, rc = 0;
  if (!root || !last || !b) BUG("out of memory");
  for (int v = 0; v < nv; v++) root[v] = v, last[v] = -1;
  for (int i = 0; i < ni; i++) {
    const Inst *in = &f->insts.data[i];
    if (i && STEP(i) < STEP(i - 1)) {
      rc = fail(out, f, "instruction %d is in an earlier kernel than instruction %d", i, i - 1);
      goto done;
    }
    /* A kernel-local value: no storage, and every use in its own kernel. */
    int local = h->nostore && h->nostore[in->res];
    if ((fp->loc[in->res].base == LOC_LOCAL) != local || (local && (in->op == IR_CONST || ir_is_view(f, in->res)))) {
      rc = fail(out, f, "%s is %s", f->values.data[in->res].name,
                local ? "kernel-local but has storage" : "stored nowhere but not kernel-local");
      goto done;
    }
    for (int k = 0; k < in->nargs; k++) {
      ValId a = in->args[k];
      const Value *av = &f->values.data[a];
      if (h->nostore && h->nostore[a] && (av->kind != V_INST || STEP(av->def) != STEP(i) || ir_is_view(f, in->res))) {
        rc = fail(out, f, "kernel-local %s is used outside its kernel (instruction %d)", av->name, i);
        goto done;
      }
    }
    if (ir_is_view(f, in->res) || (h->strided && h->strided[in->res])) {
      root[in->res] = root[in->args[0]];
      const Loc *a = &fp->loc[in->res], *o = &fp->loc[in->args[0]];
      if (a->base != o->base || a->offset != o->offset) {
        rc = fail(out, f, "view %s is not at its operand's location", f->values.data[in->res].name);
        goto done;
      }
    }
    if (last[in->res] < STEP(i)) last[in->res] = STEP(i);
    for (int k = 0; k < in->nargs; k++)
      if (last[root[in->args[k]]] < STEP(i)) last[root[in->args[k]]] = STEP(i);
  }
  for (int i = 0; i < f->outputs.len; i++) last[root[f->outputs.data[i]]] = nsteps;
  for (int i = 0; i < f->updates.len; i++) last[root[f->updates.data[i]]] = nsteps;
  for (int i = 0; i < f->outputs.len + f->updates.len; i++) {
    ValId v = i < f->outputs.len ? f->outputs.data[i] : f->updates.data[i - f->outputs.len];
    if (h->nostore && h->nostore[v]) {
      rc = fail(out, f, "%s is returned or written back but kernel-local", f->values.data[v].name);
      goto done;
    }
  }
  for (int i = 0; i < ni; i++) {
    const Inst *in = &f->insts.data[i];
    const Loc *l = &fp->loc[in->res];
    if (in->op == IR_CONST) {
      if (l->base != LOC_NONE) rc = fail(out, f, "constant %s has storage", f->values.data[in->res].name);
    } else if (l->base == LOC_LOCAL) {
      /* checked above: kernel-local, no bytes */
    } else if (h->update_into && h->update_into[in->res] >= 0) {
      rc = check_update_into(f, mp, fp, in->res, i, root, out);
    } else if (root[in->res] == in->res) {
      if (l->base != LOC_ARENA) {
        rc = fail(out, f, "%s is not in the arena", f->values.data[in->res].name);
      } else {
        b[nb] = (Blk){l->offset, bytes_of(&f->values.data[in->res].type), STEP(i), last[in->res], in->res, nb};
        nb++;
      }
    }
    if ((fp->scratch[i] >= 0) != (ir_scratch_bytes(f, in) > 0))
      rc = fail(out, f, "instruction %d (%s) %s scratch space", i, ir_ops[in->op].name,
                fp->scratch[i] >= 0 ? "has unneeded" : "lacks its");
    if (fp->scratch[i] >= 0) {
      b[nb] = (Blk){fp->scratch[i], ir_scratch_bytes(f, in), STEP(i), STEP(i), -1, nb};
      nb++;
    }
    if (rc) goto done;
  }
  for (int k = 0; k < nb; k++)
    if (b[k].off < mp->params_bytes || b[k].off % 64 || b[k].off + b[k].size > mp->params_bytes + fp->peak ||
        mp->params_bytes + fp->peak > mp->arena_bytes) {
      rc = fail(out, f, "%s at [%lld, +%lld) is unaligned or outside the activation region",
                b[k].v >= 0 ? f->values.data[b[k].v].name : "scratch", (long long)b[k].off, (long long)b[k].size);
      goto done;
    }
  /* sweep in order of definition; the treap holds the blocks still live, by offset */
  qsort(b, (size_t)nb, sizeof(Blk), by_start);
  int *kids = malloc(sizeof(int) * (size_t)(2 * nb + 1));
  char *in_set = calloc((size_t)nb + 1, 1);
  const Blk **ends = malloc(sizeof(Blk *) * (size_t)(nb + 1));   /* in order of death */
  if (!kids || !in_set || !ends) BUG("out of memory");
  for (int k = 0; k < nb; k++) ends[k] = &b[k];
  qsort(ends, (size_t)nb, sizeof *ends, by_end);
  Treap t = {b, kids, kids + nb, -1};
  for (int k = 0, dead = 0; k < nb && !rc; k++) {
    for (; dead < nb && ends[dead]->end < b[k].start; dead++)
      if (in_set[ends[dead] - b]) erase(&t, (int)(ends[dead] - b)), in_set[ends[dead] - b] = 0;
    if (!b[k].size) continue;
    for (int below = 1; below >= 0 && !rc; below--) {
      int j = neighbour(&t, k, below);
      if (j < 0 || !(b[j].off < b[k].off + b[k].size && b[k].off < b[j].off + b[j].size)) continue;
      if (in_place(f, fp, h, &b[j], &b[k])) {   /* b[k] takes over b[j]'s bytes, which touch no other */
        erase(&t, j);
        in_set[j] = 0;
        break;
      }
      const char *n1 = b[j].v >= 0 ? f->values.data[b[j].v].name : "scratch";
      const char *n2 = b[k].v >= 0 ? f->values.data[b[k].v].name : "scratch";
      fprintf(out, "memory plan of '%s': %s and %s are live together at instruction %d and share bytes "
                   "([%lld, +%lld) and [%lld, +%lld))\n", f->name, n1, n2, b[k].start, (long long)b[j].off,
              (long long)b[j].size, (long long)b[k].off, (long long)b[k].size);
      rc = -1;
    }
    if (!rc) insert(&t, k), in_set[k] = 1;
  }
  free(kids);
  free(in_set);
  free(ends);
done:
  free(root);
  free(last);
  free(b);
  (void)p;
  return rc;
#undef STEP
}

int ir_plan_check(const Program *p, const MemPlan *mp, FILE *out) {
  int64_t end = 0;
  for (int i = 0; i < p->params.len; i++) {
    int64_t off = mp->param_offset[i], sz = bytes_of(&p->params.data[i].type);
    if (off % 64 || off < end || off + sz > mp->params_bytes) {
      fprintf(out, "memory plan: parameter '%s' at %lld (+%lld) overlaps, is unaligned or outside [0, %lld)\n",
              p->params.data[i].name, (long long)off, (long long)sz, (long long)mp->params_bytes);
      return -1;
    }
    end = off + sz;
  }
  for (int i = 0; i < p->funcs.len; i++)
    if (check_func(p, p->funcs.data[i], mp, &mp->funcs[i], out) < 0) return -1;
  return 0;
}
