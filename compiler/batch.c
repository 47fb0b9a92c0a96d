/* batch.c - a batch dimension chosen at run time: comparing the traces and
 * merging their generated code (see batch.h). */
#include "batch.h"
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void batch_points(int64_t max, int64_t pts[BATCH_NPOINTS]) {
  for (int j = 0; j < BATCH_NPOINTS; j++) pts[j] = max + j;
}

/* ---- the staged programs ---------------------------------------------------- */

static int same_structure(const Func *a, const Func *b, int *where) {
  *where = -1;
  if (strcmp(a->name, b->name) || a->values.len != b->values.len || a->insts.len != b->insts.len ||
      a->inputs.len != b->inputs.len || a->outputs.len != b->outputs.len || a->updates.len != b->updates.len)
    return 0;
  for (int i = 0; i < a->insts.len; i++) {
    const Inst *x = &a->insts.data[i], *y = &b->insts.data[i];
    *where = i;
    if (x->op != y->op || x->res != y->res || x->nargs != y->nargs) return 0;
    for (int k = 0; k < x->nargs; k++)
      if (x->args[k] != y->args[k]) return 0;
    if (a->values.data[x->res].type.ndim != b->values.data[y->res].type.ndim) return 0;
  }
  for (int v = 0; v < a->values.len; v++)
    if (a->values.data[v].kind != b->values.data[v].kind) return 0;
  return 1;
}

/* The axis of value v whose extent is a*N (a >= 1) at every point, the others
 * the same at every point; -1 if none differs, -2 if the shape fits no such form. */
static int scaling_axis(Program *const *progs, const int64_t *pts, int n, int fi, ValId v) {
  const Type *t0 = &progs[0]->funcs.data[fi]->values.data[v].type;
  int axis = -1;
  for (int k = 0; k < t0->ndim; k++) {
    int varies = 0;
    for (int j = 1; j < n; j++) varies |= progs[j]->funcs.data[fi]->values.data[v].type.dims[k] != t0->dims[k];
    if (!varies) continue;
    if (axis >= 0 || t0->dims[k] % pts[0]) return -2;
    int64_t a = t0->dims[k] / pts[0];
    for (int j = 1; j < n; j++)
      if (progs[j]->funcs.data[fi]->values.data[v].type.dims[k] != a * pts[j]) return -2;
    axis = k;
  }
  return axis;
}

int batch_compare(Diag *d, Program *const *progs, const int64_t *pts, int n) {
  Program *p0 = progs[0];
  for (int j = 1; j < n; j++)
    if (progs[j]->funcs.len != p0->funcs.len || progs[j]->params.len != p0->params.len) {
      diag_plain(d, "the model's entries or parameters depend on the batch N (N = %lld and N = %lld give different "
                    "programs): it needs a static batch",
                 (long long)pts[0], (long long)pts[j]);
      return -1;
    }
  for (int fi = 0; fi < p0->funcs.len; fi++) {
    Func *f0 = p0->funcs.data[fi];
    for (int j = 1; j < n; j++) {
      int at;
      if (!same_structure(f0, progs[j]->funcs.data[fi], &at)) {
        Span s = at >= 0 ? f0->insts.data[at].loc : f0->loc;
        diag_error(d, s, "entry '%s' is staged differently for N = %lld and N = %lld (here): the batch size changes "
                         "what the code does, so it cannot be chosen at run time (give a number instead of a name)",
                   f0->name, (long long)pts[0], (long long)pts[j]);
        return -1;
      }
    }
    int *axis = arena_alloc(p0->arena, sizeof(int) * (size_t)(f0->values.len + 1));
    int any = 0;
    for (int v = 0; v < f0->values.len; v++) axis[v] = -1;
    const Vec(ValId) *lists[2] = {(const void *)&f0->inputs, (const void *)&f0->outputs};
    for (int l = 0; l < 2; l++)
      for (int k = 0; k < lists[l]->len; k++) {
        ValId v = lists[l]->data[k];
        int ax = scaling_axis(progs, pts, n, fi, v);
        if (ax == -2) {
          char tb[256];
          diag_error(d, f0->loc, "%s %d of entry '%s' has shape %s at N = %lld, which is not N times a fixed shape: "
                                 "the batch cannot be chosen at run time",
                     l ? "output" : "input", k, f0->name, ir_shape_str(&f0->values.data[v].type, tb, sizeof tb),
                     (long long)pts[0]);
          return -1;
        }
        axis[v] = ax;
        any |= ax >= 0 && l == 0;
      }
    if (!any) continue;
    for (int j = 0; j < n; j++) {
      Func *f = progs[j]->funcs.data[fi];
      f->batch_max = pts[0];
      f->batch_n = pts[j];
      f->batch_axis = axis;
      f->batch_ref = f0;
    }
  }
  return 0;
}

/* ---- the generated text ------------------------------------------------------- */

typedef enum { T_END, T_SPACE, T_COMMENT, T_STRING, T_NUMBER, T_WORD, T_PUNCT } TokKind;
typedef struct Tok {
  TokKind kind;
  const char *s;
  size_t len;
} Tok;

static Tok next_tok(const char *p) {
  Tok t = {T_END, p, 0};
  const char *q = p;
  if (!*q) return t;
  if (isspace((unsigned char)*q)) {
    while (isspace((unsigned char)*q)) q++;
    t.kind = T_SPACE;
  } else if (q[0] == '/' && q[1] == '*') {
    const char *e = strstr(q + 2, "*/");
    q = e ? e + 2 : q + strlen(q);
    t.kind = T_COMMENT;
  } else if (q[0] == '/' && q[1] == '/') {
    while (*q && *q != '\n') q++;
    t.kind = T_COMMENT;
  } else if (*q == '"' || *q == '\'') {
    char quote = *q++;
    while (*q && *q != quote) q += q[0] == '\\' && q[1] ? 2 : 1;
    if (*q) q++;
    t.kind = T_STRING;
  } else if (isdigit((unsigned char)*q) || (*q == '.' && isdigit((unsigned char)q[1]))) {
    int hex = q[0] == '0' && (q[1] == 'x' || q[1] == 'X');
    while (isalnum((unsigned char)*q) || *q == '.' || *q == '_' ||
           ((*q == '+' || *q == '-') && !hex && (q[-1] == 'e' || q[-1] == 'E')))
      q++;
    t.kind = T_NUMBER;
  } else if (isalpha((unsigned char)*q) || *q == '_') {
    while (isalnum((unsigned char)*q) || *q == '_') q++;
    t.kind = T_WORD;
  } else {
    q++;
    t.kind = T_PUNCT;
  }
  t.len = (size_t)(q - p);
  return t;
}

static int tok_eq(Tok a, Tok b) { return a.kind == b.kind && a.len == b.len && !memcmp(a.s, b.s, a.len); }

/* A number token: integer (value in *iv) or floating (*fv, *isf32). 0 ok, -1 not understood. */
static int number_value(Tok t, int *is_int, long long *iv, double *fv, int *isf32) {
  char buf[80];
  if (t.len >= sizeof buf) return -1;
  memcpy(buf, t.s, t.len);
  buf[t.len] = 0;
  int hex = buf[0] == '0' && (buf[1] == 'x' || buf[1] == 'X');
  *is_int = hex || !strpbrk(buf, ".eEfF");
  char *end;
  if (*is_int) {
    *iv = strtoll(buf, &end, 0);
    while (*end == 'u' || *end == 'U' || *end == 'l' || *end == 'L') end++;
  } else {
    *fv = strtod(buf, &end);
    *isf32 = *end == 'f' || *end == 'F';
    if (*isf32) end++;
  }
  return *end ? -1 : 0;
}

/* "model.py:17" from the last comment before position `at` of text, or "". */
static void model_line(const char *text, size_t at, char *buf, size_t cap) {
  buf[0] = 0;
  for (size_t i = at; i-- > 0;) {
    if (text[i] != '*' || i == 0 || text[i - 1] != '/') continue;
    const char *c = text + i + 1, *e = strstr(c, "*/");
    for (const char *q = c; e && q < e; q++)
      if (!strncmp(q, ".py:", 4) && isdigit((unsigned char)q[4])) {
        const char *s = q;
        while (s > c && (isalnum((unsigned char)s[-1]) || strchr("_-./", s[-1]))) s--;
        const char *t = q + 4;
        while (isdigit((unsigned char)*t)) t++;
        snprintf(buf, cap, "%.*s", (int)(t - s), s);
        return;
      }
  }
}

static void out_str(char **o, size_t *len, size_t *cap, const char *s, size_t n) {
  if (*len + n + 1 > *cap) {
    *cap = (*len + n + 1) * 2;
    *o = realloc(*o, *cap);
    CHECK(*o);
  }
  memcpy(*o + *len, s, n);
  *len += n;
  (*o)[*len] = 0;
}

/* The expression of `batch` giving integer values v[j] at pts[j]: a*N + b. 0, or -1 if none. */
static int int_form(const long long *v, const int64_t *pts, int n, char *buf, size_t cap) {
  long long dv = v[1] - v[0], dn = (long long)(pts[1] - pts[0]);
  if (dv % dn) return -1;
  long long a = dv / dn, b = v[0] - a * pts[0];
  for (int j = 2; j < n; j++)
    if (a * pts[j] + b != v[j]) return -1;
  char as[32] = "";
  if (a != 1) snprintf(as, sizeof as, "%lld * ", a);
  if (b == 0) snprintf(buf, cap, "(%sbatch)", as);
  else snprintf(buf, cap, "(%sbatch %c %lld)", as, b < 0 ? '-' : '+', b < 0 ? -b : b);
  return 0;
}

BatchConsts batch_consts(Program *const *progs, int n) {
  BatchConsts bc = {0, NULL};
  Program *p0 = progs[0];
  for (int pass = 0; pass < 2; pass++) {   /* count, then fill */
    int len = 0;
    for (int fi = 0; fi < p0->funcs.len; fi++)
      for (int i = 0; i < p0->funcs.data[fi]->insts.len; i++) {
        double x0 = p0->funcs.data[fi]->insts.data[i].fattr;
        int differs = 0;
        for (int j = 1; j < n; j++) {
          double x = progs[j]->funcs.data[fi]->insts.data[i].fattr;
          differs |= x != x0 && !(isnan(x) && isnan(x0));
        }
        if (!differs) continue;
        if (pass)
          for (int j = 0; j < n; j++) bc.v[len][j] = progs[j]->funcs.data[fi]->insts.data[i].fattr;
        len++;
      }
    if (!pass) bc.v = arena_alloc(p0->arena, sizeof *bc.v * (size_t)(len + 1));
    bc.len = len;
  }
  return bc;
}

/* A floating constant of the batch: c / (k*N), c * N or c * (k*N) / (k*N - 1),
 * evaluated as its printed C expression evaluates (in double). */
typedef enum { F_DIV, F_MUL, F_BESSEL } FormKind;
typedef struct Form {
  FormKind kind;
  double c;
  long long k;
} Form;

static double form_eval(Form f, int64_t batch) {
  double x = (double)(f.k * batch);
  return f.kind == F_DIV ? f.c / x : f.kind == F_MUL ? f.c * x : f.c * x / (double)(f.k * batch - 1);
}

/* Whether f gives the literal tok[j] at every point (rounded to float in f32 code). */
static int form_fits(Form f, const double *tok, const int64_t *pts, int n, int f32) {
  for (int j = 0; j < n; j++) {
    double x = form_eval(f, pts[j]);
    if (f32 ? (float)x != (float)tok[j] : x != tok[j]) return 0;
  }
  return 1;
}

/* The shortest decimal (1 to 17 digits) c for which f fits; 0 if none. */
static int shortest_c(Form *f, double raw, const double *tok, const int64_t *pts, int n, int f32) {
  char cs[64];
  for (int digits = 1; digits <= 17; digits++) {
    snprintf(cs, sizeof cs, "%.*g", digits, raw);
    f->c = strtod(cs, NULL);
    if (form_fits(*f, tok, pts, n, f32)) return 1;
  }
  return 0;
}

/* The form of a literal tok[j] at pts[j] (its absolute value), found from v[j]: the
 * exact IR constants it was printed from where known (then k in 1 / (k*N) and in
 * Bessel's correction k*N / (k*N - 1) are exact), else tok itself. 0, or -1. */
static int find_form(const double *v, const double *tok, const int64_t *pts, int n, int f32, Form *f) {
  double N0 = (double)pts[0];
  double inv = 1.0 / (v[0] * N0);   /* k of 1 / (k*N) */
  long long k = llround(inv);
  if (k >= 1 && k < (1LL << 40) && fabs(inv - (double)k) <= 1e-6 * (double)k) {
    *f = (Form){F_DIV, 1.0, k};
    if (form_fits(*f, tok, pts, n, f32)) return 0;
  }
  *f = (Form){F_DIV, 0, 1};
  if (shortest_c(f, v[0] * N0, tok, pts, n, f32)) return 0;
  *f = (Form){F_MUL, 0, 1};
  if (shortest_c(f, v[0] / N0, tok, pts, n, f32)) return 0;
  if (v[0] > 1) {   /* (k*N) / (k*N - 1) = 1 + 1 / (k*N - 1) */
    double kn = 1.0 / (v[0] - 1.0) + 1.0;
    k = llround(kn / N0);
    if (k >= 1 && k < (1LL << 40) && fabs(kn - (double)k * N0) <= 1e-6 * kn) {
      *f = (Form){F_BESSEL, 1.0, k};
      if (form_fits(*f, tok, pts, n, f32)) return 0;
    }
  }
  *f = (Form){F_BESSEL, 0, 1};
  if (shortest_c(f, v[0] * (N0 - 1) / N0, tok, pts, n, f32)) return 0;
  return -1;
}

/* A floating literal tok[j] at pts[j] (as stored: float when f32) as an expression of
 * `batch`, exactly as the staged code computes it at every N. 0, or -1 if none fits. */
static int float_form(const double *tok, const int64_t *pts, int n, int f32, const BatchConsts *bc, char *buf,
                      size_t cap) {
  Form f;
  int found = 0;
  for (int h = 0; bc && h < bc->len && !found; h++) {   /* the IR constant printed here */
    double v[BATCH_NPOINTS];
    int same = 1;
    for (int j = 0; j < n; j++) {
      v[j] = fabs(bc->v[h][j]);
      same &= f32 ? (float)v[j] == (float)tok[j] : v[j] == tok[j];
    }
    found = same && !find_form(v, tok, pts, n, f32, &f);
  }
  if (!found && find_form(tok, tok, pts, n, f32, &f)) return -1;
  char cs[64], ks[48] = "batch", e[160];
  snprintf(cs, sizeof cs, "%.17g", f.c);
  for (int digits = 1; digits < 17; digits++) {   /* the shortest that reads back as c */
    snprintf(cs, sizeof cs, "%.*g", digits, f.c);
    if (strtod(cs, NULL) == f.c) break;
  }
  if (!strpbrk(cs, ".eEn")) strcat(cs, ".0");
  if (f.k != 1) snprintf(ks, sizeof ks, "%lldLL * batch", f.k);
  if (f.kind == F_DIV) snprintf(e, sizeof e, "%s / (double)(%s)", cs, ks);
  else if (f.kind == F_MUL) snprintf(e, sizeof e, "%s * (double)(%s)", cs, ks);
  else snprintf(e, sizeof e, "%s * (double)(%s) / (double)(%s - 1)", cs, ks, ks);
  snprintf(buf, cap, f32 ? "((float)(%s))" : "(%s)", e);
  return 0;
}

char *batch_merge(Diag *d, const char *what, char *const *texts, const int64_t *pts, int n, const BatchConsts *bc) {
  const char *cur[BATCH_NPOINTS];
  CHECK(n >= 3 && n <= BATCH_NPOINTS);
  for (int j = 0; j < n; j++) cur[j] = texts[j];
  char *o = NULL;
  size_t len = 0, cap = 0;
  out_str(&o, &len, &cap, "", 0);
  for (;;) {
    /* white space and comments come from the first text */
    const char *start = cur[0];
    Tok t[BATCH_NPOINTS];
    for (int j = 0; j < n; j++) {
      for (;;) {
        t[j] = next_tok(cur[j]);
        if (t[j].kind != T_SPACE && t[j].kind != T_COMMENT) break;
        cur[j] += t[j].len;
      }
    }
    out_str(&o, &len, &cap, start, (size_t)(cur[0] - start));
    if (t[0].kind == T_END) {
      int ok = 1;
      for (int j = 1; j < n; j++) ok &= t[j].kind == T_END;
      if (ok) return o;
    }
    int same = 1;
    for (int j = 1; j < n; j++) same &= tok_eq(t[0], t[j]);
    char expr[160];
    const char *why = NULL;
    if (same) {
      out_str(&o, &len, &cap, t[0].s, t[0].len);
    } else {
      int kinds = 1;
      for (int j = 1; j < n; j++) kinds &= t[j].kind == T_NUMBER && t[0].kind == T_NUMBER;
      int is_int[BATCH_NPOINTS], f32[BATCH_NPOINTS] = {0};
      long long iv[BATCH_NPOINTS];
      double fv[BATCH_NPOINTS];
      for (int j = 0; j < n && kinds; j++)
        kinds = number_value(t[j], &is_int[j], &iv[j], &fv[j], &f32[j]) == 0 && is_int[j] == is_int[0] &&
                f32[j] == f32[0];
      if (!kinds) why = "the code differs in more than its sizes";
      else if (is_int[0] ? int_form(iv, pts, n, expr, sizeof expr) : float_form(fv, pts, n, f32[0], bc, expr, sizeof expr))
        why = is_int[0] ? "a size that is not a*N + b" : "a constant that is not c/N, c/(k*N), c*N, c*N/(N-1) or k*N/(k*N-1)";
      if (why) {
        char ml[160];
        model_line(texts[0], (size_t)(t[0].s - texts[0]), ml, sizeof ml);
        int line = 1;
        for (const char *q = texts[0]; q < t[0].s; q++) line += *q == '\n';
        diag_plain(d, "the batch N cannot be chosen at run time: in the generated %s (line %d%s%s), '%.*s' at "
                      "N = %lld is '%.*s' at N = %lld: %s (give the batch as a number)",
                   what, line, ml[0] ? ", the code of " : "", ml, (int)t[0].len, t[0].s, (long long)pts[0],
                   (int)t[1].len, t[1].s, (long long)pts[1], why);
        free(o);
        return NULL;
      }
      out_str(&o, &len, &cap, expr, strlen(expr));
    }
    for (int j = 0; j < n; j++) cur[j] += t[j].len;
  }
}
