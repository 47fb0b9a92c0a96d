/* ad_int.h - internals of autograd_ad: the emission context the rules use. */
#ifndef CTC_AD_INT_H
#define CTC_AD_INT_H

#include "autograd.h"

typedef struct Ad {
  Program *p;
  Func *f;
  Span loc;        /* span of the instruction being differentiated */
  /* reverse mode's rematerialisation (remat.c); NULL/0 elsewhere */
  unsigned char *remat;   /* per forward value: recomputed where backward reads it */
  ValId *clone;           /* per forward value: its clone in this sweep, or -1 */
  int fwd_end, nv0;       /* instructions and values made before the sweep */
} Ad;

/* A VJP rule: given the (copied) forward instruction and the adjoint g of its
 * result, set dargs[k] to the adjoint contribution for operand k, for every k
 * with need[k] set (leave -1 where there is none). Shapes of dargs[k] equal the
 * operand's. */
typedef void (*VjpRule)(Ad *ad, const Inst *in, ValId g, const int *need, ValId *dargs);
extern const VjpRule ad_vjp_rules[IR__COUNT];

/* A JVP rule: given the (copied) forward instruction and the tangents of its
 * operands (-1 where an operand's tangent is zero; at least one is not),
 * return the tangent of the result (-1 if it is zero). */
typedef ValId (*JvpRule)(Ad *ad, const Inst *in, const ValId *t);
extern const JvpRule ad_jvp_rules[IR__COUNT];

/* Elementwise primitives given by their derivatives (ops.def's EW rows, vjp.c):
 * d result / d operand k, or -1 where it is zero; *den is -1, or a divisor that
 * ad_elem_apply divides by (an OVER(n, d) column). */
ValId ad_elem_deriv(Ad *ad, const Inst *in, int k, ValId *den);
/* x * d / den: the VJP applies it to the adjoint, the JVP to a tangent. */
ValId ad_elem_apply(Ad *ad, ValId x, ValId d, ValId den);

/* rematerialisation (remat.c): decide which forward values (the first fwd_end
 * instructions) backward recomputes; ad_remat(v) is v or its clone, emitted
 * at the first read; ad_emit maps every operand through it. */
void ad_remat_init(Ad *ad, int fwd_end);
ValId ad_remat(Ad *ad, ValId v);
/* Drops the clones made so far: after a non-elementwise instruction (which
 * ends the consumer's fused loop), later reads recompute again rather than
 * keep a clone in memory across kernels. */
void ad_remat_forget(Ad *ad);
void ad_remat_free(Ad *ad);

/* emission helpers (reverse.c) */
Type *ad_type(Ad *ad, ValId v);
/* Emits op; it takes from attr (NULL: none) as many attributes as ops.def's
 * nattr column gives for it (ir_op_nattrs). */
ValId ad_emit(Ad *ad, Op op, const ValId *args, int nargs, Type res, const int64_t *attr, const char *name);
ValId ad_const(Ad *ad, DType dt, double v);
int ad_is_const(Ad *ad, ValId v, double *val);      /* v is a CONST instruction's result (its value in *val) */
ValId ad_bin(Ad *ad, Op op, ValId a, ValId b);      /* elementwise, numpy broadcasting */
ValId ad_un(Ad *ad, Op op, ValId a);
ValId ad_cmp(Ad *ad, Op op, ValId a, ValId b);      /* -> bool */
ValId ad_where(Ad *ad, ValId c, ValId a, ValId b);
ValId ad_cast(Ad *ad, ValId a, DType dt);
ValId ad_reshape(Ad *ad, ValId a, const Type *t);
ValId ad_broadcast(Ad *ad, ValId a, const Type *t); /* a broadcast to t's shape */
ValId ad_sum_to(Ad *ad, ValId g, const Type *t);    /* reduce a broadcast adjoint back to t's shape */
ValId ad_zeros(Ad *ad, const Type *t);

/* Test-only hook (gradcheck.c; tests/test_gradcheck.py builds with it to see
 * `./net gradcheck` fail): when the environment variable `env`
 * (CTC_TEST_WRONG_VJP or CTC_TEST_WRONG_JVP) names primitive `op` ("matmul"),
 * returns d * 1.1 (a wrong rule: the adjoint of its first operand, or its
 * tangent), otherwise d itself. Unset, it changes nothing. */
ValId ad_test_wrong_rule(Ad *ad, const char *env, Op op, ValId d);

#endif
