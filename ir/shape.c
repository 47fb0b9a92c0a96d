/* shape.c - the result type of a primitive from its operands and attributes:
 * one rule per op, used by staging (torchlib computes the type of what it
 * emits with it, after its own diagnostics in PyTorch's words) and by the
 * verifier (which checks every instruction's result against it). Ops whose
 * result type is chosen by the instruction (a cast's dtype, reshape and
 * broadcast's shape, slice's counts, the pools' output sizes, which depend on
 * ceil_mode) have no rule here: ir_infer_type says so, and the verifier keeps its
 * consistency checks for them. */
#include <stdio.h>
#include <string.h>
#include "ir.h"

const char ir_type_given[] = "the instruction chooses its result type";

static const char *elem_rule(Op op, int nargs, const Type *a, Type *out) {
  Type acc = {0};
  for (int k = 0; k < nargs; k++) {
    Type t = a[k];
    t.dtype = acc.dtype;
    if (ir_broadcast_shapes(&acc, &t, &acc) < 0) return "operands do not broadcast";
  }
  int cmp = op >= IR_CMP_EQ && op <= IR_CMP_GE;
  /* the data operands share one dtype (where's are 1 and 2: 0 is its bool
   * condition); a comparison's are loaded each as its own */
  DType dt = a[op == IR_WHERE ? 1 : 0].dtype;
  for (int k = op == IR_WHERE ? 1 : 0; k < nargs && !cmp; k++)
    if (a[k].dtype != dt) return "operands of different dtypes";
  if (op == IR_WHERE && a[0].dtype != DT_BOOL) return "where needs a bool condition";
  if ((op == IR_BIT_NOT || op == IR_BIT_AND || op == IR_BIT_OR || op == IR_BIT_XOR) && ir_dtype_is_float(dt))
    return "bitwise ops take integer or bool operands";
  if ((op == IR_SHL || op == IR_SHR) && dt != DT_I64 && dt != DT_I32) return "shifts take integer operands";
  acc.dtype = cmp ? DT_BOOL : dt;
  *out = acc;
  return NULL;
}

static const char *matmul_rule(const int64_t *attr, const Type *a, const Type *b, Type *out) {
  if (a->ndim < 2 || b->ndim < 2) return "matmul needs operands of rank 2 or more";
  if (a->dtype != b->dtype) return "matmul operands of different dtypes";
  int64_t m = attr[0] ? a->dims[a->ndim - 1] : a->dims[a->ndim - 2];
  int64_t ka = attr[0] ? a->dims[a->ndim - 2] : a->dims[a->ndim - 1];
  int64_t kb = attr[1] ? b->dims[b->ndim - 1] : b->dims[b->ndim - 2];
  int64_t n = attr[1] ? b->dims[b->ndim - 2] : b->dims[b->ndim - 1];
  if (ka != kb) return "matmul inner dims differ";
  Type ba = *a, bb = *b, r;
  ba.ndim -= 2;
  bb.ndim -= 2;
  if (ir_broadcast_shapes(&ba, &bb, &r) < 0 || r.ndim + 2 > IR_MAX_DIMS) return "matmul batch dims do not broadcast";
  r.dims[r.ndim++] = m;
  r.dims[r.ndim++] = n;
  r.dtype = a->dtype;
  *out = r;
  return NULL;
}

/* x[N,C,H,W] conv w[O,C/G,KH,KW] -> [N,O,OH,OW] */
static const char *conv_rule(const int64_t *attr, const Type *x, const Type *w, Type *out) {
  int64_t G = attr[6];
  if (x->ndim != 4 || w->ndim != 4) return "conv2d needs 4-D tensors";
  if (x->dtype != w->dtype) return "conv2d operands of different dtypes";
  if (G < 1 || w->dims[0] % G || x->dims[1] != w->dims[1] * G) return "conv2d channel mismatch";
  Type r = *x;
  r.dims[1] = w->dims[0];
  for (int d = 0; d < 2; d++) {
    int64_t s = attr[d], pd = attr[2 + d], dl = attr[4 + d];
    if (s < 1 || pd < 0 || dl < 1) return "conv2d attributes out of range";
    int64_t span = dl * (w->dims[2 + d] - 1) + 1, in = x->dims[2 + d] + 2 * pd;
    if (span > in) return "conv2d kernel larger than the padded input";
    r.dims[2 + d] = (in - span) / s + 1;
  }
  *out = r;
  return NULL;
}

const char *ir_infer_type(Op op, const int64_t *attr, int nargs, const Type *a, Type *out) {
  if (ir_ops[op].nargs >= 0 && nargs != ir_ops[op].nargs) return "wrong operand count";
  if (ir_ops[op].kind == K_ELEM) return op == IR_CAST ? IR_TYPE_GIVEN : elem_rule(op, nargs, a, out);
  switch (op) {
  case IR_REDUCE_SUM:
  case IR_REDUCE_MAX: {
    Type r = a[0];
    if (attr[0] < 0 || attr[0] >> r.ndim) return "reduced axes out of range";
    for (int i = 0; i < r.ndim; i++)
      if (attr[0] >> i & 1) r.dims[i] = 1;
    *out = r;
    return NULL;
  }
  case IR_DETACH: *out = a[0]; return NULL;
  case IR_PERMUTE: {
    Type r = a[0];
    int seen = 0;
    for (int i = 0; i < r.ndim; i++) {
      int64_t s = attr[i];
      if (s < 0 || s >= a[0].ndim || (seen >> s) & 1) return "not a permutation";
      seen |= 1 << s;
      r.dims[i] = a[0].dims[s];
    }
    *out = r;
    return NULL;
  }
  case IR_CONCAT: {
    if (nargs < 1) return "concat of nothing";
    Type r = a[0];
    int64_t ax = attr[0];
    if (ax < 0 || ax >= r.ndim) return "concat axis out of range";
    for (int k = 1; k < nargs; k++) {
      if (a[k].ndim != r.ndim || a[k].dtype != r.dtype) return "concat operands of different ranks or dtypes";
      for (int i = 0; i < r.ndim; i++)
        if (i != ax && a[k].dims[i] != r.dims[i]) return "concat operands differ off the axis";
      if (ir_add(r.dims[ax], a[k].dims[ax], &r.dims[ax]) < 0) return "concat size overflows";
    }
    *out = r;
    return NULL;
  }
  case IR_MATMUL: return matmul_rule(attr, &a[0], &a[1], out);
  case IR_CONV2D: return conv_rule(attr, &a[0], &a[1], out);
  case IR_CUMSUM:
    if (attr[0] < 0 || attr[0] >= a[0].ndim || (attr[1] & ~(int64_t)1)) return "cumsum axis or direction out of range";
    *out = a[0];
    return NULL;
  case IR_ARGMAX: {
    Type r = a[0];
    if (attr[0] < 0 || attr[0] >= r.ndim || (attr[1] & ~(int64_t)1)) return "argmax axis or flag out of range";
    r.dims[attr[0]] = 1;
    r.dtype = DT_I64;
    *out = r;
    return NULL;
  }
  case IR_EMBEDDING: {
    const Type *w = &a[0], *ix = &a[1];
    if (w->ndim != 2 || ix->dtype != DT_I64 || ix->ndim + 1 > IR_MAX_DIMS) return "embedding types";
    Type r = *ix;
    r.dims[r.ndim++] = w->dims[1];
    r.dtype = w->dtype;
    *out = r;
    return NULL;
  }
  case IR_ATTENTION:
  case IR_ATTENTION_BWD: {   /* q, k, v (, o, g) of one float shape [..., T, D] */
    for (int k = 1; k < nargs; k++)
      if (!ir_type_eq(&a[k], &a[0])) return "attention operands of different types";
    if (a[0].ndim < 2 || !ir_dtype_is_float(a[0].dtype) || (attr[0] & ~(int64_t)1) || (attr[1] & ~(int64_t)1))
      return "attention needs float [..., T, D] operands and 0/1 flags";
    Type r = a[0];
    if (op == IR_ATTENTION_BWD) {
      if (r.ndim + 1 > IR_MAX_DIMS) return "attention_bwd rank";
      memmove(r.dims + 1, r.dims, sizeof(int64_t) * (size_t)r.ndim);
      r.dims[0] = 3;
      r.ndim++;
    }
    *out = r;
    return NULL;
  }
  default: return IR_TYPE_GIVEN;
  }
}
