/* freestanding_c.c - the parts of a `--freestanding` model.c/.h (CgOptions.freestanding) that
 * differ from the hosted file emit_c.c writes: the prologue (no runtime, no OpenMP, no BLAS:
 * the helpers are written without those branches, kernels.c's Part, an option of the writer,
 * and no text is rewritten here), the check that the generated text calls nothing but
 * <string.h>'s memcpy/memset and the
 * math functions the header names, ctc's own math functions for `--no-libm`, the parameters
 * as const arrays for `--embed-weights` (flash) with the arena holding only activations, and
 * the header.
 *
 * With embedded weights the memory plan is the hosted one: its parameter region (the first
 * params_bytes of the arena) is replaced by one const array per parameter, and every
 * activation offset moves down by params_bytes, so the RAM arena is the activations' peak.
 *
 * --no-libm math (f32 only; a double-precision call, or one not listed here, is refused):
 * expf, tanhf and logf are kernels.c's ctc_exp_f32, ctc_tanh_f32 and ctc_log_f32 renamed, and erf and
 * log1p are its ctc_erf_f32 and ctc_log1p_f32 in every f32 file (float arithmetic: no double
 * anywhere, so a single-precision FPU needs no soft double helper); expm1f is Kahan's correction
 * on expf and logf; sqrtf is fdlibm's bit-by-bit square root (correctly rounded); fabsf,
 * copysignf, truncf, floorf and
 * nearbyintf are exact. These are the f32 functions ops.def's templates call. tests/test_embedded.py sweeps them against glibc
 * (the bounds in ulps are in docs/microcontrollers.md). */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>
#include "cg_int.h"

typedef long long ll;

/* ---- --no-libm math ------------------------------------------------------------------ */

static const char m_bits[] =
    "static inline uint32_t ctc_m_bits(float x) { uint32_t u; memcpy(&u, &x, sizeof u); return u; }\n"
    "static inline float ctc_m_float(uint32_t u) { float x; memcpy(&x, &u, sizeof x); return x; }\n";

static const char m_fabsf[] = "static inline float ctc_m_fabsf(float x) { return ctc_m_float(ctc_m_bits(x) & 0x7fffffffu); }\n";
static const char m_copysignf[] =
    "static inline float ctc_m_copysignf(float x, float y) {\n"
    "  return ctc_m_float((ctc_m_bits(x) & 0x7fffffffu) | (ctc_m_bits(y) & 0x80000000u));\n"
    "}\n";
static const char m_truncf[] =
    "static inline float ctc_m_truncf(float x) {\n"
    "  const uint32_t u = ctc_m_bits(x);\n"
    "  const int e = (int)(u >> 23 & 0xff) - 127;\n"
    "  if (e >= 23) return x;   /* integral, inf or NaN */\n"
    "  if (e < 0) return ctc_m_float(u & 0x80000000u);   /* |x| < 1: +-0 */\n"
    "  return ctc_m_float(u & ~(0x007fffffu >> e));\n"
    "}\n";
static const char m_floorf[] =
    "static inline float ctc_m_floorf(float x) { const float t = ctc_m_truncf(x); return x < t ? t - 1.0f : t; }\n";
static const char m_nearbyintf[] =
    "static inline float ctc_m_nearbyintf(float x) {   /* halves to even (needs FLT_EVAL_METHOD 0) */\n"
    "  const float ax = ctc_m_fabsf(x);\n"
    "  if (!(ax < 8388608.0f)) return x;   /* integral, inf or NaN */\n"
    "  return ctc_m_copysignf((ax + 8388608.0f) - 8388608.0f, x);\n"
    "}\n";
static const char m_expm1f[] =
    "static float ctc_m_expm1f(float x) {   /* Kahan: (u - 1) x / log(u), u = exp(x) */\n"
    "  if (x != x) return x;\n"
    "  const float u = ctc_m_expf(x);\n"
    "  if (u == 1.0f) return x;\n"
    "  if (u == INFINITY) return u;\n"
    "  const float um1 = u - 1.0f;\n"
    "  if (um1 == -1.0f) return -1.0f;\n"
    "  return um1 * (x / ctc_m_logf(u));\n"
    "}\n";
static const char m_sqrtf[] =
    "static float ctc_m_sqrtf(float x) {   /* fdlibm's e_sqrtf.c: bit by bit, correctly rounded */\n"
    "  int32_t ix = (int32_t)ctc_m_bits(x);\n"
    "  if ((ix & 0x7f800000) == 0x7f800000) return x * x + x;   /* NaN, inf; -inf: NaN */\n"
    "  if (ix <= 0) return (ix & 0x7fffffff) == 0 ? x : NAN;   /* +-0; negative */\n"
    "  int32_t m = ix >> 23;\n"
    "  if (m == 0) {   /* subnormal */\n"
    "    int32_t i = 0;\n"
    "    for (; (ix & 0x00800000) == 0; i++) ix *= 2;\n"
    "    m -= i - 1;\n"
    "  }\n"
    "  m -= 127;\n"
    "  ix = (ix & 0x007fffff) | 0x00800000;\n"
    "  if (m & 1) ix += ix;\n"
    "  m = (m - (m & 1)) / 2;\n"
    "  ix += ix;\n"
    "  int32_t q = 0, s = 0;\n"
    "  for (int32_t r = 0x01000000; r; r /= 2) {\n"
    "    const int32_t t = s + r;\n"
    "    if (t <= ix) {\n"
    "      s = t + r;\n"
    "      ix -= t;\n"
    "      q += r;\n"
    "    }\n"
    "    ix += ix;\n"
    "  }\n"
    "  if (ix != 0) q += q & 1;\n"
    "  return ctc_m_float((uint32_t)((q / 2) + 0x3f000000 + m * (1 << 23)));\n"
    "}\n";
/* One function of --no-libm: its name (the libm name), its text (defining ctc_m_<name>), and
 * the functions it calls (names of this table, which come before it). Order = emission order. */
typedef struct MathFn {
  const char *name;
  const char *text;   /* NULL: kernels.c's text under another name (expf, tanhf, logf) */
  const char *deps;   /* space-separated */
} MathFn;
static const MathFn math_fns[] = {
    {"fabsf", m_fabsf, ""},
    {"copysignf", m_copysignf, ""},
    {"truncf", m_truncf, ""},
    {"floorf", m_floorf, "truncf"},
    {"nearbyintf", m_nearbyintf, "fabsf copysignf"},
    {"expf", NULL, ""},
    {"tanhf", NULL, ""},
    {"logf", NULL, ""},
    {"expm1f", m_expm1f, "expf logf"},
    {"sqrtf", m_sqrtf, ""},
};
enum { NMATH = (int)(sizeof math_fns / sizeof math_fns[0]) };

/* ---- scanning the generated text -------------------------------------------------------- */

static const char *const c_words[] = {"if", "for", "while", "switch", "return", "sizeof", "_Alignof", "_Alignas",
                                      "_Generic", "_Static_assert", "defined", "__attribute__", NULL};
static const char *const string_fns[] = {"memcpy", "memset", "memmove", "memcmp", NULL};
/* the NEON intrinsics kernels.c's aarch64 GEMM and GEMV call (inline functions of <arm_neon.h>) */
static const char *const neon_fns[] = {"vdupq_n_f32", "vld1q_f32", "vst1q_f32", "vaddq_f32", "vfmaq_n_f32",
                                       "vfmaq_f32", "vgetq_lane_f32", "vtrn1q_f32", "vtrn2q_f32", "vtrn1q_f64", "vtrn2q_f64",
                                       "vreinterpretq_f64_f32", "vreinterpretq_f32_f64", NULL};
static const char *const std_macros[] = {"INT64_C", "UINT64_C", "INT32_C", "UINT32_C", "isnan", "isinf",
                                         "isfinite", "signbit", NULL};
/* libm's functions as the emitter may call them (cg_util.c's libm_fns, both precisions). */
static const char *const libm_names[] = {
    "exp", "expm1", "exp2", "log", "log1p", "log2", "log10", "sqrt", "cbrt", "tanh", "sinh", "cosh", "atanh", "asinh",
    "acosh", "fabs", "erf", "erfc", "pow", "cos", "sin", "tan", "acos", "asin", "atan", "atan2", "floor", "ceil",
    "round", "trunc", "rint", "nearbyint", "fmod", "fmin", "fmax", "copysign", "hypot", "remainder", "lgamma",
    "tgamma", NULL};

static int in_words(const char *const *list, const char *s, size_t n) {
  for (int i = 0; list[i]; i++)
    if (strlen(list[i]) == n && !strncmp(list[i], s, n)) return 1;
  return 0;
}

static int is_libm(const char *s, size_t n) {
  return in_words(libm_names, s, n) || (n > 1 && s[n - 1] == 'f' && in_words(libm_names, s, n - 1));
}

/* A growable list of names (malloc'ed copies). */
typedef struct Names1 {
  char **s;
  int n, cap;
} Names1;
static int names_has(const Names1 *l, const char *s, size_t n) {
  for (int i = 0; i < l->n; i++)
    if (strlen(l->s[i]) == n && !strncmp(l->s[i], s, n)) return 1;
  return 0;
}
static void names_add(Names1 *l, const char *s, size_t n) {
  if (names_has(l, s, n)) return;
  if (l->n == l->cap) {
    l->cap = l->cap ? 2 * l->cap : 16;
    l->s = realloc(l->s, sizeof *l->s * (size_t)l->cap);
    CHECK(l->s);
  }
  l->s[l->n] = malloc(n + 1);
  CHECK(l->s[l->n]);
  memcpy(l->s[l->n], s, n);
  l->s[l->n++][n] = 0;
}
static void names_free(Names1 *l) {
  for (int i = 0; i < l->n; i++) free(l->s[i]);
  free(l->s);
}

/* Identifiers followed by '(' in text, outside comments, strings and character constants:
 * `defs` gets those that a line starting in column 0 opens with (function definitions) and
 * the names of #define lines; `calls` the others. */
static void scan_calls(const char *text, Names1 *defs, Names1 *calls) {
  const char *s = text;
  int indented = 0, first_on_line = 1, directive = 0;
  for (int line_start = 1; *s;) {
    if (line_start) {   /* a new line: is it indented, a directive, a #define NAME? */
      line_start = 0;
      first_on_line = 1;
      indented = *s == ' ' || *s == '\t';
      directive = *s == '#';
      if (!strncmp(s, "#define", 7)) {
        const char *n = s + 7;
        while (*n == ' ') n++;
        size_t len = 0;
        while (isalnum((unsigned char)n[len]) || n[len] == '_') len++;
        if (len) names_add(defs, n, len);
      }
    }
    if (s[0] == '/' && s[1] == '*') {
      const char *e = strstr(s + 2, "*/");
      s = e ? e + 2 : s + strlen(s);
      continue;
    }
    if (s[0] == '/' && s[1] == '/') {
      s += strcspn(s, "\n");
      continue;
    }
    if (*s == '"' || *s == '\'') {
      char q = *s++;
      while (*s && *s != q) s += s[0] == '\\' && s[1] ? 2 : 1;
      if (*s) s++;
      continue;
    }
    if (*s == '\n') {
      s++;
      line_start = 1;
      continue;
    }
    if (isalpha((unsigned char)*s) || *s == '_') {
      const char *b = s;
      while (isalnum((unsigned char)*s) || *s == '_') s++;
      size_t n = (size_t)(s - b);
      const char *a = s;
      while (*a == ' ') a++;
      int member = b > text && (b[-1] == '.' || (b > text + 1 && b[-1] == '>' && b[-2] == '-'));
      if (*a == '(' && !directive && !member && !in_words(c_words, b, n)) {
        if (!indented && first_on_line) names_add(defs, b, n);   /* a function definition */
        else names_add(calls, b, n);
        first_on_line = 0;
      }
      continue;
    }
    if (isdigit((unsigned char)*s)) {   /* numbers: 1e5f, 0x1p3 are not identifiers */
      while (isalnum((unsigned char)*s) || *s == '.' || *s == '_') s++;
      continue;
    }
    s++;
  }
}

/* The libm functions the text calls, space-separated (sorted as found); with no_libm: whether ctc
 * has each. 0, or -1 after printing the first call that a freestanding file cannot make. */
int cg_fs_scan(const char *text, const CgOptions *opt, Buf *math) {
  Names1 defs = {0}, calls = {0};
  scan_calls(text, &defs, &calls);
  int rc = 0;
  for (int i = 0; i < calls.n && !rc; i++) {
    const char *c = calls.s[i];
    size_t n = strlen(c);
    if (names_has(&defs, c, n) || in_words(string_fns, c, n) || in_words(std_macros, c, n) ||
        in_words(neon_fns, c, n))
      continue;
    if (!is_libm(c, n)) {
      fprintf(stderr, "ctc: error: --freestanding: the generated code calls '%s', which needs ctc's runtime or the C "
                      "library (not freestanding)\n", c);
      rc = -1;
      break;
    }
    if (opt->no_libm) {
      int have = 0;
      for (int k = 0; k < NMATH && !have; k++) have = !strcmp(math_fns[k].name, c);
      if (!have) {
        fprintf(stderr, "ctc: error: --no-libm: the model needs '%s', which ctc has no implementation of (it has %s",
                c, math_fns[0].name);
        for (int k = 1; k < NMATH; k++) fprintf(stderr, ", %s", math_fns[k].name);
        fprintf(stderr, "); build without --no-libm to call the toolchain's libm%s\n",
                c[n - 1] != 'f' ? " (a double-precision call: normal-distributed random init calls sqrt, log and cos, "
                                  "which --embed-weights leaves out)" : "");
        rc = -1;
        break;
      }
    }
    cg_printf(math, "%s%s", math->len ? " " : "", c);
  }
  names_free(&defs);
  names_free(&calls);
  return rc;
}

/* ---- prologue -------------------------------------------------------------------------- */

static int listed(const char *list, const char *name) {
  size_t n = strlen(name);
  for (const char *s = list; s && *s;) {
    size_t k = strcspn(s, " ");
    if (k == n && !strncmp(s, name, n)) return 1;
    s += k;
    while (*s == ' ') s++;
  }
  return 0;
}

/* text with every "from" replaced by "to". */
static void put_renamed(Buf *b, const char *text, const char *from, const char *to) {
  size_t n = strlen(from);
  for (const char *s = text; *s;) {
    const char *e = strstr(s, from);
    if (!e) {
      cg_puts(b, s);
      break;
    }
    cg_printf(b, "%.*s%s", (int)(e - s), s, to);
    s = e + n;
  }
}

void cg_fs_prologue(Buf *b, const char *h_name, const char *math, const CgOptions *opt) {
  cg_printf(b, "#include \"%s\"\n\n", h_name);
  if (!opt->no_libm) {
    cg_printf(b, "#include <math.h>   /* %s%s */\n", math && *math ? "libm: " : "INFINITY, NAN (no libm function is called)",
              math ? math : "");
  } else {
    cg_puts(b, "/* --no-libm: ctc's own math functions (below); from <math.h>, only these macros */\n"
               "#if defined(__GNUC__) || defined(__clang__)\n"
               "#define INFINITY (__builtin_inff())\n#define NAN (__builtin_nanf(\"\"))\n"
               "#define isnan(x) __builtin_isnan(x)\n#define isinf(x) __builtin_isinf(x)\n"
               "#define isfinite(x) __builtin_isfinite(x)\n#define signbit(x) __builtin_signbit(x)\n"
               "#else\n#include <math.h>\n#endif\n");
  }
  cg_puts(b, "#include <stddef.h>\n#include <stdint.h>\n#include <string.h>\n\n");
  cg_puts(b, "#define CTC_OMP_FOR   /* freestanding: no OpenMP */\n\n");
  if (!opt->no_libm || !math || !*math) return;
  /* the functions used and those they call */
  unsigned char want[NMATH] = {0};
  for (int k = NMATH - 1; k >= 0; k--) {
    if (!listed(math, math_fns[k].name) && !want[k]) continue;
    want[k] = 1;
    for (int j = 0; j < k; j++)
      if (listed(math_fns[k].deps, math_fns[j].name)) want[j] = 1;
  }
  cg_puts(b, "/* ---- math (--no-libm; accuracy: ctc's docs/microcontrollers.md) ---- */\n");
  cg_puts(b, m_bits);
  int fma = 0;   /* CTC_FMA_F32, which the texts of kernels.c use, once */
  for (int k = 0; k < NMATH; k++) fma |= want[k] && !math_fns[k].text;
  if (fma) cg_puts(b, cg_fma_text());
  for (int k = 0; k < NMATH; k++) {
    if (!want[k]) continue;
    const MathFn *m = &math_fns[k];
    if (!strcmp(m->name, "expf")) {   /* ctc_exp_f32's core, then ctc_exp_f32 renamed */
      cg_puts(b, cg_expk_f32_text());
      put_renamed(b, cg_exp_f32_text(), "ctc_exp_f32", "ctc_m_expf");
    } else if (!strcmp(m->name, "tanhf")) put_renamed(b, cg_tanh_f32_text(), "ctc_tanh_f32", "ctc_m_tanhf");
    else if (!strcmp(m->name, "logf")) put_renamed(b, cg_log_f32_text(), "ctc_log_f32", "ctc_m_logf");
    else cg_puts(b, m->text);
  }
  for (int k = 0; k < NMATH; k++)
    if (listed(math, math_fns[k].name)) cg_printf(b, "#define %s ctc_m_%s\n", math_fns[k].name, math_fns[k].name);
  cg_puts(b, "\n");
}

/* ---- embedded weights ------------------------------------------------------------------ */

/* Whether an entry reads parameter i (an operand or an output): others get no array. */
int cg_fs_param_used(const Program *p, int i) {
  for (int fi = 0; fi < p->funcs.len; fi++) {
    const Func *f = p->funcs.data[fi];
    for (int v = 0; v < f->values.len; v++) {
      if (f->values.data[v].kind != V_PARAM || f->values.data[v].index != i) continue;
      for (int k = 0; k < f->insts.len; k++)
        for (int a = 0; a < f->insts.data[k].nargs; a++)
          if (f->insts.data[k].args[a] == v) return 1;
      for (int k = 0; k < f->outputs.len; k++)
        if (f->outputs.data[k] == v) return 1;
    }
  }
  return 0;
}

void cg_fs_weights(Buf *b, const Program *p, const void *const *embed) {
  cg_puts(b, "/* ---- parameters (--embed-weights): const arrays, in flash ---- */\n\n");
  for (int i = 0; i < p->params.len; i++) {
    const Param *pr = &p->params.data[i];
    const Type *t = &pr->type;
    int64_t n = ir_numel(t);
    char pn[256], tb[300];
    if (!cg_fs_param_used(p, i)) {
      cg_printf(b, "/* %s %s: no entry reads it */\n\n", cg_comment_text(pn, sizeof pn, pr->name),
                ir_type_str(t, tb, sizeof tb));
      continue;
    }
    cg_printf(b, "/* %s %s */\n", cg_comment_text(pn, sizeof pn, pr->name), ir_type_str(t, tb, sizeof tb));
    cg_printf(b, "static const %s ctc_w_%d[%lld] = {", cg_ctype(t->dtype), i, (ll)n);
    const unsigned char *d = embed[i];
    for (int64_t k = 0; k < n; k++) {
      cg_puts(b, k % 8 ? " " : "\n  ");
      switch (t->dtype) {
      case DT_F32: {
        float v;
        memcpy(&v, d + 4 * k, 4);
        cg_literal(b, DT_F32, v);
        break;
      }
      case DT_F64: {
        double v;
        memcpy(&v, d + 8 * k, 8);
        cg_literal(b, DT_F64, v);
        break;
      }
      case DT_I64: {
        int64_t v;
        memcpy(&v, d + 8 * k, 8);
        if (v == INT64_MIN) cg_puts(b, "INT64_MIN");
        else cg_printf(b, v < 0 ? "(INT64_C(%lld))" : "INT64_C(%lld)", (ll)v);
        break;
      }
      case DT_I32: {
        int32_t v;
        memcpy(&v, d + 4 * k, 4);
        cg_literal(b, DT_I32, v);
        break;
      }
      case DT_BF16:
      case DT_F16: {   /* the bits (a .bfloat16() / .half() model's storage) */
        uint16_t v;
        memcpy(&v, d + 2 * k, 2);
        cg_printf(b, "0x%04X", (unsigned)v);
        break;
      }
      case DT_BOOL: cg_printf(b, "%d", (int)d[k]); break;
      default: BUG("--embed-weights: a %s parameter", ir_dtype_name(t->dtype));
      }
      if (k + 1 < n) cg_puts(b, ",");
    }
    cg_puts(b, "\n};\n\n");
  }
}

int64_t cg_c_weight_bytes(const Program *p) {
  int64_t n = 0;
  for (int i = 0; i < p->params.len; i++)
    if (cg_fs_param_used(p, i))
      n += ir_numel(&p->params.data[i].type) * (int64_t)ir_dtype_size(p->params.data[i].type.dtype);
  return n;
}

int cg_fs_addr(Buf *b, const Program *p, const MemPlan *mp, const CgOptions *opt, int64_t off) {
  if (!opt->embed) {
    cg_printf(b, "A + %lld", (ll)off);
    return 1;
  }
  if (off >= mp->params_bytes) {
    cg_printf(b, "A + %lld", (ll)(off - mp->params_bytes));
    return 1;
  }
  for (int i = p->params.len - 1; i >= 0; i--)
    if (mp->param_offset[i] <= off) {
      int64_t d = off - mp->param_offset[i];
      if (d) cg_printf(b, "(const unsigned char *)ctc_w_%d + %lld", i, (ll)d);
      else cg_printf(b, "ctc_w_%d", i);
      return 0;
    }
  BUG("codegen_c: offset %lld is in no parameter", (ll)off);
}

/* ---- refusals ---------------------------------------------------------------------------- */

int cg_fs_refuse(const Program *p, const CgOptions *opt) {
  const char *what = opt->profile ? "--profile (it times kernels with the runtime's clock)"
                     : opt->anomaly ? "--anomaly (its reports need the runtime)"
                     : p->distributed ? "a distributed build (MPI)" : NULL;
  if (what) {
    fprintf(stderr, "ctc: error: --freestanding cannot have %s\n", what);
    return -1;
  }
  for (int i = 0; i < p->funcs.len && opt->embed; i++)
    if (p->funcs.data[i]->updates.len) {
      fprintf(stderr, "ctc: error: --embed-weights: entry '%s' updates parameters, which are const arrays in flash "
                      "here; compile the inference entries only (e.g. --entry forward), or leave out --embed-weights\n",
              p->funcs.data[i]->name);
      return -1;
    }
  return 0;
}

/* ---- init and header --------------------------------------------------------------------- */

void cg_fs_init_embedded(Buf *b, const char *P, const char *U) {
  cg_printf(b, "size_t %s_arena_bytes(void) { return %s_ARENA_BYTES; }\n\n", P, U);
  cg_printf(b, "int %s_init(%s_t *m, void *arena, size_t bytes) {\n", P, P);
  cg_puts(b, "  if (!m || !arena) return CTC_ERR_ARG;\n");
  cg_printf(b, "  if (bytes < %s_ARENA_BYTES || (uintptr_t)arena %% 64 != 0) return CTC_ERR_ARENA;\n", U);
  cg_puts(b, "  m->arena = (unsigned char *)arena;   /* activations only: the parameters are const (flash) */\n");
  cg_puts(b, "  m->arena_bytes = bytes;\n  return CTC_OK;\n}\n\n");
}

void cg_fs_header(FILE *h, const FsHeader *x) {
  const char *P = x->prefix, *U = x->upper;
  const Program *p = x->p;
  const MemPlan *mp = x->mp;
  int64_t ram = x->opt->embed ? mp->arena_bytes - mp->params_bytes : mp->arena_bytes;
  fprintf(h, "/* %s.h - generated by ctc from %s (class %s). Do not edit.\n *\n", x->stem, x->src, x->cls);
  fprintf(h, " * Freestanding (ctc --freestanding): %s.c needs only <stddef.h>, <stdint.h>, <string.h>\n"
             " * (<arm_neon.h> on aarch64, for ctc's NEON GEMM)\n", x->stem);
  fprintf(h, " * and the math functions: %s%s.\n", x->math && *x->math ? x->math : "none",
          !x->math || !*x->math ? "" : x->opt->no_libm ? " (ctc's own, in the file: --no-libm)" : " (libm)");
  fprintf(h, " * No file I/O, no allocation, no OpenMP, no BLAS; the caller passes the arena.\n");
  if (x->opt->embed)
    fprintf(h, " * Weights: const arrays in %s.c (%lld bytes, flash); the arena holds the activations only.\n", x->stem,
            (ll)cg_c_weight_bytes(p));
  else
    fprintf(h, " * Weights: in the arena (%lld bytes), initialised by %s_init as the model does; another\n"
               " * source is copied to the offsets below.\n", (ll)mp->params_bytes, P);
  fprintf(h, " */\n#ifndef CTC_GENERATED_%s_H\n#define CTC_GENERATED_%s_H\n\n", U, U);
  fprintf(h, "#include <stddef.h>\n#include <stdint.h>\n\n");
  fprintf(h, "#ifdef __cplusplus\nextern \"C\" {\n#endif\n\n");
  fprintf(h, "#ifndef CTC_RT_H   /* the status codes, with the values of ctc_rt.h's ctc_status */\n"
             "enum { CTC_OK = 0, CTC_ERR_SHAPE = 4, CTC_ERR_ARENA = 6, CTC_ERR_ARG = 7, CTC_ERR_INDEX = 11 };\n#endif\n\n");
  if (x->opt->embed) {
    fprintf(h, "/* RAM the model needs: the peak of the activations of the running entry. */\n");
    fprintf(h, "#define %s_ARENA_BYTES ((size_t)%lld)\n", U, (ll)ram);
    fprintf(h, "/* Flash the weights take (const arrays). */\n#define %s_WEIGHT_BYTES ((size_t)%lld)\n\n", U,
            (ll)cg_c_weight_bytes(p));
  } else {
    fprintf(h, "/* Arena bytes the model needs: parameters (%lld), then the activations of\n"
               " * the running entry (%lld). */\n", (ll)mp->params_bytes, (ll)(mp->arena_bytes - mp->params_bytes));
    fprintf(h, "#define %s_ARENA_BYTES ((size_t)%lld)\n", U, (ll)ram);
    fprintf(h, "/* Parameters in the arena: byte offset, state_dict name, type\n");
    for (int i = 0; i < p->params.len; i++) {
      char pn[256], tb[300];
      fprintf(h, " *   %10lld  %s %s\n", (ll)mp->param_offset[i], cg_comment_text(pn, sizeof pn, p->params.data[i].name),
              ir_type_str(&p->params.data[i].type, tb, sizeof tb));
    }
    fprintf(h, " */\n\n");
  }
  fprintf(h, "typedef struct %s_t {\n  unsigned char *arena;  /* %s */\n  size_t arena_bytes;\n} %s_t;\n\n", P,
          x->opt->embed ? "activations" : "parameters, then activations", P);
  fprintf(h, "size_t %s_arena_bytes(void);\n", P);
  fprintf(h, "/* Takes `arena` (at least %s_ARENA_BYTES bytes, 64-byte aligned; nothing is allocated)%s. */\n", U,
          x->opt->embed ? "" : "\n * and initialises the parameters as the model does (seeded RNG)");
  fprintf(h, "int %s_init(%s_t *m, void *arena, size_t bytes);\n\n", P, P);
  fprintf(h, "/* Entry points. Outputs are written to caller storage that must not overlap\n"
             " * the inputs. Every function returns CTC_OK or an error code. */\n");
  for (int fi = 0; fi < p->funcs.len; fi++) fprintf(h, "/* %s */\n%s;\n", x->doc[fi].s, x->sig[fi].s);
  fprintf(h, "\n#ifdef __cplusplus\n}\n#endif\n#endif\n");
}
