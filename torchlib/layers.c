/* layers.c - nn.Module objects and the builtin layers: their constructors
 * (parameters in PyTorch's registration order, PyTorch's default init) and
 * their forwards (which call tensor.c). */
#include <math.h>
#include <string.h>
#include "torch_int.h"


Slot *slot_new(L *L, Span at, Type t, int init, double a, double b) {
  char msg[512];
  if (ir_type_problem(&t, msg, sizeof msg)) lower_error(L, at, "%s", msg);   /* too large, or empty */
  Slot *s = arena_alloc(L->a, sizeof *s);
  s->type = t;
  s->init = init;
  s->init_a = a;
  s->init_b = b;
  s->index = -1;
  s->loc = at;
  return s;
}

PV *param_tensor(L *L, Slot *s) {
  Tensor *t = arena_alloc(L->a, sizeof *t);
  t->type = s->type;
  t->v = -1;
  t->slot = s;
  t->requires_grad = !s->is_buffer && !s->frozen;
  t->cplx = s->cplx;
  t->low = s->low;
  return pv_tensor(L, t);
}

PV *module_new(L *L, PV *cls) {
  PV *o = pv_new(L, PV_OBJ);
  o->cls = cls;
  o->attrs = env_new(L, NULL);
  o->mod = arena_alloc(L->a, sizeof(ObjModule));
  o->mod->training = 1;
  return o;
}

static void reg_set(L *L, PV *obj, RegKind k, const char *name, PV *val) {
  /* every registered name is also an attribute (module_setattr, register_buffer):
   * a name that is not one is new, and needs no scan (100,000 children stay linear) */
  if (obj->attrs && !env_get(obj->attrs, name)) {
    vec_push(L->a, &obj->mod->regs, ((Reg){k, arena_strdup(L->a, name), val}));
    return;
  }
  for (int i = 0; i < obj->mod->regs.len; i++)
    if (strcmp(obj->mod->regs.data[i].name, name) == 0) {
      obj->mod->regs.data[i].kind = k;
      obj->mod->regs.data[i].val = val;
      return;
    }
  vec_push(L->a, &obj->mod->regs, ((Reg){k, arena_strdup(L->a, name), val}));
}

/* Is `target` in the module tree under `m`? Module trees stay acyclic (checked at
 * every registration), so this walk ends; it visits every path, as PyTorch's
 * state_dict() does, and charges each to the step limit, so a tree whose paths
 * explode (m = Sequential(m, m) in a loop) is diagnosed here rather than hanging
 * the later walks (state_dict names). The depth is bounded as PyTorch's recursion. */
static int module_reaches(L *L, Span at, PV *m, PV *target, int depth) {
  if (m == target) return 1;
  if (depth > 1000) lower_error(L, at, "nn.Module nesting is deeper than 1000 levels");
  eval_charge(L, at, 1);
  for (int i = 0; i < m->mod->regs.len; i++) {
    Reg *r = &m->mod->regs.data[i];
    if (r->kind == REG_CHILD && pv_is_module(r->val) && module_reaches(L, at, r->val, target, depth + 1))
      return 1;
  }
  return 0;
}

/* Before the model's tree is walked recursively (state_dict names, train/eval
 * flags): its depth is bounded (a tree built top-down in a loop is not checked at
 * registration) and its paths are charged to the step limit. */
static void tree_check(L *L, Span at, PV *m, int depth) {
  if (depth > 1000)
    lower_error(L, at, "nn.Module nesting is deeper than 1000 levels (PyTorch's recursive state_dict() fails too)");
  eval_charge(L, at, 1);
  for (int i = 0; i < m->mod->regs.len; i++) {
    Reg *r = &m->mod->regs.data[i];
    if (r->kind == REG_CHILD && pv_is_module(r->val)) tree_check(L, at, r->val, depth + 1);
  }
}
void module_tree_check(L *L, Span at, PV *root) { tree_check(L, at, root, 0); }

/* self.name = val on a module: sub-modules and parameters are registered. */
void module_setattr(L *L, Span at, PV *obj, const char *name, PV *val) {
  if (pv_is_module(val) && module_reaches(L, at, val, obj, 0))
    lower_error(L, at, "assigning this module to '%s' makes the module contain itself; PyTorch's state_dict(), "
                       "train() and eval() would recurse forever on it", name);
  if (pv_is_module(val)) reg_set(L, obj, REG_CHILD, name, val);
  else if (val->k == PV_TENSOR && val->t->slot && !val->t->slot->is_buffer) reg_set(L, obj, REG_PARAM, name, val);
  else if (val->k == PV_TENSOR && val->t->requires_grad && val->t->data) {
    /* nn.Parameter(torch.ones(n)): a parameter holding compile-time data */
    Slot *s = slot_new(L, at, val->t->type, PINIT_DATA, 0, 0);
    s->data = val->t->data;
    val = param_tensor(L, s);
    reg_set(L, obj, REG_PARAM, name, val);
  } else if (val->k == PV_NONE) {
    /* self.bias = None keeps a registered slot empty */
    for (int i = 0; i < obj->mod->regs.len; i++)
      if (strcmp(obj->mod->regs.data[i].name, name) == 0) obj->mod->regs.data[i].val = val;
  } else {
    for (int i = 0; i < obj->mod->regs.len; i++)
      if (strcmp(obj->mod->regs.data[i].name, name) == 0 && obj->mod->regs.data[i].kind == REG_BUFFER) {
        if (val->k != PV_TENSOR || !val->t->data) lower_error(L, at, "buffer '%s' must be a compile-time tensor", name);
        PV *old = obj->mod->regs.data[i].val;
        Slot *s = slot_new(L, at, val->t->type, PINIT_DATA, 0, 0);
        s->is_buffer = 1;
        s->not_persistent = old && old->k == PV_TENSOR && old->t->slot && old->t->slot->not_persistent;
        s->cplx = val->t->cplx;
        s->data = val->t->data;
        val = param_tensor(L, s);
        obj->mod->regs.data[i].val = val;
      }
  }
  env_set(L, obj->attrs, name, val);
}

static PV *new_param(L *L, Span at, PV *obj, const char *name, DType dt, int ndim, const int64_t *dims,
                     int init, double a, double b) {
  Type t = {0};
  t.dtype = dt;
  t.ndim = ndim;
  for (int i = 0; i < ndim; i++) {
    if (dims[i] <= 0) lower_error(L, at, "parameter '%s' would have a non-positive dimension (%lld)", name, (long long)dims[i]);
    t.dims[i] = dims[i];
  }
  PV *p = param_tensor(L, slot_new(L, at, t, init, a, b));
  module_setattr(L, at, obj, name, p);
  return p;
}

static void set_int(L *L, PV *obj, const char *name, int64_t v) { env_set(L, obj->attrs, name, pv_int(L, v)); }
static double get_num(L *L, PV *obj, const char *name) { return pv_num(env_get(obj->attrs, name)); }

/* ---- the classes of layers.def -------------------------------------------- */

PV *bi_parameter_new(L *L, PV *cls, Args *A) {
  PV *a[2];
  Span at = A->at;
  bind_args(L, A, "data,requires_grad=", a);
  if (a[0]->k != PV_TENSOR) lower_error(L, at, "nn.Parameter needs a tensor");
  if (!a[0]->t->data && !a[0]->t->slot) lower_error(L, at, "nn.Parameter needs a tensor computed at compile time");
  if (a[0]->t->slot) return a[0];
  Tensor *t = arena_alloc(L->a, sizeof *t);
  *t = *a[0]->t;
  t->requires_grad = a[1] ? arg_bool(L, at, a[1], "requires_grad") : 1;
  return pv_tensor(L, t);
}

PV *layer_module_new(L *L, PV *cls, Args *A) { return module_new(L, cls); }

/* A builtin layer object, created outside compiled code. */
static PV *layer_new(L *L, PV *cls, Args *A) {
  if (L->T->fn) lower_error(L, A->at, "creating layers inside compiled code is not supported; create them in __init__");
  return module_new(L, cls);
}

PV *layer_no_forward(L *L, PV *o, Args *A) {
  if (o->cls->bi == BI_C_MODULE) lower_error(L, A->at, "nn.Module() has no forward");
  lower_error(L, A->at, "%s is not callable; iterate over it", o->cls->s);
}

/* The single input tensor of a layer's forward. */
static PV *layer_input(L *L, PV *o, Args *A) {
  PV *a[1];
  bind_args(L, A, "input", a);
  if (a[0]->k != PV_TENSOR) lower_error(L, A->at, "%s expects a tensor input, got '%s'", o->cls->s, pv_kind_name(a[0]));
  return a[0];
}

/* A module form of a functional (LAYER(..., layer_options, layer_functional, fn,
 * options)): the constructor keeps its options, as given or defaulted, as
 * attributes (nn.LeakyReLU().negative_slope), in the order of `options`. */
PV *layer_options(L *L, PV *cls, Args *A) {
  PV *o = module_new(L, cls);   /* no parameters: may be made inside compiled code too (nn.ReLU()(x)) */
  const char *spec = bi_rows[cls->bi].spec;
  char bspec[400], buf[400];
  const char *names[24], *dflts[24];
  int n = 0, len = 0;
  bspec[0] = 0;
  snprintf(buf, sizeof buf, "%s", spec);
  for (char *p = strtok(buf, ","); p && n < 24; p = strtok(NULL, ",")) {
    char *eq = strchr(p, '=');
    if (eq) *eq = 0;
    names[n] = arena_strdup(L->a, p);
    dflts[n++] = eq ? arena_strdup(L->a, eq + 1) : NULL;
    len += snprintf(bspec + len, sizeof bspec - (size_t)len, "%s%s%s", n > 1 ? "," : "", p, eq ? "=" : "");
  }
  PV *a[24];
  bind_args(L, A, bspec, a);
  for (int i = 0; i < n; i++) env_set(L, o->attrs, names[i], a[i] ? a[i] : spec_value(L, dflts[i]));
  return o;
}

/* Its forward: the functional row's handler, called with the input and the
 * options as keywords (F.leaky_relu(x, negative_slope=..., inplace=...)). */
PV *layer_functional(L *L, PV *o, Args *A) {
  PV *x = layer_input(L, o, A);
  const BuiltinRow *r = &bi_rows[o->cls->bi];
  Env *e = o->attrs;
  int n = 0;
  const char **kn = arena_alloc(L->a, sizeof(char *) * (size_t)(e->names.len + 1));
  PV **kv = arena_alloc(L->a, sizeof(PV *) * (size_t)(e->names.len + 1));
  char buf[400];
  snprintf(buf, sizeof buf, "%s", r->spec);
  for (char *p = strtok(buf, ","); p; p = strtok(NULL, ",")) {
    p[strcspn(p, "=")] = 0;
    kn[n] = arena_strdup(L->a, p);
    kv[n++] = env_get(e, p);
  }
  PV *fn = bi_value(L, r->arg, NULL);
  fn->i = NS_NN; /* called as the module's forward (F.relu's inplace= is nn.ReLU's) */
  Args F = {A->at, &x, 1, kn, kv, n, bi_rows[r->arg].name};
  return bi_rows[r->arg].call(L, fn, &F);
}

/* The forward of a module form of a functional of several inputs (nn.CosineSimilarity,
 * nn.TripletMarginLoss): the row's handler called with the call's arguments and the
 * stored options as keywords. */
PV *layer_functional_args(L *L, PV *o, Args *A) {
  const BuiltinRow *r = &bi_rows[o->cls->bi];
  Env *e = o->attrs;
  int n = 0, cap = A->nkw + (int)e->names.len + 1;
  const char **kn = arena_alloc(L->a, sizeof(char *) * (size_t)cap);
  PV **kv = arena_alloc(L->a, sizeof(PV *) * (size_t)cap);
  for (int i = 0; i < A->nkw; i++) kn[n] = A->kwnames[i], kv[n++] = A->kwvals[i];
  char buf[400];
  snprintf(buf, sizeof buf, "%s", r->spec);
  for (char *p = strtok(buf, ","); p; p = strtok(NULL, ",")) {
    p[strcspn(p, "=")] = 0;
    kn[n] = arena_strdup(L->a, p);
    kv[n++] = env_get(e, p);
  }
  PV *fn = bi_value(L, r->arg, NULL);
  fn->i = NS_NN;
  Args F = {A->at, A->args, A->nargs, kn, kv, n, bi_rows[r->arg].name};
  return bi_rows[r->arg].call(L, fn, &F);
}

PV *layer_linear_new(L *L, PV *cls, Args *A) {
  PV *a[5], *o = layer_new(L, cls, A);
  Span at = A->at;
  bind_args(L, A, "in_features,out_features,bias=,device=,dtype=", a);
  int64_t in = arg_int(L, at, a[0], "in_features"), out = arg_int(L, at, a[1], "out_features");
  set_int(L, o, "in_features", in);
  set_int(L, o, "out_features", out);
  double bound = in > 0 ? 1.0 / sqrt((double)in) : 0;
  int64_t wd[2] = {out, in};
  new_param(L, at, o, "weight", DT_F32, 2, wd, PINIT_UNIFORM, -bound, bound);
  if (!a[2] || arg_bool(L, at, a[2], "bias")) new_param(L, at, o, "bias", DT_F32, 1, &out, PINIT_UNIFORM, -bound, bound);
  else module_setattr(L, at, o, "bias", pv_none(L));
  return o;
}

PV *layer_linear_forward(L *L, PV *o, Args *A) {
  PV *x = layer_input(L, o, A);
  return t_linear(L, A->at, x, env_get(o->attrs, "weight"), env_get(o->attrs, "bias"));
}

PV *layer_dropout_forward(L *L, PV *o, Args *A) {
  PV *x = layer_input(L, o, A);
  double p = arg_num(L, A->at, env_get(o->attrs, "p"), "p");
  int fnrow = bi_rows[o->cls->bi].arg;   /* Dropout1d/2d/3d: F.dropout1d/2d/3d's row, its arg the spatial dims */
  if (fnrow) return dropout_nd(L, A->at, bi_rows[fnrow].arg, x, p, o->mod->training);
  return t_dropout(L, A->at, x, p, o->mod->training);
}

/* nn.Identity accepts and ignores any arguments */
PV *layer_identity_new(L *L, PV *cls, Args *A) { return layer_new(L, cls, A); }
PV *layer_identity_forward(L *L, PV *o, Args *A) { return layer_input(L, o, A); }

/* nn.Sequential(m1, m2 ...) or (OrderedDict), nn.ModuleList(iterable), nn.ParameterList(iterable) */
PV *layer_sequential_new(L *L, PV *cls, Args *A) {
  PV *a[1], *o = layer_new(L, cls, A);
  Span at = A->at;
  PV **items = A->args;
  int n = A->nargs, seq = cls->bi == BI_C_SEQUENTIAL;
  if (!seq) {
    bind_args(L, A, "modules=", a);
    n = a[0] ? iter_items(L, at, a[0], &items) : 0;
  } else if (A->nkw)
    lower_error(L, at, "nn.Sequential takes modules as positional arguments");
  if (seq && n == 1 && items[0]->k == PV_DICT) {
    PV *d = items[0];
    for (int i = 0; i < d->n; i++) {
      if (!pv_is_module(d->items[i])) lower_error(L, at, "nn.Sequential entries must be modules");
      module_setattr(L, at, o, d->keys[i]->s, d->items[i]);
    }
    return o;
  }
  for (int i = 0; i < n; i++) {
    if (cls->bi == BI_C_PARAMETERLIST ? items[i]->k != PV_TENSOR : !pv_is_module(items[i]))
      lower_error(L, at, "%s entries must be %s, got '%s'", cls->s,
                  cls->bi == BI_C_PARAMETERLIST ? "parameters" : "modules", pv_kind_name(items[i]));
    module_setattr(L, at, o, arena_printf(L->a, "%d", i), items[i]);
  }
  return o;
}

PV *layer_sequential_forward(L *L, PV *o, Args *A) {
  PV **items, *a[1];
  Span at = A->at;
  int n = iter_items(L, at, o, &items);
  bind_args(L, A, "input", a);
  PV *x = a[0];
  for (int i = 0; i < n; i++) x = call_value(L, at, items[i], &x, 1, NULL, NULL, 0);
  return x;
}

PV *layer_moduledict_new(L *L, PV *cls, Args *A) {
  PV *a[1], *o = layer_new(L, cls, A);
  bind_args(L, A, "modules=", a);
  if (a[0]) {
    if (a[0]->k != PV_DICT) lower_error(L, A->at, "nn.ModuleDict needs a dict");
    for (int i = 0; i < a[0]->n; i++) {
      if (a[0]->keys[i]->k != PV_STR || !pv_is_module(a[0]->items[i]))
        lower_error(L, A->at, "nn.ModuleDict needs str keys and module values");
      module_setattr(L, A->at, o, a[0]->keys[i]->s, a[0]->items[i]);
    }
  }
  return o;
}

PV *layer_layernorm_new(L *L, PV *cls, Args *A) {
  PV *a[6], *o = layer_new(L, cls, A);
  Span at = A->at;
  bind_args(L, A, "normalized_shape,eps=,elementwise_affine=,bias=,device=,dtype=", a);
  int64_t ns[IR_MAX_DIMS];
  int n = arg_ints(L, at, a[0], ns, IR_MAX_DIMS, "normalized_shape");
  PV *nsv = pv_tuple(L, NULL, 0);
  for (int i = 0; i < n; i++) pv_list_append(L, nsv, pv_int(L, ns[i]));
  env_set(L, o->attrs, "normalized_shape", nsv);
  env_set(L, o->attrs, "eps", pv_float(L, a[1] ? arg_num(L, at, a[1], "eps") : 1e-5));
  if (!a[2] || arg_bool(L, at, a[2], "elementwise_affine")) {
    new_param(L, at, o, "weight", DT_F32, n, ns, PINIT_CONST, 1, 0);
    if (!a[3] || arg_bool(L, at, a[3], "bias")) new_param(L, at, o, "bias", DT_F32, n, ns, PINIT_ZERO, 0, 0);
    else module_setattr(L, at, o, "bias", pv_none(L));
  } else {
    module_setattr(L, at, o, "weight", pv_none(L));
    module_setattr(L, at, o, "bias", pv_none(L));
  }
  return o;
}

PV *layer_layernorm_forward(L *L, PV *o, Args *A) {
  PV *x = layer_input(L, o, A);
  Span at = A->at;
  PV *ns = env_get(o->attrs, "normalized_shape");
  Type t = x->t->type;
  for (int i = 0; i < ns->n; i++)
    if (ns->n > t.ndim || t.dims[t.ndim - ns->n + i] != ns->items[i]->i)
      lower_error(L, at, "shape mismatch in LayerNorm: input %s, normalized_shape %s", shape_str(L, &t), pv_repr(L, at, ns));
  return t_layer_norm(L, at, x, ns->n, env_get(o->attrs, "weight"), env_get(o->attrs, "bias"), get_num(L, o, "eps"));
}

PV *layer_embedding_new(L *L, PV *cls, Args *A) {
  PV *a[7], *o = layer_new(L, cls, A);
  Span at = A->at;
  /* sparse=True changes only the gradient's storage (SparseAdam reads which rows it has) */
  bind_args(L, A, "num_embeddings,embedding_dim,padding_idx=,max_norm=,norm_type=,scale_grad_by_freq=,sparse=", a);
  int64_t d[2] = {arg_int(L, at, a[0], "num_embeddings"), arg_int(L, at, a[1], "embedding_dim")};
  if (a[3] && a[3]->k != PV_NONE) lower_error(L, at, "Embedding max_norm is not supported");
  if (a[5] && arg_bool(L, at, a[5], "scale_grad_by_freq")) lower_error(L, at, "Embedding scale_grad_by_freq is not supported");
  int sparse = a[6] && arg_bool(L, at, a[6], "sparse");
  set_int(L, o, "num_embeddings", d[0]);
  set_int(L, o, "embedding_dim", d[1]);
  env_set(L, o->attrs, "padding_idx", a[2] ? a[2] : pv_none(L));
  PV *w = new_param(L, at, o, "weight", DT_F32, 2, d, PINIT_NORMAL, 0, 1);
  if (sparse && w && w->k == PV_TENSOR && w->t->slot) w->t->slot->sparse_grad = 1;
  if (a[2] && a[2]->k != PV_NONE && w && w->k == PV_TENSOR && w->t->slot) {
    int64_t p = arg_int(L, at, a[2], "padding_idx");
    if (p < -d[0] || p >= d[0])
      lower_error(L, at, "padding_idx %lld is out of range for %lld embeddings", (long long)p, (long long)d[0]);
    w->t->slot->zero_row1 = (p < 0 ? p + d[0] : p) + 1;   /* PyTorch zeroes that row after normal_ */
  }
  return o;
}

PV *layer_embedding_forward(L *L, PV *o, Args *A) {
  PV *x = layer_input(L, o, A);
  return t_embedding(L, A->at, env_get(o->attrs, "weight"), x, env_get(o->attrs, "padding_idx"));
}
