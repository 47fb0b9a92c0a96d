/* ctc_cudnn_emu.h - the part of cuDNN that ctc's generated .cu calls (the legacy
 * convolution API: descriptors, the _v7 algorithm queries, forward, backward data and
 * backward filter), on the CPU, for builds with -DCTC_CUDA_EMULATE -DCTC_HAVE_CUDNN.
 *
 * Direct convolutions in NCHW with double accumulation, in parallel over images (forward,
 * backward data) or output channels (backward filter); alpha and beta as cuDNN's (beta 0:
 * the output is not read). Each query reports one deterministic algorithm that needs no
 * workspace; `CTC_EMU_CUDNN_WORKSPACE=N` makes it ask for N bytes instead, so the
 * generated code's fallback (im2col + GEMM when no algorithm fits its scratch) can be
 * exercised too. `CTC_EMU_CUDNN_TRACE=1` prints each convolution call to stderr. Status codes and names follow cudnn.h; the values that matter to the
 * generated code are the same. */
#ifndef CTC_CUDNN_EMU_H
#define CTC_CUDNN_EMU_H
#include "ctc_cuda_emu.h"

typedef enum {
  CUDNN_STATUS_SUCCESS = 0,
  CUDNN_STATUS_NOT_INITIALIZED = 1001,
  CUDNN_STATUS_BAD_PARAM = 2000,
  CUDNN_STATUS_NOT_SUPPORTED = 3000
} cudnnStatus_t;
typedef enum { CUDNN_DATA_FLOAT = 0, CUDNN_DATA_DOUBLE = 1 } cudnnDataType_t;
typedef enum { CUDNN_TENSOR_NCHW = 0 } cudnnTensorFormat_t;
typedef enum { CUDNN_CONVOLUTION = 0, CUDNN_CROSS_CORRELATION = 1 } cudnnConvolutionMode_t;
typedef enum { CUDNN_DEFAULT_MATH = 0, CUDNN_TENSOR_OP_MATH = 1, CUDNN_FMA_MATH = 3 } cudnnMathType_t;
typedef enum { CUDNN_NON_DETERMINISTIC = 0, CUDNN_DETERMINISTIC = 1 } cudnnDeterminism_t;
typedef enum { CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM = 0, CUDNN_CONVOLUTION_FWD_ALGO_COUNT = 8 } cudnnConvolutionFwdAlgo_t;
typedef enum { CUDNN_CONVOLUTION_BWD_DATA_ALGO_1 = 1, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT = 6 } cudnnConvolutionBwdDataAlgo_t;
typedef enum {
  CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1 = 1,
  CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT = 7
} cudnnConvolutionBwdFilterAlgo_t;

typedef struct ctc_emu_dnn { cudaStream_t stream; } *cudnnHandle_t;
typedef struct ctc_emu_tensor { cudnnDataType_t dt; int n, c, h, w; } *cudnnTensorDescriptor_t;
typedef struct ctc_emu_tensor *cudnnFilterDescriptor_t;   /* k, c, h, w as n, c, h, w */
typedef struct ctc_emu_conv {
  int ph, pw, sh, sw, dh, dw, groups;
  cudnnConvolutionMode_t mode;
  cudnnDataType_t dt;
  cudnnMathType_t math;
} *cudnnConvolutionDescriptor_t;

#define CTC_EMU_PERF(name, algo_t)                                                                                     \
  typedef struct {                                                                                                     \
    algo_t algo;                                                                                                       \
    cudnnStatus_t status;                                                                                              \
    float time;                                                                                                        \
    size_t memory;                                                                                                     \
    cudnnDeterminism_t determinism;                                                                                    \
    cudnnMathType_t mathType;                                                                                          \
    int reserved[3];                                                                                                   \
  } name
CTC_EMU_PERF(cudnnConvolutionFwdAlgoPerf_t, cudnnConvolutionFwdAlgo_t);
CTC_EMU_PERF(cudnnConvolutionBwdDataAlgoPerf_t, cudnnConvolutionBwdDataAlgo_t);
CTC_EMU_PERF(cudnnConvolutionBwdFilterAlgoPerf_t, cudnnConvolutionBwdFilterAlgo_t);
#undef CTC_EMU_PERF

inline const char *cudnnGetErrorString(cudnnStatus_t s) {
  return s == CUDNN_STATUS_SUCCESS ? "CUDNN_STATUS_SUCCESS" : s == CUDNN_STATUS_BAD_PARAM ? "CUDNN_STATUS_BAD_PARAM"
         : s == CUDNN_STATUS_NOT_SUPPORTED ? "CUDNN_STATUS_NOT_SUPPORTED" : "CUDNN_STATUS_NOT_INITIALIZED";
}
inline cudnnStatus_t cudnnCreate(cudnnHandle_t *h) {
  *h = (cudnnHandle_t)calloc(1, sizeof **h);
  return *h ? CUDNN_STATUS_SUCCESS : CUDNN_STATUS_NOT_INITIALIZED;
}
inline cudnnStatus_t cudnnDestroy(cudnnHandle_t h) { return free(h), CUDNN_STATUS_SUCCESS; }
inline cudnnStatus_t cudnnSetStream(cudnnHandle_t h, cudaStream_t s) {
  if (!h) return CUDNN_STATUS_NOT_INITIALIZED;
  h->stream = s;
  return CUDNN_STATUS_SUCCESS;
}
template <class D>
inline cudnnStatus_t ctc_emu_dnn_create(D **d) {
  *d = (D *)calloc(1, sizeof **d);
  return *d ? CUDNN_STATUS_SUCCESS : CUDNN_STATUS_NOT_INITIALIZED;
}
inline cudnnStatus_t cudnnCreateTensorDescriptor(cudnnTensorDescriptor_t *d) { return ctc_emu_dnn_create(d); }
inline cudnnStatus_t cudnnCreateFilterDescriptor(cudnnFilterDescriptor_t *d) { return ctc_emu_dnn_create(d); }
inline cudnnStatus_t cudnnCreateConvolutionDescriptor(cudnnConvolutionDescriptor_t *d) { return ctc_emu_dnn_create(d); }
inline cudnnStatus_t cudnnDestroyTensorDescriptor(cudnnTensorDescriptor_t d) { return free(d), CUDNN_STATUS_SUCCESS; }
inline cudnnStatus_t cudnnDestroyFilterDescriptor(cudnnFilterDescriptor_t d) { return free(d), CUDNN_STATUS_SUCCESS; }
inline cudnnStatus_t cudnnDestroyConvolutionDescriptor(cudnnConvolutionDescriptor_t d) {
  return free(d), CUDNN_STATUS_SUCCESS;
}
inline cudnnStatus_t cudnnSetTensor4dDescriptor(cudnnTensorDescriptor_t d, cudnnTensorFormat_t f, cudnnDataType_t dt,
                                                int n, int c, int h, int w) {
  if (!d || f != CUDNN_TENSOR_NCHW || n <= 0 || c <= 0 || h <= 0 || w <= 0) return CUDNN_STATUS_BAD_PARAM;
  *d = {dt, n, c, h, w};
  return CUDNN_STATUS_SUCCESS;
}
inline cudnnStatus_t cudnnSetFilter4dDescriptor(cudnnFilterDescriptor_t d, cudnnDataType_t dt, cudnnTensorFormat_t f,
                                                int k, int c, int h, int w) {
  return cudnnSetTensor4dDescriptor(d, f, dt, k, c, h, w);
}
inline cudnnStatus_t cudnnSetConvolution2dDescriptor(cudnnConvolutionDescriptor_t d, int ph, int pw, int sh, int sw,
                                                     int dh, int dw, cudnnConvolutionMode_t mode, cudnnDataType_t dt) {
  if (!d || ph < 0 || pw < 0 || sh <= 0 || sw <= 0 || dh <= 0 || dw <= 0) return CUDNN_STATUS_BAD_PARAM;
  d->ph = ph, d->pw = pw, d->sh = sh, d->sw = sw, d->dh = dh, d->dw = dw, d->mode = mode, d->dt = dt;
  if (!d->groups) d->groups = 1;
  return CUDNN_STATUS_SUCCESS;
}
inline cudnnStatus_t cudnnSetConvolutionGroupCount(cudnnConvolutionDescriptor_t d, int groups) {
  if (!d || groups <= 0) return CUDNN_STATUS_BAD_PARAM;
  d->groups = groups;
  return CUDNN_STATUS_SUCCESS;
}
inline cudnnStatus_t cudnnSetConvolutionMathType(cudnnConvolutionDescriptor_t d, cudnnMathType_t m) {
  if (!d) return CUDNN_STATUS_BAD_PARAM;
  d->math = m;
  return CUDNN_STATUS_SUCCESS;
}

/* Whether x, w, y and the convolution agree (shapes, groups, cross-correlation, one dtype). */
inline bool ctc_emu_conv_ok(const ctc_emu_tensor *x, const ctc_emu_tensor *w, const ctc_emu_conv *c,
                            const ctc_emu_tensor *y) {
  if (!x || !w || !c || !y || c->mode != CUDNN_CROSS_CORRELATION || x->dt != w->dt || x->dt != y->dt || x->dt != c->dt)
    return false;
  const int g = c->groups, oh = (x->h + 2 * c->ph - c->dh * (w->h - 1) - 1) / c->sh + 1,
            ow = (x->w + 2 * c->pw - c->dw * (w->w - 1) - 1) / c->sw + 1;
  return x->c % g == 0 && w->n % g == 0 && w->c == x->c / g && y->n == x->n && y->c == w->n && y->h == oh && y->w == ow;
}
inline size_t ctc_emu_dnn_workspace(void) {
  const char *e = getenv("CTC_EMU_CUDNN_WORKSPACE");
  return e && *e ? (size_t)strtoull(e, NULL, 10) : 0;
}
template <class P, class A>
inline cudnnStatus_t ctc_emu_dnn_query(bool ok, int requested, int *returned, P *perf, A algo) {
  if (!ok || requested < 1) return CUDNN_STATUS_BAD_PARAM;
  *returned = 1;
  memset(perf, 0, sizeof *perf);
  perf->algo = algo;
  perf->status = CUDNN_STATUS_SUCCESS;
  perf->memory = ctc_emu_dnn_workspace();
  perf->determinism = CUDNN_DETERMINISTIC;
  return CUDNN_STATUS_SUCCESS;
}
inline cudnnStatus_t cudnnGetConvolutionForwardAlgorithm_v7(cudnnHandle_t h, cudnnTensorDescriptor_t x,
                                                            cudnnFilterDescriptor_t w, cudnnConvolutionDescriptor_t c,
                                                            cudnnTensorDescriptor_t y, int requested, int *returned,
                                                            cudnnConvolutionFwdAlgoPerf_t *perf) {
  return ctc_emu_dnn_query(h && ctc_emu_conv_ok(x, w, c, y), requested, returned, perf,
                           CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM);
}
inline cudnnStatus_t cudnnGetConvolutionBackwardDataAlgorithm_v7(cudnnHandle_t h, cudnnFilterDescriptor_t w,
                                                                 cudnnTensorDescriptor_t dy, cudnnConvolutionDescriptor_t c,
                                                                 cudnnTensorDescriptor_t dx, int requested, int *returned,
                                                                 cudnnConvolutionBwdDataAlgoPerf_t *perf) {
  return ctc_emu_dnn_query(h && ctc_emu_conv_ok(dx, w, c, dy), requested, returned, perf,
                           CUDNN_CONVOLUTION_BWD_DATA_ALGO_1);
}
inline cudnnStatus_t cudnnGetConvolutionBackwardFilterAlgorithm_v7(cudnnHandle_t h, cudnnTensorDescriptor_t x,
                                                                   cudnnTensorDescriptor_t dy,
                                                                   cudnnConvolutionDescriptor_t c,
                                                                   cudnnFilterDescriptor_t dw, int requested,
                                                                   int *returned,
                                                                   cudnnConvolutionBwdFilterAlgoPerf_t *perf) {
  return ctc_emu_dnn_query(h && ctc_emu_conv_ok(x, dw, c, dy), requested, returned, perf,
                           CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1);
}

/* The three convolutions, f32 or f64 (T). op 0: y = conv(x, w); 1: dx = conv^T(dy, w);
 * 2: dw = sum over images of x (*) dy. out = alpha * result + beta * out. */
template <class T>
inline void ctc_emu_conv_run(int op, const ctc_emu_tensor *x, const ctc_emu_tensor *w, const ctc_emu_conv *c,
                         const ctc_emu_tensor *y, double alpha, double beta, const T *X, const T *W, const T *Y, T *out) {
  const int G = c->groups, Cg = x->c / G, Og = w->n / G, KH = w->h, KW = w->w;
  const long long xs = (long long)x->c * x->h * x->w, ys = (long long)y->c * y->h * y->w;
  const long long ws = (long long)Cg * KH * KW;
  auto xi = [&](int ci, int oy, int ky, int ox, int kx, int *iy, int *ix) {
    (void)ci;
    *iy = oy * c->sh - c->ph + ky * c->dh, *ix = ox * c->sw - c->pw + kx * c->dw;
    return *iy >= 0 && *iy < x->h && *ix >= 0 && *ix < x->w;
  };
  auto put = [&](T *o, double v) { *o = beta == 0 ? (T)(alpha * v) : (T)(alpha * v + beta * (double)*o); };
  if (op == 0) {
    CTC_EMU_OMP("omp parallel for")
    for (int n = 0; n < x->n; n++)
      for (int o = 0; o < w->n; o++)
        for (int oy = 0; oy < y->h; oy++)
          for (int ox = 0; ox < y->w; ox++) {
            double s = 0;
            for (int ci = 0; ci < Cg; ci++)
              for (int ky = 0; ky < KH; ky++)
                for (int kx = 0; kx < KW; kx++) {
                  int iy, ix;
                  if (xi(ci, oy, ky, ox, kx, &iy, &ix))
                    s += (double)X[n * xs + ((long long)(o / Og * Cg + ci) * x->h + iy) * x->w + ix] *
                         W[o * ws + ((long long)ci * KH + ky) * KW + kx];
                }
            put(&out[n * ys + ((long long)o * y->h + oy) * y->w + ox], s);
          }
  } else if (op == 1) {
    CTC_EMU_OMP("omp parallel for")
    for (int n = 0; n < x->n; n++) {
      double *acc = (double *)calloc((size_t)xs, sizeof *acc);
      for (int o = 0; o < w->n; o++)
        for (int oy = 0; oy < y->h; oy++)
          for (int ox = 0; ox < y->w; ox++) {
            const double g = Y[n * ys + ((long long)o * y->h + oy) * y->w + ox];
            for (int ci = 0; ci < Cg; ci++)
              for (int ky = 0; ky < KH; ky++)
                for (int kx = 0; kx < KW; kx++) {
                  int iy, ix;
                  if (xi(ci, oy, ky, ox, kx, &iy, &ix))
                    acc[((long long)(o / Og * Cg + ci) * x->h + iy) * x->w + ix] +=
                        g * W[o * ws + ((long long)ci * KH + ky) * KW + kx];
                }
          }
      for (long long i = 0; i < xs; i++) put(&out[n * xs + i], acc ? acc[i] : 0);
      free(acc);
    }
  } else {
    CTC_EMU_OMP("omp parallel for")
    for (int o = 0; o < w->n; o++)
      for (int ci = 0; ci < Cg; ci++)
        for (int ky = 0; ky < KH; ky++)
          for (int kx = 0; kx < KW; kx++) {
            double s = 0;
            for (int n = 0; n < x->n; n++)
              for (int oy = 0; oy < y->h; oy++)
                for (int ox = 0; ox < y->w; ox++) {
                  int iy, ix;
                  if (xi(ci, oy, ky, ox, kx, &iy, &ix))
                    s += (double)X[n * xs + ((long long)(o / Og * Cg + ci) * x->h + iy) * x->w + ix] *
                         Y[n * ys + ((long long)o * y->h + oy) * y->w + ox];
                }
            put(&out[o * ws + ((long long)ci * KH + ky) * KW + kx], s);
          }
  }
}
inline cudnnStatus_t ctc_emu_conv_call(int op, cudnnHandle_t h, const void *alpha, const ctc_emu_tensor *x,
                                       const void *X, const ctc_emu_tensor *w, const void *W, const ctc_emu_conv *c,
                                       size_t ws_bytes, const ctc_emu_tensor *y, const void *Y, const void *beta,
                                       void *out) {
  if (!h || !alpha || !beta || !out || !ctc_emu_conv_ok(x, w, c, y) || ws_bytes < ctc_emu_dnn_workspace())
    return CUDNN_STATUS_BAD_PARAM;
  const char *trace = getenv("CTC_EMU_CUDNN_TRACE");
  if (trace && *trace == '1')
    fprintf(stderr, "cudnn: %s x[%d,%d,%d,%d] w[%d,%d,%d,%d] groups %d\n",
            op == 0 ? "forward" : op == 1 ? "backward data" : "backward filter", x->n, x->c, x->h, x->w, w->n, w->c, w->h,
            w->w, c->groups);
  if (x->dt == CUDNN_DATA_DOUBLE)
    ctc_emu_conv_run<double>(op, x, w, c, y, *(const double *)alpha, *(const double *)beta, (const double *)X,
                         (const double *)W, (const double *)Y, (double *)out);
  else
    ctc_emu_conv_run<float>(op, x, w, c, y, *(const float *)alpha, *(const float *)beta, (const float *)X,
                        (const float *)W, (const float *)Y, (float *)out);
  return CUDNN_STATUS_SUCCESS;
}
inline cudnnStatus_t cudnnConvolutionForward(cudnnHandle_t h, const void *alpha, cudnnTensorDescriptor_t xd,
                                             const void *x, cudnnFilterDescriptor_t wd, const void *w,
                                             cudnnConvolutionDescriptor_t cd, cudnnConvolutionFwdAlgo_t, void *,
                                             size_t ws_bytes, const void *beta, cudnnTensorDescriptor_t yd, void *y) {
  return ctc_emu_conv_call(0, h, alpha, xd, x, wd, w, cd, ws_bytes, yd, NULL, beta, y);
}
inline cudnnStatus_t cudnnConvolutionBackwardData(cudnnHandle_t h, const void *alpha, cudnnFilterDescriptor_t wd,
                                                  const void *w, cudnnTensorDescriptor_t dyd, const void *dy,
                                                  cudnnConvolutionDescriptor_t cd, cudnnConvolutionBwdDataAlgo_t, void *,
                                                  size_t ws_bytes, const void *beta, cudnnTensorDescriptor_t dxd,
                                                  void *dx) {
  return ctc_emu_conv_call(1, h, alpha, dxd, NULL, wd, w, cd, ws_bytes, dyd, dy, beta, dx);
}
inline cudnnStatus_t cudnnConvolutionBackwardFilter(cudnnHandle_t h, const void *alpha, cudnnTensorDescriptor_t xd,
                                                    const void *x, cudnnTensorDescriptor_t dyd, const void *dy,
                                                    cudnnConvolutionDescriptor_t cd, cudnnConvolutionBwdFilterAlgo_t,
                                                    void *, size_t ws_bytes, const void *beta,
                                                    cudnnFilterDescriptor_t dwd, void *dw) {
  return ctc_emu_conv_call(2, h, alpha, xd, x, dwd, NULL, cd, ws_bytes, dyd, dy, beta, dw);
}

#endif
