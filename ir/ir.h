/* ir.h - ctc's typed SSA IR.
 *
 * A Program holds the model's parameter table (PyTorch state_dict names) and
 * one Func per entry point. A Func is straight-line SSA: values are referenced
 * by index (ValId) into fn->values; every value has exactly one definition
 * (an Inst, or it is an entry input or a parameter) and a static Type.
 * The primitives are the rows of ops.def.
 *
 * Text form (printer; `ctc compile --emit ir`): values print as %name.id,
 * attributes (as many as ops.def's nattr says) in brackets, and each
 * instruction's source line as a comment:
 *   func forward(%x.0: f32[64,784]) {
 *     %fc1_weight.1 = param "fc1.weight" : f32[512,784]
 *     %fc1.2 = matmul[0,1] %x.0, %fc1_weight.1 : f32[64,512]    ; line 17
 *     return %fc1.2
 *   }
 */
#ifndef CTC_IR_H
#define CTC_IR_H

#include "../support/support.h"

/* ---- types -------------------------------------------------------------- */

/* DT_BF16 and DT_F16 are storage only: the parameters, buffers and optimizer state of a model
 * converted with .bfloat16() / .half() (Param.low), read through a `cast` to float32 and written
 * through one from it; no other instruction has them as operand or result type. */
typedef enum DType { DT_F32, DT_F64, DT_I64, DT_I32, DT_BOOL, DT_BF16, DT_F16, DT_COUNT } DType;

#define IR_MAX_DIMS 8
typedef struct Type {
  DType dtype;
  int ndim;                    /* 0 for scalars */
  int64_t dims[IR_MAX_DIMS];   /* all static, > 0 */
} Type;

const char *ir_dtype_name(DType t);   /* "f32" */
size_t ir_dtype_size(DType t);
int ir_dtype_is_float(DType t);      /* F32, F64: the float compute types */
int ir_dtype_is_low(DType t);        /* BF16, F16: storage only */
/* Elements of t. Exact for every type that passed ir_type_problem (the IR
 * builder checks each value's type); saturates at INT64_MAX otherwise. */
int64_t ir_numel(const Type *t);

/* ---- sizes ----------------------------------------------------------------
 * Every product or sum of dims, strides, element counts and byte sizes goes
 * through these checked helpers: they store the exact result and return 0, or
 * return -1 when it does not fit in int64 (nothing wraps). */
static inline int ir_mul(int64_t a, int64_t b, int64_t *r) { return __builtin_mul_overflow(a, b, r) ? -1 : 0; }
static inline int ir_add(int64_t a, int64_t b, int64_t *r) { return __builtin_add_overflow(a, b, r) ? -1 : 0; }
static inline int ir_sub(int64_t a, int64_t b, int64_t *r) { return __builtin_sub_overflow(a, b, r) ? -1 : 0; }
/* Product of n dims (0 or -1 as above). */
int ir_prod(const int64_t *dims, int n, int64_t *r);
/* Byte size of a tensor of type t (0 or -1 as above). */
int ir_type_bytes(const Type *t, int64_t *bytes);

/* The largest arena (parameters + activations of one entry, in bytes) and so
 * the largest tensor a compiled program may have: 1 TiB = 2**40 bytes. It is
 * far above any real model (the arena is one malloc at run time), and it keeps
 * every byte offset, offset + size, and element index (< 2**40) of the memory
 * plan and of the generated code far from int64 overflow. */
#define CTC_MAX_ARENA_BYTES ((int64_t)1 << 40)

/* Why t cannot be the type of a tensor in a compiled program, or NULL if it
 * can: a dim <= 0 ("zero-size tensors are not supported by ctc: shape [2, 0]"),
 * or a byte size past CTC_MAX_ARENA_BYTES ("tensor of shape [...] is too large
 * (N bytes ...)"). The message is written into buf. */
const char *ir_type_problem(const Type *t, char *buf, size_t cap);
int ir_type_eq(const Type *a, const Type *b);
/* "f32[64,1,28,28]" into buf (returns buf). */
char *ir_type_str(const Type *t, char *buf, size_t cap);
/* "[64, 1, 28, 28]" (PyTorch's spelling, for diagnostics). */
char *ir_shape_str(const Type *t, char *buf, size_t cap);

/* ---- ops ---------------------------------------------------------------- */

typedef enum OpKind_ { K_ELEM, K_REDUCE, K_SHAPE, K_LINALG, K_CONST, K_SPECIAL } OpClass;

typedef enum Op {
#define OP(id, name, nargs, kind, nattr, cexpr) IR_##id,
#include "ops.def"
#undef OP
  IR__COUNT
} Op;

/* ops.def's attribute-count codes (OpInfo.nattr < 0) */
enum { NA_RANK = -1, NA_2RANK = -2, NA_2RANK_A = -3, NA_FLAG2 = -4, NA_RANK1 = -5 };

typedef struct OpInfo {
  const char *name;   /* printer spelling */
  int nargs;          /* -1: variable */
  OpClass kind;
  int nattr;          /* >= 0: that many attributes; < 0: an NA_* code */
  const char *c_expr; /* K_ELEM template over A, B, C */
} OpInfo;
extern const OpInfo ir_ops[IR__COUNT];   /* constant table from ops.def */

/* How many attributes an instruction of op with result type res, operand 0 of
 * type a0 (NULL if none) and attributes attr (NULL: all zero) uses: ops.def's
 * nattr column evaluated. ir_nattrs does it for an instruction of f. */
int ir_op_nattrs(Op op, const Type *res, const Type *a0, const int64_t *attr);

/* ---- values and instructions ------------------------------------------- */

typedef int32_t ValId;            /* index into Func.values; -1 = none */

typedef enum ValKind {
  V_INST,      /* defined by an instruction */
  V_INPUT,     /* an entry argument (caller's memory, read-only) */
  V_PARAM,     /* a model parameter or buffer (in the model arena) */
} ValKind;

typedef struct Value {
  ValKind kind;
  Type type;
  const char *name;   /* readable hint from the model ("fc1", "x"); may repeat; never NULL */
  int def;            /* V_INST: index of the defining Inst */
  int index;          /* V_INPUT: argument position; V_PARAM: Program.params index */
  int adjoint_of;     /* reverse-mode AD: 1 + the value this is the whole gradient of (its C name is
                         grad_<that value's>), else 0 */
  int term_of;        /* reverse-mode AD: 1 + the value whose gradient this intermediate value of a
                         VJP (or partial sum of its contributions) goes into (its C name is
                         grad_<that value's>_term), else 0 */
} Value;

#define IR_MAX_ATTRS 16
typedef struct Inst {
  Op op;
  ValId res;          /* the single result */
  int nargs;
  ValId *args;        /* nargs operands */
  int64_t attr[IR_MAX_ATTRS];  /* integer attributes, see ops.def */
  double fattr;       /* CONST value */
  Span loc;           /* the model.py span this op came from */
  int nograd;         /* NG_*: staged under torch.no_grad() / inference_mode() */
  int phase;          /* PH_*: forward, backward (an AD sweep) or optimizer code (profiles) */
  int scope;          /* Program.scopes index: the user module whose forward staged it, or whose
                         instruction's gradient it computes (0: the entry's own code) */
  int dead;           /* set by passes that delete; removed by ir_compact */
  int keep;           /* stored and kept though nothing reads it: a recurrence's last step computing
                         the loop body's dead carried value (kernels/reroll.c, kn_reroll_pad) */
  int retired;        /* vmap's unbatched original (dead too): a later read is a value that escaped vmap */
} Inst;

/* Grad mode an instruction was staged in (Inst.nograd, Func.grad_mode). */
enum {
  NG_NONE = 0,     /* gradients flow (the default) */
  NG_REVERSE = 1,  /* torch.no_grad() / set_grad_enabled(False): a constant to reverse mode
                      (and to forward sweeps that stand for reverse mode: hvp, vhp, ...);
                      forward-mode AD (make_dual, torch.func.jvp) still flows, as in PyTorch */
  NG_ALL = 2,      /* torch.inference_mode(): a constant to both modes, like detach() */
};

/* What part of a training step an instruction belongs to (Inst.phase, stamped by
 * ir_emit from Func.phase): ad_reverse sets backward, optimizer.step() optimizer. */
enum { PH_FORWARD = 0, PH_BACKWARD = 1, PH_OPTIMIZER = 2 };

/* What an entry is for; the runtime driver picks entries by kind. */
typedef enum FuncKind {
  FK_FORWARD,      /* inference: inputs -> outputs */
  FK_TRAIN,        /* a training step: (data, labels) -> loss, updates parameters */
  FK_FUNCTION,     /* any other compiled function */
  FK_SCHED,        /* an LR scheduler step, run by the driver after every epoch */
  FK_EVAL,         /* an evaluation step: (data, labels) -> per-batch sums (loss, correct count) */
} FuncKind;

typedef struct Func {
  const char *name;           /* entry name: "forward" */
  FuncKind kind;
  Vec(Value) values;
  Vec(Inst) insts;            /* in execution order */
  Vec(ValId) inputs;          /* V_INPUT values in argument order */
  Vec(ValId) outputs;         /* returned values */
  Vec(const char *) out_names;/* one per output ("out", "loss") */
  /* State written back when the entry finishes (training steps): parameter
   * update_params[i] (a Program.params index) := value updates[i]. All reads
   * of the old values happen before any write. */
  Vec(ValId) updates;
  Vec(int) update_params;
  Span loc;                   /* the def in model.py */
  int grad_mode;              /* NG_*: ir_emit stamps it on every new instruction */
  int phase;                  /* PH_*: ir_emit stamps it on every new instruction */
  int scope;                  /* Program.scopes index: ir_emit stamps it on every new instruction
                                 (lowering sets it around a user module's forward, ad_reverse to
                                 that of the instruction it differentiates) */
  /* A batch dimension chosen at run time (--input x=f32[N,...] --max N=M): the
   * entry takes n (1 .. batch_max) as an argument. This Func was staged with
   * N = batch_n; batch_axis[v] is the axis of value v whose extent is a multiple
   * of N (-1: none), set by the compiler (compiler/batch.c) for inputs and
   * outputs. batch_max = 0: every size is static. */
  int64_t batch_max, batch_n;
  int *batch_axis;
  const struct Func *batch_ref;  /* the entry staged at N = batch_max: the memory plan's sizes */
  /* The C target computes the convolutions ir_conv_direct accepts directly, with
   * no unfolded columns (no scratch); set by the compiler for that target. */
  int conv_direct;
  /* The hosted C target may compute 3x3 stride-1 f32 convolutions by Winograd's F(2x2, 3x3)
   * (ir_conv_wino); set by the compiler (off with --no-winograd). */
  int conv_wino;
  /* The hosted C target may compute a stride-2 f32 convolution's input gradient phase by phase
   * (ir_conv_phase_bytes, its scratch); set by the compiler. */
  int conv_phases;
  /* An entry ctc derived for generation (torchlib/decode.c: the KV-cache decode and
   * prefill): inference only, it writes the caches it reads; gradcheck leaves it out. */
  int derived;
  /* Distributed builds (Program.distributed): the gradients of one reverse sweep,
   * sync[i] of parameter sync_params[i], which every reader must see averaged over
   * the ranks (DistributedDataParallel's all-reduce); codegen_c/dist_c.c buckets them. */
  Vec(ValId) sync;
  Vec(int) sync_params;
} Func;

/* A parameter or buffer of the model. */
typedef struct Param {
  const char *name;           /* state_dict name: "conv1.weight" */
  Type type;
  int is_buffer;              /* register_buffer rather than nn.Parameter */
  int is_state;               /* training state ("optimizer.<param>.momentum_buffer", "rng.offset",
                                 "<scheduler>.last_epoch") or ctc's own tensors ("ctc.const.N",
                                 "ctc.kv.*"): not in the state_dict; checkpoints carry it */
  int not_persistent;         /* register_buffer(persistent=False): in the arena, not in the state_dict */
  int complex64;              /* a complex64 tensor (torchlib/complex.c): type is its float32 storage S + [2],
                                 files hold it as complex64 S (ctc_tensor.complex64) */
  int low;                    /* 1 bfloat16, 2 float16 (model.bfloat16() / .half(), or an optimizer's state of
                                 such a parameter): type is DT_BF16 / DT_F16, read through a cast to float */
  int init;                   /* PINIT_* : how <model>_init fills it */
  double init_a, init_b;      /* PINIT_UNIFORM bounds, PINIT_CONST value (a), PINIT_NORMAL mean and std */
  int init_trunc;             /* PINIT_NORMAL truncated to [init_lo, init_hi] (nn.init.trunc_normal_): a value
                                 outside is drawn again */
  double init_lo, init_hi;
  const double *init_data;    /* PINIT_DATA: numel values (compile-time tensor) */
  int64_t init_zero_row1;     /* 0, or 1 + a row (first axis) <model>_init sets to 0 after the
                                 fill: nn.Embedding(padding_idx) */
  Span loc;                   /* where it was created */
  const char *assumed;        /* NULL, or why the compiled code takes the values <model>_init gives it
                                 as fixed ("fused attention at gpt.py:41 treats it as a causal mask"):
                                 a weights file with other values is refused (ctc_model_desc.assumed) */
} Param;
enum { PINIT_ZERO, PINIT_CONST, PINIT_UNIFORM, PINIT_NORMAL, PINIT_DATA };

/* One key of the model's state_dict(). */
typedef struct SdName {
  const char *name;           /* "lm_head.weight" */
  int param;                  /* the Program.params index holding its tensor ("transformer.wte.weight"'s) */
} SdName;

/* A script that trains at module level (torchlib/script.c): what the generated
 * program's `train` and `sample` need besides its entries (ctc_text_script). */
typedef struct TextScript {
  const char *where;          /* "gpt.py:104": the loop */
  const char *train_entry;    /* (x, y[, iter]) -> loss */
  const char *eval_entry;     /* (x, y) -> loss, estimate_loss's body; NULL: the loop evaluates nothing */
  int64_t steps, eval_interval, eval_iters;
  int eval_last;              /* also before the last step (`or iter == max_iters - 1`) */
  const char *eval_format;    /* the loop's print: {0} the step, {1} {2} the train and val losses */
  int32_t nvocab;
  const int32_t *vocab;       /* code points, sorted (sorted(set(text))) */
  int64_t ntrain, nval;
  const int32_t *train, *val; /* the tokens of the text read at compile time */
  double train_fraction;      /* where a text given at run time is split */
  int64_t sample_tokens;      /* generate(context, max_new_tokens=N) after the loop: N (0: none) */
  const char *gen_where;      /* "gpt.py:88": the generate it calls, read for the sampler (NULL: none) */
  int sample_crop;            /* generate crops the context to forward's window (else never slides it) */
  int64_t sample_top_k;       /* its top-k cut (0: none; 1: greedy argmax) */
  double sample_temperature;  /* what it divides the logits by (1.0: nothing) */
} TextScript;

/* A user module's call (Inst.scope): its path in the model ("h.0.attn") and class. */
typedef struct IrScope {
  const char *path, *cls;
} IrScope;

/* Instrumentation around every AD sweep and pass: compiler/main.c prints the
 * IR (--dump-before / --dump-after) and verifies it. `after` is 0 before the
 * pass, 1 after it. */
typedef struct Program Program;
typedef void (*IrPassHook)(void *ctx, const Program *p, const Func *f, const char *pass, int after);

struct Program {
  Arena *arena;
  const SrcFile *src;
  const char *model_name;     /* C prefix: "net" (from the class, lower-cased) */
  const char *class_name;     /* the nn.Module class: "Net" */
  const char *skipped;        /* lowering: functions not taken as automatic entries, one a line with why */
  const char *notes;          /* lowering: lines dropped from loop-body entries (host only), one a line */
  const char *decode_note;    /* lowering: why forward's causal attention gave no `decode` entry, or NULL */
  const TextScript *script;   /* lowering: a module-level training loop over a text, or NULL */
  Vec(Param) params;          /* state_dict order, then the training state */
  Vec(SdName) state_dict;     /* the model's state_dict() keys in PyTorch's order, each with the params
                                 index of its tensor: a tied parameter under each of its names, no
                                 non-persistent buffer, no training state (empty: no nn.Module) */
  Vec(Func *) funcs;          /* entries; funcs.data[0] is forward */
  IrPassHook hook;            /* NULL: none */
  void *hook_ctx;
  /* Called by ir_emit / ir_add_input, before anything is added, with the
   * instruction's location when a result type fails ir_type_problem; lowering
   * reports it as a user error there (it must not return). NULL: a ctc bug. */
  void (*type_error)(void *ctx, Span at, const char *msg);
  void *type_error_ctx;
  int no_remat;               /* --no-remat: reverse mode keeps forward values instead of recomputing them */
  int fuse_attention;         /* fused attention (ir_fuse_attention; LowerOptions.fuse_attention): 0, or
                                 IR_FUSE_ATTN, | IR_FUSE_ATTN_ROUNDED for chains with bf16 roundings */
  int low_store;              /* ir_pass_low_store: autocast's values kept for backward stored as bf16/f16 */
  int row_sums;               /* ir_pass_rowsplit: the hosted C target (set by the compiler before the passes) */
  int distributed;            /* CTC_DIST_*: data-parallel training (--distributed, or DistributedDataParallel) */
  double bucket_mb;           /* --bucket-mb / DDP's bucket_cap_mb: gradient bucket size (0: 25) */
  Vec(IrScope) scopes;        /* the user modules whose forward staged instructions (Inst.scope);
                                 [0] is none (the entry's own code); ir_scope adds them */
  Vec(const char *) imports;  /* lowering: the files of the local modules the model imported, as opened
                                 (beside the model file), in import order: `ctc -MD` lists them */
};
enum { CTC_DIST_NONE = 0, CTC_DIST_MPI = 1, CTC_DIST_NCCL = 2 };   /* NCCL: --target cuda */

/* ---- builder (builder.c) ------------------------------------------------ */

Program *ir_program_new(Arena *a, const SrcFile *src);
/* The model file's name without its folders ("model.py"), as generated files quote it: the
 * output does not depend on where the file is (byte-identical builds on any machine). */
const char *ir_source_name(const Program *p);
Func *ir_func_new(Program *p, const char *name, Span loc);
ValId ir_add_input(Program *p, Func *f, const char *name, Type t);
ValId ir_param_value(Program *p, Func *f, int param_index); /* one value per param per func */
/* Append an instruction; returns its result value (named `name`, NULL -> op name). */
ValId ir_emit(Program *p, Func *f, Op op, const ValId *args, int nargs, Type res,
              const int64_t *attr, int nattr, double fattr, Span loc, const char *name);
ValId ir_const(Program *p, Func *f, DType dt, double v, Span loc);
void ir_add_output(Program *p, Func *f, ValId v, const char *name);
/* A pass that rewrites f's instruction list in order (new ones emitted among the old, lowstore.c,
 * rowsplit.c): ir_insts_take empties f's list and returns its instructions (malloc'd, the
 * caller frees), ir_inst_push appends one of them again (its result's definition updated). */
Inst *ir_insts_take(Func *f);
void ir_inst_push(Program *p, Func *f, Inst in);
/* The Program.scopes index of the module at `path` (class cls), added on first use (> 0). */
int ir_scope(Program *p, const char *path, const char *cls);
/* At the end of f, parameter `param` := v (type must equal the parameter's);
 * updating the same parameter again replaces the earlier update. */
void ir_add_update(Program *p, Func *f, int param, ValId v);
static inline Value *ir_val(Func *f, ValId v) { return &f->values.data[v]; }
/* The instruction that defines v, NULL for an input, a parameter or a constant. */
static inline const Inst *ir_def(const Func *f, ValId v) {
  const Value *val = &f->values.data[v];
  if (val->kind != V_INST || val->def < 0 || val->def >= f->insts.len) return NULL;
  const Inst *in = &f->insts.data[val->def];
  return in->res == v ? in : NULL;
}
static inline Type *ir_type(Func *f, ValId v) { return &f->values.data[v].type; }
/* Report a pass (or AD sweep) starting (after = 0) or done (1) to p->hook. */
void ir_pass_event(Program *p, const Func *f, const char *pass, int after);
/* Remove instructions marked dead (values keep their ids). */
/* unslice.c: an ADD of UNSLICEs that tile one axis becomes their CONCAT (the
 * gradient of a value split into pieces); run before DCE. */
void ir_pass_unslice(Program *p, Func *f);
/* unbroadcast.c: an elementwise operand that is a BROADCAST reads the
 * BROADCAST's operand instead (the op broadcasts it itself); run before DCE. */
void ir_pass_unbroadcast(Program *p, Func *f);
/* cse.c: an instruction identical to one at most a few dozen before it, in the
 * same phase, is dropped and its uses read the earlier one (remat's copies). */
void ir_pass_cse(Program *p, Func *f);
/* cse.c: per value of f the first value of the same phase that computes the same (its value number,
 * at any distance: the copies reverse mode's rematerialisation makes), into canon[values.len]. */
void ir_value_numbers(const Func *f, ValId *canon);
/* cse.c: whether two instructions compute the same value (op, operands, attributes, phase, type). */
int ir_inst_same(const Func *f, const Inst *a, const Inst *b);
/* linsum.c: a sum over axes A of a combination of values with factors constant along A, one of
 * which waits for another sum over A of the same tensor (a normalisation's backward), becomes the
 * combination of the values' sums, each right after its value. Run before regroup and rowsplit. */
void ir_pass_linsum(Program *p, Func *f);
/* rowsplit.c: with Program.row_sums, a float32 sum over the last axis and others of an
 * elementwise value becomes a double sum over the rows (fused with the value's kernel), then
 * over the rest, cast back (BatchNorm's statistics and gradients). Run before regroup. */
void ir_pass_rowsplit(Program *p, Func *f);
/* regroup.c: an elementwise run moved up to follow an earlier run of its shape and phase whose
 * result it reads, when everything else it reads exists by then (a GEMM between them no
 * longer splits their loop). */
void ir_pass_regroup(Program *p, Func *f);
/* hoist.c: small elementwise values of parameters and literals move to
 * the front of f, so they do not split the kernels around their uses. */
void ir_pass_hoist(Program *p, Func *f);
/* lowstore.c: with Program.low_store, a rounded (round_bf16/round_f16) float32 value that
 * backward reads is also stored as bf16/f16, and backward reads a cast of that copy. */
void ir_pass_low_store(Program *p, Func *f);
/* The dtype ir_pass_low_store stores v in if backward reads it (DT_BF16, DT_F16), else DT_F32. */
DType ir_low_store_dtype(const Program *p, const Func *f, ValId v);
void ir_compact(Func *f);
/* attn.c: the staged chain softmax(q k^T * scale + causal mask) v whose intermediates
 * have no other use, from instruction `from` on, becomes one ATTENTION instruction
 * (ops.def); returns how many. Called where nothing differentiates the result again
 * (Program.fuse_attention: after staging, and before the sweep of backward()/step()). */
int ir_fuse_attention(Program *p, Func *f, int from);
enum { IR_FUSE_ATTN = 1, IR_FUSE_ATTN_ROUNDED = 2 };
/* An attention's attr[2]: where autocast rounds to bf16 in the fused chain (ops.def's ATTENTION);
 * with IR_ATTN_ROUND_F16 the roundings are to f16 */
enum { IR_ATTN_ROUND_SCORES = 1, IR_ATTN_ROUND_SCALED = 2, IR_ATTN_ROUND_MASKED = 4, IR_ATTN_ROUND_P = 8,
       IR_ATTN_ROUND_F16 = 16 };
/* v's values (numel doubles into out) when they are computable at compile time from
 * literals and the initial values of buffers and ctc's constants (not of trainable
 * parameters, nor of anything an entry writes) through ops the reference evaluator
 * knows (at most 2^22 elements); 0 otherwise. */
int ir_const_eval(const Program *p, const Func *f, ValId v, double *out, Arena *a, int depth);
/* Marks every parameter ir_const_eval(v) read as assumed (Param.assumed = why): the
 * code compiled from those values is only right for them. */
void ir_assume_params(Program *p, const Func *f, ValId v, const char *why);

/* ---- printer (printer.c) and verifier (verify.c) ------------------------ */

int ir_nattrs(const Func *f, const Inst *in);   /* see ir_op_nattrs */

void ir_print_func(FILE *out, const Program *p, const Func *f);
void ir_print_program(FILE *out, const Program *p);
/* Checks SSA form, operand counts, dtypes and every op's shape rule.
 * Returns 0, or prints the first problem to `out` and returns -1. */
int ir_verify(const Program *p, const Func *f, FILE *out);
/* ir_verify of the instructions from index first on (and their values): those
 * before were verified already (the pass hook after an AD sweep, which appends). */
int ir_verify_from(const Program *p, const Func *f, int first, FILE *out);

/* ---- passes -------------------------------------------------------------
 * Each pass is one file with the signature `void pass(Program *, Func *)`.
 * The driver (compiler/main.c, run_pass) runs them in order, reports them to the
 * pass hook and verifies after each. */

void ir_pass_dce(Program *p, Func *f);       /* dce.c: drop instructions whose result is unused */

/* ---- memory plan (plan.c) -------------------------------------------------
 * Every tensor lives at a static byte offset in one arena:
 *   [ parameters (state_dict order) | activations of the running entry ]
 * Activations are packed by liveness (first fit), so entries share the space. */

typedef enum LocBase {
  LOC_LOCAL = -3,    /* lives only inside one fused kernel (a scalar local): no storage */
  LOC_NONE = -2, LOC_ARENA = -1 /* >= 0: entry input k */
} LocBase;
typedef struct Loc {
  int base;          /* LOC_ARENA, LOC_NONE (scalar constants: inlined), or input index */
  int64_t offset;    /* bytes from the base */
} Loc;

/* What the kernel layer (kernels/) tells the planner about one function:
 * step[i] is instruction i's kernel (non-decreasing along the instructions);
 * lifetimes are measured in steps, so all operands of a kernel live until its
 * end and its results from its start. nostore[v] marks values that live only
 * inside their kernel (LOC_LOCAL). NULL hints: one step per instruction. */
typedef struct PlanHints {
  const int *step;              /* per instruction */
  const unsigned char *nostore; /* per value */
  /* per value r: -1, or an operand v of r's kernel that the kernel reads only at
   * r's own element indices with r's element size; r may then take over v's
   * bytes if v dies in that kernel (in place: the emitter loads every input of
   * an element before it stores any output of it). NULL: never. */
  const ValId *inplace;
  /* per value v: -1, or the Program.params index of a parameter update that v
   * is computed directly into (v := new value of that parameter, stored in
   * the parameter's bytes instead of an activation and a write-back copy).
   * The schedule allows it when no kernel after v's reads the parameter, v's
   * kernel reads it only at v's own element, and no output or other update
   * reads the parameter at the end. NULL: never. */
  const int *update_into;
  /* per value: 1 for a view the schedule folded into its readers' indexing (a
   * SLICE or PERMUTE read through strides): no storage, it reads its operand's
   * root like RESHAPE views do. NULL: none. */
  const unsigned char *strided;
  /* per value: -1, or its family (kernels/reroll.c: the values at the same place of
   * every step of a run of repeated steps), family_ix[v] its step. The planner
   * places a family's stored members at one constant stride (0 when their
   * lifetimes follow one another), member i at the first's offset + i * stride, so
   * that a loop over the steps addresses each as base + t*stride. NULL: none. */
  const int *family;
  const int *family_ix;
} PlanHints;

typedef struct FuncPlan {
  Loc *loc;          /* per value */
  PlanHints hints;   /* as given (NULL members: unfused) */
  ValId *shares;     /* per value: the value whose bytes it took over in place (PlanHints.inplace), or -1 */
  int64_t *scratch;  /* per instruction: arena offset of its scratch space, -1 if none */
  int64_t peak;      /* bytes of the activation region this function needs */
  int64_t pack_at, pack_bytes;   /* the region above its activations where a time loop's weights are
                                    packed (kernels/prepack.c), reserved by ir_plan_reserve; 0 bytes: none */
} FuncPlan;

typedef struct MemPlan {
  int64_t *param_offset;   /* per Program.params entry, 64-byte aligned */
  int64_t params_bytes;    /* size of the parameter region */
  FuncPlan *funcs;         /* per Program.funcs entry */
  int64_t arena_bytes;     /* params_bytes + max peak */
  /* Non-NULL when the arena would exceed CTC_MAX_ARENA_BYTES: the message, at
   * the parameter's creation or the instruction that first goes past it. The
   * rest of the plan is then incomplete and must not be used. */
  const char *error;
  Span error_at;
} MemPlan;
/* Reserves `bytes` more of function fi's activation region, above what its values take, as its
 * pack region (FuncPlan.pack_at); the arena grows to hold it. 0, or -1 (nothing changed) when
 * that would pass CTC_MAX_ARENA_BYTES. */
int ir_plan_reserve(MemPlan *mp, int fi, int64_t bytes);
/* The bytes of function fi's activation region its values take: its peak without the pack region. */
int64_t ir_plan_values_peak(const MemPlan *mp, int fi);

/* The low precision of v's elements: 1 bf16, 2 f16 (a round_bf16 / round_f16 result,
 * autocast's values; the cast of a .bfloat16() / .half() model's stored tensor; views of one, a
 * concatenation of such of one kind), else 0. ir_low_operands: the kind both operands of a
 * GEMM or convolution share (0 if they differ), which their microkernels may multiply in
 * (builder.c). */
int ir_low_kind(const Func *f, ValId v);
int ir_low_operands(const Func *f, const Inst *in);
/* Scratch bytes an instruction needs while it runs (CONV2D: its im2col buffer);
 * INT64_MAX when that does not fit in int64. */
int64_t ir_scratch_bytes(const Func *f, const Inst *in);
/* A convolution (forward or weight gradient) cheaper computed directly than as
 * unfolded columns and a GEMM: stride and dilation 1, one group, at most
 * IR_CONV_DIRECT_MAX_W weights (the GEMM would have few rows and columns), output
 * rows of at least 16 (forward) or 8 (weight gradient) elements, which the
 * direct loops run in SIMD lanes, and a small block of partial sums (at most
 * 1024 outputs of a row, 4096 per kernel row of the gradient). Only where
 * f->conv_direct is set. */
#define IR_CONV_DIRECT_MAX_W 2048
int ir_conv_direct(const Func *f, const Inst *in);
/* A depthwise convolution (one input channel per group) or one of its gradients,
 * which the C target computes directly (f->conv_direct), no scratch: at most
 * IR_CONV_DIRECT_MAX_W kernel taps and 1024 output columns. */
int ir_conv_depthwise(const Func *f, const Inst *in);
/* An f32 weight gradient (CONV2D_BWD_WEIGHT) of one group, 32 to C*KH*KW output channels, that
 * the C target (f->conv_direct) unfolds: computed as dW^T[C*KH*KW, O] = columns x g^T, so that the
 * GEMM repacks g (O rows) instead of the columns (C*KH*KW rows, reused only O/12 times), then
 * transposed into dW; dW^T is part of its scratch (ir_scratch_bytes). */
int ir_conv_wgrad_t(const Func *f, const Inst *in);
/* A convolution (CONV2D) or one of its gradients (CONV2D_BWD_INPUT, CONV2D_BWD_WEIGHT) that the
 * hosted C target (f->conv_wino) computes by Winograd's F(2x2, 3x3) where the compiler targets
 * AVX-512, AVX2 or NEON (codegen_c/wino_c.c): f32 values that are not 16-bit ones (ir_low_operands 0),
 * one group, 3x3 taps, stride and dilation 1, padding 1, even image sizes, 16 to
 * IR_CONV_WINO_MAX_K input channels and at least 16 output channels (of the convolution the call
 * computes: the input gradient's are the forward's swapped), at most IR_CONV_WINO_MAX_W weights,
 * at least IR_CONV_WINO_MIN_TILES 2x2 tiles of outputs in the batch (the weights' transform, once a
 * call, costs as much as the products of some 16 tiles, and a GEMM panel holds 16 or 32 tiles: 256
 * channels of 4x4 images at batch 1, 4 tiles, took 0.88 ms against the implicit GEMM's 0.23 on
 * AVX2; 8x8 at batch 1, 16 tiles, 0.21-0.25 against 0.23; 32 tiles 1.4x faster than it).
 * Its scratch (part of ir_scratch_bytes): the transformed weights [16, M, K] (the weight
 * gradient's sums) and a block of ir_conv_wino_block tiles' transformed inputs [16, K B + 16] and
 * products (output gradients) [16, M B + 16], with B 32 tiles more when it is 64 or more and the
 * call is not the weight gradient (the blocks of B / n tiles that each of n threads takes, their
 * planes 16 floats apart). */
#define IR_CONV_WINO_MAX_K 512
#define IR_CONV_WINO_MAX_W ((int64_t)1 << 18)
#define IR_CONV_WINO_MIN_TILES 32
int ir_conv_wino(const Func *f, const Inst *in);
int64_t ir_conv_wino_block(const Func *f, const Inst *in);
/* Convolutions unfold up to IR_CONV_SCRATCH_BYTES of images at a time (at least
 * one, at most the batch): ir_conv_slots images of ir_conv_image_bytes each. */
#define IR_CONV_SCRATCH_BYTES ((int64_t)8 << 20)
/* The C target (f->conv_direct) caps a tile at IR_CONV_TILE_BYTES of columns (they
 * stay in the cache between im2col and the GEMM) unless that leaves fewer than
 * IR_CONV_TILE_COLS columns (too narrow a GEMM). */
#define IR_CONV_TILE_BYTES ((int64_t)1 << 20)
#define IR_CONV_TILE_COLS 128
int64_t ir_conv_image_bytes(const Func *f, const Inst *in);
/* The scratch bytes of an f32 stride-2 convolution's input gradient computed phase by phase (the
 * hosted C target, f->conv_phases; codegen_c/linalg_c.c's emit_conv2d_bwd_phases): one group, no
 * dilation, an image twice the output's size, output images of a multiple of 16 pixels, at most
 * 64 taps: the phases' weights [C, O*KH*KW] and the four phases of S images (1024 pixels, at least
 * 8 images, at most the batch); 0 for any other instruction. */
int64_t ir_conv_phase_bytes(const Func *f, const Inst *in);
/* The scratch bytes of a stride-1 convolution of bf16 values (ir_low_operands 1: autocast's, a
 * .bfloat16() model's), or of one of its gradients, that the hosted C target (f->conv_phases)
 * computes, where the compiler targets AVX-512 BF16, as a GEMM per output position over panels
 * of 32 images (codegen_c/conv_bat_c.c; the taps in the padding skipped): one group, no
 * dilation, padding (KH - 1) / 2, (KW - 1) / 2, stride 1 and an output the size of the input,
 * or (the forward at a static batch) stride 2, more than one tap (a 1x1 shortcut ran 0.78x) and an
 * output half the input's size (its weight gradient this way measured no faster); images of a
 * multiple of 16 pixels, at most 64 taps, at least 8 channels into the GEMMs (the input's; the
 * input gradient's: the output's; with 3, a 3-channel stem, it ran 0.78x forward, 0.95x the
 * weight gradient), a batch of a multiple of 32 (or one chosen at run time,
 * f->batch_max: the program takes it at such batches), and at most IR_CONV_BAT_MAX_BYTES of
 * scratch: each tap's weights [KH*KW, M, wq] (wq: the input channels' pairs rounded up to 16)
 * and the input and output laid out by position [H*W, nb, Cq, 32], [OH*OW, nb, M, 32] (nb panels of 32
 * images, Cq pairs of input channels, M output channels); the weight gradient's dW^T [C*KH*KW, O],
 * x's and g's channels by position with pairs of images [C + O, OH*OW, nb * 16] and g's as
 * op(B)'s panels [O rounded up to 32, OH*OW, nb * 16]. 0 for any other instruction. With a batch
 * chosen at run time it answers for f->batch_ref's instruction (the same at every batch). */
#define IR_CONV_BAT_MAX_BYTES ((int64_t)8 << 20)
int64_t ir_conv_bat_bytes(const Func *f, const Inst *in);
int64_t ir_conv_slots(const Func *f, const Inst *in);
/* Value v may share storage with its operand (RESHAPE of a value in memory). */
int ir_is_view(const Func *f, ValId v);
MemPlan *ir_plan_memory(Program *p);
/* The same over kernels: hints[k] for Program.funcs[k] (see PlanHints). */
MemPlan *ir_plan_memory_hints(Program *p, const PlanHints *hints);
/* plan_check.c: recomputes lifetimes and checks that no two values live at the
 * same time share bytes, views sit on their operands, everything fits its
 * region. Returns 0, or prints the first problem to `out` and returns -1. */
int ir_plan_check(const Program *p, const MemPlan *mp, FILE *out);

/* numpy broadcasting of a and b into out; returns 0 or -1 if incompatible. */
int ir_broadcast_shapes(const Type *a, const Type *b, Type *out);

/* ---- shape rules (shape.c) -------------------------------------------------
 * The result type of op on operands of types a[0..nargs) with attributes attr:
 * NULL with *out set, or why the operands do not fit, or IR_TYPE_GIVEN for ops
 * whose instruction chooses its result type (cast's dtype, reshape, broadcast,
 * slice, the pools, ...). Staging and the verifier share these rules. */
extern const char ir_type_given[];
#define IR_TYPE_GIVEN ir_type_given
const char *ir_infer_type(Op op, const int64_t *attr, int nargs, const Type *a, Type *out);

/* ---- the reference evaluator (elem.c, interp.c) ------------------------------
 * What an op computes, evaluated on host values from the one statement of it:
 * ops.def's row (an elementwise op's C template, as the emitter prints it). Values
 * are doubles holding values of their dtype. Each returns 1, or 0 for an op (or
 * an operation C leaves undefined) it does not know: the caller refuses then. */

/* The C template of elementwise op in compute type ct: ops.def's c_expr, or the
 * integer form (wrapping, never trapping) for i64/i32, or a ctc_ helper's call. */
const char *ir_elem_template(Op op, DType ct);
/* The type op's template computes in: operand 0's for cast and comparisons, else
 * the result's. */
DType ir_elem_compute_type(Op op, DType arg0, DType res);
/* Helper k of the generated file (ctc_<name>_<dt>, which templates call): returns its
 * name (NULL past the last), sets *text to its C expression of A, B, C for dtype ct (NULL
 * where it has none; calls of earlier helpers without the dtype suffix) and *nargs. */
const char *ir_elem_helper(int k, DType ct, const char **text, int *nargs);
/* round_bf16's value (ops.def): x rounded to float, then to bfloat16 (nearest, ties to even;
 * NaN kept), as a double. */
double ir_round_bf16(double x);
/* round_f16's value (ops.def): x rounded to float, then to IEEE binary16 (nearest, ties to even) */
double ir_round_f16(double x);
/* One element: r = op(x[0], x[1], x[2]) computed in ct, stored as dtype rt. */
int ir_elem_eval(Op op, DType ct, DType rt, const double *x, double *r);
/* One instruction on dense row-major operands a[k] of types ta[k], into out (the
 * result's elements, type tr): elementwise ops (broadcasting), reductions, const,
 * iota, data movement, concat, matmul, conv2d and the pools. */
int ir_eval(Op op, const int64_t *attr, double fattr, int nargs, const Type *ta, const double *const *a,
            const Type *tr, double *out);
/* ir_eval of instruction in of f. */
int ir_eval_inst(const Func *f, const Inst *in, const double *const *a, double *out);

#endif
