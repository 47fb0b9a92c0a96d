/* kernels.c - helper functions written once into a generated model.c.
 *
 * The texts below are templates over $T (the C element type) and $S (the
 * dtype suffix: f32, f64, ...). Only the helpers an entry uses are written,
 * so the file has no unused static functions (-Wunused-function). With
 * -DCTC_HAVE_CBLAS, f32/f64 GEMMs call cblas_sgemm/dgemm (ctc_gemm only for the
 * narrow column remainders OpenBLAS's small-matrix kernel would malloc for).
 *
 * A hosted file keeps the OpenMP, OpenBLAS and x86 SIMD branches as #ifdef's for the C
 * compiler to choose; a --freestanding one (Kernels.freestanding) is written without them:
 * a helper with such branches is a list of parts (Part), each with its freestanding text,
 * and the x86 GEMMs are not written at all (the NEON GEMM stays: <arm_neon.h> is
 * freestanding). */
#include <string.h>
#include "cg_int.h"

const char *cg_dt_suffix(DType t) { return ir_dtype_name(t); }

/* A part of a helper's text: hosted, and fs for a --freestanding file ("" none of it, NULL the
 * hosted text: nothing in it depends on OpenMP, OpenBLAS or an x86 ISA). */
typedef struct Part {
  const char *hosted, *fs;
} Part;
#define NPARTS(a) ((int)(sizeof(a) / sizeof(a)[0]))

static const char gemm_text[] =
    "/* C[M,N] = op(A) op(B), or C += op(A) op(B) if acc; row-major. op(A) is A[M,K]\n"
    " * (row stride lda) or, if ta, the transpose of A[K,M]; op(B) is B[K,N] or, if\n"
    " * tb, the transpose of B[N,K].\n"
    " * Blocked over 4 rows of C and 256 of its columns: each row of B is loaded\n"
    " * once per block and reused for 4 rows of C; the inner loop runs along rows\n"
    " * of B and C, so it vectorises. With tb, rows of B are dot products. Serial:\n"
    " * a float GEMM is split over the threads by ctc_matmul or its kernel. */\n"
    "static void ctc_gemm_$S(int ta, int tb, int acc, int64_t M, int64_t N, int64_t K,\n"
    "                        const $T *restrict a, int64_t lda, const $T *restrict b, int64_t ldb,\n"
    "                        $T *restrict c, int64_t ldc) {\n"
    "  for (int64_t i0 = 0; i0 < M; i0 += 4) {\n"
    "    const int64_t mi = M - i0 < 4 ? M - i0 : 4;\n"
    "    if (tb) {\n"
    "      for (int64_t j = 0; j < N; j++) {\n"
    "        const $T *restrict bj = b + j * ldb;\n"
    "        for (int64_t ii = 0; ii < mi; ii++) {\n"
    "          const int64_t i = i0 + ii;\n"
    "          $T s[8] = {0, 0, 0, 0, 0, 0, 0, 0};\n"
    "          if (!ta) {\n"
    "            const $T *restrict ai = a + i * lda;\n"
    "            const int64_t k8 = K / 8 * 8;\n"
    "            for (int64_t k = 0; k < k8; k += 8)\n"
    "              for (int u = 0; u < 8; u++) s[u] += ai[k + u] * bj[k + u];\n"
    "            for (int64_t k = k8; k < K; k++) s[0] += ai[k] * bj[k];\n"
    "          } else {\n"
    "            for (int64_t k = 0; k < K; k++) s[0] += a[k * lda + i] * bj[k];\n"
    "          }\n"
    "          const $T d = ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));\n"
    "          c[i * ldc + j] = acc ? c[i * ldc + j] + d : d;\n"
    "        }\n"
    "      }\n"
    "      continue;\n"
    "    }\n"
    "    for (int64_t j0 = 0; j0 < N; j0 += 256) {\n"
    "      const int64_t nj = N - j0 < 256 ? N - j0 : 256;\n"
    "      for (int64_t ii = 0; ii < mi && !acc; ii++)\n"
    "        for (int64_t j = 0; j < nj; j++) c[(i0 + ii) * ldc + j0 + j] = 0;\n"
    "      for (int64_t k = 0; k < K; k++) {\n"
    "        const $T *restrict bk = b + k * ldb + j0;\n"
    "        for (int64_t ii = 0; ii < mi; ii++) {\n"
    "          const $T aik = ta ? a[k * lda + i0 + ii] : a[(i0 + ii) * lda + k];\n"
    "          $T *restrict ci = c + (i0 + ii) * ldc + j0;\n"
    "          for (int64_t j = 0; j < nj; j++) ci[j] += aik * bk[j];\n"
    "        }\n"
    "      }\n"
    "    }\n"
    "  }\n"
    "}\n";

/* The GEMM every matmul and convolution calls (f32, f64). With OpenBLAS and
 * OpenMP, ctc owns the threads: OpenBLAS runs single-threaded (its pthreads
 * otherwise spin in sched_yield between calls and take the cores from the
 * OpenMP loops: 15-30% of the gpt steps in perf) and a large GEMM is split
 * over the OpenMP threads, by rows of C when M >= N, else by columns
 * (ctc_gemm_block); inside a parallel loop (a batch of GEMMs) it is one call.
 * Without OpenBLAS: the portable ctc_gemm_$S on each block. A GEMM with an
 * epilogue (kernels/: KN_GEMM) runs the same blocks itself, then its
 * elementwise ops on each thread's block. */
static const Part matmul_text[] = {
    {"/* OpenBLAS single-threaded (once, outside parallel regions: before a loop that runs GEMMs in parallel). */\n"
     "#if defined(CTC_HAVE_CBLAS) && defined(_OPENMP)\n"
     "#define ctc_blas_threads_$S() (openblas_get_num_threads() != 1 ? openblas_set_num_threads(1) : (void)0)\n"
     "#else\n"
     "#define ctc_blas_threads_$S() ((void)0)\n"
     "#endif\n"
     "#ifdef _OPENMP\n"
     "#include <omp.h>\n"
     "#endif\n",
     "/* OpenBLAS single-threaded (once, outside parallel regions: before a loop that runs GEMMs in parallel). */\n"
     "#define ctc_blas_threads_$S() ((void)0)\n"},
    {"/* The block [*r0, *r1) x [*c0, *c1) of C[M,N] the calling thread computes: its share of the\n"
     " * rows when M >= N, in multiples of 16, else of the columns, in multiples of 32 (the AVX-512 kernel's\n"
     " * panel: no thread gets a sliver it would hand to another library), 16 with AVX2 (its kernel's panel and\n"
     " * CTC_GEMM_X86_MIN_COLS: the bench resnet's stem weight gradient, dW^T [27, 32] over 9,216 pixels, had\n"
     " * all 32 columns on one thread); all of C outside a parallel region. */\n"
     "static void ctc_gemm_block_$S(int64_t M, int64_t N, int64_t *r0, int64_t *r1, int64_t *c0, int64_t *c1) {\n"
     "  *r0 = 0, *r1 = M, *c0 = 0, *c1 = N;\n", NULL},
    {"#ifdef _OPENMP\n"
     "  const int64_t t = omp_get_thread_num(), nt = omp_get_num_threads(), n = M >= N ? M : N;\n"
     "  if (nt <= 1) return;\n"
     "#ifdef CTC_GEMM_AVX2_$S\n"
     "  const int64_t qc = 16;\n"
     "#else\n"
     "  const int64_t qc = 32;\n"
     "#endif\n"
     "  const int64_t q = M >= N ? 16 : qc, p0 = n * t / nt / q * q, p1 = t == nt - 1 ? n : n * (t + 1) / nt / q * q;\n"
     "  if (M >= N) *r0 = p0, *r1 = p1;\n"
     "  else *c0 = p0, *c1 = p1;\n"
     "#endif\n", ""},
    {"}\n"
     "/* Rows [r0, r1) and columns [c0, c1) of C = op(A) op(B) (C += if acc). */\n"
     "static void ctc_matmul_block_$S(int ta, int tb, int acc, int64_t K, const $T *a, int64_t lda, const $T *b,\n"
     "                                int64_t ldb, $T *c, int64_t ldc, int64_t r0, int64_t r1, int64_t c0, int64_t c1) {\n"
     "  if (r1 <= r0 || c1 <= c0) return;\n"
     "  a += ta ? r0 : r0 * lda;\n"
     "  b += tb ? c0 * ldb : c0;\n"
     "  c += r0 * ldc + c0;\n", NULL},
    {"#ifdef CTC_GEMM_X86_$S\n"
     "  if (r1 - r0 == 1 && !(ta && tb)) {   /* one row of C (a batch of one): B as it lies, not packed */\n"
     "#ifdef CTC_GEMV_X86_$S\n"
     "    if (!ta) { ctc_gemv_x86_$S(tb, acc, c1 - c0, K, a, b, ldb, c); return; }\n"
     "#endif\n"
     "    ctc_gemm_$S(ta, tb, acc, 1, c1 - c0, K, a, lda, b, ldb, c, ldc);\n"
     "    return;\n"
     "  }\n"
     "  /* ctc's AVX-512 or AVX2 GEMM (above); with OpenBLAS, not on slivers it would mostly pad */\n"
     "#ifdef CTC_HAVE_CBLAS\n"
     "  if (r1 - r0 >= CTC_GEMM_X86_MIN_ROWS && c1 - c0 >= CTC_GEMM_X86_MIN_COLS)\n"
     "#endif\n"
     "  {\n"
     "    ctc_gemm_x86_$S(ta, tb, acc, r1 - r0, c1 - c0, K, a, lda, b, ldb, c, ldc);\n"
     "    return;\n"
     "  }\n"
     "#endif\n", ""},
    {"#ifdef CTC_GEMM_NEON_$S\n"
     "  if (r1 - r0 == 1 && !ta) {   /* one row of C (a batch of one): B as it lies, not packed */\n"
     "    ctc_gemv_neon_$S(tb, acc, c1 - c0, K, a, b, ldb, c);\n"
     "    return;\n"
     "  }\n"
     "  ctc_gemm_neon_$S(ta, tb, acc, r1 - r0, c1 - c0, K, a, lda, b, ldb, c, ldc);   /* ctc's NEON GEMM (above) */\n"
     "  return;\n"
     "#endif\n", NULL},
    {"#ifdef CTC_HAVE_CBLAS\n"
     "  int64_t n = c1 - c0;\n"
     "  /* OpenBLAS (0.3.21) runs a row-major A B with M*N*K <= 1e6 on its AVX-512 small-matrix kernel,\n"
     "   * which mallocs a buffer on every call when N % 16 is 1..8 and K >= 32: those last columns\n"
     "   * are computed here instead (the generated code allocates nothing after init). */\n"
     "  const int64_t rest = n % 16;\n"
     "  if (!ta && !tb && rest && rest <= 8 && K >= 32 && (double)(r1 - r0) * (double)n * (double)K <= 1e6) {\n"
     "    n -= rest;\n"
     "    ctc_gemm_$S(0, 0, acc, r1 - r0, rest, K, a, lda, b + n, ldb, c + n, ldc);\n"
     "    if (!n) return;\n"
     "  }\n"
     "  $G(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, (int)(r1 - r0), (int)n,\n"
     "     (int)K, 1, a, (int)lda, b, (int)ldb, acc ? 1 : 0, c, (int)ldc);\n"
     "#else\n"
     "  ctc_gemm_$S(ta, tb, acc, r1 - r0, c1 - c0, K, a, lda, b, ldb, c, ldc);\n"
     "#endif\n",
     "  ctc_gemm_$S(ta, tb, acc, r1 - r0, c1 - c0, K, a, lda, b, ldb, c, ldc);\n"},
    {"}\n", NULL},
};

/* ctc_matmul_$S: a GEMM split over the threads when it is large enough (kernels/ emits a
 * KN_GEMM's split itself, from the same threshold: GEMM_SPLIT_WORK in ops_int.h). */
static const Part matmul_call_text[] = {
    {"/* Whether a GEMM of this size is split over the OpenMP threads (asked outside parallel regions). */\n"
     "static int ctc_gemm_split_$S(int64_t M, int64_t N, int64_t K) {\n", NULL},
    {"#ifdef _OPENMP\n"
     "  if (omp_in_parallel()) return 0;\n"
     "  ctc_blas_threads_$S();\n"
     "  return omp_get_max_threads() > 1 && (double)M * (double)N * (double)K >= 262144.0;\n"
     "#else\n"
     "  (void)M, (void)N, (void)K;\n"
     "  return 0;\n"
     "#endif\n",
     "  (void)M, (void)N, (void)K;\n"
     "  return 0;\n"},
    {"}\n", NULL},
};
/* ctc_matmul_$M, over ctc_matmul_block_$M: $M is the dtype's suffix, or bf16 for the f32 GEMMs
 * of bf16 values (instantiate_with). */
static const char matmul_fn_text[] =
    "static void ctc_matmul_$M(int ta, int tb, int acc, int64_t M, int64_t N, int64_t K, const $T *a, int64_t lda,\n"
    "                          const $T *b, int64_t ldb, $T *c, int64_t ldc) {\n"
    "  if (!ctc_gemm_split_$S(M, N, K)) {\n"
    "    ctc_matmul_block_$M(ta, tb, acc, K, a, lda, b, ldb, c, ldc, 0, M, 0, N);\n"
    "    return;\n"
    "  }\n"
    "  CTC_OMP_PARALLEL\n"
    "  {\n"
    "    int64_t r0, r1, c0, c1;\n"
    "    ctc_gemm_block_$S(M, N, &r0, &r1, &c0, &c1);\n"
    "    ctc_matmul_block_$M(ta, tb, acc, K, a, lda, b, ldb, c, ldc, r0, r1, c0, c1);\n"
    "  }\n"
    "}\n";

/* A time loop's GEMMs whose op(B) is a weight the loop does not change (kernels/prepack.c): its
 * panels packed once before the loop (ctc_gemm_pack_f32, into the arena's region above the
 * activations, FuncPlan.pack_at), then each step's GEMM reads them instead of packing B again.
 * Only where ctc's own kernel runs (AVX-512, AVX2, NEON), and on the blocks it takes: elsewhere
 * nothing is packed and every GEMM reads B, as without. The same sums in the same order either way. */
static const char matmul_pk_text[] =
    "/* op(B) [K, N] (b, ldb; transposed if tb) packed once for the GEMMs of this ta: ldp floats a k */\n"
    "static void ctc_gemm_pack_f32(int ta, int tb, int64_t N, int64_t K, const float *b, int64_t ldb, float *pk,\n"
    "                              int64_t ldp) {\n"
    "#ifdef CTC_GEMM_PK_f32\n"
    "  ctc_gemm_own_pack_f32(ta, tb, N, K, b, ldb, pk, ldp);\n"
    "#else\n"
    "  (void)ta, (void)tb, (void)N, (void)K, (void)b, (void)ldb, (void)pk, (void)ldp;\n"
    "#endif\n"
    "}\n"
    "/* ctc_matmul_block_f32 reading op(B)'s panels from pk where ctc's kernel computes the block */\n"
    "static void ctc_matmul_block_pk_f32(int ta, int tb, int acc, int64_t K, const float *a, int64_t lda, const float *b,\n"
    "                                   int64_t ldb, const float *pk, int64_t ldp, float *c, int64_t ldc, int64_t r0,\n"
    "                                   int64_t r1, int64_t c0, int64_t c1) {\n"
    "#ifdef CTC_GEMM_PK_f32\n"
    "  if (r1 > r0 && c1 > c0 && c0 % 32 == 0 && CTC_GEMM_OWN_f32(r1 - r0, c1 - c0)) {\n"
    "    ctc_gemm_own_pk_f32(ta, tb, acc, r1 - r0, c1 - c0, K, a + (ta ? r0 : r0 * lda), lda, NULL, ldb, pk, ldp, c0,\n"
    "                        c + r0 * ldc + c0, ldc);\n"
    "    return;\n"
    "  }\n"
    "#endif\n"
    "  (void)pk, (void)ldp;\n"
    "  ctc_matmul_block_f32(ta, tb, acc, K, a, lda, b, ldb, c, ldc, r0, r1, c0, c1);\n"
    "}\n"
    "static inline void ctc_matmul_pk_f32(int ta, int tb, int acc, int64_t M, int64_t N, int64_t K, const float *a,\n"
    "                                     int64_t lda, const float *b, int64_t ldb, const float *pk, int64_t ldp, float *c,\n"
    "                                     int64_t ldc) {\n"
    "  if (!ctc_gemm_split_f32(M, N, K)) {\n"
    "    ctc_matmul_block_pk_f32(ta, tb, acc, K, a, lda, b, ldb, pk, ldp, c, ldc, 0, M, 0, N);\n"
    "    return;\n"
    "  }\n"
    "  CTC_OMP_PARALLEL\n"
    "  {\n"
    "    int64_t r0, r1, c0, c1;\n"
    "    ctc_gemm_block_f32(M, N, &r0, &r1, &c0, &c1);\n"
    "    ctc_matmul_block_pk_f32(ta, tb, acc, K, a, lda, b, ldb, pk, ldp, c, ldc, r0, r1, c0, c1);\n"
    "  }\n"
    "}\n";

/* GEMMs whose operands both hold bfloat16 values (KirCall.low): ctc_gemm_amx_bf16 where the
 * compiler targets AMX and Linux grants the tiles, else ctc_gemm_avx512bf16 where it targets
 * AVX-512 BF16, else the f32 GEMM, which computes the same exact products; split over the
 * threads by matmul_fn_text as ctc_matmul_f32. */
static const Part matmul_bf16_text[] = {
    {"/* Rows [r0, r1) and columns [c0, c1) of C = op(A) op(B) (C += if acc), A's and B's floats\n"
     " * holding bfloat16 values: AMX tiles or AVX-512 BF16 dot products where the compiler targets them. */\n"
     "static void ctc_matmul_block_bf16(int ta, int tb, int acc, int64_t K, const float *a, int64_t lda, const float *b,\n"
     "                                  int64_t ldb, float *c, int64_t ldc, int64_t r0, int64_t r1, int64_t c0, int64_t c1) {\n",
     NULL},
    {"#ifdef CTC_GEMM_AVX512BF16\n"
     "  (void)ctc_matmul_block_f32;   /* (this function's fallback without AVX-512 BF16) */\n"
     "  if (r1 <= r0 || c1 <= c0) return;\n"
     "#ifdef CTC_GEMM_AMX_BF16\n"
     "  if (K > 0 && ctc_amx_granted()) {\n"
     "    ctc_gemm_amx_bf16(ta, tb, acc, r1 - r0, c1 - c0, K, a + (ta ? r0 : r0 * lda), lda, b + (tb ? c0 * ldb : c0), ldb,\n"
     "                      c + r0 * ldc + c0, ldc);\n"
     "    return;\n"
     "  }\n"
     "#endif\n"
     "  ctc_gemm_avx512bf16(ta, tb, acc, r1 - r0, c1 - c0, K, a + (ta ? r0 : r0 * lda), lda, b + (tb ? c0 * ldb : c0), ldb,\n"
     "                      c + r0 * ldc + c0, ldc);\n"
     "#else\n"
     "  ctc_matmul_block_f32(ta, tb, acc, K, a, lda, b, ldb, c, ldc, r0, r1, c0, c1);\n"
     "#endif\n",
     "  ctc_matmul_block_f32(ta, tb, acc, K, a, lda, b, ldb, c, ldc, r0, r1, c0, c1);\n"},
    {"}\n", NULL},
};

/* The output columns ow whose input column iw = ow * sw + off lies inside a row of W: [*lo, *hi). */
static const char conv_span_text[] =
    "static inline void ctc_conv_span(int64_t W, int64_t OW, int64_t sw, int64_t off, int64_t *lo, int64_t *hi) {\n"
    "  int64_t l = off >= 0 ? 0 : (sw - 1 - off) / sw, h = W - 1 - off < 0 ? 0 : (W - 1 - off) / sw + 1;\n"
    "  if (h > OW) h = OW;\n"
    "  if (l > h) l = h;\n"
    "  *lo = l, *hi = h;\n"
    "}\n";

static const char im2col_text[] =
    "/* Unfolds one image x[C,H,W] for a convolution with a KHxKW kernel into columns\n"
    " * of row stride ldc: col[((c*KH + kh)*KW + kw) * ldc + oh*OW + ow] =\n"
    " * x[c][oh*sh - ph + kh*dh][ow*sw - pw + kw*dw], 0 where that falls into the padding.\n"
    " * Then conv = w[O, C*KH*KW] x col. Serial: callers run images in parallel. Per\n"
    " * (kh, kw), the output columns that read inside the row, [lo, hi), are computed once:\n"
    " * with stride 1 an output row is zeros, a contiguous copy, zeros (it vectorises; no\n"
    " * conditional load: GCC 12 -O3 -mavx2 miscompiled the select form). With stride 1 and\n"
    " * OW == W (a 'same' convolution) the rows that read inside the image are one flat,\n"
    " * shifted copy, then the columns whose taps fall into the padding are zeroed: no loop\n"
    " * per output row (2x faster on 16x16 and 8x8 images, 1.4x on 32x32). */\n"
    "static void ctc_im2col_$S(const $T *restrict x, int64_t C, int64_t H, int64_t W, int64_t KH,\n"
    "                          int64_t KW, int64_t sh, int64_t sw, int64_t ph, int64_t pw, int64_t dh,\n"
    "                          int64_t dw, int64_t OH, int64_t OW, $T *restrict col, int64_t ldc) {\n"
    "  for (int64_t c = 0; c < C; c++)\n"
    "    for (int64_t kh = 0; kh < KH; kh++)\n"
    "      for (int64_t kw = 0; kw < KW; kw++) {\n"
    "        const $T *restrict xc = x + c * H * W;\n"
    "        $T *restrict d = col + ((c * KH + kh) * KW + kw) * ldc;\n"
    "        const int64_t off = kw * dw - pw;\n"
    "        int64_t lo, hi;\n"
    "        ctc_conv_span(W, OW, sw, off, &lo, &hi);\n"
    "        if (sh == 1 && sw == 1 && OW == W) {\n"
    "          /* output rows [o0, o1) read image rows o + r: d[q] = xc[q + base], q clipped to\n"
    "           * what lies inside the image (the positions cut off are padding taps) */\n"
    "          const int64_t r = kh * dh - ph, base = r * W + off, n = OH * OW;\n"
    "          const int64_t o0 = r < 0 ? (-r < OH ? -r : OH) : 0, o1 = H - r < OH ? (H - r > o0 ? H - r : o0) : OH;\n"
    "          int64_t q0 = o0 * OW, q1 = o1 * OW;\n"
    "          if (q0 + base < 0) q0 = -base;\n"
    "          if (q1 + base > H * W) q1 = H * W - base;\n"
    "          if (q1 < q0) q0 = q1 = 0;   /* no tap inside the image: all zeros */\n"
    "          for (int64_t q = 0; q < q0; q++) d[q] = 0;\n"
    "          for (int64_t q = q0; q < q1; q++) d[q] = xc[q + base];\n"
    "          for (int64_t q = q1; q < n; q++) d[q] = 0;\n"
    "          if (lo > 0 || hi < OW)\n"
    "            for (int64_t oh = o0; oh < o1; oh++) {\n"
    "              for (int64_t ow = 0; ow < lo; ow++) d[oh * OW + ow] = 0;\n"
    "              for (int64_t ow = hi; ow < OW; ow++) d[oh * OW + ow] = 0;\n"
    "            }\n"
    "          continue;\n"
    "        }\n"
    "        for (int64_t oh = 0; oh < OH; oh++, d += OW) {\n"
    "          const int64_t ih = oh * sh - ph + kh * dh;\n"
    "          if (ih < 0 || ih >= H) {\n"
    "            for (int64_t ow = 0; ow < OW; ow++) d[ow] = 0;\n"
    "            continue;\n"
    "          }\n"
    "          const $T *restrict xh = xc + ih * W;\n"
    "          for (int64_t ow = 0; ow < lo; ow++) d[ow] = 0;\n"
    "          if (sw == 1)\n"
    "            for (int64_t ow = lo; ow < hi; ow++) d[ow] = xh[ow + off];   /* the common case: a row copy */\n"
    "          else if (sw == 2)   /* a constant stride: vectorised with shuffles */\n"
    "            for (int64_t ow = lo; ow < hi; ow++) d[ow] = xh[ow * 2 + off];\n"
    "          else\n"
    "            for (int64_t ow = lo; ow < hi; ow++) d[ow] = xh[ow * sw + off];\n"
    "          for (int64_t ow = hi; ow < OW; ow++) d[ow] = 0;\n"
    "        }\n"
    "      }\n"
    "}\n";

static const char col2im_text[] =
    "/* The adjoint of im2col: folds col[C*KH*KW, OH*OW] (row stride ldc) back into an\n"
    " * image x[C,H,W], x[c][ih][iw] = sum of col[((c*KH + kh)*KW + kw) * ldc + oh*OW + ow]\n"
    " * over the window positions that read (ih, iw); positions no window reads get 0.\n"
    " * The in-row output columns [lo, hi) as in im2col: with stride 1 each row is a\n"
    " * contiguous, vectorised add. Serial: callers run images in parallel. */\n"
    "static void ctc_col2im_$S(const $T *restrict col, int64_t C, int64_t H, int64_t W, int64_t KH,\n"
    "                          int64_t KW, int64_t sh, int64_t sw, int64_t ph, int64_t pw, int64_t dh,\n"
    "                          int64_t dw, int64_t OH, int64_t OW, $T *restrict x, int64_t ldc) {\n"
    "  for (int64_t c = 0; c < C; c++) {\n"
    "    $T *restrict xc = x + c * H * W;\n"
    "    for (int64_t i = 0; i < H * W; i++) xc[i] = 0;\n"
    "    for (int64_t kh = 0; kh < KH; kh++)\n"
    "      for (int64_t kw = 0; kw < KW; kw++) {\n"
    "        const int64_t r = (c * KH + kh) * KW + kw, off = kw * dw - pw;\n"
    "        int64_t lo, hi;\n"
    "        ctc_conv_span(W, OW, sw, off, &lo, &hi);\n"
    "        for (int64_t oh = 0; oh < OH; oh++) {\n"
    "          const int64_t ih = oh * sh - ph + kh * dh;\n"
    "          if (ih < 0 || ih >= H) continue;\n"
    "          const $T *restrict d = col + r * ldc + oh * OW;\n"
    "          $T *restrict xr = xc + ih * W;\n"
    "          if (sw == 1)\n"
    "            for (int64_t ow = lo; ow < hi; ow++) xr[ow + off] += d[ow];\n"
    "          else\n"
    "            for (int64_t ow = lo; ow < hi; ow++) xr[ow * sw + off] += d[ow];\n"
    "        }\n"
    "      }\n"
    "  }\n"
    "}\n";

/* Depthwise convolutions (one input channel per group, ir_conv_depthwise): direct
 * loops, no unfolding. Image n's channel o (of O = C*M, M = O/C outputs per input
 * channel) reads input channel o / M through its KHxKW kernel. The taps of an
 * output row run over the outputs whose input column is inside the image
 * ([lo, hi), as in im2col), so the innermost loops have no conditions. Each call
 * computes one output channel (forward), one input channel (backward input) or
 * one kernel tap (backward weight), in a fixed order: callers run them in parallel. */
static const char dwconv_text[] =
    "/* ow in [*lo, *hi): the outputs whose input column ow*sw + off lies in [0, W) */\n"
    "static inline void ctc_dw_span_$S(int64_t off, int64_t sw, int64_t W, int64_t OW, int64_t *lo, int64_t *hi) {\n"
    "  *lo = off >= 0 ? 0 : (sw - 1 - off) / sw;\n"
    "  *hi = W - 1 - off < 0 ? 0 : (W - 1 - off) / sw + 1;\n"
    "  if (*hi > OW) *hi = OW;\n"
    "  if (*lo > *hi) *lo = *hi;\n"
    "}\n"
    "/* y[OH,OW] = the convolution of one channel x[H,W] with its kernel k[KH,KW] */\n"
    "static inline void ctc_dwconv_$S(const $T *restrict x, const $T *restrict k, int64_t H, int64_t W, int64_t KH,\n"
    "                          int64_t KW, int64_t sh, int64_t sw, int64_t ph, int64_t pw, int64_t dh, int64_t dw,\n"
    "                          int64_t OH, int64_t OW, $T *restrict y) {\n"
    "  for (int64_t i = 0; i < OH * OW; i++) y[i] = 0;\n"
    "  for (int64_t oh = 0; oh < OH; oh++) {\n"
    "    $T *restrict yr = y + oh * OW;\n"
    "    for (int64_t kh = 0; kh < KH; kh++) {\n"
    "      const int64_t ih = oh * sh - ph + kh * dh;\n"
    "      if (ih < 0 || ih >= H) continue;\n"
    "      const $T *restrict xr = x + ih * W;\n"
    "      for (int64_t kw = 0; kw < KW; kw++) {\n"
    "        const $T kv = k[kh * KW + kw];\n"
    "        const int64_t off = kw * dw - pw;\n"
    "        int64_t lo, hi;\n"
    "        ctc_dw_span_$S(off, sw, W, OW, &lo, &hi);\n"
    "        if (sw == 1)\n"
    "          for (int64_t ow = lo; ow < hi; ow++) yr[ow] += kv * xr[ow + off];\n"
    "        else\n"
    "          for (int64_t ow = lo; ow < hi; ow++) yr[ow] += kv * xr[ow * sw + off];\n"
    "      }\n"
    "    }\n"
    "  }\n"
    "}\n"
    "/* dx[H,W] = the sum over its M output channels m of the adjoint convolution of\n"
    " * g[m][OH,OW] with k[m][KH,KW] (channel m's data at g + m * OH*OW, k + m * KH*KW) */\n"
    "static inline void ctc_dwconv_bwd_input_$S(const $T *restrict g, const $T *restrict k, int64_t M, int64_t H, int64_t W,\n"
    "                                    int64_t KH, int64_t KW, int64_t sh, int64_t sw, int64_t ph, int64_t pw,\n"
    "                                    int64_t dh, int64_t dw, int64_t OH, int64_t OW, $T *restrict dx) {\n"
    "  for (int64_t i = 0; i < H * W; i++) dx[i] = 0;\n"
    "  for (int64_t m = 0; m < M; m++)\n"
    "    for (int64_t oh = 0; oh < OH; oh++) {\n"
    "      const $T *restrict gr = g + (m * OH + oh) * OW;\n"
    "      for (int64_t kh = 0; kh < KH; kh++) {\n"
    "        const int64_t ih = oh * sh - ph + kh * dh;\n"
    "        if (ih < 0 || ih >= H) continue;\n"
    "        $T *restrict xr = dx + ih * W;\n"
    "        for (int64_t kw = 0; kw < KW; kw++) {\n"
    "          const $T kv = k[(m * KH + kh) * KW + kw];\n"
    "          const int64_t off = kw * dw - pw;\n"
    "          int64_t lo, hi;\n"
    "          ctc_dw_span_$S(off, sw, W, OW, &lo, &hi);\n"
    "          for (int64_t ow = lo; ow < hi; ow++) xr[ow * sw + off] += kv * gr[ow];\n"
    "        }\n"
    "      }\n"
    "    }\n"
    "}\n"
    "/* The weight gradient's tap (kh, kw) of one output channel: the sum over N images\n"
    " * (x at x + n * xs, g at g + n * gs) of g[n][oh][ow] x[n][ih][iw], each output row's\n"
    " * products added lane by lane (part[ow]: vectorises), the lanes summed at the end. */\n"
    "static inline $T ctc_dwconv_bwd_weight_$S(const $T *restrict x, int64_t xs, const $T *restrict g, int64_t gs, int64_t N,\n"
    "                                   int64_t H, int64_t W, int64_t kh, int64_t kw, int64_t sh, int64_t sw, int64_t ph,\n"
    "                                   int64_t pw, int64_t dh, int64_t dw, int64_t OH, int64_t OW) {\n"
    "  $T part[1024];\n"
    "  for (int64_t ow = 0; ow < OW; ow++) part[ow] = 0;\n"
    "  const int64_t off = kw * dw - pw;\n"
    "  int64_t lo, hi;\n"
    "  ctc_dw_span_$S(off, sw, W, OW, &lo, &hi);\n"
    "  for (int64_t n = 0; n < N; n++)\n"
    "    for (int64_t oh = 0; oh < OH; oh++) {\n"
    "      const int64_t ih = oh * sh - ph + kh * dh;\n"
    "      if (ih < 0 || ih >= H) continue;\n"
    "      const $T *restrict xr = x + n * xs + ih * W, *restrict gr = g + n * gs + oh * OW;\n"
    "      for (int64_t ow = lo; ow < hi; ow++) part[ow] += gr[ow] * xr[ow * sw + off];\n"
    "    }\n"
    "  double s = 0;\n"
    "  for (int64_t ow = lo; ow < hi; ow++) s += part[ow];\n"
    "  return ($T)s;\n"
    "}\n";

/* Stride-1 depthwise convolutions on the hosted C target (linalg_c.c's dw_flat): bands of a
 * zero-padded plane, each tap one long loop (kernels above for the others). CTC_DW_BAND,
 * CTC_DW_PART (elements of the stack buffers) and CTC_DW_TAPS (a weight gradient's most taps) are
 * defined before it. */
static const char dwconv_flat_text[] =
    "/* Rows [r0, r1) of the channel x[H, W] padded with ph rows and pw columns of zeros, W + 2 pw\n"
    " * apart: xp[(r - r0) (W + 2 pw) + pw + iw] = x[r - ph, iw] (0 outside x), then `tail` zeros.\n"
    " * Returns whether every value copied is finite. */\n"
    "static inline int ctc_dw_pad_$S(const $T *restrict x, int64_t H, int64_t W, int64_t ph, int64_t pw, int64_t r0,\n"
    "                                int64_t r1, int64_t tail, $T *restrict xp) {\n"
    "  const int64_t Wp = W + 2 * pw, n = r1 - r0;\n"
    "  int64_t top = ph - r0, bot = H + ph - r0;   /* x's rows: the band's [top, bot) */\n"
    "  top = top < 0 ? 0 : top > n ? n : top;\n"
    "  bot = bot > n ? n : bot < top ? top : bot;\n"
    "  int bad = 0;\n"
    "  for (int64_t i = 0; i < top * Wp; i++) xp[i] = 0;\n"
    "  for (int64_t r = top; r < bot; r++) {\n"
    "    $T *d = xp + r * Wp;\n"
    "    const $T *s = x + (r0 + r - ph) * W;\n"
    "    for (int64_t j = 0; j < pw; j++) d[j] = 0, d[pw + W + j] = 0;\n"
    "    for (int64_t j = 0; j < W; j++) d[pw + j] = s[j], bad |= !(s[j] - s[j] == 0);\n"
    "  }\n"
    "  for (int64_t i = bot * Wp; i < n * Wp + tail; i++) xp[i] = 0;\n"
    "  return !bad;\n"
    "}\n"
    "/* whether k[0..n) are all finite */\n"
    "static inline int ctc_dw_finite_$S(const $T *k, int64_t n) {\n"
    "  int bad = 0;\n"
    "  for (int64_t i = 0; i < n; i++) bad |= !(k[i] - k[i] == 0);\n"
    "  return !bad;\n"
    "}\n"
    "/* ctc_dwconv_$S of a stride-1 convolution by bands of output rows over a zero-padded copy of\n"
    " * the band's input: each tap one loop over the band's outputs, laid out W + 2 pw apart (the\n"
    " * columns between rows are computed and dropped), so a small plane is a few long loops, not\n"
    " * many short ones. The same sums in the same order: a tap in the padding adds k * 0 = +-0,\n"
    " * which leaves every sum as it was (a sum from +0 is never -0). Where a kernel value is not\n"
    " * finite (inf * 0 is NaN), ctc_dwconv_$S, which skips those taps. */\n"
    "static inline void ctc_dwconv_flat_$S(const $T *restrict x, const $T *restrict k, int64_t H, int64_t W, int64_t KH,\n"
    "                                      int64_t KW, int64_t ph, int64_t pw, int64_t dh, int64_t dw, int64_t OH,\n"
    "                                      int64_t OW, $T *restrict y) {\n"
    "  if (!ctc_dw_finite_$S(k, KH * KW)) {\n"
    "    ctc_dwconv_$S(x, k, H, W, KH, KW, 1, 1, ph, pw, dh, dw, OH, OW, y);\n"
    "    return;\n"
    "  }\n"
    "  $T xp[CTC_DW_BAND], yp[CTC_DW_BAND];\n"
    "  const int64_t Wp = W + 2 * pw, ext = (KH - 1) * dh, R = CTC_DW_BAND / Wp - ext;   /* R output rows a band */\n"
    "  for (int64_t oh0 = 0; oh0 < OH; oh0 += R) {\n"
    "    const int64_t oh1 = OH - oh0 < R ? OH : oh0 + R, n = (oh1 - oh0 - 1) * Wp + OW;\n"
    "    ctc_dw_pad_$S(x, H, W, ph, pw, oh0, oh1 + ext, 0, xp);\n"
    "    for (int64_t p = 0; p < n; p++) yp[p] = 0;\n"
    "    for (int64_t kh = 0; kh < KH; kh++)\n"
    "      for (int64_t kw = 0; kw < KW; kw++) {\n"
    "        const $T kv = k[kh * KW + kw], *xt = xp + kh * dh * Wp + kw * dw;\n"
    "        for (int64_t p = 0; p < n; p++) yp[p] += kv * xt[p];\n"
    "      }\n"
    "    for (int64_t oh = oh0; oh < oh1; oh++)\n"
    "      for (int64_t ow = 0; ow < OW; ow++) y[oh * OW + ow] = yp[(oh - oh0) * Wp + ow];\n"
    "  }\n"
    "}\n"
    "/* ctc_dwconv_bwd_input_$S of a stride-1 convolution (whose padding is at most its kernel's\n"
    " * reach: A, B >= 0) as ctc_dwconv_flat_$S: g padded to (KH - 1) dh rows and (KW - 1) dw\n"
    " * columns around each input pixel's reach, the taps in the order that adds each input's\n"
    " * terms as ctc_dwconv_bwd_input_$S does (m, then kh down, then kw up). */\n"
    "static inline void ctc_dwconv_bwd_input_flat_$S(const $T *restrict g, const $T *restrict k, int64_t M, int64_t H,\n"
    "                                                int64_t W, int64_t KH, int64_t KW, int64_t ph, int64_t pw, int64_t dh,\n"
    "                                                int64_t dw, int64_t OH, int64_t OW, $T *restrict dx) {\n"
    "  if (!ctc_dw_finite_$S(k, M * KH * KW)) {\n"
    "    ctc_dwconv_bwd_input_$S(g, k, M, H, W, KH, KW, 1, 1, ph, pw, dh, dw, OH, OW, dx);\n"
    "    return;\n"
    "  }\n"
    "  $T gp[CTC_DW_BAND], xp[CTC_DW_BAND];\n"
    "  const int64_t ext = (KH - 1) * dh, A = ext - ph, B = (KW - 1) * dw - pw, Wg = OW + 2 * B, R = CTC_DW_BAND / Wg - ext;\n"
    "  for (int64_t ih0 = 0; ih0 < H; ih0 += R) {\n"
    "    const int64_t ih1 = H - ih0 < R ? H : ih0 + R, n = (ih1 - ih0 - 1) * Wg + W;\n"
    "    for (int64_t p = 0; p < n; p++) xp[p] = 0;\n"
    "    for (int64_t m = 0; m < M; m++) {\n"
    "      ctc_dw_pad_$S(g + m * OH * OW, OH, OW, A, B, ih0, ih1 + ext, 0, gp);\n"
    "      for (int64_t kh = KH - 1; kh >= 0; kh--)\n"
    "        for (int64_t kw = 0; kw < KW; kw++) {\n"
    "          const $T kv = k[(m * KH + kh) * KW + kw], *gt = gp + (KH - 1 - kh) * dh * Wg + (KW - 1 - kw) * dw;\n"
    "          for (int64_t p = 0; p < n; p++) xp[p] += kv * gt[p];\n"
    "        }\n"
    "    }\n"
    "    for (int64_t ih = ih0; ih < ih1; ih++)\n"
    "      for (int64_t iw = 0; iw < W; iw++) dx[ih * W + iw] = xp[(ih - ih0) * Wg + iw];\n"
    "  }\n"
    "}\n"
    "/* x[i] for i < n (a multiple of 8) added pairwise down to 8 sums, x[0..8), in place */\n"
    "static inline void ctc_dw_fold_$S($T *x, int64_t n) {\n"
    "  while (n > 8) {\n"
    "    const int64_t h = (n / 8 + 1) / 2 * 8;   /* the first half, in whole groups of 8 */\n"
    "    for (int64_t p = 0; p < n - h; p++) x[p] += x[p + h];\n"
    "    n = h;\n"
    "  }\n"
    "}\n"
    "/* The weight gradient of one output channel of a stride-1 depthwise convolution, all its\n"
    " * KH x KW taps (KH KW <= CTC_DW_TAPS) into dk: by bands of output rows over zero-padded copies of x and\n"
    " * g, each tap's products added at each position over the images (part), the positions then\n"
    " * added pairwise, the bands in double. Where a value of x or g is not finite (a padding zero\n"
    " * times inf is NaN), ctc_dwconv_bwd_weight_$S per tap, which skips the padding. */\n"
    "static inline void ctc_dwconv_bwd_weight_flat_$S(const $T *restrict x, int64_t xs, const $T *restrict g, int64_t gs,\n"
    "                                                 int64_t N, int64_t H, int64_t W, int64_t KH, int64_t KW, int64_t ph,\n"
    "                                                 int64_t pw, int64_t dh, int64_t dw, int64_t OH, int64_t OW,\n"
    "                                                 $T *restrict dk) {\n"
    "  $T xp[CTC_DW_BAND + 8], gq[CTC_DW_BAND + 8], part[CTC_DW_PART + 8 * CTC_DW_TAPS];   /* (np: up to 7 more a tap) */\n"
    "  double s[CTC_DW_TAPS][8];\n"
    "  const int64_t Wp = W + 2 * pw, ext = (KH - 1) * dh, KK = KH * KW;\n"
    "  int64_t R = CTC_DW_BAND / Wp - ext;\n"
    "  if (R > CTC_DW_PART / (KK * Wp)) R = CTC_DW_PART / (KK * Wp);\n"
    "  for (int64_t t = 0; t < KK; t++)\n"
    "    for (int j = 0; j < 8; j++) s[t][j] = 0;\n"
    "  for (int64_t oh0 = 0; oh0 < OH; oh0 += R) {\n"
    "    const int64_t oh1 = OH - oh0 < R ? OH : oh0 + R, np = ((oh1 - oh0 - 1) * Wp + OW + 7) / 8 * 8;\n"
    "    for (int64_t i = 0; i < KK * np; i++) part[i] = 0;\n"
    "    for (int64_t n = 0; n < N; n++) {\n"
    "      int bad = !ctc_dw_pad_$S(x + n * xs, H, W, ph, pw, oh0, oh1 + ext, 8, xp);\n"
    "      for (int64_t r = 0; r < oh1 - oh0; r++) {   /* g's rows W + 2 pw apart, 0 between them */\n"
    "        const $T *gr = g + n * gs + (oh0 + r) * OW;\n"
    "        $T *d = gq + r * Wp;\n"
    "        for (int64_t j = 0; j < OW; j++) d[j] = gr[j], bad |= !(gr[j] - gr[j] == 0);\n"
    "        for (int64_t j = OW; j < Wp; j++) d[j] = 0;\n"
    "      }\n"
    "      if (bad) {\n"
    "        for (int64_t t = 0; t < KK; t++)\n"
    "          dk[t] = ctc_dwconv_bwd_weight_$S(x, xs, g, gs, N, H, W, t / KW, t % KW, 1, 1, ph, pw, dh, dw, OH, OW);\n"
    "        return;\n"
    "      }\n"
    "      for (int64_t p = (oh1 - oh0) * Wp; p < np; p++) gq[p] = 0;\n"
    "      for (int64_t kh = 0; kh < KH; kh++)\n"
    "        for (int64_t kw = 0; kw < KW; kw++) {\n"
    "          const $T *xt = xp + kh * dh * Wp + kw * dw;\n"
    "          $T *pt = part + (kh * KW + kw) * np;\n"
    "          for (int64_t p = 0; p < np; p++) pt[p] += gq[p] * xt[p];\n"
    "        }\n"
    "    }\n"
    "    for (int64_t t = 0; t < KK; t++) {\n"
    "      ctc_dw_fold_$S(part + t * np, np);\n"
    "      for (int j = 0; j < 8; j++) s[t][j] += part[t * np + j];\n"
    "    }\n"
    "  }\n"
    "  for (int64_t t = 0; t < KK; t++)\n"
    "    dk[t] = ($T)(((s[t][0] + s[t][1]) + (s[t][2] + s[t][3])) + ((s[t][4] + s[t][5]) + (s[t][6] + s[t][7])));\n"
    "}\n";

static const char rng_text[] =
    "/* Parameter initialisation draws from a counter-based generator (seed 0):\n"
    " * number i of parameter k is splitmix64's finaliser of (mix(k) ^ i), so every\n"
    " * value is a pure function of (k, i) and init is deterministic. */\n"
    "static uint64_t ctc_mix64(uint64_t z) {\n"
    "  z += UINT64_C(0x9E3779B97F4A7C15);\n"
    "  z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);\n"
    "  z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);\n"
    "  return z ^ (z >> 31);\n"
    "}\n"
    "\n"
    "/* Uniform in [0, 1) with 53 random bits. */\n"
    "static double ctc_u01(uint64_t key, uint64_t i) {\n"
    "  return (double)(ctc_mix64(ctc_mix64(key) ^ i) >> 11) * (1.0 / 9007199254740992.0);\n"
    "}\n";

static const char uniform_text[] =
    "static void ctc_fill_uniform_$S($T *p, int64_t n, uint64_t key, double lo, double hi) {\n"
    "  for (int64_t i = 0; i < n; i++) p[i] = ($T)(lo + (hi - lo) * ctc_u01(key, (uint64_t)i));\n"
    "}\n";

/* the same into bf16 / f16 storage (DT_BF16, DT_F16): each float value rounded, as .bfloat16() does */
static const char uniform_low_text[] =
    "static void ctc_fill_uniform_$S(uint16_t *p, int64_t n, uint64_t key, double lo, double hi) {\n"
    "  for (int64_t i = 0; i < n; i++) p[i] = ctc_$S_store((float)(lo + (hi - lo) * ctc_u01(key, (uint64_t)i)));\n"
    "}\n";
static const char normal_low_text[] =
    "static void ctc_fill_normal_$S(uint16_t *p, int64_t n, uint64_t key, double mean, double std) {\n"
    "  for (int64_t i = 0; i < n; i++) {\n"
    "    double u1 = ctc_u01(key, 2 * (uint64_t)i), u2 = ctc_u01(key, 2 * (uint64_t)i + 1);\n"
    "    p[i] = ctc_$S_store((float)(mean + std * sqrt(-2.0 * log(1.0 - u1)) * cos(6.283185307179586 * u2)));\n"
    "  }\n"
    "}\n";

static const char normal_text[] =
    "/* Box-Muller: two uniforms per value. */\n"
    "static void ctc_fill_normal_$S($T *p, int64_t n, uint64_t key, double mean, double std) {\n"
    "  for (int64_t i = 0; i < n; i++) {\n"
    "    double u1 = ctc_u01(key, 2 * (uint64_t)i), u2 = ctc_u01(key, 2 * (uint64_t)i + 1);\n"
    "    p[i] = ($T)(mean + std * sqrt(-2.0 * log(1.0 - u1)) * cos(6.283185307179586 * u2));\n"
    "  }\n"
    "}\n";

/* nn.init.trunc_normal_: normal_'s Box-Muller draw, drawn again (uniforms 2 (t n + i) and 2 (t n + i) + 1
 * for try t of value i) while it falls outside [lo, hi]; the compiler requires the bounds to keep a
 * tenth of the draws, so 4096 tries all miss with chance under 1e-187 (then the value is the bound
 * clamped to, as PyTorch clamps). A value inside on the first try is normal_'s value. */
static const char trunc_draw_text[] =
    "static double ctc_trunc_normal_draw(uint64_t key, int64_t n, int64_t i, double mean, double std, double lo,\n"
    "                                    double hi) {\n"
    "  double v = mean;\n"
    "  for (uint64_t t = 0; t < 4096; t++) {\n"
    "    const uint64_t j = t * (uint64_t)n + (uint64_t)i;\n"
    "    const double u1 = ctc_u01(key, 2 * j), u2 = ctc_u01(key, 2 * j + 1);\n"
    "    v = mean + std * sqrt(-2.0 * log(1.0 - u1)) * cos(6.283185307179586 * u2);\n"
    "    if (v >= lo && v <= hi) break;\n"
    "  }\n"
    "  return v;\n"
    "}\n";
static const char trunc_normal_text[] =
    "static void ctc_fill_trunc_normal_$S($T *p, int64_t n, uint64_t key, double mean, double std, double lo,\n"
    "                                    double hi) {\n"
    "  for (int64_t i = 0; i < n; i++) {\n"
    "    const $T x = ($T)ctc_trunc_normal_draw(key, n, i, mean, std, lo, hi), a = ($T)lo, b = ($T)hi;\n"
    "    p[i] = x < a ? a : x > b ? b : x;\n"
    "  }\n"
    "}\n";
static const char trunc_normal_low_text[] =
    "static void ctc_fill_trunc_normal_$S(uint16_t *p, int64_t n, uint64_t key, double mean, double std, double lo,\n"
    "                                    double hi) {\n"
    "  for (int64_t i = 0; i < n; i++) {\n"
    "    const float x = (float)ctc_trunc_normal_draw(key, n, i, mean, std, lo, hi), a = (float)lo, b = (float)hi;\n"
    "    p[i] = ctc_$S_store(x < a ? a : x > b ? b : x);\n"
    "  }\n"
    "}\n";

/* CTC_FMA_F32(a, b, c), CTC_FMA_F64: a * b + c rounded once where the target has the instruction
 * (ISO C mode fuses nothing by itself), else rounded twice; CTC_ALWAYS_INLINE (GCC and Clang),
 * on erf's and log's helpers: ctc_erf_f32, the largest, was left a call in one of the gpt's
 * backward functions, and that loop scalar (GCC 12, -O3); written once before the helpers that
 * use them (ctc_tanh_f32, ctc_erf_f32, ctc_log_f32, ctc_exp_f32, ctc_exp_cr_f32, ctc_sincos_f32, and
 * --no-libm's tanhf, logf and expf, their texts renamed). */
static const char fma_text[] =
    "#ifndef CTC_FMA_F32   /* a * b + c rounded once where the target has the instruction */\n"
    "#if defined(__CUDACC__)\n"
    "#define CTC_FMA_F32(a, b, c) fmaf(a, b, c)\n"
    "#define CTC_FMA_F64(a, b, c) fma(a, b, c)\n"
    "#elif defined(__FMA__) || defined(__ARM_FEATURE_FMA)\n"
    "#define CTC_FMA_F32(a, b, c) __builtin_fmaf(a, b, c)\n"
    "#define CTC_FMA_F64(a, b, c) __builtin_fma(a, b, c)\n"
    "#else\n"
    "#define CTC_FMA_F32(a, b, c) ((a) * (b) + (c))\n"
    "#define CTC_FMA_F64(a, b, c) ((a) * (b) + (c))\n"
    "#endif\n"
    "#if defined(__GNUC__) && !defined(__CUDACC__)   /* inlined even in a large function: a call would not vectorise */\n"
    "#define CTC_ALWAYS_INLINE __attribute__((always_inline, unused))   /* (unused: clang warns of a file's unused helper) */\n"
    "#else\n"
    "#define CTC_ALWAYS_INLINE\n"
    "#endif\n"
    "#endif\n";

/* tanh in f32 without a libm call, so that loops over it vectorise (glibc's
 * tanhf is a scalar call through expm1f, about 20 ns per element): at most
 * 1.33 ulp from the exact tanh (checked on all 2^32 floats, with and without FMA),
 * odd, tanh(-0) = -0, exactly +-1 for |x| >= 9.1 and the infinities, NaN kept.
 * |x| < 0.625: x + x^3 P(x^2) (Cephes' tanhf polynomial); else
 * 1 - 2 / (exp(2|x|) + 1) with exp as 2^n exp(r), n = round(2|x| / ln 2) read
 * from the low mantissa bits of 2|x| / ln 2 + 1.5 * 2^23 (no float -> int
 * conversion, which would keep GCC from if-converting the loop), r reduced
 * with ln 2 in two parts, exp(r) by Cephes' expf polynomial. The clamp, the choice between
 * the two forms and the NaN are on the bits (a union; masks): a float select that GCC turns back
 * into a conditional multiply or division "could trap" and kept the loop scalar on AVX2
 * (7.6 ns an element; then 1.55). The polynomials are fused multiply-adds where the target
 * has them (CTC_FMA_F32: ISO C mode contracts nothing by itself): both forms are computed for
 * every element, and their multiply-adds were most of the work (Zen 4, a loop over tanh:
 * 0.65 -> 0.46 ns an element with AVX-512, 1.06 -> 0.79 with AVX2). Without FMA the same
 * expressions round twice; both stay within the bound above. */
static const char tanh_text[] =
    "static inline float ctc_tanh_f32(float x) {\n"
    "  union { float f; uint32_t u; } xb = {x}, a, c, s, sm, bg, y;\n"
    "  a.u = xb.u & 0x7FFFFFFFu;   /* |x| */\n"
    "  const float ax = a.f;\n"
    "  const float z = ax * ax;\n"
    "  float q = CTC_FMA_F32(-5.70498872745e-3f, z, 2.06390887954e-2f);\n"
    "  q = CTC_FMA_F32(q, z, -5.37397155531e-2f);\n"
    "  q = CTC_FMA_F32(q, z, 1.33314422036e-1f);\n"
    "  q = CTC_FMA_F32(q, z, -3.33332819422e-1f);\n"
    "  sm.f = CTC_FMA_F32(ax * z, q, ax);\n"
    "  c.u = a.u < 0x4111999Au ? a.u : 0x4111999Au;   /* min(|x|, 9.1), on the bits: 9.1 for NaN too */\n"
    "  const float t = 2.0f * c.f;\n"
    "  const float m = CTC_FMA_F32(t, 1.44269504089f, 12582912.0f);   /* round(t / ln 2) in the low mantissa bits */\n"
    "  const float n = m - 12582912.0f;\n"
    "  const float r = CTC_FMA_F32(n, 2.12194440e-4f, CTC_FMA_F32(n, -0.693359375f, t));\n"
    "  float p = CTC_FMA_F32(1.9875691500e-4f, r, 1.3981999507e-3f);\n"
    "  p = CTC_FMA_F32(p, r, 8.3334519073e-3f);\n"
    "  p = CTC_FMA_F32(p, r, 4.1665795894e-2f);\n"
    "  p = CTC_FMA_F32(p, r, 1.6666665459e-1f);\n"
    "  p = CTC_FMA_F32(p, r, 5.0000001201e-1f);\n"
    "  p = CTC_FMA_F32(p, r * r, r) + 1.0f;   /* exp(r) */\n"
    "  union { float f; uint32_t u; } mb = {m};\n"
    "  s.u = (mb.u - 0x4B400000u + 127u) << 23;   /* 2^n, n in [0, 27) */\n"
    "  bg.f = 1.0f - 2.0f / CTC_FMA_F32(p, s.f, 1.0f);\n"
    "  const uint32_t lo = 0u - (uint32_t)(a.u < 0x3F200000u), mid = 0u - (uint32_t)(a.u < 0x4111999Au);   /* |x| < 0.625, < 9.1 */\n"
    "  y.u = (sm.u & lo) | (bg.u & mid & ~lo) | (0x3F800000u & ~mid);   /* tanh rounds to 1 from 9.01 on */\n"
    "  y.u |= xb.u & 0x80000000u;   /* the sign of x */\n"
    "  const uint32_t nan = 0u - ((0x7F800000u - a.u) >> 31);   /* all ones for a NaN: x itself */\n"
    "  y.u = (xb.u & nan) | (y.u & ~nan);\n"
    "  return y.f;\n"
    "}\n";

/* erf in f32 without a libm call, so that loops over it vectorise: glibc's erff is a scalar call,
 * about 12 ns an element, and nn.GELU()'s default (exact) form is 0.5 x (1 + erf(x / sqrt 2))
 * (Zen 4, a loop over that GELU: 12.1 -> 0.88 ns an element with AVX-512, 1.24 with AVX2). Four
 * polynomials, all computed for every element and chosen on the bits as in ctc_tanh_f32:
 * x + x p(x^2) below 0.75, then 1 - erfc with erfc a polynomial in |x| - c on [0.75, 1.75),
 * [1.75, 2.5) and [2.5, 4), exactly 1 above (Chebyshev fits, float coefficients, float
 * arithmetic only: --no-libm's microcontrollers need no double). Odd, erf(-0) = -0, NaN kept.
 * At most 1.04 ulp from the exactly rounded erf without FMA, 0.97 with (every float, against
 * glibc's double erf; tests/test_math_helpers.py). */
static const char erf_text[] =
    "static inline CTC_ALWAYS_INLINE float ctc_erf_f32(float x) {\n"
    "  union { float f; uint32_t u; } xb = {x}, a, e0, e1, e2, e3, y;\n"
    "  a.u = xb.u & 0x7FFFFFFFu;   /* |x| */\n"
    "  const float ax = a.f;\n"
    "  const float z = ax * ax;\n"
    "  float q = CTC_FMA_F32(9.4729985e-05f, z, -0.000835735642f);\n"
    "  q = CTC_FMA_F32(q, z, 0.00521681644f);\n"
    "  q = CTC_FMA_F32(q, z, -0.0268647801f);\n"
    "  q = CTC_FMA_F32(q, z, 0.112837784f);\n"
    "  q = CTC_FMA_F32(q, z, -0.376126379f);\n"
    "  q = CTC_FMA_F32(q, z, 0.128379166f);\n"
    "  e0.f = CTC_FMA_F32(ax, q, ax);   /* [0, 0.75): x + x p(x^2), p(0) = 2/sqrt(pi) - 1 */\n"
    "  const float s1 = ax - 1.25f;\n"
    "  float p = CTC_FMA_F32(-0.000753061729f, s1, -0.000671232236f);\n"
    "  p = CTC_FMA_F32(p, s1, 0.00568622537f);\n"
    "  p = CTC_FMA_F32(p, s1, -0.00367625244f);\n"
    "  p = CTC_FMA_F32(p, s1, -0.0212997831f);\n"
    "  p = CTC_FMA_F32(p, s1, 0.0471864641f);\n"
    "  p = CTC_FMA_F32(p, s1, 0.00615931675f);\n"
    "  p = CTC_FMA_F32(p, s1, -0.167536035f);\n"
    "  p = CTC_FMA_F32(p, s1, 0.295651406f);\n"
    "  p = CTC_FMA_F32(p, s1, -0.236521125f);\n"
    "  p = CTC_FMA_F32(p, s1, 0.0770998746f);\n"
    "  e1.f = 1.0f - p;   /* [0.75, 1.75): 1 - erfc, erfc a polynomial in x - 1.25 (exact) */\n"
    "  const float s2 = ax - 2.125f;\n"
    "  float r = CTC_FMA_F32(0.000253919716f, s2, -0.00133903138f);\n"
    "  r = CTC_FMA_F32(r, s2, 0.00187426154f);\n"
    "  r = CTC_FMA_F32(r, s2, 0.00181591406f);\n"
    "  r = CTC_FMA_F32(r, s2, -0.0124957897f);\n"
    "  r = CTC_FMA_F32(r, s2, 0.026361106f);\n"
    "  r = CTC_FMA_F32(r, s2, -0.033037398f);\n"
    "  r = CTC_FMA_F32(r, s2, 0.0262242388f);\n"
    "  r = CTC_FMA_F32(r, s2, -0.0123408204f);\n"
    "  r = CTC_FMA_F32(r, s2, 0.00265402929f);\n"
    "  e2.f = 1.0f - r;   /* [1.75, 2.5) */\n"
    "  const float s3 = ax - 3.25f;\n"
    "  float t = CTC_FMA_F32(-2.07238663e-05f, s3, 8.24522576e-05f);\n"
    "  t = CTC_FMA_F32(t, s3, -0.000173044929f);\n"
    "  t = CTC_FMA_F32(t, s3, 0.000263535621f);\n"
    "  t = CTC_FMA_F32(t, s3, -0.000313029886f);\n"
    "  t = CTC_FMA_F32(t, s3, 0.00028652756f);\n"
    "  t = CTC_FMA_F32(t, s3, -0.000195887726f);\n"
    "  t = CTC_FMA_F32(t, s3, 9.48689631e-05f);\n"
    "  t = CTC_FMA_F32(t, s3, -2.91868146e-05f);\n"
    "  t = CTC_FMA_F32(t, s3, 4.30271484e-06f);\n"
    "  e3.f = 1.0f - t;   /* [2.5, 4); erf rounds to 1 from 3.92 on */\n"
    "  const uint32_t m0 = 0u - (uint32_t)(a.u < 0x3F400000u), m1 = 0u - (uint32_t)(a.u < 0x3FE00000u),\n"
    "                 m2 = 0u - (uint32_t)(a.u < 0x40200000u), m3 = 0u - (uint32_t)(a.u < 0x40800000u);\n"
    "  y.u = (e0.u & m0) | (e1.u & m1 & ~m0) | (e2.u & m2 & ~m1) | (e3.u & m3 & ~m2) | (0x3F800000u & ~m3);\n"
    "  y.u |= xb.u & 0x80000000u;   /* the sign of x */\n"
    "  const uint32_t nan = 0u - ((0x7F800000u - a.u) >> 31);   /* all ones for a NaN: x itself */\n"
    "  y.u = (xb.u & nan) | (y.u & ~nan);\n"
    "  return y.f;\n"
    "}\n";

/* log and log1p in f32 without a libm call, so that loops over them vectorise (glibc's logf and
 * log1pf are scalar calls, 3-4 and 7 ns an element; softplus, logsigmoid and mish are
 * log1p(exp(x)), 33 ns an element through glibc for the [256, 4096] of a test model). x = 2^k m
 * with m in [sqrt(2)/2, sqrt(2)) read from the bits (a subnormal scaled by 2^25 first, chosen by a
 * mask), then FreeBSD's e_logf.c polynomial in s = f / (2 + f), f = m - 1 (ctc_logk_f32). log1p
 * decomposes u = 1 + x the same way and adds (1 + x - u) / u, the rounding of u, inside the last
 * sums (s_log1pf.c's c); where k = 0 it takes f = x itself. The special values are chosen on the
 * bits. At most 0.835 ulp from the exactly rounded value for both, with and without FMA (every
 * float, against glibc's double log and log1p; tests/test_math_helpers.py). Zen 4, a loop over
 * each: log 4.4 -> 0.55 ns an element with AVX-512 (3.3 -> 0.81 with AVX2), log1p 6.9 -> 0.62
 * (0.97). --no-libm's logf is this text renamed. */
static const char log_text[] =
    "#ifndef CTC_LOGK_F32   /* once, also where --no-libm's logf is this text renamed */\n"
    "#define CTC_LOGK_F32\n"
    "/* log(2^dk (1 + f)) + c, f in [sqrt(2)/2 - 1, sqrt(2) - 1) */\n"
    "static inline CTC_ALWAYS_INLINE float ctc_logk_f32(float f, float dk, float c) {\n"
    "  const float s = f / (2.0f + f), z = s * s, w = z * z;\n"
    "  const float r = CTC_FMA_F32(w, CTC_FMA_F32(w, 0.24279078841f, 0.40000972152f),\n"
    "                              z * CTC_FMA_F32(w, 0.28498786688f, 0.66666662693f));\n"
    "  const float hfsq = 0.5f * f * f;\n"
    "  return s * (hfsq + r) + CTC_FMA_F32(dk, 9.0580006145e-06f, c) - hfsq + f\n"
    "         + dk * 6.9313812256e-01f;   /* ln 2 in two parts: dk * 0.693138... is exact */\n"
    "}\n"
    "/* x = 2^k (1 + f), 1 + f in [sqrt(2)/2, sqrt(2)) from the bits (a subnormal scaled by 2^25 first): f */\n"
    "static inline CTC_ALWAYS_INLINE float ctc_log_split_f32(float x, float *k) {\n"
    "  union { float f; uint32_t u; } xb = {x}, sc, m;\n"
    "  sc.f = x * 33554432.0f;   /* 2^25: a subnormal scaled into the normal range */\n"
    "  const uint32_t sub = 0u - (uint32_t)(xb.u < 0x00800000u);   /* subnormal or +0 */\n"
    "  const uint32_t ix = ((sc.u & sub) | (xb.u & ~sub)) + (0x3F800000u - 0x3F3504F3u);\n"
    "  m.u = (ix & 0x007FFFFFu) + 0x3F3504F3u;\n"
    "  *k = (float)((int32_t)(ix >> 23) - 127 - (int32_t)(sub & 25u));\n"
    "  return m.f - 1.0f;\n"
    "}\n"
    "/* y, or a log's value where x is not a positive finite float: NaN (x < 0), -inf (+-0), +inf, x (NaN) */\n"
    "static inline CTC_ALWAYS_INLINE float ctc_log_special_f32(float x, float v) {\n"
    "  union { float f; uint32_t u; } xb = {x}, y = {v};\n"
    "  const uint32_t a = xb.u & 0x7FFFFFFFu;\n"
    "  const uint32_t neg = 0u - (uint32_t)(xb.u > 0x80000000u), zero = 0u - (uint32_t)(a == 0u),\n"
    "                 inf = 0u - (uint32_t)(xb.u == 0x7F800000u), nan = 0u - ((0x7F800000u - a) >> 31);\n"
    "  y.u = (y.u & ~(neg | zero | inf)) | (0x7FC00000u & neg) | (0xFF800000u & zero) | (0x7F800000u & inf);\n"
    "  y.u = (xb.u & nan) | (y.u & ~nan);\n"
    "  return y.f;\n"
    "}\n"
    "#endif\n"
    "static inline CTC_ALWAYS_INLINE float ctc_log_f32(float x) {\n"
    "  float k;\n"
    "  const float f = ctc_log_split_f32(x, &k);\n"
    "  return ctc_log_special_f32(x, ctc_logk_f32(f, k, 0.0f));\n"
    "}\n";
static const char log1p_text[] =
    "static inline CTC_ALWAYS_INLINE float ctc_log1p_f32(float x) {\n"
    "  union { float f; uint32_t u; } xb = {x}, ub, m, f, c, y;\n"
    "  ub.f = 1.0f + x;\n"
    "  const uint32_t iu = ub.u + (0x3F800000u - 0x3F3504F3u);\n"
    "  m.u = (iu & 0x007FFFFFu) + 0x3F3504F3u;   /* 1 + x = 2^k m */\n"
    "  const uint32_t k0 = 0u - (uint32_t)((iu >> 23) == 127u);   /* k = 0: f = x exactly, and no correction */\n"
    "  c.f = (x - (ub.f - 1.0f)) / ub.f;   /* (1 + x - u) / u: the rounding of u */\n"
    "  f.f = m.f - 1.0f;\n"
    "  f.u = (xb.u & k0) | (f.u & ~k0);\n"
    "  c.u &= ~k0;\n"
    "  y.f = ctc_logk_f32(f.f, (float)((int32_t)(iu >> 23) - 127), c.f);\n"
    "  /* -1: -inf; below: NaN; +-0 and NaN: x itself; +inf */\n"
    "  const uint32_t m1 = 0u - (uint32_t)(xb.u == 0xBF800000u), inf = 0u - (uint32_t)(xb.u == 0x7F800000u),\n"
    "                 zero = 0u - (uint32_t)((xb.u & 0x7FFFFFFFu) == 0u), neg = 0u - (uint32_t)(xb.u > 0xBF800000u),\n"
    "                 nan = 0u - ((0x7F800000u - (xb.u & 0x7FFFFFFFu)) >> 31);\n"
    "  y.u = (y.u & ~(m1 | inf | zero | neg)) | (0xFF800000u & m1) | (0x7F800000u & inf) | (xb.u & zero)\n"
    "        | (0x7FC00000u & neg);\n"
    "  y.u = (xb.u & nan) | (y.u & ~nan);\n"
    "  return y.f;\n"
    "}\n";

/* sin, cos and tan in f32 without a libm call (glibc's sinf and cosf are scalar calls, 5.5-5.8 ns an
 * element against PyTorch's 0.9-1.2, tanf 12), for every float: x 2/pi = n + f (|f| <= 1/2) reduced exactly
 * in double without a table (a gather keeps GCC from vectorising under znver and generic tuning):
 * 2/pi is 7 chunks of 29 bits, C[i] = c_i 2^(-29 (i + 1)), so each product |x| C[i] (24 and 29
 * significant bits) is exact; each is taken mod 4 exactly (minus its nearest multiple of 8, 0 from
 * 2^54 on), split at 2^-19 into a part h whose sum H is exact and a rest l summed in double
 * (|l| <= 2^-20: an error below 2^-67 of a quarter turn). n = round(H), f = (H - n) + L; the 203
 * bits leave at most |x| 2^-203 <= 2^-75 of a quarter turn, so r = f pi/2 has a relative error
 * below 2^-38 even where f is as small as any float makes it. sin r and cos r are FreeBSD's
 * k_sinf.c and k_cosf.c polynomials in double (errors 2^-37.5 and 2^-34.1 on [-pi/4, pi/4]);
 * the quadrant n mod 4 (plus 1 for cos) picks one and its sign, on the bits (tan: their quotient,
 * or minus the inverse one's). So the result is (float) of a double within 2^-33 of sin x: at most
 * 0.501 ulp (tests/test_math_helpers.py). The
 * selects are masks on the bits (a float select kept the loop scalar on AVX2 without
 * -fno-trapping-math); inf gives NaN, NaN itself. */
static const char sincos_text[] =
    "/* sin x (c = 0), cos x (c = 1) or tan x (c = 2) */\n"
    "static inline CTC_ALWAYS_INLINE float ctc_sincos_f32(float x, uint32_t c) {\n"
    "  static const double C[7] = {0x1.45f306dp-1, 0x1.9391054p-30, 0x1.4fe13abp-59, 0x1.d1f534dp-88,\n"
    "                              0x1.b81b6c5p-117, 0x1.5993c4p-148, 0x1.c820ff2p-175};   /* 2/pi */\n"
    "  union { float f; uint32_t u; } xb = {x}, ab, y;\n"
    "  union { double d; uint64_t u; } tb, gb, nb, sb, cb, rb;\n"
    "  ab.u = xb.u & 0x7FFFFFFFu;\n"
    "  const double t = ab.f;\n"
    "  double H = 0, L = 0;\n"
    "  for (int i = 0; i < 4; i++) {   /* |x| 2/pi mod 4 = H + L */\n"
    "    tb.d = t * C[i];   /* exact */\n"
    "    gb.d = tb.d - ((tb.d + 0x1.8p55) - 0x1.8p55);   /* minus a multiple of 8 near it: exact, in [-4, 4] */\n"
    "    if (i < 3) gb.u &= 0u - (uint64_t)(tb.u < 0x4350000000000000u);   /* from 2^54 on, a multiple of 4 */\n"
    "    const double h = (gb.d + 0x1.8p33) - 0x1.8p33;   /* a multiple of 2^-19 */\n"
    "    H += h;\n"
    "    L += gb.d - h;\n"
    "  }\n"
    "  tb.d = t * C[4];   /* below 2^12: no multiple of 8 to take */\n"
    "  const double h4 = (tb.d + 0x1.8p33) - 0x1.8p33;\n"
    "  H += h4;\n"
    "  L += (tb.d - h4) + CTC_FMA_F64(t, C[5], t * C[6]);   /* the last two below 2^-19 */\n"
    "  nb.d = H + 0x1.8p52;   /* n = round(H) in the low bits */\n"
    "  const double f = (H - (nb.d - 0x1.8p52)) + L, r = f * 0x1.921fb54442d18p0, z = r * r, w = z * z;\n"
    "  sb.d = (r + r * z * CTC_FMA_F64(z, 0x1.11110896efbb2p-7, -0x1.5555554cbac77p-3))\n"
    "         + r * z * w * CTC_FMA_F64(z, 0x1.6cd878c3b46a7p-19, -0x1.a00f9e2cae774p-13);\n"
    "  cb.d = (CTC_FMA_F64(z, -0x1.ffffffd0c5e81p-2, 1.0) + w * 0x1.55553e1053a42p-5)\n"
    "         + w * z * CTC_FMA_F64(z, 0x1.99342e0ee5069p-16, -0x1.6c087e80f1e27p-10);\n"
    "  if (c == 2) {   /* tan: sin r / cos r, or -cos r / sin r where n is odd */\n"
    "    const uint64_t odd = 0u - (uint64_t)(nb.u & 1u);\n"
    "    union { double d; uint64_t u; } nu, de;\n"
    "    nu.u = (cb.u & odd) | (sb.u & ~odd), de.u = (sb.u & odd) | (cb.u & ~odd);\n"
    "    y.f = (float)(nu.d / de.d);\n"
    "    y.u ^= ((uint32_t)nb.u & 1u) << 31 ^ (xb.u & 0x80000000u);   /* tan is odd */\n"
    "  } else {\n"
    "    const uint32_t q = (uint32_t)nb.u + c;   /* the quadrant: sin r, cos r, -sin r, -cos r */\n"
    "    const uint64_t odd = 0u - (uint64_t)(q & 1u);\n"
    "    rb.u = (cb.u & odd) | (sb.u & ~odd);\n"
    "    y.f = (float)rb.d;\n"
    "    y.u ^= ((q >> 1) & 1u) << 31 ^ (xb.u & ~(0u - c) & 0x80000000u);   /* sin is odd */\n"
    "  }\n"
    "  const uint32_t inf = 0u - (uint32_t)(ab.u == 0x7F800000u), nan = 0u - ((0x7F800000u - ab.u) >> 31);\n"
    "  y.u = (y.u & ~inf) | (0x7FC00000u & inf);\n"
    "  y.u = (xb.u & nan) | (y.u & ~nan);\n"
    "  return y.f;\n"
    "}\n"
    "static inline CTC_ALWAYS_INLINE float ctc_sin_f32(float x) { return ctc_sincos_f32(x, 0); }\n"
    "static inline CTC_ALWAYS_INLINE float ctc_cos_f32(float x) { return ctc_sincos_f32(x, 1); }\n"
    "static inline CTC_ALWAYS_INLINE float ctc_tan_f32(float x) { return ctc_sincos_f32(x, 2); }\n";

/* atan and atan2 in f32 without a libm call (glibc's atanf is a scalar call, 11 ns an element, and
 * atan2f 19): in double, FreeBSD's s_atan.c, its four intervals of |x| (from 7/16, 11/16, 19/16 and
 * 39/16 on: atan(1/2), atan(1), atan(3/2) and pi/2 plus the atan of a quotient) chosen by masks on
 * the bits, one division, then its polynomial of degree 22: the double is within 2^-52 of atan x, so
 * the float is atan x correctly rounded but within 2^-28 ulp of a midpoint. atan2(y, x) is the atan
 * of |y| / |x| in double (0 where both are zero, 1 where both are infinite), pi minus it where x is
 * negative or -0, with y's sign: C's and PyTorch's values at the zeros and infinities. */
static const char sel_text[] =
    "/* v where the mask m is set, else old (on the bits: a float select kept loops scalar on AVX2) */\n"
    "static inline CTC_ALWAYS_INLINE double ctc_sel_f64(uint64_t m, double v, double old) {\n"
    "  union { double d; uint64_t u; } a = {v}, b = {old};\n"
    "  a.u = (a.u & m) | (b.u & ~m);\n"
    "  return a.d;\n"
    "}\n";

static const char atan_text[] =
    "/* atan a for a double a >= 0 (inf included) */\n"
    "static inline CTC_ALWAYS_INLINE double ctc_atan_pos_f64(double a) {\n"
    "  union { double d; uint64_t u; } ab = {a};\n"
    "  const uint64_t m0 = 0u - (uint64_t)(ab.u >= 0x3FDC000000000000u), m1 = 0u - (uint64_t)(ab.u >= 0x3FE6000000000000u),\n"
    "                 m2 = 0u - (uint64_t)(ab.u >= 0x3FF3000000000000u), m3 = 0u - (uint64_t)(ab.u >= 0x4003800000000000u);\n"
    "  /* below 7/16 atan a itself; from 7/16, 11/16, 19/16, 39/16 on hi + lo + the atan of num / den */\n"
    "  double num = ctc_sel_f64(m0, 2.0 * a - 1.0, a), den = ctc_sel_f64(m0, 2.0 + a, 1.0);\n"
    "  double hi = ctc_sel_f64(m0, 4.63647609000806093515e-01, 0.0), lo = ctc_sel_f64(m0, 2.26987774529616870924e-17, 0.0);\n"
    "  num = ctc_sel_f64(m1, a - 1.0, num), den = ctc_sel_f64(m1, a + 1.0, den);\n"
    "  hi = ctc_sel_f64(m1, 7.85398163397448278999e-01, hi), lo = ctc_sel_f64(m1, 3.06161699786838301793e-17, lo);\n"
    "  num = ctc_sel_f64(m2, a - 1.5, num), den = ctc_sel_f64(m2, CTC_FMA_F64(1.5, a, 1.0), den);\n"
    "  hi = ctc_sel_f64(m2, 9.82793723247329054082e-01, hi), lo = ctc_sel_f64(m2, 1.39033110312309984516e-17, lo);\n"
    "  num = ctc_sel_f64(m3, -1.0, num), den = ctc_sel_f64(m3, a, den);\n"
    "  hi = ctc_sel_f64(m3, 1.57079632679489655800e+00, hi), lo = ctc_sel_f64(m3, 6.12323399573676603587e-17, lo);\n"
    "  const double x = num / den, z = x * x, w = z * z;\n"
    "  const double s1 = z * CTC_FMA_F64(w, CTC_FMA_F64(w, CTC_FMA_F64(w, CTC_FMA_F64(w, CTC_FMA_F64(w,\n"
    "                    1.62858201153657823623e-02, 4.97687799461593236017e-02), 6.66107313738753120669e-02),\n"
    "                    9.09088713343650656196e-02), 1.42857142725034663711e-01), 3.33333333333329318027e-01);\n"
    "  const double s2 = w * CTC_FMA_F64(w, CTC_FMA_F64(w, CTC_FMA_F64(w, CTC_FMA_F64(w,\n"
    "                    -3.65315727442169155270e-02, -5.83357013379057348645e-02), -7.69187620504482999495e-02),\n"
    "                    -1.11111104054623557880e-01), -1.99999999998764832476e-01);\n"
    "  return hi - ((x * (s1 + s2) - lo) - x);\n"
    "}\n"
    "static inline CTC_ALWAYS_INLINE float ctc_atan_f32(float x) {\n"
    "  union { float f; uint32_t u; } xb = {x}, ab, y;\n"
    "  ab.u = xb.u & 0x7FFFFFFFu;\n"
    "  y.f = (float)ctc_atan_pos_f64(ab.f);\n"
    "  y.u |= xb.u & 0x80000000u;   /* odd */\n"
    "  const uint32_t nan = 0u - ((0x7F800000u - ab.u) >> 31);\n"
    "  y.u = (xb.u & nan) | (y.u & ~nan);\n"
    "  return y.f;\n"
    "}\n"
    "/* asin x = atan(|x| / sqrt((1 - |x|)(1 + |x|))) with x's sign, acos x = 2 atan(sqrt((1 - x) / (1 + x))):\n"
    " * the products exact in double, |x| clamped to 1 (NaN past it) */\n"
    "static inline CTC_ALWAYS_INLINE float ctc_asin_f32(float x) {\n"
    "  union { float f; uint32_t u; } xb = {x}, ab, y;\n"
    "  const uint32_t mag = xb.u & 0x7FFFFFFFu;\n"
    "  ab.u = mag < 0x3F800000u ? mag : 0x3F800000u;\n"
    "  const double a = ab.f;\n"
    "  y.f = (float)ctc_atan_pos_f64(a / sqrt((1.0 - a) * (1.0 + a)));\n"
    "  y.u |= xb.u & 0x80000000u;   /* odd */\n"
    "  y.u |= (0u - (uint32_t)(mag > 0x3F800000u)) & 0x7FC00000u;   /* NaN for |x| > 1 and NaN */\n"
    "  return y.f;\n"
    "}\n"
    "static inline CTC_ALWAYS_INLINE float ctc_acos_f32(float x) {\n"
    "  union { float f; uint32_t u; } xb = {x}, cb, y;\n"
    "  const uint32_t mag = xb.u & 0x7FFFFFFFu;\n"
    "  cb.u = (mag < 0x3F800000u ? mag : 0x3F800000u) | (xb.u & 0x80000000u);\n"
    "  const double c = cb.f;\n"
    "  y.f = (float)(2.0 * ctc_atan_pos_f64(sqrt((1.0 - c) / (1.0 + c))));\n"
    "  y.u |= (0u - (uint32_t)(mag > 0x3F800000u)) & 0x7FC00000u;   /* NaN for |x| > 1 and NaN */\n"
    "  return y.f;\n"
    "}\n"
    "static inline CTC_ALWAYS_INLINE float ctc_atan2_f32(float y, float x) {\n"
    "  union { float f; uint32_t u; } yb = {y}, xb = {x}, ya, xa, r;\n"
    "  union { double d; uint64_t u; } t, a;\n"
    "  ya.u = yb.u & 0x7FFFFFFFu, xa.u = xb.u & 0x7FFFFFFFu;\n"
    "  t.d = (double)ya.f / (double)xa.f;\n"
    "  const uint64_t zz = 0u - (uint64_t)((ya.u | xa.u) == 0u), ii = 0u - (uint64_t)((ya.u & xa.u) == 0x7F800000u);\n"
    "  t.u = (t.u & ~(zz | ii)) | (0x3FF0000000000000u & ii);   /* 0 / 0: 0; inf / inf: 1 */\n"
    "  a.d = ctc_atan_pos_f64(t.d);\n"
    "  a.d = ctc_sel_f64(0u - (uint64_t)(xb.u >> 31), 3.14159265358979311600e+00 - a.d, a.d);   /* x < 0 or -0 */\n"
    "  r.f = (float)a.d;\n"
    "  r.u |= yb.u & 0x80000000u;\n"
    "  const uint32_t nan = 0u - (((0x7F800000u - ya.u) | (0x7F800000u - xa.u)) >> 31);\n"
    "  r.u = (0x7FC00000u & nan) | (r.u & ~nan);\n"
    "  return r.f;\n"
    "}\n";

/* log2 and log10 in f32 without a libm call (glibc's log2f and log10f are scalar calls, 3.7 and 6.5
 * ns an element): x = 2^k m with m in [sqrt(2)/2, sqrt(2)) from the bits (a subnormal scaled by 2^25
 * first), log(m) = log1p(f) in double by FreeBSD's e_log.c (s = f / (2 + f), its degree-14
 * polynomial in s: within 2^-52), then k kc + log1p(f) fc in double (log2: kc = 1, fc = 1 / ln 2;
 * log10: log10(2) and 1 / ln 10): the float is the value correctly rounded but within 2^-28 ulp of
 * a midpoint; log2 of a power of 2 is exact. The split and the special values are ctc_log_f32's
 * (log_text). */
static const char logb_text[] =
    "static inline CTC_ALWAYS_INLINE float ctc_logb_f32(float x, double kc, double fc) {\n"
    "  float kf;\n"
    "  const double f = ctc_log_split_f32(x, &kf), k = kf;\n"
    "  const double s = f / (2.0 + f), z = s * s, w = z * z, hfsq = 0.5 * f * f;\n"
    "  const double r = z * CTC_FMA_F64(w, CTC_FMA_F64(w, CTC_FMA_F64(w, 1.479819860511658591e-01, 1.818357216161805012e-01),\n"
    "                                                  2.857142874366239149e-01), 6.666666666666735130e-01)\n"
    "                   + w * CTC_FMA_F64(w, CTC_FMA_F64(w, 1.531383769920937332e-01, 2.222219843214978396e-01),\n"
    "                                     3.999999999940941908e-01);\n"
    "  return ctc_log_special_f32(x, (float)CTC_FMA_F64(k, kc, (f - (hfsq - s * (hfsq + r))) * fc));\n"
    "}\n"
    "static inline CTC_ALWAYS_INLINE float ctc_log2_f32(float x) { return ctc_logb_f32(x, 1.0, 1.4426950408889634); }\n"
    "static inline CTC_ALWAYS_INLINE float ctc_log10_f32(float x) {\n"
    "  return ctc_logb_f32(x, 0.30102999566398119521, 0.43429448190325182765);\n"
    "}\n";

/* round_bf16 (ir/ops.def; ir/elem.c's ir_round_bf16 is the same statement for the
 * evaluator): the float rounded to bfloat16 as c10::BFloat16's round_to_nearest_even,
 * kept in a float; NaN stays NaN; a double is rounded to float first. */
static const char bf16_text[] =
    "static inline float ctc_bf16_f32(float x) {\n"
    "  uint32_t u;\n"
    "  memcpy(&u, &x, sizeof u);\n"
    "  const uint32_t r = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;\n"
    "  float y;\n"
    "  memcpy(&y, &r, sizeof y);\n"
    "  return x != x ? x : y;\n"
    "}\n";
static const char bf16_f64_text[] =
    "static inline double ctc_bf16_f64(double x) { return (double)ctc_bf16_f32((float)x); }\n";

/* round_f16 (ir/ops.def; ir/elem.c's ir_round_f16 is the same statement for the evaluator):
 * the float rounded to IEEE binary16 as c10::Half's conversion (nearest, ties to even; inf
 * from 65520; subnormals as multiples of 2^-24), kept in a float; NaN stays NaN. */
static const char f16_text[] =
    "static inline float ctc_f16_f32(float x) {\n"
    "  uint32_t u, a;\n"
    "  memcpy(&u, &x, sizeof u);\n"
    "  a = u & 0x7fffffffu;\n"
    "  if (a > 0x7f800000u) return x;\n"
    "  if (a >= 0x477ff000u) a = 0x7f800000u;\n"
    "  else if (a >= 0x38800000u) a = (a + 0xfffu + ((a >> 13) & 1u)) & ~0x1fffu;\n"
    "  else {\n"
    "    const int d = 126 - (int)(a >> 23);\n"
    "    const uint32_t m = (a & 0x7fffffu) | 0x800000u;\n"
    "    uint32_t q = 0;\n"
    "    if (a >> 23 && d < 25) {\n"
    "      const uint32_t rem = m & ((1u << d) - 1), half = 1u << (d - 1);\n"
    "      q = m >> d;\n"
    "      q += rem > half || (rem == half && (q & 1u));\n"
    "    }\n"
    "    const float s = (float)q * 0x1p-24f;\n"
    "    memcpy(&a, &s, sizeof a);\n"
    "  }\n"
    "  u = (u & 0x80000000u) | a;\n"
    "  float y;\n"
    "  memcpy(&y, &u, sizeof y);\n"
    "  return y;\n"
    "}\n";
static const char f16_f64_text[] =
    "static inline double ctc_f16_f64(double x) { return (double)ctc_f16_f32((float)x); }\n";

/* The storage of a .bfloat16() / .half() model's parameters (DT_BF16, DT_F16, ir.h): the bits
 * widened to float exactly, and a float rounded (ctc_bf16_f32, ctc_f16_f32 above) and narrowed;
 * NaN as PyTorch's canonical one. */
static const char bf16_io_text[] =
    "static inline float ctc_bf16_load(uint16_t h) {\n"
    "  const uint32_t u = (uint32_t)h << 16;\n"
    "  float f;\n"
    "  memcpy(&f, &u, sizeof f);\n"
    "  return f;\n"
    "}\n"
    "static inline uint16_t ctc_bf16_store(float x) {\n"
    "  const float r = ctc_bf16_f32(x);\n"
    "  uint32_t u;\n"
    "  memcpy(&u, &r, sizeof u);\n"
    "  return r != r ? (uint16_t)0x7FC0 : (uint16_t)(u >> 16);\n"
    "}\n";
static const char f16_io_text[] =
    "static inline float ctc_f16_load(uint16_t h) {\n"
    "  const uint32_t s = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;\n"
    "  const uint32_t u = e == 31 ? s | 0x7f800000u | m << 13 : s | (e + 112) << 23 | m << 13;\n"
    "  float f;\n"
    "  memcpy(&f, &u, sizeof f);\n"
    "  if (e == 0) f = (s ? -1.0f : 1.0f) * (float)m * 0x1p-24f;   /* zero and the subnormals */\n"
    "  return f;\n"
    "}\n"
    "static inline uint16_t ctc_f16_store(float x) {\n"
    "  const float r = ctc_f16_f32(x);\n"
    "  uint32_t u;\n"
    "  memcpy(&u, &r, sizeof u);\n"
    "  const uint32_t s = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;\n"
    "  if (a > 0x7f800000u) return (uint16_t)(s | 0x7e00u);\n"
    "  if (a == 0x7f800000u) return (uint16_t)(s | 0x7c00u);\n"
    "  if (a < 0x38800000u) return (uint16_t)(s | (uint32_t)((r < 0 ? -r : r) * 0x1p24f));\n"
    "  return (uint16_t)(s | ((a >> 23) - 112) << 10 | ((a >> 13) & 0x3ffu));\n"
    "}\n";

/* exp in f32 without a libm call: at most 1 ulp from the exact exp (checked on every 3rd
 * float), exp(-inf) = 0, inf from 88.73 on, subnormal results rounded once, NaN kept. 2^n exp(r)
 * as in ctc_tanh_f32, with 2^n as 2^k1 2^k2 so that n down to -150 stays exact. Written so that
 * GCC 12 vectorises a loop over it on AVX2 as on AVX-512: |x| clamped to 89 (104 for x < 0) on
 * its bits, k >> 1 for k / 2, a union for the bits and NaN chosen by a mask (a float
 * compare-and-select, memcpy and a division each kept the loop scalar on AVX2). The range
 * reduction and the polynomial's Horner steps are fused multiply-adds where the target has them
 * (CTC_FMA_F32), its last two steps not (fused, they gave 1.02 ulp): 0.988 ulp at most on all
 * 2^32 floats, a loop over it 0.48 -> 0.37 ns an element with AVX-512 and 0.76 -> 0.54 with AVX2
 * (Zen 4); without FMA the same bits as before (0.992 ulp). The reduction and polynomial are
 * ctc_expk_f32, which attention's exps (attn_c.c) call after a clamp of their own (a text of its
 * own, so that a file whose only exps are attention's has no unused ctc_exp_f32: clang's
 * -Wunused-function flags a static inline function in the main file). */
static const char expk_text[] =
    "#ifndef CTC_EXPK_F32   /* (shared by ctc_exp_f32 and a freestanding file's expf, its renamed copy) */\n"
    "#define CTC_EXPK_F32\n"
    "/* e^t for t in [-104, 89], ctc_exp_f32's and attention's after their clamps (a NaN gives a NaN) */\n"
    "static inline CTC_ALWAYS_INLINE float ctc_expk_f32(float t) {\n"
    "  union { float f; uint32_t u; } m, s1, s2, y;\n"
    "  m.f = CTC_FMA_F32(t, 1.44269504089f, 12582912.0f);   /* round(t / ln 2) in the low mantissa bits */\n"
    "  const float n = m.f - 12582912.0f;\n"
    "  const float r = CTC_FMA_F32(n, 2.12194440e-4f, CTC_FMA_F32(n, -0.693359375f, t));\n"
    "  float q = CTC_FMA_F32(1.9875691500e-4f, r, 1.3981999507e-3f);\n"
    "  q = CTC_FMA_F32(q, r, 8.3334519073e-3f);\n"
    "  q = CTC_FMA_F32(q, r, 4.1665795894e-2f);\n"
    "  q = CTC_FMA_F32(q, r, 1.6666665459e-1f);\n"
    "  q = CTC_FMA_F32(q, r, 5.0000001201e-1f);\n"
    "  const float p = (q * r * r + r) + 1.0f;   /* (its last steps not fused: 1.02 ulp when they were) */\n"
    "  const int32_t k = (int32_t)(m.u - 0x4B400000u), k1 = k >> 1, k2 = k - k1;   /* n in [-150, 129]: 2^n = 2^k1 2^k2 */\n"
    "  s1.u = (uint32_t)(k1 + 127) << 23;\n"
    "  s2.u = (uint32_t)(k2 + 127) << 23;\n"
    "  y.f = p * s1.f * s2.f;\n"
    "  return y.f;\n"
    "}\n"
    "#endif\n";
static const char exp_text[] =
    "static inline float ctc_exp_f32(float x) {\n"
    "  union { float f; uint32_t u; } xb = {x}, c, y;\n"
    "  const uint32_t sign = xb.u >> 31, mag = xb.u & 0x7FFFFFFFu;\n"
    "  const uint32_t lim = sign ? 0x42D00000u : 0x42B20000u;   /* |x| at most 104 (x < 0) or 89 */\n"
    "  c.u = (sign << 31) | (mag < lim ? mag : lim);\n"
    "  y.f = ctc_expk_f32(c.f);\n"
    "  const uint32_t nan = 0u - ((0x7F800000u - mag) >> 31);   /* all ones for a NaN: x itself */\n"
    "  y.u = (xb.u & nan) | (y.u & ~nan);\n"
    "  return y.f;\n"
    "}\n";

/* exp in f32 without a libm call, so that loops over it vectorise, and as accurate as
 * libm's expf, for the ops whose templates call exp (sigmoid), which called expf: computed in double, exp(r) 2^n with n = round(x / ln 2) read from the low
 * mantissa bits of x / ln 2 + 1.5 * 2^52, r = x - n ln 2 (ln 2 in two parts, |r| <= 0.347),
 * exp(r) by its Taylor polynomial of degree 11 (relative error below 1e-14), 2^n built in
 * the exponent bits, one rounding to float (subnormal results included). So the result is
 * exp(x) correctly rounded unless exp(x) lies within 1e-14 of a float midpoint: on every
 * 7th float it differs from (float)exp((double)x) once in 1.2e9 arguments, where glibc's
 * expf differs 48,804 times. The clamp of |x| to 89 (x > 0) or 104 (x < 0), past which
 * the result is inf or 0, is integer arithmetic on the bits, and NaN is passed on by
 * setting the result's bits: a select (?:) in a loop that converts float to double keeps
 * GCC from vectorising it. It costs about twice ctc_exp_f32 (double lanes), which the exp op,
 * softmax and attention keep. The reduction and the polynomial are fused multiply-adds where the
 * target has them (CTC_FMA_F64, fma_text; without FMA the same expressions, the same bits as before): a loop
 * over sigmoid 1.37 -> 0.95 ns an element with AVX-512, 1.98 -> 1.28 with AVX2 (Zen 4), and on
 * every 7th float the results differ from (float)exp((double)x) once, as before. */
static const char expd_text[] =
    "/* e^t in double for t in [-105, 90] (relative error below 1e-14), exp_cr's core */\n"
    "static inline CTC_ALWAYS_INLINE double ctc_exp_f64k(double t) {\n"
    "  const double m = CTC_FMA_F64(t, 1.4426950408889634, 6755399441055744.0);   /* round(t / ln 2) in the low mantissa bits */\n"
    "  const double n = m - 6755399441055744.0;\n"
    "  const double r = CTC_FMA_F64(n, -1.90821492927058770002e-10, CTC_FMA_F64(n, -6.93147180369123816490e-01, t));\n"
    "  double p = CTC_FMA_F64(2.5052108385441720e-08, r, 2.7557319223985893e-07);\n"
    "  p = CTC_FMA_F64(p, r, 2.7557319223985888e-06);\n"
    "  p = CTC_FMA_F64(p, r, 2.4801587301587302e-05);\n"
    "  p = CTC_FMA_F64(p, r, 1.9841269841269841e-04);\n"
    "  p = CTC_FMA_F64(p, r, 1.3888888888888889e-03);\n"
    "  p = CTC_FMA_F64(p, r, 8.3333333333333332e-03);\n"
    "  p = CTC_FMA_F64(p, r, 4.1666666666666664e-02);\n"
    "  p = CTC_FMA_F64(p, r, 1.6666666666666666e-01);\n"
    "  p = CTC_FMA_F64(p, r, 0.5);\n"
    "  p = CTC_FMA_F64(p, r, 1.0);\n"
    "  p = CTC_FMA_F64(p, r, 1.0);   /* exp(r) */\n"
    "  uint64_t mi;\n"
    "  memcpy(&mi, &m, sizeof mi);\n"
    "  const uint64_t b = (mi - UINT64_C(0x4338000000000000) + 1023) << 52;   /* 2^n, n in [-152, 130] */\n"
    "  double s;\n"
    "  memcpy(&s, &b, sizeof s);\n"
    "  return p * s;\n"
    "}\n";

/* argmax's order key of a float (kernels/kir_ops.c, KE_KEY): an integer of its width that orders
 * as argmax compares: |x| for x >= 0, -|x| below (so -0 is +0), a NaN above every number (high)
 * or below (argmin's); integer operations only, so that the loops over a row are integer maximum
 * and minimum reductions, which vectorise (a float compare and select in it kept them scalar). */
static const char key_f32_text[] =
    "static inline int32_t ctc_key_f32(float v, int high) {\n"
    "  uint32_t b;\n"
    "  memcpy(&b, &v, sizeof b);\n"
    "  const uint32_t mag = b & 0x7FFFFFFFu, neg = (uint32_t)((int32_t)b >> 31), nan = 0u - (uint32_t)(mag > 0x7F800000u);\n"
    "  const uint32_t k = (mag ^ neg) - neg;   /* -|x| for a negative x */\n"
    "  return (int32_t)((k & ~nan) | ((high ? 0x7FFFFFFFu : 0x80000000u) & nan));\n"
    "}\n";
static const char key_f64_text[] =
    "static inline int64_t ctc_key_f64(double v, int high) {\n"
    "  uint64_t b;\n"
    "  memcpy(&b, &v, sizeof b);\n"
    "  const uint64_t mag = b & UINT64_C(0x7FFFFFFFFFFFFFFF), neg = (uint64_t)((int64_t)b >> 63);\n"
    "  const uint64_t nan = 0u - (uint64_t)(mag > UINT64_C(0x7FF0000000000000)), k = (mag ^ neg) - neg;\n"
    "  return (int64_t)((k & ~nan) | ((high ? UINT64_C(0x7FFFFFFFFFFFFFFF) : UINT64_C(0x8000000000000000)) & nan));\n"
    "}\n";

static const char exp_cr_text[] =
    "static inline float ctc_exp_cr_f32(float x) {\n"
    "  uint32_t xi;\n"
    "  memcpy(&xi, &x, sizeof xi);\n"
    "  const uint32_t sign = xi >> 31, mag = xi & 0x7FFFFFFFu;\n"
    "  const uint32_t lim = 0x42B20000u + sign * (0x42D00000u - 0x42B20000u);   /* 89.0f, or 104.0f for x < 0 */\n"
    "  const int32_t over = (int32_t)(lim - mag);\n"
    "  const uint32_t ci = (mag + (uint32_t)(over & (over >> 31))) | sign << 31;   /* |x| at most lim */\n"
    "  float c;\n"
    "  memcpy(&c, &ci, sizeof c);\n"
    "  const float y = (float)ctc_exp_f64k(c);\n"
    "  uint32_t yi;\n"
    "  memcpy(&yi, &y, sizeof yi);\n"
    "  yi |= ((0x7F800000u - mag) >> 31) * 0x7FC00000u;   /* NaN in, NaN out */\n"
    "  float res;\n"
    "  memcpy(&res, &yi, sizeof res);\n"
    "  return res;\n"
    "}\n";

/* expm1, sinh, cosh and exp2 in f32 without a libm call (glibc's expm1f, sinhf and coshf are scalar
 * calls, 9-16 ns an element; exp2f 3.5): from ctc_exp_f64k's e^t in double, one rounding to float.
 * expm1: e^t - 1, below |x| = 1/4 its Taylor series to t^9 (relative error below 1e-12); sinh and
 * cosh: (e^|x| -+ e^-|x|) / 2, sinh below 1/4 its odd series to t^11; exp2: e^(x ln 2). |x| is
 * clamped on the bits (to 90, past which sinh and cosh are inf; expm1's and exp2's limits for x < 0
 * past which they are -1 and 0), NaN passed on by the bits, the series chosen by a mask (ctc_sel_f64):
 * loops over them vectorise. At most 0.501 ulp (a sweep of every third float). */
static const char expx_text[] =
    "static inline CTC_ALWAYS_INLINE float ctc_expm1_f32(float x) {\n"
    "  union { float f; uint32_t u; } xb = {x}, c, y;\n"
    "  const uint32_t sign = xb.u >> 31, mag = xb.u & 0x7FFFFFFFu;\n"
    "  const uint32_t lim = 0x42B40000u + sign * (0x42D00000u - 0x42B40000u);   /* 90.0f, or 104.0f for x < 0 */\n"
    "  const int32_t over = (int32_t)(lim - mag);\n"
    "  c.u = (mag + (uint32_t)(over & (over >> 31))) | sign << 31;\n"
    "  const double t = c.f;\n"
    "  const double s = t * CTC_FMA_F64(t, CTC_FMA_F64(t, CTC_FMA_F64(t, CTC_FMA_F64(t, CTC_FMA_F64(t, CTC_FMA_F64(t,\n"
    "                   CTC_FMA_F64(t, CTC_FMA_F64(t, 2.7557319223985893e-06, 2.4801587301587302e-05),\n"
    "                   1.9841269841269841e-04), 1.3888888888888889e-03), 8.3333333333333332e-03),\n"
    "                   4.1666666666666664e-02), 1.6666666666666666e-01), 0.5), 1.0);\n"
    "  const double r = ctc_sel_f64(0u - (uint64_t)(mag < 0x3E800000u), s, ctc_exp_f64k(t) - 1.0);   /* |x| < 1/4: the series */\n"
    "  y.f = (float)r;\n"
    "  y.u |= ((0x7F800000u - mag) >> 31) * 0x7FC00000u;   /* NaN in, NaN out */\n"
    "  return y.f;\n"
    "}\n"
    "static inline CTC_ALWAYS_INLINE float ctc_sinh_f32(float x) {\n"
    "  union { float f; uint32_t u; } xb = {x}, c, y;\n"
    "  const uint32_t mag = xb.u & 0x7FFFFFFFu;\n"
    "  c.u = mag < 0x42B40000u ? mag : 0x42B40000u;   /* |x| at most 90 */\n"
    "  const double t = c.f, z = t * t, e = ctc_exp_f64k(t);\n"
    "  const double s = CTC_FMA_F64(t * z, CTC_FMA_F64(z, CTC_FMA_F64(z, CTC_FMA_F64(z, CTC_FMA_F64(z,\n"
    "                   2.5052108385441720e-08, 2.7557319223985888e-06), 1.9841269841269841e-04),\n"
    "                   8.3333333333333332e-03), 1.6666666666666666e-01), t);\n"
    "  const double r = ctc_sel_f64(0u - (uint64_t)(mag < 0x3E800000u), s, 0.5 * (e - 1.0 / e));   /* |x| < 1/4: the series */\n"
    "  y.f = (float)r;\n"
    "  y.u |= xb.u & 0x80000000u;\n"
    "  y.u |= ((0x7F800000u - mag) >> 31) * 0x7FC00000u;   /* NaN in, NaN out */\n"
    "  return y.f;\n"
    "}\n"
    "static inline CTC_ALWAYS_INLINE float ctc_cosh_f32(float x) {\n"
    "  union { float f; uint32_t u; } xb = {x}, c, y;\n"
    "  const uint32_t mag = xb.u & 0x7FFFFFFFu;\n"
    "  c.u = mag < 0x42B40000u ? mag : 0x42B40000u;   /* |x| at most 90 */\n"
    "  const double e = ctc_exp_f64k(c.f);\n"
    "  y.f = (float)(0.5 * (e + 1.0 / e));\n"
    "  y.u |= ((0x7F800000u - mag) >> 31) * 0x7FC00000u;   /* NaN in, NaN out */\n"
    "  return y.f;\n"
    "}\n"
    "static inline CTC_ALWAYS_INLINE float ctc_exp2_f32(float x) {\n"
    "  union { float f; uint32_t u; } xb = {x}, c, y;\n"
    "  const uint32_t sign = xb.u >> 31, mag = xb.u & 0x7FFFFFFFu;\n"
    "  const uint32_t lim = 0x43010000u + sign * (0x43170000u - 0x43010000u);   /* 129.0f, or 151.0f for x < 0 */\n"
    "  const int32_t over = (int32_t)(lim - mag);\n"
    "  c.u = (mag + (uint32_t)(over & (over >> 31))) | sign << 31;\n"
    "  y.f = (float)ctc_exp_f64k((double)c.f * 0.69314718055994530942);\n"
    "  y.u |= ((0x7F800000u - mag) >> 31) * 0x7FC00000u;   /* NaN in, NaN out */\n"
    "  return y.f;\n"
    "}\n";

/* Sums and maxima of a contiguous float row. A sum runs in 32 interleaved lanes
 * (element i into lane i % 32, then a fixed tree): one accumulator would wait on each
 * add (a 4-cycle chain per element), and 8 lanes are one vector of doubles, still one
 * chain (BatchNorm's statistics ran at 30 GB/s); 32 lanes, 4 rows of 8 that GCC keeps in
 * registers, are 4 (AVX-512) or 8 (AVX2) independent vectors. The order is
 * fixed, so the result is the same on every run and thread count; sums accumulate in
 * double (in float in --freestanding f32 code: $A).
 * A maximum does not depend on the order (an OpenMP simd reduction where OpenMP
 * is on); it propagates NaN (the last one, as the sequential loop did). */
static const char sum_text[] =
    "/* the sum of `runs` runs of n elements, stride apart (BatchNorm's statistics: a channel's rows of\n"
    " * every image); the lanes go on from run to run, so a short run costs no reduction of its own */\n"
    "static inline $A ctc_sum_runs_$S(const $T *x, int64_t n, int64_t runs, int64_t stride) {\n"
    "  $A s[4][8] = {{0}};   /* element i of a run in lane i % 32: 4 vectors of 8 */\n"
    "  for (int64_t r = 0; r < runs; r++, x += stride) {\n"
    "    int64_t i = 0;\n"
    "    for (; i + 32 <= n; i += 32)\n"
    "      for (int v = 0; v < 4; v++)\n"
    "        for (int u = 0; u < 8; u++) s[v][u] += ($A)x[i + 8 * v + u];\n"
    "    for (; i + 8 <= n; i += 8)   /* the rest: whole vectors of 8, then single lanes */\n"
    "      for (int u = 0; u < 8; u++) s[i / 8 % 4][u] += ($A)x[i + u];\n"
    "    for (int u = 0; i + u < n; u++) s[i / 8 % 4][u] += ($A)x[i + u];\n"
    "  }\n"
    "  for (int u = 0; u < 8; u++) s[0][u] = (s[0][u] + s[2][u]) + (s[1][u] + s[3][u]);\n"
    "  return ((s[0][0] + s[0][4]) + (s[0][1] + s[0][5])) + ((s[0][2] + s[0][6]) + (s[0][3] + s[0][7]));\n"
    "}\n"
    "static inline $A ctc_sum_$S(const $T *x, int64_t n) { return ctc_sum_runs_$S(x, n, 1, 0); }\n";
static const Part max_text[] = {
    {"static inline $T ctc_max_$S(const $T *x, int64_t n) {\n"
     "  $T r = -INFINITY, z = 0;   /* z: NaN once a NaN or an infinity was seen */\n", NULL},
    {"#ifdef _OPENMP\n"
     "#pragma omp simd reduction(max : r) reduction(+ : z)\n"
     "#endif\n", ""},
    {"  for (int64_t i = 0; i < n; i++) {\n"
     "    const $T v = x[i];\n"
     "    r = v > r ? v : r;\n"
     "    z += v - v;\n"
     "  }\n"
     "  if (z != z)\n"
     "    for (int64_t j = n - 1; j >= 0; j--)\n"
     "      if (x[j] != x[j]) return x[j];\n"
     "  return r;\n"
     "}\n", NULL},
};

/* Writes text with $T, $S, $U (the unsigned type of an integer $T) and $F (the
 * libm suffix: f for f32) replaced for dtype t. */
static void instantiate(Buf *b, const char *text, DType t) {
  for (const char *s = text; *s; s++) {
    if (s[0] == '$' && s[1] == 'F') cg_puts(b, t == DT_F32 ? "f" : ""), s++;
    else if (s[0] == '$' && s[1] == 'U') cg_puts(b, t == DT_I32 ? "uint32_t" : "uint64_t"), s++;
    else if (s[0] == '$' && s[1] == 'T') cg_puts(b, cg_ctype(t)), s++;
    else if (s[0] == '$' && s[1] == 'S') cg_puts(b, cg_dt_suffix(t)), s++;
    else if (s[0] == '$' && s[1] == 'G') cg_puts(b, t == DT_F64 ? "cblas_dgemm" : "cblas_sgemm"), s++;
    else cg_printf(b, "%c", *s);
  }
}

/* The parts of a helper, each instantiated: the freestanding text when fs. */
static void instantiate_parts(Buf *b, const Part *p, int n, DType t, int fs) {
  for (int i = 0; i < n; i++) instantiate(b, fs && p[i].fs ? p[i].fs : p[i].hosted, t);
}

/* instantiate, with $<key> replaced by val first: $A the type sums accumulate in (sum_text),
 * $M a variant's name (matmul_fn_text) */
static void instantiate_with(Buf *b, const char *text, DType t, char key, const char *val) {
  Buf x = {0};
  for (const char *s = text; *s; s++) {
    if (s[0] == '$' && s[1] == key) cg_puts(&x, val), s++;
    else cg_printf(&x, "%c", *s);
  }
  instantiate(b, x.s, t);
  cg_buf_free(&x);
}

/* Writes text with $I replaced by isa. */
static void instantiate_isa(Buf *b, const char *text, const char *isa) {
  for (const char *s = text; *s; s++) {
    const char *d = strstr(s, "$I");
    if (!d) {
      cg_puts(b, s);
      return;
    }
    cg_printf(b, "%.*s%s", (int)(d - s), s, isa);
    s = d + 1;
  }
}

/* The helpers ctc_remainder_<dt>, ctc_floordiv_<dt> (Python's % and //) and ctc_ipow_<dt>
 * (integer pow), stated once as
 * C expressions in ir/elem.c (ir_elem_helper; its evaluator computes the same text): each as
 * `static T ctc_NAME_<dt>(T a, T b, ...) { return TEXT; }`, with the helpers they call
 * before them. */
static void elem_helpers(Buf *b, DType t, int remainder, int floordiv, int ipow) {
  enum { MAXH = 16 };
  const char *name[MAXH], *text[MAXH];
  int nargs[MAXH], need[MAXH] = {0}, n = 0;
  while (n < MAXH && (name[n] = ir_elem_helper(n, t, &text[n], &nargs[n]))) {
    need[n] = (remainder && !strcmp(name[n], "remainder")) || (floordiv && !strcmp(name[n], "floordiv")) ||
              (ipow && !strcmp(name[n], "ipow"));
    n++;
  }
  char call[64];
  for (int h = n - 1; h >= 0; h--)   /* and the ones they call (always earlier) */
    for (int j = 0; j < h && need[h]; j++) {
      snprintf(call, sizeof call, "ctc_%s(", name[j]);
      if (text[h] && strstr(text[h], call)) need[j] = 1;
    }
  static const char *const params[] = {"a", "b", "c"};
  const char *ct = cg_ctype(t), *sfx = cg_dt_suffix(t);
  for (int h = 0; h < n; h++) {
    if (!need[h]) continue;
    if (!text[h]) BUG("helper ctc_%s has no %s form", name[h], ir_dtype_name(t));
    Buf x = {0};   /* the text, its calls of helpers given the dtype suffix */
    for (const char *s = text[h]; *s;) {
      int j = 0;
      if (!strncmp(s, "ctc_", 4))
        for (; j < n; j++) {
          size_t len = strlen(name[j]);
          if (!strncmp(s + 4, name[j], len) && s[4 + len] == '(') break;
        }
      if (j < n && !strncmp(s, "ctc_", 4)) {
        cg_printf(&x, "ctc_%s_%s", name[j], sfx);
        s += 4 + strlen(name[j]);
      } else {
        cg_printf(&x, "%c", *s++);
      }
    }
    cg_printf(b, "static %s ctc_%s_%s(", ct, name[h], sfx);
    for (int i = 0; i < nargs[h]; i++) cg_printf(b, "%s%s %s", i ? ", " : "", ct, params[i]);
    cg_puts(b, ") { return ");
    cg_expand(b, x.s, params, nargs[h], t);
    cg_puts(b, "; }\n");
    cg_buf_free(&x);
  }
  cg_puts(b, "\n");
}

void cg_emit_kernels(Buf *b, const Kernels *k) {
  const int fs = k->freestanding;
  if (k->simd && fs) cg_puts(b, "/* Loops whose iterations are independent: vectorised even inside OpenMP regions. */\n"
                                "#define CTC_OMP_SIMD\n#define CTC_OMP_FOR_SIMD\n\n");
  else if (k->simd)
    cg_puts(b, "/* Loops whose iterations are independent: vectorised even inside OpenMP regions. */\n"
               "#ifdef _OPENMP\n#define CTC_OMP_SIMD _Pragma(\"omp simd\")\n"
               "#define CTC_OMP_FOR_SIMD _Pragma(\"omp parallel for simd\")\n"
               "#else\n#define CTC_OMP_SIMD\n#define CTC_OMP_FOR_SIMD\n#endif\n\n");
  if ((k->gemm[DT_F32] || k->gemm[DT_F64]) && fs)
    cg_puts(b, "/* A parallel region: a GEMM split over the threads (ctc_gemm_block). */\n"
               "#define CTC_OMP_PARALLEL\n\n");
  else if (k->gemm[DT_F32] || k->gemm[DT_F64])
    cg_puts(b, "/* A parallel region: a GEMM split over the threads (ctc_gemm_block). */\n"
               "#ifdef _OPENMP\n#define CTC_OMP_PARALLEL _Pragma(\"omp parallel\")\n"
               "#else\n#define CTC_OMP_PARALLEL\n#endif\n\n");
  for (int t = 0; t < DT_COUNT; t++) {
    if (!k->gemm[t]) continue;
    int blas = t == DT_F32 || t == DT_F64;
    instantiate(b, gemm_text, (DType)t);   /* with BLAS too: ctc_matmul_block's narrow remainders */
    cg_puts(b, "\n");
    if (t == DT_F32 && fs) {   /* ctc's own f32 GEMMs: the NEON one alone (<immintrin.h> is not freestanding) */
      cg_printf(b, "\n\n#if defined(__aarch64__) && defined(__ARM_NEON)\n%s%s%s", cg_gemm_neon_sel, cg_gemm_pack_at_text,
                cg_gemm_neon_head);
      instantiate_isa(b, cg_gemm_simd16_text, "neon");
      cg_puts(b, cg_gemv_neon_text);
      cg_puts(b, "#endif\n\n");
    } else if (t == DT_F32) {   /* the texts above, for every ISA, in the runtime's header */
      cg_puts(b, "/* ctc's f32 GEMM microkernels for the ISA the compiler targets (AVX-512, AVX2+FMA, NEON) */\n");
      if (k->gemm_bf16) cg_puts(b, "#define CTC_WANT_GEMM_BF16 1   /* and its bf16 one (AVX-512 BF16) */\n");
      cg_puts(b, "#include \"ctc_gemm_simd.h\"\n\n");
    }
    if (blas) instantiate_parts(b, matmul_text, NPARTS(matmul_text), (DType)t, fs), cg_puts(b, "\n");
    if (blas && (k->matmul[t] || (t == DT_F32 && k->matmul_bf16))) {   /* (ctc_matmul_bf16 takes its split) */
      instantiate_parts(b, matmul_call_text, NPARTS(matmul_call_text), (DType)t, fs);
      if (k->matmul[t]) instantiate_with(b, matmul_fn_text, (DType)t, 'M', cg_dt_suffix((DType)t));
      cg_puts(b, "\n");
    }
    if (t == DT_F32 && k->gemm_pk) cg_printf(b, "%s\n", matmul_pk_text);
    if (t == DT_F32 && k->gemm_bf16)
      instantiate_parts(b, matmul_bf16_text, NPARTS(matmul_bf16_text), DT_F32, fs), cg_puts(b, "\n");
    if (t == DT_F32 && k->matmul_bf16) instantiate_with(b, matmul_fn_text, DT_F32, 'M', "bf16"), cg_puts(b, "\n");
  }
  int fold = 0;
  for (int t = 0; t < DT_COUNT; t++) fold |= k->im2col[t] | k->col2im[t];
  if (fold) cg_printf(b, "%s\n", conv_span_text);
  for (int t = 0; t < DT_COUNT; t++)
    if (k->im2col[t]) {
      instantiate(b, im2col_text, (DType)t);
      cg_puts(b, "\n");
    }
  for (int t = 0; t < DT_COUNT; t++)
    if (k->dwconv[t]) {
      instantiate(b, dwconv_text, (DType)t);
      cg_puts(b, "\n");
    }
  int flat = 0;
  for (int t = 0; t < DT_COUNT; t++) flat |= k->dwconv_flat[t];
  if (flat)
    cg_printf(b, "#define CTC_DW_BAND %d\n#define CTC_DW_PART %d\n#define CTC_DW_TAPS %d\n", CG_DW_BAND, CG_DW_PART,
              CG_DW_TAPS);
  for (int t = 0; t < DT_COUNT; t++)
    if (k->dwconv_flat[t]) {
      instantiate(b, dwconv_flat_text, (DType)t);
      cg_puts(b, "\n");
    }
  for (int t = 0; t < DT_COUNT; t++)
    if (k->col2im[t]) {
      instantiate(b, col2im_text, (DType)t);
      cg_puts(b, "\n");
    }
  for (int t = 0; t < DT_COUNT; t++)
    if (k->remainder[t] || k->floordiv[t] || k->ipow[t])
      elem_helpers(b, (DType)t, k->remainder[t], k->floordiv[t], k->ipow[t]);
  for (int t = 0; t < DT_COUNT; t++) {
    if (k->sum[t]) instantiate_with(b, sum_text, (DType)t, 'A', t == DT_F32 && k->float_acc ? "float" : "double"),
                   cg_puts(b, "\n");
    if (k->max[t]) instantiate_parts(b, max_text, NPARTS(max_text), (DType)t, fs), cg_puts(b, "\n");
  }
  if (k->tanh_f32 || k->erf_f32 || k->exp_f32 || k->expk_f32 || k->exp_cr_f32 || k->log_f32 || k->log1p_f32 || k->sincos_f32 ||
      k->atan_f32 || k->logb_f32 || k->expx_f32)
    cg_printf(b, "%s", fma_text);
  if (k->atan_f32 || k->expx_f32) cg_printf(b, "%s", sel_text);
  if (k->tanh_f32) cg_printf(b, "%s\n", tanh_text);
  if (k->erf_f32) cg_printf(b, "%s\n", erf_text);
  if (k->log_f32 || k->log1p_f32 || k->logb_f32) cg_printf(b, "%s\n", log_text);   /* (logb: its split) */
  if (k->log1p_f32) cg_printf(b, "%s\n", log1p_text);
  if (k->sincos_f32) cg_printf(b, "%s\n", sincos_text);
  if (k->atan_f32) cg_printf(b, "%s\n", atan_text);
  if (k->logb_f32) cg_printf(b, "%s\n", logb_text);
  if (k->exp_f32 || k->expk_f32) cg_printf(b, "%s", expk_text);
  if (k->exp_f32) cg_printf(b, "%s\n", exp_text);
  if (k->exp_cr_f32 || k->expx_f32) cg_printf(b, "%s", expd_text);
  if (k->exp_cr_f32) cg_printf(b, "%s\n", exp_cr_text);
  if (k->expx_f32) cg_printf(b, "%s\n", expx_text);
  if (k->key_f32) cg_printf(b, "%s\n", key_f32_text);
  if (k->key_f64) cg_printf(b, "%s\n", key_f64_text);
  if (k->bf16[DT_F32] || k->bf16[DT_F64]) cg_printf(b, "%s\n", bf16_text);
  if (k->bf16[DT_F64]) cg_printf(b, "%s\n", bf16_f64_text);
  if (k->f16[DT_F32] || k->f16[DT_F64]) cg_printf(b, "%s\n", f16_text);
  if (k->f16[DT_F64]) cg_printf(b, "%s\n", f16_f64_text);
  if (k->low_io[DT_BF16]) cg_printf(b, "%s\n", bf16_io_text);
  if (k->low_io[DT_F16]) cg_printf(b, "%s\n", f16_io_text);
  int rng = 0, trunc = 0;
  for (int t = 0; t < DT_COUNT; t++) rng |= k->uniform[t] | k->normal[t] | k->trunc_normal[t], trunc |= k->trunc_normal[t];
  if (rng) cg_printf(b, "%s\n", rng_text);
  if (trunc) cg_printf(b, "%s\n", trunc_draw_text);
  for (int t = 0; t < DT_COUNT; t++) {
    int low = ir_dtype_is_low((DType)t);
    if (k->uniform[t]) instantiate(b, low ? uniform_low_text : uniform_text, (DType)t), cg_puts(b, "\n");
    if (k->normal[t]) instantiate(b, low ? normal_low_text : normal_text, (DType)t), cg_puts(b, "\n");
    if (k->trunc_normal[t]) instantiate(b, low ? trunc_normal_low_text : trunc_normal_text, (DType)t), cg_puts(b, "\n");
  }
  cg_emit_attention_kernels(b, k);   /* attn_c.c (after ctc_exp_f32, which it calls) */
}

const char *cg_fma_text(void) { return fma_text; }
const char *cg_expk_f32_text(void) { return expk_text; }
const char *cg_exp_f32_text(void) { return exp_text; }
const char *cg_tanh_f32_text(void) { return tanh_text; }
const char *cg_log_f32_text(void) { return log_text; }
