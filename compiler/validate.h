/* validate.h - `ctc compile|build --validate`: the generated code compiled again inside ctc,
 * by compilers loaded at run time (dlopen; nothing is linked into ctc):
 *
 *   --target cuda  every __global__ kernel (with the __device__ helpers and macros it uses, one
 *                  translation unit, `#line`d to the generated file) through NVRTC for sm_80 and
 *                  sm_90; the host side (the .cu as C++ against runtime_min/cuda_emu, as
 *                  --emulate builds it) through libclang.
 *   --target c     the model.c through libclang (-std=c11 -Wall -Wextra, the runtime's headers).
 *
 * Any error or warning is a bug in ctc: it is printed as an internal error naming the compiler,
 * the kernel or function and the generated file's line, and the exit status is CTC_EXIT_BUG (3).
 * A compiler that cannot be loaded is not an error: a note on stderr says which one is
 * unavailable and what was not checked, and the status is 0 when everything else validated.
 * Libraries: $CTC_NVRTC / $CTC_LIBCLANG (a path: only that one is tried), else libnvrtc.so(.13,
 * .12) on the loader path and under $CUDA_HOME, /usr/local/cuda; libclang.so(.1) and Debian's
 * libclang-N.so.1 / /usr/lib/llvm-N (N = 20 down to 11). */
#ifndef CTC_VALIDATE_H
#define CTC_VALIDATE_H
#include "../support/support.h"

/* Validates the generated texts: `c_text` as written to `c_path` (model.c or model.cu), `h_text`
 * as its header at `h_path`; `rt_dir` is runtime_min (ctc_rt.h, cuda_emu/). Returns 0 or
 * CTC_EXIT_BUG after printing the diagnostics. */
int ctc_validate(Arena *a, const char *c_text, const char *h_text, const char *c_path, const char *h_path, int cuda,
                 const char *rt_dir);
#endif
