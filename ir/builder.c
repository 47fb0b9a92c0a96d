/* builder.c - creating programs, functions, values and instructions; type helpers. */
#include <stdlib.h>
#include <string.h>
#include "ir.h"

const OpInfo ir_ops[IR__COUNT] = {
#define OP(id, name, nargs, kind, nattr, cexpr) {name, nargs, kind, nattr, cexpr},
#include "ops.def"
#undef OP
};

static const char *const dtype_names[DT_COUNT] = {"f32", "f64", "i64", "i32", "bool", "bf16", "f16"};
static const size_t dtype_sizes[DT_COUNT] = {4, 8, 8, 4, 1, 2, 2};

const char *ir_dtype_name(DType t) { return (unsigned)t < DT_COUNT ? dtype_names[t] : "?"; }
size_t ir_dtype_size(DType t) { return (unsigned)t < DT_COUNT ? dtype_sizes[t] : 0; }
int ir_dtype_is_float(DType t) { return t == DT_F32 || t == DT_F64; }
int ir_dtype_is_low(DType t) { return t == DT_BF16 || t == DT_F16; }

int ir_prod(const int64_t *dims, int n, int64_t *r) {
  int64_t p = 1;
  for (int i = 0; i < n; i++)
    if (ir_mul(p, dims[i], &p) < 0) return -1;
  *r = p;
  return 0;
}

int64_t ir_numel(const Type *t) {
  int64_t n;
  return ir_prod(t->dims, t->ndim, &n) < 0 ? INT64_MAX : n;
}

int ir_type_bytes(const Type *t, int64_t *bytes) {
  int64_t n;
  if (ir_prod(t->dims, t->ndim, &n) < 0) return -1;
  return ir_mul(n, (int64_t)ir_dtype_size(t->dtype), bytes);
}

const char *ir_type_problem(const Type *t, char *buf, size_t cap) {
  char shape[256];
  int zero = 0;
  if (t->ndim < 0 || t->ndim > IR_MAX_DIMS) {
    snprintf(buf, cap, "tensor of %d dimensions (ctc supports at most %d)", t->ndim, IR_MAX_DIMS);
    return buf;
  }
  for (int i = 0; i < t->ndim; i++) {
    if (t->dims[i] < 0) {
      snprintf(buf, cap, "negative dimension %lld in shape %s", (long long)t->dims[i],
               ir_shape_str(t, shape, sizeof shape));
      return buf;
    }
    zero |= t->dims[i] == 0;
  }
  if (zero) {
    snprintf(buf, cap, "zero-size tensors are not supported by ctc: shape %s", ir_shape_str(t, shape, sizeof shape));
    return buf;
  }
  int64_t bytes;
  if (ir_type_bytes(t, &bytes) < 0) {
    double b = (double)ir_dtype_size(t->dtype);
    for (int i = 0; i < t->ndim; i++) b *= (double)t->dims[i];
    snprintf(buf, cap, "tensor of shape %s is too large (%.3g bytes; ctc's limit is 2**40 bytes)",
             ir_shape_str(t, shape, sizeof shape), b);
    return buf;
  }
  if (bytes > CTC_MAX_ARENA_BYTES) {
    snprintf(buf, cap, "tensor of shape %s is too large (%lld bytes; ctc's limit is 2**40 bytes)",
             ir_shape_str(t, shape, sizeof shape), (long long)bytes);
    return buf;
  }
  return NULL;
}

/* The choke point for every tensor type that enters the IR. */
static void check_type(Program *p, const Type *t, Span at, const char *input) {
  char msg[512], full[600];
  if (!ir_type_problem(t, msg, sizeof msg)) return;
  if (input) snprintf(full, sizeof full, "input '%s': %s", input, msg);
  else snprintf(full, sizeof full, "%s", msg);
  if (p->type_error) p->type_error(p->type_error_ctx, at, full);
  BUG("%s", full);
}

int ir_type_eq(const Type *a, const Type *b) {
  if (a->dtype != b->dtype || a->ndim != b->ndim) return 0;
  for (int i = 0; i < a->ndim; i++)
    if (a->dims[i] != b->dims[i]) return 0;
  return 1;
}

static char *dims_str(const Type *t, char *buf, size_t cap, const char *sep) {
  size_t n = 0;
  buf[0] = 0;
  n += (size_t)snprintf(buf + n, n < cap ? cap - n : 0, "[");
  for (int i = 0; i < t->ndim; i++)
    n += (size_t)snprintf(buf + n, n < cap ? cap - n : 0, "%s%lld", i ? sep : "",
                          (long long)t->dims[i]);
  snprintf(buf + n, n < cap ? cap - n : 0, "]");
  return buf;
}

char *ir_type_str(const Type *t, char *buf, size_t cap) {
  char dims[256];
  dims_str(t, dims, sizeof dims, ",");
  snprintf(buf, cap, "%s%s", ir_dtype_name(t->dtype), dims);
  return buf;
}

char *ir_shape_str(const Type *t, char *buf, size_t cap) { return dims_str(t, buf, cap, ", "); }

int ir_broadcast_shapes(const Type *a, const Type *b, Type *out) {
  int n = a->ndim > b->ndim ? a->ndim : b->ndim;
  Type r = *a;
  r.ndim = n;
  for (int i = 0; i < n; i++) {
    int ia = i - (n - a->ndim), ib = i - (n - b->ndim);
    int64_t da = ia >= 0 ? a->dims[ia] : 1, db = ib >= 0 ? b->dims[ib] : 1;
    if (da != db && da != 1 && db != 1) return -1;
    r.dims[i] = da == 1 ? db : da;
  }
  *out = r;
  return 0;
}

Program *ir_program_new(Arena *a, const SrcFile *src) {
  Program *p = arena_alloc(a, sizeof *p);
  p->arena = a;
  p->src = src;
  p->model_name = "net";
  p->class_name = "Net";
  return p;
}

int ir_scope(Program *p, const char *path, const char *cls) {
  if (!p->scopes.len) vec_push(p->arena, &p->scopes, ((IrScope){"", NULL}));
  for (int i = 1; i < p->scopes.len; i++)
    if (strcmp(p->scopes.data[i].path, path) == 0) return i;
  vec_push(p->arena, &p->scopes, ((IrScope){arena_strdup(p->arena, path), cls ? arena_strdup(p->arena, cls) : NULL}));
  return p->scopes.len - 1;
}

const char *ir_source_name(const Program *p) {
  const char *path = p->src && p->src->path ? p->src->path : "?";
  const char *s = strrchr(path, '/');
  return s ? s + 1 : path;
}

Func *ir_func_new(Program *p, const char *name, Span loc) {
  Func *f = arena_alloc(p->arena, sizeof *f);
  f->name = arena_strdup(p->arena, name);
  f->loc = loc;
  vec_push(p->arena, &p->funcs, f);
  return f;
}

static ValId new_value(Program *p, Func *f, ValKind k, Type t, const char *name) {
  Value v = {0};
  v.kind = k;
  v.type = t;
  v.name = arena_strdup(p->arena, name ? name : "t");
  v.def = -1;
  v.index = -1;
  vec_push(p->arena, &f->values, v);
  return f->values.len - 1;
}

ValId ir_add_input(Program *p, Func *f, const char *name, Type t) {
  check_type(p, &t, f->loc, name ? name : "?");
  ValId v = new_value(p, f, V_INPUT, t, name);
  f->values.data[v].index = f->inputs.len;
  vec_push(p->arena, &f->inputs, v);
  return v;
}

ValId ir_param_value(Program *p, Func *f, int param_index) {
  for (int i = 0; i < f->values.len; i++)
    if (f->values.data[i].kind == V_PARAM && f->values.data[i].index == param_index) return i;
  /* readable name: "conv1.weight" -> "conv1_weight" */
  char *nm = arena_strdup(p->arena, p->params.data[param_index].name);
  for (char *c = nm; *c; c++)
    if (*c == '.') *c = '_';
  ValId v = new_value(p, f, V_PARAM, p->params.data[param_index].type, nm);
  f->values.data[v].index = param_index;
  return v;
}

/* one sample's value kept past vmap (stored outside the vmapped function) */
static void check_not_retired(Program *p, Func *f, ValId v, Span loc) {
  const Value *val = &f->values.data[v];
  if (val->kind == V_INST && f->insts.data[val->def].retired && p->type_error)
    p->type_error(p->type_error_ctx, loc,
                  "this uses a value computed inside a function given to vmap and kept outside it (in a list, a "
                  "dict or an attribute): it holds one sample's values, which PyTorch refuses too");
}

Inst *ir_insts_take(Func *f) {
  int ni = f->insts.len;
  Inst *old = malloc(sizeof(Inst) * (size_t)(ni ? ni : 1));
  CHECK(old != NULL);
  memcpy(old, f->insts.data, sizeof(Inst) * (size_t)ni);
  f->insts.len = 0;
  return old;
}

void ir_inst_push(Program *p, Func *f, Inst in) {
  f->values.data[in.res].def = f->insts.len;
  vec_push(p->arena, &f->insts, in);
}

ValId ir_emit(Program *p, Func *f, Op op, const ValId *args, int nargs, Type res,
              const int64_t *attr, int nattr, double fattr, Span loc, const char *name) {
  CHECK(nattr <= IR_MAX_ATTRS);
  CHECK(ir_ops[op].nargs < 0 || ir_ops[op].nargs == nargs);
  check_type(p, &res, loc, NULL);
  for (int k = 0; k < nargs; k++) check_not_retired(p, f, args[k], loc);
  /* the result type is the op's shape rule's (shape.c), which the verifier
   * checks with too: staging states a type only for ops that choose it */
  int64_t at[IR_MAX_ATTRS] = {0};
  if (nattr) memcpy(at, attr, sizeof(int64_t) * (size_t)nattr);
  Type one[3], *ta = nargs <= 3 ? one : malloc(sizeof(Type) * (size_t)nargs), want;
  CHECK(ta != NULL);
  for (int k = 0; k < nargs; k++) ta[k] = f->values.data[args[k]].type;
  const char *why = ir_infer_type(op, at, nargs, ta, &want);
  if (ta != one) free(ta);
  if (why != IR_TYPE_GIVEN && (why || !ir_type_eq(&want, &res))) {
    char b1[300], b2[300];
    BUG("%s staged as %s: %s", ir_ops[op].name, ir_type_str(&res, b1, sizeof b1),
        why ? why : ir_type_str(&want, b2, sizeof b2));
  }
  ValId r = new_value(p, f, V_INST, res, name ? name : ir_ops[op].name);
  Inst in = {0};
  in.op = op;
  in.res = r;
  in.nargs = nargs;
  in.args = arena_alloc(p->arena, sizeof(ValId) * (size_t)(nargs ? nargs : 1));
  if (nargs) memcpy(in.args, args, sizeof(ValId) * (size_t)nargs);
  if (nattr) memcpy(in.attr, attr, sizeof(int64_t) * (size_t)nattr);
  in.fattr = fattr;
  in.loc = loc;
  in.nograd = f->grad_mode;
  in.phase = f->phase;
  in.scope = f->scope;
  f->values.data[r].def = f->insts.len;
  vec_push(p->arena, &f->insts, in);
  return r;
}

void ir_pass_event(Program *p, const Func *f, const char *pass, int after) {
  if (p->hook) p->hook(p->hook_ctx, p, f, pass, after);
}

ValId ir_const(Program *p, Func *f, DType dt, double v, Span loc) {
  Type t = {0};
  t.dtype = dt;
  return ir_emit(p, f, IR_CONST, NULL, 0, t, NULL, 0, v, loc, "c");
}

void ir_add_output(Program *p, Func *f, ValId v, const char *name) {
  check_not_retired(p, f, v, f->loc);
  vec_push(p->arena, &f->outputs, v);
  vec_push(p->arena, &f->out_names, arena_strdup(p->arena, name));
}

void ir_add_update(Program *p, Func *f, int param, ValId v) {
  for (int i = 0; i < f->updates.len; i++)
    if (f->update_params.data[i] == param) { /* a later update of the same parameter wins */
      f->updates.data[i] = v;
      return;
    }
  vec_push(p->arena, &f->updates, v);
  vec_push(p->arena, &f->update_params, param);
}

void ir_compact(Func *f) {
  int n = 0;
  for (int i = 0; i < f->insts.len; i++) {
    if (f->insts.data[i].dead) continue;
    f->insts.data[n] = f->insts.data[i];
    f->values.data[f->insts.data[n].res].def = n;
    n++;
  }
  f->insts.len = n;
}

int ir_low_kind(const Func *f, ValId v) {
  const Inst *d = ir_def(f, v);
  if (!d) return 0;
  if (d->op == IR_ROUND_BF16) return 1;
  if (d->op == IR_ROUND_F16) return 2;
  if (d->op == IR_CAST) {
    DType from = f->values.data[d->args[0]].type.dtype;
    return from == DT_BF16 ? 1 : from == DT_F16 ? 2 : 0;
  }
  if (ir_ops[d->op].kind != K_SHAPE || d->nargs < 1) return 0;
  int k = ir_low_kind(f, d->args[0]);
  for (int j = 1; j < d->nargs && k; j++)   /* a concatenation: every part */
    if (ir_low_kind(f, d->args[j]) != k) k = 0;
  return k;
}

int ir_low_operands(const Func *f, const Inst *in) {
  int k = ir_low_kind(f, in->args[0]);
  return k && ir_low_kind(f, in->args[1]) == k ? k : 0;
}
