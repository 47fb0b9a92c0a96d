/* quant_c.h - int8 post-training quantization (`ctc build|compile --quantize int8 --calibrate X.npy`):
 * the plan compiler/quantize.c makes from the forward entry, its weights and the calibration data
 * (which instructions become int8 kernels, every scale and zero point, the integer weights and
 * requantization constants, the buffers and their arena offsets), and its C emission (quant_c.c).
 *
 * The scheme is TFLite's int8 one (and CMSIS-NN's, PyTorch's quantize_per_channel for weights):
 *   real = scale * (q - zero_point)
 *   weights: int8 in [-127, 127], symmetric per output channel (zero point 0), scale max|w| / 127;
 *   activations: int8 asymmetric per tensor, from the calibration min/max (widened to hold 0):
 *     scale (max - min) / 255, zero point round(-128 - min / scale);
 *   bias: int32, scale s_in * s_w[c], zero point 0;
 *   Conv2d / Linear: acc = bias[c] + sum (x - zp_in) * w (int32; zp_in folded into the bias as TFLite
 *     and CMSIS-NN do, padding read as zp_in), then
 *     y = clamp(zp_out + requant(acc, M0[c], r[c]), lo, hi), requant(a, M0, r) = (a * M0 + 2^(r-1)) >> r
 *     in int64 (TFLite's single-rounding MultiplyByQuantizedMultiplier), M0 a Q31 multiplier in
 *     [2^30, 2^31) and s_in * s_w[c] / s_out = M0 * 2^-r; a fused ReLU is lo = zp_out (real 0);
 *   max and average pooling and ReLU work on int8 directly (same scale and zero point as their input);
 *   a sum over the trailing axes (a mean, global average pooling): int32 sum of (q - zp_in), requantized;
 *   add: both inputs times 2^20, each scaled to twice the larger input scale (requant), summed and
 *     requantized to the output scale (TFLite's add).
 * Ops without an int8 kernel run in float between a dequantize and a quantize. */
#ifndef CTC_QUANT_C_H
#define CTC_QUANT_C_H

#include <stdio.h>
#include "codegen_c.h"

typedef enum QStepKind {
  QS_QUANTIZE,    /* float -> int8: clamp(round(x / s) + zp) */
  QS_DEQUANTIZE,  /* int8 -> float: (q - zp) * s */
  QS_CONV,        /* int8 conv2d (+ bias, + relu) */
  QS_LINEAR,      /* int8 x[M,K] times W[N,K]^T (+ bias, + relu) */
  QS_MAXPOOL,     /* int8 max pooling */
  QS_AVGPOOL,     /* int8 average pooling (same scale and zero point; rounded half away from zero) */
  QS_SUM,         /* int8 sum over the trailing axes (a mean: the scale folded into mo/ro) */
  QS_ADD,         /* int8 + int8 (+ relu) */
  QS_RELU,        /* int8 max(q, zp) */
  QS_FLOAT,       /* a float op (inst's) on float buffers: no int8 kernel */
  QS_COPY,        /* a float buffer into the caller's output */
} QStepKind;

enum { QB_ARENA, QB_INPUT, QB_OUTPUT };

typedef struct QBuf {
  int q;                 /* 1: int8, 0: float */
  int64_t numel;
  int where, index;      /* QB_*; QB_INPUT / QB_OUTPUT: the argument's position */
  int64_t offset;        /* QB_ARENA: byte offset in the arena */
  double scale;          /* int8 buffers */
  int32_t zp;
  ValId v;               /* the IR value it holds */
  int first, last;       /* the steps that write it and read it last */
} QBuf;

typedef struct QStep {
  QStepKind kind;
  int inst;              /* the IR instruction (model line; QS_FLOAT: the op to run); -1: none */
  int in, in2, out;      /* QBuf indices (-1: unused) */
  Type tin, tout;        /* operand 0's and the result's types */
  int64_t attr[8];       /* conv2d / pooling attributes (ops.def) */
  /* QS_CONV, QS_LINEAR: per output channel (cout) */
  int cout, relu;
  int nfold;             /* QS_CONV, QS_LINEAR: elementwise ops with constants folded in (the bias add: 1) */
  int scratch;           /* QS_CONV: the window buffer (C/G * KH * KW int8, live during the step) */
  int wparam, bparam;    /* Program.params indices of the weight and bias (-1: none) */
  int64_t wnumel;
  const int8_t *w;       /* QS_CONV: [O, C/G, KH, KW]; QS_LINEAR: [N, K] */
  const int32_t *bias;
  const int32_t *mult;   /* M0 */
  const uint8_t *rshift; /* r */
  const double *wscale;
  /* QS_ADD: input 1 and 2 to the common scale, then the sum to the output's; QS_SUM: mo, ro */
  int32_t m1, m2, mo;
  int r1, r2, ro;
  int32_t lo, hi;        /* the output clamp (int8 steps) */
} QStep;

typedef struct QuantPlan {
  Vec(QBuf) bufs;
  Vec(QStep) steps;
  int64_t arena_bytes;   /* RAM: the peak of the buffers' liveness plan */
  int64_t flash_bytes;   /* const arrays: int8 weights, int32 biases and multipliers, shifts */
  int64_t ncalib;        /* calibration samples */
  const char *calib_path;
} QuantPlan;

/* Writes the int8 model.c/.h of entry f (Program.funcs index fi). opt->freestanding: the
 * freestanding pair (no runtime); otherwise a hosted file with the runtime's descriptor and
 * main() under CTC_MAIN (`./net infer`). Returns 0, or -1 after printing the reason. */
int cg_quant_emit(const Program *p, int fi, const QuantPlan *q, const CgOptions *opt, FILE *c, FILE *h,
                  const char *h_name);

#endif
