/* render_c.c - the kernel IR (kernels/kir.h) printed as C, and the walk every
 * renderer shares (cg_int.h: CgRender, CgRenderOps).
 *
 * A renderer is a table of functions (CgRenderOps) over one walk: the walk
 * writes the statements every target writes alike (locals, per-row array
 * elements, accumulator inits and updates) and asks the table for the rest:
 * the locals' names, loops, index expressions, stores, per-row arrays and a
 * reduction's final value. cg_render_c is the C target's table; codegen_cuda
 * copies it and overrides what differs (grid-stride loops, a block per row,
 * flat indices, shared-memory trees).
 *
 * C: a KIR_SPACE loop is a nest over the space's axes with size-1 axes dropped
 * and adjacent axes merged where every access is contiguous across them (one
 * flat loop for same-shape operands), OpenMP on the outer loop (KIR_PARALLEL)
 * when the nest has CgRender.omp_min_work elements, `omp simd` on the inner one
 * (KIR_VECTOR). A KIR_ROWS loop is the row loops i0, i1, ... (OpenMP on the
 * first); a KIR_ROW loop with accumulations and row elements (or float sums)
 * runs as two: the elements and the reductions' operands (into `<name>_in[]`)
 * in a CTC_OMP_SIMD loop, then the accumulations in their order (ctc_sum /
 * ctc_max for floats, as emit_reduce). A parallel loop is the C target's
 * par_for (below), shared with the ops that are not kernel IR (cg_par_for, and
 * cg_par_open around the loops the GEMM, convolution and reduction emitters
 * write): OpenMP, or with CgFunc.prof_site (--profile) a region whose threads
 * report their shares: a renderer option, not a rewrite of the text. */
#include <stdlib.h>
#include <string.h>
#include "cg_int.h"

typedef long long ll;

#define IDX_CAP 512   /* an index expression's text (a CUDA flat index is longer than C's) */
/* Loops with fewer elements than this are not worth waking threads for (emit_ops.c's). */
#define OMP_MIN_WORK ((int64_t)1 << 15)

static const Type *ty(const CgFunc *c, ValId v) { return &c->f->values.data[v].type; }
static void ind(CgFunc *c) { cg_printf(c->out, "%*s", c->ind, ""); }
#define LINE(c, ...) (ind(c), cg_printf((c)->out, __VA_ARGS__))

/* ---- the shared walk -------------------------------------------------------------------- */

void cg_render_init(CgRender *r, const CgRenderOps *ops, CgFunc *c, const Kir *k) {
  memset(r, 0, sizeof *r);
  size_t nv = (size_t)c->f->values.len + 1;
  r->ops = ops;
  r->c = c;
  r->k = k;
  r->local = calloc(nv, sizeof *r->local);
  r->accn = calloc(nv, sizeof *r->accn);
  r->rowarr = calloc(nv, sizeof *r->rowarr);
  r->aux = calloc(nv, sizeof *r->aux);
  r->narrow = calloc(nv, sizeof *r->narrow);
  r->tname = calloc((size_t)k->tables.len + 1, sizeof *r->tname);
  r->vname = calloc((size_t)k->vars.len + 1, sizeof *r->vname);
  CHECK(r->local && r->accn && r->rowarr && r->aux && r->narrow && r->tname && r->vname);
  for (int v = 0; v < k->vars.len; v++) r->vname[v] = cg_name(c->ns, k->vars.data[v].hint);
  r->omp_min_work = OMP_MIN_WORK;
  r->serial = -1;
  r->space_to = k->space.ndim;
}

void cg_render_free(CgRender *r) {
  free(r->local);
  free(r->accn);
  free(r->rowarr);
  free(r->aux);
  free(r->narrow);
  free(r->tname);
  free(r->vname);
}

/* KE_BIN's operators and their binding (C's: * over + - over < >= > over == over && over ||). */
static const char *const bin_sym[] = {"+", "-", "*", "<", ">=", "&&", ">", "==", "||"};
static const int bin_prec[] = {5, 5, 6, 4, 4, 2, 4, 3, 1};

/* x as an operand of a binary operator of binding prec (left or right of it): in
 * parentheses when C would otherwise group it differently (a right operand of the same
 * binding always: a float sum's order is the kernel IR's), and an && inside an || (as
 * -Wparentheses asks). */
static void operand(CgRender *r, const KirExpr *x, Buf *b, int prec, int right) {
  int p = x->kind == KE_BIN ? bin_prec[x->bop] : x->kind == KE_SELECT ? -1 : 9;
  int paren = p < prec || (right && p == prec) || (prec == bin_prec[KB_OR] && p == bin_prec[KB_AND]);
  if (paren) cg_puts(b, "(");
  cg_render_expr(r, x, b);
  if (paren) cg_puts(b, ")");
}

void cg_render_expr(CgRender *r, const KirExpr *x, Buf *b) {
  CgFunc *c = r->c;
  char idx[IDX_CAP];
  switch (x->kind) {
  case KE_LIT: {
    const Inst *d = &c->f->insts.data[c->f->values.data[x->v].def];
    cg_literal(b, ty(c, x->v)->dtype, d->fattr);
    break;
  }
  case KE_LOCAL: cg_puts(b, r->local[x->v]); break;
  case KE_ROWBUF: cg_printf(b, "%s[%s]", r->rowarr[x->v], r->ops->rowpos); break;
  case KE_LOAD:   /* (a folded slice's offset before the renderer's index) */
    r->ops->index(r, &x->ix, idx, sizeof idx);
    if (x->ix.off) cg_printf(b, "%s[%lld + %s]", cg_ref(c, x->v), (ll)x->ix.off, idx);
    else cg_printf(b, "%s[%s]", cg_ref(c, x->v), idx);
    break;
  case KE_OP: {
    Buf ops[3] = {{0}};
    const char *txt[3];
    for (int a = 0; a < x->nargs; a++) {
      cg_render_expr(r, x->arg[a], &ops[a]);
      txt[a] = ops[a].s;
    }
    cg_elem_expr(c, x->in, txt, b);
    for (int a = 0; a < x->nargs; a++) cg_buf_free(&ops[a]);
    break;
  }
  case KE_AXIS:
    r->ops->axis(r, x->axis, idx, sizeof idx);
    cg_puts(b, idx);
    break;
  case KE_INT: cg_printf(b, x->imm < 0 ? "(%lld)" : "%lld", (ll)x->imm); break;
  case KE_FLT: cg_literal(b, x->dt, x->fimm); break;
  case KE_BIN:
    operand(r, x->arg[0], b, bin_prec[x->bop], 0);
    cg_printf(b, " %s ", bin_sym[x->bop]);
    operand(r, x->arg[1], b, bin_prec[x->bop], 1);
    break;
  case KE_SELECT:   /* c ? t : e, a select inside it parenthesised */
    for (int a = 0; a < 3; a++) {
      operand(r, x->arg[a], b, 0, 1);
      if (a < 2) cg_puts(b, a ? " : " : " ? ");
    }
    break;
  case KE_LOADAT:
  case KE_TABLE:
    cg_printf(b, "%s[", x->kind == KE_TABLE ? r->tname[x->table] : cg_ref(c, x->v));
    cg_render_expr(r, x->arg[0], b);
    cg_puts(b, "]");
    break;
  case KE_VAR: cg_printf(b, r->k->vars.data[x->var].lanes ? "%s[j]" : "%s", r->vname[x->var]); break;
  case KE_CAST:
  case KE_NOT:
    if (x->kind == KE_CAST) cg_printf(b, "(%s)", cg_ctype(x->dt));
    else cg_puts(b, "!");
    operand(r, x->arg[0], b, 9, 0);
    break;
  case KE_KEY: {   /* kernels.c's ctc_key_f32 / ctc_key_f64 */
    DType t = ty(c, x->arg[0]->v)->dtype;
    if (t == DT_F32) c->k->key_f32 = 1;
    else c->k->key_f64 = 1;
    cg_printf(b, "ctc_key_%s(", t == DT_F32 ? "f32" : "f64");
    cg_render_expr(r, x->arg[0], b);
    cg_puts(b, x->imm < 0 ? ", 0)" : ", 1)");
    break;
  }
  case KE_ISNAN:
    cg_puts(b, "isnan(");
    cg_render_expr(r, x->arg[0], b);
    cg_puts(b, ")");
    break;
  }
}

void cg_render_tables(CgRender *r) {
  CgFunc *c = r->c;
  for (int t = 0; t < r->k->tables.len; t++) {
    const KirTable *tb = &r->k->tables.data[t];
    r->tname[t] = cg_name(c->ns, tb->hint);
    Buf v = {0};
    for (int64_t j = 0; j < tb->n; j++) {
      int per = tb->iv ? 16 : 8;
      if (j) cg_puts(&v, j % per ? ", " : ",\n    ");
      if (tb->iv) cg_printf(&v, "%lld", (ll)tb->iv[j]);
      else cg_literal(&v, tb->dt, tb->fv[j]);
    }
    LINE(c, "static const %s %s[%lld] = {%s};\n", cg_ctype(tb->dt), r->tname[t], (ll)tb->n, v.s ? v.s : "");
    cg_buf_free(&v);
  }
}

void cg_render_block(CgRender *r, const KirBlock *b) {
  CgFunc *c = r->c;
  for (int j = 0; j < b->len; j++) {
    const KirStmt *s = b->data[j];
    Buf x = {0};
    switch (s->kind) {
    case KS_LOOP: r->ops->loop(r, s); break;
    case KS_STORE: r->ops->store(r, s); break;
    case KS_ROWBUF_DECL: r->ops->rowbuf_decl(r, s); break;
    case KS_ACC_DONE: r->ops->acc_done(r, s); break;
    case KS_CALL: CHECK(r->call != NULL); r->call(r, s); break;   /* a microkernel (attn_c.c) */
    case KS_LET:
      cg_render_expr(r, s->x, &x);
      LINE(c, "const %s %s = %s;\n", cg_ctype(ty(c, s->v)->dtype), r->local[s->v], x.s);
      break;
    case KS_ROWBUF_PUT: LINE(c, "%s[%s] = %s;\n", r->rowarr[s->v], r->ops->rowpos, r->local[s->v]); break;
    case KS_ACC_INIT: {
      DType t = ty(c, s->v)->dtype;
      LINE(c, "%s %s = %s;\n", cg_acc_type_k(c->k, s->in, t), r->accn[s->v], cg_acc_init(s->in, t));
      break;
    }
    case KS_ACC:
      cg_render_expr(r, r->narrow[s->v] ? r->narrow[s->v] : s->x, &x);
      if (r->split) LINE(c, "%s[%s] = %s;\n", r->aux[s->v], r->auxpos, x.s);   /* accumulated after the loop */
      else cg_acc_update(c, s->in, r->accn[s->v], x.s);
      break;
    case KS_VAR:
    case KS_SET: {
      const KirVar *v = &r->k->vars.data[s->var];
      cg_render_expr(r, s->x, &x);
      const char *t = v->sum ? cg_sum_type(c->k, v->dt) : cg_ctype(v->dt);
      if (s->kind == KS_SET) LINE(c, "%s%s = %s;\n", r->vname[s->var], v->lanes ? "[j]" : "", x.s);
      else if (v->lanes) {   /* one per lane (KIR_LANES, whose variable is j) */
        LINE(c, "%s %s[%lld];\n", t, r->vname[s->var], (ll)v->lanes);
        LINE(c, "for (int64_t j = 0; j < %lld; j++) %s[j] = %s;\n", (ll)v->lanes, r->vname[s->var], x.s);
      } else LINE(c, "%s %s = %s;\n", t, r->vname[s->var], x.s);
      break;
    }
    case KS_IF:
      cg_render_expr(r, s->x, &x);
      LINE(c, "if (%s) {\n", x.s);
      c->ind += 2;
      cg_render_block(r, &s->body);
      c->ind -= 2;
      LINE(c, "}\n");
      break;
    case KS_STOREAT: {
      Buf at = {0};
      cg_render_expr(r, s->at, &at);
      cg_render_expr(r, s->x, &x);
      LINE(c, "%s[%s] = %s;\n", cg_ref(c, s->v), at.s, x.s);
      cg_buf_free(&at);
      break;
    }
    }
    cg_buf_free(&x);
  }
}

/* The locals' names in the order the C target has always given them: a KN_ELEM's
 * inputs `<name>_e`, then each value its own name (kernel-local) or `<name>_v`
 * (stored); a KN_ROW's values, each with its accumulator `<name>_acc` and
 * per-row array `<name>_row`. with_inputs: the KN_ELEM inputs' names. */
void cg_render_names(CgRender *r, int with_inputs, int row_names) {
  CgFunc *c = r->c;
  const Kernel *kn = r->k->kn;
  char hint[160];
  for (int j = 0; with_inputs && j < kn->inputs.len; j++) {
    snprintf(hint, sizeof hint, "%s_e", c->cname[kn->inputs.data[j]]);
    r->local[kn->inputs.data[j]] = cg_name(c->ns, hint);
  }
  for (int i = kn->first; i <= kn->last; i++) {
    const Inst *in = &c->f->insts.data[i];
    if (in->op == IR_CONST) continue;
    ValId v = in->res;
    if (c->fp->loc[v].base == LOC_LOCAL) r->local[v] = c->cname[v];
    else snprintf(hint, sizeof hint, "%s_v", c->cname[v]), r->local[v] = cg_name(c->ns, hint);
    if (!row_names) continue;
    if (in->op == IR_REDUCE_SUM || in->op == IR_REDUCE_MAX)
      snprintf(hint, sizeof hint, "%s_acc", c->cname[v]), r->accn[v] = cg_name(c->ns, hint);
    if (c->s->rowbuf[v]) snprintf(hint, sizeof hint, "%s_row", c->cname[v]), r->rowarr[v] = cg_name(c->ns, hint);
  }
}

/* ---- C: loops ---------------------------------------------------------------------------- */

/* ---- C: parallel loops (the kernel IR's, the ops' through cg_par_for and cg_par_open) -------
 * OpenMP on the loop (CTC_OMP_FOR, CTC_OMP_FOR_SIMD; a region: CTC_OMP_PARALLEL), or with
 * --profile (CgFunc.prof_site) a region whose threads each note the time, run their
 * iterations (`omp for nowait`: the same iterations on the same threads as `omp parallel
 * for`) and report their share (prof_c.c's macros): a renderer option, written here, never a
 * rewrite of the text. par_kind: 0 a plain statement, 1 OpenMP, 2 a profiled region. */

static void c_par_open(CgFunc *c, unsigned flags) {
  int region = (flags & CG_PAR_REGION) != 0, simd = (flags & CG_PAR_SIMD) != 0;
  int kind = !(flags & CG_PAR_OMP) ? 0 : c->prof_site ? 2 : 1;
  CHECK(c->par_depth < (int)sizeof c->par_kind);
  if (simd) c->k->simd = 1;
  if (kind == 2) {
    LINE(c, "CTC_PROF_PARALLEL\n");
    LINE(c, "{\n");
    c->ind += 2;
    LINE(c, "const double ctc_thread_t0 = ctc_prof_now();\n");
    if (!region) LINE(c, "%s\n", simd ? "CTC_PROF_FOR_SIMD" : "CTC_PROF_FOR");
  } else if (kind == 1) {
    LINE(c, region ? "CTC_OMP_PARALLEL\n" : simd ? "CTC_OMP_FOR_SIMD\n" : "CTC_OMP_FOR\n");
  } else if (simd && !region) {
    LINE(c, "CTC_OMP_SIMD\n");
  }
  c->par_kind[c->par_depth] = (unsigned char)kind;
  c->par_ind[c->par_depth++] = c->ind;
}

static void c_par_close(CgFunc *c) {
  CHECK(c->par_depth > 0);
  int kind = c->par_kind[--c->par_depth];
  c->ind = c->par_ind[c->par_depth];
  if (kind != 2) return;
  LINE(c, "ctc_prof_thread(m->prof, %s, ctc_prof_thread_num(), ctc_thread_t0);\n", c->prof_site);
  c->ind -= 2;
  LINE(c, "}\n");
}

static void c_par_for(CgFunc *c, const char *var, int64_t n, unsigned flags) {
  c_par_open(c, (flags & CG_PAR_SIMD) | ((flags & CG_PAR_OMP) && n > 1 ? CG_PAR_OMP : 0));
  LINE(c, "for (int64_t %s = 0; %s < %lld; %s++) {\n", var, var, (ll)n, var);
  c->ind += 2;
}

static void c_par_end(CgFunc *c) {
  CHECK(c->par_depth > 0);
  c->ind = c->par_ind[c->par_depth - 1];
  LINE(c, "}\n");
  c_par_close(c);
}

void cg_par_for(CgFunc *c, const char *var, int64_t n, unsigned flags) {
  (c->target ? c->target : &cg_render_c)->par_for(c, var, n, flags);
}

void cg_par_end(CgFunc *c) { (c->target ? c->target : &cg_render_c)->par_end(c); }

void cg_par_open(CgFunc *c, unsigned flags) { (c->target ? c->target : &cg_render_c)->par_open(c, flags); }

void cg_par_close(CgFunc *c) { (c->target ? c->target : &cg_render_c)->par_close(c); }

/* Every index the loop's body uses (loads and stores, in the loops and ifs inside it too), for
 * merging axes: counted (ix NULL) or gathered; and the axes whose loop variable an expression
 * reads itself (KE_AXIS, a bit each: the nest's axes are then not merged). */
static void gather_expr(const KirExpr *x, const KirIndex **ix, int *n, unsigned *axes) {
  if (x->kind == KE_LOAD) {
    if (ix) ix[*n] = &x->ix;
    ++*n;
  }
  if (x->kind == KE_AXIS) *axes |= 1u << x->axis;
  for (int a = 0; a < x->nargs; a++) gather_expr(x->arg[a], ix, n, axes);
}

static void gather_block(const KirBlock *b, const KirIndex **ix, int *n, unsigned *axes) {
  for (int j = 0; j < b->len; j++) {
    const KirStmt *t = b->data[j];
    if (t->kind == KS_STORE) {
      if (ix) ix[*n] = &t->ix;
      ++*n;
    }
    if (t->x) gather_expr(t->x, ix, n, axes);
    if (t->at) gather_expr(t->at, ix, n, axes);
    gather_block(&t->body, ix, n, axes);
  }
}

/* A GEMM epilogue's loop over this thread's block of the result [M, N] (rows i, columns j). */
static void c_block_loop(CgRender *r, const KirStmt *s) {
  CgFunc *c = r->c;
  CHECK(r->k->space.ndim == 2 && s->from == 0 && s->to == 2);
  r->nvar = 2;
  r->merged = 1;
  snprintf(r->var[0], sizeof r->var[0], "i");
  snprintf(r->var[1], sizeof r->var[1], "j");
  r->group[0] = r->last[0] = 0;
  r->group[1] = r->last[1] = 1;
  c->k->simd = 1;
  LINE(c, "for (int64_t i = r0; i < r1; i++) {\n");
  c->ind += 2;
  LINE(c, "CTC_OMP_SIMD\n");
  LINE(c, "for (int64_t j = c0; j < c1; j++) {\n");
  c->ind += 2;
  cg_render_block(r, &s->body);
  for (int d = 0; d < 2; d++) {
    c->ind -= 2;
    LINE(c, "}\n");
  }
  r->merged = 0;
}

static void c_space_loop(CgRender *r, const KirStmt *s) {
  CgFunc *c = r->c;
  if (r->gemm_block) {
    c_block_loop(r, s);
    return;
  }
  const Type *S = &r->k->space;
  int cap = 0, na = 0;
  unsigned read = 0;
  gather_block(&s->body, NULL, &cap, &read);
  const KirIndex **acc = malloc(sizeof *acc * (size_t)(cap + 1));
  CHECK(acc);
  gather_block(&s->body, acc, &na, &read);
  int axes = (read & (((1u << s->to) - 1) & ~((1u << s->from) - 1))) != 0;   /* of this nest's */
  /* size-1 axes dropped, adjacent axes merged where every access is contiguous across them */
  int64_t d[IR_MAX_DIMS], total = ir_numel(S);   /* the work: the serial loops' in it too */
  int n = 0;
  for (int k = 0; k < S->ndim; k++) r->group[k] = -1;
  for (int k = s->from; k < s->to; k++) {
    if (S->dims[k] == 1) continue;
    int merge = n > 0 && !axes;
    for (int a = 0; a < na && merge; a++) merge = acc[a]->st[r->last[n - 1]] == acc[a]->st[k] * S->dims[k];
    if (merge) {
      d[n - 1] *= S->dims[k];
      r->group[k] = n - 1;
      r->last[n - 1] = k;
      continue;
    }
    d[n] = S->dims[k];
    r->group[k] = n;
    r->last[n++] = k;
  }
  free(acc);
  r->nvar = n;
  r->merged = 1;
  for (int k = 0; k < n; k++) snprintf(r->var[k], sizeof r->var[k], n == 1 ? "i" : "i%d", k);
  int base = c->ind;
  int par = (s->marks & KIR_PARALLEL) && n > 0 && d[0] > 1 && total >= r->omp_min_work;
  int simd = (s->marks & KIR_VECTOR) && n > 0 && d[n - 1] > 1;
  if (simd) c->k->simd = 1;
  char trip[IR_MAX_DIMS][160];   /* each loop's count (CgFunc.trip: a foreach table row's, one loop) */
  CHECK(!c->trip || n == 1);
  for (int k = 0; k < n; k++)
    if (c->trip) snprintf(trip[k], sizeof trip[k], "%s", c->trip);
    else snprintf(trip[k], sizeof trip[k], "%lld", (ll)d[k]);
  if (par) {
    c_par_open(c, CG_PAR_OMP | (simd && n == 1 ? CG_PAR_SIMD : 0));
    LINE(c, "for (int64_t %s = 0; %s < %s; %s++) {\n", r->var[0], r->var[0], trip[0], r->var[0]);
    c->ind += 2;
  }
  for (int k = par; k < n; k++) {
    if (simd && k == n - 1) LINE(c, "CTC_OMP_SIMD\n");
    LINE(c, "for (int64_t %s = 0; %s < %s; %s++)%s\n", r->var[k], r->var[k], trip[k], r->var[k],
         k == n - 1 ? " {" : "");
    c->ind += 2;
  }
  if (n == 0) {
    LINE(c, "{\n");
    c->ind += 2;
  }
  cg_render_block(r, &s->body);
  if (!(par && n == 1)) {   /* the innermost loop's brace, or the block's (a parallel loop closes its own) */
    c->ind -= 2;
    LINE(c, "}\n");
  }
  if (par) c_par_end(c);
  c->ind = base;
  r->merged = 0;
}

static void c_rows_loop(CgRender *r, const KirStmt *s) {
  CgFunc *c = r->c;
  const Type *S = &r->k->space;
  int nout = s->to;
  for (int k = 0; k < nout; k++) snprintf(r->var[k], sizeof r->var[k], "i%d", k);
  snprintf(r->var[nout], sizeof r->var[nout], "j");
  r->nvar = nout + 1;
  int base = c->ind;
  int par = (s->marks & KIR_PARALLEL) && nout > 0 && S->dims[0] > 1 && ir_numel(S) >= r->omp_min_work;
  if (par) c_par_for(c, r->var[0], S->dims[0], CG_PAR_OMP);
  for (int k = par; k < nout; k++) {
    LINE(c, "for (int64_t i%d = 0; i%d < %lld; i%d++)%s\n", k, k, (ll)S->dims[k], k, k == nout - 1 ? " {" : "");
    c->ind += 2;
  }
  if (!nout) {
    LINE(c, "{\n");
    c->ind += 2;
  }
  cg_render_block(r, &s->body);
  if (!(par && nout == 1)) {
    c->ind -= 2;
    LINE(c, "}\n");
  }
  if (par) c_par_end(c);
  c->ind = base;
}

/* A row's elements: as two loops when it both computes row elements (or float
 * sums) and accumulates (see the file's comment). A row whose operand arrays would pass
 * KN_MAX_ROWBUF bytes runs in chunks of up to `chunk` elements (a multiple of ctc_sum's 32
 * lanes), each chunk's arrays reduced and combined into the accumulators in order (one
 * accumulator's chain over a 4096-element row made softmax 6 times slower than PyTorch's);
 * integers are accumulated in order over each chunk's array. A float reduction of a row that
 * is contiguous in memory (softmax's maximum of its input, a sum over the last axis) reads it
 * in place: no copy into an array, and no loop where nothing else is computed. */
static int direct_acc(CgRender *r, const KirStmt *t) {
  CgFunc *c = r->c;
  const KirExpr *x = t->x;
  DType dt = ty(c, t->v)->dtype;
  return t->kind == KS_ACC && x->kind == KE_LOAD && (dt == DT_F32 || dt == DT_F64) && ty(c, x->v)->dtype == dt &&
         ty(c, t->in->args[0])->dtype == dt && x->ix.st[r->nvar - 1] == 1;
}

/* The float32 value accumulation t of a row loop (body) sums cast to double (ir/rowsplit.c's row
 * sums), or NULL: its operand array then holds the floats (half the bytes). */
static const KirExpr *narrow_sum(const CgRender *r, const KirBlock *body, const KirStmt *t) {
  const KirExpr *x = t->x;
  if (t->in->op != IR_REDUCE_SUM || ty(r->c, t->in->res)->dtype != DT_F64) return NULL;
  for (int j = 0; x->kind == KE_LOCAL && j < body->len; j++)   /* the cast's local: its definition */
    if (body->data[j]->kind == KS_LET && body->data[j]->v == x->v) x = body->data[j]->x;
  if (x->kind != KE_OP || x->in->op != IR_CAST || ty(r->c, x->in->args[0])->dtype != DT_F32) return NULL;
  return x->arg[0];
}

static int reads_local(const KirExpr *x, ValId v) {
  if (x->kind == KE_LOCAL && x->v == v) return 1;
  for (int a = 0; a < x->nargs; a++)
    if (x->arg[a] && reads_local(x->arg[a], v)) return 1;
  return 0;
}

/* Whether statement t of a row loop (body) is the cast to double of a narrowed sum that nothing
 * else reads or stores (left out: an unused local would not compile with -Werror). */
static int narrowed_away(const CgRender *r, const KirBlock *body, const KirStmt *t) {
  if (t->kind != KS_LET) return 0;
  int sum = 0;
  for (int j = 0; j < body->len; j++) {
    const KirStmt *u = body->data[j];
    if (u == t) continue;
    if (u->kind == KS_ACC && r->narrow[u->v] && u->x->kind == KE_LOCAL && u->x->v == t->v) sum = 1;
    else if (u->v == t->v || (u->x && reads_local(u->x, t->v))) return 0;
  }
  return sum;
}

static void c_row_loop(CgRender *r, const KirStmt *s) {
  CgFunc *c = r->c;
  int64_t rowlen = r->k->rowlen;
  int nred = 0, nelem = 0, nfloat = 0, ndirect = 0;
  for (int j = 0; j < s->body.len; j++) {
    const KirStmt *t = s->body.data[j];
    if (t->kind == KS_ACC) nred++, nfloat += ir_dtype_is_float(ty(c, t->v)->dtype);
    else if (t->kind == KS_LET) nelem++;
  }
  int split = nred > 0 && (nelem > 0 || nfloat > 0);
  KirBlock body = s->body;   /* (split: without the reductions read in place, nor the casts narrowed away) */
  if (split) {
    body.data = calloc((size_t)s->body.len + 1, sizeof *body.data);
    CHECK(body.data);
    body.len = 0;
    for (int j = 0; j < s->body.len; j++) {
      const KirStmt *t = s->body.data[j];
      if (t->kind == KS_ACC && !direct_acc(r, t)) r->narrow[t->v] = narrow_sum(r, &s->body, t);
    }
    for (int j = 0; j < s->body.len; j++)
      if (direct_acc(r, s->body.data[j])) ndirect++;
      else if (!narrowed_away(r, &s->body, s->body.data[j])) body.data[body.len++] = s->body.data[j];
  }
  int64_t chunk = rowlen, arrbytes = 0;   /* a row's operand arrays: 8 bytes an element each, 4 narrowed */
  for (int j = 0; split && j < s->body.len; j++) {
    const KirStmt *t = s->body.data[j];
    if (t->kind == KS_ACC && !direct_acc(r, t)) arrbytes += r->narrow[t->v] ? 4 : 8;
  }
  if (split && rowlen * arrbytes > KN_MAX_ROWBUF) chunk = KN_MAX_ROWBUF / arrbytes / 32 * 32;
  if (split && ndirect == nred && nelem == 0) chunk = rowlen;   /* nothing but reductions read in place */
  char hint[160];
  for (int j = 0; split && j < s->body.len; j++) {
    const KirStmt *t = s->body.data[j];
    if (t->kind != KS_ACC || direct_acc(r, t)) continue;
    snprintf(hint, sizeof hint, "%s_in", c->cname[t->v]);
    r->aux[t->v] = cg_name(c->ns, hint);
    LINE(c, "%s %s[%lld];\n", r->narrow[t->v] ? "float" : cg_ctype(ty(c, t->in->args[0])->dtype), r->aux[t->v],
         (ll)chunk);
  }
  int chunked = chunk < rowlen;
  if (chunked) {
    LINE(c, "for (int64_t j0 = 0; j0 < %lld; j0 += %lld) {   /* chunks of the row */\n", (ll)rowlen, (ll)chunk);
    c->ind += 2;
    LINE(c, "const int64_t jn = %lld - j0 < %lld ? %lld - j0 : %lld;\n", (ll)rowlen, (ll)chunk, (ll)rowlen, (ll)chunk);
  }
  if (body.len > 0) {
    if (split) {
      c->k->simd = 1;
      LINE(c, "CTC_OMP_SIMD\n");
    }
    if (chunked) LINE(c, "for (int64_t j = j0; j < j0 + jn; j++) {\n");
    else LINE(c, "for (int64_t j = 0; j < %lld; j++) {\n", (ll)rowlen);
    c->ind += 2;
    r->split = split;
    r->auxpos = chunked ? "j - j0" : r->ops->rowpos;
    r->in_row = 1;
    cg_render_block(r, &body);
    r->split = 0;
    r->in_row = 0;
    c->ind -= 2;
    LINE(c, "}\n");
  }
  if (split) free(body.data);
  if (!split) return;
  /* float rows: ctc_sum/ctc_max (32 lanes, as emit_reduce; a chunk's added on); integers in order */
  for (int j = 0; j < s->body.len; j++) {
    const KirStmt *t = s->body.data[j];
    if (t->kind != KS_ACC) continue;
    char ptr[IDX_CAP + 200];
    const char *from = r->aux[t->v];
    if (direct_acc(r, t)) {   /* the row in place, from its chunk's first element */
      char idx[IDX_CAP], save[16];
      memcpy(save, r->var[r->nvar - 1], sizeof save);
      snprintf(r->var[r->nvar - 1], sizeof r->var[r->nvar - 1], "%s", chunked ? "j0" : "0");
      r->ops->index(r, &t->x->ix, idx, sizeof idx);
      memcpy(r->var[r->nvar - 1], save, sizeof save);
      size_t n = strlen(idx);
      if (n > 4 && !strcmp(idx + n - 4, " + 0")) idx[n - 4] = 0;   /* the row's first element: i0 * 4096 */
      if (t->x->ix.off) snprintf(ptr, sizeof ptr, "&%s[%lld + %s]", cg_ref(c, t->x->v), (ll)t->x->ix.off, idx);
      else snprintf(ptr, sizeof ptr, "&%s[%s]", cg_ref(c, t->x->v), idx);
      from = ptr;
    }
    if (r->narrow[t->v]) {
      c->k->sum[DT_F32] = 1;
      if (chunked) LINE(c, "%s += ctc_sum_f32(%s, jn);\n", r->accn[t->v], from);
      else LINE(c, "%s = ctc_sum_f32(%s, %lld);\n", r->accn[t->v], from, (ll)rowlen);
      continue;
    }
    if (cg_lane_reduce(c, t->in, r->accn[t->v], chunked ? "+=" : "=", from, chunked ? "jn" : NULL, rowlen)) continue;
    char x[200];
    snprintf(x, sizeof x, "%s[j]", r->aux[t->v]);
    if (chunked) LINE(c, "for (int64_t j = 0; j < jn; j++)\n");
    else LINE(c, "for (int64_t j = 0; j < %lld; j++)\n", (ll)rowlen);
    c->ind += 2;
    cg_acc_update(c, t->in, r->accn[t->v], x);
    c->ind -= 2;
  }
  if (chunked) {
    c->ind -= 2;
    LINE(c, "}\n");
  }
}

/* A KIR_SERIAL loop (inside a KIR_SPACE nest): its axis gets a variable of its own, k. */
static void c_serial_loop(CgRender *r, const KirStmt *s) {
  CgFunc *c = r->c;
  int g = r->nvar, ax = s->from;
  CHECK(r->merged && g < IR_MAX_DIMS && r->serial < 0);
  snprintf(r->var[g], sizeof r->var[g], "k");
  r->group[ax] = g, r->last[g] = ax, r->nvar++, r->serial = ax;
  if (s->marks & KIR_REVERSE) LINE(c, "for (int64_t k = %lld; k >= 0; k--) {\n", (ll)(s->n - 1));
  else LINE(c, "for (int64_t k = 0; k < %lld; k++) {\n", (ll)s->n);
  c->ind += 2;
  cg_render_block(r, &s->body);
  c->ind -= 2;
  LINE(c, "}\n");
  r->nvar--, r->group[ax] = -1, r->serial = -1;
}

/* A KIR_LANES loop (inside a KIR_SERIAL one, or after it): its axis the variable j, a loop that
 * vectorises. */
static void c_lanes_loop(CgRender *r, const KirStmt *s) {
  CgFunc *c = r->c;
  int g = r->nvar, ax = s->from;
  CHECK(r->merged && g < IR_MAX_DIMS);
  snprintf(r->var[g], sizeof r->var[g], "j");
  r->group[ax] = g, r->last[g] = ax, r->nvar++;
  c->k->simd = 1;
  LINE(c, "CTC_OMP_SIMD\n");
  LINE(c, "for (int64_t j = 0; j < %lld; j++) {\n", (ll)r->k->space.dims[ax]);
  c->ind += 2;
  cg_render_block(r, &s->body);
  c->ind -= 2;
  LINE(c, "}\n");
  r->nvar--, r->group[ax] = -1;
}

static void c_loop(CgRender *r, const KirStmt *s) {
  if (s->loop == KIR_SPACE) c_space_loop(r, s);
  else if (s->loop == KIR_ROWS) c_rows_loop(r, s);
  else if (s->loop == KIR_SERIAL) c_serial_loop(r, s);
  else if (s->loop == KIR_LANES) c_lanes_loop(r, s);
  else c_row_loop(r, s);
}

/* ---- C: the rest of the table ------------------------------------------------------------- */

/* "7 + i0 * 12 + i1": over the merged axes of a KIR_SPACE nest, else over i0, ..., j. */
static void c_index(CgRender *r, const KirIndex *ix, char *out, size_t cap) {
  int64_t st[IR_MAX_DIMS];
  if (r->merged)
    for (int g = 0; g < r->nvar; g++) st[g] = ix->st[r->last[g]];
  else memcpy(st, ix->st, sizeof st);
  cg_index_expr(out, cap, r->nvar, r->var, 0, st);
}

static void c_store(CgRender *r, const KirStmt *s) {
  CgFunc *c = r->c;
  char idx[IDX_CAP];
  Buf x = {0};
  cg_render_expr(r, s->x, &x);
  r->ops->index(r, &s->ix, idx, sizeof idx);
  LINE(c, "%s[%s] = %s;\n", cg_ref(c, s->v), idx, x.s);
  cg_buf_free(&x);
}

static void c_rowbuf_decl(CgRender *r, const KirStmt *s) {
  LINE(r->c, "%s %s[%lld];\n", cg_ctype(ty(r->c, s->v)->dtype), r->rowarr[s->v], (ll)r->k->rowlen);
}

static void c_acc_done(CgRender *r, const KirStmt *s) {
  CgFunc *c = r->c;
  DType t = ty(c, s->v)->dtype;
  const char *ct = cg_ctype(t);
  int cast = strcmp(cg_acc_type_k(c->k, s->in, t), ct) != 0;
  LINE(c, "const %s %s = %s%s%s%s;\n", ct, r->local[s->v], cast ? "(" : "", cast ? ct : "", cast ? ")" : "", r->accn[s->v]);
}

/* KE_AXIS: axis k's loop variable (a KIR_SPACE nest's axes are not merged then), 0 for a
 * dropped axis of size 1. */
static void c_axis(CgRender *r, int k, char *out, size_t cap) {
  if (r->merged) snprintf(out, cap, "%s", r->group[k] < 0 ? "0" : r->var[r->group[k]]);
  else snprintf(out, cap, "%s", r->var[k]);
}

static void c_names(CgRender *r) { cg_render_names(r, 1, r->k->kn->kind == KN_ROW); }

const CgRenderOps cg_render_c = {.names = c_names, .loop = c_loop, .index = c_index, .store = c_store,
                                 .rowbuf_decl = c_rowbuf_decl, .acc_done = c_acc_done, .rowpos = "j",
                                 .par_for = c_par_for, .par_end = c_par_end, .par_open = c_par_open,
                                 .par_close = c_par_close, .axis = c_axis};

void cg_render_kernel_c(CgFunc *c, const Kernel *kn) {
  CgRender r;
  cg_render_init(&r, &cg_render_c, c, kir_build(c->p->arena, c->f, c->s, kn));
  r.ops->names(&r);
  cg_render_block(&r, &r.k->body);
  cg_render_free(&r);
}

int cg_render_op_c(CgFunc *c, const Inst *in) {
  Kir *k = kir_build_op(c->p->arena, c->f, in, 1);
  if (!k) return -1;
  CgRender r;
  cg_render_init(&r, &cg_render_c, c, k);
  int base = c->ind;
  if (k->tables.len) {
    LINE(c, "{\n");
    c->ind += 2;
    cg_render_tables(&r);
  }
  cg_render_block(&r, &k->body);
  if (k->tables.len) {
    c->ind -= 2;
    LINE(c, "}\n");
  }
  c->ind = base;
  cg_render_free(&r);
  return 0;
}
