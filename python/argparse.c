/* argparse.c - Python's argparse at compile time: ArgumentParser, add_argument
 * (option strings or a positional name; type, default, action store/store_true/
 * store_false/store_const/count/append, required, dest, nargs '?'/'*'/'+'/N,
 * const, choices; help and metavar ignored), argument groups, set_defaults, and
 * parse_args / parse_known_args returning a Namespace of the defaults, or of the
 * values given on ctc's command line with --args '...' (L->script_args). A
 * missing required argument, an unknown option or a bad value is a located error
 * at the parse_args call, as argparse's own exit would be. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include "py_int.h"

/* One argument: [dest, option strings (list, empty for a positional), type,
 * default, action, required, nargs, const, choices] in a tuple. */
enum { A_DEST, A_OPTS, A_TYPE, A_DEFAULT, A_ACTION, A_REQUIRED, A_NARGS, A_CONST, A_CHOICES, A__N };

static PV *parser_args(L *L, PV *p) {
  PV *v = env_get(p->attrs, "_ctc_arguments");
  if (!v) {
    v = pv_list(L, NULL, 0);
    env_set(L, p->attrs, "_ctc_arguments", v);
  }
  return v;
}

static PV *parser_of(L *L, Span at, PV *self) {
  if (!self || self->k != PV_OBJ || !self->attrs) lower_error(L, at, "argparse: not an ArgumentParser");
  PV *root = env_get(self->attrs, "_ctc_parser");   /* an argument group: its parser */
  return root ? root : self;
}

PV *bi_argparse_parser(L *L, PV *cls, Args *A) {
  (void)A;
  PV *o = pv_new(L, PV_OBJ);
  o->cls = cls;
  o->attrs = env_new(L, NULL);
  parser_args(L, o);
  env_set(L, o->attrs, "_ctc_defaults", pv_dict(L));
  return o;
}

PV *bi_argparse_namespace(L *L, PV *cls, Args *A) {
  PV *o = pv_new(L, PV_OBJ);
  o->cls = cls;
  o->attrs = env_new(L, NULL);
  if (A->nargs) lower_error(L, A->at, "Namespace() takes keyword arguments only");
  for (int i = 0; i < A->nkw; i++) env_set(L, o->attrs, A->kwnames[i], A->kwvals[i]);
  return o;
}

static const char *dest_of(L *L, const char *opt) {
  while (*opt == '-') opt++;
  char *d = arena_strdup(L->a, opt);
  for (char *c = d; *c; c++)
    if (*c == '-') *c = '_';
  return d;
}

PV *bi_argparse_add(L *L, PV *fn, Args *A) {
  PV *p = parser_of(L, A->at, fn->self);
  PV *row[A__N];
  for (int i = 0; i < A__N; i++) row[i] = pv_none(L);
  row[A_OPTS] = pv_list(L, NULL, 0);
  row[A_ACTION] = pv_str(L, "store");
  row[A_REQUIRED] = pv_bool(L, 0);
  const char *dest = NULL, *longest = NULL;
  for (int i = 0; i < A->nargs; i++) {
    if (A->args[i]->k != PV_STR) lower_error(L, A->at, "add_argument: option strings must be str");
    const char *s = A->args[i]->s;
    if (s[0] == '-') {
      pv_list_append(L, row[A_OPTS], A->args[i]);
      if (!longest || (s[1] == '-' && longest[1] != '-')) longest = s;
    } else {
      if (A->nargs != 1) lower_error(L, A->at, "add_argument: a positional argument takes one name");
      dest = s;
      row[A_REQUIRED] = pv_bool(L, 1);
    }
  }
  if (!A->nargs) lower_error(L, A->at, "add_argument() needs an option string or a name");
  if (!dest) dest = dest_of(L, longest);
  for (int k = 0; k < A->nkw; k++) {
    const char *n = A->kwnames[k];
    PV *v = A->kwvals[k];
    if (!strcmp(n, "dest")) dest = pv_to_str(L, A->at, v);
    else if (!strcmp(n, "type")) row[A_TYPE] = v;
    else if (!strcmp(n, "default")) row[A_DEFAULT] = v;
    else if (!strcmp(n, "action")) {
      if (v->k != PV_STR) lower_error(L, A->at, "add_argument: action must be a string for ctc");
      row[A_ACTION] = v;
    } else if (!strcmp(n, "required")) row[A_REQUIRED] = pv_bool(L, truthy(L, A->at, v));
    else if (!strcmp(n, "nargs")) row[A_NARGS] = v;
    else if (!strcmp(n, "const")) row[A_CONST] = v;
    else if (!strcmp(n, "choices")) row[A_CHOICES] = v;
    else if (strcmp(n, "help") && strcmp(n, "metavar"))
      lower_error(L, A->at, "add_argument: keyword '%s' is not supported by ctc", n);
  }
  const char *act = row[A_ACTION]->s;
  int has_default = 0;
  for (int k = 0; k < A->nkw; k++) has_default |= !strcmp(A->kwnames[k], "default");
  if (!has_default) {
    if (!strcmp(act, "store_true")) row[A_DEFAULT] = pv_bool(L, 0);
    else if (!strcmp(act, "store_false")) row[A_DEFAULT] = pv_bool(L, 1);
  }
  if (strcmp(act, "store") && strcmp(act, "store_true") && strcmp(act, "store_false") && strcmp(act, "store_const") &&
      strcmp(act, "count") && strcmp(act, "append"))
    lower_error(L, A->at, "add_argument: action '%s' is not supported by ctc", act);
  row[A_DEST] = pv_str(L, dest);
  pv_list_append(L, parser_args(L, p), pv_tuple(L, row, A__N));
  return pv_none(L);
}

PV *bi_argparse_group(L *L, PV *fn, Args *A) {
  (void)A;
  PV *p = parser_of(L, A->at, fn->self);
  PV *g = pv_new(L, PV_OBJ);
  g->cls = p->cls;
  g->attrs = env_new(L, NULL);
  env_set(L, g->attrs, "_ctc_parser", p);
  return g;
}

PV *bi_argparse_set_defaults(L *L, PV *fn, Args *A) {
  PV *p = parser_of(L, A->at, fn->self);
  PV *d = env_get(p->attrs, "_ctc_defaults");
  for (int i = 0; i < A->nkw; i++) pv_dict_set(L, A->at, d, pv_str(L, A->kwnames[i]), A->kwvals[i]);
  return pv_none(L);
}

PV *bi_argparse_nothing(L *L, PV *fn, Args *A) {
  (void)fn;
  (void)A;
  return pv_none(L);
}

/* A value from the command line through type= (int, float, str, a function). */
static PV *convert(L *L, Span at, PV *row, const char *text) {
  PV *s = pv_str(L, text);
  PV *t = row->items[A_TYPE];
  if (t->k == PV_BUILTIN && (t->bi == BI_INT || t->bi == BI_FLOAT)) { /* argparse's own message */
    char *end;
    errno = 0;
    if (t->bi == BI_INT) (void)strtoll(text, &end, 10);
    else (void)strtod(text, &end);
    while (*end == ' ') end++;
    if (!*text || *end)
      lower_error(L, at, "argparse: argument %s: invalid %s value: '%s'", row->items[A_DEST]->s, t->s, text);
  }
  PV *v = t->k == PV_NONE ? s : call_value(L, at, t, &s, 1, NULL, NULL, 0);
  PV *ch = row->items[A_CHOICES];
  if (ch->k != PV_NONE) {
    PV **it;
    int n = iter_items(L, at, ch, &it), ok = 0;
    for (int i = 0; i < n && !ok; i++) ok = pv_equal(L, at, it[i], v);
    if (!ok)
      lower_error(L, at, "argparse: argument %s: invalid choice: %s (choose from %s)", row->items[A_DEST]->s,
                  pv_repr(L, at, v), pv_repr(L, at, ch));
  }
  return v;
}

/* How many values an argument takes: -1 for '?', -2 '*', -3 '+', else N (1 when absent). */
static int nargs_of(L *L, Span at, PV *row) {
  PV *n = row->items[A_NARGS];
  if (n->k == PV_NONE) return 1;
  if (n->k == PV_INT) return (int)n->i;
  if (n->k == PV_STR && !strcmp(n->s, "?")) return -1;
  if (n->k == PV_STR && !strcmp(n->s, "*")) return -2;
  if (n->k == PV_STR && !strcmp(n->s, "+")) return -3;
  lower_error(L, at, "add_argument: nargs=%s is not supported by ctc", pv_repr(L, at, n));
}

/* Split the --args text on blanks, with '...' and "..." quoting. */
static int split_words(L *L, const char *s, const char ***out) {
  Vec(const char *) w = {0};
  while (*s) {
    while (*s == ' ' || *s == '\t' || *s == '\n') s++;
    if (!*s) break;
    SB b = {0};
    Span none = {0};
    while (*s && *s != ' ' && *s != '\t' && *s != '\n') {
      if (*s == '\'' || *s == '"') {
        char q = *s++;
        const char *e = strchr(s, q);
        size_t n = e ? (size_t)(e - s) : strlen(s);
        sb_add(L, none, &b, s, n);
        s += n + (e ? 1 : 0);
      } else
        sb_add(L, none, &b, s++, 1);
    }
    vec_push(L->a, &w, sb_done(L, &b));
  }
  *out = w.data;
  return w.len;
}

static PV *parse(L *L, PV *fn, Args *A, int known) {
  PV *p = parser_of(L, A->at, fn->self);
  PV *args_given = NULL, *ns_given = NULL;
  for (int i = 0; i < A->nargs; i++) {
    if (i) ns_given = A->args[i];
    else args_given = A->args[i];
  }
  for (int k = 0; k < A->nkw; k++) {
    if (!strcmp(A->kwnames[k], "args")) args_given = A->kwvals[k];
    else if (!strcmp(A->kwnames[k], "namespace")) ns_given = A->kwvals[k];
    else lower_error(L, A->at, "%s() got an unexpected keyword argument '%s'", A->fname, A->kwnames[k]);
  }
  const char **words;
  int nw;
  if (args_given && args_given->k != PV_NONE) {
    PV **it;
    nw = iter_items(L, A->at, args_given, &it);
    words = arena_alloc(L->a, sizeof(char *) * (size_t)(nw + 1));
    for (int i = 0; i < nw; i++) words[i] = pv_to_str(L, A->at, it[i]);
  } else
    nw = split_words(L, L->script_args ? L->script_args : "", &words);
  PV *rows = parser_args(L, p);
  PV *ns = ns_given && ns_given->k == PV_OBJ ? ns_given : NULL;
  if (!ns) {
    ns = pv_new(L, PV_OBJ);
    ns->cls = py_builtin(L, BI_ARGPARSE_NAMESPACE, NULL);
    ns->attrs = env_new(L, NULL);
  }
  int *seen = arena_alloc(L->a, sizeof(int) * (size_t)(rows->n + 1));
  for (int i = 0; i < rows->n; i++) {
    PV *r = rows->items[i], *d = r->items[A_DEFAULT];
    seen[i] = 0;
    if (d->k == PV_STR && r->items[A_TYPE]->k != PV_NONE) d = convert(L, A->at, r, d->s);
    env_set(L, ns->attrs, r->items[A_DEST]->s, d);
  }
  PV *defs = env_get(p->attrs, "_ctc_defaults");
  for (int i = 0; i < defs->n; i++) env_set(L, ns->attrs, defs->keys[i]->s, defs->items[i]);
  PV *extra = pv_list(L, NULL, 0);
  int pos = 0;
  for (int w = 0; w < nw;) {
    const char *word = words[w];
    int ri = -1;
    const char *inl = NULL;
    if (word[0] == '-' && word[1]) {
      const char *eq = strchr(word, '=');
      size_t len = eq ? (size_t)(eq - word) : strlen(word);
      for (int i = 0; i < rows->n && ri < 0; i++) {
        PV *o = rows->items[i]->items[A_OPTS];
        for (int k = 0; k < o->n; k++)
          if (strlen(o->items[k]->s) == len && !strncmp(o->items[k]->s, word, len)) ri = i;
      }
      if (ri < 0) {
        if (known) {
          pv_list_append(L, extra, pv_str(L, word));
          w++;
          continue;
        }
        lower_error(L, A->at, "argparse: unrecognized argument %s (from --args)", word);
      }
      if (eq) inl = eq + 1;
      w++;
    } else {
      for (int i = 0, k = 0; i < rows->n; i++)
        if (!rows->items[i]->items[A_OPTS]->n && k++ == pos) ri = i;
      if (ri < 0) {
        if (known) {
          pv_list_append(L, extra, pv_str(L, word));
          w++;
          continue;
        }
        lower_error(L, A->at, "argparse: unrecognized argument %s (from --args)", word);
      }
      pos++;
    }
    PV *r = rows->items[ri];
    const char *act = r->items[A_ACTION]->s, *dest = r->items[A_DEST]->s;
    seen[ri] = 1;
    if (!strcmp(act, "store_true") || !strcmp(act, "store_false") || !strcmp(act, "store_const")) {
      if (inl) lower_error(L, A->at, "argparse: argument %s: ignored explicit argument '%s'", word, inl);
      env_set(L, ns->attrs, dest, !strcmp(act, "store_const") ? r->items[A_CONST] : pv_bool(L, act[6] == 't'));
      continue;
    }
    if (!strcmp(act, "count")) {
      PV *c = env_get(ns->attrs, dest);
      env_set(L, ns->attrs, dest, pv_int(L, (c && c->k == PV_INT ? c->i : 0) + 1));
      continue;
    }
    int na = nargs_of(L, A->at, r);
    PV *vals = pv_list(L, NULL, 0);
    if (inl) pv_list_append(L, vals, convert(L, A->at, r, inl));
    if (r->items[A_OPTS]->n == 0 && !inl) { /* the positional word itself */
      pv_list_append(L, vals, convert(L, A->at, r, word));
      w++;
    }
    while (w < nw && (na < 0 || vals->n < na) && !(words[w][0] == '-' && words[w][1])) {
      if (na == -1 && vals->n == 1) break;
      pv_list_append(L, vals, convert(L, A->at, r, words[w++]));
    }
    if ((na > 0 && vals->n != na) || (na == -3 && vals->n == 0))
      lower_error(L, A->at, "argparse: argument %s: expected %s argument%s", r->items[A_DEST]->s,
                  na > 0 ? arena_printf(L->a, "%d", na) : "at least one", na == 1 ? "" : "s");
    PV *v = vals->n ? vals->items[0] : r->items[A_CONST];
    if (na != 1 && na != -1) v = vals;
    if (!strcmp(act, "append")) {
      PV *cur = env_get(ns->attrs, dest);
      PV *l = pv_list(L, NULL, 0);
      if (cur && cur->k == PV_LIST)
        for (int i = 0; i < cur->n; i++) pv_list_append(L, l, cur->items[i]);
      pv_list_append(L, l, v);
      v = l;
    }
    env_set(L, ns->attrs, dest, v);
  }
  for (int i = 0; i < rows->n; i++) {
    PV *r = rows->items[i];
    int na = nargs_of(L, A->at, r);
    if (!seen[i] && truthy(L, A->at, r->items[A_REQUIRED]) && !(r->items[A_OPTS]->n == 0 && (na == -1 || na == -2))) {
      PV *o = r->items[A_OPTS];
      lower_error(L, A->at, "argparse: the following arguments are required: %s (give them to ctc with --args '...')",
                  o->n ? o->items[o->n - 1]->s : r->items[A_DEST]->s);
    }
  }
  if (known) {
    PV *pair[2] = {ns, extra};
    return pv_tuple(L, pair, 2);
  }
  return ns;
}

PV *bi_argparse_parse(L *L, PV *fn, Args *A) { return parse(L, fn, A, py_rows[fn->bi].arg); }
