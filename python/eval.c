/* eval.c - the compile-time evaluator: Python expressions, calls, attributes,
 * iteration over PVs (statements: exec.c). Operations on host values (tensors)
 * go to the host through L->host. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "py_int.h"

#define MAX_DEPTH 60                 /* nested calls */
#define MAX_STEPS 20000000           /* statements executed (and work in builtins) per compile */
#define MAX_MEM_MIB 2048             /* compile-time values, MiB */

/* The notes of an error: the calls it is inside, innermost first (0 is the entry itself),
 * each layer's with where it was created. */
static void stack_notes(L *L) {
  for (int i = L->nstack - 1; i >= 1 && i >= L->nstack - 8; i--) {
    diag_note(L->d, L->stack_span[i], "in '%s' called here", L->stack_name[i]);
    if (i < 64 && L->stack_made[i].file) diag_note(L->d, L->stack_made[i], "created here");
  }
}

CTC_NORETURN void lower_error(L *L, Span at, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  diag_verror(L->d, at, fmt, ap);
  va_end(ap);
  stack_notes(L);
  longjmp(*L->on_error, 1);
}

CTC_NORETURN void py_raise(L *L, Span at, const char *type, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  if (py_catchable(L, type)) {
    L->exc_type = type;
    char buf[1024];
    vsnprintf(buf, sizeof buf, fmt, ap);
    L->exc_msg = arena_strdup(L->a, buf);
    L->exc_at = at;
    va_end(ap);
    longjmp(*L->on_error, 1);
  }
  diag_verror(L->d, at, fmt, ap);
  va_end(ap);
  stack_notes(L);
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

static int is_host(const PV *v) { return pv_is_host(v); }

static PV *num_result(L *L, Span at, int op, PV *a, PV *b) {
  int isf = a->k == PV_FLOAT || b->k == PV_FLOAT;
  if (!isf) {
    int64_t x = a->i, y = b->i;
    switch (op) {
    case OP_ADD: return pv_int(L, ck_add(L, at, x, y));
    case OP_SUB: return pv_int(L, ck_sub(L, at, x, y));
    case OP_MUL: return pv_int(L, ck_mul(L, at, x, y));
    case OP_DIV:
      if (y == 0) py_raise(L, at, "ZeroDivisionError", "division by zero");
      return pv_float(L, (double)x / (double)y);
    case OP_FLOORDIV:
    case OP_MOD: {
      if (y == 0) py_raise(L, at, "ZeroDivisionError", "integer division or modulo by zero");
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
      if (y == 0) py_raise(L, at, "ZeroDivisionError", "float division by zero");
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
PV *py_concat_str(L *L, Span at, const char *a, const char *b, int grow) {
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

/* An operation on an opaque value: opaque (with its opaque operand's description), unless
 * an operand is a run-time host value (a staged tensor), which would need the opaque
 * value compiled. */
static PV *opaque_op(L *L, Span at, PV *a, PV *b, const char *expr, const char *use) {
  PV *o = a && a->k == PV_OPAQUE ? a : b;
  if ((a && a != o && L->host->runtime(L, a)) || (b && b != o && L->host->runtime(L, b)))
    pv_opaque_error(L, at, o, use);
  PV *r = pv_opaque_from(L, at, o, expr);
  r->unknown_truth = (a && a->k == PV_OPAQUE && a->unknown_truth) || (b && b->k == PV_OPAQUE && b->unknown_truth);
  return r;
}

/* A comparison (or `not`) whose answer depends on an opaque value: an opaque bool. */
static PV *opaque_truth(L *L, Span at, PV *a, PV *b, const char *expr, const char *use) {
  PV *r = opaque_op(L, at, a, b, expr, use);
  r->unknown_truth = 1;
  return r;
}

/* 'fmt' % args: %s %r %d %i %f %e %g %x %c %% with flags (-+ 0), width and
 * precision, through format()'s spec. */
static PV *percent_format(L *L, Span at, const char *fmt, PV *b) {
  PV **items = &b;
  int n = 1, k = 0;
  if (b->k == PV_TUPLE) {
    items = b->items;
    n = b->n;
  }
  for (int i = 0; i < n; i++)
    if (pv_text_unknown(L, at, items[i], "'%' formatting")) return pv_text_unknown(L, at, items[i], "'%' formatting");
  SB out = {0};
  for (const char *p = fmt; *p;) {
    if (*p != '%') {
      const char *q = strchr(p, '%');
      size_t len = q ? (size_t)(q - p) : strlen(p);
      sb_add(L, at, &out, p, len);
      p += len;
      continue;
    }
    p++;
    if (*p == '%') {
      sb_adds(L, at, &out, "%");
      p++;
      continue;
    }
    char align = 0, sign = 0, zero = 0;
    for (;; p++) {
      if (*p == '-') align = '<';
      else if (*p == '+' || *p == ' ') sign = *p;
      else if (*p == '0') zero = 1;
      else if (*p != '#') break;
    }
    char width[24] = "", prec[24] = "";
    size_t wl = strspn(p, "0123456789");
    if (wl >= sizeof width) lower_error(L, at, "'%%' format: width too large");
    memcpy(width, p, wl);
    width[wl] = 0;
    p += wl;
    if (*p == '.') {
      size_t pl = strspn(p + 1, "0123456789");
      if (pl + 1 >= sizeof prec) lower_error(L, at, "'%%' format: precision too large");
      memcpy(prec, p, pl + 1);
      prec[pl + 1] = 0;
      p += pl + 1;
    }
    char c = *p ? *p++ : 0;
    if (!strchr("srdiufFeEgGxXoc", c) || !c) lower_error(L, at, "unsupported format character in '%%' formatting");
    if (k >= n) lower_error(L, at, "not enough arguments for format string");
    PV *v = items[k++];
    const char *txt;
    if (c == 's' || c == 'r') {
      const char *s = c == 's' ? pv_to_str(L, at, v) : pv_repr(L, at, v);
      txt = pv_format(L, at, pv_str(L, s), arena_printf(L->a, "%s%s%s", align ? "<" : ">", width, prec));
    } else {
      if ((c == 'd' || c == 'i' || c == 'u') && v->k == PV_FLOAT) v = pv_int(L, ck_float_to_int(L, at, v->f < 0 ? ceil(v->f) : floor(v->f)));
      char t = c == 'i' || c == 'u' ? 'd' : c;
      txt = pv_format(L, at, v, arena_printf(L->a, "%s%s%s%s%s%c", align ? "<" : "", sign == '+' ? "+" : sign ? " " : "",
                                            zero && !align ? "0" : "", width, prec, t));
    }
    sb_adds(L, at, &out, txt);
  }
  if (k < n && b->k == PV_TUPLE) lower_error(L, at, "not all arguments converted during string formatting");
  return pv_str(L, sb_done(L, &out));
}

/* ---- complex numbers: CPython's arithmetic (Objects/complexobject.c) ---------------- */

typedef struct Cx { double re, im; } Cx;

static Cx cx_mul(Cx a, Cx b) { return (Cx){a.re * b.re - a.im * b.im, a.re * b.im + a.im * b.re}; }

/* _Py_c_quot: Smith's division, scaled by the larger part of b */
static Cx cx_quot(L *L, Span at, Cx a, Cx b) {
  double abs_re = fabs(b.re), abs_im = fabs(b.im);
  if (abs_re >= abs_im) {
    if (abs_re == 0) py_raise(L, at, "ZeroDivisionError", "complex division by zero");
    double ratio = b.im / b.re, denom = b.re + b.im * ratio;
    return (Cx){(a.re + a.im * ratio) / denom, (a.im - a.re * ratio) / denom};
  }
  if (abs_im >= abs_re) {
    double ratio = b.re / b.im, denom = b.re * ratio + b.im;
    return (Cx){(a.re * ratio + a.im) / denom, (a.im * ratio - a.re) / denom};
  }
  return (Cx){NAN, NAN};   /* a NaN in b */
}

/* complex_pow: integral exponents up to 100 by repeated squaring (c_powi), others in polar form */
static Cx cx_pow(L *L, Span at, Cx a, Cx b) {
  if (b.im == 0 && b.re == floor(b.re) && fabs(b.re) <= 100) {
    int64_t n = (int64_t)b.re, m = n < 0 ? -n : n;
    Cx r = {1, 0}, p = a;
    for (int64_t mask = 1; mask > 0 && m >= mask; mask <<= 1) {
      if (m & mask) r = cx_mul(r, p);
      p = cx_mul(p, p);
    }
    return n < 0 ? cx_quot(L, at, (Cx){1, 0}, r) : r;
  }
  if (b.re == 0 && b.im == 0) return (Cx){1, 0};
  if (a.re == 0 && a.im == 0) {
    if (b.im != 0 || b.re < 0) py_raise(L, at, "ZeroDivisionError", "0.0 to a negative or complex power");
    return (Cx){0, 0};
  }
  double vabs = hypot(a.re, a.im), len = pow(vabs, b.re), ang = atan2(a.im, a.re), phase = ang * b.re;
  if (b.im != 0) {
    len /= exp(ang * b.im);
    phase += b.im * log(vabs);
  }
  return (Cx){len * cos(phase), len * sin(phase)};
}

PV *py_complex_binop(L *L, Span at, int op, PV *a, PV *b) {
  Cx x = {a->k == PV_COMPLEX ? a->f : pv_num(a), a->k == PV_COMPLEX ? a->fi : 0};
  Cx y = {b->k == PV_COMPLEX ? b->f : pv_num(b), b->k == PV_COMPLEX ? b->fi : 0}, r;
  switch (op) {
  case OP_ADD: r = (Cx){x.re + y.re, x.im + y.im}; break;
  case OP_SUB: r = (Cx){x.re - y.re, x.im - y.im}; break;
  case OP_MUL: r = cx_mul(x, y); break;   /* a real operand is complex(x, 0) first, as in CPython 3.11 */
  case OP_DIV: r = cx_quot(L, at, x, y); break;
  case OP_POW: r = cx_pow(L, at, x, y); break;
  default:
    lower_error(L, at, "unsupported operand type(s) for %s: '%s' and '%s'", fe_op_spelling(op), pv_kind_name(a),
                pv_kind_name(b));
  }
  return pv_complex(L, r.re, r.im);
}

PV *py_binop(L *L, Span at, int op, PV *a, PV *b) {
  if (a->k == PV_OPAQUE || b->k == PV_OPAQUE)
    return opaque_op(L, at, a, b, arena_printf(L->a, "%s %s %s", a->k == PV_OPAQUE ? a->s : "...", fe_op_spelling(op),
                                               b->k == PV_OPAQUE ? b->s : "..."), arena_printf(L->a, "'%s' on a tensor", fe_op_spelling(op)));
  if (is_host(a) || is_host(b)) return L->host->binary(L, at, op, a, b);
  if (pv_is_num(a) && pv_is_num(b)) return num_result(L, at, op, a, b);
  if ((a->k == PV_COMPLEX || pv_is_num(a)) && (b->k == PV_COMPLEX || pv_is_num(b))) return py_complex_binop(L, at, op, a, b);
  if (op == OP_ADD && a->k == PV_STR && b->k == PV_STR) return py_concat_str(L, at, a->s, b->s, 0);
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
  if (op == OP_MOD && a->k == PV_STR) return percent_format(L, at, a->s, b);
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
  case PV_COMPLEX: return v->f != 0 || v->fi != 0;
  case PV_STR: return v->s[0] != 0;
  case PV_TUPLE:
  case PV_LIST:
  case PV_DICT: return v->n != 0;
  case PV_HOST:
  case PV_HOSTC: return L->host->truth(L, at, v);
  case PV_OPAQUE:
    /* most Python objects are truthy: script code (`assert dataset`) goes on; compiled
     * code must not branch on a guess, nor any code on a comparison's unknown answer */
    if (L->host->staging(L)) pv_opaque_error(L, at, v, "a condition in compiled code");
    if (v->unknown_truth)
      pv_opaque_error(L, at, v, "a condition at compile time (Python's answer is not known to ctc: compute it from "
                                "values ctc models, or pass it with --args)");
    return 1;
  default: return 1;
  }
}

/* ---- iteration -------------------------------------------------------- */

int iter_items(L *L, Span at, PV *v, PV ***out) {
  switch (v->k) {
  case PV_OPAQUE:
    /* a data loader, a file ...: script code (a training loop over a torchvision
     * loader) runs no iterations at compile time; compiled code needs the items */
    if (L->host->staging(L)) pv_opaque_error(L, at, v, "iterating in compiled code");
    *out = NULL;
    return 0;
  case PV_TUPLE:
  case PV_LIST:   /* bi BI_SET: list(a_set), items in CPython's hash order */
    if (v->bi == BI_SET && !L->set_any_order) py_set_order_error(L, at);
    *out = v->items;
    return v->n;
  case PV_DICT:
    if (v->bi == BI_SET && !L->set_any_order) py_set_order_error(L, at);
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
    if (v->cls && v->cls->bi == BI_FILE) {   /* for line in f */
      PV *it = py_builtin(L, BI_ITER, NULL);
      PV *lines = call_value(L, at, it, &v, 1, NULL, NULL, 0);
      *out = lines->items;
      return lines->n;
    }
    /* fall through */
  case PV_HOST:
  case PV_HOSTC: {
    int n = L->host->iterate(L, at, v, out);
    if (n >= 0) return n;
    break;
  }
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
  if (f->k != PV_FUNC || f->i == FK_STATIC) return f;
  if (f->i == FK_CLASSMETHOD && self->k != PV_CLASS) self = self->cls;
  if (f->i == FK_PROPERTY) {
    PV *b = pv_new(L, PV_BOUND);
    b->self = self;
    b->fn = f;
    return call_value(L, f->node->span, b, NULL, 0, NULL, NULL, 0);
  }
  PV *b = pv_new(L, PV_BOUND);
  b->self = self;
  b->fn = f;
  return b;
}

void py_set_order_error(L *L, Span at) {
  lower_error(L, at, "the order of a set's items is CPython's hash order (random on each run for strings), "
                     "which ctc cannot reproduce: use sorted(...) of the set (as vocabularies do: "
                     "sorted(list(set(text))))");
}

int iter_items_any_order(L *L, Span at, PV *v, PV ***out) {
  int was = L->set_any_order;
  L->set_any_order = 1;
  int n = iter_items(L, at, v, out);
  L->set_any_order = was;
  return n;
}

PV *py_pylib_missing(L *L, Span at, PV *m, const char *name) {
  PV *mark = m && m->k == PV_OBJ && m->attrs ? env_get(m->attrs, PY_PYLIB_MARK) : NULL;
  if (!mark) return NULL;
  const char *expr = arena_printf(L->a, "%s.%s", mark->s, name);
  if (!env_get(m->attrs, "__ctc_model_builders__")) return pv_opaque(L, at, expr);
  /* a model builder ctc's torchvision lacks (densenet121): script code may name builders it
   * does not call, but calling one is an error (call_value), never an opaque model whose
   * parameters would be missing from the compiled one */
  const char *has = "";
  for (int i = 0; i < (int)m->attrs->names.len; i++) {
    const char *n = m->attrs->names.data[i];
    PV *f = m->attrs->vals.data[i];
    if (f->k == PV_FUNC && n[0] >= 'a' && n[0] <= 'z') has = arena_printf(L->a, "%s%s%s", has, has[0] ? ", " : "", n);
  }
  PV *v = pv_opaque_described(L, at, expr, arena_printf(L->a, "torchvision model builder '%s', which ctc's "
                                                         "torchvision does not have (it has %s)", name, has));
  v->i = 2;
  return v;
}

PV *getattr_opt(L *L, Span at, PV *obj, const char *name) {
  switch (obj->k) {
  case PV_COMPLEX:
    if (!strcmp(name, "real") || !strcmp(name, "imag")) return pv_float(L, name[0] == 'r' ? obj->f : obj->fi);
    return strcmp(name, "conjugate") ? NULL : py_builtin(L, BI_COMPLEX_CONJUGATE, obj);
  case PV_OPAQUE: return pv_opaque_from(L, at, obj, arena_printf(L->a, "%s.%s", obj->s, name));
  case PV_NS: {
    PV *v = py_module_attr(L, at, obj, name);
    return v ? v : L->host->getattr(L, at, obj, name);
  }
  case PV_CLASS: {
    if (strcmp(name, "__name__") == 0) return pv_str(L, obj->s);
    PV *f = class_lookup(obj, name);
    if (f && f->k == PV_FUNC && f->i == FK_CLASSMETHOD) return bind_method(L, obj, f);
    return f;
  }
  case PV_OBJ: {
    if (obj->bi == BI_SUPER_PROXY) {
      PV *f = class_lookup(obj->cls, name);
      if (f) return bind_method(L, obj->self, f);
      if ((strcmp(name, "__init__") == 0 || strcmp(name, "forward") == 0) && obj->cls && obj->cls->bi &&
          L->host->base_init && (f = L->host->base_init(L, obj->cls, obj->self, name)))
        return f;
      f = L->host->getattr(L, at, obj->self, name);
      if (f) return f;
      if (strcmp(name, "__init__") == 0) return py_builtin(L, BI_OBJECT_INIT, obj->self);
      return NULL;
    }
    PV *v = obj->attrs ? env_get(obj->attrs, name) : NULL;
    if (v) return v;
    if (!strcmp(name, "__class__") && obj->cls) return obj->cls;
    PV *f = class_lookup(obj->cls, name);
    if (f) return bind_method(L, obj, f);
    if (obj->cls && obj->cls->bi == BI_ARGPARSE_PARSER) return py_lookup(L, NS_ARGPARSER, name, obj);
    if (obj->cls && obj->cls->bi == BI_FILE) return py_lookup(L, NS_FILE, name, obj);
    if (!strcmp(name, "__dict__")) return py_obj_dict(L, obj);
    if (!strcmp(name, "__setattr__") || !strcmp(name, "__getattr__"))
      return py_builtin(L, name[2] == 's' ? BI_OBJ_SETATTR : BI_OBJ_GETATTR, obj);
    if ((v = py_pylib_missing(L, at, obj, name))) return v;   /* torchvision.transforms */
    return L->host->getattr(L, at, obj, name);
  }
  case PV_LIST: return py_lookup(L, NS_LIST, name, obj);
  case PV_DICT: return py_lookup(L, NS_DICT, name, obj);
  case PV_STR: return py_lookup(L, NS_STR, name, obj);
  case PV_FUNC:   /* fn.__name__ (a registry keyed by it), __qualname__ */
    if (!strcmp(name, "__name__")) return pv_str(L, obj->s);
    if (!strcmp(name, "__qualname__")) return obj->cls ? pv_str(L, arena_printf(L->a, "%s.%s", obj->cls->s, obj->s)) : pv_str(L, obj->s);
    return L->host->getattr(L, at, obj, name);
  default: return L->host->getattr(L, at, obj, name);
  }
}

PV *getattr_value(L *L, Span at, PV *obj, const char *name) {
  PV *v = getattr_opt(L, at, obj, name);
  if (!v) {
    if (obj->k == PV_NS) {
      const char *s = L->host->suggest ? L->host->suggest(L, obj, name) : NULL;
      lower_error(L, at, "'%s.%s' is not supported by ctc (or does not exist)%s%s%s", obj->s, name,
                  s ? "; did you mean '" : "", s ? s : "", s ? "'?" : "");
    }
    py_raise(L, at, "AttributeError", "'%s' object has no attribute '%s'", pv_kind_name(obj), name);
  }
  return v;
}

void setattr_value(L *L, Span at, PV *obj, const char *name, PV *val) {
  if (obj->k == PV_OPAQUE) return; /* the script configures an object ctc does not model */
  if (L->host->setattr(L, at, obj, name, val)) return;
  if (obj->k == PV_OBJ && obj->bi != BI_SUPER_PROXY) {
    if (!obj->attrs) obj->attrs = env_new(L, NULL);
    env_set(L, obj->attrs, name, val);
    return;
  }
  if (obj->k == PV_CLASS && !obj->bi && obj->env) {
    env_set(L, obj->env, name, val);
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
    L->stack_made[L->nstack] = (Span){0};
    L->stack_env[L->nstack] = L->env;
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

/* A function with a host decorator (@torch.no_grad() ...) runs under it. */
static PV *call_function_gm(L *L, Span at, PV *fn, PV *self, PV **args, int nargs,
                            const char **kwn, PV **kwv, int nkw) {
  if (!fn->deco) return call_function(L, at, fn, self, args, nargs, kwn, kwv, nkw);
  int token = L->host->deco_enter(L, fn);
  PV *r = call_function(L, at, fn, self, args, nargs, kwn, kwv, nkw);
  L->host->deco_exit(L, token);
  return r;
}

/* A compile-time call of an opaque function (from a module ctc does not model) with a tensor
 * argument: timm's trunc_normal_(self.pos_embed, std=.02) in an __init__. Its effect is unknown,
 * so it has none: said once per call site (an init applied to every layer calls it from one line),
 * not silently. */
static void note_opaque_on_tensor(L *L, Span at, const PV *fn) {
  for (int i = 0; i < L->nopaque_noted; i++)
    if (L->opaque_noted[i].file == at.file && L->opaque_noted[i].line == at.line && L->opaque_noted[i].col == at.col) return;
  if (L->nopaque_noted < (int)(sizeof L->opaque_noted / sizeof L->opaque_noted[0]))
    L->opaque_noted[L->nopaque_noted++] = at;
  diag_note(L->d, at, "this call of the %s on a tensor does nothing here: a parameter it would initialise or change "
                      "keeps its value (PyTorch's default initialisation; weights loaded with --weights replace it)",
            fn->what);
}

PV *call_value(L *L, Span at, PV *fn, PV **args, int nargs, const char **kwn, PV **kwv, int nkw) {
  switch (fn->k) {
  case PV_FUNC: return call_function_gm(L, at, fn, NULL, args, nargs, kwn, kwv, nkw);
  case PV_BOUND:
    if (fn->fn->k == PV_FUNC) return call_function_gm(L, at, fn->fn, fn->self, args, nargs, kwn, kwv, nkw);
    return call_value(L, at, fn->fn, args, nargs, kwn, kwv, nkw);
  case PV_BUILTIN: {
    Args A = {at, args, nargs, kwn, kwv, nkw, fn->s};
    return fn->call(L, fn, &A);
  }
  case PV_CLASS: return instantiate(L, at, fn, args, nargs, kwn, kwv, nkw);
  case PV_OPAQUE:
    if (fn->i == 2) lower_error(L, at, "cannot build a model with the %s", fn->what);
    for (int i = 0; i < nargs + nkw; i++) {
      PV *x = i < nargs ? args[i] : kwv[i - nargs];
      if (L->host->runtime(L, x)) pv_opaque_error(L, at, fn, "calling it on a tensor");
    }
    for (int i = 0; i < nargs + nkw; i++)
      if ((i < nargs ? args[i] : kwv[i - nargs])->k == PV_HOST) {
        note_opaque_on_tensor(L, at, fn);
        break;
      }
    return pv_opaque_from(L, at, fn, arena_printf(L->a, "%s(...)", fn->s));
  case PV_OBJ:
    if (fn->mod) { /* an instance of a host class, or of a user class deriving from one */
      Args A = {at, args, nargs, kwn, kwv, nkw, fn->cls->s};
      return L->host->call(L, at, fn, &A);
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
    if (cls->bi < PY_BI__COUNT && py_rows[cls->bi].kind == BK_CLASS) return py_rows[cls->bi].call(L, cls, &A);
    return L->host->construct(L, cls, &A);
  }
  PV *obj = L->host->instance(L, cls);
  if (!obj) {
    obj = pv_new(L, PV_OBJ);
    obj->cls = cls;
    obj->attrs = env_new(L, NULL);
  }
  PV *init = class_lookup(cls, "__init__"), *binit = NULL;
  for (PV *c = cls; c && !init && !binit && L->host->base_init; c = c->cls)   /* class M(nn.Linear) without __init__ */
    if (c->bi) binit = L->host->base_init(L, c, obj, "__init__");
  if (init) call_value(L, at, bind_method(L, obj, init), args, nargs, kwn, kwv, nkw);
  else if (binit) call_value(L, at, binit, args, nargs, kwn, kwv, nkw);
  else if (env_get(cls->env, "__dataclass__")) dataclass_init(L, at, cls, obj, args, nargs, kwn, kwv, nkw);
  else if (nargs || nkw) lower_error(L, at, "%s() takes no arguments", cls->s);
  return obj;
}

/* ---- expressions ------------------------------------------------------ */

PV *py_lookup_name(L *L, Node *n) {
  PV *v = env_lookup(L->env, n->name);
  if (!v) v = env_get(L->globals, n->name);
  if (!v) v = env_get(L->builtins, n->name);
  if (!v) py_raise(L, n->span, "NameError", "name '%s' is not defined", n->name);
  return v;
}

static PV *index_value(L *L, Span at, PV *obj, PV *idx) {
  if (obj->k == PV_OPAQUE || idx->k == PV_OPAQUE)
    return opaque_op(L, at, obj, idx, arena_printf(L->a, "%s[...]", obj->k == PV_OPAQUE ? obj->s : "..."),
                     "indexing");
  if (is_host(obj)) {
    PV *r = L->host->index(L, at, obj, idx);
    if (r) return r;
  }
  if (pv_is_seq(obj) && obj->bi == BI_SET) py_set_order_error(L, at);   /* list(a_set)[0] */
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
    if (i < 0 || i >= len) py_raise(L, at, "IndexError", "index %lld out of range for a %s of length %lld",
                                       (long long)arg_int(L, at, idx, "index"), pv_kind_name(obj), (long long)len);
    if (obj->k == PV_STR) return pv_str(L, arena_strndup(L->a, obj->s + i, 1));
    return obj->items[i];
  }
  if (obj->k == PV_DICT) {
    PV *v = pv_dict_lookup(L, at, obj, idx);
    if (!v) py_raise(L, at, "KeyError", "key %s not found in dict", pv_repr(L, at, idx));
    return v;
  }
  if (obj->k == PV_OBJ) {
    PV *r = L->host->index(L, at, obj, idx);
    if (r) return r;
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
    py_assign_target(L, g->a, items[i]);
    int ok = 1;
    for (int k = 0; k < g->list.len && ok; k++) ok = truthy(L, g->list.data[k]->span, eval_expr(L, g->list.data[k]));
    if (ok) comp_loop(L, n, gi + 1, out, dict);
  }
}

PV *py_make_function(L *L, Node *def) {
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
static const char *fstring_text(L *L, Span at, const char *s, int nested, const PV **opaque) {
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
      spec = fstring_text(L, at, arena_strndup(L->a, p + 1, (size_t)(q - p - 1)), 1, opaque);
      if (debug && conv == 'r') conv = 0; /* f"{x=:.2f}" formats the value */
      p = q;
    }
    if (*p != '}') lower_error(L, at, "f-string: expecting '}'");
    s = p + 1;
    if (pv_text_unknown(L, at, v, "an f-string")) {   /* the whole string is opaque (eval_expr's N_FSTR) */
      if (!*opaque) *opaque = pv_text_unknown(L, at, v, "an f-string");
      continue;
    }
    if (*opaque) continue;
    if (conv == 'r' || conv == 'a') v = pv_str(L, pv_repr(L, at, v));
    else if (conv == 's') v = pv_str(L, pv_to_str(L, at, v));
    sb_adds(L, at, &out, pv_format(L, at, v, spec));
  }
  return sb_done(L, &out);
}


PV *eval_expr(L *L, Node *n) {
  switch (n->kind) {
  case N_NAME: {
    PV *v = py_lookup_name(L, n);
    v->owned = 0; /* read: no longer held by one name only */
    return v;
  }
  case N_INT: return pv_int(L, n->ival);
  case N_FLOAT: return pv_float(L, n->fval);
  case N_IMAG: return pv_complex(L, 0.0, n->fval);
  case N_STR: return pv_str(L, n->sval);
  case N_FSTR: {
    const PV *opaque = NULL;
    const char *text = fstring_text(L, n->span, n->sval, 0, &opaque);
    return opaque ? pv_opaque_from(L, n->span, opaque, "f-string") : pv_str(L, text);
  }
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
    return py_binop(L, n->span, n->op, a, b);
  }
  case N_UNARY: {
    PV *a = eval_expr(L, n->a);
    if (n->op == OP_NOT && a->k == PV_OPAQUE && a->unknown_truth)
      return opaque_truth(L, n->span, a, NULL, arena_printf(L->a, "not %s", a->s), "'not' of a tensor");
    if (n->op == OP_NOT) return pv_bool(L, !truthy(L, n->a->span, a));
    if (a->k == PV_OPAQUE) return pv_opaque_from(L, n->span, a, arena_printf(L->a, "%s%s", fe_op_spelling(n->op), a->s));
    if (is_host(a)) return L->host->unary(L, n->span, n->op, a);
    if (a->k == PV_COMPLEX && n->op != OP_INVERT)
      return n->op == OP_POS ? a : pv_complex(L, -a->f, -a->fi);
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
      if ((left->k == PV_OPAQUE || right->k == PV_OPAQUE) && left != right) {   /* `x is x` is known */
        if (n->list.len > 2) lower_error(L, n->span, "chained comparisons with an opaque value are not supported");
        return opaque_truth(L, n->span, left, right,
                            arena_printf(L->a, "%s %s %s", left->k == PV_OPAQUE ? left->s : "...", fe_op_spelling(op),
                                         right->k == PV_OPAQUE ? right->s : "..."),
                            "comparing a tensor");
      }
      if (is_host(left) || is_host(right)) {
        if (op == OP_IS || op == OP_ISNOT) {
          if (n->list.len > 2) lower_error(L, n->span, "chained comparisons of tensors are not supported");
          return pv_bool(L, compare(L, n->span, op, left, right));
        }
        PV *c = L->host->compare(L, n->span, op, left, right);
        if (n->list.len == 2) return c;
        /* `0 <= x <= 1` on one-element tensors: Python's `and` of the links */
        L->host->check_cond(L, n->span, c);
        result = result && is_host(result) ? L->host->select(L, n->span, result, c, pv_bool(L, 0)) : c;
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
    if (L->host->runtime(L, c)) { /* both computed, then selected (see staged_if) */
      L->staged_depth++;
      PV *a = eval_expr(L, n->b), *b = eval_expr(L, n->c);
      L->staged_depth--;
      return py_select_value(L, n->span, "the conditional expression", c, a, b);
    }
    return truthy(L, n->a->span, c) ? eval_expr(L, n->b) : eval_expr(L, n->c);
  }
  case N_LAMBDA: return py_make_function(L, n);
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
    py_assign_target(L, n->a, v);
    return v;
  }
  default: break;
  }
  lower_error(L, n->span, "this expression (%s) is not supported by ctc", fe_node_kind_name(n->kind));
}

