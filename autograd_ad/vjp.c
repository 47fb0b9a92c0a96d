#include <string.h>
/* vjp.c - the VJP of every primitive of ir/ops.def: one generic rule for its
 * EW rows (g times the row's derivative columns, which ad_elem_deriv below
 * evaluates for jvp.c too) and one rule per OP row. Each rule emits only
 * primitives, so the reverse sweep is ordinary IR that later passes optimise
 * (and that can itself be differentiated where its primitives have rules).
 * The table at the bottom is built from ops.def: a primitive without a rule is
 * a compile error of ctc, not a silent zero gradient. */
#include <math.h>
#include "ad_int.h"

/* ---- elementwise primitives given by their derivatives (ops.def's EW rows) ---- */

/* The derivative columns of ops.def, evaluated: these macros are the language
 * the columns are written in (ops.def's header lists them). */
ValId ad_elem_deriv(Ad *ad, const Inst *in, int k, ValId *den) {
  *den = -1;
#define A (in->args[0])
#define B (in->args[1])
#define R (in->res)
#define K(c) ad_const(ad, ad_type(ad, in->res)->dtype, (c))
#define ONE K(1)
#define ZERO K(0)
#define NODIFF (-1)
#define OVER(n, d) (*den = (d), (n))
#define NEG(x) ad_un(ad, IR_NEG, (x))
#define EXP(x) ad_un(ad, IR_EXP, (x))
#define LOG(x) ad_un(ad, IR_LOG, (x))
#define SIN(x) ad_un(ad, IR_SIN, (x))
#define COS(x) ad_un(ad, IR_COS, (x))
#define RSQRT(x) ad_un(ad, IR_RSQRT, (x))
#define SINH(x) ad_un(ad, IR_SINH, (x))
#define COSH(x) ad_un(ad, IR_COSH, (x))
#define TRUNC(x) ad_un(ad, IR_TRUNC, (x))
#define ADD(x, y) ad_bin(ad, IR_ADD, (x), (y))
#define SUB(x, y) ad_bin(ad, IR_SUB, (x), (y))
#define MUL(x, y) ad_bin(ad, IR_MUL, (x), (y))
#define DIV(x, y) ad_bin(ad, IR_DIV, (x), (y))
#define POW(x, y) ad_bin(ad, IR_POW, (x), (y))
#define FLOORDIV(x, y) ad_bin(ad, IR_FLOORDIV, (x), (y))
#define BCE_GRAD(x, y) ad_bin(ad, IR_BCE_GRAD, (x), (y))
#define EQ(x, y) ad_cmp(ad, IR_CMP_EQ, (x), (y))
#define LT(x, y) ad_cmp(ad, IR_CMP_LT, (x), (y))
#define GT(x, y) ad_cmp(ad, IR_CMP_GT, (x), (y))
#define GE(x, y) ad_cmp(ad, IR_CMP_GE, (x), (y))
#define WHERE(c, x, y) ad_where(ad, (c), (x), (y))
  switch (in->op) {
#define OP(id, name, nargs, kind, nattr, cexpr)
#define EW(id, name, nargs, cexpr, dA, dB) \
  case IR_##id: return k == 0 ? (ValId)(dA) : (ValId)(dB);
#include "../ir/ops.def"
#undef OP
  default: BUG("ad_elem_deriv: '%s' has no derivative columns", ir_ops[in->op].name);
  }
#undef A
#undef B
#undef R
#undef K
#undef ONE
#undef ZERO
#undef NODIFF
#undef OVER
#undef NEG
#undef EXP
#undef LOG
#undef SIN
#undef COS
#undef RSQRT
#undef SINH
#undef COSH
#undef TRUNC
#undef ADD
#undef SUB
#undef MUL
#undef DIV
#undef POW
#undef FLOORDIV
#undef BCE_GRAD
#undef EQ
#undef LT
#undef GT
#undef GE
#undef WHERE
}

ValId ad_elem_apply(Ad *ad, ValId x, ValId d, ValId den) {
  double c = 0;
  int unit = ad_is_const(ad, d, &c) && (c == 1 || c == -1);
  if (!unit) x = ad_bin(ad, IR_MUL, x, d);
  else if (c == -1) x = ad_un(ad, IR_NEG, x);
  if (den >= 0) x = ad_bin(ad, IR_DIV, x, den);
  return x;
}

/* operand k's adjoint: sum_to(g * dk) (the operand may have been broadcast) */
static void vjp_elem(Ad *ad, const Inst *in, ValId g, const int *need, ValId *d) {
  for (int k = 0; k < in->nargs; k++) {
    if (!need[k]) continue;
    ValId den, dk = ad_elem_deriv(ad, in, k, &den);
    if (dk >= 0) d[k] = ad_sum_to(ad, ad_elem_apply(ad, g, dk, den), ad_type(ad, in->args[k]));
  }
}

/* ---- hand-written rules ------------------------------------------------------ */

#define ARG(k) (in->args[k])
#define RES (in->res)
#define TY(v) ad_type(ad, (v))

static void vjp_RELU(Ad *ad, const Inst *in, ValId g, const int *need, ValId *d) {
  /* PyTorch's threshold_backward(g, y, 0): 0 where y <= 0, else g (g at NaN) */
  ValId zero = ad_const(ad, TY(g)->dtype, 0);
  d[0] = ad_where(ad, ad_cmp(ad, IR_CMP_LE, RES, zero), zero, g);
}
static void vjp_CAST(Ad *ad, const Inst *in, ValId g, const int *need, ValId *d) {
  d[0] = ad_cast(ad, g, TY(ARG(0))->dtype);
}
/* torch.maximum / torch.minimum: ties share g evenly; an operand gets nothing
 * only where it loses (lose0/lose1 compare a with b), so a NaN on either side
 * sends g to both, as in PyTorch. */
static void minmax(Ad *ad, const Inst *in, ValId g, const int *need, ValId *d, Op lose0, Op lose1) {
  DType dt = TY(g)->dtype;
  ValId zero = ad_const(ad, dt, 0);
  ValId tie = ad_cmp(ad, IR_CMP_EQ, ARG(0), ARG(1));
  ValId half = ad_bin(ad, IR_MUL, g, ad_const(ad, dt, 0.5));
  if (need[0])
    d[0] = ad_sum_to(ad, ad_where(ad, tie, half, ad_where(ad, ad_cmp(ad, lose0, ARG(0), ARG(1)), zero, g)), TY(ARG(0)));
  if (need[1])
    d[1] = ad_sum_to(ad, ad_where(ad, tie, half, ad_where(ad, ad_cmp(ad, lose1, ARG(0), ARG(1)), zero, g)), TY(ARG(1)));
}
static void vjp_MAX(Ad *ad, const Inst *in, ValId g, const int *need, ValId *d) {
  minmax(ad, in, g, need, d, IR_CMP_LT, IR_CMP_GT);
}
static void vjp_MIN(Ad *ad, const Inst *in, ValId g, const int *need, ValId *d) {
  minmax(ad, in, g, need, d, IR_CMP_GT, IR_CMP_LT);
}
/* constants have no gradient (their operands are not reached) */
#define NO_GRAD(ID) \
  static void vjp_##ID(Ad *ad, const Inst *in, ValId g, const int *need, ValId *d) { (void)ad; (void)in; (void)g; (void)need; (void)d; }
NO_GRAD(CONST) NO_GRAD(IOTA) NO_GRAD(RAND_UNIFORM)

static void vjp_WHERE(Ad *ad, const Inst *in, ValId g, const int *need, ValId *d) {
  ValId zero = ad_const(ad, TY(g)->dtype, 0);
  if (need[1]) d[1] = ad_sum_to(ad, ad_where(ad, ARG(0), g, zero), TY(ARG(1)));
  if (need[2]) d[2] = ad_sum_to(ad, ad_where(ad, ARG(0), zero, g), TY(ARG(2)));
}
static void vjp_REDUCE_SUM(Ad *ad, const Inst *in, ValId g, const int *need, ValId *d) {
  d[0] = ad_broadcast(ad, g, TY(ARG(0)));
}
static void vjp_REDUCE_MAX(Ad *ad, const Inst *in, ValId g, const int *need, ValId *d) {
  /* like torch.amax: the gradient is shared evenly between tied maxima */
  DType dt = TY(g)->dtype;
  ValId mask = ad_cast(ad, ad_cmp(ad, IR_CMP_EQ, ARG(0), RES), dt);
  Type kd = *TY(RES);
  ValId cnt = ad_emit(ad, IR_REDUCE_SUM, &mask, 1, kd, in->attr, "count");
  d[0] = ad_bin(ad, IR_MUL, ad_bin(ad, IR_DIV, g, cnt), mask);
}
static void vjp_RESHAPE(Ad *ad, const Inst *in, ValId g, const int *need, ValId *d) {
  d[0] = ad_reshape(ad, g, TY(ARG(0)));
}
static void vjp_PERMUTE(Ad *ad, const Inst *in, ValId g, const int *need, ValId *d) {
  int n = TY(RES)->ndim;
  int64_t inv[IR_MAX_DIMS];
  for (int i = 0; i < n; i++) inv[in->attr[i]] = i;
  d[0] = ad_emit(ad, IR_PERMUTE, &g, 1, *TY(ARG(0)), inv, "grad");
}
static void vjp_BROADCAST(Ad *ad, const Inst *in, ValId g, const int *need, ValId *d) {
  d[0] = ad_sum_to(ad, g, TY(ARG(0)));
}
static void vjp_SLICE(Ad *ad, const Inst *in, ValId g, const int *need, ValId *d) {
  d[0] = ad_emit(ad, IR_UNSLICE, &g, 1, *TY(ARG(0)), in->attr, "grad");
}
static void vjp_UNSLICE(Ad *ad, const Inst *in, ValId g, const int *need, ValId *d) {
  d[0] = ad_emit(ad, IR_SLICE, &g, 1, *TY(ARG(0)), in->attr, "grad");
}
static void vjp_CONCAT(Ad *ad, const Inst *in, ValId g, const int *need, ValId *d) {
  int64_t axis = in->attr[0], off = 0;
  int nd = TY(RES)->ndim;
  for (int k = 0; k < in->nargs; k++) {
    Type t = *TY(ARG(k));
    if (need[k]) {
      int64_t attr[2 * IR_MAX_DIMS];
      for (int i = 0; i < nd; i++) {
        attr[2 * i] = i == axis ? off : 0;
        attr[2 * i + 1] = 1;
      }
      d[k] = ad_emit(ad, IR_SLICE, &g, 1, t, attr, "grad");
    }
    off += t.dims[axis];
  }
}
/* C = op(A) op(B) with op = transpose when the flag is set; batch dims broadcast. */
static void vjp_MATMUL(Ad *ad, const Inst *in, ValId g, const int *need, ValId *d) {
  int ta = (int)in->attr[0], tb = (int)in->attr[1];
  ValId A = ARG(0), B = ARG(1);
  Type tA = *TY(A), tB = *TY(B), tg = *TY(g);
  if (need[0]) {
    int64_t f[2];
    ValId x[2];
    if (!ta) { x[0] = g; x[1] = B; f[0] = 0; f[1] = !tb; }   /* dA = g op(B)^T */
    else     { x[0] = B; x[1] = g; f[0] = tb; f[1] = 1; }    /* dA = op(B) g^T */
    Type r = tg;
    r.dims[r.ndim - 2] = tA.dims[tA.ndim - 2];
    r.dims[r.ndim - 1] = tA.dims[tA.ndim - 1];
    d[0] = ad_sum_to(ad, ad_emit(ad, IR_MATMUL, x, 2, r, f, "grad"), &tA);
  }
  if (need[1]) {
    if (tB.ndim == 2 && tA.ndim > 2 && !ta) {
      /* a shared weight: fold the batch into the rows, one GEMM */
      int64_t rows = ir_numel(&tA) / tA.dims[tA.ndim - 1];
      Type a2 = tA, g2 = tg;
      a2.ndim = g2.ndim = 2;
      a2.dims[0] = g2.dims[0] = rows;
      a2.dims[1] = tA.dims[tA.ndim - 1];
      g2.dims[1] = tg.dims[tg.ndim - 1];
      ValId A2 = ad_reshape(ad, A, &a2), G2 = ad_reshape(ad, g, &g2);
      int64_t f[2] = {1, 0};
      ValId x[2] = {tb ? G2 : A2, tb ? A2 : G2};
      d[1] = ad_emit(ad, IR_MATMUL, x, 2, tB, f, "grad");
    } else {
      int64_t f[2];
      ValId x[2];
      if (!tb) { x[0] = A; x[1] = g; f[0] = !ta; f[1] = 0; } /* dB = op(A)^T g */
      else     { x[0] = g; x[1] = A; f[0] = 1; f[1] = ta; }  /* dB = g^T op(A) */
      Type r = tg;
      r.dims[r.ndim - 2] = tB.dims[tB.ndim - 2];
      r.dims[r.ndim - 1] = tB.dims[tB.ndim - 1];
      d[1] = ad_sum_to(ad, ad_emit(ad, IR_MATMUL, x, 2, r, f, "grad"), &tB);
    }
  }
}
static void vjp_CONV2D(Ad *ad, const Inst *in, ValId g, const int *need, ValId *d) {
  if (need[0]) {
    ValId x[2] = {g, ARG(1)};
    d[0] = ad_emit(ad, IR_CONV2D_BWD_INPUT, x, 2, *TY(ARG(0)), in->attr, "grad");
  }
  if (need[1]) {
    ValId x[2] = {ARG(0), g};
    d[1] = ad_emit(ad, IR_CONV2D_BWD_WEIGHT, x, 2, *TY(ARG(1)), in->attr, "grad");
  }
}
static void vjp_MAXPOOL2D(Ad *ad, const Inst *in, ValId g, const int *need, ValId *d) {
  ValId x[2] = {ARG(0), g};
  d[0] = ad_emit(ad, IR_MAXPOOL2D_BWD, x, 2, *TY(ARG(0)), in->attr, "grad");
}
static void vjp_AVGPOOL2D(Ad *ad, const Inst *in, ValId g, const int *need, ValId *d) {
  d[0] = ad_emit(ad, IR_AVGPOOL2D_BWD, &g, 1, *TY(ARG(0)), in->attr, "grad");
}
static void vjp_EMBEDDING(Ad *ad, const Inst *in, ValId g, const int *need, ValId *d) {
  /* the padding index (attr[0], attr[1]) carries over: its row gets no gradient */
  if (need[0]) {
    ValId x[2] = {ARG(1), g};
    d[0] = ad_emit(ad, IR_EMBEDDING_BWD, x, 2, *TY(ARG(0)), in->attr, "grad");
  }
}
/* The gradient primitives are linear in their adjoint operand (and bilinear for
 * the conv ones); their VJPs are the transposed linear maps, which keeps the
 * table closed under differentiation (second order: reverse over reverse). */
static void vjp_CONV2D_BWD_INPUT(Ad *ad, const Inst *in, ValId g, const int *need, ValId *d) {
  /* y = conv^T(gy, w):  d/dgy = conv(g, w),  d/dw = conv2d_bwd_weight(g, gy) */
  if (need[0]) {
    ValId x[2] = {g, ARG(1)};
    d[0] = ad_emit(ad, IR_CONV2D, x, 2, *TY(ARG(0)), in->attr, "grad");
  }
  if (need[1]) {
    ValId x[2] = {g, ARG(0)};
    d[1] = ad_emit(ad, IR_CONV2D_BWD_WEIGHT, x, 2, *TY(ARG(1)), in->attr, "grad");
  }
}
static void vjp_CONV2D_BWD_WEIGHT(Ad *ad, const Inst *in, ValId g, const int *need, ValId *d) {
  /* y = sum x (x) gy:  d/dx = conv2d_bwd_input(gy, g),  d/dgy = conv(x, g) */
  if (need[0]) {
    ValId x[2] = {ARG(1), g};
    d[0] = ad_emit(ad, IR_CONV2D_BWD_INPUT, x, 2, *TY(ARG(0)), in->attr, "grad");
  }
  if (need[1]) {
    ValId x[2] = {ARG(0), g};
    d[1] = ad_emit(ad, IR_CONV2D, x, 2, *TY(ARG(1)), in->attr, "grad");
  }
}
static void vjp_MAXPOOL2D_BWD(Ad *ad, const Inst *in, ValId g, const int *need, ValId *d) {
  /* linear in gy (routing fixed by x, piecewise constant in x) */
  if (need[1]) {
    ValId x[2] = {ARG(0), g};
    d[1] = ad_emit(ad, IR_MAXPOOL2D_JVP, x, 2, *TY(ARG(1)), in->attr, "grad");
  }
}
static void vjp_MAXPOOL2D_JVP(Ad *ad, const Inst *in, ValId g, const int *need, ValId *d) {
  if (need[1]) {
    ValId x[2] = {ARG(0), g};
    d[1] = ad_emit(ad, IR_MAXPOOL2D_BWD, x, 2, *TY(ARG(1)), in->attr, "grad");
  }
}
static void vjp_AVGPOOL2D_BWD(Ad *ad, const Inst *in, ValId g, const int *need, ValId *d) {
  d[0] = ad_emit(ad, IR_AVGPOOL2D, &g, 1, *TY(ARG(0)), in->attr, "grad");
}
static void vjp_EMBEDDING_BWD(Ad *ad, const Inst *in, ValId g, const int *need, ValId *d) {
  /* the transpose of a scatter-add is a gather; positions holding the padding
   * index were not scattered, so they gather zero */
  if (need[1]) {
    ValId x[2] = {g, ARG(0)};
    d[1] = ad_emit(ad, IR_EMBEDDING, x, 2, *TY(ARG(1)), NULL, "grad");
    if (in->attr[0]) {
      Type it = *TY(ARG(0));
      ValId pad = ad_cmp(ad, IR_CMP_EQ, ARG(0), ad_const(ad, DT_I64, (double)in->attr[1]));
      it.dims[it.ndim++] = 1;
      pad = ad_reshape(ad, pad, &it);
      d[1] = ad_where(ad, pad, ad_const(ad, TY(g)->dtype, 0), d[1]);
    }
  }
}
/* pad and upsample are linear maps; their gradient primitives are their
 * transposes, so each pair is closed under differentiation. Constant padding's
 * transpose reads the interior back (a SLICE); the padding value has no
 * gradient. */
static void vjp_PAD(Ad *ad, const Inst *in, ValId g, const int *need, ValId *d) {
  if (in->attr[0] == 0) {
    int64_t attr[2 * IR_MAX_DIMS];
    for (int i = 0; i < TY(RES)->ndim; i++) attr[2 * i] = in->attr[1 + i], attr[2 * i + 1] = 1;
    d[0] = ad_emit(ad, IR_SLICE, &g, 1, *TY(ARG(0)), attr, "grad");
  } else {
    d[0] = ad_emit(ad, IR_PAD_BWD, &g, 1, *TY(ARG(0)), in->attr, "grad");
  }
}
static void vjp_PAD_BWD(Ad *ad, const Inst *in, ValId g, const int *need, ValId *d) {
  d[0] = ad_emit(ad, IR_PAD, &g, 1, *TY(ARG(0)), in->attr, "grad");
}
static void vjp_UPSAMPLE(Ad *ad, const Inst *in, ValId g, const int *need, ValId *d) {
  d[0] = ad_emit(ad, IR_UPSAMPLE_BWD, &g, 1, *TY(ARG(0)), in->attr, "grad");
}
static void vjp_UPSAMPLE_BWD(Ad *ad, const Inst *in, ValId g, const int *need, ValId *d) {
  d[0] = ad_emit(ad, IR_UPSAMPLE, &g, 1, *TY(ARG(0)), in->attr, "grad");
}
/* cumsum is linear: its transpose sums from the other end */
static void vjp_CUMSUM(Ad *ad, const Inst *in, ValId g, const int *need, ValId *d) {
  int64_t at[2] = {in->attr[0], !in->attr[1]};
  d[0] = ad_emit(ad, IR_CUMSUM, &g, 1, *TY(ARG(0)), at, "grad");
}
/* gather and scatter_add are each other's transposes (index_select and
 * take_along_dim are gathers: their gradient adds up repeated indices) */
static void vjp_GATHER(Ad *ad, const Inst *in, ValId g, const int *need, ValId *d) {
  if (need[0]) {
    ValId x[3] = {ad_const(ad, TY(g)->dtype, 0), ARG(1), g};
    d[0] = ad_emit(ad, IR_SCATTER_ADD, x, 3, *TY(ARG(0)), in->attr, "grad");
  }
}
static void vjp_SCATTER_ADD(Ad *ad, const Inst *in, ValId g, const int *need, ValId *d) {
  if (need[0]) d[0] = ad_sum_to(ad, g, TY(ARG(0)));
  if (need[2]) {
    ValId x[2] = {g, ARG(1)};
    d[2] = ad_emit(ad, IR_GATHER, x, 2, *TY(ARG(2)), in->attr, "grad");
  }
}
/* an i64 result: never differentiated (the sweeps skip non-float results) */
NO_GRAD(ARGMAX)
/* fused attention (ir/attn.c): attention_bwd gives dq, dk, dv stacked on a new first
 * axis, each taken out by a slice (a contiguous third) and a reshape */
static void vjp_ATTENTION(Ad *ad, const Inst *in, ValId g, const int *need, ValId *d) {
  ValId x[5] = {ARG(0), ARG(1), ARG(2), RES, g};
  Type tq = *TY(ARG(0)), tb = tq;
  memmove(tb.dims + 1, tb.dims, sizeof(int64_t) * (size_t)tq.ndim);
  tb.dims[0] = 3;
  tb.ndim++;
  ValId b = ad_emit(ad, IR_ATTENTION_BWD, x, 5, tb, in->attr, "attention_grad");
  ad->f->insts.data[ad->f->values.data[b].def].fattr = in->fattr;
  for (int k = 0; k < 3; k++) {
    if (!need[k]) continue;
    int64_t at[2 * IR_MAX_DIMS];
    for (int i = 0; i < tb.ndim; i++) at[2 * i] = i == 0 ? k : 0, at[2 * i + 1] = 1;
    Type ts = tb;
    ts.dims[0] = 1;
    d[k] = ad_reshape(ad, ad_emit(ad, IR_SLICE, &b, 1, ts, at, "grad"), &tq);
  }
}
/* made only for the first-order sweep of a training step (ir/attn.c), never differentiated */
static void vjp_ATTENTION_BWD(Ad *ad, const Inst *in, ValId g, const int *need, ValId *d) {
  (void)ad; (void)g; (void)need; (void)d;
  BUG("attention_bwd differentiated ('%s'): ir_fuse_attention runs only where nothing differentiates again",
      ir_ops[in->op].name);
}
/* detach(): a constant to differentiation */
/* the cotangent of a bf16 value is bf16 (PyTorch's autocast backward) */
static void vjp_ROUND_BF16(Ad *ad, const Inst *in, ValId g, const int *need, ValId *d) {
  d[0] = ad_un(ad, IR_ROUND_BF16, g);
}
/* the cotangent of an f16 value is f16 (an overflow there is the inf GradScaler finds) */
static void vjp_ROUND_F16(Ad *ad, const Inst *in, ValId g, const int *need, ValId *d) {
  d[0] = ad_un(ad, IR_ROUND_F16, g);
}
static void vjp_DETACH(Ad *ad, const Inst *in, ValId g, const int *need, ValId *d) {}

const VjpRule ad_vjp_rules[IR__COUNT] = {
#define OP(id, name, nargs, kind, nattr, cexpr) vjp_##id,
#define EW(id, name, nargs, cexpr, dA, dB) vjp_elem,
#include "../ir/ops.def"
#undef OP
};
