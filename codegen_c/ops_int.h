/* ops_int.h - what emit_ops.c (the C loops of each primitive) shares with linalg_c.c (the
 * kernel IR's GEMM and convolution calls as C): the line writer, the loop nest and its
 * accesses. Private to those two files. */
#ifndef CTC_OPS_INT_H
#define CTC_OPS_INT_H

#include "cg_int.h"

/* M*N*K from which a GEMM is split over the threads (ctc_gemm_split in kernels.c) */
#define GEMM_SPLIT_WORK 262144.0
#define IDX_CAP 320

typedef long long ll;

static inline void ind(CgFunc *c) { cg_printf(c->out, "%*s", c->ind, ""); }
#define LINE(c, ...) (ind(c), cg_printf((c)->out, __VA_ARGS__))

static inline const Type *ty(const CgFunc *c, ValId v) { return &c->f->values.data[v].type; }

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

#endif
