/* pool_c.c - the C loops of max and average pooling and of their gradients (MAXPOOL2D,
 * AVGPOOL2D, MAXPOOL2D_BWD, MAXPOOL2D_JVP, AVGPOOL2D_BWD): images (planes) in parallel, each
 * writing only its own slice of the result. On the hosted C target a row of windows at a time,
 * tap by tap (tap_rows): the loop over a row's outputs has no bounds check and vectorises,
 * and each window meets its taps in the order a scan of the window takes them, so maxima,
 * first-max positions and sums are the scan's. Windows that do not overlap (a max pool's
 * gradient with stride >= kernel) write each input once, without branches. */
#include <stdlib.h>
#include <string.h>
#include "ops_int.h"

/* Whether a pooling window can reach outside the image (padding, ceil mode). */
static int needs_check(int64_t in_size, int64_t out_size, int64_t k, int64_t s, int64_t p, int64_t dil) {
  return p > 0 || (out_size - 1) * s + (k - 1) * dil >= in_size;
}

/* "oh * 2 - 1 + kh * 2", leaving out the trivial parts. */
static void win_index(char *buf, size_t cap, const char *o, int64_t s, int64_t p, const char *k, int64_t d) {
  int n = s == 1 ? snprintf(buf, cap, "%s", o) : snprintf(buf, cap, "%s * %lld", o, (ll)s);
  if (p) n += snprintf(buf + n, cap - (size_t)n, " - %lld", (ll)p);
  if (d == 1) snprintf(buf + n, cap - (size_t)n, " + %s", k);
  else snprintf(buf + n, cap - (size_t)n, " + %s * %lld", k, (ll)d);
}

/* The loop over a row of outputs for one tap kw of the windows (tap_rows): the outputs ow whose
 * input column iw = ow * s - p + kw * d lies in [0, W), all OW of them where no window reaches
 * outside the image. Opens `for (ow ...) {`. */
static void open_tap_row(CgFunc *c, int64_t W, int64_t OW, int64_t s, int64_t p, int64_t d, int chk) {
  if (!chk) {
    LINE(c, "CTC_OMP_SIMD\n");
    LINE(c, "for (int64_t ow = 0; ow < %lld; ow++) {\n", (ll)OW);
    return;
  }
  LINE(c, "const int64_t e = kw%s - %lld;   /* iw = ow%s + e: the outputs with iw in [0, %lld) */\n",
       d == 1 ? "" : arena_printf(c->p->arena, " * %lld", (ll)d), (ll)p,
       s == 1 ? "" : arena_printf(c->p->arena, " * %lld", (ll)s), (ll)W);
  if (s == 1) LINE(c, "const int64_t o0 = e < 0 ? -e : 0, o1 = e > %lld ? 0 : %lld - e;\n", (ll)(W - 1), (ll)W);
  else
    LINE(c, "const int64_t o0 = e < 0 ? (%lld - e) / %lld : 0, o1 = e > %lld ? 0 : (%lld - e) / %lld + 1;\n",
         (ll)(s - 1), (ll)s, (ll)(W - 1), (ll)(W - 1), (ll)s);
  LINE(c, "CTC_OMP_SIMD\n");
  LINE(c, "for (int64_t ow = o0; ow < (o1 < %lld ? o1 : %lld); ow++) {\n", (ll)OW, (ll)OW);
}

/* Pooling a row of outputs at a time: for each tap (kh, kw) of the windows, in that order, a
 * loop over the row's outputs whose tap lies inside the image (rows outside skipped), reading
 * or writing row ih through `row` ("const float *restrict xr = xp": its declaration without
 * the offset). Each output meets its window's taps in the order a scan of the window takes
 * them, so a max, first-max position or sum comes out as the scan's; the loop over the row has
 * no branch and no bounds check, and vectorises (strided loads, selects). Average pooling's
 * gradient, which adds into the input, runs kw down: an input's windows in a row then add in
 * their order (ow up), as the loop over windows added them and as the CUDA target's thread per
 * input element does (the same bits). `body` emits output ow's update from column iw. g: the
 * window (kh kw sh sw ph pw dh dw). */
static void tap_rows(CgFunc *c, const Inst *in, const int64_t *g, int64_t H, int64_t W, int64_t OW, int chk_h,
                     int chk_w, const char *row, void (*body)(CgFunc *, const Inst *, int64_t W)) {
  const int down = in->op == IR_AVGPOOL2D_BWD;
  char ih[128], iw[128];
  win_index(ih, sizeof ih, "oh", g[2], g[4], "kh", g[6]);
  win_index(iw, sizeof iw, "ow", g[3], g[5], "kw", g[7]);
  LINE(c, "for (int64_t kh = 0; kh < %lld; kh++) {\n", (ll)g[0]);
  c->ind += 2;
  LINE(c, "const int64_t ih = %s;\n", ih);
  if (chk_h) LINE(c, "if (ih < 0 || ih >= %lld) continue;\n", (ll)H);
  LINE(c, "%s + ih * %lld;\n", row, (ll)W);
  if (down) LINE(c, "for (int64_t kw = %lld; kw >= 0; kw--) {   /* (an input's windows in order) */\n", (ll)(g[1] - 1));
  else LINE(c, "for (int64_t kw = 0; kw < %lld; kw++) {\n", (ll)g[1]);
  c->ind += 2;
  open_tap_row(c, W, OW, g[3], g[5], g[7], chk_w);
  c->ind += 2;
  LINE(c, "const int64_t iw = %s;\n", iw);
  body(c, in, W);
  c->ind -= 2;
  LINE(c, "}\n");
  c->ind -= 2;
  LINE(c, "}\n");
  c->ind -= 2;
  LINE(c, "}\n");
}

/* The window of a max or average pooling (tap_rows's g): average pooling has no dilation. */
static void pool_geom(const Inst *in, int64_t *g) {
  int is_max = in->op != IR_AVGPOOL2D && in->op != IR_AVGPOOL2D_BWD;
  for (int i = 0; i < 6; i++) g[i] = in->attr[i];
  g[6] = is_max ? in->attr[6] : 1, g[7] = is_max ? in->attr[7] : 1;
}

/* The start of a row scan inside the images' loop: the window g (pool_geom), `for oh {`;
 * the loops over a row vectorise (CTC_OMP_SIMD). close_rows ends it. */
static void open_rows(CgFunc *c, const Inst *in, int64_t OH, int64_t *g) {
  pool_geom(in, g);
  c->k->simd = 1;
  LINE(c, "for (int64_t oh = 0; oh < %lld; oh++) {\n", (ll)OH);
  c->ind += 2;
}

/* The end of a row scan or of window_loops: the innermost open loop and the images' loop closed. */
static void close_rows(CgFunc *c, int base) {
  c->ind -= 2;
  LINE(c, "}\n");
  cg_par_end(c);
  c->ind = base;
}

static void avg_update(CgFunc *c, const Inst *in, int64_t W) {
  (void)in, (void)W;
  LINE(c, "acc[ow] += xr[iw];\n");
}

static void avg_bwd_update(CgFunc *c, const Inst *in, int64_t W) {
  (void)in, (void)W;
  LINE(c, "dr[iw] += d[ow];\n");
}

/* Average pooling's divisor for output (oh, ow), as PyTorch's: the window clipped to the padded
 * image (count_include_pad) or to the image itself; declares h0 h1 ha hb (rows) or w0 w1 wa wb
 * (cols; ha hb wa wb, the window inside the image, only where the divisor needs them or with
 * bounds) and returns the expression. */
static const char *avg_clip(CgFunc *c, const Inst *in, int64_t H, int64_t W, int rows, int bounds) {
  const int64_t k = in->attr[rows ? 0 : 1], st = in->attr[rows ? 2 : 3], p = in->attr[rows ? 4 : 5], n = rows ? H : W;
  const char o = rows ? 'h' : 'w';
  char o0[64];
  win_index(o0, sizeof o0, rows ? "oh" : "ow", st, p, "0", 1);
  *(strrchr(o0, '+') - 1) = 0;   /* (without the tap's " + 0") */
  LINE(c, "const int64_t %c0 = %s, %c1 = %c0 + %lld < %lld ? %c0 + %lld : %lld;\n", o, o0, o, o, (ll)k, (ll)(n + p), o,
       (ll)k, (ll)(n + p));
  if (bounds || !in->attr[6])
    LINE(c, "const int64_t %ca = %c0 < 0 ? 0 : %c0, %cb = %c1 > %lld ? %lld : %c1;\n", o, o, o, o, o, (ll)n, (ll)n, o);
  return in->attr[6] ? "((h1 - h0) * (w1 - w0))" : "((hb - ha) * (wb - wa))";
}

static void max_update(CgFunc *c, const Inst *in, int64_t W) {
  (void)W;
  DType t = ty(c, in->res)->dtype;
  LINE(c, "const %s v = xr[iw];\n", cg_ctype(t));
  LINE(c, ir_dtype_is_float(t) ? "yr[ow] = v > yr[ow] || v != v ? v : yr[ow];\n" : "yr[ow] = v > yr[ow] ? v : yr[ow];\n");
}

/* (max pooling's gradient) where the window's first maximum is: the first tap inside the image,
 * then one greater or NaN */
static void argmax_update(CgFunc *c, const Inst *in, int64_t W) {
  DType t = ty(c, in->res)->dtype;
  LINE(c, "const %s v = xr[iw];\n", cg_ctype(t));
  LINE(c, ir_dtype_is_float(t) ? "const int take = (at[ow] < 0) | (v > mx[ow]) | (v != v);\n"
                               : "const int take = (at[ow] < 0) | (v > mx[ow]);\n");
  LINE(c, "mx[ow] = take ? v : mx[ow];\n");
  LINE(c, "at[ow] = take ? (int32_t)(ih * %lld + iw) : at[ow];\n", (ll)W);
}

void cg_emit_pool(CgFunc *c, const Inst *in) {
  const Type *x = ty(c, in->args[0]), *r = ty(c, in->res);
  DType t = r->dtype;
  const char *ct = cg_ctype(t);
  int is_max = in->op == IR_MAXPOOL2D;
  int64_t NC = x->dims[0] * x->dims[1], H = x->dims[2], W = x->dims[3], OH = r->dims[2], OW = r->dims[3];
  int64_t kh = in->attr[0], kw = in->attr[1], sh = in->attr[2], sw = in->attr[3], ph = in->attr[4],
          pw = in->attr[5];
  int64_t dh = is_max ? in->attr[6] : 1, dw = is_max ? in->attr[7] : 1;
  int chk_h = needs_check(H, OH, kh, sh, ph, dh), chk_w = needs_check(W, OW, kw, sw, pw, dw);
  const char *xs = cg_ref(c, in->args[0]), *ys = cg_ref(c, in->res);
  int base = c->ind;
  cg_par_for(c, "nc", NC, CG_PAR_GRID | (ir_numel(r) * kh * kw >= min_work(c) ? CG_PAR_OMP : 0));
  LINE(c, "const %s *xp = %s + nc * %lld;\n", ct, xs, (ll)(H * W));
  LINE(c, "%s *yp = %s + nc * %lld;\n", ct, ys, (ll)(OH * OW));
  if (is_max) {   /* a row of maxima at a time, in y itself (tap_rows) */
    int64_t g[8];
    open_rows(c, in, OH, g);
    LINE(c, "%s *restrict yr = yp + oh * %lld;\n", ct, (ll)OW);
    LINE(c, "for (int64_t ow = 0; ow < %lld; ow++) yr[ow] = %s;\n", (ll)OW, acc_init(in, t));
    tap_rows(c, in, g, H, W, OW, chk_h, chk_w, arena_printf(c->p->arena, "const %s *restrict xr = xp", ct), max_update);
    close_rows(c, base);
    return;
  }
  if ((chk_h || chk_w) && !c->target && !c->k->freestanding && OW <= 1024) {
    /* hosted C, windows reaching outside the image: a row of sums at a time on the stack
     * (tap_rows), then each divided by its window's divisor */
    const char *at = ir_dtype_is_float(t) ? float_acc(c->k, t) : "int64_t";
    int64_t g[8];
    open_rows(c, in, OH, g);
    LINE(c, "%s acc[%lld];   /* the row's window sums */\n", at, (ll)OW);
    LINE(c, "for (int64_t ow = 0; ow < %lld; ow++) acc[ow] = 0;\n", (ll)OW);
    tap_rows(c, in, g, H, W, OW, chk_h, chk_w, arena_printf(c->p->arena, "const %s *restrict xr = xp", ct), avg_update);
    avg_clip(c, in, H, W, 1, 0);
    LINE(c, "for (int64_t ow = 0; ow < %lld; ow++) {\n", (ll)OW);
    c->ind += 2;
    const char *cnt = avg_clip(c, in, H, W, 0, 0);
    LINE(c, "yp[oh * %lld + ow] = (%s)(acc[ow] / %s);\n", (ll)OW, ct, cnt);
    c->ind -= 2;
    LINE(c, "}\n");
    close_rows(c, base);
    return;
  }
  LINE(c, "for (int64_t oh = 0; oh < %lld; oh++)\n", (ll)OH);
  c->ind += 2;
  LINE(c, "for (int64_t ow = 0; ow < %lld; ow++) {\n", (ll)OW);
  c->ind += 2;
  char ih[128], iw[128];
  win_index(ih, sizeof ih, "oh", sh, ph, "kh", dh);
  win_index(iw, sizeof iw, "ow", sw, pw, "kw", dw);
  if (!chk_h && !chk_w) {
    /* every window lies inside the image: a plain mean */
    const char *at = ir_dtype_is_float(t) ? float_acc(c->k, t) : "int64_t";
    LINE(c, "%s acc = 0;\n", at);
    LINE(c, "for (int64_t kh = 0; kh < %lld; kh++)\n", (ll)kh);
    LINE(c, "  for (int64_t kw = 0; kw < %lld; kw++) acc += xp[(%s) * %lld + %s];\n", (ll)kw, ih, (ll)W, iw);
    LINE(c, "yp[oh * %lld + ow] = (%s)(acc / %lld);\n", (ll)OW, ct, (ll)(kh * kw));
  } else {   /* the window clipped to the image, PyTorch's divisor (avg_clip) */
    const char *at = ir_dtype_is_float(t) ? float_acc(c->k, t) : "int64_t";
    avg_clip(c, in, H, W, 1, 1);
    const char *cnt = avg_clip(c, in, H, W, 0, 1);
    LINE(c, "%s acc = 0;\n", at);
    LINE(c, "for (int64_t ih = ha; ih < hb; ih++)\n");
    LINE(c, "  for (int64_t iw = wa; iw < wb; iw++) acc += xp[ih * %lld + iw];\n", (ll)W);
    LINE(c, "yp[oh * %lld + ow] = (%s)(acc / %s);\n", (ll)OW, ct, cnt);
  }
  c->ind -= 2;
  LINE(c, "}\n");
  cg_par_end(c);
  c->ind = base;
}

/* The loops of a pooling gradient: open_images opens `for nc {` (the caller
 * then declares its per-image pointers), window_loops `for oh for ow {`,
 * close_rows closes all three. Images run in parallel: each one writes only
 * its own slice of the result, so the += of overlapping windows never races. */
static int open_images(CgFunc *c, int64_t NC, int64_t work) {
  int base = c->ind;
  cg_par_for(c, "nc", NC, CG_PAR_GRID | (work >= min_work(c) ? CG_PAR_OMP : 0));
  return base;
}

static void window_loops(CgFunc *c, int64_t OH, int64_t OW) {
  LINE(c, "for (int64_t oh = 0; oh < %lld; oh++)\n", (ll)OH);
  c->ind += 2;
  LINE(c, "for (int64_t ow = 0; ow < %lld; ow++) {\n", (ll)OW);
  c->ind += 2;
}


/* dx = 0; each window's g goes to the first position holding the window's max
 * (the rule of max_pool2d's forward in PyTorch: v > max or v is NaN), summed
 * where windows overlap. */
void cg_emit_maxpool_bwd(CgFunc *c, const Inst *in) {
  /* MAXPOOL2D_JVP shares the window scan: it gathers dx at each window's max */
  int jvp = in->op == IR_MAXPOOL2D_JVP;
  const Type *x = ty(c, in->args[0]), *r = ty(c, in->res), *g = jvp ? r : ty(c, in->args[1]);
  DType t = r->dtype;
  const char *ct = cg_ctype(t);
  int64_t NC = x->dims[0] * x->dims[1], H = x->dims[2], W = x->dims[3], OH = g->dims[2], OW = g->dims[3];
  int64_t kh = in->attr[0], kw = in->attr[1], sh = in->attr[2], sw = in->attr[3], ph = in->attr[4],
          pw = in->attr[5], dh = in->attr[6], dw = in->attr[7];
  int chk_h = needs_check(H, OH, kh, sh, ph, dh), chk_w = needs_check(W, OW, kw, sw, pw, dw);
  const char *xs = cg_ref(c, in->args[0]), *gs = cg_ref(c, in->args[1]), *ds = cg_ref(c, in->res);
  int base = open_images(c, NC, ir_numel(g) * kh * kw);
  if (!jvp && !chk_h && !chk_w && sh >= kh && sw >= kw && dh == 1 && dw == 1 && kh * kw <= 16 && ir_dtype_is_float(t)) {
    /* Windows that do not overlap: each input is in at most one window, so
     * its gradient is written once (0 + g, as the scatter-add into zeros
     * gives it), without branches; zeroed first only where no window reaches. */
    int cover = OH * sh == H && OW * sw == W && sh == kh && sw == kw;
    LINE(c, "const %s *xp = %s + nc * %lld, *gp = %s + nc * %lld;\n", ct, xs, (ll)(H * W), gs, (ll)(OH * OW));
    LINE(c, "%s *dp = %s + nc * %lld;\n", ct, ds, (ll)(H * W));
    if (!cover) LINE(c, "for (int64_t i = 0; i < %lld; i++) dp[i] = 0;\n", (ll)(H * W));
    LINE(c, "for (int64_t oh = 0; oh < %lld; oh++)\n", (ll)OH);
    c->ind += 2;
    c->k->simd = 1;   /* windows are independent: vectorised, the selects without branches */
    LINE(c, "CTC_OMP_SIMD\n");
    LINE(c, "for (int64_t ow = 0; ow < %lld; ow++) {\n", (ll)OW);
    c->ind += 2;
    LINE(c, "const int64_t w0 = oh * %lld + ow * %lld;   /* the window's first input */\n", (ll)(sh * W), (ll)sw);
    LINE(c, "int64_t at = 0;   /* where the max is: the first one, or the last NaN */\n");
    LINE(c, "%s mx = xp[w0];\n", ct);
    for (int64_t a = 0; a < kh; a++)
      for (int64_t b = 0; b < kw; b++) {
        if (!a && !b) continue;
        LINE(c, "{ const %s v = xp[w0 + %lld]; const int take = (v > mx) | (v != v); at = take ? %lld : at; "
                "mx = take ? v : mx; }\n", ct, (ll)(a * W + b), (ll)(a * W + b));
      }
    LINE(c, "const %s gw = 0 + gp[oh * %lld + ow];\n", ct, (ll)OW);
    for (int64_t a = 0; a < kh; a++)
      for (int64_t b = 0; b < kw; b++)
        LINE(c, "dp[w0 + %lld] = at == %lld ? gw : 0;\n", (ll)(a * W + b), (ll)(a * W + b));
    close_rows(c, base);
    return;
  }
  if (jvp) {
    LINE(c, "const %s *xp = %s + nc * %lld, *tp = %s + nc * %lld;\n", ct, xs, (ll)(H * W), gs, (ll)(H * W));
    LINE(c, "%s *op = %s + nc * %lld;\n", ct, ds, (ll)(OH * OW));
  } else {
    LINE(c, "const %s *xp = %s + nc * %lld, *gp = %s + nc * %lld;\n", ct, xs, (ll)(H * W), gs, (ll)(OH * OW));
    LINE(c, "%s *dp = %s + nc * %lld;\n", ct, ds, (ll)(H * W));
    LINE(c, "for (int64_t i = 0; i < %lld; i++) dp[i] = 0;\n", (ll)(H * W));
  }
  if (!c->target && !c->k->freestanding && OW <= 1024 && H * W <= INT32_MAX) {
    /* hosted C: each row of windows scanned tap by tap (tap_rows), its maxima and their positions
     * in two rows on the stack, then g added at those positions in the windows' order */
    int64_t gm[8];
    open_rows(c, in, OH, gm);
    LINE(c, "%s mx[%lld];   /* each window's maximum so far */\n", ct, (ll)OW);
    LINE(c, "int32_t at[%lld];   /* and where it is (-1: no tap inside the image yet) */\n", (ll)OW);
    LINE(c, "for (int64_t ow = 0; ow < %lld; ow++) mx[ow] = 0, at[ow] = -1;\n", (ll)OW);
    tap_rows(c, in, gm, H, W, OW, chk_h, chk_w, arena_printf(c->p->arena, "const %s *restrict xr = xp", ct), argmax_update);
    if (jvp) LINE(c, "for (int64_t ow = 0; ow < %lld; ow++) op[oh * %lld + ow] = at[ow] >= 0 ? tp[at[ow]] : 0;\n",
                  (ll)OW, (ll)OW);
    else {
      LINE(c, "for (int64_t ow = 0; ow < %lld; ow++)\n", (ll)OW);
      LINE(c, "  if (at[ow] >= 0) dp[at[ow]] += gp[oh * %lld + ow];\n", (ll)OW);
    }
    close_rows(c, base);
    return;
  }
  window_loops(c, OH, OW);
  char ih[128], iw[128];
  win_index(ih, sizeof ih, "oh", sh, ph, "kh", dh);
  win_index(iw, sizeof iw, "ow", sw, pw, "kw", dw);
  LINE(c, "int64_t at = -1;   /* where the max is; the first in-bounds position to begin with */\n");
  LINE(c, "%s mx = 0;\n", ct);
  LINE(c, "for (int64_t kh = 0; kh < %lld; kh++) {\n", (ll)kh);
  c->ind += 2;
  LINE(c, "const int64_t ih = %s;\n", ih);
  if (chk_h) LINE(c, "if (ih < 0 || ih >= %lld) continue;\n", (ll)H);
  LINE(c, "for (int64_t kw = 0; kw < %lld; kw++) {\n", (ll)kw);
  c->ind += 2;
  LINE(c, "const int64_t iw = %s;\n", iw);
  if (chk_w) LINE(c, "if (iw < 0 || iw >= %lld) continue;\n", (ll)W);
  LINE(c, "const %s v = xp[ih * %lld + iw];\n", ct, (ll)W);
  LINE(c, ir_dtype_is_float(t) ? "if (at < 0 || v > mx || isnan(v)) {\n" : "if (at < 0 || v > mx) {\n");
  LINE(c, "  mx = v;\n");
  LINE(c, "  at = ih * %lld + iw;\n", (ll)W);
  LINE(c, "}\n");
  c->ind -= 2;
  LINE(c, "}\n");
  c->ind -= 2;
  LINE(c, "}\n");
  if (jvp) LINE(c, "op[oh * %lld + ow] = at >= 0 ? tp[at] : 0;\n", (ll)OW);
  else LINE(c, "if (at >= 0) dp[at] += gp[oh * %lld + ow];\n", (ll)OW);
  close_rows(c, base);
}

/* dx = 0; each window's g / divisor added over the window's in-bounds
 * positions (the divisor as in the forward). */
void cg_emit_avgpool_bwd(CgFunc *c, const Inst *in) {
  const Type *g = ty(c, in->args[0]), *r = ty(c, in->res);
  DType t = r->dtype;
  const char *ct = cg_ctype(t);
  int64_t NC = r->dims[0] * r->dims[1], H = r->dims[2], W = r->dims[3], OH = g->dims[2], OW = g->dims[3];
  int64_t kh = in->attr[0], kw = in->attr[1], sh = in->attr[2], sw = in->attr[3], ph = in->attr[4],
          pw = in->attr[5];
  int chk_h = needs_check(H, OH, kh, sh, ph, 1), chk_w = needs_check(W, OW, kw, sw, pw, 1);
  const char *gs = cg_ref(c, in->args[0]), *ds = cg_ref(c, in->res);
  int base = open_images(c, NC, ir_numel(g) * kh * kw);
  LINE(c, "const %s *gp = %s + nc * %lld;\n", ct, gs, (ll)(OH * OW));
  LINE(c, "%s *dp = %s + nc * %lld;\n", ct, ds, (ll)(H * W));
  LINE(c, "for (int64_t i = 0; i < %lld; i++) dp[i] = 0;\n", (ll)(H * W));
  if ((chk_h || chk_w) && !c->target && !c->k->freestanding && OW <= 1024) {
    /* hosted C, windows reaching outside the image: a row of windows' shares g / divisor on the
     * stack, then added tap by tap (tap_rows: for each tap, the row's outputs in order) */
    int64_t gm[8];
    open_rows(c, in, OH, gm);
    LINE(c, "%s d[%lld];   /* each window's share of its g */\n", ct, (ll)OW);
    avg_clip(c, in, H, W, 1, 0);
    LINE(c, "for (int64_t ow = 0; ow < %lld; ow++) {\n", (ll)OW);
    c->ind += 2;
    const char *cnt = avg_clip(c, in, H, W, 0, 0);
    LINE(c, "d[ow] = gp[oh * %lld + ow] / %s;\n", (ll)OW, cnt);
    c->ind -= 2;
    LINE(c, "}\n");
    tap_rows(c, in, gm, H, W, OW, chk_h, chk_w, arena_printf(c->p->arena, "%s *restrict dr = dp", ct), avg_bwd_update);
    close_rows(c, base);
    return;
  }
  window_loops(c, OH, OW);
  if (!chk_h && !chk_w) {
    char ih[128], iw[128];
    win_index(ih, sizeof ih, "oh", sh, 0, "kh", 1);
    win_index(iw, sizeof iw, "ow", sw, 0, "kw", 1);
    LINE(c, "const %s d = gp[oh * %lld + ow] / %lld;\n", ct, (ll)OW, (ll)(kh * kw));
    LINE(c, "for (int64_t kh = 0; kh < %lld; kh++)\n", (ll)kh);
    LINE(c, "  for (int64_t kw = 0; kw < %lld; kw++) dp[(%s) * %lld + %s] += d;\n", (ll)kw, ih, (ll)W, iw);
  } else {
    avg_clip(c, in, H, W, 1, 1);
    const char *cnt = avg_clip(c, in, H, W, 0, 1);
    LINE(c, "const %s d = gp[oh * %lld + ow] / %s;\n", ct, (ll)OW, cnt);
    LINE(c, "for (int64_t ih = ha; ih < hb; ih++)\n");
    LINE(c, "  for (int64_t iw = wa; iw < wb; iw++) dp[ih * %lld + iw] += d;\n", (ll)W);
  }
  close_rows(c, base);
}
