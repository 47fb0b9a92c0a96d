/* opts.h - the ctc command line as parsed (main.c), and what `ctc build` (build.c) reads of it. */
#ifndef CTC_OPTS_H
#define CTC_OPTS_H
#include "../lowering/lowering.h"
#include "../support/support.h"

typedef struct Opts {
  const char *cmd, *file, *out, *target, *emit, *cc;
  int stats, no_blas, no_openmp, no_fuse, no_fuse_attention, profile, anomaly, tf32, emulate;
  int no_low_store;   /* --no-low-store: LowerOptions.low_store off */
  int no_winograd;    /* --no-winograd: Func.conv_wino off */
  int fixed_batch;             /* --fixed-batch: forward runs only at the file's batch */
  int validate;               /* --validate (validate.h) */
  int md;                     /* -MD: --depfile OUT.d (depfile.h) */
  const char *depfile;        /* --depfile FILE */
  int shared, python;         /* build --shared (a .so and its header), --python (an extension module) */
  int freestanding, no_libm;  /* --freestanding, --no-libm */
  const char *embed;          /* --embed-weights W */
  const char *quantize, *calibrate, *weights;   /* --quantize int8 --calibrate X.npy --weights W */
  LowerOptions lower;
  Vec(InputSpec) inputs;      /* --input, repeatable (no fixed limit) */
  Vec(const char *) entries;  /* --entry, repeatable */
  Vec(const char *) dump_before, dump_after; /* pass names, or "all" */
  const char *max_name;       /* --max NAME=M */
  const char *opt_level;      /* build -O<n>: "-O1" (after ctc's -O3, so it wins) */
  Vec(const char *) cflags;   /* build --cflags '...', repeatable: words for the C compiler, after ctc's */
  int verbose;                /* build --verbose: print the compiler commands */
  int64_t max_value;
} Opts;

#endif
