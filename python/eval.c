/* eval.c - the compile-time evaluator: Python statements and expressions over
 * PVs. Tensor-valued operations are forwarded to tensor.c, which emits IR
 * into L->fn while a function is being staged. */
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include "../lowering/lower_int.h"

#define MAX_DEPTH 60                 /* nested calls */
#define MAX_STEPS 20000000           /* statements executed (and work in builtins) per compile */
#define MAX_MEM_MIB 2048             /* compile-time values, MiB */

CTC_NORETURN void lower_error(L *L, Span at, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  diag_verror(L->d, at, fmt, ap);
  va_end(ap);
  for (int i = L->nstack - 1; i >= 1 && i >= L->nstack - 8; i--) /* 0 is the entry itself */
    diag_note(L->d, L->stack_span[i], "in '%s' called here", L->stack_name[i]);
  longjmp(*L->on_error, 1);
}

/* Every statement costs one step, and builtins charge the work they do (items
 * produced, elements copied), so no compile-time computation runs unbounded; the
 * arena never frees, so its size bounds the memory compile-time values use. */
void eval_charge(L *L, Span at, int64_t work) {
  if (work < 0) work = 0;
  if (work > MAX_STEPS || (L->steps += work) > MAX_STEPS)
    lower_error(L, at, "compile-time evaluation did not finish after %d steps (an endless loop, or work "
                       "too large for compile time?)", MAX_STEPS);
  if (arena_bytes(L->a) > ((size_t)MAX_MEM_MIB << 20))
    lower_error(L, at, "compile-time values use more than %d MiB (an endless loop, or data too large for "
                       "compile time?)", MAX_MEM_MIB);
}

/* ---- small helpers ---------------------------------------------------- */

static int is_tensor(const PV *v) { return v->k == PV_TENSOR; }

static PV *num_result(L *L, Span at, int op, PV *a, PV *b) {
  int isf = a->k == PV_FLOAT || b->k == PV_FLOAT;
  if (!isf) {
    int64_t x = a->i, y = b->i;
    switch (op) {
    case OP_ADD: return pv_int(L, ck_add(L, at, x, y));
    case OP_SUB: return pv_int(L, ck_sub(L, at, x, y));
    case OP_MUL: return pv_int(L, ck_mul(L, at, x, y));
    case OP_DIV:
      if (y == 0) lower_error(L, at, "division by zero");
      return pv_float(L, (double)x / (double)y);
    case OP_FLOORDIV:
    case OP_MOD: {
      if (y == 0) lower_error(L, at, "integer division or modulo by zero");
      if (y == -1) return pv_int(L, op == OP_MOD ? 0 : ck_neg(L, at, x));
      int64_t q = x / y, m = x % y;
      if (m != 0 && ((m < 0) != (y < 0))) {
        q -= 1;
        m += y;
      }
      return pv_int(L, op == OP_FLOORDIV ? q : m);
    }
    case OP_POW:
      if (y < 0) {
        if (x == 0) lower_error(L, at, "0.0 cannot be raised to a negative power (ZeroDivisionError)");
        return pv_float(L, pow((double)x, (double)y));
      }
      return pv_int(L, ck_pow(L, at, x, y));
    case OP_LSHIFT:
      if (y < 0) lower_error(L, at, "negative shift count");
      if (x == 0) return pv_int(L, 0);
      if (y == 63 && x == -1) return pv_int(L, INT64_MIN);
      if (y > 62) int_too_large(L, at);
      return pv_int(L, ck_mul(L, at, x, (int64_t)1 << y));
    case OP_RSHIFT:
      if (y < 0) lower_error(L, at, "negative shift count");
      return pv_int(L, y > 63 ? (x < 0 ? -1 : 0) : x >> y);
    case OP_BITAND: return pv_int(L, x & y);
    case OP_BITOR: return pv_int(L, x | y);
    case OP_BITXOR: return pv_int(L, x ^ y);
    default: break;
    }
  } else {
    double x = pv_num(a), y = pv_num(b);
    switch (op) {
    case OP_ADD: return pv_float(L, x + y);
    case OP_SUB: return pv_float(L, x - y);
    case OP_MUL: return pv_float(L, x * y);
    case OP_DIV:
      if (y == 0) lower_error(L, at, "float division by zero");
      return pv_float(L, x / y);
    case OP_FLOORDIV:
    case OP_MOD: {
      /* CPython's float_divmod */
      if (y == 0) lower_error(L, at, op == OP_MOD ? "float modulo by zero" : "float floor division by zero");
      double m = fmod(x, y), div = (x - m) / y, fd;
      if (m != 0) {
        if ((y < 0) != (m < 0)) {
          m += y;
          div -= 1.0;
        }
      } else
        m = copysign(0.0, y);
      if (div != 0) {
        fd = floor(div);
        if (div - fd > 0.5) fd += 1.0;
      } else
        fd = copysign(0.0, x / y);
      return pv_float(L, op == OP_MOD ? m : fd);
    }
    case OP_POW: {
      if (x == 0 && y < 0) lower_error(L, at, "0.0 cannot be raised to a negative power (ZeroDivisionError)");
      if (x < 0 && y != floor(y) && isfinite(y))
        lower_error(L, at, "a negative number raised to a fractional power is a complex number; not supported by ctc");
      double r = pow(x, y);
      if (isinf(r) && isfinite(x) && isfinite(y)) lower_error(L, at, "(34, 'Numerical result out of range') (OverflowError)");
      return pv_float(L, r);
    }
    default: break;
    }
  }
  lower_error(L, at, "unsupported operand types for %s: '%s' and '%s'", fe_op_spelling(op),
              pv_kind_name(a), pv_kind_name(b));
}

static PV *concat_seq(L *L, Span at, PV *a, PV *b) {
  eval_charge(L, at, (int64_t)a->n + b->n);
  PV *r = a->k == PV_TUPLE ? pv_tuple(L, a->items, a->n) : pv_list(L, a->items, a->n);
  for (int i = 0; i < b->n; i++) pv_list_append(L, r, b->items[i]);
  return r;
}

/* a + b for strings; with `grow`, in a buffer twice the size (see PV.owned). */
static PV *concat_str(L *L, Span at, const char *a, const char *b, int grow) {
  size_t la = strlen(a), lb = strlen(b);
  eval_charge(L, at, (int64_t)((la + lb) >> 6));
  if (la + lb > ((size_t)1 << 28)) lower_error(L, at, "string too long for compile time (more than %d MiB)", 1 << 8);
  size_t cap = grow ? 2 * (la + lb) + 32 : la + lb + 1;
  char *p = arena_alloc(L->a, cap);
  memcpy(p, a, la);
  memcpy(p + la, b, lb + 1);
  PV *r = pv_new(L, PV_STR);
  r->s = p;
  r->n = (int)(la + lb);
  r->cap = (int)cap;
  return r;
}

static PV *binop(L *L, Span at, int op, PV *a, PV *b) {
  if (is_tensor(a) || is_tensor(b)) {
    if (op == OP_MATMUL) return t_matmul(L, at, a, b);
    return t_binary(L, at, op, a, b);
  }
  if (pv_is_num(a) && pv_is_num(b)) return num_result(L, at, op, a, b);
  if (op == OP_ADD && a->k == PV_STR && b->k == PV_STR) return concat_str(L, at, a->s, b->s, 0);
  if (op == OP_ADD && pv_is_seq(a) && a->k == b->k) return concat_seq(L, at, a, b);
  if (op == OP_MUL && (pv_is_seq(a) || a->k == PV_STR) && b->k == PV_INT) {
    PV *t = a;
    a = b;
    b = t;
  }
  if (op == OP_MUL && (a->k == PV_INT || a->k == PV_BOOL) && (pv_is_seq(b) || b->k == PV_STR)) {
    /* linear in the result; its size is charged as work before anything is built */
    int64_t cnt = a->i < 0 ? 0 : a->i;
    if (b->k == PV_STR) {
      size_t len = strlen(b->s);
      if (!len || !cnt) return pv_str(L, "");
      if ((uint64_t)cnt > ((uint64_t)1 << 28) / len)
        lower_error(L, at, "string too long for compile time (more than %d MiB)", 1 << 8);
      eval_charge(L, at, (int64_t)(((uint64_t)cnt * len) >> 6));
      size_t total = (size_t)cnt * len;
      char *p = arena_alloc(L->a, total + 1);
      memcpy(p, b->s, len);
      for (size_t done = len; done < total;) { /* doubling copies */
        size_t k = done < total - done ? done : total - done;
        memcpy(p + done, p, k);
        done += k;
      }
      PV *r = pv_new(L, PV_STR);
      r->s = p;
      return r;
    }
    if (!b->n || !cnt) return b->k == PV_TUPLE ? pv_tuple(L, NULL, 0) : pv_list(L, NULL, 0);
    if (cnt > INT32_MAX / b->n) eval_charge(L, at, INT64_MAX);  /* more than the step limit */
    int64_t total = cnt * b->n;
    eval_charge(L, at, total);
    PV **items = arena_alloc(L->a, sizeof(PV *) * (size_t)total);
    for (int64_t i = 0; i < cnt; i++) memcpy(items + i * b->n, b->items, sizeof(PV *) * (size_t)b->n);
    PV *r = b->k == PV_TUPLE ? pv_tuple(L, NULL, 0) : pv_list(L, NULL, 0);
    r->items = items;
    r->n = r->cap = (int)total;
    return r;
  }
  if (op == OP_MOD && a->k == PV_STR)
    lower_error(L, at, "'%%' string formatting is not supported; use an f-string");
  lower_error(L, at, "unsupported operand types for %s: '%s' and '%s'", fe_op_spelling(op),
              pv_kind_name(a), pv_kind_name(b));
}

static int compare_rec(L *L, Span at, int op, PV *a, PV *b, int depth);
static int compare(L *L, Span at, int op, PV *a, PV *b) { return compare_rec(L, at, op, a, b, 0); }
static int compare_rec(L *L, Span at, int op, PV *a, PV *b, int depth) {
  switch (op) {
  case OP_IS: return pv_is(a, b);
  case OP_ISNOT: return !compare_rec(L, at, OP_IS, a, b, depth);
  case OP_EQ: return pv_equal(L, at, a, b);
  case OP_NE: return !pv_equal(L, at, a, b);
  case OP_IN:
  case OP_NOTIN: {
    int found = 0;
    if (b->k == PV_STR && a->k == PV_STR) found = strstr(b->s, a->s) != NULL;
    else if (b->k == PV_DICT) found = pv_dict_lookup(L, at, b, a) != NULL;
    else if (pv_is_seq(b)) {
      eval_charge(L, at, b->n);
      for (int i = 0; i < b->n && !found; i++) found = a == b->items[i] || pv_equal(L, at, a, b->items[i]);
    } else
      lower_error(L, at, "'in' needs a tuple, list, dict or str on the right, not '%s'", pv_kind_name(b));
    return op == OP_IN ? found : !found;
  }
  default: break;
  }
  int c;
  if (pv_is_num(a) && pv_is_num(b)) {
    double x = pv_num(a), y = pv_num(b);
    if (a->k != PV_FLOAT && b->k != PV_FLOAT) c = a->i < b->i ? -1 : a->i > b->i;
    else c = x < y ? -1 : x > y;
  } else if (a->k == PV_STR && b->k == PV_STR) {
    c = strcmp(a->s, b->s);
  } else if (pv_is_seq(a) && a->k == b->k) {
    c = 0;
    int n = a->n < b->n ? a->n : b->n;
    if (depth >= 1000) lower_error(L, at, "maximum recursion depth exceeded in comparison (RecursionError)");
    eval_charge(L, at, n);
    for (int i = 0; i < n && !c; i++) {
      if (a->items[i] == b->items[i] || pv_equal(L, at, a->items[i], b->items[i])) continue;
      c = compare_rec(L, at, OP_LT, a->items[i], b->items[i], depth + 1) ? -1 : 1;
    }
    if (!c) c = a->n < b->n ? -1 : a->n > b->n;
  } else {
    lower_error(L, at, "'%s' is not supported between '%s' and '%s'", fe_op_spelling(op),
                pv_kind_name(a), pv_kind_name(b));
  }
  switch (op) {
  case OP_LT: return c < 0;
  case OP_LE: return c <= 0;
  case OP_GT: return c > 0;
  case OP_GE: return c >= 0;
  default: return 0;
  }
}

int pv_less(L *L, Span at, PV *a, PV *b) { return compare(L, at, OP_LT, a, b); }

int truthy(L *L, Span at, PV *v) {
  switch (v->k) {
  case PV_NONE: return 0;
  case PV_BOOL:
  case PV_INT: return v->i != 0;
  case PV_FLOAT: return v->f != 0;
  case PV_STR: return v->s[0] != 0;
  case PV_TUPLE:
  case PV_LIST:
  case PV_DICT: return v->n != 0;
  case PV_TENSOR:
    lower_error(L, at,
                "the truth value of a tensor depends on run-time data; a tensor-valued condition "
                "cannot be compiled (conditions must be known at compile time)");
  default: return 1;
  }
}

/* ---- iteration -------------------------------------------------------- */

int iter_items(L *L, Span at, PV *v, PV ***out) {
  switch (v->k) {
  case PV_TUPLE:
  case PV_LIST:
    *out = v->items;
    return v->n;
  case PV_DICT:
    *out = v->keys;
    return v->n;
  case PV_STR: {
    int n = (int)strlen(v->s);
    eval_charge(L, at, n);
    PV **r = arena_alloc(L->a, sizeof(PV *) * (size_t)(n + 1));
    for (int i = 0; i < n; i++) r[i] = pv_str(L, arena_strndup(L->a, v->s + i, 1));
    *out = r;
    return n;
  }
  case PV_OBJ:
    if (v->mod) eval_charge(L, at, v->mod->regs.len);
    if (v->mod && v->cls && (v->cls->bi == BI_C_SEQUENTIAL || v->cls->bi == BI_C_MODULELIST)) {
      PV **r = arena_alloc(L->a, sizeof(PV *) * (size_t)(v->mod->regs.len + 1));
      int n = 0;
      for (int i = 0; i < v->mod->regs.len; i++)
        if (v->mod->regs.data[i].kind == REG_CHILD) r[n++] = v->mod->regs.data[i].val;
      *out = r;
      return n;
    }
    if (v->mod && v->cls && v->cls->bi == BI_C_MODULEDICT) {
      PV **r = arena_alloc(L->a, sizeof(PV *) * (size_t)(v->mod->regs.len + 1));
      int n = 0;
      for (int i = 0; i < v->mod->regs.len; i++)
        if (v->mod->regs.data[i].kind == REG_CHILD) r[n++] = pv_str(L, v->mod->regs.data[i].name);
      *out = r;
      return n;
    }
    break;
  case PV_TENSOR:
    lower_error(L, at, "iterating over a tensor is not supported in compiled code; index it or "
                       "use unbind-free tensor operations");
  default: break;
  }
  lower_error(L, at, "'%s' object is not iterable at compile time", pv_kind_name(v));
}

/* ---- attributes ------------------------------------------------------- */

static PV *class_lookup(PV *cls, const char *name) {
  for (PV *c = cls; c; c = c->cls)
    if (c->env) {
      PV *v = env_get(c->env, name);
      if (v) return v;
    }
  return NULL;
}

static PV *bind_method(L *L, PV *self, PV *f) {
  if (f->k != PV_FUNC) return f;
  PV *b = pv_new(L, PV_BOUND);
  b->self = self;
  b->fn = f;
  return b;
}

/* Builtin nn.Module methods reachable on every module object. */
static PV *module_method(L *L, PV *obj, const char *name) { return bi_lookup(L, NS_MODULE, name, obj); }

PV *getattr_opt(L *L, Span at, PV *obj, const char *name) {
  switch (obj->k) {
  case PV_NS: return ns_getattr(L, at, obj, name);
  case PV_TENSOR: return tensor_getattr(L, at, obj, name);
  case PV_CLASS: {
    if (strcmp(name, "__name__") == 0) return pv_str(L, obj->s);
    return class_lookup(obj, name);
  }
  case PV_OBJ: {
    if (obj->bi == BI_SUPER_PROXY) {
      PV *f = class_lookup(obj->cls, name);
      if (f) return bind_method(L, obj->self, f);
      if (obj->self->mod) return module_method(L, obj->self, name);
      if (strcmp(name, "__init__") == 0) return pv_builtin(L, BI_MOD_INIT, "__init__", obj->self);
      return NULL;
    }
    PV *v = obj->attrs ? env_get(obj->attrs, name) : NULL;
    if (v) return v;
    /* an instance of a builtin class that is no module (an optimizer, a scheduler):
     * its methods are the rows of its class's method namespace */
    if (!obj->mod && obj->cls && obj->cls->bi) return bi_lookup(L, bi_rows[obj->cls->bi].methods, name, obj);
    if (obj->mod && strcmp(name, "training") == 0) return pv_bool(L, obj->mod->training);
    PV *f = class_lookup(obj->cls, name);
    if (f) return bind_method(L, obj, f);
    if (obj->mod) return module_method(L, obj, name);
    return NULL;
  }
  case PV_TUPLE:
    if (obj->bi == BI_FW_UNPACK_DUAL && (!strcmp(name, "primal") || !strcmp(name, "tangent")))
      return obj->items[!strcmp(name, "tangent")];
    /* torch.return_types of max/min(dim) and aminmax */
    if (obj->bi == BI_T_MAX && (!strcmp(name, "values") || !strcmp(name, "indices")))
      return obj->items[!strcmp(name, "indices")];
    if (obj->bi == BI_T_AMINMAX && (!strcmp(name, "min") || !strcmp(name, "max"))) return obj->items[!strcmp(name, "max")];
    return NULL;
  case PV_LIST: return bi_lookup(L, NS_LIST, name, obj);
  case PV_DICT: return bi_lookup(L, NS_DICT, name, obj);
  case PV_STR: return bi_lookup(L, NS_STR, name, obj);
  case PV_DTYPE:
    if (strcmp(name, "is_floating_point") == 0) return NULL;
    return NULL;
  default: return NULL;
  }
}

PV *getattr_value(L *L, Span at, PV *obj, const char *name) {
  PV *v = getattr_opt(L, at, obj, name);
  if (!v) {
    if (obj->k == PV_NS)
      lower_error(L, at, "'%s.%s' is not supported by ctc (or does not exist)", obj->s, name);
    lower_error(L, at, "'%s' object has no attribute '%s'", pv_kind_name(obj), name);
  }
  return v;
}

void setattr_value(L *L, Span at, PV *obj, const char *name, PV *val) {
  if (obj->k == PV_OBJ && obj->bi != BI_SUPER_PROXY) {
    if (L->fn && obj->mod)
      lower_error(L, at, "assigning 'self.%s' inside compiled code is a Python side effect that "
                         "ctc cannot compile; keep state changes in __init__", name);
    if (obj->mod) {
      module_setattr(L, at, obj, name, val);
      return;
    }
    if (!obj->attrs) obj->attrs = env_new(L, NULL);
    env_set(L, obj->attrs, name, val);
    return;
  }
  if (obj->k == PV_CLASS && !obj->bi && obj->env) {
    env_set(L, obj->env, name, val);
    return;
  }
  if (obj->k == PV_TENSOR) {
    tensor_setattr(L, at, obj, name, val);
    return;
  }
  if (obj->k == PV_CLASS)
    lower_error(L, at, "cannot set attribute '%s' on the builtin class '%s' (ctc does not support modifying "
                       "torch or Python classes)", name, obj->s ? obj->s : "?");
  lower_error(L, at, "cannot set attribute '%s' on a '%s'", name, pv_kind_name(obj));
}

/* ---- calls ------------------------------------------------------------ */

static PV *call_function(L *L, Span at, PV *fn, PV *self, PV **args, int nargs,
                         const char **kwn, PV **kwv, int nkw) {
  Node *def = fn->node;
  Env *env = env_new(L, fn->env);
  int np = def->list.len, ai = 0;
  PV **all = arena_alloc(L->a, sizeof(PV *) * (size_t)(nargs + 1));   /* no fixed limit (f(*big_list)) */
  int nall = 0;
  if (self) all[nall++] = self;
  for (int i = 0; i < nargs; i++) all[nall++] = args[i];
  int *bound = arena_alloc(L->a, sizeof(int) * (size_t)(np + 1));
  PV *varargs = NULL, *kwargs = NULL;
  int kwonly = 0;
  for (int i = 0; i < np; i++) {
    Node *p = def->list.data[i];
    if (p->op == PARAM_SLASH) continue;
    if (p->op == PARAM_VARARGS) {
      kwonly = 1;
      if (!p->name) continue;
      varargs = pv_tuple(L, NULL, 0);
      while (ai < nall) pv_list_append(L, varargs, all[ai++]);
      env_set(L, env, p->name, varargs);
      bound[i] = 1;
      continue;
    }
    if (p->op == PARAM_KWARGS) {
      kwargs = pv_dict(L);
      env_set(L, env, p->name, kwargs);
      bound[i] = 1;
      continue;
    }
    if (!kwonly && ai < nall) {
      env_set(L, env, p->name, all[ai++]);
      bound[i] = 1;
    }
  }
  if (ai < nall)
    lower_error(L, at, "%s() takes %d positional arguments but %d were given", def->name ? def->name : "lambda",
                ai, nall);
  for (int k = 0; k < nkw; k++) {
    int found = 0;
    for (int i = 0; i < np; i++) {
      Node *p = def->list.data[i];
      if (p->op != PARAM_PLAIN || !p->name || strcmp(p->name, kwn[k])) continue;
      if (bound[i]) lower_error(L, at, "%s() got multiple values for argument '%s'", def->name, kwn[k]);
      env_set(L, env, p->name, kwv[k]);
      bound[i] = found = 1;
    }
    if (!found) {
      if (!kwargs)
        lower_error(L, at, "%s() got an unexpected keyword argument '%s'", def->name ? def->name : "lambda", kwn[k]);
      pv_dict_set(L, at, kwargs, pv_str(L, kwn[k]), kwv[k]);
    }
  }
  for (int i = 0; i < np; i++) {
    Node *p = def->list.data[i];
    if (bound[i] || p->op != PARAM_PLAIN || !p->name) continue;
    if (!fn->defaults || !fn->defaults[i])
      lower_error(L, at, "%s() missing required argument '%s'", def->name ? def->name : "lambda", p->name);
    env_set(L, env, p->name, fn->defaults[i]);
  }
  if (fn->cls) env_set(L, env, "__class__", fn->cls);
  if (L->depth >= MAX_DEPTH) lower_error(L, at, "compile-time recursion is too deep (more than %d calls)", MAX_DEPTH);
  if (L->nstack < 64) {
    L->stack_span[L->nstack] = at;
    L->stack_name[L->nstack] = def->name ? def->name : "lambda";
  }
  L->nstack++;
  L->depth++;
  Env *saved = L->env;
  PV *result;
  if (def->kind == N_LAMBDA) {
    L->env = env;
    result = eval_expr(L, def->a);
  } else {
    struct Cont *cont = L->cont; /* a callee's `if`s on run-time tensors do not continue into the caller */
    L->cont = NULL;
    int r = exec_block(L, env, &def->body);
    L->cont = cont;
    result = r == EX_RETURN ? L->retval : pv_none(L);
  }
  L->env = saved;
  L->depth--;
  L->nstack--;
  return result;
}

static PV *instantiate(L *L, Span at, PV *cls, PV **args, int nargs, const char **kwn, PV **kwv, int nkw);

/* The result of calling a sub-module is named after it: self.conv1(x) -> "conv1". */
static PV *name_result(L *L, PV *module, PV *r) {
  if (!L->fn || !module->mod->path || r->k != PV_TENSOR || r->t->v < 0 || r->t->slot) return r;
  Value *v = ir_val(L->fn, r->t->v);
  if (v->kind != V_INST) return r;
  char *nm = arena_strdup(L->a, module->mod->path);
  for (char *c = nm; *c; c++)
    if (*c == '.') *c = '_';
  v->name = nm;
  return r;
}

/* A function decorated with @torch.no_grad() (etc.) runs in that grad mode. */
static PV *call_function_gm(L *L, Span at, PV *fn, PV *self, PV **args, int nargs,
                            const char **kwn, PV **kwv, int nkw) {
  if (!fn->grad_mode) return call_function(L, at, fn, self, args, nargs, kwn, kwv, nkw);
  int restore = L->grad_mode;
  grad_mode_set(L, fn->grad_mode - 1);
  PV *r = call_function(L, at, fn, self, args, nargs, kwn, kwv, nkw);
  grad_mode_set(L, restore);
  return r;
}

PV *call_value(L *L, Span at, PV *fn, PV **args, int nargs, const char **kwn, PV **kwv, int nkw) {
  switch (fn->k) {
  case PV_FUNC: return call_function_gm(L, at, fn, NULL, args, nargs, kwn, kwv, nkw);
  case PV_BOUND:
    if (fn->fn->k == PV_FUNC) return call_function_gm(L, at, fn->fn, fn->self, args, nargs, kwn, kwv, nkw);
    return call_value(L, at, fn->fn, args, nargs, kwn, kwv, nkw);
  case PV_BUILTIN: {
    Args A = {at, args, nargs, kwn, kwv, nkw, fn->s};
    return call_builtin(L, fn, &A);
  }
  case PV_CLASS: return instantiate(L, at, fn, args, nargs, kwn, kwv, nkw);
  case PV_OBJ:
    if (fn->mod) {
      if (fn->cls->bi) {
        Args A = {at, args, nargs, kwn, kwv, nkw, fn->cls->s};
        return name_result(L, fn, layer_call(L, fn, &A));
      }
      PV *fwd = class_lookup(fn->cls, "forward");
      if (!fwd) lower_error(L, at, "module '%s' has no forward method", fn->cls->s);
      if (L->nstack < 64) {
        L->stack_span[L->nstack] = at;
        L->stack_name[L->nstack] = arena_printf(L->a, "%s.forward", fn->cls->s);
      }
      return name_result(L, fn, call_value(L, at, bind_method(L, fn, fwd), args, nargs, kwn, kwv, nkw));
    } else {
      PV *c = getattr_opt(L, at, fn, "__call__");
      if (c) return call_value(L, at, c, args, nargs, kwn, kwv, nkw);
    }
    break;
  default: break;
  }
  lower_error(L, at, "'%s' object is not callable", pv_kind_name(fn));
}

/* A @dataclass: __init__ from the annotated class attributes, in order. */
static void dataclass_init(L *L, Span at, PV *cls, PV *obj, PV **args, int nargs, const char **kwn,
                           PV **kwv, int nkw) {
  Node *cd = cls->node;
  int pos = 0;
  for (int i = 0; i < cd->body.len; i++) {
    Node *s = cd->body.data[i];
    if (s->kind != N_ANNASSIGN || s->a->kind != N_NAME) continue;
    const char *name = s->a->name;
    PV *v = NULL;
    if (pos < nargs) v = args[pos++];
    for (int k = 0; k < nkw; k++)
      if (strcmp(kwn[k], name) == 0) v = kwv[k];
    if (!v) v = env_get(cls->env, name);
    if (!v) lower_error(L, at, "%s() missing required argument '%s'", cls->s, name);
    setattr_value(L, at, obj, name, v);
  }
  if (pos < nargs) lower_error(L, at, "%s() takes %d positional arguments but %d were given", cls->s, pos, nargs);
}

static PV *instantiate(L *L, Span at, PV *cls, PV **args, int nargs, const char **kwn, PV **kwv, int nkw) {
  if (cls->bi) {
    Args A = {at, args, nargs, kwn, kwv, nkw, cls->s};
    return class_construct(L, cls, &A);
  }
  PV *obj;
  int is_module = 0;
  for (PV *c = cls; c; c = c->cls)
    if (c->bi == BI_C_MODULE) is_module = 1;
  if (is_module) obj = module_new(L, cls);
  else {
    obj = pv_new(L, PV_OBJ);
    obj->cls = cls;
    obj->attrs = env_new(L, NULL);
  }
  PV *init = class_lookup(cls, "__init__");
  if (init) call_value(L, at, bind_method(L, obj, init), args, nargs, kwn, kwv, nkw);
  else if (env_get(cls->env, "__dataclass__")) dataclass_init(L, at, cls, obj, args, nargs, kwn, kwv, nkw);
  else if (nargs || nkw) lower_error(L, at, "%s() takes no arguments", cls->s);
  return obj;
}

/* ---- expressions ------------------------------------------------------ */

static PV *lookup_name(L *L, Node *n) {
  PV *v = env_lookup(L->env, n->name);
  if (!v) v = env_get(L->globals, n->name);
  if (!v) v = env_get(L->builtins, n->name);
  if (!v) lower_error(L, n->span, "name '%s' is not defined", n->name);
  return v;
}

static PV *index_value(L *L, Span at, PV *obj, PV *idx) {
  if (obj->k == PV_TENSOR) return t_index(L, at, obj, idx);
  if (pv_is_seq(obj) || obj->k == PV_STR) {
    int64_t len = obj->k == PV_STR ? (int64_t)strlen(obj->s) : obj->n;
    if (idx->k == PV_SLICE) {
      int64_t st = idx->items[2]->k == PV_NONE ? 1 : arg_int(L, at, idx->items[2], "slice step");
      if (st == 0) lower_error(L, at, "slice step cannot be zero");
      int64_t lo, hi;
      if (st > 0) {
        lo = idx->items[0]->k == PV_NONE ? 0 : arg_int(L, at, idx->items[0], "slice start");
        hi = idx->items[1]->k == PV_NONE ? len : arg_int(L, at, idx->items[1], "slice stop");
        if (lo < 0) lo += len;
        if (hi < 0) hi += len;
        lo = lo < 0 ? 0 : lo > len ? len : lo;
        hi = hi < 0 ? 0 : hi > len ? len : hi;
      } else {
        lo = idx->items[0]->k == PV_NONE ? len - 1 : arg_int(L, at, idx->items[0], "slice start");
        hi = idx->items[1]->k == PV_NONE ? -1 : arg_int(L, at, idx->items[1], "slice stop");
        if (idx->items[0]->k != PV_NONE && lo < 0) lo += len;
        if (idx->items[1]->k != PV_NONE && hi < 0) hi += len;
        lo = lo < -1 ? -1 : lo > len - 1 ? len - 1 : lo;
        hi = hi < -1 ? -1 : hi > len - 1 ? len - 1 : hi;
      }
      /* the number of items first: lo + k * st never overflows for k < cnt */
      uint64_t span = st > 0 ? (lo < hi ? (uint64_t)hi - (uint64_t)lo : 0) : (lo > hi ? (uint64_t)lo - (uint64_t)hi : 0);
      uint64_t ust = st > 0 ? (uint64_t)st : (uint64_t)0 - (uint64_t)st;
      int64_t cnt = span ? (int64_t)((span - 1) / ust + 1) : 0;
      eval_charge(L, at, cnt);
      if (obj->k == PV_STR) {
        char *s = arena_alloc(L->a, (size_t)cnt + 1);
        for (int64_t k = 0; k < cnt; k++) s[k] = obj->s[lo + k * st];
        return pv_str(L, s);
      }
      PV *r = obj->k == PV_LIST ? pv_list(L, NULL, 0) : pv_tuple(L, NULL, 0);
      for (int64_t k = 0; k < cnt; k++) pv_list_append(L, r, obj->items[lo + k * st]);
      return r;
    }
    int64_t i = arg_int(L, at, idx, "index");
    if (i < 0) i += len;
    if (i < 0 || i >= len) lower_error(L, at, "index %lld out of range for a %s of length %lld",
                                       (long long)arg_int(L, at, idx, "index"), pv_kind_name(obj), (long long)len);
    if (obj->k == PV_STR) return pv_str(L, arena_strndup(L->a, obj->s + i, 1));
    return obj->items[i];
  }
  if (obj->k == PV_DICT) {
    PV *v = pv_dict_lookup(L, at, obj, idx);
    if (!v) lower_error(L, at, "key %s not found in dict", pv_repr(L, at, idx));
    return v;
  }
  if (pv_is_module(obj) && obj->cls->bi) {
    PV **items;
    int n = iter_items(L, at, obj, &items);
    if (obj->cls->bi == BI_C_MODULEDICT) {
      for (int i = 0; i < obj->mod->regs.len; i++)
        if (idx->k == PV_STR && strcmp(obj->mod->regs.data[i].name, idx->s) == 0) return obj->mod->regs.data[i].val;
      lower_error(L, at, "ModuleDict has no key %s", pv_repr(L, at, idx));
    }
    int64_t i = arg_int(L, at, idx, "index");
    if (i < 0) i += n;
    if (i < 0 || i >= n) lower_error(L, at, "index %lld out of range for a %s of %d modules", (long long)i, obj->cls->s, n);
    return items[i];
  }
  lower_error(L, at, "'%s' object is not subscriptable", pv_kind_name(obj));
}

static void eval_call_args(L *L, Node *n, PV ***args, int *nargs, const char ***kwn, PV ***kwv, int *nkw) {
  PV *pos = pv_list(L, NULL, 0);
  Vec(const char *) kn = {0};
  Vec(PV *) kv = {0};
  for (int i = 0; i < n->list.len; i++) {
    Node *a = n->list.data[i];
    if (a->kind == N_STARRED) {
      PV *s = eval_expr(L, a->a);
      PV **it;
      int cnt = iter_items(L, a->span, s, &it);
      eval_charge(L, a->span, cnt);
      for (int k = 0; k < cnt; k++) pv_list_append(L, pos, it[k]);
    } else if (a->kind == N_GENEXP) {
      pv_list_append(L, pos, eval_expr(L, a));
    } else {
      pv_list_append(L, pos, eval_expr(L, a));
    }
  }
  for (int i = 0; i < n->list2.len; i++) {
    Node *k = n->list2.data[i];
    PV *v = eval_expr(L, k->a);
    if (!k->name) {
      if (v->k != PV_DICT) lower_error(L, k->span, "argument after ** must be a dict");
      for (int j = 0; j < v->n; j++) {
        if (v->keys[j]->k != PV_STR) lower_error(L, k->span, "keywords must be strings");
        vec_push(L->a, &kn, v->keys[j]->s);
        vec_push(L->a, &kv, v->items[j]);
      }
      continue;
    }
    vec_push(L->a, &kn, k->name);
    vec_push(L->a, &kv, v);
  }
  *args = pos->items;
  *nargs = pos->n;
  *kwn = kn.data;
  *kwv = kv.data;
  *nkw = kn.len;
}

static void assign_target(L *L, Node *t, PV *v);

/* Comprehension loops: for each generator in turn, then evaluate elt. */
static void comp_loop(L *L, Node *n, int gi, PV *out, PV *dict) {
  if (gi == n->list.len) {
    if (dict) {
      PV *k = eval_expr(L, n->a);
      pv_dict_set(L, n->a->span, dict, k, eval_expr(L, n->b));
    }
    else pv_list_append(L, out, eval_expr(L, n->a));
    return;
  }
  Node *g = n->list.data[gi];
  PV *it = eval_expr(L, g->b);
  PV **items;
  int cnt = iter_items(L, g->span, it, &items);
  for (int i = 0; i < cnt; i++) {
    eval_charge(L, g->span, 1);
    assign_target(L, g->a, items[i]);
    int ok = 1;
    for (int k = 0; k < g->list.len && ok; k++) ok = truthy(L, g->list.data[k]->span, eval_expr(L, g->list.data[k]));
    if (ok) comp_loop(L, n, gi + 1, out, dict);
  }
}

static PV *make_function(L *L, Node *def) {
  PV *f = pv_new(L, PV_FUNC);
  f->node = def;
  f->s = def->name ? def->name : "<lambda>";
  f->env = L->env;
  f->defaults = arena_alloc(L->a, sizeof(PV *) * (size_t)(def->list.len + 1));
  for (int i = 0; i < def->list.len; i++)
    if (def->list.data[i]->b) f->defaults[i] = eval_expr(L, def->list.data[i]->b);
  return f;
}

/* Every span in an expression parsed out of an f-string points at the f-string. */
static void respan(Node *n, Span at, int depth) {
  if (!n || depth > 10000) return;
  n->span = at;
  respan(n->a, at, depth + 1);
  respan(n->b, at, depth + 1);
  respan(n->c, at, depth + 1);
  NodeVec *vs[] = {&n->list, &n->list2, &n->body, &n->orelse, &n->body2};
  for (size_t k = 0; k < sizeof vs / sizeof vs[0]; k++)
    for (int i = 0; i < vs[k]->len; i++) respan(vs[k]->data[i], at, depth + 1);
}

/* Evaluates the expression text e[0..n) of a replacement field, parsed as "(e)" on
 * the f-string's line (so a parse error is reported on it; columns count from the
 * expression). */
static PV *fstring_field(L *L, Span at, const char *e, size_t n) {
  size_t pre = (size_t)(at.line > 0 ? at.line - 1 : 0) + (size_t)(at.col > 0 ? at.col - 1 : 0);
  char *text = arena_alloc(L->a, pre + n + 4);
  size_t k = 0;
  for (int i = 1; i < at.line; i++) text[k++] = '\n';
  text[k++] = '(';
  memcpy(text + k, e, n);
  k += n;
  text[k++] = ')';
  text[k++] = '\n';
  text[k] = 0;
  SrcFile *f = src_from_string(L->a, at.file ? at.file->path : "<f-string>", text);
  Node *m = fe_parse(L->a, L->d, f);
  if (!m) longjmp(*L->on_error, 1); /* the parse error is reported */
  if (m->body.len != 1 || m->body.data[0]->kind != N_EXPR_STMT)
    lower_error(L, at, "f-string: expected one expression in '{%.*s}'", (int)n, e);
  Node *x = m->body.data[0]->a;
  respan(x, at, 0);
  return eval_expr(L, x);
}

/* End of a replacement field's part that starts at s: the first of `stops` outside
 * brackets and quotes, or NULL. */
static const char *field_end(const char *s, const char *stops) {
  int depth = 0;
  char q = 0;
  for (; *s; s++) {
    if (q) {
      if (*s == '\\' && s[1]) s++;
      else if (*s == q) q = 0;
      continue;
    }
    if (*s == '\'' || *s == '"') q = *s;
    else if (strchr("([{", *s)) depth++;
    else if (strchr(")]", *s) || (*s == '}' && depth > 0)) depth--;
    else if (!depth && strchr(stops, *s)) {
      /* '!=' is an operator, not a conversion */
      if (*s == '!' && s[1] == '=') continue;
      return s;
    }
  }
  return NULL;
}

/* f"...": literal text (escapes processed, {{ }} halved) and replacement fields
 * {expr[=][!r|!s|!a][:spec]}, the spec itself may hold fields. */
static const char *fstring_text(L *L, Span at, const char *s, int nested) {
  SB out = {0};
  while (*s) {
    if ((*s == '{' && s[1] == '{') || (*s == '}' && s[1] == '}')) {
      sb_add(L, at, &out, s, 1);
      s += 2;
      continue;
    }
    if (*s == '\\' && !nested) {
      char c = s[1], e[2] = {0, 0};
      s += 2;
      switch (c) {
      case 'n': e[0] = '\n'; break;
      case 't': e[0] = '\t'; break;
      case 'r': e[0] = '\r'; break;
      case '0': e[0] = '\0'; break;
      case 'a': e[0] = '\a'; break;
      case 'b': e[0] = '\b'; break;
      case 'f': e[0] = '\f'; break;
      case 'v': e[0] = '\v'; break;
      case '\\': case '\'': case '"': e[0] = c; break;
      case '\n': continue; /* line continuation */
      case 'x':
        if (s[0] && s[1] && strchr("0123456789abcdefABCDEF", s[0]) && strchr("0123456789abcdefABCDEF", s[1])) {
          char h[3] = {s[0], s[1], 0};
          e[0] = (char)strtol(h, NULL, 16);
          s += 2;
          break;
        }
        /* fall through */
      default:
        sb_add(L, at, &out, "\\", 1);
        if (c) sb_add(L, at, &out, &c, 1);
        else s--;
        continue;
      }
      if (e[0]) sb_add(L, at, &out, e, 1);
      else lower_error(L, at, "f-string: a NUL character is not supported in compile-time strings");
      continue;
    }
    if (*s == '}') lower_error(L, at, "f-string: single '}' is not allowed");
    if (*s != '{') {
      sb_add(L, at, &out, s, 1);
      s++;
      continue;
    }
    const char *e0 = s + 1, *e1 = field_end(e0, "!:}");
    if (!e1) lower_error(L, at, "f-string: expecting '}'");
    const char *ee = e1;
    int debug = 0;
    while (ee > e0 && (ee[-1] == ' ')) ee--;
    if (ee > e0 && ee[-1] == '=' && !(ee - e0 >= 2 && strchr("=!<>", ee[-2]))) {
      debug = 1;
      sb_add(L, at, &out, e0, (size_t)(e1 - e0)); /* "expr=" as written */
      ee--;
    }
    if (ee == e0) lower_error(L, at, "f-string: empty expression not allowed");
    PV *v = fstring_field(L, at, e0, (size_t)(ee - e0));
    char conv = debug ? 'r' : 0;
    const char *p = e1;
    if (*p == '!') {
      conv = p[1];
      if (!conv || !strchr("rsa", conv) || (p[2] != ':' && p[2] != '}'))
        lower_error(L, at, "f-string: invalid conversion character: expected 's', 'r', or 'a'");
      p += 2;
    }
    const char *spec = "";
    if (*p == ':') {
      const char *q = field_end(p + 1, "}");
      if (!q) lower_error(L, at, "f-string: expecting '}'");
      spec = fstring_text(L, at, arena_strndup(L->a, p + 1, (size_t)(q - p - 1)), 1);
      if (debug && conv == 'r') conv = 0; /* f"{x=:.2f}" formats the value */
      p = q;
    }
    if (*p != '}') lower_error(L, at, "f-string: expecting '}'");
    s = p + 1;
    if (conv == 'r' || conv == 'a') v = pv_str(L, pv_repr(L, at, v));
    else if (conv == 's') v = pv_str(L, pv_to_str(L, at, v));
    sb_adds(L, at, &out, pv_format(L, at, v, spec));
  }
  return sb_done(L, &out);
}

static PV *select_value(L *L, Span at, const char *what, PV *c, PV *a, PV *b);

PV *eval_expr(L *L, Node *n) {
  switch (n->kind) {
  case N_NAME: {
    PV *v = lookup_name(L, n);
    v->owned = 0; /* read: no longer held by one name only */
    return v;
  }
  case N_INT: return pv_int(L, n->ival);
  case N_FLOAT: return pv_float(L, n->fval);
  case N_STR: return pv_str(L, n->sval);
  case N_FSTR: return pv_str(L, fstring_text(L, n->span, n->sval, 0));
  case N_CONST:
    switch (n->op) {
    case CONST_NONE: return pv_none(L);
    case CONST_TRUE: return pv_bool(L, 1);
    case CONST_FALSE: return pv_bool(L, 0);
    default: return pv_new(L, PV_ELLIPSIS);
    }
  case N_ATTR: return getattr_value(L, n->span, eval_expr(L, n->a), n->name);
  case N_SUBSCRIPT: {
    PV *obj = eval_expr(L, n->a);
    return index_value(L, n->span, obj, eval_expr(L, n->b));
  }
  case N_SLICE: {
    PV *s = pv_new(L, PV_SLICE);
    s->items = arena_alloc(L->a, 3 * sizeof(PV *));
    s->n = 3;
    Node *parts[3] = {n->a, n->b, n->c};
    for (int i = 0; i < 3; i++) s->items[i] = parts[i] ? eval_expr(L, parts[i]) : pv_none(L);
    return s;
  }
  case N_CALL: {
    PV *fn = eval_expr(L, n->a);
    PV **args, **kwv;
    const char **kwn;
    int nargs, nkw;
    eval_call_args(L, n, &args, &nargs, &kwn, &kwv, &nkw);
    return call_value(L, n->span, fn, args, nargs, kwn, kwv, nkw);
  }
  case N_BINOP: {
    PV *a = eval_expr(L, n->a), *b = eval_expr(L, n->b);
    return binop(L, n->span, n->op, a, b);
  }
  case N_UNARY: {
    PV *a = eval_expr(L, n->a);
    if (n->op == OP_NOT) return pv_bool(L, !truthy(L, n->a->span, a));
    if (a->k == PV_TENSOR) {
      if (n->op == OP_NEG) return t_unary(L, n->span, IR_NEG, a);
      if (n->op == OP_POS) return a;
      return t_invert(L, n->span, a);   /* OP_INVERT: bitwise not (logical on bool) */
    }
    if (!pv_is_num(a)) lower_error(L, n->span, "bad operand type for unary %s: '%s'", fe_op_spelling(n->op), pv_kind_name(a));
    if (n->op == OP_POS) return a->k == PV_BOOL ? pv_int(L, a->i) : a;
    if (n->op == OP_INVERT) {
      if (a->k == PV_FLOAT) lower_error(L, n->span, "bad operand type for unary ~: 'float'");
      return pv_int(L, ~a->i);
    }
    if (a->k == PV_FLOAT) return pv_float(L, -a->f);
    return pv_int(L, ck_neg(L, n->span, a->i));
  }
  case N_BOOLOP: {
    PV *a = eval_expr(L, n->a);
    int t = truthy(L, n->a->span, a);
    if (n->op == OP_AND ? !t : t) return a;
    return eval_expr(L, n->b);
  }
  case N_COMPARE: {
    PV *left = eval_expr(L, n->list.data[0]);
    PV *result = NULL;
    for (int i = 0; i + 1 < n->list.len; i++) {
      PV *right = eval_expr(L, n->list.data[i + 1]);
      int op = n->cmpops[i];
      if (left->k == PV_TENSOR || right->k == PV_TENSOR) {
        if (op == OP_IS || op == OP_ISNOT) {
          if (n->list.len > 2) lower_error(L, n->span, "chained comparisons of tensors are not supported");
          return pv_bool(L, compare(L, n->span, op, left, right));
        }
        PV *c = t_compare(L, n->span, op, left, right);
        if (n->list.len == 2) return c;
        /* `0 <= x <= 1` on one-element tensors: Python's `and` of the links */
        Type ct = t_type(c);
        int64_t numel = 1;
        for (int d = 0; d < ct.ndim; d++) numel *= ct.dims[d];
        if (numel != 1) lower_error(L, n->span, "Boolean value of Tensor with more than one value is ambiguous");
        result = result && result->k == PV_TENSOR ? t_where(L, n->span, result, c, pv_bool(L, 0)) : c;
        left = right;
        continue;
      }
      if (!compare(L, n->span, op, left, right)) return pv_bool(L, 0);
      left = right;
      result = pv_bool(L, 1);
    }
    return result ? result : pv_bool(L, 1);
  }
  case N_IFEXP: {
    PV *c = eval_expr(L, n->a);
    if (c->k == PV_TENSOR && L->fn && !c->t->data) { /* both computed, then selected (see staged_if) */
      L->staged_depth++;
      PV *a = eval_expr(L, n->b), *b = eval_expr(L, n->c);
      L->staged_depth--;
      return select_value(L, n->span, "the conditional expression", c, a, b);
    }
    return truthy(L, n->a->span, c) ? eval_expr(L, n->b) : eval_expr(L, n->c);
  }
  case N_LAMBDA: return make_function(L, n);
  case N_TUPLE:
  case N_LIST:
  case N_SET: {
    PV *r = n->kind == N_TUPLE ? pv_tuple(L, NULL, 0) : pv_list(L, NULL, 0);
    for (int i = 0; i < n->list.len; i++) {
      Node *e = n->list.data[i];
      if (e->kind == N_STARRED) {
        PV **it;
        int cnt = iter_items(L, e->span, eval_expr(L, e->a), &it);
        eval_charge(L, e->span, cnt);
        for (int k = 0; k < cnt; k++) pv_list_append(L, r, it[k]);
      } else
        pv_list_append(L, r, eval_expr(L, e));
    }
    return r;
  }
  case N_DICT: {
    PV *d = pv_dict(L);
    for (int i = 0; i < n->list.len; i++) {
      if (!n->list.data[i]) {
        PV *m = eval_expr(L, n->list2.data[i]);
        if (m->k != PV_DICT) lower_error(L, n->list2.data[i]->span, "'**' needs a dict");
        for (int k = 0; k < m->n; k++) pv_dict_set(L, n->span, d, m->keys[k], m->items[k]);
        continue;
      }
      PV *k = eval_expr(L, n->list.data[i]);
      pv_dict_set(L, n->list.data[i]->span, d, k, eval_expr(L, n->list2.data[i]));
    }
    return d;
  }
  case N_LISTCOMP:
  case N_GENEXP:
  case N_SETCOMP:
  case N_DICTCOMP: {
    Env *saved = L->env;
    L->env = env_new(L, saved);
    PV *out = pv_list(L, NULL, 0), *dict = n->kind == N_DICTCOMP ? pv_dict(L) : NULL;
    comp_loop(L, n, 0, out, dict);
    L->env = saved;
    return dict ? dict : out;
  }
  case N_STARRED: lower_error(L, n->span, "starred expression is not allowed here");
  case N_NAMEDEXPR: {
    PV *v = eval_expr(L, n->b);
    assign_target(L, n->a, v);
    return v;
  }
  default: break;
  }
  lower_error(L, n->span, "this expression (%s) is not supported by ctc", fe_node_kind_name(n->kind));
}

/* ---- statements ------------------------------------------------------- */

static void name_tensor(L *L, PV *v, const char *name) {
  if (v->k != PV_TENSOR || !L->fn || v->t->v < 0) return;
  Value *val = ir_val(L->fn, v->t->v);
  if (val->kind == V_INST) val->name = arena_strdup(L->a, name);
}

static void assign_target(L *L, Node *t, PV *v) {
  switch (t->kind) {
  case N_NAME:
    name_tensor(L, v, t->name);
    v->owned = 0;
    env_set(L, L->env, t->name, v);
    return;
  case N_ATTR: setattr_value(L, t->span, eval_expr(L, t->a), t->name, v); return;
  case N_SUBSCRIPT: {
    PV *obj = eval_expr(L, t->a), *idx = eval_expr(L, t->b);
    if (obj->k == PV_LIST) {
      int64_t i = arg_int(L, t->b->span, idx, "list index");
      if (i < 0) i += obj->n;
      if (i < 0 || i >= obj->n) lower_error(L, t->span, "list assignment index out of range");
      obj->items[i] = v;
      return;
    }
    if (obj->k == PV_DICT) {
      pv_dict_set(L, t->b->span, obj, idx, v);
      return;
    }
    if (obj->k == PV_TENSOR)
      lower_error(L, t->span, "assigning into a slice of a tensor is an in-place update; ctc compiles "
                              "value semantics only (use torch.where or torch.cat)");
    lower_error(L, t->span, "'%s' object does not support item assignment", pv_kind_name(obj));
  }
  case N_TUPLE:
  case N_LIST: {
    PV **items;
    int cnt;
    if (v->k == PV_TENSOR) lower_error(L, t->span, "unpacking a tensor is not supported; use split or indexing");
    cnt = iter_items(L, t->span, v, &items);
    eval_charge(L, t->span, cnt);
    int star = -1, nt = t->list.len;
    for (int i = 0; i < nt; i++)
      if (t->list.data[i]->kind == N_STARRED) star = i;
    if (star < 0 && cnt != nt)
      lower_error(L, t->span, "cannot unpack %d values into %d targets", cnt, nt);
    if (star >= 0 && cnt < nt - 1)
      lower_error(L, t->span, "not enough values to unpack (expected at least %d, got %d)", nt - 1, cnt);
    int k = 0;
    for (int i = 0; i < nt; i++) {
      if (i == star) {
        int take = cnt - (nt - 1);
        assign_target(L, t->list.data[i]->a, pv_list(L, items + k, take));
        k += take;
      } else
        assign_target(L, t->list.data[i], items[k++]);
    }
    return;
  }
  default: lower_error(L, t->span, "cannot assign to this expression");
  }
}

static void exec_import(L *L, Node *s) {
  for (int i = 0; i < s->list.len; i++) {
    Node *al = s->list.data[i];
    const char *full = al->name;
    if (s->kind == N_IMPORTFROM) {
      if (strcmp(al->name, "*") == 0)
        lower_error(L, al->span, "'from %s import *' is not supported; import the names you use", s->name);
      full = arena_printf(L->a, "%s.%s", s->name ? s->name : "", al->name);
      PV *ns = pv_ns(L, s->name ? s->name : "");
      PV *v = ns_getattr(L, al->span, ns, al->name);
      env_set(L, L->env, al->name2 ? al->name2 : al->name, v ? v : pv_ns(L, full));
      continue;
    }
    if (al->name2) {
      env_set(L, L->env, al->name2, pv_ns(L, full));
    } else {
      /* import torch.nn binds "torch" */
      const char *dot = strchr(full, '.');
      env_set(L, L->env, dot ? arena_strndup(L->a, full, (size_t)(dot - full)) : full,
              pv_ns(L, dot ? arena_strndup(L->a, full, (size_t)(dot - full)) : full));
    }
  }
}

static void exec_classdef(L *L, Node *s) {
  PV *cls = pv_new(L, PV_CLASS);
  cls->s = s->name;
  cls->node = s;
  cls->env = env_new(L, L->env);
  if (s->list.len > 1) {
    /* multiple inheritance: accept only when the extra bases are plain object */
    lower_error(L, s->list.data[1]->span, "multiple inheritance is not supported by ctc");
  }
  if (s->list.len == 1) {
    PV *base = eval_expr(L, s->list.data[0]);
    if (base->k != PV_CLASS) lower_error(L, s->list.data[0]->span, "base class must be a class, not '%s'", pv_kind_name(base));
    if (base->bi && base->bi != BI_C_MODULE && base->bi != BI_C_OBJECT)
      lower_error(L, s->list.data[0]->span, "subclassing the builtin layer '%s' is not supported", base->s);
    cls->cls = base->bi == BI_C_OBJECT ? NULL : base;
  }
  Env *saved = L->env;
  L->env = cls->env;
  for (int i = 0; i < s->body.len; i++) {
    Node *st = s->body.data[i];
    if (st->kind == N_FUNCDEF) {
      PV *f = make_function(L, st);
      f->env = saved;  /* methods see the enclosing scope, not the class body */
      f->cls = cls;
      for (int k = st->decorators.len - 1; k >= 0; k--) {
        PV *dec = eval_expr(L, st->decorators.data[k]);
        (void)dec;  /* @staticmethod, @property ... are not supported beyond plain methods */
        lower_error(L, st->decorators.data[k]->span, "decorators on methods are not supported by ctc");
      }
      env_set(L, cls->env, st->name, f);
      continue;
    }
    exec_block(L, cls->env, &(NodeVec){&s->body.data[i], 1, 1});
  }
  L->env = saved;
  for (int k = s->decorators.len - 1; k >= 0; k--) {
    PV *dec = eval_expr(L, s->decorators.data[k]);
    if (dec->k == PV_BUILTIN && dec->bi == BI_DATACLASS) env_set(L, cls->env, "__dataclass__", pv_bool(L, 1));
    else if (dec->k == PV_BUILTIN && dec->bi == BI_T_NO_GRAD) continue;
    else lower_error(L, s->decorators.data[k]->span, "this class decorator is not supported by ctc (only @dataclass)");
  }
  env_set(L, L->env, s->name, cls);
}

static int exec_stmt(L *L, Node *s) {
  eval_charge(L, s->span, 1);
  switch (s->kind) {
  case N_EXPR_STMT: {
    PV *v = eval_expr(L, s->a);
    (void)v;
    return EX_NORMAL;
  }
  case N_ASSIGN: {
    PV *v = eval_expr(L, s->a);
    for (int i = 0; i < s->list.len; i++) assign_target(L, s->list.data[i], v);
    return EX_NORMAL;
  }
  case N_AUGASSIGN: {
    /* name += str: the name's own string (made by an earlier `name += ...`, not read
     * since) grows in place, so a loop of += stays linear as in CPython */
    PV *cur = s->a->kind == N_NAME ? lookup_name(L, s->a) : eval_expr(L, s->a);
    int owned = cur->owned;
    cur->owned = 0;
    PV *rhs = eval_expr(L, s->b);
    PV *v;
    if (s->a->kind == N_NAME && cur->k == PV_STR && rhs->k == PV_STR && s->op == OP_ADD) {
      size_t lb = strlen(rhs->s);
      if (owned && (size_t)cur->n + lb + 1 <= (size_t)cur->cap && (size_t)cur->n + lb <= ((size_t)1 << 28)) {
        eval_charge(L, s->span, (int64_t)(lb >> 6));
        memcpy((char *)cur->s + cur->n, rhs->s, lb + 1);
        cur->n += (int)lb;
        v = cur;
      } else
        v = concat_str(L, s->span, cur->s, rhs->s, 1);
      assign_target(L, s->a, v);
      v->owned = 1;
      return EX_NORMAL;
    }
    if (cur->k == PV_LIST && s->op == OP_ADD) {
      PV **it;
      int cnt = iter_items(L, s->b->span, rhs, &it);
      eval_charge(L, s->span, cnt);
      for (int i = 0; i < cnt; i++) pv_list_append(L, cur, it[i]);
      v = cur;
    } else if (cur->k == PV_TENSOR && L->fn) {
      /* `x += y` on a tensor updates it in place: other names bound to it see the change */
      staged_effect_check(L, s->span, "an in-place update of a tensor (write `x = x + ...`)");
      v = t_inplace(L, s->span, cur, binop(L, s->span, s->op, cur, rhs));
    } else
      v = binop(L, s->span, s->op, cur, rhs);
    assign_target(L, s->a, v);
    return EX_NORMAL;
  }
  case N_ANNASSIGN:
    if (s->b) assign_target(L, s->a, eval_expr(L, s->b));
    return EX_NORMAL;
  case N_RETURN:
    L->retval = s->a ? eval_expr(L, s->a) : pv_none(L);
    return EX_RETURN;
  case N_IF: {
    int t = truthy(L, s->a->span, eval_expr(L, s->a));
    return exec_block(L, L->env, t ? &s->body : &s->orelse);
  }
  case N_FOR: {
    PV *it = eval_expr(L, s->b);
    PV **items;
    int cnt = iter_items(L, s->b->span, it, &items);
    for (int i = 0; i < cnt; i++) {
      assign_target(L, s->a, items[i]);
      int r = exec_block(L, L->env, &s->body);
      if (r == EX_RETURN) return r;
      if (r == EX_BREAK) return EX_NORMAL;
    }
    return exec_block(L, L->env, &s->orelse);
  }
  case N_WHILE: {
    while (truthy(L, s->a->span, eval_expr(L, s->a))) {
      int r = exec_block(L, L->env, &s->body);
      if (r == EX_RETURN) return r;
      if (r == EX_BREAK) return EX_NORMAL;
      eval_charge(L, s->span, 1);
    }
    return exec_block(L, L->env, &s->orelse);
  }
  case N_WITH: {
    int restore = L->grad_mode; /* grad-mode managers restore it on exit, innermost first */
    int dual = 0;               /* this statement opens a forward_ad.dual_level() */
    for (int i = 0; i < s->list.len; i++) {
      Node *it = s->list.data[i];
      PV *cm = eval_expr(L, it->a);
      if (cm->k == PV_BUILTIN && cm->bi == BI_FW_DUAL_LEVEL) {
        /* forward_ad.dual_level(): duals made inside belong to this level */
        if (it->b) lower_error(L, it->b->span, "'with dual_level() as ...' binds nothing useful");
        if (L->dual_depth || dual)   /* PyTorch: "Nested forward mode AD is not supported at the moment" */
          lower_error(L, it->span, "nested forward_ad.dual_level() is not supported (as in PyTorch); use "
                                   "torch.func.jvp for higher-order forward mode");
        L->dual_primal.len = L->dual_tangent.len = 0;
        dual = 1;
        continue;
      }
      if (cm->k == PV_BUILTIN && (cm->bi == BI_T_NO_GRAD || cm->bi == BI_T_ENABLE_GRAD ||
                                   cm->bi == BI_T_SET_GRAD_ENABLED || cm->bi == BI_T_INFERENCE_MODE))
        lower_error(L, it->span, "'%s' needs to be called: 'with torch.%s():'", cm->s, cm->s);
      if (!(cm->k == PV_BUILTIN && cm->bi == BI_T_GRAD_MODE))
        lower_error(L, it->span, "only 'with torch.no_grad():' (enable_grad, set_grad_enabled, inference_mode) and "
                                 "'with forward_ad.dual_level():' are supported as context managers");
      if (it->b) lower_error(L, it->b->span, "'with torch.%s() as ...' binds nothing useful", cm->s);
      grad_mode_set(L, (int)cm->i);
    }
    L->dual_depth += dual;
    int r = exec_block(L, L->env, &s->body);
    L->dual_depth -= dual;
    grad_mode_set(L, restore);
    return r;
  }
  case N_PASS: return EX_NORMAL;
  case N_BREAK: return EX_BREAK;
  case N_CONTINUE: return EX_CONTINUE;
  case N_ASSERT: {
    PV *c = eval_expr(L, s->a);
    if (c->k == PV_TENSOR && L->fn && !c->t->data) return EX_NORMAL; /* a run-time check: not compiled */
    if (!truthy(L, s->a->span, c)) {
      const char *msg = s->b ? pv_to_str(L, s->b->span, eval_expr(L, s->b)) : NULL;
      lower_error(L, s->span, "assertion failed at compile time%s%s", msg ? ": " : "", msg ? msg : "");
    }
    return EX_NORMAL;
  }
  case N_DEL:
    for (int i = 0; i < s->list.len; i++) {
      Node *t = s->list.data[i];
      if (t->kind != N_NAME) lower_error(L, t->span, "only 'del name' is supported");
      env_set(L, L->env, t->name, pv_none(L));
    }
    return EX_NORMAL;
  case N_RAISE:
    lower_error(L, s->span, "exception raised at compile time%s%s", s->a ? ": " : "",
                s->a && s->a->kind == N_CALL && s->a->list.len && s->a->list.data[0]->kind == N_STR
                    ? s->a->list.data[0]->sval : "");
  case N_GLOBAL:
    lower_error(L, s->span, "'global' and 'nonlocal' are not supported by ctc");
  case N_TRY:
    /* Compile-time code runs the try body only: a failure there is a
     * compile error, so handlers would never run. */
    {
      int r = exec_block(L, L->env, &s->body);
      if (r != EX_NORMAL) return r;
      r = exec_block(L, L->env, &s->orelse);
      if (r != EX_NORMAL) return r;
      return exec_block(L, L->env, &s->body2);
    }
  case N_IMPORT:
  case N_IMPORTFROM: exec_import(L, s); return EX_NORMAL;
  case N_FUNCDEF: {
    PV *f = make_function(L, s);
    for (int k = s->decorators.len - 1; k >= 0; k--) {
      PV *dec = eval_expr(L, s->decorators.data[k]);
      /* @torch.no_grad(), @torch.enable_grad(), @torch.inference_mode() (bare forms too) */
      if (dec->k == PV_BUILTIN && (dec->bi == BI_T_NO_GRAD || dec->bi == BI_T_ENABLE_GRAD ||
                                   dec->bi == BI_T_INFERENCE_MODE)) {
        f->grad_mode = 1 + (dec->bi == BI_T_NO_GRAD ? NG_REVERSE : dec->bi == BI_T_ENABLE_GRAD ? NG_NONE : NG_ALL);
        continue;
      }
      if (dec->k == PV_BUILTIN && dec->bi == BI_T_GRAD_MODE && dec->n < 0) {
        f->grad_mode = 1 + (int)dec->i;
        continue;
      }
      lower_error(L, s->decorators.data[k]->span, "this function decorator is not supported by ctc");
    }
    env_set(L, L->env, s->name, f);
    return EX_NORMAL;
  }
  case N_CLASSDEF: exec_classdef(L, s); return EX_NORMAL;
  default: break;
  }
  lower_error(L, s->span, "this statement (%s) is not supported by ctc", fe_node_kind_name(s->kind));
}

/* ---- `if` on a run-time tensor ---------------------------------------------
 * A condition that is a one-element tensor computed by the staged function (a
 * learning rate from the iteration counter: `if it < warmup_iters: return ...`)
 * cannot choose a branch at compile time. ctc runs both branches, each on its
 * own copy of the local names, and merges them with torch.where: names bound to
 * different values become where(cond, then, else), and when a branch returns,
 * the statements after the `if` run on the other path and the two return values
 * are selected. This is exact only for code without side effects, so the
 * branches (and those statements) may only bind local names, return, and nest
 * such `if`s; anything else is refused. */

static Node *impure_stmt(NodeVec *b, int from) {
  for (int i = from; i < b->len; i++) {
    Node *s = b->data[i];
    switch (s->kind) {
    case N_ASSIGN:
      for (int k = 0; k < s->list.len; k++) {
        Node *t = s->list.data[k];
        if (t->kind == N_TUPLE) {
          for (int j = 0; j < t->list.len; j++)
            if (t->list.data[j]->kind != N_NAME) return t->list.data[j];
        } else if (t->kind != N_NAME)
          return t;
      }
      break;
    case N_AUGASSIGN:
    case N_ANNASSIGN:
      if (s->a->kind != N_NAME) return s;
      break;
    case N_RETURN: case N_PASS: case N_ASSERT: break;
    case N_EXPR_STMT:
      if (s->a->kind != N_STR) return s;
      break;
    case N_IF: {
      Node *n = impure_stmt(&s->body, 0);
      if (!n) n = impure_stmt(&s->orelse, 0);
      if (n) return n;
      break;
    }
    default: return s;
    }
  }
  return NULL;
}

void staged_effect_check(L *L, Span at, const char *what) {
  if (L->staged_depth)
    lower_error(L, at, "%s under an `if` on a run-time tensor cannot be compiled: ctc runs both branches and selects "
                       "values with torch.where, so effects would happen on both paths", what);
}

CTC_NORETURN static void impure_error(L *L, Node *s) {
  lower_error(L, s->span, "this statement depends on an `if` whose condition is a run-time tensor: ctc computes both "
                          "branches and selects with torch.where, so they (and what follows a branch that returns) "
                          "may only assign local names and return");
}

static Env *env_copy(L *L, Env *e) {
  Env *c = env_new(L, e->parent);
  for (int i = 0; i < e->names.len; i++) env_set(L, c, e->names.data[i], e->vals.data[i]);
  return c;
}

/* The value a name (or the function's result) has after the `if`. */
static PV *select_value(L *L, Span at, const char *what, PV *c, PV *a, PV *b) {
  if (a == b) return a;
  int ta = a->k == PV_TENSOR || pv_is_num(a), tb = b->k == PV_TENSOR || pv_is_num(b);
  if (ta && tb) {
    if (a->k == b->k && a->k != PV_TENSOR && pv_num(a) == pv_num(b)) return a;
    return t_where(L, at, c, a, b);
  }
  if (pv_is_seq(a) && a->k == b->k && a->n == b->n) {
    PV *r = a->k == PV_LIST ? pv_list(L, NULL, 0) : pv_tuple(L, NULL, 0);
    for (int i = 0; i < a->n; i++) pv_list_append(L, r, select_value(L, at, what, c, a->items[i], b->items[i]));
    return r;
  }
  if (!ta && !tb && pv_equal(L, at, a, b)) return a;
  lower_error(L, at, "the branches of this `if` on a run-time tensor give %s different values (%s and %s); only "
                     "tensors and numbers can be selected with torch.where", what, pv_kind_name(a), pv_kind_name(b));
}

/* What follows the block being executed, up to the end of the function: the
 * rest of the enclosing block and, above it, its own continuation. */
struct Cont {
  NodeVec *body;
  int rest;
  struct Cont *up;
};

/* Run what follows an `if` on one path: the rest of its block, then the
 * enclosing blocks' rests, until something returns. */
static int run_tail(L *L, Env *e, NodeVec *body, int rest, struct Cont *up) {
  Node *bad = impure_stmt(body, rest);
  if (bad) impure_error(L, bad);
  struct Cont *saved = L->cont;
  L->cont = up;
  NodeVec tail = {body->data + rest, body->len - rest, body->len - rest};
  int r = exec_block(L, e, &tail);
  L->cont = saved;
  if (r == EX_NORMAL && up) return run_tail(L, e, up->body, up->rest, up->up);
  return r;
}

static int staged_if(L *L, Node *s, PV *c, NodeVec *body, int rest, int *consumed) {
  Type ct = t_type(c);
  int64_t numel = 1;
  for (int d = 0; d < ct.ndim; d++) numel *= ct.dims[d];
  if (numel != 1) lower_error(L, s->a->span, "Boolean value of Tensor with more than one value is ambiguous");
  Node *bad = impure_stmt(&s->body, 0);
  if (!bad) bad = impure_stmt(&s->orelse, 0);
  if (bad) impure_error(L, bad);
  Env *e0 = L->env, *e1 = env_copy(L, e0), *e2 = env_copy(L, e0);
  struct Cont *up = L->cont, here = {body, rest, up};
  L->cont = &here; /* an `if` nested in a branch continues with what follows this one */
  L->staged_depth++;
  int r1 = exec_block(L, e1, &s->body);
  PV *v1 = L->retval;
  int r2 = exec_block(L, e2, &s->orelse);
  PV *v2 = L->retval;
  L->cont = up;
  if (r1 == EX_NORMAL && r2 == EX_NORMAL) {
    for (int i = 0; i < e1->names.len; i++) {
      const char *n = e1->names.data[i];
      PV *b = env_get(e2, n);
      if (b) env_set(L, e0, n, select_value(L, s->span, arena_printf(L->a, "'%s'", n), c, e1->vals.data[i], b));
    }
    L->staged_depth--;
    return EX_NORMAL;
  }
  if ((r1 != EX_NORMAL && r1 != EX_RETURN) || (r2 != EX_NORMAL && r2 != EX_RETURN))
    lower_error(L, s->span, "break/continue under an `if` on a run-time tensor cannot be compiled");
  if (r1 == EX_NORMAL || r2 == EX_NORMAL) {
    /* one branch returned: what follows the `if` is the other path */
    int r = run_tail(L, r1 == EX_NORMAL ? e1 : e2, body, rest, up);
    if (r != EX_RETURN)
      lower_error(L, s->span, "one path through this `if` on a run-time tensor returns a value and the other reaches "
                              "the end of the function");
    if (r1 == EX_NORMAL) v1 = L->retval;
    else v2 = L->retval;
    *consumed = 1;
  }
  L->staged_depth--;
  L->retval = select_value(L, s->span, "return", c, v1, v2);
  return EX_RETURN;
}

int exec_block(L *L, Env *env, NodeVec *body) {
  Env *saved = L->env;
  L->env = env;
  int r = EX_NORMAL;
  for (int i = 0; i < body->len && r == EX_NORMAL; i++) {
    Node *s = body->data[i];
    if (s->kind != N_IF || !L->fn) {
      struct Cont *cont = L->cont; /* loops, with, try: their bodies are not followed by this block's rest */
      L->cont = NULL;
      r = exec_stmt(L, s);
      L->cont = cont;
      continue;
    }
    eval_charge(L, s->span, 1);
    PV *c = eval_expr(L, s->a);
    if (c->k == PV_TENSOR && !c->t->data) {
      int consumed = 0;
      r = staged_if(L, s, c, body, i + 1, &consumed);
      if (consumed) break;
    } else {
      /* a compile-time `if`: a staged `if` inside continues with what follows it */
      struct Cont *up = L->cont, here = {body, i + 1, up};
      L->cont = &here;
      r = exec_block(L, L->env, truthy(L, s->a->span, c) ? &s->body : &s->orelse);
      L->cont = up;
    }
  }
  L->env = saved;
  return r;
}
