/* decode.c - the KV-cache entry derived from forward (issue 17, item 3).
 *
 * A language model's forward maps token windows idx [B, T] to logits; generating
 * text one token at a time with it recomputes the whole window per token. For a
 * model whose attention is causal, `decode` computes the logits of one new token
 * at run-time position `pos` from per-layer key and value caches kept in the
 * arena (state tensors "ctc.kv.<i>.k" / "ctc.kv.<i>.v", sized by the window S =
 * forward's T), writing the new token's key and value into them.
 *
 * It is derived by staging the unchanged forward once more, on idx [1, 1], with
 * L->T->dec set; a few op handlers ask this file first (the dec_* hooks):
 *   - arange: an arange whose length was S when forward was staged (the
 *     positions 0..T-1) becomes [pos];
 *   - matmul q @ k^T with q [..., 1, D] and k^T [..., D, 1] both computed from the
 *     input (attention scores): k^T is written into column pos of its cache
 *     [..., D, S], and the scores are q @ cache, [..., 1, S] (marked: their last
 *     axis is the key position);
 *   - masked_fill of marked scores with -inf, whose mask was verified causal when
 *     forward was staged (the probe below: the mask evaluated at compile time is
 *     True exactly above the diagonal), masks the positions after pos instead;
 *   - softmax over the last axis, and scaling by a number, keep the mark;
 *   - matmul of masked, softmaxed scores with v [..., 1, Dv]: v is written into
 *     row pos of its cache [..., S, Dv], and the result is scores @ cache;
 *   - F.scaled_dot_product_attention(is_causal=True) does all of this directly.
 * Any other use of a marked tensor (t_val refuses to read one), an arange whose
 * length depends on T in another way, or an unverified mask abandons the
 * derivation (no decode entry; compiler notes why): the result is then never a
 * silently different computation. Positions after pos hold stale or zero keys
 * that the mask removes, so logits at every position equal forward's. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "torch_int.h"

enum { DEC_PROBE = 1, DEC_DECODE = 2, DEC_PREFILL = 3 };
enum { MK_NONE = 0, MK_SCORES = 1, MK_MASKED = 2, MK_SOFTMAX = 3 };

struct Decode {
  int mode;
  /* recorded while forward is staged (DEC_PROBE), consumed in the same order by the decode staging */
  Vec(int64_t) iota;     /* per compiled arange: its length, start and step */
  Vec(int) fill;         /* per masked_fill: 1 if its mask was verified causal with -inf */
  int ncausal;           /* verified causal masks and causal scaled_dot_product_attention calls */
  Vec(ValId) assume;     /* forward's verified masks read from buffers: decode relies on their values */
  Vec(const char *) assume_why;
  int iiota, ifill;      /* decode: records consumed */
  int64_t S;             /* the window: forward's T */
  PV *pos;               /* decode: the position input, i64[] */
  int layer;             /* caches made so far */
  int vdone;             /* value caches written (one per key cache) */
  int allow;             /* inside a hook: t_val may read marked tensors, the hooks stand aside */
  jmp_buf *fail;
  char why[512];
};

static CTC_NORETURN void dec_fail(L *L, Span at, const char *fmt, ...) CTC_PRINTF(3, 4);
static void dec_fail(L *L, Span at, const char *fmt, ...) {
  Decode *d = L->T->dec;
  va_list ap;
  va_start(ap, fmt);
  int n = snprintf(d->why, sizeof d->why, "%s:%d: ", at.file ? at.file->path : "?", at.line);
  vsnprintf(d->why + n, sizeof d->why - (size_t)n, fmt, ap);
  va_end(ap);
  longjmp(*d->fail, 1);
}

static int marked(PV *x) { return x && x->k == PV_TENSOR && x->t->dec_mark; }
static PV *mark(PV *x, int m, int layer) {
  x->t->dec_mark = m;
  x->t->dec_layer = layer;
  return x;
}

void dec_check_read(L *L, Span at, const Tensor *t) {
  Decode *d = L->T->dec;
  if (d && d->mode != DEC_PROBE && t->dec_mark && !d->allow)
    dec_fail(L, at, "the attention scores are used by an operation the KV-cache derivation does not know (it "
                    "knows scaling, a causal masked_fill, softmax over the last axis and the product with v)");
}

/* Rounding to bf16 / f16 is elementwise, so the decode row's scores round as forward's did:
 * autocast.c's ac_round reads a marked tensor with this on, and marks its result alike. */
void dec_allow(L *L, int on) {
  if (L->T->dec) L->T->dec->allow = on;
}

/* ---- the probe: compile-time values of a mask ---- */

/* The values of v (numel doubles into out) if it is computable at compile time (ir/attn.c) */
static int const_eval(Program *P, Func *f, ValId v, double *out, Arena *a, int depth) {
  return ir_const_eval(P, f, v, out, a, depth);
}

/* Is mask (broadcast against scores [..., T, T]) True exactly above the diagonal? */
static int causal_mask(L *L, Span at, PV *mask, const Type *scores) {
  int64_t T = scores->dims[scores->ndim - 1];
  Type mt = mask->t->type;
  if (scores->ndim < 2 || scores->dims[scores->ndim - 2] != T || mt.ndim < 2 || mt.dims[mt.ndim - 1] != T ||
      mt.dims[mt.ndim - 2] != T)
    return 0;
  int64_t n = ir_numel(&mt);
  const double *vals = NULL;
  if (mask->t->data && !mask->t->slot) {
    vals = mask->t->data;
  } else {
    Func *f = L->T->fn;
    double *buf = arena_alloc(L->a, sizeof(double) * (size_t)(n + 1));
    if (!const_eval(L->T->prog, f, t_val(L, at, mask), buf, L->a, 0)) return 0;
    vals = buf;
  }
  for (int64_t i = 0; i < n; i++) {
    int64_t j = i % T, r = i / T % T;
    if ((vals[i] != 0) != (j > r)) return 0;
  }
  if (!(mask->t->data && !mask->t->slot)) {   /* read from buffers: a weights file must keep them (dec_stage) */
    const char *file = at.file && at.file->path ? at.file->path : ir_source_name(L->T->prog);
    const char *base = strrchr(file, '/');
    vec_push(L->a, &L->T->dec->assume, t_val(L, at, mask));
    vec_push(L->a, &L->T->dec->assume_why,
             arena_printf(L->T->prog->arena, "the decode entry takes its values at %s:%d as a causal mask",
                          base ? base + 1 : file, at.line));
  }
  return 1;
}

/* ---- the hooks ---- */

PV *dec_iota(L *L, Span at, int64_t start, int64_t step, int64_t n, DType dt) {
  Decode *d = L->T->dec;
  if (d->allow || d->mode == DEC_PREFILL) return NULL;
  if (d->mode == DEC_PROBE) {
    int64_t r[3] = {n, start, step};
    for (int k = 0; k < 3; k++) vec_push(L->a, &d->iota, r[k]);
    return NULL;
  }
  if (3 * d->iiota + 2 >= d->iota.len) dec_fail(L, at, "an arange that forward did not make");
  const int64_t *r = &d->iota.data[3 * d->iiota++];
  if (r[0] == n && r[1] == start && r[2] == step) return NULL;   /* independent of the sequence length */
  if (r[0] == d->S && r[1] == 0 && r[2] == 1 && n == 1 && start == 0) {   /* the positions 0..T-1 */
    int64_t one = 1;
    PV *p = t_reshape(L, at, d->pos, &one, 1);
    return dt == DT_I64 ? p : t_cast(L, at, p, dt);
  }
  dec_fail(L, at, "an arange whose length depends on the sequence length other than as the positions 0..T-1");
}

/* [S] (axis last) or [S, 1] positions 0..S-1 as i64 */
static PV *positions(L *L, Span at, int column) {
  Decode *d = L->T->dec;
  Type t = {0};
  t.dtype = DT_I64;
  t.ndim = 1;
  t.dims[0] = d->S;
  int64_t attr[2] = {0, 1};
  PV *p = t_wrap(L, ir_emit(L->T->prog, L->T->fn, IR_IOTA, NULL, 0, t, attr, 2, 0, at, "kv_pos"));
  if (column) {
    int64_t dims[2] = {d->S, 1};
    p = t_reshape(L, at, p, dims, 2);
  }
  return p;
}

/* decode: cache := where(positions == pos, x, cache) along `axis` (the last or the
 * second to last); prefill: cache := x (all positions) */
static PV *cache_write(L *L, Span at, PV *x, int axis_last, const char *kind) {
  Decode *d = L->T->dec;
  Type ct = x->t->type;
  ct.dims[axis_last ? ct.ndim - 1 : ct.ndim - 2] = d->S;
  int layer = kind[0] == 'k' ? d->layer : d->vdone;
  PV *cache = state_tensor(L, at, arena_printf(L->a, "ctc.kv.%d.%s", layer, kind), &ct, 0);
  if (d->mode == DEC_PREFILL) {
    if (!ir_type_eq(&ct, &x->t->type)) dec_fail(L, at, "a key or value of another shape than its cache");
    state_update(L, at, cache, x);
    return x;
  }
  PV *here = t_compare(L, at, OP_EQ, positions(L, at, !axis_last), d->pos);
  PV *nw = t_where(L, at, here, x, cache);
  state_update(L, at, cache, nw);
  return nw;
}

/* Does value v depend on an input of the function? */
static int from_input(Func *f, ValId v, unsigned char *seen) {
  if (seen[v]) return seen[v] == 2;
  seen[v] = 1;
  Value *val = ir_val(f, v);
  if (val->kind == V_INPUT) return seen[v] = 2, 1;
  if (val->kind != V_INST) return 0;
  const Inst *in = &f->insts.data[val->def];
  for (int k = 0; k < in->nargs; k++)
    if (from_input(f, in->args[k], seen)) return seen[v] = 2, 1;
  return 0;
}

static int depends_on_input(L *L, Span at, PV *x) {
  Func *f = L->T->fn;
  ValId v = t_val(L, at, x);
  unsigned char *seen = arena_alloc(L->a, (size_t)f->values.len + 1);
  memset(seen, 0, (size_t)f->values.len + 1);
  return from_input(f, v, seen);
}

PV *dec_matmul(L *L, Span at, PV *a, PV *b) {
  Decode *d = L->T->dec;
  if (d->mode == DEC_PROBE || d->allow || a->k != PV_TENSOR || b->k != PV_TENSOR || marked(b)) return NULL;
  Type ta = a->t->type, tb = b->t->type;
  int64_t qn = d->mode == DEC_PREFILL ? d->S : 1;   /* query positions */
  if (marked(a)) {   /* weights @ v */
    if (a->t->dec_mark != MK_SOFTMAX)
      dec_fail(L, at, "attention scores multiply v before a causal mask and softmax");
    if (tb.ndim < 2 || tb.dims[tb.ndim - 2] != qn || !depends_on_input(L, at, b))
      dec_fail(L, at, "attention weights multiply something other than the values of the new token");
    if (d->vdone != a->t->dec_layer) dec_fail(L, at, "attention layers interleave");
    d->allow = 1;
    PV *vc = cache_write(L, at, b, 0, "v");
    d->vdone++;
    int m = a->t->dec_mark;
    a->t->dec_mark = 0;
    PV *r = t_matmul(L, at, a, vc);
    a->t->dec_mark = m;
    d->allow = 0;
    return r;
  }
  /* q @ k^T: q [..., 1, D], k^T [..., D, 1] (prefill: T for 1), both from the input */
  if (ta.ndim < 2 || tb.ndim < 2 || ta.dims[ta.ndim - 2] != qn || tb.dims[tb.ndim - 1] != qn || ta.dims[ta.ndim - 1] == 1 ||
      !depends_on_input(L, at, a) || !depends_on_input(L, at, b))
    return NULL;
  if (d->vdone != d->layer) dec_fail(L, at, "attention scores of a layer whose values were not used");
  d->allow = 1;
  PV *kc = cache_write(L, at, b, 1, "k");
  PV *r = t_matmul(L, at, a, kc);
  d->allow = 0;
  return mark(r, MK_SCORES, d->layer++);
}

PV *dec_masked_fill(L *L, Span at, PV *x, PV *mask, PV *value) {
  Decode *d = L->T->dec;
  if (d->mode == DEC_PROBE) {
    int ok = x->k == PV_TENSOR && mask->k == PV_TENSOR && pv_is_num(value) && pv_num(value) == -INFINITY &&
             causal_mask(L, at, mask, &x->t->type);
    vec_push(L->a, &d->fill, ok);
    d->ncausal += ok;
    return NULL;
  }
  if (d->allow) return NULL;
  int ok = d->ifill < d->fill.len && d->fill.data[d->ifill];
  d->ifill++;
  if (!marked(x)) {
    if (ok) dec_fail(L, at, "a causal mask applied to scores that were not recognised as q @ k^T of the new token");
    return NULL;
  }
  if (!ok) dec_fail(L, at, "masked_fill of attention scores whose mask is not the causal one (True above the diagonal, "
                           "filled with -inf)");
  if (x->t->dec_mark != MK_SCORES) dec_fail(L, at, "attention scores masked twice");
  d->allow = 1;
  PV *after = d->mode == DEC_PREFILL ? mask : t_compare(L, at, OP_GT, positions(L, at, 0), d->pos);
  PV *r = t_cast(L, at, t_where(L, at, after, value, x), x->t->type.dtype);
  d->allow = 0;
  return mark(r, MK_MASKED, x->t->dec_layer);
}

PV *dec_softmax(L *L, Span at, PV *x, int64_t dim, int log) {
  Decode *d = L->T->dec;
  if (d->mode == DEC_PROBE || d->allow || !marked(x)) return NULL;
  int nd = x->t->type.ndim;
  if (log || (dim != -1 && dim != nd - 1) || x->t->dec_mark != MK_MASKED)
    dec_fail(L, at, "a %s of attention scores %s", log ? "log_softmax" : "softmax",
             x->t->dec_mark != MK_MASKED ? "before the causal mask" : "over another axis than the key positions");
  d->allow = 1;
  int m = x->t->dec_mark, layer = x->t->dec_layer;
  x->t->dec_mark = 0;   /* t_softmax's own steps see an ordinary tensor */
  PV *r = t_softmax(L, at, x, nd - 1, 0);
  x->t->dec_mark = m;
  d->allow = 0;
  return mark(r, MK_SOFTMAX, layer);
}

PV *dec_binary(L *L, Span at, int op, PV *a, PV *b) {
  Decode *d = L->T->dec;
  if (d->mode == DEC_PROBE || d->allow || (!marked(a) && !marked(b))) return NULL;
  PV *x = marked(a) ? a : b, *c = marked(a) ? b : a;
  int scalar = pv_is_num(c) || (c->k == PV_TENSOR && ir_numel(&c->t->type) == 1 && !c->t->dec_mark);
  if (!scalar || !(op == OP_MUL || (op == OP_DIV && x == a)) || x->t->dec_mark == MK_SOFTMAX)
    dec_fail(L, at, "attention scores combined with another tensor (only scaling by a number is known)");
  d->allow = 1;
  int m = x->t->dec_mark, layer = x->t->dec_layer;
  x->t->dec_mark = 0;
  PV *r = t_binary(L, at, op, a, b);
  x->t->dec_mark = m;
  d->allow = 0;
  return mark(r, m, layer);
}

PV *dec_attend(L *L, Span at, PV *q, PV *k, PV *v, double scale) {
  Decode *d = L->T->dec;
  if (d->mode == DEC_PROBE) {
    d->ncausal++;
    return NULL;
  }
  if (d->allow) return NULL;
  Type tq = q->t->type;
  int prefill = d->mode == DEC_PREFILL;
  if (tq.dims[tq.ndim - 2] != (prefill ? d->S : 1) || k->t->type.dims[2] != tq.dims[2])
    dec_fail(L, at, "causal attention of another length than the window");
  d->allow = 1;
  int64_t perm[4] = {0, 1, 3, 2};
  PV *kt = t_permute(L, at, k, perm, 4);
  if (d->vdone != d->layer) dec_fail(L, at, "attention layers interleave");
  PV *kc = cache_write(L, at, kt, 1, "k");
  int layer = d->layer++;
  PV *s = t_matmul(L, at, t_binary(L, at, OP_MUL, q, pv_float(L, scale)), kc);
  PV *after = t_compare(L, at, OP_GT, positions(L, at, 0), prefill ? positions(L, at, 1) : d->pos);
  s = t_where(L, at, after, pv_float(L, -INFINITY), s);
  PV *w = t_softmax(L, at, s, 3, 0);
  PV *vc = cache_write(L, at, v, 0, "v");
  (void)layer;
  d->vdone++;
  PV *r = t_matmul(L, at, w, vc);
  d->allow = 0;
  return r;
}

/* ---- staging ---- */

void dec_probe_begin(L *L) {
  Decode *d = arena_alloc(L->a, sizeof *d);
  memset(d, 0, sizeof *d);
  d->mode = DEC_PROBE;
  L->T->dec = d;
}

Decode *dec_probe_end(L *L) {
  Decode *d = L->T->dec;
  L->T->dec = NULL;
  return d;
}

/* What staging a function changes in the interpreter and the library. */
typedef struct Saved {
  Env *env;
  int depth, nstack, staged_depth, grad_mode, nparams, nfuncs;
  struct Cont *cont;
  jmp_buf *on_error;
  Diag *diag;
} Saved;

/* Stages `decode` (prefill = 0) or `prefill` (1) from forward (method fwdm; fwd its
 * staged entry, `it` the type of its token input); NULL, or why it failed (what the
 * failed staging added is dropped). */
static const char *stage_one(L *L, Decode *d, Func *fwd, PV *fwdm, Type it, int prefill) {
  Program *P = L->T->prog;
  d->mode = prefill ? DEC_PREFILL : DEC_DECODE;
  d->layer = d->vdone = d->iiota = d->ifill = 0;
  d->why[0] = '\0';
  Saved s = {L->env, L->depth, L->nstack, L->staged_depth, L->T->grad_mode, P->params.len, P->funcs.len, L->cont,
             L->on_error, L->d};
  jmp_buf jb;
  char *cap = arena_alloc(L->a, 512);
  memset(cap, 0, 512);
  FILE *sink = fmemopen(cap, 511, "w");
  if (!sink) return "could not capture diagnostics";
  Diag quiet;
  diag_init(&quiet, sink);
  quiet.color = 0;
  L->T->dec = d;
  d->fail = &jb;
  L->on_error = &jb;
  L->d = &quiet;
  const char *volatile why = NULL;
  if (setjmp(jb)) {
    fflush(sink);
    why = d->why[0] ? d->why : cap[0] ? cap : "staging failed";
  } else {
    Node *def = fwdm->fn->node;
    Func *f = ir_func_new(P, prefill ? "prefill" : "decode", def->span);
    f->kind = FK_FUNCTION;
    f->derived = 1;
    L->T->fn = f;
    f->grad_mode = NG_ALL;
    L->T->grad_mode = NG_ALL;
    L->T->param_cur = arena_alloc(L->a, sizeof(ValId) * (size_t)(P->params.len + 1));
    for (int i = 0; i < P->params.len; i++) L->T->param_cur[i] = -1;
    Type t1 = it;
    t1.dims[0] = 1;
    if (!prefill) t1.dims[1] = 1;
    const char *iname = ir_val(fwd, fwd->inputs.data[0])->name;
    PV *idx = t_wrap(L, ir_add_input(P, f, iname, t1));
    if (!prefill) {
      Type pt = {0};
      pt.dtype = DT_I64;
      d->pos = t_wrap(L, ir_add_input(P, f, "pos", pt));
    }
    PV *r = call_value(L, def->span, fwdm, &idx, 1, NULL, NULL, 0);
    if (pv_is_seq(r) && r->n >= 1) r = r->items[0];   /* (logits, loss) */
    if (r->k != PV_TENSOR) dec_fail(L, def->span, "forward on one token returned a %s", pv_kind_name(r));
    if (!d->layer) dec_fail(L, def->span, "no attention was recognised on one token");
    if (d->layer != d->ncausal)   /* every causal attention of forward must have been rewritten */
      dec_fail(L, def->span, "forward has %d causal attention%s, %d of them recognised on one token", d->ncausal,
               d->ncausal == 1 ? "" : "s", d->layer);
    if (d->vdone != d->layer) dec_fail(L, def->span, "attention scores whose values were never used");
    if (marked(r)) dec_fail(L, def->span, "forward returned attention scores");
    if (!prefill) ir_add_output(P, f, t_val(L, def->span, r), "logits");   /* prefill: the caches only */
  }
  L->T->fn = NULL;
  L->T->param_cur = NULL;
  attr_cache_restore(L);
  L->env = s.env;
  L->depth = s.depth;
  L->nstack = s.nstack;
  L->staged_depth = s.staged_depth;
  L->cont = s.cont;
  L->T->grad_mode = s.grad_mode;
  L->on_error = s.on_error;
  L->d = s.diag;
  L->T->dec = NULL;
  fclose(sink);
  if (!why) return NULL;
  P->funcs.len = s.nfuncs;
  P->params.len = s.nparams;
  char *w = arena_strdup(L->a, why);
  char *nl = strchr(w, '\n');
  if (nl) *nl = '\0';
  return w;
}

/* Stages `decode` and then `prefill` (the caller puts the model in eval mode); NULL when
 * they were staged or there is nothing to derive (no attention, no token input), else
 * why not. */
const char *dec_stage(L *L, Decode *d, PV *model, Span top) {
  if (!d || !model) return NULL;
  Program *P = L->T->prog;
  Func *fwd = P->funcs.len ? P->funcs.data[0] : NULL;
  if (!fwd || strcmp(fwd->name, "forward") || fwd->inputs.len < 1 || (!d->ncausal && !d->fill.len)) return NULL;
  Type it = *ir_type(fwd, fwd->inputs.data[0]);
  if (it.ndim != 2 || (it.dtype != DT_I64 && it.dtype != DT_I32)) return NULL;
  PV *fwdm = getattr_opt(L, top, model, "forward");
  if (!fwdm || fwdm->k != PV_BOUND || fwdm->fn->k != PV_FUNC) return NULL;
  d->S = it.dims[1];
  const char *why = stage_one(L, d, fwd, fwdm, it, 0);
  if (why) return arena_printf(L->a, "no KV-cache decode entry: %s", why);
  for (int i = 0; i < d->assume.len; i++) ir_assume_params(P, fwd, d->assume.data[i], d->assume_why.data[i]);
  why = stage_one(L, d, fwd, fwdm, it, 1);
  return why ? arena_printf(L->a, "no prefill entry (decode fills its cache token by token): %s", why) : NULL;
}
