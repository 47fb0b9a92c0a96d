/* rt_driver_int.h - internal to the driver: helpers shared by rt_driver.c
 * (run, infer, info, bench, the dispatch) and rt_train.c (train). Not part of
 * the runtime's API (ctc_rt.h). */
#ifndef CTC_RT_DRIVER_INT_H
#define CTC_RT_DRIVER_INT_H

#include "ctc_rt.h"

#include <stdint.h>

#define CTC_DRV_IO_ALIGN 64 /* alignment of the input and output buffers */

/* Everything `run` allocates, released by ctc_drv_run_free. */
typedef struct ctc_drv_run {
  void *arena, *model;
  void **in, **out;            /* aligned buffers per input / output */
  const char **in_paths, **out_paths;
  int nin, nout;
  int64_t batch;               /* run: the batch of the inputs (entries with a run-time batch) */
} ctc_drv_run;

/* Prints "PROG: error: MSG" and returns the exit status for err->code. */
int ctc_drv_report(const char *prog, const ctc_error *err);
double ctc_drv_now_ms(void);
/* Zeroed, aligned; size rounded up to the alignment; never 0 bytes. */
void *ctc_drv_alloc_aligned(size_t align, size_t bytes);
/* Positions the "rng.offset" state tensor (dropout's stream) at seed * 2^40 when it is 0. */
void ctc_drv_seed_rng(const ctc_model_desc *desc, void *model, uint64_t seed);
/* "--name VALUE" / "--name=VALUE" at argv[*i] when name is one of `known`. */
int ctc_drv_option_value(int argc, char **argv, int *i, const char *const *known, char *name, const char **val,
                         ctc_error *err);
void ctc_drv_run_free(ctc_drv_run *r);
/* Allocates the arena and the model and calls init. */
int ctc_drv_make_model(const ctc_model_desc *desc, ctc_drv_run *r, ctc_error *err);
/* Aligned, zeroed buffers for every output of e. */
int ctc_drv_alloc_outputs(const ctc_entry *e, void ***out, ctc_error *err);
uint64_t ctc_drv_splitmix64(uint64_t *s);
uint64_t ctc_drv_rand_below(uint64_t *s, uint64_t m); /* uniform in [0, m), m >= 1 */

/* --profile PATH (programs built with `ctc build --profile`): a new profile given
 * to the model; an error naming the rebuild when the program has no timing code. */
int ctc_drv_profile_start(const ctc_model_desc *desc, void *model, const char *path, ctc_profile **out,
                          ctc_error *err);
/* Detaches the profile, writes its Chrome trace to path, prints its table to
 * stdout and frees it (p may be NULL: nothing). */
int ctc_drv_profile_finish(const ctc_model_desc *desc, void *model, ctc_profile *p, const char *path, ctc_error *err);

/* The error of entry e failing with status rc (`when`: "" or " at epoch 2, step 3"):
 * the model's report for CTC_ERR_ANOMALY (programs built with --anomaly) and CTC_ERR_INDEX. */
int ctc_drv_entry_failed(const ctc_model_desc *desc, void *model, const ctc_entry *e, int rc, const char *when,
                         ctc_error *err);

/* ---- text data (rt_text.c) ---- */

/* A token stream: ids in [0, vocabulary size). */
typedef struct ctc_text {
  int32_t *tok;
  int64_t n;
} ctc_text;
/* A character-level vocabulary: token i is code point cp[i] (sorted, distinct). */
typedef struct ctc_vocab {
  int32_t *cp;
  int32_t n;
} ctc_vocab;
/* A UTF-8 text file as tokens of its own vocabulary (the sorted set of its characters). */
int ctc_text_load_chars(const char *path, ctc_text *t, ctc_vocab *v, ctc_error *err);
/* nanoGPT's train.bin: little-endian uint16 token ids. */
int ctc_text_load_u16(const char *path, ctc_text *t, ctc_error *err);
void ctc_text_free(ctc_text *t);
void ctc_vocab_free(ctc_vocab *v);
int32_t ctc_vocab_index(const ctc_vocab *v, int32_t codepoint);   /* -1: not in it */
/* The vocabulary file: its characters in token order, UTF-8, nothing else
 * (Python: list(open(p, encoding='utf-8', newline='').read())). */
int ctc_vocab_write(const char *path, const ctc_vocab *v, ctc_error *err);
int ctc_vocab_read(const char *path, ctc_vocab *v, ctc_error *err);
/* The vocabulary file beside weights file W: W without its extension + ".vocab.txt" (0: too long). */
int ctc_vocab_path(const char *weights, char *out, size_t cap);
/* nanoGPT's get_batch: B windows at offsets uniform in [0, n - T) drawn in order with
 * ctc_drv_rand_below from `state`; x[b] = tok[off .. off+T), y[b] = tok[off+1 .. off+T]
 * (dt: CTC_I64 or CTC_I32). Needs t->n > T. */
void ctc_text_windows(const ctc_text *t, int64_t T, uint64_t state, int64_t B, ctc_dtype dt, void *x, void *y);
/* The random state of training step g (0-based, over the whole run) and of validation batch k. */
#define CTC_TEXT_TRAIN_STATE(seed, g) ((uint64_t)(seed) ^ ((uint64_t)(g) + 1) * 0xD1B54A32D192ED03ULL)
#define CTC_TEXT_VAL_STATE(seed, k) (~(uint64_t)(seed) ^ ((uint64_t)(k) + 1) * 0xD1B54A32D192ED03ULL)

/* `./net sample ...` (rt_text.c); argv starts after "sample". Returns the exit status. */
int ctc_drv_sample(const char *prog, const ctc_model_desc *desc, int argc, char **argv);

/* `./net train ...` (rt_train.c); argv starts after "train". Returns the exit status. */
int ctc_drv_train(const char *prog, const ctc_model_desc *desc, int argc, char **argv);

/* `./net train ...` of a program with a module-level training loop (desc->script, rt_text.c): runs
 * the script's loop; with --data or --tokens, ctc_drv_train. */
int ctc_drv_script_train(const char *prog, const ctc_model_desc *desc, int argc, char **argv);

/* `./net gradcheck ...` (rt_gradcheck.c); argv starts after "gradcheck". Returns the exit status. */
int ctc_drv_gradcheck(const char *prog, const ctc_model_desc *desc, int argc, char **argv);

#endif
