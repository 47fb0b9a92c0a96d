/* torchlib.c - torch.*, torch.nn.functional.*, torch.nn.init.* and Tensor
 * methods: argument handling in PyTorch's spelling, then tensor.c. */
#include <math.h>
#include <string.h>
#include "torch_int.h"

static PV *need_tensor(L *L, Span at, PV *v, const char *what) {
  if (!v || v->k != PV_TENSOR) lower_error(L, at, "%s must be a tensor, got '%s'", what, v ? pv_kind_name(v) : "nothing");
  return v;
}

/* Shape arguments: f(2, 3), f((2, 3)), f([2, 3]), f(torch.Size). */
static int shape_args(L *L, Args *A, int skip, int64_t *dims) {
  int n = A->nargs - skip;
  if (n == 1 && pv_is_seq(A->args[skip])) return arg_ints(L, A->at, A->args[skip], dims, IR_MAX_DIMS, "shape");
  if (n > IR_MAX_DIMS) lower_error(L, A->at, "too many dimensions");
  for (int i = 0; i < n; i++) dims[i] = arg_int(L, A->at, A->args[skip + i], "shape dimension");
  return n;
}

static PV *kw(Args *A, const char *name) {
  for (int i = 0; i < A->nkw; i++)
    if (strcmp(A->kwnames[i], name) == 0) return A->kwvals[i];
  return NULL;
}

/* x.float(), x.to(dtype), x.type_as(y): x itself when the dtype stays (PyTorch
 * returns self, so an in-place update of the result updates x), else a new tensor */
static PV *convert(L *L, Span at, PV *x, DType dt, int copy) {
  return x->t->type.dtype == dt && !copy ? x : t_cast(L, at, x, dt);
}

static DType dtype_kw(L *L, Args *A, DType dflt) {
  PV *d = kw(A, "dtype");
  if (!d || d->k == PV_NONE) return dflt;
  if (d->k != PV_DTYPE) lower_error(L, A->at, "dtype must be a torch dtype");
  return d->dt;
}

/* Keyword arguments that factories accept and ctc ignores (device, layout ...). */
static Args strip_factory_kw(L *L, Args *A) {
  Args B = *A;
  B.kwnames = arena_alloc(L->a, sizeof(char *) * (size_t)(A->nkw + 1));
  B.kwvals = arena_alloc(L->a, sizeof(PV *) * (size_t)(A->nkw + 1));
  B.nkw = 0;
  for (int i = 0; i < A->nkw; i++) {
    const char *k = A->kwnames[i];
    if (!strcmp(k, "dtype") || !strcmp(k, "device") || !strcmp(k, "requires_grad") || !strcmp(k, "layout") ||
        !strcmp(k, "generator") || !strcmp(k, "pin_memory") || !strcmp(k, "memory_format"))
      continue;
    B.kwnames[B.nkw] = k;
    B.kwvals[B.nkw++] = A->kwvals[i];
  }
  return B;
}

static Type type_of(DType dt, int n, const int64_t *dims) {
  Type t = {0};
  t.dtype = dt;
  t.ndim = n;
  for (int i = 0; i < n; i++) t.dims[i] = dims[i];
  return t;
}

/* An int64 tensor's compile-time values are doubles: a Python int beyond 2**53 would be
 * rounded (2**60 + 1 stored as 2**60), so it is refused. */
static void exact_int(L *L, Span at, const PV *v) {
  if (v->k == PV_INT && (v->i > ((int64_t)1 << 53) || v->i < -((int64_t)1 << 53)))
    lower_error(L, at, "torch.tensor(): the integer %lld is too large for ctc (int64 constants are exact only up "
                "to 2**53)", (long long)v->i);
}

/* Compile-time random numbers (torch.randn in __init__ or example_inputs):
 * values only matter for shapes and parameter placeholders. */
static double rnd_uniform(uint64_t *s) {
  *s += 0x9E3779B97F4A7C15ull;
  uint64_t z = *s;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return (double)(z >> 11) / 9007199254740992.0;
}

static PV *factory(L *L, int bi, Args *A0) {
  Args Bq = strip_factory_kw(L, A0);
  Args *A = &Bq;
  int64_t dims[IR_MAX_DIMS];
  PV *a[4];
  switch (bi) {
  case BI_T_ZEROS:
  case BI_T_EMPTY:
  case BI_T_ONES:
  case BI_T_RANDN:
  case BI_T_RAND: {
    if (A->nkw) lower_error(L, A->at, "unexpected keyword argument '%s'", A->kwnames[0]);
    int n = shape_args(L, A, 0, dims);   /* sizes <= 0: t_const_tensor's diagnostic */
    PV *t = t_const_tensor(L, A->at, type_of(dtype_kw(L, A0, DT_F32), n, dims), bi == BI_T_ONES ? 1 : 0);
    if (bi == BI_T_RANDN || bi == BI_T_RAND) {
      if (L->T->fn) return t_random(L, A->at, t->t->type, bi == BI_T_RANDN);   /* the rng.offset stream */
      uint64_t s = 42;
      for (int64_t i = 0; i < ir_numel(&t->t->type); i++) {
        double u = rnd_uniform(&s);
        t->t->data[i] = bi == BI_T_RAND ? u : sqrt(-2 * log(u + 1e-300)) * cos(2 * M_PI * rnd_uniform(&s));
      }
    }
    return t;
  }
  case BI_T_FULL: {
    bind_args(L, A, "size,fill_value", a);
    int n = arg_ints(L, A->at, a[0], dims, IR_MAX_DIMS, "size");
    double v = arg_num(L, A->at, a[1], "fill_value");
    DType dflt = a[1]->k == PV_FLOAT ? DT_F32 : a[1]->k == PV_BOOL ? DT_BOOL : DT_I64;
    return t_const_tensor(L, A->at, type_of(dtype_kw(L, A0, dflt), n, dims), v);
  }
  case BI_T_RANDINT: {
    bind_args(L, A, "low,high=,size=", a);
    int64_t lo = 0, hi;
    PV *size = a[2];
    if (!a[2]) {
      hi = arg_int(L, A->at, a[0], "high");
      size = a[1];
    } else {
      lo = arg_int(L, A->at, a[0], "low");
      hi = arg_int(L, A->at, a[1], "high");
    }
    if (!size) lower_error(L, A->at, "randint() needs a size");
    if (lo >= hi)
      lower_error(L, A->at, "random_ expects 'from' to be less than 'to', but got from=%lld >= to=%lld", (long long)lo,
                  (long long)hi);
    ck_sub(L, A->at, hi, lo); /* the range must fit */
    int n = arg_ints(L, A->at, size, dims, IR_MAX_DIMS, "size");
    PV *t = t_const_tensor(L, A->at, type_of(dtype_kw(L, A0, DT_I64), n, dims), 0);
    uint64_t s = 7;
    for (int64_t i = 0; i < ir_numel(&t->t->type); i++) t->t->data[i] = lo + floor(rnd_uniform(&s) * (double)(hi - lo));
    return t;
  }
  case BI_T_ARANGE: {
    bind_args(L, A, "a,b=,c=", a);
    double lo = 0, hi, st = 1;
    int isf = 0;
    for (int i = 0; i < 3; i++) isf |= a[i] && a[i]->k == PV_FLOAT;
    if (a[1]) {
      lo = arg_num(L, A->at, a[0], "start");
      hi = arg_num(L, A->at, a[1], "end");
      if (a[2]) st = arg_num(L, A->at, a[2], "step");
    } else
      hi = arg_num(L, A->at, a[0], "end");
    if (st == 0) lower_error(L, A->at, "arange step must not be zero");
    double len = ceil((hi - lo) / st);   /* NaN, inf or huge: never converted to int64 */
    if (isnan(len) || isinf(lo) || isinf(hi))
      lower_error(L, A->at, "torch.arange: unsupported range %g -> %g", lo, hi);
    if (!(len < 9.2e18))
      lower_error(L, A->at, "torch.arange with %.4g elements is too large for ctc", len);
    int64_t n = len > 0 ? (int64_t)len : 0;
    if (n <= 0) lower_error(L, A->at, "zero-size tensors are not supported by ctc: this arange is empty (shape [0])");
    DType dt = dtype_kw(L, A0, isf ? DT_F32 : DT_I64);
    if (L->T->fn) {
      Type t = type_of(dt, 1, &n);
      if (ir_dtype_is_float(dt) && (lo != floor(lo) || st != floor(st)))
        lower_error(L, A->at, "arange with fractional start/step inside compiled code is not supported");
      /* the generated loop computes start + i * step in int64 */
      if (!(fabs(lo) < 9.2e18 && fabs(st) < 9.2e18 && fabs(lo + (double)(n - 1) * st) < 9.2e18))
        lower_error(L, A->at, "torch.arange: values beyond the int64 range are not supported by ctc (start %g, "
                              "step %g, %lld elements)", lo, st, (long long)n);
      int64_t attr[2] = {(int64_t)lo, (int64_t)st};
      PV *pos = L->T->dec ? dec_iota(L, A->at, attr[0], attr[1], n, dt) : NULL;
      if (pos) return pos;
      return t_wrap(L, ir_emit(L->T->prog, L->T->fn, IR_IOTA, NULL, 0, t, attr, 2, 0, A->at, "arange"));
    }
    PV *t = t_const_tensor(L, A->at, type_of(dt, 1, &n), 0);
    for (int64_t i = 0; i < n; i++) t->t->data[i] = lo + (double)i * st;
    return t;
  }
  case BI_T_LINSPACE: {   /* PyTorch's CPU kernel's formula in the result's dtype: start + step * i up to
                            halfway, end - step * (steps - 1 - i) after, step = (end - start) / (steps - 1);
                            one step: start. (Its vectorised loop computes runs of 8 or 16 values from the
                            run's first, so PyTorch's own values can differ from these by one ulp.) */
    bind_args(L, A, "start,end,steps", a);
    double lo = arg_num(L, A->at, a[0], "start"), hi = arg_num(L, A->at, a[1], "end");
    int64_t n = arg_int(L, A->at, a[2], "steps");
    if (n < 0) lower_error(L, A->at, "number of steps must be non-negative");
    if (n == 0) lower_error(L, A->at, "zero-size tensors are not supported by ctc: this linspace is empty (shape [0])");
    DType dt = dtype_kw(L, A0, DT_F32);
    if (!ir_dtype_is_float(dt)) lower_error(L, A->at, "torch.linspace with an integer dtype is not supported by ctc");
    PV *t = t_const_tensor(L, A->at, type_of(dt, 1, &n), dt == DT_F32 ? (float)lo : lo);
    int64_t half = n / 2;
    if (n == 1) return t;
    if (dt == DT_F32) {
      float s = (float)lo, e = (float)hi, step = n > 1 ? (e - s) / (float)(n - 1) : 0;
      for (int64_t i = 0; i < n; i++) {
        volatile float prod = step * (float)(i < half ? i : n - 1 - i);   /* rounded before the add: no fma */
        t->t->data[i] = i < half ? s + prod : e - prod;
      }
    } else {
      double step = n > 1 ? (hi - lo) / (double)(n - 1) : 0;
      for (int64_t i = 0; i < n; i++) t->t->data[i] = i < half ? lo + step * (double)i : hi - step * (double)(n - 1 - i);
    }
    return t;
  }
  case BI_T_EYE: {
    bind_args(L, A, "n,m=", a);
    int64_t d[2] = {arg_int(L, A->at, a[0], "n"), a[1] ? arg_int(L, A->at, a[1], "m") : arg_int(L, A->at, a[0], "n")};
    for (int i = 0; i < 2; i++)
      if (d[i] < 0) lower_error(L, A->at, "%s must be greater or equal to 0, got %lld", i ? "m" : "n", (long long)d[i]);
    PV *t = t_const_tensor(L, A->at, type_of(dtype_kw(L, A0, DT_F32), 2, d), 0);
    for (int64_t i = 0; i < d[0] && i < d[1]; i++) t->t->data[i * d[1] + i] = 1;
    return t;
  }
  case BI_T_TRIL:
  case BI_T_TRIU: {
    bind_args(L, A, "x,diagonal=", a);
    need_tensor(L, A->at, a[0], "input");
    if (!a[0]->t->data || L->T->fn)   /* a staged tensor: a mask */
      return t_tri(L, A->at, a[0], a[1] ? arg_int(L, A->at, a[1], "diagonal") : 0, bi == BI_T_TRIU);
    /* a compile-time tensor: each matrix of the last two dims, batched over the leading ones */
    Type t = a[0]->t->type;
    if (t.ndim < 2) lower_error(L, A->at, "%s: input tensor must have at least 2 dimensions", bi_names[bi]);
    int64_t dg = a[1] ? arg_int(L, A->at, a[1], "diagonal") : 0;
    int64_t rows = t.dims[t.ndim - 2], cols = t.dims[t.ndim - 1], mats = 1;
    for (int i = 0; i < t.ndim - 2; i++) mats *= t.dims[i];
    PV *r = t_const_tensor(L, A->at, t, 0);
    for (int64_t m = 0; m < mats; m++)
      for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < cols; j++) {
          int64_t off = (m * rows + i) * cols + j;
          int keep = bi == BI_T_TRIL ? j - i <= dg : j - i >= dg;
          r->t->data[off] = keep ? a[0]->t->data[off] : 0;
        }
    return r;
  }
  case BI_T_TENSOR: {
    bind_args(L, A, "data", a);
    if (pv_is_num(a[0])) {
      DType dflt = a[0]->k == PV_FLOAT ? DT_F32 : a[0]->k == PV_BOOL ? DT_BOOL : DT_I64, dt = dtype_kw(L, A0, dflt);
      if (dt == DT_I64) exact_int(L, A->at, a[0]);
      return t_const_tensor(L, A->at, type_of(dt, 0, dims), pv_num(a[0]));
    }
    if (!pv_is_seq(a[0])) lower_error(L, A->at, "torch.tensor() needs numbers or (nested) lists of numbers");
    /* nested lists: the shape from the first items, then each level checked */
    int nd = 0;
    for (PV *v = a[0]; pv_is_seq(v); v = v->items[0]) {
      if (nd == IR_MAX_DIMS) lower_error(L, A->at, "torch.tensor(): too many dimensions");
      if (v->n == 0) lower_error(L, A->at, "empty tensors are not supported");
      dims[nd++] = v->n;
    }
    Type ty = type_of(DT_F32, nd, dims);
    int64_t n = ir_numel(&ty);
    double *vals = arena_alloc(L->a, sizeof(double) * (size_t)n);
    int isf = 0, allb = 1;
    const PV *big = NULL;   /* an int a double would round */
    for (int64_t k = 0; k < n; k++) {
      PV *v = a[0];
      for (int64_t d = 0, rest = k, span = n; d < nd; d++) {
        if (!pv_is_seq(v) || v->n != dims[d])
          lower_error(L, A->at, "torch.tensor(): expected a sequence of length %lld at dim %lld (got %s)",
                      (long long)dims[d], (long long)d, pv_is_seq(v) ? "a sequence of another length" : pv_kind_name(v));
        span /= dims[d];
        v = v->items[rest / span];
        rest %= span;
      }
      /* a number, or a 0-d compile-time tensor (Llama 3's apply_scaling) */
      int ct0 = v->k == PV_TENSOR && !v->t->cplx && v->t->data && !v->t->slot && v->t->type.ndim == 0;
      if (!pv_is_num(v) && !ct0) lower_error(L, A->at, "torch.tensor(): expected numbers, got '%s'", pv_kind_name(v));
      isf |= v->k == PV_FLOAT || (ct0 && ir_dtype_is_float(v->t->type.dtype));
      allb &= v->k == PV_BOOL || (ct0 && v->t->type.dtype == DT_BOOL);
      vals[k] = ct0 ? v->t->data[0] : pv_num(v);
      if (v->k == PV_INT && (v->i > ((int64_t)1 << 53) || v->i < -((int64_t)1 << 53))) big = v;
    }
    PV *t = t_const_tensor(L, A->at, type_of(dtype_kw(L, A0, isf ? DT_F32 : allb ? DT_BOOL : DT_I64), nd, dims), 0);
    for (int64_t k = 0; k < n; k++) t->t->data[k] = vals[k];
    if (big && t->t->type.dtype == DT_I64) exact_int(L, A->at, big);   /* the values are held as doubles */
    return t;
  }
  case BI_T_ZEROS_LIKE:
  case BI_T_ONES_LIKE:
  case BI_T_FULL_LIKE: {
    bind_args(L, A, bi == BI_T_FULL_LIKE ? "x,fill_value" : "x", a);
    need_tensor(L, A->at, a[0], "input");
    double v = bi == BI_T_ONES_LIKE ? 1 : bi == BI_T_FULL_LIKE ? arg_num(L, A->at, a[1], "fill_value") : 0;
    Type t = a[0]->t->type;
    t.dtype = dtype_kw(L, A0, t.dtype);
    return t_const_tensor(L, A->at, t, v);
  }
  default: BUG("factory %d", bi);
  }
}

static PV *size_tuple(L *L, const Type *t) {
  PV *r = pv_tuple(L, NULL, 0);
  for (int i = 0; i < t->ndim; i++) pv_list_append(L, r, pv_int(L, t->dims[i]));
  return r;
}

static int dims_arg(L *L, Span at, PV *v, int64_t *dims) {
  if (!v || v->k == PV_NONE) return 0;
  return arg_ints(L, at, v, dims, IR_MAX_DIMS, "dim");
}

/* x [..., L] as [..., 1, L] (dir 1), or back (dir -1): the 1-D pools are 2-D ones of height 1. */
static PV *height1(L *L, Span at, PV *x, int dir) {
  Type t = x->t->type;
  int64_t dims[IR_MAX_DIMS];
  int n = 0;
  for (int i = 0; i < t.ndim; i++) {
    if (dir > 0 && i == t.ndim - 1) dims[n++] = 1;
    if (dir < 0 && i == t.ndim - 2) continue;
    dims[n++] = t.dims[i];
  }
  return t_reshape(L, at, x, dims, n);
}

/* max_pool1d/2d, avg_pool1d/2d (nd: 1 or 2); a 1-D pool's sizes are the width's, the
 * height's 1 (kernel, stride, dilation) and 0 (padding). */
static PV *pool_nd(L *L, Args *A, Op op, int nd) {
  PV *a[7];
  if (op == IR_MAXPOOL2D) bind_args(L, A, "input,kernel_size,stride=,padding=,dilation=,ceil_mode=,return_indices=", a);
  else bind_args(L, A, "input,kernel_size,stride=,padding=,ceil_mode=,count_include_pad=,divisor_override=", a);
  int64_t k[2], s[2], p[2] = {0, 0}, d[2] = {1, 1};
  const int w = nd == 1;   /* where a 1-D pool's one size goes */
  if (arg_ints(L, A->at, a[1], k + w, 2 - w, "kernel_size") == 1) k[1] = k[w];
  if (a[2] && a[2]->k != PV_NONE && !(pv_is_seq(a[2]) && a[2]->n == 0)) {
    if (arg_ints(L, A->at, a[2], s + w, 2 - w, "stride") == 1) s[1] = s[w];
  } else {
    s[0] = k[0];
    s[1] = k[1];
  }
  if (a[3] && arg_ints(L, A->at, a[3], p + w, 2 - w, "padding") == 1) p[1] = p[w];
  if (nd == 1) k[0] = s[0] = 1, p[0] = 0;
  int ceil_mode = 0, cip = 1;
  if (op == IR_MAXPOOL2D) {
    if (a[4] && arg_ints(L, A->at, a[4], d + w, 2 - w, "dilation") == 1) d[1] = d[w];
    if (nd == 1) d[0] = 1;
    if (a[5]) ceil_mode = arg_bool(L, A->at, a[5], "ceil_mode");
    if (a[6] && arg_bool(L, A->at, a[6], "return_indices")) lower_error(L, A->at, "return_indices=True is not supported");
  } else {
    if (a[4]) ceil_mode = arg_bool(L, A->at, a[4], "ceil_mode");
    if (a[5]) cip = arg_bool(L, A->at, a[5], "count_include_pad");
    if (a[6] && a[6]->k != PV_NONE) lower_error(L, A->at, "divisor_override is not supported");
  }
  PV *x = need_tensor(L, A->at, a[0], "input");
  if (nd == 1) {
    if (x->t->type.ndim != 2 && x->t->type.ndim != 3)
      lower_error(L, A->at, "%s expects a 2-D or 3-D input, got shape %s",
                  op == IR_MAXPOOL2D ? "max_pool1d" : "avg_pool1d", shape_str(L, &x->t->type));
    return height1(L, A->at, t_pool2d(L, A->at, op, height1(L, A->at, x, 1), k, s, p, d, ceil_mode, cip), -1);
  }
  return t_pool2d(L, A->at, op, x, k, s, p, d, ceil_mode, cip);
}

static PV *pool(L *L, Args *A, Op op) { return pool_nd(L, A, op, 2); }

/* adaptive_max_pool1d/2d to sizes that divide the input: a max pool with kernel = stride
 * = input / output (PyTorch's bins are then exactly those windows). */
static PV *adaptive_max_pool(L *L, Args *A, int nd) {
  PV *a[3];
  bind_args(L, A, "input,output_size,return_indices=", a);
  if (a[2] && arg_bool(L, A->at, a[2], "return_indices")) lower_error(L, A->at, "return_indices=True is not supported");
  PV *x = need_tensor(L, A->at, a[0], "input");
  Type t = x->t->type;
  if (t.ndim != nd + 2 && t.ndim != nd + 1)
    lower_error(L, A->at, "adaptive_max_pool%dd expects a %d-D or %d-D input, got shape %s", nd, nd + 1, nd + 2,
                shape_str(L, &t));
  if (nd == 1) x = height1(L, A->at, x, 1), t = x->t->type;
  int64_t o[2] = {1, 1}, k[2], p[2] = {0, 0}, d[2] = {1, 1};
  if (arg_ints(L, A->at, a[1], o + (nd == 1), nd == 1 ? 1 : 2, "output_size") == 1 && nd == 2) o[1] = o[0];
  for (int i = 0; i < 2; i++) {
    const int64_t in = t.dims[t.ndim - 2 + i];
    if (o[i] <= 0 || in % o[i])
      lower_error(L, A->at, "adaptive_max_pool%dd to %lld needs an output size dividing the input's %lld", nd,
                  (long long)o[i], (long long)in);
    k[i] = in / o[i];
  }
  PV *r = t_pool2d(L, A->at, IR_MAXPOOL2D, x, k, k, p, d, 0, 1);
  return nd == 1 ? height1(L, A->at, r, -1) : r;
}

/* The averaging matrix of one axis of PyTorch's adaptive pooling from n to o: row i
 * averages the inputs [floor(i n / o), ceil((i + 1) n / o)), bins that may overlap or
 * repeat an input (n < o), each weight 1 / its bin's length rounded to dt. */
PV *t_adaptive_avg_matrix(L *L, Span at, int64_t o, int64_t n, DType dt) {
  Type t = {0};
  t.dtype = dt, t.ndim = 2, t.dims[0] = o, t.dims[1] = n;
  PV *m = t_const_tensor(L, at, t, 0);
  for (int64_t i = 0; i < o; i++) {
    const int64_t s = i * n / o, e = ((i + 1) * n + o - 1) / o;
    const double w = 1.0 / (double)(e - s);
    for (int64_t j = s; j < e; j++) m->t->data[i * n + j] = dt == DT_F32 ? (double)(float)w : w;
  }
  return m;
}

PV *t_adaptive_avg_pool2d(L *L, Span at, PV *x, PV *size) {
  int64_t o[2];
  if (arg_ints(L, at, size, o, 2, "output_size") == 1) o[1] = o[0];
  Type t = x->t->type;
  if (t.ndim != 4) lower_error(L, at, "adaptive_avg_pool2d expects a 4-D input, got %s", shape_str(L, &t));
  if (o[0] <= 0 || o[1] <= 0) {
    if (o[0] < 0 || o[1] < 0)
      lower_error(L, at, "adaptive_avg_pool2d: output size %lldx%lld must not be negative", (long long)o[0], (long long)o[1]);
    Type r = t;
    r.dims[2] = o[0], r.dims[3] = o[1];
    lower_error(L, at, "zero-size tensors are not supported by ctc: adaptive_avg_pool2d to %lldx%lld gives shape %s",
                (long long)o[0], (long long)o[1], shape_str(L, &r));
  }
  if (o[0] == 1 && o[1] == 1) {
    int64_t dims[2] = {2, 3};
    return t_reduce(L, at, IR_REDUCE_SUM, x, dims, 2, 1, 1);
  }
  if (t.dims[2] % o[0] || t.dims[3] % o[1]) {   /* uneven bins: P_h x P_w^T, two matmuls with constant matrices */
    if (t.dtype != DT_F32 && t.dtype != DT_F64)
      lower_error(L, at, "adaptive_avg_pool2d of a %s tensor is not supported", ir_dtype_name(t.dtype));
    PV *pw = t_adaptive_avg_matrix(L, at, o[1], t.dims[3], t.dtype), *ph = t_adaptive_avg_matrix(L, at, o[0], t.dims[2], t.dtype);
    return t_matmul(L, at, ph, t_matmul(L, at, x, t_transpose(L, at, pw, 0, 1)));
  }
  int64_t k[2] = {t.dims[2] / o[0], t.dims[3] / o[1]}, p[2] = {0, 0}, d[2] = {1, 1};
  return t_pool2d(L, at, IR_AVGPOOL2D, x, k, k, p, d, 0, 1);
}

/* Dropout: identity in eval mode; in training mode a counter-based random mask
 * (RAND_UNIFORM keyed by the `rng.offset` state, advanced by each use), keeping
 * each element with probability 1 - p and scaling it by 1 / (1 - p). Equal to
 * PyTorch's in distribution, not bit for bit. */
PV *t_dropout(L *L, Span at, PV *x, double p, int training) { return t_feature_dropout(L, at, x, p, training, 0); }

/* Channel-wise dropout (nn.Dropout1d/2d/3d, F.dropout1d/2d/3d: PyTorch's
 * feature_dropout): one draw per (sample, channel), broadcast over the other dims.
 * feature: 0 elementwise dropout, 1 feature dropout. */
PV *t_feature_dropout(L *L, Span at, PV *x, double p, int training, int feature) {
  if (p < 0 || p > 1) lower_error(L, at, "dropout probability has to be between 0 and 1, but got %g", p);
  if (feature == 1 && x->t->type.ndim < 2)
    lower_error(L, at, "Feature dropout requires at least 2 dimensions in the input (got shape %s)",
                shape_str(L, &x->t->type));
  if (!training || p == 0) return x;
  forward_rng_enable(L);
  if (!L->T->fn || !L->T->param_cur)
    lower_error(L, at, "dropout in training mode needs a compiled training function (forward entries run in eval mode)");
  Type st = {0};
  st.dtype = DT_I64;
  PV *off = state_tensor(L, at, "rng.offset", &st, 0);
  ValId o = t_val(L, at, off);
  Type rt = x->t->type;
  if (!ir_dtype_is_float(rt.dtype)) lower_error(L, at, "dropout needs a floating-point tensor");
  if (feature)   /* the mask broadcasts over the feature map; 2: an unbatched input (C, ...) */
    for (int i = feature == 2 ? 1 : 2; i < rt.ndim; i++) rt.dims[i] = 1;
  PV *u = t_wrap(L, ir_emit(L->T->prog, L->T->fn, IR_RAND_UNIFORM, &o, 1, rt, NULL, 0, 0, at, "uniform"));
  PV *keep = t_compare(L, at, OP_GE, u, pv_float(L, p));
  PV *y = p >= 1 ? t_binary(L, at, OP_MUL, x, pv_int(L, 0))
                 : t_where(L, at, keep, t_binary(L, at, OP_MUL, x, pv_float(L, 1.0 / (1.0 - p))), pv_float(L, 0));
  state_update(L, at, off, t_binary(L, at, OP_ADD, t_wrap(L, o), pv_int(L, ir_numel(&rt))));
  ir_val(L->T->fn, y->t->v)->name = "dropout";
  return y;
}

/* nn.init.calculate_gain(nonlinearity, param=None), PyTorch's table */
static double init_gain(L *L, Span at, PV *nl, PV *param) {
  if (!nl || nl->k == PV_NONE) return 1;
  if (nl->k != PV_STR) lower_error(L, at, "nonlinearity must be a string");
  const char *n = nl->s;
  static const char *const ones[] = {"linear", "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d",
                                     "conv_transpose3d", "sigmoid"};
  for (size_t i = 0; i < sizeof ones / sizeof *ones; i++)
    if (!strcmp(n, ones[i])) return 1;
  if (!strcmp(n, "tanh")) return 5.0 / 3;
  if (!strcmp(n, "relu")) return sqrt(2.0);
  if (!strcmp(n, "selu")) return 3.0 / 4;
  if (!strcmp(n, "leaky_relu")) {
    double slope = 0.01;
    if (param && param->k != PV_NONE) {
      if (param->k != PV_INT && param->k != PV_FLOAT) lower_error(L, at, "negative_slope %s not a valid number", pv_kind_name(param));
      slope = pv_num(param);
    }
    return sqrt(2.0 / (1 + slope * slope));
  }
  lower_error(L, at, "Unsupported nonlinearity %s", n);
}

PV *bi_calculate_gain(L *L, PV *fn, Args *A) {
  (void)fn;
  PV *a[2];
  bind_args(L, A, "nonlinearity,param=", a);
  return pv_float(L, init_gain(L, A->at, a[0], a[1]));
}

/* nn.init.orthogonal_: PyTorch's construction (QR of a normal [rows, cols] matrix,
 * transposed when rows < cols, signs fixed so R has a positive diagonal, times gain),
 * by modified Gram-Schmidt in double on ctc's compile-time normal draws: the same
 * distribution (W W^T = I or W^T W = I), not PyTorch's values. */
static double *orthogonal_data(L *L, Span at, const Type *t, double gain, uint64_t seed) {
  if (t->ndim < 2) lower_error(L, at, "Only tensors with 2 or more dimensions are supported");
  int64_t rows = t->dims[0], cols = ir_numel(t) / rows;
  int tr = rows < cols;
  int64_t m = tr ? cols : rows, n = tr ? rows : cols;   /* a tall m x n matrix, m >= n */
  if ((double)m * (double)n > (double)(1 << 24) || (double)m * (double)n * (double)n > 2147483648.0) lower_error(L, at, "orthogonal_ of a %lldx%lld matrix is too large for ctc's compile-time initialisation", (long long)rows, (long long)cols);
  double *a = arena_alloc(L->a, sizeof(double) * (size_t)(m * n));
  uint64_t s = seed;
  for (int64_t i = 0; i < m * n; i++) {
    double u = rnd_uniform(&s);
    a[i] = sqrt(-2 * log(u + 1e-300)) * cos(2 * M_PI * rnd_uniform(&s));
  }
  for (int64_t j = 0; j < n; j++) {   /* column j of a (row-major m x n) */
    for (int pass = 0; pass < 2; pass++)   /* re-orthogonalised once: columns orthonormal to rounding */
      for (int64_t k = 0; k < j; k++) {
        double d = 0;
        for (int64_t i = 0; i < m; i++) d += a[i * n + k] * a[i * n + j];
        for (int64_t i = 0; i < m; i++) a[i * n + j] -= d * a[i * n + k];
      }
    double nr = 0;
    for (int64_t i = 0; i < m; i++) nr += a[i * n + j] * a[i * n + j];
    nr = sqrt(nr);
    if (nr == 0) nr = 1;
    for (int64_t i = 0; i < m; i++) a[i * n + j] /= nr;
  }
  double *w = arena_alloc(L->a, sizeof(double) * (size_t)(m * n));
  for (int64_t r = 0; r < rows; r++)
    for (int64_t c = 0; c < cols; c++) w[r * cols + c] = gain * (tr ? a[c * n + r] : a[r * n + c]);
  return w;
}

static PV *init_fn(L *L, int bi, Args *A) {
  PV *a[5];
  switch (bi) {
  case BI_I_NORMAL_: bind_args(L, A, "tensor,mean=,std=", a); break;
  case BI_I_TRUNC_NORMAL_: bind_args(L, A, "tensor,mean=,std=,a=,b=", a); break;
  case BI_I_UNIFORM_: bind_args(L, A, "tensor,a=,b=", a); break;
  case BI_I_CONSTANT_: bind_args(L, A, "tensor,val", a); break;
  case BI_I_XAVIER_UNIFORM_:
  case BI_I_XAVIER_NORMAL_:
  case BI_I_ORTHOGONAL_: bind_args(L, A, "tensor,gain=", a); break;
  case BI_I_KAIMING_NORMAL_:
  case BI_I_KAIMING_UNIFORM_: bind_args(L, A, "tensor,a=,mode=,nonlinearity=", a); break;
  default: bind_args(L, A, "tensor", a); break;
  }
  need_tensor(L, A->at, a[0], "tensor");
  Slot *s = a[0]->t->slot;
  if (!s) lower_error(L, A->at, "nn.init functions need a parameter");
  if (L->T->fn) lower_error(L, A->at, "nn.init inside compiled code is not supported");
  s->zero_row1 = 0;   /* the new fill covers the padding row too */
  s->init_trunc = 0;   /* (trunc_normal_ sets it again) */
  Type t = s->type;
  int64_t fan_in = t.ndim >= 2 ? ir_numel(&t) / t.dims[0] : t.dims[0];
  int64_t fan_out = t.ndim >= 2 ? ir_numel(&t) / t.dims[1] : t.dims[0];
  double *data = NULL;
  switch (bi) {
  case BI_I_NORMAL_:
    s->init = PINIT_NORMAL;
    s->init_a = a[1] ? arg_num(L, A->at, a[1], "mean") : 0;
    s->init_b = a[2] ? arg_num(L, A->at, a[2], "std") : 1;
    break;
  case BI_I_TRUNC_NORMAL_: {   /* PyTorch's defaults: mean 0, std 1, bounds [-2, 2] (absolute, not in stds) */
    const double mean = a[1] ? arg_num(L, A->at, a[1], "mean") : 0, std = a[2] ? arg_num(L, A->at, a[2], "std") : 1;
    const double lo = a[3] ? arg_num(L, A->at, a[3], "a") : -2, hi = a[4] ? arg_num(L, A->at, a[4], "b") : 2;
    if (!(std > 0) || !(lo < hi))
      lower_error(L, A->at, "nn.init.trunc_normal_ needs std > 0 and a < b (got std %g, a %g, b %g)", std, lo, hi);
    /* the share of the normal's mass inside the bounds: values outside are drawn again */
    const double mass = 0.5 * (erfc(-(hi - mean) / (std * sqrt(2.0))) - erfc(-(lo - mean) / (std * sqrt(2.0))));
    if (mass < 0.1)
      lower_error(L, A->at, "nn.init.trunc_normal_: the bounds [%g, %g] keep %.3g of the normal(%g, %g) draws; ctc "
                            "draws a value again until it is inside, and needs them to keep at least a tenth", lo, hi,
                  mass, mean, std);
    s->init = PINIT_NORMAL;
    s->init_a = mean;
    s->init_b = std;
    /* ctc's normal draws (Box-Muller on 53-bit uniforms) stay within 8.58 std of the mean: bounds
     * past 9 std (timm's trunc_normal_(w, std=0.02) within [-2, 2]: 100 std) cut nothing */
    s->init_trunc = lo > mean - 9 * std || hi < mean + 9 * std;
    s->init_lo = lo;
    s->init_hi = hi;
    break;
  }
  case BI_I_UNIFORM_:
    s->init = PINIT_UNIFORM;
    s->init_a = a[1] ? arg_num(L, A->at, a[1], "a") : 0;
    s->init_b = a[2] ? arg_num(L, A->at, a[2], "b") : 1;
    break;
  case BI_I_ZEROS_: s->init = PINIT_ZERO; break;
  case BI_I_ONES_: s->init = PINIT_CONST; s->init_a = 1; break;
  case BI_I_CONSTANT_: s->init = PINIT_CONST; s->init_a = arg_num(L, A->at, a[1], "val"); break;
  case BI_I_XAVIER_UNIFORM_: {
    double g = a[1] ? arg_num(L, A->at, a[1], "gain") : 1, b = g * sqrt(6.0 / (double)(fan_in + fan_out));
    s->init = PINIT_UNIFORM;
    s->init_a = -b;
    s->init_b = b;
    break;
  }
  case BI_I_XAVIER_NORMAL_:
    s->init = PINIT_NORMAL;
    s->init_a = 0;
    s->init_b = (a[1] ? arg_num(L, A->at, a[1], "gain") : 1) * sqrt(2.0 / (double)(fan_in + fan_out));
    break;
  case BI_I_ORTHOGONAL_:
    s->init = PINIT_DATA;
    data = orthogonal_data(L, A->at, &t, a[1] ? arg_num(L, A->at, a[1], "gain") : 1,
                           0x5DEECE66Dull * (uint64_t)(++L->T->init_draws));
    break;
  default: {
    PV *mode = a[2] && a[2]->k != PV_NONE ? a[2] : NULL;
    if (mode && (mode->k != PV_STR || (strcmp(mode->s, "fan_in") && strcmp(mode->s, "fan_out"))))
      lower_error(L, A->at, "Mode %s not supported, please use one of fan_in, fan_out", mode->k == PV_STR ? mode->s : "?");
    PV *nl = a[3] && a[3]->k != PV_NONE ? a[3] : pv_str(L, "leaky_relu");
    double gain = init_gain(L, A->at, nl, a[1] ? a[1] : pv_float(L, 0));
    double std = gain / sqrt((double)(mode && !strcmp(mode->s, "fan_out") ? fan_out : fan_in));
    if (bi == BI_I_KAIMING_NORMAL_) {
      s->init = PINIT_NORMAL;
      s->init_a = 0;
      s->init_b = std;
    } else {
      s->init = PINIT_UNIFORM;
      s->init_a = -sqrt(3.0) * std;
      s->init_b = sqrt(3.0) * std;
    }
  }
  }
  s->data = data;
  return a[0];
}

/* F.dropout1d / dropout2d / dropout3d (row arg: the spatial dims), and the forward of
 * nn.Dropout1d/2d/3d: PyTorch 1.13's checks (dropout1d: 2-D or 3-D; dropout3d:
 * a 4-D input is one unbatched sample; dropout2d takes any, a 3-D one as (N, C, L)) */
PV *dropout_nd(L *L, Span at, int nsp, PV *x, double p, int training) {
  int nd = x->t->type.ndim, feature = 1;
  if (nsp == 1 && nd != 2 && nd != 3)
    lower_error(L, at, "dropout1d: Expected 2D or 3D input, but received a %dD input", nd);
  if (nsp == 3 && nd != 4 && nd != 5)
    lower_error(L, at, "dropout3d: Expected 4D or 5D input, but received a %dD input (PyTorch 1.13 "
                       "only warns and drops whole features of it; ctc refuses it)", nd);
  if ((nsp == 1 && nd == 2) || (nsp == 3 && nd == 4)) feature = 2;
  return t_feature_dropout(L, at, x, p, training, feature);
}
PV *nnf_dropout_nd(L *L, PV *fn, Args *A) {
  PV *a[4];
  bind_args(L, A, "input,p=,training=,inplace=", a);
  PV *x = need_tensor(L, A->at, a[0], "input");
  return dropout_nd(L, A->at, bi_rows[fn->bi].arg, x, a[1] ? arg_num(L, A->at, a[1], "p") : 0.5,
                    a[2] ? arg_bool(L, A->at, a[2], "training") : 1);
}

PV *bi_init(L *L, PV *fn, Args *A) { return init_fn(L, fn->bi, A); }

/* p.mul_(m) / p.add_(c) on a parameter in __init__: its initial values become m p + c, so its
 * fill does: a constant's value, a uniform's bounds, a (truncated) normal's mean, std and bounds,
 * and given values each mapped. */
void slot_affine(L *L, Span at, Slot *s, double m, double c, const char *what) {
  if (s->zero_row1 && c != 0)
    lower_error(L, at, "'%s' on an nn.Embedding weight with padding_idx at compile time is not supported", what);
  if (m == 0) {   /* every value c */
    s->init = c == 0 ? PINIT_ZERO : PINIT_CONST, s->init_a = c, s->init_trunc = 0, s->data = NULL, s->zero_row1 = 0;
    return;
  }
  const double a = m * s->init_a + c, b = m * s->init_b + c;
  switch (s->init) {
  case PINIT_ZERO:
    if (c != 0) s->init = PINIT_CONST, s->init_a = c;
    break;
  case PINIT_CONST: s->init_a = a; break;
  case PINIT_UNIFORM: s->init_a = a < b ? a : b, s->init_b = a < b ? b : a; break;
  case PINIT_NORMAL: {
    s->init_a = a, s->init_b = fabs(m) * s->init_b;
    const double lo = m * s->init_lo + c, hi = m * s->init_hi + c;
    s->init_lo = lo < hi ? lo : hi, s->init_hi = lo < hi ? hi : lo;
    break;
  }
  case PINIT_DATA: {
    const int64_t n = ir_numel(&s->type);
    double *d = arena_alloc(L->a, sizeof(double) * (size_t)n);
    for (int64_t i = 0; i < n; i++) d[i] = m * s->data[i] + c;
    s->data = d;
    break;
  }
  default: lower_error(L, at, "'%s' on this parameter at compile time is not supported", what);
  }
}

/* x.normal_() / x.uniform_() at compile time: on a parameter, its nn.init row; on a
 * compile-time tensor (torch.empty(n).normal_(0, 0.02) before nn.Parameter), fresh
 * compile-time values as torch.randn's (a program's values come from the weights or init) */
PV *bi_init_method(L *L, PV *fn, Args *A) {
  PV *x = fn->self, *a[2];
  int row = bi_rows[fn->bi].arg;
  if (L->T->fn || x->k != PV_TENSOR || (!x->t->slot && !x->t->data))
    lower_error(L, A->at, "Tensor.%s() is supported in __init__ (on a parameter or a compile-time tensor) only; "
                          "in compiled code use torch.randn / torch.rand", bi_names[fn->bi]);
  if (x->t->slot) {
    Args B = *A;
    PV **args = arena_alloc(L->a, sizeof(PV *) * (size_t)(A->nargs + 1));
    args[0] = x;
    for (int i = 0; i < A->nargs; i++) args[i + 1] = A->args[i];
    B.args = args;
    B.nargs++;
    init_fn(L, row, &B);
    return x;
  }
  bind_args(L, A, row == BI_I_NORMAL_ ? "mean=,std=" : "from=,to=", a);
  double p = a[0] ? arg_num(L, A->at, a[0], "mean") : 0, q = a[1] ? arg_num(L, A->at, a[1], "std") : 1;
  uint64_t seed = 42;
  for (int64_t i = 0; i < ir_numel(&x->t->type); i++) {
    double u = rnd_uniform(&seed);
    x->t->data[i] = row == BI_I_UNIFORM_ ? p + (q - p) * u
                                         : p + q * sqrt(-2 * log(u + 1e-300)) * cos(2 * M_PI * rnd_uniform(&seed));
  }
  return x;
}

/* torch.Tensor(n, m): an allocation (torch.empty); torch.Tensor([..]): float32 data */
PV *tensor_class_new(L *L, PV *cls, Args *A) {
  (void)cls;
  if (A->nargs == 1 && (A->args[0]->k == PV_LIST || A->args[0]->k == PV_TUPLE)) {
    PV *r = factory(L, BI_T_TENSOR, A);
    return r->t->type.dtype == DT_F32 ? r : t_cast(L, A->at, r, DT_F32);
  }
  return factory(L, BI_T_EMPTY, A);
}

/* torch.FloatTensor(n, m), torch.LongTensor([..]) ... (the legacy typed
 * constructors): torch.Tensor's two forms in the class's dtype */
int typed_tensor_class(int bi, DType *dt) {
  switch (bi) {
  case BI_T_FLOATTENSOR: *dt = DT_F32; return 1;
  case BI_T_DOUBLETENSOR: *dt = DT_F64; return 1;
  case BI_T_LONGTENSOR: *dt = DT_I64; return 1;
  case BI_T_INTTENSOR: *dt = DT_I32; return 1;
  case BI_T_BOOLTENSOR: *dt = DT_BOOL; return 1;
  default: return 0;
  }
}

PV *typed_tensor_new(L *L, PV *cls, Args *A) {
  DType dt = DT_F32;
  typed_tensor_class(cls->bi, &dt);
  int data = A->nargs == 1 && (A->args[0]->k == PV_LIST || A->args[0]->k == PV_TUPLE);
  PV *r = factory(L, data ? BI_T_TENSOR : BI_T_EMPTY, A);
  return r->t->type.dtype == dt ? r : t_cast(L, A->at, r, dt);
}

/* torch.Size([3, 2]): a tuple of ints, as x.shape is */
PV *bi_torch_size(L *L, PV *fn, Args *A) {
  (void)fn;
  PV *a[1];
  bind_args(L, A, "sizes=", a);
  PV *r = pv_tuple(L, NULL, 0);
  if (!a[0]) return r;
  if (!pv_is_seq(a[0])) lower_error(L, A->at, "torch.Size() takes a sequence of ints, got '%s'", pv_kind_name(a[0]));
  for (int i = 0; i < a[0]->n; i++) pv_list_append(L, r, pv_int(L, arg_int(L, A->at, a[0]->items[i], "size")));
  return r;
}

/* split / chunk along dim: a tuple of slices. */
static PV *split(L *L, Span at, PV *x, PV *size, int64_t dim, int chunks) {
  Type t = x->t->type;
  dim = t_norm_dim(L, at, dim, t.ndim);
  int64_t n = t.dims[dim];
  PV *out = pv_tuple(L, NULL, 0);
  if (chunks) {
    int64_t c = arg_int(L, at, size, "chunks");
    if (c <= 0) lower_error(L, at, "chunk expects a positive number of chunks");
    int64_t step = (n - 1) / c + 1;   /* ceil(n / c) without overflow */
    for (int64_t s = 0; s < n; s += step) pv_list_append(L, out, t_slice(L, at, x, (int)dim, s, step > n - s ? n : s + step, 1));
    return out;
  }
  if (pv_is_seq(size)) {
    int64_t s = 0;
    for (int i = 0; i < size->n; i++) {
      int64_t len = arg_int(L, at, size->items[i], "split size");
      if (len <= 0 || len > n - s) lower_error(L, at, "split sizes do not add up to the dimension size %lld", (long long)n);
      pv_list_append(L, out, t_slice(L, at, x, (int)dim, s, s + len, 1));
      s += len;
    }
    if (s != n) lower_error(L, at, "split sizes add up to %lld, but dimension %lld has size %lld", (long long)s, (long long)dim, (long long)n);
    return out;
  }
  int64_t len = arg_int(L, at, size, "split size");
  if (len <= 0) lower_error(L, at, "split size must be positive");
  for (int64_t s = 0, e; s < n; s = e) { /* the last piece may be shorter; s + len may not fit */
    e = len > n - s ? n : s + len;
    pv_list_append(L, out, t_slice(L, at, x, (int)dim, s, e, 1));
  }
  return out;
}

/* Tensor methods and torch functions that take the tensor first. */
static PV *compile_time_copy(L *L, Span at, PV *x, const char *what);
static PV *maybe_inplace(L *L, Span at, PV *flag, PV *x, PV *r) {
  return flag && arg_bool(L, at, flag, "inplace") ? t_inplace(L, at, x, r) : r;
}


/* The tensor a torch function or Tensor method applies to: the bound receiver
 * (x.exp()), else the first argument or `input=` (torch.exp(x)); *B receives
 * the remaining arguments. */
static PV *take_input(L *L, PV *self, Args *A0, Args *B) {
  *B = *A0;
  if (self) return self;
  if (A0->nargs == 0 && A0->nkw == 0) lower_error(L, A0->at, "%s() missing the input tensor", A0->fname);
  if (A0->nargs) {
    B->args++;
    B->nargs--;
    return A0->args[0];
  }
  PV *x = NULL;
  for (int i = 0; i < A0->nkw; i++)
    if (!strcmp(A0->kwnames[i], "input")) x = A0->kwvals[i];
  if (!x) lower_error(L, A0->at, "%s() missing the input tensor", A0->fname);
  B->kwnames = arena_alloc(L->a, sizeof(char *) * (size_t)A0->nkw);
  B->kwvals = arena_alloc(L->a, sizeof(PV *) * (size_t)A0->nkw);
  B->nkw = 0;
  for (int i = 0; i < A0->nkw; i++)
    if (strcmp(A0->kwnames[i], "input")) {
      B->kwnames[B->nkw] = A0->kwnames[i];
      B->kwvals[B->nkw++] = A0->kwvals[i];
    }
  return x;
}

/* A row whose function is one elementwise primitive, arg = its Op: torch.exp(x),
 * x.exp(), F.tanh(x) ... (no other arguments: any, e.g. out=, is refused rather
 * than ignored). */
PV *bi_unary(L *L, PV *fn, Args *A0) {
  Args B;
  PV *a[1], *x = take_input(L, fn->self, A0, &B);
  bind_args(L, &B, "", a);
  need_tensor(L, B.at, x, "input");
  return t_unary(L, B.at, (Op)bi_rows[fn->bi].arg, x);
}

static PV *tensor_fn(L *L, PV *fn, Args *A0) {
  int bi = fn->bi;
  PV *self = fn->self;
  Args B;
  Args *A = &B;
  PV *a[8];
  PV *x = take_input(L, self, A0, &B);
  Span at = A->at;
  if (bi == BI_T_CAT || bi == BI_T_STACK) {
    bind_args(L, A, "dim=", a);
    PV **items;
    int n = iter_items(L, at, x, &items);
    int64_t dim = a[0] ? arg_int(L, at, a[0], "dim") : 0;
    if (bi == BI_T_STACK) {
      PV **us = arena_alloc(L->a, sizeof(PV *) * (size_t)(n + 1));
      for (int i = 0; i < n; i++) {
        Type t = need_tensor(L, at, items[i], "stack input")->t->type;
        int64_t d = t_norm_dim(L, at, dim, t.ndim + 1), nd[IR_MAX_DIMS];
        int k = 0;
        for (int j = 0; j <= t.ndim; j++) nd[j] = j == d ? 1 : t.dims[k++];
        us[i] = t_reshape(L, at, items[i], nd, t.ndim + 1);
      }
      return t_concat(L, at, us, n, dim);
    }
    return t_concat(L, at, items, n, dim);
  }
  need_tensor(L, at, x, "input");
  Type t = x->t->type;
  int64_t dims[IR_MAX_DIMS];
  if (bi == BI_T_SQUARE || bi == BI_T_T) bind_args(L, A, "", a); /* no arguments: refuse any (e.g. out=) */
  switch (bi) {
  case BI_T_SIZE:
    bind_args(L, A, "dim=", a);
    if (a[0] && a[0]->k != PV_NONE) return pv_int(L, t.dims[t_norm_dim(L, at, arg_int(L, at, a[0], "dim"), t.ndim)]);
    return size_tuple(L, &t);
  case BI_T_DIM: return pv_int(L, t.ndim);
  case BI_T_NUMEL: return pv_int(L, ir_numel(&t));
  case BI_T_CONTIGUOUS: return x;
  case BI_T_DETACH: bind_args(L, A, "", a); return t_detach(L, at, x);
  case BI_T_CLONE: { /* a new tensor object: in-place updates of the clone leave x alone */
    bind_args(L, A, "memory_format=", a);
    return L->T->fn ? t_wrap(L, t_val(L, at, x)) : compile_time_copy(L, at, x, "clone");
  }
  case BI_T_REQUIRES_GRAD_:
    bind_args(L, A, "requires_grad=", a);
    tensor_setattr(L, at, x, "requires_grad", a[0] ? a[0] : pv_bool(L, 1));
    return x;
  case BI_T_VIEW:
  case BI_T_RESHAPE: {
    if (A->nargs == 1 && A->args[0]->k == PV_DTYPE) lower_error(L, at, "view(dtype) is not supported");
    int n = shape_args(L, A, 0, dims);
    return t_reshape(L, at, x, dims, n);
  }
  case BI_T_FLATTEN: {
    bind_args(L, A, "start_dim=,end_dim=", a);
    int64_t s = a[0] ? arg_int(L, at, a[0], "start_dim") : 0, e = a[1] ? arg_int(L, at, a[1], "end_dim") : -1;
    if (t.ndim == 0) return t_reshape(L, at, x, (int64_t[]){1}, 1);
    s = t_norm_dim(L, at, s, t.ndim);
    e = t_norm_dim(L, at, e, t.ndim);
    if (s > e) lower_error(L, at, "flatten: start_dim cannot come after end_dim");
    int n = 0;
    for (int i = 0; i < t.ndim; i++) {
      if (i > s && i <= e) dims[n - 1] *= t.dims[i];
      else dims[n++] = t.dims[i];
    }
    return t_reshape(L, at, x, dims, n);
  }
  case BI_T_SQUEEZE: {
    bind_args(L, A, "dim=", a);
    int n = 0;
    int64_t d = a[0] && a[0]->k != PV_NONE ? t_norm_dim(L, at, arg_int(L, at, a[0], "dim"), t.ndim) : -1;
    for (int i = 0; i < t.ndim; i++)
      if (!(t.dims[i] == 1 && (d < 0 || d == i))) dims[n++] = t.dims[i];
    if (n == 0) {
      ValId v = t_val(L, at, x);
      Type o = t;
      o.ndim = 0;
      return t_wrap(L, ir_emit(L->T->prog, L->T->fn, IR_RESHAPE, &v, 1, o, NULL, 0, 0, at, "squeeze"));
    }
    return t_reshape(L, at, x, dims, n);
  }
  case BI_T_UNSQUEEZE: {
    bind_args(L, A, "dim", a);
    int64_t d = t_norm_dim(L, at, arg_int(L, at, a[0], "dim"), t.ndim + 1);
    int n = 0;
    for (int i = 0; i <= t.ndim; i++) dims[n++] = i == d ? 1 : t.dims[i - (i > d)];
    return t_reshape(L, at, x, dims, n);
  }
  case BI_T_TRANSPOSE:
    bind_args(L, A, "dim0,dim1", a);
    return t_transpose(L, at, x, arg_int(L, at, a[0], "dim0"), arg_int(L, at, a[1], "dim1"));
  case BI_T_T:
    if (t.ndim > 2) lower_error(L, at, "t() expects a tensor with at most 2 dimensions, got %s", shape_str(L, &t));
    return t.ndim < 2 ? x : t_transpose(L, at, x, 0, 1);
  case BI_T_PERMUTE: {
    int n = shape_args(L, A, 0, dims);
    return t_permute(L, at, x, dims, n);
  }
  case BI_T_EXPAND: {
    int n = shape_args(L, A, 0, dims);
    if (n < t.ndim) lower_error(L, at, "expand: the number of sizes (%d) must be at least the tensor's dimensions (%d)", n, t.ndim);
    Type r = t;
    r.ndim = n;
    for (int i = 0; i < n; i++) {
      int j = i - (n - t.ndim);
      int64_t cur = j >= 0 ? t.dims[j] : 1;
      r.dims[i] = dims[i] == -1 ? cur : dims[i];
      if (cur != 1 && cur != r.dims[i])
        lower_error(L, at, "expand: cannot expand shape %s to %s", shape_str(L, &t), shape_str(L, &r));
    }
    ValId v = t_val(L, at, x);
    return t_wrap(L, ir_emit(L->T->prog, L->T->fn, IR_BROADCAST, &v, 1, r, NULL, 0, 0, at, "expand"));
  }
  case BI_T_RELU: /* torch.relu, x.relu(), F.relu (inplace=), nn.ReLU */
    a[0] = NULL; /* F.relu and nn.ReLU take inplace=, torch.relu and x.relu() nothing */
    bind_args(L, A, fn->i & (NS_F | NS_NN) ? "inplace=" : "", a);
    return maybe_inplace(L, at, a[0], x, t_unary(L, at, IR_RELU, x));
  case BI_T_SQUARE: {
    PV *y = t.dtype == DT_BOOL ? t_cast(L, at, x, DT_I64) : x;
    return t_binary(L, at, OP_MUL, y, y);
  }
  case BI_T_POW:
    bind_args(L, A, "exponent", a);
    return t_binary(L, at, OP_POW, x, a[0]);
  case BI_T_ADD:
  case BI_T_SUB: {
    bind_args(L, A, "other,alpha=", a);
    PV *o = a[0];
    if (a[1] && a[0]->k == PV_TENSOR) o = t_binary(L, at, OP_MUL, a[0], a[1]);
    else if (a[1] && a[0]->k == PV_INT && a[1]->k == PV_INT) o = pv_int(L, a[0]->i * a[1]->i);
    else if (a[1]) o = pv_float(L, pv_num(a[0]) * arg_num(L, at, a[1], "alpha"));
    return t_binary(L, at, bi == BI_T_ADD ? OP_ADD : OP_SUB, x, o);
  }
  case BI_T_MUL:
    bind_args(L, A, "other", a);
    return t_binary(L, at, OP_MUL, x, a[0]);
  case BI_T_DIV:
    bind_args(L, A, "other,rounding_mode=", a);
    if (a[1] && a[1]->k != PV_NONE) {
      if (a[1]->k == PV_STR && !strcmp(a[1]->s, "trunc")) return t_divmod(L, at, 't', x, a[0]);
      if (a[1]->k == PV_STR && !strcmp(a[1]->s, "floor")) return t_divmod(L, at, 'f', x, a[0]);
      lower_error(L, at, "div expected rounding_mode to be one of None, 'trunc', or 'floor' but found %s",
                  pv_repr(L, at, a[1]));
    }
    return t_binary(L, at, OP_DIV, x, a[0]);
  case BI_T_MATMUL:
  case BI_T_MM:
  case BI_T_BMM:
    bind_args(L, A, "other", a);
    return t_matmul(L, at, x, need_tensor(L, at, a[0], "other"));
  case BI_T_MAXIMUM:
  case BI_T_MINIMUM: {
    bind_args(L, A, "other", a);
    PV *y = need_tensor(L, at, a[0], "other");
    return t_minmax(L, at, bi == BI_T_MAXIMUM ? IR_MAX : IR_MIN, x, y);
  }
  case BI_T_CLAMP:
    bind_args(L, A, "min=,max=", a);
    return t_clamp(L, at, x, a[0], a[1]);
  case BI_T_WHERE:
    bind_args(L, A, self ? "condition,other" : "input,other", a);
    return self ? t_where(L, at, a[0], x, a[1]) : t_where(L, at, x, a[0], a[1]);
  case BI_T_SUM:
  case BI_T_MEAN:
  case BI_T_AMAX: {
    bind_args(L, A, "dim=,keepdim=,dtype=", a);
    int n = dims_arg(L, at, a[0], dims);
    int keep = a[1] ? arg_bool(L, at, a[1], "keepdim") : 0;
    PV *in = x;
    if (a[2] && a[2]->k == PV_DTYPE) in = t_cast(L, at, x, a[2]->dt);
    else if (bi == BI_T_SUM && !ir_dtype_is_float(t.dtype)) in = t_cast(L, at, x, DT_I64);
    return t_reduce(L, at, bi == BI_T_AMAX ? IR_REDUCE_MAX : IR_REDUCE_SUM, in, dims, n, keep, bi == BI_T_MEAN);
  }
  case BI_T_ARGMAX:
    bind_args(L, A, "dim=,keepdim=", a);
    return t_argmax(L, at, x, a[0], a[1] ? arg_bool(L, at, a[1], "keepdim") : 0, 0);
  case BI_T_MAX:
  case BI_T_MIN: {
    /* max(x): the 0-d max; max(x, other): maximum; max(x, dim, keepdim): (values, indices) */
    bind_args(L, A, "dim=,keepdim=", a);
    int is_min = bi == BI_T_MIN;
    if (a[0] && a[0]->k == PV_TENSOR) {
      if (a[1]) lower_error(L, at, "%s(input, other) takes no keepdim", A->fname);
      return t_minmax(L, at, is_min ? IR_MIN : IR_MAX, x, a[0]);
    }
    if (!a[0] || a[0]->k == PV_NONE) {
      if (a[1]) lower_error(L, at, "%s(): keepdim needs a dim", A->fname);
      if (is_min) return t_amin(L, at, x, NULL, 0, 0);
      PV *r = t_reduce(L, at, IR_REDUCE_MAX, x, NULL, 0, 0, 0);
      return x->t->type.dtype == DT_BOOL ? t_cast(L, at, r, DT_BOOL) : r;   /* bool stays bool */
    }
    return t_max_dim(L, at, x, a[0], a[1] ? arg_bool(L, at, a[1], "keepdim") : 0, is_min);
  }
  case BI_T_SOFTMAX:
  case BI_T_LOG_SOFTMAX: {
    bind_args(L, A, "dim=,_stacklevel=,dtype=", a);
    if (!a[0] || a[0]->k == PV_NONE)
      lower_error(L, at, "%s without dim is deprecated in PyTorch; pass dim explicitly", A->fname);
    PV *in = x;
    if (a[2] && a[2]->k == PV_DTYPE) in = t_cast(L, at, x, a[2]->dt);
    return t_softmax(L, at, in, arg_int(L, at, a[0], "dim"), bi == BI_T_LOG_SOFTMAX);
  }
  /* A conversion that changes nothing returns the tensor itself, as in PyTorch
   * (y.float().mul_(3) updates y); one that changes the dtype is a new tensor. */
  case BI_T_FLOAT: return convert(L, at, x, DT_F32, 0);
  case BI_T_DOUBLE: return convert(L, at, x, DT_F64, 0);
  case BI_T_LONG: return convert(L, at, x, DT_I64, 0);
  case BI_T_INT: return convert(L, at, x, DT_I32, 0);
  case BI_T_TO: {
    PV *c = kw(A, "copy");
    int copy = c && truthy(L, at, c);
    for (int i = 0; i < A->nargs; i++)
      if (A->args[i]->k == PV_DTYPE) return convert(L, at, x, A->args[i]->dt, copy);
      else if (A->args[i]->k == PV_TENSOR) return convert(L, at, x, A->args[i]->t->type.dtype, copy);
    PV *d = kw(A, "dtype");
    if (d && d->k == PV_DTYPE) return convert(L, at, x, d->dt, copy);
    return convert(L, at, x, t.dtype, copy); /* .to(device) */
  }
  case BI_T_CUDA:
  case BI_T_CPU: return x; /* one device: the CPU the program runs on */
  case BI_T_TYPE_AS:
    bind_args(L, A, "other", a);
    return convert(L, at, x, need_tensor(L, at, a[0], "other")->t->type.dtype, 0);
  case BI_T_TYPE: {   /* x.type(torch.float32 / 'torch.DoubleTensor' / torch.LongTensor), or x.type(): its name */
    bind_args(L, A, "dtype=,non_blocking=", a);
    static const struct { DType dt; const char *name; int cls; } types[] = {
        {DT_F32, "torch.FloatTensor", BI_T_FLOATTENSOR}, {DT_F64, "torch.DoubleTensor", BI_T_DOUBLETENSOR},
        {DT_I64, "torch.LongTensor", BI_T_LONGTENSOR},   {DT_I32, "torch.IntTensor", BI_T_INTTENSOR},
        {DT_BOOL, "torch.BoolTensor", BI_T_BOOLTENSOR},  {DT_F16, "torch.HalfTensor", -1},
        {DT_BF16, "torch.BFloat16Tensor", -1}};
    const int nt = (int)(sizeof types / sizeof types[0]);
    if (!a[0] || a[0]->k == PV_NONE) {
      const DType dt = x->t->low == LOW_BF16 ? DT_BF16 : x->t->low == LOW_F16 ? DT_F16 : t.dtype;
      for (int i = 0; i < nt; i++)
        if (types[i].dt == dt) return pv_str(L, types[i].name);
      lower_error(L, at, "Tensor.type(): no type name for %s", ir_dtype_name(t.dtype));
    }
    if (a[0]->k == PV_DTYPE) return convert(L, at, x, a[0]->dt, 0);
    for (int i = 0; i < nt; i++)
      if ((a[0]->k == PV_STR && !strcmp(a[0]->s, types[i].name)) || (a[0]->k == PV_CLASS && a[0]->bi == types[i].cls))
        return convert(L, at, x, types[i].dt, 0);
    lower_error(L, at, "Tensor.type() takes a dtype or a tensor type name ('torch.FloatTensor', 'torch.DoubleTensor', "
                       "'torch.LongTensor', ...), got %s", pv_kind_name(a[0]));
  }
  case BI_T_TRIL_:
  case BI_T_TRIU_: {   /* the in-place forms: torch.empty(n, n).fill_(-inf).triu_(1) in an __init__ */
    if (x->t->slot && !L->T->fn) lower_error(L, at, "'%s' on a parameter at compile time is not supported", bi_names[bi]);
    PV *r = call_value(L, at, bi_lookup(L, NS_TENSOR, bi == BI_T_TRIL_ ? "tril" : "triu", x), A->args, A->nargs,
                       A->kwnames, A->kwvals, A->nkw);
    if (x->t->data && !L->T->fn) {   /* a compile-time tensor: its values replaced */
      memcpy(x->t->data, r->t->data, sizeof(double) * (size_t)ir_numel(&t));
      return x;
    }
    return t_inplace(L, at, x, r);
  }
  case BI_T_MASKED_FILL:
    bind_args(L, A, "mask,value", a);
    if (L->T->dec && L->T->fn) {
      PV *r = dec_masked_fill(L, at, x, need_tensor(L, at, a[0], "mask"), a[1]);
      if (r) return r;
    }
    return t_cast(L, at, t_where(L, at, need_tensor(L, at, a[0], "mask"), a[1], x), t.dtype);
  case BI_T_SPLIT:
  case BI_T_CHUNK:
    bind_args(L, A, bi == BI_T_SPLIT ? "split_size_or_sections,dim=" : "chunks,dim=", a);
    return split(L, at, x, a[0], a[1] ? arg_int(L, at, a[1], "dim") : 0, bi == BI_T_CHUNK);
  case BI_T_UNBIND: { /* the slices along dim, that dim removed */
    bind_args(L, A, "dim=", a);
    int64_t d = t_norm_dim(L, at, a[0] ? arg_int(L, at, a[0], "dim") : 0, t.ndim);
    int64_t rest[IR_MAX_DIMS];
    for (int i = 0, k = 0; i < t.ndim; i++)
      if (i != d) rest[k++] = t.dims[i];
    PV *out = pv_tuple(L, NULL, 0);
    eval_charge(L, at, t.dims[d]);
    for (int64_t i = 0; i < t.dims[d]; i++)
      pv_list_append(L, out, t_reshape(L, at, t_slice(L, at, x, (int)d, i, i + 1, 1), rest, t.ndim - 1));
    return out;
  }
  case BI_T_EQ:
    bind_args(L, A, "other", a);
    return t_compare(L, at, OP_EQ, x, a[0]);
  case BI_T_NEW_ZEROS:
  case BI_T_NEW_ONES: {
    int n = shape_args(L, &(Args){at, A->args, A->nargs, NULL, NULL, 0, A->fname}, 0, dims);
    Args K = strip_factory_kw(L, A);
    if (K.nkw) lower_error(L, at, "%s() got an unexpected keyword argument '%s'", A->fname, K.kwnames[0]);
    Type r = t;
    r.dtype = dtype_kw(L, A, t.dtype);
    r.ndim = n;
    for (int i = 0; i < n; i++) r.dims[i] = dims[i];
    return t_const_tensor(L, at, r, bi == BI_T_NEW_ONES);
  }
  case BI_T_ITEM:
    if (x->t->data && !x->t->slot) return ct_number(L, at, x);   /* a compile-time tensor's value, known here too */
    if (L->T->loop_entry)
      lower_error(L, at, "'.item()' reads a tensor's value on the host, which the loop body compiled as entry '%s' "
                         "cannot do: there it can only be logged (print, an `if` of logging lines, `total += "
                         "loss.item()`), lines ctc drops; use the tensor itself", L->T->loop_entry);
    /* In a training function, `return loss.item()` hands the scalar to the caller. */
    if (L->T->fn && L->T->fn->kind != FK_FORWARD && t.ndim == 0) return x;
    /* fall through */
  case BI_T_TOLIST:
    if (ct_applies(L, x, NULL)) return ct_tolist(L, at, x);
    /* fall through */
  case BI_T_NUMPY:
    lower_error(L, at, "'.%s()' reads a tensor's value on the host; that cannot be compiled into the model "
                       "(compute it in the driver from the output instead)", bi_names[bi]);
  case BI_T_BACKWARD: return tensor_backward(L, x, A);
  case BI_T_FILL_:
  case BI_T_ADD_:
  case BI_T_MUL_:
  case BI_T_ZERO_:
    if (x->t->slot && !L->T->fn) {   /* p.zero_() / p.data.fill_(0.01) in __init__: how _init fills it */
      if (bi == BI_T_ADD_ || bi == BI_T_MUL_) {   /* p.data.mul_(head_init_scale) (ConvNeXt): the fill scaled */
        bind_args(L, A, bi == BI_T_ADD_ ? "other,alpha=" : "other", a);
        if (!pv_is_num(a[0]))
          lower_error(L, at, "'%s' on a parameter at compile time takes a number (it changes how the parameter is "
                             "initialised), got %s", bi_names[bi], pv_kind_name(a[0]));
        const double v = pv_num(a[0]) * (bi == BI_T_ADD_ && a[1] ? arg_num(L, at, a[1], "alpha") : 1);
        slot_affine(L, at, x->t->slot, bi == BI_T_MUL_ ? v : 1, bi == BI_T_ADD_ ? v : 0, bi_names[bi]);
        return x;
      }
      bind_args(L, A, bi == BI_T_ZERO_ ? "" : "value", a);
      PV *init_args[2] = {x, a[0]};
      Args C = *A;   /* as nn.init.zeros_(p) / constant_(p, value) */
      C.args = init_args, C.nargs = bi == BI_T_ZERO_ ? 1 : 2, C.nkw = 0;
      return init_fn(L, bi == BI_T_ZERO_ ? BI_I_ZEROS_ : BI_I_CONSTANT_, &C);
    }
    bind_args(L, A, bi == BI_T_ZERO_ ? "" : bi == BI_T_FILL_ ? "value" : "other", a);
    if ((bi == BI_T_ZERO_ || bi == BI_T_FILL_) && !L->T->fn && x->t->data) {   /* torch.empty(n).zero_() in __init__ */
      double v = bi == BI_T_ZERO_ ? 0 : arg_num(L, at, a[0], "value");
      for (int64_t i = 0; i < ir_numel(&t); i++) x->t->data[i] = v;
      return x;
    }
    if (bi == BI_T_ZERO_) return t_inplace(L, at, x, t_const_tensor(L, at, t, 0));
    if (bi == BI_T_FILL_) return t_inplace(L, at, x, t_const_tensor(L, at, t, arg_num(L, at, a[0], "value")));
    return t_inplace(L, at, x, t_binary(L, at, bi == BI_T_ADD_ ? OP_ADD : OP_MUL, x, a[0]));
  case BI_T_REPEAT: {
    int n = shape_args(L, A, 0, dims);
    return t_repeat(L, at, x, dims, n);
  }
  default: break;
  }
  lower_error(L, at, "'%s' is not supported on tensors by ctc", A->fname);
}


/* torch.nn.functional (relu, tanh, sigmoid, softmax, log_softmax are torch.def rows
 * shared with torch and Tensor methods: tensor_fn) */
PV *bi_functional(L *L, PV *fn, Args *A) {
  PV *a[8];
  Span at = A->at;
  int bi = fn->bi;
  switch (bi) {
  case BI_F_LEAKY_RELU: {
    bind_args(L, A, "input,negative_slope=,inplace=", a);
    PV *x = need_tensor(L, at, a[0], "input");
    double s = a[1] ? arg_num(L, at, a[1], "negative_slope") : 0.01;
    return maybe_inplace(L, at, a[2], x, t_where(L, at, t_compare(L, at, OP_GT, x, pv_float(L, 0)), x, t_binary(L, at, OP_MUL, x, pv_float(L, s))));
  }
  case BI_F_GELU: {
    bind_args(L, A, "input,approximate=", a);
    int tanh_approx = 0;
    if (a[1]) {
      if (a[1]->k != PV_STR || (strcmp(a[1]->s, "tanh") && strcmp(a[1]->s, "none")))
        lower_error(L, at, "gelu approximate must be 'none' or 'tanh'");
      tanh_approx = !strcmp(a[1]->s, "tanh");
    }
    return t_gelu(L, at, need_tensor(L, at, a[0], "input"), tanh_approx);
  }
  case BI_F_SILU: {
    bind_args(L, A, "input,inplace=", a);
    PV *x = need_tensor(L, at, a[0], "input");
    return maybe_inplace(L, at, a[1], x, t_binary(L, at, OP_MUL, x, t_unary(L, at, IR_SIGMOID, x)));
  }
  case BI_F_MAX_POOL2D: return pool(L, A, IR_MAXPOOL2D);
  case BI_F_AVG_POOL2D: return pool(L, A, IR_AVGPOOL2D);
  case BI_F_ADAPTIVE_AVG_POOL2D:
    bind_args(L, A, "input,output_size", a);
    return t_adaptive_avg_pool2d(L, at, need_tensor(L, at, a[0], "input"), a[1]);
  case BI_F_MAX_POOL1D: return pool_nd(L, A, IR_MAXPOOL2D, 1);
  case BI_F_AVG_POOL1D: return pool_nd(L, A, IR_AVGPOOL2D, 1);
  case BI_F_ADAPTIVE_MAX_POOL1D: return adaptive_max_pool(L, A, 1);
  case BI_F_ADAPTIVE_MAX_POOL2D: return adaptive_max_pool(L, A, 2);
  case BI_F_ADAPTIVE_AVG_POOL1D: {   /* as 2-D to [1, L_out] */
    bind_args(L, A, "input,output_size", a);
    PV *x = need_tensor(L, at, a[0], "input");
    if (x->t->type.ndim != 2 && x->t->type.ndim != 3)
      lower_error(L, at, "adaptive_avg_pool1d expects a 2-D or 3-D input, got shape %s", shape_str(L, &x->t->type));
    int64_t o;
    arg_ints(L, at, a[1], &o, 1, "output_size");
    PV *size[2] = {pv_int(L, 1), pv_int(L, o)};
    PV *x4 = height1(L, at, x, 1);
    if (x4->t->type.ndim == 3) {   /* unbatched [C, L]: a batch of one */
      int64_t dims[4] = {1, x4->t->type.dims[0], 1, x4->t->type.dims[2]};
      PV *r = t_adaptive_avg_pool2d(L, at, t_reshape(L, at, x4, dims, 4), pv_tuple(L, size, 2));
      int64_t back[2] = {x->t->type.dims[0], o};
      return t_reshape(L, at, r, back, 2);
    }
    return height1(L, at, t_adaptive_avg_pool2d(L, at, x4, pv_tuple(L, size, 2)), -1);
  }
  case BI_F_LINEAR:
    bind_args(L, A, "input,weight,bias=", a);
    return t_linear(L, at, need_tensor(L, at, a[0], "input"), need_tensor(L, at, a[1], "weight"), a[2]);
  case BI_F_DROPOUT:
    bind_args(L, A, "input,p=,training=,inplace=", a);
    return t_dropout(L, at, need_tensor(L, at, a[0], "input"), a[1] ? arg_num(L, at, a[1], "p") : 0.5,
                     a[2] ? arg_bool(L, at, a[2], "training") : 1);
  case BI_F_LAYER_NORM: {
    bind_args(L, A, "input,normalized_shape,weight=,bias=,eps=", a);
    int64_t ns[IR_MAX_DIMS];
    int n = arg_ints(L, at, a[1], ns, IR_MAX_DIMS, "normalized_shape");
    PV *x = need_tensor(L, at, a[0], "input");
    Type t = x->t->type;
    for (int i = 0; i < n; i++)
      if (n > t.ndim || t.dims[t.ndim - n + i] != ns[i])
        lower_error(L, at, "layer_norm: normalized_shape does not match the last dimensions of input %s", shape_str(L, &t));
    return t_layer_norm(L, at, x, n, a[2], a[3], a[4] ? arg_num(L, at, a[4], "eps") : 1e-5);
  }
  case BI_F_EMBEDDING:
    bind_args(L, A, "input,weight,padding_idx=,max_norm=,norm_type=,scale_grad_by_freq=,sparse=", a);
    if (a[3] && a[3]->k != PV_NONE) lower_error(L, at, "embedding max_norm is not supported");
    if (a[5] && arg_bool(L, at, a[5], "scale_grad_by_freq")) lower_error(L, at, "embedding scale_grad_by_freq is not supported");
    if (a[6] && arg_bool(L, at, a[6], "sparse") && a[1]->k == PV_TENSOR && a[1]->t->slot) a[1]->t->slot->sparse_grad = 1;
    return t_embedding(L, at, need_tensor(L, at, a[1], "weight"), need_tensor(L, at, a[0], "input"), a[2]);
  default: break;
  }
  lower_error(L, at, "F.%s is not supported by ctc yet", A->fname);
}

/* ---- grad mode and stop-gradient ------------------------------------------- */

void grad_mode_set(L *L, int mode) {
  L->T->grad_mode = mode;
  if (L->T->fn) L->T->fn->grad_mode = mode;
}

static PV *grad_mode_ctx(L *L, int bi, Args *A) {
  PV *a[1];
  PV *c = pv_builtin(L, BI_T_GRAD_MODE, bi_names[bi], NULL);
  c->n = -1;
  switch (bi) {
  case BI_T_NO_GRAD: bind_args(L, A, "", a); c->i = NG_REVERSE; break;
  case BI_T_ENABLE_GRAD: bind_args(L, A, "", a); c->i = NG_NONE; break;
  case BI_T_INFERENCE_MODE:
    bind_args(L, A, "mode=", a);
    c->i = !a[0] || arg_bool(L, A->at, a[0], "mode") ? NG_ALL : L->T->grad_mode;
    break;
  default: /* set_grad_enabled: switches when called, restores on leaving a `with` */
    bind_args(L, A, "mode", a);
    c->i = arg_bool(L, A->at, a[0], "mode") ? NG_NONE : NG_REVERSE;
    c->n = L->T->grad_mode;
    grad_mode_set(L, (int)c->i);
    break;
  }
  return c;
}

/* A new tensor object on the same compile-time data (in-place updates are refused
 * at compile time, so sharing the data is safe); parameters have no data yet: their
 * detach() is an alias of the parameter that requires no gradient (torch.func's
 * `{k: v.detach() for k, v in model.named_parameters()}`), read as the parameter
 * in compiled code. */
static PV *compile_time_copy(L *L, Span at, PV *x, const char *what) {
  if (x->t->slot && strcmp(what, "detach"))
    lower_error(L, at, "%s() of a parameter outside compiled code is not supported", what);
  Tensor *t = arena_alloc(L->a, sizeof *t);
  *t = *x->t;
  t->requires_grad = 0;
  if (t->slot) t->is_data = 1;   /* an alias: requires_grad is its own, in-place updates are refused */
  return pv_tensor(L, t);
}

PV *t_detach(L *L, Span at, PV *x) {
  if (x->k != PV_TENSOR) lower_error(L, at, "detach() needs a tensor, got '%s'", pv_kind_name(x));
  if (!L->T->fn) return compile_time_copy(L, at, x, "detach"); /* compile time: no autograd */
  ValId v = t_val(L, at, x);
  return t_wrap(L, ir_emit(L->T->prog, L->T->fn, IR_DETACH, &v, 1, *ir_type(L->T->fn, v), NULL, 0, 0, at,
                           ir_val(L->T->fn, v)->name));
}

void tensor_setattr(L *L, Span at, PV *t, const char *name, PV *val) {
  if (strcmp(name, "requires_grad") != 0)
    lower_error(L, at, "setting '.%s' of a tensor is not supported by ctc", name);
  int rg = arg_bool(L, at, val, "requires_grad");
  if (t->t->slot && t->t->is_data && !L->T->fn)
    lower_error(L, at, "setting requires_grad of a detached parameter outside compiled code is not supported");
  if (t->t->slot) {
    if (t->t->slot->is_buffer && rg) lower_error(L, at, "a buffer cannot require gradients in ctc");
    if (L->T->fn) lower_error(L, at, "change requires_grad of parameters in __init__ or at module level, "
                                  "not inside a compiled function");
    t->t->slot->frozen = !rg;
    t->t->requires_grad = rg;
    return;
  }
  if (!rg && L->T->fn && t->t->v >= 0 && ir_dtype_is_float(t->t->type.dtype)) /* a constant from here on */
    t->t->v = t_val(L, at, t_detach(L, at, t));
  t->t->requires_grad = rg;
}

/* a parameter's value read by code outside compiled functions: opaque (the value is
 * known only at run time, after <model>_init and any training) */
PV *param_opaque(L *L, Span at, const char *expr) {
  PV *o = pv_opaque(L, at, expr);
  o->what = arena_printf(L->a, "value '%s' of a parameter read at line %d outside compiled code (parameters have "
                               "values only at run time)", expr, at.line);
  return o;
}

PV *tensor_getattr(L *L, Span at, PV *t, const char *name) {
  if (!strcmp(name, "shape")) {
    PV *r = pv_tuple(L, NULL, 0);
    for (int i = 0; i < t->t->type.ndim; i++) pv_list_append(L, r, pv_int(L, t->t->type.dims[i]));
    return r;
  }
  if (!strcmp(name, "dtype")) return pv_dtype(L, t->t->type.dtype);
  if (!strcmp(name, "ndim")) return pv_int(L, t->t->type.ndim);
  if (!strcmp(name, "mT") || !strcmp(name, "mH")) {
    if (t->t->type.ndim < 2) lower_error(L, at, "tensor.%s is only supported on matrices or batches of matrices", name);
    return t_mark_view(L, t, t_transpose(L, at, t, -2, -1));
  }
  if (!strcmp(name, "T"))
    return t_mark_view(L, t, t_permute(L, at, t, (int64_t[]){1, 0}, t->t->type.ndim == 2 ? 2 : -1));
  if (!strcmp(name, "data")) {
    if (!L->T->fn) return t; /* compile time (__init__): the tensor itself, for in-place initialisation */
    PV *d = t_detach(L, at, t);
    d->t->is_data = 1;
    return d;
  }
  if (!strcmp(name, "device")) return pv_str(L, "cpu");
  if (!strcmp(name, "is_cuda") || !strcmp(name, "is_mps") || !strcmp(name, "is_xpu")) return pv_bool(L, 0); /* ctc compiles for the CPU */
  if (!strcmp(name, "requires_grad"))
    return pv_bool(L, t->t->slot && !t->t->is_data ? !t->t->slot->is_buffer && !t->t->slot->frozen : t->t->requires_grad);
  if (!strcmp(name, "grad")) return param_grad(L, at, t);
  if (!L->T->fn && t->t->slot && !t->t->data) {
    /* script code reading a parameter's values (regression's poly_desc(fc.weight.view(-1), ...)
     * after its training loop): they exist only at run time, so the result is opaque */
    static const char *const reads[] = {"view", "reshape", "flatten", "t", "item", "tolist", "numpy", "cpu",
                                        "squeeze", "unsqueeze", "clone", "norm", "sum", "mean", "abs", "max",
                                        "min", "std", "var", "argmax", "argmin", "__format__"};
    for (size_t i = 0; i < sizeof reads / sizeof *reads; i++)
      if (!strcmp(name, reads[i])) return param_opaque(L, at, arena_printf(L->a, "<parameter>.%s", name));
  }
  return bi_lookup(L, NS_TENSOR, name, t);
}

/* The rows of torch.def in torch, Tensor methods (and F for those shared). */
PV *bi_torch(L *L, PV *fn, Args *A) {
  int bi = fn->bi;
  switch (bi) {
  case BI_T_ZEROS: case BI_T_EMPTY: case BI_T_ONES: case BI_T_FULL: case BI_T_RANDN: case BI_T_RAND:
  case BI_T_RANDINT: case BI_T_ARANGE: case BI_T_LINSPACE: case BI_T_EYE: case BI_T_TENSOR: case BI_T_ZEROS_LIKE: case BI_T_ONES_LIKE:
  case BI_T_FULL_LIKE:
    return factory(L, bi, A);
  case BI_T_TRIL:
  case BI_T_TRIU:
    if (fn->self) {
      Args B = *A;
      PV **args = arena_alloc(L->a, sizeof(PV *) * (size_t)(A->nargs + 1));
      args[0] = fn->self;
      for (int i = 0; i < A->nargs; i++) args[i + 1] = A->args[i];
      B.args = args;
      B.nargs++;
      return factory(L, bi, &B);
    }
    return factory(L, bi, A);
  case BI_T_MANUAL_SEED:
  case BI_T_SET_NUM_THREADS: return pv_none(L);
  case BI_T_NO_GRAD:
  case BI_T_ENABLE_GRAD:
  case BI_T_SET_GRAD_ENABLED:
  case BI_T_INFERENCE_MODE: return grad_mode_ctx(L, bi, A);
  case BI_T_IS_GRAD_ENABLED: return pv_bool(L, L->T->grad_mode == NG_NONE);
  case BI_T_GRAD_MODE: lower_error(L, A->at, "a grad-mode context manager is not callable");
  case BI_T_VIEW: case BI_T_RESHAPE: case BI_T_FLATTEN: case BI_T_SQUEEZE: case BI_T_UNSQUEEZE:
  case BI_T_TRANSPOSE: case BI_T_PERMUTE: case BI_T_T: case BI_T_SPLIT: case BI_T_CHUNK: case BI_T_EXPAND:
  case BI_T_UNBIND: case BI_T_DETACH: { /* views share storage with their input in PyTorch */
    PV *base = fn->self ? fn->self : A->nargs ? A->args[0] : NULL;
    PV *r = tensor_fn(L, fn, A);
    return base ? t_mark_view(L, base, r) : r;
  }
  default: return tensor_fn(L, fn, A);
  }
}
