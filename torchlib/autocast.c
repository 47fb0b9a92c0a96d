/* autocast.c - torch.autocast('cpu', dtype=torch.bfloat16 | torch.float16) on float32
 * storage (torch.autocast('cuda') with --target cuda: PyTorch's CUDA lists, ac_class_cuda),
 * and torch.amp.GradScaler (docs/mixed-precision.md).
 *
 * A tensor PyTorch would hold in bfloat16 (float16) is a float32 IR value whose elements
 * are bfloat16 (float16) numbers (the round_bf16 / round_f16 primitive, ir/ops.def, made
 * them) and whose Tensor is marked (Tensor.low: LOW_BF16, LOW_F16). bf16 follows PyTorch
 * 1.13's CPU autocast, f16 PyTorch 2.x's (1.13 has none): the same lists, plus
 * conv_transpose, prelu and scaled_dot_product_attention on the lower-precision list,
 * and a Python number beside an f16 tensor kept in f32 by *, / (and lerp, addcmul,
 * addcdiv), rounded to f16 by +, -, pow. The text below says bf16 for both.
 * Every torch row, operator, index and attribute
 * given a marked operand, and every row of the lower-precision list inside an
 * autocast region, comes here (registry.c's row_call, host.c), which applies
 * PyTorch 1.13's CPU autocast policy around the ordinary f32 handler:
 *
 *   lower-precision list, in a region (linear, matmul/@, mm, bmm, addmm, baddbmm,
 *       addbmm, conv1d/2d/3d and their nn layers): float operands rounded to bf16,
 *       the result computed in f32 (a GEMM accumulates in f32) and rounded once;
 *   fp32 list, in a region (the losses: cross_entropy, nll_loss, mse_loss, l1_loss,
 *       smooth_l1_loss, huber_loss, kl_div, binary_cross_entropy(_with_logits)): bf16 operands read as f32, an f32 result;
 *   views (view, reshape, transpose, x[i], .T ...): a view of a bf16 value is bf16;
 *   x.float() / x.to(torch.float32): f32 (the same numbers); x.bfloat16() /
 *       x.to(torch.bfloat16): rounded and marked;
 *   any other op: on bf16 operands only (Python numbers and 0-d f32 tensors beside
 *       a dimensioned bf16 one do not count, PyTorch's type promotion) it computes
 *       in f32 and rounds its float results once; bf16 with a dimensioned f32 tensor
 *       promotes to f32 for the elementwise arithmetic ops (+ - * /, where, cat,
 *       stack, maximum ...) and is refused for the others (PyTorch 1.13 raises for
 *       most: layer_norm "expected scalar type BFloat16 but found Float").
 *
 * The cotangent of a bf16 value is rounded by round_bf16's VJP, so backward sees
 * bf16 gradients where PyTorch has them and f32 ones at the f32 master weights. */
#include <string.h>
#include "torch_int.h"

enum { AC_OTHER, AC_LOWER, AC_FP32, AC_VIEW, AC_TO_F32, AC_PROMOTE, AC_BANNED, AC_NORM };

/* The class of row bi in a torch.autocast('cuda') region (--target cuda), where PyTorch's
 * CUDA lists differ from its CPU ones (aten/src/ATen/autocast_mode.cpp, the same for
 * float16 and bfloat16): lower_precision_fp adds mv, addmv, addr, conv_transpose, prelu
 * and scaled_dot_product_attention; fp32 (every float operand read as f32, an f32 result)
 * has the transcendentals, pow, softplus, layer_norm, group_norm, cosine_similarity,
 * logsumexp and the losses, and fp32_set_opt_dtype softmax, log_softmax, sum, cumsum and
 * norm; binary_cross_entropy is banned. -1: as on the CPU (views, promotion, the rest). */
static int ac_class_cuda(int bi) {
  switch (bi) {
  case BI_F_LINEAR: case BI_T_MATMUL: case BI_T_MM: case BI_T_BMM: case BI_T_ADDMM: case BI_T_BADDBMM:
  case BI_T_ADDBMM: case BI_T_MV: case BI_T_ADDMV: case BI_T_ADDR: case BI_F_CONV1D: case BI_F_CONV2D:
  case BI_F_CONV3D: case BI_C_LINEAR: case BI_C_CONV1D: case BI_C_CONV2D: case BI_C_CONV3D:
  case BI_F_CONV_TRANSPOSE1D: case BI_F_CONV_TRANSPOSE2D: case BI_F_CONV_TRANSPOSE3D: case BI_C_CONVTRANSPOSE1D:
  case BI_C_CONVTRANSPOSE2D: case BI_C_CONVTRANSPOSE3D: case BI_F_PRELU: case BI_C_PRELU:
  case BI_F_SCALED_DOT_PRODUCT_ATTENTION:
    return AC_LOWER;
  case BI_T_EXP: case BI_T_EXPM1: case BI_T_LOG: case BI_T_LOG10: case BI_T_LOG2: case BI_T_LOG1P:
  case BI_T_RECIPROCAL: case BI_T_RSQRT: case BI_T_SINH: case BI_T_COSH: case BI_T_TAN: case BI_T_ACOS:
  case BI_T_ASIN: case BI_T_POW: case BI_F_SOFTPLUS: case BI_C_SOFTPLUS: case BI_F_LAYER_NORM: case BI_C_LAYERNORM:
  case BI_F_GROUP_NORM: case BI_C_GROUPNORM: case BI_F_COSINE_SIMILARITY: case BI_C_COSINESIMILARITY:
  case BI_T_LOGSUMEXP: case BI_T_SOFTMAX: case BI_T_LOG_SOFTMAX: case BI_C_SOFTMAX: case BI_C_LOGSOFTMAX:
  case BI_F_SOFTMIN: case BI_C_SOFTMIN: case BI_T_SUM: case BI_T_CUMSUM: case BI_T_NORM:
  case BI_F_CROSS_ENTROPY: case BI_F_NLL_LOSS: case BI_F_MSE_LOSS: case BI_F_L1_LOSS: case BI_F_SMOOTH_L1_LOSS:
  case BI_F_HUBER_LOSS: case BI_F_KL_DIV: case BI_F_BINARY_CROSS_ENTROPY_WITH_LOGITS: case BI_F_POISSON_NLL_LOSS:
  case BI_F_COSINE_EMBEDDING_LOSS: case BI_F_HINGE_EMBEDDING_LOSS: case BI_F_MARGIN_RANKING_LOSS:
  case BI_F_SOFT_MARGIN_LOSS: case BI_F_TRIPLET_MARGIN_LOSS: case BI_C_CROSSENTROPYLOSS: case BI_C_NLLLOSS:
  case BI_C_MSELOSS: case BI_C_L1LOSS: case BI_C_SMOOTHL1LOSS: case BI_C_HUBERLOSS: case BI_C_KLDIVLOSS:
  case BI_C_BCEWITHLOGITSLOSS: case BI_C_POISSONNLLLOSS: case BI_C_COSINEEMBEDDINGLOSS: case BI_C_HINGEEMBEDDINGLOSS:
  case BI_C_MARGINRANKINGLOSS: case BI_C_SOFTMARGINLOSS: case BI_C_TRIPLETMARGINLOSS:
    return AC_FP32;
  case BI_F_BINARY_CROSS_ENTROPY: case BI_C_BCELOSS: return AC_BANNED;
  default: return -1;
  }
}

/* the class of row bi under PyTorch's CPU autocast to `low` (probed: docs/mixed-precision.md),
 * or its CUDA autocast in a torch.autocast('cuda') region (cuda) */
static int ac_class(int bi, int low, int cuda) {
  int c = cuda ? ac_class_cuda(bi) : -1;
  if (c >= 0) return c;
  switch (bi) {
  case BI_F_CONV_TRANSPOSE1D: case BI_F_CONV_TRANSPOSE2D: case BI_F_CONV_TRANSPOSE3D: case BI_C_CONVTRANSPOSE1D:
  case BI_C_CONVTRANSPOSE2D: case BI_C_CONVTRANSPOSE3D: case BI_F_PRELU: case BI_C_PRELU:
  case BI_F_SCALED_DOT_PRODUCT_ATTENTION:   /* PyTorch 2.x's list (f16), not 1.13's (bf16) */
    return low == LOW_F16 ? AC_LOWER : AC_OTHER;
  case BI_F_LINEAR: case BI_T_MATMUL: case BI_T_MM: case BI_T_BMM: case BI_T_ADDMM: case BI_T_BADDBMM:
  case BI_T_ADDBMM: case BI_F_CONV1D: case BI_F_CONV2D: case BI_F_CONV3D:
  case BI_C_LINEAR: case BI_C_CONV1D: case BI_C_CONV2D: case BI_C_CONV3D:
    return AC_LOWER;
  case BI_F_CROSS_ENTROPY: case BI_F_NLL_LOSS: case BI_F_MSE_LOSS: case BI_F_L1_LOSS: case BI_F_SMOOTH_L1_LOSS:
  case BI_F_HUBER_LOSS: case BI_F_KL_DIV: case BI_F_BINARY_CROSS_ENTROPY: case BI_F_BINARY_CROSS_ENTROPY_WITH_LOGITS:
  case BI_C_CROSSENTROPYLOSS: case BI_C_NLLLOSS: case BI_C_MSELOSS: case BI_C_L1LOSS: case BI_C_SMOOTHL1LOSS:
  case BI_C_HUBERLOSS: case BI_C_KLDIVLOSS: case BI_C_BCELOSS: case BI_C_BCEWITHLOGITSLOSS:
    return AC_FP32;
  case BI_T_VIEW: case BI_T_RESHAPE: case BI_T_FLATTEN: case BI_T_SQUEEZE: case BI_T_UNSQUEEZE: case BI_T_TRANSPOSE:
  case BI_T_PERMUTE: case BI_T_T: case BI_T_SPLIT: case BI_T_CHUNK: case BI_T_EXPAND: case BI_T_UNBIND:
  case BI_T_DETACH: case BI_T_CONTIGUOUS: case BI_T_CLONE: case BI_T_CPU: case BI_T_CUDA: case BI_T_VIEW_AS:
  case BI_T_RESHAPE_AS: case BI_T_EXPAND_AS: case BI_T_FLIP: case BI_T_ROLL: case BI_T_REPEAT: case BI_T_TRIL:
  case BI_T_TRIU: case BI_T_GATHER: case BI_T_INDEX_SELECT:
    return AC_VIEW;
  case BI_T_FLOAT:
    return AC_TO_F32;
  case BI_T_ADD: case BI_T_SUB: case BI_T_MUL: case BI_T_DIV: case BI_T_TRUE_DIVIDE: case BI_T_RSUB: case BI_T_WHERE:
  case BI_T_CAT: case BI_T_STACK: case BI_T_MAXIMUM: case BI_T_MINIMUM: case BI_T_POW: case BI_T_LERP:
  case BI_T_ADDCMUL: case BI_T_ADDCDIV:
    return AC_PROMOTE;
  case BI_F_BATCH_NORM: case BI_C_BATCHNORM1D: case BI_C_BATCHNORM2D: case BI_C_BATCHNORM3D:
    return AC_NORM;   /* a bf16 input with f32 weights and statistics: PyTorch's mixed type */
  default: return AC_OTHER;
  }
}

static int is_float_t(const PV *v) {
  return v && v->k == PV_TENSOR && !v->t->cplx && ir_dtype_is_float(v->t->type.dtype);
}
static int is_bf16(const PV *v) { return is_float_t(v) && v->t->low; }   /* bf16 or f16 */
static int is_half_dtype(const PV *v) {
  return v && v->k == PV_DTYPE && (v->dt == DT_BF16_MARK || v->dt == DT_F16_MARK);
}

/* What the operands hold: bf16 or f16 tensors (dimensioned or 0-d; kinds: a bit per
 * LOW_ kind), unmarked float tensors (dimensioned or 0-d), a torch.bfloat16/float16
 * dtype; one level of lists. */
typedef struct { int bf_dim, bf_0, f_dim, f_0, half_dtype, kinds; } Mix;
static void mix_add(Mix *m, const PV *v, int deep) {
  if (!v) return;
  if ((v->k == PV_LIST || v->k == PV_TUPLE) && deep) {
    for (int i = 0; i < v->n; i++) mix_add(m, v->items[i], 0);
    return;
  }
  if (is_half_dtype(v)) m->half_dtype = 1;
  if (!is_float_t(v)) return;
  int dim = v->t->type.ndim > 0;
  if (v->t->low) *(dim ? &m->bf_dim : &m->bf_0) += 1, m->kinds |= 1 << v->t->low;
  else *(dim ? &m->f_dim : &m->f_0) += 1;
}
static Mix mix_of(const PV *self, const Args *A) {
  Mix m = {0};
  mix_add(&m, self, 1);
  for (int i = 0; i < A->nargs; i++) mix_add(&m, A->args[i], 1);
  for (int i = 0; i < A->nkw; i++) mix_add(&m, A->kwvals[i], 1);
  return m;
}

/* ---- the values ---- */

static PV *as_f32(L *L, PV *x);

/* x rounded to `low` (a new tensor, marked); x itself when it is already so */
PV *ac_round(L *L, Span at, PV *x, int low) {
  if (!is_float_t(x) || x->t->low == low) return x;
  int mark = x->t->dec_mark, layer = x->t->dec_layer;   /* attention scores while decode is derived */
  if (mark) dec_allow(L, 1);
  PV *r = t_unary(L, at, low == LOW_F16 ? IR_ROUND_F16 : IR_ROUND_BF16, as_f32(L, x));
  if (mark) dec_allow(L, 0), r->t->dec_mark = mark, r->t->dec_layer = layer;
  r->t->low = low;
  return r;
}

/* x as an unmarked value (the same numbers, now f32): a new Tensor sharing the value */
static PV *as_f32(L *L, PV *x) {
  if (!is_bf16(x)) return x;
  Tensor *t = arena_alloc(L->a, sizeof *t);
  *t = *x->t;
  t->low = 0;
  return pv_tensor(L, t);
}

/* the float tensors of r (a tensor, or a tuple/list of them) rounded (round) or only
 * marked (a view of bf16 data), or unmarked (f32) */
enum { R_ROUND, R_MARK, R_F32 };
static PV *result(L *L, Span at, PV *r, int how, PV *const *ins, int nins, int low) {
  if (!r) return r;
  if (r->k == PV_TUPLE || r->k == PV_LIST) {
    PV **it = arena_alloc(L->a, sizeof(PV *) * (size_t)(r->n + 1));
    int changed = 0;
    for (int i = 0; i < r->n; i++) changed |= (it[i] = result(L, at, r->items[i], how, ins, nins, low)) != r->items[i];
    if (!changed) return r;
    return r->k == PV_TUPLE ? pv_tuple(L, it, r->n) : pv_list(L, it, r->n);
  }
  if (!is_float_t(r)) return r;
  for (int i = 0; i < nins; i++)   /* an operand returned as it is keeps its own mark */
    if (ins[i] == r || (ins[i] && ins[i]->k == PV_TENSOR && ins[i]->t == r->t)) return how == R_F32 ? as_f32(L, r) : r;
  if (how == R_F32) return as_f32(L, r);
  if (how == R_ROUND) return ac_round(L, at, as_f32(L, r), low);   /* a handler's copy of a marked Tensor is not rounded */
  r->t->low = low;   /* a fresh view of bf16 data */
  return r;
}

/* A Python number or a 0-d f32 tensor beside a dimensioned bf16 tensor in arithmetic:
 * PyTorch's type promotion gives the op bf16 operands, so the number is rounded to bf16
 * first (h * 0.353 multiplies by 0.353515625; probed: docs/mixed-precision.md). PyTorch
 * 2.x's f16 kernels of *, / (x / s, s / x) read the number in float (their opmath scalar),
 * and lerp, addcmul and addcdiv do so for bf16 in 1.13 too: keep_f32 (keeps_f32) keeps it. */
static PV *scalar_bf16(L *L, Span at, PV *v, int low, int keep_f32) {
  if ((low == LOW_F16 && keep_f32) || keep_f32 == 2) return v;
  double (*rnd)(double) = low == LOW_F16 ? ir_round_f16 : ir_round_bf16;
  if (v && v->k == PV_FLOAT) return pv_float(L, rnd(v->f));
  if (v && v->k == PV_INT && (v->i > 256 || v->i < -256) && rnd((double)v->i) != (double)v->i)
    return pv_float(L, rnd((double)v->i));
  if (is_float_t(v) && !v->t->low && v->t->type.ndim == 0) return ac_round(L, at, v, low);
  return v;
}
/* 2: the number stays float beside bf16 and f16 tensors (lerp's weight, addcmul's and addcdiv's
 * value: both PyTorch 1.13 and 2.x, probed); 1: beside f16 only (*, /: 2.x keeps it, 1.13
 * rounds it to bf16); 0: rounded */
static int keeps_f32(int bi) {
  if (bi == BI_T_LERP || bi == BI_T_ADDCMUL || bi == BI_T_ADDCDIV) return 2;
  return bi == BI_T_MUL || bi == BI_T_DIV || bi == BI_T_TRUE_DIVIDE || bi == BI_T_MUL_;
}

/* ---- refusals ---- */

static CTC_NORETURN void refuse_mixed(L *L, Span at, const char *what, int low) {
  if (low == LOW_F16)
    lower_error(L, at, "%s on a mix of float16 and float32 tensors is not supported by ctc (outside autocast's "
                       "lists); convert one side with .float() or .half()", what);
  lower_error(L, at, "%s on a mix of bfloat16 and float32 tensors is not supported by ctc (PyTorch 1.13 raises "
                     "\"expected scalar type BFloat16 but found Float\" for most such ops outside autocast's "
                     "lists); convert one side with .float() or .bfloat16()", what);
}

static CTC_NORETURN void refuse_dtype(L *L, Span at, const char *what, int f16) {
  const char *n = f16 ? "float16" : "bfloat16", *m = f16 ? "half" : "bfloat16";
  lower_error(L, at, "torch.%s as a dtype of %s is not supported by ctc: %s values come from "
                     "torch.autocast('cpu', dtype=torch.%s) regions, x.%s() and x.to(torch.%s) "
                     "(float32 storage, docs/mixed-precision.md)", n, what, n, n, m, n);
}

/* ---- the calls ---- */

/* mod: a layer being called, whose parameters and buffers are operands too (a .bfloat16() model's) */
int ac_wants(L *L, const PV *self, const Args *A, int bi, const PV *mod) {
  if (bi == BI_T_AUTOCAST || bi == BI_T_AUTOCAST_MODE || bi == BI_T_BFLOAT16 || bi == BI_T_HALF || bi == BI_MOD_TO)
    return 0;   /* model.to(torch.bfloat16): module.c */
  int cls = L->T->autocast ? ac_class(bi, L->T->autocast, L->T->autocast_cuda) : AC_OTHER;
  if (cls == AC_LOWER || cls == AC_BANNED) return 1;
  Mix m = mix_of(self, A);
  for (int i = 0; mod && i < mod->mod->regs.len; i++)
    if (mod->mod->regs.data[i].kind != REG_CHILD) mix_add(&m, mod->mod->regs.data[i].val, 0);
  return m.bf_dim || m.bf_0 || m.half_dtype;
}

/* an operand list with every float tensor rounded to low (the lower-precision list) */
static PV *round_arg(L *L, Span at, PV *v, int low) {
  if (v && (v->k == PV_LIST || v->k == PV_TUPLE)) {
    PV **it = arena_alloc(L->a, sizeof(PV *) * (size_t)(v->n + 1));
    for (int i = 0; i < v->n; i++) it[i] = ac_round(L, at, v->items[i], low);
    return v->k == PV_TUPLE ? pv_tuple(L, it, v->n) : pv_list(L, it, v->n);
  }
  return ac_round(L, at, v, low);
}

/* x.to(torch.bfloat16), x.to(torch.float32), x.bfloat16(): the dtype asked, or -1 */
static int to_dtype(const Args *A) {
  for (int i = 0; i < A->nargs; i++)
    if (A->args[i] && A->args[i]->k == PV_DTYPE) return (int)A->args[i]->dt;
  for (int i = 0; i < A->nkw; i++)
    if (!strcmp(A->kwnames[i], "dtype") && A->kwvals[i]->k == PV_DTYPE) return (int)A->kwvals[i]->dt;
  return -1;
}

/* call(L, fn, A) under the policy for row bi (a function row, or a layer's row with
 * its module `mod`, whose weight and bias the lower-precision list rounds too) */
PV *ac_call(L *L, int bi, PV *fn, Args *A, PV *mod, BuiltinFn *call) {
  Span at = A->at;
  const char *name = bi_names[bi];
  PV *self = mod ? NULL : fn->self;
  Mix m = mix_of(self, A);
  if (mod)   /* a layer's parameters and buffers are operands too (nn.LayerNorm's weight) */
    for (int i = 0; i < mod->mod->regs.len; i++)
      if (mod->mod->regs.data[i].kind != REG_CHILD) mix_add(&m, mod->mod->regs.data[i].val, 0);
  if ((m.kinds & 6) == 6)
    lower_error(L, at, "'%s' on a mix of bfloat16 and float16 tensors is not supported by ctc; convert one side "
                       "with .float()", name);
  int low = L->T->autocast && !(m.kinds & (1 << (L->T->autocast == LOW_BF16 ? LOW_F16 : LOW_BF16)))
                ? L->T->autocast : m.kinds & (1 << LOW_F16) ? LOW_F16 : LOW_BF16;
  int cls = ac_class(bi, L->T->autocast ? L->T->autocast : low, L->T->autocast && L->T->autocast_cuda);
  if (L->T->autocast && cls == AC_BANNED)   /* PyTorch's binary_cross_entropy_banned */
    lower_error(L, at, "torch.nn.functional.binary_cross_entropy and torch.nn.BCELoss are unsafe to autocast "
                       "(PyTorch's CUDA autocast raises): use binary_cross_entropy_with_logits or "
                       "nn.BCEWithLogitsLoss");
  if (bi == BI_T_TO) {
    int dt = to_dtype(A);
    if (dt == DT_BF16_MARK || dt == DT_F16_MARK) {
      PV *x = self ? self : A->nargs ? A->args[0] : NULL;
      if (!is_float_t(x)) lower_error(L, at, "x.to(torch.%s) needs a float tensor", dt == DT_F16_MARK ? "float16" : "bfloat16");
      return ac_round(L, at, x, dt == DT_F16_MARK ? LOW_F16 : LOW_BF16);
    }
    cls = dt >= 0 ? AC_TO_F32 : AC_VIEW;   /* x.to(device) keeps the dtype */
    if (dt >= 0 && !ir_dtype_is_float((DType)dt)) cls = AC_OTHER;
  }
  if (m.half_dtype) {
    int f16 = 0;
    for (int i = 0; i < A->nargs; i++) f16 |= A->args[i] && A->args[i]->k == PV_DTYPE && A->args[i]->dt == DT_F16_MARK;
    for (int i = 0; i < A->nkw; i++) f16 |= A->kwvals[i]->k == PV_DTYPE && A->kwvals[i]->dt == DT_F16_MARK;
    refuse_dtype(L, at, arena_printf(L->a, "'%s'", name), f16);
  }
  int region = L->T->autocast;
  PV *ins[64];
  int nins = 0;
  if (self && nins < 64) ins[nins++] = self;
  for (int i = 0; i < A->nargs && nins < 64; i++) ins[nins++] = A->args[i];
  for (int i = 0; i < A->nkw && nins < 64; i++) ins[nins++] = A->kwvals[i];

  if (region && cls == AC_LOWER) {
    low = region;
    Args B = *A;
    B.args = arena_alloc(L->a, sizeof(PV *) * (size_t)(A->nargs + 1));
    B.kwvals = arena_alloc(L->a, sizeof(PV *) * (size_t)(A->nkw + 1));
    for (int i = 0; i < A->nargs; i++) B.args[i] = round_arg(L, at, A->args[i], low);
    for (int i = 0; i < A->nkw; i++) B.kwvals[i] = round_arg(L, at, A->kwvals[i], low);
    PV *f = fn;
    if (self) {
      f = pv_builtin(L, fn->bi, fn->s, ac_round(L, at, self, low));
      f->i = fn->i;
    }
    PV *old_w = NULL, *old_b = NULL;
    if (mod) {   /* nn.Linear / nn.Conv: the layer reads self.weight and self.bias */
      old_w = env_get(mod->attrs, "weight");
      old_b = env_get(mod->attrs, "bias");
      if (old_w) env_set(L, mod->attrs, "weight", ac_round(L, at, old_w, low));
      if (old_b) env_set(L, mod->attrs, "bias", ac_round(L, at, old_b, low));
    }
    PV *r = call(L, mod ? mod : f, &B);
    if (old_w) env_set(L, mod->attrs, "weight", old_w);
    if (old_b) env_set(L, mod->attrs, "bias", old_b);
    return result(L, at, r, R_ROUND, NULL, 0, low);
  }
  if (!m.bf_dim && !m.bf_0) return call(L, mod ? mod : fn, A);
  if (cls == AC_TO_F32) return result(L, at, call(L, mod ? mod : fn, A), R_F32, NULL, 0, low);
  if (region && cls == AC_FP32) return result(L, at, call(L, mod ? mod : fn, A), R_F32, NULL, 0, low);
  if (cls == AC_VIEW) {   /* the data is the receiver's (or the first operand's) */
    PV *src = self ? self : A->nargs ? A->args[0] : NULL;
    if (src && (src->k == PV_LIST || src->k == PV_TUPLE)) src = NULL;
    if (is_bf16(src)) return result(L, at, call(L, mod ? mod : fn, A), R_MARK, ins, nins, low);
    if (!m.f_dim && !m.f_0) return call(L, mod ? mod : fn, A);
    cls = AC_OTHER;
  }
  if (to_dtype(A) >= 0 && to_dtype(A) < DT_COUNT && ir_dtype_is_float((DType)to_dtype(A)))
    return result(L, at, call(L, mod ? mod : fn, A), R_F32, NULL, 0, low);   /* x.sum(dtype=torch.float32) */
  int mixed = m.f_dim || (m.f_0 && !m.bf_dim);
  if (mixed) {
    if (cls == AC_PROMOTE) return result(L, at, call(L, mod ? mod : fn, A), R_F32, NULL, 0, low);
    /* batch_norm of a bf16 input with float32 weights and running statistics (PyTorch's mixed
     * type, as a CNN under autocast has it): computed in float32, the statistics kept in float32,
     * the output rounded once */
    PV *in0 = mod ? (A->nargs ? A->args[0] : NULL) : self ? self : A->nargs ? A->args[0] : NULL;
    if (cls == AC_NORM && is_bf16(in0)) return result(L, at, call(L, mod ? mod : fn, A), R_ROUND, NULL, 0, in0->t->low);
    refuse_mixed(L, at, arena_printf(L->a, "'%s'", name), low);
  }
  Args B;
  int inplace_arith = bi == BI_T_ADD_ || bi == BI_T_MUL_ || bi == BI_T_FILL_;
  if (cls == AC_PROMOTE || bi == BI_T_MASKED_FILL || inplace_arith) {   /* numbers become bf16 operands */
    B = *A;
    B.args = arena_alloc(L->a, sizeof(PV *) * (size_t)(A->nargs + 1));
    B.kwvals = arena_alloc(L->a, sizeof(PV *) * (size_t)(A->nkw + 1));
    int keep = keeps_f32(bi);
    for (int i = 0; i < A->nargs; i++) B.args[i] = scalar_bf16(L, at, A->args[i], low, keep);
    for (int i = 0; i < A->nkw; i++)
      B.kwvals[i] = strcmp(A->kwnames[i], "alpha") || low == LOW_F16 ? scalar_bf16(L, at, A->kwvals[i], low, keep)
                                                                     : A->kwvals[i];
    A = &B;
    if (!inplace_arith) return result(L, at, call(L, mod ? mod : fn, A), R_ROUND, NULL, 0, low);
  }
  /* in-place methods (add_, mul_ ...) on a bf16 tensor: it stays bf16 */
  ValId before = self && self->k == PV_TENSOR ? self->t->v : -1;
  PV *r = call(L, mod ? mod : fn, A);
  if (self && is_bf16(self) && self->t->v != before && before >= 0) {
    Tensor *t = arena_alloc(L->a, sizeof *t);
    *t = *self->t;
    t->low = 0;
    PV *cur = pv_tensor(L, t);
    int own = self->t->low;
    t_inplace(L, at, self, ac_round(L, at, cur, own));
    self->t->low = own;
    return r == self ? self : result(L, at, r, R_ROUND, NULL, 0, low);
  }
  return result(L, at, r, R_ROUND, NULL, 0, low);
}

/* a + b, a @ b, -a on tensors (host.c h_binary / h_unary) under the policy */
PV *ac_binary(L *L, Span at, int op, PV *a, PV *b, AcBinaryFn *f) {
  int mm = op == OP_MATMUL;
  if (L->T->autocast && mm) {
    int low = L->T->autocast;
    PV *r = f(L, at, op, ac_round(L, at, a, low), ac_round(L, at, b, low));
    return result(L, at, r, R_ROUND, NULL, 0, low);
  }
  if (!is_bf16(a) && !is_bf16(b)) return f(L, at, op, a, b);
  if (op == OP_POW && L->T->autocast && L->T->autocast_cuda)   /* CUDA's fp32 list: f32 operands, f32 result */
    return as_f32(L, f(L, at, op, as_f32(L, a), as_f32(L, b)));
  Mix m = {0};
  mix_add(&m, a, 0);
  mix_add(&m, b, 0);
  int low = m.kinds & (1 << LOW_F16) ? LOW_F16 : LOW_BF16;
  int mixed = m.f_dim || (m.f_0 && !m.bf_dim);
  if ((m.kinds & 6) == 6)
    lower_error(L, at, "'%s' on a mix of bfloat16 and float16 tensors is not supported by ctc; convert one side with "
                       ".float()", fe_op_spelling(op));
  if (mixed) {
    if (mm) refuse_mixed(L, at, "'@'", low);
    return as_f32(L, f(L, at, op, a, b));
  }
  int keep = op == OP_MUL || op == OP_DIV;
  if (low == LOW_F16 && op == OP_DIV && (a->k == PV_FLOAT || a->k == PV_INT) && is_bf16(b)) {
    /* s / h is h.reciprocal() * s in PyTorch: the reciprocal is an f16 value */
    PV *rec = result(L, at, f(L, at, OP_DIV, pv_float(L, 1.0), b), R_ROUND, NULL, 0, low);
    return result(L, at, f(L, at, OP_MUL, rec, a), R_ROUND, NULL, 0, low);
  }
  return result(L, at, f(L, at, op, scalar_bf16(L, at, a, low, keep), scalar_bf16(L, at, b, low, keep)), R_ROUND,
                NULL, 0, low);
}

/* x[...] and x.T / x.mT / x.data of a bf16 tensor: bf16 views */
PV *ac_view_result(L *L, PV *x, PV *r) {
  if (!is_bf16(x) || !is_float_t(r) || r == x) return r;
  PV *ins[1] = {x};
  return result(L, (Span){0}, r, R_MARK, ins, 1, x->t->low);
}

/* ---- the context manager ---- */

/* torch.autocast(device_type, dtype=None, enabled=True, cache_enabled=None),
 * torch.amp.autocast (the same), torch.cpu.amp.autocast(enabled=True, dtype=torch.bfloat16,
 * cache_enabled=True), torch.cuda.amp.autocast(enabled=True, dtype=torch.float16,
 * cache_enabled=True): a BI_T_AUTOCAST_MODE value whose n is the state it enters (LOW_BF16,
 * LOW_F16, plus 4 for the CUDA lists; 0 off; -1 no change), made anywhere (nanoGPT's
 * module-level `ctx = torch.amp.autocast(...)`) and entered in compiled code (host.c's
 * `with`). fn->self is the namespace it was read from. A 'cuda' region applies with
 * --target cuda (default float16, as PyTorch); on the C target it is PyTorch's on a machine
 * without CUDA: disabled, with a note, leaving an enclosing 'cpu' region in force. */
PV *bi_autocast(L *L, PV *fn, Args *A) {
  Span at = A->at;
  if (fn->bi == BI_T_AUTOCAST_MODE) lower_error(L, at, "an autocast context manager is not callable");
  const char *ns = fn->self && fn->self->k == PV_NS ? fn->self->s : "torch";
  PV *a[4];
  const char *device = "cpu";
  if (!strcmp(ns, "torch.cpu.amp") || !strcmp(ns, "torch.cuda.amp")) {
    PV *b[3];
    bind_args(L, A, "enabled=,dtype=,cache_enabled=", b);
    a[0] = NULL, a[1] = b[1], a[2] = b[0], a[3] = b[2];   /* as torch.autocast's: device, dtype, enabled, cache */
    if (!strcmp(ns, "torch.cuda.amp")) device = "cuda";
  } else {
    PV *b[4];
    bind_args(L, A, "device_type,dtype=,enabled=,cache_enabled=", b);
    if (b[0]->k != PV_STR) lower_error(L, at, "torch.autocast: device_type must be a string such as 'cpu'");
    device = b[0]->s;
    for (int i = 0; i < 4; i++) a[i] = b[i];
  }
  int cuda = !strcmp(device, "cuda");
  if (strcmp(device, "cpu") && !cuda)
    lower_error(L, at, "torch.autocast(device_type='%s') is not supported by ctc: use 'cpu' (the C target) or "
                       "'cuda' (--target cuda)", device);
  int enabled = !a[2] || a[2]->k == PV_NONE || arg_bool(L, at, a[2], "enabled");
  PV *c = pv_builtin(L, BI_T_AUTOCAST_MODE, "autocast", NULL);
  if (cuda && !L->T->cuda) {   /* before any dtype check, as PyTorch */
    if (enabled)
      diag_note(L->d, at, "torch.autocast('cuda') is disabled on the C target, as PyTorch disables it when CUDA is "
                          "not available (it computes in float32); compile with --target cuda, or use "
                          "torch.autocast('cpu', dtype=torch.bfloat16)");
    c->n = -1;
    return c;
  }
  int low = cuda ? LOW_F16 : LOW_BF16;   /* PyTorch's defaults */
  if (a[1] && a[1]->k != PV_NONE) {
    if (a[1]->k != PV_DTYPE) lower_error(L, at, "torch.autocast: dtype must be a torch dtype");
    if (a[1]->dt != DT_BF16_MARK && a[1]->dt != DT_F16_MARK && enabled)
      lower_error(L, at, "torch.autocast('%s') takes dtype=torch.bfloat16 or torch.float16 (ctc compiles no "
                         "other autocast dtype)", device);
    low = a[1]->dt == DT_F16_MARK ? LOW_F16 : LOW_BF16;
  }
  c->n = enabled ? low | (cuda ? 4 : 0) : 0;
  return c;
}

/* x.bfloat16(), x.half(): rounded, marked */
PV *bi_half_method(L *L, PV *fn, Args *A) {
  Span at = A->at;
  PV *x = fn->self, *none[1];
  bind_args(L, A, "", none);
  if (!is_float_t(x)) lower_error(L, at, "x.%s() on a non-float tensor is not supported by ctc", fn->s);
  return ac_round(L, at, x, fn->bi == BI_T_HALF ? LOW_F16 : LOW_BF16);
}

/* compile-time values (a buffer's data, a constant init) rounded as model.bfloat16() / .half() does */
void ac_round_data(double *v, int64_t n, int low) {
  for (int64_t i = 0; i < n; i++) v[i] = low == LOW_F16 ? ir_round_f16(v[i]) : ir_round_bf16(v[i]);
}

/* ---- GradScaler ---- */

/* torch.amp.GradScaler(device='cuda', init_scale=2.**16, growth_factor=2.0, backoff_factor=0.5,
 * growth_interval=2000, enabled=True), torch.cuda.amp.GradScaler and torch.cpu.amp.GradScaler
 * (the same without device): a BI_T_SCALER_OBJ value whose attrs hold the arguments and,
 * while a training function is staged, each optimizer's stage ("stage:<optimizer>": 1
 * unscaled, 2 stepped) and found_inf ("found:<optimizer>", an f32 0-d tensor, 1 where a
 * gradient was inf or NaN), as PyTorch's _per_optimizer_states. Enabled, its scale and
 * growth tracker are state tensors "<scaler>.scale" (f32, init_scale) and
 * "<scaler>._growth_tracker" (i32, 0), the names of its state_dict() prefixed by its
 * module-level name. Disabled (nanoGPT's bf16 and f32 runs), every method is PyTorch's
 * disabled one: scale returns its argument, step calls optimizer.step, unscale_ and update
 * do nothing, get_scale is 1.0. torch.cuda.amp.GradScaler() is enabled here as it is on a
 * GPU (PyTorch without CUDA disables it with a warning). */
enum { GS_UNSCALED = 1, GS_STEPPED = 2 };

static int gs_enabled(PV *sc) { return sc->attrs && env_get(sc->attrs, "enabled")->i; }
static double gs_num(PV *sc, const char *k) { return pv_num(env_get(sc->attrs, k)); }
static const char *gs_name(L *L, PV *sc) { return global_name(L, sc, "scaler"); }

static PV *gs_state(L *L, Span at, PV *sc, int tracker) {
  Type t = {0};
  t.dtype = tracker ? DT_I32 : DT_F32;
  return state_tensor(L, at, arena_printf(L->a, "%s.%s", gs_name(L, sc), tracker ? "_growth_tracker" : "scale"), &t,
                      tracker ? 0 : gs_num(sc, "init_scale"));
}

static const char *gs_key(L *L, const char *what, PV *opt) {
  return arena_printf(L->a, "%s:%s", what, global_name(L, opt, "optimizer"));
}
static int gs_stage(L *L, PV *sc, PV *opt) {
  PV *v = env_get(sc->attrs, gs_key(L, "stage", opt));
  return v && v->k == PV_INT ? (int)v->i : 0;
}

/* outputs * scale (a tensor, or lists and tuples of them) */
static PV *gs_scale(L *L, Span at, PV *sc, PV *v) {
  if (v->k == PV_LIST || v->k == PV_TUPLE) {
    PV **it = arena_alloc(L->a, sizeof(PV *) * (size_t)(v->n + 1));
    for (int i = 0; i < v->n; i++) it[i] = gs_scale(L, at, sc, v->items[i]);
    return v->k == PV_TUPLE ? pv_tuple(L, it, v->n) : pv_list(L, it, v->n);
  }
  if (!is_float_t(v)) lower_error(L, at, "GradScaler.scale() takes a float tensor or a list or tuple of them");
  if (!L->T->fn) lower_error(L, at, "GradScaler.scale() must be called inside a compiled training function");
  PV *r = t_binary(L, at, OP_MUL, as_f32(L, v), gs_state(L, at, sc, 0));
  return v->t->low && v->t->type.ndim ? ac_round(L, at, r, v->t->low) : r;   /* 0-d f16 * 0-d f32 is f32 */
}

/* _amp_foreach_non_finite_check_and_unscale_: found |= any(!isfinite(g)); g * inv_scale (f32) */
typedef struct { PV *inv, *found; } Unscale;
static PV *gs_unscale_one(L *L, Span at, PV *g, void *ctx) {
  Unscale *u = ctx;
  PV *fin = t_cast(L, at, t_anyall(L, at, t_isclass(L, at, 'f', g), NULL, 0, 0, 1), DT_F32);
  PV *bad = t_binary(L, at, OP_SUB, pv_float(L, 1.0), fin);
  u->found = u->found ? t_minmax(L, at, IR_MAX, u->found, bad) : bad;
  return t_binary(L, at, OP_MUL, g, u->inv);
}

static void gs_unscale(L *L, Span at, PV *sc, PV *opt) {
  if (bi_kind_of(opt) != BK_OPTIM) lower_error(L, at, "GradScaler.unscale_() needs an optimizer");
  int st = gs_stage(L, sc, opt);
  if (st == GS_UNSCALED) lower_error(L, at, "unscale_() has already been called on this optimizer since the last update()");
  if (st == GS_STEPPED) lower_error(L, at, "unscale_() is being called after step()");
  /* inv_scale = self._scale.double().reciprocal().float() */
  PV *s64 = t_cast(L, at, gs_state(L, at, sc, 0), DT_F64);
  Unscale u = {t_cast(L, at, t_binary(L, at, OP_DIV, pv_float(L, 1.0), s64), DT_F32), NULL};
  opt_grads_map(L, at, opt, gs_unscale_one, &u);
  if (!u.found) u.found = t_scalar_like(L, at, 0, DT_F32);
  env_set(L, sc->attrs, gs_key(L, "found", opt), u.found);
  env_set(L, sc->attrs, gs_key(L, "stage", opt), pv_int(L, GS_UNSCALED));
}

/* _amp_update_scale_: on inf scale *= backoff, tracker = 0; else tracker += 1 and every
 * growth_interval-th step scale *= growth (kept when that is not finite), tracker = 0;
 * products in double, stored as float, as PyTorch's CPU kernel */
static void gs_update(L *L, Span at, PV *sc, PV *new_scale) {
  PV *scale = gs_state(L, at, sc, 0), *found = NULL;
  Env *e = sc->attrs;
  for (int i = 0; i < e->names.len; i++) {
    if (strncmp(e->names.data[i], "stage:", 6) || e->vals.data[i]->k != PV_INT) continue;
    PV *f = env_get(e, arena_printf(L->a, "found:%s", e->names.data[i] + 6));
    found = found ? t_binary(L, at, OP_ADD, found, f) : f;
    e->vals.data[i] = pv_none(L);
  }
  if (new_scale && new_scale->k != PV_NONE) {
    /* scale.fill_(new_scale) or scale.copy_(new_scale); the tracker is kept */
    PV *v = new_scale->k == PV_TENSOR ? t_cast(L, at, t_reshape(L, at, new_scale, NULL, 0), DT_F32)
                                      : t_scalar_like(L, at, (float)arg_num(L, at, new_scale, "new_scale"), DT_F32);
    state_update(L, at, scale, v);
    return;
  }
  if (!found) lower_error(L, at, "No inf checks were recorded prior to update() (call scaler.step(optimizer) first)");
  PV *tracker = gs_state(L, at, sc, 1);
  PV *inf = t_compare(L, at, OP_NE, found, pv_float(L, 0));
  PV *s64 = t_cast(L, at, scale, DT_F64);
  PV *backed = t_cast(L, at, t_binary(L, at, OP_MUL, s64, pv_float(L, gs_num(sc, "backoff_factor"))), DT_F32);
  PV *grown = t_cast(L, at, t_binary(L, at, OP_MUL, s64, pv_float(L, gs_num(sc, "growth_factor"))), DT_F32);
  grown = t_where(L, at, t_isclass(L, at, 'f', grown), grown, scale);
  PV *succ = t_binary(L, at, OP_ADD, tracker, pv_int(L, 1));
  PV *grow = t_compare(L, at, OP_EQ, succ, pv_int(L, (int64_t)gs_num(sc, "growth_interval")));
  PV *zero = t_scalar_like(L, at, 0, DT_I32);
  state_update(L, at, scale, t_where(L, at, inf, backed, t_where(L, at, grow, grown, scale)));
  state_update(L, at, tracker, t_where(L, at, inf, zero, t_where(L, at, grow, zero, succ)));
}

void gs_finish(L *L, Span at, const char *fname) {
  for (int i = 0; i < L->globals->vals.len; i++) {
    PV *sc = L->globals->vals.data[i];
    if (sc->k != PV_BUILTIN || sc->bi != BI_T_SCALER_OBJ || !sc->attrs) continue;
    Env *e = sc->attrs;
    for (int k = 0; k < e->names.len; k++)
      if (!strncmp(e->names.data[k], "stage:", 6) && e->vals.data[k]->k == PV_INT)
        lower_error(L, at, "'%s' calls %s.step() or unscale_() for '%s' but no %s.update() after it: PyTorch would "
                           "raise at the next call; call %s.update() once per step", fname, L->globals->names.data[i],
                    e->names.data[k] + 6, L->globals->names.data[i], L->globals->names.data[i]);
  }
}

PV *bi_gradscaler(L *L, PV *fn, Args *A) {
  Span at = A->at;
  PV *a[6];
  switch (fn->bi) {
  case BI_T_GRADSCALER: {
    const char *ns = fn->self && fn->self->k == PV_NS ? fn->self->s : "torch.cuda.amp";
    if (!strcmp(ns, "torch.amp")) {
      PV *b[6];
      bind_args(L, A, "device=,init_scale=,growth_factor=,backoff_factor=,growth_interval=,enabled=", b);
      if (b[0] && b[0]->k != PV_NONE && (b[0]->k != PV_STR || (strcmp(b[0]->s, "cpu") && strcmp(b[0]->s, "cuda"))))
        lower_error(L, at, "torch.amp.GradScaler: device must be 'cpu' or 'cuda'");
      for (int i = 0; i < 5; i++) a[i] = b[i + 1];
    } else
      bind_args(L, A, "init_scale=,growth_factor=,backoff_factor=,growth_interval=,enabled=", a);
    PV *sc = pv_builtin(L, BI_T_SCALER_OBJ, "GradScaler", NULL);
    sc->attrs = env_new(L, NULL);
    int enabled = !a[4] || arg_bool(L, at, a[4], "enabled");
    double v[4] = {65536.0, 2.0, 0.5, 2000};
    const char *names[4] = {"init_scale", "growth_factor", "backoff_factor", "growth_interval"};
    for (int i = 0; i < 4; i++) {
      if (a[i] && a[i]->k != PV_NONE) v[i] = arg_num(L, at, a[i], names[i]);
      env_set(L, sc->attrs, names[i], pv_float(L, v[i]));
    }
    if (enabled) {
      if (!(v[1] > 1.0)) lower_error(L, at, "The growth factor must be > 1.0.");
      if (!(v[2] < 1.0)) lower_error(L, at, "The backoff factor must be < 1.0.");
      if (v[3] != (double)(int64_t)v[3] || v[3] < 1 || v[3] > 2147483647.0)
        lower_error(L, at, "GradScaler: growth_interval must be a positive integer");
      if (L->T->fn)
        lower_error(L, at, "an enabled GradScaler made inside compiled code would start from init_scale at every "
                           "call; make it at module level");
    }
    env_set(L, sc->attrs, "enabled", pv_bool(L, enabled));
    return sc;
  }
  case BI_T_SCALER_OBJ: lower_error(L, at, "a GradScaler is not callable");
  default: break;
  }
  PV *sc = fn->self;
  int on = gs_enabled(sc);
  switch (fn->bi) {
  case BI_GS_SCALE: bind_args(L, A, "outputs", a); return on ? gs_scale(L, at, sc, a[0]) : a[0];
  case BI_GS_UNSCALE_:
    bind_args(L, A, "optimizer", a);
    if (on) gs_unscale(L, at, sc, a[0]);
    return pv_none(L);
  case BI_GS_UPDATE:
    bind_args(L, A, "new_scale=", a);
    if (on) gs_update(L, at, sc, a[0]);
    return pv_none(L);
  case BI_GS_GET_SCALE:
    bind_args(L, A, "", a);
    if (!on) return pv_float(L, 1.0);
    return L->T->fn ? gs_state(L, at, sc, 0) : pv_float(L, gs_num(sc, "init_scale"));
  case BI_GS_IS_ENABLED: bind_args(L, A, "", a); return pv_bool(L, on);
  case BI_GS_GET_GROWTH_FACTOR: bind_args(L, A, "", a); return pv_float(L, gs_num(sc, "growth_factor"));
  case BI_GS_GET_BACKOFF_FACTOR: bind_args(L, A, "", a); return pv_float(L, gs_num(sc, "backoff_factor"));
  case BI_GS_GET_GROWTH_INTERVAL: bind_args(L, A, "", a); return pv_int(L, (int64_t)gs_num(sc, "growth_interval"));
  case BI_GS_STATE_DICT: {   /* PyTorch's keys; in compiled code the scale and tracker are the state tensors */
    bind_args(L, A, "", a);
    PV *d = pv_dict(L);
    if (on) {
      pv_dict_set(L, at, d, pv_str(L, "scale"), L->T->fn ? gs_state(L, at, sc, 0) : pv_float(L, gs_num(sc, "init_scale")));
      pv_dict_set(L, at, d, pv_str(L, "growth_factor"), pv_float(L, gs_num(sc, "growth_factor")));
      pv_dict_set(L, at, d, pv_str(L, "backoff_factor"), pv_float(L, gs_num(sc, "backoff_factor")));
      pv_dict_set(L, at, d, pv_str(L, "growth_interval"), pv_int(L, (int64_t)gs_num(sc, "growth_interval")));
      pv_dict_set(L, at, d, pv_str(L, "_growth_tracker"), L->T->fn ? gs_state(L, at, sc, 1) : pv_int(L, 0));
    }
    return sd_returned(L, sc, d);
  }
  case BI_GS_LOAD_STATE_DICT: {   /* the scale and tracker are saved and loaded with the weights */
    bind_args(L, A, "state_dict", a);
    if (!sd_is_own(sc, a[0]))
      lower_error(L, at, "GradScaler.load_state_dict(): ctc keeps the scaler's scale and growth tracker with the "
                         "training state ('%s.scale', '%s._growth_tracker': saved by --save-training-state, loaded "
                         "by --weights); only the dict its own state_dict() returned can be loaded back (a no-op)",
                  gs_name(L, sc), gs_name(L, sc));
    return pv_none(L);
  }
  default: { /* step(optimizer, *args, **kwargs): optimizer.step(*args, **kwargs), skipped on inf */
    if (A->nargs < 1) lower_error(L, at, "GradScaler.step() needs the optimizer");
    PV *opt = A->args[0];
    PV *step = opt->k == PV_OBJ && opt->cls && opt->cls->bi ? bi_lookup(L, bi_rows[opt->cls->bi].methods, "step", opt)
                                                          : NULL;
    if (!step) lower_error(L, at, "GradScaler.step() needs an optimizer");
    if (!on) return call_value(L, at, step, A->args + 1, A->nargs - 1, A->kwnames, A->kwvals, A->nkw);
    for (int i = 0; i < A->nkw; i++)
      if (!strcmp(A->kwnames[i], "closure"))
        lower_error(L, at, "Closure use is not currently supported if GradScaler is enabled.");
    if (gs_stage(L, sc, opt) == GS_STEPPED)
      lower_error(L, at, "step() has already been called since the last update().");
    if (gs_stage(L, sc, opt) != GS_UNSCALED) gs_unscale(L, at, sc, opt);
    PV *found = env_get(sc->attrs, gs_key(L, "found", opt));
    L->T->step_skip = t_compare(L, at, OP_NE, found, pv_float(L, 0));
    call_value(L, at, step, A->args + 1, A->nargs - 1, A->kwnames, A->kwvals, A->nkw);
    L->T->step_skip = NULL;
    env_set(L, sc->attrs, gs_key(L, "stage", opt), pv_int(L, GS_STEPPED));
    return pv_none(L);
  }
  }
}
