/* interp.c - the reference evaluator: one IR instruction on host arrays, with
 * the meaning its ops.def row gives it. Compile-time folding (torchlib/
 * consteval.c), the decode evaluator (torchlib/decode.c), int8 calibration
 * (compiler/quantize.c) and the tests use it; an op it does not know is
 * refused (0), never approximated.
 *
 * Values are doubles holding values of their dtype (f32 rounded to float,
 * integers exact below 2**53). Elementwise ops evaluate their ops.def template
 * in the compute type (elem.c); sums and products accumulate in double and are
 * rounded once to the result's dtype, as the generated code's ctc_sum and GEMMs
 * accumulate (in double, or in float with a different order: within float
 * rounding of this). */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "ir.h"

/* row-major strides of t */
static void strides(const Type *t, int64_t *s) {
  int64_t m = 1;
  for (int d = t->ndim - 1; d >= 0; d--) {
    s[d] = m;
    m *= t->dims[d];
  }
}

/* strides of operand t over the axes of result r (numpy broadcasting: 0 on
 * broadcast axes) */
static void bstrides(const Type *t, const Type *r, int64_t *st) {
  int64_t s[IR_MAX_DIMS];
  strides(t, s);
  for (int k = 0; k < r->ndim; k++) {
    int j = k - (r->ndim - t->ndim);
    st[k] = j >= 0 && t->dims[j] != 1 ? s[j] : 0;
  }
}

/* the value rounded to dtype t, as a store into a tensor of that dtype */
static double round_to(DType t, double v) {
  double r = v;
  ir_elem_eval(IR_CAST, DT_F64, t, &v, &r);
  return r;
}

/* An elementwise op over whole arrays. ir_elem_eval reads the op's template text for every
 * element; the operands of a folded constant (a causal mask, a table) repeat in runs, so an
 * element whose operands are bit for bit the previous element's takes its result (the op is a
 * function of its operands: the same value; 1.3 s -> 0.1 s of compiling the bench gpt, whose
 * masks ir/attn.c evaluates). */
static int eval_elem(Op op, int nargs, const Type *ta, const double *const *a, const Type *tr, double *out) {
  int64_t st[3][IR_MAX_DIMS], idx[IR_MAX_DIMS] = {0}, off[3] = {0, 0, 0}, n = ir_numel(tr);
  DType ct = ir_elem_compute_type(op, ta[0].dtype, tr->dtype);
  for (int k = 0; k < nargs; k++) bstrides(&ta[k], tr, st[k]);
  double px[3] = {0, 0, 0};
  for (int64_t i = 0; i < n; i++) {
    double x[3] = {0, 0, 0};
    for (int k = 0; k < nargs; k++) x[k] = a[k][off[k]];
    if (i > 0 && !memcmp(x, px, sizeof x)) out[i] = out[i - 1];
    else if (!ir_elem_eval(op, ct, tr->dtype, x, &out[i])) return 0;
    memcpy(px, x, sizeof x);
    for (int d = tr->ndim - 1; d >= 0; d--) {   /* next index, offsets kept in step */
      idx[d]++;
      for (int k = 0; k < nargs; k++) off[k] += st[k][d];
      if (idx[d] < tr->dims[d]) break;
      for (int k = 0; k < nargs; k++) off[k] -= st[k][d] * idx[d];
      idx[d] = 0;
    }
  }
  return 1;
}

/* reduce_sum / reduce_max over the axes in mask (kept with size 1) */
static void eval_reduce(Op op, int64_t mask, const Type *tx, const double *x, const Type *tr, double *out) {
  int64_t idx[IR_MAX_DIMS] = {0}, n = ir_numel(tx), nr = ir_numel(tr);
  for (int64_t e = 0; e < nr; e++) out[e] = op == IR_REDUCE_SUM ? 0 : -INFINITY;
  for (int64_t e = 0; e < n; e++) {
    int64_t o = 0;
    for (int k = 0; k < tx->ndim; k++) o = o * tr->dims[k] + (mask >> k & 1 ? 0 : idx[k]);
    double v = x[e];
    if (op == IR_REDUCE_SUM) out[o] += v;
    else if (!isnan(out[o]) && (isnan(v) || v > out[o])) out[o] = v;   /* NaN propagates */
    for (int k = tx->ndim - 1; k >= 0 && ++idx[k] == tx->dims[k]; k--) idx[k] = 0;
  }
  for (int64_t e = 0; e < nr; e++) out[e] = round_to(tr->dtype, out[e]);
}

/* result element i read from operand element off (a data movement) */
static int eval_move(Op op, const int64_t *attr, const Type *tx, const double *x, const Type *tr, double *out) {
  int64_t sx[IR_MAX_DIMS], bs[IR_MAX_DIMS], idx[IR_MAX_DIMS] = {0}, n = ir_numel(tr);
  strides(tx, sx);
  bstrides(tx, tr, bs);
  for (int64_t i = 0; i < n; i++) {
    int64_t off = 0;
    switch (op) {
    case IR_RESHAPE: case IR_DETACH: off = i; break;
    case IR_BROADCAST: for (int d = 0; d < tr->ndim; d++) off += idx[d] * bs[d]; break;
    case IR_PERMUTE: for (int d = 0; d < tr->ndim; d++) off += idx[d] * sx[attr[d]]; break;
    case IR_SLICE: for (int d = 0; d < tr->ndim; d++) off += (attr[2 * d] + idx[d] * attr[2 * d + 1]) * sx[d]; break;
    default: return 0;
    }
    out[i] = x[off];
    for (int d = tr->ndim - 1; d >= 0 && ++idx[d] == tr->dims[d]; d--) idx[d] = 0;
  }
  return 1;
}

static void eval_concat(int64_t axis, int nargs, const Type *ta, const double *const *a, const Type *tr, double *out) {
  int64_t outer = 1, inner = 1, pos = 0;
  for (int d = 0; d < axis; d++) outer *= tr->dims[d];
  for (int d = (int)axis + 1; d < tr->ndim; d++) inner *= tr->dims[d];
  for (int64_t o = 0; o < outer; o++)
    for (int k = 0; k < nargs; k++) {
      int64_t len = ta[k].dims[axis] * inner;
      memcpy(out + pos, a[k] + o * len, sizeof(double) * (size_t)len);
      pos += len;
    }
}

/* a[..., M, K] (attr[0]: [..., K, M]) x b[..., K, N] (attr[1]: [..., N, K]), batch axes broadcast */
static void eval_matmul(const int64_t *attr, const Type *ta, const double *a, const Type *tb, const double *b,
                        const Type *tr, double *out) {
  int r = tr->ndim;
  int64_t M = tr->dims[r - 2], N = tr->dims[r - 1], K = attr[0] ? ta->dims[ta->ndim - 2] : ta->dims[ta->ndim - 1];
  Type bt = *tr;   /* the batch axes */
  bt.ndim = r - 2;
  Type tab = *ta, tbb = *tb;
  tab.ndim = ta->ndim - 2, tbb.ndim = tb->ndim - 2;
  int64_t sa[IR_MAX_DIMS], sb[IR_MAX_DIMS], idx[IR_MAX_DIMS] = {0}, nb = ir_numel(&bt);
  bstrides(&tab, &bt, sa);
  bstrides(&tbb, &bt, sb);
  for (int64_t p = 0; p < nb; p++) {
    int64_t oa = 0, ob = 0;
    for (int d = 0; d < bt.ndim; d++) oa += idx[d] * sa[d], ob += idx[d] * sb[d];
    const double *A = a + oa * M * K, *B = b + ob * K * N;
    for (int64_t i = 0; i < M; i++)
      for (int64_t j = 0; j < N; j++) {
        double s = 0;
        for (int64_t k = 0; k < K; k++)
          s += (attr[0] ? A[k * M + i] : A[i * K + k]) * (attr[1] ? B[j * K + k] : B[k * N + j]);
        out[(p * M + i) * N + j] = round_to(tr->dtype, s);
      }
    for (int d = bt.ndim - 1; d >= 0 && ++idx[d] == bt.dims[d]; d--) idx[d] = 0;
  }
}

/* x[N,C,H,W] conv w[O,C/G,KH,KW] -> [N,O,OH,OW]; attrs as ops.def's CONV2D */
static void eval_conv(const int64_t *at, const Type *tx, const double *x, const Type *tw, const double *w,
                      const Type *ty, double *y) {
  int64_t N = tx->dims[0], C = tx->dims[1], H = tx->dims[2], W = tx->dims[3];
  int64_t O = tw->dims[0], CG = tw->dims[1], KH = tw->dims[2], KW = tw->dims[3], OH = ty->dims[2], OW = ty->dims[3];
  int64_t G = at[6] > 0 ? at[6] : 1, OG = O / G;
  for (int64_t n = 0; n < N; n++)
    for (int64_t o = 0; o < O; o++)
      for (int64_t i = 0; i < OH; i++)
        for (int64_t j = 0; j < OW; j++) {
          double acc = 0;
          int64_t g = o / OG;
          for (int64_t c = 0; c < CG; c++)
            for (int64_t u = 0; u < KH; u++) {
              int64_t yy = i * at[0] - at[2] + u * at[4];
              if (yy < 0 || yy >= H) continue;
              for (int64_t q = 0; q < KW; q++) {
                int64_t xx = j * at[1] - at[3] + q * at[5];
                if (xx < 0 || xx >= W) continue;
                acc += x[((n * C + g * CG + c) * H + yy) * W + xx] * w[((o * CG + c) * KH + u) * KW + q];
              }
            }
          y[((n * O + o) * OH + i) * OW + j] = round_to(ty->dtype, acc);
        }
}

/* max (NaN propagating) or average pooling; attrs as ops.def's MAXPOOL2D / AVGPOOL2D */
static void eval_pool(const int64_t *at, int is_max, const Type *tx, const double *x, const Type *ty, double *y) {
  int64_t NC = tx->dims[0] * tx->dims[1], H = tx->dims[2], W = tx->dims[3], OH = ty->dims[2], OW = ty->dims[3];
  int64_t dh = is_max ? at[6] : 1, dw = is_max ? at[7] : 1;
  for (int64_t nc = 0; nc < NC; nc++)
    for (int64_t i = 0; i < OH; i++)
      for (int64_t j = 0; j < OW; j++) {
        double acc = is_max ? -INFINITY : 0;
        int64_t cnt = 0, cnt_pad = 0;
        for (int64_t u = 0; u < at[0]; u++)
          for (int64_t q = 0; q < at[1]; q++) {
            int64_t yy = i * at[2] - at[4] + u * dh, xx = j * at[3] - at[5] + q * dw;
            cnt_pad += yy < H + at[4] && xx < W + at[5];
            if (yy < 0 || yy >= H || xx < 0 || xx >= W) continue;
            double v = x[(nc * H + yy) * W + xx];
            cnt++;
            if (!is_max) acc += v;
            else if (!isnan(acc) && (isnan(v) || v > acc)) acc = v;
          }
        y[(nc * OH + i) * OW + j] = round_to(ty->dtype, is_max ? acc : acc / (double)(at[6] ? cnt_pad : cnt));
      }
}

int ir_eval(Op op, const int64_t *attr, double fattr, int nargs, const Type *ta, const double *const *a,
            const Type *tr, double *out) {
  int64_t n = ir_numel(tr);
  switch (ir_ops[op].kind) {
  case K_ELEM: return eval_elem(op, nargs, ta, a, tr, out);
  case K_REDUCE: eval_reduce(op, attr[0], &ta[0], a[0], tr, out); return 1;
  default: break;
  }
  switch (op) {
  case IR_CONST:
    for (int64_t i = 0; i < n; i++) out[i] = round_to(tr->dtype, fattr);
    return 1;
  case IR_IOTA:
    for (int64_t i = 0; i < n; i++) out[i] = round_to(tr->dtype, (double)(attr[0] + i * attr[1]));
    return 1;
  case IR_RESHAPE: case IR_DETACH: case IR_BROADCAST: case IR_PERMUTE: case IR_SLICE:
    return eval_move(op, attr, &ta[0], a[0], tr, out);
  case IR_CONCAT: eval_concat(attr[0], nargs, ta, a, tr, out); return 1;
  case IR_MATMUL: eval_matmul(attr, &ta[0], a[0], &ta[1], a[1], tr, out); return 1;
  case IR_CONV2D: eval_conv(attr, &ta[0], a[0], &ta[1], a[1], tr, out); return 1;
  case IR_MAXPOOL2D: eval_pool(attr, 1, &ta[0], a[0], tr, out); return 1;
  case IR_AVGPOOL2D: eval_pool(attr, 0, &ta[0], a[0], tr, out); return 1;
  default: return 0;
  }
}

int ir_eval_inst(const Func *f, const Inst *in, const double *const *a, double *out) {
  Type one[3] = {{0}}, *ta = in->nargs <= 3 ? one : malloc(sizeof(Type) * (size_t)in->nargs);
  if (!ta) BUG("out of memory");
  for (int k = 0; k < in->nargs; k++) ta[k] = f->values.data[in->args[k]].type;
  int ok = ir_eval(in->op, in->attr, in->fattr, in->nargs, ta, a, &f->values.data[in->res].type, out);
  if (ta != one) free(ta);
  return ok;
}
