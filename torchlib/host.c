/* host.c - torchlib's side of the host-object protocol (HostOps in
 * python/py.h): what the Python interpreter (python/) does with tensors,
 * dtypes, nn.Module objects, optimizers, torch namespaces, grad-mode context
 * managers and decorators, which it does not know itself. */
#include <string.h>
#include "torch_int.h"

static int is_tensor(const PV *v) { return v->k == PV_TENSOR; }

static PV *h_getattr(L *L, Span at, PV *obj, const char *name) {
  switch (obj->k) {
  case PV_NS: return ns_getattr(L, at, obj, name);
  case PV_TENSOR:
    if (obj->t->cplx) return cx_getattr(L, at, obj, name);
    if (obj->t->low && !strcmp(name, "dtype"))   /* autocast.c */
      return pv_dtype(L, obj->t->low == LOW_F16 ? DT_F16_MARK : DT_BF16_MARK);
    if (obj->t->low && (!strcmp(name, "T") || !strcmp(name, "mT") || !strcmp(name, "data") || !strcmp(name, "H") ||
                         !strcmp(name, "mH")))
      return ac_view_result(L, obj, tensor_getattr(L, at, obj, name));
    return tensor_getattr(L, at, obj, name);
  case PV_OBJ:
    if (obj->mod) {
      if (strcmp(name, "training") == 0) return pv_bool(L, obj->mod->training);
      if (obj->mod->ddp && strcmp(name, "module") == 0) return obj;   /* DistributedDataParallel(m).module */
      PV *m = bi_lookup(L, NS_MODULE, name, obj);
      /* append, items ... are methods of the containers only */
      if (m && m->k == PV_BUILTIN && bi_rows[m->bi].call == bi_container_method && !module_container(obj)) return NULL;
      return m;
    }
    /* an instance of a builtin class that is no module (an optimizer, a scheduler):
     * its methods are the rows of its class's method namespace */
    if (obj->cls && obj->cls->bi) return bi_lookup(L, bi_rows[obj->cls->bi].methods, name, obj);
    return NULL;
  case PV_TUPLE:
    if (obj->bi == BI_FW_UNPACK_DUAL && (!strcmp(name, "primal") || !strcmp(name, "tangent")))
      return obj->items[!strcmp(name, "tangent")];
    /* torch.return_types of max/min(dim) and aminmax */
    if (obj->bi == BI_T_MAX && (!strcmp(name, "values") || !strcmp(name, "indices")))
      return obj->items[!strcmp(name, "indices")];
    if (obj->bi == BI_T_AMINMAX && (!strcmp(name, "min") || !strcmp(name, "max"))) return obj->items[!strcmp(name, "max")];
    return NULL;
  case PV_BUILTIN:   /* a GradScaler's methods (autocast.c) */
    return obj->bi == BI_T_SCALER_OBJ ? bi_lookup(L, NS_SCALER, name, obj) : NULL;
  default: return NULL;
  }
}

/* v (an IR value of the entry being staged) reads no input, parameter or state */
static int const_only(L *L, ValId v) {
  Func *f = L->T->fn;
  Value *val = ir_val(f, v);
  if (val->kind != V_INST) return 0;
  char *dep = arena_alloc(L->a, (size_t)f->values.len + 1);   /* zeroed: 1 = reads an input, parameter or state */
  for (int i = 0; i < f->values.len; i++) dep[i] = f->values.data[i].kind != V_INST;
  for (int k = 0; k <= val->def; k++) {
    Inst *in = &f->insts.data[k];
    int d = in->op == IR_RAND_UNIFORM;
    for (int i = 0; i < in->nargs && !d; i++) d = dep[in->args[i]];
    dep[in->res] = (char)d;
  }
  return !dep[v];
}

void attr_cache_restore(L *L) {
  for (int i = L->T->attr_undo.len - 1; i >= 0; i--) {
    struct AttrUndo *u = &L->T->attr_undo.data[i];
    env_set(L, u->obj->attrs, u->name, u->old ? u->old : pv_none(L));
  }
  L->T->attr_undo.len = 0;
}

/* While staging, `self.name = val` may set a plain attribute (no parameter, buffer
 * or submodule name) to a tensor or None when the value it had before this entry
 * was None or nothing: an output the caller reads back (self.last_loss = loss).
 * State carried from one call to the next (a tensor there from __init__, an int
 * counter) stays an error: the program would not carry it between its runs. */
static int plain_output_attr(L *L, PV *obj, const char *name, PV *val) {
  if (val->k != PV_TENSOR && val->k != PV_NONE) return 0;
  if (val->k == PV_TENSOR && val->t->slot) return 0;
  for (int i = 0; i < obj->mod->regs.len; i++)
    if (!strcmp(obj->mod->regs.data[i].name, name)) return 0;
  PV *before = env_get(obj->attrs, name);
  for (int i = 0; i < L->T->attr_undo.len; i++)   /* written earlier in this entry: its value then */
    if (L->T->attr_undo.data[i].obj == obj && !strcmp(L->T->attr_undo.data[i].name, name)) {
      before = L->T->attr_undo.data[i].old;
      break;
    }
  return !before || before->k == PV_NONE;
}

static int h_setattr(L *L, Span at, PV *obj, const char *name, PV *val) {
  if (obj->k == PV_NS && !strncmp(obj->s, "torch.backends", 14))
    return 1; /* cudnn.benchmark = True, allow_tf32 ...: settings of back ends ctc does not use */
  if (obj->k == PV_TENSOR) {
    if (cx_is(obj)) cx_refuse(L, at, arena_printf(L->a, "setting '%s'", name));
    tensor_setattr(L, at, obj, name, val);
    return 1;
  }
  if (obj->k == PV_OBJ && obj->mod) {
    if (L->T->fn && val->k == PV_TENSOR && env_get(obj->attrs, name) == val)
      return 1;   /* self.freqs_cis = self.freqs_cis.to(h.device) (llama): the value it holds */
    if (L->T->fn && val->k == PV_TENSOR && val->t->v >= 0 && !val->t->slot && const_only(L, val->t->v)) {
      /* a cache of a tensor computed from constants only (word_language_model's
       * `self.src_mask = mask`, a causal mask of the sequence length): every call
       * would compute the same value, so the attribute holds it while this entry is
       * staged and is restored afterwards (its IR value belongs to this entry) */
      struct AttrUndo u = {obj, name, env_get(obj->attrs, name)};
      vec_push(L->a, &L->T->attr_undo, u);
      env_set(L, obj->attrs, name, val);
      return 1;
    }
    if (L->T->fn && plain_output_attr(L, obj, name, val)) {
      /* self.last_loss = loss, self.aux = None: a plain attribute the caller reads back
       * after the call; it holds the value for the rest of this entry (as the cache above) */
      struct AttrUndo u = {obj, name, env_get(obj->attrs, name)};
      vec_push(L->a, &L->T->attr_undo, u);
      env_set(L, obj->attrs, name, val);
      return 1;
    }
    if (L->T->fn)
      lower_error(L, at, "assigning 'self.%s' inside compiled code is a Python side effect that "
                         "ctc cannot compile; keep state changes in __init__ (a tensor computed from "
                         "constants only may be cached this way)", name);
    module_setattr(L, at, obj, name, val);
    return 1;
  }
  return 0;
}

/* The result of calling a sub-module is named after it: self.conv1(x) -> "conv1". */
static PV *h_call_result(L *L, PV *module, PV *r) {
  if (!L->T->fn || !module->mod || !module->mod->path || r->k != PV_TENSOR || r->t->v < 0 || r->t->slot) return r;
  Value *v = ir_val(L->T->fn, r->t->v);
  if (v->kind != V_INST) return r;
  char *nm = arena_strdup(L->a, module->mod->path);
  for (char *c = nm; *c; c++)
    if (*c == '.') *c = '_';
  v->name = nm;
  return r;
}

static PV *h_base_init(L *L, PV *base, PV *self, const char *name);

/* Calling a module: a builtin layer's forward, or the user's forward method. */
static PV *h_call(L *L, Span at, PV *obj, Args *A) {
  if (obj->cls->bi) {   /* a frame for notes: "in 'stem.2 (Linear)' called here", "created here" */
    if (L->nstack < 64) {
      L->stack_span[L->nstack] = at;
      L->stack_name[L->nstack] = obj->mod && obj->mod->path ? arena_printf(L->a, "%s (%s)", obj->mod->path, obj->cls->s)
                                                            : obj->cls->s;
      L->stack_made[L->nstack] = obj->mod ? obj->mod->made : (Span){0};
      L->stack_env[L->nstack] = L->env;
    }
    L->nstack++;
    PV *r = layer_call(L, obj, A);
    L->nstack--;
    return h_call_result(L, obj, r);
  }
  PV *fwd = getattr_opt(L, at, obj, "forward"), *base;
  if (!fwd && (base = layer_base_class(obj->cls)))   /* class M(nn.Linear) without its own forward */
    fwd = h_base_init(L, base, obj, "forward");
  if (!fwd) lower_error(L, at, "module '%s' has no forward method", obj->cls->s);
  if (L->nstack < 64) { /* the frame's name in notes */
    L->stack_span[L->nstack] = at;
    L->stack_name[L->nstack] = arena_printf(L->a, "%s.forward", obj->cls->s);
  }
  /* what it stages belongs to this module (Inst.scope: the C target's per-module functions) */
  Func *fn = L->T->fn;
  int scope = fn ? fn->scope : 0;
  if (fn && obj->mod && obj->mod->path && obj->mod->path[0]) fn->scope = ir_scope(L->T->prog, obj->mod->path, obj->cls->s);
  PV *r = call_value(L, at, fwd, A->args, A->nargs, A->kwnames, A->kwvals, A->nkw);
  if (fn) fn->scope = scope;
  return h_call_result(L, obj, r);
}

static PV *binary_f32(L *L, Span at, int op, PV *a, PV *b) {
  if (op == OP_MATMUL) return t_matmul(L, at, a, b);
  return t_binary(L, at, op, a, b);
}

static PV *h_binary(L *L, Span at, int op, PV *a, PV *b) {
  if (cx_is(a) || cx_is(b) || a->k == PV_COMPLEX || b->k == PV_COMPLEX)   /* 1j * theta: complex.c */
    return op == OP_MATMUL ? (cx_refuse(L, at, "'@'"), NULL) : cx_binary(L, at, op, a, b);
  return ac_binary(L, at, op, a, b, binary_f32);   /* autocast.c: the f32 op, or its bf16 policy */
}

static PV *h_unary(L *L, Span at, int op, PV *a) {
  if (!is_tensor(a)) lower_error(L, at, "bad operand type for unary %s: '%s'", fe_op_spelling(op), pv_kind_name(a));
  if (cx_is(a)) return cx_unary(L, at, op, a);
  if (op == OP_NEG) return ac_view_result(L, a, t_unary(L, at, IR_NEG, a));   /* -bf16 is bf16 exactly (f16 too) */
  if (op == OP_POS) return a;
  return t_invert(L, at, a);   /* OP_INVERT: bitwise not (logical on bool) */
}

static void one_element(L *L, Span at, PV *c) {
  Type ct = t_type(c);
  int64_t numel = 1;
  for (int d = 0; d < ct.ndim; d++) numel *= ct.dims[d];
  if (numel != 1) lower_error(L, at, "Boolean value of Tensor with more than one value is ambiguous");
}

static PV *h_compare(L *L, Span at, int op, PV *a, PV *b) {
  if ((a->k == PV_DTYPE || b->k == PV_DTYPE) && (op == OP_EQ || op == OP_NE))   /* x.dtype == torch.float32 */
    return pv_bool(L, (a->k == b->k && a->dt == b->dt) == (op == OP_EQ));
  if (cx_is(a) || cx_is(b)) cx_refuse(L, at, arena_printf(L->a, "'%s'", fe_op_spelling(op)));
  return t_compare(L, at, op, a, b);
}

static PV *h_index(L *L, Span at, PV *obj, PV *idx) {
  if (obj->k == PV_TENSOR && !L->T->fn && obj->t->slot && !obj->t->data) return param_opaque(L, at, "<parameter>[...]");
  if (cx_is(obj)) return cx_index(L, at, obj, idx);
  if (obj->k == PV_TENSOR) return ac_view_result(L, obj, t_index(L, at, obj, idx));
  if (pv_is_module(obj) && obj->cls->bi) {
    PV **items;
    int n = iter_items(L, at, obj, &items);
    if (obj->cls->bi == BI_C_MODULEDICT) {
      for (int i = 0; i < obj->mod->regs.len; i++)
        if (idx->k == PV_STR && strcmp(obj->mod->regs.data[i].name, idx->s) == 0) return obj->mod->regs.data[i].val;
      lower_error(L, at, "ModuleDict has no key %s", pv_repr(L, at, idx));
    }
    int64_t i = arg_int(L, at, idx, "index");
    if (i < 0) i += n;
    if (i < 0 || i >= n) lower_error(L, at, "index %lld out of range for a %s of %d modules", (long long)i, obj->cls->s, n);
    return items[i];
  }
  return NULL;
}

/* Whether index idx is known at compile time: ints, slices of ints, None, `...`, compile-time tensors. */
static int index_known(const PV *idx) {
  switch (idx->k) {
  case PV_NONE: case PV_BOOL: case PV_INT: case PV_ELLIPSIS: return 1;
  case PV_SLICE:
    for (int i = 0; i < 3; i++)
      if (idx->items[i]->k != PV_NONE && idx->items[i]->k != PV_INT) return 0;
    return 1;
  case PV_TUPLE:
  case PV_LIST:
    for (int i = 0; i < idx->n; i++)
      if (!index_known(idx->items[i])) return 0;
    return 1;
  case PV_TENSOR: return idx->t->data != NULL && !idx->t->slot;
  default: return 0;
  }
}

/* x[idx] = v in compiled code (makemore's `idx[:, 0] = 10`), the index known at compile time: the
 * positions it selects computed here, then x := where(selected, v's value for each, x), an in-place
 * update of x (refused for views and tensors with views, as every in-place update). v is broadcast
 * to the indexing result's shape and cast to x's dtype, as PyTorch's copy_ does. */
static void staged_setitem(L *L, Span at, PV *x, PV *idx, PV *v) {
  Type tt = x->t->type;
  const int64_t n = ir_numel(&tt);
  tt.dtype = DT_F64;
  PV *ids = t_const_tensor(L, at, tt, 0);
  for (int64_t i = 0; i < n; i++) ids->t->data[i] = (double)i;
  Func *fn = L->T->fn;
  L->T->fn = NULL;   /* the positions: ids indexed at compile time */
  PV *pos = t_index(L, at, ids, idx);
  L->T->fn = fn;
  Type r = pos->t->type;
  const int64_t m = ir_numel(&r);
  Type it = {.dtype = DT_I64, .ndim = 1, .dims = {n}}, mt = {.dtype = DT_BOOL, .ndim = 1, .dims = {n}};
  PV *src = t_const_tensor(L, at, it, 0), *sel = t_const_tensor(L, at, mt, 0);
  for (int64_t j = 0; j < m; j++) {
    const int64_t p = (int64_t)pos->t->data[j];
    if (sel->t->data[p]) lower_error(L, at, "assigning into a tensor through an index that selects an element twice is not supported");
    sel->t->data[p] = 1, src->t->data[p] = (double)j;
  }
  PV *val;
  setitem_shape_check(L, at, v, r);
  if (v->k == PV_TENSOR) {
    Type rv = r;
    rv.dtype = v->t->type.dtype;
    val = ir_type_eq(&rv, &v->t->type) ? v : t_expand_to(L, at, v, rv);
    val = t_gather(L, at, t_reshape(L, at, val, &m, 1), 0, src);   /* v's value for each of x's elements */
  } else if (pv_is_num(v)) {
    val = v;
  } else {
    lower_error(L, at, "assigning into a tensor needs a number or a tensor, got '%s'", pv_kind_name(v));
  }
  const int viewed = x->t->viewed;   /* (flat: a view of x only inside this update) */
  PV *flat = t_reshape(L, at, x, &n, 1);
  x->t->viewed = viewed;
  PV *r2 = t_where(L, at, sel, val, flat);
  if (r2->t->type.dtype != x->t->type.dtype) r2 = t_cast(L, at, r2, x->t->type.dtype);
  t_inplace(L, at, x, t_reshape(L, at, r2, x->t->type.dims, x->t->type.ndim));
}

static int h_setitem(L *L, Span at, PV *obj, PV *idx, PV *v) {
  if (module_container(obj)) {   /* self.heads["x"] = nn.Linear(...), self.layers[0] = ... */
    module_container_set(L, at, obj, idx, v);
    return 1;
  }
  if (cx_is(obj) || cx_is(v)) cx_refuse(L, at, "assigning into an index");
  if (obj->k == PV_TENSOR && ct_setitem(L, at, obj, idx, v)) return 1;   /* pe[:, 0::2] = ... in __init__ */
  if (obj->k == PV_TENSOR && L->T->fn && index_known(idx)) {
    staged_setitem(L, at, obj, idx, v);
    return 1;
  }
  if (obj->k == PV_TENSOR)
    lower_error(L, at, "assigning into a tensor through an index computed at run time is not supported; ctc "
                       "compiles value semantics (use torch.where or torch.scatter)");
  if (pv_is_module(obj) && (obj->cls->bi == BI_C_SEQUENTIAL || obj->cls->bi == BI_C_MODULELIST)) {
    /* seq[i] = module (a new head: backbone.classifier[1] = nn.Linear(...)): the i-th child replaced under its name */
    if (!pv_is_module(v)) lower_error(L, at, "%s items must be modules, got '%s'", obj->cls->s, pv_kind_name(v));
    int n = 0;
    for (int k = 0; k < obj->mod->regs.len; k++) n += obj->mod->regs.data[k].kind == REG_CHILD;
    int64_t i = arg_int(L, at, idx, "index");
    if (i < 0) i += n;
    if (i < 0 || i >= n) lower_error(L, at, "index %lld out of range for a %s of %d modules", (long long)i, obj->cls->s, n);
    for (int k = 0; k < obj->mod->regs.len; k++)
      if (obj->mod->regs.data[k].kind == REG_CHILD && i-- == 0) {
        module_setattr(L, at, obj, obj->mod->regs.data[k].name, v);
        return 1;
      }
  }
  return 0;
}

static int h_iterate(L *L, Span at, PV *v, PV ***out) {
  int nct;
  if (cx_is(v)) cx_refuse(L, at, "iterating");
  if (v->k == PV_TENSOR && (nct = ct_iterate(L, at, v, out)) >= 0) return nct;   /* a compile-time tensor */
  if (v->k == PV_TENSOR)
    lower_error(L, at, "iterating over a tensor is not supported in compiled code; index it or "
                       "use unbind-free tensor operations");
  if (v->k != PV_OBJ || !v->mod) return -1;
  eval_charge(L, at, v->mod->regs.len);
  int plist = v->cls && v->cls->bi == BI_C_PARAMETERLIST;
  int seq = v->cls && (v->cls->bi == BI_C_SEQUENTIAL || v->cls->bi == BI_C_MODULELIST || plist);
  int dict = v->cls && v->cls->bi == BI_C_MODULEDICT;
  if (!seq && !dict) return -1;
  PV **r = arena_alloc(L->a, sizeof(PV *) * (size_t)(v->mod->regs.len + 1));
  int n = 0;
  for (int i = 0; i < v->mod->regs.len; i++)
    if (v->mod->regs.data[i].kind == (plist ? REG_PARAM : REG_CHILD))
      r[n++] = seq ? v->mod->regs.data[i].val : pv_str(L, v->mod->regs.data[i].name);
  *out = r;
  return n;
}

static int h_truth(L *L, Span at, PV *v) {
  if (v->k == PV_TENSOR && !v->t->cplx && ct_applies(L, v, NULL)) {
    /* a compile-time tensor of one element (`if wavelen < high_freq_wavelen:` over the
     * items of a frequency table in __init__, as Llama 3's apply_scaling does) */
    one_element(L, at, v);
    return v->t->data[0] != 0;
  }
  if (v->k == PV_TENSOR)
    lower_error(L, at,
                "the truth value of a tensor depends on run-time data; a tensor-valued condition "
                "cannot be compiled (conditions must be known at compile time)");
  return 1;
}

static int h_runtime(L *L, PV *v) { return v->k == PV_TENSOR && L->T->fn && !v->t->data; }
static int h_staging(L *L) { return L->T->fn != NULL; }

static PV *h_select(L *L, Span at, PV *c, PV *a, PV *b) {
  if (cx_is(a) || cx_is(b)) cx_refuse(L, at, "a branch on a run-time condition selecting");
  PV *r = t_where(L, at, c, a, b);
  /* both sides bf16 (or f16; autocast.c): so is the value selected */
  if (a->k == PV_TENSOR && b->k == PV_TENSOR && a->t->low && b->t->low == a->t->low) r = ac_view_result(L, a, r);
  return r;
}

static PV *h_inplace(L *L, Span at, int op, PV *cur, PV *rhs) {
  if (op == OP_ADD && module_container(cur) == 1) {   /* self.layers += [...]: extend */
    PV *ext = bi_lookup(L, NS_MODULE, "extend", cur);
    call_value(L, at, ext, &rhs, 1, NULL, NULL, 0);
    return cur;
  }
  if (cx_is(cur) || cx_is(rhs)) cx_refuse(L, at, arena_printf(L->a, "'%s=' (an in-place update)", fe_op_spelling(op)));
  if (cur->k != PV_TENSOR || !L->T->fn) return NULL;
  /* `x += y` on a tensor updates it in place: other names bound to it see the change */
  staged_effect_check(L, at, "an in-place update of a tensor (write `x = x + ...`)");
  PV *r = h_binary(L, at, op, cur, rhs);
  if (cur->t->low && r->k == PV_TENSOR && r->t->low != cur->t->low) r = ac_round(L, at, r, cur->t->low);   /* a bf16 tensor stays bf16 */
  return t_inplace(L, at, cur, r);
}

static void h_name_value(L *L, PV *v, const char *name) {
  if (v->k != PV_TENSOR || !L->T->fn || v->t->v < 0) return;
  Value *val = ir_val(L->T->fn, v->t->v);
  if (val->kind == V_INST) val->name = arena_strdup(L->a, name);
}

static PV *h_construct(L *L, PV *cls, Args *A) { return class_construct(L, cls, A); }

/* a builtin layer class a user class may derive from (class M(nn.Transformer)) */
static int layer_base(const PV *c) { return c->k == PV_CLASS && c->bi >= PY_BI__COUNT && c->bi < BI__COUNT && bi_rows[c->bi].kind == BK_LAYER; }

static PV *h_instance(L *L, PV *cls) {
  for (PV *c = cls; c; c = c->cls)
    if (c->bi == BI_C_MODULE || layer_base(c)) return module_new(L, cls);
  return NULL;
}

static int h_can_subclass(const PV *base) { return base->bi == BI_C_MODULE || layer_base(base); }

/* super().__init__(...) in a class deriving from a builtin layer: the layer is
 * constructed and its parameters, buffers, children and options move into self
 * (in its registration order, as PyTorch's __init__ would register them) */
static PV *h_base_init(L *L, PV *base, PV *self, const char *name) {
  if (!layer_base(base) || !pv_is_module(self)) return NULL;
  int fwd = !strcmp(name, "forward");
  PV *f = pv_builtin(L, fwd ? BI_T_LAYER_BASE_FORWARD : BI_T_LAYER_BASE_INIT, name, self);
  f->cls = base;
  return f;
}

/* the builtin layer class a user class derives from, or NULL */
PV *layer_base_class(PV *cls) {
  for (PV *c = cls; c; c = c->cls)
    if (layer_base(c)) return c;
  return NULL;
}

/* the builtin layer's forward on an object of a class deriving from it: run on a
 * view of the object as the layer itself (same attributes and state) */
PV *bi_layer_base_forward(L *L, PV *fn, Args *A) {
  PV *p = pv_new(L, PV_OBJ);
  *p = *fn->self;
  p->cls = fn->cls;
  return layer_call(L, p, A);
}

PV *bi_layer_base_init(L *L, PV *fn, Args *A) {
  PV *self = fn->self, *o = class_construct(L, fn->cls, A);
  for (int i = 0; i < o->mod->regs.len; i++) {
    Reg r = o->mod->regs.data[i];
    if (r.kind == REG_BUFFER) {   /* kept a buffer (module_setattr registers parameters and children) */
      Reg nr = r;
      vec_push(L->a, &self->mod->regs, nr);
      env_set(L, self->attrs, r.name, r.val);
    } else
      module_setattr(L, A->at, self, r.name, r.val);
  }
  Env *e = o->attrs;
  for (int i = 0; i < e->names.len; i++)
    if (!env_get(self->attrs, e->names.data[i])) env_set(L, self->attrs, e->names.data[i], e->vals.data[i]);
  self->mod->training = o->mod->training;
  return pv_none(L);
}

static int h_isinstance(const PV *obj, const PV *cls) {
  if (cls->bi == BI_C_MODULE) return obj->k == PV_OBJ && obj->mod;
  if (cls->bi == BI_T_TENSOR_CLASS) return obj->k == PV_TENSOR || obj->k == PV_OPAQUE;   /* opaque: as before */
  DType dt;
  if (typed_tensor_class(cls->bi, &dt)) return obj->k == PV_TENSOR && obj->t->type.dtype == dt;
  return -1;
}

/* `with torch.no_grad():` (enable_grad, set_grad_enabled, inference_mode) and
 * `with forward_ad.dual_level():`; the token restores the grad mode and closes
 * the dual level (bit 16). */
static int h_with_enter(L *L, Span at, Node *it, PV *cm) {
  int token = L->T->grad_mode;
  if (cm->k == PV_BUILTIN && cm->bi == BI_T_AUTOCAST)
    lower_error(L, it->span, "'autocast' needs to be called: 'with torch.autocast('cpu', dtype=torch.bfloat16):'");
  if (cm->k == PV_BUILTIN && cm->bi == BI_T_AUTOCAST_MODE) {   /* autocast.c; bit 17, the state it replaces in 18-20 */
    if (it->b) lower_error(L, it->b->span, "'with torch.autocast(...) as ...' binds nothing useful");
    if (cm->n > 0 && !L->T->fn)
      lower_error(L, it->span, "torch.autocast outside compiled code (forward or a training function) is not "
                               "supported by ctc");
    token |= 1 << 17 | L->T->autocast << 18 | L->T->autocast_cuda << 20;   /* 0, LOW_BF16 or LOW_F16; CUDA lists */
    if (cm->n >= 0) {   /* -1: a 'cuda' region on the C target changes nothing (disabled, as PyTorch without CUDA) */
      L->T->autocast = (int)cm->n & 3;
      L->T->autocast_cuda = (int)cm->n >> 2 & 1;
    }
    return token;
  }
  if (cm->k == PV_BUILTIN && cm->bi == BI_FW_DUAL_LEVEL) {
    /* forward_ad.dual_level(): duals made inside belong to this level */
    if (it->b) lower_error(L, it->b->span, "'with dual_level() as ...' binds nothing useful");
    if (L->T->dual_depth) /* PyTorch: "Nested forward mode AD is not supported at the moment" */
      lower_error(L, it->span, "nested forward_ad.dual_level() is not supported (as in PyTorch); use "
                               "torch.func.jvp for higher-order forward mode");
    L->T->dual_primal.len = L->T->dual_tangent.len = 0;
    L->T->dual_depth++;
    return token | 1 << 16;
  }
  if (cm->k == PV_BUILTIN && (cm->bi == BI_T_NO_GRAD || cm->bi == BI_T_ENABLE_GRAD ||
                               cm->bi == BI_T_SET_GRAD_ENABLED || cm->bi == BI_T_INFERENCE_MODE))
    lower_error(L, it->span, "'%s' needs to be called: 'with torch.%s():'", cm->s, cm->s);
  if (!(cm->k == PV_BUILTIN && cm->bi == BI_T_GRAD_MODE))
    lower_error(L, it->span, "only 'with torch.no_grad():' (enable_grad, set_grad_enabled, inference_mode), "
                             "'with torch.autocast(...):' and 'with forward_ad.dual_level():' are supported as "
                             "context managers");
  if (it->b) lower_error(L, it->b->span, "'with torch.%s() as ...' binds nothing useful", cm->s);
  if (cm->n >= 0) token = (int)cm->n; /* set_grad_enabled switched when called: restore what it replaced */
  grad_mode_set(L, (int)cm->i);
  return token;
}

static void h_with_exit(L *L, int token) {
  if (token & 1 << 16) L->T->dual_depth--;
  if (token & 1 << 17) L->T->autocast = token >> 18 & 3, L->T->autocast_cuda = token >> 20 & 1;
  grad_mode_set(L, token & 0xffff);
}

/* @torch.no_grad(), @torch.enable_grad(), @torch.inference_mode() (bare forms too) */
static int h_decorate(L *L, PV *dec, PV *f) {
  if (dec->k == PV_BUILTIN && (dec->bi == BI_T_NO_GRAD || dec->bi == BI_T_ENABLE_GRAD ||
                               dec->bi == BI_T_INFERENCE_MODE)) {
    f->deco = 1 + (dec->bi == BI_T_NO_GRAD ? NG_REVERSE : dec->bi == BI_T_ENABLE_GRAD ? NG_NONE : NG_ALL);
    return 1;
  }
  if (dec->k == PV_BUILTIN && dec->bi == BI_T_GRAD_MODE && dec->n < 0) {
    f->deco = 1 + (int)dec->i;
    return 1;
  }
  return 0;
}

static int h_deco_enter(L *L, PV *fn) {
  int restore = L->T->grad_mode;
  grad_mode_set(L, fn->deco - 1);
  return restore;
}

static void h_deco_exit(L *L, int token) { grad_mode_set(L, token); }

/* math.cos(t) on a one-element run-time tensor (a learning rate computed from the
 * iteration counter): PyTorch converts it to a float; ctc stages the op on a 0-d
 * tensor. abs(t), len(t), sum() of tensors, int(t)/float(t) too. */
static PV *h_math(L *L, Span at, const char *f, PV *x) {
  if (x->k != PV_TENSOR) return NULL;
  if (cx_is(x)) return cx_math(L, at, f, x);
  if (!strcmp(f, "abs")) return t_unary(L, at, IR_ABS, x);
  if (!strcmp(f, "len")) return pv_int(L, x->t->type.ndim ? x->t->type.dims[0] : 0);
  if ((!strcmp(f, "int") || !strcmp(f, "float") || !strcmp(f, "bool")) && ct_applies(L, x, NULL)) {
    PV *v = ct_number(L, at, x);   /* a compile-time tensor's value */
    double d = pv_num(v);
    return f[0] == 'i' ? pv_int(L, (int64_t)d) : f[0] == 'f' ? pv_float(L, d) : pv_bool(L, d != 0);
  }
  if ((!strcmp(f, "int") || !strcmp(f, "float")) && !x->t->data && L->T->fn && ir_numel(&x->t->type) == 1) {
    /* of a one-element run-time tensor (the epoch or iteration counter in an LR
     * lambda): PyTorch's Python number is staged as a detached 0-d tensor, f64
     * for float(), i64 (truncated toward zero) for int() */
    PV *v = t_detach(L, at, x->t->type.ndim ? t_reshape(L, at, x, NULL, 0) : x);
    if (!strcmp(f, "float")) return t_cast(L, at, v, DT_F64);
    return t_cast(L, at, ir_dtype_is_float(x->t->type.dtype) ? t_unary(L, at, IR_TRUNC, v) : v, DT_I64);
  }
  if (!strcmp(f, "int") || !strcmp(f, "float") || !strcmp(f, "bool"))
    lower_error(L, at, "%s() of a tensor reads its value on the host; that cannot be compiled", f);
  static const struct { const char *f; Op op; } ops[] = {{"sqrt", IR_SQRT}, {"exp", IR_EXP}, {"log", IR_LOG},
                                                         {"tanh", IR_TANH}, {"cos", IR_COS}, {"sin", IR_SIN}};
  for (size_t k = 0; k < sizeof ops / sizeof ops[0]; k++)
    if (!strcmp(ops[k].f, f) && !x->t->data) {
      Type tt = t_type(x);
      int64_t numel = 1;
      for (int d = 0; d < tt.ndim; d++) numel *= tt.dims[d];
      if (numel != 1) lower_error(L, at, "only one element tensors can be converted to Python scalars");
      return t_unary(L, at, ops[k].op, tt.ndim ? t_reshape(L, at, x, NULL, 0) : x);
    }
  return NULL;
}

static const char *h_repr(L *L, Span at, const PV *v) {
  /* only dtypes come here (values.c: a tensor's text is PyTorch's printing, unknown) */
  static const char *names[DT_COUNT] = {[DT_F32] = "float32", [DT_F64] = "float64", [DT_I64] = "int64",
                                        [DT_I32] = "int32", [DT_BOOL] = "bool"};
  if (v->k != PV_DTYPE) lower_error(L, at, "the text of a tensor is not known to ctc");
  if (v->dt == DT_COMPLEX64) return "torch.complex64";
  if (v->dt == DT_BF16_MARK) return "torch.bfloat16";
  if (v->dt == DT_F16_MARK) return "torch.float16";
  return arena_printf(L->a, "torch.%s", names[v->dt]);
}


const HostOps torch_host = {
    .getattr = h_getattr, .setattr = h_setattr, .call = h_call,
    .binary = h_binary, .unary = h_unary, .compare = h_compare, .index = h_index, .setitem = h_setitem, .suggest = ns_suggest,
    .iterate = h_iterate, .truth = h_truth, .runtime = h_runtime, .staging = h_staging, .check_cond = one_element,
    .select = h_select, .inplace = h_inplace, .name_value = h_name_value, .construct = h_construct,
    .instance = h_instance, .can_subclass = h_can_subclass, .base_init = h_base_init, .isinstance = h_isinstance,
    .with_enter = h_with_enter, .with_exit = h_with_exit, .decorate = h_decorate,
    .deco_enter = h_deco_enter, .deco_exit = h_deco_exit, .math = h_math, .repr = h_repr,
};
