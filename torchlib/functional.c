/* functional.c - the differentiation APIs users call inside compiled functions:
 * torch.autograd.functional (jvp, vjp, hvp, vhp, jacobian, hessian),
 * torch.autograd.forward_ad (dual_level, make_dual, unpack_dual) and torch.func
 * (grad, grad_and_value, vjp, jvp, jacrev, jacfwd, hessian). All are staged
 * with autograd_ad's two transforms: ad_reverse (VJP) and ad_forward (JVP);
 * Hessian-vector products are forward over reverse; jacobians are unrolled one
 * direction at a time (one forward sweep per input element, or one reverse
 * sweep per output element). */
#include <string.h>
#include "../autograd_ad/autograd.h"
#include "torch_int.h"

/* A fresh IR value equal to x, so that differentiation sees the function's
 * inputs as independent variables (values computed from x earlier are constants
 * for the transform, as in PyTorch). */
static PV *fresh(L *L, Span at, PV *x) {
  if (x->k != PV_TENSOR) lower_error(L, at, "inputs to differentiate must be tensors, got '%s'", pv_kind_name(x));
  ValId v = t_val(L, at, x);
  if (!ir_dtype_is_float(ir_type(L->T->fn, v)->dtype)) lower_error(L, at, "only floating-point tensors can be differentiated");
  return t_wrap(L, ir_emit(L->T->prog, L->T->fn, IR_RESHAPE, &v, 1, *ir_type(L->T->fn, v), NULL, 0, 0, at, ir_val(L->T->fn, v)->name));
}

/* inputs: a tensor or a tuple/list of tensors -> fresh copies; *single says which */
static int fresh_inputs(L *L, Span at, PV *in, PV ***out, int *single) {
  PV **items;
  int n;
  *single = in->k == PV_TENSOR;
  if (*single) {
    items = &in;
    n = 1;
  } else
    n = iter_items(L, at, in, &items);
  if (n == 0) lower_error(L, at, "no inputs to differentiate");
  PV **r = arena_alloc(L->a, sizeof(PV *) * (size_t)n);
  for (int i = 0; i < n; i++) r[i] = fresh(L, at, items[i]);
  *out = r;
  return n;
}

/* v: a tensor or tuple matching the inputs' (or outputs') shapes */
static void seeds_like(L *L, Span at, PV *v, PV **like, int n, ValId *out, const char *what) {
  PV **items = &v;
  int nv = 1;
  if (v->k != PV_TENSOR) nv = iter_items(L, at, v, &items);
  if (nv != n) lower_error(L, at, "%s has %d tensors, expected %d", what, nv, n);
  for (int i = 0; i < n; i++) {
    out[i] = t_val(L, at, items[i]);
    Type a = *ir_type(L->T->fn, out[i]), b = like[i]->t->type;
    if (!ir_type_eq(&a, &b)) {
      if (a.ndim != b.ndim || ir_numel(&a) != ir_numel(&b) || memcmp(a.dims, b.dims, sizeof(int64_t) * (size_t)a.ndim))
        lower_error(L, at, "%s %d has shape %s, expected %s", what, i, shape_str(L, &a), shape_str(L, &b));
      out[i] = t_val(L, at, t_cast(L, at, items[i], b.dtype));
    }
  }
}

static PV *pack(L *L, PV **xs, int n, int single) { return single ? xs[0] : pv_tuple(L, xs, n); }

static PV *call_f(L *L, Span at, PV *f, PV **xs, int n) {
  PV *r = call_value(L, at, f, xs, n, NULL, NULL, 0);
  if (r->k != PV_TENSOR) lower_error(L, at, "the function to differentiate must return a tensor, got '%s'", pv_kind_name(r));
  return r;
}

static ValId *vals(L *L, Span at, PV **xs, int n) {
  ValId *v = arena_alloc(L->a, sizeof(ValId) * (size_t)(n + 1));
  for (int i = 0; i < n; i++) v[i] = t_val(L, at, xs[i]);
  return v;
}

static PV **wrap_all(L *L, const ValId *v, int n) {
  PV **r = arena_alloc(L->a, sizeof(PV *) * (size_t)(n + 1));
  for (int i = 0; i < n; i++) r[i] = t_wrap(L, v[i]);
  return r;
}

/* the one-hot tensor of type t with a 1 at flat index k */
static ValId one_hot(L *L, Span at, const Type *t, int64_t k) {
  int64_t n = ir_numel(t);
  Type it = {0};
  it.dtype = DT_I64;
  it.ndim = 1;
  it.dims[0] = n;
  int64_t ia[2] = {0, 1};
  PV *iota = t_wrap(L, ir_emit(L->T->prog, L->T->fn, IR_IOTA, NULL, 0, it, ia, 2, 0, at, "index"));
  PV *oh = t_cast(L, at, t_compare(L, at, OP_EQ, iota, pv_int(L, k)), t->dtype);
  if (t->ndim == 0) return t_val(L, at, t_reshape(L, at, oh, NULL, 0));
  return t_val(L, at, t_reshape(L, at, oh, t->dims, t->ndim));
}

/* Lay n tensors of shape `each` side by side into shape lead + each (rows, one per
 * flat index of lead) or each + lead (columns). */
static PV *assemble(L *L, Span at, PV **parts, int n, const Type *lead, const Type *each, int rows) {
  if (lead->ndim + each->ndim > IR_MAX_DIMS) lower_error(L, at, "the jacobian would have too many dimensions");
  int64_t ne = ir_numel(each);
  PV **flat = arena_alloc(L->a, sizeof(PV *) * (size_t)n);
  for (int i = 0; i < n; i++) {
    int64_t d[2] = {rows ? 1 : ne, rows ? ne : 1};
    flat[i] = t_reshape(L, at, parts[i], d, 2);
  }
  PV *m = t_concat(L, at, flat, n, rows ? 0 : 1);
  int64_t dims[2 * IR_MAX_DIMS];
  int nd = 0;
  const Type *first = rows ? lead : each, *second = rows ? each : lead;
  for (int i = 0; i < first->ndim; i++) dims[nd++] = first->dims[i];
  for (int i = 0; i < second->ndim; i++) dims[nd++] = second->dims[i];
  if (nd == 0) return t_reshape(L, at, m, NULL, 0);
  return t_reshape(L, at, m, dims, nd);
}

/* d out / d xs[i] for every i, shaped out.shape + xs[i].shape */
static PV **jacobian_of(L *L, Span at, PV *out, PV **xs, int n, int forward) {
  Type to = out->t->type;
  ValId ov = t_val(L, at, out), *xv = vals(L, at, xs, n);
  PV **J = arena_alloc(L->a, sizeof(PV *) * (size_t)n);
  if (forward) {
    int base = L->T->fn->insts.len; /* the primal code; later sweeps must not see earlier ones */
    for (int i = 0; i < n; i++) {
      Type ti = xs[i]->t->type;
      int64_t ni = ir_numel(&ti);
      PV **cols = arena_alloc(L->a, sizeof(PV *) * (size_t)ni);
      for (int64_t k = 0; k < ni; k++) {
        AdSeed s = {xv[i], one_hot(L, at, &ti, k)};
        ValId t;
        ad_forward(L->T->prog, L->T->fn, base, &s, 1, &ov, 1, &t, 0);
        cols[k] = t_wrap(L, t);
      }
      J[i] = assemble(L, at, cols, (int)ni, &ti, &to, 0);
    }
    return J;
  }
  int64_t no = ir_numel(&to);
  PV ***rows = arena_alloc(L->a, sizeof(PV **) * (size_t)n);
  for (int i = 0; i < n; i++) rows[i] = arena_alloc(L->a, sizeof(PV *) * (size_t)no);
  ValId *g = arena_alloc(L->a, sizeof(ValId) * (size_t)n);
  int base = L->T->fn->insts.len;   /* the primal code: each sweep walks it alone */
  for (int64_t k = 0; k < no; k++) {
    AdSeed s = {ov, one_hot(L, at, &to, k)};
    ad_reverse_upto(L->T->prog, L->T->fn, base, &s, 1, xv, n, g, NULL);
    for (int i = 0; i < n; i++) rows[i][k] = t_wrap(L, g[i]);
  }
  for (int i = 0; i < n; i++) J[i] = assemble(L, at, rows[i], (int)no, &to, &xs[i]->t->type, 1);
  return J;
}

static void need_scalar(L *L, Span at, PV *out, const char *fn) {
  if (out->t->type.ndim != 0)
    lower_error(L, at, "%s needs a function with a scalar output, but it returns shape %s", fn, shape_str(L, &out->t->type));
}

/* gradients of the scalar out with respect to xs */
static ValId *grads_of(L *L, Span at, PV *out, PV **xs, int n) {
  ValId *g = arena_alloc(L->a, sizeof(ValId) * (size_t)n);
  AdSeed s = {t_val(L, at, out), -1};
  ad_reverse(L->T->prog, L->T->fn, &s, 1, vals(L, at, xs, n), n, g, NULL);
  return g;
}

/* Hessian blocks H[i][k] = d2 out / dxs[i] dxs[k], by forward over reverse. */
/* as_reverse: the forward sweep stands for PyTorch's double backward
 * (torch.autograd.functional.hessian), so no_grad() blocks it (ad_forward) */
static PV *hessian_of(L *L, Span at, PV *out, PV **xs, int n, int single, int as_reverse) {
  ValId *g = grads_of(L, at, out, xs, n), *xv = vals(L, at, xs, n);
  int base = L->T->fn->insts.len; /* primal + gradient code: what each sweep differentiates */
  PV **rowsH = arena_alloc(L->a, sizeof(PV *) * (size_t)n);
  for (int i = 0; i < n; i++) {
    PV **blocks = arena_alloc(L->a, sizeof(PV *) * (size_t)n);
    for (int k = 0; k < n; k++) {
      Type tk = xs[k]->t->type, ti = xs[i]->t->type;
      int64_t nk = ir_numel(&tk);
      PV **cols = arena_alloc(L->a, sizeof(PV *) * (size_t)nk);
      for (int64_t j = 0; j < nk; j++) {
        AdSeed s = {xv[k], one_hot(L, at, &tk, j)};
        ValId t;
        ad_forward(L->T->prog, L->T->fn, base, &s, 1, &g[i], 1, &t, as_reverse);
        cols[j] = t_wrap(L, t);
      }
      blocks[k] = assemble(L, at, cols, (int)nk, &tk, &ti, 0);
    }
    rowsH[i] = pv_tuple(L, blocks, n);
  }
  return single ? rowsH[0]->items[0] : pv_tuple(L, rowsH, n);
}

static void need_fn_ctx(L *L, Span at, const char *what) {
  if (!L->T->fn) lower_error(L, at, "%s must be called inside a compiled function (an entry)", what);
}

/* torch.autograd.functional.* */
static PV *autograd_functional(L *L, int bi, Args *A) {
  PV *a[6];
  Span at = A->at;
  const char *fname = bi_names[bi];
  need_fn_ctx(L, at, fname);
  switch (bi) {
  case BI_AF_JVP:
  case BI_AF_VJP:
  case BI_AF_HVP:
  case BI_AF_VHP:
    bind_args(L, A, "func,inputs,v=,create_graph=,strict=", a);
    break;
  case BI_AF_JACOBIAN: bind_args(L, A, "func,inputs,create_graph=,strict=,vectorize=,strategy=", a); break;
  default: bind_args(L, A, "func,inputs,create_graph=,strict=,vectorize=,outer_jacobian_strategy=", a); break;
  }
  int single;
  PV **xs;
  int n = fresh_inputs(L, at, a[1], &xs, &single);
  PV *out = call_f(L, at, a[0], xs, n);
  switch (bi) {
  case BI_AF_VJP: {
    ValId seed = -1;
    if (a[2] && a[2]->k != PV_NONE) seeds_like(L, at, a[2], &out, 1, &seed, "v");
    else need_scalar(L, at, out, "vjp without v");
    ValId *g = arena_alloc(L->a, sizeof(ValId) * (size_t)n);
    AdSeed s = {t_val(L, at, out), seed};
    ad_reverse(L->T->prog, L->T->fn, &s, 1, vals(L, at, xs, n), n, g, NULL);
    PV *r[2] = {out, pack(L, wrap_all(L, g, n), n, single)};
    return pv_tuple(L, r, 2);
  }
  case BI_AF_JVP: {
    ValId *seeds = arena_alloc(L->a, sizeof(ValId) * (size_t)n);
    if (a[2] && a[2]->k != PV_NONE) seeds_like(L, at, a[2], xs, n, seeds, "v");
    else if (n == 1 && xs[0]->t->type.ndim == 0) seeds[0] = t_val(L, at, t_scalar_like(L, at, 1, xs[0]->t->type.dtype));
    else lower_error(L, at, "jvp needs v unless the input is a single scalar");
    AdSeed *s = arena_alloc(L->a, sizeof(AdSeed) * (size_t)n);
    ValId *xv = vals(L, at, xs, n);
    for (int i = 0; i < n; i++) s[i] = (AdSeed){xv[i], seeds[i]};
    ValId ov = t_val(L, at, out), t;
    ad_forward(L->T->prog, L->T->fn, -1, s, n, &ov, 1, &t, 1); /* PyTorch: double backward */
    PV *r[2] = {out, t_wrap(L, t)};
    return pv_tuple(L, r, 2);
  }
  case BI_AF_HVP:
  case BI_AF_VHP: {
    /* forward over reverse; for a twice-differentiable scalar function the Hessian is
     * symmetric, so v^T H (vhp) equals H v (hvp) */
    need_scalar(L, at, out, fname);
    if (!a[2] || a[2]->k == PV_NONE) lower_error(L, at, "%s needs v", fname);
    ValId *seeds = arena_alloc(L->a, sizeof(ValId) * (size_t)n);
    seeds_like(L, at, a[2], xs, n, seeds, "v");
    ValId *g = grads_of(L, at, out, xs, n), *xv = vals(L, at, xs, n), *hv = arena_alloc(L->a, sizeof(ValId) * (size_t)n);
    AdSeed *s = arena_alloc(L->a, sizeof(AdSeed) * (size_t)n);
    for (int i = 0; i < n; i++) s[i] = (AdSeed){xv[i], seeds[i]};
    ad_forward(L->T->prog, L->T->fn, -1, s, n, g, n, hv, 1);
    PV *r[2] = {out, pack(L, wrap_all(L, hv, n), n, single)};
    return pv_tuple(L, r, 2);
  }
  case BI_AF_JACOBIAN: {
    int forward = 0;
    if (a[5]) {
      if (a[5]->k != PV_STR || (strcmp(a[5]->s, "reverse-mode") && strcmp(a[5]->s, "forward-mode")))
        lower_error(L, at, "strategy must be 'reverse-mode' or 'forward-mode'");
      forward = !strcmp(a[5]->s, "forward-mode");
    }
    /* vectorize only changes how PyTorch batches the sweeps; ctc unrolls them */
    return pack(L, jacobian_of(L, at, out, xs, n, forward), n, single);
  }
  default:
    need_scalar(L, at, out, "hessian");
    return hessian_of(L, at, out, xs, n, single, 1);
  }
}

/* ---- torch.autograd.forward_ad ---------------------------------------------- */

static PV *forward_ad(L *L, int bi, Args *A) {
  PV *a[3];
  Span at = A->at;
  need_fn_ctx(L, at, bi_names[bi]);
  if (bi == BI_FW_DUAL_LEVEL) return pv_builtin(L, BI_FW_DUAL_LEVEL, "dual_level", NULL);
  if (bi == BI_FW_MAKE_DUAL) {
    bind_args(L, A, "tensor,tangent,level=", a);
    PV *d = fresh(L, at, a[0]);
    ValId t;
    seeds_like(L, at, a[1], &d, 1, &t, "tangent");
    vec_push(L->a, &L->T->dual_primal, t_val(L, at, d));
    vec_push(L->a, &L->T->dual_tangent, t);
    return d;
  }
  bind_args(L, A, "tensor,level=", a);
  if (a[0]->k != PV_TENSOR) lower_error(L, at, "unpack_dual needs a tensor");
  ValId v = t_val(L, at, a[0]), t;
  AdSeed *s = arena_alloc(L->a, sizeof(AdSeed) * (size_t)(L->T->dual_primal.len + 1));
  for (int i = 0; i < L->T->dual_primal.len; i++) s[i] = (AdSeed){L->T->dual_primal.data[i], L->T->dual_tangent.data[i]};
  ad_forward(L->T->prog, L->T->fn, -1, s, L->T->dual_primal.len, &v, 1, &t, 0);
  PV *r[2] = {a[0], t_wrap(L, t)};
  PV *tup = pv_tuple(L, r, 2);
  tup->bi = BI_FW_UNPACK_DUAL; /* .primal / .tangent */
  return tup;
}

/* ---- torch.func ------------------------------------------------------------------ */

/* A transformed function: self = (kind, f, argnums). */
static PV *transform(L *L, int kind, PV *f, PV *argnums) {
  PV *items[3] = {pv_int(L, kind), f, argnums ? argnums : pv_int(L, 0)};
  return pv_builtin(L, BI_TF_APPLY, "<transformed function>", pv_tuple(L, items, 3));
}

static PV *apply_transform(L *L, PV *self, Args *A) {
  Span at = A->at;
  need_fn_ctx(L, at, "a torch.func transform");
  if (A->nkw) lower_error(L, at, "keyword arguments to a transformed function are not supported");
  int kind = (int)self->items[0]->i;
  PV *f = self->items[1], *argnums = self->items[2];
  int64_t an[8];
  int nan_ = arg_ints(L, at, argnums, an, 8, "argnums"), single = argnums->k == PV_INT;
  PV **args = arena_alloc(L->a, sizeof(PV *) * (size_t)(A->nargs + 1));
  memcpy(args, A->args, sizeof(PV *) * (size_t)A->nargs);
  PV **xs = arena_alloc(L->a, sizeof(PV *) * 8);
  for (int i = 0; i < nan_; i++) {
    if (an[i] < 0 || an[i] >= A->nargs) lower_error(L, at, "argnums %lld is out of range", (long long)an[i]);
    args[an[i]] = xs[i] = fresh(L, at, A->args[an[i]]);
  }
  PV *out = call_f(L, at, f, args, A->nargs);
  switch (kind) {
  case BI_TF_GRAD:
  case BI_TF_GRAD_AND_VALUE: {
    need_scalar(L, at, out, "grad");
    PV *g = pack(L, wrap_all(L, grads_of(L, at, out, xs, nan_), nan_), nan_, single);
    if (kind == BI_TF_GRAD) return g;
    PV *r[2] = {g, out};
    return pv_tuple(L, r, 2);
  }
  case BI_TF_JACREV:
  case BI_TF_JACFWD: return pack(L, jacobian_of(L, at, out, xs, nan_, kind == BI_TF_JACFWD), nan_, single);
  default:
    need_scalar(L, at, out, "hessian");
    return hessian_of(L, at, out, xs, nan_, single, 0); /* jacfwd(jacrev) */
  }
}

static PV *torch_func(L *L, PV *fn, Args *A) {
  PV *a[4];
  Span at = A->at;
  switch (fn->bi) {
  case BI_TF_GRAD:
  case BI_TF_GRAD_AND_VALUE:
  case BI_TF_JACREV:
  case BI_TF_JACFWD:
  case BI_TF_HESSIAN:
    bind_args(L, A, "func,argnums=,has_aux=", a);
    if (a[2] && truthy(L, at, a[2])) lower_error(L, at, "has_aux=True is not supported yet");
    return transform(L, fn->bi, a[0], a[1]);
  case BI_TF_JVP: {
    bind_args(L, A, "func,primals,tangents", a);
    need_fn_ctx(L, at, "torch.func.jvp");
    PV **ps, **ts;
    int np = iter_items(L, at, a[1], &ps), nt = iter_items(L, at, a[2], &ts);
    if (np != nt) lower_error(L, at, "jvp: primals and tangents must have the same length");
    PV **xs = arena_alloc(L->a, sizeof(PV *) * (size_t)(np + 1));
    AdSeed *s = arena_alloc(L->a, sizeof(AdSeed) * (size_t)(np + 1));
    for (int i = 0; i < np; i++) {
      xs[i] = fresh(L, at, ps[i]);
      ValId t;
      seeds_like(L, at, ts[i], &xs[i], 1, &t, "tangent");
      s[i] = (AdSeed){t_val(L, at, xs[i]), t};
    }
    PV *out = call_f(L, at, a[0], xs, np);
    ValId ov = t_val(L, at, out), t;
    ad_forward(L->T->prog, L->T->fn, -1, s, np, &ov, 1, &t, 0);
    PV *r[2] = {out, t_wrap(L, t)};
    return pv_tuple(L, r, 2);
  }
  case BI_TF_VJP: {
    need_fn_ctx(L, at, "torch.func.vjp");
    if (A->nargs < 2 || A->nkw) lower_error(L, at, "torch.func.vjp(func, *primals)");
    int np = A->nargs - 1;
    PV **xs = arena_alloc(L->a, sizeof(PV *) * (size_t)np);
    for (int i = 0; i < np; i++) xs[i] = fresh(L, at, A->args[i + 1]);
    PV *out = call_f(L, at, A->args[0], xs, np);
    PV *items[2] = {out, pv_tuple(L, xs, np)};
    PV *r[2] = {out, pv_builtin(L, BI_TF_VJP_FN, "<vjp function>", pv_tuple(L, items, 2))};
    return pv_tuple(L, r, 2);
  }
  case BI_TF_VJP_FN: {
    bind_args(L, A, "v", a);
    PV *out = fn->self->items[0], *xt = fn->self->items[1];
    ValId seed;
    seeds_like(L, at, a[0], &out, 1, &seed, "cotangent");
    ValId *g = arena_alloc(L->a, sizeof(ValId) * (size_t)xt->n);
    AdSeed s = {t_val(L, at, out), seed};
    ad_reverse(L->T->prog, L->T->fn, &s, 1, vals(L, at, xt->items, xt->n), xt->n, g, NULL);
    return pv_tuple(L, wrap_all(L, g, xt->n), xt->n);
  }
  case BI_TF_APPLY: return apply_transform(L, fn->self, A);
  default: BUG("torch.func %d", fn->bi);
  }
}

PV *bi_autograd_functional(L *L, PV *fn, Args *A) { return autograd_functional(L, fn->bi, A); }
PV *bi_forward_ad(L *L, PV *fn, Args *A) { return forward_ad(L, fn->bi, A); }
PV *bi_torch_func(L *L, PV *fn, Args *A) { return torch_func(L, fn, A); }
