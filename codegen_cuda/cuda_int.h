/* cuda_int.h - what the files of the CUDA target share (codegen_cuda.h is the public side):
 * the state of the file being written (Gen) and of one entry (Ent), the kernels' plumbing and
 * the CUDA renderer (render_cuda.c), the instructions it writes its own kernels for (ops_cuda.c).
 *
 *   emit_cuda.c    model.cu and model.h: the entries' host code, helpers, the API
 *   render_cuda.c  a __global__ kernel's begin and end; the CUDA renderer of the kernel IR
 *                  (codegen_c/render_c.c's table with what a GPU does differently) and of
 *                  the C emitter's parallel loops (cg_par_for: grid-stride)
 *   ops_cuda.c     GEMMs and convolutions (cuBLAS, im2col/col2im), data movement, pooling and
 *                  embeddings as a thread per result element
 *   attn_cuda.c    fused attention: tiles in shared memory, or a thread per row
 *   dnn_cuda.c     cuDNN's convolutions */
#ifndef CTC_CUDA_INT_H
#define CTC_CUDA_INT_H

#include "codegen_cuda.h"
#include "dnn_cuda.h"
#include "../codegen_c/cg_int.h"

typedef long long ll;

#define ELEM_BLOCK 256
#define MAX_GRID 65535

typedef struct Gen {
  const Program *p;
  const MemPlan *mp;
  struct KnSchedule *const *sched;
  const CudaOptions *opt;
  char prefix[64], upper[64];
  Kernels k;            /* C helpers the code uses (made __host__ __device__) */
  unsigned char gemm[DT_COUNT], im2col[DT_COUNT], col2im[DT_COUNT], grid;
  unsigned char gemm_lp; /* some GEMM of bf16/f16-valued f32 operands runs on tensor cores (ctc_gemm_lp) */
  unsigned char attn_tiles; /* some attention runs in tiles (attn_cuda.c's device functions are written) */
  Buf kern;             /* __global__ kernels */
  Buf *sig, *dsig, *doc;   /* per func: host-pointer and device prototypes, description */
  int64_t io_bytes;     /* the largest entry's inputs + outputs (256-byte aligned each) */
  int nbuckets;         /* distributed builds: gradient buckets so far (codegen_c/dist_c.c) */
  DnnSites dnn;         /* the convolutions, for cuDNN (dnn_cuda.h) */
  int ixcheck;          /* some entry checks its indices (<m>_index_check and its kernel are written) */
  int err;
} Gen;

/* The state of one entry. */
typedef struct Ent {
  Gen *g;
  CgEntry *en;          /* the walk writing it (codegen_c/entry_c.c) */
  int fi;
  const Func *f;
  const char *fname;
  CgFunc *c;            /* en->c */
  unsigned char *href;  /* values the host code references (en->ref) */
  unsigned char *kref;  /* values the kernel being written references */
  Buf *host;            /* the entry's host body (en->body) */
  int nkern;
  int uses_stream, uses_blas, uses_arena, uses_dnn;
} Ent;

static inline const Type *ty(const Func *f, ValId v) { return &f->values.data[v].type; }

static inline const Inst *def_of(const Func *f, ValId v) { return ir_def(f, v); }

static inline void indent(Buf *b, int n) { cg_printf(b, "%*s", n, ""); }

/* A literal operand's text; whether an operand is one. */
static inline void cu_literal(const Func *f, ValId v, Buf *b) { cg_literal(b, ty(f, v)->dtype, def_of(f, v)->fattr); }

static inline int cu_is_literal(const Func *f, ValId v) {
  const Inst *d = def_of(f, v);
  return d && d->op == IR_CONST;
}

/* ---- render_cuda.c ---- */

/* Starts a kernel body: the CgFunc writes into body and marks kref. */
void cu_kbegin(Ent *e, Buf *body);
/* Finishes kernel kname: signature, declarations of the tensors it referenced, the body;
 * then its launch into the host code. grid: C text; block: threads; sync: the launch waits. */
void cu_kend(Ent *e, const char *kname, const char *comments, Buf *body, const char *grid, int block, int sync);
void cu_kname(Ent *e, char *buf, size_t cap, int k);
/* Comments of kernel kn (its header line and one per instruction) into b; again, indented,
 * at its launch in the host code. */
void cu_kernel_comments(Ent *e, const Kernel *kn, int k, Buf *b);
void cu_launch_comments(Ent *e, const Kernel *kn, int k, Buf *body);
/* The index of an operand with broadcast strides st over space S at flat element var
 * (row-major over S), axes < to. */
void cu_flat_index(char *out, size_t cap, const Type *S, const int64_t *st, const char *var, int to);
/* Kernel k (KN_ELEM, KN_ROW, or a KN_GEMM's epilogue) from its kernel IR. */
void cu_fused_kernel(Ent *e, const Kernel *kn, int k);
/* Instruction i from its kernel IR (kir_build_op), a thread per result element: 0, or -1
 * when it has none. */
int cu_op_kernel(Ent *e, int i);
/* Instruction i as the C emitter writes it through the CUDA renderer: over the grid when
 * its loop is all it does, else one thread. */
void cu_serial(Ent *e, int i);

/* ---- ops_cuda.c ---- */

/* MATMUL through cuBLAS; CONV2D and its gradients (cuDNN, or im2col/col2im and cuBLAS), each
 * from its kernel IR call (kernels/gemm.c, conv.c): 0, or -1 for a dtype or layout not supported. */
int cu_matmul(Ent *e, const Inst *in);
int cu_conv(Ent *e, int i, const Inst *in);
/* Instruction i as this target's own kernel (copies, reductions, concat, iota and rand,
 * unslice, pooling, embeddings): 0, or -1 when it has none (cu_serial then). */
int cu_data_op(Ent *e, int i, const Inst *in);
/* argmax/argmin of few long fibers: a block per 8 fibers (ops_cuda.c); 0, or -1 when it does not apply */
int cu_argmax_split(Ent *e, int i, const Inst *in);
/* Instruction i's kernel, the body finished: its model-line comment and `note` (or none), named
 * <m>_<entry>_i<i><sfx>, launched on grid (C text) blocks of `block` threads; sync: it has
 * __syncthreads. cu_op_launch: a grid-stride loop over n elements. */
void cu_inst_launch(Ent *e, int i, const Inst *in, const char *note, const char *sfx, Buf *body, const char *grid,
                    int block, int sync);
void cu_op_launch(Ent *e, int i, const Inst *in, const char *note, const char *sfx, Buf *body, int64_t n);
/* The head of a grid-stride loop over %lld elements (ctc_i). */
extern const char cu_loop_head[];

/* ---- attn_cuda.c ---- */

/* ATTENTION and ATTENTION_BWD from kernels/attention.c's call: in tiles (a block per TQ rows;
 * backward three kernels: each query row's logsumexp and g . o, dk and dv per key tile, dq
 * per query tile), or a thread per row where the tiles do not fit: 0, or -1 (another dtype). */
int cu_attention(Ent *e, int i, const Inst *in);
/* The tiles' device functions, written once into the file when some call uses them. */
void cu_attention_support(Buf *b);

#endif
