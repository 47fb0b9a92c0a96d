/* emit_ops.c - the C loops of each primitive.
 *
 * Every tensor is a pointer to row-major data (declared by emit_c.c at the top
 * of the entry function); scalar constants are written as literals. Most ops
 * are a loop nest over the result with each operand addressed through
 * compile-time strides (cg_nest() below): adjacent axes that are contiguous for
 * every access are merged, so same-shape elementwise ops become one flat loop.
 * GEMMs and convolutions are kernel IR calls that linalg_c.c writes. Outer loops worth running in parallel are opened through the target's
 * renderer (cg_par_for, or cg_par_open before a loop written here: C's CTC_OMP_FOR, or with
 * --profile a region timing each thread); loops that accumulate (+=) are only parallel over
 * disjoint parts of their result.
 *
 * Gradient primitives: UNSLICE zeroes and scatters (convolutions' gradients: linalg_c.c);
 * pooling and its gradients loop over images in parallel, within one over a row of windows
 * at a time, tap by tap (tap_rows; the freestanding target's gradients and average pooling
 * per window: no rows on its stack);
 * EMBEDDING_BWD adds rows of g at the indices (checked in range before the kernel: emit_c.c). */
#include <math.h>
#include <stdlib.h>
#include <ctype.h>
#include <stddef.h>
#include <string.h>
#include "ops_int.h"


static const Inst *def_of(const CgFunc *c, ValId v) { return ir_def(c->f, v); }

int cg_is_literal(const CgFunc *c, ValId v) {
  const Inst *in = def_of(c, v);
  return in && in->op == IR_CONST;
}

const char *cg_ref(CgFunc *c, ValId v) {
  CHECK(!cg_is_literal(c, v) && c->fp->loc[v].base != LOC_LOCAL);
  c->ref[v] = 1;
  return c->over && c->over[v] ? c->over[v] : c->cname[v];
}

void cg_where(char *buf, size_t cap, Span loc) {
  buf[0] = 0;
  if (!loc.file || !loc.file->path) return;
  const char *base = strrchr(loc.file->path, '/');
  snprintf(buf, cap, "%s:%d", base ? base + 1 : loc.file->path, loc.line);
}

/* Element v[idx] as C text: a load, or the literal of a scalar constant. */
static void load(CgFunc *c, Buf *b, ValId v, const char *idx) {
  if (cg_is_literal(c, v)) cg_literal(b, ty(c, v)->dtype, def_of(c, v)->fattr);
  else cg_printf(b, "%s[%s]", cg_ref(c, v), idx);
}

/* "x" or "x + i0 * 12": a pointer into v at element offset idx. */
void cg_ptr_at(CgFunc *c, Buf *b, ValId v, const char *idx) {
  if (!strcmp(idx, "0")) cg_printf(b, "%s", cg_ref(c, v));
  else cg_printf(b, "%s + %s", cg_ref(c, v), idx);
}


/* ---- loop nests ------------------------------------------------------------ */

/* The index expression of an access: "7 + i0 * 12 + i1". */
static void index_expr(char *out, int n, char var[][16], int64_t off, const int64_t *st) {
  size_t len = 0;
  out[0] = 0;
  if (off) len += (size_t)snprintf(out + len, IDX_CAP - len, "%lld", (ll)off);
  for (int k = 0; k < n && len < IDX_CAP; k++) {
    if (!st[k]) continue;
    const char *sep = len ? " + " : "";
    if (st[k] == 1) len += (size_t)snprintf(out + len, IDX_CAP - len, "%s%s", sep, var[k]);
    else len += (size_t)snprintf(out + len, IDX_CAP - len, "%s%s * %lld", sep, var[k], (ll)st[k]);
  }
  if (!len) snprintf(out, IDX_CAP, "0");
  CHECK(len < IDX_CAP);
}

/* Loops over dims[nd], calling body once in the innermost loop with the index
 * expression of every access. Size-1 axes are dropped and adjacent axes merged
 * where every access is contiguous across them. omp (NEST_* flags): NEST_OMP,
 * OpenMP on the outer loop when the nest has OMP_MIN_WORK elements;
 * NEST_OMP_ALWAYS, whenever that loop has several iterations (each does much
 * work: a GEMM); NEST_SIMD, `omp simd` on the innermost loop (its iterations
 * are independent: GCC cannot see that through the pointers an OpenMP region
 * captures, and with many arrays gives up vectorising); NEST_GRID, the nest is all
 * the instruction does (CG_PAR_GRID: its outer loop over a GPU's threads). The
 * outer loop, when parallel, is the renderer's (cg_par_for). */
void cg_nest(CgFunc *c, int nd, const int64_t *dims, int na, const Acc *acc, BodyFn body, void *u,
                 int omp, int braces) {
  int64_t d[IR_MAX_DIMS], total = 1;
  int64_t (*st)[IR_MAX_DIMS] = malloc(sizeof *st * (size_t)(na ? na : 1));
  char (*idx)[IDX_CAP] = malloc(sizeof *idx * (size_t)(na ? na : 1));
  int n = 0;
  CHECK(st && idx);
  for (int k = 0; k < nd; k++) {
    total *= dims[k];
    if (dims[k] == 1) continue;
    int merge = n > 0;
    for (int a = 0; a < na && merge; a++) merge = st[a][n - 1] == acc[a].st[k] * dims[k];
    if (merge) {
      d[n - 1] *= dims[k];
      for (int a = 0; a < na; a++) st[a][n - 1] = acc[a].st[k];
      continue;
    }
    d[n] = dims[k];
    for (int a = 0; a < na; a++) st[a][n] = acc[a].st[k];
    n++;
  }
  char var[IR_MAX_DIMS][16];
  for (int k = 0; k < n; k++) snprintf(var[k], sizeof var[k], n == 1 ? "i" : "i%d", k);
  for (int a = 0; a < na; a++) index_expr(idx[a], n, var, acc[a].off, st[a]);
  int base = c->ind;
  int par = (omp & (NEST_OMP | NEST_OMP_ALWAYS)) && n > 0 && d[0] > 1 && ((omp & NEST_OMP_ALWAYS) || total >= min_work(c));
  int simd = (omp & NEST_SIMD) && n > 0 && d[n - 1] > 1;
  if (simd) c->k->simd = 1;
  int outer = n > 0 && (par || (omp & NEST_GRID));   /* the outer loop is the renderer's */
  if (outer)
    cg_par_for(c, var[0], d[0], (par ? CG_PAR_OMP : 0) | (simd && n == 1 ? CG_PAR_SIMD : 0) |
                                    (omp & NEST_GRID ? CG_PAR_GRID : 0));
  for (int k = outer; k < n; k++) {
    if (simd && k == n - 1) LINE(c, "CTC_OMP_SIMD\n");
    LINE(c, "for (int64_t %s = 0; %s < %lld; %s++)%s\n", var[k], var[k], (ll)d[k], var[k],
         braces && k == n - 1 ? " {" : "");
    c->ind += 2;
  }
  if (braces && n == 0) {
    LINE(c, "{\n");
    c->ind += 2;
  }
  body(c, idx, u);
  if (braces && !(outer && n == 1)) {
    c->ind -= 2;
    LINE(c, "}\n");
  }
  if (outer) cg_par_end(c);
  c->ind = base;
  free(st);
  free(idx);
}

/* Strides of operand a (numpy broadcasting) over the axes of result shape r. */
static void bcast_strides(const Type *a, const Type *r, int64_t *st) {
  int64_t cs[IR_MAX_DIMS];
  cstrides(a, cs);
  for (int k = 0; k < r->ndim; k++) {
    int ax = k - (r->ndim - a->ndim);
    st[k] = ax >= 0 && a->dims[ax] != 1 ? cs[ax] : 0;
  }
}

/* ---- elementwise ------------------------------------------------------------ */

typedef struct ElemU {
  const Inst *in;
  int acc[3];   /* access index of each operand (0 is the result) */
} ElemU;

/* The type the op's expression computes in. */
static DType compute_type(const CgFunc *c, const Inst *in) {
  return ir_elem_compute_type(in->op, ty(c, in->args[0])->dtype, ty(c, in->res)->dtype);
}

/* t with every call of exp(...) made a call of ctc_exp_cr_f32 (in the arena), or t itself. */
static const char *call_exp_cr(CgFunc *c, const char *t) {
  const char *hit = NULL;
  for (const char *q = strstr(t, "exp("); q && !hit; q = strstr(q + 1, "exp("))
    if (q == t || !(isalnum((unsigned char)q[-1]) || q[-1] == '_')) hit = q;
  if (!hit) return t;
  c->k->exp_cr_f32 = 1;
  const char *rest = call_exp_cr(c, hit + 4);
  return arena_printf(c->p->arena, "%.*sctc_exp_cr_f32(%s", (int)(hit - t), t, rest);
}

/* The op's template for compute type ct (ir_elem_template: ops.def's c_expr or
 * its integer form), noting the helpers it calls so that kernels.c writes them
 * into the file; f32 tanh, erf, log, log1p and exp call the file's vectorisable versions of the
 * same functions, and in hosted C code sin, cos, tan, atan, atan2, asin, acos, log2, log10, expm1, sinh,
 * cosh and exp2 too (in double:
 * not for --no-libm's FPUs), and the exp that other templates call (sigmoid) is the one as
 * accurate as libm's expf. */
/* The f32 ops that call a helper of kernels.c: its flag in Kernels, the call, and whether it computes
 * in double (hosted C only: exp_cr's targets). */
static const struct {
  Op op;
  size_t flag;
  const char *call;
  int hosted;
} f32_helpers[] = {
    {IR_TANH, offsetof(Kernels, tanh_f32), "ctc_tanh_f32(A)", 0},
    {IR_EXP, offsetof(Kernels, exp_f32), "ctc_exp_f32(A)", 0},
    {IR_ERF, offsetof(Kernels, erf_f32), "ctc_erf_f32(A)", 0},
    {IR_LOG, offsetof(Kernels, log_f32), "ctc_log_f32(A)", 0},
    {IR_LOG1P, offsetof(Kernels, log1p_f32), "ctc_log1p_f32(A)", 0},
    {IR_SIN, offsetof(Kernels, sincos_f32), "ctc_sin_f32(A)", 1},
    {IR_COS, offsetof(Kernels, sincos_f32), "ctc_cos_f32(A)", 1},
    {IR_TAN, offsetof(Kernels, sincos_f32), "ctc_tan_f32(A)", 1},
    {IR_ATAN, offsetof(Kernels, atan_f32), "ctc_atan_f32(A)", 1},
    {IR_ATAN2, offsetof(Kernels, atan_f32), "ctc_atan2_f32(A, B)", 1},
    {IR_ASIN, offsetof(Kernels, atan_f32), "ctc_asin_f32(A)", 1},
    {IR_ACOS, offsetof(Kernels, atan_f32), "ctc_acos_f32(A)", 1},
    {IR_LOG2, offsetof(Kernels, logb_f32), "ctc_log2_f32(A)", 1},
    {IR_LOG10, offsetof(Kernels, logb_f32), "ctc_log10_f32(A)", 1},
    {IR_EXPM1, offsetof(Kernels, expx_f32), "ctc_expm1_f32(A)", 1},
    {IR_SINH, offsetof(Kernels, expx_f32), "ctc_sinh_f32(A)", 1},
    {IR_COSH, offsetof(Kernels, expx_f32), "ctc_cosh_f32(A)", 1},
    {IR_EXP2, offsetof(Kernels, expx_f32), "ctc_exp2_f32(A)", 1},
};

static const char *elem_template(CgFunc *c, const Inst *in, DType ct) {
  for (size_t h = 0; ct == DT_F32 && h < sizeof f32_helpers / sizeof f32_helpers[0]; h++)
    if (f32_helpers[h].op == in->op && (!f32_helpers[h].hosted || c->k->exp_cr)) {
      ((unsigned char *)c->k)[f32_helpers[h].flag] = 1;
      return f32_helpers[h].call;
    }
  const char *t = ir_elem_template(in->op, ct);
  if (!t) BUG("%s on %s", ir_ops[in->op].name, ir_dtype_name(ct));
  if (ct == DT_F32 && c->k->exp_cr) t = call_exp_cr(c, t);
  if (strstr(t, "ctc_ipow_")) c->k->ipow[ct] = 1;
  if (strstr(t, "ctc_remainder_")) c->k->remainder[ct] = 1;
  if (strstr(t, "ctc_floordiv_")) c->k->floordiv[ct] = 1;
  if (strstr(t, "ctc_bf16_")) c->k->bf16[ct] = 1;
  if (strstr(t, "ctc_f16_")) c->k->f16[ct] = 1;
  return t;
}

/* A float -> integer conversion as x86-64 (and so PyTorch there) does it:
 * truncation, and the type's minimum for NaN and out-of-range values (a plain C
 * cast would be UB). */
static void float_to_int(Buf *e, DType rt, const char *x) {
  if (rt == DT_I64)
    cg_printf(e, "(%s >= -9223372036854775808.0 && %s < 9223372036854775808.0 ? (int64_t)%s : INT64_MIN)", x, x, x);
  else
    cg_printf(e, "(%s > -2147483649.0 && %s < 2147483648.0 ? (int32_t)%s : INT32_MIN)", x, x, x);
}

/* The C expression of elementwise instruction in over operand texts txt. */
static void elem_expr(CgFunc *c, const Inst *in, const char *const *txt, Buf *e) {
  DType rt = ty(c, in->res)->dtype, ct = compute_type(c, in);
  if (in->op == IR_CAST && (ir_dtype_is_low(ct) || ir_dtype_is_low(rt))) {   /* bf16 / f16 storage (verify.c) */
    DType low = ir_dtype_is_low(ct) ? ct : rt;
    const char *n = low == DT_BF16 ? "bf16" : "f16";
    c->k->low_io[low] = 1;
    if (low == DT_BF16) c->k->bf16[DT_F32] = 1;   /* ctc_bf16_store rounds with ctc_bf16_f32 */
    else c->k->f16[DT_F32] = 1;
    if (low == ct) cg_printf(e, rt == DT_F32 ? "ctc_%s_load(%s)" : "(double)ctc_%s_load(%s)", n, txt[0]);
    else cg_printf(e, ct == DT_F32 ? "ctc_%s_store(%s)" : "ctc_%s_store((float)%s)", n, txt[0]);
    return;
  }
  if (in->op == IR_CAST && rt == DT_BOOL) cg_printf(e, "(unsigned char)(%s != 0)", txt[0]);
  else if (in->op == IR_CAST && ir_dtype_is_float(ct) && (rt == DT_I64 || rt == DT_I32)) float_to_int(e, rt, txt[0]);
  else if (in->op == IR_CAST) cg_printf(e, "(%s)%s", cg_ctype(rt), txt[0]);
  else cg_expand(e, elem_template(c, in, ct), txt, in->nargs, ct);
}

static void elem_body(CgFunc *c, char idx[][IDX_CAP], void *up) {
  ElemU *u = up;
  const Inst *in = u->in;
  Buf ops[3] = {{0}}, e = {0};
  const char *txt[3];
  for (int k = 0; k < in->nargs; k++) {
    load(c, &ops[k], in->args[k], idx[u->acc[k]]);
    txt[k] = ops[k].s;
  }
  elem_expr(c, in, txt, &e);
  LINE(c, "%s[%s] = %s;\n", cg_ref(c, in->res), idx[0], e.s);
  for (int k = 0; k < in->nargs; k++) cg_buf_free(&ops[k]);
  cg_buf_free(&e);
}

static void emit_elem(CgFunc *c, const Inst *in) {
  const Type *r = ty(c, in->res);
  Acc acc[4];
  ElemU u = {in, {0, 0, 0}};
  int na = 1;
  memset(acc, 0, sizeof acc);
  cstrides(r, acc[0].st);
  for (int k = 0; k < in->nargs; k++) {
    if (cg_is_literal(c, in->args[k])) continue;
    bcast_strides(ty(c, in->args[k]), r, acc[na].st);
    u.acc[k] = na++;
  }
  cg_nest(c, r->ndim, r->dims, na, acc, elem_body, &u, 1, 0);
}

/* ---- data movement ----------------------------------------------------------- */

typedef struct CopyU {
  ValId dst, src;
} CopyU;

static void copy_body(CgFunc *c, char idx[][IDX_CAP], void *up) {
  CopyU *u = up;
  Buf e = {0};
  load(c, &e, u->src, idx[1]);
  LINE(c, "%s[%s] = %s;\n", cg_ref(c, u->dst), idx[0], e.s);
  cg_buf_free(&e);
}

/* dst (shape dims over nd axes, accessed by acc[0]) = src (acc[1]). */
static void copy_nest(CgFunc *c, ValId dst, ValId src, int nd, const int64_t *dims, const Acc *acc) {
  CopyU u = {dst, src};
  cg_nest(c, nd, dims, 2, acc, copy_body, &u, 1, 0);
}

static void emit_permute(CgFunc *c, const Inst *in) {
  const Type *a = ty(c, in->args[0]), *r = ty(c, in->res);
  Acc acc[2];
  int64_t ast[IR_MAX_DIMS];
  memset(acc, 0, sizeof acc);
  cstrides(r, acc[0].st);
  cstrides(a, ast);
  for (int k = 0; k < r->ndim; k++) acc[1].st[k] = ast[in->attr[k]];
  copy_nest(c, in->res, in->args[0], r->ndim, r->dims, acc);
}

static void emit_broadcast(CgFunc *c, const Inst *in) {
  const Type *r = ty(c, in->res);
  Acc acc[2];
  memset(acc, 0, sizeof acc);
  cstrides(r, acc[0].st);
  bcast_strides(ty(c, in->args[0]), r, acc[1].st);
  copy_nest(c, in->res, in->args[0], r->ndim, r->dims, acc);
}

static void emit_slice(CgFunc *c, const Inst *in) {
  const Type *a = ty(c, in->args[0]), *r = ty(c, in->res);
  Acc acc[2];
  int64_t ast[IR_MAX_DIMS];
  memset(acc, 0, sizeof acc);
  cstrides(r, acc[0].st);
  cstrides(a, ast);
  for (int k = 0; k < r->ndim; k++) {
    acc[1].off += in->attr[2 * k] * ast[k];
    acc[1].st[k] = ast[k] * in->attr[2 * k + 1];
  }
  copy_nest(c, in->res, in->args[0], r->ndim, r->dims, acc);
}

/* Whether v reads a folded (strided) view: itself or through reshapes. */
static int reads_folded(CgFunc *c, ValId v) { return kn_root(c->f, c->s, v) != kn_root(c->f, NULL, v); }

/* Part v of a concatenation as its loop reads it: acc's offset and strides over v's shape, and
 * the value loaded: v, or for a folded slice or permute its root, read in place. */
static ValId part_acc(CgFunc *c, ValId v, Acc *acc) {
  KnLayout l;
  if (!cg_is_literal(c, v) && reads_folded(c, v) && kn_layout(c->f, c->s, v, &l) == 0) {
    acc->off = l.off;
    memcpy(acc->st, l.st, sizeof acc->st);
    return l.root;
  }
  acc->off = 0;
  cstrides(ty(c, v), acc->st);
  return v;
}

/* The parts k.. of a concatenation that lie at one stride in memory (a time loop's
 * outputs, one per step: its values are laid out so, kernels/reroll.c), of part k's type:
 * their count (1 when none follows alike, or inside a time loop), *d the stride in elements. */
static int alike_parts(CgFunc *c, const Inst *in, int k, int64_t *d) {
  if (c->over || cg_is_literal(c, in->args[k]) || reads_folded(c, in->args[k])) return 1;
  int b0, b;
  int64_t x0 = kn_value_addr(c->f, c->s, c->fp, in->args[k], &b0), es = (int64_t)ir_dtype_size(ty(c, in->args[k])->dtype);
  if (x0 < 0 || b0 == LOC_LOCAL || b0 == LOC_NONE) return 1;
  int n = 1;
  for (; k + n < in->nargs; n++) {
    ValId v = in->args[k + n];
    if (cg_is_literal(c, v) || reads_folded(c, v) || !ir_type_eq(ty(c, v), ty(c, in->args[k]))) break;
    int64_t x = kn_value_addr(c->f, c->s, c->fp, v, &b);
    if (x < 0 || b != b0 || (x - x0) % (es * n)) break;
    if (n == 1) *d = (x - x0) / es;
    if ((x - x0) / es != *d * n) break;
  }
  return n;
}

typedef struct ConcatU {
  const Inst *in;
  const ValId *src;   /* what each part loads (part_acc) */
} ConcatU;

static void concat_body(CgFunc *c, char idx[][IDX_CAP], void *up) {
  const ConcatU *u = up;
  const Inst *in = u->in;
  for (int k = 0; k < in->nargs; k++) {
    Buf e = {0};
    load(c, &e, u->src[k], idx[2 * k + 1]);
    LINE(c, "%s[%s] = %s;\n", cg_ref(c, in->res), idx[2 * k], e.s);
    cg_buf_free(&e);
  }
}

/* Parts all of one shape, none a literal, no run of them at one stride (alike_parts): one loop
 * nest over a part's shape storing every part (part k at k part-widths along axis ax). */
static int concat_one_nest(CgFunc *c, const Inst *in, int ax, const int64_t *rst) {
  const Type *a = ty(c, in->args[0]);
  for (int k = 0; k < in->nargs; k++) {
    int64_t d = 0;
    if (cg_is_literal(c, in->args[k]) || !ir_type_eq(ty(c, in->args[k]), a) || alike_parts(c, in, k, &d) >= KN_REROLL_MIN)
      return 0;
  }
  Acc *acc = calloc((size_t)(2 * in->nargs), sizeof *acc);
  ValId *src = calloc((size_t)in->nargs, sizeof *src);
  CHECK(acc && src);
  for (int k = 0; k < in->nargs; k++) {
    memcpy(acc[2 * k].st, rst, sizeof acc[2 * k].st);
    acc[2 * k].off = k * a->dims[ax] * rst[ax];
    src[k] = part_acc(c, in->args[k], &acc[2 * k + 1]);
  }
  LINE(c, "/* parts 0..%d: [%lld k, %lld (k + 1)) of axis %d for part k, in one loop nest */\n", in->nargs - 1,
       (ll)a->dims[ax], (ll)a->dims[ax], ax);
  ConcatU u = {in, src};
  cg_nest(c, a->ndim, a->dims, 2 * in->nargs, acc, concat_body, &u, 1, 1);
  free(acc);
  free(src);
  return 1;
}

static void emit_concat(CgFunc *c, const Inst *in) {
  const Type *r = ty(c, in->res);
  int ax = (int)in->attr[0];
  int64_t rst[IR_MAX_DIMS], at = 0;
  cstrides(r, rst);
  if (in->nargs > 1 && concat_one_nest(c, in, ax, rst)) return;
  for (int k = 0; k < in->nargs; k++) {
    const Type *a = ty(c, in->args[k]);
    Acc acc[2];
    memset(acc, 0, sizeof acc);
    memcpy(acc[0].st, rst, sizeof rst);
    acc[0].off = at * rst[ax];
    ValId src = part_acc(c, in->args[k], &acc[1]);
    if (k) cg_puts(c->out, "\n");
    int64_t d = 0;
    int n = alike_parts(c, in, k, &d);
    if (n < KN_REROLL_MIN) {
      LINE(c, "/* part %d: [%lld, %lld) of axis %d%s%s */\n", k, (ll)at, (ll)(at + a->dims[ax]), ax,
           src != in->args[k] ? ", read in place from " : "", src != in->args[k] ? c->cname[src] : "");
      copy_nest(c, in->res, src, a->ndim, a->dims, acc);
      at += a->dims[ax];
      continue;
    }
    /* parts k .. k + n - 1 as one loop: part k + t read at t * d, written t parts on */
    const char *tv = cg_name(c->ns, "t");
    const char **over = calloc((size_t)c->f->values.len + 1, sizeof *over);
    CHECK(over);
    over[in->args[k]] = arena_printf(c->p->arena, "(%s %c %s * %lld)", c->cname[in->args[k]], d < 0 ? '-' : '+', tv,
                                     (ll)(d < 0 ? -d : d));
    over[in->res] = arena_printf(c->p->arena, "(%s + %s * %lld)", c->cname[in->res], tv, (ll)(a->dims[ax] * rst[ax]));
    LINE(c, "/* parts %d..%d: [%lld, %lld) of axis %d, a part of %lld each */\n", k, k + n - 1, (ll)at,
         (ll)(at + n * a->dims[ax]), ax, (ll)a->dims[ax]);
    LINE(c, "for (int64_t %s = 0; %s < %d; %s++) {\n", tv, tv, n, tv);
    c->over = over;
    c->ind += 2;
    copy_nest(c, in->res, in->args[k], a->ndim, a->dims, acc);
    c->ind -= 2;
    c->over = NULL;
    free(over);
    LINE(c, "}\n");
    at += n * a->dims[ax];
    k += n - 1;
  }
}

static void emit_reshape(CgFunc *c, const Inst *in) {
  const Type *r = ty(c, in->res);
  if (cg_is_literal(c, in->args[0])) {   /* a scalar constant given a shape */
    Acc acc[2];
    memset(acc, 0, sizeof acc);
    cstrides(r, acc[0].st);
    copy_nest(c, in->res, in->args[0], r->ndim, r->dims, acc);
    return;
  }
  LINE(c, "memcpy(%s, %s, sizeof(%s) * %lld);\n", cg_ref(c, in->res), cg_ref(c, in->args[0]),
       cg_ctype(r->dtype), (ll)ir_numel(r));
}

static void emit_iota(CgFunc *c, const Inst *in) {
  const Type *r = ty(c, in->res);
  const char *y = cg_ref(c, in->res);
  Buf e = {0};
  if (in->attr[0]) cg_printf(&e, "%lld + ", (ll)in->attr[0]);
  if (in->attr[1] == 1) cg_puts(&e, "i");
  else cg_printf(&e, "i * %lld", (ll)in->attr[1]);
  LINE(c, "for (int64_t i = 0; i < %lld; i++) %s[i] = (%s)(%s);\n", (ll)r->dims[0], y, cg_ctype(r->dtype),
       e.s);
  cg_buf_free(&e);
}

/* Counter-based uniform random numbers: element i hashes offset + i + 1 with
 * splitmix64's finaliser and keeps the top 24 bits (exact in float). */
static void emit_rand_uniform(CgFunc *c, const Inst *in) {
  const Type *r = ty(c, in->res);
  const char *y = cg_ref(c, in->res);
  Buf off = {0};
  if (cg_is_literal(c, in->args[0])) cg_printf(&off, "%lld", (ll)def_of(c, in->args[0])->fattr);
  else cg_printf(&off, "%s[0]", cg_ref(c, in->args[0]));
  LINE(c, "for (int64_t i = 0; i < %lld; i++) {\n", (ll)ir_numel(r));
  LINE(c, "  uint64_t z = ((uint64_t)%s + (uint64_t)i + 1u) * 0x9E3779B97F4A7C15u;\n", off.s);
  LINE(c, "  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9u;\n");
  LINE(c, "  z = (z ^ (z >> 27)) * 0x94D049BB133111EBu;\n");
  LINE(c, "  %s[i] = (%s)((z ^ (z >> 31)) >> 40) * (%s)(1.0 / 16777216.0);\n", y, cg_ctype(r->dtype), cg_ctype(r->dtype));
  LINE(c, "}\n");
  cg_buf_free(&off);
}

/* ---- reductions --------------------------------------------------------------- */

/* The type float sums of dtype t accumulate in: double (PyTorch's accuracy or
 * better), float in --freestanding f32 code (Kernels.float_acc). */

static const char *acc_type_k(const Kernels *k, const Inst *in, DType t) {
  if (in->op == IR_REDUCE_MAX) return cg_ctype(t);
  return ir_dtype_is_float(t) ? float_acc(k, t) : "uint64_t";   /* integer sums wrap, never UB */
}
#define acc_type(in, t) acc_type_k(c->k, (in), (t))


/* "acc += x[...]" or the NaN-propagating max update, as one statement. */
static void acc_update(CgFunc *c, const Inst *in, const char *accv, const char *x) {
  DType t = ty(c, in->res)->dtype;
  if (in->op == IR_REDUCE_SUM) LINE(c, "%s += %s;\n", accv, x);
  else if (ir_dtype_is_float(t))
    LINE(c, "{ const %s v = %s; if (v > %s || isnan(v)) %s = v; }\n", cg_ctype(t), x, accv, accv);
  else LINE(c, "if (%s > %s) %s = %s;\n", x, accv, accv, x);
}

/* A float reduction of the contiguous row `ptr[0..n)` through ctc_sum/ctc_max:
 * "acc op ctc_sum_f32(ptr, n);" (op "=" or "+=" for sums; a max combines); the
 * length is the expression len where it is not NULL (a row's chunk: "jn").
 * 0 (nothing emitted) for integers, which accumulate in order. */
static int lane_reduce(CgFunc *c, const Inst *in, const char *accv, const char *op, const char *ptr, const char *len,
                       int64_t n) {
  DType t = ty(c, in->res)->dtype;
  if (!ir_dtype_is_float(t)) return 0;
  const char *sfx = cg_dt_suffix(t);
  char nb[32];
  if (!len) snprintf(nb, sizeof nb, "%lld", (ll)n), len = nb;
  if (in->op == IR_REDUCE_SUM) {
    c->k->sum[t] = 1;
    LINE(c, "%s %s ctc_sum_%s(%s, %s);\n", accv, op, sfx, ptr, len);
  } else if (!strcmp(op, "=")) {
    c->k->max[t] = 1;
    LINE(c, "%s = ctc_max_%s(%s, %s);\n", accv, sfx, ptr, len);
  } else {
    c->k->max[t] = 1;
    char x[256];
    snprintf(x, sizeof x, "ctc_max_%s(%s, %s)", sfx, ptr, len);
    acc_update(c, in, accv, x);
  }
  return 1;
}

static void add_var(char vars[][16], int64_t *st, int *n, const char *name, int64_t stride) {
  snprintf(vars[*n], 16, "%s", name);
  st[(*n)++] = stride;
}

static void emit_reduce(CgFunc *c, const Inst *in) {
  const Type *a = ty(c, in->args[0]), *r = ty(c, in->res);
  DType t = r->dtype;
  const char *ct = cg_ctype(t), *at = acc_type(in, t), *init = acc_init(in, t);
  /* Coalesce the operand's axes into alternating runs of kept and reduced ones. */
  int64_t d[IR_MAX_DIMS], st[IR_MAX_DIMS];
  int red[IR_MAX_DIMS], n = 0;
  for (int k = 0; k < a->ndim; k++) {
    if (a->dims[k] == 1) continue;
    int rk = (int)((in->attr[0] >> k) & 1);
    if (n && red[n - 1] == rk) {
      d[n - 1] *= a->dims[k];
      continue;
    }
    d[n] = a->dims[k];
    red[n++] = rk;
  }
  int nred = 0;
  for (int k = n - 1; k >= 0; k--) st[k] = k == n - 1 ? 1 : st[k + 1] * d[k + 1];
  for (int k = 0; k < n; k++) nred += red[k];
  if (!nred || cg_is_literal(c, in->args[0])) {   /* nothing to reduce: a copy */
    Acc acc[2];
    memset(acc, 0, sizeof acc);
    cstrides(r, acc[0].st);
    cstrides(a, acc[1].st);
    copy_nest(c, in->res, in->args[0], r->ndim, r->dims, acc);
    return;
  }
  const char *x = cg_ref(c, in->args[0]), *y = cg_ref(c, in->res);
  char kvar[IR_MAX_DIMS][16], rvar[IR_MAX_DIMS][16];
  int64_t kd[IR_MAX_DIMS], kst[IR_MAX_DIMS], kost[IR_MAX_DIMS], rd[IR_MAX_DIMS], rst[IR_MAX_DIMS];
  int nk = 0, nr = 0;
  for (int k = 0; k < n; k++) {
    if (red[k]) rd[nr] = d[k], rst[nr++] = st[k];
    else kd[nk] = d[k], kst[nk++] = st[k];
  }
  for (int k = nk - 1; k >= 0; k--) kost[k] = k == nk - 1 ? 1 : kost[k + 1] * kd[k + 1];
  int column = !red[n - 1];   /* the innermost axis is kept: accumulate rows of it */
  int nouter = column ? nk - 1 : nk;
  for (int k = 0; k < nk; k++) snprintf(kvar[k], 16, "i%d", k);
  for (int k = 0; k < nr; k++) snprintf(rvar[k], 16, "r%d", k);
  /* columns in chunks of 64 accumulators, which the compiler keeps in registers over the rows, the
   * loop over a chunk's columns unrolled (a bias's gradient, the sum over 1024 rows of [1024, 1024],
   * 1 thread: 336 -> 192 us with chunks of 32, AVX2; unrolled chunks of 64, Zen 4, from the cache:
   * 207 -> 113 us AVX-512, 174-258 -> 111 AVX2; in the bench gpt's step, where the gradient comes
   * from L3 or memory, 429 -> 395 us; chunks of 256 were kept in memory, a store and a load each
   * row). --freestanding keeps rolled chunks of 32 (a microcontroller's code size). Every chunk is
   * whole, a constant bound: where the chunk does not divide the row, the last one ends at the row's
   * end, over part of the one before, and stores only the columns past it (the same sums in the same
   * order either way) */
  const int64_t cw = c->k->freestanding ? 32 : 64;
  int64_t inner = column ? kd[nk - 1] : 1, chunk = inner > cw ? cw : inner;
  int chunked = column && inner > chunk, ragged = chunked && inner % chunk;
  int64_t outer_count = nouter ? kd[0] : chunked ? (inner + chunk - 1) / chunk : 1;
  cg_par_open(c, outer_count > 1 && ir_numel(a) >= min_work(c) ? CG_PAR_OMP : 0);
  int base = c->ind;
  for (int k = 0; k < nouter; k++) {
    LINE(c, "for (int64_t %s = 0; %s < %lld; %s++)%s\n", kvar[k], kvar[k], (ll)kd[k], kvar[k],
         k == nouter - 1 && !chunked ? " {" : "");
    c->ind += 2;
  }
  if (ragged) {
    LINE(c, "for (int64_t c0 = 0; c0 < %lld; c0++) {   /* chunks of %lld columns */\n", (ll)((inner + chunk - 1) / chunk),
         (ll)chunk);
    c->ind += 2;
    LINE(c, "const int64_t j0 = c0 < %lld ? c0 * %lld : %lld;   /* the last ends at the row's end */\n",
         (ll)(inner / chunk), (ll)chunk, (ll)(inner - chunk));
  } else if (chunked) {
    LINE(c, "for (int64_t j0 = 0; j0 < %lld; j0 += %lld) {\n", (ll)inner, (ll)chunk);
    c->ind += 2;
  } else if (!nouter) {
    LINE(c, "{\n");
    c->ind += 2;
  }
  /* Index expressions: x over outer kept + reduced (+ column j), y over kept. */
  char xi[IDX_CAP], yi[IDX_CAP], jv[32], lim[32];
  int64_t xs[2 * IR_MAX_DIMS + 2];
  char vars[2 * IR_MAX_DIMS + 2][16];
  int nv = 0;
  for (int k = 0; k < nouter; k++) add_var(vars, xs, &nv, kvar[k], kst[k]);
  for (int k = 0; k < nr; k++) add_var(vars, xs, &nv, rvar[k], rst[k]);
  if (chunked) add_var(vars, xs, &nv, "j0", 1);
  if (column) add_var(vars, xs, &nv, "j", 1);
  index_expr(xi, nv, vars, 0, xs);
  nv = 0;
  for (int k = 0; k < nouter; k++) add_var(vars, xs, &nv, kvar[k], kost[k]);
  if (chunked) add_var(vars, xs, &nv, "j0", 1);
  if (column) add_var(vars, xs, &nv, "j", 1);
  index_expr(yi, nv, vars, 0, xs);
  if (column) {
    snprintf(jv, sizeof jv, "acc[j]");
    snprintf(lim, sizeof lim, "%lld", (ll)(chunked ? chunk : inner));
    LINE(c, "%s acc[%lld];\n", at, (ll)chunk);
    LINE(c, "for (int64_t j = 0; j < %s; j++) acc[j] = %s;\n", lim, init);
  } else {
    snprintf(jv, sizeof jv, "acc");
    LINE(c, "%s acc = %s;\n", at, init);
  }
  int rbase = c->ind;
  /* a float reduction whose innermost reduced axis is contiguous: ctc_sum/ctc_max per run */
  if (!column && ir_dtype_is_float(t) && rst[nr - 1] == 1) {
    nv = 0;
    for (int k = 0; k < nouter; k++) add_var(vars, xs, &nv, kvar[k], kst[k]);
    for (int k = 0; k < nr - 1; k++) add_var(vars, xs, &nv, rvar[k], rst[k]);
    char xr[IDX_CAP + 64];
    /* a sum over two or more runs: the last two in one ctc_sum_runs call (its lanes go on across
     * the runs: BatchNorm's statistics over N and H W) */
    const int runs = in->op == IR_REDUCE_SUM && nr >= 2;
    if (runs) nv--;
    index_expr(xi, nv, vars, 0, xs);
    snprintf(xr, sizeof xr, "&%s[%s]", x, xi);
    for (int k = 0; k < nr - 1 - runs; k++) {
      LINE(c, "for (int64_t %s = 0; %s < %lld; %s++)\n", rvar[k], rvar[k], (ll)rd[k], rvar[k]);
      c->ind += 2;
    }
    if (runs) {
      c->k->sum[t] = 1;
      LINE(c, "acc %s ctc_sum_runs_%s(%s, %lld, %lld, %lld);\n", nr == 2 ? "=" : "+=", cg_dt_suffix(t), xr,
           (ll)rd[nr - 1], (ll)rd[nr - 2], (ll)rst[nr - 2]);
    } else {
      lane_reduce(c, in, "acc", nr == 1 ? "=" : "+=", xr, NULL, rd[nr - 1]);
    }
  } else {
    for (int k = 0; k < nr; k++) {
      LINE(c, "for (int64_t %s = 0; %s < %lld; %s++)\n", rvar[k], rvar[k], (ll)rd[k], rvar[k]);
      c->ind += 2;
    }
    char xe[IDX_CAP + 64];
    snprintf(xe, sizeof xe, "%s[%s]", x, xi);
    if (column) {
      if (!c->k->freestanding) LINE(c, "#pragma GCC unroll %s\n", lim);
      LINE(c, "for (int64_t j = 0; j < %s; j++)\n", lim);
      c->ind += 2;
    }
    acc_update(c, in, jv, xe);
  }
  c->ind = rbase;
  char cast[64] = "";
  if (strcmp(at, ct)) snprintf(cast, sizeof cast, "(%s)", ct);
  if (ragged)   /* (the last chunk: the columns the one before did not store) */
    LINE(c, "for (int64_t j = c0 * %lld - j0; j < %s; j++) %s[%s] = %sacc[j];\n", (ll)chunk, lim, y, yi, cast);
  else if (column)
    LINE(c, "for (int64_t j = 0; j < %s; j++) %s[%s] = %sacc[j];\n", lim, y, yi, cast);
  else LINE(c, "%s[%s] = %sacc;\n", y, yi, cast);
  c->ind -= 2;
  LINE(c, "}\n");
  c->ind = base;
  cg_par_close(c);
}

/* ---- embedding ---------------------------------------------------------------------- */

static void emit_embedding(CgFunc *c, const Inst *in) {
  const Type *w = ty(c, in->args[0]), *ix = ty(c, in->args[1]);
  int64_t V = w->dims[0], D = w->dims[1], n = ir_numel(ix);
  const char *ct = cg_ctype(w->dtype), *ws = cg_ref(c, in->args[0]), *ys = cg_ref(c, in->res);
  Buf e = {0};
  load(c, &e, in->args[1], "i");
  LINE(c, "for (int64_t i = 0; i < %lld; i++) {\n", (ll)n);
  c->ind += 2;
  LINE(c, "const int64_t ix = %s;   /* in [0, %lld): checked before the kernel */\n", e.s, (ll)V);
  LINE(c, "memcpy(%s + i * %lld, %s + ix * %lld, sizeof(%s) * %lld);\n", ys, (ll)D, ws, (ll)D, ct, (ll)D);
  c->ind -= 2;
  LINE(c, "}\n");
  cg_buf_free(&e);
}

/* dw = 0; then g's rows added at their indices, in index order. */
static void emit_embedding_bwd(CgFunc *c, const Inst *in) {
  const Type *ix = ty(c, in->args[0]), *r = ty(c, in->res);
  int64_t V = r->dims[0], D = r->dims[1], n = ir_numel(ix);
  const char *ct = cg_ctype(r->dtype), *gs = cg_ref(c, in->args[1]), *ds = cg_ref(c, in->res);
  Buf e = {0};
  load(c, &e, in->args[0], "i");
  LINE(c, "memset(%s, 0, sizeof(%s) * %lld);\n", ds, ct, (ll)ir_numel(r));
  LINE(c, "for (int64_t i = 0; i < %lld; i++) {\n", (ll)n);
  c->ind += 2;
  LINE(c, "const int64_t ix = %s;   /* in [0, %lld): checked before the kernel */\n", e.s, (ll)V);
  if (in->attr[0]) LINE(c, "if (ix == %lld) continue;   /* padding_idx: no gradient */\n", (ll)in->attr[1]);
  LINE(c, "for (int64_t d = 0; d < %lld; d++) %s[ix * %lld + d] += %s[i * %lld + d];\n", (ll)D, ds, (ll)D, gs,
       (ll)D);
  c->ind -= 2;
  LINE(c, "}\n");
  cg_buf_free(&e);
}

/* result = 0, then g at the positions SLICE with the same attributes reads. */
static void emit_unslice(CgFunc *c, const Inst *in) {
  const Type *g = ty(c, in->args[0]), *r = ty(c, in->res);
  Acc acc[2];
  int64_t rst[IR_MAX_DIMS];
  int covers = 1;
  memset(acc, 0, sizeof acc);
  cstrides(r, rst);
  cstrides(g, acc[1].st);
  for (int k = 0; k < g->ndim; k++) {
    acc[0].off += in->attr[2 * k] * rst[k];
    acc[0].st[k] = rst[k] * in->attr[2 * k + 1];
    covers &= g->dims[k] == r->dims[k];   /* then start 0, step 1 (verified in range) */
  }
  if (!covers) LINE(c, "memset(%s, 0, sizeof(%s) * %lld);\n", cg_ref(c, in->res), cg_ctype(r->dtype), (ll)ir_numel(r));
  copy_nest(c, in->res, in->args[0], g->ndim, g->dims, acc);
}

/* ---- index checks ------------------------------------------------------------------ */

int cg_index_operand(const Func *f, const Inst *in, ValId *idx, int64_t *bound) {
  const Type *r = &f->values.data[in->res].type;
  switch (in->op) {
  case IR_EMBEDDING: *idx = in->args[1], *bound = f->values.data[in->args[0]].type.dims[0]; return 1;
  case IR_EMBEDDING_BWD: *idx = in->args[0], *bound = r->dims[0]; return 1;
  case IR_GATHER: *idx = in->args[1], *bound = f->values.data[in->args[0]].type.dims[in->attr[0]]; return 1;
  case IR_SCATTER_ADD: *idx = in->args[1], *bound = r->dims[in->attr[0]]; return 1;
  default: return 0;
  }
}

int cg_index_needs_check(const Func *f, const Inst *in, int64_t *checked) {
  ValId v;
  int64_t bound;
  if (!cg_index_operand(f, in, &v, &bound)) return 0;
  if (checked[v] && checked[v] <= bound) return 0;   /* an earlier check covers it */
  const Inst *d = NULL;
  for (ValId u = v;;) {   /* an iota seen through views of it: its values are known */
    const Value *val = &f->values.data[u];
    d = val->kind == V_INST && val->def >= 0 ? &f->insts.data[val->def] : NULL;
    if (!d || (d->op != IR_RESHAPE && d->op != IR_BROADCAST)) break;
    u = d->args[0];
  }
  if (d && d->op == IR_IOTA) {
    int64_t n = ir_numel(&f->values.data[d->res].type), a = d->attr[0], b = d->attr[0] + (n - 1) * d->attr[1];
    if (a >= 0 && a < bound && b >= 0 && b < bound) return 0;
  }
  if (d && d->op == IR_CONST && d->fattr >= 0 && d->fattr < (double)bound) return 0;
  checked[v] = bound;
  return 1;
}

/* ---- one instruction ----------------------------------------------------------------- */

/* The instruction's comment: "model.py:17  conv2d(x, conv1_weight) stride 1x1 -> conv1 f32[...]". */
static void comment(CgFunc *c, const Inst *in) {
  char where[256], tb[256];
  Buf b = {0};
  cg_where(where, sizeof where, in->loc);
  if (where[0]) cg_printf(&b, "%s  ", where);
  cg_printf(&b, "%s(", ir_ops[in->op].name);
  for (int k = 0; k < in->nargs; k++) {
    if (k) cg_puts(&b, ", ");
    if (cg_is_literal(c, in->args[k]))
      cg_literal(&b, ty(c, in->args[k])->dtype, def_of(c, in->args[k])->fattr);
    else cg_puts(&b, c->cname[in->args[k]]);
    if (in->op == IR_MATMUL && in->attr[k]) cg_puts(&b, "^T");
    KnLayout l;
    int strided_reader = in->op == IR_MATMUL || in->op == IR_ATTENTION || in->op == IR_ATTENTION_BWD ||
                         in->op == IR_CONCAT || ir_ops[in->op].kind == K_ELEM;
    if (strided_reader && reads_folded(c, in->args[k]) && kn_layout(c->f, c->s, in->args[k], &l) == 0)
      cg_printf(&b, " (in %s)", c->cname[l.root]);   /* a strided view: read in place from its root */
  }
  cg_puts(&b, ")");
  const int64_t *a = in->attr;
  int na = ir_nattrs(c->f, in);
  switch (in->op) {
  case IR_REDUCE_SUM: case IR_REDUCE_MAX:
    cg_puts(&b, " over axes");
    for (int k = 0; k < IR_MAX_DIMS; k++)
      if ((a[0] >> k) & 1) cg_printf(&b, " %d", k);
    break;
  case IR_PERMUTE:
    cg_puts(&b, " to axes");
    for (int k = 0; k < na; k++) cg_printf(&b, " %lld", (ll)a[k]);
    break;
  case IR_SLICE:
    cg_puts(&b, " start:step");
    for (int k = 0; k < na / 2; k++) cg_printf(&b, " %lld:%lld", (ll)a[2 * k], (ll)a[2 * k + 1]);
    break;
  case IR_CONCAT: cg_printf(&b, " on axis %lld", (ll)a[0]); break;
  case IR_IOTA: cg_printf(&b, " start %lld step %lld", (ll)a[0], (ll)a[1]); break;
  case IR_CONV2D: case IR_CONV2D_BWD_INPUT: case IR_CONV2D_BWD_WEIGHT:
    cg_printf(&b, " stride %lldx%lld pad %lldx%lld dilation %lldx%lld", (ll)a[0], (ll)a[1], (ll)a[2], (ll)a[3],
              (ll)a[4], (ll)a[5]);
    if (a[6] > 1) cg_printf(&b, " groups %lld", (ll)a[6]);
    break;
  case IR_PAD: case IR_PAD_BWD: {
    static const char *const modes[] = {"constant", "reflect", "replicate"};
    cg_printf(&b, " %s", a[0] >= 0 && a[0] <= 2 ? modes[a[0]] : "?");
    if (in->op == IR_PAD && a[0] == 0) {
      cg_puts(&b, " ");
      cg_literal(&b, ty(c, in->res)->dtype, in->fattr);
    }
    cg_puts(&b, " before");
    for (int k = 1; k < na; k++) cg_printf(&b, " %lld", (ll)a[k]);
    break;
  }
  case IR_UPSAMPLE: case IR_UPSAMPLE_BWD:
    cg_printf(&b, " %s%s scale %g x %g", a[0] ? "bilinear" : "nearest", a[1] ? " align_corners" : "",
              attr_double(a[2]), attr_double(a[3]));
    break;
  case IR_UNSLICE:
    cg_puts(&b, " start:step");
    for (int k = 0; k < na / 2; k++) cg_printf(&b, " %lld:%lld", (ll)a[2 * k], (ll)a[2 * k + 1]);
    break;
  case IR_MAXPOOL2D: case IR_MAXPOOL2D_BWD: case IR_MAXPOOL2D_JVP:
    cg_printf(&b, " kernel %lldx%lld stride %lldx%lld pad %lldx%lld dilation %lldx%lld", (ll)a[0], (ll)a[1],
              (ll)a[2], (ll)a[3], (ll)a[4], (ll)a[5], (ll)a[6], (ll)a[7]);
    break;
  case IR_AVGPOOL2D: case IR_AVGPOOL2D_BWD:
    cg_printf(&b, " kernel %lldx%lld stride %lldx%lld pad %lldx%lld%s", (ll)a[0], (ll)a[1], (ll)a[2], (ll)a[3],
              (ll)a[4], (ll)a[5], a[6] ? " count_include_pad" : "");
    break;
  case IR_MATMUL: break;   /* the ^T marks above */
  default:   /* the others as the IR printer writes them */
    for (int k = 0; k < na; k++) cg_printf(&b, "%s%lld", k ? "," : " [", (ll)a[k]);
    if (na) cg_puts(&b, "]");
    break;
  }
  cg_printf(&b, " -> %s %s", c->cname[in->res], ir_type_str(ty(c, in->res), tb, sizeof tb));
  if (ir_is_view(c->f, in->res)) cg_puts(&b, ": a view, no code");
  else if (c->s->fold[in->res]) cg_puts(&b, ": a strided view, no code (its readers index it in place)");
  /* A comment must not be closed early by the text inside it. */
  for (char *s = b.s; (s = strstr(s, "*/")) != NULL;) s[1] = '|';
  LINE(c, "/* %s */\n", b.s);
  cg_buf_free(&b);
}

/* Kernel k as a slice with no code (a view, or a strided view its readers index in place), else NULL. */
static const Inst *view_slice(CgFunc *c, int k) {
  const Kernel *kn = &c->s->kernels.data[k];
  if (kn->kind != KN_VIEW || kn->first != kn->last) return NULL;
  const Inst *in = &c->f->insts.data[kn->first];
  if (in->op != IR_SLICE || cg_is_literal(c, in->args[0])) return NULL;
  return ir_is_view(c->f, in->res) || c->s->fold[in->res] ? in : NULL;
}

int cg_emit_view_run(CgFunc *c, int k, int end) {
  const Inst *in0 = view_slice(c, k);
  if (!in0) return 0;
  int na = ir_nattrs(c->f, in0), ax = -1, n = 1;
  int64_t step = 0;
  char w0[256], w[256];
  cg_where(w0, sizeof w0, in0->loc);
  for (; k + n < end; n++) {
    const Inst *in = view_slice(c, k + n);
    if (!in || in->args[0] != in0->args[0] || ir_nattrs(c->f, in) != na || !ir_type_eq(ty(c, in->res), ty(c, in0->res)) ||
        ir_is_view(c->f, in->res) != ir_is_view(c->f, in0->res))
      break;
    cg_where(w, sizeof w, in->loc);
    int moved = -1, same = !strcmp(w, w0);   /* the one axis whose start moves */
    for (int j = 0; j < na / 2 && same; j++) {
      same = in->attr[2 * j + 1] == in0->attr[2 * j + 1];
      if (in->attr[2 * j] != in0->attr[2 * j]) same = same && moved < 0, moved = j;
    }
    if (!same || moved < 0 || (n > 1 && moved != ax)) break;
    if (n == 1) ax = moved, step = in->attr[2 * ax] - in0->attr[2 * ax];
    if (in->attr[2 * ax] - in0->attr[2 * ax] != step * n) break;
  }
  if (n < KN_REROLL_MIN) return 0;
  const Inst *last = &c->f->insts.data[c->s->kernels.data[k + n - 1].first];
  char tb[256];
  Buf b = {0};
  if (w0[0]) cg_printf(&b, "%s  ", w0);
  cg_printf(&b, "slice(%s) start:step", c->cname[in0->args[0]]);
  for (int j = 0; j < na / 2; j++) {
    if (j == ax && step == 1) cg_printf(&b, " %lld..%lld", (ll)in0->attr[2 * j], (ll)last->attr[2 * j]);
    else if (j == ax) cg_printf(&b, " %lld..%lld by %lld", (ll)in0->attr[2 * j], (ll)last->attr[2 * j], (ll)step);
    else cg_printf(&b, " %lld", (ll)in0->attr[2 * j]);
    cg_printf(&b, ":%lld", (ll)in0->attr[2 * j + 1]);
  }
  cg_printf(&b, " -> %s..%s %s each: %d %s, no code", c->cname[in0->res], c->cname[last->res],
            ir_type_str(ty(c, in0->res), tb, sizeof tb), n,
            ir_is_view(c->f, in0->res) ? "views" : "strided views (their readers index them in place)");
  for (char *s = b.s; (s = strstr(s, "*/")) != NULL;) s[1] = '|';
  if (c->out->len) cg_puts(c->out, "\n");
  LINE(c, "/* %s */\n", b.s);
  cg_buf_free(&b);
  return n;
}

void cg_emit_kernel(CgFunc *c, int k) {
  const Kernel *kn = &c->s->kernels.data[k];
  int nep = 0;   /* a KN_GEMM's epilogue ops (none: a plain GEMM) */
  if (kn->kind == KN_GEMM) kn_epilogue(c->p, c->f, kn, &nep);
  if (kn->kind != KN_ELEM && kn->kind != KN_ROW && !nep) {
    for (int i = kn->first; i <= kn->last; i++) cg_emit_inst(c, i);
    return;
  }
  char tb[256];
  int nops = 0;
  for (int i = kn->first; i <= kn->last; i++) nops += c->f->insts.data[i].op != IR_CONST;
  if (c->out->len) cg_puts(c->out, "\n");
  if (nops > 1 || kn->kind == KN_ROW) {
    Buf b = {0};
    if (kn->kind == KN_ROW)
      cg_printf(&b, "kernel %d: %d ops fused per row of %s (%d loop%s over each row), stores", k, nops,
                ir_type_str(&kn->space, tb, sizeof tb), kn->nloops, kn->nloops == 1 ? "" : "s");
    else if (kn->kind == KN_GEMM)
      cg_printf(&b, "kernel %d: a GEMM over %s and its epilogue of %d elementwise op%s, per thread's block, stores", k,
                ir_type_str(&kn->space, tb, sizeof tb), nep, nep == 1 ? "" : "s");
    else
      cg_printf(&b, "kernel %d: %d elementwise ops fused over %s, stores", k, nops, ir_type_str(&kn->space, tb, sizeof tb));
    for (int j = 0; j < kn->outputs.len; j++) cg_printf(&b, "%s %s", j ? "," : "", c->cname[kn->outputs.data[j]]);
    if (!kn->outputs.len) cg_puts(&b, " nothing");
    for (char *t = b.s; (t = strstr(t, "*/")) != NULL;) t[1] = '|';
    LINE(c, "/* %s */\n", b.s);
    cg_buf_free(&b);
  }
  for (int i = kn->first; i <= kn->last; i++)
    if (c->f->insts.data[i].op != IR_CONST) comment(c, &c->f->insts.data[i]);
  if (kn->kind == KN_GEMM) cg_emit_gemm_kernel(c, kn);   /* linalg_c.c */
  else cg_render_kernel_c(c, kn);   /* KN_ELEM, KN_ROW: their kernel IR (render_c.c) */
}

/* ---- the emitter table ---------------------------------------------------------------
 * Generated from ops.def: K_ELEM and K_REDUCE rows share the generic emitters,
 * every other row names emit_<ID>, so a primitive without an emitter does not
 * compile. */

/* PAD, GATHER, UPSAMPLE, CUMSUM, ARGMAX, SCATTER_ADD: their kernel IR (kernels/kir_ops.c)
 * through the C renderer. */
static void emit_kir_op(CgFunc *c, const Inst *in) {
  if (cg_render_op_c(c, in) < 0) BUG("codegen_c: no kernel IR for %s", ir_ops[in->op].name);
}

typedef void (*Emitter)(CgFunc *c, int i, const Inst *in);
#define EMITTER(ID, call) \
  static void emit_##ID(CgFunc *c, int i, const Inst *in) { (void)c; (void)i; (void)in; call; }
EMITTER(ELEM, emit_elem(c, in))
EMITTER(REDUCE, emit_reduce(c, in))
EMITTER(CONST, (void)0)   /* never called: a literal where it is used */
EMITTER(IOTA, emit_iota(c, in))
EMITTER(RAND_UNIFORM, emit_rand_uniform(c, in))
EMITTER(RESHAPE, emit_reshape(c, in))
EMITTER(DETACH, emit_reshape(c, in))
EMITTER(PERMUTE, emit_permute(c, in))
EMITTER(BROADCAST, emit_broadcast(c, in))
EMITTER(SLICE, emit_slice(c, in))
EMITTER(CONCAT, emit_concat(c, in))
EMITTER(MATMUL, cg_emit_call(c, i))   /* its kernel IR (kernels/gemm.c) */
EMITTER(CONV2D, cg_emit_call(c, i))   /* its kernel IR (kernels/conv.c) */
EMITTER(MAXPOOL2D, cg_emit_pool(c, in))
EMITTER(AVGPOOL2D, cg_emit_pool(c, in))
EMITTER(EMBEDDING, emit_embedding(c, in))
EMITTER(UNSLICE, emit_unslice(c, in))
EMITTER(CONV2D_BWD_INPUT, cg_emit_call(c, i))
EMITTER(CONV2D_BWD_WEIGHT, cg_emit_call(c, i))
EMITTER(MAXPOOL2D_BWD, cg_emit_maxpool_bwd(c, in))
EMITTER(MAXPOOL2D_JVP, cg_emit_maxpool_bwd(c, in))
EMITTER(AVGPOOL2D_BWD, cg_emit_avgpool_bwd(c, in))
EMITTER(EMBEDDING_BWD, emit_embedding_bwd(c, in))
EMITTER(PAD, emit_kir_op(c, in))
EMITTER(PAD_BWD, cg_emit_pad_bwd(c, in))
EMITTER(UPSAMPLE, emit_kir_op(c, in))
EMITTER(UPSAMPLE_BWD, cg_emit_upsample_bwd(c, in))
EMITTER(CUMSUM, emit_kir_op(c, in))
EMITTER(ARGMAX, emit_kir_op(c, in))
EMITTER(GATHER, emit_kir_op(c, in))
EMITTER(SCATTER_ADD, emit_kir_op(c, in))
EMITTER(ATTENTION, cg_emit_call(c, i))   /* attn_c.c */
EMITTER(ATTENTION_BWD, cg_emit_call(c, i))

#define EMITTER_K_ELEM(id) emit_ELEM
#define EMITTER_K_REDUCE(id) emit_REDUCE
#define EMITTER_K_SHAPE(id) emit_##id
#define EMITTER_K_LINALG(id) emit_##id
#define EMITTER_K_CONST(id) emit_##id
#define EMITTER_K_SPECIAL(id) emit_##id
static const Emitter cg_emitters[IR__COUNT] = {
#define OP(id, name, nargs, kind, nattr, cexpr) EMITTER_##kind(id),
#define EW(id, name, nargs, cexpr, dA, dB) emit_ELEM,
#include "../ir/ops.def"
#undef OP
};

void cg_emit_inst(CgFunc *c, int i) {
  const Inst *in = &c->f->insts.data[i];
  if (in->op == IR_CONST) return;   /* written as a literal where it is used */
  if (c->out->len) cg_puts(c->out, "\n");
  comment(c, in);
  if (ir_is_view(c->f, in->res) || c->s->fold[in->res]) return;
  cg_emitters[in->op](c, i, in);
}

/* ---- shared with codegen_cuda/ (cg_int.h) ------------------------------------------- */

void cg_elem_expr(CgFunc *c, const Inst *in, const char *const *txt, Buf *e) { elem_expr(c, in, txt, e); }
void cg_comment(CgFunc *c, const Inst *in) { comment(c, in); }
const char *cg_acc_type(const Inst *in, DType t) { return acc_type_k(NULL, in, t); }
const char *cg_acc_type_k(const Kernels *k, const Inst *in, DType t) { return acc_type_k(k, in, t); }
const char *cg_sum_type(const Kernels *k, DType t) { return ir_dtype_is_float(t) ? float_acc(k, t) : "uint64_t"; }
int cg_lane_reduce(CgFunc *c, const Inst *in, const char *accv, const char *op, const char *ptr, const char *len,
                   int64_t n) {
  return lane_reduce(c, in, accv, op, ptr, len, n);
}
void cg_index_expr(char *out, size_t cap, int n, char var[][16], int64_t off, const int64_t *st) {
  CHECK(cap >= IDX_CAP);
  index_expr(out, n, var, off, st);
}
const char *cg_acc_init(const Inst *in, DType t) { return acc_init(in, t); }
void cg_acc_update(CgFunc *c, const Inst *in, const char *accv, const char *x) { acc_update(c, in, accv, x); }
void cg_bcast_strides(const Type *a, const Type *r, int64_t *st) { bcast_strides(a, r, st); }
