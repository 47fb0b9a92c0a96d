/* kir.h - the kernel IR: one fused kernel of the schedule as a small tree of
 * loops and statements, between kernels/ (what is fused) and the renderers
 * (codegen_c/render_c.c prints it as C, codegen_cuda as CUDA).
 *
 * It lives in kernels/ because it is built from the schedule and the IR alone
 * and knows no target: a loop says which axes of the kernel's space it runs
 * over and whether its iterations may run in parallel (KIR_PARALLEL) or as
 * vector lanes (KIR_VECTOR); how (OpenMP and its size threshold, a GPU grid,
 * a block per row, --profile's per-thread timing) is the renderer's. Indices
 * are element strides over the space's axes; the renderer names the loop
 * variables, merges axes (C) or flattens them (CUDA). Expressions are the
 * instructions' ops.def templates (ir_elem_template) over operand expressions;
 * values are named by the renderer (ValId here).
 *
 * Built today for KN_ELEM (one KIR_SPACE loop: every input loaded at the
 * element, then each instruction a local or a store) and KN_ROW (a KIR_ROWS
 * loop over the rows, per row the per-row values, accumulator inits and one
 * KIR_ROW loop over the row's elements per phase, then the reductions'
 * results); for data-movement instructions by kir_build_op (kir_ops.c): a KIR_SPACE loop
 * over the result (pad, gather, upsample), or over the fibers along an axis with KIR_SERIAL
 * loops along it and variables carried there (cumsum, argmax, scatter_add; for CPU targets a
 * cumsum or argmax along an axis that is not the last with the last axis's fibers as KIR_LANES
 * inside, an argmax along the last axis over KE_KEY order keys); and for the
 * microkernel calls (one KS_CALL: attention.c's fused attention, gemm.c's GEMM over its batch,
 * conv.c's convolution with its geometry). Arena-allocated (kir_build's arena), no globals. */
#ifndef CTC_KIR_H
#define CTC_KIR_H

#include "kernels.h"

/* An element of an array: its offset is off + sum over the space's axes of st[k] * (the
 * loop variable of axis k); st[k] is 0 for axes it is broadcast over (or not inside).
 * off is nonzero only for a load through a folded slice (KnSchedule.fold: the gate
 * slices of a recurrence read in place), whose strides are its root's. */
typedef struct KirIndex {
  int64_t off;
  int64_t st[IR_MAX_DIMS];
} KirIndex;

typedef enum KirExprKind {
  KE_LIT,      /* v: a scalar IR_CONST (its dtype and fattr give the literal) */
  KE_LOCAL,    /* v's local in the loop body (defined by a KS_LET) */
  KE_LOAD,     /* v[ix] from memory */
  KE_ROWBUF,   /* v's element at the current row position, from its per-row array */
  KE_OP,       /* in's op (its ops.def template per compute type) over arg[0..nargs) */
  /* a data-movement instruction's kernel IR (kir_build_op): computed offsets */
  KE_AXIS,     /* the loop variable of space axis `axis` (an int64) */
  KE_INT,      /* the int64 imm */
  KE_FLT,      /* fimm as a literal of dtype dt */
  KE_BIN,      /* arg[0] bop arg[1], in dtype dt (int64 offsets and conditions, or the element type) */
  KE_SELECT,   /* arg[0] ? arg[1] : arg[2] (only the branch taken is evaluated) */
  KE_LOADAT,   /* v[arg[0]]: an element at a computed offset */
  KE_TABLE,    /* Kir.tables[table] at arg[0]: a table computed at compile time */
  /* a scan's or an arg-reduction's kernel IR (kir_ops.c) */
  KE_VAR,      /* Kir.vars[var]'s current value */
  KE_CAST,     /* arg[0] converted to dt */
  KE_NOT,      /* !arg[0] */
  KE_ISNAN,    /* isnan(arg[0]) */
  KE_KEY       /* arg[0] (a float) as an integer of its width (dt) in the order argmax compares: -0 as +0,
                * a NaN above every number (imm 1) or below (imm -1, argmin's) */
} KirExprKind;

typedef enum KirBinOp { KB_ADD, KB_SUB, KB_MUL, KB_LT, KB_GE, KB_AND, KB_GT, KB_EQ, KB_OR } KirBinOp;

typedef struct KirExpr {
  KirExprKind kind;
  ValId v;
  KirIndex ix;
  const Inst *in;
  int nargs;
  struct KirExpr *arg[3];
  /* KE_AXIS .. KE_TABLE */
  int axis, table;
  int64_t imm;
  double fimm;
  DType dt;
  KirBinOp bop;
  int var;             /* KE_VAR */
} KirExpr;

/* A constant table of a data-movement kernel (an upsample's source indices and weights): n
 * elements of dt, from iv (integers) or fv (floats); the renderer declares it, named from hint. */
typedef struct KirTable {
  const char *hint;
  DType dt;
  int64_t n;
  const int64_t *iv;
  const double *fv;
} KirTable;

/* A variable of a data-movement kernel, assigned in its serial loops (a running sum, the
 * extreme so far and its index): named from hint by the renderer. sum: it accumulates a sum
 * of dt, in the type the target sums dt in (C: double, or float for --freestanding f32;
 * uint64_t for integers, which wrap). */
typedef struct KirVar {
  const char *hint;
  DType dt;
  int sum;
  int64_t lanes;   /* 0, or an array of one per lane of the KIR_LANES loop it is assigned in */
} KirVar;

typedef enum KirStmtKind {
  KS_LOOP,          /* loop over axes [from, to) of the space; body */
  KS_LET,           /* const <v's type> <v's local> = x */
  KS_STORE,         /* v[ix] = x (v stored: a kernel output) */
  KS_ROWBUF_DECL,   /* v's per-row array (a row element read in a later loop) */
  KS_ROWBUF_PUT,    /* v's per-row array at the current position = v's local */
  KS_ACC_INIT,      /* in's accumulator = its initial value (in: a reduction, v its result) */
  KS_ACC,           /* in's accumulator takes x (sum or NaN-propagating max) */
  KS_ACC_DONE,      /* const <v's type> <v's local> = the accumulated value */
  KS_CALL,          /* v = call->fn(call->args...; call->ints, call->real): a microkernel (attention.c) */
  /* data-movement kernels (kir_ops.c) */
  KS_VAR,           /* Kir.vars[var] declared, = x */
  KS_SET,           /* Kir.vars[var] = x */
  KS_IF,            /* if x: body */
  KS_STOREAT        /* v[at] = x: a store at a computed offset */
} KirStmtKind;

/* A microkernel call: arrays read (args), the result (the statement's v), integer
 * arguments (sizes, flags) and one real one (a scale). */
typedef struct KirCall {
  const char *fn;      /* "attention", "attention_bwd", "gemm": the renderer names the function per dtype */
  int nargs, nint;
  ValId args[8];       /* the stored values read (roots of views) */
  int64_t off[8];      /* element offset of each in its root */
  int strided;         /* 1: each array argument is followed by st[i] (strides of its view) */
  int64_t st[8][3];
  int64_t ints[8];
  double real;
  /* "gemm" (gemm.c): a batch of C[M,N] = op(A) op(B) over the space (the result's batch axes):
   * ints are BLAS's transposes ta, tb, then M, N, K, lda, ldb; args[0..1] A and B's roots at
   * off[0..1]; vals[0..1] the operands as staged (a view's pointer is its root's), bst[0] the
   * result's strides over the batch axes, bst[1..2] A's and B's (0 where broadcast); folded: an
   * operand is read through a folded view's strides (KnSchedule.fold) */
  ValId vals[2];
  int64_t bst[3][IR_MAX_DIMS];
  int folded;
  /* "conv2d", "conv2d_bwd_input", "conv2d_bwd_weight" (conv.c): its operands args[0..1] (= vals),
   * its geometry */
  ConvGeom conv;
  /* "gemm", "conv2d*": the low precision both operands' values have (ir_low_operands: 1 bf16,
   * 2 f16, 0 none) */
  int low;
} KirCall;

typedef enum KirLoopKind {
  KIR_SPACE,   /* every element of the space (KN_ELEM) */
  KIR_ROWS,    /* the rows: every axis but the last (KN_ROW) */
  KIR_ROW,     /* the elements of one row: the last axis (inside KIR_ROWS) */
  KIR_SERIAL,  /* axis `from` in order (KIR_REVERSE: from its end), one thread's, inside a KIR_SPACE
                * loop over the axes before it (kir_ops.c: a scan, an arg-reduction, a scatter) */
  KIR_LANES    /* axis `from`, the last, inside a KIR_SERIAL loop (or after it): independent fibers as
                * vector lanes (a CPU cumsum's, argmax's; its variables arrays of lanes) */
} KirLoopKind;

enum { KIR_PARALLEL = 1, KIR_VECTOR = 2, KIR_REVERSE = 4 };

typedef struct KirStmt KirStmt;
typedef Vec(KirStmt *) KirBlock;

struct KirStmt {
  KirStmtKind kind;
  ValId v;
  const Inst *in;
  KirExpr *x;
  KirIndex ix;
  /* KS_LOOP */
  KirLoopKind loop;
  int from, to;        /* axes of the space */
  unsigned marks;      /* KIR_PARALLEL, KIR_VECTOR */
  KirBlock body;
  /* KS_CALL */
  KirCall *call;
  /* KS_VAR, KS_SET: the variable; KS_STOREAT: the offset; a KIR_SERIAL loop: its steps (the
   * space's axis `from` has the longest of the serial loops over it) */
  int var;
  KirExpr *at;
  int64_t n;
};

typedef struct Kir {
  const Func *f;
  const Kernel *kn;
  Type space;
  int64_t rowlen;      /* KN_ROW: the row's length (the space's last dim) */
  KirBlock body;
  const Inst *op;      /* kir_build_op: the instruction (kn NULL) */
  Vec(KirTable) tables;
  Vec(KirVar) vars;
} Kir;

/* The kernel IR of a KN_ELEM or KN_ROW kernel kn of f scheduled in s (a KN_GEMM's
 * epilogue from kn_epilogue is a KN_ELEM kernel too); allocates in a. */
Kir *kir_build(Arena *a, const Func *f, const KnSchedule *s, const Kernel *kn);
/* The kernel IR of data-movement instruction in of f (kir_ops.c): one KIR_SPACE loop over
 * its result, parallel, each element loaded from a computed offset: PAD (every mode), GATHER,
 * UPSAMPLE (nearest and bilinear, its source indices and weights as tables); or a parallel
 * KIR_SPACE loop over the fibers along an axis, each running KIR_SERIAL loops along it:
 * CUMSUM, ARGMAX, SCATTER_ADD. lanes (CPU targets): a CUMSUM along an axis that is not the
 * last runs the last axis's fibers as KIR_LANES inside its serial loop, an ARGMAX too; an ARGMAX
 * along the last axis is two loops along it that vectorise (KE_KEY's maximum, its first
 * position). NULL for any other instruction (or a scalar result, or a literal operand of PAD,
 * GATHER, UPSAMPLE). */
Kir *kir_build_op(Arena *a, const Func *f, const Inst *in, int lanes);
/* The source positions and weights of one axis of an UPSAMPLE from `in` to `out` positions,
 * as PyTorch 1.13 computes them (kir_ops.c); shared with UPSAMPLE_BWD's C loops. */
void kir_upsample_axis(int mode, int align, double scale, int64_t in, int64_t out, DType t, int exact,
                       int64_t *i0, int64_t *i1, double *l0, double *l1);
/* The kernel IR of a KN_OP kernel that is a microkernel call: ATTENTION, ATTENTION_BWD
 * (attention.c), MATMUL (gemm.c, over the space of its batch) and the convolutions (conv.c),
 * one KS_CALL; NULL for any
 * other kernel (or a GEMM operand no strides address). */
Kir *kir_build_call(Arena *a, const Func *f, const KnSchedule *s, const Kernel *kn);
/* The call of instruction in of kernel kn (any kind): its op's builder above; NULL for an op
 * that is no microkernel call. */
Kir *kir_build_inst_call(Arena *a, const Func *f, const KnSchedule *s, const Kernel *kn, const Inst *in);
/* attention.c: the kernel IR of one KS_CALL of fn for instruction in (its result the call's v)
 * over space; the call's fields are the caller's to fill (kir->body.data[0]->call). */
Kir *kir_call_new(Arena *a, const Func *f, const Kernel *kn, const Inst *in, const Type *space, const char *fn);
/* gemm.c: the call of MATMUL in of f (kernel kn, or NULL). */
Kir *kir_build_gemm(Arena *a, const Func *f, const KnSchedule *s, const Kernel *kn, const Inst *in);
/* conv.c: the call of convolution in (CONV2D, CONV2D_BWD_INPUT, CONV2D_BWD_WEIGHT) of f. */
Kir *kir_build_conv(Arena *a, const Func *f, const Kernel *kn, const Inst *in);
/* `--emit kir`: every KN_ELEM and KN_ROW kernel of f as its kernel IR, each instruction
 * kir_build_op covers, each microkernel call, and each KN_GEMM's call and epilogue. */
void kir_print(FILE *out, const Program *p, const Func *f, const KnSchedule *s);

#endif
