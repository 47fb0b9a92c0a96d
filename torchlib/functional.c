/* functional.c - the differentiation APIs users call inside compiled functions:
 * torch.autograd.functional (jvp, vjp, hvp, vhp, jacobian, hessian),
 * torch.autograd.forward_ad (dual_level, make_dual, unpack_dual) and torch.func
 * (grad, grad_and_value, vjp, jvp, jacrev, jacfwd, hessian, vmap). All are staged
 * with autograd_ad's transforms: ad_reverse (VJP), ad_forward (JVP) and ad_batch
 * (vmap's batch axis); Hessian-vector products are forward over reverse; a
 * jacobian is one sweep whose seed (the cotangent, or the tangent) is batched
 * over the identity basis, so its code is linear in the sizes. Only where some
 * primitive of the sweep has no batching rule (ir/batch.def) is it unrolled one
 * direction at a time, as before. */
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

/* ---- pytrees: torch.func's arguments and results are tensors nested in tuples,
 * lists and dicts (a model's parameters as {name: tensor}) ---- */

static int is_node(const PV *x) { return x->k == PV_TUPLE || x->k == PV_LIST || x->k == PV_DICT; }

/* x's leaves (every value that is no tuple, list or dict), in order, appended to out */
static void tree_leaves(L *L, Span at, PV *x, PV *out) {
  eval_charge(L, at, 1);
  if (!is_node(x)) pv_list_append(L, out, x);
  else
    for (int i = 0; i < x->n; i++) tree_leaves(L, at, x->items[i], out);
}

/* x's structure with its leaves replaced by leaves[*k], leaves[*k + 1] ... */
static PV *tree_build(L *L, Span at, PV *x, PV **leaves, int *k) {
  if (!is_node(x)) return leaves[(*k)++];
  if (x->k == PV_DICT) {
    PV *d = pv_dict(L);
    for (int i = 0; i < x->n; i++) pv_dict_set(L, at, d, x->keys[i], tree_build(L, at, x->items[i], leaves, k));
    return d;
  }
  PV **items = arena_alloc(L->a, sizeof(PV *) * (size_t)(x->n + 1));
  for (int i = 0; i < x->n; i++) items[i] = tree_build(L, at, x->items[i], leaves, k);
  return x->k == PV_TUPLE ? pv_tuple(L, items, x->n) : pv_list(L, items, x->n);
}

/* One dim per leaf of x (appended to out) from dims, a prefix of x's structure:
 * an int or None applies to every leaf below it, a tuple/list or dict matches x's
 * items (vmap's in_dims and out_dims). */
static void tree_dims(L *L, Span at, PV *x, PV *dim, PV *out, const char *what) {
  if (!dim || !is_node(dim)) {
    PV *leaves = pv_list(L, NULL, 0);
    tree_leaves(L, at, x, leaves);
    for (int i = 0; i < leaves->n; i++) pv_list_append(L, out, dim ? dim : pv_none(L));
    return;
  }
  if (!is_node(x) || (dim->k == PV_DICT) != (x->k == PV_DICT))
    lower_error(L, at, "vmap: %s gives a %s for a '%s'", what, pv_kind_name(dim), pv_kind_name(x));
  if (dim->n != x->n) lower_error(L, at, "vmap: %s has %d entries for a %s of %d", what, dim->n, pv_kind_name(x), x->n);
  for (int i = 0; i < x->n; i++) {
    PV *d = dim->items[i];
    if (dim->k == PV_DICT) {
      d = pv_dict_get(dim, x->keys[i]);
      if (!d) lower_error(L, at, "vmap: %s has no entry for key %s", what, pv_repr(L, at, x->keys[i]));
    }
    tree_dims(L, at, x->items[i], d, out, what);
  }
}

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

/* d out / d xs[i] for every i, shaped out.shape + xs[i].shape, one sweep per
 * direction (where the batched sweep is refused) */
static PV **jacobian_unrolled(L *L, Span at, PV *out, PV **xs, int n, int forward) {
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

/* ---- batched sweeps ------------------------------------------------------------ */

/* A stand-in for a seed (a tangent or a cotangent of type t): zeros that no
 * simplification takes for a constant; ad_batch replaces it by the basis. */
static ValId placeholder(L *L, Span at, const Type *t) {
  ValId z = ir_const(L->T->prog, L->T->fn, t->dtype, 0, at);
  if (t->ndim) z = ir_emit(L->T->prog, L->T->fn, IR_BROADCAST, &z, 1, *t, NULL, 0, 0, at, "direction");
  return ir_emit(L->T->prog, L->T->fn, IR_RESHAPE, &z, 1, *t, NULL, 0, 0, at, "direction");
}

/* The identity basis over t's elements, shaped [numel(t)] + t: entry k is the
 * one-hot tensor of flat index k. */
static ValId basis(L *L, Span at, const Type *t) {
  int64_t n = ir_numel(t), d[2] = {n, 1}, dims[IR_MAX_DIMS];
  Type it = {0};
  it.dtype = DT_I64;
  it.ndim = 1;
  it.dims[0] = n;
  int64_t ia[2] = {0, 1};
  PV *iota = t_wrap(L, ir_emit(L->T->prog, L->T->fn, IR_IOTA, NULL, 0, it, ia, 2, 0, at, "index"));
  PV *eye = t_cast(L, at, t_compare(L, at, OP_EQ, t_reshape(L, at, iota, d, 2), iota), t->dtype);
  dims[0] = n;
  memcpy(dims + 1, t->dims, sizeof(int64_t) * (size_t)t->ndim);
  return t_val(L, at, t_reshape(L, at, eye, dims, t->ndim + 1));
}

/* v of shape [numel(lead)] + each as each + lead (forward mode's columns) */
static PV *lead_to_back(L *L, Span at, ValId v, const Type *lead, const Type *each) {
  int64_t nl = ir_numel(lead), ne = ir_numel(each), d[2] = {nl, ne}, perm[2] = {1, 0}, dims[2 * IR_MAX_DIMS];
  PV *m = t_permute(L, at, t_reshape(L, at, t_wrap(L, v), d, 2), perm, 2);
  int nd = 0;
  for (int i = 0; i < each->ndim; i++) dims[nd++] = each->dims[i];
  for (int i = 0; i < lead->ndim; i++) dims[nd++] = lead->dims[i];
  return t_reshape(L, at, m, nd ? dims : NULL, nd);
}

/* v of shape [numel(lead)] + each as lead + each (reverse mode's rows) */
static PV *lead_split(L *L, Span at, ValId v, const Type *lead, const Type *each) {
  int64_t dims[2 * IR_MAX_DIMS];
  int nd = 0;
  for (int i = 0; i < lead->ndim; i++) dims[nd++] = lead->dims[i];
  for (int i = 0; i < each->ndim; i++) dims[nd++] = each->dims[i];
  return t_reshape(L, at, t_wrap(L, v), nd ? dims : NULL, nd);
}

static int too_many_dims(const Type *a, const Type *b) {
  return a->ndim + b->ndim > IR_MAX_DIMS || a->ndim + 1 > IR_MAX_DIMS;
}

/* d out / d xs[i] by one sweep batched over the identity basis: reverse mode
 * seeds the cotangent with every one-hot of out at once, forward mode the
 * tangent of each input with every one-hot of it. NULL where a primitive of
 * the sweep has no batching rule (the caller unrolls then). */
static PV **jacobian_batched(L *L, Span at, PV *out, PV **xs, int n, int forward) {
  Program *P = L->T->prog;
  Func *F = L->T->fn;
  Type to = out->t->type;
  ValId ov = t_val(L, at, out), *xv = vals(L, at, xs, n);
  PV **J = arena_alloc(L->a, sizeof(PV *) * (size_t)n);
  for (int i = 0; i < n; i++)
    if (too_many_dims(&to, &xs[i]->t->type) || xs[i]->t->type.ndim + 1 > IR_MAX_DIMS) return NULL;
  int base = F->insts.len; /* the primal code: sweeps walk it alone */
  if (forward) {
    for (int i = 0; i < n; i++) {
      Type ti = xs[i]->t->type;
      ValId E = basis(L, at, &ti), ph = placeholder(L, at, &ti), t, bt;
      int from = F->insts.len;
      AdSeed s = {xv[i], ph};
      ad_forward(P, F, base, &s, 1, &ov, 1, &t, 0);
      if (ad_batch(P, F, from, &ph, &E, 1, ir_numel(&ti), &t, 1, &bt, NULL) >= 0) return NULL;
      J[i] = lead_to_back(L, at, bt, &ti, &to);
    }
    return J;
  }
  ValId E = basis(L, at, &to), ph = placeholder(L, at, &to);
  ValId *g = arena_alloc(L->a, sizeof(ValId) * (size_t)n), *bg = arena_alloc(L->a, sizeof(ValId) * (size_t)n);
  int from = F->insts.len;
  AdSeed s = {ov, ph};
  ad_reverse_upto(P, F, base, &s, 1, xv, n, g, NULL);
  if (ad_batch(P, F, from, &ph, &E, 1, ir_numel(&to), g, n, bg, NULL) >= 0) return NULL;
  for (int i = 0; i < n; i++) J[i] = lead_split(L, at, bg[i], &to, &xs[i]->t->type);
  return J;
}

static PV **jacobian_of(L *L, Span at, PV *out, PV **xs, int n, int forward) {
  PV **J = jacobian_batched(L, at, out, xs, n, forward);
  return J ? J : jacobian_unrolled(L, at, out, xs, n, forward);
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

/* hessian_of unrolled: one forward sweep per input element (g: the gradients) */
static PV *hessian_unrolled(L *L, Span at, PV **xs, int n, int single, int as_reverse, ValId *g) {
  ValId *xv = vals(L, at, xs, n);
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

/* Hessian blocks H[i][k] = d2 out / dxs[i] dxs[k], by forward over reverse: one
 * forward sweep per input k, its tangent batched over k's identity basis. */
/* as_reverse: the forward sweep stands for PyTorch's double backward
 * (torch.autograd.functional.hessian), so no_grad() blocks it (ad_forward) */
static PV *hessian_of(L *L, Span at, PV *out, PV **xs, int n, int single, int as_reverse) {
  Program *P = L->T->prog;
  Func *F = L->T->fn;
  ValId *g = grads_of(L, at, out, xs, n), *xv = vals(L, at, xs, n);
  int base = F->insts.len; /* primal + gradient code: what each sweep differentiates */
  PV ***H = arena_alloc(L->a, sizeof(PV **) * (size_t)n);
  for (int i = 0; i < n; i++) H[i] = arena_alloc(L->a, sizeof(PV *) * (size_t)n);
  ValId *t = arena_alloc(L->a, sizeof(ValId) * (size_t)n), *bt = arena_alloc(L->a, sizeof(ValId) * (size_t)n);
  for (int k = 0; k < n; k++) {
    Type tk = xs[k]->t->type;
    for (int i = 0; i < n; i++)
      if (too_many_dims(&xs[i]->t->type, &tk)) return hessian_unrolled(L, at, xs, n, single, as_reverse, g);
    ValId E = basis(L, at, &tk), ph = placeholder(L, at, &tk);
    int from = F->insts.len;
    AdSeed s = {xv[k], ph};
    ad_forward(P, F, base, &s, 1, g, n, t, as_reverse);
    if (ad_batch(P, F, from, &ph, &E, 1, ir_numel(&tk), t, n, bt, NULL) >= 0)
      return hessian_unrolled(L, at, xs, n, single, as_reverse, g);
    for (int i = 0; i < n; i++) H[i][k] = lead_to_back(L, at, bt[i], &tk, &xs[i]->t->type);
  }
  PV **rowsH = arena_alloc(L->a, sizeof(PV *) * (size_t)n);
  for (int i = 0; i < n; i++) rowsH[i] = pv_tuple(L, H[i], n);
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
    /* vectorize only changes how PyTorch batches the sweeps; ctc always batches them */
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

/* ---- torch.func.vmap -------------------------------------------------------------- */

/* vmap's batched inputs, as the pass needs them */
typedef struct VmapIn {
  int n, cap;
  ValId *ph, *bx;   /* the unbatched stand-in f is staged with; the tensor with the batch in front */
  int64_t B;        /* -1 until the first batched input */
} VmapIn;

/* One sample of x (its in_dim d removed), recorded with x moved to batch-first. */
static PV *vmap_input(L *L, Span at, PV *x, PV *dim, VmapIn *vi) {
  if (x->k != PV_TENSOR)
    lower_error(L, at, "vmap: in_dims gives a dimension for an argument that is not a tensor ('%s')", pv_kind_name(x));
  if (dim->k != PV_INT) lower_error(L, at, "vmap: in_dims entries must be an int or None, got '%s'", pv_kind_name(dim));
  Type t = x->t->type;
  int64_t d = dim->i < 0 ? dim->i + t.ndim : dim->i;
  if (t.ndim == 0 || d < 0 || d >= t.ndim)
    lower_error(L, at, "vmap: in_dim %lld is out of range for a tensor of %d dimensions", (long long)dim->i, t.ndim);
  if (vi->B >= 0 && t.dims[d] != vi->B)
    lower_error(L, at, "vmap: the batched inputs have different sizes along their in_dims (%lld and %lld)",
                (long long)vi->B, (long long)t.dims[d]);
  vi->B = t.dims[d];
  int64_t dims[IR_MAX_DIMS], perm[IR_MAX_DIMS];
  int nd = 0;
  perm[0] = d;
  for (int i = 0; i < t.ndim; i++)
    if (i != d) {
      perm[1 + nd] = i;
      dims[nd++] = t.dims[i];
    }
  PV *bx = d == 0 ? x : t_permute(L, at, x, perm, t.ndim);
  PV *one = t_reshape(L, at, t_slice(L, at, x, (int)d, 0, 1, 1), nd ? dims : NULL, nd);
  ValId ov = t_val(L, at, one); /* a value of its own (the pass batches its uses) */
  Type ot = *ir_type(L->T->fn, ov);
  PV *ph = t_wrap(L, ir_emit(L->T->prog, L->T->fn, IR_RESHAPE, &ov, 1, ot, NULL, 0, 0, at, "sample"));
  if (vi->n == vi->cap) {
    int cap = vi->cap ? 2 * vi->cap : 8;
    ValId *a = arena_alloc(L->a, sizeof(ValId) * (size_t)cap), *b = arena_alloc(L->a, sizeof(ValId) * (size_t)cap);
    if (vi->n) {
      memcpy(a, vi->ph, sizeof(ValId) * (size_t)vi->n);
      memcpy(b, vi->bx, sizeof(ValId) * (size_t)vi->n);
    }
    vi->ph = a;
    vi->bx = b;
    vi->cap = cap;
  }
  vi->ph[vi->n] = t_val(L, at, ph);
  vi->bx[vi->n++] = t_val(L, at, bx);
  return ph;
}

/* an argument with its in_dims: a tensor, or tensors nested in tuples, lists and
 * dicts with one dim for all or a matching structure of dims (tree_dims) */
static PV *vmap_arg(L *L, Span at, PV *x, PV *dim, VmapIn *vi) {
  if (!dim || dim->k == PV_NONE) return x;
  PV *leaves = pv_list(L, NULL, 0), *dims = pv_list(L, NULL, 0);
  tree_leaves(L, at, x, leaves);
  tree_dims(L, at, x, dim, dims, "in_dims");
  for (int i = 0; i < leaves->n; i++)
    if (dims->items[i]->k != PV_NONE) leaves->items[i] = vmap_input(L, at, leaves->items[i], dims->items[i], vi);
  int k = 0;
  return tree_build(L, at, x, leaves->items, &k);
}

/* A batched result [B] + shape with the batch moved to out_dim. */
static PV *vmap_output(L *L, Span at, ValId v, PV *dim) {
  if (dim && dim->k == PV_NONE) lower_error(L, at, "vmap: out_dims=None is not supported");
  if (dim && dim->k != PV_INT) lower_error(L, at, "vmap: out_dims entries must be ints, got '%s'", pv_kind_name(dim));
  PV *y = t_wrap(L, v);
  int nd = y->t->type.ndim;
  int64_t d = dim ? dim->i : 0;
  if (d < 0) d += nd;
  if (d < 0 || d >= nd)
    lower_error(L, at, "vmap: out_dim %lld is out of range for a result of %d dimensions", (long long)(dim ? dim->i : 0),
                nd);
  if (d == 0) return y;
  int64_t perm[IR_MAX_DIMS];
  /* result axis i reads: axis 0 at d, otherwise the next of the rest */
  for (int i = 0, r = 1; i < nd; i++) perm[i] = i == d ? 0 : r++;
  return t_permute(L, at, y, perm, nd);
}

/* vmap(f, in_dims, out_dims, randomness)(*args): f staged once on one sample of
 * each batched argument, then every instruction that depends on them batched by
 * ad_batch (their batching rules, ir/batch.def). */
static PV *apply_vmap(L *L, PV *self, Args *A) {
  Span at = A->at;
  need_fn_ctx(L, at, "torch.func.vmap");
  if (A->nkw) lower_error(L, at, "keyword arguments to a vmapped function are not supported");
  PV *f = self->items[1], *ind = self->items[2], *outd = self->items[3], *rnd = self->items[4];
  int na = A->nargs;
  if ((ind->k == PV_TUPLE || ind->k == PV_LIST) && ind->n != na)
    lower_error(L, at, "vmap: in_dims has %d entries for %d arguments", ind->n, na);
  int same = 0;
  if (rnd && rnd->k != PV_NONE) {
    if (rnd->k != PV_STR || (strcmp(rnd->s, "error") && strcmp(rnd->s, "same") && strcmp(rnd->s, "different")))
      lower_error(L, at, "vmap: randomness must be 'error', 'same' or 'different'");
    if (!strcmp(rnd->s, "different")) lower_error(L, at, "vmap: randomness='different' is not supported (use 'same')");
    same = !strcmp(rnd->s, "same");
  }
  VmapIn vi = {0, 0, NULL, NULL, -1};
  PV **args = arena_alloc(L->a, sizeof(PV *) * (size_t)(na + 1));
  for (int j = 0; j < na; j++)
    args[j] = vmap_arg(L, at, A->args[j], ind->k == PV_TUPLE || ind->k == PV_LIST ? ind->items[j] : ind, &vi);
  if (vi.n == 0) lower_error(L, at, "vmap: no input is batched (every in_dims entry is None)");
  Func *F = L->T->fn;
  int from = F->insts.len;
  PV *out = call_value(L, at, f, args, na, NULL, NULL, 0);
  PV *leaves = pv_list(L, NULL, 0), *dims = pv_list(L, NULL, 0);
  tree_leaves(L, at, out, leaves);
  int no = leaves->n;
  ValId *ov = arena_alloc(L->a, sizeof(ValId) * (size_t)(no + 1));
  ValId *bo = arena_alloc(L->a, sizeof(ValId) * (size_t)(no + 1));
  for (int i = 0; i < no; i++) {
    if (leaves->items[i]->k != PV_TENSOR)
      lower_error(L, at, "vmap: the function must return tensors (alone or in tuples, lists and dicts), got '%s'",
                  pv_kind_name(leaves->items[i]));
    ov[i] = t_val(L, at, leaves->items[i]);
  }
  for (int i = from; i < F->insts.len; i++)
    if (F->insts.data[i].op == IR_RAND_UNIFORM && !same)
      lower_error(L, F->insts.data[i].loc,
                  "vmap: a random operation inside vmap needs randomness='same' (PyTorch's default 'error' refuses it)");
  const char *why = NULL;
  int bad = ad_batch(L->T->prog, F, from, vi.ph, vi.bx, vi.n, vi.B, ov, no, bo, &why);
  if (bad >= 0) {
    const Inst *in = &F->insts.data[bad];
    lower_error(L, in->loc, "vmap cannot batch '%s' here: %s (in the function vmapped at line %d)", ir_ops[in->op].name,
                why ? why : "no batching rule", at.line);
  }
  if (is_node(outd) && (!is_node(out) || outd->n != out->n))
    lower_error(L, at, "vmap: out_dims has %d entries for %d outputs", outd->n, is_node(out) ? out->n : 1);
  tree_dims(L, at, out, outd, dims, "out_dims");
  PV **r = arena_alloc(L->a, sizeof(PV *) * (size_t)(no + 1));
  for (int i = 0; i < no; i++) r[i] = vmap_output(L, at, bo[i], dims->items[i]);
  int k = 0;
  return tree_build(L, at, out, r, &k);
}

/* ---- torch.func ------------------------------------------------------------------ */

/* A transformed function: self = (kind, f, argnums, has_aux). */
static PV *transform(L *L, int kind, PV *f, PV *argnums, int has_aux) {
  PV *items[4] = {pv_int(L, kind), f, argnums ? argnums : pv_int(L, 0), pv_bool(L, has_aux)};
  return pv_builtin(L, BI_TF_APPLY, "<transformed function>", pv_tuple(L, items, 4));
}

/* grad, grad_and_value, jacrev, jacfwd, hessian applied: the arguments argnums
 * names (tensors, or tensors nested in tuples, lists and dicts: each leaf is an
 * input) become fresh inputs; the result has each such argument's structure with
 * a gradient (jacobian) per leaf. has_aux: f returns (output, aux), and aux is
 * returned beside the result as PyTorch does. */
static PV *apply_transform(L *L, PV *self, Args *A) {
  Span at = A->at;
  if (self->items[0]->i == BI_TF_VMAP) return apply_vmap(L, self, A);
  need_fn_ctx(L, at, "a torch.func transform");
  if (A->nkw) lower_error(L, at, "keyword arguments to a transformed function are not supported");
  int kind = (int)self->items[0]->i, has_aux = self->items[3]->i != 0;
  PV *f = self->items[1], *argnums = self->items[2];
  int64_t an[8];
  int nan_ = arg_ints(L, at, argnums, an, 8, "argnums"), single = argnums->k == PV_INT;
  PV **args = arena_alloc(L->a, sizeof(PV *) * (size_t)(A->nargs + 1));
  memcpy(args, A->args, sizeof(PV *) * (size_t)A->nargs);
  PV *xl = pv_list(L, NULL, 0);   /* the leaves of every differentiated argument, fresh */
  int start[9];
  for (int i = 0; i < nan_; i++) {
    if (an[i] < 0 || an[i] >= A->nargs) lower_error(L, at, "argnums %lld is out of range", (long long)an[i]);
    start[i] = xl->n;
    tree_leaves(L, at, A->args[an[i]], xl);
    for (int k = start[i]; k < xl->n; k++) xl->items[k] = fresh(L, at, xl->items[k]);
    int k = start[i];
    args[an[i]] = tree_build(L, at, A->args[an[i]], xl->items, &k);
  }
  start[nan_] = xl->n;
  PV **xs = xl->items, *res = call_value(L, at, f, args, A->nargs, NULL, NULL, 0), *out = res, *aux = NULL;
  if (has_aux) {
    if ((res->k != PV_TUPLE && res->k != PV_LIST) || res->n != 2)
      lower_error(L, at, "has_aux=True: the function must return a pair (output, aux), got '%s'", pv_kind_name(res));
    out = res->items[0];
    aux = res->items[1];
  }
  if (out->k != PV_TENSOR)
    lower_error(L, at, "the function to differentiate must return a tensor%s, got '%s'", has_aux ? " (and aux)" : "",
                pv_kind_name(out));
  int nx = xl->n;
  PV **g;
  switch (kind) {
  case BI_TF_GRAD:
  case BI_TF_GRAD_AND_VALUE:
    need_scalar(L, at, out, "grad");
    g = wrap_all(L, grads_of(L, at, out, xs, nx), nx);
    break;
  case BI_TF_JACREV:
  case BI_TF_JACFWD: g = jacobian_of(L, at, out, xs, nx, kind == BI_TF_JACFWD); break;
  default:
    need_scalar(L, at, out, "hessian");
    for (int i = 0; i < nan_; i++)
      if (A->args[an[i]]->k != PV_TENSOR)
        lower_error(L, at, "hessian of a '%s' argument is not supported (give tensors)", pv_kind_name(A->args[an[i]]));
    return hessian_of(L, at, out, xs, nx, single, 0); /* jacfwd(jacrev) */
  }
  PV **per = arena_alloc(L->a, sizeof(PV *) * (size_t)(nan_ + 1));
  for (int i = 0; i < nan_; i++) {
    int k = start[i];
    per[i] = tree_build(L, at, A->args[an[i]], g, &k);
  }
  PV *r = pack(L, per, nan_, single);
  if (kind == BI_TF_GRAD_AND_VALUE) {
    PV *va[2] = {out, aux};
    PV *rv[2] = {r, has_aux ? pv_tuple(L, va, 2) : out};
    return pv_tuple(L, rv, 2);
  }
  if (!has_aux) return r;
  PV *ra[2] = {r, aux};
  return pv_tuple(L, ra, 2);
}

static PV *torch_func(L *L, PV *fn, Args *A) {
  PV *a[4] = {0};
  Span at = A->at;
  switch (fn->bi) {
  case BI_TF_GRAD:
  case BI_TF_GRAD_AND_VALUE:
  case BI_TF_JACREV:
  case BI_TF_JACFWD:
  case BI_TF_HESSIAN:
    if (fn->bi == BI_TF_HESSIAN) bind_args(L, A, "func,argnums=", a);   /* PyTorch's hessian has no has_aux */
    else bind_args(L, A, "func,argnums=,has_aux=", a);
    return transform(L, fn->bi, a[0], a[1], fn->bi != BI_TF_HESSIAN && a[2] && truthy(L, at, a[2]));
  case BI_TF_VMAP: {
    PV *v[5];
    bind_args(L, A, "func,in_dims=,out_dims=,randomness=,chunk_size=", v);
    PV *items[5] = {pv_int(L, BI_TF_VMAP), v[0], v[1] ? v[1] : pv_int(L, 0), v[2] ? v[2] : pv_int(L, 0), v[3]};
    if (!v[3]) items[4] = pv_none(L);
    return pv_builtin(L, BI_TF_APPLY, "<vmapped function>", pv_tuple(L, items, 5));
  }
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
