/* tensor.c - tensor operations: type promotion, shape inference, and IR
 * emission into the function being staged (L->fn). Composite operations
 * (softmax, layer_norm, gelu, ...) lower to primitives here. Shape errors are
 * reported at the user's source span and name both shapes. */
#include <math.h>
#include <string.h>
#include "lower_int.h"

const char *shape_str(L *L, const Type *t) {
  char buf[256];
  return arena_strdup(L->a, ir_shape_str(t, buf, sizeof buf));
}

Type t_type(PV *t) { return t->t->type; }

PV *t_wrap(L *L, ValId v) {
  Tensor *t = arena_alloc(L->a, sizeof *t);
  t->type = *ir_type(L->fn, v);
  t->v = v;
  return pv_tensor(L, t);
}

static void need_fn(L *L, Span at, const char *what) {
  if (!L->fn)
    lower_error(L, at, "%s on tensors is only supported inside compiled functions (forward), not at "
                       "compile time", what);
}

ValId t_val(L *L, Span at, PV *x) {
  if (x->k != PV_TENSOR) lower_error(L, at, "expected a tensor, got '%s'", pv_kind_name(x));
  Tensor *t = x->t;
  need_fn(L, at, "this operation");
  if (t->v >= 0 && !t->slot && !t->data) return t->v;
  if (t->slot) {
    if (t->slot->index < 0)
      lower_error(L, at, "this tensor is a parameter of a module that is not part of the model");
    if (L->param_cur && L->param_cur[t->slot->index] >= 0) return L->param_cur[t->slot->index]; /* after a step */
    return ir_param_value(L->prog, L->fn, t->slot->index);
  }
  if (t->data) {
    /* a compile-time constant: uniform fills are lowered as a broadcast scalar;
     * others become a constant tensor in the arena ("ctc.const.N", initialised
     * by <model>_init, saved with the weights like optimizer state) */
    int64_t n = ir_numel(&t->type);
    int uniform = 1;
    for (int64_t i = 1; i < n && uniform; i++) uniform = t->data[i] == t->data[0];
    if (!uniform) {
      Param p = {0};
      p.name = arena_printf(L->a, "ctc.const.%d", L->prog->params.len);
      p.type = t->type;
      p.is_state = 1;
      p.init = PINIT_DATA;
      p.init_data = t->data;
      p.loc = at;
      vec_push(L->a, &L->prog->params, p);
      Slot *s = slot_new(L, at, t->type, PINIT_DATA, 0, 0);
      s->is_buffer = 1;
      s->index = L->prog->params.len - 1;
      s->data = t->data;
      t->slot = s;
      t->data = NULL;
      param_table_grew(L);
      return ir_param_value(L->prog, L->fn, s->index);
    }
    ValId c = ir_const(L->prog, L->fn, t->type.dtype, n ? t->data[0] : 0, at);
    if (t->type.ndim == 0) return c;
    return ir_emit(L->prog, L->fn, IR_BROADCAST, &c, 1, t->type, NULL, 0, 0, at, "full");
  }
  BUG("tensor without a value");
}

PV *t_scalar_like(L *L, Span at, double v, DType dt) {
  return t_wrap(L, ir_const(L->prog, L->fn, dt, v, at));
}

int64_t t_norm_dim(L *L, Span at, int64_t d, int ndim) {
  int n = ndim ? ndim : 1;
  if (d < -n || d >= n)
    lower_error(L, at, "dimension %lld is out of range for a tensor of %d dimensions", (long long)d, ndim);
  return d < 0 ? d + n : d;
}

PV *t_const_tensor(L *L, Span at, Type t, double fill) {
  int64_t n = ir_numel(&t);
  if (n > (1 << 26)) lower_error(L, at, "compile-time tensor of %lld elements is too large", (long long)n);
  Tensor *x = arena_alloc(L->a, sizeof *x);
  x->type = t;
  x->v = -1;
  x->data = arena_alloc(L->a, sizeof(double) * (size_t)(n ? n : 1));
  for (int64_t i = 0; i < n; i++) x->data[i] = fill;
  return pv_tensor(L, x);
}

static ValId emit(L *L, Span at, Op op, const ValId *args, int nargs, Type res, const int64_t *attr,
                  int nattr, const char *name) {
  return ir_emit(L->prog, L->fn, op, args, nargs, res, attr, nattr, 0, at, name);
}

static ValId cast_to(L *L, Span at, ValId v, DType dt) {
  Type t = *ir_type(L->fn, v);
  if (t.dtype == dt) return v;
  Value *val = ir_val(L->fn, v);
  if (val->kind == V_INST && L->fn->insts.data[val->def].op == IR_CONST)
    return ir_const(L->prog, L->fn, dt, L->fn->insts.data[val->def].fattr, at);
  t.dtype = dt;
  return emit(L, at, IR_CAST, &v, 1, t, NULL, 0, "cast");
}

static int dt_rank(DType d) { return d == DT_BOOL ? 0 : (d == DT_I32 || d == DT_I64) ? 1 : 2; }

/* Result dtype of a binary op between a and b (tensors or Python numbers). */
static DType promote(PV *a, PV *b) {
  DType da = a->k == PV_TENSOR ? a->t->type.dtype : DT_COUNT;
  DType db = b->k == PV_TENSOR ? b->t->type.dtype : DT_COUNT;
  if (da != DT_COUNT && db != DT_COUNT) {
    if (dt_rank(da) != dt_rank(db)) return dt_rank(da) > dt_rank(db) ? da : db;
    if (da == DT_F64 || db == DT_F64) return DT_F64;
    if (da == DT_I64 || db == DT_I64) return DT_I64;
    return da;
  }
  DType dt = da != DT_COUNT ? da : db;
  PV *s = da != DT_COUNT ? b : a;
  int srank = s->k == PV_FLOAT ? 2 : s->k == PV_INT ? 1 : 0;
  if (srank > dt_rank(dt)) return srank == 2 ? DT_F32 : DT_I64;
  return dt;
}

static ValId operand(L *L, Span at, PV *x, DType dt) {
  if (x->k == PV_TENSOR) return cast_to(L, at, t_val(L, at, x), dt);
  if (pv_is_num(x)) return ir_const(L->prog, L->fn, dt, pv_num(x), at);
  lower_error(L, at, "expected a tensor or a number, got '%s'", pv_kind_name(x));
}

static Type bcast(L *L, Span at, const char *opname, Type a, Type b) {
  Type r;
  if (ir_broadcast_shapes(&a, &b, &r) < 0)
    lower_error(L, at, "shape mismatch in '%s': %s and %s cannot be broadcast together", opname,
                shape_str(L, &a), shape_str(L, &b));
  return r;
}

static PV *elem2(L *L, Span at, Op op, const char *opname, PV *a, PV *b, DType dt, DType rdt) {
  need_fn(L, at, opname);
  ValId va = operand(L, at, a, dt), vb = operand(L, at, b, dt);
  Type r = bcast(L, at, opname, *ir_type(L->fn, va), *ir_type(L->fn, vb));
  r.dtype = rdt;
  ValId args[2] = {va, vb};
  return t_wrap(L, emit(L, at, op, args, 2, r, NULL, 0, ir_ops[op].name));
}

PV *t_binary(L *L, Span at, int op, PV *a, PV *b) {
  if (pv_is_num(a) && pv_is_num(b)) {
    /* two Python numbers (as lowering code may combine constants): fold */
    double x = pv_num(a), y = pv_num(b);
    switch (op) {
    case OP_ADD: return pv_float(L, x + y);
    case OP_SUB: return pv_float(L, x - y);
    case OP_MUL: return pv_float(L, x * y);
    case OP_DIV: return pv_float(L, x / y);
    case OP_POW: return pv_float(L, pow(x, y));
    default: BUG("t_binary on two numbers");
    }
  }
  DType dt = promote(a, b);
  switch (op) {
  case OP_ADD: return elem2(L, at, IR_ADD, "+", a, b, dt, dt);
  case OP_SUB: return elem2(L, at, IR_SUB, "-", a, b, dt, dt);
  case OP_MUL: return elem2(L, at, IR_MUL, "*", a, b, dt, dt);
  case OP_DIV:
    if (!ir_dtype_is_float(dt)) dt = DT_F32;
    return elem2(L, at, IR_DIV, "/", a, b, dt, dt);
  case OP_POW:
    if (pv_is_num(b) && pv_num(b) == 2.0 && a->k == PV_TENSOR) return elem2(L, at, IR_MUL, "**", a, a, dt, dt);
    if (pv_is_num(b) && pv_num(b) == 1.0 && a->k == PV_TENSOR) return a;
    if (pv_is_num(b) && pv_num(b) == 0.5 && a->k == PV_TENSOR && ir_dtype_is_float(dt))
      return t_unary(L, at, IR_SQRT, a);
    return elem2(L, at, IR_POW, "**", a, b, dt, dt);
  case OP_FLOORDIV:
  case OP_MOD:
    lower_error(L, at, "operator '%s' on tensors is not supported by ctc yet", fe_op_spelling(op));
  default:
    lower_error(L, at, "operator '%s' is not supported on tensors", fe_op_spelling(op));
  }
}

PV *t_compare(L *L, Span at, int op, PV *a, PV *b) {
  DType dt = promote(a, b);
  Op o;
  switch (op) {
  case OP_EQ: o = IR_CMP_EQ; break;
  case OP_NE: o = IR_CMP_NE; break;
  case OP_LT: o = IR_CMP_LT; break;
  case OP_LE: o = IR_CMP_LE; break;
  case OP_GT: o = IR_CMP_GT; break;
  case OP_GE: o = IR_CMP_GE; break;
  default: lower_error(L, at, "operator '%s' is not supported on tensors", fe_op_spelling(op));
  }
  if (a->k == PV_TENSOR && a->t->data && !L->fn) {
    /* compile-time comparison of a constant tensor (e.g. a mask) */
    if (!pv_is_num(b)) lower_error(L, at, "compile-time tensor comparison needs a number");
    Type t = a->t->type;
    t.dtype = DT_BOOL;
    PV *r = t_const_tensor(L, at, t, 0);
    double y = pv_num(b);
    for (int64_t i = 0; i < ir_numel(&t); i++) {
      double x = a->t->data[i];
      int c = o == IR_CMP_EQ ? x == y : o == IR_CMP_NE ? x != y : o == IR_CMP_LT ? x < y
            : o == IR_CMP_LE ? x <= y : o == IR_CMP_GT ? x > y : x >= y;
      r->t->data[i] = c;
    }
    return r;
  }
  return elem2(L, at, o, fe_op_spelling(op), a, b, dt, DT_BOOL);
}

PV *t_unary(L *L, Span at, Op op, PV *x) {
  need_fn(L, at, ir_ops[op].name);
  ValId v = t_val(L, at, x);
  DType dt = ir_type(L->fn, v)->dtype;
  if (op != IR_NEG && op != IR_ABS && op != IR_RELU && !ir_dtype_is_float(dt)) {
    v = cast_to(L, at, v, DT_F32);
    dt = DT_F32;
  }
  return t_wrap(L, emit(L, at, op, &v, 1, *ir_type(L->fn, v), NULL, 0, ir_ops[op].name));
}

PV *t_cast(L *L, Span at, PV *x, DType dt) {
  if (x->t->data && !L->fn) {
    Type t = x->t->type;
    t.dtype = dt;
    PV *r = t_const_tensor(L, at, t, 0);
    memcpy(r->t->data, x->t->data, sizeof(double) * (size_t)ir_numel(&t));
    return r;
  }
  return t_wrap(L, cast_to(L, at, t_val(L, at, x), dt));
}

PV *t_where(L *L, Span at, PV *c, PV *a, PV *b) {
  need_fn(L, at, "where");
  DType dt = promote(a, b);
  ValId vc = t_val(L, at, c);
  if (ir_type(L->fn, vc)->dtype != DT_BOOL) vc = cast_to(L, at, vc, DT_BOOL);
  ValId va = operand(L, at, a, dt), vb = operand(L, at, b, dt);
  Type r = bcast(L, at, "where", *ir_type(L->fn, vc), *ir_type(L->fn, va));
  r = bcast(L, at, "where", r, *ir_type(L->fn, vb));
  r.dtype = dt;
  ValId args[3] = {vc, va, vb};
  return t_wrap(L, emit(L, at, IR_WHERE, args, 3, r, NULL, 0, "where"));
}

PV *t_inplace(L *L, Span at, PV *x, PV *r) {
  if (x->k != PV_TENSOR) lower_error(L, at, "in-place operation needs a tensor");
  if (x->t->slot)
    lower_error(L, at, "in-place update of a parameter or buffer inside compiled code is not supported");
  if (!L->fn) lower_error(L, at, "in-place tensor updates at compile time are not supported");
  Type t = x->t->type;
  if (!ir_type_eq(&t, &r->t->type)) {
    ValId v = t_val(L, at, r);
    Type rt = *ir_type(L->fn, v);
    Type b;
    if (ir_broadcast_shapes(&t, &rt, &b) < 0 || b.ndim != t.ndim || ir_numel(&b) != ir_numel(&t))
      lower_error(L, at, "in-place result of shape %s cannot be stored into a tensor of shape %s",
                  shape_str(L, &rt), shape_str(L, &t));
    v = cast_to(L, at, v, t.dtype);
    r = t_wrap(L, v);
    if (!ir_type_eq(&t, &r->t->type)) r = t_reshape(L, at, r, t.dims, t.ndim);
  }
  x->t->v = t_val(L, at, r);
  x->t->data = NULL;
  return x;
}

/* ---- shapes ------------------------------------------------------------- */

PV *t_reshape(L *L, Span at, PV *x, const int64_t *dims, int n) {
  Type in = x->t->type, out = in;
  if (n > IR_MAX_DIMS) lower_error(L, at, "too many dimensions (%d)", n);
  int infer = -1;
  int64_t known = 1;
  out.ndim = n;
  for (int i = 0; i < n; i++) {
    if (dims[i] == -1) {
      if (infer >= 0) lower_error(L, at, "only one dimension can be inferred (-1)");
      infer = i;
      continue;
    }
    if (dims[i] <= 0) lower_error(L, at, "invalid shape dimension %lld", (long long)dims[i]);
    known *= dims[i];
    out.dims[i] = dims[i];
  }
  int64_t total = ir_numel(&in);
  if (infer >= 0) {
    if (known == 0 || total % known) {
      const char *req = "";
      for (int i = 0; i < n; i++) req = arena_printf(L->a, "%s%s%lld", req, i ? ", " : "", (long long)dims[i]);
      lower_error(L, at, "shape '[%s]' is invalid for input of shape %s (%lld elements)", req, shape_str(L, &in),
                  (long long)total);
    }
    out.dims[infer] = total / known;
  }
  if (ir_numel(&out) != total) {
    char buf[256];
    lower_error(L, at, "cannot reshape a tensor of shape %s (%lld elements) into %s (%lld elements)",
                shape_str(L, &in), (long long)total, ir_shape_str(&out, buf, sizeof buf), (long long)ir_numel(&out));
  }
  if (x->t->data && !L->fn) {
    PV *r = t_const_tensor(L, at, out, 0);
    memcpy(r->t->data, x->t->data, sizeof(double) * (size_t)total);
    return r;
  }
  ValId v = t_val(L, at, x);
  if (ir_type_eq(&in, &out)) return x;
  return t_wrap(L, emit(L, at, IR_RESHAPE, &v, 1, out, NULL, 0, ir_val(L->fn, v)->name));
}

PV *t_permute(L *L, Span at, PV *x, const int64_t *perm, int n) {
  Type in = x->t->type, out = in;
  if (n != in.ndim)
    lower_error(L, at, "permute needs %d dimensions for a tensor of shape %s, got %d", in.ndim, shape_str(L, &in), n);
  int64_t p[IR_MAX_DIMS];
  int seen = 0, ident = 1;
  for (int i = 0; i < n; i++) {
    p[i] = t_norm_dim(L, at, perm[i], in.ndim);
    if ((seen >> p[i]) & 1) lower_error(L, at, "repeated dimension in permute");
    seen |= 1 << p[i];
    out.dims[i] = in.dims[p[i]];
    ident &= p[i] == i;
  }
  if (ident) return x;
  ValId v = t_val(L, at, x);
  return t_wrap(L, emit(L, at, IR_PERMUTE, &v, 1, out, p, n, "permute"));
}

PV *t_transpose(L *L, Span at, PV *x, int64_t d0, int64_t d1) {
  int nd = x->t->type.ndim;
  int64_t p[IR_MAX_DIMS];
  for (int i = 0; i < nd; i++) p[i] = i;
  if (nd == 0) return x;
  d0 = t_norm_dim(L, at, d0, nd);
  d1 = t_norm_dim(L, at, d1, nd);
  p[d0] = d1;
  p[d1] = d0;
  return t_permute(L, at, x, p, nd);
}

PV *t_slice(L *L, Span at, PV *x, int axis, int64_t start, int64_t stop, int64_t step) {
  Type in = x->t->type, out = in;
  int64_t n = in.dims[axis];
  if (start < 0) start += n;
  if (stop < 0) stop += n;
  start = start < 0 ? 0 : start > n ? n : start;
  stop = stop < 0 ? 0 : stop > n ? n : stop;
  if (step <= 0) lower_error(L, at, "slice step must be positive");
  int64_t cnt = stop > start ? (stop - start + step - 1) / step : 0;
  if (cnt == 0) lower_error(L, at, "this slice is empty; empty tensors are not supported");
  if (cnt == n && step == 1) return x;
  out.dims[axis] = cnt;
  int64_t attr[2 * IR_MAX_DIMS];
  for (int i = 0; i < in.ndim; i++) {
    attr[2 * i] = i == axis ? start : 0;
    attr[2 * i + 1] = i == axis ? step : 1;
  }
  ValId v = t_val(L, at, x);
  return t_wrap(L, emit(L, at, IR_SLICE, &v, 1, out, attr, 2 * in.ndim, "slice"));
}

/* x[idx]: ints, slices, None, Ellipsis and single-element lists ([-1]). */
PV *t_index(L *L, Span at, PV *x, PV *idx) {
  PV **items = &idx;
  int n = 1;
  if (idx->k == PV_TUPLE) {
    items = idx->items;
    n = idx->n;
  }
  Type in = x->t->type;
  int used = 0, ell = -1;
  for (int i = 0; i < n; i++) {
    if (items[i]->k == PV_ELLIPSIS) {
      if (ell >= 0) lower_error(L, at, "an index can only have one ellipsis");
      ell = i;
    } else if (items[i]->k != PV_NONE)
      used++;
  }
  if (used > in.ndim)
    lower_error(L, at, "too many indices for a tensor of shape %s", shape_str(L, &in));
  PV *cur = x;
  int64_t newdims[IR_MAX_DIMS * 2];
  int nnew = 0, axis = 0;
  for (int i = 0; i < n; i++) {
    PV *it = items[i];
    if (it->k == PV_ELLIPSIS) {
      int skip = in.ndim - used;
      for (int k = 0; k < skip; k++) newdims[nnew++] = in.dims[axis++];
      continue;
    }
    if (it->k == PV_NONE) {
      newdims[nnew++] = 1;
      continue;
    }
    int64_t size = in.dims[axis];
    if (it->k == PV_INT || it->k == PV_BOOL) {
      int64_t k = it->i;
      if (k < -size || k >= size)
        lower_error(L, at, "index %lld is out of range for dimension %d of size %lld", (long long)k, axis, (long long)size);
      if (k < 0) k += size;
      cur = t_slice(L, at, cur, axis, k, k + 1, 1);
      axis++;
      continue;
    }
    if (it->k == PV_SLICE) {
      int64_t st = it->items[0]->k == PV_NONE ? 0 : arg_int(L, at, it->items[0], "slice start");
      int64_t sp = it->items[1]->k == PV_NONE ? size : arg_int(L, at, it->items[1], "slice stop");
      int64_t step = it->items[2]->k == PV_NONE ? 1 : arg_int(L, at, it->items[2], "slice step");
      if (step <= 0) lower_error(L, at, "negative or zero slice steps are not supported on tensors");
      cur = t_slice(L, at, cur, axis, st, sp, step);
      newdims[nnew++] = cur->t->type.dims[axis];
      axis++;
      continue;
    }
    if (it->k == PV_LIST && it->n == 1 && it->items[0]->k == PV_INT) {
      int64_t k = it->items[0]->i;
      if (k < -size || k >= size)
        lower_error(L, at, "index %lld is out of range for dimension %d of size %lld", (long long)k, axis, (long long)size);
      if (k < 0) k += size;
      cur = t_slice(L, at, cur, axis, k, k + 1, 1);
      newdims[nnew++] = 1;
      axis++;
      continue;
    }
    if (it->k == PV_TENSOR)
      lower_error(L, at, "indexing with a tensor (gather / boolean mask) is not supported by ctc yet");
    lower_error(L, at, "unsupported index of type '%s'", pv_kind_name(it));
  }
  while (axis < in.ndim) newdims[nnew++] = in.dims[axis++];
  if (nnew > IR_MAX_DIMS) lower_error(L, at, "too many dimensions");
  Type ct = cur->t->type;
  int same = ct.ndim == nnew;
  for (int i = 0; same && i < nnew; i++) same = ct.dims[i] == newdims[i];
  if (same) return cur;
  if (nnew == 0) {
    ValId v = t_val(L, at, cur);
    Type t = ct;
    t.ndim = 0;
    return t_wrap(L, emit(L, at, IR_RESHAPE, &v, 1, t, NULL, 0, "item"));
  }
  return t_reshape(L, at, cur, newdims, nnew);
}

PV *t_concat(L *L, Span at, PV **xs, int n, int64_t dim) {
  if (n == 0) lower_error(L, at, "torch.cat needs at least one tensor");
  if (n == 1) return xs[0];
  Type r = xs[0]->t->type;
  dim = t_norm_dim(L, at, dim, r.ndim);
  ValId *vs = arena_alloc(L->a, sizeof(ValId) * (size_t)n);
  int64_t tot = 0;
  for (int i = 0; i < n; i++) {
    if (xs[i]->k != PV_TENSOR) lower_error(L, at, "torch.cat needs tensors");
    Type t = xs[i]->t->type;
    int ok = t.ndim == r.ndim && t.dtype == r.dtype;
    for (int k = 0; ok && k < t.ndim; k++) ok = k == dim || t.dims[k] == r.dims[k];
    if (!ok)
      lower_error(L, at, "torch.cat: shapes %s and %s differ outside dimension %lld", shape_str(L, &r),
                  shape_str(L, &t), (long long)dim);
    tot += t.dims[dim];
    vs[i] = t_val(L, at, xs[i]);
  }
  r.dims[dim] = tot;
  int64_t attr[1] = {dim};
  return t_wrap(L, emit(L, at, IR_CONCAT, vs, n, r, attr, 1, "cat"));
}

/* ---- reductions and composites ------------------------------------------ */

PV *t_reduce(L *L, Span at, Op op, PV *x, const int64_t *dims, int ndims, int keepdim, int mean) {
  need_fn(L, at, "a reduction");
  ValId v = t_val(L, at, x);
  Type in = *ir_type(L->fn, v), kd = in, out = in;
  if (mean && !ir_dtype_is_float(in.dtype))
    lower_error(L, at, "mean() needs a floating-point tensor; cast it with .float() first");
  int64_t mask = 0, count = 1;
  if (ndims == 0)
    for (int i = 0; i < in.ndim; i++) mask |= (int64_t)1 << i;
  for (int i = 0; i < ndims; i++) mask |= (int64_t)1 << t_norm_dim(L, at, dims[i], in.ndim);
  out.ndim = 0;
  for (int i = 0; i < in.ndim; i++) {
    if ((mask >> i) & 1) {
      count *= in.dims[i];
      kd.dims[i] = 1;
      if (keepdim) out.dims[out.ndim++] = 1;
    } else
      out.dims[out.ndim++] = in.dims[i];
  }
  if (in.ndim == 0) return x;
  if (in.dtype == DT_BOOL) {
    v = cast_to(L, at, v, DT_I64);
    kd.dtype = out.dtype = DT_I64;
  }
  int64_t attr[1] = {mask};
  ValId r = emit(L, at, op, &v, 1, kd, attr, 1, op == IR_REDUCE_MAX ? "max" : mean ? "mean" : "sum");
  if (mean) {
    ValId c = ir_const(L->prog, L->fn, kd.dtype, 1.0 / (double)count, at);
    ValId args[2] = {r, c};
    r = emit(L, at, IR_MUL, args, 2, kd, NULL, 0, "mean");
  }
  if (!ir_type_eq(&kd, &out)) r = emit(L, at, IR_RESHAPE, &r, 1, out, NULL, 0, ir_val(L->fn, r)->name);
  return t_wrap(L, r);
}

PV *t_softmax(L *L, Span at, PV *x, int64_t dim, int log) {
  need_fn(L, at, "softmax");
  if (!ir_dtype_is_float(x->t->type.dtype)) x = t_cast(L, at, x, DT_F32);
  PV *m = t_reduce(L, at, IR_REDUCE_MAX, x, &dim, 1, 1, 0);
  PV *z = t_binary(L, at, OP_SUB, x, m);
  PV *e = t_unary(L, at, IR_EXP, z);
  PV *s = t_reduce(L, at, IR_REDUCE_SUM, e, &dim, 1, 1, 0);
  PV *r = log ? t_binary(L, at, OP_SUB, z, t_unary(L, at, IR_LOG, s)) : t_binary(L, at, OP_DIV, e, s);
  ir_val(L->fn, r->t->v)->name = log ? "log_softmax" : "softmax";
  return r;
}

PV *t_matmul(L *L, Span at, PV *a, PV *b) {
  need_fn(L, at, "matmul");
  if (a->k != PV_TENSOR || b->k != PV_TENSOR) lower_error(L, at, "'@' needs two tensors");
  Type ta = a->t->type, tb = b->t->type;
  if (ta.ndim == 0 || tb.ndim == 0) lower_error(L, at, "matmul does not accept 0-d tensors");
  DType dt = promote(a, b);
  if (!ir_dtype_is_float(dt)) lower_error(L, at, "matmul needs floating-point tensors");
  PV *A = a, *Bv = b;
  int squeeze_a = ta.ndim == 1, squeeze_b = tb.ndim == 1;
  if (squeeze_a) {
    int64_t d[2] = {1, ta.dims[0]};
    A = t_reshape(L, at, a, d, 2);
  }
  if (squeeze_b) {
    int64_t d[2] = {tb.dims[0], 1};
    Bv = t_reshape(L, at, b, d, 2);
  }
  ta = A->t->type;
  tb = Bv->t->type;
  int64_t m = ta.dims[ta.ndim - 2], k = ta.dims[ta.ndim - 1], k2 = tb.dims[tb.ndim - 2], n = tb.dims[tb.ndim - 1];
  if (k != k2)
    lower_error(L, at, "shape mismatch in matmul: %s @ %s (inner dimensions %lld and %lld differ)",
                shape_str(L, &a->t->type), shape_str(L, &b->t->type), (long long)k, (long long)k2);
  Type ba = ta, bb = tb, r;
  ba.ndim -= 2;
  bb.ndim -= 2;
  if (ir_broadcast_shapes(&ba, &bb, &r) < 0)
    lower_error(L, at, "shape mismatch in matmul: batch dimensions of %s and %s cannot be broadcast",
                shape_str(L, &ta), shape_str(L, &tb));
  r.dtype = dt;
  r.dims[r.ndim++] = m;
  r.dims[r.ndim++] = n;
  ValId args[2] = {operand(L, at, A, dt), operand(L, at, Bv, dt)};
  int64_t attr[2] = {0, 0};
  PV *res = t_wrap(L, emit(L, at, IR_MATMUL, args, 2, r, attr, 2, "matmul"));
  if (squeeze_a || squeeze_b) {
    Type o = r;
    o.ndim = 0;
    for (int i = 0; i < r.ndim - 2; i++) o.dims[o.ndim++] = r.dims[i];
    if (!squeeze_a) o.dims[o.ndim++] = m;
    if (!squeeze_b) o.dims[o.ndim++] = n;
    if (o.ndim == 0) {
      ValId v = res->t->v;
      return t_wrap(L, emit(L, at, IR_RESHAPE, &v, 1, o, NULL, 0, "matmul"));
    }
    res = t_reshape(L, at, res, o.dims, o.ndim);
  }
  return res;
}

PV *t_linear(L *L, Span at, PV *x, PV *w, PV *b) {
  need_fn(L, at, "linear");
  Type tx = x->t->type, tw = w->t->type;
  if (tx.ndim == 0 || tx.dims[tx.ndim - 1] != tw.dims[1])
    lower_error(L, at, "shape mismatch in linear layer: input %s, weight %s (expects last input dimension %lld)",
                shape_str(L, &tx), shape_str(L, &tw), (long long)tw.dims[1]);
  PV *xin = x;
  if (tx.ndim == 1) {
    int64_t d[2] = {1, tx.dims[0]};
    xin = t_reshape(L, at, x, d, 2);
  }
  Type r = xin->t->type;
  r.dtype = tw.dtype;   /* x is cast to the weight's dtype, as in conv2d */
  r.dims[r.ndim - 1] = tw.dims[0];
  ValId args[2] = {operand(L, at, xin, tw.dtype), t_val(L, at, w)};
  int64_t attr[2] = {0, 1};
  PV *y = t_wrap(L, emit(L, at, IR_MATMUL, args, 2, r, attr, 2, "linear"));
  if (b && b->k == PV_TENSOR) {
    y = t_binary(L, at, OP_ADD, y, b);
  }
  if (tx.ndim == 1) y = t_reshape(L, at, y, &tw.dims[0], 1);
  return y;
}

PV *t_conv2d(L *L, Span at, PV *x, PV *w, PV *b, const int64_t stride[2], const int64_t pad[2],
             const int64_t dil[2]) {
  need_fn(L, at, "conv2d");
  Type tx = x->t->type, tw = w->t->type;
  if (tx.ndim != 4)
    lower_error(L, at, "conv2d expects a 4-D input [N, C, H, W], got shape %s", shape_str(L, &tx));
  if (tx.dims[1] != tw.dims[1])
    lower_error(L, at, "shape mismatch in conv2d: input %s has %lld channels, weight %s expects %lld",
                shape_str(L, &tx), (long long)tx.dims[1], shape_str(L, &tw), (long long)tw.dims[1]);
  Type r = tx;
  r.dtype = tw.dtype;
  r.dims[1] = tw.dims[0];
  for (int d = 0; d < 2; d++) {
    if (stride[d] <= 0 || pad[d] < 0 || dil[d] <= 0) lower_error(L, at, "conv2d: invalid stride, padding or dilation");
    int64_t o = (tx.dims[2 + d] + 2 * pad[d] - dil[d] * (tw.dims[2 + d] - 1) - 1) / stride[d] + 1;
    if (o <= 0 || tx.dims[2 + d] + 2 * pad[d] < dil[d] * (tw.dims[2 + d] - 1) + 1)
      lower_error(L, at, "conv2d: input %s is too small for kernel %lldx%lld", shape_str(L, &tx),
                  (long long)tw.dims[2], (long long)tw.dims[3]);
    r.dims[2 + d] = o;
  }
  ValId args[2] = {operand(L, at, x, tw.dtype), t_val(L, at, w)};
  int64_t attr[6] = {stride[0], stride[1], pad[0], pad[1], dil[0], dil[1]};
  PV *y = t_wrap(L, emit(L, at, IR_CONV2D, args, 2, r, attr, 6, "conv"));
  if (b && b->k == PV_TENSOR) {
    int64_t d[3] = {b->t->type.dims[0], 1, 1};
    y = t_binary(L, at, OP_ADD, y, t_reshape(L, at, b, d, 3));
  }
  return y;
}

PV *t_pool2d(L *L, Span at, Op op, PV *x, const int64_t k[2], const int64_t s[2], const int64_t p[2],
             const int64_t dil[2], int ceil_mode, int count_include_pad) {
  need_fn(L, at, "pooling");
  Type tx = x->t->type, r = tx;
  if (tx.ndim != 4) lower_error(L, at, "2-D pooling expects a 4-D input [N, C, H, W], got shape %s", shape_str(L, &tx));
  for (int d = 0; d < 2; d++) {
    if (k[d] <= 0 || s[d] <= 0 || p[d] < 0) lower_error(L, at, "pooling: invalid kernel, stride or padding");
    if (p[d] * 2 > k[d]) lower_error(L, at, "pooling: padding should be at most half the kernel size");
    int64_t span = dil[d] * (k[d] - 1) + 1, in = tx.dims[2 + d] + 2 * p[d] - span;
    if (in < 0) lower_error(L, at, "pooling: input %s is too small for kernel %lldx%lld", shape_str(L, &tx), (long long)k[0], (long long)k[1]);
    int64_t o = (ceil_mode ? (in + s[d] - 1) / s[d] : in / s[d]) + 1;
    if (ceil_mode && (o - 1) * s[d] >= tx.dims[2 + d] + p[d]) o--;
    r.dims[2 + d] = o;
  }
  if (ceil_mode && op == IR_AVGPOOL2D) lower_error(L, at, "avg_pool2d with ceil_mode=True is not supported yet");
  if (!ir_dtype_is_float(tx.dtype)) lower_error(L, at, "pooling needs a floating-point tensor");
  ValId v = t_val(L, at, x);
  int64_t attr[8] = {k[0], k[1], s[0], s[1], p[0], p[1], dil[0], dil[1]};
  if (op == IR_AVGPOOL2D) attr[6] = count_include_pad;
  return t_wrap(L, emit(L, at, op, &v, 1, r, attr, op == IR_AVGPOOL2D ? 7 : 8, op == IR_AVGPOOL2D ? "avgpool" : "maxpool"));
}

PV *t_layer_norm(L *L, Span at, PV *x, int nnorm, PV *w, PV *b, double eps) {
  need_fn(L, at, "layer_norm");
  Type tx = x->t->type;
  int64_t dims[IR_MAX_DIMS];
  for (int i = 0; i < nnorm; i++) dims[i] = tx.ndim - nnorm + i;
  PV *mean = t_reduce(L, at, IR_REDUCE_SUM, x, dims, nnorm, 1, 1);
  PV *xc = t_binary(L, at, OP_SUB, x, mean);
  PV *var = t_reduce(L, at, IR_REDUCE_SUM, t_binary(L, at, OP_MUL, xc, xc), dims, nnorm, 1, 1);
  PV *rstd = t_unary(L, at, IR_RSQRT, t_binary(L, at, OP_ADD, var, pv_float(L, eps)));
  PV *y = t_binary(L, at, OP_MUL, xc, rstd);
  if (w && w->k == PV_TENSOR) y = t_binary(L, at, OP_MUL, y, w);
  if (b && b->k == PV_TENSOR) y = t_binary(L, at, OP_ADD, y, b);
  ir_val(L->fn, y->t->v)->name = "layer_norm";
  return y;
}

PV *t_embedding(L *L, Span at, PV *w, PV *idx) {
  need_fn(L, at, "embedding");
  Type ti = idx->t->type, tw = w->t->type;
  if (ti.dtype != DT_I64 && ti.dtype != DT_I32)
    lower_error(L, at, "embedding indices must be an integer tensor (torch.long), got %s", ir_dtype_name(ti.dtype));
  if (ti.ndim + 1 > IR_MAX_DIMS) lower_error(L, at, "too many dimensions");
  Type r = ti;
  r.dtype = tw.dtype;
  r.dims[r.ndim++] = tw.dims[1];
  ValId args[2] = {t_val(L, at, w), cast_to(L, at, t_val(L, at, idx), DT_I64)};
  return t_wrap(L, emit(L, at, IR_EMBEDDING, args, 2, r, NULL, 0, "embedding"));
}

PV *t_gelu(L *L, Span at, PV *x, int tanh_approx) {
  PV *inner;
  if (tanh_approx) {
    PV *x3 = t_binary(L, at, OP_MUL, t_binary(L, at, OP_MUL, x, x), x);
    PV *u = t_binary(L, at, OP_ADD, x, t_binary(L, at, OP_MUL, x3, pv_float(L, 0.044715)));
    inner = t_unary(L, at, IR_TANH, t_binary(L, at, OP_MUL, u, pv_float(L, sqrt(2.0 / M_PI))));
  } else {
    inner = t_unary(L, at, IR_ERF, t_binary(L, at, OP_MUL, x, pv_float(L, M_SQRT1_2)));
  }
  PV *y = t_binary(L, at, OP_MUL, t_binary(L, at, OP_MUL, x, pv_float(L, 0.5)),
                   t_binary(L, at, OP_ADD, inner, pv_float(L, 1.0)));
  ir_val(L->fn, y->t->v)->name = "gelu";
  return y;
}

