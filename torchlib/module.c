/* module.c - the methods of nn.Module objects (parameters(), named_modules(),
 * state_dict(), train()/eval(), register_buffer() ...): the NS_MODULE rows of
 * torch.def. */
#include <string.h>
#include "torch_int.h"

/* ---- module introspection ----------------------------------------------- */

/* Module walks visit each module once (PyTorch's memo in named_modules), and
 * parameters once by identity; `seen` is a dict used as a set (O(1) lookups). */
static int first_visit(L *L, Span at, PV *seen, PV *v) {
  eval_charge(L, at, 1);
  if (pv_dict_get(seen, v)) return 0;
  pv_dict_set(L, at, seen, v, v);
  return 1;
}

/* a module tree built top-down in a loop can be arbitrarily deep */
static void depth_check(L *L, Span at, int depth) {
  if (depth > 1000)
    lower_error(L, at, "nn.Module nesting is deeper than 1000 levels (PyTorch's recursive walks fail too)");
}

static void collect_params(L *L, Span at, PV *obj, PV *out, PV *seen, int depth) {
  depth_check(L, at, depth);
  for (int i = 0; i < obj->mod->regs.len; i++) {
    Reg *r = &obj->mod->regs.data[i];
    if (r->kind == REG_PARAM && r->val->k == PV_TENSOR) {
      if (first_visit(L, at, seen, r->val)) pv_list_append(L, out, r->val);
    } else if (r->kind == REG_CHILD && pv_is_module(r->val) && first_visit(L, at, seen, r->val))
      collect_params(L, at, r->val, out, seen, depth + 1);
  }
}

PV *module_parameters(L *L, Span at, PV *obj) {
  PV *out = pv_list(L, NULL, 0);
  collect_params(L, at, obj, out, pv_dict(L), 0);
  return out;
}

static void collect_modules(L *L, Span at, PV *obj, PV *out, PV *seen, int depth) {
  depth_check(L, at, depth);
  pv_list_append(L, out, obj);
  for (int i = 0; i < obj->mod->regs.len; i++)
    if (obj->mod->regs.data[i].kind == REG_CHILD && pv_is_module(obj->mod->regs.data[i].val) &&
        first_visit(L, at, seen, obj->mod->regs.data[i].val))
      collect_modules(L, at, obj->mod->regs.data[i].val, out, seen, depth + 1);
}

static void set_training(L *L, Span at, PV *obj, int t, PV *seen, int depth) {
  depth_check(L, at, depth);
  obj->mod->training = t;
  for (int i = 0; i < obj->mod->regs.len; i++)
    if (obj->mod->regs.data[i].kind == REG_CHILD && pv_is_module(obj->mod->regs.data[i].val) &&
        first_visit(L, at, seen, obj->mod->regs.data[i].val))
      set_training(L, at, obj->mod->regs.data[i].val, t, seen, depth + 1);
}

static const char *str_arg(L *L, Span at, PV *v, const char *what) {
  if (v->k != PV_STR) lower_error(L, at, "%s must be a string, not %s", what, pv_kind_name(v));
  return v->s;
}

/* named_modules(): (name, module) pairs, pre-order, names joined with '.';
 * memo (a dict used as a set, NULL for remove_duplicate=False) skips modules
 * already visited, as PyTorch does. */
static void named_modules(L *L, Span at, PV *obj, const char *prefix, PV *out, PV *memo, int depth) {
  depth_check(L, at, depth);
  if (memo && !first_visit(L, at, memo, obj)) return;
  eval_charge(L, at, 1);
  pv_list_append(L, out, pv_tuple(L, (PV *[]){pv_str(L, prefix), obj}, 2));
  for (int i = 0; i < obj->mod->regs.len; i++) {
    Reg *r = &obj->mod->regs.data[i];
    if (r->kind != REG_CHILD || !pv_is_module(r->val)) continue;
    named_modules(L, at, r->val, prefix[0] ? arena_printf(L->a, "%s.%s", prefix, r->name) : r->name, out, memo,
                  depth + 1);
  }
}

static void state_dict_into(L *L, Span at, PV *obj, const char *prefix, PV *out, int depth) {
  depth_check(L, at, depth);
  for (int pass = 0; pass < 3; pass++)
    for (int i = 0; i < obj->mod->regs.len; i++) {
      Reg *r = &obj->mod->regs.data[i];
      if ((int)r->kind != pass) continue;
      const char *name = arena_printf(L->a, "%s%s", prefix, r->name);
      eval_charge(L, at, 1);
      if (r->kind == REG_CHILD) {
        if (pv_is_module(r->val)) state_dict_into(L, at, r->val, arena_printf(L->a, "%s.", name), out, depth + 1);
      } else if (r->val->k == PV_TENSOR && !(r->val->t->slot && r->val->t->slot->not_persistent))
        pv_dict_set(L, at, out, pv_str(L, name), r->val);   /* persistent=False buffers have no key */
    }
}

/* model.float() / .double() / .bfloat16() / .half() / .to(dtype): every floating parameter and
 * buffer (not complex64 ones, as PyTorch) takes dtype dt (their slots, so <model>_init and the
 * state_dict have it, and the tensors bound to them), or with low (LOW_BF16 / LOW_F16) is a
 * float32 tensor holding bfloat16 / float16 numbers (autocast.c's marked values), stored as such
 * (lowering.c gives its Param the dtype bf16 / f16): compile-time values are rounded here,
 * <model>_init rounds random ones. */
static void module_cast(L *L, PV *m, DType dt, int low) {
  for (int i = 0; i < m->mod->regs.len; i++) {
    Reg *r = &m->mod->regs.data[i];
    if (r->kind == REG_CHILD && pv_is_module(r->val)) module_cast(L, r->val, dt, low);
    if (r->kind == REG_CHILD || !r->val || r->val->k != PV_TENSOR) continue;
    Tensor *t = r->val->t;
    if (!ir_dtype_is_float(t->type.dtype) || t->cplx) continue;   /* complex64 buffers stay complex64, as in PyTorch */
    t->type.dtype = dt;
    t->low = low;
    Slot *s = t->slot;
    if (!s) continue;
    if (s->index >= 0) BUG("module cast after the state_dict was built");
    s->type.dtype = dt;
    if (!low || s->low == low) {
      s->low = low;
      continue;
    }
    s->low = low;
    if (s->init == PINIT_CONST) ac_round_data(&s->init_a, 1, low);
    if (s->init == PINIT_DATA && s->data) {   /* a copy: the values may be shared with the tensor it was made from */
      int64_t n = ir_numel(&s->type);
      double *d = arena_alloc(L->a, sizeof *d * (size_t)(n + 1));
      memcpy(d, s->data, sizeof *d * (size_t)n);
      ac_round_data(d, n, low);
      s->data = d;
    }
  }
}

/* the dtype model.to(...) asks for: -1 none (a device), else an IR dtype or DT_BF16_MARK / DT_F16_MARK */
static int module_to_dtype(L *L, Args *A) {
  int dt = -1;
  for (int i = 0; i < A->nargs + A->nkw; i++) {
    PV *v = i < A->nargs ? A->args[i] : A->kwvals[i - A->nargs];
    const char *kw = i < A->nargs ? NULL : A->kwnames[i - A->nargs];
    if (kw && strcmp(kw, "dtype") && strcmp(kw, "device") && strcmp(kw, "non_blocking") && strcmp(kw, "memory_format"))
      lower_error(L, A->at, "module.to() got an unexpected keyword argument '%s'", kw);
    if (v->k == PV_DTYPE) dt = (int)v->dt;
    else if (v->k == PV_TENSOR) dt = v->t->low == LOW_F16 ? DT_F16_MARK : v->t->low ? DT_BF16_MARK : (int)v->t->type.dtype;
  }
  if (dt >= 0 && dt < DT_COUNT && !ir_dtype_is_float((DType)dt))
    lower_error(L, A->at, "nn.Module.to only accepts floating point dtypes, but got desired dtype=%s",
                ir_dtype_name((DType)dt));
  return dt;
}

/* ---- ModuleList / ModuleDict / ParameterList mutation ------------------- */

/* 1 ModuleList or ParameterList, 2 ModuleDict, 0 another module */
int module_container(const PV *obj) {
  if (!obj || obj->k != PV_OBJ || !obj->mod || !obj->cls) return 0;
  if (obj->cls->bi == BI_C_MODULELIST || obj->cls->bi == BI_C_PARAMETERLIST) return 1;
  return obj->cls->bi == BI_C_MODULEDICT ? 2 : 0;
}

static void container_put(L *L, Span at, PV *obj, const char *name, PV *v) {
  int plist = obj->cls->bi == BI_C_PARAMETERLIST;
  if (plist ? v->k != PV_TENSOR : !pv_is_module(v))
    lower_error(L, at, "%s entries must be %s, got '%s'", obj->cls->s, plist ? "parameters" : "modules", pv_kind_name(v));
  module_setattr(L, at, obj, name, v);
}

/* list[i] = v (i in range, negative from the end) or dict[key] = v */
void module_container_set(L *L, Span at, PV *obj, PV *key, PV *v) {
  if (module_container(obj) == 2) {
    if (key->k != PV_STR) lower_error(L, at, "ModuleDict keys must be str, got '%s'", pv_kind_name(key));
    container_put(L, at, obj, key->s, v);
    return;
  }
  PV **items;
  int n = iter_items(L, at, obj, &items);
  int64_t i = arg_int(L, at, key, "index");
  if (i < 0) i += n;
  if (i < 0 || i >= n) lower_error(L, at, "index %lld out of range for a %s of %d entries", (long long)i, obj->cls->s, n);
  container_put(L, at, obj, arena_printf(L->a, "%lld", (long long)i), v);
}

PV *bi_container_method(L *L, PV *fn, Args *A) {
  PV *a[2], **items, *self = fn->self;
  int bi = fn->bi;
  Span at = A->at;
  int n = iter_items(L, at, self, &items), dict = module_container(self) == 2;
  if (dict != (bi == BI_MOD_UPDATE || bi == BI_MOD_KEYS || bi == BI_MOD_ITEMS || bi == BI_MOD_VALUES))
    lower_error(L, at, "'%s' object has no attribute '%s'", self->cls->s, bi_names[bi]);
  switch (bi) {
  case BI_MOD_APPEND:
    bind_args(L, A, "value", a);
    container_put(L, at, self, arena_printf(L->a, "%d", n), a[0]);
    return self;
  case BI_MOD_EXTEND: {
    bind_args(L, A, "values", a);
    PV **vs;
    int m = iter_items(L, at, a[0], &vs);
    for (int i = 0; i < m; i++) container_put(L, at, self, arena_printf(L->a, "%d", n + i), vs[i]);
    return self;
  }
  case BI_MOD_INSERT: { /* shift the tail up one name, as PyTorch renumbers */
    bind_args(L, A, "index,module", a);
    int64_t i = arg_int(L, at, a[0], "index");
    if (i < 0) i += n;
    if (i < 0) i = 0;
    if (i > n) i = n;
    for (int j = n; j > i; j--) container_put(L, at, self, arena_printf(L->a, "%d", j), items[j - 1]);
    container_put(L, at, self, arena_printf(L->a, "%lld", (long long)i), a[1]);
    return pv_none(L);
  }
  case BI_MOD_UPDATE: {
    bind_args(L, A, "modules", a);
    PV **ks;
    if (a[0]->k == PV_DICT) {
      for (int i = 0; i < a[0]->n; i++) module_container_set(L, at, self, a[0]->keys[i], a[0]->items[i]);
      return pv_none(L);
    }
    int m = iter_items(L, at, a[0], &ks);   /* pairs */
    for (int i = 0; i < m; i++) {
      if (ks[i]->k != PV_TUPLE && ks[i]->k != PV_LIST) lower_error(L, at, "ModuleDict.update needs (key, module) pairs");
      if (ks[i]->n != 2) lower_error(L, at, "ModuleDict.update needs (key, module) pairs");
      module_container_set(L, at, self, ks[i]->items[0], ks[i]->items[1]);
    }
    return pv_none(L);
  }
  default: { /* keys(), values(), items() in registration order */
    bind_args(L, A, "", a);
    PV *out = pv_list(L, NULL, 0);
    for (int i = 0; i < n; i++) {
      PV *k = items[i], *v = NULL;
      for (int j = 0; j < self->mod->regs.len && !v; j++)
        if (strcmp(self->mod->regs.data[j].name, k->s) == 0) v = self->mod->regs.data[j].val;
      pv_list_append(L, out, bi == BI_MOD_KEYS ? k : bi == BI_MOD_VALUES ? v : pv_tuple(L, (PV *[]){k, v}, 2));
    }
    return out;
  }
  }
}

PV *bi_module_method(L *L, PV *fn, Args *A) {
  PV *self = fn->self, *a[4];
  switch (fn->bi) {
  case BI_MOD_INIT: return pv_none(L);
  case BI_MOD_PARAMETERS: {
    PV *out = pv_list(L, NULL, 0);
    collect_params(L, A->at, self, out, pv_dict(L), 0);
    return out;
  }
  case BI_MOD_NAMED_PARAMETERS:
  case BI_MOD_NAMED_BUFFERS:
  case BI_MOD_BUFFERS: {
    /* PyTorch's _named_members: the modules of named_modules(prefix), each one's own
     * parameters (buffers) in registration order, each tensor once (memo) */
    bind_args(L, A, "prefix=,recurse=,remove_duplicate=", a);
    const char *prefix = a[0] ? str_arg(L, A->at, a[0], "prefix") : "";
    int recurse = a[1] ? arg_bool(L, A->at, a[1], "recurse") : 1;
    int dedup = a[2] ? arg_bool(L, A->at, a[2], "remove_duplicate") : 1;
    PV *mods = pv_list(L, NULL, 0);
    if (recurse) named_modules(L, A->at, self, prefix, mods, dedup ? pv_dict(L) : NULL, 0);
    else pv_list_append(L, mods, pv_tuple(L, (PV *[]){pv_str(L, prefix), self}, 2));
    RegKind want = fn->bi == BI_MOD_NAMED_PARAMETERS ? REG_PARAM : REG_BUFFER;
    PV *out = pv_list(L, NULL, 0), *seen = pv_dict(L);
    for (int m = 0; m < mods->n; m++) {
      const char *mp = mods->items[m]->items[0]->s;
      ObjModule *om = mods->items[m]->items[1]->mod;
      for (int i = 0; i < om->regs.len; i++) {
        Reg *r = &om->regs.data[i];
        if (r->kind != want || r->val->k != PV_TENSOR) continue;
        if (dedup && !first_visit(L, A->at, seen, r->val)) continue;
        if (fn->bi == BI_MOD_BUFFERS) {
          pv_list_append(L, out, r->val);
          continue;
        }
        PV *name = pv_str(L, mp[0] ? arena_printf(L->a, "%s.%s", mp, r->name) : r->name);
        pv_list_append(L, out, pv_tuple(L, (PV *[]){name, r->val}, 2));
      }
    }
    return out;
  }
  case BI_MOD_NAMED_MODULES: {
    bind_args(L, A, "memo=,prefix=,remove_duplicate=", a);
    if (a[0] && a[0]->k != PV_NONE) lower_error(L, A->at, "named_modules(memo=...) is not supported");
    const char *prefix = a[1] ? str_arg(L, A->at, a[1], "prefix") : "";
    int dedup = a[2] ? arg_bool(L, A->at, a[2], "remove_duplicate") : 1;
    PV *out = pv_list(L, NULL, 0);
    named_modules(L, A->at, self, prefix, out, dedup ? pv_dict(L) : NULL, 0);
    return out;
  }
  case BI_MOD_NAMED_CHILDREN: {
    bind_args(L, A, "", a);
    PV *out = pv_list(L, NULL, 0), *seen = pv_dict(L);
    for (int i = 0; i < self->mod->regs.len; i++) {
      Reg *r = &self->mod->regs.data[i];
      if (r->kind == REG_CHILD && pv_is_module(r->val) && first_visit(L, A->at, seen, r->val))
        pv_list_append(L, out, pv_tuple(L, (PV *[]){pv_str(L, r->name), r->val}, 2));
    }
    return out;
  }
  case BI_MOD_STATE_DICT: { /* names -> tensors: own parameters, buffers, then children (no memo) */
    bind_args(L, A, "destination=,prefix=,keep_vars=", a);
    if (a[0] && a[0]->k != PV_NONE) lower_error(L, A->at, "state_dict(destination=...) is not supported");
    PV *out = pv_dict(L);
    state_dict_into(L, A->at, self, a[1] ? str_arg(L, A->at, a[1], "prefix") : "", out, 0);
    return out;
  }
  case BI_MOD_MODULES: {
    PV *out = pv_list(L, NULL, 0);
    collect_modules(L, A->at, self, out, pv_dict(L), 0);
    return out;
  }
  case BI_MOD_CHILDREN: {
    PV *out = pv_list(L, NULL, 0), *seen = pv_dict(L); /* each child once, as PyTorch's memo */
    for (int i = 0; i < self->mod->regs.len; i++)
      if (self->mod->regs.data[i].kind == REG_CHILD && pv_is_module(self->mod->regs.data[i].val) &&
          first_visit(L, A->at, seen, self->mod->regs.data[i].val))
        pv_list_append(L, out, self->mod->regs.data[i].val);
    return out;
  }
  case BI_MOD_REQUIRES_GRAD_: { /* freezing: optimizers skip these parameters */
    bind_args(L, A, "requires_grad=", a);
    int rg = a[0] ? arg_bool(L, A->at, a[0], "requires_grad") : 1;
    PV *ps = pv_list(L, NULL, 0);
    collect_params(L, A->at, self, ps, pv_dict(L), 0);
    for (int i = 0; i < ps->n; i++) tensor_setattr(L, A->at, ps->items[i], "requires_grad", pv_bool(L, rg));
    return self;
  }
  case BI_MOD_TRAIN: /* a compile-time switch: code staged after it is specialised */
    bind_args(L, A, "mode=", a);
    set_training(L, A->at, self, a[0] ? arg_bool(L, A->at, a[0], "mode") : 1, pv_dict(L), 0);
    return self;
  case BI_MOD_EVAL:
    bind_args(L, A, "", a);
    set_training(L, A->at, self, 0, pv_dict(L), 0);
    return self;
  case BI_MOD_APPLY: {
    bind_args(L, A, "fn", a);
    PV *mods = pv_list(L, NULL, 0);
    collect_modules(L, A->at, self, mods, pv_dict(L), 0);
    /* PyTorch applies to children first, then self */
    for (int i = mods->n - 1; i >= 0; i--) call_value(L, A->at, a[0], &mods->items[i], 1, NULL, NULL, 0);
    return self;
  }
  case BI_MOD_REGISTER_BUFFER: {
    bind_args(L, A, "name,tensor,persistent=", a);
    if (a[0]->k != PV_STR) lower_error(L, A->at, "buffer name must be a string");
    if (a[1]->k == PV_NONE) {   /* register_buffer("mask", None): no state_dict key; a tensor set later is a constant */
      if (!self->attrs) self->attrs = env_new(L, NULL);
      env_set(L, self->attrs, a[0]->s, a[1]);
      return pv_none(L);
    }
    if (a[1]->k != PV_TENSOR) lower_error(L, A->at, "register_buffer needs a tensor");
    Tensor *t = a[1]->t;
    if (!t->data) lower_error(L, A->at, "buffer '%s' must be computable at compile time", a[0]->s);
    Slot *s = slot_new(L, A->at, t->type, PINIT_DATA, 0, 0);
    s->is_buffer = 1;
    s->not_persistent = a[2] && !arg_bool(L, A->at, a[2], "persistent");
    s->data = t->data;
    PV *pt = param_tensor(L, s);
    vec_push(L->a, &self->mod->regs, ((Reg){REG_BUFFER, a[0]->s, pt}));
    if (!self->attrs) self->attrs = env_new(L, NULL);
    env_set(L, self->attrs, a[0]->s, pt);
    return pv_none(L);
  }
  case BI_MOD_REGISTER_PARAMETER:
  case BI_MOD_ADD_MODULE:
    bind_args(L, A, "name,value", a);
    if (a[0]->k != PV_STR) lower_error(L, A->at, "name must be a string");
    module_setattr(L, A->at, self, a[0]->s, a[1]);
    return pv_none(L);
  case BI_MOD_ZERO_GRAD: /* model.zero_grad(): like optimizer.zero_grad() */
    bind_args(L, A, "set_to_none=", a);
    {
      PV *ps = pv_list(L, NULL, 0);
      collect_params(L, A->at, self, ps, pv_dict(L), 0);
      grads_zero(L, A->at, ps);
    }
    return pv_none(L);
  case BI_MOD_CUDA:
  case BI_MOD_CPU: return self;
  case BI_MOD_TO:
  case BI_MOD_DOUBLE:
  case BI_MOD_FLOAT:
  case BI_MOD_BFLOAT16:
  case BI_MOD_HALF: {
    int dt = fn->bi == BI_MOD_DOUBLE ? DT_F64 : fn->bi == BI_MOD_FLOAT ? DT_F32 : fn->bi == BI_MOD_HALF ? DT_F16_MARK
             : fn->bi == BI_MOD_BFLOAT16 ? DT_BF16_MARK : module_to_dtype(L, A);
    if (fn->bi != BI_MOD_TO) bind_args(L, A, "", a);
    if (dt < 0) return self;   /* model.to(device) */
    if (L->T->fn)
      lower_error(L, A->at, "module.%s(%s) inside compiled code is not supported; call it at module level or in "
                  "__init__", bi_names[fn->bi], fn->bi == BI_MOD_TO ? "dtype" : "");
    int low = dt == DT_BF16_MARK ? LOW_BF16 : dt == DT_F16_MARK ? LOW_F16 : 0;
    module_cast(L, self, low ? DT_F32 : (DType)dt, low);
    return self;
  }
  default: break;
  }
  BUG("module method %d", fn->bi);
}

