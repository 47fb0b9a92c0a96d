/* dnn_cuda.c - cuDNN convolutions in the generated .cu (see dnn_cuda.h). */
#include "dnn_cuda.h"

typedef long long ll;

void cg_dnn_conv(DnnSites *s, Buf *b, const Func *f, const Inst *in, const char *x, const char *w, const char *y,
                 const char *scratch, int64_t scratch_bytes) {
  ConvGeom g;
  kn_conv_geom(f, in, &g);
  const int k = s->n++;
  const int op = in->op == IR_CONV2D ? 0 : in->op == IR_CONV2D_BWD_INPUT ? 1 : 2;
  const int f64 = f->values.data[in->res].type.dtype == DT_F64;
  s->dtype[f64] = 1;
  const int64_t *a = in->attr;
  char where[256];
  cg_where(where, sizeof where, in->loc);
  static const char *const what[] = {"forward", "backward data", "backward filter"};
  cg_printf(&s->rows, "  {%d, %d, %lld, %lld, %lld, %lld, %lld, %lld, %lld, %lld, %lld, %lld, %lld, %lld, %lld, %lld, "
                      "%lld, %lld, %lld},   /* %d: %s %s */\n",
            op, f64, (ll)g.N, (ll)g.C, (ll)g.H, (ll)g.W, (ll)g.O, (ll)g.KH, (ll)g.KW, (ll)g.OH, (ll)g.OW, (ll)a[0],
            (ll)a[1], (ll)a[2], (ll)a[3], (ll)a[4], (ll)a[5], (ll)g.G, (ll)(scratch ? scratch_bytes : 0), k, where,
            what[op]);
  const char *one = f64 ? "&ctc_dnn_one_f64" : "&ctc_dnn_one_f32", *zero = f64 ? "&ctc_dnn_zero_f64" : "&ctc_dnn_zero_f32";
  char ws[256];
  snprintf(ws, sizeof ws, "%s, %lld", scratch ? scratch : "NULL", (ll)(scratch ? scratch_bytes : 0));
  cg_printf(b, "#ifdef CTC_HAVE_CUDNN\n  if (ctc_dnn->algo[%d] >= 0) {   /* cuDNN, %s */\n", k, what[op]);
  switch (op) {
  case 0:
    cg_printf(b, "    CTC_CUDNN(cudnnConvolutionForward(ctc_dnn->h, %s, ctc_dnn->x[%d], %s, ctc_dnn->w[%d], %s, ctc_dnn->conv[%d],\n"
                 "                                      (cudnnConvolutionFwdAlgo_t)ctc_dnn->algo[%d], %s, %s, ctc_dnn->y[%d], %s));\n",
              one, k, x, k, w, k, k, ws, zero, k, y);
    break;
  case 1:
    cg_printf(b, "    CTC_CUDNN(cudnnConvolutionBackwardData(ctc_dnn->h, %s, ctc_dnn->w[%d], %s, ctc_dnn->y[%d], %s, ctc_dnn->conv[%d],\n"
                 "                                           (cudnnConvolutionBwdDataAlgo_t)ctc_dnn->algo[%d], %s, %s, ctc_dnn->x[%d], "
                 "%s));\n",
              one, k, w, k, y, k, k, ws, zero, k, x);
    break;
  default:
    cg_printf(b, "    CTC_CUDNN(cudnnConvolutionBackwardFilter(ctc_dnn->h, %s, ctc_dnn->x[%d], %s, ctc_dnn->y[%d], %s, ctc_dnn->conv[%d],\n"
                 "                                             (cudnnConvolutionBwdFilterAlgo_t)ctc_dnn->algo[%d], %s, %s, ctc_dnn->w[%d], "
                 "%s));\n",
              one, k, x, k, y, k, k, ws, zero, k, w);
  }
  cg_puts(b, "  } else   /* no algorithm fits the scratch: im2col + cuBLAS */\n#endif\n");
}

static const char support_text[] =
    "#ifdef CTC_HAVE_CUDNN\n"
    "/* ---- cuDNN (builds with CTC_HAVE_CUDNN): the convolutions' descriptors and algorithms ---- */\n"
    "#define CTC_CUDNN(call)                                                                   \\\n"
    "  do {                                                                                \\\n"
    "    const cudnnStatus_t ctc_d = (call);                                               \\\n"
    "    if (ctc_d != CUDNN_STATUS_SUCCESS) {                                              \\\n"
    "      fprintf(stderr, \"%s:%d: %s: %s\\n\", __FILE__, __LINE__, #call, cudnnGetErrorString(ctc_d)); \\\n"
    "      return CTC_ERR_DEVICE;                                                          \\\n"
    "    }                                                                                 \\\n"
    "  } while (0)\n"

    "/* A convolution of the entries: op 0 forward, 1 backward data, 2 backward filter; x[n,c,h,w],\n"
    " * w[o,c/groups,kh,kw], y[n,o,oh,ow]; ws: its column scratch, the most workspace it may use. */\n"
    "typedef struct ctc_dnn_site {\n"
    "  int op, f64, n, c, h, w, o, kh, kw, oh, ow, sh, sw, ph, pw, dh, dw, groups;\n"
    "  size_t ws;\n"
    "} ctc_dnn_site;\n";

void cg_dnn_support(Buf *b, const DnnSites *s, const char *P, int tf32) {
  if (!s->n) return;
  cg_puts(b, support_text);
  if (s->dtype[0]) cg_puts(b, "static const float ctc_dnn_one_f32 = 1, ctc_dnn_zero_f32 = 0;   /* alpha, beta */\n");
  if (s->dtype[1]) cg_puts(b, "static const double ctc_dnn_one_f64 = 1, ctc_dnn_zero_f64 = 0;\n");
  cg_printf(b, "static const ctc_dnn_site %s_dnn_sites[%d] = {\n%s};\n", P, s->n, s->rows.s);
  cg_printf(b, "typedef struct %s_dnn_t {\n  cudnnHandle_t h;\n  cudnnTensorDescriptor_t x[%d], y[%d];\n"
               "  cudnnFilterDescriptor_t w[%d];\n  cudnnConvolutionDescriptor_t conv[%d];\n"
               "  int algo[%d];   /* -1: none fits the scratch (im2col + cuBLAS) */\n} %s_dnn_t;\n\n",
            P, s->n, s->n, s->n, s->n, s->n, P);
  cg_printf(b, "/* The cuDNN handle and every site's descriptors and algorithm (m->dnn). */\n"
               "static int %s_dnn_init(%s_t *m) {\n  %s_dnn_t *D = (%s_dnn_t *)calloc(1, sizeof *D);\n"
               "  if (!D) return CTC_ERR_NOMEM;\n  m->dnn = D;\n"
               "  CTC_CUDNN(cudnnCreate(&D->h));\n  CTC_CUDNN(cudnnSetStream(D->h, m->stream));\n"
               "  for (int k = 0; k < %d; k++) {\n    const ctc_dnn_site *s = &%s_dnn_sites[k];\n",
            P, P, P, P, s->n, P);
  cg_puts(b, "    const cudnnDataType_t dt = s->f64 ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT;\n"
             "    CTC_CUDNN(cudnnCreateTensorDescriptor(&D->x[k]));\n"
             "    CTC_CUDNN(cudnnSetTensor4dDescriptor(D->x[k], CUDNN_TENSOR_NCHW, dt, s->n, s->c, s->h, s->w));\n"
             "    CTC_CUDNN(cudnnCreateTensorDescriptor(&D->y[k]));\n"
             "    CTC_CUDNN(cudnnSetTensor4dDescriptor(D->y[k], CUDNN_TENSOR_NCHW, dt, s->n, s->o, s->oh, s->ow));\n"
             "    CTC_CUDNN(cudnnCreateFilterDescriptor(&D->w[k]));\n"
             "    CTC_CUDNN(cudnnSetFilter4dDescriptor(D->w[k], dt, CUDNN_TENSOR_NCHW, s->o, s->c / s->groups, s->kh, s->kw));\n"
             "    CTC_CUDNN(cudnnCreateConvolutionDescriptor(&D->conv[k]));\n"
             "    CTC_CUDNN(cudnnSetConvolution2dDescriptor(D->conv[k], s->ph, s->pw, s->sh, s->sw, s->dh, s->dw,\n"
             "                                              CUDNN_CROSS_CORRELATION, dt));\n"
             "    CTC_CUDNN(cudnnSetConvolutionGroupCount(D->conv[k], s->groups));\n");
  cg_puts(b, tf32 ? "    CTC_CUDNN(cudnnSetConvolutionMathType(D->conv[k], CUDNN_DEFAULT_MATH));   /* --tf32 */\n"
                  : "    CTC_CUDNN(cudnnSetConvolutionMathType(D->conv[k], CUDNN_FMA_MATH));   /* no TF32 (--tf32 allows it) */\n");
  cg_puts(b, "    /* cuDNN's heuristics, fastest first: the first deterministic one whose workspace fits */\n"
             "    D->algo[k] = -1;\n    int got = 0;\n"
             "    if (s->op == 0) {\n"
             "      cudnnConvolutionFwdAlgoPerf_t p[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];\n"
             "      CTC_CUDNN(cudnnGetConvolutionForwardAlgorithm_v7(D->h, D->x[k], D->w[k], D->conv[k], D->y[k],\n"
             "                                                       CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &got, p));\n"
             "      for (int i = 0; i < got && D->algo[k] < 0; i++)\n"
             "        if (p[i].status == CUDNN_STATUS_SUCCESS && p[i].memory <= s->ws && p[i].determinism == CUDNN_DETERMINISTIC)\n"
             "          D->algo[k] = (int)p[i].algo;\n"
             "    } else if (s->op == 1) {\n"
             "      cudnnConvolutionBwdDataAlgoPerf_t p[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];\n"
             "      CTC_CUDNN(cudnnGetConvolutionBackwardDataAlgorithm_v7(D->h, D->w[k], D->y[k], D->conv[k], D->x[k],\n"
             "                                                            CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &got, p));\n"
             "      for (int i = 0; i < got && D->algo[k] < 0; i++)\n"
             "        if (p[i].status == CUDNN_STATUS_SUCCESS && p[i].memory <= s->ws && p[i].determinism == CUDNN_DETERMINISTIC)\n"
             "          D->algo[k] = (int)p[i].algo;\n"
             "    } else {\n"
             "      cudnnConvolutionBwdFilterAlgoPerf_t p[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];\n"
             "      CTC_CUDNN(cudnnGetConvolutionBackwardFilterAlgorithm_v7(D->h, D->x[k], D->y[k], D->conv[k], D->w[k],\n"
             "                                                              CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &got, p));\n"
             "      for (int i = 0; i < got && D->algo[k] < 0; i++)\n"
             "        if (p[i].status == CUDNN_STATUS_SUCCESS && p[i].memory <= s->ws && p[i].determinism == CUDNN_DETERMINISTIC)\n"
             "          D->algo[k] = (int)p[i].algo;\n"
             "    }\n  }\n  return CTC_OK;\n}\n\n");
  cg_printf(b, "static void %s_dnn_free(%s_t *m) {\n  %s_dnn_t *D = (%s_dnn_t *)m->dnn;\n  if (!D) return;\n"
               "  for (int k = 0; k < %d; k++) {\n"
               "    if (D->x[k]) cudnnDestroyTensorDescriptor(D->x[k]);\n"
               "    if (D->y[k]) cudnnDestroyTensorDescriptor(D->y[k]);\n"
               "    if (D->w[k]) cudnnDestroyFilterDescriptor(D->w[k]);\n"
               "    if (D->conv[k]) cudnnDestroyConvolutionDescriptor(D->conv[k]);\n  }\n"
               "  if (D->h) cudnnDestroy(D->h);\n  free(D);\n  m->dnn = NULL;\n}\n#endif\n\n",
            P, P, P, P, s->n);
}
