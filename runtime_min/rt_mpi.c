/* rt_mpi.c - the MPI communicator of distributed builds (ctc_comm, ctc_rt.h).
 *
 * Compiled only into programs built with `ctc build --distributed mpi` (with
 * mpicc and -DCTC_MPI; scripts/configure.py leaves it out of libctc_rt.a), so
 * programs built without it never link MPI; without CTC_MPI (a hand build of
 * `$RT/rt_*.c` with cc) it is empty.
 *
 * Gradient buckets: start() all-reduces (MPI_Iallreduce, sum) each gradient
 * of at least CTC_MPI_INPLACE_KB KiB (default 256) in place in the arena (the
 * memory plan keeps a gradient's bytes until its last reader, which comes after
 * wait()), and the smaller ones together, copied into one contiguous buffer
 * per bucket: a few collectives and no copy of the large tensors. wait()
 * completes them and leaves sum / size in the arena. CTC_MPI_BUCKET=copy packs
 * every gradient into the bucket's buffer (one collective per bucket, as DDP's
 * flat buckets), CTC_MPI_BUCKET=direct none (one collective per gradient);
 * bench/bench_mpi.py measures the three. A non-blocking collective moves
 * on only while some thread is inside MPI (Open MPI has no progress thread of
 * its own for them): a progress thread here tests the requests in flight every
 * CTC_MPI_POLL_US microseconds (default 50; it sleeps while none is), with
 * MPI_THREAD_MULTIPLE and one lock around every MPI call of this file;
 * CTC_MPI_PROGRESS=0 leaves it out (each start() still tests the requests in
 * flight). CTC_MPI_OVERLAP=0 defers every start to its
 * wait (the blocking all-reduce DDP would do after backward: the baseline of
 * bench/bench_mpi.py).
 *
 * Every wait, here and in the driver's collectives (bcast, sum_f64), polls
 * with MPI_Test and gives up after CTC_MPI_TIMEOUT seconds (default 300): it
 * prints which collective did not complete and calls MPI_Abort, so a rank
 * that dies or leaves early ends the job instead of hanging it.
 *
 * CTC_MPI_TRACE=PATH writes PATH.<rank>: one line per event, `<microseconds>
 * <event> <bucket> <names>`, events start (all-reduce started), done (found
 * complete by a test before its wait), wait (wait entered), end (wait
 * returned). CTC_MPI_STATS=1 prints, at exit on rank 0, the time spent blocked
 * in wait() and the number of buckets. */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L
#endif
#include "ctc_rt.h"

#ifndef CTC_MPI
typedef int ctc_rt_mpi_unused;   /* not a distributed build: nothing here */
#else

#include <mpi.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct Slot {
  int used;                 /* a bucket with this id was seen */
  int active;               /* started, not yet waited for */
  int done;                 /* found complete by a test */
  int nreq;
  MPI_Request *req;         /* one per gradient all-reduced in place, and one for buf */
  void *buf;                /* the bucket's small gradients, contiguous (NULL: none) */
  size_t cap;
} Slot;

typedef struct MpiComm {
  ctc_comm pub;
  int init;
  int overlap;
  size_t inplace_min;       /* gradients of at least this many bytes are all-reduced in place */
  const char *mode;         /* "mixed", "copy", "direct" */
  double timeout;
  FILE *trace;
  double t0;
  Slot *slots;
  int nslots;
  /* the progress thread (threaded = 1 while it runs); mu guards every MPI call and the slots */
  int threaded, stop, nactive;
  long poll_us;
  pthread_t thread;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  /* CTC_MPI_STATS */
  int stats;
  double wait_ms;           /* time blocked in wait() */
  double hook_ms;           /* time in start() and wait(): the all-reduce time not hidden */
  long long waits, starts;
} MpiComm;

/* The process's MPI state: MPI_COMM_WORLD is per process too. */
static MpiComm world;

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void lock(MpiComm *w) {
  if (w->threaded) pthread_mutex_lock(&w->mu);
}
static void unlock(MpiComm *w) {
  if (w->threaded) pthread_mutex_unlock(&w->mu);
}

/* Marks the buckets whose all-reduce completed (under the lock). */
static void test_active(MpiComm *w) {
  for (int i = 0; i < w->nslots; i++) {
    Slot *s = &w->slots[i];
    if (!s->active || s->done) continue;
    int flag = 0;
    MPI_Testall(s->nreq, s->req, &flag, MPI_STATUSES_IGNORE);
    if (flag) {
      s->done = 1;
      w->nactive--;
      if (w->trace) fprintf(w->trace, "%.0f done %d\n", (now_s() - w->t0) * 1e6, i);
    }
  }
}

static void *progress_main(void *arg) {
  MpiComm *w = arg;
  pthread_mutex_lock(&w->mu);
  while (!w->stop) {
    if (!w->nactive) {
      pthread_cond_wait(&w->cv, &w->mu);
      continue;
    }
    test_active(w);
    pthread_mutex_unlock(&w->mu);
    struct timespec ts = {0, w->poll_us * 1000};
    nanosleep(&ts, NULL);
    pthread_mutex_lock(&w->mu);
  }
  pthread_mutex_unlock(&w->mu);
  return NULL;
}

static void trace(MpiComm *w, const char *ev, const ctc_bucket *b) {
  if (!w->trace) return;
  fprintf(w->trace, "%.0f %s %d %s\n", (now_s() - w->t0) * 1e6, ev, b->id, b->names ? b->names : "");
}

/* The message is one write: stderr is unbuffered, and mpirun's report of the abort (or another
 * rank's) would otherwise land between its pieces. */
static void die(MpiComm *w, const char *fmt, const char *what, int id, int timed_out) {
  char msg[512], part[160], why[160] = "; ending all ranks";
  snprintf(part, sizeof part, fmt, what, id);
  if (timed_out)
    snprintf(why, sizeof why, " within %g s (CTC_MPI_TIMEOUT): another rank died, left early or runs a different "
             "program; ending all ranks", w->timeout);
  snprintf(msg, sizeof msg, "ctc: error: rank %d of %d: %s%s\n", w->pub.rank, w->pub.size, part, why);
  fputs(msg, stderr);
  fflush(stderr);
  if (w->trace) fflush(w->trace);
  MPI_Abort(MPI_COMM_WORLD, 1);
  exit(1);
}

/* Completes reqs[0..n), or ends the job after the timeout. */
static void finish(MpiComm *w, MPI_Request *reqs, int n, const char *what, int id) {
  double deadline = now_s() + w->timeout;
  for (long spins = 0;; spins++) {
    int flag = 0;
    lock(w);
    MPI_Testall(n, reqs, &flag, MPI_STATUSES_IGNORE);
    unlock(w);
    if (flag) return;
    if ((spins & 255) == 255) {
      if (now_s() > deadline) die(w, "%s %d did not complete", what, id, 1);
      sched_yield();   /* oversubscribed ranks (mpirun --oversubscribe) share cores */
    }
  }
}

static void mpi_finalize(void) {
  if (!world.init) return;
  if (world.threaded) {
    pthread_mutex_lock(&world.mu);
    world.stop = 1;
    pthread_cond_signal(&world.cv);
    pthread_mutex_unlock(&world.mu);
    pthread_join(world.thread, NULL);
    world.threaded = 0;
  }
  if (world.stats && world.pub.rank == 0)
    fprintf(stderr, "ctc mpi: %d ranks, %lld all-reduces, blocked %.3f ms in waits, %.3f ms in start and wait (%s, "
                    "overlap %s)\n", world.pub.size, world.waits, world.wait_ms, world.hook_ms,
            world.mode, world.overlap ? world.threaded ? "on, progress thread" : "on" : "off");
  if (world.trace) fclose(world.trace);
  for (int i = 0; i < world.nslots; i++) {
    free(world.slots[i].req);
    free(world.slots[i].buf);
  }
  free(world.slots);
  int fin = 0;
  MPI_Finalized(&fin);
  if (!fin) MPI_Finalize();
  world.init = 0;
}

static Slot *slot_of(MpiComm *w, const ctc_bucket *b) {
  if (b->id < 0) abort();
  if (b->id >= w->nslots) {
    int n = b->id + 8;
    Slot *s = realloc(w->slots, sizeof *s * (size_t)n);
    if (!s) {
      fprintf(stderr, "ctc: error: out of memory (gradient buckets)\n");
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
    memset(s + w->nslots, 0, sizeof *s * (size_t)(n - w->nslots));
    w->slots = s;
    w->nslots = n;
  }
  Slot *s = &w->slots[b->id];
  if (!s->used) {
    size_t es = b->dtype == CTC_F64 ? 8 : 4;
    s->nreq = 0;
    s->cap = 0;
    for (int i = 0; i < b->n; i++) {
      size_t bytes = (size_t)b->count[i] * es;
      if (bytes >= w->inplace_min) s->nreq++;
      else s->cap += bytes;
    }
    s->nreq += s->cap > 0;
    s->req = malloc(sizeof *s->req * (size_t)(s->nreq ? s->nreq : 1));
    s->buf = s->cap ? malloc(s->cap) : NULL;
    if (!s->req || (s->cap && !s->buf)) {
      fprintf(stderr, "ctc: error: out of memory (a gradient bucket of %zu bytes)\n", s->cap);
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
    s->used = 1;
  }
  return s;
}

/* MPI counts are int: a gradient of more than INT_MAX elements cannot be one call. */
static int count_of(MpiComm *w, int64_t n, const ctc_bucket *b) {
  if (n > 2147483647)
    die(w, "%s %d is over 2^31 elements: use a smaller --bucket-mb (a single gradient that large cannot be all-reduced)",
        "bucket", b->id, 0);
  return (int)n;
}

/* (under the lock) */
static void do_start(MpiComm *w, unsigned char *arena, const ctc_bucket *b) {
  Slot *s = slot_of(w, b);
  MPI_Datatype t = b->dtype == CTC_F64 ? MPI_DOUBLE : MPI_FLOAT;
  size_t es = b->dtype == CTC_F64 ? 8 : 4, at = 0;
  int r = 0;
  for (int i = 0; i < b->n; i++) {
    size_t bytes = (size_t)b->count[i] * es;
    if (bytes >= w->inplace_min) {
      MPI_Iallreduce(MPI_IN_PLACE, arena + b->offset[i], count_of(w, b->count[i], b), t, MPI_SUM, MPI_COMM_WORLD,
                     &s->req[r++]);
    } else {
      memcpy((unsigned char *)s->buf + at, arena + b->offset[i], bytes);
      at += bytes;
    }
  }
  if (s->cap)
    MPI_Iallreduce(MPI_IN_PLACE, s->buf, count_of(w, (int64_t)(s->cap / es), b), t, MPI_SUM, MPI_COMM_WORLD,
                   &s->req[r]);
  s->active = 1;
  s->done = 0;
  w->nactive++;
  w->starts++;
  trace(w, "start", b);
  if (w->threaded) pthread_cond_signal(&w->cv);
}

static void mpi_start(ctc_comm *c, unsigned char *arena, const ctc_bucket *b) {
  MpiComm *w = (MpiComm *)c;
  if (c->size == 1) return;   /* the mean over one rank */
  double t0 = now_s();
  lock(w);
  if (w->overlap) do_start(w, arena, b);
  test_active(w);   /* progress: test what is in flight (and record what completed behind backward) */
  unlock(w);
  w->hook_ms += (now_s() - t0) * 1e3;
}

static void mpi_wait(ctc_comm *c, unsigned char *arena, const ctc_bucket *b) {
  MpiComm *w = (MpiComm *)c;
  if (c->size == 1) return;
  double t0 = now_s();
  lock(w);
  if (!w->overlap) do_start(w, arena, b);
  Slot *s = slot_of(w, b);
  int active = s->active, done = s->done;
  if (active) trace(w, "wait", b);
  unlock(w);
  if (!active) die(w, "%s %d was waited for before it was started (a bug in ctc)", "bucket", b->id, 0);
  if (!done) finish(w, s->req, s->nreq, "the all-reduce of gradient bucket", b->id);
  lock(w);
  if (!s->done) w->nactive--;
  s->active = 0;
  unlock(w);
  double inv = 1.0 / c->size;
  size_t at = 0;
  for (int i = 0; i < b->n; i++) {
    size_t es = b->dtype == CTC_F64 ? 8 : 4, bytes = (size_t)b->count[i] * es;
    const unsigned char *from = bytes >= w->inplace_min ? arena + b->offset[i] : (unsigned char *)s->buf + at;
    if (bytes < w->inplace_min) at += bytes;
    if (b->dtype == CTC_F64) {
      double *g = (double *)(arena + b->offset[i]);
      const double *src = (const double *)from;
      for (int64_t k = 0; k < b->count[i]; k++) g[k] = src[k] * inv;
    } else {
      float *g = (float *)(arena + b->offset[i]);
      const float *src = (const float *)from;
      float f = (float)inv;
      for (int64_t k = 0; k < b->count[i]; k++) g[k] = src[k] * f;
    }
  }
  trace(w, "end", b);
  w->waits++;
  w->wait_ms += (now_s() - t0) * 1e3;
  w->hook_ms += (now_s() - t0) * 1e3;
}

static void mpi_bcast(ctc_comm *c, void *buf, size_t bytes) {
  MpiComm *w = (MpiComm *)c;
  if (c->size == 1) return;
  for (size_t at = 0; at < bytes;) {
    size_t n = bytes - at > ((size_t)1 << 30) ? (size_t)1 << 30 : bytes - at;
    MPI_Request r;
    lock(w);
    MPI_Ibcast((unsigned char *)buf + at, (int)n, MPI_BYTE, 0, MPI_COMM_WORLD, &r);
    unlock(w);
    finish(w, &r, 1, "the broadcast of the initial parameters", 0);
    at += n;
  }
}

static void mpi_sum_f64(ctc_comm *c, double *v, int n) {
  MpiComm *w = (MpiComm *)c;
  if (c->size == 1) return;
  MPI_Request r;
  lock(w);
  MPI_Iallreduce(MPI_IN_PLACE, v, n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD, &r);
  unlock(w);
  finish(w, &r, 1, "the all-reduce of the training loss", 0);
}

static void mpi_abort(ctc_comm *c, int status) {
  (void)c;
  fflush(stdout);
  fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, status ? status : 1);
  exit(status ? status : 1);
}

ctc_comm *ctc_comm_world(void) {
  MpiComm *w = &world;
  if (w->init) return &w->pub;
  int inited = 0, provided = 0;
  const char *e = getenv("CTC_MPI_PROGRESS");
  int want_thread = !(e && !strcmp(e, "0"));
  MPI_Initialized(&inited);
  if (!inited && MPI_Init_thread(NULL, NULL, want_thread ? MPI_THREAD_MULTIPLE : MPI_THREAD_FUNNELED, &provided) !=
                     MPI_SUCCESS) {
    fprintf(stderr, "ctc: error: MPI_Init failed\n");
    exit(1);
  }
  MPI_Comm_rank(MPI_COMM_WORLD, &w->pub.rank);
  MPI_Comm_size(MPI_COMM_WORLD, &w->pub.size);
  w->pub.start = mpi_start;
  w->pub.wait = mpi_wait;
  w->pub.bcast = mpi_bcast;
  w->pub.sum_f64 = mpi_sum_f64;
  w->pub.abort = mpi_abort;
  if (inited) MPI_Query_thread(&provided);
  e = getenv("CTC_MPI_OVERLAP");
  w->overlap = !(e && !strcmp(e, "0"));
  e = getenv("CTC_MPI_BUCKET");
  w->mode = e && !strcmp(e, "direct") ? "direct" : e && !strcmp(e, "copy") ? "copy" : "mixed";
  e = getenv("CTC_MPI_INPLACE_KB");
  double kb = e && atof(e) >= 0 ? atof(e) : 256;
  w->inplace_min = w->mode[0] == 'd' ? 0 : w->mode[0] == 'c' ? (size_t)-1 : (size_t)(kb * 1024);
  e = getenv("CTC_MPI_TIMEOUT");
  w->timeout = e && atof(e) > 0 ? atof(e) : 300;
  e = getenv("CTC_MPI_STATS");
  w->stats = e && *e && strcmp(e, "0");
  w->t0 = now_s();
  e = getenv("CTC_MPI_TRACE");
  if (e && *e) {
    char path[4096];
    snprintf(path, sizeof path, "%s.%d", e, w->pub.rank);
    w->trace = fopen(path, "w");
    if (!w->trace) fprintf(stderr, "ctc: warning: cannot write the trace '%s'\n", path);
  }
  e = getenv("CTC_MPI_POLL_US");
  w->poll_us = e && atol(e) > 0 && atol(e) < 1000000 ? atol(e) : 50;
  if (want_thread && w->overlap && w->pub.size > 1 && provided >= MPI_THREAD_MULTIPLE) {
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
    w->threaded = pthread_create(&w->thread, NULL, progress_main, w) == 0;
  }
  w->init = 1;
  atexit(mpi_finalize);
  return &w->pub;
}

#endif /* CTC_MPI */
