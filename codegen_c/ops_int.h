/* ops_int.h - what emit_ops.c (the C loops of each primitive) shares with linalg_c.c (the
 * kernel IR's GEMM and convolution calls as C), resample_c.c (pad's and upsample's
 * gradients) and pool_c.c (pooling and its gradients): the line writer, the loop nest and its
 * accesses. Private to those files. */
#ifndef CTC_OPS_INT_H
#define CTC_OPS_INT_H

#include <string.h>
#include "cg_int.h"

/* M*N*K from which a GEMM is split over the threads (ctc_gemm_split in kernels.c) */
#define GEMM_SPLIT_WORK 262144.0
#define IDX_CAP 320

typedef long long ll;

static inline void ind(CgFunc *c) { cg_printf(c->out, "%*s", c->ind, ""); }
#define LINE(c, ...) (ind(c), cg_printf((c)->out, __VA_ARGS__))

static inline const Type *ty(const CgFunc *c, ValId v) { return &c->f->values.data[v].type; }

/* Loops with fewer elements than this are not worth waking threads for. */
#define OMP_MIN_WORK ((int64_t)1 << 15)
/* The elements from which a loop runs on OpenMP threads. A loop that is all its instruction
 * does is opened through the renderer (cg_par_for, CG_PAR_GRID), which the CUDA target runs
 * over the GPU's grid whatever its size. */
static inline int64_t min_work(const CgFunc *c) { (void)c; return OMP_MIN_WORK; }

/* a double an instruction's attribute holds by its bits */
static inline double attr_double(int64_t bits) {
  double d;
  memcpy(&d, &bits, sizeof d);
  return d;
}

/* t's row-major strides in elements */
static inline void cstrides(const Type *t, int64_t *st) {
  int64_t s = 1;
  for (int i = t->ndim - 1; i >= 0; i--) {
    st[i] = s;
    s *= t->dims[i];
  }
}

/* One array addressed by the nest: element offset + stride per axis. */
typedef struct Acc {
  int64_t off;
  int64_t st[IR_MAX_DIMS];
} Acc;

typedef void (*BodyFn)(CgFunc *c, char idx[][IDX_CAP], void *u);

enum { NEST_OMP = 1, NEST_OMP_ALWAYS = 2, NEST_SIMD = 4, NEST_GRID = 8 };

/* emit_ops.c: a loop nest over dims with its accesses; a pointer into v at element offset idx */
void cg_nest(CgFunc *c, int nd, const int64_t *dims, int na, const Acc *acc, BodyFn body, void *u, int omp, int braces);
void cg_ptr_at(CgFunc *c, Buf *b, ValId v, const char *idx);
/* linalg_c.c: a KN_GEMM kernel (a GEMM and its epilogue per thread's block) */
void cg_emit_gemm_kernel(CgFunc *c, const Kernel *kn);
/* an f32 sum's accumulator type: float under --freestanding's float_acc, else double */
static inline const char *float_acc(const Kernels *k, DType t) { return t == DT_F32 && k && k->float_acc ? "float" : "double"; }
/* a max or sum's starting value */
static inline const char *acc_init(const Inst *in, DType t) {
  if (in->op == IR_REDUCE_SUM) return "0";
  switch (t) {
  case DT_F32: case DT_F64: return "-INFINITY";
  case DT_I64: return "INT64_MIN";
  case DT_I32: return "INT32_MIN";
  default: return "0";
  }
}
/* pool_c.c: max and average pooling and their gradients */
void cg_emit_pool(CgFunc *c, const Inst *in);
void cg_emit_maxpool_bwd(CgFunc *c, const Inst *in);
void cg_emit_avgpool_bwd(CgFunc *c, const Inst *in);
/* resample_c.c: the gradients of reflect/replicate PAD and of UPSAMPLE */
void cg_emit_pad_bwd(CgFunc *c, const Inst *in);
void cg_emit_upsample_bwd(CgFunc *c, const Inst *in);

#endif
