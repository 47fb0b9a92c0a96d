/* emit_c.c - the structure of the generated model.c / model.h.
 *
 * model.c, top to bottom:
 *   header comment (source, class, entries, arena size, how to build)
 *   includes; CTC_OMP_FOR (an OpenMP pragma under -fopenmp, else nothing)
 *   helper kernels the entries use (kernels.c)
 *   parameter data (PINIT_DATA) and <m>_arena_bytes / _init / _load / _save
 *   one function per entry (entry_c.c's walk with this file's CgEntryOps): null checks, a
 *     pointer per tensor with its shape, each kernel's loops, the outputs copied out
 *   the ctc_model_desc the runtime works from, and main() under CTC_MAIN.
 *
 * Pointers to the arena are `restrict` only where that is true for the whole
 * function: read-only tensors (parameters, inputs and their views) and
 * activations whose bytes no other tensor or scratch buffer reuses. Storage
 * reused over time would make `restrict` on function-wide pointers undefined
 * behaviour, so those are plain pointers (the kernels' parameters are
 * restrict, and each instruction's result never overlaps its operands).
 * An entry with parameter updates (a training step) writes its parameters at
 * the end, so there the parameters and their views are not restrict either.
 *
 * Updates: a value the memory plan placed in its parameter's bytes
 * (PlanHints.update_into: the optimizer step's loop writes parameter and state
 * directly) needs nothing more. Otherwise, after the outputs are copied out, each updated parameter gets its
 * new value (a memcpy from the value's storage, which is an activation, an
 * input or another parameter; a literal for a 0-d constant). Every read of the
 * entry happens before the first write-back; write-backs whose value is itself
 * a parameter go first, ordered so that no parameter is overwritten before it
 * was read (a cycle of such updates is refused). */
#include <stdlib.h>
#include <string.h>
#include "cg_int.h"

typedef long long ll;

typedef struct Gen {
  const Program *p;
  const MemPlan *mp;
  struct KnSchedule *const *sched;   /* per func */
  char prefix[64];        /* "net" */
  char upper[64];         /* "NET" */
  Kernels k;
  Buf *sig;               /* per func: its C prototype (no semicolon) */
  Buf *doc;               /* per func: one-line description for comments */
  Buf *wrap;              /* per func: the fixed-batch wrapper's prototype (CgOptions.batch_wrap), or empty */
  CgOptions opt;
  int nbuckets;           /* distributed builds: gradient buckets so far (dist_c.c) */
  int no_error;           /* the model struct has no `error` field (the CUDA target's <prefix>_host_t) */
  Names fns;              /* the entries' module functions (file scope: unique across entries) */
  const char *prof_t;     /* --profile: the entry being written's timer variable */
} Gen;

/* ---- profiles (--profile) ---------------------------------------------------- */

static void c_string(Buf *b, const char *s);

/* The text of the model line of `at`, trimmed, as a C string literal. */
static void line_text(Buf *b, Span at) {
  const char *t = at.file && at.file->text ? at.file->text : "";
  for (int l = 1; l < at.line && *t; t++)
    l += *t == '\n';
  while (*t == ' ' || *t == '\t') t++;
  size_t n = strcspn(t, "\n");
  while (n && (t[n - 1] == ' ' || t[n - 1] == '\r')) n--;
  char buf[160];
  snprintf(buf, sizeof buf, "%.*s", (int)(n < sizeof buf ? n : sizeof buf - 1), t);
  c_string(b, buf);
}

/* kernel k's ctc_prof_site initializer: entry, name (its ops), model line, phase, FLOPs, bytes,
 * the user module whose code it runs (kernels/scope.c; "" for the entry's own). */
static void prof_site(Buf *b, const Func *f, const KnSchedule *s, int k, const char *module) {
  const Kernel *kn = &s->kernels.data[k];
  char name[64] = "", where[256] = "";
  size_t len = 0;
  int first = -1;
  double flops = 0, bytes = 0;
  int nops = 0;
  for (int i = kn->first; i <= kn->last; i++) nops += f->insts.data[i].op != IR_CONST;
  if (kn->kind == KN_ELEM && nops > 1) len = (size_t)snprintf(name, sizeof name, "fused: ");
  if (kn->kind == KN_ROW) len = (size_t)snprintf(name, sizeof name, "row: ");
  if (kn->kind == KN_GEMM && nops > 1) len = (size_t)snprintf(name, sizeof name, "gemm: ");
  for (int i = kn->first; i <= kn->last; i++) {
    const Inst *in = &f->insts.data[i];
    if (in->op == IR_CONST) continue;
    if (first < 0) first = i;
    flops += (double)kn_flops(f, in);
    if (len < sizeof name - 1)
      len += (size_t)snprintf(name + len, sizeof name - len, "%s%s", i > first ? "+" : "", ir_ops[in->op].name);
  }
  if (len >= sizeof name - 1) strcpy(name + sizeof name - 4, "...");
  const Vec(ValId) *io[2] = {(const void *)&kn->inputs, (const void *)&kn->outputs};
  for (int l = 0; l < 2; l++)
    for (int j = 0; j < io[l]->len; j++) {
      const Type *t = &f->values.data[io[l]->data[j]].type;
      bytes += (double)ir_numel(t) * (double)ir_dtype_size(t->dtype);
    }
  const Inst *in0 = &f->insts.data[first];
  cg_where(where, sizeof where, in0->loc);
  cg_puts(b, "  {");
  c_string(b, f->name);
  cg_puts(b, ", ");
  c_string(b, name);
  cg_puts(b, ", ");
  c_string(b, where);
  cg_puts(b, ", ");
  line_text(b, in0->loc);
  cg_printf(b, ", %s, %.0f, %.0f, ",
            in0->phase == PH_BACKWARD    ? "CTC_PROF_BACKWARD"
            : in0->phase == PH_OPTIMIZER ? "CTC_PROF_OPTIMIZER"
                                         : "CTC_PROF_FORWARD",
            flops, bytes);
  c_string(b, module);
  cg_puts(b, "},\n");
}

static const char *basename_of(const char *path) {
  const char *s = path ? strrchr(path, '/') : NULL;
  return s ? s + 1 : path ? path : "?";
}

/* A C string literal for s. */
/* A module-level training loop (Program.script): its vocabulary and tokens as
 * arrays, and the ctc_text_script the runtime's train and sample read. */
static void emit_i32s(Buf *b, const char *name, const int32_t *v, int64_t n) {
  cg_printf(b, "static const int32_t %s[%lld] = {", name, (long long)(n ? n : 1));
  for (int64_t i = 0; i < n; i++) cg_printf(b, "%s%d,", i % 24 ? "" : "\n  ", (int)v[i]);
  if (!n) cg_puts(b, "0");
  cg_puts(b, "\n};\n");
}

static void emit_script(Buf *b, const TextScript *s) {
  emit_i32s(b, "ctc_script_vocab", s->vocab, s->nvocab);
  emit_i32s(b, "ctc_script_train", s->train, s->ntrain);
  emit_i32s(b, "ctc_script_val", s->val, s->nval);
  cg_puts(b, "static const ctc_text_script ctc_script = {\n  ");
  c_string(b, s->where);
  cg_puts(b, ", ");
  c_string(b, s->train_entry);
  cg_puts(b, ", ");
  if (s->eval_entry) c_string(b, s->eval_entry);
  else cg_puts(b, "NULL");
  cg_printf(b, ",\n  %lld, %lld, %lld, %d, ", (long long)s->steps, (long long)s->eval_interval,
            (long long)s->eval_iters, s->eval_last);
  if (s->eval_format) c_string(b, s->eval_format);
  else cg_puts(b, "NULL");
  cg_printf(b, ",\n  %d, ctc_script_vocab, %lld, %lld, ctc_script_train, ctc_script_val, %.17g, %lld,\n  ",
            (int)s->nvocab, (long long)s->ntrain, (long long)s->nval, s->train_fraction, (long long)s->sample_tokens);
  if (s->gen_where) c_string(b, s->gen_where);
  else cg_puts(b, "NULL");
  cg_printf(b, ", %d, %lld, %.17g  /* generate: crop, top-k, temperature */\n};\n\n", s->gen_where ? s->sample_crop : 1,
            (long long)s->sample_top_k, s->gen_where ? s->sample_temperature : 1.0);
}

static void c_string(Buf *b, const char *s) {
  cg_puts(b, "\"");
  for (; *s; s++) {
    if (*s == '"' || *s == '\\' || *s == '?') cg_printf(b, "\\%c", *s);   /* '?': no trigraphs */
    else if ((unsigned char)*s < 32 || (unsigned char)*s >= 127) cg_printf(b, "\\%03o", (unsigned char)*s);
    else cg_printf(b, "%c", *s);
  }
  cg_puts(b, "\"");
}

/* {"name", CTC_F32, 2, {512, 784}, offset, NULL, 0, 0, 0}. Value v of an entry with
 * a run-time batch (v >= 0, f->batch_max): its batch axis is described at the
 * largest batch, whatever N this Func was staged with. */
static void tensor_desc(Buf *b, const char *name, const Type *t, int64_t offset, const Func *f, ValId v, int cplx,
                        int low) {
  int ax = v >= 0 && f->batch_max && f->batch_axis ? f->batch_axis[v] : -1;
  cg_puts(b, "{");
  c_string(b, name);
  cg_printf(b, ", %s, %d, {", cg_rt_dtype(t->dtype), t->ndim);
  for (int i = 0; i < t->ndim; i++)
    cg_printf(b, "%s%lld", i ? ", " : "", (ll)(i == ax ? t->dims[i] / f->batch_n * f->batch_max : t->dims[i]));
  if (!t->ndim) cg_puts(b, "0");
  /* cplx: complex64 in files; low: bfloat16 (1) / float16 (2) values, so held in files */
  cg_printf(b, "}, %lld, NULL, %d, %d, %d}", (ll)offset, ax + 1, cplx, low);
}

/* s made safe to put inside a comment (in buf). */
static const char *comment_text(char *buf, size_t cap, const char *s) {
  size_t n = 0;
  for (; *s && n + 2 < cap; s++) {
    buf[n++] = *s;
    if (s[0] == '*' && s[1] == '/') buf[n++] = ' ';
    if (s[0] == '/' && s[1] == '*') buf[n++] = ' ';
  }
  buf[n] = 0;
  return buf;
}

static const char *type_str(const Type *t, char *buf, size_t cap) { return ir_type_str(t, buf, cap); }

/* ---- entries: the C target's table for the walk (entry_c.c) --------------------------- */

static const char *bs(const Buf *b) { return b->len ? b->s : ""; }

static void c_proto(CgEntry *e) {
  Gen *g = e->tgt;
  const Func *f = e->f;
  int wrapped = f->batch_max && g->opt.batch_wrap;
  Buf *sig = &g->sig[e->fi];
  cg_printf(sig, "int %s_%s%s(%s_t *m", g->prefix, e->fname, wrapped ? "_batch" : "", g->prefix);
  if (f->batch_max) cg_puts(sig, ", int64_t batch");
  cg_printf(sig, "%s)", bs(&e->params));
  if (wrapped) cg_printf(&g->wrap[e->fi], "int %s_%s(%s_t *m%s)", g->prefix, e->fname, g->prefix, bs(&e->params));
}

static void c_begin(CgEntry *e) {
  Gen *g = e->tgt;
  g->prof_t = g->opt.profile ? cg_name(&e->ns, "prof_t") : NULL;
}

/* The run-time check of instruction in's index operand, before its kernel: one pass over the
 * index (no branch in it), and when a value lies outside [0, bound) the entry returns
 * CTC_ERR_INDEX with the report in m->error (freestanding: the status alone). */
static void c_index_check(CgEntry *e, const Inst *in) {
  Gen *g = e->tgt;
  CgFunc *c = &e->c;
  ValId v;
  int64_t bound;
  CHECK(cg_index_operand(c->f, in, &v, &bound) && c->f->values.data[v].type.dtype == DT_I64);
  int64_t n = ir_numel(&c->f->values.data[v].type);
  Buf fail = {0};
  if (g->opt.freestanding) cg_puts(&fail, "CTC_ERR_INDEX");
  else cg_printf(&fail, "ctc_index_fail(m->error, sizeof m->error, &ctc_ix_%s[%d], %%s, %lld, %lld)", e->fname, e->nix,
                 (ll)n, (ll)bound);
  char tb[300];
  if (cg_is_literal(c, v)) {   /* a constant outside the bound (cg_index_needs_check): the entry always fails */
    double x = c->f->insts.data[c->f->values.data[v].def].fattr;
    cg_printf(c->out, "  { /* index %lld of %s outside [0, %lld) */\n    static const int64_t ctc_v[1] = {%lld};\n"
                      "    (void)ctc_v;\n    return ", (ll)x, ir_ops[in->op].name, (ll)bound, (ll)x);
    cg_printf(c->out, fail.s, "ctc_v");
    cg_puts(c->out, ";\n  }\n");
    cg_index_site(&e->ixsites, c->f, in, "a constant");
  } else {
    const char *ix = cg_ref(c, v);
    cg_printf(c->out, "  { /* %s reads %s %s: every index in [0, %lld) */\n    int ctc_bad = 0;\n", ir_ops[in->op].name, ix,
              type_str(&c->f->values.data[v].type, tb, sizeof tb), (ll)bound);
    cg_printf(c->out, "    for (int64_t i = 0; i < %lld; i++) ctc_bad |= (uint64_t)%s[i] >= %lldu;\n", (ll)n, ix, (ll)bound);
    cg_puts(c->out, "    if (ctc_bad) return ");
    cg_printf(c->out, fail.s, ix);
    cg_puts(c->out, ";\n  }\n");
    cg_index_site(&e->ixsites, c->f, in, c->cname[v]);
  }
  cg_buf_free(&fail);
}

/* Kernel k's loops; with --profile inside its timing, with --anomaly followed by the check of
 * its float outputs (NaN and Inf stop the entry). */
static void c_kernel(CgEntry *e, int k) {
  Gen *g = e->tgt;
  CgFunc *c = &e->c;
  const Func *f = e->f;
  const Kernel *kn = &c->s->kernels.data[k];
  int code = cg_kernel_has_code(f, kn), timed = g->prof_t && code;
  if ((g->opt.profile || g->opt.anomaly) && code) e->nsite++;   /* [0] is the entry */
  if (timed) {
    cg_printf(c->out, "%s  {\n    const double %s = ctc_prof_now();\n", c->out->len ? "\n" : "", g->prof_t);
    c->ind = 4;
  }
  char site[160];
  snprintf(site, sizeof site, "&ctc_prof_%s[%d]", e->fname, e->nsite);
  c->prof_site = timed ? site : NULL;   /* its parallel loops report each thread's share (render_c.c) */
  cg_emit_kernel(c, k);
  c->prof_site = NULL;
  if (timed) {
    cg_printf(c->out, "    ctc_prof_record(m->prof, &ctc_prof_%s[%d], %s);\n  }\n", e->fname, e->nsite, g->prof_t);
    c->ind = 2;
  }
  for (int j = 0; g->opt.anomaly && code && j < kn->outputs.len; j++) {
    ValId v = kn->outputs.data[j];
    const Type *t = &f->values.data[v].type;
    if (t->dtype != DT_F32 && t->dtype != DT_F64) continue;
    cg_printf(c->out, "  if (ctc_anomaly_check(m->error, sizeof m->error, &ctc_prof_%s[%d], \"%s\", %s, %s, %lld))\n"
                      "    return CTC_ERR_ANOMALY;\n",
              e->fname, e->nsite, e->cname[v], cg_ref(c, v), cg_rt_dtype(t->dtype), (ll)ir_numel(t));
  }
}

static void c_output(CgEntry *e, int k, ValId v) {
  const Type *t = &e->f->values.data[v].type;
  if (cg_is_literal(&e->c, v)) {
    cg_printf(&e->body, "  %s[0] = ", e->oname[k]);
    cg_literal(&e->body, t->dtype, e->f->insts.data[e->f->values.data[v].def].fattr);
    cg_puts(&e->body, ";\n");
  } else {
    cg_printf(&e->body, "  memcpy(%s, %s, sizeof(%s) * %lld);\n", e->oname[k], cg_ref(&e->c, v), cg_ctype(t->dtype),
              (ll)ir_numel(t));
  }
}

static void c_update(CgEntry *e, ValId v, int param) {
  const Param *pr = &e->p->params.data[param];
  int64_t off = e->mp->param_offset[param];
  const Type *t = &pr->type;
  char pn[256];
  comment_text(pn, sizeof pn, pr->name);
  if (cg_is_literal(&e->c, v)) {
    Buf lit = {0};
    cg_literal(&lit, t->dtype, e->f->insts.data[e->f->values.data[v].def].fattr);
    cg_printf(&e->body, "  *(%s *)(A + %lld) = %s;  /* %s := %s */\n", cg_ctype(t->dtype), (ll)off, lit.s, pn, lit.s);
    cg_buf_free(&lit);
  } else {
    cg_printf(&e->body, "  memcpy(A + %lld, %s, %lld);  /* %s := %s */\n", (ll)off, cg_ref(&e->c, v),
              (ll)(ir_numel(t) * (int64_t)ir_dtype_size(t->dtype)), pn, e->cname[v]);
  }
}

/* The entry's text: its --profile/--anomaly sites, index sites and gradient bucket tables,
 * its module functions, the fixed-batch wrapper, then the function: argument checks, the
 * declarations of the tensors its own body uses, the body. */
static int c_finish(CgEntry *e, Buf *out) {
  Gen *g = e->tgt;
  const Program *p = e->p;
  const Func *f = e->f;
  const KnSchedule *s = e->s;
  const char *fid = e->fname, *pt = g->prof_t;
  Buf decl = {0};
  int arena = e->arena | cg_entry_decls(e, e->ref, e->grouped ? e->sref : NULL, e->excl, &decl);
  char where[256];
  cg_where(where, sizeof where, f->loc);
  if (g->opt.profile || g->opt.anomaly) {   /* what each kernel is */
    cg_printf(out, "static const ctc_prof_site ctc_prof_%s[] = {\n  {", fid);
    c_string(out, f->name);
    cg_puts(out, ", ");
    c_string(out, arena_printf(p->arena, "entry %s", f->name));
    cg_puts(out, ", ");
    c_string(out, where);
    cg_puts(out, ", ");
    line_text(out, f->loc);
    cg_puts(out, ", CTC_PROF_ENTRY, 0, 0, \"\"},\n");
    int *psc = calloc((size_t)s->kernels.len + 1, sizeof *psc), *pph = calloc((size_t)s->kernels.len + 1, sizeof *pph);
    CHECK(psc && pph);
    kn_kernel_scopes(p, f, s, NULL, psc, pph);
    for (int k = 0; k < s->kernels.len; k++)
      if (cg_kernel_has_code(f, &s->kernels.data[k])) prof_site(out, f, s, k, psc[k] > 0 ? p->scopes.data[psc[k]].path : "");
    free(psc);
    free(pph);
    cg_puts(out, "};\n\n");
  }
  if (e->nix && !g->opt.freestanding) cg_printf(out, "static const ctc_index_site ctc_ix_%s[] = {\n%s};\n\n", fid, e->ixsites.s);
  if (e->dist.tables.len) cg_puts(out, e->dist.tables.s);
  cg_puts(out, bs(&e->fns_text));   /* its module functions, before it */
  if (f->batch_max && g->opt.batch_wrap) {   /* before the entry (declared in the header), so that its body follows its name */
    Buf call = {0};
    cg_printf(&call, "%s_%s_batch(m, %lld", g->prefix, fid, (ll)f->batch_max);
    for (int k = 0; k < f->inputs.len; k++) cg_printf(&call, ", %s", e->cname[f->inputs.data[k]]);
    for (int k = 0; k < f->outputs.len; k++) cg_printf(&call, ", %s", e->oname[k]);
    cg_printf(out, "/* %s at batch %lld (%s_%s_batch takes 1..%lld) */\n%s {\n  return %s);\n}\n\n", fid,
              (ll)f->batch_max, g->prefix, fid, (ll)f->batch_max, g->wrap[e->fi].s, call.s);
    cg_buf_free(&call);
  }
  cg_printf(out, "/* %s%s%s */\n", e->doc->s, where[0] ? "  -- " : "", where);
  cg_printf(out, "%s {\n", g->sig[e->fi].s);
  cg_puts(out, "  if (!m || !m->arena");
  for (int k = 0; k < f->inputs.len; k++) cg_printf(out, " || !%s", e->cname[f->inputs.data[k]]);
  for (int k = 0; k < f->outputs.len; k++) cg_printf(out, " || !%s", e->oname[k]);
  if (g->opt.freestanding) {   /* the status alone */
    cg_puts(out, ") return CTC_ERR_ARG;\n");
    if (f->batch_max) cg_printf(out, "  if (batch < 1 || batch > %lld) return CTC_ERR_SHAPE;\n", (ll)f->batch_max);
  } else {   /* the status, and its detail in m->error (ctc_model_error) */
    cg_printf(out, ")\n    return m ? ctc_error_set(m->error, sizeof m->error, CTC_ERR_ARG, \"entry '%s': a NULL "
                   "argument, or the model is not initialised\") : CTC_ERR_ARG;\n", fid);
    if (f->batch_max)
      cg_printf(out, "  if (batch < 1 || batch > %lld)\n    return ctc_error_set(m->error, sizeof m->error, CTC_ERR_SHAPE, "
                     "\"entry '%s': batch %%lld is outside 1..%lld\", (long long)batch);\n",
                (ll)f->batch_max, fid, (ll)f->batch_max);
  }
  if (arena) cg_puts(out, "  unsigned char *A = m->arena;\n");
  cg_puts(out, bs(&decl));
  if (pt) cg_printf(out, "  const double %s_entry = ctc_prof_now();\n", pt);
  if (e->body.len) cg_printf(out, "\n%s", e->body.s);
  if (pt) cg_printf(out, "  ctc_prof_record(m->prof, &ctc_prof_%s[0], %s_entry);\n", fid, pt);
  cg_puts(out, "  return CTC_OK;\n}\n\n");
  cg_buf_free(&decl);
  return 0;
}

static const CgEntryOps c_entry_ops = {
    .proto = c_proto, .begin = c_begin, .index_check = c_index_check, .kernel = c_kernel,
    .output = c_output, .update = c_update, .finish = c_finish,
};

static int emit_entry(Gen *g, int fi, Buf *out) {
  int sites = g->opt.profile || g->opt.anomaly;
  CgEntry e = {.ops = &c_entry_ops, .tgt = g, .p = g->p, .mp = g->mp, .fi = fi, .prefix = g->prefix,
               .s = g->sched[fi], .k = &g->k, .doc = &g->doc[fi], .copt = &g->opt, .fns = &g->fns,
               .nbuckets = &g->nbuckets};
  /* repeated steps as loops, an optimizer's updates as a table: not where each kernel is a
   * profile or anomaly site; module functions: not where kernels are sites */
  e.structure = CG_EN_VIEWRUN | (sites ? 0 : CG_EN_REROLL | CG_EN_FOREACH | CG_EN_MODFNS);
  if (g->opt.embed) e.structure &= ~(unsigned)CG_EN_FOREACH;
  return cg_emit_entry(&e, out);
}

/* ---- parameters: data, init, load, save ----------------------------------------------- */

/* Compile-time tensors (PINIT_DATA) of a known pattern are filled by a loop in
 * <m>_init instead of a static array: a constant, an arange (start + i*step),
 * or a lower-triangular band over the last two axes (torch.tril(torch.ones(T,
 * T)) as a causal mask: x where col <= row + diag, else y; triu is the same
 * band with x and y swapped). Values are compared as the parameter's dtype
 * stores them, -0 and NaN included, so the loop writes the same bytes. */
typedef enum { PAT_NONE, PAT_CONST, PAT_ARANGE, PAT_TRIL } PatKind;
typedef struct DataPat {
  PatKind kind;
  double x, y;      /* CONST: x; ARANGE: start x, step y; TRIL: x inside the band, y outside */
  int64_t diag, rows, cols;
} DataPat;

static double stored(DType t, double v) {
  switch (t) {
  case DT_F32: return (float)v;
  case DT_F64: return v;
  case DT_BOOL: return v != 0;
  default: return (double)(int64_t)v;
  }
}

static int same_bits(double a, double b) { return memcmp(&a, &b, sizeof a) == 0; }

static DataPat data_pattern(const Param *pr) {
  DataPat d = {PAT_NONE, 0, 0, 0, 0, 0};
  const Type *t = &pr->type;
  int64_t n = ir_numel(t);
  const double *v = pr->init_data;
  if (n < 2 || !v) return d;
  DType dt = t->dtype;
  int64_t k = 1;
  while (k < n && same_bits(stored(dt, v[k]), stored(dt, v[0]))) k++;
  if (k == n) return (DataPat){PAT_CONST, stored(dt, v[0]), 0, 0, 0, 0};
  double step = v[1] - v[0];
  for (k = 0; k < n && same_bits(stored(dt, v[0] + (double)k * step), stored(dt, v[k])); k++) {
  }
  if (k == n && step == step) return (DataPat){PAT_ARANGE, v[0], step, 0, 0, 0};
  if (t->ndim < 2) return d;
  int64_t R = t->dims[t->ndim - 2], C = t->dims[t->ndim - 1];
  if (R < 2 || C < 2) return d;
  double x = stored(dt, v[(R - 1) * C]), y = stored(dt, v[C - 1]);
  if (same_bits(x, y)) return d;
  int found = 0;
  int64_t diag = 0;
  for (int64_t r = 0; r < R && !found; r++) {   /* a row that holds both values fixes the diagonal */
    int64_t c = 0;
    while (c < C && same_bits(stored(dt, v[r * C + c]), x)) c++;
    if (c > 0 && c < C) diag = c - 1 - r, found = 1;
  }
  if (!found) return d;
  for (k = 0; k < n; k++) {
    int64_t r = k / C % R, c = k % C;
    if (!same_bits(stored(dt, v[k]), c <= r + diag ? x : y)) return d;
  }
  return (DataPat){PAT_TRIL, x, y, diag, R, C};
}

static void emit_param_data(Gen *g, Buf *b) {
  const Program *p = g->p;
  for (int i = 0; i < p->params.len; i++) {
    const Param *pr = &p->params.data[i];
    if (pr->init != PINIT_DATA || !pr->init_data || data_pattern(pr).kind != PAT_NONE) continue;
    int64_t n = ir_numel(&pr->type);
    char pn[256];
    cg_printf(b, "/* %s */\nstatic const %s ctc_data_%d[%lld] = {", comment_text(pn, sizeof pn, pr->name), cg_ctype(pr->type.dtype), i, (ll)n);
    for (int64_t k = 0; k < n; k++) {
      cg_puts(b, k % 8 ? " " : "\n  ");
      cg_literal(b, pr->type.dtype, pr->init_data[k]);
      if (k + 1 < n) cg_puts(b, ",");
    }
    cg_puts(b, "\n};\n\n");
  }
}

/* Whether parameter i starts as zeros (no initialiser, no data). */
static int starts_zero(const Param *pr) {
  return (pr->init != PINIT_CONST && pr->init != PINIT_UNIFORM && pr->init != PINIT_NORMAL &&
          (pr->init != PINIT_DATA || !pr->init_data)) && pr->init_zero_row1 <= 0;
}

/* The end of the run of parameters from i that start as zeros and lie one after another in
 * the arena (only alignment padding, no other tensor, between them): e, parameters [i, e). */
static int zero_run(const Program *p, const MemPlan *mp, int i) {
  int e = i;
  int64_t end = 0;
  for (; e < p->params.len && starts_zero(&p->params.data[e]); e++) {
    const Param *pr = &p->params.data[e];
    int64_t off = mp->param_offset[e];
    if (e > i && (off < end || off - end >= 64)) break;
    int other = 0;
    for (int q = 0; q < p->params.len && !other; q++)
      other = (q < i || q > e) && mp->param_offset[q] >= end && mp->param_offset[q] < off;
    if (e > i && other) break;
    end = off + ir_numel(&pr->type) * (int64_t)ir_dtype_size(pr->type.dtype);
  }
  return e;
}

static void emit_init(Gen *g, Buf *b) {
  const Program *p = g->p;
  const char *P = g->prefix;
  char tb[300];
  if (g->opt.embed) {   /* --embed-weights: nothing to initialise */
    cg_fs_init_embedded(b, P, g->upper);
    return;
  }
  cg_printf(b, "size_t %s_arena_bytes(void) { return %s_ARENA_BYTES; }\n\n", P, g->upper);
  cg_printf(b, "int %s_init(%s_t *m, void *arena, size_t bytes) {\n", P, P);
  if (g->opt.freestanding || g->no_error) {
    cg_puts(b, "  if (!m || !arena) return CTC_ERR_ARG;\n");
    cg_printf(b, "  if (bytes < %s_ARENA_BYTES || (uintptr_t)arena %% 64 != 0) return CTC_ERR_ARENA;\n", g->upper);
  } else {   /* the detail in m->error */
    cg_printf(b, "  if (!m) return CTC_ERR_ARG;\n  if (!arena) return ctc_error_set(m->error, sizeof m->error, CTC_ERR_ARG, "
                 "\"%s_init: NULL arena\");\n", P);
    cg_printf(b, "  if (bytes < %s_ARENA_BYTES || (uintptr_t)arena %% 64 != 0)\n    return ctc_error_set(m->error, "
                 "sizeof m->error, CTC_ERR_ARENA, \"%s_init: the arena (%%zu bytes%%s) must have %%zu bytes, 64-byte "
                 "aligned\", bytes, (uintptr_t)arena %% 64 ? \", misaligned\" : \"\", %s_ARENA_BYTES);\n"
                 "  m->error[0] = 0;\n", g->upper, P, g->upper);
  }
  cg_puts(b, "  m->arena = (unsigned char *)arena;\n  m->arena_bytes = bytes;\n");
  if (p->params.len) cg_puts(b, "  unsigned char *A = m->arena;\n");
  for (int i = 0; i < p->params.len; i++) {
    const Param *pr = &p->params.data[i];
    const Type *t = &pr->type;
    int64_t off = g->mp->param_offset[i], n = ir_numel(t);
    int e = zero_run(p, g->mp, i);
    if (e > i + 1) {   /* tensors that start as zeros, one after another (an optimizer's state): one memset */
      char pn0[256], pe[256];
      const Param *pl = &p->params.data[e - 1];
      int64_t end = g->mp->param_offset[e - 1] + ir_numel(&pl->type) * (int64_t)ir_dtype_size(pl->type.dtype);
      cg_printf(b, "  /* %d tensors, %s", e - i, comment_text(pn0, sizeof pn0, pr->name));
      cg_printf(b, " .. %s: zeros */\n", comment_text(pe, sizeof pe, pl->name));
      cg_printf(b, "  memset(A + %lld, 0, %lld);\n", (ll)off, (ll)(end - off));
      i = e - 1;
      continue;
    }
    const char *ct = cg_ctype(t->dtype), *sf = cg_dt_suffix(t->dtype);
    char pn[256];
    cg_printf(b, "  /* %s %s: ", comment_text(pn, sizeof pn, pr->name), type_str(t, tb, sizeof tb));
    switch (pr->init) {
    case PINIT_CONST:
      cg_puts(b, "constant */\n");
      cg_printf(b, "  for (int64_t i = 0; i < %lld; i++) ((%s *)(A + %lld))[i] = ", (ll)n, ct, (ll)off);
      cg_literal(b, t->dtype, pr->init_a);
      cg_puts(b, ";\n");
      break;
    case PINIT_UNIFORM:
    case PINIT_NORMAL: {
      int u = pr->init == PINIT_UNIFORM, tr = !u && pr->init_trunc;
      cg_printf(b, "%s */\n", u ? "uniform(a, b)" : tr ? "normal(mean, std) truncated to [a, b]" : "normal(mean, std)");
      cg_printf(b, "  ctc_fill_%s_%s((%s *)(A + %lld), %lld, %d, ", u ? "uniform" : tr ? "trunc_normal" : "normal", sf, ct,
                (ll)off, (ll)n, i);
      cg_literal(b, DT_F64, pr->init_a);
      cg_puts(b, ", ");
      cg_literal(b, DT_F64, pr->init_b);
      if (tr) {
        cg_puts(b, ", ");
        cg_literal(b, DT_F64, pr->init_lo);
        cg_puts(b, ", ");
        cg_literal(b, DT_F64, pr->init_hi);
      }
      cg_puts(b, ");\n");
      if (u) g->k.uniform[t->dtype] = 1;
      else if (tr) g->k.trunc_normal[t->dtype] = 1;
      else g->k.normal[t->dtype] = 1;
      if (ir_dtype_is_low(t->dtype)) {   /* model.bfloat16() / .half(): each value rounded into the storage */
        g->k.low_io[t->dtype] = 1;
        if (t->dtype == DT_BF16) g->k.bf16[DT_F32] = 1;
        else g->k.f16[DT_F32] = 1;
      }
      break;
    }
    case PINIT_DATA:
      if (pr->init_data && data_pattern(pr).kind != PAT_NONE) {
        DataPat d = data_pattern(pr);
        cg_printf(b, "%s */\n", d.kind == PAT_CONST ? "constant data" : d.kind == PAT_ARANGE ? "arange data"
                                 : "lower-triangular data (tril)");
        cg_printf(b, "  for (int64_t i = 0; i < %lld; i++) ((%s *)(A + %lld))[i] = ", (ll)n, ct, (ll)off);
        if (d.kind == PAT_CONST) {
          cg_literal(b, t->dtype, d.x);
        } else if (d.kind == PAT_ARANGE) {
          cg_printf(b, "(%s)(", ct);
          cg_literal(b, DT_F64, d.x);
          cg_puts(b, " + (double)i * ");
          cg_literal(b, DT_F64, d.y);
          cg_puts(b, ")");
        } else {
          cg_printf(b, "i %% %lld <= i / %lld %% %lld", (ll)d.cols, (ll)d.cols, (ll)d.rows);
          if (d.diag) cg_printf(b, " %c %lld", d.diag > 0 ? '+' : '-', (ll)(d.diag > 0 ? d.diag : -d.diag));
          cg_puts(b, " ? ");
          cg_literal(b, t->dtype, d.x);
          cg_puts(b, " : ");
          cg_literal(b, t->dtype, d.y);
        }
        cg_puts(b, ";\n");
        break;
      }
      if (pr->init_data) {
        /* the table is read through a volatile pointer: GCC 12 at -O3 with AVX-512
         * expands a memcpy from a constant table into vector stores of wrong
         * values (a 64-byte block of 14 infinities and 2 zeros stored as 16
         * infinities), which it cannot do when it does not see the source */
        cg_puts(b, "data */\n");
        cg_printf(b, "  {\n    const void *volatile src = ctc_data_%d;   /* not folded: see ctc's emit_init */\n"
                     "    memcpy(A + %lld, src, sizeof ctc_data_%d);\n  }\n", i, (ll)off, i);
        break;
      }
      goto zeros;   /* no data: zeros */
    default:
    zeros:
      cg_puts(b, "zeros */\n");
      cg_printf(b, "  memset(A + %lld, 0, %lld);\n", (ll)off, (ll)(n * (int64_t)ir_dtype_size(t->dtype)));
      break;
    }
    if (pr->init_zero_row1 > 0 && t->ndim >= 1 && pr->init_zero_row1 <= t->dims[0]) {
      int64_t row = n / t->dims[0] * (int64_t)ir_dtype_size(t->dtype);
      cg_printf(b, "  memset(A + %lld, 0, %lld);  /* padding_idx %lld: a zero row */\n",
                (ll)(off + (pr->init_zero_row1 - 1) * row), (ll)row, (ll)(pr->init_zero_row1 - 1));
    }
  }
  cg_puts(b, "  return CTC_OK;\n}\n\n");
  if (g->opt.freestanding) return;   /* no files */
  if (g->no_error) {   /* the CUDA target's host copy (its <prefix>_load keeps the message) */
    cg_printf(b, "int %s_load(%s_t *m, const char *safetensors_path) {\n", P, P);
    cg_puts(b, "  if (!m || !m->arena || !safetensors_path) return CTC_ERR_ARG;\n");
    cg_printf(b, "  return ctc_model_load(&%s_desc, m, safetensors_path, NULL);\n}\n\n", P);
    cg_printf(b, "int %s_save(const %s_t *m, const char *path) {\n", P, P);
    cg_puts(b, "  if (!m || !m->arena || !path) return CTC_ERR_ARG;\n");
    cg_printf(b, "  return ctc_model_save(&%s_desc, m, path, NULL);\n}\n\n", P);
    return;
  }
  /* load and save keep the runtime's message (the file, the tensor, both shapes) in m->error */
  for (int save = 0; save < 2; save++) {
    const char *what = save ? "save" : "load", *path = save ? "path" : "safetensors_path";
    cg_printf(b, "int %s_%s(%s_t *m, const char *%s) {\n  if (!m) return CTC_ERR_ARG;\n", P, what, P, path);
    cg_printf(b, "  if (!m->arena || !%s)\n    return ctc_error_set(m->error, sizeof m->error, CTC_ERR_ARG, \"%s_%s: %%s\", "
                 "!m->arena ? \"the model is not initialised (%s_init)\" : \"NULL path\");\n", path, P, what, P);
    cg_printf(b, "  ctc_error err;\n  err.msg[0] = 0;\n  const int rc = ctc_model_%s(&%s_desc, m, %s, &err);\n", what, P, path);
    cg_puts(b, "  return ctc_error_set(m->error, sizeof m->error, rc, \"%s\", err.msg[0] ? err.msg : ctc_strerror(rc));\n}\n\n");
  }
  cg_printf(b, "const char *%s_error(const %s_t *m) { return m ? m->error : \"\"; }\n\n", P, P);
}

/* Optimizer state (Param.is_state) comes after every model tensor: the
 * descriptor marks the last noptional parameters as optional in a weights file. */
static int n_state_params(const Program *p) {
  int n = 0;
  for (int i = 0; i < p->params.len; i++) n += p->params.data[i].is_state != 0;
  return n;
}

static void check_state_params(const Program *p) {
  int n = n_state_params(p);
  for (int i = p->params.len - n; i < p->params.len; i++)
    if (!p->params.data[i].is_state)
      BUG("codegen_c: optimizer state parameters are not the last ones (%s)", p->params.data[i].name);
}

/* ---- the model descriptor -------------------------------------------------------- */

static void emit_desc(Gen *g, Buf *b, int device_params) {
  const Program *p = g->p;
  const char *P = g->prefix;
  cg_puts(b, "/* ---- what the runtime sees: parameters and entries ---- */\n\n");
  int nsd = 0;   /* the state_dict's keys */
  if (p->params.len) {
    cg_puts(b, "static const ctc_tensor ctc_params[] = {\n");
    for (int i = 0; i < p->params.len; i++) {
      cg_puts(b, "  ");
      tensor_desc(b, p->params.data[i].name, &p->params.data[i].type, g->mp->param_offset[i], NULL, -1,
                  p->params.data[i].complex64, p->params.data[i].low);
      cg_puts(b, ",\n");
    }
    cg_puts(b, "};\n\n");
    /* what each is (training state and ctc's own tensors are Param.is_state), and the
     * state_dict's keys: the lowering's, else (no nn.Module) the parameters and buffers */
    cg_puts(b, "static const unsigned char ctc_kinds[] = {");
    for (int i = 0; i < p->params.len; i++) {
      const Param *pr = &p->params.data[i];
      static const char *const kinds[KN_NKINDS] = {"CTC_KIND_PARAMETER", "CTC_KIND_BUFFER", "CTC_KIND_TRAINING",
                                                   "CTC_KIND_LOCAL"};
      const char *k = kinds[kn_param_kind(pr)];
      cg_printf(b, "%s%s", !i ? "\n  " : i % 4 ? ", " : ",\n  ", k);
    }
    cg_puts(b, "\n};\n");
    cg_puts(b, "static const ctc_sd_key ctc_state_dict[] = {\n");
    for (int i = 0; i < p->state_dict.len; i++, nsd++) {
      cg_puts(b, "  {");
      c_string(b, p->state_dict.data[i].name);
      cg_printf(b, ", %d},\n", p->state_dict.data[i].param);
    }
    for (int i = 0; !p->state_dict.len && i < p->params.len; i++)
      if (kn_param_kind(&p->params.data[i]) <= KN_BUFFER) {
        cg_puts(b, "  {");
        c_string(b, p->params.data[i].name);
        cg_printf(b, ", %d},\n", i);
        nsd++;
      }
    if (!nsd) cg_puts(b, "  {NULL, -1},   /* none (C needs an element) */\n");
    cg_puts(b, "};\n\n");
  }
  int nassumed = 0;   /* tensors whose init values the code relies on: loading others is refused */
  for (int i = 0; i < p->params.len; i++) nassumed += p->params.data[i].assumed != NULL;
  if (nassumed) {
    cg_puts(b, "/* why the compiled code is right only for these tensors' init values (ctc_check_assumed) */\n");
    cg_puts(b, "static const char *const ctc_assumed[] = {\n");
    for (int i = 0; i < p->params.len; i++) {
      cg_puts(b, "  ");
      if (p->params.data[i].assumed) c_string(b, p->params.data[i].assumed);
      else cg_puts(b, "NULL");
      cg_puts(b, ",\n");
    }
    cg_puts(b, "};\n\n");
  }
  for (int fi = 0; fi < p->funcs.len; fi++) {
    const Func *f = p->funcs.data[fi];
    char fname[128];
    cg_ident(fname, sizeof fname, f->name);
    /* Names in the descriptor: the model's (the driver binds NAME=X.npy by
     * them); the C parameter name where two inputs share a name. */
    Names ns;
    cg_names_init(&ns, g->prefix);
    const char **in_names = calloc((size_t)f->inputs.len + 1, sizeof *in_names);
    CHECK(in_names);
    for (int k = 0; k < f->inputs.len; k++) {
      const char *cn = cg_name(&ns, f->values.data[f->inputs.data[k]].name);
      in_names[k] = f->values.data[f->inputs.data[k]].name;
      for (int j = 0; j < k; j++)
        if (!strcmp(in_names[j], in_names[k])) in_names[k] = cn;
    }
    if (f->inputs.len) {
      cg_printf(b, "static const ctc_tensor ctc_in_%s[] = {\n", fname);
      for (int k = 0; k < f->inputs.len; k++) {
        cg_puts(b, "  ");
        tensor_desc(b, in_names[k], &f->values.data[f->inputs.data[k]].type, 0, f, f->inputs.data[k], 0, 0);
        cg_puts(b, ",\n");
      }
      cg_puts(b, "};\n");
    }
    if (f->outputs.len) {
      cg_printf(b, "static const ctc_tensor ctc_out_%s[] = {\n", fname);
      for (int k = 0; k < f->outputs.len; k++) {
        cg_puts(b, "  ");
        tensor_desc(b, f->out_names.data[k], &f->values.data[f->outputs.data[k]].type, 0, f, f->outputs.data[k], 0, 0);
        cg_puts(b, ",\n");
      }
      cg_puts(b, "};\n");
    }
    /* ctc_calln_<entry> with the batch n (entries with a run-time batch), ctc_call_<entry> */
    for (int withn = f->batch_max ? 1 : 0; withn >= 0; withn--) {
      cg_printf(b, "static int ctc_call%s_%s(void *m, %sconst void *const *in, void *const *out) {\n", withn ? "n" : "",
                fname, withn ? "int64_t n, " : "");
      if (!f->inputs.len) cg_puts(b, "  (void)in;\n");
      if (!f->outputs.len) cg_puts(b, "  (void)out;\n");
      int wrapped = f->batch_max && g->opt.batch_wrap;   /* ctc_call_: the fixed-batch <m>_<entry> */
      cg_printf(b, "  return %s_%s%s((%s_t *)m", P, fname, wrapped && withn ? "_batch" : "", P);
      if (f->batch_max && (withn || !wrapped)) cg_printf(b, withn ? ", n" : ", %lld", (ll)f->batch_max);
      for (int k = 0; k < f->inputs.len; k++)
        cg_printf(b, ", (const %s *)in[%d]", cg_ctype(f->values.data[f->inputs.data[k]].type.dtype), k);
      for (int k = 0; k < f->outputs.len; k++)
        cg_printf(b, ", (%s *)out[%d]", cg_ctype(f->values.data[f->outputs.data[k]].type.dtype), k);
      cg_puts(b, ");\n}\n\n");
    }
    cg_names_free(&ns);
    free(in_names);
  }
  cg_puts(b, "static const ctc_entry ctc_entries[] = {\n");
  for (int fi = 0; fi < p->funcs.len; fi++) {
    const Func *f = p->funcs.data[fi];
    char fname[128];
    cg_ident(fname, sizeof fname, f->name);
    cg_puts(b, "  {");
    c_string(b, f->name);
    cg_printf(b, ", %d, %d, ", f->inputs.len, f->outputs.len);
    if (f->inputs.len) cg_printf(b, "ctc_in_%s, ", fname);
    else cg_puts(b, "NULL, ");
    if (f->outputs.len) cg_printf(b, "ctc_out_%s, ", fname);
    else cg_puts(b, "NULL, ");
    cg_printf(b, "ctc_call_%s, %s, %lld, ", fname,
              f->kind == FK_TRAIN      ? "CTC_ENTRY_TRAIN"
              : f->kind == FK_FUNCTION ? "CTC_ENTRY_FUNCTION"
              : f->kind == FK_SCHED    ? "CTC_ENTRY_SCHED"
              : f->kind == FK_EVAL     ? "CTC_ENTRY_EVAL"
                                       : "CTC_ENTRY_FORWARD",
              (ll)f->batch_max);
    if (f->batch_max) cg_printf(b, "ctc_calln_%s},\n", fname);
    else cg_puts(b, "NULL},\n");
  }
  cg_puts(b, "};\n\n");
  cg_printf(b, "static int ctc_init_any(void *m, void *arena, size_t bytes) { return %s_init((%s_t *)m, arena, bytes); }\n",
            P, P);
  if (!device_params) {
    cg_printf(b, "static void *ctc_arena_of(void *m) { return ((%s_t *)m)->arena; }\n", P);
  } else {   /* the CUDA target: the host copy brought up to date (the runtime reads and writes it) */
    cg_printf(b, "static void *ctc_arena_of(void *m) {\n  unsigned char *p = %s_params((%s_t *)m);\n", P, P);
    cg_puts(b, "  if (!p) abort();   /* the device failed (printed): the host copy would be stale */\n  return p;\n}\n");
  }
  if (g->opt.profile) cg_printf(b, "static void ctc_set_profile(void *m, ctc_profile *prof) { ((%s_t *)m)->prof = prof; }\n", P);
  cg_printf(b, "static const char *ctc_error_of(void *m) { return ((%s_t *)m)->error; }\n", P);
  cg_puts(b, "\n");
  if (p->script) emit_script(b, p->script);
  cg_printf(b, "const ctc_model_desc %s_desc = {\n  ", P);
  c_string(b, P);
  cg_puts(b, ", ");
  c_string(b, ir_source_name(p));
  cg_printf(b, ", sizeof(%s_t), %s_ARENA_BYTES, 64,\n", P, g->upper);
  if (p->params.len) cg_printf(b, "  %d, ctc_params,\n", p->params.len);
  else cg_puts(b, "  0, NULL,\n");
  cg_printf(b, "  %d, ctc_entries,\n  ctc_init_any, ctc_arena_of,\n", p->funcs.len);
  cg_printf(b, "  %d,  /* noptional: training state, the last tensors, which a weights file may lack */\n",
            n_state_params(p));
  cg_puts(b, g->opt.profile ? "  ctc_set_profile,\n" : "  NULL,  /* set_profile: built without --profile */\n");
  cg_puts(b, "  ctc_error_of,\n");
  if (p->params.len) cg_printf(b, "  %d, ctc_state_dict, ctc_kinds,  /* the state_dict's keys, what each tensor is */\n", nsd);
  else cg_puts(b, "  0, NULL, NULL,  /* no tensors */\n");
  cg_puts(b, p->script ? "  &ctc_script,  /* the module-level training loop */\n" : "  NULL,  /* script */\n");
  cg_puts(b, nassumed ? "  ctc_assumed,  /* tensors a weights file may not change */\n};\n" : "  NULL,  /* assumed: none */\n};\n");
}

/* ---- files ---------------------------------------------------------------------- */

static void emit_header(Gen *g, FILE *h, const char *src) {
  const char *P = g->prefix, *U = g->upper;
  const MemPlan *mp = g->mp;
  char cls[256];
  comment_text(cls, sizeof cls, g->p->class_name ? g->p->class_name : "?");
  fprintf(h, "/* %s.h - generated by ctc from %s (class %s). Do not edit. */\n", P, src, cls);
  fprintf(h, "#ifndef CTC_GENERATED_%s_H\n#define CTC_GENERATED_%s_H\n\n", U, U);
  fprintf(h, "#include <stddef.h>\n#include <stdint.h>\n#include \"ctc_rt.h\"\n\n");
  fprintf(h, "#ifdef __cplusplus\nextern \"C\" {\n#endif\n\n");
  fprintf(h, "/* Arena bytes the model needs: parameters (%lld), then the activations of\n"
             " * the running entry (%lld). */\n",
          (ll)mp->params_bytes, (ll)(mp->arena_bytes - mp->params_bytes));
  fprintf(h, "#define %s_ARENA_BYTES ((size_t)%lld)\n\n", U, (ll)mp->arena_bytes);
  fprintf(h, "/* A model instance: everything lives in the caller's arena. */\n");
  fprintf(h, "typedef struct %s_t {\n  unsigned char *arena;  /* parameters, then activations */\n"
             "  size_t arena_bytes;\n", P);
  if (g->opt.profile) fprintf(h, "  struct ctc_profile *prof;  /* --profile: where the kernels' times go (NULL: nowhere) */\n");
  fprintf(h, "  char error[512];  /* why the last entry failed: an index out of range (CTC_ERR_INDEX), a NaN (--anomaly) */\n");
  fprintf(h, "} %s_t;\n\n", P);
  fprintf(h, "size_t %s_arena_bytes(void);\n", P);
  fprintf(h, "/* Takes `arena` (at least %s_ARENA_BYTES bytes, 64-byte aligned; nothing is\n"
             " * allocated) and initialises the parameters as the model does (seeded RNG). */\n", U);
  fprintf(h, "int %s_init(%s_t *m, void *arena, size_t bytes);\n", P, P);
  fprintf(h, "/* Parameters by their PyTorch state_dict names (a safetensors file or a PyTorch checkpoint). */\n");
  fprintf(h, "int %s_load(%s_t *m, const char *safetensors_path);\n", P, P);
  fprintf(h, "int %s_save(%s_t *m, const char *path);\n", P, P);
  fprintf(h, "/* Why the last call on m failed, with its detail (the file, the tensor, both shapes, the\n"
             " * batch; an index out of range; a NaN with --anomaly): set by any call that fails, cleared\n"
             " * by a load or save that succeeds; \"\" when none. Per model: no global state. */\n");
  fprintf(h, "const char *%s_error(const %s_t *m);\n\n", P, P);
  fprintf(h, "/* Entry points. Outputs are written to caller storage that must not overlap\n"
             " * the inputs. Every function returns CTC_OK or an error code (ctc_strerror). */\n");
  for (int fi = 0; fi < g->p->funcs.len; fi++) {
    fprintf(h, "/* %s */\n%s;\n", g->doc[fi].s, g->sig[fi].s);
    if (g->wrap[fi].len)
      fprintf(h, "/* the same at batch %lld */\n%s;\n", (ll)g->p->funcs.data[fi]->batch_max, g->wrap[fi].s);
  }
  fprintf(h, "\n/* The model as the runtime sees it (ctc_model_load, ctc_main, ...). */\n");
  fprintf(h, "extern const ctc_model_desc %s_desc;\n\n", P);
  fprintf(h, "#ifdef __cplusplus\n}\n#endif\n#endif\n");
}

int cg_c_emit(const Program *p, const MemPlan *plan, FILE *c_out, FILE *h_out, const char *h_name) {
  KnSchedule **s = arena_alloc(p->arena, sizeof *s * (size_t)(p->funcs.len + 1));
  for (int i = 0; i < p->funcs.len; i++) s[i] = kn_schedule(p, p->funcs.data[i], 0);
  return cg_c_emit_sched(p, plan, s, c_out, h_out, h_name);
}

int cg_c_emit_sched(const Program *p, const MemPlan *plan, KnSchedule *const *sched, FILE *c_out, FILE *h_out,
                    const char *h_name) {
  CgOptions none = {0};
  return cg_c_emit_opts(p, plan, sched, &none, c_out, h_out, h_name);
}

int cg_c_emit_opts(const Program *p, const MemPlan *plan, KnSchedule *const *sched, const CgOptions *opt,
                   FILE *c_out, FILE *h_out, const char *h_name) {
  static const char *const api[] = {"arena_bytes", "init", "load", "save", "error", "desc", "t", NULL};
  Gen g;
  memset(&g, 0, sizeof g);
  g.opt = *opt;
  g.k.float_acc = (unsigned char)(opt->freestanding != 0);   /* float-only code for single-precision FPUs */
  g.k.freestanding = (unsigned char)(opt->freestanding != 0);
  g.k.exp_cr = (unsigned char)(opt->freestanding == 0);   /* sigmoid: a vectorised exp as accurate as expf */
  g.p = p;
  g.mp = plan;
  g.sched = sched;
  cg_ident(g.prefix, sizeof g.prefix, p->model_name ? p->model_name : "net");
  for (int i = 0; g.prefix[i]; i++)
    g.upper[i] = (char)(g.prefix[i] >= 'a' && g.prefix[i] <= 'z' ? g.prefix[i] - 'a' + 'A' : g.prefix[i]);
  for (int i = 0; i < p->funcs.len; i++) {
    char a[128], b[128];
    cg_ident(a, sizeof a, p->funcs.data[i]->name);
    for (int k = 0; api[k]; k++)
      if (!strcmp(a, api[k])) {
        fprintf(stderr, "ctc: error: entry '%s' clashes with the generated %s_%s\n", a, g.prefix, a);
        return -1;
      }
    for (int j = 0; j < i; j++) {
      cg_ident(b, sizeof b, p->funcs.data[j]->name);
      if (!strcmp(a, b)) {
        fprintf(stderr, "ctc: error: two entries are both named '%s'\n", a);
        return -1;
      }
    }
  }
  if (opt->freestanding && cg_fs_refuse(p, opt) < 0) return -1;
  g.sig = calloc((size_t)p->funcs.len + 1, sizeof(Buf));
  g.doc = calloc((size_t)p->funcs.len + 1, sizeof(Buf));
  g.wrap = calloc((size_t)p->funcs.len + 1, sizeof(Buf));
  CHECK(g.sig && g.doc && g.wrap);

  Buf entries = {0}, init = {0}, data = {0}, desc = {0}, kern = {0};
  int rc = 0;
  cg_names_init(&g.fns, g.prefix);
  for (int fi = 0; fi < p->funcs.len && !rc; fi++) rc = emit_entry(&g, fi, &entries);
  cg_names_free(&g.fns);
  check_state_params(p);
  if (rc) {
    for (int fi = 0; fi < p->funcs.len; fi++) {
      cg_buf_free(&g.sig[fi]);
      cg_buf_free(&g.wrap[fi]);
      cg_buf_free(&g.doc[fi]);
    }
    free(g.sig);
    free(g.wrap);
    free(g.doc);
    cg_buf_free(&entries);
    return -1;
  }
  if (opt->embed) cg_fs_weights(&data, p, opt->embed);
  else emit_param_data(&g, &data);
  emit_init(&g, &init);
  if (!opt->freestanding) emit_desc(&g, &desc, 0);
  cg_emit_kernels(&kern, &g.k);
  Buf all = {0}, math = {0}, pro = {0};   /* --freestanding: the calls the text makes, its prologue */
  if (opt->freestanding) {
    Buf *parts[] = {&kern, &data, &init, &entries};   /* written without OpenMP or BLAS branches */
    for (int i = 0; i < 4; i++) cg_puts(&all, parts[i]->s ? parts[i]->s : "");
    rc = cg_fs_scan(all.s ? all.s : "", opt, &math);
    cg_fs_prologue(&pro, h_name, math.s ? math.s : "", opt);
  }

  char src[1024];
  comment_text(src, sizeof src, ir_source_name(p));
  char stem[256];
  snprintf(stem, sizeof stem, "%s", basename_of(h_name));
  char *dot = strrchr(stem, '.');
  if (dot) *dot = 0;
  const MemPlan *mp = plan;
  FILE *c = c_out;
  char cls[256];
  comment_text(cls, sizeof cls, p->class_name ? p->class_name : "?");
  fprintf(c, "/* %s.c - generated by ctc from %s (class %s). Do not edit.\n *\n", stem, src, cls);
  fprintf(c, " * Entry points:\n");
  for (int fi = 0; fi < p->funcs.len; fi++) fprintf(c, " *   %s\n", g.doc[fi].s);
  if (opt->embed)
    fprintf(c, " * Arena (RAM): %lld bytes of activations; the parameters are const arrays (flash).\n",
            (ll)(mp->arena_bytes - mp->params_bytes));
  else
    fprintf(c, " * Arena: %lld bytes = parameters %lld + activations %lld (64-byte aligned).\n%s",
            (ll)mp->arena_bytes, (ll)mp->params_bytes, (ll)(mp->arena_bytes - mp->params_bytes),
            opt->freestanding ? "" : " *\n");
  if (opt->freestanding) {
    fprintf(c, " * Freestanding: <stddef.h>, <stdint.h>, <string.h> and the math functions %s.h names;\n"
               " * build it with any C11 compiler (-ffreestanding), e.g. cc -std=c11 -O2 -c %s.c */\n%s",
            stem, stem, pro.s);
  } else {
    fprintf(c, " * Build a program around it with the runtime (RT = ctc's runtime_min folder):\n"
               " *   cc -std=c11 -O3 -march=native -fno-math-errno -fno-trapping-math -DCTC_MAIN %s.c\n"
               " *      -I$RT $RT/rt_*.c -lm -o %s\n"
               " * The two -f flags change no value; without them GCC keeps loops over sqrtf and\n"
               " * selects scalar. Add -DCTC_HAVE_CBLAS ... -lopenblas to run GEMMs with OpenBLAS,\n"
               " * and -fopenmp to run the outer loops of the heavy ops in parallel. Usage: ./%s --help */\n",
            stem, stem, stem);
    fprintf(c, "#include \"%s\"\n#include \"ctc_rt.h\"\n\n", h_name);
    fprintf(c, "#include <math.h>\n#include <stdint.h>\n#include <string.h>\n");
    fprintf(c, "#ifdef CTC_HAVE_CBLAS\n#include <cblas.h>\n#endif\n\n");
    fprintf(c, "#ifdef _OPENMP\n#define CTC_OMP_FOR _Pragma(\"omp parallel for\")\n#else\n#define CTC_OMP_FOR\n#endif\n\n");
    if (g.opt.profile) fputs(cg_prof_macros, c);
  }
  if (kern.len) fputs(kern.s, c);
  if (data.len) fputs(data.s, c);
  fputs(init.s, c);
  if (entries.len) fputs(entries.s, c);
  if (desc.len) fputs(desc.s, c);
  if (!opt->freestanding)
    fprintf(c, "\n#ifdef CTC_MAIN\nint main(int argc, char **argv) { return ctc_main(argc, argv, &%s_desc); }\n#endif\n",
            g.prefix);

  if (opt->freestanding) {
    FsHeader fh = {p, plan, opt, g.prefix, g.upper, src, cls, math.s ? math.s : "", g.sig, g.doc, stem};
    cg_fs_header(h_out, &fh);
  } else {
    emit_header(&g, h_out, src);
  }

  for (int fi = 0; fi < p->funcs.len; fi++) {
    cg_buf_free(&g.sig[fi]);
    cg_buf_free(&g.wrap[fi]);
    cg_buf_free(&g.doc[fi]);
  }
  free(g.sig);
  free(g.wrap);
  free(g.doc);
  cg_buf_free(&entries);
  cg_buf_free(&init);
  cg_buf_free(&data);
  cg_buf_free(&desc);
  cg_buf_free(&kern);
  cg_buf_free(&all);
  cg_buf_free(&math);
  cg_buf_free(&pro);
  return rc || ferror(c_out) || ferror(h_out) ? -1 : 0;
}

/* ---- shared with codegen_cuda/ (cg_int.h) ------------------------------------------- */

static void gen_for(Gen *g, const Program *p, const MemPlan *mp, const char *prefix) {
  memset(g, 0, sizeof *g);
  g->p = p;
  g->mp = mp;
  snprintf(g->prefix, sizeof g->prefix, "%s", prefix);
  for (int i = 0; g->prefix[i]; i++)
    g->upper[i] = (char)(g->prefix[i] >= 'a' && g->prefix[i] <= 'z' ? g->prefix[i] - 'a' + 'A' : g->prefix[i]);
}

void cg_emit_host_init(Buf *data, Buf *init, Kernels *k, const Program *p, const MemPlan *mp, const char *prefix) {
  Gen g;
  gen_for(&g, p, mp, prefix);
  g.no_error = 1;   /* <prefix>_host_t: the arena alone */
  emit_param_data(&g, data);
  emit_init(&g, init);
  for (int t = 0; t < DT_COUNT; t++)
    k->uniform[t] |= g.k.uniform[t], k->normal[t] |= g.k.normal[t], k->trunc_normal[t] |= g.k.trunc_normal[t];
}

void cg_emit_desc_for(Buf *b, const Program *p, const MemPlan *mp, const char *prefix, int device_params) {
  Gen g;
  gen_for(&g, p, mp, prefix);
  emit_desc(&g, b, device_params);
}

const char *cg_comment_text(char *buf, size_t cap, const char *s) { return comment_text(buf, cap, s); }

const char *cg_c_prefix(const Program *p, char *buf, size_t cap) {
  char b[64];   /* the size of Gen.prefix, as cg_c_emit_opts makes it */
  cg_ident(b, sizeof b, p->model_name ? p->model_name : "net");
  snprintf(buf, cap, "%s", b);
  return buf;
}

void cg_index_site(Buf *b, const Func *f, const Inst *in, const char *index) {
  char where[256];
  cg_where(where, sizeof where, in->loc);
  cg_puts(b, "  {");
  c_string(b, f->name);
  cg_printf(b, ", \"%s\", ", ir_ops[in->op].name);
  c_string(b, index);
  cg_puts(b, ", ");
  c_string(b, where);
  cg_puts(b, ", ");
  line_text(b, in->loc);
  const char *phase = in->phase == PH_BACKWARD    ? "CTC_PROF_BACKWARD"
                      : in->phase == PH_OPTIMIZER ? "CTC_PROF_OPTIMIZER"
                                                  : "CTC_PROF_FORWARD";
  cg_printf(b, ", %s},\n", phase);
}
