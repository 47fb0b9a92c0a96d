/* render_cuda.c - the CUDA renderer: a __global__ kernel's begin and end (its tensors from
 * the plan, its launch on the entry's stream), the kernel IR (kernels/kir.h) printed for a GPU
 * through codegen_c's walk with this target's table, and the C emitter's ops whose parallel
 * loop this table writes as a grid-stride loop (cuda_int.h). */
#include <stdlib.h>
#include <string.h>
#include "cuda_int.h"

/* ---- kernels: begin / end --------------------------------------------------- */

/* Starts a kernel body: the CgFunc writes into body and marks kref. */
void cu_kbegin(Ent *e, Buf *body) {
  memset(e->kref, 0, (size_t)e->f->values.len + 1);
  e->c->ref = e->kref;
  e->c->out = body;
  e->c->ind = 4;
}

/* Finishes kernel `kname`: signature, declarations of the tensors it
 * referenced, the body; then its launch into the host code. grid/block: C text. */
void cu_kend(Ent *e, const char *kname, const char *comments, Buf *body, const char *grid, int block, int sync) {
  Gen *g = e->g;
  const Func *f = e->f;
  const FuncPlan *fp = &g->mp->funcs[e->fi];
  Buf *k = &g->kern;
  if (comments && comments[0]) cg_puts(k, comments);
  /* parameters: the arena base if the kernel touches it, the inputs it reads */
  unsigned char *inp = calloc((size_t)f->inputs.len + 1, 1);
  CHECK(inp);
  int anyA = 0;
  for (ValId v = 0; v < f->values.len; v++) {
    if (!e->kref[v]) continue;
    if (fp->loc[v].base >= 0) inp[fp->loc[v].base] = 1;
    else anyA = 1;
  }
  Buf params = {0}, args = {0};
  if (anyA) cg_puts(&params, "unsigned char *A"), cg_puts(&args, "A");
  for (int j = 0; j < f->inputs.len; j++) {
    if (!inp[j]) continue;
    ValId v = f->inputs.data[j];
    cg_printf(&params, "%sconst %s *%s", params.len ? ", " : "", cg_ctype(ty(f, v)->dtype), e->c->cname[v]);
    cg_printf(&args, "%s%s", args.len ? ", " : "", e->c->cname[v]);
  }
  cg_printf(k, "static __global__ void %s(%s) {\n", kname, params.len ? params.s : "void");
  for (ValId v = 0; v < f->values.len; v++) {
    if (!e->kref[v]) continue;
    const Loc *l = &fp->loc[v];
    const char *ct = cg_ctype(ty(f, v)->dtype);
    if (l->base >= 0) {
      if (f->inputs.data[l->base] != v)
        cg_printf(k, "  const %s *%s = %s;\n", ct, e->c->cname[v], e->c->cname[f->inputs.data[l->base]]);
      continue;
    }
    CHECK(l->base == LOC_ARENA);
    cg_printf(k, "  %s *%s = (%s *)(A + %lld);\n", ct, e->c->cname[v], ct, (ll)l->offset);
  }
  if (body->len) cg_puts(k, body->s);
  cg_puts(k, "}\n\n");
  /* the launch */
  e->c->ref = e->href;
  e->uses_stream = 1;
  if (anyA) e->uses_arena = 1;
  cg_printf(e->host, "  CTC_LAUNCH(%s, %s, %d, %d, ctc_st%s%s);\n", kname, grid, block, sync, args.len ? ", " : "",
            args.len ? args.s : "");
  cg_buf_free(&params);
  cg_buf_free(&args);
  free(inp);
  e->nkern++;
}

void cu_kname(Ent *e, char *buf, size_t cap, int k) {
  snprintf(buf, cap, "%s_%s_k%d", e->g->prefix, e->fname, k);
}

/* Comments of kernel kn (its header line and one per instruction) into b. */
void cu_kernel_comments(Ent *e, const Kernel *kn, int k, Buf *b) {
  Buf *save = e->c->out;
  int ind = e->c->ind;
  unsigned char *ref = e->c->ref;
  e->c->out = b;
  e->c->ind = 0;
  e->c->ref = e->href;   /* comments name values; they reference nothing */
  char tb[256];
  int nops = 0;
  for (int i = kn->first; i <= kn->last; i++) nops += e->f->insts.data[i].op != IR_CONST;
  if (kn->kind == KN_ELEM || kn->kind == KN_ROW) {
    Buf h = {0};
    if (kn->kind == KN_ROW)
      cg_printf(&h, "kernel %d: %d ops fused per row of %s (%d loop%s over each row, a block per row), stores", k, nops,
                ir_type_str(&kn->space, tb, sizeof tb), kn->nloops, kn->nloops == 1 ? "" : "s");
    else
      cg_printf(&h, "kernel %d: %d elementwise ops fused over %s (grid-stride), stores", k, nops,
                ir_type_str(&kn->space, tb, sizeof tb));
    for (int j = 0; j < kn->outputs.len; j++) cg_printf(&h, "%s %s", j ? "," : "", e->c->cname[kn->outputs.data[j]]);
    if (!kn->outputs.len) cg_puts(&h, " nothing");
    for (char *t = h.s; (t = strstr(t, "*/")) != NULL;) t[1] = '|';
    cg_printf(b, "/* %s */\n", h.s);
    cg_buf_free(&h);
  }
  for (int i = kn->first; i <= kn->last; i++)
    if (e->f->insts.data[i].op != IR_CONST) cg_comment(e->c, &e->f->insts.data[i]);
  e->c->out = save;
  e->c->ind = ind;
  e->c->ref = ref;
}


/* The index of an operand with broadcast strides st over space S at flat
 * element `var` (row-major over S): "ctc_i" when contiguous, else a sum of
 * coordinates times strides. Axes >= from (and < to) only. */
void cu_flat_index(char *out, size_t cap, const Type *S, const int64_t *st, const char *var, int to) {
  int64_t inner[IR_MAX_DIMS], cs = 1, scale = -1;
  int contiguous = 1;   /* st = scale * the row-major strides of S: var * scale */
  for (int k = to - 1; k >= 0; k--) {
    inner[k] = cs;
    if (S->dims[k] != 1) {
      if (scale < 0 && st[k] % cs == 0) scale = st[k] / cs;
      if (scale < 0 || st[k] != scale * cs) contiguous = 0;
    }
    cs *= S->dims[k];
  }
  if (contiguous && scale != 0) {
    if (scale <= 1) snprintf(out, cap, "%s", var);
    else snprintf(out, cap, "%s * %lld", var, (ll)scale);
    return;
  }
  size_t n = 0;
  out[0] = 0;
  for (int k = 0; k < to; k++) {
    if (!st[k] || S->dims[k] == 1) continue;
    char co[96];
    int outer = 1;   /* no other axis before k with size > 1: no modulo */
    for (int j = 0; j < k; j++) outer &= S->dims[j] == 1;
    if (inner[k] == 1 && outer) snprintf(co, sizeof co, "%s", var);
    else if (inner[k] == 1) snprintf(co, sizeof co, "%s %% %lld", var, (ll)S->dims[k]);
    else if (outer) snprintf(co, sizeof co, "%s / %lld", var, (ll)inner[k]);
    else snprintf(co, sizeof co, "%s / %lld %% %lld", var, (ll)inner[k], (ll)S->dims[k]);
    if (st[k] == 1) n += (size_t)snprintf(out + n, cap - n, "%s(%s)", n ? " + " : "", co);
    else n += (size_t)snprintf(out + n, cap - n, "%s(%s) * %lld", n ? " + " : "", co, (ll)st[k]);
    CHECK(n < cap);
  }
  if (!n) snprintf(out, cap, "0");
}

/* The kernel's comments again at its launch in the host code, indented. */
void cu_launch_comments(Ent *e, const Kernel *kn, int k, Buf *body) {
  Buf com = {0};
  cu_kernel_comments(e, kn, k, &com);
  for (char *t = com.s; t && *t;) {
    char *nl = strchr(t, '\n');
    cg_printf(body, "  %.*s\n", (int)(nl ? nl - t : (long)strlen(t)), t);
    t = nl ? nl + 1 : NULL;
  }
  cg_buf_free(&com);
}

/* ---- KN_ELEM and KN_ROW: their kernel IR (kernels/kir.h) through the CUDA renderer ----
 * codegen_c's walk (render_c.c) with this table: a KIR_SPACE loop is a grid-stride
 * loop over the flat space (indices from flat_index), a KIR_ROWS loop a block per
 * row (blocks stride over the rows), a KIR_ROW loop the block's threads over the
 * row's elements (thread t takes t, t+B, ...: a per-row array is per thread,
 * indexed by ctc_k, its count of elements); each reduction is a per-thread partial
 * in the C target's accumulator type, then a tree in shared memory, the result read
 * by every thread; a per-row value is stored by thread 0. Names are the C target's
 * (cu_names). */

static void cu_line(CgRender *r) { indent(r->c->out, r->c->ind); }

/* The elements of S's axes [0, to): a KIR_SPACE loop's threads. */
static int64_t space_count(const Type *S, int to) {
  int64_t n = 1;
  for (int k = 0; k < to; k++) n *= S->dims[k];
  return n;
}

static void cu_loop(CgRender *r, const KirStmt *s) {
  CgFunc *c = r->c;
  const Type *S = &r->k->space;
  int64_t L = r->k->rowlen;
  cu_line(r);
  if (s->loop == KIR_SERIAL) {   /* this thread's fiber along the axis */
    if (s->marks & KIR_REVERSE)
      cg_printf(c->out, "for (int64_t ctc_k = %lld; ctc_k >= 0; ctc_k--) {\n", (ll)(s->n - 1));
    else cg_printf(c->out, "for (int64_t ctc_k = 0; ctc_k < %lld; ctc_k++) {\n", (ll)s->n);
    r->serial = s->from;
  } else if (s->loop == KIR_SPACE) {   /* the flat elements of its axes (all of them, or the fibers') */
    cg_printf(c->out, "for (int64_t ctc_i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; ctc_i < %lld;"
                      " ctc_i += (int64_t)blockDim.x * gridDim.x) {\n", (ll)space_count(S, s->to));
    r->space_to = s->to;
  } else if (s->loop == KIR_ROWS)
    cg_printf(c->out, "for (int64_t ctc_row = blockIdx.x; ctc_row < %lld; ctc_row += gridDim.x) {\n",
              (ll)(L ? ir_numel(S) / L : 0));
  else if (r->anybuf)
    cg_printf(c->out, "for (int64_t ctc_j = threadIdx.x, ctc_k = 0; ctc_j < %lld; ctc_j += blockDim.x, ctc_k++) {\n",
              (ll)L);
  else cg_printf(c->out, "for (int64_t ctc_j = threadIdx.x; ctc_j < %lld; ctc_j += blockDim.x) {\n", (ll)L);
  c->ind += 2;
  r->in_row = s->loop == KIR_ROW;
  cg_render_block(r, &s->body);
  r->in_row = 0;
  if (s->loop == KIR_SERIAL) r->serial = -1;
  c->ind -= 2;
  cu_line(r);
  cg_puts(c->out, "}\n");
}

/* KIR_SPACE: from the flat element ctc_i (and a KIR_SERIAL loop's ctc_k along its axis); a
 * row kernel: the row ctc_row, element ctc_j. */
static void cu_index(CgRender *r, const KirIndex *ix, char *out, size_t cap) {
  const Type *S = &r->k->space;
  if (!r->k->kn || r->k->kn->kind != KN_ROW) {
    cu_flat_index(out, cap, S, ix->st, "ctc_i", r->space_to);
    int64_t sk = r->serial >= 0 ? ix->st[r->serial] : 0;
    if (!sk) return;
    size_t n = strlen(out);
    int z = !strcmp(out, "0");
    if (z) n = 0;
    if (sk == 1) snprintf(out + n, cap - n, "%sctc_k", z ? "" : " + ");
    else snprintf(out + n, cap - n, "%sctc_k * %lld", z ? "" : " + ", (ll)sk);
    return;
  }
  int nout = S->ndim - 1;
  Type R = *S;   /* the rows: the space without its last axis */
  R.ndim = nout;
  char ri[400];
  cu_flat_index(ri, sizeof ri, &R, ix->st, "ctc_row", nout);
  int64_t sj = ix->st[nout];
  int r0 = !strcmp(ri, "0");
  if (!sj) snprintf(out, cap, "%s", ri);
  else if (sj == 1) snprintf(out, cap, "%s%sctc_j", r0 ? "" : ri, r0 ? "" : " + ");
  else snprintf(out, cap, "%s%sctc_j * %lld", r0 ? "" : ri, r0 ? "" : " + ", (ll)sj);
}

static void cu_store(CgRender *r, const KirStmt *s) {
  CgFunc *c = r->c;
  char idx[512];
  Buf x = {0};
  cg_render_expr(r, s->x, &x);
  cu_index(r, &s->ix, idx, sizeof idx);
  cu_line(r);
  if (r->k->kn && r->k->kn->kind == KN_ROW && !r->in_row) cg_puts(c->out, "if (threadIdx.x == 0) ");   /* a per-row value */
  cg_printf(c->out, "%s[%s] = %s;\n", cg_ref(c, s->v), idx, x.s);
  cg_buf_free(&x);
}

static void cu_rowbuf_decl(CgRender *r, const KirStmt *s) {
  cu_line(r);
  cg_printf(r->c->out, "%s %s[%lld] = {0};   /* this thread's elements of the row */\n",
            cg_ctype(r->c->f->values.data[s->v].type.dtype), r->rowarr[s->v], (ll)r->per);
}

/* The block's partial results: a tree in shared memory. */
static void cu_acc_done(CgRender *r, const KirStmt *s) {
  CgFunc *c = r->c;
  const Inst *in = s->in;
  ValId v = s->v;
  DType t = c->f->values.data[v].type.dtype;
  const char *sh = r->aux[v], *ct = cg_ctype(t), *at = cg_acc_type(in, t);
  cg_printf(c->out, "    %s[threadIdx.x] = %s;\n    __syncthreads();\n", sh, r->accn[v]);
  cg_printf(c->out, "    for (unsigned ctc_s = %d; ctc_s > 0; ctc_s >>= 1) {\n      if (threadIdx.x < ctc_s) ", r->block / 2);
  char accv[200], xv[200];
  snprintf(accv, sizeof accv, "%s[threadIdx.x]", sh);
  snprintf(xv, sizeof xv, "%s[threadIdx.x + ctc_s]", sh);
  int ind = c->ind;
  c->ind = 0;
  cg_acc_update(c, in, accv, xv);
  c->ind = ind;
  cg_puts(c->out, "      __syncthreads();\n    }\n");
  int cast = strcmp(at, ct) != 0;
  cg_printf(c->out, "    const %s %s = %s%s%s%s[0];\n", ct, r->local[v], cast ? "(" : "", cast ? ct : "", cast ? ")" : "", sh);
  cg_puts(c->out, "    __syncthreads();   /* every thread has read it before the next row writes */\n");
}

/* The C target's names (inputs "<x>_e", values their own name or "<x>_v"), then a row
 * kernel's accumulators "<x>_acc", shared arrays "<x>_sh" and per-row arrays "<x>_row". */
static void cu_names(CgRender *r) {
  CgFunc *c = r->c;
  const Kernel *kn = r->k->kn;
  cg_render_names(r, 1, 0);
  if (kn->kind != KN_ROW) return;
  char hint[160];
  for (int i = kn->first; i <= kn->last; i++) {
    const Inst *in = &c->f->insts.data[i];
    if (in->op == IR_CONST) continue;
    ValId v = in->res;
    if (in->op == IR_REDUCE_SUM || in->op == IR_REDUCE_MAX) {
      snprintf(hint, sizeof hint, "%s_acc", c->cname[v]), r->accn[v] = cg_name(c->ns, hint);
      snprintf(hint, sizeof hint, "%s_sh", c->cname[v]), r->aux[v] = cg_name(c->ns, hint);
    }
    if (c->s->rowbuf[v]) snprintf(hint, sizeof hint, "%s_row", c->cname[v]), r->rowarr[v] = cg_name(c->ns, hint), r->anybuf = 1;
  }
}

/* An op's parallel loop (cg_par_for): the loop that is all its instruction does (CG_PAR_GRID)
 * over the grid, a grid-stride loop whose trip count the launch reads from c->grid_trip; any
 * other loop as the C target writes it without OpenMP (each thread runs it whole). */
static void cu_par_for(CgFunc *c, const char *var, int64_t n, unsigned flags) {
  int grid = (flags & CG_PAR_GRID) && c->par_depth == 0 && n >= 1;
  CHECK(c->par_depth < (int)sizeof c->par_kind);
  if (grid && c->grid_trip) BUG("codegen_cuda: two loops of one instruction over the grid");
  indent(c->out, c->ind);
  if (grid) {
    cg_printf(c->out, "for (int64_t %s = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; %s < %lld; %s += "
                      "(int64_t)blockDim.x * gridDim.x) {\n", var, var, (ll)n, var);
    c->grid_trip = n;
  } else {
    cg_printf(c->out, "for (int64_t %s = 0; %s < %lld; %s++) {\n", var, var, (ll)n, var);
  }
  c->ind += 2;
  c->par_kind[c->par_depth] = (unsigned char)grid;
  c->par_ind[c->par_depth++] = c->ind;
}

static void cu_par_end(CgFunc *c) {
  CHECK(c->par_depth > 0);
  c->ind = c->par_ind[--c->par_depth] - 2;
  indent(c->out, c->ind);
  cg_puts(c->out, "}\n");
}

/* A parallel statement an emitter writes as text: one thread's here (nothing around it). */
static void cu_par_open(CgFunc *c, unsigned flags) {
  (void)flags;
  CHECK(c->par_depth < (int)sizeof c->par_kind);
  c->par_kind[c->par_depth] = 0;
  c->par_ind[c->par_depth++] = c->ind;
}

static void cu_par_close(CgFunc *c) {
  CHECK(c->par_depth > 0);
  c->ind = c->par_ind[--c->par_depth];
}

/* KE_AXIS: axis k's position from the flat element ctc_i, or a KIR_SERIAL loop's ctc_k. */
static void cu_axis(CgRender *r, int k, char *out, size_t cap) {
  int64_t st[IR_MAX_DIMS] = {0};
  st[k] = 1;
  char t[160];
  if (k == r->serial) snprintf(t, sizeof t, "ctc_k");
  else cu_flat_index(t, sizeof t, &r->k->space, st, "ctc_i", r->space_to);
  snprintf(out, cap, "%s", t);
}

/* The C target's table (render_c.c) with what a GPU does differently. */
static const CgRenderOps cuda_render = {.names = cu_names, .loop = cu_loop, .index = cu_index, .store = cu_store,
                                        .rowbuf_decl = cu_rowbuf_decl, .acc_done = cu_acc_done, .rowpos = "ctc_k",
                                        .par_for = cu_par_for, .par_end = cu_par_end, .par_open = cu_par_open,
                                        .par_close = cu_par_close, .axis = cu_axis};

/* Kernel k (kn: KN_ELEM, KN_ROW, or a KN_GEMM's epilogue) as a __global__ function and its launch. */
void cu_fused_kernel(Ent *e, const Kernel *kn, int k) {
  const Func *f = e->f;
  const Type *S = &kn->space;
  CgRender r;
  cg_render_init(&r, &cuda_render, e->c, kir_build(e->g->p->arena, f, e->c->s, kn));
  r.ops->names(&r);
  int64_t N = ir_numel(S), L = S->dims[S->ndim - 1], rows = L ? N / L : 0;
  int row = kn->kind == KN_ROW;
  r.block = !row ? ELEM_BLOCK : L <= 32 ? 32 : L <= 64 ? 64 : L <= 128 ? 128 : 256;
  r.per = (L + r.block - 1) / r.block;   /* elements of a row per thread */
  Buf body = {0}, com = {0};
  cu_kernel_comments(e, kn, k, &com);
  cu_kbegin(e, &body);
  for (int i = kn->first; row && i <= kn->last; i++) {
    const Inst *in = &f->insts.data[i];
    if (in->op != IR_CONST && (in->op == IR_REDUCE_SUM || in->op == IR_REDUCE_MAX))
      cg_printf(&body, "  __shared__ %s %s[%d];\n", cg_acc_type(in, ty(f, in->res)->dtype), r.aux[in->res], r.block);
  }
  e->c->ind = 2;
  cg_render_block(&r, &r.k->body);
  char kname[200], grid[32];
  cu_kname(e, kname, sizeof kname, k);
  int64_t blocks = row ? rows : (N + ELEM_BLOCK - 1) / ELEM_BLOCK;
  snprintf(grid, sizeof grid, "%lld", (ll)(blocks < 1 ? 1 : blocks > MAX_GRID ? MAX_GRID : blocks));
  cu_kend(e, kname, com.s, &body, grid, r.block, row);
  cg_buf_free(&body);
  cg_buf_free(&com);
  cg_render_free(&r);
}

/* Instruction i's kernel IR (kir_build_op) as a __global__ function and its launch: a thread
 * per result element (pad, gather, upsample), or per fiber along the axis, running the
 * serial loops along it (cumsum, argmax, scatter_add); 0, or -1 when it has none. */
int cu_op_kernel(Ent *e, int i) {
  const Inst *in = &e->f->insts.data[i];
  Kir *k = kir_build_op(e->g->p->arena, e->f, in, 0);   /* a thread per fiber: no lanes */
  if (!k) return -1;
  CgRender r;
  cg_render_init(&r, &cuda_render, e->c, k);
  Buf body = {0}, com = {0};
  cu_kbegin(e, &body);
  cg_comment(e->c, in);
  cg_render_tables(&r);
  cg_render_block(&r, &k->body);
  char kname[200], grid[32];
  snprintf(kname, sizeof kname, "%s_%s_i%d", e->g->prefix, e->fname, i);
  const KirStmt *par = k->body.data[0];
  CHECK(k->body.len == 1 && par->kind == KS_LOOP && par->loop == KIR_SPACE);
  int64_t N = space_count(&k->space, par->to), blocks = (N + ELEM_BLOCK - 1) / ELEM_BLOCK;
  snprintf(grid, sizeof grid, "%lld", (ll)(blocks < 1 ? 1 : blocks > MAX_GRID ? MAX_GRID : blocks));
  if (par->to < k->space.ndim)
    cg_printf(&com, "/* its kernel IR: a thread per fiber along axis %lld (grid-stride) */\n", (ll)in->attr[0]);
  else cg_puts(&com, "/* its kernel IR: a thread per result element (grid-stride) */\n");
  cu_kend(e, kname, com.s, &body, grid, ELEM_BLOCK, 0);
  cg_buf_free(&body);
  cg_buf_free(&com);
  cg_render_free(&r);
  return 0;
}

/* ---- any other instruction: the C target's loops, on GPU threads where it can -----------
 * The C emitter writes the instruction with c->target the CUDA renderer: a loop that is all
 * the instruction does (CG_PAR_GRID: pad_bwd, upsample_bwd, pooling) is a
 * grid-stride loop (cu_par_for), its iterations independent as for OpenMP's
 * threads, and the kernel is launched over the grid its trip count needs. Any other
 * instruction stays a one-thread kernel running the C target's loops. */
void cu_serial(Ent *e, int i) {
  Buf body = {0}, com = {0};
  cu_kbegin(e, &body);
  e->c->target = &cuda_render;
  e->c->grid_trip = 0;
  cg_emit_inst(e->c, i);   /* its comment, then its loops */
  CHECK(e->c->par_depth == 0);
  e->c->target = NULL;
  char kname[200], grid[32];
  snprintf(kname, sizeof kname, "%s_%s_i%d", e->g->prefix, e->fname, i);
  if (e->c->grid_trip > 0) {
    int64_t blocks = (e->c->grid_trip + ELEM_BLOCK - 1) / ELEM_BLOCK;
    snprintf(grid, sizeof grid, "%lld", (ll)(blocks > MAX_GRID ? MAX_GRID : blocks));
    cg_puts(&com, "/* the C target's loops, the outer one over GPU threads (grid-stride) */\n");
    cu_kend(e, kname, com.s, &body, grid, ELEM_BLOCK, 0);
  } else {
    cg_puts(&com, "/* one thread: the C target's loops (not yet parallel on the GPU) */\n");
    cu_kend(e, kname, com.s, &body, "1", 1, 0);
  }
  e->c->grid_trip = 0;
  cg_buf_free(&body);
  cg_buf_free(&com);
}
