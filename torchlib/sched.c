/* sched.c - torch.optim.lr_scheduler: the SCHED rows of optim.def (the init and
 * rule of each scheduler), their construction, step() and the entries
 * "<scheduler>_step" that `./net train` runs after every epoch.
 *
 * A scheduler makes its optimizer read the learning rate from the state tensor
 * "<optimizer>.lr"; step() advances "<scheduler>.last_epoch" (and the scheduler's
 * other state: CosineAnnealingWarmRestarts' T_cur and T_i, ReduceLROnPlateau's
 * best, num_bad_epochs and cooldown_counter, the cycled momentum) and writes the
 * new learning rate. All of it is state saved with the weights.
 *
 * PyTorch 1.13's step() computes the learning rate recursively (get_lr() from the
 * group's current lr). A scheduler alone on its optimizer gives the same values as
 * its closed form (_get_closed_form_lr), which ctc uses then (no f32 rounding
 * accumulates over steps). With several schedulers on one optimizer
 * (ChainedScheduler, SequentialLR, or several stepped by hand) each one applies
 * its recursive rule to the learning rate the others left, as in PyTorch; at a
 * SequentialLR milestone the next scheduler's step(0) uses the closed form where
 * it has one. Compile-time functions of the epoch (LambdaLR's lr_lambda,
 * CyclicLR's scale_fn) are called with the epoch as a 0-d int64 tensor: their
 * arithmetic and `if`s on it are staged (selects). */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "torch_int.h"

#define ADD(a, b) t_binary(L, at, OP_ADD, (a), (b))
#define SUB(a, b) t_binary(L, at, OP_SUB, (a), (b))
#define MUL(a, b) t_binary(L, at, OP_MUL, (a), (b))
#define DIV(a, b) t_binary(L, at, OP_DIV, (a), (b))
#define POW(a, b) t_binary(L, at, OP_POW, (a), (b))
#define CMP(op, a, b) t_compare(L, at, (op), (a), (b))
#define WHERE(c, a, b) t_where(L, at, (c), (a), (b))
#define FLOOR(a) t_unary(L, at, IR_FLOOR, (a))
#define F(x) pv_float(L, (x))

/* ---- helpers ------------------------------------------------------------- */

static double num(PV *s, const char *k) { return pv_num(env_get(s->attrs, k)); }
static void set_num(L *L, PV *s, const char *k, double v) { env_set(L, s->attrs, k, pv_float(L, v)); }
static double base_lr(PV *s) { return num(s, "base_lr"); }
static PV *opt_of(PV *s) { return env_get(s->attrs, "optimizer"); }
static int is_composite(int bi) { return bi == BI_S_CHAINEDSCHEDULER || bi == BI_S_SEQUENTIALLR; }

/* Rows whose recursive get_lr() differs in form from their closed form: the
 * rest compute their learning rate from the epoch alone (or from the step's own
 * state), so one call of their rule serves both. */
static int two_forms(int bi) {
  return bi == BI_S_STEPLR || bi == BI_S_MULTISTEPLR || bi == BI_S_CONSTANTLR || bi == BI_S_LINEARLR ||
         bi == BI_S_EXPONENTIALLR || bi == BI_S_POLYNOMIALLR || bi == BI_S_COSINEANNEALINGLR ||
         bi == BI_S_MULTIPLICATIVELR;
}

/* a number or one-element tensor as an f32 (or f64) 0-d tensor */
static PV *scalar_as(L *L, Span at, PV *v, DType dt, const char *what) {
  if (v->k != PV_TENSOR) return t_scalar_like(L, at, arg_num(L, at, v, what), dt);
  Type t = t_type(v);
  int64_t n = 1;
  for (int d = 0; d < t.ndim; d++) n *= t.dims[d];
  if (n != 1) lower_error(L, at, "%s must be a number or a one-element tensor, not shape %s", what, shape_str(L, &t));
  if (t.ndim) v = t_reshape(L, at, v, NULL, 0);
  return t.dtype == dt ? v : t_cast(L, at, v, dt);
}
static PV *f32(L *L, Span at, PV *v) { return scalar_as(L, at, v, DT_F32, "a learning rate"); }

static PV *cur(L *L, Span at, PV *t) { return t_wrap(L, t_val(L, at, t)); }

static PV *state(L *L, Span at, const char *sname, const char *what, DType dt, double init) {
  Type st = {0};
  st.dtype = dt;
  return state_tensor(L, at, arena_printf(L->a, "%s.%s", sname, what), &st, init);
}

/* state tensor t becomes v where the step happens (mask: SequentialLR's selection) */
static void swrite(L *L, Span at, PV *mask, PV *t, PV *v) {
  v = scalar_as(L, at, v, t_type(t).dtype, "a scheduler state");
  if (mask) v = WHERE(mask, v, cur(L, at, t));
  state_update(L, at, t, v);
}

/* The name of a scheduler's state: its global name, or for a scheduler built
 * inside a ChainedScheduler/SequentialLR call "<parent>._schedulers.<i>". */
static const char *sched_name(L *L, PV *s) {
  const char *g = global_name(L, s, NULL);
  if (g) return g;
  PV *parent = env_get(s->attrs, "parent");
  if (parent) return arena_printf(L->a, "%s._schedulers.%d", sched_name(L, parent), (int)num(s, "index"));
  return "scheduler";
}

static int ngroups(PV *opt) { return env_get(opt->attrs, "param_groups")->n; }

/* The group whose learning rate init/rule compute next: its base_lr (PyTorch's
 * base_lrs[i]), its lr before the scheduler (prev_lr) and its index gi. */
static void focus(L *L, PV *s, int gi) {
  env_set(L, s->attrs, "base_lr", env_get(s->attrs, "base_lrs")->items[gi]);
  env_set(L, s->attrs, "prev_lr", env_get(s->attrs, "prev_lrs")->items[gi]);
  set_num(L, s, "gi", gi);
}
static int gi_of(PV *s) { return (int)num(s, "gi"); }

/* An argument PyTorch takes per parameter group (_format_param: a number, or a
 * list with one per group) as the list of the groups' values. */
static PV *group_values(L *L, Span at, PV *opt, PV *v, const char *what) {
  int ng = ngroups(opt);
  PV *l = pv_list(L, NULL, 0);
  if (pv_is_seq(v) && v->n != ng) lower_error(L, at, "expected %d values for %s, got %d", ng, what, v->n);
  for (int i = 0; i < ng; i++) pv_list_append(L, l, pv_float(L, arg_num(L, at, pv_is_seq(v) ? v->items[i] : v, what)));
  return l;
}
/* the group's value of a list attribute set by group_values */
static double gnum(PV *s, const char *k, int gi) { return pv_num(env_get(s->attrs, k)->items[gi]); }

/* one value for all groups (CyclicLR's/OneCycleLR's cycled momentum: one state tensor) */
static double same_for_groups(L *L, Span at, PV *opt, PV *v, const char *what) {
  PV *l = group_values(L, at, opt, v, what);
  for (int i = 1; i < l->n; i++)
    if (pv_num(l->items[i]) != pv_num(l->items[0]))
      lower_error(L, at, "a different %s per parameter group is not supported (ctc cycles one momentum)", what);
  return pv_num(l->items[0]);
}

/* The user's function of the epoch (LambdaLR's lr_lambda ...) called on n (f32
 * scalar tensor) passed as PyTorch passes it, an int: a 0-d int64 tensor. */
static PV *call_epoch_fn(L *L, Span at, PV *fn, PV *n) {
  PV *arg = t_cast(L, at, n, DT_I64);
  return call_value(L, at, fn, &arg, 1, NULL, NULL, 0);
}

/* the function argument of LambdaLR/MultiplicativeLR: one for all groups, or a
 * list with one per group; stored as the list "fns" */
static void lambda_arg(L *L, Span at, PV *s, PV *v) {
  int ng = ngroups(opt_of(s));
  if (pv_is_seq(v) && v->n != ng) lower_error(L, at, "Expected %d lr_lambdas, but got %d", ng, v->n);
  PV *l = pv_list(L, NULL, 0);
  for (int i = 0; i < ng; i++) pv_list_append(L, l, pv_is_seq(v) ? v->items[i] : v);
  env_set(L, s->attrs, "fns", l);
}
static PV *group_fn(PV *s, int gi) { return env_get(s->attrs, "fns")->items[gi]; }

static int64_t pos_int(L *L, Span at, PV *v, int64_t dflt, const char *what) {
  int64_t x = v && v->k != PV_NONE ? arg_int(L, at, v, what) : dflt;
  if (x <= 0) lower_error(L, at, "%s must be positive, got %lld", what, (long long)x);
  return x;
}
static double opt_num(L *L, Span at, PV *v, double dflt, const char *what) {
  return v && v->k != PV_NONE ? arg_num(L, at, v, what) : dflt;
}

/* n mod m for an f32 scalar tensor of integers (m > 0): n - m * floor(n / m) */
static PV *fmod_pos(L *L, Span at, PV *n, double m) { return SUB(n, MUL(F(m), FLOOR(DIV(n, F(m))))); }

/* ---- the rules of optim.def's SCHED rows ----------------------------------
 * init(L, at, s, a) checks the constructor's arguments (a[] in the order of the
 * row's spec; a[0] the optimizer) into attributes of s and returns the learning
 * rate after construction when the group's lr is the base lr. rule(L, at, st)
 * is the learning rate after step st->n (see SchedStep). */

double sched_steplr_init(L *L, Span at, PV *s, PV **a) {
  set_num(L, s, "step_size", (double)pos_int(L, at, a[1], 0, "step_size"));
  set_num(L, s, "gamma", opt_num(L, at, a[2], 0.1, "gamma"));
  return base_lr(s);
}
PV *sched_steplr(L *L, Span at, SchedStep *st) {
  double gamma = num(st->s, "gamma"), step = num(st->s, "step_size");
  if (st->closed) return MUL(F(base_lr(st->s)), POW(F(gamma), FLOOR(DIV(st->n, F(step)))));
  PV *r = WHERE(CMP(OP_EQ, fmod_pos(L, at, st->n, step), F(0)), MUL(st->lr, F(gamma)), st->lr);
  return WHERE(CMP(OP_EQ, st->n, F(0)), st->lr, r);
}

double sched_multisteplr_init(L *L, Span at, PV *s, PV **a) {
  PV **ms;
  int n = iter_items(L, at, a[1], &ms), at0 = 0;
  PV *l = pv_list(L, NULL, 0);
  for (int i = 0; i < n; i++) {
    int64_t m = arg_int(L, at, ms[i], "milestone");
    if (m < 0) lower_error(L, at, "MultiStepLR milestones must not be negative, got %lld", (long long)m);
    at0 += m == 0;
    pv_list_append(L, l, pv_int(L, m));
  }
  env_set(L, s->attrs, "milestones", l);
  set_num(L, s, "gamma", opt_num(L, at, a[2], 0.1, "gamma"));
  return base_lr(s) * pow(num(s, "gamma"), at0);
}
PV *sched_multisteplr(L *L, Span at, SchedStep *st) {
  double gamma = num(st->s, "gamma");
  PV *ms = env_get(st->s->attrs, "milestones"), *k = F(0);
  /* closed: milestones passed (bisect_right); recursive: milestones at this epoch (a Counter) */
  for (int i = 0; i < ms->n; i++)
    k = ADD(k, t_cast(L, at, CMP(st->closed ? OP_GE : OP_EQ, st->n, F((double)ms->items[i]->i)), DT_F32));
  return MUL(st->closed ? F(base_lr(st->s)) : st->lr, POW(F(gamma), k));
}

double sched_constantlr_init(L *L, Span at, PV *s, PV **a) {
  double f = opt_num(L, at, a[1], 1.0 / 3, "factor");
  if (f > 1.0 || f < 0) lower_error(L, at, "Constant multiplicative factor expected to be between 0 and 1.");
  if (f == 0) lower_error(L, at, "ConstantLR with factor=0 divides by zero at total_iters in PyTorch 1.13; not supported");
  set_num(L, s, "factor", f);
  set_num(L, s, "total_iters", (double)pos_int(L, at, a[2], 5, "total_iters"));
  return base_lr(s) * f;
}
PV *sched_constantlr(L *L, Span at, SchedStep *st) {
  double f = num(st->s, "factor"), T = num(st->s, "total_iters");
  if (st->closed)
    return MUL(F(base_lr(st->s)), ADD(F(f), MUL(t_cast(L, at, CMP(OP_GE, st->n, F(T)), DT_F32), F(1 - f))));
  PV *r = WHERE(CMP(OP_EQ, st->n, F(T)), MUL(st->lr, F(1.0 / f)), st->lr);
  return WHERE(CMP(OP_EQ, st->n, F(0)), MUL(st->lr, F(f)), r);
}

double sched_linearlr_init(L *L, Span at, PV *s, PV **a) {
  double sf = opt_num(L, at, a[1], 1.0 / 3, "start_factor"), ef = opt_num(L, at, a[2], 1.0, "end_factor");
  if (sf > 1.0 || sf < 0) lower_error(L, at, "Starting multiplicative factor expected to be between 0 and 1.");
  if (ef > 1.0 || ef < 0) lower_error(L, at, "Ending multiplicative factor expected to be between 0 and 1.");
  if (sf == 0) lower_error(L, at, "LinearLR with start_factor=0 divides by zero in PyTorch 1.13; not supported");
  set_num(L, s, "start_factor", sf);
  set_num(L, s, "end_factor", ef);
  set_num(L, s, "total_iters", (double)pos_int(L, at, a[3], 5, "total_iters"));
  return base_lr(s) * sf;
}
PV *sched_linearlr(L *L, Span at, SchedStep *st) {
  double sf = num(st->s, "start_factor"), ef = num(st->s, "end_factor"), T = num(st->s, "total_iters");
  PV *n = st->n;
  if (st->closed) {
    PV *m = WHERE(CMP(OP_LT, n, F(T)), n, F(T));
    return MUL(F(base_lr(st->s)), ADD(F(sf), MUL(m, F((ef - sf) / T))));
  }
  PV *den = ADD(F(T * sf), MUL(SUB(n, F(1)), F(ef - sf)));
  PV *r = WHERE(CMP(OP_GT, n, F(T)), st->lr, MUL(st->lr, ADD(F(1), DIV(F(ef - sf), den))));
  return WHERE(CMP(OP_EQ, n, F(0)), MUL(st->lr, F(sf)), r);
}

double sched_exponentiallr_init(L *L, Span at, PV *s, PV **a) {
  set_num(L, s, "gamma", arg_num(L, at, a[1], "gamma"));
  return base_lr(s);
}
PV *sched_exponentiallr(L *L, Span at, SchedStep *st) {
  double gamma = num(st->s, "gamma");
  if (st->closed) return MUL(F(base_lr(st->s)), POW(F(gamma), st->n));
  return WHERE(CMP(OP_EQ, st->n, F(0)), st->lr, MUL(st->lr, F(gamma)));
}

double sched_polynomiallr_init(L *L, Span at, PV *s, PV **a) {
  set_num(L, s, "total_iters", (double)pos_int(L, at, a[1], 5, "total_iters"));
  set_num(L, s, "power", opt_num(L, at, a[2], 1.0, "power"));
  return base_lr(s);
}
PV *sched_polynomiallr(L *L, Span at, SchedStep *st) {
  double T = num(st->s, "total_iters"), p = num(st->s, "power");
  PV *n = st->n;
  if (st->closed) {
    PV *m = WHERE(CMP(OP_LT, n, F(T)), n, F(T));
    return MUL(F(base_lr(st->s)), POW(SUB(F(1), DIV(m, F(T))), F(p)));
  }
  PV *ratio = DIV(SUB(F(1), DIV(n, F(T))), SUB(F(1), DIV(SUB(n, F(1)), F(T))));
  PV *r = WHERE(CMP(OP_GT, n, F(T)), st->lr, MUL(st->lr, POW(ratio, F(p))));
  return WHERE(CMP(OP_EQ, n, F(0)), st->lr, r);
}

double sched_cosineannealinglr_init(L *L, Span at, PV *s, PV **a) {
  if (arg_num(L, at, a[1], "T_max") <= 0) lower_error(L, at, "T_max must be positive");
  set_num(L, s, "T_max", arg_num(L, at, a[1], "T_max"));
  set_num(L, s, "eta_min", opt_num(L, at, a[2], 0, "eta_min"));
  return base_lr(s);
}
PV *sched_cosineannealinglr(L *L, Span at, SchedStep *st) {
  double T = num(st->s, "T_max"), emin = num(st->s, "eta_min"), base = base_lr(st->s);
  PV *n = st->n;
  if (st->closed) {
    PV *c = t_unary(L, at, IR_COS, MUL(n, F(M_PI / T)));
    return ADD(F(emin), MUL(F((base - emin) / 2), ADD(F(1), c)));
  }
  PV *cn = t_unary(L, at, IR_COS, MUL(n, F(M_PI / T)));
  PV *cp = t_unary(L, at, IR_COS, MUL(SUB(n, F(1)), F(M_PI / T)));
  PV *r = ADD(MUL(DIV(ADD(F(1), cn), ADD(F(1), cp)), SUB(st->lr, F(emin))), F(emin));
  /* (last_epoch - 1 - T_max) % (2 T_max) == 0: the step after the minimum */
  PV *restart = CMP(OP_EQ, fmod_pos(L, at, SUB(n, F(1 + T)), 2 * T), F(0));
  r = WHERE(restart, ADD(st->lr, F((base - emin) * (1 - cos(M_PI / T)) / 2)), r);
  return WHERE(CMP(OP_EQ, n, F(0)), st->lr, r);
}

double sched_lambdalr_init(L *L, Span at, PV *s, PV **a) {
  lambda_arg(L, at, s, a[1]);
  PV *zero = pv_int(L, 0);
  PV *f0 = call_value(L, at, group_fn(s, gi_of(s)), &zero, 1, NULL, NULL, 0);
  return base_lr(s) * arg_num(L, at, f0, "lr_lambda(0)");
}
PV *sched_lambdalr(L *L, Span at, SchedStep *st) {
  PV *f = call_epoch_fn(L, at, group_fn(st->s, st->gi), st->n);
  return MUL(F(base_lr(st->s)), f32(L, at, f));
}

double sched_multiplicativelr_init(L *L, Span at, PV *s, PV **a) {
  lambda_arg(L, at, s, a[1]);
  return base_lr(s);
}
PV *sched_multiplicativelr(L *L, Span at, SchedStep *st) {
  if (st->closed) return NULL; /* PyTorch has no closed form: step(0) keeps the lr */
  PV *f = call_epoch_fn(L, at, group_fn(st->s, st->gi), st->n);
  return WHERE(CMP(OP_GT, st->n, F(0)), MUL(st->lr, f32(L, at, f)), st->lr);
}

double sched_cosineannealingwarmrestarts_init(L *L, Span at, PV *s, PV **a) {
  if (a[1]->k != PV_INT || a[1]->i <= 0)
    lower_error(L, at, "Expected positive integer T_0, but got %s", pv_repr(L, at, a[1]));
  if (a[2] && (a[2]->k != PV_INT || a[2]->i < 1))
    lower_error(L, at, "Expected integer T_mult >= 1, but got %s", pv_repr(L, at, a[2]));
  set_num(L, s, "T_0", (double)a[1]->i);
  set_num(L, s, "T_mult", a[2] ? (double)a[2]->i : 1);
  set_num(L, s, "eta_min", opt_num(L, at, a[3], 0, "eta_min"));
  return base_lr(s);
}
/* step() without an epoch: T_cur += 1, and at T_i a restart (T_cur -= T_i,
 * T_i *= T_mult), kept as state tensors; step(0) restarts from T_0. */
PV *sched_cosineannealingwarmrestarts(L *L, Span at, SchedStep *st) {
  double T0 = num(st->s, "T_0"), Tm = num(st->s, "T_mult"), emin = num(st->s, "eta_min");
  PV *tc_t = state(L, at, st->sname, "T_cur", DT_F32, 0), *ti_t = state(L, at, st->sname, "T_i", DT_F32, T0);
  PV *ti = cur(L, at, ti_t), *tc = cur(L, at, tc_t);
  if (st->gi == 0) {   /* the first group advances the state, the others read it */
    if (st->epoch) {
      /* step(epoch): PyTorch's closed form of T_cur and T_i (in doubles) */
      PV *e = t_cast(L, at, st->epoch, DT_F64), *nn;
      if (Tm == 1) {
        tc = SUB(e, MUL(F(T0), FLOOR(DIV(e, F(T0)))));
        ti = t_scalar_like(L, at, T0, DT_F64);
      } else {
        nn = FLOOR(DIV(t_unary(L, at, IR_LOG, ADD(MUL(DIV(e, F(T0)), F(Tm - 1)), F(1))), F(log(Tm))));
        PV *pw = POW(F(Tm), nn);
        PV *below = CMP(OP_LT, e, F(T0));
        tc = WHERE(below, e, SUB(e, DIV(MUL(F(T0), SUB(pw, F(1))), F(Tm - 1))));
        ti = WHERE(below, F(T0), MUL(F(T0), pw));
      }
      tc = t_cast(L, at, tc, DT_F32);
      ti = t_cast(L, at, ti, DT_F32);
    } else {
      tc = ADD(tc, F(1));
      PV *wrap = CMP(OP_GE, tc, ti);
      tc = WHERE(wrap, SUB(tc, ti), tc);
      ti = WHERE(wrap, MUL(ti, F(Tm)), ti);
    }
    if (st->reset) {
      tc = WHERE(st->reset, F(0), tc);
      ti = WHERE(st->reset, F(T0), ti);
    }
    swrite(L, at, st->mask, tc_t, tc);
    swrite(L, at, st->mask, ti_t, ti);
  }
  PV *c = t_unary(L, at, IR_COS, DIV(MUL(F(M_PI), tc), ti));
  return ADD(F(emin), DIV(MUL(F(base_lr(st->s) - emin), ADD(F(1), c)), F(2)));
}

/* CyclicLR a[]: 1 base_lr 2 max_lr 3 step_size_up 4 step_size_down 5 mode 6 gamma 7 scale_fn
 * 8 scale_mode 9 cycle_momentum 10 base_momentum 11 max_momentum */
double sched_cycliclr_init(L *L, Span at, PV *s, PV **a) {
  PV *opt = opt_of(s);
  PV *bases = group_values(L, at, opt, a[1], "base_lr"), *maxs = group_values(L, at, opt, a[2], "max_lr");
  double base = pv_num(bases->items[gi_of(s)]);
  double up = opt_num(L, at, a[3], 2000, "step_size_up");
  double down = a[4] && a[4]->k != PV_NONE ? arg_num(L, at, a[4], "step_size_down") : up;
  if (!(up + down > 0) || up < 0 || down < 0) lower_error(L, at, "CyclicLR step sizes must be positive");
  const char *mode = "triangular";
  if (a[5]) {
    if (a[5]->k != PV_STR) lower_error(L, at, "mode must be a string");
    mode = a[5]->s;
  }
  PV *fn = a[7] && a[7]->k != PV_NONE ? a[7] : NULL;
  int m = !strcmp(mode, "triangular") ? 0 : !strcmp(mode, "triangular2") ? 1 : !strcmp(mode, "exp_range") ? 2 : -1;
  if (m < 0 && !fn) lower_error(L, at, "mode is invalid and scale_fn is None");
  int iterations = m == 2;
  if (fn) {
    const char *sm = a[8] ? (a[8]->k == PV_STR ? a[8]->s : "") : "cycle";
    if (strcmp(sm, "cycle") && strcmp(sm, "iterations")) lower_error(L, at, "scale_mode must be 'cycle' or 'iterations'");
    iterations = !strcmp(sm, "iterations");
    env_set(L, s->attrs, "fn", fn);
  }
  env_set(L, s->attrs, "cyc_base", bases);
  env_set(L, s->attrs, "cyc_max", maxs);
  set_num(L, s, "total", up + down);
  set_num(L, s, "ratio", up / (up + down));
  set_num(L, s, "mode", m);
  set_num(L, s, "iterations", iterations);
  set_num(L, s, "gamma", opt_num(L, at, a[6], 1.0, "gamma"));
  if (!a[9] || arg_bool(L, at, a[9], "cycle_momentum")) {
    if (!pv_dict_get(env_get(opt->attrs, "defaults"), pv_str(L, "momentum")))
      lower_error(L, at, "optimizer must support momentum with `cycle_momentum` option enabled");
    if (opt->cls->bi != BI_O_SGD)
      lower_error(L, at, "CyclicLR's cycle_momentum is supported with SGD; pass cycle_momentum=False");
    set_num(L, s, "base_momentum", a[10] ? same_for_groups(L, at, opt, a[10], "base_momentum") : 0.8);
    set_num(L, s, "max_momentum", a[11] ? same_for_groups(L, at, opt, a[11], "max_momentum") : 0.9);
    env_set(L, opt->attrs, "mom0", env_get(s->attrs, "max_momentum"));
    env_set(L, s->attrs, "cycle_momentum", pv_bool(L, 1));
  }
  /* PyTorch sets the groups' lr to base_lr, which becomes their initial_lr
   * unless an earlier scheduler set it; the initial step gives initial_lr */
  PV *init = env_get(opt->attrs, "initial_lrs");
  if (init->items[gi_of(s)]->k == PV_NONE) init->items[gi_of(s)] = pv_float(L, base);
  return pv_num(init->items[gi_of(s)]);
}
PV *sched_cycliclr(L *L, Span at, SchedStep *st) {
  PV *s = st->s, *n = st->n;
  double total = num(s, "total"), ratio = num(s, "ratio"), base = gnum(s, "cyc_base", st->gi);
  double mx = gnum(s, "cyc_max", st->gi);
  PV *c = FLOOR(DIV(n, F(total)));            /* cycle - 1 */
  PV *x = DIV(SUB(n, MUL(c, F(total))), F(total)); /* 1 + n / total - cycle */
  PV *sf = WHERE(CMP(OP_LE, x, F(ratio)), DIV(x, F(ratio)), DIV(SUB(x, F(1)), F(ratio - 1)));
  PV *scale, *fn = env_get(s->attrs, "fn");
  int iterations = (int)num(s, "iterations");
  if (fn) scale = f32(L, at, call_epoch_fn(L, at, fn, iterations ? n : ADD(c, F(1))));
  else if (num(s, "mode") == 1) scale = DIV(F(1), POW(F(2), c));
  else if (num(s, "mode") == 2) scale = POW(F(num(s, "gamma")), n);
  else scale = F(1);
  if (env_get(s->attrs, "cycle_momentum") && st->gi == 0) {
    double bm = num(s, "base_momentum"), xm = num(s, "max_momentum");
    PV *m = state(L, at, st->oname, "momentum", DT_F32, xm);
    swrite(L, at, st->mask, m, SUB(F(xm), MUL(MUL(F(xm - bm), sf), scale)));
  }
  return ADD(F(base), MUL(MUL(F(mx - base), sf), scale));
}

/* OneCycleLR's phases: (end step, start value, end value) for lr or momentum. */
static int onecycle_phases(L *L, PV *s, int mom, double end[3], double a[3], double b[3]) {
  double T = num(s, "total_steps"), pct = num(s, "pct_start"), init = num(s, "initial_lr"), mx = num(s, "max_lr");
  double mn = num(s, "min_lr"), bm = num(s, "base_momentum"), xm = num(s, "max_momentum");
  if (num(s, "three_phase")) {
    end[0] = pct * T - 1; end[1] = 2 * pct * T - 2; end[2] = T - 1;
    a[0] = mom ? xm : init; b[0] = mom ? bm : mx;
    a[1] = mom ? bm : mx;   b[1] = mom ? xm : init;
    a[2] = mom ? xm : init; b[2] = mom ? xm : mn;
    return 3;
  }
  end[0] = pct * T - 1; end[1] = T - 1;
  a[0] = mom ? xm : init; b[0] = mom ? bm : mx;
  a[1] = mom ? bm : mx;   b[1] = mom ? xm : mn;
  return 2;
}

/* OneCycleLR's value at step n (an f32 scalar tensor), annealing phase by phase. */
static PV *onecycle_value(L *L, Span at, PV *s, PV *n, int mom) {
  double end[3], a[3], b[3];
  int np = onecycle_phases(L, s, mom, end, a, b);
  int cosine = (int)num(s, "cos");
  PV *r = NULL;
  for (int i = np - 1; i >= 0; i--) {
    double start = i ? end[i - 1] : 0;
    PV *pct = DIV(SUB(n, F(start)), F(end[i] - start));
    PV *v = cosine ? ADD(F(b[i]), MUL(F((a[i] - b[i]) / 2), ADD(t_unary(L, at, IR_COS, MUL(pct, F(M_PI))), F(1))))
                   : ADD(F(a[i]), MUL(pct, F(b[i] - a[i])));
    r = r ? WHERE(CMP(OP_LE, n, F(end[i])), v, r) : v;
  }
  return r;
}

double sched_onecyclelr_init(L *L, Span at, PV *s, PV **a) {
  /* a[]: 1 max_lr 2 total_steps 3 epochs 4 steps_per_epoch 5 pct_start 6 anneal_strategy
   * 7 cycle_momentum 8 base_momentum 9 max_momentum 10 div_factor 11 final_div_factor 12 three_phase */
  PV *opt = a[0];
  PV *maxs = group_values(L, at, opt, a[1], "max_lr");
  env_set(L, s->attrs, "max_lrs", maxs);
  double mx = pv_num(maxs->items[gi_of(s)]);
  int64_t total;
  if (a[2] && a[2]->k != PV_NONE) total = arg_int(L, at, a[2], "total_steps");
  else if (a[3] && a[4] && a[3]->k != PV_NONE && a[4]->k != PV_NONE)
    total = arg_int(L, at, a[3], "epochs") * arg_int(L, at, a[4], "steps_per_epoch");
  else lower_error(L, at, "OneCycleLR needs total_steps, or epochs and steps_per_epoch");
  if (total <= 0) lower_error(L, at, "OneCycleLR total_steps must be positive");
  double pct = a[5] ? arg_num(L, at, a[5], "pct_start") : 0.3;
  if (pct < 0 || pct > 1) lower_error(L, at, "pct_start must be between 0 and 1");
  int cosine = 1;
  if (a[6]) {
    if (a[6]->k != PV_STR || (strcmp(a[6]->s, "cos") && strcmp(a[6]->s, "linear")))
      lower_error(L, at, "anneal_strategy must be 'cos' or 'linear'");
    cosine = !strcmp(a[6]->s, "cos");
  }
  double div = a[10] ? arg_num(L, at, a[10], "div_factor") : 25, fdiv = a[11] ? arg_num(L, at, a[11], "final_div_factor") : 1e4;
  set_num(L, s, "max_lr", mx);
  set_num(L, s, "initial_lr", mx / div);
  set_num(L, s, "min_lr", mx / div / fdiv);
  set_num(L, s, "div", div);
  set_num(L, s, "fdiv", fdiv);
  set_num(L, s, "total_steps", (double)total);
  set_num(L, s, "pct_start", pct);
  set_num(L, s, "cos", cosine);
  set_num(L, s, "three_phase", a[12] ? arg_bool(L, at, a[12], "three_phase") : 0);
  set_num(L, s, "base_momentum", a[8] ? arg_num(L, at, a[8], "base_momentum") : 0.85);
  set_num(L, s, "max_momentum", a[9] ? arg_num(L, at, a[9], "max_momentum") : 0.95);
  if (!a[7] || arg_bool(L, at, a[7], "cycle_momentum")) {
    int ob = opt->cls->bi;
    if (ob != BI_O_SGD && ob != BI_O_ADAM && ob != BI_O_ADAMW)
      lower_error(L, at, "OneCycleLR's cycle_momentum is supported with SGD, Adam and AdamW; pass cycle_momentum=False");
    env_set(L, opt->attrs, "mom0", env_get(s->attrs, "max_momentum"));
    env_set(L, s->attrs, "cycle_momentum", pv_bool(L, 1));
  }
  return mx / div;
}
PV *sched_onecyclelr(L *L, Span at, SchedStep *st) {
  /* this group's max_lr, initial_lr and min_lr (div_factor, final_div_factor as set by init) */
  double mx = gnum(st->s, "max_lrs", st->gi);
  set_num(L, st->s, "max_lr", mx);
  set_num(L, st->s, "initial_lr", mx / num(st->s, "div"));
  set_num(L, st->s, "min_lr", mx / num(st->s, "div") / num(st->s, "fdiv"));
  if (env_get(st->s->attrs, "cycle_momentum") && st->gi == 0) {
    PV *m = state(L, at, st->oname, "momentum", DT_F32, num(st->s, "max_momentum"));
    swrite(L, at, st->mask, m, onecycle_value(L, at, st->s, st->n, 1));
  }
  return onecycle_value(L, at, st->s, st->n, 0);
}

/* ReduceLROnPlateau a[]: 1 mode 2 factor 3 patience 4 threshold 5 threshold_mode 6 cooldown
 * 7 min_lr 8 eps. Not an _LRScheduler in PyTorch: it leaves the lr as it is. */
double sched_reducelronplateau_init(L *L, Span at, PV *s, PV **a) {
  double factor = opt_num(L, at, a[2], 0.1, "factor");
  if (factor >= 1.0) lower_error(L, at, "Factor should be < 1.0.");
  const char *mode = a[1] && a[1]->k == PV_STR ? a[1]->s : a[1] ? "" : "min";
  const char *tm = a[5] && a[5]->k == PV_STR ? a[5]->s : a[5] ? "" : "rel";
  if (strcmp(mode, "min") && strcmp(mode, "max")) lower_error(L, at, "mode %s is unknown!", mode);
  if (strcmp(tm, "rel") && strcmp(tm, "abs")) lower_error(L, at, "threshold mode %s is unknown!", tm);
  set_num(L, s, "factor", factor);
  set_num(L, s, "max", !strcmp(mode, "max"));
  set_num(L, s, "abs", !strcmp(tm, "abs"));
  set_num(L, s, "patience", (double)(a[3] ? arg_int(L, at, a[3], "patience") : 10));
  set_num(L, s, "threshold", opt_num(L, at, a[4], 1e-4, "threshold"));
  set_num(L, s, "cooldown", (double)(a[6] ? arg_int(L, at, a[6], "cooldown") : 0));
  PV *opt = opt_of(s);
  if (a[7] && pv_is_seq(a[7]) && a[7]->n != ngroups(opt))
    lower_error(L, at, "expected %d min_lrs, got %d", ngroups(opt), a[7]->n);
  env_set(L, s->attrs, "min_lrs", group_values(L, at, opt, a[7] ? a[7] : pv_float(L, 0), "min_lr"));
  set_num(L, s, "eps", opt_num(L, at, a[8], 1e-8, "eps"));
  return num(s, "prev_lr");
}
/* step(metrics): PyTorch's comparisons in float64 on the state "best"; the
 * counters num_bad_epochs and cooldown_counter as f32 state. */
PV *sched_reducelronplateau(L *L, Span at, SchedStep *st) {
  PV *s = st->s;
  int mx = (int)num(s, "max"), ab = (int)num(s, "abs");
  double th = num(s, "threshold");
  PV *m = scalar_as(L, at, st->metrics, DT_F64, "the metric of ReduceLROnPlateau.step()");
  PV *best_t = state(L, at, st->sname, "best", DT_F64, mx ? -INFINITY : INFINITY);
  PV *bad_t = state(L, at, st->sname, "num_bad_epochs", DT_F32, 0);
  PV *cc_t = state(L, at, st->sname, "cooldown_counter", DT_F32, 0);
  PV *reduce = env_get(s->attrs, "reduce");
  if (st->gi == 0) {   /* the first group advances the state; the decision is shared */
    PV *best = cur(L, at, best_t), *bad = cur(L, at, bad_t), *cc = cur(L, at, cc_t);
    PV *thr = ab ? (mx ? ADD(best, F(th)) : SUB(best, F(th))) : MUL(best, F(mx ? th + 1 : 1 - th));
    PV *better = CMP(mx ? OP_GT : OP_LT, m, thr);
    best = WHERE(better, m, best);
    bad = WHERE(better, F(0), ADD(bad, F(1)));
    PV *cool = CMP(OP_GT, cc, F(0));
    cc = WHERE(cool, SUB(cc, F(1)), cc);
    bad = WHERE(cool, F(0), bad);
    reduce = CMP(OP_GT, bad, F(num(s, "patience")));
    env_set(L, s->attrs, "reduce", reduce);
    swrite(L, at, st->mask, best_t, best);
    swrite(L, at, st->mask, bad_t, WHERE(reduce, F(0), bad));
    swrite(L, at, st->mask, cc_t, WHERE(reduce, F(num(s, "cooldown")), cc));
  }
  /* _reduce_lr, per group: max(lr * factor, min_lr), applied if it changes the lr by more than eps */
  PV *old = t_cast(L, at, st->lr, DT_F64);
  PV *nlr = t_minmax(L, at, IR_MAX, MUL(old, F(num(s, "factor"))),
                     scalar_as(L, at, F(gnum(s, "min_lrs", st->gi)), DT_F64, ""));
  PV *apply = WHERE(reduce, CMP(OP_GT, SUB(old, nlr), F(num(s, "eps"))), reduce);
  return WHERE(apply, t_cast(L, at, nlr, DT_F32), st->lr);
}

/* the schedulers a ChainedScheduler/SequentialLR holds: same optimizer, marked as members */
static PV *members(L *L, Span at, PV *s, PV *list, const char *who) {
  PV **ms;
  int n = iter_items(L, at, list, &ms);
  if (n == 0) lower_error(L, at, "%s needs at least one scheduler", who);
  PV *opt = opt_of(s), *l = pv_list(L, NULL, 0);
  for (int i = 0; i < n; i++) {
    if (bi_kind_of(ms[i]) != BK_SCHED) lower_error(L, at, "%s takes LR schedulers, not %s", who, pv_kind_name(ms[i]));
    if (opt_of(ms[i]) != opt)
      lower_error(L, at, "%s expects all schedulers to belong to the same optimizer, but got schedulers at index 0 and "
                  "%d to be different", who, i);
    int bi = ms[i]->cls->bi;
    if (bi == BI_S_REDUCELRONPLATEAU)
      lower_error(L, at, "%s cannot hold ReduceLROnPlateau: its step() needs the metric (PyTorch 1.13 fails too)", who);
    PV *parent = env_get(ms[i]->attrs, "parent");   /* (init runs once per parameter group) */
    if (parent && parent != s) lower_error(L, at, "this scheduler is already part of a %s", who);
    env_set(L, ms[i]->attrs, "parent", s);
    set_num(L, ms[i], "index", i);
    pv_list_append(L, l, ms[i]);
  }
  env_set(L, s->attrs, "schedulers", l);
  return l;
}

double sched_chainedscheduler_init(L *L, Span at, PV *s, PV **a) {
  members(L, at, s, a[0], "ChainedScheduler");
  return num(s, "prev_lr");
}
PV *sched_chainedscheduler(L *L, Span at, SchedStep *st) { BUG("ChainedScheduler is stepped through its members"); }

double sched_sequentiallr_init(L *L, Span at, PV *s, PV **a) {
  PV *l = members(L, at, s, a[1], "SequentialLR");
  for (int i = 0; i < l->n; i++)
    if (is_composite(l->items[i]->cls->bi))
      lower_error(L, at, "SequentialLR cannot hold a %s (PyTorch 1.13 fails on it)", l->items[i]->cls->s);
  PV **ms;
  int n = iter_items(L, at, a[2], &ms);
  if (n != l->n - 1)
    lower_error(L, at, "Sequential Schedulers expects number of schedulers provided to be one more than the number of "
                "milestone points, but got number of schedulers %d and the number of milestones to be equal to %d",
                l->n, n);
  PV *ml = pv_list(L, NULL, 0);
  for (int i = 0; i < n; i++) {
    int64_t m = arg_int(L, at, ms[i], "milestone");
    if (i && m <= ml->items[i - 1]->i) lower_error(L, at, "SequentialLR milestones must be increasing");
    pv_list_append(L, ml, pv_int(L, m));
  }
  env_set(L, s->attrs, "milestones", ml);
  /* PyTorch undoes the members' initial steps (last_epoch -1) and redoes the first's */
  for (int i = 1; i < l->n; i++) set_num(L, l->items[i], "last_epoch0", -1);
  return gnum(l->items[0], "lr_inits", gi_of(s));
}
PV *sched_sequentiallr(L *L, Span at, SchedStep *st) { BUG("SequentialLR is stepped through its members"); }

/* ---- construction and step() ------------------------------------------------ */

/* The position of argument `name` in a bind_args spec, or -1. */
static int spec_pos(const char *spec, const char *name) {
  size_t n = strlen(name);
  int i = 0;
  for (const char *p = spec; *p; i++) {
    if (!strncmp(p, name, n) && (p[n] == ',' || p[n] == '=' || !p[n])) return i;
    p = strchr(p, ',');
    if (!p) break;
    p++;
  }
  return -1;
}

/* torch.optim.lr_scheduler.<Name>(optimizer, ...): a SCHED row of optim.def.
 * Every parameter group has its own learning rate (PyTorch's base_lrs[i] from
 * the group's initial_lr): init runs once per group (focus), returning that
 * group's learning rate after construction. The optimizer keeps per group
 * "initial_lrs" (None until a scheduler sets it) and "lr0s" (the lr the
 * schedulers constructed so far left, the initial value of its state tensor). */
PV *sched_new(L *L, PV *cls, Args *A) {
  PV *a[24];
  Span at = A->at;
  int bi = cls->bi;
  const BuiltinRow *row = &bi_rows[bi];
  bind_args(L, A, row->spec, a);
  PV *opt = a[0];
  if (bi == BI_S_CHAINEDSCHEDULER) {
    PV **ms;
    if (iter_items(L, at, a[0], &ms) == 0) lower_error(L, at, "ChainedScheduler needs at least one scheduler");
    if (bi_kind_of(ms[0]) != BK_SCHED) lower_error(L, at, "ChainedScheduler takes LR schedulers, not %s", pv_kind_name(ms[0]));
    opt = opt_of(ms[0]);
  }
  if (bi_kind_of(opt) != BK_OPTIM) lower_error(L, at, "the first argument of a scheduler must be an optimizer");
  PV *groups = env_get(opt->attrs, "param_groups");
  int ng = groups->n;
  if (!env_get(opt->attrs, "initial_lrs")) {
    PV *il = pv_list(L, NULL, 0), *l0 = pv_list(L, NULL, 0);
    for (int gi = 0; gi < ng; gi++) {
      PV *glr = pv_dict_get(groups->items[gi], pv_str(L, "lr"));
      if (glr->k == PV_TENSOR)
        lower_error(L, at, "an LR scheduler on a parameter group whose lr was set by hand is not supported");
      pv_list_append(L, il, pv_none(L));
      pv_list_append(L, l0, pv_float(L, pv_num(glr)));
    }
    env_set(L, opt->attrs, "initial_lrs", il);
    env_set(L, opt->attrs, "lr0s", l0);
  }
  PV *initial = env_get(opt->attrs, "initial_lrs"), *prev = env_get(opt->attrs, "lr0s");
  if (initial->n != ng) lower_error(L, at, "add_param_group() after an LR scheduler was constructed is not supported");
  PV *s = pv_new(L, PV_OBJ);
  s->cls = cls;
  s->attrs = env_new(L, NULL);
  env_set(L, s->attrs, "optimizer", opt);
  PV *bases = pv_list(L, NULL, 0), *prevs = pv_list(L, NULL, 0);
  for (int gi = 0; gi < ng; gi++) {
    pv_list_append(L, bases, initial->items[gi]->k != PV_NONE ? initial->items[gi] : prev->items[gi]);
    pv_list_append(L, prevs, prev->items[gi]);
  }
  env_set(L, s->attrs, "base_lrs", bases);
  env_set(L, s->attrs, "prev_lrs", prevs);
  int li = spec_pos(row->spec, "last_epoch");
  if (li >= 0 && a[li] && arg_int(L, at, a[li], "last_epoch") != -1)
    lower_error(L, at, "resuming a scheduler (last_epoch) is not supported");
  PV *inits = pv_list(L, NULL, 0), *lr0s = pv_list(L, NULL, 0);
  for (int gi = 0; gi < ng; gi++) {
    focus(L, s, gi);
    double lr_init = row->sched_init(L, at, s, a), p = num(s, "prev_lr"), b = base_lr(s);
    pv_list_append(L, inits, pv_float(L, lr_init));
    /* the lr after construction: the initial step applies to the lr other
     * schedulers on the optimizer left (a factor of it for the two-form rules) */
    pv_list_append(L, lr0s, pv_float(L, two_forms(bi) && p != b && b != 0 ? p * (lr_init / b) : lr_init));
    if (initial->items[gi]->k == PV_NONE) initial->items[gi] = bases->items[gi];
  }
  env_set(L, s->attrs, "lr_inits", inits);
  if (!is_composite(bi)) {
    PV *ns = env_get(opt->attrs, "nsched");
    env_set(L, opt->attrs, "nsched", pv_int(L, ns ? ns->i + 1 : 1));
  }
  env_set(L, opt->attrs, "scheduler", s);
  env_set(L, opt->attrs, "lr0s", lr0s);
  return s;
}

PV *sched_lr_state(L *L, Span at, PV *opt, int gi) {
  const char *on = global_name(L, opt, "optimizer");
  return state(L, at, on, gi ? arena_printf(L->a, "lr.%d", gi) : "lr", DT_F32, pv_num(env_get(opt->attrs, "lr0s")->items[gi]));
}

/* One step of scheduler s from the groups' learning rates lr[] (replaced by
 * the new ones). Its state changes only where `mask` holds (NULL: always);
 * where `reset` holds the step is PyTorch's step(0) (a SequentialLR
 * milestone); `epoch` is the argument of step(epoch) (NULL: none). */
static void advance(L *L, Span at, PV *s, PV **lr, PV *mask, PV *reset, PV *metrics, PV *epoch) {
  int bi = s->cls->bi;
  PV *opt = opt_of(s);
  int ng = ngroups(opt);
  const char *sname = sched_name(L, s);
  if (bi == BI_S_CHAINEDSCHEDULER) {
    PV *ms = env_get(s->attrs, "schedulers");
    for (int i = 0; i < ms->n; i++) advance(L, at, ms->items[i], lr, mask, NULL, NULL, NULL);
    return;
  }
  if (bi == BI_S_SEQUENTIALLR) {
    PV *e_t = state(L, at, sname, "last_epoch", DT_F32, 0);
    PV *e = ADD(cur(L, at, e_t), F(1));
    swrite(L, at, mask, e_t, e);
    PV *ms = env_get(s->attrs, "milestones"), *l = env_get(s->attrs, "schedulers"), *idx = F(0);
    PV **r = arena_alloc(L->a, sizeof(PV *) * (size_t)ng), **sub = arena_alloc(L->a, sizeof(PV *) * (size_t)ng);
    for (int gi = 0; gi < ng; gi++) r[gi] = lr[gi];
    for (int i = 0; i < ms->n; i++) idx = ADD(idx, t_cast(L, at, CMP(OP_GE, e, F((double)ms->items[i]->i)), DT_F32));
    for (int k = 0; k < l->n; k++) {
      PV *sel = CMP(OP_EQ, idx, F(k));
      PV *act = mask ? WHERE(mask, sel, mask) : sel;
      PV *rs = k ? CMP(OP_EQ, e, F((double)ms->items[k - 1]->i)) : NULL;
      for (int gi = 0; gi < ng; gi++) sub[gi] = lr[gi];
      advance(L, at, l->items[k], sub, act, rs, NULL, NULL);
      for (int gi = 0; gi < ng; gi++) r[gi] = WHERE(sel, sub[gi], r[gi]);
    }
    for (int gi = 0; gi < ng; gi++) lr[gi] = r[gi];
    return;
  }
  PV *le0 = env_get(s->attrs, "last_epoch0");
  PV *n_t = state(L, at, sname, "last_epoch", DT_F32, le0 ? pv_num(le0) : 0);
  /* step(epoch): last_epoch = epoch (CosineAnnealingWarmRestarts: its floor) */
  PV *n = epoch ? FLOOR(epoch) : ADD(cur(L, at, n_t), F(1));
  if (reset) n = WHERE(reset, F(0), n);
  swrite(L, at, mask, n_t, n);
  SchedRule *rule = bi_rows[bi].sched_rule;
  PV *ns = env_get(opt->attrs, "nsched");
  /* the closed form: alone on the optimizer, at a reset, or (as PyTorch) for step(epoch) */
  int recursive = ns && ns->i > 1 && !epoch;
  for (int gi = 0; gi < ng; gi++) {
    focus(L, s, gi);
    SchedStep st = {s, n, lr[gi], mask, reset, metrics, 0, sname, global_name(L, opt, "optimizer"), gi, epoch};
    if (!two_forms(bi)) {
      lr[gi] = f32(L, at, rule(L, at, &st));
      continue;
    }
    PV *c = NULL;
    if (reset || !recursive) {
      st.closed = 1;
      c = rule(L, at, &st);
      st.closed = 0;
      if (c && !reset) {
        lr[gi] = f32(L, at, c);
        continue;
      }
    }
    PV *r = f32(L, at, rule(L, at, &st));
    lr[gi] = c ? WHERE(reset, f32(L, at, c), r) : r;
  }
}

static void mark_stepped(L *L, PV *s) {
  env_set(L, s->attrs, "stepped", pv_bool(L, 1));
  PV *ms = env_get(s->attrs, "schedulers");
  for (int i = 0; ms && i < ms->n; i++) mark_stepped(L, ms->items[i]);
}

static void sched_step(L *L, Span at, PV *s, PV *metrics, PV *epoch) {
  PV *opt = opt_of(s);
  int ng = ngroups(opt);
  PV **lt = arena_alloc(L->a, sizeof(PV *) * (size_t)ng), **lr = arena_alloc(L->a, sizeof(PV *) * (size_t)ng);
  for (int gi = 0; gi < ng; gi++) {
    lt[gi] = sched_lr_state(L, at, opt, gi);
    lr[gi] = cur(L, at, lt[gi]);
  }
  advance(L, at, s, lr, NULL, NULL, metrics, epoch);
  for (int gi = 0; gi < ng; gi++) state_update(L, at, lt[gi], lr[gi]);
  mark_stepped(L, s);
}

/* the groups' learning rates: numbers at compile time, in compiled code the
 * state tensors' current values (0-d f32 tensors, e.g. to return them) */
static PV *last_lrs(L *L, Span at, PV *s) {
  PV *opt = opt_of(s), *r = pv_list(L, NULL, 0);
  for (int gi = 0; gi < ngroups(opt); gi++)
    pv_list_append(L, r, L->T->fn ? cur(L, at, sched_lr_state(L, at, opt, gi))
                                  : env_get(opt->attrs, "lr0s")->items[gi]);
  return r;
}

/* A scheduler's or GradScaler's state_dict() d, remembered: load_state_dict accepts those only
 * (a no-op: the state itself travels with the weights) */
PV *sd_returned(L *L, PV *obj, PV *d) {
  PV *ret = env_get(obj->attrs, "sd_returned");
  if (!ret) env_set(L, obj->attrs, "sd_returned", ret = pv_list(L, NULL, 0));
  pv_list_append(L, ret, d);
  return d;
}

int sd_is_own(PV *obj, PV *d) {
  PV *ret = env_get(obj->attrs, "sd_returned");
  for (int i = 0; ret && i < ret->n; i++)
    if (ret->items[i] == d) return 1;
  return 0;
}

PV *bi_sched_method(L *L, PV *fn, Args *A) {
  PV *a[2], *s = fn->self;
  Span at = A->at;
  if (fn->bi == BI_SCHED_GET_LAST_LR) {
    bind_args(L, A, "", a);
    return last_lrs(L, at, s);
  }
  if (fn->bi == BI_SCHED_STATE_DICT) {
    /* PyTorch's entries that ctc knows: last_epoch (the state tensor's value in
     * compiled code), base_lrs, _last_lr; the state itself is saved with the
     * weights. Loading it back (load_state_dict) is a no-op. */
    bind_args(L, A, "", a);
    PV *d = pv_dict(L);
    if (!is_composite(s->cls->bi) && s->cls->bi != BI_S_REDUCELRONPLATEAU) {
      PV *le0 = env_get(s->attrs, "last_epoch0");
      PV *e = L->T->fn ? cur(L, at, state(L, at, sched_name(L, s), "last_epoch", DT_F32, le0 ? pv_num(le0) : 0))
                       : pv_int(L, 0);
      pv_dict_set(L, at, d, pv_str(L, "last_epoch"), e);
      pv_dict_set(L, at, d, pv_str(L, "base_lrs"), env_get(s->attrs, "base_lrs"));
    }
    pv_dict_set(L, at, d, pv_str(L, "_last_lr"), last_lrs(L, at, s));
    return sd_returned(L, s, d);
  }
  if (fn->bi == BI_SCHED_LOAD_STATE_DICT) {
    bind_args(L, A, "state_dict", a);
    if (!sd_is_own(s, a[0]))
      lower_error(L, at, "load_state_dict() of an LR scheduler: ctc keeps the scheduler's state (last_epoch, ...) with "
                         "the weights (saved by --save, loaded by --weights); only the dict its own state_dict() "
                         "returned can be loaded back (a no-op)");
    return pv_none(L);
  }
  int plateau = s->cls->bi == BI_S_REDUCELRONPLATEAU;
  if (is_composite(s->cls->bi)) bind_args(L, A, "", a);
  else bind_args(L, A, plateau ? "metrics,epoch=" : "epoch=", a);
  PV *epoch = is_composite(s->cls->bi) ? NULL : a[plateau];
  if (epoch && epoch->k == PV_NONE) epoch = NULL;
  if (!L->T->fn) lower_error(L, at, "scheduler.step() at compile time has no effect; call it in a compiled function or "
                                    "let `./net train` call it after every epoch");
  /* step(epoch) (deprecated in PyTorch 1.13, still supported): last_epoch =
   * epoch, then the closed form where the scheduler has one, else get_lr();
   * ReduceLROnPlateau only records it (ctc keeps no last_epoch for it) */
  if (epoch && !plateau) epoch = scalar_as(L, at, epoch, DT_F32, "the epoch of scheduler.step(epoch)");
  sched_step(L, at, s, plateau ? a[0] : NULL, plateau ? NULL : epoch);
  return pv_none(L);
}

/* An entry "<scheduler>_step" for every scheduler no compiled function steps;
 * ReduceLROnPlateau's takes the metric as its input (`./net train` passes the
 * evaluation loss on --test-data). */
void stage_scheduler_entries(L *L) {
  for (int i = 0; i < L->globals->vals.len; i++) {
    PV *s = L->globals->vals.data[i];
    if (bi_kind_of(s) != BK_SCHED) continue;
    if (env_get(s->attrs, "stepped") || env_get(s->attrs, "parent")) continue;
    const char *name = arena_printf(L->a, "%s_step", L->globals->names.data[i]);
    Span at = L->T->prog->funcs.len ? L->T->prog->funcs.data[0]->loc : (Span){L->src, 1, 1, 1, 1};
    Func *f = ir_func_new(L->T->prog, name, at);
    f->kind = FK_SCHED;
    L->T->fn = f;
    L->T->param_cur = arena_alloc(L->a, sizeof(ValId) * (size_t)(L->T->prog->params.len + 1));
    for (int k = 0; k < L->T->prog->params.len; k++) L->T->param_cur[k] = -1;
    PV *metrics = NULL;
    if (s->cls->bi == BI_S_REDUCELRONPLATEAU) {
      Type t = {0};
      t.dtype = DT_F32;
      metrics = t_wrap(L, ir_add_input(L->T->prog, f, "metrics", t));
    }
    sched_step(L, at, s, metrics, NULL);
    L->T->fn = NULL;
    L->T->param_cur = NULL;
  }
}
