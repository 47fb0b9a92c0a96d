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

static int ev2(Op op, double x, double y, double *r) {
  switch (op) {
  case IR_ADD: *r = x + y; return 1;
  case IR_SUB: *r = x - y; return 1;
  case IR_MUL: *r = x * y; return 1;
  case IR_DIV: *r = x / y; return 1;
  case IR_POW: *r = pow(x, y); return 1;
  case IR_MAX: *r = isnan(x) || isnan(y) ? NAN : x > y ? x : y; return 1;
  case IR_MIN: *r = isnan(x) || isnan(y) ? NAN : x < y ? x : y; return 1;
  case IR_CMP_EQ: *r = x == y; return 1;
  case IR_CMP_NE: *r = x != y; return 1;
  case IR_CMP_LT: *r = x < y; return 1;
  case IR_CMP_LE: *r = x <= y; return 1;
  case IR_CMP_GT: *r = x > y; return 1;
  case IR_CMP_GE: *r = x >= y; return 1;
  default: return 0;
  }
}

static int ev1(Op op, double x, double *r) {
  switch (op) {
  case IR_EXP: *r = exp(x); return 1;
  case IR_LOG: *r = log(x); return 1;
  case IR_SQRT: *r = sqrt(x); return 1;
  case IR_RSQRT: *r = 1 / sqrt(x); return 1;
  case IR_NEG: *r = -x; return 1;
  case IR_ABS: *r = fabs(x); return 1;
  case IR_SIN: *r = sin(x); return 1;
  case IR_COS: *r = cos(x); return 1;
  case IR_TANH: *r = tanh(x); return 1;
  case IR_SIGMOID: *r = 1 / (1 + exp(-x)); return 1;
  case IR_RELU: *r = x > 0 ? x : 0; return 1;
  case IR_ERF: *r = erf(x); return 1;
  default: return 0;
  }
}

/* a op b elementwise, computed in dtype dt, result of dtype rdt */
PV *ct_elem2(L *L, Span at, Op op, PV *a, PV *b, DType dt, DType rdt) {
  double probe;
  if (!ct_applies(L, a, b) || !ev2(op, 1, 1, &probe)) return NULL;
  Type ta = a->k == PV_TENSOR ? a->t->type : (Type){0}, tb = b->k == PV_TENSOR ? b->t->type : (Type){0}, r;
  if (ir_broadcast_shapes(&ta, &tb, &r) < 0)
    lower_error(L, at, "shape mismatch: %s and %s cannot be broadcast together", shape_str(L, &ta), shape_str(L, &tb));
  r.dtype = rdt;
  PV *out = t_const_tensor(L, at, r, 0);
  int64_t n = ir_numel(&r);
  for (int64_t i = 0; i < n; i++) {
    double x = round_to(bread(a, &r, i), dt), y = round_to(bread(b, &r, i), dt), v = 0;
    ev2(op, x, y, &v);
    if (!ir_dtype_is_float(dt) && op == IR_DIV) v = trunc(v);
    out->t->data[i] = round_to(v, rdt);
  }
  return out;
}

PV *ct_unary(L *L, Span at, Op op, PV *x, DType dt) {
  double probe;
  if (!ct_applies(L, x, NULL) || x->k != PV_TENSOR || !ev1(op, 1, &probe)) return NULL;
  Type r = x->t->type;
  r.dtype = dt;
  PV *out = t_const_tensor(L, at, r, 0);
  for (int64_t i = 0; i < ir_numel(&r); i++) {
    double v = 0;
    ev1(op, round_to(x->t->data[i], dt), &v);
    out->t->data[i] = round_to(v, dt);
  }
  return out;
}

/* strides of a row-major shape */
static void strides(const Type *t, int64_t *s) {
  int64_t m = 1;
  for (int d = t->ndim - 1; d >= 0; d--) {
    s[d] = m;
    m *= t->dims[d];
  }
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
  int64_t si[IR_MAX_DIMS], idx[IR_MAX_DIMS] = {0};
  strides(&x->t->type, si);
  PV *r = t_const_tensor(L, at, out, 0);
  int64_t n = ir_numel(&out);
  for (int64_t i = 0; i < n; i++) {
    int64_t off = 0;
    for (int d = 0; d < out.ndim; d++) off += idx[d] * si[perm[d]];
    r->t->data[i] = x->t->data[off];
    for (int d = out.ndim - 1; d >= 0 && ++idx[d] == out.dims[d]; d--) idx[d] = 0;
  }
  return ct_view(x, r);
}

/* elements start, start + step, ... of axis */
PV *ct_slice(L *L, Span at, PV *x, int axis, int64_t start, int64_t step, Type out) {
  if (!ct_applies(L, x, NULL)) return NULL;
  int64_t si[IR_MAX_DIMS], idx[IR_MAX_DIMS] = {0};
  strides(&x->t->type, si);
  PV *r = t_const_tensor(L, at, out, 0);
  int64_t n = ir_numel(&out);
  for (int64_t i = 0; i < n; i++) {
    int64_t off = 0;
    for (int d = 0; d < out.ndim; d++) off += (d == axis ? start + idx[d] * step : idx[d]) * si[d];
    r->t->data[i] = x->t->data[off];
    for (int d = out.ndim - 1; d >= 0 && ++idx[d] == out.dims[d]; d--) idx[d] = 0;
  }
  return ct_view(x, r);
}

PV *ct_concat(L *L, Span at, PV **xs, int n, int64_t dim, Type out) {
  if (L->T->fn) return NULL;
  for (int i = 0; i < n; i++)
    if (!ct_operand(xs[i]) || xs[i]->k != PV_TENSOR) return NULL;
  PV *r = t_const_tensor(L, at, out, 0);
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < dim; d++) outer *= out.dims[d];
  for (int d = (int)dim + 1; d < out.ndim; d++) inner *= out.dims[d];
  int64_t pos = 0;
  for (int64_t o = 0; o < outer; o++)
    for (int i = 0; i < n; i++) {
      int64_t len = xs[i]->t->type.dims[dim] * inner;
      memcpy(r->t->data + pos, xs[i]->t->data + o * len, sizeof(double) * (size_t)len);
      pos += len;
    }
  return r;
}

/* sum (or mean) over dims, keeping them (size 1) */
PV *ct_reduce(L *L, Span at, Op op, PV *x, const int *red, int mean, Type out) {
  if (!ct_applies(L, x, NULL) || (op != IR_REDUCE_SUM && op != IR_REDUCE_MAX)) return NULL;
  Type in = x->t->type;
  PV *r = t_const_tensor(L, at, out, op == IR_REDUCE_MAX ? -INFINITY : 0);
  int64_t so[IR_MAX_DIMS], idx[IR_MAX_DIMS] = {0}, n = ir_numel(&in), cnt = n / ir_numel(&out);
  strides(&out, so);
  for (int64_t i = 0; i < n; i++) {
    int64_t off = 0;
    for (int d = 0; d < in.ndim; d++) off += (red[d] ? 0 : idx[d]) * so[d];
    double v = x->t->data[i];
    if (op == IR_REDUCE_SUM) r->t->data[off] += v;
    else if (isnan(v) || v > r->t->data[off]) r->t->data[off] = isnan(r->t->data[off]) ? r->t->data[off] : v;
    for (int d = in.ndim - 1; d >= 0 && ++idx[d] == in.dims[d]; d--) idx[d] = 0;
  }
  for (int64_t i = 0; i < ir_numel(&out); i++)
    r->t->data[i] = round_to(mean ? r->t->data[i] / (double)cnt : r->t->data[i], out.dtype);
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
  PV *o = t_const_tensor(L, at, r, 0);
  for (int64_t i = 0; i < r.dims[0]; i++) {
    eval_charge(L, at, (r.dims[1] * ta.dims[1]) / 4 + 1);   /* the compile-time step limit bounds m * n * k */
    for (int64_t j = 0; j < r.dims[1]; j++) {
      double s = 0;
      for (int64_t k = 0; k < ta.dims[1]; k++) s += a->t->data[i * ta.dims[1] + k] * b->t->data[k * tb.dims[1] + j];
      o->t->data[i * r.dims[1] + j] = round_to(s, r.dtype);
    }
  }
  return o;
}

/* x[idx] = v on a compile-time tensor (PyTorch's in-place write into its storage):
 * the positions come from indexing a tensor of element numbers the same way */
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
  if (v->k == PV_TENSOR) {
    Type b;
    int bad = ir_broadcast_shapes(&v->t->type, &r, &b) < 0;
    b.dtype = r.dtype;
    if (bad || !ir_type_eq(&b, &r))
      lower_error(L, at, "shape mismatch: value tensor of shape %s cannot be broadcast to indexing result of shape %s",
                  shape_str(L, &v->t->type), shape_str(L, &r));
  }
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
