/* nn_3d.c - the volumetric layers (Conv3d, ConvTranspose3d, MaxPool3d, AvgPool3d,
 * AdaptiveAvgPool3d, AdaptiveMaxPool3d and their F. forms) staged as the 2-D
 * primitives over the depth axis, so that no new IR op is needed and their
 * derivatives are the 2-D ops' rules:
 *
 *   conv3d            one conv2d over a batch of N * D_out images whose channels
 *                     are the KD depth slices each output depth reads, stacked per
 *                     group ([g, KD, C/g]), with the weight laid out to match;
 *   conv_transpose3d  its adjoint: one conv_transpose2d whose output channels are
 *                     [g, KD, C_out/g], each depth tap's block spread back to depth
 *                     i * stride + kd * dilation (zeros between, padding cropped);
 *   pools             the 2-D pool over (H, W) of every depth slice first, then a
 *                     (k, 1) pool over (D, H_out * W_out): a max pool's first
 *                     maximum is then PyTorch's (first in d, h, w order), and an
 *                     average's divisor the product of the per-axis ones, as
 *                     PyTorch's box divisor is. */
#include <string.h>
#include "torch_int.h"

static PV *reshape(L *L, Span at, PV *x, int n, const int64_t *dims) { return t_reshape(L, at, x, dims, n); }

/* x [N, C, D, H, W] or unbatched [C, D, H, W]: the 5-D view and whether it was unbatched */
static PV *as_volume(L *L, Span at, PV *x, const char *what, int *unb) {
  need_tensor_arg(L, at, x, what);
  if (!L->T->fn) lower_error(L, at, "%s on tensors is only supported inside compiled functions (forward)", what);
  Type t = x->t->type;
  *unb = t.ndim == 4;
  if (t.ndim != 4 && t.ndim != 5)
    lower_error(L, at, "%s expects a 4-D or 5-D input, got shape %s", what, shape_str(L, &t));
  if (!*unb) return x;
  int64_t d[5] = {1, t.dims[0], t.dims[1], t.dims[2], t.dims[3]};
  return reshape(L, at, x, 5, d);
}

static PV *from_volume(L *L, Span at, PV *y, int unb) {
  if (!unb) return y;
  Type t = y->t->type;
  return reshape(L, at, y, 4, t.dims + 1);
}

/* x with zeros inserted along axis ax: s - 1 after each element but the last */
PV *t_spread(L *L, Span at, PV *x, int ax, int64_t s) {
  if (s == 1) return x;
  Type t = x->t->type;
  int64_t d[IR_MAX_DIMS], n = 0;
  for (int i = 0; i < t.ndim; i++) {
    d[n++] = t.dims[i];
    if (i == ax) d[n++] = 1;
  }
  PV *u = reshape(L, at, x, (int)n, d);
  int64_t pads[2 * IR_MAX_DIMS] = {0};
  pads[2 * (n - 1 - (ax + 1)) + 1] = s - 1;   /* F.pad order: last dim first */
  u = t_pad(L, at, u, pads, 2 * (int)(n - (ax + 1)), 0, 0);
  Type tu = u->t->type;
  int64_t m = 0;
  for (int i = 0; i < tu.ndim; i++) {
    if (i == ax + 1) continue;
    d[m++] = i == ax ? tu.dims[ax] * s : tu.dims[i];
  }
  return t_slice(L, at, reshape(L, at, u, (int)m, d), ax, 0, (t.dims[ax] - 1) * s + 1, 1);
}

static void check_opts(L *L, Span at, const char *what, const int64_t *s, const int64_t *p, const int64_t *d,
                       int64_t g) {
  for (int i = 0; i < 3; i++)
    if (s[i] <= 0 || d[i] <= 0 || p[i] < 0 || s[i] > (1 << 30) || d[i] > (1 << 30) || p[i] > (1 << 30))
      lower_error(L, at, "%s: stride and dilation must be positive and padding non-negative (got %lld, %lld, %lld)",
                  what, (long long)s[i], (long long)p[i], (long long)d[i]);
  if (g <= 0) lower_error(L, at, "%s: groups must be positive, got %lld", what, (long long)g);
}

static PV *channel_bias(L *L, Span at, PV *y, PV *b) {
  if (!b || b->k == PV_NONE) return y;
  need_tensor_arg(L, at, b, "convolution bias");
  int64_t o = y->t->type.dims[1];
  if (b->t->type.ndim != 1 || b->t->type.dims[0] != o)
    lower_error(L, at, "convolution bias must have shape [%lld], got %s", (long long)o, shape_str(L, &b->t->type));
  int64_t d[4] = {o, 1, 1, 1};
  return t_binary(L, at, OP_ADD, y, reshape(L, at, b, 4, d));
}

/* F.conv3d: x [N, C, D, H, W], w [O, C / g, KD, KH, KW] */
PV *t_conv3d(L *L, Span at, PV *x, PV *w, PV *b, const int64_t *s, const int64_t *p, const int64_t *dil, int64_t g) {
  int unb;
  need_tensor_arg(L, at, w, "conv3d");
  PV *x5 = as_volume(L, at, x, "conv3d", &unb);
  check_opts(L, at, "conv3d", s, p, dil, g);
  Type tx = x5->t->type, tw = w->t->type;
  if (tw.ndim != 5) lower_error(L, at, "conv3d weight must be 5-D, got shape %s", shape_str(L, &tw));
  const int64_t N = tx.dims[0], C = tx.dims[1], O = tw.dims[0], Cg = tw.dims[1], KD = tw.dims[2];
  if (O % g) lower_error(L, at, "conv3d: out_channels (%lld) must be divisible by groups (%lld)", (long long)O, (long long)g);
  if (C != Cg * g)
    lower_error(L, at, "shape mismatch in conv3d: input %s has %lld channels, weight %s with groups=%lld expects %lld",
                shape_str(L, &x->t->type), (long long)C, shape_str(L, &tw), (long long)g, (long long)(Cg * g));
  if (p[0]) {
    int64_t pads[6] = {0, 0, 0, 0, p[0], p[0]};
    x5 = t_pad(L, at, x5, pads, 6, 0, 0);
  }
  const int64_t Dp = x5->t->type.dims[2], span = dil[0] * (KD - 1) + 1;
  if (Dp < span)
    lower_error(L, at, "conv3d: input %s is too small for the kernel %s", shape_str(L, &x->t->type), shape_str(L, &tw));
  const int64_t oD = (Dp - span) / s[0] + 1, H = tx.dims[3], W = tx.dims[4];
  /* the depth slices each output depth reads, as channels [g, KD, C/g] of N * oD images */
  PV **taps = arena_alloc(L->a, (size_t)KD * sizeof *taps);
  for (int64_t kd = 0; kd < KD; kd++) {
    PV *sl = t_slice(L, at, x5, 2, kd * dil[0], kd * dil[0] + (oD - 1) * s[0] + 1, s[0]);
    int64_t d7[7] = {N, g, 1, Cg, oD, H, W};
    taps[kd] = reshape(L, at, sl, 7, d7);
  }
  PV *st = KD == 1 ? taps[0] : t_concat(L, at, taps, (int)KD, 2);
  int64_t perm[7] = {0, 4, 1, 2, 3, 5, 6}, d4[4] = {N * oD, g * KD * Cg, H, W};
  PV *img = reshape(L, at, t_permute(L, at, st, perm, 7), 4, d4);
  int64_t wperm[5] = {0, 2, 1, 3, 4}, wd[4] = {O, KD * Cg, tw.dims[3], tw.dims[4]};
  PV *w4 = reshape(L, at, t_permute(L, at, w, wperm, 5), 4, wd);
  PV *y = t_convnd(L, at, 2, img, w4, NULL, s + 1, p + 1, dil + 1, g);
  Type ty = y->t->type;
  int64_t d5[5] = {N, oD, O, ty.dims[2], ty.dims[3]}, back[5] = {0, 2, 1, 3, 4};
  y = t_permute(L, at, reshape(L, at, y, 5, d5), back, 5);
  return from_volume(L, at, channel_bias(L, at, y, b), unb);
}

/* F.conv_transpose3d: x [N, Cin, D, H, W], w [Cin, Cout / g, KD, KH, KW] */
PV *t_conv_transpose3d(L *L, Span at, PV *x, PV *w, PV *b, const int64_t *s, const int64_t *p, const int64_t *op,
                       const int64_t *dil, int64_t g) {
  int unb;
  need_tensor_arg(L, at, w, "conv_transpose3d");
  PV *x5 = as_volume(L, at, x, "conv_transpose3d", &unb);
  check_opts(L, at, "conv_transpose3d", s, p, dil, g);
  Type tx = x5->t->type, tw = w->t->type;
  if (tw.ndim != 5) lower_error(L, at, "conv_transpose3d weight must be 5-D, got shape %s", shape_str(L, &tw));
  const int64_t N = tx.dims[0], Cin = tx.dims[1], D = tx.dims[2], Cog = tw.dims[1], KD = tw.dims[2];
  if (tw.dims[0] != Cin || Cin % g)
    lower_error(L, at, "shape mismatch in conv_transpose3d: input %s has %lld channels, weight %s (groups=%lld) expects %lld",
                shape_str(L, &x->t->type), (long long)Cin, shape_str(L, &tw), (long long)g, (long long)tw.dims[0]);
  if (op[0] < 0 || op[0] >= s[0])
    lower_error(L, at, "conv_transpose3d: output_padding (%lld) must be smaller than the stride (%lld)",
                (long long)op[0], (long long)s[0]);
  const int64_t full = (D - 1) * s[0] + dil[0] * (KD - 1) + 1 + op[0];
  if (full - 2 * p[0] <= 0)
    lower_error(L, at, "conv_transpose3d: the output would be empty (input %s, weight %s, padding %lld)",
                shape_str(L, &x->t->type), shape_str(L, &tw), (long long)p[0]);
  int64_t perm[5] = {0, 2, 1, 3, 4}, d4[4] = {N * D, Cin, tx.dims[3], tx.dims[4]};
  PV *img = reshape(L, at, t_permute(L, at, x5, perm, 5), 4, d4);
  int64_t wperm[5] = {0, 2, 1, 3, 4}, wd[4] = {Cin, KD * Cog, tw.dims[3], tw.dims[4]};
  PV *w4 = reshape(L, at, t_permute(L, at, w, wperm, 5), 4, wd);
  PV *z = t_conv_transpose(L, at, 2, img, w4, NULL, s + 1, p + 1, op + 1, dil + 1, g);
  Type tz = z->t->type;
  const int64_t oH = tz.dims[2], oW = tz.dims[3];
  int64_t d7[7] = {N, D, g, KD, Cog, oH, oW};
  PV *z7 = reshape(L, at, z, 7, d7), *sum = NULL;
  for (int64_t kd = 0; kd < KD; kd++) {
    int64_t d5[5] = {N, D, g * Cog, oH, oW};
    PV *blk = reshape(L, at, t_slice(L, at, z7, 3, kd, kd + 1, 1), 5, d5);
    blk = t_spread(L, at, t_permute(L, at, blk, perm, 5), 2, s[0]);
    const int64_t front = kd * dil[0], back = full - front - ((D - 1) * s[0] + 1);
    if (front || back) {
      int64_t pads[6] = {0, 0, 0, 0, front, back};
      blk = t_pad(L, at, blk, pads, 6, 0, 0);
    }
    sum = sum ? t_binary(L, at, OP_ADD, sum, blk) : blk;
  }
  if (p[0]) sum = t_slice(L, at, sum, 2, p[0], full - p[0], 1);
  return from_volume(L, at, channel_bias(L, at, sum, b), unb);
}

/* ---- pools ------------------------------------------------------------------------- */

typedef struct Pool3 {
  int64_t k[3], s[3], p[3], d[3];
  int ceil_mode, count_include_pad;
} Pool3;

/* the 2-D pool over (H, W) of each depth slice, then the (k, 1) pool over (D, H'W') */
static PV *pool3d(L *L, Span at, Op op, PV *x, const Pool3 *o, const char *what) {
  int unb;
  PV *x5 = as_volume(L, at, x, what, &unb);
  Type t = x5->t->type;
  const int64_t N = t.dims[0], C = t.dims[1], D = t.dims[2];
  int64_t d4[4] = {N, C * D, t.dims[3], t.dims[4]};
  PV *hw = t_pool2d(L, at, op, reshape(L, at, x5, 4, d4), o->k + 1, o->s + 1, o->p + 1, o->d + 1, o->ceil_mode,
                    o->count_include_pad);
  Type th = hw->t->type;
  const int64_t oH = th.dims[2], oW = th.dims[3];
  int64_t dd[4] = {N, C, D, oH * oW};
  int64_t k[2] = {o->k[0], 1}, s[2] = {o->s[0], 1}, p[2] = {o->p[0], 0}, dl[2] = {o->d[0], 1};
  PV *r = t_pool2d(L, at, op, reshape(L, at, hw, 4, dd), k, s, p, dl, o->ceil_mode, o->count_include_pad);
  int64_t d5[5] = {N, C, r->t->type.dims[2], oH, oW};
  return from_volume(L, at, reshape(L, at, r, 5, d5), unb);
}

/* kernel_size, stride (default: the kernel) and padding of a 3-D pool, a[1..3] */
static Pool3 pool3_sizes(L *L, Span at, PV **a) {
  Pool3 o = {.count_include_pad = 1};
  nn_ints(L, at, a[1], 3, 0, o.k, "kernel_size");
  if (a[2] && a[2]->k != PV_NONE && !(pv_is_seq(a[2]) && a[2]->n == 0)) nn_ints(L, at, a[2], 3, 1, o.s, "stride");
  else memcpy(o.s, o.k, sizeof o.s);
  nn_ints(L, at, a[3], 3, 0, o.p, "padding");
  return o;
}

PV *nnf_max_pool3d(L *L, PV *fn, Args *A) {
  (void)fn;
  PV *a[7];
  Span at = A->at;
  bind_args(L, A, "input,kernel_size,stride=,padding=,dilation=,ceil_mode=,return_indices=", a);
  Pool3 o = pool3_sizes(L, at, a);
  nn_ints(L, at, a[4], 3, 1, o.d, "dilation");
  if (a[5]) o.ceil_mode = arg_bool(L, at, a[5], "ceil_mode");
  if (a[6] && arg_bool(L, at, a[6], "return_indices")) lower_error(L, at, "return_indices=True is not supported");
  return pool3d(L, at, IR_MAXPOOL2D, a[0], &o, "max_pool3d");
}

PV *nnf_avg_pool3d(L *L, PV *fn, Args *A) {
  (void)fn;
  PV *a[7];
  Span at = A->at;
  bind_args(L, A, "input,kernel_size,stride=,padding=,ceil_mode=,count_include_pad=,divisor_override=", a);
  Pool3 o = pool3_sizes(L, at, a);
  o.d[0] = o.d[1] = o.d[2] = 1;
  if (a[4]) o.ceil_mode = arg_bool(L, at, a[4], "ceil_mode");
  if (a[5]) o.count_include_pad = arg_bool(L, at, a[5], "count_include_pad");
  if (a[6] && a[6]->k != PV_NONE) lower_error(L, at, "divisor_override is not supported");
  return pool3d(L, at, IR_AVGPOOL2D, a[0], &o, "avg_pool3d");
}

/* an adaptive max pool of x [N, C, H, W] to (oh, ow) that divide H and W: a max pool
 * with kernel = stride = in / out (PyTorch's bins are then exactly those windows) */
static PV *adaptive_max2d(L *L, Span at, PV *x, int64_t oh, int64_t ow, const char *what) {
  Type t = x->t->type;
  int64_t o[2] = {oh, ow}, k[2], p[2] = {0, 0}, d[2] = {1, 1};
  for (int i = 0; i < 2; i++) {
    if (t.dims[2 + i] % o[i])
      lower_error(L, at, "%s to %lld needs an output size dividing the input's %lld", what, (long long)o[i],
                  (long long)t.dims[2 + i]);
    k[i] = t.dims[2 + i] / o[i];
  }
  return t_pool2d(L, at, IR_MAXPOOL2D, x, k, k, p, d, 0, 1);
}

/* adaptive pools: (H, W) to (oH, oW) per depth slice, then D to oD over (D, oH oW) */
static PV *adaptive3d(L *L, Args *A, int is_max) {
  PV *a[3];
  Span at = A->at;
  const char *what = is_max ? "adaptive_max_pool3d" : "adaptive_avg_pool3d";
  bind_args(L, A, is_max ? "input,output_size,return_indices=" : "input,output_size", a);
  if (is_max && a[2] && arg_bool(L, at, a[2], "return_indices")) lower_error(L, at, "return_indices=True is not supported");
  int unb;
  PV *x5 = as_volume(L, at, a[0], what, &unb);
  Type t = x5->t->type;
  int64_t o[3];
  PV *items[3];
  int n = pv_is_seq(a[1]) ? a[1]->n : 1;
  if (n != 1 && n != 3) lower_error(L, at, "%s: output_size must be an int or a tuple of 3", what);
  for (int i = 0; i < 3; i++) {
    PV *v = pv_is_seq(a[1]) ? a[1]->items[n == 1 ? 0 : i] : a[1];
    o[i] = v->k == PV_NONE ? t.dims[2 + i] : arg_int(L, at, v, "output_size");
    if (o[i] <= 0) lower_error(L, at, "%s: output size %lld must be positive", what, (long long)o[i]);
    items[i] = pv_int(L, o[i]);
  }
  const int64_t N = t.dims[0], C = t.dims[1], D = t.dims[2];
  int64_t d4[4] = {N, C * D, t.dims[3], t.dims[4]};
  PV *x4 = reshape(L, at, x5, 4, d4), *hw;
  if (is_max) {
    hw = adaptive_max2d(L, at, x4, o[1], o[2], what);
  } else {
    hw = t_adaptive_avg_pool2d(L, at, x4, pv_tuple(L, items + 1, 2));
  }
  int64_t dd[4] = {N, C, D, o[1] * o[2]};
  PV *xd = reshape(L, at, hw, 4, dd), *r;
  if (is_max) r = adaptive_max2d(L, at, xd, o[0], o[1] * o[2], what);
  else if (o[0] == D) r = xd;
  else if (D % o[0] == 0) {
    int64_t k[2] = {D / o[0], 1}, p[2] = {0, 0}, dl[2] = {1, 1};
    r = t_pool2d(L, at, IR_AVGPOOL2D, xd, k, k, p, dl, 0, 1);
  } else {
    r = t_matmul(L, at, t_adaptive_avg_matrix(L, at, o[0], D, t.dtype), xd);
  }
  int64_t d5[5] = {N, C, o[0], o[1], o[2]};
  return from_volume(L, at, reshape(L, at, r, 5, d5), unb);
}

PV *nnf_adaptive_avg_pool3d(L *L, PV *fn, Args *A) { (void)fn; return adaptive3d(L, A, 0); }
PV *nnf_adaptive_max_pool3d(L *L, PV *fn, Args *A) { (void)fn; return adaptive3d(L, A, 1); }

/* F.conv3d / F.conv_transpose3d */
PV *nnf_conv3d(L *L, PV *fn, Args *A) {
  (void)fn;
  PV *a[7];
  Span at = A->at;
  bind_args(L, A, "input,weight,bias=,stride=,padding=,dilation=,groups=", a);
  int64_t s[3], p[3], d[3];
  nn_ints(L, at, a[3], 3, 1, s, "stride");
  nn_ints(L, at, a[5], 3, 1, d, "dilation");
  need_tensor_arg(L, at, a[0], "conv3d");
  need_tensor_arg(L, at, a[1], "conv3d");
  PV *x = nn_conv_padding(L, at, 3, a[0], a[1], a[4], s, d, p);
  int64_t g = a[6] && a[6]->k != PV_NONE ? arg_int(L, at, a[6], "groups") : 1;
  need_tensor_arg(L, at, a[1], "conv3d");
  return t_conv3d(L, at, x, a[1], a[2], s, p, d, g);
}

PV *nnf_conv_transpose3d(L *L, PV *fn, Args *A) {
  (void)fn;
  PV *a[8];
  Span at = A->at;
  bind_args(L, A, "input,weight,bias=,stride=,padding=,output_padding=,groups=,dilation=", a);
  int64_t s[3], p[3], op[3], d[3];
  nn_ints(L, at, a[3], 3, 1, s, "stride");
  nn_ints(L, at, a[4], 3, 0, p, "padding");
  nn_ints(L, at, a[5], 3, 0, op, "output_padding");
  nn_ints(L, at, a[7], 3, 1, d, "dilation");
  int64_t g = a[6] && a[6]->k != PV_NONE ? arg_int(L, at, a[6], "groups") : 1;
  return t_conv_transpose3d(L, at, a[0], a[1], a[2], s, p, op, d, g);
}
