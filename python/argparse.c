/* argparse.c - Python's argparse at compile time: ArgumentParser, add_argument
 * (option strings or a positional name; type, default, action store/store_true/
 * store_false/store_const/count/append, required, dest, nargs '?'/'*'/'+'/N,
 * const, choices; help and metavar ignored), allow_abbrev, argument groups,
 * set_defaults, and parse_args / parse_known_args returning a Namespace of the
 * defaults, or of the values given on ctc's command line with --args '...'
 * (L->script_args). The words are parsed as CPython 3.11's argparse does them:
 * each classified as an option (exact, 'opt=value', an unambiguous '--' prefix,
 * '-xVALUE', '-vvv'), a value (negative numbers unless an option looks like one,
 * everything after '--') or '--', then matched against each argument's nargs
 * pattern with the same greedy regular-expression semantics. Whatever CPython
 * refuses (a missing required argument, an unknown or ambiguous option, a bad
 * value, a value given to a flag) is a located error at the parse_args call, as
 * argparse's own exit would be. */
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
  PV *o = pv_new(L, PV_OBJ);
  o->cls = cls;
  o->attrs = env_new(L, NULL);
  parser_args(L, o);
  env_set(L, o->attrs, "_ctc_defaults", pv_dict(L));
  for (int k = 0; k < A->nkw; k++) {
    PV *v = A->kwvals[k];
    if (!strcmp(A->kwnames[k], "allow_abbrev")) env_set(L, o->attrs, "_ctc_allow_abbrev", v);
    else if (!strcmp(A->kwnames[k], "prefix_chars") && (v->k != PV_STR || strcmp(v->s, "-")))
      lower_error(L, A->at, "ArgumentParser: prefix_chars other than '-' is not supported by ctc");
  }
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
  if (!has_default) { /* a set_defaults() value before, else the action's own */
    PV *d = env_get(p->attrs, "_ctc_defaults"), *key = pv_str(L, dest);
    for (int i = 0; i < d->n; i++)
      if (pv_equal(L, A->at, d->keys[i], key)) row[A_DEFAULT] = d->items[i], has_default = 1;
  }
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
  PV *rows = parser_args(L, p);
  for (int i = 0; i < A->nkw; i++) {
    pv_dict_set(L, A->at, d, pv_str(L, A->kwnames[i]), A->kwvals[i]);
    for (int k = 0; k < rows->n; k++) /* the arguments already added take it as their default */
      if (!strcmp(rows->items[k]->items[A_DEST]->s, A->kwnames[i])) rows->items[k]->items[A_DEFAULT] = A->kwvals[i];
  }
  return pv_none(L);
}

PV *bi_argparse_nothing(L *L, PV *fn, Args *A) {
  (void)fn;
  (void)A;
  return pv_none(L);
}

/* The argument's name in messages, as argparse's own: its option strings joined
 * by '/', or a positional's dest. */
static const char *arg_name(L *L, PV *row) {
  PV *o = row->items[A_OPTS];
  if (!o->n) return row->items[A_DEST]->s;
  SB b = {0};
  Span none = {0};
  for (int k = 0; k < o->n; k++) {
    if (k) sb_add(L, none, &b, "/", 1);
    sb_add(L, none, &b, o->items[k]->s, strlen(o->items[k]->s));
  }
  return sb_done(L, &b);
}

/* Python's int()/float() syntax for a string: surrounding blanks, a sign, digits
 * with single '_' between them, for float a '.', an exponent, inf/infinity/nan.
 * Writes the text without blanks and '_' to out (strtoll/strtod read it);
 * 0 when Python's conversion would refuse it (hex, '1_', '', '1e', ...). */
static int py_number_text(const char *s, int is_float, char *out) {
  char *o = out;
  while (*s == ' ' || (*s >= '\t' && *s <= '\r')) s++;
  const char *end = s + strlen(s);
  while (end > s && (end[-1] == ' ' || (end[-1] >= '\t' && end[-1] <= '\r'))) end--;
  if (s < end && (*s == '+' || *s == '-')) *o++ = *s++;
  if (is_float) {
    static const char *const words[] = {"inf", "infinity", "nan"};
    for (int k = 0; k < 3; k++)
      if ((size_t)(end - s) == strlen(words[k]) && !strncasecmp(s, words[k], strlen(words[k]))) {
        memcpy(o, s, (size_t)(end - s));
        o[end - s] = 0;
        return 1;
      }
  }
  int digits = 0, part = 0; /* part 0: integer digits, 1: fraction, 2: exponent */
  while (s < end) {
    char c = *s++;
    if (c >= '0' && c <= '9') {
      *o++ = c;
      digits++;
    } else if (c == '_') {
      if (!(o > out && o[-1] >= '0' && o[-1] <= '9') || !(s < end && *s >= '0' && *s <= '9')) return 0;
    } else if (is_float && c == '.' && part == 0) {
      *o++ = c;
      part = 1;
    } else if (is_float && (c == 'e' || c == 'E') && part < 2 && digits) {
      *o++ = 'e';
      if (s < end && (*s == '+' || *s == '-')) *o++ = *s++;
      part = 2;
      digits = 0;
    } else
      return 0;
  }
  *o = 0;
  return digits > 0;
}

/* A value from the command line through type= (int, float, str, a function);
 * check_choices as argparse's _check_value after it. */
static PV *convert(L *L, Span at, PV *row, PV *s, int check_choices) {
  PV *t = row->items[A_TYPE], *v = s;
  if (s->k == PV_STR && t->k == PV_BUILTIN && (t->bi == BI_INT || t->bi == BI_FLOAT)) { /* argparse's own message */
    char *buf = arena_alloc(L->a, strlen(s->s) + 1), *end;
    if (!py_number_text(s->s, t->bi == BI_FLOAT, buf))
      lower_error(L, at, "argparse: argument %s: invalid %s value: '%s'", arg_name(L, row), t->s, s->s);
    errno = 0;
    if (t->bi == BI_FLOAT) v = pv_float(L, strtod(buf, &end));
    else {
      v = pv_int(L, strtoll(buf, &end, 10));
      if (errno == ERANGE)
        lower_error(L, at, "argparse: argument %s: int value '%s' is out of ctc's 64-bit range", arg_name(L, row), s->s);
    }
  } else if (s->k == PV_STR && t->k != PV_NONE)
    v = call_value(L, at, t, &s, 1, NULL, NULL, 0);
  PV *ch = row->items[A_CHOICES];
  if (check_choices && ch->k != PV_NONE) {
    PV **it;
    int n = iter_items(L, at, ch, &it), ok = 0;
    for (int i = 0; i < n && !ok; i++) ok = pv_equal(L, at, it[i], v);
    if (!ok) {
      const char *list = "";
      for (int i = 0; i < n; i++) list = arena_printf(L->a, "%s%s%s", list, i ? ", " : "", pv_repr(L, at, it[i]));
      lower_error(L, at, "argparse: argument %s: invalid choice: %s (choose from %s)", arg_name(L, row),
                  pv_repr(L, at, v), list);
    }
  }
  return v;
}

/* How many values an argument takes: NA_ONE when nargs is absent (one value,
 * not a list), NA_OPT '?', NA_ANY '*', NA_SOME '+', else N (0 for the flag actions). */
enum { NA_ONE = -4, NA_SOME = -3, NA_ANY = -2, NA_OPT = -1 };
static int nargs_of(L *L, Span at, PV *row) {
  const char *act = row->items[A_ACTION]->s;
  if (!strcmp(act, "store_true") || !strcmp(act, "store_false") || !strcmp(act, "store_const") || !strcmp(act, "count"))
    return 0;
  PV *n = row->items[A_NARGS];
  if (n->k == PV_NONE) return NA_ONE;
  if (n->k == PV_INT && n->i >= 0 && n->i < 10000) return (int)n->i;
  if (n->k == PV_STR && !strcmp(n->s, "?")) return NA_OPT;
  if (n->k == PV_STR && !strcmp(n->s, "*")) return NA_ANY;
  if (n->k == PV_STR && !strcmp(n->s, "+")) return NA_SOME;
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

/* argparse matches the argument strings, classified as 'A' (a value), 'O' (an
 * option) and '-' (the first '--'), against one regular expression per
 * argument: a list of these tokens, each a set of classes repeated min..max
 * times (max 1, or unbounded when inf). */
typedef struct {
  unsigned char set, min, inf;
} Tok;
enum { S_A = 1, S_DASH = 2 };

/* argparse's _get_nargs_pattern; an option's pattern never matches '--'. */
static int nargs_tokens(int na, int positional, Tok *t) {
  Tok dash = {S_DASH, 0, 1}, one = {S_A, 1, 0}, opt = {S_A, 0, 0}, many = {S_A | (positional ? S_DASH : 0), 0, 1};
  int n = 0;
  if (positional) t[n++] = dash;
  if (na == NA_OPT) t[n++] = opt;
  else if (na == NA_ANY) t[n++] = many;
  else if (na == NA_SOME) t[n++] = one, t[n++] = many;
  else
    for (int i = 0; i < (na == NA_ONE ? 1 : na); i++) {
      if (i && positional) t[n++] = dash;
      t[n++] = one;
    }
  if (positional && na != NA_ANY && na != NA_SOME) t[n++] = dash;
  return n;
}

typedef struct {
  Tok **g;   /* one token list per argument */
  int *gn;
  int ng;
  const char *s; /* the classes, from the match's start */
  int *ends;     /* where each argument's match ends */
} Match;

/* Greedy with backtracking, as Python's re.match: the first match found. */
static int match_from(Match *m, int gi, int ti, int pos) {
  if (gi == m->ng) return 1;
  if (ti == m->gn[gi]) {
    m->ends[gi] = pos;
    return match_from(m, gi + 1, 0, pos);
  }
  Tok t = m->g[gi][ti];
  int k = 0;
  while (m->s[pos + k] && (t.inf || k < 1) && (t.set & (m->s[pos + k] == 'A' ? S_A : m->s[pos + k] == '-' ? S_DASH : 0)))
    k++;
  for (; k >= t.min; k--)
    if (match_from(m, gi, ti + 1, pos + k)) return 1;
  return 0;
}

/* The longest leading run of args[0..n) that all match the classes s
 * (argparse's _match_arguments_partial; n=1 for _match_argument): how many
 * arguments matched, their counts in counts[]. */
static int match_args(L *L, PV *rows, const int *ri, int n, const char *s, int *counts) {
  Match m = {arena_alloc(L->a, sizeof(Tok *) * (size_t)(n + 1)), arena_alloc(L->a, sizeof(int) * (size_t)(n + 1)), 0, s,
             arena_alloc(L->a, sizeof(int) * (size_t)(n + 1))};
  Span none = {0};
  for (int i = 0; i < n; i++) {
    PV *r = rows->items[ri[i]];
    int na = nargs_of(L, none, r);
    m.g[i] = arena_alloc(L->a, sizeof(Tok) * (size_t)(2 * (na > 0 ? na : 1) + 3));
    m.gn[i] = nargs_tokens(na, r->items[A_OPTS]->n == 0, m.g[i]);
  }
  for (m.ng = n; m.ng > 0; m.ng--)
    if (match_from(&m, 0, 0, 0)) {
      for (int i = 0; i < m.ng; i++) counts[i] = m.ends[i] - (i ? m.ends[i - 1] : 0);
      return m.ng;
    }
  return 0;
}

/* A parser's option strings, in the order they were added. */
typedef struct {
  const char **s;
  int *row;
  int n;
  int neg; /* some option string looks like a negative number */
  int abbrev;
} Opts;

/* argparse's _negative_number_matcher: -5, -.5, -0.5 (not -1e3, -inf). */
static int negative_number(const char *s) {
  if (*s++ != '-') return 0;
  size_t d = strspn(s, "0123456789");
  if (!s[d]) return d > 0;
  if (s[d] != '.') return 0;
  size_t f = strspn(s + d + 1, "0123456789");
  return f > 0 && !s[d + 1 + f];
}

static int opt_exact(const Opts *o, const char *s, size_t len) {
  for (int i = 0; i < o->n; i++)
    if (strlen(o->s[i]) == len && !strncmp(o->s[i], s, len)) return i;
  return -1;
}

/* One option occurrence: its argument row (-1: unknown), the option string and
 * the value attached with '=' or after a short option (NULL: none). */
typedef struct {
  int row;
  const char *opt, *explicit;
} OptUse;

/* argparse's _parse_optional: 0 when the word is a value, else 1 and *u. */
static int parse_optional(L *L, Span at, const Opts *o, const char *w, OptUse *u) {
  if (w[0] != '-') return 0;
  int i = opt_exact(o, w, strlen(w));
  if (i >= 0) return *u = (OptUse){o->row[i], o->s[i], NULL}, 1;
  if (!w[1]) return 0;
  const char *eq = strchr(w, '=');
  if (eq && (i = opt_exact(o, w, (size_t)(eq - w))) >= 0) return *u = (OptUse){o->row[i], o->s[i], eq + 1}, 1;
  /* _get_option_tuples: a '--' option abbreviated up to its '=', or a short
   * option with its value attached (-n5) or a longer single-dash option's prefix */
  OptUse found[2];
  const char *names = "";
  int nf = 0;
  for (i = 0; i < o->n; i++) {
    OptUse t = {-1, NULL, NULL};
    const char *s = o->s[i];
    if (w[1] == '-') {
      size_t len = eq ? (size_t)(eq - w) : strlen(w);
      if (o->abbrev && !strncmp(s, w, len)) t = (OptUse){o->row[i], s, eq ? eq + 1 : NULL};
    } else if (strlen(s) == 2 && !strncmp(s, w, 2))
      t = (OptUse){o->row[i], s, w + 2};
    else if (!strncmp(s, w, strlen(w)))
      t = (OptUse){o->row[i], s, NULL};
    if (t.opt) {
      if (nf < 2) found[nf] = t;
      names = arena_printf(L->a, "%s%s%s", names, nf ? ", " : "", s);
      nf++;
    }
  }
  if (nf > 1) lower_error(L, at, "argparse: ambiguous option: %s could match %s", w, names);
  if (nf == 1) return *u = found[0], 1;
  if (negative_number(w) && !o->neg) return 0;
  if (strchr(w, ' ')) return 0;
  *u = (OptUse){-1, w, NULL};
  return 1;
}

typedef struct {
  PV *rows, *ns;
  int *seen;
} Parse;

/* argparse's take_action: the values through _get_values, then the action. */
static void take_action(L *L, Span at, Parse *P, int ri, const char **args, int n) {
  PV *r = P->rows->items[ri];
  const char *act = r->items[A_ACTION]->s, *dest = r->items[A_DEST]->s;
  int na = nargs_of(L, at, r), positional = r->items[A_OPTS]->n == 0;
  P->seen[ri] = 1;
  for (int i = 0; i < n; i++) /* the first '--' among its strings is dropped */
    if (!strcmp(args[i], "--")) {
      memmove(args + i, args + i + 1, sizeof(char *) * (size_t)(n - i - 1));
      n--;
      break;
    }
  PV *v;
  if (!n && na == NA_OPT) {
    v = r->items[positional ? A_DEFAULT : A_CONST];
    if (v->k == PV_STR) v = convert(L, at, r, v, 1);
  } else if (!n && na == NA_ANY && positional) {
    v = r->items[A_DEFAULT]->k != PV_NONE ? r->items[A_DEFAULT] : pv_list(L, NULL, 0);
    v = convert(L, at, r, v, 1);
  } else if (n == 1 && (na == NA_ONE || na == NA_OPT))
    v = convert(L, at, r, pv_str(L, args[0]), 1);
  else {
    v = pv_list(L, NULL, 0);
    for (int i = 0; i < n; i++) pv_list_append(L, v, convert(L, at, r, pv_str(L, args[i]), 1));
  }
  if (!strcmp(act, "store_true") || !strcmp(act, "store_false")) v = pv_bool(L, act[6] == 't');
  else if (!strcmp(act, "store_const")) v = r->items[A_CONST];
  else if (!strcmp(act, "count")) {
    PV *c = env_get(P->ns->attrs, dest);
    v = pv_int(L, (c && c->k != PV_NONE ? arg_int(L, at, c, "a count") : 0) + 1);
  } else if (!strcmp(act, "append")) {
    PV *cur = env_get(P->ns->attrs, dest), *l = pv_list(L, NULL, 0);
    if (cur && cur->k != PV_NONE) {
      PV **it;
      int k = iter_items(L, at, cur, &it);
      for (int i = 0; i < k; i++) pv_list_append(L, l, it[i]);
    }
    pv_list_append(L, l, v);
    v = l;
  }
  env_set(L, P->ns->attrs, dest, v);
}

static const char *nargs_error(int na) {
  if (na == NA_ONE) return "expected one argument";
  if (na == NA_OPT) return "expected at most one argument";
  if (na == NA_SOME) return "expected at least one argument";
  return NULL;
}

/* How many of the strings classified by s an option takes (_match_argument). */
static int option_count(L *L, Span at, PV *rows, int ri, const char *s) {
  int count;
  if (!match_args(L, rows, &ri, 1, s, &count)) {
    int na = nargs_of(L, at, rows->items[ri]);
    const char *e = nargs_error(na);
    lower_error(L, at, "argparse: argument %s: %s", arg_name(L, rows->items[ri]),
                e ? e : arena_printf(L->a, "expected %d argument%s", na, na == 1 ? "" : "s"));
  }
  return count;
}

static PV *parse(L *L, PV *fn, Args *A, int known) {
  PV *p = parser_of(L, A->at, fn->self);
  Span at = A->at;
  PV *args_given = NULL, *ns_given = NULL;
  for (int i = 0; i < A->nargs; i++) {
    if (i) ns_given = A->args[i];
    else args_given = A->args[i];
  }
  for (int k = 0; k < A->nkw; k++) {
    if (!strcmp(A->kwnames[k], "args")) args_given = A->kwvals[k];
    else if (!strcmp(A->kwnames[k], "namespace")) ns_given = A->kwvals[k];
    else lower_error(L, at, "%s() got an unexpected keyword argument '%s'", A->fname, A->kwnames[k]);
  }
  const char **words;
  int nw;
  if (args_given && args_given->k != PV_NONE) {
    PV **it;
    nw = iter_items(L, at, args_given, &it);
    words = arena_alloc(L->a, sizeof(char *) * (size_t)(nw + 1));
    for (int i = 0; i < nw; i++) words[i] = pv_to_str(L, at, it[i]);
  } else
    nw = split_words(L, L->script_args ? L->script_args : "", &words);
  PV *rows = parser_args(L, p);
  PV *ns = ns_given && ns_given->k == PV_OBJ ? ns_given : NULL;
  if (!ns) {
    ns = pv_new(L, PV_OBJ);
    ns->cls = py_builtin(L, BI_ARGPARSE_NAMESPACE, NULL);
    ns->attrs = env_new(L, NULL);
  }
  /* the defaults, where the namespace has no value yet */
  for (int i = 0; i < rows->n; i++) {
    PV *r = rows->items[i];
    if (!env_get(ns->attrs, r->items[A_DEST]->s)) env_set(L, ns->attrs, r->items[A_DEST]->s, r->items[A_DEFAULT]);
  }
  PV *defs = env_get(p->attrs, "_ctc_defaults");
  for (int i = 0; i < defs->n; i++)
    if (!env_get(ns->attrs, defs->keys[i]->s)) env_set(L, ns->attrs, defs->keys[i]->s, defs->items[i]);
  /* the option strings, and each word's class */
  Opts o = {arena_alloc(L->a, sizeof(char *) * 1), arena_alloc(L->a, sizeof(int)), 0, 0, 1};
  PV *ab = env_get(p->attrs, "_ctc_allow_abbrev");
  o.abbrev = !ab || truthy(L, at, ab);
  int nopt = 0;
  for (int i = 0; i < rows->n; i++) nopt += rows->items[i]->items[A_OPTS]->n;
  o.s = arena_alloc(L->a, sizeof(char *) * (size_t)(nopt + 1));
  o.row = arena_alloc(L->a, sizeof(int) * (size_t)(nopt + 1));
  for (int i = 0; i < rows->n; i++) {
    PV *os = rows->items[i]->items[A_OPTS];
    for (int k = 0; k < os->n; k++) {
      o.s[o.n] = os->items[k]->s;
      o.row[o.n++] = i;
      o.neg |= negative_number(os->items[k]->s);
    }
  }
  char *cls = arena_alloc(L->a, (size_t)nw + 1);
  OptUse *use = arena_alloc(L->a, sizeof(OptUse) * (size_t)(nw + 1));
  int last_opt = -1;
  for (int w = 0, rest = 0; w < nw; w++) {
    if (rest) cls[w] = 'A';
    else if (!strcmp(words[w], "--")) cls[w] = '-', rest = 1;
    else if (parse_optional(L, at, &o, words[w], &use[w])) cls[w] = 'O', last_opt = w;
    else cls[w] = 'A';
  }
  cls[nw] = 0;
  Parse P = {rows, ns, arena_alloc(L->a, sizeof(int) * (size_t)(rows->n + 1))};
  int *pos = arena_alloc(L->a, sizeof(int) * (size_t)(rows->n + 1)), npos = 0, *counts = arena_alloc(L->a, sizeof(int) * (size_t)(rows->n + 1));
  for (int i = 0; i < rows->n; i++) {
    P.seen[i] = 0;
    if (!rows->items[i]->items[A_OPTS]->n) pos[npos++] = i;
  }
  const char **args = arena_alloc(L->a, sizeof(char *) * (size_t)(nw + 1));
  PV *extra = pv_list(L, NULL, 0);
  int start = 0;
  for (;;) {
    /* the positionals that the strings before the next option fill */
    int next = start;
    while (next < nw && cls[next] != 'O') next++;
    if (start != next || start > last_opt) {
      int m = match_args(L, rows, pos, npos, cls + start, counts);
      int s0 = start;
      for (int i = 0; i < m; i++) {
        memcpy(args, words + start, sizeof(char *) * (size_t)counts[i]);
        take_action(L, at, &P, pos[i], args, counts[i]);
        start += counts[i];
      }
      pos += m;
      npos -= m;
      if (start > last_opt) break;
      if (start > s0) continue;
      for (; start < next; start++) pv_list_append(L, extra, pv_str(L, words[start]));
    }
    /* the option at start, with its values (-xyz: -x -y -z when they take none) */
    OptUse u = use[start];
    if (u.row < 0) {
      pv_list_append(L, extra, pv_str(L, words[start++]));
      continue;
    }
    int stop;
    for (;;) {
      if (!u.explicit) {
        int n = option_count(L, at, rows, u.row, cls + start + 1);
        memcpy(args, words + start + 1, sizeof(char *) * (size_t)n);
        take_action(L, at, &P, u.row, args, n);
        stop = start + 1 + n;
        break;
      }
      int n = option_count(L, at, rows, u.row, "A");
      if (n == 0 && u.opt[1] != '-' && u.explicit[0]) {
        int i = opt_exact(&o, (char[]){'-', u.explicit[0], 0}, 2);
        if (i < 0)
          lower_error(L, at, "argparse: argument %s: ignored explicit argument '%s'", arg_name(L, rows->items[u.row]),
                      u.explicit);
        take_action(L, at, &P, u.row, args, 0);
        u = (OptUse){o.row[i], o.s[i], u.explicit[1] ? u.explicit + 1 : NULL};
      } else if (n == 1) {
        args[0] = u.explicit;
        take_action(L, at, &P, u.row, args, 1);
        stop = start + 1;
        break;
      } else
        lower_error(L, at, "argparse: argument %s: ignored explicit argument '%s'", arg_name(L, rows->items[u.row]),
                    u.explicit);
    }
    start = stop;
  }
  for (; start < nw; start++) pv_list_append(L, extra, pv_str(L, words[start]));
  const char *missing = NULL;
  for (int i = 0; i < rows->n; i++) {
    PV *r = rows->items[i], *d = r->items[A_DEFAULT];
    int na = nargs_of(L, at, r), positional = r->items[A_OPTS]->n == 0;
    int required = positional ? na != NA_OPT && na != NA_ANY : truthy(L, at, r->items[A_REQUIRED]);
    if (P.seen[i]) continue;
    if (required) missing = arena_printf(L->a, "%s%s%s", missing ? missing : "", missing ? ", " : "", arg_name(L, r));
    else if (d->k == PV_STR && env_get(ns->attrs, r->items[A_DEST]->s) == d) /* a str default through type= */
      env_set(L, ns->attrs, r->items[A_DEST]->s, convert(L, at, r, d, 0));
  }
  if (missing)
    lower_error(L, at, "argparse: the following arguments are required: %s (give them to ctc with --args '...')", missing);
  if (extra->n && !known) {
    const char *list = "";
    for (int i = 0; i < extra->n; i++) list = arena_printf(L->a, "%s%s%s", list, i ? " " : "", extra->items[i]->s);
    lower_error(L, at, "argparse: unrecognized arguments: %s (from --args)", list);
  }
  if (known) {
    PV *pair[2] = {ns, extra};
    return pv_tuple(L, pair, 2);
  }
  return ns;
}

PV *bi_argparse_parse(L *L, PV *fn, Args *A) { return parse(L, fn, A, py_rows[fn->bi].arg); }
