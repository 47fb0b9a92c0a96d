/* cg_util.c - text buffers, C types and literals, identifiers, c_expr templates. */
#include <ctype.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include "cg_int.h"

/* ---- buffers -------------------------------------------------------------- */

static void buf_reserve(Buf *b, size_t extra) {
  if (b->len + extra + 1 <= b->cap) return;
  size_t cap = b->cap ? b->cap : 4096;
  while (cap < b->len + extra + 1) cap *= 2;
  b->s = realloc(b->s, cap);
  CHECK(b->s != NULL);
  b->cap = cap;
}

void cg_printf(Buf *b, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  char tmp[512];
  int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
  va_end(ap);
  CHECK(n >= 0);
  buf_reserve(b, (size_t)n);
  if ((size_t)n < sizeof tmp) {
    memcpy(b->s + b->len, tmp, (size_t)n + 1);
  } else {
    va_start(ap, fmt);
    vsnprintf(b->s + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
  }
  b->len += (size_t)n;
}

void cg_puts(Buf *b, const char *s) {
  size_t n = strlen(s);
  buf_reserve(b, n);
  memcpy(b->s + b->len, s, n + 1);
  b->len += n;
}

void cg_buf_free(Buf *b) {
  free(b->s);
  b->s = NULL;
  b->len = b->cap = 0;
}

/* ---- types and literals ---------------------------------------------------- */

const char *cg_ctype(DType t) {
  switch (t) {
  case DT_F32: return "float";
  case DT_F64: return "double";
  case DT_I64: return "int64_t";
  case DT_I32: return "int32_t";
  case DT_BOOL: return "unsigned char";
  case DT_BF16: case DT_F16: return "uint16_t";   /* the bits (storage only) */
  default: BUG("bad dtype %d", (int)t);
  }
}

const char *cg_rt_dtype(DType t) {
  switch (t) {
  case DT_F32: return "CTC_F32";
  case DT_F64: return "CTC_F64";
  case DT_I64: return "CTC_I64";
  case DT_I32: return "CTC_I32";
  case DT_BOOL: return "CTC_BOOL";
  case DT_BF16: return "CTC_BF16";
  case DT_F16: return "CTC_F16";
  default: BUG("bad dtype %d", (int)t);
  }
}

/* The shortest %g spelling of v that reads back as the same float/double. */
static void float_digits(char *buf, size_t cap, double v, int is_f32) {
  for (int prec = is_f32 ? 6 : 15; prec <= (is_f32 ? 9 : 17); prec++) {
    snprintf(buf, cap, "%.*g", prec, v);
    if (is_f32 ? strtof(buf, NULL) == (float)v : strtod(buf, NULL) == v) break;
  }
  if (!strpbrk(buf, ".e")) {
    size_t n = strlen(buf);
    snprintf(buf + n, cap - n, ".0");
  }
}

/* The bits of v rounded to bfloat16 / float16 (to nearest even; NaN as PyTorch's 0x7FC0 / 0x7E00). */
static unsigned low_bits(DType t, double v) {
  if (t == DT_BF16) {
    float f = (float)ir_round_bf16(v);
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return isnan(f) ? 0x7FC0u : u >> 16;
  }
  double r = ir_round_f16(v), a = fabs(r);
  unsigned sign = signbit(r) ? 0x8000u : 0;
  if (isnan(r)) return 0x7E00u;
  if (isinf(r)) return sign | 0x7C00u;
  if (a < 0x1p-14) return sign | (unsigned)(a * 0x1p24);   /* subnormal (or zero): a multiple of 2^-24 */
  int e;
  double fr = frexp(a, &e);   /* a = fr * 2^e, fr in [0.5, 1) */
  return sign | (unsigned)(e + 14) << 10 | (unsigned)((fr * 2 - 1) * 1024);
}

void cg_literal(Buf *b, DType t, double v) {
  char d[64];
  switch (t) {
  case DT_F32:
  case DT_F64:
    if (t == DT_F32) v = (float)v;
    if (isnan(v)) {
      cg_puts(b, "NAN");
      return;
    }
    if (isinf(v)) {
      cg_puts(b, v > 0 ? "INFINITY" : "(-INFINITY)");
      return;
    }
    float_digits(d, sizeof d, v, t == DT_F32);
    cg_printf(b, "%s%s%s%s", d[0] == '-' ? "(" : "", d, t == DT_F32 ? "f" : "", d[0] == '-' ? ")" : "");
    return;
  case DT_I64: {
    /* v converted as a C cast would on x86-64 (and as PyTorch's casts do there):
     * truncated, NaN and out-of-range values give INT64_MIN; never UB here */
    if (!(v >= -9223372036854775808.0 && v < 9223372036854775808.0) || v == -9223372036854775808.0) {
      cg_puts(b, "INT64_MIN");
      return;
    }
    long long x = (long long)v;
    if (x >= -2147483647LL && x <= 2147483647LL)
      cg_printf(b, x < 0 ? "(%lld)" : "%lld", x);
    else
      cg_printf(b, "INT64_C(%lld)", x);
    return;
  }
  case DT_I32: {
    if (!(v > -2147483649.0 && v < 2147483648.0)) {   /* as for int64 */
      cg_puts(b, "INT32_MIN");
      return;
    }
    long long x = (long long)v;
    if (x == INT32_MIN) cg_puts(b, "INT32_MIN");
    else cg_printf(b, x < 0 ? "(%lld)" : "%lld", x);
    return;
  }
  case DT_BOOL:
    cg_puts(b, v != 0 ? "1" : "0");
    return;
  case DT_BF16:
  case DT_F16:
    cg_printf(b, "0x%04X", low_bits(t, v));
    return;
  default: BUG("bad dtype %d", (int)t);
  }
}

/* ---- c_expr templates ------------------------------------------------------- */

/* The <math.h> functions templates may call, by their double names; f32 code
 * calls the float versions (expf), so nothing is computed in double by accident. */
static const char *const libm_fns[] = {"exp",  "expm1", "exp2", "log",   "log1p", "log2",  "log10", "sqrt",
                                       "cbrt", "tanh",  "sinh", "cosh",  "atanh", "asinh", "acosh", "fabs",
                                       "erf",  "erfc",  "pow",  "cos",   "sin",   "tan",   "acos",  "asin",
                                       "atan", "atan2", "floor", "ceil", "round", "trunc", "rint",  "nearbyint",
                                       "fmod", "fmin",  "fmax", "copysign", "hypot", "remainder", "lgamma",
                                       "tgamma", NULL};
/* Type-generic macros of <math.h>, called as they are. */
static const char *const generic_fns[] = {"isnan", "isinf", "isfinite", "signbit", NULL};

static int in_list(const char *const *list, const char *s, size_t n) {
  for (int i = 0; list[i]; i++)
    if (strlen(list[i]) == n && !strncmp(list[i], s, n)) return 1;
  return 0;
}

void cg_expand(Buf *b, const char *tmpl, const char *const *ops, int nops, DType ct) {
  const char *s = tmpl;
  while (*s) {
    if (isalpha((unsigned char)*s) || *s == '_') {
      const char *e = s;
      while (isalnum((unsigned char)*e) || *e == '_') e++;
      size_t n = (size_t)(e - s);
      const char *after = e;
      while (*after == ' ') after++;
      if (n == 1 && *s >= 'A' && *s < 'A' + nops) {
        cg_puts(b, ops[*s - 'A']);
      } else if (*after == '(' && in_list(libm_fns, s, n)) {
        cg_printf(b, "%.*s%s", (int)n, s, ct == DT_F32 ? "f" : "");
      } else if (*after == '(' && !in_list(generic_fns, s, n) && strncmp(s, "ctc_", 4)) {
        BUG("c_expr template \"%s\" calls %.*s, which the emitter does not know (add it to libm_fns)", tmpl,
            (int)n, s);
      } else {
        cg_printf(b, "%.*s", (int)n, s);
      }
      s = e;
    } else if (isdigit((unsigned char)*s)) {
      const char *e = s;
      while (isdigit((unsigned char)*e) || *e == '.') e++;
      if (ir_dtype_is_float(ct)) cg_literal(b, ct, strtod(s, NULL));
      else cg_printf(b, "%.*s", (int)(e - s), s);
      s = e;
    } else {
      cg_printf(b, "%c", *s++);
    }
  }
}

/* ---- identifiers ------------------------------------------------------------ */

/* C keywords, and every name the generated code uses besides the model's. */
static const char *const reserved[] = {
    "auto", "break", "case", "char", "const", "continue", "default", "do", "double", "else", "enum",
    "extern", "float", "for", "goto", "if", "inline", "int", "long", "register", "restrict", "return",
    "short", "signed", "sizeof", "static", "struct", "switch", "typedef", "union", "unsigned", "void",
    "volatile", "while", "bool", "true", "false", "asm", "typeof",
    /* types, macros and library functions */
    "int64_t", "int32_t", "uint64_t", "uint32_t", "uintptr_t", "size_t", "NULL", "INT64_C", "INT64_MIN",
    "INT32_MIN", "INFINITY", "NAN", "isnan", "memcpy", "memset", "main", "errno", "exp", "expf", "log",
    "logf", "sqrt", "sqrtf", "tanh", "tanhf", "fabs", "fabsf", "erf", "erff", "pow", "powf", "cos", "cosf",
    "sin", "sinf", "floor", "floorf", "expm1", "expm1f", "log1p", "log1pf", "isinf", "isfinite", "signbit",
    /* locals of the generated entry functions */
    "A", "m", "batch", "i", "j", "k", "n", "o", "v", "acc", "ix", "xp", "yp", "nc", "oh", "ow", "kh", "kw", "ih", "iw",
    "jn", "j0", "i0", "i1", "i2", "i3", "i4", "i5", "i6", "i7", "r0", "r1", "r2", "r3", "r4", "r5", "r6",
    "r7", "h0", "h1", "w0", "w1", "cnt", "ha", "hb", "wa", "wb", "at", "mx", "gp", "dp", "d", "tp", "op", "grp",
    "s0", "s1", "s2", "s3", "s4", "s5", "s6", "s7", "ok", "uh0", "uh1", "uw0", "uw1", "lh0", "lh1", "lw0",
    "lw1", "xr0", "xr1", "gv",
    "s", "n0", "ns", "gd", "take", "gw", NULL};

void cg_ident(char *buf, size_t cap, const char *s) {
  size_t n = 0;
  if (!*s || isdigit((unsigned char)*s) || *s == '_') buf[n++] = 'v';
  if (*s == '_') buf[n++] = '_';
  for (; *s && n + 1 < cap; s++) buf[n++] = isalnum((unsigned char)*s) || *s == '_' ? *s : '_';
  buf[n] = 0;
}

static size_t str_hash(const char *s) {
  size_t h = 1469598103934665603u;
  for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211u;
  return h;
}

/* The slot of key in m (its key NULL if absent). */
static size_t map_slot(const StrMap *m, const char *key) {
  size_t i = str_hash(key) & (m->cap - 1);
  while (m->keys[i] && strcmp(m->keys[i], key)) i = (i + 1) & (m->cap - 1);
  return i;
}

static int *map_get(const StrMap *m, const char *key) {
  if (!m->cap) return NULL;
  size_t i = map_slot(m, key);
  return m->keys[i] ? &m->vals[i] : NULL;
}

static void map_put(StrMap *m, const char *key, int val) {
  if (2 * (m->n + 1) > m->cap) {   /* grow: load factor at most 1/2 */
    StrMap g = {0};
    g.cap = m->cap ? 2 * m->cap : 64;
    g.keys = calloc(g.cap, sizeof *g.keys);
    g.vals = calloc(g.cap, sizeof *g.vals);
    CHECK(g.keys && g.vals);
    for (size_t i = 0; i < m->cap; i++)
      if (m->keys[i]) {
        size_t j = map_slot(&g, m->keys[i]);
        g.keys[j] = m->keys[i], g.vals[j] = m->vals[i], g.n++;
      }
    free(m->keys);
    free(m->vals);
    *m = g;
  }
  size_t i = map_slot(m, key);
  if (!m->keys[i]) m->keys[i] = key, m->n++;
  m->vals[i] = val;
}

static void map_free(StrMap *m) {
  free(m->keys);
  free(m->vals);
  memset(m, 0, sizeof *m);
}

void cg_names_init(Names *ns, const char *prefix) {
  memset(ns, 0, sizeof *ns);
  ns->prefix = prefix;
}

static int taken(const Names *ns, const char *s) {
  for (int i = 0; reserved[i]; i++)
    if (!strcmp(reserved[i], s)) return 1;
  size_t n = strlen(s);   /* the math functions templates may call: exp and expf ... */
  if (in_list(libm_fns, s, n) || in_list(generic_fns, s, n) || (n > 1 && s[n - 1] == 'f' && in_list(libm_fns, s, n - 1)))
    return 1;
  return map_get(&ns->set, s) != NULL;
}

static int has_prefix(const char *s, const char *pre) { return !strncmp(s, pre, strlen(pre)); }

const char *cg_name(Names *ns, const char *hint) {
  char base[96], cand[128];
  cg_ident(base, sizeof base, hint);
  size_t pl = strlen(ns->prefix);
  /* File-global names: the runtime's, the generator's and the model's API. */
  if (has_prefix(base, "ctc_") || has_prefix(base, "CTC_") || has_prefix(base, "cblas") ||
      has_prefix(base, "Cblas") || (!strncmp(base, ns->prefix, pl) && base[pl] == '_')) {
    char t[sizeof base + 2];
    snprintf(t, sizeof t, "v_%s", base);
    snprintf(base, sizeof base, "%.*s", (int)sizeof base - 1, t);
  }
  snprintf(cand, sizeof cand, "%s", base);
  if (taken(ns, cand)) {
    /* names are never released, so every suffix below the remembered one is taken */
    int *next = map_get(&ns->next, base), k = next ? *next : 1;
    for (; snprintf(cand, sizeof cand, "%s_%d", base, k), taken(ns, cand); k++) {}
    size_t blen = strlen(base) + 1;
    char *key = malloc(blen);   /* freed with the used names */
    CHECK(key != NULL);
    memcpy(key, base, blen);
    if (next) free(key), *next = k + 1;
    else {
      if (ns->n == ns->cap) {
        ns->cap = ns->cap ? 2 * ns->cap : 64;
        ns->used = realloc(ns->used, sizeof(char *) * (size_t)ns->cap);
        CHECK(ns->used != NULL);
      }
      ns->used[ns->n++] = key;   /* owned here; not a name given out */
      map_put(&ns->next, key, k + 1);
    }
  }
  if (ns->n == ns->cap) {
    ns->cap = ns->cap ? 2 * ns->cap : 64;
    ns->used = realloc(ns->used, sizeof(char *) * (size_t)ns->cap);
    CHECK(ns->used != NULL);
  }
  size_t len = strlen(cand) + 1;
  char *s = malloc(len);
  CHECK(s != NULL);
  memcpy(s, cand, len);
  ns->used[ns->n++] = s;
  map_put(&ns->set, s, 1);
  return s;
}

int cg_name_given(const Names *ns, const char *s) { return map_get(&ns->set, s) != NULL; }

void cg_names_free(Names *ns) {
  for (int i = 0; i < ns->n; i++) free(ns->used[i]);
  free(ns->used);
  map_free(&ns->set);
  map_free(&ns->next);
  memset(ns, 0, sizeof *ns);
}

/* ---- emitted C read back as lines ------------------------------------------------ */

void cg_lines(const char *text, CgLines *l) {
  size_t nl = 1;
  for (const char *p = text; *p; p++) nl += *p == '\n';
  l->s = malloc(sizeof *l->s * nl);
  l->n = malloc(sizeof *l->n * nl);
  CHECK(l->s && l->n);
  l->len = 0;
  for (const char *p = text; *p;) {
    const char *e = strchr(p, '\n');
    l->s[l->len] = p;
    l->n[l->len++] = e ? (size_t)(e - p) : strlen(p);
    if (!e) break;
    p = e + 1;
  }
}

void cg_lines_free(CgLines *l) {
  free(l->s);
  free(l->n);
  memset(l, 0, sizeof *l);
}
