/* linsum.c - a sum of a combination of values as the combination of their sums.
 *
 * Reverse mode writes BatchNorm's (LayerNorm's, GroupNorm's) input gradient through the mean as
 * a sum over the normalised axes A of g_xc = g_y * r + k * xc, where r and k are constant along A
 * (per channel, per row) and k comes from another sum over the same tensor, the variance's
 * gradient sum(g_y * xc). That sum waits for k, so it is a pass over the tensor of its own,
 * between the pass of the other sums and the input gradient's, which stores g_xc for the next.
 * By linearity
 *
 *     sum_A(g_y * r + k * xc)  =  r * sum_A(g_y) + k * sum_A(xc)
 *
 * and the sums of g_y and xc wait for nothing. They take the old sum's place with the combination
 * of the per-channel values, each summing the first copy of its value (reverse mode recomputes xc
 * for each use: ir_value_numbers), so that the kernel layer runs it in that copy's loop (a row
 * kernel over the trailing axes), or ir/rowsplit.c puts its row sums there (BatchNorm's N, H, W):
 * the pass of the other sums. In exact arithmetic the value is the same (sum_A(xc) is zero up to
 * rounding: a term PyTorch's formula leaves out).
 *
 * A sum over A is rewritten when its operand is, through add, sub, neg and mul by a value
 * constant along A (a literal, a per-channel value), a combination of values none of which
 * depends on a late sum, and some factor does: a late sum is another sum over A of the same
 * shape, in the same phase (forward's statistics are not), at most LINSUM_WINDOW instructions
 * before, whose operand shares an elementwise value (or a recomputed copy of one) with this one's
 * (the pass before). Only where the new sums join a kernel: over the trailing axes
 * (a row kernel on every target) or on the hosted C target, where ir/rowsplit.c (after this pass)
 * makes BatchNorm's sums over N, H and W row sums. An entry's outputs keep their sums.
 *
 * Then every float sum over A of a product with factors constant along A is their product times
 * the sum of the other factors' product, and the sums of one product (by value number) are one:
 *
 *     sum_A(g_y * w * r) = w * r * sum_A(g_y)        sum_A(g_y * (xc * r)) = r * sum_A(g_y * xc)
 *
 * BatchNorm's backward had five sums of four values over the tensor (g_y, xc, g_y * xhat,
 * g_y * w * xc and, from the rewrite above, g_y * w * r); they are three: g_y, xc and g_y * xc.
 * Each sum is an accumulation per element (on the C target a store and a load of a row array
 * too), the product a multiply. A factor is a literal or a value constant along A; a product
 * is flattened through multiplications of the operand's shape whose factors are all of that
 * shape or constant along A (g_y * w of a LayerNorm, w varying along its axis, is one factor);
 * its varying factors multiply in the order of their value numbers. In exact arithmetic the
 * value is the same; in floating point the products round in another order. */
#include <stdlib.h>
#include <string.h>
#include "ir.h"

#define LINSUM_WINDOW 128     /* instructions before a sum searched for the late sums */
#define LINSUM_REGION 512     /* elementwise values of one operand looked at, at most */
#define LINSUM_TERMS 32       /* terms of one combination, at most */
#define LINSUM_FACTORS 8      /* factors of one term, at most */

typedef struct Term {
  ValId leaf;
  int neg;
  int nf;
  ValId f[LINSUM_FACTORS];
} Term;

typedef struct Ctx {
  Func *f;
  int i;                  /* the sum being looked at */
  const Type *full;       /* its operand's type */
  uint64_t mask;          /* its axes */
  const ValId *canon;     /* per value its value number (ir_value_numbers: recomputed copies are one) */
  int *reg;               /* per value number: i + 1 when in the sum's region */
  int *seen;              /* per value number: the stamp of the last region walk of another sum it was in */
  int walks;              /* those walks' stamps */
  int *late, *late_at;    /* per value: whether it depends on a late sum, known when late_at == i + 1 */
  unsigned char *is_late; /* per instruction: a late sum of the current one */
  ValId *stack;
  Term terms[LINSUM_TERMS];
  int nterms;
} Ctx;

/* Whether v has the sum's operand's shape and dtype. */
static int full_shape(const Ctx *c, ValId v) {
  const Type *t = &c->f->values.data[v].type;
  if (t->dtype != c->full->dtype || t->ndim != c->full->ndim) return 0;
  for (int k = 0; k < t->ndim; k++)
    if (t->dims[k] != c->full->dims[k]) return 0;
  return 1;
}

/* Whether v is an elementwise value of that shape and dtype (its region's kind). */
static int full_elem(const Ctx *c, ValId v) {
  const Inst *d = ir_def(c->f, v);
  return d && d->op != IR_CONST && ir_ops[d->op].kind == K_ELEM && !ir_is_view(c->f, v) && full_shape(c, v);
}

/* Whether v broadcasts against the operand's shape as a value constant along the sum's axes. */
static int constant_along(const Ctx *c, ValId v) {
  const Type *t = &c->f->values.data[v].type;
  if (t->dtype != c->full->dtype || t->ndim > c->full->ndim) return 0;
  for (int k = 0; k < t->ndim; k++) {
    const int ax = c->full->ndim - t->ndim + k;
    if (t->dims[k] != 1 && (t->dims[k] != c->full->dims[ax] || (c->mask >> ax & 1))) return 0;
  }
  return 1;
}

/* The region of the value at root: the elementwise values of its shape it is computed from
 * (through such values defined in the window: a residual stream reaches back to the embedding),
 * each value number marked with mark in marks; -1 past LINSUM_REGION. With
 * hit set, stops at the first value whose number is in the current sum's region: 1 (a recomputed
 * copy of one of its values is one of them). */
static int walk(Ctx *c, ValId root, int *marks, int mark, int hit) {
  int n = 0, count = 0;
  if (!full_elem(c, root)) return 0;
  c->stack[n++] = root;
  marks[c->canon[root]] = mark;
  while (n) {
    ValId v = c->stack[--n];
    if (hit && c->reg[c->canon[v]] == c->i + 1) return 1;
    if (++count > LINSUM_REGION) return -1;
    const Inst *d = ir_def(c->f, v);
    for (int k = 0; k < d->nargs; k++) {
      ValId a = d->args[k];
      if (marks[c->canon[a]] == mark || !full_elem(c, a) || c->f->values.data[a].def < c->i - LINSUM_WINDOW) continue;
      marks[c->canon[a]] = mark;
      c->stack[n++] = a;
    }
  }
  return 0;
}

/* Whether v depends on a late sum (instructions before the window cannot). */
static int late(Ctx *c, ValId v) {
  if (c->late_at[v] == c->i + 1) return c->late[v];
  const Inst *d = ir_def(c->f, v);
  int r = 0;
  if (d && c->f->values.data[v].def >= c->i - LINSUM_WINDOW) {
    if (c->is_late[c->f->values.data[v].def]) r = 1;
    for (int k = 0; k < d->nargs && !r; k++) r = late(c, d->args[k]);
  }
  c->late_at[v] = c->i + 1;
  c->late[v] = r;
  return r;
}

/* v times the sign and factors of t as terms of the combination; 0 where v is late and not a
 * combination of that form. */
static int split(Ctx *c, ValId v, Term t) {
  if (!late(c, v)) {
    if (c->nterms == LINSUM_TERMS) return 0;
    t.leaf = v;
    c->terms[c->nterms++] = t;
    return 1;
  }
  if (!full_elem(c, v)) return 0;
  const Inst *d = ir_def(c->f, v);
  switch (d->op) {
  case IR_NEG:
    t.neg = !t.neg;
    return split(c, d->args[0], t);
  case IR_ADD:
  case IR_SUB: {
    if (!full_shape(c, d->args[0]) || !full_shape(c, d->args[1])) return 0;
    if (!split(c, d->args[0], t)) return 0;
    if (d->op == IR_SUB) t.neg = !t.neg;
    return split(c, d->args[1], t);
  }
  case IR_MUL: {
    for (int k = 0; k < 2; k++) {
      ValId x = d->args[k], y = d->args[1 - k];
      if (!full_shape(c, x) || !constant_along(c, y) || t.nf == LINSUM_FACTORS) continue;
      t.f[t.nf++] = y;
      return split(c, x, t);
    }
    return 0;
  }
  default:
    return 0;
  }
}

/* Whether the sum at instruction i is rewritten: c->terms then holds its combination. */
static int rewrites(const Program *p, Ctx *c, int i, const unsigned char *root) {
  Func *f = c->f;
  const Inst *in = &f->insts.data[i];
  if (in->dead || in->op != IR_REDUCE_SUM || root[in->res]) return 0;
  const ValId x = in->args[0];
  const Type *t = &f->values.data[x].type;
  if (!ir_dtype_is_float(t->dtype) || !t->ndim) return 0;
  c->i = i, c->full = t, c->mask = (uint64_t)in->attr[0];
  if (!full_elem(c, x)) return 0;
  /* rowsplit's trailing axes or a sum over the trailing axes only */
  int tail = 0, others = 0;
  for (int k = t->ndim - 1; k >= 0 && (c->mask >> k & 1); k--) tail++;
  for (int k = 0; k < t->ndim - tail; k++) others |= (int)(c->mask >> k & 1);
  if (!tail || (others && !p->row_sums)) return 0;
  if (walk(c, x, c->reg, i + 1, 0) < 0) return 0;
  int any = 0;
  for (int j = i - 1; j >= 0 && j >= i - LINSUM_WINDOW; j--) {
    const Inst *o = &f->insts.data[j];
    c->is_late[j] = 0;
    if (o->dead || o->op != IR_REDUCE_SUM || o->attr[0] != in->attr[0] || o->phase != in->phase ||
        !ir_type_eq(&f->values.data[o->args[0]].type, t))
      continue;
    if (walk(c, o->args[0], c->seen, ++c->walks, 1) == 1) c->is_late[j] = 1, any = 1;
  }
  if (!any || !late(c, x)) return 0;
  c->nterms = 0;
  Term t0 = {0};
  return split(c, x, t0);
}

/* Per value whether it is an entry's output, update or synchronised gradient (its sum stays). */
static unsigned char *roots(const Func *f) {
  unsigned char *root = calloc((size_t)f->values.len, 1);
  CHECK(root);
  for (int k = 0; k < f->outputs.len; k++) root[f->outputs.data[k]] = 1;
  for (int k = 0; k < f->updates.len; k++) root[f->updates.data[k]] = 1;
  for (int k = 0; k < f->sync.len; k++) root[f->sync.data[k]] = 1;
  return root;
}

#define FACTOR_MAX 8   /* factors of one product, at most */

/* A sum of a product: its varying factors' value numbers (ascending), axes and phase. */
typedef struct SumKey {
  int phase, n;
  int64_t mask;
  ValId key[FACTOR_MAX];
  ValId sum;
} SumKey;

/* Flattens the product v (of the sum's operand's type): factors constant along the axes into
 * cst, those of the operand's shape into var; 0 past FACTOR_MAX of either. */
static int factors(Ctx *c, ValId v, ValId *cst, int *nc, ValId *var, int *nv) {
  const Inst *d = ir_def(c->f, v);
  int flat = full_elem(c, v) && d->op == IR_MUL;
  for (int k = 0; flat && k < 2; k++) flat = full_shape(c, d->args[k]) || constant_along(c, d->args[k]);
  if (!flat) {
    if (*nv == FACTOR_MAX) return 0;
    var[(*nv)++] = v;
    return 1;
  }
  for (int k = 0; k < 2; k++) {
    ValId a = d->args[k];
    if (!full_shape(c, a)) {
      if (*nc == FACTOR_MAX) return 0;
      cst[(*nc)++] = a;
    } else if (!factors(c, a, cst, nc, var, nv)) {
      return 0;
    }
  }
  return 1;
}

/* The second rewrite (above). A sum reuses an earlier one of its product, axes and phase (a
 * value constant along the axes: small); the product itself is made anew at each sum that
 * needs it (CSE merges the near copies), not read from another kernel. */
static void factor_sums(Program *p, Func *f) {
  const int ni = f->insts.len, nv = f->values.len;
  ValId *canon = malloc(sizeof(ValId) * (size_t)nv), *to = malloc(sizeof(ValId) * (size_t)nv);
  unsigned char *root = roots(f);
  SumKey *sums = malloc(sizeof(SumKey) * (size_t)ni);
  CHECK(canon && to && root && sums);
  ir_value_numbers(f, canon);
  for (int v = 0; v < nv; v++) to[v] = v;
  int ns = 0;
  Inst *old = ir_insts_take(f);
  const int phase = f->phase, scope = f->scope, grad = f->grad_mode;
  Ctx c = {.f = f};
  for (int i = 0; i < ni; i++) {
    Inst in = old[i];
    for (int k = 0; k < in.nargs; k++) in.args[k] = to[in.args[k]];
    ValId cst[FACTOR_MAX], var[FACTOR_MAX];
    int nc = 0, nvar = 0, ok = !in.dead && in.op == IR_REDUCE_SUM && !root[in.res];
    const Type t = ok ? f->values.data[in.args[0]].type : (Type){0};   /* (ir_emit may move values) */
    if (ok) {
      c.full = &t, c.mask = (uint64_t)in.attr[0];
      ok = ir_dtype_is_float(t.dtype) && t.ndim && full_elem(&c, in.args[0]) &&
           factors(&c, in.args[0], cst, &nc, var, &nvar) && nvar;
      for (int k = 0; ok && k < nvar; k++) ok = var[k] < nv;
    }
    if (!ok) {
      ir_inst_push(p, f, in);
      continue;
    }
    SumKey sk = {.phase = in.phase, .n = nvar, .mask = in.attr[0], .sum = in.res};
    for (int k = 0; k < nvar; k++) {   /* by value number (insertion sort: a few) */
      ValId kv = canon[var[k]], vv = var[k];
      int j = k;
      for (; j > 0 && sk.key[j - 1] > kv; j--) sk.key[j] = sk.key[j - 1], var[j] = var[j - 1];
      sk.key[j] = kv, var[j] = vv;
    }
    int j = 0;
    while (j < ns && (sums[j].phase != sk.phase || sums[j].n != sk.n || sums[j].mask != sk.mask ||
                      memcmp(sums[j].key, sk.key, sizeof(ValId) * (size_t)nvar)))
      j++;
    if (!nc) {   /* nothing to factor: later sums of its product read it */
      ir_inst_push(p, f, in);
      if (j == ns) sums[ns++] = sk;
      continue;
    }
    f->phase = in.phase, f->scope = in.scope, f->grad_mode = in.nograd;
    const Type rt = f->values.data[in.res].type;
    const char *name = f->values.data[in.res].name;
    ValId s;
    if (j < ns) {
      s = sums[j].sum;
    } else {
      ValId prod = var[0];
      for (int k = 1; k < nvar; k++) {
        ValId a[2] = {prod, var[k]};
        prod = ir_emit(p, f, IR_MUL, a, 2, t, NULL, 0, 0, in.loc, NULL);
      }
      s = sk.sum = ir_emit(p, f, IR_REDUCE_SUM, &prod, 1, rt, in.attr, 1, 0, in.loc, name);
      sums[ns++] = sk;
    }
    for (int k = 0; k < nc; k++) {
      ValId a[2] = {s, cst[k]};
      s = ir_emit(p, f, IR_MUL, a, 2, rt, NULL, 0, 0, in.loc, name);
    }
    Value *nw = &f->values.data[s], *ov = &f->values.data[in.res];
    nw->adjoint_of = ov->adjoint_of, nw->term_of = ov->term_of;
    to[in.res] = s;
  }
  f->phase = phase, f->scope = scope, f->grad_mode = grad;
  free(old);
  free(sums);
  free(root);
  free(to);
  free(canon);
}

void ir_pass_linsum(Program *p, Func *f) {
  const int ni = f->insts.len, nv = f->values.len;
  if (ni < 3) return;
  Ctx c = {.f = f};
  ValId *canon = malloc(sizeof(ValId) * (size_t)nv);
  CHECK(canon);
  ir_value_numbers(f, canon);
  c.canon = canon;
  c.reg = malloc(sizeof(int) * (size_t)nv);
  c.seen = malloc(sizeof(int) * (size_t)nv);
  c.late = malloc(sizeof(int) * (size_t)nv);
  c.late_at = malloc(sizeof(int) * (size_t)nv);
  c.is_late = calloc((size_t)ni, 1);
  c.stack = malloc(sizeof(ValId) * (size_t)nv);
  unsigned char *root = roots(f);
  CHECK(c.reg && c.seen && c.late && c.late_at && c.is_late && c.stack && root);
  for (int v = 0; v < nv; v++) c.reg[v] = c.seen[v] = c.late_at[v] = 0;
  /* per rewritten sum its terms */
  Term **terms = calloc((size_t)ni, sizeof *terms);
  int *nterms = calloc((size_t)ni, sizeof *nterms);
  CHECK(terms && nterms);
  int any = 0;
  for (int i = 0; i < ni; i++) {
    if (!rewrites(p, &c, i, root)) continue;
    terms[i] = malloc(sizeof(Term) * (size_t)c.nterms);
    CHECK(terms[i]);
    memcpy(terms[i], c.terms, sizeof(Term) * (size_t)c.nterms);
    nterms[i] = c.nterms;
    any = 1;
  }
  if (any) {
    /* at each rewritten sum: the sums of its values (of the first copy of a recomputed one, which
     * rowsplit's row sums then follow into its kernel), their products and the combination, which
     * the sum's readers read instead */
    ValId *to = malloc(sizeof(ValId) * (size_t)nv);
    CHECK(to);
    for (int v = 0; v < nv; v++) to[v] = v;
    Inst *old = ir_insts_take(f);
    const int phase = f->phase, scope = f->scope, grad = f->grad_mode;
    for (int i = 0; i < ni; i++) {
      Inst in = old[i];
      for (int k = 0; k < in.nargs; k++) in.args[k] = to[in.args[k]];
      if (!nterms[i]) {
        ir_inst_push(p, f, in);
        continue;
      }
      f->phase = in.phase, f->scope = in.scope, f->grad_mode = in.nograd;
      const Type rt = f->values.data[in.res].type;
      const char *name = f->values.data[in.res].name;
      ValId acc = -1, leaf[LINSUM_TERMS], sum[LINSUM_TERMS];
      int acc_neg = 0, nsum = 0;   /* acc_neg: acc holds minus the combination so far */
      for (int k = 0; k < nterms[i]; k++) {
        const Term *t = &terms[i][k];
        const ValId u = to[canon[t->leaf]];   /* (to: a sum rewritten before is its combination) */
        int j = 0;
        while (j < nsum && leaf[j] != u) j++;
        if (j == nsum) leaf[nsum] = u, sum[nsum++] = ir_emit(p, f, IR_REDUCE_SUM, &u, 1, rt, in.attr, 1, 0, in.loc, name);
        ValId s = sum[j];
        for (int q = 0; q < t->nf; q++) {
          ValId a[2] = {s, to[t->f[q]]};
          s = ir_emit(p, f, IR_MUL, a, 2, rt, NULL, 0, 0, in.loc, name);
        }
        if (acc < 0) {
          acc = s, acc_neg = t->neg;
        } else {
          ValId a[2] = {acc, s};
          acc = ir_emit(p, f, t->neg == acc_neg ? IR_ADD : IR_SUB, a, 2, rt, NULL, 0, 0, in.loc, name);
        }
      }
      if (acc_neg) acc = ir_emit(p, f, IR_NEG, &acc, 1, rt, NULL, 0, 0, in.loc, name);
      Value *nw = &f->values.data[acc], *ov = &f->values.data[in.res];
      nw->adjoint_of = ov->adjoint_of, nw->term_of = ov->term_of;
      to[in.res] = acc;
    }
    f->phase = phase, f->scope = scope, f->grad_mode = grad;
    free(old);
    free(to);
  }
  for (int i = 0; i < ni; i++) free(terms[i]);
  free(terms);
  free(nterms);
  free(c.reg);
  free(c.seen);
  free(c.late);
  free(c.late_at);
  free(c.is_late);
  free(c.stack);
  free(canon);
  free(root);
  factor_sums(p, f);
}
