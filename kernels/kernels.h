/* kernels.h - the kernel (schedule) layer between ir/ and the emitters.
 *
 * kn_schedule partitions an entry's instructions (after DCE) into kernels: a
 * kernel is what one emitter writes as one loop nest (codegen_c) or one
 * __global__ function (the planned CUDA target). Kernels are contiguous runs
 * of the instruction order, so a kernel index is also a time step for the
 * memory plan: ir_plan_memory_hints() takes KnSchedule.hints (per instruction
 * its kernel, per value whether it lives only inside its kernel).
 *
 * Kinds:
 *   KN_ELEM  a chain of K_ELEM instructions with one result shape (`space`);
 *            operands broadcast numpy-style; every intermediate used only
 *            inside the kernel is a scalar local of the loop body (no storage).
 *   KN_OP    one instruction with its own emitter (GEMM, reduction, conv ...).
 *   KN_VIEW  a view (reshape/detach of a value in memory) or a scalar
 *            constant: no code.
 *
 * Fusion rule (KN_ELEM): an elementwise instruction joins the open kernel when
 * its result shape is the kernel's space, each operand is a literal, a value of
 * this kernel (read as its local, at the same element) or memory written by an
 * earlier kernel; chains have no length limit. A value is
 * an output (stored) when it is used by another kernel, viewed, returned or a
 * parameter update. */
#ifndef CTC_KERNELS_H
#define CTC_KERNELS_H

#include "../ir/ir.h"

typedef enum KnKind { KN_ELEM, KN_OP, KN_VIEW } KnKind;

typedef struct Kernel {
  KnKind kind;
  Type space;          /* iteration space: the shape its loop nest runs over (the result's) */
  int first, last;     /* its instructions: insts[first..last] of the Func, in order */
  Vec(ValId) inputs;   /* values read from memory (not literals), each once */
  Vec(ValId) outputs;  /* values it stores */
} Kernel;

typedef struct KnSchedule {
  Vec(Kernel) kernels;
  int *kernel_of;      /* per instruction: its kernel */
  PlanHints hints;     /* for ir_plan_memory_hints: step = kernel_of, nostore = internal values */
  int ncode;           /* kernels that emit code (KN_ELEM + KN_OP) */
} KnSchedule;

/* Partitions f's instructions; fuse = 0 gives one kernel per instruction
 * (the unfused reference, `ctc --no-fuse`). Allocates in p->arena. */
KnSchedule *kn_schedule(const Program *p, const Func *f, int fuse);
/* Whether v lives only inside its kernel (a scalar local, no storage). */
static inline int kn_internal(const KnSchedule *s, ValId v) { return s->hints.nostore[v] != 0; }
/* `--emit kernels`: the partition, one block per kernel, with model lines. */
void kn_print(FILE *out, const Program *p, const Func *f, const KnSchedule *s);

#endif
