/* emit_cuda.c - model.cu / model.h from IR + schedule + memory plan (codegen_cuda.h).
 *
 * model.cu, top to bottom:
 *   header comment; includes (CUDA and cuBLAS, or ctc_cuda_emu.h under
 *   -DCTC_CUDA_EMULATE); CTC_CUDA / CTC_CUBLAS / CTC_LAUNCH (every call checked,
 *   the generated file and line in the message)
 *   device helpers of the C target (kernels.c: ctc_tanh_f32 ...) as __host__ __device__
 *   GEMM and im2col/col2im helpers the entries use
 *   the __global__ kernels of every entry (one per KN_ELEM / KN_ROW kernel and
 *   per instruction without cuBLAS), each with the model-line comments
 *   parameter data and the host init of the C target (<m>_host_init, emit_c.c)
 *   <m>_init / _set_stream / _free / _load / _save
 *   per entry: <m>_<entry>_device (launches on m->stream) and <m>_<entry> (host pointers);
 *   distributed builds: its gradient buckets and the start/wait hooks between its
 *   kernels, from codegen_c/dist_c.c on the device arena (the communicator is
 *   runtime_min/rt_nccl.c's: NCCL on its own stream, ordered by events on m->stream)
 *   the ctc_model_desc of the C target (emit_c.c), main() under CTC_MAIN.
 *
 * Names are the C target's (cg_name over the same model names), so a kernel's
 * pointers read like the C loops: each kernel takes the arena base A and the
 * entry's inputs and declares the tensors it touches from their plan offsets. */
#include <stdlib.h>
#include <string.h>
#include "codegen_cuda.h"
#include "dnn_cuda.h"
#include "../codegen_c/cg_int.h"

typedef long long ll;

#define ELEM_BLOCK 256
#define MAX_GRID 65535

typedef struct Gen {
  const Program *p;
  const MemPlan *mp;
  struct KnSchedule *const *sched;
  const CudaOptions *opt;
  char prefix[64], upper[64];
  Kernels k;            /* C helpers the code uses (made __host__ __device__) */
  unsigned char gemm[DT_COUNT], im2col[DT_COUNT], col2im[DT_COUNT], grid;
  Buf kern;             /* __global__ kernels */
  Buf *sig, *dsig, *doc;   /* per func: host-pointer and device prototypes, description */
  int64_t io_bytes;     /* the largest entry's inputs + outputs (256-byte aligned each) */
  int nbuckets;         /* distributed builds: gradient buckets so far (codegen_c/dist_c.c) */
  DnnSites dnn;         /* the convolutions, for cuDNN (dnn_cuda.h) */
  int ixcheck;          /* some entry checks its indices (<m>_index_check and its kernel are written) */
  int err;
} Gen;

/* The state of one entry. */
typedef struct Ent {
  Gen *g;
  int fi;
  const Func *f;
  const char *fname;
  CgFunc c;
  unsigned char *href;  /* values the host code references */
  unsigned char *kref;  /* values the kernel being written references */
  Buf *host;            /* the entry's host body */
  int nkern;
  int uses_stream, uses_blas, uses_arena, uses_dnn;
} Ent;

static const Type *ty(const Func *f, ValId v) { return &f->values.data[v].type; }

static const Inst *def_of(const Func *f, ValId v) {
  const Value *val = &f->values.data[v];
  if (val->kind != V_INST || val->def < 0 || val->def >= f->insts.len) return NULL;
  const Inst *in = &f->insts.data[val->def];
  return in->res == v ? in : NULL;
}

static void indent(Buf *b, int n) { cg_printf(b, "%*s", n, ""); }

/* ---- kernels: begin / end --------------------------------------------------- */

/* Starts a kernel body: the CgFunc writes into body and marks kref. */
static void kbegin(Ent *e, Buf *body) {
  memset(e->kref, 0, (size_t)e->f->values.len + 1);
  e->c.ref = e->kref;
  e->c.out = body;
  e->c.ind = 4;
}

/* Finishes kernel `kname`: signature, declarations of the tensors it
 * referenced, the body; then its launch into the host code. grid/block: C text. */
static void kend(Ent *e, const char *kname, const char *comments, Buf *body, const char *grid, int block, int sync) {
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
    cg_printf(&params, "%sconst %s *%s", params.len ? ", " : "", cg_ctype(ty(f, v)->dtype), e->c.cname[v]);
    cg_printf(&args, "%s%s", args.len ? ", " : "", e->c.cname[v]);
  }
  cg_printf(k, "static __global__ void %s(%s) {\n", kname, params.len ? params.s : "void");
  for (ValId v = 0; v < f->values.len; v++) {
    if (!e->kref[v]) continue;
    const Loc *l = &fp->loc[v];
    const char *ct = cg_ctype(ty(f, v)->dtype);
    if (l->base >= 0) {
      if (f->inputs.data[l->base] != v)
        cg_printf(k, "  const %s *%s = %s;\n", ct, e->c.cname[v], e->c.cname[f->inputs.data[l->base]]);
      continue;
    }
    CHECK(l->base == LOC_ARENA);
    cg_printf(k, "  %s *%s = (%s *)(A + %lld);\n", ct, e->c.cname[v], ct, (ll)l->offset);
  }
  if (body->len) cg_puts(k, body->s);
  cg_puts(k, "}\n\n");
  /* the launch */
  e->c.ref = e->href;
  e->uses_stream = 1;
  if (anyA) e->uses_arena = 1;
  cg_printf(e->host, "  CTC_LAUNCH(%s, %s, %d, %d, ctc_st%s%s);\n", kname, grid, block, sync, args.len ? ", " : "",
            args.len ? args.s : "");
  cg_buf_free(&params);
  cg_buf_free(&args);
  free(inp);
  e->nkern++;
}

static void kname_of(Ent *e, char *buf, size_t cap, int k) {
  snprintf(buf, cap, "%s_%s_k%d", e->g->prefix, e->fname, k);
}

/* Comments of kernel kn (its header line and one per instruction) into b. */
static void kernel_comments(Ent *e, const Kernel *kn, int k, Buf *b) {
  Buf *save = e->c.out;
  int ind = e->c.ind;
  unsigned char *ref = e->c.ref;
  e->c.out = b;
  e->c.ind = 0;
  e->c.ref = e->href;   /* comments name values; they reference nothing */
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
    for (int j = 0; j < kn->outputs.len; j++) cg_printf(&h, "%s %s", j ? "," : "", e->c.cname[kn->outputs.data[j]]);
    if (!kn->outputs.len) cg_puts(&h, " nothing");
    for (char *t = h.s; (t = strstr(t, "*/")) != NULL;) t[1] = '|';
    cg_printf(b, "/* %s */\n", h.s);
    cg_buf_free(&h);
  }
  for (int i = kn->first; i <= kn->last; i++)
    if (e->f->insts.data[i].op != IR_CONST) cg_comment(&e->c, &e->f->insts.data[i]);
  e->c.out = save;
  e->c.ind = ind;
  e->c.ref = ref;
}

/* A literal operand's text. */
static void literal(const Func *f, ValId v, Buf *b) { cg_literal(b, ty(f, v)->dtype, def_of(f, v)->fattr); }

static int is_literal(const Func *f, ValId v) {
  const Inst *d = def_of(f, v);
  return d && d->op == IR_CONST;
}

/* The index of an operand with broadcast strides st over space S at flat
 * element `var` (row-major over S): "ctc_i" when contiguous, else a sum of
 * coordinates times strides. Axes >= from (and < to) only. */
static void flat_index(char *out, size_t cap, const Type *S, const int64_t *st, const char *var, int to) {
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
static void launch_comments(Ent *e, const Kernel *kn, int k, Buf *body) {
  Buf com = {0};
  kernel_comments(e, kn, k, &com);
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

static void cu_loop(CgRender *r, const KirStmt *s) {
  CgFunc *c = r->c;
  const Type *S = &r->k->space;
  int64_t L = r->k->rowlen;
  cu_line(r);
  if (s->loop == KIR_SPACE)
    cg_printf(c->out, "for (int64_t ctc_i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; ctc_i < %lld;"
                      " ctc_i += (int64_t)blockDim.x * gridDim.x) {\n", (ll)ir_numel(S));
  else if (s->loop == KIR_ROWS)
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
  c->ind -= 2;
  cu_line(r);
  cg_puts(c->out, "}\n");
}

/* KIR_SPACE: from the flat element ctc_i; a row kernel: the row ctc_row, element ctc_j. */
static void cu_index(CgRender *r, const KirIndex *ix, char *out, size_t cap) {
  const Type *S = &r->k->space;
  if (r->k->kn->kind != KN_ROW) {
    flat_index(out, cap, S, ix->st, "ctc_i", S->ndim);
    return;
  }
  int nout = S->ndim - 1;
  Type R = *S;   /* the rows: the space without its last axis */
  R.ndim = nout;
  char ri[400];
  flat_index(ri, sizeof ri, &R, ix->st, "ctc_row", nout);
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
  if (r->k->kn->kind == KN_ROW && !r->in_row) cg_puts(c->out, "if (threadIdx.x == 0) ");   /* a per-row value */
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

/* The C target's table (render_c.c) with what a GPU does differently. */
static const CgRenderOps cuda_render = {.names = cu_names, .loop = cu_loop, .index = cu_index, .store = cu_store,
                                        .rowbuf_decl = cu_rowbuf_decl, .acc_done = cu_acc_done, .rowpos = "ctc_k",
                                        .par_for = cu_par_for, .par_end = cu_par_end};

/* Kernel k (kn: KN_ELEM, KN_ROW, or a KN_GEMM's epilogue) as a __global__ function and its launch. */
static void emit_fused_kernel(Ent *e, const Kernel *kn, int k) {
  const Func *f = e->f;
  const Type *S = &kn->space;
  CgRender r;
  cg_render_init(&r, &cuda_render, &e->c, kir_build(e->g->p->arena, f, e->c.s, kn));
  r.ops->names(&r);
  int64_t N = ir_numel(S), L = S->dims[S->ndim - 1], rows = L ? N / L : 0;
  int row = kn->kind == KN_ROW;
  r.block = !row ? ELEM_BLOCK : L <= 32 ? 32 : L <= 64 ? 64 : L <= 128 ? 128 : 256;
  r.per = (L + r.block - 1) / r.block;   /* elements of a row per thread */
  Buf body = {0}, com = {0};
  kernel_comments(e, kn, k, &com);
  kbegin(e, &body);
  for (int i = kn->first; row && i <= kn->last; i++) {
    const Inst *in = &f->insts.data[i];
    if (in->op != IR_CONST && (in->op == IR_REDUCE_SUM || in->op == IR_REDUCE_MAX))
      cg_printf(&body, "  __shared__ %s %s[%d];\n", cg_acc_type(in, ty(f, in->res)->dtype), r.aux[in->res], r.block);
  }
  e->c.ind = 2;
  cg_render_block(&r, &r.k->body);
  char kname[200], grid[32];
  kname_of(e, kname, sizeof kname, k);
  int64_t blocks = row ? rows : (N + ELEM_BLOCK - 1) / ELEM_BLOCK;
  snprintf(grid, sizeof grid, "%lld", (ll)(blocks < 1 ? 1 : blocks > MAX_GRID ? MAX_GRID : blocks));
  kend(e, kname, com.s, &body, grid, r.block, row);
  cg_buf_free(&body);
  cg_buf_free(&com);
  cg_render_free(&r);
}

/* ---- GEMMs through cuBLAS ------------------------------------------------------ */

static int gemm_dtype(DType t) { return t == DT_F32 || t == DT_F64; }

/* "ptr + off" as host text for root value r at element offset off. */
static void host_ptr(Ent *e, Buf *b, ValId r, int64_t off) {
  if (off) cg_printf(b, "%s + %lld", cg_ref(&e->c, r), (ll)off);
  else cg_puts(b, cg_ref(&e->c, r));
}

/* Whether strides st over the axes of dims are one stride per flat batch index. */
static int uniform(const int64_t *st, const int64_t *dims, int nd, int64_t *s) {
  int64_t inner = 1;
  *s = nd ? st[nd - 1] : 0;
  for (int k = nd - 1; k >= 0; k--) {
    if (dims[k] != 1 && st[k] != *s * inner) return 0;
    inner *= dims[k];
  }
  return 1;
}

static int emit_matmul(Ent *e, const Inst *in) {
  const Func *f = e->f;
  const Type *r = ty(f, in->res);
  DType dt = r->dtype;
  if (!gemm_dtype(dt)) return -1;
  e->g->gemm[dt] = 1;
  e->uses_blas = 1;
  KnLayout l[2];
  const Type *t[2];
  int bt[2];
  int64_t ld[2];
  for (int k = 0; k < 2; k++) {
    t[k] = ty(f, in->args[k]);
    if (kn_layout(f, e->c.s, in->args[k], &l[k]) < 0 || kn_gemm_operand(t[k], &l[k], (int)in->attr[k], &bt[k], &ld[k]) < 0)
      return -1;
  }
  int64_t M = r->dims[r->ndim - 2], N = r->dims[r->ndim - 1];
  int64_t K = in->attr[0] ? t[0]->dims[t[0]->ndim - 2] : t[0]->dims[t[0]->ndim - 1];
  /* batch strides of the result and both operands over the result's batch axes */
  int nb = r->ndim - 2;
  int64_t bst[3][IR_MAX_DIMS], cs = M * N;
  for (int k = nb - 1; k >= 0; k--) bst[0][k] = cs, cs *= r->dims[k];
  for (int j = 0; j < 2; j++)
    for (int k = 0; k < nb; k++) {
      int ax = k - (nb - (t[j]->ndim - 2));
      bst[j + 1][k] = ax >= 0 && t[j]->dims[ax] != 1 ? l[j].st[ax] : 0;
    }
  int64_t batch = 1;
  for (int k = 0; k < nb; k++) batch *= r->dims[k];
  int64_t s[3];
  int uni = uniform(bst[0], r->dims, nb, &s[0]) && uniform(bst[1], r->dims, nb, &s[1]) &&
            uniform(bst[2], r->dims, nb, &s[2]);
  /* b shared by the batch, a's rows contiguous across it: one GEMM with the batch in the rows */
  if (uni && batch > 1 && s[2] == 0 && !bt[0] && ld[0] == K && s[1] == M * K) M *= batch, batch = 1;
  const char *sf = cg_dt_suffix(dt);
  Buf pa = {0}, pb = {0}, pc = {0};
  if (uni || nb <= 1) {
    host_ptr(e, &pa, l[0].root, l[0].off);
    host_ptr(e, &pb, l[1].root, l[1].off);
    host_ptr(e, &pc, in->res, 0);
    cg_printf(e->host, "  CTC_CUBLAS(ctc_gemm_%s(ctc_blas, %d, %d, %lld, %lld, %lld, %s, %lld, %lld, %s, %lld, %lld, 0, %s, "
                       "%lld, %lld, %lld));\n", sf, bt[0], bt[1], (ll)M, (ll)N, (ll)K, pa.s, (ll)ld[0],
              (ll)(batch > 1 ? s[1] : 0), pb.s, (ll)ld[1], (ll)(batch > 1 ? s[2] : 0), pc.s, (ll)N,
              (ll)(batch > 1 ? s[0] : 0), (ll)batch);
  } else {
    /* host loops over the leading batch axes, one strided batch over the last */
    int last = nb - 1;
    for (int k = 0; k < last; k++)
      cg_printf(e->host, "  %*sfor (int64_t ctc_b%d = 0; ctc_b%d < %lld; ctc_b%d++)\n", 2 * k, "", k, k, (ll)r->dims[k], k);
    Buf *pp[3] = {&pc, &pa, &pb};
    ValId roots[3] = {in->res, l[0].root, l[1].root};
    int64_t offs[3] = {0, l[0].off, l[1].off};
    for (int j = 0; j < 3; j++) {
      host_ptr(e, pp[j], roots[j], offs[j]);
      for (int k = 0; k < last; k++)
        if (bst[j][k]) cg_printf(pp[j], " + ctc_b%d * %lld", k, (ll)bst[j][k]);
    }
    cg_printf(e->host, "  %*sCTC_CUBLAS(ctc_gemm_%s(ctc_blas, %d, %d, %lld, %lld, %lld, %s, %lld, %lld, %s, %lld, %lld, 0, "
                       "%s, %lld, %lld, %lld));\n", 2 * last, "", sf, bt[0], bt[1], (ll)M, (ll)N, (ll)K, pa.s, (ll)ld[0],
              (ll)bst[1][last], pb.s, (ll)ld[1], (ll)bst[2][last], pc.s, (ll)N, (ll)bst[0][last], (ll)r->dims[last]);
  }
  cg_buf_free(&pa);
  cg_buf_free(&pb);
  cg_buf_free(&pc);
  return 0;
}

/* ---- convolutions: im2col / col2im kernels + cuBLAS ------------------------------- */

/* Grouped convolutions: a GEMM batched over the groups per image (the C
 * target's per-image, per-group GEMMs), im2col/col2im of one image at a time
 * over all its channels (group grp's rows are the block [grp*ckk, (grp+1)*ckk)). */
static int emit_conv_grouped(Ent *e, int i, const Inst *in) {
  const Func *f = e->f;
  DType dt = ty(f, in->res)->dtype;
  ConvGeom g;
  cg_conv_geom(f, in, &g);
  Gen *gen = e->g;
  gen->gemm[dt] = 1;
  e->uses_blas = 1;
  e->uses_stream = 1;
  const char *sf = cg_dt_suffix(dt), *scratch = e->c.sname[i];
  int64_t CHW = g.C * g.H * g.W, OHW = g.O * g.ohw, G = g.G, Og = g.Og, Cg = g.Cg, ckk = g.ckk, ohw = g.ohw;
  int64_t colimg = G * ckk * ohw;   /* one image's columns, all channels */
  const int64_t *a = in->attr;
  char geo[256];
  snprintf(geo, sizeof geo, "%lld, %lld, %lld, %lld, %lld, %lld, %lld, %lld, %lld, %lld, %lld, %lld, %lld", (ll)g.C,
           (ll)g.H, (ll)g.W, (ll)g.KH, (ll)g.KW, (ll)a[0], (ll)a[1], (ll)a[2], (ll)a[3], (ll)a[4], (ll)a[5], (ll)g.OH,
           (ll)g.OW);
  Buf *h = e->host;
  if (scratch) gen->grid = 1;
  cg_printf(h, "  for (int64_t ctc_n = 0; ctc_n < %lld; ctc_n++) {   /* per image: the %lld groups in one batch */\n",
            (ll)g.N, (ll)G);
  switch (in->op) {
  case IR_CONV2D: {
    const char *x = cg_ref(&e->c, in->args[0]), *w = cg_ref(&e->c, in->args[1]), *y = cg_ref(&e->c, in->res);
    char col[256];
    if (scratch) {
      gen->im2col[dt] = 1;
      cg_printf(h, "    CTC_LAUNCH(ctc_im2col_%s, ctc_grid(%lld), 256, 0, ctc_st, %s + ctc_n * %lld, %lld, 1, %s, %s, %lld, %lld);\n",
                sf, (ll)colimg, x, (ll)CHW, (ll)CHW, geo, scratch, (ll)ohw, (ll)colimg);
      snprintf(col, sizeof col, "%s", scratch);
    } else {
      snprintf(col, sizeof col, "%s + ctc_n * %lld", x, (ll)CHW);   /* 1x1, stride 1, no padding */
    }
    cg_printf(h, "    CTC_CUBLAS(ctc_gemm_%s(ctc_blas, 0, 0, %lld, %lld, %lld, %s, %lld, %lld, %s, %lld, %lld, 0, %s + ctc_n * %lld, "
                 "%lld, %lld, %lld));\n", sf, (ll)Og, (ll)ohw, (ll)ckk, w, (ll)ckk, (ll)(Og * ckk), col, (ll)ohw,
              (ll)(ckk * ohw), y, (ll)OHW, (ll)ohw, (ll)(Og * ohw), (ll)G);
    break;
  }
  case IR_CONV2D_BWD_INPUT: {
    const char *gy = cg_ref(&e->c, in->args[0]), *w = cg_ref(&e->c, in->args[1]), *dx = cg_ref(&e->c, in->res);
    char col[256];
    if (scratch) snprintf(col, sizeof col, "%s", scratch);
    else snprintf(col, sizeof col, "%s + ctc_n * %lld", dx, (ll)CHW);
    cg_printf(h, "    CTC_CUBLAS(ctc_gemm_%s(ctc_blas, 1, 0, %lld, %lld, %lld, %s, %lld, %lld, %s + ctc_n * %lld, %lld, %lld, 0, "
                 "%s, %lld, %lld, %lld));\n", sf, (ll)ckk, (ll)ohw, (ll)Og, w, (ll)ckk, (ll)(Og * ckk), gy, (ll)OHW, (ll)ohw,
              (ll)(Og * ohw), col, (ll)ohw, (ll)(ckk * ohw), (ll)G);
    if (scratch) {
      gen->col2im[dt] = 1;
      cg_printf(h, "    CTC_LAUNCH(ctc_col2im_%s, ctc_grid(%lld), 256, 0, ctc_st, %s, %lld, 1, %s, %s + ctc_n * %lld, %lld);\n", sf,
                (ll)CHW, scratch, (ll)colimg, geo, dx, (ll)CHW, (ll)CHW);
    }
    break;
  }
  case IR_CONV2D_BWD_WEIGHT: {
    const char *x = cg_ref(&e->c, in->args[0]), *gy = cg_ref(&e->c, in->args[1]), *dw = cg_ref(&e->c, in->res);
    char col[256];
    if (scratch) {
      gen->im2col[dt] = 1;
      cg_printf(h, "    CTC_LAUNCH(ctc_im2col_%s, ctc_grid(%lld), 256, 0, ctc_st, %s + ctc_n * %lld, %lld, 1, %s, %s, %lld, %lld);\n",
                sf, (ll)colimg, x, (ll)CHW, (ll)CHW, geo, scratch, (ll)ohw, (ll)colimg);
      snprintf(col, sizeof col, "%s", scratch);
    } else {
      snprintf(col, sizeof col, "%s + ctc_n * %lld", x, (ll)CHW);
    }
    cg_printf(h, "    CTC_CUBLAS(ctc_gemm_%s(ctc_blas, 0, 1, %lld, %lld, %lld, %s + ctc_n * %lld, %lld, %lld, %s, %lld, %lld, "
                 "ctc_n > 0, %s, %lld, %lld, %lld));\n", sf, (ll)Og, (ll)ckk, (ll)ohw, gy, (ll)OHW, (ll)ohw, (ll)(Og * ohw),
              col, (ll)ohw, (ll)(ckk * ohw), dw, (ll)ckk, (ll)(Og * ckk), (ll)G);
    break;
  }
  default: BUG("emit_conv_grouped");
  }
  cg_puts(h, "  }\n");
  (void)Cg;
  return 0;
}

/* A convolution without groups: im2col/col2im kernels and cuBLAS, S images at a time. */
static int emit_conv_gemm(Ent *e, int i, const Inst *in) {
  const Func *f = e->f;
  DType dt = ty(f, in->res)->dtype;
  ConvGeom g;
  cg_conv_geom(f, in, &g);
  Gen *gen = e->g;
  gen->gemm[dt] = 1;
  e->uses_blas = 1;
  e->uses_stream = 1;
  const char *sf = cg_dt_suffix(dt), *scratch = e->c.sname[i];
  int64_t S = ir_conv_slots(f, in), CHW = g.C * g.H * g.W, OHW = g.O * g.ohw;
  const int64_t *a = in->attr;
  char geo[256];
  snprintf(geo, sizeof geo, "%lld, %lld, %lld, %lld, %lld, %lld, %lld, %lld, %lld, %lld, %lld, %lld, %lld", (ll)g.C,
           (ll)g.H, (ll)g.W, (ll)g.KH, (ll)g.KW, (ll)a[0], (ll)a[1], (ll)a[2], (ll)a[3], (ll)a[4], (ll)a[5], (ll)g.OH,
           (ll)g.OW);
  Buf *h = e->host;
  if (scratch) gen->grid = 1;
  switch (in->op) {
  case IR_CONV2D: {
    const char *x = cg_ref(&e->c, in->args[0]), *w = cg_ref(&e->c, in->args[1]), *y = cg_ref(&e->c, in->res);
    if (!scratch) {   /* 1x1, stride 1, no padding: x[n] is the column matrix */
      cg_printf(h, "  CTC_CUBLAS(ctc_gemm_%s(ctc_blas, 0, 0, %lld, %lld, %lld, %s, %lld, 0, %s, %lld, %lld, 0, %s, %lld, %lld, "
                   "%lld));\n", sf, (ll)g.O, (ll)g.ohw, (ll)g.C, w, (ll)g.C, x, (ll)g.ohw, (ll)CHW, y, (ll)g.ohw, (ll)OHW,
                (ll)g.N);
      break;
    }
    gen->im2col[dt] = 1;
    cg_printf(h, "  for (int64_t ctc_n0 = 0; ctc_n0 < %lld; ctc_n0 += %lld) {   /* %lld image%s at a time */\n", (ll)g.N,
              (ll)S, (ll)S, S == 1 ? "" : "s");
    cg_printf(h, "    const int64_t ctc_ns = %lld - ctc_n0 < %lld ? %lld - ctc_n0 : %lld;\n", (ll)g.N, (ll)S, (ll)g.N, (ll)S);
    cg_printf(h, "    CTC_LAUNCH(ctc_im2col_%s, ctc_grid(ctc_ns * %lld), 256, 0, ctc_st, %s + ctc_n0 * %lld, %lld, ctc_ns, "
                 "%s, %s, %lld, %lld);\n", sf, (ll)(g.ckk * g.ohw), x, (ll)CHW, (ll)CHW, geo, scratch, (ll)g.ohw,
              (ll)(g.ckk * g.ohw));
    cg_printf(h, "    CTC_CUBLAS(ctc_gemm_%s(ctc_blas, 0, 0, %lld, %lld, %lld, %s, %lld, 0, %s, %lld, %lld, 0, %s + ctc_n0 * "
                 "%lld, %lld, %lld, ctc_ns));\n  }\n", sf, (ll)g.O, (ll)g.ohw, (ll)g.ckk, w, (ll)g.ckk, scratch, (ll)g.ohw,
              (ll)(g.ckk * g.ohw), y, (ll)OHW, (ll)g.ohw, (ll)OHW);
    break;
  }
  case IR_CONV2D_BWD_INPUT: {
    const char *gy = cg_ref(&e->c, in->args[0]), *w = cg_ref(&e->c, in->args[1]), *dx = cg_ref(&e->c, in->res);
    if (!scratch) {
      cg_printf(h, "  CTC_CUBLAS(ctc_gemm_%s(ctc_blas, 1, 0, %lld, %lld, %lld, %s, %lld, 0, %s, %lld, %lld, 0, %s, %lld, %lld, "
                   "%lld));\n", sf, (ll)g.C, (ll)g.ohw, (ll)g.O, w, (ll)g.C, gy, (ll)g.ohw, (ll)OHW, dx, (ll)g.ohw, (ll)CHW,
                (ll)g.N);
      break;
    }
    gen->col2im[dt] = 1;
    cg_printf(h, "  for (int64_t ctc_n0 = 0; ctc_n0 < %lld; ctc_n0 += %lld) {   /* %lld image%s at a time */\n", (ll)g.N,
              (ll)S, (ll)S, S == 1 ? "" : "s");
    cg_printf(h, "    const int64_t ctc_ns = %lld - ctc_n0 < %lld ? %lld - ctc_n0 : %lld;\n", (ll)g.N, (ll)S, (ll)g.N, (ll)S);
    cg_printf(h, "    CTC_CUBLAS(ctc_gemm_%s(ctc_blas, 1, 0, %lld, %lld, %lld, %s, %lld, 0, %s + ctc_n0 * %lld, %lld, %lld, 0, "
                 "%s, %lld, %lld, ctc_ns));\n", sf, (ll)g.ckk, (ll)g.ohw, (ll)g.O, w, (ll)g.ckk, gy, (ll)OHW, (ll)g.ohw,
              (ll)OHW, scratch, (ll)g.ohw, (ll)(g.ckk * g.ohw));
    cg_printf(h, "    CTC_LAUNCH(ctc_col2im_%s, ctc_grid(ctc_ns * %lld), 256, 0, ctc_st, %s, %lld, ctc_ns, %s, %s + ctc_n0 * "
                 "%lld, %lld);\n  }\n", sf, (ll)CHW, scratch, (ll)(g.ckk * g.ohw), geo, dx, (ll)CHW, (ll)CHW);
    break;
  }
  case IR_CONV2D_BWD_WEIGHT: {
    const char *x = cg_ref(&e->c, in->args[0]), *gy = cg_ref(&e->c, in->args[1]), *dw = cg_ref(&e->c, in->res);
    if (!scratch) {   /* dw = sum over n of g[n] x[n]^T */
      cg_printf(h, "  for (int64_t ctc_n = 0; ctc_n < %lld; ctc_n++)\n", (ll)g.N);
      cg_printf(h, "    CTC_CUBLAS(ctc_gemm_%s(ctc_blas, 0, 1, %lld, %lld, %lld, %s + ctc_n * %lld, %lld, 0, %s + ctc_n * %lld, "
                   "%lld, 0, ctc_n > 0, %s, %lld, 0, 1));\n", sf, (ll)g.O, (ll)g.C, (ll)g.ohw, gy, (ll)OHW, (ll)g.ohw, x,
                (ll)CHW, (ll)g.ohw, dw, (ll)g.C);
      break;
    }
    /* a chunk of S images' columns side by side (col[ckk, S*OH*OW]) next to a copy of
     * their gradients (gs[O, S*OH*OW]); one GEMM per chunk with K = ns*OH*OW */
    gen->im2col[dt] = 1;
    int64_t L = S * g.ohw;
    const char *ct = cg_ctype(dt);
    cg_printf(h, "  for (int64_t ctc_n0 = 0; ctc_n0 < %lld; ctc_n0 += %lld) {   /* %lld image%s at a time */\n", (ll)g.N,
              (ll)S, (ll)S, S == 1 ? "" : "s");
    cg_printf(h, "    const int64_t ctc_ns = %lld - ctc_n0 < %lld ? %lld - ctc_n0 : %lld;\n", (ll)g.N, (ll)S, (ll)g.N, (ll)S);
    cg_printf(h, "    CTC_LAUNCH(ctc_im2col_%s, ctc_grid(ctc_ns * %lld), 256, 0, ctc_st, %s + ctc_n0 * %lld, %lld, ctc_ns, "
                 "%s, %s, %lld, %lld);\n", sf, (ll)(g.ckk * g.ohw), x, (ll)CHW, (ll)CHW, geo, scratch, (ll)L, (ll)g.ohw);
    cg_printf(h, "    for (int64_t ctc_s = 0; ctc_s < ctc_ns; ctc_s++)\n");
    cg_printf(h, "      CTC_CUDA(cudaMemcpy2DAsync(%s + %lld + ctc_s * %lld, %lld * sizeof(%s), %s + (ctc_n0 + ctc_s) * %lld, "
                 "%lld * sizeof(%s), %lld * sizeof(%s), %lld, cudaMemcpyDeviceToDevice, ctc_st));\n", scratch,
              (ll)(g.ckk * L), (ll)g.ohw, (ll)L, ct, gy, (ll)OHW, (ll)g.ohw, ct, (ll)g.ohw, ct, (ll)g.O);
    cg_printf(h, "    CTC_CUBLAS(ctc_gemm_%s(ctc_blas, 0, 1, %lld, %lld, ctc_ns * %lld, %s + %lld, %lld, 0, %s, %lld, 0, "
                 "ctc_n0 > 0, %s, %lld, 0, 1));\n  }\n", sf, (ll)g.O, (ll)g.ckk, (ll)g.ohw, scratch, (ll)(g.ckk * L), (ll)L,
              scratch, (ll)L, dw, (ll)g.ckk);
    break;
  }
  default: BUG("emit_conv");
  }
  return 0;
}

/* A convolution: cuDNN when the file is built with CTC_HAVE_CUDNN and the site has an
 * algorithm (dnn_cuda.h), else (and always without cuDNN) the im2col + cuBLAS code. */
static int emit_conv(Ent *e, int i, const Inst *in) {
  const Func *f = e->f;
  if (!gemm_dtype(ty(f, in->res)->dtype)) return -1;
  Buf *host = e->host, alt = {0};
  e->host = &alt;
  int rc = in->attr[6] > 1 ? emit_conv_grouped(e, i, in) : emit_conv_gemm(e, i, in);
  e->host = host;
  if (!rc) {
    /* x, w, y as cuDNN names them: the image, the kernel, the convolution's output */
    const char *x, *w, *y;
    if (in->op == IR_CONV2D) x = cg_ref(&e->c, in->args[0]), w = cg_ref(&e->c, in->args[1]), y = cg_ref(&e->c, in->res);
    else if (in->op == IR_CONV2D_BWD_INPUT)
      y = cg_ref(&e->c, in->args[0]), w = cg_ref(&e->c, in->args[1]), x = cg_ref(&e->c, in->res);
    else x = cg_ref(&e->c, in->args[0]), y = cg_ref(&e->c, in->args[1]), w = cg_ref(&e->c, in->res);
    const char *scratch = e->c.sname[i];
    cg_dnn_conv(&e->g->dnn, host, f, in, x, w, y, scratch, scratch ? ir_scratch_bytes(f, in) : 0);
    e->uses_dnn = 1;
    cg_puts(host, "  {\n");
    CgLines L;   /* the im2col code, one level deeper */
    cg_lines(alt.s ? alt.s : "", &L);
    for (size_t k = 0; k < L.len; k++) cg_printf(host, "%s%.*s\n", L.n[k] ? "  " : "", (int)L.n[k], L.s[k]);
    cg_lines_free(&L);
    cg_puts(host, "  }\n");
  }
  cg_buf_free(&alt);
  return rc;
}

/* ---- data movement and reductions: a thread per result element ----------------- */

static void cstrides(const Type *t, int64_t *st) {
  int64_t n = 1;
  for (int k = t->ndim - 1; k >= 0; k--) st[k] = n, n *= t->dims[k];
}

/* The kernel of instruction i with a grid-stride loop over its result's
 * elements around `inner` (which uses ctc_i); c->out is the body. */
static void elementwise_kernel(Ent *e, int i, const Inst *in, Buf *body) {
  Buf com = {0};
  Buf *save = e->c.out;
  unsigned char *ref = e->c.ref;
  e->c.out = &com, e->c.ind = 0, e->c.ref = e->href;
  cg_comment(&e->c, in);
  e->c.out = save, e->c.ref = ref;
  char kname[200], grid[32];
  snprintf(kname, sizeof kname, "%s_%s_i%d", e->g->prefix, e->fname, i);
  int64_t N = ir_numel(ty(e->f, in->res)), blocks = (N + ELEM_BLOCK - 1) / ELEM_BLOCK;
  snprintf(grid, sizeof grid, "%lld", (ll)(blocks < 1 ? 1 : blocks > MAX_GRID ? MAX_GRID : blocks));
  kend(e, kname, com.s, body, grid, ELEM_BLOCK, 0);
  cg_buf_free(&com);
}

static const char loop_head[] =
    "  for (int64_t ctc_i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; ctc_i < %lld;"
    " ctc_i += (int64_t)blockDim.x * gridDim.x)";

/* PERMUTE, BROADCAST, SLICE: result[ctc_i] = operand[off + strides . coordinates]. */
static int emit_copy(Ent *e, int i, const Inst *in) {
  const Func *f = e->f;
  const Type *a = ty(f, in->args[0]), *r = ty(f, in->res);
  int64_t st[IR_MAX_DIMS], ast[IR_MAX_DIMS], off = 0;
  cstrides(a, ast);
  switch (in->op) {
  case IR_PERMUTE:
    for (int k = 0; k < r->ndim; k++) st[k] = ast[in->attr[k]];
    break;
  case IR_BROADCAST: cg_bcast_strides(a, r, st); break;
  case IR_SLICE:
    for (int k = 0; k < r->ndim; k++) off += in->attr[2 * k] * ast[k], st[k] = ast[k] * in->attr[2 * k + 1];
    break;
  default: return -1;
  }
  Buf body = {0}, src = {0};
  kbegin(e, &body);
  if (is_literal(f, in->args[0])) {
    literal(f, in->args[0], &src);
  } else {
    char idx[512];
    flat_index(idx, sizeof idx, r, st, "ctc_i", r->ndim);
    cg_printf(&src, "%s[%s", cg_ref(&e->c, in->args[0]), idx);
    if (off) cg_printf(&src, " + %lld", (ll)off);
    cg_puts(&src, "]");
  }
  cg_printf(&body, loop_head, (ll)ir_numel(r));
  cg_printf(&body, "\n    %s[ctc_i] = %s;\n", cg_ref(&e->c, in->res), src.s);
  elementwise_kernel(e, i, in, &body);
  cg_buf_free(&body);
  cg_buf_free(&src);
  return 0;
}

/* REDUCE_SUM / REDUCE_MAX over any axes: each result element accumulates its
 * operand elements in row-major order of the reduced axes, in the C target's
 * accumulator type (emit_reduce's order: the same sums). */
static int emit_reduce(Ent *e, int i, const Inst *in) {
  const Func *f = e->f;
  if (is_literal(f, in->args[0])) return -1;
  const Type *a = ty(f, in->args[0]), *r = ty(f, in->res);
  DType t = r->dtype;
  int64_t ast[IR_MAX_DIMS], kst[IR_MAX_DIMS];
  cstrides(a, ast);
  for (int k = 0; k < r->ndim; k++) kst[k] = (in->attr[0] >> k) & 1 ? 0 : ast[k];
  Buf body = {0};
  kbegin(e, &body);
  char idx[512];
  flat_index(idx, sizeof idx, r, kst, "ctc_i", r->ndim);
  cg_printf(&body, loop_head, (ll)ir_numel(r));
  cg_printf(&body, " {\n    const int64_t ctc_b = %s;\n", idx);
  cg_printf(&body, "    %s ctc_acc = %s;\n", cg_acc_type(in, t), cg_acc_init(in, t));
  Buf x = {0};
  cg_printf(&x, "%s[ctc_b", cg_ref(&e->c, in->args[0]));
  int nl = 0;
  for (int k = 0; k < a->ndim; k++) {
    if (!((in->attr[0] >> k) & 1) || a->dims[k] == 1) continue;
    cg_printf(&body, "    %*sfor (int64_t ctc_r%d = 0; ctc_r%d < %lld; ctc_r%d++)\n", 2 * nl, "", k, k, (ll)a->dims[k], k);
    cg_printf(&x, " + ctc_r%d * %lld", k, (ll)ast[k]);
    nl++;
  }
  cg_puts(&x, "]");
  e->c.out = &body;
  e->c.ind = 4 + 2 * nl;
  cg_acc_update(&e->c, in, "ctc_acc", x.s);
  int cast = strcmp(cg_acc_type(in, t), cg_ctype(t)) != 0;
  cg_printf(&body, "    %s[ctc_i] = %s%s%sctc_acc;\n  }\n", cg_ref(&e->c, in->res), cast ? "(" : "", cast ? cg_ctype(t) : "",
            cast ? ")" : "");
  elementwise_kernel(e, i, in, &body);
  cg_buf_free(&body);
  cg_buf_free(&x);
  return 0;
}

/* CONCAT: each result element from the part that holds its index on the axis. */
static int emit_concat(Ent *e, int i, const Inst *in) {
  const Func *f = e->f;
  const Type *r = ty(f, in->res);
  int ax = (int)in->attr[0];
  for (int k = 0; k < in->nargs; k++)
    if (is_literal(f, in->args[k])) return -1;
  int64_t inner = 1;
  for (int k = ax + 1; k < r->ndim; k++) inner *= r->dims[k];
  int64_t D = r->dims[ax];
  Buf body = {0};
  kbegin(e, &body);
  cg_printf(&body, loop_head, (ll)ir_numel(r));
  cg_printf(&body, " {\n    const int64_t ctc_o = ctc_i / %lld, ctc_a = ctc_i / %lld %% %lld, ctc_q = ctc_i %% %lld;\n", (ll)(D * inner),
            (ll)inner, (ll)D, (ll)inner);
  int64_t at = 0;
  for (int k = 0; k < in->nargs; k++) {
    int64_t n = ty(f, in->args[k])->dims[ax];
    cg_printf(&body, "    %sif (ctc_a < %lld) %s[ctc_i] = %s[(ctc_o * %lld + ctc_a - %lld) * %lld + ctc_q];\n", k ? "else " : "",
              (ll)(at + n), cg_ref(&e->c, in->res), cg_ref(&e->c, in->args[k]), (ll)n, (ll)at, (ll)inner);
    at += n;
  }
  cg_puts(&body, "  }\n");
  elementwise_kernel(e, i, in, &body);
  cg_buf_free(&body);
  return 0;
}

/* IOTA and RAND_UNIFORM: element i from i alone (the C target's formulas). */
static int emit_iota_rand(Ent *e, int i, const Inst *in) {
  const Func *f = e->f;
  const Type *r = ty(f, in->res);
  const char *ct = cg_ctype(r->dtype);
  Buf body = {0};
  kbegin(e, &body);
  cg_printf(&body, loop_head, (ll)(in->op == IR_IOTA ? r->dims[0] : ir_numel(r)));
  const char *y = cg_ref(&e->c, in->res);
  if (in->op == IR_IOTA) {
    cg_printf(&body, "\n    %s[ctc_i] = (%s)(%lld + ctc_i * %lld);\n", y, ct, (ll)in->attr[0], (ll)in->attr[1]);
  } else {
    Buf off = {0};
    if (is_literal(f, in->args[0])) cg_printf(&off, "%lld", (ll)def_of(f, in->args[0])->fattr);
    else cg_printf(&off, "%s[0]", cg_ref(&e->c, in->args[0]));
    cg_printf(&body, " {\n    uint64_t ctc_z = ((uint64_t)%s + (uint64_t)ctc_i + 1u) * 0x9E3779B97F4A7C15u;\n", off.s);
    cg_puts(&body, "    ctc_z = (ctc_z ^ (ctc_z >> 30)) * 0xBF58476D1CE4E5B9u;\n    ctc_z = (ctc_z ^ (ctc_z >> 27)) * 0x94D049BB133111EBu;\n");
    cg_printf(&body, "    %s[ctc_i] = (%s)((ctc_z ^ (ctc_z >> 31)) >> 40) * (%s)(1.0 / 16777216.0);\n  }\n", y, ct, ct);
    cg_buf_free(&off);
  }
  elementwise_kernel(e, i, in, &body);
  cg_buf_free(&body);
  return 0;
}

/* UNSLICE: a result element on the slice's lattice takes g's element there, the
 * others 0. RESHAPE of a scalar constant: a fill. */
static int emit_unslice(Ent *e, int i, const Inst *in) {
  const Func *f = e->f;
  const Type *r = ty(f, in->res);
  Buf body = {0};
  kbegin(e, &body);
  cg_printf(&body, loop_head, (ll)ir_numel(r));
  if (in->op == IR_RESHAPE) {
    Buf lit = {0};
    literal(f, in->args[0], &lit);
    cg_printf(&body, "\n    %s[ctc_i] = %s;\n", cg_ref(&e->c, in->res), lit.s);
    cg_buf_free(&lit);
  } else {
    const Type *g = ty(f, in->args[0]);
    int64_t gst[IR_MAX_DIMS], inner = 1;
    cstrides(g, gst);
    cg_puts(&body, " {\n    int64_t ctc_g = 0;\n    int ctc_on = 1;\n");
    for (int k = r->ndim - 1; k >= 0; k--) {
      int64_t start = in->attr[2 * k], step = in->attr[2 * k + 1];
      cg_printf(&body, "    { const int64_t ctc_c = ctc_i / %lld %% %lld - %lld;\n", (ll)inner, (ll)r->dims[k], (ll)start);
      cg_printf(&body, "      ctc_on &= ctc_c >= 0 && ctc_c %% %lld == 0 && ctc_c / %lld < %lld;\n", (ll)step, (ll)step,
                (ll)g->dims[k]);
      cg_printf(&body, "      ctc_g += ctc_c / %lld * %lld; }\n", (ll)step, (ll)gst[k]);
      inner *= r->dims[k];
    }
    cg_printf(&body, "    %s[ctc_i] = ctc_on ? %s[ctc_g] : (%s)0;\n  }\n", cg_ref(&e->c, in->res), cg_ref(&e->c, in->args[0]),
              cg_ctype(r->dtype));
  }
  elementwise_kernel(e, i, in, &body);
  cg_buf_free(&body);
  return 0;
}

/* AVGPOOL2D: a thread per output, the window clipped as the C target's general
 * path clips it (the same sums and divisors on its fast path too).
 * AVGPOOL2D_BWD: a thread per input position, adding g / divisor of the windows
 * that hold it in the C target's window order. */
static int emit_avgpool(Ent *e, int i, const Inst *in) {
  const Func *f = e->f;
  int bwd = in->op == IR_AVGPOOL2D_BWD;
  const Type *x = bwd ? ty(f, in->res) : ty(f, in->args[0]), *g = bwd ? ty(f, in->args[0]) : ty(f, in->res);
  DType t = ty(f, in->res)->dtype;
  if (!ir_dtype_is_float(t) || is_literal(f, in->args[0])) return -1;
  const char *ct = cg_ctype(t);
  int64_t H = x->dims[2], W = x->dims[3], OH = g->dims[2], OW = g->dims[3];
  int64_t kh = in->attr[0], kw = in->attr[1], sh = in->attr[2], sw = in->attr[3], ph = in->attr[4], pw = in->attr[5];
  int cip = in->attr[6] != 0;
  Buf win = {0};   /* the window (ctc_oh, ctc_ow): its clipped bounds and divisor */
  cg_printf(&win, "const int64_t ctc_h0 = ctc_oh * %lld - %lld, ctc_w0 = ctc_ow * %lld - %lld;\n", (ll)sh, (ll)ph, (ll)sw,
            (ll)pw);
  cg_printf(&win, "const int64_t ctc_h1 = ctc_h0 + %lld < %lld ? ctc_h0 + %lld : %lld;\n", (ll)kh, (ll)(H + ph), (ll)kh,
            (ll)(H + ph));
  cg_printf(&win, "const int64_t ctc_w1 = ctc_w0 + %lld < %lld ? ctc_w0 + %lld : %lld;\n", (ll)kw, (ll)(W + pw), (ll)kw,
            (ll)(W + pw));
  cg_printf(&win, "const int64_t ctc_ha = ctc_h0 < 0 ? 0 : ctc_h0, ctc_hb = ctc_h1 > %lld ? %lld : ctc_h1;\n", (ll)H, (ll)H);
  cg_printf(&win, "const int64_t ctc_wa = ctc_w0 < 0 ? 0 : ctc_w0, ctc_wb = ctc_w1 > %lld ? %lld : ctc_w1;\n", (ll)W, (ll)W);
  cg_printf(&win, "const int64_t ctc_cnt = %s;\n", cip ? "(ctc_h1 - ctc_h0) * (ctc_w1 - ctc_w0)"
                                                       : "(ctc_hb - ctc_ha) * (ctc_wb - ctc_wa)");
  Buf body = {0};
  kbegin(e, &body);
  const char *xs = cg_ref(&e->c, in->args[0]), *ys = cg_ref(&e->c, in->res);
  cg_printf(&body, loop_head, (ll)ir_numel(ty(f, in->res)));
  cg_puts(&body, " {\n");
  if (!bwd) {
    cg_printf(&body, "    const int64_t ctc_nc = ctc_i / %lld, ctc_oh = ctc_i / %lld %% %lld, ctc_ow = ctc_i %% %lld;\n",
              (ll)(OH * OW), (ll)OW, (ll)OH, (ll)OW);
    for (const char *l = win.s; *l;) {
      const char *nl = strchr(l, '\n');
      cg_printf(&body, "    %.*s\n", (int)(nl - l), l);
      l = nl + 1;
    }
    cg_printf(&body, "    const %s *ctc_xp = %s + ctc_nc * %lld;\n    double ctc_acc = 0;\n", ct, xs, (ll)(H * W));
    cg_printf(&body, "    for (int64_t ctc_ih = ctc_ha; ctc_ih < ctc_hb; ctc_ih++)\n"
                     "      for (int64_t ctc_iw = ctc_wa; ctc_iw < ctc_wb; ctc_iw++) ctc_acc += ctc_xp[ctc_ih * %lld + ctc_iw];\n",
              (ll)W);
    cg_printf(&body, "    %s[ctc_i] = (%s)(ctc_acc / ctc_cnt);\n  }\n", ys, ct);
  } else {
    cg_printf(&body, "    const int64_t ctc_nc = ctc_i / %lld, ctc_p = ctc_i %% %lld, ctc_y = ctc_p / %lld, ctc_x = ctc_p %% %lld;\n",
              (ll)(H * W), (ll)(H * W), (ll)W, (ll)W);
    cg_printf(&body, "    const %s *ctc_gp = %s + ctc_nc * %lld;\n    %s ctc_acc = 0;\n", ct, xs, (ll)(OH * OW), ct);
    cg_printf(&body, "    for (int64_t ctc_oh = 0; ctc_oh < %lld; ctc_oh++) {\n", (ll)OH);
    cg_printf(&body, "      if (ctc_oh * %lld - %lld > ctc_y || ctc_oh * %lld - %lld + %lld <= ctc_y) continue;\n", (ll)sh,
              (ll)ph, (ll)sh, (ll)ph, (ll)kh);
    cg_printf(&body, "      for (int64_t ctc_ow = 0; ctc_ow < %lld; ctc_ow++) {\n", (ll)OW);
    cg_printf(&body, "        if (ctc_ow * %lld - %lld > ctc_x || ctc_ow * %lld - %lld + %lld <= ctc_x) continue;\n", (ll)sw,
              (ll)pw, (ll)sw, (ll)pw, (ll)kw);
    for (const char *l = win.s; *l;) {
      const char *nl = strchr(l, '\n');
      cg_printf(&body, "        %.*s\n", (int)(nl - l), l);
      l = nl + 1;
    }
    cg_puts(&body, "        if (ctc_y < ctc_ha || ctc_y >= ctc_hb || ctc_x < ctc_wa || ctc_x >= ctc_wb) continue;\n");
    cg_printf(&body, "        ctc_acc += ctc_gp[ctc_oh * %lld + ctc_ow] / ctc_cnt;\n      }\n    }\n", (ll)OW);
    cg_printf(&body, "    %s[ctc_i] = ctc_acc;\n  }\n", ys);
  }
  cg_buf_free(&win);
  elementwise_kernel(e, i, in, &body);
  cg_buf_free(&body);
  return 0;
}

/* ---- pooling and embeddings --------------------------------------------------- */

/* MAXPOOL2D: a thread per output, the window scanned as the C target does
 * (first max; NaN wins). MAXPOOL2D_BWD: a thread per input position, adding the
 * gradients of the windows (in the C target's window order) whose max it is. */
static int emit_maxpool(Ent *e, int i, const Inst *in) {
  const Func *f = e->f;
  int bwd = in->op == IR_MAXPOOL2D_BWD;
  const Type *x = ty(f, in->args[0]), *r = ty(f, in->res), *g = bwd ? ty(f, in->args[1]) : r;
  DType t = r->dtype;
  if (!ir_dtype_is_float(t)) return -1;
  const char *ct = cg_ctype(t);
  int64_t H = x->dims[2], W = x->dims[3], OH = g->dims[2], OW = g->dims[3];
  const int64_t *a = in->attr;   /* kernel, stride, padding, dilation */
  Buf body = {0};
  kbegin(e, &body);
  const char *xs = cg_ref(&e->c, in->args[0]), *ys = cg_ref(&e->c, in->res);
  cg_printf(&body, loop_head, (ll)ir_numel(r));
  cg_puts(&body, " {\n");
  /* the window (oh, ow) of image nc: its max's position `at` (-1: none in bounds) */
  Buf scan = {0};
  cg_printf(&scan, "int64_t ctc_at = -1;\n%s ctc_mx = 0;\n", ct);
  cg_printf(&scan, "for (int64_t ctc_kh = 0; ctc_kh < %lld; ctc_kh++) {\n  const int64_t ctc_ih = ctc_oh * %lld - %lld + ctc_kh * %lld;\n"
                   "  if (ctc_ih < 0 || ctc_ih >= %lld) continue;\n", (ll)a[0], (ll)a[2], (ll)a[4], (ll)a[6], (ll)H);
  cg_printf(&scan, "  for (int64_t ctc_kw = 0; ctc_kw < %lld; ctc_kw++) {\n    const int64_t ctc_iw = ctc_ow * %lld - %lld + ctc_kw * %lld;\n"
                   "    if (ctc_iw < 0 || ctc_iw >= %lld) continue;\n", (ll)a[1], (ll)a[3], (ll)a[5], (ll)a[7], (ll)W);
  cg_printf(&scan, "    const %s ctc_v = ctc_xp[ctc_ih * %lld + ctc_iw];\n    if (ctc_at < 0 || ctc_v > ctc_mx || isnan(ctc_v)) ctc_mx = ctc_v, ctc_at = ctc_ih * %lld + ctc_iw;\n"
                   "  }\n}\n", ct, (ll)W, (ll)W);
  if (!bwd) {
    cg_printf(&body, "    const int64_t ctc_nc = ctc_i / %lld, ctc_oh = ctc_i / %lld %% %lld, ctc_ow = ctc_i %% %lld;\n", (ll)(OH * OW),
              (ll)OW, (ll)OH, (ll)OW);
    cg_printf(&body, "    const %s *ctc_xp = %s + ctc_nc * %lld;\n", ct, xs, (ll)(H * W));
    cg_printf(&body, "    {\n");
    for (const char *l = scan.s; *l;) {
      const char *nl = strchr(l, '\n');
      cg_printf(&body, "      %.*s\n", (int)(nl - l), l);
      l = nl + 1;
    }
    /* the C target starts from -INFINITY: a window with no input in bounds gives it */
    cg_printf(&body, "      %s[ctc_i] = ctc_at < 0 ? -INFINITY : ctc_mx;\n    }\n  }\n", ys);
  } else {
    const char *gs = cg_ref(&e->c, in->args[1]);
    cg_printf(&body, "    const int64_t ctc_nc = ctc_i / %lld, ctc_p = ctc_i %% %lld, ctc_ph = ctc_p / %lld, ctc_pw = ctc_p %% %lld;\n", (ll)(H * W),
              (ll)(H * W), (ll)W, (ll)W);
    cg_printf(&body, "    const %s *ctc_xp = %s + ctc_nc * %lld, *ctc_gp = %s + ctc_nc * %lld;\n", ct, xs, (ll)(H * W), gs, (ll)(OH * OW));
    cg_printf(&body, "    %s ctc_acc = 0;\n", ct);
    /* the windows that can contain (ph, pw): oh with oh*s - pad <= ph <= oh*s - pad + (k-1)*d */
    cg_printf(&body, "    int64_t ctc_oh0 = ctc_ph + %lld - %lld, ctc_ow0 = ctc_pw + %lld - %lld;\n", (ll)a[4], (ll)((a[0] - 1) * a[6]),
              (ll)a[5], (ll)((a[1] - 1) * a[7]));
    cg_printf(&body, "    ctc_oh0 = ctc_oh0 <= 0 ? 0 : (ctc_oh0 + %lld) / %lld;\n    ctc_ow0 = ctc_ow0 <= 0 ? 0 : (ctc_ow0 + %lld) / %lld;\n",
              (ll)(a[2] - 1), (ll)a[2], (ll)(a[3] - 1), (ll)a[3]);
    cg_printf(&body, "    for (int64_t ctc_oh = ctc_oh0; ctc_oh < %lld && ctc_oh * %lld - %lld <= ctc_ph; ctc_oh++)\n", (ll)OH, (ll)a[2], (ll)a[4]);
    cg_printf(&body, "      for (int64_t ctc_ow = ctc_ow0; ctc_ow < %lld && ctc_ow * %lld - %lld <= ctc_pw; ctc_ow++) {\n", (ll)OW, (ll)a[3],
              (ll)a[5]);
    for (const char *l = scan.s; *l;) {
      const char *nl = strchr(l, '\n');
      cg_printf(&body, "        %.*s\n", (int)(nl - l), l);
      l = nl + 1;
    }
    cg_printf(&body, "        if (ctc_at == ctc_p) ctc_acc += ctc_gp[ctc_oh * %lld + ctc_ow];\n      }\n", (ll)OW);
    cg_printf(&body, "    %s[ctc_i] = ctc_acc;\n  }\n", ys);
  }
  cg_buf_free(&scan);
  elementwise_kernel(e, i, in, &body);
  cg_buf_free(&body);
  return 0;
}

/* EMBEDDING: a thread per output element. EMBEDDING_BWD: dw zeroed, then a
 * thread per column d adding g's rows at their indices (checked before) in index order
 * (the C target's order; no two threads write the same element). */
static int emit_embedding(Ent *e, int i, const Inst *in) {
  const Func *f = e->f;
  int bwd = in->op == IR_EMBEDDING_BWD;
  ValId ixv = in->args[bwd ? 0 : 1];
  if (is_literal(f, ixv)) return -1;
  const Type *w = bwd ? ty(f, in->res) : ty(f, in->args[0]), *ix = ty(f, ixv);
  int64_t D = w->dims[1], n = ir_numel(ix);
  Buf body = {0};
  kbegin(e, &body);
  const char *is = cg_ref(&e->c, ixv), *ys = cg_ref(&e->c, in->res);
  if (!bwd) {   /* the indices were checked in [0, V) before the kernel */
    const char *ws = cg_ref(&e->c, in->args[0]);
    cg_printf(&body, loop_head, (ll)(n * D));
    cg_printf(&body, " {\n    const int64_t ctc_ix = (int64_t)%s[ctc_i / %lld];\n    %s[ctc_i] = %s[ctc_ix * %lld + ctc_i %% %lld];\n  }\n",
              is, (ll)D, ys, ws, (ll)D, (ll)D);
  } else {
    const char *gs = cg_ref(&e->c, in->args[1]);
    cg_printf(&body, loop_head, (ll)D);
    cg_printf(&body, "\n    for (int64_t ctc_r = 0; ctc_r < %lld; ctc_r++) {\n      const int64_t ctc_ix = (int64_t)%s[ctc_r];\n", (ll)n, is);
    if (in->attr[0]) cg_printf(&body, "      if (ctc_ix == %lld) continue;   /* padding_idx: no gradient */\n", (ll)in->attr[1]);
    cg_printf(&body, "      %s[ctc_ix * %lld + ctc_i] += %s[ctc_r * %lld + ctc_i];\n    }\n", ys, (ll)D, gs, (ll)D);
    e->uses_stream = 1;
    e->c.ref = e->href;   /* the host zeroes dw */
    cg_printf(e->host, "  CTC_CUDA(cudaMemsetAsync(%s, 0, sizeof(%s) * %lld, ctc_st));\n", cg_ref(&e->c, in->res),
              cg_ctype(w->dtype), (ll)ir_numel(w));
    e->c.ref = e->kref;
  }
  Buf com = {0};
  Buf *save = e->c.out;
  unsigned char *ref = e->c.ref;
  e->c.out = &com, e->c.ind = 0, e->c.ref = e->href;
  cg_comment(&e->c, in);
  e->c.out = save, e->c.ref = ref;
  char kname[200], grid[32];
  snprintf(kname, sizeof kname, "%s_%s_i%d", e->g->prefix, e->fname, i);
  int64_t N = bwd ? D : n * D, blocks = (N + ELEM_BLOCK - 1) / ELEM_BLOCK;
  snprintf(grid, sizeof grid, "%lld", (ll)(blocks < 1 ? 1 : blocks > MAX_GRID ? MAX_GRID : blocks));
  kend(e, kname, com.s, &body, grid, ELEM_BLOCK, 0);
  cg_buf_free(&com);
  cg_buf_free(&body);
  return 0;
}

/* ---- any other instruction: the C target's loops, on GPU threads where it can -----------
 * The C emitter writes the instruction with c->target the CUDA renderer: a loop that is all
 * the instruction does (CG_PAR_GRID: pad, pad_bwd, upsample, cumsum, argmax, gather,
 * scatter_add) is a grid-stride loop (cu_par_for), its iterations independent as for OpenMP's
 * threads, and the kernel is launched over the grid its trip count needs. Any other
 * instruction stays a one-thread kernel running the C target's loops. */
static void emit_serial(Ent *e, int i) {
  Buf body = {0}, com = {0};
  kbegin(e, &body);
  e->c.target = &cuda_render;
  e->c.grid_trip = 0;
  cg_emit_inst(&e->c, i);   /* its comment, then its loops */
  CHECK(e->c.par_depth == 0);
  e->c.target = NULL;
  char kname[200], grid[32];
  snprintf(kname, sizeof kname, "%s_%s_i%d", e->g->prefix, e->fname, i);
  if (e->c.grid_trip > 0) {
    int64_t blocks = (e->c.grid_trip + ELEM_BLOCK - 1) / ELEM_BLOCK;
    snprintf(grid, sizeof grid, "%lld", (ll)(blocks > MAX_GRID ? MAX_GRID : blocks));
    cg_puts(&com, "/* the C target's loops, the outer one over GPU threads (grid-stride) */\n");
    kend(e, kname, com.s, &body, grid, ELEM_BLOCK, 0);
  } else {
    cg_puts(&com, "/* one thread: the C target's loops (not yet parallel on the GPU) */\n");
    kend(e, kname, com.s, &body, "1", 1, 0);
  }
  e->c.grid_trip = 0;
  cg_buf_free(&body);
  cg_buf_free(&com);
}

/* ---- one entry ------------------------------------------------------------------- */

static const char *const cuda_names[] = {"blockIdx", "threadIdx", "blockDim", "gridDim", "dim3", "uint3",
                                          "warpSize", "cudaStream_t", "cublasHandle_t", "half", "std", NULL};

static int fail(Gen *g, const Func *f, const Inst *in, const char *what) {
  char where[256];
  cg_where(where, sizeof where, in->loc);
  fprintf(stderr, "%s: error: --target cuda: %s (%s in entry '%s') is not supported yet\n", where[0] ? where : "ctc",
          what, ir_ops[in->op].name, f->name);
  g->err = 1;
  return -1;
}

static int64_t align256(int64_t n) { return (n + 255) / 256 * 256; }

static int emit_entry(Gen *g, int fi, Buf *out) {
  const Program *p = g->p;
  const Func *f = p->funcs.data[fi];
  const FuncPlan *fp = &g->mp->funcs[fi];
  int nv = f->values.len;
  Names ns;
  cg_names_init(&ns, g->prefix);
  for (int k = 0; cuda_names[k]; k++) cg_name(&ns, cuda_names[k]);
  const char **cname = calloc((size_t)nv + 1, sizeof *cname);
  unsigned char *href = calloc((size_t)nv + 1, 1), *kref = calloc((size_t)nv + 1, 1);
  const char **oname = calloc((size_t)f->outputs.len + 1, sizeof *oname);
  const char **sname = calloc((size_t)f->insts.len + 1, sizeof *sname);
  CHECK(cname && href && kref && oname && sname);
  cg_entry_names(f, fp, &ns, cname, oname, sname);
  char fname[128], tb[300];
  cg_ident(fname, sizeof fname, f->name);

  /* prototypes */
  Buf *sig = &g->sig[fi], *dsig = &g->dsig[fi], *doc = &g->doc[fi];
  cg_printf(sig, "int %s_%s(%s_t *m", g->prefix, fname, g->prefix);
  cg_printf(dsig, "int %s_%s_device(%s_t *m", g->prefix, fname, g->prefix);
  cg_printf(doc, "%s(", fname);
  int64_t io = 0;
  for (int k = 0; k < f->inputs.len; k++) {
    ValId v = f->inputs.data[k];
    const Type *t = ty(f, v);
    cg_printf(sig, ", const %s *%s", cg_ctype(t->dtype), cname[v]);
    cg_printf(dsig, ", const %s *%s", cg_ctype(t->dtype), cname[v]);
    cg_printf(doc, "%s%s %s", k ? ", " : "", cname[v], ir_type_str(t, tb, sizeof tb));
    io += align256(ir_numel(t) * (int64_t)ir_dtype_size(t->dtype));
  }
  cg_puts(doc, ") -> ");
  for (int k = 0; k < f->outputs.len; k++) {
    const Type *t = ty(f, f->outputs.data[k]);
    cg_printf(sig, ", %s *%s", cg_ctype(t->dtype), oname[k]);
    cg_printf(dsig, ", %s *%s", cg_ctype(t->dtype), oname[k]);
    cg_printf(doc, "%s%s %s", k ? ", " : "", oname[k], ir_type_str(t, tb, sizeof tb));
    io += align256(ir_numel(t) * (int64_t)ir_dtype_size(t->dtype));
  }
  cg_puts(sig, ")");
  cg_puts(dsig, ")");
  if (io > g->io_bytes) g->io_bytes = io;
  if (f->updates.len) cg_printf(doc, "; updates %d parameter%s", f->updates.len, f->updates.len == 1 ? "" : "s");
  int *order = calloc((size_t)f->updates.len + 1, sizeof *order);
  CHECK(order);
  int rc = cg_update_order(p, f, order);

  Buf body = {0};
  Ent e;
  memset(&e, 0, sizeof e);
  e.g = g, e.fi = fi, e.f = f, e.fname = fname, e.href = href, e.kref = kref, e.host = &body;
  CgFunc c = {.p = p, .f = f, .fp = fp, .cname = cname, .ref = href, .out = &body, .ind = 2, .sname = sname,
              .k = &g->k, .s = g->sched[fi], .ns = &ns};
  e.c = c;
  const KnSchedule *s = g->sched[fi];
  /* distributed builds: the C target's buckets and hooks (dist_c.c) on the device arena; the
   * communicator is rt_nccl.c's, told the stream the kernels run on */
  CgDist dist;
  if (cg_dist_plan_for(&e.c, fname, g->nbuckets, "build with nvcc -DCTC_NCCL, MPI's include and link flags,\n"
                       " * $RT/rt_nccl.c and -lnccl, as `ctc build --target cuda --distributed nccl` does", &dist) < 0)
    rc = -1;
  g->nbuckets += dist.nb;
  dist.arena = "m->dev";
  dist.stream = "m->stream";
  int64_t *checked = calloc((size_t)f->values.len + 1, sizeof *checked);   /* per value: the bound it was checked against */
  CHECK(checked);
  Buf ixsites = {0};   /* the index checks' ctc_index_site rows */
  int nix = 0;
  for (int k = 0; k < s->kernels.len && !rc; k++) {
    const Kernel *kn = &s->kernels.data[k];
    e.c.out = &body, e.c.ref = href, e.c.ind = 2;
    if (k) cg_dist_hooks(&e.c, &dist, k - 1, 1);   /* after kernel k - 1: the buckets it completes start */
    cg_dist_hooks(&e.c, &dist, k, 0);              /* before kernel k: the buckets it reads are waited for */
    for (int i = kn->first; i <= kn->last; i++)   /* the indices it reads lie in range, else the entry stops */
      if (cg_index_needs_check(f, &f->insts.data[i], checked)) {
        const Inst *in = &f->insts.data[i];
        ValId v;
        int64_t bound;
        CHECK(cg_index_operand(f, in, &v, &bound));
        if (is_literal(f, v)) {   /* a constant outside the bound: the entry always fails */
          cg_printf(&body, "  { static const int64_t ctc_v[1] = {%lld};\n    return ctc_index_fail(m->error, sizeof m->error, "
                           "&ctc_ix_%s[%d], ctc_v, 1, %lld);\n  }\n", (ll)def_of(f, v)->fattr, fname, nix, (ll)bound);
          cg_index_site(&ixsites, f, in, "a constant");
        } else {
          cg_printf(&body, "  { /* %s reads %s: every index in [0, %lld) (synchronises) */\n"
                           "    const int ctc_rc = %s_index_check(m, %s, %lld, %lld, &ctc_ix_%s[%d]);\n"
                           "    if (ctc_rc) return ctc_rc;\n  }\n", ir_ops[in->op].name, cname[v], (ll)bound, g->prefix,
                    cg_ref(&e.c, v), (ll)ir_numel(ty(f, v)), (ll)bound, fname, nix);
          cg_index_site(&ixsites, f, in, cname[v]);
        }
        nix++;
        g->ixcheck = 1;
      }
    if (kn->kind == KN_VIEW) {
      cg_emit_kernel(&e.c, k);   /* comments only: views and constants have no code */
      continue;
    }
    if (body.len) cg_puts(&body, "\n");
    if (kn->kind == KN_ELEM || kn->kind == KN_ROW) {
      launch_comments(&e, kn, k, &body);
      emit_fused_kernel(&e, kn, k);
      continue;
    }
    /* KN_OP: its instruction (constants and views have no code); KN_GEMM: the GEMM (cuBLAS),
     * then its epilogue as an elementwise kernel */
    int nep = 0;
    Kernel ep = kn->kind == KN_GEMM ? kn_epilogue(p, f, kn, &nep) : *kn;
    for (int i = kn->first; i <= (nep ? kn->first : kn->last) && !rc; i++) {
      const Inst *in = &f->insts.data[i];
      if (in->op == IR_CONST) continue;
      if (ir_is_view(f, in->res) || s->fold[in->res]) {
        cg_comment(&e.c, in);
        continue;
      }
      e.c.out = &body, e.c.ref = href, e.c.ind = 2;
      cg_comment(&e.c, in);
      if (in->op == IR_MATMUL || in->op == IR_CONV2D || in->op == IR_CONV2D_BWD_INPUT || in->op == IR_CONV2D_BWD_WEIGHT) {
        int r = in->op == IR_MATMUL ? emit_matmul(&e, in) : emit_conv(&e, i, in);
        if (r < 0)
          rc = fail(g, f, in, in->op == IR_MATMUL ? "a GEMM of this dtype or layout" : "a non-float convolution");
        continue;
      }
      if ((in->op == IR_PERMUTE || in->op == IR_BROADCAST || in->op == IR_SLICE) && emit_copy(&e, i, in) == 0) continue;
      if ((in->op == IR_REDUCE_SUM || in->op == IR_REDUCE_MAX) && emit_reduce(&e, i, in) == 0) continue;
      if ((in->op == IR_MAXPOOL2D || in->op == IR_MAXPOOL2D_BWD) && emit_maxpool(&e, i, in) == 0) continue;
      if (in->op == IR_CONCAT && emit_concat(&e, i, in) == 0) continue;
      if ((in->op == IR_UNSLICE || (in->op == IR_RESHAPE && is_literal(f, in->args[0]))) && emit_unslice(&e, i, in) == 0)
        continue;
      if ((in->op == IR_AVGPOOL2D || in->op == IR_AVGPOOL2D_BWD) && emit_avgpool(&e, i, in) == 0) continue;
      if ((in->op == IR_IOTA || in->op == IR_RAND_UNIFORM) && emit_iota_rand(&e, i, in) == 0) continue;
      if ((in->op == IR_EMBEDDING || in->op == IR_EMBEDDING_BWD) && emit_embedding(&e, i, in) == 0) continue;
      emit_serial(&e, i);
      if (g->k.gemm[DT_F32] || g->k.gemm[DT_F64] || g->k.im2col[DT_F32] || g->k.col2im[DT_F32])
        BUG("codegen_cuda: a one-thread kernel calls a host GEMM");
    }
    if (nep && !rc) {
      e.c.out = &body, e.c.ref = href, e.c.ind = 2;
      cg_puts(&body, "\n");
      launch_comments(&e, &ep, k, &body);
      emit_fused_kernel(&e, &ep, k);
    }
  }
  e.c.ref = href;
  e.c.out = &body;
  e.c.ind = 2;
  if (!rc && s->kernels.len) cg_dist_hooks(&e.c, &dist, s->kernels.len - 1, 1);
  if (!rc) cg_dist_hooks(&e.c, &dist, s->kernels.len, 0);

  /* outputs: copied to the caller's device storage */
  if (f->outputs.len && !rc) cg_puts(&body, "\n  /* outputs */\n");
  for (int k = 0; k < f->outputs.len && !rc; k++) {
    ValId v = f->outputs.data[k];
    const Type *t = ty(f, v);
    const char *ct = cg_ctype(t->dtype);
    e.uses_stream = 1;
    if (is_literal(f, v)) {
      Buf lit = {0};
      literal(f, v, &lit);
      cg_printf(&body, "  { static const %s ctc_v = %s; CTC_CUDA(cudaMemcpyAsync(%s, &ctc_v, sizeof ctc_v, "
                       "cudaMemcpyHostToDevice, ctc_st)); }\n", ct, lit.s, oname[k]);
      cg_buf_free(&lit);
    } else {
      cg_printf(&body, "  CTC_CUDA(cudaMemcpyAsync(%s, %s, sizeof(%s) * %lld, cudaMemcpyDeviceToDevice, ctc_st));\n",
                oname[k], cg_ref(&e.c, v), ct, (ll)ir_numel(t));
    }
  }
  int arena = 0;
  if (f->updates.len && !rc) cg_puts(&body, "\n  /* parameter updates (every read above saw the old values) */\n");
  for (int k = 0; k < f->updates.len && !rc; k++) {
    if (order[k] < 0) continue;
    ValId v = f->updates.data[order[k]];
    const Param *pr = &p->params.data[f->update_params.data[order[k]]];
    int64_t off = g->mp->param_offset[f->update_params.data[order[k]]];
    const Type *t = &pr->type;
    char pn[256];
    cg_comment_text(pn, sizeof pn, pr->name);
    arena = 1;
    e.uses_stream = 1;
    if (fp->hints.update_into && fp->hints.update_into[v] == f->update_params.data[order[k]]) {
      cg_printf(&body, "  /* %s := %s: computed in place */\n", pn, cname[v]);
    } else if (is_literal(f, v)) {
      Buf lit = {0};
      cg_literal(&lit, t->dtype, def_of(f, v)->fattr);
      cg_printf(&body, "  { static const %s ctc_v = %s; CTC_CUDA(cudaMemcpyAsync(A + %lld, &ctc_v, sizeof ctc_v, "
                       "cudaMemcpyHostToDevice, ctc_st)); }  /* %s */\n", cg_ctype(t->dtype), lit.s, (ll)off, pn);
      cg_buf_free(&lit);
    } else {
      cg_printf(&body, "  CTC_CUDA(cudaMemcpyAsync(A + %lld, %s, %lld, cudaMemcpyDeviceToDevice, ctc_st));  /* %s := %s */\n",
                (ll)off, cg_ref(&e.c, v), (ll)(ir_numel(t) * (int64_t)ir_dtype_size(t->dtype)), pn, cname[v]);
    }
  }

  /* host declarations of the tensors the host code uses (device addresses) */
  Buf decl = {0};
  for (int v = 0; v < nv && !rc; v++) {
    if (!href[v] || f->values.data[v].kind == V_INPUT) continue;
    const char *ct = cg_ctype(ty(f, v)->dtype);
    const Loc *l = &fp->loc[v];
    if (l->base >= 0) {
      cg_printf(&decl, "  const %s *%s = %s;\n", ct, cname[v], cname[f->inputs.data[l->base]]);
      continue;
    }
    CHECK(l->base == LOC_ARENA);
    arena = 1;
    cg_printf(&decl, "  %s *%s = (%s *)(A + %lld);  /* %s */\n", ct, cname[v], ct, (ll)l->offset,
              ir_type_str(ty(f, v), tb, sizeof tb));
  }
  for (int i = 0; i < f->insts.len && !rc; i++) {
    if (!sname[i]) continue;
    const Inst *in = &f->insts.data[i];
    arena = 1;
    cg_printf(&decl, "  %s *%s = (%s *)(A + %lld);  /* column scratch of %s */\n", cg_ctype(ty(f, in->res)->dtype), sname[i],
              cg_ctype(ty(f, in->res)->dtype), (ll)fp->scratch[i], cname[in->res]);
  }
  if (e.uses_arena) arena = 1;

  if (!rc) {
    char where[256];
    cg_where(where, sizeof where, f->loc);
    if (nix) cg_printf(out, "static const ctc_index_site ctc_ix_%s[] = {\n%s};\n\n", fname, ixsites.s);
    if (dist.tables.len) cg_puts(out, dist.tables.s);
    cg_printf(out, "/* %s%s%s: device pointers, asynchronous on m->stream */\n", doc->s, where[0] ? "  -- " : "", where);
    cg_printf(out, "%s {\n", dsig->s);
    cg_puts(out, "  if (!m || !m->dev");
    for (int k = 0; k < f->inputs.len; k++) cg_printf(out, " || !%s", cname[f->inputs.data[k]]);
    for (int k = 0; k < f->outputs.len; k++) cg_printf(out, " || !%s", oname[k]);
    cg_puts(out, ") return CTC_ERR_ARG;\n");
    cg_printf(out, "  if (m->dev_stale) {   /* the host copy was handed out (%s_params): it may be newer */\n"
                   "    CTC_CUDA(cudaMemcpyAsync(m->dev, m->arena, %s_PARAMS_BYTES, cudaMemcpyHostToDevice, m->stream));\n"
                   "    m->dev_stale = 0;\n  }\n", g->prefix, g->upper);
    if (f->updates.len) cg_puts(out, "  m->host_stale = 1;   /* the step updates the parameters on the device */\n");
    if (arena) cg_puts(out, "  unsigned char *A = m->dev;\n");
    if (e.uses_stream) cg_puts(out, "  cudaStream_t ctc_st = m->stream;\n");
    if (e.uses_blas) cg_puts(out, "  cublasHandle_t ctc_blas = m->blas;\n");
    if (e.uses_dnn) cg_printf(out, "#ifdef CTC_HAVE_CUDNN\n  const %s_dnn_t *ctc_dnn = (const %s_dnn_t *)m->dnn;\n#endif\n", g->prefix, g->prefix);
    if (decl.len) cg_puts(out, decl.s);
    if (body.len) cg_printf(out, "\n%s", body.s);
    cg_puts(out, "  return CTC_OK;\n}\n\n");

    /* the host-pointer entry */
    cg_printf(out, "/* %s: host pointers, through the page-locked m->pinned; synchronises */\n", doc->s);
    cg_printf(out, "%s {\n", sig->s);
    cg_puts(out, "  if (!m || !m->dev");
    for (int k = 0; k < f->inputs.len; k++) cg_printf(out, " || !%s", cname[f->inputs.data[k]]);
    for (int k = 0; k < f->outputs.len; k++) cg_printf(out, " || !%s", oname[k]);
    cg_puts(out, ") return CTC_ERR_ARG;\n");
    int64_t o = 0;
    Buf call = {0};
    cg_printf(&call, "  const int ctc_rc = %s_%s_device(m", g->prefix, fname);
    for (int k = 0; k < f->inputs.len; k++) {
      ValId v = f->inputs.data[k];
      const Type *t = ty(f, v);
      int64_t bytes = ir_numel(t) * (int64_t)ir_dtype_size(t->dtype);
      cg_printf(out, "  memcpy(m->pinned + %lld, %s, %lld);\n", (ll)o, cname[v], (ll)bytes);
      cg_printf(out, "  CTC_CUDA(cudaMemcpyAsync(m->io + %lld, m->pinned + %lld, %lld, cudaMemcpyHostToDevice, m->stream));\n",
                (ll)o, (ll)o, (ll)bytes);
      cg_printf(&call, ", (const %s *)(m->io + %lld)", cg_ctype(t->dtype), (ll)o);
      o += align256(bytes);
    }
    int64_t o_out = o;
    for (int k = 0; k < f->outputs.len; k++) {
      const Type *t = ty(f, f->outputs.data[k]);
      cg_printf(&call, ", (%s *)(m->io + %lld)", cg_ctype(t->dtype), (ll)o);
      o += align256(ir_numel(t) * (int64_t)ir_dtype_size(t->dtype));
    }
    cg_puts(&call, ");\n  if (ctc_rc) return ctc_rc;\n");
    cg_puts(out, call.s);
    o = o_out;
    Buf back = {0};   /* the outputs out of m->pinned once the stream is done */
    for (int k = 0; k < f->outputs.len; k++) {
      const Type *t = ty(f, f->outputs.data[k]);
      int64_t bytes = ir_numel(t) * (int64_t)ir_dtype_size(t->dtype);
      cg_printf(out, "  CTC_CUDA(cudaMemcpyAsync(m->pinned + %lld, m->io + %lld, %lld, cudaMemcpyDeviceToHost, m->stream));\n",
                (ll)o, (ll)o, (ll)bytes);
      cg_printf(&back, "  memcpy(%s, m->pinned + %lld, %lld);\n", oname[k], (ll)o, (ll)bytes);
      o += align256(bytes);
    }
    cg_printf(out, "  CTC_CUDA(cudaStreamSynchronize(m->stream));\n%s  return CTC_OK;\n}\n\n", back.s ? back.s : "");
    cg_buf_free(&back);
    cg_buf_free(&call);
  }
  cg_dist_free(&dist);
  cg_buf_free(&ixsites);
  free(checked);
  cg_buf_free(&decl);
  cg_buf_free(&body);
  cg_names_free(&ns);
  free(cname);
  free(href);
  free(kref);
  free(oname);
  free(sname);
  free(order);
  return rc;
}

/* ---- helpers written once into the file --------------------------------------------- */

static const char gemm_text[] =
    "/* Row-major C[M,N] = op(A)[M,K] op(B)[K,N] (+ beta C) through column-major cuBLAS:\n"
    " * C^T = op(B)^T op(A)^T, so the operands swap. count > 1: strided batches. */\n"
    "static cublasStatus_t ctc_gemm_$S(cublasHandle_t h, int ta, int tb, int64_t M, int64_t N, int64_t K, const $T *a,\n"
    "                                  int64_t lda, int64_t sa, const $T *b, int64_t ldb, int64_t sb, int beta, $T *c,\n"
    "                                  int64_t ldc, int64_t sc, int64_t count) {\n"
    "  const $T one = 1, bv = ($T)beta;\n"
    "  const cublasOperation_t oa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, ob = tb ? CUBLAS_OP_T : CUBLAS_OP_N;\n"
    "  if (count == 1)\n"
    "    return $G(h, ob, oa, (int)N, (int)M, (int)K, &one, b, (int)ldb, a, (int)lda, &bv, c, (int)ldc);\n"
    "  return $GStridedBatched(h, ob, oa, (int)N, (int)M, (int)K, &one, b, (int)ldb, sb, a, (int)lda, sa, &bv, c,\n"
    "                          (int)ldc, sc, (int)count);\n"
    "}\n\n";

static const char grid_text[] =
    "/* Blocks of 256 threads for n elements (grid-stride loops cover the rest). */\n"
    "static unsigned ctc_grid(int64_t n) {\n"
    "  const int64_t b = (n + 255) / 256;\n"
    "  return (unsigned)(b < 1 ? 1 : b > 65535 ? 65535 : b);\n"
    "}\n\n";

static const char im2col_text[] =
    "/* ns images x[s] (stride xs) unfolded: col[s*cs + ((c*KH + kh)*KW + kw)*ldc + oh*OW + ow] =\n"
    " * x[s][c][oh*sh - ph + kh*dh][ow*sw - pw + kw*dw], 0 in the padding. */\n"
    "static __global__ void ctc_im2col_$S(const $T *x, int64_t xs, int64_t ns, int64_t C, int64_t H, int64_t W,\n"
    "                                    int64_t KH, int64_t KW, int64_t sh, int64_t sw, int64_t ph, int64_t pw,\n"
    "                                    int64_t dh, int64_t dw, int64_t OH, int64_t OW, $T *col, int64_t ldc,\n"
    "                                    int64_t cs) {\n"
    "  const int64_t ohw = OH * OW, ckk = C * KH * KW, n = ns * ckk * ohw;\n"
    "  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)blockDim.x * gridDim.x) {\n"
    "    const int64_t q = i % ohw, r = i / ohw % ckk, s = i / (ohw * ckk);\n"
    "    const int64_t ow = q % OW, oh = q / OW, kw = r % KW, kh = r / KW % KH, c = r / (KW * KH);\n"
    "    const int64_t ih = oh * sh - ph + kh * dh, iw = ow * sw - pw + kw * dw;\n"
    "    col[s * cs + r * ldc + q] = ih >= 0 && ih < H && iw >= 0 && iw < W ? x[s * xs + (c * H + ih) * W + iw] : ($T)0;\n"
    "  }\n"
    "}\n\n";

static const char col2im_text[] =
    "/* The adjoint of im2col for ns images: x[s][c][ih][iw] = the sum over the window\n"
    " * positions (kh, then kw: the C target's order) that read it of col[s*cs + ...]. */\n"
    "static __global__ void ctc_col2im_$S(const $T *col, int64_t cs, int64_t ns, int64_t C, int64_t H, int64_t W,\n"
    "                                    int64_t KH, int64_t KW, int64_t sh, int64_t sw, int64_t ph, int64_t pw,\n"
    "                                    int64_t dh, int64_t dw, int64_t OH, int64_t OW, $T *x, int64_t xs) {\n"
    "  const int64_t n = ns * C * H * W;\n"
    "  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)blockDim.x * gridDim.x) {\n"
    "    const int64_t iw = i % W, ih = i / W % H, c = i / (H * W) % C, s = i / (C * H * W);\n"
    "    $T acc = 0;\n"
    "    for (int64_t kh = 0; kh < KH; kh++) {\n"
    "      const int64_t th = ih + ph - kh * dh;\n"
    "      if (th < 0 || th % sh) continue;\n"
    "      const int64_t oh = th / sh;\n"
    "      if (oh >= OH) continue;\n"
    "      for (int64_t kw = 0; kw < KW; kw++) {\n"
    "        const int64_t tw = iw + pw - kw * dw;\n"
    "        if (tw < 0 || tw % sw) continue;\n"
    "        const int64_t ow = tw / sw;\n"
    "        if (ow >= OW) continue;\n"
    "        acc += col[s * cs + ((c * KH + kh) * KW + kw) * (OH * OW) + oh * OW + ow];\n"
    "      }\n"
    "    }\n"
    "    x[s * xs + (c * H + ih) * W + iw] = acc;\n"
    "  }\n"
    "}\n\n";

static void instantiate(Buf *b, const char *text, DType t) {
  for (const char *s = text; *s; s++) {
    if (s[0] == '$' && s[1] == 'T') cg_puts(b, cg_ctype(t)), s++;
    else if (s[0] == '$' && s[1] == 'S') cg_puts(b, cg_dt_suffix(t)), s++;
    else if (s[0] == '$' && s[1] == 'G') cg_puts(b, t == DT_F64 ? "cublasDgemm" : "cublasSgemm"), s++;
    else cg_printf(b, "%c", *s);
  }
}

/* The C target's helpers, callable from kernels: every `static` function
 * becomes `static __host__ __device__`. */
static void device_helpers(Buf *b, Kernels *k) {
  k->simd = 0;
  Buf t = {0};
  cg_emit_kernels(&t, k);
  for (const char *s = t.s; s && *s;) {
    const char *nl = strchr(s, '\n');
    size_t n = nl ? (size_t)(nl - s) + 1 : strlen(s);
    if (!strncmp(s, "static ", 7)) cg_printf(b, "static __host__ __device__ %.*s", (int)(n - 7), s + 7);
    else cg_printf(b, "%.*s", (int)n, s);
    s += n;
  }
  cg_buf_free(&t);
}

/* ---- files ------------------------------------------------------------------------ */

static const char *basename_of(const char *path) {
  const char *s = path ? strrchr(path, '/') : NULL;
  return s ? s + 1 : path ? path : "?";
}

static void emit_header(Gen *g, FILE *h, const char *src) {
  const char *P = g->prefix, *U = g->upper;
  const MemPlan *mp = g->mp;
  char cls[256];
  cg_comment_text(cls, sizeof cls, g->p->class_name ? g->p->class_name : "?");
  fprintf(h, "/* %s.h - generated by ctc from %s (class %s), CUDA target. Do not edit. */\n", P, src, cls);
  fprintf(h, "#ifndef CTC_GENERATED_%s_H\n#define CTC_GENERATED_%s_H\n\n", U, U);
  fprintf(h, "#include <stddef.h>\n#include <stdint.h>\n");
  fprintf(h, "#ifdef CTC_CUDA_EMULATE\n#include \"ctc_cuda_emu.h\"   /* runtime_min/cuda_emu: CUDA on the CPU */\n"
             "#ifdef CTC_HAVE_CUDNN\n#include \"ctc_cudnn_emu.h\"\n#endif\n"
             "#else\n#include <cuda_runtime.h>\n#include <cublas_v2.h>\n"
             "#ifdef CTC_HAVE_CUDNN   /* convolutions through cuDNN (ctc build defines it when cuDNN is installed) */\n"
             "#include <cudnn.h>\n#endif\n#endif\n#include \"ctc_rt.h\"\n\n");
  fprintf(h, "#ifdef __cplusplus\nextern \"C\" {\n#endif\n\n");
  fprintf(h, "/* Arena bytes: parameters (%lld), then the activations of the running entry (%lld). */\n",
          (ll)mp->params_bytes, (ll)(mp->arena_bytes - mp->params_bytes));
  fprintf(h, "#define %s_ARENA_BYTES ((size_t)%lld)\n#define %s_PARAMS_BYTES ((size_t)%lld)\n\n", U, (ll)mp->arena_bytes, U,
          (ll)mp->params_bytes);
  fprintf(h, "/* A model instance on the device. */\n");
  fprintf(h, "typedef struct %s_t {\n"
             "  unsigned char *arena;   /* host: the parameters' host copy (load/save, the host-pointer entries) */\n"
             "  size_t arena_bytes;\n"
             "  unsigned char *dev;     /* device: parameters, then activations (one cudaMalloc, with io) */\n"
             "  unsigned char *io;      /* device: the host-pointer entries' inputs and outputs */\n"
             "  unsigned char *pinned;  /* host, page-locked: those inputs and outputs on their way */\n"
             "  cudaStream_t stream;    /* where everything runs (default 0) */\n"
             "  cublasHandle_t blas;\n"
             "  void *dnn;              /* cuDNN: handle, descriptors, algorithms (builds with CTC_HAVE_CUDNN) */\n"
             "  char error[512];        /* why the last entry failed: an index out of range (CTC_ERR_INDEX) */\n"
             "  int host_stale;         /* the device's parameters are newer (training steps): %s_params downloads */\n"
             "  int dev_stale;          /* the host copy may be newer (%s_params handed it out): the next entry uploads */\n"
             "} %s_t;\n\n", P, P, P, P);
  fprintf(h, "size_t %s_arena_bytes(void);\n", P);
  fprintf(h, "/* Takes the host `arena` (at least %s_ARENA_BYTES bytes, 64-byte aligned) for the\n"
             " * parameters' host copy, initialises them as the model does, allocates the device\n"
             " * arena (one cudaMalloc: nothing is allocated after) and uploads them. */\n", U);
  fprintf(h, "int %s_init(%s_t *m, void *arena, size_t bytes);\n", P, P);
  fprintf(h, "int %s_set_stream(%s_t *m, cudaStream_t stream);\n", P, P);
  fprintf(h, "void %s_free(%s_t *m);   /* the device arena and the cuBLAS handle */\n", P, P);
  fprintf(h, "/* The parameters live on the device: training steps update them there and the host copy\n"
             " * m->arena is brought up to date only when asked for. %s_params: that host copy, up to\n"
             " * date, to read or write (the next entry uploads it again); NULL after a CUDA error. */\n", P);
  fprintf(h, "unsigned char *%s_params(%s_t *m);\n", P, P);
  fprintf(h, "/* Parameters by their PyTorch state_dict names (through the host copy). */\n");
  fprintf(h, "int %s_load(%s_t *m, const char *safetensors_path);\n", P, P);
  fprintf(h, "int %s_save(%s_t *m, const char *path);\n", P, P);
  fprintf(h, "/* Why the last load or save (or an index check) failed, with its detail; \"\" when none. */\n");
  fprintf(h, "const char *%s_error(const %s_t *m);\n\n", P, P);
  fprintf(h, "/* Entry points: <entry>(host pointers; synchronous) and <entry>_device (device\n"
             " * pointers; queued on m->stream). CTC_OK or an error code (ctc_strerror). */\n");
  for (int fi = 0; fi < g->p->funcs.len; fi++)
    fprintf(h, "/* %s */\n%s;\n%s;\n", g->doc[fi].s, g->sig[fi].s, g->dsig[fi].s);
  fprintf(h, "\n/* The model as the runtime sees it (ctc_main: the host-pointer entries). */\n");
  fprintf(h, "extern const ctc_model_desc %s_desc;\n\n", P);
  fprintf(h, "#ifdef __cplusplus\n}\n#endif\n#endif\n");
}

static void emit_api(Gen *g, Buf *b) {
  const char *P = g->prefix, *U = g->upper;
  cg_printf(b, "int %s_init(%s_t *m, void *arena, size_t bytes) {\n", P, P);
  if (g->p->distributed)   /* rt_nccl.c picks this rank's GPU: before anything is allocated on one */
    cg_puts(b, "  (void)ctc_comm_world();  /* a distributed build: this rank's GPU (its index on its node) */\n");
  cg_printf(b, "  if (!m) return CTC_ERR_ARG;\n  %s_host_t h;\n  const int rc = %s_host_init(&h, arena, bytes);\n"
               "  if (rc) return rc;\n  memset(m, 0, sizeof *m);\n  m->arena = h.arena;\n  m->arena_bytes = h.arena_bytes;\n",
            P, P);
  cg_printf(b, "  CTC_CUDA(cudaMalloc((void **)&m->dev, %s_DEVICE_BYTES));\n  m->io = m->dev + %s_IO_OFFSET;\n", U, U);
  cg_printf(b, "  CTC_CUDA(cudaMallocHost((void **)&m->pinned, %s_DEVICE_BYTES - %s_IO_OFFSET));\n", U, U);
  cg_puts(b, "  CTC_CUBLAS(cublasCreate(&m->blas));\n");
  if (g->dnn.n) cg_printf(b, "#ifdef CTC_HAVE_CUDNN\n  {\n    const int ctc_rc = %s_dnn_init(m);\n    if (ctc_rc) return ctc_rc;\n  }\n#endif\n", P);
  if (g->opt && g->opt->tf32) cg_puts(b, "  CTC_CUBLAS(cublasSetMathMode(m->blas, CUBLAS_TF32_TENSOR_OP_MATH));   /* --tf32 */\n");
  cg_printf(b, "  CTC_CUDA(cudaMemcpy(m->dev, m->arena, %s_PARAMS_BYTES, cudaMemcpyHostToDevice));\n  return CTC_OK;\n}\n\n", U);
  cg_printf(b, "int %s_set_stream(%s_t *m, cudaStream_t stream) {\n  if (!m || !m->dev) return CTC_ERR_ARG;\n"
               "  m->stream = stream;\n  CTC_CUBLAS(cublasSetStream(m->blas, stream));\n", P, P);
  if (g->dnn.n) cg_printf(b, "#ifdef CTC_HAVE_CUDNN\n  CTC_CUDNN(cudnnSetStream(((%s_dnn_t *)m->dnn)->h, stream));\n#endif\n", P);
  cg_puts(b, "  return CTC_OK;\n}\n\n");
  cg_printf(b, "void %s_free(%s_t *m) {\n  if (!m || !m->dev) return;\n", P, P);
  if (g->dnn.n) cg_printf(b, "#ifdef CTC_HAVE_CUDNN\n  %s_dnn_free(m);\n#endif\n", P);
  cg_puts(b, "  cublasDestroy(m->blas);\n  cudaFree(m->dev);\n  cudaFreeHost(m->pinned);\n  m->dev = m->io = m->pinned = NULL;\n}\n\n");
  cg_printf(b, "/* Downloads the parameters when the device has newer ones. */\n"
               "static int %s_params_pull(%s_t *m) {\n  if (m->host_stale) {\n", P, P);
  cg_printf(b, "    CTC_CUDA(cudaMemcpyAsync(m->arena, m->dev, %s_PARAMS_BYTES, cudaMemcpyDeviceToHost, m->stream));\n"
               "    CTC_CUDA(cudaStreamSynchronize(m->stream));\n    m->host_stale = 0;\n  }\n  return CTC_OK;\n}\n\n", U);
  cg_printf(b, "unsigned char *%s_params(%s_t *m) {\n  if (!m || !m->dev || %s_params_pull(m) != CTC_OK) return NULL;\n"
               "  m->dev_stale = 1;\n  return m->arena;\n}\n\n", P, P, P);
  cg_printf(b, "int %s_load(%s_t *m, const char *safetensors_path) {\n", P, P);
  cg_puts(b, "  if (!m || !m->arena || !m->dev || !safetensors_path) return CTC_ERR_ARG;\n");
  cg_printf(b, "  ctc_error err;\n  err.msg[0] = 0;\n  const int rc = ctc_model_load(&%s_desc, m, safetensors_path, &err);   /* through %s_params */\n"
               "  if (ctc_error_set(m->error, sizeof m->error, rc, \"%%s\", err.msg[0] ? err.msg : ctc_strerror(rc)))\n"
               "    return rc;\n", P, P);
  cg_printf(b, "  CTC_CUDA(cudaMemcpyAsync(m->dev, m->arena, %s_PARAMS_BYTES, cudaMemcpyHostToDevice, m->stream));\n"
               "  CTC_CUDA(cudaStreamSynchronize(m->stream));\n  m->dev_stale = 0;\n  return CTC_OK;\n}\n\n", U);
  cg_printf(b, "int %s_save(%s_t *m, const char *path) {\n", P, P);
  cg_puts(b, "  if (!m || !m->arena || !m->dev || !path) return CTC_ERR_ARG;\n");
  cg_printf(b, "  ctc_error err;\n  err.msg[0] = 0;\n  const int rc = ctc_model_save(&%s_desc, m, path, &err);   /* through %s_params */\n"
               "  return ctc_error_set(m->error, sizeof m->error, rc, \"%%s\", err.msg[0] ? err.msg : ctc_strerror(rc));\n"
               "}\n\n", P, P);
  cg_printf(b, "const char *%s_error(const %s_t *m) { return m ? m->error : \"\"; }\n\n", P, P);
}

int cg_cuda_emit(const Program *p, const MemPlan *plan, KnSchedule *const *sched, const CudaOptions *opt, FILE *cu_out,
                 FILE *h_out, const char *h_name) {
  static const char *const api[] = {"arena_bytes", "init", "load", "save", "desc", "error", "t", "set_stream", "free", "host",
                                    "params", NULL};
  Gen g;
  memset(&g, 0, sizeof g);
  g.p = p;
  g.mp = plan;
  g.sched = sched;
  g.opt = opt;
  cg_ident(g.prefix, sizeof g.prefix, p->model_name ? p->model_name : "net");
  for (int i = 0; g.prefix[i]; i++)
    g.upper[i] = (char)(g.prefix[i] >= 'a' && g.prefix[i] <= 'z' ? g.prefix[i] - 'a' + 'A' : g.prefix[i]);
  for (int i = 0; i < p->funcs.len; i++) {
    char a[128], b[160];
    cg_ident(a, sizeof a, p->funcs.data[i]->name);
    for (int k = 0; api[k]; k++)
      if (!strcmp(a, api[k]) || (!strncmp(a, "host_", 5))) {
        fprintf(stderr, "ctc: error: entry '%s' clashes with the generated %s_%s\n", a, g.prefix, a);
        return -1;
      }
    for (int j = 0; j < p->funcs.len; j++) {
      cg_ident(b, sizeof b, p->funcs.data[j]->name);
      size_t n = strlen(b);
      if ((j < i && !strcmp(a, b)) || (strlen(a) == n + 7 && !strncmp(a, b, n) && !strcmp(a + n, "_device"))) {
        fprintf(stderr, "ctc: error: entry '%s' clashes with another entry (or its %s_%s_device)\n", a, g.prefix, b);
        return -1;
      }
    }
  }
  g.sig = calloc((size_t)p->funcs.len + 1, sizeof(Buf));
  g.dsig = calloc((size_t)p->funcs.len + 1, sizeof(Buf));
  g.doc = calloc((size_t)p->funcs.len + 1, sizeof(Buf));
  CHECK(g.sig && g.dsig && g.doc);
  Buf entries = {0}, init = {0}, data = {0}, desc = {0}, helpers = {0}, api_b = {0}, api_pre = {0};
  int rc = 0;
  for (int fi = 0; fi < p->funcs.len && !rc; fi++) rc = emit_entry(&g, fi, &entries);
  if (!rc) {
    char hp[80];
    snprintf(hp, sizeof hp, "%s_host", g.prefix);
    cg_emit_host_init(&data, &init, &g.k, p, plan, hp);
    cg_emit_desc_for(&desc, p, plan, g.prefix, 1);
    emit_api(&g, &api_b);
    device_helpers(&helpers, &g.k);
    for (int t = 0; t < DT_COUNT; t++) {
      if (g.gemm[t]) instantiate(&helpers, gemm_text, (DType)t);
      if (g.im2col[t]) instantiate(&helpers, im2col_text, (DType)t);
      if (g.col2im[t]) instantiate(&helpers, col2im_text, (DType)t);
    }
    if (g.grid) cg_puts(&helpers, grid_text);
    cg_dnn_support(&api_pre, &g.dnn, g.prefix, opt && opt->tf32);

    char src[1024], stem[256], cls[256];
    cg_comment_text(src, sizeof src, ir_source_name(p));
    cg_comment_text(cls, sizeof cls, p->class_name ? p->class_name : "?");
    snprintf(stem, sizeof stem, "%s", basename_of(h_name));
    char *dot = strrchr(stem, '.');
    if (dot) *dot = 0;
    const char *P = g.prefix, *U = g.upper;
    FILE *c = cu_out;
    fprintf(c, "/* %s.cu - generated by ctc from %s (class %s), CUDA target. Do not edit.\n *\n", stem, src, cls);
    fprintf(c, " * Entry points (each also as <entry>_device, on device pointers):\n");
    for (int fi = 0; fi < p->funcs.len; fi++) fprintf(c, " *   %s\n", g.doc[fi].s);
    fprintf(c, " * Device arena: %lld bytes = parameters %lld + activations %lld, then %lld bytes of entry I/O.\n *\n",
            (ll)plan->arena_bytes, (ll)plan->params_bytes, (ll)(plan->arena_bytes - plan->params_bytes), (ll)g.io_bytes);
    fprintf(c, " * Build a program around it with the runtime (RT = ctc's runtime_min folder):\n"
               " *   nvcc -O2 -DCTC_MAIN %s.cu -I$RT $RT/rt_*.c -lcublas -lz -o %s\n"
               " * or without a GPU (CUDA emulated on the CPU, kernels block by block):\n"
               " *   g++ -x c++ -O1 -fopenmp -DCTC_CUDA_EMULATE -DCTC_MAIN %s.cu -I$RT -I$RT/cuda_emu\n"
               " *       (with $RT/rt_*.c compiled as C) -lz -o %s\n"
               " * Usage: ./%s --help%s */\n", stem, stem, stem, stem, stem,
               p->distributed ? "\n * Distributed (the training entries all-reduce their gradients with NCCL): add\n"
                                " *   -DCTC_NCCL $RT/rt_nccl.c, MPI's flags (mpicc --showme) and -lnccl, as `ctc build\n"
                                " *   --target cuda --distributed nccl` does; run under mpirun, one rank per GPU"
                              : "");
    fprintf(c, "#include \"%s\"\n#include \"ctc_rt.h\"\n\n", h_name);
    fprintf(c, "#include <math.h>\n#include <stdint.h>\n#include <stdio.h>\n#include <stdlib.h>\n#include <string.h>\n\n");
    fprintf(c, "#define restrict __restrict__\n/* the C target's loops run as they are inside one-thread kernels */\n"
               "#define CTC_OMP_FOR\n#define CTC_OMP_SIMD\n#define CTC_OMP_FOR_SIMD\n\n");
    fprintf(c, "/* Every CUDA and cuBLAS call is checked; the message names this file and line. */\n"
               "#define CTC_CUDA(call)                                                                    \\\n"
               "  do {                                                                                \\\n"
               "    const cudaError_t ctc_e = (call);                                                 \\\n"
               "    if (ctc_e != cudaSuccess) {                                                       \\\n"
               "      fprintf(stderr, \"%%s:%%d: %%s: %%s\\n\", __FILE__, __LINE__, #call, cudaGetErrorString(ctc_e)); \\\n"
               "      return CTC_ERR_DEVICE;                                                          \\\n"
               "    }                                                                                 \\\n"
               "  } while (0)\n"
               "#define CTC_CUBLAS(call)                                                                  \\\n"
               "  do {                                                                                \\\n"
               "    const cublasStatus_t ctc_s = (call);                                              \\\n"
               "    if (ctc_s != CUBLAS_STATUS_SUCCESS) {                                             \\\n"
               "      fprintf(stderr, \"%%s:%%d: %%s: cuBLAS status %%d\\n\", __FILE__, __LINE__, #call, (int)ctc_s);  \\\n"
               "      return CTC_ERR_DEVICE;                                                          \\\n"
               "    }                                                                                 \\\n"
               "  } while (0)\n"
               "/* A kernel launch (sync: the kernel uses __syncthreads), checked. */\n"
               "#ifdef CTC_CUDA_EMULATE\n"
               "#define CTC_LAUNCH_(k, grid, block, sync, st, ...) ctc_emu_launch((grid), (block), (sync), [&] { k(__VA_ARGS__); })\n"
               "#else\n"
               "#define CTC_LAUNCH_(k, grid, block, sync, st, ...) k<<<(grid), (block), 0, (st)>>>(__VA_ARGS__)\n"
               "#endif\n"
               "#define CTC_LAUNCH(k, grid, block, sync, st, ...)                                         \\\n"
               "  do {                                                                                \\\n"
               "    CTC_LAUNCH_(k, grid, block, sync, st, __VA_ARGS__);                               \\\n"
               "    const cudaError_t ctc_e = cudaGetLastError();                                     \\\n"
               "    if (ctc_e != cudaSuccess) {                                                       \\\n"
               "      fprintf(stderr, \"%%s:%%d: launch of %%s: %%s\\n\", __FILE__, __LINE__, #k, cudaGetErrorString(ctc_e)); \\\n"
               "      return CTC_ERR_DEVICE;                                                          \\\n"
               "    }                                                                                 \\\n"
               "  } while (0)\n\n");
    fprintf(c, "/* the device allocation: the arena, then the entries' I/O */\n");
    fprintf(c, "#define %s_IO_OFFSET ((size_t)%lld)\n#define %s_DEVICE_BYTES ((size_t)%lld)\n", U,
            (ll)align256(plan->arena_bytes), U, (ll)(align256(plan->arena_bytes) + (g.io_bytes ? g.io_bytes : 256) + 256));
    fprintf(c, "#define %s_FLAG_OFFSET ((size_t)%lld)   /* the index checks' flag (an int) */\n\n", U,
            (ll)(align256(plan->arena_bytes) + (g.io_bytes ? g.io_bytes : 256)));
    if (helpers.len) fputs(helpers.s, c);
    if (g.kern.len) fputs(g.kern.s, c);
    fprintf(c, "/* ---- parameters: the C target's init, on the host copy ---- */\n\n");
    fprintf(c, "typedef struct %s_host_t {\n  unsigned char *arena;\n  size_t arena_bytes;\n} %s_host_t;\n", P, P);
    fprintf(c, "#define %s_HOST_ARENA_BYTES %s_ARENA_BYTES\n#define %s_host_desc %s_desc\n\n", U, U, P, P);
    if (data.len) fputs(data.s, c);
    fputs(init.s, c);
    if (g.ixcheck) {   /* the index checks: a flag word after the I/O, set by any index out of range */
      fprintf(c, "/* ---- index checks: every value of ix[n] in [0, bound), else CTC_ERR_INDEX and the report ---- */\n\n");
      fprintf(c, "static __global__ void %s_index_kernel(const int64_t *ix, int64_t n, int64_t bound, int *flag) {\n", P);
      fprintf(c, "  for (int64_t ctc_i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; ctc_i < n; ctc_i += (int64_t)blockDim.x * gridDim.x)\n"
                 "    if ((uint64_t)ix[ctc_i] >= (uint64_t)bound) *flag = 1;   /* every writer writes 1 */\n}\n\n");
      fprintf(c, "static int %s_index_check(%s_t *m, const int64_t *ix, int64_t n, int64_t bound, const ctc_index_site *site) {\n"
                 "  int *flag = (int *)(m->dev + %s_FLAG_OFFSET), *seen = (int *)(m->pinned + (%s_FLAG_OFFSET - %s_IO_OFFSET));\n"
                 "  const int64_t blocks = (n + %d) / %d;\n"
                 "  CTC_CUDA(cudaMemsetAsync(flag, 0, sizeof(int), m->stream));\n"
                 "  CTC_LAUNCH(%s_index_kernel, blocks < %d ? blocks : %d, %d, 0, m->stream, ix, n, bound, flag);\n"
                 "  CTC_CUDA(cudaMemcpyAsync(seen, flag, sizeof(int), cudaMemcpyDeviceToHost, m->stream));\n"
                 "  CTC_CUDA(cudaStreamSynchronize(m->stream));\n"
                 "  if (!*seen) return CTC_OK;\n"
                 "  int64_t *h = (int64_t *)malloc(sizeof(int64_t) * (size_t)n);   /* the report names the first bad element */\n"
                 "  if (h && cudaMemcpy(h, ix, sizeof(int64_t) * (size_t)n, cudaMemcpyDeviceToHost) != cudaSuccess) free(h), h = NULL;\n"
                 "  const int rc = ctc_index_fail(m->error, sizeof m->error, site, h, h ? n : 0, bound);\n"
                 "  free(h);\n  return rc;\n}\n\n",
              P, P, U, U, U, ELEM_BLOCK - 1, ELEM_BLOCK, P, MAX_GRID, MAX_GRID, ELEM_BLOCK);
    }
    if (api_pre.len) fputs(api_pre.s, c);
    fputs(api_b.s, c);
    if (entries.len) fputs(entries.s, c);
    fputs(desc.s, c);
    fprintf(c, "\n#ifdef CTC_MAIN\nint main(int argc, char **argv) { return ctc_main(argc, argv, &%s_desc); }\n#endif\n", P);
    emit_header(&g, h_out, src);
  }
  for (int fi = 0; fi < p->funcs.len; fi++) {
    cg_buf_free(&g.sig[fi]);
    cg_buf_free(&g.dsig[fi]);
    cg_buf_free(&g.doc[fi]);
  }
  free(g.sig);
  free(g.dsig);
  free(g.doc);
  cg_buf_free(&entries);
  cg_buf_free(&init);
  cg_buf_free(&data);
  cg_buf_free(&desc);
  cg_buf_free(&helpers);
  cg_buf_free(&api_b);
  cg_buf_free(&api_pre);
  cg_buf_free(&g.dnn.rows);
  cg_buf_free(&g.kern);
  if (rc) return -1;
  return ferror(cu_out) || ferror(h_out) ? -1 : 0;
}
