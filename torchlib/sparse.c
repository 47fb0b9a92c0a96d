/* sparse.c - sparse matrices as graph networks use them (torch.spmm(adj, h),
 * torch.sparse.mm, x.to_sparse(), torch.sparse_coo_tensor(indices, values, size)),
 * stored dense: every product and conversion gives PyTorch's values (a sparse
 * tensor's value is its dense one, duplicates summed), computed as dense
 * matmuls. */
#include <string.h>
#include "torch_int.h"

static PV *need_t(L *L, Span at, PV *v, const char *fn, const char *what) {
  if (!v || v->k != PV_TENSOR) lower_error(L, at, "%s: %s must be a tensor", fn, what);
  return v;
}

/* the dense tensor of size `size` with values[k] summed at indices[:, k] */
static PV *coo_dense(L *L, Span at, PV *idx, PV *val, PV *size, const char *fn) {
  need_t(L, at, idx, fn, "indices");
  need_t(L, at, val, fn, "values");
  Type ti = idx->t->type, tv = val->t->type;
  if (ti.ndim != 2 || ir_dtype_is_float(ti.dtype))
    lower_error(L, at, "%s: indices must be an int64 tensor of shape [ndim, nnz], got %s %s", fn,
                ir_dtype_name(ti.dtype), shape_str(L, &ti));
  if (tv.ndim != 1 || tv.dims[0] != ti.dims[1])
    lower_error(L, at, "%s: values must have shape [%lld] (one per index column), got %s", fn, (long long)ti.dims[1],
                shape_str(L, &tv));
  if (!size || size->k == PV_NONE)
    lower_error(L, at, "%s without a size is not supported by ctc: give the dense shape", fn);
  int64_t dims[IR_MAX_DIMS];
  int n = arg_ints(L, at, size, dims, IR_MAX_DIMS, "size");
  if (n != ti.dims[0])
    lower_error(L, at, "%s: the size has %d dimensions, the indices %lld", fn, n, (long long)ti.dims[0]);
  Type tr = tv;
  tr.ndim = n;
  int64_t total = 1;
  for (int i = 0; i < n; i++) {
    if (dims[i] <= 0) lower_error(L, at, "%s: sizes must be positive", fn);
    tr.dims[i] = dims[i];
    total *= dims[i];
  }
  const int64_t nnz = ti.dims[1];
  if (idx->t->data && val->t->data) {   /* at compile time: the dense constant */
    PV *r = t_const_tensor(L, at, tr, 0);
    for (int64_t k = 0; k < nnz; k++) {
      int64_t lin = 0;
      for (int i = 0; i < n; i++) {
        double c = idx->t->data[i * nnz + k];
        if (c < 0 || c >= (double)dims[i])
          lower_error(L, at, "%s: index %lld in dimension %d is out of bounds for size %lld", fn, (long long)c, i,
                      (long long)dims[i]);
        lin = lin * dims[i] + (int64_t)c;
      }
      r->t->data[lin] += val->t->data[k];
    }
    return r;
  }
  if (!L->T->fn) lower_error(L, at, "%s of computed values is only supported inside compiled functions", fn);
  /* linear positions sum_i indices[i] * stride_i, checked in range, then index_add */
  PV *i64 = t_cast(L, at, idx, DT_I64), *lin = NULL;
  for (int i = 0; i < n; i++) {
    PV *row = t_reshape(L, at, t_slice(L, at, i64, 0, i, i + 1, 1), &nnz, 1);
    row = t_checked_index(L, at, row, dims[i], "sparse index");
    lin = lin ? t_binary(L, at, OP_ADD, t_binary(L, at, OP_MUL, lin, pv_int(L, dims[i])), row) : row;
  }
  Type flat = tr;
  flat.ndim = 1;
  flat.dims[0] = total;
  PV *z = t_const_tensor(L, at, flat, 0);
  return t_reshape(L, at, t_index_add(L, at, z, 0, lin, val, NULL), dims, n);
}

PV *bi_sparse(L *L, PV *fn, Args *A) {
  PV *a[6];
  Span at = A->at;
  switch (fn->bi) {
  case BI_T_SPMM:
  case BI_SP_MM: {
    const char *name = fn->bi == BI_T_SPMM ? "spmm" : "sparse.mm";
    bind_args(L, A, "mat1,mat2", a);
    PV *m1 = need_t(L, at, a[0], name, "mat1"), *m2 = need_t(L, at, a[1], name, "mat2");
    if (m1->t->type.ndim != 2 || m2->t->type.ndim != 2)
      lower_error(L, at, "%s: expects two 2-D matrices, got %s and %s", name, shape_str(L, &m1->t->type),
                  shape_str(L, &m2->t->type));
    return t_matmul(L, at, m1, m2);
  }
  case BI_TM_TO_SPARSE:
  case BI_TM_TO_DENSE: {
    PV *x = fn->self;
    bind_args(L, A, fn->bi == BI_TM_TO_SPARSE ? "sparse_dims=" : "dtype=", a);
    if (a[0] && a[0]->k != PV_NONE) lower_error(L, at, "%s with arguments is not supported by ctc", bi_rows[fn->bi].name);
    return need_t(L, at, x, bi_rows[fn->bi].name, "self");
  }
  default: {   /* torch.sparse_coo_tensor(indices, values, size), torch.sparse.FloatTensor(i, v, size) */
    const char *name = fn->bi == BI_SP_FLOATTENSOR ? "sparse.FloatTensor" : "sparse_coo_tensor";
    bind_args(L, A, "indices,values,size=,dtype=,device=,requires_grad=", a);
    PV *v = need_t(L, at, a[1], name, "values");
    if (a[3] && a[3]->k != PV_NONE) {
      if (a[3]->k != PV_DTYPE) lower_error(L, at, "%s: dtype must be a torch dtype", name);
      v = t_cast(L, at, v, a[3]->dt);
    }
    if (fn->bi == BI_SP_FLOATTENSOR && v->t->type.dtype != DT_F32) v = t_cast(L, at, v, DT_F32);
    return coo_dense(L, at, a[0], v, a[2], name);
  }
  }
}
