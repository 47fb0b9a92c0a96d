/* kir_ops.c - the kernel IR (kir.h) of data-movement instructions: one parallel loop over
 * the result's elements (KIR_SPACE), each element one store of a value loaded from an offset
 * computed from the loop's axes (KE_AXIS, integer KE_BIN/KE_SELECT, KE_LOADAT), tables fixed at
 * compile time (KE_TABLE) and the element type's arithmetic (KE_BIN in dt). Every element is
 * independent: the C renderer runs the loop on OpenMP threads, the CUDA renderer a thread per
 * element (grid-stride), both printing this same IR.
 *
 *   PAD       y[i] = x[s(i)], s per axis: i - lo (constant mode: the fill outside x),
 *             reflected (reflect) or clamped (replicate) into x
 *   GATHER    y[i] = x[i with i[axis] := index[i]] (the indices checked before the kernel)
 *   UPSAMPLE  nearest: x at the tables' source pixel; bilinear: the four source pixels
 *             weighted along W, then H (PyTorch 1.13's order and opmath precision)
 *
 * Scans, arg-reductions and scatters along an axis run a thread per fiber (every coordinate
 * but the axis fixed): a parallel KIR_SPACE loop over the other axes (the fiber space: the
 * result's axes but the axis, in order, then one axis for the serial loops), and in it
 * KIR_SERIAL loops along the axis with variables (KirVar) for what is carried along it:
 *
 *   CUMSUM       acc += x[.., k, ..]; y[.., k, ..] = acc (k from the end with attr[1]); acc in
 *                the target's sum type (KirVar.sum: double, integers wrapping); for CPU targets
 *                along an axis that is not the last, the last axis's tiles of lanes inside the
 *                serial loop (KIR_LANES; acc an array of them)
 *   ARGMAX       the first k of the max (min) so far, a NaN winning over numbers and the
 *                first NaN over later ones; y[..] = that k
 *   SCATTER_ADD  y's fiber = base's; then, when src has the fiber, y[.., index[.., k, ..], ..]
 *                += src[.., k, ..] for k in order (the fibers are disjoint; the indices are
 *                checked before the kernel) */
#include <math.h>
#include <string.h>
#include "kir.h"

static const Type *ty(const Func *f, ValId v) { return &f->values.data[v].type; }

static int is_literal(const Func *f, ValId v) {
  const Value *val = &f->values.data[v];
  return val->kind == V_INST && val->def >= 0 && f->insts.data[val->def].op == IR_CONST;
}

static void cstrides(const Type *t, int64_t *st) {
  int64_t s = 1;
  for (int k = t->ndim - 1; k >= 0; k--) st[k] = s, s *= t->dims[k];
}

typedef struct B {
  Arena *a;
  const Func *f;
  Kir *k;
} B;

static KirExpr *ex(B *b, KirExprKind kind) {
  KirExpr *x = arena_alloc(b->a, sizeof *x);
  memset(x, 0, sizeof *x);
  x->kind = kind;
  x->v = -1;
  x->dt = DT_I64;
  return x;
}

static KirExpr *axis(B *b, int k) {
  KirExpr *x = ex(b, KE_AXIS);
  x->axis = k;
  return x;
}

static KirExpr *num(B *b, int64_t n) {
  KirExpr *x = ex(b, KE_INT);
  x->imm = n;
  return x;
}

static int is_num(const KirExpr *x, int64_t n) { return x->kind == KE_INT && x->imm == n; }

/* a bop c in dt (integer sums and products by 0 and 1 folded) */
static KirExpr *bin(B *b, KirBinOp op, KirExpr *l, KirExpr *r, DType dt) {
  if (dt == DT_I64 && op == KB_ADD && is_num(l, 0)) return r;
  if (dt == DT_I64 && (op == KB_ADD || op == KB_SUB) && is_num(r, 0)) return l;
  if (dt == DT_I64 && op == KB_MUL && (is_num(r, 1) || is_num(l, 0))) return l;
  if (dt == DT_I64 && op == KB_MUL && (is_num(l, 1) || is_num(r, 0))) return r;
  KirExpr *x = ex(b, KE_BIN);
  x->bop = op, x->dt = dt, x->nargs = 2;
  x->arg[0] = l, x->arg[1] = r;
  return x;
}

static KirExpr *sel(B *b, KirExpr *c, KirExpr *t, KirExpr *e, DType dt) {
  KirExpr *x = ex(b, KE_SELECT);
  x->dt = dt, x->nargs = 3;
  x->arg[0] = c, x->arg[1] = t, x->arg[2] = e;
  return x;
}

static KirExpr *load_at(B *b, ValId v, KirExpr *off) {
  KirExpr *x = ex(b, KE_LOADAT);
  x->v = v, x->dt = ty(b->f, v)->dtype, x->nargs = 1;
  x->arg[0] = off;
  return x;
}

/* Table t's element at axis k's position. */
static KirExpr *at_table(B *b, int t, int k) {
  KirExpr *x = ex(b, KE_TABLE);
  x->table = t, x->dt = b->k->tables.data[t].dt, x->nargs = 1;
  x->arg[0] = axis(b, k);
  return x;
}

static int table(B *b, const char *hint, DType dt, int64_t n, const int64_t *iv, const double *fv) {
  KirTable t = {hint, dt, n, iv, fv};
  vec_push(b->a, &b->k->tables, t);
  return b->k->tables.len - 1;
}

static KirStmt *stmt(B *b, KirBlock *blk, KirStmtKind kind) {
  KirStmt *st = arena_alloc(b->a, sizeof *st);
  memset(st, 0, sizeof *st);
  st->kind = kind, st->v = -1;
  vec_push(b->a, blk, st);
  return st;
}

static KirStmt *loop(B *b, KirBlock *blk, KirLoopKind kind, int from, int to, unsigned marks) {
  KirStmt *l = stmt(b, blk, KS_LOOP);
  l->loop = kind, l->from = from, l->to = to, l->marks = marks;
  return l;
}

/* A variable of the kernel (KirVar) and its value. */
static int var(B *b, const char *hint, DType dt, int sum) {
  KirVar v = {hint, dt, sum, 0};
  vec_push(b->a, &b->k->vars, v);
  return b->k->vars.len - 1;
}

static KirExpr *rd(B *b, int v) {
  KirExpr *x = ex(b, KE_VAR);
  x->var = v, x->dt = b->k->vars.data[v].dt;
  return x;
}

static void set(B *b, KirBlock *blk, KirStmtKind kind, int v, KirExpr *x) {
  KirStmt *st = stmt(b, blk, kind);
  st->var = v, st->x = x;
}

static KirExpr *un(B *b, KirExprKind kind, KirExpr *a, DType dt) {
  KirExpr *x = ex(b, kind);
  x->dt = dt, x->nargs = 1, x->arg[0] = a;
  return x;
}

/* sum over the axes of the space of axis * st (the axes of size 1 and stride 0 left out) */
static KirExpr *affine(B *b, const int64_t *st) {
  KirExpr *x = num(b, 0);
  for (int k = 0; k < b->k->space.ndim; k++)
    if (st[k] && b->k->space.dims[k] != 1) x = bin(b, KB_ADD, x, bin(b, KB_MUL, axis(b, k), num(b, st[k]), DT_I64), DT_I64);
  return x;
}

static KirExpr *build_pad(B *b, const Inst *in) {
  const Type *x = ty(b->f, in->args[0]), *r = ty(b->f, in->res);
  int mode = (int)in->attr[0];
  int64_t xst[IR_MAX_DIMS];
  cstrides(x, xst);
  KirExpr *off = num(b, 0), *inside = NULL;
  for (int k = 0; k < r->ndim; k++) {
    int64_t lo = in->attr[1 + k], X = x->dims[k];
    KirExpr *i = axis(b, k), *s;
    if (lo == 0 && r->dims[k] == X) s = i;
    else if (mode == 1)   /* reflect: lo - i before x, 2 (X - 1) + lo - i after it */
      s = sel(b, bin(b, KB_LT, i, num(b, lo), DT_I64), bin(b, KB_SUB, num(b, lo), i, DT_I64),
              sel(b, bin(b, KB_GE, i, num(b, lo + X), DT_I64), bin(b, KB_SUB, num(b, 2 * (X - 1) + lo), i, DT_I64),
                  bin(b, KB_SUB, i, num(b, lo), DT_I64), DT_I64), DT_I64);
    else if (mode == 2)   /* replicate: clamped */
      s = sel(b, bin(b, KB_LT, i, num(b, lo), DT_I64), num(b, 0),
              sel(b, bin(b, KB_GE, i, num(b, lo + X), DT_I64), num(b, X - 1), bin(b, KB_SUB, i, num(b, lo), DT_I64),
                  DT_I64), DT_I64);
    else {   /* constant: x's elements where lo <= i < lo + X */
      s = bin(b, KB_SUB, i, num(b, lo), DT_I64);
      KirExpr *c = bin(b, KB_AND, bin(b, KB_GE, i, num(b, lo), DT_I64), bin(b, KB_LT, i, num(b, lo + X), DT_I64), DT_I64);
      inside = inside ? bin(b, KB_AND, inside, c, DT_I64) : c;
    }
    if (X != 1) off = bin(b, KB_ADD, off, bin(b, KB_MUL, s, num(b, xst[k]), DT_I64), DT_I64);
  }
  KirExpr *v = load_at(b, in->args[0], off);
  if (!inside) return v;
  KirExpr *fill = ex(b, KE_FLT);
  fill->fimm = in->fattr, fill->dt = r->dtype;
  return sel(b, inside, v, fill, r->dtype);
}

static KirExpr *build_gather(B *b, const Inst *in) {
  const Type *x = ty(b->f, in->args[0]), *r = ty(b->f, in->res), *ix = ty(b->f, in->args[1]);
  int ax = (int)in->attr[0];
  int64_t xst[IR_MAX_DIMS], ist[IR_MAX_DIMS], cs[IR_MAX_DIMS];
  cstrides(x, xst);
  cstrides(ix, cs);
  for (int k = 0; k < r->ndim; k++) {   /* the index broadcast over the result */
    int d = k - (r->ndim - ix->ndim);
    ist[k] = d >= 0 && ix->dims[d] != 1 ? cs[d] : 0;
  }
  int64_t stride = xst[ax];
  xst[ax] = 0;
  KirExpr *i = load_at(b, in->args[1], affine(b, ist));   /* in [0, x's axis): checked before the kernel */
  return load_at(b, in->args[0], bin(b, KB_ADD, affine(b, xst), bin(b, KB_MUL, i, num(b, stride), DT_I64), DT_I64));
}

static double attr_double(int64_t bits) {
  double d;
  memcpy(&d, &bits, sizeof d);
  return d;
}

static KirExpr *build_upsample(B *b, const Inst *in) {
  const Type *x = ty(b->f, in->args[0]), *r = ty(b->f, in->res);
  if (x->ndim != 4) return NULL;
  DType t = r->dtype;
  int mode = (int)in->attr[0], align = (int)in->attr[1];
  int64_t H = x->dims[2], W = x->dims[3], OH = r->dims[2], OW = r->dims[3];
  int64_t *iv = arena_alloc(b->a, sizeof(int64_t) * (size_t)(2 * OH + 2 * OW));
  double *fv = arena_alloc(b->a, sizeof(double) * (size_t)(2 * OH + 2 * OW));
  int64_t *ih0 = iv, *ih1 = iv + OH, *iw0 = iv + 2 * OH, *iw1 = iw0 + OW;
  double *lh0 = fv, *lh1 = fv + OH, *lw0 = fv + 2 * OH, *lw1 = lw0 + OW;
  int exact = x->dims[1] == 1;   /* PyTorch's channels-last path (kir_upsample_axis) */
  kir_upsample_axis(mode, align, attr_double(in->attr[2]), H, OH, t, exact, ih0, ih1, lh0, lh1);
  kir_upsample_axis(mode, align, attr_double(in->attr[3]), W, OW, t, exact, iw0, iw1, lw0, lw1);
  int64_t xst[IR_MAX_DIMS] = {0};
  cstrides(x, xst);
  xst[2] = xst[3] = 0;
  KirExpr *base = affine(b, xst);   /* the image (n, c) */
  int uh0 = table(b, "uh0", DT_I64, OH, ih0, NULL), uw0 = table(b, "uw0", DT_I64, OW, iw0, NULL);
  KirExpr *r0 = bin(b, KB_ADD, base, bin(b, KB_MUL, at_table(b, uh0, 2), num(b, W), DT_I64), DT_I64);
  if (mode == 0) return load_at(b, in->args[0], bin(b, KB_ADD, r0, at_table(b, uw0, 3), DT_I64));
  int uh1 = table(b, "uh1", DT_I64, OH, ih1, NULL), uw1 = table(b, "uw1", DT_I64, OW, iw1, NULL);
  int th0 = table(b, "lh0", t, OH, NULL, lh0), th1 = table(b, "lh1", t, OH, NULL, lh1);
  int tw0 = table(b, "lw0", t, OW, NULL, lw0), tw1 = table(b, "lw1", t, OW, NULL, lw1);
  KirExpr *r1 = bin(b, KB_ADD, base, bin(b, KB_MUL, at_table(b, uh1, 2), num(b, W), DT_I64), DT_I64);
  KirExpr *rows[2];
  for (int h = 0; h < 2; h++) {   /* (x[row, w0] * lw0 + x[row, w1] * lw1) * lh */
    KirExpr *row = h ? r1 : r0;
    KirExpr *a = bin(b, KB_MUL, load_at(b, in->args[0], bin(b, KB_ADD, row, at_table(b, uw0, 3), DT_I64)),
                     at_table(b, tw0, 3), t);
    KirExpr *c = bin(b, KB_MUL, load_at(b, in->args[0], bin(b, KB_ADD, row, at_table(b, uw1, 3), DT_I64)),
                     at_table(b, tw1, 3), t);
    rows[h] = bin(b, KB_MUL, bin(b, KB_ADD, a, c, t), at_table(b, h ? th1 : th0, 2), t);
  }
  return bin(b, KB_ADD, rows[0], rows[1], t);
}

/* ---- along an axis: a thread per fiber ------------------------------------------------------ */

/* Strides of t broadcast over r (numpy-style), 0 along the axes it is broadcast over. */
static void bstrides(const Type *t, const Type *r, int64_t *st) {
  int64_t cs[IR_MAX_DIMS];
  cstrides(t, cs);
  for (int k = 0; k < r->ndim; k++) {
    int d = k - (r->ndim - t->ndim);
    st[k] = d >= 0 && t->dims[d] != 1 ? cs[d] : 0;
  }
}

/* The fiber space of r along ax: r's axes but ax (perm: which axis of r each is), then one
 * axis for the serial loops, of extent n (their longest). */
typedef struct Fiber {
  int nf, ax;
  int perm[IR_MAX_DIMS];
} Fiber;

static void fiber_space(B *b, const Type *r, int ax, int64_t n, Fiber *fb) {
  Type S = *r;
  S.ndim = 0;
  for (int k = 0; k < r->ndim; k++)
    if (k != ax) fb->perm[S.ndim] = k, S.dims[S.ndim++] = r->dims[k];
  fb->nf = S.ndim, fb->ax = ax;
  S.dims[S.ndim++] = n;
  b->k->space = S;
}

/* The element of an array of strides st (over r's axes) at the fiber, at the serial loop's
 * position along the axis (along: 1) or at none of it. */
static KirIndex at_fiber(const Fiber *fb, const int64_t *st, int along) {
  KirIndex ix;
  memset(&ix, 0, sizeof ix);
  for (int k = 0; k < fb->nf; k++) ix.st[k] = st[fb->perm[k]];
  if (along) ix.st[fb->nf] = st[fb->ax];
  return ix;
}

/* v's element at ix (a literal: itself). */
static KirExpr *value(B *b, ValId v, KirIndex ix) {
  KirExpr *x = ex(b, is_literal(b->f, v) ? KE_LIT : KE_LOAD);
  x->v = v, x->ix = ix, x->dt = ty(b->f, v)->dtype;
  return x;
}

/* The parallel loop over the fibers, and a serial loop of n steps in it. */
static KirStmt *fibers(B *b, const Fiber *fb) { return loop(b, &b->k->body, KIR_SPACE, 0, fb->nf, KIR_PARALLEL); }

static KirStmt *along(B *b, KirStmt *par, const Fiber *fb, int64_t n, unsigned marks) {
  KirStmt *l = loop(b, &par->body, KIR_SERIAL, fb->nf, fb->nf + 1, marks);
  l->n = n;
  return l;
}

/* CPU targets' cumsum along an axis that is not the last: the fibers' last axis (L) in tiles of
 * T elements, the lanes, inside the serial loop, with the running sums an array of T: the
 * space is the other fiber axes, the tiles, the axis and the lanes (a loop over them that
 * vectorises), so that each step along the axis reads T consecutive elements; one thread per
 * fiber read the axis's elements a row apart (cumsum(0) of [256, 4096] 12.2 ms against PyTorch's
 * 5.8). T: the largest divisor of L's extent up to 64, so that there are tiles to share out.
 * The order of each fiber's sum is the same. */
static int64_t lane_tile(int64_t n) {
  int64_t t = n < 64 ? n : 64;
  while (n % t) t--;
  return t;
}

/* The lanes' space of shape s along ax (the other fiber axes, the last axis's tiles, the axis, the
 * lanes): returns T, the tile; *nf, the parallel axes. */
static int64_t lane_space(B *b, const Type *s, int ax, int *nf) {
  int L = s->ndim - 1;
  int64_t T = lane_tile(s->dims[L]);
  Type S = *s;
  S.ndim = 0;
  for (int k = 0; k < L; k++)
    if (k != ax) S.dims[S.ndim++] = s->dims[k];
  *nf = S.ndim + 1;
  S.dims[S.ndim++] = s->dims[L] / T;
  S.dims[S.ndim++] = s->dims[ax];
  S.dims[S.ndim++] = T;
  b->k->space = S;
  return T;
}

/* The element of an array of strides st (over the shape's axes) in lane_space's loops (along: 1,
 * at the serial loop's position; 0, at none of it). */
static KirIndex at_lanes(int ndim, int ax, int64_t T, const int64_t *st, int along) {
  int L = ndim - 1, n = 0;
  KirIndex ix;
  memset(&ix, 0, sizeof ix);
  for (int k = 0; k < L; k++)
    if (k != ax) ix.st[n++] = st[k];
  ix.st[n++] = T * st[L];
  ix.st[n++] = along ? st[ax] : 0;
  ix.st[n] = st[L];
  return ix;
}

static int build_cumsum_lanes(B *b, const Inst *in) {
  const Type *r = ty(b->f, in->res);
  int ax = (int)in->attr[0], nf;
  int64_t rst[IR_MAX_DIMS], xst[IR_MAX_DIMS];
  cstrides(r, rst);
  bstrides(ty(b->f, in->args[0]), r, xst);
  int64_t T = lane_space(b, r, ax, &nf);
  KirIndex ri = at_lanes(r->ndim, ax, T, rst, 1), xi = at_lanes(r->ndim, ax, T, xst, 1);
  KirStmt *par = loop(b, &b->k->body, KIR_SPACE, 0, nf, KIR_PARALLEL);
  int acc = var(b, "acc", r->dtype, 1);
  b->k->vars.data[acc].lanes = T;
  set(b, &par->body, KS_VAR, acc, num(b, 0));
  KirStmt *k = loop(b, &par->body, KIR_SERIAL, nf, nf + 1, in->attr[1] ? KIR_REVERSE : 0);
  k->n = r->dims[ax];
  KirStmt *l = loop(b, &k->body, KIR_LANES, nf + 1, nf + 2, KIR_VECTOR);
  set(b, &l->body, KS_SET, acc, bin(b, KB_ADD, rd(b, acc), value(b, in->args[0], xi), r->dtype));
  KirStmt *st = stmt(b, &l->body, KS_STORE);
  st->v = in->res, st->ix = ri, st->x = un(b, KE_CAST, rd(b, acc), r->dtype);
  return 0;
}

static int build_cumsum(B *b, const Inst *in, int lanes) {
  const Type *r = ty(b->f, in->res);
  int ax = (int)in->attr[0];
  if (lanes && ax != r->ndim - 1 && r->dims[r->ndim - 1] > 1 && r->ndim < IR_MAX_DIMS)
    return build_cumsum_lanes(b, in);
  Fiber fb;
  fiber_space(b, r, ax, r->dims[ax], &fb);
  int64_t rst[IR_MAX_DIMS], xst[IR_MAX_DIMS];
  cstrides(r, rst);
  bstrides(ty(b->f, in->args[0]), r, xst);
  KirStmt *par = fibers(b, &fb);
  int acc = var(b, "acc", r->dtype, 1);
  set(b, &par->body, KS_VAR, acc, num(b, 0));
  KirStmt *k = along(b, par, &fb, r->dims[ax], in->attr[1] ? KIR_REVERSE : 0);
  set(b, &k->body, KS_SET, acc, bin(b, KB_ADD, rd(b, acc), value(b, in->args[0], at_fiber(&fb, xst, 1)), r->dtype));
  KirStmt *st = stmt(b, &k->body, KS_STORE);
  st->v = in->res, st->ix = at_fiber(&fb, rst, 1), st->x = un(b, KE_CAST, rd(b, acc), r->dtype);
  return 0;
}

/* CPU targets' argmax (argmin) along the last axis, whose elements are consecutive: two loops
 * along the row that vectorise as integer reductions over an order key of each element (KE_KEY:
 * -0 as +0, a NaN above every number, below for argmin), the key's maximum (minimum), then the
 * first position with that key, the same index as the loop with its branch (0.86 ms for [256,
 * 4096] against PyTorch's 0.60). */
static int build_argmax_rows(B *b, const Inst *in) {
  const Type *x = ty(b->f, in->args[0]), *r = ty(b->f, in->res);
  int ax = (int)in->attr[0], least = in->attr[1] != 0;
  DType t = x->dtype, kt = t == DT_F32 || t == DT_I32 ? DT_I32 : DT_I64;
  int64_t n = x->dims[ax];
  Fiber fb;
  fiber_space(b, x, ax, n, &fb);
  int64_t rst[IR_MAX_DIMS], xst[IR_MAX_DIMS];
  cstrides(r, rst);
  cstrides(x, xst);
  KirStmt *par = fibers(b, &fb);
  int top = var(b, "top", kt, 0), key = var(b, "key", kt, 0), at = var(b, "at", DT_I64, 0), c = var(b, "c", DT_I64, 0);
  KirExpr *k[3];   /* the key of the first element, of the element in the first loop, in the second */
  for (int j = 0; j < 3; j++) {
    k[j] = value(b, in->args[0], at_fiber(&fb, xst, j > 0));
    if (ir_dtype_is_float(t)) k[j] = un(b, KE_KEY, k[j], kt), k[j]->imm = least ? -1 : 1;
  }
  set(b, &par->body, KS_VAR, top, k[0]);
  KirStmt *l1 = along(b, par, &fb, n, 0);
  set(b, &l1->body, KS_VAR, key, k[1]);
  set(b, &l1->body, KS_SET, top, sel(b, bin(b, least ? KB_LT : KB_GT, rd(b, key), rd(b, top), DT_BOOL), rd(b, key), rd(b, top), kt));
  set(b, &par->body, KS_VAR, at, num(b, n));
  KirStmt *l2 = along(b, par, &fb, n, 0);
  set(b, &l2->body, KS_VAR, c, sel(b, bin(b, KB_EQ, k[2], rd(b, top), DT_BOOL), axis(b, fb.nf), num(b, n), DT_I64));
  set(b, &l2->body, KS_SET, at, sel(b, bin(b, KB_LT, rd(b, c), rd(b, at), DT_BOOL), rd(b, c), rd(b, at), DT_I64));
  KirStmt *st = stmt(b, &par->body, KS_STORE);
  st->v = in->res, st->ix = at_fiber(&fb, rst, 0), st->x = rd(b, at);
  return 0;
}

/* CPU targets' argmax (argmin) along an axis that is not the last (a segmentation's argmax over
 * the classes of [N, C, H, W]): the last axis's fibers as lanes inside the serial loop, as
 * cumsum's, each lane keeping the best order key so far and its position (a later element
 * replaces it only with a greater key: the first of a tie, the first NaN). */
static int build_argmax_lanes(B *b, const Inst *in) {
  const Type *x = ty(b->f, in->args[0]), *r = ty(b->f, in->res);
  int ax = (int)in->attr[0], least = in->attr[1] != 0, nf;
  DType t = x->dtype, kt = t == DT_F32 || t == DT_I32 ? DT_I32 : DT_I64;
  int64_t rst[IR_MAX_DIMS], xst[IR_MAX_DIMS];
  cstrides(r, rst);   /* r: x's shape with the axis of size 1 */
  cstrides(x, xst);
  int64_t T = lane_space(b, x, ax, &nf);
  KirIndex ri = at_lanes(x->ndim, ax, T, rst, 0), xi = at_lanes(x->ndim, ax, T, xst, 1);
  KirStmt *par = loop(b, &b->k->body, KIR_SPACE, 0, nf, KIR_PARALLEL);
  int top = var(b, "top", kt, 0), at = var(b, "at", DT_I64, 0), key = var(b, "key", kt, 0), take = var(b, "take", DT_BOOL, 0);
  b->k->vars.data[top].lanes = b->k->vars.data[at].lanes = T;
  set(b, &par->body, KS_VAR, top, num(b, 0));
  set(b, &par->body, KS_VAR, at, num(b, 0));
  KirStmt *k = loop(b, &par->body, KIR_SERIAL, nf, nf + 1, 0);
  k->n = x->dims[ax];
  KirStmt *l = loop(b, &k->body, KIR_LANES, nf + 1, nf + 2, KIR_VECTOR);
  KirExpr *kv = value(b, in->args[0], xi);
  if (ir_dtype_is_float(t)) {
    kv = un(b, KE_KEY, kv, kt);
    kv->imm = least ? -1 : 1;
  }
  set(b, &l->body, KS_VAR, key, kv);
  KirExpr *first = bin(b, KB_EQ, axis(b, nf), num(b, 0), DT_BOOL);
  set(b, &l->body, KS_VAR, take, bin(b, KB_OR, first, bin(b, least ? KB_LT : KB_GT, rd(b, key), rd(b, top), DT_BOOL), DT_BOOL));
  set(b, &l->body, KS_SET, top, sel(b, rd(b, take), rd(b, key), rd(b, top), kt));
  set(b, &l->body, KS_SET, at, sel(b, rd(b, take), axis(b, nf), rd(b, at), DT_I64));
  KirStmt *out = loop(b, &par->body, KIR_LANES, nf + 1, nf + 2, KIR_VECTOR);
  KirStmt *st = stmt(b, &out->body, KS_STORE);
  st->v = in->res, st->ix = ri, st->x = rd(b, at);
  return 0;
}

static int build_argmax(B *b, const Inst *in, int lanes) {
  const Type *x = ty(b->f, in->args[0]), *r = ty(b->f, in->res);
  int ax = (int)in->attr[0];
  DType t = x->dtype;
  int keyed = t == DT_F32 || t == DT_F64 || t == DT_I32 || t == DT_I64;
  if (lanes && keyed && ax == x->ndim - 1 && x->dims[ax] > 1) return build_argmax_rows(b, in);
  if (lanes && keyed && ax != x->ndim - 1 && x->dims[x->ndim - 1] > 1 && x->ndim < IR_MAX_DIMS)
    return build_argmax_lanes(b, in);
  Fiber fb;
  fiber_space(b, x, ax, x->dims[ax], &fb);
  int64_t rst[IR_MAX_DIMS], xst[IR_MAX_DIMS];
  cstrides(r, rst);   /* r: x's shape with the axis of size 1 */
  cstrides(x, xst);
  KirStmt *par = fibers(b, &fb);
  int at = var(b, "at", DT_I64, 0), mx = var(b, "mx", t, 0), v = var(b, "v", t, 0);
  KirExpr *zero = ex(b, KE_FLT);
  zero->dt = t;
  set(b, &par->body, KS_VAR, at, num(b, 0));
  set(b, &par->body, KS_VAR, mx, zero);
  KirStmt *k = along(b, par, &fb, x->dims[ax], 0);
  set(b, &k->body, KS_VAR, v, value(b, in->args[0], at_fiber(&fb, xst, 1)));
  /* the first element; a better one (not against a NaN); a NaN (not after one) */
  KirExpr *first = bin(b, KB_EQ, axis(b, fb.nf), num(b, 0), DT_BOOL);
  KirExpr *better = bin(b, in->attr[1] ? KB_LT : KB_GT, rd(b, v), rd(b, mx), DT_BOOL);
  KirExpr *take = bin(b, KB_OR, first, better, DT_BOOL);
  if (ir_dtype_is_float(t)) {
    KirExpr *num_mx = un(b, KE_NOT, un(b, KE_ISNAN, rd(b, mx), DT_BOOL), DT_BOOL);
    take = bin(b, KB_OR, bin(b, KB_OR, first, bin(b, KB_AND, better, num_mx, DT_BOOL), DT_BOOL),
               bin(b, KB_AND, un(b, KE_ISNAN, rd(b, v), DT_BOOL), num_mx, DT_BOOL), DT_BOOL);
  }
  KirStmt *if_ = stmt(b, &k->body, KS_IF);
  if_->x = take;
  set(b, &if_->body, KS_SET, mx, rd(b, v));
  set(b, &if_->body, KS_SET, at, axis(b, fb.nf));
  KirStmt *st = stmt(b, &par->body, KS_STORE);
  st->v = in->res, st->ix = at_fiber(&fb, rst, 0), st->x = rd(b, at);
  return 0;
}

static int build_scatter_add(B *b, const Inst *in) {
  const Type *r = ty(b->f, in->res), *src = ty(b->f, in->args[2]);
  int ax = (int)in->attr[0];
  int64_t R = r->dims[ax], K = src->dims[ax];
  Fiber fb;
  fiber_space(b, r, ax, R > K ? R : K, &fb);
  int64_t rst[IR_MAX_DIMS], bst[IR_MAX_DIMS], sst[IR_MAX_DIMS], ist[IR_MAX_DIMS];
  cstrides(r, rst);
  bstrides(ty(b->f, in->args[0]), r, bst);
  cstrides(src, sst);
  bstrides(ty(b->f, in->args[1]), src, ist);
  KirStmt *par = fibers(b, &fb);
  KirStmt *j = along(b, par, &fb, R, 0);   /* the base's fiber */
  KirStmt *st = stmt(b, &j->body, KS_STORE);
  st->v = in->res, st->ix = at_fiber(&fb, rst, 1), st->x = value(b, in->args[0], at_fiber(&fb, bst, 1));
  KirExpr *inside = NULL, *ro = num(b, 0);   /* src has the fiber; the fiber's offset in r */
  for (int k = 0; k < fb.nf; k++) {
    int d = fb.perm[k];
    if (r->dims[d] == 1) continue;
    ro = bin(b, KB_ADD, ro, bin(b, KB_MUL, axis(b, k), num(b, rst[d]), DT_I64), DT_I64);
    if (src->dims[d] < r->dims[d]) {
      KirExpr *c = bin(b, KB_LT, axis(b, k), num(b, src->dims[d]), DT_BOOL);
      inside = inside ? bin(b, KB_AND, inside, c, DT_BOOL) : c;
    }
  }
  KirStmt *blk = par;
  if (inside) {
    blk = stmt(b, &par->body, KS_IF);
    blk->x = inside;
  }
  KirStmt *k = loop(b, &blk->body, KIR_SERIAL, fb.nf, fb.nf + 1, 0);
  k->n = K;
  int ix = var(b, "ix", DT_I64, 0);
  set(b, &k->body, KS_VAR, ix, value(b, in->args[1], at_fiber(&fb, ist, 1)));
  KirExpr *off = bin(b, KB_ADD, ro, bin(b, KB_MUL, rd(b, ix), num(b, rst[ax]), DT_I64), DT_I64);
  KirStmt *add = stmt(b, &k->body, KS_STOREAT);
  add->v = in->res, add->at = off;
  add->x = bin(b, KB_ADD, load_at(b, in->res, off), value(b, in->args[2], at_fiber(&fb, sst, 1)), r->dtype);
  return 0;
}

Kir *kir_build_op(Arena *a, const Func *f, const Inst *in, int lanes) {
  if (in->op == IR_CUMSUM || in->op == IR_ARGMAX || in->op == IR_SCATTER_ADD) {
    if (ty(f, in->res)->ndim == 0) return NULL;
    B b = {a, f, arena_alloc(a, sizeof(Kir))};
    memset(b.k, 0, sizeof *b.k);
    b.k->f = f;
    b.k->op = in;
    if (in->op == IR_CUMSUM) build_cumsum(&b, in, lanes);
    else if (in->op == IR_ARGMAX) build_argmax(&b, in, lanes);
    else build_scatter_add(&b, in);
    return b.k;
  }
  if (in->op != IR_PAD && in->op != IR_GATHER && in->op != IR_UPSAMPLE) return NULL;
  const Type *r = ty(f, in->res);
  if (r->ndim == 0 || ir_numel(r) == 0) return NULL;
  for (int k = 0; k < in->nargs; k++)
    if (is_literal(f, in->args[k])) return NULL;
  B b = {a, f, arena_alloc(a, sizeof(Kir))};
  memset(b.k, 0, sizeof *b.k);
  b.k->f = f;
  b.k->op = in;
  b.k->space = *r;
  KirExpr *x = in->op == IR_PAD ? build_pad(&b, in) : in->op == IR_GATHER ? build_gather(&b, in) : build_upsample(&b, in);
  if (!x) return NULL;
  KirStmt *loop = arena_alloc(a, sizeof *loop), *st = arena_alloc(a, sizeof *st);
  memset(loop, 0, sizeof *loop);
  memset(st, 0, sizeof *st);
  loop->kind = KS_LOOP, loop->v = -1;
  loop->loop = KIR_SPACE;
  loop->from = 0, loop->to = r->ndim;
  loop->marks = KIR_PARALLEL;
  st->kind = KS_STORE, st->v = in->res, st->x = x;
  cstrides(r, st->ix.st);
  vec_push(a, &loop->body, st);
  vec_push(a, &b.k->body, loop);
  return b.k;
}

/* ---- UPSAMPLE's source positions ----------------------------------------------------------- */

/* The source pixels and weights of one axis of an UPSAMPLE from `in` to `out`
 * positions, as PyTorch 1.13 computes them (UpSample.h, UpSampleKernel.cpp):
 * nearest: nearest_idx, in float; bilinear: area_pixel_compute_scale,
 * area_pixel_compute_source_index and compute_source_index_and_lambda in the
 * tensor's opmath type (float for f32, double for f64). scale: the
 * scale_factor given, <= 0 for none. exact: nearest_idx's shortcuts for
 * out == in and out == 2 in, which differ from the formula when a scale factor
 * like 1.1 gives out == in: PyTorch 1.13 takes them in the backward always,
 * in the forward only on its channels-last path, i.e. for inputs with one
 * channel (then a contiguous tensor is channels-last contiguous too). */
void kir_upsample_axis(int mode, int align, double scale, int64_t in, int64_t out, DType t, int exact,
                       int64_t *i0, int64_t *i1, double *l0, double *l1) {
  for (int64_t o = 0; o < out; o++) {
    if (mode == 0) {
      if (exact && out == in) i0[o] = o;
      else if (exact && out == 2 * in) i0[o] = o >> 1;
      else {
        float sc = scale > 0 ? (float)(1.0 / scale) : (float)in / (float)out;
        int64_t ix = (int64_t)floorf((float)o * sc);
        i0[o] = ix < in - 1 ? ix : in - 1;
      }
      i1[o] = i0[o], l0[o] = 1, l1[o] = 0;
      continue;
    }
    if (out == in) {
      i0[o] = i1[o] = o, l0[o] = 1, l1[o] = 0;
      continue;
    }
    double real, lam;
    if (t == DT_F32) {
      float sc = align ? (out > 1 ? (float)(in - 1) / (float)(out - 1) : 0.0f)
                       : scale > 0 ? (float)(1.0 / scale) : (float)in / (float)out;
      float r = align ? sc * (float)o : (float)((double)sc * ((double)o + 0.5) - 0.5);
      if (!align && r < 0) r = 0;
      int64_t ix = (int64_t)r;
      float lf = r - (float)ix;
      lf = lf < 0 ? 0 : lf > 1 ? 1 : lf;
      real = r, lam = lf;
      l0[o] = 1.0f - lf;
    } else {
      double sc = align ? (out > 1 ? (double)(in - 1) / (double)(out - 1) : 0.0)
                        : scale > 0 ? 1.0 / scale : (double)in / (double)out;
      double r = align ? sc * (double)o : sc * ((double)o + 0.5) - 0.5;
      if (!align && r < 0) r = 0;
      int64_t ix = (int64_t)r;
      double ld = r - (double)ix;
      ld = ld < 0 ? 0 : ld > 1 ? 1 : ld;
      real = r, lam = ld;
      l0[o] = 1.0 - ld;
    }
    i0[o] = (int64_t)real;
    i1[o] = i0[o] + (i0[o] < in - 1 ? 1 : 0);
    l1[o] = lam;
  }
}
