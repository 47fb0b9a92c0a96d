/* losses.c - loss functions (F.cross_entropy ..., nn.CrossEntropyLoss ...),
 * lowered to primitives with PyTorch's reductions and options. */
#include <math.h>
#include <string.h>
#include "torch_int.h"

enum { RED_MEAN, RED_SUM, RED_NONE };

static int reduction_of(L *L, Span at, PV *v) {
  if (!v) return RED_MEAN;
  if (v->k != PV_STR) lower_error(L, at, "reduction must be 'mean', 'sum' or 'none'");
  if (!strcmp(v->s, "mean")) return RED_MEAN;
  if (!strcmp(v->s, "sum")) return RED_SUM;
  if (!strcmp(v->s, "none")) return RED_NONE;
  lower_error(L, at, "reduction must be 'mean', 'sum' or 'none', not '%s'", v->s);
}

static PV *reduce(L *L, Span at, PV *x, int red) {
  if (red == RED_NONE) return x;
  return t_reduce(L, at, IR_REDUCE_SUM, x, NULL, 0, 0, red == RED_MEAN);
}

static PV *tensor_arg(L *L, Span at, PV *v, const char *what) {
  if (!v || v->k != PV_TENSOR) lower_error(L, at, "%s must be a tensor", what);
  return v;
}

static void same_shape(L *L, Span at, const char *fn, PV *a, PV *b) {
  Type ta = a->t->type, tb = b->t->type;
  int ok = ta.ndim == tb.ndim;
  for (int i = 0; ok && i < ta.ndim; i++) ok = ta.dims[i] == tb.dims[i];
  if (!ok)
    lower_error(L, at, "%s: input %s and target %s must have the same shape", fn, shape_str(L, &ta),
                shape_str(L, &tb));
}

/* nll over log-probabilities logp[N, C] and class indices target[N]. */
static PV *nll(L *L, Span at, PV *logp, PV *target, int red, int64_t ignore_index, double smoothing, const char *fn) {
  Type tl = logp->t->type, tt = target->t->type;
  if (tl.ndim != 2)
    lower_error(L, at, "%s: only [N, C] inputs are supported, got %s", fn, shape_str(L, &tl));
  if (!ir_dtype_is_float(tt.dtype)) {
    if (tt.ndim != 1 || tt.dims[0] != tl.dims[0])
      lower_error(L, at, "%s: target %s must have shape [%lld] for input %s", fn, shape_str(L, &tt),
                  (long long)tl.dims[0], shape_str(L, &tl));
  } else {
    /* class probabilities: -sum(target * logp) */
    same_shape(L, at, fn, logp, target);
    PV *per = t_unary(L, at, IR_NEG, t_reduce(L, at, IR_REDUCE_SUM, t_binary(L, at, OP_MUL, target, logp),
                                              (int64_t[]){1}, 1, 0, 0));
    if (smoothing > 0) {
      PV *u = t_unary(L, at, IR_NEG, t_reduce(L, at, IR_REDUCE_SUM, logp, (int64_t[]){1}, 1, 0, 1));
      per = t_binary(L, at, OP_ADD, t_binary(L, at, OP_MUL, per, pv_float(L, 1 - smoothing)),
                     t_binary(L, at, OP_MUL, u, pv_float(L, smoothing)));
    }
    return reduce(L, at, per, red);
  }
  int64_t C = tl.dims[1];
  /* one-hot of the targets by comparing with iota: no gather primitive needed */
  Type it = {0};
  it.dtype = DT_I64;
  it.ndim = 1;
  it.dims[0] = C;
  int64_t ia[2] = {0, 1};
  PV *iota = t_wrap(L, ir_emit(L->T->prog, L->T->fn, IR_IOTA, NULL, 0, it, ia, 2, 0, at, "classes"));
  /* the targets checked in [0, C) at run time (PyTorch: "Target 10 is out of bounds"), but for
   * ignore_index, read as class 0 there (its row is zeroed below) */
  PV *t64 = t_cast(L, at, target, DT_I64);
  if (ignore_index < 0 || ignore_index >= C)
    t64 = t_where(L, at, t_compare(L, at, OP_NE, t64, pv_int(L, ignore_index)), t64, pv_int(L, 0));
  PV *tcol = t_reshape(L, at, t_checked_index(L, at, t64, C, "target"), (int64_t[]){tl.dims[0], 1}, 2);
  /* select with where(), not a multiply by the one-hot: 0 * -inf would be NaN
   * where PyTorch's gather reads only the target's log-probability */
  PV *onehot = t_compare(L, at, OP_EQ, iota, tcol);
  PV *per = t_unary(L, at, IR_NEG, t_reduce(L, at, IR_REDUCE_SUM, t_where(L, at, onehot, logp, pv_float(L, 0)),
                                            (int64_t[]){1}, 1, 0, 0));
  PV *validb = t_compare(L, at, OP_NE, t_cast(L, at, target, DT_I64), pv_int(L, ignore_index));
  PV *valid = t_cast(L, at, validb, tl.dtype);
  if (smoothing > 0) {
    /* (1 - e) * nll + e * mean_c(-logp), as PyTorch defines label smoothing */
    PV *u = t_unary(L, at, IR_NEG, t_reduce(L, at, IR_REDUCE_SUM, logp, (int64_t[]){1}, 1, 0, 1));
    per = t_binary(L, at, OP_ADD, t_binary(L, at, OP_MUL, per, pv_float(L, 1 - smoothing)),
                   t_binary(L, at, OP_MUL, u, pv_float(L, smoothing)));
  }
  per = t_where(L, at, validb, per, pv_float(L, 0));
  if (red == RED_NONE) return per;
  PV *sum = t_reduce(L, at, IR_REDUCE_SUM, per, NULL, 0, 0, 0);
  if (red == RED_SUM) return sum;
  /* mean over the targets that are not ignored */
  return t_binary(L, at, OP_DIV, sum, t_reduce(L, at, IR_REDUCE_SUM, valid, NULL, 0, 0, 0));
}

/* Binary cross entropy per element: ops.def's BCE row, whose value and derivative
 * rules (of any order, at PyTorch's 1e-12 clamp too) are PyTorch 1.13's. */
static PV *bce(L *L, Span at, PV *x, PV *y) { return t_float_binary(L, at, IR_BCE, x, y); }

/* BCE with logits per element: softplus(x) - x*y, softplus as where(x > 0, x, 0) +
 * log(1 + exp(t)), t = -|x| through a where() rather than relu and abs, whose kinks at 0
 * would make the derivative at x = 0 -y instead of PyTorch's sigmoid(x) - y (t's
 * derivative there is 1, so exp(t) / (1 + exp(t)) = 1/2 is the whole of it). */
static PV *bce_logits(L *L, Span at, PV *x, PV *y) {
  PV *pos = t_compare(L, at, OP_GT, x, pv_float(L, 0));
  PV *t = t_where(L, at, pos, t_unary(L, at, IR_NEG, x), x);
  PV *sp = t_binary(L, at, OP_ADD, t_where(L, at, pos, x, pv_float(L, 0)),
                    t_unary(L, at, IR_LOG, t_binary(L, at, OP_ADD, pv_float(L, 1), t_unary(L, at, IR_EXP, t))));
  return t_binary(L, at, OP_SUB, sp, t_binary(L, at, OP_MUL, x, y));
}

typedef struct LossOpts {
  int red;
  int64_t ignore_index;
  double smoothing, beta;
} LossOpts;

PV *loss_apply(L *L, Span at, int kind, PV *x, PV *y, const LossOpts *o);

PV *loss_apply(L *L, Span at, int kind, PV *x, PV *y, const LossOpts *o) {
  tensor_arg(L, at, x, "input");
  tensor_arg(L, at, y, "target");
  switch (kind) {
  case BI_F_CROSS_ENTROPY:
    return nll(L, at, t_softmax(L, at, x, 1, 1), y, o->red, o->ignore_index, o->smoothing, "cross_entropy");
  case BI_F_NLL_LOSS:
    return nll(L, at, x, y, o->red, o->ignore_index, 0, "nll_loss");
  case BI_F_MSE_LOSS: {
    same_shape(L, at, "mse_loss", x, y);
    PV *d = t_binary(L, at, OP_SUB, x, y);
    return reduce(L, at, t_binary(L, at, OP_MUL, d, d), o->red);
  }
  case BI_F_L1_LOSS:
    same_shape(L, at, "l1_loss", x, y);
    return reduce(L, at, t_unary(L, at, IR_ABS, t_binary(L, at, OP_SUB, x, y)), o->red);
  case BI_F_SMOOTH_L1_LOSS: {
    same_shape(L, at, "smooth_l1_loss", x, y);
    PV *d = t_unary(L, at, IR_ABS, t_binary(L, at, OP_SUB, x, y));
    PV *r;
    if (o->beta == 0) r = d;
    else {
      PV *q = t_binary(L, at, OP_MUL, t_binary(L, at, OP_MUL, d, d), pv_float(L, 0.5 / o->beta));
      r = t_where(L, at, t_compare(L, at, OP_LT, d, pv_float(L, o->beta)), q,
                  t_binary(L, at, OP_SUB, d, pv_float(L, 0.5 * o->beta)));
    }
    return reduce(L, at, r, o->red);
  }
  case BI_F_BINARY_CROSS_ENTROPY:
    same_shape(L, at, "binary_cross_entropy", x, y);
    return reduce(L, at, bce(L, at, x, y), o->red);
  case BI_F_BINARY_CROSS_ENTROPY_WITH_LOGITS:
    same_shape(L, at, "binary_cross_entropy_with_logits", x, y);
    return reduce(L, at, bce_logits(L, at, x, y), o->red);
  case BI_F_MULTILABEL_SOFT_MARGIN_LOSS: {   /* per sample: the mean over classes of BCE with logits */
    same_shape(L, at, "multilabel_soft_margin_loss", x, y);
    if (x->t->type.ndim != 2)
      lower_error(L, at, "multilabel_soft_margin_loss expects input [N, C], got %s", shape_str(L, &x->t->type));
    int64_t classes = 1;
    return reduce(L, at, t_reduce(L, at, IR_REDUCE_SUM, bce_logits(L, at, x, y), &classes, 1, 0, 1), o->red);
  }
  default: BUG("loss %d", kind);
  }
}

static LossOpts parse_opts(L *L, Span at, int fn, PV *red, PV *ignore, PV *smooth, PV *beta) {
  LossOpts o = {reduction_of(L, at, red), -100, 0, 1};
  if (ignore) o.ignore_index = arg_int(L, at, ignore, "ignore_index");
  if (smooth) {
    o.smoothing = arg_num(L, at, smooth, "label_smoothing");
    if (o.smoothing < 0 || o.smoothing > 1) lower_error(L, at, "label_smoothing must be between 0 and 1");
  }
  if (beta) {
    o.beta = arg_num(L, at, beta, "beta");
    if (o.beta < 0) lower_error(L, at, "smooth_l1_loss beta must be non-negative");
  }
  (void)fn;
  return o;
}

/* The spec of each loss's arguments after (input, target), as PyTorch spells them. */
static const char *loss_spec(int fn) {
  switch (fn) {
  case BI_F_CROSS_ENTROPY: return "weight=,size_average=,ignore_index=,reduce=,reduction=,label_smoothing=";
  case BI_F_NLL_LOSS: return "weight=,size_average=,ignore_index=,reduce=,reduction=";
  case BI_F_SMOOTH_L1_LOSS: return "size_average=,reduce=,reduction=,beta=";
  case BI_F_BINARY_CROSS_ENTROPY:
  case BI_F_MULTILABEL_SOFT_MARGIN_LOSS: return "weight=,size_average=,reduce=,reduction=";
  case BI_F_BINARY_CROSS_ENTROPY_WITH_LOGITS: return "weight=,size_average=,reduce=,reduction=,pos_weight=";
  default: return "size_average=,reduce=,reduction=";
  }
}

static void check_unsupported(L *L, Span at, const char *spec, PV **a) {
  const char *names[] = {"weight", "size_average", "reduce", "pos_weight"};
  char buf[256];
  snprintf(buf, sizeof buf, "%s", spec);
  int i = 0;
  for (char *p = strtok(buf, ","); p; p = strtok(NULL, ","), i++) {
    p[strcspn(p, "=")] = 0;
    for (size_t k = 0; k < 4; k++)
      if (!strcmp(p, names[k]) && a[i] && a[i]->k != PV_NONE)
        lower_error(L, at, "loss option '%s' is not supported yet", p);
  }
}

static PV *opt_named(const char *spec, PV **a, const char *name) {
  char buf[256];
  snprintf(buf, sizeof buf, "%s", spec);
  int i = 0;
  for (char *p = strtok(buf, ","); p; p = strtok(NULL, ","), i++) {
    p[strcspn(p, "=")] = 0;
    if (!strcmp(p, name)) return a[i];
  }
  return NULL;
}

/* F.cross_entropy(input, target, ...) and friends. */
PV *bi_loss(L *L, PV *fnv, Args *A) {
  PV *a[10];
  int fn = fnv->bi;
  const char *tail = loss_spec(fn);
  char spec[300];
  snprintf(spec, sizeof spec, "input,target,%s", tail);
  bind_args(L, A, spec, a);
  if (!L->T->fn) lower_error(L, A->at, "losses are computed inside compiled functions only");
  check_unsupported(L, A->at, tail, a + 2);
  LossOpts o = parse_opts(L, A->at, fn, opt_named(tail, a + 2, "reduction"), opt_named(tail, a + 2, "ignore_index"),
                          opt_named(tail, a + 2, "label_smoothing"), opt_named(tail, a + 2, "beta"));
  return loss_apply(L, A->at, fn, a[0], a[1], &o);
}

/* nn.CrossEntropyLoss(...): the options are stored on the module object. */
PV *loss_module_new(L *L, PV *cls, Args *A) {
  PV *a[10];
  int fn = bi_rows[cls->bi].arg;
  PV *o = module_new(L, cls);   /* no parameters: may be made inside compiled code too (nn.MSELoss()(out, y)) */
  bind_args(L, A, loss_spec(fn), a);
  check_unsupported(L, A->at, loss_spec(fn), a);
  const char *spec = loss_spec(fn);
  PV *red = opt_named(spec, a, "reduction"), *ig = opt_named(spec, a, "ignore_index");
  PV *sm = opt_named(spec, a, "label_smoothing"), *beta = opt_named(spec, a, "beta");
  parse_opts(L, A->at, fn, red, ig, sm, beta); /* validate now, at the constructor's line */
  env_set(L, o->attrs, "reduction", red ? red : pv_str(L, "mean"));
  if (ig) env_set(L, o->attrs, "ignore_index", ig);
  if (sm) env_set(L, o->attrs, "label_smoothing", sm);
  if (beta) env_set(L, o->attrs, "beta", beta);
  return o;
}

PV *loss_module_call(L *L, PV *o, Args *A) {
  PV *a[2];
  int fn = bi_rows[o->cls->bi].arg;
  bind_args(L, A, "input,target", a);
  LossOpts opts = parse_opts(L, A->at, fn, env_get(o->attrs, "reduction"), env_get(o->attrs, "ignore_index"),
                             env_get(o->attrs, "label_smoothing"), env_get(o->attrs, "beta"));
  return loss_apply(L, A->at, fn, a[0], a[1], &opts);
}
