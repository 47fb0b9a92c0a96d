/* complex.c - complex64 tensors, as rotary embeddings use them (Meta's llama:
 * torch.polar, view_as_complex, a complex product, view_as_real).
 *
 * A complex tensor of shape S is a float32 tensor of shape S + [2] (real and
 * imaginary parts, PyTorch's view_as_real layout) whose Tensor has `cplx` set.
 * view_as_complex / view_as_real are then the same values re-tagged, and every
 * complex operation is a small formula of real operations (tensor.c's t_*), so
 * compile-time evaluation, staging and autograd need nothing of their own: the
 * gradient of a real loss through view_as_complex ... view_as_real is the
 * gradient of the real formula, which is what PyTorch's complex autograd gives.
 *
 * Every torch row called with a complex operand (a tensor, or the dtype
 * torch.complex64) comes here first (registry.c: row_call; host.c for operators,
 * indexing and attributes): the rows listed in cx_call are implemented, any other
 * is refused by name, so a complex tensor is never computed on as if it were its
 * real storage. */
#include <string.h>
#include "torch_int.h"

int cx_is(const PV *v) { return v && v->k == PV_TENSOR && v->t->cplx; }

static int cx_dtype(const PV *v) { return v && v->k == PV_DTYPE && v->dt == DT_COMPLEX64; }

static int cx_any1(const PV *v) {
  if (cx_is(v) || cx_dtype(v) || (v && v->k == PV_COMPLEX)) return 1;
  if (v && (v->k == PV_LIST || v->k == PV_TUPLE))
    for (int i = 0; i < v->n; i++)
      if (cx_is(v->items[i])) return 1;
  return 0;
}

int cx_operands(const PV *self, const Args *A) {
  if (cx_any1(self)) return 1;
  for (int i = 0; i < A->nargs; i++)
    if (cx_any1(A->args[i])) return 1;
  for (int i = 0; i < A->nkw; i++)
    if (cx_any1(A->kwvals[i])) return 1;
  return 0;
}

CTC_NORETURN void cx_refuse(L *L, Span at, const char *what) {
  lower_error(L, at, "%s on complex tensors is not supported by ctc (complex tensors support torch.polar, "
                     "torch.complex, view_as_complex, view_as_real, + - * /, .real, .imag, abs, angle, conj, exp, "
                     "view/reshape/unsqueeze, indexing and slicing)", what);
}

/* The real storage of complex c: shape S + [2], float32; a view of c. */
static PV *storage(L *L, PV *c) {
  Tensor *t = arena_alloc(L->a, sizeof *t);
  *t = *c->t;
  t->cplx = 0;
  return t_mark_view(L, c, pv_tensor(L, t));
}

/* The float32 tensor s of shape S + [2] as a complex tensor of shape S. */
static PV *tag(L *L, PV *s) {
  Tensor *t = arena_alloc(L->a, sizeof *t);
  *t = *s->t;
  t->cplx = 1;
  return pv_tensor(L, t);
}

/* The logical (complex) type of c: its storage's without the trailing 2. */
static Type ltype(PV *c) {
  Type t = c->t->type;
  t.ndim--;
  return t;
}

static PV *lreshape(L *L, Span at, PV *x, Type t) { return t_reshape(L, at, x, t.dims, t.ndim); }

/* The real (k = 0) or imaginary (k = 1) part of c, of c's logical shape. */
static PV *part(L *L, Span at, PV *c, int k) {
  PV *s = storage(L, c);
  int last = s->t->type.ndim - 1;
  return lreshape(L, at, t_slice(L, at, s, last, k, k + 1, 1), ltype(c));
}

/* re + i im (real float tensors, broadcast to one shape) as a complex tensor. */
static PV *make(L *L, Span at, PV *re, PV *im) {
  Type a = re->t->type, b = im->t->type, r;
  if (a.dtype != DT_F32 || b.dtype != DT_F32)
    lower_error(L, at, "complex tensors need float32 parts (complex64); got %s and %s: complex128 is not supported "
                       "by ctc", ir_dtype_name(a.dtype), ir_dtype_name(b.dtype));
  if (ir_broadcast_shapes(&a, &b, &r) < 0)
    lower_error(L, at, "the real part's shape %s and the imaginary part's %s do not broadcast", shape_str(L, &a),
                shape_str(L, &b));
  if (r.ndim + 1 > IR_MAX_DIMS) lower_error(L, at, "too many dimensions for a complex tensor (%d)", r.ndim);
  PV *xs[2] = {re, im};
  Type u = r;
  u.dims[u.ndim++] = 1;
  for (int k = 0; k < 2; k++) {
    if (!ir_type_eq(&xs[k]->t->type, &r)) xs[k] = t_expand_to(L, at, xs[k], r);
    xs[k] = lreshape(L, at, xs[k], u);
  }
  return tag(L, t_concat(L, at, xs, 2, -1));
}

/* A real operand of a complex operation: a tensor (float32, or an integer or bool
 * one cast to it), or a number as a float32 0-d tensor. */
static PV *real_operand(L *L, Span at, PV *x, const char *what) {
  if (pv_is_num(x)) return t_const_tensor(L, at, (Type){DT_F32, 0, {0}}, pv_num(x));
  if (x->k != PV_TENSOR) lower_error(L, at, "%s: expected a tensor or a number, got '%s'", what, pv_kind_name(x));
  if (x->t->type.dtype == DT_F64)
    lower_error(L, at, "a complex64 tensor %s a float64 tensor is complex128 in PyTorch, which ctc does not support; "
                       "cast it to float32", what);
  if (x->t->type.dtype != DT_F32) x = t_cast(L, at, x, DT_F32);
  return x;
}

static PV *zeros_as(L *L, Span at, PV *x) { return t_const_tensor(L, at, x->t->type, 0.0); }

/* A Python complex number (1j) as a 0-d complex64 tensor. */
static PV *cx_scalar(L *L, Span at, PV *c) {
  Type t = {DT_F32, 0, {0}};
  return make(L, at, t_const_tensor(L, at, t, c->f), t_const_tensor(L, at, t, c->fi));
}

/* a, b: complex or real (tensors, numbers or Python complex numbers); op OP_ADD, OP_SUB,
 * OP_MUL, OP_DIV. */
PV *cx_binary(L *L, Span at, int op, PV *a, PV *b) {
  const char *sp = fe_op_spelling(op);
  if (a->k == PV_COMPLEX && b->k != PV_TENSOR) return py_complex_binop(L, at, op, a, b);   /* two numbers */
  if (b->k == PV_COMPLEX && a->k != PV_TENSOR) return py_complex_binop(L, at, op, a, b);
  if (a->k == PV_COMPLEX) a = cx_scalar(L, at, a);
  if (b->k == PV_COMPLEX) b = cx_scalar(L, at, b);
  if (op != OP_ADD && op != OP_SUB && op != OP_MUL && op != OP_DIV) cx_refuse(L, at, arena_printf(L->a, "'%s'", sp));
  int ca = cx_is(a), cb = cx_is(b);
  if (!ca) a = real_operand(L, at, a, sp);
  if (!cb) b = real_operand(L, at, b, sp);
  if (op == OP_MUL && !(ca && cb)) {   /* complex * real: both parts scaled */
    PV *c = ca ? a : b, *r = ca ? b : a;
    return make(L, at, t_binary(L, at, OP_MUL, part(L, at, c, 0), r), t_binary(L, at, OP_MUL, part(L, at, c, 1), r));
  }
  if (op == OP_DIV && !cb)
    return make(L, at, t_binary(L, at, OP_DIV, part(L, at, a, 0), b), t_binary(L, at, OP_DIV, part(L, at, a, 1), b));
  PV *ar = ca ? part(L, at, a, 0) : a, *ai = ca ? part(L, at, a, 1) : zeros_as(L, at, a);
  PV *br = cb ? part(L, at, b, 0) : b, *bi = cb ? part(L, at, b, 1) : zeros_as(L, at, b);
  if (op == OP_ADD || op == OP_SUB) return make(L, at, t_binary(L, at, op, ar, br), t_binary(L, at, op, ai, bi));
  if (op == OP_MUL)   /* (ar + i ai)(br + i bi) */
    return make(L, at, t_binary(L, at, OP_SUB, t_binary(L, at, OP_MUL, ar, br), t_binary(L, at, OP_MUL, ai, bi)),
                t_binary(L, at, OP_ADD, t_binary(L, at, OP_MUL, ar, bi), t_binary(L, at, OP_MUL, ai, br)));
  /* (ar + i ai) / (br + i bi) = ((ar br + ai bi) + i (ai br - ar bi)) / (br^2 + bi^2) */
  PV *den = t_binary(L, at, OP_ADD, t_binary(L, at, OP_MUL, br, br), t_binary(L, at, OP_MUL, bi, bi));
  PV *re = t_binary(L, at, OP_ADD, t_binary(L, at, OP_MUL, ar, br), t_binary(L, at, OP_MUL, ai, bi));
  PV *im = t_binary(L, at, OP_SUB, t_binary(L, at, OP_MUL, ai, br), t_binary(L, at, OP_MUL, ar, bi));
  return make(L, at, t_binary(L, at, OP_DIV, re, den), t_binary(L, at, OP_DIV, im, den));
}

PV *cx_unary(L *L, Span at, int op, PV *c) {
  if (op == OP_POS) return c;
  if (op == OP_NEG) return tag(L, t_unary(L, at, IR_NEG, storage(L, c)));
  cx_refuse(L, at, "'~'");
}

/* |c| = sqrt(re^2 + im^2); at c = 0 the value and PyTorch's gradient (sgn(0) = 0) are 0,
 * so the sqrt (and angle's atan2) read a safe stand-in there and the result is selected */
static PV *cx_abs(L *L, Span at, PV *c) {
  PV *re = part(L, at, c, 0), *im = part(L, at, c, 1);
  PV *r2 = t_binary(L, at, OP_ADD, t_binary(L, at, OP_MUL, re, re), t_binary(L, at, OP_MUL, im, im));
  PV *nz = t_compare(L, at, OP_GT, r2, pv_float(L, 0.0));
  return t_where(L, at, nz, t_unary(L, at, IR_SQRT, t_where(L, at, nz, r2, pv_float(L, 1.0))), pv_float(L, 0.0));
}

static PV *cx_angle(L *L, Span at, PV *c) {
  PV *re = part(L, at, c, 0), *im = part(L, at, c, 1);
  PV *nz = t_logical(L, at, '|', t_compare(L, at, OP_NE, re, pv_float(L, 0.0)), t_compare(L, at, OP_NE, im, pv_float(L, 0.0)));
  PV *a = t_float_binary(L, at, IR_ATAN2, t_where(L, at, nz, im, pv_float(L, 0.0)), t_where(L, at, nz, re, pv_float(L, 1.0)));
  PV *zero = t_float_binary(L, at, IR_ATAN2, im, re);   /* 0 or +-pi by the zeros' signs, as PyTorch */
  return t_where(L, at, nz, a, L->T->fn ? t_detach(L, at, zero) : zero);
}

/* exp(re + i im) = exp(re) (cos im + i sin im) */
static PV *cx_exp(L *L, Span at, PV *c) {
  PV *m = t_unary(L, at, IR_EXP, part(L, at, c, 0)), *im = part(L, at, c, 1);
  return make(L, at, t_binary(L, at, OP_MUL, m, t_unary(L, at, IR_COS, im)), t_binary(L, at, OP_MUL, m, t_unary(L, at, IR_SIN, im)));
}

/* Shape arguments of view/reshape (ints, or one tuple/list of them). */
static int shape_args(L *L, Span at, Args *A, int64_t *dims) {
  if (A->nkw) lower_error(L, at, "view/reshape of a complex tensor takes the shape only");
  if (A->nargs == 1 && (A->args[0]->k == PV_TUPLE || A->args[0]->k == PV_LIST))
    return arg_ints(L, at, A->args[0], dims, IR_MAX_DIMS - 1, "shape");
  if (A->nargs > IR_MAX_DIMS - 1) lower_error(L, at, "too many dimensions for a complex tensor (%d)", A->nargs);
  for (int i = 0; i < A->nargs; i++) dims[i] = arg_int(L, at, A->args[i], "shape");
  return A->nargs;
}

/* c[key]: the storage indexed by key with a trailing `:` (which keeps the parts
 * whatever the key holds: ints, slices, None, an ellipsis, index tensors). */
PV *cx_index(L *L, Span at, PV *c, PV *key) {
  int n = key->k == PV_TUPLE ? key->n : 1, used = 0;
  PV **items = key->k == PV_TUPLE ? key->items : &key;
  PV **k2 = arena_alloc(L->a, sizeof(PV *) * (size_t)(n + 1));
  for (int i = 0; i < n; i++) {
    k2[i] = items[i];
    if (cx_is(items[i])) cx_refuse(L, at, "indexing with");
    if (items[i]->k != PV_NONE && items[i]->k != PV_ELLIPSIS)
      used += items[i]->k == PV_TENSOR && items[i]->t->type.dtype == DT_BOOL ? items[i]->t->type.ndim : 1;
  }
  if (used > ltype(c).ndim)
    lower_error(L, at, "too many indices for tensor of dimension %d (a complex tensor)", ltype(c).ndim);
  PV *all = pv_new(L, PV_SLICE);
  all->items = arena_alloc(L->a, sizeof(PV *) * 3);
  all->items[0] = all->items[1] = all->items[2] = pv_none(L);
  all->n = 3;
  k2[n] = all;
  return t_mark_view(L, c, tag(L, t_index(L, at, storage(L, c), pv_tuple(L, k2, n + 1))));
}

PV *cx_getattr(L *L, Span at, PV *c, const char *name) {
  Type t = ltype(c);
  if (!strcmp(name, "shape")) {
    PV *r = pv_tuple(L, NULL, 0);
    for (int i = 0; i < t.ndim; i++) pv_list_append(L, r, pv_int(L, t.dims[i]));
    return r;
  }
  if (!strcmp(name, "ndim")) return pv_int(L, t.ndim);
  if (!strcmp(name, "dtype")) return pv_dtype(L, DT_COMPLEX64);
  if (!strcmp(name, "real") || !strcmp(name, "imag")) return t_mark_view(L, c, part(L, at, c, name[0] == 'i'));
  static const char *const props[] = {"device", "is_cuda", "is_mps", "is_xpu", "requires_grad"};
  for (size_t i = 0; i < sizeof props / sizeof *props; i++)
    if (!strcmp(name, props[i])) return tensor_getattr(L, at, storage(L, c), name);
  PV *m = bi_lookup(L, NS_TENSOR, name, c);   /* a method: its call comes to cx_call */
  if (!m) cx_refuse(L, at, arena_printf(L->a, "the attribute '%s'", name));
  return m;
}

PV *cx_math(L *L, Span at, const char *f, PV *c) {
  if (!strcmp(f, "abs")) return cx_abs(L, at, c);
  if (!strcmp(f, "len")) return pv_int(L, ltype(c).ndim ? ltype(c).dims[0] : 0);
  cx_refuse(L, at, arena_printf(L->a, "%s()", f));
}

/* The name a row was called by, for messages: torch.mul, Tensor.sum ... */
static const char *row_name(L *L, PV *fn) {
  const char *n = bi_rows[fn->bi].name;
  if (fn->self && fn->self->k == PV_TENSOR) return arena_printf(L->a, "Tensor.%s", n);
  if (fn->self) return arena_printf(L->a, "'%s'", n);
  if (!(fn->i & NS_TORCH) && (fn->i & NS_F)) return arena_printf(L->a, "torch.nn.functional.%s", n);
  if (!(fn->i & NS_TORCH) && fn->i) return arena_printf(L->a, "'%s'", n);
  return arena_printf(L->a, "torch.%s", n);
}

/* The row's tensor argument: the receiver of a method, else the first argument. */
static PV *subject(PV *fn, Args *A) { return fn->self ? fn->self : A->nargs ? A->args[0] : NULL; }

PV *cx_call(L *L, PV *fn, Args *A) {
  Span at = A->at;
  PV *x = subject(fn, A), *a[3] = {0};
  if (bi_rows[fn->bi].call == bi_complex) return bi_complex(L, fn, A);
  switch (fn->bi) {
  case BI_T_ADD: case BI_T_SUB: case BI_T_MUL: case BI_T_DIV: {
    if (fn->self) bind_args(L, A, "other", a + 1), a[0] = fn->self;
    else bind_args(L, A, "input,other", a);
    int op = fn->bi == BI_T_ADD ? OP_ADD : fn->bi == BI_T_SUB ? OP_SUB : fn->bi == BI_T_MUL ? OP_MUL : OP_DIV;
    return cx_binary(L, at, op, a[0], a[1]);
  }
  case BI_T_NEG: return cx_unary(L, at, OP_NEG, x);
  case BI_T_ABS: if (cx_is(x) && A->nargs == !fn->self && !A->nkw) return cx_abs(L, at, x); break;
  case BI_T_EXP: if (cx_is(x) && A->nargs == !fn->self && !A->nkw) return cx_exp(L, at, x); break;
  case BI_T_DIM: if (cx_is(x) && !A->nargs && !A->nkw) return pv_int(L, ltype(x).ndim); break;
  case BI_T_NUMEL: if (cx_is(x) && A->nargs == !fn->self && !A->nkw) return pv_int(L, ir_numel(&x->t->type) / 2); break;
  case BI_T_SIZE:
    if (cx_is(x) && !A->nkw && A->nargs <= 1) {
      PV *shape = cx_getattr(L, at, x, "shape");
      if (!A->nargs) return shape;
      return shape->items[t_norm_dim(L, at, arg_int(L, at, A->args[0], "dim"), ltype(x).ndim)];
    }
    break;
  case BI_T_VIEW: case BI_T_RESHAPE: {
    if (!cx_is(x) || (!fn->self && (A->nargs != 2 || A->nkw))) break;
    Args B = *A;
    if (!fn->self) B.args++, B.nargs--;   /* torch.reshape(c, shape) */
    int64_t dims[IR_MAX_DIMS];
    int n = shape_args(L, at, &B, dims);
    dims[n++] = 2;
    return t_mark_view(L, x, tag(L, t_reshape(L, at, storage(L, x), dims, n)));
  }
  case BI_T_UNSQUEEZE: {
    if (!cx_is(x)) break;
    if (fn->self) bind_args(L, A, "dim", a + 1);
    else bind_args(L, A, "input,dim", a);
    Type t = ltype(x), u = t;
    int64_t d = t_norm_dim(L, at, arg_int(L, at, a[1], "dim"), t.ndim + 1);
    for (int i = t.ndim; i > d; i--) u.dims[i] = u.dims[i - 1];
    u.dims[d] = 1;
    u.ndim++;
    u.dims[u.ndim++] = 2;
    return t_mark_view(L, x, tag(L, lreshape(L, at, storage(L, x), u)));
  }
  case BI_T_TO: case BI_T_CUDA: case BI_T_CPU: case BI_T_CONTIGUOUS: {
    /* devices are ctc's choice; the only dtype a complex tensor has is complex64,
     * and a real tensor .to(torch.complex64) gets a zero imaginary part */
    if (!fn->self) break;
    for (int i = 0; i < A->nargs + A->nkw; i++) {
      PV *v = i < A->nargs ? A->args[i] : A->kwvals[i - A->nargs];
      if (v->k == PV_DTYPE && v->dt != DT_COMPLEX64) cx_refuse(L, at, arena_printf(L->a, "Tensor.to(%s)", L->host->repr(L, at, v)));
      if (v->k == PV_TENSOR) cx_refuse(L, at, "Tensor.to(other)");
    }
    if (cx_is(x)) return x;
    if (x->t->type.dtype != DT_F32) x = t_cast(L, at, x, DT_F32);
    return make(L, at, x, zeros_as(L, at, x));
  }
  case BI_T_DETACH: case BI_T_CLONE:
    if (cx_is(x) && A->nargs == !fn->self && !A->nkw) {
      Args B = *A;
      B.nargs = 0;
      PV *f2 = pv_builtin(L, fn->bi, fn->s, fn->self ? storage(L, x) : NULL);
      if (!fn->self) {
        PV *s = storage(L, x);
        B.args = &s, B.nargs = 1;
      }
      return tag(L, bi_rows[fn->bi].call(L, f2, &B));
    }
    break;
  case BI_MOD_REGISTER_BUFFER: {
    /* the storage registered as the buffer (float32 S + [2], as a checkpoint's
     * complex64 entry loads: runtime_min/rt_pt.c), its slot marked complex */
    Args B = *A;
    B.args = arena_alloc(L->a, sizeof(PV *) * (size_t)(A->nargs ? A->nargs : 1));
    B.kwvals = arena_alloc(L->a, sizeof(PV *) * (size_t)(A->nkw ? A->nkw : 1));
    PV *name = NULL;
    for (int i = 0; i < A->nargs; i++) B.args[i] = cx_is(A->args[i]) ? storage(L, A->args[i]) : A->args[i];
    for (int i = 0; i < A->nkw; i++) B.kwvals[i] = cx_is(A->kwvals[i]) ? storage(L, A->kwvals[i]) : A->kwvals[i];
    if (A->nargs) name = A->args[0];
    for (int i = 0; i < A->nkw; i++)
      if (!strcmp(A->kwnames[i], "name")) name = A->kwvals[i];
    bi_rows[fn->bi].call(L, fn, &B);
    PV *buf = name && name->k == PV_STR ? env_get(fn->self->attrs, name->s) : NULL;
    if (!buf || buf->k != PV_TENSOR || !buf->t->slot) BUG("register_buffer of a complex tensor registered no slot");
    buf->t->slot->cplx = 1;
    buf->t->cplx = 1;
    return pv_none(L);
  }
  default: break;
  }
  cx_refuse(L, at, row_name(L, fn));
}

/* The rows of torch.def that make and take apart complex tensors. */
PV *bi_complex(L *L, PV *fn, Args *A) {
  Span at = A->at;
  PV *a[2] = {0};
  switch (fn->bi) {
  case BI_T_POLAR:   /* abs * (cos angle + i sin angle) */
    bind_args(L, A, "abs,angle", a);
    need_tensor_arg(L, at, a[0], "torch.polar");
    need_tensor_arg(L, at, a[1], "torch.polar");
    if (cx_is(a[0]) || cx_is(a[1])) cx_refuse(L, at, "torch.polar");
    if (a[0]->t->type.dtype != DT_F32 || a[1]->t->type.dtype != DT_F32)
      lower_error(L, at, "torch.polar: expected float32 abs and angle (complex64: complex128 is not supported by ctc), "
                         "got %s and %s", ir_dtype_name(a[0]->t->type.dtype), ir_dtype_name(a[1]->t->type.dtype));
    return make(L, at, t_binary(L, at, OP_MUL, a[0], t_unary(L, at, IR_COS, a[1])),
                t_binary(L, at, OP_MUL, a[0], t_unary(L, at, IR_SIN, a[1])));
  case BI_T_COMPLEX:
    bind_args(L, A, "real,imag", a);
    need_tensor_arg(L, at, a[0], "torch.complex");
    need_tensor_arg(L, at, a[1], "torch.complex");
    if (cx_is(a[0]) || cx_is(a[1])) cx_refuse(L, at, "torch.complex");
    if (a[0]->t->type.dtype != a[1]->t->type.dtype)
      lower_error(L, at, "torch.complex: expected both inputs to have the same dtype, got %s and %s",
                  ir_dtype_name(a[0]->t->type.dtype), ir_dtype_name(a[1]->t->type.dtype));
    return make(L, at, a[0], a[1]);
  case BI_T_VIEW_AS_COMPLEX: {
    bind_args(L, A, "input", a);
    need_tensor_arg(L, at, a[0], "torch.view_as_complex");
    if (cx_is(a[0])) cx_refuse(L, at, "torch.view_as_complex");
    Type t = a[0]->t->type;
    if (t.dtype != DT_F32)
      lower_error(L, at, "view_as_complex is only supported for float32 tensors by ctc (complex64), got %s",
                  ir_dtype_name(t.dtype));
    if (t.ndim == 0 || t.dims[t.ndim - 1] != 2)
      lower_error(L, at, "Tensor must have a last dimension of size 2, got shape %s", shape_str(L, &t));
    return t_mark_view(L, a[0], tag(L, a[0]));
  }
  case BI_T_VIEW_AS_REAL:
    bind_args(L, A, "input", a);
    if (!cx_is(a[0])) lower_error(L, at, "view_as_real is only supported for complex tensors");
    return storage(L, a[0]);
  case BI_T_REAL: case BI_T_IMAG: case BI_T_ANGLE: case BI_T_CONJ: case BI_T_CONJ_PHYSICAL: case BI_T_RESOLVE_CONJ:
  case BI_T_IS_COMPLEX: {
    PV *x = fn->self;
    if (!x) {
      bind_args(L, A, "input", a);
      x = a[0];
    } else
      bind_args(L, A, "", a);
    need_tensor_arg(L, at, x, row_name(L, fn));
    if (fn->bi == BI_T_IS_COMPLEX) return pv_bool(L, cx_is(x));
    if (fn->bi == BI_T_RESOLVE_CONJ) return x;
    if (!cx_is(x)) {   /* of a real tensor: PyTorch's real is x, conj x, angle 0 or pi */
      if (fn->bi == BI_T_REAL || fn->bi == BI_T_CONJ || fn->bi == BI_T_CONJ_PHYSICAL) return x;
      if (fn->bi == BI_T_IMAG) lower_error(L, at, "imag is not implemented for tensors with non-complex dtypes.");
      lower_error(L, at, "angle of a real tensor is not supported by ctc (it takes a complex tensor)");
    }
    if (fn->bi == BI_T_REAL || fn->bi == BI_T_IMAG) return t_mark_view(L, x, part(L, at, x, fn->bi == BI_T_IMAG));
    if (fn->bi == BI_T_ANGLE) return cx_angle(L, at, x);
    return make(L, at, part(L, at, x, 0), t_unary(L, at, IR_NEG, part(L, at, x, 1)));
  }
  default: BUG("bi_complex: row %d", fn->bi);
  }
}
