/* index_adv.c - advanced indexing by one tensor, x[idx] / x[:, idx] (PyTorch's
 * rule for a single advanced index: the index's shape replaces that axis, and
 * negative entries count from the end): integer tensors, and boolean masks whose
 * values are known at compile time (their nonzero positions). A mask computed at
 * run time would give a shape known only then, so it is refused. */
#include "torch_int.h"

/* x indexed along axis by the tensor idx; *ndims receives the index's dims to
 * put in the result's shape at that axis (*nd of them) */
PV *t_index_by_tensor(L *L, Span at, PV *x, int axis, PV *idx, int64_t *dims, int *nd) {
  Type tx = x->t->type, ti = idx->t->type;
  const int64_t size = tx.dims[axis];
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
    idx = pos;
    ti = it;
  } else if (ir_dtype_is_float(ti.dtype)) {
    lower_error(L, at, "tensors used as indices must be long, int or bool tensors, got %s", ir_dtype_name(ti.dtype));
  }
  *nd = ti.ndim;
  for (int i = 0; i < ti.ndim; i++) dims[i] = ti.dims[i];
  const int64_t n = ir_numel(&ti);
  if (x->t->data && idx->t->data && ct_applies(L, x, NULL) && ct_applies(L, idx, NULL)) {   /* compile time */
    Type tr = tx;
    tr.dims[axis] = n;
    PV *r = t_const_tensor(L, at, tr, 0);
    int64_t outer = 1, inner = 1;
    for (int i = 0; i < axis; i++) outer *= tx.dims[i];
    for (int i = axis + 1; i < tx.ndim; i++) inner *= tx.dims[i];
    for (int64_t k = 0; k < n; k++) {
      int64_t j = (int64_t)idx->t->data[k];
      if (j < -size || j >= size)
        lower_error(L, at, "index %lld is out of bounds for dimension %d with size %lld", (long long)j, axis,
                    (long long)size);
      if (j < 0) j += size;
      for (int64_t o = 0; o < outer; o++)
        for (int64_t e = 0; e < inner; e++)
          r->t->data[(o * n + k) * inner + e] = x->t->data[(o * size + j) * inner + e];
    }
    return r;
  }
  if (!L->T->fn) lower_error(L, at, "indexing with a tensor is only supported inside compiled functions");
  PV *flat = t_reshape(L, at, t_cast(L, at, idx, DT_I64), &n, 1);
  flat = t_where(L, at, t_compare(L, at, OP_LT, flat, pv_int(L, 0)), t_binary(L, at, OP_ADD, flat, pv_int(L, size)), flat);
  return t_index_select(L, at, x, axis, flat);
}
