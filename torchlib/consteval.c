/* consteval.c - tensor arithmetic on compile-time values outside compiled code:
 * module-level code and __init__ (`W_target = torch.randn(4, 1) * 5`, a
 * PositionalEncoding's `pe[:, 0::2] = torch.sin(position * div_term)`). The
 * operands are tensors with host data (Tensor.data) or Python numbers; the result
 * is computed here in double and rounded to its dtype as the generated code would
 * (float32 values are stored rounded), and is again a compile-time tensor, which
 * compiled code uses as a constant (`ctc.const.N`, tensor.c's t_val). Parameters
 * have no compile-time values (<model>_init fills them at run time): an operation
 * on one is still refused here. Each ct_* returns NULL when it does not apply
 * (inside compiled code, or an operand without values), and the caller goes on
 * with the staged form. */
#include <math.h>
#include <string.h>
#include "torch_int.h"

/* a value this file computes on: a Python number or a compile-time tensor */
static int ct_operand(PV *x) {
  return pv_is_num(x) || (x->k == PV_TENSOR && x->t->data && !x->t->slot && x->t->v < 0);
}

int ct_applies(L *L, PV *a, PV *b) { return !L->T->fn && ct_operand(a) && (!b || ct_operand(b)); }

/* a value rounded to dtype dt (float32 rounding, integer truncation, bool) */
static double round_to_(double v, DType dt) {
  switch (dt) {
  case DT_F32: return (double)(float)v;
  case DT_I64:
  case DT_I32: return isfinite(v) ? trunc(v) : 0;
  case DT_BOOL: return v != 0;
  default: return v;
  }
}
/* every caller has L: --dtype f64 programs keep f32 data unrounded (they become f64) */
#define round_to(v, dt) round_to_((v), L->T->f64 && (dt) == DT_F32 ? DT_F64 : (dt))

/* element i of a (shape ta) read at result index i of shape r (numpy broadcasting) */
static double bread(PV *a, const Type *r, int64_t i) {
  if (a->k != PV_TENSOR) return pv_num(a);
  const Type *t = &a->t->type;
  int64_t off = 0, stride = 1;
  for (int d = r->ndim - 1, k = t->ndim - 1; d >= 0; d--, k--) {
    int64_t idx = i % r->dims[d];
    i /= r->dims[d];
    if (k >= 0) {
      if (t->dims[k] != 1) off += idx * stride;
      stride *= t->dims[k];
    }
  }
  return a->t->data[off];
}

/* the operand's values as an array of its (or, for a Python number, a 0-d)
 * tensor's type with dtype dt: a tensor's own array where no conversion is
 * needed, else a copy converted as the generated code's cast would */
static const double *operand_data(L *L, Span at, PV *x, DType dt, Type *t) {
  if (x->k != PV_TENSOR) {
    *t = (Type){.dtype = dt};
    double *v = arena_alloc(L->a, sizeof(double));
    *v = round_to(pv_num(x), dt);
    return v;
  }
  *t = x->t->type;
  t->dtype = dt;
  if (x->t->type.dtype == dt) return x->t->data;
  int64_t n = ir_numel(t);
  double *v = arena_alloc(L->a, sizeof(double) * (size_t)(n + 1));
  for (int64_t i = 0; i < n; i++) v[i] = round_to(x->t->data[i], dt);
  return v;
}

/* op on compile-time operands xs (converted to dtype dt; -1: each keeps its
 * own) by the reference evaluator (ir/interp.c), a compile-time tensor of type
 * r; an op it does not know is an error here, never an approximation */
static PV *ct_eval(L *L, Span at, Op op, const int64_t *attr, int n, PV **xs, int dt, Type r) {
  Type *ta = arena_alloc(L->a, sizeof(Type) * (size_t)(n + 1));
  const double **a = arena_alloc(L->a, sizeof(double *) * (size_t)(n + 1));
  for (int k = 0; k < n; k++)
    a[k] = operand_data(L, at, xs[k], op == IR_WHERE && k == 0 ? DT_BOOL : dt >= 0 ? (DType)dt : xs[k]->t->type.dtype,
                        &ta[k]);
  Type rt = r;
  if (L->T->f64 && rt.dtype == DT_F32) {   /* --dtype f64: f32 data computes unrounded */
    rt.dtype = DT_F64;
    for (int k = 0; k < n; k++)
      if (ta[k].dtype == DT_F32) ta[k].dtype = DT_F64;
  }
  PV *out = t_const_tensor(L, at, r, 0);
  eval_charge(L, at, ir_numel(&r) / 16 + 1);
  static const int64_t noattr[IR_MAX_ATTRS];
  if (!ir_eval(op, attr ? attr : noattr, 0, n, ta, a, &rt, out->t->data))
    lower_error(L, at, "ctc cannot compute '%s' on %s values at compile time", ir_ops[op].name,
                ir_dtype_name(n ? ta[0].dtype : r.dtype));
  return out;
}

/* a op b elementwise, computed in dtype dt, result of dtype rdt */
PV *ct_elem2(L *L, Span at, Op op, PV *a, PV *b, DType dt, DType rdt) {
  if (!ct_applies(L, a, b)) return NULL;
  Type ta = a->k == PV_TENSOR ? a->t->type : (Type){0}, tb = b->k == PV_TENSOR ? b->t->type : (Type){0}, r;
  if (ir_broadcast_shapes(&ta, &tb, &r) < 0)
    lower_error(L, at, "shape mismatch: %s and %s cannot be broadcast together", shape_str(L, &ta), shape_str(L, &tb));
  r.dtype = rdt;
  PV *xs[2] = {a, b};
  return ct_eval(L, at, op, NULL, 2, xs, dt, r);
}

/* torch.where(c, a, b) with a and b in dtype dt */
PV *ct_where(L *L, Span at, PV *c, PV *a, PV *b, DType dt) {
  if (!ct_applies(L, c, NULL) || !ct_applies(L, a, b)) return NULL;
  Type t[3], r;
  PV *xs[3] = {c, a, b};
  for (int k = 0; k < 3; k++) t[k] = xs[k]->k == PV_TENSOR ? xs[k]->t->type : (Type){0};
  if (ir_broadcast_shapes(&t[0], &t[1], &r) < 0 || ir_broadcast_shapes(&r, &t[2], &r) < 0)
    lower_error(L, at, "shape mismatch in 'where': %s, %s and %s cannot be broadcast together", shape_str(L, &t[0]),
                shape_str(L, &t[1]), shape_str(L, &t[2]));
  r.dtype = dt;
  return ct_eval(L, at, IR_WHERE, NULL, 3, xs, dt, r);
}

/* x converted to dtype dt as the generated code's cast (ops.def's CAST):
 * rounded to float, truncated to an integer with the type's minimum for NaN and
 * out-of-range values, integers narrowed to int32 wrapping, != 0 for bool */
PV *ct_cast(L *L, Span at, PV *x, DType dt) {
  if (L->T->fn || x->k != PV_TENSOR || !x->t->data) return NULL;
  Type r = x->t->type;
  r.dtype = dt;
  return ct_eval(L, at, IR_CAST, NULL, 1, &x, -1, r);
}

PV *ct_unary(L *L, Span at, Op op, PV *x, DType dt) {
  if (!ct_applies(L, x, NULL) || x->k != PV_TENSOR) return NULL;
  Type r = x->t->type;
  r.dtype = dt;
  return ct_eval(L, at, op, NULL, 1, &x, dt, r);
}

/* r, a copy of (part of) x's values, is what PyTorch makes a view of x: writes
 * into either one (slice assignment) would not reach the other here, so they are
 * refused from now on (ct_setitem) rather than silently not shared */
PV *ct_view(PV *x, PV *r) {
  r->t->is_view = 1;
  x->t->viewed = 1;
  return r;
}

/* out[i0..] = x[... perm ...] */
PV *ct_permute(L *L, Span at, PV *x, const int64_t *perm, Type out) {
  if (!ct_applies(L, x, NULL)) return NULL;
  return ct_view(x, ct_eval(L, at, IR_PERMUTE, perm, 1, &x, -1, out));
}

/* elements start, start + step, ... of axis */
PV *ct_slice(L *L, Span at, PV *x, int axis, int64_t start, int64_t step, Type out) {
  if (!ct_applies(L, x, NULL)) return NULL;
  int64_t attr[IR_MAX_ATTRS] = {0};
  for (int d = 0; d < out.ndim; d++) attr[2 * d + 1] = 1;
  attr[2 * axis] = start, attr[2 * axis + 1] = step;
  return ct_view(x, ct_eval(L, at, IR_SLICE, attr, 1, &x, -1, out));
}

PV *ct_concat(L *L, Span at, PV **xs, int n, int64_t dim, Type out) {
  if (L->T->fn) return NULL;
  for (int i = 0; i < n; i++)
    if (!ct_operand(xs[i]) || xs[i]->k != PV_TENSOR) return NULL;
  int64_t attr[IR_MAX_ATTRS] = {dim};
  return ct_eval(L, at, IR_CONCAT, attr, n, xs, out.dtype, out);
}

/* sum, mean (the sum in double divided by the count, rounded once) or max over
 * dims, keeping them (size 1) */
PV *ct_reduce(L *L, Span at, Op op, PV *x, const int *red, int mean, Type out) {
  if (!ct_applies(L, x, NULL) || (op != IR_REDUCE_SUM && op != IR_REDUCE_MAX)) return NULL;
  int64_t attr[IR_MAX_ATTRS] = {0};
  for (int d = 0; d < x->t->type.ndim; d++)
    if (red[d]) attr[0] |= (int64_t)1 << d;
  if (!mean) return ct_eval(L, at, op, attr, 1, &x, -1, out);
  Type sum = out;
  sum.dtype = DT_F64;
  PV *r = ct_eval(L, at, op, attr, 1, &x, DT_F64, sum);
  int64_t cnt = ir_numel(&x->t->type) / ir_numel(&out);
  r->t->type.dtype = out.dtype;
  for (int64_t i = 0; i < ir_numel(&out); i++) r->t->data[i] = round_to(r->t->data[i] / (double)cnt, out.dtype);
  return r;
}

/* a 2-D matrix product a [m, k] @ b [k, n] (torch.mm, @ on matrices) */
PV *ct_matmul(L *L, Span at, PV *a, PV *b) {
  if (!ct_applies(L, a, b) || a->k != PV_TENSOR || b->k != PV_TENSOR) return NULL;
  Type ta = a->t->type, tb = b->t->type;
  if (ta.ndim != 2 || tb.ndim != 2) return NULL;
  if (ta.dims[1] != tb.dims[0])
    lower_error(L, at, "mat1 and mat2 shapes cannot be multiplied (%lldx%lld and %lldx%lld)", (long long)ta.dims[0],
                (long long)ta.dims[1], (long long)tb.dims[0], (long long)tb.dims[1]);
  Type r = ta;
  r.dims[1] = tb.dims[1];
  eval_charge(L, at, (r.dims[0] * r.dims[1]) / 4 * ta.dims[1] + 1);   /* the compile-time step limit bounds m * n * k */
  PV *xs[2] = {a, b};
  return ct_eval(L, at, IR_MATMUL, NULL, 2, xs, -1, r);
}

/* x[idx] = v on a compile-time tensor (PyTorch's in-place write into its storage):
 * the positions come from indexing a tensor of element numbers the same way */
void setitem_shape_check(L *L, Span at, const PV *v, Type r) {
  if (v->k != PV_TENSOR) return;
  Type b;
  int bad = ir_broadcast_shapes(&v->t->type, &r, &b) < 0;
  b.dtype = r.dtype;
  if (bad || !ir_type_eq(&b, &r))
    lower_error(L, at, "shape mismatch: value tensor of shape %s cannot be broadcast to indexing result of shape %s",
                shape_str(L, &v->t->type), shape_str(L, &r));
}

int ct_setitem(L *L, Span at, PV *x, PV *idx, PV *v) {
  if (L->T->fn || !ct_operand(x) || x->k != PV_TENSOR) return 0;
  if (!ct_operand(v))
    lower_error(L, at, "assigning into a compile-time tensor needs a compile-time value (a number or a tensor "
                       "computed at compile time), got '%s'", pv_kind_name(v));
  if (x->t->is_view || x->t->viewed)
    lower_error(L, at, "assigning into a compile-time tensor that %s: PyTorch shares their storage, ctc's "
                       "compile-time views are copies; assign into the tensor before taking views of it",
                x->t->is_view ? "is a view of another (an index, slice, view or transpose of it)"
                              : "has views (an index, slice, view or transpose of it was taken)");
  Type tt = x->t->type;
  tt.dtype = DT_F64;
  PV *ids = t_const_tensor(L, at, tt, 0);
  for (int64_t i = 0; i < ir_numel(&tt); i++) ids->t->data[i] = (double)i;
  PV *pos = t_index(L, at, ids, idx);
  Type r = pos->t->type;
  setitem_shape_check(L, at, v, r);
  Type rr = r;
  rr.dtype = x->t->type.dtype;
  for (int64_t i = 0; i < ir_numel(&r); i++)
    x->t->data[(int64_t)pos->t->data[i]] = round_to(bread(v, &rr, i), x->t->type.dtype);
  return 1;
}

/* for w in t: the sub-tensors t[0], t[1] ... of a compile-time tensor */
int ct_iterate(L *L, Span at, PV *x, PV ***out) {
  if (L->T->fn || !ct_operand(x) || x->k != PV_TENSOR) return -1;
  if (x->t->type.ndim == 0) lower_error(L, at, "iteration over a 0-d tensor");
  int64_t n = x->t->type.dims[0];
  eval_charge(L, at, n);
  PV **r = arena_alloc(L->a, sizeof(PV *) * (size_t)(n + 1));
  for (int64_t i = 0; i < n; i++) r[i] = t_index(L, at, x, pv_int(L, i));
  *out = r;
  return (int)n;
}

/* x.item(), float(x), int(x) of a one-element compile-time tensor */
PV *ct_number(L *L, Span at, PV *x) {
  if (ir_numel(&x->t->type) != 1)
    lower_error(L, at, "a Tensor with %lld elements cannot be converted to Scalar", (long long)ir_numel(&x->t->type));
  double v = x->t->data[0];
  DType dt = x->t->type.dtype;
  return dt == DT_BOOL ? pv_bool(L, v != 0) : ir_dtype_is_float(dt) ? pv_float(L, v) : pv_int(L, (int64_t)v);
}

/* x.tolist(): nested lists of numbers */
static PV *tolist_at(L *L, Span at, PV *x, int d, int64_t off) {
  const Type *t = &x->t->type;
  if (d == t->ndim) {
    double v = x->t->data[off];
    return t->dtype == DT_BOOL ? pv_bool(L, v != 0) : ir_dtype_is_float(t->dtype) ? pv_float(L, v) : pv_int(L, (int64_t)v);
  }
  int64_t inner = 1;
  for (int k = d + 1; k < t->ndim; k++) inner *= t->dims[k];
  PV *l = pv_list(L, NULL, 0);
  eval_charge(L, at, t->dims[d]);
  for (int64_t i = 0; i < t->dims[d]; i++) pv_list_append(L, l, tolist_at(L, at, x, d + 1, off + i * inner));
  return l;
}
PV *ct_tolist(L *L, Span at, PV *x) { return tolist_at(L, at, x, 0, 0); }
