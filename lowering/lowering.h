/* lowering.h - staging a parsed model file into IR.
 *
 * Module-level code and every __init__ run at compile time in a small
 * evaluator (ints, floats, strings, tuples, lists, dicts, classes, layer
 * objects); the chosen model's forward is then run once more with tensor
 * values that are IR values of static shape, so the Python-level structure
 * (loops over layers, shape arithmetic, `if` on configuration) disappears and
 * only tensor operations remain, each an instruction with its source line. */
#ifndef CTC_LOWERING_H
#define CTC_LOWERING_H

#include "../frontend/frontend.h"
#include "../ir/ir.h"

/* An input shape from the command line: --input x=f32[64,1,28,28]. */
typedef struct InputSpec {
  const char *name;   /* the entry's parameter name */
  Type type;
  int ntuple;         /* > 0: a tuple of tensors, --input h=(f32[2,3,8],f32[2,3,8]) (an LSTM's state) */
  Type *elems;        /* its ntuple element types */
  const char *sym;    /* a named dim, --input x=f32[N,784] (the run-time batch), or NULL */
  unsigned symmask;   /* the axes of `type` that are `sym` (their dims are 1 until the driver
                         substitutes a value: lower_input_specs_at) */
  int low;            /* 1 bf16[...], 2 f16[...]: a float32 input rounded to bfloat16 / float16 on entry
                         (the input of a model.bfloat16() / .half() model) */
} InputSpec;

typedef struct LowerOptions {
  const char *model;        /* --model NAME: class or module-level instance; NULL = default */
  const char *script_args;  /* --args '...': the script's own command line, read by argparse's parse_args() */
  const char *pylib;        /* the folder of ctc's own Python packages (pylib/, beside the compiler's build/:
                               torchvision's model builders), searched for imports after the model file's folder */
  const char *prefix;       /* --name: C prefix of generated symbols; NULL = from the class */
  int ninputs;
  const InputSpec *inputs;  /* --input specs (win over example_inputs in the file) */
  int nentries;
  const char *const *entries; /* --entry NAME: module-level functions to compile as entries;
                                 none given: every function that calls backward()/step()/
                                 torch.autograd.grad */
  int no_remat;             /* --no-remat: no rematerialisation in reverse mode (Program.no_remat) */
  int fuse_attention;       /* fused attention (Program.fuse_attention, ir_fuse_attention): the C and CUDA
                               targets, not --no-fuse, --anomaly, --dtype f64, --quantize or --freestanding;
                               | IR_FUSE_ATTN_ROUNDED (chains with autocast's roundings): the C target */
  int low_store;            /* autocast's values kept for backward stored as bf16/f16 (Program.low_store,
                               ir_pass_low_store): the C and CUDA targets, not --no-low-store, --quantize, --freestanding */
  int row_sums;             /* sums split into row sums (Program.row_sums, ir_pass_rowsplit): the hosted C target */
  int cuda_target;          /* --target cuda: torch.autocast('cuda') regions apply (PyTorch's CUDA lists,
                               torchlib/autocast.c); on the C target they are disabled with a note */
  int distributed;          /* --distributed mpi: CTC_DIST_* (Program.distributed; a file that uses
                               DistributedDataParallel sets it too) */
  double bucket_mb;         /* --bucket-mb (0: DDP's bucket_cap_mb, else 25) */
  DType float_dtype;        /* --dtype f64: DT_F64 makes the whole program double precision
                               (lower_program ends by turning every f32 value, parameter,
                               input, output and cast of the staged IR into f64, explicit
                               .float()/dtype=torch.float32 included, and adds the hidden
                               __grad_<entry> entries of `./net gradcheck`); DT_F32 (0):
                               as staged */
  int64_t fwd_batch_from;   /* > 0 (the compiler's variable-batch forward): forward's inputs whose axis 0 */
  int64_t fwd_batch_to;     /* is fwd_batch_from get fwd_batch_to there (the other entries keep theirs) */
  IrPassHook hook;          /* set on the Program before staging (AD sweeps report to it) */
  void *hook_ctx;
} LowerOptions;

/* Parse "x=f32[64,1,28,28]" (dtype optional, default f32), or a tuple of such types
 * "h=(f32[2,3,8],f32[2,3,8])". A dim may be a name ("x=f32[N,784]", not in tuples).
 * 0 ok, -1 bad syntax. */
int lower_parse_input_spec(Arena *a, const char *text, InputSpec *out);

/* Evaluate the module, instantiate the model, stage its entries. Returns NULL
 * after reporting errors through d. */
Program *lower_program(Arena *a, Diag *d, const SrcFile *src, Node *module, const LowerOptions *opt);

#endif
