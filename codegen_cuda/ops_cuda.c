/* ops_cuda.c - the instructions the CUDA target writes its own kernels for: GEMMs through
 * cuBLAS, convolutions (cuDNN, or im2col/col2im kernels and cuBLAS), and data movement,
 * reductions, pooling and embeddings as a thread per result element, each summing in the C
 * target's order and accumulator type (cuda_int.h). */
#include <stdlib.h>
#include <string.h>
#include "cuda_int.h"

/* ---- GEMMs through cuBLAS ------------------------------------------------------ */

static int gemm_dtype(DType t) { return t == DT_F32 || t == DT_F64; }

/* "ptr + off" as host text for root value r at element offset off. */
static void host_ptr(Ent *e, Buf *b, ValId r, int64_t off) {
  if (off) cg_printf(b, "%s + %lld", cg_ref(e->c, r), (ll)off);
  else cg_puts(b, cg_ref(e->c, r));
}

/* Whether strides st over the axes of dims are one stride per flat batch index. */
static int uniform(const int64_t *st, const int64_t *dims, int nd, int64_t *s) {
  int64_t inner = 1;
  *s = nd ? st[nd - 1] : 0;
  for (int k = nd - 1; k >= 0; k--) {
    if (dims[k] != 1 && st[k] != *s * inner) return 0;
    inner *= dims[k];
  }
  return 1;
}

/* A GEMM's call (kernels/gemm.c's KirCall): cuBLAS's Sgemm/Dgemm (ctc_gemm_<t>), or, when both
 * f32 operands hold bf16 (f16) values, cublasGemmEx with f32 storage and
 * CUBLAS_COMPUTE_32F_FAST_16BF (_16F): tensor cores on the exact bf16/f16 operands, f32
 * accumulation (ctc_gemm_lp). The batch as cuBLAS's strided batches where its strides are
 * one per flat batch index, else host loops over the leading batch axes. */
int cu_matmul(Ent *e, const Inst *in) {
  const Func *f = e->f;
  const Type *r = ty(f, in->res);
  DType dt = r->dtype;
  if (!gemm_dtype(dt)) return -1;
  const KnSchedule *sc = e->c->s;
  Kir *kir = kir_build_inst_call(e->g->p->arena, f, sc, &sc->kernels.data[sc->kernel_of[in - f->insts.data]], in);
  if (!kir) return -1;
  const KirCall *g = kir->body.data[0]->call;
  e->uses_blas = 1;
  int bt[2] = {(int)g->ints[0], (int)g->ints[1]};
  int64_t ld[2] = {g->ints[5], g->ints[6]};
  int64_t M = g->ints[2], N = g->ints[3], K = g->ints[4];
  int nb = kir->space.ndim;
  const int64_t(*bst)[IR_MAX_DIMS] = g->bst;
  int64_t batch = ir_numel(&kir->space);
  int64_t s[3];
  int uni = uniform(bst[0], r->dims, nb, &s[0]) && uniform(bst[1], r->dims, nb, &s[1]) &&
            uniform(bst[2], r->dims, nb, &s[2]);
  /* b shared by the batch, a's rows contiguous across it: one GEMM with the batch in the rows */
  if (uni && batch > 1 && s[2] == 0 && !bt[0] && ld[0] == K && s[1] == M * K) M *= batch, batch = 1;
  int lp = dt == DT_F32 ? g->low : 0;
  if (lp) e->g->gemm_lp = 1;
  else e->g->gemm[dt] = 1;
  const char *sf = cg_dt_suffix(dt);
  char fn[64];
  if (lp) snprintf(fn, sizeof fn, "lp(%s, ", lp == 1 ? "CUBLAS_COMPUTE_32F_FAST_16BF" : "CUBLAS_COMPUTE_32F_FAST_16F");
  else snprintf(fn, sizeof fn, "%s(", sf);
  Buf pa = {0}, pb = {0}, pc = {0};
  if (uni || nb <= 1) {
    host_ptr(e, &pa, g->args[0], g->off[0]);
    host_ptr(e, &pb, g->args[1], g->off[1]);
    host_ptr(e, &pc, in->res, 0);
    cg_printf(e->host, "  CTC_CUBLAS(ctc_gemm_%sctc_blas, %d, %d, %lld, %lld, %lld, %s, %lld, %lld, %s, %lld, %lld, 0, %s, "
                       "%lld, %lld, %lld));\n", fn, bt[0], bt[1], (ll)M, (ll)N, (ll)K, pa.s, (ll)ld[0],
              (ll)(batch > 1 ? s[1] : 0), pb.s, (ll)ld[1], (ll)(batch > 1 ? s[2] : 0), pc.s, (ll)N,
              (ll)(batch > 1 ? s[0] : 0), (ll)batch);
  } else {
    /* host loops over the leading batch axes, one strided batch over the last */
    int last = nb - 1;
    for (int k = 0; k < last; k++)
      cg_printf(e->host, "  %*sfor (int64_t ctc_b%d = 0; ctc_b%d < %lld; ctc_b%d++)\n", 2 * k, "", k, k, (ll)r->dims[k], k);
    Buf *pp[3] = {&pc, &pa, &pb};
    ValId roots[3] = {in->res, g->args[0], g->args[1]};
    int64_t offs[3] = {0, g->off[0], g->off[1]};
    for (int j = 0; j < 3; j++) {
      host_ptr(e, pp[j], roots[j], offs[j]);
      for (int k = 0; k < last; k++)
        if (bst[j][k]) cg_printf(pp[j], " + ctc_b%d * %lld", k, (ll)bst[j][k]);
    }
    cg_printf(e->host, "  %*sCTC_CUBLAS(ctc_gemm_%sctc_blas, %d, %d, %lld, %lld, %lld, %s, %lld, %lld, %s, %lld, %lld, 0, "
                       "%s, %lld, %lld, %lld));\n", 2 * last, "", fn, bt[0], bt[1], (ll)M, (ll)N, (ll)K, pa.s, (ll)ld[0],
              (ll)bst[1][last], pb.s, (ll)ld[1], (ll)bst[2][last], pc.s, (ll)N, (ll)bst[0][last], (ll)r->dims[last]);
  }
  cg_buf_free(&pa);
  cg_buf_free(&pb);
  cg_buf_free(&pc);
  return 0;
}

/* ---- convolutions: im2col / col2im kernels + cuBLAS ------------------------------- */

/* Grouped convolutions: a GEMM batched over the groups per image (the C
 * target's per-image, per-group GEMMs), im2col/col2im of one image at a time
 * over all its channels (group grp's rows are the block [grp*ckk, (grp+1)*ckk)). */
static int emit_conv_grouped(Ent *e, int i, const Inst *in, const ConvGeom *cg) {
  const Func *f = e->f;
  DType dt = ty(f, in->res)->dtype;
  ConvGeom g = *cg;
  Gen *gen = e->g;
  gen->gemm[dt] = 1;
  e->uses_blas = 1;
  e->uses_stream = 1;
  const char *sf = cg_dt_suffix(dt), *scratch = e->c->sname[i];
  int64_t CHW = g.C * g.H * g.W, OHW = g.O * g.ohw, G = g.G, Og = g.Og, Cg = g.Cg, ckk = g.ckk, ohw = g.ohw;
  int64_t colimg = G * ckk * ohw;   /* one image's columns, all channels */
  char geo[256];
  snprintf(geo, sizeof geo, "%lld, %lld, %lld, %lld, %lld, %lld, %lld, %lld, %lld, %lld, %lld, %lld, %lld", (ll)g.C,
           (ll)g.H, (ll)g.W, (ll)g.KH, (ll)g.KW, (ll)g.sh, (ll)g.sw, (ll)g.ph, (ll)g.pw, (ll)g.dh, (ll)g.dw, (ll)g.OH,
           (ll)g.OW);
  Buf *h = e->host;
  if (scratch) gen->grid = 1;
  cg_printf(h, "  for (int64_t ctc_n = 0; ctc_n < %lld; ctc_n++) {   /* per image: the %lld groups in one batch */\n",
            (ll)g.N, (ll)G);
  switch (in->op) {
  case IR_CONV2D: {
    const char *x = cg_ref(e->c, in->args[0]), *w = cg_ref(e->c, in->args[1]), *y = cg_ref(e->c, in->res);
    char col[256];
    if (scratch) {
      gen->im2col[dt] = 1;
      cg_printf(h, "    CTC_LAUNCH(ctc_im2col_%s, ctc_grid(%lld), 256, 0, ctc_st, %s + ctc_n * %lld, %lld, 1, %s, %s, %lld, %lld);\n",
                sf, (ll)colimg, x, (ll)CHW, (ll)CHW, geo, scratch, (ll)ohw, (ll)colimg);
      snprintf(col, sizeof col, "%s", scratch);
    } else {
      snprintf(col, sizeof col, "%s + ctc_n * %lld", x, (ll)CHW);   /* 1x1, stride 1, no padding */
    }
    cg_printf(h, "    CTC_CUBLAS(ctc_gemm_%s(ctc_blas, 0, 0, %lld, %lld, %lld, %s, %lld, %lld, %s, %lld, %lld, 0, %s + ctc_n * %lld, "
                 "%lld, %lld, %lld));\n", sf, (ll)Og, (ll)ohw, (ll)ckk, w, (ll)ckk, (ll)(Og * ckk), col, (ll)ohw,
              (ll)(ckk * ohw), y, (ll)OHW, (ll)ohw, (ll)(Og * ohw), (ll)G);
    break;
  }
  case IR_CONV2D_BWD_INPUT: {
    const char *gy = cg_ref(e->c, in->args[0]), *w = cg_ref(e->c, in->args[1]), *dx = cg_ref(e->c, in->res);
    char col[256];
    if (scratch) snprintf(col, sizeof col, "%s", scratch);
    else snprintf(col, sizeof col, "%s + ctc_n * %lld", dx, (ll)CHW);
    cg_printf(h, "    CTC_CUBLAS(ctc_gemm_%s(ctc_blas, 1, 0, %lld, %lld, %lld, %s, %lld, %lld, %s + ctc_n * %lld, %lld, %lld, 0, "
                 "%s, %lld, %lld, %lld));\n", sf, (ll)ckk, (ll)ohw, (ll)Og, w, (ll)ckk, (ll)(Og * ckk), gy, (ll)OHW, (ll)ohw,
              (ll)(Og * ohw), col, (ll)ohw, (ll)(ckk * ohw), (ll)G);
    if (scratch) {
      gen->col2im[dt] = 1;
      cg_printf(h, "    CTC_LAUNCH(ctc_col2im_%s, ctc_grid(%lld), 256, 0, ctc_st, %s, %lld, 1, %s, %s + ctc_n * %lld, %lld);\n", sf,
                (ll)CHW, scratch, (ll)colimg, geo, dx, (ll)CHW, (ll)CHW);
    }
    break;
  }
  case IR_CONV2D_BWD_WEIGHT: {
    const char *x = cg_ref(e->c, in->args[0]), *gy = cg_ref(e->c, in->args[1]), *dw = cg_ref(e->c, in->res);
    char col[256];
    if (scratch) {
      gen->im2col[dt] = 1;
      cg_printf(h, "    CTC_LAUNCH(ctc_im2col_%s, ctc_grid(%lld), 256, 0, ctc_st, %s + ctc_n * %lld, %lld, 1, %s, %s, %lld, %lld);\n",
                sf, (ll)colimg, x, (ll)CHW, (ll)CHW, geo, scratch, (ll)ohw, (ll)colimg);
      snprintf(col, sizeof col, "%s", scratch);
    } else {
      snprintf(col, sizeof col, "%s + ctc_n * %lld", x, (ll)CHW);
    }
    cg_printf(h, "    CTC_CUBLAS(ctc_gemm_%s(ctc_blas, 0, 1, %lld, %lld, %lld, %s + ctc_n * %lld, %lld, %lld, %s, %lld, %lld, "
                 "ctc_n > 0, %s, %lld, %lld, %lld));\n", sf, (ll)Og, (ll)ckk, (ll)ohw, gy, (ll)OHW, (ll)ohw, (ll)(Og * ohw),
              col, (ll)ohw, (ll)(ckk * ohw), dw, (ll)ckk, (ll)(Og * ckk), (ll)G);
    break;
  }
  default: BUG("emit_conv_grouped");
  }
  cg_puts(h, "  }\n");
  (void)Cg;
  return 0;
}

/* A convolution without groups: im2col/col2im kernels and cuBLAS, S images at a time. */
static int emit_conv_gemm(Ent *e, int i, const Inst *in, const ConvGeom *cg) {
  const Func *f = e->f;
  DType dt = ty(f, in->res)->dtype;
  ConvGeom g = *cg;
  Gen *gen = e->g;
  gen->gemm[dt] = 1;
  e->uses_blas = 1;
  e->uses_stream = 1;
  const char *sf = cg_dt_suffix(dt), *scratch = e->c->sname[i];
  int64_t S = ir_conv_slots(f, in), CHW = g.C * g.H * g.W, OHW = g.O * g.ohw;
  char geo[256];
  snprintf(geo, sizeof geo, "%lld, %lld, %lld, %lld, %lld, %lld, %lld, %lld, %lld, %lld, %lld, %lld, %lld", (ll)g.C,
           (ll)g.H, (ll)g.W, (ll)g.KH, (ll)g.KW, (ll)g.sh, (ll)g.sw, (ll)g.ph, (ll)g.pw, (ll)g.dh, (ll)g.dw, (ll)g.OH,
           (ll)g.OW);
  Buf *h = e->host;
  if (scratch) gen->grid = 1;
  switch (in->op) {
  case IR_CONV2D: {
    const char *x = cg_ref(e->c, in->args[0]), *w = cg_ref(e->c, in->args[1]), *y = cg_ref(e->c, in->res);
    if (!scratch) {   /* 1x1, stride 1, no padding: x[n] is the column matrix */
      cg_printf(h, "  CTC_CUBLAS(ctc_gemm_%s(ctc_blas, 0, 0, %lld, %lld, %lld, %s, %lld, 0, %s, %lld, %lld, 0, %s, %lld, %lld, "
                   "%lld));\n", sf, (ll)g.O, (ll)g.ohw, (ll)g.C, w, (ll)g.C, x, (ll)g.ohw, (ll)CHW, y, (ll)g.ohw, (ll)OHW,
                (ll)g.N);
      break;
    }
    gen->im2col[dt] = 1;
    cg_printf(h, "  for (int64_t ctc_n0 = 0; ctc_n0 < %lld; ctc_n0 += %lld) {   /* %lld image%s at a time */\n", (ll)g.N,
              (ll)S, (ll)S, S == 1 ? "" : "s");
    cg_printf(h, "    const int64_t ctc_ns = %lld - ctc_n0 < %lld ? %lld - ctc_n0 : %lld;\n", (ll)g.N, (ll)S, (ll)g.N, (ll)S);
    cg_printf(h, "    CTC_LAUNCH(ctc_im2col_%s, ctc_grid(ctc_ns * %lld), 256, 0, ctc_st, %s + ctc_n0 * %lld, %lld, ctc_ns, "
                 "%s, %s, %lld, %lld);\n", sf, (ll)(g.ckk * g.ohw), x, (ll)CHW, (ll)CHW, geo, scratch, (ll)g.ohw,
              (ll)(g.ckk * g.ohw));
    cg_printf(h, "    CTC_CUBLAS(ctc_gemm_%s(ctc_blas, 0, 0, %lld, %lld, %lld, %s, %lld, 0, %s, %lld, %lld, 0, %s + ctc_n0 * "
                 "%lld, %lld, %lld, ctc_ns));\n  }\n", sf, (ll)g.O, (ll)g.ohw, (ll)g.ckk, w, (ll)g.ckk, scratch, (ll)g.ohw,
              (ll)(g.ckk * g.ohw), y, (ll)OHW, (ll)g.ohw, (ll)OHW);
    break;
  }
  case IR_CONV2D_BWD_INPUT: {
    const char *gy = cg_ref(e->c, in->args[0]), *w = cg_ref(e->c, in->args[1]), *dx = cg_ref(e->c, in->res);
    if (!scratch) {
      cg_printf(h, "  CTC_CUBLAS(ctc_gemm_%s(ctc_blas, 1, 0, %lld, %lld, %lld, %s, %lld, 0, %s, %lld, %lld, 0, %s, %lld, %lld, "
                   "%lld));\n", sf, (ll)g.C, (ll)g.ohw, (ll)g.O, w, (ll)g.C, gy, (ll)g.ohw, (ll)OHW, dx, (ll)g.ohw, (ll)CHW,
                (ll)g.N);
      break;
    }
    gen->col2im[dt] = 1;
    cg_printf(h, "  for (int64_t ctc_n0 = 0; ctc_n0 < %lld; ctc_n0 += %lld) {   /* %lld image%s at a time */\n", (ll)g.N,
              (ll)S, (ll)S, S == 1 ? "" : "s");
    cg_printf(h, "    const int64_t ctc_ns = %lld - ctc_n0 < %lld ? %lld - ctc_n0 : %lld;\n", (ll)g.N, (ll)S, (ll)g.N, (ll)S);
    cg_printf(h, "    CTC_CUBLAS(ctc_gemm_%s(ctc_blas, 1, 0, %lld, %lld, %lld, %s, %lld, 0, %s + ctc_n0 * %lld, %lld, %lld, 0, "
                 "%s, %lld, %lld, ctc_ns));\n", sf, (ll)g.ckk, (ll)g.ohw, (ll)g.O, w, (ll)g.ckk, gy, (ll)OHW, (ll)g.ohw,
              (ll)OHW, scratch, (ll)g.ohw, (ll)(g.ckk * g.ohw));
    cg_printf(h, "    CTC_LAUNCH(ctc_col2im_%s, ctc_grid(ctc_ns * %lld), 256, 0, ctc_st, %s, %lld, ctc_ns, %s, %s + ctc_n0 * "
                 "%lld, %lld);\n  }\n", sf, (ll)CHW, scratch, (ll)(g.ckk * g.ohw), geo, dx, (ll)CHW, (ll)CHW);
    break;
  }
  case IR_CONV2D_BWD_WEIGHT: {
    const char *x = cg_ref(e->c, in->args[0]), *gy = cg_ref(e->c, in->args[1]), *dw = cg_ref(e->c, in->res);
    if (!scratch) {   /* dw = sum over n of g[n] x[n]^T */
      cg_printf(h, "  for (int64_t ctc_n = 0; ctc_n < %lld; ctc_n++)\n", (ll)g.N);
      cg_printf(h, "    CTC_CUBLAS(ctc_gemm_%s(ctc_blas, 0, 1, %lld, %lld, %lld, %s + ctc_n * %lld, %lld, 0, %s + ctc_n * %lld, "
                   "%lld, 0, ctc_n > 0, %s, %lld, 0, 1));\n", sf, (ll)g.O, (ll)g.C, (ll)g.ohw, gy, (ll)OHW, (ll)g.ohw, x,
                (ll)CHW, (ll)g.ohw, dw, (ll)g.C);
      break;
    }
    /* a chunk of S images' columns side by side (col[ckk, S*OH*OW]) next to a copy of
     * their gradients (gs[O, S*OH*OW]); one GEMM per chunk with K = ns*OH*OW */
    gen->im2col[dt] = 1;
    int64_t L = S * g.ohw;
    const char *ct = cg_ctype(dt);
    cg_printf(h, "  for (int64_t ctc_n0 = 0; ctc_n0 < %lld; ctc_n0 += %lld) {   /* %lld image%s at a time */\n", (ll)g.N,
              (ll)S, (ll)S, S == 1 ? "" : "s");
    cg_printf(h, "    const int64_t ctc_ns = %lld - ctc_n0 < %lld ? %lld - ctc_n0 : %lld;\n", (ll)g.N, (ll)S, (ll)g.N, (ll)S);
    cg_printf(h, "    CTC_LAUNCH(ctc_im2col_%s, ctc_grid(ctc_ns * %lld), 256, 0, ctc_st, %s + ctc_n0 * %lld, %lld, ctc_ns, "
                 "%s, %s, %lld, %lld);\n", sf, (ll)(g.ckk * g.ohw), x, (ll)CHW, (ll)CHW, geo, scratch, (ll)L, (ll)g.ohw);
    cg_printf(h, "    for (int64_t ctc_s = 0; ctc_s < ctc_ns; ctc_s++)\n");
    cg_printf(h, "      CTC_CUDA(cudaMemcpy2DAsync(%s + %lld + ctc_s * %lld, %lld * sizeof(%s), %s + (ctc_n0 + ctc_s) * %lld, "
                 "%lld * sizeof(%s), %lld * sizeof(%s), %lld, cudaMemcpyDeviceToDevice, ctc_st));\n", scratch,
              (ll)(g.ckk * L), (ll)g.ohw, (ll)L, ct, gy, (ll)OHW, (ll)g.ohw, ct, (ll)g.ohw, ct, (ll)g.O);
    cg_printf(h, "    CTC_CUBLAS(ctc_gemm_%s(ctc_blas, 0, 1, %lld, %lld, ctc_ns * %lld, %s + %lld, %lld, 0, %s, %lld, 0, "
                 "ctc_n0 > 0, %s, %lld, 0, 1));\n  }\n", sf, (ll)g.O, (ll)g.ckk, (ll)g.ohw, scratch, (ll)(g.ckk * L), (ll)L,
              scratch, (ll)L, dw, (ll)g.ckk);
    break;
  }
  default: BUG("emit_conv");
  }
  return 0;
}

/* A convolution: cuDNN when the file is built with CTC_HAVE_CUDNN and the site has an
 * algorithm (dnn_cuda.h), else (and always without cuDNN) the im2col + cuBLAS code. */
int cu_conv(Ent *e, int i, const Inst *in) {
  const Func *f = e->f;
  if (!gemm_dtype(ty(f, in->res)->dtype)) return -1;
  const KnSchedule *sc = e->c->s;
  const ConvGeom *g = &kir_build_inst_call(e->g->p->arena, f, sc, &sc->kernels.data[sc->kernel_of[i]], in)->body.data[0]->call->conv;
  Buf *host = e->host, alt = {0};
  e->host = &alt;
  int rc = g->G > 1 ? emit_conv_grouped(e, i, in, g) : emit_conv_gemm(e, i, in, g);
  e->host = host;
  if (!rc) {
    /* x, w, y as cuDNN names them: the image, the kernel, the convolution's output */
    const char *x, *w, *y;
    if (in->op == IR_CONV2D) x = cg_ref(e->c, in->args[0]), w = cg_ref(e->c, in->args[1]), y = cg_ref(e->c, in->res);
    else if (in->op == IR_CONV2D_BWD_INPUT)
      y = cg_ref(e->c, in->args[0]), w = cg_ref(e->c, in->args[1]), x = cg_ref(e->c, in->res);
    else x = cg_ref(e->c, in->args[0]), y = cg_ref(e->c, in->args[1]), w = cg_ref(e->c, in->res);
    const char *scratch = e->c->sname[i];
    cg_dnn_conv(&e->g->dnn, host, f, in, x, w, y, scratch, scratch ? ir_scratch_bytes(f, in) : 0);
    e->uses_dnn = 1;
    cg_puts(host, "  {\n");
    CgLines L;   /* the im2col code, one level deeper */
    cg_lines(alt.s ? alt.s : "", &L);
    for (size_t k = 0; k < L.len; k++) cg_printf(host, "%s%.*s\n", L.n[k] ? "  " : "", (int)L.n[k], L.s[k]);
    cg_lines_free(&L);
    cg_puts(host, "  }\n");
  }
  cg_buf_free(&alt);
  return rc;
}

/* ---- data movement and reductions: a thread per result element ----------------- */

static void cstrides(const Type *t, int64_t *st) {
  int64_t n = 1;
  for (int k = t->ndim - 1; k >= 0; k--) st[k] = n, n *= t->dims[k];
}

void cu_inst_launch(Ent *e, int i, const Inst *in, const char *note, const char *sfx, Buf *body, const char *grid,
                    int block, int sync) {
  Buf com = {0};
  Buf *save = e->c->out;
  unsigned char *ref = e->c->ref;
  e->c->out = &com, e->c->ind = 0, e->c->ref = e->href;
  cg_comment(e->c, in);
  e->c->out = save, e->c->ref = ref;
  if (note) cg_printf(&com, "/* %s */\n", note);
  char kname[200];
  snprintf(kname, sizeof kname, "%s_%s_i%d%s", e->g->prefix, e->fname, i, sfx);
  cu_kend(e, kname, com.s, body, grid, block, sync);
  cg_buf_free(&com);
}

/* Kernel body (a grid-stride loop over n elements) of instruction i finished and launched. */
void cu_op_launch(Ent *e, int i, const Inst *in, const char *note, const char *sfx, Buf *body, int64_t n) {
  char grid[32];
  int64_t blocks = (n + ELEM_BLOCK - 1) / ELEM_BLOCK;
  snprintf(grid, sizeof grid, "%lld", (ll)(blocks < 1 ? 1 : blocks > MAX_GRID ? MAX_GRID : blocks));
  cu_inst_launch(e, i, in, note, sfx, body, grid, ELEM_BLOCK, 0);
}

/* The kernel of instruction i with a grid-stride loop over its result's
 * elements around `inner` (which uses ctc_i); c->out is the body. */
static void elementwise_kernel(Ent *e, int i, const Inst *in, Buf *body) {
  cu_op_launch(e, i, in, NULL, "", body, ir_numel(ty(e->f, in->res)));
}

const char cu_loop_head[] =
    "  for (int64_t ctc_i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; ctc_i < %lld;"
    " ctc_i += (int64_t)blockDim.x * gridDim.x)";

/* PERMUTE, BROADCAST, SLICE: result[ctc_i] = operand[off + strides . coordinates]. */
static int emit_copy(Ent *e, int i, const Inst *in) {
  const Func *f = e->f;
  const Type *a = ty(f, in->args[0]), *r = ty(f, in->res);
  int64_t st[IR_MAX_DIMS], ast[IR_MAX_DIMS], off = 0;
  cstrides(a, ast);
  switch (in->op) {
  case IR_PERMUTE:
    for (int k = 0; k < r->ndim; k++) st[k] = ast[in->attr[k]];
    break;
  case IR_BROADCAST: cg_bcast_strides(a, r, st); break;
  case IR_SLICE:
    for (int k = 0; k < r->ndim; k++) off += in->attr[2 * k] * ast[k], st[k] = ast[k] * in->attr[2 * k + 1];
    break;
  default: return -1;
  }
  Buf body = {0}, src = {0};
  cu_kbegin(e, &body);
  if (cu_is_literal(f, in->args[0])) {
    cu_literal(f, in->args[0], &src);
  } else {
    char idx[512];
    cu_flat_index(idx, sizeof idx, r, st, "ctc_i", r->ndim);
    cg_printf(&src, "%s[%s", cg_ref(e->c, in->args[0]), idx);
    if (off) cg_printf(&src, " + %lld", (ll)off);
    cg_puts(&src, "]");
  }
  cg_printf(&body, cu_loop_head, (ll)ir_numel(r));
  cg_printf(&body, "\n    %s[ctc_i] = %s;\n", cg_ref(e->c, in->res), src.s);
  elementwise_kernel(e, i, in, &body);
  cg_buf_free(&body);
  cg_buf_free(&src);
  return 0;
}

/* Few results over many elements each (a bias's gradient, a norm's weight's): a block of
 * RED_COLS * RED_PARTS threads per RED_COLS results; each result's RED_PARTS threads take
 * every RED_PARTS-th of its R elements (in order), and the first adds the others' partials in
 * order from shared memory: deterministic, a float sum in double as the C target's. */
enum { RED_COLS = 8, RED_PARTS = 32 };

/* The split blocks' thread roles: ctc_c the result in the block, ctc_g the part, ctc_i the result. */
static void split_roles(Buf *body) {
  cg_printf(body, "  const int ctc_c = threadIdx.x %% %d, ctc_g = threadIdx.x / %d;\n", RED_COLS, RED_COLS);
  cg_printf(body, "  const int64_t ctc_i = (int64_t)blockIdx.x * %d + ctc_c;\n", RED_COLS);
}

/* A split kernel of n results (`what`: "result", "fiber") launched with its note. */
static void split_launch(Ent *e, int i, const Inst *in, Buf *body, int64_t n, const char *what) {
  char note[160], grid[32];
  snprintf(note, sizeof note, "a block of %d threads per %d %ss, %d per %s", RED_COLS * RED_PARTS, RED_COLS, what, RED_PARTS,
           what);
  snprintf(grid, sizeof grid, "%lld", (ll)((n + RED_COLS - 1) / RED_COLS));
  cu_inst_launch(e, i, in, note, "", body, grid, RED_COLS * RED_PARTS, 1);
}

static void emit_reduce_split(Ent *e, int i, const Inst *in, const int64_t *ast, const int64_t *kst, int64_t R) {
  const Func *f = e->f;
  const Type *a = ty(f, in->args[0]), *r = ty(f, in->res);
  DType t = r->dtype;
  const char *acc = cg_acc_type(in, t);
  int64_t n = ir_numel(r);
  Buf body = {0}, x = {0};
  cu_kbegin(e, &body);
  char idx[512];
  cu_flat_index(idx, sizeof idx, r, kst, "ctc_i", r->ndim);
  cg_printf(&body, "  __shared__ %s ctc_part[%d][%d];\n", acc, RED_PARTS, RED_COLS);
  split_roles(&body);
  cg_printf(&body, "  %s ctc_acc = %s;\n", acc, cg_acc_init(in, t));
  cg_printf(&body, "  if (ctc_i < %lld) {\n    const int64_t ctc_b = %s;\n", (ll)n, idx);
  cg_printf(&body, "    for (int64_t ctc_q = ctc_g; ctc_q < %lld; ctc_q += %d)   /* its share of the %lld elements */\n", (ll)R,
            RED_PARTS, (ll)R);
  cg_printf(&x, "%s[ctc_b", cg_ref(e->c, in->args[0]));
  int64_t inner = R;
  for (int k = 0; k < a->ndim; k++) {   /* ctc_q's index on each reduced axis, outermost first */
    if (!((in->attr[0] >> k) & 1) || a->dims[k] == 1) continue;
    inner /= a->dims[k];
    cg_puts(&x, " + ");
    if (inner > 1) cg_printf(&x, inner * a->dims[k] < R ? "ctc_q / %lld %% %lld" : "ctc_q / %lld", (ll)inner, (ll)a->dims[k]);
    else cg_printf(&x, a->dims[k] < R ? "ctc_q %% %lld" : "ctc_q", (ll)a->dims[k]);
    if (ast[k] != 1) cg_printf(&x, " * %lld", (ll)ast[k]);
  }
  cg_puts(&x, "]");
  e->c->out = &body;
  e->c->ind = 6;
  cg_acc_update(e->c, in, "ctc_acc", x.s);
  cg_printf(&body, "  }\n  ctc_part[ctc_g][ctc_c] = ctc_acc;\n  __syncthreads();\n");
  cg_printf(&body, "  if (ctc_g == 0 && ctc_i < %lld) {\n    for (int ctc_k = 1; ctc_k < %d; ctc_k++)\n", (ll)n, RED_PARTS);
  e->c->ind = 6;
  cg_acc_update(e->c, in, "ctc_acc", "ctc_part[ctc_k][ctc_c]");
  int cast = strcmp(acc, cg_ctype(t)) != 0;
  cg_printf(&body, "    %s[ctc_i] = %s%s%sctc_acc;\n  }\n", cg_ref(e->c, in->res), cast ? "(" : "", cast ? cg_ctype(t) : "",
            cast ? ")" : "");
  split_launch(e, i, in, &body, n, "result");
  cg_buf_free(&body);
  cg_buf_free(&x);
}

/* REDUCE_SUM / REDUCE_MAX over any axes: each result element accumulates its
 * operand elements in row-major order of the reduced axes, in the C target's
 * accumulator type (emit_reduce's order: the same sums); few results of many elements
 * each, emit_reduce_split's blocks. */
static int emit_reduce(Ent *e, int i, const Inst *in) {
  const Func *f = e->f;
  if (cu_is_literal(f, in->args[0])) return -1;
  const Type *a = ty(f, in->args[0]), *r = ty(f, in->res);
  DType t = r->dtype;
  int64_t ast[IR_MAX_DIMS], kst[IR_MAX_DIMS], R = 1;
  cstrides(a, ast);
  for (int k = 0; k < r->ndim; k++) kst[k] = (in->attr[0] >> k) & 1 ? 0 : ast[k];
  for (int k = 0; k < a->ndim; k++) R *= (in->attr[0] >> k) & 1 ? a->dims[k] : 1;
  if (ir_numel(r) <= 65536 && R >= 64) {   /* too few results to fill the GPU a thread each */
    emit_reduce_split(e, i, in, ast, kst, R);
    return 0;
  }
  Buf body = {0};
  cu_kbegin(e, &body);
  char idx[512];
  cu_flat_index(idx, sizeof idx, r, kst, "ctc_i", r->ndim);
  cg_printf(&body, cu_loop_head, (ll)ir_numel(r));
  cg_printf(&body, " {\n    const int64_t ctc_b = %s;\n", idx);
  cg_printf(&body, "    %s ctc_acc = %s;\n", cg_acc_type(in, t), cg_acc_init(in, t));
  Buf x = {0};
  cg_printf(&x, "%s[ctc_b", cg_ref(e->c, in->args[0]));
  int nl = 0;
  for (int k = 0; k < a->ndim; k++) {
    if (!((in->attr[0] >> k) & 1) || a->dims[k] == 1) continue;
    cg_printf(&body, "    %*sfor (int64_t ctc_r%d = 0; ctc_r%d < %lld; ctc_r%d++)\n", 2 * nl, "", k, k, (ll)a->dims[k], k);
    cg_printf(&x, " + ctc_r%d * %lld", k, (ll)ast[k]);
    nl++;
  }
  cg_puts(&x, "]");
  e->c->out = &body;
  e->c->ind = 4 + 2 * nl;
  cg_acc_update(e->c, in, "ctc_acc", x.s);
  int cast = strcmp(cg_acc_type(in, t), cg_ctype(t)) != 0;
  cg_printf(&body, "    %s[ctc_i] = %s%s%sctc_acc;\n  }\n", cg_ref(e->c, in->res), cast ? "(" : "", cast ? cg_ctype(t) : "",
            cast ? ")" : "");
  elementwise_kernel(e, i, in, &body);
  cg_buf_free(&body);
  cg_buf_free(&x);
  return 0;
}

/* ARGMAX (argmin) of few long fibers (a language model's next token over the vocabulary): a
 * block of RED_COLS * RED_PARTS threads per RED_COLS fibers. Each of a fiber's RED_PARTS
 * threads scans every RED_PARTS-th element as the C target scans the fiber (the first of the
 * best so far, a NaN beating numbers and the first NaN later ones), then the first thread
 * takes the best of their results, an equal one (or a NaN after a NaN) at a smaller index:
 * the C target's index, whatever the order the threads finish in. Many fibers keep their
 * kernel IR, a thread per fiber. */
int cu_argmax_split(Ent *e, int i, const Inst *in) {
  const Func *f = e->f;
  const Type *x = ty(f, in->args[0]), *r = ty(f, in->res);
  const int ax = (int)in->attr[0], isf = x->dtype == DT_F32 || x->dtype == DT_F64;
  const int64_t R = x->dims[ax], n = ir_numel(r);
  if (cu_is_literal(f, in->args[0]) || (!isf && x->dtype != DT_I32 && x->dtype != DT_I64) || n > 4096 || R < 1024)
    return -1;
  const char *ct = cg_ctype(x->dtype), *op = in->attr[1] ? "<" : ">";
  int64_t xst[IR_MAX_DIMS], kst[IR_MAX_DIMS];
  cstrides(x, xst);
  for (int k = 0; k < r->ndim; k++) kst[k] = k == ax ? 0 : xst[k];
  char idx[512];
  cu_flat_index(idx, sizeof idx, r, kst, "ctc_i", r->ndim);
  /* v (at k) better than the best so far, mx (at at): in a thread's scan a later k never wins a
   * tie, across the threads' results the smaller k does */
  char scan[300], pick[300];
  if (isf) {
    snprintf(scan, sizeof scan, "(isnan(ctc_v) ? !isnan(ctc_mx) : !isnan(ctc_mx) && ctc_v %s ctc_mx)", op);
    snprintf(pick, sizeof pick, "(isnan(ctc_v) ? !isnan(ctc_mx) || ctc_k < ctc_at : !isnan(ctc_mx) && (ctc_v %s ctc_mx || "
             "(ctc_v == ctc_mx && ctc_k < ctc_at)))", op);
  } else {
    snprintf(scan, sizeof scan, "ctc_v %s ctc_mx", op);
    snprintf(pick, sizeof pick, "(ctc_v %s ctc_mx || (ctc_v == ctc_mx && ctc_k < ctc_at))", op);
  }
  Buf body = {0};
  cu_kbegin(e, &body);
  cg_printf(&body, "  __shared__ %s ctc_pmx[%d][%d];\n  __shared__ int64_t ctc_pat[%d][%d];\n", ct, RED_PARTS, RED_COLS,
            RED_PARTS, RED_COLS);
  split_roles(&body);
  cg_printf(&body, "  %s ctc_mx = 0;\n  int64_t ctc_at = -1;\n", ct);
  cg_printf(&body, "  if (ctc_i < %lld) {\n    const int64_t ctc_b = %s;\n", (ll)n, idx);
  cg_printf(&body, "    for (int64_t ctc_k = ctc_g; ctc_k < %lld; ctc_k += %d) {   /* its share of the %lld elements */\n",
            (ll)R, RED_PARTS, (ll)R);
  cg_printf(&body, "      const %s ctc_v = %s[ctc_b + ctc_k * %lld];\n", ct, cg_ref(e->c, in->args[0]), (ll)xst[ax]);
  cg_printf(&body, "      if (ctc_at < 0 || %s) ctc_mx = ctc_v, ctc_at = ctc_k;\n    }\n  }\n", scan);
  cg_printf(&body, "  ctc_pmx[ctc_g][ctc_c] = ctc_mx;\n  ctc_pat[ctc_g][ctc_c] = ctc_at;\n  __syncthreads();\n");
  cg_printf(&body, "  if (ctc_g == 0 && ctc_i < %lld) {\n", (ll)n);
  cg_printf(&body, "    for (int ctc_q = 1; ctc_q < %d; ctc_q++) {\n", RED_PARTS);
  cg_printf(&body, "      const %s ctc_v = ctc_pmx[ctc_q][ctc_c];\n      const int64_t ctc_k = ctc_pat[ctc_q][ctc_c];\n", ct);
  cg_printf(&body, "      if (ctc_k >= 0 && %s) ctc_mx = ctc_v, ctc_at = ctc_k;\n    }\n", pick);
  cg_printf(&body, "    %s[ctc_i] = ctc_at;\n  }\n", cg_ref(e->c, in->res));
  split_launch(e, i, in, &body, n, "fiber");
  cg_buf_free(&body);
  return 0;
}

/* CONCAT: each result element from the part that holds its index on the axis. */
static int emit_concat(Ent *e, int i, const Inst *in) {
  const Func *f = e->f;
  const Type *r = ty(f, in->res);
  int ax = (int)in->attr[0];
  for (int k = 0; k < in->nargs; k++)
    if (cu_is_literal(f, in->args[k])) return -1;
  int64_t inner = 1;
  for (int k = ax + 1; k < r->ndim; k++) inner *= r->dims[k];
  int64_t D = r->dims[ax];
  Buf body = {0};
  cu_kbegin(e, &body);
  cg_printf(&body, cu_loop_head, (ll)ir_numel(r));
  cg_printf(&body, " {\n    const int64_t ctc_o = ctc_i / %lld, ctc_a = ctc_i / %lld %% %lld, ctc_q = ctc_i %% %lld;\n", (ll)(D * inner),
            (ll)inner, (ll)D, (ll)inner);
  int64_t at = 0;
  for (int k = 0; k < in->nargs; k++) {
    ValId v = in->args[k];
    int64_t n = ty(f, v)->dims[ax];
    char idx[1200];
    KnLayout l;   /* a folded slice or permute: read in place from its root */
    if (kn_root(f, e->c->s, v) != kn_root(f, NULL, v) && kn_layout(f, e->c->s, v, &l) == 0) {
      /* element (ctc_o over the axes before ax, ctc_a - at, ctc_q over those after) at its strides */
      const Type *pt = ty(f, v);
      Type lead = *pt, trail = *pt;
      trail.ndim = pt->ndim - ax - 1;
      for (int d = 0; d < trail.ndim; d++) trail.dims[d] = pt->dims[ax + 1 + d];
      char o[512], q[512];
      cu_flat_index(o, sizeof o, &lead, l.st, "ctc_o", ax);
      cu_flat_index(q, sizeof q, &trail, l.st + ax + 1, "ctc_q", trail.ndim);
      snprintf(idx, sizeof idx, "%lld + %s + (ctc_a - %lld) * %lld + %s", (ll)l.off, o, (ll)at, (ll)l.st[ax], q);
      v = l.root;
    } else {
      snprintf(idx, sizeof idx, "(ctc_o * %lld + ctc_a - %lld) * %lld + ctc_q", (ll)n, (ll)at, (ll)inner);
    }
    cg_printf(&body, "    %sif (ctc_a < %lld) %s[ctc_i] = %s[%s];\n", k ? "else " : "", (ll)(at + n),
              cg_ref(e->c, in->res), cg_ref(e->c, v), idx);
    at += n;
  }
  cg_puts(&body, "  }\n");
  elementwise_kernel(e, i, in, &body);
  cg_buf_free(&body);
  return 0;
}

/* IOTA and RAND_UNIFORM: element i from i alone (the C target's formulas). */
static int emit_iota_rand(Ent *e, int i, const Inst *in) {
  const Func *f = e->f;
  const Type *r = ty(f, in->res);
  const char *ct = cg_ctype(r->dtype);
  Buf body = {0};
  cu_kbegin(e, &body);
  cg_printf(&body, cu_loop_head, (ll)(in->op == IR_IOTA ? r->dims[0] : ir_numel(r)));
  const char *y = cg_ref(e->c, in->res);
  if (in->op == IR_IOTA) {
    cg_printf(&body, "\n    %s[ctc_i] = (%s)(%lld + ctc_i * %lld);\n", y, ct, (ll)in->attr[0], (ll)in->attr[1]);
  } else {
    Buf off = {0};
    if (cu_is_literal(f, in->args[0])) cg_printf(&off, "%lld", (ll)def_of(f, in->args[0])->fattr);
    else cg_printf(&off, "%s[0]", cg_ref(e->c, in->args[0]));
    cg_printf(&body, " {\n    uint64_t ctc_z = ((uint64_t)%s + (uint64_t)ctc_i + 1u) * 0x9E3779B97F4A7C15u;\n", off.s);
    cg_puts(&body, "    ctc_z = (ctc_z ^ (ctc_z >> 30)) * 0xBF58476D1CE4E5B9u;\n    ctc_z = (ctc_z ^ (ctc_z >> 27)) * 0x94D049BB133111EBu;\n");
    cg_printf(&body, "    %s[ctc_i] = (%s)((ctc_z ^ (ctc_z >> 31)) >> 40) * (%s)(1.0 / 16777216.0);\n  }\n", y, ct, ct);
    cg_buf_free(&off);
  }
  elementwise_kernel(e, i, in, &body);
  cg_buf_free(&body);
  return 0;
}

/* UNSLICE: a result element on the slice's lattice takes g's element there, the
 * others 0. RESHAPE of a scalar constant: a fill. */
static int emit_unslice(Ent *e, int i, const Inst *in) {
  const Func *f = e->f;
  const Type *r = ty(f, in->res);
  Buf body = {0};
  cu_kbegin(e, &body);
  cg_printf(&body, cu_loop_head, (ll)ir_numel(r));
  if (in->op == IR_RESHAPE) {
    Buf lit = {0};
    cu_literal(f, in->args[0], &lit);
    cg_printf(&body, "\n    %s[ctc_i] = %s;\n", cg_ref(e->c, in->res), lit.s);
    cg_buf_free(&lit);
  } else {
    const Type *g = ty(f, in->args[0]);
    int64_t gst[IR_MAX_DIMS], inner = 1;
    cstrides(g, gst);
    cg_puts(&body, " {\n    int64_t ctc_g = 0;\n    int ctc_on = 1;\n");
    for (int k = r->ndim - 1; k >= 0; k--) {
      int64_t start = in->attr[2 * k], step = in->attr[2 * k + 1];
      cg_printf(&body, "    { const int64_t ctc_c = ctc_i / %lld %% %lld - %lld;\n", (ll)inner, (ll)r->dims[k], (ll)start);
      cg_printf(&body, "      ctc_on &= ctc_c >= 0 && ctc_c %% %lld == 0 && ctc_c / %lld < %lld;\n", (ll)step, (ll)step,
                (ll)g->dims[k]);
      cg_printf(&body, "      ctc_g += ctc_c / %lld * %lld; }\n", (ll)step, (ll)gst[k]);
      inner *= r->dims[k];
    }
    cg_printf(&body, "    %s[ctc_i] = ctc_on ? %s[ctc_g] : (%s)0;\n  }\n", cg_ref(e->c, in->res), cg_ref(e->c, in->args[0]),
              cg_ctype(r->dtype));
  }
  elementwise_kernel(e, i, in, &body);
  cg_buf_free(&body);
  return 0;
}

/* AVGPOOL2D: a thread per output, the window clipped as the C target's general
 * path clips it (the same sums and divisors on its fast path too).
 * AVGPOOL2D_BWD: a thread per input position, adding g / divisor of the windows
 * that hold it in the C target's window order. */
static int emit_avgpool(Ent *e, int i, const Inst *in) {
  const Func *f = e->f;
  int bwd = in->op == IR_AVGPOOL2D_BWD;
  const Type *x = bwd ? ty(f, in->res) : ty(f, in->args[0]), *g = bwd ? ty(f, in->args[0]) : ty(f, in->res);
  DType t = ty(f, in->res)->dtype;
  if (!ir_dtype_is_float(t) || cu_is_literal(f, in->args[0])) return -1;
  const char *ct = cg_ctype(t);
  int64_t H = x->dims[2], W = x->dims[3], OH = g->dims[2], OW = g->dims[3];
  int64_t kh = in->attr[0], kw = in->attr[1], sh = in->attr[2], sw = in->attr[3], ph = in->attr[4], pw = in->attr[5];
  int cip = in->attr[6] != 0;
  Buf win = {0};   /* the window (ctc_oh, ctc_ow): its clipped bounds and divisor */
  cg_printf(&win, "const int64_t ctc_h0 = ctc_oh * %lld - %lld, ctc_w0 = ctc_ow * %lld - %lld;\n", (ll)sh, (ll)ph, (ll)sw,
            (ll)pw);
  cg_printf(&win, "const int64_t ctc_h1 = ctc_h0 + %lld < %lld ? ctc_h0 + %lld : %lld;\n", (ll)kh, (ll)(H + ph), (ll)kh,
            (ll)(H + ph));
  cg_printf(&win, "const int64_t ctc_w1 = ctc_w0 + %lld < %lld ? ctc_w0 + %lld : %lld;\n", (ll)kw, (ll)(W + pw), (ll)kw,
            (ll)(W + pw));
  cg_printf(&win, "const int64_t ctc_ha = ctc_h0 < 0 ? 0 : ctc_h0, ctc_hb = ctc_h1 > %lld ? %lld : ctc_h1;\n", (ll)H, (ll)H);
  cg_printf(&win, "const int64_t ctc_wa = ctc_w0 < 0 ? 0 : ctc_w0, ctc_wb = ctc_w1 > %lld ? %lld : ctc_w1;\n", (ll)W, (ll)W);
  cg_printf(&win, "const int64_t ctc_cnt = %s;\n", cip ? "(ctc_h1 - ctc_h0) * (ctc_w1 - ctc_w0)"
                                                       : "(ctc_hb - ctc_ha) * (ctc_wb - ctc_wa)");
  Buf body = {0};
  cu_kbegin(e, &body);
  const char *xs = cg_ref(e->c, in->args[0]), *ys = cg_ref(e->c, in->res);
  cg_printf(&body, cu_loop_head, (ll)ir_numel(ty(f, in->res)));
  cg_puts(&body, " {\n");
  if (!bwd) {
    cg_printf(&body, "    const int64_t ctc_nc = ctc_i / %lld, ctc_oh = ctc_i / %lld %% %lld, ctc_ow = ctc_i %% %lld;\n",
              (ll)(OH * OW), (ll)OW, (ll)OH, (ll)OW);
    for (const char *l = win.s; *l;) {
      const char *nl = strchr(l, '\n');
      cg_printf(&body, "    %.*s\n", (int)(nl - l), l);
      l = nl + 1;
    }
    cg_printf(&body, "    const %s *ctc_xp = %s + ctc_nc * %lld;\n    double ctc_acc = 0;\n", ct, xs, (ll)(H * W));
    cg_printf(&body, "    for (int64_t ctc_ih = ctc_ha; ctc_ih < ctc_hb; ctc_ih++)\n"
                     "      for (int64_t ctc_iw = ctc_wa; ctc_iw < ctc_wb; ctc_iw++) ctc_acc += ctc_xp[ctc_ih * %lld + ctc_iw];\n",
              (ll)W);
    cg_printf(&body, "    %s[ctc_i] = (%s)(ctc_acc / ctc_cnt);\n  }\n", ys, ct);
  } else {
    cg_printf(&body, "    const int64_t ctc_nc = ctc_i / %lld, ctc_p = ctc_i %% %lld, ctc_y = ctc_p / %lld, ctc_x = ctc_p %% %lld;\n",
              (ll)(H * W), (ll)(H * W), (ll)W, (ll)W);
    cg_printf(&body, "    const %s *ctc_gp = %s + ctc_nc * %lld;\n    %s ctc_acc = 0;\n", ct, xs, (ll)(OH * OW), ct);
    /* the windows that hold (y, x): oh * sh - ph <= y < oh * sh - ph + kh, the same for ow */
    cg_printf(&body, "    const int64_t ctc_ya = ctc_y + %lld - %lld, ctc_xa = ctc_x + %lld - %lld;\n", (ll)(ph + 1), (ll)kh,
              (ll)(pw + 1), (ll)kw);
    cg_printf(&body, "    const int64_t ctc_oh0 = ctc_ya <= 0 ? 0 : (ctc_ya + %lld) / %lld, ctc_ow0 = ctc_xa <= 0 ? 0 : (ctc_xa + %lld) / %lld;\n",
              (ll)(sh - 1), (ll)sh, (ll)(sw - 1), (ll)sw);
    cg_printf(&body, "    const int64_t ctc_oh1 = (ctc_y + %lld) / %lld + 1, ctc_ow1 = (ctc_x + %lld) / %lld + 1;\n", (ll)ph, (ll)sh,
              (ll)pw, (ll)sw);
    cg_printf(&body, "    for (int64_t ctc_oh = ctc_oh0; ctc_oh < ctc_oh1 && ctc_oh < %lld; ctc_oh++) {\n", (ll)OH);
    cg_printf(&body, "      for (int64_t ctc_ow = ctc_ow0; ctc_ow < ctc_ow1 && ctc_ow < %lld; ctc_ow++) {\n", (ll)OW);
    for (const char *l = win.s; *l;) {
      const char *nl = strchr(l, '\n');
      cg_printf(&body, "        %.*s\n", (int)(nl - l), l);
      l = nl + 1;
    }
    cg_puts(&body, "        if (ctc_y < ctc_ha || ctc_y >= ctc_hb || ctc_x < ctc_wa || ctc_x >= ctc_wb) continue;\n");
    cg_printf(&body, "        ctc_acc += ctc_gp[ctc_oh * %lld + ctc_ow] / ctc_cnt;\n      }\n    }\n", (ll)OW);
    cg_printf(&body, "    %s[ctc_i] = ctc_acc;\n  }\n", ys);
  }
  cg_buf_free(&win);
  elementwise_kernel(e, i, in, &body);
  cg_buf_free(&body);
  return 0;
}

/* ---- pooling and embeddings --------------------------------------------------- */

/* MAXPOOL2D: a thread per output, the window scanned as the C target does
 * (first max; NaN wins). MAXPOOL2D_BWD: a thread per input position, adding the
 * gradients of the windows (in the C target's window order) whose max it is. */
static int emit_maxpool(Ent *e, int i, const Inst *in) {
  const Func *f = e->f;
  int bwd = in->op == IR_MAXPOOL2D_BWD;
  const Type *x = ty(f, in->args[0]), *r = ty(f, in->res), *g = bwd ? ty(f, in->args[1]) : r;
  DType t = r->dtype;
  if (!ir_dtype_is_float(t)) return -1;
  const char *ct = cg_ctype(t);
  int64_t H = x->dims[2], W = x->dims[3], OH = g->dims[2], OW = g->dims[3];
  const int64_t *a = in->attr;   /* kernel, stride, padding, dilation */
  Buf body = {0};
  cu_kbegin(e, &body);
  const char *xs = cg_ref(e->c, in->args[0]), *ys = cg_ref(e->c, in->res);
  cg_printf(&body, cu_loop_head, (ll)ir_numel(r));
  cg_puts(&body, " {\n");
  /* the window (oh, ow) of image nc: its max's position `at` (-1: none in bounds) */
  Buf scan = {0};
  cg_printf(&scan, "int64_t ctc_at = -1;\n%s ctc_mx = 0;\n", ct);
  cg_printf(&scan, "for (int64_t ctc_kh = 0; ctc_kh < %lld; ctc_kh++) {\n  const int64_t ctc_ih = ctc_oh * %lld - %lld + ctc_kh * %lld;\n"
                   "  if (ctc_ih < 0 || ctc_ih >= %lld) continue;\n", (ll)a[0], (ll)a[2], (ll)a[4], (ll)a[6], (ll)H);
  cg_printf(&scan, "  for (int64_t ctc_kw = 0; ctc_kw < %lld; ctc_kw++) {\n    const int64_t ctc_iw = ctc_ow * %lld - %lld + ctc_kw * %lld;\n"
                   "    if (ctc_iw < 0 || ctc_iw >= %lld) continue;\n", (ll)a[1], (ll)a[3], (ll)a[5], (ll)a[7], (ll)W);
  cg_printf(&scan, "    const %s ctc_v = ctc_xp[ctc_ih * %lld + ctc_iw];\n    if (ctc_at < 0 || ctc_v > ctc_mx || isnan(ctc_v)) ctc_mx = ctc_v, ctc_at = ctc_ih * %lld + ctc_iw;\n"
                   "  }\n}\n", ct, (ll)W, (ll)W);
  if (!bwd) {
    cg_printf(&body, "    const int64_t ctc_nc = ctc_i / %lld, ctc_oh = ctc_i / %lld %% %lld, ctc_ow = ctc_i %% %lld;\n", (ll)(OH * OW),
              (ll)OW, (ll)OH, (ll)OW);
    cg_printf(&body, "    const %s *ctc_xp = %s + ctc_nc * %lld;\n", ct, xs, (ll)(H * W));
    cg_printf(&body, "    {\n");
    for (const char *l = scan.s; *l;) {
      const char *nl = strchr(l, '\n');
      cg_printf(&body, "      %.*s\n", (int)(nl - l), l);
      l = nl + 1;
    }
    /* the C target starts from -INFINITY: a window with no input in bounds gives it */
    cg_printf(&body, "      %s[ctc_i] = ctc_at < 0 ? -INFINITY : ctc_mx;\n    }\n  }\n", ys);
  } else {
    const char *gs = cg_ref(e->c, in->args[1]);
    cg_printf(&body, "    const int64_t ctc_nc = ctc_i / %lld, ctc_p = ctc_i %% %lld, ctc_ph = ctc_p / %lld, ctc_pw = ctc_p %% %lld;\n", (ll)(H * W),
              (ll)(H * W), (ll)W, (ll)W);
    cg_printf(&body, "    const %s *ctc_xp = %s + ctc_nc * %lld, *ctc_gp = %s + ctc_nc * %lld;\n", ct, xs, (ll)(H * W), gs, (ll)(OH * OW));
    cg_printf(&body, "    %s ctc_acc = 0;\n", ct);
    /* the windows that can contain (ph, pw): oh with oh*s - pad <= ph <= oh*s - pad + (k-1)*d */
    cg_printf(&body, "    int64_t ctc_oh0 = ctc_ph + %lld - %lld, ctc_ow0 = ctc_pw + %lld - %lld;\n", (ll)a[4], (ll)((a[0] - 1) * a[6]),
              (ll)a[5], (ll)((a[1] - 1) * a[7]));
    cg_printf(&body, "    ctc_oh0 = ctc_oh0 <= 0 ? 0 : (ctc_oh0 + %lld) / %lld;\n    ctc_ow0 = ctc_ow0 <= 0 ? 0 : (ctc_ow0 + %lld) / %lld;\n",
              (ll)(a[2] - 1), (ll)a[2], (ll)(a[3] - 1), (ll)a[3]);
    cg_printf(&body, "    for (int64_t ctc_oh = ctc_oh0; ctc_oh < %lld && ctc_oh * %lld - %lld <= ctc_ph; ctc_oh++)\n", (ll)OH, (ll)a[2], (ll)a[4]);
    cg_printf(&body, "      for (int64_t ctc_ow = ctc_ow0; ctc_ow < %lld && ctc_ow * %lld - %lld <= ctc_pw; ctc_ow++) {\n", (ll)OW, (ll)a[3],
              (ll)a[5]);
    for (const char *l = scan.s; *l;) {
      const char *nl = strchr(l, '\n');
      cg_printf(&body, "        %.*s\n", (int)(nl - l), l);
      l = nl + 1;
    }
    cg_printf(&body, "        if (ctc_at == ctc_p) ctc_acc += ctc_gp[ctc_oh * %lld + ctc_ow];\n      }\n", (ll)OW);
    cg_printf(&body, "    %s[ctc_i] = ctc_acc;\n  }\n", ys);
  }
  cg_buf_free(&scan);
  elementwise_kernel(e, i, in, &body);
  cg_buf_free(&body);
  return 0;
}

/* EMBEDDING: a thread per output element. EMBEDDING_BWD: dw zeroed, then a thread per
 * column d and slice of the vocabulary (about 32768 threads in all) adding, in index order,
 * g's rows whose index (checked before) falls in its slice: each element of dw is one
 * thread's, summed in the C target's order. */
static int emit_embedding(Ent *e, int i, const Inst *in) {
  const Func *f = e->f;
  int bwd = in->op == IR_EMBEDDING_BWD;
  ValId ixv = in->args[bwd ? 0 : 1];
  if (cu_is_literal(f, ixv)) return -1;
  const Type *w = bwd ? ty(f, in->res) : ty(f, in->args[0]), *ix = ty(f, ixv);
  int64_t D = w->dims[1], n = ir_numel(ix);
  Buf body = {0};
  cu_kbegin(e, &body);
  const char *is = cg_ref(e->c, ixv), *ys = cg_ref(e->c, in->res);
  if (!bwd) {   /* the indices were checked in [0, V) before the kernel */
    const char *ws = cg_ref(e->c, in->args[0]);
    cg_printf(&body, cu_loop_head, (ll)(n * D));
    cg_printf(&body, " {\n    const int64_t ctc_ix = (int64_t)%s[ctc_i / %lld];\n    %s[ctc_i] = %s[ctc_ix * %lld + ctc_i %% %lld];\n  }\n",
              is, (ll)D, ys, ws, (ll)D, (ll)D);
  } else {
    const char *gs = cg_ref(e->c, in->args[1]);
    int64_t V = w->dims[0], nch = 32768 / (D > 0 ? D : 1);
    nch = nch < 1 ? 1 : nch > V ? V : nch;
    int64_t vc = (V + nch - 1) / nch;   /* vocabulary rows per slice */
    nch = (V + vc - 1) / vc;
    cg_printf(&body, cu_loop_head, (ll)(D * nch));
    if (nch > 1)
      cg_printf(&body, " {\n    const int64_t ctc_d = ctc_i %% %lld, ctc_v0 = ctc_i / %lld * %lld;   /* column ctc_d of %lld rows from ctc_v0 */\n",
                (ll)D, (ll)D, (ll)vc, (ll)vc);
    else
      cg_printf(&body, " {\n    const int64_t ctc_d = ctc_i;\n");
    cg_printf(&body, "    for (int64_t ctc_r = 0; ctc_r < %lld; ctc_r++) {\n      const int64_t ctc_ix = (int64_t)%s[ctc_r];\n", (ll)n, is);
    if (nch > 1) cg_printf(&body, "      if (ctc_ix < ctc_v0 || ctc_ix >= ctc_v0 + %lld) continue;   /* another slice's */\n", (ll)vc);
    if (in->attr[0]) cg_printf(&body, "      if (ctc_ix == %lld) continue;   /* padding_idx: no gradient */\n", (ll)in->attr[1]);
    cg_printf(&body, "      %s[ctc_ix * %lld + ctc_d] += %s[ctc_r * %lld + ctc_d];\n    }\n  }\n", ys, (ll)D, gs, (ll)D);
    n = D * nch;   /* the threads */
    e->uses_stream = 1;
    e->c->ref = e->href;   /* the host zeroes dw */
    cg_printf(e->host, "  CTC_CUDA(cudaMemsetAsync(%s, 0, sizeof(%s) * %lld, ctc_st));\n", cg_ref(e->c, in->res),
              cg_ctype(w->dtype), (ll)ir_numel(w));
    e->c->ref = e->kref;
  }
  cu_op_launch(e, i, in, NULL, "", &body, bwd ? n : n * D);
  cg_buf_free(&body);
  return 0;
}

int cu_data_op(Ent *e, int i, const Inst *in) {
  if ((in->op == IR_PERMUTE || in->op == IR_BROADCAST || in->op == IR_SLICE) && emit_copy(e, i, in) == 0) return 0;
  if ((in->op == IR_REDUCE_SUM || in->op == IR_REDUCE_MAX) && emit_reduce(e, i, in) == 0) return 0;
  if ((in->op == IR_MAXPOOL2D || in->op == IR_MAXPOOL2D_BWD) && emit_maxpool(e, i, in) == 0) return 0;
  if (in->op == IR_CONCAT && emit_concat(e, i, in) == 0) return 0;
  if ((in->op == IR_UNSLICE || (in->op == IR_RESHAPE && cu_is_literal(e->f, in->args[0]))) && emit_unslice(e, i, in) == 0) return 0;
  if ((in->op == IR_AVGPOOL2D || in->op == IR_AVGPOOL2D_BWD) && emit_avgpool(e, i, in) == 0) return 0;
  if ((in->op == IR_IOTA || in->op == IR_RAND_UNIFORM) && emit_iota_rand(e, i, in) == 0) return 0;
  if ((in->op == IR_EMBEDDING || in->op == IR_EMBEDDING_BWD) && emit_embedding(e, i, in) == 0) return 0;
  return -1;
}
