/* nn_compose.c - layers staged as compositions of existing primitives, so that
 * their derivatives are the primitives' rules: F.unfold / nn.Unfold (im2col: one
 * strided slice per kernel tap), F.fold / nn.Fold (its adjoint: each tap's block
 * spread by the stride and summed into place), F.lp_pool1d/2d / nn.LPPool1d/2d
 * (PyTorch's own formula over avg_pool), and F.embedding_bag / nn.EmbeddingBag
 * (an embedding lookup reduced per bag: over the bag axis of a 2-D input, or
 * through a bag-membership matrix built from the offsets of a 1-D input). */
#include <math.h>
#include <string.h>
#include "torch_int.h"

#define ADD(a, b) t_binary(L, at, OP_ADD, (a), (b))
#define MUL(a, b) t_binary(L, at, OP_MUL, (a), (b))
#define DIV(a, b) t_binary(L, at, OP_DIV, (a), (b))

static PV *fn_tensor(L *L, Span at, PV *v, const char *what) {
  if (!v || v->k != PV_TENSOR) lower_error(L, at, "%s: expected a tensor input, got '%s'", what, v ? pv_kind_name(v) : "nothing");
  if (!L->T->fn) lower_error(L, at, "%s on tensors is only supported inside compiled functions (forward)", what);
  return v;
}

typedef struct Blocks {
  int64_t k[2], d[2], p[2], s[2], o[2];   /* kernel, dilation, padding, stride, blocks per axis */
} Blocks;

/* the options of unfold/fold and the number of blocks along each axis of an
 * input (or output) of spatial size hw */
static Blocks blocks(L *L, Span at, PV *k, PV *d, PV *p, PV *s, const int64_t *hw, const char *what) {
  Blocks b;
  nn_ints(L, at, k, 2, 1, b.k, "kernel_size");
  nn_ints(L, at, d, 2, 1, b.d, "dilation");
  nn_ints(L, at, p, 2, 0, b.p, "padding");
  nn_ints(L, at, s, 2, 1, b.s, "stride");
  for (int i = 0; i < 2; i++) {
    if (b.k[i] <= 0 || b.d[i] <= 0 || b.s[i] <= 0 || b.p[i] < 0 || b.k[i] > (1 << 20) || b.d[i] > (1 << 20) ||
        b.p[i] > (1 << 20) || b.s[i] > (1 << 20))
      lower_error(L, at, "%s: kernel_size, dilation and stride must be positive and padding non-negative", what);
    int64_t span = b.d[i] * (b.k[i] - 1) + 1, in = hw[i] + 2 * b.p[i];
    b.o[i] = in >= span ? (in - span) / b.s[i] + 1 : 0;
  }
  if (b.o[0] < 1 || b.o[1] < 1)
    lower_error(L, at, "%s: given spatial size (%lld, %lld), kernel_size=(%lld, %lld), dilation=(%lld, %lld), "
                       "padding=(%lld, %lld), the array of sliding blocks would be empty", what, (long long)hw[0],
                (long long)hw[1], (long long)b.k[0], (long long)b.k[1], (long long)b.d[0], (long long)b.d[1],
                (long long)b.p[0], (long long)b.p[1]);
  return b;
}

/* F.unfold: [N, C, H, W] -> [N, C * kh * kw, L], column c * kh kw + i kw + j */
PV *nnf_unfold(L *L, PV *fn, Args *A) {
  (void)fn;
  PV *a[5];
  Span at = A->at;
  bind_args(L, A, "input,kernel_size,dilation=,padding=,stride=", a);
  PV *x = fn_tensor(L, at, a[0], "unfold");
  Type t = x->t->type;
  if (t.ndim != 3 && t.ndim != 4)
    lower_error(L, at, "Input Error: Only 3D or 4D input Tensors are supported (got %dD)", t.ndim);
  int unb = t.ndim == 3;
  if (unb) {
    int64_t d4[4] = {1, t.dims[0], t.dims[1], t.dims[2]};
    x = t_reshape(L, at, x, d4, 4);
    t = x->t->type;
  }
  Blocks b = blocks(L, at, a[1], a[2], a[3], a[4], t.dims + 2, "unfold");
  if (b.p[0] || b.p[1]) {
    int64_t pads[4] = {b.p[1], b.p[1], b.p[0], b.p[0]};
    x = t_pad(L, at, x, pads, 4, 0, 0);
  }
  const int64_t N = t.dims[0], C = t.dims[1], kk = b.k[0] * b.k[1], nb = b.o[0] * b.o[1];
  PV **taps = arena_alloc(L->a, sizeof *taps * (size_t)kk);
  for (int64_t i = 0; i < b.k[0]; i++)
    for (int64_t j = 0; j < b.k[1]; j++) {
      PV *r = t_slice(L, at, x, 2, i * b.d[0], i * b.d[0] + (b.o[0] - 1) * b.s[0] + 1, b.s[0]);
      r = t_slice(L, at, r, 3, j * b.d[1], j * b.d[1] + (b.o[1] - 1) * b.s[1] + 1, b.s[1]);
      int64_t d4[4] = {N, C, 1, nb};
      taps[i * b.k[1] + j] = t_reshape(L, at, r, d4, 4);
    }
  PV *cols = kk == 1 ? taps[0] : t_concat(L, at, taps, (int)kk, 2);
  int64_t d3[3] = {N, C * kk, nb};
  return t_reshape(L, at, cols, unb ? d3 + 1 : d3, unb ? 2 : 3);
}

/* F.fold: [N, C * kh * kw, L] -> [N, C, H, W], overlapping blocks summed */
PV *nnf_fold(L *L, PV *fn, Args *A) {
  (void)fn;
  PV *a[6];
  Span at = A->at;
  bind_args(L, A, "input,output_size,kernel_size,dilation=,padding=,stride=", a);
  PV *x = fn_tensor(L, at, a[0], "fold");
  Type t = x->t->type;
  if (t.ndim != 2 && t.ndim != 3)
    lower_error(L, at, "Input Error: Only unbatched (2D) or batched (3D) input Tensors are supported (got %dD)", t.ndim);
  int unb = t.ndim == 2;
  if (unb) {
    int64_t d3[3] = {1, t.dims[0], t.dims[1]};
    x = t_reshape(L, at, x, d3, 3);
    t = x->t->type;
  }
  int64_t hw[2];
  nn_ints(L, at, a[1], 2, 0, hw, "output_size");
  if (hw[0] <= 0 || hw[1] <= 0) lower_error(L, at, "fold: output_size must be positive");
  Blocks b = blocks(L, at, a[2], a[3], a[4], a[5], hw, "fold");
  const int64_t N = t.dims[0], kk = b.k[0] * b.k[1];
  if (t.dims[1] % kk)
    lower_error(L, at, "fold: expected the size of dimension 1 of the input (%lld) to be divisible by the product of "
                       "kernel_size (%lld)", (long long)t.dims[1], (long long)kk);
  if (t.dims[2] != b.o[0] * b.o[1])
    lower_error(L, at, "fold: given output_size=(%lld, %lld) and these options, expected the size of dimension 2 of the "
                       "input to be %lld blocks, but got %lld", (long long)hw[0], (long long)hw[1],
                (long long)(b.o[0] * b.o[1]), (long long)t.dims[2]);
  const int64_t C = t.dims[1] / kk, Hp = hw[0] + 2 * b.p[0], Wp = hw[1] + 2 * b.p[1];
  int64_t d5[5] = {N, C, kk, b.o[0], b.o[1]};
  PV *x5 = t_reshape(L, at, x, d5, 5), *sum = NULL;
  for (int64_t i = 0; i < b.k[0]; i++)
    for (int64_t j = 0; j < b.k[1]; j++) {
      int64_t tap = i * b.k[1] + j, d4[4] = {N, C, b.o[0], b.o[1]};
      PV *blk = t_reshape(L, at, t_slice(L, at, x5, 2, tap, tap + 1, 1), d4, 4);
      blk = t_spread(L, at, t_spread(L, at, blk, 2, b.s[0]), 3, b.s[1]);
      int64_t h0 = i * b.d[0], w0 = j * b.d[1];
      int64_t pads[4] = {w0, Wp - w0 - blk->t->type.dims[3], h0, Hp - h0 - blk->t->type.dims[2]};
      if (pads[0] || pads[1] || pads[2] || pads[3]) blk = t_pad(L, at, blk, pads, 4, 0, 0);
      sum = sum ? ADD(sum, blk) : blk;
    }
  if (b.p[0]) sum = t_slice(L, at, sum, 2, b.p[0], b.p[0] + hw[0], 1);
  if (b.p[1]) sum = t_slice(L, at, sum, 3, b.p[1], b.p[1] + hw[1], 1);
  if (unb) sum = t_reshape(L, at, sum, sum->t->type.dims + 1, 3);
  return sum;
}

/* F.lp_pool1d/2d as PyTorch 1.13 writes them: avg_pool of x^p, then
 * (sign(out) * relu(|out|) * kernel area)^(1/p) */
static PV *lp_pool(L *L, Args *A, int nd) {
  PV *a[5];
  Span at = A->at;
  const char *what = nd == 1 ? "lp_pool1d" : "lp_pool2d";
  bind_args(L, A, "input,norm_type,kernel_size,stride=,ceil_mode=", a);
  PV *x = fn_tensor(L, at, a[0], what);
  Type t = x->t->type;
  if (t.ndim != nd + 1 && t.ndim != nd + 2)
    lower_error(L, at, "%s expects a %d-D or %d-D input, got shape %s", what, nd + 1, nd + 2, shape_str(L, &t));
  if (!a[1] || !pv_is_num(a[1])) lower_error(L, at, "%s: norm_type must be a number", what);
  int64_t k[2] = {1, 1}, s[2] = {1, 1}, p[2] = {0, 0}, d[2] = {1, 1};
  if (nd == 1) {
    k[1] = arg_int(L, at, a[2], "kernel_size");
    s[1] = a[3] && a[3]->k != PV_NONE ? arg_int(L, at, a[3], "stride") : k[1];
  } else {
    nn_ints(L, at, a[2], 2, 1, k, "kernel_size");
    if (a[3] && a[3]->k != PV_NONE) nn_ints(L, at, a[3], 2, 1, s, "stride");
    else s[0] = k[0], s[1] = k[1];
  }
  int ceil_mode = a[4] && a[4]->k != PV_NONE && arg_bool(L, at, a[4], "ceil_mode");
  /* as [N, C, H, W]: a 1-D input has height 1, an unbatched one a batch of 1 */
  const int unb = t.ndim == nd + 1;
  int64_t d4[4] = {unb ? 1 : t.dims[0], t.dims[!unb], nd == 1 ? 1 : t.dims[t.ndim - 2], t.dims[t.ndim - 1]};
  PV *xp = t_binary(L, at, OP_POW, t_reshape(L, at, x, d4, 4), a[1]);
  PV *out = t_pool2d(L, at, IR_AVGPOOL2D, xp, k, s, p, d, ceil_mode, 1);
  PV *r = MUL(MUL(t_rounding(L, at, IR_SIGN, out), t_unary(L, at, IR_RELU, t_unary(L, at, IR_ABS, out))),
              pv_int(L, k[0] * k[1]));
  r = t_binary(L, at, OP_POW, r, pv_float(L, 1.0 / pv_num(a[1])));
  Type tr = r->t->type;
  int64_t back[4];
  int n = 0;
  for (int i = unb; i < 4; i++)
    if (!(nd == 1 && i == 2)) back[n++] = tr.dims[i];
  return t_reshape(L, at, r, back, n);
}

PV *nnf_lp_pool1d(L *L, PV *fn, Args *A) { (void)fn; return lp_pool(L, A, 1); }
PV *nnf_lp_pool2d(L *L, PV *fn, Args *A) { (void)fn; return lp_pool(L, A, 2); }

/* ---- embedding_bag -------------------------------------------------------------------- */

enum { BAG_SUM, BAG_MEAN, BAG_MAX };

static int bag_mode(L *L, Span at, PV *m) {
  if (!m || m->k == PV_NONE) return BAG_MEAN;
  if (m->k != PV_STR) lower_error(L, at, "embedding_bag: mode must be a string");
  if (!strcmp(m->s, "sum")) return BAG_SUM;
  if (!strcmp(m->s, "mean")) return BAG_MEAN;
  if (!strcmp(m->s, "max")) return BAG_MAX;
  lower_error(L, at, "mode has to be one of sum, mean or max");
}

/* the bags of idx [B, n] (2-D) or of idx [n] cut at offsets [B] (1-D), reduced:
 * member [B, n] (1 where position j is in bag b and is not padding_idx) weights
 * the rows e [.., n, D] of the lookups */
PV *t_embedding_bag(L *L, Span at, PV *w, PV *idx, PV *offsets, int mode, PV *psw, int last_offset, PV *padding_idx) {
  Type ti = idx->t->type, tw = w->t->type;
  if (tw.ndim != 2) lower_error(L, at, "embedding_bag: weight has to be a 2-D tensor, got %s", shape_str(L, &tw));
  if (ti.dtype != DT_I64 && ti.dtype != DT_I32)
    lower_error(L, at, "embedding_bag: input must be an integer tensor (torch.long), got %s", ir_dtype_name(ti.dtype));
  if (psw && mode != BAG_SUM)
    lower_error(L, at, "embedding_bag: per_sample_weights was not None. per_sample_weights is only supported for "
                       "mode='sum' (got mode='%s'). Please open a feature request on GitHub.",
                mode == BAG_MEAN ? "mean" : "max");
  if (psw)
    for (int i = 0; i < ti.ndim; i++)
      if (psw->t->type.ndim != ti.ndim || psw->t->type.dims[i] != ti.dims[i])
        lower_error(L, at, "embedding_bag: If per_sample_weights (%s) is not None, then it must have the same shape as "
                           "the input (%s)", shape_str(L, &psw->t->type), shape_str(L, &ti));
  PV *e = t_embedding(L, at, w, idx, NULL);   /* [.., n, D] */
  const int64_t D = tw.dims[1];
  PV *keep = NULL;   /* [.., n] positions in a bag (not padding_idx) */
  if (padding_idx && padding_idx->k != PV_NONE) {
    int64_t p = arg_int(L, at, padding_idx, "padding_idx");
    if (p < -tw.dims[0] || p >= tw.dims[0])
      lower_error(L, at, "padding_idx must be within the number of embeddings (%lld), got %lld", (long long)tw.dims[0],
                  (long long)p);
    keep = t_compare(L, at, OP_NE, t_cast(L, at, idx, DT_I64), pv_int(L, p < 0 ? p + tw.dims[0] : p));
  }
  PV *member, *rows;   /* member [B, n] as float; rows [n, D] or e [B, n, D] */
  int64_t B;
  if (ti.ndim == 2) {
    if (offsets && offsets->k != PV_NONE)
      lower_error(L, at, "if input is 2D, then offsets has to be None, as input is treated is a mini-batch of fixed "
                         "length sequences");
    B = ti.dims[0];
    Type tm = ti;
    tm.dtype = tw.dtype;
    member = keep ? t_cast(L, at, keep, tw.dtype) : t_const_tensor(L, at, tm, 1);
    rows = e;
  } else if (ti.ndim == 1) {
    if (!offsets || offsets->k != PV_TENSOR || offsets->t->type.ndim != 1)
      lower_error(L, at, "offsets has to be a 1D Tensor but got %s", offsets && offsets->k == PV_TENSOR
                  ? shape_str(L, &offsets->t->type) : "None");
    Type to = offsets->t->type;
    B = to.dims[0] - (last_offset ? 1 : 0);
    if (B <= 0) lower_error(L, at, "embedding_bag: include_last_offset needs at least 2 offsets");
    PV *off = t_cast(L, at, offsets, DT_I64);
    if (B < to.dims[0]) off = t_slice(L, at, off, 0, 0, B, 1);
    /* offsets[0] must be 0 (PyTorch checks it): checked at run time */
    PV *first = t_slice(L, at, off, 0, 0, 1, 1);
    t_checked_index(L, at, first, 1, "offsets[0] (it has to be 0)");
    const int64_t n = ti.dims[0];
    int64_t ia[2] = {0, 1};
    Type jt = {.dtype = DT_I64, .ndim = 1, .dims = {n}};
    PV *j = t_wrap(L, ir_emit(L->T->prog, L->T->fn, IR_IOTA, NULL, 0, jt, ia, 2, 0, at, "position"));
    int64_t colv[2] = {B, 1}, rowv[2] = {1, n};
    /* bag b holds positions offsets[b] <= j < offsets[b + 1] (or the end) */
    PV *started = t_compare(L, at, OP_LE, t_reshape(L, at, off, colv, 2), t_reshape(L, at, j, rowv, 2));   /* [B, n] */
    int64_t zero = 0;
    PV *bag = t_binary(L, at, OP_SUB, t_reduce(L, at, IR_REDUCE_SUM, t_cast(L, at, started, DT_I64), &zero, 1, 1, 0),
                       pv_int(L, 1));   /* [1, n] */
    Type bt = {.dtype = DT_I64, .ndim = 1, .dims = {B}};
    PV *b = t_reshape(L, at, t_wrap(L, ir_emit(L->T->prog, L->T->fn, IR_IOTA, NULL, 0, bt, ia, 2, 0, at, "bag")), colv, 2);
    PV *in = t_compare(L, at, OP_EQ, bag, b);   /* [B, n] */
    if (keep) in = t_logical(L, at, '&', in, t_reshape(L, at, keep, rowv, 2));
    member = t_cast(L, at, in, tw.dtype);
    rows = e;
  } else {
    lower_error(L, at, "input has to be 1D or 2D Tensor, but got Tensor of dimension %d", ti.ndim);
  }
  PV *count = NULL;
  if (mode == BAG_MEAN || mode == BAG_MAX) {
    int64_t ax = 1;
    count = t_reduce(L, at, IR_REDUCE_SUM, member, &ax, 1, 1, 0);   /* [B, 1] */
  }
  PV *r;
  if (mode == BAG_MAX) {
    /* max over members; an empty bag gives 0 */
    PV *e3 = ti.ndim == 2 ? rows : t_reshape(L, at, rows, (int64_t[]){1, ti.dims[0], D}, 3);
    int64_t d3[3] = {B, member->t->type.dims[1], 1};
    PV *m3 = t_compare(L, at, OP_GT, t_reshape(L, at, member, d3, 3), pv_float(L, 0));
    PV *masked = t_where(L, at, m3, e3, pv_float(L, -INFINITY));
    int64_t ax = 1;
    r = t_reduce(L, at, IR_REDUCE_MAX, masked, &ax, 1, 0, 0);
    r = t_where(L, at, t_compare(L, at, OP_GT, count, pv_float(L, 0)), r, pv_float(L, 0));
  } else {
    int64_t prow[2] = {ti.ndim == 2 ? B : 1, member->t->type.dims[1]};
    PV *wgt = psw ? MUL(member, t_reshape(L, at, t_cast(L, at, psw, tw.dtype), prow, 2)) : member;
    if (ti.ndim == 2) {
      int64_t d3[3] = {B, ti.dims[1], 1}, ax = 1;
      r = t_reduce(L, at, IR_REDUCE_SUM, MUL(t_reshape(L, at, wgt, d3, 3), rows), &ax, 1, 0, 0);
    } else {
      r = t_matmul(L, at, wgt, rows);   /* [B, n] x [n, D] */
    }
    if (mode == BAG_MEAN)
      r = t_where(L, at, t_compare(L, at, OP_GT, count, pv_float(L, 0)),
                  DIV(r, t_where(L, at, t_compare(L, at, OP_GT, count, pv_float(L, 0)), count, pv_float(L, 1))),
                  pv_float(L, 0));
  }
  return r;
}

PV *nnf_embedding_bag(L *L, PV *fn, Args *A) {
  (void)fn;
  PV *a[11];
  Span at = A->at;
  bind_args(L, A, "input,weight,offsets=,max_norm=,norm_type=,scale_grad_by_freq=,mode=,sparse=,per_sample_weights=,"
                  "include_last_offset=,padding_idx=", a);
  PV *x = fn_tensor(L, at, a[0], "embedding_bag"), *w = fn_tensor(L, at, a[1], "embedding_bag");
  if (a[3] && a[3]->k != PV_NONE) lower_error(L, at, "embedding_bag: max_norm is not supported by ctc");
  if (a[5] && a[5]->k != PV_NONE && arg_bool(L, at, a[5], "scale_grad_by_freq"))
    lower_error(L, at, "embedding_bag: scale_grad_by_freq is not supported by ctc");
  if (a[7] && a[7]->k != PV_NONE && arg_bool(L, at, a[7], "sparse"))
    lower_error(L, at, "embedding_bag: sparse=True is not supported by ctc");
  PV *psw = a[8] && a[8]->k != PV_NONE ? fn_tensor(L, at, a[8], "per_sample_weights") : NULL;
  return t_embedding_bag(L, at, w, x, a[2], bag_mode(L, at, a[6]), psw,
                         a[9] && a[9]->k != PV_NONE && arg_bool(L, at, a[9], "include_last_offset"), a[10]);
}

/* nn.EmbeddingBag(num_embeddings, embedding_dim, ...): weight ~ N(0, 1), the
 * padding_idx row zero */
PV *nn_embedding_bag_new(L *L, PV *cls, Args *A) {
  PV *a[12];
  Span at = A->at;
  if (L->T->fn) lower_error(L, at, "creating layers inside compiled code is not supported; create them in __init__");
  PV *o = module_new(L, cls);
  bind_args(L, A, "num_embeddings,embedding_dim,max_norm=,norm_type=,scale_grad_by_freq=,mode=,sparse=,_weight=,"
                  "include_last_offset=,padding_idx=,device=,dtype=", a);
  int64_t d[2] = {arg_int(L, at, a[0], "num_embeddings"), arg_int(L, at, a[1], "embedding_dim")};
  if (d[0] <= 0 || d[1] <= 0) lower_error(L, at, "EmbeddingBag: num_embeddings and embedding_dim must be positive");
  if (a[2] && a[2]->k != PV_NONE) lower_error(L, at, "EmbeddingBag max_norm is not supported by ctc");
  if (a[4] && a[4]->k != PV_NONE && arg_bool(L, at, a[4], "scale_grad_by_freq"))
    lower_error(L, at, "EmbeddingBag scale_grad_by_freq is not supported by ctc");
  if (a[6] && a[6]->k != PV_NONE && arg_bool(L, at, a[6], "sparse"))
    lower_error(L, at, "EmbeddingBag(sparse=True) is not supported by ctc");
  if (a[7] && a[7]->k != PV_NONE) lower_error(L, at, "EmbeddingBag _weight= is not supported by ctc");
  bag_mode(L, at, a[5]);
  env_set(L, o->attrs, "num_embeddings", pv_int(L, d[0]));
  env_set(L, o->attrs, "embedding_dim", pv_int(L, d[1]));
  env_set(L, o->attrs, "mode", a[5] && a[5]->k != PV_NONE ? a[5] : pv_str(L, "mean"));
  env_set(L, o->attrs, "include_last_offset", pv_bool(L, a[8] && a[8]->k != PV_NONE && arg_bool(L, at, a[8], "include_last_offset")));
  env_set(L, o->attrs, "padding_idx", a[9] ? a[9] : pv_none(L));
  PV *w = param_tensor(L, slot_new(L, at, (Type){.dtype = DT_F32, .ndim = 2, .dims = {d[0], d[1]}}, PINIT_NORMAL, 0, 1));
  module_setattr(L, at, o, "weight", w);
  if (a[9] && a[9]->k != PV_NONE) {
    int64_t p = arg_int(L, at, a[9], "padding_idx");
    if (p < -d[0] || p >= d[0])
      lower_error(L, at, "padding_idx must be within num_embeddings (%lld), got %lld", (long long)d[0], (long long)p);
    w->t->slot->zero_row1 = (p < 0 ? p + d[0] : p) + 1;   /* PyTorch zeroes that row after normal_ */
  }
  return o;
}

PV *nn_embedding_bag_forward(L *L, PV *o, Args *A) {
  PV *a[3];
  Span at = A->at;
  bind_args(L, A, "input,offsets=,per_sample_weights=", a);
  PV *x = fn_tensor(L, at, a[0], "EmbeddingBag");
  PV *psw = a[2] && a[2]->k != PV_NONE ? fn_tensor(L, at, a[2], "per_sample_weights") : NULL;
  return t_embedding_bag(L, at, env_get(o->attrs, "weight"), x, a[1], bag_mode(L, at, env_get(o->attrs, "mode")), psw,
                         arg_bool(L, at, env_get(o->attrs, "include_last_offset"), "include_last_offset"), env_get(o->attrs, "padding_idx"));
}
