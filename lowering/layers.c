/* layers.c - nn.Module objects and the builtin layers: their constructors
 * (parameters in PyTorch's registration order, PyTorch's default init) and
 * their forwards (which call tensor.c). */
#include <math.h>
#include <string.h>
#include "lower_int.h"


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
        Slot *s = slot_new(L, at, val->t->type, PINIT_DATA, 0, 0);
        s->is_buffer = 1;
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
static int64_t get_int(L *L, PV *obj, const char *name) { return env_get(obj->attrs, name)->i; }
static double get_num(L *L, PV *obj, const char *name) { return pv_num(env_get(obj->attrs, name)); }

static void pair(L *L, Span at, PV *v, int64_t dflt, int64_t out[2], const char *what) {
  if (!v) {
    out[0] = out[1] = dflt;
    return;
  }
  if (arg_ints(L, at, v, out, 2, what) == 1) out[1] = out[0];
}

static PV *pair_pv(L *L, const int64_t v[2]) {
  PV *items[2] = {pv_int(L, v[0]), pv_int(L, v[1])};
  return pv_tuple(L, items, 2);
}

PV *layer_construct(L *L, PV *cls, Args *A) {
  PV *a[10];
  Span at = A->at;
  int bi = cls->bi;
  if (bi == BI_C_MODULE) return module_new(L, cls);
  if (bi == BI_C_OBJECT) {
    PV *o = pv_new(L, PV_OBJ);
    o->cls = cls;
    o->attrs = env_new(L, NULL);
    return o;
  }
  if (bi == BI_C_PARAMETER) {
    bind_args(L, A, "data,requires_grad=", a);
    if (a[0]->k != PV_TENSOR) lower_error(L, at, "nn.Parameter needs a tensor");
    if (!a[0]->t->data && !a[0]->t->slot) lower_error(L, at, "nn.Parameter needs a tensor computed at compile time");
    if (a[0]->t->slot) return a[0];
    Tensor *t = arena_alloc(L->a, sizeof *t);
    *t = *a[0]->t;
    t->requires_grad = a[1] ? arg_bool(L, at, a[1], "requires_grad") : 1;
    return pv_tensor(L, t);
  }
  if (bi >= BI_O_SGD && bi <= BI_O_ADADELTA) return optim_construct(L, cls, A);
  if (bi >= BI_S_STEPLR && bi <= BI_S_ONECYCLELR) return sched_construct(L, cls, A);
  if (L->fn) lower_error(L, at, "creating layers inside compiled code is not supported; create them in __init__");
  PV *o = module_new(L, cls);
  if (loss_fn_of_class(bi)) {
    loss_construct(L, o, loss_fn_of_class(bi), A);
    return o;
  }
  switch (bi) {
  case BI_C_LINEAR: {
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
  case BI_C_CONV2D: {
    bind_args(L, A, "in_channels,out_channels,kernel_size,stride=,padding=,dilation=,groups=,bias=,padding_mode=", a);
    int64_t cin = arg_int(L, at, a[0], "in_channels"), cout = arg_int(L, at, a[1], "out_channels");
    int64_t k[2], s[2], p[2], d[2];
    pair(L, at, a[2], 1, k, "kernel_size");
    pair(L, at, a[3], 1, s, "stride");
    if (a[4] && a[4]->k == PV_STR) lower_error(L, at, "string padding ('same', 'valid') is not supported yet");
    pair(L, at, a[4], 0, p, "padding");
    pair(L, at, a[5], 1, d, "dilation");
    if (a[6] && arg_int(L, at, a[6], "groups") != 1) lower_error(L, at, "Conv2d with groups != 1 is not supported yet");
    if (a[8] && (a[8]->k != PV_STR || strcmp(a[8]->s, "zeros"))) lower_error(L, at, "only padding_mode='zeros' is supported");
    set_int(L, o, "in_channels", cin);
    set_int(L, o, "out_channels", cout);
    env_set(L, o->attrs, "kernel_size", pair_pv(L, k));
    env_set(L, o->attrs, "stride", pair_pv(L, s));
    env_set(L, o->attrs, "padding", pair_pv(L, p));
    env_set(L, o->attrs, "dilation", pair_pv(L, d));
    int64_t wd[4] = {cout, cin, k[0], k[1]};
    PV *w = new_param(L, at, o, "weight", DT_F32, 4, wd, PINIT_UNIFORM, 0, 0);
    /* fan-in of the checked weight (its numel fits, so this product does too) */
    double bound = 1.0 / sqrt((double)(cin * k[0] * k[1]));
    w->t->slot->init_a = -bound;
    w->t->slot->init_b = bound;
    if (!a[7] || arg_bool(L, at, a[7], "bias")) new_param(L, at, o, "bias", DT_F32, 1, &cout, PINIT_UNIFORM, -bound, bound);
    else module_setattr(L, at, o, "bias", pv_none(L));
    return o;
  }
  case BI_C_MAXPOOL2D:
  case BI_C_AVGPOOL2D: {
    if (bi == BI_C_MAXPOOL2D) bind_args(L, A, "kernel_size,stride=,padding=,dilation=,return_indices=,ceil_mode=", a);
    else bind_args(L, A, "kernel_size,stride=,padding=,ceil_mode=,count_include_pad=,divisor_override=", a);
    int64_t k[2];
    pair(L, at, a[0], 1, k, "kernel_size");
    env_set(L, o->attrs, "kernel_size", a[0]);
    env_set(L, o->attrs, "stride", a[1] && a[1]->k != PV_NONE ? a[1] : a[0]);
    env_set(L, o->attrs, "padding", a[2] ? a[2] : pv_int(L, 0));
    if (bi == BI_C_MAXPOOL2D) {
      env_set(L, o->attrs, "dilation", a[3] ? a[3] : pv_int(L, 1));
      if (a[4] && arg_bool(L, at, a[4], "return_indices")) lower_error(L, at, "return_indices=True is not supported");
      env_set(L, o->attrs, "ceil_mode", a[5] ? a[5] : pv_bool(L, 0));
    } else {
      env_set(L, o->attrs, "ceil_mode", a[3] ? a[3] : pv_bool(L, 0));
      env_set(L, o->attrs, "count_include_pad", a[4] ? a[4] : pv_bool(L, 1));
      if (a[5] && a[5]->k != PV_NONE) lower_error(L, at, "divisor_override is not supported");
    }
    return o;
  }
  case BI_C_ADAPTIVEAVGPOOL2D:
    bind_args(L, A, "output_size", a);
    env_set(L, o->attrs, "output_size", a[0]);
    return o;
  case BI_C_RELU:
  case BI_C_TANH:
  case BI_C_SIGMOID:
  case BI_C_SILU:
  case BI_C_IDENTITY:
    if (bi == BI_C_IDENTITY) return o; /* nn.Identity accepts and ignores any arguments */
    bind_args(L, A, "inplace=", a);
    env_set(L, o->attrs, "inplace", pv_bool(L, a[0] ? arg_bool(L, at, a[0], "inplace") : 0));
    return o;
  case BI_C_LEAKYRELU:
    bind_args(L, A, "negative_slope=,inplace=", a);
    env_set(L, o->attrs, "negative_slope", a[0] ? pv_float(L, arg_num(L, at, a[0], "negative_slope")) : pv_float(L, 0.01));
    env_set(L, o->attrs, "inplace", pv_bool(L, a[1] ? arg_bool(L, at, a[1], "inplace") : 0));
    return o;
  case BI_C_GELU:
    bind_args(L, A, "approximate=", a);
    env_set(L, o->attrs, "approximate", a[0] ? a[0] : pv_str(L, "none"));
    return o;
  case BI_C_SOFTMAX:
  case BI_C_LOGSOFTMAX:
    bind_args(L, A, "dim=", a);
    if (!a[0] || a[0]->k == PV_NONE) lower_error(L, at, "nn.%s without dim is not supported; pass dim explicitly", cls->s);
    env_set(L, o->attrs, "dim", a[0]);
    return o;
  case BI_C_FLATTEN:
    bind_args(L, A, "start_dim=,end_dim=", a);
    env_set(L, o->attrs, "start_dim", a[0] ? a[0] : pv_int(L, 1));
    env_set(L, o->attrs, "end_dim", a[1] ? a[1] : pv_int(L, -1));
    return o;
  case BI_C_DROPOUT:
    bind_args(L, A, "p=,inplace=", a);
    env_set(L, o->attrs, "p", a[0] ? pv_float(L, arg_num(L, at, a[0], "p")) : pv_float(L, 0.5));
    return o;
  case BI_C_SEQUENTIAL:
  case BI_C_MODULELIST: {
    PV **items = A->args;
    int n = A->nargs;
    if (bi == BI_C_MODULELIST) {
      bind_args(L, A, "modules=", a);
      n = a[0] ? iter_items(L, at, a[0], &items) : 0;
    } else if (A->nkw)
      lower_error(L, at, "nn.Sequential takes modules as positional arguments");
    if (bi == BI_C_SEQUENTIAL && n == 1 && items[0]->k == PV_DICT) {
      PV *d = items[0];
      for (int i = 0; i < d->n; i++) {
        if (!pv_is_module(d->items[i])) lower_error(L, at, "nn.Sequential entries must be modules");
        module_setattr(L, at, o, d->keys[i]->s, d->items[i]);
      }
      return o;
    }
    for (int i = 0; i < n; i++) {
      if (!pv_is_module(items[i]))
        lower_error(L, at, "%s entries must be modules, got '%s'", cls->s, pv_kind_name(items[i]));
      module_setattr(L, at, o, arena_printf(L->a, "%d", i), items[i]);
    }
    return o;
  }
  case BI_C_MODULEDICT: {
    bind_args(L, A, "modules=", a);
    if (a[0]) {
      if (a[0]->k != PV_DICT) lower_error(L, at, "nn.ModuleDict needs a dict");
      for (int i = 0; i < a[0]->n; i++) {
        if (a[0]->keys[i]->k != PV_STR || !pv_is_module(a[0]->items[i]))
          lower_error(L, at, "nn.ModuleDict needs str keys and module values");
        module_setattr(L, at, o, a[0]->keys[i]->s, a[0]->items[i]);
      }
    }
    return o;
  }
  case BI_C_LAYERNORM: {
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
  case BI_C_EMBEDDING: {
    bind_args(L, A, "num_embeddings,embedding_dim,padding_idx=,max_norm=", a);
    int64_t d[2] = {arg_int(L, at, a[0], "num_embeddings"), arg_int(L, at, a[1], "embedding_dim")};
    if (a[3] && a[3]->k != PV_NONE) lower_error(L, at, "Embedding max_norm is not supported");
    set_int(L, o, "num_embeddings", d[0]);
    set_int(L, o, "embedding_dim", d[1]);
    env_set(L, o->attrs, "padding_idx", a[2] ? a[2] : pv_none(L));
    new_param(L, at, o, "weight", DT_F32, 2, d, PINIT_NORMAL, 0, 1);
    return o;
  }
  default: break;
  }
  lower_error(L, at, "nn.%s is not supported by ctc yet", cls->s);
}

/* inplace=True layers update their input tensor, as PyTorch does. */
static PV *inplace(L *L, Span at, PV *o, PV *x, PV *r) {
  PV *f = env_get(o->attrs, "inplace");
  return f && f->i ? t_inplace(L, at, x, r) : r;
}

/* Calling a builtin layer object: its forward. */
PV *layer_forward(L *L, PV *o, Args *A) {
  PV *a[2];
  Span at = A->at;
  int bi = o->cls->bi;
  if (bi == BI_C_MODULE) lower_error(L, at, "nn.Module() has no forward");
  if (bi == BI_C_MODULELIST || bi == BI_C_MODULEDICT) lower_error(L, at, "%s is not callable; iterate over it", o->cls->s);
  if (bi == BI_C_SEQUENTIAL) {
    PV **items;
    int n = iter_items(L, at, o, &items);
    bind_args(L, A, "input", a);
    PV *x = a[0];
    for (int i = 0; i < n; i++) x = call_value(L, at, items[i], &x, 1, NULL, NULL, 0);
    return x;
  }
  if (loss_fn_of_class(bi)) return loss_module_forward(L, o, loss_fn_of_class(bi), A);
  bind_args(L, A, "input", a);
  PV *x = a[0];
  if (x->k != PV_TENSOR) lower_error(L, at, "%s expects a tensor input, got '%s'", o->cls->s, pv_kind_name(x));
  PV *attr_w = env_get(o->attrs, "weight"), *attr_b = env_get(o->attrs, "bias");
  switch (bi) {
  case BI_C_LINEAR: return t_linear(L, at, x, attr_w, attr_b);
  case BI_C_CONV2D: {
    int64_t s[2], p[2], d[2];
    arg_ints(L, at, env_get(o->attrs, "stride"), s, 2, "stride");
    arg_ints(L, at, env_get(o->attrs, "padding"), p, 2, "padding");
    arg_ints(L, at, env_get(o->attrs, "dilation"), d, 2, "dilation");
    return t_conv2d(L, at, x, attr_w, attr_b, s, p, d);
  }
  case BI_C_MAXPOOL2D:
  case BI_C_AVGPOOL2D: {
    int64_t k[2], s[2], p[2], d[2] = {1, 1};
    pair(L, at, env_get(o->attrs, "kernel_size"), 1, k, "kernel_size");
    pair(L, at, env_get(o->attrs, "stride"), 1, s, "stride");
    pair(L, at, env_get(o->attrs, "padding"), 0, p, "padding");
    if (bi == BI_C_MAXPOOL2D) pair(L, at, env_get(o->attrs, "dilation"), 1, d, "dilation");
    int cm = arg_bool(L, at, env_get(o->attrs, "ceil_mode"), "ceil_mode");
    int cip = bi == BI_C_AVGPOOL2D ? arg_bool(L, at, env_get(o->attrs, "count_include_pad"), "count_include_pad") : 1;
    return t_pool2d(L, at, bi == BI_C_MAXPOOL2D ? IR_MAXPOOL2D : IR_AVGPOOL2D, x, k, s, p, d, cm, cip);
  }
  case BI_C_ADAPTIVEAVGPOOL2D: return t_adaptive_avg_pool2d(L, at, x, env_get(o->attrs, "output_size"));
  case BI_C_RELU: return inplace(L, at, o, x, t_unary(L, at, IR_RELU, x));
  case BI_C_TANH: return t_unary(L, at, IR_TANH, x);
  case BI_C_SIGMOID: return t_unary(L, at, IR_SIGMOID, x);
  case BI_C_SILU: return inplace(L, at, o, x, t_binary(L, at, OP_MUL, x, t_unary(L, at, IR_SIGMOID, x)));
  case BI_C_IDENTITY: return x;
  case BI_C_LEAKYRELU: {
    double s = get_num(L, o, "negative_slope");
    return inplace(L, at, o, x, t_where(L, at, t_compare(L, at, OP_GT, x, pv_float(L, 0)), x, t_binary(L, at, OP_MUL, x, pv_float(L, s))));
  }
  case BI_C_GELU: {
    PV *ap = env_get(o->attrs, "approximate");
    if (ap->k != PV_STR || (strcmp(ap->s, "none") && strcmp(ap->s, "tanh")))
      lower_error(L, at, "GELU approximate must be 'none' or 'tanh'");
    return t_gelu(L, at, x, !strcmp(ap->s, "tanh"));
  }
  case BI_C_SOFTMAX:
  case BI_C_LOGSOFTMAX:
    return t_softmax(L, at, x, get_int(L, o, "dim"), bi == BI_C_LOGSOFTMAX);
  case BI_C_FLATTEN: {
    Type t = x->t->type;
    int64_t s = t_norm_dim(L, at, get_int(L, o, "start_dim"), t.ndim);
    int64_t e = t_norm_dim(L, at, get_int(L, o, "end_dim"), t.ndim);
    int64_t dims[IR_MAX_DIMS];
    int n = 0;
    for (int i = 0; i < t.ndim; i++) {
      if (i > s && i <= e) dims[n - 1] *= t.dims[i];
      else dims[n++] = t.dims[i];
    }
    return t_mark_view(L, x, t_reshape(L, at, x, dims, n));
  }
  case BI_C_DROPOUT: return t_dropout(L, at, x, get_num(L, o, "p"), o->mod->training);
  case BI_C_LAYERNORM: {
    PV *ns = env_get(o->attrs, "normalized_shape");
    Type t = x->t->type;
    for (int i = 0; i < ns->n; i++)
      if (ns->n > t.ndim || t.dims[t.ndim - ns->n + i] != ns->items[i]->i)
        lower_error(L, at, "shape mismatch in LayerNorm: input %s, normalized_shape %s", shape_str(L, &t), pv_repr(L, at, ns));
    return t_layer_norm(L, at, x, ns->n, attr_w, attr_b, get_num(L, o, "eps"));
  }
  case BI_C_EMBEDDING: return t_embedding(L, at, attr_w, x, env_get(o->attrs, "padding_idx"));
  default: break;
  }
  lower_error(L, at, "calling nn.%s is not supported by ctc yet", o->cls->s);
}
