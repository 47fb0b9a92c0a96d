/* optim.c - update rules of the optimizers added for issue 16 (rows of
 * optim.def): Adamax, NAdam, RAdam, ASGD, Rprop, SparseAdam and LBFGS, as
 * PyTorch 1.13 computes them (torch/optim/<name>.py, the _single_tensor_
 * functions). The constructor, parameter groups, the step count and the
 * gradients are shared with the other optimizers (training.c); a rule gets one
 * parameter (OptStep, lower_int.h) and writes it and its state.
 *
 * PyTorch computes the step-dependent scalars (bias corrections, RAdam's rho_t,
 * NAdam's mu, ASGD's eta) in Python doubles and applies them to float32 tensors
 * as float32 scalars; the rules compute them in f64 from the step count
 * (scalar IR values) and cast them to the parameter's dtype, so RAdam's
 * rectification test (rho_t > 5, decided within 0.004 at step 5 with the
 * default betas) is taken exactly as PyTorch takes it. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "../autograd_ad/autograd.h"
#include "torch_int.h"

#define ADD(a, b) t_binary(L, at, OP_ADD, (a), (b))
#define SUB(a, b) t_binary(L, at, OP_SUB, (a), (b))
#define MUL(a, b) t_binary(L, at, OP_MUL, (a), (b))
#define DIV(a, b) t_binary(L, at, OP_DIV, (a), (b))
#define POW(a, b) t_binary(L, at, OP_POW, (a), (b))
#define F(x) pv_float(L, (x))
#define SQRT(a) t_unary(L, at, IR_SQRT, (a))
#define GT(a, b) t_compare(L, at, OP_GT, (a), (b))
#define LT(a, b) t_compare(L, at, OP_LT, (a), (b))
#define EQ(a, b) t_compare(L, at, OP_EQ, (a), (b))
#define WHERE(c, a, b) t_where(L, at, (c), (a), (b))
/* a state tensor of the parameter's shape, zero-initialised */
#define ST(name) opt_state(L, at, s, name, 0)

/* a 0-d f32 state tensor (PyTorch's torch.tensor(x) state entries) */
static PV *scalar_state(L *L, Span at, OptStep *s, const char *name, double init) {
  Type t = {0};
  t.dtype = DT_F32;
  return state_tensor(L, at, arena_printf(L->a, "%s.%s", s->pre, name), &t, init);
}

#define as_dt opt_as_dt

/* the step number of this step (PyTorch's `step` after `step_t += 1`), f64 */
static PV *step64(L *L, Span at, OptStep *s) { return t_cast(L, at, ADD(s->tcount, F(1)), DT_F64); }

/* a pair option ("betas", "etas", "step_sizes") */
static void opt_pair(L *L, Span at, PV *group, const char *name, double *a, double *b) {
  PV *v = pv_dict_get(group, pv_str(L, name));
  if (!v || !pv_is_seq(v) || v->n != 2) lower_error(L, at, "%s must be a pair", name);
  *a = arg_num(L, at, v->items[0], name);
  *b = arg_num(L, at, v->items[1], name);
}

static void check_betas(L *L, Span at, double b1, double b2) {
  if (!(b1 >= 0 && b1 < 1)) lower_error(L, at, "Invalid beta parameter at index 0: %g", b1);
  if (!(b2 >= 0 && b2 < 1)) lower_error(L, at, "Invalid beta parameter at index 1: %g", b2);
}

static double hp_nonneg(L *L, Span at, PV *group, const char *name, const char *what, double dflt) {
  double v = opt_hp(L, at, group, name, dflt);
  if (!(v >= 0)) lower_error(L, at, "Invalid %s value: %g", what, v);
  return v;
}

/* torch.sign: 1, -1, 0 (and 0 for NaN, as PyTorch's CPU kernel gives) */
static PV *sign(L *L, Span at, PV *x) { return WHERE(GT(x, F(0)), F(1), WHERE(LT(x, F(0)), F(-1), F(0))); }

/* The options Adamax, NAdam and RAdam share: betas (checked), eps and
 * weight_decay (non-negative; the decay itself is opt_l2's). */
static void adam_options(L *L, Span at, OptStep *s, double *b1, double *b2, double *eps) {
  opt_pair(L, at, s->group, "betas", b1, b2);
  check_betas(L, at, *b1, *b2);
  *eps = hp_nonneg(L, at, s->group, "eps", "epsilon", 1e-8);
  hp_nonneg(L, at, s->group, "weight_decay", "weight_decay", 0);
}

/* ---- Adamax ---------------------------------------------------------------- */

void opt_adamax(L *L, Span at, OptStep *s) {
  double b1, b2, eps;
  adam_options(L, at, s, &b1, &b2, &eps);
  DType dt = s->t.dtype;
  PV *g = opt_l2(L, at, s), *p = s->p;
  PV *m = ST("exp_avg"), *u = ST("exp_inf");
  PV *nm = ADD(MUL(m, F(b1)), MUL(g, F(1 - b1)));
  /* amax over [exp_inf * beta2, |g| + eps]: NaN propagates */
  PV *nu = t_minmax(L, at, IR_MAX, MUL(u, F(b2)), ADD(t_unary(L, at, IR_ABS, g), F(eps)));
  state_update(L, at, m, nm);
  state_update(L, at, u, nu);
  PV *bc = SUB(F(1), POW(F(b1), step64(L, at, s)));
  PV *clr = as_dt(L, at, DIV(as_dt(L, at, s->LR, DT_F64), bc), dt);
  state_update(L, at, p, SUB(p, MUL(clr, DIV(nm, nu))));
}

/* ---- NAdam ------------------------------------------------------------------ */

void opt_nadam(L *L, Span at, OptStep *s) {
  double b1, b2, eps;
  adam_options(L, at, s, &b1, &b2, &eps);
  double md = hp_nonneg(L, at, s->group, "momentum_decay", "momentum_decay", 4e-3);
  DType dt = s->t.dtype;
  PV *g = opt_l2(L, at, s), *p = s->p;
  PV *step = step64(L, at, s);
  PV *bc2 = SUB(F(1), POW(F(b2), step));
  PV *mu = MUL(F(b1), SUB(F(1), MUL(F(0.5), POW(F(0.96), MUL(step, F(md))))));
  PV *mu_next = MUL(F(b1), SUB(F(1), MUL(F(0.5), POW(F(0.96), MUL(ADD(step, F(1)), F(md))))));
  /* mu_product is a float32 tensor multiplied by the Python doubles mu, mu_next */
  PV *mp = scalar_state(L, at, s, "mu_product", 1);
  PV *nmp = MUL(mp, as_dt(L, at, mu, DT_F32));
  PV *mp_next = MUL(MUL(nmp, as_dt(L, at, mu, DT_F32)), as_dt(L, at, mu_next, DT_F32));
  state_update(L, at, mp, nmp);
  PV *m = ST("exp_avg"), *v = ST("exp_avg_sq");
  PV *nm = ADD(MUL(m, F(b1)), MUL(g, F(1 - b1)));
  PV *nv = ADD(MUL(v, F(b2)), MUL(MUL(g, g), F(1 - b2)));
  state_update(L, at, m, nm);
  state_update(L, at, v, nv);
  PV *denom = ADD(SQRT(DIV(nv, as_dt(L, at, bc2, dt))), F(eps));
  PV *lr = as_dt(L, at, s->LR, DT_F64);
  PV *c1 = DIV(MUL(lr, SUB(F(1), mu)), SUB(F(1), as_dt(L, at, nmp, DT_F64)));
  PV *c2 = DIV(MUL(lr, mu_next), SUB(F(1), as_dt(L, at, mp_next, DT_F64)));
  PV *p1 = SUB(p, MUL(as_dt(L, at, c1, dt), DIV(g, denom)));
  state_update(L, at, p, SUB(p1, MUL(as_dt(L, at, c2, dt), DIV(nm, denom))));
}

/* ---- RAdam ------------------------------------------------------------------ */

void opt_radam(L *L, Span at, OptStep *s) {
  double b1, b2, eps;
  adam_options(L, at, s, &b1, &b2, &eps);
  DType dt = s->t.dtype;
  PV *g = opt_l2(L, at, s), *p = s->p;
  PV *step = step64(L, at, s);
  PV *bc1 = SUB(F(1), POW(F(b1), step)), *bc2 = SUB(F(1), POW(F(b2), step));
  PV *m = ST("exp_avg"), *v = ST("exp_avg_sq");
  PV *nm = ADD(MUL(m, F(b1)), MUL(g, F(1 - b1)));
  PV *nv = ADD(MUL(v, F(b2)), MUL(MUL(g, g), F(1 - b2)));
  state_update(L, at, m, nm);
  state_update(L, at, v, nv);
  PV *bcm = DIV(nm, as_dt(L, at, bc1, dt));
  double rho_inf = 2 / (1 - b2) - 1;
  PV *rho_t = SUB(F(rho_inf), DIV(MUL(MUL(step, F(2)), POW(F(b2), step)), bc2));
  /* the variance rectification, where rho_t > 5 (a select on the step count:
   * the other side's NaN from sqrt of a negative number is not taken) */
  PV *rect = SQRT(DIV(MUL(MUL(SUB(rho_t, F(4)), SUB(rho_t, F(2))), F(rho_inf)),
                      MUL(F((rho_inf - 4) * (rho_inf - 2)), rho_t)));
  PV *lr = as_dt(L, at, s->LR, dt);
  PV *adaptive = DIV(as_dt(L, at, SQRT(bc2), dt), ADD(SQRT(nv), F(eps)));
  PV *rectified = MUL(MUL(MUL(bcm, lr), adaptive), as_dt(L, at, rect, dt));
  PV *plain = MUL(bcm, lr);
  state_update(L, at, p, SUB(p, WHERE(GT(rho_t, F(5)), rectified, plain)));
}

/* ---- ASGD ------------------------------------------------------------------- */

void opt_asgd(L *L, Span at, OptStep *s) {
  PV *group = s->group;
  hp_nonneg(L, at, group, "weight_decay", "weight_decay", 0);
  double lambd = opt_hp(L, at, group, "lambd", 1e-4), alpha = opt_hp(L, at, group, "alpha", 0.75);
  double t0 = opt_hp(L, at, group, "t0", 1e6);
  DType dt = s->t.dtype;
  PV *g = opt_l2(L, at, s), *p = s->p;
  PV *step = step64(L, at, s);
  PV *lr64 = as_dt(L, at, s->LR, DT_F64);
  /* eta and mu: float32 scalars; PyTorch sets eta to the group's lr when the
   * state is created (the first step), so the first step reads the lr */
  PV *eta_s = scalar_state(L, at, s, "eta", 0), *mu_s = scalar_state(L, at, s, "mu", 1);
  PV *first = EQ(s->tcount, F(0));
  PV *eta = as_dt(L, at, WHERE(first, as_dt(L, at, lr64, DT_F32), eta_s), DT_F64);
  PV *mu = as_dt(L, at, mu_s, DT_F64);
  PV *ax = ST("ax");
  PV *p1 = MUL(p, as_dt(L, at, SUB(F(1), MUL(F(lambd), eta)), dt));
  PV *p2 = SUB(p1, MUL(g, as_dt(L, at, eta, dt)));
  PV *nax = WHERE(t_compare(L, at, OP_NE, mu, F(1)), ADD(ax, MUL(SUB(p2, ax), as_dt(L, at, mu, dt))), p2);
  state_update(L, at, p, p2);
  state_update(L, at, ax, nax);
  PV *neta = DIV(lr64, POW(ADD(F(1), MUL(MUL(F(lambd), lr64), step)), F(alpha)));
  PV *d = SUB(step, F(t0));
  PV *nmu = DIV(F(1), WHERE(GT(d, F(1)), d, F(1)));
  state_update(L, at, eta_s, as_dt(L, at, neta, DT_F32));
  state_update(L, at, mu_s, as_dt(L, at, nmu, DT_F32));
}

/* ---- Rprop ------------------------------------------------------------------ */

void opt_rprop(L *L, Span at, OptStep *s) {
  double em, ep, smin, smax;
  opt_pair(L, at, s->group, "etas", &em, &ep);
  opt_pair(L, at, s->group, "step_sizes", &smin, &smax);
  if (!(0 < em && em < 1 && 1 < ep)) lower_error(L, at, "Invalid eta values: %g, %g", em, ep);
  DType dt = s->t.dtype;
  PV *g = s->g, *p = s->p;
  PV *prev = ST("prev"), *ss = ST("step_size");
  /* step_size starts as the group's lr (filled when the state is created) */
  PV *ss0 = WHERE(EQ(s->tcount, F(0)), as_dt(L, at, s->LR, dt), ss);
  PV *prod = MUL(g, prev);
  /* sign(g * prev) mapped to etaplus, etaminus, 1; NaN stays NaN */
  PV *factor = WHERE(GT(prod, F(0)), F(ep), WHERE(LT(prod, F(0)), F(em), ADD(MUL(prod, F(0)), F(1))));
  PV *nss = t_clamp(L, at, MUL(ss0, factor), F(smin), F(smax));
  PV *ng = WHERE(EQ(factor, F(em)), F(0), g);
  state_update(L, at, p, SUB(p, MUL(sign(L, at, ng), nss)));
  state_update(L, at, prev, ng);
  state_update(L, at, ss, nss);
}

/* ---- SparseAdam ------------------------------------------------------------- */

/* The rows a sparse gradient has: PyTorch's nn.Embedding(sparse=True) gives a
 * sparse gradient whose indices are the looked-up rows (padding_idx excluded),
 * and SparseAdam updates exactly those rows, whether or not the gradient values
 * there are zero. ctc's gradients are dense: the rows are found by walking the
 * accumulated gradient back to its embedding_bwd instructions (added together
 * over several lookups and backward() calls, negated under maximize) and
 * counting their lookups: a [V, 1] mask of rows looked up at least once. */
static PV *sparse_rows(L *L, Span at, ValId g, PV *mask, const char *pname) {
  const Value *val = ir_val(L->T->fn, g);
  const Inst *in = val->kind == V_INST ? &L->T->fn->insts.data[val->def] : NULL;
  /* clip_grad_norm_ scales the gradient by a scalar: same rows */
  if (in && in->op == IR_MUL && (ir_type(L->T->fn, in->args[0])->ndim == 0 || ir_type(L->T->fn, in->args[1])->ndim == 0))
    return sparse_rows(L, at, in->args[ir_type(L->T->fn, in->args[0])->ndim == 0], mask, pname);
  if (in && (in->op == IR_ADD || in->op == IR_NEG)) {
    ValId a = in->args[0], b = in->op == IR_ADD ? in->args[1] : -1;
    mask = sparse_rows(L, at, a, mask, pname);
    return b >= 0 ? sparse_rows(L, at, b, mask, pname) : mask;
  }
  if (!in || in->op != IR_EMBEDDING_BWD)
    lower_error(L, at, "SparseAdam does not support dense gradients, please consider Adam instead (the gradient of "
                       "'%s' does not come from embedding lookups only: use nn.Embedding(sparse=True))", pname);
  ValId idx = in->args[0];
  int64_t attr[2] = {in->attr[0], in->attr[1]};
  Type rt = *ir_type(L->T->fn, in->res);
  PV *ix = t_wrap(L, idx);
  Type it = t_type(ix);
  /* ones of the index's shape with a trailing 1 (materialised, not a broadcast) */
  PV *ones = t_cast(L, at, EQ(ix, ix), rt.dtype);
  int64_t dims[IR_MAX_DIMS + 1];
  for (int i = 0; i < it.ndim; i++) dims[i] = it.dims[i];
  dims[it.ndim] = 1;
  ones = t_reshape(L, at, ones, dims, it.ndim + 1);
  rt.dims[1] = 1;
  ValId args[2] = {idx, t_val(L, at, ones)};
  PV *cnt = t_wrap(L, ir_emit(L->T->prog, L->T->fn, IR_EMBEDDING_BWD, args, 2, rt, attr, 2, 0, at, "rows"));
  return mask ? ADD(mask, cnt) : cnt;
}

void opt_sparseadam(L *L, Span at, OptStep *s) {
  double b1, b2;
  opt_pair(L, at, s->group, "betas", &b1, &b2);
  check_betas(L, at, b1, b2);
  double eps = opt_hp(L, at, s->group, "eps", 1e-8);
  if (!(eps > 0)) lower_error(L, at, "Invalid epsilon value: %g", eps);
  PV *lrv = pv_dict_get(s->group, pv_str(L, "lr"));
  if (lrv && lrv->k != PV_TENSOR && !(arg_num(L, at, lrv, "lr") > 0))
    lower_error(L, at, "Invalid learning rate: %g", arg_num(L, at, lrv, "lr"));
  DType dt = s->t.dtype;
  if (s->t.ndim != 2) lower_error(L, at, "SparseAdam does not support dense gradients, please consider Adam instead");
  if (!s->p->t->slot || !s->p->t->slot->sparse_grad)
    lower_error(L, at, "SparseAdam does not support dense gradients, please consider Adam instead ('%s' is not the "
                       "weight of an nn.Embedding(sparse=True))", s->pre);
  PV *g = s->g, *p = s->p;
  PV *rows = GT(sparse_rows(L, at, t_val(L, at, g), NULL, s->pre), F(0));
  PV *m = ST("exp_avg"), *v = ST("exp_avg_sq");
  /* old + (new - old) * (1 - beta), on the gradient's rows only */
  PV *um = MUL(SUB(g, m), F(1 - b1)), *uv = MUL(SUB(MUL(g, g), v), F(1 - b2));
  PV *nm = ADD(m, um), *nv = ADD(v, uv);
  PV *numer = ADD(um, m), *denom = ADD(SQRT(ADD(uv, v)), F(eps));
  /* (after state_update, m and v read as their new values) */
  state_update(L, at, m, WHERE(rows, nm, m));
  state_update(L, at, v, WHERE(rows, nv, v));
  PV *step = step64(L, at, s);
  PV *bc1 = SUB(F(1), POW(F(b1), step)), *bc2 = SUB(F(1), POW(F(b2), step));
  PV *size = as_dt(L, at, DIV(MUL(as_dt(L, at, s->LR, DT_F64), SQRT(bc2)), bc1), dt);
  state_update(L, at, p, WHERE(rows, ADD(p, MUL(t_unary(L, at, IR_NEG, size), DIV(numer, denom))), p));
}

/* ---- optimizer.step(closure) and LBFGS ------------------------------------- */

/* The closure of optimizer.step(closure), called as PyTorch calls it: with
 * gradients enabled (step() itself runs under no_grad). Returns its value. */
PV *optim_call_closure(L *L, Span at, PV *closure) {
  int mode = L->T->grad_mode;
  grad_mode_set(L, NG_NONE);
  PV *r = call_value(L, at, closure, NULL, 0, NULL, NULL, 0);
  grad_mode_set(L, mode);
  return r;
}

/* LBFGS has no per-parameter update: optimizer.step() without a closure */
void opt_lbfgs(L *L, Span at, OptStep *s) {
  lower_error(L, at, "LBFGS.step() needs a closure that re-evaluates the model and returns the loss: "
                     "optimizer.step(closure)");
}

static const char *lbfgs_oname(L *L, PV *opt) {
  for (int i = 0; i < L->globals->names.len; i++)
    if (L->globals->vals.data[i] == opt) return L->globals->names.data[i];
  return "optimizer";
}

static PV *dot(L *L, Span at, PV *a, PV *b) { return t_reduce(L, at, IR_REDUCE_SUM, MUL(a, b), NULL, 0, 0, 0); }
static PV *absmax(L *L, Span at, PV *a) {
  return t_reduce(L, at, IR_REDUCE_MAX, t_unary(L, at, IR_ABS, a), NULL, 0, 0, 0);
}
/* flags are f32 0/1 scalars: and = product, or = max, as a condition: > 0.5 */
static PV *flag(L *L, Span at, PV *cond) { return t_cast(L, at, cond, DT_F32); }
static PV *on(L *L, Span at, PV *f) { return GT(f, F(0.5)); }
static PV *f_or(L *L, Span at, PV *a, PV *b) { return t_minmax(L, at, IR_MAX, a, b); }

typedef struct {
  int n;          /* parameters */
  PV **p;         /* their PV tensors (slots) */
  int64_t *off, *numel;
  int64_t N;      /* total elements */
  DType dt;
} LbParams;

/* PyTorch's _gather_flat_grad: the gradients (zeros for None) concatenated */
static PV *lb_flat_grad(L *L, Span at, LbParams *P) {
  PV **v = arena_alloc(L->a, sizeof(PV *) * (size_t)P->n);
  for (int i = 0; i < P->n; i++) {
    PV *g = param_grad(L, at, P->p[i]);
    Type t = {0};
    t.dtype = P->dt;
    t.ndim = 1;
    t.dims[0] = P->numel[i];
    v[i] = g->k == PV_NONE ? t_const_tensor(L, at, t, 0) : t_reshape(L, at, g, &P->numel[i], 1);
  }
  return P->n == 1 ? v[0] : t_concat(L, at, v, P->n, 0);
}

/* evaluate the closure at the parameter values x[]: its loss as f64, and the flat gradient */
static PV *lb_eval(L *L, Span at, LbParams *P, PV **x, PV *closure, PV **g) {
  for (int i = 0; i < P->n; i++) L->T->param_cur[P->p[i]->t->slot->index] = t_val(L, at, x[i]);
  PV *loss = optim_call_closure(L, at, closure);
  if (loss->k != PV_TENSOR || ir_numel(&loss->t->type) != 1)
    lower_error(L, at, "the closure of LBFGS.step() must return the loss (a one-element tensor), not %s",
                loss->k == PV_TENSOR ? shape_str(L, &loss->t->type) : pv_kind_name(loss));
  *g = lb_flat_grad(L, at, P);
  return loss;
}

static PV *loss64(L *L, Span at, PV *loss) {
  PV *l = loss->t->type.ndim ? t_reshape(L, at, loss, NULL, 0) : loss;
  return t_cast(L, at, l, DT_F64);
}

/* ---- LBFGS's strong-Wolfe line search ---------------------------------------
 * PyTorch 1.13's _strong_wolfe (c1 1e-4, c2 0.9, max_ls 25) with
 * _cubic_interpolate, staged: every scalar is an f64 0-d tensor and every `if`
 * a select. Its two loops (bracketing, then zoom) share one budget of max_ls
 * evaluations after the first and each of their iterations evaluates the
 * closure once, so they are unrolled as max_ls slots: in slot k (ls_iter == k
 * while the search runs) the bracketing phase either continues (interpolates a
 * new t) or breaks into the zoom phase or out of the search; then the zoom
 * phase, if the search is in it, either stops (bracket too small) or picks a
 * new t; a slot in which either phase wants a point evaluates the closure
 * there and the zoom phase updates its bracket. Flags (bool tensors) say which
 * phase the search is in; a finished search changes nothing more. */

#define AND(a, b) t_bitwise(L, at, IR_BIT_AND, (a), (b))
#define OR(a, b) t_bitwise(L, at, IR_BIT_OR, (a), (b))
#define NOT(a) t_logical(L, at, '!', (a), NULL)
#define GE(a, b) t_compare(L, at, OP_GE, (a), (b))
#define LE(a, b) t_compare(L, at, OP_LE, (a), (b))
#define ABS(a) t_unary(L, at, IR_ABS, (a))

/* Python's max(a, b) / min(a, b): the first unless the second is strictly larger/smaller */
static PV *py_max(L *L, Span at, PV *a, PV *b) { return WHERE(GT(b, a), b, a); }
static PV *py_min(L *L, Span at, PV *a, PV *b) { return WHERE(LT(b, a), b, a); }

/* _cubic_interpolate(x1, f1, g1, x2, f2, g2, bounds=(lo, hi) or None) */
static PV *lb_cubic(L *L, Span at, PV *x1, PV *f1, PV *g1, PV *x2, PV *f2, PV *g2, PV *lo, PV *hi) {
  PV *le = LE(x1, x2);
  if (!lo) {
    lo = WHERE(le, x1, x2);
    hi = WHERE(le, x2, x1);
  }
  PV *d1 = SUB(ADD(g1, g2), DIV(MUL(F(3), SUB(f1, f2)), SUB(x1, x2)));
  PV *d2sq = SUB(MUL(d1, d1), MUL(g1, g2));
  PV *d2 = SQRT(d2sq);   /* NaN where d2sq < 0: that side is not selected */
  PV *mp1 = SUB(x2, MUL(SUB(x2, x1), DIV(SUB(ADD(g2, d2), d1), ADD(SUB(g2, g1), MUL(F(2), d2)))));
  PV *mp2 = SUB(x1, MUL(SUB(x1, x2), DIV(SUB(ADD(g1, d2), d1), ADD(SUB(g1, g2), MUL(F(2), d2)))));
  PV *r = py_min(L, at, py_max(L, at, WHERE(le, mp1, mp2), lo), hi);
  return WHERE(GE(d2sq, F(0)), r, DIV(ADD(lo, hi), F(2)));
}

static PV *f64s(L *L, Span at, PV *x) {
  if (t_type(x).ndim) x = t_reshape(L, at, x, NULL, 0);
  return t_type(x).dtype == DT_F64 ? x : t_cast(L, at, x, DT_F64);
}

/* _directional_evaluate: the closure at x + t d (t an f64 scalar); its loss as f64, the flat gradient in *g */
static PV *lb_eval_at(L *L, Span at, LbParams *P, PV **x, PV *t, PV *d, PV *closure, PV **g) {
  PV **xs = arena_alloc(L->a, sizeof(PV *) * (size_t)P->n);
  PV *tt = as_dt(L, at, t, P->dt);
  for (int i = 0; i < P->n; i++) {
    Type pt = P->p[i]->t->type;
    PV *di = t_reshape(L, at, t_slice(L, at, d, 0, P->off[i], P->off[i] + P->numel[i], 1), pt.dims, pt.ndim);
    xs[i] = ADD(x[i], MUL(di, tt));
  }
  return loss64(L, at, lb_eval(L, at, P, xs, closure, g));
}

enum { LS_MAX = 25 };

/* _strong_wolfe(obj_func, x, t, d, f, g, gtd) from the parameters x: returns
 * the loss at the chosen step (f64), its flat gradient (*g_out), the step
 * (*t_out, f64) and the number of closure evaluations (*n_out, f32). */
static PV *lb_strong_wolfe(L *L, Span at, LbParams *P, PV **x, PV *closure, PV *t, PV *d, PV *f, PV *g, PV *gtd,
                           double tol_change, PV **g_out, PV **t_out, PV **n_out) {
  const double c1 = 1e-4, c2 = 0.9;
  PV *dnorm = f64s(L, at, absmax(L, at, d));
  PV *gn, *fn = lb_eval_at(L, at, P, x, t, d, closure, &gn);
  PV *gtdn = f64s(L, at, dot(L, at, gn, d));
  PV *nev = t_scalar_like(L, at, 1, DT_F32);
  PV *armijo = ADD(f, MUL(MUL(F(c1), t), gtd)), *curv = MUL(F(-c2), gtd);
  /* bracketing: the previous point */
  PV *tp = t_scalar_like(L, at, 0, DT_F64), *fp = f, *gp = g, *gtdp = gtd;
  /* the bracket (two points; low: whether bracket[1] is the low point) */
  PV *b[2] = {tp, tp}, *bf[2] = {f, f}, *bg[2] = {g, g}, *bgtd[2] = {gtd, gtd};
  PV *tru = GE(nev, F(0)), *fal = NOT(tru);
  PV *low = fal, *insuf = fal, *inB = tru, *inZ = fal;
  for (int k = 0; k < LS_MAX; k++) {
    /* -- bracketing: check conditions at the last point */
    PV *arm = GT(fn, armijo);
    if (k > 1) arm = OR(arm, GE(fn, fp));
    PV *wolfe = LE(ABS(gtdn), curv), *pos = GE(gtdn, F(0));
    PV *brk = AND(inB, OR(arm, AND(NOT(wolfe), pos)));    /* bracket = [t_prev, t] */
    PV *brkw = AND(inB, AND(NOT(arm), wolfe));             /* bracket = [t], done */
    PV *cont = AND(inB, NOT(OR(arm, OR(wolfe, pos))));
    b[0] = WHERE(brk, tp, WHERE(brkw, t, b[0]));
    b[1] = WHERE(brk, t, b[1]);
    bf[0] = WHERE(brk, fp, WHERE(brkw, fn, bf[0]));
    bf[1] = WHERE(brk, fn, bf[1]);
    bg[0] = WHERE(brk, gp, WHERE(brkw, gn, bg[0]));
    bg[1] = WHERE(brk, gn, bg[1]);
    bgtd[0] = WHERE(brk, gtdp, bgtd[0]);
    bgtd[1] = WHERE(brk, gtdn, bgtd[1]);
    low = WHERE(brk, NOT(LE(bf[0], bf[1])), WHERE(brkw, fal, low));
    inZ = OR(inZ, brk);
    inB = cont;
    /* interpolate between the last two points, within [t + 0.01 (t - t_prev), 10 t] */
    PV *tb = lb_cubic(L, at, tp, fp, gtdp, t, fn, gtdn, ADD(t, MUL(F(0.01), SUB(t, tp))), MUL(t, F(10)));
    tp = WHERE(cont, t, tp);
    fp = WHERE(cont, fn, fp);
    gp = WHERE(cont, gn, gp);
    gtdp = WHERE(cont, gtdn, gtdp);
    /* -- zoom: stop on a tiny bracket, else a new trial point in it */
    PV *small = LT(MUL(ABS(SUB(b[1], b[0])), dnorm), F(tol_change));
    PV *zc = AND(inZ, NOT(small));
    inZ = zc;
    PV *tz = lb_cubic(L, at, b[0], bf[0], bgtd[0], b[1], bf[1], bgtd[1], NULL, NULL);
    PV *bmax = py_max(L, at, b[0], b[1]), *bmin = py_min(L, at, b[0], b[1]);
    PV *eps = MUL(F(0.1), SUB(bmax, bmin));
    PV *near = LT(py_min(L, at, SUB(bmax, tz), SUB(tz, bmin)), eps);
    PV *move = AND(near, OR(insuf, OR(GE(tz, bmax), LE(tz, bmin))));
    PV *tzm = WHERE(LT(ABS(SUB(tz, bmax)), ABS(SUB(tz, bmin))), SUB(bmax, eps), ADD(bmin, eps));
    tz = WHERE(move, tzm, tz);
    insuf = WHERE(zc, AND(near, NOT(move)), insuf);
    /* -- evaluate the new point */
    PV *ev = OR(cont, zc);
    t = WHERE(cont, tb, WHERE(zc, tz, t));
    PV *ge, *fe = lb_eval_at(L, at, P, x, t, d, closure, &ge);
    PV *gtde = f64s(L, at, dot(L, at, ge, d));
    fn = WHERE(ev, fe, fn);
    gn = WHERE(ev, ge, gn);
    gtdn = WHERE(ev, gtde, gtdn);
    nev = ADD(nev, t_cast(L, at, ev, DT_F32));
    /* -- zoom: update the bracket with the new point */
    PV *flo = WHERE(low, bf[1], bf[0]);
    PV *armz = OR(GT(fn, ADD(f, MUL(MUL(F(c1), t), gtd))), GE(fn, flo));
    PV *hi_new = AND(zc, armz);                 /* bracket[high] = new point */
    PV *wz = AND(NOT(armz), LE(ABS(gtdn), curv));
    PV *bhi = WHERE(low, b[0], b[1]), *blo = WHERE(low, b[1], b[0]);
    PV *swap = AND(zc, AND(NOT(armz), AND(NOT(wz), GE(MUL(gtdn, SUB(bhi, blo)), F(0)))));   /* high = low */
    PV *lo_new = AND(zc, NOT(armz));            /* bracket[low] = new point */
    PV **arrs[4] = {b, bf, bg, bgtd}, *news[4] = {t, fn, gn, gtdn};
    for (int a = 0; a < 4; a++) {
      PV **v = arrs[a];
      PV *ohi = WHERE(low, v[0], v[1]), *olo = WHERE(low, v[1], v[0]);
      PV *nhi = WHERE(hi_new, news[a], WHERE(swap, olo, ohi)), *nlo = WHERE(lo_new, news[a], olo);
      v[0] = WHERE(low, nhi, nlo);
      v[1] = WHERE(low, nlo, nhi);
    }
    low = WHERE(hi_new, NOT(LE(bf[0], bf[1])), low);
    inZ = AND(inZ, NOT(AND(lo_new, wz)));
  }
  /* the bracketing loop ran out: bracket [0, t] */
  b[0] = WHERE(inB, t_scalar_like(L, at, 0, DT_F64), b[0]);
  b[1] = WHERE(inB, t, b[1]);
  bf[0] = WHERE(inB, f, bf[0]);
  bf[1] = WHERE(inB, fn, bf[1]);
  bg[0] = WHERE(inB, g, bg[0]);
  bg[1] = WHERE(inB, gn, bg[1]);
  low = WHERE(inB, NOT(LE(bf[0], bf[1])), low);
  *t_out = WHERE(low, b[1], b[0]);
  *g_out = WHERE(low, bg[1], bg[0]);
  *n_out = nev;
  return WHERE(low, bf[1], bf[0]);
}
#undef AND
#undef OR
#undef NOT
#undef GE
#undef LE
#undef ABS

/* optimizer.step(closure) of LBFGS, PyTorch 1.13's algorithm with
 * line_search_fn=None: up to max_iter iterations, each moving the parameters
 * by t * d (d the L-BFGS direction from the last history_size pairs) and
 * re-evaluating the closure (inlined: its forward and backward are staged once
 * per iteration; with line_search_fn='strong_wolfe' the line search,
 * lb_strong_wolfe, replaces the fixed step and its re-evaluation). Trip counts are compile-time: an exit (PyTorch's `break`s on
 * the run-time values) sets a flag after which the remaining iterations change
 * nothing (selects). The history is history_size slots per vector, newest
 * last, shifted when a pair is added; unused slots are zero and contribute
 * nothing to the two-loop recursion. The state (d, t, old_dirs, old_stps, ro,
 * H_diag, prev_flat_grad, prev_loss, n_iter, func_evals) is kept under the
 * first parameter's name, as PyTorch keeps it, and saved with the weights. */
PV *lbfgs_step(L *L, PV *opt, PV *closure, Span at) {
  if (!L->T->fn) lower_error(L, at, "optimizer.step() must be called inside a compiled training function");
  staged_effect_check(L, at, "optimizer.step()");
  if (!L->T->zeroed) {
    L->T->zeroed = -1;
    L->T->unzeroed_step = at;
  }
  PV *groups = env_get(opt->attrs, "param_groups");
  if (groups->n != 1) lower_error(L, at, "LBFGS doesn't support per-parameter options (parameter groups)");
  PV *group = groups->items[0];
  PV *lsf = pv_dict_get(group, pv_str(L, "line_search_fn"));
  int wolfe = 0;
  if (lsf && lsf->k != PV_NONE) {
    if (lsf->k != PV_STR || strcmp(lsf->s, "strong_wolfe")) lower_error(L, at, "only 'strong_wolfe' is supported");
    wolfe = 1;
  }
  PV *lrv = pv_dict_get(group, pv_str(L, "lr"));
  if (lrv->k == PV_TENSOR || env_get(opt->attrs, "scheduler"))
    lower_error(L, at, "LBFGS with a learning rate that changes (set by hand or by an LR scheduler) is not supported");
  double lr = arg_num(L, at, lrv, "lr");
  int64_t max_iter = arg_int(L, at, pv_dict_get(group, pv_str(L, "max_iter")), "max_iter");
  PV *mev = pv_dict_get(group, pv_str(L, "max_eval"));
  int64_t max_eval = mev && mev->k != PV_NONE ? arg_int(L, at, mev, "max_eval") : max_iter * 5 / 4;
  double tol_grad = opt_hp(L, at, group, "tolerance_grad", 1e-7);
  double tol_change = opt_hp(L, at, group, "tolerance_change", 1e-9);
  int64_t H = arg_int(L, at, pv_dict_get(group, pv_str(L, "history_size")), "history_size");
  if (max_iter < 0 || max_iter > 1000) lower_error(L, at, "LBFGS max_iter must be between 0 and 1000 in ctc (each iteration is staged), not %lld", (long long)max_iter);
  if (H < 1 || H > 1000) lower_error(L, at, "LBFGS history_size must be between 1 and 1000 in ctc, not %lld", (long long)H);
  if (max_iter * H > 4000)
    lower_error(L, at, "LBFGS max_iter * history_size = %lld is too large for ctc, which stages every step of the "
                       "two-loop recursion (at most 4000: PyTorch's defaults, 20 * 100, give 9 MB of C)", (long long)(max_iter * H));
  if (wolfe && max_iter > 40)
    lower_error(L, at, "LBFGS(line_search_fn='strong_wolfe') stages its line search as %d closure evaluations per "
                       "iteration: max_iter=%lld is too large for ctc (at most 40)", LS_MAX + 1, (long long)max_iter);
  /* the parameters, flattened in group order */
  PV *ps = pv_dict_get(group, pv_str(L, "params"));
  LbParams P = {0};
  P.n = ps->n;
  P.p = arena_alloc(L->a, sizeof(PV *) * (size_t)P.n);
  P.off = arena_alloc(L->a, sizeof(int64_t) * (size_t)P.n);
  P.numel = arena_alloc(L->a, sizeof(int64_t) * (size_t)P.n);
  for (int i = 0; i < P.n; i++) {
    Slot *sl = ps->items[i]->t->slot;
    P.p[i] = param_tensor(L, sl);
    if (i == 0) P.dt = sl->type.dtype;
    if (sl->type.dtype != P.dt || !ir_dtype_is_float(P.dt))
      lower_error(L, at, "LBFGS needs parameters of one floating-point dtype");
    P.off[i] = P.N;
    P.numel[i] = ir_numel(&sl->type);
    P.N += P.numel[i];
  }
  DType dt = P.dt;
  const char *oname = lbfgs_oname(L, opt);
  const char *pre = arena_printf(L->a, "%s.%s", oname, L->T->prog->params.data[P.p[0]->t->slot->index].name);
  Type tn = {0}, t0 = {0}, tf = {0};
  tn.dtype = dt;
  tn.ndim = 1;
  tn.dims[0] = P.N;
  t0.dtype = dt;
  tf.dtype = DT_F32;
#define LST(name, type, init) state_tensor(L, at, arena_printf(L->a, "%s." name, pre), &(type), init)
  PV *s_fe = LST("func_evals", tf, 0), *s_niter = LST("n_iter", tf, 0), *s_d = LST("d", tn, 0), *s_t = LST("t", t0, 0);
  PV *s_h = LST("H_diag", t0, 1), *s_pg = LST("prev_flat_grad", tn, 0), *s_pl = LST("prev_loss", t0, 0);
  PV *s_nold = LST("num_old", tf, 0);
  PV **s_dirs = arena_alloc(L->a, sizeof(PV *) * (size_t)H * 3), **s_stps = s_dirs + H, **s_ro = s_dirs + 2 * H;
  for (int64_t j = 0; j < H; j++) {
    s_dirs[j] = state_tensor(L, at, arena_printf(L->a, "%s.old_dirs.%lld", pre, (long long)j), &tn, 0);
    s_stps[j] = state_tensor(L, at, arena_printf(L->a, "%s.old_stps.%lld", pre, (long long)j), &tn, 0);
    s_ro[j] = state_tensor(L, at, arena_printf(L->a, "%s.ro.%lld", pre, (long long)j), &t0, 0);
  }
#undef LST
  /* current values (t_wrap: later state_updates do not change them) */
#define CUR(s) t_wrap(L, t_val(L, at, (s)))
  PV *fe = CUR(s_fe), *niter = CUR(s_niter), *d = CUR(s_d), *t = CUR(s_t), *hd = CUR(s_h), *pg = CUR(s_pg);
  PV *pl = t_cast(L, at, CUR(s_pl), DT_F64), *nold = CUR(s_nold);
  PV **dirs = arena_alloc(L->a, sizeof(PV *) * (size_t)H * 4), **stps = dirs + H, **ro = dirs + 2 * H, **al = dirs + 3 * H;
  for (int64_t j = 0; j < H; j++) {
    dirs[j] = CUR(s_dirs[j]);
    stps[j] = CUR(s_stps[j]);
    ro[j] = CUR(s_ro[j]);
  }
  PV **x = arena_alloc(L->a, sizeof(PV *) * (size_t)P.n);
  for (int i = 0; i < P.n; i++) x[i] = CUR(P.p[i]);
#undef CUR
  /* evaluate initial f(x) and df/dx */
  PV *g, *orig = lb_eval(L, at, &P, x, closure, &g);
  PV *loss = loss64(L, at, orig);
  fe = ADD(fe, F(1));
  PV *evals = t_scalar_like(L, at, 1, DT_F32);
  PV *opt_cond = flag(L, at, t_compare(L, at, OP_LE, absmax(L, at, g), F(tol_grad)));
  PV *done = opt_cond;   /* the optimal condition: return at once */
  for (int64_t it = 1; it <= max_iter; it++) {
    PV *A = SUB(F(1), done), *Ab = on(L, at, A);
    niter = WHERE(Ab, ADD(niter, F(1)), niter);
    PV *first = flag(L, at, EQ(niter, F(1)));
    /* the L-BFGS memory update, where not the first iteration and ys > 1e-10 */
    PV *y = SUB(g, pg), *sv = MUL(d, t), *ys = dot(L, at, y, sv);
    PV *addb = on(L, at, MUL(MUL(A, SUB(F(1), first)), flag(L, at, GT(ys, F(1e-10)))));
    PV **nd = arena_alloc(L->a, sizeof(PV *) * (size_t)H * 3), **ns = nd + H, **nr = nd + 2 * H;
    for (int64_t j = 0; j < H; j++) {
      nd[j] = WHERE(addb, j + 1 < H ? dirs[j + 1] : y, dirs[j]);
      ns[j] = WHERE(addb, j + 1 < H ? stps[j + 1] : sv, stps[j]);
      nr[j] = WHERE(addb, j + 1 < H ? ro[j + 1] : DIV(F(1), ys), ro[j]);
    }
    for (int64_t j = 0; j < H; j++) {
      dirs[j] = nd[j];
      stps[j] = ns[j];
      ro[j] = nr[j];
    }
    hd = WHERE(addb, DIV(ys, dot(L, at, y, y)), hd);
    PV *firstb = on(L, at, MUL(A, first));
    hd = WHERE(firstb, F(1), hd);
    nold = WHERE(addb, t_minmax(L, at, IR_MIN, ADD(nold, F(1)), F((double)H)), nold);
    /* the two-loop recursion (newest to oldest, then back) */
    PV *q = t_unary(L, at, IR_NEG, g);
    for (int64_t j = H - 1; j >= 0; j--) {
      al[j] = MUL(dot(L, at, stps[j], q), ro[j]);
      q = ADD(q, MUL(dirs[j], t_unary(L, at, IR_NEG, al[j])));
    }
    PV *r = MUL(q, hd);
    for (int64_t j = 0; j < H; j++) {
      PV *be = MUL(dot(L, at, dirs[j], r), ro[j]);
      r = ADD(r, MUL(stps[j], SUB(al[j], be)));
    }
    d = WHERE(Ab, WHERE(on(L, at, first), t_unary(L, at, IR_NEG, g), r), d);
    pg = WHERE(Ab, g, pg);
    pl = WHERE(Ab, loss, pl);
    /* the step length: min(1, 1 / |g|_1) * lr on the very first iteration, then lr */
    PV *inv = DIV(F(1), t_reduce(L, at, IR_REDUCE_SUM, t_unary(L, at, IR_ABS, g), NULL, 0, 0, 0));
    PV *t_first = MUL(WHERE(LT(inv, F(1)), inv, F(1)), F(lr));
    t = WHERE(Ab, WHERE(on(L, at, first), t_first, F(lr)), t);
    /* directional derivative below tolerance: stop before moving */
    PV *gtd = dot(L, at, g, d);
    PV *brk = flag(L, at, GT(gtd, F(-tol_change)));
    PV *A2 = MUL(A, SUB(F(1), brk)), *A2b = on(L, at, A2);
    done = f_or(L, at, done, MUL(A, brk));
    if (wolfe) {
      /* the line search from x along d: its step, loss and gradient (PyTorch
       * evaluates it in the last iteration too) */
      PV *lg, *lt, *ln;
      PV *lf = lb_strong_wolfe(L, at, &P, x, closure, f64s(L, at, t), d, loss, g, f64s(L, at, gtd), tol_change, &lg,
                               &lt, &ln);
      t = WHERE(A2b, as_dt(L, at, lt, dt), t);
      loss = WHERE(A2b, lf, loss);
      g = WHERE(A2b, lg, g);
      opt_cond = flag(L, at, t_compare(L, at, OP_LE, absmax(L, at, g), F(tol_grad)));
      evals = ADD(evals, MUL(A2, ln));
      fe = ADD(fe, MUL(A2, ln));
    }
    for (int i = 0; i < P.n; i++) {
      Type pt = P.p[i]->t->type;
      PV *di = t_reshape(L, at, t_slice(L, at, d, 0, P.off[i], P.off[i] + P.numel[i], 1), pt.dims, pt.ndim);
      x[i] = WHERE(A2b, ADD(x[i], MUL(di, t)), x[i]);
    }
    if (!wolfe && it != max_iter) {
      /* re-evaluate (not in the last iteration, as PyTorch) */
      PV *ng, *nl = loss64(L, at, lb_eval(L, at, &P, x, closure, &ng));
      loss = WHERE(A2b, nl, loss);
      g = WHERE(A2b, ng, g);
      opt_cond = flag(L, at, t_compare(L, at, OP_LE, absmax(L, at, g), F(tol_grad)));
      evals = ADD(evals, A2);
      fe = ADD(fe, A2);
    }
    /* the other exits: max_eval, optimality, lack of progress */
    PV *c = f_or(L, at, flag(L, at, t_compare(L, at, OP_GE, evals, F((double)max_eval))), opt_cond);
    c = f_or(L, at, c, flag(L, at, t_compare(L, at, OP_LE, absmax(L, at, MUL(d, t)), F(tol_change))));
    c = f_or(L, at, c, flag(L, at, LT(t_unary(L, at, IR_ABS, SUB(loss, pl)), F(tol_change))));
    done = f_or(L, at, done, MUL(A2, c));
  }
  /* write back the parameters and the state */
  for (int i = 0; i < P.n; i++) state_update(L, at, P.p[i], x[i]);
  state_update(L, at, s_fe, fe);
  state_update(L, at, s_niter, niter);
  state_update(L, at, s_d, d);
  state_update(L, at, s_t, as_dt(L, at, t, dt));
  state_update(L, at, s_h, as_dt(L, at, hd, dt));
  state_update(L, at, s_pg, pg);
  state_update(L, at, s_pl, as_dt(L, at, pl, dt));
  state_update(L, at, s_nold, nold);
  for (int64_t j = 0; j < H; j++) {
    state_update(L, at, s_dirs[j], dirs[j]);
    state_update(L, at, s_stps[j], stps[j]);
    state_update(L, at, s_ro[j], ro[j]);
  }
  L->T->stepped = 1;
  return orig;
}
