/* func_state.c - torch.func's functions of a module's state:
 *
 *   functional_call(module, params_and_buffers, args, kwargs=None)
 *       (also torch.nn.utils.stateless.functional_call, PyTorch 1.13): the module
 *       called with some of its parameters and buffers replaced by the tensors of
 *       a dict (or a tuple of dicts) keyed by their state_dict names. As PyTorch
 *       does, the replacement is a swap of the module's attributes for the call:
 *       its forward (a builtin layer's or the user's) reads them as it reads its
 *       own, so grad and vmap over the dict's tensors differentiate and batch the
 *       forward. Names the dict leaves out keep the module's own tensors.
 *   stack_module_state(models) -> (params, buffers): each parameter (buffer) of N
 *       models of one structure stacked into one tensor [N] + shape, keyed by its
 *       name. At module level (the ensembling tutorial) each stack is a tensor of
 *       its own in the program ("ensemble.<name>", loadable by that name from a
 *       weights file), initialised as the models' tensors are; in compiled code,
 *       the stack of the models' current values.
 *   copy.deepcopy(module): a clone of the module tree (new parameters). */
#include <string.h>
#include "torch_int.h"

/* ---- functional_call -------------------------------------------------------- */

/* one swapped attribute, to restore after the call */
typedef struct Swap {
  PV *obj;   /* the module owning it */
  int reg;   /* its index in obj->mod->regs */
  PV *old;   /* the tensor it held */
} Swap;
typedef Vec(Swap) SwapVec;

/* The dict of replacements: one dict, or a tuple/list of dicts whose keys are
 * disjoint (PyTorch 2.x's (params, buffers) form). */
static PV *merged_dicts(L *L, Span at, PV *d) {
  if (d->k == PV_DICT) return d;
  if (d->k != PV_TUPLE && d->k != PV_LIST)
    lower_error(L, at, "functional_call: parameters and buffers must be a dict of tensors (or a tuple of dicts), "
                       "got '%s'", pv_kind_name(d));
  PV *m = pv_dict(L);
  for (int i = 0; i < d->n; i++) {
    PV *di = d->items[i];
    if (di->k != PV_DICT)
      lower_error(L, at, "functional_call: item %d of the tuple of parameters and buffers is a '%s', not a dict", i,
                  pv_kind_name(di));
    for (int k = 0; k < di->n; k++) {
      if (pv_dict_get(m, di->keys[k]))
        lower_error(L, at, "functional_call: %s appears in several dicts (PyTorch refuses it as ambiguous)",
                    pv_repr(L, at, di->keys[k]));
      pv_dict_set(L, at, m, di->keys[k], di->items[k]);
    }
  }
  return m;
}

static void swap(L *L, SwapVec *sw, PV *obj, int reg, PV *val) {
  Reg *r = &obj->mod->regs.data[reg];
  vec_push(L->a, sw, ((Swap){obj, reg, r->val}));
  r->val = val;
  env_set(L, obj->attrs, r->name, val);
}

/* Every parameter and buffer of obj's tree (named prefix + name, as in the
 * state_dict) whose name is a key of `given` takes its tensor; `used` records the
 * keys taken; `tied` maps each replaced tensor to its replacement. */
static void swap_named(L *L, Span at, PV *obj, const char *prefix, PV *given, PV *used, PV *tied, SwapVec *sw,
                       int depth) {
  if (depth > 1000) lower_error(L, at, "functional_call: the module nests deeper than 1000 levels");
  for (int i = 0; i < obj->mod->regs.len; i++) {
    Reg *r = &obj->mod->regs.data[i];
    const char *name = arena_printf(L->a, "%s%s", prefix, r->name);
    eval_charge(L, at, 1);
    if (r->kind == REG_CHILD) {
      if (pv_is_module(r->val))
        swap_named(L, at, r->val, arena_printf(L->a, "%s.", name), given, used, tied, sw, depth + 1);
      continue;
    }
    PV *key = pv_str(L, name), *v = pv_dict_get(given, key);
    if (!v) continue;
    if (v->k != PV_TENSOR)
      lower_error(L, at, "functional_call: the value for '%s' is a '%s', not a tensor", name, pv_kind_name(v));
    pv_dict_set(L, at, used, key, key);
    if (r->val->k == PV_TENSOR && !pv_dict_get(tied, r->val)) pv_dict_set(L, at, tied, r->val, v);
    swap(L, sw, obj, i, v);
  }
}

/* tie_weights: a tensor the module holds under several names (a tied embedding and
 * head) is replaced under every name when one of them is given */
static void swap_tied(L *L, Span at, PV *obj, PV *tied, SwapVec *sw, int from, int depth) {
  if (depth > 1000) return;
  for (int i = 0; i < obj->mod->regs.len; i++) {
    Reg *r = &obj->mod->regs.data[i];
    if (r->kind == REG_CHILD) {
      if (pv_is_module(r->val)) swap_tied(L, at, r->val, tied, sw, from, depth + 1);
      continue;
    }
    PV *nv = r->val->k == PV_TENSOR ? pv_dict_get(tied, r->val) : NULL;
    int done = 0;
    for (int k = from; k < sw->len && !done; k++) done = sw->data[k].obj == obj && sw->data[k].reg == i;
    if (nv && !done) swap(L, sw, obj, i, nv);
  }
}

/* strict=True: every parameter and buffer must be given */
static void check_all_given(L *L, Span at, PV *obj, const char *prefix, PV *used, int depth) {
  if (depth > 1000) return;
  for (int i = 0; i < obj->mod->regs.len; i++) {
    Reg *r = &obj->mod->regs.data[i];
    const char *name = arena_printf(L->a, "%s%s", prefix, r->name);
    if (r->kind == REG_CHILD) {
      if (pv_is_module(r->val)) check_all_given(L, at, r->val, arena_printf(L->a, "%s.", name), used, depth + 1);
    } else if (r->val->k == PV_TENSOR && !pv_dict_get(used, pv_str(L, name)))
      lower_error(L, at, "functional_call(strict=True): no tensor given for '%s'", name);
  }
}

static PV *functional_call(L *L, Args *A) {
  PV *a[6];
  Span at = A->at;
  bind_args(L, A, "module,parameter_and_buffer_dicts,args=,kwargs=,tie_weights=,strict=", a);
  PV *m = a[0];
  if (!pv_is_module(m))
    lower_error(L, at, "functional_call: the module must be an nn.Module, got '%s'", pv_kind_name(m));
  PV *given = merged_dicts(L, at, a[1]), *used = pv_dict(L), *tied = pv_dict(L);
  for (int k = 0; k < given->n; k++)
    if (given->keys[k]->k != PV_STR)
      lower_error(L, at, "functional_call: keys must be str names, got %s", pv_repr(L, at, given->keys[k]));
  SwapVec sw = {0};
  swap_named(L, at, m, "", given, used, tied, &sw, 0);
  for (int k = 0; k < given->n; k++)
    if (!pv_dict_get(used, given->keys[k]))
      /* PyTorch 2.x sets an attribute nothing reads (or fails on a missing submodule):
       * the module would run with its own tensor, which is never what was meant */
      lower_error(L, at, "functional_call: the module has no parameter or buffer named '%s' (PyTorch would set an "
                         "attribute that its forward never reads)", given->keys[k]->s);
  if (a[5] && arg_bool(L, at, a[5], "strict")) check_all_given(L, at, m, "", used, 0);
  if (!a[4] || arg_bool(L, at, a[4], "tie_weights")) swap_tied(L, at, m, tied, &sw, 0, 0);
  /* args: a tuple of positional arguments, or one argument; kwargs: a dict of str */
  PV **argv = NULL, **kwv = NULL;
  const char **kwn = NULL;
  int na = 0, nkw = 0;
  if (a[2] && a[2]->k == PV_TUPLE) {
    argv = a[2]->items;
    na = a[2]->n;
  } else if (a[2]) {
    argv = &a[2];
    na = 1;
  }
  if (a[3] && a[3]->k != PV_NONE) {
    if (a[3]->k != PV_DICT) lower_error(L, at, "functional_call: kwargs must be a dict, got '%s'", pv_kind_name(a[3]));
    nkw = a[3]->n;
    kwn = arena_alloc(L->a, sizeof(char *) * (size_t)(nkw + 1));
    kwv = a[3]->items;
    for (int k = 0; k < nkw; k++) {
      if (a[3]->keys[k]->k != PV_STR) lower_error(L, at, "functional_call: kwargs keys must be str");
      kwn[k] = a[3]->keys[k]->s;
    }
  }
  PV *r = call_value(L, at, m, argv, na, kwn, kwv, nkw);
  for (int k = sw.len - 1; k >= 0; k--) {
    Reg *rg = &sw.data[k].obj->mod->regs.data[sw.data[k].reg];
    rg->val = sw.data[k].old;
    env_set(L, sw.data[k].obj->attrs, rg->name, sw.data[k].old);
  }
  return r;
}

/* ---- stack_module_state ------------------------------------------------------- */

/* A tensor of the program holding the n tensors ts stacked: its slot is
 * initialised as theirs are (the same rule, or their compile-time values). */
static PV *stacked_slot(L *L, Span at, PV **ts, int n, const char *name) {
  Slot *s0 = ts[0]->t->slot;
  Type t = ts[0]->t->type;
  if (t.ndim + 1 > IR_MAX_DIMS) lower_error(L, at, "stack_module_state: '%s' has too many dimensions to stack", name);
  memmove(t.dims + 1, t.dims, sizeof(int64_t) * (size_t)t.ndim);
  t.dims[0] = n;
  t.ndim++;
  int all_data = 1, same = 1;
  for (int i = 0; i < n; i++) {
    Slot *si = ts[i]->t->slot;
    const double *d = si ? si->data : ts[i]->t->data;
    all_data &= d != NULL;
    same &= si && !si->data && si->init == s0->init && si->init_a == s0->init_a && si->init_b == s0->init_b &&
            si->init_trunc == s0->init_trunc && si->init_lo == s0->init_lo && si->init_hi == s0->init_hi &&
            !si->zero_row1 && si->type.dtype == s0->type.dtype;
  }
  if (!all_data && !same)
    lower_error(L, at, "stack_module_state: the models' '%s' are initialised in different ways; ctc stacks tensors "
                       "initialised by one rule, or computed at compile time", name);
  Slot *s = slot_new(L, at, t, all_data ? PINIT_DATA : s0->init, all_data ? 0 : s0->init_a, all_data ? 0 : s0->init_b);
  s->is_buffer = s0 ? s0->is_buffer : 1;
  if (!all_data) s->init_trunc = s0->init_trunc, s->init_lo = s0->init_lo, s->init_hi = s0->init_hi;
  if (all_data) {
    int64_t each = ir_numel(&ts[0]->t->type);
    double *d = arena_alloc(L->a, sizeof(double) * (size_t)(each * n + 1));
    for (int i = 0; i < n; i++) {
      Slot *si = ts[i]->t->slot;
      memcpy(d + each * i, si ? si->data : ts[i]->t->data, sizeof(double) * (size_t)each);
    }
    s->data = d;
  }
  /* a tensor of the program now (before the state_dict of the model is built, so it
   * precedes training state): "ensemble.<name>" in weights files */
  Program *P = L->T->prog;
  Param p = {0};
  const char *prefix = L->T->nstacks ? arena_printf(L->a, "ensemble%d", L->T->nstacks) : "ensemble";
  p.name = arena_printf(L->a, "%s.%s", prefix, name);
  p.type = t;
  p.is_buffer = s->is_buffer;
  p.init = s->init;
  p.init_a = s->init_a;
  p.init_b = s->init_b;
  p.init_trunc = s->init_trunc, p.init_lo = s->init_lo, p.init_hi = s->init_hi;
  p.init_data = s->data;
  p.loc = at;
  s->index = P->params.len;
  vec_push(L->a, &P->params, p);
  vec_push(L->a, &P->state_dict, ((SdName){p.name, s->index}));
  PV *r = param_tensor(L, s);
  r->t->requires_grad = !s->is_buffer;
  return r;
}

/* the (name, tensor) pairs of model.named_parameters() or named_buffers() as a dict */
static PV *named(L *L, Span at, PV *model, const char *method) {
  PV *f = bi_lookup(L, NS_MODULE, method, model), *d = pv_dict(L);
  PV *pairs = call_value(L, at, f, NULL, 0, NULL, NULL, 0);
  for (int i = 0; i < pairs->n; i++) pv_dict_set(L, at, d, pairs->items[i]->items[0], pairs->items[i]->items[1]);
  return d;
}

static PV *stack_state(L *L, Span at, PV **models, int n, const char *method) {
  PV **d = arena_alloc(L->a, sizeof(PV *) * (size_t)n), *out = pv_dict(L);
  for (int i = 0; i < n; i++) d[i] = named(L, at, models[i], method);
  PV **ts = arena_alloc(L->a, sizeof(PV *) * (size_t)n);
  for (int k = 0; k < d[0]->n; k++) {
    PV *key = d[0]->keys[k];
    for (int i = 0; i < n; i++) {
      ts[i] = pv_dict_get(d[i], key);
      if (!ts[i] || d[i]->n != d[0]->n)
        lower_error(L, at, "stack_module_state: model %d has %s than model 0 (%s): the models must have one structure",
                    i, ts[i] ? "other tensors" : "no tensor named", key->s);
      if (!ir_type_eq(&ts[i]->t->type, &ts[0]->t->type))
        lower_error(L, at, "stack_module_state: '%s' of model %d has shape %s, model 0's %s", key->s, i,
                    shape_str(L, &ts[i]->t->type), shape_str(L, &ts[0]->t->type));
    }
    PV *s;
    if (L->T->fn) {   /* compiled code: the stack of the current values */
      PV **rows = arena_alloc(L->a, sizeof(PV *) * (size_t)n);
      Type t = ts[0]->t->type;
      int64_t dims[IR_MAX_DIMS];
      dims[0] = 1;
      memcpy(dims + 1, t.dims, sizeof(int64_t) * (size_t)t.ndim);
      for (int i = 0; i < n; i++) rows[i] = t_reshape(L, at, ts[i], dims, t.ndim + 1);
      s = t_concat(L, at, rows, n, 0);
    } else
      s = stacked_slot(L, at, ts, n, key->s);
    pv_dict_set(L, at, out, key, s);
  }
  return out;
}

static PV *stack_module_state(L *L, Args *A) {
  PV *a[1], **models;
  Span at = A->at;
  bind_args(L, A, "models", a);
  int n = iter_items(L, at, a[0], &models);
  if (n == 0) lower_error(L, at, "stack_module_state: expected at least one model, got an empty list");
  for (int i = 0; i < n; i++) {
    if (!pv_is_module(models[i]))
      lower_error(L, at, "stack_module_state: item %d is a '%s', not an nn.Module", i, pv_kind_name(models[i]));
    if (models[i]->mod->training != models[0]->mod->training)
      lower_error(L, at, "stack_module_state: expected all models to be in the same mode (train or eval), as "
                         "PyTorch does");
  }
  PV *r[2] = {stack_state(L, at, models, n, "named_parameters"), stack_state(L, at, models, n, "named_buffers")};
  if (!L->T->fn) L->T->nstacks++;
  return pv_tuple(L, r, 2);
}

/* copy.deepcopy(x): a module is cloned (base = copy.deepcopy(models[0]), the
 * ensembling tutorial's template); anything else stays the opaque value ctc made of
 * copy's functions before (an error only where its value is needed) */
static PV *deepcopy(L *L, Args *A) {
  PV *a[2];
  bind_args(L, A, "x,memo=", a);
  if (pv_is_module(a[0])) return module_clone(L, A->at, a[0]);
  return pv_opaque(L, A->at, "copy.deepcopy(...)");
}

PV *bi_func_state(L *L, PV *fn, Args *A) {
  switch (fn->bi) {
  case BI_TF_FUNCTIONAL_CALL: return functional_call(L, A);
  case BI_TF_STACK_MODULE_STATE: return stack_module_state(L, A);
  default: return deepcopy(L, A);
  }
}
