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
 *   KN_ROW   reductions over the last axis of `space` (or over several trailing axes of the
 *            values, merged into the space's last: Kernel.merge) with their elementwise
 *            prologue (ops computing the reduced operand) and epilogue (ops
 *            using the reduced values broadcast back over the row): softmax,
 *            log_softmax, layer norm, mean/var, cross-entropy. Per row (an
 *            OpenMP iteration; a thread block on a GPU), `nloops` loops over
 *            the row's elements: a reduction runs in its operand's loop, and
 *            ops that need its value in later ones. Values of the row that a
 *            later loop reads stay in a per-row array (no arena storage).
 *   KN_GEMM  a MATMUL that is one GEMM call (2-D, or a batch folded into its rows)
 *            with the elementwise chain after it as its epilogue (bias, activation,
 *            residual): each thread computes its block of the GEMM and then runs the
 *            epilogue over that block while it is in cache. Epilogue operands read
 *            from memory are of the result's shape, a row along its last axis (a
 *            bias) or a scalar (kn_epilogue_operand); the GEMM's result is stored,
 *            epilogue values used only inside are locals (the CUDA emitter runs
 *            the epilogue as its own kernel after cuBLAS: kn_epilogue).
 *   KN_OP    one instruction with its own emitter (GEMM, other reductions, conv ...).
 *   KN_VIEW  a view (reshape/detach of a value in memory) or a scalar
 *            constant: no code. Also a *folded* SLICE or PERMUTE (KnSchedule.fold)
 *            whose readers are all GEMM operands, fused attention, elementwise ops
 *            outside a GEMM's epilogue (or further folded views and reshapes of it):
 *            they address its elements through strides and an offset (kn_layout;
 *            kir.h's KirIndex.off), so q/k/v splits, head transposes and a
 *            recurrence's gate slices copy nothing.
 *
 * Fusion rules. KN_ROW: a reduction over the last axis joins (or turns into a
 * KN_ROW) the open kernel whose space is its operand's shape; an elementwise
 * instruction joins a KN_ROW when its result has the space's shape (a row
 * element) or the per-row shape (last dim 1). KN_ELEM: an elementwise instruction joins the open kernel when
 * its result shape is the kernel's space, each operand is a literal, a value of
 * this kernel (read as its local, at the same element) or memory written by an
 * earlier kernel; chains have no length limit. A value is
 * an output (stored) when it is used by another kernel, viewed, returned or a
 * parameter update. */
#ifndef CTC_KERNELS_H
#define CTC_KERNELS_H

#include "../ir/ir.h"

typedef enum KnKind { KN_ELEM, KN_ROW, KN_OP, KN_VIEW, KN_GEMM } KnKind;

/* Largest per-row array (bytes) a KN_ROW loop body keeps on the stack. */
#define KN_MAX_ROWBUF 16384

typedef struct Kernel {
  KnKind kind;
  Type space;          /* iteration space: the shape its loop nest runs over (the result's) */
  int first, last;     /* its instructions: insts[first..last] of the Func, in order */
  Vec(ValId) inputs;   /* values read from memory (not literals), each once */
  Vec(ValId) outputs;  /* values it stores */
  int nloops;          /* KN_ROW: loops over each row (reductions need their operand's loop done) */
  int merge;           /* KN_ROW of a reduction over several trailing axes (a BatchNorm's H and W): the
                          last `merge` axes of the values (0: one) are one axis of `space`, the row;
                          kn_collapse gives a value's type in the space's terms */
} Kernel;

/* Type t (of a value a kernel computes or reads, broadcast numpy-style over its space) with the
 * kernel's merged trailing axes as one (kn->merge > 1; t itself otherwise) in *out: those of t's
 * last axes that exist are all 1 (broadcast) or all the space's (read whole). -1 if neither. */
int kn_collapse(const Kernel *kn, const Type *t, Type *out);

/* A run of repeated steps (reroll.c): kernels [first, first + count*len) are
 * `count` steps of `len` kernels, step t's kernel j computing what step 0's
 * does (the same ops, types, attributes and literals, operands in the same
 * places) on values of step t: a time loop the staging unrolled. */
typedef struct KnRun {
  int first, len, count;
} KnRun;

typedef struct KnSchedule {
  Vec(Kernel) kernels;
  int *kernel_of;      /* per instruction: its kernel */
  int *phase;          /* per instruction of a KN_ROW: the loop it runs in (row elements,
                          reductions), or before which it runs (per-row values) */
  unsigned char *rowbuf;  /* per value: a row element kept in a per-row array, read in a later loop */
  unsigned char *fold; /* per value: a SLICE/PERMUTE result folded into its readers' indexing
                          (no code, no storage: a view of its operand, PlanHints.strided) */
  PlanHints hints;     /* for ir_plan_memory_hints: step = kernel_of, nostore = internal values,
                          inplace = per KN_ELEM result an input of its shape whose bytes it may take */
  int ncode;           /* kernels that emit code (all but KN_VIEW) */
  Vec(KnRun) runs;     /* repeated steps (kn_reroll), in kernel order, disjoint */
} KnSchedule;

/* scope.c: per kernel of s, the Program.scopes index of the user module its code belongs to:
 * the innermost one holding all its instructions (0: none, the entry's own code; -1: no code,
 * a view or a constant), and its phase (PH_*); loops (may be NULL): a time loop's kernels all
 * belong to the one holding the whole loop. */
struct KnLoops;
void kn_kernel_scopes(const Program *p, const Func *f, const struct KnSchedule *s, const struct KnLoops *loops,
                      int *scope, int *phase);
/* scope.c: the module calls from the outermost down to scope sc (at most cap): their count. */
int kn_scope_chain(const Program *p, int sc, int *chain, int cap);

/* Partitions f's instructions; fuse = 0 gives one kernel per instruction
 * (the unfused reference, `ctc --no-fuse`). Allocates in p->arena. */
KnSchedule *kn_schedule(const Program *p, const Func *f, int fuse);
/* reroll.c: finds the runs of repeated steps of s (at least KN_REROLL_MIN
 * steps; KnSchedule.runs) and gives each value a step's kernel stores a family
 * (PlanHints.family/family_ix): the values at the same place of every step, which
 * the memory plan lays out at one constant stride, so that the C target can
 * write the run as a loop over one step's code. Called by kn_schedule. */
#define KN_REROLL_MIN 4
void kn_reroll(const Program *p, const Func *f, KnSchedule *s);
/* reroll.c: for renderers that write loops (the C target), the step just before a run and
 * the one just after it padded to the run's step where they are its code with a carried value
 * zero (a backward's first step: `add(zeros, x)` where the body adds the carried sum) or with
 * results nothing reads (its last: the dead gradient of the initial state, computed and kept,
 * Inst.keep), so that they join the run. Rewrites f (every value stays the same) and returns
 * its schedule; a pad that leaves no fewer kernels outside runs is undone. */
KnSchedule *kn_reroll_pad(Program *p, Func *f, KnSchedule *s, int fuse);
/* A time loop: kernels [first, first + len) are one step, run `count` times; iteration t
 * runs what step `step0 + t` of the run (of `steps`) computes, on the values of step
 * step0 moved by t * KnLoops.move (elements). */
typedef struct KnLoop {
  int first, len, count, step0, steps;
} KnLoop;
typedef struct KnLoops {
  Vec(KnLoop) loops;   /* in kernel order, disjoint */
  int64_t *move;       /* per value a loop's step names: elements its address moves per
                          iteration (0: the same every step, a weight or an accumulator) */
} KnLoops;
/* reroll.c: the loops of s's runs on the memory plan fp (decided on the kernels' structure
 * and the plan's addresses, for renderers that write loops: codegen_c): steps t0..t1 of a
 * run are one loop when each value step t names sits at step t0's address plus (t - t0)
 * times a constant, weights are shared, and every instruction with code has step t0's
 * attributes (a folded slice's start moves with its view's address instead); at least
 * KN_REROLL_MIN steps. */
KnLoops *kn_reroll_loops(Arena *A, const Func *f, const KnSchedule *s, const FuncPlan *fp);
/* prepack.c: the weights a time loop's GEMMs read, packed once before the loop by a renderer
 * that writes loops (codegen_c) into the function's pack region (FuncPlan.pack_at): per loop of
 * L, each GEMM of its step whose op(B) is a parameter (f32, one matrix, read in place, the same
 * in every step); two GEMMs of a step reading it the same way share one. */
typedef struct KnPack {
  int loop;            /* its loop in KnLoops.loops */
  int inst;            /* the GEMM's instruction in the loop's first step */
  ValId b;             /* the weight */
  int ta, tb;          /* the GEMM's BLAS transposes (its K blocks depend on ta) */
  int64_t N, K, ldb;   /* op(B) is [K, N]; B's leading dimension */
  int64_t ldp;         /* floats per k of the packed panels: N rounded up to 32 */
  int64_t off;         /* bytes from the region's start (each loop's packs from 0) */
} KnPack;
typedef struct KnPacks {
  Vec(KnPack) packs;   /* in loop order */
  int64_t bytes;       /* the region's size: the largest loop's packs */
} KnPacks;
KnPacks *kn_prepacks(Arena *a, const Func *f, const KnSchedule *s, const KnLoops *L);
/* foreach.c: a run of consecutive KN_ELEM kernels of optimizer code that compute the same
 * thing, each on its own arrays and element count (an optimizer's update of each parameter),
 * which a renderer writes as one loop over a table of the arrays (PyTorch's foreach /
 * multi-tensor apply): the same instructions, types, attributes, literals and stored values,
 * operands in the same places; every array read or stored a whole contiguous array of the
 * kernel's elements (or one element) in the arena. */
typedef struct KnForeach {
  int first, count;      /* kernels [first, first + count) */
  int big;               /* the one with the most elements (0..count-1): the one written */
  int ncol;              /* the arrays that differ between the kernels: the table's columns */
  int64_t *n;            /* [count]: each kernel's elements */
  int64_t *off;          /* [count * ncol]: kernel j's array of column c at arena byte off[j * ncol + c] */
  ValId *val;            /* [count * ncol]: the value it holds (the first of several sharing it) */
  unsigned char *store;  /* [ncol]: the kernels store to the column's array */
  int nslot;             /* per kernel, in order: the operands read from memory, their roots, the results stored */
  ValId *slot;           /* [count * nslot] */
  int *slot_col;         /* [nslot]: the slot's column, or -1 for a value every kernel shares (a scalar) */
} KnForeach;
typedef struct KnForeachs {
  Vec(KnForeach) runs;   /* in kernel order, disjoint, each of at least 2 kernels */
} KnForeachs;
/* The runs of f's kernels in s on the memory plan fp (decided on the kernels and the plan's
 * addresses); allocates in A. */
KnForeachs *kn_foreach(Arena *A, const Func *f, const KnSchedule *s, const FuncPlan *fp);
/* The byte address (arena offset, or offset in entry input *base) a renderer reads v at:
 * its storage's, plus the offset of the folded views it is read through; *base is the
 * plan's (LOC_LOCAL, LOC_NONE: no storage, 0 returned). -1 if v has no layout. */
int64_t kn_value_addr(const Func *f, const KnSchedule *s, const FuncPlan *fp, ValId v, int *base);
/* How a KN_GEMM epilogue reads a memory operand of type t over the GEMM's
 * result `space` viewed as [M, N] (N its last axis): 0 at the same element,
 * 1 at column j (a row of N along the last axis, a bias), 2 a scalar; -1 if
 * none of these (the op cannot join the epilogue). */
int kn_epilogue_operand(const Type *t, const Type *space);
/* The geometry of a convolution or of one of its gradients (CONV2D,
 * CONV2D_BWD_INPUT, CONV2D_BWD_WEIGHT): image x[N,C,H,W], kernel w[O,C,KH,KW],
 * output y[N,O,OH,OW], whichever of them are operands or the result (kernels/conv.c). */
typedef struct ConvGeom {
  int64_t N, C, H, W, O, KH, KW, OH, OW;
  int64_t G, Cg, Og;  /* groups (attr[6]) and the channels of one group: C / G in, O / G out */
  int64_t ckk, ohw;   /* Cg*KH*KW and OH*OW: the column matrix of one image and group */
  int64_t sh, sw, ph, pw, dh, dw;   /* stride, padding and dilation (attr[0..5]) */
} ConvGeom;
void kn_conv_geom(const Func *f, const Inst *in, ConvGeom *g);
/* The epilogue of KN_GEMM kernel kn as a KN_ELEM kernel over the same space:
 * the instructions after the GEMM, its inputs those they read from memory plus
 * the GEMM's result, its outputs the kernel's others (what an emitter runs after
 * each block of the GEMM, or as its own kernel after the GEMM). nops: its
 * instructions that are not literals (0: no epilogue). Allocates in p->arena. */
Kernel kn_epilogue(const Program *p, const Func *f, const Kernel *kn, int *nops);
/* Whether a MATMUL is emitted as one GEMM call over its whole result (no
 * folded operand; 2-D, or a batch folded into the rows of a shared 2-D b). */
int kn_single_gemm(const Func *f, const KnSchedule *s, const Inst *in);
/* Whether v lives only inside its kernel (a scalar local, no storage). */
static inline int kn_internal(const KnSchedule *s, ValId v) { return s->hints.nostore[v] != 0; }
/* Where a value's elements lie: in the memory of `root` (a stored value), at
 * element offset `off`, with element strides `st` per axis of the value's type.
 * A stored value is its own root, contiguous; views (reshapes, folded slices
 * and permutes) compose. */
typedef struct KnLayout {
  ValId root;
  int64_t off;
  int64_t st[IR_MAX_DIMS];
} KnLayout;
/* v's layout; -1 if a reshape in its chain cannot be expressed with strides.
 * s may be NULL (only reshape/detach views then). */
int kn_layout(const Func *f, const KnSchedule *s, ValId v, KnLayout *l);
/* The stored value whose memory v reads: v itself, or the root of its chain of
 * views (reshape, detach and, with s, folded slices and permutes). */
ValId kn_root(const Func *f, const KnSchedule *s, ValId v);
/* How a GEMM reads operand v (type t, layout l; `trans` = the MATMUL's
 * transpose attribute for it): as a row-major matrix with leading dimension
 * *ld, transposed for BLAS if *blas_t. -1 if the last two axes have no unit
 * stride (not a BLAS operand). */
int kn_gemm_operand(const Type *t, const KnLayout *l, int trans, int *blas_t, int64_t *ld);
/* attention.c: how a fused attention microkernel reads an operand of type t [..., n1, T, D]
 * laid out as l: st = {stride of the merged axes before n1, of n1, of T} (elements; D's
 * is 1); -1 when the axes before n1 do not merge or D is not contiguous. */
int kn_attention_operand(const Type *t, const KnLayout *l, int64_t st[3]);

/* stats.c: floating-point operations of one instruction (a multiply-add is 2;
 * elementwise ops and reductions 1 per element), for --stats and profiles. */
int64_t kn_flops(const Func *f, const Inst *in);
/* `--stats`: an entry's FLOPs and its activation bytes broken down into
 * gradients, saved activations, other values and scratch at its busiest
 * kernel (f = Program.funcs[index], planned in mp). */
void kn_stats(FILE *out, const Program *p, const MemPlan *mp, const Func *f, const KnSchedule *s, int index);

/* stats.c: what a model tensor is, as PyTorch and the runtime's descriptor (CTC_KIND_*)
 * see it: an nn.Parameter, a persistent buffer, training state (optimizer, scheduler,
 * random stream), or local (non-persistent buffers, "ctc.const.N", "ctc.kv.*": never saved). */
enum { KN_PARAMETER, KN_BUFFER, KN_TRAINING, KN_LOCAL, KN_NKINDS };
int kn_param_kind(const Param *pr);
/* The tensors of each kind (a tied parameter once, as PyTorch's model.parameters()), and
 * the state_dict's keys and values (a tied parameter under each name). */
typedef struct KnCounts {
  int64_t values[KN_NKINDS], bytes[KN_NKINDS];
  int tensors[KN_NKINDS];
  int keys;                   /* state_dict keys */
  int64_t key_values;         /* sum(v.numel() for v in state_dict().values()) */
} KnCounts;
void kn_count_params(const Program *p, KnCounts *c);
/* "parameters 7232 values in 28 tensors, buffers 0 values in 0 tensors, training state ..." */
void kn_print_counts(FILE *out, const KnCounts *c);

/* `--emit kernels`: the partition, one block per kernel, with model lines. */
void kn_print(FILE *out, const Program *p, const Func *f, const KnSchedule *s);
/* `--emit dot` (dot.c): the IR of every entry (sched: one schedule per Program.funcs entry) as a
 * Graphviz digraph, instructions labelled with op, type and model line, filled by phase
 * (forward, backward, optimizer), fused kernels as clusters. */
void kn_dot(FILE *out, const Program *p, KnSchedule *const *sched);

#endif
