/* losses_pair.c - distances between embeddings and the losses built on them or
 * on pairs of inputs: F.normalize, cosine_similarity, pairwise_distance, and
 * cosine_embedding, triplet_margin, margin_ranking, hinge_embedding,
 * soft_margin, huber, kl_div and poisson_nll losses (their nn. module forms are
 * LAYER rows that call these with the stored options). Each is the composition
 * PyTorch 1.13 computes (aten/native Loss.cpp, Distance.cpp), so values and
 * derivatives are the primitives' and agree with PyTorch's, at the clamps too. */
#include <math.h>
#include <string.h>
#include "torch_int.h"

#define ADD(a, b) t_binary(L, at, OP_ADD, (a), (b))
#define SUB(a, b) t_binary(L, at, OP_SUB, (a), (b))
#define MUL(a, b) t_binary(L, at, OP_MUL, (a), (b))
#define DIV(a, b) t_binary(L, at, OP_DIV, (a), (b))
#define NUM(c) pv_float(L, (c))

enum { R_NONE, R_MEAN, R_SUM, R_BATCHMEAN };

/* reduction= (and the legacy size_average= / reduce=, which ctc refuses) */
static int reduction(L *L, Span at, PV *red, PV *size_average, PV *reduce, int batchmean) {
  if ((size_average && size_average->k != PV_NONE) || (reduce && reduce->k != PV_NONE))
    lower_error(L, at, "size_average= and reduce= are deprecated and not supported by ctc: use reduction=");
  if (!red || red->k == PV_NONE) return R_MEAN;
  if (red->k != PV_STR) lower_error(L, at, "reduction must be a string");
  if (!strcmp(red->s, "mean")) return R_MEAN;
  if (!strcmp(red->s, "sum")) return R_SUM;
  if (!strcmp(red->s, "none")) return R_NONE;
  if (batchmean && !strcmp(red->s, "batchmean")) return R_BATCHMEAN;
  lower_error(L, at, "%s is not a valid value for reduction", red->s);
}

static PV *apply_reduction(L *L, Span at, PV *x, int red) {
  if (red == R_NONE) return x;
  return t_reduce(L, at, IR_REDUCE_SUM, x, NULL, 0, 0, red == R_MEAN);
}

static PV *tensor(L *L, Span at, PV *v, const char *fn, const char *what) {
  if (!v || v->k != PV_TENSOR) lower_error(L, at, "%s: %s must be a tensor", fn, what);
  if (!L->T->fn) lower_error(L, at, "%s is computed inside compiled functions only", fn);
  return v;
}

static double num_or(L *L, Span at, PV *v, double dflt, const char *what) {
  return v && v->k != PV_NONE ? arg_num(L, at, v, what) : dflt;
}

static int64_t norm_dim(L *L, Span at, int64_t d, int ndim, const char *fn) {
  int n = ndim ? ndim : 1;
  if (d < -n || d >= n)
    lower_error(L, at, "%s: dim %lld is out of range for a %d-D tensor", fn, (long long)d, ndim);
  return d < 0 ? d + n : d;
}

/* x1, x2 as float tensors of their broadcast shape */
static void broadcast_pair(L *L, Span at, PV **x1, PV **x2, const char *fn) {
  Type a = (*x1)->t->type, b = (*x2)->t->type, r;
  if (ir_broadcast_shapes(&a, &b, &r) < 0)
    lower_error(L, at, "%s: the shapes %s and %s do not broadcast", fn, shape_str(L, &a), shape_str(L, &b));
  DType dt = ir_dtype_is_float(a.dtype) ? a.dtype : b.dtype;
  if (!ir_dtype_is_float(dt)) lower_error(L, at, "%s: expected floating-point inputs, got %s", fn, ir_dtype_name(a.dtype));
  *x1 = t_expand_to(L, at, t_cast(L, at, *x1, dt), r);
  *x2 = t_expand_to(L, at, t_cast(L, at, *x2, dt), r);
}

/* ||x|| over dim (kept) with PyTorch 1.13's cosine_similarity clamp: the value
 * max(||x||, eps), and a derivative x / max(||x||, eps) (the clamp is done in
 * place on the norm's saved result, under no_grad) */
static PV *clamped_norm(L *L, Span at, PV *x, int64_t dim, double eps) {
  PV *s = t_reduce(L, at, IR_REDUCE_SUM, MUL(x, x), &dim, 1, 1, 0);
  PV *sd = t_detach(L, at, s);
  PV *n = t_unary(L, at, IR_SQRT, sd);
  PV *nc = t_where(L, at, t_compare(L, at, OP_LT, n, NUM(eps)), NUM(eps), n);
  return ADD(nc, DIV(SUB(s, sd), MUL(nc, NUM(2))));
}

PV *t_cosine_similarity(L *L, Span at, PV *x1, PV *x2, int64_t dim, double eps) {
  broadcast_pair(L, at, &x1, &x2, "cosine_similarity");
  dim = norm_dim(L, at, dim, x1->t->type.ndim, "cosine_similarity");
  PV *u = DIV(x1, clamped_norm(L, at, x1, dim, eps)), *v = DIV(x2, clamped_norm(L, at, x2, dim, eps));
  return t_reduce(L, at, IR_REDUCE_SUM, MUL(u, v), &dim, 1, 0, 0);
}

/* norm(x1 - x2 + eps, p) over the last dim of the broader one */
PV *t_pairwise_distance(L *L, Span at, PV *x1, PV *x2, double p, double eps, int keepdim) {
  PV *d = ADD(SUB(x1, x2), NUM(eps));
  int64_t last = d->t->type.ndim - 1;
  if (last < 0) return t_norm(L, at, d, p, NULL, 0, keepdim);
  return t_norm(L, at, d, p, &last, 1, keepdim);
}

PV *nnf_cosine_similarity(L *L, PV *fn, Args *A) {
  (void)fn;
  PV *a[4];
  Span at = A->at;
  bind_args(L, A, "x1,x2,dim=,eps=", a);
  PV *x1 = tensor(L, at, a[0], "cosine_similarity", "x1"), *x2 = tensor(L, at, a[1], "cosine_similarity", "x2");
  int64_t dim = a[2] && a[2]->k != PV_NONE ? arg_int(L, at, a[2], "dim") : 1;
  return t_cosine_similarity(L, at, x1, x2, dim, num_or(L, at, a[3], 1e-8, "eps"));
}

PV *nnf_pairwise_distance(L *L, PV *fn, Args *A) {
  (void)fn;
  PV *a[5];
  Span at = A->at;
  bind_args(L, A, "x1,x2,p=,eps=,keepdim=", a);
  PV *x1 = tensor(L, at, a[0], "pairwise_distance", "x1"), *x2 = tensor(L, at, a[1], "pairwise_distance", "x2");
  return t_pairwise_distance(L, at, x1, x2, num_or(L, at, a[2], 2, "p"), num_or(L, at, a[3], 1e-6, "eps"),
                             a[4] && a[4]->k != PV_NONE && arg_bool(L, at, a[4], "keepdim"));
}

/* F.normalize: x / max(||x||_p, eps) over dim */
PV *nnf_normalize(L *L, PV *fn, Args *A) {
  (void)fn;
  PV *a[5];
  Span at = A->at;
  bind_args(L, A, "input,p=,dim=,eps=,out=", a);
  PV *x = tensor(L, at, a[0], "normalize", "input");
  if (a[4] && a[4]->k != PV_NONE) lower_error(L, at, "normalize: out= is not supported");
  if (!ir_dtype_is_float(x->t->type.dtype)) lower_error(L, at, "normalize: the input must be floating-point");
  int64_t dim = norm_dim(L, at, a[2] && a[2]->k != PV_NONE ? arg_int(L, at, a[2], "dim") : 1, x->t->type.ndim, "normalize");
  PV *n = x->t->type.ndim ? t_norm(L, at, x, num_or(L, at, a[1], 2, "p"), &dim, 1, 1)
                          : t_norm(L, at, x, num_or(L, at, a[1], 2, "p"), NULL, 0, 0);
  return DIV(x, t_clamp(L, at, n, NUM(num_or(L, at, a[3], 1e-12, "eps")), NULL));
}

/* ---- losses ---------------------------------------------------------------------- */

PV *nnf_cosine_embedding_loss(L *L, PV *fn, Args *A) {
  (void)fn;
  PV *a[7];
  Span at = A->at;
  bind_args(L, A, "input1,input2,target,margin=,size_average=,reduce=,reduction=", a);
  const char *f = "cosine_embedding_loss";
  PV *x1 = tensor(L, at, a[0], f, "input1"), *x2 = tensor(L, at, a[1], f, "input2"), *y = tensor(L, at, a[2], f, "target");
  int red = reduction(L, at, a[6], a[4], a[5], 0);
  int64_t td = y->t->type.ndim;
  if (td > 1) lower_error(L, at, "0D or 1D target tensor expected, multi-target not supported");
  if (x1->t->type.ndim != td + 1 || x2->t->type.ndim != td + 1)
    lower_error(L, at, "%dD target tensor expects %dD input tensors, but found inputs with sizes %s and %s.", (int)td,
                (int)td + 1, shape_str(L, &x1->t->type), shape_str(L, &x2->t->type));
  const double eps = (float)1e-12;   /* PyTorch's EPSILON is a float constant */
  PV *prod = t_reduce(L, at, IR_REDUCE_SUM, MUL(x1, x2), &td, 1, 0, 0);
  PV *m1 = ADD(t_reduce(L, at, IR_REDUCE_SUM, MUL(x1, x1), &td, 1, 0, 0), NUM(eps));
  PV *m2 = ADD(t_reduce(L, at, IR_REDUCE_SUM, MUL(x2, x2), &td, 1, 0, 0), NUM(eps));
  PV *cos = DIV(prod, t_unary(L, at, IR_SQRT, MUL(m1, m2)));
  PV *pos = SUB(NUM(1), cos), *neg = t_clamp(L, at, SUB(cos, NUM(num_or(L, at, a[3], 0, "margin"))), NUM(0), NULL);
  PV *zero = NUM(0);
  PV *out = ADD(t_where(L, at, t_compare(L, at, OP_EQ, y, pv_int(L, 1)), pos, zero),
                t_where(L, at, t_compare(L, at, OP_EQ, y, pv_int(L, -1)), neg, zero));
  return apply_reduction(L, at, out, red);
}

PV *nnf_triplet_margin_loss(L *L, PV *fn, Args *A) {
  (void)fn;
  PV *a[10];
  Span at = A->at;
  bind_args(L, A, "anchor,positive,negative,margin=,p=,eps=,swap=,size_average=,reduce=,reduction=", a);
  const char *f = "triplet_margin_loss";
  PV *an = tensor(L, at, a[0], f, "anchor"), *po = tensor(L, at, a[1], f, "positive"), *ne = tensor(L, at, a[2], f, "negative");
  int red = reduction(L, at, a[9], a[7], a[8], 0);
  int da = an->t->type.ndim, dp = po->t->type.ndim, dn = ne->t->type.ndim;
  if (da != dp || da != dn)
    lower_error(L, at, "The anchor, positive, and negative tensors are expected to have the same number of dimensions, "
                       "but got: anchor %dD, positive %dD, and negative %dD inputs", da, dp, dn);
  if (da != 1 && da != 2)
    lower_error(L, at, "triplet_margin_loss expects 1-D or 2-D inputs, got shape %s", shape_str(L, &an->t->type));
  double p = num_or(L, at, a[4], 2, "p"), eps = num_or(L, at, a[5], 1e-6, "eps");
  PV *dpos = t_pairwise_distance(L, at, an, po, p, eps, 0), *dneg = t_pairwise_distance(L, at, an, ne, p, eps, 0);
  if (a[6] && a[6]->k != PV_NONE && arg_bool(L, at, a[6], "swap"))
    dneg = t_minmax(L, at, IR_MIN, dneg, t_pairwise_distance(L, at, po, ne, p, eps, 0));
  PV *out = t_clamp(L, at, SUB(ADD(NUM(num_or(L, at, a[3], 1, "margin")), dpos), dneg), NUM(0), NULL);
  return apply_reduction(L, at, out, red);
}

PV *nnf_margin_ranking_loss(L *L, PV *fn, Args *A) {
  (void)fn;
  PV *a[7];
  Span at = A->at;
  bind_args(L, A, "input1,input2,target,margin=,size_average=,reduce=,reduction=", a);
  const char *f = "margin_ranking_loss";
  PV *x1 = tensor(L, at, a[0], f, "input1"), *x2 = tensor(L, at, a[1], f, "input2"), *y = tensor(L, at, a[2], f, "target");
  int red = reduction(L, at, a[6], a[4], a[5], 0);
  if (x1->t->type.ndim != x2->t->type.ndim || x1->t->type.ndim != y->t->type.ndim)
    lower_error(L, at, "margin_ranking_loss : All input tensors should have same dimension but got sizes: input1: %s, "
                       "input2: %s, target: %s", shape_str(L, &x1->t->type), shape_str(L, &x2->t->type),
                shape_str(L, &y->t->type));
  PV *v = ADD(MUL(t_unary(L, at, IR_NEG, y), SUB(x1, x2)), NUM(num_or(L, at, a[3], 0, "margin")));
  return apply_reduction(L, at, t_clamp(L, at, v, NUM(0), NULL), red);
}

/* the losses of (input, target) and options */
enum { L_HINGE, L_SOFT_MARGIN, L_HUBER, L_KL_DIV, L_POISSON };

static PV *pair_loss(L *L, Args *A, int kind) {
  static const char *const specs[] = {
      "input,target,margin=,size_average=,reduce=,reduction=",
      "input,target,size_average=,reduce=,reduction=",
      "input,target,reduction=,delta=",
      "input,target,size_average=,reduce=,reduction=,log_target=",
      "input,target,log_input=,full=,size_average=,eps=,reduce=,reduction=",
  };
  static const char *const names[] = {"hinge_embedding_loss", "soft_margin_loss", "huber_loss", "kl_div",
                                      "poisson_nll_loss"};
  PV *a[8];
  Span at = A->at;
  bind_args(L, A, specs[kind], a);
  const char *f = names[kind];
  PV *x = tensor(L, at, a[0], f, "input"), *y = tensor(L, at, a[1], f, "target"), *out;
  int red;
  switch (kind) {
  case L_HINGE: {
    red = reduction(L, at, a[5], a[3], a[4], 0);
    PV *mc = t_clamp(L, at, SUB(NUM(num_or(L, at, a[2], 1, "margin")), x), NUM(0), NULL);
    out = ADD(t_where(L, at, t_compare(L, at, OP_NE, y, pv_int(L, 1)), mc, NUM(0)),
              t_where(L, at, t_compare(L, at, OP_NE, y, pv_int(L, -1)), x, NUM(0)));
    break;
  }
  case L_SOFT_MARGIN:
    red = reduction(L, at, a[4], a[2], a[3], 0);
    out = t_unary(L, at, IR_LOG1P, t_unary(L, at, IR_EXP, MUL(t_unary(L, at, IR_NEG, x), y)));
    break;
  case L_HUBER: {
    red = reduction(L, at, a[2], NULL, NULL, 0);
    double delta = num_or(L, at, a[3], 1, "delta");
    if (delta <= 0) lower_error(L, at, "huber_loss does not support non-positive values for delta.");
    PV *d = SUB(x, y), *ad = t_unary(L, at, IR_ABS, d);
    out = t_where(L, at, t_compare(L, at, OP_LT, ad, NUM(delta)), MUL(MUL(d, d), NUM(0.5)),
                  MUL(SUB(ad, NUM(0.5 * delta)), NUM(delta)));
    break;
  }
  case L_KL_DIV:
    red = reduction(L, at, a[4], a[2], a[3], 1);
    if (a[5] && a[5]->k != PV_NONE && arg_bool(L, at, a[5], "log_target"))
      out = MUL(t_unary(L, at, IR_EXP, y), SUB(y, x));
    else
      out = SUB(t_xlogy(L, at, y, y), MUL(y, x));
    if (red == R_BATCHMEAN) {
      PV *s = t_reduce(L, at, IR_REDUCE_SUM, out, NULL, 0, 0, 0);
      return x->t->type.ndim ? DIV(s, NUM((double)x->t->type.dims[0])) : s;
    }
    break;
  default: {   /* poisson_nll_loss */
    red = reduction(L, at, a[7], a[4], a[6], 0);
    int log_input = !a[2] || a[2]->k == PV_NONE || arg_bool(L, at, a[2], "log_input");
    if (log_input) out = SUB(t_unary(L, at, IR_EXP, x), MUL(y, x));
    else out = SUB(x, MUL(y, t_unary(L, at, IR_LOG, ADD(x, NUM(num_or(L, at, a[5], 1e-8, "eps"))))));
    if (a[3] && a[3]->k != PV_NONE && arg_bool(L, at, a[3], "full")) {
      PV *st = ADD(SUB(MUL(y, t_unary(L, at, IR_LOG, y)), y),
                   MUL(t_unary(L, at, IR_LOG, MUL(y, NUM(2 * M_PI))), NUM(0.5)));
      out = ADD(out, t_where(L, at, t_compare(L, at, OP_LE, y, pv_int(L, 1)), NUM(0), st));
    }
    break;
  }
  }
  return apply_reduction(L, at, out, red);
}

PV *nnf_hinge_embedding_loss(L *L, PV *fn, Args *A) { (void)fn; return pair_loss(L, A, L_HINGE); }
PV *nnf_soft_margin_loss(L *L, PV *fn, Args *A) { (void)fn; return pair_loss(L, A, L_SOFT_MARGIN); }
PV *nnf_huber_loss(L *L, PV *fn, Args *A) { (void)fn; return pair_loss(L, A, L_HUBER); }
PV *nnf_kl_div(L *L, PV *fn, Args *A) { (void)fn; return pair_loss(L, A, L_KL_DIV); }
PV *nnf_poisson_nll_loss(L *L, PV *fn, Args *A) { (void)fn; return pair_loss(L, A, L_POISSON); }
