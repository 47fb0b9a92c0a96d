/* elem.c - what an elementwise op computes, stated once: ops.def's C template,
 * or for integer compute types the form that wraps instead of overflowing, and an
 * evaluator of that same text on host numbers.
 *
 * The C emitter prints the text ir_elem_template returns (codegen_c/emit_ops.c,
 * which may only swap in a faster implementation of the same function, such as
 * its vectorisable expf); the reference evaluator (interp.c: compile-time
 * folding, the decode evaluator, int8 calibration) evaluates it here, in the
 * compute type's C arithmetic: float operations rounded to float, libm's float
 * functions in f32 code (as the emitter renames them), integers wrapping modulo
 * their width, the usual arithmetic conversions and promotions of C. The text
 * is a C expression over the operands A, B, C: numbers, the operators of C
 * (ternary, logical, bitwise, comparison, shift, arithmetic, unary, casts to the
 * few types the templates use), calls of <math.h> functions and of the ctc_
 * helpers that the generated file defines (codegen_c/kernels.c; their meaning is
 * restated below and tests/test_interp.py holds the two to each other). */
#include <ctype.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "ir.h"

/* ---- the text -------------------------------------------------------------------- */

const char *ir_elem_template(Op op, DType ct) {
  if (ct == DT_I64 || ct == DT_I32) {
    int w = ct == DT_I64;
    switch (op) {
    case IR_NEG: return w ? "(int64_t)(0u - (uint64_t)A)" : "(int32_t)(0u - (uint32_t)A)";
    case IR_ABS: return w ? "(A < 0 ? (int64_t)(0u - (uint64_t)A) : A)" : "(A < 0 ? (int32_t)(0u - (uint32_t)A) : A)";
    case IR_ADD: return w ? "(int64_t)((uint64_t)A + (uint64_t)B)" : "(int32_t)((uint32_t)A + (uint32_t)B)";
    case IR_SUB: return w ? "(int64_t)((uint64_t)A - (uint64_t)B)" : "(int32_t)((uint32_t)A - (uint32_t)B)";
    case IR_MUL: return w ? "(int64_t)((uint64_t)A * (uint64_t)B)" : "(int32_t)((uint32_t)A * (uint32_t)B)";
    case IR_POW: return w ? "ctc_ipow_i64(A, B)" : "ctc_ipow_i32(A, B)";
    /* truncating division (div's rounding_mode='trunc'), never a trap: x / 0
     * gives 0 (PyTorch raises) and INT_MIN / -1 wraps */
    case IR_DIV: return w ? "(B == 0 ? 0 : B == -1 ? (int64_t)(0u - (uint64_t)A) : A / B)"
                          : "(B == 0 ? 0 : B == -1 ? (int32_t)(0u - (uint32_t)A) : A / B)";
    case IR_FMOD: return "(B == 0 || B == -1 ? 0 : A % B)";
    case IR_ROUND: case IR_TRUNC: return "A";
    /* the count modulo the width, no UB: unsigned left shift, sign-filling right shift */
    case IR_SHL: return w ? "(int64_t)((uint64_t)A << (B & 63))" : "(int32_t)((uint32_t)A << (B & 31))";
    case IR_SHR: return w ? "(A < 0 ? ~(~A >> (B & 63)) : A >> (B & 63))" : "(A < 0 ? ~(~A >> (B & 31)) : A >> (B & 31))";
    default: break;
    }
  }
  if (ct == DT_BOOL && op == IR_BIT_NOT) return "(unsigned char)!A";
  if (op == IR_ROUND_BF16)   /* codegen_c/kernels.c writes them; the evaluator's call() computes them */
    return ct == DT_F32 ? "ctc_bf16_f32(A)" : ct == DT_F64 ? "ctc_bf16_f64(A)" : NULL;
  if (op == IR_ROUND_F16) return ct == DT_F32 ? "ctc_f16_f32(A)" : ct == DT_F64 ? "ctc_f16_f64(A)" : NULL;
  if (op == IR_REMAINDER || op == IR_FLOORDIV) {
    /* the helpers below, which the generated file defines once per dtype (kernels.c) */
    static const char *const names[2][DT_COUNT] = {
        [0] = {[DT_F32] = "ctc_remainder_f32(A, B)", [DT_F64] = "ctc_remainder_f64(A, B)",
               [DT_I64] = "ctc_remainder_i64(A, B)", [DT_I32] = "ctc_remainder_i32(A, B)"},
        [1] = {[DT_F32] = "ctc_floordiv_f32(A, B)", [DT_F64] = "ctc_floordiv_f64(A, B)",
               [DT_I64] = "ctc_floordiv_i64(A, B)", [DT_I32] = "ctc_floordiv_i32(A, B)"}};
    return names[op == IR_FLOORDIV][ct];
  }
  if (!ir_dtype_is_float(ct)) {
    if (op == IR_MAX) return "(A > B ? A : B)";
    if (op == IR_MIN) return "(A < B ? A : B)";
  }
  return ir_ops[op].c_expr;
}

/* The ctc_ helpers that templates call, each one C expression of its parameters A, B, C
 * (of the compute type), for floats, i64 and i32; a call of another helper (one before it,
 * or itself) names it without the dtype suffix: the same dtype. codegen_c/kernels.c writes each as
 * `static T ctc_NAME_<dt>(T a, T b, ...) { return TEXT; }`; the evaluator below evaluates
 * the same TEXT. Python's % and // as PyTorch 1.13's CPU kernels compute them
 * (BinaryOpsKernel.cpp): remainder is fmod plus the divisor where the signs differ; floor
 * division is computed from fmod so that it agrees with it (floor(a / b) would round
 * differently near integers). Integers: exact, and never a trap (PyTorch raises on
 * division by zero; these give 0, and INT_MIN / -1 wraps). */
static const struct {
  const char *name;
  int nargs;
  const char *fl, *i64, *i32;
} helpers[] = {
    /* the remainder A of a division by B, moved to B's sign */
    {"remfix", 2, "(A != 0 && (B < 0) != (A < 0) ? A + B : A)", "(A != 0 && (B < 0) != (A < 0) ? A + B : A)",
     "(A != 0 && (B < 0) != (A < 0) ? A + B : A)"},
    {"remainder", 2, "ctc_remfix(fmod(A, B), B)", "(B == 0 || B == -1 ? 0 : ctc_remfix(A % B, B))",
     "(B == 0 || B == -1 ? 0 : ctc_remfix(A % B, B))"},
    /* floats: C = (A - fmod(A, B)) / B, an integer up to rounding, rounded to the nearest */
    {"floorround", 3, "(C == 0 ? copysign(0, A / B) : C - floor(C) > 0.5 ? floor(C) + 1 : floor(C))", NULL, NULL},
    /* A // B from C = fmod(A, B) (integers: A % B) */
    {"floordivm", 3, "ctc_floorround(A, B, C != 0 && (B < 0) != (C < 0) ? (A - C) / B - 1 : (A - C) / B)",
     "(C != 0 && (B < 0) != (C < 0) ? A / B - 1 : A / B)", "(C != 0 && (B < 0) != (C < 0) ? A / B - 1 : A / B)"},
    {"floordiv", 2, "(B == 0 ? A / B : ctc_floordivm(A, B, fmod(A, B)))",
     "(B == 0 ? 0 : B == -1 ? (int64_t)(0u - (uint64_t)A) : ctc_floordivm(A, B, A % B))",
     "(B == 0 ? 0 : B == -1 ? (int32_t)(0u - (uint32_t)A) : ctc_floordivm(A, B, A % B))"},
    /* integer pow as PyTorch's powi: exact modulo the width by squaring (it calls itself on
     * A * A and B / 2: at most 64 deep); a negative exponent gives 0 except for bases 1, -1 */
    {"ipow", 2, NULL,
     "(B < 0 ? (A == 1 ? 1 : A == -1 ? ((B & 1) ? -1 : 1) : 0) : B == 0 ? 1 : (int64_t)((uint64_t)((B & 1) ? A : 1) "
     "* (uint64_t)ctc_ipow((int64_t)((uint64_t)A * (uint64_t)A), B >> 1)))",
     "(B < 0 ? (A == 1 ? 1 : A == -1 ? ((B & 1) ? -1 : 1) : 0) : B == 0 ? 1 : (int32_t)((uint32_t)((B & 1) ? A : 1) "
     "* (uint32_t)ctc_ipow((int32_t)((uint32_t)A * (uint32_t)A), B >> 1)))"},
};

const char *ir_elem_helper(int k, DType ct, const char **text, int *nargs) {
  if (k < 0 || k >= (int)(sizeof helpers / sizeof helpers[0])) return NULL;
  *text = ir_dtype_is_float(ct) ? helpers[k].fl : ct == DT_I64 ? helpers[k].i64 : ct == DT_I32 ? helpers[k].i32 : NULL;
  *nargs = helpers[k].nargs;
  return helpers[k].name;
}

/* round_bf16 (ops.def): x (as a float: a double rounds to float first) rounded to
 * bfloat16 as c10::BFloat16's round_to_nearest_even, the text of kernels.c's ctc_bf16_f32 */
double ir_round_bf16(double x) {
  float f = (float)x;
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  if ((u << 1) > 0xff000000u) return x;   /* NaN */
  u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
  memcpy(&f, &u, sizeof f);
  return f;
}

/* round_f16 (ops.def): x (as a float) rounded to IEEE binary16, nearest with ties to even,
 * as c10::Half's conversion; the text of kernels.c's ctc_f16_f32 */
double ir_round_f16(double x) {
  float f = (float)x;
  uint32_t u, a;
  memcpy(&u, &f, sizeof u);
  a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return x;   /* NaN */
  if (a >= 0x477ff000u) a = 0x7f800000u;   /* 65520 and above: inf */
  else if (a >= 0x38800000u) a = (a + 0xfffu + ((a >> 13) & 1u)) & ~0x1fffu;   /* normal: 10 fraction bits */
  else {   /* subnormal: a multiple of 2^-24 */
    int d = 126 - (int)(a >> 23);
    uint32_t m = (a & 0x7fffffu) | 0x800000u, q = 0;
    if (a >> 23 && d < 25) {
      uint32_t rem = m & ((1u << d) - 1), half = 1u << (d - 1);
      q = m >> d;
      q += rem > half || (rem == half && (q & 1u));
    }
    f = (float)q * 0x1p-24f;
    memcpy(&a, &f, sizeof a);
  }
  u = (u & 0x80000000u) | a;
  memcpy(&f, &u, sizeof f);
  return f;
}

DType ir_elem_compute_type(Op op, DType arg0, DType res) {
  return op == IR_CAST || (op >= IR_CMP_EQ && op <= IR_CMP_GE) ? arg0 : res;
}

/* ---- values of C's arithmetic ------------------------------------------------------ */

typedef enum { CK_I32, CK_U32, CK_I64, CK_U64, CK_F32, CK_F64 } CKind;
typedef struct CVal {
  CKind k;
  uint64_t u;   /* integers: the bits (sign-extended for signed kinds) */
  double d;     /* floats (f32: a float's value) */
} CVal;

static int is_fl(CKind k) { return k >= CK_F32; }
static int is_signed(CKind k) { return k == CK_I32 || k == CK_I64; }
static int width(CKind k) { return k == CK_I32 || k == CK_U32 ? 32 : 64; }

/* the integer value u reduced to kind k (modulo its width, as C's conversions to
 * unsigned types, and as x86-64's to signed ones) */
static CVal mk_int(CKind k, uint64_t u) {
  if (width(k) == 32) u = is_signed(k) ? (uint64_t)(int64_t)(int32_t)(uint32_t)u : (uint32_t)u;
  return (CVal){k, u, 0};
}
static CVal mk_fl(CKind k, double d) { return (CVal){k, 0, k == CK_F32 ? (double)(float)d : d}; }

static double as_double(CVal v) {
  return is_fl(v.k) ? v.d : is_signed(v.k) ? (double)(int64_t)v.u : (double)v.u;
}

/* v converted to kind k; a float out of an integer's range gives the x86-64
 * result (the type's minimum), as the generated code's float_to_int does */
static CVal conv(CVal v, CKind k) {
  if (is_fl(k)) return mk_fl(k, as_double(v));
  if (!is_fl(v.k)) return mk_int(k, v.u);
  double d = v.d;
  if (k == CK_I64) return mk_int(k, d >= -9223372036854775808.0 && d < 9223372036854775808.0 ? (uint64_t)(int64_t)d
                                                                                             : (uint64_t)INT64_MIN);
  if (k == CK_I32) return mk_int(k, d > -2147483649.0 && d < 2147483648.0 ? (uint64_t)(int64_t)d : (uint64_t)INT32_MIN);
  if (k == CK_U32) return mk_int(k, d > -1.0 && d < 4294967296.0 ? (uint64_t)d : 0);
  return mk_int(k, d > -1.0 && d < 18446744073709551616.0 ? (uint64_t)d : 0);
}

/* C's usual arithmetic conversions: the common kind of two operands */
static CKind common(CKind a, CKind b) {
  if (a == CK_F64 || b == CK_F64) return CK_F64;
  if (a == CK_F32 || b == CK_F32) return CK_F32;
  int ra = width(a), rb = width(b);
  if (is_signed(a) == is_signed(b)) return ra >= rb ? a : b;
  CKind s = is_signed(a) ? a : b, u = is_signed(a) ? b : a;
  if (width(u) >= width(s)) return u;
  return s;   /* i64 holds every u32 */
}

static CKind kind_of(DType t) {
  switch (t) {
  case DT_F32: return CK_F32;
  case DT_F64: return CK_F64;
  case DT_I64: return CK_I64;
  case DT_BF16: case DT_F16: return CK_F32;   /* storage of float numbers (only cast reads them) */
  default: return CK_I32;   /* i32, and bool (unsigned char), promoted */
  }
}

static int truth(CVal v) { return is_fl(v.k) ? v.d != 0 : v.u != 0; }
static CVal boolv(int b) { return mk_int(CK_I32, (uint64_t)(b != 0)); }

/* ---- the evaluator ------------------------------------------------------------------- */

typedef struct Ev {
  const char *s;     /* the text still to read */
  DType ct;          /* the compute type: numbers are its literals, libm its functions */
  const CVal *ops;   /* A, B, C */
  int nops;
  int bad;           /* set by anything this evaluator does not know or that C leaves undefined */
} Ev;

static void skip(Ev *e) {
  while (*e->s == ' ') e->s++;
}
static int eat(Ev *e, const char *tok) {
  skip(e);
  size_t n = strlen(tok);
  if (strncmp(e->s, tok, n)) return 0;
  /* '<' is not '<<' or '<=', '&' not '&&', '|' not '||', '=' never alone */
  if (n == 1 && strchr("<>&|", tok[0]) && (e->s[1] == tok[0] || e->s[1] == '=')) return 0;
  if (n == 1 && strchr("!", tok[0]) && e->s[1] == '=') return 0;
  e->s += n;
  return 1;
}

static CVal expr(Ev *e, int live);

/* the kind of a cast's type name at e->s ("(int64_t)"), or -1 */
static int cast_kind(Ev *e) {
  static const struct { const char *name; CKind k; } types[] = {
      {"(int64_t)", CK_I64}, {"(int32_t)", CK_I32}, {"(uint64_t)", CK_U64}, {"(uint32_t)", CK_U32},
      {"(unsigned char)", CK_I32}, {"(float)", CK_F32}, {"(double)", CK_F64}};
  skip(e);
  for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
    if (!strncmp(e->s, types[i].name, strlen(types[i].name))) {
      e->s += strlen(types[i].name);
      return (int)types[i].k + (i == 4 ? 100 : 0);   /* unsigned char: 8 bits, then promoted to int */
    }
  return -1;
}

/* A call of helper ctc_<name>[_<dt>] (without the suffix: the caller's compute type):
 * its text evaluated on the arguments converted to its dtype, the result to its dtype. */
static CVal helper_call(Ev *e, const char *name, size_t n, const CVal *a, int na) {
  static const struct { const char *sfx; DType dt; } sfx[] = {
      {"_f32", DT_F32}, {"_f64", DT_F64}, {"_i64", DT_I64}, {"_i32", DT_I32}};
  DType dt = e->ct;
  for (size_t i = 0; i < sizeof sfx / sizeof sfx[0]; i++)
    if (n > 4 && !strncmp(name + n - 4, sfx[i].sfx, 4)) n -= 4, dt = sfx[i].dt;
  const char *hname, *text;
  int nargs;
  for (int k = 0; (hname = ir_elem_helper(k, dt, &text, &nargs)); k++) {
    if (strlen(hname) != n || strncmp(hname, name, n)) continue;
    if (!text || na != nargs) break;
    CVal args[3];
    for (int i = 0; i < na; i++) args[i] = conv(a[i], kind_of(dt));
    Ev h = {text, dt, args, na, 0};
    CVal v = expr(&h, 1);
    skip(&h);
    if (h.bad || *h.s) break;
    return conv(v, kind_of(dt));
  }
  e->bad = 1;
  return boolv(0);
}

static CVal call(Ev *e, const char *name, size_t n, CVal *a, int na) {
  CKind fk = e->ct == DT_F32 ? CK_F32 : CK_F64;
#define IS(str) (n == strlen(str) && !strncmp(name, str, n))
  if (IS("isnan")) return boolv(isnan(as_double(a[0])));
  if (IS("isinf")) return boolv(isinf(as_double(a[0])));
  if (IS("isfinite")) return boolv(isfinite(as_double(a[0])));
  if (IS("signbit")) return boolv(signbit(as_double(a[0])));
  if ((IS("ctc_bf16_f32") || IS("ctc_bf16_f64")) && na == 1) return mk_fl(fk, ir_round_bf16(as_double(a[0])));
  if ((IS("ctc_f16_f32") || IS("ctc_f16_f64")) && na == 1) return mk_fl(fk, ir_round_f16(as_double(a[0])));
  if (n > 4 && !strncmp(name, "ctc_", 4)) return helper_call(e, name + 4, n - 4, a, na);
  /* <math.h>, in float for f32 code (the emitter writes expf there) */
  double x = na > 0 ? conv(a[0], fk).d : 0, y = na > 1 ? conv(a[1], fk).d : 0;
  int f = fk == CK_F32;
  struct { const char *name; double (*d1)(double); float (*f1)(float); } un[] = {
      {"exp", exp, expf}, {"expm1", expm1, expm1f}, {"exp2", exp2, exp2f}, {"log", log, logf},
      {"log1p", log1p, log1pf}, {"log2", log2, log2f}, {"log10", log10, log10f}, {"sqrt", sqrt, sqrtf},
      {"cbrt", cbrt, cbrtf}, {"tanh", tanh, tanhf}, {"sinh", sinh, sinhf}, {"cosh", cosh, coshf},
      {"atanh", atanh, atanhf}, {"asinh", asinh, asinhf}, {"acosh", acosh, acoshf}, {"fabs", fabs, fabsf},
      {"erf", erf, erff}, {"erfc", erfc, erfcf}, {"cos", cos, cosf}, {"sin", sin, sinf}, {"tan", tan, tanf},
      {"acos", acos, acosf}, {"asin", asin, asinf}, {"atan", atan, atanf}, {"floor", floor, floorf},
      {"ceil", ceil, ceilf}, {"round", round, roundf}, {"trunc", trunc, truncf}, {"rint", rint, rintf},
      {"nearbyint", nearbyint, nearbyintf}, {"lgamma", lgamma, lgammaf}, {"tgamma", tgamma, tgammaf}};
  for (size_t i = 0; i < sizeof un / sizeof un[0]; i++)
    if (IS(un[i].name) && na == 1) return mk_fl(fk, f ? (double)un[i].f1((float)x) : un[i].d1(x));
  struct { const char *name; double (*d2)(double, double); float (*f2)(float, float); } bin[] = {
      {"pow", pow, powf}, {"atan2", atan2, atan2f}, {"fmod", fmod, fmodf}, {"fmin", fmin, fminf},
      {"fmax", fmax, fmaxf}, {"copysign", copysign, copysignf}, {"hypot", hypot, hypotf},
      {"remainder", remainder, remainderf}};
  for (size_t i = 0; i < sizeof bin / sizeof bin[0]; i++)
    if (IS(bin[i].name) && na == 2) return mk_fl(fk, f ? (double)bin[i].f2((float)x, (float)y) : bin[i].d2(x, y));
#undef IS
  e->bad = 1;
  return boolv(0);
}

/* primary = number | A | B | C | name "(" expr ("," expr)* ")" | "(" expr ")" */
static CVal primary(Ev *e, int live) {
  skip(e);
  const char *s = e->s;
  if (isdigit((unsigned char)*s)) {
    char *end;
    double d = strtod(s, &end);
    int is_float_lit = 0;
    for (const char *p = s; p < end; p++) is_float_lit |= *p == '.' || *p == 'e' || *p == 'E';
    e->s = end;
    int uns = 0;
    if (*e->s == 'u' || *e->s == 'U') uns = 1, e->s++;
    /* the emitter writes a float template's numbers as literals of the compute type */
    if (e->ct == DT_F32 || e->ct == DT_F64) return mk_fl(e->ct == DT_F32 ? CK_F32 : CK_F64, d);
    if (is_float_lit) return mk_fl(CK_F64, d);
    uint64_t u = strtoull(s, NULL, 10);
    return mk_int(uns ? (u > UINT32_MAX ? CK_U64 : CK_U32) : (u > INT32_MAX ? CK_I64 : CK_I32), u);
  }
  if (isalpha((unsigned char)*s) || *s == '_') {
    const char *p = s;
    while (isalnum((unsigned char)*p) || *p == '_') p++;
    size_t n = (size_t)(p - s);
    e->s = p;
    if (n == 1 && *s >= 'A' && *s < 'A' + e->nops) return e->ops[*s - 'A'];
    if (!eat(e, "(")) {
      e->bad = 1;
      return boolv(0);
    }
    CVal a[3];
    int na = 0;
    do {
      CVal v = expr(e, live);
      if (na < 3) a[na] = v;
      na++;
    } while (eat(e, ","));
    if (!eat(e, ")") || na > 3) e->bad = 1;
    return live && !e->bad ? call(e, s, n, a, na) : boolv(0);
  }
  if (eat(e, "(")) {
    CVal v = expr(e, live);
    if (!eat(e, ")")) e->bad = 1;
    return v;
  }
  e->bad = 1;
  return boolv(0);
}

/* unary = ("-" | "!" | "~") unary | "(" type ")" unary | primary */
static CVal unary(Ev *e, int live) {
  int ck = cast_kind(e);
  if (ck >= 0) {
    CVal v = unary(e, live);
    if (ck >= 100) return mk_int(CK_I32, conv(v, CK_U32).u & 0xff);   /* (unsigned char) */
    return conv(v, (CKind)ck);
  }
  if (eat(e, "-")) {
    CVal v = unary(e, live);
    if (is_fl(v.k)) return mk_fl(v.k, -v.d);
    v = conv(v, common(v.k, CK_I32));
    return mk_int(v.k, 0u - v.u);
  }
  if (eat(e, "!")) return boolv(!truth(unary(e, live)));
  if (eat(e, "~")) {
    CVal v = unary(e, live);
    if (is_fl(v.k)) e->bad = 1;
    v = conv(v, common(v.k, CK_I32));
    return mk_int(v.k, ~v.u);
  }
  return primary(e, live);
}

/* a op b in their common kind; division by zero and overflowing signed
 * division are undefined in C: the evaluator refuses them (the templates test
 * for them first) */
static CVal arith(Ev *e, char op, CVal a, CVal b, int live) {
  CKind k = common(common(a.k, b.k), CK_I32);
  a = conv(a, k), b = conv(b, k);
  if (is_fl(k)) {
    switch (op) {
    case '+': return mk_fl(k, a.d + b.d);
    case '-': return mk_fl(k, a.d - b.d);
    case '*': return mk_fl(k, a.d * b.d);
    case '/': return mk_fl(k, a.d / b.d);
    default: e->bad = 1; return a;
    }
  }
  switch (op) {
  case '+': return mk_int(k, a.u + b.u);
  case '-': return mk_int(k, a.u - b.u);
  case '*': return mk_int(k, a.u * b.u);
  case '&': return mk_int(k, a.u & b.u);
  case '|': return mk_int(k, a.u | b.u);
  case '^': return mk_int(k, a.u ^ b.u);
  case '/': case '%': {
    if (!live) return a;
    int64_t min = width(k) == 32 ? INT32_MIN : INT64_MIN;
    if (b.u == 0 || (is_signed(k) && (int64_t)a.u == min && (int64_t)b.u == -1)) {
      e->bad = 1;
      return a;
    }
    if (is_signed(k)) {
      int64_t x = (int64_t)a.u, y = (int64_t)b.u;
      return mk_int(k, (uint64_t)(op == '/' ? x / y : x % y));
    }
    return mk_int(k, op == '/' ? a.u / b.u : a.u % b.u);
  }
  default: e->bad = 1; return a;
  }
}

static CVal compare(const char *op, CVal a, CVal b) {
  CKind k = common(common(a.k, b.k), CK_I32);
  a = conv(a, k), b = conv(b, k);
  int lt, eq;
  if (is_fl(k)) {
    if (isnan(a.d) || isnan(b.d)) return boolv(!strcmp(op, "!="));
    lt = a.d < b.d, eq = a.d == b.d;
  } else {
    lt = is_signed(k) ? (int64_t)a.u < (int64_t)b.u : a.u < b.u, eq = a.u == b.u;
  }
  if (!strcmp(op, "<")) return boolv(lt);
  if (!strcmp(op, "<=")) return boolv(lt || eq);
  if (!strcmp(op, ">")) return boolv(!lt && !eq);
  if (!strcmp(op, ">=")) return boolv(!lt);
  if (!strcmp(op, "==")) return boolv(eq);
  return boolv(!eq);
}

/* mul = unary (("*" | "/" | "%") unary)* */
static CVal mul(Ev *e, int live) {
  CVal v = unary(e, live);
  for (;;) {
    char op = eat(e, "*") ? '*' : eat(e, "/") ? '/' : eat(e, "%") ? '%' : 0;
    if (!op) return v;
    v = arith(e, op, v, unary(e, live), live);
  }
}
/* add = mul (("+" | "-") mul)* */
static CVal add(Ev *e, int live) {
  CVal v = mul(e, live);
  for (;;) {
    char op = eat(e, "+") ? '+' : eat(e, "-") ? '-' : 0;
    if (!op) return v;
    v = arith(e, op, v, mul(e, live), live);
  }
}
/* shift = add (("<<" | ">>") add)*: the left operand's (promoted) kind */
static CVal shift(Ev *e, int live) {
  CVal v = add(e, live);
  for (;;) {
    int left = eat(e, "<<"), right = !left && eat(e, ">>");
    if (!left && !right) return v;
    CVal c = add(e, live);
    if (is_fl(v.k) || is_fl(c.k)) e->bad = 1;
    v = conv(v, common(v.k, CK_I32));
    int64_t n = (int64_t)conv(c, CK_I64).u;
    if (!live || e->bad) continue;
    if (n < 0 || n >= width(v.k) || (left && is_signed(v.k) && (int64_t)v.u < 0)) {
      e->bad = 1;   /* undefined in C */
      continue;
    }
    if (left) v = mk_int(v.k, v.u << n);
    else v = mk_int(v.k, is_signed(v.k) ? (uint64_t)((int64_t)v.u >> n) : (width(v.k) == 32 ? (uint32_t)v.u : v.u) >> n);
  }
}
/* rel = shift (("<=" | ">=" | "<" | ">") shift)* */
static CVal rel(Ev *e, int live) {
  CVal v = shift(e, live);
  for (;;) {
    const char *op = eat(e, "<=") ? "<=" : eat(e, ">=") ? ">=" : eat(e, "<") ? "<" : eat(e, ">") ? ">" : NULL;
    if (!op) return v;
    v = compare(op, v, shift(e, live));
  }
}
/* eq = rel (("==" | "!=") rel)* */
static CVal eqn(Ev *e, int live) {
  CVal v = rel(e, live);
  for (;;) {
    const char *op = eat(e, "==") ? "==" : eat(e, "!=") ? "!=" : NULL;
    if (!op) return v;
    v = compare(op, v, rel(e, live));
  }
}
/* bitand = eq ("&" eq)*; bitxor = bitand ("^" bitand)*; bitor = bitxor ("|" bitxor)* */
static CVal bitand_(Ev *e, int live) {
  CVal v = eqn(e, live);
  while (eat(e, "&")) v = arith(e, '&', v, eqn(e, live), live);
  return v;
}
static CVal bitxor_(Ev *e, int live) {
  CVal v = bitand_(e, live);
  while (eat(e, "^")) v = arith(e, '^', v, bitand_(e, live), live);
  return v;
}
static CVal bitor_(Ev *e, int live) {
  CVal v = bitxor_(e, live);
  while (eat(e, "|")) v = arith(e, '|', v, bitxor_(e, live), live);
  return v;
}
/* and = bitor ("&&" bitor)*; or = and ("||" and)*: the right side only where C reads it */
static CVal land(Ev *e, int live) {
  CVal v = bitor_(e, live);
  while (eat(e, "&&")) {
    int t = truth(v);
    CVal r = bitor_(e, live && t);
    v = boolv(t && truth(r));
  }
  return v;
}
static CVal lor(Ev *e, int live) {
  CVal v = land(e, live);
  while (eat(e, "||")) {
    int t = truth(v);
    CVal r = land(e, live && !t);
    v = boolv(t || truth(r));
  }
  return v;
}
/* expr = or ("?" expr ":" expr)?: the branch not taken is read, not evaluated;
 * the result has the common kind of both branches */
static CVal expr(Ev *e, int live) {
  CVal c = lor(e, live);
  if (!eat(e, "?")) return c;
  int t = truth(c);
  CVal x = expr(e, live && t);
  if (!eat(e, ":")) e->bad = 1;
  CVal y = expr(e, live && !t);
  CKind k = common(x.k, y.k);
  return conv(t ? x : y, k);
}

static CVal from_double(DType t, double v) {
  if (ir_dtype_is_float(t)) return mk_fl(kind_of(t), v);
  if (t == DT_BOOL) return boolv(v != 0);
  return conv(mk_fl(CK_F64, v), kind_of(t));
}

/* the value stored into a result of dtype rt (C's assignment conversion) */
static double store(DType rt, CVal v) {
  if (rt == DT_BOOL) return (double)(conv(v, CK_U32).u & 0xff);
  return as_double(conv(v, kind_of(rt)));
}

int ir_elem_eval(Op op, DType ct, DType rt, const double *x, double *r) {
  const OpInfo *oi = &ir_ops[op];
  if (oi->kind != K_ELEM) return 0;
  CVal ops[3];
  int n = oi->nargs;
  for (int k = 0; k < n; k++)
    ops[k] = op == IR_WHERE && k == 0 ? from_double(DT_BOOL, x[k]) : from_double(op == IR_WHERE ? rt : ct, x[k]);
  if (op == IR_CAST && (ir_dtype_is_low(ct) || ir_dtype_is_low(rt))) {
    /* bf16 / f16 storage: its numbers widen exactly, a float is rounded into it */
    *r = rt == DT_BF16 ? ir_round_bf16(x[0]) : rt == DT_F16 ? ir_round_f16(x[0]) : rt == DT_F32 ? (double)(float)x[0] : x[0];
    return 1;
  }
  if (op == IR_CAST) {
    /* a conversion to the result dtype: to bool, "!= 0"; a float to an integer as
     * x86-64 converts (codegen_c's float_to_int) */
    *r = rt == DT_BOOL ? (double)truth(ops[0]) : store(rt, conv(ops[0], kind_of(rt)));
    return 1;
  }
  const char *t = ir_elem_template(op, ct);
  if (!t) return 0;
  Ev e = {t, op == IR_WHERE ? rt : ct, ops, n, 0};
  CVal v = expr(&e, 1);
  skip(&e);
  if (e.bad || *e.s) return 0;
  *r = store(rt, v);
  /* values are held as doubles: an i64 that a double does not hold exactly (beyond 2**53)
   * is not evaluated here (the compiled code computes it, or the caller refuses) */
  if (rt == DT_I64) {
    int64_t iv = (int64_t)conv(v, CK_I64).u;
    double d = (double)iv;
    if (d >= 9223372036854775808.0 || (int64_t)d != iv) return 0;
  }
  return 1;
}
