/* resample_c.c - the gradients of reflect/replicate padding (PAD_BWD) and of upsampling
 * (UPSAMPLE_BWD) as C loops (their forwards are kernel IR, kernels/kir_ops.c). Each has two
 * schedules of the same sums: on the C target a loop over g adding each element into the x
 * element the forward read it from (rows stream; parallel over images, or the unpadded
 * leading axes), on the GPU (CgFunc.target) a loop over dx's elements, each summing its terms
 * in that loop's order from compile-time tables of the positions that read it: the same
 * values bit for bit, a thread per element. */
#include <stdlib.h>
#include <string.h>
#include "ops_int.h"

/* Row-major "0 + i0 * 12 + i1 * 4 + i2 * 1" of index variables <v>0.. over t's dims. */
static void flat_index(char *buf, size_t cap, char v, const Type *t) {
  int64_t st[IR_MAX_DIMS];
  cstrides(t, st);
  int n = snprintf(buf, cap, "0");
  for (int k = 0; k < t->ndim; k++) n += snprintf(buf + n, cap - (size_t)n, " + %c%d * %lld", v, k, (ll)st[k]);
}

static void index_table(CgFunc *c, const char *name, const int64_t *v, int64_t n) {
  Buf b = {0};
  for (int64_t k = 0; k < n; k++) cg_printf(&b, "%s%lld", k ? (k % 16 ? ", " : ",\n    ") : "", (ll)v[k]);
  LINE(c, "static const int64_t %s[%lld] = {%s};\n", name, (ll)n, b.s);
  cg_buf_free(&b);
}

/* The loops of PAD and PAD_BWD over the padded shape p (i0, i1, ...), each with the
 * source index s<k> in x's shape along its axis: reflect and replicate map every
 * position into x; constant padding gives i - lo, which the caller checks. */
static void pad_loops(CgFunc *c, const Inst *in, const Type *x, const Type *p, unsigned par, int from) {
  int mode = (int)in->attr[0];
  for (int k = from; k < p->ndim; k++) {
    int64_t lo = in->attr[1 + k], X = x->dims[k];
    char var[16];
    snprintf(var, sizeof var, "i%d", k);
    if (k == from && par) {   /* par: cg_par_for's flags for the outer loop */
      cg_par_for(c, var, p->dims[k], par);
    } else {
      LINE(c, "for (int64_t i%d = 0; i%d < %lld; i%d++) {\n", k, k, (ll)p->dims[k], k);
      c->ind += 2;
    }
    if (lo == 0 && p->dims[k] == X) LINE(c, "const int64_t s%d = i%d;\n", k, k);
    else if (mode == 1)
      LINE(c, "const int64_t s%d = i%d < %lld ? %lld - i%d : i%d >= %lld ? %lld - i%d : i%d - %lld;\n", k, k, (ll)lo,
           (ll)lo, k, k, (ll)(lo + X), (ll)(2 * (X - 1) + lo), k, k, (ll)lo);
    else if (mode == 2)
      LINE(c, "const int64_t s%d = i%d < %lld ? 0 : i%d >= %lld ? %lld : i%d - %lld;\n", k, k, (ll)lo, k,
           (ll)(lo + X), (ll)(X - 1), k, (ll)lo);
    else LINE(c, "const int64_t s%d = i%d - %lld;\n", k, k, (ll)lo);
  }
}

static void pad_close(CgFunc *c, int nd, unsigned par) {
  for (int k = 0; k < nd; k++) {
    if (k == nd - 1 && par) {
      cg_par_end(c);
      continue;
    }
    c->ind -= 2;
    LINE(c, "}\n");
  }
}

/* Declares `const int64_t <v><d>` for each axis d of dims that take[d] selects, from the flat
 * index `var` running over those axes row-major (the last fastest); with_s: also `s<d> = i<d>`
 * (PAD's source index along an unpadded axis). */
static void unflatten(CgFunc *c, const char *var, int nd, const int64_t *dims, const unsigned char *take, char v,
                      int with_s) {
  int64_t total = 1, below = 1;
  for (int d = 0; d < nd; d++)
    if (take[d]) total *= dims[d];
  for (int d = nd - 1; d >= 0; d--) {
    if (!take[d]) continue;
    char sd[32] = "";
    if (with_s) snprintf(sd, sizeof sd, ", s%d = i%d", d, d);
    if (dims[d] == 1) LINE(c, "const int64_t %c%d = 0%s;\n", v, d, sd);
    else if (below == 1 && dims[d] == total) LINE(c, "const int64_t %c%d = %s%s;\n", v, d, var, sd);
    else if (below == 1) LINE(c, "const int64_t %c%d = %s %% %lld%s;\n", v, d, var, (ll)dims[d], sd);
    else if (below * dims[d] == total) LINE(c, "const int64_t %c%d = %s / %lld%s;\n", v, d, var, (ll)below, sd);
    else LINE(c, "const int64_t %c%d = %s / %lld %% %lld%s;\n", v, d, var, (ll)below, (ll)dims[d], sd);
    below *= dims[d];
  }
}

/* PAD_BWD on the C target: dx = 0; then each g element added into the x element PAD read it
 * from. The leading axes without padding (N and C of an image's H, W padding) are one loop
 * over disjoint slices of dx, each zeroed and then summed into: in parallel (OpenMP), each
 * element's sum in the order of the sequential loops. */
static void pad_bwd_scatter(CgFunc *c, const Inst *in) {
  const Type *g = ty(c, in->args[0]), *r = ty(c, in->res);
  char gi[IDX_CAP * 2], xi[IDX_CAP * 2];
  flat_index(gi, sizeof gi, 'i', g);
  flat_index(xi, sizeof xi, 's', r);
  int lead = 0;   /* the leading unpadded axes */
  int64_t n = 1;
  unsigned char take[IR_MAX_DIMS] = {0};
  while (lead < g->ndim && in->attr[1 + lead] == 0 && g->dims[lead] == r->dims[lead]) take[lead] = 1, n *= g->dims[lead++];
  if (n <= 1) lead = 0;   /* padding from the first axis: one sequential pass */
  const char *ct = cg_ctype(r->dtype), *dx = cg_ref(c, in->res);
  const int64_t slice = ir_numel(r) / n;
  int base = c->ind;
  if (lead) {   /* the slices of the unpadded leading axes */
    cg_par_for(c, "j", n, CG_PAR_GRID | (ir_numel(g) >= min_work(c) ? CG_PAR_OMP : 0));
    unflatten(c, "j", lead, g->dims, take, 'i', 1);
    LINE(c, "memset(%s + j * %lld, 0, sizeof(%s) * %lld);\n", dx, (ll)slice, ct, (ll)slice);
  } else {
    LINE(c, "memset(%s, 0, sizeof(%s) * %lld);\n", dx, ct, (ll)slice);
  }
  pad_loops(c, in, r, g, 0, lead);
  LINE(c, "%s[%s] += %s[%s];\n", dx, xi, cg_ref(c, in->args[0]), gi);
  pad_close(c, g->ndim - lead, 0);
  if (lead) cg_par_end(c);
  c->ind = base;
}

/* The position of x that PAD (mode 1 reflect, 2 replicate) reads for position i of its
 * output along an axis of size X padded by lo before it. */
static int64_t pad_source(int mode, int64_t i, int64_t lo, int64_t X) {
  if (i < lo) return mode == 1 ? lo - i : 0;
  if (i >= lo + X) return mode == 1 ? 2 * (X - 1) + lo - i : X - 1;
  return i - lo;
}

/* PAD_BWD on the GPU (g -> dx, reflect or replicate): for each padded axis k the positions of g
 * that PAD filled from each position s of x along it, ascending, as compile-time tables (pi<k>,
 * s's list from pa<k>[s] to pa<k>[s + 1]). Each dx element is a thread summing g over the
 * product of its axes' lists, in the order in which pad_bwd_scatter adds them: the same sums
 * bit for bit, every element in parallel (the scatter runs a thread per slice of the unpadded
 * leading axes, one where the first axis is padded). On the CPU the scatter, whose rows stream
 * and vectorise, is 2.5-4x faster than this (1 thread, [8, 32, 128, 128] padded by 1). */
static void pad_bwd_gather(CgFunc *c, const Inst *in) {
  const Type *g = ty(c, in->args[0]), *r = ty(c, in->res);
  const int mode = (int)in->attr[0], nd = r->ndim;
  const char *ct = cg_ctype(r->dtype);
  int padded[IR_MAX_DIMS] = {0};
  int base = c->ind;
  LINE(c, "{\n");
  c->ind += 2;
  for (int k = 0; k < nd; k++) {
    const int64_t lo = in->attr[1 + k], X = r->dims[k], P = g->dims[k];
    if (lo == 0 && P == X) continue;
    padded[k] = 1;
    int64_t *pa = calloc((size_t)(X + 1 + P), sizeof(int64_t));
    if (!pa) BUG("out of memory");
    int64_t *pi = pa + X + 1;
    for (int64_t i = 0; i < P; i++) pa[pad_source(mode, i, lo, X) + 1]++;
    for (int64_t x = 0; x < X; x++) pa[x + 1] += pa[x];
    int64_t *fill = calloc((size_t)X, sizeof(int64_t));
    if (!fill) BUG("out of memory");
    for (int64_t i = 0; i < P; i++) {
      const int64_t x = pad_source(mode, i, lo, X);
      pi[pa[x] + fill[x]++] = i;
    }
    char name[16];
    snprintf(name, sizeof name, "pa%d", k);
    index_table(c, name, pa, X + 1);
    snprintf(name, sizeof name, "pi%d", k);
    index_table(c, name, pi, P);
    free(fill);
    free(pa);
  }
  char gi[IDX_CAP * 2];
  flat_index(gi, sizeof gi, 'i', g);
  cg_par_for(c, "p", ir_numel(r), CG_PAR_GRID);
  unsigned char all[IR_MAX_DIMS];
  memset(all, 1, sizeof all);
  unflatten(c, "p", nd, r->dims, all, 's', 0);   /* x's position s<k> of element p */
  LINE(c, "%s acc = 0;\n", ct);
  int open = 0;
  for (int k = 0; k < nd; k++) {
    if (!padded[k]) {
      LINE(c, "const int64_t i%d = s%d;\n", k, k);
      continue;
    }
    LINE(c, "for (int64_t t%d = pa%d[s%d]; t%d < pa%d[s%d + 1]; t%d++) {\n", k, k, k, k, k, k, k);
    c->ind += 2;
    LINE(c, "const int64_t i%d = pi%d[t%d];\n", k, k, k);
    open++;
  }
  LINE(c, "acc += %s[%s];\n", cg_ref(c, in->args[0]), gi);
  for (; open > 0; open--) {
    c->ind -= 2;
    LINE(c, "}\n");
  }
  LINE(c, "%s[p] = acc;\n", cg_ref(c, in->res));
  cg_par_end(c);
  c->ind -= 2;
  LINE(c, "}\n");
  c->ind = base;
}

static void weight_table(CgFunc *c, const char *name, DType t, const double *v, int64_t n) {
  Buf b = {0};
  for (int64_t k = 0; k < n; k++) {
    if (k) cg_puts(&b, k % 8 ? ", " : ",\n    ");
    cg_literal(&b, t, v[k]);
  }
  LINE(c, "static const %s %s[%lld] = {%s};\n", cg_ctype(t), name, (ll)n, b.s);
  cg_buf_free(&b);
}

void cg_emit_pad_bwd(CgFunc *c, const Inst *in) {
  if (c->target) pad_bwd_gather(c, in);
  else pad_bwd_scatter(c, in);
}

/* For each source position s < n of an UPSAMPLE_BWD axis, the range [lo[s], hi[s]) of the
 * output positions whose reads (i0 and, bilinear, i1 of kir_upsample_axis) take s: a
 * monotone map's preimages, contiguous. A position no output reads gets an empty range. */
static void upsample_ranges(const int64_t *i0, const int64_t *i1, int64_t out, int64_t n, int64_t *lo, int64_t *hi) {
  for (int64_t s = 0; s < n; s++) lo[s] = out, hi[s] = 0;
  for (int64_t o = 0; o < out; o++)
    for (int k = 0; k < (i1 ? 2 : 1); k++) {
      const int64_t s = k ? i1[o] : i0[o];
      if (o < lo[s]) lo[s] = o;
      if (o + 1 > hi[s]) hi[s] = o + 1;
    }
  for (int64_t s = 0; s < n; s++)
    if (hi[s] < lo[s]) lo[s] = hi[s] = 0;
  for (int64_t s = 0; s < n && !i1; s++)   /* nearest: the loop adds every output of the range */
    for (int64_t o = lo[s]; o < hi[s]; o++)
      if (i0[o] != s) BUG("upsample_bwd: a nearest source map that is not monotone");
}

/* UPSAMPLE_BWD (g -> dx; the forward is kernel IR, kernels/kir_ops.c): the index and weight
 * tables of both axes are computed at compile time (kir_upsample_axis) and written as static
 * arrays. On the C target the loops add each g element into its source pixels, image by image
 * (each image's slice written by one thread). On the GPU (c->target) each dx element is a
 * thread that sums the terms the forward's reads of it give, over the ranges of output rows
 * and columns that read it (tables too), in the order in which the C loops add them (the row,
 * then the column, then the bilinear terms in order): the same sums bit for bit, every element
 * in parallel. On a CPU that gather is 1.5-3x slower than the C loops (1 thread, [8, 64, 64,
 * 64] upsampled 2x). */
void cg_emit_upsample_bwd(CgFunc *c, const Inst *in) {
  const Type *small = ty(c, in->res), *big = ty(c, in->args[0]);
  DType t = big->dtype;
  const char *ct = cg_ctype(t);
  const int mode = (int)in->attr[0], align = (int)in->attr[1], gather = c->target != NULL;
  int64_t NC = small->dims[0] * small->dims[1], H = small->dims[2], W = small->dims[3], OH = big->dims[2],
          OW = big->dims[3];
  int64_t *ih0 = calloc((size_t)(2 * OH + 2 * OW + 2 * H + 2 * W), sizeof(int64_t));
  double *lh = calloc((size_t)(2 * OH + 2 * OW), sizeof(double));
  if (!ih0 || !lh) BUG("out of memory");
  int64_t *ih1 = ih0 + OH, *iw0 = ih0 + 2 * OH, *iw1 = iw0 + OW;
  int64_t *ah = iw1 + OW, *bh = ah + H, *aw = bh + H, *bw = aw + W;
  double *lh0 = lh, *lh1 = lh + OH, *lw0 = lh + 2 * OH, *lw1 = lw0 + OW;
  kir_upsample_axis(mode, align, attr_double(in->attr[2]), H, OH, t, 1, ih0, ih1, lh0, lh1);
  kir_upsample_axis(mode, align, attr_double(in->attr[3]), W, OW, t, 1, iw0, iw1, lw0, lw1);
  int base = c->ind;
  LINE(c, "{\n");
  c->ind += 2;
  if (mode == 1 || !gather) {   /* (the gather's nearest: its ranges say it all) */
    index_table(c, "uh0", ih0, OH);
    index_table(c, "uw0", iw0, OW);
  }
  if (mode == 1) {
    index_table(c, "uh1", ih1, OH);
    index_table(c, "uw1", iw1, OW);
    weight_table(c, "lh0", t, lh0, OH);
    weight_table(c, "lh1", t, lh1, OH);
    weight_table(c, "lw0", t, lw0, OW);
    weight_table(c, "lw1", t, lw1, OW);
  }
  const char *xs = cg_ref(c, in->args[0]), *ys = cg_ref(c, in->res);
  if (gather) {
    upsample_ranges(ih0, mode == 1 ? ih1 : NULL, OH, H, ah, bh);
    upsample_ranges(iw0, mode == 1 ? iw1 : NULL, OW, W, aw, bw);
    index_table(c, "ah", ah, H);   /* input row ih: output rows [ah[ih], bh[ih]) read it */
    index_table(c, "bh", bh, H);
    index_table(c, "aw", aw, W);
    index_table(c, "bw", bw, W);
    cg_par_for(c, "p", NC * H * W, CG_PAR_GRID);
    LINE(c, "const int64_t ih = p / %lld %% %lld, iw = p %% %lld;\n", (ll)W, (ll)H, (ll)W);
    LINE(c, "const %s *gp = %s + p / %lld * %lld;\n", ct, xs, (ll)(H * W), (ll)(OH * OW));
    LINE(c, "%s acc = 0;\n", ct);
    LINE(c, "for (int64_t oh = ah[ih]; oh < bh[ih]; oh++) {\n");
    c->ind += 2;
    LINE(c, "for (int64_t ow = aw[iw]; ow < bw[iw]; ow++) {\n");
  } else {
    cg_par_for(c, "nc", NC, CG_PAR_GRID | (ir_numel(big) >= min_work(c) ? CG_PAR_OMP : 0));
    LINE(c, "const %s *gp = %s + nc * %lld;\n", ct, xs, (ll)(OH * OW));
    LINE(c, "%s *dp = %s + nc * %lld;\n", ct, ys, (ll)(H * W));
    LINE(c, "for (int64_t i = 0; i < %lld; i++) dp[i] = 0;\n", (ll)(H * W));
    LINE(c, "for (int64_t oh = 0; oh < %lld; oh++) {\n", (ll)OH);
    c->ind += 2;
    LINE(c, "for (int64_t ow = 0; ow < %lld; ow++) {\n", (ll)OW);
  }
  c->ind += 2;
  LINE(c, "const %s gv = gp[oh * %lld + ow];\n", ct, (ll)OW);
  static const char *const terms[4][3] = {{"uh0", "uw0", "lh0[oh] * lw0[ow]"}, {"uh0", "uw1", "lh0[oh] * lw1[ow]"},
                                          {"uh1", "uw0", "lh1[oh] * lw0[ow]"}, {"uh1", "uw1", "lh1[oh] * lw1[ow]"}};
  if (mode == 0 && gather) LINE(c, "acc += gv;\n");
  else if (mode == 0) LINE(c, "dp[uh0[oh] * %lld + uw0[ow]] += gv;\n", (ll)W);
  for (int q = 0; q < 4 && mode == 1; q++) {   /* the four reads of output (oh, ow), in their order */
    if (gather)   /* (border reads may take ih, or iw, twice) */
      LINE(c, "if (%s[oh] == ih && %s[ow] == iw) acc += %s * gv;\n", terms[q][0], terms[q][1], terms[q][2]);
    else LINE(c, "dp[%s[oh] * %lld + %s[ow]] += %s * gv;\n", terms[q][0], (ll)W, terms[q][1], terms[q][2]);
  }
  c->ind -= 2;
  LINE(c, "}\n");
  c->ind -= 2;
  LINE(c, "}\n");
  if (gather) LINE(c, "%s[p] = acc;\n", ys);
  cg_par_end(c);
  c->ind -= 2;
  LINE(c, "}\n");
  c->ind = base;
  free(ih0);
  free(lh);
}
