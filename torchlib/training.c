/* training.c - training functions: loss.backward(), torch.autograd.grad,
 * optimizer.zero_grad()/step() and the torch.optim optimizers, lowered into
 * the function being staged. backward() records the loss; step() runs reverse
 * AD (autograd_ad/) for the recorded losses with respect to the optimizer's
 * parameters, then emits the update rule, whose results become the entry's
 * parameter write-backs. Optimizer state (momentum buffers, moments, step
 * counts) is extra arena tensors saved with the weights. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "../autograd_ad/autograd.h"
#include "torch_int.h"

/* ---- optimizers: construction at compile time ---------------------------- */

static PV *key(L *L, const char *k) { return pv_str(L, k); }

#define REQUIRED "<required parameter>" /* PyTorch's `required` sentinel (SGD's lr) */

/* The value of option `name` in a parameter group (a dict), as a number. */
double opt_hp(L *L, Span at, PV *group, const char *name, double dflt) {
  PV *v = pv_dict_get(group, key(L, name));
  return v && v->k != PV_NONE ? arg_num(L, at, v, name) : dflt;
}

int opt_hpb(L *L, Span at, PV *group, const char *name) {
  PV *v = pv_dict_get(group, key(L, name));
  return v && v->k != PV_NONE ? arg_bool(L, at, v, name) : 0;
}

static int opt_is_optimizer(PV *o) { return bi_kind_of(o) == BK_OPTIM; }

/* optimizer.add_param_group(group), also used by the constructor: PyTorch's
 * checks (params a tensor or an iterable of parameters, none already in a
 * group), then the options the group does not set from the defaults. The dict
 * itself is kept (and completed) as in PyTorch, so `for g in
 * optimizer.param_groups: g['lr'] = ...` changes it. */
static void add_group(L *L, Span at, PV *opt, PV *group) {
  if (group->k != PV_DICT) lower_error(L, at, "param_group must be a dict, not %s", pv_kind_name(group));
  PV *ps = pv_dict_get(group, key(L, "params"));
  if (!ps) lower_error(L, at, "a parameter group needs a 'params' entry");
  PV **items;
  int n = ps->k == PV_TENSOR ? (items = &ps, 1) : ps->k == PV_DICT ? 0 : iter_items(L, at, ps, &items);
  if (ps->k == PV_DICT) lower_error(L, at, "optimizer parameters need to be tensors, not a dict");
  PV *list = pv_list(L, NULL, 0), *seen = pv_dict(L);
  for (int i = 0; i < n; i++) {
    if (items[i]->k != PV_TENSOR || !items[i]->t->slot || items[i]->t->slot->is_buffer)
      lower_error(L, at, "optimizer parameters must be model parameters (model.parameters()), not %s",
                  items[i]->k == PV_TENSOR ? "a tensor computed in the program" : pv_kind_name(items[i]));
    if (pv_dict_get(seen, items[i]))
      lower_error(L, at, "a parameter group contains the same parameter twice (PyTorch warns that this will be an "
                         "error; ctc refuses it)");
    pv_dict_set(L, at, seen, items[i], items[i]);
    pv_list_append(L, list, items[i]);
  }
  PV *groups = env_get(opt->attrs, "param_groups");
  for (int g = 0; g < groups->n; g++) {
    PV *gp = pv_dict_get(groups->items[g], key(L, "params"));
    for (int i = 0; i < gp->n; i++)
      for (int j = 0; j < list->n; j++)
        if (gp->items[i]->t->slot == list->items[j]->t->slot)
          lower_error(L, at, "some parameters appear in more than one parameter group");
  }
  pv_dict_set(L, at, group, key(L, "params"), list);
  PV *defaults = env_get(opt->attrs, "defaults");
  for (int i = 0; i < defaults->n; i++) {
    if (pv_dict_get(group, defaults->keys[i])) continue;
    if (defaults->items[i]->k == PV_STR && !strcmp(defaults->items[i]->s, REQUIRED))
      lower_error(L, at, "parameter group didn't specify a value of required optimization parameter %s",
                  defaults->keys[i]->s);
    pv_dict_set(L, at, group, defaults->keys[i], defaults->items[i]);
  }
  for (int i = 0; i < defaults->n; i++) {
    const char *k = defaults->keys[i]->s;
    PV *v = pv_dict_get(group, defaults->keys[i]);
    if ((!strcmp(k, "differentiable") || !strcmp(k, "capturable") || !strcmp(k, "fused")) && v->k != PV_NONE &&
        truthy(L, at, v))
      lower_error(L, at, "optimizer option %s=True is not supported", k);
  }
  PV *lr = pv_dict_get(group, key(L, "lr"));
  if (lr->k != PV_TENSOR && arg_num(L, at, lr, "lr") < 0) lower_error(L, at, "Invalid learning rate: %g", pv_num(lr));
  pv_list_append(L, groups, group);
  /* the learning rate the group starts with: the initial value of its lr state
   * tensor once compiled code sets it (group_lr_state) */
  pv_list_append(L, env_get(opt->attrs, "lr_init"), lr->k == PV_TENSOR ? pv_float(L, 0) : lr);
  PV *all = env_get(opt->attrs, "params");
  for (int i = 0; i < list->n; i++) pv_list_append(L, all, list->items[i]);
}

/* torch.optim.<Name>(params, ...): an OPTIM row of optim.def. */
PV *optim_new(L *L, PV *cls, Args *A) {
  const char *defaults_spec = bi_rows[cls->bi].spec;
  /* names and defaults from the spec */
  const char *names[16], *dflts[16];
  int nn = 0;
  char buf[300], spec[400];
  snprintf(buf, sizeof buf, "%s", defaults_spec);
  int len = snprintf(spec, sizeof spec, "params");
  for (char *p = strtok(buf, ","); p && nn < 16; p = strtok(NULL, ",")) {
    char *eq = strchr(p, '=');
    *eq = 0;
    names[nn] = arena_strdup(L->a, p);
    dflts[nn++] = arena_strdup(L->a, eq + 1);
    len += snprintf(spec + len, sizeof spec - (size_t)len, ",%s=", p);
  }
  PV *a[17];
  for (int k = 0; k < A->nkw; k++)
    if (cls->bi == BI_O_NADAM && !strcmp(A->kwnames[k], "decoupled_weight_decay"))
      lower_error(L, A->at, "NAdam(decoupled_weight_decay=...) is not an option of PyTorch 1.13's NAdam (it came in "
                            "2.0), which ctc follows: use weight_decay (the L2 form) or AdamW");
  bind_args(L, A, spec, a);
  Span at = A->at;
  PV *o = pv_new(L, PV_OBJ);
  o->cls = cls;
  o->attrs = env_new(L, NULL);
  PV *defaults = pv_dict(L);
  for (int i = 0; i < nn; i++) {
    PV *v = a[1 + i] ? a[1 + i] : !strcmp(dflts[i], "R") ? pv_str(L, REQUIRED) : spec_value(L, dflts[i]);
    if (!strcmp(names[i], "betas") && (!pv_is_seq(v) || v->n != 2)) lower_error(L, at, "betas must be a pair");
    pv_dict_set(L, at, defaults, key(L, names[i]), v);
  }
  env_set(L, o->attrs, "defaults", defaults);
  env_set(L, o->attrs, "param_groups", pv_list(L, NULL, 0));
  env_set(L, o->attrs, "params", pv_list(L, NULL, 0));
  env_set(L, o->attrs, "lr_init", pv_list(L, NULL, 0));
  PV **items;
  int n = a[0]->k == PV_TENSOR ? (items = &a[0], 1) : iter_items(L, at, a[0], &items);
  if (n == 0) lower_error(L, at, "optimizer got an empty parameter list");
  if (items[0]->k == PV_DICT) {
    for (int i = 0; i < n; i++) {
      if (items[i]->k != PV_DICT) lower_error(L, at, "parameter groups must all be dicts");
      add_group(L, at, o, items[i]);
    }
  } else {
    PV *g = pv_dict(L);
    pv_dict_set(L, at, g, key(L, "params"), a[0]);
    add_group(L, at, o, g);
  }
  PV *g0 = env_get(o->attrs, "param_groups")->items[0];
  env_set(L, o->attrs, "lr", pv_dict_get(g0, key(L, "lr")));
  return o;
}

/* ---- staging helpers ---------------------------------------------------- */

/* The global name an optimizer is bound to ("optimizer"), for state names. */
const char *global_name(L *L, PV *v, const char *dflt) {
  for (int i = 0; i < L->globals->names.len; i++)
    if (L->globals->vals.data[i] == v) return L->globals->names.data[i];
  return dflt;
}

static const char *opt_name(L *L, PV *opt) { return global_name(L, opt, "optimizer"); }

void param_table_grew(L *L) {
  if (!L->T->param_cur) return;
  int n = L->T->prog->params.len;
  ValId *cur = arena_alloc(L->a, sizeof(ValId) * (size_t)n);
  for (int i = 0; i < n - 1; i++) cur[i] = L->T->param_cur[i];
  cur[n - 1] = -1;
  L->T->param_cur = cur;
}

/* An optimizer-state tensor: found by name or appended to the parameter table. */
PV *state_tensor(L *L, Span at, const char *name, const Type *t, double init) {
  if (!L->T->fn || !L->T->param_cur) lower_error(L, at, "this needs state and is only supported inside a compiled training function");
  for (int i = 0; i < L->T->prog->params.len; i++)
    if (!strcmp(L->T->prog->params.data[i].name, name)) {
      Slot *s = slot_new(L, at, *t, PINIT_CONST, init, 0);
      s->index = i;
      return param_tensor(L, s);
    }
  Param p = {0};
  p.name = arena_strdup(L->a, name);
  p.type = *t;
  p.is_state = 1;
  p.init = init == 0 ? PINIT_ZERO : PINIT_CONST;
  p.init_a = init;
  p.loc = at;
  vec_push(L->a, &L->T->prog->params, p);
  Slot *s = slot_new(L, at, *t, p.init, init, 0);
  s->index = L->T->prog->params.len - 1;
  param_table_grew(L);
  return param_tensor(L, s);
}

/* Record that parameter/state `t` becomes `v` when the entry finishes. A tensor of a
 * .bfloat16() / .half() model (Param.low), or an optimizer's state of one, stores v rounded
 * once: the update is computed in float32 (PyTorch rounds after each in-place op of it). */
void state_update(L *L, Span at, PV *t, PV *v) {
  staged_effect_check(L, at, "updating state (an optimizer, scheduler or random-number state)");
  Param *pr = &L->T->prog->params.data[t->t->slot->index];
  int idx = t->t->slot->index, low = pr->low;
  if (low && v->k == PV_TENSOR) v = ac_round(L, at, v, low);   /* (a value already so marked is so rounded) */
  if (L->T->step_skip) v = t_where(L, at, L->T->step_skip, t, v);   /* GradScaler.step: skipped on inf */
  ValId val = t_val(L, at, v), stored = val;
  if (ir_dtype_is_low(pr->type.dtype))   /* bf16 / f16 storage: the rounded value, narrowed (exact) */
    stored = ir_emit(L->T->prog, L->T->fn, IR_CAST, &val, 1, pr->type, NULL, 0, 0, at, L->T->fn->values.data[val].name);
  ir_add_update(L->T->prog, L->T->fn, idx, stored);
  L->T->param_cur[idx] = val;
}

/* x * c, skipping the multiplication when c is 1 */
static PV *mul_c(L *L, Span at, PV *x, double c) { return c == 1 ? x : t_binary(L, at, OP_MUL, x, pv_float(L, c)); }

#define ADD(a, b) t_binary(L, at, OP_ADD, (a), (b))
#define SUB(a, b) t_binary(L, at, OP_SUB, (a), (b))
#define MUL(a, b) t_binary(L, at, OP_MUL, (a), (b))
#define DIV(a, b) t_binary(L, at, OP_DIV, (a), (b))
#define F(x) pv_float(L, (x))
#define SQRT(a) t_unary(L, at, IR_SQRT, (a))

/* A parameter group's learning rate: a number, or a tensor the compiled code
 * set (`g['lr'] = get_lr(it)`), or with an LR scheduler the state tensor
 * "<optimizer>.lr" that the scheduler's step() rewrites. */
static PV *lr_tensor(L *L, Span at, PV *v);

static PV *group_lr(L *L, Span at, PV *opt, PV *group, const char *oname) {
  PV *v = pv_dict_get(group, key(L, "lr"));
  if (env_get(opt->attrs, "scheduler")) {
    if (v->k == PV_TENSOR)
      lower_error(L, at, "setting a parameter group's lr by hand and an LR scheduler on the same optimizer is not "
                         "supported");
    PV *groups = env_get(opt->attrs, "param_groups");
    int gi = 0;
    while (gi < groups->n - 1 && groups->items[gi] != group) gi++;
    return sched_lr_state(L, at, opt, gi);
  }
  if (v->k != PV_TENSOR) return F(arg_num(L, at, v, "lr"));
  return lr_tensor(L, at, v);
}

/* a learning rate given as a tensor, as an f32 0-d tensor */
static PV *lr_tensor(L *L, Span at, PV *v) {
  Type t = t_type(v);
  int64_t numel = 1;
  for (int d = 0; d < t.ndim; d++) numel *= t.dims[d];
  if (numel != 1) lower_error(L, at, "a parameter group's lr must be a number or a one-element tensor, not shape %s",
                              shape_str(L, &t));
  if (t.ndim) v = t_reshape(L, at, v, NULL, 0);
  return ir_dtype_is_float(t.dtype) ? v : t_cast(L, at, v, DT_F32);
}

/* The momentum (SGD) or beta1 (Adam): a constant, or with OneCycleLR's
 * cycle_momentum the state tensor "<optimizer>.momentum" the scheduler rewrites. */
PV *opt_mom(L *L, Span at, PV *opt, const char *oname, double dflt) {
  PV *m0 = env_get(opt->attrs, "mom0");
  if (!m0) return F(dflt);
  Type st = {0};
  st.dtype = DT_F32;
  return state_tensor(L, at, arena_printf(L->a, "%s.momentum", oname), &st, pv_num(m0));
}

/* One optimizer update for parameter p with gradient g (PV tensors): PyTorch
 * 1.13 negates the gradient first under maximize, then the row's rule. */
static void step_param(L *L, Span at, PV *opt, PV *group, PV *LR, const char *oname, const char *pname, PV *p, PV *g,
                       PV *tcount) {
  OptStep s = {opt, group, LR, p, g, tcount, oname, arena_printf(L->a, "%s.%s", oname, pname), p->t->type};
  if (opt_hpb(L, at, group, "maximize")) s.g = t_unary(L, at, IR_NEG, g);
  bi_rows[opt->cls->bi].opt_rule(L, at, &s);
}

PV *opt_l2(L *L, Span at, OptStep *s) {
  double wd = opt_hp(L, at, s->group, "weight_decay", 0);
  return wd != 0 ? ADD(s->g, MUL(s->p, F(wd))) : s->g;
}

/* An optimizer's state tensor of the parameter's shape ("<optimizer>.<param>.<name>"), starting
 * at init; bfloat16 / float16 values where the parameter is (PyTorch's zeros_like(p)). */
PV *opt_state(L *L, Span at, OptStep *s, const char *name, double init) {
  PV *st = state_tensor(L, at, arena_printf(L->a, "%s.%s", s->pre, name), &s->t, init);
  int low = s->p->t->slot ? L->T->prog->params.data[s->p->t->slot->index].low : s->p->t->low;
  if (low) {   /* stored as bf16 / f16 too (read through a cast: none happened yet) */
    Param *pr = &L->T->prog->params.data[st->t->slot->index];
    pr->low = st->t->slot->low = st->t->low = low;
    pr->type.dtype = low == LOW_F16 ? DT_F16 : DT_BF16;
  }
  return st;
}

#define ST(name) opt_state(L, at, s, name, 0)

/* SGD of a .bfloat16() / .half() parameter: PyTorch's single-tensor SGD on such tensors, each
 * in-place op (d_p.add(p, alpha=wd), buf.mul_(m).add_(d_p, alpha=1 - dampening),
 * p.add_(d_p, alpha=-lr)) computed in float32 with its scalar first rounded to the tensor's
 * dtype, and its result rounded once (probed: docs/mixed-precision.md). */
static PV *low_round(L *L, Span at, PV *x, int low) {
  if (x->k == PV_TENSOR) return ac_round(L, at, x, low);
  double v = pv_num(x);
  ac_round_data(&v, 1, low);
  return pv_float(L, v);
}

static void sgd_low(L *L, Span at, OptStep *s, int low, double mom, double damp, int nesterov, PV *MOM) {
  PV *g = s->g, *p = s->p;
  double wd = opt_hp(L, at, s->group, "weight_decay", 0);
#define R(x) low_round(L, at, (x), low)
  if (wd != 0) g = R(ADD(g, MUL(p, R(F(wd)))));
  PV *d = g;
  if (mom != 0 || MOM->k == PV_TENSOR) {
    PV *buf = ST("momentum_buffer");
    /* buf.mul_(momentum): PyTorch 1.13 rounds the number to bf16; 2.x (the f16 oracle) keeps it in float */
    PV *nb = R(ADD(R(MUL(buf, low == LOW_F16 ? MOM : R(MOM))), damp != 0 ? MUL(g, R(F(1 - damp))) : g));
    if (damp != 0) nb = t_where(L, at, t_compare(L, at, OP_EQ, s->tcount, F(0)), g, nb);   /* the first: buf = g */
    state_update(L, at, buf, nb);
    d = nesterov ? R(ADD(g, MUL(nb, R(MOM)))) : nb;
  }
  state_update(L, at, p, SUB(p, MUL(d, R(s->LR))));   /* rounded by state_update */
#undef R
}

void opt_sgd(L *L, Span at, OptStep *s) {
  double mom = opt_hp(L, at, s->group, "momentum", 0), damp = opt_hp(L, at, s->group, "dampening", 0);
  int nesterov = opt_hpb(L, at, s->group, "nesterov");
  if (nesterov && (mom <= 0 || damp != 0)) lower_error(L, at, "Nesterov momentum requires a momentum and zero dampening");
  PV *MOM = opt_mom(L, at, s->opt, s->oname, mom);
  int low = s->p->t->slot ? L->T->prog->params.data[s->p->t->slot->index].low : 0;
  if (low) {
    sgd_low(L, at, s, low, mom, damp, nesterov, MOM);
    return;
  }
  PV *g = opt_l2(L, at, s), *p = s->p;
  PV *d = g;
  if (mom != 0 || MOM->k == PV_TENSOR) {
    PV *buf = ST("momentum_buffer");
    PV *nb = ADD(MUL(buf, MOM), mul_c(L, at, g, 1 - damp));
    if (damp != 0) {
      /* PyTorch's first step sets buf = g (no dampening) */
      PV *first = t_compare(L, at, OP_EQ, s->tcount, F(0));
      nb = t_where(L, at, first, g, nb);
    }
    state_update(L, at, buf, nb);
    d = nesterov ? ADD(g, MUL(nb, MOM)) : nb;
  }
  state_update(L, at, p, SUB(p, MUL(d, s->LR)));
}

/* x (a number or a tensor) as dtype dt; numbers stay numbers */
PV *opt_as_dt(L *L, Span at, PV *x, DType dt) {
  if (x->k != PV_TENSOR) return x;
  return x->t->type.dtype == dt ? x : t_cast(L, at, x, dt);
}

/* Adam, and AdamW (decoupled: the weight decays first, p * (1 - lr * wd)), in
 * the order of PyTorch 1.13's _single_tensor_adam:
 *   exp_avg.mul_(beta1).add_(grad, alpha=1 - beta1)
 *   exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)   (v b2 + ((1 - b2) g) g)
 *   denom = (exp_avg_sq.sqrt() / sqrt(bias_correction2)).add_(eps)
 *   param.addcdiv_(exp_avg, denom, value=-step_size)               (p + ((-step_size) m) / denom)
 * The bias corrections, step_size = lr / bias_correction1 and
 * sqrt(bias_correction2) are Python doubles there, applied as scalars of the
 * parameter's dtype: computed here in f64 and cast. In f32, 1 - 0.999f ** 1
 * is 1.3e-5 off 0.001, which would scale every update by 1 + 6e-6. */
/* Adam(W) of a .bfloat16() / .half() parameter, op by op as PyTorch runs it on such tensors
 * (each in-place op computed in float32 and rounded once; see sgd_low): bfloat16 as 1.13's
 * _single_tensor_adam, whose scalars multiplying or dividing a bf16 tensor are rounded to bf16
 * too (beta1 0.9 is 0.8984375); float16 as 2.x's (exp_avg.lerp_(grad, 1 - beta1); its scalars of
 * *, / kept in float: its opmath). Both keep addcmul's and addcdiv's value in float and round the
 * number that + adds (eps). */
static void adam_low(L *L, Span at, OptStep *s, int decoupled, int low, double b2, double eps, double wd, PV *B1,
                     PV *bc1, PV *bc2, int amsgrad) {
  PV *LR = s->LR, *g = s->g, *p = s->p, *slot = s->p;
#define R(x) low_round(L, at, (x), low)
#define SM(c) (low == LOW_F16 ? (c) : R(c))   /* a number multiplying or dividing a low tensor */
  if (decoupled) p = R(MUL(p, SM(SUB(F(1), MUL(LR, F(wd))))));   /* param.mul_(1 - lr * weight_decay) */
  else if (wd != 0) g = R(ADD(g, MUL(p, R(F(wd)))));              /* grad.add(param, alpha=weight_decay) */
  PV *m = ST("exp_avg"), *v = ST("exp_avg_sq");
  PV *nm = low == LOW_F16 ? R(ADD(m, MUL(SUB(g, m), SUB(F(1), B1))))            /* exp_avg.lerp_(grad, 1 - beta1) */
                          : R(ADD(R(MUL(m, R(B1))), MUL(g, R(SUB(F(1), B1)))));  /* .mul_(beta1).add_(grad, alpha=1 - beta1) */
  PV *nv = R(ADD(R(MUL(v, SM(F(b2)))), MUL(MUL(g, F(1 - b2)), g)));  /* .mul_(beta2).addcmul_(grad, grad, value=1 - beta2) */
  state_update(L, at, m, nm);
  state_update(L, at, v, nv);
  PV *den_v = nv;
  if (amsgrad) {
    PV *vmax = ST("max_exp_avg_sq");
    den_v = t_minmax(L, at, IR_MAX, vmax, nv);
    state_update(L, at, vmax, den_v);
  }
  /* denom = (exp_avg_sq.sqrt() / bias_correction2_sqrt).add_(eps) */
  PV *denom = R(ADD(R(DIV(R(SQRT(den_v)), SM(opt_as_dt(L, at, SQRT(bc2), DT_F32)))), R(F(eps))));
  PV *stepsize = opt_as_dt(L, at, DIV(opt_as_dt(L, at, LR, DT_F64), bc1), DT_F32);
  state_update(L, at, slot, SUB(p, DIV(MUL(stepsize, nm), denom)));   /* param.addcdiv_(exp_avg, denom, value=-step_size) */
#undef SM
#undef R
}

static void adam(L *L, Span at, OptStep *s, int decoupled) {
  PV *LR = s->LR, *g = s->g, *p = s->p, *group = s->group;
  PV *betas = pv_dict_get(group, key(L, "betas"));
  double b1 = 0.9, b2 = 0.999;
  if (betas) {
    if (!pv_is_seq(betas) || betas->n != 2) lower_error(L, at, "betas must be a pair");
    b1 = arg_num(L, at, betas->items[0], "beta1");
    b2 = arg_num(L, at, betas->items[1], "beta2");
  }
  double eps = opt_hp(L, at, group, "eps", 1e-8), wd = opt_hp(L, at, group, "weight_decay", 0);
  int low = s->p->t->slot ? L->T->prog->params.data[s->p->t->slot->index].low : 0;
  if (low) {
    PV *B1 = opt_mom(L, at, s->opt, s->oname, b1);
    PV *step = t_cast(L, at, ADD(s->tcount, F(1)), DT_F64);
    PV *bc1 = SUB(F(1), t_binary(L, at, OP_POW, opt_as_dt(L, at, B1, DT_F64), step));
    PV *bc2 = SUB(F(1), t_binary(L, at, OP_POW, F(b2), step));
    adam_low(L, at, s, decoupled, low, b2, eps, wd, B1, bc1, bc2, opt_hpb(L, at, group, "amsgrad"));
    return;
  }
  if (!decoupled) g = opt_l2(L, at, s);
  DType dt = s->t.dtype;
  PV *slot = p;
  if (decoupled) p = MUL(p, SUB(F(1), MUL(LR, F(wd))));
  PV *m = ST("exp_avg"), *v = ST("exp_avg_sq");
  PV *B1 = opt_mom(L, at, s->opt, s->oname, b1);
  PV *nm = ADD(MUL(m, B1), MUL(g, SUB(F(1), B1)));
  PV *nv = ADD(MUL(v, F(b2)), MUL(MUL(g, F(1 - b2)), g));
  state_update(L, at, m, nm);
  state_update(L, at, v, nv);
  PV *step = t_cast(L, at, ADD(s->tcount, F(1)), DT_F64);
  PV *bc1 = SUB(F(1), t_binary(L, at, OP_POW, opt_as_dt(L, at, B1, DT_F64), step));
  PV *bc2 = SUB(F(1), t_binary(L, at, OP_POW, F(b2), step));
  PV *den_v = nv;
  if (opt_hpb(L, at, group, "amsgrad")) {
    PV *vmax = ST("max_exp_avg_sq");
    PV *nmax = t_minmax(L, at, IR_MAX, vmax, nv);   /* torch.maximum: NaN propagates */
    state_update(L, at, vmax, nmax);
    den_v = nmax;
  }
  PV *denom = ADD(DIV(SQRT(den_v), opt_as_dt(L, at, SQRT(bc2), dt)), F(eps));
  PV *stepsize = opt_as_dt(L, at, DIV(opt_as_dt(L, at, LR, DT_F64), bc1), dt);
  state_update(L, at, slot, SUB(p, DIV(MUL(stepsize, nm), denom)));
}
void opt_adam(L *L, Span at, OptStep *s) { adam(L, at, s, 0); }
void opt_adamw(L *L, Span at, OptStep *s) { adam(L, at, s, 1); }

void opt_rmsprop(L *L, Span at, OptStep *s) {
  PV *g = opt_l2(L, at, s), *p = s->p, *group = s->group;
  double alpha = opt_hp(L, at, group, "alpha", 0.99), eps = opt_hp(L, at, group, "eps", 1e-8);
  double mom = opt_hp(L, at, group, "momentum", 0);
  PV *sq = ST("square_avg");
  PV *nsq = ADD(MUL(sq, F(alpha)), MUL(MUL(g, g), F(1 - alpha)));
  state_update(L, at, sq, nsq);
  PV *avg;
  if (opt_hpb(L, at, group, "centered")) {
    PV *ga = ST("grad_avg");
    PV *nga = ADD(MUL(ga, F(alpha)), MUL(g, F(1 - alpha)));
    state_update(L, at, ga, nga);
    avg = ADD(SQRT(SUB(nsq, MUL(nga, nga))), F(eps));
  } else
    avg = ADD(SQRT(nsq), F(eps));
  if (mom > 0) {
    PV *buf = ST("momentum_buffer");
    PV *nb = ADD(MUL(buf, F(mom)), DIV(g, avg));
    state_update(L, at, buf, nb);
    state_update(L, at, p, SUB(p, MUL(nb, s->LR)));
  } else
    state_update(L, at, p, SUB(p, MUL(DIV(g, avg), s->LR)));
}

void opt_adagrad(L *L, Span at, OptStep *s) {
  PV *g = opt_l2(L, at, s), *p = s->p, *group = s->group;
  double lrd = opt_hp(L, at, group, "lr_decay", 0), eps = opt_hp(L, at, group, "eps", 1e-10);
  double init = opt_hp(L, at, group, "initial_accumulator_value", 0);
  PV *sum = opt_state(L, at, s, "sum", init);
  PV *nsum = ADD(sum, MUL(g, g));
  state_update(L, at, sum, nsum);
  PV *clr = DIV(s->LR, ADD(F(1), MUL(s->tcount, F(lrd))));
  state_update(L, at, p, SUB(p, MUL(clr, DIV(g, ADD(SQRT(nsum), F(eps))))));
}

void opt_adadelta(L *L, Span at, OptStep *s) {
  PV *g = opt_l2(L, at, s), *p = s->p, *group = s->group;
  double rho = opt_hp(L, at, group, "rho", 0.9), eps = opt_hp(L, at, group, "eps", 1e-6);
  PV *sq = ST("square_avg"), *acc = ST("acc_delta");
  PV *nsq = ADD(MUL(sq, F(rho)), MUL(MUL(g, g), F(1 - rho)));
  PV *delta = MUL(DIV(SQRT(ADD(acc, F(eps))), SQRT(ADD(nsq, F(eps)))), g);
  state_update(L, at, sq, nsq);
  state_update(L, at, acc, ADD(MUL(acc, F(rho)), MUL(MUL(delta, delta), F(1 - rho))));
  state_update(L, at, p, SUB(p, MUL(delta, s->LR)));
}

/* The name of a parameter slot in the state_dict ("fc1.weight"). */
static const char *slot_name(L *L, Slot *s) { return L->T->prog->params.data[s->index].name; }

/* ---- gradients: backward(), accumulation, clipping ----------------------
 * backward() records its loss; the gradients are computed when something needs
 * them (clip_grad_norm_, step()) by one reverse sweep over the losses recorded
 * since, with respect to the parameters of every optimizer (and those being
 * clipped), and added to the accumulated gradients L->T->grad_acc: several
 * backward() calls before one step() accumulate, as PyTorch's .grad does, and
 * clipping rewrites the accumulated gradients the step then reads. */

enum { GF_CLEARED = 1, GF_READ = 2 }; /* a zero_grad() in the function clears it; a clip/step reads it */

static void grads_grow(L *L) {
  int np = L->T->prog->params.len;
  if (L->T->grad_n >= np) return;
  ValId *g = arena_alloc(L->a, sizeof(ValId) * (size_t)np);
  unsigned char *f = arena_alloc(L->a, (size_t)np);
  for (int i = 0; i < np; i++) {
    g[i] = i < L->T->grad_n ? L->T->grad_acc[i] : -1;
    f[i] = i < L->T->grad_n ? L->T->grad_flags[i] : 0;
  }
  L->T->grad_acc = g;
  L->T->grad_flags = f;
  L->T->grad_n = np;
}

static void grads_materialize(L *L, Span at, PV *extra);

/* PyTorch's zero_grad clears only the gradients of its optimizer's (or module's)
 * parameters: the others keep theirs, even across calls. */
void grads_zero(L *L, Span at, PV *params) {
  staged_effect_check(L, at, "zero_grad()");
  if (L->T->fn) {
    grads_materialize(L, at, NULL);
    grads_grow(L);
  }
  for (int i = 0; params && i < params->n; i++) {
    int idx = params->items[i]->k == PV_TENSOR && params->items[i]->t->slot ? params->items[i]->t->slot->index : -1;
    if (idx < 0 || idx >= L->T->grad_n) continue;
    L->T->grad_acc[idx] = -1;
    L->T->grad_flags[idx] |= GF_CLEARED;
  }
  L->T->zeroed = 1;
}

static void grads_reset(L *L) {
  L->T->grad_acc = NULL;
  L->T->grad_flags = NULL;
  L->T->grad_n = 0;
}

/* At the end of a training function: a gradient a clip or step read must be
 * cleared by some zero_grad() of the function, or PyTorch would carry it into
 * the next call (which a compiled entry, without .grad state, cannot). */
static void grads_check_cleared(L *L, Span at, const char *name) {
  for (int i = 0; i < L->T->grad_n; i++)
    if ((L->T->grad_flags[i] & GF_READ) && !(L->T->grad_flags[i] & GF_CLEARED))
      lower_error(L, at, "'%s' uses the gradient of '%s' but no zero_grad() in it clears that gradient (an "
                         "optimizer's zero_grad() clears only its own parameters): PyTorch would add it to the next "
                         "call's gradients; call model.zero_grad() or leave the parameter out",
                  name, L->T->prog->params.data[i].name);
}

static void wrt_add(L *L, Span at, PV *list, PV *seen, PV *p) {
  if (p->k != PV_TENSOR || !p->t->slot || p->t->slot->frozen || p->t->slot->index < 0) return;
  PV *k = pv_int(L, p->t->slot->index);   /* by parameter: two tensor values may stand for one */
  if (pv_dict_get(seen, k)) return;
  pv_dict_set(L, at, seen, k, p);
  pv_list_append(L, list, p);
}

/* Run the reverse sweep for the pending losses; `extra` (NULL or a list of
 * parameters) joins the optimizers' parameters as inputs. */
static void grads_materialize(L *L, Span at, PV *extra) {
  if (L->T->pending.len == 0) return;
  PV *list = pv_list(L, NULL, 0), *seen = pv_dict(L);
  for (int i = 0; extra && i < extra->n; i++) wrt_add(L, at, list, seen, extra->items[i]);
  /* every parameter of the model too: the pending losses are consumed by this
   * sweep, so a later `p.grad` of another parameter must find its gradient here
   * (model.zero_grad(); loss.backward(); w.grad, b.grad without an optimizer) */
  if (L->T->model && pv_is_module(L->T->model)) {
    PV *ps = module_parameters(L, at, L->T->model);
    for (int k = 0; k < ps->n; k++) wrt_add(L, at, list, seen, ps->items[k]);
  }
  for (int i = 0; i < L->globals->vals.len; i++) {
    PV *o = L->globals->vals.data[i];
    if (!opt_is_optimizer(o)) continue;
    PV *ps = env_get(o->attrs, "params");
    for (int k = 0; k < ps->n; k++) wrt_add(L, at, list, seen, ps->items[k]);
  }
  int n = list->n;
  if (n == 0) {
    L->T->pending.len = L->T->pending_seed.len = 0;
    return;
  }
  ValId *wrt = arena_alloc(L->a, sizeof(ValId) * (size_t)n), *grads = arena_alloc(L->a, sizeof(ValId) * (size_t)n);
  for (int i = 0; i < n; i++) wrt[i] = t_val(L, at, list->items[i]);
  AdSeed *seeds = arena_alloc(L->a, sizeof(AdSeed) * (size_t)L->T->pending.len);
  for (int i = 0; i < L->T->pending.len; i++) {
    seeds[i].value = L->T->pending.data[i];
    seeds[i].seed = L->T->pending_seed.data[i];
  }
  int *reached = arena_alloc(L->a, sizeof(int) * (size_t)n);
  /* a first-order sweep that nothing differentiates again (backward(create_graph=True) is refused) */
  if (L->T->prog->fuse_attention) ir_fuse_attention(L->T->prog, L->T->fn, 0);
  ad_reverse(L->T->prog, L->T->fn, seeds, L->T->pending.len, wrt, n, grads, reached);
  L->T->pending.len = L->T->pending_seed.len = 0;
  grads_grow(L);
  for (int i = 0; i < n; i++) {
    if (!reached[i]) continue;   /* not in the graph of these losses: .grad stays None, step() skips it */
    int idx = list->items[i]->t->slot->index;
    if (L->T->prog->distributed) {   /* DDP: this sweep's gradients are averaged over the ranks */
      vec_push(L->a, &L->T->fn->sync, grads[i]);
      vec_push(L->a, &L->T->fn->sync_params, idx);
    }
    ValId prev = L->T->grad_acc[idx];
    int low = L->T->prog->params.data[idx].low;   /* a .bfloat16() model's .grad is bfloat16 */
    PV *g = low ? ac_round(L, at, t_wrap(L, grads[i]), low) : t_wrap(L, grads[i]);
    PV *acc = prev < 0 ? g : ADD(t_wrap(L, prev), g);
    if (low && prev >= 0) acc = ac_round(L, at, acc, low);   /* accumulated in bfloat16, as PyTorch's .grad += */
    L->T->grad_acc[idx] = t_val(L, at, acc);
  }
}

/* The accumulated gradient of a parameter, or -1 (None); marks it read. */
static ValId grad_of(L *L, PV *p) {
  int idx = p->t->slot->index;
  if (idx < 0 || idx >= L->T->grad_n || p->t->slot->frozen || L->T->grad_acc[idx] < 0) return -1;
  L->T->grad_flags[idx] |= GF_READ;
  return L->T->grad_acc[idx];
}

/* p.grad: the gradient accumulated by the backward() calls since the last
 * zero_grad() (None at compile time, for tensors that are not parameters, and
 * before any backward()). Read-only: `p.grad = ...` and in-place updates of it
 * are not supported. */
PV *param_grad(L *L, Span at, PV *t) {
  if (!L->T->fn || !t->t->slot || t->t->slot->is_buffer || t->t->slot->frozen || t->t->slot->index < 0)
    return pv_none(L);
  PV *one = pv_list(L, &t, 1);
  grads_materialize(L, at, one);
  ValId g = grad_of(L, t);
  return g < 0 ? pv_none(L) : t_detach(L, at, t_wrap(L, g));
}

/* torch.nn.utils.clip_grad_norm_(parameters, max_norm, norm_type=2.0,
 * error_if_nonfinite=False) and clip_grad_value_(parameters, clip_value), as
 * PyTorch 1.13 computes them: the total norm is the norm of the per-parameter
 * norms, the gradients are scaled by clamp(max_norm / (total + 1e-6), max=1). */
PV *bi_clip_grad(L *L, PV *fn, Args *A) {
  PV *a[5];
  int norm = fn->bi == BI_U_CLIP_GRAD_NORM_;
  bind_args(L, A, norm ? "parameters,max_norm,norm_type=,error_if_nonfinite=,foreach=" : "parameters,clip_value,foreach=", a);
  Span at = A->at;
  if (!L->T->fn) lower_error(L, at, "%s() must be called inside a compiled training function", A->fname);
  staged_effect_check(L, at, "gradient clipping");
  PV **items;
  int n = a[0]->k == PV_TENSOR ? (items = &a[0], 1) : iter_items(L, at, a[0], &items);
  PV *params = pv_list(L, NULL, 0);
  for (int i = 0; i < n; i++) {
    if (items[i]->k != PV_TENSOR || !items[i]->t->slot)
      lower_error(L, at, "%s() needs model parameters (model.parameters()), not %s", A->fname,
                  items[i]->k == PV_TENSOR ? "a computed tensor" : pv_kind_name(items[i]));
    pv_list_append(L, params, items[i]);
  }
  grads_materialize(L, at, params);
  int ng = 0;
  for (int i = 0; i < n; i++) {
    ng += grad_of(L, params->items[i]) >= 0;
    if (params->items[i]->t->slot->sparse_grad && grad_of(L, params->items[i]) >= 0)
      lower_error(L, at, "%s() of the sparse gradient of '%s' (nn.Embedding(sparse=True)) is not supported: PyTorch "
                         "1.13 %s", A->fname, L->T->prog->params.data[params->items[i]->t->slot->index].name,
                  norm ? "counts it in the total norm but does not scale it" : "cannot clamp a sparse tensor");
  }
  if (ng == 0)
    lower_error(L, at, "%s() without a preceding loss.backward(): the parameters have no gradients to clip", A->fname);
  if (!norm) {
    double v = arg_num(L, at, a[1], "clip_value");
    for (int i = 0; i < n; i++) {
      ValId g = grad_of(L, params->items[i]);
      if (g < 0) continue;
      L->T->grad_acc[params->items[i]->t->slot->index] = t_val(L, at, t_clamp(L, at, t_wrap(L, g), F(-v), F(v)));
    }
    return pv_none(L);
  }
  double max_norm = arg_num(L, at, a[1], "max_norm");
  double p = a[2] ? arg_num(L, at, a[2], "norm_type") : 2.0;
  if (a[3] && arg_bool(L, at, a[3], "error_if_nonfinite"))
    lower_error(L, at, "clip_grad_norm_(error_if_nonfinite=True) would raise at run time, which compiled code cannot; "
                       "return the total norm and check it with torch.isfinite instead");
  if (!(p > 0) && !isinf(p)) lower_error(L, at, "clip_grad_norm_ supports norm_type > 0 and inf, not %g", p);
  if (isinf(p) && p < 0) lower_error(L, at, "clip_grad_norm_ supports norm_type > 0 and inf, not -inf");
  PV *total = NULL;
  for (int i = 0; i < n; i++) {
    ValId gv = grad_of(L, params->items[i]);
    if (gv < 0) continue;
    PV *g = t_wrap(L, gv), *part;
    if (isinf(p)) part = t_reduce(L, at, IR_REDUCE_MAX, t_unary(L, at, IR_ABS, g), NULL, 0, 0, 0);
    else if (p == 2) part = t_reduce(L, at, IR_REDUCE_SUM, MUL(g, g), NULL, 0, 0, 0);
    else if (p == 1) part = t_reduce(L, at, IR_REDUCE_SUM, t_unary(L, at, IR_ABS, g), NULL, 0, 0, 0);
    else part = t_reduce(L, at, IR_REDUCE_SUM, t_binary(L, at, OP_POW, t_unary(L, at, IR_ABS, g), F(p)), NULL, 0, 0, 0);
    total = !total ? part : isinf(p) ? t_minmax(L, at, IR_MAX, total, part) : ADD(total, part);
  }
  if (!isinf(p) && p != 1) total = p == 2 ? SQRT(total) : t_binary(L, at, OP_POW, total, F(1 / p));
  PV *coef = DIV(F(max_norm), ADD(total, F(1e-6)));
  coef = t_clamp(L, at, coef, NULL, F(1.0));
  for (int i = 0; i < n; i++) {
    ValId g = grad_of(L, params->items[i]);
    if (g < 0) continue;
    L->T->grad_acc[params->items[i]->t->slot->index] = t_val(L, at, MUL(t_wrap(L, g), coef));
  }
  return total;
}

void opt_grads_map(L *L, Span at, PV *opt, GradMapFn *map, void *ctx) {
  if (!L->T->fn) lower_error(L, at, "GradScaler.unscale_() must be called inside a compiled training function");
  staged_effect_check(L, at, "GradScaler.unscale_()");
  grads_materialize(L, at, NULL);
  PV *groups = env_get(opt->attrs, "param_groups");
  for (int gi = 0; gi < groups->n; gi++) {
    PV *ps = pv_dict_get(groups->items[gi], key(L, "params"));
    for (int i = 0; i < ps->n; i++) {
      ValId g = grad_of(L, ps->items[i]);
      if (g >= 0) L->T->grad_acc[ps->items[i]->t->slot->index] = t_val(L, at, map(L, at, t_wrap(L, g), ctx));
    }
  }
}

static PV *optimizer_step(L *L, PV *opt, Span at) {
  if (!L->T->fn) lower_error(L, at, "optimizer.step() must be called inside a compiled training function");
  staged_effect_check(L, at, "optimizer.step()");
  /* zero_grad() before step(), or after it (nanoGPT zeroes at the end of its
   * iteration): either way every call starts without gradients; checked when
   * the function ends (stage_function) */
  if (!L->T->zeroed) {
    L->T->zeroed = -1;
    L->T->unzeroed_step = at;
  }
  grads_materialize(L, at, NULL);
  int phase = L->T->fn->phase;   /* the update is optimizer code (profiles) */
  L->T->fn->phase = PH_OPTIMIZER;
  PV *groups = env_get(opt->attrs, "param_groups");
  int any = 0;
  for (int gi = 0; gi < groups->n; gi++) {
    PV *ps = pv_dict_get(groups->items[gi], key(L, "params"));
    for (int i = 0; i < ps->n; i++) any |= grad_of(L, ps->items[i]) >= 0;
  }
  if (!any) lower_error(L, at, "optimizer.step() without a preceding loss.backward()");
  const char *oname = opt_name(L, opt);
  Type st = {0};
  st.dtype = DT_F32;
  PV *count = state_tensor(L, at, arena_printf(L->a, "%s.step", oname), &st, 0);
  PV *tcount = t_wrap(L, t_val(L, at, count));
  for (int gi = 0; gi < groups->n; gi++) {
    PV *group = groups->items[gi], *ps = pv_dict_get(group, key(L, "params"));
    PV *LR = group_lr(L, at, opt, group, oname);
    for (int i = 0; i < ps->n; i++) {
      Slot *s = ps->items[i]->t->slot;
      ValId g = grad_of(L, ps->items[i]);
      if (g < 0) continue; /* frozen (requires_grad = False): no .grad, so PyTorch's step skips it */
      step_param(L, at, opt, group, LR, oname, slot_name(L, s), param_tensor(L, s), t_wrap(L, g), tcount);
    }
  }
  state_update(L, at, count, ADD(tcount, F(1)));
  L->T->fn->phase = phase;
  L->T->stepped = 1;
  return pv_none(L);
}

PV *bi_optim_method(L *L, PV *fn, Args *A) {
  PV *opt = fn->self, *a[2];
  if (fn->bi == BI_OPT_ZERO_GRAD) {
    bind_args(L, A, "set_to_none=", a);
    grads_zero(L, A->at, env_get(opt->attrs, "params"));
    return pv_none(L);
  }
  if (fn->bi == BI_OPT_ADD_PARAM_GROUP) {
    bind_args(L, A, "param_group", a);
    add_group(L, A->at, opt, a[0]);
    return pv_none(L);
  }
  bind_args(L, A, "closure=", a);
  if (a[0] && a[0]->k != PV_NONE) {
    /* step(closure): LBFGS re-evaluates it (optim.c); the others call it once, then step */
    if (opt->cls->bi == BI_O_LBFGS) return lbfgs_step(L, opt, a[0], A->at);
    PV *loss = optim_call_closure(L, A->at, a[0]);
    optimizer_step(L, opt, A->at);
    return loss;
  }
  return optimizer_step(L, opt, A->at);
}

PV *tensor_backward(L *L, PV *t, Args *A) {
  PV *a[4];
  bind_args(L, A, "gradient=,retain_graph=,create_graph=,inputs=", a);
  if (!L->T->fn) lower_error(L, A->at, "backward() must be called inside a compiled training function");
  staged_effect_check(L, A->at, "backward()");
  if (a[2] && truthy(L, A->at, a[2])) lower_error(L, A->at, "backward(create_graph=True) is not supported yet");
  if (a[3] && a[3]->k != PV_NONE) lower_error(L, A->at, "backward(inputs=...) is not supported yet");
  ValId v = t_val(L, A->at, t);
  ValId seed = -1;
  if (a[0] && a[0]->k != PV_NONE) {
    ValId s = t_val(L, A->at, a[0]);
    if (!ir_type_eq(ir_type(L->T->fn, s), ir_type(L->T->fn, v)))
      lower_error(L, A->at, "backward(gradient): gradient %s must have the shape of the tensor %s",
                  shape_str(L, ir_type(L->T->fn, s)), shape_str(L, ir_type(L->T->fn, v)));
    seed = s;
  } else if (ir_type(L->T->fn, v)->ndim != 0)
    lower_error(L, A->at, "backward() without a gradient needs a scalar, but the tensor has shape %s",
                shape_str(L, ir_type(L->T->fn, v)));
  if (!ir_dtype_is_float(ir_type(L->T->fn, v)->dtype)) lower_error(L, A->at, "backward() needs a floating-point tensor");
  vec_push(L->a, &L->T->pending, v);
  vec_push(L->a, &L->T->pending_seed, seed);
  L->T->backward_loss = t;
  return pv_none(L);
}

PV *bi_autograd_grad(L *L, PV *fn, Args *A) {
  PV *a[8];
  bind_args(L, A, "outputs,inputs,grad_outputs=,retain_graph=,create_graph=,only_inputs=,allow_unused=,is_grads_batched=", a);
  if (!L->T->fn) lower_error(L, A->at, "torch.autograd.grad must be called inside a compiled function");
  /* create_graph needs nothing special: the gradients are ordinary SSA values,
   * and every primitive the adjoint code uses has a VJP rule, so a later
   * grad() differentiates through them (double backward) */
  PV **outs, **ins, **gos = NULL;
  int no = a[0]->k == PV_TENSOR ? (outs = &a[0], 1) : iter_items(L, A->at, a[0], &outs);
  int ni = a[1]->k == PV_TENSOR ? (ins = &a[1], 1) : iter_items(L, A->at, a[1], &ins);
  int ng = 0;
  if (a[2] && a[2]->k != PV_NONE) ng = a[2]->k == PV_TENSOR ? (gos = &a[2], 1) : iter_items(L, A->at, a[2], &gos);
  if (ng && ng != no) lower_error(L, A->at, "grad_outputs must have one tensor per output");
  AdSeed *seeds = arena_alloc(L->a, sizeof(AdSeed) * (size_t)(no + 1));
  for (int i = 0; i < no; i++) {
    seeds[i].value = t_val(L, A->at, outs[i]);
    seeds[i].seed = ng && gos[i]->k != PV_NONE ? t_val(L, A->at, gos[i]) : -1;
    if (seeds[i].seed >= 0) {   /* PyTorch's _make_grads: the same shape */
      Type *ot = ir_type(L->T->fn, seeds[i].value), *gt = ir_type(L->T->fn, seeds[i].seed);
      Type o2 = *ot, g2 = *gt;
      g2.dtype = o2.dtype;
      if (!ir_type_eq(&o2, &g2))
        lower_error(L, A->at, "Mismatch in shape: grad_output[%d] has a shape of %s and output[%d] has a shape of %s", i,
                    shape_str(L, gt), i, shape_str(L, ot));
    }
    if (seeds[i].seed < 0 && ir_type(L->T->fn, seeds[i].value)->ndim != 0)
      lower_error(L, A->at, "grad can be implicitly created only for scalar outputs (shape %s)",
                  shape_str(L, ir_type(L->T->fn, seeds[i].value)));
  }
  ValId *wrt = arena_alloc(L->a, sizeof(ValId) * (size_t)(ni + 1)), *g = arena_alloc(L->a, sizeof(ValId) * (size_t)(ni + 1));
  for (int i = 0; i < ni; i++) wrt[i] = t_val(L, A->at, ins[i]);
  ad_reverse(L->T->prog, L->T->fn, seeds, no, wrt, ni, g, NULL);
  PV *r = pv_tuple(L, NULL, 0);
  for (int i = 0; i < ni; i++) pv_list_append(L, r, t_wrap(L, g[i]));
  return r;
}

/* ---- entries ------------------------------------------------------------- */

/* A learning rate compiled code set by hand (`g['lr'] = get_lr(it)`) is a value
 * of the function being staged; at its end it is written to the state tensor
 * "<optimizer>.param_groups.<i>.lr" (initially the group's lr), which the group
 * reads from then on, in this entry and in others, as PyTorch's dict keeps it. */
static void persist_group_lrs(L *L, Span at) {
  for (int i = 0; i < L->globals->vals.len; i++) {
    PV *o = L->globals->vals.data[i];
    if (!opt_is_optimizer(o)) continue;
    PV *groups = env_get(o->attrs, "param_groups"), *init = env_get(o->attrs, "lr_init");
    for (int gi = 0; gi < groups->n; gi++) {
      PV *v = pv_dict_get(groups->items[gi], key(L, "lr"));
      if (v->k != PV_TENSOR || v->t->slot || v->t->data) continue;
      Type st = {0};
      st.dtype = DT_F32;
      PV *s = state_tensor(L, at, arena_printf(L->a, "%s.param_groups.%d.lr", L->globals->names.data[i], gi), &st,
                           pv_num(init->items[gi]));
      state_update(L, at, s, lr_tensor(L, at, v));
      pv_dict_set(L, at, groups->items[gi], key(L, "lr"), s);
    }
  }
}

void stage_function(L *L, const char *name, PV *fnv, const LowerOptions *opt, PV *examples, int loop,
                    const char *const *outnames) {
  Node *def = fnv->node;
  Func *f = ir_func_new(L->T->prog, name, def->span);
  f->kind = FK_FUNCTION;
  L->T->fn = f;
  f->grad_mode = L->T->grad_mode; /* e.g. torch.set_grad_enabled(False) at module level */
  L->T->pending.len = L->T->pending_seed.len = 0;
  L->T->zeroed = L->T->stepped = 0;
  L->T->backward_loss = NULL;
  grads_reset(L);
  L->T->param_cur = arena_alloc(L->a, sizeof(ValId) * (size_t)(L->T->prog->params.len + 1));
  for (int i = 0; i < L->T->prog->params.len; i++) L->T->param_cur[i] = -1;
  PV *ex = NULL;
  if (examples && examples->k == PV_DICT) ex = pv_dict_get(examples, pv_str(L, name));
  if (ex && ex->k == PV_TENSOR) ex = pv_tuple(L, &ex, 1);
  int nargs;
  PV **args = entry_inputs(L, def, 0, name, opt, ex, &nargs);
  if (L->nstack < 64) {
    L->stack_span[L->nstack] = def->span;
    L->stack_name[L->nstack] = name;
  }
  L->T->loop_entry = loop ? name : NULL;
  PV *r = call_value(L, def->span, fnv, args, nargs, NULL, NULL, 0);
  L->T->loop_entry = NULL;
  if (loop == 1) { /* a training loop's body: its loss is the tensor backward() was called on */
    if (!L->T->backward_loss)
      lower_error(L, def->span, "the loop body compiled as '%s' calls no loss.backward()", name);
    r = L->T->backward_loss;
  }
  if (L->T->pending.len)
    lower_error(L, def->span, "'%s' calls backward() but no optimizer.step() uses the gradients", name);
  if (L->T->stepped) f->kind = FK_TRAIN;
  if (L->T->zeroed < 0)
    lower_error(L, L->T->unzeroed_step, "optimizer.step() without an optimizer.zero_grad() before or after it in '%s' "
                                     "would accumulate gradients across calls; call zero_grad()", name);
  grads_check_cleared(L, def->span, name);
  gs_finish(L, def->span, name);
  persist_group_lrs(L, def->span);
  PV **outs = &r;
  int nout = r->k == PV_NONE ? 0 : 1;
  if (pv_is_seq(r) || r->k == PV_DICT) {   /* a dict (torch.func's per-parameter results): its values, named by its keys */
    outs = r->items;
    nout = r->n;
  }
  int kept = 0;
  for (int i = 0; i < nout; i++) {
    /* an evaluation loop's sum of numbers (`total += target.size(0)`) is known
     * to the driver (the samples it feeds): not an output */
    if (loop == 2 && pv_is_num(outs[i])) continue;
    if (outs[i]->k != PV_TENSOR)
      lower_error(L, def->span, "'%s' must return tensors, but returned a %s", name, pv_kind_name(outs[i]));
    ir_add_output(L->T->prog, f, t_val(L, def->span, outs[i]),
                  loop == 2 ? outnames[i]
                  : r->k == PV_DICT && r->keys[i]->k == PV_STR ? r->keys[i]->s
                  : nout == 1 ? (f->kind == FK_TRAIN ? "loss" : "out") : arena_printf(L->a, "out%d", i));
    kept++;
  }
  nout = kept;
  /* `./net train` drives (data, labels[, iteration]) -> loss steps, the iteration a
   * one-element number it counts (nanoGPT's iter_num); other updating functions (a
   * DQN update of (s, a, r, s2), ...) are entries run with `./net run` */
  int nin = f->inputs.len;
  const Type *it = nin == 3 ? ir_type(f, f->inputs.data[2]) : NULL;
  int counter = it && ir_numel(it) == 1 && it->dtype != DT_BOOL;
  if (f->kind == FK_TRAIN && ((nin != 2 && !counter) || nout < 1 || ir_type(f, f->outputs.data[0])->ndim != 0))
    f->kind = FK_FUNCTION;
  attr_cache_restore(L);
  /* an evaluation loop's body: (data, labels) -> its sums over one batch, one
   * element each, which `./net train` adds up over the test set */
  if (loop == 2 && f->kind == FK_FUNCTION && nin == 2 && nout >= 1) {
    f->kind = FK_EVAL;
    for (int i = 0; i < nout; i++)
      if (ir_numel(ir_type(f, f->outputs.data[i])) != 1) f->kind = FK_FUNCTION;
  }
  L->T->fn = NULL;
  L->T->param_cur = NULL;
}
