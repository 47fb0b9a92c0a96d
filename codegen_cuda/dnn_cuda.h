/* dnn_cuda.h - cuDNN convolutions in the generated .cu (inside codegen_cuda only).
 *
 * Every convolution instruction of every entry is a "site": its geometry goes into a static
 * table, and its call runs cuDNN's legacy convolution API when the file is built with
 * -DCTC_HAVE_CUDNN (`ctc build --target cuda` defines it, and links -lcudnn, when it finds
 * cudnn.h and libcudnn; --emulate builds use runtime_min/cuda_emu/ctc_cudnn_emu.h). At init,
 * per site, the descriptors are made and an algorithm chosen: cuDNN's heuristics' first
 * deterministic one whose workspace fits in the site's column scratch (the bytes the memory
 * plan already gives its im2col), so nothing is allocated after init; a site none fits keeps
 * the im2col + cuBLAS code, which stays in the file as the other branch (and is all there is
 * without CTC_HAVE_CUDNN). f32 convolutions use FMA math unless --tf32. */
#ifndef CTC_DNN_CUDA_H
#define CTC_DNN_CUDA_H
#include "../codegen_c/cg_int.h"

typedef struct DnnSites {
  Buf rows;   /* the table's initialisers */
  int n;
  unsigned char dtype[2];   /* f32, f64 sites (their alpha and beta constants) */
} DnnSites;

/* Registers convolution `in` of f as a site and writes to b (indented by 2) the cuDNN branch:
 * `#ifdef CTC_HAVE_CUDNN`, `if (the site has an algorithm) { call } else`, `#endif`: the caller
 * writes the im2col branch after it as a braced block. x, w, y: the C expressions of the image,
 * the kernel and the output (for the backward ops: dx, w, dy and x, dw, dy); scratch: the column
 * scratch's expression and size in bytes (NULL, 0: none). */
void cg_dnn_conv(DnnSites *s, Buf *b, const Func *f, const Inst *in, const char *x, const char *w, const char *y,
                 const char *scratch, int64_t scratch_bytes);
/* The site table, CTC_CUDNN, the <P>_dnn_t state and <P>_dnn_init/<P>_dnn_free (nothing when
 * there are no sites; all of it inside #ifdef CTC_HAVE_CUDNN). */
void cg_dnn_support(Buf *b, const DnnSites *s, const char *P, int tf32);
#endif
