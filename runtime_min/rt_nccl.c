/* rt_nccl.c - the NCCL communicator (ctc_comm, ctc_rt.h) for distributed
 * builds of the CUDA target, where the arena lives in device memory.
 *
 * The same interface as rt_mpi.c (a program links one of the two: both define
 * ctc_comm_world), so the generated entries are the same: start(bucket) after
 * the kernel that makes the bucket's last gradient final, wait(bucket) before
 * the first kernel that reads one of them. Here:
 *   start: an event on the compute stream (the stream the entry's kernels run
 *          on, which the generated entry puts in ctc_comm.stream: m->stream;
 *          NULL is the legacy default stream, or with
 *          CTC_NCCL_COMPUTE_STREAM_PER_THREAD=1 the per-thread one) that the
 *          communication stream waits for, then one
 *          in-place ncclAllReduce(ncclAvg) per gradient in one ncclGroup on
 *          that stream, and an event after it: the host does not block;
 *   wait:  the compute stream waits for that event (on the device; the host
 *          goes on queueing the update kernels).
 * One rank per GPU: MPI starts the ranks (mpirun / srun) and carries rank 0's
 * ncclUniqueId; the GPU is the rank's index among the ranks of its node
 * (MPI_COMM_TYPE_SHARED) modulo the visible devices. The driver's collectives:
 * bcast with ncclBroadcast on device memory, with MPI on host memory (the
 * driver broadcasts the parameters' host copy, which the host-pointer entries
 * upload at every call), sum_f64 (host doubles) with MPI. Host-side waits
 * poll cudaStreamQuery and ncclCommGetAsyncError and give up after
 * CTC_MPI_TIMEOUT seconds (default 300): ncclCommAbort, then MPI_Abort, so a
 * dead rank does not hang the others. The buckets are never waited for on the
 * host (the entry's stream waits on the device; the host blocks later, in
 * cudaStreamSynchronize), so a watchdog thread polls every started bucket's
 * completion event and NCCL's asynchronous error, and ends all ranks the same
 * way when a bucket is not done within the timeout.
 *
 * Compiled only with -DCTC_NCCL (`ctc build --target cuda --distributed nccl`:
 * nvcc with MPI's include and link flags, -lnccl; or by hand: mpicc,
 * -I<cuda>/include, -lnccl -lcudart); empty otherwise, and never part of
 * libctc_rt.a. Built and linked here by tests/test_nccl.py; it runs where there
 * are GPUs. */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L
#endif
#include "ctc_rt.h"

#ifndef CTC_NCCL
typedef int ctc_rt_nccl_unused;   /* not an NCCL build: nothing here */
#else

#include <cuda_runtime.h>
#include <mpi.h>
#include <nccl.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct NcclComm {
  ctc_comm pub;
  int init;
  ncclComm_t nc;
  cudaStream_t stream;        /* communication */
  cudaStream_t compute;       /* where the entries' kernels run */
  cudaEvent_t *ready, *done;  /* per bucket id */
  double *started;            /* per bucket id: when start() queued it, 0 once the watchdog saw it done */
  int nev, device;
  double timeout;
  pthread_mutex_t mu;         /* the per-bucket arrays, between the hooks and the watchdog */
  pthread_t watchdog;
  int watching, stop;
} NcclComm;

/* The process's communicator (one GPU per process, as MPI_COMM_WORLD is per process). */
static NcclComm nworld;

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void fail(NcclComm *w, const char *what, const char *why) {
  fprintf(stderr, "ctc: error: rank %d of %d: %s: %s; ending all ranks\n", w->pub.rank, w->pub.size, what, why);
  fflush(stderr);
  if (w->nc) ncclCommAbort(w->nc);
  MPI_Abort(MPI_COMM_WORLD, 1);
  exit(1);
}

static void cuda_ok(NcclComm *w, cudaError_t e, const char *what) {
  if (e != cudaSuccess) fail(w, what, cudaGetErrorString(e));
}

static void nccl_ok(NcclComm *w, ncclResult_t r, const char *what) {
  if (r != ncclSuccess && r != ncclInProgress) fail(w, what, ncclGetErrorString(r));
}

/* Waits for the communication stream on the host, or gives up after the timeout. */
static void sync_stream(NcclComm *w, const char *what) {
  double deadline = now_s() + w->timeout;
  for (;;) {
    cudaError_t e = cudaStreamQuery(w->stream);
    if (e == cudaSuccess) return;
    if (e != cudaErrorNotReady) fail(w, what, cudaGetErrorString(e));
    ncclResult_t async = ncclSuccess;
    ncclCommGetAsyncError(w->nc, &async);
    if (async != ncclSuccess && async != ncclInProgress) fail(w, what, ncclGetErrorString(async));
    if (now_s() > deadline)
      fail(w, what, "did not complete within CTC_MPI_TIMEOUT seconds (another rank died, left early or runs a "
                    "different program)");
    sched_yield();
  }
}

/* The events of bucket ids up to id. Called with w->mu held: NULL, or why not (the
 * caller fails after unlocking). */
static const char *events_for(NcclComm *w, int id) {
  if (id < w->nev) return NULL;
  int n = id + 8;
  cudaEvent_t *r = realloc(w->ready, sizeof *r * (size_t)n), *d;
  if (!r) return "out of memory";
  w->ready = r;
  d = realloc(w->done, sizeof *d * (size_t)n);
  if (!d) return "out of memory";
  w->done = d;
  double *t = realloc(w->started, sizeof *t * (size_t)n);
  if (!t) return "out of memory";
  w->started = t;
  for (int i = w->nev; i < n; i++) {
    cudaError_t e = cudaEventCreateWithFlags(&w->ready[i], cudaEventDisableTiming);
    if (e == cudaSuccess) e = cudaEventCreateWithFlags(&w->done[i], cudaEventDisableTiming);
    if (e != cudaSuccess) return cudaGetErrorString(e);
    w->started[i] = 0;
    w->nev = i + 1;
  }
  return NULL;
}

/* The watchdog: every 20 ms, the started buckets' completion events and NCCL's
 * asynchronous error; past the timeout, or on an error, ends all ranks. */
static void *watchdog_main(void *arg) {
  NcclComm *w = arg;
  cudaSetDevice(w->device);
  for (;;) {
    struct timespec ts = {0, 20 * 1000 * 1000};
    nanosleep(&ts, NULL);
    char what[64] = "NCCL";
    const char *why = NULL;
    pthread_mutex_lock(&w->mu);
    if (w->stop) {
      pthread_mutex_unlock(&w->mu);
      return NULL;
    }
    double t = now_s();
    for (int i = 0; i < w->nev && !why; i++) {
      if (w->started[i] <= 0) continue;
      cudaError_t e = cudaEventQuery(w->done[i]);
      if (e == cudaSuccess) w->started[i] = 0;
      else if (e != cudaErrorNotReady) why = cudaGetErrorString(e);
      else if (t - w->started[i] > w->timeout)
        why = "did not complete within CTC_MPI_TIMEOUT seconds (another rank died, left early or runs a different "
              "program)";
      if (why) snprintf(what, sizeof what, "the all-reduce of gradient bucket %d", i);
    }
    ncclResult_t async = ncclSuccess;
    if (!why && w->nc && ncclCommGetAsyncError(w->nc, &async) == ncclSuccess && async != ncclSuccess &&
        async != ncclInProgress)
      why = ncclGetErrorString(async);
    pthread_mutex_unlock(&w->mu);
    if (why) fail(w, what, why);
  }
}

/* The stream the entry's kernels run on. */
static cudaStream_t compute_stream(NcclComm *w) { return w->pub.stream ? (cudaStream_t)w->pub.stream : w->compute; }

static void nccl_start(ctc_comm *c, unsigned char *arena, const ctc_bucket *b) {
  NcclComm *w = (NcclComm *)c;
  if (c->size == 1) return;
  pthread_mutex_lock(&w->mu);
  const char *why = events_for(w, b->id);
  pthread_mutex_unlock(&w->mu);
  if (why) fail(w, "the events of a gradient bucket", why);
  ncclDataType_t t = b->dtype == CTC_F64 ? ncclFloat64 : ncclFloat32;
  cuda_ok(w, cudaEventRecord(w->ready[b->id], compute_stream(w)), "cudaEventRecord");
  cuda_ok(w, cudaStreamWaitEvent(w->stream, w->ready[b->id], 0), "cudaStreamWaitEvent");
  nccl_ok(w, ncclGroupStart(), "ncclGroupStart");
  for (int i = 0; i < b->n; i++)
    nccl_ok(w, ncclAllReduce(arena + b->offset[i], arena + b->offset[i], (size_t)b->count[i], t, ncclAvg, w->nc,
                             w->stream), "ncclAllReduce of a gradient bucket");
  nccl_ok(w, ncclGroupEnd(), "ncclGroupEnd");
  pthread_mutex_lock(&w->mu);   /* the watchdog sees the event recorded and its start time together */
  cudaError_t e = cudaEventRecord(w->done[b->id], w->stream);
  w->started[b->id] = now_s();
  pthread_mutex_unlock(&w->mu);
  cuda_ok(w, e, "cudaEventRecord");
}

static void nccl_wait(ctc_comm *c, unsigned char *arena, const ctc_bucket *b) {
  NcclComm *w = (NcclComm *)c;
  (void)arena;
  if (c->size == 1) return;
  if (b->id >= w->nev) fail(w, "a gradient bucket", "waited for before it was started (a bug in ctc)");
  cuda_ok(w, cudaStreamWaitEvent(compute_stream(w), w->done[b->id], 0), "cudaStreamWaitEvent");
}

static void mpi_done(NcclComm *w, MPI_Request *r, const char *what) {
  double deadline = now_s() + w->timeout;
  for (int flag = 0; !flag;) {
    MPI_Test(r, &flag, MPI_STATUS_IGNORE);
    if (!flag && now_s() > deadline)
      fail(w, what, "did not complete within CTC_MPI_TIMEOUT seconds (another rank died, left early or runs a "
                    "different program)");
    if (!flag) sched_yield();
  }
}

static void nccl_bcast(ctc_comm *c, void *buf, size_t bytes) {
  NcclComm *w = (NcclComm *)c;
  if (c->size == 1) return;
  struct cudaPointerAttributes at;
  int device = cudaPointerGetAttributes(&at, buf) == cudaSuccess &&
               (at.type == cudaMemoryTypeDevice || at.type == cudaMemoryTypeManaged);
  cudaGetLastError();   /* a host pointer is not an error to keep */
  if (!device) {        /* host memory (the driver's parameters): MPI, in pieces of at most INT_MAX bytes */
    for (size_t o = 0; o < bytes;) {
      size_t n = bytes - o < (size_t)1 << 30 ? bytes - o : (size_t)1 << 30;
      MPI_Request r;
      MPI_Ibcast((unsigned char *)buf + o, (int)n, MPI_BYTE, 0, MPI_COMM_WORLD, &r);
      mpi_done(w, &r, "the broadcast of the initial parameters");
      o += n;
    }
    return;
  }
  cuda_ok(w, cudaStreamSynchronize(compute_stream(w)), "cudaStreamSynchronize");
  nccl_ok(w, ncclBroadcast(buf, buf, bytes, ncclUint8, 0, w->nc, w->stream), "ncclBroadcast");
  sync_stream(w, "the broadcast of the initial parameters");
}

static void nccl_sum_f64(ctc_comm *c, double *v, int n) {
  NcclComm *w = (NcclComm *)c;
  if (c->size == 1) return;
  MPI_Request r;
  MPI_Iallreduce(MPI_IN_PLACE, v, n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD, &r);
  mpi_done(w, &r, "the all-reduce of the training loss");
}

static void nccl_abort(ctc_comm *c, int status) {
  NcclComm *w = (NcclComm *)c;
  fflush(stdout);
  fflush(stderr);
  if (w->nc) ncclCommAbort(w->nc);
  MPI_Abort(MPI_COMM_WORLD, status ? status : 1);
  exit(status ? status : 1);
}

static void nccl_finalize(void) {
  NcclComm *w = &nworld;
  if (!w->init) return;
  if (w->watching) {
    pthread_mutex_lock(&w->mu);
    w->stop = 1;
    pthread_mutex_unlock(&w->mu);
    if (!pthread_equal(pthread_self(), w->watchdog)) pthread_join(w->watchdog, NULL);   /* fail() in the watchdog */
    w->watching = 0;
  }
  if (w->nc) {
    cudaStreamSynchronize(w->stream);
    ncclCommDestroy(w->nc);
  }
  for (int i = 0; i < w->nev; i++) {
    cudaEventDestroy(w->ready[i]);
    cudaEventDestroy(w->done[i]);
  }
  free(w->ready);
  free(w->done);
  free(w->started);
  int fin = 0;
  MPI_Finalized(&fin);
  if (!fin) MPI_Finalize();
  w->init = 0;
}

ctc_comm *ctc_comm_world(void) {
  NcclComm *w = &nworld;
  if (w->init) return &w->pub;
  int inited = 0, provided = 0;
  MPI_Initialized(&inited);   /* the watchdog may end the job (MPI_Abort) while the main thread is in MPI */
  if (!inited && MPI_Init_thread(NULL, NULL, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS) {
    fprintf(stderr, "ctc: error: MPI_Init failed\n");
    exit(1);
  }
  MPI_Comm_rank(MPI_COMM_WORLD, &w->pub.rank);
  MPI_Comm_size(MPI_COMM_WORLD, &w->pub.size);
  w->pub.start = nccl_start;
  w->pub.wait = nccl_wait;
  w->pub.bcast = nccl_bcast;
  w->pub.sum_f64 = nccl_sum_f64;
  w->pub.abort = nccl_abort;
  const char *e = getenv("CTC_MPI_TIMEOUT");
  w->timeout = e && atof(e) > 0 ? atof(e) : 300;
  e = getenv("CTC_NCCL_COMPUTE_STREAM_PER_THREAD");
  w->compute = e && !strcmp(e, "1") ? cudaStreamPerThread : (cudaStream_t)0;
  pthread_mutex_init(&w->mu, NULL);
  w->init = 1;
  atexit(nccl_finalize);
  /* the GPU: this rank's index on its node */
  MPI_Comm node;
  int local = 0, ndev = 0;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, w->pub.rank, MPI_INFO_NULL, &node);
  MPI_Comm_rank(node, &local);
  MPI_Comm_free(&node);
  cuda_ok(w, cudaGetDeviceCount(&ndev), "cudaGetDeviceCount");
  if (ndev < 1) fail(w, "NCCL", "no CUDA device");
  w->device = local % ndev;
  cuda_ok(w, cudaSetDevice(w->device), "cudaSetDevice");
  cuda_ok(w, cudaStreamCreateWithFlags(&w->stream, cudaStreamNonBlocking), "cudaStreamCreate");
  if (w->pub.size > 1) {
    ncclUniqueId id;
    if (w->pub.rank == 0) nccl_ok(w, ncclGetUniqueId(&id), "ncclGetUniqueId");
    MPI_Bcast(&id, (int)sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
    nccl_ok(w, ncclCommInitRank(&w->nc, w->pub.size, id, w->pub.rank), "ncclCommInitRank");
    w->watching = pthread_create(&w->watchdog, NULL, watchdog_main, w) == 0;
  }
  return &w->pub;
}

#endif /* CTC_NCCL */
