/* rt_driver.c - the command-line program around a generated model.
 *
 *   ./net run [ENTRY] [--weights W.safetensors] --input X.npy ... [--output Y.npy ...]
 *             [--save OUT.safetensors] [--repeat N] [--verbose]
 *   ./net infer ...      same as `run` with the default entry (entries[0], "forward")
 *   ./net info           model name, source, arena size, entries and parameters
 *   ./net train --data X --labels Y --epochs E [options]
 *                        train with the model's training entry (see cmd_train)
 *   ./net bench [ENTRY] [--iters K] [--warmup W] [--weights W] [--seed S] [--int-max M]
 *                        time ENTRY on random inputs (see cmd_bench)
 *   ./net --help
 *
 * `--input NAME=X.npy` / `--output NAME=Y.npy` bind by name; plain paths fill
 * the remaining inputs/outputs in declaration order. Every input must be given
 * and have exactly the declared shape; its dtype must match, except that f64
 * data is converted for an f32 input and i32/i64 data for an i64/i32 input
 * (range-checked). Outputs without an --output path are computed but not
 * written. Nothing is printed on success unless --verbose or --repeat is given.
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
#include "ctc_rt.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#define IO_ALIGN 64 /* alignment of the input and output buffers */

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
   * With OpenMP, the same re-exec sets OMP_WAIT_POLICY=passive (unless set):
   * libgomp's spinning workers otherwise steal the cores OpenBLAS's own
   * threads need between parallel loops (measured on the bench MLP, 2 cores:
   * 22.7 ms per forward with spinning, 0.43 ms passive). */
  if (getenv("CTC_NO_REEXEC") || !argv) return;
  int changed = 0;
  if (!getenv("OPENBLAS_CORETYPE")) {
    const char *type = detect_coretype();
    if (type && setenv("OPENBLAS_CORETYPE", type, 1) == 0) changed = 1;
  }
#ifdef _OPENMP
  if (!getenv("OMP_WAIT_POLICY") && setenv("OMP_WAIT_POLICY", "passive", 1) == 0) changed = 1;
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

static int report(const char *prog, const ctc_error *err) {
  fprintf(stderr, "%s: error: %s\n", prog, err->msg);
  return exit_status(err->code);
}

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* aligned_alloc needs a size that is a multiple of the alignment; never 0. */
static void *alloc_aligned(size_t align, size_t bytes) {
  if (bytes > SIZE_MAX - align) return NULL;
  size_t n = bytes ? (bytes + align - 1) / align * align : align;
  void *p = aligned_alloc(align, n);
  if (p) memset(p, 0, n);
  return p;
}

static void usage(FILE *f, const char *prog, const ctc_model_desc *desc) {
  const char *dflt = desc->nentries > 0 ? desc->entries[0].name : "forward";
  fprintf(f,
          "usage: %s COMMAND [options]\n"
          "\n"
          "Model '%s', compiled by ctc from %s.\n"
          "\n"
          "commands:\n"
          "  run [ENTRY] [options]     call ENTRY (default: %s) on .npy inputs\n"
          "  infer [options]           same as `run %s`\n"
          "  info                      print the entries, their inputs and outputs, the parameters\n"
          "                            and the arena size\n"
          "  train [options]           train with the model's training entry on .npy or IDX data\n"
          "                            (`%s train --help`)\n"
          "  bench [ENTRY] [options]   time ENTRY on random inputs: median and min ms per call,\n"
          "                            peak RSS (`%s bench --help`)\n"
          "  help, --help, -h          print this text\n"
          "\n"
          "options of run and infer:\n"
          "  --weights W.safetensors   load the parameters from W (without it they stay as the\n"
          "                            model initialised them)\n"
          "  --input X.npy             an input, in declaration order; one per input\n"
          "  --input NAME=X.npy        bind input NAME\n"
          "  --output Y.npy            where to write an output, in order (NAME=Y.npy binds by\n"
          "                            name); outputs without a path are not written\n"
          "  --save OUT.safetensors    save the parameters after the call(s), e.g. after a\n"
          "                            training step\n"
          "  --repeat N                call the entry N times; print the median ms per call to stderr\n"
          "  --verbose, -v             print timings to stderr\n"
          "\n"
          "Inputs must have exactly the declared shapes. Dtypes must match, except that\n"
          "float64 data is converted for a float32 input and int32/int64 for int64/int32.\n"
          "\n"
          "entries:",
          prog, desc->name ? desc->name : "?", desc->source ? desc->source : "?", dflt, dflt, prog, prog);
  for (int i = 0; i < desc->nentries; i++) fprintf(f, " %s", desc->entries[i].name);
  fprintf(f, "\n\n"
             "exit status: 0 ok, 1 usage or data error, 2 I/O error\n"
             "environment: OPENBLAS_CORETYPE (chosen from the CPU when unset and the program\n"
             "uses OpenBLAS), CTC_NO_REEXEC=1 (do not re-execute to set it)\n");
}

/* ---- info -------------------------------------------------------------------- */

static void print_tensor(const char *indent, const ctc_tensor *t) {
  char sh[256];
  printf("%s%s %s%s\n", indent, t->name ? t->name : "?", ctc_dtype_name(t->dtype),
         ctc_format_shape(sh, sizeof sh, t->ndim, t->shape));
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
    printf("entry %s: %d input%s, %d output%s\n", e->name, e->ninputs, e->ninputs == 1 ? "" : "s",
           e->noutputs, e->noutputs == 1 ? "" : "s");
    for (int k = 0; k < e->ninputs; k++) print_tensor("  input  ", &e->inputs[k]);
    for (int k = 0; k < e->noutputs; k++) print_tensor("  output ", &e->outputs[k]);
  }
  int64_t total = 0;
  for (int i = 0; i < desc->nparams; i++) {
    int64_t n = ctc_tensor_numel(&desc->params[i]);
    if (n > 0 && total <= INT64_MAX - n) total += n;
  }
  printf("parameters: %d (%lld values)\n", desc->nparams, (long long)total);
  for (int i = 0; i < desc->nparams; i++) print_tensor("  ", &desc->params[i]);
  return 0;
}

/* Models with dropout keep their random stream's position in an i64 state
 * tensor "rng.offset"; `train --seed S` starts the stream at S * 2^40 (unless the
 * weights file already carried a position), so each seed gives its own masks. */
static void seed_rng(const ctc_model_desc *desc, void *model, uint64_t seed) {
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
  const char *weights, *save;
  const char **inputs, **outputs; /* as given (NAME=path or path) */
  int ninputs, noutputs;
  long repeat;
  int verbose, help;
} RunArgs;

/* Parses run/infer options into a (malloc'ed arrays of argv pointers). */
/* The option at argv[*i], "--name VALUE" or "--name=VALUE", when it is one of
 * `known` (NULL-terminated): its name into name[32] and its value into *val
 * (advancing *i past a separate value). Anything else is a usage error. */
static int option_value(int argc, char **argv, int *i, const char *const *known, char *name, const char **val,
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

static int parse_run_args(int argc, char **argv, int allow_entry, RunArgs *a, ctc_error *err) {
  memset(a, 0, sizeof *a);
  a->repeat = 1;
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
    if (arg[0] != '-' || arg[1] == '\0') {
      if (allow_entry && !a->entry) {
        a->entry = arg;
        continue;
      }
      return ctc_fail(err, CTC_ERR_ARG, "unexpected argument '%s'", arg);
    }
    /* --name VALUE or --name=VALUE */
    static const char *const known[] = {"--weights", "--input", "--output", "--save", "--repeat", NULL};
    char name[32];
    const char *val;
    int orc = option_value(argc, argv, &i, known, name, &val, err);
    if (orc) return orc;

    if (!strcmp(name, "--input")) a->inputs[a->ninputs++] = val;
    else if (!strcmp(name, "--output")) a->outputs[a->noutputs++] = val;
    else if (!strcmp(name, "--weights") || !strcmp(name, "--save")) {
      const char **slot = name[2] == 'w' ? &a->weights : &a->save;
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

/* Everything `run` allocates, released by run_free. */
typedef struct Run {
  void *arena, *model;
  void **in, **out;            /* aligned buffers per input / output */
  const char **in_paths, **out_paths;
  int nin, nout;
} Run;

static void run_free(Run *r) {
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
  if (!same)
    return ctc_fail(err, CTC_ERR_SHAPE, "%s: input '%s' has shape %s, expected %s", path, want->name,
                    ctc_format_shape(gs, sizeof gs, got->ndim, got->shape),
                    ctc_format_shape(ws, sizeof ws, want->ndim, want->shape));
  size_t n = (size_t)ctc_tensor_numel(want);
  const unsigned char *src = got->data;
  unsigned char *out = dst;
  if (got->dtype == want->dtype) {
    memcpy(dst, got->data, ctc_tensor_bytes(want));
  } else if (want->dtype == CTC_F32 && got->dtype == CTC_F64) {
    for (size_t i = 0; i < n; i++) {
      double v;
      memcpy(&v, src + 8 * i, 8);
      float x = (float)v;
      memcpy(out + 4 * i, &x, 4);
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
static int make_model(const ctc_model_desc *desc, Run *r, ctc_error *err) {
  size_t align = desc->arena_align ? desc->arena_align : 64;
  if (align & (align - 1)) return ctc_fail(err, CTC_ERR_ARENA, "arena alignment %zu is not a power of two", align);
  if (align < sizeof(void *)) align = sizeof(void *);
  size_t bytes = desc->arena_bytes;
  if (bytes > SIZE_MAX - align) return ctc_fail(err, CTC_ERR_NOMEM, "arena of %zu bytes is too large", bytes);
  size_t rounded = bytes ? (bytes + align - 1) / align * align : align;
  r->arena = alloc_aligned(align, rounded);
  r->model = calloc(1, desc->model_size ? desc->model_size : 1);
  if (!r->arena || !r->model)
    return ctc_fail(err, CTC_ERR_NOMEM, "cannot allocate the model (%zu bytes of arena)", rounded);
  int rc = desc->init ? desc->init(r->model, r->arena, rounded) : CTC_OK;
  if (rc) return ctc_fail(err, rc, "model initialisation failed: %s", ctc_strerror(rc));
  return CTC_OK;
}

/* Reads every bound input into an aligned buffer of the declared layout. */
static int read_inputs(const ctc_entry *e, Run *r, ctc_error *err) {
  for (int i = 0; i < e->ninputs; i++) {
    ctc_tensor got;
    int rc = ctc_npy_read(r->in_paths[i], &got, err);
    if (rc) return rc;
    size_t bytes = ctc_tensor_bytes(&e->inputs[i]);
    r->in[i] = bytes == SIZE_MAX ? NULL : alloc_aligned(IO_ALIGN, bytes);
    if (!r->in[i]) rc = ctc_fail(err, CTC_ERR_NOMEM, "cannot allocate input '%s'", e->inputs[i].name);
    else rc = convert_input(&e->inputs[i], &got, r->in_paths[i], r->in[i], err);
    ctc_tensor_free(&got);
    if (rc) return rc;
  }
  return CTC_OK;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* Calls the entry `repeat` times; prints the median time per call with --repeat. */
static int call_entry(const char *prog, const ctc_entry *e, Run *r, const RunArgs *a, ctc_error *err) {
  double *ms = malloc((size_t)a->repeat * sizeof *ms);
  if (!ms) return ctc_fail(err, CTC_ERR_NOMEM, "out of memory");
  int rc = CTC_OK;
  for (long k = 0; k < a->repeat && rc == CTC_OK; k++) {
    double t0 = now_ms();
    rc = e->call(r->model, (const void *const *)r->in, (void *const *)r->out);
    ms[k] = now_ms() - t0;
  }
  if (rc) {
    free(ms);
    return ctc_fail(err, rc, "entry '%s' failed: %s (status %d)", e->name, ctc_strerror(rc), rc);
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

static int write_outputs(const ctc_entry *e, Run *r, ctc_error *err) {
  for (int j = 0; j < e->noutputs; j++) {
    if (!r->out_paths[j]) continue;
    ctc_tensor t = e->outputs[j];
    t.data = r->out[j];
    int rc = ctc_npy_write(r->out_paths[j], &t, err);
    if (rc) return rc;
  }
  return CTC_OK;
}

static void verbose_time(const RunArgs *a, const char *prog, const char *what, double t0) {
  if (a->verbose) fprintf(stderr, "%s: %s: %.3f ms\n", prog, what, now_ms() - t0);
}

/* The steps of `run`, after the command line has been parsed. */
static int do_run(const char *prog, const ctc_model_desc *desc, const ctc_entry *e, const RunArgs *a, Run *r,
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

  double t0 = now_ms();
  if ((rc = make_model(desc, r, err))) return rc;
  verbose_time(a, prog, "init", t0);
  if (a->weights) {
    t0 = now_ms();
    if ((rc = ctc_model_load(desc, r->model, a->weights, err))) return rc;
    verbose_time(a, prog, "load weights", t0);
  }
  t0 = now_ms();
  if ((rc = read_inputs(e, r, err))) return rc;
  for (int j = 0; j < e->noutputs; j++) {
    size_t bytes = ctc_tensor_bytes(&e->outputs[j]);
    r->out[j] = bytes == SIZE_MAX ? NULL : alloc_aligned(IO_ALIGN, bytes);
    if (!r->out[j]) return ctc_fail(err, CTC_ERR_NOMEM, "cannot allocate output '%s'", e->outputs[j].name);
  }
  verbose_time(a, prog, "read inputs", t0);
  if ((rc = call_entry(prog, e, r, a, err))) return rc;
  t0 = now_ms();
  if ((rc = write_outputs(e, r, err))) return rc;
  verbose_time(a, prog, "write outputs", t0);
  if (a->save) {
    t0 = now_ms();
    if ((rc = ctc_model_save(desc, r->model, a->save, err))) return rc;
    verbose_time(a, prog, "save weights", t0);
  }
  return CTC_OK;
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
  Run r;
  memset(&r, 0, sizeof r);
  int rc = parse_run_args(argc, argv, !is_infer, &a, &err);
  if (rc == CTC_OK && a.help) {
    usage(stdout, prog, desc);
    free_run_args(&a);
    return 0;
  }
  const ctc_entry *e = NULL;
  if (rc == CTC_OK) rc = find_entry(desc, a.entry, &e, &err);
  if (rc == CTC_OK) rc = do_run(prog, desc, e, &a, &r, &err);
  run_free(&r);
  free_run_args(&a);
  if (rc == CTC_OK) return 0;
  int status = report(prog, &err);
  if (err.code == CTC_ERR_ARG) fprintf(stderr, "%s: try '%s --help'\n", prog, prog);
  return status;
}

/* ---- train ----------------------------------------------------------------------
 *
 *   ./net train --data X --labels Y --epochs E [--weights W] [--batch B] [--no-shuffle]
 *               [--seed S] [--test-data X --test-labels Y] [--save OUT] [--log FILE]
 *               [--normalize MEAN,STD] [--limit N]
 *
 * The training step is the first entry of kind CTC_ENTRY_TRAIN: inputs (data
 * [B, ...], labels [B, ...]), output 0 the loss; one call does the forward and
 * backward passes and the optimizer update on the parameters in the arena.
 * B is fixed at compile time. Each epoch takes floor(N / B) batches (the last
 * partial batch is dropped, as DataLoader(drop_last=True) does), in file order
 * (--no-shuffle) or in the order of a permutation that depends only on --seed
 * and the epoch (splitmix64 + Fisher-Yates; examples/train_torch.py draws the
 * same one). Samples are converted per batch by ctc_dataset_gather (rt_data.c).
 * Test accuracy: argmax of the first CTC_ENTRY_FORWARD entry's logits [B, C],
 * over the whole test set in batches of its B, the last one padded with zeros
 * (padded rows are ignored). After each epoch the LR schedulers' entries
 * (CTC_ENTRY_SCHED) run; one with an input (ReduceLROnPlateau.step(metrics)) gets
 * the mean cross-entropy of those logits on the test set, which is printed. */

typedef struct TrainArgs {
  const char *weights, *data, *labels, *test_data, *test_labels, *save, *log;
  long long batch, epochs, limit; /* 0: not given */
  unsigned long long seed;
  int no_shuffle, help;
  ctc_data_xform xf;             /* u8 scaling and --normalize, for the data (not the labels) */
} TrainArgs;

static void train_usage(FILE *f, const char *prog, const ctc_entry *step) {
  long long b = step && step->ninputs > 0 && step->inputs[0].ndim > 0 ? (long long)step->inputs[0].shape[0] : 0;
  fprintf(f,
          "usage: %s train --data X --labels Y --epochs E [options]\n"
          "\n"
          "Trains the model with its training entry (%s): each call runs the forward and\n"
          "backward passes and the optimizer update compiled into the model.\n"
          "\n"
          "options:\n"
          "  --data X, --labels Y      training samples and their labels: .npy files, or IDX files\n"
          "                            as MNIST ships them (gzipped or not). Values convert to the\n"
          "                            entry's input dtype; u8 data becomes x / 255 for a float input\n"
          "                            (like torchvision's ToTensor)\n"
          "  --epochs E                passes over the training set\n"
          "  --batch B                 the batch size, which is fixed when the model is compiled\n",
          prog, step ? step->name : "none in this model");
  if (b > 0) fprintf(f, "                            (this model: %lld); another B is an error\n", b);
  fprintf(f,
          "  --weights W.safetensors   initial parameters (default: the model's own initialisation)\n"
          "  --no-shuffle              take the batches in file order\n"
          "  --seed S                  shuffling seed (default 0): the order of every epoch depends\n"
          "                            only on S and the epoch number\n"
          "  --normalize MEAN,STD      (x - MEAN) / STD after the scaling (transforms.Normalize)\n"
          "  --limit N                 use only the first N samples of each data set\n"
          "  --test-data X, --test-labels Y\n"
          "                            after each epoch, print the test accuracy: argmax of the\n"
          "                            forward entry's logits over the whole test set; with a\n"
          "                            ReduceLROnPlateau, the test loss (mean cross-entropy of\n"
          "                            the logits) too, which its step() gets\n"
          "  --save OUT.safetensors    write the parameters (and optimizer state) at the end\n"
          "  --log FILE.csv            write `epoch,step,loss`, one row per training step\n"
          "\n"
          "Every epoch takes floor(N / B) batches: the last partial batch is dropped, as with\n"
          "PyTorch's DataLoader(drop_last=True). Progress goes to stderr; one line per epoch\n"
          "to stdout: `epoch 1: loss 0.5123, 4321 samples/s, test accuracy 84.21%%`.\n"
          "exit status: 0 ok, 1 usage or data error, 2 I/O error\n");
}

static int parse_count(const char *name, const char *val, long long *out, ctc_error *err) {
  char *end;
  errno = 0;
  long long v = strtoll(val, &end, 10);
  if (*val == '\0' || *end != '\0' || errno || v < 1 || v > (1LL << 40))
    return ctc_fail(err, CTC_ERR_ARG, "%s needs a positive integer, not '%s'", name, val);
  *out = v;
  return CTC_OK;
}

static int parse_train_args(int argc, char **argv, TrainArgs *a, ctc_error *err) {
  static const char *const path_opts[] = {"--weights", "--data", "--labels", "--test-data", "--test-labels",
                                          "--save", "--log"};
  const char **path_slots[] = {&a->weights, &a->data, &a->labels, &a->test_data, &a->test_labels,
                               &a->save, &a->log};
  memset(a, 0, sizeof *a);
  a->xf.scale_u8 = 1;
  int have_seed = 0;
  for (int i = 0; i < argc; i++) {
    const char *arg = argv[i];
    if (!strcmp(arg, "-h") || !strcmp(arg, "--help")) {
      a->help = 1;
      continue;
    }
    if (!strcmp(arg, "--no-shuffle")) {
      a->no_shuffle = 1;
      continue;
    }
    if (arg[0] != '-' || arg[1] == '\0') return ctc_fail(err, CTC_ERR_ARG, "unexpected argument '%s'", arg);
    static const char *const known[] = {"--weights", "--data", "--labels", "--test-data", "--test-labels", "--save",
                                        "--log", "--batch", "--epochs", "--limit", "--seed", "--normalize", NULL};
    char name[32];
    const char *val;
    int orc = option_value(argc, argv, &i, known, name, &val, err);
    if (orc) return orc;
    int path = -1;
    for (int k = 0; k < (int)(sizeof path_opts / sizeof path_opts[0]); k++)
      if (!strcmp(name, path_opts[k])) path = k;

    int rc = CTC_OK;
    if (path >= 0) {
      if (*path_slots[path]) return ctc_fail(err, CTC_ERR_ARG, "option %s given twice", name);
      if (!*val) return ctc_fail(err, CTC_ERR_ARG, "option %s needs a file name", name);
      *path_slots[path] = val;
    } else if (!strcmp(name, "--batch")) {
      rc = parse_count(name, val, &a->batch, err);
    } else if (!strcmp(name, "--epochs")) {
      rc = parse_count(name, val, &a->epochs, err);
    } else if (!strcmp(name, "--limit")) {
      rc = parse_count(name, val, &a->limit, err);
    } else if (!strcmp(name, "--seed")) {
      char *end;
      errno = 0;
      a->seed = strtoull(val, &end, 10);
      if (*val < '0' || *val > '9' || *end != '\0' || errno)
        return ctc_fail(err, CTC_ERR_ARG, "--seed needs a non-negative integer below 2^64, not '%s'", val);
      have_seed = 1;
    } else { /* --normalize MEAN,STD */
      char *end;
      double mean = strtod(val, &end), sd = 0;
      int ok = end != val && *end == ',';
      if (ok) {
        const char *s2 = end + 1;
        sd = strtod(s2, &end);
        ok = end != s2 && *end == '\0' && isfinite(mean) && isfinite(sd) && sd != 0;
      }
      if (!ok)
        return ctc_fail(err, CTC_ERR_ARG, "--normalize needs MEAN,STD (two numbers, STD not 0), not '%s'", val);
      a->xf.mean = mean;
      a->xf.std = sd;
    }
    if (rc) return rc;
  }
  if (a->help) return CTC_OK;
  if (!a->data || !a->labels) return ctc_fail(err, CTC_ERR_ARG, "train needs --data X and --labels Y");
  if (!a->epochs) return ctc_fail(err, CTC_ERR_ARG, "train needs --epochs E");
  if (!a->test_data != !a->test_labels)
    return ctc_fail(err, CTC_ERR_ARG, "--test-data and --test-labels go together");
  if (have_seed && a->no_shuffle) return ctc_fail(err, CTC_ERR_ARG, "--seed has no effect with --no-shuffle");
  return CTC_OK;
}

/* Everything `train` allocates, released by train_free. */
typedef struct Train {
  Run r;                          /* the arena and the model (r.in/r.out unused) */
  const ctc_entry *step, *fwd;    /* the training entry; the forward entry or NULL */
  int64_t batch;                  /* B of the training entry */
  int64_t nclasses;               /* C of the forward entry's [B, C] output; 0: unknown */
  ctc_tensor x, y, tx, ty;        /* the data sets; integer labels converted to i64 */
  void *in[2], **out;             /* buffers of the training entry */
  void *fin, **fout;              /* buffers of the forward entry */
  int64_t *order, *rows;          /* sample order of the epoch; 0..N-1 for the test set */
  FILE *log;                  /* logw.f: --log goes to a temporary file renamed at the end */
  ctc_wfile logw;
} Train;

static void train_free(Train *t) {
  run_free(&t->r);
  ctc_tensor_free(&t->x);
  ctc_tensor_free(&t->y);
  ctc_tensor_free(&t->tx);
  ctc_tensor_free(&t->ty);
  free(t->in[0]);
  free(t->in[1]);
  for (int j = 0; t->out && j < t->step->noutputs; j++) free(t->out[j]);
  free(t->out);
  free(t->fin);
  for (int j = 0; t->fout && j < t->fwd->noutputs; j++) free(t->fout[j]);
  free(t->fout);
  free(t->order);
  free(t->rows);
  if (t->log) ctc_wcommit(&t->logw, 0, NULL);   /* a failed run leaves an old log as it was */
}

/* Values per sample: the product of all dimensions but the first. */
static int64_t per_sample(const ctc_tensor *t) {
  if (t->ndim < 1) return -1;
  ctc_tensor one = *t;
  one.shape[0] = 1;
  return ctc_tensor_numel(&one);
}

/* The training entry, checked: (data [B, ...], labels [B, ...]) -> loss [] (float). */
static int find_train_entry(const ctc_model_desc *desc, const ctc_entry **out, ctc_error *err) {
  const ctc_entry *e = NULL;
  for (int i = 0; i < desc->nentries && !e; i++)
    if (desc->entries[i].kind == CTC_ENTRY_TRAIN) e = &desc->entries[i];
  if (!e) {
    char names[512] = "";
    size_t len = 0;
    for (int i = 0; i < desc->nentries && len < sizeof names; i++)
      len += (size_t)snprintf(names + len, sizeof names - len, "%s%s", i ? ", " : "", desc->entries[i].name);
    return ctc_fail(err, CTC_ERR_ARG, "model '%s' has no training entry (entries: %s)",
                    desc->name ? desc->name : "?", names);
  }
  *out = e;
  char sh[128], sh2[128];
  if (e->ninputs != 2 || e->noutputs < 1)
    return ctc_fail(err, CTC_ERR_ARG, "training entry '%s' has %d inputs and %d outputs; train needs 2 inputs "
                    "(data, labels) and the loss as the first output", e->name, e->ninputs, e->noutputs);
  const ctc_tensor *x = &e->inputs[0], *y = &e->inputs[1], *l = &e->outputs[0];
  if (x->ndim < 1 || x->shape[0] < 1 || y->ndim < 1 || y->shape[0] != x->shape[0] || per_sample(x) < 0 ||
      per_sample(y) < 0)
    return ctc_fail(err, CTC_ERR_SHAPE, "training entry '%s': inputs '%s' %s and '%s' %s do not share a batch "
                    "dimension", e->name, x->name, ctc_format_shape(sh, sizeof sh, x->ndim, x->shape), y->name,
                    ctc_format_shape(sh2, sizeof sh2, y->ndim, y->shape));
  if (ctc_tensor_numel(l) != 1 || (l->dtype != CTC_F32 && l->dtype != CTC_F64))
    return ctc_fail(err, CTC_ERR_SHAPE, "training entry '%s': output '%s' (%s%s) is not a scalar loss", e->name,
                    l->name, ctc_dtype_name(l->dtype), ctc_format_shape(sh, sizeof sh, l->ndim, l->shape));
  return CTC_OK;
}

/* The first forward entry; NULL when there is none. */
static const ctc_entry *find_forward_entry(const ctc_model_desc *desc) {
  for (int i = 0; i < desc->nentries; i++)
    if (desc->entries[i].kind == CTC_ENTRY_FORWARD) return &desc->entries[i];
  return NULL;
}

/* Can the forward entry give test accuracy: one input [B, ...] with samples like
 * the training data, logits [B, C] first? */
static int check_forward_entry(const Train *t, ctc_error *err) {
  const ctc_entry *f = t->fwd;
  if (!f)
    return ctc_fail(err, CTC_ERR_ARG, "--test-data needs a forward entry (logits for argmax); the model has none");
  char a[128], b[128], c[128];
  const ctc_tensor *x = f->ninputs == 1 ? &f->inputs[0] : NULL, *o = f->noutputs >= 1 ? &f->outputs[0] : NULL;
  if (!x || !o || x->ndim < 1 || x->shape[0] < 1 || per_sample(x) != per_sample(&t->step->inputs[0]) ||
      o->ndim != 2 || o->shape[0] != x->shape[0] || o->shape[1] < 1 || (o->dtype != CTC_F32 && o->dtype != CTC_F64))
    return ctc_fail(err, CTC_ERR_SHAPE, "for test accuracy, forward entry '%s' must map one input [B, ...] shaped "
                    "like '%s' %s to logits [B, C] (it has %d input%s%s, output %s)", f->name,
                    t->step->inputs[0].name,
                    ctc_format_shape(a, sizeof a, t->step->inputs[0].ndim, t->step->inputs[0].shape), f->ninputs,
                    f->ninputs == 1 ? " " : "s", f->ninputs == 1 ? ctc_format_shape(b, sizeof b, x->ndim, x->shape) : "",
                    o ? ctc_format_shape(c, sizeof c, o->ndim, o->shape) : "none");
  return CTC_OK;
}

/* Loads a data set whose samples must hold `per` values each (what: "input 'x'
 * of entry 'train_step' has shape [64, 1, 28, 28]", for messages); keeps at
 * most `limit` samples (0: all). */
static int load_set(const char *path, long long limit, int64_t per, const char *what, ctc_tensor *t,
                    ctc_error *err) {
  int rc = ctc_dataset_load(path, t, err);
  if (rc) return rc;
  char gs[256];
  if (t->ndim < 1)
    return ctc_fail(err, CTC_ERR_SHAPE, "%s: a data set needs a first dimension that counts the samples; it has "
                    "shape []", path);
  int64_t got = per_sample(t);
  if (got != per)
    return ctc_fail(err, CTC_ERR_SHAPE, "%s: data of shape %s has %lld value%s per sample, but %s: %lld value%s "
                    "per sample", path, ctc_format_shape(gs, sizeof gs, t->ndim, t->shape), (long long)got,
                    got == 1 ? "" : "s", what, (long long)per, per == 1 ? "" : "s");
  if (limit > 0 && t->shape[0] > limit) t->shape[0] = limit;
  return CTC_OK;
}

/* Loads a data set for input `in` of entry e. */
static int load_input_set(const char *path, long long limit, const ctc_entry *e, const ctc_tensor *in, ctc_tensor *t,
                          ctc_error *err) {
  char what[384], sh[256];
  snprintf(what, sizeof what, "input '%s' of entry '%s' has shape %s", in->name, e->name,
           ctc_format_shape(sh, sizeof sh, in->ndim, in->shape));
  return load_set(path, limit, per_sample(in), what, t, err);
}

/* Replaces integer-valued labels by an i64 copy, checking 0 <= label < nclasses
 * when nclasses > 0. */
static int labels_to_i64(const char *path, ctc_tensor *y, int64_t nclasses, const char *fwd_name, ctc_error *err) {
  ctc_tensor c = *y;
  c.dtype = CTC_I64;
  size_t bytes = ctc_tensor_bytes(&c);
  c.data = bytes == SIZE_MAX ? NULL : malloc(bytes ? bytes : 1);
  if (!c.data) return ctc_fail(err, CTC_ERR_NOMEM, "%s: out of memory converting the labels", path);
  int rc = ctc_dataset_gather(y, NULL, y->shape[0], CTC_I64, NULL, c.data, err);
  if (rc) {
    free(c.data);
    ctc_error_prefix(err, path);
    return rc;
  }
  ctc_tensor_free(y);
  *y = c;
  int64_t n = ctc_tensor_numel(y), per = y->shape[0] ? n / y->shape[0] : 1;
  const int64_t *v = y->data;
  for (int64_t i = 0; nclasses > 0 && i < n; i++)
    if (v[i] < 0 || v[i] >= nclasses)
      return ctc_fail(err, CTC_ERR_SHAPE, "%s: label %lld of sample %lld is out of range: forward entry '%s' has "
                      "%lld classes (0 to %lld)", path, (long long)v[i], (long long)(i / per), fwd_name,
                      (long long)nclasses, (long long)nclasses - 1);
  return CTC_OK;
}

/* Aligned, zeroed buffers for every output of e. */
static int alloc_outputs(const ctc_entry *e, void ***out, ctc_error *err) {
  *out = calloc((size_t)e->noutputs + 1, sizeof **out);
  if (!*out) return ctc_fail(err, CTC_ERR_NOMEM, "out of memory");
  for (int j = 0; j < e->noutputs; j++) {
    size_t bytes = ctc_tensor_bytes(&e->outputs[j]);
    (*out)[j] = bytes == SIZE_MAX ? NULL : alloc_aligned(IO_ALIGN, bytes);
    if (!(*out)[j]) return ctc_fail(err, CTC_ERR_NOMEM, "cannot allocate output '%s'", e->outputs[j].name);
  }
  return CTC_OK;
}

/* Fails early (before hours of training) when OUT cannot be written. */
static int check_writable(const char *path, ctc_error *err) {
  if (access(path, F_OK) == 0) {
    if (access(path, W_OK) != 0) return ctc_fail(err, CTC_ERR_IO, "%s: cannot open for writing: %s", path, strerror(errno));
    return CTC_OK;
  }
  FILE *f = fopen(path, "wb");
  if (!f) return ctc_fail(err, CTC_ERR_IO, "%s: cannot open for writing: %s", path, strerror(errno));
  fclose(f);
  remove(path);
  return CTC_OK;
}

/* Validates the entries, loads the data and the weights, allocates the buffers. */
static int train_setup(const ctc_model_desc *desc, const TrainArgs *a, Train *t, ctc_error *err) {
  int rc;
  if ((rc = find_train_entry(desc, &t->step, err))) return rc;
  const ctc_entry *e = t->step;
  const ctc_tensor *xin = &e->inputs[0], *yin = &e->inputs[1];
  t->batch = xin->shape[0];
  char sh[256];
  if (a->batch && a->batch != t->batch)
    return ctc_fail(err, CTC_ERR_ARG, "--batch %lld: the model was compiled for batches of %lld (input '%s' of "
                    "'%s' is %s%s); for another batch size, compile it with example inputs of that batch",
                    a->batch, (long long)t->batch, xin->name, e->name, ctc_dtype_name(xin->dtype),
                    ctc_format_shape(sh, sizeof sh, xin->ndim, xin->shape));
  t->fwd = find_forward_entry(desc);
  if (a->test_data && (rc = check_forward_entry(t, err))) return rc;
  int int_labels = yin->dtype == CTC_I64 || yin->dtype == CTC_I32;
  if (int_labels && per_sample(yin) == 1 && t->fwd && check_forward_entry(t, NULL) == CTC_OK)
    t->nclasses = t->fwd->outputs[0].shape[1];

  if ((rc = load_input_set(a->data, a->limit, e, xin, &t->x, err))) return rc;
  if ((rc = load_input_set(a->labels, a->limit, e, yin, &t->y, err))) return rc;
  if (t->x.shape[0] != t->y.shape[0])
    return ctc_fail(err, CTC_ERR_SHAPE, "%s has %lld samples but %s has %lld labels", a->data,
                    (long long)t->x.shape[0], a->labels, (long long)t->y.shape[0]);
  if (t->x.shape[0] < t->batch)
    return ctc_fail(err, CTC_ERR_SHAPE, "%s: %lld training samples are fewer than one batch of %lld", a->data,
                    (long long)t->x.shape[0], (long long)t->batch);
  if (int_labels && (rc = labels_to_i64(a->labels, &t->y, t->nclasses, t->fwd ? t->fwd->name : "", err))) return rc;
  if (a->test_data) {
    if ((rc = load_input_set(a->test_data, a->limit, t->fwd, &t->fwd->inputs[0], &t->tx, err))) return rc;
    if ((rc = load_set(a->test_labels, a->limit, 1, "test accuracy needs one label per sample", &t->ty, err)))
      return rc;
    if (t->tx.shape[0] != t->ty.shape[0])
      return ctc_fail(err, CTC_ERR_SHAPE, "%s has %lld samples but %s has %lld labels", a->test_data,
                      (long long)t->tx.shape[0], a->test_labels, (long long)t->ty.shape[0]);
    if (t->tx.shape[0] < 1) return ctc_fail(err, CTC_ERR_SHAPE, "%s: the test set is empty", a->test_data);
    if ((rc = labels_to_i64(a->test_labels, &t->ty, 0, "", err))) return rc;
  }

  if ((rc = make_model(desc, &t->r, err))) return rc;
  if (a->weights && (rc = ctc_model_load(desc, t->r.model, a->weights, err))) return rc;
  seed_rng(desc, t->r.model, a->seed);
  for (int i = 0; i < 2; i++) {
    size_t bytes = ctc_tensor_bytes(&e->inputs[i]);
    t->in[i] = bytes == SIZE_MAX ? NULL : alloc_aligned(IO_ALIGN, bytes);
    if (!t->in[i]) return ctc_fail(err, CTC_ERR_NOMEM, "cannot allocate input '%s'", e->inputs[i].name);
  }
  if ((rc = alloc_outputs(e, &t->out, err))) return rc;
  int64_t n = t->x.shape[0], tn = a->test_data ? t->tx.shape[0] : 0;
  t->order = malloc((size_t)n * sizeof *t->order);
  if (!t->order) return ctc_fail(err, CTC_ERR_NOMEM, "out of memory");
  if (a->test_data) {
    size_t bytes = ctc_tensor_bytes(&t->fwd->inputs[0]);
    t->fin = bytes == SIZE_MAX ? NULL : alloc_aligned(IO_ALIGN, bytes);
    t->rows = malloc((size_t)tn * sizeof *t->rows);
    if (!t->fin || !t->rows) return ctc_fail(err, CTC_ERR_NOMEM, "out of memory");
    for (int64_t i = 0; i < tn; i++) t->rows[i] = i;
    if ((rc = alloc_outputs(t->fwd, &t->fout, err))) return rc;
  }
  if (a->save && (rc = check_writable(a->save, err))) return rc;
  if (a->log) {
    if ((rc = ctc_wopen(&t->logw, a->log, err))) return rc;
    t->log = t->logw.f;
    fprintf(t->log, "epoch,step,loss\n");
  }
  return CTC_OK;
}

/* ---- train: shuffling (examples/train_torch.py has the same code) ---- */

static uint64_t splitmix64(uint64_t *s) {
  uint64_t z = (*s += 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

/* Uniform in [0, m), m >= 1, without modulo bias. */
static uint64_t rand_below(uint64_t *s, uint64_t m) {
  uint64_t reject_below = (0 - m) % m; /* 2^64 mod m */
  for (;;) {
    uint64_t r = splitmix64(s);
    if (r >= reject_below) return r % m;
  }
}

/* The sample order of epoch `epoch` (1-based): 0..n-1, Fisher-Yates shuffled from a
 * state that depends only on the seed and the epoch. */
static void epoch_order(int64_t *order, int64_t n, int shuffle, uint64_t seed, long long epoch) {
  for (int64_t i = 0; i < n; i++) order[i] = i;
  if (!shuffle) return;
  uint64_t s = seed ^ ((uint64_t)epoch * 0xD1B54A32D192ED03ULL);
  for (int64_t i = n - 1; i > 0; i--) {
    int64_t j = (int64_t)rand_below(&s, (uint64_t)i + 1), tmp = order[i];
    order[i] = order[j];
    order[j] = tmp;
  }
}

/* ---- train: progress and evaluation ---- */

typedef struct Progress {
  int tty;                      /* stderr is a terminal: one line, rewritten with \r */
  long long epochs, steps;      /* steps per epoch */
  double train_ms;              /* time in training steps so far, all epochs */
  double last_ms;               /* when the tty line was last written */
} Progress;

static const char *fmt_duration(char *buf, size_t n, double sec) {
  if (!(sec >= 0) || sec > 1e8) return snprintf(buf, n, "?"), buf;
  long long s = (long long)(sec + 0.5);
  if (s >= 3600) snprintf(buf, n, "%lld:%02lld:%02lld", s / 3600, s / 60 % 60, s % 60);
  else snprintf(buf, n, "%lld:%02lld", s / 60, s % 60);
  return buf;
}

/* After step `step` (1-based) of epoch `epoch`; epoch_ms: time in this epoch's steps. */
static void progress(Progress *p, long long epoch, long long step, double mean_loss, int64_t batch, double epoch_ms) {
  double now = now_ms();
  if (p->tty) {
    if (step < p->steps && now - p->last_ms < 100) return;
  } else if (step == p->steps || (step * 10) / p->steps == ((step - 1) * 10) / p->steps) {
    return; /* not a tty: about every 10% of an epoch */
  }
  p->last_ms = now;
  long long done = (epoch - 1) * p->steps + step, left = p->epochs * p->steps - done;
  double rate = epoch_ms > 0 ? (double)step * (double)batch * 1e3 / epoch_ms : 0;
  char eta[32];
  fmt_duration(eta, sizeof eta, p->train_ms / (double)done * (double)left / 1e3);
  fprintf(stderr, "%sepoch %lld/%lld  step %lld/%lld  loss %.4f  %.0f samples/s  ETA %s%s", p->tty ? "\r\033[K" : "",
          epoch, p->epochs, step, p->steps, mean_loss, rate, eta, p->tty ? "" : "\n");
  fflush(stderr);
}

/* Index of the largest of n values (the first one; NaN counts as largest, as in torch.argmax). */
static int64_t argmax_row(const unsigned char *row, ctc_dtype dt, int64_t n) {
  int64_t best = 0;
  double bv = 0;
  for (int64_t k = 0; k < n; k++) {
    double v;
    if (dt == CTC_F32) {
      float f;
      memcpy(&f, row + 4 * k, 4);
      v = f;
    } else {
      memcpy(&v, row + 8 * k, 8);
    }
    if (isnan(v)) return k;
    if (k == 0 || v > bv) best = k, bv = v;
  }
  return best;
}

/* -log softmax(row)[label]: the cross-entropy of one row of logits (as PyTorch's,
 * in double; log-probabilities give their NLL, since log_softmax is idempotent). */
static double cross_entropy_row(const unsigned char *row, ctc_dtype dt, int64_t n, int64_t label) {
  double mx = -INFINITY, sum = 0, v, at = 0;
  for (int pass = 0; pass < 2; pass++)
    for (int64_t k = 0; k < n; k++) {
      if (dt == CTC_F32) {
        float f;
        memcpy(&f, row + 4 * k, 4);
        v = f;
      } else {
        memcpy(&v, row + 8 * k, 8);
      }
      if (pass == 0) mx = v > mx || isnan(v) ? v : mx;
      else sum += exp(v - mx);
      if (k == label) at = v;
    }
  return mx + log(sum) - at;
}

/* Test accuracy (0..1) and mean cross-entropy with the forward entry, in batches padded with zeros. */
static int evaluate(Train *t, const TrainArgs *a, double *acc, double *loss, ctc_error *err) {
  const ctc_entry *f = t->fwd;
  const ctc_tensor *xin = &f->inputs[0], *o = &f->outputs[0];
  int64_t fb = xin->shape[0], n = t->tx.shape[0], c = o->shape[1], correct = 0;
  double ce = 0;
  size_t sample_bytes = (size_t)per_sample(xin) * ctc_dtype_size(xin->dtype);
  const int64_t *labels = t->ty.data;
  for (int64_t start = 0; start < n; start += fb) {
    int64_t m = n - start < fb ? n - start : fb;
    int rc = ctc_dataset_gather(&t->tx, t->rows + start, m, xin->dtype, &a->xf, t->fin, err);
    if (rc) {
      ctc_error_prefix(err, a->test_data);
      return rc;
    }
    memset((unsigned char *)t->fin + (size_t)m * sample_bytes, 0, (size_t)(fb - m) * sample_bytes);
    rc = f->call(t->r.model, (const void *const *)&t->fin, (void *const *)t->fout);
    if (rc) return ctc_fail(err, rc, "entry '%s' failed on the test set: %s (status %d)", f->name, ctc_strerror(rc), rc);
    size_t row_bytes = (size_t)c * ctc_dtype_size(o->dtype);
    for (int64_t i = 0; i < m; i++) {
      const unsigned char *row = (const unsigned char *)t->fout[0] + (size_t)i * row_bytes;
      correct += argmax_row(row, o->dtype, c) == labels[start + i];
      if (labels[start + i] >= 0 && labels[start + i] < c) ce += cross_entropy_row(row, o->dtype, c, labels[start + i]);
      else ce = NAN;
    }
  }
  *acc = (double)correct / (double)n;
  *loss = ce / (double)n;
  return CTC_OK;
}

/* One epoch of training steps; *mean_loss and *ms (time in steps) for the summary. */
static int train_epoch(Train *t, const TrainArgs *a, Progress *p, long long epoch, double *mean_loss, double *ms,
                       ctc_error *err) {
  const ctc_entry *e = t->step;
  const ctc_data_xform *xf = &a->xf;
  double sum = 0, t0 = now_ms();
  epoch_order(t->order, t->x.shape[0], !a->no_shuffle, a->seed, epoch);
  for (long long s = 1; s <= p->steps; s++) {
    const int64_t *rows = t->order + (s - 1) * t->batch;
    int rc = ctc_dataset_gather(&t->x, rows, t->batch, e->inputs[0].dtype, xf, t->in[0], err);
    if (rc) {
      ctc_error_prefix(err, a->data);
      return rc;
    }
    if ((rc = ctc_dataset_gather(&t->y, rows, t->batch, e->inputs[1].dtype, NULL, t->in[1], err))) {
      ctc_error_prefix(err, a->labels);
      return rc;
    }
    double s0 = now_ms();
    rc = e->call(t->r.model, (const void *const *)t->in, (void *const *)t->out);
    p->train_ms += now_ms() - s0;
    if (rc)
      return ctc_fail(err, rc, "entry '%s' failed at epoch %lld, step %lld: %s (status %d)", e->name, epoch, s,
                      ctc_strerror(rc), rc);
    double loss;
    if (e->outputs[0].dtype == CTC_F32) {
      float l;
      memcpy(&l, t->out[0], sizeof l);
      loss = l;
    } else {
      memcpy(&loss, t->out[0], sizeof loss);
    }
    sum += loss;
    if (t->log && fprintf(t->log, "%lld,%lld,%.9g\n", epoch, s, loss) < 0)
      return ctc_fail(err, CTC_ERR_IO, "%s: write failed: %s", a->log, strerror(errno));
    progress(p, epoch, s, sum / (double)s, t->batch, now_ms() - t0);
  }
  *mean_loss = sum / (double)p->steps;
  *ms = now_ms() - t0;
  return CTC_OK;
}

static int do_train(const ctc_model_desc *desc, const TrainArgs *a, Train *t, ctc_error *err) {
  int rc = train_setup(desc, a, t, err);
  if (rc) return rc;
  Progress p = {0};
  p.tty = isatty(fileno(stderr));
  p.epochs = a->epochs;
  p.steps = t->x.shape[0] / t->batch; /* drop_last */
  /* ReduceLROnPlateau's entry takes the metric: the evaluation loss */
  int plateau = 0;
  for (int i = 0; i < desc->nentries; i++) {
    const ctc_entry *e = &desc->entries[i];
    if (e->kind != CTC_ENTRY_SCHED || e->ninputs == 0) continue;
    plateau = 1;
    if (!a->test_data)
      return ctc_fail(err, CTC_ERR_ARG, "'%s' (ReduceLROnPlateau.step(metrics)) needs the evaluation loss: pass "
                      "--test-data and --test-labels", e->name);
  }
  for (long long epoch = 1; epoch <= a->epochs; epoch++) {
    double loss = 0, ms = 0, acc = 0, test_loss = 0;
    if ((rc = train_epoch(t, a, &p, epoch, &loss, &ms, err))) return rc;
    if (p.tty) fprintf(stderr, "\r\033[K");
    if (a->test_data && (rc = evaluate(t, a, &acc, &test_loss, err))) return rc;
    printf("epoch %lld: loss %.4f, %.0f samples/s", epoch, loss, ms > 0 ? (double)(p.steps * t->batch) * 1e3 / ms : 0);
    if (a->test_data) printf(", test accuracy %.2f%%", 100 * acc);
    if (plateau) printf(", test loss %.6f", test_loss);
    printf("\n");
    fflush(stdout);
    /* epoch-wise LR schedulers (scheduler.step() after each epoch, as PyTorch users write it);
     * ReduceLROnPlateau gets the mean cross-entropy on the test set */
    for (int i = 0; i < desc->nentries; i++) {
      const ctc_entry *e = &desc->entries[i];
      if (e->kind != CTC_ENTRY_SCHED) continue;
      float m32 = (float)test_loss;
      double m64 = test_loss;
      const void *in[1] = {e->ninputs && e->inputs[0].dtype == CTC_F64 ? (const void *)&m64 : (const void *)&m32};
      if ((rc = e->call(t->r.model, e->ninputs ? in : NULL, NULL)))
        return ctc_fail(err, rc, "entry '%s' failed after epoch %lld: %s", e->name, epoch, ctc_strerror(rc));
    }
  }
  if (t->log) {
    int ok = !ferror(t->log);
    t->log = NULL;
    if ((rc = ctc_wcommit(&t->logw, ok, err))) return rc;
  }
  if (a->save) return ctc_model_save(desc, t->r.model, a->save, err);
  return CTC_OK;
}

static int cmd_train(const char *prog, const ctc_model_desc *desc, int argc, char **argv) {
  ctc_error err = {0, ""};
  TrainArgs a;
  Train t;
  memset(&t, 0, sizeof t);
  int rc = parse_train_args(argc, argv, &a, &err);
  if (rc == CTC_OK && a.help) {
    const ctc_entry *step = NULL;
    find_train_entry(desc, &step, NULL);
    train_usage(stdout, prog, step);
    return 0;
  }
  if (rc == CTC_OK) rc = do_train(desc, &a, &t, &err);
  train_free(&t);
  if (rc == CTC_OK) return 0;
  int status = report(prog, &err);
  if (err.code == CTC_ERR_ARG) fprintf(stderr, "%s: try '%s train --help'\n", prog, prog);
  return status;
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
  const char *entry, *weights;
  long long iters, warmup, int_max;
  unsigned long long seed;
  int help;
} BenchArgs;

static void bench_usage(FILE *f, const char *prog) {
  fprintf(f,
          "usage: %s bench [ENTRY] [--iters K] [--warmup W] [--weights W.safetensors] [--seed S]\n"
          "                [--int-max M]\n"
          "\n"
          "Times ENTRY (default: the first entry) on random inputs of its declared shapes:\n"
          "W warm-up calls (default 3), then K timed calls (default 20). Prints the median\n"
          "and minimum milliseconds per call and the process's peak resident memory.\n"
          "\n"
          "options:\n"
          "  --weights W.safetensors   load the parameters from W first\n"
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
    static const char *const known[] = {"--iters", "--warmup", "--weights", "--seed", "--int-max", NULL};
    char name[32];
    const char *val;
    int orc = option_value(argc, argv, &i, known, name, &val, err);
    if (orc) return orc;
    int rc = CTC_OK;
    if (!strcmp(name, "--iters")) {
      rc = parse_ll(name, val, 1, 100000000LL, &a->iters, err);
    } else if (!strcmp(name, "--warmup")) {
      rc = parse_ll(name, val, 0, 100000000LL, &a->warmup, err);
    } else if (!strcmp(name, "--int-max")) {
      rc = parse_ll(name, val, 1, INT64_MAX, &a->int_max, err);
    } else if (!strcmp(name, "--weights")) {
      if (a->weights) return ctc_fail(err, CTC_ERR_ARG, "option --weights given twice");
      if (!*val) return ctc_fail(err, CTC_ERR_ARG, "option --weights needs a file name");
      a->weights = val;
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
    double u = (double)(splitmix64(s) >> 11) * 0x1p-53 * 2.0 - 1.0; /* [-1, 1) */
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
      int64_t v = (int64_t)rand_below(s, (uint64_t)int_max);
      memcpy(out + 8 * i, &v, 8);
      break;
    }
    case CTC_I32: {
      int32_t v = (int32_t)rand_below(s, (uint64_t)int_max);
      memcpy(out + 4 * i, &v, 4);
      break;
    }
    case CTC_U8:
      out[i] = (unsigned char)rand_below(s, (uint64_t)int_max);
      break;
    case CTC_BOOL:
      out[i] = (unsigned char)(splitmix64(s) & 1);
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

static int do_bench(const char *prog, const ctc_model_desc *desc, const ctc_entry *e, const BenchArgs *a, Run *r,
                    ctc_error *err) {
  int rc;
  r->nin = e->ninputs;
  r->nout = e->noutputs;
  r->in = calloc((size_t)e->ninputs + 1, sizeof *r->in);
  if (!r->in) return ctc_fail(err, CTC_ERR_NOMEM, "out of memory");
  if ((rc = make_model(desc, r, err))) return rc;
  if (a->weights && (rc = ctc_model_load(desc, r->model, a->weights, err))) return rc;
  seed_rng(desc, r->model, a->seed);
  uint64_t s = a->seed ^ 0x6A09E667F3BCC908ULL;
  for (int i = 0; i < e->ninputs; i++) {
    size_t bytes = ctc_tensor_bytes(&e->inputs[i]);
    r->in[i] = bytes == SIZE_MAX ? NULL : alloc_aligned(IO_ALIGN, bytes);
    if (!r->in[i]) return ctc_fail(err, CTC_ERR_NOMEM, "cannot allocate input '%s'", e->inputs[i].name);
    if ((rc = fill_random(&e->inputs[i], r->in[i], &s, a->int_max, err))) return rc;
  }
  if ((rc = alloc_outputs(e, &r->out, err))) return rc;
  double *ms = malloc((size_t)a->iters * sizeof *ms);
  if (!ms) return ctc_fail(err, CTC_ERR_NOMEM, "out of memory");
  long long total = a->warmup + a->iters;
  for (long long k = 0; k < total; k++) {
    double t0 = now_ms();
    rc = e->call(r->model, (const void *const *)r->in, (void *const *)r->out);
    double t = now_ms() - t0;
    if (rc) {
      free(ms);
      return ctc_fail(err, rc, "entry '%s' failed at call %lld: %s (status %d)", e->name, k + 1, ctc_strerror(rc),
                      rc);
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
  return CTC_OK;
}

static int cmd_bench(const char *prog, const ctc_model_desc *desc, int argc, char **argv) {
  ctc_error err = {0, ""};
  BenchArgs a;
  Run r;
  memset(&r, 0, sizeof r);
  int rc = parse_bench_args(argc, argv, &a, &err);
  if (rc == CTC_OK && a.help) {
    bench_usage(stdout, prog);
    return 0;
  }
  const ctc_entry *e = NULL;
  if (rc == CTC_OK) rc = find_entry(desc, a.entry, &e, &err);
  if (rc == CTC_OK) rc = do_bench(prog, desc, e, &a, &r, &err);
  run_free(&r);
  if (rc == CTC_OK) return 0;
  int status = report(prog, &err);
  if (err.code == CTC_ERR_ARG) fprintf(stderr, "%s: try '%s bench --help'\n", prog, prog);
  return status;
}

/* ---- main ---------------------------------------------------------------------- */

int ctc_main(int argc, char **argv, const ctc_model_desc *desc) {
  ctc_blas_setup(argc, argv);
  const char *prog = argc > 0 && argv[0] ? argv[0] : (desc && desc->name ? desc->name : "ctc-model");
  if (!desc) {
    fprintf(stderr, "%s: error: no model description\n", prog);
    return 1;
  }
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
  if (!strcmp(cmd, "train")) return cmd_train(prog, desc, argc - 2, argv + 2);
  if (!strcmp(cmd, "bench")) return cmd_bench(prog, desc, argc - 2, argv + 2);
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
