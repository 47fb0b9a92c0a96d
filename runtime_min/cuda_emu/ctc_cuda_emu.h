/* ctc_cuda_emu.h - enough of CUDA and cuBLAS, on the CPU, to run ctc's generated
 * .cu files without a GPU (the idea of Triton's interpreter mode).
 *
 *   g++ -x c++ -std=c++17 -fopenmp -DCTC_CUDA_EMULATE -I<runtime_min> -I<runtime_min>/cuda_emu model.cu ...
 *
 * Kernels are plain functions; a launch (ctc_emu_launch, what CTC_LAUNCH
 * becomes) runs the grid block by block, blocks in parallel (OpenMP):
 *   - a kernel without __syncthreads (sync = 0): a block's threads one after
 *     the other;
 *   - a kernel with __syncthreads (sync = 1): a block's threads as fibers on one
 *     OS thread (ucontext), __syncthreads switching to the next fiber: every
 *     thread runs up to the barrier before any goes on; __shared__ variables are
 *     static thread_local, shared by the block's fibers and private to the block.
 * threadIdx / blockIdx / blockDim / gridDim are thread-local. Memory is host
 * memory (cudaMalloc = aligned malloc; every copy kind is a memcpy); streams run
 * in order at once, so synchronisation is a no-op. cuBLAS: the GEMMs the
 * generated code calls, column-major as cuBLAS's, with double accumulation.
 * Warp primitives are not emulated (the generated code does not use them). */
#ifndef CTC_CUDA_EMU_H
#define CTC_CUDA_EMU_H

#ifndef __cplusplus
#error "ctc_cuda_emu.h is C++ (compile the .cu with g++ -x c++)"
#endif
#ifdef _OPENMP   /* blocks (and GEMM columns) in parallel; serial without -fopenmp */
#define CTC_EMU_OMP(x) _Pragma(x)
#else
#define CTC_EMU_OMP(x)
#endif
#include <stdint.h>
#include <ucontext.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>

/* ---- the language --------------------------------------------------------- */

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __shared__ static thread_local

struct dim3 {
  unsigned x, y, z;
  dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};
typedef dim3 uint3;

inline thread_local uint3 threadIdx, blockIdx;
inline thread_local dim3 blockDim, gridDim;

/* The fibers of the block this OS thread runs (sync kernels). */
struct ctc_emu_fibers {
  ucontext_t sched;       /* the launcher's context */
  ucontext_t *ctx;        /* one per thread of the block */
  char *stacks;
  long n, cap, cur;
  unsigned char *done;
  void *fn;               /* the kernel body (a lambda), called through call */
  void (*call)(void *);
};
inline thread_local ctc_emu_fibers ctc_emu_fb;

/* getcontext and swapcontext return twice: kept out of the callers' frames
 * (no local of theirs is live across them, -Wclobbered stays quiet). */
__attribute__((noinline)) inline void ctc_emu_getcontext(ucontext_t *c) { getcontext(c); }
__attribute__((noinline)) inline void ctc_emu_swapcontext(ucontext_t *from, ucontext_t *to) { swapcontext(from, to); }

inline void __syncthreads(void) {
  ctc_emu_fibers *fb = &ctc_emu_fb;
  if (!fb->n) return;   /* a launch of a kernel declared without sync: one thread at a time, nothing to wait for */
  ctc_emu_swapcontext(&fb->ctx[fb->cur], &fb->sched);   /* the others run up to the barrier too */
}

/* ---- the runtime -------------------------------------------------------------- */

typedef enum cudaError { cudaSuccess = 0, cudaErrorInvalidValue = 1, cudaErrorMemoryAllocation = 2 } cudaError_t;
typedef enum cudaMemcpyKind { cudaMemcpyHostToHost = 0, cudaMemcpyHostToDevice = 1, cudaMemcpyDeviceToHost = 2,
                              cudaMemcpyDeviceToDevice = 3, cudaMemcpyDefault = 4 } cudaMemcpyKind;
typedef struct ctc_emu_stream *cudaStream_t;

inline thread_local cudaError_t ctc_emu_last_error = cudaSuccess;

inline const char *cudaGetErrorString(cudaError_t e) {
  switch (e) {
  case cudaSuccess: return "no error";
  case cudaErrorInvalidValue: return "invalid argument";
  case cudaErrorMemoryAllocation: return "out of memory";
  default: return "unspecified launch failure";
  }
}
inline cudaError_t cudaGetLastError(void) {
  cudaError_t e = ctc_emu_last_error;
  ctc_emu_last_error = cudaSuccess;
  return e;
}
inline cudaError_t cudaMalloc(void **p, size_t n) {
  if (!p) return cudaErrorInvalidValue;
  *p = aligned_alloc(256, (n + 255) / 256 * 256 + 256);
  if (!*p) return cudaErrorMemoryAllocation;
  memset(*p, 0xA5, (n + 255) / 256 * 256);   /* garbage, as device memory is: reads before writes show */
  return cudaSuccess;
}
inline cudaError_t cudaFree(void *p) {
  free(p);
  return cudaSuccess;
}
inline cudaError_t cudaMallocHost(void **p, size_t n) { return cudaMalloc(p, n); }
inline cudaError_t cudaFreeHost(void *p) { return cudaFree(p); }
inline cudaError_t cudaMemcpy(void *d, const void *s, size_t n, cudaMemcpyKind) {
  if (n && (!d || !s)) return cudaErrorInvalidValue;
  if (n) memmove(d, s, n);
  return cudaSuccess;
}
inline cudaError_t cudaMemcpyAsync(void *d, const void *s, size_t n, cudaMemcpyKind k, cudaStream_t = 0) {
  return cudaMemcpy(d, s, n, k);
}
inline cudaError_t cudaMemcpy2DAsync(void *d, size_t dpitch, const void *s, size_t spitch, size_t width, size_t height,
                                     cudaMemcpyKind, cudaStream_t = 0) {
  if (width > dpitch || width > spitch) return cudaErrorInvalidValue;
  for (size_t r = 0; r < height; r++) memmove((char *)d + r * dpitch, (const char *)s + r * spitch, width);
  return cudaSuccess;
}
inline cudaError_t cudaMemsetAsync(void *d, int v, size_t n, cudaStream_t = 0) {
  memset(d, v, n);
  return cudaSuccess;
}
inline cudaError_t cudaStreamCreate(cudaStream_t *s) {
  *s = 0;
  return cudaSuccess;
}
inline cudaError_t cudaStreamDestroy(cudaStream_t) { return cudaSuccess; }
inline cudaError_t cudaStreamSynchronize(cudaStream_t) { return cudaSuccess; }
inline cudaError_t cudaDeviceSynchronize(void) { return cudaSuccess; }

#define CTC_EMU_STACK ((size_t)256 << 10)

inline void ctc_emu_fiber_main(void) {
  ctc_emu_fibers *fb = &ctc_emu_fb;
  fb->call(fb->fn);
  fb->done[fb->cur] = 1;   /* then back to the launcher (uc_link) */
}

template <class F>
inline void ctc_emu_call(void *f) { (*(F *)f)(); }

/* Runs kernel body f (a lambda calling the kernel) over grid x block. */
template <class F>
inline void ctc_emu_launch(dim3 grid, dim3 block, int sync, F f) {
  const long nb = (long)grid.x * grid.y * grid.z, nt = (long)block.x * block.y * block.z;
  if (nb <= 0 || nt <= 0 || nt > 1024) {
    ctc_emu_last_error = cudaErrorInvalidValue;
    return;
  }
  int bad = 0;
  CTC_EMU_OMP("omp parallel for schedule(dynamic, 1) if (nb > 1)")
  for (long b = 0; b < nb; b++) {
    gridDim = grid, blockDim = block;
    blockIdx = uint3((unsigned)(b % grid.x), (unsigned)(b / grid.x % grid.y), (unsigned)(b / grid.x / grid.y));
    if (!sync) {
      for (long t = 0; t < nt; t++) {
        threadIdx = uint3((unsigned)(t % block.x), (unsigned)(t / block.x % block.y), (unsigned)(t / block.x / block.y));
        f();
      }
      continue;
    }
    ctc_emu_fibers *fb = &ctc_emu_fb;
    if (fb->cap < nt) {   /* kept for the thread's later launches */
      free(fb->ctx), free(fb->stacks), free(fb->done);
      fb->ctx = (ucontext_t *)calloc((size_t)nt, sizeof *fb->ctx);
      fb->stacks = (char *)malloc((size_t)nt * CTC_EMU_STACK);
      fb->done = (unsigned char *)calloc((size_t)nt, 1);
      fb->cap = fb->ctx && fb->stacks && fb->done ? nt : 0;
      if (!fb->cap) {
        CTC_EMU_OMP("omp atomic write")
        bad = 1;
        continue;
      }
    }
    fb->fn = (void *)&f;
    fb->call = ctc_emu_call<F>;
    for (long t = 0; t < nt; t++) {
      fb->done[t] = 0;
      ctc_emu_getcontext(&fb->ctx[t]);
      fb->ctx[t].uc_stack.ss_sp = fb->stacks + (size_t)t * CTC_EMU_STACK;
      fb->ctx[t].uc_stack.ss_size = CTC_EMU_STACK;
      fb->ctx[t].uc_link = &fb->sched;
      makecontext(&fb->ctx[t], ctc_emu_fiber_main, 0);
    }
    fb->n = nt;
    /* rounds: each unfinished thread runs to its next barrier or its end */
    for (long left = nt; left > 0;) {
      left = 0;
      for (long t = 0; t < nt; t++) {
        if (fb->done[t]) continue;
        fb->cur = t;
        threadIdx = uint3((unsigned)(t % block.x), (unsigned)(t / block.x % block.y), (unsigned)(t / block.x / block.y));
        ctc_emu_swapcontext(&fb->sched, &fb->ctx[t]);
        left += !fb->done[t];
      }
    }
    fb->n = 0;
  }
  if (bad) ctc_emu_last_error = cudaErrorMemoryAllocation;
}

/* ---- cuBLAS (the calls ctc generates) -------------------------------------------- */

typedef enum { CUBLAS_STATUS_SUCCESS = 0, CUBLAS_STATUS_NOT_INITIALIZED = 1, CUBLAS_STATUS_INVALID_VALUE = 7 } cublasStatus_t;
typedef enum { CUBLAS_OP_N = 0, CUBLAS_OP_T = 1 } cublasOperation_t;
typedef enum { CUBLAS_DEFAULT_MATH = 0, CUBLAS_TF32_TENSOR_OP_MATH = 3 } cublasMath_t;
typedef struct ctc_emu_blas { int math; } *cublasHandle_t;
typedef enum { CUDA_R_32F = 0 } cudaDataType_t;
typedef enum {
  CUBLAS_COMPUTE_32F = 68, CUBLAS_COMPUTE_32F_FAST_16F = 74, CUBLAS_COMPUTE_32F_FAST_16BF = 75
} cublasComputeType_t;
typedef enum { CUBLAS_GEMM_DEFAULT = -1 } cublasGemmAlgo_t;

/* cublasGemmEx's down-conversion of an f32 operand: to bfloat16 (lp 1) or IEEE half (lp 2),
 * round to nearest even (inf past the half range), as tensor cores read it; 0 keeps it. */
inline double ctc_emu_lp(double v, int lp) {
  const float x = (float)v;
  if (!lp || x != x) return x;
  if (lp == 1) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
    float y;
    memcpy(&y, &u, sizeof y);
    return y;
  }
  const double a = fabs(x);
  if (a >= 65520.0) return x < 0 ? -HUGE_VAL : HUGE_VAL;
  int e;
  frexp(a, &e);   /* a = m 2^e, m in [0.5, 1): 11 significant bits, not below 2^-24 */
  const double q = ldexp(1.0, (e - 1 < -14 ? -14 : e - 1) - 10);
  return copysign(nearbyint(a / q) * q, (double)x);
}

inline cublasStatus_t cublasCreate(cublasHandle_t *h) {
  *h = (cublasHandle_t)calloc(1, sizeof **h);
  return *h ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_NOT_INITIALIZED;
}
inline cublasStatus_t cublasDestroy(cublasHandle_t h) {
  free(h);
  return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasSetStream(cublasHandle_t h, cudaStream_t) {
  return h ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_NOT_INITIALIZED;
}
inline cublasStatus_t cublasSetMathMode(cublasHandle_t h, cublasMath_t m) {
  if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
  h->math = (int)m;   /* TF32 is not emulated: f32 GEMMs stay exact-ish */
  return CUBLAS_STATUS_SUCCESS;
}

/* Column-major C[m,n] = alpha op(A)[m,k] op(B)[k,n] + beta C, count strided batches. */
template <class T>
inline cublasStatus_t ctc_emu_gemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                                   const T *alpha, const T *A, int lda, long long sa, const T *B, int ldb, long long sb,
                                   const T *beta, T *C, int ldc, long long sc, int count, int lp = 0) {
  if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (m < 0 || n < 0 || k < 0 || count < 0 || ldc < (m > 1 ? m : 1) || lda < 1 || ldb < 1 ||
      lda < (ta == CUBLAS_OP_N ? m : k) || ldb < (tb == CUBLAS_OP_N ? k : n))
    return CUBLAS_STATUS_INVALID_VALUE;
  const T al = *alpha, be = *beta;
  CTC_EMU_OMP("omp parallel for collapse(2) if ((long long)count * m * n * k > 32768)")
  for (int b = 0; b < count; b++)
    for (int j = 0; j < n; j++) {
      const T *a = A + b * sa, *bb = B + b * sb;
      T *c = C + b * sc;
      for (int i = 0; i < m; i++) {
        double s = 0;
        for (int p = 0; p < k; p++) {
          double x = ta == CUBLAS_OP_N ? a[i + (long long)p * lda] : a[p + (long long)i * lda];
          double y = tb == CUBLAS_OP_N ? bb[p + (long long)j * ldb] : bb[j + (long long)p * ldb];
          if (lp) x = ctc_emu_lp(x, lp), y = ctc_emu_lp(y, lp);
          s += x * y;
        }
        T *cij = c + i + (long long)j * ldc;
        *cij = be == 0 ? (T)(al * s) : (T)(al * s + (double)be * *cij);   /* beta 0: C is not read (may be NaN) */
      }
    }
  return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasSgemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                                  const float *alpha, const float *A, int lda, const float *B, int ldb, const float *beta,
                                  float *C, int ldc) {
  return ctc_emu_gemm(h, ta, tb, m, n, k, alpha, A, lda, 0, B, ldb, 0, beta, C, ldc, 0, 1);
}
inline cublasStatus_t cublasDgemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                                  const double *alpha, const double *A, int lda, const double *B, int ldb,
                                  const double *beta, double *C, int ldc) {
  return ctc_emu_gemm(h, ta, tb, m, n, k, alpha, A, lda, 0, B, ldb, 0, beta, C, ldc, 0, 1);
}
inline cublasStatus_t cublasSgemmStridedBatched(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                                                int k, const float *alpha, const float *A, int lda, long long sa,
                                                const float *B, int ldb, long long sb, const float *beta, float *C,
                                                int ldc, long long sc, int count) {
  return ctc_emu_gemm(h, ta, tb, m, n, k, alpha, A, lda, sa, B, ldb, sb, beta, C, ldc, sc, count);
}
inline cublasStatus_t cublasDgemmStridedBatched(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                                                int k, const double *alpha, const double *A, int lda, long long sa,
                                                const double *B, int ldb, long long sb, const double *beta, double *C,
                                                int ldc, long long sc, int count) {
  return ctc_emu_gemm(h, ta, tb, m, n, k, alpha, A, lda, sa, B, ldb, sb, beta, C, ldc, sc, count);
}

/* cublasGemmEx / cublasGemmStridedBatchedEx as ctc emits them: f32 storage, compute type
 * 32F (plain), 32F_FAST_16BF or 32F_FAST_16F (operands down-converted, f32-or-better sums). */
inline int ctc_emu_lp_of(cudaDataType_t at, cudaDataType_t bt, cudaDataType_t ct, cublasComputeType_t c) {
  if (at != CUDA_R_32F || bt != CUDA_R_32F || ct != CUDA_R_32F) return -1;
  return c == CUBLAS_COMPUTE_32F ? 0 : c == CUBLAS_COMPUTE_32F_FAST_16BF ? 1 : c == CUBLAS_COMPUTE_32F_FAST_16F ? 2 : -1;
}
inline cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m,
                                                 int n, int k, const void *alpha, const void *A, cudaDataType_t at,
                                                 int lda, long long sa, const void *B, cudaDataType_t bt, int ldb,
                                                 long long sb, const void *beta, void *C, cudaDataType_t ct, int ldc,
                                                 long long sc, int count, cublasComputeType_t c, cublasGemmAlgo_t) {
  const int lp = ctc_emu_lp_of(at, bt, ct, c);
  if (lp < 0) return CUBLAS_STATUS_INVALID_VALUE;
  return ctc_emu_gemm(h, ta, tb, m, n, k, (const float *)alpha, (const float *)A, lda, sa, (const float *)B, ldb, sb,
                      (const float *)beta, (float *)C, ldc, sc, count, lp);
}
inline cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                                   const void *alpha, const void *A, cudaDataType_t at, int lda, const void *B,
                                   cudaDataType_t bt, int ldb, const void *beta, void *C, cudaDataType_t ct, int ldc,
                                   cublasComputeType_t c, cublasGemmAlgo_t algo) {
  return cublasGemmStridedBatchedEx(h, ta, tb, m, n, k, alpha, A, at, lda, 0, B, bt, ldb, 0, beta, C, ct, ldc, 0, 1, c,
                                    algo);
}

#endif
