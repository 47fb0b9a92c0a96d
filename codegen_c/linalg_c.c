/* linalg_c.c - the kernel IR's GEMM and convolution calls as C (kernels/gemm.c, conv.c;
 * render_c.c's call of KS_CALL): GEMMs as ctc_matmul calls, one over the whole batch in the
 * rows, a loop over the batch, or a flat parallel loop where an operand is a folded view;
 * convolutions directly, per channel (depthwise), as one GEMM (pointwise) or over tiles of the
 * batch as im2col/col2im and GEMMs; a KN_GEMM kernel as each thread's block of its GEMM and
 * then its epilogue's kernel IR over that block. GEMMs call cblas (-DCTC_HAVE_CBLAS) or the
 * portable kernels of kernels.c. Convolutions' gradients run over tiles of the batch
 * (emit_conv2d_tiled): CONV2D_BWD_INPUT is a GEMM w^T g into the tile's columns, then col2im
 * (scatter-add); CONV2D_BWD_WEIGHT is im2col of the tile, then a GEMM g col^T accumulated over
 * the tiles (beta = 1 from the second tile on); depthwise ones are direct loops (kernels.c). */
#include <stdlib.h>
#include <string.h>
#include "ops_int.h"

/* ---- matmul and convolution ------------------------------------------------------ */

/* The function a GEMM of dtype t calls: ctc_matmul_<dt> for f32/f64 (OpenBLAS, threads split
 * by ctc; or the portable GEMM), ctc_matmul_bf16 for f32 operands that both hold bf16 values
 * (low == 1: AVX-512 BF16 where the compiler targets it), ctc_gemm_<dt> for the others. */
static const char *gemm_fn(CgFunc *c, DType t, int low) {
  static const char *const fn[DT_COUNT] = {[DT_F32] = "ctc_matmul_f32", [DT_F64] = "ctc_matmul_f64",
                                           [DT_I64] = "ctc_gemm_i64", [DT_I32] = "ctc_gemm_i32"};
  c->k->gemm[t] = 1;
  if (t == DT_F32 && low == 1) {   /* (not ctc_matmul_f32 itself: unused, -Werror refused it) */
    c->k->gemm_bf16 = c->k->matmul_bf16 = 1;
    return "ctc_matmul_bf16";
  }
  c->k->matmul[t] = 1;
  if (!fn[t]) BUG("gemm_fn: no GEMM of %s", ir_dtype_name(t));
  return fn[t];
}

/* One GEMM call: c[M,N] = op(a) op(b), pointers as C text. acc: NULL (overwrite c)
 * or a C condition under which c is accumulated into instead (c += ...). */
static void gemm_call(CgFunc *c, DType t, int low, int ta, int tb, int64_t M, int64_t N, int64_t K, const char *pa,
                      int64_t lda, const char *pb, int64_t ldb, const char *pc, int64_t ldc, const char *acc) {
  LINE(c, "%s(%d, %d, %s, %lld, %lld, %lld, %s, %lld, %s, %lld, %s, %lld);\n", gemm_fn(c, t, low), ta, tb,
       acc ? acc : "0", (ll)M, (ll)N, (ll)K, pa, (ll)lda, pb, (ll)ldb, pc, (ll)ldc);
}

/* The weight GEMM instruction i reads as op(B) with these transposes and sizes, packed before
 * the time loop it is in (CgFunc.packed, kernels/prepack.c), or NULL. */
static const CgPacked *packed_b(const CgFunc *c, int i, int ta, int tb, int64_t N, int64_t K, int64_t ldb) {
  const CgPacked *q = c->packed && c->over ? &c->packed[i] : NULL;
  if (!q || !q->name) return NULL;
  const KnPack *pk = q->pk;
  return pk->ta == ta && pk->tb == tb && pk->N == N && pk->K == K && pk->ldb == ldb ? q : NULL;
}

typedef struct MatU {
  const Inst *in;
  int64_t M, N, K, lda, ldb;
  ValId a, b;      /* the arrays the operands are read from (a folded view's root) */
  int ta, tb;      /* BLAS transposes */
  int low;         /* KirCall.low */
} MatU;

static void matmul_body(CgFunc *c, char idx[][IDX_CAP], void *up) {
  MatU *u = up;
  const Inst *in = u->in;
  Buf pa = {0}, pb = {0}, pc = {0};
  cg_ptr_at(c, &pc, in->res, idx[0]);
  cg_ptr_at(c, &pa, u->a, idx[1]);
  cg_ptr_at(c, &pb, u->b, idx[2]);
  const CgPacked *q = packed_b(c, (int)(in - c->f->insts.data), u->ta, u->tb, u->N, u->K, u->ldb);
  if (q)   /* a time loop's weight, its panels packed before the loop */
    LINE(c, "ctc_matmul_pk_f32(%d, %d, 0, %lld, %lld, %lld, %s, %lld, %s, %lld, %s, %lld, %s, %lld);\n", u->ta, u->tb,
         (ll)u->M, (ll)u->N, (ll)u->K, pa.s, (ll)u->lda, pb.s, (ll)u->ldb, q->name, (ll)q->pk->ldp, pc.s, (ll)u->N);
  else
    gemm_call(c, ty(c, in->res)->dtype, u->low, u->ta, u->tb, u->M, u->N, u->K, pa.s, u->lda, pb.s, u->ldb, pc.s, u->N,
              NULL);
  cg_buf_free(&pa);
  cg_buf_free(&pb);
  cg_buf_free(&pc);
}

/* A GEMM's call (kernels/gemm.c's KirCall) as C, the render_c.c table's call for "gemm".
 * Operands read through a folded view (a slice of the fused q/k/v projection, a head
 * transpose): each at its own name (a view's pointer is its root's) plus its layout's offset,
 * which a time loop moves (the slice of step t is step 0's moved t steps on); the batch as
 * one loop over all its GEMMs (B*H shared by the threads even when B alone is small), its
 * index split into the batch axes. Otherwise a loop nest over the batch axes, or, when b is
 * shared by the whole batch and a is not transposed, one GEMM with the batch in the rows. */
void cg_render_gemm_c(CgRender *r, const KirStmt *st) {
  CgFunc *c = r->c;
  const KirCall *g = st->call;
  const Inst *in = st->in;
  const Type *res = ty(c, in->res);
  MatU u = {in, g->ints[2], g->ints[3], g->ints[4], g->ints[5], g->ints[6], g->vals[0], g->vals[1], (int)g->ints[0],
            (int)g->ints[1], g->low};
  Type br = *res;
  br.ndim -= 2;
  Acc acc[3];
  memset(acc, 0, sizeof acc);
  for (int j = 0; j < 3; j++) {
    if (j && g->folded) acc[j].off = g->off[j - 1];
    for (int k = 0; k < br.ndim; k++) acc[j].st[k] = g->bst[j][k];
  }
  int64_t work = u.M * u.N * u.K;
  if (!g->folded) {
    const Type *a = ty(c, in->args[0]), *b = ty(c, in->args[1]);
    Type ba = *a, bb = *b;
    ba.ndim -= 2, bb.ndim -= 2;
    if (!u.ta && ir_numel(&bb) == 1 && ir_numel(&ba) == ir_numel(&br)) {
      /* b is shared by the whole batch and a is not transposed: one GEMM with the batch
       * folded into the rows. */
      u.M *= ir_numel(&br);
      char idx[3][IDX_CAP] = {"0", "0", "0"};
      matmul_body(c, idx, &u);
      return;
    }
    /* a batch of GEMMs: one per thread at a time (ctc_matmul is one call inside a parallel loop) */
    cg_nest(c, br.ndim, br.dims, 3, acc, matmul_body, &u, work >= 32768 ? NEST_OMP_ALWAYS : 0, 1);
    return;
  }
  int64_t total = ir_numel(&br);
  if (br.ndim <= 1 || total <= 1) {
    cg_nest(c, br.ndim, br.dims, 3, acc, matmul_body, &u, work >= 32768 ? NEST_OMP_ALWAYS : 0, 1);
    return;
  }
  char var[IR_MAX_DIMS][16], idx[3][IDX_CAP];
  Buf split = {0};
  int64_t inner = 1;
  for (int k = br.ndim - 1; k >= 0; k--) {
    snprintf(var[k], sizeof var[k], "i%d", k);
    char e[96];
    if (k == 0) snprintf(e, sizeof e, "i / %lld", (ll)inner);
    else if (inner == 1) snprintf(e, sizeof e, "i %% %lld", (ll)br.dims[k]);
    else snprintf(e, sizeof e, "i / %lld %% %lld", (ll)inner, (ll)br.dims[k]);
    cg_printf(&split, "%s%s = %s", k == br.ndim - 1 ? "" : ", ", var[k], e);
    inner *= br.dims[k];
  }
  for (int j = 0; j < 3; j++) cg_index_expr(idx[j], IDX_CAP, br.ndim, var, acc[j].off, acc[j].st);
  int par = work >= 32768;
  if (par && (res->dtype == DT_F32 || res->dtype == DT_F64)) LINE(c, "ctc_blas_threads_%s();\n", cg_dt_suffix(res->dtype));
  cg_par_open(c, par ? CG_PAR_OMP : 0);
  LINE(c, "for (int64_t i = 0; i < %lld; i++) {\n", (ll)total);
  c->ind += 2;
  LINE(c, "const int64_t %s;\n", split.s);
  matmul_body(c, idx, &u);
  c->ind -= 2;
  LINE(c, "}\n");
  cg_par_close(c);
  cg_buf_free(&split);
}

/* "ctc_im2col_f32(x, C, H, W, ...)" or col2im: the unfold/fold kernel call
 * (im2col with the row stride ldc of its columns). */
static void fold_call(CgFunc *c, const char *kernel, DType t, const ConvGeom *g, const char *from,
                      const char *to, int64_t ldc) {
  char ld[32] = "";
  if (ldc) snprintf(ld, sizeof ld, ", %lld", (ll)ldc);
  LINE(c, "ctc_%s_%s(%s, %lld, %lld, %lld, %lld, %lld, %lld, %lld, %lld, %lld, %lld, %lld, %lld, %lld, %s%s);\n", kernel,
       cg_dt_suffix(t), from, (ll)g->Cg, (ll)g->H, (ll)g->W, (ll)g->KH, (ll)g->KW, (ll)g->sh, (ll)g->sw,
       (ll)g->ph, (ll)g->pw, (ll)g->dh, (ll)g->dw, (ll)g->OH, (ll)g->OW, to, ld);
}

/* "p" or "p + n * 12" or "p + n * 12 + grp * 4": v's slice for image n (when
 * there are several) and group grp (when there are several). */
static void image_ptr_g(CgFunc *c, char *buf, size_t cap, ValId v, int64_t N, int64_t stride, int64_t G,
                        int64_t gstride) {
  int k = snprintf(buf, cap, "%s", cg_ref(c, v));
  if (N > 1) k += snprintf(buf + k, cap - (size_t)k, " + n * %lld", (ll)stride);
  if (G > 1) snprintf(buf + k, cap - (size_t)k, " + grp * %lld", (ll)gstride);
}

/* for n { for grp { ... } }, each loop only where it has several iterations */
static void open_batch(CgFunc *c, const ConvGeom *g) {
  if (g->N > 1) {
    LINE(c, "for (int64_t n = 0; n < %lld; n++) {\n", (ll)g->N);
    c->ind += 2;
  }
  if (g->G > 1) {
    LINE(c, "for (int64_t grp = 0; grp < %lld; grp++) {\n", (ll)g->G);
    c->ind += 2;
  }
}

static void close_batch(CgFunc *c, const ConvGeom *g) {
  for (int k = (g->N > 1) + (g->G > 1); k > 0; k--) {
    c->ind -= 2;
    LINE(c, "}\n");
  }
}

/* The copies between the images' output-side rows (ymem: image n0 + s's, "o" its row)
 * and the tile's ys[O, L] (to_tile: ys = images), in parallel over the rows. */
static void copy_rows(CgFunc *c, const ConvGeom *g, const char *ct, const char *ymem, const char *ys, int64_t L,
                      int to_tile) {
  cg_par_open(c, CG_PAR_OMP);
  LINE(c, "for (int64_t q = 0; q < ns * %lld; q++) {   /* (image s, row o) */\n", (ll)g->O);
  c->ind += 2;
  LINE(c, "const int64_t s = q / %lld, o = q %% %lld;\n", (ll)g->O, (ll)g->O);
  if (to_tile)
    LINE(c, "memcpy(%s + o * %lld + s * %lld, %s + o * %lld, %lld * sizeof(%s));\n", ys, (ll)L, (ll)g->ohw, ymem,
         (ll)g->ohw, (ll)g->ohw, ct);
  else
    LINE(c, "memcpy(%s + o * %lld, %s + o * %lld + s * %lld, %lld * sizeof(%s));\n", ymem, (ll)g->ohw, ys, (ll)L,
         (ll)g->ohw, (ll)g->ohw, ct);
  c->ind -= 2;
  LINE(c, "}\n");
  cg_par_close(c);
}

/* The loop over tiles of S of the batch's N images, n0 the first and ns the count (one block when
 * S covers the batch); the caller closes it. */
static void open_tiles(CgFunc *c, int64_t N, int64_t S) {
  if (S < N) {
    LINE(c, "for (int64_t n0 = 0; n0 < %lld; n0 += %lld) {   /* tiles of %lld image%s */\n", (ll)N, (ll)S, (ll)S,
         S > 1 ? "s" : "");
    c->ind += 2;
    LINE(c, "const int64_t ns = %lld - n0 < %lld ? %lld - n0 : %lld;\n", (ll)N, (ll)S, (ll)N, (ll)S);
  } else {
    LINE(c, "{   /* the whole batch in one tile */\n");
    c->ind += 2;
    LINE(c, "const int64_t n0 = 0, ns = %lld;\n", (ll)N);
  }
}

/* Convolutions over tiles of the batch: S images at a time (S = ir_conv_slots:
 * their columns fit the scratch), their column matrices side by side in
 * col[C*KH*KW, L] (L = S*OH*OW, image s's columns from s*OH*OW on; group grp's
 * rows from grp*Cg*KH*KW on), so that each tile and group is one GEMM with
 * ns*OH*OW columns (ns: the images in the tile). With one group ctc_matmul
 * splits it over the threads (a column's sum runs over k in the same order
 * whatever the split); with several, the groups' GEMMs run in parallel, each
 * whole on one thread: results do not depend on the thread count. Unfolding,
 * folding and the copies between the images' layout and the tile's run in
 * parallel over (image, channel) pairs. The C target's tiles are at most 1 MiB
 * of columns (they stay in the cache) unless that is under 128 columns. After col, the scratch holds ys[O, L], the
 * tile's outputs (forward) or output gradients (backward); with one image a
 * tile, the GEMMs read and write the image's own rows instead:
 *   CONV2D:            col = im2col(x tile); ys[grp] = w[grp] col[grp]; y = ys, image by image
 *   CONV2D_BWD_INPUT:  ys = g tile; col[grp] = w[grp]^T ys[grp]; dx = col2im(col), image by image
 *   CONV2D_BWD_WEIGHT: col = im2col(x tile), ys = g tile; dw[grp] = (dw[grp] +) ys[grp] col[grp]^T */
static void emit_conv2d_tiled(CgFunc *c, int i, const Inst *in, const ConvGeom *geo, int low) {
  DType t = ty(c, in->res)->dtype;
  const char *ct = cg_ctype(t), *scratch = c->sname[i];
  ConvGeom g = *geo;
  int64_t S = ir_conv_slots(c->f, in), L = S * g.ohw, CHW = g.C * g.H * g.W, OHW = g.O * g.ohw;
  const char *img, *out, *w;   /* the image-side array (x or dx), the output-side one (y or g), the weights */
  switch (in->op) {
  case IR_CONV2D: img = cg_ref(c, in->args[0]), w = cg_ref(c, in->args[1]), out = cg_ref(c, in->res); break;
  case IR_CONV2D_BWD_INPUT: out = cg_ref(c, in->args[0]), w = cg_ref(c, in->args[1]), img = cg_ref(c, in->res); break;
  default: img = cg_ref(c, in->args[0]), out = cg_ref(c, in->args[1]), w = cg_ref(c, in->res); break;
  }
  int fwd = in->op == IR_CONV2D, bin = in->op == IR_CONV2D_BWD_INPUT, wt = ir_conv_wgrad_t(c->f, in);
  int base = c->ind;
  const char *mm = gemm_fn(c, t, low);
  if (bin) c->k->col2im[t] = 1;
  else c->k->im2col[t] = 1;
  char dwt[IDX_CAP];   /* the transposed weight gradient's dW^T [ckk, O]: after the tile's outputs ys */
  snprintf(dwt, sizeof dwt, "%s + %lld", scratch, (ll)(g.ckk * L + (S > 1 ? g.O * L : 0)));
  open_tiles(c, g.N, S);
  char ys[IDX_CAP], ymem[IDX_CAP], unfold[IDX_CAP], col[IDX_CAP];
  snprintf(ymem, sizeof ymem, "%s + (n0 + s) * %lld", out, (ll)OHW);   /* image n0 + s's output-side rows */
  if (S > 1) snprintf(ys, sizeof ys, "%s + %lld", scratch, (ll)(g.C * g.KH * g.KW * L));
  else snprintf(ys, sizeof ys, "%s + n0 * %lld", out, (ll)OHW);   /* one image a tile: its own rows */
  snprintf(unfold, sizeof unfold, "%s + (n0 + s) * %lld + ci * %lld", img, (ll)CHW, (ll)(g.H * g.W));
  snprintf(col, sizeof col, "%s + s * %lld + ci * %lld", scratch, (ll)g.ohw, (ll)(g.KH * g.KW * L));
  ConvGeom one = g;   /* im2col and col2im of one channel: its KH*KW rows of the columns */
  one.Cg = 1;
  /* before the GEMMs: unfold the tile's images, copy their output gradients; in
   * parallel over (image, channel) pairs (a channel's rows are unfolded alone) */
  if (!bin) {
    cg_par_open(c, CG_PAR_OMP);
    LINE(c, "for (int64_t q = 0; q < ns * %lld; q++) {   /* (image s, channel ci) */\n", (ll)g.C);
    c->ind += 2;
    LINE(c, "const int64_t s = q / %lld, ci = q %% %lld;\n", (ll)g.C, (ll)g.C);
    fold_call(c, "im2col", t, &one, unfold, col, L);
    c->ind -= 2;
    LINE(c, "}\n");
    cg_par_close(c);
  }
  if (!fwd && S > 1) copy_rows(c, &g, ct, ymem, ys, L, 1);
  char wg[IDX_CAP + 48], cg[IDX_CAP + 48], yg[IDX_CAP + 48];
  if (g.G > 1) {
    cg_par_open(c, CG_PAR_OMP);
    LINE(c, "for (int64_t grp = 0; grp < %lld; grp++)   /* each group's GEMM whole on one thread */\n", (ll)g.G);
    c->ind += 2;
    snprintf(wg, sizeof wg, "%s + grp * %lld", w, (ll)(g.Og * g.ckk));
    snprintf(cg, sizeof cg, "%s + grp * %lld", scratch, (ll)(g.ckk * L));
    snprintf(yg, sizeof yg, "%s + grp * %lld", ys, (ll)(g.Og * L));
  } else {
    snprintf(wg, sizeof wg, "%s", w);
    snprintf(cg, sizeof cg, "%s", scratch);
    snprintf(yg, sizeof yg, "%s", ys);
  }
  if (fwd)
    LINE(c, "%s(0, 0, 0, %lld, ns * %lld, %lld, %s, %lld, %s, %lld, %s, %lld);\n", mm, (ll)g.Og, (ll)g.ohw,
         (ll)g.ckk, wg, (ll)g.ckk, cg, (ll)L, yg, (ll)L);
  else if (bin)
    LINE(c, "%s(1, 0, 0, %lld, ns * %lld, %lld, %s, %lld, %s, %lld, %s, %lld);\n", mm, (ll)g.ckk, (ll)g.ohw,
         (ll)g.Og, wg, (ll)g.ckk, yg, (ll)L, cg, (ll)L);
  else if (wt)   /* dW^T += col g^T: only g is repacked, its panels reused over all ckk rows */
    LINE(c, "%s(0, 1, n0 > 0, %lld, %lld, ns * %lld, %s, %lld, %s, %lld, %s, %lld);\n", mm, (ll)g.ckk, (ll)g.O,
         (ll)g.ohw, cg, (ll)L, yg, (ll)L, dwt, (ll)g.O);
  else
    LINE(c, "%s(0, 1, n0 > 0, %lld, %lld, ns * %lld, %s, %lld, %s, %lld, %s, %lld);\n", mm, (ll)g.Og,
         (ll)g.ckk, (ll)g.ohw, yg, (ll)L, cg, (ll)L, wg, (ll)g.ckk);
  if (g.G > 1) cg_par_close(c);
  /* after them: fold the columns into the images (channel by channel, in parallel),
   * copy the outputs to theirs */
  if (bin) {
    cg_par_open(c, CG_PAR_OMP);
    LINE(c, "for (int64_t q = 0; q < ns * %lld; q++) {   /* (image s, channel ci) */\n", (ll)g.C);
    c->ind += 2;
    LINE(c, "const int64_t s = q / %lld, ci = q %% %lld;\n", (ll)g.C, (ll)g.C);
    fold_call(c, "col2im", t, &one, col, unfold, L);
    c->ind -= 2;
    LINE(c, "}\n");
    cg_par_close(c);
  }
  if (fwd && S > 1) copy_rows(c, &g, ct, ymem, ys, L, 0);
  while (c->ind > base) {
    c->ind -= 2;
    LINE(c, "}\n");
  }
  if (wt) {   /* dW = (dW^T)^T, 16 output channels at a time */
    cg_par_open(c, CG_PAR_OMP);
    LINE(c, "for (int64_t o0 = 0; o0 < %lld; o0 += 16)   /* dW^T's columns o0..o0+15 */\n", (ll)g.O);
    LINE(c, "  for (int64_t r = 0; r < %lld; r++)\n", (ll)g.ckk);
    LINE(c, "    for (int64_t o = o0; o < o0 + 16 && o < %lld; o++) %s[o * %lld + r] = (%s)[r * %lld + o];\n", (ll)g.O, w,
         (ll)g.ckk, dwt, (ll)g.O);
    cg_par_close(c);
  }
}

/* The scratch bytes a convolution written as an implicit GEMM needs (emit_conv2d_implicit):
 * forward: none in f32 (the tiles read the weights), the packed weights in bf16
 * (ctc_pack_w_bf16's rows); input gradient: the weights' reversed taps (f32) or their packed
 * rows (bf16); weight gradient: dW^T. */
static int64_t implicit_bytes(const Inst *in, const ConvGeom *g, int bf16) {
  const int64_t kk = g->KH * g->KW;
  if (in->op == IR_CONV2D_BWD_WEIGHT) return g->C * kk * g->O * 4;
  if (!bf16) return in->op == IR_CONV2D ? 0 : g->C * g->O * kk * 4;
  const int64_t M = in->op == IR_CONV2D ? g->O : g->C, K = in->op == IR_CONV2D ? g->C * kk : g->O * kk;
  return M * ((K + 1) / 2 + 15) / 16 * 16 * 4;
}

/* Whether a tiled f32 convolution is written as an implicit GEMM for AVX-512, AVX2 or NEON (gemm_simd_c.c's
 * ctc_conv_pix_f32: forward and input gradient; of bf16 values, KirCall.low, for AVX-512 BF16:
 * ctc_conv_pix_bf16 and the weight gradient's ctc_conv_wgrad_bf16): on the hosted C target,
 * stride 1, no dilation, one group, an output the size of the input (which makes the input
 * gradient a convolution of the same kind, padded KH - 1 - ph), images of a multiple of 16
 * pixels, at most 64 taps, and what it keeps fitting in the tiles' scratch. */
static int conv_implicit(const CgFunc *c, int i, const Inst *in, const ConvGeom *g, int low) {
  if (low == 1 && g->sh == 2 && !c->target && !c->k->freestanding && c->sname[i])   /* (emit_conv_bat's alone) */
    return ir_conv_bat_bytes(c->f, in) > 0;
  return ty(c, in->res)->dtype == DT_F32 && (low == 1 || in->op != IR_CONV2D_BWD_WEIGHT) && !c->target &&
         !c->k->freestanding && c->sname[i] && g->G == 1 && g->sh == 1 && g->sw == 1 && g->dh == 1 && g->dw == 1 &&
         g->OH == g->H && g->OW == g->W &&
         g->KH * g->KW <= 64 && g->KH - 1 == 2 * g->ph && g->KW - 1 == 2 * g->pw && g->H * g->W % 16 == 0 &&
         implicit_bytes(in, g, low == 1) <= ir_scratch_bytes(c->f, in);
}

/* n * N rounded up to 32 images' multiple, as C: a number, or at a batch chosen at run time the
 * expression (batch_merge's forms are affine in N) */
static void bat_size(CgFunc *c, char *buf, size_t cap, int64_t N, int64_t n) {
  if (c->f->batch_max) snprintf(buf, cap, "(%lld + 31) / 32 * %lld", (ll)N, (ll)n);
  else snprintf(buf, cap, "%lld", (ll)((N + 31) / 32 * n));
}

/* A parallel loop over [0, n) in steps of `step` (a number, or a macro of the header):
 * `fn(pre, r, r + step (or n), post);` (pre and post: the call's other arguments, "" for none) */
static void bat_loop_s(CgFunc *c, int64_t n, const char *step, const char *fn, const char *pre, const char *post) {
  const int one = !strcmp(step, "1");
  cg_par_open(c, CG_PAR_OMP);
  LINE(c, "for (int64_t r = 0; r < %lld; %s)\n", (ll)n, one ? "r++" : arena_printf(c->p->arena, "r += %s", step));
  if (one)
    LINE(c, "  %s(%sr, r + 1%s);\n", fn, pre, post);
  else
    LINE(c, "  %s(%sr, r + %s < %lld ? r + %s : %lld%s);\n", fn, pre, step, (ll)n, step, (ll)n, post);
  cg_par_close(c);
}
static void bat_loop(CgFunc *c, int64_t n, int64_t step, const char *fn, const char *pre, const char *post) {
  bat_loop_s(c, n, arena_printf(c->p->arena, "%lld", (ll)step), fn, pre, post);
}

/* A stride-1 convolution of bf16 values (or its input gradient, fwd 0) as ir_conv_bat_bytes
 * allows: a GEMM per output position over panels of 32 images (conv_bat_c.c), each tap's weights,
 * the input and the output laid out by position in the scratch, in parallel over the taps'
 * weights' rows, the pairs of input channels, the output positions, then the output channels.
 * With a batch chosen at run time, under `if (N % 32 == 0)`, left open for the implicit GEMM's
 * else branch; the sizes that depend on N are computed from it in the C (batch_merge's forms). */
static void emit_conv_bat(CgFunc *c, const Inst *in, const ConvGeom *g, int fwd, const char *scratch) {
  Arena *A = c->p->arena;
  const int64_t N = g->N, HW = g->H * g->W, OHW = g->OH * g->OW, kk = g->KH * g->KW, M = fwd ? g->O : g->C;
  const int64_t Cin = fwd ? g->C : g->O;
  const int64_t Cq = (Cin + 1) / 2, wq = (Cq + 15) / 16 * 16;
  const char *x = cg_ref(c, in->args[0]), *w = cg_ref(c, in->args[1]), *y = cg_ref(c, in->res);
  if (c->f->batch_max) LINE(c, "if (%lld %% 32 == 0) {   /* a GEMM per output position over 32 images */\n", (ll)N);
  c->ind += c->f->batch_max ? 2 : 0;
  LINE(c, "/* each tap's weights [%lld, %lld, %lld] (bf16 pairs of channels), then the input [%lld, nb, %lld, 32] and\n",
       (ll)kk, (ll)M, (ll)wq, (ll)HW, (ll)Cq);
  LINE(c, " * output [%lld, nb, %lld, 32] by position, nb panels of 32 images: the taps in the padding skipped */\n",
       (ll)OHW, (ll)M);
  LINE(c, "ctc_bf16x2 *wt = (ctc_bf16x2 *)%s, *xb = wt + %lld;\n", scratch, (ll)(kk * M * wq));
  char xbn[64];
  bat_size(c, xbn, sizeof xbn, N, HW * Cq * 32);
  LINE(c, "float *yb = (float *)(xb + %s);\n", xbn);
  bat_loop(c, M, 16, "ctc_bat_w_bf16",
           arena_printf(A, "%s, %d, %lld, %lld, %lld, %lld, ", w, !fwd, (ll)M, (ll)Cin, (ll)kk, (ll)wq), ", wt");
  bat_loop(c, Cq, 4, "ctc_bat_in_bf16", arena_printf(A, "%s, %lld, %lld, %lld, ", x, (ll)N, (ll)Cin, (ll)HW), ", xb");
  bat_loop(c, OHW, 1, "ctc_conv_bat_bf16",
           arena_printf(A, "wt, %lld, xb, %lld, %lld, %lld, %lld, %lld, %lld, %lld, %lld, %lld, %lld, %lld, yb, ",
                        (ll)wq, (ll)N, (ll)Cq, (ll)M, (ll)g->H, (ll)g->W, (ll)g->OW, (ll)g->sh, (ll)g->KH, (ll)g->KW,
                        (ll)(fwd ? g->ph : g->KH - 1 - g->ph), (ll)(fwd ? g->pw : g->KW - 1 - g->pw)),
           "");
  bat_loop(c, M, 8, "ctc_bat_out_bf16", arena_printf(A, "yb, %lld, %lld, %lld, ", (ll)N, (ll)M, (ll)OHW),
           arena_printf(A, ", %s", y));
  c->ind -= c->f->batch_max ? 2 : 0;
}

/* The weight gradient of a convolution as emit_conv_bat's (ir_conv_bat_bytes): dW^T in the scratch
 * (ctc_conv_bat_wgrad_bf16, in parallel over blocks of CTC_BAT_WGRAD_ROWS channels: its tiles' rows), x's and g's channels
 * laid out by position before, in parallel; left open as emit_conv_bat. */
static void emit_conv_bat_wgrad(CgFunc *c, const Inst *in, const ConvGeom *g, const char *scratch) {
  Arena *A = c->p->arena;
  const int64_t N = g->N, HW = g->H * g->W, kk = g->KH * g->KW, C = g->C, O = g->O;
  const char *x = cg_ref(c, in->args[0]), *gr = cg_ref(c, in->args[1]);
  char nq[64], ga[64], gb[64];
  bat_size(c, nq, sizeof nq, N, 16);
  bat_size(c, ga, sizeof ga, N, C * HW * 16);
  bat_size(c, gb, sizeof gb, N, O * HW * 16);
  if (c->f->batch_max) LINE(c, "if (%lld %% 32 == 0) {   /* GEMMs over 32 images a position */\n", (ll)N);
  c->ind += c->f->batch_max ? 2 : 0;
  LINE(c, "/* dW^T [%lld, %lld] in %s, then x's and g's channels by position with bf16 pairs of images\n",
       (ll)(C * kk), (ll)O, scratch);
  LINE(c, " * [%lld, %lld, nq] and [%lld, %lld, nq], g's as op(B)'s panels: the taps in the padding skipped */\n",
       (ll)C, (ll)HW, (ll)O, (ll)HW);
  LINE(c, "const int64_t nq = %s;\n", nq);
  LINE(c, "ctc_bf16x2 *xa = (ctc_bf16x2 *)(%s + %lld), *ga = xa + %s, *gb = ga + %s;   /* (64-byte aligned) */\n",
       scratch, (ll)((C * kk * O + 15) / 16 * 16), ga, gb);
  bat_loop(c, C, 4, "ctc_bat_rows_bf16", arena_printf(A, "%s, %lld, %lld, %lld, ", x, (ll)N, (ll)C, (ll)HW), ", xa");
  bat_loop(c, O, 4, "ctc_bat_rows_bf16", arena_printf(A, "%s, %lld, %lld, %lld, ", gr, (ll)N, (ll)O, (ll)HW), ", ga");
  bat_loop(c, HW, 1, "ctc_bat_cols_bf16", arena_printf(A, "ga, %lld, %lld, nq, ", (ll)O, (ll)HW), ", gb");
  bat_loop_s(c, C, "CTC_BAT_WGRAD_ROWS", "ctc_conv_bat_wgrad_bf16",
           arena_printf(A, "xa, gb, %lld, %lld, %lld, %lld, %lld, %lld, %lld, nq, %s, ", (ll)O, (ll)g->H, (ll)g->W,
                        (ll)g->KH, (ll)g->KW, (ll)g->ph, (ll)g->pw, scratch),
           "");
  c->ind -= c->f->batch_max ? 2 : 0;
}

/* A convolution as conv_implicit allows: the implicit GEMM where the compiler targets AVX-512 or
 * AVX2 (CTC_CONV_PIX_f32; AVX-512 BF16 for bf16 values), the tiles of im2col/col2im and GEMMs (emit_conv2d_tiled)
 * otherwise. In parallel over blocks of 256 pixels (forward, input gradient: the weights
 * prepared first, in parallel over their rows) or over each thread's rows of dW^T (weight
 * gradient, ctc_gemm_block's split, then transposed into dW); each output element is computed
 * by one call, in the same order whatever the number of threads. */
static void emit_conv2d_implicit(CgFunc *c, int i, const Inst *in, const ConvGeom *g, int low) {
  const int64_t P = g->N * g->H * g->W, kk = g->KH * g->KW, ckk = g->C * kk;
  const char *scratch = c->sname[i], *sf = low == 1 ? "bf16" : "f32";
  const int bat = low == 1 && ir_conv_bat_bytes(c->f, in) > 0;
  if (low == 1) c->k->gemm_bf16 = 1;
  cg_printf(c->out, "#ifdef %s\n", low == 1 ? "CTC_GEMM_AVX512BF16" : "CTC_CONV_PIX_f32");
  if (bat && !c->f->batch_max)
    LINE(c, "{   /* a stride-%lld convolution of bf16 values as GEMMs over the batch (AVX-512 BF16): no unfolded copy */\n",
         (ll)g->sh);
  else
    LINE(c, "{   /* a stride-1 convolution as an implicit GEMM (%s): no unfolded copy */\n",
         low == 1 ? "AVX-512 BF16, of bf16 values" : "AVX-512, AVX2 or NEON");
  c->ind += 2;
  LINE(c, "(void)ctc_%s_f32, (void)ctc_matmul_%s, (void)%s;   /* (what the #else branch uses) */\n",
       in->op == IR_CONV2D_BWD_INPUT ? "col2im" : "im2col", sf, scratch);
  if (in->op == IR_CONV2D_BWD_WEIGHT && bat) {
    emit_conv_bat_wgrad(c, in, g, scratch);
    if (c->f->batch_max) {
      LINE(c, "} else {   /* other batches: x unfolded as it is read */\n");
      c->ind += 2;
    }
  }
  if (in->op == IR_CONV2D_BWD_WEIGHT && (!bat || c->f->batch_max)) {   /* (bf16) dW^T[C*KH*KW, O] = x g^T, x unfolded as it is read */
    LINE(c, "const ctc_pix xs = {%s, %lld, %lld, %lld, %lld, %lld, %lld, %lld, 1};\n", cg_ref(c, in->args[0]), (ll)g->C,
         (ll)g->H, (ll)g->W, (ll)g->KH, (ll)g->KW, (ll)g->ph, (ll)g->pw);
    LINE(c, "const ctc_pix gs = {%s, %lld, %lld, %lld, 0, 0, 0, 0, 1};\n", cg_ref(c, in->args[1]), (ll)g->O, (ll)g->H,
         (ll)g->W);
    cg_par_open(c, CG_PAR_REGION | CG_PAR_OMP);   /* each thread its rows of dW^T: g^T packed once a thread */
    LINE(c, "{\n");
    LINE(c, "  int64_t r0, r1, c0, c1;   /* this thread's rows of dW^T, in %s */\n", scratch);
    LINE(c, "  ctc_gemm_block_f32(%lld, 1, &r0, &r1, &c0, &c1);\n", (ll)ckk);
    LINE(c, "  ctc_conv_wgrad_bf16(&xs, &gs, %lld, %lld, %s, r0, r1);\n", (ll)g->O, (ll)P, scratch);
    LINE(c, "}\n");
    cg_par_close(c);
    if (bat) {
      c->ind -= 2;
      LINE(c, "}\n");
    }
  }
  if (in->op == IR_CONV2D_BWD_WEIGHT) {
    const char *dw = cg_ref(c, in->res);
    cg_par_open(c, CG_PAR_OMP);
    LINE(c, "for (int64_t o0 = 0; o0 < %lld; o0 += 16)   /* dW = (dW^T)^T, 16 output channels at a time */\n",
         (ll)g->O);
    LINE(c, "  for (int64_t r = 0; r < %lld; r++)\n", (ll)ckk);
    LINE(c, "    for (int64_t o = o0; o < o0 + 16 && o < %lld; o++) %s[o * %lld + r] = %s[r * %lld + o];\n", (ll)g->O,
         dw, (ll)ckk, scratch, (ll)g->O);
    cg_par_close(c);
  } else {
    const int fwd = in->op == IR_CONV2D;   /* else dx: the convolution of g by w's taps reversed, channels swapped */
    const int64_t M = fwd ? g->O : g->C, K = fwd ? ckk : g->O * kk, wpl = ((K + 1) / 2 + 15) / 16 * 16;
    const char *w = cg_ref(c, in->args[1]), *a = w;
    if (bat) {
      emit_conv_bat(c, in, g, fwd, scratch);
      if (!c->f->batch_max) {
        c->ind -= 2;
        LINE(c, "}\n");
        cg_printf(c->out, "#else\n");
        emit_conv2d_tiled(c, i, in, g, low);
        cg_printf(c->out, "#endif\n");
        return;
      }
      LINE(c, "} else {   /* other batches: the implicit GEMM */\n");
      c->ind += 2;
    }
    LINE(c, "const ctc_pix s = {%s, %lld, %lld, %lld, %lld, %lld, %lld, %lld, 1};\n", cg_ref(c, in->args[0]),
         (ll)(fwd ? g->C : g->O), (ll)g->H, (ll)g->W, (ll)g->KH, (ll)g->KW, (ll)(fwd ? g->ph : g->KH - 1 - g->ph),
         (ll)(fwd ? g->pw : g->KW - 1 - g->pw));
    if (low == 1) {
      LINE(c, "ctc_bf16x2 *wp = (ctc_bf16x2 *)%s;   /* the weights as bf16 pairs, %lld a row */\n", scratch, (ll)wpl);
      cg_par_open(c, CG_PAR_OMP);
      LINE(c, "for (int64_t r = 0; r < %lld; r += 16)\n", (ll)M);
      LINE(c, "  ctc_pack_w_bf16(%s, %d, %lld, %lld, %lld, %lld, %lld, r, r + 16 < %lld ? r + 16 : %lld, wp);\n", w, !fwd,
           (ll)M, (ll)K, (ll)g->KH, (ll)g->KW, (ll)wpl, (ll)M, (ll)M);
      cg_par_close(c);
    } else if (!fwd) {
      a = scratch;
      cg_par_open(c, CG_PAR_OMP);
      LINE(c, "for (int64_t r = 0; r < %lld; r += 16)   /* %s: w's taps reversed, [C, O*KH*KW] */\n", (ll)M, scratch);
      LINE(c, "  ctc_flip_w_f32(%s, %lld, %lld, %lld, r, r + 16 < %lld ? r + 16 : %lld, %s);\n", w, (ll)M, (ll)g->O,
           (ll)kk, (ll)M, (ll)M, scratch);
      cg_par_close(c);
    }
    cg_par_open(c, CG_PAR_OMP);
    LINE(c, "for (int64_t p = 0; p < %lld; p += 256)\n", (ll)P);
    if (low == 1)
      LINE(c, "  ctc_conv_pix_bf16(wp, %lld, &s, %lld, %lld, %s, p, p + 256 < %lld ? p + 256 : %lld);\n", (ll)wpl,
           (ll)M, (ll)K, cg_ref(c, in->res), (ll)P, (ll)P);
    else
      LINE(c, "  ctc_conv_pix_f32(%s, &s, %lld, %lld, %s, p, p + 256 < %lld ? p + 256 : %lld);\n", a, (ll)M, (ll)K,
           cg_ref(c, in->res), (ll)P, (ll)P);
    cg_par_close(c);
    if (bat) {
      c->ind -= 2;
      LINE(c, "}\n");
    }
  }
  c->ind -= 2;
  LINE(c, "}\n");
  cg_printf(c->out, "#else\n");
  emit_conv2d_tiled(c, i, in, g, low);
  cg_printf(c->out, "#endif\n");
}

/* The end of a phase emitter's branch: its tile loop and block closed, then the tiles of im2col
 * or col2im and GEMMs as the #else branch (no CTC_CONV_PIX_f32). */
static void close_phases(CgFunc *c, int i, const Inst *in, const ConvGeom *g, int low) {
  c->ind -= 2;
  LINE(c, "}\n");
  c->ind -= 2;
  LINE(c, "}\n");
  cg_printf(c->out, "#else\n");
  emit_conv2d_tiled(c, i, in, g, low);
  cg_printf(c->out, "#endif\n");
}

/* The bytes of one image's phases that a stride-2 convolution as an implicit GEMM reads
 * (emit_conv2d_phases): NA x NB phases (2 where the kernel has several taps on that axis) of
 * the C channels at the output's size. */
static int64_t phase_bytes(const ConvGeom *g) { return (g->KH > 1 ? 2 : 1) * (g->KW > 1 ? 2 : 1) * g->C * g->ohw * 4; }

/* Whether a tiled f32 convolution (the forward) is written as an implicit GEMM over its input's
 * phases (ctc_pix with st 2) for AVX-512, AVX2 or NEON: on the hosted C target, stride 2, no dilation,
 * one group, even image sizes and an output half their size (a kernel of 2 ph + 1 or 2 ph + 2
 * taps), output images of a multiple of 16 pixels, at most 64 taps, and the phases of at least
 * one image fitting the scratch of the tiles it replaces. */
static int conv_phases(const CgFunc *c, int i, const Inst *in, const ConvGeom *g, int low) {
  return in->op == IR_CONV2D && ty(c, in->res)->dtype == DT_F32 && !low && !c->target && !c->k->freestanding &&
         c->sname[i] && g->G == 1 && g->sh == 2 && g->sw == 2 && g->dh == 1 && g->dw == 1 && g->H % 2 == 0 &&
         g->W % 2 == 0 && g->OH * 2 == g->H && g->OW * 2 == g->W && g->ohw % 16 == 0 && g->KH * g->KW <= 64 &&
         phase_bytes(g) <= ir_scratch_bytes(c->f, in);
}

/* A stride-2 convolution as conv_phases allows: where the compiler targets AVX-512, AVX2 or NEON
 * (CTC_CONV_PIX_f32), over tiles of as many images as the scratch holds, each image's input
 * split into its phases (ctc_pix_phases_f32, in parallel over (image, channel) pairs), then
 * ctc_conv_pix_f32 over the tile's pixels in blocks of 256 (in parallel): the unfolded columns
 * (9/4 of the input for a 3x3 kernel) are never written, nor the outputs copied; the tiles of
 * im2col and GEMMs (emit_conv2d_tiled) otherwise. Each output element is computed by one call,
 * in the same order whatever the number of threads. */
static void emit_conv2d_phases(CgFunc *c, int i, const Inst *in, const ConvGeom *g, int low) {
  const int64_t NA = g->KH > 1 ? 2 : 1, NB = g->KW > 1 ? 2 : 1, pb = phase_bytes(g) / 4;
  int64_t S = ir_scratch_bytes(c->f, in) / phase_bytes(g);
  if (S > g->N) S = g->N;
  const char *scratch = c->sname[i], *x = cg_ref(c, in->args[0]);
  cg_printf(c->out, "#ifdef CTC_CONV_PIX_f32\n");
  LINE(c, "{   /* a stride-2 convolution as an implicit GEMM over its input's phases (AVX-512, AVX2 or NEON) */\n");
  c->ind += 2;
  LINE(c, "(void)ctc_im2col_f32, (void)ctc_matmul_f32;   /* (what the #else branch uses) */\n");
  open_tiles(c, g->N, S);
  cg_par_open(c, CG_PAR_OMP);
  LINE(c, "for (int64_t q = 0; q < ns * %lld; q++)   /* (image, channel): %s = its phases */\n", (ll)g->C, scratch);
  LINE(c, "  ctc_pix_phases_f32(%s + (n0 + q / %lld) * %lld, %lld, %lld, %lld, %lld, %lld, q %% %lld, %s + q / %lld * %lld);\n",
       x, (ll)g->C, (ll)(g->C * g->H * g->W), (ll)g->C, (ll)g->H, (ll)g->W, (ll)NA, (ll)NB, (ll)g->C, scratch,
       (ll)g->C, (ll)pb);
  cg_par_close(c);
  LINE(c, "const ctc_pix s = {%s, %lld, %lld, %lld, %lld, %lld, %lld, %lld, 2};\n", scratch, (ll)g->C, (ll)g->OH,
       (ll)g->OW, (ll)g->KH, (ll)g->KW, (ll)g->ph, (ll)g->pw);
  cg_par_open(c, CG_PAR_OMP);
  LINE(c, "for (int64_t p = 0; p < ns * %lld; p += 256)\n", (ll)g->ohw);
  LINE(c, "  ctc_conv_pix_f32(%s, &s, %lld, %lld, %s + n0 * %lld, p, p + 256 < ns * %lld ? p + 256 : ns * %lld);\n",
       cg_ref(c, in->args[1]), (ll)g->O, (ll)g->ckk, cg_ref(c, in->res), (ll)(g->O * g->ohw), (ll)g->ohw,
       (ll)g->ohw);
  cg_par_close(c);
  close_phases(c, i, in, g, low);
}

/* The taps of a stride-2 convolution's input gradient that reach phase a of dx on one axis (K
 * taps, padding p): n of them, at offsets d = t - pad (t < n) into g, tap a + p - 2 d. */
static void phase_taps(int64_t K, int64_t p, int64_t a, int64_t *n, int64_t *pad) {
  const int64_t lo = -((K - 1 - a - p) >> 1), hi = (a + p) >> 1;   /* ceil((a + p - K + 1) / 2), floor((a + p) / 2) */
  *n = hi >= lo ? hi - lo + 1 : 0, *pad = -lo;
}

/* A stride-2 convolution's input gradient as ir_conv_phase_bytes allows, where the compiler
 * targets AVX-512, AVX2 or NEON (CTC_CONV_PIX_f32; the tiles of im2col/col2im and GEMMs otherwise):
 * each of dx's four phases (its pixels of row parity a and column parity b) is a stride-1
 * convolution of g by the taps that reach it (ctc_phase_w_f32, the weights prepared first, in
 * parallel over their rows), an implicit GEMM over g's pixels (ctc_conv_pix_f32, in blocks of
 * 256), into the scratch; then dx is the phases interleaved (ctc_pix_unphase_f32, in parallel
 * over (image, channel) pairs; a phase no tap reaches is zero), over tiles of S images. No
 * column matrix is written and nothing is added into dx. Each element of dx is computed by one
 * call, in the same order whatever the number of threads. */
static void emit_conv2d_bwd_phases(CgFunc *c, int i, const Inst *in, const ConvGeom *g, int low) {
  const int64_t kk = g->KH * g->KW, pimg = 4 * g->C * g->ohw;
  int64_t S = (ir_conv_phase_bytes(c->f, in) / 4 - g->C * g->O * kk) / pimg;
  if (S > g->N) S = g->N;
  const char *scratch = c->sname[i], *gy = cg_ref(c, in->args[0]), *w = cg_ref(c, in->args[1]);
  int64_t n[2][2], pad[2][2], woff[4], wo = 0;   /* taps and padding per axis and parity; each phase's weights */
  unsigned have = 0;
  for (int a = 0; a < 2; a++) {
    phase_taps(g->KH, g->ph, a, &n[0][a], &pad[0][a]);
    phase_taps(g->KW, g->pw, a, &n[1][a], &pad[1][a]);
  }
  for (int ab = 0; ab < 4; ab++) {
    woff[ab] = wo;
    const int64_t taps = n[0][ab >> 1] * n[1][ab & 1];
    if (taps) have |= 1u << ab, wo += g->C * g->O * taps;
  }
  cg_printf(c->out, "#ifdef CTC_CONV_PIX_f32\n");
  LINE(c, "{   /* a stride-2 convolution's input gradient, phase by phase, as implicit GEMMs (AVX-512, AVX2 or NEON) */\n");
  c->ind += 2;
  LINE(c, "(void)ctc_col2im_f32, (void)ctc_matmul_f32;   /* (what the #else branch uses) */\n");
  LINE(c, "float *const ps = %s + %lld;   /* the phases of dx, %lld floats apart */\n", scratch, (ll)wo, (ll)(S * g->C * g->ohw));
  cg_par_open(c, CG_PAR_OMP);
  LINE(c, "for (int64_t r = 0; r < %lld; r += 16) {   /* %s: each phase's taps of w, [C, O * taps] */\n", (ll)g->C,
       scratch);
  c->ind += 2;
  LINE(c, "const int64_t r1 = r + 16 < %lld ? r + 16 : %lld;\n", (ll)g->C, (ll)g->C);
  for (int ab = 0; ab < 4; ab++)
    if (have >> ab & 1)
      LINE(c, "ctc_phase_w_f32(%s, %lld, %lld, %lld, %lld, %lld, %lld, %d, %d, %lld, %lld, %lld, %lld, r, r1, %s + %lld);\n",
           w, (ll)g->C, (ll)g->O, (ll)g->KH, (ll)g->KW, (ll)g->ph, (ll)g->pw, ab >> 1, ab & 1, (ll)n[0][ab >> 1],
           (ll)n[1][ab & 1], (ll)pad[0][ab >> 1], (ll)pad[1][ab & 1], scratch, (ll)woff[ab]);
  c->ind -= 2;
  LINE(c, "}\n");
  cg_par_close(c);
  open_tiles(c, g->N, S);
  for (int ab = 0; ab < 4; ab++) {
    if (!(have >> ab & 1)) continue;
    const int64_t KHs = n[0][ab >> 1], KWs = n[1][ab & 1];
    LINE(c, "{   /* phase (%d, %d): %lld x %lld taps */\n", ab >> 1, ab & 1, (ll)KHs, (ll)KWs);
    c->ind += 2;
    LINE(c, "const ctc_pix s = {%s + n0 * %lld, %lld, %lld, %lld, %lld, %lld, %lld, %lld, 1};\n", gy,
         (ll)(g->O * g->ohw), (ll)g->O, (ll)g->OH, (ll)g->OW, (ll)KHs, (ll)KWs, (ll)pad[0][ab >> 1], (ll)pad[1][ab & 1]);
    cg_par_open(c, CG_PAR_OMP);
    LINE(c, "for (int64_t p = 0; p < ns * %lld; p += 256)\n", (ll)g->ohw);
    LINE(c, "  ctc_conv_pix_f32(%s + %lld, &s, %lld, %lld, ps + %lld, p, p + 256 < ns * %lld ? p + 256 : ns * %lld);\n",
         scratch, (ll)woff[ab], (ll)g->C, (ll)(g->O * KHs * KWs), (ll)(ab * S * g->C * g->ohw), (ll)g->ohw,
         (ll)g->ohw);
    cg_par_close(c);
    c->ind -= 2;
    LINE(c, "}\n");
  }
  cg_par_open(c, CG_PAR_OMP);
  LINE(c, "for (int64_t q = 0; q < ns * %lld; q++)   /* (image, channel): dx from its phases */\n", (ll)g->C);
  LINE(c, "  ctc_pix_unphase_f32(ps + q / %lld * %lld, %lld, %lld, %lld, %uu, q %% %lld, %s + (n0 + q / %lld) * %lld);\n",
       (ll)g->C, (ll)(g->C * g->ohw), (ll)g->H, (ll)g->W, (ll)(S * g->C * g->ohw), have, (ll)g->C,
       cg_ref(c, in->res), (ll)g->C, (ll)(g->C * g->H * g->W));
  cg_par_close(c);
  close_phases(c, i, in, g, low);
}

/* Whether a depthwise convolution (or gradient) runs kernels.c's stride-1 kernels over bands of
 * a zero-padded plane (ctc_dwconv_flat_*): on the hosted C target (they keep a band on the
 * stack), stride 1 with the output PyTorch's size, a band of at least one row, and a padded plane
 * at most 3 times the image (a 2x2 image under a 5x5 kernel with padding 2 is 9 times: most taps
 * would multiply padding, which the direct kernels skip; EfficientNet's last stages at 64x64:
 * 0.5-0.8 ms direct, 0.9-1.2 flat); the input's gradient also needs the padding within the
 * kernel's reach (its g padded by the rest). (Stride 2 over the input's phases was no faster than
 * the direct kernels' strided rows: not done.) */
static int dw_flat(const CgFunc *c, const Inst *in, const ConvGeom *g) {
  const int64_t ext = (g->KH - 1) * g->dh, extw = (g->KW - 1) * g->dw, Wp = g->W + 2 * g->pw;
  if (c->target || c->k->freestanding || g->sh != 1 || g->sw != 1 || g->OH != g->H + 2 * g->ph - ext ||
      g->OW != Wp - extw || Wp * (ext + 1) > CG_DW_BAND || (g->H + 2 * g->ph) * Wp > 3 * g->H * g->W)
    return 0;
  if (in->op == IR_CONV2D_BWD_INPUT) return g->ph <= ext && g->pw <= extw && (g->W + extw) * (ext + 1) <= CG_DW_BAND;
  if (in->op == IR_CONV2D_BWD_WEIGHT) return g->KH * g->KW <= CG_DW_TAPS && g->KH * g->KW * Wp <= CG_DW_PART;
  return 1;
}

/* Depthwise convolutions (ir_conv_depthwise): the direct kernels of kernels.c,
 * in parallel over the output channels of all images (forward), the input
 * channels (backward input) or the kernel taps (backward weight; stride 1 on the
 * hosted target: the output channels, all taps at once). */
static void emit_conv2d_depthwise(CgFunc *c, const Inst *in, const ConvGeom *cg) {
  DType t = ty(c, in->res)->dtype;
  const char *sf = cg_dt_suffix(t);
  ConvGeom g = *cg;
  const int64_t M = g.O / g.C, HW = g.H * g.W, KK = g.KH * g.KW;
  const int flat = dw_flat(c, in, &g);
  char geo[256], strides[64] = "";
  if (!flat) snprintf(strides, sizeof strides, "%lld, %lld, ", (ll)g.sh, (ll)g.sw);   /* (flat: stride 1, not passed) */
  snprintf(geo, sizeof geo, "%lld, %lld, %lld, %lld, %s%lld, %lld, %lld, %lld, %lld, %lld", (ll)g.H, (ll)g.W, (ll)g.KH,
           (ll)g.KW, strides, (ll)g.ph, (ll)g.pw, (ll)g.dh, (ll)g.dw, (ll)g.OH, (ll)g.OW);
  const char *fl = flat ? "_flat" : "";
  c->k->dwconv[t] = 1;
  if (flat) c->k->dwconv_flat[t] = 1;
  cg_par_open(c, CG_PAR_OMP);
  switch (in->op) {
  case IR_CONV2D: {
    const char *x = cg_ref(c, in->args[0]), *w = cg_ref(c, in->args[1]), *y = cg_ref(c, in->res);
    LINE(c, "for (int64_t q = 0; q < %lld; q++) {   /* (n, o) */\n", (ll)(g.N * g.O));
    LINE(c, "  const int64_t n = q / %lld, o = q %% %lld;\n", (ll)g.O, (ll)g.O);
    LINE(c, "  ctc_dwconv%s_%s(%s + (n * %lld + o / %lld) * %lld, %s + o * %lld, %s, %s + q * %lld);\n", fl, sf, x,
         (ll)g.C, (ll)M, (ll)HW, w, (ll)KK, geo, y, (ll)g.ohw);
    break;
  }
  case IR_CONV2D_BWD_INPUT: {
    const char *gy = cg_ref(c, in->args[0]), *w = cg_ref(c, in->args[1]), *dx = cg_ref(c, in->res);
    LINE(c, "for (int64_t q = 0; q < %lld; q++) {   /* (n, input channel) */\n", (ll)(g.N * g.C));
    LINE(c, "  const int64_t n = q / %lld, ci = q %% %lld;\n", (ll)g.C, (ll)g.C);
    LINE(c, "  ctc_dwconv_bwd_input%s_%s(%s + (n * %lld + ci * %lld) * %lld, %s + ci * %lld, %lld, %s, %s + q * %lld);\n",
         fl, sf, gy, (ll)g.O, (ll)M, (ll)g.ohw, w, (ll)(M * KK), (ll)M, geo, dx, (ll)HW);
    break;
  }
  default: {
    const char *x = cg_ref(c, in->args[0]), *gy = cg_ref(c, in->args[1]), *dw = cg_ref(c, in->res);
    if (flat) {
      LINE(c, "for (int64_t o = 0; o < %lld; o++) {   /* output channel o: its %lld taps */\n", (ll)g.O, (ll)KK);
      LINE(c, "  ctc_dwconv_bwd_weight_flat_%s(%s + o / %lld * %lld, %lld, %s + o * %lld, %lld, %lld, %s, %s + o * %lld);\n",
           sf, x, (ll)M, (ll)HW, (ll)(g.C * HW), gy, (ll)g.ohw, (ll)(g.O * g.ohw), (ll)g.N, geo, dw, (ll)KK);
      break;
    }
    LINE(c, "for (int64_t q = 0; q < %lld; q++) {   /* (o, kh, kw) */\n", (ll)(g.O * KK));
    LINE(c, "  const int64_t o = q / %lld;\n", (ll)KK);
    LINE(c, "  %s[q] = ctc_dwconv_bwd_weight_%s(%s + o / %lld * %lld, %lld, %s + o * %lld, %lld, %lld, %lld, %lld, "
            "q / %lld %% %lld, q %% %lld, %lld, %lld, %lld, %lld, %lld, %lld, %lld, %lld);\n",
         dw, sf, x, (ll)M, (ll)HW, (ll)(g.C * HW), gy, (ll)g.ohw, (ll)(g.O * g.ohw), (ll)g.N, (ll)g.H, (ll)g.W,
         (ll)g.KW, (ll)g.KH, (ll)g.KW, (ll)g.sh, (ll)g.sw, (ll)g.ph, (ll)g.pw, (ll)g.dh, (ll)g.dw, (ll)g.OH, (ll)g.OW);
    break;
  }
  }
  LINE(c, "}\n");
  cg_par_close(c);
}

/* 1x1 convolutions with stride 1 and no padding read x[n] as the column matrix:
 * one GEMM per image (and group), images in parallel when there is one group. */
static void emit_conv2d_pointwise(CgFunc *c, const Inst *in, const ConvGeom *geo, int low) {
  DType t = ty(c, in->res)->dtype;
  ConvGeom g = *geo;
  char xn[IDX_CAP], yn[IDX_CAP], wg[IDX_CAP];
  int base = c->ind;
  int img = in->op == IR_CONV2D_BWD_INPUT ? -1 : 0;   /* which operand is the image (-1: the result) */
  ValId xv = img < 0 ? in->res : in->args[0];
  ValId yv = in->op == IR_CONV2D ? in->res : in->op == IR_CONV2D_BWD_INPUT ? in->args[0] : in->args[1];
  ValId wv = in->op == IR_CONV2D_BWD_WEIGHT ? in->res : in->args[1];
  image_ptr_g(c, xn, sizeof xn, xv, g.N, g.C * g.H * g.W, g.G, g.Cg * g.H * g.W);
  image_ptr_g(c, yn, sizeof yn, yv, g.N, g.O * g.ohw, g.G, g.Og * g.ohw);
  image_ptr_g(c, wg, sizeof wg, wv, 1, 0, g.G, g.Og * g.ckk);
  int par = g.G == 1 && in->op != IR_CONV2D_BWD_WEIGHT && g.N > 1;   /* images in parallel */
  if (par && (t == DT_F32 || t == DT_F64)) LINE(c, "ctc_blas_threads_%s();\n", cg_dt_suffix(t));
  cg_par_open(c, par ? CG_PAR_OMP : 0);
  open_batch(c, &g);
  if (in->op == IR_CONV2D) gemm_call(c, t, low, 0, 0, g.Og, g.ohw, g.ckk, wg, g.ckk, xn, g.ohw, yn, g.ohw, NULL);
  else if (in->op == IR_CONV2D_BWD_INPUT) gemm_call(c, t, low, 1, 0, g.Cg, g.ohw, g.Og, wg, g.Cg, yn, g.ohw, xn, g.ohw, NULL);
  else gemm_call(c, t, low, 0, 1, g.Og, g.ckk, g.ohw, yn, g.ohw, xn, g.ohw, wg, g.ckk, g.N > 1 ? "n > 0" : NULL);
  close_batch(c, &g);
  cg_par_close(c);
  c->ind = base;
}

/* Whether a convolution or gradient is written by Winograd's F(2x2, 3x3) (emit_conv2d_wino): what
 * ir_conv_wino allows (the hosted C target: Func.conv_wino), which the C renderer writes. */
static int conv_wino(const CgFunc *c, const Inst *in) {
  return ir_conv_wino(c->f, in) && !c->target && !c->k->freestanding;
}

/* A convolution or gradient that ir_conv_wino allows: by Winograd's F(2x2, 3x3) where the
 * compiler targets AVX-512, AVX2 or NEON (CTC_CONV_WINO_f32, wino_c.c), the implicit GEMM or the tiles in
 * the #else branch. Every thread of a region calls ctc_conv_wino_f32, which splits each step of its
 * blocks of tiles among them; each output is computed the same way whatever their number. */
static void emit_conv2d_wino(CgFunc *c, int i, const Inst *in, const ConvGeom *g, int low) {
  const int fwd = in->op == IR_CONV2D, dw = in->op == IR_CONV2D_BWD_WEIGHT;
  cg_printf(c->out, "#ifdef CTC_CONV_WINO_f32\n");
  LINE(c, "(void)ctc_%s_f32, (void)ctc_matmul_f32;   /* (what the #else branch uses) */\n",
       in->op == IR_CONV2D_BWD_INPUT ? "col2im" : "im2col");
  cg_par_open(c, CG_PAR_OMP | CG_PAR_REGION);
  if (dw)
    LINE(c, "ctc_conv_wino_wgrad_f32(%s, %s, %lld, %lld, %lld, %lld, %lld, %lld, %s, %s);   /* Winograd's F(2x2, 3x3) */\n",
         cg_ref(c, in->args[0]), cg_ref(c, in->args[1]), (ll)g->N, (ll)g->C, (ll)g->H, (ll)g->W, (ll)g->O,
         (ll)ir_conv_wino_block(c->f, in), c->sname[i], cg_ref(c, in->res));
  else
    LINE(c, "ctc_conv_wino_f32(%s, %s, %d, %lld, %lld, %lld, %lld, %lld, %lld, %s, %s);%s\n", cg_ref(c, in->args[0]),
         cg_ref(c, in->args[1]), !fwd, (ll)g->N, (ll)(fwd ? g->C : g->O), (ll)g->H, (ll)g->W, (ll)(fwd ? g->O : g->C),
         (ll)ir_conv_wino_block(c->f, in), c->sname[i], cg_ref(c, in->res),
         fwd ? "   /* Winograd's F(2x2, 3x3) */" : "   /* Winograd's F(2x2, 3x3), w's taps reversed */");
  cg_par_close(c);
  cg_printf(c->out, "#else\n");
  if (conv_implicit(c, i, in, g, low)) emit_conv2d_implicit(c, i, in, g, low);
  else emit_conv2d_tiled(c, i, in, g, low);
  cg_printf(c->out, "#endif\n");
}

static void emit_conv2d_bwd_input(CgFunc *c, int i, const Inst *in, const ConvGeom *g, int low) {
  if (ir_conv_depthwise(c->f, in)) emit_conv2d_depthwise(c, in, g);
  else if (!c->sname[i]) emit_conv2d_pointwise(c, in, g, low);
  else if (conv_wino(c, in)) emit_conv2d_wino(c, i, in, g, low);
  else if (conv_implicit(c, i, in, g, low)) emit_conv2d_implicit(c, i, in, g, low);
  else if (!c->target && !c->k->freestanding && ir_conv_phase_bytes(c->f, in))   /* (Func.conv_phases) */
    emit_conv2d_bwd_phases(c, i, in, g, low);
  else emit_conv2d_tiled(c, i, in, g, low);
}

/* The direct loops' input row: ih = oh + kh - ph (outside the image: no
 * contribution, the next row), and xr, its start in image n, channel ci. */
static void direct_input_row(CgFunc *c, const ConvGeom *g, int64_t ph, const char *ct, const char *x) {
  if (ph) {
    LINE(c, "const int64_t ih = oh + kh - %lld;\n", (ll)ph);
    LINE(c, "if (ih < 0 || ih >= %lld) continue;\n", (ll)g->H);
  } else {
    LINE(c, "const int64_t ih = oh + kh;\n");
  }
  LINE(c, "const %s *restrict xr = %s + ((n * %lld + ci) * %lld + ih) * %lld;\n", ct, x, (ll)g->C, (ll)g->H, (ll)g->W);
}

/* dw[o, c, kh, kw] = sum over n, oh, ow of g[n, o, oh, ow] x[n, c, oh + kh - ph, ow + kw - pw]:
 * per (o, c, kh), in parallel, a KW x OW block of partial sums accumulated over
 * images and output rows, the ow loop unit-stride in both g and x (it
 * vectorises), then each kw's OW partial sums added in order. No unfolding. */
static void emit_conv2d_bwd_weight_direct(CgFunc *c, const Inst *in, const ConvGeom *g) {
  DType t = ty(c, in->res)->dtype;
  const char *ct = cg_ctype(t);
  const char *x = cg_ref(c, in->args[0]), *gy = cg_ref(c, in->args[1]), *dw = cg_ref(c, in->res);
  int64_t ph = g->ph, pw = g->pw, OW = g->OW, KW = g->KW;
  c->k->simd = 1;
  cg_par_open(c, CG_PAR_OMP);
  int base = c->ind;
  LINE(c, "for (int64_t q = 0; q < %lld; q++) {   /* (o, c, kh) */\n", (ll)(g->O * g->C * g->KH));
  c->ind += 2;
  LINE(c, "const int64_t o = q / %lld, ci = q / %lld %% %lld, kh = q %% %lld;\n", (ll)(g->C * g->KH), (ll)g->KH,
       (ll)g->C, (ll)g->KH);
  LINE(c, "%s part[%lld][%lld];   /* part[kw][ow]: partial sums over images and output rows */\n", ct, (ll)KW, (ll)OW);
  LINE(c, "memset(part, 0, sizeof part);\n");
  LINE(c, "for (int64_t n = 0; n < %lld; n++)\n", (ll)g->N);
  LINE(c, "  for (int64_t oh = 0; oh < %lld; oh++) {\n", (ll)g->OH);
  c->ind += 4;
  direct_input_row(c, g, ph, ct, x);
  LINE(c, "const %s *restrict gr = %s + ((n * %lld + o) * %lld + oh) * %lld;\n", ct, gy, (ll)g->O, (ll)g->OH, (ll)OW);
  LINE(c, "for (int64_t kw = 0; kw < %lld; kw++) {\n", (ll)KW);
  c->ind += 2;
  if (pw) {   /* the outputs whose input column ow + kw - pw is inside the image */
    LINE(c, "const int64_t lo = kw < %lld ? %lld - kw : 0, hi = %lld - kw < %lld ? %lld - kw : %lld;\n", (ll)pw, (ll)pw,
         (ll)(g->W + pw), (ll)OW, (ll)(g->W + pw), (ll)OW);
    LINE(c, "CTC_OMP_SIMD\n");
    LINE(c, "for (int64_t ow = lo; ow < hi; ow++) part[kw][ow] += gr[ow] * xr[ow + kw - %lld];\n", (ll)pw);
  } else {
    LINE(c, "CTC_OMP_SIMD\n");
    LINE(c, "for (int64_t ow = 0; ow < %lld; ow++) part[kw][ow] += gr[ow] * xr[ow + kw];\n", (ll)OW);
  }
  c->ind -= 2;
  LINE(c, "}\n");
  c->ind -= 2;
  LINE(c, "}\n");
  c->ind -= 2;
  LINE(c, "for (int64_t kw = 0; kw < %lld; kw++) {\n", (ll)KW);
  LINE(c, "  double s = 0;\n");
  LINE(c, "  for (int64_t ow = 0; ow < %lld; ow++) s += part[kw][ow];\n", (ll)OW);
  LINE(c, "  %s[q * %lld + kw] = (%s)s;\n", dw, (ll)KW, ct);
  LINE(c, "}\n");
  c->ind = base;
  LINE(c, "}\n");
  cg_par_close(c);
}

/* y[n, o, oh, :] = sum over c, kh, kw of w[o, c, kh, kw] x[n, c, oh + kh - ph, kw - pw :]:
 * per (n, oh), in parallel, the O x OW outputs in a local block; each input row
 * segment is loaded once for all O output channels (the ow loop vectorises). */
static void emit_conv2d_direct(CgFunc *c, const Inst *in, const ConvGeom *g) {
  DType t = ty(c, in->res)->dtype;
  const char *ct = cg_ctype(t);
  const char *x = cg_ref(c, in->args[0]), *w = cg_ref(c, in->args[1]), *y = cg_ref(c, in->res);
  int64_t ph = g->ph, pw = g->pw, OW = g->OW, O = g->O;
  c->k->simd = 1;
  cg_par_open(c, CG_PAR_OMP);
  int base = c->ind;
  LINE(c, "for (int64_t q = 0; q < %lld; q++) {   /* (n, oh) */\n", (ll)(g->N * g->OH));
  c->ind += 2;
  LINE(c, "const int64_t n = q / %lld, oh = q %% %lld;\n", (ll)g->OH, (ll)g->OH);
  LINE(c, "%s acc[%lld][%lld];   /* acc[o][ow] */\n", ct, (ll)O, (ll)OW);
  LINE(c, "memset(acc, 0, sizeof acc);\n");
  LINE(c, "for (int64_t ci = 0; ci < %lld; ci++)\n", (ll)g->C);
  LINE(c, "  for (int64_t kh = 0; kh < %lld; kh++) {\n", (ll)g->KH);
  c->ind += 4;
  direct_input_row(c, g, ph, ct, x);
  LINE(c, "const %s *restrict wr = %s + ci * %lld + kh * %lld;   /* w[0, ci, kh, 0] */\n", ct, w, (ll)(g->KH * g->KW),
       (ll)g->KW);
  LINE(c, "for (int64_t kw = 0; kw < %lld; kw++) {\n", (ll)g->KW);
  c->ind += 2;
  if (pw)
    LINE(c, "const int64_t lo = kw < %lld ? %lld - kw : 0, hi = %lld - kw < %lld ? %lld - kw : %lld;\n", (ll)pw, (ll)pw,
         (ll)(g->W + pw), (ll)OW, (ll)(g->W + pw), (ll)OW);
  LINE(c, "for (int64_t o = 0; o < %lld; o++) {\n", (ll)O);
  LINE(c, "  const %s wv = wr[o * %lld + kw];\n", ct, (ll)g->ckk);
  LINE(c, "  CTC_OMP_SIMD\n");
  if (pw) LINE(c, "  for (int64_t ow = lo; ow < hi; ow++) acc[o][ow] += wv * xr[ow + kw - %lld];\n", (ll)pw);
  else LINE(c, "  for (int64_t ow = 0; ow < %lld; ow++) acc[o][ow] += wv * xr[ow + kw];\n", (ll)OW);
  LINE(c, "}\n");
  c->ind -= 2;
  LINE(c, "}\n");
  c->ind -= 2;
  LINE(c, "}\n");
  c->ind -= 2;
  LINE(c, "for (int64_t o = 0; o < %lld; o++)\n", (ll)O);
  LINE(c, "  memcpy(%s + ((n * %lld + o) * %lld + oh) * %lld, acc[o], sizeof acc[o]);\n", y, (ll)O, (ll)g->OH, (ll)OW);
  c->ind = base;
  LINE(c, "}\n");
  cg_par_close(c);
}

static void emit_conv2d(CgFunc *c, int i, const Inst *in, const ConvGeom *g, int low) {
  if (ir_conv_direct(c->f, in)) emit_conv2d_direct(c, in, g);
  else if (ir_conv_depthwise(c->f, in)) emit_conv2d_depthwise(c, in, g);
  else if (!c->sname[i]) emit_conv2d_pointwise(c, in, g, low);
  else if (conv_wino(c, in)) emit_conv2d_wino(c, i, in, g, low);
  else if (conv_implicit(c, i, in, g, low)) emit_conv2d_implicit(c, i, in, g, low);
  else if (conv_phases(c, i, in, g, low)) emit_conv2d_phases(c, i, in, g, low);
  else emit_conv2d_tiled(c, i, in, g, low);
}

static void emit_conv2d_bwd_weight(CgFunc *c, int i, const Inst *in, const ConvGeom *g, int low) {
  if (ir_conv_direct(c->f, in)) emit_conv2d_bwd_weight_direct(c, in, g);
  else if (ir_conv_depthwise(c->f, in)) emit_conv2d_depthwise(c, in, g);
  else if (!c->sname[i]) emit_conv2d_pointwise(c, in, g, low);
  else if (conv_wino(c, in)) emit_conv2d_wino(c, i, in, g, low);
  else if (conv_implicit(c, i, in, g, low)) emit_conv2d_implicit(c, i, in, g, low);
  else emit_conv2d_tiled(c, i, in, g, low);
}

/* A convolution's call (kernels/conv.c's KirCall) as C, the render_c.c table's call for
 * "conv2d*": directly, per channel, as one GEMM or as tiles of im2col/col2im and GEMMs, from
 * the call's geometry. */
void cg_render_conv_c(CgRender *r, const KirStmt *st) {
  CgFunc *c = r->c;
  const Inst *in = st->in;
  int i = (int)(in - c->f->insts.data);
  switch (in->op) {
  case IR_CONV2D: emit_conv2d(c, i, in, &st->call->conv, st->call->low); break;
  case IR_CONV2D_BWD_INPUT: emit_conv2d_bwd_input(c, i, in, &st->call->conv, st->call->low); break;
  case IR_CONV2D_BWD_WEIGHT: emit_conv2d_bwd_weight(c, i, in, &st->call->conv, st->call->low); break;
  default: BUG("cg_render_conv_c: not a convolution");
  }
}


/* ---- GEMMs with an epilogue (kernels/: KN_GEMM) --------------------------------------
 * The GEMM split into the blocks ctc_matmul would give each thread
 * (ctc_gemm_split, ctc_gemm_block), each thread running its block and then the
 * epilogue's elementwise ops over that block while it is in cache: the result
 * [..., N] as [M, N], operands read at the element (i * N + j), along the last
 * axis (j: a bias) or as scalars. The epilogue is emitted as a KN_ELEM kernel
 * over the instructions after the GEMM, the GEMM's result one of its inputs. */
void cg_emit_gemm_kernel(CgFunc *c, const Kernel *kn) {
  const Inst *mm = &c->f->insts.data[kn->first];
  const Type *a = ty(c, mm->args[0]), *b = ty(c, mm->args[1]), *r = ty(c, mm->res);
  const int ta = (int)mm->attr[0], tb = (int)mm->attr[1];
  const int64_t N = r->dims[r->ndim - 1], M = ir_numel(r) / N, K = ta ? a->dims[a->ndim - 2] : a->dims[a->ndim - 1];
  const char *sfx = cg_dt_suffix(r->dtype);
  int nops;
  Kernel ep = kn_epilogue(c->p, c->f, kn, &nops);   /* the instructions after the GEMM */
  ep.space = *r;   /* over the result as [M, N]: its operands (kn_epilogue_operand) read at (i, j), j or 0 */
  ep.space.ndim = 2, ep.space.dims[0] = M, ep.space.dims[1] = N;
  CgRender R;
  cg_render_init(&R, &cg_render_c, c, kir_build(c->p->arena, c->f, c->s, &ep));
  R.gemm_block = 1;
  R.ops->names(&R);
  c->k->gemm[r->dtype] = 1;
  c->k->simd = 1;
  const int bf16 = r->dtype == DT_F32 && ir_low_operands(c->f, mm) == 1;   /* ctc_matmul_block_bf16 */
  if (bf16) c->k->gemm_bf16 = 1;
  LINE(c, "ctc_blas_threads_%s();\n", sfx);
  /* a region, as ctc_matmul splits it */
  cg_par_open(c, CG_PAR_REGION | ((double)M * (double)N * (double)K >= GEMM_SPLIT_WORK ? CG_PAR_OMP : 0));
  LINE(c, "{\n");
  c->ind += 2;
  LINE(c, "int64_t r0, r1, c0, c1;   /* this thread's block of %s */\n", c->cname[mm->res]);
  LINE(c, "ctc_gemm_block_%s(%lld, %lld, &r0, &r1, &c0, &c1);\n", sfx, (ll)M, (ll)N);
  const CgPacked *q = bf16 ? NULL : packed_b(c, kn->first, ta, tb, N, K, b->dims[b->ndim - 1]);
  if (q)   /* a time loop's weight, its panels packed before the loop */
    LINE(c, "ctc_matmul_block_pk_f32(%d, %d, 0, %lld, %s, %lld, %s, %lld, %s, %lld, %s, %lld, r0, r1, c0, c1);\n", ta, tb,
         (ll)K, cg_ref(c, mm->args[0]), (ll)a->dims[a->ndim - 1], cg_ref(c, mm->args[1]), (ll)b->dims[b->ndim - 1],
         q->name, (ll)q->pk->ldp, cg_ref(c, mm->res), (ll)N);
  else
    LINE(c, "ctc_matmul_block_%s(%d, %d, 0, %lld, %s, %lld, %s, %lld, %s, %lld, r0, r1, c0, c1);\n", bf16 ? "bf16" : sfx, ta,
         tb, (ll)K, cg_ref(c, mm->args[0]), (ll)a->dims[a->ndim - 1], cg_ref(c, mm->args[1]), (ll)b->dims[b->ndim - 1],
         cg_ref(c, mm->res), (ll)N);
  cg_render_block(&R, &R.k->body);   /* the epilogue's kernel IR over the block */
  c->ind -= 2;
  LINE(c, "}\n");
  cg_par_close(c);
  cg_render_free(&R);
}
