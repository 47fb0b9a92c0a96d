/* nn_ops.c - the staging of the convolution, padding, resampling, normalization
 * and activation layers of torch.nn / torch.nn.functional: grouped and 1-D
 * convolutions, conv_transpose (CONV2D_BWD_INPUT), F.pad (PAD), F.interpolate
 * (UPSAMPLE), pixel_shuffle, batch/instance/group norm and the activations of
 * issue 15, composed from primitives so that their derivatives are the
 * primitives' rules. Each composition is chosen so that its VJP and JVP equal
 * PyTorch 1.13's derivative formulas, at the kinks too (noted per function),
 * and so that an unselected branch of a where() cannot turn a zero adjoint into
 * NaN (0 * inf): its operand is clamped into the range where it is used. */
#include <math.h>
#include <string.h>
#include "torch_int.h"

#define ADD(a, b) t_binary(L, at, OP_ADD, (a), (b))
#define SUB(a, b) t_binary(L, at, OP_SUB, (a), (b))
#define MUL(a, b) t_binary(L, at, OP_MUL, (a), (b))
#define DIV(a, b) t_binary(L, at, OP_DIV, (a), (b))
#define NUM(c) pv_float(L, (c))
#define WHERE(c, a, b) t_where(L, at, (c), (a), (b))
#define CMP(op, a, b) t_compare(L, at, (op), (a), (b))

static ValId nn_emit(L *L, Span at, Op op, const ValId *args, int nargs, Type r, const int64_t *attr, int nattr,
                     double fattr, const char *name) {
  return ir_emit(L->T->prog, L->T->fn, op, args, nargs, r, attr, nattr, fattr, at, name);
}

static void need_fn_nn(L *L, Span at, const char *what) {
  if (!L->T->fn)
    lower_error(L, at, "%s on tensors is only supported inside compiled functions (forward), not at compile time",
                what);
}

/* ---- convolutions ------------------------------------------------------------- */

/* x [N, C, *sp] (or unbatched [C, *sp]) with nsp = 1 or 2 spatial dims: a 4-D view
 * [N, C, H, W] (H = 1 for 1-D) and whether a batch dim was added. */
static PV *as_image(L *L, Span at, PV *x, int nsp, const char *what, int *unbatched) {
  Type t = x->t->type;
  *unbatched = t.ndim == nsp + 1;
  if (t.ndim != nsp + 2 && !*unbatched)
    lower_error(L, at, "%s expects a %d-D or %d-D input, got shape %s", what, nsp + 1, nsp + 2, shape_str(L, &t));
  int64_t d[4];
  int k = 0;
  if (*unbatched) d[k++] = 1;
  for (int i = 0; i < t.ndim; i++) {
    if (nsp == 1 && i == t.ndim - 1) d[k++] = 1;
    d[k++] = t.dims[i];
  }
  return t_reshape(L, at, x, d, 4);
}

/* y [N, O, H', W'] back to the caller's rank */
static PV *from_image(L *L, Span at, PV *y, int nsp, int unbatched) {
  Type t = y->t->type;
  int64_t d[4];
  int k = 0;
  for (int i = unbatched; i < 4; i++)
    if (!(nsp == 1 && i == 2)) d[k++] = t.dims[i];
  return t_reshape(L, at, y, d, k);
}

static PV *add_channel_bias(L *L, Span at, PV *y, PV *b, int nsp) {
  if (!b || b->k == PV_NONE) return y;
  need_tensor_arg(L, at, b, "convolution bias");
  int64_t d[3] = {b->t->type.dims[0], 1, 1};
  if (b->t->type.ndim != 1 || b->t->type.dims[0] != y->t->type.dims[1])
    lower_error(L, at, "convolution bias must have shape [%lld], got %s", (long long)y->t->type.dims[1],
                shape_str(L, &b->t->type));
  return ADD(y, t_reshape(L, at, b, d, 1 + nsp));
}

static void conv_params_check(L *L, Span at, int nsp, const int64_t *s, const int64_t *p, const int64_t *d,
                              int64_t groups, const char *what) {
  const int64_t big = (int64_t)1 << 40;
  for (int i = 0; i < nsp; i++) {
    if (s[i] <= 0 || d[i] <= 0 || p[i] < 0)
      lower_error(L, at, "%s: stride and dilation must be positive and padding non-negative (got %lld, %lld, %lld)",
                  what, (long long)s[i], (long long)d[i], (long long)p[i]);
    if (s[i] > big) lower_error(L, at, "%s: stride is too large (%lld)", what, (long long)s[i]);
    if (p[i] > big || d[i] > big)
      lower_error(L, at, "%s: padding or dilation is too large (%lld, %lld)", what, (long long)p[i], (long long)d[i]);
  }
  if (groups <= 0) lower_error(L, at, "%s: groups must be positive, got %lld", what, (long long)groups);
}

/* The checks both convolutions start with: tensor operands, the options, a
 * weight of rank nsp + 2 (*tw); returns x as a batch of images (*unb: it had no
 * batch dimension). */
static PV *conv_operands(L *L, Span at, int nsp, PV *x, PV *w, const int64_t *stride, const int64_t *pad,
                         const int64_t *dil, int64_t groups, const char *what, Type *tw, int *unb) {
  need_tensor_arg(L, at, x, what);
  need_tensor_arg(L, at, w, what);
  need_fn_nn(L, at, what);
  conv_params_check(L, at, nsp, stride, pad, dil, groups, what);
  *tw = w->t->type;
  if (tw->ndim != nsp + 2)
    lower_error(L, at, "%s weight must be %d-D, got shape %s", what, nsp + 2, shape_str(L, tw));
  return as_image(L, at, x, nsp, what, unb);
}

/* F.conv1d / F.conv2d with groups: x [N, C, *sp], w [O, C / groups, *k]. */
PV *t_convnd(L *L, Span at, int nsp, PV *x, PV *w, PV *b, const int64_t *stride, const int64_t *pad,
             const int64_t *dil, int64_t groups) {
  const char *what = nsp == 1 ? "conv1d" : "conv2d";
  Type tw;
  int unb;
  PV *x4 = conv_operands(L, at, nsp, x, w, stride, pad, dil, groups, what, &tw, &unb);
  Type tx = x4->t->type;
  if (tw.dims[0] % groups)
    lower_error(L, at, "%s: out_channels (%lld) must be divisible by groups (%lld)", what, (long long)tw.dims[0],
                (long long)groups);
  if (tx.dims[1] != tw.dims[1] * groups)
    lower_error(L, at, "shape mismatch in %s: input %s has %lld channels, weight %s with groups=%lld expects %lld",
                what, shape_str(L, &x->t->type), (long long)tx.dims[1], shape_str(L, &tw), (long long)groups,
                (long long)(tw.dims[1] * groups));
  PV *w4 = w;
  if (nsp == 1) {
    int64_t d[4] = {tw.dims[0], tw.dims[1], 1, tw.dims[2]};
    w4 = t_reshape(L, at, w, d, 4);
  }
  int64_t s2[2] = {nsp == 1 ? 1 : stride[0], stride[nsp - 1]}, p2[2] = {nsp == 1 ? 0 : pad[0], pad[nsp - 1]},
          d2[2] = {nsp == 1 ? 1 : dil[0], dil[nsp - 1]};
  Type r = tx;
  r.dtype = tw.dtype;
  r.dims[1] = tw.dims[0];
  Type k4 = w4->t->type;
  for (int i = 0; i < 2; i++) {
    int64_t span, padded = tx.dims[2 + i] + 2 * p2[i];   /* dims < 2^40, pads <= 2^40: no overflow */
    if (ir_mul(d2[i], k4.dims[2 + i] - 1, &span) < 0 || ir_add(span, 1, &span) < 0)
      lower_error(L, at, "%s: dilation %lld is too large for the kernel %s", what, (long long)d2[i], shape_str(L, &tw));
    if (padded < span)
      lower_error(L, at, "%s: input %s is too small for the kernel %s", what, shape_str(L, &x->t->type),
                  shape_str(L, &tw));
    r.dims[2 + i] = (padded - span) / s2[i] + 1;
  }
  ValId args[2] = {t_val(L, at, tx.dtype == tw.dtype ? x4 : t_cast(L, at, x4, tw.dtype)), t_val(L, at, w4)};
  int64_t attr[7] = {s2[0], s2[1], p2[0], p2[1], d2[0], d2[1], groups};
  PV *y = t_wrap(L, nn_emit(L, at, IR_CONV2D, args, 2, r, attr, 7, 0, "conv"));
  y = add_channel_bias(L, at, y, b, 2);
  return from_image(L, at, y, nsp, unb);
}

/* F.conv_transpose1d / 2d: x [N, Cin, *sp], w [Cin, Cout / groups, *k]: the input
 * gradient of the convolution with these attributes (CONV2D_BWD_INPUT), so its
 * derivatives are the convolution's. The output is (in - 1) * stride - 2 * pad +
 * dil * (k - 1) + output_padding + 1 per axis. */
PV *t_conv_transpose(L *L, Span at, int nsp, PV *x, PV *w, PV *b, const int64_t *stride, const int64_t *pad,
                     const int64_t *out_pad, const int64_t *dil, int64_t groups) {
  const char *what = nsp == 1 ? "conv_transpose1d" : "conv_transpose2d";
  Type tw;
  int unb;
  PV *x4 = conv_operands(L, at, nsp, x, w, stride, pad, dil, groups, what, &tw, &unb);
  Type tx = x4->t->type;
  if (tx.dims[1] != tw.dims[0] || tw.dims[0] % groups)
    lower_error(L, at, "shape mismatch in %s: input %s has %lld channels, weight %s (groups=%lld) expects %lld", what,
                shape_str(L, &x->t->type), (long long)tx.dims[1], shape_str(L, &tw), (long long)groups,
                (long long)tw.dims[0]);
  PV *w4 = w;
  if (nsp == 1) {
    int64_t d[4] = {tw.dims[0], tw.dims[1], 1, tw.dims[2]};
    w4 = t_reshape(L, at, w, d, 4);
  }
  int64_t s2[2] = {nsp == 1 ? 1 : stride[0], stride[nsp - 1]}, p2[2] = {nsp == 1 ? 0 : pad[0], pad[nsp - 1]},
          d2[2] = {nsp == 1 ? 1 : dil[0], dil[nsp - 1]}, o2[2] = {nsp == 1 ? 0 : out_pad[0], out_pad[nsp - 1]};
  Type r = tx;
  r.dtype = tw.dtype;
  r.dims[1] = tw.dims[1] * groups;
  Type k4 = w4->t->type;
  for (int i = 0; i < 2; i++) {
    if (o2[i] < 0 || (o2[i] >= s2[i] && o2[i] >= d2[i]))
      lower_error(L, at, "%s: output padding must be smaller than either stride or dilation, got output_padding %lld, "
                         "stride %lld, dilation %lld", what, (long long)o2[i], (long long)s2[i], (long long)d2[i]);
    if (o2[i] >= s2[i])
      lower_error(L, at, "%s: output_padding (%lld) not smaller than the stride (%lld) is not supported by ctc", what,
                  (long long)o2[i], (long long)s2[i]);
    int64_t o, span;
    if (ir_mul(tx.dims[2 + i] - 1, s2[i], &o) < 0 || ir_mul(d2[i], k4.dims[2 + i] - 1, &span) < 0 ||
        ir_add(o, span, &o) < 0 || ir_add(o, o2[i] + 1 - 2 * p2[i], &o) < 0 || o > ((int64_t)1 << 40))
      lower_error(L, at, "%s: the output size is too large (input %s, weight %s)", what, shape_str(L, &x->t->type),
                  shape_str(L, &tw));
    if (o <= 0)
      lower_error(L, at, "%s: the output would be empty (input %s, weight %s, padding %lld)", what,
                  shape_str(L, &x->t->type), shape_str(L, &tw), (long long)p2[i]);
    r.dims[2 + i] = o;
  }
  ValId args[2] = {t_val(L, at, tx.dtype == tw.dtype ? x4 : t_cast(L, at, x4, tw.dtype)), t_val(L, at, w4)};
  int64_t attr[7] = {s2[0], s2[1], p2[0], p2[1], d2[0], d2[1], groups};
  PV *y = t_wrap(L, nn_emit(L, at, IR_CONV2D_BWD_INPUT, args, 2, r, attr, 7, 0, "conv_transpose"));
  y = add_channel_bias(L, at, y, b, 2);
  return from_image(L, at, y, nsp, unb);
}

/* ---- padding -------------------------------------------------------------------- */

/* F.pad(x, pads, mode, value): pads = (left, right) of the last dim, then of the
 * one before, ... (PyTorch's order). mode: 0 constant, 1 reflect, 2 replicate,
 * 3 circular. Negative constant pads crop (a slice after padding). */
PV *t_pad(L *L, Span at, PV *x, const int64_t *pads, int npads, int mode, double value) {
  static const char *const names[] = {"constant", "reflect", "replicate", "circular"};
  need_tensor_arg(L, at, x, "pad");
  need_fn_nn(L, at, "pad");
  Type tx = x->t->type;
  if (npads % 2 || npads / 2 > tx.ndim)
    lower_error(L, at, "pad: the padding has %d values for a %d-D input (an even number, at most two per dimension)",
                npads, tx.ndim);
  int np = npads / 2;
  if (mode != 0) {
    /* PyTorch 1.13: reflect/replicate/circular pad 1 to 3 trailing dims of a batched
     * or unbatched input ((np + 1)-D or (np + 2)-D) */
    if (np < 1 || np > 3 || (tx.ndim != np + 1 && tx.ndim != np + 2))
      lower_error(L, at, "pad: %s padding of %d dimension(s) needs a %d-D or %d-D input, got shape %s", names[mode], np,
                  np + 1, np + 2, shape_str(L, &tx));
  }
  int64_t lo[IR_MAX_DIMS] = {0}, hi[IR_MAX_DIMS] = {0};
  for (int k = 0; k < np; k++) {
    int ax = tx.ndim - 1 - k;
    lo[ax] = pads[2 * k], hi[ax] = pads[2 * k + 1];
    if (mode != 0 && (lo[ax] < 0 || hi[ax] < 0))
      lower_error(L, at, "pad: negative padding is only supported in constant mode");
    if (mode == 1 && (lo[ax] >= tx.dims[ax] || hi[ax] >= tx.dims[ax]))
      lower_error(L, at, "pad: reflect padding (%lld, %lld) must be smaller than the input dimension %d of size %lld "
                         "(shape %s)", (long long)lo[ax], (long long)hi[ax], ax, (long long)tx.dims[ax],
                  shape_str(L, &tx));
    if (mode == 3 && (lo[ax] > tx.dims[ax] || hi[ax] > tx.dims[ax]))
      lower_error(L, at, "pad: circular padding (%lld, %lld) must be at most the size %lld of dimension %d",
                  (long long)lo[ax], (long long)hi[ax], (long long)tx.dims[ax], ax);
    if (lo[ax] > ((int64_t)1 << 40) || hi[ax] > ((int64_t)1 << 40) || lo[ax] < -((int64_t)1 << 40) ||
        hi[ax] < -((int64_t)1 << 40) || tx.dims[ax] + lo[ax] + hi[ax] <= 0)
      lower_error(L, at, "pad: padding (%lld, %lld) of dimension %d (size %lld) leaves no elements or is too large",
                  (long long)lo[ax], (long long)hi[ax], ax, (long long)tx.dims[ax]);
  }
  if (mode == 3) {
    /* circular: cat(x[-lo:], x, x[:hi]) along each padded axis */
    PV *y = x;
    for (int ax = tx.ndim - np; ax < tx.ndim; ax++) {
      int64_t n = y->t->type.dims[ax];
      PV *parts[3];
      int k = 0;
      if (lo[ax]) parts[k++] = t_slice(L, at, y, ax, n - lo[ax], n, 1);
      parts[k++] = y;
      if (hi[ax]) parts[k++] = t_slice(L, at, y, ax, 0, hi[ax], 1);
      if (k > 1) y = t_concat(L, at, parts, k, ax);
    }
    return y;
  }
  /* constant: pad by the positive parts, then crop the negative ones */
  Type r = tx;
  int64_t attr[1 + IR_MAX_DIMS] = {mode};
  int any = 0, crop = 0;
  for (int ax = 0; ax < tx.ndim; ax++) {
    int64_t l = lo[ax] > 0 ? lo[ax] : 0, h = hi[ax] > 0 ? hi[ax] : 0;
    attr[1 + ax] = l;
    r.dims[ax] += l + h;
    any |= l || h;
    crop |= lo[ax] < 0 || hi[ax] < 0;
  }
  PV *y = x;
  if (any) {
    ValId v = t_val(L, at, x);
    char why[512];
    if (ir_type_problem(&r, why, sizeof why)) lower_error(L, at, "pad: %s", why);
    y = t_wrap(L, nn_emit(L, at, IR_PAD, &v, 1, r, attr, 1 + tx.ndim, mode == 0 ? value : 0, "pad"));
  }
  if (crop)
    for (int ax = 0; ax < tx.ndim; ax++) {
      int64_t n = y->t->type.dims[ax];
      if (lo[ax] < 0 || hi[ax] < 0)
        y = t_slice(L, at, y, ax, lo[ax] < 0 ? -lo[ax] : 0, hi[ax] < 0 ? n + hi[ax] : n, 1);
    }
  return y;
}

/* ---- resampling ---------------------------------------------------------------- */

static int64_t double_bits(double d) {
  int64_t b;
  memcpy(&b, &d, sizeof b);
  return b;
}

/* F.interpolate(x, size, scale_factor, mode, align_corners, recompute_scale_factor)
 * for mode nearest (3-D and 4-D inputs), linear (3-D) and bilinear (4-D). */
PV *t_interpolate(L *L, Span at, PV *x, PV *size, PV *scale, const char *mode, PV *align, PV *recompute) {
  need_tensor_arg(L, at, x, "interpolate");
  need_fn_nn(L, at, "interpolate");
  Type tx = x->t->type;
  int m = !strcmp(mode, "nearest") ? 0 : !strcmp(mode, "bilinear") || !strcmp(mode, "linear") ? 1 : -1;
  if (m < 0)
    lower_error(L, at, "interpolate: mode '%s' is not supported by ctc (nearest, linear, bilinear are)", mode);
  int nsp = tx.ndim - 2;
  if (nsp < 1 || nsp > 2 || (m == 1 && nsp != (strcmp(mode, "linear") ? 2 : 1)))
    lower_error(L, at, "interpolate: mode '%s' with a %d-D input %s is not supported (nearest takes 3-D or 4-D, "
                       "linear 3-D, bilinear 4-D inputs)", mode, tx.ndim, shape_str(L, &tx));
  if (!ir_dtype_is_float(tx.dtype)) lower_error(L, at, "interpolate needs a floating-point input");
  int has_size = size && size->k != PV_NONE, has_scale = scale && scale->k != PV_NONE;
  if (has_size == has_scale)
    lower_error(L, at, has_size ? "interpolate: only one of size or scale_factor should be defined"
                                : "interpolate: either size or scale_factor should be defined");
  int ac = 0;
  if (align && align->k != PV_NONE) {
    if (m == 0)
      lower_error(L, at, "interpolate: align_corners option can only be set with the interpolating modes: "
                         "linear | bilinear | bicubic | trilinear");
    ac = arg_bool(L, at, align, "align_corners");
  }
  int64_t out[2];
  double sc[2] = {0, 0};
  if (has_size) {
    int n = arg_ints(L, at, size, out, 2, "size");
    if (n == 1) out[1] = out[0];
    else if (n != nsp) lower_error(L, at, "interpolate: size has %d values for %d spatial dimensions", n, nsp);
  } else {
    if (scale->k == PV_TUPLE || scale->k == PV_LIST) {
      if (scale->n != nsp)
        lower_error(L, at, "interpolate: scale_factor has %d values for %d spatial dimensions", scale->n, nsp);
      for (int i = 0; i < nsp; i++) sc[i] = arg_num(L, at, scale->items[i], "scale_factor");
    } else {
      sc[0] = sc[1] = arg_num(L, at, scale, "scale_factor");
    }
    for (int i = 0; i < nsp; i++) {
      double o = floor((double)tx.dims[2 + i] * sc[i]);
      if (!(sc[i] > 0) || !(o >= 1) || o > (double)((int64_t)1 << 40))
        lower_error(L, at, "interpolate: scale_factor %g gives an output size of %g for input size %lld", sc[i], o,
                    (long long)tx.dims[2 + i]);
      out[i] = (int64_t)o;
    }
    if (recompute && recompute->k != PV_NONE && arg_bool(L, at, recompute, "recompute_scale_factor"))
      sc[0] = sc[1] = 0;   /* the scale is then in / out */
  }
  for (int i = 0; i < nsp; i++) {
    if (out[i] <= 0) lower_error(L, at, "interpolate: output size %lld must be positive", (long long)out[i]);
    if (out[i] > ((int64_t)1 << 24))   /* the generated code holds a table of source indices per output row/column */
      lower_error(L, at, "interpolate: output size %lld is too large for ctc (at most 16777216 per dimension)",
                  (long long)out[i]);
  }
  /* 1-D as an image of height 1 (in = out = 1 is the identity on that axis) */
  int64_t d4[4] = {tx.dims[0], tx.dims[1], nsp == 1 ? 1 : tx.dims[2], tx.dims[tx.ndim - 1]};
  PV *x4 = nsp == 1 ? t_reshape(L, at, x, d4, 4) : x;
  Type r = x4->t->type;
  r.dims[2] = nsp == 1 ? 1 : out[0];
  r.dims[3] = out[nsp - 1];
  char why[512];
  if (ir_type_problem(&r, why, sizeof why)) lower_error(L, at, "interpolate: %s", why);
  int64_t attr[4] = {m, ac, nsp == 1 ? 0 : double_bits(sc[0]), double_bits(sc[nsp - 1])};
  ValId v = t_val(L, at, x4);
  PV *y = t_wrap(L, nn_emit(L, at, IR_UPSAMPLE, &v, 1, r, attr, 4, 0, "upsample"));
  if (nsp == 1) {
    int64_t d3[3] = {r.dims[0], r.dims[1], r.dims[3]};
    y = t_reshape(L, at, y, d3, 3);
  }
  return y;
}

/* F.pixel_shuffle(x, r): [*, C r^2, H, W] -> [*, C, H r, W r]; pixel_unshuffle the inverse. */
PV *t_pixel_shuffle(L *L, Span at, PV *x, int64_t f, int unshuffle) {
  const char *what = unshuffle ? "pixel_unshuffle" : "pixel_shuffle";
  need_tensor_arg(L, at, x, what);
  need_fn_nn(L, at, what);
  Type t = x->t->type;
  if (t.ndim < 3 || t.ndim + 3 > IR_MAX_DIMS)
    lower_error(L, at, "%s expects an input with 3 to %d dimensions, got shape %s", what, IR_MAX_DIMS - 3,
                shape_str(L, &t));
  if (f <= 0) lower_error(L, at, "%s: the factor must be positive, got %lld", what, (long long)f);
  int b = t.ndim - 3;
  int64_t C = t.dims[b], H = t.dims[b + 1], W = t.dims[b + 2];
  int64_t d[IR_MAX_DIMS], perm[IR_MAX_DIMS];
  for (int i = 0; i < b; i++) d[i] = t.dims[i], perm[i] = i;
  int64_t ff;
  if (ir_mul(f, f, &ff) < 0 || ir_mul(ff, C, &ff) < 0)
    lower_error(L, at, "%s: the factor %lld is too large", what, (long long)f);
  if (!unshuffle) {
    if (C % (f * f))
      lower_error(L, at, "pixel_shuffle expects its input's channel dimension (%lld) to be divisible by the square of "
                         "upscale_factor (%lld)", (long long)C, (long long)(f * f));
    /* [.., C, f, f, H, W] -> [.., C, H, f, W, f] */
    d[b] = C / (f * f), d[b + 1] = f, d[b + 2] = f, d[b + 3] = H, d[b + 4] = W;
    PV *y = t_reshape(L, at, x, d, b + 5);
    int64_t p[5] = {0, 3, 1, 4, 2};
    for (int i = 0; i < 5; i++) perm[b + i] = b + p[i];
    y = t_permute(L, at, y, perm, b + 5);
    d[b] = C / (f * f), d[b + 1] = H * f, d[b + 2] = W * f;
    return t_reshape(L, at, y, d, b + 3);
  }
  if (H % f || W % f)
    lower_error(L, at, "pixel_unshuffle expects height (%lld) and width (%lld) to be divisible by downscale_factor "
                       "(%lld)", (long long)H, (long long)W, (long long)f);
  /* [.., C, H/f, f, W/f, f] -> [.., C, f, f, H/f, W/f] */
  d[b] = C, d[b + 1] = H / f, d[b + 2] = f, d[b + 3] = W / f, d[b + 4] = f;
  PV *y = t_reshape(L, at, x, d, b + 5);
  int64_t p[5] = {0, 2, 4, 1, 3};
  for (int i = 0; i < 5; i++) perm[b + i] = b + p[i];
  y = t_permute(L, at, y, perm, b + 5);
  d[b] = C * f * f, d[b + 1] = H / f, d[b + 2] = W / f;
  return t_reshape(L, at, y, d, b + 3);
}

/* ---- normalization ------------------------------------------------------------- */

/* per-channel vector v [C] shaped to broadcast against x [N, C, ...] */
static PV *per_channel(L *L, Span at, PV *v, const Type *tx, const char *what) {
  need_tensor_arg(L, at, v, what);
  if (v->t->type.ndim != 1 || v->t->type.dims[0] != tx->dims[1])
    lower_error(L, at, "%s must have shape [%lld] (the input's channels), got %s", what, (long long)tx->dims[1],
                shape_str(L, &v->t->type));
  int64_t d[IR_MAX_DIMS];
  d[0] = tx->dims[1];
  for (int i = 2; i < tx->ndim; i++) d[i - 1] = 1;
  return t_reshape(L, at, v, d, tx->ndim - 1);
}

static PV *affine(L *L, Span at, PV *y, PV *w, PV *b, const Type *tx) {
  if (w && w->k != PV_NONE) y = MUL(y, per_channel(L, at, w, tx, "weight"));
  if (b && b->k != PV_NONE) y = ADD(y, per_channel(L, at, b, tx, "bias"));
  return y;
}

/* running statistics are updated in place: a buffer of the model is written back
 * when the entry finishes (later reads in it see the new value), another tensor
 * takes the new value as an in-place update would */
static void stat_update(L *L, Span at, PV *t, PV *v) {
  if (t->t->slot) {
    if (t->t->slot->index < 0 || !L->T->param_cur)
      lower_error(L, at, "batch_norm in training mode updates its running statistics, which needs a compiled training "
                         "function and buffers of the model");
    state_update(L, at, t, v);
  } else {
    t_inplace(L, at, t, v);
  }
}

/* F.batch_norm(x, running_mean, running_var, weight, bias, training, momentum, eps)
 * over x [N, C, ...]. Training (or no running statistics): the batch's mean and
 * biased variance normalize; the running statistics (buffers) are then updated
 * as PyTorch does, with the unbiased variance, (1 - m) * running + m * batch,
 * momentum < 0 meaning None (the cumulative average 1 / num_batches_tracked);
 * num_batches_tracked (may be NULL) += 1. Eval: the running statistics. */
PV *t_batch_norm(L *L, Span at, PV *x, PV *rm, PV *rv, PV *w, PV *b, int training, double momentum, double eps,
                 PV *nbt) {
  need_tensor_arg(L, at, x, "batch_norm");
  need_fn_nn(L, at, "batch_norm");
  Type tx = x->t->type;
  if (tx.ndim < 2) lower_error(L, at, "batch_norm expects an input with at least 2 dimensions, got shape %s",
                               shape_str(L, &tx));
  if (!ir_dtype_is_float(tx.dtype)) lower_error(L, at, "batch_norm needs a floating-point input");
  int have_stats = rm && rm->k != PV_NONE && rv && rv->k != PV_NONE;
  if (!training && !have_stats)
    lower_error(L, at, "batch_norm in eval mode needs running_mean and running_var (track_running_stats=True)");
  int64_t red[IR_MAX_DIMS], n = 1;
  int nr = 0;
  for (int i = 0; i < tx.ndim; i++)
    if (i != 1) red[nr++] = i, n *= tx.dims[i];
  PV *mean, *var;
  if (training) {
    if (n <= 1)
      lower_error(L, at, "Expected more than 1 value per channel when training, got input size %s", shape_str(L, &tx));
    mean = t_reduce(L, at, IR_REDUCE_SUM, x, red, nr, 1, 1);
    PV *xc = SUB(x, mean);
    var = t_reduce(L, at, IR_REDUCE_SUM, MUL(xc, xc), red, nr, 1, 1);
    PV *y = MUL(xc, t_unary(L, at, IR_RSQRT, ADD(var, NUM(eps))));
    if (have_stats) {
      need_tensor_arg(L, at, rm, "running_mean");
      need_tensor_arg(L, at, rv, "running_var");
      PV *factor = NUM(momentum);
      if (nbt && nbt->k == PV_TENSOR) {
        PV *nb = ADD(nbt, pv_int(L, 1));
        stat_update(L, at, nbt, nb);
        if (momentum < 0) factor = DIV(pv_float(L, 1.0), t_cast(L, at, nb, tx.dtype));
      } else if (momentum < 0) {
        lower_error(L, at, "batch_norm with momentum=None needs the num_batches_tracked buffer");
      }
      int64_t c1[1] = {tx.dims[1]};
      PV *bm = t_reshape(L, at, t_detach(L, at, mean), c1, 1);
      PV *bv = t_reshape(L, at, MUL(t_detach(L, at, var), NUM((double)n / (double)(n - 1))), c1, 1);
      PV *keep = momentum < 0 ? SUB(pv_float(L, 1.0), factor) : NUM(1.0 - momentum);
      stat_update(L, at, rm, ADD(MUL(rm, keep), MUL(bm, factor)));
      stat_update(L, at, rv, ADD(MUL(rv, keep), MUL(bv, factor)));
    }
    return affine(L, at, y, w, b, &tx);
  }
  PV *m = per_channel(L, at, rm, &tx, "running_mean"), *v = per_channel(L, at, rv, &tx, "running_var");
  PV *y = MUL(SUB(x, m), t_unary(L, at, IR_RSQRT, ADD(v, NUM(eps))));
  return affine(L, at, y, w, b, &tx);
}

/* F.instance_norm without running statistics: each (sample, channel) over its
 * spatial positions (biased variance), then the per-channel affine. */
PV *t_instance_norm(L *L, Span at, PV *x, PV *w, PV *b, double eps) {
  need_tensor_arg(L, at, x, "instance_norm");
  need_fn_nn(L, at, "instance_norm");
  Type tx = x->t->type;
  if (tx.ndim < 3) lower_error(L, at, "instance_norm expects an input [N, C, ...] with spatial dimensions, got %s",
                               shape_str(L, &tx));
  int64_t red[IR_MAX_DIMS], n = 1;
  int nr = 0;
  for (int i = 2; i < tx.ndim; i++) red[nr++] = i, n *= tx.dims[i];
  if (n <= 1)
    lower_error(L, at, "Expected more than 1 spatial element when training, got input size %s", shape_str(L, &tx));
  PV *mean = t_reduce(L, at, IR_REDUCE_SUM, x, red, nr, 1, 1);
  PV *xc = SUB(x, mean);
  PV *var = t_reduce(L, at, IR_REDUCE_SUM, MUL(xc, xc), red, nr, 1, 1);
  return affine(L, at, MUL(xc, t_unary(L, at, IR_RSQRT, ADD(var, NUM(eps)))), w, b, &tx);
}

/* F.group_norm(x [N, C, ...], G, weight, bias, eps): statistics per sample over
 * each group of C / G channels and all positions. */
PV *t_group_norm(L *L, Span at, PV *x, int64_t groups, PV *w, PV *b, double eps) {
  need_tensor_arg(L, at, x, "group_norm");
  need_fn_nn(L, at, "group_norm");
  Type tx = x->t->type;
  if (tx.ndim < 2) lower_error(L, at, "group_norm expects an input [N, C, ...], got %s", shape_str(L, &tx));
  if (groups <= 0 || tx.dims[1] % groups)
    lower_error(L, at, "Expected number of channels in input (%lld) to be divisible by num_groups (%lld)",
                (long long)tx.dims[1], (long long)groups);
  int64_t d[3] = {tx.dims[0], groups, ir_numel(&tx) / tx.dims[0] / groups}, two = 2;
  PV *xg = t_reshape(L, at, x, d, 3);
  PV *mean = t_reduce(L, at, IR_REDUCE_SUM, xg, &two, 1, 1, 1);
  PV *xc = SUB(xg, mean);
  PV *var = t_reduce(L, at, IR_REDUCE_SUM, MUL(xc, xc), &two, 1, 1, 1);
  PV *y = t_reshape(L, at, MUL(xc, t_unary(L, at, IR_RSQRT, ADD(var, NUM(eps)))), tx.dims, tx.ndim);
  return affine(L, at, y, w, b, &tx);
}

/* ---- activations ------------------------------------------------------------------
 * PyTorch 1.13's backward formulas (derivatives.yaml, the *_backward kernels) decide
 * which side of a kink a boundary point takes; each where() below selects the same
 * side, so the VJP and JVP of the composition give PyTorch's value there. */

/* the constant c where it stands for a value of x's dtype: for an integer tensor
 * c converted to it (truncated, as PyTorch's Scalar to int64_t), so relu6, hardtanh
 * and threshold keep integer results with PyTorch's values */
static int is_int_tensor(PV *x) { return x->k == PV_TENSOR && !ir_dtype_is_float(x->t->type.dtype); }
static double like(PV *x, double c) { return is_int_tensor(x) && fabs(c) < 9e15 ? trunc(c) : c; }
static PV *num_like(L *L, PV *x, double c) {
  return is_int_tensor(x) && fabs(c) < 9e15 ? pv_int(L, (int64_t)c) : pv_float(L, c);
}

/* log1p(e): exact for small e (softplus, logsigmoid and mish of large negative inputs) */
static PV *log1p_(L *L, Span at, PV *e) { return t_unary(L, at, IR_LOG1P, e); }

/* softplus: bx > threshold ? x : log1p(exp(bx)) / b; softplus_backward takes the
 * log1p side at bx == threshold. The exp argument is clamped to the threshold
 * where its side is not selected (no inf * 0 in the adjoint). */
PV *t_softplus(L *L, Span at, PV *x, double beta, double threshold) {
  PV *bx = beta == 1 ? x : MUL(x, NUM(beta));
  PV *lin = CMP(OP_GT, bx, NUM(threshold));
  PV *e = t_unary(L, at, IR_EXP, WHERE(lin, NUM(threshold), bx));
  PV *sp = log1p_(L, at, e);
  if (beta != 1) sp = DIV(sp, NUM(beta));
  return WHERE(lin, x, sp);
}

/* elu(x, alpha, scale, input_scale): x > 0 ? scale x : scale alpha (exp(x is) - 1);
 * elu_backward takes the exponential side at x == 0 (so SELU's slope there is
 * scale * alpha, as in PyTorch). ELU, SELU and CELU are this. */
PV *t_elu(L *L, Span at, PV *x, double alpha, double scale, double input_scale) {
  PV *pos = CMP(OP_GT, x, NUM(0));
  PV *xn = WHERE(pos, NUM(0), x);
  if (input_scale != 1) xn = MUL(xn, NUM(input_scale));
  PV *neg = MUL(SUB(t_unary(L, at, IR_EXP, xn), NUM(1.0)), NUM(scale * alpha));
  return WHERE(pos, scale == 1 ? x : MUL(x, NUM(scale)), neg);
}

/* hardtanh(min, max) (and relu6 = hardtanh(0, 6)): gradient 0 at and beyond both
 * ends (hardtanh_backward: x <= min || x >= max), NaN passes through. */
PV *t_hardtanh(L *L, Span at, PV *x, double lo, double hi) {
  if (lo > hi) lower_error(L, at, "hardtanh: min_val (%g) cannot be greater than max_val (%g)", lo, hi);
  lo = like(x, lo), hi = like(x, hi);
  return WHERE(CMP(OP_LE, x, NUM(lo)), num_like(L, x, lo), WHERE(CMP(OP_GE, x, NUM(hi)), num_like(L, x, hi), x));
}

/* hardsigmoid: (x + 3) / 6 clamped to [0, 1]; gradient 1/6 strictly inside (-3, 3). */
PV *t_hardsigmoid(L *L, Span at, PV *x) {
  PV *mid = DIV(ADD(x, NUM(3)), NUM(6));
  return WHERE(CMP(OP_LE, x, NUM(-3)), NUM(0), WHERE(CMP(OP_GE, x, NUM(3)), NUM(1), mid));
}

/* hardswish: x (x + 3) / 6 on [-3, 3]; PyTorch 1.13's gradient: 0 below -3, x / 3 + 1/2
 * on [-3, 3) (so -1/2 at -3), 1 from 3 on. */
PV *t_hardswish(L *L, Span at, PV *x) {
  PV *mid = DIV(MUL(x, ADD(x, NUM(3))), NUM(6));
  return WHERE(CMP(OP_LT, x, NUM(-3)), NUM(0), WHERE(CMP(OP_LT, x, NUM(3)), mid, x));
}

/* mish: x tanh(softplus(x)) */
PV *t_mish(L *L, Span at, PV *x) { return MUL(x, t_unary(L, at, IR_TANH, t_softplus(L, at, x, 1, 20))); }

/* softsign: x / (1 + |x|) */
PV *t_softsign(L *L, Span at, PV *x) { return DIV(x, ADD(t_unary(L, at, IR_ABS, x), NUM(1))); }

/* tanhshrink: x - tanh(x) */
PV *t_tanhshrink(L *L, Span at, PV *x) { return SUB(x, t_unary(L, at, IR_TANH, x)); }

/* hardshrink: 0 on [-l, l] (boundaries included, gradient 0 there), else x; NaN passes */
PV *t_hardshrink(L *L, Span at, PV *x, double l) {
  return WHERE(CMP(OP_LE, t_unary(L, at, IR_ABS, x), NUM(l)), num_like(L, x, 0), x);
}

/* softshrink: x - l above l, x + l below -l, else 0 (gradient 0 on [-l, l]) */
PV *t_softshrink(L *L, Span at, PV *x, double l) {
  if (l < 0) lower_error(L, at, "softshrink: lambda must be greater or equal to 0, but found to be %g", l);
  return WHERE(CMP(OP_GT, x, NUM(l)), SUB(x, NUM(l)), WHERE(CMP(OP_LT, x, NUM(-l)), ADD(x, NUM(l)), NUM(0)));
}

/* logsigmoid: -softplus(-x), stable for both signs; gradient sigmoid(-x) (1/2 at 0) */
PV *t_logsigmoid(L *L, Span at, PV *x) {
  return t_unary(L, at, IR_NEG, t_softplus(L, at, t_unary(L, at, IR_NEG, x), 1, 20));
}

/* threshold(x, th, value): x <= th ? value : x (threshold_backward: 0 where x <= th);
 * NaN passes through */
PV *t_threshold(L *L, Span at, PV *x, double th, double value) {
  th = like(x, th);
  return WHERE(CMP(OP_LE, x, NUM(th)), num_like(L, x, value), x);
}

/* glu(x, dim): a * sigmoid(b) for the two halves a, b of x along dim */
PV *t_glu(L *L, Span at, PV *x, int64_t dim) {
  need_tensor_arg(L, at, x, "glu");
  Type t = x->t->type;
  if (t.ndim == 0) lower_error(L, at, "glu does not support scalars because halving size must be even");
  int d = (int)t_norm_dim(L, at, dim, t.ndim);
  if (t.dims[d] % 2)
    lower_error(L, at, "Halving dimension must be even, but dimension %d is size %lld", d, (long long)t.dims[d]);
  int64_t h = t.dims[d] / 2;
  return MUL(t_slice(L, at, x, d, 0, h, 1), t_unary(L, at, IR_SIGMOID, t_slice(L, at, x, d, h, 2 * h, 1)));
}

/* prelu(x, w): x > 0 ? x : w x, w of 1 or C (channel dim 1, or 0 for a 1-D input)
 * elements; at x == 0 the w x side (prelu's backward: dx = w g, dw = x g = 0). */
PV *t_prelu(L *L, Span at, PV *x, PV *w) {
  need_tensor_arg(L, at, x, "prelu");
  need_tensor_arg(L, at, w, "prelu weight");
  Type t = x->t->type, tw = w->t->type;
  int64_t nw = ir_numel(&tw);
  PV *wb = w;
  if (nw != 1) {
    int cd = t.ndim >= 2 ? 1 : 0;
    if (t.ndim == 0 || tw.ndim != 1 || t.dims[cd] != nw)
      lower_error(L, at, "Mismatch of parameter numbers and input channel size. Found parameter numbers = %lld and "
                         "channel size = %lld.", (long long)nw, (long long)(t.ndim ? t.dims[cd] : 1));
    int64_t d[IR_MAX_DIMS];
    d[0] = nw;
    for (int i = cd + 1; i < t.ndim; i++) d[i - cd] = 1;
    wb = t_reshape(L, at, w, d, t.ndim - cd);
  } else if (tw.ndim != 0) {
    int64_t one = 1;
    wb = t_reshape(L, at, w, &one, 0);
  }
  return WHERE(CMP(OP_GT, x, NUM(0)), x, MUL(wb, x));
}

/* ---- random tensors in compiled code ------------------------------------------------ */

/* torch.rand_like / randn_like / rand / randn inside a compiled training function:
 * RAND_UNIFORM keyed by the `rng.offset` state (as dropout), normals by Box-Muller
 * from two uniform draws. Equal to PyTorch's in distribution, not bit for bit. */
/* forward (inference) draws too (a VAE's reparameterize, F.dropout(x, training=True)):
 * it reads and advances the rng.offset state like a training function, so each call
 * draws anew */
void forward_rng_enable(L *L) {
  if (!L->T->fn || L->T->param_cur || !L->T->forward_rng) return;
  L->T->param_cur = arena_alloc(L->a, sizeof(ValId) * (size_t)(L->T->prog->params.len + 1));
  for (int i = 0; i < L->T->prog->params.len; i++) L->T->param_cur[i] = -1;
}

PV *t_random(L *L, Span at, Type t, int normal) {
  const char *what = normal ? "randn" : "rand";
  forward_rng_enable(L);
  if (!L->T->fn || !L->T->param_cur)
    lower_error(L, at, "torch.%s in compiled code needs a compiled training function (it advances the random-number "
                       "state, which forward entries do not have)", what);
  if (!ir_dtype_is_float(t.dtype)) lower_error(L, at, "torch.%s needs a floating-point dtype", what);
  Type st = {0};
  st.dtype = DT_I64;
  PV *off = state_tensor(L, at, "rng.offset", &st, 0);
  ValId o = t_val(L, at, off);
  int64_t n = ir_numel(&t);
  PV *u = t_wrap(L, nn_emit(L, at, IR_RAND_UNIFORM, &o, 1, t, NULL, 0, 0, "uniform"));
  PV *r = u;
  if (normal) {
    ValId o2 = t_val(L, at, ADD(t_wrap(L, o), pv_int(L, n)));
    PV *u2 = t_wrap(L, nn_emit(L, at, IR_RAND_UNIFORM, &o2, 1, t, NULL, 0, 0, "uniform"));
    PV *rad = t_unary(L, at, IR_SQRT, MUL(t_unary(L, at, IR_LOG, SUB(NUM(1.0), u)), NUM(-2.0)));
    r = MUL(rad, t_unary(L, at, IR_COS, MUL(u2, NUM(2 * M_PI))));
  }
  state_update(L, at, off, ADD(t_wrap(L, o), pv_int(L, normal ? 2 * n : n)));
  return r;
}

/* ---- the functional forms: torch.nn.functional's signatures ------------------------------
 * Each handler binds PyTorch's parameter names, so a module whose options are the
 * same names (nn.ELU(alpha) and F.elu(input, alpha)) calls it with its attributes. */

static double opt_num(L *L, Span at, PV *v, double dflt, const char *what) {
  return v && v->k != PV_NONE ? arg_num(L, at, v, what) : dflt;
}

static int opt_bool(L *L, Span at, PV *v, int dflt, const char *what) {
  return v && v->k != PV_NONE ? arg_bool(L, at, v, what) : dflt;
}

/* n ints from an int or a sequence of n (stride=2, padding=(1, 0)) */
void nn_ints(L *L, Span at, PV *v, int n, int64_t dflt, int64_t *out, const char *what) {
  if (!v || v->k == PV_NONE) {
    for (int i = 0; i < n; i++) out[i] = dflt;
    return;
  }
  int64_t tmp[IR_MAX_DIMS];
  int k = arg_ints(L, at, v, tmp, IR_MAX_DIMS, what);
  if (k == 1)
    for (int i = 0; i < n; i++) out[i] = tmp[0];
  else if (k == n)
    for (int i = 0; i < n; i++) out[i] = tmp[i];
  else
    lower_error(L, at, "%s must be an int or a tuple of %d ints, got %d values", what, n, k);
}

static PV *need_tensor_x(L *L, Span at, PV *x, const char *what) {
  if (!x || x->k != PV_TENSOR)
    lower_error(L, at, "%s: expected a tensor input, got '%s'", what, x ? pv_kind_name(x) : "nothing");
  return x;
}

/* inplace=True: the input tensor takes the result (every name bound to it sees it) */
static PV *maybe_inplace(L *L, Span at, PV *flag, PV *x, PV *r) {
  return flag && flag->k != PV_NONE && arg_bool(L, at, flag, "inplace") ? t_inplace(L, at, x, r) : r;
}

/* padding of a convolution: ints, or 'valid' / 'same' (stride 1: total d (k - 1),
 * the extra one at the end, as PyTorch, through an explicit F.pad) */
PV *nn_conv_padding(L *L, Span at, int nsp, PV *x, PV *w, PV *padv, const int64_t *stride, const int64_t *dil,
                     int64_t *pad) {
  if (!padv || padv->k != PV_STR) {
    nn_ints(L, at, padv, nsp, 0, pad, "padding");
    return x;
  }
  for (int i = 0; i < nsp; i++) pad[i] = 0;
  if (!strcmp(padv->s, "valid")) return x;
  if (strcmp(padv->s, "same"))
    lower_error(L, at, "Invalid padding string '%s', should be one of ('valid', 'same')", padv->s);
  for (int i = 0; i < nsp; i++)
    if (stride[i] != 1) lower_error(L, at, "padding='same' is not supported for strided convolutions");
  need_tensor_x(L, at, w, "convolution weight");
  int64_t extra[2 * 3] = {0};
  int asym = 0;
  Type tw = w->t->type;
  for (int i = 0; i < nsp; i++) {
    int64_t total = dil[i] * (tw.dims[tw.ndim - nsp + i] - 1);
    pad[i] = total / 2;
    int64_t e = total - 2 * pad[i];
    extra[2 * (nsp - 1 - i) + 1] = e;   /* F.pad order: last dim first, (left, right) */
    asym |= e != 0;
  }
  return asym ? t_pad(L, at, x, extra, 2 * nsp, 0, 0) : x;
}

static PV *nnf_convnd(L *L, Args *A, int nsp) {
  PV *a[7];
  Span at = A->at;
  bind_args(L, A, "input,weight,bias=,stride=,padding=,dilation=,groups=", a);
  int64_t s[2], p[2], d[2];
  nn_ints(L, at, a[3], nsp, 1, s, "stride");
  nn_ints(L, at, a[5], nsp, 1, d, "dilation");
  PV *x = nn_conv_padding(L, at, nsp, need_tensor_x(L, at, a[0], A->fname), a[1], a[4], s, d, p);
  int64_t g = a[6] && a[6]->k != PV_NONE ? arg_int(L, at, a[6], "groups") : 1;
  return t_convnd(L, at, nsp, x, need_tensor_x(L, at, a[1], "weight"), a[2], s, p, d, g);
}
PV *nnf_conv1d(L *L, PV *fn, Args *A) { (void)fn; return nnf_convnd(L, A, 1); }
PV *nnf_conv2d(L *L, PV *fn, Args *A) { (void)fn; return nnf_convnd(L, A, 2); }

static PV *nnf_conv_transpose(L *L, Args *A, int nsp) {
  PV *a[8];
  Span at = A->at;
  bind_args(L, A, "input,weight,bias=,stride=,padding=,output_padding=,groups=,dilation=", a);
  int64_t s[2], p[2], op[2], d[2];
  nn_ints(L, at, a[3], nsp, 1, s, "stride");
  nn_ints(L, at, a[4], nsp, 0, p, "padding");
  nn_ints(L, at, a[5], nsp, 0, op, "output_padding");
  nn_ints(L, at, a[7], nsp, 1, d, "dilation");
  int64_t g = a[6] && a[6]->k != PV_NONE ? arg_int(L, at, a[6], "groups") : 1;
  return t_conv_transpose(L, at, nsp, need_tensor_x(L, at, a[0], A->fname), need_tensor_x(L, at, a[1], "weight"), a[2],
                          s, p, op, d, g);
}
PV *nnf_conv_transpose1d(L *L, PV *fn, Args *A) { (void)fn; return nnf_conv_transpose(L, A, 1); }
PV *nnf_conv_transpose2d(L *L, PV *fn, Args *A) { (void)fn; return nnf_conv_transpose(L, A, 2); }

int nn_pad_mode(L *L, Span at, PV *mode) {
  static const char *const names[] = {"constant", "reflect", "replicate", "circular"};
  if (!mode || mode->k == PV_NONE) return 0;
  if (mode->k != PV_STR) lower_error(L, at, "pad: mode must be a string");
  for (int i = 0; i < 4; i++)
    if (!strcmp(mode->s, names[i])) return i;
  lower_error(L, at, "pad: unsupported padding mode '%s' (constant, reflect, replicate, circular)", mode->s);
}

PV *nnf_pad(L *L, PV *fn, Args *A) {
  (void)fn;
  PV *a[4];
  Span at = A->at;
  bind_args(L, A, "input,pad,mode=,value=", a);
  int64_t p[2 * IR_MAX_DIMS];
  int n = arg_ints(L, at, a[1], p, 2 * IR_MAX_DIMS, "pad");
  int mode = nn_pad_mode(L, at, a[2]);
  double v = opt_num(L, at, a[3], 0, "value");
  if (mode != 0 && a[3] && a[3]->k != PV_NONE && v != 0)
    lower_error(L, at, "pad: padding mode '%s' doesn't take in value argument", a[2]->s);
  return t_pad(L, at, need_tensor_x(L, at, a[0], "pad"), p, n, mode, v);
}

PV *nnf_interpolate(L *L, PV *fn, Args *A) {
  (void)fn;
  PV *a[7];
  Span at = A->at;
  bind_args(L, A, "input,size=,scale_factor=,mode=,align_corners=,recompute_scale_factor=,antialias=", a);
  const char *mode = "nearest";
  if (a[3] && a[3]->k != PV_NONE) {
    if (a[3]->k != PV_STR) lower_error(L, at, "interpolate: mode must be a string");
    mode = a[3]->s;
  }
  if (opt_bool(L, at, a[6], 0, "antialias")) lower_error(L, at, "interpolate: antialias=True is not supported by ctc");
  return t_interpolate(L, at, need_tensor_x(L, at, a[0], "interpolate"), a[1], a[2], mode, a[4], a[5]);
}

/* F.upsample_nearest(input, size, scale_factor) and F.upsample_bilinear (align_corners=True) */
PV *nnf_upsample_nearest(L *L, PV *fn, Args *A) {
  (void)fn;
  PV *a[3];
  bind_args(L, A, "input,size=,scale_factor=", a);
  return t_interpolate(L, A->at, need_tensor_x(L, A->at, a[0], "upsample"), a[1], a[2], "nearest", NULL, NULL);
}
PV *nnf_upsample_bilinear(L *L, PV *fn, Args *A) {
  (void)fn;
  PV *a[3];
  bind_args(L, A, "input,size=,scale_factor=", a);
  return t_interpolate(L, A->at, need_tensor_x(L, A->at, a[0], "upsample"), a[1], a[2], "bilinear", pv_bool(L, 1),
                       NULL);
}

PV *nnf_pixel_shuffle(L *L, PV *fn, Args *A) {
  (void)fn;
  PV *a[2];
  bind_args(L, A, "input,upscale_factor", a);
  return t_pixel_shuffle(L, A->at, need_tensor_x(L, A->at, a[0], "pixel_shuffle"),
                         arg_int(L, A->at, a[1], "upscale_factor"), 0);
}
PV *nnf_pixel_unshuffle(L *L, PV *fn, Args *A) {
  (void)fn;
  PV *a[2];
  bind_args(L, A, "input,downscale_factor", a);
  return t_pixel_shuffle(L, A->at, need_tensor_x(L, A->at, a[0], "pixel_unshuffle"),
                         arg_int(L, A->at, a[1], "downscale_factor"), 1);
}

PV *nnf_batch_norm(L *L, PV *fn, Args *A) {
  (void)fn;
  PV *a[8];
  Span at = A->at;
  bind_args(L, A, "input,running_mean,running_var,weight=,bias=,training=,momentum=,eps=", a);
  double m = a[6] && a[6]->k == PV_NONE ? -1 : opt_num(L, at, a[6], 0.1, "momentum");
  return t_batch_norm(L, at, need_tensor_x(L, at, a[0], "batch_norm"), a[1], a[2], a[3], a[4],
                      opt_bool(L, at, a[5], 0, "training"), m, opt_num(L, at, a[7], 1e-5, "eps"), NULL);
}

PV *nnf_instance_norm(L *L, PV *fn, Args *A) {
  (void)fn;
  PV *a[8];
  Span at = A->at;
  bind_args(L, A, "input,running_mean=,running_var=,weight=,bias=,use_input_stats=,momentum=,eps=", a);
  if ((a[1] && a[1]->k != PV_NONE) || (a[2] && a[2]->k != PV_NONE) || !opt_bool(L, at, a[5], 1, "use_input_stats"))
    lower_error(L, at, "instance_norm with running statistics is not supported by ctc");
  return t_instance_norm(L, at, need_tensor_x(L, at, a[0], "instance_norm"), a[3], a[4],
                         opt_num(L, at, a[7], 1e-5, "eps"));
}

PV *nnf_group_norm(L *L, PV *fn, Args *A) {
  (void)fn;
  PV *a[5];
  Span at = A->at;
  bind_args(L, A, "input,num_groups,weight=,bias=,eps=", a);
  return t_group_norm(L, at, need_tensor_x(L, at, a[0], "group_norm"), arg_int(L, at, a[1], "num_groups"), a[2], a[3],
                      opt_num(L, at, a[4], 1e-5, "eps"));
}

/* activations: F.<name>(input, options..., inplace=) */
PV *nnf_softplus(L *L, PV *fn, Args *A) {
  (void)fn;
  PV *a[3];
  bind_args(L, A, "input,beta=,threshold=", a);
  return t_softplus(L, A->at, need_tensor_x(L, A->at, a[0], "softplus"), opt_num(L, A->at, a[1], 1, "beta"),
                    opt_num(L, A->at, a[2], 20, "threshold"));
}
PV *nnf_elu(L *L, PV *fn, Args *A) {
  (void)fn;
  PV *a[3];
  bind_args(L, A, "input,alpha=,inplace=", a);
  PV *x = need_tensor_x(L, A->at, a[0], "elu");
  return maybe_inplace(L, A->at, a[2], x, t_elu(L, A->at, x, opt_num(L, A->at, a[1], 1, "alpha"), 1, 1));
}
PV *nnf_selu(L *L, PV *fn, Args *A) {
  (void)fn;
  PV *a[2];
  bind_args(L, A, "input,inplace=", a);
  PV *x = need_tensor_x(L, A->at, a[0], "selu");
  return maybe_inplace(L, A->at, a[1], x,
                       t_elu(L, A->at, x, 1.6732632423543772848170429916717, 1.0507009873554804934193349852946, 1));
}
PV *nnf_celu(L *L, PV *fn, Args *A) {
  (void)fn;
  PV *a[3];
  bind_args(L, A, "input,alpha=,inplace=", a);
  PV *x = need_tensor_x(L, A->at, a[0], "celu");
  double alpha = opt_num(L, A->at, a[1], 1, "alpha");
  if (alpha == 0) lower_error(L, A->at, "ZeroDivisionError: celu with alpha 0");
  return maybe_inplace(L, A->at, a[2], x, t_elu(L, A->at, x, alpha, 1, 1.0 / alpha));
}
PV *nnf_hardtanh(L *L, PV *fn, Args *A) {
  (void)fn;
  PV *a[4];
  bind_args(L, A, "input,min_val=,max_val=,inplace=", a);
  PV *x = need_tensor_x(L, A->at, a[0], "hardtanh");
  return maybe_inplace(L, A->at, a[3], x,
                       t_hardtanh(L, A->at, x, opt_num(L, A->at, a[1], -1, "min_val"), opt_num(L, A->at, a[2], 1, "max_val")));
}
PV *nnf_relu6(L *L, PV *fn, Args *A) {
  (void)fn;
  PV *a[2];
  bind_args(L, A, "input,inplace=", a);
  PV *x = need_tensor_x(L, A->at, a[0], "relu6");
  return maybe_inplace(L, A->at, a[1], x, t_hardtanh(L, A->at, x, 0, 6));
}
#define NNF_UNARY_INPLACE(name, call)                                   \
  PV *nnf_##name(L *L, PV *fn, Args *A) {                               \
    (void)fn;                                                           \
    PV *a[2];                                                           \
    bind_args(L, A, "input,inplace=", a);                               \
    PV *x = need_tensor_x(L, A->at, a[0], #name);                       \
    return maybe_inplace(L, A->at, a[1], x, call(L, A->at, x));         \
  }
NNF_UNARY_INPLACE(hardsigmoid, t_hardsigmoid)
NNF_UNARY_INPLACE(hardswish, t_hardswish)
NNF_UNARY_INPLACE(mish, t_mish)
#define NNF_UNARY(name, call)                                           \
  PV *nnf_##name(L *L, PV *fn, Args *A) {                               \
    (void)fn;                                                           \
    PV *a[1];                                                           \
    bind_args(L, A, "input", a);                                        \
    return call(L, A->at, need_tensor_x(L, A->at, a[0], #name));        \
  }
NNF_UNARY(softsign, t_softsign)
NNF_UNARY(tanhshrink, t_tanhshrink)
NNF_UNARY(logsigmoid, t_logsigmoid)
PV *nnf_hardshrink(L *L, PV *fn, Args *A) {
  (void)fn;
  PV *a[2];
  bind_args(L, A, "input,lambd=", a);
  return t_hardshrink(L, A->at, need_tensor_x(L, A->at, a[0], "hardshrink"), opt_num(L, A->at, a[1], 0.5, "lambd"));
}
PV *nnf_softshrink(L *L, PV *fn, Args *A) {
  (void)fn;
  PV *a[2];
  bind_args(L, A, "input,lambd=", a);
  return t_softshrink(L, A->at, need_tensor_x(L, A->at, a[0], "softshrink"), opt_num(L, A->at, a[1], 0.5, "lambd"));
}
PV *nnf_threshold(L *L, PV *fn, Args *A) {
  (void)fn;
  PV *a[4];
  bind_args(L, A, "input,threshold,value,inplace=", a);
  PV *x = need_tensor_x(L, A->at, a[0], "threshold");
  return maybe_inplace(L, A->at, a[3], x,
                       t_threshold(L, A->at, x, arg_num(L, A->at, a[1], "threshold"), arg_num(L, A->at, a[2], "value")));
}
PV *nnf_glu(L *L, PV *fn, Args *A) {
  (void)fn;
  PV *a[2];
  bind_args(L, A, "input,dim=", a);
  return t_glu(L, A->at, need_tensor_x(L, A->at, a[0], "glu"),
               a[1] && a[1]->k != PV_NONE ? arg_int(L, A->at, a[1], "dim") : -1);
}
PV *nnf_prelu(L *L, PV *fn, Args *A) {
  (void)fn;
  PV *a[2];
  bind_args(L, A, "input,weight", a);
  return t_prelu(L, A->at, need_tensor_x(L, A->at, a[0], "prelu"), need_tensor_x(L, A->at, a[1], "prelu weight"));
}
/* F.softmin(input, dim=None, _stacklevel=3, dtype=None): softmax(-x); no dim: PyTorch's
 * implicit choice (0 for 0-, 1- and 3-D inputs, else 1) */
PV *nnf_softmin(L *L, PV *fn, Args *A) {
  (void)fn;
  PV *a[4];
  bind_args(L, A, "input,dim=,_stacklevel=,dtype=", a);
  PV *x = need_tensor_x(L, A->at, a[0], "softmin");
  if (a[3] && a[3]->k != PV_NONE) lower_error(L, A->at, "softmin: dtype= is not supported by ctc");
  int nd = x->t->type.ndim;
  int64_t dim = a[1] && a[1]->k != PV_NONE ? arg_int(L, A->at, a[1], "dim") : (nd == 0 || nd == 1 || nd == 3 ? 0 : 1);
  return t_softmax(L, A->at, t_unary(L, A->at, IR_NEG, x), t_norm_dim(L, A->at, dim, nd ? nd : 1), 0);
}
/* torch.rand_like / randn_like (x, dtype=...) in compiled code */
static PV *rand_like(L *L, Args *A, int normal) {
  PV *a[6];
  bind_args(L, A, "input,dtype=,layout=,device=,requires_grad=,memory_format=", a);
  PV *x = need_tensor_x(L, A->at, a[0], normal ? "randn_like" : "rand_like");
  Type t = x->t->type;
  if (a[1] && a[1]->k != PV_NONE) {
    if (a[1]->k != PV_DTYPE) lower_error(L, A->at, "dtype must be a torch dtype");
    t.dtype = a[1]->dt;
  }
  return t_random(L, A->at, t, normal);
}
PV *nnf_rand_like(L *L, PV *fn, Args *A) { (void)fn; return rand_like(L, A, 0); }
PV *nnf_randn_like(L *L, PV *fn, Args *A) { (void)fn; return rand_like(L, A, 1); }

/* ---- the module forms: constructors (parameters and buffers in PyTorch's order,
 * PyTorch's initialisation) and forwards. Modules whose options are their
 * functional's keywords (nn.ELU, nn.Upsample, nn.PixelShuffle) need none of this:
 * their rows pass the options to the nnf_ handler. ---------------------------------- */

static PV *nn_layer_new(L *L, PV *cls, Args *A) {
  if (L->T->fn) lower_error(L, A->at, "creating layers inside compiled code is not supported; create them in __init__");
  return module_new(L, cls);
}

static PV *nn_layer_input(L *L, PV *o, Args *A) {
  PV *a[1];
  bind_args(L, A, "input", a);
  if (a[0]->k != PV_TENSOR) lower_error(L, A->at, "%s expects a tensor input, got '%s'", o->cls->s, pv_kind_name(a[0]));
  return a[0];
}

static Type nn_type(DType dt, int n, const int64_t *dims) {
  Type t = {0};
  t.dtype = dt;
  t.ndim = n;
  for (int i = 0; i < n; i++) t.dims[i] = dims[i];
  return t;
}

static PV *nn_param(L *L, Span at, PV *o, const char *name, int n, const int64_t *dims, int init, double a, double b) {
  for (int i = 0; i < n; i++)
    if (dims[i] <= 0)
      lower_error(L, at, "parameter '%s' would have a non-positive dimension (%lld)", name, (long long)dims[i]);
  PV *p = param_tensor(L, slot_new(L, at, nn_type(DT_F32, n, dims), init, a, b));
  module_setattr(L, at, o, name, p);
  return p;
}

static PV *nn_buffer(L *L, Span at, PV *o, const char *name, DType dt, int n, const int64_t *dims, int init, double a) {
  Slot *s = slot_new(L, at, nn_type(dt, n, dims), init, a, 0);
  s->is_buffer = 1;
  PV *t = param_tensor(L, s);
  vec_push(L->a, &o->mod->regs, ((Reg){REG_BUFFER, arena_strdup(L->a, name), t}));
  env_set(L, o->attrs, name, t);
  return t;
}

static PV *tuple_of(L *L, const int64_t *v, int n) {
  PV *items[IR_MAX_DIMS];
  for (int i = 0; i < n; i++) items[i] = pv_int(L, v[i]);
  return pv_tuple(L, items, n);
}

static void ints_attr(L *L, Span at, PV *o, const char *name, int n, int64_t *out) {
  PV *v = env_get(o->attrs, name);
  nn_ints(L, at, v, n, 0, out, name);
}

/* nn.Conv1d / 2d / 3d, ConvTranspose1d / 2d / 3d */
static void conv_kind(int bi, int *nsp, int *transposed) {
  *nsp = bi == BI_C_CONV1D || bi == BI_C_CONVTRANSPOSE1D ? 1 : bi == BI_C_CONV3D || bi == BI_C_CONVTRANSPOSE3D ? 3 : 2;
  *transposed = bi == BI_C_CONVTRANSPOSE1D || bi == BI_C_CONVTRANSPOSE2D || bi == BI_C_CONVTRANSPOSE3D;
}

PV *nn_conv_new(L *L, PV *cls, Args *A) {
  PV *a[12], *o = nn_layer_new(L, cls, A);
  Span at = A->at;
  int nsp, tr;
  conv_kind(cls->bi, &nsp, &tr);
  if (tr)
    bind_args(L, A, "in_channels,out_channels,kernel_size,stride=,padding=,output_padding=,groups=,bias=,dilation=,"
                    "padding_mode=,device=,dtype=", a);
  else {
    bind_args(L, A, "in_channels,out_channels,kernel_size,stride=,padding=,dilation=,groups=,bias=,padding_mode=,"
                    "device=,dtype=", a);
    /* one layout for both: output_padding at 5, groups 6, bias 7, dilation 8, padding_mode 9 */
    PV *d = a[5], *g = a[6], *b = a[7], *pm = a[8];
    a[5] = NULL, a[6] = g, a[7] = b, a[8] = d, a[9] = pm;
  }
  int64_t cin = arg_int(L, at, a[0], "in_channels"), cout = arg_int(L, at, a[1], "out_channels");
  int64_t g = a[6] && a[6]->k != PV_NONE ? arg_int(L, at, a[6], "groups") : 1;
  if (g <= 0) lower_error(L, at, "groups must be a positive integer");
  if (cin <= 0 || cout <= 0) lower_error(L, at, "in_channels and out_channels must be positive");
  if (cin % g) lower_error(L, at, "in_channels must be divisible by groups");
  if (cout % g) lower_error(L, at, "out_channels must be divisible by groups");
  int64_t k[3], s[3], p[3] = {0, 0, 0}, op[3] = {0, 0, 0}, d[3];
  nn_ints(L, at, a[2], nsp, 1, k, "kernel_size");
  nn_ints(L, at, a[3], nsp, 1, s, "stride");
  nn_ints(L, at, a[8], nsp, 1, d, "dilation");
  if (tr) nn_ints(L, at, a[5], nsp, 0, op, "output_padding");
  const char *pmode = "zeros";
  if (a[9] && a[9]->k != PV_NONE) {
    if (a[9]->k != PV_STR) lower_error(L, at, "padding_mode must be a string");
    pmode = a[9]->s;
    if (strcmp(pmode, "zeros") && strcmp(pmode, "reflect") && strcmp(pmode, "replicate") && strcmp(pmode, "circular"))
      lower_error(L, at, "padding_mode must be one of ['zeros', 'reflect', 'replicate', 'circular'], but got "
                         "padding_mode='%s'", pmode);
    if (tr && strcmp(pmode, "zeros"))
      lower_error(L, at, "Only \"zeros\" padding mode is supported for %s", cls->s);
  }
  if (a[4] && a[4]->k == PV_STR) {
    if (tr) lower_error(L, at, "%s does not take string padding", cls->s);
    if (strcmp(a[4]->s, "same") && strcmp(a[4]->s, "valid"))
      lower_error(L, at, "Invalid padding string '%s', should be one of ('valid', 'same')", a[4]->s);
    if (!strcmp(a[4]->s, "same") && (s[0] != 1 || s[1 % nsp] != 1 || s[nsp - 1] != 1))
      lower_error(L, at, "padding='same' is not supported for strided convolutions");
    if (!strcmp(a[4]->s, "same") && strcmp(pmode, "zeros"))
      lower_error(L, at, "padding='same' with padding_mode='%s' is not supported by ctc", pmode);
    env_set(L, o->attrs, "padding", a[4]);
  } else {
    nn_ints(L, at, a[4], nsp, 0, p, "padding");
    env_set(L, o->attrs, "padding", tuple_of(L, p, nsp));
  }
  env_set(L, o->attrs, "in_channels", pv_int(L, cin));
  env_set(L, o->attrs, "out_channels", pv_int(L, cout));
  env_set(L, o->attrs, "kernel_size", tuple_of(L, k, nsp));
  env_set(L, o->attrs, "stride", tuple_of(L, s, nsp));
  env_set(L, o->attrs, "dilation", tuple_of(L, d, nsp));
  env_set(L, o->attrs, "output_padding", tuple_of(L, op, nsp));
  env_set(L, o->attrs, "groups", pv_int(L, g));
  env_set(L, o->attrs, "padding_mode", pv_str(L, pmode));
  int64_t wd[5] = {tr ? cin : cout, tr ? cout / g : cin / g, k[0], k[1 % nsp], k[2 % nsp]};
  /* kaiming_uniform_(a=sqrt(5)) and the bias: bound 1 / sqrt(fan_in), fan_in = weight.size(1) * prod(k) */
  double fan_in = (double)wd[1];
  for (int i = 0; i < nsp; i++) fan_in *= (double)k[i];
  double bound = 1.0 / sqrt(fan_in);
  nn_param(L, at, o, "weight", 2 + nsp, wd, PINIT_UNIFORM, -bound, bound);
  if (!a[7] || arg_bool(L, at, a[7], "bias")) nn_param(L, at, o, "bias", 1, &cout, PINIT_UNIFORM, -bound, bound);
  else module_setattr(L, at, o, "bias", pv_none(L));
  return o;
}

PV *nn_conv_forward(L *L, PV *o, Args *A) {
  Span at = A->at;
  int nsp, tr;
  conv_kind(o->cls->bi, &nsp, &tr);
  PV *x;
  int64_t s[3], p[3] = {0, 0, 0}, op[3], d[3];
  if (tr) {
    PV *a[2];
    bind_args(L, A, "input,output_size=", a);
    if (a[1] && a[1]->k != PV_NONE) lower_error(L, at, "%s: output_size= is not supported by ctc", o->cls->s);
    x = need_tensor_x(L, at, a[0], o->cls->s);
  } else {
    x = nn_layer_input(L, o, A);
  }
  ints_attr(L, at, o, "stride", nsp, s);
  ints_attr(L, at, o, "dilation", nsp, d);
  ints_attr(L, at, o, "output_padding", nsp, op);
  int64_t g = arg_int(L, at, env_get(o->attrs, "groups"), "groups");
  PV *w = env_get(o->attrs, "weight"), *b = env_get(o->attrs, "bias");
  if (tr) {
    ints_attr(L, at, o, "padding", nsp, p);
    if (nsp == 3) return t_conv_transpose3d(L, at, x, w, b, s, p, op, d, g);
    return t_conv_transpose(L, at, nsp, x, w, b, s, p, op, d, g);
  }
  PV *pv = env_get(o->attrs, "padding");
  PV *pm = env_get(o->attrs, "padding_mode");
  int mode = pm && pm->k == PV_STR && strcmp(pm->s, "zeros") ? nn_pad_mode(L, at, pm) : 0;
  if (mode && pv->k != PV_STR) {
    /* F.pad(x, reversed padding repeated twice, mode), then no padding */
    nn_ints(L, at, pv, nsp, 0, p, "padding");
    int64_t pads[6];
    for (int i = 0; i < nsp; i++) pads[2 * i] = pads[2 * i + 1] = p[nsp - 1 - i];
    x = t_pad(L, at, x, pads, 2 * nsp, mode, 0);
    p[0] = p[1] = p[2] = 0;
  } else {
    x = nn_conv_padding(L, at, nsp, x, w, pv, s, d, p);
  }
  if (nsp == 3) return t_conv3d(L, at, x, w, b, s, p, d, g);
  return t_convnd(L, at, nsp, x, w, b, s, p, d, g);
}

/* nn.ZeroPad2d, ConstantPad1d/2d/3d, ReflectionPad1d/2d/3d, ReplicationPad1d/2d/3d */
static void pad_kind(int bi, int *nsp, int *mode) {
  switch (bi) {
  case BI_C_ZEROPAD2D: *nsp = 2, *mode = 0; return;
  case BI_C_CONSTANTPAD1D: *nsp = 1, *mode = 0; return;
  case BI_C_CONSTANTPAD2D: *nsp = 2, *mode = 0; return;
  case BI_C_CONSTANTPAD3D: *nsp = 3, *mode = 0; return;
  case BI_C_REFLECTIONPAD1D: *nsp = 1, *mode = 1; return;
  case BI_C_REFLECTIONPAD2D: *nsp = 2, *mode = 1; return;
  case BI_C_REFLECTIONPAD3D: *nsp = 3, *mode = 1; return;
  case BI_C_REPLICATIONPAD1D: *nsp = 1, *mode = 2; return;
  case BI_C_REPLICATIONPAD2D: *nsp = 2, *mode = 2; return;
  default: *nsp = 3, *mode = 2; return;
  }
}

PV *nn_pad_new(L *L, PV *cls, Args *A) {
  PV *a[2], *o = nn_layer_new(L, cls, A);
  Span at = A->at;
  int nsp, mode;
  pad_kind(cls->bi, &nsp, &mode);
  int constant = cls->bi == BI_C_CONSTANTPAD1D || cls->bi == BI_C_CONSTANTPAD2D || cls->bi == BI_C_CONSTANTPAD3D;
  bind_args(L, A, constant ? "padding,value" : "padding", a);
  int64_t p[6], tmp[6];
  int n = arg_ints(L, at, a[0], tmp, 6, "padding");
  if (n == 1)
    for (int i = 0; i < 2 * nsp; i++) p[i] = tmp[0];
  else if (n == 2 * nsp)
    for (int i = 0; i < n; i++) p[i] = tmp[i];
  else
    lower_error(L, at, "%s: padding must be an int or a tuple of %d ints, got %d", cls->s, 2 * nsp, n);
  env_set(L, o->attrs, "padding", tuple_of(L, p, 2 * nsp));
  env_set(L, o->attrs, "value", pv_float(L, constant ? arg_num(L, at, a[1], "value") : 0));
  (void)mode;
  return o;
}

PV *nn_pad_forward(L *L, PV *o, Args *A) {
  Span at = A->at;
  PV *x = nn_layer_input(L, o, A);
  int nsp, mode;
  pad_kind(o->cls->bi, &nsp, &mode);
  int64_t p[6];
  int n = arg_ints(L, at, env_get(o->attrs, "padding"), p, 6, "padding");
  return t_pad(L, at, x, p, n, mode, arg_num(L, at, env_get(o->attrs, "value"), "value"));
}

/* nn.PReLU(num_parameters=1, init=0.25) */
PV *nn_prelu_new(L *L, PV *cls, Args *A) {
  PV *a[4], *o = nn_layer_new(L, cls, A);
  bind_args(L, A, "num_parameters=,init=,device=,dtype=", a);
  int64_t n = a[0] ? arg_int(L, A->at, a[0], "num_parameters") : 1;
  env_set(L, o->attrs, "num_parameters", pv_int(L, n));
  nn_param(L, A->at, o, "weight", 1, &n, PINIT_CONST, opt_num(L, A->at, a[1], 0.25, "init"), 0);
  return o;
}

PV *nn_prelu_forward(L *L, PV *o, Args *A) {
  return t_prelu(L, A->at, nn_layer_input(L, o, A), env_get(o->attrs, "weight"));
}

/* nn.BatchNorm1d / 2d, InstanceNorm1d / 2d: (num_features, eps, momentum, affine,
 * track_running_stats); weight, bias, then the buffers running_mean, running_var,
 * num_batches_tracked, as PyTorch registers them. */
static int is_instance(int bi) {
  return bi == BI_C_INSTANCENORM1D || bi == BI_C_INSTANCENORM2D || bi == BI_C_INSTANCENORM3D;
}

PV *nn_norm_new(L *L, PV *cls, Args *A) {
  PV *a[7], *o = nn_layer_new(L, cls, A);
  Span at = A->at;
  int inst = is_instance(cls->bi);
  bind_args(L, A, "num_features,eps=,momentum=,affine=,track_running_stats=,device=,dtype=", a);
  int64_t c = arg_int(L, at, a[0], "num_features");
  int affine = opt_bool(L, at, a[3], !inst, "affine"), track = opt_bool(L, at, a[4], !inst, "track_running_stats");
  if (inst && track)
    lower_error(L, at, "%s with track_running_stats=True is not supported by ctc", cls->s);
  env_set(L, o->attrs, "num_features", pv_int(L, c));
  env_set(L, o->attrs, "eps", pv_float(L, opt_num(L, at, a[1], 1e-5, "eps")));
  env_set(L, o->attrs, "momentum", a[2] && a[2]->k == PV_NONE ? pv_none(L)
                                                              : pv_float(L, opt_num(L, at, a[2], 0.1, "momentum")));
  env_set(L, o->attrs, "affine", pv_bool(L, affine));
  env_set(L, o->attrs, "track_running_stats", pv_bool(L, track));
  if (affine) {
    nn_param(L, at, o, "weight", 1, &c, PINIT_CONST, 1, 0);
    nn_param(L, at, o, "bias", 1, &c, PINIT_ZERO, 0, 0);
  } else {
    module_setattr(L, at, o, "weight", pv_none(L));
    module_setattr(L, at, o, "bias", pv_none(L));
  }
  if (track) {
    nn_buffer(L, at, o, "running_mean", DT_F32, 1, &c, PINIT_ZERO, 0);
    nn_buffer(L, at, o, "running_var", DT_F32, 1, &c, PINIT_CONST, 1);
    nn_buffer(L, at, o, "num_batches_tracked", DT_I64, 0, NULL, PINIT_ZERO, 0);
  } else {
    env_set(L, o->attrs, "running_mean", pv_none(L));
    env_set(L, o->attrs, "running_var", pv_none(L));
    env_set(L, o->attrs, "num_batches_tracked", pv_none(L));
  }
  return o;
}

PV *nn_norm_forward(L *L, PV *o, Args *A) {
  Span at = A->at;
  PV *x = nn_layer_input(L, o, A);
  int bi = o->cls->bi, inst = is_instance(bi);
  Type t = x->t->type;
  int64_t c = arg_int(L, at, env_get(o->attrs, "num_features"), "num_features");
  const int three = bi == BI_C_BATCHNORM3D || bi == BI_C_INSTANCENORM3D;
  int ok = bi == BI_C_BATCHNORM1D ? t.ndim == 2 || t.ndim == 3 : bi == BI_C_BATCHNORM2D ? t.ndim == 4
         : bi == BI_C_INSTANCENORM1D ? t.ndim == 3 : three ? t.ndim == 5 : t.ndim == 4;
  if (!ok)
    lower_error(L, at, "%s expects a %s input, got shape %s", o->cls->s,
                bi == BI_C_BATCHNORM1D ? "2-D or 3-D" : bi == BI_C_INSTANCENORM1D ? "3-D" : three ? "5-D" : "4-D",
                shape_str(L, &t));
  if (t.dims[1] != c)
    lower_error(L, at, "%s(%lld) got an input with %lld channels (shape %s)", o->cls->s, (long long)c,
                (long long)t.dims[1], shape_str(L, &t));
  double eps = arg_num(L, at, env_get(o->attrs, "eps"), "eps");
  PV *w = env_get(o->attrs, "weight"), *b = env_get(o->attrs, "bias");
  if (inst) return t_instance_norm(L, at, x, w, b, eps);
  PV *mv = env_get(o->attrs, "momentum");
  double m = mv->k == PV_NONE ? -1 : arg_num(L, at, mv, "momentum");
  int track = arg_bool(L, at, env_get(o->attrs, "track_running_stats"), "track_running_stats");
  int training = o->mod->training || !track;
  return t_batch_norm(L, at, x, env_get(o->attrs, "running_mean"), env_get(o->attrs, "running_var"), w, b, training,
                      m, eps, track ? env_get(o->attrs, "num_batches_tracked") : NULL);
}

/* nn.GroupNorm(num_groups, num_channels, eps=1e-5, affine=True) */
PV *nn_groupnorm_new(L *L, PV *cls, Args *A) {
  PV *a[6], *o = nn_layer_new(L, cls, A);
  Span at = A->at;
  bind_args(L, A, "num_groups,num_channels,eps=,affine=,device=,dtype=", a);
  int64_t g = arg_int(L, at, a[0], "num_groups"), c = arg_int(L, at, a[1], "num_channels");
  if (g <= 0 || c % g) lower_error(L, at, "num_channels must be divisible by num_groups");
  env_set(L, o->attrs, "num_groups", pv_int(L, g));
  env_set(L, o->attrs, "num_channels", pv_int(L, c));
  env_set(L, o->attrs, "eps", pv_float(L, opt_num(L, at, a[2], 1e-5, "eps")));
  if (opt_bool(L, at, a[3], 1, "affine")) {
    nn_param(L, at, o, "weight", 1, &c, PINIT_CONST, 1, 0);
    nn_param(L, at, o, "bias", 1, &c, PINIT_ZERO, 0, 0);
  } else {
    module_setattr(L, at, o, "weight", pv_none(L));
    module_setattr(L, at, o, "bias", pv_none(L));
  }
  return o;
}

PV *nn_groupnorm_forward(L *L, PV *o, Args *A) {
  Span at = A->at;
  PV *x = nn_layer_input(L, o, A);
  if (x->t->type.ndim < 2 || x->t->type.dims[1] != env_get(o->attrs, "num_channels")->i)
    lower_error(L, at, "GroupNorm(%lld channels) got an input of shape %s", (long long)env_get(o->attrs, "num_channels")->i,
                shape_str(L, &x->t->type));
  return t_group_norm(L, at, x, env_get(o->attrs, "num_groups")->i, env_get(o->attrs, "weight"),
                      env_get(o->attrs, "bias"), arg_num(L, at, env_get(o->attrs, "eps"), "eps"));
}
