/* autocast.c - torch.autocast('cpu', dtype=torch.bfloat16) on float32 storage
 * (docs/mixed-precision.md).
 *
 * A tensor PyTorch would hold in bfloat16 is a float32 IR value whose elements are
 * bfloat16 numbers (the round_bf16 primitive, ir/ops.def, made them) and whose
 * Tensor is marked (Tensor.bf16). Every torch row, operator, index and attribute
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

enum { AC_OTHER, AC_LOWER, AC_FP32, AC_VIEW, AC_TO_F32, AC_PROMOTE };

/* the class of row bi under PyTorch 1.13's CPU autocast (probed: docs/mixed-precision.md) */
static int ac_class(int bi) {
  switch (bi) {
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
  default: return AC_OTHER;
  }
}

static int is_float_t(const PV *v) {
  return v && v->k == PV_TENSOR && !v->t->cplx && ir_dtype_is_float(v->t->type.dtype);
}
static int is_bf16(const PV *v) { return is_float_t(v) && v->t->bf16; }
static int is_half_dtype(const PV *v) {
  return v && v->k == PV_DTYPE && (v->dt == DT_BF16_MARK || v->dt == DT_F16_MARK);
}

/* What the operands hold: bf16 tensors (dimensioned or 0-d), unmarked float tensors
 * (dimensioned or 0-d), a torch.bfloat16/float16 dtype; one level of lists. */
typedef struct { int bf_dim, bf_0, f_dim, f_0, half_dtype; } Mix;
static void mix_add(Mix *m, const PV *v, int deep) {
  if (!v) return;
  if ((v->k == PV_LIST || v->k == PV_TUPLE) && deep) {
    for (int i = 0; i < v->n; i++) mix_add(m, v->items[i], 0);
    return;
  }
  if (is_half_dtype(v)) m->half_dtype = 1;
  if (!is_float_t(v)) return;
  int dim = v->t->type.ndim > 0;
  if (v->t->bf16) *(dim ? &m->bf_dim : &m->bf_0) += 1;
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

/* x rounded to bf16 (a new tensor, marked); x itself when it is already bf16 */
PV *ac_round(L *L, Span at, PV *x) {
  if (!is_float_t(x) || x->t->bf16) return x;
  PV *r = t_unary(L, at, IR_ROUND_BF16, x);
  r->t->bf16 = 1;
  return r;
}

/* x as an unmarked value (the same numbers, now f32): a new Tensor sharing the value */
static PV *as_f32(L *L, PV *x) {
  if (!is_bf16(x)) return x;
  Tensor *t = arena_alloc(L->a, sizeof *t);
  *t = *x->t;
  t->bf16 = 0;
  return pv_tensor(L, t);
}

/* the float tensors of r (a tensor, or a tuple/list of them) rounded (round) or only
 * marked (a view of bf16 data), or unmarked (f32) */
enum { R_ROUND, R_MARK, R_F32 };
static PV *result(L *L, Span at, PV *r, int how, PV *const *ins, int nins) {
  if (!r) return r;
  if (r->k == PV_TUPLE || r->k == PV_LIST) {
    PV **it = arena_alloc(L->a, sizeof(PV *) * (size_t)(r->n + 1));
    int changed = 0;
    for (int i = 0; i < r->n; i++) changed |= (it[i] = result(L, at, r->items[i], how, ins, nins)) != r->items[i];
    if (!changed) return r;
    return r->k == PV_TUPLE ? pv_tuple(L, it, r->n) : pv_list(L, it, r->n);
  }
  if (!is_float_t(r)) return r;
  for (int i = 0; i < nins; i++)   /* an operand returned as it is keeps its own mark */
    if (ins[i] == r || (ins[i] && ins[i]->k == PV_TENSOR && ins[i]->t == r->t)) return how == R_F32 ? as_f32(L, r) : r;
  if (how == R_F32) return as_f32(L, r);
  if (how == R_ROUND) return ac_round(L, at, as_f32(L, r));   /* a handler's copy of a marked Tensor is not rounded */
  r->t->bf16 = 1;   /* a fresh view of bf16 data */
  return r;
}

/* A Python number or a 0-d f32 tensor beside a dimensioned bf16 tensor in arithmetic:
 * PyTorch's type promotion gives the op bf16 operands, so the number is rounded to bf16
 * first (h * 0.353 multiplies by 0.353515625; probed: docs/mixed-precision.md). */
static PV *scalar_bf16(L *L, Span at, PV *v) {
  if (v && v->k == PV_FLOAT) return pv_float(L, ir_round_bf16(v->f));
  if (v && v->k == PV_INT && (v->i > 256 || v->i < -256) && ir_round_bf16((double)v->i) != (double)v->i)
    return pv_float(L, ir_round_bf16((double)v->i));
  if (is_float_t(v) && !v->t->bf16 && v->t->type.ndim == 0) return ac_round(L, at, v);
  return v;
}

/* ---- refusals ---- */

static CTC_NORETURN void refuse_mixed(L *L, Span at, const char *what) {
  lower_error(L, at, "%s on a mix of bfloat16 and float32 tensors is not supported by ctc (PyTorch 1.13 raises "
                     "\"expected scalar type BFloat16 but found Float\" for most such ops outside autocast's "
                     "lists); convert one side with .float() or .bfloat16()", what);
}

static CTC_NORETURN void refuse_dtype(L *L, Span at, const char *what, int f16) {
  if (f16)
    lower_error(L, at, "torch.float16 is not supported by ctc (%s): ctc's C target has bfloat16 autocast only "
                       "(torch.autocast('cpu', dtype=torch.bfloat16))", what);
  lower_error(L, at, "torch.bfloat16 as a dtype of %s is not supported by ctc: bfloat16 values come from "
                     "torch.autocast('cpu', dtype=torch.bfloat16) regions, x.bfloat16() and x.to(torch.bfloat16) "
                     "(float32 storage, docs/mixed-precision.md)", what);
}

/* ---- the calls ---- */

int ac_wants(L *L, const PV *self, const Args *A, int bi) {
  if (bi == BI_T_AUTOCAST || bi == BI_T_AUTOCAST_MODE || bi == BI_T_BFLOAT16) return 0;
  if (L->T->autocast && ac_class(bi) == AC_LOWER) return 1;
  Mix m = mix_of(self, A);
  return m.bf_dim || m.bf_0 || m.half_dtype;
}

/* an operand list with every float tensor rounded to bf16 (the lower-precision list) */
static PV *round_arg(L *L, Span at, PV *v) {
  if (v && (v->k == PV_LIST || v->k == PV_TUPLE)) {
    PV **it = arena_alloc(L->a, sizeof(PV *) * (size_t)(v->n + 1));
    for (int i = 0; i < v->n; i++) it[i] = ac_round(L, at, v->items[i]);
    return v->k == PV_TUPLE ? pv_tuple(L, it, v->n) : pv_list(L, it, v->n);
  }
  return ac_round(L, at, v);
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
  int cls = ac_class(bi);
  if (bi == BI_T_TO) {
    int dt = to_dtype(A);
    if (dt == DT_F16_MARK) refuse_dtype(L, at, "x.to()", 1);
    if (dt == DT_BF16_MARK) {
      PV *x = self ? self : A->nargs ? A->args[0] : NULL;
      if (!is_float_t(x)) lower_error(L, at, "x.to(torch.bfloat16) needs a float tensor");
      return ac_round(L, at, x);
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
    Args B = *A;
    B.args = arena_alloc(L->a, sizeof(PV *) * (size_t)(A->nargs + 1));
    B.kwvals = arena_alloc(L->a, sizeof(PV *) * (size_t)(A->nkw + 1));
    for (int i = 0; i < A->nargs; i++) B.args[i] = round_arg(L, at, A->args[i]);
    for (int i = 0; i < A->nkw; i++) B.kwvals[i] = round_arg(L, at, A->kwvals[i]);
    PV *f = fn;
    if (self) {
      f = pv_builtin(L, fn->bi, fn->s, ac_round(L, at, self));
      f->i = fn->i;
    }
    PV *old_w = NULL, *old_b = NULL;
    if (mod) {   /* nn.Linear / nn.Conv: the layer reads self.weight and self.bias */
      old_w = env_get(mod->attrs, "weight");
      old_b = env_get(mod->attrs, "bias");
      if (old_w) env_set(L, mod->attrs, "weight", ac_round(L, at, old_w));
      if (old_b) env_set(L, mod->attrs, "bias", ac_round(L, at, old_b));
    }
    PV *r = call(L, mod ? mod : f, &B);
    if (old_w) env_set(L, mod->attrs, "weight", old_w);
    if (old_b) env_set(L, mod->attrs, "bias", old_b);
    return result(L, at, r, R_ROUND, NULL, 0);
  }
  if (!m.bf_dim && !m.bf_0) return call(L, mod ? mod : fn, A);
  if (cls == AC_TO_F32) return result(L, at, call(L, mod ? mod : fn, A), R_F32, NULL, 0);
  if (region && cls == AC_FP32) return result(L, at, call(L, mod ? mod : fn, A), R_F32, NULL, 0);
  if (cls == AC_VIEW) {   /* the data is the receiver's (or the first operand's) */
    PV *src = self ? self : A->nargs ? A->args[0] : NULL;
    if (src && (src->k == PV_LIST || src->k == PV_TUPLE)) src = NULL;
    if (is_bf16(src)) return result(L, at, call(L, mod ? mod : fn, A), R_MARK, ins, nins);
    if (!m.f_dim && !m.f_0) return call(L, mod ? mod : fn, A);
    cls = AC_OTHER;
  }
  if (to_dtype(A) >= 0 && to_dtype(A) < DT_COUNT && ir_dtype_is_float((DType)to_dtype(A)))
    return result(L, at, call(L, mod ? mod : fn, A), R_F32, NULL, 0);   /* x.sum(dtype=torch.float32) */
  int mixed = m.f_dim || (m.f_0 && !m.bf_dim);
  if (mixed) {
    if (cls == AC_PROMOTE) return result(L, at, call(L, mod ? mod : fn, A), R_F32, NULL, 0);
    refuse_mixed(L, at, arena_printf(L->a, "'%s'", name));
  }
  Args B;
  int inplace_arith = bi == BI_T_ADD_ || bi == BI_T_MUL_ || bi == BI_T_FILL_;
  if (cls == AC_PROMOTE || bi == BI_T_MASKED_FILL || inplace_arith) {   /* numbers become bf16 operands */
    B = *A;
    B.args = arena_alloc(L->a, sizeof(PV *) * (size_t)(A->nargs + 1));
    B.kwvals = arena_alloc(L->a, sizeof(PV *) * (size_t)(A->nkw + 1));
    for (int i = 0; i < A->nargs; i++) B.args[i] = scalar_bf16(L, at, A->args[i]);
    for (int i = 0; i < A->nkw; i++)
      B.kwvals[i] = strcmp(A->kwnames[i], "alpha") ? scalar_bf16(L, at, A->kwvals[i]) : A->kwvals[i];
    A = &B;
    if (!inplace_arith) return result(L, at, call(L, mod ? mod : fn, A), R_ROUND, NULL, 0);
  }
  /* in-place methods (add_, mul_ ...) on a bf16 tensor: it stays bf16 */
  ValId before = self && self->k == PV_TENSOR ? self->t->v : -1;
  PV *r = call(L, mod ? mod : fn, A);
  if (self && is_bf16(self) && self->t->v != before && before >= 0) {
    Tensor *t = arena_alloc(L->a, sizeof *t);
    *t = *self->t;
    t->bf16 = 0;
    PV *cur = pv_tensor(L, t);
    t_inplace(L, at, self, ac_round(L, at, cur));
    self->t->bf16 = 1;
    return r == self ? self : result(L, at, r, R_ROUND, NULL, 0);
  }
  return result(L, at, r, R_ROUND, NULL, 0);
}

/* a + b, a @ b, -a on tensors (host.c h_binary / h_unary) under the policy */
PV *ac_binary(L *L, Span at, int op, PV *a, PV *b, AcBinaryFn *f) {
  int mm = op == OP_MATMUL;
  if (L->T->autocast && mm) {
    PV *r = f(L, at, op, ac_round(L, at, a), ac_round(L, at, b));
    return result(L, at, r, R_ROUND, NULL, 0);
  }
  if (!is_bf16(a) && !is_bf16(b)) return f(L, at, op, a, b);
  Mix m = {0};
  mix_add(&m, a, 0);
  mix_add(&m, b, 0);
  int mixed = m.f_dim || (m.f_0 && !m.bf_dim);
  if (mixed) {
    if (mm) refuse_mixed(L, at, "'@'");
    return as_f32(L, f(L, at, op, a, b));
  }
  return result(L, at, f(L, at, op, scalar_bf16(L, at, a), scalar_bf16(L, at, b)), R_ROUND, NULL, 0);
}

/* x[...] and x.T / x.mT / x.data of a bf16 tensor: bf16 views */
PV *ac_view_result(L *L, PV *x, PV *r) {
  if (!is_bf16(x) || !is_float_t(r) || r == x) return r;
  PV *ins[1] = {x};
  return result(L, (Span){0}, r, R_MARK, ins, 1);
}

/* ---- the context manager ---- */

/* torch.autocast(device_type, dtype=None, enabled=True, cache_enabled=None),
 * torch.amp.autocast (the same), torch.cpu.amp.autocast(enabled=True, dtype=torch.bfloat16,
 * cache_enabled=True), torch.cuda.amp.autocast (refused): a BI_T_AUTOCAST_MODE value
 * whose n is the state it enters (1 on, 0 off), made anywhere (nanoGPT's module-level
 * `ctx = torch.amp.autocast(...)`) and entered in compiled code (host.c's `with`).
 * fn->self is the namespace it was read from. */
PV *bi_autocast(L *L, PV *fn, Args *A) {
  Span at = A->at;
  if (fn->bi == BI_T_AUTOCAST_MODE) lower_error(L, at, "an autocast context manager is not callable");
  const char *ns = fn->self && fn->self->k == PV_NS ? fn->self->s : "torch";
  PV *a[4];
  const char *device = "cpu";
  if (!strcmp(ns, "torch.cuda.amp"))
    lower_error(L, at, "torch.cuda.amp.autocast is not supported by ctc: its C target compiles for the CPU; "
                       "use torch.autocast('cpu', dtype=torch.bfloat16)");
  if (!strcmp(ns, "torch.cpu.amp")) {
    PV *b[3];
    bind_args(L, A, "enabled=,dtype=,cache_enabled=", b);
    a[0] = NULL, a[1] = b[1], a[2] = b[0], a[3] = b[2];   /* as torch.autocast's: device, dtype, enabled, cache */
  } else {
    PV *b[4];
    bind_args(L, A, "device_type,dtype=,enabled=,cache_enabled=", b);
    if (b[0]->k != PV_STR) lower_error(L, at, "torch.autocast: device_type must be a string such as 'cpu'");
    device = b[0]->s;
    for (int i = 0; i < 4; i++) a[i] = b[i];
  }
  if (strcmp(device, "cpu"))
    lower_error(L, at, "torch.autocast(device_type='%s') is not supported by ctc: its C target compiles for the "
                       "CPU; use torch.autocast('cpu', dtype=torch.bfloat16)", device);
  int enabled = !a[2] || a[2]->k == PV_NONE || arg_bool(L, at, a[2], "enabled");
  if (a[1] && a[1]->k != PV_NONE) {
    if (a[1]->k != PV_DTYPE) lower_error(L, at, "torch.autocast: dtype must be a torch dtype");
    if (a[1]->dt == DT_F16_MARK && enabled)   /* PyTorch 1.13 raises at the first op */
      lower_error(L, at, "torch.autocast('cpu', dtype=torch.float16) is not supported (PyTorch 1.13: "
                         "\"Currently, AutocastCPU only support Bfloat16 as the autocast_cpu_dtype\")");
    if (a[1]->dt != DT_BF16_MARK && enabled)
      lower_error(L, at, "torch.autocast('cpu') takes dtype=torch.bfloat16 (PyTorch 1.13's CPU autocast "
                         "supports no other)");
  }
  PV *c = pv_builtin(L, BI_T_AUTOCAST_MODE, "autocast", NULL);
  c->n = enabled;
  return c;
}

/* x.bfloat16(): rounded, marked */
PV *bi_half_method(L *L, PV *fn, Args *A) {
  Span at = A->at;
  PV *x = fn->self, *none[1];
  bind_args(L, A, "", none);
  if (!is_float_t(x)) lower_error(L, at, "x.bfloat16() on a non-float tensor is not supported by ctc");
  return ac_round(L, at, x);
}

/* model.bfloat16(), model.half() (host.c's attribute of a module), x.half() */
void ac_refuse_half(L *L, Span at, const char *what) {
  if (!strcmp(what, "x.half()")) refuse_dtype(L, at, what, 1);
  lower_error(L, at, "model.%s() is not supported by ctc: parameters stay float32; train in mixed precision "
                     "with torch.autocast('cpu', dtype=torch.bfloat16) (docs/mixed-precision.md)", what);
}

/* ---- GradScaler ---- */

/* torch.cuda.amp.GradScaler(enabled=False), as nanoGPT makes it for bf16 and f32 runs:
 * every method is PyTorch's disabled one (scale returns its argument, step calls
 * optimizer.step, unscale_ and update do nothing, get_scale is 1.0). An enabled scaler
 * scales float16 gradients, which ctc does not have (PyTorch 1.13 disables it without
 * CUDA, with a warning): refused. */
PV *bi_gradscaler(L *L, PV *fn, Args *A) {
  Span at = A->at;
  PV *a[6];
  switch (fn->bi) {
  case BI_T_GRADSCALER: {
    bind_args(L, A, "init_scale=,growth_factor=,backoff_factor=,growth_interval=,enabled=", a);
    if (!a[4] || arg_bool(L, at, a[4], "enabled"))
      lower_error(L, at, "torch.cuda.amp.GradScaler(enabled=True) is not supported by ctc: it scales float16 "
                         "gradients, and ctc has bfloat16 autocast only, which needs no scaler (PyTorch 1.13 "
                         "disables it without CUDA); pass enabled=False");
    return pv_builtin(L, BI_T_SCALER_OBJ, "GradScaler", NULL);
  }
  case BI_T_SCALER_OBJ: lower_error(L, at, "a GradScaler is not callable");
  case BI_GS_SCALE: bind_args(L, A, "outputs", a); return a[0];
  case BI_GS_UNSCALE_: bind_args(L, A, "optimizer", a); return pv_none(L);
  case BI_GS_UPDATE: bind_args(L, A, "new_scale=", a); return pv_none(L);
  case BI_GS_GET_SCALE: bind_args(L, A, "", a); return pv_float(L, 1.0);
  case BI_GS_IS_ENABLED: bind_args(L, A, "", a); return pv_bool(L, 0);
  default: { /* step(optimizer, *args, **kwargs): optimizer.step(*args, **kwargs) */
    if (A->nargs < 1) lower_error(L, at, "GradScaler.step() needs the optimizer");
    PV *opt = A->args[0];
    PV *step = opt->k == PV_OBJ && opt->cls && opt->cls->bi ? bi_lookup(L, bi_rows[opt->cls->bi].methods, "step", opt)
                                                          : NULL;
    if (!step) lower_error(L, at, "GradScaler.step() needs an optimizer");
    return call_value(L, at, step, A->args + 1, A->nargs - 1, A->kwnames, A->kwvals, A->nkw);
  }
  }
}
