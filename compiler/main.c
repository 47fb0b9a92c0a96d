/* main.c - the ctc driver: command line, the pass pipeline, and `ctc build`
 * invoking the system C compiler. */
#include <errno.h>
#include <libgen.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "../codegen_c/codegen_c.h"
#include "../codegen_cuda/codegen_cuda.h"
#include "../frontend/frontend.h"
#include "../ir/ir.h"
#include "../kernels/kernels.h"
#include "../kernels/kir.h"
#include "../lowering/lowering.h"
#include "batch.h"
#include "build.h"
#include "convert.h"
#include "depfile.h"
#include "embed.h"
#include "opts.h"
#include "quantize.h"
#include "validate.h"

#define CTC_VERSION "0.1.0"

static const char *usage =
    "usage: ctc <command> FILE [options]\n"
    "\n"
    "commands:\n"
    "  compile FILE -o OUT.c   compile a PyTorch model file to C (writes OUT.c and OUT.h);\n"
    "                          with --target cuda: -o OUT.cu (writes OUT.cu and OUT.h)\n"
    "  build FILE -o PROGRAM   compile, then build PROGRAM with the system C compiler and the\n"
    "                          runtime (OpenBLAS and OpenMP when present); also keeps PROGRAM.c/.h\n"
    "                          (--target cuda: with nvcc, or --emulate; keeps PROGRAM.cu/.h)\n"
    "  check FILE              parse, evaluate and shape-check only\n"
    "  convert IN -o OUT       convert weights between safetensors and PyTorch checkpoints: IN is\n"
    "                          a .safetensors or a torch.save file (IN:KEY takes the state_dict under\n"
    "                          KEY, e.g. ckpt.pt:model); OUT's extension picks the format, .safetensors\n"
    "                          or .pt/.pth (float16/bfloat16 become float32; tied weights are copied)\n"
    "\n"
    "options:\n"
    "  -o PATH                 output file\n"
    "  --target c|cuda         code generator (default c); cuda: CUDA C++ with cuBLAS (a kernel per\n"
    "                          fused loop nest): `compile -o OUT.cu`, `build` with nvcc ($NVCC, else\n"
    "                          nvcc on PATH or in /usr/local/cuda/bin) for sm_80 and sm_90\n"
    "  --emulate               (build --target cuda) build for the CPU instead: the .cu as C++ against\n"
    "                          runtime_min/cuda_emu (CUDA emulated, no GPU needed; --cc, $CC or cc)\n"
    "  --tf32                  (cuda) let cuBLAS use TF32 tensor cores for f32 GEMMs (less precise)\n"
    "  --emit ast|ir|kernels|kir|dot|c  what `compile` writes (default c); ast, ir, kernels (the partition\n"
    "                          into fused loop nests), kir (the fused loop nests' kernel IR) and dot (the IR as a Graphviz graph: model lines,\n"
    "                          forward/backward/optimizer colours, fused kernels boxed) go to -o or stdout\n"
    "  --fixed-batch           forward runs only at its planned batch (by default it takes any batch\n"
    "                          from 1 to it where the model's forward allows, see docs/program.md)\n"
    "  --no-fuse               one loop nest per instruction (the unfused reference, for debugging)\n"
    "  --no-fuse-attention     attention as its matmul/softmax kernels, not one fused call\n"
    "  --no-low-store          training under autocast: keep the bf16/f16 values backward reads as\n"
    "                          float32 buffers, not as 16-bit copies (the default)\n"
    "  --no-winograd           3x3 stride-1 convolutions and their gradients as implicit GEMMs or im2col,\n"
    "                          not by Winograd's F(2x2, 3x3) (the C target's default with AVX-512 or AVX2)\n"
    "  --distributed mpi       data-parallel training: the training entry averages its gradients over\n"
    "                          the MPI ranks (buckets all-reduced while backward runs), `build` links\n"
    "                          MPI (mpicc) and `./PROGRAM train` shards the data under mpirun; a file\n"
    "                          that wraps its model in DistributedDataParallel gets the same\n"
    "  --distributed nccl      the same for --target cuda: ncclAllReduce on the device arena, one rank\n"
    "                          per GPU under mpirun (`build`: nvcc with MPI's flags and -lnccl); a\n"
    "                          DistributedDataParallel file built with --target cuda gets the same\n"
    "  --bucket-mb N           (distributed) gradient bucket size in MiB (default: the file's\n"
    "                          DDP bucket_cap_mb, else 25)\n"
    "  --dtype f64             the whole model in double precision: parameters, buffers, optimizer\n"
    "                          state, activations, float inputs and outputs (f32 ones, explicit\n"
    "                          .float() included, become f64); adds the hidden entries of\n"
    "                          `./net gradcheck` (default: f32, as the file says)\n"
    "  --no-remat              training: keep the forward values backward reads instead of recomputing\n"
    "                          cheap elementwise ones there (more memory, less arithmetic)\n"
    "  --model EXPR            the model: an nn.Module class or module-level instance by name,\n"
    "                          or a Python expression in the file's namespace ('GPT(GPTConfig(n_layer=4))')\n"
    "                          (default: the module-level `model`, else the instance the entries use,\n"
    "                          else the only nn.Module class)\n"
    "  --args 'ARGS'           the script's own command line, as argparse's parse_args() reads it\n"
    "  --name PREFIX           C prefix of generated symbols (default: the class name, lower-case)\n"
    "  --entry NAME            also compile the module-level function NAME as an entry (repeatable;\n"
    "                          default: every function that calls backward(), step() or\n"
    "                          torch.autograd.grad, e.g. a train_step)\n"
    "  --input NAME=f32[d,...] shape (and dtype: f32 f64 i64 i32 bool) of forward's parameter NAME;\n"
    "                          repeatable; wins over example_inputs in the file. A dim may be a name\n"
    "                          (x=f32[N,1,28,28]): a batch chosen at run time, up to --max\n"
    "  --max N=M               the largest run-time batch N (the arena is planned for it;\n"
    "                          default: the size example_inputs in the file gives)\n"
    "  --validate              compile the generated code again inside ctc: the kernels with NVRTC (sm_80,\n"
    "                          sm_90), the C (and the CUDA host side) with libclang; a diagnostic is an\n"
    "                          internal error (exit 3); a compiler that cannot be loaded is a note\n"
    "  --stats                 print parameter count, arena size and timings to stderr\n"
    "  --profile               time every kernel of the generated entries (./net run|train|bench\n"
    "                          --profile trace.json: a Chrome trace and a table per model line)\n"
    "  --anomaly               every kernel checks its outputs for NaN/Inf; the first stops the entry\n"
    "                          with the op and model line (for backward code: the line it differentiates)\n"
    "  --dump-before PASS      print each function's IR to stderr before PASS (ad_reverse,\n"
    "                          ad_forward, unslice, unbroadcast, linsum, regroup, rowsplit, cse, dce,\n"
    "                          hoist, low_store, or all);\n"
    "                          repeatable\n"
    "  --dump-after PASS       the same after PASS (also: lower, the staged IR before passes)\n"
    "  --freestanding          (compile) model.c/.h for a microcontroller or bare metal: only <stddef.h>,\n"
    "                          <stdint.h>, <string.h> and the math functions the header names; no runtime,\n"
    "                          file I/O, allocation, OpenMP or BLAS (docs/microcontrollers.md)\n"
    "  --no-libm               (freestanding) ctc's own expf, logf, tanhf, erff, sqrtf, ... instead of libm\n"
    "  --embed-weights W       (freestanding) the parameters of W (safetensors or a PyTorch checkpoint) as\n"
    "                          const arrays (flash); the arena holds only the activations (RAM)\n"
    "  --quantize int8         int8 post-training quantization of the forward entry (docs/quantization.md): with\n"
    "                          --calibrate X.npy (samples the float model runs on for the activations'\n"
    "                          ranges) and the weights (--weights W, or --embed-weights W with --freestanding)\n"
    "  --calibrate X.npy       (--quantize) calibration samples [S, ...input shape without the batch]\n"
    "  --weights W             (--quantize) the float weights to quantize (safetensors or a checkpoint)\n"
    "  --cc CC                 (build) C compiler to use (default: $CC or cc); a command with\n"
    "                          arguments is split on blanks, as make's CC: --cc \"ccache gcc\"\n"
    "  -O0|-O1|-O2|-O3|-Os     (build) the C compiler's optimisation level instead of ctc's -O3 (-O2\n"
    "                          for --emulate), also when --cc's command has one (--cc \"cc -O1\"); -O1\n"
    "                          builds large unrolled models much faster\n"
    "  --cflags 'FLAGS'        (build) more flags for the C compiler (and nvcc), split on blanks and\n"
    "                          passed after ctc's own, so they win: --cflags '-march=haswell -g'\n"
    "                          (a -march in --cc's command replaces ctc's -march=native, which\n"
    "                          a cross compiler, -dumpmachine of another architecture, never gets);\n"
    "                          repeatable. They are part of the runtime object cache's key\n"
    "  --verbose, -v           (build) print the compiler's command line to stderr\n"
    "  --no-blas               (build) use the portable GEMM even if OpenBLAS is installed\n"
    "  --no-openmp             (build) do not pass -fopenmp\n"
    "  --shared                (build) a shared library instead of a program: -o libNAME.so, with the\n"
    "                          header libNAME.h (and libNAME.c) beside it; link with -lNAME, -I runtime_min\n"
    "  --python                (build) a CPython extension module: -o NAME makes NAME<EXT_SUFFIX> (or\n"
    "                          -o NAME.so), `import NAME; m = NAME.Model(\"w.safetensors\"); m.forward(x)`;\n"
    "                          built for $PYTHON, else python3 on PATH\n"
    "  -MD, --depfile FILE     (compile, build) also write a make rule naming the files the output\n"
    "                          depends on: the model file and the local modules it imported\n"
    "                          (-MD: OUT.d; docs/build-systems.md)\n"
    "  -h, --help              this help\n"
    "  --version               print the version\n"
    "\n"
    "exit status: 0 success, 1 error in the model or the command line, 2 I/O error or the C\n"
    "compiler failed, 3 internal error (a bug in ctc)\n";

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* --quantize's combinations (docs/quantization.md) */
static int quant_check_opts(Diag *d, const Opts *o) {
  if (!o->quantize) {
    if (o->calibrate || o->weights) {
      diag_plain(d, "%s goes with --quantize int8", o->calibrate ? "--calibrate" : "--weights");
      return -1;
    }
    return 0;
  }
  if (strcmp(o->quantize, "int8")) {
    diag_plain(d, "unknown --quantize '%s' (expected int8)", o->quantize);
    return -1;
  }
  if (strcmp(o->cmd, "compile") && strcmp(o->cmd, "build")) {
    diag_plain(d, "--quantize goes with 'compile' or 'build'");
    return -1;
  }
  if (!o->calibrate) {
    diag_plain(d, "--quantize int8 needs --calibrate X.npy (samples of the input to measure the activations' ranges on)");
    return -1;
  }
  if (!o->weights && !o->embed) {
    diag_plain(d, "--quantize int8 needs the trained weights: --weights W (or --embed-weights W with --freestanding)");
    return -1;
  }
  if (o->weights && o->embed) {
    diag_plain(d, "--weights and --embed-weights both name the weights to quantize: give one");
    return -1;
  }
  const char *what = o->target && strcmp(o->target, "c") ? "--target cuda" : o->profile ? "--profile"
                     : o->anomaly ? "--anomaly" : o->lower.distributed ? "--distributed" : o->shared ? "--shared"
                     : o->python ? "--python" : o->max_name ? "--max" : o->emit && strcmp(o->emit, "c") ? "--emit" : NULL;
  for (int i = 0; i < o->inputs.len && !what; i++)
    if (o->inputs.data[i].sym) what = "a run-time batch (--input x=f32[N,...])";
  if (what) {
    diag_plain(d, "%s is not supported with --quantize int8", what);
    return -1;
  }
  return 0;
}

static int parse_args(Arena *a, Diag *d, int argc, char **argv, Opts *o) {
  for (int i = 1; i < argc; i++) {
    const char *s = argv[i], *eq = NULL;   /* --name=value: the value, which NEXT() takes */
    if (s[0] == '-' && s[1] == '-' && strchr(s, '=') && strncmp(s, "--cflags=", 9)) {
      eq = strchr(s, '=') + 1;
      s = arena_strndup(a, s, (size_t)(eq - 1 - s));
    }
#define NEXT()                                                                                   \
  (eq ? (eq = NULL, argv[i] + strlen(s) + 1)                                                     \
   : i + 1 < argc ? argv[++i]                                                                    \
                  : (diag_plain(d, "option '%s' needs an argument", s), (char *)NULL))
    if (!strcmp(s, "-h") || !strcmp(s, "--help")) {
      fputs(usage, stdout);
      exit(0);
    } else if (!strcmp(s, "--version")) {
      printf("ctc %s\n", CTC_VERSION);
      exit(0);
    } else if (!strcmp(s, "-o")) {
      if (!(o->out = NEXT())) return -1;
    } else if (!strcmp(s, "--target")) {
      if (!(o->target = NEXT())) return -1;
    } else if (!strcmp(s, "--emit")) {
      if (!(o->emit = NEXT())) return -1;
    } else if (!strcmp(s, "--args")) {
      if (!(o->lower.script_args = NEXT())) return -1;
    } else if (!strcmp(s, "--model")) {
      if (!(o->lower.model = NEXT())) return -1;
    } else if (!strcmp(s, "--name")) {
      if (!(o->lower.prefix = NEXT())) return -1;
    } else if (!strcmp(s, "--entry")) {
      const char *e = NEXT();
      if (!e) return -1;
      vec_push(a, &o->entries, e);
    } else if (!strcmp(s, "--cc")) {
      if (!(o->cc = NEXT())) return -1;
    } else if (!strcmp(s, "--cflags") || !strncmp(s, "--cflags=", 9)) {
      const char *v = s[8] == '=' ? s + 9 : NEXT();
      if (!v) return -1;
      vec_push(a, &o->cflags, v);
    } else if (s[0] == '-' && s[1] == 'O' && (!s[2] || strspn(s + 2, "0123456789") == strlen(s + 2) ||
                                              !strcmp(s + 2, "s") || !strcmp(s + 2, "g") || !strcmp(s + 2, "fast"))) {
      o->opt_level = s;
    } else if (!strcmp(s, "--verbose") || !strcmp(s, "-v")) {
      o->verbose = 1;
    } else if (!strcmp(s, "--input")) {
      const char *spec = NEXT();
      if (!spec) return -1;
      InputSpec is;
      if (lower_parse_input_spec(a, spec, &is) < 0) {
        diag_plain(d, "bad --input '%s': expected NAME=f32[d1,d2,...] or NAME=(f32[...],f32[...]) (dtypes f32 f64 i64 i32 bool, bf16 f16 (float32 rounded on entry), or PyTorch's float32 float float64 double int64 long int32 int bfloat16 float16 half, with or without torch.)", spec);
        return -1;
      }
      vec_push(a, &o->inputs, is);
    } else if (!strcmp(s, "--max")) {
      const char *spec = NEXT();
      if (!spec) return -1;
      const char *eq = strchr(spec, '=');
      char *end = NULL;
      long long v = eq ? strtoll(eq + 1, &end, 10) : 0;
      if (!eq || eq == spec || !end || *end || end == eq + 1 || v < 1 || v > ((long long)1 << 30)) {
        diag_plain(d, "bad --max '%s': expected NAME=M with 1 <= M <= 2**30 (e.g. --max N=256)", spec);
        return -1;
      }
      o->max_name = arena_strndup(a, spec, (size_t)(eq - spec));
      o->max_value = v;
    } else if (!strcmp(s, "--dump-before") || !strcmp(s, "--dump-after")) {
      const char *pass = NEXT();
      if (!pass) return -1;
      static const char *const passes[] = {"ad_reverse", "ad_forward", "unslice", "unbroadcast", "linsum", "regroup",
                                           "rowsplit", "cse", "dce", "hoist", "low_store", "lower", "all"};
      int ok = 0;
      for (size_t k = 0; k < sizeof passes / sizeof passes[0]; k++) ok |= !strcmp(pass, passes[k]);
      if (!ok || (!strcmp(pass, "lower") && s[7] == 'b')) {
        diag_plain(d, "unknown pass '%s' for %s (expected ad_reverse, ad_forward, unslice, unbroadcast, linsum, regroup, rowsplit, cse, dce, hoist, low_store%s or all)", pass, s,
                   s[7] == 'a' ? ", lower" : "");
        return -1;
      }
      vec_push(a, s[7] == 'b' ? &o->dump_before : &o->dump_after, pass);
    } else if (!strcmp(s, "--validate")) {
      o->validate = 1;
    } else if (!strcmp(s, "--stats")) {
      o->stats = 1;
    } else if (!strcmp(s, "--profile")) {
      o->profile = 1;
    } else if (!strcmp(s, "--anomaly")) {
      o->anomaly = 1;
    } else if (!strcmp(s, "--tf32")) {
      o->tf32 = 1;
    } else if (!strcmp(s, "--emulate")) {
      o->emulate = 1;
    } else if (!strcmp(s, "--fixed-batch")) {
      o->fixed_batch = 1;
    } else if (!strcmp(s, "--no-fuse")) {
      o->no_fuse = 1;
    } else if (!strcmp(s, "--no-fuse-attention")) {
      o->no_fuse_attention = 1;
    } else if (!strcmp(s, "--no-low-store")) {
      o->no_low_store = 1;
    } else if (!strcmp(s, "--no-winograd")) {
      o->no_winograd = 1;
    } else if (!strcmp(s, "--distributed")) {
      const char *v = NEXT();
      if (!v) return -1;
      if (strcmp(v, "mpi") && strcmp(v, "nccl")) {
        diag_plain(d, "unknown --distributed '%s' (expected mpi, or nccl with --target cuda)", v);
        return -1;
      }
      o->lower.distributed = strcmp(v, "mpi") ? CTC_DIST_NCCL : CTC_DIST_MPI;
    } else if (!strcmp(s, "--bucket-mb")) {
      const char *v = NEXT();
      if (!v) return -1;
      char *end;
      double mb = strtod(v, &end);
      if (end == v || *end || !(mb > 0) || mb > 1e6) {
        diag_plain(d, "--bucket-mb needs a positive number of MiB, not '%s'", v);
        return -1;
      }
      o->lower.bucket_mb = mb;
    } else if (!strcmp(s, "--freestanding")) {
      o->freestanding = 1;
    } else if (!strcmp(s, "--no-libm")) {
      o->no_libm = 1;
    } else if (!strcmp(s, "--embed-weights")) {
      if (!(o->embed = NEXT())) return -1;
    } else if (!strcmp(s, "--quantize")) {
      if (!(o->quantize = NEXT())) return -1;
    } else if (!strcmp(s, "--calibrate")) {
      if (!(o->calibrate = NEXT())) return -1;
    } else if (!strcmp(s, "--weights")) {
      if (!(o->weights = NEXT())) return -1;
    } else if (!strcmp(s, "--dtype")) {
      const char *v = NEXT();
      if (!v) return -1;
      if (!strcmp(v, "f64") || !strcmp(v, "float64")) o->lower.float_dtype = DT_F64;
      else if (!strcmp(v, "f32") || !strcmp(v, "float32")) o->lower.float_dtype = DT_F32;
      else {
        diag_plain(d, "bad --dtype '%s': expected f32 or f64", v);
        return -1;
      }
    } else if (!strcmp(s, "--no-remat")) {
      o->lower.no_remat = 1;
    } else if (!strcmp(s, "--no-blas")) {
      o->no_blas = 1;
    } else if (!strcmp(s, "--no-openmp")) {
      o->no_openmp = 1;
    } else if (!strcmp(s, "-MD")) {   /* depfile.h */
      o->md = 1;
    } else if (!strcmp(s, "--depfile")) {
      if (!(o->depfile = NEXT())) return -1;
    } else if (!strcmp(s, "--shared")) {
      o->shared = 1;
    } else if (!strcmp(s, "--python")) {
      o->python = 1;
    } else if (s[0] == '-' && s[1]) {
      diag_plain(d, "unknown option '%s' (see ctc --help)", s);
      return -1;
    } else if (!o->cmd) {
      o->cmd = s;
    } else if (!o->file) {
      o->file = s;
    } else {
      diag_plain(d, "unexpected argument '%s'", s);
      return -1;
    }
    if (eq) {   /* an option of no value given one */
      diag_plain(d, "option '%s' takes no value (got '%s')", s, argv[i]);
      return -1;
    }
#undef NEXT
  }
  o->lower.inputs = o->inputs.data;
  o->lower.ninputs = o->inputs.len;
  o->lower.entries = o->entries.data;
  o->lower.nentries = o->entries.len;
  o->lower.cuda_target = o->target && !strcmp(o->target, "cuda");
  /* the C or CUDA target, compiled for a hosted program (not --quantize's int8 nor --freestanding) */
  const int hosted = !(o->target && strcmp(o->target, "c") && !o->lower.cuda_target) && !o->quantize && !o->freestanding;
  /* fused attention (ir/attn.c): both targets; not where every op must stay visible */
  o->lower.fuse_attention = hosted && !o->no_fuse && !o->no_fuse_attention && !o->anomaly
                                ? IR_FUSE_ATTN | (o->lower.cuda_target ? 0 : IR_FUSE_ATTN_ROUNDED)
                                : 0;
  o->lower.low_store = hosted && !o->no_low_store;   /* ir/lowstore.c */
  o->lower.row_sums = hosted && !o->lower.cuda_target && !o->no_fuse;   /* ir/rowsplit.c */
  if (!o->cmd) {
    fputs(usage, stderr);
    return -1;
  }
  if (strcmp(o->cmd, "compile") && strcmp(o->cmd, "build") && strcmp(o->cmd, "check") && strcmp(o->cmd, "convert")) {
    diag_plain(d, "unknown command '%s' (expected compile, build, check or convert)", o->cmd);
    return -1;
  }
  if (!strcmp(o->cmd, "convert")) {
    if (!o->file || !o->out) {
      diag_plain(d, "'convert' needs a weights file and -o OUT (ctc convert ckpt.pt -o w.safetensors)");
      return -1;
    }
    return 0;
  }
  if (!o->file) {
    diag_plain(d, "'%s' needs a model file", o->cmd);
    return -1;
  }
  if (o->target && strcmp(o->target, "c") && strcmp(o->target, "cuda")) {
    diag_plain(d, "unknown --target '%s' (expected c or cuda)", o->target);
    return -1;
  }
  int has_sym = 0;
  for (int i = 0; i < o->inputs.len; i++) has_sym |= o->inputs.data[i].sym != NULL;
  if (o->target && !strcmp(o->target, "cuda")) {   /* C-target features the CUDA emitter does not have yet */
    const char *what = o->profile ? "--profile" : o->anomaly ? "--anomaly"
                       : o->max_name || has_sym ? "a run-time batch (--input x=f32[N,...])" : NULL;
    if (what) {
      diag_plain(d, "%s is not supported with --target cuda yet (it is for the C target)", what);
      return -1;
    }
    if (o->lower.distributed == CTC_DIST_MPI) {   /* the GPUs' gradients are all-reduced by NCCL, not MPI */
      diag_plain(d, "--distributed mpi is for the C target: with --target cuda the gradients are all-reduced on "
                    "the GPUs with NCCL (--distributed nccl; MPI only starts the ranks)");
      return -1;
    }
    if (o->emulate && o->lower.distributed) {
      diag_plain(d, "--emulate cannot run --distributed nccl: NCCL needs GPUs (build without --emulate and run under "
                    "mpirun, one rank per GPU; or --target c --distributed mpi on CPUs)");
      return -1;
    }
  } else if (o->lower.distributed == CTC_DIST_NCCL) {
    diag_plain(d, "--distributed nccl goes with --target cuda (the C target's ranks all-reduce with --distributed mpi)");
    return -1;
  }
  if ((o->no_libm || o->embed) && !o->freestanding) {
    diag_plain(d, "%s goes with --freestanding", o->no_libm ? "--no-libm" : "--embed-weights");
    return -1;
  }
  if (quant_check_opts(d, o) < 0) return -1;
  if (depfile_check_opts(a, d, o) < 0) return -1;
  if (o->freestanding && (strcmp(o->cmd, "compile") || (o->target && strcmp(o->target, "c")))) {
    diag_plain(d, "--freestanding goes with 'compile' for the C target (build the model.c with your toolchain: "
                  "docs/microcontrollers.md)");
    return -1;
  }
  if (o->validate && (!strcmp(o->cmd, "check") || (o->emit && strcmp(o->emit, "c")))) {
    diag_plain(d, "--validate goes with 'compile' or 'build' writing C or CUDA (it checks the generated code)");
    return -1;
  }
  if (o->emulate && !(o->target && !strcmp(o->target, "cuda") && !strcmp(o->cmd, "build"))) {
    diag_plain(d, "--emulate goes with 'build --target cuda'");
    return -1;
  }
  if (o->emit && strcmp(o->emit, "ast") && strcmp(o->emit, "ir") && strcmp(o->emit, "kernels") && strcmp(o->emit, "kir") &&
      strcmp(o->emit, "dot") &&
      strcmp(o->emit, "c")) {
    diag_plain(d, "unknown --emit '%s' (expected ast, ir, kernels, kir, dot or c)", o->emit);
    return -1;
  }
  if (o->shared || o->python) {
    const char *what = o->shared ? "--shared" : "--python";
    if (strcmp(o->cmd, "build")) {
      diag_plain(d, "%s goes with 'build' (ctc build model.py %s -o %s)", what, what, o->shared ? "libmodel.so" : "model");
      return -1;
    }
    if (o->shared && o->python) {
      diag_plain(d, "--shared and --python are two kinds of library: give one");
      return -1;
    }
    if (o->target && !strcmp(o->target, "cuda")) {
      diag_plain(d, "%s is not supported with --target cuda yet (it is for the C target)", what);
      return -1;
    }
    if (o->lower.distributed) {
      diag_plain(d, "%s is not supported with --distributed (a distributed model runs under mpirun as a program)", what);
      return -1;
    }
  }
  if ((o->cflags.len || o->opt_level) && strcmp(o->cmd, "build")) {
    diag_plain(d, "%s goes with 'build' (it is for the C compiler)", o->opt_level ? o->opt_level : "--cflags");
    return -1;
  }
  if (!strcmp(o->cmd, "build") && !o->out) {
    diag_plain(d, "'build' needs -o PROGRAM");
    return -1;
  }
  if (!strcmp(o->cmd, "compile") && !o->out && (!o->emit || !strcmp(o->emit, "c"))) {
    diag_plain(d, "'compile' needs -o OUT.c");
    return -1;
  }
  const char *sym = NULL;   /* the run-time batch's name */
  for (int i = 0; i < o->inputs.len; i++) {
    const InputSpec *is = &o->inputs.data[i];
    if (!is->sym) continue;
    if (sym && strcmp(sym, is->sym)) {
      diag_plain(d, "--input %s names a second run-time size '%s' (after '%s'): one batch name per compile", is->name,
                 is->sym, sym);
      return -1;
    }
    sym = is->sym;
  }
  if (sym && o->max_name && strcmp(o->max_name, sym)) {
    diag_plain(d, "--input names a run-time batch '%s': give its largest value with --max %s=M (e.g. --max %s=256)",
               sym, sym, sym);
    return -1;
  }
  if (!sym && o->max_name) {
    diag_plain(d, "--max %s: no --input names a dim '%s' (e.g. --input x=f32[%s,784])", o->max_name, o->max_name,
               o->max_name);
    return -1;
  }
  return 0;
}

/* The verifier runs after lowering and after every pass (it is cheap next to
 * compiling the C): an invalid IR is a bug in ctc. */
static void verify(const Program *p, const char *after) {
  for (int i = 0; i < p->funcs.len; i++)
    if (ir_verify(p, p->funcs.data[i], stderr) < 0) BUG("invalid IR after %s", after);
}

static int wants(const Opts *o, int after, const char *pass) {
  for (int i = 0; i < (after ? o->dump_after.len : o->dump_before.len); i++) {
    const char *w = after ? o->dump_after.data[i] : o->dump_before.data[i];
    if (!strcmp(w, pass) || !strcmp(w, "all")) return 1;
  }
  return 0;
}

/* The pass hook's context: the options, and the instruction count of the
 * function when the sweep under way began. */
typedef struct HookCtx {
  const Opts *o;
  const Func *f;   /* the function of `first` */
  int first;
} HookCtx;

/* The pass hook (ir.h): dumps on request, and verifies after every AD sweep the
 * instructions it appended (what came before was verified after its own sweep,
 * and a sweep only appends: each check is linear in the sweep, not in the
 * function, so a jacobian's many sweeps stay linear). */
static void pass_hook(void *ctx, const Program *p, const Func *f, const char *pass, int after) {
  HookCtx *h = ctx;
  if (wants(h->o, after, pass)) {
    fprintf(stderr, "; ---- IR of %s %s %s ----\n", f->name, after ? "after" : "before", pass);
    ir_print_func(stderr, p, f);
  }
  if (!after) {
    h->f = f;
    h->first = f->insts.len;
    return;
  }
  int first = h->f == f ? h->first : 0;
  h->f = NULL;
  if (ir_verify_from(p, f, first, stderr) < 0) BUG("invalid IR after %s of %s", pass, f->name);
}

/* Runs a pass over every function, with the hook around it and the verifier after. */
static void run_pass(Program *p, const char *name, void (*pass)(Program *, Func *)) {
  for (int i = 0; i < p->funcs.len; i++) {
    ir_pass_event(p, p->funcs.data[i], name, 0);
    pass(p, p->funcs.data[i]);
    ir_pass_event(p, p->funcs.data[i], name, 1);
  }
  verify(p, name);
}

/* --emit ast/ir/kernels/kir/dot's output: -o PATH, or standard output for -o - (or no -o) */
static FILE *open_out(Diag *d, const char *path) {
  if (!strcmp(path, "-")) return stdout;
  FILE *f = fopen(path, "w");
  if (!f) diag_plain(d, "cannot write '%s': %s", path, strerror(errno));
  return f;
}

/* OUT.c -> OUT.h ; OUT.cu -> OUT.h ; anything else -> anything.h */
/* --shared / --python: the generated sources' path without ".so" (libmlp.so -> libmlp). */
static const char *lib_stem(Arena *a, const char *out) {
  size_t n = strlen(out);
  return n > 3 && !strcmp(out + n - 3, ".so") ? arena_strndup(a, out, n - 3) : out;
}

static const char *header_path(Arena *a, const char *c_path) {
  size_t n = strlen(c_path);
  if (n > 2 && !strcmp(c_path + n - 2, ".c")) return arena_printf(a, "%.*s.h", (int)(n - 2), c_path);
  if (n > 3 && !strcmp(c_path + n - 3, ".cu")) return arena_printf(a, "%.*s.h", (int)(n - 3), c_path);
  return arena_printf(a, "%s.h", c_path);
}

/* The generated model.c and model.h texts of a program (malloc'ed), emitted
 * with `plan`. 0, or CTC_EXIT_USER when the emitter refused (it said why). */
static int emit_texts(const Program *p, const MemPlan *plan, KnSchedule *const *sched, const CgOptions *opt,
                      const CudaOptions *cuda, const char *h_name, char **c_text, char **h_text) {
  size_t cl, hl;
  FILE *c = open_memstream(c_text, &cl), *h = open_memstream(h_text, &hl);
  CHECK(c && h);
  int rc = cuda ? cg_cuda_emit(p, plan, sched, cuda, c, h, h_name) : cg_c_emit_opts(p, plan, sched, opt, c, h, h_name);
  fclose(c);
  fclose(h);
  return rc < 0 ? CTC_EXIT_USER : 0;
}

/* model.c and model.h go to temporary files renamed into place when both are
 * complete: a failed write (a full disk) leaves earlier outputs untouched. */
static int write_c(Arena *a, Diag *d, const char *c_text, const char *h_text, const char *c_path) {
  const char *h_path = header_path(a, c_path);
  OutFile c, h;
  if (out_open(a, &c, c_path) < 0) {
    diag_plain(d, "cannot write '%s': %s", c_path, strerror(errno));
    return CTC_EXIT_IO;
  }
  if (out_open(a, &h, h_path) < 0) {
    diag_plain(d, "cannot write '%s': %s", h_path, strerror(errno));
    out_commit(&c, 0);
    return CTC_EXIT_IO;
  }
  fputs(c_text, c.f);
  fputs(h_text, h.f);
  /* both complete before either replaces its old file (write errors show in ferror) */
  OutFile *bad = NULL;
  int err = 0;
  if (out_close(&c, 1) < 0) bad = &c, err = errno;
  if (out_close(&h, !bad) < 0 && !bad) {
    bad = &h, err = errno;
    unlink(c.tmp);
  }
  if (!bad && (out_rename(&h) < 0 || out_rename(&c) < 0)) bad = &c, err = errno;
  if (bad) {
    diag_plain(d, "cannot write '%s': %s (the previous file, if any, is unchanged)", bad->path, strerror(err));
    return CTC_EXIT_IO;
  }
  return 0;
}

/* One staging of the model (per run-time batch value): parsed, lowered, the passes run. */
typedef struct Trace {
  Program *p;
  double t_parse, t_lower;   /* when parsing and lowering finished (ms) */
} Trace;

/* Stages the file with the run-time batch (the named dims of --input) set to
 * nval (0: no named dims). 0, or an exit code. */
static int stage(Arena *a, Diag *d, Opts *o, const SrcFile *src, int64_t nval, Trace *t) {
  Node *mod = fe_parse(a, d, src);
  if (!mod) return CTC_EXIT_USER;
  t->t_parse = now_ms();
  if (o->emit && !strcmp(o->emit, "ast")) {
    FILE *f = o->out ? open_out(d, o->out) : stdout;
    if (!f) return CTC_EXIT_IO;
    fe_dump(f, mod);
    if (f != stdout) fclose(f);
    return -1;   /* done */
  }
  LowerOptions lo = o->lower;
  if (nval) {   /* the named dims get nval */
    InputSpec *specs = arena_alloc(a, sizeof *specs * (size_t)(o->inputs.len + 1));
    for (int i = 0; i < o->inputs.len; i++) {
      specs[i] = o->inputs.data[i];
      for (int k = 0; k < specs[i].type.ndim; k++)
        if (specs[i].symmask >> k & 1) specs[i].type.dims[k] = nval;
    }
    lo.inputs = specs;
  }
  lo.pylib = pylib_dir(a);
  HookCtx hook = {o, NULL, 0};
  lo.hook = pass_hook;
  lo.hook_ctx = &hook;
  int errs = d->nerrors;
  Program *p = lower_program(a, d, src, mod, &lo);
  if (!p || d->nerrors > errs) {
    if (nval && nval != o->max_value)
      diag_plain(d, "(that is with the run-time batch %s = %lld: ctc also stages the model at sizes above --max %s=%lld "
                    "to find what depends on it)", o->max_name, (long long)nval, o->max_name, (long long)o->max_value);
    return CTC_EXIT_USER;
  }
  t->t_lower = now_ms();
  verify(p, "lowering");
  for (int i = 0; i < p->funcs.len; i++) ir_pass_event(p, p->funcs.data[i], "lower", 1);
  /* the pass pipeline */
  run_pass(p, "unslice", ir_pass_unslice);
  run_pass(p, "unbroadcast", ir_pass_unbroadcast);
  run_pass(p, "linsum", ir_pass_linsum);
  run_pass(p, "regroup", ir_pass_regroup);
  run_pass(p, "rowsplit", ir_pass_rowsplit);
  run_pass(p, "cse", ir_pass_cse);
  run_pass(p, "dce", ir_pass_dce);
  run_pass(p, "hoist", ir_pass_hoist);
  run_pass(p, "low_store", ir_pass_low_store);
  t->p = p;
  return 0;
}

/* --input x=f32[N,...] without --max: the largest batch is the example's size, the
 * dim at N's place of the entry input that example_inputs in the file gives (the file
 * staged once without the --input specs that name N). 0, or -1 after an error. */
static int default_batch_max(Arena *a, Diag *d, Opts *o, const SrcFile *src) {
  const InputSpec *sp = NULL;
  for (int i = 0; i < o->inputs.len && !sp; i++)
    if (o->inputs.data[i].sym) sp = &o->inputs.data[i];
  if (!sp) return 0;
  Opts probe = *o;
  memset(&probe.inputs, 0, sizeof probe.inputs);
  memset(&probe.dump_before, 0, sizeof probe.dump_before);
  memset(&probe.dump_after, 0, sizeof probe.dump_after);
  probe.emit = NULL;
  for (int i = 0; i < o->inputs.len; i++)
    if (!o->inputs.data[i].sym) vec_push(a, &probe.inputs, o->inputs.data[i]);
  probe.lower.ninputs = probe.inputs.len;
  probe.lower.inputs = probe.inputs.data;
  /* the probe's own diagnostics are not the user's: a file without the example says so below */
  char *buf = NULL;
  size_t blen = 0;
  FILE *mem = open_memstream(&buf, &blen);
  Diag quiet;
  diag_init(&quiet, mem ? mem : stderr);
  Trace t = {0};
  int rc = mem ? stage(a, &quiet, &probe, src, 0, &t) : -1;
  if (mem) fclose(mem);
  free(buf);
  int64_t m = 0;
  for (int k = 0; !rc && t.p && k < t.p->funcs.len && !m; k++) {
    const Func *f = t.p->funcs.data[k];
    for (int i = 0; i < f->inputs.len && !m; i++) {
      const Value *v = &f->values.data[f->inputs.data[i]];
      if (strcmp(v->name, sp->name) || v->type.ndim != sp->type.ndim) continue;
      for (int ax = 0; ax < sp->type.ndim; ax++)
        if (sp->symmask >> ax & 1) m = v->type.dims[ax];
    }
  }
  if (m < 1 || m > ((int64_t)1 << 30)) {
    diag_plain(d, "--input %s names a run-time batch '%s' and the file gives no example of '%s' with %d dims to take its "
                  "largest value from: give it with --max %s=M (e.g. --max %s=256)",
               sp->name, sp->sym, sp->name, sp->type.ndim, sp->sym, sp->sym);
    return -1;
  }
  o->max_name = sp->sym;
  o->max_value = m;
  if (o->stats) fprintf(stderr, "ctc: run-time batch %s up to %lld (the example's size)\n", sp->sym, (long long)m);
  return 0;
}

/* --quantize int8: the forward entry calibrated, quantized (compiler/quantize.c) and emitted
 * (codegen_c/quant_c.c); `build` makes a program of it that needs no weights file. */
static int quant_build(Arena *a, Diag *d, const Opts *o, const Program *p, const MemPlan *plan,
                       const void *const *embed) {
  int rc = 0, fi = -1;
  for (int i = 0; i < p->funcs.len && fi < 0; i++)
    if (p->funcs.data[i]->kind == FK_FORWARD) fi = i;
  if (fi < 0) {
    diag_plain(d, "--quantize int8: %s has no forward entry", o->file);
    return CTC_EXIT_USER;
  }
  for (int i = 0; i < p->params.len; i++)
    if (ir_dtype_is_low(p->params.data[i].type.dtype)) {
      diag_plain(d, "--quantize int8 of a model converted with .bfloat16() / .half() ('%s' is %s) is not supported: "
                    "quantize the float32 model", p->params.data[i].name, ir_dtype_name(p->params.data[i].type.dtype));
      return CTC_EXIT_USER;
    }
  if (o->weights && (rc = ctc_embed_read(a, d, p, o->weights, &embed))) return rc;
  QuantPlan *q = quant_plan(a, d, p, fi, embed, o->calibrate, o->no_libm, &rc);
  if (!q) return rc;
  const char *c_path = !strcmp(o->cmd, "build") ? arena_printf(a, "%s.c", o->out) : o->out;
  char *hb = arena_strdup(a, header_path(a, c_path)), *c_text = NULL, *h_text = NULL;
  size_t cl, hl;
  FILE *c = open_memstream(&c_text, &cl), *h = open_memstream(&h_text, &hl);
  CHECK(c && h);
  CgOptions copt = {0, 0, o->freestanding, o->no_libm, embed, 0};
  rc = cg_quant_emit(p, fi, q, &copt, c, h, basename(hb)) < 0 ? CTC_EXIT_USER : 0;
  fclose(c);
  fclose(h);
  if (!rc) rc = write_c(a, d, c_text, h_text, c_path);
  free(c_text);
  free(h_text);
  if (rc) return rc;
  if (o->stats) quant_print_stats(a, stderr, o->file, p, fi, q, plan);
  if (!strcmp(o->cmd, "build")) return build_c_program(a, d, o, c_path, 0, cg_c_prefix(p, (char[64]){0}, 64));
  return 0;
}

/* What `ctc check` prints: the model, its entries and what was left out. */
static void print_check(const Opts *o, const Program *p) {
  KnCounts c;
  kn_count_params(p, &c);
  char tb[256];
  fprintf(stdout, "%s: ok: model %s, %d tensors (%lld values) in the state_dict\n  ", o->file, p->class_name, c.keys,
          (long long)c.key_values);
  kn_print_counts(stdout, &c);
  fprintf(stdout, "\n");
  for (int k = 0; k < p->funcs.len; k++) {
    Func *f = p->funcs.data[k];
    fprintf(stdout, "  entry %s ->", f->name);
    for (int i = 0; i < f->outputs.len; i++)
      fprintf(stdout, "%s%s", i ? ", " : " ", ir_type_str(ir_type(f, f->outputs.data[i]), tb, sizeof tb));
    fprintf(stdout, "\n");
  }
  for (const char *q = p->skipped; q && *q;) {   /* functions not taken as entries, and why */
    const char *e = strchr(q, '\n');
    int len = e ? (int)(e - q) : (int)strlen(q);
    fprintf(stdout, "  skipped %.*s\n", len, q);
    q = e ? e + 1 : NULL;
  }
  if (p->decode_note) fprintf(stdout, "  note: %s\n", p->decode_note);
  for (const char *q = p->notes; q && *q;) {   /* lines dropped from loop-body entries */
    const char *e = strchr(q, '\n');
    int len = e ? (int)(e - q) : (int)strlen(q);
    fprintf(stdout, "  note: %.*s\n", len, q);
    q = e ? e + 1 : NULL;
  }
}

/* The default build's forward takes any batch from 1 to the file's B (axis 0 of its
 * inputs): forward is staged again at B+1..B+3 with its inputs' axis 0 there (the other
 * entries as they are) and merged like a run-time batch (batch.h). B, or 0 where the build
 * keeps the fixed batch without trying (targets, modes and entries that do not take it). */
static int64_t auto_batch(const Opts *o, const Program *p) {
  if (o->fixed_batch || (strcmp(o->cmd, "build") && strcmp(o->cmd, "compile")) || (o->emit && strcmp(o->emit, "c")) ||
      (o->target && strcmp(o->target, "c")) || p->distributed || o->quantize || o->freestanding || o->profile ||
      o->anomaly || o->lower.float_dtype == DT_F64)
    return 0;
  if (p->script) return 0;   /* a module-level training loop: staging it again (its text) is costly, and sample needs no batch */
  for (int k = 0; k < p->funcs.len; k++) {
    const Func *f = p->funcs.data[k];
    if (f->kind != FK_FORWARD || strcmp(f->name, "forward") || !f->inputs.len) continue;
    const Type *t = &f->values.data[f->inputs.data[0]].type;
    return t->ndim >= 1 && t->dims[0] >= 2 && t->dims[0] < ((int64_t)1 << 30) ? t->dims[0] : 0;
  }
  return 0;
}

/* run_ctc's answer when the variable-batch forward does not hold: it runs again with
 * the fixed batch (--fixed-batch). */
#define AUTO_RETRY (-2)

/* Everything ctc does, allocating from `a` (main frees it: LeakSanitizer-clean). */
static int run_ctc(Arena *a, int argc, char **argv, int fixed_batch) {
  Diag d;
  diag_init(&d, stderr);
  Opts o = {0};
  if (parse_args(a, &d, argc, argv, &o) < 0) return CTC_EXIT_USER;
  o.fixed_batch |= fixed_batch;
  if (!strcmp(o.cmd, "convert")) return ctc_convert(&d, o.file, o.out);
  double t0 = now_ms();
  SrcFile *src = src_read(a, o.file);
  if (!src) {
    diag_plain(&d, "cannot read '%s': %s", o.file, strerror(errno));
    return CTC_EXIT_IO;
  }
  if (!o.max_name && default_batch_max(a, &d, &o, src) < 0) return CTC_EXIT_USER;
  /* A run-time batch: one staging per trace point, the first at --max (see batch.h). */
  int64_t pts[BATCH_NPOINTS] = {0};
  int ntr = o.max_name ? BATCH_NPOINTS : 1;
  if (o.max_name) batch_points(o.max_value, pts);
  Trace tr[BATCH_NPOINTS] = {{0}};
  Program *progs[BATCH_NPOINTS];
  for (int j = 0; j < ntr; j++) {
    int rc = stage(a, &d, &o, src, pts[j], &tr[j]);
    if (rc) return rc < 0 ? 0 : rc;
    progs[j] = tr[j].p;
  }
  /* the default build: forward with a batch of its own where it holds (AUTO_RETRY where not) */
  int64_t autob = ntr == 1 ? auto_batch(&o, tr[0].p) : 0;
  char *quiet_buf = NULL;
  size_t quiet_len = 0;
  FILE *quiet_f = NULL;
  Diag quiet;
  if (autob) {
    quiet_f = open_memstream(&quiet_buf, &quiet_len);
    CHECK(quiet_f);
    diag_init(&quiet, quiet_f);
    batch_points(autob, pts);
    Opts o2 = o;
    o2.dump_before.len = o2.dump_after.len = 0;
    o2.stats = 0;
    for (int j = 1; j < BATCH_NPOINTS; j++) {
      o2.lower.fwd_batch_from = autob;
      o2.lower.fwd_batch_to = pts[j];
      if (stage(a, &quiet, &o2, src, 0, &tr[j])) break;
      progs[j] = tr[j].p;
      ntr = j + 1;
    }
    if (ntr < BATCH_NPOINTS) ntr = 0;   /* forward fails at a batch above B */
    /* and the same program at N = 1, so that Python code on the batch size (`if x.shape[0] < 64`,
     * `x[2]`) is not extrapolated from B..B+3 (compared, not emitted: code may differ at small sizes) */
    Trace t1 = {0};
    o2.lower.fwd_batch_to = 1;
    if (ntr &&
        (stage(a, &quiet, &o2, src, 0, &t1) || batch_compare(&quiet, (Program *[]){progs[0], t1.p}, (int64_t[]){autob, 1}, 2)))
      ntr = 0;
  }
#define AUTO_FAIL()                                                                                          \
  do {                                                                                                     \
    fclose(quiet_f);                                                                                       \
    if (o.stats)                                                                                           \
      fprintf(stderr, "ctc: forward keeps its batch %lld (it does not run at other batches: %s)\n",        \
              (long long)autob, quiet_buf && quiet_buf[0] ? quiet_buf : "staged differently\n");            \
    free(quiet_buf);                                                                                       \
    return AUTO_RETRY;                                                                                     \
  } while (0)
  if (autob && !ntr) AUTO_FAIL();
  /* the C target computes small stride-1 convolutions directly (no scratch) */
  for (int j = 0; j < ntr; j++)
    for (int i = 0; i < progs[j]->funcs.len; i++) {
      Func *fn = progs[j]->funcs.data[i];
      fn->conv_direct = !o.target || strcmp(o.target, "cuda");
      fn->conv_wino = fn->conv_direct && !o.freestanding && !o.quantize && !o.no_winograd;   /* hosted C: wino_c.c */
      fn->conv_phases = fn->conv_direct && !o.freestanding && !o.quantize;   /* hosted C: linalg_c.c */
    }
  if (ntr > 1 && batch_compare(autob ? &quiet : &d, progs, pts, ntr) < 0) {
    if (autob) AUTO_FAIL();
    return CTC_EXIT_USER;
  }
  Program *p = tr[0].p;
  if (p->decode_note && strcmp(o.cmd, "check"))   /* attention, but no `decode` (./net sample re-runs the window) */
    fprintf(stderr, "ctc: note: %s\n", p->decode_note);
  double t_parse = tr[0].t_parse, t_lower = tr[0].t_lower;
  if (o.target && !strcmp(o.target, "cuda") && p->distributed && o.emulate) {   /* a DDP file */
    diag_plain(&d, "%s: --emulate cannot run DistributedDataParallel (--target cuda all-reduces with NCCL, which "
                   "needs GPUs): build without --emulate and run under mpirun, one rank per GPU", o.file);
    return CTC_EXIT_USER;
  }
  /* check reports what compile would; with a run-time batch that includes merging the
   * generated code (below), whose errors only the emitted numbers show */
  int check_only = !strcmp(o.cmd, "check");
  if (check_only && ntr == 1) {
    MemPlan *plan = ir_plan_memory(p);
    if (plan->error) {   /* past CTC_MAX_ARENA_BYTES */
      diag_error(&d, plan->error_at, "%s", plan->error);
      return CTC_EXIT_USER;
    }
    print_check(&o, p);
    return 0;
  }
  int drc = o.depfile ? depfile_write(a, &d, &o, p) : 0;   /* -MD: the files read */
  if (drc) return drc;
  if (o.emit && !strcmp(o.emit, "ir")) {
    FILE *f = o.out ? open_out(&d, o.out) : stdout;
    if (!f) return CTC_EXIT_IO;
    ir_print_program(f, p);
    if (f != stdout) fclose(f);
    return 0;
  }
  /* the kernel layer: one schedule per entry, the plan over its kernels */
  KnSchedule **scheds[BATCH_NPOINTS];
  /* the C target writes time loops (codegen_c, kn_reroll_loops) */
  const int loops_c = !(o.target && strcmp(o.target, "c")) && !o.profile && !o.anomaly && !o.no_fuse;
  for (int j = 0; j < ntr; j++) {
    scheds[j] = arena_alloc(a, sizeof *scheds[j] * (size_t)(p->funcs.len + 1));
    /* --anomaly checks every op's result, as PyTorch's anomaly mode checks every Function's: no fusion */
    /* the C target writes time loops (codegen_c, kn_reroll_loops): their first and last steps padded */
    int pad = loops_c && !progs[j]->distributed;
    for (int i = 0; i < p->funcs.len; i++) {
      scheds[j][i] = kn_schedule(progs[j], progs[j]->funcs.data[i], !o.no_fuse && !o.anomaly);
      if (pad) scheds[j][i] = kn_reroll_pad(progs[j], progs[j]->funcs.data[i], scheds[j][i], 1);
    }
  }
  KnSchedule **sched = scheds[0];
  PlanHints *hints = arena_alloc(a, sizeof *hints * (size_t)(p->funcs.len + 1));
  for (int i = 0; i < p->funcs.len; i++) hints[i] = sched[i]->hints;
  if (o.emit && (!strcmp(o.emit, "kernels") || !strcmp(o.emit, "kir") || !strcmp(o.emit, "dot"))) {
    FILE *f = o.out ? open_out(&d, o.out) : stdout;
    if (!f) return CTC_EXIT_IO;
    if (!strcmp(o.emit, "dot")) kn_dot(f, p, sched);
    else if (!strcmp(o.emit, "kir"))
      for (int i = 0; i < p->funcs.len; i++) kir_print(f, p, p->funcs.data[i], sched[i]);
    else
      for (int i = 0; i < p->funcs.len; i++) kn_print(f, p, p->funcs.data[i], sched[i]);
    if (f != stdout) fclose(f);
    return 0;
  }
  MemPlan *plan = ir_plan_memory_hints(p, hints);
  if (plan->error) {   /* past CTC_MAX_ARENA_BYTES */
    diag_error(&d, plan->error_at, "%s", plan->error);
    return CTC_EXIT_USER;
  }
  if (ir_plan_check(p, plan, stderr) < 0) BUG("invalid memory plan");
  /* the C target's time loops pack the weights their GEMMs read once, before the loop
   * (kernels/prepack.c): a region above each entry's activations, as large as any trace needs */
  for (int i = 0; i < p->funcs.len && loops_c && !p->distributed && !o.freestanding && !o.embed && !o.quantize; i++) {
    int64_t bytes = 0;
    for (int j = 0; j < ntr; j++) {
      const Func *fj = progs[j]->funcs.data[i];
      KnPacks *pk = kn_prepacks(a, fj, scheds[j][i], kn_reroll_loops(a, fj, scheds[j][i], &plan->funcs[i]));
      if (pk->bytes > bytes) bytes = pk->bytes;
    }
    if (bytes) ir_plan_reserve(plan, i, bytes);   /* (past the arena's limit: no packs) */
  }
  const void *const *embed = NULL;   /* --embed-weights: the parameters' values */
  if (o.embed && !check_only) {
    int erc = ctc_embed_read(a, &d, p, o.embed, &embed);
    if (erc) return erc;
  }
  if (o.quantize && !check_only) return quant_build(a, &d, &o, p, plan, embed);
  int cuda_target = o.target && !strcmp(o.target, "cuda");
  const char *c_path = !strcmp(o.cmd, "build") ? arena_printf(a, cuda_target ? "%s.cu" : "%s.c", o.out) : o.out;
  if (o.shared || o.python) c_path = arena_printf(a, "%s.c", lib_stem(a, o.out));
  if (check_only) c_path = "check.c";   /* emitted to memory only */   /* libmlp.so -> libmlp.c, libmlp.h */
  CudaOptions cuda = {o.tf32};
  char *hb = arena_strdup(a, header_path(a, c_path));
  char *c_texts[BATCH_NPOINTS] = {0}, *h_texts[BATCH_NPOINTS] = {0};
  int rc = 0;
  /* every trace is emitted with the plan of the first (the largest batch the program runs) */
  for (int j = 0; j < ntr && !rc; j++) {
    for (int i = 0; i < p->funcs.len && j; i++)
      if (scheds[j][i]->kernels.len != sched[i]->kernels.len) {
        diag_error(autob ? &quiet : &d, p->funcs.data[i]->loc, "entry '%s' is fused differently for N = %lld and N = %lld: the batch "
                   "cannot be chosen at run time (give it as a number)", p->funcs.data[i]->name, (long long)pts[0],
                   (long long)pts[j]);
        rc = CTC_EXIT_USER;
      }
    CgOptions copt = {o.profile, o.anomaly, o.freestanding, o.no_libm, embed, autob != 0};
    if (!rc)
      rc = emit_texts(progs[j], plan, scheds[j], &copt, cuda_target ? &cuda : NULL, basename(hb), &c_texts[j],
                      &h_texts[j]);
  }
  char *c_text = c_texts[0], *h_text = h_texts[0];
  if (!rc && ntr > 1) {
    BatchConsts bc = batch_consts(progs, ntr);
    c_text = batch_merge(autob ? &quiet : &d, "C file", c_texts, pts, ntr, &bc);
    h_text = c_text ? batch_merge(autob ? &quiet : &d, "header", h_texts, pts, ntr, &bc) : NULL;
    if (!c_text || !h_text) rc = CTC_EXIT_USER;
  }
  if (!rc && !check_only) rc = write_c(a, &d, c_text, h_text, c_path);
  if (!rc && o.validate && !check_only)   /* after writing: the diagnostics' lines can be looked at */
    rc = ctc_validate(a, c_text, h_text, c_path, header_path(a, c_path), cuda_target, runtime_dir(a));
  if (c_text != c_texts[0]) free(c_text);   /* batch_merge's (an error before it leaves the first trace's) */
  if (h_text != h_texts[0]) free(h_text);
  for (int j = 0; j < ntr; j++) {
    free(c_texts[j]);
    free(h_texts[j]);
  }
  if (rc && autob && quiet.nerrors) AUTO_FAIL();
  if (rc) return rc;
  if (autob) {
    fclose(quiet_f);
    free(quiet_buf);
    if (o.stats) fprintf(stderr, "ctc: forward takes any batch from 1 to %lld\n", (long long)autob);
  }
  if (check_only) {
    print_check(&o, p);
    return 0;
  }
  double t_emit = now_ms();
  if (o.stats) {
    KnCounts c;
    kn_count_params(p, &c);
    fprintf(stderr, "ctc: %s: %lld parameters in %d tensors, arena %lld bytes (params %lld), %d instructions\nctc: ",
            o.file, (long long)c.values[KN_PARAMETER], c.tensors[KN_PARAMETER], (long long)plan->arena_bytes,
            (long long)plan->params_bytes, p->funcs.data[0]->insts.len);
    kn_print_counts(stderr, &c);
    fprintf(stderr, "; the state_dict: %d tensors (%lld values)\n", c.keys, (long long)c.key_values);
    fprintf(stderr, "ctc: arena: parameters %lld bytes, buffers %lld, optimizer state %lld, activations %lld "
                    "(the largest entry's)\n", (long long)c.bytes[KN_PARAMETER],
            (long long)(c.bytes[KN_BUFFER] + c.bytes[KN_LOCAL]), (long long)c.bytes[KN_TRAINING],
            (long long)(plan->arena_bytes - plan->params_bytes));
    for (int i = 0; i < p->funcs.len; i++) {   /* fusion: loop nests before and after */
      const Func *f = p->funcs.data[i];
      int ncode = 0;
      for (int k = 0; k < f->insts.len; k++)
        ncode += f->insts.data[k].op != IR_CONST && !ir_is_view(f, f->insts.data[k].res);
      const FuncPlan *fp = &plan->funcs[i];
      fprintf(stderr, "ctc: entry %s: %d instructions, %d with code; %d kernels%s, activations %lld bytes", f->name,
              f->insts.len, ncode, sched[i]->ncode, o.no_fuse ? " (--no-fuse)" : " after fusion",
              (long long)ir_plan_values_peak(plan, i));
      if (fp->pack_bytes) fprintf(stderr, " and %lld of a time loop's packed weights", (long long)fp->pack_bytes);
      fputc('\n', stderr);
      kn_stats(stderr, p, plan, f, sched[i], i);
    }
    if (o.freestanding) {   /* flash: the weights' const arrays (code not counted); RAM: the arena */
      int64_t w = cg_c_weight_bytes(p);
      fprintf(stderr, "ctc: freestanding: flash %lld bytes of weights%s, RAM %lld bytes (arena: %s)\n",
              (long long)(embed ? w : 0), embed ? " (const arrays; code not counted)" : " (none embedded)",
              (long long)(embed ? plan->arena_bytes - plan->params_bytes : plan->arena_bytes),
              embed ? "the activations' peak" : "parameters and activations");
    }
    fprintf(stderr, "ctc: parse %.1f ms, lower %.1f ms, passes+emit %.1f ms\n", t_parse - t0, t_lower - t_parse,
            t_emit - t_lower);
  }
  if (!strcmp(o.cmd, "build"))
    return cuda_target ? build_cuda_program(a, &d, &o, c_path, p->distributed)
                       : build_c_program(a, &d, &o, c_path, p->distributed, cg_c_prefix(p, (char[64]){0}, 64));
  return 0;
}

int main(int argc, char **argv) {
  Arena *a = arena_new();
  int rc = run_ctc(a, argc, argv, 0);
  if (rc == AUTO_RETRY) {
    arena_free(a);
    a = arena_new();
    rc = run_ctc(a, argc, argv, 1);
  }
  arena_free(a);
  return rc;
}
