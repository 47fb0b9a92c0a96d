/* kir.c - building the kernel IR (kir.h) of a fused kernel, and `--emit kir`.
 *
 * The decisions made here are the kernel's and hold for every target: which
 * values are loaded once per element, which are locals, which are stored and
 * where, in which of a row kernel's loops each instruction runs, and where a
 * row element read by a later loop comes from (its per-row array, or memory). */
#include <stdlib.h>
#include <string.h>
#include "kir.h"

static const Type *ty(const Func *f, ValId v) { return &f->values.data[v].type; }

static const Inst *def_of(const Func *f, ValId v) { return ir_def(f, v); }

static int is_literal(const Func *f, ValId v) {
  const Inst *d = def_of(f, v);
  return d && d->op == IR_CONST;
}

static int in_kernel(const Func *f, const Kernel *kn, ValId v) {
  const Inst *d = def_of(f, v);
  if (!d || d->op == IR_CONST) return 0;
  int i = (int)(d - f->insts.data);
  return i >= kn->first && i <= kn->last;
}

static int is_output(const Kernel *kn, ValId v) {
  for (int j = 0; j < kn->outputs.len; j++)
    if (kn->outputs.data[j] == v) return 1;
  return 0;
}

static int same_dims(const Type *a, const Type *b) {
  if (a->ndim != b->ndim) return 0;
  for (int k = 0; k < a->ndim; k++)
    if (a->dims[k] != b->dims[k]) return 0;
  return 1;
}

static int is_reduction(const Inst *in) { return in->op == IR_REDUCE_SUM || in->op == IR_REDUCE_MAX; }

/* t with its leading axes merged into one so that it has S's rank, where it has more axes than the
 * space: a GEMM epilogue runs over the result [..., N] as [M, N] (codegen's cg_emit_gemm_kernel), and
 * its operands (kn_epilogue_operand: the result's shape, a vector along the last axis or a scalar)
 * keep their own rank, [B, 1, N] as [B, N] (aligning the last two axes instead would read the
 * size-1 axis for the rows: every row the first one's values). */
static Type fit_rank(const Type *t, const Type *S) {
  Type r = *t;
  if (t->ndim <= S->ndim) return r;
  const int lead = t->ndim - S->ndim + 1;
  r.ndim = S->ndim;
  r.dims[0] = 1;
  for (int k = 0; k < lead; k++) r.dims[0] *= t->dims[k];
  for (int k = 1; k < S->ndim; k++) r.dims[k] = t->dims[lead + k - 1];
  return r;
}

/* Strides of an operand of type t broadcast (numpy-style) over the space S. */
static KirIndex bcast(const Type *t0, const Type *S) {
  KirIndex ix;
  const Type tr = fit_rank(t0, S), *t = &tr;
  int64_t cs[IR_MAX_DIMS], s = 1;
  memset(&ix, 0, sizeof ix);
  for (int k = t->ndim - 1; k >= 0; k--) cs[k] = s, s *= t->dims[k];
  for (int k = 0; k < S->ndim; k++) {
    int ax = k - (S->ndim - t->ndim);
    ix.st[k] = ax >= 0 && t->dims[ax] != 1 ? cs[ax] : 0;
  }
  return ix;
}

/* How operand v (from memory) is read over the space S: broadcast, and through the
 * strides and offset of its layout when it is (a view of) a folded slice or permute. */
static KirIndex operand_index(const Func *f, const KnSchedule *s, ValId v, const Type *S) {
  KirIndex ix = bcast(ty(f, v), S);
  KnLayout l;
  if (!s || kn_root(f, s, v) == kn_root(f, NULL, v) || kn_layout(f, s, v, &l) < 0) return ix;
  const Type *t = ty(f, v);
  CHECK(t->ndim <= S->ndim);   /* (a GEMM epilogue's operands, fit_rank's, are never folded views) */
  ix.off = l.off;
  for (int k = 0; k < S->ndim; k++) {
    int ax = k - (S->ndim - t->ndim);
    ix.st[k] = ax >= 0 && t->dims[ax] != 1 ? l.st[ax] : 0;
  }
  return ix;
}

typedef struct B {
  Arena *a;
  const Func *f;
  const KnSchedule *s;
  const Kernel *kn;
  Kir *k;
  unsigned char *rowload;   /* KN_ROW: per value, loaded once per row into its local (build_row) */
} B;

/* v's type in the kernel's terms: a row kernel's merged trailing axes as one (kn_collapse). */
static Type kty(const B *b, ValId v) {
  Type t;
  CHECK(kn_collapse(b->kn, ty(b->f, v), &t) == 0);
  return t;
}

static KirStmt *add(B *b, KirBlock *blk, KirStmtKind kind, ValId v) {
  KirStmt *st = arena_alloc(b->a, sizeof *st);
  st->kind = kind;
  st->v = v;
  vec_push(b->a, blk, st);
  return st;
}

static KirExpr *expr(B *b, KirExprKind kind, ValId v) {
  KirExpr *x = arena_alloc(b->a, sizeof *x);
  x->kind = kind;
  x->v = v;
  return x;
}

static KirExpr *load(B *b, ValId v, KirIndex ix) {
  KirExpr *x = expr(b, KE_LOAD, v);
  x->ix = ix;
  return x;
}

static KirExpr *op(B *b, const Inst *in, KirExpr *const *args) {
  KirExpr *x = expr(b, KE_OP, in->res);
  x->in = in;
  x->nargs = in->nargs;
  for (int k = 0; k < in->nargs; k++) x->arg[k] = args[k];
  return x;
}

/* ---- KN_ELEM --------------------------------------------------------------------------- */

static void build_elem(B *b) {
  const Func *f = b->f;
  const Kernel *kn = b->kn;
  const Type *S = &kn->space;
  KirStmt *loop = add(b, &b->k->body, KS_LOOP, -1);
  loop->loop = KIR_SPACE;
  loop->from = 0, loop->to = S->ndim;
  loop->marks = KIR_PARALLEL | KIR_VECTOR;
  /* every input of the element first: a result may be stored over an input in place */
  for (int j = 0; j < kn->inputs.len; j++) {
    ValId v = kn->inputs.data[j];
    add(b, &loop->body, KS_LET, v)->x = load(b, v, operand_index(f, b->s, v, S));
  }
  KirIndex out = bcast(S, S);
  /* per instruction of the kernel: the last one reading its result, and whether it is an
   * output (one pass each, so a kernel of many thousand ops is not quadratic here) */
  const int n = kn->last - kn->first + 1;
  int *last = malloc(sizeof(int) * (size_t)(n > 0 ? n : 1));
  char *outp = calloc((size_t)(n > 0 ? n : 1), 1);
  if (!last || !outp) BUG("out of memory");
  for (int j = 0; j < n; j++) last[j] = -1;
  for (int j = kn->first; j <= kn->last; j++)
    for (int a = 0; a < f->insts.data[j].nargs; a++) {
      const Inst *d = def_of(f, f->insts.data[j].args[a]);
      int di = d ? (int)(d - f->insts.data) : -1;
      if (di >= kn->first && di <= kn->last) last[di - kn->first] = j;
    }
  for (int j = 0; j < kn->outputs.len; j++) {
    const Inst *d = def_of(f, kn->outputs.data[j]);
    int di = d ? (int)(d - f->insts.data) : -1;
    if (di >= kn->first && di <= kn->last) outp[di - kn->first] = 1;
  }
  for (int i = kn->first; i <= kn->last; i++) {
    const Inst *in = &f->insts.data[i];
    if (in->op == IR_CONST) continue;
    KirExpr *args[3];
    for (int a = 0; a < in->nargs; a++)
      args[a] = expr(b, is_literal(f, in->args[a]) ? KE_LIT : KE_LOCAL, in->args[a]);
    KirExpr *x = op(b, in, args);
    ValId r = in->res;
    const int is_out = outp[i - kn->first];
    if (is_out && last[i - kn->first] <= i) {   /* stored directly: not read later in the kernel */
      KirStmt *st = add(b, &loop->body, KS_STORE, r);
      st->x = x, st->ix = out;
      continue;
    }
    add(b, &loop->body, KS_LET, r)->x = x;
    if (is_out) {
      KirStmt *st = add(b, &loop->body, KS_STORE, r);
      st->x = expr(b, KE_LOCAL, r), st->ix = out;
    }
  }
  free(last);
  free(outp);
}

/* ---- KN_ROW ---------------------------------------------------------------------------- */

/* v's element at the current row, and at the current position in it when with_j. */
static KirIndex row_index(B *b, ValId v, int with_j) {
  KirIndex ix;
  if (b->kn->merge > 1) {   /* (the schedule merges no operand read through a folded view) */
    Type t = kty(b, v);
    ix = bcast(&t, &b->kn->space);
  } else {
    ix = operand_index(b->f, b->s, v, &b->kn->space);
  }
  if (!with_j) ix.st[b->kn->space.ndim - 1] = 0;
  return ix;
}

/* Operand v of an instruction that runs in loop ph (-1: per row, outside the loops). */
static KirExpr *row_operand(B *b, ValId v, int ph) {
  const Func *f = b->f;
  if (is_literal(f, v)) return expr(b, KE_LIT, v);
  if (b->rowload && b->rowload[v]) return expr(b, KE_LOCAL, v);
  if (in_kernel(f, b->kn, v)) {
    int di = f->values.data[v].def;
    Type t = kty(b, v);
    if (!same_dims(&t, &b->kn->space) || b->s->phase[di] == ph) return expr(b, KE_LOCAL, v);
    if (b->s->rowbuf[v]) return expr(b, KE_ROWBUF, v);
    /* a stored row element of an earlier loop: read back */
  }
  return load(b, v, row_index(b, v, ph >= 0));
}

static void row_store(B *b, KirBlock *blk, ValId v, int with_j) {
  if (!is_output(b->kn, v)) return;
  KirStmt *st = add(b, blk, KS_STORE, v);
  st->x = expr(b, KE_LOCAL, v);
  st->ix = row_index(b, v, with_j);
}

static void row_elem(B *b, KirBlock *blk, const Inst *in, int ph) {
  KirExpr *args[3];
  for (int a = 0; a < in->nargs; a++) args[a] = row_operand(b, in->args[a], ph);
  add(b, blk, KS_LET, in->res)->x = op(b, in, args);
  row_store(b, blk, in->res, ph >= 0);
  if (b->s->rowbuf[in->res]) add(b, blk, KS_ROWBUF_PUT, in->res);
}

static void build_row(B *b) {
  const Func *f = b->f;
  const Kernel *kn = b->kn;
  const KnSchedule *s = b->s;
  const Type *S = &kn->space;
  int nout = S->ndim - 1;
  Type rt;
  KirStmt *rows = add(b, &b->k->body, KS_LOOP, -1);
  rows->loop = KIR_ROWS;
  rows->from = 0, rows->to = nout;
  rows->marks = KIR_PARALLEL;
  for (int i = kn->first; i <= kn->last; i++)
    if (f->insts.data[i].op != IR_CONST && s->rowbuf[f->insts.data[i].res])
      add(b, &rows->body, KS_ROWBUF_DECL, f->insts.data[i].res);
  /* operands from memory that are one value per row (a row's maximum, a target class, a scale:
   * broadcast along it) are loaded once, before the row's loops: read in a loop under a select
   * (where), the load was conditional, a masked load the vectoriser may refuse (an i64 compare
   * choosing an f32 load: the cross-entropy backward ran scalar, 17 ns an element) */
  b->rowload = arena_alloc(b->a, (size_t)f->values.len + 1);
  memset(b->rowload, 0, (size_t)f->values.len + 1);
  for (int i = kn->first; i <= kn->last; i++) {
    const Inst *in = &f->insts.data[i];
    if (in->op == IR_CONST) continue;
    for (int a = 0; a < in->nargs; a++) {
      ValId v = in->args[a];
      if (is_literal(f, v) || in_kernel(f, kn, v) || b->rowload[v] || row_index(b, v, 1).st[nout] != 0) continue;
      add(b, &rows->body, KS_LET, v)->x = load(b, v, row_index(b, v, 0));
      b->rowload[v] = 1;
    }
  }
  for (int p = 0; p <= kn->nloops; p++) {
    /* per-row values that exist from loop p on, then the accumulators of loop p */
    int any = 0;
    for (int i = kn->first; i <= kn->last; i++) {
      const Inst *in = &f->insts.data[i];
      if (in->op == IR_CONST || s->phase[i] != p) continue;
      if (is_reduction(in)) any = 1, add(b, &rows->body, KS_ACC_INIT, in->res)->in = in;
      else if (rt = kty(b, in->res), !same_dims(&rt, S)) row_elem(b, &rows->body, in, -1);
      else any = 1;
    }
    if (!any) continue;
    KirStmt *row = add(b, &rows->body, KS_LOOP, -1);
    row->loop = KIR_ROW;
    row->from = nout, row->to = nout + 1;
    for (int i = kn->first; i <= kn->last; i++) {
      const Inst *in = &f->insts.data[i];
      if (in->op == IR_CONST || s->phase[i] != p) continue;
      if (is_reduction(in)) {
        KirStmt *st = add(b, &row->body, KS_ACC, in->res);
        st->in = in, st->x = row_operand(b, in->args[0], p);
      } else if (rt = kty(b, in->res), same_dims(&rt, S)) {
        row_elem(b, &row->body, in, p);
      }
    }
    for (int i = kn->first; i <= kn->last; i++) {
      const Inst *in = &f->insts.data[i];
      if (in->op == IR_CONST || s->phase[i] != p || !is_reduction(in)) continue;
      add(b, &rows->body, KS_ACC_DONE, in->res)->in = in;
      row_store(b, &rows->body, in->res, 0);
    }
  }
}

Kir *kir_build(Arena *a, const Func *f, const KnSchedule *s, const Kernel *kn) {
  B b = {a, f, s, kn, arena_alloc(a, sizeof(Kir)), NULL};
  b.k->f = f;
  b.k->kn = kn;
  b.k->space = kn->space;
  if (kn->kind == KN_ROW) {
    b.k->rowlen = kn->space.dims[kn->space.ndim - 1];
    build_row(&b);
  } else {
    CHECK(kn->kind == KN_ELEM);
    build_elem(&b);
  }
  return b.k;
}

/* ---- --emit kir ------------------------------------------------------------------------ */

static void print_index(FILE *out, const Kir *k, const KirIndex *ix) {
  int any = ix->off != 0;
  if (any) fprintf(out, "%lld", (long long)ix->off);
  for (int d = 0; d < k->space.ndim; d++) {
    if (!ix->st[d]) continue;
    fprintf(out, "%s", any ? " + " : "");
    if (ix->st[d] == 1) fprintf(out, "i%d", d);
    else fprintf(out, "i%d*%lld", d, (long long)ix->st[d]);
    any = 1;
  }
  if (!any) fprintf(out, "0");
}

static void print_expr(FILE *out, const Kir *k, const KirExpr *x) {
  const Value *v = &k->f->values.data[x->v >= 0 ? x->v : 0];
  switch (x->kind) {
  case KE_LIT: fprintf(out, "%.9g", def_of(k->f, x->v)->fattr); break;
  case KE_LOCAL: fprintf(out, "%%%s.%d", v->name, x->v); break;
  case KE_ROWBUF: fprintf(out, "rowbuf(%%%s.%d)", v->name, x->v); break;
  case KE_LOAD:
    fprintf(out, "load %%%s.%d[", v->name, x->v);
    print_index(out, k, &x->ix);
    fprintf(out, "]");
    break;
  case KE_OP:
    fprintf(out, "%s(", ir_ops[x->in->op].name);
    for (int a = 0; a < x->nargs; a++) {
      if (a) fprintf(out, ", ");
      print_expr(out, k, x->arg[a]);
    }
    fprintf(out, ")");
    break;
  case KE_AXIS: fprintf(out, "i%d", x->axis); break;
  case KE_INT: fprintf(out, "%lld", (long long)x->imm); break;
  case KE_FLT: fprintf(out, "%.9g", x->fimm); break;
  case KE_BIN: {
    static const char *const sym[] = {"+", "-", "*", "<", ">=", "&&", ">", "==", "||"};
    fprintf(out, "(");
    print_expr(out, k, x->arg[0]);
    fprintf(out, " %s ", sym[x->bop]);
    print_expr(out, k, x->arg[1]);
    fprintf(out, ")");
    break;
  }
  case KE_SELECT:
    fprintf(out, "select(");
    for (int a = 0; a < 3; a++) {
      if (a) fprintf(out, ", ");
      print_expr(out, k, x->arg[a]);
    }
    fprintf(out, ")");
    break;
  case KE_LOADAT:
  case KE_TABLE:
    if (x->kind == KE_TABLE) fprintf(out, "%s[", k->tables.data[x->table].hint);
    else fprintf(out, "load %%%s.%d[", v->name, x->v);
    print_expr(out, k, x->arg[0]);
    fprintf(out, "]");
    break;
  case KE_VAR: fprintf(out, "$%s", k->vars.data[x->var].hint); break;
  case KE_KEY:
    fprintf(out, "key%s(", x->imm < 0 ? "_nanlow" : "");
    print_expr(out, k, x->arg[0]);
    fprintf(out, ")");
    break;
  case KE_CAST:
  case KE_NOT:
  case KE_ISNAN:
    fprintf(out, "%s(", x->kind == KE_CAST ? ir_dtype_name(x->dt) : x->kind == KE_NOT ? "not" : "isnan");
    print_expr(out, k, x->arg[0]);
    fprintf(out, ")");
    break;
  }
}

static void print_block(FILE *out, const Kir *k, const KirBlock *b, int ind) {
  static const char *const loops[] = {"space", "rows", "row", "serial", "lanes"};
  for (int j = 0; j < b->len; j++) {
    const KirStmt *s = b->data[j];
    const char *name = s->v >= 0 ? k->f->values.data[s->v].name : "";
    fprintf(out, "%*s", ind, "");
    switch (s->kind) {
    case KS_LOOP:
      fprintf(out, "loop %s over", loops[s->loop]);
      for (int d = s->from; d < s->to; d++)
        fprintf(out, " i%d<%lld", d, (long long)(s->loop == KIR_SERIAL ? s->n : k->space.dims[d]));
      fprintf(out, "%s%s%s\n", s->marks & KIR_PARALLEL ? " parallel" : "", s->marks & KIR_VECTOR ? " vector" : "",
              s->marks & KIR_REVERSE ? " reverse" : "");
      print_block(out, k, &s->body, ind + 2);
      continue;
    case KS_IF:
      fprintf(out, "if ");
      print_expr(out, k, s->x);
      fprintf(out, "\n");
      print_block(out, k, &s->body, ind + 2);
      continue;
    case KS_VAR:
    case KS_SET:
      fprintf(out, "%s$%s", s->kind == KS_VAR ? "var " : "", k->vars.data[s->var].hint);
      if (s->kind == KS_VAR && k->vars.data[s->var].lanes) fprintf(out, "[%lld]", (long long)k->vars.data[s->var].lanes);
      fprintf(out, "%s = ", s->kind == KS_VAR && k->vars.data[s->var].sum ? " (sum)" : "");
      print_expr(out, k, s->x);
      break;
    case KS_STOREAT:
      fprintf(out, "store %%%s.%d[", name, s->v);
      print_expr(out, k, s->at);
      fprintf(out, "] = ");
      print_expr(out, k, s->x);
      break;
    case KS_LET: fprintf(out, "let %%%s.%d = ", name, s->v); print_expr(out, k, s->x); break;
    case KS_STORE:
      fprintf(out, "store %%%s.%d[", name, s->v);
      print_index(out, k, &s->ix);
      fprintf(out, "] = ");
      print_expr(out, k, s->x);
      break;
    case KS_ROWBUF_DECL: fprintf(out, "rowbuf %%%s.%d", name, s->v); break;
    case KS_ROWBUF_PUT: fprintf(out, "rowbuf(%%%s.%d) = %%%s.%d", name, s->v, name, s->v); break;
    case KS_ACC_INIT: fprintf(out, "acc %%%s.%d = init %s", name, s->v, ir_ops[s->in->op].name); break;
    case KS_ACC: fprintf(out, "acc %%%s.%d <- ", name, s->v); print_expr(out, k, s->x); break;
    case KS_ACC_DONE: fprintf(out, "let %%%s.%d = acc %%%s.%d", name, s->v, name, s->v); break;
    case KS_CALL:
      if (!strcmp(s->call->fn, "gemm")) {   /* gemm.c: operands, BLAS's arguments, the batch's strides */
        const KirCall *g = s->call;
        fprintf(out, "%%%s.%d = call gemm(", name, s->v);
        for (int a = 0; a < 2; a++)
          fprintf(out, "%s%%%s.%d + %lld", a ? ", " : "", k->f->values.data[g->args[a]].name, g->args[a],
                  (long long)g->off[a]);
        fprintf(out, "; ta %lld, tb %lld, M %lld, N %lld, K %lld, lda %lld, ldb %lld", (long long)g->ints[0],
                (long long)g->ints[1], (long long)g->ints[2], (long long)g->ints[3], (long long)g->ints[4],
                (long long)g->ints[5], (long long)g->ints[6]);
        for (int j = 0; j < 3 && k->space.ndim; j++) {
          fprintf(out, "%s", j ? " " : "; batch strides ");
          for (int x = 0; x < k->space.ndim; x++) fprintf(out, "%s%lld", x ? "," : "[", (long long)g->bst[j][x]);
          fprintf(out, "]");
        }
        fprintf(out, "%s)", g->folded ? "; folded" : "");
        break;
      }
      if (!strncmp(s->call->fn, "conv2d", 6)) {   /* conv.c: operands and geometry */
        const ConvGeom *g = &s->call->conv;
        fprintf(out, "%%%s.%d = call %s(%%%s.%d, %%%s.%d; x [%lld,%lld,%lld,%lld], w [%lld,%lld,%lld,%lld], y "
                     "[%lld,%lld,%lld,%lld], stride %lldx%lld, padding %lldx%lld, dilation %lldx%lld, groups %lld)",
                name, s->v, s->call->fn, k->f->values.data[s->call->args[0]].name, s->call->args[0],
                k->f->values.data[s->call->args[1]].name, s->call->args[1], (long long)g->N, (long long)g->C,
                (long long)g->H, (long long)g->W, (long long)g->O, (long long)g->Cg, (long long)g->KH, (long long)g->KW,
                (long long)g->N, (long long)g->O, (long long)g->OH, (long long)g->OW, (long long)g->sh, (long long)g->sw,
                (long long)g->ph, (long long)g->pw, (long long)g->dh, (long long)g->dw, (long long)g->G);
        break;
      }
      fprintf(out, "%%%s.%d = call %s(", name, s->v, s->call->fn);
      for (int a = 0; a < s->call->nargs; a++)
        fprintf(out, "%s%%%s.%d", a ? ", " : "", k->f->values.data[s->call->args[a]].name, s->call->args[a]);
      for (int a = 0; a < s->call->nint; a++) fprintf(out, ", %lld", (long long)s->call->ints[a]);
      fprintf(out, ", %.9g)", s->call->real);
      break;
    }
    fprintf(out, "\n");
  }
}

void kir_print(FILE *out, const Program *p, const Func *f, const KnSchedule *s) {
  Arena *a = p->arena;
  char tb[256], tb2[256];
  fprintf(out, "func %s\n", f->name);
  for (int k = 0; k < s->kernels.len; k++) {
    const Kernel *kn = &s->kernels.data[k];
    for (int i = kn->first; kn->kind == KN_OP && i <= kn->last; i++) {   /* data movement (kir_ops.c) */
      const Inst *in = &f->insts.data[i];
      Kir *kir = in->op == IR_CONST || ir_is_view(f, in->res) || s->fold[in->res] ? NULL : kir_build_op(a, f, in, 1);
      if (!kir) continue;
      fprintf(out, "  kernel %d: %s over %s\n", k, ir_ops[in->op].name, ir_type_str(&kir->space, tb, sizeof tb));
      for (int t = 0; t < kir->tables.len; t++)
        fprintf(out, "    table %s %s[%lld]\n", kir->tables.data[t].hint, ir_dtype_name(kir->tables.data[t].dt),
                (long long)kir->tables.data[t].n);
      print_block(out, kir, &kir->body, 4);
    }
    if (kn->kind == KN_GEMM) {   /* a GEMM's call, then its epilogue over each block of the result */
      Kir *g = kir_build_gemm(a, f, s, kn, &f->insts.data[kn->first]);
      int nep = 0;
      Kernel ep = kn_epilogue(p, f, kn, &nep);
      fprintf(out, "  kernel %d: gemm over %s and its epilogue over %s\n", k, ir_type_str(&g->space, tb, sizeof tb),
              ir_type_str(&kn->space, tb2, sizeof tb2));
      print_block(out, g, &g->body, 4);
      if (nep) {
        Kir *e = kir_build(a, f, s, &ep);
        print_block(out, e, &e->body, 4);
      }
      continue;
    }
    Kir *kir = kn->kind == KN_OP ? kir_build_call(a, f, s, kn) : NULL;
    if (kn->kind != KN_ELEM && kn->kind != KN_ROW && !kir) continue;
    fprintf(out, "  kernel %d: %s over %s\n", k, kir ? "call" : kn->kind == KN_ROW ? "row" : "elementwise",
            ir_type_str(kir ? &kir->space : &kn->space, tb, sizeof tb));   /* a GEMM's: its batch */
    if (!kir) kir = kir_build(a, f, s, kn);
    print_block(out, kir, &kir->body, 4);
  }
}
