/* torch_more.c - the handlers of issue 15's rows of torch.def (its last block):
 * elementwise ops (log1p ... atan2, remainder, bitwise and logical ops), scans,
 * gathers, arg-reductions and composites (lerp, addcmul, var, std, logsumexp,
 * norm). Each row names its handler here; a row's `arg` is the IR op of the
 * plain elementwise ones. The tensor-level work is in tensor.c (t_divmod ...). */
#include <math.h>
#include <string.h>
#include "torch_int.h"

/* The input tensor of a call: the receiver of a method (x.log1p()), else the
 * first positional argument or `input=` (torch.log1p(x)); A keeps the rest. */
static PV *take_input(L *L, PV *fn, Args *A) {
  if (fn->self) return fn->self;
  if (A->nargs) {
    PV *x = A->args[0];
    A->args++;
    A->nargs--;
    return x;
  }
  for (int i = 0; i < A->nkw; i++)
    if (!strcmp(A->kwnames[i], "input")) {
      PV *x = A->kwvals[i];
      const char **kn = arena_alloc(L->a, sizeof(char *) * (size_t)A->nkw);
      PV **kv = arena_alloc(L->a, sizeof(PV *) * (size_t)A->nkw);
      int n = 0;
      for (int j = 0; j < A->nkw; j++)
        if (j != i) kn[n] = A->kwnames[j], kv[n++] = A->kwvals[j];
      A->kwnames = kn;
      A->kwvals = kv;
      A->nkw = n;
      return x;
    }
  lower_error(L, A->at, "%s() missing the input tensor", A->fname);
}

static PV *input_tensor(L *L, PV *fn, Args *A) {
  PV *x = take_input(L, fn, A);
  need_tensor_arg(L, A->at, x, A->fname);
  return x;
}

/* dim arguments: None (all), an int, or a tuple/list of ints */
static int dims_of(L *L, Span at, PV *v, int64_t *dims) {
  if (!v || v->k == PV_NONE) return 0;
  return arg_ints(L, at, v, dims, IR_MAX_DIMS, "dim");
}

/* torch.X(x) / x.X() for an elementwise primitive (the row's arg) */
PV *bi_ew_unary(L *L, PV *fn, Args *A) {
  Args B = *A;
  PV *x = input_tensor(L, fn, &B), *a[1];
  bind_args(L, &B, "", a);
  Op op = (Op)bi_rows[fn->bi].arg;
  if (op == IR_SIGN || op == IR_TRUNC || op == IR_FLOOR) return t_rounding(L, A->at, op, x);
  return t_unary(L, A->at, op, x);
}

/* torch.X(x, other) / x.X(other) for binary ops */
PV *bi_ew_binary(L *L, PV *fn, Args *A) {
  Args B = *A;
  PV *x = take_input(L, fn, &B), *a[1];
  bind_args(L, &B, "other", a);
  Span at = A->at;
  if (x->k != PV_TENSOR && a[0]->k != PV_TENSOR) need_tensor_arg(L, at, x, A->fname);
  switch ((Op)bi_rows[fn->bi].arg) {
  case IR_REMAINDER: return t_divmod(L, at, '%', x, a[0]);
  case IR_FMOD: return t_divmod(L, at, 'm', x, a[0]);
  case IR_FLOORDIV: return t_divmod(L, at, 'f', x, a[0]);
  case IR_BIT_AND: case IR_BIT_OR: case IR_BIT_XOR: case IR_SHL: case IR_SHR:
    return t_bitwise(L, at, (Op)bi_rows[fn->bi].arg, x, a[0]);
  case IR_ATAN2:
  case IR_COPYSIGN: return t_float_binary(L, at, (Op)bi_rows[fn->bi].arg, x, a[0]);   /* integers promote to float32 */
  default: BUG("bi_ew_binary: row %s", bi_names[fn->bi]);
  }
}

/* bitwise_not and the logical ops (arg: '!', '&', '|', '^') */
PV *bi_logical(L *L, PV *fn, Args *A) {
  Args B = *A;
  PV *x = input_tensor(L, fn, &B), *a[1];
  int kind = bi_rows[fn->bi].arg;
  if (kind == '~') {
    bind_args(L, &B, "", a);
    return t_invert(L, A->at, x);
  }
  if (kind == '!') {
    bind_args(L, &B, "", a);
    return t_logical(L, A->at, '!', x, NULL);
  }
  bind_args(L, &B, "other", a);
  return t_logical(L, A->at, kind, x, a[0]);
}

static void need_ndim(L *L, Span at, PV *x, int nd, const char *fname, const char *what) {
  need_tensor_arg(L, at, x, fname);
  if (x->t->type.ndim != nd)
    lower_error(L, at, "%s: %s must be %d-D, got shape %s", fname, what, nd, shape_str(L, &x->t->type));
}

/* beta * input + alpha * p (PyTorch's addmm family: input is ignored when beta == 0) */
static PV *scaled_sum(L *L, Span at, PV *input, PV *p, PV *beta, PV *alpha) {
  if (alpha && !(pv_is_num(alpha) && pv_num(alpha) == 1)) p = t_binary(L, at, OP_MUL, p, alpha);
  if (beta && pv_is_num(beta) && pv_num(beta) == 0) {
    Type t = input->t->type, r;
    if (ir_broadcast_shapes(&t, &p->t->type, &r) < 0 || r.ndim != p->t->type.ndim)
      lower_error(L, at, "input %s does not broadcast to %s", shape_str(L, &t), shape_str(L, &p->t->type));
    return p;
  }
  PV *i = beta && !(pv_is_num(beta) && pv_num(beta) == 1) ? t_binary(L, at, OP_MUL, input, beta) : input;
  PV *r = t_binary(L, at, OP_ADD, i, p);
  if (r->t->type.ndim != p->t->type.ndim)
    lower_error(L, at, "input %s does not broadcast to %s", shape_str(L, &input->t->type), shape_str(L, &p->t->type));
  return r;
}

static PV *outer(L *L, Span at, PV *a, PV *b) {
  need_ndim(L, at, a, 1, "outer", "input");
  need_ndim(L, at, b, 1, "outer", "vec2");
  int64_t da[2] = {a->t->type.dims[0], 1}, db[2] = {1, b->t->type.dims[0]};
  return t_binary(L, at, OP_MUL, t_reshape(L, at, a, da, 2), t_reshape(L, at, b, db, 2));
}

/* the diagonal of a matrix at offset k: the flattened matrix gathered at k, k + m + 1, ... */
static PV *diagonal2(L *L, Span at, PV *x, int64_t k) {
  Type t = x->t->type;
  int64_t n = t.dims[0], m = t.dims[1];
  int64_t count = k >= 0 ? (n < m - k ? n : m - k) : (n + k < m ? n + k : m);
  if (count <= 0) lower_error(L, at, "diagonal: offset %lld leaves an empty diagonal of a %s matrix, which ctc does not support",
                              (long long)k, shape_str(L, &t));
  int64_t flat = n * m, attr[2] = {k >= 0 ? k : -k * m, m + 1};
  PV *f = t_reshape(L, at, x, &flat, 1);
  Type it = {.dtype = DT_I64, .ndim = 1, .dims = {count}};
  PV *idx = t_wrap(L, ir_emit(L->T->prog, L->T->fn, IR_IOTA, NULL, 0, it, attr, 2, 0, at, "diagonal"));
  return t_gather(L, at, f, 0, idx);
}

/* The rest, by row. */
PV *bi_more(L *L, PV *fn, Args *A) {
  Args B = *A;
  PV *a[8];
  Span at = A->at;
  int bi = fn->bi;
  PV *x = input_tensor(L, fn, &B);
  int64_t dims[IR_MAX_DIMS];
  switch (bi) {
  case BI_T_SGN:
    bind_args(L, &B, "", a);
    return t_rounding(L, at, IR_SIGN, x);
  case BI_T_RECIPROCAL:
    bind_args(L, &B, "", a);
    return t_binary(L, at, OP_DIV, pv_float(L, 1.0), x);
  case BI_T_ROUND: {
    bind_args(L, &B, "decimals=", a);
    return t_round(L, at, x, a[0] ? arg_int(L, at, a[0], "decimals") : 0);
  }
  case BI_T_FRAC:   /* x - trunc(x), derivative 1 (PyTorch) */
    bind_args(L, &B, "", a);
    if (!ir_dtype_is_float(x->t->type.dtype)) lower_error(L, at, "\"frac\" is not implemented for integer tensors");
    return t_binary(L, at, OP_SUB, x, t_unary(L, at, IR_TRUNC, x));
  case BI_T_CEIL:   /* -floor(-x) */
    bind_args(L, &B, "", a);
    if (!ir_dtype_is_float(x->t->type.dtype)) return t_rounding(L, at, IR_TRUNC, x);
    return t_unary(L, at, IR_NEG, t_unary(L, at, IR_FLOOR, t_unary(L, at, IR_NEG, x)));
  case BI_T_CLAMP_MIN:
    bind_args(L, &B, "min", a);
    return t_clamp(L, at, x, a[0], NULL);
  case BI_T_CLAMP_MAX:
    bind_args(L, &B, "max", a);
    return t_clamp(L, at, x, NULL, a[0]);
  case BI_T_LERP:
    bind_args(L, &B, "end,weight", a);
    return t_lerp(L, at, x, a[0], a[1]);
  case BI_T_ADDCMUL:
  case BI_T_ADDCDIV:
    bind_args(L, &B, "tensor1,tensor2,value=", a);
    return t_addc(L, at, x, a[0], a[1], a[2], bi == BI_T_ADDCDIV);
  case BI_T_CUMSUM:
    bind_args(L, &B, "dim,dtype=", a);
    return t_cumsum(L, at, x, arg_int(L, at, a[0], "dim"), a[1]);
  case BI_T_LOGSUMEXP: {
    bind_args(L, &B, "dim,keepdim=", a);
    int n = dims_of(L, at, a[0], dims);
    return t_logsumexp(L, at, x, dims, n, a[1] ? arg_bool(L, at, a[1], "keepdim") : 0);
  }
  case BI_T_VAR:
  case BI_T_STD: {
    /* var(x, dim=None, unbiased=True, keepdim=False, *, correction=None); var(x, unbiased) */
    bind_args(L, &B, "dim=,unbiased=,keepdim=,correction=", a);
    PV *dim = a[0], *unb = a[1];
    if (dim && dim->k == PV_BOOL && !unb) unb = dim, dim = NULL;
    int n = dims_of(L, at, dim, dims);
    double corr = 1;
    if (unb && unb->k != PV_NONE) corr = arg_bool(L, at, unb, "unbiased") ? 1 : 0;
    if (a[3] && a[3]->k != PV_NONE) {
      if (unb && unb->k != PV_NONE) lower_error(L, at, "%s: cannot pass both unbiased and correction", A->fname);
      corr = arg_num(L, at, a[3], "correction");
    }
    return t_var(L, at, x, dims, n, corr, a[2] ? arg_bool(L, at, a[2], "keepdim") : 0, bi == BI_T_STD);
  }
  case BI_T_NORM: {
    bind_args(L, &B, "p=,dim=,keepdim=,dtype=", a);
    double p = 2;
    if (a[0] && a[0]->k == PV_STR) {
      if (strcmp(a[0]->s, "fro")) lower_error(L, at, "norm: p='%s' is not supported (only 'fro' and numbers)", a[0]->s);
    } else if (a[0] && a[0]->k != PV_NONE) {
      p = arg_num(L, at, a[0], "p");
    }
    if (a[3] && a[3]->k == PV_DTYPE) x = t_cast(L, at, x, a[3]->dt);
    int n = dims_of(L, at, a[1], dims);
    return t_norm(L, at, x, p, dims, n, a[2] ? arg_bool(L, at, a[2], "keepdim") : 0);
  }
  case BI_T_ARGMIN:
    bind_args(L, &B, "dim=,keepdim=", a);
    return t_argmax(L, at, x, a[0], a[1] ? arg_bool(L, at, a[1], "keepdim") : 0, 1);
  case BI_T_AMIN: {
    bind_args(L, &B, "dim=,keepdim=", a);
    int n = dims_of(L, at, a[0], dims);
    return t_amin(L, at, x, dims, n, a[1] ? arg_bool(L, at, a[1], "keepdim") : 0);
  }
  case BI_T_GATHER:
    bind_args(L, &B, "dim,index,sparse_grad=", a);
    return t_gather(L, at, x, arg_int(L, at, a[0], "dim"), a[1]);
  case BI_T_SCATTER_ADD:
  case BI_T_SCATTER_ADD_: {
    bind_args(L, &B, "dim,index,src", a);
    PV *r = t_scatter_add(L, at, x, arg_int(L, at, a[0], "dim"), a[1], a[2]);
    return bi == BI_T_SCATTER_ADD_ ? t_inplace(L, at, x, r) : r;
  }
  case BI_T_INDEX_SELECT:
    bind_args(L, &B, "dim,index", a);
    return t_index_select(L, at, x, arg_int(L, at, a[0], "dim"), a[1]);
  case BI_T_TAKE_ALONG_DIM:
    bind_args(L, &B, "indices,dim=", a);
    return t_take_along_dim(L, at, x, a[0], a[1]);
  case BI_T_EXPAND_AS:
  case BI_T_VIEW_AS:
  case BI_T_RESHAPE_AS: {
    bind_args(L, &B, "other", a);
    need_tensor_arg(L, at, a[0], "other");
    Type t = a[0]->t->type;
    PV *r = bi == BI_T_EXPAND_AS ? t_expand_to(L, at, x, t) : t_reshape(L, at, x, t.dims, t.ndim);
    return t_mark_view(L, x, r);   /* views of x, as reshape and expand are */
  }
  case BI_T_DEG2RAD:
  case BI_T_RAD2DEG:
    bind_args(L, &B, "", a);
    return t_binary(L, at, OP_MUL, x, pv_float(L, bi == BI_T_DEG2RAD ? M_PI / 180 : 180 / M_PI));
  case BI_T_POSITIVE:
    bind_args(L, &B, "", a);
    if (x->t->type.dtype == DT_BOOL) lower_error(L, at, "the unary positive operator does not support bool tensors");
    return x;
  case BI_T_TRUE_DIVIDE:
    bind_args(L, &B, "other", a);
    return t_binary(L, at, OP_DIV, x, a[0]);
  case BI_T_RSUB:   /* other - alpha * input */
    bind_args(L, &B, "other,alpha=", a);
    return t_binary(L, at, OP_SUB, a[0], a[1] && !(pv_is_num(a[1]) && pv_num(a[1]) == 1) ? t_binary(L, at, OP_MUL, x, a[1]) : x);
  case BI_T_ISNAN: case BI_T_ISINF: case BI_T_ISPOSINF: case BI_T_ISNEGINF: case BI_T_ISFINITE:
    bind_args(L, &B, "", a);
    return t_isclass(L, at, bi == BI_T_ISNAN ? 'n' : bi == BI_T_ISINF ? 'i' : bi == BI_T_ISPOSINF ? '+' : bi == BI_T_ISNEGINF ? '-' : 'f', x);
  case BI_T_NAN_TO_NUM:
    bind_args(L, &B, "nan=,posinf=,neginf=", a);
    return t_nan_to_num(L, at, x, a[0], a[1], a[2]);
  case BI_T_COUNT_NONZERO: {
    bind_args(L, &B, "dim=", a);
    int n = dims_of(L, at, a[0], dims);
    return t_reduce(L, at, IR_REDUCE_SUM, t_cast(L, at, t_compare(L, at, OP_NE, x, pv_int(L, 0)), DT_I64), dims, n, 0, 0);
  }
  case BI_T_ALL:
  case BI_T_ANY: {
    bind_args(L, &B, "dim=,keepdim=", a);
    int n = dims_of(L, at, a[0], dims);
    return t_anyall(L, at, x, dims, n, a[1] ? arg_bool(L, at, a[1], "keepdim") : 0, bi == BI_T_ALL);
  }
  case BI_T_FLIP: {
    int n;
    if (B.nargs == 1 || B.nkw) {
      bind_args(L, &B, "dims", a);
      n = dims_of(L, at, a[0], dims);
    } else {
      n = B.nargs;
      for (int i = 0; i < n && i < IR_MAX_DIMS; i++) dims[i] = arg_int(L, at, B.args[i], "dims");
    }
    return t_flip(L, at, x, dims, n);
  }
  case BI_T_FLIPLR:
  case BI_T_FLIPUD: {
    bind_args(L, &B, "", a);
    int need = bi == BI_T_FLIPLR ? 2 : 1;
    if (x->t->type.ndim < need) lower_error(L, at, "%s: input must be >= %d-d", A->fname, need);
    dims[0] = bi == BI_T_FLIPLR;
    return t_flip(L, at, x, dims, 1);
  }
  case BI_T_ROLL: {
    bind_args(L, &B, "shifts,dims=", a);
    int64_t sh[IR_MAX_DIMS];
    int ns = arg_ints(L, at, a[0], sh, IR_MAX_DIMS, "shifts");
    int n = dims_of(L, at, a[1], dims);
    return t_roll(L, at, x, sh, ns, dims, n);
  }
  case BI_T_TAKE:
    bind_args(L, &B, "index", a);
    return t_take(L, at, x, a[0]);
  case BI_T_INDEX_ADD:
    bind_args(L, &B, "dim,index,source,alpha=", a);
    return t_index_add(L, at, x, arg_int(L, at, a[0], "dim"), a[1], a[2], a[3]);
  case BI_T_STD_MEAN:
  case BI_T_VAR_MEAN: {
    bind_args(L, &B, "dim=,unbiased=,keepdim=,correction=", a);
    PV *dim = a[0], *unb = a[1];
    if (dim && dim->k == PV_BOOL && !unb) unb = dim, dim = NULL;
    int n = dims_of(L, at, dim, dims);
    double corr = unb && unb->k != PV_NONE ? (arg_bool(L, at, unb, "unbiased") ? 1 : 0) : 1;
    if (a[3] && a[3]->k != PV_NONE) corr = arg_num(L, at, a[3], "correction");
    int keep = a[2] ? arg_bool(L, at, a[2], "keepdim") : 0;
    PV *items[2] = {t_var(L, at, x, dims, n, corr, keep, bi == BI_T_STD_MEAN),
                    x->t->type.ndim ? t_reduce(L, at, IR_REDUCE_SUM, x, dims, n, keep, 1) : x};
    return pv_tuple(L, items, 2);
  }
  case BI_T_AMINMAX: {
    bind_args(L, &B, "dim=,keepdim=", a);
    int n = dims_of(L, at, a[0], dims);
    int keep = a[1] ? arg_bool(L, at, a[1], "keepdim") : 0;
    PV *mx = t_reduce(L, at, IR_REDUCE_MAX, x, dims, n, keep, 0);
    if (x->t->type.dtype == DT_BOOL) mx = t_cast(L, at, mx, DT_BOOL);
    PV *items[2] = {t_amin(L, at, x, dims, n, keep), mx};
    if (x->t->type.ndim == 0 && a[0] && a[0]->k != PV_NONE && keep) {   /* PyTorch: a 0-d input gives [1] here */
      int64_t one = 1;
      items[0] = t_reshape(L, at, items[0], &one, 1);
      items[1] = t_reshape(L, at, items[1], &one, 1);
    }
    PV *r = pv_tuple(L, items, 2);
    r->bi = BI_T_AMINMAX;   /* .min, .max */
    return r;
  }
  case BI_T_NANSUM:
  case BI_T_NANMEAN: {
    bind_args(L, &B, "dim=,keepdim=,dtype=", a);
    int n = dims_of(L, at, a[0], dims);
    int keep = a[1] ? arg_bool(L, at, a[1], "keepdim") : 0;
    if (a[2] && a[2]->k == PV_DTYPE) x = t_cast(L, at, x, a[2]->dt);
    DType dt = x->t->type.dtype;
    if (bi == BI_T_NANMEAN && !ir_dtype_is_float(dt)) lower_error(L, at, "nanmean needs a floating-point tensor");
    if (!ir_dtype_is_float(dt)) return t_reduce(L, at, IR_REDUCE_SUM, t_cast(L, at, x, DT_I64), dims, n, keep, 0);
    PV *isn = t_isclass(L, at, 'n', x);
    PV *s = t_reduce(L, at, IR_REDUCE_SUM, t_where(L, at, isn, pv_float(L, 0), x), dims, n, keep, 0);
    if (bi == BI_T_NANSUM) return s;
    PV *cnt = t_reduce(L, at, IR_REDUCE_SUM, t_cast(L, at, t_logical(L, at, '!', isn, NULL), dt), dims, n, keep, 0);
    return t_binary(L, at, OP_DIV, s, cnt);
  }
  case BI_T_XLOGY:
    bind_args(L, &B, "other", a);
    return t_xlogy(L, at, x, a[0]);
  case BI_T_HYPOT:
    bind_args(L, &B, "other", a);
    need_tensor_arg(L, at, a[0], "hypot");
    return t_unary(L, at, IR_SQRT, t_binary(L, at, OP_ADD, t_binary(L, at, OP_MUL, x, x), t_binary(L, at, OP_MUL, a[0], a[0])));
  case BI_T_LOGADDEXP:
  case BI_T_LOGADDEXP2:
    bind_args(L, &B, "other", a);
    need_tensor_arg(L, at, a[0], "logaddexp");
    if (!ir_dtype_is_float(x->t->type.dtype) || !ir_dtype_is_float(a[0]->t->type.dtype))
      lower_error(L, at, "%s needs floating-point tensors", A->fname);
    return t_logaddexp(L, at, x, a[0], bi == BI_T_LOGADDEXP2);
  case BI_T_HEAVISIDE: {   /* values where x == 0, else x > 0 */
    bind_args(L, &B, "values", a);
    need_tensor_arg(L, at, a[0], "values");
    if (x->t->type.dtype != a[0]->t->type.dtype)
      lower_error(L, at, "heaviside is not yet implemented for tensors with different dtypes");
    PV *pos = t_cast(L, at, t_compare(L, at, OP_GT, x, pv_int(L, 0)), x->t->type.dtype);
    return t_where(L, at, t_compare(L, at, OP_EQ, x, pv_int(L, 0)), a[0], pos);
  }
  case BI_T_FMAX:
  case BI_T_FMIN:
    bind_args(L, &B, "other", a);
    return t_fmaxmin(L, at, x, a[0], bi == BI_T_FMIN);
  case BI_T_FLOAT_POWER: {   /* in float64 */
    bind_args(L, &B, "exponent", a);
    PV *e = a[0]->k == PV_TENSOR ? t_cast(L, at, a[0], DT_F64) : pv_float(L, arg_num(L, at, a[0], "exponent"));
    PV *b = t_cast(L, at, x, DT_F64);
    return t_binary(L, at, OP_POW, b, e);
  }
  case BI_T_REPEAT_INTERLEAVE:
    bind_args(L, &B, "repeats,dim=,output_size=", a);
    if (a[0]->k == PV_TENSOR) lower_error(L, at, "repeat_interleave with a tensor of repeats is not supported (an int is)");
    return t_repeat_interleave(L, at, x, arg_int(L, at, a[0], "repeats"), a[1]);
  case BI_T_DOT:
  case BI_T_VDOT:
    bind_args(L, &B, "other", a);
    need_ndim(L, at, x, 1, A->fname, "input");
    need_ndim(L, at, a[0], 1, A->fname, "other");
    if (x->t->type.dtype != a[0]->t->type.dtype)
      lower_error(L, at, "%s: expected both vectors to have the same dtype, but found %s and %s", A->fname,
                  ir_dtype_name(x->t->type.dtype), ir_dtype_name(a[0]->t->type.dtype));
    return t_matmul(L, at, x, a[0]);
  case BI_T_INNER: {   /* contraction over the last dims */
    bind_args(L, &B, "other", a);
    need_tensor_arg(L, at, a[0], "other");
    Type ta = x->t->type, tb = a[0]->t->type;
    if (ta.ndim == 0 || tb.ndim == 0) return t_binary(L, at, OP_MUL, x, a[0]);
    int64_t k = ta.dims[ta.ndim - 1];
    int64_t d2[2] = {ir_numel(&ta) / k, k}, e2[2] = {ir_numel(&tb) / tb.dims[tb.ndim - 1], tb.dims[tb.ndim - 1]};
    PV *m = t_matmul(L, at, t_reshape(L, at, x, d2, 2), t_transpose(L, at, t_reshape(L, at, a[0], e2, 2), 0, 1));
    int64_t out[IR_MAX_DIMS];
    int n = 0;
    if (ta.ndim - 1 + tb.ndim - 1 > IR_MAX_DIMS) lower_error(L, at, "inner: too many dimensions");
    for (int i = 0; i < ta.ndim - 1; i++) out[n++] = ta.dims[i];
    for (int i = 0; i < tb.ndim - 1; i++) out[n++] = tb.dims[i];
    return t_reshape(L, at, m, out, n);
  }
  case BI_T_OUTER:
  case BI_T_GER:
    bind_args(L, &B, "vec2", a);
    return outer(L, at, x, a[0]);
  case BI_T_MV:
    bind_args(L, &B, "vec", a);
    need_ndim(L, at, x, 2, "mv", "input");
    need_ndim(L, at, a[0], 1, "mv", "vec");
    return t_matmul(L, at, x, a[0]);
  case BI_T_ADDMM:
    bind_args(L, &B, "mat1,mat2,beta=,alpha=", a);
    need_ndim(L, at, a[0], 2, "addmm", "mat1");
    need_ndim(L, at, a[1], 2, "addmm", "mat2");
    return scaled_sum(L, at, x, t_matmul(L, at, a[0], a[1]), a[2], a[3]);
  case BI_T_ADDMV:
    bind_args(L, &B, "mat,vec,beta=,alpha=", a);
    need_ndim(L, at, a[0], 2, "addmv", "mat");
    need_ndim(L, at, a[1], 1, "addmv", "vec");
    return scaled_sum(L, at, x, t_matmul(L, at, a[0], a[1]), a[2], a[3]);
  case BI_T_ADDR:
    bind_args(L, &B, "vec1,vec2,beta=,alpha=", a);
    return scaled_sum(L, at, x, outer(L, at, a[0], a[1]), a[2], a[3]);
  case BI_T_BADDBMM:
  case BI_T_ADDBMM: {
    bind_args(L, &B, "batch1,batch2,beta=,alpha=", a);
    need_ndim(L, at, a[0], 3, A->fname, "batch1");
    need_ndim(L, at, a[1], 3, A->fname, "batch2");
    PV *p = t_matmul(L, at, a[0], a[1]);
    if (bi == BI_T_ADDBMM) {
      int64_t d0 = 0;
      p = t_reduce(L, at, IR_REDUCE_SUM, p, &d0, 1, 0, 0);
    }
    return scaled_sum(L, at, x, p, a[2], a[3]);
  }
  case BI_T_DIFF: {
    bind_args(L, &B, "n=,dim=,prepend=,append=", a);
    int64_t n = a[0] ? arg_int(L, at, a[0], "n") : 1;
    int64_t d = t_norm_dim(L, at, a[1] ? arg_int(L, at, a[1], "dim") : -1, x->t->type.ndim);
    if (x->t->type.ndim == 0) lower_error(L, at, "diff expects input to be at least one-dimensional");
    if (n < 0) lower_error(L, at, "order must be non-negative but got %lld", (long long)n);
    PV *parts[3];
    int np = 0;
    if (a[2] && a[2]->k != PV_NONE) parts[np++] = a[2];
    parts[np++] = x;
    if (a[3] && a[3]->k != PV_NONE) parts[np++] = a[3];
    if (np > 1) x = t_concat(L, at, parts, np, d);
    for (int64_t k = 0; k < n; k++) {
      int64_t len = x->t->type.dims[d];
      if (len <= 1) lower_error(L, at, "diff would give an empty tensor, which ctc does not support");
      PV *hi = t_slice(L, at, x, (int)d, 1, len, 1), *lo = t_slice(L, at, x, (int)d, 0, len - 1, 1);
      x = x->t->type.dtype == DT_BOOL ? t_compare(L, at, OP_NE, hi, lo) : t_binary(L, at, OP_SUB, hi, lo);
    }
    return x;
  }
  case BI_T_DIAGONAL: {
    bind_args(L, &B, "offset=,dim1=,dim2=", a);
    int64_t k = a[0] ? arg_int(L, at, a[0], "offset") : 0;
    if (x->t->type.ndim != 2) lower_error(L, at, "diagonal is supported on 2-D tensors (got shape %s)", shape_str(L, &x->t->type));
    int64_t d1 = t_norm_dim(L, at, a[1] ? arg_int(L, at, a[1], "dim1") : 0, 2);
    int64_t d2 = t_norm_dim(L, at, a[2] ? arg_int(L, at, a[2], "dim2") : 1, 2);
    if (d1 == d2) lower_error(L, at, "diagonal dimensions cannot be identical %lld, %lld", (long long)d1, (long long)d2);
    return t_mark_view(L, x, diagonal2(L, at, d1 == 0 ? x : t_transpose(L, at, x, 0, 1), k));   /* a view in PyTorch */
  }
  case BI_T_DIAG:
    bind_args(L, &B, "diagonal=", a);
    if (x->t->type.ndim != 2)
      lower_error(L, at, "diag is supported on 2-D tensors (a 1-D one would build a matrix), got shape %s",
                  shape_str(L, &x->t->type));
    return diagonal2(L, at, x, a[0] ? arg_int(L, at, a[0], "diagonal") : 0);
  case BI_T_TRACE: {
    bind_args(L, &B, "", a);
    if (x->t->type.ndim != 2) lower_error(L, at, "trace: expected a matrix, but got tensor with dim %d", x->t->type.ndim);
    PV *dg = diagonal2(L, at, x, 0);
    if (!ir_dtype_is_float(dg->t->type.dtype)) dg = t_cast(L, at, dg, DT_I64);
    return t_reduce(L, at, IR_REDUCE_SUM, dg, NULL, 0, 0, 0);
  }
  case BI_F_ONE_HOT: {   /* x[..., None] == arange(num_classes), as int64 */
    bind_args(L, &B, "num_classes=", a);
    int64_t n = a[0] ? arg_int(L, at, a[0], "num_classes") : -1;
    if (n < 0) lower_error(L, at, "one_hot needs num_classes: the default (max label + 1) is a read of the tensor's values");
    if (n == 0) lower_error(L, at, "one_hot with num_classes=0 gives an empty tensor, which ctc does not support");
    if (x->t->type.dtype != DT_I64) lower_error(L, at, "one_hot is only applicable to index tensors (int64)");
    if (x->t->type.ndim + 1 > IR_MAX_DIMS) lower_error(L, at, "one_hot: too many dimensions");
    int64_t attr[2] = {0, 1};
    Type it = {.dtype = DT_I64, .ndim = 1, .dims = {n}};
    PV *classes = t_wrap(L, ir_emit(L->T->prog, L->T->fn, IR_IOTA, NULL, 0, it, attr, 2, 0, at, "classes"));
    int64_t dims2[IR_MAX_DIMS];
    Type t = x->t->type;
    for (int i = 0; i < t.ndim; i++) dims2[i] = t.dims[i];
    dims2[t.ndim] = 1;
    PV *col = t_reshape(L, at, t_checked_index(L, at, x, n, "label"), dims2, t.ndim + 1);   /* classes in [0, n) */
    return t_cast(L, at, t_compare(L, at, OP_EQ, col, classes), DT_I64);
  }
  default: BUG("bi_more: row %s", bi_names[bi]);
  }
}
