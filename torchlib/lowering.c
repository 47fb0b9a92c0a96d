/* lowering.c - the entry of lowering: run the module at compile time, pick
 * the model, build the state_dict table, stage forward into IR. */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>
#include "torch_int.h"
#include "../autograd_ad/autograd.h"

/* One type "f32[2,3]" at *pp; advances *pp past it. 0 ok, -1 bad syntax. A dim
 * may be a name (f32[N,784]: the run-time batch): its axis bit goes into *symmask
 * (NULL: names are refused) and the name into *sym (one name per spec), the dim is 1. */
static int parse_type(Arena *a, const char **pp, Type *out, unsigned *symmask, const char **sym, int *low) {
  const char *p = *pp;
  Type t = {0};
  t.dtype = DT_F32;
  /* ctc's names and PyTorch's; bf16 and f16 are float32 rounded on entry (low: LOW_BF16, LOW_F16) */
  static const struct { const char *n; DType d; int low; } dts[] = {
      {"f32", DT_F32, 0}, {"f64", DT_F64, 0}, {"i64", DT_I64, 0}, {"i32", DT_I32, 0}, {"bool", DT_BOOL, 0},
      {"float32", DT_F32, 0}, {"float", DT_F32, 0}, {"float64", DT_F64, 0}, {"double", DT_F64, 0},
      {"int64", DT_I64, 0}, {"long", DT_I64, 0}, {"int32", DT_I32, 0}, {"int", DT_I32, 0},
      {"bf16", DT_F32, LOW_BF16}, {"bfloat16", DT_F32, LOW_BF16}, {"f16", DT_F32, LOW_F16},
      {"float16", DT_F32, LOW_F16}, {"half", DT_F32, LOW_F16}};
  if (strncmp(p, "torch.", 6) == 0) p += 6;   /* torch.float32[...] */
  if (low) *low = 0;
  for (size_t i = 0; i < sizeof dts / sizeof dts[0]; i++) {
    size_t n = strlen(dts[i].n);
    if (strncmp(p, dts[i].n, n) == 0 && p[n] == '[') {
      if (dts[i].low && !low) return -1;
      t.dtype = dts[i].d;
      if (low) *low = dts[i].low;
      p += n;
    }
  }
  if (*p != '[') return -1;
  p++;
  while (*p != ']') {
    if (t.ndim == IR_MAX_DIMS) return -1;
    char *end;
    if (isalpha((unsigned char)*p) || *p == '_') {   /* a symbolic dim */
      const char *q = p;
      while (isalnum((unsigned char)*q) || *q == '_') q++;
      if (!symmask || (*sym && (strlen(*sym) != (size_t)(q - p) || strncmp(*sym, p, (size_t)(q - p))))) return -1;
      if (!*sym) *sym = arena_strndup(a, p, (size_t)(q - p));
      *symmask |= 1u << t.ndim;
      t.dims[t.ndim++] = 1;
      p = q;
      while (*p == ' ') p++;
      if (*p == ',') p++;
      else if (*p != ']') return -1;
      while (*p == ' ') p++;
      continue;
    }
    long long d = strtoll(p, &end, 10);
    if (end == p || d <= 0 || d > ((long long)1 << 40)) return -1;
    t.dims[t.ndim++] = d;
    p = end;
    while (*p == ' ') p++;
    if (*p == ',') p++;
    else if (*p != ']') return -1;
    while (*p == ' ') p++;
  }
  *pp = p + 1;
  *out = t;
  return 0;
}

int lower_parse_input_spec(Arena *a, const char *text, InputSpec *out) {
  const char *eq = strchr(text, '=');
  if (!eq || eq == text) return -1;
  out->name = arena_strndup(a, text, (size_t)(eq - text));
  out->ntuple = 0;
  out->elems = NULL;
  out->sym = NULL;
  out->symmask = 0;
  out->low = 0;
  const char *p = eq + 1;
  if (*p != '(') {
    if (parse_type(a, &p, &out->type, &out->symmask, &out->sym, &out->low) < 0 || *p) return -1;
    return 0;
  }
  Type el[IR_MAX_DIMS];
  int n = 0;
  p++;
  for (;;) {
    while (*p == ' ') p++;
    if (*p == ')' && n > 0) break;
    if (n == IR_MAX_DIMS || parse_type(a, &p, &el[n++], NULL, NULL, NULL) < 0) return -1;
    while (*p == ' ') p++;
    if (*p == ',') p++;
    else if (*p != ')') return -1;
  }
  if (p[1]) return -1;
  out->ntuple = n;
  out->elems = arena_alloc(a, sizeof(Type) * (size_t)n);
  memcpy(out->elems, el, sizeof(Type) * (size_t)n);
  out->type = el[0];
  return 0;
}

/* state_dict: own parameters, then buffers, then children, recursively (Program.params
 * and Program.state_dict). */
static void build_state_dict(L *L, PV *obj, const char *prefix) {
  for (int pass = 0; pass < 3; pass++)
    for (int i = 0; i < obj->mod->regs.len; i++) {
      Reg *r = &obj->mod->regs.data[i];
      if ((int)r->kind != pass) continue;
      const char *name = prefix[0] ? arena_printf(L->a, "%s.%s", prefix, r->name) : r->name;
      if (r->kind == REG_CHILD) {
        if (pv_is_module(r->val)) {
          if (!r->val->mod->path) r->val->mod->path = name;
          build_state_dict(L, r->val, name);
        }
        continue;
      }
      if (r->val->k != PV_TENSOR || !r->val->t->slot) continue; /* bias=None */
      Slot *s = r->val->t->slot;
      if (s->index < 0) { /* its first name: a new parameter (a tied one has one slot) */
        Param p = {0};
        p.name = arena_strdup(L->a, name);
        p.type = s->type;
        p.is_buffer = s->is_buffer;
        p.not_persistent = s->not_persistent;
        p.complex64 = s->cplx;
        p.low = s->low;
        if (s->low) p.type.dtype = s->low == LOW_F16 ? DT_F16 : DT_BF16;   /* stored so; read through a cast */
        p.init = s->init;
        p.init_a = s->init_a;
        p.init_b = s->init_b;
        p.init_trunc = s->init_trunc, p.init_lo = s->init_lo, p.init_hi = s->init_hi;
        p.init_data = s->data;
        p.init_zero_row1 = s->zero_row1;
        p.loc = s->loc;
        s->index = L->T->prog->params.len;
        vec_push(L->a, &L->T->prog->params, p);
      }
      /* PyTorch's state_dict has a key for every name, a tied tensor's included */
      if (!s->not_persistent) vec_push(L->a, &L->T->prog->state_dict, ((SdName){arena_strdup(L->a, name), s->index}));
    }
}

/* Save (save=1) or restore the training flags of a module tree, in walk order. */
typedef Vec(int) IntVec;

static void training_flags(L *L, PV *obj, IntVec *flags, int *pos, int save) {
  if (save) vec_push(L->a, flags, obj->mod->training);
  else obj->mod->training = flags->data[(*pos)++];
  for (int i = 0; i < obj->mod->regs.len; i++)
    if (obj->mod->regs.data[i].kind == REG_CHILD && pv_is_module(obj->mod->regs.data[i].val))
      training_flags(L, obj->mod->regs.data[i].val, flags, pos, save);
}

static void set_eval(PV *obj) {
  obj->mod->training = 0;
  for (int i = 0; i < obj->mod->regs.len; i++)
    if (obj->mod->regs.data[i].kind == REG_CHILD && pv_is_module(obj->mod->regs.data[i].val))
      set_eval(obj->mod->regs.data[i].val);
}

/* Does this function's body call backward(), step(), or a differentiation API
 * (autograd.grad, jvp, vjp, hvp, vhp, jacobian, hessian, jacrev, jacfwd,
 * unpack_dual, grad, grad_and_value)? */
int mentions_training(const Node *n) {
  static const char *const names[] = {"backward", "step", "grad", "jvp", "vjp", "hvp", "vhp", "jacobian",
                                      "hessian", "jacrev", "jacfwd", "unpack_dual", "grad_and_value"};
  if (!n) return 0;
  if (n->kind == N_CALL && n->a && (n->a->kind == N_ATTR || n->a->kind == N_NAME))
    for (size_t k = 0; k < sizeof names / sizeof names[0]; k++)
      if (!strcmp(n->a->name, names[k])) return 1;
  if (mentions_training(n->a) || mentions_training(n->b) || mentions_training(n->c)) return 1;
  const NodeVec *vs[] = {&n->list, &n->list2, &n->body, &n->orelse, &n->body2};
  for (size_t k = 0; k < sizeof vs / sizeof vs[0]; k++)
    for (int i = 0; i < vs[k]->len; i++)
      if (mentions_training(vs[k]->data[i])) return 1;
  return 0;
}

/* Why a function found by mentions_training is not an automatic entry: a
 * parameter whose shape neither --input nor example_inputs gives (it is then no
 * tensor ctc can make: args, a model, a loader, an epoch number); NULL if all are known. */
static const char *entry_unknown_param(L *L, Node *def, const LowerOptions *opt, PV *examples) {
  PV *ex = NULL;
  if (examples && examples->k == PV_DICT) ex = pv_dict_get(examples, pv_str(L, def->name));
  if (ex && ex->k == PV_TENSOR) ex = pv_tuple(L, &ex, 1);
  for (int k = 0; k < def->list.len; k++) {
    Node *p = def->list.data[k];
    if (p->op != PARAM_PLAIN) return "it takes *args or **kwargs";
    int known = 0;
    for (int i = 0; i < opt->ninputs; i++) known |= !strcmp(opt->inputs[i].name, p->name);
    if (ex && pv_is_seq(ex) && k < ex->n && ex->items[k]->k == PV_TENSOR) known = 1;
    if (known) continue;
    if (p->b) break; /* defaults */
    return arena_printf(L->a, "the shape of parameter '%s' is unknown (not an entry: name it with --entry and give "
                              "--input %s=f32[...] to compile it)", p->name, p->name);
  }
  return NULL;
}

/* With --entry naming only other functions: why forward cannot be staged (a parameter of the
 * model's forward whose shape neither --input nor example_inputs gives, as entry_inputs looks
 * them up), or NULL. A training file that gives only its train_step's example then compiles
 * that entry, and forward is listed as skipped instead of stopping the build. */
static const char *forward_unknown(L *L, PV *model, const LowerOptions *opt, Span top) {
  int other = 0;
  for (int i = 0; i < opt->nentries; i++) {
    if (!strcmp(opt->entries[i], "forward")) return NULL;
    other = 1;
  }
  PV *fwd = getattr_opt(L, top, model, "forward");
  if (!other || !fwd || fwd->k != PV_BOUND || fwd->fn->k != PV_FUNC) return NULL;
  Node *def = fwd->fn->node;
  PV *ex = env_get(L->globals, "example_inputs");
  if (ex && ex->k == PV_DICT) ex = pv_dict_get(ex, pv_str(L, "forward"));
  if (ex && ex->k == PV_TENSOR) return NULL;
  for (int k = 1; k < def->list.len; k++) {
    Node *p = def->list.data[k];
    if (p->op != PARAM_PLAIN) return NULL;   /* (entry_inputs says why) */
    int known = k == 1 && !ex && loop_forward_input(L, opt);
    for (int i = 0; i < opt->ninputs; i++) known |= !strcmp(opt->inputs[i].name, p->name);
    if (ex && pv_is_seq(ex) && k - 1 < ex->n) known = 1;   /* (a tensor or a tuple of them: entry_inputs checks) */
    if (known) continue;
    if (p->b) break; /* defaults */
    return arena_printf(L->a, "the shape of its input '%s' is unknown (give --input %s=f32[...] or a \"forward\" "
                              "example in example_inputs to compile it for ./net infer)", p->name, p->name);
  }
  return NULL;
}

static void stage_entries(L *L, Node *module, const LowerOptions *opt, Span top) {
  PV *examples = env_get(L->globals, "example_inputs");
  for (int i = 0; i < opt->nentries; i++) {
    const char *name = opt->entries[i];
    if (!strcmp(name, "forward")) continue;
    PV *f = env_get(L->globals, name);
    if (!f || f->k != PV_FUNC)
      lower_error(L, top, "--entry %s: no module-level function of that name in the file", name);
    if (!loop_stage(L, f->node, name, opt, examples, 1)) stage_function(L, name, f, opt, examples, 0, NULL);
  }
  if (opt->nentries) return;
  for (int i = 0; i < module->body.len; i++) {
    Node *s = module->body.data[i];
    /* private helpers (_name) and functions without parameters (a script's main)
     * are not entries unless named with --entry */
    if (s->kind != N_FUNCDEF || s->name[0] == '_' || s->list.len == 0) continue;
    PV *f = env_get(L->globals, s->name);
    if (!f || f->k != PV_FUNC || f->node != s) continue; /* redefined later */
    if (loop_stage(L, s, s->name, opt, examples, 0)) continue; /* train(args, model, ..., loader, ...): its loop body */
    if (!mentions_training(s)) continue;
    const char *why = entry_unknown_param(L, s, opt, examples);
    if (why) { /* train(args, model, device, loader, ...): a script's driver, not an entry */
      Program *P = L->T->prog;
      P->skipped = arena_printf(L->a, "%s%s%s (line %d): %s", P->skipped ? P->skipped : "", P->skipped ? "\n" : "",
                                s->name, s->span.line, why);
      continue;
    }
    stage_function(L, s->name, f, opt, examples, 0, NULL);
  }
}

static Span file_span(const SrcFile *f) {
  Span s = {f, 1, 1, 1, 1};
  return s;
}

static int is_identifier(const char *s) {
  if (!isalpha((unsigned char)*s) && *s != '_') return 0;
  for (; *s; s++)
    if (!isalnum((unsigned char)*s) && *s != '_') return 0;
  return 1;
}

/* --model 'GPT(GPTConfig(n_layer=4))': an expression evaluated in the file's namespace. */
static PV *model_expression(L *L, const char *text) {
  SrcFile *f = src_from_string(L->a, "--model", arena_printf(L->a, "%s\n", text));
  Node *m = fe_parse(L->a, L->d, f);
  if (!m) longjmp(*L->on_error, 1); /* the parser reported it */
  if (m->body.len != 1 || m->body.data[0]->kind != N_EXPR_STMT)
    lower_error(L, m->body.len ? m->body.data[0]->span : file_span(f), "--model takes one Python expression");
  Node *e = m->body.data[0]->a;
  Env *saved = L->env;
  L->env = L->globals;
  PV *v = eval_expr(L, e);
  L->env = saved;
  if (!pv_is_module(v))
    lower_error(L, e->span, "--model %s made a %s, not an nn.Module instance", text, pv_kind_name(v));
  return v;
}

/* Does the tree mention the name? (the entries using a module-level instance) */
static int mentions_name(const Node *n, const char *name) {
  if (!n) return 0;
  if (n->kind == N_NAME && n->name && !strcmp(n->name, name)) return 1;
  if (mentions_name(n->a, name) || mentions_name(n->b, name) || mentions_name(n->c, name)) return 1;
  const NodeVec *vs[] = {&n->list, &n->list2, &n->body, &n->orelse, &n->body2};
  for (size_t k = 0; k < sizeof vs / sizeof vs[0]; k++)
    for (int i = 0; i < vs[k]->len; i++)
      if (mentions_name(vs[k]->data[i], name)) return 1;
  return 0;
}

/* The module-level instances of the file's own nn.Module classes (net = Net()):
 * the only one, or the only one the training functions use; NULL if none. */
static PV *module_level_instance(L *L, Node *module, Span top) {
  PV *found[16];
  const char *names[16];
  int n = 0;
  for (int i = 0; i < L->globals->names.len && n < 16; i++) {
    PV *g = L->globals->vals.data[i];
    if (!pv_is_module(g) || !g->cls || g->cls->bi) continue;
    int dup = 0;
    for (int k = 0; k < n; k++) dup |= found[k] == g;
    if (dup) continue;
    found[n] = g;
    names[n++] = L->globals->names.data[i];
  }
  if (n <= 1) return n ? found[0] : NULL;
  PV *used = NULL;
  int nused = 0;
  for (int k = 0; k < n; k++) {
    int u = 0;
    for (int i = 0; i < module->body.len && !u; i++) {
      Node *s = module->body.data[i];
      u = s->kind == N_FUNCDEF && s->name[0] != '_' && mentions_training(s) && mentions_name(s, names[k]);
    }
    if (u) {
      used = found[k];
      nused++;
    }
  }
  if (nused == 1) return used;
  const char *list = "";
  for (int k = 0; k < n; k++) list = arena_printf(L->a, "%s%s%s", list, k ? ", " : "", names[k]);
  lower_error(L, top, "the file makes several nn.Module instances at module level (%s); choose one with --model NAME",
              list);
}

/* The model class called with no arguments (ctc's default, or --model NAME): if its __init__
 * needs arguments, say how to give them (it said only "__init__() missing required argument"). */
static PV *build_model(L *L, PV *cls) {
  PV *init = getattr_opt(L, cls->node->span, cls, "__init__");
  if (init && init->k == PV_FUNC && init->node) {
    const char *need = "";
    for (int k = 1; k < init->node->list.len; k++) {
      const Node *p = init->node->list.data[k];
      if (p->op == PARAM_PLAIN && !p->b) need = arena_printf(L->a, "%s%s%s", need, need[0] ? ", " : "", p->name);
    }
    if (need[0])
      lower_error(L, cls->node->span, "ctc builds the model as %s(), and %s's __init__ needs %s: give them with "
                  "--model '%s(...)' (an expression in the file's names), or make the instance at module level "
                  "(model = %s(...))", cls->s, cls->s, need, cls->s, cls->s);
  }
  return call_value(L, cls->node->span, cls, NULL, 0, NULL, NULL, 0);
}

/* A class of ctc's own Python packages (pylib/: einops' Rearrange layer imported by the file): never the
 * model a file defines. */
static int pylib_class(L *L, const PV *cls) {
  const char *f = cls->node && cls->node->span.file ? cls->node->span.file->path : NULL;
  return L->pylib && f && !strncmp(f, L->pylib, strlen(L->pylib));
}

static PV *pick_model(L *L, const LowerOptions *opt, Node *module, Span top) {
  if (opt->model && !is_identifier(opt->model)) return model_expression(L, opt->model);
  if (opt->model) {
    PV *v = env_get(L->globals, opt->model);
    if (!v) lower_error(L, top, "--model %s: no class or module-level object of that name in the file", opt->model);
    if (v->k == PV_CLASS && !v->bi) {
      /* the file's own instance, if it made exactly one: the functions it
       * compiles (train_step, ...) use that object */
      PV *inst = NULL;
      int n = 0;
      for (int i = 0; i < L->globals->vals.len; i++) {
        PV *g = L->globals->vals.data[i];
        if (pv_is_module(g) && g->cls == v && g != inst) {
          inst = g;
          n++;
        }
      }
      if (n == 1) return inst;
      return build_model(L, v);
    }
    if (pv_is_module(v)) return v;
    lower_error(L, top, "--model %s names a %s, not an nn.Module class or instance", opt->model, pv_kind_name(v));
  }
  PV *m = env_get(L->globals, "model");
  if (m && pv_is_module(m)) return m;
  m = module_level_instance(L, module, top);
  if (m) return m;
  PV *only = NULL;
  int count = 0;
  const char *names = "";
  for (int i = 0; i < L->globals->names.len; i++) {
    PV *v = L->globals->vals.data[i];
    if (v->k != PV_CLASS || v->bi || env_get(L->globals, L->globals->names.data[i]) != v || pylib_class(L, v)) continue;
    int is_mod = 0;
    for (PV *c = v; c; c = c->cls) is_mod |= c->bi == BI_C_MODULE;
    if (!is_mod) continue;
    only = v;
    names = arena_printf(L->a, "%s%s%s", names, count ? ", " : "", v->s);
    count++;
  }
  if (count == 0) return NULL; /* a file of functions only (its entries are staged alone) */
  if (count > 1)
    lower_error(L, top, "the file defines several nn.Module classes (%s); choose one with --model NAME", names);
  return build_model(L, only);
}

static const char *c_prefix(L *L, const char *cls) {
  char *p = arena_strdup(L->a, cls);
  for (char *c = p; *c; c++) *c = isalnum((unsigned char)*c) ? (char)tolower((unsigned char)*c) : '_';
  return p;
}

/* "; forward takes (x, i), and --input names y": the --input names that are no parameter of
 * def (a misspelt one is why a parameter's shape is unknown), or "" when all are. */
static const char *other_inputs_note(L *L, Node *def, int first, const LowerOptions *opt) {
  const char *given = "", *params = "";
  for (int i = 0; i < opt->ninputs; i++) {
    int hit = 0;
    for (int k = first; k < def->list.len; k++) hit |= def->list.data[k]->name && !strcmp(def->list.data[k]->name, opt->inputs[i].name);
    if (!hit) given = arena_printf(L->a, "%s%s%s", given, given[0] ? ", " : "", opt->inputs[i].name);
  }
  if (!given[0]) return "";
  for (int k = first; k < def->list.len; k++)
    params = arena_printf(L->a, "%s%s%s", params, k > first ? ", " : "", def->list.data[k]->name);
  return arena_printf(L->a, "; %s takes (%s), and --input names %s", def->name, params, given);
}

PV **entry_inputs(L *L, Node *def, int first, const char *entry, const LowerOptions *opt, PV *examples, int *n) {
  PV **args = arena_alloc(L->a, sizeof(PV *) * (size_t)(def->list.len + 1));
  int nargs = 0;
  for (int k = first; k < def->list.len; k++) {
    Node *p = def->list.data[k];
    if (p->op != PARAM_PLAIN)
      lower_error(L, p->span, "%s with *args or **kwargs cannot be compiled", entry ? "an entry" : "forward");
    const InputSpec *spec = NULL;
    for (int i = 0; i < opt->ninputs; i++)
      if (!strcmp(opt->inputs[i].name, p->name)) spec = &opt->inputs[i];
    Type t;
    int ex = k - first;
    PV *exv = examples && pv_is_seq(examples) && ex < examples->n ? examples->items[ex] : NULL;
    int tup = spec ? spec->ntuple : 0;
    if (!spec && exv && pv_is_seq(exv) && exv->n > 0) {   /* example (torch.zeros(...), torch.zeros(...)) */
      tup = exv->n;
      for (int i = 0; i < exv->n; i++)
        if (exv->items[i]->k != PV_TENSOR) tup = 0;
    }
    if (tup) {   /* a tuple of tensors (an LSTM's (h, c)): one IR input per element, NAME_0, NAME_1 ... */
      PV *tv = pv_tuple(L, NULL, 0);
      for (int i = 0; i < tup; i++)
        pv_list_append(L, tv, t_wrap(L, ir_add_input(L->T->prog, L->T->fn, arena_printf(L->a, "%s_%d", p->name, i),
                                                     spec ? spec->elems[i] : exv->items[i]->t->type)));
      args[nargs++] = tv;
      continue;
    }
    int low = 0;   /* a bfloat16 / float16 input: the caller's float32 values rounded on entry, as x.bfloat16() */
    if (spec) t = spec->type, low = spec->low;
    else if (exv && exv->k == PV_TENSOR)
      t = exv->t->type, low = exv->t->low;
    else if (p->b) break; /* remaining parameters keep their defaults */
    else if (!entry && ex == 0 && !examples && loop_forward_input(L, opt))
      t = *loop_forward_input(L, opt); /* model(data) in a training loop: data's --input */
    else if (!entry) {
      PV *g = env_get(L->globals, "example_inputs");
      lower_error(L, p->span,
                  "the shape of input '%s' is unknown: pass --input %s=f32[...] or %s in the file%s", p->name, p->name,
                  g && g->k == PV_DICT ? "add \"forward\": (torch.randn(...), ...) to the example_inputs dict"
                                       : "define example_inputs = (torch.randn(...), ...)",
                  other_inputs_note(L, def, first, opt));
    }
    else
      lower_error(L, p->span,
                  "the shape of '%s' (a parameter of entry '%s') is unknown: pass --input %s=f32[...] or add "
                  "\"%s\": (torch.randn(...), ...) to an example_inputs dict in the file",
                  p->name, entry, p->name, entry);
    if (!entry && opt->fwd_batch_from && t.ndim >= 1 && t.dims[0] == opt->fwd_batch_from) t.dims[0] = opt->fwd_batch_to;
    args[nargs] = t_wrap(L, ir_add_input(L->T->prog, L->T->fn, p->name, t));
    if (low) args[nargs] = ac_round(L, p->span, args[nargs], low);
    nargs++;
  }
  *n = nargs;
  return args;
}

static void stage_forward_in(L *L, PV *model, const LowerOptions *opt, Span top);
static void stage_forward(L *L, PV *model, const LowerOptions *opt, Span top) {
  L->T->forward_rng = 1;
  stage_forward_in(L, model, opt, top);
  attr_cache_restore(L);
  L->T->forward_rng = 0;
  L->T->param_cur = NULL;
}

static void stage_forward_in(L *L, PV *model, const LowerOptions *opt, Span top) {
  PV *fwd = getattr_opt(L, top, model, "forward");
  PV *examples = env_get(L->globals, "example_inputs");
  if (examples && examples->k == PV_DICT) examples = pv_dict_get(examples, pv_str(L, "forward"));
  if (examples && examples->k == PV_TENSOR) examples = pv_tuple(L, &examples, 1);
  if (!fwd || fwd->k != PV_BOUND || fwd->fn->k != PV_FUNC) {
    if (model->cls->node && !layer_base_class(model->cls))
      lower_error(L, top, "model class '%s' has no forward method", model->cls->s);
    /* a bare library module (model = nn.Sequential(...)): one input, from the
     * one --input or example_inputs = (torch.randn(...),) */
    Type t;
    const char *name = "input";
    int named = -1;   /* several --input (other entries' too): the one named as PyTorch's forward(input) */
    for (int i = 0; i < opt->ninputs; i++)
      if (!strcmp(opt->inputs[i].name, "input")) named = i;
    if (opt->ninputs == 1 || named >= 0) {
      t = opt->inputs[named >= 0 ? named : 0].type;
      name = opt->inputs[named >= 0 ? named : 0].name;
    } else if (!opt->ninputs && examples && pv_is_seq(examples) && examples->n == 1 &&
               examples->items[0]->k == PV_TENSOR)
      t = examples->items[0]->t->type;
    else
      lower_error(L, top, "a bare nn.%s model takes one input: give its shape with --input input=f32[...] or "
                          "example_inputs = (torch.randn(...),)%s", model->cls->s,
                  opt->ninputs > 1 ? " (with several --input options, the model's is the one named 'input')" : "");
    if (opt->fwd_batch_from && t.ndim >= 1 && t.dims[0] == opt->fwd_batch_from) t.dims[0] = opt->fwd_batch_to;
    Func *f = ir_func_new(L->T->prog, "forward", top);
    L->T->fn = f;
    f->grad_mode = L->T->grad_mode;
    PV *x = t_wrap(L, ir_add_input(L->T->prog, f, name, t));
    PV *r = call_value(L, top, model, &x, 1, NULL, NULL, 0);
    if (r->k != PV_TENSOR) lower_error(L, top, "the model returned a %s, not a tensor", pv_kind_name(r));
    ir_add_output(L->T->prog, f, t_val(L, top, r), "out");
    L->T->fn = NULL;
    return;
  }
  Node *def = fwd->fn->node;
  Func *f = ir_func_new(L->T->prog, "forward", def->span);
  L->T->fn = f;
  f->grad_mode = L->T->grad_mode; /* e.g. torch.set_grad_enabled(False) at module level */
  int nargs;
  PV **args = entry_inputs(L, def, 1, NULL, opt, examples, &nargs);
  if (L->nstack < 64) {
    L->stack_span[L->nstack] = def->span;
    L->stack_name[L->nstack] = "forward";
  }
  PV *r = call_value(L, def->span, fwd, args, nargs, NULL, NULL, 0);
  /* the outputs: a tensor, or a tuple whose tensors (nested tuples flattened: an
   * LSTM's (output, (h, c))) are the outputs in order; None elements (nanoGPT's
   * loss without targets) are no outputs */
  Vec(PV *) outs = {0};
  int depth = 0;
  if (!pv_is_seq(r)) vec_push(L->a, &outs, r);
  else {
    struct { PV *t; int i; } st[8];
    st[0].t = r, st[0].i = 0;
    for (;;) {
      if (st[depth].i == st[depth].t->n) {
        if (depth-- == 0) break;
        continue;
      }
      PV *e = st[depth].t->items[st[depth].i++];
      if (pv_is_seq(e) && depth + 1 < 8) {
        depth++;
        st[depth].t = e, st[depth].i = 0;
      } else if (e->k != PV_NONE || r->n == 1)
        vec_push(L->a, &outs, e);
    }
  }
  int nout = outs.len;
  if (!nout) lower_error(L, def->span, "forward must return a tensor or a tuple of tensors, but returned only None");
  for (int i = 0; i < nout; i++) {
    if (outs.data[i]->k != PV_TENSOR)
      lower_error(L, def->span, "forward must return a tensor or a tuple of tensors, but returned %s %s",
                  pv_is_seq(r) ? "an element of type" : "a", pv_kind_name(outs.data[i]));
    ValId v = t_val(L, def->span, outs.data[i]);
    ir_add_output(L->T->prog, f, v, nout == 1 ? "out" : arena_printf(L->a, "out%d", i));
  }
  L->T->fn = NULL;
}

/* The IR builder's size check (ir_type_problem) failed: a user error at the op. */
static CTC_NORETURN void type_error(void *ctx, Span at, const char *msg) { lower_error((L *)ctx, at, "%s", msg); }

/* --dtype f64: every f32 parameter, buffer, optimizer state, input, value and
 * cast of the staged program becomes f64 (explicit .float() and
 * dtype=torch.float32 too: gradcheck's finite differences need the whole
 * function in double). Literals keep their double values (CONST.fattr,
 * PINIT_DATA), and compile-time tensor arithmetic (consteval.c, t_cast) does
 * not round to f32 in these programs (HostState.f64). */
static void to_f64(Program *p) {
  for (int i = 0; i < p->params.len; i++)
    if (p->params.data[i].type.dtype == DT_F32) p->params.data[i].type.dtype = DT_F64;
  for (int k = 0; k < p->funcs.len; k++) {
    Func *f = p->funcs.data[k];
    for (int i = 0; i < f->values.len; i++)
      if (f->values.data[i].type.dtype == DT_F32) f->values.data[i].type.dtype = DT_F64;
  }
}

Program *lower_program(Arena *a, Diag *d, const SrcFile *src, Node *module, const LowerOptions *opt) {
  jmp_buf jb;
  L ctx = {0}, *L = &ctx;
  struct HostState hs = {0};
  L->T = &hs;
  L->host = &torch_host;
  L->a = a;
  L->d = d;
  L->src = src;
  L->script_args = opt->script_args;
  L->pylib = opt->pylib;
  L->T->prog = ir_program_new(a, src);
  L->T->f64 = opt->float_dtype == DT_F64;
  L->T->cuda = opt->cuda_target;
  L->T->prog->hook = opt->hook;
  L->T->prog->no_remat = opt->no_remat;
  L->T->prog->fuse_attention = opt->float_dtype != DT_F64 ? opt->fuse_attention : 0;
  L->T->prog->low_store = opt->low_store;
  L->T->prog->row_sums = opt->row_sums;
  L->T->prog->distributed = opt->distributed;
  L->T->prog->bucket_mb = opt->bucket_mb;
  L->T->prog->hook_ctx = opt->hook_ctx;
  L->T->prog->type_error = type_error;
  L->T->prog->type_error_ctx = L;   /* cleared on return: L lives on this stack frame */
  L->on_error = &jb;
  if (setjmp(jb)) {
    L->T->prog->type_error = NULL;
    return NULL;
  }
  L->builtins = env_new(L, NULL);
  torch_tables_check();
  py_install_builtins(L, L->builtins);
  L->globals = env_new(L, NULL);
  L->env = L->globals;
  /* a script that trains at module level: its code before the loop runs, the loop is compiled (script.c) */
  int tloop = py_module_training_loop(&module->body);
  NodeVec head = module->body;
  if (tloop >= 0) head.len = tloop;
  exec_block(L, L->globals, &head);
  Span top = file_span(src);
  loops_prepare(L, module, opt);
  if (tloop >= 0) script_prepare(L, module, tloop, opt);
  PV *model = pick_model(L, opt, module, top);
  Decode *dec = NULL;
  L->T->model = model;
  if (model) {
    L->T->prog->class_name = model->cls->s;
    L->T->prog->model_name = opt->prefix ? opt->prefix : c_prefix(L, model->cls->s);
    module_tree_check(L, top, model); /* the recursive walks below stay bounded */
    build_state_dict(L, model, "");
    /* forward is the inference entry: eval mode; training functions see the mode
     * the module-level code left (PyTorch's default: training) */
    IntVec flags = {0};
    int pos = 0;
    training_flags(L, model, &flags, &pos, 1);
    set_eval(model);
    const char *why = forward_unknown(L, model, opt, top);
    if (why) {
      Program *P = L->T->prog;
      PV *fwd = getattr_opt(L, top, model, "forward");
      P->skipped = arena_printf(L->a, "%s%sforward (line %d): %s", P->skipped ? P->skipped : "", P->skipped ? "\n" : "",
                                fwd->fn->node->span.line, why);
    } else {
      dec_probe_begin(L);
      stage_forward(L, model, opt, top);
      dec = dec_probe_end(L);
    }
    training_flags(L, model, &flags, &pos, 0);
  } else {
    /* no nn.Module: the file's functions are the entries; the C prefix is the file's name */
    const char *base = strrchr(src->path, '/');
    base = base ? base + 1 : src->path;
    const char *dot = strrchr(base, '.');
    L->T->prog->class_name = "(none)";
    L->T->prog->model_name = opt->prefix ? opt->prefix : c_prefix(L, dot ? arena_strndup(a, base, (size_t)(dot - base)) : base);
  }
  stage_entries(L, module, opt, top);
  script_stage(L, opt);
  loops_finish(L);
  if (L->T->prog->funcs.len == 0)
    lower_error(L, top, "nothing to compile: no nn.Module subclass or module-level 'model', and no function that "
                        "calls backward(), step() or a differentiation API (name one with --entry NAME)%s%s",
                L->T->prog->skipped ? "; skipped: " : "", L->T->prog->skipped ? L->T->prog->skipped : "");
  stage_scheduler_entries(L);
  if (dec) {   /* decode.c: the KV-cache entry, staged last (a failure drops what it added) */
    IntVec flags = {0};
    int pos = 0;
    training_flags(L, model, &flags, &pos, 1);
    set_eval(model);
    const char *why = dec_stage(L, dec, model, top);
    pos = 0;
    training_flags(L, model, &flags, &pos, 0);
    if (why) L->T->prog->decode_note = why;
  }
  /* every --input must name a parameter of some entry */
  for (int i = 0; i < opt->ninputs; i++) {
    int found = 0;
    for (int k = 0; k < L->T->prog->funcs.len && !found; k++) {
      Func *f = L->T->prog->funcs.data[k];
      for (int j = 0; j < f->inputs.len; j++) {
        const char *nm = ir_val(f, f->inputs.data[j])->name;
        size_t ln = strlen(opt->inputs[i].name);
        found |= !strcmp(nm, opt->inputs[i].name) ||   /* a tuple's elements are NAME_0, NAME_1 ... */
                 (opt->inputs[i].ntuple && !strncmp(nm, opt->inputs[i].name, ln) && nm[ln] == '_');
      }
    }
    if (!found) {   /* at the first entry's def, naming every entry's parameters */
      const char *takes = "";
      Span at = top;
      for (int k = 0; k < L->T->prog->funcs.len; k++) {
        Func *f = L->T->prog->funcs.data[k];
        if (f->name[0] == '_') continue;   /* hidden entries (__grad_E) */
        if (!takes[0] && f->loc.file) at = f->loc;
        const char *ps = "";
        for (int j = 0; j < f->inputs.len; j++)
          ps = arena_printf(L->a, "%s%s%s", ps, j ? ", " : "", ir_val(f, f->inputs.data[j])->name);
        takes = arena_printf(L->a, "%s%s%s takes (%s)", takes, takes[0] ? "; " : "", f->name, ps);
      }
      lower_error(L, at, "--input %s: no compiled entry has a parameter named '%s' (%s)", opt->inputs[i].name,
                  opt->inputs[i].name, takes);
    }
  }
  for (int k = 0; L->T->prog->fuse_attention && k < L->T->prog->funcs.len; k++)   /* ir/attn.c */
    ir_fuse_attention(L->T->prog, L->T->prog->funcs.data[k], 0);
  if (opt->float_dtype == DT_F64) {
    to_f64(L->T->prog);
    int batched = 0;
    for (int i = 0; i < opt->ninputs; i++) batched |= opt->inputs[i].sym != NULL;
    if (!batched) ad_gradcheck_entries(L->T->prog); /* ./net gradcheck (not for run-time batches) */
  }
  for (int i = 0; L->modules && i < L->modules->n; i++)   /* the local modules (exec.c), for -MD */
    vec_push(a, &L->T->prog->imports, L->modules->keys[i]->s);
  L->T->prog->type_error = NULL;
  L->T->prog->type_error_ctx = NULL;
  return L->T->prog;
}
