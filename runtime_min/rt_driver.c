/* rt_driver.c - the command-line program around a generated model.
 *
 *   ./net run [ENTRY] [--weights W.safetensors] --input X.npy ... [--output Y.npy ...]
 *             [--save OUT.safetensors [--save-training-state]] [--repeat N] [--verbose]
 *   ./net infer ...      `run` with the default entry (entries[0], "forward"); needs
 *                        --weights W, or --random-weights to run on the initial
 *                        parameters (a program without parameters, int8, neither);
 *                        without --output, prints a summary of each output
 *   ./net info           model name, source, arena size, entries and parameters
 *   ./net train --data X --labels Y --epochs E [options]
 *                        train with the model's training entry (rt_train.c)
 *   ./net bench [ENTRY] [--iters K] [--warmup W] [--weights W] [--seed S] [--int-max M]
 *                        time ENTRY on random inputs (see cmd_bench)
 *   ./net gradcheck [ENTRY] [options]
 *                        (ctc build --dtype f64) gradients vs finite differences (rt_gradcheck.c)
 *   ./net --help
 *
 * `--input NAME=X.npy` / `--output NAME=Y.npy` bind by name; plain paths fill
 * the remaining inputs/outputs in declaration order. Every input must be given
 * and have exactly the declared shape; its dtype must match, except that f64
 * data is converted for an f32 input, f32 data for an f64 input (--dtype f64
 * programs), and i32/i64 data for an i64/i32 input
 * (range-checked). Outputs without an --output path are computed but not
 * written. Nothing is printed on success unless --verbose or --repeat is given
 * (or infer has no --output at all: print_output_summary).
 *
 * Errors go to stderr as "PROG: error: MESSAGE". Exit status: 0 ok, 1 usage or
 * data error (bad command line, wrong shapes or dtypes, malformed files), 2 I/O
 * error (a file could not be opened, read or written; out of memory).
 *
 * ctc_blas_setup re-executes the program once with OPENBLAS_CORETYPE set from
 * cpuid when the runtime is built with -DCTC_HAVE_CBLAS (see below). */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L /* setenv, execv, clock_gettime */
#endif
#ifndef _DEFAULT_SOURCE
#define _DEFAULT_SOURCE /* madvise's MADV_HUGEPAGE (glibc) */
#endif
#include "ctc_rt.h"
#include "rt_driver_int.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#ifdef __linux__
#include <sys/mman.h>
#endif
#include <unistd.h>


/* ---- OpenBLAS core type ---------------------------------------------------- */

#if defined(CTC_HAVE_CBLAS) && defined(__x86_64__)
#include <cpuid.h>

/* XCR0: which register states the OS saves (AVX needs bits 1-2, AVX-512 5-7). */
static uint64_t read_xcr0(void) {
  uint32_t lo, hi;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return ((uint64_t)hi << 32) | lo;
}

/* The OpenBLAS core type for this CPU, or NULL to leave OpenBLAS alone. */
static const char *detect_coretype(void) {
  unsigned a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return NULL;
  int fma = (c >> 12) & 1, osxsave = (c >> 27) & 1, avx = (c >> 28) & 1;
  if (!osxsave || !avx) return NULL;
  uint64_t xcr0 = read_xcr0();
  if ((xcr0 & 0x6) != 0x6) return NULL;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return NULL;
  int avx2 = (b >> 5) & 1, f = (b >> 16) & 1, dq = (b >> 17) & 1, bw = (b >> 30) & 1, vl = (b >> 31) & 1;
  if (f && dq && bw && vl && (xcr0 & 0xE6) == 0xE6) return "SkylakeX";
  if (avx2 && fma) return "Haswell";
  return NULL;
}
#endif

void ctc_blas_setup(int argc, char **argv) {
  (void)argc;
  (void)argv;
#if defined(CTC_HAVE_CBLAS) && defined(__x86_64__)
  /* OpenBLAS reads OPENBLAS_CORETYPE in a library constructor, before main, so
   * the only way to set it from here is to re-execute ourselves once.
   * CTC_NO_REEXEC guards against loops; a user-set OPENBLAS_CORETYPE wins.
   * OMP_WAIT_POLICY is left to libgomp's default (spin briefly, then sleep):
   * the generated code owns the GEMM threads (OpenBLAS runs single-threaded
   * inside its OpenMP loops), so no OpenBLAS thread competes with a spinning
   * worker, and `passive` (sleep at once) made every parallel loop pay a
   * wake-up: bench MLP train step 2.70 -> 1.29 ms, gpt train step 152 -> 130 ms
   * on 2 cores without it. */
  if (getenv("CTC_NO_REEXEC") || !argv) return;
  int changed = 0;
  if (!getenv("OPENBLAS_CORETYPE")) {
    const char *type = detect_coretype();
    if (type && setenv("OPENBLAS_CORETYPE", type, 1) == 0) changed = 1;
  }
#ifdef _OPENMP
  /* OpenBLAS's constructor starts a pool of OPENBLAS_NUM_THREADS - 1 threads (default: one per
   * core) that spin in sched_yield for about 0.1 s before they sleep, though ctc never gives them
   * work (ctc_blas_threads_*: OpenBLAS single-threaded inside ctc's OpenMP threads): on 2 cores
   * they took the second OpenMP thread's core for all of a short run (bench mlp forward with
   * OPENBLAS_NUM_THREADS=2, issue 29). With 1 there is no pool. */
  const char *bt = getenv("OPENBLAS_NUM_THREADS");
  if (!(bt && !strcmp(bt, "1")) && setenv("OPENBLAS_NUM_THREADS", "1", 1) == 0) changed = 1;
#endif
  if (!changed || setenv("CTC_NO_REEXEC", "1", 1) != 0) return;
  execv("/proc/self/exe", argv);
  /* execv failed: carry on with whatever kernels OpenBLAS picked. */
#endif
}

/* ---- small helpers --------------------------------------------------------- */

/* Exit status for a ctc_status: 2 for I/O (and memory), 1 for everything else. */
static int exit_status(int code) {
  if (code == CTC_OK) return 0;
  return code == CTC_ERR_IO || code == CTC_ERR_NOMEM ? 2 : 1;
}

int ctc_drv_report(const char *prog, const ctc_error *err) {
  fprintf(stderr, "%s: error: %s\n", prog, err->msg);
  return exit_status(err->code);
}

double ctc_drv_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* aligned_alloc needs a size that is a multiple of the alignment; never 0. From 2 MiB on the
 * block starts on a 2 MiB boundary and Linux is asked to back it with transparent huge pages
 * (advice: where the system gives none, nothing changes). A training step's arena is a hundred
 * MiB that its kernels walk in several streams at once: on 4 KiB pages the TLB misses slowed
 * them (Zen 4, 1 thread: the bench resnet's train step 198.6-201.1 -> 188.9-192.0 ms, its
 * kernels around the convolutions 30 -> 20-21 ms; llama 240 -> 230-236, gpt 244-252 -> 241-248;
 * docs/speed.md). */
void *ctc_drv_alloc_aligned(size_t align, size_t bytes) {
  const size_t huge = (size_t)2 << 20;
  if (bytes >= huge && align < huge) align = huge;
  if (bytes > SIZE_MAX - align) return NULL;
  size_t n = bytes ? (bytes + align - 1) / align * align : align;
  void *p = aligned_alloc(align, n);
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  if (p && n >= huge) (void)madvise(p, n, MADV_HUGEPAGE);
#endif
  if (p) memset(p, 0, n);
  return p;
}

void *ctc_arena_alloc(size_t align, size_t bytes) { return ctc_drv_alloc_aligned(align, bytes); }

static void usage(FILE *f, const char *prog, const ctc_model_desc *desc) {
  const char *dflt = desc->nentries > 0 ? desc->entries[0].name : "forward";
  fprintf(f,
          "usage: %s COMMAND [options]\n"
          "\n"
          "Model '%s', compiled by ctc from %s.\n"
          "\n"
          "commands:\n"
          "  run [ENTRY] [options]     call ENTRY (default: %s) on .npy inputs\n"
          "  infer [options]           same as `run %s`, with --weights or --random-weights; without\n"
          "                            --output it prints a summary of each output\n"
          "  info                      print the entries, their inputs and outputs, the parameters\n"
          "                            and the arena size\n"
          "  train [options]           train with the model's training entry on .npy or IDX data, or text\n"
          "                            (`%s train --help`)\n"
          "  bench [ENTRY] [options]   time ENTRY on random inputs: median and min ms per call,\n"
          "                            peak RSS (`%s bench --help`)\n"
          "  gradcheck [ENTRY] [opts]  (programs built with ctc build --dtype f64) compare the compiled\n"
          "                            gradients with finite differences (`%s gradcheck --help`)\n"
          "  sample [options]          generate text from a language model (`%s sample --help`)\n"
          "  help, --help, -h          print this text\n"
          "\n"
          "options of every command:\n"
          "  --threads N               run the entries on N threads (OpenMP; default: OMP_NUM_THREADS,\n"
          "                            else one per core); OpenBLAS stays single-threaded inside them,\n"
          "                            ctc splits large GEMMs over the N threads itself\n"
          "\n"
          "options of run and infer:\n"
          "  --weights W.safetensors   load the parameters from W; W may also be a PyTorch\n"
          "                            checkpoint: ckpt.pt, or ckpt.pt:KEY for the dict under KEY.\n"
          "                            Without it, run uses the model's initial parameters and\n"
          "                            infer refuses (exit 1) unless given --random-weights\n"
          "  --random-weights          (infer) run on the initial, untrained parameters on purpose\n"
          "  --input X.npy             an input, in declaration order; one per input\n"
          "  --input NAME=X.npy        bind input NAME\n"
          "  --output Y.npy            where to write an output, in order (NAME=Y.npy binds by\n"
          "                            name); outputs without a path are not written. infer with no\n"
          "                            --output prints each output's name, dtype, shape, min, max,\n"
          "                            mean and first values (and the argmax of the first rows of\n"
          "                            [N, C] float outputs) to stdout\n"
          "  --save OUT.safetensors    save the model's state_dict after the call(s), e.g. after a\n"
          "                            training step (OUT.pt: a torch.save file; either loads\n"
          "                            into PyTorch with model.load_state_dict)\n"
          "  --save-training-state     --save also writes the training state (optimizer moments and\n"
          "                            steps, learning rate, rng.offset, scheduler state), to\n"
          "                            continue training from OUT with --weights\n"
          "  --repeat N                call the entry N times; print the median ms per call to stderr\n"
          "  --profile TRACE.json      (programs built with ctc build --profile) time every kernel: write a\n"
          "                            Chrome trace and print a table per model line and op\n"
          "  --verbose, -v             print timings to stderr\n"
          "\n"
          "Inputs must have exactly the declared shapes. Dtypes must match, except that\n"
          "float64 data is converted for a float32 input, float32 data for a float64 one (programs\n"
          "built with --dtype f64) and int32/int64 for int64/int32.\n"
          "\n"
          "entries:",
          prog, desc->name ? desc->name : "?", desc->source ? desc->source : "?", dflt, dflt, prog, prog, prog, prog);
  for (int i = 0; i < desc->nentries; i++) fprintf(f, " %s", desc->entries[i].name);
  fprintf(f, "\n\n"
             "exit status: 0 ok, 1 usage or data error, 2 I/O error\n"
             "environment: OPENBLAS_CORETYPE (chosen from the CPU when unset and the program\n"
             "uses OpenBLAS), OPENBLAS_NUM_THREADS (set to 1 when the program uses OpenMP: its\n"
             "threads run the GEMMs), CTC_NO_REEXEC=1 (do not re-execute to set them),\n"
             "OMP_NUM_THREADS (the default of --threads)\n");
}

/* ---- info -------------------------------------------------------------------- */

static void print_tensor(const char *indent, const ctc_tensor *t) {
  char sh[256];
  printf("%s%s %s%s%s\n", indent, t->name ? t->name : "?", ctc_dtype_name(t->dtype),
         ctc_format_shape(sh, sizeof sh, t->ndim, t->shape),
         t->low == CTC_LOW_BF16  ? " (bfloat16 values, saved as BF16)"
         : t->low == CTC_LOW_F16 ? " (float16 values, saved as F16)"
                                 : "");
}

static int cmd_info(const ctc_model_desc *desc) {
  printf("model: %s\n", desc->name ? desc->name : "?");
  printf("source: %s\n", desc->source ? desc->source : "?");
  printf("arena: %zu bytes (align %zu)\n", desc->arena_bytes, desc->arena_align);
#ifdef CTC_HAVE_CBLAS
  const char *core = getenv("OPENBLAS_CORETYPE");
  printf("openblas coretype: %s\n", core ? core : "(chosen by OpenBLAS)");
#endif
  for (int i = 0; i < desc->nentries; i++) {
    const ctc_entry *e = &desc->entries[i];
    printf("entry %s: %d input%s, %d output%s", e->name, e->ninputs, e->ninputs == 1 ? "" : "s",
           e->noutputs, e->noutputs == 1 ? "" : "s");
    if (e->batch_max > 0) printf(", any batch from 1 to %lld (shapes at %lld)", (long long)e->batch_max,
                                 (long long)e->batch_max);
    printf("\n");
    for (int k = 0; k < e->ninputs; k++) print_tensor("  input  ", &e->inputs[k]);
    for (int k = 0; k < e->noutputs; k++) print_tensor("  output ", &e->outputs[k]);
  }
  /* counts as PyTorch gives them (a tied parameter once), then the state_dict's keys (a tied
   * one under each name), the training state and the tensors no file holds */
  ctc_model_counts c;
  ctc_model_count(desc, &c);
  static const char *const what[CTC_KIND_COUNT] = {"parameters", "buffers", "training state",
                                                   "not saved (non-persistent buffers, constants, caches)"};
  for (int k = 0; k < CTC_KIND_COUNT; k++)
    if (k < CTC_KIND_TRAINING || c.tensors[k])
      printf("%s: %d (%lld values)\n", what[k], c.tensors[k], (long long)c.values[k]);
  int nkeys = ctc_sd_count(desc);
  printf("state_dict: %d key%s\n", nkeys, nkeys == 1 ? "" : "s");
  for (int k = 0; k < nkeys; k++) {
    const char *name;
    int i = ctc_sd_key_at(desc, k, &name);
    if (i < 0 || i >= desc->nparams) continue;
    ctc_tensor t = desc->params[i];
    t.name = name;
    print_tensor("  ", &t);
    if (strcmp(name, desc->params[i].name)) printf("    (tied to %s)\n", desc->params[i].name);
  }
  for (int k = CTC_KIND_TRAINING; k < CTC_KIND_COUNT; k++) {
    if (c.tensors[k]) printf("%s:\n", k == CTC_KIND_TRAINING ? "training state tensors" : "tensors not saved");
    for (int i = 0; i < desc->nparams; i++)
      if (ctc_param_kind(desc, i) == k) print_tensor("  ", &desc->params[i]);
  }
  return 0;
}

/* Models with dropout keep their random stream's position in an i64 state
 * tensor "rng.offset"; `train --seed S` starts the stream at S * 2^40 (unless the
 * weights file already carried a position), so each seed gives its own masks. */
void ctc_drv_seed_rng(const ctc_model_desc *desc, void *model, uint64_t seed) {
  for (int i = 0; i < desc->nparams; i++) {
    const ctc_tensor *p = &desc->params[i];
    if (strcmp(p->name, "rng.offset") || p->dtype != CTC_I64 || p->ndim != 0) continue;
    int64_t *off = (int64_t *)((unsigned char *)desc->arena_of(model) + p->offset);
    if (*off == 0) *off = (int64_t)((seed & 0xFFFFFF) << 40);
  }
}

/* ---- run: command line --------------------------------------------------------- */

typedef struct RunArgs {
  const char *entry;           /* NULL: entries[0] */
  const char *weights, *save, *profile;
  const char **inputs, **outputs; /* as given (NAME=path or path) */
  int ninputs, noutputs;
  long repeat;
  int verbose, help;
  int is_infer, random_weights;   /* infer; --random-weights (infer only) */
  int training_state;          /* --save-training-state */
} RunArgs;

/* Parses run/infer options into a (malloc'ed arrays of argv pointers). */
/* The option at argv[*i], "--name VALUE" or "--name=VALUE", when it is one of
 * `known` (NULL-terminated): its name into name[32] and its value into *val
 * (advancing *i past a separate value). Anything else is a usage error. */
int ctc_drv_option_value(int argc, char **argv, int *i, const char *const *known, char *name, const char **val,
                        ctc_error *err) {
  const char *arg = argv[*i], *eq = strchr(arg, '=');
  size_t nl = eq ? (size_t)(eq - arg) : strlen(arg);
  if (nl >= 32) return ctc_fail(err, CTC_ERR_ARG, "unknown option '%s'", arg);
  memcpy(name, arg, nl);
  name[nl] = '\0';
  int ok = 0;
  for (int k = 0; known[k]; k++) ok |= !strcmp(name, known[k]);
  if (!ok) return ctc_fail(err, CTC_ERR_ARG, "unknown option '%s'", name);
  if (eq) *val = eq + 1;
  else if (*i + 1 < argc) *val = argv[++*i];
  else return ctc_fail(err, CTC_ERR_ARG, "option %s needs a value", name);
  return CTC_OK;
}

static int parse_run_args(int argc, char **argv, int is_infer, RunArgs *a, ctc_error *err) {
  memset(a, 0, sizeof *a);
  a->repeat = 1;
  a->is_infer = is_infer;
  a->inputs = calloc((size_t)argc + 1, sizeof *a->inputs);
  a->outputs = calloc((size_t)argc + 1, sizeof *a->outputs);
  if (!a->inputs || !a->outputs) return ctc_fail(err, CTC_ERR_NOMEM, "out of memory");
  for (int i = 0; i < argc; i++) {
    const char *arg = argv[i];
    if (strcmp(arg, "-h") == 0 || strcmp(arg, "--help") == 0) {
      a->help = 1;
      continue;
    }
    if (strcmp(arg, "-v") == 0 || strcmp(arg, "--verbose") == 0) {
      a->verbose = 1;
      continue;
    }
    if (strcmp(arg, "--save-training-state") == 0) {
      a->training_state = 1;
      continue;
    }
    if (strcmp(arg, "--random-weights") == 0) {
      if (!is_infer)
        return ctc_fail(err, CTC_ERR_ARG, "--random-weights is an option of infer; run takes the model's initial "
                        "parameters when there is no --weights");
      a->random_weights = 1;
      continue;
    }
    if (arg[0] != '-' || arg[1] == '\0') {
      if (!is_infer && !a->entry) {
        a->entry = arg;
        continue;
      }
      return ctc_fail(err, CTC_ERR_ARG, "unexpected argument '%s'", arg);
    }
    /* --name VALUE or --name=VALUE */
    static const char *const known[] = {"--weights", "--input", "--output", "--save", "--repeat", "--profile", NULL};
    char name[32];
    const char *val;
    int orc = ctc_drv_option_value(argc, argv, &i, known, name, &val, err);
    if (orc) return orc;

    if (!strcmp(name, "--input")) a->inputs[a->ninputs++] = val;
    else if (!strcmp(name, "--output")) a->outputs[a->noutputs++] = val;
    else if (!strcmp(name, "--weights") || !strcmp(name, "--save") || !strcmp(name, "--profile")) {
      const char **slot = name[2] == 'w' ? &a->weights : name[2] == 's' ? &a->save : &a->profile;
      if (*slot) return ctc_fail(err, CTC_ERR_ARG, "option %s given twice", name);
      *slot = val;
    } else { /* --repeat */
      char *end;
      a->repeat = strtol(val, &end, 10);
      if (*val == '\0' || *end != '\0' || a->repeat < 1 || a->repeat > 1000000000L)
        return ctc_fail(err, CTC_ERR_ARG, "--repeat needs a positive integer, not '%s'", val);
    }
  }
  return CTC_OK;
}

static void free_run_args(RunArgs *a) {
  free(a->inputs);
  free(a->outputs);
}

/* The names of tensors ts[0..n) as "x, y" into buf. */
static const char *name_list(char *buf, size_t cap, int n, const ctc_tensor *ts) {
  size_t len = 0;
  buf[0] = '\0';
  for (int i = 0; i < n && len < cap; i++) {
    int w = snprintf(buf + len, cap - len, "%s%s", i ? ", " : "", ts[i].name);
    if (w < 0) break;
    len += (size_t)w;
  }
  return buf;
}

/* Assigns the given paths to the n declared tensors: NAME=path binds by name,
 * plain paths fill the free slots in order. paths[k] receives the path of
 * tensor k (NULL when none). `what` is "input" or "output". */
static int bind_paths(const ctc_entry *e, const char *what, int n, const ctc_tensor *decl, int ngiven,
                      const char *const *given, const char **paths, ctc_error *err) {
  char names[512];
  if (ngiven > n)
    return ctc_fail(err, CTC_ERR_ARG, "entry '%s' has %d %s%s (%s), got %d --%s", e->name, n, what,
                    n == 1 ? "" : "s", name_list(names, sizeof names, n, decl), ngiven, what);
  int *is_named = calloc((size_t)ngiven + 1, sizeof *is_named);
  if (!is_named) return ctc_fail(err, CTC_ERR_NOMEM, "out of memory");
  int rc = CTC_OK;
  for (int g = 0; g < ngiven && rc == CTC_OK; g++) {
    const char *eq = strchr(given[g], '=');
    if (!eq) continue;
    for (int k = 0; k < n; k++) {
      size_t nl = strlen(decl[k].name);
      if ((size_t)(eq - given[g]) == nl && strncmp(given[g], decl[k].name, nl) == 0) {
        if (paths[k]) rc = ctc_fail(err, CTC_ERR_ARG, "%s '%s' is given twice", what, decl[k].name);
        paths[k] = eq + 1;
        is_named[g] = 1;
        break;
      }
    }
  }
  for (int g = 0, k = 0; g < ngiven && rc == CTC_OK; g++) {
    if (is_named[g]) continue;
    while (k < n && paths[k]) k++;
    if (k == n) break; /* unreachable: ngiven <= n */
    paths[k] = given[g];
  }
  free(is_named);
  return rc;
}

/* ---- run: data --------------------------------------------------------------- */


void ctc_drv_run_free(ctc_drv_run *r) {
  for (int i = 0; r->in && i < r->nin; i++) free(r->in[i]);
  for (int i = 0; r->out && i < r->nout; i++) free(r->out[i]);
  free(r->in);
  free(r->out);
  free(r->in_paths);
  free(r->out_paths);
  free(r->model);
  free(r->arena);
}

/* Copies (converting where allowed) the .npy data in `got` into dst, laid out as `want`. */
static int convert_input(const ctc_tensor *want, const ctc_tensor *got, const char *path, void *dst,
                         ctc_error *err) {
  char ws[256], gs[256];
  int same = want->ndim == got->ndim;
  for (int d = 0; same && d < want->ndim; d++) same = want->shape[d] == got->shape[d];
  char why[128] = "";   /* only axis 0 differs: a build whose forward keeps its planned batch */
  int batch_only = !same && want->ndim == got->ndim && want->ndim > 0;
  for (int d = 1; batch_only && d < want->ndim; d++) batch_only = want->shape[d] == got->shape[d];
  if (batch_only)
    snprintf(why, sizeof why, " (this entry runs at its planned batch %lld only: its code depends on the batch size)",
             (long long)want->shape[0]);
  if (!same)
    return ctc_fail(err, CTC_ERR_SHAPE, "%s: input '%s' has shape %s, expected %s%s", path, want->name,
                    ctc_format_shape(gs, sizeof gs, got->ndim, got->shape),
                    ctc_format_shape(ws, sizeof ws, want->ndim, want->shape), why);
  size_t n = (size_t)ctc_tensor_numel(want);
  const unsigned char *src = got->data;
  unsigned char *out = dst;
  if (got->dtype == want->dtype) {
    memcpy(dst, got->data, ctc_tensor_bytes(want));
  } else if ((want->dtype == CTC_F32 || want->dtype == CTC_F64) && (got->dtype == CTC_BF16 || got->dtype == CTC_F16)) {
    ctc_float_copy(dst, want->dtype, got->data, got->dtype, n, 0);   /* exact */
  } else if (want->dtype == CTC_F32 && got->dtype == CTC_F64) {
    for (size_t i = 0; i < n; i++) {
      double v;
      memcpy(&v, src + 8 * i, 8);
      float x = (float)v;
      memcpy(out + 4 * i, &x, 4);
    }
  } else if (want->dtype == CTC_F64 && got->dtype == CTC_F32) { /* --dtype f64 programs: exact */
    for (size_t i = 0; i < n; i++) {
      float v;
      memcpy(&v, src + 4 * i, 4);
      double x = v;
      memcpy(out + 8 * i, &x, 8);
    }
  } else if (want->dtype == CTC_I64 && got->dtype == CTC_I32) {
    for (size_t i = 0; i < n; i++) {
      int32_t v;
      memcpy(&v, src + 4 * i, 4);
      int64_t x = v;
      memcpy(out + 8 * i, &x, 8);
    }
  } else if (want->dtype == CTC_I32 && got->dtype == CTC_I64) {
    for (size_t i = 0; i < n; i++) {
      int64_t v;
      memcpy(&v, src + 8 * i, 8);
      if (v < INT32_MIN || v > INT32_MAX)
        return ctc_fail(err, CTC_ERR_DTYPE, "%s: input '%s' (i32) gets int64 value %lld at index %zu, "
                        "which does not fit", path, want->name, (long long)v, i);
      int32_t x = (int32_t)v;
      memcpy(out + 4 * i, &x, 4);
    }
  } else {
    return ctc_fail(err, CTC_ERR_DTYPE, "%s: input '%s' has dtype %s, expected %s", path, want->name,
                    ctc_dtype_name(got->dtype), ctc_dtype_name(want->dtype));
  }
  return CTC_OK;
}

/* Allocates the arena and the model and calls init. */
int ctc_drv_make_model(const ctc_model_desc *desc, ctc_drv_run *r, ctc_error *err) {
  size_t align = desc->arena_align ? desc->arena_align : 64;
  if (align & (align - 1)) return ctc_fail(err, CTC_ERR_ARENA, "arena alignment %zu is not a power of two", align);
  if (align < sizeof(void *)) align = sizeof(void *);
  size_t bytes = desc->arena_bytes;
  if (bytes > SIZE_MAX - align) return ctc_fail(err, CTC_ERR_NOMEM, "arena of %zu bytes is too large", bytes);
  size_t rounded = bytes ? (bytes + align - 1) / align * align : align;
  r->arena = ctc_drv_alloc_aligned(align, rounded);
  r->model = calloc(1, desc->model_size ? desc->model_size : 1);
  if (!r->arena || !r->model)
    return ctc_fail(err, CTC_ERR_NOMEM, "cannot allocate the model (%zu bytes of arena)", rounded);
  int rc = desc->init ? desc->init(r->model, r->arena, rounded) : CTC_OK;
  if (rc) return ctc_fail(err, rc, "model initialisation failed: %s", ctc_strerror(rc));
  return CTC_OK;
}

/* The batch n of an entry with a run-time batch from the shapes of its inputs
 * (each batch axis k*n for n in 1..batch_max, the same n for all). */
static int input_batch(const ctc_entry *e, const ctc_tensor *got, const char *const *paths, int64_t *n,
                       ctc_error *err) {
  *n = e->batch_max;
  int64_t seen = 0;
  for (int i = 0; i < e->ninputs && e->batch_max > 0; i++) {
    const ctc_tensor *w = &e->inputs[i];
    int ax = w->batch_axis1 - 1;
    if (ax < 0 || ax >= w->ndim || got[i].ndim != w->ndim) continue;   /* a wrong rank is reported by convert_input */
    int64_t k = w->shape[ax] / e->batch_max, g = got[i].shape[ax];
    char ws[256];
    if (g % k || g / k < 1 || g / k > e->batch_max)
      return ctc_fail(err, CTC_ERR_SHAPE, "%s: input '%s' has %lld along axis %d, which must be %s%lld x a batch of 1 "
                      "to %lld (declared %s at the largest batch)", paths[i], w->name, (long long)g, ax,
                      k == 1 ? "" : "", (long long)k, (long long)e->batch_max,
                      ctc_format_shape(ws, sizeof ws, w->ndim, w->shape));
    if (seen && g / k != seen)
      return ctc_fail(err, CTC_ERR_SHAPE, "%s: input '%s' has a batch of %lld, another input a batch of %lld",
                      paths[i], w->name, (long long)(g / k), (long long)seen);
    seen = g / k;
  }
  if (seen) *n = seen;
  return CTC_OK;
}

/* Reads every bound input into an aligned buffer of the declared layout (at
 * the inputs' batch for an entry with a run-time batch). */
static int read_inputs(const ctc_entry *e, ctc_drv_run *r, ctc_error *err) {
  ctc_tensor *got = calloc((size_t)e->ninputs + 1, sizeof *got);
  if (!got) return ctc_fail(err, CTC_ERR_NOMEM, "out of memory");
  int rc = CTC_OK, nread = 0;
  for (; nread < e->ninputs && !rc; nread++) rc = ctc_npy_read(r->in_paths[nread], &got[nread], err);
  if (rc) nread--;
  if (!rc) rc = input_batch(e, got, r->in_paths, &r->batch, err);
  for (int i = 0; i < e->ninputs && !rc; i++) {
    ctc_tensor want = ctc_entry_tensor_at(e, &e->inputs[i], r->batch);
    size_t bytes = ctc_tensor_bytes(&want);
    r->in[i] = bytes == SIZE_MAX ? NULL : ctc_drv_alloc_aligned(CTC_DRV_IO_ALIGN, bytes);
    if (!r->in[i]) rc = ctc_fail(err, CTC_ERR_NOMEM, "cannot allocate input '%s'", e->inputs[i].name);
    else rc = convert_input(&want, &got[i], r->in_paths[i], r->in[i], err);
  }
  for (int i = 0; i < nread; i++) ctc_tensor_free(&got[i]);
  free(got);
  return rc;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* Calls the entry `repeat` times; prints the median time per call with --repeat. */
static int call_entry(const char *prog, const ctc_model_desc *desc, const ctc_entry *e, ctc_drv_run *r,
                      const RunArgs *a, ctc_error *err) {
  double *ms = malloc((size_t)a->repeat * sizeof *ms);
  if (!ms) return ctc_fail(err, CTC_ERR_NOMEM, "out of memory");
  int rc = CTC_OK;
  for (long k = 0; k < a->repeat && rc == CTC_OK; k++) {
    double t0 = ctc_drv_now_ms();
    rc = ctc_entry_call(e, r->model, r->batch, (const void *const *)r->in, (void *const *)r->out);
    ms[k] = ctc_drv_now_ms() - t0;
  }
  if (rc) {
    free(ms);
    return ctc_drv_entry_failed(desc, r->model, e, rc, "", err);
  }
  if (a->repeat > 1 || a->verbose) {
    size_t n = (size_t)a->repeat;
    qsort(ms, n, sizeof *ms, cmp_double);
    double med = n % 2 ? ms[n / 2] : (ms[n / 2 - 1] + ms[n / 2]) / 2;
    fprintf(stderr, "%s: %s: median %.4f ms per call over %ld call%s (min %.4f ms)\n", prog, e->name, med,
            a->repeat, a->repeat == 1 ? "" : "s", ms[0]);
  }
  free(ms);
  return CTC_OK;
}

static int write_outputs(const ctc_entry *e, ctc_drv_run *r, ctc_error *err) {
  for (int j = 0; j < e->noutputs; j++) {
    if (!r->out_paths[j]) continue;
    ctc_tensor t = ctc_entry_tensor_at(e, &e->outputs[j], r->batch);
    t.data = r->out[j];
    int rc = ctc_npy_write(r->out_paths[j], &t, err);
    if (rc) return rc;
  }
  return CTC_OK;
}

/* Element i of an output, printed exactly (integers in full). */
static void print_elem(const unsigned char *p, ctc_dtype dt, int64_t i) {
  if (dt == CTC_I64) {
    int64_t v;
    memcpy(&v, p + 8 * i, 8);
    printf(" %lld", (long long)v);
  } else {
    printf(dt == CTC_F32 || dt == CTC_F64 ? " %.6g" : " %.0f", ctc_elem_f64(p, dt, i));
  }
}

/* infer without --output: per output, its name, dtype and shape, min/max/mean of its
 * finite values (and how many are not), its first values and, for logits-like
 * [N, C] float outputs, the argmax of the first rows (NaN counts as the largest, as
 * in torch.argmax). */
enum { SUMMARY_VALUES = 8, SUMMARY_ROWS = 8 };
static void print_output_summary(const ctc_entry *e, const ctc_drv_run *r) {
  char sh[256];
  for (int j = 0; j < e->noutputs; j++) {
    ctc_tensor t = ctc_entry_tensor_at(e, &e->outputs[j], r->batch);
    const unsigned char *p = r->out[j];
    int64_t n = ctc_tensor_numel(&t), bad = 0, fin = 0;
    double lo = INFINITY, hi = -INFINITY, sum = 0;
    for (int64_t i = 0; i < n; i++) {
      double v = ctc_elem_f64(p, t.dtype, i);
      if (!isfinite(v)) {
        bad++;
        continue;
      }
      fin++;
      sum += v;
      if (v < lo) lo = v;
      if (v > hi) hi = v;
    }
    printf("output '%s' %s%s:", t.name, ctc_dtype_name(t.dtype), ctc_format_shape(sh, sizeof sh, t.ndim, t.shape));
    if (fin) printf(" min %.6g, max %.6g, mean %.6g", lo, hi, sum / (double)fin);
    if (bad) printf("%s %lld of %lld values not finite", fin ? "," : "", (long long)bad, (long long)n);
    if (n == 0) printf(" no values");
    printf("\n");
    if (n > 0) {
      printf("  first values:");
      for (int64_t i = 0; i < n && i < SUMMARY_VALUES; i++) print_elem(p, t.dtype, i);
      printf("%s\n", n > SUMMARY_VALUES ? " ..." : "");
    }
    if (t.ndim == 2 && t.shape[0] > 0 && t.shape[1] > 1 && (t.dtype == CTC_F32 || t.dtype == CTC_F64)) {
      int64_t rows = t.shape[0] < SUMMARY_ROWS ? t.shape[0] : SUMMARY_ROWS, c = t.shape[1];
      printf("  argmax of rows 0 to %lld:", (long long)rows - 1);
      for (int64_t i = 0; i < rows; i++) {
        int64_t best = 0;
        for (int64_t k = 1; k < c; k++) {
          double v = ctc_elem_f64(p, t.dtype, i * c + k), b = ctc_elem_f64(p, t.dtype, i * c + best);
          if (!isnan(b) && (v > b || isnan(v))) best = k;
        }
        printf(" %lld", (long long)best);
      }
      printf("%s\n", t.shape[0] > rows ? " ..." : "");
    }
  }
  fflush(stdout);
}

static void verbose_time(const RunArgs *a, const char *prog, const char *what, double t0) {
  if (a->verbose) fprintf(stderr, "%s: %s: %.3f ms\n", prog, what, ctc_drv_now_ms() - t0);
}

/* The steps of `run`, after the command line has been parsed. */
static int do_run(const char *prog, const ctc_model_desc *desc, const ctc_entry *e, const RunArgs *a, ctc_drv_run *r,
                  ctc_error *err) {
  int rc;
  r->nin = e->ninputs;
  r->nout = e->noutputs;
  r->in = calloc((size_t)e->ninputs + 1, sizeof *r->in);
  r->out = calloc((size_t)e->noutputs + 1, sizeof *r->out);
  r->in_paths = calloc((size_t)e->ninputs + 1, sizeof *r->in_paths);
  r->out_paths = calloc((size_t)e->noutputs + 1, sizeof *r->out_paths);
  if (!r->in || !r->out || !r->in_paths || !r->out_paths) return ctc_fail(err, CTC_ERR_NOMEM, "out of memory");

  char names[512];
  if ((rc = bind_paths(e, "input", e->ninputs, e->inputs, a->ninputs, a->inputs, r->in_paths, err))) return rc;
  for (int i = 0; i < e->ninputs; i++)
    if (!r->in_paths[i])
      return ctc_fail(err, CTC_ERR_ARG, "entry '%s' takes %d input%s (%s); input '%s' is not given (--input)",
                      e->name, e->ninputs, e->ninputs == 1 ? "" : "s",
                      name_list(names, sizeof names, e->ninputs, e->inputs), e->inputs[i].name);
  if ((rc = bind_paths(e, "output", e->noutputs, e->outputs, a->noutputs, a->outputs, r->out_paths, err)))
    return rc;

  double t0 = ctc_drv_now_ms();
  if ((rc = ctc_drv_make_model(desc, r, err))) return rc;
  verbose_time(a, prog, "init", t0);
  if (a->weights) {
    t0 = ctc_drv_now_ms();
    if ((rc = ctc_model_load(desc, r->model, a->weights, err))) return rc;
    verbose_time(a, prog, "load weights", t0);
  }
  t0 = ctc_drv_now_ms();
  if ((rc = read_inputs(e, r, err))) return rc;
  for (int j = 0; j < e->noutputs; j++) {   /* at the declared (largest) batch */
    size_t bytes = ctc_tensor_bytes(&e->outputs[j]);
    r->out[j] = bytes == SIZE_MAX ? NULL : ctc_drv_alloc_aligned(CTC_DRV_IO_ALIGN, bytes);
    if (!r->out[j]) return ctc_fail(err, CTC_ERR_NOMEM, "cannot allocate output '%s'", e->outputs[j].name);
  }
  verbose_time(a, prog, "read inputs", t0);
  ctc_profile *prof = NULL;
  if (a->profile && (rc = ctc_drv_profile_start(desc, r->model, a->profile, &prof, err))) return rc;
  rc = call_entry(prog, desc, e, r, a, err);
  if (prof) {
    int frc = ctc_drv_profile_finish(desc, r->model, prof, a->profile, rc ? NULL : err);
    if (!rc) rc = frc;
  }
  if (rc) return rc;
  t0 = ctc_drv_now_ms();
  if ((rc = write_outputs(e, r, err))) return rc;
  if (a->is_infer && a->noutputs == 0) print_output_summary(e, r);
  verbose_time(a, prog, "write outputs", t0);
  if (a->save) {
    t0 = ctc_drv_now_ms();
    int what = a->training_state ? CTC_SAVE_TRAINING_STATE : CTC_SAVE_STATE_DICT;
    if ((rc = ctc_model_save_opts(desc, r->model, a->save, what, err))) return rc;
    verbose_time(a, prog, "save weights", t0);
  }
  return CTC_OK;
}


/* infer on a model with parameters needs --weights FILE, or --random-weights to run
 * on the initial (untrained) ones on purpose; a program with none (an int8 program,
 * its weights in the code) needs neither. */
static int check_infer_weights(const ctc_model_desc *desc, const RunArgs *a, ctc_error *err) {
  if (a->weights && a->random_weights)
    return ctc_fail(err, CTC_ERR_ARG, "--weights and --random-weights exclude each other");
  if (a->weights || a->random_weights || desc->nparams == 0) return CTC_OK;
  return ctc_fail(err, CTC_ERR_ARG, "infer needs the model's trained parameters: pass --weights FILE (safetensors "
                  "or a PyTorch checkpoint), or --random-weights to run on the initial, untrained ones");
}

/* The entry called `name` (NULL: the default one), or a usage error naming them all. */
static int find_entry(const ctc_model_desc *desc, const char *name, const ctc_entry **out, ctc_error *err) {
  *out = ctc_model_entry(desc, name);
  if (*out) return CTC_OK;
  if (!name) return ctc_fail(err, CTC_ERR_ARG, "the model has no entry points");
  char names[512] = "";
  size_t len = 0;
  for (int i = 0; i < desc->nentries && len < sizeof names; i++)
    len += (size_t)snprintf(names + len, sizeof names - len, "%s%s", i ? ", " : "", desc->entries[i].name);
  return ctc_fail(err, CTC_ERR_ARG, "unknown entry '%s' (entries: %s)", name, names);
}
static int cmd_run(const char *prog, const ctc_model_desc *desc, int argc, char **argv, int is_infer) {
  ctc_error err = {0, ""};
  RunArgs a;
  ctc_drv_run r;
  memset(&r, 0, sizeof r);
  int rc = parse_run_args(argc, argv, is_infer, &a, &err);
  if (rc == CTC_OK && a.help) {
    usage(stdout, prog, desc);
    free_run_args(&a);
    return 0;
  }
  if (rc == CTC_OK && is_infer) rc = check_infer_weights(desc, &a, &err);
  const ctc_entry *e = NULL;
  if (rc == CTC_OK) rc = find_entry(desc, a.entry, &e, &err);
  if (rc == CTC_OK && is_infer && !a.entry && e->kind != CTC_ENTRY_FORWARD && e->kind != CTC_ENTRY_FUNCTION)
    rc = ctc_fail(&err, CTC_ERR_ARG, "infer runs the model's forward, which this program does not have (`ctc check` "
                  "says why); run an entry by name: `%s run %s`", prog, e->name);
  if (rc == CTC_OK) rc = do_run(prog, desc, e, &a, &r, &err);
  ctc_drv_run_free(&r);
  free_run_args(&a);
  if (rc == CTC_OK) return 0;
  int status = ctc_drv_report(prog, &err);
  if (err.code == CTC_ERR_ARG) fprintf(stderr, "%s: try '%s --help'\n", prog, prog);
  return status;
}

int ctc_drv_entry_failed(const ctc_model_desc *desc, void *model, const ctc_entry *e, int rc, const char *when,
                         ctc_error *err) {
  if (rc == CTC_ERR_ANOMALY && desc->error_of)
    return ctc_fail(err, rc, "anomaly in entry '%s'%s: %s", e->name, when, desc->error_of(model));
  if (rc == CTC_ERR_INDEX && desc->error_of)
    return ctc_fail(err, rc, "entry '%s'%s: %s", e->name, when, desc->error_of(model));
  return ctc_fail(err, rc, "entry '%s' failed%s: %s (status %d)", e->name, when, ctc_strerror(rc), rc);
}

int ctc_drv_profile_start(const ctc_model_desc *desc, void *model, const char *path, ctc_profile **out,
                          ctc_error *err) {
  *out = NULL;
  if (!desc->set_profile)
    return ctc_fail(err, CTC_ERR_ARG, "--profile %s: this program has no timing code; build it with "
                    "`ctc build --profile`", path);
  *out = ctc_prof_new((size_t)1 << 20);
  if (!*out) return ctc_fail(err, CTC_ERR_NOMEM, "out of memory for the profile");
  desc->set_profile(model, *out);
  return CTC_OK;
}

int ctc_drv_profile_finish(const ctc_model_desc *desc, void *model, ctc_profile *p, const char *path, ctc_error *err) {
  if (!p) return CTC_OK;
  desc->set_profile(model, NULL);
  ctc_error local = {0, ""};
  int rc = ctc_prof_write_trace(p, path, err ? err : &local);
  if (!rc) {
    ctc_prof_print_table(p, stdout, 40);
    printf("trace: %s (chrome://tracing or https://ui.perfetto.dev)\n", path);
  }
  ctc_prof_free(p);
  return rc;
}

/* Aligned, zeroed buffers for every output of e. */
int ctc_drv_alloc_outputs(const ctc_entry *e, void ***out, ctc_error *err) {
  *out = calloc((size_t)e->noutputs + 1, sizeof **out);
  if (!*out) return ctc_fail(err, CTC_ERR_NOMEM, "out of memory");
  for (int j = 0; j < e->noutputs; j++) {
    size_t bytes = ctc_tensor_bytes(&e->outputs[j]);
    (*out)[j] = bytes == SIZE_MAX ? NULL : ctc_drv_alloc_aligned(CTC_DRV_IO_ALIGN, bytes);
    if (!(*out)[j]) return ctc_fail(err, CTC_ERR_NOMEM, "cannot allocate output '%s'", e->outputs[j].name);
  }
  return CTC_OK;
}

/* splitmix64 (shuffling in train, random inputs in bench; examples/train_torch.py has the same code). */
uint64_t ctc_drv_splitmix64(uint64_t *s) {
  uint64_t z = (*s += 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

/* Uniform in [0, m), m >= 1, without modulo bias. */
uint64_t ctc_drv_rand_below(uint64_t *s, uint64_t m) {
  uint64_t reject_below = (0 - m) % m; /* 2^64 mod m */
  for (;;) {
    uint64_t r = ctc_drv_splitmix64(s);
    if (r >= reject_below) return r % m;
  }
}

/* ---- bench ----------------------------------------------------------------------
 *
 *   ./net bench [ENTRY] [--iters K] [--warmup W] [--weights W.safetensors]
 *               [--seed S] [--int-max M]
 *
 * Times ENTRY (default entries[0]) on random inputs of its declared shapes: W
 * warm-up calls, then K timed calls (CLOCK_MONOTONIC around each call). Float
 * inputs are uniform in [-1, 1); integer inputs (i64, i32, u8) uniform in
 * [0, M) with M = --int-max (default 2, which is a valid class label for any
 * loss with at least 2 classes and a valid row of any embedding with at least 2
 * rows); bool inputs 0 or 1. The inputs are drawn once (splitmix64 from --seed)
 * and reused by every call. A training entry updates the parameters in the arena
 * at each call, as a training loop does. One line to stdout:
 *
 *   bench ENTRY: median 1.2345 ms, min 1.2001 ms per call (K calls after W warm-up), peak RSS 12.3 MiB
 *
 * Peak RSS is getrusage's ru_maxrss of the process (arena, inputs, outputs,
 * libraries and their threads included). Exit status as for run. */

typedef struct BenchArgs {
  const char *entry, *weights, *profile;
  long long iters, warmup, int_max;
  unsigned long long seed;
  int help;
} BenchArgs;

static void bench_usage(FILE *f, const char *prog) {
  fprintf(f,
          "usage: %s bench [ENTRY] [--iters K] [--warmup W] [--weights W.safetensors] [--seed S]\n"
          "                [--int-max M] [--profile TRACE.json]\n"
          "\n"
          "Times ENTRY (default: the first entry) on random inputs of its declared shapes:\n"
          "W warm-up calls (default 3), then K timed calls (default 20). Prints the median\n"
          "and minimum milliseconds per call and the process's peak resident memory.\n"
          "\n"
          "options:\n"
          "  --weights W.safetensors   load the parameters from W first (or ckpt.pt[:KEY])\n"
          "  --seed S                  seed of the random inputs (default 0)\n"
          "  --int-max M               integer inputs are drawn from [0, M) (default 2: valid\n"
          "                            class labels and embedding indices for any model with at\n"
          "                            least 2 classes / rows); float inputs from [-1, 1)\n"
          "\n"
          "A training entry updates the parameters at every call, as a training loop does.\n"
          "exit status: 0 ok, 1 usage or data error (or the entry failed), 2 I/O error\n",
          prog);
}

/* A non-negative integer option value in [lo, hi]. */
static int parse_ll(const char *name, const char *val, long long lo, long long hi, long long *out, ctc_error *err) {
  char *end;
  errno = 0;
  long long v = strtoll(val, &end, 10);
  if (*val < '0' || *val > '9' || *end != '\0' || errno || v < lo || v > hi)
    return ctc_fail(err, CTC_ERR_ARG, "%s needs an integer from %lld to %lld, not '%s'", name, lo, hi, val);
  *out = v;
  return CTC_OK;
}

static int parse_bench_args(int argc, char **argv, BenchArgs *a, ctc_error *err) {
  memset(a, 0, sizeof *a);
  a->iters = 20;
  a->warmup = 3;
  a->int_max = 2;
  for (int i = 0; i < argc; i++) {
    const char *arg = argv[i];
    if (!strcmp(arg, "-h") || !strcmp(arg, "--help")) {
      a->help = 1;
      continue;
    }
    if (arg[0] != '-' || arg[1] == '\0') {
      if (a->entry) return ctc_fail(err, CTC_ERR_ARG, "unexpected argument '%s'", arg);
      a->entry = arg;
      continue;
    }
    static const char *const known[] = {"--iters", "--warmup", "--weights", "--seed", "--int-max", "--profile", NULL};
    char name[32];
    const char *val;
    int orc = ctc_drv_option_value(argc, argv, &i, known, name, &val, err);
    if (orc) return orc;
    int rc = CTC_OK;
    if (!strcmp(name, "--iters")) {
      rc = parse_ll(name, val, 1, 100000000LL, &a->iters, err);
    } else if (!strcmp(name, "--warmup")) {
      rc = parse_ll(name, val, 0, 100000000LL, &a->warmup, err);
    } else if (!strcmp(name, "--int-max")) {
      rc = parse_ll(name, val, 1, INT64_MAX, &a->int_max, err);
    } else if (!strcmp(name, "--weights") || !strcmp(name, "--profile")) {
      const char **slot = name[2] == 'w' ? &a->weights : &a->profile;
      if (*slot) return ctc_fail(err, CTC_ERR_ARG, "option %s given twice", name);
      if (!*val) return ctc_fail(err, CTC_ERR_ARG, "option %s needs a file name", name);
      *slot = val;
    } else { /* --seed */
      char *end;
      errno = 0;
      a->seed = strtoull(val, &end, 10);
      if (*val < '0' || *val > '9' || *end != '\0' || errno)
        return ctc_fail(err, CTC_ERR_ARG, "--seed needs a non-negative integer below 2^64, not '%s'", val);
    }
    if (rc) return rc;
  }
  return CTC_OK;
}

/* Fills dst (laid out as t) with random values; see the comment above. */
static int fill_random(const ctc_tensor *t, void *dst, uint64_t *s, long long int_max, ctc_error *err) {
  int64_t n = ctc_tensor_numel(t);
  unsigned char *out = dst;
  long long limit = t->dtype == CTC_I32 ? (long long)INT32_MAX + 1 : t->dtype == CTC_U8 ? 256 : INT64_MAX;
  if ((t->dtype == CTC_I32 || t->dtype == CTC_U8) && int_max > limit)
    return ctc_fail(err, CTC_ERR_ARG, "--int-max %lld: input '%s' is %s, whose values stop at %lld", int_max,
                    t->name, ctc_dtype_name(t->dtype), limit - 1);
  for (int64_t i = 0; i < n; i++) {
    double u = (double)(ctc_drv_splitmix64(s) >> 11) * 0x1p-53 * 2.0 - 1.0; /* [-1, 1) */
    switch (t->dtype) {
    case CTC_F32: {
      float v = (float)u;
      memcpy(out + 4 * i, &v, 4);
      break;
    }
    case CTC_F64:
      memcpy(out + 8 * i, &u, 8);
      break;
    case CTC_I64: {
      int64_t v = (int64_t)ctc_drv_rand_below(s, (uint64_t)int_max);
      memcpy(out + 8 * i, &v, 8);
      break;
    }
    case CTC_I32: {
      int32_t v = (int32_t)ctc_drv_rand_below(s, (uint64_t)int_max);
      memcpy(out + 4 * i, &v, 4);
      break;
    }
    case CTC_U8:
      out[i] = (unsigned char)ctc_drv_rand_below(s, (uint64_t)int_max);
      break;
    case CTC_BOOL:
      out[i] = (unsigned char)(ctc_drv_splitmix64(s) & 1);
      break;
    default:
      return ctc_fail(err, CTC_ERR_DTYPE, "input '%s' has an unknown dtype", t->name);
    }
  }
  return CTC_OK;
}

/* Peak resident set size of this process in KiB (0 when unknown). */
static long peak_rss_kib(void) {
  struct rusage ru;
  if (getrusage(RUSAGE_SELF, &ru) != 0) return 0;
  return ru.ru_maxrss; /* Linux: KiB */
}

static int do_bench(const char *prog, const ctc_model_desc *desc, const ctc_entry *e, const BenchArgs *a, ctc_drv_run *r,
                    ctc_error *err) {
  int rc;
  r->nin = e->ninputs;
  r->nout = e->noutputs;
  r->in = calloc((size_t)e->ninputs + 1, sizeof *r->in);
  if (!r->in) return ctc_fail(err, CTC_ERR_NOMEM, "out of memory");
  if ((rc = ctc_drv_make_model(desc, r, err))) return rc;
  if (a->weights && (rc = ctc_model_load(desc, r->model, a->weights, err))) return rc;
  ctc_drv_seed_rng(desc, r->model, a->seed);
  uint64_t s = a->seed ^ 0x6A09E667F3BCC908ULL;
  for (int i = 0; i < e->ninputs; i++) {
    size_t bytes = ctc_tensor_bytes(&e->inputs[i]);
    r->in[i] = bytes == SIZE_MAX ? NULL : ctc_drv_alloc_aligned(CTC_DRV_IO_ALIGN, bytes);
    if (!r->in[i]) return ctc_fail(err, CTC_ERR_NOMEM, "cannot allocate input '%s'", e->inputs[i].name);
    if ((rc = fill_random(&e->inputs[i], r->in[i], &s, a->int_max, err))) return rc;
  }
  if ((rc = ctc_drv_alloc_outputs(e, &r->out, err))) return rc;
  double *ms = malloc((size_t)a->iters * sizeof *ms);
  if (!ms) return ctc_fail(err, CTC_ERR_NOMEM, "out of memory");
  long long total = a->warmup + a->iters;
  ctc_profile *prof = NULL;
  for (long long k = 0; k < total; k++) {
    if (k == a->warmup && a->profile && (rc = ctc_drv_profile_start(desc, r->model, a->profile, &prof, err))) {
      free(ms);
      return rc;
    }
    double t0 = ctc_drv_now_ms();
    rc = e->call(r->model, (const void *const *)r->in, (void *const *)r->out);
    double t = ctc_drv_now_ms() - t0;
    if (rc) {
      free(ms);
      ctc_drv_profile_finish(desc, r->model, prof, a->profile, NULL);
      char when[64];
      snprintf(when, sizeof when, " at call %lld", k + 1);
      return ctc_drv_entry_failed(desc, r->model, e, rc, when, err);
    }
    if (k >= a->warmup) ms[k - a->warmup] = t;
  }
  size_t n = (size_t)a->iters;
  qsort(ms, n, sizeof *ms, cmp_double);
  double med = n % 2 ? ms[n / 2] : (ms[n / 2 - 1] + ms[n / 2]) / 2;
  printf("bench %s: median %.4f ms, min %.4f ms per call (%lld call%s after %lld warm-up), peak RSS %.1f MiB\n",
         e->name, med, ms[0], a->iters, a->iters == 1 ? "" : "s", a->warmup, (double)peak_rss_kib() / 1024.0);
  fflush(stdout);
  free(ms);
  (void)prog;
  return ctc_drv_profile_finish(desc, r->model, prof, a->profile, err);
}

static int cmd_bench(const char *prog, const ctc_model_desc *desc, int argc, char **argv) {
  ctc_error err = {0, ""};
  BenchArgs a;
  ctc_drv_run r;
  memset(&r, 0, sizeof r);
  int rc = parse_bench_args(argc, argv, &a, &err);
  if (rc == CTC_OK && a.help) {
    bench_usage(stdout, prog);
    return 0;
  }
  const ctc_entry *e = NULL;
  if (rc == CTC_OK) rc = find_entry(desc, a.entry, &e, &err);
  if (rc == CTC_OK) rc = do_bench(prog, desc, e, &a, &r, &err);
  ctc_drv_run_free(&r);
  if (rc == CTC_OK) return 0;
  int status = ctc_drv_report(prog, &err);
  if (err.code == CTC_ERR_ARG) fprintf(stderr, "%s: try '%s bench --help'\n", prog, prog);
  return status;
}

/* ---- main ---------------------------------------------------------------------- */

/* `--threads N` (or --threads=N), before or after the command, for every command: applied
 * (ctc_set_num_threads) and taken out of argv (*argc shrinks). 0, or 1 after an error. */
static int take_threads(const char *prog, int *argc, char **argv) {
  int out = 0;
  for (int i = 0; i < *argc; i++) {
    const char *v = NULL;
    if (i > 0 && !strcmp(argv[i], "--threads")) {
      if (i + 1 >= *argc) {
        fprintf(stderr, "%s: error: option '--threads' needs a value (the number of threads, e.g. --threads 2)\n", prog);
        return 1;
      }
      v = argv[++i];
    } else if (i > 0 && !strncmp(argv[i], "--threads=", 10)) {
      v = argv[i] + 10;
    } else {
      argv[out++] = argv[i];
      continue;
    }
    char *end;
    errno = 0;
    long n = strtol(v, &end, 10);
    if (end == v || *end || errno || n < 1 || n > 4096) {
      fprintf(stderr, "%s: error: bad --threads '%s': expected a number of threads from 1 to 4096\n", prog, v);
      return 1;
    }
    ctc_set_num_threads((int)n);
  }
  argv[out] = NULL;
  *argc = out;
  return 0;
}

int ctc_main(int argc, char **argv, const ctc_model_desc *desc) {
  ctc_blas_setup(argc, argv);
  const char *prog = argc > 0 && argv[0] ? argv[0] : (desc && desc->name ? desc->name : "ctc-model");
  if (!desc) {
    fprintf(stderr, "%s: error: no model description\n", prog);
    return 1;
  }
  if (take_threads(prog, &argc, argv)) return 1;
  if (argc < 2) {
    usage(stderr, prog, desc);
    return 1;
  }
  const char *cmd = argv[1];
  if (!strcmp(cmd, "--help") || !strcmp(cmd, "-h") || !strcmp(cmd, "help")) {
    usage(stdout, prog, desc);
    return 0;
  }
  if (!strcmp(cmd, "run") || !strcmp(cmd, "infer")) return cmd_run(prog, desc, argc - 2, argv + 2, cmd[0] == 'i');
  if (!strcmp(cmd, "train"))
    return (desc->script ? ctc_drv_script_train : ctc_drv_train)(prog, desc, argc - 2, argv + 2);
  if (!strcmp(cmd, "bench")) return cmd_bench(prog, desc, argc - 2, argv + 2);
  if (!strcmp(cmd, "gradcheck")) return ctc_drv_gradcheck(prog, desc, argc - 2, argv + 2);
  if (!strcmp(cmd, "sample")) return ctc_drv_sample(prog, desc, argc - 2, argv + 2);
  if (!strcmp(cmd, "info")) {
    if (argc > 2) {
      if (!strcmp(argv[2], "--help") || !strcmp(argv[2], "-h")) {
        usage(stdout, prog, desc);
        return 0;
      }
      fprintf(stderr, "%s: error: unexpected argument '%s' to info\n", prog, argv[2]);
      return 1;
    }
    return cmd_info(desc);
  }
  fprintf(stderr, "%s: error: unknown %s '%s' (try '%s --help')\n", prog,
          cmd[0] == '-' ? "option" : "command", cmd, prog);
  return 1;
}
