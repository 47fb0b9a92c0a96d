/* ctc_gemm_simd.h - ctc's f32 GEMM microkernels: AVX-512 (ctc_gemm_avx512_f32), else
 * AVX2+FMA (ctc_gemm_avx2_f32), or NEON on aarch64 (ctc_gemm_neon_f32), as the compiler's
 * -march allows; the NEON one only without CTC_HAVE_CBLAS (its tiles, for Winograd, always).
 * A generated model.c
 * that runs f32 GEMMs includes it after its portable ctc_gemm_f32, and its
 * ctc_matmul_block_f32 calls the one that is in (CTC_GEMM_<ISA>_f32 says which).
 * With AVX-512 BF16, also the GEMM of floats holding bfloat16 values
 * (ctc_gemm_avx512bf16, CTC_GEMM_AVX512BF16), which ctc_matmul_block_bf16 calls, in a
 * model.c that defines CTC_WANT_GEMM_BF16 before including it, and with AMX the same GEMM on
 * its tiles (ctc_gemm_amx_bf16, CTC_GEMM_AMX_BF16). With AVX-512 or AVX2, the
 * stride-1 convolutions as implicit GEMMs (ctc_conv_pix_f32, CTC_CONV_PIX_f32); with AVX-512,
 * AVX2 or the NEON GEMM, the 3x3 ones by Winograd's F(2x2, 3x3) (ctc_conv_wino_f32,
 * CTC_CONV_WINO_f32); with AVX2 and FMA, the product of one row and a matrix (ctc_gemv_x86_f32,
 * CTC_GEMV_X86_f32).
 *
 * Written by scripts/gen_runtime.py from the texts of codegen_c/gemm_simd_c.c and wino_c.c (docs/speed.md
 * describes the kernels); do not edit. */
#ifndef CTC_GEMM_SIMD_H
#define CTC_GEMM_SIMD_H

#include <stdint.h>
#include <string.h>

/* Columns [0, ml) of A^T's rows [0, kc) (a at the block's first row and column, rows lda apart) as
 * panels of R: ap[t][k][R] = a[k * lda + t + r], panel t at ap + t * kb. R is a constant where it
 * is called: an R-float copy per k, not a loop of unknown length (2304x64x256, AVX2: 1.2x); R
 * divides 48. 48 columns at a time, k by k, so that each of A^T's rows is read a whole line at a
 * time: panel by panel, a panel's 6 floats of each of 256 rows 4 KiB apart (one L1 set) were read
 * from L2 again for the next panel (the bench gpt's c_fc weight gradient, AVX-512: 12% of its
 * time in the packing; 1024x256x1024 99 -> 104 GFLOP/s). */
static inline __attribute__((always_inline)) void ctc_pack_at_f32(const int R, const float *a, int64_t lda,
                                                                  int64_t kc, int64_t ml, int64_t kb,
                                                                  float *restrict ap) {
  for (int64_t t0 = 0; t0 < ml; t0 += 48) {
    if (ml - t0 >= 48) {   /* 48 columns, 48 / R panels: each row's three lines read once */
      for (int64_t k = 0; k < kc; k++)
        for (int q = 0; q < 48 / R; q++)   /* (no unroll pragma: with -fsanitize R is not a constant here) */
          memcpy(ap + (t0 + q * R) * kb + k * R, a + k * lda + t0 + q * R, sizeof(float) * (size_t)R);
      continue;
    }
    for (int64_t t = t0; t < ml; t += R) {
      const int mr = ml - t < R ? (int)(ml - t) : R;
      float *restrict apt = ap + t * kb;
      const float *at = a + t;
      if (mr == R)
        for (int64_t k = 0; k < kc; k++) memcpy(apt + k * R, at + k * lda, sizeof(float) * (size_t)R);
      else
        for (int64_t k = 0; k < kc; k++)
          for (int r = 0; r < mr; r++) apt[k * R + r] = at[k * lda + r];
    }
  }
}

#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__)) || (defined(__aarch64__) && defined(__ARM_NEON))
/* ---- stride-1 convolutions as implicit GEMMs (codegen_c/linalg_c.c's conv_implicit): the
 * unfolded images are never written, the panels of the operand that reads them are packed
 * straight from the images (a tap in the padding: a masked load), on AVX-512 (f32, bf16) and AVX2.
 * Static inline: a model.c calls the ones its convolutions need. */
/* A convolution's operand read in place as a matrix over pixels p = n * H * W + oh * W + ow
 * (H * W a multiple of 16) of images x[N, C, H, W]: with KH > 0 the unfolded image of a
 * stride-1 convolution whose output is the size of its input, row k = (c * KH + kh) * KW + kw
 * holding x[n, c, oh + kh - ph, ow + kw - pw] (0 in the padding); with KH == 0 the image
 * itself, row c holding x[n, c, oh, ow]. With st == 2, the unfolded image of a stride-2
 * convolution whose output is half its input's size, read from the input's phases
 * (ctc_pix_phases_f32): x[n] holds NA x NB phases of C channels of H x W pixels (H, W the
 * output's; NA = 2 where KH > 1, else 1; NB alike), phase (a, b) channel c pixel (i, j) the
 * input's [c, 2 i + a, 2 j + b], so that row k = (c, kh, kw) holds the phase of parity
 * (kh - ph, kw - pw) at pixel (oh + dh, ow + dw), dh = floor((kh - ph) / 2) (dw alike). */
typedef struct ctc_pix {
  const float *x;
  int64_t C, H, W, KH, KW, ph, pw, st;
} ctc_pix;
/* Where pixels p .. p + 15 of a ctc_pix start (n's image, pixel offset r) and, for an
 * unfolded one, which of them each tap reads inside the image: tap (kh, kw) of a stride-1
 * one, tap (dh + phm, dw + pwm) of a stride-2 one (ctc_pix_taps). */
typedef struct ctc_pix16 {
  const float *x;   /* image n's channel 0 at pixel r */
  uint16_t tap[64];   /* bit l: lane l (pixel p + l) */
} ctc_pix16;
/* floor(e / 2) */
static inline int64_t ctc_half_down(int64_t e) { return (e - (e & 1)) / 2; }
/* The taps whose masks ctc_pix16_at computes: KHm x KWm of them, tap (t, u) reading pixel
 * (oh + t - phm, ow + u - pwm); and the channels of an image (st == 2: every phase's). */
static inline int64_t ctc_pix_taps(const ctc_pix *s, int64_t *KHm, int64_t *KWm, int64_t *phm, int64_t *pwm) {
  if (s->st != 2) {
    *KHm = s->KH, *KWm = s->KW, *phm = s->ph, *pwm = s->pw;
    return s->C;
  }
  *phm = -ctc_half_down(-s->ph), *pwm = -ctc_half_down(-s->pw);
  *KHm = ctc_half_down(s->KH - 1 - s->ph) + *phm + 1, *KWm = ctc_half_down(s->KW - 1 - s->pw) + *pwm + 1;
  return s->C * (s->KH > 1 ? 2 : 1) * (s->KW > 1 ? 2 : 1);
}
static inline void ctc_pix16_at(const ctc_pix *s, int64_t p, ctc_pix16 *h) {
  int64_t KH, KW, ph, pw;
  const int64_t C = ctc_pix_taps(s, &KH, &KW, &ph, &pw);
  const int64_t HW = s->H * s->W, n = p / HW, r = p % HW;
  h->x = s->x + n * C * HW + r;
  if (!s->KH) return;
  unsigned rows[16] = {0}, cols[16] = {0};   /* the lanes whose tap row kh / column kw is inside */
  int64_t oh = r / s->W, ow = r % s->W;
  for (int l = 0; l < 16; l++) {
    for (int64_t kh = 0; kh < KH; kh++) rows[kh] |= (unsigned)(oh + kh - ph >= 0 && oh + kh - ph < s->H) << l;
    for (int64_t kw = 0; kw < KW; kw++) cols[kw] |= (unsigned)(ow + kw - pw >= 0 && ow + kw - pw < s->W) << l;
    if (++ow == s->W) ow = 0, oh++;
  }
  for (int64_t kh = 0; kh < KH; kh++)
    for (int64_t kw = 0; kw < KW; kw++) h->tap[kh * KW + kw] = (uint16_t)(rows[kh] & cols[kw]);
}
/* The next row: (c, kh, kw) counted up */
static inline void ctc_pix_next(const ctc_pix *s, int64_t *c, int64_t *kh, int64_t *kw) {
  if (!s->KH) {
    ++*c;
  } else if (++*kw == s->KW) {
    *kw = 0;
    if (++*kh == s->KH) *kh = 0, ++*c;
  }
}
static inline void ctc_pix_split(const ctc_pix *s, int64_t k, int64_t *c, int64_t *kh, int64_t *kw) {
  if (!s->KH) *c = k, *kh = *kw = 0;
  else *c = k / (s->KH * s->KW), *kh = k / s->KW % s->KH, *kw = k % s->KW;
}
/* Rows [k0, k0 + kc) of a pixel matrix: each one's offset from its pixels' start (ctc_pix16.x)
 * and which tap mask it reads. */
static inline void ctc_pix_rows_at(const ctc_pix *s, int64_t k0, int64_t kc, int64_t *off, unsigned char *tap) {
  int64_t c, kh, kw, KHm, KWm, phm, pwm;
  ctc_pix_taps(s, &KHm, &KWm, &phm, &pwm);
  const int64_t HW = s->H * s->W, NB = s->KW > 1 ? 2 : 1;
  ctc_pix_split(s, k0, &c, &kh, &kw);
  for (int64_t k = 0; k < kc; k++) {
    if (s->st == 2) {   /* the phase of parity (a, b), pixel (oh + dh, ow + dw) */
      const int64_t a = (kh - s->ph) & 1, b = (kw - s->pw) & 1;
      const int64_t dh = ctc_half_down(kh - s->ph), dw = ctc_half_down(kw - s->pw);
      off[k] = ((a * NB + b) * s->C + c) * HW + dh * s->W + dw;
      tap[k] = (unsigned char)((dh + phm) * KWm + dw + pwm);
    } else {
      off[k] = c * HW + (s->KH ? (kh - s->ph) * s->W + kw - s->pw : 0);
      tap[k] = (unsigned char)(kh * s->KW + kw);
    }
    ctc_pix_next(s, &c, &kh, &kw);
  }
}
/* Channel c of image x[C, H, W] (H, W even) as its phases for a ctc_pix with st == 2 of NA x NB
 * phases: xs[((a NB + b) C + c) (H / 2) (W / 2) + i (W / 2) + j] = x[c, 2 i + a, 2 j + b]. */
static inline void ctc_pix_phases_f32(const float *x, int64_t C, int64_t H, int64_t W, int64_t NA, int64_t NB,
                                      int64_t c, float *restrict xs) {
  const int64_t h = H / 2, w = W / 2;
  for (int64_t a = 0; a < NA; a++)
    for (int64_t i = 0; i < h; i++) {
      const float *xr = x + (c * H + 2 * i + a) * W;
      float *y0 = xs + ((a * NB * C + c) * h + i) * w, *y1 = y0 + C * h * w;
      if (NB == 2)
        for (int64_t j = 0; j < w; j++) y0[j] = xr[2 * j], y1[j] = xr[2 * j + 1];
      else
        for (int64_t j = 0; j < w; j++) y0[j] = xr[2 * j];
    }
}
/* Rows [i0, i1) of the weights of phase (a, b) of a stride-2 convolution's input gradient
 * (w[O, M, KH, KW], padding ph, pw): dx[., 2 i + a, 2 j + b] sums w[o, ., kh, kw] g[o, i + d, j + e]
 * over the taps kh = a + ph - 2 d (kw = b + pw - 2 e), KHs x KWs of them, d = t - phs for t < KHs
 * (e = u - pws): a convolution of g (ctc_pix over g with KHs, KWs, phs, pws) by
 * A[i, (o KHs + t) KWs + u] = w[o, i, a + ph - 2 (t - phs), b + pw - 2 (u - pws)]. */
static inline void ctc_phase_w_f32(const float *w, int64_t M, int64_t O, int64_t KH, int64_t KW, int64_t ph,
                                   int64_t pw, int64_t a, int64_t b, int64_t KHs, int64_t KWs, int64_t phs, int64_t pws,
                                   int64_t i0, int64_t i1, float *restrict A) {
  for (int64_t i = i0; i < i1; i++)
    for (int64_t o = 0; o < O; o++)
      for (int64_t t = 0; t < KHs; t++)
        for (int64_t u = 0; u < KWs; u++)
          A[((i * O + o) * KHs + t) * KWs + u] =
              w[((o * M + i) * KH + a + ph - 2 * (t - phs)) * KW + b + pw - 2 * (u - pws)];
}
/* Channel c of image dx[C, H, W] (H, W even) from its four phases (ctc_pix_phases_f32's layout,
 * phase (a, b) at ps + (2 a + b) pstride, channels of (H / 2) x (W / 2) pixels each); a phase
 * whose bit 2 a + b is not in have is zero (no tap reaches it). */
static inline void ctc_pix_unphase_f32(const float *ps, int64_t H, int64_t W, int64_t pstride,
                                       unsigned have, int64_t c, float *restrict dx) {
  const int64_t h = H / 2, w = W / 2;
  for (int64_t a = 0; a < 2; a++)
    for (int64_t i = 0; i < h; i++) {
      float *xr = dx + (c * H + 2 * i + a) * W;
      const float *y0 = ps + 2 * a * pstride + (c * h + i) * w, *y1 = y0 + pstride;
      const int h0 = (int)(have >> (2 * a) & 1), h1 = (int)(have >> (2 * a + 1) & 1);
      for (int64_t j = 0; j < w; j++) xr[2 * j] = h0 ? y0[j] : 0.0f, xr[2 * j + 1] = h1 ? y1[j] : 0.0f;
    }
}
/* The ctc_pix16 of pixels [k0, k0 + 2 ld) in 16s, for ctc_pack_pix_rows_bf16 (the ones past kc: at k0). */
static inline void ctc_pix_chunks(const ctc_pix *s, int64_t k0, int64_t kc, int64_t ld, ctc_pix16 *h) {
  for (int64_t t = 0; t < 2 * ld / 16; t++) ctc_pix16_at(s, 16 * t < kc ? k0 + 16 * t : k0, &h[t]);
}
/* Rows [i0, i1) of the weights' reversed taps for the input gradient of the convolution by
 * w[O, M, KH, KW]: a[i * O KK + o KK + t] = w[o, i, KK - 1 - t] (KK = KH KW). */
static inline void ctc_flip_w_f32(const float *w, int64_t M, int64_t O, int64_t KK, int64_t i0, int64_t i1,
                                  float *restrict a) {
  for (int64_t i = i0; i < i1; i++)
    for (int64_t o = 0; o < O; o++)
      for (int64_t t = 0; t < KK; t++) a[(i * O + o) * KK + t] = w[(o * M + i) * KK + KK - 1 - t];
}
#endif

#if defined(__AVX512F__)
#include <immintrin.h>
#define CTC_GEMM_AVX512_f32 1
/* the x86 kernel ctc_matmul_block_f32 calls, and the slivers it leaves to OpenBLAS */
#define CTC_GEMM_X86_f32 1
#define ctc_gemm_x86_f32 ctc_gemm_avx512_f32
#define CTC_GEMM_PK_f32 1   /* with op(B) packed before (a model.c's ctc_gemm_pack_f32): */
#define ctc_gemm_own_pk_f32 ctc_gemm_avx512_pk_f32
#define ctc_gemm_own_pack_f32 ctc_gemm_pack_avx512_f32
#define CTC_GEMM_X86_MIN_ROWS 8
#define CTC_GEMM_X86_MIN_COLS 32
/* the first n of 16 lanes (none for n <= 0, all from 16): a 32-column row's masks are n and n - 16 */
static inline __mmask16 ctc_lanes16(int64_t n) {
  return n >= 16 ? (__mmask16)0xffff : n <= 0 ? (__mmask16)0 : (__mmask16)((1u << n) - 1);
}
#define CTC_NP_avx512 4   /* panels of op(B) packed together when B is not transposed (ctc_pack_bn_f32) */
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
/* B not transposed, columns [j0, j0 + nj) (nj <= 32 CTC_NP_avx512) as panels bp[p][k][32] =
 * B[k0 + k, j0 + 32 p + j], kb floats apart, for k < kc; zero past nj: each row read in one pass
 * (as ctc_pack_bn_avx2: a panel at a time, a 32x8192x288 GEMM read rows 32 KiB apart 32 floats at a
 * time). */
static void ctc_pack_bn_f32(const float *b, int64_t ldb, int64_t k0, int64_t kc, int64_t j0, int64_t nj, int64_t kb,
                            float *restrict bp) {
  if (nj == 32 * CTC_NP_avx512) {
    for (int64_t k = 0; k < kc; k++) {
      const float *bk = b + (k0 + k) * ldb + j0;
#pragma GCC unroll 4
      for (int p = 0; p < CTC_NP_avx512; p++) {
        _mm512_store_ps(bp + p * kb * 32 + k * 32, _mm512_loadu_ps(bk + p * 32));
        _mm512_store_ps(bp + p * kb * 32 + k * 32 + 16, _mm512_loadu_ps(bk + p * 32 + 16));
      }
    }
    return;
  }
  for (int64_t k = 0; k < kc; k++) {   /* fewer columns: masked loads, zeros past nj */
    const float *bk = b + (k0 + k) * ldb + j0;
    for (int64_t p = 0; p * 32 < nj; p++) {
      const int64_t w = nj - p * 32;
      const __mmask16 m0 = ctc_lanes16(w);
      const __mmask16 m1 = ctc_lanes16(w - 16);
      _mm512_store_ps(bp + p * kb * 32 + k * 32, _mm512_maskz_loadu_ps(m0, bk + p * 32));
      _mm512_store_ps(bp + p * kb * 32 + k * 32 + 16, _mm512_maskz_loadu_ps(m1, bk + p * 32 + 16));
    }
  }
}
/* B transposed: bp[k][32] = B[j0 + j, k0 + k] for k < kc, j < nr; zero for j >= nr (16x16 register
 * transposes). */
static void ctc_pack_b_f32(const float *b, int64_t ldb, int64_t k0, int64_t kc, int64_t j0, int nr,
                           float *restrict bp) {
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
/* Rows i < mr of a tile's two 16-column accumulators c0, c1 stored into C (columns m0, m1 of
 * c0p, c1p, rows ldc apart), added to what C holds when sum (the tiles' blocked summation) */
static inline __attribute__((always_inline)) void ctc_tile_store_f32(const int R, int mr, __m512 *c0, __m512 *c1,
                                                                     float *c0p, float *c1p, int64_t ldc,
                                                                     __mmask16 m0, __mmask16 m1, int sum) {
#pragma GCC unroll 12
  for (int i = 0; i < R; i++) {
    if (i >= mr) break;
    float *ci0 = c0p + i * ldc, *ci1 = c1p + i * ldc;
    if ((m0 & m1) == 0xffff) {   /* all 32 columns, unmasked (Zen 4, 1024^3: 79 GFLOP/s masked, 104 not) */
      if (sum) c0[i] = _mm512_add_ps(_mm512_loadu_ps(ci0), c0[i]), c1[i] = _mm512_add_ps(_mm512_loadu_ps(ci1), c1[i]);
      _mm512_storeu_ps(ci0, c0[i]);
      _mm512_storeu_ps(ci1, c1[i]);
      continue;
    }
    if (sum) {
      c0[i] = _mm512_add_ps(_mm512_maskz_loadu_ps(m0, ci0), c0[i]);
      c1[i] = _mm512_add_ps(_mm512_maskz_loadu_ps(m1, ci1), c1[i]);
    }
    _mm512_mask_storeu_ps(ci0, m0, c0[i]);
    _mm512_mask_storeu_ps(ci1, m1, c1[i]);
  }
}
/* A tile's sums c0, c1 over one block of k, added to the sum of the blocks before: C's (when
 * add) before the first block, then the sum kept in t (R rows of 32, contiguous) until the last
 * block stores it into C. The same additions in the same order as adding each block to C in
 * memory (ctc_tile_store_f32), but C is read and written once: for rows of C 4 KiB apart, which
 * share an L1 set (1024^3 on a Zen 4: 82 GFLOP/s adding to C, 93 through t; 3-5% slower than
 * adding to C where its rows do not share sets). */
static inline __attribute__((always_inline)) void ctc_tile_next_f32(const int R, int mr, __m512 *c0, __m512 *c1,
                                                                    float *t, int first, int last, float *c0p,
                                                                    float *c1p, int64_t ldc, __mmask16 m0,
                                                                    __mmask16 m1, int add) {
#pragma GCC unroll 12
  for (int i = 0; i < R; i++) {
    if (!first) {
      c0[i] = _mm512_add_ps(_mm512_load_ps(t + i * 32), c0[i]);
      c1[i] = _mm512_add_ps(_mm512_load_ps(t + i * 32 + 16), c1[i]);
    } else if (add && i < mr) {
      c0[i] = _mm512_add_ps(_mm512_maskz_loadu_ps(m0, c0p + i * ldc), c0[i]);
      c1[i] = _mm512_add_ps(_mm512_maskz_loadu_ps(m1, c1p + i * ldc), c1[i]);
    }
  }
  if (last) {
    ctc_tile_store_f32(R, mr, c0, c1, c0p, c1p, ldc, m0, m1, 0);
    return;
  }
#pragma GCC unroll 12
  for (int i = 0; i < R; i++) _mm512_store_ps(t + i * 32, c0[i]), _mm512_store_ps(t + i * 32 + 16, c1[i]);
}
/* One k of a tile: rows i < R of A broadcast, times op(B)'s packed row k (32 columns) */
static inline __attribute__((always_inline)) void ctc_gemm_k32_f32(const int R, int64_t k, const float *const *ai,
                                                                   int64_t aks, const float *restrict bp,
                                                                   __m512 *c0, __m512 *c1) {
  const __m512 b0 = _mm512_load_ps(bp + k * 32), b1 = _mm512_load_ps(bp + k * 32 + 16);
#pragma GCC unroll 12
  for (int i = 0; i < R; i++) {
    const __m512 av = _mm512_set1_ps(ai[i][k * aks]);
    c0[i] = _mm512_fmadd_ps(av, b0, c0[i]);
    c1[i] = _mm512_fmadd_ps(av, b1, c1[i]);
  }
}
/* One block of a tile's blocked summation: c0, c1 (R rows) = the sums over k in [k0, k1) (k1 = k0 + S
 * but for the last block; a whole block's loop of a constant count, unrolled by 4) */
static inline __attribute__((always_inline)) void ctc_gemm_sumk_f32(const int R, const int S, int64_t k0, int64_t k1,
                                                                    const float *const *ai, int64_t aks,
                                                                    const float *restrict bp, __m512 *c0,
                                                                    __m512 *c1) {
#pragma GCC unroll 12
  for (int i = 0; i < R; i++) c0[i] = _mm512_setzero_ps(), c1[i] = _mm512_setzero_ps();
  if (k1 - k0 == S) {
#pragma GCC unroll 4
    for (int64_t k = k0; k < k0 + S; k++) ctc_gemm_k32_f32(R, k, ai, aks, bp, c0, c1);
  } else {
    for (int64_t k = k0; k < k1; k++) ctc_gemm_k32_f32(R, k, ai, aks, bp, c0, c1);
  }
}
/* The tile C[mr, 32 columns masked by m0, m1] (the first 16 of row i at c0p + i * ldc, the
 * other 16 at c1p + i * ldc) = (C +, if add) sum over k < kc of A[i, k] bp[k]:
 * A[i, k] at a[i * ars + k * aks]. R (12, 8 or 4, a constant where it is called) rows are
 * computed: rows mr..R-1 repeat row 0 and are not stored. The registers sum S k at a
 * time, each such partial sum added to C in memory, or with T to the sum kept in t
 * (ctc_tile_next_f32; blocked summation: the rounding error of a dot product of length K
 * grows as S + K / S additions, not K). R, T and S are constants where it is called. S is 32
 * everywhere here (the AVX2 tile's 128 made the GEMM 2-5% faster on a Zen 4 but moved
 * tests/test_drift.py's seed 5 past its bound: docs/speed.md); the convolutions and Winograd's
 * sums over tiles rest on 32 (their thread and block invariance). */
static inline __attribute__((always_inline)) void ctc_gemm_tile_f32(const int R, const int T, const int S, int64_t kc,
                                                                    const float *a,
                                                                    int64_t ars, int64_t aks, int mr,
                                                                    const float *restrict bp, float *c0p,
                                                                    float *c1p, int64_t ldc, __mmask16 m0,
                                                                    __mmask16 m1, int add) {
  const float *ai[12];
  _Alignas(64) float t[T ? 12 * 32 : 1];   /* (a 12 x 32 array in every instantiation: 1-5% slower) */
#pragma GCC unroll 12
  for (int i = 0; i < R; i++) ai[i] = a + (i < mr ? i : 0) * ars;
  for (int64_t k0 = 0; k0 < kc; k0 += S) {
    const int64_t k1 = kc - k0 < S ? kc : k0 + S;
    __m512 c0[12], c1[12];
    ctc_gemm_sumk_f32(R, S, k0, k1, ai, aks, bp, c0, c1);
    if (T) ctc_tile_next_f32(R, mr, c0, c1, t, k0 == 0, k1 == kc, c0p, c1p, ldc, m0, m1, add);
    else ctc_tile_store_f32(R, mr, c0, c1, c0p, c1p, ldc, m0, m1, add || k0 > 0);
  }
}
/* A keep tile's block c0, c1 (R rows) added into its sums s0, s1: the first block onto C's values if
 * add (C first, as ctc_tile_store_f32 adds it), the others onto the sums */
static inline __attribute__((always_inline)) void ctc_keep_add_f32(const int R, int first, int mr, const __m512 *c0,
                                                                   const __m512 *c1, __m512 *s0, __m512 *s1,
                                                                   const float *c0p, const float *c1p, int64_t ldc,
                                                                   __mmask16 m0, __mmask16 m1, int add) {
#pragma GCC unroll 6
  for (int i = 0; i < R; i++) {
    if (!first) {
      s0[i] = _mm512_add_ps(s0[i], c0[i]), s1[i] = _mm512_add_ps(s1[i], c1[i]);
    } else if (add && i < mr) {
      s0[i] = _mm512_add_ps(_mm512_maskz_loadu_ps(m0, c0p + i * ldc), c0[i]);
      s1[i] = _mm512_add_ps(_mm512_maskz_loadu_ps(m1, c1p + i * ldc), c1[i]);
    } else {
      s0[i] = c0[i], s1[i] = c1[i];
    }
  }
}
/* ctc_gemm_tile_f32's tile of R <= 6 rows with the sum of the blocks of S k kept in registers
 * (2 R accumulators, 2 R sums, op(B)'s two vectors and A's broadcast: 4 R + 3 of the 32 zmm
 * registers) and C read and written once: the same additions in the same order as adding each
 * block to C, so the same bits. On a Zen 4, 1 thread, -O3, against the 12-row tile (best of 60
 * calls, four alternating runs): the gpt bench's GEMMs with A not transposed 1.02-1.12x (the
 * 12-row tile's 24 loads, adds and stores of C every 32 k are gone; most where C's rows are
 * 4 KiB apart or K is over one block), 1024^3 1.10x; attention's 32-row products 0.88-0.95x
 * (ctc_gemm_rows_f32 keeps those, and K <= 128, on the 12-row tile). docs/speed.md. */
static inline __attribute__((always_inline)) void ctc_gemm_tile_keep_f32(const int R, const int S, int64_t kc,
                                                                         const float *a, int64_t ars, int64_t aks,
                                                                         int mr, const float *restrict bp,
                                                                         float *c0p, float *c1p, int64_t ldc,
                                                                         __mmask16 m0, __mmask16 m1, int add) {
  const float *ai[6];
  __m512 s0[6], s1[6];   /* (set from the first block; zeros for the compiler, which cannot see kc > 0) */
#pragma GCC unroll 6
  for (int i = 0; i < R; i++) ai[i] = a + (i < mr ? i : 0) * ars, s0[i] = s1[i] = _mm512_setzero_ps();
  for (int64_t k0 = 0; k0 < kc; k0 += S) {
    const int64_t k1 = kc - k0 < S ? kc : k0 + S;
    __m512 c0[6], c1[6];
    ctc_gemm_sumk_f32(R, S, k0, k1, ai, aks, bp, c0, c1);
    ctc_keep_add_f32(R, k0 == 0, mr, c0, c1, s0, s1, c0p, c1p, ldc, m0, m1, add);
  }
  ctc_tile_store_f32(R, mr, s0, s1, c0p, c1p, ldc, m0, m1, 0);
}
/* ctc_gemm_tile_keep_f32 of 6 and of 4 rows, S = 32, as functions of their own: inlined where the
 * 12-row tiles are, GCC kept one of op(B)'s vectors on the stack (the gpt shapes 0.97x the 12-row
 * tile's speed instead of 1.05x, at -O2) */
static __attribute__((noinline)) void ctc_gemm_keep6_f32(int64_t kc, const float *a, int64_t ars, int64_t aks,
                                                         int mr, const float *bp, float *c0p, float *c1p,
                                                         int64_t ldc, __mmask16 m0, __mmask16 m1, int add) {
  ctc_gemm_tile_keep_f32(6, 32, kc, a, ars, aks, mr, bp, c0p, c1p, ldc, m0, m1, add);
}
static __attribute__((noinline)) void ctc_gemm_keep4_f32(int64_t kc, const float *a, int64_t ars, int64_t aks,
                                                         int mr, const float *bp, float *c0p, float *c1p,
                                                         int64_t ldc, __mmask16 m0, __mmask16 m1, int add) {
  ctc_gemm_tile_keep_f32(4, 32, kc, a, ars, aks, mr, bp, c0p, c1p, ldc, m0, m1, add);
}
/* The tile C[mr <= 12 rows, 32 columns masked by m0, m1] of ctc_gemm_tile_f32. Over more than 128
 * k, as tiles of 6 (or 4) rows with their sums in registers (ctc_gemm_tile_keep_f32; rows 1 float
 * apart, ars 1, are an A^T read in place, K <= 64 there; a packed A^T calls the keep tiles itself,
 * ctc_gemm_avx512_run_f32); else in the
 * fewest rows of 12, 8 or 4 computed, the sums kept off C when its rows share L1 sets (rows 1024
 * floats apart: 1024^3 on a Zen 4 at 94 GFLOP/s, not 83; at other strides the buffer was 3-5%
 * slower) */
static inline __attribute__((always_inline)) void ctc_gemm_rows_f32(const int S, int64_t kc, const float *a,
                                                                    int64_t ars, int64_t aks, int mr,
                                                                    const float *bp, float *c0p, float *c1p,
                                                                    int64_t ldc, __mmask16 m0, __mmask16 m1,
                                                                    int add) {
  if (S == 32 && kc > 128 && ars != 1) {
    if (mr > 6) {
      ctc_gemm_keep6_f32(kc, a, ars, aks, 6, bp, c0p, c1p, ldc, m0, m1, add);
      a += 6 * ars, c0p += 6 * ldc, c1p += 6 * ldc, mr -= 6;
    }
    if (mr > 4) ctc_gemm_keep6_f32(kc, a, ars, aks, mr, bp, c0p, c1p, ldc, m0, m1, add);
    else ctc_gemm_keep4_f32(kc, a, ars, aks, mr, bp, c0p, c1p, ldc, m0, m1, add);
    return;
  }
  if (ldc % 1024 == 0 && kc > S) {
    if (mr > 8) ctc_gemm_tile_f32(12, 1, S, kc, a, ars, aks, mr, bp, c0p, c1p, ldc, m0, m1, add);
    else if (mr > 4) ctc_gemm_tile_f32(8, 1, S, kc, a, ars, aks, mr, bp, c0p, c1p, ldc, m0, m1, add);
    else ctc_gemm_tile_f32(4, 1, S, kc, a, ars, aks, mr, bp, c0p, c1p, ldc, m0, m1, add);
  } else if (mr > 8) ctc_gemm_tile_f32(12, 0, S, kc, a, ars, aks, mr, bp, c0p, c1p, ldc, m0, m1, add);
  else if (mr > 4) ctc_gemm_tile_f32(8, 0, S, kc, a, ars, aks, mr, bp, c0p, c1p, ldc, m0, m1, add);   /* shorter */
  else ctc_gemm_tile_f32(4, 0, S, kc, a, ars, aks, mr, bp, c0p, c1p, ldc, m0, m1, add);
}
/* K in equal blocks of at most 512 (256 if ta), multiples of 16 but the last: their size */
static inline int64_t ctc_gemm_kb_avx512(int ta, int64_t K) {
  const int64_t kmax = ta ? 256 : 512, nkb = (K + kmax - 1) / kmax;
  return ((K + nkb - 1) / nkb + 15) / 16 * 16;
}
/* op(B) [K, N] packed whole, as ctc_gemm_avx512_pk_f32 reads it (a time loop's weights, packed
 * once before the loop: kernels/prepack.c): from pk + k0 * ldp, K block [k0, k0 + kc)'s 32-column
 * panels, kc * 32 floats apart, zero past N (ldp: N rounded up to 32; pk 64-byte aligned). */
static inline void ctc_gemm_pack_avx512_f32(int ta, int tb, int64_t N, int64_t K, const float *b, int64_t ldb,
                                            float *pk, int64_t ldp) {
  const int64_t kb = K > 0 ? ctc_gemm_kb_avx512(ta, K) : 1, nw = tb ? 32 : 32 * CTC_NP_avx512;
  for (int64_t k0 = 0; k0 < K; k0 += kb) {
    const int64_t kc = K - k0 < kb ? K - k0 : kb;
    for (int64_t j0 = 0; j0 < N; j0 += nw) {
      const int64_t nj = N - j0 < nw ? N - j0 : nw;
      float *d = pk + k0 * ldp + j0 / 32 * kc * 32;
      if (tb) ctc_pack_b_f32(b, ldb, k0, kc, j0, (int)nj, d);
      else ctc_pack_bn_f32(b, ldb, k0, kc, j0, nj, kc, d);
    }
  }
}
/* ctc_gemm_avx512_pk_f32's loops (below), PA (a constant where it is called) whether a transposed A
 * is packed into ap; bp: room for CTC_NP_avx512 panels of op(B) */
static inline __attribute__((always_inline)) void ctc_gemm_avx512_run_f32(
    const int PA, int ta, int tb, int acc, int64_t M, int64_t N, int64_t K, const float *a, int64_t lda,
    const float *b, int64_t ldb, const float *pk, int64_t ldp, int64_t jp, float *c, int64_t ldc, float *bp,
    float *ap) {
  /* K in equal blocks of at most 512 (256 if ta; multiples of 16 but the last); each block's columns
   * of op(B) packed once, then used by every row of C (of the packed A's block if ta), 384 rows at a
   * time (packing op(B) again for each 384 rows, as before: the gpt train step 1-1.5% slower on Zen 4) */
  const int64_t kb = ctc_gemm_kb_avx512(ta, K);
  const int64_t ars = ta ? 1 : lda, aks = ta ? lda : 1;
  const int64_t mo = PA ? 384 : M;   /* the rows whose packed op(B) panels are shared */
  for (int64_t k0 = 0; k0 < K; k0 += kb) {
    const int64_t kc = K - k0 < kb ? K - k0 : kb;
    for (int64_t i1 = 0; i1 < M; i1 += mo) {
      const int64_t ml = M - i1 < mo ? M - i1 : mo;
      if (PA) ctc_pack_at_f32(6, a + k0 * lda + i1, lda, kc, ml, kb, ap);
      const int64_t nw = tb ? 32 : 32 * CTC_NP_avx512;   /* the columns packed together */
      for (int64_t j0 = 0; j0 < N; j0 += nw) {
        const int64_t nj = N - j0 < nw ? N - j0 : nw;
        if (!pk && tb) ctc_pack_b_f32(b, ldb, k0, kc, j0, (int)nj, bp);
        else if (!pk) ctc_pack_bn_f32(b, ldb, k0, kc, j0, nj, kb, bp);
        for (int64_t i0 = i1; i0 < i1 + ml; i0 += 384) {   /* (M blocks of 192: 2-6% slower on 1024-row GEMMs, Zen 5) */
          const int64_t mc = i1 + ml - i0 < 384 ? i1 + ml - i0 : 384;
          for (int64_t p = 0; p * 32 < nj; p++) {
            const int nr = nj - p * 32 < 32 ? (int)(nj - p * 32) : 32;
            const __mmask16 m0 = ctc_lanes16(nr);
            const __mmask16 m1 = ctc_lanes16(nr - 16);
            const float *bpp = pk ? pk + k0 * ldp + ((jp + j0) / 32 + p) * kc * 32 : bp + p * kb * 32;
            for (int64_t i = i0; i < i0 + mc; i += 12) {
              const int mr = i0 + mc - i < 12 ? (int)(i0 + mc - i) : 12;
              float *ci = c + i * ldc + j0 + p * 32;
              const int add = acc || k0 > 0;
              if (!PA) {
                ctc_gemm_rows_f32(32, kc, a + i * ars + k0 * aks, ars, aks, mr, bpp, ci, ci + 16, ldc, m0, m1, add);
                continue;
              }
              /* the packed A^T's 6-row panels (row r of one at r + 6 k), each a tile of its own */
              const float *ap0 = ap + (i - i1) * kb;
              if (mr > 4) ctc_gemm_keep6_f32(kc, ap0, 1, 6, mr < 6 ? mr : 6, bpp, ci, ci + 16, ldc, m0, m1, add);
              else ctc_gemm_keep4_f32(kc, ap0, 1, 6, mr, bpp, ci, ci + 16, ldc, m0, m1, add);
              float *c6 = ci + 6 * ldc;
              if (mr > 10) ctc_gemm_keep6_f32(kc, ap0 + 6 * kb, 1, 6, mr - 6, bpp, c6, c6 + 16, ldc, m0, m1, add);
              else if (mr > 6) ctc_gemm_keep4_f32(kc, ap0 + 6 * kb, 1, 6, mr - 6, bpp, c6, c6 + 16, ldc, m0, m1, add);
            }
          }
        }
      }
    }
  }
}
/* C[M,N] = op(A) op(B), or C += if acc (as ctc_gemm_f32); serial. A transposed A (a weight
 * gradient's dY^T) is packed too, in panels of 6 rows (each one ctc_gemm_keep6_f32's tile: with
 * 12-row panels and tiles, 0.96-0.98x) in blocks of 384 (384 KiB on the stack, K blocks of 256):
 * its rows are often 4 KiB apart, and a tile reading 12 floats from each of 512 such rows evicts
 * them from L1 (one cache set) before the next tile reads the neighbouring floats (1024x256x1024
 * from rows 4 KiB apart, Zen 4: 72 -> 89 GFLOP/s, medians; 104 with the 6-row panels and
 * ctc_pack_at_f32's whole lines); not with at most 64 columns of C and 64 k (attention's small
 * products), as in the AVX2 GEMM.
 * With pk, op(B)'s panels come packed (ctc_gemm_pack_avx512_f32 of all its ldp columns; C's
 * column 0 is op(B)'s column jp, a multiple of 32) and B is not read: the same sums in the same
 * order. */
static void ctc_gemm_avx512_pk_f32(int ta, int tb, int acc, int64_t M, int64_t N, int64_t K, const float *a,
                                   int64_t lda, const float *b, int64_t ldb, const float *pk, int64_t ldp,
                                   int64_t jp, float *c, int64_t ldc) {
  _Alignas(64) float bp[CTC_NP_avx512 * 512 * 32];
  if (K <= 0) {
    for (int64_t i = 0; i < M && !acc; i++) memset(c + i * ldc, 0, sizeof(float) * (size_t)N);
    return;
  }
  if (ta && !(K <= 64 && N <= 64)) {   /* A^T packed: its own instantiation (in the other, A read in place
                                        * as before: with the choices made at run time, the GEMMs of C rows
                                        * 4 KiB apart ran 2% slower) */
    _Alignas(64) float ap[384 * 256];
    ctc_gemm_avx512_run_f32(1, ta, tb, acc, M, N, K, a, lda, b, ldb, pk, ldp, jp, c, ldc, bp, ap);
  } else {
    ctc_gemm_avx512_run_f32(0, ta, tb, acc, M, N, K, a, lda, b, ldb, pk, ldp, jp, c, ldc, bp, NULL);
  }
}
static void ctc_gemm_avx512_f32(int ta, int tb, int acc, int64_t M, int64_t N, int64_t K, const float *a,
                                int64_t lda, const float *b, int64_t ldb, float *c, int64_t ldc) {
  ctc_gemm_avx512_pk_f32(ta, tb, acc, M, N, K, a, lda, b, ldb, NULL, 0, 0, c, ldc);
}
#define CTC_CONV_PIX_f32 1   /* ctc_conv_pix_f32 is in (linalg_c.c's conv_implicit) */
/* ---- stride-1 f32 convolutions as implicit GEMMs (the tiles of ctc_gemm_avx512_f32): the
 * forward and the input gradient (the weight gradient keeps the unfolded tiles: packing the
 * unfolded rows as floats measured slower than im2col's copy, 168-176 against 179-182 GFLOP/s) */
/* B's panel [kc][32] of pixels [p0, p0 + 32) (the second 16 zeros when p0 + 16 == p1) over the
 * rows at off/tap, as ctc_pack_b_f32 packs a matrix's. */
static inline void ctc_pack_bpix_f32(const ctc_pix *s, const int64_t *off, const unsigned char *tap, int64_t kc,
                                     int64_t p0, int64_t p1, float *restrict bp) {
  ctc_pix16 h0, h1;
  const int two = p0 + 16 < p1;
  ctc_pix16_at(s, p0, &h0);
  ctc_pix16_at(s, two ? p0 + 16 : p0, &h1);
  const __mmask16 all1 = two ? 0xffff : 0;
  for (int64_t k = 0; k < kc; k++) {
    const __mmask16 t0 = s->KH ? h0.tap[tap[k]] : 0xffff, t1 = (s->KH ? h1.tap[tap[k]] : 0xffff) & all1;
    _mm512_store_ps(bp + k * 32, _mm512_maskz_loadu_ps(t0, h0.x + off[k]));
    _mm512_store_ps(bp + k * 32 + 16, _mm512_maskz_loadu_ps(t1, h1.x + off[k]));
  }
}
/* y[n, i, oh, ow] for i < M and the pixels p in [p0, p1) (p0 a multiple of 32, p1 of 16) = sum
 * over k < K of a[i * K + k] s[k, p], y [N, M, H, W]: a stride-1 convolution (a: its weights
 * [M, C KH KW]) or its input gradient (a: the weights' reversed taps, ctc_flip_w_f32) as an
 * implicit GEMM, K in ctc_gemm_avx512_f32's blocks, a panel of 32 pixels packed at a time. */
static inline void ctc_conv_pix_f32(const float *a, const ctc_pix *s, int64_t M, int64_t K, float *y, int64_t p0,
                                    int64_t p1) {
  _Alignas(64) float bp[512 * 32];
  int64_t off[512];
  unsigned char tap[512];
  const int64_t HW = s->H * s->W;
  const int64_t kb = ctc_gemm_kb_avx512(0, K);
  for (int64_t k0 = 0; k0 < K; k0 += kb) {
    const int64_t kc = K - k0 < kb ? K - k0 : kb;
    ctc_pix_rows_at(s, k0, kc, off, tap);
    for (int64_t j = p0; j < p1; j += 32) {
      ctc_pack_bpix_f32(s, off, tap, kc, j, p1, bp);
      const __mmask16 m1 = j + 16 < p1 ? 0xffff : 0;
      float *y0 = y + j / HW * M * HW + j % HW;   /* pixels j .. j + 15 of row 0 */
      float *y1 = m1 ? y + (j + 16) / HW * M * HW + (j + 16) % HW : y0;
      for (int64_t i = 0; i < M; i += 12) {
        const int mr = M - i < 12 ? (int)(M - i) : 12;
        const float *ai = a + i * K + k0;
        float *c0 = y0 + i * HW, *c1 = y1 + i * HW;
        const int add = k0 > 0;
        ctc_gemm_rows_f32(32, kc, ai, K, 1, mr, bp, c0, c1, HW, 0xffff, m1, add);
      }
    }
  }
}
#endif

#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__)) || \
    (defined(__aarch64__) && defined(__ARM_NEON))
/* ---- Winograd convolutions (below, per instruction set): a run of tiles from tile t of a block
 * [t0, ...): image n, tile row ty, tile column tx, its place tb in the block, and L tiles (to the end
 * of the row, at most `lanes`, none at or past `end`). Tile t covers rows 2 ty - 1 .. 2 ty + 2 and
 * columns 2 tx - 1 .. 2 tx + 2 of its image (TH x TW tiles an image). */
typedef struct ctc_wino_run {
  int64_t n, ty, tx, tb, L;
} ctc_wino_run;
static inline ctc_wino_run ctc_wino_run_at(int64_t t, int64_t t0, int64_t end, int64_t TH, int64_t TW, int64_t lanes) {
  ctc_wino_run r = {t / (TW * TH), t / TW % TH, t % TW, t - t0, 0};
  r.L = TW - r.tx < lanes ? TW - r.tx : lanes;
  if (r.L > end - t) r.L = end - t;
  return r;
}
/* The run from tile t that follows run u (t: u's first tile + u.L), as ctc_wino_run_at(t, ...) gives
 * it, without its three divisions */
static inline ctc_wino_run ctc_wino_run_after(ctc_wino_run u, int64_t t, int64_t end, int64_t TH, int64_t TW,
                                              int64_t lanes) {
  ctc_wino_run r = u;
  r.tb += u.L, r.tx += u.L;
  if (r.tx == TW) {
    r.tx = 0;
    if (++r.ty == TH) r.ty = 0, r.n++;
  }
  r.L = TW - r.tx < lanes ? TW - r.tx : lanes;
  if (r.L > end - t) r.L = end - t;
  return r;
}
/* A group of narrow images' tiles [t, t + R TW) (AVX-512 and AVX2 below): per tile row j < R its image
 * n[j] (-1: at or past end) and tile row ty[j] */
static inline void ctc_wino_group(int64_t t, int64_t end, int64_t H, int64_t W, int64_t R, int64_t *n, int64_t *ty) {
  const int64_t TW = W / 2, TH = H / 2;
  for (int64_t j = 0; j < R; j++) {
    const int64_t u = t + j * TW;
    n[j] = u < end ? u / (TW * TH) : -1, ty[j] = u / TW % TH;
  }
}
#endif
#if defined(__AVX512F__)
#define CTC_CONV_WINO_f32 1   /* ctc_conv_wino_f32 is in (linalg_c.c's conv_wino) */
/* ---- 3x3 stride-1 f32 convolutions by Winograd's F(2x2, 3x3) (Lavin and Gray, 2015): each
 * 2x2 block of outputs ("tile") from the 4x4 block of inputs around it, as 16 products of
 * transformed inputs and transformed weights summed over the input channels instead of 36:
 * y = A^T [sum over k of (G g G^T) . (B^T d B)] A. The 16 sums are GEMMs on ctc_gemm_tile_f32's
 * tiles, 2.25 times fewer multiplications than the implicit GEMM's. The transforms add and
 * halve (powers of two): the results differ from the direct sums by a few roundings. */
#define CTC_WINO_P 32   /* tiles a panel (the GEMM tile's columns) */
#define CTC_WINO_R 12   /* rows a GEMM tile */
/* v's lanes of m stored at p: a plain store when all 16 are (masked stores are slower on Zen 4) */
static inline void ctc_wino_st_f32(float *p, __mmask16 m, __m512 v) {
  if (m == 0xffff) _mm512_storeu_ps(p, v);
  else _mm512_mask_storeu_ps(p, m, v);
}
/* The 16 planes of a block's transforms lie CTC_WINO_PAD floats more than their size apart (at
 * sizes a power of two apart, the 16 stores of a tile's transforms fell into one set of the L1) */
#define CTC_WINO_PAD 16
/* U[e][m][k] (e = 4 a + b < 16) = (G g G^T)[a][b] for row m: g = w[m, k] (w [M, K, 3, 3]) or,
 * flip, w[k, m] with its taps reversed (w [K, M, 3, 3]: the input gradient's). 16 k at a time. */
static inline void ctc_wino_u_f32(const float *w, int64_t M, int64_t K, int flip, int64_t m, float *restrict U) {
  const __m512 h = _mm512_set1_ps(0.5f);
  for (int64_t k = 0; k < K; k += 16) {
    const __mmask16 mk = K - k >= 16 ? 0xffff : (__mmask16)((1u << (K - k)) - 1);
    const __m512i kv = _mm512_add_epi32(_mm512_set1_epi32((int)k),
                                        _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
    const __m512i at = flip ? _mm512_add_epi32(_mm512_mullo_epi32(kv, _mm512_set1_epi32((int)(M * 9))),
                                               _mm512_set1_epi32((int)(m * 9 + 8)))
                            : _mm512_add_epi32(_mm512_mullo_epi32(kv, _mm512_set1_epi32(9)),
                                               _mm512_set1_epi32((int)(m * K * 9)));
    __m512 g[3][3], t[4][3];
    for (int a = 0; a < 3; a++)
      for (int b = 0; b < 3; b++)
        g[a][b] = _mm512_mask_i32gather_ps(_mm512_setzero_ps(), mk,
                                           _mm512_add_epi32(at, _mm512_set1_epi32(flip ? -(3 * a + b) : 3 * a + b)), w, 4);
    for (int b = 0; b < 3; b++) {   /* t = G g */
      const __m512 s = _mm512_add_ps(g[0][b], g[2][b]);
      t[0][b] = g[0][b], t[3][b] = g[2][b];
      t[1][b] = _mm512_mul_ps(h, _mm512_add_ps(s, g[1][b]));
      t[2][b] = _mm512_mul_ps(h, _mm512_sub_ps(s, g[1][b]));
    }
    for (int a = 0; a < 4; a++) {   /* t G^T */
      const __m512 s = _mm512_add_ps(t[a][0], t[a][2]);
      float *u = U + (4 * a * M + m) * K + k;
      ctc_wino_st_f32(u, mk, t[a][0]);
      ctc_wino_st_f32(u + M * K, mk, _mm512_mul_ps(h, _mm512_add_ps(s, t[a][1])));
      ctc_wino_st_f32(u + 2 * M * K, mk, _mm512_mul_ps(h, _mm512_sub_ps(s, t[a][1])));
      ctc_wino_st_f32(u + 3 * M * K, mk, t[a][2]);
    }
  }
}
/* The loads of a run of tiles' input columns: masks of the columns [base, base + 2 L + 2)
 * inside [0, W), as two vectors from base and two from base + 2. */
static inline void ctc_wino_cols(int64_t base, int64_t W, int64_t L, __mmask16 *mm) {
  for (int s = 0; s < 4; s++) {
    const int64_t b0 = base + 2 * (s / 2) + 16 * (s % 2), lo = -b0 > 0 ? -b0 : 0;
    int64_t hi = W - b0 < 2 * L + 2 - 2 * (s / 2) - 16 * (s % 2) ? W - b0 : 2 * L + 2 - 2 * (s / 2) - 16 * (s % 2);
    if (hi > 16) hi = 16;
    mm[s] = hi <= lo ? 0 : (__mmask16)((((1u << (hi - lo)) - 1) << lo) & 0xffff);
  }
}
/* d[c][l] = row[base + 2 l + c], c < 4 (0 outside the masks) */
static inline void ctc_wino_row(const float *row, int64_t base, const __mmask16 *mm, __m512 *d) {
  const __m512i ev = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i od = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
  for (int s = 0; s < 2; s++) {
    const __m512 A = _mm512_maskz_loadu_ps(mm[2 * s], row + base + 2 * s);
    const __m512 B = _mm512_maskz_loadu_ps(mm[2 * s + 1], row + base + 2 * s + 16);
    d[2 * s] = _mm512_permutex2var_ps(A, ev, B);
    d[2 * s + 1] = _mm512_permutex2var_ps(A, od, B);
  }
}
/* The transforms of one lane's tile, a row at a time (the same operations in the same order
 * wherever a tile is; four outputs live at a time, as AVX2's 16 registers allow):
 * d = B^T d of its 4x4 inputs, in place */
static inline void ctc_wino_btd(__m512 d[4][4]) {
  for (int c = 0; c < 4; c++) {
    const __m512 e0 = _mm512_sub_ps(d[0][c], d[2][c]), e1 = _mm512_add_ps(d[1][c], d[2][c]);
    const __m512 e2 = _mm512_sub_ps(d[2][c], d[1][c]), e3 = _mm512_sub_ps(d[1][c], d[3][c]);
    d[0][c] = e0, d[1][c] = e1, d[2][c] = e2, d[3][c] = e3;
  }
}
/* o = e B of a row e of B^T d: a row of B^T d B */
static inline void ctc_wino_eb(const __m512 *e, __m512 *o) {
  o[0] = _mm512_sub_ps(e[0], e[2]), o[1] = _mm512_add_ps(e[1], e[2]);
  o[2] = _mm512_sub_ps(e[2], e[1]), o[3] = _mm512_sub_ps(e[1], e[3]);
}
/* y[i][j] = (A^T v A)[i][j] of its 16 products v */
static inline void ctc_wino_ava(const __m512 *v, __m512 y[2][2]) {
  __m512 s[4][2];
  for (int a = 0; a < 4; a++) {   /* s = v A */
    s[a][0] = _mm512_add_ps(_mm512_add_ps(v[4 * a], v[4 * a + 1]), v[4 * a + 2]);
    s[a][1] = _mm512_sub_ps(_mm512_sub_ps(v[4 * a + 1], v[4 * a + 2]), v[4 * a + 3]);
  }
  for (int j = 0; j < 2; j++) {   /* A^T s */
    y[0][j] = _mm512_add_ps(_mm512_add_ps(s[0][j], s[1][j]), s[2][j]);
    y[1][j] = _mm512_sub_ps(_mm512_sub_ps(s[1][j], s[2][j]), s[3][j]);
  }
}
/* o = A (a, b) with A 4x2: the output gradient's tile f as A f A^T, its columns, then the rows */
static inline void ctc_wino_ta(__m512 a, __m512 b, __m512 *o) {
  o[0] = a, o[1] = _mm512_add_ps(a, b), o[2] = _mm512_sub_ps(a, b), o[3] = _mm512_sub_ps(_mm512_setzero_ps(), b);
}
/* zr[e ZS] (lanes lm) = element e of A f A^T, row by row: rows [r0, r1) */
static inline void ctc_wino_afa(__m512 f[2][2], float *zr, int64_t ZS, __mmask16 lm, int r0, int r1) {
  __m512 t[2][4];
  for (int c = 0; c < 2; c++) ctc_wino_ta(f[0][c], f[1][c], t[c]);   /* A f */
#pragma GCC unroll 4
  for (int r = 0; r < 4; r++) {   /* row r of A f A^T (unrolled: t stays in registers) */
    if (r < r0 || r >= r1) continue;
    __m512 o[4];
    ctc_wino_ta(t[0][r], t[1][r], o);
    for (int q = 0; q < 4; q++) ctc_wino_st_f32(zr + (4 * r + q) * ZS, lm, o[q]);
  }
}
/* Narrow images (W = 4, 8 or 16 columns: a row's runs fill 2, 4 or 8 of 16 lanes): groups of 16
 * tiles [t, t + 16) (t a multiple of 16), R = 32 / W whole tile rows each, lane l tile l % (W / 2) of
 * tile row l / (W / 2). A group's rows of W floats (one per tile row) travel as the 32 floats of a
 * pair of vectors, and the tiles' columns come out of it by one two-source permute each. */
/* ab[0], ab[1] = the 32 / W rows p[j] of W floats (NULL: zeros), one after another */
static inline void ctc_wino_pair_ld(const float *const *p, int64_t W, __m512 *ab) {
  for (int h = 0; h < 2; h++)
    if (W == 16) ab[h] = p[h] ? _mm512_loadu_ps(p[h]) : _mm512_setzero_ps();
    else if (W == 8)
      ab[h] = _mm512_insertf32x8(_mm512_castps256_ps512(p[2 * h] ? _mm256_loadu_ps(p[2 * h]) : _mm256_setzero_ps()),
                                 p[2 * h + 1] ? _mm256_loadu_ps(p[2 * h + 1]) : _mm256_setzero_ps(), 1);
    else {
      __m512 v = _mm512_setzero_ps();
      for (int q = 0; q < 4; q++)
        if (p[4 * h + q]) v = _mm512_mask_loadu_ps(v, (__mmask16)(0xfu << (4 * q)), p[4 * h + q] - 4 * q);
      ab[h] = v;
    }
}
/* the rows p[j] (NULL: none) = W floats each of ab[0], ab[1], one after another */
static inline void ctc_wino_pair_st(float *const *p, int64_t W, const __m512 *ab) {
  for (int h = 0; h < 2; h++)
    if (W == 16) {
      if (p[h]) _mm512_storeu_ps(p[h], ab[h]);
    } else if (W == 8) {
      if (p[2 * h]) _mm256_storeu_ps(p[2 * h], _mm512_castps512_ps256(ab[h]));
      if (p[2 * h + 1]) _mm256_storeu_ps(p[2 * h + 1], _mm512_extractf32x8_ps(ab[h], 1));
    } else
      for (int q = 0; q < 4; q++)
        if (p[4 * h + q]) _mm512_mask_storeu_ps(p[4 * h + q] - 4 * q, (__mmask16)(0xfu << (4 * q)), ab[h]);
}
/* ctc_wino_in_f32 for narrow images: lane l of d[r][c] is column 2 tx - 1 + c of its tile row's
 * input row r (ix[c] into the pair; zm[c]: the columns inside the image) */
static inline void ctc_wino_in_narrow_f32(const float *x, int64_t K, int64_t H, int64_t W, int64_t T, int64_t t0,
                                          int64_t B, int64_t k0, int64_t k1, int rows, int r0, int r1,
                                          float *restrict V) {
  const int64_t TW = W / 2, HW = H * W, R = 32 / W, VS = K * B + CTC_WINO_PAD;   /* a plane's floats */
  _Alignas(64) int32_t ix[4][16];
  __mmask16 zm[4] = {0, 0, 0, 0};
  for (int c = 0; c < 4; c++)
    for (int l = 0; l < 16; l++) {
      const int64_t col = 2 * (l % TW) - 1 + c;
      ix[c][l] = (int32_t)(l / TW * W + (col < 0 ? 0 : col >= W ? 0 : col));
      if (col >= 0 && col < W) zm[c] |= (__mmask16)(1u << l);
    }
  for (int64_t tb = 0; tb < B && t0 + tb < T; tb += 16) {
    int64_t n[8], ty[8];
    ctc_wino_group(t0 + tb, T, H, W, R, n, ty);
    const __mmask16 lm = T - t0 - tb >= 16 ? 0xffff : (__mmask16)((1u << (T - t0 - tb)) - 1);
    for (int64_t k = k0; k < k1; k++) {
      __m512 d[4][4];
      for (int r = 0; r < 4; r++) {
        const float *p[8];
        __m512 ab[2];
        for (int64_t j = 0; j < R; j++) {
          const int64_t ih = 2 * ty[j] - 1 + r;
          p[j] = n[j] >= 0 && ih >= 0 && ih < H ? x + (n[j] * K + k) * HW + ih * W : NULL;
        }
        ctc_wino_pair_ld(p, W, ab);
        for (int c = 0; c < 4; c++)
          d[r][c] = _mm512_maskz_permutex2var_ps(zm[c], ab[0], _mm512_load_si512(ix[c]), ab[1]);
      }
      ctc_wino_btd(d);
      float *v = rows ? V + k * B + tb : V + (tb / 32 * K + k) * 32 + tb % 32;
#pragma GCC unroll 4
      for (int r = 0; r < 4; r++) {   /* row r of B^T d B (unrolled: d stays in registers) */
        if (r < r0 || r >= r1) continue;
        __m512 o[4];
        ctc_wino_eb(d[r], o);
        for (int c = 0; c < 4; c++) ctc_wino_st_f32(v + (4 * r + c) * VS, lm, o[c]);
      }
    }
  }
}
/* ctc_wino_out_f32 for narrow images: output row 2 ty + i of each tile row, its columns' two
 * results interleaved into the pair (ix[h]) */
static inline void ctc_wino_out_narrow_f32(const float *restrict Mb, int64_t M, int64_t H, int64_t W, int64_t t0,
                                           int64_t nt, int64_t B, int64_t m0, int64_t m1, float *y) {
  const int64_t TW = W / 2, HW = H * W, R = 32 / W;
  _Alignas(64) int32_t ix[2][16];
  for (int p = 0; p < 32; p++) ix[p / 16][p % 16] = (int32_t)((p % W % 2) * 16 + p / W * TW + p % W / 2);
  for (int64_t tb = 0; tb < nt; tb += 16) {
    int64_t n[8], ty[8];
    ctc_wino_group(t0 + tb, t0 + nt, H, W, R, n, ty);
    const __mmask16 lm = nt - tb >= 16 ? 0xffff : (__mmask16)((1u << (nt - tb)) - 1);
    for (int64_t m = m0; m < m1; m++) {
      __m512 v[16], c[2][2];
      for (int e = 0; e < 16; e++) v[e] = _mm512_maskz_loadu_ps(lm, Mb + e * (M * B + CTC_WINO_PAD) + m * B + tb);
      ctc_wino_ava(v, c);   /* c[i][j]: output row i, column j of each tile */
      for (int i = 0; i < 2; i++) {   /* output row 2 ty + i of each tile row */
        const __m512 ab[2] = {_mm512_permutex2var_ps(c[i][0], _mm512_load_si512(ix[0]), c[i][1]),
                              _mm512_permutex2var_ps(c[i][0], _mm512_load_si512(ix[1]), c[i][1])};
        float *p[8];
        for (int64_t j = 0; j < R; j++) p[j] = n[j] >= 0 ? y + (n[j] * M + m) * HW + (2 * ty[j] + i) * W : NULL;
        ctc_wino_pair_st(p, W, ab);
      }
    }
  }
}
/* ctc_wino_dy_f32 for narrow images: f[i][c] lane l is column 2 tx + c of its tile row's output
 * gradient row 2 ty + i (ix[c] into the pair) */
static inline void ctc_wino_dy_narrow_f32(const float *g, int64_t M, int64_t H, int64_t W, int64_t t0, int64_t nt,
                                          int64_t B, int64_t m0, int64_t m1, int r0, int r1, float *restrict Z) {
  const int64_t TW = W / 2, HW = H * W, R = 32 / W, ZS = M * B + CTC_WINO_PAD;   /* a plane's floats */
  _Alignas(64) int32_t ix[2][16];
  for (int c = 0; c < 2; c++)
    for (int l = 0; l < 16; l++) ix[c][l] = (int32_t)(l / TW * W + 2 * (l % TW) + c);
  for (int64_t tb = 0; tb < nt; tb += 16) {
    int64_t n[8], ty[8];
    ctc_wino_group(t0 + tb, t0 + nt, H, W, R, n, ty);
    const __mmask16 lm = nt - tb >= 16 ? 0xffff : (__mmask16)((1u << (nt - tb)) - 1);
    for (int64_t m = m0; m < m1; m++) {
      __m512 f[2][2];
      for (int i = 0; i < 2; i++) {
        const float *p[8];
        __m512 ab[2];
        for (int64_t j = 0; j < R; j++) p[j] = n[j] >= 0 ? g + (n[j] * M + m) * HW + (2 * ty[j] + i) * W : NULL;
        ctc_wino_pair_ld(p, W, ab);
        for (int c = 0; c < 2; c++) f[i][c] = _mm512_permutex2var_ps(ab[0], _mm512_load_si512(ix[c]), ab[1]);
      }
      ctc_wino_afa(f, Z + m * B + tb, ZS, lm, r0, r1);
    }
  }
}
/* V[e][p][k][32] (p: the block's panels of 32 tiles; rows: V[e][k][B]) = (B^T d B)[e] of tile
 * t0 + 32 p + lane, channels [k0, k1), for the tiles [t0, t0 + B) of T (tile t: image t / (TH TW),
 * rows 2 ty - 1 .. 2 ty + 2, columns 2 tx - 1 .. 2 tx + 2 of x [N, K, H, W]), runs of up to 16
 * tiles of a row; only the transform's rows [r0, r1) (planes e from 4 r0 to 4 r1). */
static inline void ctc_wino_in_f32(const float *x, int64_t K, int64_t H, int64_t W, int64_t T, int64_t t0, int64_t B,
                                   int64_t k0, int64_t k1, int rows, int r0, int r1, float *restrict V) {
  if (W == 4 || W == 8 || W == 16) {   /* narrow images: whole groups of 16 tiles */
    ctc_wino_in_narrow_f32(x, K, H, W, T, t0, B, k0, k1, rows, r0, r1, V);
    return;
  }
  const int64_t TW = W / 2, TH = H / 2, HW = H * W, VS = K * B + CTC_WINO_PAD;   /* a plane's floats */
  for (int64_t t = t0; t < t0 + B && t < T;) {
    const int64_t sh = (t - t0) % 16;
    const ctc_wino_run u = ctc_wino_run_at(t, t0, T, TH, TW, 16 - sh);
    const int64_t tx = u.tx, ty = u.ty, n = u.n, tb = u.tb, L = u.L;
    const __mmask16 sm = (__mmask16)((((1u << L) - 1) << sh) & 0xffff), lm = (__mmask16)((1u << L) - 1);
    const __m512i rot = _mm512_sub_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                         _mm512_set1_epi32((int)sh));
    __mmask16 mm[4];
    ctc_wino_cols(2 * tx - 1, W, L, mm);
    for (int64_t k = k0; k < k1; k++) {
      const float *xk = x + (n * K + k) * HW;
      __m512 d[4][4];
      for (int r = 0; r < 4; r++) {
        const int64_t ih = 2 * ty - 1 + r;
        if (ih < 0 || ih >= H)
          for (int c = 0; c < 4; c++) d[r][c] = _mm512_setzero_ps();
        else
          ctc_wino_row(xk + ih * W, 2 * tx - 1, mm, d[r]);
      }
      ctc_wino_btd(d);
      float *v = rows ? V + k * B + tb : V + (tb / 32 * K + k) * 32 + tb % 32 / 16 * 16;
#pragma GCC unroll 4
      for (int r = 0; r < 4; r++) {   /* row r of B^T d B (unrolled: d stays in registers) */
        if (r < r0 || r >= r1) continue;
        __m512 o[4];
        ctc_wino_eb(d[r], o);
        for (int c = 0; c < 4; c++)
          if (rows) ctc_wino_st_f32(v + (4 * r + c) * VS, lm, o[c]);
          else _mm512_mask_store_ps(v + (4 * r + c) * VS, sm, sh ? _mm512_permutexvar_ps(rot, o[c]) : o[c]);
      }
    }
    t += L;
  }
}
/* Mb[e][m][B] for rows [m, m + 12) of M and the block's panel p (nt tiles in the block):
 * U[e] V[e, p], over all K at once (the same sums whatever the thread). */
static inline void ctc_wino_gemm_f32(const float *U, const float *V, int64_t M, int64_t K, int64_t B, int64_t nt,
                                     int64_t e, int64_t p, int64_t m, float *Mb) {
  const int mr = M - m < 12 ? (int)(M - m) : 12;
  const __mmask16 m1 = p * 32 + 16 < nt ? 0xffff : 0;
  const float *a = U + (e * M + m) * K, *bp = V + e * (K * B + CTC_WINO_PAD) + p * K * 32;
  float *c0 = Mb + e * (M * B + CTC_WINO_PAD) + m * B + p * 32;
  ctc_gemm_rows_f32(32, K, a, K, 1, mr, bp, c0, c0 + 16, B, 0xffff, m1, 0);
}
/* The masks of a run of L tiles' lanes (lm) and of its outputs' 2 L columns of a row (s0, s1) */
static inline void ctc_wino_out_masks(int64_t L, __mmask16 *lm, __mmask16 *s0, __mmask16 *s1) {
  *lm = (__mmask16)(((1u << L) - 1) & 0xffff);
  *s0 = L >= 8 ? 0xffff : (__mmask16)((1u << (2 * L)) - 1);
  *s1 = L > 8 ? (__mmask16)(((1u << (2 * L - 16)) - 1) & 0xffff) : 0;
}
/* y[n, m, 2 ty + i, 2 tx + j] = (A^T Mb A)[i][j] for rows [m0, m1) of y [N, M, H, W], the
 * block's tiles [t0, t0 + nt), runs of up to 16 tiles of a row. */
static inline void ctc_wino_out_f32(const float *restrict Mb, int64_t M, int64_t H, int64_t W, int64_t t0, int64_t nt,
                                    int64_t B, int64_t m0, int64_t m1, float *y) {
  if (W == 4 || W == 8 || W == 16) {   /* narrow images: whole groups of 16 tiles */
    ctc_wino_out_narrow_f32(Mb, M, H, W, t0, nt, B, m0, m1, y);
    return;
  }
  const int64_t TW = W / 2, TH = H / 2, HW = H * W;
  const __m512i lo = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
  const __m512i hi = _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
  for (int64_t t = t0; t < t0 + nt;) {
    const ctc_wino_run u = ctc_wino_run_at(t, t0, t0 + nt, TH, TW, 16);
    const int64_t tx = u.tx, ty = u.ty, n = u.n, tb = u.tb, L = u.L;
    __mmask16 lm, s0, s1;
    ctc_wino_out_masks(L, &lm, &s0, &s1);
    for (int64_t m = m0; m < m1; m++) {
      __m512 v[16], c[2][2];
      for (int e = 0; e < 16; e++) v[e] = _mm512_maskz_loadu_ps(lm, Mb + e * (M * B + CTC_WINO_PAD) + m * B + tb);
      ctc_wino_ava(v, c);   /* c[i][j]: output row i, column j of each tile */
      float *yr = y + (n * M + m) * HW + 2 * ty * W + 2 * tx;
      for (int i = 0; i < 2; i++) {   /* output row 2 ty + i, its two columns interleaved */
        ctc_wino_st_f32(yr + i * W, s0, _mm512_permutex2var_ps(c[i][0], lo, c[i][1]));
        if (s1) ctc_wino_st_f32(yr + i * W + 16, s1, _mm512_permutex2var_ps(c[i][0], hi, c[i][1]));
      }
    }
    t += L;
  }
}
/* The weight gradient: dw[m, k] = G^T P G, P[e][m][k] = sum over the tiles of Z[e][m][t] V[e][k][t],
 * Z = A f A^T of the output gradient's 2x2 tile f (the forward's transposed: 2.25 times fewer
 * multiplications than the unfolded GEMM's). Z[e][m][B] of rows [m0, m1) of g [N, M, H, W], the
 * block's tiles [t0, t0 + nt), runs of up to 16 tiles of a row; only Z's rows [r0, r1). */
static inline void ctc_wino_dy_f32(const float *g, int64_t M, int64_t H, int64_t W, int64_t t0, int64_t nt, int64_t B,
                                   int64_t m0, int64_t m1, int r0, int r1, float *restrict Z) {
  if (W == 4 || W == 8 || W == 16) {   /* narrow images: whole groups of 16 tiles */
    ctc_wino_dy_narrow_f32(g, M, H, W, t0, nt, B, m0, m1, r0, r1, Z);
    return;
  }
  const int64_t TW = W / 2, TH = H / 2, HW = H * W, ZS = M * B + CTC_WINO_PAD;   /* a plane's floats */
  const __m512i ev = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i od = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
  for (int64_t t = t0; t < t0 + nt;) {
    const ctc_wino_run u = ctc_wino_run_at(t, t0, t0 + nt, TH, TW, 16);
    const int64_t tx = u.tx, ty = u.ty, n = u.n, tb = u.tb, L = u.L;
    __mmask16 lm, s0, s1;
    ctc_wino_out_masks(L, &lm, &s0, &s1);
    for (int64_t m = m0; m < m1; m++) {
      const float *gr = g + (n * M + m) * HW + 2 * ty * W + 2 * tx;
      __m512 f[2][2];
      for (int i = 0; i < 2; i++) {
        const __m512 A = _mm512_maskz_loadu_ps(s0, gr + i * W), B2 = _mm512_maskz_loadu_ps(s1, gr + i * W + 16);
        f[i][0] = _mm512_permutex2var_ps(A, ev, B2), f[i][1] = _mm512_permutex2var_ps(A, od, B2);
      }
      ctc_wino_afa(f, Z + m * B + tb, ZS, lm, r0, r1);
    }
    t += L;
  }
}
/* P[e][m][k] (+)= Z[e] V[e]^T over the block's nt tiles, columns k of panel q (32 of them: V's rows
 * packed as op(B)'s panel), every row m; add: onto the earlier blocks' sums. */
static inline void ctc_wino_wgemm_f32(const float *Z, const float *V, int64_t M, int64_t K, int64_t B, int64_t nt,
                                      int64_t e, int64_t q, int add, float *P) {
  _Alignas(64) float bp[512 * 32];
  const int nr = K - q * 32 < 32 ? (int)(K - q * 32) : 32;
  const __mmask16 m0 = nr >= 16 ? 0xffff : (__mmask16)((1u << nr) - 1);
  const __mmask16 m1 = nr >= 32 ? 0xffff : nr <= 16 ? 0 : (__mmask16)((1u << (nr - 16)) - 1);
  ctc_pack_b_f32(V + e * (K * B + CTC_WINO_PAD), B, 0, nt, q * 32, nr, bp);
  for (int64_t m = 0; m < M; m += 12) {
    const int mr = M - m < 12 ? (int)(M - m) : 12;
    const float *a = Z + e * (M * B + CTC_WINO_PAD) + m * B;
    float *c0 = P + (e * M + m) * K + q * 32;
    ctc_gemm_rows_f32(32, nt, a, B, 1, mr, bp, c0, c0 + 16, K, m0, m1, add);
  }
}
#define CTC_WINO_WQ 32   /* weight gradient: channels k a GEMM panel */
#endif

#if defined(CTC_WANT_GEMM_BF16) && defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512BF16__)
#include <immintrin.h>
#define CTC_GEMM_AVX512BF16 1
/* Two bf16 (the lower 16 bits first) in 32 bits: the packed panels, which may be laid in memory
 * that holds floats at other times (a convolution's scratch). */
typedef uint32_t __attribute__((__may_alias__)) ctc_bf16x2;
/* 16 bf16 pairs from 32 consecutive floats holding bfloat16 values (their upper halves, in
 * order: pair q is (p[2q], p[2q+1])); the floats past n are zeros. */
static inline __m512i ctc_bf16_pairs_row(const float *p, int64_t n) {
  const __m512i odd = _mm512_set_epi16(63, 61, 59, 57, 55, 53, 51, 49, 47, 45, 43, 41, 39, 37, 35, 33, 31, 29, 27,
                                       25, 23, 21, 19, 17, 15, 13, 11, 9, 7, 5, 3, 1);
  const __mmask16 m0 = ctc_lanes16(n);
  const __mmask16 m1 = ctc_lanes16(n - 16);
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
                            int64_t kpl, int64_t mcl, ctc_bf16x2 *restrict ap) {
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
      const __m512 xv = _mm512_maskz_loadu_ps(m, x + i);
      const __m512 yv = two ? _mm512_maskz_loadu_ps(m, y + i) : _mm512_setzero_ps();
      _mm512_store_si512(ap + q * mcl + i, ctc_bf16_pairs_cols(xv, yv));
    }
  }
}
/* op(B)'s panels of 32 columns as bf16 pairs along k over [k0, k0 + kc), zero past kc and N:
 * panel p's bp[p * 8192 + q * 32 + j] = (B[k0 + 2q, j], B[k0 + 2q + 1, j]) for its columns j.
 * B not transposed: the n <= 128 columns from j0 (up to 4 panels) at once, each row's 128 floats
 * read in one pass (a panel at a time read B's rows 32 floats apart: 229 against 361 GFLOP/s on
 * a 32 x 8192 x 288 GEMM). */
static void ctc_pack_bn_bf16(const float *b, int64_t ldb, int64_t k0, int64_t kc, int64_t j0, int64_t n,
                             ctc_bf16x2 *restrict bp) {
  const int np = (int)((n + 31) / 32), nr = (int)(n - 32 * (np - 1));
  const __mmask16 m0 = ctc_lanes16(nr);
  const __mmask16 m1 = ctc_lanes16(nr - 16);
  for (int64_t q = 0; 2 * q < kc; q++) {
    const float *x = b + (k0 + 2 * q) * ldb + j0, *y = x + ldb;
    const int two = 2 * q + 1 < kc;
    for (int p = 0; p < np; p++) {
      const __mmask16 n0 = p == np - 1 ? m0 : 0xffff, n1 = p == np - 1 ? m1 : 0xffff;
      const __m512 x0 = _mm512_maskz_loadu_ps(n0, x + 32 * p), x1 = _mm512_maskz_loadu_ps(n1, x + 32 * p + 16);
      const __m512 y0 = two ? _mm512_maskz_loadu_ps(n0, y + 32 * p) : _mm512_setzero_ps();
      const __m512 y1 = two ? _mm512_maskz_loadu_ps(n1, y + 32 * p + 16) : _mm512_setzero_ps();
      _mm512_store_si512(bp + p * 8192 + q * 32, ctc_bf16_pairs_cols(x0, y0));
      _mm512_store_si512(bp + p * 8192 + q * 32 + 16, ctc_bf16_pairs_cols(x1, y1));
    }
  }
}
/* B transposed (B[j, k] at b[j * ldb + k]): the panel of the nr <= 32 columns from j0, 16 columns'
 * rows of pairs at a time through a 16x16 transpose. */
static void ctc_pack_bt_bf16(const float *b, int64_t ldb, int64_t k0, int64_t kc, int64_t j0, int nr,
                             ctc_bf16x2 *restrict bp) {
  _Alignas(64) ctc_bf16x2 t[16 * 16];
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
/* One pair q of a tile: rows i < R of A's pairs broadcast, each dotted with op(B)'s packed pairs of
 * row q (32 columns) */
static inline __attribute__((always_inline)) void ctc_gemm_q32_bf16(const int R, int64_t q, const ctc_bf16x2 *const *ai,
                                                                    int64_t aks, const ctc_bf16x2 *restrict bp,
                                                                    __m512 *c0, __m512 *c1) {
  const __m512bh b0 = (__m512bh)_mm512_load_si512(bp + q * 32), b1 = (__m512bh)_mm512_load_si512(bp + q * 32 + 16);
#pragma GCC unroll 12
  for (int i = 0; i < R; i++) {
    const __m512bh av = (__m512bh)_mm512_set1_epi32((int)ai[i][q * aks]);
    c0[i] = _mm512_dpbf16_ps(c0[i], av, b0);
    c1[i] = _mm512_dpbf16_ps(c1[i], av, b1);
  }
}
/* The tile C[mr, 32 columns masked by m0, m1] (the first 16 of row i at c0p + i * ldc, the
 * other 16 at c1p + i * ldc) = (C +, if add) sum over the kp pairs q of
 * A's pair (i, q) . bp[q]: A's pair at a[i * ars + q * aks]. R (12, 8, 4, 2 or 1) rows as in
 * ctc_gemm_tile_f32; the registers sum 32 pairs (64 k) at a time, kept in t between them with T
 * (ctc_tile_next_f32). */
static inline __attribute__((always_inline)) void ctc_gemm_tile_bf16(const int R, const int T, int64_t kp,
                                                                     const ctc_bf16x2 *a,
                                                                     int64_t ars, int64_t aks, int mr,
                                                                     const ctc_bf16x2 *restrict bp, float *c0p,
                                                                     float *c1p, int64_t ldc, __mmask16 m0,
                                                                     __mmask16 m1, int add) {
  const ctc_bf16x2 *ai[12];
  _Alignas(64) float t[T ? 12 * 32 : 1];
#pragma GCC unroll 12
  for (int i = 0; i < R; i++) ai[i] = a + (i < mr ? i : 0) * ars;
  for (int64_t q0 = 0; q0 < kp; q0 += 32) {
    const int64_t q1 = kp - q0 < 32 ? kp : q0 + 32;
    __m512 c0[12], c1[12];
#pragma GCC unroll 12
    for (int i = 0; i < R; i++) c0[i] = _mm512_setzero_ps(), c1[i] = _mm512_setzero_ps();
    for (int64_t q = q0; q < q1; q++) ctc_gemm_q32_bf16(R, q, ai, aks, bp, c0, c1);
    if (T) ctc_tile_next_f32(R, mr, c0, c1, t, q0 == 0, q1 == kp, c0p, c1p, ldc, m0, m1, add);
    else ctc_tile_store_f32(R, mr, c0, c1, c0p, c1p, ldc, m0, m1, add || q0 > 0);
  }
}
/* ctc_gemm_tile_bf16's tile of R <= 6 rows of a row-major A (a row's pairs 1 apart) with the sum of
 * its blocks of 32 pairs kept in registers and C read and written once, as ctc_gemm_tile_keep_f32:
 * the same additions in the same order as ctc_gemm_tile_bf16's, so the same bits (identical on 300
 * random shapes). On a Zen 4, 1 thread, against the 12-row tile (medians of 5-8 alternating runs, best
 * of 60 calls): the bench gpt's and llama's bf16 GEMMs with A not transposed 1.06-1.15x (208-217
 * GFLOP/s), 1024^3 1.04-1.07x. A full block's loop is unrolled by 4, as ctc_gemm_sumk_f32's
 * (without it GCC kept op(B)'s vectors on the stack in one of the two functions below). */
static inline __attribute__((always_inline)) void ctc_gemm_tile_keep_bf16(const int R, int64_t kp, const ctc_bf16x2 *a,
                                                                          int64_t ars, int mr,
                                                                          const ctc_bf16x2 *restrict bp, float *c0p,
                                                                          float *c1p, int64_t ldc, __mmask16 m0,
                                                                          __mmask16 m1, int add) {
  const ctc_bf16x2 *ai[6];
  __m512 s0[6], s1[6];   /* (set from the first block; zeros for the compiler, which cannot see kp > 0) */
#pragma GCC unroll 6
  for (int i = 0; i < R; i++) ai[i] = a + (i < mr ? i : 0) * ars, s0[i] = s1[i] = _mm512_setzero_ps();
  for (int64_t q0 = 0; q0 < kp; q0 += 32) {
    const int64_t q1 = kp - q0 < 32 ? kp : q0 + 32;
    __m512 c0[6], c1[6];
#pragma GCC unroll 6
    for (int i = 0; i < R; i++) c0[i] = _mm512_setzero_ps(), c1[i] = _mm512_setzero_ps();
    if (q1 - q0 == 32) {
#pragma GCC unroll 4
      for (int64_t q = q0; q < q0 + 32; q++) ctc_gemm_q32_bf16(R, q, ai, 1, bp, c0, c1);
    } else {
      for (int64_t q = q0; q < q1; q++) ctc_gemm_q32_bf16(R, q, ai, 1, bp, c0, c1);
    }
    ctc_keep_add_f32(R, q0 == 0, mr, c0, c1, s0, s1, c0p, c1p, ldc, m0, m1, add);
  }
  ctc_tile_store_f32(R, mr, s0, s1, c0p, c1p, ldc, m0, m1, 0);
}
/* ctc_gemm_tile_keep_bf16 of 6 and of 4 rows, as functions of their own (as the f32 ones) */
static __attribute__((noinline)) void ctc_gemm_keep6_bf16(int64_t kp, const ctc_bf16x2 *a, int64_t ars, int mr,
                                                          const ctc_bf16x2 *bp, float *c0p, float *c1p, int64_t ldc,
                                                          __mmask16 m0, __mmask16 m1, int add) {
  ctc_gemm_tile_keep_bf16(6, kp, a, ars, mr, bp, c0p, c1p, ldc, m0, m1, add);
}
static __attribute__((noinline)) void ctc_gemm_keep4_bf16(int64_t kp, const ctc_bf16x2 *a, int64_t ars, int mr,
                                                          const ctc_bf16x2 *bp, float *c0p, float *c1p, int64_t ldc,
                                                          __mmask16 m0, __mmask16 m1, int add) {
  ctc_gemm_tile_keep_bf16(4, kp, a, ars, mr, bp, c0p, c1p, ldc, m0, m1, add);
}
/* The tile C[mr <= 12 rows, 32 columns masked by m0, m1] of ctc_gemm_tile_bf16. With KEEP (a constant
 * where it is called, 1 only where A is row-major, aks 1: not for A^T, whose packed pairs of 6 rows
 * fill a quarter of a line, and 6-row panels of A^T packed for the keep tiles measured 0.98-1.02x
 * its 12-row tiles; a constant, not aks == 1, which GCC's propagation of aks made the keep tile
 * keep op(B) on the stack: 0.52x), over more than 64 pairs (K > 128, as the f32 tiles' rule:
 * attention's 32-row p v over 128 keys ran 0.96x on keep tiles) and 3 rows or more, as tiles of
 * 6 (or 4) rows with their sums in registers (ctc_gemm_tile_keep_bf16); else in
 * the fewest rows of 12, 8, 4, 2 or 1 computed, the sums kept off C when its rows share L1 sets,
 * as ctc_gemm_rows_f32 (1024^3 on a Zen 4: 172 GFLOP/s adding to C, 1000^3 187) */
static inline __attribute__((always_inline)) void ctc_gemm_rows_bf16(const int KEEP, int64_t kp, const ctc_bf16x2 *a,
                                                                     int64_t ars, int64_t aks, int mr,
                                                                     const ctc_bf16x2 *bp, float *c0p, float *c1p,
                                                                     int64_t ldc, __mmask16 m0, __mmask16 m1,
                                                                     int add) {
  if (KEEP && kp > 64 && mr > 2) {
    if (mr == 8 || mr == 7) {   /* 4 + 4 (or 3), not 6 + a 4-row tile of 2 (or 1): 32 rows 1.03-1.05x */
      ctc_gemm_keep4_bf16(kp, a, ars, 4, bp, c0p, c1p, ldc, m0, m1, add);
      ctc_gemm_keep4_bf16(kp, a + 4 * ars, ars, mr - 4, bp, c0p + 4 * ldc, c1p + 4 * ldc, ldc, m0, m1, add);
      return;
    }
    if (mr > 6) {
      ctc_gemm_keep6_bf16(kp, a, ars, 6, bp, c0p, c1p, ldc, m0, m1, add);
      a += 6 * ars, c0p += 6 * ldc, c1p += 6 * ldc, mr -= 6;
    }
    if (mr > 4) ctc_gemm_keep6_bf16(kp, a, ars, mr, bp, c0p, c1p, ldc, m0, m1, add);
    else ctc_gemm_keep4_bf16(kp, a, ars, mr, bp, c0p, c1p, ldc, m0, m1, add);
    return;
  }
  if (ldc % 1024 == 0 && kp > 32) {
    if (mr > 8) ctc_gemm_tile_bf16(12, 1, kp, a, ars, aks, mr, bp, c0p, c1p, ldc, m0, m1, add);
    else if (mr > 4) ctc_gemm_tile_bf16(8, 1, kp, a, ars, aks, mr, bp, c0p, c1p, ldc, m0, m1, add);
    else if (mr > 2) ctc_gemm_tile_bf16(4, 1, kp, a, ars, aks, mr, bp, c0p, c1p, ldc, m0, m1, add);
    else if (mr == 2) ctc_gemm_tile_bf16(2, 1, kp, a, ars, aks, mr, bp, c0p, c1p, ldc, m0, m1, add);
    else ctc_gemm_tile_bf16(1, 1, kp, a, ars, aks, mr, bp, c0p, c1p, ldc, m0, m1, add);
  } else if (mr > 8) ctc_gemm_tile_bf16(12, 0, kp, a, ars, aks, mr, bp, c0p, c1p, ldc, m0, m1, add);
  else if (mr > 4) ctc_gemm_tile_bf16(8, 0, kp, a, ars, aks, mr, bp, c0p, c1p, ldc, m0, m1, add);
  else if (mr > 2) ctc_gemm_tile_bf16(4, 0, kp, a, ars, aks, mr, bp, c0p, c1p, ldc, m0, m1, add);
  else if (mr == 2) ctc_gemm_tile_bf16(2, 0, kp, a, ars, aks, mr, bp, c0p, c1p, ldc, m0, m1, add);
  else ctc_gemm_tile_bf16(1, 0, kp, a, ars, aks, mr, bp, c0p, c1p, ldc, m0, m1, add);   /* one token's row */
}
/* ctc_gemm_avx512bf16's loops, TA (a constant where it is called) whether A is transposed: an
 * instantiation each (with both in one, the weight gradients' GEMMs, A^T on the 12-row tiles, ran
 * 0.96-0.97x on a Zen 4 once the keep tiles were in) */
static inline __attribute__((always_inline)) void ctc_gemm_avx512bf16_run(const int TA, int tb, int acc, int64_t M,
                                                                          int64_t N, int64_t K, const float *a,
                                                                          int64_t lda, const float *b, int64_t ldb,
                                                                          float *c, int64_t ldc, ctc_bf16x2 *bp,
                                                                          ctc_bf16x2 *ap) {
  /* K in equal blocks of at most 512 (multiples of 32 but the last), M of 384 (op(B)'s panels are
   * packed again for each: in blocks of 96 the bench gpt's bf16 autocast train step took 146 ms, not
   * 139-141, on a Zen 4) */
  const int64_t nkb = (K + 511) / 512, kb = ((K + nkb - 1) / nkb + 31) / 32 * 32;
  for (int64_t k0 = 0; k0 < K; k0 += kb) {
    const int64_t kc = K - k0 < kb ? K - k0 : kb, kp = (kc + 1) / 2, kpl = (kp + 15) / 16 * 16;
    for (int64_t i0 = 0; i0 < M; i0 += 384) {
      const int64_t mc = M - i0 < 384 ? M - i0 : 384, mcl = (mc + 15) / 16 * 16;
      const int64_t ars = TA ? 1 : kpl, aks = TA ? mcl : 1;
      ctc_pack_a_bf16(TA, a, lda, i0, mc, k0, kc, kpl, mcl, ap);
      for (int64_t j0 = 0; j0 < N; j0 += 32) {
        const int nr = N - j0 < 32 ? (int)(N - j0) : 32;
        const __mmask16 m0 = ctc_lanes16(nr);
        const __mmask16 m1 = ctc_lanes16(nr - 16);
        ctc_bf16x2 *restrict bq = bp + j0 / 32 % 4 * 8192;   /* this panel */
        if (tb) ctc_pack_bt_bf16(b, ldb, k0, kc, j0, nr, bq);
        else if (j0 % 128 == 0) ctc_pack_bn_bf16(b, ldb, k0, kc, j0, N - j0 < 128 ? N - j0 : 128, bp);
        for (int64_t i = 0; i < mc; i += 12) {
          const int mr = mc - i < 12 ? (int)(mc - i) : 12;
          const ctc_bf16x2 *ai = ap + i * ars;
          float *ci = c + (i0 + i) * ldc + j0;
          const int add = acc || k0 > 0;
          ctc_gemm_rows_bf16(!TA, kp, ai, ars, aks, mr, bq, ci, ci + 16, ldc, m0, m1, add);
        }
      }
    }
  }
}
/* C[M,N] = op(A) op(B), or C += if acc, where A's and B's floats hold bfloat16 values; serial.
 * 128 KiB of packed panels and 384 KiB of op(A) on the stack. */
static void ctc_gemm_avx512bf16(int ta, int tb, int acc, int64_t M, int64_t N, int64_t K, const float *a,
                                int64_t lda, const float *b, int64_t ldb, float *c, int64_t ldc) {
  _Alignas(64) ctc_bf16x2 bp[4 * 256 * 32];   /* 4 panels of 256 pairs */
  _Alignas(64) ctc_bf16x2 ap[384 * 256];
  if (K <= 0) {
    for (int64_t i = 0; i < M && !acc; i++) memset(c + i * ldc, 0, sizeof(float) * (size_t)N);
    return;
  }
  if (ta) ctc_gemm_avx512bf16_run(1, tb, acc, M, N, K, a, lda, b, ldb, c, ldc, bp, ap);
  else ctc_gemm_avx512bf16_run(0, tb, acc, M, N, K, a, lda, b, ldb, c, ldc, bp, ap);
}
/* ---- stride-1 convolutions of bf16 values as implicit GEMMs (codegen_c/linalg_c.c's
 * conv_implicit), over the pixel matrices (ctc_pix) of the f32 section. */
/* B's panel of pixels [p0, p0 + 32) (the second 16 absent, zeros, when p0 + 16 == p1) over the rows
 * at off/tap (kc of them) as bf16 pairs along k: bp[q * 32 + j], as ctc_pack_bn_bf16 packs a matrix. */
static inline void ctc_pack_bpix_bf16(const ctc_pix *s, const int64_t *off, const unsigned char *tap, int64_t kc,
                                      int64_t p0, int64_t p1, ctc_bf16x2 *restrict bp) {
  ctc_pix16 h0, h1;
  const int two = p0 + 16 < p1;
  ctc_pix16_at(s, p0, &h0);
  ctc_pix16_at(s, two ? p0 + 16 : p0, &h1);
  const __mmask16 all1 = two ? 0xffff : 0;
  for (int64_t q = 0; 2 * q < kc; q++) {
    const int64_t k = 2 * q, o0 = off[k];
    __mmask16 t0 = s->KH ? h0.tap[tap[k]] : 0xffff, t1 = (s->KH ? h1.tap[tap[k]] : 0xffff) & all1;
    const __m512 x0 = _mm512_maskz_loadu_ps(t0, h0.x + o0), x1 = _mm512_maskz_loadu_ps(t1, h1.x + o0);
    __m512 y0 = _mm512_setzero_ps(), y1 = _mm512_setzero_ps();
    if (k + 1 < kc) {
      const int64_t o1 = off[k + 1];
      t0 = s->KH ? h0.tap[tap[k + 1]] : 0xffff, t1 = (s->KH ? h1.tap[tap[k + 1]] : 0xffff) & all1;
      y0 = _mm512_maskz_loadu_ps(t0, h0.x + o1), y1 = _mm512_maskz_loadu_ps(t1, h1.x + o1);
    }
    _mm512_store_si512(bp + q * 32, ctc_bf16_pairs_cols(x0, y0));
    _mm512_store_si512(bp + q * 32 + 16, ctc_bf16_pairs_cols(x1, y1));
  }
}
/* The rows at off/tap (m of them) of a pixel matrix over pixels [k0, k0 + kc) (k0 a multiple of
 * 32, kc of 16) as bf16 pairs along the pixels, row-major: ap[i * ld + q], zeros from kc to ld (a
 * multiple of 16); h[t]: pixels k0 + 16 t .. + 15 (ctc_pix_chunks). */
static inline void ctc_pack_pix_rows_bf16(const ctc_pix *s, const ctc_pix16 *h, const int64_t *off,
                                          const unsigned char *tap, int64_t m, int64_t kc, int64_t ld,
                                          ctc_bf16x2 *restrict ap) {
  const __m512i odd = _mm512_set_epi16(63, 61, 59, 57, 55, 53, 51, 49, 47, 45, 43, 41, 39, 37, 35, 33, 31, 29, 27,
                                       25, 23, 21, 19, 17, 15, 13, 11, 9, 7, 5, 3, 1);
  for (int64_t i = 0; i < m; i++)
    for (int64_t q0 = 0; q0 < ld; q0 += 16) {   /* pixels k0 + 2 q0 .. + 31 */
      const ctc_pix16 *h0 = &h[q0 / 8], *h1 = &h[q0 / 8 + 1];
      const __mmask16 t0 = 2 * q0 >= kc ? 0 : s->KH ? h0->tap[tap[i]] : 0xffff;
      const __mmask16 t1 = 2 * q0 + 16 >= kc ? 0 : s->KH ? h1->tap[tap[i]] : 0xffff;
      const __m512 lo = _mm512_maskz_loadu_ps(t0, h0->x + off[i]), hi = _mm512_maskz_loadu_ps(t1, h1->x + off[i]);
      const __m512i pairs = _mm512_permutex2var_epi16(_mm512_castps_si512(lo), odd, _mm512_castps_si512(hi));
      _mm512_store_si512(ap + i * ld + q0, pairs);
    }
}
/* B^T's panels for the columns [j0, j0 + n) (n <= 128: up to 4 panels of 32) that are rows of the
 * pixel matrix s, over the pixels of h (kc of them): panel t's bp[t * 8192 + q * 32 + j], zeros past n. */
static inline void ctc_pack_pix_cols_bf16(const ctc_pix *s, const ctc_pix16 *h, int64_t j0, int64_t n, int64_t kc,
                                          int64_t kpl, ctc_bf16x2 *restrict bp) {
  _Alignas(64) ctc_bf16x2 t[16 * 256];
  int64_t off[16];
  unsigned char tap[16];
  for (int64_t g = 0; g < n; g += 16) {   /* 16 columns: their rows of pairs, transposed */
    const int64_t m = n - g < 16 ? n - g : 16;
    ctc_pix_rows_at(s, j0 + g, m, off, tap);
    ctc_pack_pix_rows_bf16(s, h, off, tap, m, kc, kpl, t);
    if (m < 16) memset(t + m * kpl, 0, sizeof(uint32_t) * (size_t)((16 - m) * kpl));
    ctc_bf16x2 *dst = bp + g / 32 * 8192 + g % 32;
    for (int64_t q0 = 0; q0 < kpl; q0 += 16)
      ctc_transpose16_f32((const float *)(t + q0), kpl, (float *)(dst + q0 * 32), 32);
  }
}
/* Rows [i0, i1) of a convolution's weights as the A operand of ctc_conv_pix_bf16, bf16 pairs
 * along k, row-major: wp[i * wpl + q] (wpl: K / 2 rounded up to 16, zeros past K). flip 0:
 * A = w[M, K]; flip 1: A[i, (o, kh, kw)] = w[o, i, KH - 1 - kh, KW - 1 - kw] (K = O KH KW), the
 * input gradient of the convolution by w[O, M, KH, KW] as a convolution of its output gradient. */
static inline void ctc_pack_w_bf16(const float *w, int flip, int64_t M, int64_t K, int64_t KH, int64_t KW,
                                   int64_t wpl, int64_t i0, int64_t i1, ctc_bf16x2 *restrict wp) {
  if (!flip) {
    ctc_pack_a_bf16(0, w, K, i0, i1 - i0, 0, K, wpl, 0, wp + i0 * wpl);
    return;
  }
  const int64_t KK = KH * KW;
  for (int64_t i = i0; i < i1; i++) {   /* row i: w[o, i] reversed, o = 0, 1, ... */
    ctc_bf16x2 *ai = wp + i * wpl, lo = 0;
    const float *wo = w + i * KK;
    int64_t t = KK - 1;   /* the tap read */
    for (int64_t k = 0; k < 2 * wpl; k++) {
      uint32_t v = 0;
      if (k < K) {
        memcpy(&v, wo + t, 4);
        v >>= 16;
        if (t-- == 0) t = KK - 1, wo += M * KK;
      }
      if (k & 1) ai[k / 2] = lo | v << 16;
      else lo = v;
    }
  }
}
/* y[n, i, oh, ow] for i < M and the pixels p in [p0, p1) (p0 a multiple of 32, p1 of 16) = sum
 * over k < K of A[i, k] s[k, p], s a pixel matrix (ctc_pix), y [N, M, H, W], A packed by
 * ctc_pack_w_bf16: a stride-1 convolution (or its input gradient) as an implicit GEMM, op(B)'s
 * panels packed from the images. K in blocks of up to 512, the pixels in groups of 128 (4
 * panels), M in tiles of 12 rows. */
static inline void ctc_conv_pix_bf16(const ctc_bf16x2 *wp, int64_t wpl, const ctc_pix *s, int64_t M, int64_t K,
                                     float *y, int64_t p0, int64_t p1) {
  _Alignas(64) ctc_bf16x2 bp[4 * 256 * 32];
  int64_t off[512];
  unsigned char tap[512];
  const int64_t HW = s->H * s->W;
  const int64_t nkb = (K + 511) / 512, kb = ((K + nkb - 1) / nkb + 31) / 32 * 32;
  for (int64_t k0 = 0; k0 < K; k0 += kb) {
    const int64_t kc = K - k0 < kb ? K - k0 : kb, kp = (kc + 1) / 2;
    ctc_pix_rows_at(s, k0, kc, off, tap);
    for (int64_t g0 = p0; g0 < p1; g0 += 128) {
      const int64_t g1 = p1 - g0 < 128 ? p1 : g0 + 128;
      for (int64_t j = g0; j < g1; j += 32) ctc_pack_bpix_bf16(s, off, tap, kc, j, g1, bp + (j - g0) / 32 * 8192);
      for (int64_t j = g0; j < g1; j += 32) {
        const ctc_bf16x2 *bq = bp + (j - g0) / 32 * 8192;
        const __mmask16 m1 = j + 16 < g1 ? 0xffff : 0;
        float *y0 = y + j / HW * M * HW + j % HW;   /* pixels j .. j + 15 of row 0 */
        float *y1 = m1 ? y + (j + 16) / HW * M * HW + (j + 16) % HW : y0;
        for (int64_t i = 0; i < M; i += 12) {
          const int mr = M - i < 12 ? (int)(M - i) : 12;
          const ctc_bf16x2 *ai = wp + i * wpl + k0 / 2;
          float *c0 = y0 + i * HW, *c1 = y1 + i * HW;
          const int add = k0 > 0;
          ctc_gemm_rows_bf16(1, kp, ai, wpl, 1, mr, bq, c0, c1, HW, 0xffff, m1, add);
        }
      }
    }
  }
}
/* dwt[i, o] for the rows i in [i0, i1) of the unfolded input x and o < O = sum over the pixels
 * p < P of x[i, p] g[o, p]: the transposed weight gradient dW^T[C KH KW, O] of a stride-1
 * convolution, g its output gradient (pixel matrices, packed from the images). The pixels in
 * blocks of up to 512, O in groups of 128 (4 panels of g^T, through 16x16 transposes), the rows
 * in blocks of 96 (x's pairs along the pixels). */
static inline void ctc_conv_wgrad_bf16(const ctc_pix *x, const ctc_pix *g, int64_t O, int64_t P,
                                       float *dwt, int64_t i0, int64_t i1) {
  _Alignas(64) ctc_bf16x2 bp[4 * 256 * 32];
  _Alignas(64) ctc_bf16x2 ap[96 * 256];
  ctc_pix16 hx[32], hg[32];
  int64_t off[96];
  unsigned char tap[96];
  const int64_t nkb = (P + 511) / 512, kb = ((P + nkb - 1) / nkb + 31) / 32 * 32;
  for (int64_t k0 = 0; k0 < P; k0 += kb) {
    const int64_t kc = P - k0 < kb ? P - k0 : kb, kp = kc / 2, kpl = (kp + 15) / 16 * 16;
    ctc_pix_chunks(x, k0, kc, kpl, hx);
    ctc_pix_chunks(g, k0, kc, kpl, hg);
    for (int64_t jg = 0; jg < O; jg += 128) {
      const int64_t nj = O - jg < 128 ? O - jg : 128;
      ctc_pack_pix_cols_bf16(g, hg, jg, nj, kc, kpl, bp);
      for (int64_t r0 = i0; r0 < i1; r0 += 96) {
        const int64_t mc = i1 - r0 < 96 ? i1 - r0 : 96;
        ctc_pix_rows_at(x, r0, mc, off, tap);
        ctc_pack_pix_rows_bf16(x, hx, off, tap, mc, kc, kpl, ap);
        for (int64_t j = jg; j < jg + nj; j += 32) {
          const int nr = jg + nj - j < 32 ? (int)(jg + nj - j) : 32;
          const __mmask16 m0 = ctc_lanes16(nr);
          const __mmask16 m1 = ctc_lanes16(nr - 16);
          const ctc_bf16x2 *bq = bp + (j - jg) / 32 * 8192;
          for (int64_t i = 0; i < mc; i += 12) {
            const int mr = mc - i < 12 ? (int)(mc - i) : 12;
            const ctc_bf16x2 *ai = ap + i * kpl;
            float *c0 = dwt + (r0 + i) * O + j;
            const int add = k0 > 0;
            ctc_gemm_rows_bf16(1, kp, ai, kpl, 1, mr, bq, c0, c0 + 16, O, m0, m1, add);
          }
        }
      }
    }
  }
}
#endif
#if defined(CTC_GEMM_AVX512BF16) && defined(__AMX_TILE__) && defined(__AMX_BF16__) && defined(__linux__) && \
    defined(__x86_64__)
#define CTC_GEMM_AMX_BF16 1
/* Whether this process may use the AMX tiles: Linux (5.16 and later) gives them to a process that
 * asks, arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA), before its first tile instruction.
 * Asked once (the system call itself: the model is compiled without _DEFAULT_SOURCE's syscall()),
 * the answer kept; two threads asking at once ask twice and get the same answer. Refused (a kernel
 * before 5.16, a hypervisor that does not pass the tiles on): the vdpbf16ps kernel. */
static int ctc_amx_granted(void) {
  static int state;   /* 0: not asked yet, 1: granted, 2: refused */
  int s = __atomic_load_n(&state, __ATOMIC_RELAXED);
  if (!s) {
    long r;
    __asm__ volatile("syscall" : "=a"(r) : "0"(158L /* SYS_arch_prctl */), "D"(0x1023L), "S"(18L) : "rcx", "r11",
                     "memory");
    s = r == 0 ? 1 : 2;
    __atomic_store_n(&state, s, __ATOMIC_RELAXED);
  }
  return s == 1;
}
/* The tile configuration of this thread: palette 1, all eight tiles 16 rows of 64 bytes (16 floats,
 * or 16 bf16 pairs). */
static inline void ctc_amx_config(void) {
  _Alignas(64) unsigned char cfg[64] = {1};
  for (int t = 0; t < 8; t++) cfg[16 + 2 * t] = 64, cfg[48 + t] = 16;
  _tile_loadconfig(cfg);
}
/* C's rows [0, mr) and columns [0, nr) (nr <= 16) from a stored 16x16 tile t: = t, or += t if add */
static inline void ctc_amx_out(const float *t, float *c, int64_t ldc, int mr, int nr, int add) {
  const __mmask16 m = ctc_lanes16(nr);
  for (int i = 0; i < mr; i++) {
    __m512 v = _mm512_load_ps(t + 16 * i);
    if (add) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m, c + i * ldc));
    _mm512_mask_storeu_ps(c + i * ldc, m, v);
  }
}
/* Tile T into C (its rows [0, mr), columns [0, nr)): straight into C when it is a whole 16x16 tile
 * of C and replaces it, else through t (the sum C + tile: the same bits whichever way). */
#define CTC_AMX_STORE(T, c, ldc, mr, nr, add, t)  \
  do {                                            \
    if ((mr) >= 16 && (nr) >= 16 && !(add)) {     \
      _tile_stored(T, c, (ldc) * 4);              \
    } else {                                      \
      _tile_stored(T, t, 64);                     \
      ctc_amx_out(t, c, ldc, mr, nr, add);        \
    }                                             \
  } while (0)
/* The 32 x 32 block's tiles (0-3: C's four 16x16 quarters, 0 and 1 its first 16 rows) set to zero. */
static inline void ctc_amx_zero(void) {
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
}
/* The block's tiles += A's rows of pairs (a, rows ars pairs apart; rows past the block's are read, their
 * sums not stored) times the panel bq (pair q of column j at bq[q * 32 + j]) over kq pairs (a multiple
 * of 16): per 16 pairs, A's two 16-row tiles (4, 5) and the panel's two 16-column halves (6, 7). R2,
 * C2 (constants where these are called): whether the block has a second row tile, a second column
 * tile. */
static inline __attribute__((always_inline)) void ctc_amx_acc_bf16(const int R2, const int C2, int64_t kq,
                                                                   const ctc_bf16x2 *a, int64_t ars,
                                                                   const ctc_bf16x2 *bq) {
  for (int64_t q = 0; q < kq; q += 16) {
    _tile_loadd(4, a + q, ars * 4);
    _tile_loadd(6, bq + q * 32, 128);
    if (C2) _tile_loadd(7, bq + q * 32 + 16, 128);
    _tile_dpbf16ps(0, 4, 6);
    if (C2) _tile_dpbf16ps(1, 4, 7);
    if (R2) {
      _tile_loadd(5, a + 16 * ars + q, ars * 4);
      _tile_dpbf16ps(2, 5, 6);
      if (C2) _tile_dpbf16ps(3, 5, 7);
    }
  }
}
/* The block's tiles into C's rows [0, mr) and columns [0, nr) (mr, nr <= 32): = or += if add. */
static inline __attribute__((always_inline)) void ctc_amx_store(const int R2, const int C2, float *c, int64_t ldc,
                                                                int mr, int nr, int add) {
  _Alignas(64) float t[256];
  const int m0 = mr < 16 ? mr : 16, n0 = nr < 16 ? nr : 16;
  CTC_AMX_STORE(0, c, ldc, m0, n0, add, t);
  if (C2) CTC_AMX_STORE(1, c + 16, ldc, m0, nr - 16, add, t);
  if (R2) CTC_AMX_STORE(2, c + 16 * ldc, ldc, mr - 16, n0, add, t);
  if (R2 && C2) CTC_AMX_STORE(3, c + 16 * ldc + 16, ldc, mr - 16, nr - 16, add, t);
}
/* f(R2, C2, ...) (a function of the tiles, R2 and C2 constants in each call) for a block of mr rows
 * and nr columns (at most 32 each) */
#define CTC_AMX_BY_SHAPE(mr, nr, f, ...)                                                  \
  ((mr) > 16 ? ((nr) > 16 ? f(1, 1, __VA_ARGS__) : f(1, 0, __VA_ARGS__))                  \
             : ((nr) > 16 ? f(0, 1, __VA_ARGS__) : f(0, 0, __VA_ARGS__)))
/* The block C[mr <= 32 rows, nr <= 32 columns] (= or += if add) of A's rows of pairs (a, kpl pairs a
 * row) times the panel bq (zero from the block's pairs to kpl) over kpl pairs. Each quarter sums the
 * block's k from zero in the same order whatever its size, so the bits do not depend on how the
 * threads split C. */
static inline __attribute__((always_inline)) void ctc_amx_block_bf16(const int R2, const int C2, int64_t kpl,
                                                                     const ctc_bf16x2 *a, const ctc_bf16x2 *bq,
                                                                     float *c, int64_t ldc, int mr, int nr, int add) {
  ctc_amx_zero();
  ctc_amx_acc_bf16(R2, C2, kpl, a, kpl, bq);
  ctc_amx_store(R2, C2, c, ldc, mr, nr, add);
}
/* A transposed (A[k, i] at a[k * lda + i]): op(A)'s block [i0, i0 + mc) x [k0, k0 + kc) as rows of
 * bf16 pairs along k, as ctc_pack_a_bf16 packs an A not transposed: ap[i * kpl + q], zeros from kc
 * to 2 kpl and in the rows from mc to the next multiple of 16. */
static void ctc_pack_at_rows_bf16(const float *a, int64_t lda, int64_t i0, int64_t mc, int64_t k0, int64_t kc,
                                  int64_t kpl, ctc_bf16x2 *restrict ap) {
  _Alignas(64) ctc_bf16x2 t[16 * 16];
  for (int64_t i = 0; i < mc; i += 16) {
    const __mmask16 m = ctc_lanes16(mc - i);
    for (int64_t q0 = 0; q0 < kpl; q0 += 16) {
      for (int q = 0; q < 16; q++) {   /* t[q]: the pairs (A[k, i + r], A[k + 1, i + r]), r < 16 */
        const int64_t k = 2 * (q0 + q);
        const __m512 x = k < kc ? _mm512_maskz_loadu_ps(m, a + (k0 + k) * lda + i0 + i) : _mm512_setzero_ps();
        const __m512 y = k + 1 < kc ? _mm512_maskz_loadu_ps(m, a + (k0 + k + 1) * lda + i0 + i) : _mm512_setzero_ps();
        _mm512_store_si512(t + q * 16, ctc_bf16_pairs_cols(x, y));
      }
      ctc_transpose16_f32((const float *)t, 16, (float *)(ap + i * kpl + q0), kpl);
    }
  }
}
/* C[M,N] = op(A) op(B), or C += if acc, K > 0, as ctc_gemm_avx512bf16 (the same operands, packed the
 * same way) on the AMX tiles (ctc_amx_granted first): K in blocks of up to 512 (256 pairs, a panel), M of
 * 384 rows (op(A)'s block packed once as rows of pairs), op(B)'s panels of 32 columns (zero from the
 * block's pairs to the tiles' 16), C in blocks of 32 x 32. Serial; 128 KiB of panels and 384 KiB of
 * op(A) on the stack. */
static void ctc_gemm_amx_bf16(int ta, int tb, int acc, int64_t M, int64_t N, int64_t K, const float *a, int64_t lda,
                              const float *b, int64_t ldb, float *c, int64_t ldc) {
  _Alignas(64) ctc_bf16x2 bp[4 * 256 * 32];   /* 4 panels of 256 pairs */
  _Alignas(64) ctc_bf16x2 ap[384 * 256];
  ctc_amx_config();
  const int64_t nkb = (K + 511) / 512, kb = ((K + nkb - 1) / nkb + 31) / 32 * 32;
  for (int64_t k0 = 0; k0 < K; k0 += kb) {
    const int64_t kc = K - k0 < kb ? K - k0 : kb, kp = (kc + 1) / 2, kpl = (kp + 15) / 16 * 16;
    const size_t zpad = sizeof(ctc_bf16x2) * (size_t)((kpl - kp) * 32);   /* a panel's pairs kp .. kpl */
    const int add = acc || k0 > 0;
    for (int64_t i0 = 0; i0 < M; i0 += 384) {
      const int64_t mc = M - i0 < 384 ? M - i0 : 384;
      if (ta) ctc_pack_at_rows_bf16(a, lda, i0, mc, k0, kc, kpl, ap);
      else ctc_pack_a_bf16(0, a, lda, i0, mc, k0, kc, kpl, 0, ap);
      for (int64_t j0 = 0; j0 < N; j0 += 32) {
        const int nr = N - j0 < 32 ? (int)(N - j0) : 32;
        ctc_bf16x2 *restrict bq = bp + j0 / 32 % 4 * 8192;   /* this panel */
        if (tb) {
          ctc_pack_bt_bf16(b, ldb, k0, kc, j0, nr, bq);
          memset(bq + kp * 32, 0, zpad);
        } else if (j0 % 128 == 0) {
          const int64_t n = N - j0 < 128 ? N - j0 : 128;
          ctc_pack_bn_bf16(b, ldb, k0, kc, j0, n, bp);
          for (int64_t p = 0; p < (n + 31) / 32; p++) memset(bp + p * 8192 + kp * 32, 0, zpad);
        }
        for (int64_t i = 0; i < mc; i += 32) {
          const int mr = mc - i < 32 ? (int)(mc - i) : 32;
          const ctc_bf16x2 *ai = ap + i * kpl;
          float *ci = c + (i0 + i) * ldc + j0;
          CTC_AMX_BY_SHAPE(mr, nr, ctc_amx_block_bf16, kpl, ai, bq, ci, ldc, mr, nr, add);
        }
      }
    }
  }
  _tile_release();
}
#endif
#ifdef CTC_GEMM_AVX512BF16
#define CTC_CONV_BAT_BF16 1   /* ctc_conv_bat_bf16 is in (linalg_c.c's conv_bat) */
/* ---- a stride-1 convolution of bf16 values on small images: a GEMM per output position over the
 * batch (linalg_c.c's conv_bat), computing only the taps inside the image. Images in panels of 32
 * (nb of them, zeros past N), channels in pairs (Cq of them, a zero past an odd C). */
/* The input position-major, channel pairs of 32 images: xb[((pos * nb + b) * Cq + q) * 32 + j] =
 * (x[n, 2q, pos], x[n, 2q + 1, pos]), n = 32 b + j, for the pairs q in [q0, q1); HW a multiple of 16. */
static inline void ctc_bat_in_bf16(const float *x, int64_t N, int64_t C, int64_t HW, int64_t q0, int64_t q1,
                                   ctc_bf16x2 *xb) {
  const int64_t nb = (N + 31) / 32, Cq = (C + 1) / 2;
  _Alignas(64) ctc_bf16x2 t[16 * 16];
  for (int64_t q = q0; q < q1; q++)
    for (int64_t n0 = 0; n0 < 32 * nb; n0 += 16)
      for (int64_t p0 = 0; p0 < HW; p0 += 16) {
        for (int64_t l = 0; l < 16; l++) {   /* t[l][i]: image n0 + l at position p0 + i */
          __m512 lo = _mm512_setzero_ps(), hi = _mm512_setzero_ps();
          if (n0 + l < N) {
            const float *xr = x + ((n0 + l) * C + 2 * q) * HW + p0;
            lo = _mm512_loadu_ps(xr);
            if (2 * q + 1 < C) hi = _mm512_loadu_ps(xr + HW);
          }
          _mm512_store_si512(t + 16 * l, ctc_bf16_pairs_cols(lo, hi));
        }
        ctc_transpose16_f32((const float *)t, 16, (float *)(xb + ((p0 * nb + n0 / 32) * Cq + q) * 32 + n0 % 32),
                            nb * Cq * 32);
      }
}
/* Each tap's weights as A: wt[(t * M + m) * wq + q] = (A[m, 2q, t], A[m, 2q + 1, t]) for the rows m in
 * [m0, m1) (zeros from Cq to wq), A = w[M, C, KK] (flip 0), or w[C, M, KK] with the taps reversed (flip
 * 1: the input gradient, as ctc_pack_w_bf16's). */
static inline void ctc_bat_w_bf16(const float *w, int flip, int64_t M, int64_t C, int64_t KK, int64_t wq, int64_t m0,
                                  int64_t m1, ctc_bf16x2 *wt) {
  const int64_t cs = flip ? M * KK : KK;   /* from channel c to c + 1 */
  for (int64_t m = m0; m < m1; m++)   /* (w's row of m read from L1 for each tap) */
    for (int64_t t = 0; t < KK; t++) {
      const uint32_t *wm = (const uint32_t *)(flip ? w + m * KK + KK - 1 - t : w + m * C * KK + t);
      ctc_bf16x2 *restrict r = wt + (t * M + m) * wq;
      int64_t q = 0;
      for (; 2 * q + 1 < C; q++) r[q] = wm[2 * q * cs] >> 16 | (wm[(2 * q + 1) * cs] & 0xffff0000u);
      if (2 * q < C) r[q] = wm[2 * q * cs] >> 16, q++;
      for (; q < wq; q++) r[q] = 0;
    }
}
#ifdef CTC_GEMM_AMX_BF16
/* ctc_conv_bat_bf16 on the AMX tiles (whole tiles of 16 channel pairs: Cq % 16 == 0): an output
 * position's 32 images and 32 of its channels are one block of four tiles, summed over all the taps
 * inside the image before C is stored once (ctc_amx_acc_bf16: the tap's weights' rows of pairs times
 * the panel of the images at the tap's input position). */
static void ctc_conv_bat_amx_bf16(const ctc_bf16x2 *wt, int64_t wq, const ctc_bf16x2 *xb, int64_t nb, int64_t Cq,
                                  int64_t M, int64_t H, int64_t W, int64_t OW, int64_t st, int64_t KH, int64_t KW,
                                  int64_t ph, int64_t pw, float *yb, int64_t r0, int64_t r1) {
  int64_t tap[64], at[64];   /* the taps inside the image at this position, and their input positions */
  ctc_amx_config();
  for (int64_t pos = r0; pos < r1; pos++) {
    const int64_t oh = pos / OW, ow = pos % OW;
    int nt = 0;
    for (int64_t kh = 0; kh < KH; kh++)
      for (int64_t kw = 0; kw < KW; kw++) {
        const int64_t ih = st * oh + kh - ph, iw = st * ow + kw - pw;
        if (ih >= 0 && ih < H && iw >= 0 && iw < W) tap[nt] = kh * KW + kw, at[nt++] = ih * W + iw;
      }
    for (int64_t b = 0; b < nb; b++) {
      float *c = yb + (pos * nb + b) * M * 32;
      for (int64_t i = 0; i < M; i += 32) {
        const int mr = M - i < 32 ? (int)(M - i) : 32;
        ctc_amx_zero();
        for (int t = 0; t < nt; t++) {
          const ctc_bf16x2 *a = wt + (tap[t] * M + i) * wq, *bq = xb + (at[t] * nb + b) * Cq * 32;
          CTC_AMX_BY_SHAPE(mr, 32, ctc_amx_acc_bf16, Cq, a, wq, bq);
        }
        CTC_AMX_BY_SHAPE(mr, 32, ctc_amx_store, c + i * 32, 32, mr, 32, 0);
      }
    }
  }
  _tile_release();
}
#endif
/* yb[((pos * nb + b) * M + m) * 32 + j] (image 32 b + j) for the positions pos in [r0, r1) of an output
 * OW wide: the sum over the taps (kh, kw) inside the H x W input (pixel (st oh + kh - ph, st ow + kw -
 * pw), stride st) of tap's weights (wt, ctc_bat_w_bf16) times xb's panel there (ctc_bat_in_bf16), tap
 * after tap. */
static inline void ctc_conv_bat_bf16(const ctc_bf16x2 *wt, int64_t wq, const ctc_bf16x2 *xb, int64_t N, int64_t Cq,
                                     int64_t M, int64_t H, int64_t W, int64_t OW, int64_t st, int64_t KH, int64_t KW,
                                     int64_t ph, int64_t pw, float *yb, int64_t r0, int64_t r1) {
  const int64_t nb = (N + 31) / 32;
#ifdef CTC_GEMM_AMX_BF16
  if (Cq % 16 == 0 && ctc_amx_granted()) {
    ctc_conv_bat_amx_bf16(wt, wq, xb, nb, Cq, M, H, W, OW, st, KH, KW, ph, pw, yb, r0, r1);
    return;
  }
#endif
  for (int64_t pos = r0; pos < r1; pos++) {
    const int64_t oh = pos / OW, ow = pos % OW;
    for (int64_t b = 0; b < nb; b++) {
      float *c = yb + (pos * nb + b) * M * 32;
      int add = 0;
      for (int64_t kh = 0; kh < KH; kh++) {
        const int64_t ih = st * oh + kh - ph;
        if (ih < 0 || ih >= H) continue;
        for (int64_t kw = 0; kw < KW; kw++) {
          const int64_t iw = st * ow + kw - pw;
          if (iw < 0 || iw >= W) continue;
          const ctc_bf16x2 *bq = xb + ((ih * W + iw) * nb + b) * Cq * 32, *a = wt + (kh * KW + kw) * M * wq;
          for (int64_t i = 0; i < M; i += 12) {
            const int mr = M - i < 12 ? (int)(M - i) : 12;
            ctc_gemm_rows_bf16(1, Cq, a + i * wq, wq, 1, mr, bq, c + i * 32, c + i * 32 + 16, 32, 0xffff, 0xffff, add);
          }
          add = 1;
        }
      }
    }
  }
}
/* y[n, m, pos] from yb (ctc_conv_bat_bf16's) for the channels m in [m0, m1) */
static inline void ctc_bat_out_bf16(const float *yb, int64_t N, int64_t M, int64_t HW, int64_t m0, int64_t m1,
                                    float *y) {
  const int64_t nb = (N + 31) / 32;
  _Alignas(64) float t[16 * 16];
  for (int64_t m = m0; m < m1; m++)
    for (int64_t n0 = 0; n0 < N; n0 += 16)
      for (int64_t p0 = 0; p0 < HW; p0 += 16) {
        const float *src = yb + ((p0 * nb + n0 / 32) * M + m) * 32 + n0 % 32;
        if (N - n0 >= 16) {
          ctc_transpose16_f32(src, nb * M * 32, y + (n0 * M + m) * HW + p0, M * HW);
          continue;
        }
        ctc_transpose16_f32(src, nb * M * 32, t, 16);
        for (int64_t l = 0; n0 + l < N; l++) memcpy(y + ((n0 + l) * M + m) * HW + p0, t + 16 * l, 64);
      }
}
/* The weight gradient's operands: a pixel matrix's rows (channels) with bf16 pairs along the images,
 * by position: xa[(c * HW + pos) * nq + j] = (x[2j, c, pos], x[2j + 1, c, pos]) (nq = nb * 16 pairs,
 * zeros past N), for the channels c in [c0, c1); HW a multiple of 16. */
static inline void ctc_bat_rows_bf16(const float *x, int64_t N, int64_t C, int64_t HW, int64_t c0, int64_t c1,
                                     ctc_bf16x2 *xa) {
  const int64_t nq = (N + 31) / 32 * 16;
  _Alignas(64) ctc_bf16x2 t[16 * 16];
  for (int64_t c = c0; c < c1; c++)
    for (int64_t j0 = 0; j0 < nq; j0 += 16)
      for (int64_t p0 = 0; p0 < HW; p0 += 16) {
        for (int64_t l = 0; l < 16; l++) {   /* t[l][i]: images 2 (j0 + l) and the next at position p0 + i */
          const int64_t n = 2 * (j0 + l);
          const __m512 lo = n < N ? _mm512_loadu_ps(x + (n * C + c) * HW + p0) : _mm512_setzero_ps();
          const __m512 hi = n + 1 < N ? _mm512_loadu_ps(x + ((n + 1) * C + c) * HW + p0) : _mm512_setzero_ps();
          _mm512_store_si512(t + 16 * l, ctc_bf16_pairs_cols(lo, hi));
        }
        ctc_transpose16_f32((const float *)t, 16, (float *)(xa + (c * HW + p0) * nq + j0), nq);
      }
}
/* ga's rows (ctc_bat_rows_bf16's, O of them) as op(B)'s panels of 32 columns for the positions
 * [p0, p1): gb[((ob * HW + pos) * nq + j) * 32 + o - 32 ob] (zeros past O). */
static inline void ctc_bat_cols_bf16(const ctc_bf16x2 *ga, int64_t O, int64_t HW, int64_t nq, int64_t p0, int64_t p1,
                                     ctc_bf16x2 *gb) {
  _Alignas(64) ctc_bf16x2 t[16 * 16];
  for (int64_t pos = p0; pos < p1; pos++)
    for (int64_t o0 = 0; o0 < (O + 31) / 32 * 32; o0 += 16)
      for (int64_t j0 = 0; j0 < nq; j0 += 16) {
        ctc_bf16x2 *dst = gb + ((o0 / 32 * HW + pos) * nq + j0) * 32 + o0 % 32;
        if (O - o0 >= 16) {
          ctc_transpose16_f32((const float *)(ga + (o0 * HW + pos) * nq + j0), HW * nq, (float *)dst, 32);
          continue;
        }
        for (int64_t l = 0; l < 16; l++)   /* t[l]: row o0 + l of ga, zeros past O */
          if (o0 + l < O) memcpy(t + 16 * l, ga + ((o0 + l) * HW + pos) * nq + j0, 64);
          else memset(t + 16 * l, 0, 64);
        ctc_transpose16_f32((const float *)t, 16, (float *)dst, 32);
      }
}
/* The channels of x a call of ctc_conv_bat_wgrad_bf16 takes in the generated loops: the rows of a
 * block of AMX tiles (12, 12 and 8 rows of vdpbf16ps tiles where Linux refuses the tiles), else one
 * 12-row tile. */
#ifdef CTC_GEMM_AMX_BF16
#define CTC_BAT_WGRAD_ROWS 32
#else
#define CTC_BAT_WGRAD_ROWS 12
#endif
#ifdef CTC_GEMM_AMX_BF16
/* ctc_conv_bat_wgrad_bf16 on the AMX tiles: 32 channels of x by 32 of g for a tap are one block of
 * four tiles, summed over all the output rows before C is stored once; a row's run of positions is
 * (ow1 - ow0) nq pairs (nq a multiple of 16). */
static void ctc_conv_bat_wgrad_amx_bf16(const ctc_bf16x2 *xa, const ctc_bf16x2 *gb, int64_t O, int64_t H, int64_t W,
                                        int64_t KH, int64_t KW, int64_t ph, int64_t pw, int64_t nq, float *dwt,
                                        int64_t c0, int64_t c1) {
  const int64_t HW = H * W, KK = KH * KW, ldc = KK * O;
  ctc_amx_config();
  for (int64_t kh = 0; kh < KH; kh++)
    for (int64_t kw = 0; kw < KW; kw++) {
      const int64_t oh0 = ph - kh > 0 ? ph - kh : 0, oh1 = H + ph - kh < H ? H + ph - kh : H;
      const int64_t ow0 = pw - kw > 0 ? pw - kw : 0, ow1 = W + pw - kw < W ? W + pw - kw : W;
      for (int64_t ob = 0; ob < O; ob += 32) {
        const int nr = O - ob < 32 ? (int)(O - ob) : 32;
        for (int64_t c = c0; c < c1; c += 32) {
          const int mr = c1 - c < 32 ? (int)(c1 - c) : 32;
          float *cp = dwt + (c * KK + kh * KW + kw) * O + ob;
          if (oh0 >= oh1 || ow0 >= ow1) {   /* the tap is outside at every position */
            for (int i = 0; i < mr; i++) memset(cp + i * ldc, 0, sizeof(float) * (size_t)nr);
            continue;
          }
          ctc_amx_zero();
          for (int64_t oh = oh0; oh < oh1; oh++) {
            const ctc_bf16x2 *a = xa + (c * HW + (oh + kh - ph) * W + ow0 + kw - pw) * nq;
            const ctc_bf16x2 *bq = gb + ((ob / 32 * HW) + oh * W + ow0) * nq * 32;
            CTC_AMX_BY_SHAPE(mr, nr, ctc_amx_acc_bf16, (ow1 - ow0) * nq, a, HW * nq, bq);
          }
          CTC_AMX_BY_SHAPE(mr, nr, ctc_amx_store, cp, ldc, mr, nr, 0);
        }
      }
    }
  _tile_release();
}
#endif
/* dwt[(c * KH * KW + t) * O + o] (the transposed weight gradient, as ctc_conv_wgrad_bf16's) for the
 * channels c in [c0, c1): for each tap t = (kh, kw), the sum over the output positions whose tap is
 * inside the image and the images of x (xa, ctc_bat_rows_bf16) at the tap's input position times the
 * output gradient g (gb, ctc_bat_cols_bf16) at the output position; an output row's run of positions
 * is one GEMM call over the pairs of its positions' images, the rows after the first added in C. */
static inline void ctc_conv_bat_wgrad_bf16(const ctc_bf16x2 *xa, const ctc_bf16x2 *gb, int64_t O, int64_t H,
                                           int64_t W, int64_t KH, int64_t KW, int64_t ph, int64_t pw, int64_t nq,
                                           float *dwt, int64_t c0, int64_t c1) {
#ifdef CTC_GEMM_AMX_BF16
  if (ctc_amx_granted()) {
    ctc_conv_bat_wgrad_amx_bf16(xa, gb, O, H, W, KH, KW, ph, pw, nq, dwt, c0, c1);
    return;
  }
#endif
  const int64_t HW = H * W, KK = KH * KW, ldc = KK * O;
  for (int64_t kh = 0; kh < KH; kh++)
    for (int64_t kw = 0; kw < KW; kw++) {
      const int64_t oh0 = ph - kh > 0 ? ph - kh : 0, oh1 = H + ph - kh < H ? H + ph - kh : H;
      const int64_t ow0 = pw - kw > 0 ? pw - kw : 0, ow1 = W + pw - kw < W ? W + pw - kw : W;
      for (int64_t ob = 0; ob < O; ob += 32) {
        const int nr = O - ob < 32 ? (int)(O - ob) : 32;
        const __mmask16 m0 = ctc_lanes16(nr), m1 = ctc_lanes16(nr - 16);
        for (int64_t c = c0; c < c1; c += 12) {
          const int mr = c1 - c < 12 ? (int)(c1 - c) : 12;
          float *cp = dwt + (c * KK + kh * KW + kw) * O + ob;
          if (oh0 >= oh1 || ow0 >= ow1) {   /* the tap is outside at every position */
            for (int i = 0; i < mr; i++) memset(cp + i * ldc, 0, sizeof(float) * (size_t)nr);
            continue;
          }
          for (int64_t oh = oh0; oh < oh1; oh++) {
            const ctc_bf16x2 *a = xa + (c * HW + (oh + kh - ph) * W + ow0 + kw - pw) * nq;
            const ctc_bf16x2 *bq = gb + ((ob / 32 * HW) + oh * W + ow0) * nq * 32;
            ctc_gemm_rows_bf16(1, (ow1 - ow0) * nq, a, HW * nq, 1, mr, bq, cp, cp + 16, ldc, m0, m1, oh > oh0);
          }
        }
      }
    }
}
#endif

#if defined(__AVX2__) && defined(__FMA__)
#ifndef CTC_GEMM_AVX512_f32
#include <immintrin.h>
#define CTC_GEMM_AVX2_f32 1
#define CTC_GEMM_X86_f32 1   /* (as the AVX-512 kernel's) */
#define ctc_gemm_x86_f32 ctc_gemm_avx2_f32
#define CTC_GEMM_PK_f32 1   /* (as the AVX-512 kernel's) */
#define ctc_gemm_own_pk_f32 ctc_gemm_avx2_pk_f32
#define ctc_gemm_own_pack_f32 ctc_gemm_pack_avx2_f32
#define CTC_GEMM_X86_MIN_ROWS 2   /* 2-5 rows: 1.0-2x OpenBLAS's Haswell kernels (Zen 4) */
#define CTC_GEMM_X86_MIN_COLS 16
/* 16 columns are 2 vectors of 8; op(A) broadcast (vbroadcastss) */
#define CTC_VW_avx2 8
#define CTC_NV_avx2 2
#define CTC_NP_avx2 4   /* panels of op(B) packed together (ctc_pack_bn_avx2) */
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
#ifndef CTC_GEMM_UNUSED   /* (the GEMM itself, which an aarch64 build with OpenBLAS does not call:
                           * it keeps the tiles for Winograd's products) */
#define CTC_GEMM_UNUSED __attribute__((unused))
#endif
/* B not transposed, columns [j0, j0 + nj) (nj <= 16 CTC_NP_avx2) as panels bp[p][k][16] = B[k0 + k,
 * j0 + 16 p + j], kb floats apart, for k < kc; zero past nj. Each row is read in one pass of up to
 * 16 CTC_NP_avx2 floats: a panel at a time read a 32x8192x288 GEMM's rows 16 floats apart (AVX2, Zen 5:
 * 81 GFLOP/s, OpenBLAS 112). */
static CTC_GEMM_UNUSED void ctc_pack_bn_avx2(const float *b, int64_t ldb, int64_t k0, int64_t kc, int64_t j0,
                                           int64_t nj, int64_t kb, float *restrict bp) {
  if (nj == 16 * CTC_NP_avx2) {   /* loops the compiler vectorises */
    for (int64_t k = 0; k < kc; k++)
#pragma GCC unroll 4
      for (int p = 0; p < CTC_NP_avx2; p++)
        for (int j = 0; j < 16; j++) bp[p * kb * 16 + k * 16 + j] = b[(k0 + k) * ldb + j0 + p * 16 + j];
    return;
  }
  for (int64_t k = 0; k < kc; k++)   /* fewer columns: whole panels vectorised, zeros past nj */
    for (int64_t p = 0; p * 16 < nj; p++) {
      const float *bk = b + (k0 + k) * ldb + j0 + p * 16;
      float *d = bp + p * kb * 16 + k * 16;
      if (nj - p * 16 >= 16)
        for (int j = 0; j < 16; j++) d[j] = bk[j];
      else
        for (int j = 0; j < 16; j++) d[j] = j < nj - p * 16 ? bk[j] : 0;
    }
}
/* B transposed: bp[k][16] = B[j0 + j, k0 + k] for k < kc, j < nr; zero for j >= nr. */
static void ctc_pack_b16_avx2(const float *b, int64_t ldb, int64_t k0, int64_t kc, int64_t j0, int nr, float *restrict bp) {
  const int64_t kt = nr == 16 ? ctc_pack_bt16_avx2(b + j0 * ldb + k0, ldb, kc, bp) : 0;
  for (int j = 0; j < 16; j++)
    for (int64_t k = kt; k < kc; k++) bp[k * 16 + j] = j < nr ? b[(j0 + j) * ldb + k0 + k] : 0;
}
/* One k of a tile: acc[i] += A[i, k] bp[k] for its R rows (ai[i]: row i of A, k at ai[i] + k * aks). */
static inline __attribute__((always_inline)) void ctc_gemm_k16_avx2(const int R, int64_t k, const float *const *ai,
                                                                  int64_t aks, const float *restrict bp,
                                                                  ctc_vf_avx2 acc[6][CTC_NV_avx2]) {
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
/* The tile C[mr, nr <= 16 columns] = (C +, if add) sum over k < kc of A[i, k] bp[k]: A[i, k] at
 * a[i * ars + k * aks]. R (6, 4, 2 or 1) rows are computed: rows mr..R-1 repeat row 0 and are not
 * stored. The registers sum S k at a time, each such partial sum added to C in memory (blocked
 * summation); R and S are constants where it is called. S is 128 in the GEMM (a length-K sum's
 * error below OpenBLAS's: docs/speed.md), 32 in the convolutions and Winograd's sums over tiles
 * (which keep their blocks of 32: their thread and block invariance). A whole block's k loop has a
 * constant count, unrolled by 4 (the same sums; 0-7% faster on AVX2 on its own). */
static inline __attribute__((always_inline)) void ctc_gemm_tile16_avx2(const int R, const int S, int64_t kc,
                                                                     const float *a, int64_t ars, int64_t aks,
                                                                     int mr, const float *restrict bp, float *c,
                                                                     int64_t ldc, int nr, int add) {
  const float *ai[6];
#pragma GCC unroll 6
  for (int i = 0; i < R; i++) ai[i] = a + (i < mr ? i : 0) * ars;
  for (int64_t k0 = 0; k0 < kc; k0 += S) {
    const int64_t k1 = kc - k0 < S ? kc : k0 + S;
    ctc_vf_avx2 acc[6][CTC_NV_avx2];
#pragma GCC unroll 6
    for (int i = 0; i < R; i++)
#pragma GCC unroll 4
      for (int v = 0; v < CTC_NV_avx2; v++) acc[i][v] = ctc_vzero_avx2();
    if (k1 - k0 == S) {
#pragma GCC unroll 4
      for (int64_t k = k0; k < k0 + S; k++) ctc_gemm_k16_avx2(R, k, ai, aks, bp, acc);
    } else {
      for (int64_t k = k0; k < k1; k++) ctc_gemm_k16_avx2(R, k, ai, aks, bp, acc);
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
/* K in equal blocks of at most 512 (256 if ta), multiples of 16 but the last: their size */
static inline int64_t ctc_gemm_kb_avx2(int ta, int64_t K) {
  const int64_t kmax = ta ? 256 : 512, nkb = (K + kmax - 1) / kmax;
  return ((K + nkb - 1) / nkb + 15) / 16 * 16;
}
/* op(B) [K, N] packed whole, as ctc_gemm_avx2_pk_f32 reads it (a time loop's weights, packed once
 * before the loop: kernels/prepack.c): from pk + k0 * ldp, K block [k0, k0 + kc)'s 16-column panels
 * (the blocks of a GEMM with this ta), kc * 16 floats apart, zero past N (ldp: N rounded up to 32). */
static inline void ctc_gemm_pack_avx2_f32(int ta, int tb, int64_t N, int64_t K, const float *b, int64_t ldb,
                                        float *pk, int64_t ldp) {
  const int64_t kb = K > 0 ? ctc_gemm_kb_avx2(ta, K) : 1, nw = tb ? 16 : 16 * CTC_NP_avx2;
  for (int64_t k0 = 0; k0 < K; k0 += kb) {
    const int64_t kc = K - k0 < kb ? K - k0 : kb;
    for (int64_t j0 = 0; j0 < N; j0 += nw) {
      const int64_t nj = N - j0 < nw ? N - j0 : nw;
      float *d = pk + k0 * ldp + j0 / 16 * kc * 16;
      if (tb) ctc_pack_b16_avx2(b, ldb, k0, kc, j0, (int)nj, d);
      else ctc_pack_bn_avx2(b, ldb, k0, kc, j0, nj, kc, d);
    }
  }
}
/* C[M,N] = op(A) op(B), or C += if acc (as ctc_gemm_f32); serial. The AVX-512 GEMM's blocking
 * with 16-column panels of op(B) (CTC_NP_avx2 of them packed together when B is not transposed: 32 KiB
 * on the stack each) and 6x16 tiles of C. A transposed A
 * (a weight gradient's dY^T) is packed too, 6 rows at a time in blocks of 384 (384 KiB): its rows are often 4 KiB
 * apart, and a tile reading 6 floats from each of 512 such rows evicts them from L1 (one cache
 * set) before the next tile reads the neighbouring floats (1024x256x1024: 35 -> 47 GFLOP/s).
 * With pk, op(B)'s panels come packed (ctc_gemm_pack_avx2_f32 of all its ldp columns; C's column 0
 * is op(B)'s column jp, a multiple of 16) and B is not read: the same sums in the same order. */
static CTC_GEMM_UNUSED void ctc_gemm_avx2_pk_f32(int ta, int tb, int acc, int64_t M, int64_t N, int64_t K,
                                              const float *a, int64_t lda, const float *b, int64_t ldb,
                                              const float *pk, int64_t ldp, int64_t jp, float *c, int64_t ldc) {
  _Alignas(64) float bp[CTC_NP_avx2 * 512 * 16];
  _Alignas(64) float ap[384 * 256];
  if (K <= 0) {
    for (int64_t i = 0; i < M && !acc; i++) memset(c + i * ldc, 0, sizeof(float) * (size_t)N);
    return;
  }
  /* K in equal blocks of at most 512 (256 if ta; multiples of 16 but the last), M of 384 (with ta,
   * blocks of 96 rows packed op(B) 4 times as often: the gpt train step 1.5% slower with AVX2 on Zen 4) */
  const int64_t mb = 384, kb = ctc_gemm_kb_avx2(ta, K);
  /* A^T packed (ap), but not with at most 64 columns of C and 64 k: its packing then cost as much as
   * the few panels that reuse it saved, and a tile reads A^T's k rows where they lie (AVX2, Zen 4:
   * attention's p^T g and ds^T q, M <= 128, N = K = 32, 62 -> 75-80 GFLOP/s; 1024 x 64 x 64 from
   * rows 4 KiB apart 59 -> 67; at 128 columns packing is as fast or faster) */
  const int pa = ta && !(K <= 64 && N <= 64);
  const int64_t ars = pa ? 6 * kb : ta ? 1 : lda, aks = pa ? 6 : ta ? lda : 1;   /* (pa: row i of a tile at ap + i) */
  /* the rows whose packed op(B) panels are shared: the packed A's block if ta, else all of them (each
   * column group of op(B) packed once per K block, as the AVX-512 GEMM does) */
  const int64_t mo = ta ? mb : M;
  for (int64_t k0 = 0; k0 < K; k0 += kb) {
    const int64_t kc = K - k0 < kb ? K - k0 : kb;
    for (int64_t i1 = 0; i1 < M; i1 += mo) {
      const int64_t m1 = M - i1 < mo ? M - i1 : mo;
      if (pa) ctc_pack_at_f32(6, a + k0 * lda + i1, lda, kc, m1, kb, ap);
      const int64_t nw = tb ? 16 : 16 * CTC_NP_avx2;   /* the columns packed together */
      for (int64_t j0 = 0; j0 < N; j0 += nw) {
        const int64_t nj = N - j0 < nw ? N - j0 : nw;
        if (!pk && tb) ctc_pack_b16_avx2(b, ldb, k0, kc, j0, (int)nj, bp);
        else if (!pk) ctc_pack_bn_avx2(b, ldb, k0, kc, j0, nj, kb, bp);
        for (int64_t i0 = i1; i0 < i1 + m1; i0 += mb) {
          const int64_t mc = i1 + m1 - i0 < mb ? i1 + m1 - i0 : mb;
          for (int64_t p = 0; p * 16 < nj; p++) {
            const int nr = nj - p * 16 < 16 ? (int)(nj - p * 16) : 16;
            const float *bpp = pk ? pk + k0 * ldp + ((jp + j0) / 16 + p) * kc * 16 : bp + p * kb * 16;
            for (int64_t i = i0; i < i0 + mc; i += 6) {
              const int mr = i0 + mc - i < 6 ? (int)(i0 + mc - i) : 6;
              const float *ai = pa ? ap + (i - i1) / 6 * ars : ta ? a + k0 * lda + i : a + i * ars + k0;
              const int64_t rs = pa ? 1 : ars;
              float *ci = c + i * ldc + j0 + p * 16;
              const int add = acc || k0 > 0;
              if (mr > 4) ctc_gemm_tile16_avx2(6, 128, kc, ai, rs, aks, mr, bpp, ci, ldc, nr, add);
              else if (mr > 2) ctc_gemm_tile16_avx2(4, 128, kc, ai, rs, aks, mr, bpp, ci, ldc, nr, add);   /* a last, shorter tile */
              else if (mr == 2) ctc_gemm_tile16_avx2(2, 128, kc, ai, rs, aks, mr, bpp, ci, ldc, nr, add);
              else ctc_gemm_tile16_avx2(1, 128, kc, ai, rs, aks, mr, bpp, ci, ldc, nr, add);
            }
          }
        }
      }
    }
  }
}
static CTC_GEMM_UNUSED void ctc_gemm_avx2_f32(int ta, int tb, int acc, int64_t M, int64_t N, int64_t K, const float *a,
                                           int64_t lda, const float *b, int64_t ldb, float *c, int64_t ldc) {
  ctc_gemm_avx2_pk_f32(ta, tb, acc, M, N, K, a, lda, b, ldb, NULL, 0, 0, c, ldc);
}
/* ---- stride-1 f32 convolutions as implicit GEMMs on AVX2 (the tiles of ctc_gemm_avx2_f32): the
 * AVX-512 ones' structure with 16-pixel panels (never two images: H * W is a multiple of 16) */
#define CTC_CONV_PIX_f32 1   /* ctc_conv_pix_f32 is in (linalg_c.c's conv_implicit) */
/* The lanes of mask bits m (8 of them) as a vmaskmovps mask */
static inline __m256i ctc_mask8_avx2(unsigned m) {
  const __m256i bit = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
  return _mm256_cmpeq_epi32(_mm256_and_si256(_mm256_set1_epi32((int)m), bit), bit);
}
/* B's panel [kc][16] of pixels [p0, p0 + 16) over the rows at off/tap (a masked load where a tap
 * falls in the padding: masked lanes are not read) */
static inline void ctc_pack_bpix16_avx2(const ctc_pix *s, const int64_t *off, const unsigned char *tap, int64_t kc,
                                        int64_t p0, float *restrict bp) {
  ctc_pix16 h;
  ctc_pix16_at(s, p0, &h);
  for (int64_t k = 0; k < kc; k++) {
    const unsigned m = s->KH ? h.tap[tap[k]] : 0xffffu;
    const float *x = h.x + off[k];
    if (m == 0xffffu) {
      _mm256_store_ps(bp + k * 16, _mm256_loadu_ps(x));
      _mm256_store_ps(bp + k * 16 + 8, _mm256_loadu_ps(x + 8));
    } else {
      _mm256_store_ps(bp + k * 16, _mm256_maskload_ps(x, ctc_mask8_avx2(m & 0xffu)));
      _mm256_store_ps(bp + k * 16 + 8, _mm256_maskload_ps(x + 8, ctc_mask8_avx2(m >> 8)));
    }
  }
}
/* y[n, i, oh, ow] for i < M and the pixels p in [p0, p1) (multiples of 16) = sum over k < K of
 * a[i * K + k] s[k, p], y [N, M, H, W]: as the AVX-512 ctc_conv_pix_f32, with ctc_gemm_avx2_f32's
 * K blocks and 6x16 tiles, a panel of 16 pixels packed at a time. */
static inline void ctc_conv_pix_f32(const float *a, const ctc_pix *s, int64_t M, int64_t K, float *y, int64_t p0,
                                    int64_t p1) {
  _Alignas(64) float bp[512 * 16];
  int64_t off[512];
  unsigned char tap[512];
  const int64_t HW = s->H * s->W;
  const int64_t kb = ctc_gemm_kb_avx2(0, K);
  for (int64_t k0 = 0; k0 < K; k0 += kb) {
    const int64_t kc = K - k0 < kb ? K - k0 : kb;
    ctc_pix_rows_at(s, k0, kc, off, tap);
    for (int64_t j = p0; j < p1; j += 16) {
      ctc_pack_bpix16_avx2(s, off, tap, kc, j, bp);
      float *yj = y + j / HW * M * HW + j % HW;   /* pixels j .. j + 15 of channel 0 */
      for (int64_t i = 0; i < M; i += 6) {
        const int mr = M - i < 6 ? (int)(M - i) : 6;
        const float *ai = a + i * K + k0;
        float *ci = yj + i * HW;
        const int add = k0 > 0;
        if (mr > 4) ctc_gemm_tile16_avx2(6, 32, kc, ai, K, 1, mr, bp, ci, HW, 16, add);
        else if (mr > 2) ctc_gemm_tile16_avx2(4, 32, kc, ai, K, 1, mr, bp, ci, HW, 16, add);
        else if (mr == 2) ctc_gemm_tile16_avx2(2, 32, kc, ai, K, 1, mr, bp, ci, HW, 16, add);
        else ctc_gemm_tile16_avx2(1, 32, kc, ai, K, 1, mr, bp, ci, HW, 16, add);
      }
    }
  }
}
#define CTC_CONV_WINO_f32 1   /* ctc_conv_wino_f32 is in (linalg_c.c's conv_wino) */
/* ---- 3x3 stride-1 f32 convolutions by Winograd's F(2x2, 3x3) on AVX2: the AVX-512 helpers'
 * structure (see there) with 8 lanes, panels of 16 tiles and ctc_gemm_tile16_avx2's 6x16 tiles */
#define CTC_WINO_P 16   /* tiles a panel (the GEMM tile's columns) */
#define CTC_WINO_R 6    /* rows a GEMM tile */
#define CTC_WINO_PAD 16  /* as the AVX-512 helpers' */
/* v's lanes of m (each all ones or zero) stored at p: a plain store when all 8 are (vmaskmovps to
 * memory is microcoded on AMD's Zen: the input transform took 20% of a resnet step, Zen 4) */
static inline void ctc_wino_st_avx2(float *p, __m256i m, __m256 v) {
  if (_mm256_movemask_ps(_mm256_castsi256_ps(m)) == 0xff) _mm256_storeu_ps(p, v);
  else _mm256_maskstore_ps(p, m, v);
}
/* lanes [lo, hi) of 8 as a load/store mask */
static inline __m256i ctc_wino_lanes_avx2(int64_t lo, int64_t hi) {
  lo = lo < 0 ? 0 : lo > 8 ? 8 : lo, hi = hi < 0 ? 0 : hi > 8 ? 8 : hi;
  const __m256i l = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_and_si256(_mm256_cmpgt_epi32(l, _mm256_set1_epi32((int)lo - 1)),
                          _mm256_cmpgt_epi32(_mm256_set1_epi32((int)hi), l));
}
/* U[e][m][k] = (G g G^T)[e] as the AVX-512 helper's, 8 k at a time */
static inline void ctc_wino_u_f32(const float *w, int64_t M, int64_t K, int flip, int64_t m, float *restrict U) {
  const __m256 h = _mm256_set1_ps(0.5f);
  for (int64_t k = 0; k < K; k += 8) {
    const __m256i mk = ctc_wino_lanes_avx2(0, K - k);
    const __m256i kv = _mm256_add_epi32(_mm256_set1_epi32((int)k), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    const __m256i at = flip ? _mm256_add_epi32(_mm256_mullo_epi32(kv, _mm256_set1_epi32((int)(M * 9))),
                                               _mm256_set1_epi32((int)(m * 9 + 8)))
                            : _mm256_add_epi32(_mm256_mullo_epi32(kv, _mm256_set1_epi32(9)),
                                               _mm256_set1_epi32((int)(m * K * 9)));
    __m256 g[3][3], t[4][3];
    for (int a = 0; a < 3; a++)
      for (int b = 0; b < 3; b++)
        g[a][b] = _mm256_mask_i32gather_ps(_mm256_setzero_ps(), w,
                                           _mm256_add_epi32(at, _mm256_set1_epi32(flip ? -(3 * a + b) : 3 * a + b)),
                                           _mm256_castsi256_ps(mk), 4);
    for (int b = 0; b < 3; b++) {   /* t = G g */
      const __m256 s = _mm256_add_ps(g[0][b], g[2][b]);
      t[0][b] = g[0][b], t[3][b] = g[2][b];
      t[1][b] = _mm256_mul_ps(h, _mm256_add_ps(s, g[1][b]));
      t[2][b] = _mm256_mul_ps(h, _mm256_sub_ps(s, g[1][b]));
    }
    for (int a = 0; a < 4; a++) {   /* t G^T */
      const __m256 s = _mm256_add_ps(t[a][0], t[a][2]);
      float *u = U + (4 * a * M + m) * K + k;
      ctc_wino_st_avx2(u, mk, t[a][0]);
      ctc_wino_st_avx2(u + M * K, mk, _mm256_mul_ps(h, _mm256_add_ps(s, t[a][1])));
      ctc_wino_st_avx2(u + 2 * M * K, mk, _mm256_mul_ps(h, _mm256_sub_ps(s, t[a][1])));
      ctc_wino_st_avx2(u + 3 * M * K, mk, t[a][2]);
    }
  }
}
/* d[c][l] = row[base + 2 l + c], c < 4, l < 8 (0 outside the masks: columns [base, base + 2 L + 2)
 * inside [0, W), as two vectors from base and two from base + 2) */
static inline void ctc_wino_cols_avx2(int64_t base, int64_t W, int64_t L, __m256i *mm) {
  for (int s = 0; s < 4; s++) {
    const int64_t b0 = base + 2 * (s / 2) + 8 * (s % 2), end = 2 * L + 2 - 2 * (s / 2) - 8 * (s % 2);
    mm[s] = ctc_wino_lanes_avx2(-b0, W - b0 < end ? W - b0 : end);
  }
}
/* Vector j < 4 of a run's input row: the row's floats from base + 2 (j / 2) + 8 (j % 2), its
 * even columns then its odd ones (0 outside mm[j]: ctc_wino_cols_avx2's). fm (a constant) says
 * which take their masks: 4 every one; else bit 0 the first, bit 1 the last, and the others are
 * plain loads (in a run of 8 tiles only the first can start left of the image and only the last
 * end right of it) */
static inline __attribute__((always_inline)) __m256 ctc_wino_ld_avx2(const float *p, const __m256i *mm, const int fm,
                                                                     const int j) {
  const __m256i pi = _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7);
  const float *q = p + 2 * (j / 2) + 8 * (j % 2);
  const int masked = fm == 4 || (j == 0 && (fm & 1)) || (j == 3 && (fm & 2));
  return _mm256_permutevar8x32_ps(masked ? _mm256_maskload_ps(q, mm[j]) : _mm256_loadu_ps(q), pi);
}
/* d[c][l] = row[base + 2 l + c], c < 4, l < 8 (0 outside the masks: columns [base, base + 2 L + 2)
 * inside [0, W), as two vectors from base and two from base + 2) */
static inline __attribute__((always_inline)) void ctc_wino_row_avx2(const float *row, int64_t base, const __m256i *mm,
                                                                    const int fm, __m256 *d) {
  for (int s = 0; s < 2; s++) {
    const __m256 A = ctc_wino_ld_avx2(row + base, mm, fm, 2 * s), B = ctc_wino_ld_avx2(row + base, mm, fm, 2 * s + 1);
    d[2 * s] = _mm256_permute2f128_ps(A, B, 0x20);
    d[2 * s + 1] = _mm256_permute2f128_ps(A, B, 0x31);
  }
}
/* The transforms of one lane's tile, a row at a time (the same operations in the same order
 * wherever a tile is; four outputs live at a time, as AVX2's 16 registers allow):
 * d = B^T d of its 4x4 inputs, in place */
static inline void ctc_wino_btd(__m256 d[4][4]) {
  for (int c = 0; c < 4; c++) {
    const __m256 e0 = _mm256_sub_ps(d[0][c], d[2][c]), e1 = _mm256_add_ps(d[1][c], d[2][c]);
    const __m256 e2 = _mm256_sub_ps(d[2][c], d[1][c]), e3 = _mm256_sub_ps(d[1][c], d[3][c]);
    d[0][c] = e0, d[1][c] = e1, d[2][c] = e2, d[3][c] = e3;
  }
}
/* o = e B of a row e of B^T d: a row of B^T d B */
static inline void ctc_wino_eb(const __m256 *e, __m256 *o) {
  o[0] = _mm256_sub_ps(e[0], e[2]), o[1] = _mm256_add_ps(e[1], e[2]);
  o[2] = _mm256_sub_ps(e[2], e[1]), o[3] = _mm256_sub_ps(e[1], e[3]);
}
/* y[i][j] = (A^T v A)[i][j] of a run's 16 products v, plane e at p + e ps, loaded a row of v at a
 * time (all 16 and their sums do not fit AVX2's 16 registers): all 8 lanes where full (a constant),
 * else the lanes lm (0 in the others) */
static inline __attribute__((always_inline)) void ctc_wino_ava_ld(const float *p, int64_t ps, const int full, __m256i lm,
                                                                  __m256 y[2][2]) {
  __m256 s[4][2];
  for (int a = 0; a < 4; a++) {   /* s = v A */
    __m256 v[4];
    for (int b = 0; b < 4; b++)
      v[b] = full ? _mm256_loadu_ps(p + (4 * a + b) * ps) : _mm256_maskload_ps(p + (4 * a + b) * ps, lm);
    s[a][0] = _mm256_add_ps(_mm256_add_ps(v[0], v[1]), v[2]);
    s[a][1] = _mm256_sub_ps(_mm256_sub_ps(v[1], v[2]), v[3]);
  }
  for (int j = 0; j < 2; j++) {   /* A^T s */
    y[0][j] = _mm256_add_ps(_mm256_add_ps(s[0][j], s[1][j]), s[2][j]);
    y[1][j] = _mm256_sub_ps(_mm256_sub_ps(s[1][j], s[2][j]), s[3][j]);
  }
}
/* o = A (a, b) with A 4x2: the output gradient's tile f as A f A^T, its columns, then the rows */
static inline void ctc_wino_ta(__m256 a, __m256 b, __m256 *o) {
  o[0] = a, o[1] = _mm256_add_ps(a, b), o[2] = _mm256_sub_ps(a, b), o[3] = _mm256_sub_ps(_mm256_setzero_ps(), b);
}
/* zr[e ZS] (lanes lm; all 8 as they are where full, a constant) = element e of A f A^T, row by
 * row: rows [r0, r1) */
static inline __attribute__((always_inline)) void ctc_wino_afa(__m256 f[2][2], float *zr, int64_t ZS, __m256i lm,
                                                               const int full, int r0, int r1) {
  __m256 t[2][4];
  for (int c = 0; c < 2; c++) ctc_wino_ta(f[0][c], f[1][c], t[c]);   /* A f */
#pragma GCC unroll 4
  for (int r = 0; r < 4; r++) {   /* row r of A f A^T (unrolled: t stays in registers) */
    if (r < r0 || r >= r1) continue;
    __m256 o[4];
    ctc_wino_ta(t[0][r], t[1][r], o);
    for (int q = 0; q < 4; q++)
      if (full) _mm256_storeu_ps(zr + (4 * r + q) * ZS, o[q]);
      else ctc_wino_st_avx2(zr + (4 * r + q) * ZS, lm, o[q]);
  }
}
/* Narrow images (W = 4 or 8 columns: a row's runs fill 2 or 4 of 8 lanes) as the AVX-512 helpers':
 * groups of 8 tiles [t, t + 8) (t a multiple of 8), 16 / W whole tile rows each, a group's rows the 16
 * floats of a pair of vectors, and a tile column out of the pair by two permutes and a blend */
/* ab[0], ab[1] = the 16 / W rows p[j] of W floats (NULL: zeros), one after another */
static inline void ctc_wino_pair_ld(const float *const *p, int64_t W, __m256 *ab) {
  for (int h = 0; h < 2; h++)
    if (W == 8) ab[h] = p[h] ? _mm256_loadu_ps(p[h]) : _mm256_setzero_ps();
    else
      ab[h] = _mm256_insertf128_ps(_mm256_castps128_ps256(p[2 * h] ? _mm_loadu_ps(p[2 * h]) : _mm_setzero_ps()),
                                   p[2 * h + 1] ? _mm_loadu_ps(p[2 * h + 1]) : _mm_setzero_ps(), 1);
}
static inline void ctc_wino_pair_st(float *const *p, int64_t W, const __m256 *ab) {
  for (int h = 0; h < 2; h++)
    if (W == 8) {
      if (p[h]) _mm256_storeu_ps(p[h], ab[h]);
    } else {
      if (p[2 * h]) _mm_storeu_ps(p[2 * h], _mm256_castps256_ps128(ab[h]));
      if (p[2 * h + 1]) _mm_storeu_ps(p[2 * h + 1], _mm256_extractf128_ps(ab[h], 1));
    }
}
/* lane l = element ix[l] of the pair's 16 floats (ix[l] < 8: the first), 0 where zm[l] is 0 */
static inline __m256 ctc_wino_pick(const __m256 *ab, __m256i ix, __m256 zm) {
  const __m256 hi = _mm256_castsi256_ps(_mm256_cmpgt_epi32(ix, _mm256_set1_epi32(7)));
  return _mm256_and_ps(zm, _mm256_blendv_ps(_mm256_permutevar8x32_ps(ab[0], ix), _mm256_permutevar8x32_ps(ab[1], ix), hi));
}
static inline void ctc_wino_in_narrow_f32(const float *x, int64_t K, int64_t H, int64_t W, int64_t T, int64_t t0,
                                          int64_t B, int64_t k0, int64_t k1, int rows, int r0, int r1,
                                          float *restrict V) {
  const int64_t TW = W / 2, HW = H * W, R = 16 / W, VS = K * B + CTC_WINO_PAD;   /* a plane's floats */
  __m256i ix[4];
  __m256 zm[4];
  for (int c = 0; c < 4; c++) {
    _Alignas(32) int32_t iv[8], zv[8];
    for (int l = 0; l < 8; l++) {
      const int64_t col = 2 * (l % TW) - 1 + c;
      iv[l] = (int32_t)(l / TW * W + (col < 0 ? 0 : col >= W ? 0 : col)), zv[l] = col >= 0 && col < W ? -1 : 0;
    }
    ix[c] = _mm256_load_si256((const __m256i *)iv), zm[c] = _mm256_castsi256_ps(_mm256_load_si256((const __m256i *)zv));
  }
  for (int64_t tb = 0; tb < B && t0 + tb < T; tb += 8) {
    int64_t n[4], ty[4];
    ctc_wino_group(t0 + tb, T, H, W, R, n, ty);
    const __m256i lm = ctc_wino_lanes_avx2(0, T - t0 - tb);
    for (int64_t k = k0; k < k1; k++) {
      __m256 d[4][4];
      for (int r = 0; r < 4; r++) {
        const float *p[4];
        __m256 ab[2];
        for (int64_t j = 0; j < R; j++) {
          const int64_t ih = 2 * ty[j] - 1 + r;
          p[j] = n[j] >= 0 && ih >= 0 && ih < H ? x + (n[j] * K + k) * HW + ih * W : NULL;
        }
        ctc_wino_pair_ld(p, W, ab);
        for (int c = 0; c < 4; c++) d[r][c] = ctc_wino_pick(ab, ix[c], zm[c]);
      }
      ctc_wino_btd(d);
      float *v = rows ? V + k * B + tb : V + (tb / 16 * K + k) * 16 + tb % 16;
#pragma GCC unroll 4
      for (int r = 0; r < 4; r++) {   /* row r of B^T d B (unrolled: d stays in registers) */
        if (r < r0 || r >= r1) continue;
        __m256 o[4];
        ctc_wino_eb(d[r], o);
        for (int c = 0; c < 4; c++) ctc_wino_st_avx2(v + (4 * r + c) * VS, lm, o[c]);
      }
    }
  }
}
static inline void ctc_wino_out_narrow_f32(const float *restrict Mb, int64_t M, int64_t H, int64_t W, int64_t t0,
                                           int64_t nt, int64_t B, int64_t m0, int64_t m1, float *y) {
  const int64_t TW = W / 2, HW = H * W, R = 16 / W;
  _Alignas(32) int32_t iv[2][8];
  for (int p = 0; p < 16; p++) iv[p / 8][p % 8] = (int32_t)((p % W % 2) * 8 + p / W * TW + p % W / 2);
  const __m256i ix[2] = {_mm256_load_si256((const __m256i *)iv[0]), _mm256_load_si256((const __m256i *)iv[1])};
  const __m256 all = _mm256_castsi256_ps(_mm256_set1_epi32(-1));
  for (int64_t tb = 0; tb < nt; tb += 8) {
    int64_t n[4], ty[4];
    ctc_wino_group(t0 + tb, t0 + nt, H, W, R, n, ty);
    const __m256i lm = ctc_wino_lanes_avx2(0, nt - tb);
    for (int64_t m = m0; m < m1; m++) {
      __m256 c[2][2];   /* c[i][j]: output row i, column j of each tile */
      ctc_wino_ava_ld(Mb + m * B + tb, M * B + CTC_WINO_PAD, 0, lm, c);
      for (int i = 0; i < 2; i++) {   /* output row 2 ty + i of each tile row */
        const __m256 ab[2] = {ctc_wino_pick(c[i], ix[0], all), ctc_wino_pick(c[i], ix[1], all)};
        float *p[4];
        for (int64_t j = 0; j < R; j++) p[j] = n[j] >= 0 ? y + (n[j] * M + m) * HW + (2 * ty[j] + i) * W : NULL;
        ctc_wino_pair_st(p, W, ab);
      }
    }
  }
}
static inline void ctc_wino_dy_narrow_f32(const float *g, int64_t M, int64_t H, int64_t W, int64_t t0, int64_t nt,
                                          int64_t B, int64_t m0, int64_t m1, int r0, int r1, float *restrict Z) {
  const int64_t TW = W / 2, HW = H * W, R = 16 / W, ZS = M * B + CTC_WINO_PAD;   /* a plane's floats */
  _Alignas(32) int32_t iv[2][8];
  for (int c = 0; c < 2; c++)
    for (int l = 0; l < 8; l++) iv[c][l] = (int32_t)(l / TW * W + 2 * (l % TW) + c);
  const __m256i ix[2] = {_mm256_load_si256((const __m256i *)iv[0]), _mm256_load_si256((const __m256i *)iv[1])};
  const __m256 all = _mm256_castsi256_ps(_mm256_set1_epi32(-1));
  for (int64_t tb = 0; tb < nt; tb += 8) {
    int64_t n[4], ty[4];
    ctc_wino_group(t0 + tb, t0 + nt, H, W, R, n, ty);
    const __m256i lm = ctc_wino_lanes_avx2(0, nt - tb);
    for (int64_t m = m0; m < m1; m++) {
      __m256 f[2][2];
      for (int i = 0; i < 2; i++) {
        const float *p[4];
        __m256 ab[2];
        for (int64_t j = 0; j < R; j++) p[j] = n[j] >= 0 ? g + (n[j] * M + m) * HW + (2 * ty[j] + i) * W : NULL;
        ctc_wino_pair_ld(p, W, ab);
        for (int c = 0; c < 2; c++) f[i][c] = ctc_wino_pick(ab, ix[c], all);
      }
      ctc_wino_afa(f, Z + m * B + tb, ZS, lm, 0, r0, r1);
    }
  }
}
/* Rows [r0, r1) of B^T d B of one run's tiles, channels k of [k0, k1) (xr: channel k0's image row
 * 2 ty, the run's row 1; row 0 read where ok0, row 3 where ok3; v: channel k0's place in plane 0,
 * vk floats a channel), a row of B^T d at a time: (row 1) + (row 2), (row 2) - (row 1), (row 0) -
 * (row 2), (row 1) - (row 3), rows 1 and 2 held (the 16 vectors of the whole tile and the masks do
 * not fit AVX2's 16 registers: spilled, 32 channels of 32 x 32 images at batch 32 took 0.83 ms
 * against 0.64, Zen 4). plain (a constant): all 8 lanes stored as they are; else the lanes m, rotated
 * by sh first where sh (a run that starts inside a panel's vector) */
static inline __attribute__((always_inline)) void ctc_wino_in_run_avx2(const float *xr, int64_t HW, int64_t W, int64_t base,
                                                                       int64_t k0, int64_t k1, int ok0, int ok3,
                                                                       const __m256i *mm, const int fm, float *v,
                                                                       int64_t vk, int64_t VS, const int plain, __m256i m,
                                                                       int64_t sh, __m256i rot, int r0, int r1) {
  for (int64_t k = 0; k < k1 - k0; k++) {
    const float *xk = xr + k * HW;
    float *vc = v + k * vk;
    __m256 a[4], b[4], e[4];
    ctc_wino_row_avx2(xk, base, mm, fm, a);
    ctc_wino_row_avx2(xk + W, base, mm, fm, b);
#pragma GCC unroll 4
    for (int r = 0; r < 4; r++) {
      if (r < r0 || r >= r1) continue;
      if ((r == 0 && !ok0) || (r == 3 && !ok3))
        for (int c = 0; c < 4; c++) e[c] = _mm256_setzero_ps();
      else if (r == 0 || r == 3)
        ctc_wino_row_avx2(r == 0 ? xk - W : xk + 2 * W, base, mm, fm, e);
      for (int c = 0; c < 4; c++)
        e[c] = r == 0 ? _mm256_sub_ps(e[c], b[c]) : r == 1 ? _mm256_add_ps(a[c], b[c])
             : r == 2 ? _mm256_sub_ps(b[c], a[c]) : _mm256_sub_ps(a[c], e[c]);
      __m256 o[4];
      ctc_wino_eb(e, o);
      for (int c = 0; c < 4; c++)
        if (plain) _mm256_storeu_ps(vc + (4 * r + c) * VS, o[c]);
        else ctc_wino_st_avx2(vc + (4 * r + c) * VS, m, sh ? _mm256_permutevar8x32_ps(o[c], rot) : o[c]);
    }
  }
}
/* V[e][p][k][16] (panels of 16 tiles; rows: V[e][k][B]) = (B^T d B)[e], channels [k0, k1), runs
 * of up to 8 tiles; a run of 8 that fills its vector (all of them in images of 16 columns or more,
 * but where a block starts inside a row) without the checks of every load and store */
static inline void ctc_wino_in_f32(const float *x, int64_t K, int64_t H, int64_t W, int64_t T, int64_t t0, int64_t B,
                                   int64_t k0, int64_t k1, int rows, int r0, int r1, float *restrict V) {
  if (W == 4 || W == 8) {   /* narrow images: whole groups of 8 tiles */
    ctc_wino_in_narrow_f32(x, K, H, W, T, t0, B, k0, k1, rows, r0, r1, V);
    return;
  }
  const int64_t TW = W / 2, TH = H / 2, HW = H * W, VS = K * B + CTC_WINO_PAD;   /* a plane's floats */
  ctc_wino_run u = ctc_wino_run_at(t0, t0, T, TH, TW, 8);
  for (int64_t t = t0; t < t0 + B && t < T; t += u.L, u = ctc_wino_run_after(u, t, T, TH, TW, 8 - (t - t0) % 8)) {
    const int64_t sh = rows ? 0 : (t - t0) % 8;
    const int64_t tx = u.tx, ty = u.ty, n = u.n, tb = u.tb, L = u.L, base = 2 * tx - 1;
    const __m256i m = ctc_wino_lanes_avx2(sh, sh + L);
    const __m256i rot = _mm256_and_si256(
        _mm256_sub_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), _mm256_set1_epi32((int)sh)), _mm256_set1_epi32(7));
    __m256i mm[4];
    ctc_wino_cols_avx2(base, W, L, mm);
    const float *xr = x + (n * K + k0) * HW + 2 * ty * W;
    float *v = rows ? V + k0 * B + tb : V + (tb / 16 * K + k0) * 16 + tb % 16 / 8 * 8;
    const int64_t vk = rows ? B : 16;
    const int ok0 = ty > 0, ok3 = 2 * ty + 2 < H;
    if (L == 8) {   /* (then sh is 0) */
      const int fm = (tx == 0) | (tx + 8 == TW) << 1;
      if (fm == 0) ctc_wino_in_run_avx2(xr, HW, W, base, k0, k1, ok0, ok3, mm, 0, v, vk, VS, 1, m, 0, rot, r0, r1);
      else if (fm == 1) ctc_wino_in_run_avx2(xr, HW, W, base, k0, k1, ok0, ok3, mm, 1, v, vk, VS, 1, m, 0, rot, r0, r1);
      else if (fm == 2) ctc_wino_in_run_avx2(xr, HW, W, base, k0, k1, ok0, ok3, mm, 2, v, vk, VS, 1, m, 0, rot, r0, r1);
      else ctc_wino_in_run_avx2(xr, HW, W, base, k0, k1, ok0, ok3, mm, 3, v, vk, VS, 1, m, 0, rot, r0, r1);
    } else
      ctc_wino_in_run_avx2(xr, HW, W, base, k0, k1, ok0, ok3, mm, 4, v, vk, VS, 0, m, sh, rot, r0, r1);
  }
}
/* Output rows [m0, m1) of one run of L tiles (yr: row 2 ty, column 2 tx of channel m0's image):
 * plain loads and stores where full (a constant: L = 8) */
static inline __attribute__((always_inline)) void ctc_wino_out_run_avx2(const float *Mb, int64_t M, int64_t B, int64_t HW,
                                                                        int64_t W, int64_t tb, int64_t L, int64_t m0,
                                                                        int64_t m1, const int full, float *yr) {
  const __m256i lm = ctc_wino_lanes_avx2(0, L), s0 = ctc_wino_lanes_avx2(0, 2 * L), s1 = ctc_wino_lanes_avx2(0, 2 * L - 8);
  for (int64_t m = m0; m < m1; m++) {
    __m256 c[2][2];   /* c[i][j]: output row i, column j of each tile */
    ctc_wino_ava_ld(Mb + m * B + tb, M * B + CTC_WINO_PAD, full, lm, c);
    float *ym = yr + (m - m0) * HW;
    for (int i = 0; i < 2; i++) {   /* output row 2 ty + i, its two columns interleaved */
      const __m256 ul = _mm256_unpacklo_ps(c[i][0], c[i][1]), uh = _mm256_unpackhi_ps(c[i][0], c[i][1]);
      const __m256 lo = _mm256_permute2f128_ps(ul, uh, 0x20), hi = _mm256_permute2f128_ps(ul, uh, 0x31);
      if (full) {
        _mm256_storeu_ps(ym + i * W, lo);
        _mm256_storeu_ps(ym + i * W + 8, hi);
      } else {
        ctc_wino_st_avx2(ym + i * W, s0, lo);
        if (L > 4) ctc_wino_st_avx2(ym + i * W + 8, s1, hi);
      }
    }
  }
}
/* y = (A^T Mb A) for rows [m0, m1) of y [N, M, H, W], runs of up to 8 tiles of a row */
static inline void ctc_wino_out_f32(const float *restrict Mb, int64_t M, int64_t H, int64_t W, int64_t t0, int64_t nt,
                                    int64_t B, int64_t m0, int64_t m1, float *y) {
  if (W == 4 || W == 8) {   /* narrow images: whole groups of 8 tiles */
    ctc_wino_out_narrow_f32(Mb, M, H, W, t0, nt, B, m0, m1, y);
    return;
  }
  const int64_t TW = W / 2, TH = H / 2, HW = H * W;
  ctc_wino_run u = ctc_wino_run_at(t0, t0, t0 + nt, TH, TW, 8);
  for (int64_t t = t0; t < t0 + nt; t += u.L, u = ctc_wino_run_after(u, t, t0 + nt, TH, TW, 8)) {
    float *yr = y + (u.n * M + m0) * HW + 2 * u.ty * W + 2 * u.tx;
    if (u.L == 8) ctc_wino_out_run_avx2(Mb, M, B, HW, W, u.tb, 8, m0, m1, 1, yr);
    else ctc_wino_out_run_avx2(Mb, M, B, HW, W, u.tb, u.L, m0, m1, 0, yr);
  }
}
/* Rows [m0, m1) of one run of L tiles of the weight gradient's Z (gr: output gradient row 2 ty,
 * column 2 tx of channel m0's image; zr: its place in Z's plane 0): plain loads and stores where
 * full (a constant: L = 8) */
static inline __attribute__((always_inline)) void ctc_wino_dy_run_avx2(const float *gr, int64_t HW, int64_t W, int64_t L,
                                                                       int64_t m0, int64_t m1, int64_t B, int64_t ZS,
                                                                       const int full, int r0, int r1, float *zr) {
  const __m256i lm = ctc_wino_lanes_avx2(0, L), mm[2] = {ctc_wino_lanes_avx2(0, 2 * L), ctc_wino_lanes_avx2(0, 2 * L - 8)};
  for (int64_t m = m0; m < m1; m++) {
    const float *gm = gr + (m - m0) * HW;
    __m256 f[2][2];
    for (int i = 0; i < 2; i++) {   /* the row's 16 floats from column 2 tx, as an input row's first two vectors */
      const __m256 A = ctc_wino_ld_avx2(gm + i * W, mm, full ? 0 : 4, 0), B2 = ctc_wino_ld_avx2(gm + i * W, mm, full ? 0 : 4, 1);
      f[i][0] = _mm256_permute2f128_ps(A, B2, 0x20), f[i][1] = _mm256_permute2f128_ps(A, B2, 0x31);
    }
    ctc_wino_afa(f, zr + (m - m0) * B, ZS, lm, full, r0, r1);
  }
}
/* The weight gradient's Z[e][m][B] = A f A^T as the AVX-512 helper's, runs of up to 8 tiles */
static inline void ctc_wino_dy_f32(const float *g, int64_t M, int64_t H, int64_t W, int64_t t0, int64_t nt, int64_t B,
                                   int64_t m0, int64_t m1, int r0, int r1, float *restrict Z) {
  if (W == 4 || W == 8) {   /* narrow images: whole groups of 8 tiles */
    ctc_wino_dy_narrow_f32(g, M, H, W, t0, nt, B, m0, m1, r0, r1, Z);
    return;
  }
  const int64_t TW = W / 2, TH = H / 2, HW = H * W, ZS = M * B + CTC_WINO_PAD;   /* a plane's floats */
  ctc_wino_run u = ctc_wino_run_at(t0, t0, t0 + nt, TH, TW, 8);
  for (int64_t t = t0; t < t0 + nt; t += u.L, u = ctc_wino_run_after(u, t, t0 + nt, TH, TW, 8)) {
    const float *gr = g + (u.n * M + m0) * HW + 2 * u.ty * W + 2 * u.tx;
    float *zr = Z + m0 * B + u.tb;
    if (u.L == 8) ctc_wino_dy_run_avx2(gr, HW, W, 8, m0, m1, B, ZS, 1, r0, r1, zr);
    else ctc_wino_dy_run_avx2(gr, HW, W, u.L, m0, m1, B, ZS, 0, r0, r1, zr);
  }
}
/* The rows of the GEMM tile that a loop over M's rows in steps of 6 computes at row m: from *m,
 * their count. Where the last tile would have 1 or 2 rows, the last 7 or 8 are a tile of 4 and
 * one of 3 or 4: a tile of 2 rows sums into 4 registers, too few to hide the FMA's latency (the
 * products of 32 channels with AVX2 76 -> 87 GFLOP/s on Zen 4). Each row's sums are the same. */
static inline int ctc_wino_rows_avx2(int64_t M, int64_t *m) {
  const int64_t left = M - *m;
  if (M > 6 && (left == 7 || left == 8)) return 4;
  if (M > 6 && left <= 2) {
    *m -= 2;
    return (int)left + 2;
  }
  return left < 6 ? (int)left : 6;
}
/* Mb[e][m][B] for the rows of M at m (ctc_wino_rows_avx2) and the block's panel p: U[e] V[e, p]
 * over all K */
static inline void ctc_wino_gemm_f32(const float *U, const float *V, int64_t M, int64_t K, int64_t B, int64_t nt,
                                     int64_t e, int64_t p, int64_t m, float *Mb) {
  const int mr = ctc_wino_rows_avx2(M, &m);
  const int nr = nt - p * 16 < 16 ? (int)(nt - p * 16) : 16;
  const float *a = U + (e * M + m) * K, *bp = V + e * (K * B + CTC_WINO_PAD) + p * K * 16;
  float *c = Mb + e * (M * B + CTC_WINO_PAD) + m * B + p * 16;
  if (mr > 4) ctc_gemm_tile16_avx2(6, 32, K, a, K, 1, mr, bp, c, B, nr, 0);
  else if (mr > 2) ctc_gemm_tile16_avx2(4, 32, K, a, K, 1, mr, bp, c, B, nr, 0);
  else if (mr == 2) ctc_gemm_tile16_avx2(2, 32, K, a, K, 1, mr, bp, c, B, nr, 0);
  else ctc_gemm_tile16_avx2(1, 32, K, a, K, 1, mr, bp, c, B, nr, 0);
}
/* P[e][m][k] (+)= Z[e] V[e]^T over the block's tiles, the 16 columns k of panel q */
static inline void ctc_wino_wgemm_f32(const float *Z, const float *V, int64_t M, int64_t K, int64_t B, int64_t nt,
                                      int64_t e, int64_t q, int add, float *P) {
  _Alignas(64) float bp[512 * 16];
  const int nr = K - q * 16 < 16 ? (int)(K - q * 16) : 16;
  ctc_pack_b16_avx2(V + e * (K * B + CTC_WINO_PAD), B, 0, nt, q * 16, nr, bp);
  for (int64_t m6 = 0; m6 < M; m6 += 6) {
    int64_t m = m6;
    const int mr = ctc_wino_rows_avx2(M, &m);
    const float *a = Z + e * (M * B + CTC_WINO_PAD) + m * B;
    float *c = P + (e * M + m) * K + q * 16;
    if (mr > 4) ctc_gemm_tile16_avx2(6, 32, nt, a, B, 1, mr, bp, c, K, nr, add);
    else if (mr > 2) ctc_gemm_tile16_avx2(4, 32, nt, a, B, 1, mr, bp, c, K, nr, add);
    else if (mr == 2) ctc_gemm_tile16_avx2(2, 32, nt, a, B, 1, mr, bp, c, K, nr, add);
    else ctc_gemm_tile16_avx2(1, 32, nt, a, B, 1, mr, bp, c, K, nr, add);
  }
}
#define CTC_WINO_WQ 16   /* weight gradient: channels k a GEMM panel */
#endif
#endif

#if defined(__aarch64__) && defined(__ARM_NEON)
#ifndef CTC_HAVE_CBLAS
#define CTC_GEMM_NEON_f32 1
#define CTC_GEMM_PK_f32 1   /* (as the AVX-512 kernel's) */
#define ctc_gemm_own_pk_f32 ctc_gemm_neon_pk_f32
#define ctc_gemm_own_pack_f32 ctc_gemm_pack_neon_f32
#define CTC_GEMM_OWN_f32(m, n) ((m) > 1)   /* the blocks it computes: all but single rows (ctc_gemv_neon_f32) */
#endif
#include <arm_neon.h>
/* 16 columns are 4 vectors of 4; op(A) one scalar, fmla by lane */
#define CTC_VW_neon 4
#define CTC_NV_neon 4
#define CTC_NP_neon 1   /* panels of op(B) packed together (ctc_pack_bn_neon) */
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
#ifndef CTC_GEMM_UNUSED   /* (the GEMM itself, which an aarch64 build with OpenBLAS does not call:
                           * it keeps the tiles for Winograd's products) */
#define CTC_GEMM_UNUSED __attribute__((unused))
#endif
/* B not transposed, columns [j0, j0 + nj) (nj <= 16 CTC_NP_neon) as panels bp[p][k][16] = B[k0 + k,
 * j0 + 16 p + j], kb floats apart, for k < kc; zero past nj. Each row is read in one pass of up to
 * 16 CTC_NP_neon floats: a panel at a time read a 32x8192x288 GEMM's rows 16 floats apart (AVX2, Zen 5:
 * 81 GFLOP/s, OpenBLAS 112). */
static CTC_GEMM_UNUSED void ctc_pack_bn_neon(const float *b, int64_t ldb, int64_t k0, int64_t kc, int64_t j0,
                                           int64_t nj, int64_t kb, float *restrict bp) {
  if (nj == 16 * CTC_NP_neon) {   /* loops the compiler vectorises */
    for (int64_t k = 0; k < kc; k++)
#pragma GCC unroll 4
      for (int p = 0; p < CTC_NP_neon; p++)
        for (int j = 0; j < 16; j++) bp[p * kb * 16 + k * 16 + j] = b[(k0 + k) * ldb + j0 + p * 16 + j];
    return;
  }
  for (int64_t k = 0; k < kc; k++)   /* fewer columns: whole panels vectorised, zeros past nj */
    for (int64_t p = 0; p * 16 < nj; p++) {
      const float *bk = b + (k0 + k) * ldb + j0 + p * 16;
      float *d = bp + p * kb * 16 + k * 16;
      if (nj - p * 16 >= 16)
        for (int j = 0; j < 16; j++) d[j] = bk[j];
      else
        for (int j = 0; j < 16; j++) d[j] = j < nj - p * 16 ? bk[j] : 0;
    }
}
/* B transposed: bp[k][16] = B[j0 + j, k0 + k] for k < kc, j < nr; zero for j >= nr. */
static void ctc_pack_b16_neon(const float *b, int64_t ldb, int64_t k0, int64_t kc, int64_t j0, int nr, float *restrict bp) {
  const int64_t kt = nr == 16 ? ctc_pack_bt16_neon(b + j0 * ldb + k0, ldb, kc, bp) : 0;
  for (int j = 0; j < 16; j++)
    for (int64_t k = kt; k < kc; k++) bp[k * 16 + j] = j < nr ? b[(j0 + j) * ldb + k0 + k] : 0;
}
/* One k of a tile: acc[i] += A[i, k] bp[k] for its R rows (ai[i]: row i of A, k at ai[i] + k * aks). */
static inline __attribute__((always_inline)) void ctc_gemm_k16_neon(const int R, int64_t k, const float *const *ai,
                                                                  int64_t aks, const float *restrict bp,
                                                                  ctc_vf_neon acc[6][CTC_NV_neon]) {
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
/* The tile C[mr, nr <= 16 columns] = (C +, if add) sum over k < kc of A[i, k] bp[k]: A[i, k] at
 * a[i * ars + k * aks]. R (6, 4, 2 or 1) rows are computed: rows mr..R-1 repeat row 0 and are not
 * stored. The registers sum S k at a time, each such partial sum added to C in memory (blocked
 * summation); R and S are constants where it is called. S is 128 in the GEMM (a length-K sum's
 * error below OpenBLAS's: docs/speed.md), 32 in the convolutions and Winograd's sums over tiles
 * (which keep their blocks of 32: their thread and block invariance). A whole block's k loop has a
 * constant count, unrolled by 4 (the same sums; 0-7% faster on AVX2 on its own). */
static inline __attribute__((always_inline)) void ctc_gemm_tile16_neon(const int R, const int S, int64_t kc,
                                                                     const float *a, int64_t ars, int64_t aks,
                                                                     int mr, const float *restrict bp, float *c,
                                                                     int64_t ldc, int nr, int add) {
  const float *ai[6];
#pragma GCC unroll 6
  for (int i = 0; i < R; i++) ai[i] = a + (i < mr ? i : 0) * ars;
  for (int64_t k0 = 0; k0 < kc; k0 += S) {
    const int64_t k1 = kc - k0 < S ? kc : k0 + S;
    ctc_vf_neon acc[6][CTC_NV_neon];
#pragma GCC unroll 6
    for (int i = 0; i < R; i++)
#pragma GCC unroll 4
      for (int v = 0; v < CTC_NV_neon; v++) acc[i][v] = ctc_vzero_neon();
    if (k1 - k0 == S) {
#pragma GCC unroll 4
      for (int64_t k = k0; k < k0 + S; k++) ctc_gemm_k16_neon(R, k, ai, aks, bp, acc);
    } else {
      for (int64_t k = k0; k < k1; k++) ctc_gemm_k16_neon(R, k, ai, aks, bp, acc);
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
/* K in equal blocks of at most 512 (256 if ta), multiples of 16 but the last: their size */
static inline int64_t ctc_gemm_kb_neon(int ta, int64_t K) {
  const int64_t kmax = ta ? 256 : 512, nkb = (K + kmax - 1) / kmax;
  return ((K + nkb - 1) / nkb + 15) / 16 * 16;
}
/* op(B) [K, N] packed whole, as ctc_gemm_neon_pk_f32 reads it (a time loop's weights, packed once
 * before the loop: kernels/prepack.c): from pk + k0 * ldp, K block [k0, k0 + kc)'s 16-column panels
 * (the blocks of a GEMM with this ta), kc * 16 floats apart, zero past N (ldp: N rounded up to 32). */
static inline void ctc_gemm_pack_neon_f32(int ta, int tb, int64_t N, int64_t K, const float *b, int64_t ldb,
                                        float *pk, int64_t ldp) {
  const int64_t kb = K > 0 ? ctc_gemm_kb_neon(ta, K) : 1, nw = tb ? 16 : 16 * CTC_NP_neon;
  for (int64_t k0 = 0; k0 < K; k0 += kb) {
    const int64_t kc = K - k0 < kb ? K - k0 : kb;
    for (int64_t j0 = 0; j0 < N; j0 += nw) {
      const int64_t nj = N - j0 < nw ? N - j0 : nw;
      float *d = pk + k0 * ldp + j0 / 16 * kc * 16;
      if (tb) ctc_pack_b16_neon(b, ldb, k0, kc, j0, (int)nj, d);
      else ctc_pack_bn_neon(b, ldb, k0, kc, j0, nj, kc, d);
    }
  }
}
/* C[M,N] = op(A) op(B), or C += if acc (as ctc_gemm_f32); serial. The AVX-512 GEMM's blocking
 * with 16-column panels of op(B) (CTC_NP_neon of them packed together when B is not transposed: 32 KiB
 * on the stack each) and 6x16 tiles of C. A transposed A
 * (a weight gradient's dY^T) is packed too, 6 rows at a time in blocks of 384 (384 KiB): its rows are often 4 KiB
 * apart, and a tile reading 6 floats from each of 512 such rows evicts them from L1 (one cache
 * set) before the next tile reads the neighbouring floats (1024x256x1024: 35 -> 47 GFLOP/s).
 * With pk, op(B)'s panels come packed (ctc_gemm_pack_neon_f32 of all its ldp columns; C's column 0
 * is op(B)'s column jp, a multiple of 16) and B is not read: the same sums in the same order. */
static CTC_GEMM_UNUSED void ctc_gemm_neon_pk_f32(int ta, int tb, int acc, int64_t M, int64_t N, int64_t K,
                                              const float *a, int64_t lda, const float *b, int64_t ldb,
                                              const float *pk, int64_t ldp, int64_t jp, float *c, int64_t ldc) {
  _Alignas(64) float bp[CTC_NP_neon * 512 * 16];
  _Alignas(64) float ap[384 * 256];
  if (K <= 0) {
    for (int64_t i = 0; i < M && !acc; i++) memset(c + i * ldc, 0, sizeof(float) * (size_t)N);
    return;
  }
  /* K in equal blocks of at most 512 (256 if ta; multiples of 16 but the last), M of 384 (with ta,
   * blocks of 96 rows packed op(B) 4 times as often: the gpt train step 1.5% slower with AVX2 on Zen 4) */
  const int64_t mb = 384, kb = ctc_gemm_kb_neon(ta, K);
  /* A^T packed (ap), but not with at most 64 columns of C and 64 k: its packing then cost as much as
   * the few panels that reuse it saved, and a tile reads A^T's k rows where they lie (AVX2, Zen 4:
   * attention's p^T g and ds^T q, M <= 128, N = K = 32, 62 -> 75-80 GFLOP/s; 1024 x 64 x 64 from
   * rows 4 KiB apart 59 -> 67; at 128 columns packing is as fast or faster) */
  const int pa = ta && !(K <= 64 && N <= 64);
  const int64_t ars = pa ? 6 * kb : ta ? 1 : lda, aks = pa ? 6 : ta ? lda : 1;   /* (pa: row i of a tile at ap + i) */
  /* the rows whose packed op(B) panels are shared: the packed A's block if ta, else all of them (each
   * column group of op(B) packed once per K block, as the AVX-512 GEMM does) */
  const int64_t mo = ta ? mb : M;
  for (int64_t k0 = 0; k0 < K; k0 += kb) {
    const int64_t kc = K - k0 < kb ? K - k0 : kb;
    for (int64_t i1 = 0; i1 < M; i1 += mo) {
      const int64_t m1 = M - i1 < mo ? M - i1 : mo;
      if (pa) ctc_pack_at_f32(6, a + k0 * lda + i1, lda, kc, m1, kb, ap);
      const int64_t nw = tb ? 16 : 16 * CTC_NP_neon;   /* the columns packed together */
      for (int64_t j0 = 0; j0 < N; j0 += nw) {
        const int64_t nj = N - j0 < nw ? N - j0 : nw;
        if (!pk && tb) ctc_pack_b16_neon(b, ldb, k0, kc, j0, (int)nj, bp);
        else if (!pk) ctc_pack_bn_neon(b, ldb, k0, kc, j0, nj, kb, bp);
        for (int64_t i0 = i1; i0 < i1 + m1; i0 += mb) {
          const int64_t mc = i1 + m1 - i0 < mb ? i1 + m1 - i0 : mb;
          for (int64_t p = 0; p * 16 < nj; p++) {
            const int nr = nj - p * 16 < 16 ? (int)(nj - p * 16) : 16;
            const float *bpp = pk ? pk + k0 * ldp + ((jp + j0) / 16 + p) * kc * 16 : bp + p * kb * 16;
            for (int64_t i = i0; i < i0 + mc; i += 6) {
              const int mr = i0 + mc - i < 6 ? (int)(i0 + mc - i) : 6;
              const float *ai = pa ? ap + (i - i1) / 6 * ars : ta ? a + k0 * lda + i : a + i * ars + k0;
              const int64_t rs = pa ? 1 : ars;
              float *ci = c + i * ldc + j0 + p * 16;
              const int add = acc || k0 > 0;
              if (mr > 4) ctc_gemm_tile16_neon(6, 128, kc, ai, rs, aks, mr, bpp, ci, ldc, nr, add);
              else if (mr > 2) ctc_gemm_tile16_neon(4, 128, kc, ai, rs, aks, mr, bpp, ci, ldc, nr, add);   /* a last, shorter tile */
              else if (mr == 2) ctc_gemm_tile16_neon(2, 128, kc, ai, rs, aks, mr, bpp, ci, ldc, nr, add);
              else ctc_gemm_tile16_neon(1, 128, kc, ai, rs, aks, mr, bpp, ci, ldc, nr, add);
            }
          }
        }
      }
    }
  }
}
static CTC_GEMM_UNUSED void ctc_gemm_neon_f32(int ta, int tb, int acc, int64_t M, int64_t N, int64_t K, const float *a,
                                           int64_t lda, const float *b, int64_t ldb, float *c, int64_t ldc) {
  ctc_gemm_neon_pk_f32(ta, tb, acc, M, N, K, a, lda, b, ldb, NULL, 0, 0, c, ldc);
}
/* c[j] (+ c[j] if acc) = sum over k < K of a[k] op(B)[k, j] for j < N (one row of C: a batch of one, a
 * decode step), B read where it lies (the GEMM would first pack all of it): op(B)[k, j] = b[j * ldb + k]
 * if tb (dot products with 4 of B's rows at a time, each 8 sums in flight), else b[k * ldb + j] (C's
 * row updated by B's rows in k order, 64 columns of it in 16 registers; the last columns through the
 * stack, by the same fused multiply-adds: a column's sum is the same in whichever block it falls) */
static CTC_GEMM_UNUSED void ctc_gemv_neon_f32(int tb, int acc, int64_t N, int64_t K, const float *a, const float *b,
                                              int64_t ldb, float *c) {
  const int64_t k8 = K / 8 * 8;
  if (tb) {
    for (int64_t j = 0; j < N; j += 4) {
      const int nq = N - j < 4 ? (int)(N - j) : 4;   /* rows of B this pass (the last: fewer) */
      const float *bq[4];
      for (int q = 0; q < 4; q++) bq[q] = b + (j + (q < nq ? q : 0)) * ldb;
      float32x4_t s[4][2];
      for (int q = 0; q < 4; q++) s[q][0] = s[q][1] = vdupq_n_f32(0);
      for (int64_t k = 0; k < k8; k += 8) {
        const float32x4_t x0 = vld1q_f32(a + k), x1 = vld1q_f32(a + k + 4);
#pragma GCC unroll 4
        for (int q = 0; q < 4; q++)
          s[q][0] = vfmaq_f32(s[q][0], x0, vld1q_f32(bq[q] + k)), s[q][1] = vfmaq_f32(s[q][1], x1, vld1q_f32(bq[q] + k + 4));
      }
      for (int q = 0; q < nq; q++) {
        float t = 0;
        for (int64_t k = k8; k < K; k++) t += a[k] * bq[q][k];
        const float32x4_t h = vaddq_f32(s[q][0], s[q][1]);
        const float d = ((vgetq_lane_f32(h, 0) + vgetq_lane_f32(h, 2)) + (vgetq_lane_f32(h, 1) + vgetq_lane_f32(h, 3))) + t;
        c[j + q] = acc ? c[j + q] + d : d;
      }
    }
    return;
  }
  for (int64_t j0 = 0; j0 < N; j0 += 64) {
    const int64_t nj = N - j0 < 64 ? N - j0 : 64, nv = (nj + 3) / 4;   /* vectors: the last may be partial */
    float32x4_t s[16];
    float t[4] = {0, 0, 0, 0};
#pragma GCC unroll 16
    for (int v = 0; v < 16; v++) {
      if (v >= nv) break;
      if (!acc) s[v] = vdupq_n_f32(0);
      else if (4 * v + 4 <= nj) s[v] = vld1q_f32(c + j0 + 4 * v);
      else memcpy(t, c + j0 + 4 * v, sizeof(float) * (size_t)(nj - 4 * v)), s[v] = vld1q_f32(t);
    }
    if (nj == 64)
      for (int64_t k = 0; k < K; k++) {
        const float32x4_t x = vdupq_n_f32(a[k]);
#pragma GCC unroll 16
        for (int v = 0; v < 16; v++) s[v] = vfmaq_f32(s[v], x, vld1q_f32(b + k * ldb + j0 + 4 * v));
      }
    else
      for (int64_t k = 0; k < K; k++) {
        const float32x4_t x = vdupq_n_f32(a[k]);
        const float *bk = b + k * ldb + j0;
        for (int v = 0; v < nv; v++)
          if (4 * v + 4 <= nj) s[v] = vfmaq_f32(s[v], x, vld1q_f32(bk + 4 * v));
          else {   /* the last columns, zeros past them */
            float r[4] = {0, 0, 0, 0};
            memcpy(r, bk + 4 * v, sizeof(float) * (size_t)(nj - 4 * v));
            s[v] = vfmaq_f32(s[v], x, vld1q_f32(r));
          }
      }
#pragma GCC unroll 16
    for (int v = 0; v < 16; v++) {
      if (v >= nv) break;
      if (4 * v + 4 <= nj) vst1q_f32(c + j0 + 4 * v, s[v]);
      else vst1q_f32(t, s[v]), memcpy(c + j0 + 4 * v, t, sizeof(float) * (size_t)(nj - 4 * v));
    }
  }
}
/* ---- stride-1 (and, over the input's phases, stride-2) f32 convolutions as implicit GEMMs on NEON:
 * the AVX2 ones' structure (the tiles of ctc_gemm_neon_pk_f32) */
#define CTC_CONV_PIX_f32 1   /* ctc_conv_pix_f32 is in (linalg_c.c's conv_implicit) */
/* B's panel [kc][16] of pixels [p0, p0 + 16) over the rows at off/tap (0 where a tap falls in the
 * padding: those lanes are not read) */
static inline void ctc_pack_bpix16_neon(const ctc_pix *s, const int64_t *off, const unsigned char *tap, int64_t kc,
                                        int64_t p0, float *restrict bp) {
  ctc_pix16 h;
  ctc_pix16_at(s, p0, &h);
  for (int64_t k = 0; k < kc; k++) {
    const unsigned m = s->KH ? h.tap[tap[k]] : 0xffffu;
    const float *x = h.x + off[k];
    float *d = bp + k * 16;
    if (m == 0xffffu)
      for (int v = 0; v < 4; v++) vst1q_f32(d + 4 * v, vld1q_f32(x + 4 * v));
    else
      for (int l = 0; l < 16; l++) d[l] = m >> l & 1 ? x[l] : 0.0f;
  }
}
/* y[n, i, oh, ow] for i < M and the pixels p in [p0, p1) (multiples of 16) = sum over k < K of
 * a[i * K + k] s[k, p], y [N, M, H, W]: as the AVX-512 ctc_conv_pix_f32, with ctc_gemm_neon_f32's
 * K blocks and 6x16 tiles, a panel of 16 pixels packed at a time. */
static inline void ctc_conv_pix_f32(const float *a, const ctc_pix *s, int64_t M, int64_t K, float *y, int64_t p0,
                                    int64_t p1) {
  _Alignas(64) float bp[512 * 16];
  int64_t off[512];
  unsigned char tap[512];
  const int64_t HW = s->H * s->W;
  const int64_t kb = ctc_gemm_kb_neon(0, K);
  for (int64_t k0 = 0; k0 < K; k0 += kb) {
    const int64_t kc = K - k0 < kb ? K - k0 : kb;
    ctc_pix_rows_at(s, k0, kc, off, tap);
    for (int64_t j = p0; j < p1; j += 16) {
      ctc_pack_bpix16_neon(s, off, tap, kc, j, bp);
      float *yj = y + j / HW * M * HW + j % HW;   /* pixels j .. j + 15 of channel 0 */
      for (int64_t i = 0; i < M; i += 6) {
        const int mr = M - i < 6 ? (int)(M - i) : 6;
        const float *ai = a + i * K + k0;
        float *ci = yj + i * HW;
        const int add = k0 > 0;
        if (mr > 4) ctc_gemm_tile16_neon(6, 32, kc, ai, K, 1, mr, bp, ci, HW, 16, add);
        else if (mr > 2) ctc_gemm_tile16_neon(4, 32, kc, ai, K, 1, mr, bp, ci, HW, 16, add);
        else if (mr == 2) ctc_gemm_tile16_neon(2, 32, kc, ai, K, 1, mr, bp, ci, HW, 16, add);
        else ctc_gemm_tile16_neon(1, 32, kc, ai, K, 1, mr, bp, ci, HW, 16, add);
      }
    }
  }
}
#define CTC_CONV_WINO_f32 1   /* ctc_conv_wino_f32 is in (linalg_c.c's conv_wino) */
/* ---- 3x3 stride-1 f32 convolutions by Winograd's F(2x2, 3x3) on NEON: the AVX2 helpers' structure
 * (see there) with 4 lanes: runs of up to 4 tiles of a row, panels of 16 tiles and
 * ctc_gemm_tile16_neon's 6x16 tiles; each transform the same operations in the same order */
#define CTC_WINO_P 16   /* tiles a panel (the GEMM tile's columns) */
#define CTC_WINO_R 6    /* rows a GEMM tile */
#define CTC_WINO_PAD 16  /* as the AVX-512 helpers' */
/* lanes [0, n) of v stored at p: all 4 where n is 4, else through the stack (the lanes past n are
 * another run's) */
static inline void ctc_wino_st_neon(float *p, int64_t n, float32x4_t v) {
  if (n >= 4) {
    vst1q_f32(p, v);
    return;
  }
  if (n == 2) {
    vst1_f32(p, vget_low_f32(v));
    return;
  }
  float t[4];
  vst1q_f32(t, v);
  memcpy(p, t, sizeof(float) * (size_t)n);
}
/* lanes [0, n) from p, 0 in the others */
static inline float32x4_t ctc_wino_ld_neon(const float *p, int64_t n) {
  if (n >= 4) return vld1q_f32(p);
  if (n == 2) return vcombine_f32(vld1_f32(p), vdup_n_f32(0));
  float t[4] = {0, 0, 0, 0};
  memcpy(t, p, sizeof(float) * (size_t)n);
  return vld1q_f32(t);
}
/* t[j] lane l = p[l rs + j] (j < 9) for the rows l < n of 9 floats, 0 for the others: two 4x4
 * transposes (trn1/trn2 on 32-bit, then 64-bit elements) and the ninth floats */
static inline void ctc_wino_taps_neon(const float *p, int64_t rs, int64_t n, float32x4_t *t) {
  float32x4_t r[2][4];
  float c[4] = {0, 0, 0, 0};
  for (int l = 0; l < 4; l++)
    if (l < n) r[0][l] = vld1q_f32(p + l * rs), r[1][l] = vld1q_f32(p + l * rs + 4), c[l] = p[l * rs + 8];
    else r[0][l] = r[1][l] = vdupq_n_f32(0);
  for (int h = 0; h < 2; h++) {
    const float64x2_t t0 = vreinterpretq_f64_f32(vtrn1q_f32(r[h][0], r[h][1]));
    const float64x2_t t1 = vreinterpretq_f64_f32(vtrn2q_f32(r[h][0], r[h][1]));
    const float64x2_t t2 = vreinterpretq_f64_f32(vtrn1q_f32(r[h][2], r[h][3]));
    const float64x2_t t3 = vreinterpretq_f64_f32(vtrn2q_f32(r[h][2], r[h][3]));
    t[4 * h] = vreinterpretq_f32_f64(vtrn1q_f64(t0, t2)), t[4 * h + 1] = vreinterpretq_f32_f64(vtrn1q_f64(t1, t3));
    t[4 * h + 2] = vreinterpretq_f32_f64(vtrn2q_f64(t0, t2)), t[4 * h + 3] = vreinterpretq_f32_f64(vtrn2q_f64(t1, t3));
  }
  t[8] = vld1q_f32(c);
}
/* U[e][m][k] = (G g G^T)[e] as the AVX-512 helper's, 4 k at a time (w's rows of 9 taps transposed) */
static inline void ctc_wino_u_f32(const float *w, int64_t M, int64_t K, int flip, int64_t m, float *restrict U) {
  const float32x4_t h = vdupq_n_f32(0.5f);
  for (int64_t k = 0; k < K; k += 4) {
    const int64_t nk = K - k < 4 ? K - k : 4;
    float32x4_t g[3][3], t[4][3], tap[9];
    ctc_wino_taps_neon(flip ? w + (k * M + m) * 9 : w + (m * K + k) * 9, flip ? M * 9 : 9, nk, tap);
    for (int a = 0; a < 3; a++)
      for (int b = 0; b < 3; b++) g[a][b] = tap[flip ? 8 - (3 * a + b) : 3 * a + b];
    for (int b = 0; b < 3; b++) {   /* t = G g */
      const float32x4_t s = vaddq_f32(g[0][b], g[2][b]);
      t[0][b] = g[0][b], t[3][b] = g[2][b];
      t[1][b] = vmulq_f32(h, vaddq_f32(s, g[1][b]));
      t[2][b] = vmulq_f32(h, vsubq_f32(s, g[1][b]));
    }
    for (int a = 0; a < 4; a++) {   /* t G^T */
      const float32x4_t s = vaddq_f32(t[a][0], t[a][2]);
      float *u = U + (4 * a * M + m) * K + k;
      ctc_wino_st_neon(u, nk, t[a][0]);
      ctc_wino_st_neon(u + M * K, nk, vmulq_f32(h, vaddq_f32(s, t[a][1])));
      ctc_wino_st_neon(u + 2 * M * K, nk, vmulq_f32(h, vsubq_f32(s, t[a][1])));
      ctc_wino_st_neon(u + 3 * M * K, nk, t[a][2]);
    }
  }
}
/* d[c] lane l = row[base + 2 l + c], c < 4, l < 4 (0 outside the image's columns [0, W)): two
 * deinterleaving loads. at (a constant): 0 the columns [base, base + 10) inside the image, loaded
 * from base and base + 2; 1 a whole run at the left edge (base -1) and 2 at the right (base W - 9),
 * from inside the row, the padding's column shifted in (W at least 10); 4 the whole row of an
 * image 8 columns wide (one run of 4), 5 of one 4 wide (a run of 2), the same way; 3 any other,
 * from a copy with zeros outside the image */
static inline __attribute__((always_inline)) void ctc_wino_row_neon(const float *row, int64_t base, int64_t W,
                                                                    const int at, float32x4_t *d) {
  const float32x4_t z = vdupq_n_f32(0);
  if (at == 1) {   /* columns 0..7 and 2..9: (-1, 1, 3, 5) is the odd columns of the first shifted */
    const float32x4x2_t a = vld2q_f32(row), b = vld2q_f32(row + 2);
    d[0] = vextq_f32(z, a.val[1], 3), d[1] = a.val[0], d[2] = a.val[1], d[3] = b.val[0];
    return;
  }
  if (at == 2) {   /* columns W - 10..W - 3 and W - 8..W - 1: (W - 6, W - 4, W - 2, W) the second's even shifted */
    const float32x4x2_t a = vld2q_f32(row + W - 10), b = vld2q_f32(row + W - 8);
    d[0] = a.val[1], d[1] = b.val[0], d[2] = b.val[1], d[3] = vextq_f32(b.val[0], z, 1);
    return;
  }
  if (at == 4) {   /* columns 0..7 */
    const float32x4x2_t a = vld2q_f32(row);
    d[0] = vextq_f32(z, a.val[1], 3), d[1] = a.val[0], d[2] = a.val[1], d[3] = vextq_f32(a.val[0], z, 1);
    return;
  }
  if (at == 5) {   /* columns 0..3 in lanes 0 and 1 */
    const float32x2x2_t a = vld2_f32(row);
    const float32x4_t ev = vcombine_f32(a.val[0], vdup_n_f32(0)), od = vcombine_f32(a.val[1], vdup_n_f32(0));
    d[0] = vextq_f32(z, od, 3), d[1] = ev, d[2] = od, d[3] = vextq_f32(ev, z, 1);
    return;
  }
  float t[10];
  const float *p = row + base;
  if (at == 3) {
    const int64_t lo = base < 0 ? -base : 0, hi = W - base < 10 ? W - base : 10;
    memset(t, 0, sizeof t);
    if (hi > lo) memcpy(t + lo, row + base + lo, sizeof(float) * (size_t)(hi - lo));
    p = t;
  }
  const float32x4x2_t a = vld2q_f32(p), b = vld2q_f32(p + 2);
  d[0] = a.val[0], d[1] = a.val[1], d[2] = b.val[0], d[3] = b.val[1];
}
/* o = e B of a row e of B^T d: a row of B^T d B */
static inline void ctc_wino_eb(const float32x4_t *e, float32x4_t *o) {
  o[0] = vsubq_f32(e[0], e[2]), o[1] = vaddq_f32(e[1], e[2]);
  o[2] = vsubq_f32(e[2], e[1]), o[3] = vsubq_f32(e[1], e[3]);
}
/* Rows [r0, r1) of B^T d B of one run's L tiles, channels [k0, k0 + nk) (xr: channel k0's image row
 * 2 ty, the run's row 1; row 0 read where ok0, row 3 where ok3; v: channel k0's place in plane 0,
 * vk floats a channel), a row of B^T d at a time as the AVX2 helper's; at (a constant): how a row
 * is loaded (ctc_wino_row_neon) */
static inline __attribute__((always_inline)) void ctc_wino_in_run_neon(const float *xr, int64_t HW, int64_t W,
                                                                       int64_t base, int64_t nk, int ok0, int ok3,
                                                                       const int at, float *v, int64_t vk,
                                                                       int64_t VS, int64_t L, int r0, int r1) {
  for (int64_t k = 0; k < nk; k++) {
    const float *xk = xr + k * HW;
    float *vc = v + k * vk;
    float32x4_t a[4], b[4], e[4];
    ctc_wino_row_neon(xk, base, W, at, a);
    ctc_wino_row_neon(xk + W, base, W, at, b);
    for (int r = r0; r < r1; r++) {
      for (int c = 0; c < 4; c++) e[c] = vdupq_n_f32(0);   /* (rows 0 and 3 in the padding) */
      if ((r == 0 && ok0) || (r == 3 && ok3)) ctc_wino_row_neon(r == 0 ? xk - W : xk + 2 * W, base, W, at, e);
      for (int c = 0; c < 4; c++)
        e[c] = r == 0 ? vsubq_f32(e[c], b[c]) : r == 1 ? vaddq_f32(a[c], b[c])
             : r == 2 ? vsubq_f32(b[c], a[c]) : vsubq_f32(a[c], e[c]);
      float32x4_t o[4];
      ctc_wino_eb(e, o);
      for (int c = 0; c < 4; c++) ctc_wino_st_neon(vc + (4 * r + c) * VS, L, o[c]);
    }
  }
}
/* V[e][p][k][16] (panels of 16 tiles; rows: V[e][k][B]) = (B^T d B)[e], channels [k0, k1), runs
 * of up to 4 tiles inside a vector of a panel */
static inline void ctc_wino_in_f32(const float *x, int64_t K, int64_t H, int64_t W, int64_t T, int64_t t0, int64_t B,
                                   int64_t k0, int64_t k1, int rows, int r0, int r1, float *restrict V) {
  const int64_t TW = W / 2, TH = H / 2, HW = H * W, VS = K * B + CTC_WINO_PAD;   /* a plane's floats */
  ctc_wino_run u = ctc_wino_run_at(t0, t0, T, TH, TW, 4);
  for (int64_t t = t0; t < t0 + B && t < T; t += u.L, u = ctc_wino_run_after(u, t, T, TH, TW, 4 - (t - t0) % 4)) {
    const int64_t base = 2 * u.tx - 1, tb = u.tb;
    const float *xr = x + (u.n * K + k0) * HW + 2 * u.ty * W;
    float *v = rows ? V + k0 * B + tb : V + (tb / 16 * K + k0) * 16 + tb % 16;
    const int64_t vk = rows ? B : 16;
    const int ok0 = u.ty > 0, ok3 = 2 * u.ty + 2 < H;
    const int64_t nk = k1 - k0, L = u.L;
    if (base >= 0 && base + 10 <= W) ctc_wino_in_run_neon(xr, HW, W, base, nk, ok0, ok3, 0, v, vk, VS, L, r0, r1);
    else if (L == 4 && W >= 10 && base < 0) ctc_wino_in_run_neon(xr, HW, W, base, nk, ok0, ok3, 1, v, vk, VS, L, r0, r1);
    else if (L == 4 && W >= 10) ctc_wino_in_run_neon(xr, HW, W, base, nk, ok0, ok3, 2, v, vk, VS, L, r0, r1);
    else if (L == 4 && W == 8) ctc_wino_in_run_neon(xr, HW, W, base, nk, ok0, ok3, 4, v, vk, VS, L, r0, r1);
    else if (L == 2 && W == 4) ctc_wino_in_run_neon(xr, HW, W, base, nk, ok0, ok3, 5, v, vk, VS, L, r0, r1);
    else ctc_wino_in_run_neon(xr, HW, W, base, nk, ok0, ok3, 3, v, vk, VS, L, r0, r1);
  }
}
/* y = (A^T Mb A) for rows [m0, m1) of y [N, M, H, W], runs of up to 4 tiles of a row (a row of
 * outputs' two columns interleaved by one store) */
static inline void ctc_wino_out_f32(const float *restrict Mb, int64_t M, int64_t H, int64_t W, int64_t t0, int64_t nt,
                                    int64_t B, int64_t m0, int64_t m1, float *y) {
  const int64_t TW = W / 2, TH = H / 2, HW = H * W, PS = M * B + CTC_WINO_PAD;
  ctc_wino_run u = ctc_wino_run_at(t0, t0, t0 + nt, TH, TW, 4);
  for (int64_t t = t0; t < t0 + nt; t += u.L, u = ctc_wino_run_after(u, t, t0 + nt, TH, TW, 4)) {
    float *yr = y + (u.n * M + m0) * HW + 2 * u.ty * W + 2 * u.tx;
    for (int64_t m = m0; m < m1; m++) {
      const float *p = Mb + m * B + u.tb;
      float32x4_t s[4][2], c[2][2];   /* c[i][j]: output row i, column j of each tile */
      for (int a = 0; a < 4; a++) {   /* s = v A */
        float32x4_t q[4];
        for (int b = 0; b < 4; b++) q[b] = ctc_wino_ld_neon(p + (4 * a + b) * PS, u.L);
        s[a][0] = vaddq_f32(vaddq_f32(q[0], q[1]), q[2]);
        s[a][1] = vsubq_f32(vsubq_f32(q[1], q[2]), q[3]);
      }
      for (int j = 0; j < 2; j++) {   /* A^T s */
        c[0][j] = vaddq_f32(vaddq_f32(s[0][j], s[1][j]), s[2][j]);
        c[1][j] = vsubq_f32(vsubq_f32(s[1][j], s[2][j]), s[3][j]);
      }
      float *ym = yr + (m - m0) * HW;
      for (int i = 0; i < 2; i++) {   /* output row 2 ty + i */
        const float32x4x2_t o = {{c[i][0], c[i][1]}};
        if (u.L == 4) {
          vst2q_f32(ym + i * W, o);
        } else if (u.L == 2) {
          const float32x2x2_t h = {{vget_low_f32(c[i][0]), vget_low_f32(c[i][1])}};
          vst2_f32(ym + i * W, h);
        } else {
          float r[8];
          vst2q_f32(r, o);
          memcpy(ym + i * W, r, sizeof(float) * (size_t)(2 * u.L));
        }
      }
    }
  }
}
/* o = A (a, b) with A 4x2: the output gradient's tile f as A f A^T, its columns, then the rows */
static inline void ctc_wino_ta(float32x4_t a, float32x4_t b, float32x4_t *o) {
  o[0] = a, o[1] = vaddq_f32(a, b), o[2] = vsubq_f32(a, b), o[3] = vsubq_f32(vdupq_n_f32(0), b);
}
/* The weight gradient's Z[e][m][B] = A f A^T as the AVX-512 helper's, runs of up to 4 tiles of a row */
static inline void ctc_wino_dy_f32(const float *g, int64_t M, int64_t H, int64_t W, int64_t t0, int64_t nt, int64_t B,
                                   int64_t m0, int64_t m1, int r0, int r1, float *restrict Z) {
  const int64_t TW = W / 2, TH = H / 2, HW = H * W, ZS = M * B + CTC_WINO_PAD;   /* a plane's floats */
  ctc_wino_run u = ctc_wino_run_at(t0, t0, t0 + nt, TH, TW, 4);
  for (int64_t t = t0; t < t0 + nt; t += u.L, u = ctc_wino_run_after(u, t, t0 + nt, TH, TW, 4)) {
    const float *gr = g + (u.n * M + m0) * HW + 2 * u.ty * W + 2 * u.tx;
    for (int64_t m = m0; m < m1; m++) {
      float32x4_t f[2][2], tc[2][4];
      for (int i = 0; i < 2; i++) {   /* the run's 2 L columns of output gradient row 2 ty + i */
        const float *p = gr + (m - m0) * HW + i * W;
        if (u.L == 2) {
          const float32x2x2_t h = vld2_f32(p);
          f[i][0] = vcombine_f32(h.val[0], vdup_n_f32(0)), f[i][1] = vcombine_f32(h.val[1], vdup_n_f32(0));
          continue;
        }
        float r[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        if (u.L < 4) memcpy(r, p, sizeof(float) * (size_t)(2 * u.L)), p = r;
        const float32x4x2_t q = vld2q_f32(p);
        f[i][0] = q.val[0], f[i][1] = q.val[1];
      }
      for (int c = 0; c < 2; c++) ctc_wino_ta(f[0][c], f[1][c], tc[c]);   /* A f */
      float *zr = Z + m * B + u.tb;
      for (int r = r0; r < r1; r++) {   /* row r of A f A^T */
        float32x4_t o[4];
        ctc_wino_ta(tc[0][r], tc[1][r], o);
        for (int q = 0; q < 4; q++) ctc_wino_st_neon(zr + (4 * r + q) * ZS, u.L, o[q]);
      }
    }
  }
}
/* The rows of the GEMM tile that a loop over M's rows in steps of 6 computes at row m: from *m,
 * their count. Where the last tile would have 1 or 2 rows, the last 7 or 8 are a tile of 4 and
 * one of 3 or 4: a tile of 2 rows sums into 4 registers, too few to hide the FMA's latency (the
 * products of 32 channels with AVX2 76 -> 87 GFLOP/s on Zen 4). Each row's sums are the same. */
static inline int ctc_wino_rows_neon(int64_t M, int64_t *m) {
  const int64_t left = M - *m;
  if (M > 6 && (left == 7 || left == 8)) return 4;
  if (M > 6 && left <= 2) {
    *m -= 2;
    return (int)left + 2;
  }
  return left < 6 ? (int)left : 6;
}
/* Mb[e][m][B] for the rows of M at m (ctc_wino_rows_neon) and the block's panel p: U[e] V[e, p]
 * over all K */
static inline void ctc_wino_gemm_f32(const float *U, const float *V, int64_t M, int64_t K, int64_t B, int64_t nt,
                                     int64_t e, int64_t p, int64_t m, float *Mb) {
  const int mr = ctc_wino_rows_neon(M, &m);
  const int nr = nt - p * 16 < 16 ? (int)(nt - p * 16) : 16;
  const float *a = U + (e * M + m) * K, *bp = V + e * (K * B + CTC_WINO_PAD) + p * K * 16;
  float *c = Mb + e * (M * B + CTC_WINO_PAD) + m * B + p * 16;
  if (mr > 4) ctc_gemm_tile16_neon(6, 32, K, a, K, 1, mr, bp, c, B, nr, 0);
  else if (mr > 2) ctc_gemm_tile16_neon(4, 32, K, a, K, 1, mr, bp, c, B, nr, 0);
  else if (mr == 2) ctc_gemm_tile16_neon(2, 32, K, a, K, 1, mr, bp, c, B, nr, 0);
  else ctc_gemm_tile16_neon(1, 32, K, a, K, 1, mr, bp, c, B, nr, 0);
}
/* P[e][m][k] (+)= Z[e] V[e]^T over the block's tiles, the 16 columns k of panel q */
static inline void ctc_wino_wgemm_f32(const float *Z, const float *V, int64_t M, int64_t K, int64_t B, int64_t nt,
                                      int64_t e, int64_t q, int add, float *P) {
  _Alignas(64) float bp[512 * 16];
  const int nr = K - q * 16 < 16 ? (int)(K - q * 16) : 16;
  ctc_pack_b16_neon(V + e * (K * B + CTC_WINO_PAD), B, 0, nt, q * 16, nr, bp);
  for (int64_t m6 = 0; m6 < M; m6 += 6) {
    int64_t m = m6;
    const int mr = ctc_wino_rows_neon(M, &m);
    const float *a = Z + e * (M * B + CTC_WINO_PAD) + m * B;
    float *c = P + (e * M + m) * K + q * 16;
    if (mr > 4) ctc_gemm_tile16_neon(6, 32, nt, a, B, 1, mr, bp, c, K, nr, add);
    else if (mr > 2) ctc_gemm_tile16_neon(4, 32, nt, a, B, 1, mr, bp, c, K, nr, add);
    else if (mr == 2) ctc_gemm_tile16_neon(2, 32, nt, a, B, 1, mr, bp, c, K, nr, add);
    else ctc_gemm_tile16_neon(1, 32, nt, a, B, 1, mr, bp, c, K, nr, add);
  }
}
#define CTC_WINO_WQ 16   /* weight gradient: channels k a GEMM panel */
#endif

#ifdef CTC_CONV_WINO_f32
/* ---- the Winograd convolution over the helpers of the instruction set compiled (AVX-512, AVX2, NEON) */
#ifdef _OPENMP
#include <omp.h>
#define CTC_WINO_FOR _Pragma("omp for schedule(static)")
#define CTC_WINO_BARRIER _Pragma("omp barrier")
#else
#define CTC_WINO_FOR
#define CTC_WINO_BARRIER
#endif
#include <unistd.h>
/* The tiles a block where its transforms take `bytes` a tile (64 (K + M), or a thread's share of
 * them): at most B (the plan's room), and where the C library tells the size of a core's L2 cache,
 * as many as fill half of it, in panels of 32 (at least one). A Zen 3 (L2 512 KiB, 1 thread):
 * 32 channels on 32x32 images forward 7.2 -> 6.2 ms, weight gradient 10.4 -> 6.7 ms, from 256
 * tiles (1 MiB) to 64. Every sum is made the same way at any block of whole panels: a tile's
 * over the channels, and the weight gradient's over the tiles 32 at a time, in order. */
static inline int64_t ctc_wino_fit(int64_t B, int64_t bytes) {
#ifdef _SC_LEVEL2_CACHE_SIZE
  const long l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
  int64_t b = l2 > 0 ? l2 / 2 / bytes / 32 * 32 : B;
  if (b < 32) b = 32;
  return b < B ? b : B;
#else
  (void)bytes;
  return B;
#endif
}
/* The steps of one block of nt tiles from tile t0 (B its planes' tiles): the transforms V of its
 * inputs, their products Mb with U, the outputs; split among the threads if split, else all by
 * the caller */
static inline void ctc_wino_block_f32(const float *x, const float *U, int64_t K, int64_t H, int64_t W, int64_t M,
                                      int64_t t0, int64_t nt, int64_t B, float *V, float *Mb, float *y,
                                      int split) {
  const int64_t np = (nt + CTC_WINO_P - 1) / CTC_WINO_P, NR = (M + CTC_WINO_R - 1) / CTC_WINO_R;
  if (!split) {
    for (int64_t k = 0; k < K; k += 8) ctc_wino_in_f32(x, K, H, W, t0 + nt, t0, B, k, k + 8 < K ? k + 8 : K, 0, 0, 4, V);
    for (int64_t e = 0; e < 16; e++)   /* (the split loop's order, without its divisions: 4% faster on AVX2) */
      for (int64_t p = 0; p < np; p++)
        for (int64_t m = 0; m < M; m += CTC_WINO_R) ctc_wino_gemm_f32(U, V, M, K, B, nt, e, p, m, Mb);
    for (int64_t m = 0; m < M; m += 4) ctc_wino_out_f32(Mb, M, H, W, t0, nt, B, m, m + 4 < M ? m + 4 : M, y);
    return;
  }
  CTC_WINO_FOR
  for (int64_t k = 0; k < K; k += 8) ctc_wino_in_f32(x, K, H, W, t0 + nt, t0, B, k, k + 8 < K ? k + 8 : K, 0, 0, 4, V);
  CTC_WINO_FOR
  for (int64_t j = 0; j < 16 * np * NR; j++)
    ctc_wino_gemm_f32(U, V, M, K, B, nt, j / (np * NR), j / NR % np, j % NR * CTC_WINO_R, Mb);
  CTC_WINO_FOR
  for (int64_t m = 0; m < M; m += 4) ctc_wino_out_f32(Mb, M, H, W, t0, nt, B, m, m + 4 < M ? m + 4 : M, y);
}
/* y [N, M, H, W] = the 3x3 convolution, stride 1, padding 1, of x [N, K, H, W] (H, W even) by
 * w (flip 0: [M, K, 3, 3]; flip 1: [K, M, 3, 3], taps reversed: the input gradient of the
 * convolution by w, x its output gradient), in blocks of at most B tiles (ctc_wino_fit; multiples
 * of 32: whole panels); scratch: U [16, M, K], then room for V [16, K, B + 32] and Mb [16, M, B + 32] floats,
 * 64-byte aligned. Every thread of a parallel region calls it (or one thread). With n threads
 * and B / n at least 32, each thread takes an n-th of the tiles, one run from a multiple of 32
 * (whole images where n divides the batch: the images that the elementwise loops over the batch
 * give the thread), in blocks of B / n tiles (rounded down to 32), their transforms in its own
 * part of V and Mb: no barrier between the steps and no thread reads what another wrote (2 vCPUs
 * on two of a Zen 4's core complexes: the resnet's 3x3 convolutions 4.2 ms a call with the steps
 * split, 1 thread 3.4). Else the steps of each block are split among the threads. Each output is
 * computed the same way whatever the number of threads. */
static inline void ctc_conv_wino_f32(const float *x, const float *w, int flip, int64_t N, int64_t K, int64_t H,
                                     int64_t W, int64_t M, int64_t B, float *scratch, float *y) {
  float *U = scratch, *R = U + 16 * M * K;   /* R: room for (K + M) (B + 32) + 2 CTC_WINO_PAD floats a plane */
  const int64_t T = N * (H / 2) * (W / 2);
  int nth = 1, th = 0;
#ifdef _OPENMP
  nth = omp_get_num_threads(), th = omp_get_thread_num();
#endif
  CTC_WINO_FOR
  for (int64_t m = 0; m < M; m++) ctc_wino_u_f32(w, M, K, flip, m, U);
  const int64_t F = ctc_wino_fit(B, 64 * (K + M)), bn = B / nth / 32 * 32, b = bn < F ? bn : F,
                own = 16 * ((K + M) * b + 2 * CTC_WINO_PAD);
  if (nth > 1 && b >= 32 && nth * own <= 16 * ((K + M) * (B + 32) + 2 * CTC_WINO_PAD)) {
    float *V = R + th * own, *Mb = V + 16 * (K * b + CTC_WINO_PAD);
    const int64_t lo = T * th / nth / 32 * 32, hi = th == nth - 1 ? T : T * (th + 1) / nth / 32 * 32;
    for (int64_t t0 = lo; t0 < hi; t0 += b) ctc_wino_block_f32(x, U, K, H, W, M, t0, hi - t0 < b ? hi - t0 : b, b, V, Mb, y, 0);
    return;
  }
  for (int64_t t0 = 0; t0 < T; t0 += F)
    ctc_wino_block_f32(x, U, K, H, W, M, t0, T - t0 < F ? T - t0 : F, F, R, R + 16 * (K * F + CTC_WINO_PAD), y,
                       nth > 1);
}
/* dw[m, k] (G^T P G) for rows [m0, m1): the weight gradient's last step, 16 k at a time */
static inline void ctc_wino_dw_f32(const float *P, int64_t M, int64_t K, int64_t m0, int64_t m1, float *dw) {
  for (int64_t m = m0; m < m1; m++)
    for (int64_t k0 = 0; k0 < K; k0 += 16) {
      const int64_t nk = K - k0 < 16 ? K - k0 : 16;
      float s[4][3][16], o[9][16];
      for (int r = 0; r < 4; r++) {   /* s = P G */
        const float *p0 = P + ((4 * r) * M + m) * K + k0, *p1 = p0 + M * K, *p2 = p1 + M * K, *p3 = p2 + M * K;
        for (int l = 0; l < 16; l++) {
          const float a = l < nk ? p0[l] : 0, b = l < nk ? p1[l] : 0, c = l < nk ? p2[l] : 0, d = l < nk ? p3[l] : 0;
          const float h = 0.5f * (b + c);
          s[r][0][l] = a + h, s[r][1][l] = 0.5f * (b - c), s[r][2][l] = h + d;
        }
      }
      for (int j = 0; j < 3; j++)   /* G^T s */
        for (int l = 0; l < 16; l++) {
          const float h = 0.5f * (s[1][j][l] + s[2][j][l]);
          o[j][l] = s[0][j][l] + h, o[3 + j][l] = 0.5f * (s[1][j][l] - s[2][j][l]), o[6 + j][l] = h + s[3][j][l];
        }
      for (int64_t l = 0; l < nk; l++)
        for (int t = 0; t < 9; t++) dw[(m * K + k0 + l) * 9 + t] = o[t][l];
    }
}
/* dw [M, K, 3, 3] = the weight gradient of the 3x3 convolution, stride 1, padding 1, of x [N, K, H, W]
 * (H, W even) with output gradient g [N, M, H, W], in blocks of at most B tiles; scratch: P [16, M, K],
 * V [16, K B + CTC_WINO_PAD], Z [16, M B + CTC_WINO_PAD] floats. As ctc_conv_wino_f32: every thread
 * of a region calls it, each sum made the same way whatever their number (the blocks added in order).
 * With 2 to 4 threads, each takes rows of the 4x4 transforms (planes e of its own): it transforms
 * every block's inputs and output gradients but keeps only its rows, and sums its planes' products
 * over all the blocks, with no barrier until the last step and nothing read that another thread
 * wrote (2 vCPUs on two of a Zen 4's core complexes: the blocks' steps split among the threads took
 * 4.8 ms a call of the bench resnet's, 1 thread 3.5). Else the steps of each block are split. */
static inline void ctc_conv_wino_wgrad_f32(const float *x, const float *g, int64_t N, int64_t K, int64_t H, int64_t W,
                                           int64_t M, int64_t B, float *scratch, float *dw) {
  const int64_t T = N * (H / 2) * (W / 2), NQ = (K + CTC_WINO_WQ - 1) / CTC_WINO_WQ;
  int nth = 1, th = 0;
#ifdef _OPENMP
  nth = omp_get_num_threads(), th = omp_get_thread_num();
#endif
  /* (with rows, a thread's share of a tile's transforms: the most rows of the 4 a thread takes) */
  B = ctc_wino_fit(B, 16 * (K + M) * (nth >= 2 && nth <= 4 ? (4 + nth - 1) / nth : 4));
  float *P = scratch, *V = P + 16 * M * K, *Z = V + 16 * (K * B + CTC_WINO_PAD);
  if (nth >= 2 && nth <= 4) {
    const int r0 = th * 4 / nth, r1 = (th + 1) * 4 / nth;   /* this thread's rows: planes [4 r0, 4 r1) */
    for (int64_t t0 = 0; t0 < T; t0 += B) {
      const int64_t nt = T - t0 < B ? T - t0 : B;
      for (int64_t k = 0; k < K; k += 8) ctc_wino_in_f32(x, K, H, W, T, t0, B, k, k + 8 < K ? k + 8 : K, 1, r0, r1, V);
      for (int64_t m = 0; m < M; m += 4) ctc_wino_dy_f32(g, M, H, W, t0, nt, B, m, m + 4 < M ? m + 4 : M, r0, r1, Z);
      for (int64_t j = 4 * r0 * NQ; j < 4 * r1 * NQ; j++) ctc_wino_wgemm_f32(Z, V, M, K, B, nt, j / NQ, j % NQ, t0 > 0, P);
    }
    CTC_WINO_BARRIER   /* every plane of P summed */
  } else
    for (int64_t t0 = 0; t0 < T; t0 += B) {
      const int64_t nt = T - t0 < B ? T - t0 : B;
      CTC_WINO_FOR
      for (int64_t k = 0; k < K; k += 8) ctc_wino_in_f32(x, K, H, W, T, t0, B, k, k + 8 < K ? k + 8 : K, 1, 0, 4, V);
      CTC_WINO_FOR
      for (int64_t m = 0; m < M; m += 4) ctc_wino_dy_f32(g, M, H, W, t0, nt, B, m, m + 4 < M ? m + 4 : M, 0, 4, Z);
      CTC_WINO_FOR
      for (int64_t j = 0; j < 16 * NQ; j++) ctc_wino_wgemm_f32(Z, V, M, K, B, nt, j / NQ, j % NQ, t0 > 0, P);
    }
  CTC_WINO_FOR
  for (int64_t m = 0; m < M; m += 4) ctc_wino_dw_f32(P, M, K, m, m + 4 < M ? m + 4 : M, dw);
}
#endif

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define CTC_GEMV_X86_f32 1
/* the 8 lanes of s added pairwise, then t */
static inline float ctc_gemv_sum8_f32(__m256 s, float t) {
  const __m128 h = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));   /* lanes l + (l + 4) */
  const __m128 q = _mm_add_ps(h, _mm_movehl_ps(h, h));
  return _mm_cvtss_f32(_mm_add_ss(q, _mm_movehdup_ps(q))) + t;
}
/* c[j] (+ c[j] if acc) = sum over k < K of a[k] op(B)[k, j] for j < N: op(B)[k, j] = b[j * ldb + k] if tb,
 * else b[k * ldb + j] */
static void ctc_gemv_x86_f32(int tb, int acc, int64_t N, int64_t K, const float *a, const float *b, int64_t ldb,
                             float *c) {
  const int64_t k8 = K / 8 * 8;
  if (tb) {
    for (int64_t j = 0; j < N; j += 4) {
      const int nq = N - j < 4 ? (int)(N - j) : 4;   /* rows of B this pass (the last: fewer) */
      const float *bq[4];
      for (int q = 0; q < 4; q++) bq[q] = b + (j + (q < nq ? q : 0)) * ldb;
      __m256 s[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
      for (int64_t k = 0; k < k8; k += 8) {
        const __m256 x = _mm256_loadu_ps(a + k);
#pragma GCC unroll 4
        for (int q = 0; q < 4; q++) s[q] = _mm256_fmadd_ps(x, _mm256_loadu_ps(bq[q] + k), s[q]);
      }
      for (int q = 0; q < nq; q++) {
        float t = 0;
        for (int64_t k = k8; k < K; k++) t += a[k] * bq[q][k];
        const float d = ctc_gemv_sum8_f32(s[q], t);
        c[j + q] = acc ? c[j + q] + d : d;
      }
    }
    return;
  }
  for (int64_t j0 = 0; j0 < N; j0 += 64) {
    const int64_t nj = N - j0 < 64 ? N - j0 : 64;
    __m256i m[8];   /* each vector's columns inside the row */
    for (int v = 0; v < 8; v++) {
      const int64_t n = nj - 8 * v;
      m[v] = _mm256_cmpgt_epi32(_mm256_set1_epi32(n < 0 ? 0 : n > 8 ? 8 : (int)n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    }
    __m256 s[8];
#pragma GCC unroll 8
    for (int v = 0; v < 8; v++) s[v] = acc ? _mm256_maskload_ps(c + j0 + 8 * v, m[v]) : _mm256_setzero_ps();
    if (nj == 64)
      for (int64_t k = 0; k < K; k++) {
        const __m256 x = _mm256_broadcast_ss(a + k);
#pragma GCC unroll 8
        for (int v = 0; v < 8; v++) s[v] = _mm256_fmadd_ps(x, _mm256_loadu_ps(b + k * ldb + j0 + 8 * v), s[v]);
      }
    else   /* the last columns: masked loads (lanes past the row read nothing) */
      for (int64_t k = 0; k < K; k++) {
        const __m256 x = _mm256_broadcast_ss(a + k);
#pragma GCC unroll 8
        for (int v = 0; v < 8; v++)
          if (8 * v < nj) s[v] = _mm256_fmadd_ps(x, _mm256_maskload_ps(b + k * ldb + j0 + 8 * v, m[v]), s[v]);
      }
#pragma GCC unroll 8
    for (int v = 0; v < 8; v++)
      if (8 * v + 8 <= nj) _mm256_storeu_ps(c + j0 + 8 * v, s[v]);
      else if (8 * v < nj) _mm256_maskstore_ps(c + j0 + 8 * v, m[v], s[v]);
  }
}
#endif

#if defined(CTC_GEMM_X86_f32) && defined(CTC_HAVE_CBLAS)
#define CTC_GEMM_OWN_f32(m, n) ((m) >= CTC_GEMM_X86_MIN_ROWS && (n) >= CTC_GEMM_X86_MIN_COLS)
#elif defined(CTC_GEMM_X86_f32)
#define CTC_GEMM_OWN_f32(m, n) ((m) > 1)
#endif

#endif /* CTC_GEMM_SIMD_H */
