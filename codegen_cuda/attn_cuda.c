/* attn_cuda.c - fused attention on the CUDA target (ATTENTION, ATTENTION_BWD: kernels/attention.c's
 * call), a kernel per call that calls a device function written once into the file:
 *   - in tiles (ctc_attention_tiles and the three of its gradients): a block of TQ * 8 threads
 *     per TQ rows, the operands' rows through shared memory TQ at a time; the forward an online
 *     softmax over the key tiles, the gradients each query row's logsumexp and g . o, then dk and
 *     dv a block per key tile, then dq a block per query tile;
 *   - a thread per row (below) for the head dims the tiles do not take: 1 in the gradients
 *     (whose first kernel keeps two numbers per row in dq's rows), or too many to fit four tiles
 *     of 8 rows in 48 KiB of shared memory.
 * Both read the operands through the call's strides and write contiguous results, the
 * semantics of the C target's kernel (a -inf score adds nothing; NaN and +inf make the row NaN). */
#include <stdio.h>
#include <string.h>
#include "cuda_int.h"

/* ---- a thread per row: head dims the tiles do not take ------------------------------------
 * Forward: a thread per query row (grid-stride over the B * T rows): its scores against the
 * keys it sees (those at or before it when causal) one at a time, with the online softmax of
 * the C target's kernel (the running maximum m and sum l, the row of o rescaled by
 * exp(m_old - m_new) when the maximum grows), o accumulated in a local array of D elements and
 * divided by l at the end. The T x T matrix never exists. Backward, three kernels in stream
 * order: a thread per query row writes its logsumexp into the first element of its dq row;
 * a thread per key row j sums dk[j] = sum_i ds_ij q_i and dv[j] = sum_i p_ij g_i over the rows
 * that see it (p_ij = exp(s_ij - lse_i), ds_ij = p_ij (g_i . v_j - g_i . o_i) * scale); a thread
 * per query row takes its logsumexp back and writes dq[i] = sum_j ds_ij k_j over its row.
 * Operands are read through the call's strides; the results are contiguous. A -inf score adds
 * nothing (before any finite one, exp(-inf - -inf) would be NaN); NaN and +inf make the row
 * NaN, as softmax does. */

typedef struct AttnK {
  Ent *e;
  const KirCall *k;
  int64_t n1, B, T, D, causal, divide;
  const char *ct, *ex, *lg;
  char scale[96];
} AttnK;

/* operand a's base for the batch (ctc_b0, ctc_b1) */
static void attn_base(AttnK *A, Buf *b, int a) {
  cg_printf(b, "%s", cg_ref(A->e->c, A->k->args[a]));
  if (A->k->off[a]) cg_printf(b, " + %lld", (ll)A->k->off[a]);
  cg_printf(b, " + ctc_b0 * %lld + ctc_b1 * %lld", (ll)A->k->st[a][0], (ll)A->k->st[a][1]);
}

/* the thread's row: ctc_b (batch), ctc_r (row), ctc_b0, ctc_b1, and each operand's row-0 pointer */
static void attn_head(AttnK *A, Buf *body, int nargs) {
  static const char *const nm[5] = {"ctc_q", "ctc_k", "ctc_v", "ctc_o", "ctc_g"};
  cg_printf(body, cu_loop_head, (ll)(A->B * A->T));
  cg_printf(body, " {\n    const int64_t ctc_b = ctc_i / %lld, ctc_r = ctc_i %% %lld, ctc_b0 = ctc_b / %lld, ctc_b1 = ctc_b %% %lld;\n",
            (ll)A->T, (ll)A->T, (ll)A->n1, (ll)A->n1);
  for (int a = 0; a < nargs; a++) {
    cg_printf(body, "    const %s *%s = ", A->ct, nm[a]);
    attn_base(A, body, a);
    cg_puts(body, ";\n");
  }
  cg_printf(body, "    (void)ctc_r;\n");
}

/* ctc_s = the score of query row `qi` and key row `kj` (C expressions of row indices) */
static void attn_score(AttnK *A, Buf *body, const char *ind, const char *qi, const char *kj) {
  cg_printf(body, "%s%s ctc_s = 0;\n", ind, A->ct);
  cg_printf(body, "%sfor (int64_t ctc_d = 0; ctc_d < %lld; ctc_d++) ctc_s += ctc_q[(%s) * %lld + ctc_d] * ctc_k[(%s) * %lld + ctc_d];\n",
            ind, (ll)A->D, qi, (ll)A->k->st[0][2], kj, (ll)A->k->st[1][2]);
  cg_printf(body, "%sctc_s = ctc_s %s;\n", ind, A->scale);
}

/* ctc_<name> = the dot product of row `x` of operand xa and row `y` of operand ya */
static void attn_dot(AttnK *A, Buf *body, const char *ind, const char *name, const char *xp, int xa, const char *x,
                     const char *yp, int ya, const char *y) {
  cg_printf(body, "%s%s %s = 0;\n", ind, A->ct, name);
  cg_printf(body, "%sfor (int64_t ctc_d = 0; ctc_d < %lld; ctc_d++) %s += %s[(%s) * %lld + ctc_d] * %s[(%s) * %lld + ctc_d];\n",
            ind, (ll)A->D, name, xp, x, (ll)A->k->st[xa][2], yp, y, (ll)A->k->st[ya][2]);
}

static void attn_launch(AttnK *A, int i, const Inst *in, Buf *body, const char *what, const char *sfx) {
  char note[200];
  snprintf(note, sizeof note, "its kernel IR: a call of %s, here %s (grid-stride)", ir_ops[in->op].name, what);
  cu_op_launch(A->e, i, in, note, sfx, body, A->B * A->T);
}

/* The call as a thread per row (the kernels described above). */
static void attn_rows(AttnK A, int i, const Inst *in) {
  Ent *e = A.e;
  const char *ct = A.ct, *ex = A.ex;
  int64_t D = A.D, BTD = A.B * A.T * A.D;
  char jend[32], ibeg[32];   /* the keys row ctc_r sees; the first row that sees key ctc_r */
  if (A.causal) snprintf(jend, sizeof jend, "ctc_r + 1"), snprintf(ibeg, sizeof ibeg, "ctc_r");
  else snprintf(jend, sizeof jend, "%lld", (ll)A.T), snprintf(ibeg, sizeof ibeg, "0");
  Buf body = {0};
  if (in->op == IR_ATTENTION) {
    cu_kbegin(e, &body);
    attn_head(&A, &body, 3);
    const char *o = cg_ref(e->c, in->res);
    cg_printf(&body, "    %s ctc_acc[%lld], ctc_m = -(%s)INFINITY, ctc_l = 0;\n", ct, (ll)D, ct);
    cg_printf(&body, "    for (int64_t ctc_d = 0; ctc_d < %lld; ctc_d++) ctc_acc[ctc_d] = 0;\n", (ll)D);
    cg_printf(&body, "    for (int64_t ctc_j = 0; ctc_j < %s; ctc_j++) {   /* the keys it sees */\n", jend);
    attn_score(&A, &body, "      ", "ctc_r", "ctc_j");
    cg_printf(&body, "      if (ctc_s > ctc_m) {   /* a new maximum: what was summed is rescaled */\n");
    cg_printf(&body, "        const %s ctc_c = ctc_m == -(%s)INFINITY ? 0 : %s(ctc_m - ctc_s);\n", ct, ct, ex);
    cg_printf(&body, "        ctc_l *= ctc_c;\n");
    cg_printf(&body, "        for (int64_t ctc_d = 0; ctc_d < %lld; ctc_d++) ctc_acc[ctc_d] *= ctc_c;\n", (ll)D);
    cg_printf(&body, "        ctc_m = ctc_s;\n      }\n");
    cg_printf(&body, "      const %s ctc_p = ctc_s == -(%s)INFINITY ? 0 : %s(ctc_s - ctc_m);\n      ctc_l += ctc_p;\n", ct, ct, ex);
    cg_printf(&body, "      for (int64_t ctc_d = 0; ctc_d < %lld; ctc_d++) ctc_acc[ctc_d] += ctc_p * ctc_v[ctc_j * %lld + ctc_d];\n",
              (ll)D, (ll)A.k->st[2][2]);
    cg_printf(&body, "    }\n    for (int64_t ctc_d = 0; ctc_d < %lld; ctc_d++) %s[ctc_i * %lld + ctc_d] = ctc_acc[ctc_d] / ctc_l;\n  }\n",
              (ll)D, o, (ll)D);
    attn_launch(&A, i, in, &body, "a thread per query row", "");
    cg_buf_free(&body);
    return;
  }
  /* ATTENTION_BWD: q, k, v, o, g -> r = [dq; dk; dv] */
  cu_kbegin(e, &body);   /* 1: each row's logsumexp, into its dq row's first element */
  attn_head(&A, &body, 2);
  const char *r = cg_ref(e->c, in->res);
  cg_printf(&body, "    %s ctc_m = -(%s)INFINITY, ctc_l = 0;\n", ct, ct);
  cg_printf(&body, "    for (int64_t ctc_j = 0; ctc_j < %s; ctc_j++) {\n", jend);
  attn_score(&A, &body, "      ", "ctc_r", "ctc_j");
  cg_printf(&body, "      if (ctc_s > ctc_m) {\n        ctc_l *= ctc_m == -(%s)INFINITY ? 0 : %s(ctc_m - ctc_s);\n        ctc_m = ctc_s;\n      }\n", ct, ex);
  cg_printf(&body, "      ctc_l += ctc_s == -(%s)INFINITY ? 0 : %s(ctc_s - ctc_m);\n    }\n", ct, ex);
  cg_printf(&body, "    %s[ctc_i * %lld] = ctc_m + %s(ctc_l);\n  }\n", r, (ll)D, A.lg);
  attn_launch(&A, i, in, &body, "a thread per query row: its logsumexp", "_lse");
  cg_buf_free(&body);

  Buf b2 = {0};   /* 2: dk and dv, a thread per key row */
  cu_kbegin(e, &b2);
  attn_head(&A, &b2, 5);
  r = cg_ref(e->c, in->res);
  cg_printf(&b2, "    %s ctc_dk[%lld], ctc_dv[%lld];\n", ct, (ll)D, (ll)D);
  cg_printf(&b2, "    for (int64_t ctc_d = 0; ctc_d < %lld; ctc_d++) ctc_dk[ctc_d] = ctc_dv[ctc_d] = 0;\n", (ll)D);
  cg_printf(&b2, "    for (int64_t ctc_t = %s; ctc_t < %lld; ctc_t++) {   /* the query rows that see this key */\n", ibeg, (ll)A.T);
  attn_score(&A, &b2, "      ", "ctc_t", "ctc_r");
  cg_printf(&b2, "      const %s ctc_p = ctc_s == -(%s)INFINITY ? 0 : %s(ctc_s - %s[(ctc_b * %lld + ctc_t) * %lld]);\n", ct, ct, ex, r,
            (ll)A.T, (ll)D);
  attn_dot(&A, &b2, "      ", "ctc_dp", "ctc_g", 4, "ctc_t", "ctc_v", 2, "ctc_r");
  attn_dot(&A, &b2, "      ", "ctc_di", "ctc_g", 4, "ctc_t", "ctc_o", 3, "ctc_t");
  cg_printf(&b2, "      const %s ctc_ds = ctc_p * (ctc_dp - ctc_di) %s;\n", ct, A.scale);
  cg_printf(&b2, "      for (int64_t ctc_d = 0; ctc_d < %lld; ctc_d++) {\n", (ll)D);
  cg_printf(&b2, "        ctc_dv[ctc_d] += ctc_p * ctc_g[ctc_t * %lld + ctc_d];\n", (ll)A.k->st[4][2]);
  cg_printf(&b2, "        ctc_dk[ctc_d] += ctc_ds * ctc_q[ctc_t * %lld + ctc_d];\n      }\n    }\n", (ll)A.k->st[0][2]);
  cg_printf(&b2, "    for (int64_t ctc_d = 0; ctc_d < %lld; ctc_d++) {\n", (ll)D);
  cg_printf(&b2, "      %s[%lld + ctc_i * %lld + ctc_d] = ctc_dk[ctc_d];\n", r, (ll)BTD, (ll)D);
  cg_printf(&b2, "      %s[%lld + ctc_i * %lld + ctc_d] = ctc_dv[ctc_d];\n    }\n  }\n", r, (ll)(2 * BTD), (ll)D);
  attn_launch(&A, i, in, &b2, "a thread per key row: dk and dv", "_dkv");
  cg_buf_free(&b2);

  Buf b3 = {0};   /* 3: dq, a thread per query row (its logsumexp read first, then overwritten) */
  cu_kbegin(e, &b3);
  attn_head(&A, &b3, 5);
  r = cg_ref(e->c, in->res);
  cg_printf(&b3, "    const %s ctc_lse = %s[ctc_i * %lld];\n", ct, r, (ll)D);
  attn_dot(&A, &b3, "    ", "ctc_di", "ctc_g", 4, "ctc_r", "ctc_o", 3, "ctc_r");
  cg_printf(&b3, "    %s ctc_dq[%lld];\n", ct, (ll)D);
  cg_printf(&b3, "    for (int64_t ctc_d = 0; ctc_d < %lld; ctc_d++) ctc_dq[ctc_d] = 0;\n", (ll)D);
  cg_printf(&b3, "    for (int64_t ctc_j = 0; ctc_j < %s; ctc_j++) {\n", jend);
  attn_score(&A, &b3, "      ", "ctc_r", "ctc_j");
  cg_printf(&b3, "      const %s ctc_p = ctc_s == -(%s)INFINITY ? 0 : %s(ctc_s - ctc_lse);\n", ct, ct, ex);
  attn_dot(&A, &b3, "      ", "ctc_dp", "ctc_g", 4, "ctc_r", "ctc_v", 2, "ctc_j");
  cg_printf(&b3, "      const %s ctc_ds = ctc_p * (ctc_dp - ctc_di) %s;\n", ct, A.scale);
  cg_printf(&b3, "      for (int64_t ctc_d = 0; ctc_d < %lld; ctc_d++) ctc_dq[ctc_d] += ctc_ds * ctc_k[ctc_j * %lld + ctc_d];\n",
            (ll)D, (ll)A.k->st[1][2]);
  cg_printf(&b3, "    }\n    for (int64_t ctc_d = 0; ctc_d < %lld; ctc_d++) %s[ctc_i * %lld + ctc_d] = ctc_dq[ctc_d];\n  }\n", (ll)D, r,
            (ll)D);
  attn_launch(&A, i, in, &b3, "a thread per query row: dq", "_dq");
  cg_buf_free(&b3);
}

/* ---- in tiles ---------------------------------------------------------------------------- */

static const char attn_tiles_text[] =
    "/* Fused attention in tiles (codegen_cuda/attn_cuda.c): a block of TQ * 8 threads per TQ query\n"
    " * rows (forward, logsumexp, dq) or TQ key rows (dk and dv) of one batch element; the rows of q,\n"
    " * k, v and the output gradient g a block reads come through shared memory TQ at a time, each\n"
    " * padded by one element (a warp's 8 threads of a row read 8 rows of the other tile at once).\n"
    " * Thread (r, c) = (threadIdx.x / 8, threadIdx.x % 8) computes the scores of its row r against\n"
    " * columns c, c + 8, ... of the other tile, and owns elements c, c + 8, ... of its row's result.\n"
    " * The scores' dot products run over d in order, as the C target's kernel sums them. */\n"
    "__device__ inline float ctc_attn_exp(float x) { return expf(x); }\n"
    "__device__ inline double ctc_attn_exp(double x) { return exp(x); }\n"
    "__device__ inline float ctc_attn_log(float x) { return logf(x); }\n"
    "__device__ inline double ctc_attn_log(double x) { return log(x); }\n"
    "\n"
    "/* rows r0 .. r0 + TQ - 1 of an operand (row stride rs) into tile s; zeros past row n */\n"
    "template <typename T, int TQ, int D>\n"
    "static __device__ inline void ctc_attn_load(T (*s)[D + 1], const T *x, int64_t rs, int64_t r0, int64_t n) {\n"
    "  for (int e = threadIdx.x; e < TQ * D; e += TQ * 8) {\n"
    "    const int r = e / D, d = e % D;\n"
    "    s[r][d] = r0 + r < n ? x[(r0 + r) * rs + d] : (T)0;\n"
    "  }\n"
    "}\n"
    "\n"
    "/* out[u] = row r of a . row c + 8 u of b */\n"
    "template <typename T, int TQ, int D>\n"
    "static __device__ inline void ctc_attn_dots(T *out, T (*a)[D + 1], T (*b)[D + 1], int r, int c) {\n"
    "  for (int u = 0; u < TQ / 8; u++) out[u] = 0;\n"
    "  for (int d = 0; d < D; d++)\n"
    "    for (int u = 0; u < TQ / 8; u++) out[u] += a[r][d] * b[c + 8 * u][d];\n"
    "}\n"
    "\n"
    "template <typename T, bool DIV>\n"
    "static __device__ inline T ctc_attn_scale(T s, T scale) { return DIV ? s / scale : s * scale; }\n"
    "\n"
    "/* Row r of ss: its scores against the key tile from j0 (scaled; -inf for keys past n, and\n"
    " * after query row i when causal). */\n"
    "template <typename T, int TQ, int D, bool CAUSAL, bool DIV>\n"
    "static __device__ inline void ctc_attn_scores(T (*ss)[TQ + 1], T (*sq)[D + 1], T (*sk)[D + 1], int r, int c, int64_t i,\n"
    "                                              int64_t j0, int64_t n, T scale) {\n"
    "  T s[TQ / 8];\n"
    "  ctc_attn_dots<T, TQ, D>(s, sq, sk, r, c);\n"
    "  for (int u = 0; u < TQ / 8; u++) {\n"
    "    const int64_t j = j0 + c + 8 * u;\n"
    "    ss[r][c + 8 * u] = j >= n || (CAUSAL && j > i) ? -(T)INFINITY : ctc_attn_scale<T, DIV>(s[u], scale);\n"
    "  }\n"
    "}\n"
    "\n"
    "/* The largest of m and row r of ss (a NaN is never larger). */\n"
    "template <typename T, int TQ>\n"
    "static __device__ inline T ctc_attn_max(T (*ss)[TQ + 1], int r, T m) {\n"
    "  for (int j = 0; j < TQ; j++)\n"
    "    if (ss[r][j] > m) m = ss[r][j];\n"
    "  return m;\n"
    "}\n"
    "\n"
    "/* One batch element's operand: its first row and the stride between rows. */\n"
    "template <typename T>\n"
    "struct ctc_attn_arg {\n"
    "  const T *p;\n"
    "  int64_t s0, s1, rs;   /* strides over the two batch axes and the rows */\n"
    "  __device__ const T *at(int64_t b0, int64_t b1) const { return p + b0 * s0 + b1 * s1; }\n"
    "};\n"
    "\n"
    "/* o = softmax(q k^T scale, causal or not) v over n rows, the batch split n1-minor: block\n"
    " * (b, i0) keeps its rows' running maximum m and sum l, and rescales what it summed by\n"
    " * exp(m_old - m_new) when a tile raises the maximum. A -inf score adds nothing; NaN and +inf\n"
    " * make the row NaN. */\n"
    "template <typename T, int TQ, int D, bool CAUSAL, bool DIV>\n"
    "static __device__ void ctc_attention_tiles(ctc_attn_arg<T> q, ctc_attn_arg<T> k, ctc_attn_arg<T> v, T *o, int64_t n1,\n"
    "                                           int64_t n, T scale) {\n"
    "  __shared__ T sq[TQ][D + 1], sk[TQ][D + 1], sv[TQ][D + 1], ss[TQ][TQ + 1], sp[TQ][TQ + 1];\n"
    "  const int64_t tiles = (n + TQ - 1) / TQ, b = blockIdx.x / tiles, i0 = blockIdx.x % tiles * TQ;\n"
    "  const T *qb = q.at(b / n1, b % n1), *kb = k.at(b / n1, b % n1), *vb = v.at(b / n1, b % n1);\n"
    "  const int r = threadIdx.x / 8, c = threadIdx.x % 8;\n"
    "  const int64_t i = i0 + r;\n"
    "  T acc[(D + 7) / 8], m = -(T)INFINITY, l = 0;\n"
    "  for (int u = 0; u < (D + 7) / 8; u++) acc[u] = 0;\n"
    "  ctc_attn_load<T, TQ, D>(sq, qb, q.rs, i0, n);\n"
    "  for (int64_t j0 = 0; j0 < n && (!CAUSAL || j0 < i0 + TQ); j0 += TQ) {   /* the key tiles it sees */\n"
    "    __syncthreads();   /* the last tile's readers are done */\n"
    "    ctc_attn_load<T, TQ, D>(sk, kb, k.rs, j0, n);\n"
    "    ctc_attn_load<T, TQ, D>(sv, vb, v.rs, j0, n);\n"
    "    __syncthreads();\n"
    "    ctc_attn_scores<T, TQ, D, CAUSAL, DIV>(ss, sq, sk, r, c, i, j0, n, scale);\n"
    "    __syncthreads();\n"
    "    const T mt = ctc_attn_max<T, TQ>(ss, r, m);   /* the row's maximum so far */\n"
    "    for (int u = 0; u < TQ / 8; u++) {\n"
    "      const T x = ss[r][c + 8 * u];\n"
    "      sp[r][c + 8 * u] = x == -(T)INFINITY ? (T)0 : ctc_attn_exp(x - mt);\n"
    "    }\n"
    "    if (mt > m) {   /* a new maximum: what was summed is rescaled */\n"
    "      const T f = m == -(T)INFINITY ? (T)0 : ctc_attn_exp(m - mt);\n"
    "      l *= f;\n"
    "      for (int u = 0; u < (D + 7) / 8; u++) acc[u] *= f;\n"
    "      m = mt;\n"
    "    }\n"
    "    __syncthreads();\n"
    "    for (int j = 0; j < TQ; j++) {\n"
    "      const T p = sp[r][j];\n"
    "      l += p;\n"
    "      for (int u = 0; u < (D + 7) / 8; u++)\n"
    "        if (c + 8 * u < D) acc[u] += p * sv[j][c + 8 * u];\n"
    "    }\n"
    "  }\n"
    "  if (i < n)\n"
    "    for (int u = 0; u < (D + 7) / 8; u++)\n"
    "      if (c + 8 * u < D) o[(b * n + i) * D + c + 8 * u] = acc[u] / l;\n"
    "}\n"
    "\n"
    "/* The gradients' first kernel: each query row's logsumexp and g . o, into the first two\n"
    " * elements of its row of r (dq's rows, which the last kernel overwrites). */\n"
    "template <typename T, int TQ, int D, bool CAUSAL, bool DIV>\n"
    "static __device__ void ctc_attention_bwd_lse(ctc_attn_arg<T> q, ctc_attn_arg<T> k, ctc_attn_arg<T> o,\n"
    "                                             ctc_attn_arg<T> g, T *rr, int64_t n1, int64_t n, T scale) {\n"
    "  __shared__ T sq[TQ][D + 1], sk[TQ][D + 1], ss[TQ][TQ + 1];\n"
    "  const int64_t tiles = (n + TQ - 1) / TQ, b = blockIdx.x / tiles, i0 = blockIdx.x % tiles * TQ;\n"
    "  const T *qb = q.at(b / n1, b % n1), *kb = k.at(b / n1, b % n1);\n"
    "  const int r = threadIdx.x / 8, c = threadIdx.x % 8;\n"
    "  const int64_t i = i0 + r;\n"
    "  T m = -(T)INFINITY, l = 0;\n"
    "  ctc_attn_load<T, TQ, D>(sq, qb, q.rs, i0, n);\n"
    "  for (int64_t j0 = 0; j0 < n && (!CAUSAL || j0 < i0 + TQ); j0 += TQ) {\n"
    "    __syncthreads();\n"
    "    ctc_attn_load<T, TQ, D>(sk, kb, k.rs, j0, n);\n"
    "    __syncthreads();\n"
    "    ctc_attn_scores<T, TQ, D, CAUSAL, DIV>(ss, sq, sk, r, c, i, j0, n, scale);\n"
    "    __syncthreads();\n"
    "    const T mt = ctc_attn_max<T, TQ>(ss, r, m);\n"
    "    if (mt > m) {\n"
    "      l *= m == -(T)INFINITY ? (T)0 : ctc_attn_exp(m - mt);\n"
    "      m = mt;\n"
    "    }\n"
    "    for (int j = 0; j < TQ; j++)\n"
    "      l += ss[r][j] == -(T)INFINITY ? (T)0 : ctc_attn_exp(ss[r][j] - m);\n"
    "  }\n"
    "  if (i < n && c == 0) {\n"
    "    const T *ob = o.at(b / n1, b % n1) + i * o.rs, *gb = g.at(b / n1, b % n1) + i * g.rs;\n"
    "    T di = 0;\n"
    "    for (int d = 0; d < D; d++) di += gb[d] * ob[d];\n"
    "    rr[(b * n + i) * D] = m + ctc_attn_log(l);\n"
    "    rr[(b * n + i) * D + 1] = di;\n"
    "  }\n"
    "}\n"
    "\n"
    "/* dk and dv of TQ key rows: over the query tiles that see them, p = exp(s - lse) and\n"
    " * ds = p (g . v - g . o) scale from the first kernel's rows, dv += p g and dk += ds q. */\n"
    "template <typename T, int TQ, int D, bool CAUSAL, bool DIV>\n"
    "static __device__ void ctc_attention_bwd_dkv(ctc_attn_arg<T> q, ctc_attn_arg<T> k, ctc_attn_arg<T> v,\n"
    "                                             ctc_attn_arg<T> g, const T *rr, T *dk_out, T *dv_out, int64_t n1,\n"
    "                                             int64_t n, T scale) {\n"
    "  __shared__ T sk[TQ][D + 1], sv[TQ][D + 1], sq[TQ][D + 1], sg[TQ][D + 1], sp[TQ][TQ + 1], sds[TQ][TQ + 1];\n"
    "  __shared__ T slse[TQ], sdi[TQ];\n"
    "  const int64_t tiles = (n + TQ - 1) / TQ, b = blockIdx.x / tiles, j0 = blockIdx.x % tiles * TQ;\n"
    "  const T *qb = q.at(b / n1, b % n1), *kb = k.at(b / n1, b % n1), *vb = v.at(b / n1, b % n1), *gb = g.at(b / n1, b % n1);\n"
    "  const int r = threadIdx.x / 8, c = threadIdx.x % 8;\n"
    "  const int64_t j = j0 + r;\n"
    "  T dk[(D + 7) / 8], dv[(D + 7) / 8];\n"
    "  for (int u = 0; u < (D + 7) / 8; u++) dk[u] = dv[u] = 0;\n"
    "  ctc_attn_load<T, TQ, D>(sk, kb, k.rs, j0, n);\n"
    "  ctc_attn_load<T, TQ, D>(sv, vb, v.rs, j0, n);\n"
    "  for (int64_t i0 = CAUSAL ? j0 : 0; i0 < n; i0 += TQ) {   /* the query tiles that see these keys */\n"
    "    __syncthreads();\n"
    "    ctc_attn_load<T, TQ, D>(sq, qb, q.rs, i0, n);\n"
    "    ctc_attn_load<T, TQ, D>(sg, gb, g.rs, i0, n);\n"
    "    if (threadIdx.x < TQ) {\n"
    "      const int64_t x = i0 + threadIdx.x;\n"
    "      slse[threadIdx.x] = x < n ? rr[(b * n + x) * D] : (T)0;\n"
    "      sdi[threadIdx.x] = x < n ? rr[(b * n + x) * D + 1] : (T)0;\n"
    "    }\n"
    "    __syncthreads();\n"
    "    T s[TQ / 8], dp[TQ / 8];\n"
    "    ctc_attn_dots<T, TQ, D>(s, sk, sq, r, c);\n"
    "    ctc_attn_dots<T, TQ, D>(dp, sv, sg, r, c);\n"
    "    for (int u = 0; u < TQ / 8; u++) {\n"
    "      const int64_t x = i0 + c + 8 * u;\n"
    "      const T sc = ctc_attn_scale<T, DIV>(s[u], scale);\n"
    "      const T p = x >= n || (CAUSAL && x < j) || sc == -(T)INFINITY ? (T)0 : ctc_attn_exp(sc - slse[c + 8 * u]);\n"
    "      sp[r][c + 8 * u] = p;\n"
    "      sds[r][c + 8 * u] = ctc_attn_scale<T, DIV>(p * (dp[u] - sdi[c + 8 * u]), scale);\n"
    "    }\n"
    "    __syncthreads();\n"
    "    for (int x = 0; x < TQ; x++) {\n"
    "      const T p = sp[r][x], ds = sds[r][x];\n"
    "      for (int u = 0; u < (D + 7) / 8; u++)\n"
    "        if (c + 8 * u < D) {\n"
    "          dv[u] += p * sg[x][c + 8 * u];\n"
    "          dk[u] += ds * sq[x][c + 8 * u];\n"
    "        }\n"
    "    }\n"
    "  }\n"
    "  if (j < n)\n"
    "    for (int u = 0; u < (D + 7) / 8; u++)\n"
    "      if (c + 8 * u < D) {\n"
    "        dk_out[(b * n + j) * D + c + 8 * u] = dk[u];\n"
    "        dv_out[(b * n + j) * D + c + 8 * u] = dv[u];\n"
    "      }\n"
    "}\n"
    "\n"
    "/* dq of TQ query rows (their logsumexp and g . o read first from their rows of rr, which it\n"
    " * then overwrites): over the key tiles they see, dq += ds k. */\n"
    "template <typename T, int TQ, int D, bool CAUSAL, bool DIV>\n"
    "static __device__ void ctc_attention_bwd_dq(ctc_attn_arg<T> q, ctc_attn_arg<T> k, ctc_attn_arg<T> v,\n"
    "                                            ctc_attn_arg<T> g, T *rr, int64_t n1, int64_t n, T scale) {\n"
    "  __shared__ T sq[TQ][D + 1], sg[TQ][D + 1], sk[TQ][D + 1], sv[TQ][D + 1], sds[TQ][TQ + 1];\n"
    "  const int64_t tiles = (n + TQ - 1) / TQ, b = blockIdx.x / tiles, i0 = blockIdx.x % tiles * TQ;\n"
    "  const T *qb = q.at(b / n1, b % n1), *kb = k.at(b / n1, b % n1), *vb = v.at(b / n1, b % n1), *gb = g.at(b / n1, b % n1);\n"
    "  const int r = threadIdx.x / 8, c = threadIdx.x % 8;\n"
    "  const int64_t i = i0 + r;\n"
    "  const T lse = i < n ? rr[(b * n + i) * D] : (T)0, di = i < n ? rr[(b * n + i) * D + 1] : (T)0;\n"
    "  T dq[(D + 7) / 8];\n"
    "  for (int u = 0; u < (D + 7) / 8; u++) dq[u] = 0;\n"
    "  ctc_attn_load<T, TQ, D>(sq, qb, q.rs, i0, n);\n"
    "  ctc_attn_load<T, TQ, D>(sg, gb, g.rs, i0, n);\n"
    "  for (int64_t j0 = 0; j0 < n && (!CAUSAL || j0 < i0 + TQ); j0 += TQ) {\n"
    "    __syncthreads();\n"
    "    ctc_attn_load<T, TQ, D>(sk, kb, k.rs, j0, n);\n"
    "    ctc_attn_load<T, TQ, D>(sv, vb, v.rs, j0, n);\n"
    "    __syncthreads();\n"
    "    T s[TQ / 8], dp[TQ / 8];\n"
    "    ctc_attn_dots<T, TQ, D>(s, sq, sk, r, c);\n"
    "    ctc_attn_dots<T, TQ, D>(dp, sg, sv, r, c);\n"
    "    for (int u = 0; u < TQ / 8; u++) {\n"
    "      const int64_t j = j0 + c + 8 * u;\n"
    "      const T sc = ctc_attn_scale<T, DIV>(s[u], scale);\n"
    "      const T p = j >= n || (CAUSAL && j > i) || sc == -(T)INFINITY ? (T)0 : ctc_attn_exp(sc - lse);\n"
    "      sds[r][c + 8 * u] = ctc_attn_scale<T, DIV>(p * (dp[u] - di), scale);\n"
    "    }\n"
    "    __syncthreads();\n"
    "    for (int j = 0; j < TQ; j++) {\n"
    "      const T ds = sds[r][j];\n"
    "      for (int u = 0; u < (D + 7) / 8; u++)\n"
    "        if (c + 8 * u < D) dq[u] += ds * sk[j][c + 8 * u];\n"
    "    }\n"
    "  }\n"
    "  if (i < n)\n"
    "    for (int u = 0; u < (D + 7) / 8; u++)\n"
    "      if (c + 8 * u < D) rr[(b * n + i) * D + c + 8 * u] = dq[u];\n"
    "}\n";

void cu_attention_support(Buf *b) { cg_puts(b, attn_tiles_text); }

/* Rows per tile: the most of 32, 16, 8 whose `tiles` [TQ][D + 1] tiles, two [TQ][TQ + 1] ones
 * and two rows fit in 48 KiB of static shared memory; 0 if none. */
static int attn_tq(int64_t D, int64_t size, int tiles) {
  for (int tq = 32; tq >= 8; tq /= 2)
    if (size * (tiles * tq * (D + 1) + 2 * tq * (tq + 1) + 2 * tq) <= 48 * 1024) return tq;
  return 0;
}

/* operand a of the call as a ctc_attn_arg: {its first row, batch strides, row stride} */
static void attn_arg(AttnK *A, Buf *b, int a) {
  cg_printf(b, "{%s", cg_ref(A->e->c, A->k->args[a]));
  if (A->k->off[a]) cg_printf(b, " + %lld", (ll)A->k->off[a]);
  cg_printf(b, ", %lld, %lld, %lld}", (ll)A->k->st[a][0], (ll)A->k->st[a][1], (ll)A->k->st[a][2]);
}

/* One kernel of the call: `fn`<T, TQ, D, causal, divide>(operands `args`, the result (with
 * dkv: its rows of dk and of dv after it too), n1, T, scale). */
static void attn_tile_kernel(AttnK *A, int i, const Inst *in, int tq, const char *fn, const int *args, int nargs,
                             int dkv, const char *what, const char *sfx) {
  Buf body = {0}, lit = {0};
  cu_kbegin(A->e, &body);
  const char *r = cg_ref(A->e->c, in->res);
  int64_t btd = A->B * A->T * A->D;
  cg_printf(&body, "  %s<%s, %d, %lld, %s, %s>(", fn, A->ct, tq, (ll)A->D, A->causal ? "true" : "false",
            A->divide ? "true" : "false");
  for (int a = 0; a < nargs; a++) {
    if (a) cg_puts(&body, ", ");
    attn_arg(A, &body, args[a]);
  }
  cg_literal(&lit, ty(A->e->f, in->res)->dtype, A->k->real);
  cg_printf(&body, ", %s", r);
  if (dkv) cg_printf(&body, ", %s + %lld, %s + %lld", r, (ll)btd, r, (ll)(2 * btd));
  cg_printf(&body, ", %lld, %lld, %s);\n", (ll)A->n1, (ll)A->T, lit.s);
  char note[200], grid[32];
  snprintf(note, sizeof note, "its kernel IR: a call of %s, here %s, a block of %d threads per %d rows", ir_ops[in->op].name,
           what, tq * 8, tq);
  snprintf(grid, sizeof grid, "%lld", (ll)(A->B * ((A->T + tq - 1) / tq)));
  cu_inst_launch(A->e, i, in, note, sfx, &body, grid, tq * 8, 1);
  cg_buf_free(&lit);
  cg_buf_free(&body);
}

int cu_attention(Ent *e, int i, const Inst *in) {
  const Func *f = e->f;
  const KnSchedule *sc = e->c->s;
  Kir *kir = kir_build_inst_call(e->g->p->arena, f, sc, &sc->kernels.data[sc->kernel_of[i]], in);
  DType dt = ty(f, in->res)->dtype;
  if (!kir || (dt != DT_F32 && dt != DT_F64)) return -1;
  AttnK A = {e, kir->body.data[0]->call, 0, 0, 0, 0, 0, 0, cg_ctype(dt), dt == DT_F32 ? "expf" : "exp",
             dt == DT_F32 ? "logf" : "log", ""};
  A.n1 = A.k->ints[0], A.B = A.k->ints[1], A.T = A.k->ints[2], A.D = A.k->ints[3], A.causal = A.k->ints[4];
  A.divide = A.k->ints[5];
  if (A.k->ints[6]) BUG("attention with bf16 roundings on the CUDA target (ir/attn.c fuses them for C only)");
  Buf lit = {0};
  cg_literal(&lit, dt, A.k->real);
  snprintf(A.scale, sizeof A.scale, "%s %s", A.divide ? "/" : "*", lit.s);
  cg_buf_free(&lit);
  int64_t size = (int64_t)ir_dtype_size(dt);
  int fwd = in->op == IR_ATTENTION, tq = attn_tq(A.D, size, fwd ? 3 : 4);
  if (!tq || (!fwd && A.D < 2)) {
    attn_rows(A, i, in);
    return 0;
  }
  e->g->attn_tiles = 1;
  if (fwd) {
    static const int qkv[3] = {0, 1, 2};
    attn_tile_kernel(&A, i, in, tq, "ctc_attention_tiles", qkv, 3, 0, "tiles of query rows", "");
    return 0;
  }
  /* ATTENTION_BWD: q, k, v, o, g -> r = [dq; dk; dv] */
  static const int lse[4] = {0, 1, 3, 4}, qkvg[4] = {0, 1, 2, 4};
  attn_tile_kernel(&A, i, in, tq, "ctc_attention_bwd_lse", lse, 4, 0, "tiles of query rows: their logsumexp and g . o",
                   "_lse");
  attn_tile_kernel(&A, i, in, tq, "ctc_attention_bwd_dkv", qkvg, 4, 1, "tiles of key rows: dk and dv", "_dkv");
  attn_tile_kernel(&A, i, in, tq, "ctc_attention_bwd_dq", qkvg, 4, 0, "tiles of query rows: dq", "_dq");
  return 0;
}
