/* script.c - a script that trains at module level. The shape of the char-level
 * lecture scripts (bigram.py, gpt.py) and many tutorials:
 *
 *     with open('input.txt', 'r', encoding='utf-8') as f: text = f.read()
 *     chars = sorted(list(set(text)))                    # the vocabulary
 *     ...; train_data, val_data = data[:n], data[n:]
 *     def get_batch(split):
 *         data = train_data if split == 'train' else val_data
 *         ix = torch.randint(len(data) - block_size, (batch_size,))
 *         x = torch.stack([data[i:i+block_size] for i in ix]); y = ... [i+1:i+block_size+1]
 *     @torch.no_grad()
 *     def estimate_loss():
 *         ...; model.eval()
 *         for split in ['train', 'val']:
 *             for k in range(eval_iters):
 *                 X, Y = get_batch(split); logits, loss = model(X, Y); losses[k] = loss.item()
 *         ...; model.train(); return out
 *     model = Model(); optimizer = torch.optim.AdamW(model.parameters(), lr=learning_rate)
 *     for iter in range(max_iters):
 *         if iter % eval_interval == 0 or iter == max_iters - 1:
 *             losses = estimate_loss(); print(f"step {iter}: train loss {losses['train']:.4f}, ...")
 *         xb, yb = get_batch('train')
 *         logits, loss = model(xb, yb); optimizer.zero_grad(set_to_none=True); loss.backward(); optimizer.step()
 *     context = torch.zeros((1, 1), dtype=torch.long); print(decode(m.generate(context, max_new_tokens=500)[0].tolist()))
 *
 * The module's code runs up to the loop (python/exec.c finds it: a module-level
 * `for` whose body calls backward() and step()); the loop and what follows never
 * run at compile time. The loop body, without the `xb, yb = get_batch(...)` line
 * and the evaluation `if`, is the entry `train_step(xb, yb)` (plus `iter` when
 * the body reads it); estimate_loss's inner loop body is the evaluation entry
 * `estimate_loss(X, Y) -> loss`; get_batch is read for its window (batch_size,
 * block_size) and its two token tensors, which the program keeps with the
 * vocabulary (Program.script). The generated program's `train` runs the loop
 * (runtime_min/rt_text.c: windows drawn by the program's RNG, the evaluation and
 * its print at the loop's steps), its `sample` the generate after it. Anything
 * of another shape is a located error naming what was expected: no part of the
 * loop runs at compile time. */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "torch_int.h"

struct Script {
  Node *loop;                 /* the module-level for */
  const char *itvar;          /* its variable (iter) */
  Node *batch;                /* `xb, yb = get_batch('train')` in its body */
  Node *getb;                 /* get_batch's def */
  Node *evif;                 /* the `if` that calls estimate_loss, or NULL */
  Node *evdef;                /* estimate_loss's def */
  const char *evname;         /* its name */
  Node *train_def, *eval_def; /* the entries' defs */
  int with_iter;              /* the body reads the loop variable: train_step's third input */
  int64_t B, T;
  TextScript *ts;
};

static Node *mk(L *L, NodeKind k, Span at) {
  Node *n = arena_alloc(L->a, sizeof *n);
  memset(n, 0, sizeof *n);
  n->kind = k;
  n->span = at;
  return n;
}

static Node *name_node(L *L, const char *name, Span at) {
  Node *n = mk(L, N_NAME, at);
  n->name = name;
  return n;
}

static int mentions(const Node *n, const char *name) {
  if (!n) return 0;
  if (n->kind == N_NAME && !strcmp(n->name, name)) return 1;
  if (mentions(n->a, name) || mentions(n->b, name) || mentions(n->c, name)) return 1;
  const NodeVec *vs[] = {&n->list, &n->list2, &n->body, &n->orelse, &n->body2};
  for (size_t k = 0; k < sizeof vs / sizeof vs[0]; k++)
    for (int i = 0; i < vs[k]->len; i++)
      if (mentions(vs[k]->data[i], name)) return 1;
  return 0;
}

/* The first node of kind k in the tree for which ok() holds (pre-order). */
static Node *find_node(Node *n, int (*ok)(const Node *, const void *), const void *ctx) {
  if (!n) return NULL;
  if (ok(n, ctx)) return n;
  Node *r;
  if ((r = find_node(n->a, ok, ctx)) || (r = find_node(n->b, ok, ctx)) || (r = find_node(n->c, ok, ctx))) return r;
  NodeVec *vs[] = {&n->list, &n->list2, &n->body, &n->orelse, &n->body2};
  for (size_t k = 0; k < sizeof vs / sizeof vs[0]; k++)
    for (int i = 0; i < vs[k]->len; i++)
      if ((r = find_node(vs[k]->data[i], ok, ctx))) return r;
  return NULL;
}

static Node *find_in_block(NodeVec *b, int (*ok)(const Node *, const void *), const void *ctx) {
  for (int i = 0; i < b->len; i++) {
    Node *r = find_node(b->data[i], ok, ctx);
    if (r) return r;
  }
  return NULL;
}

/* x.NAME(...) / NAME(...) */
static int is_call_named(const Node *n, const void *name) {
  return n->kind == N_CALL && n->a && (n->a->kind == N_ATTR || n->a->kind == N_NAME) &&
         !strcmp(n->a->name, (const char *)name);
}

static PV *eval_global(L *L, Node *e) {
  Env *saved = L->env;
  L->env = L->globals;
  PV *v = eval_expr(L, e);
  L->env = saved;
  return v;
}

static int64_t eval_count(L *L, Node *e, const char *what) {
  PV *v = eval_global(L, e);
  if (v->k != PV_INT || v->i < 1)
    lower_error(L, e->span, "%s must be a positive integer known at compile time, not %s", what, pv_kind_name(v));
  return v->i;
}

/* `A, B = F(...)` with F a module-level function: F's def (a, b the names). */
static Node *batch_call(L *L, Node *s, const char **a, const char **b) {
  if (s->kind != N_ASSIGN || s->list.len != 1 || s->a->kind != N_CALL || s->a->a->kind != N_NAME) return NULL;
  Node *t = s->list.data[0];
  if ((t->kind != N_TUPLE && t->kind != N_LIST) || t->list.len != 2 || t->list.data[0]->kind != N_NAME ||
      t->list.data[1]->kind != N_NAME)
    return NULL;
  PV *f = env_get(L->globals, s->a->a->name);
  if (!f || f->k != PV_FUNC || !f->node || f->node->kind != N_FUNCDEF) return NULL;
  *a = t->list.data[0]->name;
  *b = t->list.data[1]->name;
  return f->node;
}

/* ---- get_batch ------------------------------------------------------------------ */

static int is_randint(const Node *n, const void *ctx) {
  (void)ctx;
  return is_call_named(n, "randint") && n->list.len == 2 && n->list.data[1]->kind == N_TUPLE &&
         n->list.data[1]->list.len == 1;
}

/* data[i:i + T] */
static int is_window(const Node *n, const void *ctx) {
  (void)ctx;
  if (n->kind != N_SLICE || !n->a || !n->b || n->c || n->a->kind != N_NAME) return 0;
  const Node *u = n->b;
  return u->kind == N_BINOP && u->op == OP_ADD && u->a->kind == N_NAME && !strcmp(u->a->name, n->a->name);
}

static int is_ifexp_names(const Node *n, const void *ctx) {
  (void)ctx;
  return n->kind == N_IFEXP && n->b->kind == N_NAME && n->c->kind == N_NAME;
}

static const int32_t *token_tensor(L *L, Span at, const char *name, int32_t nvocab, int64_t *n) {
  PV *v = env_get(L->globals, name);
  Tensor *t = v && v->k == PV_TENSOR ? v->t : NULL;
  if (!t || !t->data || t->type.ndim != 1 || (t->type.dtype != DT_I64 && t->type.dtype != DT_I32))
    lower_error(L, at, "'%s' must be a module-level tensor of token ids (torch.tensor(encode(text), "
                       "dtype=torch.long) sliced), known at compile time", name);
  int64_t len = t->type.dims[0];
  int32_t *tok = arena_alloc(L->a, sizeof(int32_t) * (size_t)(len + 1));
  for (int64_t i = 0; i < len; i++) {
    double d = t->data[i];
    if (!(d >= 0 && d < nvocab))
      lower_error(L, at, "'%s'[%lld] is %g, not a token of the vocabulary (%d characters)", name, (long long)i, d,
                  (int)nvocab);
    tok[i] = (int32_t)d;
  }
  *n = len;
  return tok;
}

static void read_get_batch(L *L, struct Script *S) {
  Node *g = S->getb;
  const char *shape = arena_printf(L->a, "%s is compiled as the program's window sampler when it draws `ix = "
                                   "torch.randint(len(data) - block_size, (batch_size,))` and stacks `data[i:i + "
                                   "block_size]` from `train_data if split == 'train' else val_data`", g->name);
  Node *ri = find_in_block(&g->body, is_randint, NULL);
  Node *win = find_in_block(&g->body, is_window, NULL);
  Node *sel = find_in_block(&g->body, is_ifexp_names, NULL);
  if (!ri || !win || !sel) lower_error(L, g->span, "%s: %s not found", shape, !ri ? "torch.randint" : !win ? "the slice" :
                                                                                  "the choice of the split's tensor");
  S->B = eval_count(L, ri->list.data[1]->list.data[0], "the batch size of torch.randint");
  S->T = eval_count(L, win->b->b, "the window of get_batch's slice");
  TextScript *ts = S->ts;
  const char *tr = sel->b->name, *va = sel->c->name;
  ts->train = token_tensor(L, sel->b->span, tr, ts->nvocab, &ts->ntrain);
  ts->val = token_tensor(L, sel->c->span, va, ts->nvocab, &ts->nval);
  if (ts->ntrain <= S->T)
    lower_error(L, sel->b->span, "'%s' has %lld tokens: get_batch needs more than its window of %lld", tr,
                (long long)ts->ntrain, (long long)S->T);
  /* the split a text given at run time gets: nanoGPT's n = int(0.9 * len(data)) when that is it */
  int64_t all = ts->ntrain + ts->nval;
  double f = (double)ts->ntrain / (double)all;
  for (int d = 1; d <= 4; d++) {
    double p = 1;
    for (int k = 0; k < d; k++) p *= 10;
    double r = (double)(int64_t)(f * p + 0.5) / p;
    if ((int64_t)(r * (double)all) == ts->ntrain) {
      f = r;
      break;
    }
  }
  ts->train_fraction = f;
}

/* ---- the vocabulary -------------------------------------------------------------- */

static int32_t one_code_point(const char *s) {
  const unsigned char *u = (const unsigned char *)s;
  unsigned c = u[0];
  int len = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 0;
  if (!len) return -1;
  uint32_t cp = len == 1 ? c : len == 2 ? c & 0x1F : len == 3 ? c & 0x0F : c & 0x07;
  for (int k = 1; k < len; k++) {
    if ((u[k] & 0xC0) != 0x80) return -1;
    cp = cp << 6 | (u[k] & 0x3F);
  }
  return u[len] ? -1 : (int32_t)cp;
}

/* `chars = sorted(list(set(text)))` before the loop: a sorted list of distinct characters. */
static void read_vocab(L *L, Node *module, int at, TextScript *ts) {
  for (int i = 0; i < at; i++) {
    Node *s = module->body.data[i];
    if (s->kind != N_ASSIGN || s->list.len != 1 || s->list.data[0]->kind != N_NAME || !is_call_named(s->a, "sorted"))
      continue;
    PV *v = env_get(L->globals, s->list.data[0]->name);
    if (!v || !pv_is_seq(v) || v->n == 0) continue;
    int32_t *cp = arena_alloc(L->a, sizeof(int32_t) * (size_t)v->n);
    int ok = 1;
    for (int k = 0; k < v->n && ok; k++) {
      cp[k] = v->items[k]->k == PV_STR ? one_code_point(v->items[k]->s) : -1;
      ok = cp[k] >= 0 && (k == 0 || cp[k] > cp[k - 1]);
    }
    if (!ok) continue;
    ts->vocab = cp;
    ts->nvocab = v->n;
    return;
  }
  lower_error(L, module->body.data[at]->span, "a module-level training loop over a text needs its vocabulary before "
              "it: `chars = sorted(list(set(text)))` (a sorted list of distinct characters)");
}

/* ---- estimate_loss ----------------------------------------------------------------- */

/* `losses[k] = EXPR.item()`: EXPR */
static Node *item_store(Node *s, const char *k) {
  if (s->kind != N_ASSIGN || s->list.len != 1 || s->list.data[0]->kind != N_SUBSCRIPT) return NULL;
  Node *sub = s->list.data[0];
  if (!sub->b || sub->b->kind != N_NAME || strcmp(sub->b->name, k)) return NULL;
  Node *e = s->a;
  if (e->kind == N_CALL && e->a->kind == N_ATTR && !strcmp(e->a->name, "item") && e->list.len == 0) return e->a->a;
  return e;
}

static int is_expr_call(const Node *s) { return s->kind == N_EXPR_STMT && s->a->kind == N_CALL; }

static void read_estimate_loss(L *L, struct Script *S, TextScript *ts) {
  Node *d = S->evdef;
  const char *shape = "estimate_loss is compiled as the program's evaluation when its body is `for split in [...]:` "
                      "around `for k in range(eval_iters):` whose body takes `X, Y = get_batch(split)` and stores "
                      "`losses[k] = loss.item()`";
  Node *outer = NULL;
  int oi = 0;
  for (; oi < d->body.len && !outer; oi++)
    if (d->body.data[oi]->kind == N_FOR) outer = d->body.data[oi];
  Node *inner = NULL;
  for (int i = 0; outer && i < outer->body.len && !inner; i++)
    if (outer->body.data[i]->kind == N_FOR) inner = outer->body.data[i];
  if (!outer || !inner || inner->a->kind != N_NAME || !is_call_named(inner->b, "range") || inner->b->list.len != 1)
    lower_error(L, d->span, "%s", shape);
  ts->eval_iters = eval_count(L, inner->b->list.data[0], "estimate_loss's number of batches");
  Node *def = mk(L, N_FUNCDEF, d->span);
  def->name = S->evname;
  const char *x = NULL, *y = NULL;
  Node *ret = NULL;
  /* model.eval() and the like before the loops, the inner body, model.train() after */
  for (int i = 0; i < oi - 1; i++)
    if (is_expr_call(d->body.data[i])) vec_push(L->a, &def->body, d->body.data[i]);
  for (int i = 0; i < inner->body.len; i++) {
    Node *s = inner->body.data[i];
    const char *a, *b;
    if (!x && batch_call(L, s, &a, &b) == S->getb) {
      x = a, y = b;
      continue;
    }
    Node *e = item_store(s, inner->a->name);
    if (e && !ret) {
      ret = mk(L, N_ASSIGN, s->span);
      vec_push(L->a, &ret->list, name_node(L, "__ctc_eval_loss", s->span));
      ret->a = e;
      continue;
    }
    vec_push(L->a, &def->body, s);
  }
  if (!x || !ret) lower_error(L, inner->span, "%s: %s not found", shape, !x ? "`X, Y = get_batch(split)`" :
                                                                          "`losses[k] = loss.item()`");
  vec_push(L->a, &def->body, ret);
  for (int i = oi; i < d->body.len; i++)
    if (is_expr_call(d->body.data[i])) vec_push(L->a, &def->body, d->body.data[i]);
  Node *r = mk(L, N_RETURN, d->span);
  r->a = name_node(L, "__ctc_eval_loss", d->span);
  vec_push(L->a, &def->body, r);
  const char *ps[2] = {x, y};
  for (int k = 0; k < 2; k++) {
    Node *p = mk(L, N_PARAM, d->span);
    p->name = ps[k];
    p->op = PARAM_PLAIN;
    vec_push(L->a, &def->list, p);
  }
  S->eval_def = def;
}

/* The loop's print as a format of the step {0} and the two losses {1} {2}, with
 * Python's format specs: f"step {iter}: train loss {losses['train']:.4f}, ...".
 * NULL when a field is anything else. */
static const char *eval_format(L *L, struct Script *S, const char *losses) {
  Node *p = find_in_block(&S->evif->body, is_call_named, "print");
  if (!p || p->list.len != 1 || p->list.data[0]->kind != N_FSTR) return NULL;
  const char *s = p->list.data[0]->sval;
  size_t n = strlen(s);
  char *out = arena_alloc(L->a, 4 * n + 16);
  size_t o = 0;
  for (size_t i = 0; i < n;) {
    if ((s[i] == '{' || s[i] == '}') && s[i + 1] == s[i]) {
      out[o++] = s[i], out[o++] = s[i];
      i += 2;
      continue;
    }
    if (s[i] == '}') return NULL;
    if (s[i] != '{') {
      out[o++] = s[i++];
      continue;
    }
    size_t j = i + 1, colon = 0;
    int depth = 0;
    for (; j < n && (s[j] != '}' || depth); j++) {
      if (s[j] == '[') depth++;
      else if (s[j] == ']') depth--;
      else if (s[j] == ':' && !depth && !colon) colon = j;
      else if ((s[j] == '{' || s[j] == '!') && !colon) return NULL;
    }
    if (j >= n) return NULL;
    size_t ee = colon ? colon : j;
    char expr[128];
    size_t a = i + 1;
    while (a < ee && s[a] == ' ') a++;
    while (ee > a && s[ee - 1] == ' ') ee--;
    if (ee - a >= sizeof expr) return NULL;
    memcpy(expr, s + a, ee - a);
    expr[ee - a] = 0;
    int field = -1;
    if (!strcmp(expr, S->itvar)) field = 0;
    else if (losses) {
      for (int k = 0; k < 2 && field < 0; k++) {
        const char *split = k ? "val" : "train";
        char q1[160], q2[160];
        snprintf(q1, sizeof q1, "%s['%s']", losses, split);
        snprintf(q2, sizeof q2, "%s[\"%s\"]", losses, split);
        if (!strcmp(expr, q1) || !strcmp(expr, q2)) field = k + 1;
      }
    }
    if (field < 0) return NULL;
    o += (size_t)sprintf(out + o, "{%d", field);
    if (colon) {
      memcpy(out + o, s + colon, j - colon);
      o += j - colon;
    }
    out[o++] = '}';
    i = j + 1;
  }
  out[o] = 0;
  return out;
}

/* iter % K == 0 [or iter == N - 1]: K, and whether the last step is evaluated too */
static int is_mod_of(const Node *n, const void *var) {
  return n->kind == N_BINOP && n->op == OP_MOD && n->a->kind == N_NAME && !strcmp(n->a->name, (const char *)var);
}

static int is_eq_of(const Node *n, const void *var) {
  return n->kind == N_COMPARE && n->list.len == 2 && n->cmpops[0] == OP_EQ && n->list.data[0]->kind == N_NAME &&
         !strcmp(n->list.data[0]->name, (const char *)var) && n->list.data[1]->kind != N_INT;
}

static void note(L *L, const char *fmt_line, int line, const char *what) {
  Program *P = L->T->prog;
  P->notes = arena_printf(L->a, "%s%sline %d: %s (%s)", P->notes ? P->notes : "", P->notes ? "\n" : "", line, what,
                          fmt_line);
}

/* An `if` of logging only (prints, pass): host-only, left out of the step. */
static int only_prints(const Node *s) {
  if (s->kind == N_PASS) return 1;
  if (s->kind == N_EXPR_STMT) return is_call_named(s->a, "print");
  if (s->kind != N_IF) return 0;
  for (int i = 0; i < s->body.len; i++)
    if (!only_prints(s->body.data[i])) return 0;
  for (int i = 0; i < s->orelse.len; i++)
    if (!only_prints(s->orelse.data[i])) return 0;
  return 1;
}

/* ---- generate: what `./net sample` runs ------------------------------------------
 *
 * The script's generate is not compiled: the program's sampler (runtime_min/rt_text.c)
 * implements nanoGPT's loop, and generate is read here for it, statement by statement:
 *
 *     for _ in range(max_new_tokens):
 *         idx_cond = idx[:, -block_size:]        # or `idx if idx.size(1) <= ... else ...`;
 *                                                # without it the context is never cropped
 *         logits, _ = self(idx_cond)             # or logits = self(idx_cond) / self(...)[0]
 *         logits = logits[:, -1, :] / temperature            # the division optional
 *         if top_k is not None:                               # tests known at compile time
 *             v, _ = torch.topk(logits, min(top_k, logits.size(-1)))
 *             logits[logits < v[:, [-1]]] = -float('Inf')
 *         probs = F.softmax(logits, dim=-1)
 *         idx_next = torch.multinomial(probs, num_samples=1)  # or argmax(..., keepdim=True)
 *         idx = torch.cat((idx, idx_next), dim=1)
 *     return idx
 *
 * giving the sampler's temperature, top-k (1: greedy) and whether it crops the window.
 * Any other statement or form is a located error naming it: a generate of other logic
 * would otherwise sample silently in a way the script does not. */

enum { G_NONE, G_IDX, G_CROP, G_OUT, G_LOGITS, G_LAST, G_TOPV, G_PROBS, G_NEXT };

typedef struct Gen {
  L *L;
  Env *env;                  /* generate's parameters known at compile time, self */
  const char *self;          /* the model's name inside generate (self, or a function's first parameter) */
  int64_t T;                 /* forward's window */
  Span at;                   /* generate's def */
  const char *names[32];     /* the names bound to a step's values, with their tags */
  int tags[32], n;
  int crop, called, topk, cat, next;
  double temperature;
  int64_t top_k;             /* 0: all tokens; 1: greedy */
} Gen;

static _Noreturn void gen_refuse(Gen *G, Span at, const char *why) {
  lower_error(G->L, at, "`./net sample` runs generate as ctc's sampler (per token: forward on the context cropped to "
              "block_size, logits[:, -1, :], optionally divided by a temperature and cut to the top k, softmax, "
              "torch.multinomial or argmax, torch.cat), and %s", why);
}

static int gen_tag(Gen *G, const Node *e) {
  if (e->kind != N_NAME) return G_NONE;
  for (int i = G->n - 1; i >= 0; i--)
    if (!strcmp(G->names[i], e->name)) return G->tags[i];
  return G_NONE;
}

static void gen_bind(Gen *G, const char *name, int tag) {
  for (int i = 0; i < G->n; i++)
    if (!strcmp(G->names[i], name)) {
      G->tags[i] = tag;
      return;
    }
  if (G->n == 32) gen_refuse(G, G->at, "it names too many values");
  G->names[G->n] = name;
  G->tags[G->n++] = tag;
}

/* e's value at compile time: it must not read a step's tensors */
static PV *gen_eval(Gen *G, Node *e) {
  for (int i = 0; i < G->n; i++)
    if (G->tags[i] != G_NONE && mentions(e, G->names[i]))
      gen_refuse(G, e->span, arena_printf(G->L->a, "this expression reads '%s' where a value known at compile time "
                                          "is expected", G->names[i]));
  Env *saved = G->L->env;
  G->L->env = G->env;
  PV *v = eval_expr(G->L, e);
  G->L->env = saved;
  return v;
}

static Node *kwarg(const Node *call, const char *name, int pos) {
  for (int k = 0; k < call->list2.len; k++)
    if (call->list2.data[k]->name && !strcmp(call->list2.data[k]->name, name)) return call->list2.data[k]->a;
  return pos >= 0 && pos < call->list.len ? call->list.data[pos] : NULL;
}

static int is_int_lit(const Node *e, int64_t v) {
  if (e && e->kind == N_UNARY && e->op == OP_NEG && e->a->kind == N_INT) return e->a->ival == -v;
  return e && e->kind == N_INT && e->ival == v;
}

static int is_full_slice(const Node *e) { return e->kind == N_SLICE && !e->a && !e->b && !e->c; }

/* dim=-1 (or the last of a known rank) */
static int is_last_dim(const Node *e, int rank) { return e && (is_int_lit(e, -1) || is_int_lit(e, rank - 1)); }

/* the model called on the context: self(x) / self.forward(x) */
static int gen_forward_call(Gen *G, const Node *e, Node **arg) {
  if (e->kind != N_CALL || e->list.len < 1) return 0;
  const Node *f = e->a;
  int ok = (f->kind == N_NAME && !strcmp(f->name, G->self)) ||
           (f->kind == N_ATTR && !strcmp(f->name, "forward") && f->a->kind == N_NAME && !strcmp(f->a->name, G->self));
  if (ok) *arg = e->list.data[0];
  return ok;
}

/* what expression e is among a step's values */
static int gen_expr(Gen *G, Node *e) {
  int t = gen_tag(G, e);
  if (t != G_NONE) return t;
  Node *arg;
  if (gen_forward_call(G, e, &arg)) {
    int a = gen_expr(G, arg);
    if (a != G_IDX && a != G_CROP) gen_refuse(G, arg->span, "forward is called on something else than the context");
    G->crop = a == G_CROP;
    G->called++;
    return G_OUT;
  }
  if (e->kind == N_SUBSCRIPT) {
    int a = gen_expr(G, e->a);
    const Node *ix = e->b;
    int n = ix->kind == N_TUPLE ? ix->list.len : 1;
    Node *const *it = ix->kind == N_TUPLE ? ix->list.data : (Node *const *)&e->b;
    if (a == G_IDX && n == 2 && is_full_slice(it[0]) && it[1]->kind == N_SLICE && it[1]->a && !it[1]->b && !it[1]->c &&
        it[1]->a->kind == N_UNARY && it[1]->a->op == OP_NEG) {   /* idx[:, -block_size:] */
      PV *w = gen_eval(G, it[1]->a->a);
      if (w->k != PV_INT || w->i != G->T)
        gen_refuse(G, e->span, arena_printf(G->L->a, "this crops the context to %s tokens, where forward's window "
                                            "(block_size) is %lld", pv_repr(G->L, e->span, w), (long long)G->T));
      return G_CROP;
    }
    if (a == G_OUT && n == 1 && is_int_lit(it[0], 0)) return G_LOGITS;   /* self(x)[0] */
    if ((a == G_OUT || a == G_LOGITS) && (n == 2 || n == 3) && is_full_slice(it[0]) && is_int_lit(it[1], -1) &&
        (n == 2 || is_full_slice(it[2])))
      return G_LAST;   /* logits[:, -1, :] */
    gen_refuse(G, e->span, "this index is none of the context's crop (idx[:, -block_size:]), forward's logits "
               "(self(x)[0]) or the last position's (logits[:, -1, :])");
  }
  if (e->kind == N_IFEXP) {   /* idx if idx.size(1) <= block_size else idx[:, -block_size:] */
    if (gen_expr(G, e->b) == G_IDX && gen_expr(G, e->c) == G_CROP) return G_CROP;
    gen_refuse(G, e->span, "this conditional is not the crop `idx if idx.size(1) <= block_size else "
               "idx[:, -block_size:]`");
  }
  if (e->kind == N_BINOP && e->op == OP_DIV && gen_expr(G, e->a) == G_LAST) {   /* logits / temperature */
    PV *v = gen_eval(G, e->b);
    if (!pv_is_num(v) || v->k == PV_BOOL || !(pv_num(v) > 0))
      gen_refuse(G, e->b->span, "the temperature must be a positive number known at compile time");
    if (G->topk) gen_refuse(G, e->span, "it divides by the temperature after the top-k cut");
    G->temperature *= pv_num(v);
    return G_LAST;
  }
  if (e->kind == N_CALL && e->a->kind == N_ATTR) {
    const char *f = e->a->name;
    int recv = e->a->a->kind == N_NAME && (!strcmp(e->a->a->name, "torch") || !strcmp(e->a->a->name, "F"));
    if (!strcmp(f, "cat")) {   /* torch.cat((idx, idx_next), dim=1) */
      Node *xs = kwarg(e, "tensors", 0), *d = kwarg(e, "dim", 1);
      if (recv && xs && (xs->kind == N_TUPLE || xs->kind == N_LIST) && xs->list.len == 2 &&
          gen_expr(G, xs->list.data[0]) == G_IDX && gen_expr(G, xs->list.data[1]) == G_NEXT &&
          d && (is_int_lit(d, 1) || is_int_lit(d, -1))) {
        G->cat++;
        return G_IDX;
      }
      gen_refuse(G, e->span, "its concatenation must append the next token: torch.cat((idx, idx_next), dim=1)");
    }
    Node *x = recv ? kwarg(e, "input", 0) : e->a->a;
    int ai = recv ? 1 : 0;   /* the first argument after the tensor */
    int xt = x ? gen_expr(G, x) : G_NONE;
    if (!strcmp(f, "softmax") && xt == G_LAST && is_last_dim(kwarg(e, "dim", ai), 2)) return G_PROBS;
    if (!strcmp(f, "multinomial") && xt == G_PROBS && is_int_lit(kwarg(e, "num_samples", ai), 1) &&
        !kwarg(e, "replacement", ai + 1)) {
      G->next = 1;
      return G_NEXT;
    }
    if (!strcmp(f, "argmax") && (xt == G_LAST || xt == G_PROBS)) {
      Node *kd = kwarg(e, "keepdim", ai + 1);
      if (!is_last_dim(kwarg(e, "dim", ai), 2) || !kd || kd->kind != N_CONST || kd->op != CONST_TRUE)
        gen_refuse(G, e->span, "its argmax must keep the last dimension: argmax(x, dim=-1, keepdim=True)");
      G->next = 2;
      return G_NEXT;
    }
    if (!strcmp(f, "topk") && (xt == G_LAST)) {   /* v, _ = torch.topk(logits, min(top_k, logits.size(-1))) */
      Node *k = kwarg(e, "k", ai);
      if (k && k->kind == N_CALL && k->a->kind == N_NAME && !strcmp(k->a->name, "min") && k->list.len == 2) k = k->list.data[0];
      PV *kv = k ? gen_eval(G, k) : NULL;
      if (!kv || kv->k != PV_INT || kv->i < 1)
        gen_refuse(G, e->span, "its top k must be a positive integer known at compile time");
      G->top_k = kv->i;
      return G_TOPV;
    }
  }
  gen_refuse(G, e->span, "this expression is none of those steps");
}

static void gen_block(Gen *G, NodeVec *b);

static void gen_stmt(Gen *G, Node *s) {
  if (s->kind == N_EXPR_STMT && s->a->kind == N_STR) return;   /* a docstring */
  if (s->kind == N_IF) {   /* a test of compile-time values: its branch */
    gen_block(G, truthy(G->L, s->a->span, gen_eval(G, s->a)) ? &s->body : &s->orelse);
    return;
  }
  if (s->kind == N_ASSIGN && s->list.len == 1) {
    Node *t = s->list.data[0];
    if (t->kind == N_SUBSCRIPT && t->a->kind == N_NAME && gen_tag(G, t->a) == G_LAST) {
      /* logits[logits < v[:, [-1]]] = -float('Inf') */
      const Node *c = t->b;
      int ok = c->kind == N_COMPARE && c->list.len == 2 && c->cmpops[0] == OP_LT && c->list.data[0]->kind == N_NAME &&
               !strcmp(c->list.data[0]->name, t->a->name) && c->list.data[1]->kind == N_SUBSCRIPT &&
               gen_tag(G, c->list.data[1]->a) == G_TOPV;
      PV *v = ok ? gen_eval(G, s->a) : NULL;
      if (!ok || !pv_is_num(v) || !(pv_num(v) < -1e308))
        gen_refuse(G, s->span, "its top-k cut must be `logits[logits < v[:, [-1]]] = -float('Inf')` after "
                   "`v, _ = torch.topk(logits, k)`");
      G->topk = 1;
      return;
    }
    int r = gen_expr(G, s->a);
    if (t->kind == N_NAME) {
      gen_bind(G, t->name, r == G_OUT ? G_LOGITS : r);   /* a forward that returns the logits alone */
      return;
    }
    if ((t->kind == N_TUPLE || t->kind == N_LIST) && t->list.len == 2 && t->list.data[0]->kind == N_NAME &&
        t->list.data[1]->kind == N_NAME && (r == G_OUT || r == G_TOPV)) {
      gen_bind(G, t->list.data[0]->name, r == G_OUT ? G_LOGITS : G_TOPV);
      gen_bind(G, t->list.data[1]->name, G_NONE);
      return;
    }
  }
  gen_refuse(G, s->span, "this statement is none of those steps");
}

static void gen_block(Gen *G, NodeVec *b) {
  for (int i = 0; i < b->len; i++) gen_stmt(G, b->data[i]);
}

/* The sampler's settings from the script's call `m.generate(context, max_new_tokens=N, ...)`. */
static void read_generate(L *L, Node *call, TextScript *ts, int64_t T) {
  PV *f = eval_global(L, call->a);
  PV *self = NULL;
  int bound = f->k == PV_BOUND;   /* m.generate(...): the call's arguments start after self */
  if (bound) self = f->self, f = f->fn;
  if (f->k != PV_FUNC || !f->node || f->node->kind != N_FUNCDEF)
    lower_error(L, call->span, "`./net sample` runs the script's generate, and this one is no Python def");
  Node *def = f->node;
  Gen G0 = {.L = L, .T = T, .at = def->span, .temperature = 1.0}, *G = &G0;
  G->env = env_new(L, f->env);
  int np = def->list.len;
  if (np < 3) gen_refuse(G, def->span, "it takes no context and token count (generate(idx, max_new_tokens))");
  /* self, or generate(model, idx, max_new_tokens, ...) with the model passed first */
  G->self = def->list.data[0]->name;
  if (!self && call->list.len) self = eval_global(L, call->list.data[0]);
  if (self) env_set(L, G->env, G->self, self);
  const char *idx = def->list.data[1]->name;
  /* the parameters after the context: the call's values (known at compile time) or the defaults */
  for (int p = 2; p < np; p++) {
    Node *pn = def->list.data[p];
    if (pn->op != PARAM_PLAIN || !pn->name) continue;
    Node *a = kwarg(call, pn->name, bound ? p - 1 : p);
    PV *v = a ? eval_global(L, a) : f->defaults ? f->defaults[p] : NULL;
    if (v) env_set(L, G->env, pn->name, v);
  }
  gen_bind(G, idx, G_IDX);
  /* the body: a docstring, the loop over max_new_tokens, return idx */
  Node *loop = NULL;
  for (int i = 0; i < def->body.len; i++) {
    Node *s = def->body.data[i];
    if (s->kind == N_EXPR_STMT && s->a->kind == N_STR) continue;
    if (!loop && s->kind == N_FOR && s->a->kind == N_NAME && is_call_named(s->b, "range") && s->b->list.len == 1 &&
        !s->orelse.len) {
      loop = s;
      continue;
    }
    if (loop && s->kind == N_RETURN && s->a && s->a->kind == N_NAME && !strcmp(s->a->name, idx)) continue;
    gen_refuse(G, s->span, loop ? "after its loop it must `return idx`" : "its body must be `for _ in "
               "range(max_new_tokens):` then `return idx`");
  }
  if (!loop) gen_refuse(G, def->span, "it has no loop over the new tokens");
  gen_bind(G, loop->a->name, G_NONE);
  gen_block(G, &loop->body);
  if (G->called != 1 || !G->next || G->cat != 1)
    gen_refuse(G, loop->span, !G->called ? "its loop does not call the model" : G->called > 1 ? "its loop calls the "
               "model more than once" : !G->next ? "its loop draws no next token (torch.multinomial or argmax)" :
               "its loop must append one token a step with torch.cat");
  const char *base = strrchr(def->span.file->path, '/');
  ts->gen_where = arena_printf(L->a, "%s:%d", base ? base + 1 : def->span.file->path, def->span.line);
  ts->sample_crop = G->crop;
  ts->sample_top_k = G->next == 2 ? 1 : G->topk ? G->top_k : 0;
  ts->sample_temperature = G->temperature;
  if (G->top_k && !G->topk) gen_refuse(G, loop->span, "it takes torch.topk but never cuts the logits with it");
}

/* ---- entry points ---------------------------------------------------------------- */

void script_prepare(L *L, Node *module, int at, const LowerOptions *opt) {
  (void)opt;
  Node *loop = module->body.data[at];
  struct Script *S = arena_alloc(L->a, sizeof *S);
  memset(S, 0, sizeof *S);
  TextScript *ts = arena_alloc(L->a, sizeof *ts);
  memset(ts, 0, sizeof *ts);
  S->ts = ts;
  S->loop = loop;
  const char *base = strrchr(loop->span.file->path, '/');
  ts->where = arena_printf(L->a, "%s:%d", base ? base + 1 : loop->span.file->path, loop->span.line);
  if (loop->a->kind != N_NAME || !is_call_named(loop->b, "range") || loop->b->list.len != 1 || loop->orelse.len)
    lower_error(L, loop->span, "a module-level training loop is compiled as the program's `train` when it is `for iter "
                "in range(max_iters):` (it never runs at compile time)");
  S->itvar = loop->a->name;
  ts->steps = eval_count(L, loop->b->list.data[0], "the number of steps of the training loop");
  read_vocab(L, module, at, ts);
  /* the loop body: the batch, the evaluation `if`, host-only prints, the step */
  Node *def = mk(L, N_FUNCDEF, loop->span);
  def->name = "train_step";
  const char *x = NULL, *y = NULL, *losses = NULL;
  for (int i = 0; i < loop->body.len; i++) {
    Node *s = loop->body.data[i];
    const char *a, *b;
    Node *g = !x ? batch_call(L, s, &a, &b) : NULL;
    if (g) {
      S->batch = s, S->getb = g, x = a, y = b;
      continue;
    }
    if (s->kind == N_IF && !S->evif && !mentions_training(s)) {
      /* `losses = estimate_loss()` inside: the evaluation the program runs between steps */
      for (int k = 0; k < s->body.len && !S->evdef; k++) {
        Node *e = s->body.data[k];
        if (e->kind != N_ASSIGN || e->list.len != 1 || e->list.data[0]->kind != N_NAME || e->a->kind != N_CALL ||
            e->a->a->kind != N_NAME || e->a->list.len || e->a->list2.len)
          continue;
        PV *f = env_get(L->globals, e->a->a->name);
        if (!f || f->k != PV_FUNC || !f->node || f->node->kind != N_FUNCDEF) continue;
        S->evdef = f->node, S->evname = e->a->a->name, losses = e->list.data[0]->name;
      }
      if (S->evdef) {
        S->evif = s;
        continue;
      }
    }
    if (only_prints(s)) {
      note(L, "a print of the training loop", s->span.line, "left out of train_step");
      continue;
    }
    vec_push(L->a, &def->body, s);
  }
  if (!x)
    lower_error(L, loop->span, "the module-level training loop takes no batch: `train` draws the windows of a "
                "`xb, yb = get_batch('train')` line in its body, and there is none");
  read_get_batch(L, S);
  const char *ps[3] = {x, y, S->itvar};
  S->with_iter = 0;
  for (int i = 0; i < def->body.len; i++) S->with_iter |= mentions(def->body.data[i], S->itvar);
  for (int k = 0; k < 2 + S->with_iter; k++) {
    Node *p = mk(L, N_PARAM, loop->span);
    p->name = ps[k];
    p->op = PARAM_PLAIN;
    vec_push(L->a, &def->list, p);
  }
  S->train_def = def;
  ts->train_entry = "train_step";
  if (S->evif) {
    Node *m = find_node(S->evif->a, is_mod_of, S->itvar);
    if (!m)
      lower_error(L, S->evif->a->span, "the training loop's evaluation runs every K steps: `if %s %% eval_interval == "
                  "0` (optionally `or %s == max_iters - 1`)", S->itvar, S->itvar);
    ts->eval_interval = eval_count(L, m->b, "the evaluation interval");
    ts->eval_last = find_node(S->evif->a, is_eq_of, S->itvar) != NULL;
    read_estimate_loss(L, S, ts);
    ts->eval_entry = S->evname;
    ts->eval_format = eval_format(L, S, losses);
    if (!ts->eval_format) {
      ts->eval_format = "step {0}: train loss {1:.4f}, val loss {2:.4f}";
      note(L, "its print is not of the step and the two losses: train prints the default line", S->evif->span.line,
           "the evaluation");
    }
  }
  /* after the loop: generate(context, max_new_tokens=N) is `./net sample --tokens N` */
  for (int i = at + 1; i < module->body.len; i++) {
    Node *s = module->body.data[i];
    Node *g = find_node(s, is_call_named, "generate");
    if (g && !ts->sample_tokens) {
      Node *n = g->list.len >= 2 ? g->list.data[1] : NULL;
      for (int k = 0; k < g->list2.len; k++)
        if (g->list2.data[k]->name && !strcmp(g->list2.data[k]->name, "max_new_tokens")) n = g->list2.data[k]->a;
      if (n) ts->sample_tokens = eval_count(L, n, "generate's max_new_tokens");
      read_generate(L, g, ts, S->T);
    }
    note(L, g ? "`./net sample` generates" : "the program does not run it", s->span.line,
         "after the module-level training loop: not compiled");
  }
  /* forward's input and the entries' when the file gives none: token windows [B, T] */
  PV *ex = env_get(L->globals, "example_inputs");
  if (!ex) {
    Type w = {0};
    w.dtype = DT_I64;
    w.ndim = 2;
    w.dims[0] = S->B;
    w.dims[1] = S->T;
    Type it = {0};
    it.dtype = DT_I64;
    PV *d = pv_dict(L);
    PV *win = t_const_tensor(L, loop->span, w, 0);
    PV *two[3] = {win, win, t_const_tensor(L, loop->span, it, 0)};
    pv_dict_set(L, loop->span, d, pv_str(L, "forward"), pv_tuple(L, two, 1));
    pv_dict_set(L, loop->span, d, pv_str(L, "train_step"), pv_tuple(L, two, 2 + S->with_iter));
    if (S->evname) pv_dict_set(L, loop->span, d, pv_str(L, S->evname), pv_tuple(L, two, 2));
    env_set(L, L->globals, "example_inputs", d);
  }
  L->T->script = S;
}

void script_stage(L *L, const LowerOptions *opt) {
  struct Script *S = L->T->script;
  if (!S) return;
  PV *examples = env_get(L->globals, "example_inputs");
  Program *P = L->T->prog;
  PV *fn = pv_new(L, PV_FUNC);
  fn->node = S->train_def;
  fn->s = "train_step";
  fn->env = L->globals;
  int f0 = P->funcs.len;
  stage_function(L, "train_step", fn, opt, examples, 1, NULL);
  Func *tf = P->funcs.data[f0];
  if (tf->kind != FK_TRAIN)
    lower_error(L, S->loop->span, "the module-level training loop's body is no training step (it must call "
                "loss.backward() and optimizer.step() on the batch)");
  if (S->eval_def) {
    PV *orig = env_get(L->globals, S->evname);
    PV *ev = pv_new(L, PV_FUNC);
    *ev = *orig;   /* its decorators (@torch.no_grad()) */
    ev->node = S->eval_def;
    ev->defaults = NULL;
    static const char *const names[] = {"loss"};
    int f1 = P->funcs.len;
    stage_function(L, S->evname, ev, opt, examples, 2, names);
    Func *ef = P->funcs.data[f1];
    if (ef->outputs.len != 1 || ir_numel(ir_type(ef, ef->outputs.data[0])) != 1)
      lower_error(L, S->evdef->span, "estimate_loss's stored value must be one number per batch (loss.item())");
  }
  P->script = S->ts;
}
