/* index_adv.c - advanced indexing by tensors, PyTorch's rules (those of NumPy, but an
 * integer, and a 0-d integer tensor, selects before the tensors are placed):
 *   x[idx], x[:, idx]        one index tensor: its shape replaces that axis
 *   x[i, j], x[:, i, j]      several (int tensors, flat int lists, compile-time bool
 *   x[i, :, j]               masks): they broadcast together to a shape B, which replaces
 *                            their axes where they are adjacent, and goes first where a
 *                            slice, None or Ellipsis separates them
 * Negative entries count from the end. A boolean mask's values must be known at compile
 * time (its nonzero positions are the index): one computed at run time would give a
 * shape known only then, so it is refused. Several tensors read one gather of x with
 * their axes flattened into one, at the row-major position they name; each index is
 * checked against its own axis first, at compile time when its values are known, else
 * at run time (t_checked_index: the entry stops with the op's model line). Gradients
 * are the gather's (a scatter-add back). */
#include <string.h>
#include "torch_int.h"

/* an index tensor for an axis of size `size`, as integer positions: a compile-time
 * bool mask becomes its nonzero positions; run-time masks and floats are refused */
static PV *index_positions(L *L, Span at, PV *idx, int axis, int64_t size) {
  Type ti = idx->t->type;
  if (ti.dtype == DT_BOOL) {
    if (!idx->t->data)
      lower_error(L, at, "indexing with a boolean mask computed at run time is not supported by ctc: the result's "
                         "shape would depend on the data (use torch.where, or multiply by the mask)");
    if (ti.ndim != 1 || ti.dims[0] != size)
      lower_error(L, at, "the boolean mask of shape %s does not match dimension %d of size %lld (ctc supports 1-D masks)",
                  shape_str(L, &ti), axis, (long long)size);
    int64_t n = 0;
    for (int64_t i = 0; i < size; i++) n += idx->t->data[i] != 0;
    if (n == 0) lower_error(L, at, "zero-size tensors are not supported by ctc: the mask selects nothing");
    Type it = {.dtype = DT_I64, .ndim = 1, .dims = {n}};
    PV *pos = t_const_tensor(L, at, it, 0);
    for (int64_t i = 0, k = 0; i < size; i++)
      if (idx->t->data[i] != 0) pos->t->data[k++] = (double)i;
    return pos;
  }
  if (ir_dtype_is_float(ti.dtype))
    lower_error(L, at, "tensors used as indices must be long, int or bool tensors, got %s", ir_dtype_name(ti.dtype));
  return idx;
}

/* x's slices along axis at the in-range positions idx (1-D i64, values known), computed here */
static PV *ct_take(L *L, Span at, PV *x, int axis, PV *idx) {
  Type tx = x->t->type, tr = tx;
  const int64_t size = tx.dims[axis], n = ir_numel(&idx->t->type);
  tr.dims[axis] = n;
  PV *r = t_const_tensor(L, at, tr, 0);
  int64_t outer = 1, inner = 1;
  for (int i = 0; i < axis; i++) outer *= tx.dims[i];
  for (int i = axis + 1; i < tx.ndim; i++) inner *= tx.dims[i];
  for (int64_t k = 0; k < n; k++) {
    int64_t j = (int64_t)idx->t->data[k];
    if (j < -size || j >= size)
      lower_error(L, at, "index %lld is out of bounds for dimension %d with size %lld", (long long)j, axis, (long long)size);
    if (j < 0) j += size;
    for (int64_t o = 0; o < outer; o++)
      for (int64_t e = 0; e < inner; e++) r->t->data[(o * n + k) * inner + e] = x->t->data[(o * size + j) * inner + e];
  }
  return r;
}

/* x indexed along axis by the tensor idx; *ndims receives the index's dims to
 * put in the result's shape at that axis (*nd of them) */
PV *t_index_by_tensor(L *L, Span at, PV *x, int axis, PV *idx, int64_t *dims, int *nd) {
  const int64_t size = x->t->type.dims[axis];
  idx = index_positions(L, at, idx, axis, size);
  Type ti = idx->t->type;
  *nd = ti.ndim;
  for (int i = 0; i < ti.ndim; i++) dims[i] = ti.dims[i];
  int64_t n = ir_numel(&ti);
  if (x->t->data && idx->t->data && ct_applies(L, x, NULL) && ct_applies(L, idx, NULL))   /* compile time */
    return ct_take(L, at, x, axis, idx);
  if (!L->T->fn) lower_error(L, at, "indexing with a tensor is only supported inside compiled functions");
  PV *flat = t_reshape(L, at, t_cast(L, at, idx, DT_I64), &n, 1);
  flat = t_where(L, at, t_compare(L, at, OP_LT, flat, pv_int(L, 0)), t_binary(L, at, OP_ADD, flat, pv_int(L, size)), flat);
  return t_index_select(L, at, x, axis, flat);
}

/* idx's positions in [0, size): negatives wrapped; any outside [-size, size) is refused
 * here when the values are known, else stops the entry at run time */
static PV *checked_positions(L *L, Span at, PV *idx, int axis, int64_t size) {
  idx = index_positions(L, at, idx, axis, size);
  Type ti = idx->t->type;
  if (idx->t->data && !idx->t->slot) {   /* values known: a constant */
    Type it = ti;
    it.dtype = DT_I64;
    PV *r = t_const_tensor(L, at, it, 0);
    for (int64_t k = 0; k < ir_numel(&ti); k++) {
      int64_t j = (int64_t)idx->t->data[k];
      if (j < -size || j >= size)
        lower_error(L, at, "index %lld is out of bounds for dimension %d with size %lld", (long long)j, axis,
                    (long long)size);
      r->t->data[k] = (double)(j < 0 ? j + size : j);
    }
    return r;
  }
  if (!L->T->fn) lower_error(L, at, "indexing with a tensor is only supported inside compiled functions");
  PV *i64 = t_cast(L, at, idx, DT_I64);
  PV *w = t_where(L, at, t_compare(L, at, OP_LT, i64, pv_int(L, 0)), t_binary(L, at, OP_ADD, i64, pv_int(L, size)), i64);
  return t_checked_index(L, at, w, size, arena_printf(L->a, "index_for_dim_%d", axis));
}

/* x indexed by k >= 2 tensors idx[] at its axes ax[] (increasing): the result has x's
 * other axes in order, with the indices' broadcast shape (*bdims, *bnd dims) first when
 * `front`, else in place of the first indexed axis */
PV *t_index_by_tensors(L *L, Span at, PV *x, const int *ax, PV **idx, int k, int front, int64_t *bdims, int *bnd) {
  CHECK(k >= 2 && k <= IR_MAX_DIMS);
  Type tx = x->t->type, b = {.dtype = DT_I64};
  const char *shapes = "";
  int bad = 0;
  PV *pos[IR_MAX_DIMS] = {0};
  for (int j = 0; j < k; j++) {
    pos[j] = checked_positions(L, at, idx[j], ax[j], tx.dims[ax[j]]);
    Type tj = pos[j]->t->type, nb;
    shapes = arena_printf(L->a, "%s%s%s", shapes, j ? ", " : "", shape_str(L, &tj));
    if (j == 0) b = tj;
    else if (ir_broadcast_shapes(&b, &tj, &nb) < 0) bad = 1;
    else b = nb;
  }
  if (bad) lower_error(L, at, "shape mismatch: indexing tensors could not be broadcast together with shapes %s", shapes);
  /* the row-major position among the indexed axes: ((i0 * n1 + i1) * n2 + i2) ... */
  PV *lin = pos[0];
  int64_t span = tx.dims[ax[0]];
  for (int j = 1; j < k; j++) {
    lin = t_binary(L, at, OP_ADD, t_binary(L, at, OP_MUL, lin, pv_int(L, tx.dims[ax[j]])), pos[j]);
    if (ir_mul(span, tx.dims[ax[j]], &span) < 0) lower_error(L, at, "the indexed tensor is too large");
  }
  /* x with the indexed axes first, flattened into one of size span */
  int64_t perm[IR_MAX_DIMS], flat[IR_MAX_DIMS];
  int np = 0, nf = 1, isx[IR_MAX_DIMS] = {0};
  for (int j = 0; j < k; j++) perm[np++] = ax[j], isx[ax[j]] = 1;
  int before = 0;   /* x's other axes before the first indexed one */
  flat[0] = span;
  for (int i = 0; i < tx.ndim; i++)
    if (!isx[i]) {
      perm[np++] = i;
      flat[nf++] = tx.dims[i];
      before += i < ax[0];
    }
  if (x->t->data && ct_applies(L, x, NULL)) {   /* a copy to permute: the result is no view of x (PyTorch's is a copy) */
    PV *c = t_const_tensor(L, at, tx, 0);
    memcpy(c->t->data, x->t->data, sizeof(double) * (size_t)ir_numel(&tx));
    x = c;
  }
  PV *xf = t_reshape(L, at, t_permute(L, at, x, perm, tx.ndim), flat, nf);
  int64_t n = ir_numel(&b);
  PV *l1 = t_reshape(L, at, lin, &n, 1);
  PV *r = lin->t->data && xf->t->data && ct_applies(L, xf, NULL) && ct_applies(L, l1, NULL)
              ? ct_take(L, at, xf, 0, l1)
              : t_index_select(L, at, xf, 0, l1);
  /* (B..., others...), then B moved into place */
  int64_t shp[2 * IR_MAX_DIMS];
  int ns = 0;
  for (int i = 0; i < b.ndim; i++) shp[ns++] = b.dims[i];
  for (int i = 1; i < nf; i++) shp[ns++] = flat[i];
  if (ns > IR_MAX_DIMS) lower_error(L, at, "too many dimensions (%d) in the result of indexing", ns);
  r = t_reshape(L, at, r, shp, ns);
  if (!front && before > 0) {
    int64_t p2[IR_MAX_DIMS];
    int m = 0;
    for (int i = 0; i < before; i++) p2[m++] = b.ndim + i;
    for (int i = 0; i < b.ndim; i++) p2[m++] = i;
    for (int i = b.ndim + before; i < ns; i++) p2[m++] = i;
    r = t_permute(L, at, r, p2, ns);
  }
  *bnd = b.ndim;
  for (int i = 0; i < b.ndim; i++) bdims[i] = b.dims[i];
  return r;
}
