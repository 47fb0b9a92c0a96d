/* jvp.c - the JVP of every primitive of ir/ops.def (forward mode): one generic
 * rule for its EW rows (from the derivative columns, as the VJP) and one rule
 * per OP row. A rule gets the operands' tangents (-1 = zero) and emits
 * primitives for the result's tangent. As with vjp.c, the table is generated
 * from ops.def, so every primitive has a rule or ctc does not compile. */
#include "ad_int.h"

#define ARG(k) (in->args[k])
#define RES (in->res)
#define TY(v) ad_type(ad, (v))

/* the tangent t, or zeros shaped like v */
static ValId tz(Ad *ad, ValId t, ValId v) { return t >= 0 ? t : ad_zeros(ad, TY(v)); }
/* a tangent broadcast to the result's shape */
static ValId to_res(Ad *ad, const Inst *in, ValId t) { return ad_broadcast(ad, t, TY(RES)); }
static ValId same(Ad *ad, const Inst *in, ValId t) {
  return ad_emit(ad, in->op, &t, 1, *TY(RES), in->attr, "tangent");
}
static ValId mulc(Ad *ad, ValId a, double c) { return ad_bin(ad, IR_MUL, a, ad_const(ad, TY(a)->dtype, c)); }

/* EW rows (ops.def): the sum over operands with a tangent of tk * dk (ad_elem_deriv,
 * the same derivative the VJP uses), broadcast to the result */
static ValId jvp_elem(Ad *ad, const Inst *in, const ValId *t) {
  ValId r = -1;
  for (int k = 0; k < in->nargs; k++) {
    if (t[k] < 0) continue;
    ValId den, dk = ad_elem_deriv(ad, in, k, &den);
    if (dk < 0) continue;
    double c;
    if (r >= 0 && den < 0 && ad_is_const(ad, dk, &c) && c == -1) {
      r = ad_bin(ad, IR_SUB, r, t[k]);   /* r - tk rather than r + -tk */
      continue;
    }
    ValId s = ad_elem_apply(ad, t[k], dk, den);
    r = r < 0 ? s : ad_bin(ad, IR_ADD, r, s);
  }
  return r < 0 ? -1 : to_res(ad, in, r);
}

static ValId jvp_RELU(Ad *ad, const Inst *in, const ValId *t) {
  /* as the VJP: 0 where y <= 0, else t (t at NaN) */
  ValId zero = ad_const(ad, TY(RES)->dtype, 0);
  return ad_where(ad, ad_cmp(ad, IR_CMP_LE, RES, zero), zero, t[0]);
}
static ValId jvp_CAST(Ad *ad, const Inst *in, const ValId *t) {
  return ir_dtype_is_float(TY(RES)->dtype) ? ad_cast(ad, t[0], TY(RES)->dtype) : -1;
}
/* zero tangent: constants */
#define ZERO(ID) \
  static ValId jvp_##ID(Ad *ad, const Inst *in, const ValId *t) { (void)ad; (void)in; (void)t; return -1; }
ZERO(CONST) ZERO(IOTA) ZERO(RAND_UNIFORM)

/* PyTorch's forward-mode rule for maximum/minimum: the mean of the tangents at
 * ties, the winner's tangent elsewhere; where a NaN makes the comparison false,
 * the second operand's (which is not the transpose of the VJP there, in
 * PyTorch either). */
static ValId minmax(Ad *ad, const Inst *in, const ValId *t, Op win0) {
  ValId t0 = tz(ad, t[0], ARG(0)), t1 = tz(ad, t[1], ARG(1));
  ValId tie = ad_cmp(ad, IR_CMP_EQ, ARG(0), ARG(1));
  ValId mean = mulc(ad, ad_bin(ad, IR_ADD, t0, t1), 0.5);
  return ad_where(ad, tie, mean, ad_where(ad, ad_cmp(ad, win0, ARG(0), ARG(1)), t0, t1));
}
static ValId jvp_MAX(Ad *ad, const Inst *in, const ValId *t) { return to_res(ad, in, minmax(ad, in, t, IR_CMP_GT)); }
static ValId jvp_MIN(Ad *ad, const Inst *in, const ValId *t) { return to_res(ad, in, minmax(ad, in, t, IR_CMP_LT)); }
static ValId jvp_WHERE(Ad *ad, const Inst *in, const ValId *t) {
  return to_res(ad, in, ad_where(ad, ARG(0), tz(ad, t[1], ARG(1)), tz(ad, t[2], ARG(2))));
}
static ValId jvp_REDUCE_SUM(Ad *ad, const Inst *in, const ValId *t) { return same(ad, in, t[0]); }
static ValId jvp_REDUCE_MAX(Ad *ad, const Inst *in, const ValId *t) {
  /* the average of the tangents at the tied maxima (matches the VJP); selected
   * with where() as PyTorch's amaxamin_jvp, so an inf/NaN tangent elsewhere
   * does not leak in as inf * 0 */
  DType dt = TY(RES)->dtype;
  ValId eq = ad_cmp(ad, IR_CMP_EQ, ARG(0), RES);
  ValId mask = ad_cast(ad, eq, dt);
  ValId num = ad_where(ad, eq, t[0], ad_const(ad, dt, 0));
  ValId s = ad_emit(ad, IR_REDUCE_SUM, &num, 1, *TY(RES), in->attr, "tangent");
  ValId c = ad_emit(ad, IR_REDUCE_SUM, &mask, 1, *TY(RES), in->attr, "count");
  return ad_bin(ad, IR_DIV, s, c);
}
static ValId jvp_RESHAPE(Ad *ad, const Inst *in, const ValId *t) { return ad_reshape(ad, t[0], TY(RES)); }
static ValId jvp_PERMUTE(Ad *ad, const Inst *in, const ValId *t) { return same(ad, in, t[0]); }
static ValId jvp_BROADCAST(Ad *ad, const Inst *in, const ValId *t) { return to_res(ad, in, t[0]); }
static ValId jvp_SLICE(Ad *ad, const Inst *in, const ValId *t) { return same(ad, in, t[0]); }
static ValId jvp_UNSLICE(Ad *ad, const Inst *in, const ValId *t) { return same(ad, in, t[0]); }
static ValId jvp_CONCAT(Ad *ad, const Inst *in, const ValId *t) {
  ValId *xs = arena_alloc(ad->p->arena, sizeof(ValId) * (size_t)in->nargs);
  for (int k = 0; k < in->nargs; k++) xs[k] = tz(ad, t[k], ARG(k));
  return ad_emit(ad, IR_CONCAT, xs, in->nargs, *TY(RES), in->attr, "tangent");
}
/* bilinear ops: op(da, b) + op(a, db) */
static ValId bilinear(Ad *ad, const Inst *in, const ValId *t) {
  ValId r = -1;
  for (int k = 0; k < 2; k++) {
    if (t[k] < 0) continue;
    ValId x[2] = {ARG(0), ARG(1)};
    x[k] = t[k];
    ValId s = ad_emit(ad, in->op, x, 2, *TY(RES), in->attr, "tangent");
    r = r < 0 ? s : ad_bin(ad, IR_ADD, r, s);
  }
  return r;
}
static ValId jvp_MATMUL(Ad *ad, const Inst *in, const ValId *t) { return bilinear(ad, in, t); }
static ValId jvp_CONV2D(Ad *ad, const Inst *in, const ValId *t) { return bilinear(ad, in, t); }
static ValId jvp_CONV2D_BWD_INPUT(Ad *ad, const Inst *in, const ValId *t) { return bilinear(ad, in, t); }
static ValId jvp_CONV2D_BWD_WEIGHT(Ad *ad, const Inst *in, const ValId *t) { return bilinear(ad, in, t); }
static ValId jvp_MAXPOOL2D(Ad *ad, const Inst *in, const ValId *t) {
  ValId x[2] = {ARG(0), t[0]};
  return ad_emit(ad, IR_MAXPOOL2D_JVP, x, 2, *TY(RES), in->attr, "tangent");
}
/* linear in their second operand; the routing by x is piecewise constant */
static ValId second_linear(Ad *ad, const Inst *in, const ValId *t) {
  if (t[1] < 0) return -1;
  ValId x[2] = {ARG(0), t[1]};
  return ad_emit(ad, in->op, x, 2, *TY(RES), in->attr, "tangent");
}
static ValId jvp_MAXPOOL2D_BWD(Ad *ad, const Inst *in, const ValId *t) { return second_linear(ad, in, t); }
static ValId jvp_MAXPOOL2D_JVP(Ad *ad, const Inst *in, const ValId *t) { return second_linear(ad, in, t); }
static ValId jvp_EMBEDDING_BWD(Ad *ad, const Inst *in, const ValId *t) { return second_linear(ad, in, t); }
static ValId jvp_AVGPOOL2D(Ad *ad, const Inst *in, const ValId *t) { return same(ad, in, t[0]); }
static ValId jvp_AVGPOOL2D_BWD(Ad *ad, const Inst *in, const ValId *t) { return same(ad, in, t[0]); }
static ValId jvp_EMBEDDING(Ad *ad, const Inst *in, const ValId *t) {
  /* linear in the weight; PyTorch's tangent includes the padding row */
  if (t[0] < 0) return -1;
  ValId x[2] = {t[0], ARG(1)};
  return ad_emit(ad, IR_EMBEDDING, x, 2, *TY(RES), in->attr, "tangent");
}
/* linear maps: the same op on the tangent (a constant pad value has none: ad_emit's fattr is 0) */
static ValId jvp_PAD(Ad *ad, const Inst *in, const ValId *t) { return same(ad, in, t[0]); }
static ValId jvp_PAD_BWD(Ad *ad, const Inst *in, const ValId *t) { return same(ad, in, t[0]); }
static ValId jvp_UPSAMPLE(Ad *ad, const Inst *in, const ValId *t) { return same(ad, in, t[0]); }
static ValId jvp_UPSAMPLE_BWD(Ad *ad, const Inst *in, const ValId *t) { return same(ad, in, t[0]); }
static ValId jvp_CUMSUM(Ad *ad, const Inst *in, const ValId *t) { return same(ad, in, t[0]); }
static ValId jvp_GATHER(Ad *ad, const Inst *in, const ValId *t) {
  if (t[0] < 0) return -1;
  ValId x[2] = {t[0], ARG(1)};
  return ad_emit(ad, IR_GATHER, x, 2, *TY(RES), in->attr, "tangent");
}
static ValId jvp_SCATTER_ADD(Ad *ad, const Inst *in, const ValId *t) {
  /* linear in base and src */
  if (t[2] < 0) return to_res(ad, in, t[0]);
  ValId base = t[0] >= 0 ? t[0] : ad_const(ad, TY(RES)->dtype, 0);
  ValId x[3] = {base, ARG(1), t[2]};
  return ad_emit(ad, IR_SCATTER_ADD, x, 3, *TY(RES), in->attr, "tangent");
}
ZERO(ARGMAX)   /* an i64 result: never differentiated */
/* fused attention is made only where no forward sweep follows (ir/attn.c) */
static ValId jvp_ATTENTION(Ad *ad, const Inst *in, const ValId *t) {
  (void)ad; (void)t;
  BUG("'%s' given a tangent: ir_fuse_attention runs only where nothing differentiates again", ir_ops[in->op].name);
}
static ValId jvp_ATTENTION_BWD(Ad *ad, const Inst *in, const ValId *t) { return jvp_ATTENTION(ad, in, t); }
/* the tangent of a bf16 value is bf16, as its cotangent (vjp.c) */
static ValId jvp_ROUND_BF16(Ad *ad, const Inst *in, const ValId *t) { return ad_un(ad, IR_ROUND_BF16, t[0]); }
static ValId jvp_ROUND_F16(Ad *ad, const Inst *in, const ValId *t) { return ad_un(ad, IR_ROUND_F16, t[0]); }
static ValId jvp_DETACH(Ad *ad, const Inst *in, const ValId *t) { return -1; }

const JvpRule ad_jvp_rules[IR__COUNT] = {
#define OP(id, name, nargs, kind, nattr, cexpr) jvp_##id,
#define EW(id, name, nargs, cexpr, dA, dB) jvp_elem,
#include "../ir/ops.def"
#undef OP
};
