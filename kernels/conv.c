/* conv.c - the kernel IR of a convolution (ops.def's CONV2D and its gradients,
 * CONV2D_BWD_INPUT and CONV2D_BWD_WEIGHT): one KS_CALL of the convolution microkernel
 * named after the op, its geometry (ConvGeom: sizes, groups, stride, padding, dilation) in
 * the call. Operands and result are contiguous [N,C,H,W] / [O,C/G,KH,KW] tensors. How it
 * runs is the renderer's: the C target directly, per channel (depthwise), as one GEMM
 * (pointwise) or as im2col/col2im over tiles of the batch and GEMMs
 * (codegen_c/linalg_c.c); the CUDA target through cuDNN or im2col/col2im kernels and
 * cuBLAS (codegen_cuda/ops_cuda.c). */
#include "kir.h"

void kn_conv_geom(const Func *f, const Inst *in, ConvGeom *g) {
  const Type *a0 = &f->values.data[in->args[0]].type, *a1 = &f->values.data[in->args[1]].type;
  const Type *r = &f->values.data[in->res].type;
  const Type *x, *w, *y;   /* image, kernel and output shapes, whichever are operands */
  switch (in->op) {
  case IR_CONV2D: x = a0, w = a1, y = r; break;
  case IR_CONV2D_BWD_INPUT: x = r, w = a1, y = a0; break;
  case IR_CONV2D_BWD_WEIGHT: x = a0, w = r, y = a1; break;
  default: BUG("kn_conv_geom: not a convolution");
  }
  g->N = x->dims[0], g->C = x->dims[1], g->H = x->dims[2], g->W = x->dims[3];
  g->O = w->dims[0], g->KH = w->dims[2], g->KW = w->dims[3], g->OH = y->dims[2], g->OW = y->dims[3];
  g->G = in->attr[6] > 0 ? in->attr[6] : 1;
  g->Cg = g->C / g->G, g->Og = g->O / g->G;
  g->ckk = g->Cg * g->KH * g->KW;
  g->ohw = g->OH * g->OW;
  g->sh = in->attr[0], g->sw = in->attr[1], g->ph = in->attr[2], g->pw = in->attr[3];
  g->dh = in->attr[4], g->dw = in->attr[5];
}

Kir *kir_build_conv(Arena *a, const Func *f, const Kernel *kn, const Inst *in) {
  if (in->op != IR_CONV2D && in->op != IR_CONV2D_BWD_INPUT && in->op != IR_CONV2D_BWD_WEIGHT) return NULL;
  Kir *k = kir_call_new(a, f, kn, in, &f->values.data[in->res].type, ir_ops[in->op].name);   /* conv2d, conv2d_bwd_* */
  KirCall *c = k->body.data[0]->call;
  c->nargs = 2;
  for (int j = 0; j < 2; j++) c->args[j] = c->vals[j] = in->args[j];
  kn_conv_geom(f, in, &c->conv);
  c->low = ir_low_operands(f, in);
  return k;
}
