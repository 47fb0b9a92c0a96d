/* entry_c.c - one entry of either target: the walk over its schedule (cg_emit_entry).
 *
 * Both targets write an entry the same way, in this order: the names (inputs, outputs,
 * parameters, results, scratch), the one-line description and the parameter list, the
 * order of the parameters' write-backs (update_order), distributed builds' gradient hooks,
 * then per kernel its index checks and its code, the outputs copied out and the parameters
 * written back. What a target writes its own way is its CgEntryOps table (cg_int.h):
 * emit_c.c's C functions, codegen_cuda/emit_cuda.c's host code that launches kernels.
 *
 * The C text also has structures of its own, which the walk keeps where the target allows
 * them (CgEntry.structure) and no distributed hook sits between kernels: time loops over
 * repeated steps (kernels/reroll.c), an optimizer's updates as one loop over a table
 * (kernels/foreach.c), runs of per-step views as one comment, and each user module's kernels
 * as a function of its own (kernels/scope.c), named by the module's path and phase. */
#include <stdlib.h>
#include <string.h>
#include "cg_int.h"

typedef long long ll;

/* ---- entry functions ---------------------------------------------------------- */

static int is_result(const Func *f, ValId v) {
  const Value *val = &f->values.data[v];
  return val->kind == V_INST && val->def >= 0 && val->def < f->insts.len && f->insts.data[val->def].res == v;
}

/* The value whose storage v uses (itself unless v is a view). */
static ValId root_of(const Func *f, ValId v) {
  while (ir_is_view(f, v)) v = f->insts.data[f->values.data[v].def].args[0];
  return v;
}

/* An arena byte range [lo, hi) of value v (-1: a scratch buffer). */
typedef struct Span64 {
  int64_t lo, hi;
  ValId v;
} Span64;

static int by_lo(const void *a, const void *b) {
  const Span64 *x = a, *y = b;
  return x->lo != y->lo ? (x->lo > y->lo ? 1 : -1) : (x->v > y->v) - (x->v < y->v);
}

/* Whether f's k-th update was computed into its parameter's bytes (PlanHints.update_into). */
static int in_place_update(const Func *f, const FuncPlan *fp, int k) {
  return fp->hints.update_into && fp->hints.update_into[f->updates.data[k]] == f->update_params.data[k];
}

/* For each activation v: whether it may be a function-wide restrict pointer: it
 * has no views, and no other tensor or scratch buffer of f overlaps its bytes
 * (with a run-time batch: at the sizes the plan was made for). One sort of the
 * byte ranges by start, then for each range: an earlier one that ends past its
 * start, or a later non-empty one that starts before its end (O(n log n)). */
static unsigned char *exclusive_all(const Func *f, const FuncPlan *fp) {
  if (f->batch_ref) f = f->batch_ref;
  int nv = f->values.len, ni = f->insts.len, n = 0;
  unsigned char *ok = calloc((size_t)nv + 1, 1), *viewed = calloc((size_t)nv + 1, 1);
  Span64 *sp = malloc(sizeof *sp * (size_t)(2 * ni + 1));
  int *pos = malloc(sizeof(int) * (size_t)(nv + 1));
  int64_t *maxend = malloc(sizeof(int64_t) * (size_t)(2 * ni + 2));
  CHECK(ok && viewed && sp && pos && maxend);
  for (int v = 0; v < nv; v++) pos[v] = -1;
  for (int i = 0; i < ni; i++) {
    const Inst *in = &f->insts.data[i];
    if (fp->scratch[i] >= 0) sp[n++] = (Span64){fp->scratch[i], fp->scratch[i] + ir_scratch_bytes(f, in), -1};
    ValId w = in->res;
    if (fp->loc[w].base != LOC_ARENA) continue;
    if (ir_is_view(f, w)) {
      viewed[root_of(f, w)] = 1;
      continue;
    }
    const Type *t = &f->values.data[w].type;
    int64_t w0 = fp->loc[w].offset;
    sp[n++] = (Span64){w0, w0 + ir_numel(t) * (int64_t)ir_dtype_size(t->dtype), w};
  }
  qsort(sp, (size_t)n, sizeof *sp, by_lo);
  maxend[0] = INT64_MIN;
  for (int k = 0; k < n; k++) {
    maxend[k + 1] = sp[k].hi > maxend[k] ? sp[k].hi : maxend[k];
    if (sp[k].v >= 0 && pos[sp[k].v] < 0) pos[sp[k].v] = k;
  }
  for (int k = 0; k < n; k++) {
    ValId v = sp[k].v;
    if (v < 0 || pos[v] != k) continue;
    int excl = !viewed[v] && !(fp->hints.update_into && fp->hints.update_into[v] >= 0) && maxend[k] <= sp[k].lo;
    for (int j = k + 1; j < n && excl && sp[j].lo < sp[k].hi; j++) excl = sp[j].v == v || sp[j].lo >= sp[j].hi;
    ok[v] = (unsigned char)excl;
  }
  free(viewed);
  free(sp);
  free(pos);
  free(maxend);
  return ok;
}

/* The parameter whose storage v is (itself or through views), or -1. */
static int param_of(const Func *f, ValId v) {
  const Value *r = &f->values.data[root_of(f, v)];
  return r->kind == V_PARAM ? r->index : -1;
}

/* The order in which f's updates are written back (indices into f->updates;
 * -1 marks an identity update, which writes nothing). Returns 0, or -1 after
 * printing why the updates cannot be ordered. */
static int update_order(const Program *p, const Func *f, int *order) {
  int n = f->updates.len, k = 0;
  unsigned char *done = calloc((size_t)n + 1, 1);
  CHECK(done);
  for (int i = 0; i < n; i++)
    for (int j = 0; j < i; j++)
      if (f->update_params.data[i] == f->update_params.data[j]) {
        fprintf(stderr, "ctc: error: entry '%s' updates parameter '%s' twice\n", f->name,
                p->params.data[f->update_params.data[i]].name);
        free(done);
        return -1;
      }
  for (int i = 0; i < n; i++)
    if (param_of(f, f->updates.data[i]) == f->update_params.data[i]) done[i] = 1;   /* p := p */
  /* Values that are parameters: each before the update that overwrites its parameter. */
  for (int progress = 1; progress;) {
    progress = 0;
    for (int i = 0; i < n; i++) {
      if (done[i] || param_of(f, f->updates.data[i]) < 0) continue;
      int blocked = 0;
      for (int j = 0; j < n && !blocked; j++)
        blocked = j != i && !done[j] && param_of(f, f->updates.data[j]) == f->update_params.data[i];
      if (blocked) continue;
      order[k++] = i;
      done[i] = 1;
      progress = 1;
    }
  }
  for (int i = 0; i < n; i++)
    if (!done[i] && param_of(f, f->updates.data[i]) >= 0) {
      fprintf(stderr, "ctc: error: entry '%s': the updates of parameter '%s' and others form a cycle (each reads "
                      "another's old value)\n", f->name, p->params.data[f->update_params.data[i]].name);
      free(done);
      return -1;
    }
  for (int i = 0; i < n; i++)
    if (!done[i]) order[k++] = i;
  while (k < n) order[k++] = -1;
  free(done);
  return 0;
}

/* The C names of an entry, in the order both targets give them out: inputs, outputs (oname),
 * parameters, instruction results, then conv scratch buffers (sname). */
static void entry_names(const Func *f, const FuncPlan *fp, Names *ns, const char **cname, const char **oname,
                        const char **sname) {
  for (int k = 0; k < f->inputs.len; k++) cname[f->inputs.data[k]] = cg_name(ns, f->values.data[f->inputs.data[k]].name);
  for (int k = 0; k < f->outputs.len; k++) oname[k] = cg_name(ns, f->out_names.data[k]);
  for (int v = 0; v < f->values.len; v++)
    if (f->values.data[v].kind == V_PARAM) cname[v] = cg_name(ns, f->values.data[v].name);
  /* gradients first, then the terms of gradients (reverse.c's name_terms): grad_x is x's whole
   * gradient, grad_x_term, grad_x_term_1, ... the values on the way to it */
  for (int pass = 0; pass < 2; pass++)
    for (int i = 0; i < f->insts.len; i++) {
      const Inst *in = &f->insts.data[i];
      const Value *r = &f->values.data[in->res];
      if (in->op == IR_CONST) continue;
      int own = strcmp(r->name, "grad") != 0;   /* a name of its own (fc1_weight_grad) */
      int term = !own && !r->adjoint_of && r->term_of;
      if (term != pass) continue;
      char hint[160];
      if (term && cname[r->term_of - 1]) snprintf(hint, sizeof hint, "grad_%s_term", cname[r->term_of - 1]);
      else if (!own && r->adjoint_of) snprintf(hint, sizeof hint, "grad_%s", cname[r->adjoint_of - 1]);
      else snprintf(hint, sizeof hint, "%s", r->name);
      cname[in->res] = cg_name(ns, hint);   /* what it is named after is named before: defined before */
    }
  for (int i = 0; i < f->insts.len; i++)
    if (fp->scratch[i] >= 0) {
      char hint[128];
      snprintf(hint, sizeof hint, "%s_col", cname[f->insts.data[i].res]);
      sname[i] = cg_name(ns, hint);
    }
}

/* The weights loop li's GEMMs read, packed before it into the pack region (kernels/prepack.c):
 * each a pointer named after the weight and one ctc_gemm_pack_f32; the GEMMs of the loop's step
 * find them in c->packed. */
static void loop_packs(CgFunc *c, const KnPacks *P, int li) {
  for (int q = 0; P && q < P->packs.len; q++) {
    const KnPack *pk = &P->packs.data[q];
    if (pk->loop != li) continue;
    const char *b = cg_ref(c, pk->b), *name = cg_name(c->ns, arena_printf(c->p->arena, "%s_panels", b));
    cg_printf(c->out, "  /* %s%s's panels for the steps' GEMMs, packed once (ctc_gemm_pack_f32) */\n", b, pk->tb ? "^T" : "");
    cg_printf(c->out, "  float *%s = (float *)(A + %lld);\n", name, (ll)(c->fp->pack_at + pk->off));
    cg_printf(c->out, "  ctc_gemm_pack_f32(%d, %d, %lld, %lld, %s, %lld, %s, %lld);\n", pk->ta, pk->tb, (ll)pk->N,
              (ll)pk->K, b, (ll)pk->ldb, name, (ll)pk->ldp);
    c->packed[pk->inst] = (CgPacked){pk, name};
    c->k->gemm[DT_F32] = c->k->matmul[DT_F32] = c->k->gemm_pk = 1;
  }
}

/* Opens loop li of L: its comment and `for`, and the names of the values its step moves,
 * `(name + t * d)`, which cg_ref gives while c->over is set (until the loop's last kernel). */
static void loop_begin(CgFunc *c, const Func *f, const KnLoops *L, const KnPacks *P, int li, const char *tv,
                       const char **over) {
  const KnLoop *lp = &L->loops.data[li];
  char where[256] = "";
  for (int k = lp->first; k < lp->first + lp->len && !where[0]; k++)
    for (int i = c->s->kernels.data[k].first; i <= c->s->kernels.data[k].last && !where[0]; i++)
      cg_where(where, sizeof where, f->insts.data[i].loc);
  cg_printf(c->out, "\n  /* for %s in range(%d): %s%sa step of %d kernel%s (steps %d..%d of %d) */\n", tv, lp->count,
            where, where[0] ? ", " : "", lp->len, lp->len == 1 ? "" : "s", lp->step0, lp->step0 + lp->count - 1,
            lp->steps);
  loop_packs(c, P, li);
  cg_printf(c->out, "  for (int64_t %s = 0; %s < %d; %s++) {", tv, tv, lp->count, tv);
  for (int k = lp->first; k < lp->first + lp->len; k++)
    for (int i = c->s->kernels.data[k].first; i <= c->s->kernels.data[k].last; i++) {
      const Inst *in = &f->insts.data[i];
      for (int a = 0; a <= in->nargs; a++) {
        ValId v = a < in->nargs ? in->args[a] : in->res;
        for (int r = 0; r < 2; r++, v = kn_root(f, c->s, v)) {
          int64_t d = L->move[v];
          if (d && c->cname[v])
            over[v] = arena_printf(c->p->arena, "(%s %c %s * %lld)", c->cname[v], d < 0 ? '-' : '+', tv,
                                   (ll)(d < 0 ? -d : d));
          else over[v] = NULL;
        }
      }
    }
  c->over = over;
  c->ind += 2;
}

int cg_entry_decls(CgEntry *e, const unsigned char *ref, const unsigned char *sref, const unsigned char *excl, Buf *decl) {
  CgFunc *c = &e->c;
  const Program *p = c->p;
  int looped = e->looped;
  const Func *f = c->f;
  const FuncPlan *fp = c->fp;
  const char **cname = c->cname, **sname = c->sname;
  int nv = f->values.len, arena = 0;
  char tb[300];
  for (int pass = 0; pass < 2; pass++)
    for (int v = 0; v < nv; v++) {
      const Value *val = &f->values.data[v];
      if (!ref[v] || val->kind == V_INPUT || (val->kind == V_PARAM) != (pass == 0)) continue;
      CHECK(val->kind == V_PARAM || is_result(f, v));
      const char *ct = cg_ctype(val->type.dtype);
      const Loc *l = &fp->loc[v];
      ValId r = root_of(f, v), sr = kn_root(f, c->s, v);
      /* a folded slice or permute (or a reshape of one): a pointer to its root's storage, read
       * through strides and an offset; declared with the root's type (all it may read) */
      int strided = sr != kn_root(f, NULL, v);
      int view = r != v || strided, readonly = f->values.data[r].kind != V_INST;
      /* parameters are written at the end of an entry with updates: not restrict there */
      int written = f->updates.len && f->values.data[r].kind == V_PARAM;
      /* a loop over steps reaches a step's tensors through another's pointer: no restrict on activations */
      const char *rs = (readonly && !written) || (!view && !readonly && excl[v] && !looped) ? "restrict " : "";
      ir_type_str(strided ? &f->values.data[sr].type : &val->type, tb, sizeof tb);
      if (l->base >= 0) {
        cg_printf(decl, "  const %s *%s%s = %s;  /* %s, view of %s */\n", ct, rs, cname[v],
                  cname[f->inputs.data[l->base]], tb, cname[f->inputs.data[l->base]]);
        continue;
      }
      CHECK(l->base == LOC_ARENA);
      const char *cq = readonly || view ? "const " : "";
      Buf ad = {0};   /* A + offset; with embedded weights, a parameter's const array */
      arena |= cg_fs_addr(&ad, p, e->mp, e->copt, l->offset);
      cg_printf(decl, "  %s%s *%s%s = (%s%s *)(%s);  /* %s", cq, ct, rs, cname[v], cq, ct, ad.s, tb);
      cg_buf_free(&ad);
      char pn[256];
      if (val->kind == V_PARAM) cg_printf(decl, " %s", cg_comment_text(pn, sizeof pn, p->params.data[val->index].name));
      if (fp->hints.update_into && fp->hints.update_into[v] >= 0)
        cg_printf(decl, " %s's new value", cg_comment_text(pn, sizeof pn, p->params.data[fp->hints.update_into[v]].name));
      if (strided) cg_printf(decl, ", the storage of %s, read through strides", cname[sr]);
      else if (view) cg_printf(decl, ", view of %s", cname[r]);
      cg_puts(decl, " */\n");
    }
  for (int i = 0; i < f->insts.len; i++) {
    if (!sname[i] || (sref && !sref[i])) continue;
    const Inst *in = &f->insts.data[i];
    const Type *r = &f->values.data[in->res].type;
    ConvGeom cg;
    kn_conv_geom(f, in, &cg);
    Buf ad = {0};
    arena |= cg_fs_addr(&ad, p, e->mp, e->copt, fp->scratch[i]);
    char wino[96] = "";   /* (either branch of the C: linalg_c.c's emit_conv2d_wino) */
    if (ir_conv_wino(f, in))
      snprintf(wino, sizeof wino, "Winograd's transforms (%lld tiles a block) or ", (ll)ir_conv_wino_block(f, in));
    cg_printf(decl, "  %s *%s = (%s *)(%s);  /* %s[%lld] column scratch of %s: %s%lld images' [%lld,%lld]%s */\n",
              cg_ctype(r->dtype), sname[i], cg_ctype(r->dtype), ad.s, ir_dtype_name(r->dtype),
              (ll)(ir_scratch_bytes(f, in) / (int64_t)ir_dtype_size(r->dtype)), cname[in->res], wino,
              (ll)ir_conv_slots(f, in), (ll)cg.ckk, (ll)cg.ohw,
              ir_conv_slots(f, in) == 1 ? "" : in->op == IR_CONV2D ? " and outputs" : " and output gradients");
    cg_buf_free(&ad);
  }
  return arena;
}

/* ---- per-module functions (kernels/scope.c decides which kernels go in which) ---------- */

#define MODFN_DEPTH 16
typedef struct ModFrame {
  int scope, phase;
  int fails;                   /* its body can stop the entry (an index check): returns an int */
  const char *name;
  Buf *body;
  unsigned char *ref, *sref;   /* per value, per instruction: what its body uses (cg_ref, scratch) */
  unsigned char *inputs;       /* per entry input: passed to it */
} ModFrame;
typedef struct ModFns {
  ModFrame fr[MODFN_DEPTH + 1];   /* [0] the entry; [1..depth] the module functions open, outermost first */
  int depth;
  ModFrame *done;                 /* the functions closed, in order: each before its caller */
  int ndone, capdone;
  Names *fns;                     /* the file's module functions (Gen.fns) */
} ModFns;

static const char *phase_word(int ph) { return ph == PH_BACKWARD ? "backward" : ph == PH_OPTIMIZER ? "optimizer" : "forward"; }

/* Closes the innermost module function: a call of it into its caller; its text is written
 * once all are closed (modfn_text). */
static void modfn_close(CgFunc *c, ModFns *mf) {
  ModFrame *fr = &mf->fr[mf->depth], *pa = &mf->fr[mf->depth - 1];
  const Func *f = c->f;
  fr->inputs = calloc((size_t)f->inputs.len + 1, 1);
  CHECK(fr->inputs);
  for (int v = 0; v < f->values.len; v++)   /* the inputs it reads, or reads views of */
    if (fr->ref[v] && f->values.data[v].kind != V_INPUT && c->fp->loc[v].base >= 0) fr->inputs[c->fp->loc[v].base] = 1;
  Buf call = {0};
  cg_printf(&call, "%s(m", fr->name);
  if (f->batch_max) cg_puts(&call, ", batch");
  for (int k = 0; k < f->inputs.len; k++) {
    ValId v = f->inputs.data[k];
    fr->inputs[k] |= fr->ref[v];
    if (!fr->inputs[k]) continue;
    cg_printf(&call, ", %s", c->cname[v]);
    pa->ref[v] = 1;
  }
  cg_puts(&call, ")");
  if (pa->body->len) cg_puts(pa->body, "\n");
  if (fr->fails) {
    cg_printf(pa->body, "  {\n    const int ctc_rc = %s;\n    if (ctc_rc) return ctc_rc;\n  }\n", call.s);
    pa->fails = 1;
  } else {
    cg_printf(pa->body, "  %s;\n", call.s);
  }
  cg_buf_free(&call);
  if (mf->ndone == mf->capdone) {
    mf->capdone = mf->capdone ? 2 * mf->capdone : 16;
    mf->done = realloc(mf->done, sizeof *mf->done * (size_t)mf->capdone);
    CHECK(mf->done);
  }
  mf->done[mf->ndone++] = *fr;
  mf->depth--;
}

/* The closed functions' text (each before its caller) into out, and frees them. A tensor
 * two functions use is not restrict in either: one calls the other while its pointer lives. */
static void modfn_text(CgEntry *e, ModFns *mf, unsigned char *excl, Buf *out) {
  CgFunc *c = &e->c;
  const Func *f = c->f;
  int nv = f->values.len;
  unsigned char *nref = calloc((size_t)nv + 1, 1), *ex = calloc((size_t)nv + 1, 1);
  CHECK(nref && ex);
  for (int d = -1; d < mf->ndone; d++) {
    const unsigned char *r = d < 0 ? mf->fr[0].ref : mf->done[d].ref;
    for (int v = 0; v < nv; v++) nref[v] += r[v] && nref[v] < 2;
  }
  for (int v = 0; v < nv; v++) ex[v] = excl[v] && nref[v] <= 1;
  for (int d = 0; d < mf->ndone; d++) {
    ModFrame *fr = &mf->done[d];
    Buf decl = {0};
    int arena = cg_entry_decls(e, fr->ref, fr->sref, ex, &decl);
    const IrScope *sc = &c->p->scopes.data[fr->scope];
    cg_printf(out, "/* %s%s%s%s: %s of entry %s */\n", sc->path, sc->cls ? " (" : "", sc->cls ? sc->cls : "",
              sc->cls ? ")" : "", phase_word(fr->phase),
              f->name);
    cg_printf(out, "static %s %s(%s_t *m", fr->fails ? "int" : "void", fr->name, e->prefix);
    if (f->batch_max) cg_puts(out, ", int64_t batch");   /* the entry's run-time batch */
    for (int k = 0; k < f->inputs.len; k++)
      if (fr->inputs[k])
        cg_printf(out, ", const %s *%s", cg_ctype(f->values.data[f->inputs.data[k]].type.dtype),
                  c->cname[f->inputs.data[k]]);
    cg_puts(out, ") {\n");
    if (arena) cg_puts(out, "  unsigned char *A = m->arena;\n");
    else if (!fr->fails) cg_puts(out, "  (void)m;\n");
    if (f->batch_max) cg_puts(out, "  (void)batch;   /* not every function's loops depend on it */\n");
    if (decl.len) cg_puts(out, decl.s);
    if (fr->body->len) cg_printf(out, "%s%s", decl.len || arena ? "\n" : "", fr->body->s);
    if (fr->fails) cg_puts(out, "  return CTC_OK;\n");
    cg_puts(out, "}\n\n");
    cg_buf_free(&decl);
    cg_buf_free(fr->body);
    free(fr->body);
    free(fr->ref);
    free(fr->sref);
    free(fr->inputs);
  }
  free(mf->done);
  memcpy(excl, ex, (size_t)nv + 1);   /* the entry's own declarations too */
  free(nref);
  free(ex);
}

/* Makes the module function of scope sc (phase ph) the one kernels are written into: closes
 * those it is not inside, opens those it is inside of (named <entry>_<path>_<phase>). */
static void modfn_enter(CgFunc *c, ModFns *mf, int sc, int ph) {
  int chain[MODFN_DEPTH];
  int n = kn_scope_chain(c->p, sc, chain, MODFN_DEPTH), keep = 0;
  while (keep < mf->depth && keep < n && mf->fr[keep + 1].scope == chain[keep] && mf->fr[keep + 1].phase == ph) keep++;
  while (mf->depth > keep) modfn_close(c, mf);
  for (; mf->depth < n; mf->depth++) {
    ModFrame *fr = &mf->fr[mf->depth + 1];
    memset(fr, 0, sizeof *fr);
    fr->scope = chain[mf->depth];
    fr->phase = ph;
    char hint[400], nm[400];
    snprintf(hint, sizeof hint, "%s_%s_%s", c->f->name, c->p->scopes.data[fr->scope].path, phase_word(ph));
    cg_ident(nm, sizeof nm, hint);   /* train_step_h_0_attn_forward */
    const char *name = cg_name(mf->fns, nm);   /* unique in the file, and no local of the entry */
    while (cg_name_given(c->ns, name)) name = cg_name(mf->fns, nm);
    fr->name = cg_name(c->ns, name);
    fr->body = calloc(1, sizeof *fr->body);
    fr->ref = calloc((size_t)c->f->values.len + 1, 1);
    fr->sref = calloc((size_t)c->f->insts.len + 1, 1);
    CHECK(fr->body && fr->ref && fr->sref);
  }
  c->out = mf->fr[mf->depth].body;
  c->ref = mf->fr[mf->depth].ref;
}


/* ---- the walk ------------------------------------------------------------------------- */

int cg_kernel_has_code(const Func *f, const Kernel *kn) {
  if (kn->kind == KN_VIEW) return 0;
  for (int i = kn->first; i <= kn->last; i++)
    if (f->insts.data[i].op != IR_CONST) return 1;
  return 0;
}

/* The description ("forward(x f32[4,8]) -> y f32[4,2]") and the parameter list both targets'
 * prototypes share (", const float *x, float *y"). */
static void entry_proto(CgEntry *e) {
  const Func *f = e->f;
  char tb[300];
  cg_printf(e->doc, "%s(", e->fname);
  if (f->batch_max)   /* a run-time batch: its size, the shapes below are at batch_max */
    cg_printf(e->doc, "batch: 1..%lld; shapes at batch = %lld: ", (ll)f->batch_max, (ll)f->batch_max);
  for (int k = 0; k < f->inputs.len; k++) {
    ValId v = f->inputs.data[k];
    const Type *t = &f->values.data[v].type;
    cg_printf(&e->params, ", const %s *%s", cg_ctype(t->dtype), e->cname[v]);
    cg_printf(e->doc, "%s%s %s", k ? ", " : "", e->cname[v], ir_type_str(t, tb, sizeof tb));
  }
  cg_puts(e->doc, ") -> ");
  for (int k = 0; k < f->outputs.len; k++) {
    const Type *t = &f->values.data[f->outputs.data[k]].type;
    cg_printf(&e->params, ", %s *%s", cg_ctype(t->dtype), e->oname[k]);
    cg_printf(e->doc, "%s%s %s", k ? ", " : "", e->oname[k], ir_type_str(t, tb, sizeof tb));
  }
  if (f->updates.len) cg_printf(e->doc, "; updates %d parameter%s", f->updates.len, f->updates.len == 1 ? "" : "s");
}

/* The kernels, in order: index checks, the target's code, distributed hooks; in the C text
 * also time loops, optimizer tables, view runs and module functions where allowed. */
static void entry_kernels(CgEntry *e) {
  const Program *p = e->p;
  const Func *f = e->f;
  CgFunc *c = &e->c;
  int nv = f->values.len, nk = e->s->kernels.len;
  unsigned st = e->dist.nb ? 0 : e->structure;   /* a distributed entry's hooks are per kernel */
  /* repeated steps as loops (kernels/reroll.c decides them on the kernels and the plan) */
  KnLoops *loops = st & CG_EN_REROLL ? kn_reroll_loops(p->arena, f, c->s, e->fp) : NULL;
  int looped = loops && loops->loops.len, li = 0;
  const char **over = looped ? calloc((size_t)nv + 1, sizeof *over) : NULL;
  const char *tv = looped ? cg_name(&e->ns, "t") : NULL;
  CHECK(!looped || over);
  /* the weights the loops' GEMMs read, packed once before each loop: where the plan holds them */
  KnPacks *packs = looped && e->fp->pack_bytes ? kn_prepacks(p->arena, f, c->s, loops) : NULL;
  if (packs && packs->bytes > e->fp->pack_bytes) packs = NULL;
  c->packed = packs ? calloc((size_t)f->insts.len + 1, sizeof *c->packed) : NULL;
  CHECK(!packs || c->packed);
  e->looped = looped;
  if (e->copt) e->excl = exclusive_all(f, e->fp);   /* the C text's restrict pointers */
  /* an optimizer's same update of each parameter as one loop over a table (kernels/foreach.c) */
  KnForeachs *fe = st & CG_EN_FOREACH ? kn_foreach(p->arena, f, c->s, e->fp) : NULL;
  int fj = 0;
  /* each user module's kernels as a function (kernels/scope.c) */
  int grouped = p->scopes.len > 1 && (st & CG_EN_MODFNS);
  int *ksc = grouped ? calloc((size_t)nk + 1, sizeof *ksc) : NULL;
  int *kph = grouped ? calloc((size_t)nk + 1, sizeof *kph) : NULL;
  e->sref = grouped ? calloc((size_t)f->insts.len + 1, 1) : NULL;
  e->grouped = grouped;
  ModFns mf;
  memset(&mf, 0, sizeof mf);
  mf.fr[0].body = &e->body, mf.fr[0].ref = e->ref, mf.fr[0].sref = e->sref, mf.fns = e->fns;
  if (grouped) {
    CHECK(ksc && kph && e->sref);
    kn_kernel_scopes(p, f, c->s, looped ? loops : NULL, ksc, kph);
  }
  for (int k = 0; k < nk && !e->rc; k++) {
    const Kernel *kn = &c->s->kernels.data[k];
    for (; fe && fj < fe->runs.len && fe->runs.data[fj].first < k; fj++) {}
    if (grouped && !c->over) {
      if (fe && fj < fe->runs.len && k == fe->runs.data[fj].first) modfn_enter(c, &mf, 0, PH_OPTIMIZER);
      else if (ksc[k] >= 0) modfn_enter(c, &mf, ksc[k], kph[k]);
    }
    if (grouped)   /* the convolutions' column scratch is declared where they run */
      for (int i = kn->first; i <= kn->last; i++) mf.fr[mf.depth].sref[i] |= e->sname[i] != NULL;
    int nix0 = e->nix;
    if (fe && fj < fe->runs.len && k == fe->runs.data[fj].first && !c->over &&
        !(looped && li < loops->loops.len && loops->loops.data[li].first < k + fe->runs.data[fj].count)) {
      cg_emit_foreach(c, &fe->runs.data[fj]);
      k += fe->runs.data[fj].count - 1;
      continue;
    }
    if (looped && li < loops->loops.len && k == loops->loops.data[li].first) loop_begin(c, f, loops, packs, li, tv, over);
    if (!c->over && (st & CG_EN_VIEWRUN)) {   /* a run of per-step slices of one array: one comment */
      int nview = cg_emit_view_run(c, k, looped && li < loops->loops.len ? loops->loops.data[li].first : nk);
      if (nview) {
        k += nview - 1;
        continue;
      }
    }
    cg_dist_hooks(c, &e->dist, k, 0);
    for (int i = kn->first; i <= kn->last; i++)   /* the indices it reads lie in range, else the entry stops */
      if (cg_index_needs_check(f, &f->insts.data[i], e->checked)) {
        e->ops->index_check(e, &f->insts.data[i]);
        e->nix++;
      }
    e->ops->kernel(e, k);
    cg_dist_hooks(c, &e->dist, k, 1);
    if (e->nix > nix0) mf.fr[mf.depth].fails = 1;   /* an index check: the function returns its status */
    if (looped && li < loops->loops.len && k == loops->loops.data[li].first + loops->loops.data[li].len - 1) {
      const KnLoop *lp = &loops->loops.data[li++];
      c->ind -= 2;
      c->over = NULL;
      memset(over, 0, sizeof *over * (size_t)(nv + 1));
      if (c->packed) memset(c->packed, 0, sizeof *c->packed * (size_t)(f->insts.len + 1));
      cg_puts(c->out, "  }\n");
      k = lp->first + lp->count * lp->len - 1;   /* the later steps ran in the loop */
    }
  }
  while (mf.depth > 0) modfn_close(c, &mf);
  c->out = &e->body, c->ref = e->ref;
  free(ksc);
  free(kph);
  free(over);
  free(c->packed);
  c->packed = NULL;
  cg_dist_hooks(c, &e->dist, nk, 0);
  if (grouped) {   /* the functions' text, once the entry's own references are complete (after the updates) */
    e->mf_done = malloc(sizeof mf);
    CHECK(e->mf_done);
    memcpy(e->mf_done, &mf, sizeof mf);
  }
}

/* The outputs copied out, then the parameters' write-backs (those computed in place were
 * stored into their tensors' bytes: counted, not listed). */
static void entry_tail(CgEntry *e) {
  const Func *f = e->f;
  Buf *b = &e->body;
  if (f->outputs.len) {
    if (b->len) cg_puts(b, "\n");
    cg_puts(b, "  /* outputs */\n");
  }
  for (int k = 0; k < f->outputs.len; k++) e->ops->output(e, k, f->outputs.data[k]);
  if (f->updates.len) {
    int inplace = 0, n = 0;
    for (int k = 0; k < f->updates.len; k++) {
      n += e->order[k] >= 0;
      inplace += e->order[k] >= 0 && in_place_update(f, e->fp, e->order[k]);
    }
    if (b->len) cg_puts(b, "\n");
    cg_puts(b, "  /* parameter updates (every read above saw the old values)");
    if (inplace) cg_printf(b, ": %s%d computed in place above", inplace == n ? "all " : "", inplace);
    cg_puts(b, " */\n");
  }
  for (int k = 0; k < f->updates.len; k++) {
    if (e->order[k] < 0 || in_place_update(f, e->fp, e->order[k])) continue;
    e->arena = 1;
    e->ops->update(e, f->updates.data[e->order[k]], f->update_params.data[e->order[k]]);
  }
}

int cg_emit_entry(CgEntry *e, Buf *out) {
  const Program *p = e->p;
  const Func *f = e->f = p->funcs.data[e->fi];
  e->fp = &e->mp->funcs[e->fi];
  int nv = f->values.len;
  cg_names_init(&e->ns, e->prefix);
  for (int k = 0; e->ops->reserved && e->ops->reserved[k]; k++) cg_name(&e->ns, e->ops->reserved[k]);
  e->cname = calloc((size_t)nv + 1, sizeof *e->cname);
  e->ref = calloc((size_t)nv + 1, 1);
  e->oname = calloc((size_t)f->outputs.len + 1, sizeof *e->oname);
  e->sname = calloc((size_t)f->insts.len + 1, sizeof *e->sname);
  e->order = calloc((size_t)f->updates.len + 1, sizeof *e->order);
  e->checked = calloc((size_t)nv + 1, sizeof *e->checked);
  CHECK(e->cname && e->ref && e->oname && e->sname && e->order && e->checked);
  entry_names(f, e->fp, &e->ns, e->cname, e->oname, e->sname);   /* parameters first, then tensors as defined */
  cg_ident(e->fname, sizeof e->fname, f->name);
  entry_proto(e);
  e->ops->proto(e);
  e->rc = update_order(p, f, e->order);
  e->c = (CgFunc){.p = p, .f = f, .fp = e->fp, .cname = e->cname, .ref = e->ref, .out = &e->body, .ind = 2,
                  .sname = e->sname, .k = e->k, .s = e->s, .ns = &e->ns};
  if (e->ops->begin) e->ops->begin(e);
  /* distributed builds: the gradient all-reduce hooks around the kernels */
  if (cg_dist_plan_for(&e->c, e->fname, *e->nbuckets, e->dist_build, &e->dist) < 0) e->rc = -1;
  *e->nbuckets += e->dist.nb;
  if (e->dist_arena) e->dist.arena = e->dist_arena;
  if (e->dist_stream) e->dist.stream = e->dist_stream;
  entry_kernels(e);
  if (!e->rc) entry_tail(e);
  if (e->grouped && !e->rc) modfn_text(e, e->mf_done, e->excl, &e->fns_text);
  if (!e->rc) e->rc = e->ops->finish(e, out);
  free(e->mf_done);
  free(e->excl);
  free(e->sref);
  cg_dist_free(&e->dist);
  cg_buf_free(&e->ixsites);
  cg_buf_free(&e->fns_text);
  cg_buf_free(&e->params);
  cg_buf_free(&e->body);
  cg_names_free(&e->ns);
  free(e->checked);
  free(e->cname);
  free(e->ref);
  free(e->oname);
  free(e->sname);
  free(e->order);
  return e->rc;
}
