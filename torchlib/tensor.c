/* tensor.c - tensor operations: type promotion, shape inference, and IR
 * emission into the function being staged (L->T->fn). Composite operations
 * (softmax, layer_norm, gelu, ...) lower to primitives here. Shape errors are
 * reported at the user's source span and name both shapes. */
#include <math.h>
#include <string.h>
#include "torch_int.h"

/* Tensors and dtypes are host values of the interpreter (PV_HOST, PV_HOSTC). */
PV *pv_tensor(L *L, Tensor *t) {
  PV *v = pv_new(L, PV_TENSOR);
  v->t = t;
  v->s = "Tensor";
  return v;
}
PV *pv_dtype(L *L, DType dt) {
  PV *v = pv_new(L, PV_DTYPE);
  v->dt = dt;
  v->s = "torch.dtype";
  return v;
}
int pv_is_module(const PV *v) { return v->k == PV_OBJ && v->mod != NULL; }

const char *shape_str(L *L, const Type *t) {
  char buf[256];
  return arena_strdup(L->a, ir_shape_str(t, buf, sizeof buf));
}

Type t_type(PV *t) { return t->t->type; }

/* Operands that must be tensors (a Python number or list is not one here). */
void need_tensor_arg(L *L, Span at, PV *x, const char *op) {
  if (!x || x->k != PV_TENSOR)
    lower_error(L, at, "%s: expected a tensor, got '%s'", op, x ? pv_kind_name(x) : "nothing");
}
/* An optional tensor operand (bias, weight): None or a tensor. */
static void opt_tensor_arg(L *L, Span at, PV *x, const char *op) {
  if (x && x->k != PV_NONE) need_tensor_arg(L, at, x, op);
}
static void ndim_arg(L *L, Span at, PV *w, int ndim, const char *what) {
  if (w->t->type.ndim != ndim)
    lower_error(L, at, "%s must be %d-D, got shape %s", what, ndim, shape_str(L, &w->t->type));
}

PV *t_wrap(L *L, ValId v) {
  Tensor *t = arena_alloc(L->a, sizeof *t);
  t->type = *ir_type(L->T->fn, v);
  t->v = v;
  return pv_tensor(L, t);
}

static void need_fn(L *L, Span at, const char *what) {
  if (!L->T->fn)
    lower_error(L, at, "%s on tensors is only supported inside compiled functions (forward), not at "
                       "compile time", what);
}

/* The float value of a parameter stored as bf16 / f16 (a .bfloat16() / .half() model's): its
 * storage cast to the tensor's dtype, once per function (the cast is what every reader and
 * the gradient see; state_update casts the new value back). */
static ValId low_read(L *L, Span at, Tensor *t) {
  struct HostState *T = L->T;
  int idx = t->slot->index, n = T->prog->params.len;
  if (T->low_read_fn != T->fn || T->low_read_n < n) {
    ValId *r = arena_alloc(L->a, sizeof(ValId) * (size_t)(n + 1));
    for (int i = 0; i < n; i++) r[i] = T->low_read_fn == T->fn && i < T->low_read_n ? T->low_read[i] : -1;
    T->low_read = r, T->low_read_n = n, T->low_read_fn = T->fn;
  }
  if (T->low_read[idx] < 0) {
    ValId s = ir_param_value(T->prog, T->fn, idx);
    Type ft = T->prog->params.data[idx].type;
    ft.dtype = t->slot->type.dtype;
    T->low_read[idx] = ir_emit(T->prog, T->fn, IR_CAST, &s, 1, ft, NULL, 0, 0, at, T->fn->values.data[s].name);
  }
  return T->low_read[idx];
}

ValId t_val(L *L, Span at, PV *x) {
  if (x->k != PV_TENSOR) lower_error(L, at, "expected a tensor, got '%s'", pv_kind_name(x));
  Tensor *t = x->t;
  if (t->cplx)   /* complex.c reads the storage: anything else would compute on it as real */
    lower_error(L, at, "a complex tensor is not supported here by ctc (as an output, or by this operation); "
                       "torch.view_as_real(x) gives its real and imaginary parts as a float32 tensor");
  need_fn(L, at, "this operation");
  if (L->T->dec && t->dec_mark) dec_check_read(L, at, t);
  if (t->v >= 0 && !t->slot && !t->data) return t->v;
  if (t->slot) {
    if (t->slot->index < 0)
      lower_error(L, at, "this tensor is a parameter of a module that is not part of the model");
    if (L->T->param_cur && L->T->param_cur[t->slot->index] >= 0) return L->T->param_cur[t->slot->index]; /* after a step */
    if (ir_dtype_is_low(L->T->prog->params.data[t->slot->index].type.dtype)) return low_read(L, at, t);
    return ir_param_value(L->T->prog, L->T->fn, t->slot->index);
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
      p.name = arena_printf(L->a, "ctc.const.%d", L->T->prog->params.len);
      p.type = t->type;
      p.is_state = 1;
      p.init = PINIT_DATA;
      p.init_data = t->data;
      p.loc = at;
      vec_push(L->a, &L->T->prog->params, p);
      Slot *s = slot_new(L, at, t->type, PINIT_DATA, 0, 0);
      s->is_buffer = 1;
      s->index = L->T->prog->params.len - 1;
      s->data = t->data;
      t->slot = s;
      t->data = NULL;
      param_table_grew(L);
      return ir_param_value(L->T->prog, L->T->fn, s->index);
    }
    ValId c = ir_const(L->T->prog, L->T->fn, t->type.dtype, n ? t->data[0] : 0, at);
    if (t->type.ndim == 0) return c;
    return ir_emit(L->T->prog, L->T->fn, IR_BROADCAST, &c, 1, t->type, NULL, 0, 0, at, "full");
  }
  BUG("tensor without a value");
}

PV *t_scalar_like(L *L, Span at, double v, DType dt) {
  return t_wrap(L, ir_const(L->T->prog, L->T->fn, dt, v, at));
}

int64_t t_norm_dim(L *L, Span at, int64_t d, int ndim) {
  int n = ndim ? ndim : 1;
  if (d < -n || d >= n)
    lower_error(L, at, "dimension %lld is out of range for a tensor of %d dimensions", (long long)d, ndim);
  return d < 0 ? d + n : d;
}

PV *t_const_tensor(L *L, Span at, Type t, double fill) {
  for (int i = 0; i < t.ndim; i++)
    if (t.dims[i] < 0)
      lower_error(L, at, "Trying to create tensor with negative dimension %lld: %s", (long long)t.dims[i],
                  shape_str(L, &t));
  char msg[512];
  if (ir_type_problem(&t, msg, sizeof msg)) lower_error(L, at, "%s", msg);   /* too large, or empty */
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
  return ir_emit(L->T->prog, L->T->fn, op, args, nargs, res, attr, nattr, 0, at, name);
}

static ValId cast_to(L *L, Span at, ValId v, DType dt) {
  Type t = *ir_type(L->T->fn, v);
  if (t.dtype == dt) return v;
  Value *val = ir_val(L->T->fn, v);
  if (val->kind == V_INST && L->T->fn->insts.data[val->def].op == IR_CONST)
    return ir_const(L->T->prog, L->T->fn, dt, L->T->fn->insts.data[val->def].fattr, at);
  t.dtype = dt;
  return emit(L, at, IR_CAST, &v, 1, t, NULL, 0, "cast");
}

static int dt_rank(DType d) { return d == DT_BOOL ? 0 : (d == DT_I32 || d == DT_I64) ? 1 : 2; }

/* Result dtype of an op between tensors of dtypes da and db. */
static DType promote2(DType da, DType db) {
  if (dt_rank(da) != dt_rank(db)) return dt_rank(da) > dt_rank(db) ? da : db;
  if (da == DT_F64 || db == DT_F64) return DT_F64;
  if (da == DT_I64 || db == DT_I64) return DT_I64;
  return da;
}

/* Result dtype of a binary op between a and b (tensors or Python numbers). */
static DType promote(PV *a, PV *b) {
  DType da = a->k == PV_TENSOR ? a->t->type.dtype : DT_COUNT;
  DType db = b->k == PV_TENSOR ? b->t->type.dtype : DT_COUNT;
  if (da != DT_COUNT && db != DT_COUNT) return promote2(da, db);
  DType dt = da != DT_COUNT ? da : db;
  PV *s = da != DT_COUNT ? b : a;
  int srank = s->k == PV_FLOAT ? 2 : s->k == PV_INT ? 1 : 0;
  if (srank > dt_rank(dt)) return srank == 2 ? DT_F32 : DT_I64;
  return dt;
}

/* A Python number as a constant of an operation of dtype dt. PyTorch wraps an
 * integer scalar into an int32 operation modulo 2**32 (x + 2**32 == x); an int64
 * constant must be exact in the IR's double (a rounded one would be a silently
 * wrong value). */
static double scalar_of(L *L, Span at, PV *x, DType dt) {
  if (x->k == PV_FLOAT || (dt != DT_I32 && dt != DT_I64)) return pv_num(x);
  if (dt == DT_I32) return (double)(int32_t)(uint32_t)(uint64_t)x->i;
  if (x->i > ((int64_t)1 << 53) || x->i < -((int64_t)1 << 53))
    lower_error(L, at, "integer constant %lld is too large for ctc (int64 constants are exact only up to 2**53)",
                (long long)x->i);
  return (double)x->i;
}

/* PyTorch's check when a Python int is stored into an integer tensor (where,
 * masked_fill, clamp): "value cannot be converted to type int without overflow". */
static void check_fits(L *L, Span at, PV *x, DType dt) {
  if (!x || x->k != PV_INT || dt != DT_I32) return;
  if (x->i < INT32_MIN || x->i > INT32_MAX)
    lower_error(L, at, "value %lld cannot be converted to type int32 without overflow", (long long)x->i);
}

static ValId operand(L *L, Span at, PV *x, DType dt) {
  if (x->k == PV_TENSOR) return cast_to(L, at, t_val(L, at, x), dt);
  if (pv_is_num(x)) return ir_const(L->T->prog, L->T->fn, dt, scalar_of(L, at, x, dt), at);
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
  PV *c = ct_elem2(L, at, op, a, b, dt, rdt);   /* compile-time values outside compiled code */
  if (c) return c;
  need_fn(L, at, opname);
  ValId va = operand(L, at, a, dt), vb = operand(L, at, b, dt);
  Type r = bcast(L, at, opname, *ir_type(L->T->fn, va), *ir_type(L->T->fn, vb));
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
  if (L->T->dec) {
    PV *r = dec_binary(L, at, op, a, b);
    if (r) return r;
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
    if (!ir_dtype_is_float(dt) && pv_is_num(b) && pv_num(b) < 0)
      lower_error(L, at, "integers to negative integer powers are not allowed (as in PyTorch)");
    if (pv_is_num(b) && pv_num(b) == 2.0 && a->k == PV_TENSOR) return elem2(L, at, IR_MUL, "**", a, a, dt, dt);
    if (pv_is_num(b) && pv_num(b) == 1.0 && a->k == PV_TENSOR) return a;
    /* PyTorch computes x ** 0.5 and x ** -0.5 as sqrt and rsqrt, which differ from
     * pow at -inf and -0.0 (sqrt(-inf) = nan, rsqrt(-0.0) = -inf) */
    if (pv_is_num(b) && pv_num(b) == 0.5 && a->k == PV_TENSOR && ir_dtype_is_float(dt))
      return t_unary(L, at, IR_SQRT, a);
    if (pv_is_num(b) && pv_num(b) == -0.5 && a->k == PV_TENSOR && ir_dtype_is_float(dt))
      return t_unary(L, at, IR_RSQRT, a);
    /* and x ** 3, x ** -1 and x ** -2 (float, double) as x * x * x, 1 / x and 1 / (x * x): the
     * same roundings (powf(x, 3) was also a slow scalar call for negative x, 9 ns an element) */
    if (pv_is_num(b) && a->k == PV_TENSOR && (dt == DT_F32 || dt == DT_F64)) {
      double e = pv_num(b);
      if (e == 3.0) return elem2(L, at, IR_MUL, "**", elem2(L, at, IR_MUL, "**", a, a, dt, dt), a, dt, dt);
      if (e == -1.0) return t_binary(L, at, OP_DIV, pv_float(L, 1.0), a);
      if (e == -2.0) return t_binary(L, at, OP_DIV, pv_float(L, 1.0), elem2(L, at, IR_MUL, "**", a, a, dt, dt));
    }
    return elem2(L, at, IR_POW, "**", a, b, dt, dt);
  case OP_FLOORDIV: return t_divmod(L, at, 'f', a, b);
  case OP_MOD: return t_divmod(L, at, '%', a, b);
  case OP_BITAND: return t_bitwise(L, at, IR_BIT_AND, a, b);
  case OP_BITOR: return t_bitwise(L, at, IR_BIT_OR, a, b);
  case OP_BITXOR: return t_bitwise(L, at, IR_BIT_XOR, a, b);
  case OP_LSHIFT: return t_bitwise(L, at, IR_SHL, a, b);
  case OP_RSHIFT: return t_bitwise(L, at, IR_SHR, a, b);
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
  PV *c = ct_elem2(L, at, o, a, b, dt, DT_BOOL);
  if (c) return c;
  if (a->k == PV_TENSOR && a->t->data && !L->T->fn) {
    /* compile-time comparison of a constant tensor (e.g. a mask) */
    if (!pv_is_num(b)) lower_error(L, at, "compile-time tensor comparison needs a number");
    Type t = a->t->type;
    t.dtype = DT_BOOL;
    PV *r = t_const_tensor(L, at, t, 0);
    for (int64_t i = 0; i < ir_numel(&t); i++) {
      double x[2] = {a->t->data[i], pv_num(b)};
      if (!ir_elem_eval(o, dt, DT_BOOL, x, &r->t->data[i])) BUG("compile-time %s", ir_ops[o].name);
    }
    return r;
  }
  return elem2(L, at, o, fe_op_spelling(op), a, b, dt, DT_BOOL);
}

PV *t_unary(L *L, Span at, Op op, PV *x) {
  if (x->k == PV_TENSOR && !L->T->fn) {
    DType cdt = x->t->type.dtype;
    if (op != IR_NEG && op != IR_ABS && op != IR_RELU && !ir_dtype_is_float(cdt)) cdt = DT_F32;
    PV *c = ct_unary(L, at, op, x, cdt);
    if (c) return c;
  }
  need_fn(L, at, ir_ops[op].name);
  ValId v = t_val(L, at, x);
  DType dt = ir_type(L->T->fn, v)->dtype;
  if (op != IR_NEG && op != IR_ABS && op != IR_RELU && !ir_dtype_is_float(dt)) {
    v = cast_to(L, at, v, DT_F32);
    dt = DT_F32;
  }
  return t_wrap(L, emit(L, at, op, &v, 1, *ir_type(L->T->fn, v), NULL, 0, ir_ops[op].name));
}

PV *t_cast(L *L, Span at, PV *x, DType dt) {
  need_tensor_arg(L, at, x, "cast");
  PV *c = ct_cast(L, at, x, dt);   /* compile-time values */
  if (c) return c;
  return t_wrap(L, cast_to(L, at, t_val(L, at, x), dt));
}

PV *t_where(L *L, Span at, PV *c, PV *a, PV *b) {
  need_tensor_arg(L, at, c, "where");
  DType dt = promote(a, b);
  if (dt == DT_COUNT)   /* two Python numbers: PyTorch's default dtypes */
    dt = a->k == PV_FLOAT || b->k == PV_FLOAT ? DT_F32 : a->k == PV_BOOL && b->k == PV_BOOL ? DT_BOOL : DT_I64;
  check_fits(L, at, a, dt);
  check_fits(L, at, b, dt);
  PV *folded = ct_where(L, at, c, a, b, dt);   /* compile-time values outside compiled code */
  if (folded) return folded;
  need_fn(L, at, "where");
  ValId vc = t_val(L, at, c);
  if (ir_type(L->T->fn, vc)->dtype != DT_BOOL) vc = cast_to(L, at, vc, DT_BOOL);
  ValId va = operand(L, at, a, dt), vb = operand(L, at, b, dt);
  Type r = bcast(L, at, "where", *ir_type(L->T->fn, vc), *ir_type(L->T->fn, va));
  r = bcast(L, at, "where", r, *ir_type(L->T->fn, vb));
  r.dtype = dt;
  ValId args[3] = {vc, va, vb};
  return t_wrap(L, emit(L, at, IR_WHERE, args, 3, r, NULL, 0, "where"));
}

static int views_live(L *L, const Tensor *x, int depth);

PV *t_inplace(L *L, Span at, PV *x, PV *r) {
  staged_effect_check(L, at, "an in-place tensor update");
  need_tensor_arg(L, at, x, "inplace");
  need_tensor_arg(L, at, r, "inplace");
  if (x->k != PV_TENSOR) lower_error(L, at, "in-place operation needs a tensor");
  if (x->t->slot)
    lower_error(L, at, "in-place update of a parameter or buffer inside compiled code is not supported");
  if (!L->T->fn) lower_error(L, at, "in-place tensor updates at compile time are not supported");
  if (x->t->is_data)
    lower_error(L, at, "in-place update through '.data' inside compiled code is not supported "
                       "(use 'with torch.no_grad():' on the tensor itself)");
  if (x->t->is_view)
    lower_error(L, at, "in-place update of a view (a slice, view, reshape, transpose, expand or detach of "
                       "another tensor) inside compiled code is not supported: ctc compiles value semantics, so "
                       "the update would not reach the tensor it views; use an out-of-place operation");
  if (x->t->viewed && views_live(L, x->t, 0))
    lower_error(L, at, "in-place update of a tensor that has views (slices, view/reshape, transpose, expand, "
                       "detach) inside compiled code is not supported: ctc compiles value semantics, so the "
                       "views would not see the update; use an out-of-place operation");
  Type t = x->t->type;
  if (!ir_type_eq(&t, &r->t->type)) {
    ValId v = t_val(L, at, r);
    Type rt = *ir_type(L->T->fn, v);
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
  need_tensor_arg(L, at, x, "reshape");
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
    if (dims[i] < 0) lower_error(L, at, "invalid shape dimension %lld", (long long)dims[i]);
    /* 0 (ctc's tensors are never empty) or overflow: no input can match */
    if (dims[i] == 0 || ir_mul(known, dims[i], &known) < 0) known = -1;
    out.dims[i] = dims[i];
  }
  int64_t total = ir_numel(&in);
  if (known < 0 || infer >= 0) {
    if (known <= 0 || total % known) {
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
  if (x->t->data && !L->T->fn) {
    PV *r = t_const_tensor(L, at, out, 0);
    memcpy(r->t->data, x->t->data, sizeof(double) * (size_t)total);
    return ir_type_eq(&in, &out) ? r : ct_view(x, r);
  }
  ValId v = t_val(L, at, x);
  if (ir_type_eq(&in, &out)) return x;
  return t_wrap(L, emit(L, at, IR_RESHAPE, &v, 1, out, NULL, 0, ir_val(L->T->fn, v)->name));
}

PV *t_permute(L *L, Span at, PV *x, const int64_t *perm, int n) {
  need_tensor_arg(L, at, x, "permute");
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
  PV *c = ct_permute(L, at, x, p, out);
  if (c) return c;
  ValId v = t_val(L, at, x);
  return t_wrap(L, emit(L, at, IR_PERMUTE, &v, 1, out, p, n, "permute"));
}

PV *t_transpose(L *L, Span at, PV *x, int64_t d0, int64_t d1) {
  need_tensor_arg(L, at, x, "transpose");
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
  need_tensor_arg(L, at, x, "slice");
  Type in = x->t->type, out = in;
  int64_t n = in.dims[axis];
  if (start < 0) start += n;
  if (stop < 0) stop += n;
  start = start < 0 ? 0 : start > n ? n : start;
  stop = stop < 0 ? 0 : stop > n ? n : stop;
  if (step <= 0) lower_error(L, at, "slice step must be positive");
  int64_t cnt = stop > start ? (stop - start - 1) / step + 1 : 0;   /* no overflow for any step */
  if (cnt == 0) {
    out.dims[axis] = 0;
    lower_error(L, at, "zero-size tensors are not supported by ctc: this slice of a tensor of shape %s is empty "
                "(shape %s)", shape_str(L, &in), shape_str(L, &out));
  }
  if (cnt == 1) step = 1;   /* one element: any step reads it; keeps (cnt-1)*step < n and stride*step small */
  if (cnt == n && step == 1) return x;
  out.dims[axis] = cnt;
  PV *c = ct_slice(L, at, x, axis, start, step, out);
  if (c) return c;
  int64_t attr[2 * IR_MAX_DIMS];
  for (int i = 0; i < in.ndim; i++) {
    attr[2 * i] = i == axis ? start : 0;
    attr[2 * i + 1] = i == axis ? step : 1;
  }
  ValId v = t_val(L, at, x);
  return t_wrap(L, emit(L, at, IR_SLICE, &v, 1, out, attr, 2 * in.ndim, "slice"));
}

/* x[idx]: ints, slices, None, Ellipsis and single-element lists ([-1]). */
PV *t_mark_view(L *L, PV *base, PV *v) {
  if (!L->T->fn || base->k != PV_TENSOR) return v;
  if (pv_is_seq(v)) {
    for (int i = 0; i < v->n; i++) t_mark_view(L, base, v->items[i]);
    return v;
  }
  if (v->k != PV_TENSOR || v == base) return v;
  v->t->is_view = 1;
  base->t->viewed = 1;
  Tensor *b = base->t;
  if (b->nviews == b->cviews) {
    const int nc = b->cviews ? 2 * b->cviews : 4;
    PV **nv = arena_alloc(L->a, sizeof(PV *) * (size_t)nc);
    if (b->nviews) memcpy(nv, b->views, sizeof(PV *) * (size_t)b->nviews);
    b->views = nv, b->cviews = nc;
  }
  b->views[b->nviews++] = v;
  return v;
}

/* Whether value w is v or holds it: itself, an item of a tuple, list or dict, an attribute of an object. */
static int holds(const PV *w, const PV *v, int depth) {
  if (w == v) return 1;
  if (depth > 2) return 0;
  if (w->k == PV_TUPLE || w->k == PV_LIST || w->k == PV_DICT)
    for (int i = 0; i < w->n; i++)
      if (holds(w->items[i], v, depth + 1)) return 1;
  if (w->k == PV_OBJ && w->attrs && !w->mod)
    for (int i = 0; i < w->attrs->vals.len; i++)
      if (holds(w->attrs->vals.data[i], v, depth + 1)) return 1;
  return 0;
}

/* Whether a scope (or one it is nested in) binds v. */
static int scope_binds(const Env *e, const PV *v) {
  for (; e; e = e->parent)
    for (int j = 0; j < e->vals.len; j++)
      if (holds(e->vals.data[j], v, 0)) return 1;
  return 0;
}

/* Whether a view of x (or a view of one, ...) is still bound to a name in scope, the callers' scopes
 * included: PyTorch's views share x's storage, so an in-place update of x would reach it, which ctc's
 * value semantics cannot; a view that lived only inside an expression (`h[..., -1] = h[..., 0] * 2`)
 * is gone. */
static int views_live(L *L, const Tensor *x, int depth) {
  for (int i = 0; i < x->nviews; i++) {
    const PV *v = x->views[i];
    if (scope_binds(L->env, v)) return 1;
    for (int f = 0; f < L->nstack && f < 64; f++)
      if (scope_binds(L->stack_env[f], v)) return 1;
    if (depth < 8 && v->t->viewed && views_live(L, v->t, depth + 1)) return 1;
  }
  return 0;
}

static PV *index_tensor(L *L, Span at, PV *x, PV *idx);
PV *t_index(L *L, Span at, PV *x, PV *idx) { return t_mark_view(L, x, index_tensor(L, at, x, idx)); }

/* an index item that PyTorch reads as an advanced index (index_adv.c): a tensor (but a
 * 0-d integer one, which selects as an int does), a flat list of ints; a one-element
 * list only beside another (alone, x[[k]] keeps the axis as x[k:k+1] does) */
static int adv_item(PV *it, int others) {
  if (it->k == PV_TENSOR) return it->t->type.ndim > 0 || it->t->type.dtype == DT_BOOL;
  if (it->k != PV_LIST || it->n == 0) return 0;
  for (int i = 0; i < it->n; i++)
    if (it->items[i]->k != PV_INT) return 0;
  return it->n > 1 || others;
}

/* a flat list of ints as a constant int64 tensor */
static PV *list_index(L *L, Span at, PV *l) {
  PV *t = t_const_tensor(L, at, (Type){.dtype = DT_I64, .ndim = 1, .dims = {l->n}}, 0);
  for (int i = 0; i < l->n; i++) t->t->data[i] = (double)l->items[i]->i;
  return t;
}

static PV *index_tensor(L *L, Span at, PV *x, PV *idx) {
  need_tensor_arg(L, at, x, "index");
  PV **items = &idx;
  int n = 1;
  if (idx->k == PV_TUPLE) {
    items = idx->items;
    n = idx->n;
  }
  Type in = x->t->type;
  int used = 0, ell = -1, nadv = 0;
  for (int i = 0; i < n; i++) {
    if (items[i]->k == PV_ELLIPSIS) {
      if (ell >= 0) lower_error(L, at, "an index can only have one ellipsis");
      ell = i;
    } else if (items[i]->k != PV_NONE)
      used++;
    nadv += adv_item(items[i], 0);
  }
  if (nadv)   /* beside another advanced index, a one-element list is one too */
    for (int i = 0; i < n; i++) nadv += !adv_item(items[i], 0) && adv_item(items[i], 1);
  if (used > in.ndim)
    lower_error(L, at, "too many indices for a tensor of shape %s", shape_str(L, &in));
  PV *cur = x;
  int64_t newdims[IR_MAX_DIMS * 2];
  int nnew = 0, axis = 0;
  /* several advanced indices: gathered after the loop (index_adv.c); where their shape goes */
  PV *adv[IR_MAX_DIMS];
  int advax[IR_MAX_DIMS], nadv_seen = 0, ins = -1, gap = 0, front = 0;
  for (int i = 0; i < n; i++) {
    PV *it = items[i];
    if (nadv > 1 && adv_item(it, 1)) {
      if (nadv_seen && gap) front = 1;   /* a slice, None or Ellipsis between them */
      if (!nadv_seen) ins = nnew;
      advax[nadv_seen] = axis++;
      adv[nadv_seen++] = it->k == PV_LIST ? list_index(L, at, it) : it;
      gap = 0;
      continue;
    }
    if (nadv_seen && !(it->k == PV_INT || it->k == PV_BOOL || it->k == PV_TENSOR)) gap = 1;
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
    if (it->k == PV_TENSOR || (it->k == PV_LIST && adv_item(it, 0))) {   /* one advanced index (index_adv.c) */
      int nd;
      cur = t_index_by_tensor(L, at, cur, axis, it->k == PV_LIST ? list_index(L, at, it) : it, newdims + nnew, &nd);
      nnew += nd;
      axis++;
      continue;
    }
    lower_error(L, at, "unsupported index of type '%s'", pv_kind_name(it));
  }
  while (axis < in.ndim) newdims[nnew++] = in.dims[axis++];
  if (nadv_seen) {   /* the broadcast shape of the indices goes first, or where the first one was */
    int64_t bd[IR_MAX_DIMS];
    int bn;
    cur = t_index_by_tensors(L, at, cur, advax, adv, nadv_seen, front, bd, &bn);
    if (front) ins = 0;
    if (nnew + bn > IR_MAX_DIMS * 2) lower_error(L, at, "too many dimensions");
    memmove(newdims + ins + bn, newdims + ins, sizeof(int64_t) * (size_t)(nnew - ins));
    for (int i = 0; i < bn; i++) newdims[ins + i] = bd[i];
    nnew += bn;
  }
  if (nnew > IR_MAX_DIMS) lower_error(L, at, "too many dimensions");
  Type ct = cur->t->type;
  int same = ct.ndim == nnew;
  for (int i = 0; i < nnew; i++) same = same && ct.dims[i] == newdims[i];
  if (same) return cur;
  if (nnew == 0 && ct_applies(L, cur, NULL)) return t_reshape(L, at, cur, newdims, 0);
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
  for (int i = 0; i < n; i++)
    if (xs[i]->k != PV_TENSOR)
      lower_error(L, at, "torch.cat: expected a sequence of tensors, but item %d is '%s'", i, pv_kind_name(xs[i]));
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
    if (ir_add(tot, t.dims[dim], &tot) < 0)
      lower_error(L, at, "torch.cat: the result is too large (dimension %lld overflows)", (long long)dim);
  }
  r.dims[dim] = tot;
  PV *c = ct_concat(L, at, xs, n, dim, r);
  if (c) return c;
  for (int i = 0; i < n; i++) vs[i] = t_val(L, at, xs[i]);
  int64_t attr[1] = {dim};
  return t_wrap(L, emit(L, at, IR_CONCAT, vs, n, r, attr, 1, "cat"));
}

/* ---- reductions and composites ------------------------------------------ */

PV *t_reduce(L *L, Span at, Op op, PV *x, const int64_t *dims, int ndims, int keepdim, int mean) {
  need_tensor_arg(L, at, x, "reduce");
  if (!L->T->fn && ct_applies(L, x, NULL) && x->t->type.ndim) {   /* compile-time values */
    Type in = x->t->type, kd = in, out = in;
    if (mean && !ir_dtype_is_float(in.dtype))
      lower_error(L, at, "mean() needs a floating-point tensor; cast it with .float() first");
    int red[IR_MAX_DIMS] = {0};
    for (int i = 0; i < ndims; i++) red[t_norm_dim(L, at, dims[i], in.ndim)] = 1;
    out.ndim = 0;
    for (int i = 0; i < in.ndim; i++) {
      if (!ndims) red[i] = 1;
      if (red[i]) kd.dims[i] = 1;
      if (!red[i] || keepdim) out.dims[out.ndim++] = red[i] ? 1 : in.dims[i];
    }
    if (in.dtype == DT_BOOL) kd.dtype = out.dtype = DT_I64;
    PV *c = ct_reduce(L, at, op, x, red, mean, kd);
    if (c) return ir_type_eq(&kd, &out) ? c : t_reshape(L, at, c, out.dims, out.ndim);
  }
  need_fn(L, at, "a reduction");
  ValId v = t_val(L, at, x);
  Type in = *ir_type(L->T->fn, v), kd = in, out = in;
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
    ValId c = ir_const(L->T->prog, L->T->fn, kd.dtype, 1.0 / (double)count, at);
    ValId args[2] = {r, c};
    r = emit(L, at, IR_MUL, args, 2, kd, NULL, 0, "mean");
  }
  if (!ir_type_eq(&kd, &out)) r = emit(L, at, IR_RESHAPE, &r, 1, out, NULL, 0, ir_val(L->T->fn, r)->name);
  return t_wrap(L, r);
}

PV *t_softmax(L *L, Span at, PV *x, int64_t dim, int log) {
  need_tensor_arg(L, at, x, "softmax");
  need_fn(L, at, "softmax");
  if (L->T->dec) {
    PV *r = dec_softmax(L, at, x, dim, log);
    if (r) return r;
  }
  if (!ir_dtype_is_float(x->t->type.dtype)) x = t_cast(L, at, x, DT_F32);
  /* the shift is detached: softmax(x - c) = softmax(x) for any c, so no derivative of any
   * order flows through it (AD through the max would only add terms that cancel) */
  PV *m = t_detach(L, at, t_reduce(L, at, IR_REDUCE_MAX, x, &dim, 1, 1, 0));
  PV *z = t_binary(L, at, OP_SUB, x, m);
  PV *e = t_unary(L, at, IR_EXP, z);
  PV *s = t_reduce(L, at, IR_REDUCE_SUM, e, &dim, 1, 1, 0);
  PV *r = log ? t_binary(L, at, OP_SUB, z, t_unary(L, at, IR_LOG, s)) : t_binary(L, at, OP_DIV, e, s);
  ir_val(L->T->fn, r->t->v)->name = log ? "log_softmax" : "softmax";
  return r;
}

PV *t_matmul(L *L, Span at, PV *a, PV *b) {
  PV *c = ct_matmul(L, at, a, b);
  if (c) return c;
  need_fn(L, at, "matmul");
  if (L->T->dec && (c = dec_matmul(L, at, a, b))) return c;
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
  need_tensor_arg(L, at, x, "linear");
  need_tensor_arg(L, at, w, "linear");
  opt_tensor_arg(L, at, b, "linear bias");
  ndim_arg(L, at, w, 2, "linear weight");
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

PV *t_pool2d(L *L, Span at, Op op, PV *x, const int64_t k[2], const int64_t s[2], const int64_t p[2],
             const int64_t dil[2], int ceil_mode, int count_include_pad) {
  need_tensor_arg(L, at, x, "pool2d");
  need_fn(L, at, "pooling");
  Type tx = x->t->type, r = tx;
  if (tx.ndim != 4) lower_error(L, at, "2-D pooling expects a 4-D input [N, C, H, W], got shape %s", shape_str(L, &tx));
  for (int d = 0; d < 2; d++) {
    if (k[d] <= 0 || s[d] <= 0 || p[d] < 0) lower_error(L, at, "pooling: invalid kernel, stride or padding");
    if (p[d] > k[d] / 2) lower_error(L, at, "pooling: padding should be at most half the kernel size");
    if (dil[d] <= 0) lower_error(L, at, "pooling: dilation must be positive");
    int64_t span, in;   /* in = H + 2*p - (dil*(k-1) + 1), checked (p <= k/2) */
    if (ir_mul(dil[d], k[d] - 1, &span) < 0 || ir_add(span, 1, &span) < 0 ||
        ir_add(tx.dims[2 + d], 2 * p[d], &in) < 0 || ir_sub(in, span, &in) < 0)
      lower_error(L, at, "pooling: kernel size or dilation is too large (%lld, %lld)", (long long)k[d], (long long)dil[d]);
    if (in < 0) lower_error(L, at, "pooling: input %s is too small for kernel %lldx%lld", shape_str(L, &tx), (long long)k[0], (long long)k[1]);
    int64_t o = (ceil_mode && in > 0 ? (in - 1) / s[d] + 1 : in / s[d]) + 1, last;   /* ceil without overflow */
    /* ceil_mode: the last window must start inside the input or its left padding */
    if (ceil_mode && (ir_mul(o - 1, s[d], &last) < 0 || last >= tx.dims[2 + d] + p[d])) o--;
    r.dims[2 + d] = o;
  }
  /* The work (and every product the code generator forms from it) stays far
   * from int64 overflow: at most 2**40 window reads. */
  char why[512];
  if (ir_type_problem(&r, why, sizeof why)) lower_error(L, at, "%s", why);
  int64_t reads[3] = {ir_numel(&r), k[0], k[1]}, nreads;
  if (ir_prod(reads, 3, &nreads) < 0 || nreads > CTC_MAX_ARENA_BYTES)
    lower_error(L, at, "pooling: kernel %lldx%lld is too large (more than 2**40 window reads)", (long long)k[0],
                (long long)k[1]);
  if (ceil_mode && op == IR_AVGPOOL2D) lower_error(L, at, "avg_pool2d with ceil_mode=True is not supported yet");
  if (!ir_dtype_is_float(tx.dtype)) lower_error(L, at, "pooling needs a floating-point tensor");
  ValId v = t_val(L, at, x);
  int64_t attr[8] = {k[0], k[1], s[0], s[1], p[0], p[1], dil[0], dil[1]};
  if (op == IR_AVGPOOL2D) attr[6] = count_include_pad;
  return t_wrap(L, emit(L, at, op, &v, 1, r, attr, op == IR_AVGPOOL2D ? 7 : 8, op == IR_AVGPOOL2D ? "avgpool" : "maxpool"));
}

PV *t_layer_norm(L *L, Span at, PV *x, int nnorm, PV *w, PV *b, double eps) {
  need_tensor_arg(L, at, x, "layer_norm");
  opt_tensor_arg(L, at, w, "layer_norm weight");
  opt_tensor_arg(L, at, b, "layer_norm bias");
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
  ir_val(L->T->fn, y->t->v)->name = "layer_norm";
  return y;
}

PV *t_embedding(L *L, Span at, PV *w, PV *idx, PV *padding_idx) {
  need_tensor_arg(L, at, w, "embedding");
  need_tensor_arg(L, at, idx, "embedding");
  ndim_arg(L, at, w, 2, "embedding weight");
  need_fn(L, at, "embedding");
  Type ti = idx->t->type, tw = w->t->type;
  int64_t pad[2] = {0, 0};   /* EMBEDDING attrs: has a padding index, the index */
  if (padding_idx && padding_idx->k != PV_NONE) {
    int64_t p = arg_int(L, at, padding_idx, "padding_idx");
    if (p < -tw.dims[0] || p >= tw.dims[0])
      lower_error(L, at, "padding_idx %lld is out of range for %lld embeddings", (long long)p, (long long)tw.dims[0]);
    pad[0] = 1;
    pad[1] = p < 0 ? p + tw.dims[0] : p;
  }
  if (ti.dtype != DT_I64 && ti.dtype != DT_I32)
    lower_error(L, at, "embedding indices must be an integer tensor (torch.long), got %s", ir_dtype_name(ti.dtype));
  if (ti.ndim + 1 > IR_MAX_DIMS) lower_error(L, at, "too many dimensions");
  Type r = ti;
  r.dtype = tw.dtype;
  r.dims[r.ndim++] = tw.dims[1];
  ValId args[2] = {t_val(L, at, w), cast_to(L, at, t_val(L, at, idx), DT_I64)};
  return t_wrap(L, emit(L, at, IR_EMBEDDING, args, 2, r, pad, 2, "embedding"));
}

PV *t_gelu(L *L, Span at, PV *x, int tanh_approx) {
  need_tensor_arg(L, at, x, "gelu");
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
  ir_val(L->T->fn, y->t->v)->name = "gelu";
  return y;
}


/* torch.maximum / torch.minimum: the MAX/MIN primitives, which propagate a NaN
 * from either operand as PyTorch does (a where() on a comparison would not). */
PV *t_minmax(L *L, Span at, Op op, PV *a, PV *b) {
  DType dt = promote(a, b);
  return elem2(L, at, op, op == IR_MAX ? "maximum" : "minimum", a, b, dt, dt);
}

/* x.clamp(lo, hi) = min(max(x, lo), hi) in PyTorch's dtype (promoted with the
 * bounds), NaN kept, with clamp's gradient: g where lo <= x <= hi, else 0 (at
 * NaN too; g at the bounds themselves). Written as where()s whose branches
 * other than x do not depend on x; the NaN branch is a constant NaN. */
PV *t_clamp(L *L, Span at, PV *x, PV *lo, PV *hi) {
  need_fn(L, at, "clamp");
  if (lo && lo->k == PV_NONE) lo = NULL;
  if (hi && hi->k == PV_NONE) hi = NULL;
  if (!lo && !hi) lower_error(L, at, "clamp: at least one of 'min' or 'max' must not be None");
  DType dt = promote(x, lo ? lo : hi);
  if (lo && hi) dt = promote2(dt, promote(x, hi));
  check_fits(L, at, lo, dt);
  check_fits(L, at, hi, dt);
  PV *xt = t_wrap(L, operand(L, at, x, dt));
  int fl = ir_dtype_is_float(dt);
  /* PyTorch: a NaN bound alone leaves x as it is (with both, everything is NaN) */
  if (fl && (!lo || !hi) && pv_is_num(lo ? lo : hi) && isnan(pv_num(lo ? lo : hi))) return xt;
  PV *lo2 = lo;   /* the value where x < lo: min(lo, hi), NaN if hi is */
  if (lo && hi) {
    if (pv_is_num(lo) && pv_is_num(hi)) lo2 = pv_num(lo) <= pv_num(hi) ? lo : hi;
    else lo2 = t_where(L, at, t_compare(L, at, OP_LE, lo, hi), lo, hi);
  }
  PV *nan = t_wrap(L, ir_const(L->T->prog, L->T->fn, dt, NAN, at));
  PV *r;
  if (!fl) {   /* no NaN: the two where()s of min(max(x, lo), hi) */
    r = xt;
    if (hi) r = t_where(L, at, t_compare(L, at, OP_GT, r, hi), hi, r);
    if (lo) r = t_where(L, at, t_compare(L, at, OP_LT, xt, lo), lo2, r);
  } else if (!hi) {
    r = t_where(L, at, t_compare(L, at, OP_GE, xt, lo), xt, t_where(L, at, t_compare(L, at, OP_LT, xt, lo), lo, nan));
  } else if (!lo) {
    r = t_where(L, at, t_compare(L, at, OP_LE, xt, hi), xt, t_where(L, at, t_compare(L, at, OP_GT, xt, hi), hi, nan));
  } else {
    PV *in = t_where(L, at, t_compare(L, at, OP_LE, xt, hi), xt, hi);
    r = t_where(L, at, t_compare(L, at, OP_GE, xt, lo), in, t_where(L, at, t_compare(L, at, OP_LT, xt, lo), lo2, nan));
  }
  ir_val(L->T->fn, r->t->v)->name = "clamp";
  return r;
}

/* ---- issue 15's ops: integer division and remainder, bitwise and logical ops,
 * scans, gathers, arg-reductions, and composites lowered to primitives ---------- */

static PV *emit1(L *L, Span at, Op op, ValId v, Type r, const int64_t *attr, int nattr, const char *name) {
  return t_wrap(L, emit(L, at, op, &v, 1, r, attr, nattr, name));
}

static void need_nonzero_int(L *L, Span at, PV *b, DType dt, const char *what) {
  if (!ir_dtype_is_float(dt) && pv_is_num(b) && pv_num(b) == 0)
    lower_error(L, at, "ZeroDivisionError: integer %s by zero", what);
}

/* kind: 'f' floor division (//, floor_divide, rounding_mode='floor'), 't'
 * truncation (rounding_mode='trunc'), '%' remainder (Python's %), 'm' fmod */
PV *t_divmod(L *L, Span at, int kind, PV *a, PV *b) {
  const char *name = kind == 'f' ? "floor_divide" : kind == 't' ? "div" : kind == '%' ? "remainder" : "fmod";
  DType dt = promote(a, b);
  if (dt == DT_COUNT) lower_error(L, at, "%s needs a tensor operand", name);
  if (dt == DT_BOOL) lower_error(L, at, "\"%s\" is not implemented for 'Bool' tensors", name);
  need_nonzero_int(L, at, b, dt, kind == 'f' || kind == 't' ? "division" : "modulo");
  switch (kind) {
  case 'f': return elem2(L, at, IR_FLOORDIV, name, a, b, dt, dt);
  case '%': return elem2(L, at, IR_REMAINDER, name, a, b, dt, dt);
  case 'm': return elem2(L, at, IR_FMOD, name, a, b, dt, dt);
  default: {
    /* PyTorch: trunc(a / b) for floats; C's truncating division for integers */
    PV *q = elem2(L, at, IR_DIV, name, a, b, dt, dt);
    return ir_dtype_is_float(dt) ? t_unary(L, at, IR_TRUNC, q) : q;
  }
  }
}

/* a binary op computed in floating point (integers promote to float32) */
PV *t_float_binary(L *L, Span at, Op op, PV *a, PV *b) {
  DType dt = promote(a, b);
  if (dt == DT_COUNT) lower_error(L, at, "%s needs a tensor operand", ir_ops[op].name);
  if (!ir_dtype_is_float(dt)) dt = DT_F32;
  return elem2(L, at, op, ir_ops[op].name, a, b, dt, dt);
}

/* & | ^ on integer and bool tensors (PyTorch refuses floats) */
PV *t_bitwise(L *L, Span at, Op op, PV *a, PV *b) {
  const char *name = ir_ops[op].name;
  DType dt = promote(a, b);
  if (dt == DT_COUNT) lower_error(L, at, "%s needs a tensor operand", name);
  if (ir_dtype_is_float(dt) || (pv_is_num(a) && a->k == PV_FLOAT) || (pv_is_num(b) && b->k == PV_FLOAT))
    lower_error(L, at, "\"%s\" is not implemented for floating-point tensors (only integer and bool)", name);
  if ((op == IR_SHL || op == IR_SHR) && dt == DT_BOOL) dt = DT_I64;   /* bool shifts as int64 (PyTorch) */
  return elem2(L, at, op, name, a, b, dt, dt);
}

/* ~x and bitwise_not */
PV *t_invert(L *L, Span at, PV *x) {
  need_tensor_arg(L, at, x, "bitwise_not");
  Type t = x->t->type;
  if (ir_dtype_is_float(t.dtype))
    lower_error(L, at, "\"bitwise_not\" is not implemented for floating-point tensors (only integer and bool)");
  PV *c = ct_unary(L, at, IR_BIT_NOT, x, t.dtype);   /* compile-time values */
  if (c) return c;
  need_fn(L, at, "bitwise_not");
  return emit1(L, at, IR_BIT_NOT, t_val(L, at, x), t, NULL, 0, "bitwise_not");
}

/* logical_not / and / or / xor: of x != 0 (NaN counts as true), bool results */
PV *t_logical(L *L, Span at, int kind, PV *a, PV *b) {
  need_fn(L, at, "a logical op");
  PV *za = t_compare(L, at, OP_NE, a, pv_int(L, 0));
  if (kind == '!') return t_compare(L, at, OP_EQ, a, pv_int(L, 0));
  PV *zb = t_compare(L, at, OP_NE, b, pv_int(L, 0));
  return t_bitwise(L, at, kind == '&' ? IR_BIT_AND : kind == '|' ? IR_BIT_OR : IR_BIT_XOR, za, zb);
}

/* sign, round, trunc, floor, ceil, frac: integer tensors keep their values
 * (PyTorch: sign of ints is an int, round/trunc/floor/ceil of ints the ints) */
PV *t_rounding(L *L, Span at, Op op, PV *x) {
  need_tensor_arg(L, at, x, ir_ops[op].name);
  Type t = x->t->type;
  if (!ir_dtype_is_float(t.dtype)) {
    PV *c = t.dtype == DT_BOOL ? NULL : ct_unary(L, at, op, x, t.dtype);   /* compile-time values */
    if (c) return c;
    need_fn(L, at, ir_ops[op].name);
    if (op == IR_SIGN && t.dtype != DT_BOOL) return emit1(L, at, IR_SIGN, t_val(L, at, x), t, NULL, 0, "sign");
    return t_wrap(L, t_val(L, at, x));
  }
  return t_unary(L, at, op, x);
}

/* torch.round(x, decimals=d): PyTorch's nearbyint(x * 10^d) / 10^d (d > 0),
 * nearbyint(x / 10^-d) * 10^-d (d < 0) */
PV *t_round(L *L, Span at, PV *x, int64_t decimals) {
  if (!decimals || !ir_dtype_is_float(x->t->type.dtype)) return t_rounding(L, at, IR_ROUND, x);
  if (decimals > 300 || decimals < -300) lower_error(L, at, "round: decimals %lld out of range", (long long)decimals);
  PV *p = pv_float(L, pow(10.0, (double)(decimals < 0 ? -decimals : decimals)));
  if (decimals > 0) return t_binary(L, at, OP_DIV, t_unary(L, at, IR_ROUND, t_binary(L, at, OP_MUL, x, p)), p);
  return t_binary(L, at, OP_MUL, t_unary(L, at, IR_ROUND, t_binary(L, at, OP_DIV, x, p)), p);
}

/* cumsum along dim: integer and bool tensors sum in int64 (PyTorch); dtype= first */
PV *t_cumsum(L *L, Span at, PV *x, int64_t dim, PV *dtype) {
  need_tensor_arg(L, at, x, "cumsum");
  need_fn(L, at, "cumsum");
  ValId v = t_val(L, at, x);
  Type t = *ir_type(L->T->fn, v);
  int64_t d = t_norm_dim(L, at, dim, t.ndim);
  if (dtype && dtype->k == PV_DTYPE) v = cast_to(L, at, v, dtype->dt);
  else if (!ir_dtype_is_float(t.dtype)) v = cast_to(L, at, v, DT_I64);
  t = *ir_type(L->T->fn, v);
  if (t.ndim == 0) return t_wrap(L, v);
  int64_t attr[2] = {d, 0};
  return emit1(L, at, IR_CUMSUM, v, t, attr, 2, "cumsum");
}

/* The index of the max (min) along dim (None: of the flattened tensor): first
 * index, NaN counts as the extreme. */
PV *t_argmax(L *L, Span at, PV *x, PV *dim, int keepdim, int is_min) {
  const char *name = is_min ? "argmin" : "argmax";
  need_tensor_arg(L, at, x, name);
  need_fn(L, at, name);
  Type t = x->t->type;
  if (t.dtype == DT_BOOL) lower_error(L, at, "\"%s\" is not implemented for 'Bool' tensors", name);
  ValId v = t_val(L, at, x);
  int64_t d;
  Type r;
  if (!dim || dim->k == PV_NONE) {
    Type flat = t;
    flat.ndim = 1;
    flat.dims[0] = ir_numel(&t);
    v = emit(L, at, IR_RESHAPE, &v, 1, flat, NULL, 0, "flat");
    d = 0;
    r = t;   /* keepdim: every dim 1 */
    for (int i = 0; i < r.ndim; i++) r.dims[i] = 1;
    if (!keepdim) r.ndim = 0;
  } else {
    d = t_norm_dim(L, at, arg_int(L, at, dim, "dim"), t.ndim);
    if (t.ndim == 0) return t_const_tensor(L, at, (Type){.dtype = DT_I64}, 0);
    r = t;
    r.dims[d] = 1;
    if (!keepdim) {
      for (int i = (int)d; i + 1 < r.ndim; i++) r.dims[i] = r.dims[i + 1];
      r.ndim--;
    }
  }
  Type kt = *ir_type(L->T->fn, v);
  kt.dims[d] = 1;
  kt.dtype = DT_I64;
  int64_t attr[2] = {d, is_min};
  ValId a = emit(L, at, IR_ARGMAX, &v, 1, kt, attr, 2, name);
  r.dtype = DT_I64;
  if (!ir_type_eq(&kt, &r)) a = emit(L, at, IR_RESHAPE, &a, 1, r, NULL, 0, name);
  return t_wrap(L, a);
}

static ValId index_val(L *L, Span at, PV *idx, const char *what) {
  if (idx->k != PV_TENSOR) lower_error(L, at, "%s: the index must be a tensor, got '%s'", what, pv_kind_name(idx));
  DType dt = idx->t->type.dtype;
  if (dt != DT_I64 && dt != DT_I32) lower_error(L, at, "%s: the index must be an integer tensor (int64), not %s", what, ir_dtype_name(dt));
  return cast_to(L, at, t_val(L, at, idx), DT_I64);
}

/* torch.gather(x, dim, index): r[p] = x[p with p[dim] = index[p]] */
PV *t_gather(L *L, Span at, PV *x, int64_t dim, PV *index) {
  need_tensor_arg(L, at, x, "gather");
  need_fn(L, at, "gather");
  ValId v = t_val(L, at, x), iv = index_val(L, at, index, "gather");
  Type t = *ir_type(L->T->fn, v), it = *ir_type(L->T->fn, iv);
  if (t.ndim != it.ndim)
    lower_error(L, at, "gather: index %s and input %s must have the same number of dimensions", shape_str(L, &it), shape_str(L, &t));
  int scalar = t.ndim == 0;
  if (scalar) {   /* as 1-D */
    t.ndim = it.ndim = 1;
    t.dims[0] = it.dims[0] = 1;
    v = emit(L, at, IR_RESHAPE, &v, 1, t, NULL, 0, "x");
    iv = emit(L, at, IR_RESHAPE, &iv, 1, it, NULL, 0, "index");
  }
  int64_t d = t_norm_dim(L, at, dim, t.ndim);
  for (int i = 0; i < t.ndim; i++)
    if (i != d && it.dims[i] > t.dims[i])
      lower_error(L, at, "gather: index %s is larger than input %s at dimension %d", shape_str(L, &it), shape_str(L, &t), i);
  Type r = it;
  r.dtype = t.dtype;
  ValId args[2] = {v, iv};
  ValId g = emit(L, at, IR_GATHER, args, 2, r, &d, 1, "gather");
  if (scalar) g = emit(L, at, IR_RESHAPE, &g, 1, (Type){.dtype = t.dtype}, NULL, 0, "gather");
  return t_wrap(L, g);
}

/* x.scatter_add(dim, index, src): x, plus src's elements (those index covers)
 * added at their indices along dim */
PV *t_scatter_add(L *L, Span at, PV *x, int64_t dim, PV *index, PV *src) {
  need_tensor_arg(L, at, x, "scatter_add");
  need_tensor_arg(L, at, src, "scatter_add");
  need_fn(L, at, "scatter_add");
  ValId v = t_val(L, at, x), iv = index_val(L, at, index, "scatter_add"), sv = t_val(L, at, src);
  Type t = *ir_type(L->T->fn, v), it = *ir_type(L->T->fn, iv), st = *ir_type(L->T->fn, sv);
  if (t.dtype != st.dtype)
    lower_error(L, at, "scatter_add: expected self.dtype to be equal to src.dtype (%s and %s)", ir_dtype_name(t.dtype),
                ir_dtype_name(st.dtype));
  if (t.ndim != it.ndim || st.ndim != it.ndim)
    lower_error(L, at, "scatter_add: index %s, self %s and src %s must have the same number of dimensions",
                shape_str(L, &it), shape_str(L, &t), shape_str(L, &st));
  if (t.ndim == 0) lower_error(L, at, "scatter_add on 0-d tensors is not supported");
  int64_t d = t_norm_dim(L, at, dim, t.ndim);
  int same = 1;
  for (int i = 0; i < t.ndim; i++) {
    if (it.dims[i] > st.dims[i] || (i != d && it.dims[i] > t.dims[i]))
      lower_error(L, at, "scatter_add: index %s must not be larger than src %s, nor than self %s off dimension %lld",
                  shape_str(L, &it), shape_str(L, &st), shape_str(L, &t), (long long)d);
    same &= it.dims[i] == st.dims[i];
  }
  if (!same) {   /* only the part of src that index covers is used */
    int64_t attr[2 * IR_MAX_DIMS] = {0};
    for (int i = 0; i < st.ndim; i++) attr[2 * i + 1] = 1;
    Type s2 = it;
    s2.dtype = st.dtype;
    sv = emit(L, at, IR_SLICE, &sv, 1, s2, attr, 2 * st.ndim, "src");
  }
  ValId args[3] = {v, iv, sv};
  return t_wrap(L, emit(L, at, IR_SCATTER_ADD, args, 3, t, &d, 1, "scatter_add"));
}

/* index_select(x, dim, index): a gather whose index is broadcast along the other dims */
PV *t_index_select(L *L, Span at, PV *x, int64_t dim, PV *index) {
  need_tensor_arg(L, at, x, "index_select");
  need_fn(L, at, "index_select");
  ValId v = t_val(L, at, x), iv = index_val(L, at, index, "index_select");
  Type t = *ir_type(L->T->fn, v), it = *ir_type(L->T->fn, iv);
  if (it.ndim > 1) lower_error(L, at, "index_select: the index must be 0-D or 1-D, got shape %s", shape_str(L, &it));
  int64_t k = ir_numel(&it);
  int scalar = t.ndim == 0;
  if (scalar) {
    if (k != 1) lower_error(L, at, "index_select(): index to a 0-d tensor can have only 1 value, got %lld", (long long)k);
    t.ndim = 1;
    t.dims[0] = 1;
    v = emit(L, at, IR_RESHAPE, &v, 1, t, NULL, 0, "x");
  }
  int64_t d = t_norm_dim(L, at, dim, t.ndim);
  Type i2 = t, r = t;
  for (int i = 0; i < t.ndim; i++) i2.dims[i] = i == d ? k : 1;
  i2.dtype = DT_I64;
  r.dims[d] = k;
  iv = emit(L, at, IR_RESHAPE, &iv, 1, i2, NULL, 0, "index");
  ValId args[2] = {v, iv};
  ValId g = emit(L, at, IR_GATHER, args, 2, r, &d, 1, "index_select");
  if (scalar) g = emit(L, at, IR_RESHAPE, &g, 1, (Type){.dtype = t.dtype}, NULL, 0, "index_select");   /* 0-d stays 0-d */
  return t_wrap(L, g);
}

PV *t_checked_index(L *L, Span at, PV *idx, int64_t bound, const char *what) {
  Type t = idx->t->type;
  CHECK(t.dtype == DT_I64);
  int64_t n = ir_numel(&t), attr[2] = {0, 1};
  Type it = {.dtype = DT_I64, .ndim = 1, .dims = {bound}}, flat = {.dtype = DT_I64, .ndim = 1, .dims = {n}};
  ValId args[2] = {emit(L, at, IR_IOTA, NULL, 0, it, attr, 2, "classes"), t_val(L, at, idx)};
  args[1] = emit(L, at, IR_RESHAPE, &args[1], 1, flat, NULL, 0, what);
  int64_t axis = 0;
  ValId g = emit(L, at, IR_GATHER, args, 2, flat, &axis, 1, what);
  return t_wrap(L, emit(L, at, IR_RESHAPE, &g, 1, t, NULL, 0, what));
}

static ValId broadcast_to(L *L, Span at, ValId v, Type r) {
  Type t = *ir_type(L->T->fn, v);
  r.dtype = t.dtype;
  if (ir_type_eq(&t, &r)) return v;
  return emit(L, at, IR_BROADCAST, &v, 1, r, NULL, 0, "expand");
}

/* take_along_dim(x, indices, dim): x and indices broadcast against each other
 * off dim; dim None: of the flattened x and indices */
PV *t_take_along_dim(L *L, Span at, PV *x, PV *index, PV *dim) {
  need_tensor_arg(L, at, x, "take_along_dim");
  need_fn(L, at, "take_along_dim");
  ValId v = t_val(L, at, x), iv = index_val(L, at, index, "take_along_dim");
  Type t = *ir_type(L->T->fn, v), it = *ir_type(L->T->fn, iv);
  if (!dim || dim->k == PV_NONE) {
    Type f1 = t, f2 = it;
    f1.ndim = f2.ndim = 1;
    f1.dims[0] = ir_numel(&t);
    f2.dims[0] = ir_numel(&it);
    return t_gather(L, at, t_wrap(L, emit(L, at, IR_RESHAPE, &v, 1, f1, NULL, 0, "flat")), 0,
                    t_wrap(L, emit(L, at, IR_RESHAPE, &iv, 1, f2, NULL, 0, "flat")));
  }
  if (t.ndim != it.ndim)
    lower_error(L, at, "take_along_dim: input %s and indices %s should have the same number of dimensions",
                shape_str(L, &t), shape_str(L, &it));
  int64_t d = t_norm_dim(L, at, arg_int(L, at, dim, "dim"), t.ndim);
  Type a = t, b = it, m;
  a.dims[d] = b.dims[d] = 1;
  a.dtype = b.dtype;
  m = bcast(L, at, "take_along_dim", a, b);
  Type tx = m, ti = m;
  tx.dims[d] = t.dims[d];
  ti.dims[d] = it.dims[d];
  v = broadcast_to(L, at, v, tx);
  iv = broadcast_to(L, at, iv, ti);
  return t_gather(L, at, t_wrap(L, v), d, t_wrap(L, iv));
}

/* max/min(x, dim, keepdim) -> (values, indices): the values gathered at the
 * indices, so the gradient goes to the selected element (PyTorch's rule) */
PV *t_max_dim(L *L, Span at, PV *x, PV *dim, int keepdim, int is_min) {
  need_tensor_arg(L, at, x, is_min ? "min" : "max");
  Type t = x->t->type;
  int64_t d = t_norm_dim(L, at, arg_int(L, at, dim, "dim"), t.ndim);
  PV *items[2];
  if (t.ndim == 0) {
    items[0] = x;
    items[1] = t_const_tensor(L, at, (Type){.dtype = DT_I64}, 0);
    PV *r = pv_tuple(L, items, 2);
    r->bi = BI_T_MAX;
    return r;
  }
  PV *xs = x;
  if (t.dtype == DT_BOOL) xs = t_cast(L, at, x, DT_I64);   /* argmax refuses bool; max(dim) does not */
  PV *idx = t_argmax(L, at, xs, dim, 1, is_min);
  PV *val = t_gather(L, at, x, d, idx);
  if (!keepdim) {
    int64_t dims[IR_MAX_DIMS];
    int n = 0;
    for (int i = 0; i < t.ndim; i++)
      if (i != d) dims[n++] = t.dims[i];
    val = t_reshape(L, at, val, dims, n);
    idx = t_reshape(L, at, idx, dims, n);
  }
  items[0] = val;
  items[1] = idx;
  PV *r = pv_tuple(L, items, 2);
  r->bi = BI_T_MAX;   /* a torch.return_types.max: .values, .indices */
  return r;
}

/* amin: -amax(-x) for floats, ~amax(~x) for integers (exact at INT_MIN) */
PV *t_amin(L *L, Span at, PV *x, const int64_t *dims, int ndims, int keepdim) {
  need_tensor_arg(L, at, x, "amin");
  DType dt = x->t->type.dtype;
  if (dt == DT_BOOL) x = t_cast(L, at, x, DT_I64);
  Op flip = ir_dtype_is_float(dt) ? IR_NEG : IR_BIT_NOT;
  PV *nx = emit1(L, at, flip, t_val(L, at, x), x->t->type, NULL, 0, "flipped");
  PV *m = t_reduce(L, at, IR_REDUCE_MAX, nx, dims, ndims, keepdim, 0);
  PV *r = emit1(L, at, flip, t_val(L, at, m), m->t->type, NULL, 0, "amin");
  return dt == DT_BOOL ? t_cast(L, at, r, DT_BOOL) : r;
}

/* tril / triu of a staged tensor: where(col - row <= k (>= k), x, 0) over the last two dims */
PV *t_tri(L *L, Span at, PV *x, int64_t k, int upper) {
  need_tensor_arg(L, at, x, upper ? "triu" : "tril");
  need_fn(L, at, upper ? "triu" : "tril");
  Type t = x->t->type;
  if (t.ndim < 2) lower_error(L, at, "%s: input tensor must have at least 2 dimensions", upper ? "triu" : "tril");
  int64_t rows = t.dims[t.ndim - 2], cols = t.dims[t.ndim - 1];
  if (k > rows + cols || k < -(rows + cols)) k = k > 0 ? rows + cols : -(rows + cols);
  int64_t ra[2] = {k, 1}, ca[2] = {0, 1};
  Type rt = {.dtype = DT_I64, .ndim = 1, .dims = {rows}}, ct = {.dtype = DT_I64, .ndim = 1, .dims = {cols}};
  ValId r = emit(L, at, IR_IOTA, NULL, 0, rt, ra, 2, "row_plus_k");
  ValId c = emit(L, at, IR_IOTA, NULL, 0, ct, ca, 2, "col");
  rt.ndim = 2, rt.dims[1] = 1;
  ct.ndim = 2, ct.dims[0] = 1, ct.dims[1] = cols;
  r = emit(L, at, IR_RESHAPE, &r, 1, rt, NULL, 0, "row_plus_k");
  c = emit(L, at, IR_RESHAPE, &c, 1, ct, NULL, 0, "col");
  PV *keep = t_compare(L, at, upper ? OP_GE : OP_LE, t_wrap(L, c), t_wrap(L, r));
  return t_where(L, at, keep, x, t.dtype == DT_BOOL ? pv_bool(L, 0) : pv_int(L, 0));
}

/* x.repeat(*sizes): per repeated axis, x as [..., 1, d, ...] broadcast to
 * [..., r, d, ...] and merged into [..., r * d, ...] */
PV *t_repeat(L *L, Span at, PV *x, const int64_t *reps, int n) {
  need_tensor_arg(L, at, x, "repeat");
  need_fn(L, at, "repeat");
  Type t = x->t->type;
  if (n < t.ndim)
    lower_error(L, at, "repeat: the number of repeat dims (%d) can not be smaller than the number of dimensions of the tensor (%d)", n, t.ndim);
  for (int i = 0; i < n; i++)
    if (reps[i] < 0) lower_error(L, at, "repeat: negative repeat %lld", (long long)reps[i]);
  ValId v = t_val(L, at, x);
  Type cur = t;
  cur.ndim = n;
  for (int i = 0; i < n; i++) cur.dims[i] = i < n - t.ndim ? 1 : t.dims[i - (n - t.ndim)];
  v = emit(L, at, IR_RESHAPE, &v, 1, cur, NULL, 0, "x");
  for (int i = 0; i < n; i++) {
    if (reps[i] == 1) continue;
    if (n + 1 > IR_MAX_DIMS) lower_error(L, at, "repeat of a tensor of %d dimensions is not supported (at most %d)", n, IR_MAX_DIMS - 1);
    Type e = cur;   /* [..., 1, d_i, ...] */
    e.ndim = n + 1;
    for (int j = n; j > i; j--) e.dims[j] = e.dims[j - 1];
    e.dims[i] = 1;
    v = emit(L, at, IR_RESHAPE, &v, 1, e, NULL, 0, "x");
    e.dims[i] = reps[i];
    v = emit(L, at, IR_BROADCAST, &v, 1, e, NULL, 0, "repeat");
    cur.dims[i] = ck_mul(L, at, cur.dims[i], reps[i]);
    v = emit(L, at, IR_RESHAPE, &v, 1, cur, NULL, 0, "repeat");
  }
  return t_wrap(L, v);
}

/* expand_as / view_as / reshape_as */
PV *t_expand_to(L *L, Span at, PV *x, Type r) {
  need_tensor_arg(L, at, x, "expand_as");
  Type t = x->t->type, b;
  r.dtype = t.dtype;
  if (r.ndim < t.ndim || ir_broadcast_shapes(&t, &r, &b) < 0 || !ir_type_eq(&b, &r))
    lower_error(L, at, "expand: cannot expand shape %s to %s", shape_str(L, &t), shape_str(L, &r));
  return t_wrap(L, broadcast_to(L, at, t_val(L, at, x), r));
}

/* ---- composites ---- */

/* lerp(a, b, w): PyTorch's a + w (b - a) where |w| < 0.5, else b - (b - a)(1 - w) */
PV *t_lerp(L *L, Span at, PV *a, PV *b, PV *w) {
  need_fn(L, at, "lerp");
  need_tensor_arg(L, at, a, "lerp");
  need_tensor_arg(L, at, b, "lerp");
  DType dt = a->t->type.dtype;
  if (!ir_dtype_is_float(dt) || b->t->type.dtype != dt || (w->k == PV_TENSOR && w->t->type.dtype != dt))
    lower_error(L, at, "lerp: expected floating-point tensors of one dtype (input %s, end %s%s%s)", ir_dtype_name(dt),
                ir_dtype_name(b->t->type.dtype), w->k == PV_TENSOR ? ", weight " : "",
                w->k == PV_TENSOR ? ir_dtype_name(w->t->type.dtype) : "");
  PV *d = t_binary(L, at, OP_SUB, b, a);
  if (pv_is_num(w)) {
    double x = pv_num(w);
    if (fabs(x) < 0.5) return t_binary(L, at, OP_ADD, a, t_binary(L, at, OP_MUL, w, d));
    return t_binary(L, at, OP_SUB, b, t_binary(L, at, OP_MUL, d, pv_float(L, 1 - x)));
  }
  PV *small = t_compare(L, at, OP_LT, t_unary(L, at, IR_ABS, w), pv_float(L, 0.5));
  PV *lo = t_binary(L, at, OP_ADD, a, t_binary(L, at, OP_MUL, w, d));
  PV *hi = t_binary(L, at, OP_SUB, b, t_binary(L, at, OP_MUL, d, t_binary(L, at, OP_SUB, pv_float(L, 1), w)));
  return t_where(L, at, small, lo, hi);
}

/* addcmul: x + value * t1 * t2; addcdiv: x + value * t1 / t2 (PyTorch's order) */
PV *t_addc(L *L, Span at, PV *x, PV *t1, PV *t2, PV *value, int div) {
  need_fn(L, at, div ? "addcdiv" : "addcmul");
  if (div && !ir_dtype_is_float(promote(t1, t2)))
    lower_error(L, at, "addcdiv: integer division with addcdiv is no longer supported");
  /* integer tensors take value converted to their type (PyTorch: 3.14 -> 3) */
  if (value && value->k == PV_FLOAT && !ir_dtype_is_float(promote2(promote(x, t1), promote(t1, t2)))) {
    if (!(fabs(value->f) < 9.2e18)) lower_error(L, at, "value %g cannot be converted to an integer", value->f);
    value = pv_int(L, (int64_t)value->f);
  }
  PV *p = value && !(pv_is_num(value) && pv_num(value) == 1) ? t_binary(L, at, OP_MUL, value, t1) : t1;
  return t_binary(L, at, OP_ADD, x, t_binary(L, at, div ? OP_DIV : OP_MUL, p, t2));
}

static PV *squeeze_dims(L *L, Span at, PV *x, const int64_t *dims, int nd, int keepdim) {
  if (keepdim) return x;
  Type t = x->t->type;
  int64_t mask = 0, out[IR_MAX_DIMS];
  if (!nd) mask = ((int64_t)1 << t.ndim) - 1;
  for (int i = 0; i < nd; i++) mask |= (int64_t)1 << t_norm_dim(L, at, dims[i], t.ndim);
  int n = 0;
  for (int i = 0; i < t.ndim; i++)
    if (!((mask >> i) & 1)) out[n++] = t.dims[i];
  return t_reshape(L, at, x, out, n);
}

/* logsumexp over dims: the max (detached, 0 where infinite) shifted out, as PyTorch */
PV *t_logsumexp(L *L, Span at, PV *x, const int64_t *dims, int nd, int keepdim) {
  need_tensor_arg(L, at, x, "logsumexp");
  need_fn(L, at, "logsumexp");
  if (!ir_dtype_is_float(x->t->type.dtype)) x = t_cast(L, at, x, DT_F32);
  if (x->t->type.ndim == 0) return t_wrap(L, t_val(L, at, x));
  PV *m = t_detach(L, at, t_reduce(L, at, IR_REDUCE_MAX, x, dims, nd, 1, 0));
  PV *inf = t_compare(L, at, OP_EQ, t_unary(L, at, IR_ABS, m), pv_float(L, INFINITY));
  m = t_where(L, at, inf, pv_float(L, 0), m);
  PV *s = t_reduce(L, at, IR_REDUCE_SUM, t_unary(L, at, IR_EXP, t_binary(L, at, OP_SUB, x, m)), dims, nd, 1, 0);
  PV *r = t_binary(L, at, OP_ADD, t_unary(L, at, IR_LOG, s), m);
  return squeeze_dims(L, at, r, dims, nd, keepdim);
}

/* root(s) (sqrt, or s ** e) with PyTorch's gradient at s == 0: the norm and
 * std backward formulas mask the result's zeros, giving 0 where the chain rule
 * would give 0 * inf. The double where keeps both the value (0) and the
 * derivative of the selected branch (0) finite. */
static PV *root0(L *L, Span at, PV *s, double e) {
  PV *z = t_compare(L, at, OP_EQ, s, pv_int(L, 0));
  PV *safe = t_where(L, at, z, pv_float(L, 1), s);
  PV *r = e == 0.5 ? t_unary(L, at, IR_SQRT, safe) : t_binary(L, at, OP_POW, safe, pv_float(L, e));
  return t_where(L, at, z, pv_float(L, 0), r);
}

/* var / std over dims with Bessel's correction: sum((x - mean)^2) / (N - correction) */
PV *t_var(L *L, Span at, PV *x, const int64_t *dims, int nd, double correction, int keepdim, int is_std) {
  const char *name = is_std ? "std" : "var";
  need_tensor_arg(L, at, x, name);
  need_fn(L, at, name);
  Type t = x->t->type;
  if (!ir_dtype_is_float(t.dtype)) lower_error(L, at, "%s only supports floating-point dtypes", name);
  int64_t count = 1, mask = 0;
  if (!nd) mask = t.ndim ? ((int64_t)1 << t.ndim) - 1 : 0;
  for (int i = 0; i < nd; i++) mask |= (int64_t)1 << t_norm_dim(L, at, dims[i], t.ndim);
  for (int i = 0; i < t.ndim; i++)
    if ((mask >> i) & 1) count *= t.dims[i];
  PV *mean = t_reduce(L, at, IR_REDUCE_SUM, x, dims, nd, 1, 1);
  if (t.ndim == 0) mean = x;
  PV *dev = t_binary(L, at, OP_SUB, x, mean);
  PV *ss = t.ndim ? t_reduce(L, at, IR_REDUCE_SUM, t_binary(L, at, OP_MUL, dev, dev), dims, nd, 1, 0)
                  : t_binary(L, at, OP_MUL, dev, dev);
  double den = (double)count - correction;
  PV *v = t_binary(L, at, OP_DIV, ss, pv_float(L, den > 0 ? den : 0));
  if (is_std) v = root0(L, at, v, 0.5);
  return t.ndim ? squeeze_dims(L, at, v, dims, nd, keepdim) : v;
}

/* vector norms over dims: p = 2 (and 'fro'), 1, inf, -inf, 0, other p */
PV *t_norm(L *L, Span at, PV *x, double p, const int64_t *dims, int nd, int keepdim) {
  need_tensor_arg(L, at, x, "norm");
  need_fn(L, at, "norm");
  if (!ir_dtype_is_float(x->t->type.dtype)) lower_error(L, at, "norm: the input dtype should be floating point");
  if (x->t->type.ndim == 0) {
    if (p == 0) return t_cast(L, at, t_compare(L, at, OP_NE, x, pv_int(L, 0)), x->t->type.dtype);
    return t_unary(L, at, IR_ABS, x);
  }
  PV *r;
  if (p == 2) {
    r = root0(L, at, t_reduce(L, at, IR_REDUCE_SUM, t_binary(L, at, OP_MUL, x, x), dims, nd, keepdim, 0), 0.5);
  } else if (p == 1) {
    r = t_reduce(L, at, IR_REDUCE_SUM, t_unary(L, at, IR_ABS, x), dims, nd, keepdim, 0);
  } else if (isinf(p)) {
    PV *ax = t_unary(L, at, IR_ABS, x);
    r = p > 0 ? t_reduce(L, at, IR_REDUCE_MAX, ax, dims, nd, keepdim, 0) : t_amin(L, at, ax, dims, nd, keepdim);
  } else if (p == 0) {
    PV *nz = t_cast(L, at, t_compare(L, at, OP_NE, x, pv_int(L, 0)), x->t->type.dtype);
    r = t_reduce(L, at, IR_REDUCE_SUM, nz, dims, nd, keepdim, 0);
  } else {
    PV *s = t_reduce(L, at, IR_REDUCE_SUM, t_binary(L, at, OP_POW, t_unary(L, at, IR_ABS, x), pv_float(L, p)), dims, nd,
                     keepdim, 0);
    r = root0(L, at, s, 1 / p);
  }
  return r;
}

/* flip along dims: a gather with a reversed iota per axis */
PV *t_flip(L *L, Span at, PV *x, const int64_t *dims, int nd) {
  need_tensor_arg(L, at, x, "flip");
  need_fn(L, at, "flip");
  Type t = x->t->type;
  int64_t seen = 0;
  for (int i = 0; i < nd; i++) {
    int64_t d = t_norm_dim(L, at, dims[i], t.ndim);
    if ((seen >> d) & 1) lower_error(L, at, "flip: dim %lld appears multiple times in the list of dims", (long long)d);
    seen |= (int64_t)1 << d;
    if (t.ndim == 0 || t.dims[d] == 1) continue;
    int64_t attr[2] = {t.dims[d] - 1, -1};
    Type it = {.dtype = DT_I64, .ndim = 1, .dims = {t.dims[d]}};
    ValId iv = emit(L, at, IR_IOTA, NULL, 0, it, attr, 2, "reversed");
    it = t;
    it.dtype = DT_I64;
    for (int k = 0; k < t.ndim; k++) it.dims[k] = k == d ? t.dims[d] : 1;
    iv = emit(L, at, IR_RESHAPE, &iv, 1, it, NULL, 0, "reversed");
    ValId args[2] = {t_val(L, at, x), iv};
    x = t_wrap(L, emit(L, at, IR_GATHER, args, 2, t, &d, 1, "flip"));
  }
  return x;
}

/* roll by shifts along dims (None: of the flattened tensor): two slices concatenated */
PV *t_roll(L *L, Span at, PV *x, const int64_t *shifts, int ns, const int64_t *dims, int nd) {
  need_tensor_arg(L, at, x, "roll");
  need_fn(L, at, "roll");
  Type t = x->t->type;
  if (nd == 0) {
    if (ns != 1) lower_error(L, at, "roll: shifts must be a single int when dims is None");
    int64_t n = ir_numel(&t), z = 0;
    PV *f = t_reshape(L, at, x, &n, 1);
    PV *r = t_roll(L, at, f, shifts, 1, &z, 1);
    return t_reshape(L, at, r, t.dims, t.ndim);
  }
  if (ns != nd) lower_error(L, at, "roll: shifts and dimensions must align (%d shifts, %d dims)", ns, nd);
  for (int i = 0; i < nd; i++) {
    int64_t d = t_norm_dim(L, at, dims[i], t.ndim), n = t.ndim ? t.dims[d] : 1;
    int64_t s = ((shifts[i] % n) + n) % n;
    if (!s) continue;
    PV *parts[2] = {t_slice(L, at, x, (int)d, n - s, n, 1), t_slice(L, at, x, (int)d, 0, n - s, 1)};
    x = t_concat(L, at, parts, 2, d);
  }
  return x;
}

/* repeat_interleave(x, r, dim): each element r times along dim ([.., n, 1, ..]
 * broadcast to [.., n, r, ..], merged); dim None: of the flattened tensor */
PV *t_repeat_interleave(L *L, Span at, PV *x, int64_t r, PV *dim) {
  need_tensor_arg(L, at, x, "repeat_interleave");
  need_fn(L, at, "repeat_interleave");
  if (r < 0) lower_error(L, at, "repeat_interleave: repeats can not be negative");
  if (r == 0) lower_error(L, at, "repeat_interleave with 0 repeats would give an empty tensor, which ctc does not support");
  Type t = x->t->type;
  if (!dim || dim->k == PV_NONE) {
    int64_t n = ir_numel(&t);
    x = t_reshape(L, at, x, &n, 1);
    t = x->t->type;
  }
  int64_t d = dim && dim->k != PV_NONE ? t_norm_dim(L, at, arg_int(L, at, dim, "dim"), t.ndim) : 0;
  if (t.ndim == 0) {
    int64_t one = 1;
    x = t_reshape(L, at, x, &one, 1);
    t = x->t->type;
  }
  if (t.ndim + 1 > IR_MAX_DIMS) lower_error(L, at, "repeat_interleave of a tensor of %d dimensions is not supported", t.ndim);
  Type e = t;
  e.ndim = t.ndim + 1;
  for (int k = t.ndim; k > d + 1; k--) e.dims[k] = e.dims[k - 1];
  e.dims[d + 1] = 1;
  ValId v = t_val(L, at, x);
  v = emit(L, at, IR_RESHAPE, &v, 1, e, NULL, 0, "x");
  e.dims[d + 1] = r;
  v = emit(L, at, IR_BROADCAST, &v, 1, e, NULL, 0, "repeat_interleave");
  Type out = t;
  out.dims[d] = ck_mul(L, at, t.dims[d], r);
  return t_wrap(L, emit(L, at, IR_RESHAPE, &v, 1, out, NULL, 0, "repeat_interleave"));
}

/* torch.take(x, index): the flattened x gathered (negative indices count from the end) */
PV *t_take(L *L, Span at, PV *x, PV *index) {
  need_tensor_arg(L, at, x, "take");
  need_fn(L, at, "take");
  Type t = x->t->type;
  int64_t n = ir_numel(&t);
  PV *f = t_reshape(L, at, x, &n, 1);
  ValId iv = index_val(L, at, index, "take");
  Type it = *ir_type(L->T->fn, iv), flat = it;
  flat.ndim = 1;
  flat.dims[0] = ir_numel(&it);
  PV *i = t_wrap(L, emit(L, at, IR_RESHAPE, &iv, 1, flat, NULL, 0, "index"));
  i = t_where(L, at, t_compare(L, at, OP_LT, i, pv_int(L, 0)), t_binary(L, at, OP_ADD, i, pv_int(L, n)), i);
  PV *g = t_gather(L, at, f, 0, i);
  return t_reshape(L, at, g, it.dims, it.ndim);
}

/* x.index_add(dim, index, source, alpha): scatter_add with the 1-D index along dim */
PV *t_index_add(L *L, Span at, PV *x, int64_t dim, PV *index, PV *src, PV *alpha) {
  need_tensor_arg(L, at, x, "index_add");
  need_tensor_arg(L, at, src, "index_add");
  need_fn(L, at, "index_add");
  ValId iv = index_val(L, at, index, "index_add");
  Type t = x->t->type, st = src->t->type, it = *ir_type(L->T->fn, iv);
  if (it.ndim > 1) lower_error(L, at, "index_add: the index must be 0-D or 1-D");
  if (t.dtype != st.dtype) lower_error(L, at, "index_add: self (%s) and source (%s) must have the same dtype",
                                       ir_dtype_name(t.dtype), ir_dtype_name(st.dtype));
  if (t.ndim == 0) lower_error(L, at, "index_add on 0-d tensors is not supported");
  int64_t d = t_norm_dim(L, at, dim, t.ndim), k = ir_numel(&it);
  Type want = t;
  want.dims[d] = k;
  if (!ir_type_eq(&want, &st))
    lower_error(L, at, "index_add: source %s must have the shape of self %s with dimension %lld of size %lld",
                shape_str(L, &st), shape_str(L, &t), (long long)d, (long long)k);
  if (alpha && !(pv_is_num(alpha) && pv_num(alpha) == 1)) src = t_binary(L, at, OP_MUL, src, alpha);
  Type i2 = want;
  i2.dtype = DT_I64;
  for (int i = 0; i < t.ndim; i++) i2.dims[i] = i == d ? k : 1;
  iv = emit(L, at, IR_RESHAPE, &iv, 1, i2, NULL, 0, "index");
  ValId args[3] = {t_val(L, at, x), iv, t_val(L, at, src)};
  return t_wrap(L, emit(L, at, IR_SCATTER_ADD, args, 3, t, &d, 1, "index_add"));
}

/* isnan / isinf / isposinf / isneginf / isfinite by comparisons */
PV *t_isclass(L *L, Span at, int kind, PV *x) {
  need_tensor_arg(L, at, x, "isnan");
  need_fn(L, at, "isnan");
  switch (kind) {
  case 'n': return t_compare(L, at, OP_NE, x, x);
  case 'i': return t_compare(L, at, OP_EQ, t_unary(L, at, IR_ABS, x), pv_float(L, INFINITY));
  case '+': return t_compare(L, at, OP_EQ, x, pv_float(L, INFINITY));
  case '-': return t_compare(L, at, OP_EQ, x, pv_float(L, -INFINITY));
  default:
    if (!ir_dtype_is_float(x->t->type.dtype)) return t_compare(L, at, OP_EQ, x, x);
    return t_compare(L, at, OP_LT, t_unary(L, at, IR_ABS, x), pv_float(L, INFINITY));
  }
}

/* nan_to_num: NaN -> nan, +-inf -> posinf / neginf (default: the dtype's largest finite values) */
PV *t_nan_to_num(L *L, Span at, PV *x, PV *nan, PV *posinf, PV *neginf) {
  need_tensor_arg(L, at, x, "nan_to_num");
  DType dt = x->t->type.dtype;
  if (!ir_dtype_is_float(dt)) return t_wrap(L, t_val(L, at, x));
  double big = dt == DT_F32 ? 3.4028234663852886e38 : 1.7976931348623157e308;
  PV *pn = nan && nan->k != PV_NONE ? nan : pv_float(L, 0);
  PV *pp = posinf && posinf->k != PV_NONE ? posinf : pv_float(L, big);
  PV *ng = neginf && neginf->k != PV_NONE ? neginf : pv_float(L, -big);
  PV *r = t_where(L, at, t_isclass(L, at, '+', x), pp, x);
  r = t_where(L, at, t_isclass(L, at, '-', x), ng, r);
  return t_where(L, at, t_isclass(L, at, 'n', x), pn, r);
}

/* any / all over dims: of x != 0, bool results */
PV *t_anyall(L *L, Span at, PV *x, const int64_t *dims, int nd, int keepdim, int all) {
  need_tensor_arg(L, at, x, all ? "all" : "any");
  PV *nz = t_cast(L, at, t_compare(L, at, OP_NE, x, pv_int(L, 0)), DT_I64);
  PV *r = all ? t_amin(L, at, nz, dims, nd, keepdim) : t_reduce(L, at, IR_REDUCE_MAX, nz, dims, nd, keepdim, 0);
  return t_cast(L, at, r, DT_BOOL);
}

/* fmax / fmin: C's fmax (a NaN loses to a number); ties go to the first operand */
PV *t_fmaxmin(L *L, Span at, PV *a, PV *b, int is_min) {
  need_fn(L, at, is_min ? "fmin" : "fmax");
  if (a->k != PV_TENSOR || b->k != PV_TENSOR) lower_error(L, at, "%s needs two tensors", is_min ? "fmin" : "fmax");
  PV *c = t_compare(L, at, is_min ? OP_LE : OP_GE, a, b);
  if (ir_dtype_is_float(promote(a, b))) c = t_bitwise(L, at, IR_BIT_OR, c, t_compare(L, at, OP_NE, b, b));
  return t_where(L, at, c, a, b);
}

/* logaddexp (base e or 2): PyTorch's max + log1p(exp(-|a - b|)), a where both are the same infinity */
PV *t_logaddexp(L *L, Span at, PV *a, PV *b, int base2) {
  need_fn(L, at, "logaddexp");
  PV *m = t_minmax(L, at, IR_MAX, a, b);
  PV *d = t_unary(L, at, IR_ABS, t_binary(L, at, OP_SUB, a, b));
  PV *r;
  if (base2) {
    /* m + log1p(2^-|a-b|) / ln 2 */
    r = t_binary(L, at, OP_ADD, m, t_binary(L, at, OP_DIV, t_unary(L, at, IR_LOG1P, t_unary(L, at, IR_EXP2, t_unary(L, at, IR_NEG, d))),
                                           pv_float(L, M_LN2)));
  } else {
    r = t_binary(L, at, OP_ADD, m, t_unary(L, at, IR_LOG1P, t_unary(L, at, IR_EXP, t_unary(L, at, IR_NEG, d))));
  }
  PV *same_inf = t_bitwise(L, at, IR_BIT_AND, t_isclass(L, at, 'i', a), t_compare(L, at, OP_EQ, a, b));
  return t_where(L, at, same_inf, a, r);
}

/* xlogy(x, y): 0 where x == 0 (unless y is NaN), else x * log(y) */
PV *t_xlogy(L *L, Span at, PV *x, PV *y) {
  need_fn(L, at, "xlogy");
  if (x->k != PV_TENSOR || y->k != PV_TENSOR) lower_error(L, at, "xlogy needs two tensors");
  DType dt = promote(x, y);
  if (!ir_dtype_is_float(dt)) dt = DT_F32;
  PV *xf = t_cast(L, at, x, dt), *yf = t_cast(L, at, y, dt);
  PV *r = t_binary(L, at, OP_MUL, xf, t_unary(L, at, IR_LOG, yf));
  r = t_where(L, at, t_compare(L, at, OP_EQ, xf, pv_int(L, 0)), pv_float(L, 0), r);
  return t_where(L, at, t_compare(L, at, OP_NE, yf, yf), pv_float(L, NAN), r);
}
