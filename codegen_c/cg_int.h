/* cg_int.h - internals shared by the C backend's files.
 *
 *   cg_util.c   text buffers, C types and literals, identifiers, c_expr templates
 *   kernels.c   helper kernels written once into model.c (GEMM, im2col, RNG fills)
 *   gemm_simd_c.c  the GEMM microkernels per ISA, the text of runtime_min/ctc_gemm_simd.h
 *   emit_ops.c  the loops of each primitive
 *   render_c.c  the kernel IR (kernels/kir.h) as text: the renderers' walk and the C table
 *   emit_c.c    file structure: header, init/load/save, entry functions, descriptor
 *   freestanding_c.c  --freestanding: prologue, header, call check, --no-libm math, embedded weights */
#ifndef CTC_CG_INT_H
#define CTC_CG_INT_H

#include "codegen_c.h"
#include "../kernels/kernels.h"
#include "../kernels/kir.h"

/* ---- cg_util.c ----------------------------------------------------------- */

/* A growable text buffer (malloc'ed; cg_buf_free releases it). */
typedef struct Buf {
  char *s;        /* NUL-terminated text, NULL while empty */
  size_t len, cap;
} Buf;
void cg_printf(Buf *b, const char *fmt, ...) CTC_PRINTF(2, 3);
void cg_puts(Buf *b, const char *s);
void cg_buf_free(Buf *b);

const char *cg_ctype(DType t);        /* "float", "double", "int64_t", "int32_t", "unsigned char" */
const char *cg_rt_dtype(DType t);     /* "CTC_F32" ... */
/* A C literal of type t for v: "1.0f", "(-0.5f)", "INFINITY", "3", "INT64_C(5000000000)".
 * Negative values come parenthesised so that they can be substituted anywhere. */
void cg_literal(Buf *b, DType t, double v);
/* Expands an ops.def c_expr template: A/B/C become ops[0..2]; the <math.h>
 * calls, written with their double names, get the names of the compute type
 * (exp -> expf when ct is f32); a call of a function the emitter does not know
 * is a BUG, so no template silently computes in double. The numbers of the
 * template become literals of ct when ct is floating. */
void cg_expand(Buf *b, const char *tmpl, const char *const *ops, int nops, DType ct);

/* Identifier allocation: names come from the model, are sanitised to C
 * identifiers and uniquified (x, x_1, x_2 ...) against C keywords, the
 * names the emitted code uses itself and every name given out before. */
typedef struct StrMap {   /* string -> int, open addressing (keys borrowed) */
  const char **keys;
  int *vals;
  size_t cap, n;
} StrMap;
typedef struct Names {
  const char *prefix;  /* model prefix: "net" (names "net_..." are file-global) */
  char **used;         /* malloc'ed: the names given out, and the keys of `next` */
  int n, cap;
  StrMap set;          /* the used names, for O(1) lookups */
  StrMap next;         /* base name -> the next suffix to try (x_1, x_2 ...) */
} Names;
void cg_names_init(Names *ns, const char *prefix);
const char *cg_name(Names *ns, const char *hint);   /* valid until cg_names_free */
void cg_names_free(Names *ns);
/* Whether s was given out by cg_name (not a C keyword, reserved word or suffix key). */
int cg_name_given(const Names *ns, const char *s);
/* Sanitises s into a C identifier in buf (no uniquification). */
void cg_ident(char *buf, size_t cap, const char *s);

/* ---- kernels.c ----------------------------------------------------------- */

/* The stack buffers of the stride-1 depthwise convolutions (kernels.c's dwconv_flat_text), in
 * elements: a band of the padded plane, and the weight gradient's per-position sums of all taps;
 * and the most taps of a weight gradient's kernel (its sums, a row of 8 a tap). */
#define CG_DW_BAND 4096
#define CG_DW_PART 2048
#define CG_DW_TAPS 64

/* Which helpers the generated file needs (set while emitting the entries). */
typedef struct Kernels {
  unsigned char float_acc;          /* --freestanding: f32 sums accumulate in float, not double (a
                                       single-precision FPU, as a Cortex-M4's, has no double arithmetic) */
  unsigned char freestanding;       /* --freestanding: the helpers written without their OpenMP, OpenBLAS
                                       and x86 SIMD branches (kernels.c's Part), as options of the writer */
  unsigned char gemm[DT_COUNT];     /* ctc_gemm_<dt>; f32/f64: ctc_gemm_block_<dt>, ctc_matmul_block_<dt> */
  unsigned char matmul[DT_COUNT];   /* ctc_matmul_<dt> (f32/f64: a GEMM split over the threads at run time) */
  unsigned char gemm_bf16;          /* ctc_matmul_block_bf16 (with ctc_matmul_block_f32) */
  unsigned char matmul_bf16;        /* ctc_matmul_bf16 (with ctc_matmul_f32's split) */
  unsigned char gemm_pk;            /* ctc_gemm_pack_f32, ctc_matmul_pk_f32 and its block (with ctc_matmul_f32) */
  unsigned char im2col[DT_COUNT];   /* ctc_im2col_<dt> */
  unsigned char col2im[DT_COUNT];   /* ctc_col2im_<dt> */
  unsigned char dwconv[DT_COUNT];   /* ctc_dwconv_<dt> and its gradients (depthwise convolutions) */
  unsigned char dwconv_flat[DT_COUNT];   /* ctc_dwconv_flat_<dt> and its gradients (stride 1, hosted) */
  unsigned char uniform[DT_COUNT];  /* ctc_fill_uniform_<dt> */
  unsigned char normal[DT_COUNT];   /* ctc_fill_normal_<dt> */
  unsigned char trunc_normal[DT_COUNT];   /* ctc_fill_trunc_normal_<dt> (nn.init.trunc_normal_) */
  unsigned char ipow[DT_COUNT];      /* ctc_ipow_<dt>: integer pow, wrapping as PyTorch's */
  unsigned char remainder[DT_COUNT]; /* ctc_remainder_<dt>: Python's %, as PyTorch's remainder */
  unsigned char floordiv[DT_COUNT];  /* ctc_floordiv_<dt>: PyTorch's div(rounding_mode='floor') */
  unsigned char sum[DT_COUNT];      /* ctc_sum_<dt>: a float row's sum in 8 lanes */
  unsigned char max[DT_COUNT];      /* ctc_max_<dt>: a float row's maximum in 8 lanes */
  unsigned char simd;               /* CTC_OMP_SIMD, CTC_OMP_FOR_SIMD (macros) */
  unsigned char tanh_f32;           /* ctc_tanh_f32: tanh without a libm call (vectorises) */
  unsigned char exp_f32;            /* ctc_exp_f32: exp without a libm call (vectorises) */
  unsigned char expk_f32;           /* ctc_expk_f32 alone: ctc_exp_f32's core (attention's exps) */
  unsigned char erf_f32;            /* ctc_erf_f32: erf without a libm call (vectorises) */
  unsigned char log_f32;            /* ctc_log_f32: log without a libm call (vectorises) */
  unsigned char log1p_f32;          /* ctc_log1p_f32 (and ctc_log_f32's core) */
  unsigned char sincos_f32;         /* ctc_sin_f32, ctc_cos_f32, ctc_tan_f32: every float reduced exactly, in double */
  unsigned char atan_f32;           /* ctc_atan_f32, ctc_atan2_f32, ctc_asin_f32, ctc_acos_f32: in double */
  unsigned char logb_f32;           /* ctc_log2_f32, ctc_log10_f32: in double */
  unsigned char key_f32, key_f64;   /* ctc_key_f32, ctc_key_f64: argmax's order keys (kir_ops.c's KE_KEY) */
  unsigned char expx_f32;           /* ctc_expm1_f32, ctc_sinh_f32, ctc_cosh_f32, ctc_exp2_f32: in double */
  unsigned char exp_cr;             /* the hosted C target: templates calling exp (sigmoid) call ctc_exp_cr_f32 */
  unsigned char exp_cr_f32;         /* ctc_exp_cr_f32: libm's accuracy without its call (vectorises) */
  unsigned char bf16[DT_COUNT];     /* ctc_bf16_<dt>: round_bf16 (ops.def) in f32, f64 code */
  unsigned char f16[DT_COUNT];      /* ctc_f16_<dt>: round_f16 (ops.def) */
  unsigned char low_io[DT_COUNT];   /* ctc_bf16_load/_store, ctc_f16_load/_store: casts from and to the
                                       storage of a .bfloat16() / .half() model (DT_BF16, DT_F16) */
  unsigned char attention[DT_COUNT]; /* attn_c.c: 1 ctc_attention_<dt>, 2 also ctc_attention_bwd_<dt>, 4 f16 roundings */
} Kernels;
void cg_emit_kernels(Buf *b, const Kernels *k);
const char *cg_fma_text(void);   /* CTC_FMA_F32/F64 and CTC_ALWAYS_INLINE, which the helpers' texts use */
const char *cg_expk_f32_text(void);  /* ctc_expk_f32's definition, which ctc_exp_f32's calls */
const char *cg_exp_f32_text(void);   /* ctc_exp_f32's definition (freestanding_c.c's expf) */
const char *cg_tanh_f32_text(void);  /* ctc_tanh_f32's */
const char *cg_log_f32_text(void);   /* ctc_log_f32's (freestanding_c.c's logf) */
const char *cg_dt_suffix(DType t);  /* "f32" ... */
/* gemm_simd_c.c: runtime_min/ctc_gemm_simd.h's texts (scripts/gen_runtime.py); the NEON
 * kernel's head and the 16-column kernel over $I, which a --freestanding file carries */
extern const char *const cg_gemm_simd_texts[14];
extern const char cg_gemm_neon_sel[], cg_gemm_neon_head[], cg_gemv_neon_text[];
extern const char cg_gemm_simd16_text[], cg_gemm_pack_at_text[];
/* wino_c.c: the Winograd convolutions' texts (the runs of tiles, AVX-512 and AVX2 helpers,
 * ctc_conv_wino_f32 and its weight gradient over them), written into the same header */
extern const char cg_conv_wino_common_text[], cg_conv_wino_text[], cg_conv_wino_avx2_text[],
    cg_conv_wino_tile16_text[], cg_conv_wino_neon_text[], cg_conv_wino_driver_text[];
/* conv_bat_c.c: the bf16 convolutions on small images, a GEMM per output position (same header) */
extern const char cg_conv_bat_bf16_text[];
/* gemm_amx_c.c: the bf16 GEMM on AMX tiles (same header, after the AVX-512 BF16 one) */
extern const char cg_gemm_amx_bf16_text[];

/* ---- cg_util.c: a block of emitted C as lines (codegen_cuda re-indents one) ---- */

typedef struct CgLines {
  const char **s;   /* each line's start (pointers into the text) */
  size_t *n;        /* its length without the '\n' */
  size_t len;
} CgLines;
/* Splits text into lines; free with cg_lines_free. */
void cg_lines(const char *text, CgLines *l);
void cg_lines_free(CgLines *l);

/* ---- prof_c.c ------------------------------------------------------------ */

/* --profile: the macros of the regions whose threads report their shares (render_c.c writes
 * them around a timed kernel's parallel loops). */
extern const char cg_prof_macros[];

/* ---- emit_ops.c ---------------------------------------------------------- */

/* The state of emitting one entry function. */
/* A time loop's weight packed before it (kernels/prepack.c's KnPack) and the C name of its panels */
typedef struct CgPacked {
  const KnPack *pk;
  const char *name;
} CgPacked;

typedef struct CgFunc {
  const Program *p;
  const Func *f;
  const FuncPlan *fp;
  const char **cname;      /* per value: its C name */
  unsigned char *ref;      /* per value: referenced by the emitted body */
  Buf *out;                /* the body being written */
  int ind;                 /* current indentation (spaces) */
  const char **sname;      /* per instruction: C name of its scratch buffer, or NULL */
  Kernels *k;
  const KnSchedule *s;     /* the entry's kernels (kernels/) */
  Names *ns;               /* the entry's identifiers (locals of fused loops) */
  const struct CgRenderOps *target;   /* the renderer of the ops' parallel loops (cg_par_for): NULL, the C
                                         target's (cg_render_c); codegen_cuda sets its own */
  int par_depth;           /* while writing: the parallel loops open (cg_par_for), their kinds and body indents */
  unsigned char par_kind[8];
  int par_ind[8];
  int64_t grid_trip;       /* CUDA: the trip count of the loop run over the grid (CG_PAR_GRID), 0 for none */
  const char *prof_site;   /* --profile: the site of the kernel being written ("&ctc_prof_forward[3]"):
                              the kernel IR's parallel loops report each thread's share to it */
  const char **over;       /* inside a time loop (kernels/reroll.c's KnLoops): per value, the name
                              cg_ref gives, `(h + t * 2048)` for one the step moves; else NULL */
  const char *trip;        /* foreach_c.c: a KN_ELEM kernel's one loop runs this many elements (a table
                              row's count, "update_tab[p].n"), else NULL */
  CgPacked *packed;        /* inside a time loop: per instruction, the weight its GEMM reads packed
                              before the loop (kernels/prepack.c; .name NULL: none), else NULL */
} CgFunc;

/* Writes instruction i's comment and code into c->out (not for K_ELEM
 * instructions of a fused kernel). */
void cg_emit_inst(CgFunc *c, int i);
/* Writes kernel k of c->s: one loop nest for a KN_ELEM kernel, the
 * instruction's own code otherwise. */
void cg_emit_kernel(CgFunc *c, int k);
/* foreach_c.c: run fe (kernels/foreach.c) as one loop over a table of its kernels' arrays. */
void cg_emit_foreach(CgFunc *c, const KnForeach *fe);
/* Kernels k.. (before kernel `end`) that are each one view slicing the same operand at starts
 * that move by a constant along one axis (a time loop's per-step pieces of one array, read in
 * place), at least KN_REROLL_MIN of them: written as one comment; their count, else 0 and
 * nothing written. */
int cg_emit_view_run(CgFunc *c, int k, int end);
/* The value's C pointer name (marks it referenced); inside a time loop, moved by the loop's
 * variable (CgFunc.over). */
const char *cg_ref(CgFunc *c, ValId v);
/* Whether v is a scalar constant written as a literal. */
int cg_is_literal(const CgFunc *c, ValId v);
/* "model.py:17" or "" into buf. */
void cg_where(char *buf, size_t cap, Span loc);

/* ---- render_c.c: the kernel IR (kernels/kir.h) as text ------------------------ */

/* A renderer: one walk (cg_render_block) over a kernel's IR and a table of what a
 * target writes its own way. cg_render_c is the C target's; codegen_cuda copies it
 * and overrides what differs. */
typedef struct CgRender CgRender;
typedef struct CgRenderOps {
  void (*names)(CgRender *r);              /* the locals' names (before anything is written) */
  void (*loop)(CgRender *r, const KirStmt *s);                          /* a KS_LOOP and its body */
  void (*index)(CgRender *r, const KirIndex *ix, char *out, size_t cap);   /* an element's offset */
  void (*store)(CgRender *r, const KirStmt *s);                         /* a KS_STORE */
  void (*rowbuf_decl)(CgRender *r, const KirStmt *s);                   /* a per-row array */
  void (*acc_done)(CgRender *r, const KirStmt *s);                      /* a reduction's value */
  const char *rowpos;                      /* a per-row array's position: "j", "ctc_k" */
  /* an op's parallel loop (cg_par_for / cg_par_end, below) */
  void (*par_for)(CgFunc *c, const char *var, int64_t n, unsigned flags);
  void (*par_end)(CgFunc *c);
  void (*par_open)(CgFunc *c, unsigned flags);   /* before a parallel statement written as text */
  void (*par_close)(CgFunc *c);
  void (*axis)(CgRender *r, int k, char *out, size_t cap);   /* KE_AXIS: space axis k's position */
} CgRenderOps;
struct CgRender {
  const CgRenderOps *ops;
  CgFunc *c;                 /* where the text goes (c->out at c->ind), names, helpers */
  const Kir *k;
  const char **local, **accn, **rowarr;   /* per value: its local, accumulator, per-row array */
  const char **aux;          /* per value: C, a reduction's operand array; CUDA, its shared array */
  const struct KirExpr **narrow;   /* per value: C, the float32 value whose cast to double it sums, which
                                its operand array holds (ctc_sum_f32 adds them as ctc_sum_f64 would the
                                doubles: the same sum), or NULL */
  const char **tname;        /* per table of the kernel IR (Kir.tables): its name */
  const char **vname;        /* per variable of the kernel IR (Kir.vars): its name */
  /* options */
  int64_t omp_min_work;      /* C: elements from which a KIR_PARALLEL loop runs on OpenMP threads */
  void (*call)(CgRender *r, const KirStmt *s);   /* a KS_CALL (C: cg_render_call_c; CUDA: none yet) */
  int gemm_block;            /* C: the KIR_SPACE loop is a GEMM epilogue's over one thread's block
                                [r0, r1) x [c0, c1) of its [M, N] space (emit_gemm_kernel) */
  /* while rendering */
  int nvar, merged;          /* the loop variables (merged: a KIR_SPACE nest's, over last[]) */
  char var[IR_MAX_DIMS + 1][16];
  int group[IR_MAX_DIMS], last[IR_MAX_DIMS];
  int split, in_row;         /* C: accumulations go to the operand arrays; inside a KIR_ROW loop */
  const char *auxpos;        /* C: an operand array's position ("j", or "j - j0" in a row's chunk) */
  int block;                 /* CUDA: threads per row block */
  int64_t per;               /* CUDA: elements of a row per thread */
  int anybuf;                /* CUDA: some value has a per-row array */
  int serial;                /* the axis of the KIR_SERIAL loop open, -1 none */
  int space_to;              /* CUDA: the axes [0, space_to) of the KIR_SPACE loop open */
};
extern const CgRenderOps cg_render_c;
void cg_render_init(CgRender *r, const CgRenderOps *ops, CgFunc *c, const Kir *k);
void cg_render_free(CgRender *r);
void cg_render_block(CgRender *r, const KirBlock *b);
void cg_render_expr(CgRender *r, const KirExpr *x, Buf *b);
/* The locals' names as the C target gives them (render_c.c's comment). */
void cg_render_names(CgRender *r, int with_inputs, int row_names);
/* A KN_ELEM or KN_ROW kernel's loops into c->out (its comments are the caller's). */
void cg_render_kernel_c(CgFunc *c, const Kernel *kn);
/* The tables of a kernel IR (Kir.tables), named and declared `static const` at c->ind. */
void cg_render_tables(CgRender *r);
/* Instruction in's kernel IR (kir_build_op: pad, gather, upsample, cumsum, argmax,
 * scatter_add) as C loops into c->out:
 * 0, or -1 when it has none. */
int cg_render_op_c(CgFunc *c, const Inst *in);

/* The parallel loop of an op that is not (yet) kernel IR (emit_ops.c's pad, upsample, cumsum,
 * argmax, gather, scatter_add, ...): `for (int64_t var = 0; var < n; var++) {` and its body
 * indented, closed by cg_par_end, written by c->target's renderer. Flags: CG_PAR_OMP, its
 * iterations are worth threads on the CPU (C: OpenMP, or with --profile a region whose threads
 * report their shares); CG_PAR_SIMD, vector lanes too; CG_PAR_GRID, the loop is all the
 * instruction does (what precedes it, declarations every thread may run): a GPU renderer runs
 * it over the grid (CUDA: a grid-stride loop, its trip count in c->grid_trip). */
enum { CG_PAR_OMP = 1, CG_PAR_SIMD = 2, CG_PAR_GRID = 4, CG_PAR_REGION = 8 };
void cg_par_for(CgFunc *c, const char *var, int64_t n, unsigned flags);
void cg_par_end(CgFunc *c);
/* A parallel statement an emitter writes itself (a `for` with its own header or a nest of
 * them; with CG_PAR_REGION a braced block every thread runs, as the GEMM epilogue's):
 * cg_par_open before it (flags: CG_PAR_OMP, CG_PAR_SIMD, CG_PAR_REGION), cg_par_close after
 * it, which restores c->ind. C: OpenMP's line before it, or with --profile the region timing
 * each thread around it (its text indented in the region); CUDA: nothing (one thread's). */
void cg_par_open(CgFunc *c, unsigned flags);
void cg_par_close(CgFunc *c);

/* ---- attn_c.c: fused attention (ATTENTION, ATTENTION_BWD) ------------------------ */

void cg_render_call_c(CgRender *r, const KirStmt *s);   /* cg_render_c's KS_CALL */
void cg_render_gemm_c(CgRender *r, const KirStmt *s);    /* a GEMM's KS_CALL (linalg_c.c) */
void cg_render_conv_c(CgRender *r, const KirStmt *s);    /* a convolution's KS_CALL (linalg_c.c) */
void cg_emit_call(CgFunc *c, int i);                    /* instruction i's kernel IR call (attention, gemm, conv) */
void cg_emit_attention_kernels(Buf *b, const Kernels *k);   /* the microkernels' text (cg_emit_kernels) */

/* ---- freestanding_c.c (CgOptions.freestanding) --------------------------- */

/* -1 after printing why p cannot be emitted freestanding with opt (profiling, anomaly checks,
 * a distributed build; with embedded weights, an entry that updates parameters), else 0. */
int cg_fs_refuse(const Program *p, const CgOptions *opt);
/* Checks that text (the file without its prologue) calls only functions it defines, memcpy and
 * the like, and libm's (with opt->no_libm: those ctc implements); appends the libm functions it
 * calls to math, space-separated. 0, or -1 after printing the first call that is not allowed. */
int cg_fs_scan(const char *text, const CgOptions *opt, Buf *math);
/* The includes and macros that open model.c, and with no_libm ctc's math functions. */
void cg_fs_prologue(Buf *b, const char *h_name, const char *math, const CgOptions *opt);
/* The parameters as const arrays ctc_w_<i> from embed (CgOptions.embed). */
void cg_fs_weights(Buf *b, const Program *p, const void *const *embed);
int cg_fs_param_used(const Program *p, int i);   /* whether an entry reads parameter i */
/* The address of arena byte offset off as the entries write it: "A + off", or with embedded
 * weights a parameter's array (offsets in the parameter region) or A + off - params_bytes.
 * Returns whether the text uses A. */
int cg_fs_addr(Buf *b, const Program *p, const MemPlan *mp, const CgOptions *opt, int64_t off);
/* <P>_arena_bytes and <P>_init with embedded weights (the arena is the activations only). */
void cg_fs_init_embedded(Buf *b, const char *P, const char *U);
typedef struct FsHeader {
  const Program *p;
  const MemPlan *mp;
  const CgOptions *opt;
  const char *prefix, *upper, *src, *cls, *math;
  const Buf *sig, *doc;   /* per entry: prototype, description */
  const char *stem;       /* the file name without .c/.h */
} FsHeader;
void cg_fs_header(FILE *h, const FsHeader *x);

/* ---- dist_c.c ------------------------------------------------------------ */

/* Distributed builds: an entry's gradient buckets (Func.sync) and where their
 * all-reduce starts and is waited for (kernel indices of c->s). */
typedef struct CgDist {
  int nb, first_id;    /* buckets; the id of the first (ids are unique in the model) */
  int *start_k;        /* per bucket: start after this kernel */
  int *wait_k;         /* per bucket: wait before this kernel (kernels.len: before the outputs) */
  Buf tables;          /* the static bucket tables, written before the entry */
  char table[160];     /* their C name */
  const char *comm;    /* the entry's local holding ctc_comm_world() */
  /* set by the caller after planning (the CUDA target): */
  const char *arena;   /* the arena's expression in the entry (NULL: m->arena) */
  const char *stream;  /* the stream the kernels run on, given to the communicator (NULL: none) */
} CgDist;
/* Plans c's buckets (nothing unless Program.distributed); fname is the entry's C
 * name. Returns 0, or -1 after printing why a gradient cannot be averaged. */
int cg_dist_plan(const CgFunc *c, const char *fname, int first_id, CgDist *d);
/* The same, with `build` the tables' note on how to build (NULL: mpicc and rt_mpi.c). */
int cg_dist_plan_for(const CgFunc *c, const char *fname, int first_id, const char *build, CgDist *d);
/* Writes the hooks of kernel k into c->out: before it (after = 0: the waits,
 * and at k = 0 the communicator), or after it (the starts). */
void cg_dist_hooks(CgFunc *c, CgDist *d, int k, int after);
void cg_dist_free(CgDist *d);

/* ---- index checks (emit_ops.c, emit_c.c; shared with codegen_cuda/) ---- */

/* An instruction that reads an index tensor (EMBEDDING, EMBEDDING_BWD, GATHER, SCATTER_ADD):
 * 1 with its operand and the bound its values must lie under, [0, bound); else 0. */
int cg_index_operand(const Func *f, const Inst *in, ValId *idx, int64_t *bound);
/* Whether in's index needs a check at run time (1, or 0 with nothing to check): not when an
 * earlier check of the entry covered the same value (checked[v]: the smallest bound v was
 * checked against, 0 for none; updated here), nor when it is an iota (through reshapes and
 * broadcasts) or a literal inside the bound. */
int cg_index_needs_check(const Func *f, const Inst *in, int64_t *checked);
/* The ctc_index_site initializer of in's check: {entry, op, index, where, code, phase}. */
void cg_index_site(Buf *b, const Func *f, const Inst *in, const char *index);

/* ---- shared with codegen_cuda/ (wrappers at the end of emit_ops.c and emit_c.c) ---- */

/* The expression of elementwise instruction `in` over its operands' texts txt (elem_expr). */
void cg_elem_expr(CgFunc *c, const Inst *in, const char *const *txt, Buf *e);
/* The instruction's model-line comment, as cg_emit_inst writes it (comment). */
void cg_comment(CgFunc *c, const Inst *in);
/* A reduction's accumulator type, initial value and update statement (acc_*). */
const char *cg_acc_type(const Inst *in, DType t);
const char *cg_acc_type_k(const Kernels *k, const Inst *in, DType t);   /* with k's float_acc */
const char *cg_sum_type(const Kernels *k, DType t);   /* the type sums of t accumulate in (KirVar.sum) */
const char *cg_acc_init(const Inst *in, DType t);
void cg_acc_update(CgFunc *c, const Inst *in, const char *accv, const char *x);
/* A float reduction of the contiguous row ptr[0..n) through ctc_sum/ctc_max (lane_reduce);
 * 0 for integers (nothing written). */
int cg_lane_reduce(CgFunc *c, const Inst *in, const char *accv, const char *op, const char *ptr, const char *len,
                   int64_t n);
/* "7 + i0 * 12 + i1": offset plus var[k] * st[k] over n axes (index_expr). */
void cg_index_expr(char *out, size_t cap, int n, char var[][16], int64_t off, const int64_t *st);
/* Strides of operand a broadcast over result shape r (bcast_strides). */
void cg_bcast_strides(const Type *a, const Type *r, int64_t *st);
/* The parameter data arrays and <prefix>_arena_bytes/_init/_load/_save of the
 * C target for prefix (emit_param_data, emit_init); sets k's fill helpers. */
void cg_emit_host_init(Buf *data, Buf *init, Kernels *k, const Program *p, const MemPlan *mp, const char *prefix);
/* The ctc_model_desc <prefix>_desc and its call wrappers (emit_desc); device_params (the CUDA
 * target): its arena_of is <prefix>_params, which brings the host copy up to date. */
void cg_emit_desc_for(Buf *b, const Program *p, const MemPlan *mp, const char *prefix, int device_params);
/* The C text of a comment's content made safe (comment_text). */
const char *cg_comment_text(char *buf, size_t cap, const char *s);

/* ---- entry_c.c: one entry, the walk both targets share ----------------------- */

/* An entry is written by one walk (cg_emit_entry) over its schedule: names, the description,
 * the update order, distributed hooks, each kernel's index checks and code, the outputs
 * copied out, the parameter write-backs; a target's table (CgEntryOps) writes what differs,
 * as CgRenderOps does for a kernel. The C target (emit_c.c) adds the structure of its
 * text (CG_EN_*: time loops, optimizer tables, view runs, module functions); the CUDA
 * target (codegen_cuda/emit_cuda.c) launches kernels from host code. */
typedef struct CgEntry CgEntry;
typedef struct CgEntryOps {
  const char *const *reserved;   /* identifiers the target keeps out of the entry's names, or NULL */
  void (*proto)(CgEntry *e);     /* its prototypes, from e->params (", const float *x, float *y") */
  void (*begin)(CgEntry *e);     /* after the names, before the kernels (its own locals' names) */
  void (*index_check)(CgEntry *e, const Inst *in);   /* into e->c.out; the walk counts e->nix */
  void (*kernel)(CgEntry *e, int k);                 /* kernel k's code into e->c.out */
  void (*output)(CgEntry *e, int k, ValId v);        /* output k (value v) copied out */
  void (*update)(CgEntry *e, ValId v, int param);    /* param's new value v written back */
  int (*finish)(CgEntry *e, Buf *out);               /* the entry's text around e->body into out */
} CgEntryOps;

enum { CG_EN_REROLL = 1, CG_EN_FOREACH = 2, CG_EN_VIEWRUN = 4, CG_EN_MODFNS = 8 };

struct CgEntry {
  /* given by the target */
  const CgEntryOps *ops;
  void *tgt;                 /* the target's state */
  const Program *p;
  const MemPlan *mp;
  int fi;
  const char *prefix;
  const KnSchedule *s;
  Kernels *k;
  Buf *doc;                  /* the one-line description */
  unsigned structure;        /* CG_EN_*: the C text's structures allowed (none in distributed builds) */
  const CgOptions *copt;     /* the C target's options (module functions' declarations), or NULL */
  Names *fns;                /* the file's module function names (CG_EN_MODFNS) */
  const char *dist_build;    /* distributed builds: cg_dist_plan_for's note, its arena and stream (NULL: C's) */
  const char *dist_arena, *dist_stream;
  int *nbuckets;             /* the file's gradient buckets so far */
  /* the walk's */
  const Func *f;
  const FuncPlan *fp;
  Names ns;
  const char **cname, **oname, **sname;
  unsigned char *ref;        /* per value: the entry's own body uses it */
  char fname[128];           /* the entry's C identifier */
  Buf params, body;
  CgFunc c;
  int *order;                /* the write-backs' order (update_order) */
  CgDist dist;
  int64_t *checked;          /* per value: the bound its index check used */
  Buf ixsites;               /* the index checks' ctc_index_site rows */
  int nix, nsite;            /* index checks; --profile/--anomaly sites so far (the target counts) */
  int looped;                /* time loops (kernels/reroll.c) */
  int grouped;               /* module functions: their text (e->fns_text), e->sref the entry's scratch */
  unsigned char *sref, *excl;
  struct ModFns *mf_done;    /* the module functions written, until their text */
  Buf fns_text;
  int arena;                 /* the text reads A */
  int rc;
};

/* Writes entry e->fi of e->p: 0, or -1 after printing why. */
int cg_emit_entry(CgEntry *e, Buf *out);
/* The declarations of the tensors a C function's body uses (ref), parameters first, then
 * the column scratch of the convolutions it runs (sref; NULL: all of the entry's); whether
 * they read the arena. excl: per value, may be restrict. */
int cg_entry_decls(CgEntry *e, const unsigned char *ref, const unsigned char *sref, const unsigned char *excl, Buf *decl);
/* Whether kernel kn has code (views and constants have none). */
int cg_kernel_has_code(const Func *f, const Kernel *kn);

#endif
