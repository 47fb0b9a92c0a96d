/* quantize.c - int8 post-training quantization of the forward entry (quantize.h; the scheme is
 * in codegen_c/quant_c.h).
 *
 * Calibration runs the float model here, in the compiler, rather than building and running the
 * float program: the IR and the weights are at hand, the ops a quantizable model uses are few,
 * no C compiler or run of the target is needed (a cross build for a microcontroller calibrates on
 * the host as it compiles), and every intermediate value is visible (a generated program returns
 * only its outputs). The interpreter computes in double and knows the ops the plan accepts:
 * conv2d, linear (matmul by a parameter), add, relu, max pooling, reshape, and the float
 * fallbacks tanh, sigmoid, exp, neg and avg pooling. Anything else is a located error.
 *
 * The plan: conv2d and linear take the bias add and the ReLU that follow them when they are
 * their only users (one int8 kernel, the ReLU as the requantization's lower clamp); max pooling,
 * ReLU and the add of two activations are int8 kernels; reshapes are views of their operand's
 * buffer; the float fallbacks read float buffers, so their int8 operands are dequantized into a
 * scratch buffer first and their results quantized where an int8 kernel reads them. The entry's
 * input is quantized on entry, its outputs dequantized into the caller's storage. Buffers are
 * placed first-fit by liveness over the steps (16-byte aligned). */
#include "quantize.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../runtime_min/ctc_rt.h"

typedef long long ll;

static const Value *val(const Func *f, ValId v) { return &f->values.data[v]; }
static const Type *vty(const Func *f, ValId v) { return &f->values.data[v].type; }
static const Inst *def(const Func *f, ValId v) {
  return val(f, v)->kind == V_INST ? &f->insts.data[val(f, v)->def] : NULL;
}
static int is_view_op(Op op) { return op == IR_RESHAPE || op == IR_DETACH; }
/* the value a chain of reshapes/detaches views */
static ValId root(const Func *f, ValId v) {
  for (const Inst *in; (in = def(f, v)) && is_view_op(in->op);) v = in->args[0];
  return v;
}
static int is_float_fallback(Op op) { return op == IR_TANH || op == IR_SIGMOID || op == IR_EXP || op == IR_NEG; }
static int is_const_op(Op op) {   /* ops of constants the interpreter computes (BatchNorm's statistics) */
  return op == IR_CONST || op == IR_ADD || op == IR_SUB || op == IR_MUL || op == IR_DIV || op == IR_SQRT || op == IR_RSQRT;
}
static int needs_libm(Op op) { return op == IR_TANH || op == IR_SIGMOID || op == IR_EXP; }

/* ---- the float model on calibration data ---------------------------------------------- */

typedef struct Interp {
  const Func *f;
  const void *const *w;
  double **v;          /* per value: its data for the current batch (NULL: params, views) */
} Interp;

static const double *data_of(Interp *I, ValId v);

static const double *data_of(Interp *I, ValId v) {
  v = root(I->f, v);
  return I->v[v];
}

/* Runs the entry on the batch in I->v[input]; updates lo/hi of every value. */
static void interp_batch(Interp *I, double *lo, double *hi) {
  const Func *f = I->f;
  for (int k = 0; k < f->insts.len; k++) {
    const Inst *in = &f->insts.data[k];
    if (in->dead || is_view_op(in->op)) continue;
    const Type *ty = vty(f, in->res);
    int64_t n = ir_numel(ty);
    double *y = I->v[in->res];
    const double *args[3] = {NULL, NULL, NULL};
    for (int j = 0; j < in->nargs && j < 3; j++) args[j] = data_of(I, in->args[j]);
    /* the reference evaluator (ir/interp.c), in the entry's float32 arithmetic */
    if (in->nargs > 3 || !ir_eval_inst(f, in, args, y))
      BUG("quantize: the reference evaluator does not know op %s", ir_ops[in->op].name);
    for (int64_t e = 0; e < n; e++) {
      if (y[e] < lo[in->res]) lo[in->res] = y[e];
      if (y[e] > hi[in->res]) hi[in->res] = y[e];
    }
  }
  for (int i = 0; i < f->inputs.len; i++) {
    ValId v = f->inputs.data[i];
    for (int64_t e = 0, n = ir_numel(vty(f, v)); e < n; e++) {
      if (I->v[v][e] < lo[v]) lo[v] = I->v[v][e];
      if (I->v[v][e] > hi[v]) hi[v] = I->v[v][e];
    }
  }
}

/* ---- the plan ----------------------------------------------------------------------- */

typedef struct Q {
  Arena *a;
  Diag *d;
  const Program *p;
  const Func *f;
  const void *const *w;
  QuantPlan *plan;
  const double *lo, *hi;
  int *qb, *fb;        /* per root value: its int8 / float buffer (-1: none yet) */
  int *uses, *user;    /* per value: number of uses (outputs count), the instruction of the last use */
  char *cst;           /* per value: computed from parameters and literals only (no input) */
  double **cdata;      /* per constant root value: its values */
} Q;

/* the int8 parameters of value v's calibrated range */
static void act_params(const Q *q, ValId v, double *scale, int32_t *zp) {
  double mn = q->lo[v] < 0 ? q->lo[v] : 0, mx = q->hi[v] > 0 ? q->hi[v] : 0;
  /* a value that is 0 on every sample (a dead layer): scale 1/255; tiny ranges: at least 2.55e-8, so
   * that the requantization multipliers stay below 2^30 */
  if (!(mx - mn > 0)) mx = mn + 1;
  double s = fmax((mx - mn) / 255.0, 1e-10);
  double z = round(-128.0 - mn / s);
  *scale = s;
  *zp = (int32_t)(z < -128 ? -128 : z > 127 ? 127 : z);
}

static int new_buf(Q *q, int isq, ValId v, int64_t numel, int where, int index) {
  QBuf b = {0};
  b.q = isq;
  b.numel = numel;
  b.where = where;
  b.index = index;
  b.v = v;
  b.first = b.last = -1;
  if (isq) act_params(q, v, &b.scale, &b.zp);
  vec_push(q->a, &q->plan->bufs, b);
  return q->plan->bufs.len - 1;
}

static QStep *new_step(Q *q, QStepKind kind, int inst, int in, int out) {
  QStep s;
  memset(&s, 0, sizeof s);
  s.kind = kind;
  s.inst = inst;
  s.in = in;
  s.in2 = -1;
  s.out = out;
  s.wparam = s.bparam = s.scratch = -1;
  s.lo = -128;
  s.hi = 127;
  vec_push(q->a, &q->plan->steps, s);
  return &q->plan->steps.data[q->plan->steps.len - 1];
}

static int get_q(Q *q, ValId v) {
  ValId r = root(q->f, v);
  if (q->qb[r] >= 0) return q->qb[r];
  if (q->fb[r] < 0) BUG("quantize: value %d has no buffer", (int)r);
  int b = new_buf(q, 1, r, ir_numel(vty(q->f, r)), QB_ARENA, 0);
  QStep *s = new_step(q, QS_QUANTIZE, -1, q->fb[r], b);
  s->tout = *vty(q->f, r);
  return q->qb[r] = b;
}

static int get_f(Q *q, ValId v) {
  ValId r = root(q->f, v);
  if (q->fb[r] >= 0) return q->fb[r];
  if (q->qb[r] < 0) BUG("quantize: value %d has no buffer", (int)r);
  int b = new_buf(q, 0, r, ir_numel(vty(q->f, r)), QB_ARENA, 0);
  QStep *s = new_step(q, QS_DEQUANTIZE, -1, q->qb[r], b);
  s->tout = *vty(q->f, r);
  return q->fb[r] = b;
}

/* M = M0 * 2^-r with M0 in [2^30, 2^31); r in [1, 62] (an error for M >= 2^30) */
static int multiplier(double m, int32_t *m0, int *r) {
  if (!(m > 0)) {
    *m0 = 0, *r = 1;
    return 0;
  }
  int e;
  double fr = frexp(m, &e);   /* m = fr * 2^e, fr in [0.5, 1) */
  ll q = llround(fr * 2147483648.0);
  if (q == 2147483648LL) q /= 2, e++;
  int rr = 31 - e;
  if (rr < 1) return -1;
  while (rr > 62) q >>= 1, rr--;   /* tiny multipliers: fewer bits */
  *m0 = (int32_t)q, *r = rr;
  return 0;
}

/* the values of a constant operand b that is one number per channel (axis of res, cout channels)
 * or a single number (*stride 0); NULL for anything else */
static const double *chan_const(const Q *q, ValId b, int64_t cout, const Type *res, int axis, int *stride) {
  const Type *tb = vty(q->f, b);
  if (!q->cst[b] || !q->cdata[root(q->f, b)]) return NULL;
  if (ir_numel(tb) == 1) {
    *stride = 0;
    return q->cdata[root(q->f, b)];
  }
  int off = res->ndim - tb->ndim;
  if (off < 0 || ir_numel(tb) != cout) return NULL;
  for (int k = 0; k < tb->ndim; k++)
    if (tb->dims[k] != (k + off == axis ? cout : 1)) return NULL;
  *stride = 1;
  return q->cdata[root(q->f, b)];
}

static int is_const(const Q *q, ValId v) { return q->cst[v]; }

/* the only user of v, when it is an instruction of op `op`, else NULL */
static const Inst *sole_user(const Q *q, ValId v, Op op) {
  if (q->uses[v] != 1 || q->user[v] < 0) return NULL;
  const Inst *u = &q->f->insts.data[q->user[v]];
  return u->op == op ? u : NULL;
}

static int fail(Q *q, Span at, const char *msg, const char *what) {
  diag_error(q->d, at, "--quantize int8: %s%s", msg, what ? what : "");
  return -1;
}

/* conv2d / linear at instruction k, with its bias and relu when they are its only users */
static int plan_layer(Q *q, int k, char *consumed) {
  const Func *f = q->f;
  const Inst *in = &f->insts.data[k];
  ValId x = in->args[0], wv = in->args[1];
  int conv = in->op == IR_CONV2D;
  const Type *tw = vty(f, wv), *ty = vty(f, in->res);
  if (val(f, wv)->kind != V_PARAM || tw->dtype != DT_F32)
    return fail(q, in->loc, conv ? "conv2d's weight must be a float32 parameter"
                                 : "a matmul has an int8 kernel as a linear layer only: an activation times a 2-D "
                                   "float32 parameter", NULL);
  if (!conv && (tw->ndim != 2 || in->attr[0] || vty(f, x)->dtype != DT_F32))
    return fail(q, in->loc, "a matmul needs a 2-D parameter as its second operand (a linear layer)", NULL);
  int64_t cout = conv ? tw->dims[0] : ty->dims[ty->ndim - 1];
  int64_t K = conv ? tw->dims[1] * tw->dims[2] * tw->dims[3] : vty(f, x)->dims[vty(f, x)->ndim - 1];
  int axis = conv ? 1 : ty->ndim - 1;
  if (K > 65536)   /* |acc| <= 2^15 K + |bias|: int32 holds it */
    return fail(q, in->loc, "more than 65536 products per output do not fit in the int32 accumulator", NULL);
  /* the elementwise ops with constants that follow, while each is the only user of the value before
   * it: a per-channel affine map y = A[c] * conv + B[c] (the bias add, an eval-mode BatchNorm's
   * subtract, multiply, add), folded into the weights and the bias as TFLite's converter does */
  ValId last = in->res;
  int bparam = -1, relu = 0, nfold = 0;
  double *Am = arena_alloc(q->a, sizeof(double) * (size_t)cout), *Bm = arena_alloc(q->a, sizeof(double) * (size_t)cout);
  for (int64_t c = 0; c < cout; c++) Am[c] = 1, Bm[c] = 0;
  for (;;) {
    if (q->uses[last] != 1 || q->user[last] < 0) break;
    const Inst *u = &f->insts.data[q->user[last]];
    if ((u->op != IR_ADD && u->op != IR_SUB && u->op != IR_MUL && u->op != IR_DIV) || !ir_type_eq(vty(f, u->res), ty) ||
        u->args[0] == u->args[1])
      break;
    int first = u->args[0] == last, st = 0;
    ValId other = first ? u->args[1] : u->args[0];
    const double *cv = chan_const(q, other, cout, ty, axis, &st);
    if (!cv || (u->op == IR_DIV && !first)) break;
    int ok = 1;
    for (int64_t c = 0; c < cout; c++) ok &= isfinite(cv[c * st]) && (u->op != IR_DIV || cv[c * st] != 0);
    if (!ok) break;
    if (bparam < 0 && u->op == IR_ADD && val(f, root(f, other))->kind == V_PARAM) bparam = val(f, root(f, other))->index;
    for (int64_t c = 0; c < cout; c++) {
      double k2 = cv[c * st];
      switch (u->op) {
      case IR_ADD: Bm[c] += k2; break;
      case IR_SUB:
        if (first) Bm[c] -= k2;
        else Am[c] = -Am[c], Bm[c] = k2 - Bm[c];
        break;
      case IR_MUL: Am[c] *= k2, Bm[c] *= k2; break;
      default: Am[c] /= k2, Bm[c] /= k2; break;
      }
    }
    consumed[q->user[last]] = 1;
    last = u->res;
    nfold++;
  }
  if (sole_user(q, last, IR_RELU)) {
    consumed[q->user[last]] = 1;
    last = f->insts.data[q->user[last]].res;
    relu = 1;
  }
  int bin = get_q(q, x);
  int bout = new_buf(q, 1, last, ir_numel(ty), QB_ARENA, 0);
  q->qb[last] = bout;
  const QBuf *bi = &q->plan->bufs.data[bin], *bo = &q->plan->bufs.data[bout];
  double sin = bi->scale, sout = bo->scale;
  int32_t zout = bo->zp;
  /* weights: per output channel, symmetric */
  const float *w = q->w[val(f, wv)->index];
  int8_t *wq = arena_alloc(q->a, (size_t)(cout * K));
  int32_t *bq = arena_alloc(q->a, sizeof *bq * (size_t)cout), *mq = arena_alloc(q->a, sizeof *mq * (size_t)cout);
  uint8_t *rq = arena_alloc(q->a, (size_t)cout);
  double *ws = arena_alloc(q->a, sizeof *ws * (size_t)cout);
  for (int64_t c = 0; c < cout; c++) {
    /* element t of channel c: conv [O, C/G*KH*KW]; linear attr[1]: W[N, K], else W[K, N] */
#define WAT(c, t) (Am[c] * (double)(conv || in->attr[1] ? w[(c) * K + (t)] : w[(t) * cout + (c)]))
    double mx = 0;
    for (int64_t t = 0; t < K; t++) mx = fmax(mx, fabs(WAT(c, t)));
    double s = mx > 0 ? mx / 127.0 : 1.0;
    ws[c] = s;
    /* as PyTorch's quantize_per_channel: w * (1 / scale) in float, rounded half to even */
    const float inv = 1.0f / (float)s;
    for (int64_t t = 0; t < K; t++) {
      double v = nearbyintf((float)WAT(c, t) * inv);
      wq[c * K + t] = (int8_t)(v < -127 ? -127 : v > 127 ? 127 : v);
    }
#undef WAT
    double bv = round(Bm[c] / (sin * s));
    bq[c] = (int32_t)(bv < -2147483647.0 ? -2147483647.0 : bv > 2147483647.0 ? 2147483647.0 : bv);
    int r;
    if (multiplier(sin * s / sout, &mq[c], &r) < 0)
      return fail(q, in->loc, "the requantization multiplier is too large (an output range far smaller than its input's)",
                  NULL);
    rq[c] = (uint8_t)r;
  }
  /* the input's zero point folds into the bias, bias[c] - zp_in * sum_t w[c, t] (TFLite and CMSIS-NN
   * do the same); the convolution's window buffer holds the zero point where it reads padding, so
   * that holds for padded convolutions too */
  for (int64_t c = 0; c < cout; c++) {
    int64_t sum = 0;
    for (int64_t t = 0; t < K; t++) sum += wq[c * K + t];
    int64_t v = (int64_t)bq[c] - (int64_t)bi->zp * sum;
    if (fabs(Bm[c] / (sin * ws[c])) > 1e9 || (v < 0 ? -v : v) + 32768 * K > 2147483647LL)
      return fail(q, in->loc, "the bias is too large for an int32 accumulator at these scales (bias / (s_in s_w) with "
                  "the input's zero point folded in, plus the products)", NULL);
    bq[c] = (int32_t)v;
  }
  int patch = -1;   /* a convolution's window, gathered once per output position for all its channels */
  if (conv) patch = new_buf(q, 1, in->res, tw->dims[1] * tw->dims[2] * tw->dims[3], QB_ARENA, 0);
  QStep *s = new_step(q, conv ? QS_CONV : QS_LINEAR, k, bin, bout);
  s->nfold = nfold;
  s->scratch = patch;
  s->tin = *vty(f, x);
  s->tout = *ty;
  memcpy(s->attr, in->attr, sizeof s->attr);
  s->cout = (int)cout;
  s->relu = relu;
  s->wparam = val(f, wv)->index;
  s->bparam = bparam;
  s->wnumel = cout * K;
  s->w = wq, s->bias = bq, s->mult = mq, s->rshift = rq, s->wscale = ws;
  s->lo = relu ? (zout > -128 ? zout : -128) : -128;
  s->hi = 127;
  q->plan->flash_bytes += cout * K + 4 * cout + 4 * cout + cout;
  return 0;
}

/* a sum over the trailing axes (a mean, global average pooling: the multiplications by positive
 * scalar constants that follow fold into its requantization) */
static int plan_sum(Q *q, int k, char *consumed) {
  const Func *f = q->f;
  const Inst *in = &f->insts.data[k];
  const Type *tx = vty(f, in->args[0]), *ty = vty(f, in->res);
  int64_t mask = in->attr[0], low = 0;
  while (low < tx->ndim && !(mask >> low & 1)) low++;
  if (mask != (((int64_t)1 << tx->ndim) - 1) - (((int64_t)1 << low) - 1) || low == tx->ndim)
    return fail(q, in->loc, "a sum has an int8 kernel over the last axes only (a mean over H and W: global average pooling)",
                NULL);
  int64_t inner = ir_numel(tx) / ir_numel(ty);
  if (inner > ((int64_t)1 << 23))
    return fail(q, in->loc, "a sum of more than 2^23 int8 values does not fit in its int32 accumulator", NULL);
  ValId last = in->res;
  double A = 1;
  int st = 0;
  for (;;) {
    if (q->uses[last] != 1 || q->user[last] < 0) break;
    const Inst *u = &f->insts.data[q->user[last]];
    if ((u->op != IR_MUL && u->op != IR_DIV) || !ir_type_eq(vty(f, u->res), ty) || u->args[0] == u->args[1]) break;
    int first = u->args[0] == last;
    const double *cv = chan_const(q, first ? u->args[1] : u->args[0], 1, ty, 0, &st);
    if (!cv || !(cv[0] > 0) || !isfinite(cv[0]) || (u->op == IR_DIV && !first)) break;
    A = u->op == IR_MUL ? A * cv[0] : A / cv[0];
    consumed[q->user[last]] = 1;
    last = u->res;
  }
  int bi = get_q(q, in->args[0]);
  int bo = new_buf(q, 1, last, ir_numel(ty), QB_ARENA, 0);
  q->qb[last] = bo;
  const QBuf *I = &q->plan->bufs.data[bi], *O = &q->plan->bufs.data[bo];
  QStep *s = new_step(q, QS_SUM, k, bi, bo);
  s->tin = *tx;
  s->tout = *ty;
  s->nfold = A != 1;
  if (multiplier(I->scale * A / O->scale, &s->mo, &s->ro) < 0)
    return fail(q, in->loc, "the sum's requantization multiplier is too large", NULL);
  return 0;
}

static int plan_add(Q *q, int k, char *consumed) {
  const Func *f = q->f;
  const Inst *in = &f->insts.data[k];
  const Type *ty = vty(f, in->res);
  if (is_const(q, in->args[0]) || is_const(q, in->args[1]) || !ir_type_eq(vty(f, in->args[0]), ty) ||
      !ir_type_eq(vty(f, in->args[1]), ty))
    return fail(q, in->loc, "an add has an int8 kernel for two activations of the same shape only (and as the bias of a "
                "conv2d or linear layer)", NULL);
  int ba = get_q(q, in->args[0]), bb = get_q(q, in->args[1]);
  ValId last = in->res;
  int relu = 0;
  if (sole_user(q, last, IR_RELU)) {
    consumed[q->user[last]] = 1;
    last = f->insts.data[q->user[last]].res;
    relu = 1;
  }
  int bo = new_buf(q, 1, last, ir_numel(ty), QB_ARENA, 0);
  q->qb[last] = bo;
  const QBuf *A = &q->plan->bufs.data[ba], *B = &q->plan->bufs.data[bb], *O = &q->plan->bufs.data[bo];
  double twice = 2 * fmax(A->scale, B->scale);
  QStep *s = new_step(q, QS_ADD, k, ba, bo);
  s->in2 = bb;
  s->tin = s->tout = *ty;
  if (multiplier(A->scale / twice, &s->m1, &s->r1) < 0 || multiplier(B->scale / twice, &s->m2, &s->r2) < 0 ||
      multiplier(twice / ((double)(1 << 20) * O->scale), &s->mo, &s->ro) < 0)
    return fail(q, in->loc, "the add's requantization multiplier is too large", NULL);
  s->lo = relu ? (O->zp > -128 ? O->zp : -128) : -128;
  s->relu = relu;
  return 0;
}

static int64_t buf_bytes(const QBuf *b) { return (b->numel * (b->q ? 1 : 4) + 15) / 16 * 16; }

/* first fit in the order `ord`: the lowest offset clear of every placed buffer live at the same
 * time; returns the peak */
static int64_t first_fit(QuantPlan *pl, const int *ord, int n) {
  int64_t peak = 0;
  for (int ii = 0; ii < n; ii++) {
    QBuf *b = &pl->bufs.data[ord[ii]];
    int64_t bytes = buf_bytes(b), off = 0;
    for (int moved = 1; moved;) {
      moved = 0;
      for (int jj = 0; jj < ii; jj++) {
        const QBuf *o = &pl->bufs.data[ord[jj]];
        if (o->last < b->first || b->last < o->first) continue;
        if (off < o->offset + buf_bytes(o) && o->offset < off + bytes) off = o->offset + buf_bytes(o), moved = 1;
      }
    }
    b->offset = off;
    if (off + bytes > peak) peak = off + bytes;
  }
  return peak;
}

/* liveness over steps, then first fit (16-byte aligned) in step order and largest first: the
 * lower peak */
static void place(Arena *a, QuantPlan *pl) {
  for (int s = 0; s < pl->steps.len; s++) {
    const QStep *st = &pl->steps.data[s];
    int ins[2] = {st->in, st->in2};
    for (int j = 0; j < 2; j++)
      if (ins[j] >= 0) pl->bufs.data[ins[j]].last = s;
    if (pl->bufs.data[st->out].first < 0) pl->bufs.data[st->out].first = s;
    if (st->scratch >= 0) pl->bufs.data[st->scratch].first = pl->bufs.data[st->scratch].last = s;
  }
  int *ord = arena_alloc(a, sizeof(int) * (size_t)(pl->bufs.len + 1)), n = 0;
  for (int i = 0; i < pl->bufs.len; i++) {
    QBuf *b = &pl->bufs.data[i];
    if (b->where != QB_ARENA) continue;
    if (b->last < b->first) b->last = b->first;
    ord[n++] = i;
  }
  int64_t p1 = first_fit(pl, ord, n);
  int64_t *off1 = arena_alloc(a, sizeof(int64_t) * (size_t)(n + 1));
  for (int i = 0; i < n; i++) off1[i] = pl->bufs.data[ord[i]].offset;
  int *ord2 = arena_alloc(a, sizeof(int) * (size_t)(n + 1));
  memcpy(ord2, ord, sizeof(int) * (size_t)n);
  for (int i = 1; i < n; i++)   /* largest first, stable (insertion sort: a few dozen buffers) */
    for (int j = i; j > 0 && buf_bytes(&pl->bufs.data[ord2[j]]) > buf_bytes(&pl->bufs.data[ord2[j - 1]]); j--) {
      int t = ord2[j];
      ord2[j] = ord2[j - 1];
      ord2[j - 1] = t;
    }
  int64_t p2 = first_fit(pl, ord2, n);
  if (p1 <= p2)
    for (int i = 0; i < n; i++) pl->bufs.data[ord[i]].offset = off1[i];
  int64_t peak = p1 <= p2 ? p1 : p2;
  pl->arena_bytes = peak > 0 ? peak : 16;
}

static int read_calib(Q *q, const char *path, const Type *tin, double **out, int64_t *count, int *rc) {
  ctc_tensor t;
  ctc_error err = {0};
  memset(&t, 0, sizeof t);
  int r = ctc_npy_read(path, &t, &err);
  if (r) {
    diag_plain(q->d, "--calibrate: %s", err.msg);
    *rc = r == CTC_ERR_IO || r == CTC_ERR_NOMEM ? CTC_EXIT_IO : CTC_EXIT_USER;
    return -1;
  }
  int ok = t.ndim == tin->ndim && t.ndim >= 1 && t.shape[0] >= 1 &&
           (t.dtype == CTC_F32 || t.dtype == CTC_F64 || t.dtype == CTC_U8);
  for (int k = 1; ok && k < t.ndim; k++) ok = t.shape[k] == tin->dims[k];
  if (!ok) {
    char want[256], got[256];
    int n = snprintf(want, sizeof want, "[S");
    for (int k = 1; k < tin->ndim && n > 0 && n < 200; k++) n += snprintf(want + n, sizeof want - (size_t)n, ",%lld", (ll)tin->dims[k]);
    snprintf(want + n, sizeof want - (size_t)n, "]");
    diag_plain(q->d, "--calibrate: %s holds %s%s; the model's input needs samples of shape %s (S samples as the first "
               "axis; f32, f64 or u8, read as x/255)", path, ctc_dtype_name(t.dtype),
               ctc_format_shape(got, sizeof got, t.ndim, t.shape), want);
    ctc_tensor_free(&t);
    *rc = CTC_EXIT_USER;
    return -1;
  }
  int64_t n = ctc_tensor_numel(&t);
  double *x = malloc(sizeof *x * (size_t)n);
  if (!x) BUG("out of memory");
  for (int64_t e = 0; e < n; e++) {
    if (t.dtype == CTC_F32) {
      float v;
      memcpy(&v, (const char *)t.data + 4 * e, 4);
      x[e] = v;
    } else if (t.dtype == CTC_F64) {
      memcpy(&x[e], (const char *)t.data + 8 * e, 8);
    } else {
      x[e] = ((const unsigned char *)t.data)[e] / 255.0;
    }
    if (!isfinite(x[e])) {
      diag_plain(q->d, "--calibrate: %s: element %lld is not finite", path, (ll)e);
      free(x);
      ctc_tensor_free(&t);
      *rc = CTC_EXIT_USER;
      return -1;
    }
  }
  *count = t.shape[0];
  ctc_tensor_free(&t);
  *out = x;
  return 0;
}

QuantPlan *quant_plan(Arena *a, Diag *d, const Program *p, int fi, const void *const *weights, const char *calib,
                      int no_libm, int *rc) {
  const Func *f = p->funcs.data[fi];
  Q q = {a, d, p, f, weights, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL};
  *rc = CTC_EXIT_USER;
  q.plan = arena_alloc(a, sizeof *q.plan);
  memset(q.plan, 0, sizeof *q.plan);
  q.plan->calib_path = calib;
  int nv = f->values.len;
  if (f->inputs.len != 1 || vty(f, f->inputs.data[0])->dtype != DT_F32 || vty(f, f->inputs.data[0])->ndim < 1) {
    diag_error(d, f->loc, "--quantize int8: entry '%s' must take one float32 tensor (it takes %d inputs)", f->name,
               f->inputs.len);
    return NULL;
  }
  for (int i = 0; i < f->outputs.len; i++)
    if (vty(f, f->outputs.data[i])->dtype != DT_F32) {
      diag_error(d, f->loc, "--quantize int8: entry '%s' must return float32 tensors", f->name);
      return NULL;
    }
  q.uses = arena_alloc(a, sizeof(int) * (size_t)nv);
  q.user = arena_alloc(a, sizeof(int) * (size_t)nv);
  for (int v = 0; v < nv; v++) q.user[v] = -1, q.uses[v] = 0;
  for (int i = 0; i < f->outputs.len; i++) q.uses[f->outputs.data[i]] += 1;
  /* constants: values of parameters and literals only */
  q.cst = arena_alloc(a, (size_t)nv + 1);
  for (int v = 0; v < nv; v++) q.cst[v] = val(f, v)->kind == V_PARAM;
  for (int k = 0; k < f->insts.len; k++) {
    const Inst *in = &f->insts.data[k];
    int c = !in->dead && (is_view_op(in->op) || is_const_op(in->op));
    for (int j = 0; j < in->nargs && c; j++) c = q.cst[in->args[j]];
    q.cst[in->res] = (char)c;
  }
  /* every op must have an int8 kernel or a float fallback, or compute a constant; the parameters it
   * reads must be float32 */
  for (int k = 0; k < f->insts.len; k++) {
    const Inst *in = &f->insts.data[k];
    if (in->dead) continue;
    for (int j = 0; j < in->nargs; j++) q.uses[in->args[j]]++, q.user[in->args[j]] = k;
    Op op = in->op;
    int ok = op == IR_CONV2D || op == IR_MATMUL || op == IR_ADD || op == IR_RELU || op == IR_MAXPOOL2D ||
             op == IR_AVGPOOL2D || op == IR_REDUCE_SUM ||
             is_view_op(op) || is_float_fallback(op) || is_const_op(op);
    if (!ok) {
      fail(&q, in->loc, "no int8 kernel or float fallback for op ", ir_ops[op].name);
      return NULL;
    }
    if (!ir_dtype_is_float(vty(f, in->res)->dtype) || vty(f, in->res)->dtype != DT_F32) {
      fail(&q, in->loc, "a float32 model is needed: this op's result is ", ir_dtype_name(vty(f, in->res)->dtype));
      return NULL;
    }
    if (no_libm && needs_libm(op)) {
      fail(&q, in->loc, "--no-libm: the float fallback of this op needs libm: ", ir_ops[op].name);
      return NULL;
    }
    if (is_float_fallback(op) && is_const(&q, in->args[0])) {
      fail(&q, in->loc, "an op of constants has no int8 kernel: ", ir_ops[op].name);
      return NULL;
    }
  }
  for (int v = 0; v < nv; v++)   /* the parameters the entry reads */
    if (val(f, v)->kind == V_PARAM && vty(f, v)->dtype != DT_F32) {
      const Param *pr = &p->params.data[val(f, v)->index];
      diag_error(d, pr->loc, "--quantize int8: parameter '%s' is %s (float32 models only)", pr->name,
                 ir_dtype_name(pr->type.dtype));
      return NULL;
    }
  /* calibration */
  const Type *tin = vty(f, f->inputs.data[0]);
  int64_t B = tin->dims[0], per = ir_numel(tin) / B, S = 0;
  double *samples = NULL;
  if (read_calib(&q, calib, tin, &samples, &S, rc) < 0) return NULL;
  double *lo = arena_alloc(a, sizeof *lo * (size_t)nv), *hi = arena_alloc(a, sizeof *hi * (size_t)nv);
  for (int v = 0; v < nv; v++) lo[v] = INFINITY, hi[v] = -INFINITY;
  Interp I = {f, NULL, calloc((size_t)nv, sizeof(double *))};
  double **wd = calloc((size_t)p->params.len + 1, sizeof(double *));
  if (!I.v || !wd) BUG("out of memory");
  for (int v = 0; v < nv; v++) {
    const Value *x = val(f, v);
    if (x->kind == V_PARAM) {
      int pi = x->index;
      if (!wd[pi]) {
        int64_t n = ir_numel(&p->params.data[pi].type);
        wd[pi] = malloc(sizeof(double) * (size_t)n);
        for (int64_t e = 0; e < n; e++) wd[pi][e] = ((const float *)weights[pi])[e];
      }
      I.v[v] = wd[pi];
    } else if (x->kind == V_INPUT || (x->kind == V_INST && !is_view_op(f->insts.data[x->def].op))) {
      I.v[v] = malloc(sizeof(double) * (size_t)ir_numel(&x->type));
      if (!I.v[v]) BUG("out of memory");
    }
  }
  ValId xin = f->inputs.data[0];
  for (int64_t s0 = 0; s0 < S; s0 += B) {   /* a last partial batch repeats its samples (min/max unchanged) */
    for (int64_t b = 0; b < B; b++) memcpy(I.v[xin] + b * per, samples + ((s0 + b < S ? s0 + b : s0)) * per,
                                           sizeof(double) * (size_t)per);
    interp_batch(&I, lo, hi);
  }
  q.cdata = arena_alloc(a, sizeof(double *) * (size_t)nv);   /* the constants' values, kept */
  for (int v = 0; v < nv; v++) {
    q.cdata[v] = NULL;
    if (!q.cst[v] || root(f, v) != v || !I.v[v]) continue;
    size_t bytes = sizeof(double) * (size_t)ir_numel(vty(f, v));
    q.cdata[v] = arena_alloc(a, bytes);
    memcpy(q.cdata[v], I.v[v], bytes);
  }
  for (int v = 0; v < nv; v++)
    if (val(f, v)->kind != V_PARAM) free(I.v[v]);
  for (int i = 0; i < p->params.len; i++) free(wd[i]);
  free(wd);
  free(I.v);
  free(samples);
  /* views share their root's range */
  for (int v = 0; v < nv; v++) {
    ValId r = root(f, v);
    if (r != v) lo[v] = lo[r], hi[v] = hi[r];
  }
  q.lo = lo, q.hi = hi;
  q.plan->ncalib = S;
  /* the steps */
  q.qb = arena_alloc(a, sizeof(int) * (size_t)nv);
  q.fb = arena_alloc(a, sizeof(int) * (size_t)nv);
  for (int v = 0; v < nv; v++) q.qb[v] = q.fb[v] = -1;
  q.fb[xin] = new_buf(&q, 0, xin, ir_numel(tin), QB_INPUT, 0);
  char *consumed = arena_alloc(a, (size_t)f->insts.len + 1);
  memset(consumed, 0, (size_t)f->insts.len + 1);
  for (int k = 0; k < f->insts.len; k++) {
    const Inst *in = &f->insts.data[k];
    if (in->dead || consumed[k] || is_view_op(in->op) || q.cst[in->res]) continue;
    if ((in->op == IR_CONV2D || in->op == IR_MATMUL) && q.cst[in->args[0]]) {
      fail(&q, in->loc, "a conv2d or matmul of constants has no int8 kernel", NULL);
      return NULL;
    }
    if (is_const_op(in->op) && in->op != IR_ADD) {
      fail(&q, in->loc, "no int8 kernel for this elementwise op of an activation: ", ir_ops[in->op].name);
      diag_note(d, in->loc, "an elementwise op with a per-channel constant folds into the conv2d or linear layer before it "
                "when that layer's result (after its bias) is its only operand use (an eval-mode BatchNorm)");
      return NULL;
    }
    int r = 0;
    switch (in->op) {
    case IR_CONV2D: case IR_MATMUL: r = plan_layer(&q, k, consumed); break;
    case IR_ADD: r = plan_add(&q, k, consumed); break;
    case IR_REDUCE_SUM:
      if (is_const(&q, in->args[0])) {
        fail(&q, in->loc, "an op of constants has no int8 kernel: ", ir_ops[in->op].name);
        return NULL;
      }
      r = plan_sum(&q, k, consumed);
      break;
    case IR_RELU: case IR_MAXPOOL2D: case IR_AVGPOOL2D: {
      if (is_const(&q, in->args[0])) {
        fail(&q, in->loc, "an op of constants has no int8 kernel: ", ir_ops[in->op].name);
        return NULL;
      }
      int bi = get_q(&q, in->args[0]);
      QBuf b = q.plan->bufs.data[bi];   /* same scale and zero point as the input */
      int bo = new_buf(&q, 1, in->res, ir_numel(vty(f, in->res)), QB_ARENA, 0);
      q.plan->bufs.data[bo].scale = b.scale, q.plan->bufs.data[bo].zp = b.zp;
      q.qb[in->res] = bo;
      QStep *s = new_step(&q, in->op == IR_RELU ? QS_RELU : in->op == IR_MAXPOOL2D ? QS_MAXPOOL : QS_AVGPOOL, k, bi, bo);
      s->tin = *vty(f, in->args[0]);
      s->tout = *vty(f, in->res);
      memcpy(s->attr, in->attr, sizeof s->attr);
      s->lo = b.zp;
      break;
    }
    default: {   /* a float fallback */
      int bi = get_f(&q, in->args[0]);
      int bo = new_buf(&q, 0, in->res, ir_numel(vty(f, in->res)), QB_ARENA, 0);
      q.fb[in->res] = bo;
      QStep *s = new_step(&q, QS_FLOAT, k, bi, bo);
      s->tin = *vty(f, in->args[0]);
      s->tout = *vty(f, in->res);
      memcpy(s->attr, in->attr, sizeof s->attr);
      break;
    }
    }
    if (r < 0) return NULL;
  }
  for (int i = 0; i < f->outputs.len; i++) {
    ValId v = f->outputs.data[i], r = root(f, v);
    if (q.cst[v]) {
      diag_error(d, f->loc, "--quantize int8: entry '%s' returns a constant (output %d)", f->name, i);
      return NULL;
    }
    int bo = new_buf(&q, 0, v, ir_numel(vty(f, v)), QB_OUTPUT, i);
    if (q.fb[r] < 0 && q.qb[r] >= 0) {
      QStep *s = new_step(&q, QS_DEQUANTIZE, -1, q.qb[r], bo);
      s->tout = *vty(f, v);
    } else {
      QStep *s = new_step(&q, QS_COPY, -1, get_f(&q, v), bo);
      s->tout = *vty(f, v);
    }
  }
  place(a, q.plan);
  *rc = 0;
  return q.plan;
}

void quant_print_stats(Arena *a, FILE *out, const char *file, const Program *p, int fi, const QuantPlan *q,
                       const MemPlan *plan) {
  int64_t nparam = 0, fbytes = 0;   /* fbytes: the float parameters the entry reads */
  for (int i = 0; i < p->params.len; i++) nparam += ir_numel(&p->params.data[i].type);
  fprintf(out, "ctc: %s: %lld parameters, int8 build of entry %s (%d steps, calibrated on %lld samples)\n", file,
          (ll)nparam, p->funcs.data[fi]->name, q->steps.len, (ll)q->ncalib);
  fprintf(out, "ctc: int8: flash %lld bytes of weights (const arrays; code not counted), RAM %lld bytes (arena: the "
               "int8 activations' peak)\n", (ll)q->flash_bytes, (ll)q->arena_bytes);
  const Func *f = p->funcs.data[fi];
  char *seen = arena_alloc(a, (size_t)p->params.len + 1);
  memset(seen, 0, (size_t)p->params.len + 1);
  for (int v = 0; v < f->values.len; v++) {
    const Value *x = &f->values.data[v];
    if (x->kind != V_PARAM || seen[x->index]) continue;
    seen[x->index] = 1;
    fbytes += ir_numel(&x->type) * (int64_t)ir_dtype_size(x->type.dtype);
  }
  fprintf(out, "ctc: float32 (the same entry freestanding with --embed-weights): flash %lld bytes, RAM %lld bytes\n",
          (ll)fbytes, (ll)plan->funcs[fi].peak);
}
