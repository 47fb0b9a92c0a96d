/* exec.c - the compile-time evaluator's statements: assignment, loops, with,
 * imports, classes, functions, and the `if` on a run-time host value (both
 * branches run, their values merged with the host's select). */
#include <string.h>
#include "py_int.h"

static int is_host(const PV *v) { return pv_is_host(v); }

/* ---- statements ------------------------------------------------------- */

void py_assign_target(L *L, Node *t, PV *v) {
  switch (t->kind) {
  case N_NAME:
    L->host->name_value(L, v, t->name);
    v->owned = 0;
    env_set(L, L->env, t->name, v);
    return;
  case N_ATTR: setattr_value(L, t->span, eval_expr(L, t->a), t->name, v); return;
  case N_SUBSCRIPT: {
    PV *obj = eval_expr(L, t->a), *idx = eval_expr(L, t->b);
    if (obj->k == PV_LIST) {
      int64_t i = arg_int(L, t->b->span, idx, "list index");
      if (i < 0) i += obj->n;
      if (i < 0 || i >= obj->n) lower_error(L, t->span, "list assignment index out of range");
      obj->items[i] = v;
      return;
    }
    if (obj->k == PV_DICT) {
      py_dict_store(L, t->b->span, obj, idx, v);
      return;
    }
    if (obj->k == PV_OPAQUE) return;
    if (L->host->setitem(L, t->span, obj, idx, v)) return;
    lower_error(L, t->span, "'%s' object does not support item assignment", pv_kind_name(obj));
  }
  case N_TUPLE:
  case N_LIST: {
    PV **items;
    int cnt;
    if (v->k == PV_OPAQUE) {   /* a, b = opaque: each an opaque value */
      for (int i = 0; i < t->list.len; i++) {
        Node *ti = t->list.data[i]->kind == N_STARRED ? t->list.data[i]->a : t->list.data[i];
        py_assign_target(L, ti, pv_opaque_from(L, t->span, v, arena_printf(L->a, "%s[%d]", v->s, i)));
      }
      return;
    }
    if (v->k == PV_HOST) lower_error(L, t->span, "unpacking a %s is not supported; use split or indexing", pv_kind_name(v));
    cnt = iter_items(L, t->span, v, &items);
    eval_charge(L, t->span, cnt);
    int star = -1, nt = t->list.len;
    for (int i = 0; i < nt; i++)
      if (t->list.data[i]->kind == N_STARRED) star = i;
    if (star < 0 && cnt != nt)
      lower_error(L, t->span, "cannot unpack %d values into %d targets", cnt, nt);
    if (star >= 0 && cnt < nt - 1)
      lower_error(L, t->span, "not enough values to unpack (expected at least %d, got %d)", nt - 1, cnt);
    int k = 0;
    for (int i = 0; i < nt; i++) {
      if (i == star) {
        int take = cnt - (nt - 1);
        py_assign_target(L, t->list.data[i]->a, pv_list(L, items + k, take));
        k += take;
      } else
        py_assign_target(L, t->list.data[i], items[k++]);
    }
    return;
  }
  default: lower_error(L, t->span, "cannot assign to this expression");
  }
}

#define PYLIB_MARK PY_PYLIB_MARK

/* A module from a file beside the importing one (Python's sys.path[0]), as
 * `from model import GPT` or `import mingpt.utils` find it: DIR/a/b.py or
 * DIR/a/b/__init__.py, `level` dots of a relative import going up from DIR
 * (level 0: an absolute import, which is also looked for in ctc's own packages,
 * L->pylib, after DIR). It runs once (L->modules) in its own namespace, which is
 * the module object's attributes. NULL if there is no such file. */
static PV *local_module(L *L, Span at, const char *dotted, int level) {
  const char *from = at.file && at.file->path ? at.file->path : "";
  const char *slash = strrchr(from, '/');
  const char *dir = slash ? arena_strndup(L->a, from, (size_t)(slash - from)) : ".";
  for (int k = 1; k < level; k++) dir = arena_printf(L->a, "%s/..", dir);
  char *rel = arena_strdup(L->a, dotted ? dotted : "");
  for (char *c = rel; *c; c++)
    if (*c == '.') *c = '/';
  /* an absolute import searches the compiled file's folder first, as Python's sys.path[0] (a package's
   * `from pkg.cfg import Cfg` inside pkg/model.py), then the importing file's, then ctc's packages */
  const char *main = L->src && L->src->path ? L->src->path : "", *mslash = strrchr(main, '/');
  const char *mdir = mslash ? arena_strndup(L->a, main, (size_t)(mslash - main)) : ".";
  const char *root[3] = {level == 0 && strcmp(mdir, dir) ? mdir : NULL, dir, level == 0 && rel[0] ? L->pylib : NULL};
  const char *cands[6];
  int nc = 0, first_pylib = 6;
  for (int r = 0; r < 3; r++) {
    if (!root[r]) continue;
    if (r == 2) first_pylib = nc;
    if (rel[0]) cands[nc++] = arena_printf(L->a, "%s/%s.py", root[r], rel);
    cands[nc++] = arena_printf(L->a, "%s/%s%s__init__.py", root[r], rel, rel[0] ? "/" : "");
  }
  if (!L->modules) L->modules = pv_dict(L);
  for (int c = 0; c < nc; c++) {
    PV *key = pv_str(L, cands[c]);
    PV *m = pv_dict_get(L->modules, key);
    if (m) return m;
    SrcFile *f = src_read(L->a, cands[c]);
    if (!f) continue;
    Node *tree = fe_parse(L->a, L->d, f);
    if (!tree) longjmp(*L->on_error, 1); /* the parse error is reported */
    PV *cls = pv_new(L, PV_CLASS);
    cls->s = "module";
    m = pv_new(L, PV_OBJ);
    m->cls = cls;
    m->attrs = env_new(L, NULL);
    env_set(L, m->attrs, "__name__", pv_str(L, dotted && dotted[0] ? dotted : "__init__"));
    if (c >= first_pylib || (from[0] && env_get(L->globals, PYLIB_MARK)))   /* ctc's own package, or imported by one */
      env_set(L, m->attrs, PYLIB_MARK, pv_str(L, dotted && dotted[0] ? dotted : "__init__"));
    pv_dict_set(L, at, L->modules, key, m); /* before running it: an import cycle sees it */
    Env *sg = L->globals, *se = L->env;
    L->globals = L->env = m->attrs;
    exec_block(L, m->attrs, &tree->body);
    L->globals = sg;
    L->env = se;
    return m;
  }
  return NULL;
}

/* Modules an import finds when no file beside the model is: torch's, the Python
 * standard library modules models use, numpy. Inside a `try` that catches
 * ImportError, any other module (apex, flash_attn, wandb ...) is not installed:
 * its import raises ModuleNotFoundError and the fallback runs, as optional
 * dependencies are written. Outside such a try it stays an opaque value. */
static int module_known(const char *dotted) {
  static const char *const known[] = {
      "torch", "functorch", "math", "dataclasses", "argparse", "typing", "collections", "functools", "itertools",
      "os", "sys", "random", "time", "json", "copy", "warnings", "logging", "abc", "enum", "re", "pathlib",
      "inspect", "__future__", "numpy", "pickle", "operator", "string", "types", "contextlib", "datetime", "glob",
      "shutil", "struct", "io", "csv", "numbers", "textwrap", "statistics", "platform", "gc", "traceback"};
  size_t n = strcspn(dotted, ".");
  for (size_t i = 0; i < sizeof known / sizeof *known; i++)
    if (strlen(known[i]) == n && !strncmp(known[i], dotted, n)) return 1;
  return 0;
}

/* `from mod import *` of a local module: the names of its __all__ if it has one,
 * else every global whose name does not start with '_' (Python's rule) */
static void import_star(L *L, Span at, PV *lm, const char *from) {
  PV *all = env_get(lm->attrs, "__all__");
  if (all) {
    PV **names;
    int n = iter_items(L, at, all, &names);
    for (int i = 0; i < n; i++) {
      if (names[i]->k != PV_STR) lower_error(L, at, "%s.__all__ must hold str names, not '%s'", from, pv_kind_name(names[i]));
      PV *v = env_get(lm->attrs, names[i]->s);
      if (!v) lower_error(L, at, "module '%s' has no attribute '%s' (listed in its __all__)", from, names[i]->s);
      env_set(L, L->env, names[i]->s, v);
    }
    return;
  }
  Env *e = lm->attrs;
  eval_charge(L, at, e->names.len);
  for (int i = 0; i < e->names.len; i++)
    if (e->names.data[i][0] != '_') env_set(L, L->env, e->names.data[i], e->vals.data[i]);
}

static void exec_import(L *L, Node *s) {
  for (int i = 0; i < s->list.len; i++) {
    Node *al = s->list.data[i];
    const char *full = al->name;
    if (s->kind == N_IMPORTFROM) {
      PV *lm = local_module(L, s->span, s->name, (int)s->ival);
      if (lm) {
        if (strcmp(al->name, "*") == 0) {
          import_star(L, al->span, lm, s->name ? s->name : ".");
          continue;
        }
        PV *v = env_get(lm->attrs, al->name);
        if (!v) v = local_module(L, s->span, arena_printf(L->a, "%s%s%s", s->name ? s->name : "", s->name ? "." : "",
                                                           al->name), (int)s->ival);
        if (!v) v = py_pylib_missing(L, al->span, lm, al->name);   /* from torchvision import transforms */
        if (!v) py_raise(L, al->span, "ImportError", "cannot import name '%s' from '%s'", al->name, s->name ? s->name : ".");
        env_set(L, L->env, al->name2 ? al->name2 : al->name, v);
        continue;
      }
      if (s->ival) lower_error(L, s->span, "relative import: no module '%s' beside this file", s->name ? s->name : ".");
    } else {
      PV *lm = local_module(L, s->span, full, 0);
      if (lm) {
        const char *dot = strchr(full, '.');
        if (al->name2 || !dot) {
          env_set(L, L->env, al->name2 ? al->name2 : full, lm);
          continue;
        }
        /* import pkg.mod binds pkg, with mod as its attribute */
        const char *root = arena_strndup(L->a, full, (size_t)(dot - full));
        PV *pkg = local_module(L, s->span, root, 0);
        if (!pkg) {
          pkg = pv_new(L, PV_OBJ);
          pkg->cls = lm->cls;
          pkg->attrs = env_new(L, NULL);
        }
        env_set(L, pkg->attrs, dot + 1, lm);
        env_set(L, L->env, root, pkg);
        continue;
      }
    }
    const char *mod = s->kind == N_IMPORTFROM ? s->name : full;
    if (mod && !module_known(mod) && py_catchable(L, "ModuleNotFoundError"))
      py_raise(L, s->span, "ModuleNotFoundError", "No module named '%s'", mod);
    if (s->kind == N_IMPORTFROM) {
      if (strcmp(al->name, "*") == 0)
        lower_error(L, al->span, "'from %s import *' is not supported; import the names you use", s->name);
      full = arena_printf(L->a, "%s.%s", s->name ? s->name : "", al->name);
      PV *ns = pv_ns(L, s->name ? s->name : "");
      PV *v = getattr_opt(L, al->span, ns, al->name);
      if (!v && s->name && !strncmp(s->name, "torch", 5) && py_catchable(L, "ImportError"))   /* torch.nn.RMSNorm in 1.13 */
        py_raise(L, al->span, "ImportError", "cannot import name '%s' from '%s' (not in ctc's torch)", al->name, s->name);
      env_set(L, L->env, al->name2 ? al->name2 : al->name, v ? v : pv_ns(L, full));
      continue;
    }
    if (al->name2) {
      env_set(L, L->env, al->name2, pv_ns(L, full));
    } else {
      /* import torch.nn binds "torch" */
      const char *dot = strchr(full, '.');
      env_set(L, L->env, dot ? arena_strndup(L->a, full, (size_t)(dot - full)) : full,
              pv_ns(L, dot ? arena_strndup(L->a, full, (size_t)(dot - full)) : full));
    }
  }
}

static void exec_classdef(L *L, Node *s) {
  PV *cls = pv_new(L, PV_CLASS);
  cls->s = s->name;
  cls->node = s;
  cls->env = env_new(L, L->env);
  if (s->list.len > 1) {
    /* multiple inheritance: accept only when the extra bases are plain object */
    lower_error(L, s->list.data[1]->span, "multiple inheritance is not supported by ctc");
  }
  if (s->list.len == 1) {
    PV *base = eval_expr(L, s->list.data[0]);
    if (base->k == PV_OPAQUE || base->k == PV_NS) base = py_builtin(L, BI_OBJECT, NULL); /* class D(Dataset) */
    if (base->k != PV_CLASS) lower_error(L, s->list.data[0]->span, "base class must be a class, not '%s'", pv_kind_name(base));
    if (base->bi && base->bi != BI_OBJECT && !L->host->can_subclass(base))
      lower_error(L, s->list.data[0]->span, "subclassing the builtin layer '%s' is not supported", base->s);
    cls->cls = base->bi == BI_OBJECT ? NULL : base;
  }
  Env *saved = L->env;
  L->env = cls->env;
  for (int i = 0; i < s->body.len; i++) {
    Node *st = s->body.data[i];
    if (st->kind == N_FUNCDEF) {
      PV *f = py_make_function(L, st);
      f->env = saved;  /* methods see the enclosing scope, not the class body */
      f->cls = cls;
      for (int k = st->decorators.len - 1; k >= 0; k--) {
        PV *dec = eval_expr(L, st->decorators.data[k]);
        if (dec->k == PV_BUILTIN && (dec->bi == BI_STATICMETHOD || dec->bi == BI_CLASSMETHOD || dec->bi == BI_PROPERTY))
          f->i = py_rows[dec->bi].arg;
        else if (dec->k == PV_OPAQUE) continue; /* a decorator from an unmodelled module: the function as it is */
        else if (!L->host->decorate(L, dec, f)) /* @torch.no_grad() ... */
          lower_error(L, st->decorators.data[k]->span, "this method decorator is not supported by ctc "
                                                       "(@staticmethod, @classmethod, @property, @torch.no_grad() are)");
      }
      env_set(L, cls->env, st->name, f);
      continue;
    }
    exec_block(L, cls->env, &(NodeVec){&s->body.data[i], 1, 1});
  }
  L->env = saved;
  PV *bound = cls;   /* what the class's name is bound to: the class, or what its decorators return */
  for (int k = s->decorators.len - 1; k >= 0; k--) {
    PV *dec = eval_expr(L, s->decorators.data[k]);
    if (dec->k == PV_BUILTIN && dec->bi == BI_DATACLASS) env_set(L, cls->env, "__dataclass__", pv_bool(L, 1));
    else if (dec->k == PV_BUILTIN && L->host->decorate(L, dec, pv_new(L, PV_FUNC))) continue;
    else if (dec->k == PV_OPAQUE) continue;   /* from an unmodelled module (a registry's): the class as it is */
    else if (dec->k == PV_FUNC || dec->k == PV_BOUND)   /* the file's own: cls = dec(cls), as Python */
      bound = call_value(L, s->decorators.data[k]->span, dec, &bound, 1, NULL, NULL, 0);
    else lower_error(L, s->decorators.data[k]->span, "this class decorator is not supported by ctc (only @dataclass)");
  }
  env_set(L, L->env, s->name, bound);
}


/* A loop over an opaque value (a data loader, itertools.count()) runs no iterations
 * at compile time. The names it would bind, and the Python lists and dicts it would
 * change in place (`sizes.append(v)`, `d[k] = v`), become opaque values naming the
 * loop, whether or not they were bound before: after the loop their values are
 * unknown, so `n = 0; for v in loader: n += 1` leaves no 0 behind for compiled code
 * to use silently. Script code after the loop (`print(loss)`) still runs, and
 * compiled code that needs one reports where it came from. */
static void opaque_loop_name(L *L, Node *loop, PV *it, const char *name, const char *verb) {
  PV *v = pv_opaque(L, loop->span, name);
  v->what = arena_printf(L->a, "value of '%s', which the loop at line %d over the opaque value '%s' would %s "
                         "(it runs no iterations at compile time)", name, loop->span.line, it->s, verb);
  env_set(L, L->env, name, v);
}

/* The Python list or dict named by n (a plain name), which a loop body changes in place. */
static void opaque_loop_container(L *L, Node *loop, PV *it, Node *n) {
  if (!n || n->kind != N_NAME) return;
  PV *v = env_lookup(L->env, n->name);
  if (!v) v = env_get(L->globals, n->name);
  if (v && (v->k == PV_LIST || v->k == PV_DICT)) opaque_loop_name(L, loop, it, n->name, "change");
}

static void opaque_loop_names(L *L, Node *loop, PV *it, Node *n) {
  if (!n) return;
  switch (n->kind) {
  case N_NAME: opaque_loop_name(L, loop, it, n->name, "set"); return;
  case N_SUBSCRIPT: opaque_loop_container(L, loop, it, n->a); return;   /* d[k] = v */
  case N_EXPR_STMT:   /* lst.append(v), d.update(...) */
    if (n->a && n->a->kind == N_CALL && n->a->a && n->a->a->kind == N_ATTR) opaque_loop_container(L, loop, it, n->a->a->a);
    return;
  case N_TUPLE:
  case N_LIST:
    for (int i = 0; i < n->list.len; i++) opaque_loop_names(L, loop, it, n->list.data[i]);
    return;
  case N_STARRED: opaque_loop_names(L, loop, it, n->a); return;
  case N_ASSIGN:
    for (int i = 0; i < n->list.len; i++) opaque_loop_names(L, loop, it, n->list.data[i]);
    return;
  case N_AUGASSIGN:
  case N_ANNASSIGN: opaque_loop_names(L, loop, it, n->a); return;
  case N_FOR:
  case N_IF:
  case N_WHILE:
  case N_WITH:
  case N_TRY:
    if (n->kind == N_FOR) opaque_loop_names(L, loop, it, n->a);
    if (n->kind == N_WITH)
      for (int i = 0; i < n->list.len; i++) opaque_loop_names(L, loop, it, n->list.data[i]->b);
    for (int i = 0; i < n->body.len; i++) opaque_loop_names(L, loop, it, n->body.data[i]);
    for (int i = 0; i < n->orelse.len; i++) opaque_loop_names(L, loop, it, n->orelse.data[i]);
    if (n->kind == N_TRY) {   /* its handlers and finally */
      for (int i = 0; i < n->list.len; i++) opaque_loop_names(L, loop, it, n->list.data[i]);
      for (int i = 0; i < n->body2.len; i++) opaque_loop_names(L, loop, it, n->body2.data[i]);
    }
    return;
  case N_EXCEPT:
    for (int i = 0; i < n->body.len; i++) opaque_loop_names(L, loop, it, n->body.data[i]);
    return;
  default: return;
  }
}

/* ---- try / except / raise -----------------------------------------------
 * Python exceptions raised by compile-time code (py_raise: `raise ValueError(...)`,
 * a missing dict key, attribute or name, an index out of range, a division by zero,
 * a failed assert, an import of a module that is not there) unwind to the innermost
 * `try` whose except clause names the exception's class or a base of it (by name:
 * `except (KeyError, ValueError) as e`, a bare `except:`, `except Exception`). ctc's
 * own diagnostics ("... is not supported by ctc", shape errors) are not Python
 * exceptions and are never caught: they stop the compile as before. */
struct TryFrame {
  Node *node;
  struct TryFrame *up;
  jmp_buf *jb;
};

static const char *const exc_bases[][2] = {
    {"Exception", "BaseException"}, {"ImportError", "Exception"}, {"ModuleNotFoundError", "ImportError"},
    {"LookupError", "Exception"}, {"KeyError", "LookupError"}, {"IndexError", "LookupError"},
    {"AttributeError", "Exception"}, {"ValueError", "Exception"}, {"TypeError", "Exception"},
    {"RuntimeError", "Exception"}, {"NotImplementedError", "RuntimeError"}, {"AssertionError", "Exception"},
    {"NameError", "Exception"}, {"ArithmeticError", "Exception"}, {"ZeroDivisionError", "ArithmeticError"},
    {"OverflowError", "ArithmeticError"}, {"StopIteration", "Exception"}, {"OSError", "Exception"},
    {"FileNotFoundError", "OSError"}, {"IOError", "Exception"}, {"EnvironmentError", "Exception"},
};

/* the class `type` is `name` or derives from it (OSError's aliases IOError, EnvironmentError) */
static int exc_is(const char *type, const char *name) {
  if (!strcmp(name, "IOError") || !strcmp(name, "EnvironmentError")) name = "OSError";
  for (int guard = 0; type && guard < 8; guard++) {
    if (!strcmp(type, name)) return 1;
    const char *up = NULL;
    for (size_t i = 0; i < sizeof exc_bases / sizeof *exc_bases; i++)
      if (!strcmp(exc_bases[i][0], type)) up = exc_bases[i][1];
    type = up;
  }
  return 0;
}

static int clause_matches(Node *e, const char *type) {
  if (!e) return 1;   /* bare except */
  if (e->kind == N_TUPLE) {
    for (int i = 0; i < e->list.len; i++)
      if (clause_matches(e->list.data[i], type)) return 1;
    return 0;
  }
  return (e->kind == N_NAME || e->kind == N_ATTR) && exc_is(type, e->name);
}

static Node *matching_handler(Node *t, const char *type) {
  for (int i = 0; t && i < t->list.len; i++)
    if (clause_matches(t->list.data[i]->a, type)) return t->list.data[i];
  return NULL;
}

int py_catchable(L *L, const char *type) {
  /* only a try whose handler is the innermost one (not a probe of loops.c's) */
  if (!L->tries || L->on_error != L->tries->jb) return 0;
  for (struct TryFrame *f = L->tries; f; f = f->up)
    if (matching_handler(f->node, type)) return 1;
  return 0;
}

/* the exception in flight again, from where it was raised (bare `raise`, no handler here) */
static CTC_NORETURN void reraise(L *L, const char *type, const char *msg, Span at) {
  py_raise(L, at, type, "%s", msg);
}

static CTC_NORETURN void exec_raise(L *L, Node *s) {
  Node *e = s->a;
  if (!e) {
    PV *t = env_lookup(L->env, "__exc_type__");
    const char *cur = t && t->k == PV_STR ? t->s : NULL;
    if (!cur) lower_error(L, s->span, "RuntimeError: no active exception to re-raise");
    reraise(L, cur, env_lookup(L->env, "__exc_msg__")->s, s->span);
  }
  Node *cls = e->kind == N_CALL ? e->a : e;
  const char *type = cls->kind == N_NAME || cls->kind == N_ATTR ? cls->name : "Exception";
  const char *msg = "";
  if (e->kind == N_CALL && e->list.len) msg = pv_to_str(L, e->list.data[0]->span, eval_expr(L, e->list.data[0]));
  if (py_catchable(L, type)) py_raise(L, s->span, type, "%s", msg);
  lower_error(L, s->span, "exception raised at compile time%s%s", msg[0] ? ": " : "", msg);
}

/* The interpreter state a caught exception returns to (the longjmp left it mid-call). */
typedef struct TryState {
  Env *env, *globals;
  int nstack, depth, staged;
  struct Cont *cont;
} TryState;

static TryState try_state(L *L) {
  return (TryState){L->env, L->globals, L->nstack, L->depth, L->staged_depth, L->cont};
}

static void try_restore(L *L, const TryState *t) {
  L->env = t->env;
  L->globals = t->globals;
  L->nstack = t->nstack;
  L->depth = t->depth;
  L->staged_depth = t->staged;
  L->cont = t->cont;
}

/* Run body (a handler or the else block) so that a Python exception leaving it runs
 * the try's finally block first (a frame without handlers of its own). */
static int run_then_finally(L *L, Node *s, NodeVec *body) {
  if (!s->body2.len) return exec_block(L, L->env, body);
  jmp_buf jb;
  struct TryFrame fr = {NULL, L->tries, &jb};
  jmp_buf *outer = L->on_error;
  const TryState saved = try_state(L);
  volatile int r;
  L->tries = &fr;
  L->on_error = &jb;
  if (setjmp(jb) == 0) {
    r = exec_block(L, L->env, body);
    L->tries = fr.up;
    L->on_error = outer;
    return r;
  }
  L->tries = fr.up;
  L->on_error = outer;
  if (!L->exc_type) longjmp(*outer, 1);
  try_restore(L, &saved);
  const char *type = L->exc_type, *msg = L->exc_msg;
  Span at = L->exc_at;
  L->exc_type = NULL;
  int f = exec_block(L, L->env, &s->body2);
  if (f != EX_NORMAL) return f;
  reraise(L, type, msg, at);
}

static int exec_try(L *L, Node *s) {
  jmp_buf jb;
  struct TryFrame fr = {s, L->tries, &jb};
  jmp_buf *outer = L->on_error;
  const TryState saved = try_state(L);
  volatile int r = EX_NORMAL;
  L->tries = &fr;
  L->on_error = &jb;
  if (setjmp(jb) == 0) {
    r = exec_block(L, L->env, &s->body);
    L->tries = fr.up;
    L->on_error = outer;
    if (r == EX_NORMAL) r = run_then_finally(L, s, &s->orelse);
  } else {
    L->tries = fr.up;
    L->on_error = outer;
    if (!L->exc_type) longjmp(*outer, 1);   /* a ctc diagnostic, reported: not caught */
    try_restore(L, &saved);
    const char *type = L->exc_type, *msg = L->exc_msg;
    Span at = L->exc_at;
    L->exc_type = NULL;
    Node *h = matching_handler(s, type);
    if (!h) {   /* an outer try takes it, after this one's finally */
      int f = exec_block(L, L->env, &s->body2);
      if (f != EX_NORMAL) return f;
      reraise(L, type, msg, at);
    }
    if (h->name) env_set(L, L->env, h->name, pv_str(L, msg));   /* str(e), print(e), f"{e}" */
    PV *st = env_get(L->env, "__exc_type__"), *sm = env_get(L->env, "__exc_msg__");
    env_set(L, L->env, "__exc_type__", pv_str(L, type));   /* for a bare `raise` in the handler */
    env_set(L, L->env, "__exc_msg__", pv_str(L, msg));
    r = run_then_finally(L, s, &h->body);
    env_set(L, L->env, "__exc_type__", st ? st : pv_none(L));
    env_set(L, L->env, "__exc_msg__", sm ? sm : pv_none(L));
  }
  int f = exec_block(L, L->env, &s->body2);
  return f != EX_NORMAL ? f : r;
}

static int exec_stmt(L *L, Node *s) {
  eval_charge(L, s->span, 1);
  switch (s->kind) {
  case N_EXPR_STMT: {
    PV *v = eval_expr(L, s->a);
    (void)v;
    return EX_NORMAL;
  }
  case N_ASSIGN: {
    PV *v = eval_expr(L, s->a);
    for (int i = 0; i < s->list.len; i++) py_assign_target(L, s->list.data[i], v);
    return EX_NORMAL;
  }
  case N_AUGASSIGN: {
    /* name += str: the name's own string (made by an earlier `name += ...`, not read
     * since) grows in place, so a loop of += stays linear as in CPython */
    PV *cur = s->a->kind == N_NAME ? py_lookup_name(L, s->a) : eval_expr(L, s->a);
    int owned = cur->owned;
    cur->owned = 0;
    PV *rhs = eval_expr(L, s->b);
    PV *v;
    if (s->a->kind == N_NAME && cur->k == PV_STR && rhs->k == PV_STR && s->op == OP_ADD) {
      size_t lb = strlen(rhs->s);
      if (owned && (size_t)cur->n + lb + 1 <= (size_t)cur->cap && (size_t)cur->n + lb <= ((size_t)1 << 28)) {
        eval_charge(L, s->span, (int64_t)(lb >> 6));
        memcpy((char *)cur->s + cur->n, rhs->s, lb + 1);
        cur->n += (int)lb;
        v = cur;
      } else
        v = py_concat_str(L, s->span, cur->s, rhs->s, 1);
      py_assign_target(L, s->a, v);
      v->owned = 1;
      return EX_NORMAL;
    }
    if (cur->k == PV_LIST && s->op == OP_ADD) {
      PV **it;
      int cnt = iter_items(L, s->b->span, rhs, &it);
      eval_charge(L, s->span, cnt);
      for (int i = 0; i < cnt; i++) pv_list_append(L, cur, it[i]);
      v = cur;
    } else if ((!is_host(cur) && cur->k != PV_OBJ) || !(v = L->host->inplace(L, s->span, s->op, cur, rhs)))
      v = py_binop(L, s->span, s->op, cur, rhs);
    py_assign_target(L, s->a, v);
    return EX_NORMAL;
  }
  case N_ANNASSIGN:
    if (s->b) py_assign_target(L, s->a, eval_expr(L, s->b));
    return EX_NORMAL;
  case N_RETURN:
    L->retval = s->a ? eval_expr(L, s->a) : pv_none(L);
    return EX_RETURN;
  case N_IF: {
    int t = truthy(L, s->a->span, eval_expr(L, s->a));
    return exec_block(L, L->env, t ? &s->body : &s->orelse);
  }
  case N_FOR: {
    PV *it = eval_expr(L, s->b);
    PV **items;
    int cnt = iter_items(L, s->b->span, it, &items);
    if (it->k == PV_OPAQUE) {   /* no iterations at compile time: the names the loop would bind are opaque */
      opaque_loop_names(L, s, it, s->a);
      for (int i = 0; i < s->body.len; i++) opaque_loop_names(L, s, it, s->body.data[i]);
    }
    for (int i = 0; i < cnt; i++) {
      py_assign_target(L, s->a, items[i]);
      int r = exec_block(L, L->env, &s->body);
      if (r == EX_RETURN) return r;
      if (r == EX_BREAK) return EX_NORMAL;
    }
    return exec_block(L, L->env, &s->orelse);
  }
  case N_WHILE: {
    while (truthy(L, s->a->span, eval_expr(L, s->a))) {
      int r = exec_block(L, L->env, &s->body);
      if (r == EX_RETURN) return r;
      if (r == EX_BREAK) return EX_NORMAL;
      eval_charge(L, s->span, 1);
    }
    return exec_block(L, L->env, &s->orelse);
  }
  case N_WITH: {
    int tokens[16], nt = 0;
    if (s->list.len > 16) lower_error(L, s->span, "more than 16 context managers in one `with`");
    for (int i = 0; i < s->list.len; i++) {
      Node *it = s->list.data[i];
      PV *cm = eval_expr(L, it->a);
      if (cm->k == PV_OBJ && cm->cls && cm->cls->bi == BI_FILE) {   /* with open(path) as f: the file object */
        if (it->b) py_assign_target(L, it->b, cm);
        continue;
      }
      if (cm->k == PV_OPAQUE) {   /* with opaque_cm(): binds an opaque value */
        if (it->b) py_assign_target(L, it->b, pv_opaque(L, it->span, arena_printf(L->a, "%s.__enter__()", cm->s)));
        continue;
      }
      tokens[nt++] = L->host->with_enter(L, it->span, it, cm);
    }
    int r = exec_block(L, L->env, &s->body);
    while (nt) L->host->with_exit(L, tokens[--nt]);
    return r;
  }
  case N_PASS: return EX_NORMAL;
  case N_BREAK: return EX_BREAK;
  case N_CONTINUE: return EX_CONTINUE;
  case N_ASSERT: {
    PV *c = eval_expr(L, s->a);
    if (L->host->runtime(L, c)) return EX_NORMAL; /* a run-time check: not compiled */
    if (!truthy(L, s->a->span, c)) {
      const char *msg = s->b ? pv_to_str(L, s->b->span, eval_expr(L, s->b)) : NULL;
      py_raise(L, s->span, "AssertionError", "assertion failed at compile time%s%s", msg ? ": " : "", msg ? msg : "");
    }
    return EX_NORMAL;
  }
  case N_DEL:
    for (int i = 0; i < s->list.len; i++) {
      Node *t = s->list.data[i];
      if (t->kind != N_NAME) lower_error(L, t->span, "only 'del name' is supported");
      env_set(L, L->env, t->name, pv_none(L));
    }
    return EX_NORMAL;
  case N_RAISE: exec_raise(L, s);
  case N_YIELD:
    lower_error(L, s->span, "'yield' is not supported by ctc: generator functions (and @contextlib.contextmanager) "
                            "cannot be called in a compiled file; a file may define one it does not call");
  case N_GLOBAL:
    lower_error(L, s->span, "'global' and 'nonlocal' are not supported by ctc");
  case N_TRY: return exec_try(L, s);
  case N_IMPORT:
  case N_IMPORTFROM: exec_import(L, s); return EX_NORMAL;
  case N_FUNCDEF: {
    PV *f = py_make_function(L, s);
    for (int k = s->decorators.len - 1; k >= 0; k--) {
      PV *dec = eval_expr(L, s->decorators.data[k]);
      if (L->host->decorate(L, dec, f)) continue; /* @torch.no_grad() ... */
      if (dec->k == PV_OPAQUE) continue;           /* from an unmodelled module: the function as it is */
      if (dec->k == PV_FUNC || dec->k == PV_BOUND) {   /* the file's own (a model registry): f = dec(f), as Python */
        f = call_value(L, s->decorators.data[k]->span, dec, &f, 1, NULL, NULL, 0);
        continue;
      }
      lower_error(L, s->decorators.data[k]->span, "this function decorator is not supported by ctc");
    }
    env_set(L, L->env, s->name, f);
    return EX_NORMAL;
  }
  case N_CLASSDEF: exec_classdef(L, s); return EX_NORMAL;
  default: break;
  }
  lower_error(L, s->span, "this statement (%s) is not supported by ctc", fe_node_kind_name(s->kind));
}

/* ---- `if` on a run-time tensor ---------------------------------------------
 * A condition that is a one-element tensor computed by the staged function (a
 * learning rate from the iteration counter: `if it < warmup_iters: return ...`)
 * cannot choose a branch at compile time. ctc runs both branches, each on its
 * own copy of the local names, and merges them with torch.where: names bound to
 * different values become where(cond, then, else), and when a branch returns,
 * the statements after the `if` run on the other path and the two return values
 * are selected. This is exact only for code without side effects, so the
 * branches (and those statements) may only bind local names, return, and nest
 * such `if`s; anything else is refused. */

static Node *impure_stmt(NodeVec *b, int from) {
  for (int i = from; i < b->len; i++) {
    Node *s = b->data[i];
    switch (s->kind) {
    case N_ASSIGN:
      for (int k = 0; k < s->list.len; k++) {
        Node *t = s->list.data[k];
        if (t->kind == N_TUPLE) {
          for (int j = 0; j < t->list.len; j++)
            if (t->list.data[j]->kind != N_NAME) return t->list.data[j];
        } else if (t->kind != N_NAME)
          return t;
      }
      break;
    case N_AUGASSIGN:
    case N_ANNASSIGN:
      if (s->a->kind != N_NAME) return s;
      break;
    case N_RETURN: case N_PASS: case N_ASSERT: break;
    case N_EXPR_STMT:
      if (s->a->kind != N_STR) return s;
      break;
    case N_IF: {
      Node *n = impure_stmt(&s->body, 0);
      if (!n) n = impure_stmt(&s->orelse, 0);
      if (n) return n;
      break;
    }
    default: return s;
    }
  }
  return NULL;
}

void staged_effect_check(L *L, Span at, const char *what) {
  if (L->staged_depth)
    lower_error(L, at, "%s under an `if` on a run-time tensor cannot be compiled: ctc runs both branches and selects "
                       "values with torch.where, so effects would happen on both paths", what);
}

CTC_NORETURN static void impure_error(L *L, Node *s) {
  lower_error(L, s->span, "this statement depends on an `if` whose condition is a run-time tensor: ctc computes both "
                          "branches and selects with torch.where, so they (and what follows a branch that returns) "
                          "may only assign local names and return");
}

static Env *env_copy(L *L, Env *e) {
  Env *c = env_new(L, e->parent);
  for (int i = 0; i < e->names.len; i++) env_set(L, c, e->names.data[i], e->vals.data[i]);
  return c;
}

/* The value a name (or the function's result) has after the `if`. */
PV *py_select_value(L *L, Span at, const char *what, PV *c, PV *a, PV *b) {
  if (a == b) return a;
  int ta = a->k == PV_HOST || pv_is_num(a), tb = b->k == PV_HOST || pv_is_num(b);
  if (ta && tb) {
    if (a->k == b->k && a->k != PV_HOST && pv_num(a) == pv_num(b)) return a;
    return L->host->select(L, at, c, a, b);
  }
  if (pv_is_seq(a) && a->k == b->k && a->n == b->n) {
    PV *r = a->k == PV_LIST ? pv_list(L, NULL, 0) : pv_tuple(L, NULL, 0);
    for (int i = 0; i < a->n; i++) pv_list_append(L, r, py_select_value(L, at, what, c, a->items[i], b->items[i]));
    return r;
  }
  if (!ta && !tb && pv_equal(L, at, a, b)) return a;
  lower_error(L, at, "the branches of this `if` on a run-time tensor give %s different values (%s and %s); only "
                     "tensors and numbers can be selected with torch.where", what, pv_kind_name(a), pv_kind_name(b));
}

/* What follows the block being executed, up to the end of the function: the
 * rest of the enclosing block and, above it, its own continuation. */
struct Cont {
  NodeVec *body;
  int rest;
  struct Cont *up;
};

/* Run what follows an `if` on one path: the rest of its block, then the
 * enclosing blocks' rests, until something returns. */
static int run_tail(L *L, Env *e, NodeVec *body, int rest, struct Cont *up) {
  Node *bad = impure_stmt(body, rest);
  if (bad) impure_error(L, bad);
  struct Cont *saved = L->cont;
  L->cont = up;
  NodeVec tail = {body->data + rest, body->len - rest, body->len - rest};
  int r = exec_block(L, e, &tail);
  L->cont = saved;
  if (r == EX_NORMAL && up) return run_tail(L, e, up->body, up->rest, up->up);
  return r;
}

static int staged_if(L *L, Node *s, PV *c, NodeVec *body, int rest, int *consumed) {
  L->host->check_cond(L, s->a->span, c);
  Node *bad = impure_stmt(&s->body, 0);
  if (!bad) bad = impure_stmt(&s->orelse, 0);
  if (bad) impure_error(L, bad);
  Env *e0 = L->env, *e1 = env_copy(L, e0), *e2 = env_copy(L, e0);
  struct Cont *up = L->cont, here = {body, rest, up};
  L->cont = &here; /* an `if` nested in a branch continues with what follows this one */
  L->staged_depth++;
  int r1 = exec_block(L, e1, &s->body);
  PV *v1 = L->retval;
  int r2 = exec_block(L, e2, &s->orelse);
  PV *v2 = L->retval;
  L->cont = up;
  if (r1 == EX_NORMAL && r2 == EX_NORMAL) {
    for (int i = 0; i < e1->names.len; i++) {
      const char *n = e1->names.data[i];
      PV *b = env_get(e2, n);
      if (b) env_set(L, e0, n, py_select_value(L, s->span, arena_printf(L->a, "'%s'", n), c, e1->vals.data[i], b));
    }
    L->staged_depth--;
    return EX_NORMAL;
  }
  if ((r1 != EX_NORMAL && r1 != EX_RETURN) || (r2 != EX_NORMAL && r2 != EX_RETURN))
    lower_error(L, s->span, "break/continue under an `if` on a run-time tensor cannot be compiled");
  if (r1 == EX_NORMAL || r2 == EX_NORMAL) {
    /* one branch returned: what follows the `if` is the other path */
    int r = run_tail(L, r1 == EX_NORMAL ? e1 : e2, body, rest, up);
    if (r != EX_RETURN)
      lower_error(L, s->span, "one path through this `if` on a run-time tensor returns a value and the other reaches "
                              "the end of the function");
    if (r1 == EX_NORMAL) v1 = L->retval;
    else v2 = L->retval;
    *consumed = 1;
  }
  L->staged_depth--;
  L->retval = py_select_value(L, s->span, "return", c, v1, v2);
  return EX_RETURN;
}

int exec_block(L *L, Env *env, NodeVec *body) {
  Env *saved = L->env;
  L->env = env;
  int r = EX_NORMAL;
  for (int i = 0; i < body->len && r == EX_NORMAL; i++) {
    Node *s = body->data[i];
    if (s->kind != N_IF) {
      struct Cont *cont = L->cont; /* loops, with, try: their bodies are not followed by this block's rest */
      L->cont = NULL;
      r = exec_stmt(L, s);
      L->cont = cont;
      continue;
    }
    eval_charge(L, s->span, 1);
    PV *c = eval_expr(L, s->a);
    if (L->host->runtime(L, c)) {
      int consumed = 0;
      r = staged_if(L, s, c, body, i + 1, &consumed);
      if (consumed) break;
    } else {
      /* a compile-time `if`: a staged `if` inside continues with what follows it */
      struct Cont *up = L->cont, here = {body, i + 1, up};
      L->cont = &here;
      r = exec_block(L, L->env, truthy(L, s->a->span, c) ? &s->body : &s->orelse);
      L->cont = up;
    }
  }
  L->env = saved;
  return r;
}

/* ---- a module-level training loop ------------------------------------------ */

/* Does the tree call a method named `name` (x.name(...))? */
static int calls_method(const Node *n, const char *name) {
  if (!n) return 0;
  if (n->kind == N_CALL && n->a && n->a->kind == N_ATTR && !strcmp(n->a->name, name)) return 1;
  if (calls_method(n->a, name) || calls_method(n->b, name) || calls_method(n->c, name)) return 1;
  const NodeVec *vs[] = {&n->list, &n->list2, &n->body, &n->orelse, &n->body2};
  for (size_t k = 0; k < sizeof vs / sizeof vs[0]; k++)
    for (int i = 0; i < vs[k]->len; i++)
      if (calls_method(vs[k]->data[i], name)) return 1;
  return 0;
}

/* `xb, yb = get_batch(...)`, get_batch a def among the first `ndefs` statements of the module */
static int takes_batch(const Node *s, const NodeVec *module, int ndefs) {
  if (s->kind != N_ASSIGN || s->list.len != 1 || s->a->kind != N_CALL || s->a->a->kind != N_NAME) return 0;
  const Node *t = s->list.data[0];
  if ((t->kind != N_TUPLE && t->kind != N_LIST) || t->list.len != 2) return 0;
  for (int i = 0; i < ndefs; i++) {
    const Node *d = module->data[i];
    if (d->kind == N_FUNCDEF && !strcmp(d->name, s->a->a->name)) return 1;
  }
  return 0;
}

int py_module_training_loop(const NodeVec *body) {
  for (int i = 0; i < body->len; i++) {
    const Node *s = body->data[i];
    if (s->kind != N_FOR) continue;
    int bw = 0, st = 0, batch = 0;
    for (int k = 0; k < s->body.len; k++) {
      bw |= calls_method(s->body.data[k], "backward");
      st |= calls_method(s->body.data[k], "step");
      batch |= takes_batch(s->body.data[k], body, i);
    }
    if (bw && st && batch) return i;
  }
  return -1;
}
