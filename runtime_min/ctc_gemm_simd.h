/* ctc_gemm_simd.h - ctc's f32 GEMM microkernels: AVX-512 (ctc_gemm_avx512_f32), else
 * AVX2+FMA (ctc_gemm_avx2_f32), or NEON on aarch64 (ctc_gemm_neon_f32), as the compiler's
 * -march allows; the AVX2 and NEON ones only without CTC_HAVE_CBLAS. A generated model.c
 * that runs f32 GEMMs includes it after its portable ctc_gemm_f32, and its
 * ctc_matmul_block_f32 calls the one that is in (CTC_GEMM_<ISA>_f32 says which).
 * With AVX-512 BF16, also the GEMM of floats holding bfloat16 values
 * (ctc_gemm_avx512bf16, CTC_GEMM_AVX512BF16), which ctc_matmul_block_bf16 calls, in a
 * model.c that defines CTC_WANT_GEMM_BF16 before including it.
 *
 * Written by scripts/gen_runtime.py from the texts of codegen_c/kernels.c (docs/speed.md
 * describes the kernels); do not edit. */
#ifndef CTC_GEMM_SIMD_H
#define CTC_GEMM_SIMD_H

#include <stdint.h>
#include <string.h>

#if defined(__AVX512F__)
#include <immintrin.h>
#define CTC_GEMM_AVX512_f32 1
/* dst[k * ldd + j] = src[j * lds + k] for a 16x16 block: unpack 32-bit, then 64-bit
 * pairs, then a 4x4 transpose of the 128-bit lanes. */
static inline void ctc_transpose16_f32(const float *src, int64_t lds, float *dst, int64_t ldd) {
  __m512 r[16], t[16];
#pragma GCC unroll 16
  for (int i = 0; i < 16; i++) r[i] = _mm512_loadu_ps(src + i * lds);
#pragma GCC unroll 8
  for (int i = 0; i < 8; i++) {
    t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
#pragma GCC unroll 4
  for (int i = 0; i < 4; i++) {
    const __m512d t0 = _mm512_castps_pd(t[4 * i]), t1 = _mm512_castps_pd(t[4 * i + 1]);
    const __m512d t2 = _mm512_castps_pd(t[4 * i + 2]), t3 = _mm512_castps_pd(t[4 * i + 3]);
    r[4 * i] = _mm512_castpd_ps(_mm512_unpacklo_pd(t0, t2));
    r[4 * i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(t0, t2));
    r[4 * i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(t1, t3));
    r[4 * i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(t1, t3));
  }
#pragma GCC unroll 4
  for (int c = 0; c < 4; c++) {
    const __m512 p0 = _mm512_shuffle_f32x4(r[c], r[4 + c], 0x44), p1 = _mm512_shuffle_f32x4(r[c], r[4 + c], 0xEE);
    const __m512 q0 = _mm512_shuffle_f32x4(r[8 + c], r[12 + c], 0x44), q1 = _mm512_shuffle_f32x4(r[8 + c], r[12 + c], 0xEE);
    _mm512_storeu_ps(dst + c * ldd, _mm512_shuffle_f32x4(p0, q0, 0x88));
    _mm512_storeu_ps(dst + (4 + c) * ldd, _mm512_shuffle_f32x4(p0, q0, 0xDD));
    _mm512_storeu_ps(dst + (8 + c) * ldd, _mm512_shuffle_f32x4(p1, q1, 0x88));
    _mm512_storeu_ps(dst + (12 + c) * ldd, _mm512_shuffle_f32x4(p1, q1, 0xDD));
  }
}
/* bp[k][32] = op(B)[k0 + k, j0 + j] for k < kc, j < nr; zero for j >= nr. A whole panel's row is two
 * vector moves, not a memcpy call (a convolution's GEMM with 32 rows spent a fifth of its time here). */
static void ctc_pack_b_f32(int tb, const float *b, int64_t ldb, int64_t k0, int64_t kc, int64_t j0, int nr,
                           float *restrict bp) {
  if (!tb && nr == 32) {
    for (int64_t k = 0; k < kc; k++) {
      const float *bk = b + (k0 + k) * ldb + j0;
      _mm512_store_ps(bp + k * 32, _mm512_loadu_ps(bk));
      _mm512_store_ps(bp + k * 32 + 16, _mm512_loadu_ps(bk + 16));
    }
    return;
  }
  if (!tb) {
    for (int64_t k = 0; k < kc; k++) {
      memcpy(bp + k * 32, b + (k0 + k) * ldb + j0, sizeof(float) * (size_t)nr);
      if (nr < 32) memset(bp + k * 32 + nr, 0, sizeof(float) * (size_t)(32 - nr));
    }
    return;
  }
  const int64_t k16 = nr == 32 ? kc / 16 * 16 : 0;
  for (int64_t k = 0; k < k16; k += 16) {
    ctc_transpose16_f32(b + j0 * ldb + k0 + k, ldb, bp + k * 32, 32);
    ctc_transpose16_f32(b + (j0 + 16) * ldb + k0 + k, ldb, bp + k * 32 + 16, 32);
  }
  for (int j = 0; j < 32; j++) {
    const float *bj = b + (j0 + j) * ldb + k0;
    for (int64_t k = k16; k < kc; k++) bp[k * 32 + j] = j < nr ? bj[k] : 0;
  }
}
/* The tile C[mr, 32 columns masked by m0, m1] = (C +, if add) sum over k < kc of A[i, k] bp[k]:
 * A[i, k] at a[i * ars + k * aks]. R (12, 8 or 4, a constant where it is called) rows are
 * computed: rows mr..R-1 repeat row 0 and are not stored. The registers sum 32 k at a
 * time, each such partial sum added to C in memory (blocked summation: the rounding
 * error of a dot product of length K grows as 32 + K / 32 additions, not K). */
static inline void ctc_gemm_tile_f32(const int R, int64_t kc, const float *a, int64_t ars, int64_t aks, int mr,
                                     const float *restrict bp, float *c, int64_t ldc, __mmask16 m0,
                                     __mmask16 m1, int add) {
  const float *ai[12];
#pragma GCC unroll 12
  for (int i = 0; i < R; i++) ai[i] = a + (i < mr ? i : 0) * ars;
  for (int64_t k0 = 0; k0 < kc; k0 += 32) {
    const int64_t k1 = kc - k0 < 32 ? kc : k0 + 32;
    __m512 c0[12], c1[12];
#pragma GCC unroll 12
    for (int i = 0; i < R; i++) c0[i] = _mm512_setzero_ps(), c1[i] = _mm512_setzero_ps();
    for (int64_t k = k0; k < k1; k++) {
      const __m512 b0 = _mm512_load_ps(bp + k * 32), b1 = _mm512_load_ps(bp + k * 32 + 16);
#pragma GCC unroll 12
      for (int i = 0; i < R; i++) {
        const __m512 av = _mm512_set1_ps(ai[i][k * aks]);
        c0[i] = _mm512_fmadd_ps(av, b0, c0[i]);
        c1[i] = _mm512_fmadd_ps(av, b1, c1[i]);
      }
    }
#pragma GCC unroll 12
    for (int i = 0; i < R; i++) {
      if (i >= mr) break;
      float *ci = c + i * ldc;
      if (add || k0 > 0) {
        c0[i] = _mm512_add_ps(_mm512_maskz_loadu_ps(m0, ci), c0[i]);
        c1[i] = _mm512_add_ps(_mm512_maskz_loadu_ps(m1, ci + 16), c1[i]);
      }
      _mm512_mask_storeu_ps(ci, m0, c0[i]);
      _mm512_mask_storeu_ps(ci + 16, m1, c1[i]);
    }
  }
}
/* C[M,N] = op(A) op(B), or C += if acc (as ctc_gemm_f32); serial. */
static void ctc_gemm_avx512_f32(int ta, int tb, int acc, int64_t M, int64_t N, int64_t K, const float *a,
                                int64_t lda, const float *b, int64_t ldb, float *c, int64_t ldc) {
  _Alignas(64) float bp[512 * 32];
  const int64_t ars = ta ? 1 : lda, aks = ta ? lda : 1;
  if (K <= 0) {
    for (int64_t i = 0; i < M && !acc; i++) memset(c + i * ldc, 0, sizeof(float) * (size_t)N);
    return;
  }
  /* K in equal blocks of at most 512 (multiples of 16 but the last) */
  const int64_t nkb = (K + 511) / 512, kb = ((K + nkb - 1) / nkb + 15) / 16 * 16;
  for (int64_t k0 = 0; k0 < K; k0 += kb) {
    const int64_t kc = K - k0 < kb ? K - k0 : kb;
    for (int64_t i0 = 0; i0 < M; i0 += 192) {
      const int64_t mc = M - i0 < 192 ? M - i0 : 192;
      for (int64_t j0 = 0; j0 < N; j0 += 32) {
        const int nr = N - j0 < 32 ? (int)(N - j0) : 32;
        const __mmask16 m0 = nr >= 16 ? 0xffff : (__mmask16)((1u << nr) - 1);
        const __mmask16 m1 = nr >= 32 ? 0xffff : nr <= 16 ? 0 : (__mmask16)((1u << (nr - 16)) - 1);
        ctc_pack_b_f32(tb, b, ldb, k0, kc, j0, nr, bp);
        for (int64_t i = i0; i < i0 + mc; i += 12) {
          const int mr = i0 + mc - i < 12 ? (int)(i0 + mc - i) : 12;
          const float *ai = a + i * ars + k0 * aks;
          float *ci = c + i * ldc + j0;
          const int add = acc || k0 > 0;
          if (mr > 8) ctc_gemm_tile_f32(12, kc, ai, ars, aks, mr, bp, ci, ldc, m0, m1, add);
          else if (mr > 4) ctc_gemm_tile_f32(8, kc, ai, ars, aks, mr, bp, ci, ldc, m0, m1, add);   /* a last, shorter tile */
          else ctc_gemm_tile_f32(4, kc, ai, ars, aks, mr, bp, ci, ldc, m0, m1, add);
        }
      }
    }
  }
}
#endif

#if defined(CTC_WANT_GEMM_BF16) && defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512BF16__)
#include <immintrin.h>
#define CTC_GEMM_AVX512BF16 1
/* 16 bf16 pairs from 32 consecutive floats holding bfloat16 values (their upper halves, in
 * order: pair q is (p[2q], p[2q+1])); the floats past n are zeros. */
static inline __m512i ctc_bf16_pairs_row(const float *p, int64_t n) {
  const __m512i odd = _mm512_set_epi16(63, 61, 59, 57, 55, 53, 51, 49, 47, 45, 43, 41, 39, 37, 35, 33, 31, 29, 27,
                                       25, 23, 21, 19, 17, 15, 13, 11, 9, 7, 5, 3, 1);
  const __mmask16 m0 = n >= 16 ? 0xffff : n <= 0 ? 0 : (__mmask16)((1u << n) - 1);
  const __mmask16 m1 = n >= 32 ? 0xffff : n <= 16 ? 0 : (__mmask16)((1u << (n - 16)) - 1);
  const __m512i lo = _mm512_castps_si512(_mm512_maskz_loadu_ps(m0, p));
  const __m512i hi = _mm512_castps_si512(_mm512_maskz_loadu_ps(m1, p + 16));
  return _mm512_permutex2var_epi16(lo, odd, hi);
}
/* 16 bf16 pairs (x[j], y[j]) of two vectors of floats holding bfloat16 values. */
static inline __m512i ctc_bf16_pairs_cols(__m512 x, __m512 y) {
  return _mm512_or_si512(_mm512_and_si512(_mm512_castps_si512(y), _mm512_set1_epi32((int)0xffff0000u)),
                         _mm512_srli_epi32(_mm512_castps_si512(x), 16));
}
/* op(A)'s block [i0, i0 + mc) x [k0, k0 + kc) as bf16 pairs along k, zero-padded to an even kc:
 * row-major ap[i * kpl + q] (kpl: kc / 2 rounded up to 16) when A is not transposed, else
 * ap[q * mcl + i] (mcl: mc rounded up to 16). */
static void ctc_pack_a_bf16(int ta, const float *a, int64_t lda, int64_t i0, int64_t mc, int64_t k0, int64_t kc,
                            int64_t kpl, int64_t mcl, uint32_t *restrict ap) {
  if (!ta) {
    for (int64_t i = 0; i < mc; i++)
      for (int64_t q = 0; q < kpl; q += 16)
        _mm512_store_si512(ap + i * kpl + q, ctc_bf16_pairs_row(a + (i0 + i) * lda + k0 + 2 * q, kc - 2 * q));
    return;
  }
  for (int64_t q = 0; 2 * q < kc; q++) {
    const float *x = a + (k0 + 2 * q) * lda + i0, *y = x + lda;
    const int two = 2 * q + 1 < kc;
    for (int64_t i = 0; i < mcl; i += 16) {
      const __mmask16 m = mc - i >= 16 ? 0xffff : (__mmask16)((1u << (mc - i)) - 1);
      const __m512 xv = _mm512_maskz_loadu_ps(m, x + i), yv = two ? _mm512_maskz_loadu_ps(m, y + i) : _mm512_setzero_ps();
      _mm512_store_si512(ap + q * mcl + i, ctc_bf16_pairs_cols(xv, yv));
    }
  }
}
/* op(B)'s panel of 32 columns [j0, j0 + nr) over [k0, k0 + kc) as bf16 pairs along k:
 * bp[q * 32 + j] = (B[k0 + 2q, j0 + j], B[k0 + 2q + 1, j0 + j]), zero past kc and nr; when B
 * is transposed, 16 columns' rows of pairs at a time through a 16x16 transpose. */
static void ctc_pack_b_bf16(int tb, const float *b, int64_t ldb, int64_t k0, int64_t kc, int64_t j0, int nr,
                            uint32_t *restrict bp) {
  const __mmask16 m0 = nr >= 16 ? 0xffff : (__mmask16)((1u << nr) - 1);
  const __mmask16 m1 = nr >= 32 ? 0xffff : nr <= 16 ? 0 : (__mmask16)((1u << (nr - 16)) - 1);
  if (!tb) {
    for (int64_t q = 0; 2 * q < kc; q++) {
      const float *x = b + (k0 + 2 * q) * ldb + j0, *y = x + ldb;
      const int two = 2 * q + 1 < kc;
      const __m512 x0 = _mm512_maskz_loadu_ps(m0, x), x1 = _mm512_maskz_loadu_ps(m1, x + 16);
      const __m512 y0 = two ? _mm512_maskz_loadu_ps(m0, y) : _mm512_setzero_ps();
      const __m512 y1 = two ? _mm512_maskz_loadu_ps(m1, y + 16) : _mm512_setzero_ps();
      _mm512_store_si512(bp + q * 32, ctc_bf16_pairs_cols(x0, y0));
      _mm512_store_si512(bp + q * 32 + 16, ctc_bf16_pairs_cols(x1, y1));
    }
    return;
  }
  _Alignas(64) uint32_t t[16 * 16];
  for (int64_t q0 = 0; 2 * q0 < kc; q0 += 16) {
    const int64_t nq = (kc - 2 * q0 + 1) / 2 < 16 ? (kc - 2 * q0 + 1) / 2 : 16;
    for (int h = 0; h < 2; h++) {
      for (int j = 0; j < 16; j++) {
        const __m512i p = h * 16 + j < nr ? ctc_bf16_pairs_row(b + (j0 + h * 16 + j) * ldb + k0 + 2 * q0, kc - 2 * q0)
                                          : _mm512_setzero_si512();
        _mm512_store_si512(t + j * 16, p);
      }
      if (nq == 16) {
        ctc_transpose16_f32((const float *)t, 16, (float *)(bp + q0 * 32 + h * 16), 32);
      } else {
        for (int64_t q = 0; q < nq; q++)
          for (int j = 0; j < 16; j++) bp[(q0 + q) * 32 + h * 16 + j] = t[j * 16 + q];
      }
    }
  }
}
/* The tile C[mr, 32 columns masked by m0, m1] = (C +, if add) sum over the kp pairs q of
 * A's pair (i, q) . bp[q]: A's pair at a[i * ars + q * aks]. R (12, 8, 4, 2 or 1) rows as in
 * ctc_gemm_tile_f32; the registers sum 32 pairs (64 k) at a time. */
static inline void ctc_gemm_tile_bf16(const int R, int64_t kp, const uint32_t *a, int64_t ars, int64_t aks, int mr,
                                      const uint32_t *restrict bp, float *c, int64_t ldc, __mmask16 m0,
                                      __mmask16 m1, int add) {
  const uint32_t *ai[12];
#pragma GCC unroll 12
  for (int i = 0; i < R; i++) ai[i] = a + (i < mr ? i : 0) * ars;
  for (int64_t q0 = 0; q0 < kp; q0 += 32) {
    const int64_t q1 = kp - q0 < 32 ? kp : q0 + 32;
    __m512 c0[12], c1[12];
#pragma GCC unroll 12
    for (int i = 0; i < R; i++) c0[i] = _mm512_setzero_ps(), c1[i] = _mm512_setzero_ps();
    for (int64_t q = q0; q < q1; q++) {
      const __m512bh b0 = (__m512bh)_mm512_load_si512(bp + q * 32), b1 = (__m512bh)_mm512_load_si512(bp + q * 32 + 16);
#pragma GCC unroll 12
      for (int i = 0; i < R; i++) {
        const __m512bh av = (__m512bh)_mm512_set1_epi32((int)ai[i][q * aks]);
        c0[i] = _mm512_dpbf16_ps(c0[i], av, b0);
        c1[i] = _mm512_dpbf16_ps(c1[i], av, b1);
      }
    }
#pragma GCC unroll 12
    for (int i = 0; i < R; i++) {
      if (i >= mr) break;
      float *ci = c + i * ldc;
      if (add || q0 > 0) {
        c0[i] = _mm512_add_ps(_mm512_maskz_loadu_ps(m0, ci), c0[i]);
        c1[i] = _mm512_add_ps(_mm512_maskz_loadu_ps(m1, ci + 16), c1[i]);
      }
      _mm512_mask_storeu_ps(ci, m0, c0[i]);
      _mm512_mask_storeu_ps(ci + 16, m1, c1[i]);
    }
  }
}
/* C[M,N] = op(A) op(B), or C += if acc, where A's and B's floats hold bfloat16 values; serial. */
static void ctc_gemm_avx512bf16(int ta, int tb, int acc, int64_t M, int64_t N, int64_t K, const float *a,
                                int64_t lda, const float *b, int64_t ldb, float *c, int64_t ldc) {
  _Alignas(64) uint32_t bp[256 * 32];
  _Alignas(64) uint32_t ap[96 * 256];
  if (K <= 0) {
    for (int64_t i = 0; i < M && !acc; i++) memset(c + i * ldc, 0, sizeof(float) * (size_t)N);
    return;
  }
  /* K in equal blocks of at most 512 (multiples of 32 but the last), M of 96 */
  const int64_t nkb = (K + 511) / 512, kb = ((K + nkb - 1) / nkb + 31) / 32 * 32;
  for (int64_t k0 = 0; k0 < K; k0 += kb) {
    const int64_t kc = K - k0 < kb ? K - k0 : kb, kp = (kc + 1) / 2, kpl = (kp + 15) / 16 * 16;
    for (int64_t i0 = 0; i0 < M; i0 += 96) {
      const int64_t mc = M - i0 < 96 ? M - i0 : 96, mcl = (mc + 15) / 16 * 16;
      const int64_t ars = ta ? 1 : kpl, aks = ta ? mcl : 1;
      ctc_pack_a_bf16(ta, a, lda, i0, mc, k0, kc, kpl, mcl, ap);
      for (int64_t j0 = 0; j0 < N; j0 += 32) {
        const int nr = N - j0 < 32 ? (int)(N - j0) : 32;
        const __mmask16 m0 = nr >= 16 ? 0xffff : (__mmask16)((1u << nr) - 1);
        const __mmask16 m1 = nr >= 32 ? 0xffff : nr <= 16 ? 0 : (__mmask16)((1u << (nr - 16)) - 1);
        ctc_pack_b_bf16(tb, b, ldb, k0, kc, j0, nr, bp);
        for (int64_t i = 0; i < mc; i += 12) {
          const int mr = mc - i < 12 ? (int)(mc - i) : 12;
          const uint32_t *ai = ap + i * ars;
          float *ci = c + (i0 + i) * ldc + j0;
          const int add = acc || k0 > 0;
          if (mr > 8) ctc_gemm_tile_bf16(12, kp, ai, ars, aks, mr, bp, ci, ldc, m0, m1, add);
          else if (mr > 4) ctc_gemm_tile_bf16(8, kp, ai, ars, aks, mr, bp, ci, ldc, m0, m1, add);   /* a last, shorter tile */
          else if (mr > 2) ctc_gemm_tile_bf16(4, kp, ai, ars, aks, mr, bp, ci, ldc, m0, m1, add);
          else if (mr == 2) ctc_gemm_tile_bf16(2, kp, ai, ars, aks, mr, bp, ci, ldc, m0, m1, add);
          else ctc_gemm_tile_bf16(1, kp, ai, ars, aks, mr, bp, ci, ldc, m0, m1, add);   /* a row: decoding one token */
        }
      }
    }
  }
}
#endif

#if defined(__AVX2__) && defined(__FMA__)
#ifndef CTC_GEMM_AVX512_f32
#ifndef CTC_HAVE_CBLAS
#include <immintrin.h>
#define CTC_GEMM_AVX2_f32 1
/* 16 columns are 2 vectors of 8; op(A) broadcast (vbroadcastss) */
#define CTC_VW_avx2 8
#define CTC_NV_avx2 2
typedef __m256 ctc_vf_avx2;
typedef __m256 ctc_va_avx2;
static inline __m256 ctc_vzero_avx2(void) { return _mm256_setzero_ps(); }
static inline __m256 ctc_vload_avx2(const float *p) { return _mm256_load_ps(p); }
static inline __m256 ctc_vloadu_avx2(const float *p) { return _mm256_loadu_ps(p); }
static inline void ctc_vstoreu_avx2(float *p, __m256 v) { _mm256_storeu_ps(p, v); }
static inline __m256 ctc_vadd_avx2(__m256 x, __m256 y) { return _mm256_add_ps(x, y); }
static inline __m256 ctc_vbcast_avx2(const float *p) { return _mm256_broadcast_ss(p); }
static inline __m256 ctc_vfma_avx2(__m256 c, __m256 b, __m256 a) { return _mm256_fmadd_ps(a, b, c); }
/* dst[k * ldd + j] = src[j * lds + k] for an 8x8 block: unpack 32-bit pairs, shuffle 64-bit
 * pairs, then swap 128-bit lanes. */
static inline void ctc_transpose8_f32(const float *src, int64_t lds, float *dst, int64_t ldd) {
  __m256 r[8], t[8];
#pragma GCC unroll 8
  for (int i = 0; i < 8; i++) r[i] = _mm256_loadu_ps(src + i * lds);
#pragma GCC unroll 4
  for (int i = 0; i < 4; i++) {
    t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
#pragma GCC unroll 2
  for (int i = 0; i < 2; i++) {
    r[4 * i] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], 0x44);
    r[4 * i + 1] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], 0xEE);
    r[4 * i + 2] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0x44);
    r[4 * i + 3] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0xEE);
  }
#pragma GCC unroll 4
  for (int c = 0; c < 4; c++) {
    _mm256_storeu_ps(dst + c * ldd, _mm256_permute2f128_ps(r[c], r[4 + c], 0x20));
    _mm256_storeu_ps(dst + (4 + c) * ldd, _mm256_permute2f128_ps(r[c], r[4 + c], 0x31));
  }
}
/* bp[k][16] = b[j * ldb + k] for j < 16 and k below a multiple of 8 <= kc, which it returns. */
static inline int64_t ctc_pack_bt16_avx2(const float *b, int64_t ldb, int64_t kc, float *restrict bp) {
  const int64_t k8 = kc / 8 * 8;
  for (int64_t k = 0; k < k8; k += 8) {
    ctc_transpose8_f32(b + k, ldb, bp + k * 16, 16);
    ctc_transpose8_f32(b + 8 * ldb + k, ldb, bp + k * 16 + 8, 16);
  }
  return k8;
}
/* bp[k][16] = op(B)[k0 + k, j0 + j] for k < kc, j < nr; zero for j >= nr. */
static void ctc_pack_b16_avx2(int tb, const float *b, int64_t ldb, int64_t k0, int64_t kc, int64_t j0, int nr,
                            float *restrict bp) {
  if (!tb && nr == 16) {   /* a loop the compiler vectorises, not a call per row */
    for (int64_t k = 0; k < kc; k++)
      for (int j = 0; j < 16; j++) bp[k * 16 + j] = b[(k0 + k) * ldb + j0 + j];
    return;
  }
  if (!tb) {
    for (int64_t k = 0; k < kc; k++) {
      memcpy(bp + k * 16, b + (k0 + k) * ldb + j0, sizeof(float) * (size_t)nr);
      if (nr < 16) memset(bp + k * 16 + nr, 0, sizeof(float) * (size_t)(16 - nr));
    }
    return;
  }
  const int64_t kt = nr == 16 ? ctc_pack_bt16_avx2(b + j0 * ldb + k0, ldb, kc, bp) : 0;
  for (int j = 0; j < 16; j++)
    for (int64_t k = kt; k < kc; k++) bp[k * 16 + j] = j < nr ? b[(j0 + j) * ldb + k0 + k] : 0;
}
/* The tile C[mr, nr <= 16 columns] = (C +, if add) sum over k < kc of A[i, k] bp[k]: A[i, k] at
 * a[i * ars + k * aks]. R (6, 4, 2 or 1, a constant where it is called) rows are computed: rows
 * mr..R-1 repeat row 0 and are not stored. As the AVX-512 tile: the registers sum 32 k at a time,
 * each such partial sum added to C in memory (blocked summation). */
static inline void ctc_gemm_tile16_avx2(const int R, int64_t kc, const float *a, int64_t ars, int64_t aks, int mr,
                                      const float *restrict bp, float *c, int64_t ldc, int nr, int add) {
  const float *ai[6];
#pragma GCC unroll 6
  for (int i = 0; i < R; i++) ai[i] = a + (i < mr ? i : 0) * ars;
  for (int64_t k0 = 0; k0 < kc; k0 += 32) {
    const int64_t k1 = kc - k0 < 32 ? kc : k0 + 32;
    ctc_vf_avx2 acc[6][CTC_NV_avx2];
#pragma GCC unroll 6
    for (int i = 0; i < R; i++)
#pragma GCC unroll 4
      for (int v = 0; v < CTC_NV_avx2; v++) acc[i][v] = ctc_vzero_avx2();
    for (int64_t k = k0; k < k1; k++) {
      ctc_vf_avx2 bv[CTC_NV_avx2];
#pragma GCC unroll 4
      for (int v = 0; v < CTC_NV_avx2; v++) bv[v] = ctc_vload_avx2(bp + k * 16 + v * CTC_VW_avx2);
#pragma GCC unroll 6
      for (int i = 0; i < R; i++) {
        const ctc_va_avx2 av = ctc_vbcast_avx2(ai[i] + k * aks);
#pragma GCC unroll 4
        for (int v = 0; v < CTC_NV_avx2; v++) acc[i][v] = ctc_vfma_avx2(acc[i][v], bv[v], av);
      }
    }
    const int sum = add || k0 > 0;
#pragma GCC unroll 6
    for (int i = 0; i < R; i++) {
      if (i >= mr) break;
      float *ci = c + i * ldc;
      if (nr == 16) {
#pragma GCC unroll 4
        for (int v = 0; v < CTC_NV_avx2; v++)
          ctc_vstoreu_avx2(ci + v * CTC_VW_avx2, sum ? ctc_vadd_avx2(ctc_vloadu_avx2(ci + v * CTC_VW_avx2), acc[i][v]) : acc[i][v]);
      } else {   /* the last columns: through a row on the stack */
        float t[16];
#pragma GCC unroll 4
        for (int v = 0; v < CTC_NV_avx2; v++) ctc_vstoreu_avx2(t + v * CTC_VW_avx2, acc[i][v]);
        for (int j = 0; j < nr; j++) ci[j] = sum ? ci[j] + t[j] : t[j];
      }
    }
  }
}
/* C[M,N] = op(A) op(B), or C += if acc (as ctc_gemm_f32); serial. The AVX-512 GEMM's blocking
 * with 16-column panels of op(B) (32 KiB on the stack) and 6x16 tiles of C. A transposed A
 * (a weight gradient's dY^T) is packed too, 6 rows at a time (96 KiB): its rows are often 4 KiB
 * apart, and a tile reading 6 floats from each of 512 such rows evicts them from L1 (one cache
 * set) before the next tile reads the neighbouring floats (1024x256x1024: 35 -> 47 GFLOP/s). */
static void ctc_gemm_avx2_f32(int ta, int tb, int acc, int64_t M, int64_t N, int64_t K, const float *a, int64_t lda,
                           const float *b, int64_t ldb, float *c, int64_t ldc) {
  _Alignas(64) float bp[512 * 16];
  _Alignas(64) float ap[96 * 256];
  if (K <= 0) {
    for (int64_t i = 0; i < M && !acc; i++) memset(c + i * ldc, 0, sizeof(float) * (size_t)N);
    return;
  }
  /* K in equal blocks of at most 512 (256 if ta; multiples of 16 but the last), M of 192 (96) */
  const int64_t kmax = ta ? 256 : 512, mb = ta ? 96 : 192;
  const int64_t nkb = (K + kmax - 1) / kmax, kb = ((K + nkb - 1) / nkb + 15) / 16 * 16;
  const int64_t ars = ta ? 6 * kb : lda, aks = ta ? 6 : 1;   /* (ta: row i of a tile at ap + i) */
  for (int64_t k0 = 0; k0 < K; k0 += kb) {
    const int64_t kc = K - k0 < kb ? K - k0 : kb;
    for (int64_t i0 = 0; i0 < M; i0 += mb) {
      const int64_t mc = M - i0 < mb ? M - i0 : mb;
      if (ta)   /* ap[t][k][6] = A[k0 + k, i0 + 6 t + r] */
        for (int64_t t = 0; t < mc; t += 6) {
          const int mr = mc - t < 6 ? (int)(mc - t) : 6;
          float *restrict apt = ap + t * kb;
          const float *at = a + k0 * lda + i0 + t;
          if (mr == 6)   /* a 6-float copy per k, not a loop of unknown length (2304x64x256: 1.2x) */
            for (int64_t k = 0; k < kc; k++) memcpy(apt + k * 6, at + k * lda, sizeof(float) * 6);
          else
            for (int64_t k = 0; k < kc; k++)
              for (int r = 0; r < mr; r++) apt[k * 6 + r] = at[k * lda + r];
        }
      for (int64_t j0 = 0; j0 < N; j0 += 16) {
        const int nr = N - j0 < 16 ? (int)(N - j0) : 16;
        ctc_pack_b16_avx2(tb, b, ldb, k0, kc, j0, nr, bp);
        for (int64_t i = i0; i < i0 + mc; i += 6) {
          const int mr = i0 + mc - i < 6 ? (int)(i0 + mc - i) : 6;
          const float *ai = ta ? ap + (i - i0) / 6 * ars : a + i * ars + k0;
          const int64_t rs = ta ? 1 : ars;
          float *ci = c + i * ldc + j0;
          const int add = acc || k0 > 0;
          if (mr > 4) ctc_gemm_tile16_avx2(6, kc, ai, rs, aks, mr, bp, ci, ldc, nr, add);
          else if (mr > 2) ctc_gemm_tile16_avx2(4, kc, ai, rs, aks, mr, bp, ci, ldc, nr, add);   /* a last, shorter tile */
          else if (mr == 2) ctc_gemm_tile16_avx2(2, kc, ai, rs, aks, mr, bp, ci, ldc, nr, add);
          else ctc_gemm_tile16_avx2(1, kc, ai, rs, aks, mr, bp, ci, ldc, nr, add);
        }
      }
    }
  }
}
#endif
#endif
#endif

#if defined(__aarch64__) && defined(__ARM_NEON)
#ifndef CTC_HAVE_CBLAS
#include <arm_neon.h>
#define CTC_GEMM_NEON_f32 1
/* 16 columns are 4 vectors of 4; op(A) one scalar, fmla by lane */
#define CTC_VW_neon 4
#define CTC_NV_neon 4
typedef float32x4_t ctc_vf_neon;
typedef float ctc_va_neon;
static inline float32x4_t ctc_vzero_neon(void) { return vdupq_n_f32(0); }
static inline float32x4_t ctc_vload_neon(const float *p) { return vld1q_f32(p); }
static inline float32x4_t ctc_vloadu_neon(const float *p) { return vld1q_f32(p); }
static inline void ctc_vstoreu_neon(float *p, float32x4_t v) { vst1q_f32(p, v); }
static inline float32x4_t ctc_vadd_neon(float32x4_t x, float32x4_t y) { return vaddq_f32(x, y); }
static inline float ctc_vbcast_neon(const float *p) { return *p; }
static inline float32x4_t ctc_vfma_neon(float32x4_t c, float32x4_t b, float a) { return vfmaq_n_f32(c, b, a); }
/* bp[k][16] = b[j * ldb + k] for j < 16 and k below a multiple of 4 <= kc, which it returns:
 * 4x4 blocks transposed with trn1/trn2 on 32-bit, then 64-bit elements. */
static inline int64_t ctc_pack_bt16_neon(const float *b, int64_t ldb, int64_t kc, float *restrict bp) {
  const int64_t k4 = kc / 4 * 4;
  for (int64_t k = 0; k < k4; k += 4)
    for (int j = 0; j < 16; j += 4) {
      const float *s = b + j * ldb + k;
      const float32x4_t r0 = vld1q_f32(s), r1 = vld1q_f32(s + ldb), r2 = vld1q_f32(s + 2 * ldb), r3 = vld1q_f32(s + 3 * ldb);
      const float64x2_t t0 = vreinterpretq_f64_f32(vtrn1q_f32(r0, r1)), t1 = vreinterpretq_f64_f32(vtrn2q_f32(r0, r1));
      const float64x2_t t2 = vreinterpretq_f64_f32(vtrn1q_f32(r2, r3)), t3 = vreinterpretq_f64_f32(vtrn2q_f32(r2, r3));
      float *d = bp + k * 16 + j;
      vst1q_f32(d, vreinterpretq_f32_f64(vtrn1q_f64(t0, t2)));
      vst1q_f32(d + 16, vreinterpretq_f32_f64(vtrn1q_f64(t1, t3)));
      vst1q_f32(d + 32, vreinterpretq_f32_f64(vtrn2q_f64(t0, t2)));
      vst1q_f32(d + 48, vreinterpretq_f32_f64(vtrn2q_f64(t1, t3)));
    }
  return k4;
}
/* bp[k][16] = op(B)[k0 + k, j0 + j] for k < kc, j < nr; zero for j >= nr. */
static void ctc_pack_b16_neon(int tb, const float *b, int64_t ldb, int64_t k0, int64_t kc, int64_t j0, int nr,
                            float *restrict bp) {
  if (!tb && nr == 16) {   /* a loop the compiler vectorises, not a call per row */
    for (int64_t k = 0; k < kc; k++)
      for (int j = 0; j < 16; j++) bp[k * 16 + j] = b[(k0 + k) * ldb + j0 + j];
    return;
  }
  if (!tb) {
    for (int64_t k = 0; k < kc; k++) {
      memcpy(bp + k * 16, b + (k0 + k) * ldb + j0, sizeof(float) * (size_t)nr);
      if (nr < 16) memset(bp + k * 16 + nr, 0, sizeof(float) * (size_t)(16 - nr));
    }
    return;
  }
  const int64_t kt = nr == 16 ? ctc_pack_bt16_neon(b + j0 * ldb + k0, ldb, kc, bp) : 0;
  for (int j = 0; j < 16; j++)
    for (int64_t k = kt; k < kc; k++) bp[k * 16 + j] = j < nr ? b[(j0 + j) * ldb + k0 + k] : 0;
}
/* The tile C[mr, nr <= 16 columns] = (C +, if add) sum over k < kc of A[i, k] bp[k]: A[i, k] at
 * a[i * ars + k * aks]. R (6, 4, 2 or 1, a constant where it is called) rows are computed: rows
 * mr..R-1 repeat row 0 and are not stored. As the AVX-512 tile: the registers sum 32 k at a time,
 * each such partial sum added to C in memory (blocked summation). */
static inline void ctc_gemm_tile16_neon(const int R, int64_t kc, const float *a, int64_t ars, int64_t aks, int mr,
                                      const float *restrict bp, float *c, int64_t ldc, int nr, int add) {
  const float *ai[6];
#pragma GCC unroll 6
  for (int i = 0; i < R; i++) ai[i] = a + (i < mr ? i : 0) * ars;
  for (int64_t k0 = 0; k0 < kc; k0 += 32) {
    const int64_t k1 = kc - k0 < 32 ? kc : k0 + 32;
    ctc_vf_neon acc[6][CTC_NV_neon];
#pragma GCC unroll 6
    for (int i = 0; i < R; i++)
#pragma GCC unroll 4
      for (int v = 0; v < CTC_NV_neon; v++) acc[i][v] = ctc_vzero_neon();
    for (int64_t k = k0; k < k1; k++) {
      ctc_vf_neon bv[CTC_NV_neon];
#pragma GCC unroll 4
      for (int v = 0; v < CTC_NV_neon; v++) bv[v] = ctc_vload_neon(bp + k * 16 + v * CTC_VW_neon);
#pragma GCC unroll 6
      for (int i = 0; i < R; i++) {
        const ctc_va_neon av = ctc_vbcast_neon(ai[i] + k * aks);
#pragma GCC unroll 4
        for (int v = 0; v < CTC_NV_neon; v++) acc[i][v] = ctc_vfma_neon(acc[i][v], bv[v], av);
      }
    }
    const int sum = add || k0 > 0;
#pragma GCC unroll 6
    for (int i = 0; i < R; i++) {
      if (i >= mr) break;
      float *ci = c + i * ldc;
      if (nr == 16) {
#pragma GCC unroll 4
        for (int v = 0; v < CTC_NV_neon; v++)
          ctc_vstoreu_neon(ci + v * CTC_VW_neon, sum ? ctc_vadd_neon(ctc_vloadu_neon(ci + v * CTC_VW_neon), acc[i][v]) : acc[i][v]);
      } else {   /* the last columns: through a row on the stack */
        float t[16];
#pragma GCC unroll 4
        for (int v = 0; v < CTC_NV_neon; v++) ctc_vstoreu_neon(t + v * CTC_VW_neon, acc[i][v]);
        for (int j = 0; j < nr; j++) ci[j] = sum ? ci[j] + t[j] : t[j];
      }
    }
  }
}
/* C[M,N] = op(A) op(B), or C += if acc (as ctc_gemm_f32); serial. The AVX-512 GEMM's blocking
 * with 16-column panels of op(B) (32 KiB on the stack) and 6x16 tiles of C. A transposed A
 * (a weight gradient's dY^T) is packed too, 6 rows at a time (96 KiB): its rows are often 4 KiB
 * apart, and a tile reading 6 floats from each of 512 such rows evicts them from L1 (one cache
 * set) before the next tile reads the neighbouring floats (1024x256x1024: 35 -> 47 GFLOP/s). */
static void ctc_gemm_neon_f32(int ta, int tb, int acc, int64_t M, int64_t N, int64_t K, const float *a, int64_t lda,
                           const float *b, int64_t ldb, float *c, int64_t ldc) {
  _Alignas(64) float bp[512 * 16];
  _Alignas(64) float ap[96 * 256];
  if (K <= 0) {
    for (int64_t i = 0; i < M && !acc; i++) memset(c + i * ldc, 0, sizeof(float) * (size_t)N);
    return;
  }
  /* K in equal blocks of at most 512 (256 if ta; multiples of 16 but the last), M of 192 (96) */
  const int64_t kmax = ta ? 256 : 512, mb = ta ? 96 : 192;
  const int64_t nkb = (K + kmax - 1) / kmax, kb = ((K + nkb - 1) / nkb + 15) / 16 * 16;
  const int64_t ars = ta ? 6 * kb : lda, aks = ta ? 6 : 1;   /* (ta: row i of a tile at ap + i) */
  for (int64_t k0 = 0; k0 < K; k0 += kb) {
    const int64_t kc = K - k0 < kb ? K - k0 : kb;
    for (int64_t i0 = 0; i0 < M; i0 += mb) {
      const int64_t mc = M - i0 < mb ? M - i0 : mb;
      if (ta)   /* ap[t][k][6] = A[k0 + k, i0 + 6 t + r] */
        for (int64_t t = 0; t < mc; t += 6) {
          const int mr = mc - t < 6 ? (int)(mc - t) : 6;
          float *restrict apt = ap + t * kb;
          const float *at = a + k0 * lda + i0 + t;
          if (mr == 6)   /* a 6-float copy per k, not a loop of unknown length (2304x64x256: 1.2x) */
            for (int64_t k = 0; k < kc; k++) memcpy(apt + k * 6, at + k * lda, sizeof(float) * 6);
          else
            for (int64_t k = 0; k < kc; k++)
              for (int r = 0; r < mr; r++) apt[k * 6 + r] = at[k * lda + r];
        }
      for (int64_t j0 = 0; j0 < N; j0 += 16) {
        const int nr = N - j0 < 16 ? (int)(N - j0) : 16;
        ctc_pack_b16_neon(tb, b, ldb, k0, kc, j0, nr, bp);
        for (int64_t i = i0; i < i0 + mc; i += 6) {
          const int mr = i0 + mc - i < 6 ? (int)(i0 + mc - i) : 6;
          const float *ai = ta ? ap + (i - i0) / 6 * ars : a + i * ars + k0;
          const int64_t rs = ta ? 1 : ars;
          float *ci = c + i * ldc + j0;
          const int add = acc || k0 > 0;
          if (mr > 4) ctc_gemm_tile16_neon(6, kc, ai, rs, aks, mr, bp, ci, ldc, nr, add);
          else if (mr > 2) ctc_gemm_tile16_neon(4, kc, ai, rs, aks, mr, bp, ci, ldc, nr, add);   /* a last, shorter tile */
          else if (mr == 2) ctc_gemm_tile16_neon(2, kc, ai, rs, aks, mr, bp, ci, ldc, nr, add);
          else ctc_gemm_tile16_neon(1, kc, ai, rs, aks, mr, bp, ci, ldc, nr, add);
        }
      }
    }
  }
}
#endif
#endif

#endif /* CTC_GEMM_SIMD_H */
