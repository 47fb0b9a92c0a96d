/* attn_c.c - the C target's fused attention (ops.def's ATTENTION, ATTENTION_BWD; made
 * by ir/attn.c): the microkernels' text, written into model.c when an entry uses them
 * (Kernels.attention), and the kernel IR call (kernels/attention.c) as C.
 *
 * Forward, per (batch, block of query rows: ctc_attn_qb), an OpenMP iteration: for each
 * block of CTC_ATTN_KB keys (those at or before the block's last row when causal), the
 * block's scores s = q k^T (one ctc_matmul_block call: ctc's GEMM, or OpenBLAS), scaled and
 * masked, then an online softmax per row: the running maximum m and sum l, the row of o
 * rescaled by exp(m_old - m_new), and o += p v (another GEMM call); at the end o /= l. Only
 * the QB x KB block of scores exists (on the stack), never the T x T matrix.
 * Backward, per batch (an OpenMP iteration; dk and dv of a head are summed over its query
 * blocks in order, so results do not depend on the thread count): for each query block, a
 * first pass over the keys gives each row's maximum and sum (its logsumexp), di = g . o per
 * row, then per key block p = exp(s - lse), dv += p^T g, dp = g v^T, ds = p (dp - di) * scale,
 * dq += ds k, dk += ds^T q (GEMM calls). When the keys fit one block (T <= CTC_ATTN_KB
 * causal or not) the first pass's scores and exp(s - m) are kept, so the scores are
 * computed once per query block. Operands are read through strides (views of a fused
 * projection), the results are contiguous. Row maxima, sums and g . o run in 16 lanes, f32's exp
 * is ctc_attn_expn_f32 (ctc_exp_f32's bits for its arguments, all <= 0).
 * Under autocast (rnd, IR_ATTN_ROUND_*) the scores are rounded to bf16 where the chain rounds
 * them, p = e / l is rounded once the row's sum is known (a row's keys in several blocks: a first
 * pass over them for its maximum and sum, and backward a pass for di), and backward
 * rounds each rounding's cotangent, as reverse mode of the unfused chain does (tests/test_autocast.py
 * finds the gradients equal to the unfused ops' bit for bit); the products of operands that hold
 * bf16 values (low) are ctc_matmul_block_bf16's. */
#include <string.h>
#include "cg_int.h"

/* attention's exps (a score less its row's maximum or logsumexp, an old maximum less a new
 * one): ctc_exp_f32's bits for every x <= 0, and a NaN for a NaN, its core ctc_expk_f32 without
 * ctc_exp_f32's clamp of large positive x on the bits and its select of a NaN (which passes through
 * the arithmetic here): a causal attention of 64 heads of 128 x 32 (1 thread, AVX2, Zen 3) 2.46 ->
 * 2.29 ms forward, the exp's loop 0.74 -> 0.54 ms. Below -104 (the rows' padding and masked keys,
 * -inf) the result is 0 without the arithmetic: exp(-104) computed by ctc_expk_f32 underflows, which
 * took 1.35 ns an element against 0.5 (AVX2, Zen 4); the bench llama's attention (8 x 8 heads of
 * 128 x 32, 1 thread) 2.41 -> 2.08 ms forward, 7.38 -> 6.71 ms forward and backward, with the lanes'
 * trees below. tests/test_attention.py compares it with ctc_exp_f32 bit for bit. */
static const char attn_expn_text[] =
    "static inline float ctc_attn_expn_f32(float x) {\n"
    "  /* x < -104 (the rows' padding, -inf; a NaN stays): exp rounds to 0, made so instead of computed\n"
    "   * from ctc_exp_f32's clamp to -104, whose underflowing products took 2.7 times as long */\n"
    "  const int low = x < -104.0f;\n"
    "  const float e = ctc_expk_f32(low ? 0.0f : x);\n"
    "  return low ? 0.0f : e;\n"
    "}\n";

static const char attn_common_text[] =
    "#define CTC_ATTN_QB 64   /* query rows a block, at most */\n"
    "#define CTC_ATTN_KB 256   /* keys a block */\n"
    "/* the blocks' rows: 16 floats past the keys, so that a block's rows are not 1 KiB apart, in a\n"
    " * quarter of L1's sets (AVX2, Zen 4: p^T g over 128 x 32 x 32 blocks 80 -> 85 GFLOP/s) */\n"
    "#define CTC_ATTN_LS (CTC_ATTN_KB + 16)\n"
    "/* query rows a block: 32 under a causal mask (a block's scores reach its last row: fewer of them\n"
    " * past the diagonal), else CTC_ATTN_QB */\n"
    "static inline int64_t ctc_attn_qb(int64_t causal) { return causal ? CTC_ATTN_QB / 2 : CTC_ATTN_QB; }\n"
    "/* how many of keys [j0, j0 + nj) row i sees under a causal mask */\n"
    "static inline int64_t ctc_attn_valid(int64_t i, int64_t j0, int64_t nj) {\n"
    "  return i - j0 + 1 < 0 ? 0 : i - j0 + 1 < nj ? i - j0 + 1 : nj;\n"
    "}\n\n";

/* The blocks' pieces: the scores of rows [0, ni) of qb (rows qr apart) against keys
 * [j0, j0 + nj) of kb (rows kr apart), one GEMM: s[ii][jj] = (q . k) * or / sc, -inf above
 * the diagonal when causal and on to nj rounded up to 16 (the rows are CTC_ATTN_LS long), each
 * row's maximum taken in the same pass; a row's exp(x - mx) summed. Maxima and sums run in 16
 * lanes (a float max or sum of one accumulator does not vectorise) over whole groups of 16, the
 * padding's -inf included (its exp is 0): a causal row's length varies, and a scalar remainder
 * of up to 15 exps a row took as long as the vector part. */
static const char attn_text[] =
    "/* the lanes' tree: r[u] with r[u + 8], then r[u + 4], r[u + 2], r[u + 1]. Each level a loop of its\n"
    " * own (constant trip counts: a loop over the levels was compiled as stores and scalar reloads, the\n"
    " * stalls of a failed store forwarding on every row) */\n"
    "static inline $T ctc_attn_hsum_$S($T r[16]) {\n"
    "  for (int u = 0; u < 8; u++) r[u] += r[u + 8];\n"
    "  for (int u = 0; u < 4; u++) r[u] += r[u + 4];\n"
    "  for (int u = 0; u < 2; u++) r[u] += r[u + 2];\n"
    "  return r[0] + r[1];\n"
    "}\n"
    "static inline $T ctc_attn_hmax_$S($T r[16]) {\n"
    "  for (int u = 0; u < 8; u++) r[u] = r[u + 8] > r[u] ? r[u + 8] : r[u];\n"
    "  for (int u = 0; u < 4; u++) r[u] = r[u + 4] > r[u] ? r[u + 4] : r[u];\n"
    "  for (int u = 0; u < 2; u++) r[u] = r[u + 2] > r[u] ? r[u + 2] : r[u];\n"
    "  return r[1] > r[0] ? r[1] : r[0];\n"
    "}\n"
    "/* the maximum of x[0, n) and mx, NaN left out; x is read on to n rounded up to 16 (the rows' padding,\n"
    " * -inf) */\n"
    "static inline $T ctc_attn_max_$S(const $T *x, int64_t n, $T mx) {\n"
    "  $T r[16];\n"
    "  for (int u = 0; u < 16; u++) r[u] = mx;\n"
    "  for (int64_t i = 0; i < n; i += 16)\n"
    "    for (int u = 0; u < 16; u++) r[u] = x[i + u] > r[u] ? x[i + u] : r[u];\n"
    "  return ctc_attn_hmax_$S(r);\n"
    "}\n"
    "/* x[j] = exp(x[j] - mx) for j < n, the sum of those returned (mx > -inf). x[j] up to n rounded up to 16\n"
    " * (the rows' padding, -inf) is read and written too: exp(-inf) is 0, which the sum adds exactly. _to:\n"
    " * y[j] = exp(x[j] - mx). */\n"
    "static inline $T ctc_attn_exp_to_$S(const $T *restrict x, $T *restrict y, int64_t n, $T mx) {\n"
    "  $T r[16] = {0};\n"
    "  for (int64_t i = 0; i < n; i += 16)\n"
    "    for (int u = 0; u < 16; u++) r[u] += y[i + u] = $V(x[i + u] - mx);\n"
    "  return ctc_attn_hsum_$S(r);\n"
    "}\n"
    "static inline $T ctc_attn_exp_$S($T *restrict x, int64_t n, $T mx) {\n"
    "  $T r[16] = {0};\n"
    "  for (int64_t i = 0; i < n; i += 16)\n"
    "    for (int u = 0; u < 16; u++) r[u] += x[i + u] = $V(x[i + u] - mx);\n"
    "  return ctc_attn_hsum_$S(r);\n"
    "}\n"
    "static void ctc_attn_scores_$S(const $T *qb, int64_t qr, const $T *kb, int64_t kr, int64_t ni, int64_t nj,\n"
    "                               int64_t D, int64_t i0, int64_t j0, int causal, int divide, $T sc, int rnd,\n"
    "                               int low, $T *s, int64_t ls, $T *mx) {\n"
    "  ((low & 3) == 3 ? $B : ctc_matmul_block_$S)(0, 1, 0, D, qb, qr, kb + j0 * kr, kr, s, ls, 0, ni, 0, nj);\n"
    "  const int64_t np = (nj + 15) / 16 * 16 < ls ? (nj + 15) / 16 * 16 : ls;\n"
    "  for (int64_t ii = 0; ii < ni; ii++) {\n"
    "    $T *restrict si = s + ii * ls;\n"
    "    const int64_t nv = causal ? ctc_attn_valid(i0 + ii, j0, nj) : nj;\n"
    "    if (rnd) {   /* autocast's roundings to bf16 (rnd: IR_ATTN_ROUND_*): of the products, then of the scaled */\n"
    "      for (int64_t jj = 0; jj < nv; jj++) {\n"
    "        const $T x = rnd & 1 ? $R(si[jj]) : si[jj], y = divide ? x / sc : x * sc;\n"
    "        si[jj] = rnd & 6 ? $R(y) : y;\n"
    "      }\n"
    "      for (int64_t jj = nv; jj < np; jj++) si[jj] = -($T)INFINITY;\n"
    "      if (mx) mx[ii] = ctc_attn_max_$S(si, nv, -($T)INFINITY);\n"
    "      continue;\n"
    "    }\n"
    "    $T r[16];   /* scaled, padded and the maximum taken in one pass, whole groups of 16 */\n"
    "    for (int u = 0; u < 16; u++) r[u] = -($T)INFINITY;\n"
    "    for (int64_t jj = 0; jj < np; jj += 16)\n"
    "      for (int u = 0; u < 16; u++) {\n"
    "        const $T y = jj + u < nv ? (divide ? si[jj + u] / sc : si[jj + u] * sc) : -($T)INFINITY;\n"
    "        si[jj + u] = y;\n"
    "        r[u] = y > r[u] ? y : r[u];\n"
    "      }\n"
    "    if (mx) mx[ii] = ctc_attn_hmax_$S(r);\n"
    "  }\n"
    "}\n"
    "/* each row's maximum m and sum l of exp(s - m) over keys [0, jend) (on entry m = -inf, l = 0), a block\n"
    " * of keys at a time; the last block's scores are left in s and their exp(s - m) in e (e may be s) */\n"
    "static void ctc_attn_stats_$S(const $T *qb, int64_t qr, const $T *kb, int64_t kr, int64_t ni, int64_t jend, int64_t D,\n"
    "                              int64_t i0, int causal, int divide, $T sc, int rnd, int low, $T (*s)[CTC_ATTN_LS],\n"
    "                              $T (*e)[CTC_ATTN_LS], $T *m, $T *l) {\n"
    "  for (int64_t j0 = 0; j0 < jend; j0 += CTC_ATTN_KB) {\n"
    "    const int64_t nj = jend - j0 < CTC_ATTN_KB ? jend - j0 : CTC_ATTN_KB;\n"
    "    $T rmx[CTC_ATTN_QB];\n"
    "    ctc_attn_scores_$S(qb, qr, kb, kr, ni, nj, D, i0, j0, causal, divide, sc, rnd, low, &s[0][0], CTC_ATTN_LS, rmx);\n"
    "    for (int64_t ii = 0; ii < ni; ii++) {\n"
    "      const int64_t nv = causal ? ctc_attn_valid(i0 + ii, j0, nj) : nj;\n"
    "      const $T mx = rmx[ii] > m[ii] ? rmx[ii] : m[ii];\n"
    "      if (mx == -($T)INFINITY) continue;\n"
    "      const $T sum = e != s ? ctc_attn_exp_to_$S(s[ii], e[ii], nv, mx) : ctc_attn_exp_$S(s[ii], nv, mx);\n"
    "      l[ii] = m[ii] == -($T)INFINITY ? sum : l[ii] * $V(m[ii] - mx) + sum;\n"
    "      m[ii] = mx;\n"
    "    }\n"
    "  }\n"
    "}\n"
    "\n"
    "/* o = softmax(q k^T * scale (causal: -inf above the diagonal)) v over [B = n0 n1, T, D]; o contiguous,\n"
    " * q, k, v with strides x0 (over n0), x1 (over n1), xr (rows). rnd (IR_ATTN_ROUND_*): the scores rounded\n"
    " * to bf16 as ctc_attn_scores does, and with 8 p = e / l rounded (a row's keys in several blocks: two\n"
    " * passes, its m and l first); low:\n"
    " * the operands that hold bf16 values (1 q, 2 k, 4 v, 8 g), whose products with rounded ones are\n"
    " * $B's (AVX-512 BF16 dot products where the CPU has them). */\n"
    "static void ctc_attention_$S(const $T *restrict q, int64_t q0, int64_t q1, int64_t qr,\n"
    "                             const $T *restrict k, int64_t k0, int64_t k1, int64_t kr,\n"
    "                             const $T *restrict v, int64_t v0, int64_t v1, int64_t vr, $T *restrict o,\n"
    "                             int64_t n1, int64_t B, int64_t T, int64_t D, int64_t causal, int64_t divide,\n"
    "                             int64_t rnd, int64_t low, double scale) {\n"
    "  const int64_t qb = ctc_attn_qb(causal), nqb = (T + qb - 1) / qb;\n"
    "  (void)ctc_gemm_block_$S;   /* written with ctc_matmul_block_$S (kernels.c); the threads' split is ours */\n"
    "#ifdef _OPENMP\n"
    "#pragma omp parallel for schedule(dynamic) if (B * T * T * D > 32768)\n"
    "#endif\n"
    "  for (int64_t w = 0; w < B * nqb; w++) {\n"
    "    const int64_t b = w / nqb, i0 = w % nqb * qb, ni = T - i0 < qb ? T - i0 : qb;\n"
    "    const int64_t b0 = b / n1, b1 = b % n1;\n"
    "    const $T *qb = q + b0 * q0 + b1 * q1 + i0 * qr, *kb = k + b0 * k0 + b1 * k1;\n"
    "    const $T *vb = v + b0 * v0 + b1 * v1;\n"
    "    $T *ob = o + (b * T + i0) * D;\n"
    "    $T s[CTC_ATTN_QB][CTC_ATTN_LS], m[CTC_ATTN_QB], l[CTC_ATTN_QB];\n"
    "    for (int64_t ii = 0; ii < ni; ii++) m[ii] = -($T)INFINITY, l[ii] = 0;\n"
    "    for (int64_t x = 0; x < ni * D; x++) ob[x] = 0;\n"
    "    const int64_t jend = causal ? i0 + ni : T;\n"
    "    /* p rounded and the keys in several blocks (two): a first pass for each row's maximum m and\n"
    "     * sum l, then p = round(exp(s - m) / l) block by block, o = p v not divided */\n"
    "    const int two = (rnd & 8) && jend > CTC_ATTN_KB;\n"
    "    if (two)\n"
    "      ctc_attn_stats_$S(qb, qr, kb, kr, ni, jend, D, i0, (int)causal, (int)divide, ($T)scale, (int)rnd, (int)low, s, s, m, l);\n"
    "    for (int64_t j0 = 0; j0 < jend; j0 += CTC_ATTN_KB) {\n"
    "      const int64_t nj = jend - j0 < CTC_ATTN_KB ? jend - j0 : CTC_ATTN_KB;\n"
    "      $T rmx[CTC_ATTN_QB];   /* each row's maximum over the block */\n"
    "      ctc_attn_scores_$S(qb, qr, kb, kr, ni, nj, D, i0, j0, (int)causal, (int)divide, ($T)scale, (int)rnd, (int)low,\n"
    "                         &s[0][0], CTC_ATTN_LS, rmx);\n"
    "      for (int64_t ii = 0; ii < ni; ii++) {   /* the online softmax: p = exp(s - m), o and l rescaled */\n"
    "        $T *restrict si = s[ii], *restrict oi = ob + ii * D;\n"
    "        const int64_t nv = causal ? ctc_attn_valid(i0 + ii, j0, nj) : nj;   /* keys not masked */\n"
    "        if (two) {   /* p = round(exp(s - m) / l), the row's m and l known */\n"
    "          if (m[ii] != -($T)INFINITY) (void)ctc_attn_exp_$S(si, nv, m[ii]);\n"
    "          for (int64_t jj = 0; jj < nv; jj++) si[jj] = m[ii] == -($T)INFINITY ? 0 : $R(si[jj] / l[ii]);\n"
    "          for (int64_t jj = nv; jj < nj; jj++) si[jj] = 0;\n"
    "          continue;\n"
    "        }\n"
    "        const $T mx = rmx[ii] > m[ii] ? rmx[ii] : m[ii];\n"
    "        if (mx == -($T)INFINITY) {   /* every key so far masked */\n"
    "          for (int64_t jj = 0; jj < nj; jj++) si[jj] = 0;\n"
    "          continue;\n"
    "        }\n"
    "        /* the rescale of what the earlier blocks summed: none before the first (exp(-inf) is 0;\n"
    "         * a scalar exp a row cost as much as the row's vector exps) */\n"
    "        const $T corr = m[ii] == -($T)INFINITY ? 0 : $V(m[ii] - mx), sum = ctc_attn_exp_$S(si, nv, mx);\n"
    "        for (int64_t jj = nv; jj < nj; jj++) si[jj] = 0;\n"
    "        if (rnd & 8) {   /* p = round(e / l), the row's sum known (one block of keys): o = p v, not divided */\n"
    "          for (int64_t jj = 0; jj < nv; jj++) si[jj] = $R(si[jj] / sum);\n"
    "          l[ii] = 1;\n"
    "        } else {\n"
    "          l[ii] = l[ii] * corr + sum;\n"
    "        }\n"
    "        m[ii] = mx;\n"
    "        if (corr != 1)\n"
    "          for (int64_t d = 0; d < D; d++) oi[d] *= corr;\n"
    "      }\n"
    "      ((rnd & 8) && (low & 4) ? $B : ctc_matmul_block_$S)(0, 0, 1, nj, &s[0][0], CTC_ATTN_LS, vb + j0 * vr, vr, ob, D, 0,\n"
    "                                                          ni, 0, D);   /* o += p v */\n"
    "    }\n"
    "    for (int64_t ii = 0; two && ii < ni; ii++) l[ii] = l[ii] == 0 ? 0 : 1;   /* (p divided; no key: NaN, as unfused) */\n"
    "    for (int64_t ii = 0; ii < ni; ii++) {\n"
    "      const $T inv = 1 / l[ii];\n"
    "      for (int64_t d = 0; d < D; d++) ob[ii * D + d] *= inv;\n"
    "    }\n"
    "  }\n"
    "}\n";

static const char attn_bwd_text[] =
    "/* the dot product of x[0, n) and y[0, n), in 16 lanes (element d in lane d % 16, then a fixed tree,\n"
    " * as ctc_attn_exp's sums): one accumulator waited on each add */\n"
    "static inline $T ctc_attn_dot_$S(const $T *x, const $T *y, int64_t n) {\n"
    "  $T r[16] = {0};\n"
    "  int64_t d = 0;\n"
    "  for (; d + 16 <= n; d += 16)\n"
    "    for (int u = 0; u < 16; u++) r[u] += x[d + u] * y[d + u];\n"
    "  for (int u = 0; d + u < n; u++) r[u] += x[d + u] * y[d + u];\n"
    "  return ctc_attn_hsum_$S(r);\n"
    "}\n"
    "/* (roundings, a row's keys in several blocks) the scores of rows [0, ni) against keys [j0, j0 + nj) in\n"
    " * s and e = exp(s - m) in e, m each row's maximum over all its keys (a row with none: e = 0) */\n"
    "static void ctc_attn_exps_$S(const $T *qb, int64_t qr, const $T *kb, int64_t kr, int64_t ni, int64_t nj, int64_t D,\n"
    "                             int64_t i0, int64_t j0, int causal, int divide, $T sc, int rnd, int low, const $T *m,\n"
    "                             $T (*s)[CTC_ATTN_LS], $T (*e)[CTC_ATTN_LS]) {\n"
    "  ctc_attn_scores_$S(qb, qr, kb, kr, ni, nj, D, i0, j0, causal, divide, sc, rnd, low, &s[0][0], CTC_ATTN_LS, NULL);\n"
    "  for (int64_t ii = 0; ii < ni; ii++) {\n"
    "    const int64_t nv = causal ? ctc_attn_valid(i0 + ii, j0, nj) : nj;\n"
    "    if (m[ii] != -($T)INFINITY) (void)ctc_attn_exp_to_$S(s[ii], e[ii], nv, m[ii]);\n"
    "    else\n"
    "      for (int64_t jj = 0; jj < (nv + 15) / 16 * 16; jj++) e[ii][jj] = 0;\n"
    "  }\n"
    "}\n"
    "/* r = [dq; dk; dv] (3 x [B, T, D], contiguous) of <g, ctc_attention(q, k, v)>, o its result; operands\n"
    " * strided as ctc_attention's. With roundings (rnd) the gradient of the chain as reverse mode gives it\n"
    " * unfused: each rounding's cotangent rounded (dp for p's, ds for the scores'), di the row sum of\n"
    " * softmax * dp (not g . o: o was computed from the rounded p), over a pass of its own when a row's\n"
    " * keys are in several blocks. */\n"
    "static void ctc_attention_bwd_$S(const $T *restrict q, int64_t q0, int64_t q1, int64_t qr,\n"
    "                                 const $T *restrict k, int64_t k0, int64_t k1, int64_t kr,\n"
    "                                 const $T *restrict v, int64_t v0, int64_t v1, int64_t vr,\n"
    "                                 const $T *restrict o, int64_t o0, int64_t o1, int64_t orow,\n"
    "                                 const $T *restrict g, int64_t g0, int64_t g1, int64_t gr, $T *restrict r,\n"
    "                                 int64_t n1, int64_t B, int64_t T, int64_t D, int64_t causal, int64_t divide,\n"
    "                                 int64_t rnd, int64_t low, double scale) {\n"
    "  const $T sc = ($T)scale;\n"
    "#ifdef _OPENMP\n"
    "#pragma omp parallel for schedule(dynamic) if (B * T * T * D > 32768)\n"
    "#endif\n"
    "  for (int64_t b = 0; b < B; b++) {\n"
    "    const int64_t off = b * T * D, b0 = b / n1, b1 = b % n1;\n"
    "    const $T *kb = k + b0 * k0 + b1 * k1, *vb = v + b0 * v0 + b1 * v1;\n"
    "    $T *dq = r + off, *dk = r + B * T * D + off, *dv = r + 2 * B * T * D + off;\n"
    "    $T s[CTC_ATTN_QB][CTC_ATTN_LS], dp[CTC_ATTN_QB][CTC_ATTN_LS], sm[CTC_ATTN_QB][CTC_ATTN_LS];\n"
    "    $T lse[CTC_ATTN_QB], di[CTC_ATTN_QB], m[CTC_ATTN_QB], l[CTC_ATTN_QB];\n"
    "    for (int64_t x = 0; x < T * D; x++) dq[x] = dk[x] = dv[x] = 0;\n"
    "    for (int64_t i0 = 0, qb = ctc_attn_qb(causal); i0 < T; i0 += qb) {\n"
    "      const int64_t ni = T - i0 < qb ? T - i0 : qb, jend = causal ? i0 + ni : T;\n"
    "      const $T *qb = q + b0 * q0 + b1 * q1 + i0 * qr, *gb = g + b0 * g0 + b1 * g1 + i0 * gr;\n"
    "      const $T *obk = o + b0 * o0 + b1 * o1 + i0 * orow;\n"
    "      const int one = jend <= CTC_ATTN_KB;   /* the keys in one block: its scores kept from the first pass */\n"
    "      for (int64_t ii = 0; ii < ni; ii++) {\n"
    "        m[ii] = -($T)INFINITY, l[ii] = 0;\n"
    "        di[ii] = ctc_attn_dot_$S(gb + ii * gr, obk + ii * orow, D);   /* g . o */\n"
    "      }\n"
    "      /* each row's maximum and sum; with one block its scores kept in s, exp(s - m) in dp */\n"
    "      ctc_attn_stats_$S(qb, qr, kb, kr, ni, jend, D, i0, (int)causal, (int)divide, sc, (int)rnd, (int)low, s, dp, m, l);\n"
    "      for (int64_t ii = 0; ii < ni; ii++) lse[ii] = m[ii] + $L(l[ii]);\n"
    "      for (int64_t j0 = 0; rnd && !one && j0 < jend; j0 += CTC_ATTN_KB) {   /* di = sum of sm * dp, every block */\n"
    "        const int64_t nj = jend - j0 < CTC_ATTN_KB ? jend - j0 : CTC_ATTN_KB;\n"
    "        if (j0 == 0)\n"
    "          for (int64_t ii = 0; ii < ni; ii++) di[ii] = 0;\n"
    "        ctc_attn_exps_$S(qb, qr, kb, kr, ni, nj, D, i0, j0, (int)causal, (int)divide, sc, (int)rnd, (int)low, m, s, sm);\n"
    "        ((low & 12) == 12 ? $B : ctc_matmul_block_$S)(0, 1, 0, D, gb, gr, vb + j0 * vr, vr, &dp[0][0], CTC_ATTN_LS, 0, ni,\n"
    "                                                     0, nj);   /* dp = g v^T */\n"
    "        for (int64_t ii = 0; ii < ni; ii++) {\n"
    "          const int64_t nv = causal ? ctc_attn_valid(i0 + ii, j0, nj) : nj;\n"
    "          for (int64_t jj = 0; jj < nv; jj++) di[ii] += sm[ii][jj] / l[ii] * (rnd & 8 ? $R(dp[ii][jj]) : dp[ii][jj]);\n"
    "        }\n"
    "      }\n"
    "      for (int64_t j0 = 0; j0 < jend; j0 += CTC_ATTN_KB) {\n"
    "        const int64_t nj = jend - j0 < CTC_ATTN_KB ? jend - j0 : CTC_ATTN_KB;\n"
    "        if (rnd && !one)   /* e = exp(s - m) in dp, as the first pass's with one block */\n"
    "          ctc_attn_exps_$S(qb, qr, kb, kr, ni, nj, D, i0, j0, (int)causal, (int)divide, sc, (int)rnd, (int)low, m, s, dp);\n"
    "        if (rnd)   /* the softmax e / l in sm, p = its rounding in s */\n"
    "          for (int64_t ii = 0; ii < ni; ii++) {\n"
    "            const int64_t nv = causal ? ctc_attn_valid(i0 + ii, j0, nj) : nj;\n"
    "            for (int64_t jj = 0; jj < nv; jj++) sm[ii][jj] = dp[ii][jj] / l[ii];\n"
    "            for (int64_t jj = nv; jj < nj; jj++) sm[ii][jj] = 0;\n"
    "            for (int64_t jj = 0; jj < nj; jj++) s[ii][jj] = rnd & 8 ? $R(sm[ii][jj]) : sm[ii][jj];\n"
    "          }\n"
    "        else if (one)   /* p = exp(s - m) / l: the first pass's exp(s - m) (in dp), divided */\n"
    "          for (int64_t ii = 0; ii < ni; ii++) {\n"
    "            const int64_t nv = causal ? ctc_attn_valid(i0 + ii, j0, nj) : nj;\n"
    "            const $T inv = 1 / l[ii];\n"
    "            for (int64_t jj = 0; jj < nv; jj++) s[ii][jj] = dp[ii][jj] * inv;\n"
    "            for (int64_t jj = nv; jj < nj; jj++) s[ii][jj] = 0;\n"
    "          }\n"
    "        else {\n"
    "          ctc_attn_scores_$S(qb, qr, kb, kr, ni, nj, D, i0, j0, (int)causal, (int)divide, sc, (int)rnd, (int)low,\n"
    "                           &s[0][0], CTC_ATTN_LS, NULL);\n"
    "          for (int64_t ii = 0; ii < ni; ii++) {   /* p, in groups of 16 (the padding) */\n"
    "            const int64_t nv = causal ? ctc_attn_valid(i0 + ii, j0, nj) : nj;\n"
    "            for (int64_t jj = 0; jj < nv; jj += 16)\n"
    "              for (int u = 0; u < 16; u++) s[ii][jj + u] = $V(s[ii][jj + u] - lse[ii]);\n"
    "            for (int64_t jj = nv; jj < nj; jj++) s[ii][jj] = 0;\n"
    "          }\n"
    "        }\n"
    "        ((rnd & 8) && (low & 8) ? $B : ctc_matmul_block_$S)(1, 0, 1, ni, &s[0][0], CTC_ATTN_LS, gb, gr, dv + j0 * D, D, 0,\n"
    "                                                          nj, 0, D);   /* dv += p^T g */\n"
    "        ((low & 12) == 12 ? $B : ctc_matmul_block_$S)(0, 1, 0, D, gb, gr, vb + j0 * vr, vr, &dp[0][0], CTC_ATTN_LS, 0, ni,\n"
    "                                                     0, nj);   /* dp = g v^T */\n"
    "        for (int64_t ii = 0; rnd && ii < ni; ii++) {   /* ds of the rounded chain (kept in dp) */\n"
    "          $T *restrict smi = sm[ii], *restrict dpi = dp[ii], dii = one ? 0 : di[ii];\n"
    "          if (rnd & 8)\n"
    "            for (int64_t jj = 0; jj < nj; jj++) dpi[jj] = $R(dpi[jj]);\n"
    "          for (int64_t jj = 0; one && jj < nj; jj++) dii += smi[jj] * dpi[jj];\n"
    "          for (int64_t jj = 0; jj < nj; jj++) {\n"
    "            $T x = smi[jj] * (dpi[jj] - dii);\n"
    "            x = rnd & 4 ? $R(x) : x;   /* the masked: 0 (their softmax is) */\n"
    "            x = rnd & 2 ? $R(x) : x;\n"
    "            x = divide ? x / sc : x * sc;\n"
    "            dpi[jj] = rnd & 1 ? $R(x) : x;\n"
    "          }\n"
    "        }\n"
    "        for (int64_t ii = 0; !rnd && ii < ni; ii++) {   /* ds = p (dp - di) * scale (kept in dp) */\n"
    "          $T *restrict pi = s[ii], *restrict dpi = dp[ii];\n"
    "          const $T dii = di[ii];\n"
    "          if (divide)\n"
    "            for (int64_t jj = 0; jj < nj; jj++) dpi[jj] = pi[jj] * (dpi[jj] - dii) / sc;\n"
    "          else\n"
    "            for (int64_t jj = 0; jj < nj; jj++) dpi[jj] = pi[jj] * (dpi[jj] - dii) * sc;\n"
    "        }\n"
    "        ((rnd & 1) && (low & 2) ? $B : ctc_matmul_block_$S)(0, 0, 1, nj, &dp[0][0], CTC_ATTN_LS, kb + j0 * kr, kr,\n"
    "                                                          dq + i0 * D, D, 0, ni, 0, D);   /* dq += ds k */\n"
    "        ((rnd & 1) && (low & 1) ? $B : ctc_matmul_block_$S)(1, 0, 1, ni, &dp[0][0], CTC_ATTN_LS, qb, qr, dk + j0 * D, D, 0,\n"
    "                                                          nj, 0, D);   /* dk += ds^T q */\n"
    "      }\n"
    "    }\n"
    "  }\n"
    "}\n";

/* text with $T, $S, $V (exp of x <= 0: every exp here), $L (log), $R(x) (x rounded to
 * bf16, or f16 with rnd's 16: ctc_attn_round_<dt>), $B (the GEMM block of bf16 values: kernels.c's
 * ctc_matmul_block_bf16 where the file has it, bf16) for dtype t */
static void put(Buf *b, const char *text, DType t, int bf16) {
  for (const char *s = text; *s; s++) {
    if (s[0] == '$' && s[1] == 'R' && s[2] == '(') {
      cg_printf(b, "ctc_attn_round_%s(rnd, ", cg_dt_suffix(t)), s += 2;
      continue;
    }
    if (s[0] == '$' && s[1] == 'T') cg_puts(b, cg_ctype(t)), s++;
    else if (s[0] == '$' && s[1] == 'S') cg_puts(b, cg_dt_suffix(t)), s++;
    else if (s[0] == '$' && s[1] == 'V') cg_puts(b, t == DT_F32 ? "ctc_attn_expn_f32" : "exp"), s++;
    else if (s[0] == '$' && s[1] == 'L') cg_puts(b, t == DT_F32 ? "logf" : "log"), s++;
    else if (s[0] == '$' && s[1] == 'B') cg_printf(b, "ctc_matmul_block_%s", t == DT_F32 && bf16 ? "bf16" : cg_dt_suffix(t)), s++;
    else cg_printf(b, "%c", *s);
  }
}

void cg_emit_attention_kernels(Buf *b, const Kernels *k) {
  int any = 0;
  for (int t = 0; t < DT_COUNT; t++) any |= k->attention[t];
  if (!any) return;
  cg_puts(b, "/* Fused attention (codegen_c/attn_c.c): per query block, an online softmax; no T x T matrix. */\n");
  cg_puts(b, attn_common_text);
  if (k->attention[DT_F32]) cg_puts(b, attn_expn_text);
  for (int t = 0; t < DT_COUNT; t++) {
    if (!k->attention[t]) continue;
    if (k->attention[t] & 4)   /* the roundings of autocast's bf16 or f16 */
      put(b, "static inline $T ctc_attn_round_$S(int64_t rnd, $T x) { return rnd & 16 ? ctc_f16_$S(x) : ctc_bf16_$S(x); }\n",
          (DType)t, 0);
    else
      put(b, "static inline $T ctc_attn_round_$S(int64_t rnd, $T x) { (void)rnd; return ctc_bf16_$S(x); }\n", (DType)t, 0);
    put(b, attn_text, (DType)t, k->gemm_bf16);
    if (k->attention[t] & 2) put(b, attn_bwd_text, (DType)t, k->gemm_bf16);
  }
}

/* KS_CALL as C: ctc_<fn>_<dt>(arrays..., result, ints..., real); a GEMM's and a convolution's are
 * linalg_c.c's. */
void cg_render_call_c(CgRender *r, const KirStmt *s) {
  CgFunc *c = r->c;
  const KirCall *k = s->call;
  if (!strcmp(k->fn, "gemm")) {
    cg_render_gemm_c(r, s);
    return;
  }
  if (!strncmp(k->fn, "conv2d", 6)) {
    cg_render_conv_c(r, s);
    return;
  }
  Buf x = {0};
  DType t = c->f->values.data[k->args[0]].type.dtype;
  cg_printf(&x, "ctc_%s_%s(", k->fn, cg_dt_suffix(t));
  for (int a = 0; a < k->nargs; a++) {
    cg_printf(&x, "%s", cg_ref(c, k->args[a]));
    if (k->off[a]) cg_printf(&x, " + %lld", (long long)k->off[a]);
    if (k->strided) cg_printf(&x, ", %lld, %lld, %lld", (long long)k->st[a][0], (long long)k->st[a][1], (long long)k->st[a][2]);
    cg_puts(&x, ", ");
  }
  cg_printf(&x, "%s", cg_ref(c, s->v));
  for (int a = 0; a < k->nint; a++) cg_printf(&x, ", %lld", (long long)k->ints[a]);
  cg_printf(&x, ", %.17g);\n", k->real);
  cg_printf(c->out, "%*s%s", c->ind, "", x.s);
  cg_buf_free(&x);
  c->k->attention[t] |= !strcmp(k->fn, "attention") ? 1 : 3;
  c->k->bf16[t] = 1;   /* $R: ctc_bf16_<dt>, which the kernels call with roundings (ints[6]) */
  if (k->nint > 6 && k->ints[6] & IR_ATTN_ROUND_F16) c->k->attention[t] |= 4, c->k->f16[t] = 1;   /* and ctc_f16_<dt> */
  if (k->nint > 7 && k->ints[7] && t == DT_F32) c->k->gemm_bf16 = 1;   /* $B: products of bf16 values (ints[7]) */
  c->k->gemm[t] = 1;   /* the blocks' products are ctc_matmul_block_<dt> calls */
  if (t == DT_F32) c->k->expk_f32 = 1;   /* ctc_attn_expn_f32's core */
}

/* The emitter of a microkernel call's instruction i (ATTENTION, ATTENTION_BWD, MATMUL, CONV2D and its
 * gradients; emit_ops.c's
 * table): its kernel IR (kir_build_inst_call) through the C renderer. */
void cg_emit_call(CgFunc *c, int i) {
  const Kernel *kn = &c->s->kernels.data[c->s->kernel_of[i]];
  Kir *k = kir_build_inst_call(c->p->arena, c->f, c->s, kn, &c->f->insts.data[i]);
  CHECK(k != NULL);
  CgRender r;
  cg_render_init(&r, &cg_render_c, c, k);
  r.call = cg_render_call_c;
  cg_render_block(&r, &k->body);
  cg_render_free(&r);
}
