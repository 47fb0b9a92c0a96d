/* builtins.c - the handlers of builtins.def: Python builtins, math, methods of
 * compile-time values and of nn.Module; argument binding for native functions. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "py.h"

/* ---- argument binding -------------------------------------------------- */

void bind_args(L *L, Args *A, const char *spec, PV **out) {
  const char *names[24];
  int opt[24], n = 0;
  char buf[256];
  snprintf(buf, sizeof buf, "%s", spec);
  for (char *p = buf; *p && n < 24;) {
    char *e = strchr(p, ',');
    if (e) *e = 0;
    size_t len = strlen(p);
    opt[n] = len && p[len - 1] == '=';
    if (opt[n]) p[len - 1] = 0;
    names[n++] = arena_strdup(L->a, p);
    p = e ? e + 1 : p + len;
  }
  for (int i = 0; i < n; i++) out[i] = NULL;
  if (A->nargs > n)
    lower_error(L, A->at, "%s() takes at most %d arguments (%d given)", A->fname, n, A->nargs);
  for (int i = 0; i < A->nargs; i++) out[i] = A->args[i];
  for (int k = 0; k < A->nkw; k++) {
    int found = -1;
    for (int i = 0; i < n; i++)
      if (strcmp(names[i], A->kwnames[k]) == 0) found = i;
    if (found < 0) lower_error(L, A->at, "%s() got an unexpected keyword argument '%s'", A->fname, A->kwnames[k]);
    if (out[found]) lower_error(L, A->at, "%s() got multiple values for argument '%s'", A->fname, A->kwnames[k]);
    out[found] = A->kwvals[k];
  }
  for (int i = 0; i < n; i++)
    if (!out[i] && !opt[i]) lower_error(L, A->at, "%s() missing required argument '%s'", A->fname, names[i]);
}

int64_t arg_int(L *L, Span at, PV *v, const char *what) {
  if (v->k == PV_INT || v->k == PV_BOOL) return v->i;
  if (v->k == PV_OPAQUE) pv_opaque_error(L, at, v, arena_printf(L->a, "%s", what));
  if (pv_is_host(v))
    lower_error(L, at, "%s must be known at compile time, but it is a '%s'", what, pv_kind_name(v));
  lower_error(L, at, "%s must be an int, not '%s'", what, pv_kind_name(v));
}

double arg_num(L *L, Span at, PV *v, const char *what) {
  if (pv_is_num(v)) return pv_num(v);
  if (v->k == PV_OPAQUE) pv_opaque_error(L, at, v, arena_printf(L->a, "%s", what));
  if (pv_is_host(v))
    lower_error(L, at, "%s must be known at compile time, but it is a '%s'", what, pv_kind_name(v));
  lower_error(L, at, "%s must be a number, not '%s'", what, pv_kind_name(v));
}

int arg_bool(L *L, Span at, PV *v, const char *what) {
  if (v->k == PV_BOOL || v->k == PV_INT) return v->i != 0;
  if (v->k == PV_NONE) return 0;
  if (v->k == PV_OPAQUE) pv_opaque_error(L, at, v, arena_printf(L->a, "%s", what));
  lower_error(L, at, "%s must be a bool, not '%s'", what, pv_kind_name(v));
}

int arg_ints(L *L, Span at, PV *v, int64_t *out, int max, const char *what) {
  if (pv_is_seq(v)) {
    if (v->n > max) lower_error(L, at, "%s has too many entries (%d, at most %d)", what, v->n, max);
    for (int i = 0; i < v->n; i++) out[i] = arg_int(L, at, v->items[i], what);
    return v->n;
  }
  out[0] = arg_int(L, at, v, what);
  return 1;
}

/* ---- the table of builtins.def -------------------------------------------- */

const PyRow py_rows[PY_BI__COUNT] = {
    [BI_NONE_] = {"", 0, BK_FN, NULL, 0},
#define B(id, nm, ns_, handler, a) [BI_##id] = {nm, ns_, BK_FN, handler, a},
#define CLASS(id, nm, ns_, construct) [BI_##id] = {nm, ns_, BK_CLASS, construct, 0},
#include "builtins.def"
#undef B
#undef CLASS
};

PV *py_builtin(L *L, int bi, PV *self) {
  const PyRow *r = &py_rows[bi];
  if (r->kind == BK_FN) return pv_native(L, r->call, bi, r->name, self);
  PV *c = pv_new(L, PV_CLASS);
  c->bi = bi;
  c->s = r->name;
  return c;
}

PV *py_lookup(L *L, unsigned ns, const char *name, PV *self) {
  for (int i = 1; i < PY_BI__COUNT; i++)
    if ((py_rows[i].ns & ns) && strcmp(py_rows[i].name, name) == 0) {
      PV *v = py_builtin(L, i, self);
      if (v->k == PV_BUILTIN) v->i = py_rows[i].ns & ns;
      return v;
    }
  return NULL;
}

void py_install_builtins(L *L, Env *b) {
  for (int i = 1; i < PY_BI__COUNT; i++) {
    if (!py_rows[i].call) BUG("builtin row %d has no handler", i);
    for (int j = i + 1; j < PY_BI__COUNT; j++)
      if ((py_rows[i].ns & py_rows[j].ns) && strcmp(py_rows[i].name, py_rows[j].name) == 0)
        BUG("builtin '%s' registered twice in one namespace", py_rows[i].name);
    if (py_rows[i].ns & NS_BUILTINS) env_set(L, b, py_rows[i].name, py_builtin(L, i, NULL));
  }
  env_set(L, b, "__name__", pv_str(L, "__ctc__"));
}

/* ---- Python modules (math, dataclasses, typing) -------------------------- */

PV *py_module_attr(L *L, Span at, PV *ns, const char *name) {
  const char *m = ns->s;
  if (strcmp(m, "math") == 0) {
    if (strcmp(name, "pi") == 0) return pv_float(L, M_PI);
    if (strcmp(name, "e") == 0) return pv_float(L, M_E);
    if (strcmp(name, "inf") == 0) return pv_float(L, INFINITY);
    if (strcmp(name, "nan") == 0) return pv_float(L, NAN);
    if (strcmp(name, "tau") == 0) return pv_float(L, 2 * M_PI);
    /* CPython's math is fully known: what ctc lacks is an error, not an opaque value */
    PV *f = py_lookup(L, NS_MATH, name, NULL);
    if (!f) lower_error(L, at, "math.%s is not supported by ctc", name);
    return f;
  }
  if (strcmp(m, "numpy") == 0) {   /* its scalars and functions of Python numbers; the rest opaque (NULL) */
    if (!strcmp(name, "pi")) return pv_float(L, M_PI);
    if (!strcmp(name, "e")) return pv_float(L, M_E);
    if (!strcmp(name, "inf") || !strcmp(name, "Inf") || !strcmp(name, "infty")) return pv_float(L, INFINITY);
    if (!strcmp(name, "nan") || !strcmp(name, "NaN")) return pv_float(L, NAN);
    if (!strcmp(name, "newaxis")) return pv_none(L);
    return py_lookup(L, NS_NUMPY, name, NULL);
  }
  if (strcmp(m, "dataclasses") == 0) return py_lookup(L, NS_DATACLASSES, name, NULL);
  if (strcmp(m, "typing") == 0) return pv_none(L);
  if (strcmp(m, "argparse") == 0) return py_lookup(L, NS_ARGPARSE, name, NULL);
  return NULL;
}

/* numpy.log(x) ... of Python numbers as numpy computes them in float64 (IEEE: log(0) = -inf,
 * sqrt(-1) = nan); of any other value (an array) the call of the opaque numpy function it was. */
PV *bi_numpy(L *L, PV *fn, Args *A) {
  const int bi = fn->bi, two = bi == BI_NP_POWER;
  int nums = A->nargs == 1 + two && !A->nkw;
  for (int i = 0; nums && i < A->nargs; i++) nums = pv_is_num(A->args[i]) && A->args[i]->k != PV_COMPLEX;
  if (!nums) {
    PV *o = pv_opaque(L, A->at, arena_printf(L->a, "numpy.%s", py_rows[bi].name));
    return call_value(L, A->at, o, A->args, A->nargs, A->kwnames, A->kwvals, A->nkw);
  }
  const double x = pv_num(A->args[0]);
  switch (bi) {
  case BI_NP_LOG: return pv_float(L, log(x));
  case BI_NP_LOG2: return pv_float(L, log2(x));
  case BI_NP_LOG10: return pv_float(L, log10(x));
  case BI_NP_LOG1P: return pv_float(L, log1p(x));
  case BI_NP_EXP: return pv_float(L, exp(x));
  case BI_NP_EXPM1: return pv_float(L, expm1(x));
  case BI_NP_SQRT: return pv_float(L, sqrt(x));
  case BI_NP_SIN: return pv_float(L, sin(x));
  case BI_NP_COS: return pv_float(L, cos(x));
  case BI_NP_TAN: return pv_float(L, tan(x));
  case BI_NP_TANH: return pv_float(L, tanh(x));
  case BI_NP_ARCTAN: return pv_float(L, atan(x));
  case BI_NP_ARCSIN: return pv_float(L, asin(x));
  case BI_NP_ARCCOS: return pv_float(L, acos(x));
  case BI_NP_FLOOR: return pv_float(L, floor(x));
  case BI_NP_CEIL: return pv_float(L, ceil(x));
  case BI_NP_ABS:
  case BI_NP_ABSOLUTE: return A->args[0]->k == PV_FLOAT ? pv_float(L, fabs(x)) : pv_int(L, A->args[0]->i < 0 ? -A->args[0]->i : A->args[0]->i);
  case BI_NP_POWER: return pv_float(L, pow(x, pv_num(A->args[1])));
  default: BUG("numpy row %d", bi);
  }
}

/* staticmethod(f), classmethod(f), property(f) called as functions (as
 * decorators in a class body they are applied by exec_classdef the same way) */
PV *bi_method_kind(L *L, PV *fn, Args *A) {
  if (A->nargs != 1 || A->nkw || A->args[0]->k != PV_FUNC)
    lower_error(L, A->at, "%s() takes one function here", A->fname);
  PV *f = pv_new(L, PV_FUNC);
  *f = *A->args[0];
  f->i = py_rows[fn->bi].arg;
  return f;
}

PV *bi_not_callable(L *L, PV *fn, Args *A) { lower_error(L, A->at, "'%s' is not callable", fn->s); }

/* object(), the root of user classes */
PV *bi_object_new(L *L, PV *cls, Args *A) {
  PV *o = pv_new(L, PV_OBJ);
  o->cls = cls;
  o->attrs = env_new(L, NULL);
  return o;
}

/* ---- Python builtins ----------------------------------------------------- */

static PV *minmax(L *L, Args *A, int is_max) {
  PV **items = A->args;
  int n = A->nargs;
  if (n == 1) n = iter_items_any_order(L, A->at, A->args[0], &items);
  if (n == 0) lower_error(L, A->at, "%s() of an empty sequence", A->fname);
  eval_charge(L, A->at, n);
  PV *best = items[0];
  for (int i = 1; i < n; i++) {
    if (L->host && (L->host->runtime(L, items[i]) || L->host->runtime(L, best)) &&
        (pv_is_num(items[i]) || L->host->runtime(L, items[i])) && (pv_is_num(best) || L->host->runtime(L, best))) {
      /* a run-time value (an LR lambda's epoch counter): Python's `if x < best:
       * best = x` staged as a select */
      PV *c = L->host->compare(L, A->at, is_max ? OP_GT : OP_LT, items[i], best);
      L->host->check_cond(L, A->at, c);
      best = L->host->select(L, A->at, c, items[i], best);
      continue;
    }
    if (!pv_is_num(items[i]) || !pv_is_num(best))
      lower_error(L, A->at, "%s() works on numbers at compile time", A->fname);
    if (is_max ? pv_num(items[i]) > pv_num(best) : pv_num(items[i]) < pv_num(best)) best = items[i];
  }
  return best;
}

static const char *fstr(L *L, PV *fmt, Args *A) {
  /* "...".format(...): fields {}, {0}, {name}, with !r/!s/!a and a :spec */
  const char *s = fmt->s;
  SB out = {0};
  int next = 0;
  for (; *s; s++) {
    if (*s == '{' && s[1] == '{') { sb_add(L, A->at, &out, "{", 1); s++; continue; }
    if (*s == '}' && s[1] == '}') { sb_add(L, A->at, &out, "}", 1); s++; continue; }
    if (*s == '}') lower_error(L, A->at, "Single '}' encountered in format string");
    if (*s != '{') {
      sb_add(L, A->at, &out, s, 1);
      continue;
    }
    const char *e = strchr(s, '}');
    if (!e) lower_error(L, A->at, "Single '{' encountered in format string");
    size_t nl = strcspn(s + 1, "!:}");
    const char *name = arena_strndup(L->a, s + 1, nl), *p = s + 1 + nl;
    PV *v = NULL;
    if (!name[0]) {
      if (next < 0) lower_error(L, A->at, "cannot switch from manual field specification to automatic field numbering");
      if (next >= A->nargs) lower_error(L, A->at, "Replacement index %d out of range for positional args tuple", next);
      v = A->args[next++];
    } else if (strspn(name, "0123456789") == nl) {
      if (next > 0) lower_error(L, A->at, "cannot switch from automatic field numbering to manual field specification");
      next = -1;
      int64_t idx = nl > 9 ? INT32_MAX : strtoll(name, NULL, 10);
      if (idx >= A->nargs) lower_error(L, A->at, "Replacement index %lld out of range for positional args tuple", (long long)idx);
      v = A->args[idx];
    } else {
      for (int k = 0; k < A->nkw; k++)
        if (strcmp(A->kwnames[k], name) == 0) v = A->kwvals[k];
      if (!v) lower_error(L, A->at, "format(): no argument named '%s' (attribute and index fields are not supported)", name);
    }
    char conv = 0;
    if (*p == '!') {
      conv = p[1];
      if (!conv || !strchr("rsa", conv)) lower_error(L, A->at, "Unknown conversion specifier %c", conv ? conv : ' ');
      p += 2;
    }
    const char *spec = "";
    if (*p == ':') {
      spec = arena_strndup(L->a, p + 1, (size_t)(e - p - 1));
      if (strchr(spec, '{')) lower_error(L, A->at, "nested fields in format specs are not supported by str.format here");
      p = e;
    }
    if (p != e) lower_error(L, A->at, "expected '}' before end of string");
    if (conv == 'r' || conv == 'a') v = pv_str(L, pv_repr(L, A->at, v));
    else if (conv == 's') v = pv_str(L, pv_to_str(L, A->at, v));
    if (v->k == PV_HOST && spec[0] && L->host->math) {   /* '{:.2f}'.format(t) of a one-element host value */
      PV *num = L->host->math(L, A->at, "float", v);
      if (num && pv_is_num(num)) v = num;
    }
    sb_adds(L, A->at, &out, pv_format(L, A->at, v, spec));
    s = e;
  }
  return sb_done(L, &out);
}

/* Merge sort (stable, as Python's sort) with Python's < */
static void merge_sort(L *L, Span at, PV **v, PV **tmp, int n) {
  if (n < 2) return;
  int h = n / 2;
  merge_sort(L, at, v, tmp, h);
  merge_sort(L, at, v + h, tmp, n - h);
  int i = 0, j = h, k = 0;
  while (i < h && j < n) tmp[k++] = pv_less(L, at, v[j], v[i]) ? v[j++] : v[i++];
  while (i < h) tmp[k++] = v[i++];
  while (j < n) tmp[k++] = v[j++];
  memcpy(v, tmp, sizeof(PV *) * (size_t)n);
}

/* The Python builtins, math, dataclasses and the methods of str, list, dict. */
static const char *float_text(L *L, double x) { return pv_repr(L, (Span){0}, pv_float(L, x)); }

/* math's one-argument functions on a float, with CPython's errors: a NaN from a
 * number, or an infinity from a finite number, is a ValueError or OverflowError
 * there, so a located error here. */
static PV *math1(L *L, Span at, int bi, double x) {
  double r;
  switch (bi) {
  case BI_M_FABS: return pv_float(L, fabs(x));
  case BI_M_TRUNC: return pv_int(L, ck_float_to_int(L, at, trunc(x)));
  case BI_M_ISFINITE: return pv_bool(L, isfinite(x));
  case BI_M_ISINF: return pv_bool(L, isinf(x));
  case BI_M_ISNAN: return pv_bool(L, isnan(x));
  case BI_M_DEGREES: return pv_float(L, x / (M_PI / 180.0));   /* CPython: x / degToRad */
  case BI_M_RADIANS: return pv_float(L, x * (M_PI / 180.0));
  case BI_M_LOG2: r = x > 0 || isnan(x) ? log2(x) : NAN; break;    /* log2(0): ValueError, not -inf */
  case BI_M_LOG10: r = x > 0 || isnan(x) ? log10(x) : NAN; break;
  case BI_M_LOG1P: r = x > -1 || isnan(x) ? log1p(x) : NAN; break;
  case BI_M_EXPM1: r = expm1(x); break;
  case BI_M_TAN: r = tan(x); break;
  case BI_M_ATAN: r = atan(x); break;
  case BI_M_ASIN: r = asin(x); break;
  case BI_M_ACOS: r = acos(x); break;
  case BI_M_SINH: r = sinh(x); break;
  case BI_M_COSH: r = cosh(x); break;
  case BI_M_ASINH: r = asinh(x); break;
  case BI_M_ACOSH: r = acosh(x); break;
  case BI_M_ATANH: r = x > -1 && x < 1 ? atanh(x) : isnan(x) ? x : NAN; break;
  case BI_M_ERF: r = erf(x); break;
  case BI_M_ERFC: r = erfc(x); break;
  default: BUG("math row %d", bi);
  }
  if (isnan(r) && !isnan(x)) lower_error(L, at, "math domain error (ValueError): math.%s(%s)", py_rows[bi].name, float_text(L, x));
  if (isinf(r) && isfinite(x)) lower_error(L, at, "math range error (OverflowError): math.%s(%s)", py_rows[bi].name, float_text(L, x));
  return pv_float(L, r);
}

PV *bi_python(L *L, PV *fn, Args *A) {
  PV *a[8];
  int bi = fn->bi;
  switch (bi) {
  case BI_RANGE: {
    bind_args(L, A, "a,b=,c=", a);
    int64_t lo = 0, hi, st = 1;
    if (a[1]) {
      lo = arg_int(L, A->at, a[0], "range start");
      hi = arg_int(L, A->at, a[1], "range stop");
      if (a[2]) st = arg_int(L, A->at, a[2], "range step");
    } else
      hi = arg_int(L, A->at, a[0], "range stop");
    if (st == 0) lower_error(L, A->at, "range() arg 3 must not be zero");
    /* the length first (lo + k * st never overflows for k < cnt) */
    uint64_t span = st > 0 ? (lo < hi ? (uint64_t)hi - (uint64_t)lo : 0) : (lo > hi ? (uint64_t)lo - (uint64_t)hi : 0);
    uint64_t ust = st > 0 ? (uint64_t)st : (uint64_t)0 - (uint64_t)st;
    uint64_t cnt = span ? (span - 1) / ust + 1 : 0;
    if (cnt > 10000000) lower_error(L, A->at, "range() of %llu items is too long to unroll at compile time", (unsigned long long)cnt);
    eval_charge(L, A->at, (int64_t)cnt);
    PV *r = pv_tuple(L, NULL, 0);
    r->items = arena_alloc(L->a, sizeof(PV *) * (size_t)(cnt + 1));
    r->cap = (int)cnt + 1;
    for (uint64_t k = 0; k < cnt; k++) r->items[r->n++] = pv_int(L, (int64_t)((uint64_t)lo + k * (uint64_t)st));
    return r;
  }
  case BI_LEN: {
    bind_args(L, A, "x", a);
    if (a[0]->k == PV_STR) return pv_int(L, (int64_t)strlen(a[0]->s));
    if (a[0]->k == PV_OPAQUE) {   /* not 0 (iter_items' empty loop): an opaque int */
      if (L->host->staging(L)) pv_opaque_error(L, A->at, a[0], "len() in compiled code");
      return pv_opaque_from(L, A->at, a[0], arena_printf(L->a, "len(%s)", a[0]->s));
    }
    if (pv_is_host(a[0])) {
      PV *r = L->host->math(L, A->at, "len", a[0]);
      if (r) return r;
    }
    PV **it;
    return pv_int(L, iter_items_any_order(L, A->at, a[0], &it));
  }
  case BI_INT:
  case BI_FLOAT:
  case BI_BOOL: {
    bind_args(L, A, "x=", a);
    if (!a[0]) return bi == BI_INT ? pv_int(L, 0) : bi == BI_FLOAT ? pv_float(L, 0) : pv_bool(L, 0);
    if (bi == BI_BOOL) return pv_bool(L, truthy(L, A->at, a[0]));
    if (a[0]->k == PV_STR) {
      char *end;
      if (bi == BI_FLOAT) {
        double d = strtod(a[0]->s, &end);
        if (*end || end == a[0]->s) lower_error(L, A->at, "could not convert string to float: '%s'", a[0]->s);
        return pv_float(L, d);
      }
      errno = 0;
      long long v = strtoll(a[0]->s, &end, 10);
      while (*end == ' ' || *end == '\t' || *end == '\n') end++;
      if (*end || end == a[0]->s) lower_error(L, A->at, "invalid literal for int() with base 10: '%s'", a[0]->s);
      if (errno == ERANGE) int_too_large(L, A->at);
      return pv_int(L, v);
    }
    if (pv_is_host(a[0])) {
      PV *r = L->host->math(L, A->at, A->fname, a[0]);
      if (r) return r;
    }
    if (a[0]->k == PV_COMPLEX)
      py_raise(L, A->at, "TypeError", "%s() argument must be a string or a %snumber, not 'complex'", A->fname,
               bi == BI_INT ? "" : "real ");
    double v = arg_num(L, A->at, a[0], "argument");
    if (bi == BI_FLOAT) return pv_float(L, v);
    if (a[0]->k != PV_FLOAT) return pv_int(L, a[0]->i);
    return pv_int(L, ck_float_to_int(L, A->at, trunc(v)));
  }
  case BI_COMPLEX_CONJUGATE:
    bind_args(L, A, "", a);
    return pv_complex(L, fn->self->f, -fn->self->fi);
  case BI_COMPLEX: {   /* complex(real=0, imag=0): numbers or complex numbers */
    bind_args(L, A, "real=,imag=", a);
    double p[4] = {0, 0, 0, 0};
    for (int k = 0; k < 2; k++) {
      if (!a[k]) continue;
      if (a[k]->k == PV_STR) lower_error(L, A->at, "complex() from a string is not supported by ctc");
      if (a[k]->k == PV_COMPLEX) p[2 * k] = a[k]->f, p[2 * k + 1] = a[k]->fi;
      else if (pv_is_num(a[k])) p[2 * k] = pv_num(a[k]);
      else py_raise(L, A->at, "TypeError", "complex() argument must be a number, not '%s'", pv_kind_name(a[k]));
    }
    return pv_complex(L, p[0] - p[3], p[1] + p[2]);   /* real + imag * 1j, as CPython */
  }
  case BI_STR:
    bind_args(L, A, "x=", a);
    if (a[0] && pv_text_unknown(L, A->at, a[0], "str()")) return pv_text_unknown(L, A->at, a[0], "str()");
    return pv_str(L, a[0] ? pv_to_str(L, A->at, a[0]) : "");
  case BI_REPR:
    bind_args(L, A, "x", a);
    if (pv_text_unknown(L, A->at, a[0], "repr()")) return pv_text_unknown(L, A->at, a[0], "repr()");
    return pv_str(L, pv_repr(L, A->at, a[0]));
  case BI_LIST:
  case BI_TUPLE:
  case BI_SORTED:
  case BI_REVERSED: {
    bind_args(L, A, "x=", a);
    PV **it = NULL;
    /* list(s)/tuple(s) of a set keep its (hash) order unknown: the result is marked, and only
     * order-blind uses (sorted, len, min ...) may read it */
    const int hashed = a[0] && (bi == BI_LIST || bi == BI_TUPLE) && a[0]->bi == BI_SET &&
                       (a[0]->k == PV_DICT || pv_is_seq(a[0]));
    int n = a[0] ? (bi == BI_SORTED || hashed ? iter_items_any_order : iter_items)(L, A->at, a[0], &it) : 0;
    eval_charge(L, A->at, n);
    PV *r = bi == BI_TUPLE ? pv_tuple(L, it, n) : pv_list(L, it, n);
    if (hashed) r->bi = BI_SET;
    if (bi == BI_REVERSED)
      for (int i = 0; i < n / 2; i++) {
        PV *t = r->items[i];
        r->items[i] = r->items[n - 1 - i];
        r->items[n - 1 - i] = t;
      }
    if (bi == BI_SORTED) {
      int lg = 1;
      while ((1 << lg) < n && lg < 31) lg++;
      eval_charge(L, A->at, (int64_t)n * lg);
      merge_sort(L, A->at, r->items, arena_alloc(L->a, sizeof(PV *) * (size_t)(n + 1)), n);
    }
    return r;
  }
  case BI_DICT: {
    PV *d = pv_dict(L);
    if (A->nargs > 1) lower_error(L, A->at, "dict() takes at most 1 positional argument");
    if (A->nargs == 1) {
      if (A->args[0]->k != PV_DICT) lower_error(L, A->at, "dict(x) needs a dict at compile time");
      eval_charge(L, A->at, A->args[0]->n);
      for (int i = 0; i < A->args[0]->n; i++) pv_dict_set(L, A->at, d, A->args[0]->keys[i], A->args[0]->items[i]);
    }
    for (int k = 0; k < A->nkw; k++) pv_dict_set(L, A->at, d, pv_str(L, A->kwnames[k]), A->kwvals[k]);
    return d;
  }
  case BI_ENUMERATE: {
    bind_args(L, A, "x,start=", a);
    PV **it;
    int n = iter_items(L, A->at, a[0], &it);
    int64_t st = a[1] ? arg_int(L, A->at, a[1], "start") : 0;
    eval_charge(L, A->at, n);
    if (n) ck_add(L, A->at, st, n - 1); /* the last index fits */
    PV *r = pv_list(L, NULL, 0);
    for (int i = 0; i < n; i++) {
      PV *pair[2] = {pv_int(L, st + i), it[i]};
      pv_list_append(L, r, pv_tuple(L, pair, 2));
    }
    return r;
  }
  case BI_ZIP: {
    PV *r = pv_list(L, NULL, 0);
    PV ***its = arena_alloc(L->a, sizeof(PV **) * (size_t)(A->nargs + 1));
    int *ns = arena_alloc(L->a, sizeof(int) * (size_t)(A->nargs + 1)), n = 1 << 30;
    for (int i = 0; i < A->nargs; i++) {
      ns[i] = iter_items(L, A->at, A->args[i], &its[i]);
      if (ns[i] < n) n = ns[i];
    }
    if (!A->nargs) n = 0;
    eval_charge(L, A->at, n);
    PV **t = arena_alloc(L->a, sizeof(PV *) * (size_t)(A->nargs + 1));   /* pv_tuple copies it */
    for (int k = 0; k < n; k++) {
      for (int i = 0; i < A->nargs; i++) t[i] = its[i][k];
      pv_list_append(L, r, pv_tuple(L, t, A->nargs));
    }
    return r;
  }
  case BI_MAP: {   /* a list (Python's iterator, consumed once, as files unpack and iterate it) */
    if (A->nargs < 2 || A->nkw) lower_error(L, A->at, "map() takes a function and at least one iterable");
    PV ***its = arena_alloc(L->a, sizeof(PV **) * (size_t)A->nargs);
    int n = 1 << 30;
    for (int i = 1; i < A->nargs; i++) {
      int k = iter_items(L, A->at, A->args[i], &its[i]);
      if (k < n) n = k;
    }
    eval_charge(L, A->at, n);
    PV *r = pv_list(L, NULL, 0), **t = arena_alloc(L->a, sizeof(PV *) * (size_t)A->nargs);
    for (int k = 0; k < n; k++) {
      for (int i = 1; i < A->nargs; i++) t[i - 1] = its[i][k];
      pv_list_append(L, r, call_value(L, A->at, A->args[0], t, A->nargs - 1, NULL, NULL, 0));
    }
    return r;
  }
  case BI_FILTER: {
    bind_args(L, A, "function,iterable", a);
    PV **items;
    int n = iter_items(L, A->at, a[1], &items);
    eval_charge(L, A->at, n);
    PV *r = pv_list(L, NULL, 0);
    for (int k = 0; k < n; k++) {
      PV *keep = a[0]->k == PV_NONE ? items[k] : call_value(L, A->at, a[0], &items[k], 1, NULL, NULL, 0);
      if (truthy(L, A->at, keep)) pv_list_append(L, r, items[k]);
    }
    return r;
  }
  case BI_MIN: return minmax(L, A, 0);
  case BI_MAX: return minmax(L, A, 1);
  case BI_ABS:
    bind_args(L, A, "x", a);
    if (pv_is_host(a[0])) {
      PV *r = L->host->math(L, A->at, "abs", a[0]);
      if (r) return r;
    }
    if (a[0]->k == PV_FLOAT) return pv_float(L, fabs(a[0]->f));
    if (a[0]->k == PV_COMPLEX) return pv_float(L, hypot(a[0]->f, a[0]->fi));
    {
      int64_t x = arg_int(L, A->at, a[0], "abs() argument");
      return pv_int(L, x < 0 ? ck_neg(L, A->at, x) : x);
    }
  case BI_SUM: {
    bind_args(L, A, "x,start=", a);
    PV **it;
    int n = iter_items_any_order(L, A->at, a[0], &it);
    PV *acc = a[1] ? a[1] : pv_int(L, 0);
    eval_charge(L, A->at, n);
    for (int i = 0; i < n; i++) {
      if (pv_is_host(acc) || pv_is_host(it[i])) acc = L->host->binary(L, A->at, OP_ADD, acc, it[i]);
      else if (pv_is_num(acc) && pv_is_num(it[i]))
        acc = acc->k == PV_FLOAT || it[i]->k == PV_FLOAT ? pv_float(L, pv_num(acc) + pv_num(it[i]))
                                                          : pv_int(L, ck_add(L, A->at, acc->i, it[i]->i));
      else lower_error(L, A->at, "sum() of '%s' values is not supported", pv_kind_name(it[i]));
    }
    return acc;
  }
  case BI_ISINSTANCE: {
    bind_args(L, A, "obj,cls", a);
    if (a[0]->k == PV_OPAQUE || a[1]->k == PV_OPAQUE) {   /* the answer is Python's, not known here */
      PV *o = a[0]->k == PV_OPAQUE ? a[0] : a[1];
      PV *r = pv_opaque_from(L, A->at, o, arena_printf(L->a, "isinstance(%s, ...)", o->s));
      r->unknown_truth = 1;
      return r;
    }
    PV **cls = &a[1];
    int n = 1;
    if (a[1]->k == PV_TUPLE) {
      cls = a[1]->items;
      n = a[1]->n;
    }
    for (int i = 0; i < n; i++) {
      PV *c = cls[i];
      if (c->k == PV_BUILTIN) {
        int ok = (c->bi == BI_INT && a[0]->k == PV_INT) || (c->bi == BI_FLOAT && a[0]->k == PV_FLOAT) ||
                 (c->bi == BI_BOOL && a[0]->k == PV_BOOL) || (c->bi == BI_STR && a[0]->k == PV_STR) ||
                 (c->bi == BI_LIST && a[0]->k == PV_LIST) || (c->bi == BI_TUPLE && a[0]->k == PV_TUPLE) ||
                 (c->bi == BI_DICT && a[0]->k == PV_DICT);
        if (ok) return pv_bool(L, 1);
        continue;
      }
      if (c->k != PV_CLASS) lower_error(L, A->at, "isinstance() arg 2 must be a class");
      if (c->bi == BI_OBJECT) return pv_bool(L, 1);
      if (a[0]->k == PV_OBJ && a[0]->bi != BI_SUPER_PROXY && pv_class_is(a[0]->cls, c)) return pv_bool(L, 1);
      if (c->bi && L->host->isinstance(a[0], c) == 1) return pv_bool(L, 1);
    }
    return pv_bool(L, 0);
  }
  case BI_HASATTR:
    bind_args(L, A, "obj,name", a);
    if (a[1]->k != PV_STR) lower_error(L, A->at, "attribute name must be a string");
    if (a[0]->k == PV_NS) {
      /* hasattr(F, 'scaled_dot_product_attention'): true only for what ctc knows */
      PV *v = getattr_opt(L, A->at, a[0], a[1]->s);
      return pv_bool(L, v && v->k != PV_NS);
    }
    return pv_bool(L, getattr_opt(L, A->at, a[0], a[1]->s) != NULL);
  case BI_GETATTR: {
    bind_args(L, A, "obj,name,default=", a);
    if (a[1]->k != PV_STR) lower_error(L, A->at, "attribute name must be a string");
    PV *v = getattr_opt(L, A->at, a[0], a[1]->s);
    if (!v && a[2]) return a[2];
    return v ? v : getattr_value(L, A->at, a[0], a[1]->s);
  }
  case BI_SETATTR:
    bind_args(L, A, "obj,name,value", a);
    if (a[1]->k != PV_STR) lower_error(L, A->at, "attribute name must be a string");
    setattr_value(L, A->at, a[0], a[1]->s, a[2]);
    return pv_none(L);
  case BI_PRINT: return pv_none(L); /* prints at compile time are dropped */
  case BI_OBJECT_INIT: return pv_none(L);
  case BI_SUPER: {
    bind_args(L, A, "cls=,obj=", a);
    PV *cls = a[0], *obj = a[1];
    if (!cls) {
      cls = env_lookup(L->env, "__class__");
      if (!cls) lower_error(L, A->at, "super() without arguments must be used inside a method");
      /* the first parameter of the enclosing method */
      obj = env_lookup(L->env, "self");
      if (!obj) lower_error(L, A->at, "super() without arguments needs the method's first parameter to be 'self'");
    }
    if (!obj || obj->k != PV_OBJ || cls->k != PV_CLASS) lower_error(L, A->at, "super() arguments must be a class and an instance");
    PV *p = pv_new(L, PV_OBJ);
    p->bi = BI_SUPER_PROXY;
    p->self = obj;
    p->cls = cls->cls;
    return p;
  }
  case BI_ROUND: {
    bind_args(L, A, "x,n=", a);
    double v = arg_num(L, A->at, a[0], "round() argument");
    if (a[1] && a[1]->k != PV_NONE) {
      int64_t nd = arg_int(L, A->at, a[1], "ndigits");
      if (a[0]->k != PV_FLOAT) {
        /* round(int, n): unchanged for n >= 0, else to a multiple of 10**-n (half to even) */
        int64_t x = a[0]->i;
        if (nd >= 0) return pv_int(L, x);
        if (nd < -18) return pv_int(L, 0);
        int64_t p = ck_pow(L, A->at, 10, -nd), q = x / p, m = x % p;
        if (m < 0) { m += p; q -= 1; }
        if (m > p - m || (m == p - m && (q & 1))) q += 1; /* half to even */
        return pv_int(L, ck_mul(L, A->at, q, p));
      }
      if (!isfinite(v) || nd > 308) return pv_float(L, v);
      if (nd < -308) return pv_float(L, copysign(0.0, v));
      if (nd >= 0) /* printf rounds the exact binary value half-to-even, as Python's round */
        return pv_float(L, strtod(arena_printf(L->a, "%.*f", (int)nd, v), NULL));
      double s = pow(10, (double)-nd), r = nearbyint(v / s) * s;
      return pv_float(L, isfinite(r) ? r : v);
    }
    if (a[0]->k != PV_FLOAT) return pv_int(L, a[0]->i);
    return pv_int(L, ck_float_to_int(L, A->at, nearbyint(v)));
  }
  case BI_ANY:
  case BI_ALL: {
    bind_args(L, A, "x", a);
    PV **it;
    int n = iter_items_any_order(L, A->at, a[0], &it);
    eval_charge(L, A->at, n);
    for (int i = 0; i < n; i++) {
      int t = truthy(L, A->at, it[i]);
      if (bi == BI_ANY && t) return pv_bool(L, 1);
      if (bi == BI_ALL && !t) return pv_bool(L, 0);
    }
    return pv_bool(L, bi == BI_ALL);
  }
  case BI_TYPE:
    bind_args(L, A, "x", a);
    if (a[0]->k == PV_OBJ) return a[0]->cls;
    lower_error(L, A->at, "type() is only supported on objects at compile time");
  case BI_DATACLASS: lower_error(L, A->at, "@dataclass(...) with arguments is not supported; use @dataclass");
  case BI_FIELD: {
    bind_args(L, A, "default=,default_factory=", a);
    if (a[0]) return a[0];
    if (a[1]) return call_value(L, A->at, a[1], NULL, 0, NULL, NULL, 0);
    lower_error(L, A->at, "field() needs a default");
  }
  case BI_LIST_APPEND:
    bind_args(L, A, "x", a);
    pv_list_append(L, fn->self, a[0]);
    return pv_none(L);
  case BI_LIST_EXTEND: {
    bind_args(L, A, "x", a);
    PV **it;
    int n = iter_items(L, A->at, a[0], &it);
    eval_charge(L, A->at, n);
    for (int i = 0; i < n; i++) pv_list_append(L, fn->self, it[i]);
    return pv_none(L);
  }
  case BI_DICT_ITEMS:
  case BI_DICT_KEYS:
  case BI_DICT_VALUES: {
    PV *d = fn->self, *r = pv_list(L, NULL, 0);
    eval_charge(L, A->at, d->n);
    for (int i = 0; i < d->n; i++) {
      PV *pair[2] = {d->keys[i], d->items[i]};
      pv_list_append(L, r, bi == BI_DICT_KEYS ? d->keys[i] : bi == BI_DICT_VALUES ? d->items[i] : pv_tuple(L, pair, 2));
    }
    return r;
  }
  case BI_DICT_GET: {
    bind_args(L, A, "key,default=", a);
    PV *v = pv_dict_lookup(L, A->at, fn->self, a[0]);
    return v ? v : a[1] ? a[1] : pv_none(L);
  }
  case BI_DICT_POP: {
    bind_args(L, A, "key,default=", a);
    PV *v = pv_dict_pop(L, A->at, fn->self, a[0]);
    if (v) return v;
    if (a[1]) return a[1];
    lower_error(L, A->at, "KeyError: %s", pv_repr(L, A->at, a[0]));
  }
  case BI_DICT_SETDEFAULT: {
    bind_args(L, A, "key,default=", a);
    PV *v = pv_dict_lookup(L, A->at, fn->self, a[0]);
    if (v) return v;
    pv_dict_set(L, A->at, fn->self, a[0], a[1] ? a[1] : pv_none(L));
    return a[1] ? a[1] : pv_none(L);
  }
  case BI_DICT_COPY: {
    PV *d = fn->self, *r = pv_dict(L);
    eval_charge(L, A->at, d->n);
    for (int i = 0; i < d->n; i++) pv_dict_set(L, A->at, r, d->keys[i], d->items[i]);
    return r;
  }
  case BI_LIST_POP:
  case BI_LIST_INSERT: {
    PV *l = fn->self;
    if (bi == BI_LIST_POP) bind_args(L, A, "index=", a);
    else bind_args(L, A, "index,x", a);
    int64_t i = a[0] ? arg_int(L, A->at, a[0], "index") : bi == BI_LIST_POP ? -1 : l->n;
    if (bi == BI_LIST_INSERT) {   /* clamped, as Python's insert */
      if (i < 0) i += l->n;
      i = i < 0 ? 0 : i > l->n ? l->n : i;
      pv_list_append(L, l, a[1]);
      memmove(l->items + i + 1, l->items + i, sizeof(PV *) * (size_t)(l->n - 1 - i));
      l->items[i] = a[1];
      return pv_none(L);
    }
    if (!l->n) lower_error(L, A->at, "IndexError: pop from empty list");
    if (i < 0) i += l->n;
    if (i < 0 || i >= l->n) lower_error(L, A->at, "IndexError: pop index out of range");
    PV *v = l->items[i];
    memmove(l->items + i, l->items + i + 1, sizeof(PV *) * (size_t)(l->n - 1 - i));
    l->n--;
    return v;
  }
  case BI_LIST_INDEX:
  case BI_LIST_COUNT:
  case BI_LIST_REMOVE: {
    bind_args(L, A, "x", a);
    PV *l = fn->self;
    int64_t count = 0;
    eval_charge(L, A->at, l->n);
    for (int i = 0; i < l->n; i++) {
      if (!pv_equal(L, A->at, l->items[i], a[0])) continue;
      if (bi == BI_LIST_INDEX) return pv_int(L, i);
      if (bi == BI_LIST_REMOVE) {
        memmove(l->items + i, l->items + i + 1, sizeof(PV *) * (size_t)(l->n - 1 - i));
        l->n--;
        return pv_none(L);
      }
      count++;
    }
    if (bi == BI_LIST_COUNT) return pv_int(L, count);
    lower_error(L, A->at, "ValueError: %s", bi == BI_LIST_INDEX ? "value is not in list" : "list.remove(x): x not in list");
  }
  case BI_LIST_REVERSE: {
    PV *l = fn->self;
    for (int i = 0, j = l->n - 1; i < j; i++, j--) {
      PV *t = l->items[i];
      l->items[i] = l->items[j];
      l->items[j] = t;
    }
    return pv_none(L);
  }
  case BI_LIST_COPY: return pv_list(L, fn->self->items, fn->self->n);
  case BI_STR_FORMAT:
    for (int i = 0; i < A->nargs + A->nkw; i++) {   /* formatting an opaque value: an opaque string */
      PV *v = i < A->nargs ? A->args[i] : A->kwvals[i - A->nargs];
      if (pv_text_unknown(L, A->at, v, "str.format(...)")) return pv_text_unknown(L, A->at, v, "str.format(...)");
    }
    return pv_str(L, fstr(L, fn->self, A));
  case BI_STR_JOIN: {
    bind_args(L, A, "items", a);
    PV **it;
    int n = iter_items(L, A->at, a[0], &it);
    eval_charge(L, A->at, n);
    SB sb = {0};
    size_t ls = strlen(fn->self->s);
    for (int i = 0; i < n; i++) {
      if (it[i]->k != PV_STR)
        lower_error(L, A->at, "sequence item %d: expected str instance, %s found", i, pv_kind_name(it[i]));
      if (i) sb_add(L, A->at, &sb, fn->self->s, ls);
      sb_adds(L, A->at, &sb, it[i]->s);
    }
    return pv_str(L, sb_done(L, &sb));
  }
  case BI_STR_FIND: {
    bind_args(L, A, "sub", a);
    if (a[0]->k != PV_STR) lower_error(L, A->at, "find() argument must be str");
    eval_charge(L, A->at, (int64_t)strlen(fn->self->s));
    const char *e = strstr(fn->self->s, a[0]->s);
    return pv_int(L, e ? (int64_t)(e - fn->self->s) : -1);
  }
  case BI_STR_LOWER:
  case BI_STR_UPPER: {
    bind_args(L, A, "", a);
    char *r = arena_strdup(L->a, fn->self->s);
    eval_charge(L, A->at, (int64_t)strlen(r));
    for (char *c = r; *c; c++)
      if (*c >= (bi == BI_STR_LOWER ? 'A' : 'a') && *c <= (bi == BI_STR_LOWER ? 'Z' : 'z')) *c ^= 0x20;
    return pv_str(L, r);
  }
  case BI_STR_STRIP: {
    bind_args(L, A, "chars=", a);
    const char *set = a[0] && a[0]->k == PV_STR ? a[0]->s : " \t\n\r\f\v";
    const char *s = fn->self->s, *e = s + strlen(s);
    while (*s && strchr(set, *s)) s++;
    while (e > s && strchr(set, e[-1])) e--;
    return pv_str(L, arena_strndup(L->a, s, (size_t)(e - s)));
  }
  case BI_STR_SPLIT: {
    bind_args(L, A, "sep=,maxsplit=", a);
    PV *out = pv_list(L, NULL, 0);
    const char *s = fn->self->s;
    int64_t max = a[1] ? arg_int(L, A->at, a[1], "maxsplit") : -1;
    eval_charge(L, A->at, (int64_t)strlen(s));
    if (!a[0] || a[0]->k == PV_NONE) {
      for (;;) {
        while (*s && strchr(" \t\n\r\f\v", *s)) s++;
        if (!*s) break;
        const char *e = s;
        if (max-- == 0) e = s + strlen(s);
        else
          while (*e && !strchr(" \t\n\r\f\v", *e)) e++;
        pv_list_append(L, out, pv_str(L, arena_strndup(L->a, s, (size_t)(e - s))));
        s = e;
      }
      return out;
    }
    if (a[0]->k != PV_STR || !a[0]->s[0]) lower_error(L, A->at, "split(): empty or non-str separator");
    size_t ls = strlen(a[0]->s);
    for (;;) {
      const char *e = max-- == 0 ? NULL : strstr(s, a[0]->s);
      if (!e) {
        pv_list_append(L, out, pv_str(L, s));
        return out;
      }
      pv_list_append(L, out, pv_str(L, arena_strndup(L->a, s, (size_t)(e - s))));
      s = e + ls;
    }
  }
  case BI_STR_REPLACE: {
    bind_args(L, A, "old,new", a);
    if (a[0]->k != PV_STR || a[1]->k != PV_STR) lower_error(L, A->at, "replace() arguments must be str");
    const char *s = fn->self->s;
    size_t lo = strlen(a[0]->s);
    if (!lo) lower_error(L, A->at, "replace() with an empty string is not supported by ctc");
    SB sb = {0};
    for (const char *e; (e = strstr(s, a[0]->s)); s = e + lo) {
      sb_add(L, A->at, &sb, s, (size_t)(e - s));
      sb_adds(L, A->at, &sb, a[1]->s);
    }
    sb_adds(L, A->at, &sb, s);
    return pv_str(L, sb_done(L, &sb));
  }
  case BI_STR_ISDIGIT: {
    bind_args(L, A, "", a);
    const char *c = fn->self->s;
    int ok = *c != 0;
    for (; *c && ok; c++) ok = *c >= '0' && *c <= '9';
    return pv_bool(L, ok);
  }
  case BI_STR_STARTSWITH:
  case BI_STR_ENDSWITH: {
    bind_args(L, A, "prefix", a);
    if (a[0]->k != PV_STR) lower_error(L, A->at, "expected a string");
    size_t ls = strlen(fn->self->s), lp = strlen(a[0]->s);
    if (lp > ls) return pv_bool(L, 0);
    return pv_bool(L, strncmp(bi == BI_STR_STARTSWITH ? fn->self->s : fn->self->s + ls - lp, a[0]->s, lp) == 0);
  }
  case BI_M_SQRT: case BI_M_EXP: case BI_M_LOG: case BI_M_TANH: case BI_M_COS: case BI_M_SIN:
  case BI_M_CEIL: case BI_M_FLOOR: case BI_M_ISQRT: {
    bind_args(L, A, "x", a);
    if ((bi == BI_M_CEIL || bi == BI_M_FLOOR) && (a[0]->k == PV_INT || a[0]->k == PV_BOOL)) return pv_int(L, a[0]->i);
    if (bi == BI_M_ISQRT) {
      if (a[0]->k != PV_INT && a[0]->k != PV_BOOL)
        lower_error(L, A->at, "'%s' object cannot be interpreted as an integer", pv_kind_name(a[0]));
      int64_t n = a[0]->i;
      if (n < 0) lower_error(L, A->at, "isqrt() argument must be nonnegative");
      int64_t r = (int64_t)sqrt((double)n);
      while (r > 0 && (r > 3037000499 || r * r > n)) r--;
      while (r < 3037000499 && (r + 1) * (r + 1) <= n) r++;
      return pv_int(L, r);
    }
    if (pv_is_host(a[0])) { /* math.cos(t) on a run-time tensor: the host may stage it */
      PV *r = L->host->math(L, A->at, py_rows[bi].name, a[0]);
      if (r) return r;
    }
    double x = arg_num(L, A->at, a[0], "argument");
    switch (bi) {
    case BI_M_SQRT:
      if (x < 0) lower_error(L, A->at, "math domain error: sqrt(%g)", x);
      return pv_float(L, sqrt(x));
    case BI_M_EXP:
      if (isinf(exp(x)) && isfinite(x)) lower_error(L, A->at, "math range error (OverflowError)");
      return pv_float(L, exp(x));
    case BI_M_LOG:
      if (x <= 0) lower_error(L, A->at, "math domain error: log(%g)", x);
      return pv_float(L, log(x));
    case BI_M_TANH: return pv_float(L, tanh(x));
    case BI_M_COS: return pv_float(L, cos(x));
    case BI_M_SIN: return pv_float(L, sin(x));
    case BI_M_CEIL: return pv_int(L, ck_float_to_int(L, A->at, ceil(x)));
    default: return pv_int(L, ck_float_to_int(L, A->at, floor(x)));
    }
  }
  case BI_M_FABS: case BI_M_TRUNC: case BI_M_LOG2: case BI_M_LOG10: case BI_M_LOG1P: case BI_M_EXPM1:
  case BI_M_TAN: case BI_M_ATAN: case BI_M_ASIN: case BI_M_ACOS: case BI_M_SINH: case BI_M_COSH:
  case BI_M_ASINH: case BI_M_ACOSH: case BI_M_ATANH: case BI_M_ERF: case BI_M_ERFC: case BI_M_DEGREES:
  case BI_M_RADIANS: case BI_M_ISFINITE: case BI_M_ISINF: case BI_M_ISNAN:
    bind_args(L, A, "x", a);
    if (bi == BI_M_TRUNC && (a[0]->k == PV_INT || a[0]->k == PV_BOOL)) return pv_int(L, a[0]->i);
    return math1(L, A->at, bi, arg_num(L, A->at, a[0], "argument"));
  case BI_M_ATAN2: case BI_M_COPYSIGN: case BI_M_FMOD: {
    bind_args(L, A, "x,y", a);
    double x = arg_num(L, A->at, a[0], "x"), y = arg_num(L, A->at, a[1], "y");
    if (bi == BI_M_ATAN2) return pv_float(L, atan2(x, y));
    if (bi == BI_M_COPYSIGN) return pv_float(L, copysign(x, y));
    /* CPython's m_fmod: fmod(x, inf) is x for finite x; fmod(inf, y) and fmod(x, 0) are errors */
    if (isnan(x) || isnan(y)) return pv_float(L, NAN);
    if (isinf(y) && isfinite(x)) return pv_float(L, x);
    if (isinf(x) || y == 0) lower_error(L, A->at, "math domain error (ValueError): fmod(%s, %s)", float_text(L, x), float_text(L, y));
    return pv_float(L, fmod(x, y));
  }
  case BI_M_GCD: {
    int64_t g = 0;
    if (A->nkw) lower_error(L, A->at, "gcd() takes no keyword arguments");
    for (int i = 0; i < A->nargs; i++) {
      if (A->args[i]->k != PV_INT && A->args[i]->k != PV_BOOL)
        lower_error(L, A->at, "'%s' object cannot be interpreted as an integer", pv_kind_name(A->args[i]));
      int64_t x = A->args[i]->i < 0 ? ck_neg(L, A->at, A->args[i]->i) : A->args[i]->i;
      while (x) {
        int64_t t = g % x;
        g = x;
        x = t;
      }
    }
    return pv_int(L, g);
  }
  case BI_M_FACTORIAL: {
    bind_args(L, A, "n", a);
    if (a[0]->k != PV_INT && a[0]->k != PV_BOOL)
      lower_error(L, A->at, "'%s' object cannot be interpreted as an integer", pv_kind_name(a[0]));
    if (a[0]->i < 0) lower_error(L, A->at, "factorial() not defined for negative values (ValueError)");
    int64_t r = 1;
    for (int64_t k = 2; k <= a[0]->i; k++) r = ck_mul(L, A->at, r, k);
    return pv_int(L, r);
  }
  case BI_M_POW:
    bind_args(L, A, "x,y", a);
    {
      double x = arg_num(L, A->at, a[0], "x"), y = arg_num(L, A->at, a[1], "y"), r = pow(x, y);
      if ((x == 0 && y < 0) || (x < 0 && isfinite(x) && y != floor(y) && isfinite(y)))
        lower_error(L, A->at, "math domain error (ValueError)");
      if (isinf(r) && isfinite(x) && isfinite(y)) lower_error(L, A->at, "math range error (OverflowError)");
      return pv_float(L, r);
    }
  case BI_M_PROD: {
    bind_args(L, A, "x", a);
    PV **it;
    int n = iter_items(L, A->at, a[0], &it);
    PV *acc = pv_int(L, 1);
    eval_charge(L, A->at, n);
    for (int i = 0; i < n; i++) {
      if (!pv_is_num(it[i])) lower_error(L, A->at, "prod() needs numbers");
      if (acc->k == PV_INT && it[i]->k != PV_FLOAT) acc = pv_int(L, ck_mul(L, A->at, acc->i, it[i]->i));
      else acc = pv_float(L, pv_num(acc) * pv_num(it[i]));
    }
    return acc;
  }
  default: BUG("builtin %s", fn->s);
  }
}

/* ---- iter(), next(), set(), open() ---------------------------------------
 * An iterator is a list of the items still to come (bi = BI_ITER); next() takes
 * the first. next() also takes the first item of the lists ctc gives for
 * PyTorch's generators (model.parameters(), modules() ...): next(model.parameters()).
 * A set is a dict whose keys are its items (bi = BI_SET): len, `in`, iteration,
 * sorted() and list() work as on Python's sets (sorted(set(text)) is the usual use).
 * open() reads a text file at compile time, relative to the folder of the file
 * that calls it; the file object holds its text (attribute "_text"). */
static PV *file_text(L *L, Span at, PV *f) {
  PV *t = f->attrs ? env_get(f->attrs, "_text") : NULL;
  if (!t || t->k != PV_STR) lower_error(L, at, "I/O operation on closed file");
  return t;
}

static PV *lines_of(L *L, Span at, const char *s) {
  PV *out = pv_list(L, NULL, 0);
  while (*s) {
    const char *e = strchr(s, '\n');
    size_t n = e ? (size_t)(e - s) + 1 : strlen(s);
    eval_charge(L, at, 1 + (int64_t)(n >> 6));
    pv_list_append(L, out, pv_str(L, arena_strndup(L->a, s, n)));
    s += n;
  }
  return out;
}

PV *bi_iter_set_file(L *L, PV *fn, Args *A) {
  PV *a[6], **it;
  Span at = A->at;
  switch (fn->bi) {
  case BI_ITER: {
    bind_args(L, A, "x", a);
    if (a[0]->k == PV_OPAQUE) return pv_opaque_from(L, at, a[0], arena_printf(L->a, "iter(%s)", a[0]->s));
    if (a[0]->k == PV_LIST && a[0]->bi == BI_ITER) return a[0];   /* iter(iterator) is itself */
    if (a[0]->k == PV_OBJ && a[0]->cls && a[0]->cls->bi == BI_FILE) a[0] = lines_of(L, at, file_text(L, at, a[0])->s);
    int n = iter_items(L, at, a[0], &it);
    eval_charge(L, at, n);
    PV *r = pv_list(L, it, n);
    r->bi = BI_ITER;
    return r;
  }
  case BI_NEXT: {
    bind_args(L, A, "iterator,default=", a);
    PV *x = a[0];
    if (x->k == PV_OPAQUE) return pv_opaque_from(L, at, x, arena_printf(L->a, "next(%s)", x->s));
    if (x->k != PV_LIST) lower_error(L, at, "'%s' object is not an iterator", pv_kind_name(x));
    if (x->n == 0) {
      if (a[1]) return a[1];
      py_raise(L, at, "StopIteration", "next() on an exhausted iterator (StopIteration)");
    }
    PV *v = x->items[0];
    eval_charge(L, at, x->n);
    memmove(x->items, x->items + 1, sizeof(PV *) * (size_t)(x->n - 1));
    x->n--;
    return v;
  }
  case BI_SET: {
    bind_args(L, A, "iterable=", a);
    PV *d = pv_dict(L);
    d->bi = BI_SET;
    int n = a[0] ? iter_items_any_order(L, at, a[0], &it) : 0;
    eval_charge(L, at, n);
    for (int i = 0; i < n; i++) pv_dict_set(L, at, d, it[i], pv_none(L));
    return d;
  }
  case BI_SET_ADD:
    if (fn->self->bi != BI_SET) lower_error(L, at, "'dict' object has no attribute 'add'");
    bind_args(L, A, "elem", a);
    pv_dict_set(L, at, fn->self, a[0], pv_none(L));
    return pv_none(L);
  case BI_FILE:
    lower_error(L, at, "file objects are made by open()");
  case BI_OPEN: {
    bind_args(L, A, "file,mode=,buffering=,encoding=,errors=,newline=", a);
    if (a[0]->k != PV_STR) lower_error(L, at, "open() needs a file name (str) at compile time");
    const char *mode = a[1] ? (a[1]->k == PV_STR ? a[1]->s : "?") : "r";
    if (strcmp(mode, "r") && strcmp(mode, "rt"))
      lower_error(L, at, "open(..., '%s'): ctc reads text files at compile time (mode 'r') only", mode);
    if (a[2] && a[2]->k == PV_STR && a[2]->s[0] && strcasecmp(a[2]->s, "utf-8") && strcasecmp(a[2]->s, "utf8"))
      lower_error(L, at, "open(encoding='%s'): ctc reads UTF-8 text only", a[2]->s);
    const char *path = a[0]->s, *from = at.file && at.file->path ? at.file->path : "";
    const char *slash = strrchr(from, '/');
    if (path[0] != '/' && slash) path = arena_printf(L->a, "%.*s/%s", (int)(slash - from), from, a[0]->s);
    SrcFile *f = src_read(L->a, path);
    if (!f) py_raise(L, at, "FileNotFoundError", "[Errno 2] No such file or directory: '%s' (open() reads at compile time, "
                     "relative to the folder of the model file)", a[0]->s);
    eval_charge(L, at, (int64_t)(f->len >> 6));
    if (strlen(f->text) != f->len) lower_error(L, at, "open('%s'): the file is not text (it holds NUL bytes)", a[0]->s);
    PV *cls = py_builtin(L, BI_FILE, NULL);
    PV *o = pv_new(L, PV_OBJ);
    o->cls = cls;
    o->attrs = env_new(L, NULL);
    env_set(L, o->attrs, "_text", pv_str(L, f->text));
    env_set(L, o->attrs, "name", a[0]);
    return o;
  }
  case BI_FILE_READ:
    bind_args(L, A, "size=", a);
    if (a[0] && !(a[0]->k == PV_INT && a[0]->i < 0) && a[0]->k != PV_NONE)
      lower_error(L, at, "read(size) is not supported; read() reads the whole file");
    return file_text(L, at, fn->self);
  case BI_FILE_READLINES:
    bind_args(L, A, "", a);
    return lines_of(L, at, file_text(L, at, fn->self)->s);
  case BI_FILE_CLOSE:
    bind_args(L, A, "", a);
    env_set(L, fn->self->attrs, "_text", pv_none(L));
    return pv_none(L);
  default: break;
  }
  BUG("iter/set/file row %d", fn->bi);
}

/* obj.__dict__: its attributes now, as a dict (bi = BI_OBJ_DICT, self = obj) */
PV *py_obj_dict(L *L, PV *obj) {
  PV *d = pv_dict(L);
  d->bi = BI_OBJ_DICT;
  d->self = obj;
  Env *e = obj->attrs;
  for (int i = 0; e && i < e->names.len; i++)
    if (e->names.data[i][0] != '_' || e->names.data[i][1] != '_')
      pv_dict_set(L, (Span){0}, d, pv_str(L, e->names.data[i]), e->vals.data[i]);
  return d;
}

PV *bi_obj_attr(L *L, PV *fn, Args *A) {
  PV *a[3], *self = fn->self;
  switch (fn->bi) {
  case BI_OBJ_SETATTR:
    bind_args(L, A, "name,value", a);
    if (a[0]->k != PV_STR) lower_error(L, A->at, "attribute name must be a string");
    setattr_value(L, A->at, self, a[0]->s, a[1]);
    return pv_none(L);
  case BI_OBJ_GETATTR:
    bind_args(L, A, "name", a);
    if (a[0]->k != PV_STR) lower_error(L, A->at, "attribute name must be a string");
    return getattr_value(L, A->at, self, a[0]->s);
  case BI_DICT_UPDATE: {   /* d.update(other) / d.update(k=v ...); on obj.__dict__ it sets attributes */
    const int nkw = A->nkw;   /* any keyword is a key: bind the positional 'other' alone */
    A->nkw = 0;
    bind_args(L, A, "other=", a);
    A->nkw = nkw;
    PV *src = pv_dict(L);
    if (a[0]) {
      if (a[0]->k != PV_DICT) lower_error(L, A->at, "dict.update(x) needs a dict at compile time");
      for (int i = 0; i < a[0]->n; i++) pv_dict_set(L, A->at, src, a[0]->keys[i], a[0]->items[i]);
    }
    for (int k = 0; k < A->nkw; k++) pv_dict_set(L, A->at, src, pv_str(L, A->kwnames[k]), A->kwvals[k]);
    eval_charge(L, A->at, src->n);
    for (int i = 0; i < src->n; i++) py_dict_store(L, A->at, self, src->keys[i], src->items[i]);
    return pv_none(L);
  }
  default: break;
  }
  BUG("attribute row %d", fn->bi);
}

/* d[k] = v; on obj.__dict__ also the attribute */
void py_dict_store(L *L, Span at, PV *d, PV *k, PV *v) {
  if (d->bi == BI_OBJ_DICT) {
    if (k->k != PV_STR) lower_error(L, at, "attribute name must be a string");
    setattr_value(L, at, d->self, k->s, v);
  }
  pv_dict_set(L, at, d, k, v);
}
