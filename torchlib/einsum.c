/* einsum.c - torch.einsum as permutes, reshapes, sums and batched GEMMs (contracted
 * pairwise, left to right), and torch.meshgrid as reshapes and expands; lucidrains'
 * attention files write `einsum('b h i d, b h j d -> b h i j', q, k)`. */
#include <string.h>
#include "torch_int.h"

#define EIN_MAX 64   /* index codes: 0-51 letters, 52 + k the k-th axis of '...' (from its left) */

typedef struct Term {
  PV *x;
  int n, idx[IR_MAX_DIMS];
} Term;

static int letter_code(char c) { return c >= 'a' && c <= 'z' ? c - 'a' : c >= 'A' && c <= 'Z' ? 26 + c - 'A' : -1; }

/* One operand's subscripts (spaces dropped) into t->idx: letters and at most one '...', which takes
 * the dims the letters leave (nell of them: the same count for every operand, the broadcast's). */
static void parse_term(L *L, Span at, const char *s, size_t len, int ndim, Term *t, int *nell) {
  int nl = 0, ell = -1;
  for (size_t i = 0; i < len; i++) {
    if (s[i] == ' ') continue;
    if (s[i] == '.') {
      if (ell >= 0 || i + 2 >= len || s[i + 1] != '.' || s[i + 2] != '.')
        lower_error(L, at, "einsum(): found '.' for operand that is not part of any ellipsis");
      ell = nl, i += 2;
      continue;
    }
    if (letter_code(s[i]) < 0) lower_error(L, at, "einsum(): invalid subscript given in the equation string: '%c'", s[i]);
    nl++;
  }
  const int ne = ell >= 0 ? ndim - nl : 0;
  if (ne < 0 || (ell < 0 && nl != ndim))
    lower_error(L, at, "einsum(): the number of subscripts in the equation (%d) does not match the number of "
                       "dimensions (%d) for operand %s", nl, ndim, ell >= 0 ? "with an ellipsis" : "");
  if (ell >= 0) {
    if (*nell >= 0 && *nell != ne && ne > 0 && *nell > 0)
      lower_error(L, at, "einsum(): operands' ellipses cover %d and %d dimensions; ctc broadcasts ellipses of one length",
                  *nell, ne);
    if (ne > *nell) *nell = ne;
  }
  t->n = 0;
  for (size_t i = 0; i < len; i++) {
    if (s[i] == ' ') continue;
    if (s[i] == '.') {
      for (int k = 0; k < ne; k++) t->idx[t->n++] = 52 + k;
      i += 2;
      continue;
    }
    const int c = letter_code(s[i]);
    for (int j = 0; j < t->n; j++)
      if (t->idx[j] == c)
        lower_error(L, at, "einsum(): subscript '%c' repeated in one operand (a diagonal) is not supported by ctc", s[i]);
    t->idx[t->n++] = c;
  }
}

static int has(const int *v, int n, int c) {
  for (int i = 0; i < n; i++)
    if (v[i] == c) return 1;
  return 0;
}

/* t with its indices not in keep[0, nk) summed out */
static void sum_unneeded(L *L, Span at, Term *t, const int *keep, int nk) {
  int64_t red[IR_MAX_DIMS];
  int nr = 0, n = 0;
  for (int i = 0; i < t->n; i++)
    if (!has(keep, nk, t->idx[i])) red[nr++] = i;
    else t->idx[n++] = t->idx[i];
  if (!nr) return;
  t->x = t_reduce(L, at, IR_REDUCE_SUM, t->x, red, nr, 0, 0);
  t->n = n;
}

/* a (permuted) to its indices in order o[0, no) */
static PV *permute_to(L *L, Span at, const Term *t, const int *o, int no) {
  int64_t perm[IR_MAX_DIMS];
  int same = 1;
  for (int i = 0; i < no; i++) {
    for (int j = 0; j < t->n; j++)
      if (t->idx[j] == o[i]) perm[i] = j;
    same &= perm[i] == i;
  }
  return same ? t->x : t_permute(L, at, t->x, perm, no);
}

static int64_t size_of(const Term *t, int c) {
  for (int i = 0; i < t->n; i++)
    if (t->idx[i] == c) return t->x->t->type.dims[i];
  return 1;
}

/* a and b contracted over their shared indices not in keep: a batched GEMM over the shared ones
 * kept, [batch, a's own, shared summed] x [batch, shared summed, b's own] */
static Term contract(L *L, Span at, Term a, Term b, const int *keep, int nk) {
  int bat[IR_MAX_DIMS], lf[IR_MAX_DIMS], sm[IR_MAX_DIMS], rf[IR_MAX_DIMS], nb = 0, nl = 0, ns = 0, nr = 0;
  for (int i = 0; i < a.n; i++) {
    const int c = a.idx[i];
    if (!has(b.idx, b.n, c)) lf[nl++] = c;
    else if (has(keep, nk, c)) bat[nb++] = c;
    else sm[ns++] = c;
  }
  for (int i = 0; i < b.n; i++)
    if (!has(a.idx, a.n, b.idx[i])) rf[nr++] = b.idx[i];
  int64_t B = 1, M = 1, K = 1, N = 1, out[IR_MAX_DIMS];
  int no = 0;
  Type ta = a.x->t->type, tb = b.x->t->type;
  for (int i = 0; i < nb; i++) {   /* a batch index of size 1 on one side (an ellipsis') is broadcast */
    const int64_t sa = size_of(&a, bat[i]), sb = size_of(&b, bat[i]);
    if (sa != sb && sa != 1 && sb != 1)
      lower_error(L, at, "einsum(): operands do not broadcast with remapped shapes %s and %s", shape_str(L, &ta),
                  shape_str(L, &tb));
    B *= sa > sb ? sa : sb;
    out[no++] = sa > sb ? sa : sb;
  }
  for (int i = 0; i < ns; i++) {
    if (size_of(&a, sm[i]) != size_of(&b, sm[i]))
      lower_error(L, at, "einsum(): the summed subscript has sizes %lld and %lld in the operands %s and %s",
                  (long long)size_of(&a, sm[i]), (long long)size_of(&b, sm[i]), shape_str(L, &ta), shape_str(L, &tb));
    K *= size_of(&a, sm[i]);
  }
  for (int i = 0; i < nl; i++) M *= out[no++] = size_of(&a, lf[i]);
  for (int i = 0; i < nr; i++) N *= out[no++] = size_of(&b, rf[i]);
  int oa[IR_MAX_DIMS], ob[IR_MAX_DIMS], k = 0;
  for (int i = 0; i < nb; i++) oa[k++] = bat[i];
  for (int i = 0; i < nl; i++) oa[k++] = lf[i];
  for (int i = 0; i < ns; i++) oa[k++] = sm[i];
  k = 0;
  for (int i = 0; i < nb; i++) ob[k++] = bat[i];
  for (int i = 0; i < ns; i++) ob[k++] = sm[i];
  for (int i = 0; i < nr; i++) ob[k++] = rf[i];
  PV *xa = permute_to(L, at, &a, oa, a.n), *xb = permute_to(L, at, &b, ob, b.n);
  Type ea = xa->t->type, eb = xb->t->type;   /* batch dims of size 1 expanded to the other side's */
  for (int i = 0; i < nb; i++) ea.dims[i] = eb.dims[i] = out[i];
  if (!ir_type_eq(&ea, &xa->t->type)) xa = t_expand_to(L, at, xa, ea);
  if (!ir_type_eq(&eb, &xb->t->type)) xb = t_expand_to(L, at, xb, eb);
  int64_t da[3] = {B, M, K}, db[3] = {B, K, N};
  PV *r = t_matmul(L, at, t_reshape(L, at, xa, da, 3), t_reshape(L, at, xb, db, 3));
  Term t = {.x = t_reshape(L, at, r, out, no), .n = 0};
  for (int i = 0; i < nb; i++) t.idx[t.n++] = bat[i];
  for (int i = 0; i < nl; i++) t.idx[t.n++] = lf[i];
  for (int i = 0; i < nr; i++) t.idx[t.n++] = rf[i];
  return t;
}

static PV *einsum(L *L, Span at, const char *eq, PV **ops, int nops) {
  if (nops < 1 || nops > 8) lower_error(L, at, "einsum(): ctc takes 1 to 8 operands, got %d", nops);
  const char *arrow = strstr(eq, "->");
  const size_t lhs = arrow ? (size_t)(arrow - eq) : strlen(eq);
  Term t[8];
  int nell = -1, count[EIN_MAX] = {0};
  const char *s = eq;
  for (int k = 0; k < nops; k++) {
    const char *comma = memchr(s, ',', (size_t)(eq + lhs - s));
    const size_t len = comma ? (size_t)(comma - s) : (size_t)(eq + lhs - s);
    if (!comma && k < nops - 1) lower_error(L, at, "einsum(): more operands were provided than specified in the equation");
    if (ops[k]->k != PV_TENSOR) lower_error(L, at, "einsum(): operand %d must be a tensor, not %s", k, pv_kind_name(ops[k]));
    t[k].x = ops[k];
    parse_term(L, at, s, len, ops[k]->t->type.ndim, &t[k], &nell);
    for (int i = 0; i < t[k].n; i++) count[t[k].idx[i]]++;
    s = comma ? comma + 1 : eq + lhs;
  }
  if (s != eq + lhs) lower_error(L, at, "einsum(): fewer operands were provided than specified in the equation");
  Term o = {.n = 0};
  if (arrow) {   /* the explicit output's subscripts, '...' its ellipsis dims */
    int on = 0, ne2 = nell;
    for (const char *c = arrow + 2; *c; c++) on += letter_code(*c) >= 0;
    const int ndim = on + (strstr(arrow + 2, "...") && nell > 0 ? nell : 0);
    parse_term(L, at, arrow + 2, strlen(arrow + 2), ndim, &o, &ne2);
    for (int i = 0; i < o.n; i++)
      if (!count[o.idx[i]])
        lower_error(L, at, "einsum(): output subscript %c does not appear in the equation for any input operand",
                    o.idx[i] < 26 ? 'a' + o.idx[i] : 'A' + o.idx[i] - 26);
  } else {   /* implicit: '...', then the letters that appear once, in alphabetical order */
    for (int k = 0; k < (nell > 0 ? nell : 0); k++) o.idx[o.n++] = 52 + k;
    for (int c = 0; c < 52; c++)
      if (count[c] == 1) o.idx[o.n++] = c;
  }
  Term cur = t[0];
  for (int k = 0; k < nops; k++) {   /* what is needed after operand k: the output and the operands after it */
    int keep[EIN_MAX], nk = 0;
    for (int i = 0; i < o.n; i++) keep[nk++] = o.idx[i];
    for (int j = k + 1; j < nops; j++)
      for (int i = 0; i < t[j].n; i++) keep[nk++] = t[j].idx[i];
    if (k == 0) {   /* its own indices nothing later reads summed first */
      sum_unneeded(L, at, &cur, keep, nk);
      continue;
    }
    Term b = t[k];
    int keepb[EIN_MAX], nkb = nk;
    memcpy(keepb, keep, sizeof(int) * (size_t)nk);
    for (int i = 0; i < cur.n; i++) keepb[nkb++] = cur.idx[i];
    sum_unneeded(L, at, &b, keepb, nkb);
    cur = contract(L, at, cur, b, keep, nk);
  }
  sum_unneeded(L, at, &cur, o.idx, o.n);
  return permute_to(L, at, &cur, o.idx, o.n);
}

/* torch.meshgrid(*tensors or a list, indexing='ij' | 'xy'): each 1-D input along its own axis of
 * the grid, expanded over the others ('xy' swaps the first two axes of every output). */
static PV *meshgrid(L *L, Span at, PV **xs, int n, const char *indexing) {
  int xy = !strcmp(indexing, "xy");
  if (!xy && strcmp(indexing, "ij")) lower_error(L, at, "torch.meshgrid: indexing must be one of \"xy\" or \"ij\", but received: %s", indexing);
  if (n < 1) lower_error(L, at, "torch.meshgrid expects a non-empty TensorList");
  Type g = {.ndim = n};
  for (int i = 0; i < n; i++) {
    if (xs[i]->k != PV_TENSOR || xs[i]->t->type.ndim > 1)
      lower_error(L, at, "torch.meshgrid: Expected 0D or 1D tensor in the tensor list but got: %s",
                  xs[i]->k == PV_TENSOR ? shape_str(L, &xs[i]->t->type) : pv_kind_name(xs[i]));
    g.dims[xy && n > 1 && i < 2 ? 1 - i : i] = xs[i]->t->type.ndim ? xs[i]->t->type.dims[0] : 1;
  }
  PV **out = arena_alloc(L->a, sizeof(PV *) * (size_t)n);
  int known = !L->T->fn;   /* in __init__: compile-time tensors, the grid's values computed here */
  for (int i = 0; i < n; i++) known &= xs[i]->t->data != NULL;
  for (int i = 0; i < n && known; i++) {
    const int ax = xy && n > 1 && i < 2 ? 1 - i : i;
    Type r = g;
    r.dtype = xs[i]->t->type.dtype;
    out[i] = t_const_tensor(L, at, r, 0);
    int64_t inner = 1;
    for (int k = ax + 1; k < n; k++) inner *= g.dims[k];
    for (int64_t e = 0; e < ir_numel(&r); e++) out[i]->t->data[e] = xs[i]->t->data[e / inner % g.dims[ax]];
  }
  if (known) return pv_tuple(L, out, n);
  for (int i = 0; i < n; i++) {
    const int ax = xy && n > 1 && i < 2 ? 1 - i : i;
    int64_t d[IR_MAX_DIMS];
    for (int k = 0; k < n; k++) d[k] = k == ax ? g.dims[ax] : 1;
    Type r = g;
    r.dtype = xs[i]->t->type.dtype;
    out[i] = t_expand_to(L, at, t_reshape(L, at, xs[i], d, n), r);
  }
  return pv_tuple(L, out, n);
}

PV *bi_einsum(L *L, PV *fn, Args *A) {
  Span at = A->at;
  PV **ops = A->args + 1;
  int nops = A->nargs - 1;
  if (fn->bi == BI_T_MESHGRID) {
    PV *ix = NULL;
    for (int i = 0; i < A->nkw; i++)
      if (!strcmp(A->kwnames[i], "indexing")) ix = A->kwvals[i];
      else lower_error(L, at, "meshgrid() got an unexpected keyword argument '%s'", A->kwnames[i]);
    if (ix && ix->k != PV_STR) lower_error(L, at, "torch.meshgrid: indexing must be a string");
    PV **xs = A->args;
    int n = A->nargs;
    if (n == 1 && (xs[0]->k == PV_LIST || xs[0]->k == PV_TUPLE)) n = xs[0]->n, xs = xs[0]->items;
    return meshgrid(L, at, xs, n, ix ? ix->s : "ij");
  }
  if (A->nargs < 1 || A->args[0]->k != PV_STR)
    lower_error(L, at, "einsum() takes an equation string and its operands");
  if (A->nkw) lower_error(L, at, "einsum() got an unexpected keyword argument '%s'", A->kwnames[0]);
  if (nops == 1 && (ops[0]->k == PV_LIST || ops[0]->k == PV_TUPLE)) nops = ops[0]->n, ops = ops[0]->items;
  return einsum(L, at, A->args[0]->s, ops, nops);
}
