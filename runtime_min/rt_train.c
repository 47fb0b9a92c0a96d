/* rt_train.c - `./net train`: the training loop of the driver (rt_driver.c
 * has the command dispatch, run/infer/info/bench and the helpers both use,
 * declared in rt_driver_int.h). */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L
#endif
#include "ctc_rt.h"
#include "rt_driver_int.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <dirent.h>
#include <signal.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* ---- train ----------------------------------------------------------------------
 *
 * Text data (--text FILE / --tokens FILE.bin, rt_text.c): --steps N steps instead of
 * epochs; an "epoch" of the loop below is one --eval-interval, after which the
 * validation loss is printed. Step g (0-based over the run) takes the B windows
 * ctc_text_windows draws from CTC_TEXT_TRAIN_STATE(seed, g), so checkpoints and
 * --resume work as for samples (tests/test_text.py draws the same windows).
 *
 *   ./net train --data X --labels Y --epochs E [--weights W] [--batch B] [--no-shuffle]
 *               [--seed S] [--test-data X --test-labels Y] [--save OUT [--save-training-state]] [--log FILE]
 *               [--normalize MEAN,STD] [--limit N] [--checkpoint DIR [--checkpoint-every N]]
 *               [--resume DIR] [--nan-policy stop|skip]
 *
 * The training step is the first entry of kind CTC_ENTRY_TRAIN: inputs (data
 * [B, ...], labels [B, ...], and optionally a one-element iteration number, which
 * gets the count of steps before this one, from 0, as nanoGPT's iter_num), output
 * 0 the loss; one call does the forward and backward passes and the optimizer
 * update on the parameters in the arena.
 * B is fixed at compile time. Each epoch takes floor(N / B) batches (the last
 * partial batch is dropped, as DataLoader(drop_last=True) does); an entry with a
 * run-time batch (ctc --input x=f32[N,...] --max N=M) takes --batch B up to M and
 * runs ceil(N / B) batches, the last one partial (drop_last=False). In file order
 * (--no-shuffle) or in the order of a permutation that depends only on --seed
 * and the epoch (ctc_drv_splitmix64 + Fisher-Yates; examples/train_torch.py draws the
 * same one). Samples are converted per batch by ctc_dataset_gather (rt_data.c).
 * Test accuracy: with an evaluation entry (CTC_ENTRY_EVAL: the loop body of a
 * `test(model, device, test_loader)`, (data [B, ...], labels [B]) -> one-element
 * sums: a correct count, a loss sum or both), its integer outputs (correct counts,
 * printed as the accuracy when there is one) and float outputs (loss sums) added
 * up over the whole test set in batches of its B, the last one padded with zero
 * samples labelled -100 (PyTorch's ignore_index), divided by the number of
 * samples: the accuracy and the test loss, which is printed. Otherwise argmax of
 * the first CTC_ENTRY_FORWARD entry's logits [B, C], over the whole test set in
 * batches of its B, the last one padded with zeros (padded rows are ignored), and
 * as the test loss the mean cross-entropy of those logits. After each epoch the LR
 * schedulers' entries (CTC_ENTRY_SCHED) run; one with an input
 * (ReduceLROnPlateau.step(metrics)) gets the test loss.
 *
 * Checkpoints (--checkpoint DIR) are one safetensors file, DIR/checkpoint.safetensors,
 * replaced atomically (ctc_st_write: temporary file, fsync, rename), so the previous
 * checkpoint stays whole until the new one is complete. It holds every parameter of
 * the model, optimizer and scheduler state and the dropout stream's position
 * included (they are all parameters: the last desc->noptional ones and
 * "rng.offset"), plus the driver's position, the i64 tensor "ctc.train.state"
 * (TS_* below: epoch, steps done in it, seed, shuffle, samples, batch, steps whose
 * loss counted) and the f64 "ctc.train.loss_sum" (this epoch's loss so far, for
 * the epoch line). A position (e, s) means: s steps of epoch e are done; the end of
 * the epoch (test accuracy, the epoch line, scheduler entries) is not, so (e, steps)
 * and (e + 1, 0) are different points. --resume DIR loads one and goes on from its
 * position: the permutation of an epoch depends only on the seed and the epoch, so
 * an interrupted and resumed run does exactly the calls of an uninterrupted one.
 * SIGINT and SIGTERM (once training has started) finish the current step, write a
 * checkpoint and exit with 128 + the signal number; a second one kills as usual.
 *
 * Data-parallel training (a distributed build, rt_mpi.c, under `mpirun -np P`):
 * rank 0's initial parameters (its init, --weights or --resume) are broadcast to
 * all; each epoch's permutation is the same on every rank, padded to a multiple
 * of P by repeating its start and dealt out as DistributedSampler does (rank r
 * takes positions r, r + P, ...), so every rank has ceil(N / P) samples and
 * floor(ceil(N / P) / B) steps of its own batch B (a global batch of P * B); the
 * training entry averages the gradients over the ranks before its update. The
 * loss of a step is the mean over the ranks (so every rank takes the same NaN
 * decisions), and a stop signal seen by any rank stops all after the step.
 * Rank 0 alone prints, logs, writes checkpoints and --save; test accuracy is
 * computed by every rank over the whole test set (schedulers need the same
 * value everywhere). A run resumes with the same number of ranks. */

/* The communicator of a distributed build (rt_mpi.c); absent (NULL) elsewhere,
 * so that programs built without --distributed do not link MPI. */
#if defined(__GNUC__) || defined(__clang__)
extern ctc_comm *ctc_comm_world(void) __attribute__((weak));
#endif

typedef struct TrainArgs {
  const char *weights, *data, *labels, *test_data, *test_labels, *save, *log;
  const char *profile;             /* --profile TRACE.json (programs built with ctc build --profile) */
  long long batch, epochs, limit; /* 0: not given */
  unsigned long long seed;
  int no_shuffle, help, have_seed;
  int training_state;              /* --save-training-state */
  const char *checkpoint, *resume; /* DIR of --checkpoint / --resume */
  long long ckpt_every;            /* --checkpoint-every N (steps); 0: at the end of each epoch only */
  int nan_skip;                    /* --nan-policy skip */
  ctc_data_xform xf;             /* u8 scaling and --normalize, for the data (not the labels) */
  /* text data (--text FILE / --tokens FILE.bin): windows of the token stream, as nanoGPT's get_batch */
  const char *text, *tokens;
  long long block, steps, eval_interval, eval_iters;   /* 0: not given */
  double val_fraction;
} TrainArgs;

static void train_usage(FILE *f, const char *prog, const ctc_entry *step) {
  long long b = step && step->ninputs > 0 && step->inputs[0].ndim > 0 ? (long long)step->inputs[0].shape[0] : 0;
  fprintf(f,
          "usage: %s train --data X --labels Y --epochs E [options]\n"
          "\n"
          "Trains the model with its training entry (%s): each call runs the forward and\n"
          "backward passes and the optimizer update compiled into the model. An entry with a\n"
          "third input (a one-element tensor, e.g. `def train_step(x, y, it)`) gets the\n"
          "iteration number: the steps taken before this one, from 0, over all epochs.\n"
          "\n"
          "options:\n"
          "  --data X, --labels Y      training samples and their labels: .npy files, or IDX files\n"
          "                            as MNIST ships them (gzipped or not). Values convert to the\n"
          "                            entry's input dtype; u8 data becomes x / 255 for a float input\n"
          "                            (like torchvision's ToTensor). Samples must have the entry's\n"
          "                            sample shape; only its size-1 axes may be missing (IDX images\n"
          "                            [N, 28, 28] for [B, 1, 28, 28]): data is never transposed or reshaped\n"
          "  --epochs E                passes over the training set\n"
          "  --batch B                 the batch size: fixed when the model is compiled, or at most its --max\n"
          "                            for a run-time batch (then the last batch of an epoch is partial)\n",
          prog, step ? step->name : "none in this model");
  if (b > 0 && step->batch_max > 0) fprintf(f, "                            (this model: 1 to %lld)\n", b);
  else if (b > 0) fprintf(f, "                            (this model: %lld); another B is an error\n", b);
  fprintf(f,
          "  --weights W.safetensors   initial parameters (default: the model's own initialisation)\n"
          "  --no-shuffle              take the batches in file order\n"
          "  --seed S                  shuffling seed (default 0): the order of every epoch depends\n"
          "                            only on S and the epoch number\n"
          "  --normalize MEAN,STD      (x - MEAN) / STD after the scaling (transforms.Normalize)\n"
          "  --limit N                 use only the first N samples of each data set\n"
          "  --test-data X, --test-labels Y\n"
          "                            after each epoch, print the test accuracy and loss from the\n"
          "                            model's evaluation entry (the loop of its test() function),\n"
          "                            or the accuracy from the argmax of the forward entry's\n"
          "                            logits (with a ReduceLROnPlateau, also their mean cross-\n"
          "                            entropy as the test loss, which its step() gets)\n"
          "  --save OUT.safetensors    write the model's state_dict at the end (OUT.pt: a torch.save\n"
          "                            file); PyTorch's model.load_state_dict takes either\n"
          "  --save-training-state     --save also writes the training state (optimizer, scheduler,\n"
          "                            random stream), to continue from OUT with --weights\n"
          "  --log FILE.csv            write `epoch,step,loss`, one row per training step\n"
          "  --checkpoint DIR          write DIR/checkpoint.safetensors (parameters, optimizer and\n"
          "                            scheduler state, random stream, position in the data and\n"
          "                            shuffling seed) after every epoch, atomically: the previous\n"
          "                            checkpoint is kept until the new one is complete\n"
          "  --checkpoint-every N      also every N training steps\n"
          "  --resume DIR              continue from DIR's checkpoint (same data and options):\n"
          "                            the result is bit-identical to an uninterrupted run\n"
          "  --nan-policy stop|skip    a NaN or infinite loss stops training with its step (stop,\n"
          "                            the default; the last checkpoint is kept) or undoes that\n"
          "                            step's update and goes on (skip)\n"
          "  --profile TRACE.json      (programs built with ctc build --profile) time every kernel of\n"
          "                            the run: a Chrome trace, and a table per model line and op\n"
          "\n"
          "text data (a training entry taking token windows x and targets y, integer [B, T]):\n"
          "  --text FILE               a UTF-8 text, character level: the vocabulary (the sorted set of\n"
          "                            its characters) is written beside --save as OUT.vocab.txt\n"
          "  --tokens FILE.bin         token ids, little-endian uint16 (nanoGPT's train.bin)\n"
          "  --steps N                 training steps (instead of --epochs), each on B random windows\n"
          "                            (nanoGPT's get_batch, drawn from --seed and the step)\n"
          "  --block T                 check that the model's window is T\n"
          "  --val-fraction F          hold out the last F of the tokens for a validation loss\n"
          "  --eval-interval K         a line with the training and validation loss every K steps (100)\n"
          "  --eval-iters M            validation batches per evaluation (20), through the forward entry\n"
          "\n"
          "SIGINT and SIGTERM finish the current step, write a checkpoint (with --checkpoint)\n"
          "and exit with status 130 / 143.\n"
          "\n"
          "Every epoch takes floor(N / B) batches: the last partial batch is dropped, as with\n"
          "PyTorch's DataLoader(drop_last=True). Progress goes to stderr; one line per epoch\n"
          "to stdout: `epoch 1: loss 0.5123, 4321 samples/s, test accuracy 84.21%%`.\n"
          "exit status: 0 ok, 1 usage or data error (or a non-finite loss), 2 I/O error,\n"
          "130 / 143 stopped by SIGINT / SIGTERM\n");
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
                                          "--save", "--log", "--checkpoint", "--resume", "--profile",
                                          "--text", "--tokens"};
  const char **path_slots[] = {&a->weights, &a->data, &a->labels, &a->test_data, &a->test_labels,
                               &a->save, &a->log, &a->checkpoint, &a->resume, &a->profile, &a->text, &a->tokens};
  memset(a, 0, sizeof *a);
  a->xf.scale_u8 = 1;
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
    if (!strcmp(arg, "--save-training-state")) {
      a->training_state = 1;
      continue;
    }
    if (arg[0] != '-' || arg[1] == '\0') return ctc_fail(err, CTC_ERR_ARG, "unexpected argument '%s'", arg);
    static const char *const known[] = {"--weights", "--data", "--labels", "--test-data", "--test-labels", "--save",
                                        "--log", "--batch", "--epochs", "--limit", "--seed", "--normalize",
                                        "--checkpoint", "--checkpoint-every", "--resume", "--nan-policy", "--profile",
                                        "--text", "--tokens", "--block", "--steps", "--eval-interval", "--eval-iters",
                                        "--val-fraction", NULL};
    char name[32];
    const char *val;
    int orc = ctc_drv_option_value(argc, argv, &i, known, name, &val, err);
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
    } else if (!strcmp(name, "--block")) {
      rc = parse_count(name, val, &a->block, err);
    } else if (!strcmp(name, "--steps")) {
      rc = parse_count(name, val, &a->steps, err);
    } else if (!strcmp(name, "--eval-interval")) {
      rc = parse_count(name, val, &a->eval_interval, err);
    } else if (!strcmp(name, "--eval-iters")) {
      rc = parse_count(name, val, &a->eval_iters, err);
    } else if (!strcmp(name, "--val-fraction")) {
      char *end;
      a->val_fraction = strtod(val, &end);
      if (end == val || *end != '\0' || !(a->val_fraction >= 0 && a->val_fraction < 1))
        return ctc_fail(err, CTC_ERR_ARG, "--val-fraction needs a number in [0, 1), not '%s'", val);
    } else if (!strcmp(name, "--limit")) {
      rc = parse_count(name, val, &a->limit, err);
    } else if (!strcmp(name, "--seed")) {
      char *end;
      errno = 0;
      a->seed = strtoull(val, &end, 10);
      if (*val < '0' || *val > '9' || *end != '\0' || errno)
        return ctc_fail(err, CTC_ERR_ARG, "--seed needs a non-negative integer below 2^64, not '%s'", val);
      a->have_seed = 1;
    } else if (!strcmp(name, "--checkpoint-every")) {
      rc = parse_count(name, val, &a->ckpt_every, err);
    } else if (!strcmp(name, "--nan-policy")) {
      if (strcmp(val, "stop") && strcmp(val, "skip"))
        return ctc_fail(err, CTC_ERR_ARG, "--nan-policy is stop or skip, not '%s'", val);
      a->nan_skip = val[1] == 'k';
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
  if (a->text || a->tokens) {   /* text data: steps of random windows instead of epochs over samples */
    if (a->text && a->tokens) return ctc_fail(err, CTC_ERR_ARG, "--text and --tokens exclude each other");
    const char *opt = a->data ? "--data" : a->labels ? "--labels" : a->test_data ? "--test-data" : a->test_labels ?
                      "--test-labels" : a->epochs ? "--epochs" : a->limit ? "--limit" : a->no_shuffle ? "--no-shuffle" :
                      a->xf.std != 0 ? "--normalize" : NULL;
    if (opt)
      return ctc_fail(err, CTC_ERR_ARG, "%s does not go with %s (text data trains --steps N on random windows; "
                      "--val-fraction F holds out the end of the text)", opt, a->text ? "--text" : "--tokens");
    if (!a->steps) return ctc_fail(err, CTC_ERR_ARG, "train %s needs --steps N", a->text ? "--text" : "--tokens");
    if (!a->eval_interval) a->eval_interval = a->steps < 100 ? a->steps : 100;
    if (a->eval_interval > a->steps) a->eval_interval = a->steps;
    if (!a->eval_iters) a->eval_iters = 20;
    a->epochs = (a->steps + a->eval_interval - 1) / a->eval_interval;   /* an "epoch" is one evaluation interval */
    if (a->ckpt_every && !a->checkpoint)
      return ctc_fail(err, CTC_ERR_ARG, "--checkpoint-every needs --checkpoint DIR");
    if (a->resume && a->weights)
      return ctc_fail(err, CTC_ERR_ARG, "--weights and --resume exclude each other: the checkpoint holds the weights");
    return CTC_OK;
  }
  if (a->block || a->steps || a->eval_interval || a->eval_iters || a->val_fraction > 0)
    return ctc_fail(err, CTC_ERR_ARG, "--block, --steps, --eval-interval, --eval-iters and --val-fraction go with "
                    "text data (--text FILE or --tokens FILE.bin)");
  if (!a->data || !a->labels) return ctc_fail(err, CTC_ERR_ARG, "train needs --data X and --labels Y");
  if (!a->epochs) return ctc_fail(err, CTC_ERR_ARG, "train needs --epochs E");
  if (!a->test_data != !a->test_labels)
    return ctc_fail(err, CTC_ERR_ARG, "--test-data and --test-labels go together");
  if (a->have_seed && a->no_shuffle) return ctc_fail(err, CTC_ERR_ARG, "--seed has no effect with --no-shuffle");
  if (a->ckpt_every && !a->checkpoint) return ctc_fail(err, CTC_ERR_ARG, "--checkpoint-every needs --checkpoint DIR");
  if (a->resume && a->weights)
    return ctc_fail(err, CTC_ERR_ARG, "--weights and --resume exclude each other: the checkpoint holds the weights");
  return CTC_OK;
}

/* Everything `train` allocates, released by train_free. */
typedef struct Train {
  ctc_drv_run r;                          /* the arena and the model (r.in/r.out unused) */
  const ctc_entry *step, *fwd;    /* the training entry; the forward entry or NULL */
  int64_t batch;                  /* B of the training entry */
  int64_t nclasses;               /* C of the forward entry's [B, C] output; 0: unknown */
  ctc_tensor x, y, tx, ty;        /* the data sets; integer labels converted to i64 */
  void *in[3], **out;             /* buffers of the training entry (in[2]: the iteration, if it takes one) */
  union { int64_t i64; int32_t i32; float f32; double f64; } it; /* in[2]'s storage */
  void *fin, **fout;              /* buffers of the forward entry */
  const ctc_entry *ev;            /* the evaluation entry used for the test set, or NULL */
  void *ein[2], **eout;           /* its buffers */
  int64_t *order, *rows;          /* sample order of the epoch; 0..N-1 for the test set */
  FILE *log;                  /* logw.f: --log goes to a temporary file renamed at the end */
  ctc_wfile logw;
  long long steps;                /* per epoch: floor(N / B) */
  long long epoch, done;          /* position: `done` steps of epoch `epoch` (1-based) are done */
  long long counted;              /* steps of this epoch whose loss counts (finite) */
  double loss_sum;                /* their sum */
  int64_t state[8];               /* the TS_* values, for checkpoints */
  ctc_tensor *ckpt;               /* the tensors of a checkpoint: parameters, then the driver's */
  int nckpt;
  char *ckpt_path;                /* DIR/checkpoint.safetensors */
  long long ckpt_epoch, ckpt_done; /* position of the last checkpoint written or resumed (epoch 0: none) */
  unsigned char *finite;          /* per parameter: all finite when training started (only those
                                     are checked before a checkpoint: a buffer may hold -inf masks) */
  unsigned char *snap;            /* --nan-policy skip: the parameters before the current step */
  size_t snap_bytes;              /* the parameters' part of the arena: [0, snap_bytes) */
  int stop_signal;                /* SIGINT / SIGTERM seen after a step */
  int numeric_fault;              /* stopped by a non-finite loss or parameter */
  const char *prog;               /* for warnings */
  int64_t eval_used;        /* test samples the evaluation entry's sums cover */
  ctc_comm *comm;           /* distributed builds with more than one rank, else NULL */
  int rank, size;           /* 0 and 1 without one */
  int64_t *shard, nshard;   /* this rank's positions of the epoch's order (comm) */
  /* text data: the training and validation token streams, the vocabulary (--text) */
  int text;
  ctc_text tr, va;
  ctc_vocab vocab;
  int64_t T;                /* the window: the training entry's [B, T] */
} Train;

/* Positions in "ctc.train.state". */
enum { TS_VERSION, TS_EPOCH, TS_DONE, TS_SEED, TS_SHUFFLE, TS_SAMPLES, TS_BATCH, TS_COUNTED, TS_N };
#define CKPT_FILE "checkpoint.safetensors"

static void train_free(Train *t) {
  ctc_drv_run_free(&t->r);
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
  free(t->ein[0]);
  free(t->ein[1]);
  for (int j = 0; t->eout && j < t->ev->noutputs; j++) free(t->eout[j]);
  free(t->eout);
  free(t->order);
  free(t->shard);
  free(t->rows);
  free(t->ckpt);
  free(t->ckpt_path);
  free(t->snap);
  free(t->finite);
  ctc_text_free(&t->tr);
  ctc_text_free(&t->va);
  ctc_vocab_free(&t->vocab);
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
  if ((e->ninputs != 2 && e->ninputs != 3) || e->noutputs < 1)
    return ctc_fail(err, CTC_ERR_ARG, "training entry '%s' has %d inputs and %d outputs; train needs 2 inputs "
                    "(data, labels), or 3 with the iteration number, and the loss as the first output", e->name,
                    e->ninputs, e->noutputs);
  if (e->ninputs == 3) {
    const ctc_tensor *it = &e->inputs[2];
    if (ctc_tensor_numel(it) != 1 || it->dtype == CTC_BOOL || it->dtype == CTC_U8)
      return ctc_fail(err, CTC_ERR_SHAPE, "training entry '%s': its third input '%s' %s %s must be the iteration "
                      "number, a one-element integer or float tensor (as nanoGPT's iter_num)", e->name, it->name,
                      ctc_dtype_name(it->dtype), ctc_format_shape(sh, sizeof sh, it->ndim, it->shape));
  }
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

static int is_int_dtype(ctc_dtype d) { return d == CTC_I64 || d == CTC_I32; }
static int is_float_dtype(ctc_dtype d) { return d == CTC_F32 || d == CTC_F64; }

/* The evaluation entry for the test set (an evaluation loop's body, `def test(model,
 * device, test_loader)`): the first CTC_ENTRY_EVAL with (data [B, ...] shaped like the
 * training data, integer labels [B]) -> one-element sums, float ones a loss sum and
 * integer ones a count of correct predictions, that has the count (and the loss sum
 * when a ReduceLROnPlateau needs the test loss); NULL when there is none. */
static const ctc_entry *find_eval_entry(const ctc_model_desc *desc, const ctc_entry *step, int need_loss) {
  for (int i = 0; i < desc->nentries; i++) {
    const ctc_entry *e = &desc->entries[i];
    if (e->kind != CTC_ENTRY_EVAL || e->ninputs != 2 || e->noutputs < 1) continue;
    const ctc_tensor *x = &e->inputs[0], *y = &e->inputs[1];
    if (x->ndim < 1 || x->shape[0] < 1 || per_sample(x) != per_sample(&step->inputs[0]) || y->ndim != 1 ||
        y->shape[0] != x->shape[0] || !is_int_dtype(y->dtype))
      continue;
    int count = 0, loss = 0, ok = 1;
    for (int j = 0; j < e->noutputs; j++) {
      ok &= ctc_tensor_numel(&e->outputs[j]) == 1;
      count |= is_int_dtype(e->outputs[j].dtype);
      loss |= is_float_dtype(e->outputs[j].dtype);
    }
    if (ok && (count || loss) && (loss || !need_loss)) return e;   /* a VAE's test loop sums only a loss */
  }
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

/* Does a sample of shape have[0..nh) fit one of shape want[0..nw)? Exactly, or with
 * size-1 axes of `want` missing from `have` and the rest equal in order (IDX images
 * [N, 28, 28] for an input [B, 1, 28, 28], labels [N] for [B, 1]): the values are
 * then the same in the same order. A permutation ([32, 32, 3] for [3, 32, 32]), a
 * flattening ([3072]) or any other regrouping of the values is not. */
static int sample_shape_fits(int nh, const int64_t *have, int nw, const int64_t *want) {
  int i = 0;
  for (int j = 0; j < nw; j++) {
    if (i < nh && have[i] == want[j]) i++;
    else if (want[j] != 1) return 0;
  }
  return i == nh;
}

/* Loads a data set whose samples must have the shape of the samples of `in`
 * (its shape without the first, batch, axis; see sample_shape_fits), `what`
 * naming it for messages ("input 'x' of entry 'train_step'"); keeps at most
 * `limit` samples (0: all). */
static int load_set(const char *path, long long limit, const ctc_tensor *in, const char *what, ctc_tensor *t,
                    ctc_error *err) {
  int rc = ctc_dataset_load(path, t, err);
  if (rc) return rc;
  char gs[256], hs[256], ws[256], ns[256];
  if (t->ndim < 1)
    return ctc_fail(err, CTC_ERR_SHAPE, "%s: a data set needs a first dimension that counts the samples; it has "
                    "shape []", path);
  if (!sample_shape_fits(t->ndim - 1, t->shape + 1, in->ndim - 1, in->shape + 1)) {
    size_t len = (size_t)snprintf(ns, sizeof ns, "[N");   /* the shape the data should have */
    for (int d = 1; d < in->ndim && len < sizeof ns; d++)
      len += (size_t)snprintf(ns + len, sizeof ns - len, ", %lld", (long long)in->shape[d]);
    if (len < sizeof ns) snprintf(ns + len, sizeof ns - len, "]");
    return ctc_fail(err, CTC_ERR_SHAPE, "%s: data of shape %s has samples of shape %s, but %s takes samples of "
                    "shape %s: the data must be %s (size-1 axes may be missing, e.g. [N, 28, 28] for "
                    "[N, 1, 28, 28]); it is never transposed or reshaped", path,
                    ctc_format_shape(gs, sizeof gs, t->ndim, t->shape),
                    ctc_format_shape(hs, sizeof hs, t->ndim - 1, t->shape + 1), what,
                    ctc_format_shape(ws, sizeof ws, in->ndim - 1, in->shape + 1), ns);
  }
  if (limit > 0 && t->shape[0] > limit) t->shape[0] = limit;
  return CTC_OK;
}

/* Loads a data set for input `in` of entry e. */
static int load_input_set(const char *path, long long limit, const ctc_entry *e, const ctc_tensor *in, ctc_tensor *t,
                          ctc_error *err) {
  char what[384];
  snprintf(what, sizeof what, "input '%s' of entry '%s'", in->name, e->name);
  return load_set(path, limit, in, what, t, err);
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

/* ---- train: checkpoints ---- */

/* "DIR/checkpoint.safetensors", malloc'ed. */
static char *ckpt_file(const char *dir, ctc_error *err) {
  size_t n = strlen(dir) + sizeof "/" CKPT_FILE;
  char *p = malloc(n);
  if (!p) {
    ctc_fail(err, CTC_ERR_NOMEM, "out of memory");
    return NULL;
  }
  snprintf(p, n, "%s/%s", dir, CKPT_FILE);
  return p;
}

/* The tensor list of a checkpoint, made once: the parameters (data in the arena)
 * and the driver's position (data in t->state and t->loss_sum). Creates DIR when
 * it does not exist and checks that it can be written. */
static int ckpt_prepare(const ctc_model_desc *desc, const TrainArgs *a, Train *t, ctc_error *err) {
  struct stat sb;
  if (stat(a->checkpoint, &sb) != 0) {
    if (errno != ENOENT || mkdir(a->checkpoint, 0777) != 0)
      return ctc_fail(err, CTC_ERR_IO, "%s: cannot create the checkpoint folder: %s", a->checkpoint, strerror(errno));
  } else if (!S_ISDIR(sb.st_mode)) {
    return ctc_fail(err, CTC_ERR_IO, "%s: --checkpoint needs a folder; this is a file", a->checkpoint);
  }
  if (!(t->ckpt_path = ckpt_file(a->checkpoint, err))) return CTC_ERR_NOMEM;
  /* A run killed while writing leaves its temporary file (ctc_wopen's NAME.tmp.XXXXXX) behind. */
  DIR *dir = opendir(a->checkpoint);
  for (struct dirent *de; dir && (de = readdir(dir));) {
    const char *pre = CKPT_FILE ".tmp.";
    if (strncmp(de->d_name, pre, strlen(pre)) || strlen(de->d_name) != strlen(pre) + 6) continue;
    char stale[4096];
    if (snprintf(stale, sizeof stale, "%s/%s", a->checkpoint, de->d_name) < (int)sizeof stale) unlink(stale);
  }
  if (dir) closedir(dir);
  int rc = check_writable(t->ckpt_path, err);
  if (rc) return rc;
  t->nckpt = desc->nparams + 2;
  t->ckpt = calloc((size_t)t->nckpt, sizeof *t->ckpt);
  if (!t->ckpt) return ctc_fail(err, CTC_ERR_NOMEM, "out of memory");
  unsigned char *arena = desc->arena_of(t->r.model);
  for (int i = 0; i < desc->nparams; i++) {
    t->ckpt[i] = desc->params[i];
    t->ckpt[i].data = arena + desc->params[i].offset;
  }
  ctc_tensor *st = &t->ckpt[desc->nparams], *ls = st + 1;
  st->name = "ctc.train.state";
  st->dtype = CTC_I64;
  st->ndim = 1;
  st->shape[0] = TS_N;
  st->data = t->state;
  ls->name = "ctc.train.loss_sum";
  ls->dtype = CTC_F64;
  ls->ndim = 0;
  ls->data = &t->loss_sum;
  return CTC_OK;
}

/* The first non-finite value of a float parameter i with check[i] (all when check is
 * NULL): its index in *idx, its number in *which; NULL when there is none. */
static const ctc_tensor *nonfinite_param(const ctc_model_desc *desc, void *model, const unsigned char *check,
                                         int64_t *idx, int *which) {
  const unsigned char *arena = desc->arena_of(model);
  for (int i = 0; i < desc->nparams; i++) {
    const ctc_tensor *p = &desc->params[i];
    if ((p->dtype != CTC_F32 && p->dtype != CTC_F64) || (check && !check[i])) continue;
    int64_t n = ctc_tensor_numel(p);
    for (int64_t k = 0; k < n; k++) {
      double v;
      if (p->dtype == CTC_F32) {
        float f;
        memcpy(&f, arena + p->offset + 4 * (size_t)k, 4);
        v = f;
      } else {
        memcpy(&v, arena + p->offset + 8 * (size_t)k, 8);
      }
      if (!isfinite(v)) {
        *idx = k;
        *which = i;
        return p;
      }
    }
  }
  return NULL;
}

/* What the last checkpoint is, for messages ("the last checkpoint, ck/checkpoint.safetensors
 * (epoch 2, 3 steps done), is kept"). */
static const char *last_ckpt(char *buf, size_t n, const Train *t) {
  if (!t->ckpt_path) snprintf(buf, n, "no checkpoint is written without --checkpoint DIR");
  else if (!t->ckpt_epoch) snprintf(buf, n, "no checkpoint had been written yet");
  else
    snprintf(buf, n, "the last checkpoint, %s (epoch %lld, %lld step%s done), is kept", t->ckpt_path, t->ckpt_epoch,
             t->ckpt_done, t->ckpt_done == 1 ? "" : "s");
  return buf;
}

/* Writes the checkpoint at the current position (after checking that every float
 * parameter is finite: a checkpoint is never worse than the one it replaces). */
static int ckpt_write(const ctc_model_desc *desc, const TrainArgs *a, Train *t, ctc_error *err) {
  if (!t->ckpt) return CTC_OK;
  int64_t k;
  int which;
  const ctc_tensor *bad = nonfinite_param(desc, t->r.model, t->finite, &k, &which);
  char last[512];
  if (bad) {
    t->numeric_fault = 1;
    return ctc_fail(err, CTC_ERR_FORMAT, "parameter '%s' has a non-finite value at index %lld after epoch %lld, "
                    "step %lld: training stopped and no checkpoint written; %s", bad->name, (long long)k, t->epoch,
                    t->done, last_ckpt(last, sizeof last, t));
  }
  t->state[TS_VERSION] = 1;
  t->state[TS_EPOCH] = t->epoch;
  t->state[TS_DONE] = t->done;
  t->state[TS_SEED] = (int64_t)a->seed;
  t->state[TS_SHUFFLE] = !a->no_shuffle;
  t->state[TS_SAMPLES] = t->x.shape[0];
  t->state[TS_BATCH] = t->batch;
  t->state[TS_COUNTED] = t->counted;
  int rc = ctc_st_write(t->ckpt_path, t->nckpt, t->ckpt, err);
  if (rc) return rc;
  t->ckpt_epoch = t->epoch;
  t->ckpt_done = t->done;
  return CTC_OK;
}

/* --resume DIR: the parameters and the position from DIR's checkpoint. The seed
 * and shuffling come from the checkpoint (a different --seed or --no-shuffle is an
 * error), and the data set must have the same number of samples. */
static int ckpt_resume(const ctc_model_desc *desc, TrainArgs *a, Train *t, ctc_error *err) {
  char *path = ckpt_file(a->resume, err);
  if (!path) return CTC_ERR_NOMEM;
  ctc_safetensors st;
  int rc = ctc_st_read(&st, path, err);
  if (rc) {
    free(path);
    return rc;
  }
  const ctc_tensor *s = ctc_st_find(&st, "ctc.train.state"), *l = ctc_st_find(&st, "ctc.train.loss_sum");
  int64_t v[TS_N];
  double loss_sum = 0;
  if (!s || s->dtype != CTC_I64 || s->ndim != 1 || s->shape[0] != TS_N || !l || l->dtype != CTC_F64 || l->ndim != 0) {
    rc = ctc_fail(err, CTC_ERR_FORMAT, "%s: not a checkpoint of `train` (no tensors 'ctc.train.state' i64[%d] and "
                  "'ctc.train.loss_sum' f64[])", path, (int)TS_N);
  } else {
    memcpy(v, s->data, sizeof v);
    memcpy(&loss_sum, l->data, sizeof loss_sum);
    if (v[TS_VERSION] != 1 || v[TS_EPOCH] < 1 || v[TS_DONE] < 0 || v[TS_DONE] > t->steps || v[TS_COUNTED] < 0 ||
        v[TS_COUNTED] > v[TS_DONE] || (v[TS_SHUFFLE] != 0 && v[TS_SHUFFLE] != 1))
      rc = ctc_fail(err, CTC_ERR_FORMAT, "%s: the checkpoint's position (version %lld, epoch %lld, %lld steps done) "
                    "is not valid for %lld steps per epoch", path, (long long)v[TS_VERSION], (long long)v[TS_EPOCH],
                    (long long)v[TS_DONE], t->steps);
    else if (v[TS_SAMPLES] != t->x.shape[0] || v[TS_BATCH] != t->batch)
      rc = ctc_fail(err, CTC_ERR_ARG, "%s: the checkpoint was written training on %lld samples in batches of %lld; "
                    "%s has %lld samples (batches of %lld): resume with the same data and --limit", path,
                    (long long)v[TS_SAMPLES], (long long)v[TS_BATCH], a->data ? a->data : a->text ? a->text : a->tokens, (long long)t->x.shape[0],
                    (long long)t->batch);
    else if (a->no_shuffle && v[TS_SHUFFLE])
      rc = ctc_fail(err, CTC_ERR_ARG, "%s: the checkpoint's run shuffled (seed %llu); --no-shuffle would change the "
                    "order", path, (unsigned long long)v[TS_SEED]);
    else if (a->have_seed && !v[TS_SHUFFLE])
      rc = ctc_fail(err, CTC_ERR_ARG, "%s: the checkpoint's run did not shuffle (--no-shuffle); --seed would change "
                    "the order", path);
    else if (a->have_seed && (uint64_t)v[TS_SEED] != a->seed)
      rc = ctc_fail(err, CTC_ERR_ARG, "%s: the checkpoint's run used --seed %llu, not %llu", path,
                    (unsigned long long)v[TS_SEED], a->seed);
  }
  ctc_st_free(&st);
  if (rc == CTC_OK) rc = ctc_model_load(desc, t->r.model, path, err);
  free(path);
  if (rc) return rc;
  a->seed = (uint64_t)v[TS_SEED];
  a->no_shuffle = !v[TS_SHUFFLE];
  t->epoch = v[TS_EPOCH];
  t->done = v[TS_DONE];
  t->counted = v[TS_COUNTED];
  t->loss_sum = loss_sum;
  return CTC_OK;
}

/* The end of the parameters in the arena (they come first): what --nan-policy skip copies. */
static size_t params_end(const ctc_model_desc *desc) {
  size_t end = 0;
  for (int i = 0; i < desc->nparams; i++) {
    size_t b = ctc_tensor_bytes(&desc->params[i]);
    if (b != SIZE_MAX && desc->params[i].offset + b > end) end = desc->params[i].offset + b;
  }
  return end;
}

/* --text: the vocabulary beside weights file W (W.vocab.txt), which `sample` reads. */
static int write_vocab(const char *weights, const Train *t, ctc_error *err) {
  char path[4096];
  if (!ctc_vocab_path(weights, path, sizeof path)) return ctc_fail(err, CTC_ERR_ARG, "%s: path too long", weights);
  return ctc_vocab_write(path, &t->vocab, err);
}

/* Text data (--text / --tokens): the token streams, split at --val-fraction, checked
 * against the training entry's (x [B, T], y [B, T]) and the forward entry's logits. */
static int text_setup(const TrainArgs *a, Train *t, ctc_error *err) {
  const ctc_entry *e = t->step;
  const ctc_tensor *xin = &e->inputs[0], *yin = &e->inputs[1];
  const char *path = a->text ? a->text : a->tokens;
  char sh[128], sh2[128];
  if (xin->ndim != 2 || yin->ndim != 2 || xin->shape[1] != yin->shape[1] || !is_int_dtype(xin->dtype) ||
      !is_int_dtype(yin->dtype) || xin->dtype != yin->dtype)
    return ctc_fail(err, CTC_ERR_SHAPE, "text data needs a training entry taking token windows x and targets y, "
                    "both integer [B, T]; '%s' takes '%s' %s%s and '%s' %s%s", e->name, xin->name,
                    ctc_dtype_name(xin->dtype), ctc_format_shape(sh, sizeof sh, xin->ndim, xin->shape), yin->name,
                    ctc_dtype_name(yin->dtype), ctc_format_shape(sh2, sizeof sh2, yin->ndim, yin->shape));
  t->T = xin->shape[1];
  if (a->block && a->block != t->T)
    return ctc_fail(err, CTC_ERR_ARG, "--block %lld: the model was compiled for windows of %lld tokens (input '%s' of "
                    "'%s' is %s); compile it with example inputs of that length", a->block, (long long)t->T, xin->name,
                    e->name, ctc_format_shape(sh, sizeof sh, xin->ndim, xin->shape));
  ctc_text all = {0};
  int rc = a->text ? ctc_text_load_chars(path, &all, &t->vocab, err) : ctc_text_load_u16(path, &all, err);
  if (rc) return rc;
  int64_t ntr = (int64_t)((1.0 - a->val_fraction) * (double)all.n);   /* nanoGPT: n = int(0.9 * len(data)) */
  t->tr = all;
  t->tr.n = ntr;
  int64_t nva = all.n - ntr;
  if (ntr <= t->T)
    return ctc_fail(err, CTC_ERR_SHAPE, "%s: %lld training tokens%s are too few for one window of %lld and its "
                    "target", path, (long long)ntr, a->val_fraction > 0 ? " (before the validation part)" : "",
                    (long long)t->T);
  if (a->val_fraction > 0) {
    if (nva <= t->T)
      return ctc_fail(err, CTC_ERR_SHAPE, "%s: --val-fraction %g leaves %lld validation tokens, too few for one window "
                      "of %lld and its target", path, a->val_fraction, (long long)nva, (long long)t->T);
    if (!(t->va.tok = malloc((size_t)nva * sizeof *t->va.tok))) return ctc_fail(err, CTC_ERR_NOMEM, "out of memory");
    memcpy(t->va.tok, all.tok + ntr, (size_t)nva * sizeof *t->va.tok);
    t->va.n = nva;
  }
  t->x.ndim = 1;
  t->x.shape[0] = ntr;   /* for the checkpoint's position */
  /* the model's vocabulary: the last dimension of the forward entry's logits */
  const ctc_entry *f = t->fwd;
  int fwd_ok = f && f->ninputs == 1 && f->noutputs >= 1 && f->inputs[0].ndim == 2 && f->inputs[0].shape[1] == t->T &&
               is_int_dtype(f->inputs[0].dtype) && is_float_dtype(f->outputs[0].dtype) &&
               ctc_tensor_numel(&f->outputs[0]) % (f->inputs[0].shape[0] * t->T) == 0;
  int64_t V = fwd_ok ? ctc_tensor_numel(&f->outputs[0]) / (f->inputs[0].shape[0] * t->T) : 0;
  if (fwd_ok && f->outputs[0].shape[f->outputs[0].ndim - 1] != V) fwd_ok = 0, V = 0;
  int32_t top = 0;
  for (int64_t i = 0; i < all.n; i++)
    if (all.tok[i] > top) top = all.tok[i];
  if (V > 0 && top >= V) {
    if (a->text)
      return ctc_fail(err, CTC_ERR_SHAPE, "%s has %d distinct characters, but the model's vocabulary (the last "
                      "dimension of forward entry '%s''s logits) is %lld", path, (int)t->vocab.n, f->name, (long long)V);
    return ctc_fail(err, CTC_ERR_SHAPE, "%s holds token %d, but the model's vocabulary (the last dimension of forward "
                    "entry '%s''s logits) is %lld", path, (int)top, f->name, (long long)V);
  }
  if (a->val_fraction > 0) {
    if (!fwd_ok)
      return ctc_fail(err, CTC_ERR_ARG, "--val-fraction needs a forward entry mapping token windows [B, %lld] to "
                      "logits [B, %lld, V] for the validation loss%s%s", (long long)t->T, (long long)t->T,
                      f ? "; it has " : "", f ? f->name : "");
    size_t bytes = ctc_tensor_bytes(&f->inputs[0]);
    t->fin = bytes == SIZE_MAX ? NULL : ctc_drv_alloc_aligned(CTC_DRV_IO_ALIGN, bytes);
    if (!t->fin) return ctc_fail(err, CTC_ERR_NOMEM, "out of memory");
    if ((rc = ctc_drv_alloc_outputs(f, &t->fout, err))) return rc;
  }
  t->text = 1;
  return CTC_OK;
}

/* Validates the entries, loads the data and the weights, allocates the buffers. */
static int train_setup(const ctc_model_desc *desc, TrainArgs *a, Train *t, ctc_error *err) {
  int rc;
  if ((rc = find_train_entry(desc, &t->step, err))) return rc;
  const ctc_entry *e = t->step;
  const ctc_tensor *xin = &e->inputs[0], *yin = &e->inputs[1];
  t->batch = xin->shape[0];
  char sh[256];
  if (e->batch_max > 0) {   /* a run-time batch: --batch B up to the largest, the last batch partial */
    if (xin->batch_axis1 != 1 || yin->batch_axis1 != 1 || xin->shape[0] != e->batch_max ||
        yin->shape[0] != e->batch_max)
      return ctc_fail(err, CTC_ERR_ARG, "training entry '%s': its run-time batch is not the first axis of both "
                      "inputs ('%s' %s)", e->name, xin->name, ctc_format_shape(sh, sizeof sh, xin->ndim, xin->shape));
    if (a->batch > e->batch_max)
      return ctc_fail(err, CTC_ERR_ARG, "--batch %lld: the model was compiled for batches of at most %lld (--max)",
                      a->batch, (long long)e->batch_max);
    if (a->batch) t->batch = a->batch;
  } else if (a->batch && a->batch != t->batch)
    return ctc_fail(err, CTC_ERR_ARG, "--batch %lld: the model was compiled for batches of %lld (input '%s' of "
                    "'%s' is %s%s); for another batch size, compile it with example inputs of that batch",
                    a->batch, (long long)t->batch, xin->name, e->name, ctc_dtype_name(xin->dtype),
                    ctc_format_shape(sh, sizeof sh, xin->ndim, xin->shape));
  t->fwd = find_forward_entry(desc);
  int plateau = 0;
  for (int i = 0; i < desc->nentries; i++)
    plateau |= desc->entries[i].kind == CTC_ENTRY_SCHED && desc->entries[i].ninputs > 0;
  if (a->test_data) t->ev = find_eval_entry(desc, e, plateau);
  if (a->test_data && !t->ev && (rc = check_forward_entry(t, err))) return rc;
  if (a->text || a->tokens) {
    if ((rc = text_setup(a, t, err))) return rc;
    t->steps = a->eval_interval;
    goto model;
  }
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
    const ctc_entry *te = t->ev ? t->ev : t->fwd;
    if ((rc = load_input_set(a->test_data, a->limit, te, &te->inputs[0], &t->tx, err))) return rc;
    ctc_tensor one_label = {.name = "labels", .dtype = CTC_I64, .ndim = 1, .shape = {1}};   /* [] per sample */
    const ctc_tensor *ly = t->ev ? &t->ev->inputs[1] : &one_label;
    if ((rc = t->ev ? load_input_set(a->test_labels, a->limit, t->ev, ly, &t->ty, err)
                    : load_set(a->test_labels, a->limit, ly, "test accuracy (one label per sample)", &t->ty, err)))
      return rc;
    if (t->tx.shape[0] != t->ty.shape[0])
      return ctc_fail(err, CTC_ERR_SHAPE, "%s has %lld samples but %s has %lld labels", a->test_data,
                      (long long)t->tx.shape[0], a->test_labels, (long long)t->ty.shape[0]);
    if (t->tx.shape[0] < 1) return ctc_fail(err, CTC_ERR_SHAPE, "%s: the test set is empty", a->test_data);
    if ((rc = labels_to_i64(a->test_labels, &t->ty, 0, "", err))) return rc;
  }

  /* drop_last, unless the entry takes its batch at run time: then the last batch is partial */
  t->steps = e->batch_max > 0 ? (t->x.shape[0] + t->batch - 1) / t->batch : t->x.shape[0] / t->batch;
  if (t->comm) {   /* DistributedSampler: ceil(N / P) samples per rank, full batches */
    t->nshard = (t->x.shape[0] + t->size - 1) / t->size;
    t->steps = t->nshard / t->batch;
    if (t->steps < 1)
      return ctc_fail(err, CTC_ERR_SHAPE, "%s: %lld training samples give each of %d ranks %lld, fewer than one batch "
                      "of %lld", a->data, (long long)t->x.shape[0], t->size, (long long)t->nshard, (long long)t->batch);
    if (!(t->shard = malloc((size_t)t->nshard * sizeof *t->shard))) return ctc_fail(err, CTC_ERR_NOMEM, "out of memory");
  }
model:
  t->epoch = 1;
  if ((rc = ctc_drv_make_model(desc, &t->r, err))) return rc;
  if (a->weights && (rc = ctc_model_load(desc, t->r.model, a->weights, err))) return rc;
  if (a->resume) {
    if ((rc = ckpt_resume(desc, a, t, err))) return rc;
    t->ckpt_epoch = t->epoch;
    t->ckpt_done = t->done;
  } else {
    ctc_drv_seed_rng(desc, t->r.model, a->seed);
  }
  if (t->comm) t->comm->bcast(t->comm, desc->arena_of(t->r.model), params_end(desc));   /* rank 0's parameters */
  if (t->rank == 0 && a->checkpoint && (rc = ckpt_prepare(desc, a, t, err))) return rc;
  if (t->rank == 0 && t->ckpt_path && a->text && (rc = write_vocab(t->ckpt_path, t, err))) return rc;
  if (t->ckpt) {
    if (!(t->finite = malloc((size_t)desc->nparams + 1))) return ctc_fail(err, CTC_ERR_NOMEM, "out of memory");
    memset(t->finite, 1, (size_t)desc->nparams + 1);
    int64_t k;
    int i;
    while (nonfinite_param(desc, t->r.model, t->finite, &k, &i)) t->finite[i] = 0; /* excluded, search again */
  }
  if (a->nan_skip) {
    t->snap_bytes = params_end(desc);
    t->snap = malloc(t->snap_bytes ? t->snap_bytes : 1);
    if (!t->snap) return ctc_fail(err, CTC_ERR_NOMEM, "out of memory (--nan-policy skip keeps a copy of %zu bytes of "
                                  "parameters)", t->snap_bytes);
  }
  for (int i = 0; i < 2; i++) {
    size_t bytes = ctc_tensor_bytes(&e->inputs[i]);
    t->in[i] = bytes == SIZE_MAX ? NULL : ctc_drv_alloc_aligned(CTC_DRV_IO_ALIGN, bytes);
    if (!t->in[i]) return ctc_fail(err, CTC_ERR_NOMEM, "cannot allocate input '%s'", e->inputs[i].name);
  }
  if (e->ninputs == 3) t->in[2] = &t->it;
  if ((rc = ctc_drv_alloc_outputs(e, &t->out, err))) return rc;
  int64_t n = t->x.shape[0], tn = a->test_data ? t->tx.shape[0] : 0;
  t->order = t->text ? NULL : malloc((size_t)n * sizeof *t->order);
  if (!t->order && !t->text) return ctc_fail(err, CTC_ERR_NOMEM, "out of memory");
  if (a->test_data && t->ev) {
    for (int i = 0; i < 2; i++) {
      size_t bytes = ctc_tensor_bytes(&t->ev->inputs[i]);
      t->ein[i] = bytes == SIZE_MAX ? NULL : ctc_drv_alloc_aligned(CTC_DRV_IO_ALIGN, bytes);
      if (!t->ein[i]) return ctc_fail(err, CTC_ERR_NOMEM, "cannot allocate input '%s'", t->ev->inputs[i].name);
    }
    t->rows = malloc((size_t)tn * sizeof *t->rows);
    if (!t->rows) return ctc_fail(err, CTC_ERR_NOMEM, "out of memory");
    for (int64_t i = 0; i < tn; i++) t->rows[i] = i;
    if ((rc = ctc_drv_alloc_outputs(t->ev, &t->eout, err))) return rc;
  } else if (a->test_data) {
    size_t bytes = ctc_tensor_bytes(&t->fwd->inputs[0]);
    t->fin = bytes == SIZE_MAX ? NULL : ctc_drv_alloc_aligned(CTC_DRV_IO_ALIGN, bytes);
    t->rows = malloc((size_t)tn * sizeof *t->rows);
    if (!t->fin || !t->rows) return ctc_fail(err, CTC_ERR_NOMEM, "out of memory");
    for (int64_t i = 0; i < tn; i++) t->rows[i] = i;
    if ((rc = ctc_drv_alloc_outputs(t->fwd, &t->fout, err))) return rc;
  }
  if (t->rank == 0 && a->save && (rc = check_writable(a->save, err))) return rc;
  if (t->rank == 0 && a->log) {
    if ((rc = ctc_wopen(&t->logw, a->log, err))) return rc;
    t->log = t->logw.f;
    fprintf(t->log, "epoch,step,loss\n");
  }
  return CTC_OK;
}

/* ---- train: shuffling (examples/train_torch.py has the same code) ---- */


/* The sample order of epoch `epoch` (1-based): 0..n-1, Fisher-Yates shuffled from a
 * state that depends only on the seed and the epoch. */
static void epoch_order(int64_t *order, int64_t n, int shuffle, uint64_t seed, long long epoch) {
  for (int64_t i = 0; i < n; i++) order[i] = i;
  if (!shuffle) return;
  uint64_t s = seed ^ ((uint64_t)epoch * 0xD1B54A32D192ED03ULL);
  for (int64_t i = n - 1; i > 0; i--) {
    int64_t j = (int64_t)ctc_drv_rand_below(&s, (uint64_t)i + 1), tmp = order[i];
    order[i] = order[j];
    order[j] = tmp;
  }
}

/* ---- train: progress and evaluation ---- */

typedef struct Progress {
  int tty;                      /* stderr is a terminal: one line, rewritten with \r */
  long long epochs, steps;      /* steps per epoch */
  long long first;              /* steps done (all epochs) when this process started (--resume) */
  double train_ms;              /* time in training steps so far, all epochs, in this process */
  double last_ms;               /* when the tty line was last written */
  long long text_T, text_steps; /* text data: tokens per sample, and --steps */
} Progress;

static const char *fmt_duration(char *buf, size_t n, double sec) {
  if (!(sec >= 0) || sec > 1e8) return snprintf(buf, n, "?"), buf;
  long long s = (long long)(sec + 0.5);
  if (s >= 3600) snprintf(buf, n, "%lld:%02lld:%02lld", s / 3600, s / 60 % 60, s % 60);
  else snprintf(buf, n, "%lld:%02lld", s / 60, s % 60);
  return buf;
}

/* After step `step` (1-based) of epoch `epoch`; epoch_ms: time in this epoch's steps, of which
 * this process ran `ran`. */
static void progress(Progress *p, long long epoch, long long step, long long ran, double mean_loss, int64_t batch,
                     double epoch_ms) {
  double now = ctc_drv_now_ms();
  if (p->tty) {
    if (step < p->steps && now - p->last_ms < 100) return;
  } else if (step == p->steps || (step * 10) / p->steps == ((step - 1) * 10) / p->steps) {
    return; /* not a tty: about every 10% of an epoch */
  }
  p->last_ms = now;
  long long done = (epoch - 1) * p->steps + step, left = (p->text_T ? p->text_steps : p->epochs * p->steps) - done;
  double rate = epoch_ms > 0 ? (double)ran * (double)batch * 1e3 / epoch_ms : 0;
  char eta[32];
  fmt_duration(eta, sizeof eta, done > p->first ? p->train_ms / (double)(done - p->first) * (double)left / 1e3 : -1);
  if (p->text_T)
    fprintf(stderr, "%sstep %lld/%lld  loss %.4f  %.0f tokens/s  ETA %s%s", p->tty ? "\r\033[K" : "", done,
            p->text_steps, mean_loss, rate * (double)p->text_T, eta, p->tty ? "" : "\n");
  else
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

/* Test accuracy (0..1) and mean loss with the evaluation entry: its sums over the
 * test set in batches of its B, the last one padded with zero samples labelled
 * -100 (PyTorch's ignore_index: nll_loss and cross_entropy leave them out, and no
 * prediction equals them), divided by the number of samples. */
static int evaluate_sums(Train *t, const TrainArgs *a, double *acc, double *loss, ctc_error *err) {
  const ctc_entry *e = t->ev;
  const ctc_tensor *xin = &e->inputs[0], *yin = &e->inputs[1];
  int64_t fb = xin->shape[0], n = t->tx.shape[0];
  double correct = 0, lsum = 0;
  /* Padded samples add to a loss that does not ignore label -100 (a VAE's sums
   * only a loss): such an entry runs the full batches only. */
  int count = 0, dyn = e->batch_max > 0 && xin->batch_axis1 == 1 && yin->batch_axis1 == 1 && fb == e->batch_max;
  for (int j = 0; j < e->noutputs; j++) count |= is_int_dtype(e->outputs[j].dtype);
  if (!count && !dyn && n >= fb) n = n / fb * fb;   /* a run-time batch: the last one partial, no padding */
  t->eval_used = n;
  size_t sample_bytes = (size_t)per_sample(xin) * ctc_dtype_size(xin->dtype);
  for (int64_t start = 0; start < n; start += fb) {
    int64_t m = n - start < fb ? n - start : fb;
    int rc = ctc_dataset_gather(&t->tx, t->rows + start, m, xin->dtype, &a->xf, t->ein[0], err);
    if (!rc) rc = ctc_dataset_gather(&t->ty, t->rows + start, m, yin->dtype, NULL, t->ein[1], err);
    if (rc) {
      ctc_error_prefix(err, a->test_data);
      return rc;
    }
    memset((unsigned char *)t->ein[0] + (size_t)m * sample_bytes, 0, (size_t)(fb - m) * sample_bytes);
    for (int64_t i = m; i < fb; i++) {
      if (yin->dtype == CTC_I64) ((int64_t *)t->ein[1])[i] = -100;
      else ((int32_t *)t->ein[1])[i] = -100;
    }
    rc = ctc_entry_call(e, t->r.model, dyn ? m : fb, (const void *const *)t->ein, (void *const *)t->eout);
    if (rc) return ctc_fail(err, rc, "entry '%s' failed on the test set: %s (status %d)", e->name, ctc_strerror(rc), rc);
    for (int j = 0; j < e->noutputs; j++) {
      const void *o = t->eout[j];
      switch (e->outputs[j].dtype) {
      case CTC_F32: lsum += *(const float *)o; break;
      case CTC_F64: lsum += *(const double *)o; break;
      case CTC_I64: correct += (double)*(const int64_t *)o; break;
      case CTC_I32: correct += *(const int32_t *)o; break;
      default: break;
      }
    }
  }
  *acc = correct / (double)n;
  *loss = lsum / (double)n;
  return CTC_OK;
}

/* Test accuracy (0..1) and mean cross-entropy with the forward entry, in batches padded with zeros. */
static int evaluate(Train *t, const TrainArgs *a, double *acc, double *loss, ctc_error *err) {
  if (t->ev) return evaluate_sums(t, a, acc, loss, err);
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
    /* a run-time batch (its first axis): the last batch runs partial */
    int dyn = f->batch_max > 0 && xin->batch_axis1 == 1 && fb == f->batch_max;
    rc = ctc_entry_call(f, t->r.model, dyn ? m : fb, (const void *const *)&t->fin, (void *const *)t->fout);
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

/* SIGINT / SIGTERM during training: the handler can only record the signal (the
 * one static variable of the runtime; generated code and every other function
 * keep none). SA_RESETHAND: a second signal acts as if no handler were set. */
static volatile sig_atomic_t stop_signal;

static void on_stop_signal(int sig) { stop_signal = sig; }

/* Installs the handler for SIGINT and SIGTERM (old[0], old[1] keep the previous ones). */
static void catch_stop_signals(struct sigaction old[2]) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESETHAND;
  stop_signal = 0;
  sigaction(SIGINT, &sa, &old[0]);
  sigaction(SIGTERM, &sa, &old[1]);
}

static void restore_stop_signals(const struct sigaction old[2]) {
  sigaction(SIGINT, &old[0], NULL);
  sigaction(SIGTERM, &old[1], NULL);
}

/* A non-finite loss at the current position: stop (an error), or undo the step's
 * update from the copy taken before it (--nan-policy skip). */
static int bad_loss(const ctc_model_desc *desc, const TrainArgs *a, Train *t, double loss, ctc_error *err) {
  long long global = (t->epoch - 1) * t->steps + t->done;
  if (a->nan_skip) {
    memcpy(desc->arena_of(t->r.model), t->snap, t->snap_bytes);
    fprintf(stderr, "%s%s: warning: loss is %s at epoch %lld, step %lld (step %lld of the run): update skipped\n",
            isatty(fileno(stderr)) ? "\r\033[K" : "", t->prog, isnan(loss) ? "nan" : loss > 0 ? "inf" : "-inf",
            t->epoch, t->done, global);
    return CTC_OK;
  }
  char last[512];
  t->numeric_fault = 1;
  return ctc_fail(err, CTC_ERR_FORMAT, "loss is %s at epoch %lld, step %lld (step %lld of the run): training stopped "
                  "(--nan-policy skip would undo such steps and go on); %s", isnan(loss) ? "nan" : loss > 0 ? "inf" : "-inf",
                  t->epoch, t->done, global, last_ckpt(last, sizeof last, t));
}

/* The iteration number of a training entry that takes one (its third input): the
 * number of steps taken before this one over all epochs, from 0 (a resumed run
 * goes on counting), in the input's dtype. */
static void set_iteration(Train *t, long long it) {
  switch (t->step->inputs[2].dtype) {
  case CTC_I64: t->it.i64 = it; break;
  case CTC_I32: t->it.i32 = (int32_t)it; break;
  case CTC_F32: t->it.f32 = (float)it; break;
  default: t->it.f64 = (double)it; break;
  }
}

/* The rest of the current epoch's training steps (from t->done + 1); *ms: time spent, *ran: steps run. */
static int train_epoch(const ctc_model_desc *desc, Train *t, const TrainArgs *a, Progress *p, double *ms,
                       long long *ran, ctc_error *err) {
  const ctc_entry *e = t->step;
  const ctc_data_xform *xf = &a->xf;
  double t0 = ctc_drv_now_ms();
  *ran = 0;
  long long steps = t->steps;
  if (t->text) {   /* the last evaluation interval may be shorter */
    long long left = a->steps - (t->epoch - 1) * t->steps;
    if (left < steps) steps = left;
  } else {
    epoch_order(t->order, t->x.shape[0], !a->no_shuffle, a->seed, t->epoch);
  }
  for (int64_t j = 0; t->comm && j < t->nshard; j++)   /* rank r: positions r, r + P, ... of the padded order */
    t->shard[j] = t->order[((int64_t)t->rank + j * t->size) % t->x.shape[0]];
  while (t->done < steps) {
    long long s = t->done + 1;
    int64_t m = t->batch;
    int rc;
    if (t->text) {   /* nanoGPT's get_batch: random windows, from the seed, the step and the rank */
      long long g = (t->epoch - 1) * t->steps + (s - 1);
      ctc_text_windows(&t->tr, t->T, CTC_TEXT_TRAIN_STATE(a->seed, g) ^ (uint64_t)t->rank * 0x9E3779B97F4A7C15ULL,
                       m, e->inputs[0].dtype, t->in[0], t->in[1]);
    } else {
    const int64_t *rows = (t->comm ? t->shard : t->order) + (s - 1) * t->batch;
    int64_t avail = (t->comm ? t->nshard : t->x.shape[0]) - (s - 1) * t->batch;
    m = avail < t->batch ? avail : t->batch;   /* a partial last batch: run-time batch entries only */
    rc = ctc_dataset_gather(&t->x, rows, m, e->inputs[0].dtype, xf, t->in[0], err);
    if (rc) {
      ctc_error_prefix(err, a->data);
      return rc;
    }
    if ((rc = ctc_dataset_gather(&t->y, rows, m, e->inputs[1].dtype, NULL, t->in[1], err))) {
      ctc_error_prefix(err, a->labels);
      return rc;
    }
    }
    if (e->ninputs == 3) set_iteration(t, (t->epoch - 1) * t->steps + (s - 1));
    if (t->snap) memcpy(t->snap, desc->arena_of(t->r.model), t->snap_bytes);   /* up to date (CUDA: from the device) */
    double s0 = ctc_drv_now_ms();
    rc = ctc_entry_call(e, t->r.model, m, (const void *const *)t->in, (void *const *)t->out);
    p->train_ms += ctc_drv_now_ms() - s0;
    if (rc) {
      char when[96];
      snprintf(when, sizeof when, " at epoch %lld, step %lld", t->epoch, s);
      return ctc_drv_entry_failed(desc, t->r.model, e, rc, when, err);
    }
    double loss;
    if (e->outputs[0].dtype == CTC_F32) {
      float l;
      memcpy(&l, t->out[0], sizeof l);
      loss = l;
    } else {
      memcpy(&loss, t->out[0], sizeof loss);
    }
    if (t->comm) {   /* the global loss, and a stop signal seen by any rank */
      double v[2] = {loss, stop_signal ? 1 : 0};
      t->comm->sum_f64(t->comm, v, 2);
      loss = v[0] / t->size;
      if (v[1] > 0 && !stop_signal) stop_signal = SIGTERM;
    }
    t->done = s;
    ++*ran;
    if (t->log && fprintf(t->log, "%lld,%lld,%.9g\n", t->epoch, s, loss) < 0)
      return ctc_fail(err, CTC_ERR_IO, "%s: write failed: %s", a->log, strerror(errno));
    if (!isfinite(loss)) {
      if ((rc = bad_loss(desc, a, t, loss, err))) return rc;
    } else {
      t->loss_sum += loss;
      t->counted++;
    }
    if (t->rank == 0)
      progress(p, t->epoch, s, *ran, t->counted ? t->loss_sum / (double)t->counted : NAN, t->batch * t->size,
               ctc_drv_now_ms() - t0);
    long long global = (t->epoch - 1) * t->steps + s;
    if (a->ckpt_every && global % a->ckpt_every == 0 && (rc = ckpt_write(desc, a, t, err))) return rc;
    if (stop_signal) break;
  }
  *ms = ctc_drv_now_ms() - t0;
  return CTC_OK;
}

/* Text data: the mean cross-entropy of the forward entry's logits over --eval-iters
 * batches of validation windows (the same windows at every evaluation). */
static int text_val_loss(const ctc_model_desc *desc, Train *t, const TrainArgs *a, double *loss, ctc_error *err) {
  const ctc_entry *f = t->fwd;
  int64_t fb = f->inputs[0].shape[0], T = t->T;
  const ctc_tensor *o = &f->outputs[0];
  int64_t V = ctc_tensor_numel(o) / (fb * T);
  size_t ybytes = (size_t)(fb * T) * ctc_dtype_size(f->inputs[0].dtype);
  void *yb = malloc(ybytes);
  if (!yb) return ctc_fail(err, CTC_ERR_NOMEM, "out of memory");
  double sum = 0;
  for (long long k = 0; k < a->eval_iters; k++) {
    ctc_text_windows(&t->va, T, CTC_TEXT_VAL_STATE(a->seed, k), fb, f->inputs[0].dtype, t->fin, yb);
    const void *in[1] = {t->fin};
    int rc = ctc_entry_call(f, t->r.model, fb, in, (void *const *)t->fout);
    if (rc) {
      free(yb);
      return ctc_drv_entry_failed(desc, t->r.model, f, rc, " (validation loss)", err);
    }
    for (int64_t r = 0; r < fb * T; r++) {
      int64_t label = f->inputs[0].dtype == CTC_I64 ? ((int64_t *)yb)[r] : ((int32_t *)yb)[r];
      sum += cross_entropy_row((const unsigned char *)t->fout[0] + (size_t)(r * V) * ctc_dtype_size(o->dtype),
                               o->dtype, V, label);
    }
  }
  free(yb);
  *loss = sum / (double)(a->eval_iters * fb * T);
  return CTC_OK;
}

/* The end of an epoch: test accuracy, the epoch line, the scheduler entries. */
static int end_epoch(const ctc_model_desc *desc, Train *t, const TrainArgs *a, const Progress *p, double ms, long long ran,
                     ctc_error *err) {
  double acc = 0, test_loss = 0;
  int rc, plateau = 0;
  if (t->text) {   /* one evaluation interval: `step N: train loss X, val loss Y, Z tokens/s` */
    if (p->tty && t->rank == 0) fprintf(stderr, "\r\033[K");
    long long g = (t->epoch - 1) * t->steps + t->done;
    double val = 0;
    if (t->va.n && (rc = text_val_loss(desc, t, a, &val, err))) return rc;
    printf("step %lld: train loss %.4f", g, t->counted ? t->loss_sum / (double)t->counted : NAN);
    if (t->va.n) printf(", val loss %.4f", val);
    printf(", %.0f tokens/s", ms > 0 ? (double)(ran * t->batch * t->size * t->T) * 1e3 / ms : 0);
    if (t->counted < t->done) printf(" (%lld step%s skipped)", t->done - t->counted, t->done - t->counted == 1 ? "" : "s");
    printf("\n");
    fflush(stdout);
    return CTC_OK;
  }
  for (int i = 0; i < desc->nentries; i++)
    plateau |= desc->entries[i].kind == CTC_ENTRY_SCHED && desc->entries[i].ninputs > 0;
  if (p->tty && t->rank == 0) fprintf(stderr, "\r\033[K");
  if (a->test_data && (rc = evaluate(t, a, &acc, &test_loss, err))) return rc;
  printf("epoch %lld: loss %.4f, %.0f samples/s", t->epoch, t->counted ? t->loss_sum / (double)t->counted : NAN,
         ms > 0 ? (double)(ran * t->batch * t->size) * 1e3 / ms : 0);
  int eval_loss = 0, eval_count = 0;
  for (int j = 0; t->ev && j < t->ev->noutputs; j++) {
    eval_loss |= is_float_dtype(t->ev->outputs[j].dtype);
    eval_count |= is_int_dtype(t->ev->outputs[j].dtype);
  }
  if (a->test_data && (!t->ev || eval_count)) printf(", test accuracy %.2f%%", 100 * acc);
  if (plateau || eval_loss) printf(", test loss %.6f", test_loss);
  if (a->test_data && t->ev && t->eval_used < t->tx.shape[0])
    printf(" (test samples %lld of %lld: the evaluation's B is %lld)", (long long)t->eval_used,
           (long long)t->tx.shape[0], (long long)t->ev->inputs[0].shape[0]);
  if (t->counted < t->steps) printf(" (%lld step%s skipped)", t->steps - t->counted, t->steps - t->counted == 1 ? "" : "s");
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
      return ctc_fail(err, rc, "entry '%s' failed after epoch %lld: %s", e->name, t->epoch, ctc_strerror(rc));
  }
  return CTC_OK;
}

/* Commits the --log file (when one is open). */
static int commit_log(Train *t, ctc_error *err) {
  if (!t->log) return CTC_OK;
  int ok = !ferror(t->log);
  t->log = NULL;
  return ctc_wcommit(&t->logw, ok, err);
}

static int train_loop(const ctc_model_desc *desc, const TrainArgs *a, Train *t, ctc_error *err) {
  Progress p = {0};
  p.tty = isatty(fileno(stderr));
  p.epochs = a->epochs;
  p.steps = t->steps;
  p.first = (t->epoch - 1) * t->steps + t->done;
  if (t->text) p.text_T = t->T, p.text_steps = a->steps;
  int rc = CTC_OK;
  for (int i = 0; i < desc->nentries; i++) {
    const ctc_entry *e = &desc->entries[i];
    if (e->kind == CTC_ENTRY_SCHED && e->ninputs > 0 && !a->test_data)
      return ctc_fail(err, CTC_ERR_ARG, "'%s' (ReduceLROnPlateau.step(metrics)) needs the evaluation loss: pass "
                      "--test-data and --test-labels", e->name);
  }
  while (t->epoch <= a->epochs) {
    double ms = 0;
    long long ran = 0;
    if ((rc = train_epoch(desc, t, a, &p, &ms, &ran, err))) return rc;
    if (stop_signal) return CTC_OK;
    if ((rc = end_epoch(desc, t, a, &p, ms, ran, err))) return rc;
    t->epoch++;
    t->done = t->counted = 0;
    t->loss_sum = 0;
    if ((rc = ckpt_write(desc, a, t, err))) return rc;
    if (stop_signal) return CTC_OK;
  }
  return CTC_OK;
}

static int do_train(const char *prog, const ctc_model_desc *desc, TrainArgs *a, Train *t, ctc_error *err) {
  t->prog = prog;
  int rc = train_setup(desc, a, t, err);
  if (rc) return rc;
  if (a->resume && a->checkpoint && strcmp(a->resume, a->checkpoint)) t->ckpt_epoch = t->ckpt_done = 0;
  ctc_profile *prof = NULL;
  if (a->profile && (rc = ctc_drv_profile_start(desc, t->r.model, a->profile, &prof, err))) return rc;
  struct sigaction old[2];
  catch_stop_signals(old);
  rc = train_loop(desc, a, t, err);
  int sig = stop_signal;
  restore_stop_signals(old);
  if (prof) {
    int frc = ctc_drv_profile_finish(desc, t->r.model, prof, a->profile, rc ? NULL : err);
    if (!rc) rc = frc;
  }
  if (rc) {
    /* the steps run so far, the failing one included, stay in the log */
    if (t->numeric_fault) commit_log(t, NULL);
    return rc;
  }
  if (sig) {
    if ((rc = ckpt_write(desc, a, t, err))) return rc;
    if ((rc = commit_log(t, err))) return rc;
    if (t->ckpt_path)
      fprintf(stderr, "%s: %s at epoch %lld, step %lld: checkpoint written to %s (continue with --resume %s)\n", prog,
              sig == SIGINT ? "interrupted" : "terminated", t->epoch, t->done, t->ckpt_path, a->checkpoint);
    else
      fprintf(stderr, "%s: %s at epoch %lld, step %lld (no --checkpoint DIR: nothing saved)\n", prog,
              sig == SIGINT ? "interrupted" : "terminated", t->epoch, t->done);
    t->stop_signal = sig;
    return CTC_OK;
  }
  if ((rc = commit_log(t, err))) return rc;
  if (a->save && t->rank == 0) {
    int what = a->training_state ? CTC_SAVE_TRAINING_STATE : CTC_SAVE_STATE_DICT;
    if ((rc = ctc_model_save_opts(desc, t->r.model, a->save, what, err))) return rc;
    if (a->text) return write_vocab(a->save, t, err);
  }
  return CTC_OK;
}

int ctc_drv_train(const char *prog, const ctc_model_desc *desc, int argc, char **argv) {
  ctc_error err = {0, ""};
  TrainArgs a;
  Train t;
  memset(&t, 0, sizeof t);
  int rc = parse_train_args(argc, argv, &a, &err);
#if defined(__GNUC__) || defined(__clang__)
  if (ctc_comm_world) {   /* a distributed build */
    ctc_comm *c = ctc_comm_world();
    if (c->size > 1) t.comm = c, t.rank = c->rank, t.size = c->size;
  }
#endif
  if (!t.comm) t.size = 1;
  if (t.rank != 0) {   /* rank 0 prints the epoch lines */
    FILE *nul = freopen("/dev/null", "w", stdout);
    (void)nul;
  }
  if (rc == CTC_OK && a.help) {
    const ctc_entry *step = NULL;
    find_train_entry(desc, &step, NULL);
    train_usage(stdout, prog, step);
    return 0;
  }
  if (rc == CTC_OK) rc = do_train(prog, desc, &a, &t, &err);
  int sig = t.stop_signal;
  ctc_comm *comm = t.comm;
  train_free(&t);
  if (rc == CTC_OK) return sig ? 128 + sig : 0;
  int status = ctc_drv_report(prog, &err);
  if (err.code == CTC_ERR_ARG) fprintf(stderr, "%s: try '%s train --help'\n", prog, prog);
  if (comm) comm->abort(comm, status);   /* the other ranks would wait for this one in their next collective */
  return status;
}

