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
