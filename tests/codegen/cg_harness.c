/* cg_harness.c - builds small IR programs covering every primitive, runs
 * DCE + memory planning + the C emitter on them, and writes for each suite
 *
 *   OUT/<suite>/<suite>.c, <suite>.h   the generated model
 *   OUT/<suite>/manifest.json         entries, inputs (with a distribution to
 *                                     draw them from), outputs, parameters
 *
 * test_codegen.py compiles the models with the runtime, runs each entry and
 * compares with numpy, or with PyTorch's autograd for the gradient primitives
 * (suite grad); suite train is a training step with parameter updates and
 * optimizer state. The harness also checks the memory plan itself: no two
 * tensors live at the same time share bytes, an instruction's result never
 * overlaps its operands or scratch, every offset is 64-byte aligned.
 *
 * usage: cg_harness OUTDIR */
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include "../../codegen_c/codegen_c.h"

/* ---- building programs ---------------------------------------------------- */

typedef struct H {
  Arena *a;
  SrcFile *src;
  Program *p;
  Func *f;
  int line;                 /* source line given to the next instruction */
  const char *dist[64];     /* per input of f: how test_codegen.py draws it */
  FILE *man;                /* manifest being written */
  int nentries;
} H;

static H h;

static Span L(void) {
  Span s = {h.src, h.line, 1, h.line, 2};
  return s;
}

static Type ty(DType dt, int nd, ...) {
  Type t = {0};
  va_list ap;
  va_start(ap, nd);
  t.dtype = dt;
  t.ndim = nd;
  for (int i = 0; i < nd; i++) t.dims[i] = va_arg(ap, int);
  va_end(ap);
  return t;
}

static Type tyof(ValId v) { return *ir_type(h.f, v); }

static ValId emit(Op op, const ValId *args, int nargs, Type res, const int64_t *attr, int nattr, const char *name) {
  h.line++;
  return ir_emit(h.p, h.f, op, args, nargs, res, attr, nattr, 0, L(), name);
}

static ValId input(const char *name, Type t, const char *dist) {
  h.dist[h.f->inputs.len] = dist;
  return ir_add_input(h.p, h.f, name, t);
}

static ValId cst(DType dt, double v) { return ir_const(h.p, h.f, dt, v, L()); }

static ValId un(Op op, ValId a, const char *name) { return emit(op, &a, 1, tyof(a), NULL, 0, name); }

static ValId cast(ValId a, DType dt, const char *name) {
  Type t = tyof(a);
  t.dtype = dt;
  return emit(IR_CAST, &a, 1, t, NULL, 0, name);
}

static ValId bin(Op op, ValId a, ValId b, const char *name) {
  Type ta = tyof(a), tb = tyof(b), r;
  CHECK(ir_broadcast_shapes(&ta, &tb, &r) == 0);
  r.dtype = op >= IR_CMP_EQ && op <= IR_CMP_GE ? DT_BOOL : ta.dtype;
  ValId args[2] = {a, b};
  return emit(op, args, 2, r, NULL, 0, name);
}

static ValId where(ValId c, ValId a, ValId b, const char *name) {
  Type t1 = tyof(c), t2 = tyof(a), t3 = tyof(b), r;
  CHECK(ir_broadcast_shapes(&t1, &t2, &r) == 0);
  CHECK(ir_broadcast_shapes(&r, &t3, &r) == 0);
  r.dtype = t2.dtype;
  ValId args[3] = {c, a, b};
  return emit(IR_WHERE, args, 3, r, NULL, 0, name);
}

static ValId reduce(Op op, ValId a, int mask, const char *name) {
  Type t = tyof(a);
  for (int i = 0; i < t.ndim; i++)
    if ((mask >> i) & 1) t.dims[i] = 1;
  int64_t at = mask;
  return emit(op, &a, 1, t, &at, 1, name);
}

static ValId permute(ValId a, const char *name, ...) {
  Type t = tyof(a), r = t;
  int64_t perm[IR_MAX_DIMS];
  va_list ap;
  va_start(ap, name);
  for (int i = 0; i < t.ndim; i++) {
    perm[i] = va_arg(ap, int);
    r.dims[i] = t.dims[perm[i]];
  }
  va_end(ap);
  return emit(IR_PERMUTE, &a, 1, r, perm, t.ndim, name);
}

/* slice(a, name, start0, step0, count0, start1, ...) */
static ValId slice(ValId a, const char *name, ...) {
  Type t = tyof(a);
  int64_t at[2 * IR_MAX_DIMS];
  va_list ap;
  va_start(ap, name);
  for (int i = 0; i < t.ndim; i++) {
    at[2 * i] = va_arg(ap, int);
    at[2 * i + 1] = va_arg(ap, int);
    t.dims[i] = va_arg(ap, int);
  }
  va_end(ap);
  return emit(IR_SLICE, &a, 1, t, at, 2 * t.ndim, name);
}

static ValId concat(int axis, const char *name, int n, ...) {
  ValId args[8];
  va_list ap;
  va_start(ap, n);
  for (int i = 0; i < n; i++) args[i] = va_arg(ap, ValId);
  va_end(ap);
  Type t = tyof(args[0]);
  t.dims[axis] = 0;
  for (int i = 0; i < n; i++) t.dims[axis] += tyof(args[i]).dims[axis];
  int64_t at = axis;
  return emit(IR_CONCAT, args, n, t, &at, 1, name);
}

static ValId to_shape(Op op, ValId a, Type t, const char *name) {
  t.dtype = tyof(a).dtype;
  return emit(op, &a, 1, t, NULL, 0, name);
}

static ValId iota(DType dt, int n, int start, int step, const char *name) {
  int64_t at[2] = {start, step};
  return emit(IR_IOTA, NULL, 0, ty(dt, 1, n), at, 2, name);
}

static ValId matmul(ValId a, ValId b, int ta, int tb, const char *name) {
  Type A = tyof(a), B = tyof(b), ba = A, bb = B, r;
  ba.ndim -= 2;
  bb.ndim -= 2;
  CHECK(ir_broadcast_shapes(&ba, &bb, &r) == 0);
  r.dims[r.ndim++] = ta ? A.dims[A.ndim - 1] : A.dims[A.ndim - 2];
  r.dims[r.ndim++] = tb ? B.dims[B.ndim - 2] : B.dims[B.ndim - 1];
  r.dtype = A.dtype;
  int64_t at[2] = {ta, tb};
  ValId args[2] = {a, b};
  return emit(IR_MATMUL, args, 2, r, at, 2, name);
}

static int64_t outsz(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d, int ceil) {
  int64_t num = in + 2 * p - d * (k - 1) - 1;
  int64_t o = (ceil ? (num + s - 1) / s : num / s) + 1;
  if (ceil && (o - 1) * s >= in + p) o--;   /* PyTorch: the last window must start inside */
  return o;
}

static ValId conv_g(ValId x, ValId w, int sh, int sw, int ph, int pw, int dh, int dw, int groups, const char *name) {
  Type X = tyof(x), W = tyof(w);
  Type r = ty(X.dtype, 4, (int)X.dims[0], (int)W.dims[0], (int)outsz(X.dims[2], W.dims[2], sh, ph, dh, 0),
              (int)outsz(X.dims[3], W.dims[3], sw, pw, dw, 0));
  int64_t at[7] = {sh, sw, ph, pw, dh, dw, groups};
  ValId args[2] = {x, w};
  return emit(IR_CONV2D, args, 2, r, at, 7, name);
}

static ValId conv(ValId x, ValId w, int sh, int sw, int ph, int pw, int dh, int dw, const char *name) {
  return conv_g(x, w, sh, sw, ph, pw, dh, dw, 1, name);
}

static ValId pool(Op op, ValId x, int kh, int kw, int sh, int sw, int ph, int pw, int e6, int e7, int ceil,
                  const char *name) {
  Type X = tyof(x);
  int dh = op == IR_MAXPOOL2D ? e6 : 1, dw = op == IR_MAXPOOL2D ? e7 : 1;
  Type r = ty(X.dtype, 4, (int)X.dims[0], (int)X.dims[1], (int)outsz(X.dims[2], kh, sh, ph, dh, ceil),
              (int)outsz(X.dims[3], kw, sw, pw, dw, ceil));
  int64_t at[8] = {kh, kw, sh, sw, ph, pw, e6, e7};
  return emit(op, &x, 1, r, at, 8, name);
}

static ValId embedding(ValId w, ValId idx, const char *name) {
  Type I = tyof(idx), W = tyof(w), r = I;
  r.dtype = W.dtype;
  r.dims[r.ndim++] = W.dims[1];
  ValId args[2] = {w, idx};
  return emit(IR_EMBEDDING, args, 2, r, NULL, 0, name);
}

static ValId rand_uniform(ValId offset, Type r, const char *name) { return emit(IR_RAND_UNIFORM, &offset, 1, r, NULL, 0, name); }

/* ---- gradient primitives ---- */

/* unslice(g, result type, name, start0, step0, start1, ...) */
static ValId unslice(ValId g, Type r, const char *name, ...) {
  int64_t at[2 * IR_MAX_DIMS];
  va_list ap;
  va_start(ap, name);
  for (int i = 0; i < r.ndim; i++) {
    at[2 * i] = va_arg(ap, int);
    at[2 * i + 1] = va_arg(ap, int);
  }
  va_end(ap);
  r.dtype = tyof(g).dtype;
  return emit(IR_UNSLICE, &g, 1, r, at, 2 * r.ndim, name);
}

/* The output type of conv(x, w) with these attributes (the shape g must have). */
static Type conv_out(Type X, Type W, const int64_t *at) {
  return ty(X.dtype, 4, (int)X.dims[0], (int)W.dims[0], (int)outsz(X.dims[2], W.dims[2], at[0], at[2], at[4], 0),
            (int)outsz(X.dims[3], W.dims[3], at[1], at[3], at[5], 0));
}

/* at: stride h w, pad h w, dilation h w (6 values); groups apart */
static ValId conv_bwd_input_g(ValId g, ValId w, Type xt, const int64_t *at, int groups, const char *name) {
  int64_t a7[7] = {at[0], at[1], at[2], at[3], at[4], at[5], groups};
  ValId args[2] = {g, w};
  return emit(IR_CONV2D_BWD_INPUT, args, 2, xt, a7, 7, name);
}

static ValId conv_bwd_weight_g(ValId x, ValId g, Type wt, const int64_t *at, int groups, const char *name) {
  int64_t a7[7] = {at[0], at[1], at[2], at[3], at[4], at[5], groups};
  ValId args[2] = {x, g};
  return emit(IR_CONV2D_BWD_WEIGHT, args, 2, wt, a7, 7, name);
}

static ValId conv_bwd_input(ValId g, ValId w, Type xt, const int64_t *at, const char *name) {
  return conv_bwd_input_g(g, w, xt, at, 1, name);
}

static ValId conv_bwd_weight(ValId x, ValId g, Type wt, const int64_t *at, const char *name) {
  return conv_bwd_weight_g(x, g, wt, at, 1, name);
}

/* pad(x, mode, value, name, lo0, hi0, lo1, hi1, ...): every axis */
static ValId pad_op(Op op, ValId x, Type r, int mode, double value, const int *lo) {
  int64_t at[1 + IR_MAX_DIMS];
  at[0] = mode;
  for (int i = 0; i < r.ndim; i++) at[1 + i] = lo[i];
  h.line++;
  return ir_emit(h.p, h.f, op, &x, 1, r, at, 1 + r.ndim, value, L(), op == IR_PAD ? "pad" : "pad_grad");
}

static ValId pad(ValId x, int mode, double value, ...) {
  Type r = tyof(x);
  int lo[IR_MAX_DIMS];
  va_list ap;
  va_start(ap, value);
  for (int i = 0; i < r.ndim; i++) {
    lo[i] = va_arg(ap, int);
    r.dims[i] += lo[i] + va_arg(ap, int);
  }
  va_end(ap);
  return pad_op(IR_PAD, x, r, mode, value, lo);
}

/* pad_bwd(g, x type, mode, lo0, lo1, ...) */
static ValId pad_bwd(ValId g, Type xt, int mode, ...) {
  int lo[IR_MAX_DIMS];
  va_list ap;
  va_start(ap, mode);
  for (int i = 0; i < xt.ndim; i++) lo[i] = va_arg(ap, int);
  va_end(ap);
  xt.dtype = tyof(g).dtype;
  return pad_op(IR_PAD_BWD, g, xt, mode, 0, lo);
}

/* upsample to [.., oh, ow]; sh, sw: the scale_factor given (0: none) */
static ValId upsample_op(Op op, ValId x, Type r, int mode, int align, double sh, double sw, const char *name) {
  int64_t at[4] = {mode, align, 0, 0};
  memcpy(&at[2], &sh, sizeof sh);
  memcpy(&at[3], &sw, sizeof sw);
  r.dtype = tyof(x).dtype;
  return emit(op, &x, 1, r, at, 4, name);
}

static ValId upsample(ValId x, int oh, int ow, int mode, int align, double sh, double sw, const char *name) {
  Type X = tyof(x);
  return upsample_op(IR_UPSAMPLE, x, ty(X.dtype, 4, (int)X.dims[0], (int)X.dims[1], oh, ow), mode, align, sh, sw,
                     name);
}

/* The output type of a pooling op over x of type X (at: kh kw sh sw ph pw e6 e7). */
static Type pool_out(Op op, Type X, const int64_t *at, int ceil) {
  int dh = op == IR_MAXPOOL2D ? (int)at[6] : 1, dw = op == IR_MAXPOOL2D ? (int)at[7] : 1;
  return ty(X.dtype, 4, (int)X.dims[0], (int)X.dims[1], (int)outsz(X.dims[2], at[0], at[2], at[4], dh, ceil),
            (int)outsz(X.dims[3], at[1], at[3], at[5], dw, ceil));
}

static ValId maxpool_bwd(ValId x, ValId g, const int64_t *at, const char *name) {
  ValId args[2] = {x, g};
  return emit(IR_MAXPOOL2D_BWD, args, 2, tyof(x), at, 8, name);
}

static ValId maxpool_jvp(ValId x, ValId t, const int64_t *at, int ceil, const char *name) {
  ValId args[2] = {x, t};
  return emit(IR_MAXPOOL2D_JVP, args, 2, pool_out(IR_MAXPOOL2D, tyof(x), at, ceil), at, 8, name);
}

static ValId avgpool_bwd(ValId g, Type xt, const int64_t *at, const char *name) {
  return emit(IR_AVGPOOL2D_BWD, &g, 1, xt, at, 7, name);
}

static ValId embedding_bwd(ValId idx, ValId g, int V, const char *name) {
  Type G = tyof(g);
  ValId args[2] = {idx, g};
  return emit(IR_EMBEDDING_BWD, args, 2, ty(G.dtype, 2, V, (int)G.dims[G.ndim - 1]), NULL, 0, name);
}

static void out(ValId v, const char *name) { ir_add_output(h.p, h.f, v, name); }

/* ---- manifest -------------------------------------------------------------- */

static void json_tensor(FILE *m, const char *name, const Type *t, const char *dist) {
  fprintf(m, "{\"name\": \"%s\", \"dtype\": \"%s\", \"shape\": [", name, ir_dtype_name(t->dtype));
  for (int i = 0; i < t->ndim; i++) fprintf(m, "%s%lld", i ? ", " : "", (long long)t->dims[i]);
  fprintf(m, "]");
  if (dist) fprintf(m, ", \"dist\": \"%s\"", dist);
  fprintf(m, "}");
}

static void entry(const char *name) {
  h.f = ir_func_new(h.p, name, L());
  memset(h.dist, 0, sizeof h.dist);
}

/* Finishes the current entry: verify, record in the manifest. */
static void entry_done(void) {
  Func *f = h.f;
  if (ir_verify(h.p, f, stderr)) BUG("harness built an invalid function %s", f->name);
  FILE *m = h.man;
  fprintf(m, "%s\n    {\"name\": \"%s\", \"inputs\": [", h.nentries++ ? "," : "", f->name);
  for (int i = 0; i < f->inputs.len; i++) {
    fprintf(m, "%s", i ? ", " : "");
    json_tensor(m, f->values.data[f->inputs.data[i]].name, ir_type(f, f->inputs.data[i]), h.dist[i]);
  }
  fprintf(m, "], \"outputs\": [");
  for (int i = 0; i < f->outputs.len; i++) {
    fprintf(m, "%s", i ? ", " : "");
    json_tensor(m, f->out_names.data[i], ir_type(f, f->outputs.data[i]), NULL);
  }
  fprintf(m, "]}");
}

static char outdir[512];

static void suite(const char *name) {
  char path[1024];
  h.a = arena_new();
  h.src = src_from_string(h.a, "model.py", "# test\n");
  h.p = ir_program_new(h.a, h.src);
  h.p->model_name = arena_strdup(h.a, name);
  h.p->class_name = arena_strdup(h.a, name);
  h.line = 1;
  snprintf(path, sizeof path, "%s/%s", outdir, name);
  if (mkdir(path, 0777) && errno != EEXIST) BUG("cannot create %s", path);
  snprintf(path, sizeof path, "%s/%s/manifest.json", outdir, name);
  h.man = fopen(path, "w");
  CHECK(h.man);
  h.nentries = 0;
  fprintf(h.man, "{\"name\": \"%s\", \"entries\": [", name);
}

/* ---- checking the plan -------------------------------------------------------- */

static int plan_errors;

static void plan_fail(const Func *f, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "plan error in %s: ", f->name);
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\n");
  va_end(ap);
  plan_errors++;
}

/* the compiler's own plan checker (ir/plan_check.c), which ctc runs on every compile */
static void check_plan(const Program *p, const MemPlan *mp) {
  if (ir_plan_check(p, mp, stderr) < 0) plan_fail(p->funcs.data[0], "ir_plan_check failed (see above)");
}

/* ---- corrupting plans on purpose ----------------------------------------------------
 *
 * ir_plan_check must catch every overlap of two blocks live together. For each stored
 * result r and each stored operand a of its instruction (live together at it, r not
 * written in place over a), r is moved onto a's first byte, onto a's last 64-byte chunk
 * and so that r's last chunk covers a's first: each plan must be refused with "share
 * bytes"; the plan as made must pass again afterwards. */

static int corrupt_tried, corrupt_missed;

static int64_t val_bytes(const Func *f, ValId v) {
  int64_t b;
  return ir_type_bytes(&f->values.data[v].type, &b) < 0 ? 0 : b;
}

/* Whether v is an arena block of its own: an instruction result, stored, no view. */
static int own_block(const Func *f, const FuncPlan *fp, ValId v) {
  const PlanHints *hn = &fp->hints;
  return f->values.data[v].kind == V_INST && fp->loc[v].base == LOC_ARENA && !ir_is_view(f, v) &&
         !(hn->strided && hn->strided[v]) && !(hn->update_into && hn->update_into[v] >= 0) && val_bytes(f, v) > 0;
}

static void corrupt_one(const Program *p, const MemPlan *mp, int fi, ValId r, int64_t off) {
  const Func *f = p->funcs.data[fi];
  Loc *l = &mp->funcs[fi].loc[r];
  if (off < mp->params_bytes || off + val_bytes(f, r) > mp->params_bytes + mp->funcs[fi].peak || off == l->offset)
    return;
  int64_t was = l->offset;
  char *msg = NULL;
  size_t len = 0;
  FILE *m = open_memstream(&msg, &len);
  CHECK(m);
  l->offset = off;
  int rc = ir_plan_check(p, mp, m);
  l->offset = was;
  fclose(m);
  corrupt_tried++;
  if (rc != -1 || !strstr(msg, "share bytes")) {
    corrupt_missed++;
    plan_fail(f, "%s moved to %lld: ir_plan_check %s", f->values.data[r].name, (long long)off,
              rc ? msg : "accepted it");
  }
  free(msg);
}

/* every `every`-th instruction of each function (1: all) */
static void check_corruptions(const Program *p, const MemPlan *mp, int every) {
  for (int fi = 0; fi < p->funcs.len; fi++) {
    const Func *f = p->funcs.data[fi];
    const FuncPlan *fp = &mp->funcs[fi];
    unsigned char *viewed = calloc((size_t)f->values.len + 1, 1);   /* has a view, or is written over in place */
    CHECK(viewed);
    for (int i = 0; i < f->insts.len; i++) {
      const Inst *in = &f->insts.data[i];
      if (in->nargs && (ir_is_view(f, in->res) || (fp->hints.strided && fp->hints.strided[in->res])))
        viewed[in->args[0]] = 1;
      if (fp->shares && fp->shares[in->res] >= 0) viewed[fp->shares[in->res]] = 1;
    }
    for (int i = 0; i < f->insts.len; i += every) {
      const Inst *in = &f->insts.data[i];
      ValId r = in->res;
      if (!own_block(f, fp, r) || viewed[r]) continue;
      for (int k = 0; k < in->nargs; k++) {
        ValId a = in->args[k];
        if (!own_block(f, fp, a) || (fp->shares && fp->shares[r] == a)) continue;
        int64_t oa = fp->loc[a].offset;
        corrupt_one(p, mp, fi, r, oa);
        corrupt_one(p, mp, fi, r, oa + (val_bytes(f, a) - 1) / 64 * 64);
        corrupt_one(p, mp, fi, r, oa - (val_bytes(f, r) - 1) / 64 * 64);
      }
    }
    free(viewed);
  }
  check_plan(p, mp);   /* restored */
}

/* A function of many values live at once (a 16000-way split's shape: y_k = x * k, then
 * their sum from the last one down), with a plan made by hand (every result in bytes
 * of its own): ir_plan_check accepts it in well under a second (the all-pairs scan of
 * the live blocks took seconds), and refuses it corrupted. OUT/plan_check.txt: the counts. */
static void wide_check(void) {
  enum { N = 16000 };
  h.a = arena_new();
  h.src = src_from_string(h.a, "model.py", "# test\n");
  h.p = ir_program_new(h.a, h.src);
  h.p->model_name = h.p->class_name = arena_strdup(h.a, "wide");
  h.line = 1;
  entry("wide");
  ValId x = input("x", ty(DT_F32, 1, 16), "normal");
  ValId *y = malloc(sizeof(ValId) * N);
  CHECK(y);
  for (int k = 0; k < N; k++) y[k] = bin(IR_MUL, x, cst(DT_F32, k + 1), "y");
  ValId acc = y[N - 1];
  for (int k = N - 2; k >= 0; k--) acc = bin(IR_ADD, acc, y[k], "s");
  out(acc, "s");
  free(y);
  Func *f = h.f;
  MemPlan mp = {0};
  FuncPlan fp = {0};
  fp.loc = calloc((size_t)f->values.len, sizeof(Loc));
  fp.scratch = malloc(sizeof(int64_t) * (size_t)f->insts.len);
  CHECK(fp.loc && fp.scratch);
  for (int v = 0; v < f->values.len; v++) fp.loc[v] = (Loc){LOC_NONE, 0};
  fp.loc[x] = (Loc){0, 0};
  for (int i = 0; i < f->insts.len; i++) {
    const Inst *in = &f->insts.data[i];
    fp.scratch[i] = -1;
    if (in->op != IR_CONST) fp.loc[in->res] = (Loc){LOC_ARENA, fp.peak}, fp.peak += 64;
  }
  mp.funcs = &fp;
  mp.arena_bytes = fp.peak;
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  check_plan(h.p, &mp);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  double secs = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
  check_corruptions(h.p, &mp, 3989);
  char path[1024];
  snprintf(path, sizeof path, "%s/plan_check.txt", outdir);
  FILE *o = fopen(path, "w");
  CHECK(o);
  fprintf(o, "corrupted %d missed %d wide_blocks %d wide_seconds %.4f\n", corrupt_tried, corrupt_missed,
          f->insts.len - N, secs);
  fclose(o);
  free(fp.loc);
  free(fp.scratch);
  arena_free(h.a);
}

static void suite_done(void) {
  Program *p = h.p;
  char path[1024], hname[256];
  fprintf(h.man, "\n  ], \"params\": [");
  for (int i = 0; i < p->params.len; i++) {
    fprintf(h.man, "%s\n    ", i ? "," : "");
    json_tensor(h.man, p->params.data[i].name, &p->params.data[i].type, NULL);
  }
  fprintf(h.man, "]}\n");
  fclose(h.man);
  for (int i = 0; i < p->funcs.len; i++) {
    ir_pass_dce(p, p->funcs.data[i]);
    if (ir_verify(p, p->funcs.data[i], stderr)) BUG("invalid after dce");
  }
  MemPlan *mp = ir_plan_memory(p);
  check_plan(p, mp);
  check_corruptions(p, mp, 1);
  snprintf(hname, sizeof hname, "%s.h", p->model_name);
  snprintf(path, sizeof path, "%s/%s/%s.c", outdir, p->model_name, p->model_name);
  FILE *c = fopen(path, "w");
  snprintf(path, sizeof path, "%s/%s/%s", outdir, p->model_name, hname);
  FILE *hh = fopen(path, "w");
  CHECK(c && hh);
  if (cg_c_emit(p, mp, c, hh, hname)) BUG("cg_c_emit failed for %s", p->model_name);
  fclose(c);
  fclose(hh);
  snprintf(path, sizeof path, "%s/%s/plan.txt", outdir, p->model_name);
  FILE *pt = fopen(path, "w");
  CHECK(pt);
  fprintf(pt, "arena_bytes %lld params_bytes %lld\n", (long long)mp->arena_bytes, (long long)mp->params_bytes);
  for (int i = 0; i < p->funcs.len; i++)
    fprintf(pt, "func %s peak %lld insts %d\n", p->funcs.data[i]->name, (long long)mp->funcs[i].peak,
            p->funcs.data[i]->insts.len);
  fclose(pt);
  arena_free(h.a);
}

/* ---- the suites ------------------------------------------------------------------ */

static void suite_elem(void) {
  suite("elem");

  entry("unary");
  ValId x = input("x", ty(DT_F32, 3, 2, 3, 4), "normal");
  out(un(IR_NEG, x, "neg"), "neg");
  out(un(IR_EXP, x, "exp"), "exp");   /* a value named like a libm function */
  out(un(IR_TANH, x, "tanh"), "tanh");
  out(un(IR_SIGMOID, x, "sigmoid"), "sigmoid");
  out(un(IR_ABS, x, "abs"), "abs");
  out(un(IR_ERF, x, "erf"), "erf");
  out(un(IR_RELU, x, "relu"), "relu");
  out(un(IR_COS, x, "cos"), "cos");
  out(un(IR_SIN, x, "sin"), "sin");
  out(un(IR_FLOOR, x, "floor"), "floor");
  out(un(IR_DETACH, un(IR_EXP, x, "e"), "detached"), "detach");
  out(un(IR_ROUND_BF16, x, "bf16"), "round_bf16");
  out(un(IR_ROUND_F16, x, "f16"), "round_f16");
  entry_done();

  entry("unary_pos");
  x = input("x", ty(DT_F32, 2, 5, 7), "pos");
  out(un(IR_LOG, x, "log"), "log");
  out(un(IR_SQRT, x, "sqrt"), "sqrt");
  out(un(IR_RSQRT, x, "rsqrt"), "rsqrt");
  entry_done();

  entry("binary");
  ValId a = input("a", ty(DT_F32, 2, 6, 5), "pos");
  ValId b = input("b", ty(DT_F32, 2, 6, 5), "pos");
  out(bin(IR_ADD, a, b, "add"), "add");
  out(bin(IR_SUB, a, b, "sub"), "sub");
  out(bin(IR_MUL, a, b, "mul"), "mul");
  out(bin(IR_DIV, a, b, "div"), "div");
  out(bin(IR_POW, a, b, "pow"), "pow");
  out(bin(IR_MAX, a, b, "max"), "max");
  out(bin(IR_MIN, a, b, "min"), "min");
  entry_done();

  entry("bcast");
  a = input("a", ty(DT_F32, 3, 4, 1, 3), "normal");
  b = input("b", ty(DT_F32, 2, 5, 1), "normal");
  ValId cc = input("c", ty(DT_F32, 1, 3), "normal");
  out(bin(IR_ADD, a, b, "ab"), "add");                               /* [4,5,3] */
  out(bin(IR_MUL, a, cst(DT_F32, 2.5), "a2"), "mul_scalar");
  out(bin(IR_SUB, cst(DT_F32, 1), b, "one_minus_b"), "rsub_scalar");
  out(bin(IR_MAX, a, cst(DT_F32, 0), "amax0"), "max_zero");
  out(bin(IR_DIV, b, cc, "bc"), "div_bcast");                        /* [5,3] */
  ValId bigx = input("big", ty(DT_F32, 3, 64, 32, 24), "normal");
  ValId row = input("row", ty(DT_F32, 1, 24), "normal");
  ValId big = bin(IR_ADD, bigx, row, "big_plus_row");
  out(bin(IR_MUL, big, cst(DT_F32, -0.5), "big_scaled"), "big");     /* big enough for OpenMP */
  entry_done();

  entry("compare");
  a = input("a", ty(DT_F32, 2, 4, 5), "small");
  b = input("b", ty(DT_F32, 2, 4, 5), "small");
  out(bin(IR_CMP_EQ, a, b, "eq"), "eq");
  out(bin(IR_CMP_NE, a, b, "ne"), "ne");
  out(bin(IR_CMP_LT, a, b, "lt"), "lt");
  out(bin(IR_CMP_LE, a, b, "le"), "le");
  out(bin(IR_CMP_GT, a, cst(DT_F32, 0), "gt"), "gt0");
  out(bin(IR_CMP_GE, a, b, "ge"), "ge");
  ValId m = bin(IR_CMP_GT, a, b, "mask");
  out(where(m, a, b, "w"), "where");
  ValId cond = input("cond", ty(DT_BOOL, 1, 5), "bool");
  out(where(cond, a, cst(DT_F32, -1), "w2"), "where_bcast");
  entry_done();

  entry("casts");
  x = input("x", ty(DT_F32, 1, 9), "normal3");
  ValId i = input("i", ty(DT_I64, 2, 3, 3), "int");
  out(cast(x, DT_I64, "xi"), "f2i");
  out(cast(i, DT_F32, "if"), "i2f");
  out(cast(x, DT_BOOL, "xb"), "f2b");
  out(cast(cast(x, DT_BOOL, "xb2"), DT_F32, "bf"), "b2f");
  out(cast(x, DT_F64, "xd"), "f2d");
  out(bin(IR_ADD, i, cst(DT_I64, 3), "i3"), "iadd");
  out(bin(IR_MAX, i, cst(DT_I64, 0), "imax"), "imax");
  out(un(IR_ABS, i, "iabs"), "iabs");
  out(cast(i, DT_I32, "i32"), "i2i32");
  entry_done();

  entry("chain");   /* a chain of ops: the plan reuses two slots */
  x = input("x", ty(DT_F32, 1, 1000), "normal");
  ValId t = x;
  for (int k = 0; k < 10; k++) t = bin(k % 2 ? IR_MUL : IR_ADD, t, cst(DT_F32, 0.5 + k), "t");
  out(t, "out");
  entry_done();

  entry("f64");
  x = input("x", ty(DT_F64, 2, 3, 4), "normal");
  ValId e = un(IR_EXP, x, "e");
  out(bin(IR_ADD, e, cst(DT_F64, 0.1), "e1"), "exp_plus");
  out(un(IR_SIGMOID, x, "s"), "sigmoid");
  entry_done();

  suite_done();
}

static void suite_reduce(void) {
  suite("reduce");
  static const int masks[] = {1, 2, 8, 6, 15, 10, 5, 9};
  entry("sums");
  ValId x = input("x", ty(DT_F32, 4, 2, 3, 4, 5), "normal");
  for (int k = 0; k < 8; k++) {
    char nm[32];
    snprintf(nm, sizeof nm, "sum_%d", masks[k]);
    out(reduce(IR_REDUCE_SUM, x, masks[k], nm), nm);
  }
  entry_done();
  entry("maxes");
  x = input("x", ty(DT_F32, 4, 2, 3, 4, 5), "normal");
  for (int k = 0; k < 8; k++) {
    char nm[32];
    snprintf(nm, sizeof nm, "max_%d", masks[k]);
    out(reduce(IR_REDUCE_MAX, x, masks[k], nm), nm);
  }
  entry_done();
  entry("columns");   /* column reductions wider than one chunk, and big ones */
  x = input("x", ty(DT_F32, 2, 300, 600), "normal");
  out(reduce(IR_REDUCE_SUM, x, 1, "colsum"), "colsum");
  out(reduce(IR_REDUCE_MAX, x, 1, "colmax"), "colmax");
  out(reduce(IR_REDUCE_SUM, x, 2, "rowsum"), "rowsum");
  ValId y = input("y", ty(DT_F32, 3, 16, 40, 70), "normal");
  out(reduce(IR_REDUCE_SUM, y, 5, "sum02"), "sum02");
  out(reduce(IR_REDUCE_MAX, y, 2, "max1"), "max1");
  entry_done();
  entry("typed");
  ValId d = input("d", ty(DT_F64, 2, 5, 6), "normal");
  ValId i = input("i", ty(DT_I64, 2, 5, 6), "int");
  out(reduce(IR_REDUCE_SUM, d, 2, "dsum"), "dsum");
  out(reduce(IR_REDUCE_MAX, d, 1, "dmax"), "dmax");
  out(reduce(IR_REDUCE_SUM, i, 1, "isum"), "isum");
  out(reduce(IR_REDUCE_MAX, i, 3, "imax"), "imax");
  entry_done();
  suite_done();
}

static void suite_shape(void) {
  suite("shape");
  entry("moves");
  ValId x = input("x", ty(DT_F32, 3, 2, 3, 4), "normal");
  out(permute(x, "p201", 2, 0, 1), "perm201");
  out(permute(x, "p021", 0, 2, 1), "perm021");
  ValId m = input("m", ty(DT_F32, 2, 4, 5), "normal");
  out(permute(m, "mt", 1, 0), "transpose");
  ValId s = input("s", ty(DT_F32, 3, 6, 7, 8), "normal");
  out(slice(s, "sl", 1, 2, 3, 0, 3, 3, 2, 1, 5), "slice");   /* s[1::2, 0::3, 2:7] */
  out(slice(s, "sl2", 0, 1, 6, 0, 1, 7, 3, 1, 4), "slice_last");
  ValId c1 = input("c1", ty(DT_F32, 3, 2, 3, 4), "normal");
  ValId c2 = input("c2", ty(DT_F32, 3, 2, 2, 4), "normal");
  ValId c3 = input("c3", ty(DT_F32, 3, 2, 1, 4), "normal");
  out(concat(1, "cat1", 3, c1, c2, c3), "cat1");
  out(concat(0, "cat0", 2, c1, c1), "cat0");
  out(concat(2, "cat2", 2, c2, c2), "cat2");
  ValId bsrc = input("bsrc", ty(DT_F32, 2, 3, 1), "normal");
  out(to_shape(IR_BROADCAST, bsrc, ty(DT_F32, 3, 2, 3, 4), "bc"), "broadcast");
  out(to_shape(IR_BROADCAST, cst(DT_F32, 7), ty(DT_F32, 2, 2, 3), "fill"), "fill");
  entry_done();

  entry("views");
  x = input("x", ty(DT_F32, 3, 2, 3, 4), "normal");
  ValId xv = to_shape(IR_RESHAPE, x, ty(DT_F32, 2, 6, 4), "x_flat");          /* view of an input */
  out(bin(IR_ADD, xv, cst(DT_F32, 1), "xp1"), "x_plus_1");
  out(xv, "x_view");                                                           /* output = view of input */
  ValId e = un(IR_EXP, x, "e");
  ValId ev = to_shape(IR_RESHAPE, e, ty(DT_F32, 1, 24), "e_flat");            /* view of an intermediate */
  ValId ev2 = to_shape(IR_RESHAPE, ev, ty(DT_F32, 2, 4, 6), "e_2d");          /* view of a view */
  ValId t1 = un(IR_NEG, x, "t1");                                              /* must not clobber e */
  ValId t2 = bin(IR_MUL, t1, t1, "t2");
  out(bin(IR_ADD, ev2, to_shape(IR_RESHAPE, t2, ty(DT_F32, 2, 4, 6), "t2v"), "sum"), "e_plus_t2");
  out(ev, "e_flat");
  ValId dead = un(IR_TANH, x, "dead_value");                                   /* removed by dce */
  (void)dead;
  out(to_shape(IR_RESHAPE, cst(DT_F32, 3), ty(DT_F32, 2, 1, 1), "c11"), "const_11");
  out(cst(DT_F32, 0.25), "scalar");
  out(iota(DT_F32, 7, 3, 2, "ramp"), "iota");
  out(iota(DT_I64, 5, 0, 1, "ar"), "arange");
  entry_done();

  entry("names");   /* values named like C keywords, locals and API names */
  ValId in_ = input("int", ty(DT_F32, 1, 3), "normal");
  ValId a1 = un(IR_NEG, in_, "A");
  ValId a2 = un(IR_NEG, a1, "m");
  ValId a3 = un(IR_NEG, a2, "i");
  ValId a4 = bin(IR_ADD, a3, in_, "shape_init");
  ValId a5 = bin(IR_ADD, a4, a1, "acc");
  out(bin(IR_ADD, a5, a2, "for"), "return");
  entry_done();

  suite_done();
}

static void suite_linalg(void) {
  suite("linalg");
  entry("mm");
  ValId a = input("a", ty(DT_F32, 2, 5, 7), "normal");
  ValId at = input("at", ty(DT_F32, 2, 7, 5), "normal");
  ValId b = input("b", ty(DT_F32, 2, 7, 3), "normal");
  ValId bt = input("bt", ty(DT_F32, 2, 3, 7), "normal");
  out(matmul(a, b, 0, 0, "nn"), "nn");
  out(matmul(at, b, 1, 0, "tn"), "tn");
  out(matmul(a, bt, 0, 1, "nt"), "nt");
  out(matmul(at, bt, 1, 1, "tt"), "tt");
  entry_done();

  entry("bmm");
  ValId x = input("x", ty(DT_F32, 4, 2, 3, 5, 7), "normal");
  ValId w = input("w", ty(DT_F32, 2, 7, 4), "normal");
  ValId wb = input("wb", ty(DT_F32, 3, 3, 7, 4), "normal");
  ValId x1 = input("x1", ty(DT_F32, 4, 2, 1, 5, 7), "normal");
  ValId q = input("q", ty(DT_F32, 3, 4, 7, 5), "normal");
  ValId k = input("k", ty(DT_F32, 3, 4, 3, 7), "normal");
  out(matmul(x, w, 0, 0, "fold"), "fold");          /* [2,3,5,4]: one GEMM */
  out(matmul(x, wb, 0, 0, "bb"), "bcast_b");        /* b batch broadcast over dim 0 */
  out(matmul(x1, wb, 0, 0, "ba"), "bcast_a");       /* a batch broadcast over dim 1 */
  out(matmul(q, k, 1, 1, "qk"), "tt_batched");      /* [4,5,3] */
  out(matmul(k, q, 0, 0, "kq"), "nn_batched");      /* [4,3,5] */
  entry_done();

  entry("big");
  a = input("a", ty(DT_F32, 2, 67, 100), "normal");
  b = input("b", ty(DT_F32, 2, 100, 300), "normal");
  bt = input("bt", ty(DT_F32, 2, 70, 100), "normal");
  out(matmul(a, b, 0, 0, "ab"), "ab");
  out(matmul(a, bt, 0, 1, "abt"), "abt");
  entry_done();

  entry("conv");
  x = input("x", ty(DT_F32, 4, 2, 3, 9, 10), "normal");
  w = input("w", ty(DT_F32, 4, 4, 3, 3, 3), "normal");
  ValId w1 = input("w1", ty(DT_F32, 4, 5, 3, 1, 1), "normal");
  out(conv(x, w, 1, 1, 0, 0, 1, 1, "c_plain"), "plain");
  out(conv(x, w, 2, 2, 1, 1, 1, 1, "c_s2p1"), "s2p1");
  out(conv(x, w, 1, 2, 2, 1, 2, 1, "c_dil"), "dil");
  out(conv(x, w1, 1, 1, 0, 0, 1, 1, "c_1x1"), "k1x1");
  out(conv(x, w1, 2, 2, 0, 0, 1, 1, "c_1x1s2"), "k1x1s2");
  ValId one = input("one", ty(DT_F32, 4, 1, 3, 9, 10), "normal");
  out(conv(one, w, 1, 1, 1, 1, 1, 1, "c_n1"), "batch1");
  entry_done();

  entry("conv_groups");   /* grouped and depthwise convolutions */
  x = input("x", ty(DT_F32, 4, 2, 4, 7, 6), "normal");
  ValId wg = input("wg", ty(DT_F32, 4, 6, 2, 3, 3), "normal");
  ValId wdw = input("wdw", ty(DT_F32, 4, 8, 1, 3, 2), "normal");
  ValId wp = input("wp", ty(DT_F32, 4, 4, 1, 1, 1), "normal");
  out(conv_g(x, wg, 1, 1, 1, 1, 1, 1, 2, "c_g2"), "groups2");
  out(conv_g(x, wdw, 2, 1, 1, 0, 1, 2, 4, "c_dw"), "depthwise");
  out(conv_g(x, wp, 1, 1, 0, 0, 1, 1, 4, "c_dw1x1"), "depthwise_1x1");
  ValId xg1 = input("x1", ty(DT_F32, 4, 1, 4, 7, 6), "normal");
  out(conv_g(xg1, wg, 2, 2, 0, 0, 1, 1, 2, "c_g2n1"), "groups2_batch1");
  entry_done();

  entry("dmm");
  ValId d1 = input("d1", ty(DT_F64, 2, 4, 6), "normal");
  ValId d2 = input("d2", ty(DT_F64, 2, 6, 3), "normal");
  out(matmul(d1, d2, 0, 0, "dd"), "dd");
  entry_done();
  suite_done();
}

static void suite_nn(void) {
  suite("nn");
  entry("pools");
  ValId x = input("x", ty(DT_F32, 4, 2, 3, 8, 9), "normal");
  out(pool(IR_MAXPOOL2D, x, 2, 2, 2, 2, 0, 0, 1, 1, 0, "mp"), "max2");
  out(pool(IR_MAXPOOL2D, x, 3, 3, 2, 2, 1, 1, 1, 1, 0, "mp3"), "max3p1");
  out(pool(IR_MAXPOOL2D, x, 3, 2, 1, 2, 1, 0, 2, 1, 0, "mpd"), "maxdil");
  out(pool(IR_MAXPOOL2D, x, 3, 3, 2, 2, 0, 0, 1, 1, 1, "mpc"), "maxceil");
  out(pool(IR_AVGPOOL2D, x, 2, 2, 2, 2, 0, 0, 1, 0, 0, "ap"), "avg2");
  out(pool(IR_AVGPOOL2D, x, 3, 3, 2, 2, 1, 1, 1, 0, 0, "ap3i"), "avg3_incl");
  out(pool(IR_AVGPOOL2D, x, 3, 3, 2, 2, 1, 1, 0, 0, 0, "ap3e"), "avg3_excl");
  out(pool(IR_AVGPOOL2D, x, 3, 3, 2, 2, 0, 0, 1, 0, 1, "apc"), "avgceil");
  entry_done();
  entry("embed");
  ValId w = input("w", ty(DT_F32, 2, 10, 4), "normal");
  ValId idx = input("idx", ty(DT_I64, 2, 2, 3), "range10");
  out(embedding(w, idx, "emb"), "emb");
  out(embedding(w, cst(DT_I64, 7), "emb1"), "emb_const");
  entry_done();
  entry("pad");   /* constant, reflect and replicate padding on one to three axes */
  x = input("x", ty(DT_F32, 4, 2, 3, 5, 6), "normal");
  out(pad(x, 0, 1.5, 0, 0, 0, 0, 0, 3, 1, 2), "constant");
  out(pad(x, 1, 0.0, 0, 0, 0, 0, 1, 3, 2, 1), "reflect");
  out(pad(x, 2, 0.0, 0, 0, 0, 0, 2, 2, 3, 0), "replicate");
  out(pad(x, 0, 0.0, 0, 0, 2, 0, 1, 1, 1, 1), "zeros3");
  ValId x3 = input("x3", ty(DT_F32, 3, 2, 3, 7), "normal");
  out(pad(x3, 1, 0.0, 0, 0, 0, 0, 3, 3), "reflect1d");
  out(pad(x3, 2, 0.0, 0, 0, 0, 0, 0, 4), "replicate1d");
  ValId xd = input("xd", ty(DT_F64, 4, 1, 2, 4, 3), "normal");
  out(pad(xd, 1, 0.0, 0, 0, 0, 0, 3, 2, 2, 2), "reflect_f64");
  ValId xb = input("xb", ty(DT_F32, 4, 2, 8, 32, 32), "normal");
  out(pad(xb, 1, 0.0, 0, 0, 0, 0, 2, 2, 2, 2), "reflect_big");   /* big enough for OpenMP */
  entry_done();

  entry("upsample");   /* nearest and bilinear, sizes and scale factors (PyTorch's index formulas) */
  x = input("x", ty(DT_F32, 4, 2, 3, 5, 4), "normal");
  out(upsample(x, 10, 8, 0, 0, 0, 0, "n2x"), "nearest_2x");
  out(upsample(x, 7, 9, 0, 0, 0, 0, "nsz"), "nearest_size");
  out(upsample(x, 7, 6, 0, 0, 1.5, 1.5, "nsc"), "nearest_scale");
  out(upsample(x, 6, 2, 0, 0, 1.3, 0.5, "nsc2"), "nearest_scale2");
  out(upsample(x, 5, 5, 0, 0, 1.1, 1.3, "nsc3"), "nearest_same_size");
  out(upsample(x, 9, 7, 1, 0, 0, 0, "bsz"), "bilinear_size");
  out(upsample(x, 9, 7, 1, 1, 0, 0, "bal"), "bilinear_align");
  out(upsample(x, 10, 8, 1, 0, 2, 2, "b2x"), "bilinear_2x");
  out(upsample(x, 3, 2, 1, 0, 0.6, 0.6, "bdown"), "bilinear_down");
  out(upsample(x, 1, 3, 1, 1, 0, 0, "bal1"), "bilinear_align_1");
  out(upsample(x, 11, 5, 1, 0, 2.3, 1.3, "bsc"), "bilinear_scale");
  xd = input("xd", ty(DT_F64, 4, 1, 2, 5, 4), "normal");
  out(upsample(xd, 8, 6, 1, 0, 1.7, 1.7, "bd"), "bilinear_f64");
  out(upsample(xd, 8, 6, 0, 0, 1.7, 1.7, "nd"), "nearest_f64");
  out(upsample(xd, 8, 6, 1, 1, 0, 0, "bad"), "bilinear_align_f64");
  xb = input("xb", ty(DT_F32, 4, 2, 8, 16, 16), "normal");
  out(upsample(xb, 32, 32, 1, 0, 0, 0, "bbig"), "bilinear_big");
  ValId x1c = input("x1c", ty(DT_F32, 4, 2, 1, 5, 4), "normal");   /* one channel: PyTorch's other path */
  out(upsample(x1c, 5, 5, 0, 0, 1.1, 1.3, "n1c"), "nearest_same_size_1ch");
  out(upsample(x1c, 10, 5, 0, 0, 2.1, 1.3, "n1c2"), "nearest_twice_size_1ch");
  entry_done();

  entry("rand");   /* the counter-based stream of ops.def, from an input offset and from literals */
  ValId off = input("offset", ty(DT_I64, 0), "int");
  out(rand_uniform(off, ty(DT_F32, 3, 3, 5, 7), "u"), "u");
  out(rand_uniform(cst(DT_I64, 1099511627779.0), ty(DT_F64, 1, 1000), "ud"), "u_f64_big_offset");
  out(rand_uniform(cst(DT_I64, -7), ty(DT_F32, 2, 4, 4), "un"), "u_negative_offset");
  entry_done();
  suite_done();
}

/* Gradient primitives; test_codegen.py has the same case tables (GRAD_*) and
 * takes its references from PyTorch's autograd. */
static const int64_t conv_cases[][6] = {   /* stride h w, pad h w, dilation h w */
    {1, 1, 0, 0, 1, 1}, {2, 2, 1, 1, 1, 1}, {1, 2, 2, 1, 2, 1},
    {4, 3, 0, 0, 1, 1},   /* rows 3, 7, 8 and columns 2, 5, 8, 9 of x are read by no window */
};
static const int64_t maxpool_cases[][9] = {   /* kh kw sh sw ph pw dh dw ceil */
    {2, 2, 2, 2, 0, 0, 1, 1, 0}, {3, 3, 1, 1, 1, 1, 1, 1, 0}, {3, 3, 2, 2, 1, 1, 1, 1, 0},
    {3, 2, 1, 2, 1, 0, 2, 1, 0}, {3, 3, 2, 2, 0, 0, 1, 1, 1}, {2, 3, 1, 1, 0, 1, 2, 2, 0},
};
static const int64_t avgpool_cases[][8] = {   /* kh kw sh sw ph pw count_include_pad ceil */
    {2, 2, 2, 2, 0, 0, 1, 0}, {3, 3, 2, 2, 1, 1, 1, 0}, {3, 3, 2, 2, 1, 1, 0, 0},
    {3, 3, 1, 1, 1, 1, 0, 0}, {3, 3, 2, 2, 0, 0, 1, 1}, {2, 3, 2, 2, 1, 1, 0, 1}, {3, 2, 1, 2, 1, 1, 1, 0},
};
#define NCASES(a) ((int)(sizeof(a) / sizeof(a[0])))

static void suite_grad(void) {
  char nm[64];
  suite("grad");

  entry("unslice");
  ValId g1 = input("g1", ty(DT_F32, 3, 3, 3, 5), "normal");
  ValId g2 = input("g2", ty(DT_F32, 3, 6, 7, 4), "normal");
  ValId g3 = input("g3", ty(DT_F32, 2, 2, 5), "normal");
  ValId g4 = input("g4", ty(DT_I64, 2, 2, 3), "int");
  out(unslice(g1, ty(DT_F32, 3, 6, 7, 8), "u1", 1, 2, 0, 3, 2, 1), "steps");      /* s[1::2, ::3, 2:7] */
  out(unslice(g2, ty(DT_F32, 3, 6, 7, 8), "u2", 0, 1, 0, 1, 3, 1), "last_axis");  /* s[:, :, 3:7] */
  out(unslice(g3, ty(DT_F32, 2, 2, 5), "u3", 0, 1, 0, 1), "whole");              /* no zeros at all */
  out(unslice(g4, ty(DT_I64, 2, 5, 7), "u4", 3, 1, 0, 3), "int");                /* s[3:, ::3] */
  out(unslice(cst(DT_F32, 2.5), ty(DT_F32, 0), "u5"), "scalar");
  entry_done();

  entry("conv_bwd");   /* a non-square kernel under each attribute set, then 1x1 kernels */
  ValId x = input("x", ty(DT_F32, 4, 2, 3, 9, 10), "normal");
  ValId w = input("w", ty(DT_F32, 4, 4, 3, 3, 2), "normal");
  ValId gs[NCASES(conv_cases)];
  for (int k = 0; k < NCASES(conv_cases); k++) {
    snprintf(nm, sizeof nm, "g%d", k);
    gs[k] = input(nm, conv_out(tyof(x), tyof(w), conv_cases[k]), "normal");
  }
  for (int k = 0; k < NCASES(conv_cases); k++) {
    snprintf(nm, sizeof nm, "dx%d", k);
    out(conv_bwd_input(gs[k], w, tyof(x), conv_cases[k], nm), nm);
    snprintf(nm, sizeof nm, "dw%d", k);
    out(conv_bwd_weight(x, gs[k], tyof(w), conv_cases[k], nm), nm);
  }
  static const int64_t pointwise[6] = {1, 1, 0, 0, 1, 1}, strided[6] = {2, 2, 0, 0, 1, 1}, pad1[6] = {1, 1, 1, 1, 1, 1};
  ValId w1 = input("w1", ty(DT_F32, 4, 5, 3, 1, 1), "normal");
  ValId gp = input("gp", conv_out(tyof(x), tyof(w1), pointwise), "normal");
  ValId gq = input("gq", conv_out(tyof(x), tyof(w1), strided), "normal");
  ValId x1 = input("x1", ty(DT_F32, 4, 1, 3, 9, 10), "normal");
  ValId gb = input("gb", conv_out(tyof(x1), tyof(w), pad1), "normal");
  out(conv_bwd_input(gp, w1, tyof(x), pointwise, "dx_1x1"), "dx_1x1");   /* no column scratch */
  out(conv_bwd_weight(x, gp, tyof(w1), pointwise, "dw_1x1"), "dw_1x1");
  out(conv_bwd_input(gq, w1, tyof(x), strided, "dx_1x1s2"), "dx_1x1s2");
  out(conv_bwd_weight(x, gq, tyof(w1), strided, "dw_1x1s2"), "dw_1x1s2");
  out(conv_bwd_input(gb, w, tyof(x1), pad1, "dx_n1"), "dx_n1");           /* batch 1 */
  out(conv_bwd_weight(x1, gb, tyof(w), pad1, "dw_n1"), "dw_n1");
  entry_done();

  entry("conv_bwd_big");   /* big enough for the parallel loops; f64 through dgemm */
  static const int64_t same[6] = {1, 1, 1, 1, 1, 1}, s2[6] = {2, 2, 1, 0, 1, 1};
  x = input("x", ty(DT_F32, 4, 4, 8, 16, 16), "normal");
  w = input("w", ty(DT_F32, 4, 16, 8, 3, 3), "normal");
  ValId g = input("g", conv_out(tyof(x), tyof(w), same), "normal");
  out(conv_bwd_input(g, w, tyof(x), same, "dx"), "dx");
  out(conv_bwd_weight(x, g, tyof(w), same, "dw"), "dw");
  ValId xd = input("xd", ty(DT_F64, 4, 3, 2, 7, 6), "normal");
  ValId wd = input("wd", ty(DT_F64, 4, 3, 2, 2, 3), "normal");
  ValId gd = input("gd", conv_out(tyof(xd), tyof(wd), s2), "normal");
  out(conv_bwd_input(gd, wd, tyof(xd), s2, "dxd"), "dx_f64");
  out(conv_bwd_weight(xd, gd, tyof(wd), s2, "dwd"), "dw_f64");
  entry_done();

  entry("conv_groups_bwd");   /* grouped, depthwise, and conv_transpose2d with output_padding */
  static const int64_t g_pad1[6] = {1, 1, 1, 1, 1, 1}, g_dw[6] = {2, 1, 1, 0, 1, 2}, g_tr[6] = {2, 2, 1, 1, 1, 1};
  x = input("x", ty(DT_F32, 4, 2, 4, 7, 6), "normal");
  ValId wg = input("wg", ty(DT_F32, 4, 6, 2, 3, 3), "normal");
  ValId wdw = input("wdw", ty(DT_F32, 4, 8, 1, 3, 2), "normal");
  ValId gg = input("gg", conv_out(tyof(x), tyof(wg), g_pad1), "normal");
  ValId gdw = input("gdw", conv_out(tyof(x), tyof(wdw), g_dw), "normal");
  ValId xt_in = input("xt", ty(DT_F32, 4, 2, 6, 4, 3), "normal");   /* conv_transpose2d input */
  out(conv_bwd_input_g(gg, wg, tyof(x), g_pad1, 2, "dx_g2"), "dx_g2");
  out(conv_bwd_weight_g(x, gg, tyof(wg), g_pad1, 2, "dw_g2"), "dw_g2");
  out(conv_bwd_input_g(gdw, wdw, tyof(x), g_dw, 4, "dx_dw"), "dx_dw");
  out(conv_bwd_weight_g(x, gdw, tyof(wdw), g_dw, 4, "dw_dw"), "dw_dw");
  out(conv_bwd_input_g(xt_in, wg, ty(DT_F32, 4, 2, 4, 8, 6), g_tr, 2, "ct"), "conv_transpose");
  entry_done();

  entry("pad_bwd");   /* the transposes of reflect and replicate padding (constant: a slice) */
  Type pxt = ty(DT_F32, 4, 2, 3, 5, 6);
  ValId gr = input("gr", ty(DT_F32, 4, 2, 3, 9, 9), "normal");
  ValId grp = input("grp", ty(DT_F32, 4, 2, 3, 9, 9), "normal");
  ValId gp1 = input("g1", ty(DT_F32, 3, 2, 3, 13), "normal");
  out(pad_bwd(gr, pxt, 1, 0, 0, 1, 2), "reflect");       /* lo (1, 2), hi (3, 1) */
  out(pad_bwd(grp, pxt, 2, 0, 0, 2, 3), "replicate");    /* lo (2, 3), hi (2, 0) */
  out(pad_bwd(gp1, ty(DT_F32, 3, 2, 3, 7), 1, 0, 0, 3), "reflect1d");
  ValId gbp = input("gbig", ty(DT_F32, 4, 4, 8, 36, 36), "normal");
  out(pad_bwd(gbp, ty(DT_F32, 4, 4, 8, 32, 32), 2, 0, 0, 2, 2), "replicate_big");
  entry_done();

  entry("upsample_bwd");
  Type uxt = ty(DT_F32, 4, 2, 3, 5, 4);
  ValId u0 = input("g0", ty(DT_F32, 4, 2, 3, 7, 9), "normal");
  ValId u1 = input("g1", ty(DT_F32, 4, 2, 3, 9, 7), "normal");
  ValId u2 = input("g2", ty(DT_F32, 4, 2, 3, 9, 7), "normal");
  ValId u3 = input("g3", ty(DT_F32, 4, 2, 3, 7, 6), "normal");
  ValId u4 = input("g4", ty(DT_F32, 4, 2, 3, 3, 2), "normal");
  out(upsample_op(IR_UPSAMPLE_BWD, u0, uxt, 0, 0, 0, 0, "dn"), "nearest_size");
  out(upsample_op(IR_UPSAMPLE_BWD, u1, uxt, 1, 0, 0, 0, "db"), "bilinear_size");
  out(upsample_op(IR_UPSAMPLE_BWD, u2, uxt, 1, 1, 0, 0, "dba"), "bilinear_align");
  out(upsample_op(IR_UPSAMPLE_BWD, u3, uxt, 0, 0, 1.5, 1.5, "dns"), "nearest_scale");
  out(upsample_op(IR_UPSAMPLE_BWD, u4, uxt, 1, 0, 0.6, 0.6, "dbd"), "bilinear_down");
  ValId u5 = input("g5", ty(DT_F32, 4, 2, 3, 5, 5), "normal");
  out(upsample_op(IR_UPSAMPLE_BWD, u5, uxt, 0, 0, 1.1, 1.3, "dnss"), "nearest_same_size");
  entry_done();

  entry("maxpool_bwd");   /* x has many ties: PyTorch routes each window's g to its first max */
  x = input("x", ty(DT_F32, 4, 2, 3, 8, 9), "small");
  ValId xn = input("xn", ty(DT_F32, 4, 2, 3, 8, 9), "normal");
  ValId gm[NCASES(maxpool_cases)];
  for (int k = 0; k < NCASES(maxpool_cases); k++) {
    snprintf(nm, sizeof nm, "g%d", k);
    gm[k] = input(nm, pool_out(IR_MAXPOOL2D, tyof(x), maxpool_cases[k], (int)maxpool_cases[k][8]), "normal");
  }
  for (int k = 0; k < NCASES(maxpool_cases); k++) {
    snprintf(nm, sizeof nm, "dx%d", k);
    out(maxpool_bwd(x, gm[k], maxpool_cases[k], nm), nm);
  }
  out(maxpool_bwd(xn, gm[1], maxpool_cases[1], "dxn"), "dx_normal");
  entry_done();

  entry("maxpool_bwd_big");
  static const int64_t mp2[8] = {2, 2, 2, 2, 0, 0, 1, 1}, mp3[8] = {3, 3, 1, 1, 1, 1, 1, 1};
  x = input("x", ty(DT_F32, 4, 4, 8, 32, 32), "small");
  ValId ga = input("gp", pool_out(IR_MAXPOOL2D, tyof(x), mp2, 0), "normal");   /* named like locals */
  ValId gc = input("at", pool_out(IR_MAXPOOL2D, tyof(x), mp3, 0), "normal");
  out(maxpool_bwd(x, ga, mp2, "dxa"), "k2s2");
  out(maxpool_bwd(x, gc, mp3, "dxc"), "k3s1p1");
  entry_done();

  entry("maxpool_jvp");   /* the tangent at each window's first max (ties as in maxpool_bwd) */
  x = input("x", ty(DT_F32, 4, 2, 3, 8, 9), "small");
  xn = input("xn", ty(DT_F32, 4, 2, 3, 8, 9), "normal");
  ValId tx = input("t", ty(DT_F32, 4, 2, 3, 8, 9), "normal");
  for (int k = 0; k < NCASES(maxpool_cases); k++) {
    snprintf(nm, sizeof nm, "dy%d", k);
    out(maxpool_jvp(x, tx, maxpool_cases[k], (int)maxpool_cases[k][8], nm), nm);
  }
  out(maxpool_jvp(xn, tx, maxpool_cases[1], 0, "dyn"), "dy_normal");
  entry_done();

  entry("avgpool_bwd");
  Type xt = ty(DT_F32, 4, 2, 3, 8, 9);
  ValId ga_[NCASES(avgpool_cases)];
  for (int k = 0; k < NCASES(avgpool_cases); k++) {
    snprintf(nm, sizeof nm, "g%d", k);
    ga_[k] = input(nm, pool_out(IR_AVGPOOL2D, xt, avgpool_cases[k], (int)avgpool_cases[k][7]), "normal");
  }
  for (int k = 0; k < NCASES(avgpool_cases); k++) {
    snprintf(nm, sizeof nm, "dx%d", k);
    out(avgpool_bwd(ga_[k], xt, avgpool_cases[k], nm), nm);
  }
  static const int64_t ap3[8] = {3, 3, 1, 1, 1, 1, 0, 0};
  Type big = ty(DT_F32, 4, 4, 8, 32, 32);
  ValId gbig = input("gbig", pool_out(IR_AVGPOOL2D, big, ap3, 0), "normal");
  out(avgpool_bwd(gbig, big, ap3, "dxbig"), "big");
  entry_done();

  entry("embedding_bwd");
  ValId idx = input("idx", ty(DT_I64, 2, 2, 6), "range5");   /* in range, with repeats */
  ValId ge = input("g", ty(DT_F32, 3, 2, 6, 3), "normal");
  ValId idx2 = input("idx2", ty(DT_I64, 1, 7), "range5");    /* (out of range: the entry stops, test_index_checks) */
  ValId ge2 = input("g2", ty(DT_F32, 2, 7, 3), "normal");
  ValId ge3 = input("g3", ty(DT_F32, 1, 3), "normal");
  out(embedding_bwd(idx, ge, 5, "dw"), "dw");
  out(embedding_bwd(idx2, ge2, 5, "dw2"), "dw_second");
  out(embedding_bwd(cst(DT_I64, 3), ge3, 5, "dw3"), "dw_const");
  entry_done();

  suite_done();
}

static double data_w[6] = {1, -2, 3.5, 0.25, -1e-3, 100};

static int add_param(const char *name, Type t, int init, double a, double b, const double *data) {
  Param pr = {0};
  pr.name = arena_strdup(h.a, name);
  pr.type = t;
  pr.init = init;
  pr.init_a = a;
  pr.init_b = b;
  pr.init_data = data;
  pr.loc = L();
  vec_push(h.a, &h.p->params, pr);
  return h.p->params.len - 1;
}

static void suite_params(void) {
  suite("params");
  int pw = add_param("fc.weight", ty(DT_F32, 2, 2, 3), PINIT_DATA, 0, 0, data_w);
  int pb = add_param("fc.bias", ty(DT_F32, 1, 2), PINIT_CONST, 0.5, 0, NULL);
  int pz = add_param("zeros", ty(DT_F32, 1, 5), PINIT_ZERO, 0, 0, NULL);
  int pu = add_param("u", ty(DT_F32, 1, 4000), PINIT_UNIFORM, -0.5, 1.5, NULL);
  int pn = add_param("nrm", ty(DT_F64, 1, 4000), PINIT_NORMAL, 1, 2, NULL);
  int pi = add_param("steps", ty(DT_I64, 0), PINIT_CONST, 7, 0, NULL);
  entry("get");
  out(ir_param_value(h.p, h.f, pw), "w");
  out(ir_param_value(h.p, h.f, pb), "b");
  out(ir_param_value(h.p, h.f, pz), "z");
  out(ir_param_value(h.p, h.f, pu), "u");
  out(ir_param_value(h.p, h.f, pn), "n");
  out(ir_param_value(h.p, h.f, pi), "steps");
  entry_done();
  entry("forward");
  ValId x = input("x", ty(DT_F32, 2, 4, 3), "normal");
  ValId wv = ir_param_value(h.p, h.f, pw);
  ValId y = matmul(x, wv, 0, 1, "fc");
  y = bin(IR_ADD, y, ir_param_value(h.p, h.f, pb), "fc_out");
  out(y, "out");
  out(to_shape(IR_RESHAPE, wv, ty(DT_F32, 1, 6), "w_flat"), "w_flat");   /* view of a parameter */
  entry_done();
  suite_done();
}

/* An entry with parameter updates (a training step) and optimizer state. The
 * updates are listed in an order that is wrong to write back naively: prev_w
 * := w and prev2_w := prev_w must read the old values before w and prev_w are
 * overwritten. */
static void suite_train(void) {
  suite("train");
  int pw = add_param("w", ty(DT_F32, 2, 3, 4), PINIT_UNIFORM, -1, 1, NULL);
  int pb = add_param("b", ty(DT_F32, 0), PINIT_CONST, 0.5, 0, NULL);
  int pf = add_param("frozen", ty(DT_F32, 1, 2), PINIT_CONST, 3, 0, NULL);
  int pflag = add_param("flag", ty(DT_F32, 0), PINIT_ZERO, 0, 0, NULL);
  int plast = add_param("last_g", ty(DT_F32, 2, 3, 4), PINIT_ZERO, 0, 0, NULL);
  h.p->params.data[pflag].is_buffer = h.p->params.data[plast].is_buffer = 1;
  int pm = add_param("optimizer.w.momentum_buffer", ty(DT_F32, 2, 3, 4), PINIT_ZERO, 0, 0, NULL);
  int ps = add_param("optimizer.step", ty(DT_I64, 0), PINIT_CONST, 0, 0, NULL);
  int pp = add_param("optimizer.prev_w", ty(DT_F32, 2, 3, 4), PINIT_ZERO, 0, 0, NULL);
  int pp2 = add_param("optimizer.prev2_w", ty(DT_F32, 2, 3, 4), PINIT_ZERO, 0, 0, NULL);
  for (int k = pm; k <= pp2; k++) h.p->params.data[k].is_state = 1;

  entry("step");
  h.f->kind = FK_TRAIN;
  ValId g = input("g", ty(DT_F32, 2, 3, 4), "normal");
  ValId gb = input("gb", ty(DT_F32, 1, 1), "normal");
  ValId w = ir_param_value(h.p, h.f, pw), b = ir_param_value(h.p, h.f, pb);
  ValId w_new = bin(IR_SUB, w, bin(IR_MUL, g, cst(DT_F32, 0.1), "lr_g"), "w_new");
  ValId b_new = bin(IR_SUB, b, bin(IR_MUL, to_shape(IR_RESHAPE, gb, ty(DT_F32, 0), "gb0"), cst(DT_F32, 0.1), "lr_gb"),
                    "b_new");
  ValId mom = bin(IR_ADD, bin(IR_MUL, ir_param_value(h.p, h.f, pm), cst(DT_F32, 0.9), "decayed"), g, "mom_new");
  ValId step = bin(IR_ADD, ir_param_value(h.p, h.f, ps), cst(DT_I64, 1), "step_new");
  ValId prev = ir_param_value(h.p, h.f, pp);
  ValId prev_view = to_shape(IR_RESHAPE, to_shape(IR_RESHAPE, prev, ty(DT_F32, 1, 12), "prev_flat"),
                             ty(DT_F32, 2, 3, 4), "prev_again");
  ValId unused = bin(IR_MUL, w, w, "unused");   /* removed by dce: neither output nor update */
  (void)unused;
  out(reduce(IR_REDUCE_SUM, bin(IR_MUL, w, w, "w2"), 3, "loss"), "loss");
  out(w, "w_old");
  out(b_new, "b_new");
  ir_add_update(h.p, h.f, pw, w_new);
  ir_add_update(h.p, h.f, pp, w);            /* old w, after w's own update in this list */
  ir_add_update(h.p, h.f, pp2, prev_view);   /* old prev_w, through views */
  ir_add_update(h.p, h.f, pb, b_new);        /* 0-d */
  ir_add_update(h.p, h.f, pf, ir_param_value(h.p, h.f, pf));   /* p := p writes nothing */
  ir_add_update(h.p, h.f, pflag, cst(DT_F32, 1));              /* a literal */
  ir_add_update(h.p, h.f, plast, g);                           /* an entry input */
  ir_add_update(h.p, h.f, pm, mom);
  ir_add_update(h.p, h.f, ps, step);                           /* 0-d i64 */
  entry_done();

  entry("forward");
  ValId x = input("x", ty(DT_F32, 2, 2, 4), "normal");
  out(bin(IR_ADD, matmul(x, ir_param_value(h.p, h.f, pw), 0, 1, "xw"), ir_param_value(h.p, h.f, pb), "y"), "y");
  entry_done();
  suite_done();
}

/* Updates that cannot be written back must be refused (cg_c_emit fails):
 * a cycle of parameters each taking another's old value. (Updating a parameter
 * twice is not an error: ir_add_update replaces the earlier update, checked in
 * case 1.) */
static void check_refusals(void) {
  for (int kind = 0; kind < 2; kind++) {
    h.a = arena_new();
    h.src = src_from_string(h.a, "model.py", "# test\n");
    h.p = ir_program_new(h.a, h.src);
    h.p->model_name = arena_strdup(h.a, "refused");
    int p0 = add_param("p0", ty(DT_F32, 1, 2), PINIT_ZERO, 0, 0, NULL);
    int p1 = add_param("p1", ty(DT_F32, 1, 2), PINIT_ZERO, 0, 0, NULL);
    h.f = ir_func_new(h.p, "step", L());
    ValId v0 = ir_param_value(h.p, h.f, p0), v1 = ir_param_value(h.p, h.f, p1);
    if (kind == 0) {   /* p0 := p1, p1 := p0 */
      ir_add_update(h.p, h.f, p0, v1);
      ir_add_update(h.p, h.f, p1, v0);
    } else {           /* p0 := p1, p0 := -p1 */
      ir_add_update(h.p, h.f, p0, v1);
      ir_add_update(h.p, h.f, p0, emit(IR_NEG, &v1, 1, tyof(v1), NULL, 0, "neg"));
    }
    if (ir_verify(h.p, h.f, stderr)) BUG("refusal program invalid");
    if (kind == 1) {
      if (h.f->updates.len != 1 || h.f->update_params.data[0] != p0 || h.f->updates.data[0] == v1)
        plan_fail(h.f, "a second update of p0 did not replace the first");
      arena_free(h.a);
      continue;
    }
    ir_pass_dce(h.p, h.f);
    MemPlan *mp = ir_plan_memory(h.p);
    FILE *c = tmpfile(), *hh = tmpfile();
    CHECK(c && hh);
    fprintf(stderr, "(expected) ");
    if (cg_c_emit(h.p, mp, c, hh, "refused.h") != -1) plan_fail(h.f, "updates case %d not refused", kind);
    fclose(c);
    fclose(hh);
    arena_free(h.a);
  }
}


/* ---- the rows of issue 15 (ops.def's last block): more elementwise ops, scans,
 * gathers and arg-reductions ---- */

static ValId cumsum(ValId a, int axis, int rev, const char *name) {
  int64_t at[2] = {axis, rev};
  return emit(IR_CUMSUM, &a, 1, tyof(a), at, 2, name);
}

static ValId argmax(ValId a, int axis, int is_min, const char *name) {
  Type t = tyof(a);
  t.dtype = DT_I64;
  t.dims[axis] = 1;
  int64_t at[2] = {axis, is_min};
  return emit(IR_ARGMAX, &a, 1, t, at, 2, name);
}

/* fused attention (ops.def's last rows): scale in fattr */
static ValId attention(const ValId *qkvog, int bwd, int causal, int divide, double scale, const char *name) {
  int64_t at[2] = {causal, divide};
  Type t = tyof(qkvog[0]);
  if (bwd) {
    memmove(t.dims + 1, t.dims, sizeof(int64_t) * (size_t)t.ndim);
    t.dims[0] = 3;
    t.ndim++;
  }
  ValId r = emit(bwd ? IR_ATTENTION_BWD : IR_ATTENTION, qkvog, bwd ? 5 : 3, t, at, 2, name);
  h.f->insts.data[h.f->values.data[r].def].fattr = scale;
  return r;
}

static ValId gather(ValId x, int axis, ValId idx, Type r, const char *name) {
  ValId args[2] = {x, idx};
  int64_t at = axis;
  r.dtype = tyof(x).dtype;
  return emit(IR_GATHER, args, 2, r, &at, 1, name);
}

static ValId scatter_add(ValId base, int axis, ValId idx, ValId src, Type r, const char *name) {
  ValId args[3] = {base, idx, src};
  int64_t at = axis;
  r.dtype = tyof(src).dtype;
  return emit(IR_SCATTER_ADD, args, 3, r, &at, 1, name);
}

static void suite_more(void) {
  suite("more");

  entry("unary");
  ValId x = input("x", ty(DT_F32, 3, 3, 4, 5), "normal");
  out(un(IR_EXPM1, x, "expm1"), "expm1");
  out(un(IR_EXP2, x, "exp2"), "exp2");
  out(un(IR_ATAN, x, "atan"), "atan");
  out(un(IR_SINH, x, "sinh"), "sinh");
  out(un(IR_COSH, x, "cosh"), "cosh");
  out(un(IR_SIGN, x, "sign"), "sign");
  out(un(IR_TRUNC, x, "trunc"), "trunc");
  ValId x3 = input("x3", ty(DT_F32, 2, 4, 6), "halves");
  out(un(IR_ROUND, x3, "round"), "round");
  ValId u = input("u", ty(DT_F32, 2, 4, 6), "unit");
  out(un(IR_ASIN, u, "asin"), "asin");
  out(un(IR_ACOS, u, "acos"), "acos");
  out(un(IR_ATANH, u, "atanh"), "atanh");
  out(un(IR_TAN, u, "tan"), "tan");
  out(un(IR_ASINH, x3, "asinh"), "asinh");
  out(un(IR_ERFC, x3, "erfc"), "erfc");
  ValId p = input("p", ty(DT_F64, 2, 4, 6), "pos");
  out(un(IR_LOG1P, p, "log1p"), "log1p");
  out(un(IR_LOG2, p, "log2"), "log2");
  out(un(IR_LOG10, p, "log10"), "log10");
  out(un(IR_ACOSH, bin(IR_ADD, p, cst(DT_F64, 1), "p1"), "acosh"), "acosh");
  entry_done();

  entry("binary");
  ValId a = input("a", ty(DT_F32, 2, 6, 5), "normal3");
  ValId b = input("b", ty(DT_F32, 2, 1, 5), "normal");
  out(bin(IR_ATAN2, a, b, "atan2"), "atan2");
  out(bin(IR_REMAINDER, a, b, "remainder"), "remainder");
  out(bin(IR_FMOD, a, b, "fmod"), "fmod");
  out(bin(IR_FLOORDIV, a, b, "floordiv"), "floor_divide");
  out(bin(IR_REMAINDER, a, cst(DT_F32, -1.5), "rem_scalar"), "remainder_scalar");
  out(bin(IR_COPYSIGN, a, b, "copysign"), "copysign");
  ValId d = input("d", ty(DT_F64, 1, 7), "normal3");
  ValId e = input("e", ty(DT_F64, 1, 7), "normal");
  out(bin(IR_REMAINDER, d, e, "drem"), "remainder_f64");
  out(bin(IR_FLOORDIV, d, e, "dfloordiv"), "floor_divide_f64");
  entry_done();

  /* binary cross entropy and its d/dinput (issue 27), at and inside the 1e-12 clamp */
  entry("bce");
  a = input("a", ty(DT_F32, 1, 48), "prob");
  b = input("b", ty(DT_F32, 1, 48), "prob");
  out(bin(IR_BCE, a, b, "bce"), "bce");
  out(bin(IR_BCE_GRAD, a, b, "bce_grad"), "bce_grad");
  d = input("d", ty(DT_F64, 1, 48), "prob");
  e = input("e", ty(DT_F64, 1, 48), "prob");
  out(bin(IR_BCE, d, e, "dbce"), "bce_f64");
  out(bin(IR_BCE_GRAD, d, e, "dbce_grad"), "bce_grad_f64");
  entry_done();

  /* 0, -0, halves, NaN and infinities against PyTorch, fused into one kernel */
  entry("edges");
  a = input("a", ty(DT_F32, 1, 64), "edge");
  b = input("b", ty(DT_F32, 1, 64), "edge");
  out(un(IR_SIGN, a, "sign"), "sign");
  out(un(IR_ROUND, a, "round"), "round");
  out(un(IR_TRUNC, a, "trunc"), "trunc");
  out(un(IR_EXPM1, a, "expm1"), "expm1");
  out(un(IR_ATAN, a, "atan"), "atan");
  out(bin(IR_ATAN2, a, b, "atan2"), "atan2");
  out(bin(IR_REMAINDER, a, b, "remainder"), "remainder");
  out(bin(IR_FMOD, a, b, "fmod"), "fmod");
  out(bin(IR_FLOORDIV, a, b, "floordiv"), "floor_divide");
  out(bin(IR_COPYSIGN, a, b, "copysign"), "copysign");
  d = input("d", ty(DT_F64, 1, 64), "edge");
  e = input("e", ty(DT_F64, 1, 64), "edge");
  out(bin(IR_REMAINDER, d, e, "drem"), "remainder_f64");
  out(bin(IR_FLOORDIV, d, e, "dfloordiv"), "floor_divide_f64");
  out(un(IR_SIGN, d, "dsign"), "sign_f64");
  entry_done();

  entry("ints");
  ValId i = input("i", ty(DT_I64, 2, 4, 6), "int");
  ValId j = input("j", ty(DT_I64, 2, 4, 6), "nonzero");
  out(bin(IR_REMAINDER, i, j, "rem"), "remainder");
  out(bin(IR_FMOD, i, j, "fmod"), "fmod");
  out(bin(IR_FLOORDIV, i, j, "fdiv"), "floor_divide");
  out(bin(IR_DIV, i, j, "tdiv"), "trunc_divide");
  out(bin(IR_BIT_AND, i, j, "band"), "and");
  out(bin(IR_BIT_OR, i, j, "bor"), "or");
  out(bin(IR_BIT_XOR, i, j, "bxor"), "xor");
  out(un(IR_BIT_NOT, i, "bnot"), "not");
  ValId sh = input("sh", ty(DT_I64, 1, 6), "shift");
  out(bin(IR_SHL, i, sh, "shl"), "shl");
  out(bin(IR_SHR, i, sh, "shr"), "shr");
  out(un(IR_SIGN, i, "isign"), "sign");
  ValId k = input("k", ty(DT_I32, 1, 6), "int");
  ValId l = input("l", ty(DT_I32, 1, 6), "nonzero");
  out(bin(IR_REMAINDER, k, l, "rem32"), "remainder_i32");
  out(bin(IR_FLOORDIV, k, l, "fdiv32"), "floor_divide_i32");
  out(bin(IR_BIT_XOR, k, l, "xor32"), "xor_i32");
  out(un(IR_BIT_NOT, k, "not32"), "not_i32");
  out(bin(IR_SHL, k, cst(DT_I32, 33), "shl32"), "shl_i32");
  out(bin(IR_SHR, k, cst(DT_I32, 2), "shr32"), "shr_i32");
  ValId m = input("m", ty(DT_BOOL, 2, 4, 6), "bool");
  ValId n = input("n", ty(DT_BOOL, 1, 6), "bool");
  out(bin(IR_BIT_AND, m, n, "mand"), "bool_and");
  out(bin(IR_BIT_OR, m, n, "mor"), "bool_or");
  out(bin(IR_BIT_XOR, m, n, "mxor"), "bool_xor");
  out(un(IR_BIT_NOT, m, "mnot"), "bool_not");
  /* x // 0 and x % 0 never trap (PyTorch raises): 0; INT64_MIN // -1 wraps */
  out(bin(IR_FLOORDIV, i, cst(DT_I64, 0), "fdiv0"), "floor_divide_0");
  out(bin(IR_REMAINDER, i, cst(DT_I64, 0), "rem0"), "remainder_0");
  out(bin(IR_FLOORDIV, cst(DT_I64, (double)INT64_MIN), cst(DT_I64, -1), "wrap"), "floor_divide_wrap");
  entry_done();

  entry("scans");
  x = input("x", ty(DT_F32, 3, 3, 4, 5), "normal");
  out(cumsum(x, 0, 0, "cs0"), "cumsum0");
  out(cumsum(x, 1, 1, "cs1r"), "cumsum1_rev");
  out(cumsum(x, 2, 0, "cs2"), "cumsum2");
  out(cumsum(x, 2, 1, "cs2r"), "cumsum2_rev");
  i = input("i", ty(DT_I64, 2, 4, 6), "int");
  out(cumsum(i, 1, 0, "ics"), "cumsum_i64");
  ValId s = input("s", ty(DT_F32, 3, 3, 4, 5), "small");   /* ties */
  out(argmax(s, 0, 0, "am0"), "argmax0");
  out(argmax(s, 1, 0, "am1"), "argmax1");
  out(argmax(s, 2, 1, "amin2"), "argmin2");
  out(argmax(i, 1, 0, "iam"), "argmax_i64");
  out(argmax(i, 0, 1, "iamin"), "argmin_i64");
  ValId ed = input("ed", ty(DT_F64, 2, 8, 8), "edge");    /* NaN and infinities */
  out(argmax(ed, 1, 0, "eam"), "argmax_edge");
  out(argmax(ed, 0, 1, "eamin"), "argmin_edge");
  entry_done();

  entry("gathers");
  x = input("x", ty(DT_F32, 3, 3, 4, 5), "normal");
  ValId ix = input("ix", ty(DT_I64, 3, 3, 6, 2), "range4");
  out(gather(x, 1, ix, ty(DT_F32, 3, 3, 6, 2), "g1"), "gather1");                 /* torch.gather */
  ValId sel = input("sel", ty(DT_I64, 3, 1, 1, 7), "range5");
  out(gather(x, 2, sel, ty(DT_F32, 3, 3, 4, 7), "g2"), "index_select2");          /* a broadcast index */
  ValId cl = input("cl", ty(DT_I64, 3, 2, 4, 5), "range3");
  out(gather(x, 0, cl, ty(DT_F32, 3, 2, 4, 5), "g0"), "gather0");
  ValId base = input("base", ty(DT_F32, 3, 3, 4, 5), "normal");
  ValId src = input("src", ty(DT_F32, 3, 3, 6, 2), "normal");
  out(scatter_add(base, 1, ix, src, ty(DT_F32, 3, 3, 4, 5), "sa1"), "scatter_add1");
  ValId src2 = input("src2", ty(DT_F32, 3, 3, 4, 7), "normal");
  out(scatter_add(cst(DT_F32, 0), 2, sel, src2, ty(DT_F32, 3, 3, 4, 5), "sa2"), "scatter_add_zero");
  ValId ib = input("ib", ty(DT_I64, 2, 4, 5), "int");
  ValId iix = input("iix", ty(DT_I64, 2, 3, 5), "range4");
  out(gather(ib, 0, iix, ty(DT_I64, 2, 3, 5), "ig"), "gather_i64");
  out(scatter_add(ib, 0, iix, gather(ib, 0, iix, ty(DT_I64, 2, 3, 5), "ig2"), ty(DT_I64, 2, 4, 5), "isa"),
      "scatter_add_i64");
  entry_done();

  /* ragged sizes: 21 rows (query blocks of 16), 70 keys (blocks of 64) */
  entry("attention");
  ValId at[5];
  const char *an[5] = {"q", "k", "v", "o", "g"};
  for (int j = 0; j < 3; j++) at[j] = input(an[j], ty(DT_F32, 4, 2, 3, 21, 16), "normal");
  at[4] = input("g", ty(DT_F32, 4, 2, 3, 21, 16), "normal");
  at[3] = attention(at, 0, 1, 0, 0.25, "att");
  out(at[3], "causal");
  out(attention(at, 1, 1, 0, 0.25, "att_bwd"), "causal_bwd");
  ValId bt[5];
  for (int j = 0; j < 3; j++) bt[j] = input(an[j], ty(DT_F64, 3, 2, 70, 16), "normal");
  bt[4] = input("g", ty(DT_F64, 3, 2, 70, 16), "normal");
  bt[3] = attention(bt, 0, 0, 1, 3.0, "att_full");
  out(bt[3], "full");
  out(attention(bt, 1, 0, 1, 3.0, "att_full_bwd"), "full_bwd");
  entry_done();

  suite_done();

  /* the shape rule that the builder and the verifier share refuses bitwise ops
   * on floats (ir_emit would stop at such an instruction as a bug in ctc) */
  Type ff[2] = {ty(DT_F32, 1, 3), ty(DT_F32, 1, 3)}, r;
  int64_t noattr[IR_MAX_ATTRS] = {0};
  const char *why = ir_infer_type(IR_BIT_AND, noattr, 2, ff, &r);
  if (!why || why == IR_TYPE_GIVEN) BUG("the shape rule accepted bitwise_and on f32");
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s OUTDIR\n", argv[0]);
    return 2;
  }
  snprintf(outdir, sizeof outdir, "%s", argv[1]);
  if (mkdir(outdir, 0777) && errno != EEXIST) BUG("cannot create %s", outdir);
  suite_elem();
  suite_reduce();
  suite_shape();
  suite_linalg();
  suite_nn();
  suite_params();
  suite_grad();
  suite_train();
  suite_more();
  check_refusals();
  wide_check();
  if (plan_errors) {
    fprintf(stderr, "%d plan errors\n", plan_errors);
    return 1;
  }
  return 0;
}
