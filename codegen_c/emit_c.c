/* emit_c.c - the structure of the generated model.c / model.h.
 *
 * model.c, top to bottom:
 *   header comment (source, class, entries, arena size, how to build)
 *   includes; CTC_OMP_FOR (an OpenMP pragma under -fopenmp, else nothing)
 *   helper kernels the entries use (kernels.c)
 *   parameter data (PINIT_DATA) and <m>_arena_bytes / _init / _load / _save
 *   one function per entry (emit_entry): null checks, a pointer per tensor
 *     with its shape, each instruction's loops, the outputs copied out
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
} Gen;

/* ---- profiles (--profile) ---------------------------------------------------- */

static void c_string(Buf *b, const char *s);

/* Whether kernel k emits code (views and constants do not). */
static int kernel_has_code(const Func *f, const Kernel *kn) {
  if (kn->kind == KN_VIEW) return 0;
  for (int i = kn->first; i <= kn->last; i++)
    if (f->insts.data[i].op != IR_CONST) return 1;
  return 0;
}

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

/* {"name", CTC_F32, 2, {512, 784}, offset, NULL, 0}. Value v of an entry with
 * a run-time batch (v >= 0, f->batch_max): its batch axis is described at the
 * largest batch, whatever N this Func was staged with. */
static void tensor_desc(Buf *b, const char *name, const Type *t, int64_t offset, const Func *f, ValId v, int cplx) {
  int ax = v >= 0 && f->batch_max && f->batch_axis ? f->batch_axis[v] : -1;
  cg_puts(b, "{");
  c_string(b, name);
  cg_printf(b, ", %s, %d, {", cg_rt_dtype(t->dtype), t->ndim);
  for (int i = 0; i < t->ndim; i++)
    cg_printf(b, "%s%lld", i ? ", " : "", (ll)(i == ax ? t->dims[i] / f->batch_n * f->batch_max : t->dims[i]));
  if (!t->ndim) cg_puts(b, "0");
  cg_printf(b, "}, %lld, NULL, %d, %d}", (ll)offset, ax + 1, cplx);   /* cplx: complex64 in files */
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

void cg_entry_names(const Func *f, const FuncPlan *fp, Names *ns, const char **cname, const char **oname,
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

/* The run-time check of instruction in's index operand, before its kernel: one pass over the
 * index (no branch in it), and when a value lies outside [0, bound) the entry returns
 * CTC_ERR_INDEX with the report in m->error (freestanding: the status alone). */
static void index_check(Gen *g, CgFunc *c, const Inst *in, const char *fid, Buf *sites, int *nsites) {
  ValId v;
  int64_t bound;
  CHECK(cg_index_operand(c->f, in, &v, &bound) && c->f->values.data[v].type.dtype == DT_I64);
  int64_t n = ir_numel(&c->f->values.data[v].type);
  Buf fail = {0};
  if (g->opt.freestanding) cg_puts(&fail, "CTC_ERR_INDEX");
  else cg_printf(&fail, "ctc_index_fail(m->error, sizeof m->error, &ctc_ix_%s[%d], %%s, %lld, %lld)", fid, *nsites,
                 (ll)n, (ll)bound);
  char tb[300];
  if (cg_is_literal(c, v)) {   /* a constant outside the bound (cg_index_needs_check): the entry always fails */
    double x = c->f->insts.data[c->f->values.data[v].def].fattr;
    cg_printf(c->out, "  { /* index %lld of %s outside [0, %lld) */\n    static const int64_t ctc_v[1] = {%lld};\n"
                      "    (void)ctc_v;\n    return ", (ll)x, ir_ops[in->op].name, (ll)bound, (ll)x);
    cg_printf(c->out, fail.s, "ctc_v");
    cg_puts(c->out, ";\n  }\n");
    cg_index_site(sites, c->f, in, "a constant");
  } else {
    const char *ix = cg_ref(c, v);
    cg_printf(c->out, "  { /* %s reads %s %s: every index in [0, %lld) */\n    int ctc_bad = 0;\n", ir_ops[in->op].name, ix,
              type_str(&c->f->values.data[v].type, tb, sizeof tb), (ll)bound);
    cg_printf(c->out, "    for (int64_t i = 0; i < %lld; i++) ctc_bad |= (uint64_t)%s[i] >= %lldu;\n", (ll)n, ix, (ll)bound);
    cg_puts(c->out, "    if (ctc_bad) return ");
    cg_printf(c->out, fail.s, ix);
    cg_puts(c->out, ";\n  }\n");
    cg_index_site(sites, c->f, in, c->cname[v]);
  }
  (*nsites)++;
  cg_buf_free(&fail);
}

/* Opens loop li of L: its comment and `for`, and the names of the values its step moves,
 * `(name + t * d)`, which cg_ref gives while c->over is set (until the loop's last kernel). */
static void loop_begin(CgFunc *c, const Func *f, const KnLoops *L, int li, const char *tv, const char **over) {
  const KnLoop *lp = &L->loops.data[li];
  char where[256] = "";
  for (int k = lp->first; k < lp->first + lp->len && !where[0]; k++)
    for (int i = c->s->kernels.data[k].first; i <= c->s->kernels.data[k].last && !where[0]; i++)
      cg_where(where, sizeof where, f->insts.data[i].loc);
  cg_printf(c->out, "\n  /* for %s in range(%d): %s%sa step of %d kernel%s (steps %d..%d of %d) */\n", tv, lp->count,
            where, where[0] ? ", " : "", lp->len, lp->len == 1 ? "" : "s", lp->step0, lp->step0 + lp->count - 1,
            lp->steps);
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

/* The declarations of the tensors a function's body uses (ref), parameters first, then the
 * column scratch of the convolutions it runs (sref; NULL: all of the entry's); whether they
 * read the arena. */
static int emit_decls(Gen *g, CgFunc *c, const unsigned char *ref, const unsigned char *sref, const unsigned char *excl,
                      int looped, Buf *decl) {
  const Program *p = c->p;
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
      type_str(strided ? &f->values.data[sr].type : &val->type, tb, sizeof tb);
      if (l->base >= 0) {
        cg_printf(decl, "  const %s *%s%s = %s;  /* %s, view of %s */\n", ct, rs, cname[v],
                  cname[f->inputs.data[l->base]], tb, cname[f->inputs.data[l->base]]);
        continue;
      }
      CHECK(l->base == LOC_ARENA);
      const char *cq = readonly || view ? "const " : "";
      Buf ad = {0};   /* A + offset; with embedded weights, a parameter's const array */
      arena |= cg_fs_addr(&ad, p, g->mp, &g->opt, l->offset);
      cg_printf(decl, "  %s%s *%s%s = (%s%s *)(%s);  /* %s", cq, ct, rs, cname[v], cq, ct, ad.s, tb);
      cg_buf_free(&ad);
      char pn[256];
      if (val->kind == V_PARAM) cg_printf(decl, " %s", comment_text(pn, sizeof pn, p->params.data[val->index].name));
      if (fp->hints.update_into && fp->hints.update_into[v] >= 0)
        cg_printf(decl, " %s's new value", comment_text(pn, sizeof pn, p->params.data[fp->hints.update_into[v]].name));
      if (strided) cg_printf(decl, ", the storage of %s, read through strides", cname[sr]);
      else if (view) cg_printf(decl, ", view of %s", cname[r]);
      cg_puts(decl, " */\n");
    }
  for (int i = 0; i < f->insts.len; i++) {
    if (!sname[i] || (sref && !sref[i])) continue;
    const Inst *in = &f->insts.data[i];
    const Type *r = &f->values.data[in->res].type;
    ConvGeom cg;
    cg_conv_geom(f, in, &cg);
    Buf ad = {0};
    arena |= cg_fs_addr(&ad, p, g->mp, &g->opt, fp->scratch[i]);
    cg_printf(decl, "  %s *%s = (%s *)(%s);  /* %s[%lld] column scratch of %s: %lld images' [%lld,%lld]%s */\n",
              cg_ctype(r->dtype), sname[i], cg_ctype(r->dtype), ad.s, ir_dtype_name(r->dtype),
              (ll)(ir_scratch_bytes(f, in) / (int64_t)ir_dtype_size(r->dtype)), cname[in->res],
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
static void modfn_text(Gen *g, CgFunc *c, ModFns *mf, unsigned char *excl, int looped, Buf *out) {
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
    int arena = emit_decls(g, c, fr->ref, fr->sref, ex, looped, &decl);
    const IrScope *sc = &c->p->scopes.data[fr->scope];
    cg_printf(out, "/* %s%s%s%s: %s of entry %s */\n", sc->path, sc->cls ? " (" : "", sc->cls ? sc->cls : "",
              sc->cls ? ")" : "", phase_word(fr->phase),
              f->name);
    cg_printf(out, "static %s %s(%s_t *m", fr->fails ? "int" : "void", fr->name, g->prefix);
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

static int emit_entry(Gen *g, int fi, Buf *out) {
  const Program *p = g->p;
  const Func *f = p->funcs.data[fi];
  const FuncPlan *fp = &g->mp->funcs[fi];
  int nv = f->values.len;
  Names ns;
  cg_names_init(&ns, g->prefix);
  const char **cname = calloc((size_t)nv + 1, sizeof *cname);
  unsigned char *ref = calloc((size_t)nv + 1, 1);
  const char **oname = calloc((size_t)f->outputs.len + 1, sizeof *oname);
  const char **sname = calloc((size_t)f->insts.len + 1, sizeof *sname);
  CHECK(cname && ref && oname && sname);
  char tb[300];

  /* Names: the function's parameters first, then tensors in order of definition. */
  cg_entry_names(f, fp, &ns, cname, oname, sname);

  /* Prototype and description. */
  Buf *sig = &g->sig[fi], *doc = &g->doc[fi];
  char fname[128];
  cg_ident(fname, sizeof fname, f->name);
  int wrapped = f->batch_max && g->opt.batch_wrap;
  Buf *wsig = &g->wrap[fi], wcall = {0};
  cg_printf(sig, "int %s_%s%s(%s_t *m", g->prefix, fname, wrapped ? "_batch" : "", g->prefix);
  if (wrapped) {
    cg_printf(wsig, "int %s_%s(%s_t *m", g->prefix, fname, g->prefix);
    cg_printf(&wcall, "%s_%s_batch(m, %lld", g->prefix, fname, (ll)f->batch_max);
  }
  cg_printf(doc, "%s(", fname);
  if (f->batch_max) {   /* a run-time batch: its size, the shapes below are at batch_max */
    cg_puts(sig, ", int64_t batch");
    cg_printf(doc, "batch: 1..%lld; shapes at batch = %lld: ", (ll)f->batch_max, (ll)f->batch_max);
  }
  for (int k = 0; k < f->inputs.len; k++) {
    ValId v = f->inputs.data[k];
    const Type *t = &f->values.data[v].type;
    cg_printf(sig, ", const %s *%s", cg_ctype(t->dtype), cname[v]);
    if (wrapped) cg_printf(wsig, ", const %s *%s", cg_ctype(t->dtype), cname[v]), cg_printf(&wcall, ", %s", cname[v]);
    cg_printf(doc, "%s%s %s", k ? ", " : "", cname[v], type_str(t, tb, sizeof tb));
  }
  cg_puts(doc, ") -> ");
  for (int k = 0; k < f->outputs.len; k++) {
    const Type *t = &f->values.data[f->outputs.data[k]].type;
    cg_printf(sig, ", %s *%s", cg_ctype(t->dtype), oname[k]);
    if (wrapped) cg_printf(wsig, ", %s *%s", cg_ctype(t->dtype), oname[k]), cg_printf(&wcall, ", %s", oname[k]);
    cg_printf(doc, "%s%s %s", k ? ", " : "", oname[k], type_str(t, tb, sizeof tb));
  }
  cg_puts(sig, ")");
  if (wrapped) cg_puts(wsig, ")"), cg_puts(&wcall, ")");
  if (f->updates.len) cg_printf(doc, "; updates %d parameter%s", f->updates.len, f->updates.len == 1 ? "" : "s");
  int *order = calloc((size_t)f->updates.len + 1, sizeof *order);
  CHECK(order);
  int rc = update_order(p, f, order);

  /* Body. */
  Buf body = {0};
  CgFunc c = {.p = p, .f = f, .fp = fp, .cname = cname, .ref = ref, .out = &body, .ind = 2, .sname = sname,
              .k = &g->k, .s = g->sched[fi], .ns = &ns};
  char fid[128];
  cg_ident(fid, sizeof fid, f->name);
  const char *pt = g->opt.profile ? cg_name(&ns, "prof_t") : NULL;
  int sites = g->opt.profile || g->opt.anomaly;
  int nsite = 0;   /* --profile, --anomaly: ctc_prof_<entry>[0] is the entry, then one site per kernel with code */
  int64_t *checked = calloc((size_t)nv + 1, sizeof *checked);   /* per value: the bound it was checked against */
  CHECK(checked);
  Buf ixsites = {0};   /* the index checks' ctc_index_site rows */
  int nix = 0;
  CgDist dist;   /* distributed builds: the gradient all-reduce hooks around the kernels */
  if (cg_dist_plan(&c, fname, g->nbuckets, &dist) < 0) rc = -1;
  g->nbuckets += dist.nb;
  /* repeated steps as loops (kernels/reroll.c decides them on the kernels and the plan); not
   * where each kernel is a profile or anomaly site, or gradient buckets start after given kernels */
  KnLoops *loops = !g->opt.profile && !g->opt.anomaly && !dist.nb ? kn_reroll_loops(p->arena, f, c.s, fp) : NULL;
  int looped = loops && loops->loops.len, li = 0;
  const char **over = looped ? calloc((size_t)nv + 1, sizeof *over) : NULL;
  const char *tv = looped ? cg_name(&ns, "t") : NULL;
  CHECK(!looped || over);
  /* an optimizer's same update of each parameter as one loop over a table (kernels/foreach.c) */
  KnForeachs *fe = !g->opt.profile && !g->opt.anomaly && !dist.nb && !g->opt.embed ? kn_foreach(p->arena, f, c.s, fp) : NULL;
  int fj = 0;
  unsigned char *excl = exclusive_all(f, fp);
  /* each user module's kernels as a function (kernels/scope.c); not where kernels are profile or
   * anomaly sites, or gradient buckets start between them */
  int grouped = p->scopes.len > 1 && !sites && !dist.nb;
  int *ksc = grouped ? calloc((size_t)c.s->kernels.len + 1, sizeof *ksc) : NULL;
  int *kph = grouped ? calloc((size_t)c.s->kernels.len + 1, sizeof *kph) : NULL;
  unsigned char *sref = grouped ? calloc((size_t)f->insts.len + 1, 1) : NULL;
  ModFns mf;
  memset(&mf, 0, sizeof mf);
  mf.fr[0].body = &body, mf.fr[0].ref = ref, mf.fr[0].sref = sref, mf.fns = &g->fns;
  if (grouped) {
    CHECK(ksc && kph && sref);
    kn_kernel_scopes(p, f, c.s, looped ? loops : NULL, ksc, kph);
  }
  for (int k = 0; k < c.s->kernels.len; k++) {
    const Kernel *kn = &c.s->kernels.data[k];
    int code = kernel_has_code(f, kn), timed = pt && code;
    for (; fe && fj < fe->runs.len && fe->runs.data[fj].first < k; fj++) {}
    if (grouped && !c.over) {
      if (fe && fj < fe->runs.len && k == fe->runs.data[fj].first) modfn_enter(&c, &mf, 0, PH_OPTIMIZER);
      else if (ksc[k] >= 0) modfn_enter(&c, &mf, ksc[k], kph[k]);
    }
    if (grouped)   /* the convolutions' column scratch is declared where they run */
      for (int i = kn->first; i <= kn->last; i++) mf.fr[mf.depth].sref[i] |= sname[i] != NULL;
    int nix0 = nix;
    if (fe && fj < fe->runs.len && k == fe->runs.data[fj].first && !c.over &&
        !(looped && li < loops->loops.len && loops->loops.data[li].first < k + fe->runs.data[fj].count)) {
      cg_emit_foreach(&c, &fe->runs.data[fj]);
      k += fe->runs.data[fj].count - 1;
      continue;
    }
    if (looped && li < loops->loops.len && k == loops->loops.data[li].first)
      loop_begin(&c, f, loops, li, tv, over);
    if (!c.over && !dist.nb) {   /* a run of per-step slices of one array: one comment */
      int nview = cg_emit_view_run(&c, k, looped && li < loops->loops.len ? loops->loops.data[li].first : c.s->kernels.len);
      if (nview) {
        k += nview - 1;
        continue;
      }
    }
    if (sites && code) nsite++;
    cg_dist_hooks(&c, &dist, k, 0);
    for (int i = kn->first; i <= kn->last; i++)   /* the indices it reads lie in range, else the entry stops */
      if (cg_index_needs_check(f, &f->insts.data[i], checked))
        index_check(g, &c, &f->insts.data[i], fid, &ixsites, &nix);
    if (timed) {
      cg_printf(&body, "%s  {\n    const double %s = ctc_prof_now();\n", body.len ? "\n" : "", pt);
      c.ind = 4;
    }
    char site[160];
    snprintf(site, sizeof site, "&ctc_prof_%s[%d]", fid, nsite);
    c.prof_site = timed ? site : NULL;   /* its parallel loops report each thread's share (render_c.c) */
    cg_emit_kernel(&c, k);
    c.prof_site = NULL;
    if (timed) {
      cg_printf(&body, "    ctc_prof_record(m->prof, &ctc_prof_%s[%d], %s);\n  }\n", fid, nsite, pt);
      c.ind = 2;
    }
    for (int j = 0; g->opt.anomaly && code && j < kn->outputs.len; j++) {   /* NaN and Inf stop the entry */
      ValId v = kn->outputs.data[j];
      const Type *t = &f->values.data[v].type;
      if (t->dtype != DT_F32 && t->dtype != DT_F64) continue;
      cg_printf(&body, "  if (ctc_anomaly_check(m->error, sizeof m->error, &ctc_prof_%s[%d], \"%s\", %s, %s, %lld))\n"
                       "    return CTC_ERR_ANOMALY;\n",
                fid, nsite, cname[v], cg_ref(&c, v), cg_rt_dtype(t->dtype), (ll)ir_numel(t));
    }
    cg_dist_hooks(&c, &dist, k, 1);
    if (nix > nix0) mf.fr[mf.depth].fails = 1;   /* an index check: the function returns its status */
    if (looped && li < loops->loops.len && k == loops->loops.data[li].first + loops->loops.data[li].len - 1) {
      const KnLoop *lp = &loops->loops.data[li++];
      c.ind -= 2;
      c.over = NULL;
      memset(over, 0, sizeof *over * (size_t)(nv + 1));
      cg_puts(c.out, "  }\n");
      k = lp->first + lp->count * lp->len - 1;   /* the later steps ran in the loop */
    }
  }
  while (mf.depth > 0) modfn_close(&c, &mf);
  c.out = &body, c.ref = ref;
  free(ksc);
  free(kph);
  free(over);
  cg_dist_hooks(&c, &dist, c.s->kernels.len, 0);
  if (f->outputs.len) {
    if (body.len) cg_puts(&body, "\n");
    cg_puts(&body, "  /* outputs */\n");
  }
  for (int k = 0; k < f->outputs.len; k++) {
    ValId v = f->outputs.data[k];
    const Type *t = &f->values.data[v].type;
    if (cg_is_literal(&c, v)) {
      cg_printf(&body, "  %s[0] = ", oname[k]);
      cg_literal(&body, t->dtype, f->insts.data[f->values.data[v].def].fattr);
      cg_puts(&body, ";\n");
    } else {
      cg_printf(&body, "  memcpy(%s, %s, sizeof(%s) * %lld);\n", oname[k], cg_ref(&c, v), cg_ctype(t->dtype),
                (ll)ir_numel(t));
    }
  }

  int arena = 0;
  if (f->updates.len) {   /* those computed in place were stored into their tensors' bytes: counted, not listed */
    int inplace = 0, n = 0;
    for (int k = 0; k < f->updates.len; k++) {
      n += order[k] >= 0;
      inplace += order[k] >= 0 && in_place_update(f, fp, order[k]);
    }
    if (body.len) cg_puts(&body, "\n");
    cg_puts(&body, "  /* parameter updates (every read above saw the old values)");
    if (inplace)
      cg_printf(&body, ": %s%d computed in place above", inplace == n ? "all " : "", inplace);
    cg_puts(&body, " */\n");
  }
  for (int k = 0; k < f->updates.len && !rc; k++) {
    if (order[k] < 0 || in_place_update(f, fp, order[k])) continue;
    ValId v = f->updates.data[order[k]];
    const Param *pr = &p->params.data[f->update_params.data[order[k]]];
    int64_t off = g->mp->param_offset[f->update_params.data[order[k]]];
    const Type *t = &pr->type;
    char pn[256];
    comment_text(pn, sizeof pn, pr->name);
    arena = 1;
    if (cg_is_literal(&c, v)) {
      Buf lit = {0};
      cg_literal(&lit, t->dtype, f->insts.data[f->values.data[v].def].fattr);
      cg_printf(&body, "  *(%s *)(A + %lld) = %s;  /* %s := %s */\n", cg_ctype(t->dtype), (ll)off, lit.s, pn, lit.s);
      cg_buf_free(&lit);
    } else {
      cg_printf(&body, "  memcpy(A + %lld, %s, %lld);  /* %s := %s */\n", (ll)off, cg_ref(&c, v),
                (ll)(ir_numel(t) * (int64_t)ir_dtype_size(t->dtype)), pn, cname[v]);
    }
  }

  /* Declarations of the tensors the entry's own body uses: parameters, then the rest. */
  Buf decl = {0}, fns = {0};
  if (grouped) modfn_text(g, &c, &mf, excl, looped, &fns);   /* after the body: the entry's ref is complete */
  arena |= emit_decls(g, &c, ref, grouped ? sref : NULL, excl, looped, &decl);
  free(excl);

  char where[256];
  cg_where(where, sizeof where, f->loc);
  if (sites) {   /* --profile, --anomaly: what each kernel is */
    cg_printf(out, "static const ctc_prof_site ctc_prof_%s[] = {\n  {", fid);
    c_string(out, f->name);
    cg_puts(out, ", ");
    c_string(out, arena_printf(p->arena, "entry %s", f->name));
    cg_puts(out, ", ");
    c_string(out, where);
    cg_puts(out, ", ");
    line_text(out, f->loc);
    cg_puts(out, ", CTC_PROF_ENTRY, 0, 0, \"\"},\n");
    int *psc = calloc((size_t)c.s->kernels.len + 1, sizeof *psc), *pph = calloc((size_t)c.s->kernels.len + 1, sizeof *pph);
    CHECK(psc && pph);
    kn_kernel_scopes(p, f, c.s, NULL, psc, pph);
    for (int k = 0; k < c.s->kernels.len; k++)
      if (kernel_has_code(f, &c.s->kernels.data[k])) prof_site(out, f, c.s, k, psc[k] > 0 ? p->scopes.data[psc[k]].path : "");
    free(psc);
    free(pph);
    cg_puts(out, "};\n\n");
  }
  if (nix && !g->opt.freestanding) cg_printf(out, "static const ctc_index_site ctc_ix_%s[] = {\n%s};\n\n", fid, ixsites.s);
  cg_buf_free(&ixsites);
  free(checked);
  if (dist.tables.len) cg_puts(out, dist.tables.s);
  cg_dist_free(&dist);
  cg_puts(out, fns.len ? fns.s : "");   /* its module functions, before it */
  cg_buf_free(&fns);
  free(sref);
  if (wrapped)   /* before the entry (declared in the header), so that its body follows its name */
    cg_printf(out, "/* %s at batch %lld (%s_%s_batch takes 1..%lld) */\n%s {\n  return %s;\n}\n\n", fname,
              (ll)f->batch_max, g->prefix, fname, (ll)f->batch_max, wsig->s, wcall.s);
  cg_printf(out, "/* %s%s%s */\n", doc->s, where[0] ? "  -- " : "", where);
  cg_printf(out, "%s {\n", sig->s);
  cg_puts(out, "  if (!m || !m->arena");
  for (int k = 0; k < f->inputs.len; k++) cg_printf(out, " || !%s", cname[f->inputs.data[k]]);
  for (int k = 0; k < f->outputs.len; k++) cg_printf(out, " || !%s", oname[k]);
  if (g->opt.freestanding) {   /* the status alone */
    cg_puts(out, ") return CTC_ERR_ARG;\n");
    if (f->batch_max) cg_printf(out, "  if (batch < 1 || batch > %lld) return CTC_ERR_SHAPE;\n", (ll)f->batch_max);
  } else {   /* the status, and its detail in m->error (ctc_model_error) */
    cg_printf(out, ")\n    return m ? ctc_error_set(m->error, sizeof m->error, CTC_ERR_ARG, \"entry '%s': a NULL "
                   "argument, or the model is not initialised\") : CTC_ERR_ARG;\n", fname);
    if (f->batch_max)
      cg_printf(out, "  if (batch < 1 || batch > %lld)\n    return ctc_error_set(m->error, sizeof m->error, CTC_ERR_SHAPE, "
                     "\"entry '%s': batch %%lld is outside 1..%lld\", (long long)batch);\n",
                (ll)f->batch_max, fname, (ll)f->batch_max);
  }
  if (arena) cg_puts(out, "  unsigned char *A = m->arena;\n");
  if (decl.len) cg_puts(out, decl.s);
  if (pt) cg_printf(out, "  const double %s_entry = ctc_prof_now();\n", pt);
  if (body.len) cg_printf(out, "\n%s", body.s);
  if (pt) cg_printf(out, "  ctc_prof_record(m->prof, &ctc_prof_%s[0], %s_entry);\n", fid, pt);
  cg_puts(out, "  return CTC_OK;\n}\n\n");
  cg_buf_free(&wcall);

  cg_buf_free(&decl);
  cg_buf_free(&body);
  cg_names_free(&ns);
  free(cname);
  free(ref);
  free(oname);
  free(sname);
  free(order);
  return rc;
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
      int u = pr->init == PINIT_UNIFORM;
      cg_printf(b, "%s */\n", u ? "uniform(a, b)" : "normal(mean, std)");
      cg_printf(b, "  ctc_fill_%s_%s((%s *)(A + %lld), %lld, %d, ", u ? "uniform" : "normal", sf, ct, (ll)off, (ll)n, i);
      cg_literal(b, DT_F64, pr->init_a);
      cg_puts(b, ", ");
      cg_literal(b, DT_F64, pr->init_b);
      cg_puts(b, ");\n");
      if (u) g->k.uniform[t->dtype] = 1;
      else g->k.normal[t->dtype] = 1;
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
                  p->params.data[i].complex64);
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
        tensor_desc(b, in_names[k], &f->values.data[f->inputs.data[k]].type, 0, f, f->inputs.data[k], 0);
        cg_puts(b, ",\n");
      }
      cg_puts(b, "};\n");
    }
    if (f->outputs.len) {
      cg_printf(b, "static const ctc_tensor ctc_out_%s[] = {\n", fname);
      for (int k = 0; k < f->outputs.len; k++) {
        cg_puts(b, "  ");
        tensor_desc(b, f->out_names.data[k], &f->values.data[f->outputs.data[k]].type, 0, f, f->outputs.data[k], 0);
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
  for (int t = 0; t < DT_COUNT; t++) k->uniform[t] |= g.k.uniform[t], k->normal[t] |= g.k.normal[t];
}

void cg_emit_desc_for(Buf *b, const Program *p, const MemPlan *mp, const char *prefix, int device_params) {
  Gen g;
  gen_for(&g, p, mp, prefix);
  emit_desc(&g, b, device_params);
}

int cg_update_order(const Program *p, const Func *f, int *order) { return update_order(p, f, order); }
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
