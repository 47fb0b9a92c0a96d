/* values.c - compile-time Python values (PV) and scopes (Env). */
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "py.h"

PV *pv_new(L *L, PVKind k) {
  PV *v = arena_alloc(L->a, sizeof *v);
  v->k = k;
  return v;
}
PV *pv_none(L *L) { return pv_new(L, PV_NONE); }
PV *pv_bool(L *L, int b) {
  PV *v = pv_new(L, PV_BOOL);
  v->i = b != 0;
  return v;
}
PV *pv_int(L *L, int64_t i) {
  PV *v = pv_new(L, PV_INT);
  v->i = i;
  return v;
}
PV *pv_float(L *L, double f) {
  PV *v = pv_new(L, PV_FLOAT);
  v->f = f;
  return v;
}
PV *pv_complex(L *L, double re, double im) {
  PV *v = pv_new(L, PV_COMPLEX);
  v->f = re;
  v->fi = im;
  return v;
}

PV *pv_str(L *L, const char *s) {
  PV *v = pv_new(L, PV_STR);
  v->s = arena_strdup(L->a, s);
  return v;
}
static PV *pv_seq(L *L, PVKind k, PV **items, int n) {
  PV *v = pv_new(L, k);
  v->cap = n < 4 ? 4 : n;
  v->items = arena_alloc(L->a, sizeof(PV *) * (size_t)v->cap);
  if (n) memcpy(v->items, items, sizeof(PV *) * (size_t)n);
  v->n = n;
  return v;
}
PV *pv_tuple(L *L, PV **items, int n) { return pv_seq(L, PV_TUPLE, items, n); }
PV *pv_list(L *L, PV **items, int n) { return pv_seq(L, PV_LIST, items, n); }
void pv_list_append(L *L, PV *list, PV *x) {
  if (list->n == list->cap) {
    int nc = list->cap ? list->cap * 2 : 4;
    PV **ni = arena_alloc(L->a, sizeof(PV *) * (size_t)nc);
    if (list->n) memcpy(ni, list->items, sizeof(PV *) * (size_t)list->n);
    list->items = ni;
    list->cap = nc;
  }
  list->items[list->n++] = x;
}
PV *pv_dict(L *L) { return pv_new(L, PV_DICT); }

/* ---- hashing (dict keys) -------------------------------------------------- */

#define MAX_VALUE_DEPTH 1000  /* Python's default recursion limit */

static uint64_t mix64(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ULL;
  return x ^ (x >> 33);
}
static uint64_t str_hash(const char *s) {
  uint64_t h = 1469598103934665603ULL;
  for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ULL;
  return h;
}

/* Hash consistent with pv_equal on hashable values; *bad receives the first
 * unhashable value (a list, dict, slice), depth past the limit sets *deep. */
static uint64_t hash_rec(const PV *v, int depth, const PV **bad, int *deep) {
  if (*deep >= (1 << 26)) return 0; /* past the step limit: the caller's charge stops it */
  (*deep) += 2;                      /* counts the values hashed (bit 0: too deep) */
  if (depth > MAX_VALUE_DEPTH) {
    *deep |= 1;
    return 0;
  }
  switch (v->k) {
  case PV_NONE: return 0x9e3779b97f4a7c15ULL;
  case PV_ELLIPSIS: return 0x51ed27;
  case PV_BOOL:
  case PV_INT: return mix64((uint64_t)v->i);
  case PV_FLOAT:
    /* equal numbers hash alike: 2.0 like 2 */
    if (v->f == floor(v->f) && v->f >= -9223372036854775808.0 && v->f < 9223372036854775808.0)
      return mix64((uint64_t)(int64_t)v->f);
    return mix64((uint64_t)v->f ^ 0x7ff);
  case PV_STR: return str_hash(v->s);
  case PV_COMPLEX:   /* equal to a real number when the imaginary part is 0: hashed alike */
    if (v->fi == 0) {
      PV r = *v;
      r.k = PV_FLOAT;
      return hash_rec(&r, depth, bad, deep);
    }
    return mix64((uint64_t)v->f ^ 0x1234) ^ mix64((uint64_t)v->fi);
  case PV_NS: return str_hash(v->s) ^ 0x5a5a;
  case PV_HOSTC: return mix64((uint64_t)v->dt + 77);
  case PV_TUPLE: {
    uint64_t h = 0x345678;
    for (int i = 0; i < v->n; i++) h = mix64(h ^ hash_rec(v->items[i], depth + 1, bad, deep));
    return h;
  }
  case PV_HOST: return mix64((uint64_t)(uintptr_t)v->t);
  case PV_BUILTIN: return mix64((uint64_t)v->bi * 31 + (uint64_t)(uintptr_t)v->self);
  case PV_BOUND: return mix64((uint64_t)(uintptr_t)v->fn ^ (uint64_t)(uintptr_t)v->self);
  case PV_CLASS:
    if (v->bi) return mix64((uint64_t)v->bi * 131); /* nn.Linear: one class however it was looked up */
    return mix64((uint64_t)(uintptr_t)v);
  case PV_FUNC:
  case PV_OBJ: return mix64((uint64_t)(uintptr_t)v);
  default:
    if (!*bad) *bad = v;
    return 0;
  }
}

static uint64_t pv_hash_at(L *L, Span at, const PV *v) {
  const PV *bad = NULL;
  int deep = 0;
  uint64_t h = hash_rec(v, 0, &bad, &deep);
  eval_charge(L, at, deep >> 1);
  if (deep & 1) lower_error(L, at, "maximum recursion depth exceeded while hashing a value (RecursionError)");
  if (bad) lower_error(L, at, "unhashable type: '%s'", pv_kind_name(bad));
  return h;
}
static uint64_t pv_hash_known(const PV *v) {
  const PV *bad = NULL;
  int deep = 0;
  return hash_rec(v, 0, &bad, &deep);
}

/* Equality of hashable values (acyclic, depth-bounded trees of tuples). */
static int key_equal(const PV *a, const PV *b) {
  if (a == b) return 1;
  if ((a->k == PV_COMPLEX && (pv_is_num(b) || b->k == PV_COMPLEX)) || (b->k == PV_COMPLEX && pv_is_num(a))) {
    if ((a->k == PV_COMPLEX ? a->fi : 0) != (b->k == PV_COMPLEX ? b->fi : 0)) return 0;
    PV ra = *a, rb = *b;   /* equal imaginary parts: the real parts as numbers (1 + 0j == 1) */
    if (ra.k == PV_COMPLEX) ra.k = PV_FLOAT;
    if (rb.k == PV_COMPLEX) rb.k = PV_FLOAT;
    return key_equal(&ra, &rb);
  }
  if (pv_is_num(a) && pv_is_num(b)) {
    if (a->k != PV_FLOAT && b->k != PV_FLOAT) return a->i == b->i;
    if (a->k == PV_FLOAT && b->k == PV_FLOAT) return a->f == b->f;
    /* int vs float: exact (2**53 + 1 != 2.0**53) */
    const PV *fi = a->k == PV_FLOAT ? a : b, *ii = a->k == PV_FLOAT ? b : a;
    if (!(fi->f >= -9223372036854775808.0 && fi->f < 9223372036854775808.0) || fi->f != floor(fi->f)) return 0;
    return (int64_t)fi->f == ii->i;
  }
  if (a->k != b->k) return 0;
  switch (a->k) {
  case PV_NONE:
  case PV_ELLIPSIS: return 1;
  case PV_COMPLEX: return a->f == b->f && a->fi == b->fi;
  case PV_STR:
  case PV_NS: return strcmp(a->s, b->s) == 0;
  case PV_HOSTC: return a->dt == b->dt;
  case PV_TUPLE:
    if (a->n != b->n) return 0;
    for (int i = 0; i < a->n; i++)
      if (!key_equal(a->items[i], b->items[i])) return 0;
    return 1;
  case PV_HOST: return a->t == b->t;
  case PV_BUILTIN: return a->bi == b->bi && a->self == b->self;
  case PV_BOUND: return a->fn == b->fn && a->self == b->self;
  case PV_CLASS: return a->bi && a->bi == b->bi;
  default: return 0;
  }
}

/* Python's `is` on compile-time values: identity, where ctc makes fresh values for
 * what Python keeps unique (None, bools, builtin classes and functions, dtypes). */
int pv_is(const PV *a, const PV *b) {
  if (a == b) return 1;
  if (a->k != b->k) return 0;
  switch (a->k) {
  case PV_NONE:
  case PV_ELLIPSIS: return 1;
  case PV_BOOL: return a->i == b->i;
  case PV_CLASS: return a->bi && a->bi == b->bi;
  case PV_BUILTIN: return a->bi == b->bi && a->self == b->self && !a->self;
  case PV_NS: return strcmp(a->s, b->s) == 0;
  case PV_HOSTC: return a->dt == b->dt;
  default: return 0;
  }
}

static void dict_index_build(L *L, PV *d, int cap) {
  d->hidx = arena_alloc(L->a, sizeof(int) * (size_t)cap);
  d->hcap = cap;
  for (int i = 0; i < d->n; i++) {
    uint64_t h = pv_hash_known(d->keys[i]);
    for (uint64_t j = h & (uint64_t)(cap - 1);; j = (j + 1) & (uint64_t)(cap - 1))
      if (!d->hidx[j]) {
        d->hidx[j] = i + 1;
        break;
      }
  }
}

/* Index of key in d, or -1; h is the key's hash. */
static int dict_find(PV *d, PV *key, uint64_t h) {
  if (!d->hidx) {
    for (int i = 0; i < d->n; i++)
      if (key_equal(d->keys[i], key)) return i;
    return -1;
  }
  for (uint64_t j = h & (uint64_t)(d->hcap - 1);; j = (j + 1) & (uint64_t)(d->hcap - 1)) {
    int s = d->hidx[j];
    if (!s) return -1;
    if (key_equal(d->keys[s - 1], key)) return s - 1;
  }
}

PV *pv_dict_get(PV *d, PV *key) {
  int i = dict_find(d, key, d->hidx ? pv_hash_known(key) : 0);
  return i < 0 ? NULL : d->items[i];
}
PV *pv_dict_lookup(L *L, Span at, PV *d, PV *key) {
  int i = dict_find(d, key, pv_hash_at(L, at, key));
  return i < 0 ? NULL : d->items[i];
}
PV *pv_dict_pop(L *L, Span at, PV *d, PV *key) {
  int i = dict_find(d, key, pv_hash_at(L, at, key));
  if (i < 0) return NULL;
  PV *v = d->items[i];
  memmove(d->keys + i, d->keys + i + 1, sizeof(PV *) * (size_t)(d->n - i - 1));
  memmove(d->items + i, d->items + i + 1, sizeof(PV *) * (size_t)(d->n - i - 1));
  d->n--;
  if (d->hidx) dict_index_build(L, d, d->hcap);   /* the positions after i moved */
  return v;
}

void pv_dict_set(L *L, Span at, PV *d, PV *key, PV *val) {
  uint64_t h = pv_hash_at(L, at, key);
  int i = dict_find(d, key, h);
  if (i >= 0) {
    d->items[i] = val;
    return;
  }
  if (d->n == d->cap) {
    int nc = d->cap ? d->cap * 2 : 4;
    PV **ni = arena_alloc(L->a, sizeof(PV *) * (size_t)nc);
    PV **nk = arena_alloc(L->a, sizeof(PV *) * (size_t)nc);
    if (d->n) {
      memcpy(ni, d->items, sizeof(PV *) * (size_t)d->n);
      memcpy(nk, d->keys, sizeof(PV *) * (size_t)d->n);
    }
    d->items = ni;
    d->keys = nk;
    d->cap = nc;
  }
  d->keys[d->n] = key;
  d->items[d->n] = val;
  d->n++;
  if (d->n >= 8 && (int64_t)d->n * 2 > d->hcap) dict_index_build(L, d, d->hcap ? d->hcap * 2 : 32);
  else if (d->hidx)
    for (uint64_t j = h & (uint64_t)(d->hcap - 1);; j = (j + 1) & (uint64_t)(d->hcap - 1))
      if (!d->hidx[j]) {
        d->hidx[j] = d->n;
        break;
      }
}
PV *pv_native(L *L, BuiltinFn *call, int bi, const char *name, PV *self) {
  PV *v = pv_new(L, PV_BUILTIN);
  v->bi = bi;
  v->call = call;
  v->s = name;
  v->self = self;
  return v;
}
PV *pv_ns(L *L, const char *name) {
  PV *v = pv_new(L, PV_NS);
  v->s = arena_strdup(L->a, name);
  return v;
}

PV *pv_opaque(L *L, Span at, const char *expr) {
  PV *v = pv_new(L, PV_OPAQUE);
  v->s = arena_strdup(L->a, expr);
  v->origin = arena_alloc(L->a, sizeof(Span));
  *v->origin = at;
  const char *m = expr;   /* the module: the first name in it ('-numpy.log(...) / ...' is numpy's) */
  while (*m && !(isalpha((unsigned char)*m) || *m == '_')) m++;
  size_t n = strcspn(m, ".([ ");
  v->what = arena_printf(L->a, "opaque value '%s' (made at line %d from '%.*s', which ctc does not model)", expr, at.line,
                         (int)n, m);
  return v;
}

PV *pv_opaque_described(L *L, Span at, const char *expr, const char *what) {
  PV *v = pv_opaque(L, at, expr);
  v->what = what;
  v->i = 1;
  return v;
}

/* An opaque value made from opaque src (an attribute, call, index or operation of
 * it): one described by pv_opaque_described (a batch index, a name a failed
 * statement left unbound) stays that value; one whose description is its own
 * (not a module's: a loop's names, a parameter read by script code) keeps naming
 * that source and where it was made. */
PV *pv_opaque_from(L *L, Span at, const PV *src, const char *expr) {
  if (src && src->k == PV_OPAQUE && src->i) {
    PV *v = pv_new(L, PV_OPAQUE);
    *v = *src;
    return v;
  }
  PV *v = pv_opaque(L, at, expr);
  if (src && src->k == PV_OPAQUE && strncmp(src->what, "opaque value '", 14) != 0) {
    v->what = arena_printf(L->a, "value '%s' computed from the %s", expr, src->what);
    *v->origin = *src->origin;
  }
  return v;
}

/* The text of an opaque value (str(), repr(), an f-string or format() of it):
 * an opaque string, so that using it is a located error while a print() of it,
 * which ctc drops, still compiles. CPython's text is not known at compile time. */
PV *pv_opaque_str(L *L, Span at, const PV *src, const char *how) {
  PV *o = pv_opaque(L, at, how);
  o->what = arena_printf(L->a, "string made by %s at line %d from the %s", how, at.line, src->what);
  o->s = src->s;   /* the note names the opaque value at its origin */
  o->origin = src->origin;
  o->i = 1;
  return o;
}

/* str(v), repr(v), f"{v}", '%s' % v, format(v): an opaque string where ctc cannot
 * write CPython's text (see pv_opaque_str), else NULL. Numbers, strings, None,
 * Ellipsis, containers and dtypes have CPython's text (repr_rec); functions,
 * classes, modules, objects and tensors do not (addresses, module names, their
 * own __str__, PyTorch's tensor printing). */
PV *pv_text_unknown(L *L, Span at, const PV *v, const char *how) {
  switch (v->k) {
  case PV_NONE: case PV_BOOL: case PV_INT: case PV_FLOAT: case PV_COMPLEX: case PV_STR: case PV_ELLIPSIS:
  case PV_TUPLE: case PV_LIST: case PV_SLICE: case PV_HOSTC: return NULL;
  case PV_DICT:
    if (v->bi != BI_SET) return NULL;
    /* a set's order is CPython's hash order (randomised per run for str): no text to match */
    {
      PV *src = pv_opaque(L, at, "set");
      src->what = "text of a set (its order is CPython's hash order; sort it first: sorted(s))";
      PV *o = pv_opaque_str(L, at, src, how);
      o->what = src->what;
      return o;
    }
  case PV_OPAQUE: return pv_opaque_str(L, at, v, how);
  default: {
    PV *src = pv_opaque(L, at, pv_kind_name(v));
    src->what = arena_printf(L->a, "text of a %s, which ctc does not know (CPython's holds an address, a module "
                             "name or a __str__/__repr__ ctc does not call)", pv_kind_name(v));
    PV *o = pv_opaque_str(L, at, src, how);
    o->what = src->what;
    return o;
  }
  }
}

void pv_opaque_error(L *L, Span at, const PV *v, const char *use) {
  diag_error(L->d, at, "%s needs the %s", use, v->what);
  diag_note(L->d, *v->origin, "the opaque value '%s' was made here", v->s);
  longjmp(*L->on_error, 1);
}

const char *pv_kind_name(const PV *v) {
  switch (v->k) {
  case PV_NONE: return "None";
  case PV_BOOL: return "bool";
  case PV_INT: return "int";
  case PV_FLOAT: return "float";
  case PV_STR: return "str";
  case PV_TUPLE: return "tuple";
  case PV_LIST: return "list";
  case PV_DICT: return "dict";
  case PV_SLICE: return "slice";
  case PV_ELLIPSIS: return "ellipsis";
  case PV_FUNC: return "function";
  case PV_CLASS: return "class";
  case PV_OBJ: return v->cls && v->cls->s ? v->cls->s : "object";
  case PV_BOUND: return "method";
  case PV_BUILTIN: return v->attrs && v->s ? v->s : "builtin function";   /* an object of the host's (a GradScaler) */
  case PV_NS: return "module";
  case PV_HOST:
  case PV_HOSTC: return v->s; /* the host's name for its kind */
  case PV_OPAQUE: return v->what;
  case PV_COMPLEX: return "complex";
  }
  return "?";
}

/* ---- checked integers ------------------------------------------------------ */

CTC_NORETURN void int_too_large(L *L, Span at) {
  lower_error(L, at, "integer too large for ctc (Python ints are unbounded; ctc computes with 64-bit ints)");
}
int64_t ck_add(L *L, Span at, int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_add_overflow(a, b, &r)) int_too_large(L, at);
  return r;
}
int64_t ck_sub(L *L, Span at, int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_sub_overflow(a, b, &r)) int_too_large(L, at);
  return r;
}
int64_t ck_mul(L *L, Span at, int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_mul_overflow(a, b, &r)) int_too_large(L, at);
  return r;
}
int64_t ck_neg(L *L, Span at, int64_t a) { return ck_sub(L, at, 0, a); }
/* Exponentiation by squaring: at most 63 rounds. The base is squared only while
 * higher exponent bits remain, so an overflow there means the result overflows. */
int64_t ck_pow(L *L, Span at, int64_t a, int64_t b) {
  int64_t r = 1;
  while (b) {
    if (b & 1) r = ck_mul(L, at, r, a);
    b >>= 1;
    if (b) a = ck_mul(L, at, a, a);
  }
  return r;
}
int64_t ck_float_to_int(L *L, Span at, double f) {
  if (isnan(f)) lower_error(L, at, "cannot convert float NaN to integer (ValueError)");
  if (isinf(f)) lower_error(L, at, "cannot convert float infinity to integer (OverflowError)");
  if (!(f >= -9223372036854775808.0 && f < 9223372036854775808.0)) int_too_large(L, at);
  return (int64_t)f;
}

/* ---- strings ---------------------------------------------------------------- */

#define MAX_STR_BYTES ((size_t)1 << 28)

void sb_add(L *L, Span at, SB *b, const char *s, size_t n) {
  if (n > MAX_STR_BYTES || b->len + n > MAX_STR_BYTES)
    lower_error(L, at, "string too long for compile time (more than %zu MiB)", MAX_STR_BYTES >> 20);
  if (b->len + n + 1 > b->cap) {
    size_t nc = b->cap ? b->cap : 32;
    while (nc < b->len + n + 1) nc *= 2;
    char *np = arena_alloc(L->a, nc);
    if (b->len) memcpy(np, b->p, b->len);
    b->p = np;
    b->cap = nc;
  }
  memcpy(b->p + b->len, s, n);
  b->len += n;
  b->p[b->len] = 0;
}
void sb_adds(L *L, Span at, SB *b, const char *s) { sb_add(L, at, b, s, strlen(s)); }
const char *sb_done(L *L, SB *b) { return b->p ? b->p : arena_strdup(L->a, ""); }

/* Python's repr of a float: the shortest digits that round-trip, fixed notation
 * for exponents -4 <= e < 16, otherwise d.ddde+XX. */
static const char *float_repr(L *L, double f) {
  if (isnan(f)) return "nan";
  if (isinf(f)) return f > 0 ? "inf" : "-inf";
  char buf[64];
  int p;
  for (p = 1; p < 17; p++) {
    snprintf(buf, sizeof buf, "%.*e", p - 1, f);
    if (strtod(buf, NULL) == f) break;
  }
  snprintf(buf, sizeof buf, "%.*e", p - 1, f);
  /* buf: [-]d[.ddd]e[+-]XX */
  char digits[32];
  int nd = 0, neg = buf[0] == '-';
  const char *q = buf + neg;
  for (; *q && *q != 'e'; q++)
    if (*q != '.') digits[nd++] = *q;
  digits[nd] = 0;
  int e = atoi(q + 1);
  char out[64];
  int o = 0;
  if (neg) out[o++] = '-';
  if (e >= -4 && e < 16) {
    if (e >= 0) {
      for (int i = 0; i <= e; i++) out[o++] = i < nd ? digits[i] : '0';
      out[o++] = '.';
      if (nd > e + 1)
        for (int i = e + 1; i < nd; i++) out[o++] = digits[i];
      else out[o++] = '0';
    } else {
      out[o++] = '0';
      out[o++] = '.';
      for (int i = 0; i < -e - 1; i++) out[o++] = '0';
      for (int i = 0; i < nd; i++) out[o++] = digits[i];
    }
    out[o] = 0;
  } else {
    out[o++] = digits[0];
    if (nd > 1) {
      out[o++] = '.';
      for (int i = 1; i < nd; i++) out[o++] = digits[i];
    }
    snprintf(out + o, sizeof out - (size_t)o, "e%c%02d", e < 0 ? '-' : '+', e < 0 ? -e : e);
  }
  return arena_strdup(L->a, out);
}

static void str_repr(L *L, Span at, SB *b, const char *s) {
  char q = strchr(s, '\'') && !strchr(s, '"') ? '"' : '\'';
  sb_add(L, at, b, &q, 1);
  for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
    char e[8];
    if (*c == '\\' || *c == (unsigned char)q) snprintf(e, sizeof e, "\\%c", *c);
    else if (*c == '\n') snprintf(e, sizeof e, "\\n");
    else if (*c == '\r') snprintf(e, sizeof e, "\\r");
    else if (*c == '\t') snprintf(e, sizeof e, "\\t");
    else if (*c < 0x20 || *c == 0x7f) snprintf(e, sizeof e, "\\x%02x", *c);
    else {
      e[0] = (char)*c;
      e[1] = 0;
    }
    sb_adds(L, at, b, e);
  }
  sb_add(L, at, b, &q, 1);
}

/* CPython's repr of a complex: each part as float's repr without a trailing ".0"; the
 * real part left out when it is +0.0 (1j), else in parentheses with a signed imaginary
 * part ((1+2j), (-0-1j)) */
static const char *complex_part(L *L, double f, int sign) {
  const char *s = float_repr(L, f);
  size_t n = strlen(s);
  if (n > 2 && !strcmp(s + n - 2, ".0")) s = arena_strndup(L->a, s, n - 2);
  return sign && s[0] != '-' ? arena_printf(L->a, "+%s", s) : s;
}
static const char *complex_repr(L *L, double re, double im) {
  if (re == 0 && !signbit(re)) return arena_printf(L->a, "%sj", complex_part(L, im, 0));
  return arena_printf(L->a, "(%s%sj)", complex_part(L, re, 0), complex_part(L, im, 1));
}

/* Containers being printed (Python's Py_ReprEnter): a container met again inside
 * itself prints as [...], {...} or (...). */
typedef struct ReprStack { const PV *v[MAX_VALUE_DEPTH + 1]; int n; } ReprStack;

static void repr_rec(L *L, Span at, SB *b, const PV *v, ReprStack *st) {
  switch (v->k) {
  case PV_NONE: sb_adds(L, at, b, "None"); return;
  case PV_BOOL: sb_adds(L, at, b, v->i ? "True" : "False"); return;
  case PV_INT: sb_adds(L, at, b, arena_printf(L->a, "%lld", (long long)v->i)); return;
  case PV_FLOAT: sb_adds(L, at, b, float_repr(L, v->f)); return;
  case PV_COMPLEX: sb_adds(L, at, b, complex_repr(L, v->f, v->fi)); return;
  case PV_STR: str_repr(L, at, b, v->s); return;
  case PV_ELLIPSIS: sb_adds(L, at, b, "Ellipsis"); return;
  case PV_TUPLE:
  case PV_LIST:
  case PV_DICT:
  case PV_SLICE: {
    const char *open = v->k == PV_TUPLE ? "(" : v->k == PV_LIST ? "[" : v->k == PV_DICT ? "{" : "slice(";
    const char *close = v->k == PV_LIST ? "]" : v->k == PV_DICT ? "}" : ")";
    for (int i = 0; i < st->n; i++)
      if (st->v[i] == v) {
        sb_adds(L, at, b, open);
        sb_adds(L, at, b, "...");
        sb_adds(L, at, b, close);
        return;
      }
    if (st->n >= MAX_VALUE_DEPTH)
      lower_error(L, at, "maximum recursion depth exceeded while getting the repr of an object (RecursionError)");
    st->v[st->n++] = v;
    eval_charge(L, at, v->n);
    sb_adds(L, at, b, open);
    for (int i = 0; i < v->n; i++) {
      if (i) sb_adds(L, at, b, ", ");
      if (v->k == PV_DICT) {
        repr_rec(L, at, b, v->keys[i], st);
        sb_adds(L, at, b, ": ");
      }
      repr_rec(L, at, b, v->items[i], st);
    }
    if (v->k == PV_TUPLE && v->n == 1) sb_adds(L, at, b, ",");
    sb_adds(L, at, b, close);
    st->n--;
    return;
  }
  case PV_HOSTC: sb_adds(L, at, b, L->host->repr(L, at, v)); return;
  case PV_OPAQUE: pv_opaque_error(L, at, v, "its text (str(), repr() or format())");
  default:
    lower_error(L, at, "the text of a %s is not known to ctc (CPython's holds an address, a module name or a "
                "__str__/__repr__ ctc does not call)", pv_kind_name(v));
  }
}

const char *pv_repr(L *L, Span at, const PV *v) {
  ReprStack st;
  st.n = 0;
  SB b = {0};
  repr_rec(L, at, &b, v, &st);
  return sb_done(L, &b);
}
const char *pv_to_str(L *L, Span at, const PV *v) { return v->k == PV_STR ? v->s : pv_repr(L, at, v); }

int pv_is_seq(const PV *v) { return v->k == PV_TUPLE || v->k == PV_LIST; }
int pv_is_num(const PV *v) { return v->k == PV_BOOL || v->k == PV_INT || v->k == PV_FLOAT; }
double pv_num(const PV *v) { return v->k == PV_FLOAT ? v->f : (double)v->i; }

/* Python ==: numbers compare exactly across int and float, containers item by
 * item with the identity shortcut Python uses for items (so x == x holds for a
 * list that contains itself), dicts by key; past depth 1000, a RecursionError. */
static int num_equal(const PV *a, const PV *b) {
  if (a->k != PV_FLOAT && b->k != PV_FLOAT) return a->i == b->i;
  if (a->k == PV_FLOAT && b->k == PV_FLOAT) return a->f == b->f;
  return key_equal(a, b);
}
static int eq_rec(L *L, Span at, const PV *a, const PV *b, int depth) {
  if (pv_is_num(a) && pv_is_num(b)) return num_equal(a, b);
  if ((a->k == PV_COMPLEX || pv_is_num(a)) && (b->k == PV_COMPLEX || pv_is_num(b)))   /* 1 + 0j == 1 */
    return (a->k == PV_COMPLEX ? a->f : pv_num(a)) == (b->k == PV_COMPLEX ? b->f : pv_num(b)) &&
           (a->k == PV_COMPLEX ? a->fi : 0) == (b->k == PV_COMPLEX ? b->fi : 0);
  if (a == b) return 1;
  if (a->k != b->k) return 0;
  if (depth >= MAX_VALUE_DEPTH) lower_error(L, at, "maximum recursion depth exceeded in comparison (RecursionError)");
  if (a->k == PV_TUPLE || a->k == PV_LIST || a->k == PV_DICT) eval_charge(L, at, a->n);
  switch (a->k) {
  case PV_TUPLE:
  case PV_LIST:
  case PV_SLICE:
    if (a->n != b->n) return 0;
    for (int i = 0; i < a->n; i++)
      if (a->items[i] != b->items[i] && !eq_rec(L, at, a->items[i], b->items[i], depth + 1)) return 0;
    return 1;
  case PV_DICT:
    if (a->n != b->n) return 0;
    for (int i = 0; i < a->n; i++) {
      PV *bv = pv_dict_get((PV *)b, a->keys[i]);
      if (!bv || (bv != a->items[i] && !eq_rec(L, at, a->items[i], bv, depth + 1))) return 0;
    }
    return 1;
  default: return key_equal(a, b);
  }
}
int pv_equal(L *L, Span at, const PV *a, const PV *b) { return eq_rec(L, at, a, b, 0); }

int pv_class_is(const PV *cls, const PV *base) {
  for (const PV *c = cls; c; c = c->cls) {
    if (c == base) return 1;
    if (c->bi && base->bi && c->bi == base->bi) return 1;
  }
  return 0;
}

int pv_is_host(const PV *v) { return v->k == PV_HOST || v->k == PV_HOSTC; }

Env *env_new(L *L, Env *parent) {
  Env *e = arena_alloc(L->a, sizeof *e);
  e->parent = parent;
  return e;
}
/* Scopes are small (linear scan) until they grow; then a hash index keeps
 * lookups O(1), so a module with 100,000 children is not quadratic. */
static int env_find(Env *e, const char *name) {
  if (!e->hidx) {
    for (int i = e->names.len - 1; i >= 0; i--)
      if (strcmp(e->names.data[i], name) == 0) return i;
    return -1;
  }
  for (uint64_t j = str_hash(name) & (uint64_t)(e->hcap - 1);; j = (j + 1) & (uint64_t)(e->hcap - 1)) {
    int s = e->hidx[j];
    if (!s) return -1;
    if (strcmp(e->names.data[s - 1], name) == 0) return s - 1;
  }
}
static void env_index_insert(Env *e, int i) {
  for (uint64_t j = str_hash(e->names.data[i]) & (uint64_t)(e->hcap - 1);; j = (j + 1) & (uint64_t)(e->hcap - 1))
    if (!e->hidx[j]) {
      e->hidx[j] = i + 1;
      return;
    }
}
PV *env_get(Env *e, const char *name) {
  int i = env_find(e, name);
  return i < 0 ? NULL : e->vals.data[i];
}
PV *env_lookup(Env *e, const char *name) {
  for (; e; e = e->parent) {
    PV *v = env_get(e, name);
    if (v) return v;
  }
  return NULL;
}
void env_set(L *L, Env *e, const char *name, PV *v) {
  int i = env_find(e, name);
  if (i >= 0) {
    e->vals.data[i] = v;
    return;
  }
  vec_push(L->a, &e->names, arena_strdup(L->a, name));
  vec_push(L->a, &e->vals, v);
  if (e->names.len >= 16 && (int64_t)e->names.len * 2 > e->hcap) {
    e->hcap = e->hcap ? e->hcap * 2 : 64;
    e->hidx = arena_alloc(L->a, sizeof(int) * (size_t)e->hcap);
    for (int k = 0; k < e->names.len; k++) env_index_insert(e, k);
  } else if (e->hidx)
    env_index_insert(e, e->names.len - 1);
}

/* ---- format(value, spec): Python's format-spec mini-language ---------------------
 * [[fill]align][sign][#][0][width][,|_][.precision][type] for str, int, bool and float. */
static void group_digits(char *buf, size_t cap, char sep) {
  /* inserts sep every 3 digits in the leading run of digits of buf */
  char *p = buf;
  if (*p == '-' || *p == '+' || *p == ' ') p++;
  size_t nd = 0;
  while (p[nd] >= '0' && p[nd] <= '9') nd++;
  if (nd <= 3) return;
  size_t extra = (nd - 1) / 3, len = strlen(buf);
  if (len + extra + 1 > cap) return;
  size_t head = (size_t)(p - buf);
  memmove(p + nd + extra, p + nd, len - head - nd + 1);
  for (size_t i = nd, o = nd + extra, k = 0; i > 0; k++) {
    if (k && k % 3 == 0) p[--o] = sep;
    p[--o] = p[--i];
  }
}

const char *pv_format(L *L, Span at, const PV *v, const char *spec) {
  if (!spec[0]) return pv_to_str(L, at, v);
  if (v->k == PV_COMPLEX)
    lower_error(L, at, "format spec '%s' on a complex number is not supported by ctc (format its .real and .imag)", spec);
  const char *s = spec;
  char fill = ' ', align = 0, sign = '-', type = 0, grouping = 0;
  int alt = 0, width = -1, prec = -1;
  if (s[0] && s[1] && strchr("<>=^", s[1])) {
    fill = s[0];
    align = s[1];
    s += 2;
  } else if (s[0] && strchr("<>=^", s[0]))
    align = *s++;
  if (*s && strchr("+- ", *s)) sign = *s++;
  if (*s == '#') alt = 1, s++;
  if (*s == '0') {
    if (!align) fill = '0', align = '=';
    s++;
  }
  if (*s >= '0' && *s <= '9') {
    width = 0;
    while (*s >= '0' && *s <= '9' && width < 100000) width = width * 10 + (*s++ - '0');
  }
  if (*s == ',' || *s == '_') grouping = *s++;
  if (*s == '.') {
    s++;
    if (!(*s >= '0' && *s <= '9')) lower_error(L, at, "Format specifier missing precision");
    prec = 0;
    while (*s >= '0' && *s <= '9' && prec < 1000) prec = prec * 10 + (*s++ - '0');
  }
  if (*s) type = *s++;
  if (*s || width >= 100000 || prec >= 1000) lower_error(L, at, "Invalid format specifier '%s'", spec);
  (void)alt;
  char body[1400];
  const char *txt;
  int numeric = 1;
  if (v->k == PV_STR) {
    if (type && type != 's') lower_error(L, at, "Unknown format code '%c' for object of type 'str'", type);
    if (sign != '-' || grouping || align == '=') lower_error(L, at, "Invalid format specifier '%s' for a str", spec);
    txt = prec >= 0 ? arena_strndup(L->a, v->s, (size_t)prec) : v->s;
    numeric = 0;
  } else if ((v->k == PV_INT || v->k == PV_BOOL) && (!type || strchr("dnbxXoc", type))) {
    if (prec >= 0) lower_error(L, at, "Precision not allowed in integer format specifier");
    int64_t x = v->i;
    uint64_t m = x < 0 ? (uint64_t)0 - (uint64_t)x : (uint64_t)x;
    char digits[80];
    int nd = 0;
    if (type == 'c') {
      if (x < 0 || x > 127) lower_error(L, at, "format code 'c' supports only ASCII here");
      digits[nd++] = (char)x;
      numeric = 0;
    } else {
      unsigned base = type == 'b' ? 2 : type == 'o' ? 8 : (type == 'x' || type == 'X') ? 16 : 10;
      const char *dig = type == 'X' ? "0123456789ABCDEF" : "0123456789abcdef";
      char rev[80];
      int nr = 0;
      do { rev[nr++] = dig[m % base]; m /= base; } while (m);
      if (alt && base != 10) { digits[nd++] = '0'; digits[nd++] = type == 'b' ? 'b' : type == 'o' ? 'o' : type; }
      while (nr) digits[nd++] = rev[--nr];
    }
    digits[nd] = 0;
    snprintf(body, sizeof body, "%s%s", x < 0 ? "-" : sign == '+' ? "+" : sign == ' ' ? " " : "", digits);
    if (grouping) group_digits(body, sizeof body, grouping);
    txt = body;
  } else if (pv_is_num(v) && (!type || strchr("eEfFgG%n", type))) {
    double x = pv_num(v);
    char fmt[16];
    const char *suffix = "";
    if (type == '%') { x *= 100; suffix = "%"; }
    int p = prec < 0 ? 6 : prec;
    char t = type == '%' ? 'f' : type == 'n' ? 'g' : type;
    if (!type) {
      if (prec < 0) txt = float_repr(L, x);
      else {
        snprintf(fmt, sizeof fmt, "%%.%dg", p ? p : 1);
        snprintf(body, sizeof body, fmt, x);
        txt = body;
      }
      if (isfinite(x) && !strpbrk(txt, ".e")) txt = arena_printf(L->a, "%s.0", txt);
    } else {
      snprintf(fmt, sizeof fmt, "%%%s.%d%c", alt ? "#" : "", p, t);
      snprintf(body, sizeof body, fmt, x);
      txt = body;
    }
    if (!signbit(x) || isnan(x)) txt = arena_printf(L->a, "%s%s%s", sign == '+' ? "+" : sign == ' ' ? " " : "", txt, suffix);
    else txt = arena_printf(L->a, "%s%s", txt, suffix);
    if (grouping) {
      snprintf(body, sizeof body, "%s", txt);
      group_digits(body, sizeof body, grouping);
      txt = body;
    }
  } else if (pv_is_num(v))
    lower_error(L, at, "Unknown format code '%c' for object of type '%s'", type, pv_kind_name(v));
  else
    lower_error(L, at, "format spec '%s' is not supported for a '%s' at compile time", spec, pv_kind_name(v));
  size_t len = strlen(txt);
  if (width < 0 || (size_t)width <= len) return arena_strdup(L->a, txt);
  if (!align) align = numeric ? '>' : '<';
  size_t pad = (size_t)width - len, left = align == '>' ? pad : align == '^' ? pad / 2 : 0;
  char *out = arena_alloc(L->a, (size_t)width + 1);
  size_t o = 0, i = 0;
  if (align == '=') { /* sign first, then fill */
    if (txt[0] == '-' || txt[0] == '+' || txt[0] == ' ') out[o++] = txt[i++];
    if (txt[i] == '0' && txt[i + 1] && strchr("xXob", txt[i + 1])) { out[o++] = txt[i++]; out[o++] = txt[i++]; }
    left = pad;
  }
  for (size_t k = 0; k < left; k++) out[o++] = fill;
  memcpy(out + o, txt + i, len - i);
  o += len - i;
  while (o < (size_t)width) out[o++] = fill;
  out[o] = 0;
  return out;
}
