/* verify.c - the IR verifier: SSA order, operand counts, dtypes and every
 * primitive's shape rule. compiler/main.c runs it after lowering, after every AD sweep
 * (the pass hook) and after every pass, on every compile. */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include "ir.h"

typedef struct V {
  const Func *f;
  FILE *out;
  const Inst *in;
} V;

static int fail(V *v, const char *fmt, ...) CTC_PRINTF(2, 3);
static int fail(V *v, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(v->out, "ir verifier: func %s", v->f->name);
  if (v->in)
    fprintf(v->out, ", instruction %d (%s)", (int)(v->in - v->f->insts.data),
            ir_ops[v->in->op].name);
  fprintf(v->out, ": ");
  vfprintf(v->out, fmt, ap);
  fprintf(v->out, "\n");
  va_end(ap);
  return -1;
}

static const Type *T(V *v, int k) { return &v->f->values.data[v->in->args[k]].type; }

/* Shape rule of one instruction, given that its operands are valid. */
static int check_shape(V *v) {
  const Inst *in = v->in;
  const Type *r = &v->f->values.data[in->res].type;
  char b1[200], b2[200];
  /* bf16 / f16 storage (a .bfloat16() model's parameters) is only read and written by a
   * cast from / to a float type */
  for (int k = 0; k < in->nargs; k++)
    if (ir_dtype_is_low(T(v, k)->dtype) && (in->op != IR_CAST || !ir_dtype_is_float(r->dtype)))
      return fail(v, "a %s value is an operand of %s", ir_dtype_name(T(v, k)->dtype), ir_ops[in->op].name);
  if (ir_dtype_is_low(r->dtype) && (in->op != IR_CAST || !ir_dtype_is_float(T(v, 0)->dtype)))
    return fail(v, "%s gives a %s value", ir_ops[in->op].name, ir_dtype_name(r->dtype));
  /* the op's shape rule (shape.c), shared with staging */
  Type *ta = malloc(sizeof(Type) * (size_t)(in->nargs + 1)), want;
  if (!ta) BUG("out of memory");
  for (int k = 0; k < in->nargs; k++) ta[k] = *T(v, k);
  const char *why = ir_infer_type(in->op, in->attr, in->nargs, ta, &want);
  free(ta);
  if (why != IR_TYPE_GIVEN) {
    if (why) return fail(v, "%s", why);
    if (!ir_type_eq(&want, r))
      return fail(v, "result %s, the op's rule gives %s", ir_type_str(r, b1, sizeof b1),
                  ir_type_str(&want, b2, sizeof b2));
    return 0;
  }
  switch (ir_ops[in->op].kind) {
  case K_ELEM:   /* cast: the operand's shape, any dtype */
    if (T(v, 0)->ndim != r->ndim) return fail(v, "cast changes the shape");
    for (int i = 0; i < r->ndim; i++)
      if (T(v, 0)->dims[i] != r->dims[i]) return fail(v, "cast changes the shape");
    return 0;
  case K_CONST:
    if (in->op == IR_CONST && r->ndim != 0) return fail(v, "const must be a scalar");
    if (in->op == IR_IOTA && r->ndim != 1) return fail(v, "iota must be 1-D");
    return 0;
  case K_SHAPE:
    break;
  default:
    break;
  }
  /* Data operands have the result's dtype (the C emitters use one element type);
   * rand_uniform's offset and the indices of embedding / embedding_bwd, gather
   * and scatter_add are i64, argmax's operand any dtype. */
  for (int k = 0; k < in->nargs; k++) {
    if (in->op == IR_RAND_UNIFORM || (in->op == IR_EMBEDDING && k == 1) || (in->op == IR_EMBEDDING_BWD && k == 0) ||
        ((in->op == IR_GATHER || in->op == IR_SCATTER_ADD) && k == 1) || in->op == IR_ARGMAX)
      continue;
    if (T(v, k)->dtype != r->dtype)
      return fail(v, "operand %d is %s, result %s", k, ir_dtype_name(T(v, k)->dtype), ir_dtype_name(r->dtype));
  }
  const Type *a = T(v, 0);
  switch (in->op) {
  case IR_RESHAPE:
    if (ir_numel(a) != ir_numel(r) || a->dtype != r->dtype) return fail(v, "reshape changes size");
    return 0;
  case IR_BROADCAST: {
    Type t;
    if (ir_broadcast_shapes(a, r, &t) < 0 || !ir_type_eq(&t, r)) return fail(v, "bad broadcast");
    return 0;
  }
  case IR_SLICE:
    if (a->ndim != r->ndim) return fail(v, "slice changes rank");
    for (int i = 0; i < r->ndim; i++) {
      int64_t st = in->attr[2 * i], sp = in->attr[2 * i + 1];
      if (st < 0 || sp <= 0 || st + (r->dims[i] - 1) * sp >= a->dims[i])
        return fail(v, "slice out of range on axis %d", i);
    }
    return 0;
  case IR_CONV2D_BWD_INPUT:
  case IR_CONV2D_BWD_WEIGHT: {
    /* image x[N,C,H,W], kernel w[O,C/G,KH,KW], output y[N,O,OH,OW]: whichever are operands */
    const Type *x = in->op == IR_CONV2D_BWD_INPUT ? r : a, *w = in->op == IR_CONV2D_BWD_WEIGHT ? r : T(v, 1),
               *y = in->op == IR_CONV2D_BWD_INPUT ? a : T(v, 1);
    int64_t G = in->attr[6];
    if (x->ndim != 4 || w->ndim != 4 || y->ndim != 4) return fail(v, "conv2d needs 4-D tensors");
    if (G < 1 || w->dims[0] % G || x->dims[1] != w->dims[1] * G) return fail(v, "conv2d channel mismatch");
    for (int d = 0; d < 2; d++) {
      int64_t in_ = x->dims[2 + d], k = w->dims[2 + d], s = in->attr[d], pd = in->attr[2 + d],
              dl = in->attr[4 + d];
      if (s < 1 || pd < 0 || dl < 1) return fail(v, "conv2d attributes");
      int64_t o = (in_ + 2 * pd - dl * (k - 1) - 1) / s + 1;
      if (y->dims[2 + d] != o) return fail(v, "conv2d output size");
    }
    if (y->dims[0] != x->dims[0] || y->dims[1] != w->dims[0]) return fail(v, "conv2d output dims");
    return 0;
  }
  case IR_MAXPOOL2D:
  case IR_AVGPOOL2D:
    if (a->ndim != 4 || r->ndim != 4 || r->dims[0] != a->dims[0] || r->dims[1] != a->dims[1])
      return fail(v, "pool needs 4-D tensors");
    return 0;
  case IR_RAND_UNIFORM:
    if (a->dtype != DT_I64 || a->ndim != 0 || !ir_dtype_is_float(r->dtype))
      return fail(v, "rand_uniform takes an i64 scalar offset and gives floats");
    return 0;
  case IR_UNSLICE: {
    if (a->ndim != r->ndim) return fail(v, "unslice changes rank");
    for (int i = 0; i < r->ndim; i++) {
      int64_t st = in->attr[2 * i], sp = in->attr[2 * i + 1];
      if (st < 0 || sp <= 0 || st + (a->dims[i] - 1) * sp >= r->dims[i])
        return fail(v, "unslice out of range on axis %d", i);
    }
    return 0;
  }
  case IR_PAD:
  case IR_PAD_BWD: {
    /* x the unpadded shape, p the padded one */
    const Type *x = in->op == IR_PAD ? a : r, *p = in->op == IR_PAD ? r : a;
    int64_t mode = in->attr[0];
    if (x->ndim != p->ndim || a->dtype != r->dtype) return fail(v, "pad types");
    if (mode < 0 || mode > 2 || (in->op == IR_PAD_BWD && mode == 0)) return fail(v, "pad mode");
    for (int i = 0; i < x->ndim; i++) {
      int64_t lo = in->attr[1 + i], hi = p->dims[i] - x->dims[i] - lo;
      if (lo < 0 || hi < 0) return fail(v, "pad sizes on axis %d", i);
      if (mode == 1 && (lo >= x->dims[i] || hi >= x->dims[i])) return fail(v, "reflect pad too large on axis %d", i);
    }
    return 0;
  }
  case IR_UPSAMPLE:
  case IR_UPSAMPLE_BWD:
    if (a->ndim != 4 || r->ndim != 4 || a->dims[0] != r->dims[0] || a->dims[1] != r->dims[1] ||
        a->dtype != r->dtype || !ir_dtype_is_float(r->dtype))
      return fail(v, "upsample types");
    if (in->attr[0] < 0 || in->attr[0] > 1 || in->attr[1] < 0 || in->attr[1] > 1) return fail(v, "upsample mode");
    return 0;
  case IR_MAXPOOL2D_BWD:
    if (!ir_type_eq(a, r) || T(v, 1)->ndim != 4) return fail(v, "maxpool2d_bwd types");
    return 0;
  case IR_MAXPOOL2D_JVP:
    if (!ir_type_eq(a, T(v, 1)) || r->ndim != 4) return fail(v, "maxpool2d_jvp types");
    return 0;
  case IR_AVGPOOL2D_BWD:
    if (a->ndim != 4 || r->ndim != 4) return fail(v, "avgpool2d_bwd needs 4-D tensors");
    return 0;
  case IR_EMBEDDING_BWD:
    if (a->dtype != DT_I64 || r->ndim != 2 || T(v, 1)->ndim != a->ndim + 1) return fail(v, "embedding_bwd types");
    return 0;
  case IR_GATHER:
  case IR_SCATTER_ADD: {
    /* gather: x = operand 0, the result r; scatter_add: src = operand 2 is
     * the small side, the result r the large one */
    int g = in->op == IR_GATHER;
    const Type *ix = T(v, 1), *small = g ? r : T(v, 2), *big = g ? a : r;
    int64_t ax = in->attr[0];
    Type bt;
    if (ix->dtype != DT_I64 || ax < 0 || ax >= r->ndim || ix->ndim != small->ndim || big->ndim != small->ndim)
      return fail(v, "%s: i64 index of the same rank, axis in range", ir_ops[in->op].name);
    Type ixs = *ix;
    ixs.dtype = small->dtype;
    if (ir_broadcast_shapes(&ixs, small, &bt) < 0 || !ir_type_eq(&bt, small))
      return fail(v, "%s: index does not broadcast to %s", ir_ops[in->op].name, ir_type_str(small, b1, sizeof b1));
    for (int i = 0; i < r->ndim; i++)
      if (i != ax && small->dims[i] > big->dims[i]) return fail(v, "%s: size on axis %d", ir_ops[in->op].name, i);
    if (!g) {   /* base broadcasts to the result */
      if (ir_broadcast_shapes(a, r, &bt) < 0 || !ir_type_eq(&bt, r)) return fail(v, "scatter_add: bad base");
    }
    return 0;
  }
  default:
    return 0;
  }
}

/* An instruction uses as many attributes as ops.def's nattr column says (so the
 * printed form shows all of them); the others must be 0. */
static int check_attrs(V *v) {
  int na = ir_nattrs(v->f, v->in);
  if (na < 0 || na > IR_MAX_ATTRS) return fail(v, "%d attributes (at most %d)", na, IR_MAX_ATTRS);
  for (int k = na; k < IR_MAX_ATTRS; k++)
    if (v->in->attr[k]) return fail(v, "attribute %d is %lld but the op uses %d", k, (long long)v->in->attr[k], na);
  return 0;
}

int ir_verify(const Program *p, const Func *f, FILE *out) { return ir_verify_from(p, f, 0, out); }

/* Whether value a is defined before instruction i: an entry input or a
 * parameter, or the result of an earlier instruction. */
static int defined_before(const Func *f, ValId a, int i) {
  const Value *val = &f->values.data[a];
  if (val->kind != V_INST) return 1;
  return val->def >= 0 && val->def < i && f->insts.data[val->def].res == a;
}

static int check_value(V *v, const Program *p, int i) {
  const Value *val = &v->f->values.data[i];
  if (val->kind == V_PARAM &&
      (val->index < 0 || val->index >= p->params.len || !ir_type_eq(&val->type, &p->params.data[val->index].type)))
    return fail(v, "value %d: bad parameter reference", i);
  char why[512];   /* every dim > 0 and at most CTC_MAX_ARENA_BYTES bytes (the builder's check) */
  if (ir_type_problem(&val->type, why, sizeof why)) return fail(v, "value %d: %s", i, why);
  return 0;
}

int ir_verify_from(const Program *p, const Func *f, int first, FILE *out) {
  V v = {f, out, NULL};
  int rc = 0, ni = f->insts.len;
  if (first < 0 || first > ni) first = 0;
  for (int i = 0; i < f->values.len && !rc && !first; i++)
    if (f->values.data[i].kind != V_INST) rc = check_value(&v, p, i);
  for (int i = first; i < ni && !rc; i++) {
    const Inst *in = &f->insts.data[i];
    v.in = in;
    if (in->dead) continue;
    if (ir_ops[in->op].nargs >= 0 && in->nargs != ir_ops[in->op].nargs) {
      rc = fail(&v, "expected %d operands, has %d", ir_ops[in->op].nargs, in->nargs);
      break;
    }
    for (int k = 0; k < in->nargs && !rc; k++) {
      ValId a = in->args[k];
      if (a < 0 || a >= f->values.len) rc = fail(&v, "operand %d out of range", k);
      else if (!defined_before(f, a, i)) rc = fail(&v, "operand %d (%%%d) used before its definition", k, (int)a);
    }
    if (rc) break;
    /* one definition per value: the value names this instruction as its own */
    if (in->res < 0 || in->res >= f->values.len || f->values.data[in->res].def != i ||
        f->values.data[in->res].kind != V_INST)
      rc = fail(&v, "result is not a fresh SSA value");
    else {
      v.in = NULL;
      rc = check_value(&v, p, in->res);
      v.in = in;
      if (!rc) rc = check_attrs(&v);
      if (!rc) rc = check_shape(&v);
    }
  }
  v.in = NULL;
  for (int i = 0; i < f->outputs.len && !rc; i++) {
    ValId o = f->outputs.data[i];
    if (o < 0 || o >= f->values.len || !defined_before(f, o, ni)) rc = fail(&v, "output %d undefined", i);
  }
  for (int i = 0; i < f->updates.len && !rc; i++) {
    ValId u = f->updates.data[i];
    int pi = f->update_params.data[i];
    if (u < 0 || u >= f->values.len || !defined_before(f, u, ni)) rc = fail(&v, "update %d undefined", i);
    else if (pi < 0 || pi >= p->params.len || !ir_type_eq(&f->values.data[u].type, &p->params.data[pi].type))
      rc = fail(&v, "update %d does not match its parameter", i);
  }
  return rc;
}
