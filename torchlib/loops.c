/* loops.c - the training loop people write. A module-level function in the
 * pytorch/examples shape,
 *
 *     def train(args, model, device, train_loader, optimizer, epoch):
 *         model.train()
 *         for batch_idx, (data, target) in enumerate(train_loader):
 *             data, target = data.to(device), target.to(device)
 *             optimizer.zero_grad(); loss = F.nll_loss(model(data), target)
 *             loss.backward(); optimizer.step()
 *             if batch_idx % args.log_interval == 0: print(... loss.item())
 *
 * is compiled as the entry `train` whose body is the loop's body (after the
 * statements before the loop), its inputs the batch variables (data, target):
 * a training step of `./net train`, its output the loss passed to backward().
 * A loop that calls no backward()/step() but sums values over the batches
 * (`test_loss += F.nll_loss(..., reduction='sum').item()`, `correct +=
 * pred.eq(...).sum().item()`, typically under torch.no_grad()) is an evaluation
 * entry (FK_EVAL) returning those sums for one batch, which the driver adds up
 * over the test set. Lines that run on the host only (print, an `if` of logging
 * and `break`s, running totals of `.item()`, calls into modules ctc does not
 * model, the lines after the loop) are dropped, each with a note that `ctc
 * check` prints; any other `.item()` in the loop body is an error.
 *
 * The function's other parameters are bound from the call `train(args, model,
 * ...)` the file makes. Its driver (main(), or an `if __name__ == '__main__':`
 * block), which never runs at compile time, has its statements before that call
 * evaluated, loops excepted, each one that fails leaving the names it assigns
 * opaque (an error only if the compiled entry needs them); the objects it builds
 * (the model, the optimizer, LR schedulers) are then published as module-level
 * names, so the model is chosen, optimizer state is named and an epoch-wise
 * scheduler gets its entry as if they were made at module level. Arguments that
 * are loop variables there (the epoch) and the batch index are opaque. */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "torch_int.h"

enum { MAX_PATH = 16, MAX_VARS = 8, MAX_ACC = 16 };
typedef Vec(const char *) NameVec;

typedef struct Loop {
  Node *def, *forn;
  Node *path[MAX_PATH]; /* from the def's body to the for: `with` statements, then the for */
  int npath;
  int eval;             /* 0: a training loop; 1: an evaluation loop */
  const char *loader;   /* the parameter iterated */
  Node *index;          /* enumerate's index variable (N_NAME) or NULL */
  Node *vars[MAX_VARS]; /* the batch variables (N_NAME) */
  int nvars;
  Env *bind;            /* the other parameters' values */
  const char *acc[MAX_ACC]; /* evaluation: the sums, in order */
  int nacc;
  const char *notes;    /* the dropped lines, one a line */
  NameVec hostnames;    /* a training loop's running totals of .item() (host values) */
  Node *unpack;         /* `inputs, labels = data` first in the body: its names are the batch variables */
  Node *synth;          /* the entry's def */
  struct Loop *next;
} Loop;

typedef struct Driver { NodeVec *block; Env *env; struct Driver *next; } Driver;

struct LoopState {
  Loop *loops;
  Driver *drivers;
  NameVec scheds;  /* the LR schedulers published from drivers */
  int trained;     /* a training loop was staged */
};

/* ---- finding the loop ---------------------------------------------------- */

static int is_param(const Node *def, const char *name) {
  for (int k = 0; k < def->list.len; k++)
    if (def->list.data[k]->name && !strcmp(def->list.data[k]->name, name)) return 1;
  return 0;
}

static int given(const LowerOptions *opt, const char *name) {
  for (int i = 0; i < opt->ninputs; i++)
    if (!strcmp(opt->inputs[i].name, name)) return 1;
  return 0;
}

/* A module-level loader the loop may iterate instead of a parameter
 * (vae's `def train(epoch): for batch_idx, (data, _) in enumerate(train_loader)`):
 * a global name whose value ctc does not model (a DataLoader). */
static int global_loader(L *L, const Node *def, const char *name) {
  if (is_param(def, name)) return 0;
  PV *g = env_get(L->globals, name);
  return g && g->k == PV_OPAQUE;
}

/* `for (data, target) in P`, `for i, (x, y) in enumerate(P)`, P a parameter
 * without --input (a loader, not a tensor) or a module-level loader,
 * possibly wrapped in tqdm(P). */
static int loop_pattern(L *L, Node *s, Node *def, const LowerOptions *opt, Loop *lp) {
  if (s->kind != N_FOR || !s->b) return 0;
  Node *it = s->b, *tgt = s->a;
  int en = 0;
  if (it->kind == N_CALL && it->a->kind == N_NAME && !strcmp(it->a->name, "enumerate") && it->list.len >= 1 &&
      it->list.len + it->list2.len <= 2) { /* enumerate(loader[, start]) */
    it = it->list.data[0];
    en = 1;
  }
  /* a progress bar around the loader: tqdm(loader, desc=...), tqdm.tqdm(loader) */
  if (it->kind == N_CALL && it->list.len >= 1 && (it->a->kind == N_NAME || it->a->kind == N_ATTR) &&
      !strcmp(it->a->name, "tqdm"))
    it = it->list.data[0];
  if (it->kind != N_NAME || !(is_param(def, it->name) || global_loader(L, def, it->name)) || given(opt, it->name))
    return 0;
  lp->index = NULL;
  if (en) {
    if (tgt->kind != N_TUPLE || tgt->list.len != 2 || tgt->list.data[0]->kind != N_NAME) return 0;
    lp->index = tgt->list.data[0];
    tgt = tgt->list.data[1];
  }
  lp->nvars = 0;
  lp->unpack = NULL;
  Node *first = s->body.len ? s->body.data[0] : NULL;
  if (tgt->kind == N_NAME && first && first->kind == N_ASSIGN && first->list.len == 1 &&
      (first->list.data[0]->kind == N_TUPLE || first->list.data[0]->kind == N_LIST) && first->a->kind == N_NAME &&
      !strcmp(first->a->name, tgt->name)) {
    /* for i, data in enumerate(loader): inputs, labels = data */
    lp->unpack = first;
    tgt = first->list.data[0];
  }
  if (tgt->kind == N_NAME) lp->vars[lp->nvars++] = tgt;
  else if (tgt->kind == N_TUPLE || tgt->kind == N_LIST) {
    if (tgt->list.len > MAX_VARS) return 0;
    for (int i = 0; i < tgt->list.len; i++) {
      if (tgt->list.data[i]->kind != N_NAME) return 0;
      lp->vars[lp->nvars++] = tgt->list.data[i];
    }
  } else
    return 0;
  lp->loader = it->name;
  return 1;
}

/* The for statement, at the top of the def's body or inside `with` blocks. */
static int find_for(L *L, NodeVec *body, Node *def, const LowerOptions *opt, Loop *lp, int depth) {
  for (int i = 0; i < body->len; i++) {
    Node *s = body->data[i];
    if (depth >= MAX_PATH) return 0;
    lp->path[depth] = s;
    if (loop_pattern(L, s, def, opt, lp)) {
      lp->npath = depth + 1;
      lp->forn = s;
      return 1;
    }
    if (s->kind == N_WITH && find_for(L, &s->body, def, opt, lp, depth + 1)) return 1;
  }
  return 0;
}

/* `name += value` at the top of the loop body, name not assigned otherwise in it */
static int is_accumulator(const Node *s) {
  return s->kind == N_AUGASSIGN && s->op == OP_ADD && s->a->kind == N_NAME;
}

static int is_call_to(const Node *n, const char *attr) {
  return n && n->kind == N_CALL && n->a && n->a->kind == N_ATTR && !strcmp(n->a->name, attr);
}

/* Does the tree read a tensor's value on the host (.item(), .tolist(), .numpy())? */
static int reads_host(const Node *n) {
  if (!n) return 0;
  if (is_call_to(n, "item") || is_call_to(n, "tolist") || is_call_to(n, "numpy")) return 1;
  if (reads_host(n->a) || reads_host(n->b) || reads_host(n->c)) return 1;
  const NodeVec *vs[] = {&n->list, &n->list2, &n->body, &n->orelse, &n->body2};
  for (size_t k = 0; k < sizeof vs / sizeof vs[0]; k++)
    for (int i = 0; i < vs[k]->len; i++)
      if (reads_host(vs[k]->data[i])) return 1;
  return 0;
}

/* ---- the driver: the call train(args, model, ...) and what it passes ------ */

typedef struct Site {
  Node *call;
  NodeVec *block; /* the statements the call's statement is one of */
  int idx;        /* that statement */
  int ran;        /* module-level code: already evaluated */
  const char *lvars[32]; /* the loop variables around the call */
  int nl;
} Site;

static void push_targets(Site *st, const Node *t) {
  if (!t) return;
  if (t->kind == N_NAME) {
    if (st->nl < 32) st->lvars[st->nl++] = t->name;
  } else if (t->kind == N_TUPLE || t->kind == N_LIST)
    for (int i = 0; i < t->list.len; i++) push_targets(st, t->list.data[i]);
  else if (t->kind == N_STARRED)
    push_targets(st, t->a);
}

static Node *find_call(Node *n, const char *fname, Site *st) {
  if (!n || n->kind == N_FUNCDEF || n->kind == N_CLASSDEF || n->kind == N_LAMBDA) return NULL;
  if (n->kind == N_CALL && n->a && n->a->kind == N_NAME && !strcmp(n->a->name, fname)) return n;
  int saved = st->nl;
  if (n->kind == N_FOR) push_targets(st, n->a);
  Node *kids[] = {n->a, n->b, n->c};
  for (size_t k = 0; k < 3; k++) {
    Node *c = find_call(kids[k], fname, st);
    if (c) return c;
  }
  NodeVec *vs[] = {&n->list, &n->list2, &n->body, &n->orelse, &n->body2};
  for (size_t k = 0; k < sizeof vs / sizeof vs[0]; k++)
    for (int i = 0; i < vs[k]->len; i++) {
      Node *c = find_call(vs[k]->data[i], fname, st);
      if (c) return c;
    }
  st->nl = saved;
  return NULL;
}

static int is_main_guard(const Node *s) {
  if (s->kind != N_IF || s->a->kind != N_COMPARE || s->a->list.len != 2 || s->a->cmpops[0] != OP_EQ) return 0;
  const Node *x = s->a->list.data[0], *y = s->a->list.data[1];
  if (x->kind == N_STR) {
    const Node *t = x;
    x = y;
    y = t;
  }
  return x->kind == N_NAME && !strcmp(x->name, "__name__") && y->kind == N_STR && !strcmp(y->sval, "__main__");
}

static int search_block(NodeVec *block, const char *fname, int ran, Site *st) {
  for (int j = 0; j < block->len; j++) {
    st->nl = 0;
    Node *c = find_call(block->data[j], fname, st);
    if (c) {
      st->call = c;
      st->block = block;
      st->idx = j;
      st->ran = ran;
      return 1;
    }
  }
  return 0;
}

/* The first call of fname in the file: in a module-level function's body (main),
 * an `if __name__ == '__main__':` block, or module-level code. */
static int find_site(Node *module, const Node *def, Site *st) {
  for (int i = 0; i < module->body.len; i++) {
    Node *s = module->body.data[i];
    if (s == def) continue;
    if (s->kind == N_FUNCDEF) {
      if (search_block(&s->body, def->name, 0, st)) return 1;
    } else if (is_main_guard(s)) {
      if (search_block(&s->body, def->name, 0, st)) return 1;
    } else if (s->kind != N_CLASSDEF) {
      st->nl = 0;
      Node *c = find_call(s, def->name, st);
      if (c) {
        st->call = c;
        st->block = &module->body;
        st->idx = i;
        st->ran = 1;
        return 1;
      }
    }
  }
  return 0;
}


/* Names a statement binds (assignment targets, imports, defs, loop variables). */
static void bound_names(L *L, const Node *s, NameVec *out) {
  if (!s) return;
  switch (s->kind) {
  case N_NAME: vec_push(L->a, out, s->name); return;
  case N_TUPLE:
  case N_LIST:
    for (int i = 0; i < s->list.len; i++) bound_names(L, s->list.data[i], out);
    return;
  case N_STARRED: bound_names(L, s->a, out); return;
  case N_ASSIGN:
    for (int i = 0; i < s->list.len; i++) bound_names(L, s->list.data[i], out);
    return;
  case N_AUGASSIGN:
  case N_ANNASSIGN: bound_names(L, s->a, out); return;
  case N_FUNCDEF:
  case N_CLASSDEF: vec_push(L->a, out, s->name); return;
  case N_IMPORT:
  case N_IMPORTFROM:
    for (int i = 0; i < s->list.len; i++) {
      const Node *al = s->list.data[i];
      const char *n = al->name2 ? al->name2 : al->name;
      if (!n || !strcmp(n, "*")) continue;
      const char *dot = strchr(n, '.');
      vec_push(L->a, out, dot && !al->name2 ? arena_strndup(L->a, n, (size_t)(dot - n)) : n);
    }
    return;
  case N_WITH:
    for (int i = 0; i < s->list.len; i++) bound_names(L, s->list.data[i]->b, out);
    /* fall through */
  case N_IF:
  case N_FOR:
  case N_WHILE:
  case N_TRY:
    if (s->kind == N_FOR) bound_names(L, s->a, out);
    for (int i = 0; i < s->body.len; i++) bound_names(L, s->body.data[i], out);
    for (int i = 0; i < s->orelse.len; i++) bound_names(L, s->orelse.data[i], out);
    for (int i = 0; i < s->body2.len; i++) bound_names(L, s->body2.data[i], out);
    return;
  default: return;
  }
}

/* An opaque value standing for something the compiled entry does not get. */
static PV *host_value(L *L, Span at, const char *expr, const char *what) {
  return pv_opaque_described(L, at, expr, what);
}

/* Run statement s (or evaluate expression e) in env; on an error, silence it and
 * return NULL with *why the message (the names s binds are then opaque). */
static PV *lenient(L *L, Env *env, Node *s, Node *e, const char **why) {
  jmp_buf jb;
  char *buf = NULL;
  size_t len = 0;
  FILE *mem = open_memstream(&buf, &len);
  if (!mem) BUG("open_memstream failed");
  Diag quiet;
  diag_init(&quiet, mem);
  quiet.color = 0;
  struct L saved = *L;
  struct HostState savedT = *L->T;
  L->d = &quiet;
  L->on_error = &jb;
  PV *volatile r = NULL;
  if (setjmp(jb) == 0) {
    if (e) {
      Env *se = L->env;
      L->env = env;
      r = eval_expr(L, e);
      L->env = se;
    } else {
      NodeVec one = {&s, 1, 1};
      exec_block(L, env, &one);
      r = pv_none(L);
    }
    L->d = saved.d;
    L->on_error = saved.on_error;
    fclose(mem);
    free(buf);
    return r;
  }
  int64_t steps = L->steps;
  *L = saved;
  *L->T = savedT;
  L->steps = steps;
  fclose(mem);
  const char *msg = buf ? strstr(buf, "error: ") : NULL;
  if (msg) {
    msg += 7;
    *why = arena_strndup(L->a, msg, strcspn(msg, "\n"));
  } else {
    *why = "it failed";
  }
  free(buf);
  return NULL;
}

static int is_loop_fn_call(const Node *s, LoopState *ls) {
  if (s->kind != N_EXPR_STMT || s->a->kind != N_CALL || s->a->a->kind != N_NAME) return 0;
  for (Loop *lp = ls->loops; lp; lp = lp->next)
    if (!strcmp(lp->def->name, s->a->a->name)) return 1;
  return 0;
}

/* The driver block's statements before the call, evaluated once (cached), in a
 * scope of their own; the objects they build are published as module-level names. */
static Env *driver_env(L *L, LoopState *ls, const Site *st) {
  for (Driver *d = ls->drivers; d; d = d->next)
    if (d->block == st->block) return d->env;
  Env *env = env_new(L, L->globals);
  for (int j = 0; j < st->idx; j++) {
    Node *s = st->block->data[j];
    if (s->kind == N_RETURN) break;
    if (s->kind == N_FOR || s->kind == N_WHILE || is_loop_fn_call(s, ls)) continue;
    const char *why = NULL;
    if (lenient(L, env, s, NULL, &why)) continue;
    NameVec names = {0};
    bound_names(L, s, &names);
    for (int i = 0; i < names.len; i++)
      env_set(L, env, names.data[i],
              host_value(L, s->span, names.data[i],
                         arena_printf(L->a, "value of '%s', which line %d could not compute at compile time (%s)",
                                      names.data[i], s->span.line, why)));
  }
  for (int i = 0; i < env->names.len; i++) {
    PV *v = env->vals.data[i];
    int kind = bi_kind_of(v);
    if ((pv_is_module(v) || kind == BK_OPTIM || kind == BK_SCHED) && !env_get(L->globals, env->names.data[i])) {
      env_set(L, L->globals, env->names.data[i], v);
      if (kind == BK_SCHED) vec_push(L->a, &ls->scheds, env->names.data[i]);
    }
  }
  Driver *d = arena_alloc(L->a, sizeof *d);
  d->block = st->block;
  d->env = env;
  d->next = ls->drivers;
  ls->drivers = d;
  return env;
}

static int mentions_any(const Node *n, const char *const *names, int nn) {
  if (!n) return 0;
  if (n->kind == N_NAME)
    for (int i = 0; i < nn; i++)
      if (!strcmp(n->name, names[i])) return 1;
  if (mentions_any(n->a, names, nn) || mentions_any(n->b, names, nn) || mentions_any(n->c, names, nn)) return 1;
  const NodeVec *vs[] = {&n->list, &n->list2, &n->body, &n->orelse, &n->body2};
  for (size_t k = 0; k < sizeof vs / sizeof vs[0]; k++)
    for (int i = 0; i < vs[k]->len; i++)
      if (mentions_any(vs[k]->data[i], names, nn)) return 1;
  return 0;
}

/* The values of the def's parameters other than the loader: the call's arguments. */
static void bind_params(L *L, LoopState *ls, Loop *lp, Node *module) {
  Node *def = lp->def;
  lp->bind = env_new(L, env_get(L->globals, def->name)->env);
  Site st = {0};
  int found = find_site(module, def, &st);
  Env *env = found ? (st.ran ? L->globals : driver_env(L, ls, &st)) : NULL;
  for (int k = 0; k < def->list.len; k++) {
    Node *p = def->list.data[k];
    if (p->op != PARAM_PLAIN) continue;
    if (!strcmp(p->name, lp->loader)) {
      env_set(L, lp->bind, p->name,
              host_value(L, p->span, p->name,
                         arena_printf(L->a, "data loader '%s' (the compiled loop body gets one batch; the driver "
                                            "iterates the data)", p->name)));
      continue;
    }
    if (!found) continue; /* bound by name when staged (loop_fallbacks) */
    Node *arg = NULL;
    int npos = 0;
    for (int i = 0; i < st.call->list.len && st.call->list.data[i]->kind != N_STARRED; i++) npos++;
    if (k < npos) arg = st.call->list.data[k];
    for (int i = 0; i < st.call->list2.len; i++)
      if (st.call->list2.data[i]->name && !strcmp(st.call->list2.data[i]->name, p->name))
        arg = st.call->list2.data[i]->a;
    if (!arg) continue; /* its default, or by name */
    if (mentions_any(arg, st.lvars, st.nl)) {
      env_set(L, lp->bind, p->name,
              host_value(L, arg->span, p->name,
                         arena_printf(L->a, "value of parameter '%s' of '%s', which the call at line %d passes from "
                                            "a loop variable of its driver (a host value the compiled entry does not "
                                            "get)", p->name, def->name, st.call->span.line)));
      continue;
    }
    const char *why = NULL;
    PV *v = lenient(L, env, NULL, arg, &why);
    if (!v)
      v = host_value(L, arg->span, p->name,
                     arena_printf(L->a, "value of parameter '%s' of '%s', which the call at line %d passes but ctc "
                                        "could not compute at compile time (%s)", p->name, def->name,
                                  st.call->span.line, why));
    env_set(L, lp->bind, p->name, v);
  }
  if (lp->index)
    env_set(L, lp->bind, lp->index->name,
            host_value(L, lp->index->span, lp->index->name,
                       arena_printf(L->a, "batch index '%s' (a host value: the compiled loop body runs once per batch "
                                          "and does not get it)", lp->index->name)));
}

/* ---- the entry's body ----------------------------------------------------- */

static void note(L *L, Loop *lp, const Node *s, const char *what) {
  lp->notes = arena_printf(L->a, "%s%sline %d (%s) runs on the host only; dropped from the compiled entry '%s'",
                           lp->notes ? lp->notes : "", lp->notes ? "\n" : "", s->span.line, what, lp->def->name);
}

/* The root name of a call's callee (writer.add_scalar -> writer), or NULL. */
static const char *callee_root(const Node *e) {
  if (!e || e->kind != N_CALL) return NULL;
  const Node *c = e->a;
  while (c && (c->kind == N_ATTR || c->kind == N_CALL || c->kind == N_SUBSCRIPT)) c = c->a;
  return c && c->kind == N_NAME ? c->name : NULL;
}

/* In a training loop: `total += loss.item()` or `total = total + loss.item()`. */
static int running_total(const Loop *lp, const Node *s) {
  if (lp->eval) return 0;
  if (is_accumulator(s)) return reads_host(s->b);
  return s->kind == N_ASSIGN && s->list.len == 1 && s->list.data[0]->kind == N_NAME && reads_host(s->a) &&
         mentions_any(s->a, &s->list.data[0]->name, 1);
}

/* Whether a, a statement inside the `if` s of the loop body, assigns only
 * names that no other statement of the loop body mentions. */
static int if_local(const Loop *lp, const Node *s, const Node *a) {
  if (a->kind != N_ASSIGN || a->list.len == 0) return 0;
  for (int t = 0; t < a->list.len; t++) {
    const Node *n = a->list.data[t];
    if (n->kind != N_NAME) return 0;
    for (int i = 0; i < lp->forn->body.len; i++)
      if (lp->forn->body.data[i] != s && mentions_any(lp->forn->body.data[i], &n->name, 1)) return 0;
  }
  return 1;
}

/* Why statement s of the loop body runs on the host only (a note's words), or NULL. */
static const char *host_only(L *L, Loop *lp, const Node *s) {
  switch (s->kind) {
  case N_BREAK: return "break";
  case N_CONTINUE: return "continue";
  case N_EXPR_STMT: {
    const char *root = callee_root(s->a);
    if (root && !strcmp(root, "print") && s->a->a->kind == N_NAME) return "print";
    if (reads_host(s->a)) return ".item()";
    if (root) {
      PV *v = env_lookup(lp->bind, root);
      if (v && v->k == PV_OPAQUE && strcmp(root, lp->loader) && (!lp->index || strcmp(root, lp->index->name)))
        return arena_printf(L->a, "a call of %s", root);
    }
    return NULL;
  }
  case N_AUGASSIGN:
  case N_ASSIGN: {
    if (running_total(lp, s)) return "a running total of .item()";
    /* `running_loss = 0.0` after logging it: a running total's reset */
    int all = s->kind == N_ASSIGN && s->list.len > 0;
    for (int i = 0; all && i < s->list.len; i++) {
      int host = 0;
      for (int k = 0; k < lp->hostnames.len; k++)
        host |= s->list.data[i]->kind == N_NAME && !strcmp(s->list.data[i]->name, lp->hostnames.data[k]);
      all &= host;
    }
    return all ? "a running total of .item()" : NULL;
  }
  case N_IF: {
    /* an `if` of host-only lines, and of assignments that only they read (vae's
     * `if i == 0: n = min(data.size(0), 8); comparison = torch.cat(...);
     * save_image(comparison, ...)`) */
    int any = 0;
    for (int k = 0; k < 2; k++) {
      const NodeVec *b = k ? &s->orelse : &s->body;
      for (int i = 0; i < b->len; i++) {
        if (b->data[i]->kind == N_PASS) continue;
        if (host_only(L, lp, b->data[i])) {
          any = 1;
          continue;
        }
        if (!if_local(lp, s, b->data[i])) return NULL;
      }
    }
    return any ? "if" : NULL;
  }
  default: return NULL;
  }
}

static Node *clone(L *L, const Node *n) {
  Node *c = arena_alloc(L->a, sizeof *c);
  *c = *n;
  return c;
}

/* A copy of expression e with `x.item()` replaced by x (a one-element tensor). */
static Node *strip_items(L *L, Node *e) {
  if (!e) return NULL;
  if (is_call_to(e, "item") && e->list.len == 0 && e->list2.len == 0) return strip_items(L, e->a->a);
  if (e->kind == N_LAMBDA || e->kind == N_LISTCOMP || e->kind == N_GENEXP || e->kind == N_DICTCOMP ||
      e->kind == N_SETCOMP)
    return e;
  Node *c = clone(L, e);
  c->a = strip_items(L, e->a);
  c->b = strip_items(L, e->b);
  c->c = strip_items(L, e->c);
  NodeVec *vs[] = {&c->list, &c->list2};
  for (size_t k = 0; k < 2; k++) {
    NodeVec old = *vs[k];
    memset(vs[k], 0, sizeof *vs[k]);
    for (int i = 0; i < old.len; i++) vec_push(L->a, vs[k], strip_items(L, old.data[i]));
  }
  return c;
}

/* The loop body, host-only lines dropped; an evaluation's sums lose their .item()s. */
static void filter_body(L *L, Loop *lp, NodeVec *out) {
  for (int i = 0; i < lp->forn->body.len; i++)
    if (running_total(lp, lp->forn->body.data[i]))
      vec_push(L->a, &lp->hostnames, lp->forn->body.data[i]->kind == N_ASSIGN ? lp->forn->body.data[i]->list.data[0]->name
                                                                               : lp->forn->body.data[i]->a->name);
  for (int i = 0; i < lp->forn->body.len; i++) {
    Node *s = lp->forn->body.data[i];
    if (s == lp->unpack) continue;
    const char *why = host_only(L, lp, s);
    if (why) {
      note(L, lp, s, why);
      continue;
    }
    if (lp->eval && is_accumulator(s)) {
      Node *c = clone(L, s);
      c->b = strip_items(L, c->b);
      int dup = 0;
      for (int k = 0; k < lp->nacc; k++) dup |= !strcmp(lp->acc[k], s->a->name);
      if (!dup && lp->nacc < MAX_ACC) lp->acc[lp->nacc++] = s->a->name;
      s = c;
    }
    vec_push(L->a, out, s);
  }
  for (int i = 0; i < lp->forn->orelse.len; i++) note(L, lp, lp->forn->orelse.data[i], "the loop's else");
}

/* The statements of `body` (level `depth` of the path) with the path's statement
 * replaced: a `with` by a copy holding the rest, the for by the loop body; the
 * statements after it dropped. */
static void rebuild(L *L, Loop *lp, NodeVec *body, int depth, NodeVec *out) {
  int i = 0;
  for (; i < body->len && body->data[i] != lp->path[depth]; i++) vec_push(L->a, out, body->data[i]);
  Node *e = lp->path[depth];
  if (e == lp->forn) filter_body(L, lp, out);
  else {
    Node *w = clone(L, e);
    memset(&w->body, 0, sizeof w->body);
    rebuild(L, lp, &e->body, depth + 1, &w->body);
    vec_push(L->a, out, w);
  }
  for (i++; i < body->len; i++) note(L, lp, body->data[i], "after the loop");
}

static Node *mk(L *L, NodeKind k, Span at) {
  Node *n = arena_alloc(L->a, sizeof *n);
  memset(n, 0, sizeof *n);
  n->kind = k;
  n->span = at;
  return n;
}

static void build_entry(L *L, Loop *lp) {
  Node *def = clone(L, lp->def);
  memset(&def->list, 0, sizeof def->list);
  memset(&def->body, 0, sizeof def->body);
  for (int i = 0; i < lp->nvars; i++) {
    Node *p = mk(L, N_PARAM, lp->vars[i]->span);
    p->name = lp->vars[i]->name;
    p->op = PARAM_PLAIN;
    vec_push(L->a, &def->list, p);
  }
  rebuild(L, lp, &lp->def->body, 0, &def->body);
  if (lp->eval) {
    Node *r = mk(L, N_RETURN, lp->forn->span), *t = mk(L, N_TUPLE, lp->forn->span);
    for (int k = 0; k < lp->nacc; k++) {
      Node *nm = mk(L, N_NAME, lp->forn->span);
      nm->name = lp->acc[k];
      vec_push(L->a, &t->list, nm);
    }
    r->a = t;
    vec_push(L->a, &def->body, r);
  }
  lp->synth = def;
}

/* ---- entry points ---------------------------------------------------------- */

void loops_prepare(L *L, Node *module, const LowerOptions *opt) {
  LoopState *ls = arena_alloc(L->a, sizeof *ls);
  memset(ls, 0, sizeof *ls);
  L->T->loops = ls;
  Loop **tail = &ls->loops;
  PV *examples = env_get(L->globals, "example_inputs");
  for (int i = 0; i < module->body.len; i++) {
    Node *s = module->body.data[i];
    if (s->kind != N_FUNCDEF || s->name[0] == '_' || s->list.len == 0) continue;
    PV *f = env_get(L->globals, s->name);
    if (!f || f->k != PV_FUNC || f->node != s) continue;
    Loop lp;
    memset(&lp, 0, sizeof lp);
    lp.def = s;
    if (!find_for(L, &s->body, s, opt, &lp, 0)) continue;
    /* an example tensor for the iterated parameter: a tensor iterated, not a loader */
    PV *ex = examples && examples->k == PV_DICT ? pv_dict_get(examples, pv_str(L, s->name)) : NULL;
    if (ex && ex->k == PV_TENSOR) ex = pv_tuple(L, &ex, 1);
    int tensor = 0;
    for (int k = 0; ex && pv_is_seq(ex) && k < s->list.len && k < ex->n; k++)
      tensor |= s->list.data[k]->name && !strcmp(s->list.data[k]->name, lp.loader) && ex->items[k]->k == PV_TENSOR;
    if (tensor) continue;
    if (!mentions_training(lp.forn)) {
      int acc = 0;
      for (int k = 0; k < lp.forn->body.len; k++) acc |= is_accumulator(lp.forn->body.data[k]);
      if (!acc) continue;
      lp.eval = 1;
    }
    Loop *n = arena_alloc(L->a, sizeof *n);
    *n = lp;
    *tail = n;
    tail = &n->next;
  }
  for (Loop *lp = ls->loops; lp; lp = lp->next) bind_params(L, ls, lp, module);
  for (Loop *lp = ls->loops; lp; lp = lp->next) build_entry(L, lp);
}

static Loop *loop_of(L *L, const Node *def) {
  if (!L->T->loops) return NULL;
  for (Loop *lp = L->T->loops->loops; lp; lp = lp->next)
    if (lp->def == def) return lp;
  return NULL;
}

int loop_is_entry(L *L, const Node *def) { return loop_of(L, def) != NULL; }

/* Does the tree call the model on the name var alone (`model(data)`)? */
static int calls_model_on(L *L, Loop *lp, const Node *n, const char *var) {
  if (!n) return 0;
  if (n->kind == N_CALL && n->a->kind == N_NAME && n->list.len == 1 && n->list2.len == 0 &&
      n->list.data[0]->kind == N_NAME && !strcmp(n->list.data[0]->name, var) &&
      env_lookup(lp->bind, n->a->name) == L->T->model)
    return 1;
  if (calls_model_on(L, lp, n->a, var) || calls_model_on(L, lp, n->b, var) || calls_model_on(L, lp, n->c, var))
    return 1;
  const NodeVec *vs[] = {&n->list, &n->list2, &n->body, &n->orelse, &n->body2};
  for (size_t k = 0; k < sizeof vs / sizeof vs[0]; k++)
    for (int i = 0; i < vs[k]->len; i++)
      if (calls_model_on(L, lp, vs[k]->data[i], var)) return 1;
  return 0;
}

/* Forward's input when neither --input nor example_inputs gives it: the --input
 * of a loop's batch variable that the loop passes to the model (`model(data)`). */
const Type *loop_forward_input(L *L, const LowerOptions *opt) {
  if (!L->T->loops || !L->T->model) return NULL;
  for (Loop *lp = L->T->loops->loops; lp; lp = lp->next)
    for (int v = 0; v < lp->nvars; v++)
      for (int i = 0; i < opt->ninputs; i++)
        if (!strcmp(opt->inputs[i].name, lp->vars[v]->name) && calls_model_on(L, lp, lp->forn, lp->vars[v]->name))
          return &opt->inputs[i].type;
  return NULL;
}

/* Is this call a class-index loss (F.nll_loss / F.cross_entropy, or an
 * nn.NLLLoss / nn.CrossEntropyLoss object) whose target is the name `var`, or
 * `pred.eq(var...)`? */
static int class_loss_target(L *L, Loop *lp, const Node *n, const char *var) {
  if (!n || n->kind != N_CALL) return 0;
  /* pred.eq(target.view_as(pred)): labels compared with an argmax */
  if (is_call_to(n, "eq") && n->list.len == 1 && mentions_any(n->list.data[0], &var, 1)) return 1;
  const Node *c = n->a, *tgt = n->list.len >= 2 ? n->list.data[1] : NULL;
  for (int i = 0; i < n->list2.len; i++)
    if (n->list2.data[i]->name && !strcmp(n->list2.data[i]->name, "target")) tgt = n->list2.data[i]->a;
  if (!tgt || !mentions_any(tgt, &var, 1)) return 0; /* target, target.to(device), target.cuda() */
  const char *fname = c->kind == N_ATTR || c->kind == N_NAME ? c->name : NULL;
  if (fname && (!strcmp(fname, "nll_loss") || !strcmp(fname, "cross_entropy"))) return 1;
  if (c->kind == N_NAME) {
    PV *v = env_lookup(lp->bind, c->name);
    if (v && v->k == PV_OBJ && v->cls && (v->cls->bi == BI_C_CROSSENTROPYLOSS || v->cls->bi == BI_C_NLLLOSS)) return 1;
  }
  return 0;
}

static int uses_class_loss(L *L, Loop *lp, const Node *n, const char *var) {
  if (!n) return 0;
  if (class_loss_target(L, lp, n, var)) return 1;
  if (uses_class_loss(L, lp, n->a, var) || uses_class_loss(L, lp, n->b, var) || uses_class_loss(L, lp, n->c, var))
    return 1;
  const NodeVec *vs[] = {&n->list, &n->list2, &n->body, &n->orelse, &n->body2};
  for (size_t k = 0; k < sizeof vs / sizeof vs[0]; k++)
    for (int i = 0; i < vs[k]->len; i++)
      if (uses_class_loss(L, lp, vs[k]->data[i], var)) return 1;
  return 0;
}

/* Stage the loop function def as its entry: 0 if def is no such function; -1
 * (and why it was skipped in Program.skipped) when its first batch variable's
 * shape is unknown and it is not named with --entry (inference builds of a
 * script with a training loop need no --input for it). */
int loop_stage(L *L, const Node *def, const char *name, const LowerOptions *opt, PV *examples, int named) {
  Loop *lp = loop_of(L, def);
  if (!lp) return 0;
  PV *ex = examples && examples->k == PV_DICT ? pv_dict_get(examples, pv_str(L, name)) : NULL;
  if (!named && !ex && lp->nvars && !given(opt, lp->vars[0]->name)) {
    Program *P = L->T->prog;
    P->skipped = arena_printf(L->a, "%s%s%s (line %d): the shape of its batch '%s' is unknown (its loop body is "
                              "compiled as an entry with --input %s=f32[...])", P->skipped ? P->skipped : "",
                              P->skipped ? "\n" : "", def->name, def->span.line, lp->vars[0]->name,
                              lp->vars[0]->name);
    return -1;
  }
  /* parameters no call gave: the module-level object of that name, or the model */
  for (int k = 0; k < def->list.len; k++) {
    Node *p = def->list.data[k];
    if (p->op != PARAM_PLAIN || env_get(lp->bind, p->name)) continue;
    PV *v = env_get(L->globals, p->name);
    if (!v && L->T->model && (!strcmp(p->name, "model") || !strcmp(p->name, "net"))) v = L->T->model;
    if (!v && p->b) continue; /* its default */
    if (!v)
      v = host_value(L, p->span, p->name,
                     arena_printf(L->a, "value of parameter '%s' of '%s' (no call %s(...) in the file passes it and "
                                        "no module-level name '%s' exists)", p->name, def->name, def->name, p->name));
    env_set(L, lp->bind, p->name, v);
  }
  /* the target of a class-index loss: i64[B], B the first batch variable's */
  InputSpec *ins = arena_alloc(L->a, sizeof(InputSpec) * (size_t)(opt->ninputs + MAX_VARS));
  memcpy(ins, opt->inputs, sizeof(InputSpec) * (size_t)opt->ninputs);
  LowerOptions o2 = *opt;
  o2.inputs = ins;
  const Type *first = NULL;
  for (int i = 0; i < opt->ninputs; i++)
    if (lp->nvars && !strcmp(opt->inputs[i].name, lp->vars[0]->name)) first = &opt->inputs[i].type;
  for (int v = 1; v < lp->nvars && first && first->ndim > 0; v++) {
    const char *var = lp->vars[v]->name;
    /* class indices, or a variable the body never uses (`for data, _ in loader`):
     * i64[B], which the driver's --labels can feed */
    int unused = 1;
    for (int i = 0; i < lp->synth->body.len; i++) unused &= !mentions_any(lp->synth->body.data[i], &var, 1);
    if (given(opt, var) || (!unused && !uses_class_loss(L, lp, lp->synth, var))) continue;
    Type t = {0};
    t.dtype = DT_I64;
    t.ndim = 1;
    t.dims[0] = first->dims[0];
    ins[o2.ninputs].name = var;
    ins[o2.ninputs++].type = t;
  }
  PV *orig = env_get(L->globals, def->name);
  PV *fn = pv_new(L, PV_FUNC);
  *fn = *orig;
  fn->node = lp->synth;
  fn->env = lp->bind;
  fn->defaults = NULL;
  Program *P = L->T->prog;
  if (lp->notes)
    P->notes = arena_printf(L->a, "%s%s%s", P->notes ? P->notes : "", P->notes ? "\n" : "", lp->notes);
  stage_function(L, name, fn, &o2, examples, lp->eval ? 2 : 1, lp->acc);
  L->T->loops->trained |= !lp->eval;
  return 1;
}

/* After the entries: a driver's schedulers get their epoch-wise entries only when
 * a training loop was compiled (an inference build has no optimizer state). */
void loops_finish(L *L) {
  LoopState *ls = L->T->loops;
  if (!ls || ls->trained) return;
  for (int i = 0; i < ls->scheds.len; i++) env_set(L, L->globals, ls->scheds.data[i], pv_none(L));
}
