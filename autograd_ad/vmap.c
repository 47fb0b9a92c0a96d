/* vmap.c - the batch axis (vmap as an IR -> IR pass): the instructions of a
 * function that depend on some values, rewritten to compute B instances at once
 * on those values with a leading batch axis. Each primitive's batching rule is
 * its row of ir/batch.def (beside ops.def's rows and the VJP/JVP rules); the
 * rules below implement the row kinds. torchlib/functional.c uses it for
 * torch.func.vmap and for jacobians: one AD sweep whose seed (cotangent or
 * tangent) is batched over an identity basis, instead of one sweep per direction. */
#include <stdlib.h>
#include <string.h>
#include "ad_int.h"

/* the rule kinds of ir/batch.def's rows (described there) */
enum { B_NONE, B_ELEM, B_REDUCE, B_RESHAPE, B_PERMUTE, B_BROADCAST, B_SLICE, B_PAD, B_AXIS, B_MATMUL, B_FOLDN, B_INDEX };

typedef struct BatchRow {
  int rule, arg;
} BatchRow;

static const BatchRow batch_rows[IR__COUNT] = {
#define BATCH(id, rule, arg) [IR_##id] = {rule, arg},
#include "../ir/batch.def"
#undef BATCH
};

typedef struct Bt {
  Program *p;
  Func *f;
  const Inst *in;  /* the instruction being batched */
  int64_t B;       /* the batch size */
  ValId *bv;       /* per value: its batched form, or -1 (not batched) */
  const char *why; /* a refusal's reason */
} Bt;

static Type with_batch(int64_t B, const Type *t) {
  Type r = *t;
  r.ndim = t->ndim + 1;
  r.dims[0] = B;
  memcpy(r.dims + 1, t->dims, sizeof(int64_t) * (size_t)t->ndim);
  return r;
}

static Type *ty(Bt *b, ValId v) { return ir_type(b->f, v); }

static ValId emit(Bt *b, Op op, const ValId *args, int n, Type res, const int64_t *attr, double fattr) {
  int nattr = ir_op_nattrs(op, &res, n > 0 ? ty(b, args[0]) : NULL, attr);
  return ir_emit(b->p, b->f, op, args, n, res, attr, attr ? nattr : 0, fattr, b->in->loc,
                 ir_val(b->f, b->in->res)->name);
}

static ValId reshape(Bt *b, ValId v, const int64_t *dims, int nd) {
  Type t = *ty(b, v);
  t.ndim = nd;
  memcpy(t.dims, dims, sizeof(int64_t) * (size_t)nd);
  if (ir_type_eq(&t, ty(b, v))) return v;
  return emit(b, IR_RESHAPE, &v, 1, t, NULL, 0);
}

static ValId permute(Bt *b, ValId v, const int64_t *perm) {
  Type t = *ty(b, v);
  for (int i = 0; i < t.ndim; i++) t.dims[i] = ty(b, v)->dims[perm[i]];
  return emit(b, IR_PERMUTE, &v, 1, t, perm, 0);
}

/* operand v's batched form with 1s after the batch axis up to rank 1 + rank */
static ValId lift(Bt *b, ValId v, int rank) {
  ValId x = b->bv[v];
  const Type *t = ty(b, v);
  int64_t d[IR_MAX_DIMS];
  int pad = rank - t->ndim;
  d[0] = b->B;
  for (int i = 0; i < pad; i++) d[1 + i] = 1;
  for (int i = 0; i < t->ndim; i++) d[1 + pad + i] = t->dims[i];
  return reshape(b, x, d, rank + 1);
}

/* operand v with the batch axis, an unbatched one broadcast to B copies */
static ValId full(Bt *b, ValId v) {
  if (b->bv[v] >= 0) return b->bv[v];
  Type r = with_batch(b->B, ty(b, v));
  Type t1 = with_batch(1, ty(b, v));
  ValId x = emit(b, IR_RESHAPE, &v, 1, t1, NULL, 0);
  return emit(b, IR_BROADCAST, &x, 1, r, NULL, 0);
}

static ValId refuse(Bt *b, const char *why) {
  b->why = why;
  return -1;
}

static ValId b_elem(Bt *b, Type r) {
  const Inst *in = b->in;
  ValId a[3];
  for (int k = 0; k < in->nargs; k++)
    a[k] = b->bv[in->args[k]] >= 0 ? lift(b, in->args[k], ty(b, in->res)->ndim) : in->args[k];
  return emit(b, in->op, a, in->nargs, r, in->attr, in->fattr);
}

static ValId b_matmul(Bt *b, Type r) {
  const Inst *in = b->in;
  ValId x = in->args[0], w = in->args[1];
  int nd = ty(b, in->res)->ndim;
  if (b->bv[w] < 0 && ty(b, w)->ndim == 2 && !in->attr[0]) {
    /* [B, ..., M, K] x [K, N]: one GEMM over B * ... * M rows */
    const Type *tx = ty(b, x);
    int64_t rows = b->B, d2[2];
    for (int i = 0; i + 1 < tx->ndim; i++) rows *= tx->dims[i];
    d2[0] = rows;
    d2[1] = tx->dims[tx->ndim - 1];
    ValId a[2] = {reshape(b, b->bv[x], d2, 2), w};
    Type t = r;
    t.ndim = 2;
    t.dims[0] = rows;
    t.dims[1] = r.dims[r.ndim - 1];
    ValId m = emit(b, IR_MATMUL, a, 2, t, in->attr, 0);
    return reshape(b, m, r.dims, r.ndim);
  }
  const Type *tw = ty(b, w);
  if (b->bv[x] < 0 && ty(b, x)->ndim == 2 && tw->ndim == 2 && tw->dims[in->attr[1] ? 0 : 1] == 1) {
    /* W [M, K] times a batched column [B, K, 1] (W @ x): one GEMM [B, K] x W^T */
    int64_t K = tw->dims[in->attr[1] ? 1 : 0], d2[2] = {b->B, K}, attr[2] = {0, !in->attr[0]};
    ValId a[2] = {reshape(b, b->bv[w], d2, 2), x};
    Type t = r;
    t.ndim = 2;
    t.dims[1] = r.dims[1];
    ValId m = emit(b, IR_MATMUL, a, 2, t, attr, 0);
    return reshape(b, m, r.dims, r.ndim);
  }
  ValId a[2] = {b->bv[x] >= 0 ? lift(b, x, nd) : x, b->bv[w] >= 0 ? lift(b, w, nd) : w};
  return emit(b, IR_MATMUL, a, 2, r, in->attr, 0);
}

/* an [N, C, ...] operand as [N, B*C, ...] (the batch as channel groups) */
static ValId to_groups(Bt *b, ValId v) {
  ValId x = full(b, v); /* [B, N, C, H, W] */
  const Type *t = ty(b, x);
  int64_t perm[5] = {1, 0, 2, 3, 4}, d[4] = {t->dims[1], t->dims[0] * t->dims[2], t->dims[3], t->dims[4]};
  return reshape(b, permute(b, x, perm), d, 4);
}

/* [N, B*C, ...] back to [B, N, C, ...] */
static ValId from_groups(Bt *b, ValId v) {
  const Type *t = ty(b, v);
  int64_t d[5] = {t->dims[0], b->B, t->dims[1] / b->B, t->dims[2], t->dims[3]}, perm[5] = {1, 0, 2, 3, 4};
  return permute(b, reshape(b, v, d, 5), perm);
}

/* a convolution with batched weights (or a weight gradient): B*G groups */
static ValId b_conv_groups(Bt *b) {
  const Inst *in = b->in;
  const Type *tr = ty(b, in->res);
  int64_t attr[IR_MAX_ATTRS];
  memcpy(attr, in->attr, sizeof attr);
  attr[6] = in->attr[6] * b->B;
  Type r = *tr;
  ValId a[2];
  if (in->op == IR_CONV2D_BWD_WEIGHT) { /* x, g -> dw[O, C/G, KH, KW] */
    a[0] = to_groups(b, in->args[0]);
    a[1] = to_groups(b, in->args[1]);
    r.dims[0] *= b->B;
    ValId dw = emit(b, in->op, a, 2, r, attr, 0);
    Type rb = with_batch(b->B, tr);
    return reshape(b, dw, rb.dims, rb.ndim);
  }
  /* conv2d(x, w) -> [N, O, ...]; conv2d_bwd_input(g, w) -> [N, C, ...] */
  a[0] = to_groups(b, in->args[0]);
  ValId w = full(b, in->args[1]);
  const Type *tw = ty(b, w);
  int64_t dw[4] = {tw->dims[0] * tw->dims[1], tw->dims[2], tw->dims[3], tw->dims[4]};
  a[1] = reshape(b, w, dw, 4);
  r.dims[1] *= b->B;
  return from_groups(b, emit(b, in->op, a, 2, r, attr, 0));
}

static ValId b_foldn(Bt *b, int mask, Type r) {
  const Inst *in = b->in;
  int conv = in->op == IR_CONV2D || in->op == IR_CONV2D_BWD_INPUT || in->op == IR_CONV2D_BWD_WEIGHT;
  for (int k = 0; k < in->nargs; k++)
    if (!(mask >> k & 1) && b->bv[in->args[k]] >= 0) {
      if (conv) return b_conv_groups(b);
      return refuse(b, "no batching rule for a batched operand other than the images");
    }
  if (in->op == IR_CONV2D_BWD_WEIGHT) return b_conv_groups(b);
  ValId a[4];
  for (int k = 0; k < in->nargs; k++) {
    a[k] = in->args[k];
    if (!(mask >> k & 1)) continue;
    ValId x = full(b, in->args[k]);
    const Type *t = ty(b, x);
    int64_t d[IR_MAX_DIMS];
    d[0] = t->dims[0] * t->dims[1];
    memcpy(d + 1, t->dims + 2, sizeof(int64_t) * (size_t)(t->ndim - 2));
    a[k] = reshape(b, x, d, t->ndim - 1);
  }
  Type t = *ty(b, in->res);
  t.dims[0] *= b->B;
  ValId y = emit(b, in->op, a, in->nargs, t, in->attr, in->fattr);
  return reshape(b, y, r.dims, r.ndim);
}

/* [B, ..., D] as [..., B*D] (the batch beside the row: one wider table) */
static ValId batch_to_rows(Bt *b, ValId v) {
  const Type *t = ty(b, v);
  int64_t perm[IR_MAX_DIMS], d[IR_MAX_DIMS];
  int n = t->ndim;
  for (int i = 0; i + 2 < n; i++) perm[i] = i + 1;
  perm[n - 2] = 0;
  perm[n - 1] = n - 1;
  for (int i = 0; i + 2 < n; i++) d[i] = t->dims[i + 1];
  d[n - 2] = t->dims[0] * t->dims[n - 1];
  return reshape(b, permute(b, v, perm), d, n - 1);
}

/* [..., B*D] back to [B, ..., D] */
static ValId rows_to_batch(Bt *b, ValId v) {
  const Type *t = ty(b, v);
  int64_t perm[IR_MAX_DIMS], d[IR_MAX_DIMS];
  int n = t->ndim + 1;
  for (int i = 0; i + 1 < t->ndim; i++) d[i] = t->dims[i];
  d[n - 2] = b->B;
  d[n - 1] = t->dims[t->ndim - 1] / b->B;
  perm[0] = n - 2;
  for (int i = 1; i + 1 < n; i++) perm[i] = i - 1;
  perm[n - 1] = n - 1;
  return permute(b, reshape(b, v, d, n), perm);
}

/* A table per sample ([B, V, D]) read as one table of B*V rows: sample b's index
 * i becomes b*V + i. An index outside [0, V) becomes -1, so that it still stops
 * the entry instead of reading another sample's table. ix: the batched index. */
static ValId stacked_index(Bt *b, ValId ix, int64_t V) {
  Type t = *ty(b, ix), it = {0}, bt = t;
  it.dtype = t.dtype;
  it.ndim = 1;
  it.dims[0] = b->B;
  bt.dtype = DT_BOOL;
  int64_t ia[2] = {0, V}, d[IR_MAX_DIMS];
  d[0] = b->B;
  for (int i = 1; i < t.ndim; i++) d[i] = 1;
  ValId off = reshape(b, emit(b, IR_IOTA, NULL, 0, it, ia, 0), d, t.ndim);
  ValId zero = ir_const(b->p, b->f, t.dtype, 0, b->in->loc), vV = ir_const(b->p, b->f, t.dtype, (double)V, b->in->loc);
  ValId m1 = ir_const(b->p, b->f, t.dtype, -1, b->in->loc);
  ValId lo = emit(b, IR_CMP_GE, (ValId[]){ix, zero}, 2, bt, NULL, 0);
  ValId hi = emit(b, IR_CMP_LT, (ValId[]){ix, vV}, 2, bt, NULL, 0);
  ValId ok = emit(b, IR_WHERE, (ValId[]){lo, hi, lo}, 3, bt, NULL, 0);
  ValId sum = emit(b, IR_ADD, (ValId[]){ix, off}, 2, t, NULL, 0);
  return emit(b, IR_WHERE, (ValId[]){ok, sum, m1}, 3, t, NULL, 0);
}

/* embedding(table, index) and embedding_bwd(index, g): a batched index alone
 * indexes the shared table; a batched table (or gradient) with a shared index
 * is one table with B*D columns; a batched table with batched indices (a table
 * per sample, as in an ensemble; per-sample gradients of an embedding) is one
 * table of B*V rows read (written) at stacked_index. */
static ValId b_index(Bt *b, Type r) {
  const Inst *in = b->in;
  if (in->op == IR_EMBEDDING) {
    ValId w = in->args[0], idx = in->args[1];
    if (b->bv[w] < 0) {
      ValId a[2] = {w, b->bv[idx]};
      return emit(b, in->op, a, 2, r, in->attr, 0);
    }
    if (b->bv[idx] >= 0) {
      const Type *tw = ty(b, w);
      int64_t d2[2] = {b->B * tw->dims[0], tw->dims[1]};
      ValId a[2] = {reshape(b, b->bv[w], d2, 2), stacked_index(b, b->bv[idx], tw->dims[0])};
      return emit(b, in->op, a, 2, r, in->attr, 0);
    }
    ValId a[2] = {batch_to_rows(b, b->bv[w]), idx};
    Type t = *ty(b, in->res);
    t.dims[t.ndim - 1] *= b->B;
    return rows_to_batch(b, emit(b, in->op, a, 2, t, in->attr, 0));
  }
  ValId idx = in->args[0], g = in->args[1];
  if (b->bv[idx] >= 0) {
    /* a gradient table per sample: B*V rows; the padding row's gradient is masked
     * out before (its index moved by the stacking) */
    const Type *tr = ty(b, in->res);
    ValId ix = b->bv[idx], gb = full(b, g);
    Type tg = *ty(b, gb), tc = *ty(b, ix);
    int64_t attr[IR_MAX_ATTRS] = {0};
    if (in->attr[0]) {
      tc.dtype = DT_BOOL;
      ValId p = ir_const(b->p, b->f, ty(b, ix)->dtype, (double)in->attr[1], b->in->loc);
      ValId c = emit(b, IR_CMP_EQ, (ValId[]){ix, p}, 2, tc, NULL, 0);
      int64_t d[IR_MAX_DIMS];
      memcpy(d, tc.dims, sizeof(int64_t) * (size_t)tc.ndim);
      d[tc.ndim] = 1;
      c = reshape(b, c, d, tc.ndim + 1);
      ValId z = ir_const(b->p, b->f, tg.dtype, 0, b->in->loc);
      gb = emit(b, IR_WHERE, (ValId[]){c, z, gb}, 3, tg, NULL, 0);
    }
    Type t = *tr;
    t.dims[0] *= b->B;
    ValId a[2] = {stacked_index(b, ix, tr->dims[0]), gb};
    return reshape(b, emit(b, in->op, a, 2, t, attr, 0), r.dims, r.ndim);
  }
  ValId a[2] = {idx, batch_to_rows(b, b->bv[g])};
  Type t = *ty(b, in->res);
  t.dims[1] *= b->B;
  return rows_to_batch(b, emit(b, in->op, a, 2, t, in->attr, 0));
}

/* One instruction's batched result, or -1 (b->why says why). */
static ValId batch_inst(Bt *b) {
  const Inst *in = b->in;
  BatchRow row = batch_rows[in->op];
  int64_t attr[IR_MAX_ATTRS] = {0};
  ValId x = in->nargs > 0 ? in->args[0] : -1;
  int nd = ty(b, in->res)->ndim, room = nd < IR_MAX_DIMS;
  for (int k = 0; k < in->nargs; k++) room &= ty(b, in->args[k])->ndim < IR_MAX_DIMS;
  if (!room) return refuse(b, "the batch axis would make more than 8 dimensions");
  Type r = with_batch(b->B, ty(b, in->res));
  switch (row.rule) {
  case B_ELEM: return b_elem(b, r);
  case B_REDUCE: attr[0] = in->attr[0] << 1; return emit(b, in->op, &b->bv[x], 1, r, attr, 0);
  case B_RESHAPE: return emit(b, in->op, &b->bv[x], 1, r, NULL, 0);
  case B_PERMUTE:
    for (int i = 0; i < nd; i++) attr[i + 1] = in->attr[i] + 1;
    return emit(b, in->op, &b->bv[x], 1, r, attr, 0);
  case B_BROADCAST: {
    ValId a = lift(b, x, nd);
    return emit(b, in->op, &a, 1, r, NULL, 0);
  }
  case B_SLICE: {
    int ra = ty(b, x)->ndim;
    attr[1] = 1;
    memcpy(attr + 2, in->attr, sizeof(int64_t) * (size_t)(2 * ra));
    return emit(b, in->op, &b->bv[x], 1, r, attr, 0);
  }
  case B_PAD:
    attr[0] = in->attr[0];
    memcpy(attr + 2, in->attr + 1, sizeof(int64_t) * (size_t)nd);
    return emit(b, in->op, &b->bv[x], 1, r, attr, in->fattr);
  case B_AXIS: {
    ValId *a = malloc(sizeof(ValId) * (size_t)in->nargs);
    if (!a) BUG("out of memory");
    for (int k = 0; k < in->nargs; k++) a[k] = full(b, in->args[k]);
    memcpy(attr, in->attr, sizeof attr);
    attr[0] = in->attr[0] + 1;
    ValId y = emit(b, in->op, a, in->nargs, r, attr, in->fattr);
    free(a);
    return y;
  }
  case B_MATMUL: return b_matmul(b, r);
  case B_FOLDN: return b_foldn(b, row.arg, r);
  case B_INDEX: return b_index(b, r);
  default: return refuse(b, "no batching rule");
  }
}

int ad_batch(Program *p, Func *f, int from, const ValId *in, const ValId *bin, int nin, int64_t B, const ValId *outs,
             int nouts, ValId *bouts, const char **why) {
  ir_pass_event(p, f, "vmap", 0);
  int nv = f->values.len, ni = f->insts.len, start = f->insts.len, failed = -1;
  ValId *bv = malloc(sizeof(ValId) * ((size_t)nv + 1));
  if (!bv) BUG("out of memory");
  for (int i = 0; i < nv; i++) bv[i] = -1;
  Bt b = {p, f, NULL, B, bv, NULL};
  for (int i = 0; i < nin; i++) {
    Type want = with_batch(B, ir_type(f, in[i]));
    if (!ir_type_eq(&want, ir_type(f, bin[i]))) BUG("ad_batch: a batched input's type is not [B] + its value's");
    bv[in[i]] = bin[i];
  }
  for (int i = from; i < ni && failed < 0; i++) {
    Inst in_ = f->insts.data[i]; /* a copy: emitting grows f->insts */
    if (in_.dead) continue;
    int any = 0;
    for (int k = 0; k < in_.nargs; k++) any |= bv[in_.args[k]] >= 0;
    if (!any) continue;
    b.in = &in_;
    int first = f->insts.len;
    ValId r = batch_inst(&b);
    if (r < 0) {
      failed = i;
      break;
    }
    for (int j = first; j < f->insts.len; j++) f->insts.data[j].nograd = in_.nograd;
    Type want = with_batch(B, ir_type(f, in_.res));
    if (!ir_type_eq(&want, ir_type(f, r))) {
      char b1[128], b2[128];
      BUG("batching rule of '%s' gave %s, expected %s", ir_ops[in_.op].name, ir_type_str(ir_type(f, r), b1, sizeof b1),
          ir_type_str(&want, b2, sizeof b2));
    }
    bv[in_.res] = r;
  }
  /* state written from batched values (running statistics of batch norm in
   * training mode, a parameter update) would keep one sample's: refused */
  for (int i = 0; failed < 0 && i < f->updates.len; i++) {
    ValId u = f->updates.data[i];
    if (u < nv && bv[u] >= 0 && f->values.data[u].kind == V_INST) {
      failed = f->values.data[u].def;
      b.why =
          "it computes a state update (running statistics, a parameter write) from batched values, which would keep "
          "one sample's";
    }
  }
  if (failed >= 0) {
    /* nothing half-done stays: the caller reports the instruction (or unrolls) */
    for (int j = start; j < f->insts.len; j++) f->insts.data[j].dead = 1;
    if (why) *why = b.why;
  } else {
    /* The unbatched originals (and the inputs' definitions) are dead now: only
     * code that escaped the batched function (a value stored outside it) could
     * still read them, and it must not compile into one sample's values: it
     * then reads a value with no definition, which the verifier reports. */
    for (int i = from; i < ni; i++)
      if (!f->insts.data[i].dead && bv[f->insts.data[i].res] >= 0) f->insts.data[i].dead = f->insts.data[i].retired = 1;
    for (int i = 0; i < nin; i++)
      if (f->values.data[in[i]].kind == V_INST)
        f->insts.data[f->values.data[in[i]].def].dead = f->insts.data[f->values.data[in[i]].def].retired = 1;
    for (int i = 0; i < nouts; i++) {
      b.in = &(Inst){.res = outs[i], .loc = f->loc};
      bouts[i] = bv[outs[i]] >= 0 ? bv[outs[i]] : full(&b, outs[i]);
    }
  }
  free(bv);
  ir_pass_event(p, f, "vmap", 1);
  return failed;
}
