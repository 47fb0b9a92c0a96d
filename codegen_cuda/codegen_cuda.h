/* codegen_cuda.h - the CUDA backend: the same IR, kernel schedule (kernels/)
 * and memory plan as the C target -> model.cu + model.h.
 *
 * For a program whose model_name is "net", model.h declares the C target's API
 * (codegen_c.h) with a device behind it, plus a stream:
 *
 *   typedef struct net_t { unsigned char *arena; size_t arena_bytes;   host copy of the parameters
 *                          unsigned char *dev; unsigned char *io;      device arena (one cudaMalloc)
 *                          cudaStream_t stream; cublasHandle_t blas; } net_t;
 *   int net_init(net_t *m, void *arena, size_t bytes);   arena: host, NET_ARENA_BYTES, 64-byte aligned;
 *                                                         cudaMallocs the device arena, creates the handle
 *   int net_set_stream(net_t *m, cudaStream_t stream);   (default: the legacy stream 0)
 *   void net_free(net_t *m);
 *   int net_load(net_t *m, const char *safetensors_path);  host copy, then uploaded
 *   int net_save(net_t *m, const char *path);              downloaded, then written
 *   int net_<entry>(net_t *m, host pointers...);         copies through the device, synchronises
 *   int net_<entry>_device(net_t *m, device pointers...); asynchronous on m->stream
 *   extern const ctc_model_desc net_desc;                 the runtime's driver works from it
 *
 * The host-pointer entries treat the host copy of the parameters as the
 * reference: they upload it first and, after a training step, download it
 * (what the runtime's driver needs: it loads and saves through the host copy).
 * The _device entries leave the parameters on the device.
 *
 * Kernels: a KN_ELEM kernel is one __global__ function with a grid-stride loop;
 * a KN_ROW kernel one block per row (its reductions: per-thread partial sums in
 * the C target's accumulator type, then a tree in shared memory); GEMMs (and
 * batched GEMMs, folded strided views included) call cuBLAS; convolutions are
 * im2col / col2im kernels + cuBLAS over the C target's column scratch; any
 * other instruction runs the C target's own loop nest as a one-thread kernel
 * (correct, not yet parallel). The file compiles with nvcc, and as C++ with
 * -DCTC_CUDA_EMULATE against runtime_min/cuda_emu/ctc_cuda_emu.h (no GPU). */
#ifndef CTC_CODEGEN_CUDA_H
#define CTC_CODEGEN_CUDA_H

#include "../ir/ir.h"

typedef struct CudaOptions {
  int tf32;   /* cuBLAS may use TF32 tensor cores for f32 GEMMs (CUBLAS_TF32_TENSOR_OP_MATH) */
} CudaOptions;

/* Writes model.cu to cu_out and its header to h_out (included as h_name) from
 * the schedules `sched` (one per Program.funcs entry) the plan was made with.
 * Returns 0, or -1 after printing the reason to stderr (a name clash, a
 * construct the CUDA target does not support yet). */
struct KnSchedule;
int cg_cuda_emit(const Program *p, const MemPlan *plan, struct KnSchedule *const *sched, const CudaOptions *opt,
                 FILE *cu_out, FILE *h_out, const char *h_name);

#endif
