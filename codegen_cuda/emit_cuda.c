/* emit_cuda.c - model.cu / model.h from IR + schedule + memory plan (codegen_cuda.h).
 *
 * model.cu, top to bottom:
 *   header comment; includes (CUDA and cuBLAS, or ctc_cuda_emu.h under
 *   -DCTC_CUDA_EMULATE); CTC_CUDA / CTC_CUBLAS / CTC_LAUNCH (every call checked,
 *   the generated file and line in the message)
 *   device helpers of the C target (kernels.c: ctc_tanh_f32 ...) as __host__ __device__
 *   GEMM and im2col/col2im helpers the entries use
 *   the __global__ kernels of every entry (one per KN_ELEM / KN_ROW kernel and
 *   per instruction without cuBLAS), each with the model-line comments
 *   parameter data and the host init of the C target (<m>_host_init, emit_c.c)
 *   <m>_init / _set_stream / _free / _load / _save
 *   per entry (codegen_c/entry_c.c's walk with this file's CgEntryOps): <m>_<entry>_device
 *   (launches on m->stream) and <m>_<entry> (host pointers);
 *   distributed builds: its gradient buckets and the start/wait hooks between its
 *   kernels, from codegen_c/dist_c.c on the device arena (the communicator is
 *   runtime_min/rt_nccl.c's: NCCL on its own stream, ordered by events on m->stream)
 *   the ctc_model_desc of the C target (emit_c.c), main() under CTC_MAIN.
 *
 * Names are the C target's (cg_name over the same model names), so a kernel's
 * pointers read like the C loops: each kernel takes the arena base A and the
 * entry's inputs and declares the tensors it touches from their plan offsets. */
#include <stdlib.h>
#include <string.h>
#include "cuda_int.h"

/* ---- one entry: the CUDA target's table for the walk (codegen_c/entry_c.c) ----------- */

static const char *const cuda_names[] = {"blockIdx", "threadIdx", "blockDim", "gridDim", "dim3", "uint3",
                                          "warpSize", "cudaStream_t", "cublasHandle_t", "half", "std", NULL};

static int fail(Gen *g, const Func *f, const Inst *in, const char *what) {
  char where[256];
  cg_where(where, sizeof where, in->loc);
  fprintf(stderr, "%s: error: --target cuda: %s (%s in entry '%s') is not supported yet\n", where[0] ? where : "ctc",
          what, ir_ops[in->op].name, f->name);
  g->err = 1;
  return -1;
}

static int64_t align256(int64_t n) { return (n + 255) / 256 * 256; }

/* <m>_<entry>(m, host pointers...) and <m>_<entry>_device(m, device pointers...); the largest
 * entry's inputs and outputs size m->io. */
static void cu_proto(CgEntry *en) {
  Ent *e = en->tgt;
  Gen *g = e->g;
  const Func *f = en->f;
  cg_printf(&g->sig[en->fi], "int %s_%s(%s_t *m%s)", g->prefix, en->fname, g->prefix, en->params.len ? en->params.s : "");
  cg_printf(&g->dsig[en->fi], "int %s_%s_device(%s_t *m%s)", g->prefix, en->fname, g->prefix,
            en->params.len ? en->params.s : "");
  int64_t io = 0;
  for (int k = 0; k < f->inputs.len; k++) io += align256(ir_numel(ty(f, f->inputs.data[k])) * (int64_t)ir_dtype_size(ty(f, f->inputs.data[k])->dtype));
  for (int k = 0; k < f->outputs.len; k++)
    io += align256(ir_numel(ty(f, f->outputs.data[k])) * (int64_t)ir_dtype_size(ty(f, f->outputs.data[k])->dtype));
  if (io > g->io_bytes) g->io_bytes = io;
}

/* An index operand checked on the device before its kernel (<m>_index_check synchronises);
 * a constant outside the bound fails the entry always. */
static void cu_begin(CgEntry *en) {
  Ent *e = en->tgt;
  e->href = en->ref;
}

static void cu_index_check(CgEntry *en, const Inst *in) {
  Ent *e = en->tgt;
  const Func *f = en->f;
  ValId v;
  int64_t bound;
  CHECK(cg_index_operand(f, in, &v, &bound));
  if (cu_is_literal(f, v)) {
    cg_printf(en->c.out, "  { static const int64_t ctc_v[1] = {%lld};\n    return ctc_index_fail(m->error, sizeof m->error, "
                         "&ctc_ix_%s[%d], ctc_v, 1, %lld);\n  }\n", (ll)def_of(f, v)->fattr, en->fname, en->nix, (ll)bound);
    cg_index_site(&en->ixsites, f, in, "a constant");
  } else {
    cg_printf(en->c.out, "  { /* %s reads %s: every index in [0, %lld) (synchronises) */\n"
                         "    const int ctc_rc = %s_index_check(m, %s, %lld, %lld, &ctc_ix_%s[%d]);\n"
                         "    if (ctc_rc) return ctc_rc;\n  }\n", ir_ops[in->op].name, en->cname[v], (ll)bound, e->g->prefix,
              cg_ref(&en->c, v), (ll)ir_numel(ty(f, v)), (ll)bound, en->fname, en->nix);
    cg_index_site(&en->ixsites, f, in, en->cname[v]);
  }
  e->g->ixcheck = 1;
}

/* Kernel k: a fused kernel's launch; a GEMM (cuBLAS) and its epilogue's kernel; another
 * instruction's own kernel, or the C emitter's text over the grid or on one thread. */
static void cu_kernel_code(CgEntry *en, int k) {
  Ent *e = en->tgt;
  Gen *g = e->g;
  const Program *p = en->p;
  const Func *f = en->f;
  const KnSchedule *s = en->s;
  const Kernel *kn = &s->kernels.data[k];
  Buf *body = &en->body;
  if (kn->kind == KN_VIEW) {
    cg_emit_kernel(e->c, k);   /* comments only: views and constants have no code */
    return;
  }
  if (body->len) cg_puts(body, "\n");
  if (kn->kind == KN_ELEM || kn->kind == KN_ROW) {
    cu_launch_comments(e, kn, k, body);
    cu_fused_kernel(e, kn, k);
    return;
  }
  /* KN_OP: its instruction (constants and views have no code); KN_GEMM: the GEMM (cuBLAS),
   * then its epilogue as an elementwise kernel */
  int nep = 0;
  Kernel ep = kn->kind == KN_GEMM ? kn_epilogue(p, f, kn, &nep) : *kn;
  for (int i = kn->first; i <= (nep ? kn->first : kn->last) && !en->rc; i++) {
    const Inst *in = &f->insts.data[i];
    if (in->op == IR_CONST) continue;
    e->c->out = body, e->c->ref = e->href, e->c->ind = 2;
    if (ir_is_view(f, in->res) || s->fold[in->res]) {
      cg_comment(e->c, in);
      continue;
    }
    cg_comment(e->c, in);
    if (in->op == IR_MATMUL || in->op == IR_CONV2D || in->op == IR_CONV2D_BWD_INPUT || in->op == IR_CONV2D_BWD_WEIGHT) {
      int r = in->op == IR_MATMUL ? cu_matmul(e, in) : cu_conv(e, i, in);
      if (r < 0)
        en->rc = fail(g, f, in, in->op == IR_MATMUL ? "a GEMM of this dtype or layout" : "a non-float convolution");
      continue;
    }
    if (in->op == IR_ATTENTION || in->op == IR_ATTENTION_BWD) {
      if (cu_attention(e, i, in) < 0) en->rc = fail(g, f, in, "fused attention of this dtype");
      continue;
    }
    if (in->op == IR_ARGMAX && cu_argmax_split(e, i, in) == 0) continue;   /* few long fibers: a block each */
    if (cu_op_kernel(e, i) == 0 || cu_data_op(e, i, in) == 0) continue;
    cu_serial(e, i);
    if (g->k.gemm[DT_F32] || g->k.gemm[DT_F64] || g->k.im2col[DT_F32] || g->k.col2im[DT_F32])
      BUG("codegen_cuda: a one-thread kernel calls a host GEMM");
  }
  e->c->out = body, e->c->ref = e->href, e->c->ind = 2;
  if (nep && !en->rc) {
    cg_puts(body, "\n");
    cu_launch_comments(e, &ep, k, body);
    cu_fused_kernel(e, &ep, k);
  }
}

static void cu_kernel(CgEntry *en, int k) {
  Ent *e = en->tgt;
  cu_kernel_code(en, k);
  e->c->out = &en->body, e->c->ref = e->href, e->c->ind = 2;   /* the host code again */
}

/* Outputs are copied to the caller's device storage, on the stream. */
static void cu_output(CgEntry *en, int k, ValId v) {
  Ent *e = en->tgt;
  const Type *t = ty(en->f, v);
  const char *ct = cg_ctype(t->dtype);
  e->uses_stream = 1;
  if (cu_is_literal(en->f, v)) {
    Buf lit = {0};
    cu_literal(en->f, v, &lit);
    cg_printf(&en->body, "  { static const %s ctc_v = %s; CTC_CUDA(cudaMemcpyAsync(%s, &ctc_v, sizeof ctc_v, "
                         "cudaMemcpyHostToDevice, ctc_st)); }\n", ct, lit.s, en->oname[k]);
    cg_buf_free(&lit);
  } else {
    cg_printf(&en->body, "  CTC_CUDA(cudaMemcpyAsync(%s, %s, sizeof(%s) * %lld, cudaMemcpyDeviceToDevice, ctc_st));\n",
              en->oname[k], cg_ref(&en->c, v), ct, (ll)ir_numel(t));
  }
}

static void cu_update(CgEntry *en, ValId v, int param) {
  Ent *e = en->tgt;
  const Param *pr = &en->p->params.data[param];
  int64_t off = en->mp->param_offset[param];
  const Type *t = &pr->type;
  char pn[256];
  cg_comment_text(pn, sizeof pn, pr->name);
  e->uses_stream = 1;
  if (cu_is_literal(en->f, v)) {
    Buf lit = {0};
    cg_literal(&lit, t->dtype, def_of(en->f, v)->fattr);
    cg_printf(&en->body, "  { static const %s ctc_v = %s; CTC_CUDA(cudaMemcpyAsync(A + %lld, &ctc_v, sizeof ctc_v, "
                         "cudaMemcpyHostToDevice, ctc_st)); }  /* %s */\n", cg_ctype(t->dtype), lit.s, (ll)off, pn);
    cg_buf_free(&lit);
  } else {
    cg_printf(&en->body, "  CTC_CUDA(cudaMemcpyAsync(A + %lld, %s, %lld, cudaMemcpyDeviceToDevice, ctc_st));  /* %s := %s */\n",
              (ll)off, cg_ref(&en->c, v), (ll)(ir_numel(t) * (int64_t)ir_dtype_size(t->dtype)), pn, en->cname[v]);
  }
}

/* The device entry (host declarations of the device addresses it uses, then the body) and
 * the host-pointer entry that stages its arguments through m->pinned. */
static int cu_finish(CgEntry *en, Buf *out) {
  Ent *e = en->tgt;
  Gen *g = e->g;
  const Func *f = en->f;
  const FuncPlan *fp = en->fp;
  const char **cname = en->cname;
  int arena = en->arena | e->uses_arena;
  char tb[300];
  Buf decl = {0};
  for (int v = 0; v < f->values.len; v++) {
    if (!en->ref[v] || f->values.data[v].kind == V_INPUT) continue;
    const char *ct = cg_ctype(ty(f, v)->dtype);
    const Loc *l = &fp->loc[v];
    if (l->base >= 0) {
      cg_printf(&decl, "  const %s *%s = %s;\n", ct, cname[v], cname[f->inputs.data[l->base]]);
      continue;
    }
    CHECK(l->base == LOC_ARENA);
    arena = 1;
    cg_printf(&decl, "  %s *%s = (%s *)(A + %lld);  /* %s */\n", ct, cname[v], ct, (ll)l->offset,
              ir_type_str(ty(f, v), tb, sizeof tb));
  }
  for (int i = 0; i < f->insts.len; i++) {
    if (!en->sname[i]) continue;
    const Inst *in = &f->insts.data[i];
    arena = 1;
    cg_printf(&decl, "  %s *%s = (%s *)(A + %lld);  /* column scratch of %s */\n", cg_ctype(ty(f, in->res)->dtype),
              en->sname[i], cg_ctype(ty(f, in->res)->dtype), (ll)fp->scratch[i], cname[in->res]);
  }
  char where[256];
  cg_where(where, sizeof where, f->loc);
  if (en->nix) cg_printf(out, "static const ctc_index_site ctc_ix_%s[] = {\n%s};\n\n", en->fname, en->ixsites.s);
  if (en->dist.tables.len) cg_puts(out, en->dist.tables.s);
  cg_printf(out, "/* %s%s%s: device pointers, asynchronous on m->stream */\n", en->doc->s, where[0] ? "  -- " : "", where);
  cg_printf(out, "%s {\n", g->dsig[en->fi].s);
  cg_puts(out, "  if (!m || !m->dev");
  for (int k = 0; k < f->inputs.len; k++) cg_printf(out, " || !%s", cname[f->inputs.data[k]]);
  for (int k = 0; k < f->outputs.len; k++) cg_printf(out, " || !%s", en->oname[k]);
  cg_puts(out, ") return CTC_ERR_ARG;\n");
  cg_printf(out, "  if (m->dev_stale) {   /* the host copy was handed out (%s_params): it may be newer */\n"
                 "    CTC_CUDA(cudaMemcpyAsync(m->dev, m->arena, %s_PARAMS_BYTES, cudaMemcpyHostToDevice, m->stream));\n"
                 "    m->dev_stale = 0;\n  }\n", g->prefix, g->upper);
  if (f->updates.len) cg_puts(out, "  m->host_stale = 1;   /* the step updates the parameters on the device */\n");
  if (arena) cg_puts(out, "  unsigned char *A = m->dev;\n");
  if (e->uses_stream) cg_puts(out, "  cudaStream_t ctc_st = m->stream;\n");
  if (e->uses_blas) cg_puts(out, "  cublasHandle_t ctc_blas = m->blas;\n");
  if (e->uses_dnn) cg_printf(out, "#ifdef CTC_HAVE_CUDNN\n  const %s_dnn_t *ctc_dnn = (const %s_dnn_t *)m->dnn;\n#endif\n", g->prefix, g->prefix);
  if (decl.len) cg_puts(out, decl.s);
  if (en->body.len) cg_printf(out, "\n%s", en->body.s);
  cg_puts(out, "  return CTC_OK;\n}\n\n");
  cg_buf_free(&decl);

  /* the host-pointer entry */
  cg_printf(out, "/* %s: host pointers, through the page-locked m->pinned; synchronises */\n", en->doc->s);
  cg_printf(out, "%s {\n", g->sig[en->fi].s);
  cg_puts(out, "  if (!m || !m->dev");
  for (int k = 0; k < f->inputs.len; k++) cg_printf(out, " || !%s", cname[f->inputs.data[k]]);
  for (int k = 0; k < f->outputs.len; k++) cg_printf(out, " || !%s", en->oname[k]);
  cg_puts(out, ") return CTC_ERR_ARG;\n");
  int64_t o = 0;
  Buf call = {0};
  cg_printf(&call, "  const int ctc_rc = %s_%s_device(m", g->prefix, en->fname);
  for (int k = 0; k < f->inputs.len; k++) {
    ValId v = f->inputs.data[k];
    const Type *t = ty(f, v);
    int64_t bytes = ir_numel(t) * (int64_t)ir_dtype_size(t->dtype);
    cg_printf(out, "  memcpy(m->pinned + %lld, %s, %lld);\n", (ll)o, cname[v], (ll)bytes);
    cg_printf(out, "  CTC_CUDA(cudaMemcpyAsync(m->io + %lld, m->pinned + %lld, %lld, cudaMemcpyHostToDevice, m->stream));\n",
              (ll)o, (ll)o, (ll)bytes);
    cg_printf(&call, ", (const %s *)(m->io + %lld)", cg_ctype(t->dtype), (ll)o);
    o += align256(bytes);
  }
  int64_t o_out = o;
  for (int k = 0; k < f->outputs.len; k++) {
    const Type *t = ty(f, f->outputs.data[k]);
    cg_printf(&call, ", (%s *)(m->io + %lld)", cg_ctype(t->dtype), (ll)o);
    o += align256(ir_numel(t) * (int64_t)ir_dtype_size(t->dtype));
  }
  cg_puts(&call, ");\n  if (ctc_rc) return ctc_rc;\n");
  cg_puts(out, call.s);
  o = o_out;
  Buf back = {0};   /* the outputs out of m->pinned once the stream is done */
  for (int k = 0; k < f->outputs.len; k++) {
    const Type *t = ty(f, f->outputs.data[k]);
    int64_t bytes = ir_numel(t) * (int64_t)ir_dtype_size(t->dtype);
    cg_printf(out, "  CTC_CUDA(cudaMemcpyAsync(m->pinned + %lld, m->io + %lld, %lld, cudaMemcpyDeviceToHost, m->stream));\n",
              (ll)o, (ll)o, (ll)bytes);
    cg_printf(&back, "  memcpy(%s, m->pinned + %lld, %lld);\n", en->oname[k], (ll)o, (ll)bytes);
    o += align256(bytes);
  }
  cg_printf(out, "  CTC_CUDA(cudaStreamSynchronize(m->stream));\n%s  return CTC_OK;\n}\n\n", back.s ? back.s : "");
  cg_buf_free(&back);
  cg_buf_free(&call);
  return 0;
}

static const CgEntryOps cuda_entry_ops = {
    .reserved = cuda_names, .proto = cu_proto, .begin = cu_begin, .index_check = cu_index_check, .kernel = cu_kernel,
    .output = cu_output, .update = cu_update, .finish = cu_finish,
};

static int emit_entry(Gen *g, int fi, Buf *out) {
  unsigned char *kref = calloc((size_t)g->p->funcs.data[fi]->values.len + 1, 1);
  CHECK(kref);
  Ent e;
  memset(&e, 0, sizeof e);
  CgEntry en = {.ops = &cuda_entry_ops, .tgt = &e, .p = g->p, .mp = g->mp, .fi = fi, .prefix = g->prefix,
                .s = g->sched[fi], .k = &g->k, .doc = &g->doc[fi], .nbuckets = &g->nbuckets,
                /* the C target's buckets and hooks (dist_c.c) on the device arena; the communicator
                 * is rt_nccl.c's, told the stream the kernels run on */
                .dist_build = "build with nvcc -DCTC_NCCL, MPI's include and link flags,\n"
                              " * $RT/rt_nccl.c and -lnccl, as `ctc build --target cuda --distributed nccl` does",
                .dist_arena = "m->dev", .dist_stream = "m->stream"};
  e.g = g, e.en = &en, e.fi = fi, e.f = g->p->funcs.data[fi], e.fname = en.fname, e.c = &en.c, e.kref = kref,
  e.host = &en.body;   /* e.href: en.ref once the walk has made it (cu_begin) */
  int rc = cg_emit_entry(&en, out);
  free(kref);
  return rc;
}

/* ---- helpers written once into the file --------------------------------------------- */

static const char gemm_text[] =
    "/* Row-major C[M,N] = op(A)[M,K] op(B)[K,N] (+ beta C) through column-major cuBLAS:\n"
    " * C^T = op(B)^T op(A)^T, so the operands swap. count > 1: strided batches. */\n"
    "static cublasStatus_t ctc_gemm_$S(cublasHandle_t h, int ta, int tb, int64_t M, int64_t N, int64_t K, const $T *a,\n"
    "                                  int64_t lda, int64_t sa, const $T *b, int64_t ldb, int64_t sb, int beta, $T *c,\n"
    "                                  int64_t ldc, int64_t sc, int64_t count) {\n"
    "  const $T one = 1, bv = ($T)beta;\n"
    "  const cublasOperation_t oa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, ob = tb ? CUBLAS_OP_T : CUBLAS_OP_N;\n"
    "  if (count == 1)\n"
    "    return $G(h, ob, oa, (int)N, (int)M, (int)K, &one, b, (int)ldb, a, (int)lda, &bv, c, (int)ldc);\n"
    "  return $GStridedBatched(h, ob, oa, (int)N, (int)M, (int)K, &one, b, (int)ldb, sb, a, (int)lda, sa, &bv, c,\n"
    "                          (int)ldc, sc, (int)count);\n"
    "}\n\n";

/* The same GEMM over f32 buffers whose elements are bf16 (f16) values (autocast's rounded
 * operands): tensor cores through cublasGemmEx, ct CUBLAS_COMPUTE_32F_FAST_16BF (_16F). Their
 * down-conversion is exact for such values; products accumulate in f32. */
static const char gemm_lp_text[] =
    "static cublasStatus_t ctc_gemm_lp(cublasComputeType_t ct, cublasHandle_t h, int ta, int tb, int64_t M, int64_t N,\n"
    "                                  int64_t K, const float *a, int64_t lda, int64_t sa, const float *b, int64_t ldb,\n"
    "                                  int64_t sb, int beta, float *c, int64_t ldc, int64_t sc, int64_t count) {\n"
    "  const float one = 1, bv = (float)beta;\n"
    "  const cublasOperation_t oa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, ob = tb ? CUBLAS_OP_T : CUBLAS_OP_N;\n"
    "  if (count == 1)\n"
    "    return cublasGemmEx(h, ob, oa, (int)N, (int)M, (int)K, &one, b, CUDA_R_32F, (int)ldb, a, CUDA_R_32F, (int)lda,\n"
    "                        &bv, c, CUDA_R_32F, (int)ldc, ct, CUBLAS_GEMM_DEFAULT);\n"
    "  return cublasGemmStridedBatchedEx(h, ob, oa, (int)N, (int)M, (int)K, &one, b, CUDA_R_32F, (int)ldb, sb, a,\n"
    "                                    CUDA_R_32F, (int)lda, sa, &bv, c, CUDA_R_32F, (int)ldc, sc, (int)count, ct,\n"
    "                                    CUBLAS_GEMM_DEFAULT);\n"
    "}\n\n";

static const char grid_text[] =
    "/* Blocks of 256 threads for n elements (grid-stride loops cover the rest). */\n"
    "static unsigned ctc_grid(int64_t n) {\n"
    "  const int64_t b = (n + 255) / 256;\n"
    "  return (unsigned)(b < 1 ? 1 : b > 65535 ? 65535 : b);\n"
    "}\n\n";

static const char im2col_text[] =
    "/* ns images x[s] (stride xs) unfolded: col[s*cs + ((c*KH + kh)*KW + kw)*ldc + oh*OW + ow] =\n"
    " * x[s][c][oh*sh - ph + kh*dh][ow*sw - pw + kw*dw], 0 in the padding. */\n"
    "static __global__ void ctc_im2col_$S(const $T *x, int64_t xs, int64_t ns, int64_t C, int64_t H, int64_t W,\n"
    "                                    int64_t KH, int64_t KW, int64_t sh, int64_t sw, int64_t ph, int64_t pw,\n"
    "                                    int64_t dh, int64_t dw, int64_t OH, int64_t OW, $T *col, int64_t ldc,\n"
    "                                    int64_t cs) {\n"
    "  const int64_t ohw = OH * OW, ckk = C * KH * KW, n = ns * ckk * ohw;\n"
    "  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)blockDim.x * gridDim.x) {\n"
    "    const int64_t q = i % ohw, r = i / ohw % ckk, s = i / (ohw * ckk);\n"
    "    const int64_t ow = q % OW, oh = q / OW, kw = r % KW, kh = r / KW % KH, c = r / (KW * KH);\n"
    "    const int64_t ih = oh * sh - ph + kh * dh, iw = ow * sw - pw + kw * dw;\n"
    "    col[s * cs + r * ldc + q] = ih >= 0 && ih < H && iw >= 0 && iw < W ? x[s * xs + (c * H + ih) * W + iw] : ($T)0;\n"
    "  }\n"
    "}\n\n";

static const char col2im_text[] =
    "/* The adjoint of im2col for ns images: x[s][c][ih][iw] = the sum over the window\n"
    " * positions (kh, then kw: the C target's order) that read it of col[s*cs + ...]. */\n"
    "static __global__ void ctc_col2im_$S(const $T *col, int64_t cs, int64_t ns, int64_t C, int64_t H, int64_t W,\n"
    "                                    int64_t KH, int64_t KW, int64_t sh, int64_t sw, int64_t ph, int64_t pw,\n"
    "                                    int64_t dh, int64_t dw, int64_t OH, int64_t OW, $T *x, int64_t xs) {\n"
    "  const int64_t n = ns * C * H * W;\n"
    "  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)blockDim.x * gridDim.x) {\n"
    "    const int64_t iw = i % W, ih = i / W % H, c = i / (H * W) % C, s = i / (C * H * W);\n"
    "    $T acc = 0;\n"
    "    for (int64_t kh = 0; kh < KH; kh++) {\n"
    "      const int64_t th = ih + ph - kh * dh;\n"
    "      if (th < 0 || th % sh) continue;\n"
    "      const int64_t oh = th / sh;\n"
    "      if (oh >= OH) continue;\n"
    "      for (int64_t kw = 0; kw < KW; kw++) {\n"
    "        const int64_t tw = iw + pw - kw * dw;\n"
    "        if (tw < 0 || tw % sw) continue;\n"
    "        const int64_t ow = tw / sw;\n"
    "        if (ow >= OW) continue;\n"
    "        acc += col[s * cs + ((c * KH + kh) * KW + kw) * (OH * OW) + oh * OW + ow];\n"
    "      }\n"
    "    }\n"
    "    x[s * xs + (c * H + ih) * W + iw] = acc;\n"
    "  }\n"
    "}\n\n";

static void instantiate(Buf *b, const char *text, DType t) {
  for (const char *s = text; *s; s++) {
    if (s[0] == '$' && s[1] == 'T') cg_puts(b, cg_ctype(t)), s++;
    else if (s[0] == '$' && s[1] == 'S') cg_puts(b, cg_dt_suffix(t)), s++;
    else if (s[0] == '$' && s[1] == 'G') cg_puts(b, t == DT_F64 ? "cublasDgemm" : "cublasSgemm"), s++;
    else cg_printf(b, "%c", *s);
  }
}

/* The C target's helpers, callable from kernels: every `static` function
 * becomes `static __host__ __device__`. */
static void device_helpers(Buf *b, Kernels *k) {
  k->simd = 0;
  Buf t = {0};
  cg_emit_kernels(&t, k);
  for (const char *s = t.s; s && *s;) {
    const char *nl = strchr(s, '\n');
    size_t n = nl ? (size_t)(nl - s) + 1 : strlen(s);
    if (!strncmp(s, "static ", 7)) cg_printf(b, "static __host__ __device__ %.*s", (int)(n - 7), s + 7);
    else cg_printf(b, "%.*s", (int)n, s);
    s += n;
  }
  cg_buf_free(&t);
}

/* ---- files ------------------------------------------------------------------------ */

static const char *basename_of(const char *path) {
  const char *s = path ? strrchr(path, '/') : NULL;
  return s ? s + 1 : path ? path : "?";
}

static void emit_header(Gen *g, FILE *h, const char *src) {
  const char *P = g->prefix, *U = g->upper;
  const MemPlan *mp = g->mp;
  char cls[256];
  cg_comment_text(cls, sizeof cls, g->p->class_name ? g->p->class_name : "?");
  fprintf(h, "/* %s.h - generated by ctc from %s (class %s), CUDA target. Do not edit. */\n", P, src, cls);
  fprintf(h, "#ifndef CTC_GENERATED_%s_H\n#define CTC_GENERATED_%s_H\n\n", U, U);
  fprintf(h, "#include <stddef.h>\n#include <stdint.h>\n");
  fprintf(h, "#ifdef CTC_CUDA_EMULATE\n#include \"ctc_cuda_emu.h\"   /* runtime_min/cuda_emu: CUDA on the CPU */\n"
             "#ifdef CTC_HAVE_CUDNN\n#include \"ctc_cudnn_emu.h\"\n#endif\n"
             "#else\n#include <cuda_runtime.h>\n#include <cublas_v2.h>\n"
             "#ifdef CTC_HAVE_CUDNN   /* convolutions through cuDNN (ctc build defines it when cuDNN is installed) */\n"
             "#include <cudnn.h>\n#endif\n#endif\n#include \"ctc_rt.h\"\n\n");
  fprintf(h, "#ifdef __cplusplus\nextern \"C\" {\n#endif\n\n");
  fprintf(h, "/* Arena bytes: parameters (%lld), then the activations of the running entry (%lld). */\n",
          (ll)mp->params_bytes, (ll)(mp->arena_bytes - mp->params_bytes));
  fprintf(h, "#define %s_ARENA_BYTES ((size_t)%lld)\n#define %s_PARAMS_BYTES ((size_t)%lld)\n\n", U, (ll)mp->arena_bytes, U,
          (ll)mp->params_bytes);
  fprintf(h, "/* A model instance on the device. */\n");
  fprintf(h, "typedef struct %s_t {\n"
             "  unsigned char *arena;   /* host: the parameters' host copy (load/save, the host-pointer entries) */\n"
             "  size_t arena_bytes;\n"
             "  unsigned char *dev;     /* device: parameters, then activations (one cudaMalloc, with io) */\n"
             "  unsigned char *io;      /* device: the host-pointer entries' inputs and outputs */\n"
             "  unsigned char *pinned;  /* host, page-locked: those inputs and outputs on their way */\n"
             "  cudaStream_t stream;    /* where everything runs (default 0) */\n"
             "  cublasHandle_t blas;\n"
             "  void *dnn;              /* cuDNN: handle, descriptors, algorithms (builds with CTC_HAVE_CUDNN) */\n"
             "  char error[512];        /* why the last entry failed: an index out of range (CTC_ERR_INDEX) */\n"
             "  int host_stale;         /* the device's parameters are newer (training steps): %s_params downloads */\n"
             "  int dev_stale;          /* the host copy may be newer (%s_params handed it out): the next entry uploads */\n"
             "} %s_t;\n\n", P, P, P, P);
  fprintf(h, "size_t %s_arena_bytes(void);\n", P);
  fprintf(h, "/* Takes the host `arena` (at least %s_ARENA_BYTES bytes, 64-byte aligned) for the\n"
             " * parameters' host copy, initialises them as the model does, allocates the device\n"
             " * arena (one cudaMalloc: nothing is allocated after) and uploads them. */\n", U);
  fprintf(h, "int %s_init(%s_t *m, void *arena, size_t bytes);\n", P, P);
  fprintf(h, "int %s_set_stream(%s_t *m, cudaStream_t stream);\n", P, P);
  fprintf(h, "void %s_free(%s_t *m);   /* the device arena and the cuBLAS handle */\n", P, P);
  fprintf(h, "/* The parameters live on the device: training steps update them there and the host copy\n"
             " * m->arena is brought up to date only when asked for. %s_params: that host copy, up to\n"
             " * date, to read or write (the next entry uploads it again); NULL after a CUDA error. */\n", P);
  fprintf(h, "unsigned char *%s_params(%s_t *m);\n", P, P);
  fprintf(h, "/* Parameters by their PyTorch state_dict names (through the host copy). */\n");
  fprintf(h, "int %s_load(%s_t *m, const char *safetensors_path);\n", P, P);
  fprintf(h, "int %s_save(%s_t *m, const char *path);\n", P, P);
  fprintf(h, "/* Why the last load or save (or an index check) failed, with its detail; \"\" when none. */\n");
  fprintf(h, "const char *%s_error(const %s_t *m);\n\n", P, P);
  fprintf(h, "/* Entry points: <entry>(host pointers; synchronous) and <entry>_device (device\n"
             " * pointers; queued on m->stream). CTC_OK or an error code (ctc_strerror). */\n");
  for (int fi = 0; fi < g->p->funcs.len; fi++)
    fprintf(h, "/* %s */\n%s;\n%s;\n", g->doc[fi].s, g->sig[fi].s, g->dsig[fi].s);
  fprintf(h, "\n/* The model as the runtime sees it (ctc_main: the host-pointer entries). */\n");
  fprintf(h, "extern const ctc_model_desc %s_desc;\n\n", P);
  fprintf(h, "#ifdef __cplusplus\n}\n#endif\n#endif\n");
}

static void emit_api(Gen *g, Buf *b) {
  const char *P = g->prefix, *U = g->upper;
  cg_printf(b, "int %s_init(%s_t *m, void *arena, size_t bytes) {\n", P, P);
  if (g->p->distributed)   /* rt_nccl.c picks this rank's GPU: before anything is allocated on one */
    cg_puts(b, "  (void)ctc_comm_world();  /* a distributed build: this rank's GPU (its index on its node) */\n");
  cg_printf(b, "  if (!m) return CTC_ERR_ARG;\n  %s_host_t h;\n  const int rc = %s_host_init(&h, arena, bytes);\n"
               "  if (rc) return rc;\n  memset(m, 0, sizeof *m);\n  m->arena = h.arena;\n  m->arena_bytes = h.arena_bytes;\n",
            P, P);
  cg_printf(b, "  CTC_CUDA(cudaMalloc((void **)&m->dev, %s_DEVICE_BYTES));\n  m->io = m->dev + %s_IO_OFFSET;\n", U, U);
  cg_printf(b, "  CTC_CUDA(cudaMallocHost((void **)&m->pinned, %s_DEVICE_BYTES - %s_IO_OFFSET));\n", U, U);
  cg_puts(b, "  CTC_CUBLAS(cublasCreate(&m->blas));\n");
  if (g->dnn.n) cg_printf(b, "#ifdef CTC_HAVE_CUDNN\n  {\n    const int ctc_rc = %s_dnn_init(m);\n    if (ctc_rc) return ctc_rc;\n  }\n#endif\n", P);
  if (g->opt && g->opt->tf32) cg_puts(b, "  CTC_CUBLAS(cublasSetMathMode(m->blas, CUBLAS_TF32_TENSOR_OP_MATH));   /* --tf32 */\n");
  cg_printf(b, "  CTC_CUDA(cudaMemcpy(m->dev, m->arena, %s_PARAMS_BYTES, cudaMemcpyHostToDevice));\n  return CTC_OK;\n}\n\n", U);
  cg_printf(b, "int %s_set_stream(%s_t *m, cudaStream_t stream) {\n  if (!m || !m->dev) return CTC_ERR_ARG;\n"
               "  m->stream = stream;\n  CTC_CUBLAS(cublasSetStream(m->blas, stream));\n", P, P);
  if (g->dnn.n) cg_printf(b, "#ifdef CTC_HAVE_CUDNN\n  CTC_CUDNN(cudnnSetStream(((%s_dnn_t *)m->dnn)->h, stream));\n#endif\n", P);
  cg_puts(b, "  return CTC_OK;\n}\n\n");
  cg_printf(b, "void %s_free(%s_t *m) {\n  if (!m || !m->dev) return;\n", P, P);
  if (g->dnn.n) cg_printf(b, "#ifdef CTC_HAVE_CUDNN\n  %s_dnn_free(m);\n#endif\n", P);
  cg_puts(b, "  cublasDestroy(m->blas);\n  cudaFree(m->dev);\n  cudaFreeHost(m->pinned);\n  m->dev = m->io = m->pinned = NULL;\n}\n\n");
  cg_printf(b, "/* Downloads the parameters when the device has newer ones. */\n"
               "static int %s_params_pull(%s_t *m) {\n  if (m->host_stale) {\n", P, P);
  cg_printf(b, "    CTC_CUDA(cudaMemcpyAsync(m->arena, m->dev, %s_PARAMS_BYTES, cudaMemcpyDeviceToHost, m->stream));\n"
               "    CTC_CUDA(cudaStreamSynchronize(m->stream));\n    m->host_stale = 0;\n  }\n  return CTC_OK;\n}\n\n", U);
  cg_printf(b, "unsigned char *%s_params(%s_t *m) {\n  if (!m || !m->dev || %s_params_pull(m) != CTC_OK) return NULL;\n"
               "  m->dev_stale = 1;\n  return m->arena;\n}\n\n", P, P, P);
  cg_printf(b, "int %s_load(%s_t *m, const char *safetensors_path) {\n", P, P);
  cg_puts(b, "  if (!m || !m->arena || !m->dev || !safetensors_path) return CTC_ERR_ARG;\n");
  cg_printf(b, "  ctc_error err;\n  err.msg[0] = 0;\n  const int rc = ctc_model_load(&%s_desc, m, safetensors_path, &err);   /* through %s_params */\n"
               "  if (ctc_error_set(m->error, sizeof m->error, rc, \"%%s\", err.msg[0] ? err.msg : ctc_strerror(rc)))\n"
               "    return rc;\n", P, P);
  cg_printf(b, "  CTC_CUDA(cudaMemcpyAsync(m->dev, m->arena, %s_PARAMS_BYTES, cudaMemcpyHostToDevice, m->stream));\n"
               "  CTC_CUDA(cudaStreamSynchronize(m->stream));\n  m->dev_stale = 0;\n  return CTC_OK;\n}\n\n", U);
  cg_printf(b, "int %s_save(%s_t *m, const char *path) {\n", P, P);
  cg_puts(b, "  if (!m || !m->arena || !m->dev || !path) return CTC_ERR_ARG;\n");
  cg_printf(b, "  ctc_error err;\n  err.msg[0] = 0;\n  const int rc = ctc_model_save(&%s_desc, m, path, &err);   /* through %s_params */\n"
               "  return ctc_error_set(m->error, sizeof m->error, rc, \"%%s\", err.msg[0] ? err.msg : ctc_strerror(rc));\n"
               "}\n\n", P, P);
  cg_printf(b, "const char *%s_error(const %s_t *m) { return m ? m->error : \"\"; }\n\n", P, P);
}

int cg_cuda_emit(const Program *p, const MemPlan *plan, KnSchedule *const *sched, const CudaOptions *opt, FILE *cu_out,
                 FILE *h_out, const char *h_name) {
  static const char *const api[] = {"arena_bytes", "init", "load", "save", "desc", "error", "t", "set_stream", "free", "host",
                                    "params", NULL};
  Gen g;
  memset(&g, 0, sizeof g);
  g.p = p;
  g.mp = plan;
  g.sched = sched;
  g.opt = opt;
  cg_ident(g.prefix, sizeof g.prefix, p->model_name ? p->model_name : "net");
  for (int i = 0; g.prefix[i]; i++)
    g.upper[i] = (char)(g.prefix[i] >= 'a' && g.prefix[i] <= 'z' ? g.prefix[i] - 'a' + 'A' : g.prefix[i]);
  for (int i = 0; i < p->funcs.len; i++) {
    char a[128], b[160];
    cg_ident(a, sizeof a, p->funcs.data[i]->name);
    for (int k = 0; api[k]; k++)
      if (!strcmp(a, api[k]) || (!strncmp(a, "host_", 5))) {
        fprintf(stderr, "ctc: error: entry '%s' clashes with the generated %s_%s\n", a, g.prefix, a);
        return -1;
      }
    for (int j = 0; j < p->funcs.len; j++) {
      cg_ident(b, sizeof b, p->funcs.data[j]->name);
      size_t n = strlen(b);
      if ((j < i && !strcmp(a, b)) || (strlen(a) == n + 7 && !strncmp(a, b, n) && !strcmp(a + n, "_device"))) {
        fprintf(stderr, "ctc: error: entry '%s' clashes with another entry (or its %s_%s_device)\n", a, g.prefix, b);
        return -1;
      }
    }
  }
  g.sig = calloc((size_t)p->funcs.len + 1, sizeof(Buf));
  g.dsig = calloc((size_t)p->funcs.len + 1, sizeof(Buf));
  g.doc = calloc((size_t)p->funcs.len + 1, sizeof(Buf));
  CHECK(g.sig && g.dsig && g.doc);
  Buf entries = {0}, init = {0}, data = {0}, desc = {0}, helpers = {0}, api_b = {0}, api_pre = {0};
  int rc = 0;
  for (int fi = 0; fi < p->funcs.len && !rc; fi++) rc = emit_entry(&g, fi, &entries);
  if (!rc) {
    char hp[80];
    snprintf(hp, sizeof hp, "%s_host", g.prefix);
    cg_emit_host_init(&data, &init, &g.k, p, plan, hp);
    cg_emit_desc_for(&desc, p, plan, g.prefix, 1);
    emit_api(&g, &api_b);
    device_helpers(&helpers, &g.k);
    for (int t = 0; t < DT_COUNT; t++) {
      if (g.gemm[t]) instantiate(&helpers, gemm_text, (DType)t);
      if (g.im2col[t]) instantiate(&helpers, im2col_text, (DType)t);
      if (g.col2im[t]) instantiate(&helpers, col2im_text, (DType)t);
    }
    if (g.gemm_lp) cg_puts(&helpers, gemm_lp_text);
    if (g.attn_tiles) cu_attention_support(&helpers);
    if (g.grid) cg_puts(&helpers, grid_text);
    cg_dnn_support(&api_pre, &g.dnn, g.prefix, opt && opt->tf32);

    char src[1024], stem[256], cls[256];
    cg_comment_text(src, sizeof src, ir_source_name(p));
    cg_comment_text(cls, sizeof cls, p->class_name ? p->class_name : "?");
    snprintf(stem, sizeof stem, "%s", basename_of(h_name));
    char *dot = strrchr(stem, '.');
    if (dot) *dot = 0;
    const char *P = g.prefix, *U = g.upper;
    FILE *c = cu_out;
    fprintf(c, "/* %s.cu - generated by ctc from %s (class %s), CUDA target. Do not edit.\n *\n", stem, src, cls);
    fprintf(c, " * Entry points (each also as <entry>_device, on device pointers):\n");
    for (int fi = 0; fi < p->funcs.len; fi++) fprintf(c, " *   %s\n", g.doc[fi].s);
    fprintf(c, " * Device arena: %lld bytes = parameters %lld + activations %lld, then %lld bytes of entry I/O.\n *\n",
            (ll)plan->arena_bytes, (ll)plan->params_bytes, (ll)(plan->arena_bytes - plan->params_bytes), (ll)g.io_bytes);
    fprintf(c, " * Build a program around it with the runtime (RT = ctc's runtime_min folder):\n"
               " *   nvcc -O2 -DCTC_MAIN %s.cu -I$RT $RT/rt_*.c -lcublas -lz -o %s\n"
               " * or without a GPU (CUDA emulated on the CPU, kernels block by block):\n"
               " *   g++ -x c++ -O1 -fopenmp -DCTC_CUDA_EMULATE -DCTC_MAIN %s.cu -I$RT -I$RT/cuda_emu\n"
               " *       (with $RT/rt_*.c compiled as C) -lz -o %s\n"
               " * Usage: ./%s --help%s */\n", stem, stem, stem, stem, stem,
               p->distributed ? "\n * Distributed (the training entries all-reduce their gradients with NCCL): add\n"
                                " *   -DCTC_NCCL $RT/rt_nccl.c, MPI's flags (mpicc --showme) and -lnccl, as `ctc build\n"
                                " *   --target cuda --distributed nccl` does; run under mpirun, one rank per GPU"
                              : "");
    fprintf(c, "#include \"%s\"\n#include \"ctc_rt.h\"\n\n", h_name);
    fprintf(c, "#include <math.h>\n#include <stdint.h>\n#include <stdio.h>\n#include <stdlib.h>\n#include <string.h>\n\n");
    fprintf(c, "#define restrict __restrict__\n/* the C target's loops run as they are inside one-thread kernels */\n"
               "#define CTC_OMP_FOR\n#define CTC_OMP_SIMD\n#define CTC_OMP_FOR_SIMD\n\n");
    fprintf(c, "/* Every CUDA and cuBLAS call is checked; the message names this file and line. */\n"
               "#define CTC_CUDA(call)                                                                    \\\n"
               "  do {                                                                                \\\n"
               "    const cudaError_t ctc_e = (call);                                                 \\\n"
               "    if (ctc_e != cudaSuccess) {                                                       \\\n"
               "      fprintf(stderr, \"%%s:%%d: %%s: %%s\\n\", __FILE__, __LINE__, #call, cudaGetErrorString(ctc_e)); \\\n"
               "      return CTC_ERR_DEVICE;                                                          \\\n"
               "    }                                                                                 \\\n"
               "  } while (0)\n"
               "#define CTC_CUBLAS(call)                                                                  \\\n"
               "  do {                                                                                \\\n"
               "    const cublasStatus_t ctc_s = (call);                                              \\\n"
               "    if (ctc_s != CUBLAS_STATUS_SUCCESS) {                                             \\\n"
               "      fprintf(stderr, \"%%s:%%d: %%s: cuBLAS status %%d\\n\", __FILE__, __LINE__, #call, (int)ctc_s);  \\\n"
               "      return CTC_ERR_DEVICE;                                                          \\\n"
               "    }                                                                                 \\\n"
               "  } while (0)\n"
               "/* A kernel launch (sync: the kernel uses __syncthreads), checked. */\n"
               "#ifdef CTC_CUDA_EMULATE\n"
               "#define CTC_LAUNCH_(k, grid, block, sync, st, ...) ctc_emu_launch((grid), (block), (sync), [&] { k(__VA_ARGS__); })\n"
               "#else\n"
               "#define CTC_LAUNCH_(k, grid, block, sync, st, ...) k<<<(grid), (block), 0, (st)>>>(__VA_ARGS__)\n"
               "#endif\n"
               "#define CTC_LAUNCH(k, grid, block, sync, st, ...)                                         \\\n"
               "  do {                                                                                \\\n"
               "    CTC_LAUNCH_(k, grid, block, sync, st, __VA_ARGS__);                               \\\n"
               "    const cudaError_t ctc_e = cudaGetLastError();                                     \\\n"
               "    if (ctc_e != cudaSuccess) {                                                       \\\n"
               "      fprintf(stderr, \"%%s:%%d: launch of %%s: %%s\\n\", __FILE__, __LINE__, #k, cudaGetErrorString(ctc_e)); \\\n"
               "      return CTC_ERR_DEVICE;                                                          \\\n"
               "    }                                                                                 \\\n"
               "  } while (0)\n\n");
    fprintf(c, "/* the device allocation: the arena, then the entries' I/O */\n");
    fprintf(c, "#define %s_IO_OFFSET ((size_t)%lld)\n#define %s_DEVICE_BYTES ((size_t)%lld)\n", U,
            (ll)align256(plan->arena_bytes), U, (ll)(align256(plan->arena_bytes) + (g.io_bytes ? g.io_bytes : 256) + 256));
    fprintf(c, "#define %s_FLAG_OFFSET ((size_t)%lld)   /* the index checks' flag (an int) */\n\n", U,
            (ll)(align256(plan->arena_bytes) + (g.io_bytes ? g.io_bytes : 256)));
    if (helpers.len) fputs(helpers.s, c);
    if (g.kern.len) fputs(g.kern.s, c);
    fprintf(c, "/* ---- parameters: the C target's init, on the host copy ---- */\n\n");
    fprintf(c, "typedef struct %s_host_t {\n  unsigned char *arena;\n  size_t arena_bytes;\n} %s_host_t;\n", P, P);
    fprintf(c, "#define %s_HOST_ARENA_BYTES %s_ARENA_BYTES\n#define %s_host_desc %s_desc\n\n", U, U, P, P);
    if (data.len) fputs(data.s, c);
    fputs(init.s, c);
    if (g.ixcheck) {   /* the index checks: a flag word after the I/O, set by any index out of range */
      fprintf(c, "/* ---- index checks: every value of ix[n] in [0, bound), else CTC_ERR_INDEX and the report ---- */\n\n");
      fprintf(c, "static __global__ void %s_index_kernel(const int64_t *ix, int64_t n, int64_t bound, int *flag) {\n", P);
      fprintf(c, "  for (int64_t ctc_i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; ctc_i < n; ctc_i += (int64_t)blockDim.x * gridDim.x)\n"
                 "    if ((uint64_t)ix[ctc_i] >= (uint64_t)bound) *flag = 1;   /* every writer writes 1 */\n}\n\n");
      fprintf(c, "static int %s_index_check(%s_t *m, const int64_t *ix, int64_t n, int64_t bound, const ctc_index_site *site) {\n"
                 "  int *flag = (int *)(m->dev + %s_FLAG_OFFSET), *seen = (int *)(m->pinned + (%s_FLAG_OFFSET - %s_IO_OFFSET));\n"
                 "  const int64_t blocks = (n + %d) / %d;\n"
                 "  CTC_CUDA(cudaMemsetAsync(flag, 0, sizeof(int), m->stream));\n"
                 "  CTC_LAUNCH(%s_index_kernel, blocks < %d ? blocks : %d, %d, 0, m->stream, ix, n, bound, flag);\n"
                 "  CTC_CUDA(cudaMemcpyAsync(seen, flag, sizeof(int), cudaMemcpyDeviceToHost, m->stream));\n"
                 "  CTC_CUDA(cudaStreamSynchronize(m->stream));\n"
                 "  if (!*seen) return CTC_OK;\n"
                 "  int64_t *h = (int64_t *)malloc(sizeof(int64_t) * (size_t)n);   /* the report names the first bad element */\n"
                 "  if (h && cudaMemcpy(h, ix, sizeof(int64_t) * (size_t)n, cudaMemcpyDeviceToHost) != cudaSuccess) free(h), h = NULL;\n"
                 "  const int rc = ctc_index_fail(m->error, sizeof m->error, site, h, h ? n : 0, bound);\n"
                 "  free(h);\n  return rc;\n}\n\n",
              P, P, U, U, U, ELEM_BLOCK - 1, ELEM_BLOCK, P, MAX_GRID, MAX_GRID, ELEM_BLOCK);
    }
    if (api_pre.len) fputs(api_pre.s, c);
    fputs(api_b.s, c);
    if (entries.len) fputs(entries.s, c);
    fputs(desc.s, c);
    fprintf(c, "\n#ifdef CTC_MAIN\nint main(int argc, char **argv) { return ctc_main(argc, argv, &%s_desc); }\n#endif\n", P);
    emit_header(&g, h_out, src);
  }
  for (int fi = 0; fi < p->funcs.len; fi++) {
    cg_buf_free(&g.sig[fi]);
    cg_buf_free(&g.dsig[fi]);
    cg_buf_free(&g.doc[fi]);
  }
  free(g.sig);
  free(g.dsig);
  free(g.doc);
  cg_buf_free(&entries);
  cg_buf_free(&init);
  cg_buf_free(&data);
  cg_buf_free(&desc);
  cg_buf_free(&helpers);
  cg_buf_free(&api_b);
  cg_buf_free(&api_pre);
  cg_buf_free(&g.dnn.rows);
  cg_buf_free(&g.kern);
  if (rc) return -1;
  return ferror(cu_out) || ferror(h_out) ? -1 : 0;
}
