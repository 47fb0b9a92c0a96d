/* quant_c.c - the C of an int8 plan (quant_c.h): model.c with the int8 weights, biases and
 * requantization constants as const arrays (flash), one call of a small int8 kernel per step
 * (convolution: each window gathered once into a scratch buffer, then one int8 dot product per
 * output channel; linear, max pooling, add, relu, quantize/dequantize; int32 accumulation, the
 * int64 single-rounding requantization; the dot product with SMLAD where the core has the DSP
 * extension) and the float fallbacks as plain loops; the arena
 * holds the int8 (and float scratch) buffers at the plan's offsets. model.h states the scheme,
 * the input's and output's scale and zero point, and every layer's scales.
 *
 * Freestanding (CgOptions.freestanding): <stdint.h>, <stddef.h>, <string.h> and, only for the
 * float fallbacks tanh/sigmoid/exp, <math.h>'s tanhf/expf; otherwise the runtime's descriptor and
 * main() under CTC_MAIN (`./net infer`, `./net bench`): the weights are in the file, so a program
 * takes no --weights. The integer kernels give the same bits on every target with arithmetic
 * right shifts of negative int64 values (gcc and clang on Arm, AArch64, x86-64); the only float
 * arithmetic on the int8 path is the input's x / scale and the output's (q - zp) * scale. */
#include <stdlib.h>
#include <string.h>

#include "cg_int.h"
#include "quant_c.h"

typedef long long ll;

static const char k_requant[] =
    "/* acc * M0 * 2^-r rounded half up: TFLite's single-rounding MultiplyByQuantizedMultiplier */\n"
    "static inline int32_t ctc_q_requant(int32_t acc, int32_t m0, int r) {\n"
    "  return (int32_t)(((int64_t)acc * m0 + ((int64_t)1 << (r - 1))) >> r);\n"
    "}\n"
    "static inline int8_t ctc_q_sat(int32_t v, int32_t lo, int32_t hi) { return (int8_t)(v < lo ? lo : v > hi ? hi : v); }\n\n";

static const char k_quantize[] =
    "static void ctc_q_quantize(const float *x, int8_t *y, long n, float scale, int32_t zp) {\n"
    "  for (long i = 0; i < n; i++) {\n"
    "    float t = x[i] / scale;\n"
    "    t = !(t > -1000.0f) ? -1000.0f : t > 1000.0f ? 1000.0f : t;   /* NaN: the lowest */\n"
    "    const int32_t r = (int32_t)(t < 0 ? t - 0.5f : t + 0.5f);   /* half away from zero */\n"
    "    y[i] = ctc_q_sat(r + zp, -128, 127);\n"
    "  }\n"
    "}\n\n";

static const char k_dequantize[] =
    "static void ctc_q_dequantize(const int8_t *x, float *y, long n, float scale, int32_t zp) {\n"
    "  for (long i = 0; i < n; i++) y[i] = (float)((int32_t)x[i] - zp) * scale;\n"
    "}\n\n";

static const char k_dot[] =
    "/* sum a[t] * b[t] over n int8 pairs, plus acc (exact in int32: the same on every target).\n"
    " * Cores with the DSP extension (Cortex-M4/M7/M33): four pairs per two SMLADs, as CMSIS-NN. */\n"
    "#if defined(__ARM_FEATURE_DSP) && __ARM_FEATURE_DSP && (defined(__GNUC__) || defined(__clang__))\n"
    "#include <arm_acle.h>\n"
    "static inline int32_t ctc_q_dot(const int8_t *a, const int8_t *b, int n, int32_t acc) {\n"
    "  int t = 0;\n"
    "  for (; t + 4 <= n; t += 4) {\n"
    "    uint32_t x, w;\n"
    "    __builtin_memcpy(&x, a + t, 4);\n"
    "    __builtin_memcpy(&w, b + t, 4);\n"
    "    acc = __smlad(__sxtb16(x), __sxtb16(w), acc);   /* bytes 0 and 2 */\n"
    "    acc = __smlad(__sxtb16(x >> 8 | x << 24), __sxtb16(w >> 8 | w << 24), acc);   /* 1 and 3 */\n"
    "  }\n"
    "  for (; t < n; t++) acc += a[t] * b[t];\n"
    "  return acc;\n"
    "}\n"
    "#else\n"
    "static inline int32_t ctc_q_dot(const int8_t *a, const int8_t *b, int n, int32_t acc) {\n"
    "  for (int t = 0; t < n; t++) acc += a[t] * b[t];\n"
    "  return acc;\n"
    "}\n"
    "#endif\n\n";

static const char k_conv[] =
    "/* convolution: x[n, c, h, w] int8, w[o, c/g * kh * kw] int8. Per output position the window is\n"
    " * gathered once into `win` (padding as the zero point zx, which the bias has folded in: real 0)\n"
    " * and dotted with every output channel of its group: an int32 accumulator per output */\n"
    "static void ctc_q_conv(const int8_t *x, int8_t *y, const int8_t *w, const int32_t *bias, const int32_t *m0,\n"
    "                       const uint8_t *r, int8_t *win, int n, int c, int h, int wd, int o, int oh, int ow,\n"
    "                       int kh, int kw, int sh, int sw, int ph, int pw, int dh, int dw, int g, int32_t zx,\n"
    "                       int32_t zy, int32_t lo, int32_t hi) {\n"
    "  const int cg = c / g, og = o / g, kk = cg * kh * kw;\n"
    "  for (int b = 0; b < n; b++)\n"
    "    for (int gi = 0; gi < g; gi++) {\n"
    "      const int8_t *xg = x + ((long)b * c + (long)gi * cg) * h * wd;\n"
    "      for (int i = 0; i < oh; i++)\n"
    "        for (int j = 0; j < ow; j++) {\n"
    "          const int y0 = i * sh - ph, x0 = j * sw - pw;\n"
    "          const int inside = y0 >= 0 && y0 + (kh - 1) * dh < h && x0 >= 0 && x0 + (kw - 1) * dw < wd;\n"
    "          int8_t *p = win;\n"
    "          for (int ic = 0; ic < cg; ic++)\n"
    "            for (int u = 0; u < kh; u++) {\n"
    "              const int yy = y0 + u * dh;\n"
    "              const int8_t *xr = xg + ((long)ic * h + (yy < 0 || yy >= h ? 0 : yy)) * wd;   /* row yy (when it exists) */\n"
    "              if (inside)\n"
    "                for (int v = 0; v < kw; v++) *p++ = xr[x0 + v * dw];\n"
    "              else\n"
    "                for (int v = 0; v < kw; v++) {\n"
    "                  const int xx = x0 + v * dw;\n"
    "                  *p++ = yy < 0 || yy >= h || xx < 0 || xx >= wd ? (int8_t)zx : xr[xx];\n"
    "                }\n"
    "            }\n"
    "          for (int oc = gi * og; oc < (gi + 1) * og; oc++) {\n"
    "            const int32_t acc = ctc_q_dot(win, w + (long)oc * kk, kk, bias[oc]);\n"
    "            y[(((long)b * o + oc) * oh + i) * ow + j] = ctc_q_sat(ctc_q_requant(acc, m0[oc], r[oc]) + zy, lo, hi);\n"
    "          }\n"
    "        }\n"
    "    }\n"
    "}\n\n";

static const char k_linear[] =
    "/* x[m, k] int8 times w[n, k]^T int8, int32 accumulators (the input's zero point is in the bias) */\n"
    "static void ctc_q_linear(const int8_t *x, int8_t *y, const int8_t *w, const int32_t *bias, const int32_t *m0,\n"
    "                         const uint8_t *r, int m, int k, int n, int32_t zy, int32_t lo, int32_t hi) {\n"
    "  for (int i = 0; i < m; i++)\n"
    "    for (int j = 0; j < n; j++) {\n"
    "      const int32_t acc = ctc_q_dot(x + (long)i * k, w + (long)j * k, k, bias[j]);\n"
    "      y[(long)i * n + j] = ctc_q_sat(ctc_q_requant(acc, m0[j], r[j]) + zy, lo, hi);\n"
    "    }\n"
    "}\n\n";

static const char k_maxpool[] =
    "/* max pooling on int8 (the scale and zero point of its input; padding never wins) */\n"
    "static void ctc_q_maxpool(const int8_t *x, int8_t *y, int nc, int h, int wd, int oh, int ow, int kh, int kw,\n"
    "                          int sh, int sw, int ph, int pw, int dh, int dw) {\n"
    "  for (int p = 0; p < nc; p++)\n"
    "    for (int i = 0; i < oh; i++)\n"
    "      for (int j = 0; j < ow; j++) {\n"
    "        int8_t best = -128;\n"
    "        for (int u = 0; u < kh; u++) {\n"
    "          const int yy = i * sh - ph + u * dh;\n"
    "          if (yy < 0 || yy >= h) continue;\n"
    "          for (int v = 0; v < kw; v++) {\n"
    "            const int xx = j * sw - pw + v * dw;\n"
    "            if (xx < 0 || xx >= wd) continue;\n"
    "            const int8_t e = x[((long)p * h + yy) * wd + xx];\n"
    "            best = e > best ? e : best;\n"
    "          }\n"
    "        }\n"
    "        y[((long)p * oh + i) * ow + j] = best;\n"
    "      }\n"
    "}\n\n";

static const char k_add[] =
    "/* TFLite's int8 add: each input times 2^20 to twice the larger input scale, the sum to the output's */\n"
    "static void ctc_q_add(const int8_t *a, const int8_t *b, int8_t *y, long n, int32_t za, int32_t zb, int32_t zy,\n"
    "                      int32_t m1, int r1, int32_t m2, int r2, int32_t mo, int ro, int32_t lo, int32_t hi) {\n"
    "  for (long i = 0; i < n; i++) {\n"
    "    const int32_t s = ctc_q_requant(((int32_t)a[i] - za) * (1 << 20), m1, r1) +\n"
    "                      ctc_q_requant(((int32_t)b[i] - zb) * (1 << 20), m2, r2);\n"
    "    y[i] = ctc_q_sat(ctc_q_requant(s, mo, ro) + zy, lo, hi);\n"
    "  }\n"
    "}\n\n";

static const char k_relu[] =
    "static void ctc_q_relu(const int8_t *x, int8_t *y, long n, int32_t zp) {\n"
    "  for (long i = 0; i < n; i++) y[i] = ctc_q_sat(x[i], zp, 127);\n"
    "}\n\n";

static const char k_avgpool[] =
    "/* average pooling on int8 (the scale and zero point of its input): PyTorch's divisors, padding\n"
    " * as the zero point (real 0), the mean rounded half away from zero */\n"
    "static void ctc_q_avgpool(const int8_t *x, int8_t *y, int nc, int h, int wd, int oh, int ow, int kh, int kw,\n"
    "                          int sh, int sw, int ph, int pw, int cip, int32_t zp) {\n"
    "  for (int p = 0; p < nc; p++)\n"
    "    for (int i = 0; i < oh; i++)\n"
    "      for (int j = 0; j < ow; j++) {\n"
    "        int32_t acc = 0;\n"
    "        int cnt = 0, cnt_pad = 0;\n"
    "        for (int u = 0; u < kh; u++)\n"
    "          for (int v = 0; v < kw; v++) {\n"
    "            const int yy = i * sh - ph + u, xx = j * sw - pw + v;\n"
    "            cnt_pad += yy < h + ph && xx < wd + pw;\n"
    "            if (yy < 0 || yy >= h || xx < 0 || xx >= wd) continue;\n"
    "            acc += (int32_t)x[((long)p * h + yy) * wd + xx] - zp;\n"
    "            cnt++;\n"
    "          }\n"
    "        const int32_t d = cip ? cnt_pad : cnt;\n"
    "        const int32_t m = acc >= 0 ? (acc + d / 2) / d : -((-acc + d / 2) / d);\n"
    "        y[((long)p * oh + i) * ow + j] = ctc_q_sat(m + zp, -128, 127);\n"
    "      }\n"
    "}\n\n";

static const char k_sum[] =
    "/* sums over the trailing axes: x[outer, inner] int8 -> y[outer], sum (x - zx) in int32, requantized\n"
    " * (a mean's 1/inner is in m0, r) */\n"
    "static void ctc_q_sum(const int8_t *x, int8_t *y, long outer, long inner, int32_t zx, int32_t zy, int32_t m0,\n"
    "                      int r) {\n"
    "  for (long o = 0; o < outer; o++) {\n"
    "    int32_t acc = 0;\n"
    "    for (long i = 0; i < inner; i++) acc += x[o * inner + i];\n"
    "    y[o] = ctc_q_sat(ctc_q_requant(acc - zx * (int32_t)inner, m0, r) + zy, -128, 127);\n"
    "  }\n"
    "}\n\n";

/* s as a C string literal */
static void c_str(Buf *b, const char *s) {
  cg_puts(b, "\"");
  for (; *s; s++) {
    unsigned char ch = (unsigned char)*s;
    if (ch == '"' || ch == '\\') cg_printf(b, "\\%c", ch);
    else if (ch < 32 || ch >= 127) cg_printf(b, "\\%03o", ch);
    else cg_printf(b, "%c", ch);
  }
  cg_puts(b, "\"");
}

/* a buffer as a C expression */
static void buf_ref(Buf *b, const QuantPlan *q, int i, const char *const *in_names, const char *const *out_names) {
  const QBuf *x = &q->bufs.data[i];
  if (x->where == QB_INPUT) cg_puts(b, in_names[x->index]);
  else if (x->where == QB_OUTPUT) cg_puts(b, out_names[x->index]);
  else cg_printf(b, "(%s *)(A + %lld)", x->q ? "int8_t" : "float", (ll)x->offset);
}

static void arr(Buf *b, const char *type, const char *name, int si, int64_t n, const void *data, int kind) {
  cg_printf(b, "static const %s %s_%d[%lld] = {", type, name, si, (ll)n);
  for (int64_t e = 0; e < n; e++) {
    if (e % 16 == 0) cg_puts(b, "\n ");
    ll v = kind == 0 ? ((const int8_t *)data)[e] : kind == 1 ? ((const int32_t *)data)[e] : ((const uint8_t *)data)[e];
    cg_printf(b, " %lld,", v);
  }
  cg_puts(b, "\n};\n");
}

static const char *step_name(const QStep *s, const Func *f, char *buf, size_t cap) {
  switch (s->kind) {
  case QS_QUANTIZE: return "quantize";
  case QS_DEQUANTIZE: return "dequantize";
  case QS_CONV: case QS_LINEAR:
    /* one folded op is the bias add; more are a per-channel affine map (an eval-mode BatchNorm) */
    snprintf(buf, cap, "%s%s%s (int8)", s->kind == QS_CONV ? "conv2d" : "linear",
             s->nfold == 0 ? "" : s->nfold == 1 ? "+bias" : "+affine", s->relu ? "+relu" : "");
    return buf;
  case QS_MAXPOOL: return "maxpool2d (int8)";
  case QS_AVGPOOL: return "avgpool2d (int8)";
  case QS_SUM: return s->nfold ? "mean (int8)" : "sum (int8)";
  case QS_ADD: return s->relu ? "add+relu (int8)" : "add (int8)";
  case QS_RELU: return "relu (int8)";
  case QS_FLOAT: return ir_ops[f->insts.data[s->inst].op].name;
  case QS_COPY: return "copy";
  }
  return "?";
}

int cg_quant_emit(const Program *p, int fi, const QuantPlan *q, const CgOptions *opt, FILE *c, FILE *h,
                  const char *h_name) {
  const Func *f = p->funcs.data[fi];
  char P[64], U[64], fname[128];
  cg_c_prefix(p, P, sizeof P);
  for (int i = 0; i < 64; i++) U[i] = (char)(P[i] >= 'a' && P[i] <= 'z' ? P[i] - 'a' + 'A' : P[i]);
  cg_ident(fname, sizeof fname, f->name);
  int fs = opt->freestanding;
  /* argument names */
  const char **in_names = calloc((size_t)f->inputs.len + 1, sizeof *in_names);
  const char **out_names = calloc((size_t)f->outputs.len + 1, sizeof *out_names);
  char (*nb)[80] = calloc((size_t)(f->inputs.len + f->outputs.len) + 1, sizeof *nb);
  for (int i = 0; i < f->inputs.len; i++) {
    char id[64];
    cg_ident(id, sizeof id, f->values.data[f->inputs.data[i]].name);
    snprintf(nb[i], sizeof nb[i], "in_%s", id);
    in_names[i] = nb[i];
  }
  for (int i = 0; i < f->outputs.len; i++) {
    snprintf(nb[f->inputs.len + i], sizeof nb[0], "out%d", i);
    out_names[i] = nb[f->inputs.len + i];
  }
  int used[QS_COPY + 1] = {0}, fl_math = 0;
  for (int s = 0; s < q->steps.len; s++) {
    const QStep *st = &q->steps.data[s];
    used[st->kind] = 1;
    if (st->kind == QS_FLOAT) {
      Op op = f->insts.data[st->inst].op;
      fl_math |= op == IR_TANH || op == IR_SIGMOID || op == IR_EXP;
    }
  }
  char src[1024];
  cg_comment_text(src, sizeof src, ir_source_name(p));
  char stem[256];
  const char *base = strrchr(h_name, '/');
  snprintf(stem, sizeof stem, "%s", base ? base + 1 : h_name);
  char *dot = strrchr(stem, '.');
  if (dot) *dot = 0;
  int nq = 0;
  for (int s = 0; s < q->steps.len; s++) nq += q->steps.data[s].kind == QS_CONV || q->steps.data[s].kind == QS_LINEAR;

  /* ---- model.c ---- */
  Buf b = {0};
  cg_printf(&b, "/* %s.c - generated by ctc from %s: entry %s, int8 post-training quantization\n", stem, src, f->name);
  cg_printf(&b, " * (--quantize int8, calibrated on %lld samples of %s; the scheme is in %s).\n", (ll)q->ncalib,
            q->calib_path ? q->calib_path : "?", h_name);
  cg_printf(&b, " * Flash: %lld bytes of const arrays; RAM: the arena, %lld bytes. Do not edit. */\n", (ll)q->flash_bytes,
            (ll)q->arena_bytes);
  cg_printf(&b, "#include \"%s\"\n", h_name);
  if (!fs) cg_puts(&b, "#include \"ctc_rt.h\"\n");
  cg_puts(&b, "#include <stddef.h>\n#include <stdint.h>\n#include <string.h>\n");
  if (fl_math) cg_puts(&b, "#include <math.h>\n");
  cg_puts(&b, "\n");
  /* constants */
  for (int s = 0; s < q->steps.len; s++) {
    const QStep *st = &q->steps.data[s];
    if (st->kind != QS_CONV && st->kind != QS_LINEAR) continue;
    const Inst *in = &f->insts.data[st->inst];
    char pn[256];
    char nm[64];
    cg_printf(&b, "/* %s, line %d: weights of '%s' per output channel (int8), bias (int32), M0, r */\n",
              step_name(st, f, nm, sizeof nm), in->loc.line, cg_comment_text(pn, sizeof pn, p->params.data[st->wparam].name));
    arr(&b, "int8_t", "ctc_qw", s, st->wnumel, st->w, 0);
    arr(&b, "int32_t", "ctc_qb", s, st->cout, st->bias, 1);
    arr(&b, "int32_t", "ctc_qm", s, st->cout, st->mult, 1);
    arr(&b, "uint8_t", "ctc_qr", s, st->cout, st->rshift, 2);
    cg_puts(&b, "\n");
  }
  /* kernels */
  if (used[QS_CONV] || used[QS_LINEAR] || used[QS_ADD] || used[QS_QUANTIZE] || used[QS_RELU] || used[QS_AVGPOOL] ||
      used[QS_SUM])
    cg_puts(&b, k_requant);
  if (used[QS_QUANTIZE]) cg_puts(&b, k_quantize);
  if (used[QS_DEQUANTIZE]) cg_puts(&b, k_dequantize);
  if (used[QS_CONV] || used[QS_LINEAR]) cg_puts(&b, k_dot);
  if (used[QS_CONV]) cg_puts(&b, k_conv);
  if (used[QS_LINEAR]) cg_puts(&b, k_linear);
  if (used[QS_MAXPOOL]) cg_puts(&b, k_maxpool);
  if (used[QS_ADD]) cg_puts(&b, k_add);
  if (used[QS_RELU]) cg_puts(&b, k_relu);
  if (used[QS_AVGPOOL]) cg_puts(&b, k_avgpool);
  if (used[QS_SUM]) cg_puts(&b, k_sum);
  cg_printf(&b, "size_t %s_arena_bytes(void) { return %s_ARENA_BYTES; }\n\n", P, U);
  cg_printf(&b, "int %s_init(%s_t *m, void *arena, size_t bytes) {\n", P, P);
  cg_printf(&b, "  if (!m || !arena) return CTC_ERR_ARG;\n"
                "  if (bytes < %s_ARENA_BYTES || ((uintptr_t)arena & 63)) return CTC_ERR_ARENA;\n"
                "  m->arena = (unsigned char *)arena;\n  m->arena_bytes = bytes;\n  return CTC_OK;\n}\n\n", U);
  /* the entry */
  Buf sig = {0};
  cg_printf(&sig, "int %s_%s(%s_t *m", P, fname, P);
  for (int i = 0; i < f->inputs.len; i++) cg_printf(&sig, ", const float *%s", in_names[i]);
  for (int i = 0; i < f->outputs.len; i++) cg_printf(&sig, ", float *%s", out_names[i]);
  cg_puts(&sig, ")");
  cg_printf(&b, "%s {\n", sig.s);
  cg_puts(&b, "  if (!m || !m->arena");
  for (int i = 0; i < f->inputs.len; i++) cg_printf(&b, " || !%s", in_names[i]);
  for (int i = 0; i < f->outputs.len; i++) cg_printf(&b, " || !%s", out_names[i]);
  cg_puts(&b, ") return CTC_ERR_ARG;\n  unsigned char *A = m->arena;\n");
  for (int s = 0; s < q->steps.len; s++) {
    const QStep *st = &q->steps.data[s];
    const QBuf *bi = &q->bufs.data[st->in], *bo = &q->bufs.data[st->out];
    const Type *ti = &st->tin, *to = &st->tout;
    char nm[64];
    cg_printf(&b, "  /* %s", step_name(st, f, nm, sizeof nm));
    if (st->inst >= 0) cg_printf(&b, ", line %d", f->insts.data[st->inst].loc.line);
    cg_puts(&b, " */\n  ");
    const int64_t *a = st->attr;
    switch (st->kind) {
    case QS_QUANTIZE:
      cg_puts(&b, "ctc_q_quantize(");
      buf_ref(&b, q, st->in, in_names, out_names);
      cg_puts(&b, ", ");
      buf_ref(&b, q, st->out, in_names, out_names);
      cg_printf(&b, ", %lld, %.9gf, %d);\n", (ll)bo->numel, (float)bo->scale, (int)bo->zp);
      break;
    case QS_DEQUANTIZE:
      cg_puts(&b, "ctc_q_dequantize(");
      buf_ref(&b, q, st->in, in_names, out_names);
      cg_puts(&b, ", ");
      buf_ref(&b, q, st->out, in_names, out_names);
      cg_printf(&b, ", %lld, %.9gf, %d);\n", (ll)bo->numel, (float)bi->scale, (int)bi->zp);
      break;
    case QS_COPY:
      cg_puts(&b, "memcpy(");
      buf_ref(&b, q, st->out, in_names, out_names);
      cg_puts(&b, ", ");
      buf_ref(&b, q, st->in, in_names, out_names);
      cg_printf(&b, ", %lld);\n", (ll)(bo->numel * 4));
      break;
    case QS_CONV: {
      const Type *tw = &f->values.data[f->insts.data[st->inst].args[1]].type;
      cg_puts(&b, "ctc_q_conv(");
      buf_ref(&b, q, st->in, in_names, out_names);
      cg_puts(&b, ", ");
      buf_ref(&b, q, st->out, in_names, out_names);
      cg_printf(&b, ", ctc_qw_%d, ctc_qb_%d, ctc_qm_%d, ctc_qr_%d, ", s, s, s, s);
      buf_ref(&b, q, st->scratch, in_names, out_names);
      cg_printf(&b, ",\n             %lld, %lld, %lld, %lld, %lld, %lld, %lld, %lld, %lld, %lld, %lld, %lld, %lld, %lld, %lld, %lld, "
                    "%d, %d, %d, %d);\n",
                (ll)ti->dims[0], (ll)ti->dims[1], (ll)ti->dims[2], (ll)ti->dims[3], (ll)to->dims[1], (ll)to->dims[2],
                (ll)to->dims[3], (ll)tw->dims[2], (ll)tw->dims[3], (ll)a[0], (ll)a[1], (ll)a[2], (ll)a[3], (ll)a[4],
                (ll)a[5], (ll)(a[6] > 0 ? a[6] : 1), (int)bi->zp, (int)bo->zp, (int)st->lo, (int)st->hi);
      break;
    }
    case QS_LINEAR: {
      int64_t K = ti->dims[ti->ndim - 1];
      cg_puts(&b, "ctc_q_linear(");
      buf_ref(&b, q, st->in, in_names, out_names);
      cg_puts(&b, ", ");
      buf_ref(&b, q, st->out, in_names, out_names);
      cg_printf(&b, ", ctc_qw_%d, ctc_qb_%d, ctc_qm_%d, ctc_qr_%d, %lld, %lld, %d, %d, %d, %d);\n", s, s, s, s,
                (ll)(ir_numel(ti) / K), (ll)K, st->cout, (int)bo->zp, (int)st->lo, (int)st->hi);
      break;
    }
    case QS_MAXPOOL:
      cg_puts(&b, "ctc_q_maxpool(");
      buf_ref(&b, q, st->in, in_names, out_names);
      cg_puts(&b, ", ");
      buf_ref(&b, q, st->out, in_names, out_names);
      cg_printf(&b, ", %lld, %lld, %lld, %lld, %lld, %lld, %lld, %lld, %lld, %lld, %lld, %lld, %lld);\n",
                (ll)(ti->dims[0] * ti->dims[1]), (ll)ti->dims[2], (ll)ti->dims[3], (ll)to->dims[2], (ll)to->dims[3],
                (ll)a[0], (ll)a[1], (ll)a[2], (ll)a[3], (ll)a[4], (ll)a[5], (ll)a[6], (ll)a[7]);
      break;
    case QS_AVGPOOL:
      cg_puts(&b, "ctc_q_avgpool(");
      buf_ref(&b, q, st->in, in_names, out_names);
      cg_puts(&b, ", ");
      buf_ref(&b, q, st->out, in_names, out_names);
      cg_printf(&b, ", %lld, %lld, %lld, %lld, %lld, %lld, %lld, %lld, %lld, %lld, %lld, %d, %d);\n",
                (ll)(ti->dims[0] * ti->dims[1]), (ll)ti->dims[2], (ll)ti->dims[3], (ll)to->dims[2], (ll)to->dims[3],
                (ll)a[0], (ll)a[1], (ll)a[2], (ll)a[3], (ll)a[4], (ll)a[5], a[6] ? 1 : 0, (int)bi->zp);
      break;
    case QS_SUM:
      cg_puts(&b, "ctc_q_sum(");
      buf_ref(&b, q, st->in, in_names, out_names);
      cg_puts(&b, ", ");
      buf_ref(&b, q, st->out, in_names, out_names);
      cg_printf(&b, ", %lld, %lld, %d, %d, %d, %d);\n", (ll)bo->numel, (ll)(bi->numel / bo->numel), (int)bi->zp,
                (int)bo->zp, (int)st->mo, st->ro);
      break;
    case QS_ADD: {
      const QBuf *b2 = &q->bufs.data[st->in2];
      cg_puts(&b, "ctc_q_add(");
      buf_ref(&b, q, st->in, in_names, out_names);
      cg_puts(&b, ", ");
      buf_ref(&b, q, st->in2, in_names, out_names);
      cg_puts(&b, ", ");
      buf_ref(&b, q, st->out, in_names, out_names);
      cg_printf(&b, ", %lld, %d, %d, %d,\n            %d, %d, %d, %d, %d, %d, %d, %d);\n", (ll)bo->numel, (int)bi->zp,
                (int)b2->zp, (int)bo->zp, (int)st->m1, st->r1, (int)st->m2, st->r2, (int)st->mo, st->ro, (int)st->lo,
                (int)st->hi);
      break;
    }
    case QS_RELU:
      cg_puts(&b, "ctc_q_relu(");
      buf_ref(&b, q, st->in, in_names, out_names);
      cg_puts(&b, ", ");
      buf_ref(&b, q, st->out, in_names, out_names);
      cg_printf(&b, ", %lld, %d);\n", (ll)bo->numel, (int)bi->zp);
      break;
    case QS_FLOAT: {
      Op op = f->insts.data[st->inst].op;
      const char *e = op == IR_TANH ? "tanhf(x[i])" : op == IR_SIGMOID ? "1.0f / (1.0f + expf(-x[i]))"
                      : op == IR_EXP ? "expf(x[i])" : "-x[i]";
      cg_puts(&b, "{\n    const float *x = ");
      buf_ref(&b, q, st->in, in_names, out_names);
      cg_puts(&b, ";\n    float *y = ");
      buf_ref(&b, q, st->out, in_names, out_names);
      cg_printf(&b, ";\n    for (long i = 0; i < %lld; i++) y[i] = %s;\n  }\n", (ll)bo->numel, e);
      break;
    }
    }
  }
  cg_puts(&b, "  return CTC_OK;\n}\n");
  if (!fs) {   /* the runtime's view: no parameters (the weights are in the file), one entry */
    cg_printf(&b, "\nstatic const ctc_tensor ctc_in_%s[] = {\n", fname);
    for (int i = 0; i < f->inputs.len; i++) {
      const Type *t = &f->values.data[f->inputs.data[i]].type;
      cg_printf(&b, "  {\"%s\", CTC_F32, %d, {", in_names[i] + 3, t->ndim);
      for (int k = 0; k < t->ndim; k++) cg_printf(&b, "%s%lld", k ? ", " : "", (ll)t->dims[k]);
      cg_puts(&b, "}, 0, NULL, 0},\n");
    }
    cg_printf(&b, "};\nstatic const ctc_tensor ctc_out_%s[] = {\n", fname);
    for (int i = 0; i < f->outputs.len; i++) {
      const Type *t = &f->values.data[f->outputs.data[i]].type;
      char id[64];
      cg_ident(id, sizeof id, f->out_names.len > i ? f->out_names.data[i] : "out");
      cg_printf(&b, "  {\"%s\", CTC_F32, %d, {", id, t->ndim);
      for (int k = 0; k < t->ndim; k++) cg_printf(&b, "%s%lld", k ? ", " : "", (ll)t->dims[k]);
      cg_puts(&b, "}, 0, NULL, 0},\n");
    }
    cg_puts(&b, "};\n");
    cg_printf(&b, "static int ctc_call_%s(void *m, const void *const *in, void *const *out) {\n  return %s_%s((%s_t *)m",
              fname, P, fname, P);
    for (int i = 0; i < f->inputs.len; i++) cg_printf(&b, ", (const float *)in[%d]", i);
    for (int i = 0; i < f->outputs.len; i++) cg_printf(&b, ", (float *)out[%d]", i);
    cg_puts(&b, ");\n}\n");
    cg_puts(&b, "static const ctc_entry ctc_entries[] = {\n  {");
    c_str(&b, f->name);
    cg_printf(&b, ", %d, %d, ctc_in_%s, ctc_out_%s, ctc_call_%s, CTC_ENTRY_FORWARD, 0, NULL},\n};\n", f->inputs.len,
              f->outputs.len, fname, fname, fname);
    cg_printf(&b, "static int ctc_init_any(void *m, void *arena, size_t bytes) { return %s_init((%s_t *)m, arena, bytes); }\n",
              P, P);
    cg_printf(&b, "static void *ctc_arena_of(void *m) { return ((%s_t *)m)->arena; }\n", P);
    cg_printf(&b, "const ctc_model_desc %s_desc = {\n  \"%s\", ", P, P);
    c_str(&b, ir_source_name(p));
    cg_printf(&b, ", sizeof(%s_t), %s_ARENA_BYTES, 64,\n"
                  "  0, NULL,  /* no parameters: the int8 weights are const arrays of this file */\n"
                  "  1, ctc_entries,\n  ctc_init_any, ctc_arena_of,\n  0, NULL, NULL,\n  0, NULL, NULL,  /* no state_dict */\n  NULL,  /* script */\n};\n", P, U);
    cg_printf(&b, "\n#ifdef CTC_MAIN\nint main(int argc, char **argv) { return ctc_main(argc, argv, &%s_desc); }\n#endif\n", P);
  }
  fputs(b.s, c);

  /* ---- model.h ---- */
  Buf hb = {0};
  cg_printf(&hb, "/* %s.h - generated by ctc from %s: entry %s in int8 (--quantize int8). Do not edit.\n *\n", stem, src,
            f->name);
  cg_puts(&hb, " * Post-training quantization, the scheme of TFLite's int8 kernels and CMSIS-NN (PyTorch's\n"
               " * quantize_per_channel for the weights): real = scale * (q - zero_point).\n"
               " *   weights: int8 [-127, 127], symmetric per output channel (zero point 0), scale max|w| / 127\n"
               " *   activations: int8 per tensor, asymmetric: scale (max - min) / 255 and zero point\n"
               " *     round(-128 - min / scale) from the calibration data's min/max (widened to hold 0)\n"
               " *   bias: int32 with scale s_in * s_w[c], zero point 0\n"
               " *   conv2d / linear: int32 acc = bias[c] + sum (x - zp_in) * w, then\n"
               " *     y = clamp(zp_out + ((acc * M0[c] + 2^(r[c]-1)) >> r[c]), lo, hi)   (int64 product:\n"
               " *     TFLite's single-rounding MultiplyByQuantizedMultiplier) with\n"
               " *     M0[c] * 2^-r[c] = s_in * s_w[c] / s_out, M0 in [2^30, 2^31); a fused ReLU is lo = zp_out\n"
               " *   max pooling and ReLU: on int8, the input's scale and zero point\n"
               " *   add: TFLite's (inputs times 2^20 to twice the larger scale, the sum to the output's)\n"
               " *   ops without an int8 kernel: float, between a dequantize and a quantize\n");
  cg_printf(&hb, " * Calibrated on %lld samples (%s). Flash %lld bytes (const arrays), RAM %lld bytes (the arena).\n *\n",
            (ll)q->ncalib, q->calib_path ? q->calib_path : "?", (ll)q->flash_bytes, (ll)q->arena_bytes);
  cg_puts(&hb, " * Steps (scale / zero point of the int8 input and output; weight scales per channel):\n");
  for (int s = 0; s < q->steps.len; s++) {
    const QStep *st = &q->steps.data[s];
    const QBuf *bi = &q->bufs.data[st->in], *bo = &q->bufs.data[st->out];
    char nm[64];
    cg_printf(&hb, " *   %-26s", step_name(st, f, nm, sizeof nm));
    if (st->inst >= 0) cg_printf(&hb, " line %-4d", f->insts.data[st->inst].loc.line);
    else cg_puts(&hb, "          ");
    if (bi->q) cg_printf(&hb, " in %.6g/%d", bi->scale, (int)bi->zp);
    if (st->in2 >= 0) cg_printf(&hb, " + %.6g/%d", q->bufs.data[st->in2].scale, (int)q->bufs.data[st->in2].zp);
    if (bo->q) cg_printf(&hb, " out %.6g/%d", bo->scale, (int)bo->zp);
    cg_puts(&hb, "\n");
    if (st->kind == QS_CONV || st->kind == QS_LINEAR) {
      cg_puts(&hb, " *       s_w:");
      for (int k = 0; k < st->cout; k++) cg_printf(&hb, "%s %.4g", k && k % 10 == 0 ? "\n *           " : "", st->wscale[k]);
      cg_puts(&hb, "\n");
    }
  }
  cg_printf(&hb, " */\n#ifndef CTC_GENERATED_%s_H\n#define CTC_GENERATED_%s_H\n\n#include <stddef.h>\n#include <stdint.h>\n", U, U);
  if (!fs) cg_puts(&hb, "#include \"ctc_rt.h\"\n");
  cg_puts(&hb, "\n#ifdef __cplusplus\nextern \"C\" {\n#endif\n\n");
  if (fs)
    cg_puts(&hb, "#ifndef CTC_RT_H   /* the status codes, with the values of ctc_rt.h's ctc_status */\n"
                 "enum { CTC_OK = 0, CTC_ERR_SHAPE = 4, CTC_ERR_ARENA = 6, CTC_ERR_ARG = 7 };\n#endif\n\n");
  cg_printf(&hb, "/* RAM: the int8 activations' buffers at their peak. */\n#define %s_ARENA_BYTES ((size_t)%lld)\n", U,
            (ll)q->arena_bytes);
  cg_printf(&hb, "/* Flash: int8 weights, int32 biases and multipliers, shifts. */\n#define %s_WEIGHT_BYTES ((size_t)%lld)\n",
            U, (ll)q->flash_bytes);
  cg_printf(&hb, "#define %s_QUANT_INT8 1\n", U);
  /* the first input's and output's quantization */
  for (int s = 0; s < q->steps.len; s++) {
    const QStep *st = &q->steps.data[s];
    if (st->kind == QS_QUANTIZE && q->bufs.data[st->in].where == QB_INPUT) {
      const QBuf *o = &q->bufs.data[st->out];
      cg_printf(&hb, "/* input %d: q = clamp(round(x / scale) + zero_point, -128, 127) */\n", q->bufs.data[st->in].index);
      cg_printf(&hb, "#define %s_IN%d_SCALE %.9gf\n#define %s_IN%d_ZERO_POINT %d\n", U, q->bufs.data[st->in].index,
                (float)o->scale, U, q->bufs.data[st->in].index, (int)o->zp);
    }
    if (st->kind == QS_DEQUANTIZE && q->bufs.data[st->out].where == QB_OUTPUT) {
      const QBuf *i = &q->bufs.data[st->in];
      cg_printf(&hb, "/* output %d: y = (q - zero_point) * scale */\n", q->bufs.data[st->out].index);
      cg_printf(&hb, "#define %s_OUT%d_SCALE %.9gf\n#define %s_OUT%d_ZERO_POINT %d\n", U, q->bufs.data[st->out].index,
                (float)i->scale, U, q->bufs.data[st->out].index, (int)i->zp);
    }
  }
  cg_printf(&hb, "\ntypedef struct %s_t {\n  unsigned char *arena;  /* the int8 activations */\n  size_t arena_bytes;\n} %s_t;\n\n",
            P, P);
  cg_printf(&hb, "size_t %s_arena_bytes(void);\n", P);
  cg_printf(&hb, "/* Takes `arena` (at least %s_ARENA_BYTES bytes, 64-byte aligned; nothing is allocated). */\n", U);
  cg_printf(&hb, "int %s_init(%s_t *m, void *arena, size_t bytes);\n\n", P, P);
  cg_printf(&hb, "/* %s: float in, float out (quantized on entry, dequantized on exit); %d int8 layers. */\n%s;\n", f->name,
            nq, sig.s);
  if (!fs) cg_printf(&hb, "\n/* The model as the runtime sees it (ctc_main: ./%s infer ...). */\nextern const ctc_model_desc %s_desc;\n",
                     P, P);
  cg_puts(&hb, "\n#ifdef __cplusplus\n}\n#endif\n#endif\n");
  fputs(hb.s, h);
  cg_buf_free(&b);
  cg_buf_free(&hb);
  cg_buf_free(&sig);
  free(in_names);
  free(out_names);
  free(nb);
  return ferror(c) || ferror(h) ? -1 : 0;
}
