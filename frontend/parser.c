/* parser.c - tokens to AST: recursive descent over Python 3's grammar, for the
 * subset listed in frontend.h.
 *
 * Each parse function carries its grammar rule in the comment above it. The
 * first syntax error is reported through the Diag and parsing stops by a
 * longjmp back to fe_parse, which returns NULL; every node lives in the arena,
 * so there is nothing to clean up. Recursion is bounded: expressions may nest
 * MAX_EXPR_DEPTH levels and blocks MAX_BLOCK_DEPTH, and a final walk rejects
 * trees deeper than MAX_TREE_DEPTH (long left-associative chains such as
 * a+b+c+... are parsed by loops but still make deep trees), so later passes can
 * recurse over the tree without fear for the stack. */
#include "frontend.h"

#include <setjmp.h>
#include <stdlib.h>
#include <string.h>

enum {
  MAX_EXPR_DEPTH = 150,   /* nested brackets / unary operators / lambdas ... */
  MAX_BLOCK_DEPTH = 100,  /* nested indented blocks */
  MAX_TREE_DEPTH = 1000,  /* height of the finished tree */
};

typedef struct Parser {
  Arena *a;
  Diag *d;
  const SrcFile *f;
  Token *t;         /* all tokens; the last one is T_EOF */
  int n;            /* number of tokens */
  int i;            /* the current token */
  int depth;        /* current expression nesting */
  int block_depth;  /* current block nesting */
  jmp_buf jb;       /* error exit to fe_parse */
} Parser;

/* ---- keywords ------------------------------------------------------------------ */

static const char *const keywords[] = {
    "False", "None",   "True",    "and",      "as",     "assert", "async", "await",
    "break", "class",  "continue", "def",     "del",    "elif",   "else",  "except",
    "finally", "for",  "from",    "global",   "if",     "import", "in",    "is",
    "lambda", "nonlocal", "not",  "or",       "pass",   "raise",  "return", "try",
    "while", "with",   "yield",   NULL,
};

static int is_keyword(const char *s) {
  for (int i = 0; keywords[i]; i++)
    if (strcmp(s, keywords[i]) == 0) return 1;
  return 0;
}

/* ---- tokens ----------------------------------------------------------------------- */

static Token *cur(Parser *p) {
  return &p->t[p->i];
}

static Token *peek(Parser *p, int k) {
  int j = p->i + k;
  return &p->t[j < p->n ? j : p->n - 1];
}

static Token *next(Parser *p) {
  Token *t = &p->t[p->i];
  if (t->kind != T_EOF) p->i++;
  return t;
}

static int is_op(const Token *t, const char *op) {
  return t->kind == T_OP && strcmp(t->text, op) == 0;
}

static int is_kw(const Token *t, const char *kw) {
  return t->kind == T_NAME && strcmp(t->text, kw) == 0;
}

static int accept_op(Parser *p, const char *op) {
  if (!is_op(cur(p), op)) return 0;
  next(p);
  return 1;
}

static int accept_kw(Parser *p, const char *kw) {
  if (!is_kw(cur(p), kw)) return 0;
  next(p);
  return 1;
}

static int is_layout(const Token *t) {
  return t->kind == T_NEWLINE || t->kind == T_INDENT || t->kind == T_DEDENT || t->kind == T_EOF;
}

/* The last token consumed that is not NEWLINE/INDENT/DEDENT (NULL at the start). */
static Token *last_real(Parser *p) {
  for (int j = p->i - 1; j >= 0; j--)
    if (!is_layout(&p->t[j])) return &p->t[j];
  return NULL;
}

/* A span from `start` to the end of the last real token consumed. */
static Span since(Parser *p, Span start) {
  Token *t = last_real(p);
  return t ? span_join(start, t->span) : start;
}

/* Where to point when the current token is wrong: the token itself, or, for an
 * end of line / end of file, just after the last real token. */
static Span err_here(Parser *p) {
  Token *t = cur(p);
  if (!is_layout(t)) return t->span;
  Token *r = last_real(p);
  if (!r) return t->span;
  return (Span){r->span.file, r->span.end_line, r->span.end_col, r->span.end_line, r->span.end_col + 1};
}

/* How to name a token in a message. */
static const char *tok_desc(Parser *p, const Token *t) {
  switch (t->kind) {
  case T_EOF: return "end of file";
  case T_NEWLINE: return "end of line";
  case T_INDENT: return "an indented line";
  case T_DEDENT: return "the end of the indented block";
  case T_NAME: return arena_printf(p->a, is_keyword(t->text) ? "keyword '%s'" : "'%s'", t->text);
  case T_INT:
  case T_FLOAT:
  case T_IMAG:
    if (t->len > 24) return arena_printf(p->a, "number '%.20s...'", t->text);
    return arena_printf(p->a, "number '%s'", t->text);
  case T_STRING: return "a string";
  case T_FSTRING: return "an f-string";
  case T_OP: return arena_printf(p->a, "'%s'", t->text);
  }
  return "a token";
}

/* ---- errors ------------------------------------------------------------------------- */

CTC_PRINTF(3, 4) CTC_NORETURN static void perr(Parser *p, Span at, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  diag_verror(p->d, at, fmt, ap);
  va_end(ap);
  longjmp(p->jb, 1);
}

/* "expected ... found X" at the current token. */
CTC_NORETURN static void expected(Parser *p, const char *what) {
  perr(p, err_here(p), "expected %s, found %s", what, tok_desc(p, cur(p)));
}

static Token *expect_op(Parser *p, const char *op, const char *msg) {
  if (!is_op(cur(p), op)) perr(p, err_here(p), "%s", msg);
  return next(p);
}

/* A closing bracket, with a note pointing at the opening one when it is missing. */
static void close_bracket(Parser *p, const Token *open, const char *closer, const char *what) {
  if (accept_op(p, closer)) return;
  diag_error(p->d, err_here(p), "expected %s, found %s", what, tok_desc(p, cur(p)));
  diag_note(p->d, open->span, "to match this '%s'", open->text);
  longjmp(p->jb, 1);
}

/* An identifier that is not a keyword. */
static Token *expect_name(Parser *p, const char *what) {
  Token *t = cur(p);
  if (t->kind != T_NAME) expected(p, what);
  if (is_keyword(t->text)) perr(p, t->span, "'%s' is a keyword and cannot be used as a name", t->text);
  return next(p);
}

static void enter(Parser *p) {
  if (++p->depth > MAX_EXPR_DEPTH) perr(p, err_here(p), "expression nested too deeply (the limit is %d levels)", MAX_EXPR_DEPTH);
}

static void leave(Parser *p) {
  p->depth--;
}

/* ---- nodes -------------------------------------------------------------------------- */

static Node *mk(Parser *p, NodeKind k, Span sp) {
  Node *n = arena_alloc(p->a, sizeof *n);
  n->kind = k;
  n->span = sp;
  return n;
}

static Node *push(Parser *p, NodeVec *v, Node *n) {
  vec_push(p->a, v, n);
  return n;
}

static Node *binop(Parser *p, int op, Node *l, Node *r) {
  Node *n = mk(p, N_BINOP, span_join(l->span, r->span));
  n->op = op;
  n->a = l;
  n->b = r;
  return n;
}

/* Can this token begin an expression? (used to tell `x,` from `x, y`) */
static int starts_expr(const Token *t) {
  switch (t->kind) {
  case T_NAME:
    if (!is_keyword(t->text)) return 1;
    return is_kw(t, "not") || is_kw(t, "lambda") || is_kw(t, "None") || is_kw(t, "True") ||
           is_kw(t, "False") || is_kw(t, "await") || is_kw(t, "yield");
  case T_INT:
  case T_FLOAT:
  case T_IMAG:
  case T_STRING:
  case T_FSTRING:
    return 1;
  case T_OP:
    return is_op(t, "(") || is_op(t, "[") || is_op(t, "{") || is_op(t, "-") || is_op(t, "+") ||
           is_op(t, "~") || is_op(t, "...") || is_op(t, "*");
  default:
    return 0;
  }
}

/* How an expression is named in "invalid ... target" messages. */
static const char *expr_desc(const Node *e) {
  switch (e->kind) {
  case N_CALL: return "a function call";
  case N_INT: case N_FLOAT: case N_IMAG: case N_STR: case N_CONST: return "a literal";
  case N_FSTR: return "an f-string";
  case N_BINOP: case N_UNARY: return "an operator expression";
  case N_BOOLOP: return "a boolean expression";
  case N_COMPARE: return "a comparison";
  case N_IFEXP: return "a conditional expression";
  case N_LAMBDA: return "a lambda";
  case N_TUPLE: return "a tuple";
  case N_LIST: return "a list";
  case N_DICT: return "a dict display";
  case N_SET: return "a set display";
  case N_LISTCOMP: return "a list comprehension";
  case N_SETCOMP: return "a set comprehension";
  case N_DICTCOMP: return "a dict comprehension";
  case N_GENEXP: return "a generator expression";
  case N_NAMEDEXPR: return "an assignment expression";
  case N_STARRED: return "a starred expression";
  case N_SLICE: return "a slice";
  default: return "this expression";
  }
}

/* Assignment-like targets: names, attributes, subscripts, and tuples / lists of
 * targets with at most one starred element. `what` names the construct. */
static void check_target(Parser *p, Node *e, const char *what, int is_del) {
  switch (e->kind) {
  case N_NAME:
  case N_ATTR:
  case N_SUBSCRIPT:
    return;
  case N_TUPLE:
  case N_LIST: {
    int nstar = 0;
    for (int i = 0; i < e->list.len; i++) {
      Node *el = e->list.data[i];
      if (el->kind == N_STARRED) {
        if (is_del) perr(p, el->span, "cannot delete a starred expression");
        if (++nstar > 1) perr(p, el->span, "multiple starred expressions in %s", what);
        check_target(p, el->a, what, is_del);
      } else {
        check_target(p, el, what, is_del);
      }
    }
    return;
  }
  case N_STARRED:
    perr(p, e->span, "a starred %s target must be in a list or tuple", what);
  default:
    perr(p, e->span, "invalid %s target: %s", what, expr_desc(e));
  }
}

/* ---- duplicate names --------------------------------------------------------------------- */

typedef struct NameAt {
  const char *name;
  int idx;
} NameAt;

static int cmp_name_at(const void *x, const void *y) {
  const NameAt *a = x, *b = y;
  int c = strcmp(a->name, b->name);
  return c ? c : (a->idx > b->idx) - (a->idx < b->idx);
}

/* The first node in v (in source order) whose non-NULL name repeats an earlier
 * one, or NULL. Sorting keeps this O(n log n) for absurdly long lists. */
static Node *find_duplicate(Parser *p, const NodeVec *v) {
  if (v->len < 2) return NULL;
  NameAt *xs = arena_alloc(p->a, (size_t)v->len * sizeof *xs);
  int n = 0;
  for (int i = 0; i < v->len; i++)
    if (v->data[i] && v->data[i]->name) xs[n++] = (NameAt){v->data[i]->name, i};
  qsort(xs, (size_t)n, sizeof *xs, cmp_name_at);
  int best = -1;
  for (int i = 1; i < n; i++)
    if (strcmp(xs[i].name, xs[i - 1].name) == 0 && (best < 0 || xs[i].idx < best)) best = xs[i].idx;
  return best < 0 ? NULL : v->data[best];
}

/* ---- forward declarations ------------------------------------------------------------ */

static Node *parse_test(Parser *p);
static Node *parse_named(Parser *p);
static Node *parse_or(Parser *p);
static Node *parse_bitor(Parser *p);
static Node *parse_factor(Parser *p);
static Node *parse_star_named(Parser *p);
static Node *parse_star_exprs(Parser *p);
static void parse_statement(Parser *p, NodeVec *out);
static void parse_comp_fors(Parser *p, NodeVec *out);
static void parse_params(Parser *p, NodeVec *out, int is_lambda);

/* ---- atoms ----------------------------------------------------------------------------- */

/* Appends s[0..n) to buf at *k, doubling braces and backslashes when the
 * result is f-string source (so a plain literal next to an f-string keeps its
 * meaning). */
static void put_str(char *buf, size_t *k, const char *s, size_t n, int fquote) {
  for (size_t i = 0; i < n; i++) {
    char c = s[i];
    if (fquote && (c == '{' || c == '}' || c == '\\')) buf[(*k)++] = c;
    buf[(*k)++] = c;
  }
}

// strings = (STRING | FSTRING)+      adjacent literals are concatenated
static Node *parse_strings(Parser *p) {
  int first = p->i, any_f = 0;
  size_t total = 0;
  while (cur(p)->kind == T_STRING || cur(p)->kind == T_FSTRING) {
    Token *t = next(p);
    if (t->kind == T_FSTRING) any_f = 1;
    total += t->len;
  }
  if (total > (SIZE_MAX - 1) / 2) perr(p, p->t[first].span, "string literal is too long");
  char *buf = arena_alloc(p->a, (any_f ? 2 * total : total) + 1);
  size_t k = 0;
  for (int j = first; j < p->i; j++) {
    Token *t = &p->t[j];
    put_str(buf, &k, t->text, t->len, any_f && t->kind == T_STRING);
  }
  buf[k] = '\0';
  Node *n = mk(p, any_f ? N_FSTR : N_STR, since(p, p->t[first].span));
  n->sval = buf;
  n->ival = (int64_t)k;
  return n;
}

// group = '(' ')' | '(' star_named_expression (comp_for | (',' star_named_expression)* [',']) ')'
static Node *parse_paren(Parser *p) {
  Token *open = next(p);
  if (accept_op(p, ")")) return mk(p, N_TUPLE, since(p, open->span));
  if (is_kw(cur(p), "yield")) perr(p, cur(p)->span, "'yield' is not supported");
  Node *first = parse_star_named(p);
  if (is_kw(cur(p), "for")) {
    if (first->kind == N_STARRED) perr(p, first->span, "iterable unpacking cannot be used in a comprehension");
    Node *g = mk(p, N_GENEXP, open->span);
    g->a = first;
    parse_comp_fors(p, &g->list);
    close_bracket(p, open, ")", "')' after the generator expression");
    g->span = since(p, open->span);
    return g;
  }
  if (!is_op(cur(p), ",")) {
    close_bracket(p, open, ")", "',' or ')'");
    if (first->kind == N_STARRED) perr(p, first->span, "cannot use a starred expression here");
    return first;
  }
  Node *tup = mk(p, N_TUPLE, open->span);
  push(p, &tup->list, first);
  while (accept_op(p, ",")) {
    if (is_op(cur(p), ")")) break;
    push(p, &tup->list, parse_star_named(p));
  }
  close_bracket(p, open, ")", "',' or ')'");
  tup->span = since(p, open->span);
  return tup;
}

// list = '[' [star_named_expression (comp_for | (',' star_named_expression)* [','])] ']'
static Node *parse_list(Parser *p) {
  Token *open = next(p);
  Node *l = mk(p, N_LIST, open->span);
  if (!is_op(cur(p), "]")) {
    Node *first = parse_star_named(p);
    if (is_kw(cur(p), "for")) {
      if (first->kind == N_STARRED) perr(p, first->span, "iterable unpacking cannot be used in a comprehension");
      l->kind = N_LISTCOMP;
      l->a = first;
      parse_comp_fors(p, &l->list);
      close_bracket(p, open, "]", "']' after the list comprehension");
      l->span = since(p, open->span);
      return l;
    }
    push(p, &l->list, first);
    while (accept_op(p, ",")) {
      if (is_op(cur(p), "]")) break;
      push(p, &l->list, parse_star_named(p));
    }
  }
  close_bracket(p, open, "]", "',' or ']'");
  l->span = since(p, open->span);
  return l;
}

// dict_or_set = '{' '}'
//             | '{' kvpair (comp_for | (',' kvpair)* [',']) '}'
//             | '{' star_named_expression (comp_for | (',' star_named_expression)* [',']) '}'
// kvpair = test ':' test | '**' bitor
static Node *parse_braces(Parser *p) {
  Token *open = next(p);
  if (accept_op(p, "}")) return mk(p, N_DICT, since(p, open->span));
  Node *first = NULL;
  if (!is_op(cur(p), "**")) {
    first = parse_star_named(p);
    if (!is_op(cur(p), ":") || first->kind == N_STARRED) {
      /* a set */
      Node *s = mk(p, N_SET, open->span);
      if (is_kw(cur(p), "for")) {
        if (first->kind == N_STARRED) perr(p, first->span, "iterable unpacking cannot be used in a comprehension");
        s->kind = N_SETCOMP;
        s->a = first;
        parse_comp_fors(p, &s->list);
        close_bracket(p, open, "}", "'}' after the set comprehension");
        s->span = since(p, open->span);
        return s;
      }
      push(p, &s->list, first);
      while (accept_op(p, ",")) {
        if (is_op(cur(p), "}")) break;
        push(p, &s->list, parse_star_named(p));
      }
      close_bracket(p, open, "}", "',' or '}'");
      s->span = since(p, open->span);
      return s;
    }
  }
  /* a dict */
  Node *d = mk(p, N_DICT, open->span);
  Node *v;
  if (!first) {
    Token *st = next(p); /* '**' */
    v = parse_bitor(p);
    if (is_kw(cur(p), "for")) perr(p, span_join(st->span, v->span), "dict unpacking cannot be used in a dict comprehension");
  } else {
    next(p); /* ':' */
    v = parse_test(p);
    if (is_kw(cur(p), "for")) {
      d->kind = N_DICTCOMP;
      d->a = first;
      d->b = v;
      parse_comp_fors(p, &d->list);
      close_bracket(p, open, "}", "'}' after the dict comprehension");
      d->span = since(p, open->span);
      return d;
    }
  }
  push(p, &d->list, first);
  push(p, &d->list2, v);
  while (accept_op(p, ",")) {
    if (is_op(cur(p), "}")) break;
    Node *k = NULL;
    if (accept_op(p, "**")) {
      v = parse_bitor(p);
    } else {
      k = parse_test(p);
      expect_op(p, ":", "expected ':' after the dict key");
      v = parse_test(p);
    }
    push(p, &d->list, k);
    push(p, &d->list2, v);
  }
  close_bracket(p, open, "}", "',' or '}'");
  d->span = since(p, open->span);
  return d;
}

// atom = NAME | NUMBER | strings | 'None' | 'True' | 'False' | '...' | group | list | dict_or_set
static Node *parse_atom(Parser *p) {
  Token *t = cur(p);
  switch (t->kind) {
  case T_NAME: {
    if (!is_keyword(t->text)) {
      next(p);
      Node *n = mk(p, N_NAME, t->span);
      n->name = t->text;
      return n;
    }
    int c = is_kw(t, "None") ? CONST_NONE : is_kw(t, "True") ? CONST_TRUE : is_kw(t, "False") ? CONST_FALSE : -1;
    if (c >= 0) {
      next(p);
      Node *n = mk(p, N_CONST, t->span);
      n->op = c;
      return n;
    }
    if (is_kw(t, "await") || is_kw(t, "yield")) perr(p, t->span, "'%s' is not supported", t->text);
    static const char *const expr_kws[] = {"and", "or", "not", "in", "is", "if", "else", "elif", "for",
                                           "as", "except", "finally", "lambda", "async", NULL};
    for (int i = 0; expr_kws[i]; i++)
      if (is_kw(t, expr_kws[i])) expected(p, "an expression");
    perr(p, t->span, "'%s' is a keyword and cannot be used as a name", t->text);
  }
  case T_INT: {
    next(p);
    Node *n = mk(p, N_INT, t->span);
    n->ival = t->ival;
    return n;
  }
  case T_FLOAT:
  case T_IMAG: {
    next(p);
    Node *n = mk(p, t->kind == T_IMAG ? N_IMAG : N_FLOAT, t->span);
    n->fval = t->fval;
    return n;
  }
  case T_STRING:
  case T_FSTRING:
    return parse_strings(p);
  case T_OP:
    if (is_op(t, "(")) return parse_paren(p);
    if (is_op(t, "[")) return parse_list(p);
    if (is_op(t, "{")) return parse_braces(p);
    if (is_op(t, "...")) {
      next(p);
      Node *n = mk(p, N_CONST, t->span);
      n->op = CONST_ELLIPSIS;
      return n;
    }
    break;
  default:
    break;
  }
  expected(p, "an expression");
}

/* ---- trailers ----------------------------------------------------------------------------- */

// arguments = argument (',' argument)* [',']
// argument = named_expression [comp_for] | NAME '=' test | '*' test | '**' test
static void parse_args(Parser *p, Node *call, const Token *open) {
  int seen_kw = 0, seen_kwstar = 0;
  while (!is_op(cur(p), ")")) {
    Token *t = cur(p);
    if (is_op(t, "*")) {
      next(p);
      Node *s = mk(p, N_STARRED, t->span);
      s->a = parse_test(p);
      s->span = since(p, t->span);
      if (seen_kwstar) perr(p, s->span, "iterable argument unpacking follows keyword argument unpacking");
      push(p, &call->list, s);
    } else if (is_op(t, "**")) {
      next(p);
      Node *k = mk(p, N_KEYWORD, t->span);
      k->a = parse_test(p);
      k->span = since(p, t->span);
      push(p, &call->list2, k);
      seen_kwstar = 1;
    } else if (t->kind == T_NAME && is_op(peek(p, 1), "=")) {
      Token *nm = expect_name(p, "an argument name");
      next(p); /* '=' */
      Node *k = mk(p, N_KEYWORD, nm->span);
      k->name = nm->text;
      k->a = parse_test(p);
      k->span = since(p, nm->span);
      push(p, &call->list2, k);
      seen_kw = 1;
    } else {
      Node *e = parse_named(p);
      if (is_kw(cur(p), "for")) {
        Node *g = mk(p, N_GENEXP, e->span);
        g->a = e;
        parse_comp_fors(p, &g->list);
        g->span = since(p, e->span);
        if (call->list.len || call->list2.len || is_op(cur(p), ","))
          perr(p, g->span, "a generator expression must be parenthesized when it is not the only argument");
        e = g;
      }
      if (is_op(cur(p), "="))
        perr(p, e->span, "expression cannot contain assignment, perhaps you meant \"==\"?");
      if (seen_kwstar) perr(p, e->span, "positional argument follows keyword argument unpacking");
      if (seen_kw) perr(p, e->span, "positional argument follows keyword argument");
      push(p, &call->list, e);
    }
    if (!accept_op(p, ",")) break;
  }
  close_bracket(p, open, ")", "',' or ')' after a call argument");
  Node *dup = find_duplicate(p, &call->list2);
  if (dup) perr(p, dup->span, "keyword argument repeated: '%s'", dup->name);
}

// subscript = [test] ':' [test] [':' [test]] | named_expression | '*' bitor
static Node *parse_subscript(Parser *p) {
  Token *st = cur(p);
  if (is_op(st, "*")) {
    next(p);
    Node *s = mk(p, N_STARRED, st->span);
    s->a = parse_bitor(p);
    s->span = since(p, st->span);
    return s;
  }
  Node *lo = NULL;
  if (!is_op(st, ":")) {
    lo = parse_named(p);
    if (!is_op(cur(p), ":")) return lo;
  }
  Node *sl = mk(p, N_SLICE, st->span);
  sl->a = lo;
  next(p); /* ':' */
#define SLICE_END(t) (is_op(t, ":") || is_op(t, ",") || is_op(t, "]"))
  if (!SLICE_END(cur(p))) sl->b = parse_test(p);
  if (accept_op(p, ":") && !SLICE_END(cur(p))) sl->c = parse_test(p);
#undef SLICE_END
  sl->span = since(p, st->span);
  return sl;
}

// subscripts = subscript (',' subscript)* [',']
static Node *parse_subscripts(Parser *p) {
  Token *st = cur(p);
  if (is_op(st, "]")) perr(p, st->span, "expected an index or a slice inside '[]'");
  Node *first = parse_subscript(p);
  if (!is_op(cur(p), ",")) return first;
  Node *tup = mk(p, N_TUPLE, st->span);
  push(p, &tup->list, first);
  while (accept_op(p, ",")) {
    if (is_op(cur(p), "]")) break;
    push(p, &tup->list, parse_subscript(p));
  }
  tup->span = since(p, st->span);
  return tup;
}

// primary = atom ('.' NAME | '(' [arguments] ')' | '[' subscripts ']')*
static Node *parse_primary(Parser *p) {
  Span st = cur(p)->span;
  Node *e = parse_atom(p);
  for (;;) {
    Token *t = cur(p);
    if (is_op(t, ".")) {
      next(p);
      Token *nm = expect_name(p, "an attribute name after '.'");
      Node *n = mk(p, N_ATTR, st);
      n->a = e;
      n->name = nm->text;
      e = n;
    } else if (is_op(t, "(")) {
      next(p);
      Node *n = mk(p, N_CALL, st);
      n->a = e;
      parse_args(p, n, t);
      e = n;
    } else if (is_op(t, "[")) {
      next(p);
      Node *n = mk(p, N_SUBSCRIPT, st);
      n->a = e;
      n->b = parse_subscripts(p);
      close_bracket(p, t, "]", "',' or ']' in the subscript");
      e = n;
    } else {
      break;
    }
    e->span = since(p, st);
  }
  return e;
}

/* ---- operators ------------------------------------------------------------------------------ */

// power = primary ['**' factor]
static Node *parse_power(Parser *p) {
  if (is_kw(cur(p), "await")) perr(p, cur(p)->span, "'await' is not supported");
  Node *e = parse_primary(p);
  if (accept_op(p, "**")) {
    enter(p);
    Node *r = parse_factor(p);
    leave(p);
    e = binop(p, OP_POW, e, r);
  }
  return e;
}

// factor = ('+' | '-' | '~') factor | power
static Node *parse_factor(Parser *p) {
  Token *t = cur(p);
  int op = is_op(t, "-") ? OP_NEG : is_op(t, "+") ? OP_POS : is_op(t, "~") ? OP_INVERT : 0;
  if (!op) return parse_power(p);
  next(p);
  enter(p);
  Node *n = mk(p, N_UNARY, t->span);
  n->op = op;
  n->a = parse_factor(p);
  n->span = since(p, t->span);
  leave(p);
  return n;
}

// term = factor (('*' | '/' | '//' | '%' | '@') factor)*
static Node *parse_term(Parser *p) {
  Node *e = parse_factor(p);
  for (;;) {
    Token *t = cur(p);
    int op = is_op(t, "*") ? OP_MUL : is_op(t, "/") ? OP_DIV : is_op(t, "//") ? OP_FLOORDIV
           : is_op(t, "%") ? OP_MOD : is_op(t, "@") ? OP_MATMUL : 0;
    if (!op) return e;
    next(p);
    e = binop(p, op, e, parse_factor(p));
  }
}

// arith = term (('+' | '-') term)*
static Node *parse_arith(Parser *p) {
  Node *e = parse_term(p);
  for (;;) {
    Token *t = cur(p);
    int op = is_op(t, "+") ? OP_ADD : is_op(t, "-") ? OP_SUB : 0;
    if (!op) return e;
    next(p);
    e = binop(p, op, e, parse_term(p));
  }
}

// shift = arith (('<<' | '>>') arith)*
static Node *parse_shift(Parser *p) {
  Node *e = parse_arith(p);
  for (;;) {
    Token *t = cur(p);
    int op = is_op(t, "<<") ? OP_LSHIFT : is_op(t, ">>") ? OP_RSHIFT : 0;
    if (!op) return e;
    next(p);
    e = binop(p, op, e, parse_arith(p));
  }
}

// bitand = shift ('&' shift)*
static Node *parse_bitand(Parser *p) {
  Node *e = parse_shift(p);
  while (accept_op(p, "&")) e = binop(p, OP_BITAND, e, parse_shift(p));
  return e;
}

// bitxor = bitand ('^' bitand)*
static Node *parse_bitxor(Parser *p) {
  Node *e = parse_bitand(p);
  while (accept_op(p, "^")) e = binop(p, OP_BITXOR, e, parse_bitand(p));
  return e;
}

// bitor = bitxor ('|' bitxor)*
static Node *parse_bitor(Parser *p) {
  Node *e = parse_bitxor(p);
  while (accept_op(p, "|")) e = binop(p, OP_BITOR, e, parse_bitxor(p));
  return e;
}

/* The comparison operator at the current token (consumed), or 0. */
static int comp_op(Parser *p) {
  Token *t = cur(p);
  int op = 0, ntok = 1;
  if (t->kind == T_OP) {
    op = is_op(t, "<") ? OP_LT : is_op(t, ">") ? OP_GT : is_op(t, "==") ? OP_EQ
       : is_op(t, ">=") ? OP_GE : is_op(t, "<=") ? OP_LE : is_op(t, "!=") ? OP_NE : 0;
  } else if (is_kw(t, "in")) {
    op = OP_IN;
  } else if (is_kw(t, "is")) {
    op = is_kw(peek(p, 1), "not") ? (ntok = 2, OP_ISNOT) : OP_IS;
  } else if (is_kw(t, "not") && is_kw(peek(p, 1), "in")) {
    op = OP_NOTIN, ntok = 2;
  }
  if (op)
    while (ntok--) next(p);
  return op;
}

// comparison = bitor (comp_op bitor)*
// comp_op = '<' | '>' | '==' | '>=' | '<=' | '!=' | 'in' | 'not' 'in' | 'is' | 'is' 'not'
static Node *parse_comparison(Parser *p) {
  Node *e = parse_bitor(p);
  int op = comp_op(p);
  if (!op) return e;
  Node *c = mk(p, N_COMPARE, e->span);
  Vec(OpKind) ops = {0};
  push(p, &c->list, e);
  do {
    vec_push(p->a, &ops, (OpKind)op);
    push(p, &c->list, parse_bitor(p));
  } while ((op = comp_op(p)) != 0);
  c->cmpops = ops.data;
  c->span = since(p, e->span);
  return c;
}

// not_test = 'not' not_test | comparison
static Node *parse_not(Parser *p) {
  Token *t = cur(p);
  if (!is_kw(t, "not")) return parse_comparison(p);
  next(p);
  enter(p);
  Node *n = mk(p, N_UNARY, t->span);
  n->op = OP_NOT;
  n->a = parse_not(p);
  n->span = since(p, t->span);
  leave(p);
  return n;
}

// and_test = not_test ('and' not_test)*
static Node *parse_and(Parser *p) {
  Node *e = parse_not(p);
  while (accept_kw(p, "and")) {
    Node *r = parse_not(p);
    Node *n = mk(p, N_BOOLOP, span_join(e->span, r->span));
    n->op = OP_AND;
    n->a = e;
    n->b = r;
    e = n;
  }
  return e;
}

// or_test = and_test ('or' and_test)*
static Node *parse_or(Parser *p) {
  Node *e = parse_and(p);
  while (accept_kw(p, "or")) {
    Node *r = parse_and(p);
    Node *n = mk(p, N_BOOLOP, span_join(e->span, r->span));
    n->op = OP_OR;
    n->a = e;
    n->b = r;
    e = n;
  }
  return e;
}

// lambdef = 'lambda' [lambda_params] ':' test
static Node *parse_lambda(Parser *p) {
  Token *kw = next(p);
  Node *n = mk(p, N_LAMBDA, kw->span);
  parse_params(p, &n->list, 1);
  expect_op(p, ":", "expected ':' after the lambda parameters");
  n->a = parse_test(p);
  n->span = since(p, kw->span);
  return n;
}

// test = or_test ['if' or_test 'else' test] | lambdef
static Node *parse_test(Parser *p) {
  enter(p);
  Node *e;
  if (is_kw(cur(p), "lambda")) {
    e = parse_lambda(p);
  } else {
    e = parse_or(p);
    if (is_kw(cur(p), "if")) {
      next(p);
      Node *n = mk(p, N_IFEXP, e->span);
      n->b = e;
      n->a = parse_or(p);
      if (!accept_kw(p, "else")) perr(p, err_here(p), "expected 'else' after the condition of an 'if' expression");
      n->c = parse_test(p);
      n->span = since(p, e->span);
      e = n;
    }
  }
  leave(p);
  return e;
}

// named_expression = NAME ':=' test | test
static Node *parse_named(Parser *p) {
  Token *t = cur(p);
  if (t->kind == T_NAME && !is_keyword(t->text) && is_op(peek(p, 1), ":=")) {
    next(p);
    next(p);
    Node *n = mk(p, N_NAMEDEXPR, t->span);
    Node *nm = mk(p, N_NAME, t->span);
    nm->name = t->text;
    n->a = nm;
    n->b = parse_test(p);
    n->span = since(p, t->span);
    return n;
  }
  Node *e = parse_test(p);
  if (is_op(cur(p), ":=")) perr(p, e->span, "invalid target for ':=': %s (only a name can be assigned here)", expr_desc(e));
  return e;
}

// star_named_expression = '*' bitor | named_expression
static Node *parse_star_named(Parser *p) {
  Token *t = cur(p);
  if (!is_op(t, "*")) return parse_named(p);
  next(p);
  Node *s = mk(p, N_STARRED, t->span);
  s->a = parse_bitor(p);
  s->span = since(p, t->span);
  return s;
}

// star_expression = '*' bitor | test
static Node *parse_star_expr(Parser *p) {
  Token *t = cur(p);
  if (!is_op(t, "*")) return parse_test(p);
  next(p);
  Node *s = mk(p, N_STARRED, t->span);
  s->a = parse_bitor(p);
  s->span = since(p, t->span);
  return s;
}

// star_expressions = star_expression (',' star_expression)* [',']
static Node *parse_star_exprs(Parser *p) {
  Node *e = parse_star_expr(p);
  if (!is_op(cur(p), ",")) {
    if (e->kind == N_STARRED) perr(p, e->span, "cannot use a starred expression here");
    return e;
  }
  Node *tup = mk(p, N_TUPLE, e->span);
  push(p, &tup->list, e);
  while (accept_op(p, ",")) {
    if (!starts_expr(cur(p))) break;
    push(p, &tup->list, parse_star_expr(p));
  }
  tup->span = since(p, e->span);
  return tup;
}

// star_targets = star_target (',' star_target)* [',']
// star_target = '*' bitor | bitor
/* Fills items; returns 1 when there was a comma (a tuple). */
static int parse_target_items(Parser *p, NodeVec *items) {
  int comma = 0;
  for (;;) {
    Token *t = cur(p);
    if (is_op(t, "*")) {
      next(p);
      Node *s = mk(p, N_STARRED, t->span);
      s->a = parse_bitor(p);
      s->span = since(p, t->span);
      push(p, items, s);
    } else {
      push(p, items, parse_bitor(p));
    }
    if (!accept_op(p, ",")) return comma;
    comma = 1;
    if (!starts_expr(cur(p))) return comma;
  }
}

/* A target list as one node (a tuple when there were commas). */
static Node *parse_targets(Parser *p) {
  NodeVec items = {0};
  int comma = parse_target_items(p, &items);
  if (!comma) return items.data[0];
  Node *tup = mk(p, N_TUPLE, span_join(items.data[0]->span, items.data[items.len - 1]->span));
  tup->list = items;
  tup->span = since(p, tup->span);
  return tup;
}

// comp_for = ('for' star_targets 'in' or_test ('if' or_test)*)+
static void parse_comp_fors(Parser *p, NodeVec *out) {
  while (is_kw(cur(p), "for") || is_kw(cur(p), "async")) {
    Token *kw = next(p);
    if (is_kw(kw, "async")) perr(p, kw->span, "'async' comprehensions are not supported");
    Node *cf = mk(p, N_COMPFOR, kw->span);
    cf->a = parse_targets(p);
    check_target(p, cf->a, "comprehension", 0);
    if (!accept_kw(p, "in")) perr(p, err_here(p), "expected 'in' after the comprehension target");
    cf->b = parse_or(p);
    while (accept_kw(p, "if")) push(p, &cf->list, parse_or(p));
    cf->span = since(p, kw->span);
    push(p, out, cf);
  }
}

/* ---- parameters ------------------------------------------------------------------------------ */

// parameters = param (',' param)* [',']
// param = NAME [':' test] ['=' test] | '*' [NAME [':' test]] | '**' NAME [':' test] | '/'
/* For lambdas there are no annotations and the list ends at ':'. */
static void parse_params(Parser *p, NodeVec *out, int is_lambda) {
  const char *close = is_lambda ? ":" : ")";
  int seen_default = 0, seen_star = 0, seen_kwargs = 0, seen_slash = 0;
  Node *bare = NULL; /* a bare '*' still waiting for a named parameter */
  while (!is_op(cur(p), close)) {
    Token *t = cur(p);
    Node *prm = mk(p, N_PARAM, t->span);
    if (seen_kwargs) perr(p, t->span, "no parameter can follow the '**' parameter");
    if (is_op(t, "/")) {
      if (seen_slash) perr(p, t->span, "'/' may appear only once in a parameter list");
      if (seen_star) perr(p, t->span, "'/' must come before '*' in a parameter list");
      if (out->len == 0) perr(p, t->span, "at least one parameter must come before '/'");
      next(p);
      prm->op = PARAM_SLASH;
      seen_slash = 1;
    } else if (is_op(t, "*")) {
      if (seen_star) perr(p, t->span, "'*' may appear only once in a parameter list");
      next(p);
      prm->op = PARAM_VARARGS;
      seen_star = 1;
      if (cur(p)->kind == T_NAME) {
        prm->name = expect_name(p, "a parameter name")->text;
        if (!is_lambda && accept_op(p, ":")) prm->c = parse_test(p);
      } else {
        bare = prm;
      }
      if (is_op(cur(p), "=")) perr(p, cur(p)->span, "a '*' parameter cannot have a default value");
    } else if (is_op(t, "**")) {
      next(p);
      prm->op = PARAM_KWARGS;
      prm->name = expect_name(p, "a parameter name after '**'")->text;
      if (!is_lambda && accept_op(p, ":")) prm->c = parse_test(p);
      if (is_op(cur(p), "=")) perr(p, cur(p)->span, "a '**' parameter cannot have a default value");
      seen_kwargs = 1;
    } else {
      prm->op = PARAM_PLAIN;
      prm->name = expect_name(p, "a parameter name")->text;
      if (!is_lambda && accept_op(p, ":")) prm->c = parse_test(p);
      if (accept_op(p, "=")) {
        prm->b = parse_test(p);
        seen_default = 1;
      } else if (seen_default && !seen_star) {
        perr(p, t->span, "parameter without a default follows a parameter with a default");
      }
      bare = NULL;
    }
    prm->span = since(p, t->span);
    push(p, out, prm);
    if (!accept_op(p, ",")) break;
  }
  if (bare) perr(p, bare->span, "named parameters must follow a bare '*'");
  Node *dup = find_duplicate(p, out);
  if (dup) perr(p, dup->span, "duplicate parameter '%s'", dup->name);
}

/* ---- statements ------------------------------------------------------------------------------ */

// block = NEWLINE INDENT statement+ DEDENT | simple_stmts
static void parse_simple_stmts(Parser *p, NodeVec *out);
static void parse_block(Parser *p, NodeVec *body, const char *after) {
  if (cur(p)->kind != T_NEWLINE) {
    parse_simple_stmts(p, body);
    return;
  }
  next(p);
  if (cur(p)->kind != T_INDENT) {
    Token *t = cur(p);
    perr(p, t->kind == T_EOF || t->kind == T_DEDENT ? err_here(p) : t->span,
         "expected an indented block after '%s'", after);
  }
  Token *ind = next(p);
  if (++p->block_depth > MAX_BLOCK_DEPTH)
    perr(p, ind->span, "blocks nested too deeply (the limit is %d levels)", MAX_BLOCK_DEPTH);
  int before = body->len;
  while (cur(p)->kind != T_DEDENT && cur(p)->kind != T_EOF) parse_statement(p, body);
  if (body->len == before) perr(p, ind->span, "expected an indented block after '%s'", after);
  if (cur(p)->kind == T_DEDENT) next(p);
  p->block_depth--;
}

/* The augmented assignment operator at t, or 0. */
static int aug_op(const Token *t) {
  static const struct { const char *s; int op; } tab[] = {
      {"+=", OP_ADD},     {"-=", OP_SUB},     {"*=", OP_MUL},     {"/=", OP_DIV},
      {"//=", OP_FLOORDIV}, {"%=", OP_MOD},   {"**=", OP_POW},    {"@=", OP_MATMUL},
      {"&=", OP_BITAND},  {"|=", OP_BITOR},   {"^=", OP_BITXOR},  {">>=", OP_RSHIFT},
      {"<<=", OP_LSHIFT},
  };
  if (t->kind != T_OP) return 0;
  for (size_t i = 0; i < sizeof tab / sizeof tab[0]; i++)
    if (strcmp(t->text, tab[i].s) == 0) return tab[i].op;
  return 0;
}

// expr_stmt = star_expressions (':' test ['=' star_expressions]
//                               | augassign star_expressions
//                               | ('=' star_expressions)*)
static Node *parse_expr_stmt(Parser *p) {
  Span st = cur(p)->span;
  Node *e = parse_star_exprs(p);
  Token *t = cur(p);
  if (is_op(t, ":")) {
    if (e->kind == N_TUPLE) perr(p, e->span, "only a single target (not a tuple) can be annotated");
    if (e->kind != N_NAME && e->kind != N_ATTR && e->kind != N_SUBSCRIPT)
      perr(p, e->span, "invalid annotation target: %s", expr_desc(e));
    next(p);
    Node *n = mk(p, N_ANNASSIGN, st);
    n->a = e;
    n->c = parse_test(p);
    if (accept_op(p, "=")) n->b = parse_star_exprs(p);
    n->span = since(p, st);
    return n;
  }
  int op = aug_op(t);
  if (op) {
    if (e->kind != N_NAME && e->kind != N_ATTR && e->kind != N_SUBSCRIPT)
      perr(p, e->span, "invalid augmented assignment target: %s", expr_desc(e));
    next(p);
    Node *n = mk(p, N_AUGASSIGN, st);
    n->op = op;
    n->a = e;
    n->b = parse_star_exprs(p);
    n->span = since(p, st);
    return n;
  }
  if (is_op(t, "=")) {
    Node *n = mk(p, N_ASSIGN, st);
    while (accept_op(p, "=")) {
      check_target(p, e, "assignment", 0);
      push(p, &n->list, e);
      if (is_kw(cur(p), "yield")) perr(p, cur(p)->span, "'yield' is not supported");
      e = parse_star_exprs(p);
    }
    n->a = e;
    n->span = since(p, st);
    return n;
  }
  if (is_op(t, ":=")) perr(p, t->span, "an assignment expression (':=') must be parenthesized here");
  Node *n = mk(p, N_EXPR_STMT, e->span);
  n->a = e;
  return n;
}

/* dotted_name = NAME ('.' NAME)*   returned as one string "a.b.c" */
static const char *parse_dotted(Parser *p, const char *what) {
  int first = p->i;
  expect_name(p, what);
  size_t len = p->t[first].len;
  while (accept_op(p, ".")) len += 1 + expect_name(p, "a name after '.'")->len;
  char *s = arena_alloc(p->a, len + 1);
  size_t k = 0;
  for (int j = first; j < p->i; j++) {
    memcpy(s + k, p->t[j].text, p->t[j].len);
    k += p->t[j].len;
  }
  s[k] = '\0';
  return s;
}

// import_name = 'import' dotted_as_name (',' dotted_as_name)*
// dotted_as_name = dotted_name ['as' NAME]
static Node *parse_import(Parser *p) {
  Token *kw = next(p);
  Node *n = mk(p, N_IMPORT, kw->span);
  do {
    Token *st = cur(p);
    Node *al = mk(p, N_ALIAS, st->span);
    al->name = parse_dotted(p, "a module name after 'import'");
    if (accept_kw(p, "as")) al->name2 = expect_name(p, "a name after 'as'")->text;
    al->span = since(p, st->span);
    push(p, &n->list, al);
  } while (accept_op(p, ","));
  n->span = since(p, kw->span);
  return n;
}

// import_from = 'from' ('.' | '...')* dotted_name 'import' import_targets
//             | 'from' ('.' | '...')+ 'import' import_targets
// import_targets = '(' import_as_names [','] ')' | import_as_names | '*'
// import_as_names = NAME ['as' NAME] (',' NAME ['as' NAME])*
static Node *parse_from(Parser *p) {
  Token *kw = next(p);
  Node *n = mk(p, N_IMPORTFROM, kw->span);
  for (;;) {
    if (accept_op(p, ".")) n->ival += 1;
    else if (accept_op(p, "...")) n->ival += 3;
    else break;
  }
  if (n->ival == 0 || !is_kw(cur(p), "import")) n->name = parse_dotted(p, "a module name after 'from'");
  if (!accept_kw(p, "import")) perr(p, err_here(p), "expected 'import' after the module name");
  Token *st = cur(p);
  if (is_op(st, "*")) {
    next(p);
    Node *al = mk(p, N_ALIAS, st->span);
    al->name = "*";
    push(p, &n->list, al);
  } else {
    const Token *open = accept_op(p, "(") ? st : NULL;
    for (;;) {
      Token *t = cur(p);
      Node *al = mk(p, N_ALIAS, t->span);
      al->name = expect_name(p, "a name to import")->text;
      if (accept_kw(p, "as")) al->name2 = expect_name(p, "a name after 'as'")->text;
      al->span = since(p, t->span);
      push(p, &n->list, al);
      if (!accept_op(p, ",")) break;
      if (open && is_op(cur(p), ")")) break;
      if (!open && cur(p)->kind == T_NEWLINE)
        perr(p, p->t[p->i - 1].span, "trailing comma not allowed without surrounding parentheses");
    }
    if (open) close_bracket(p, open, ")", "',' or ')'");
  }
  n->span = since(p, kw->span);
  return n;
}

// simple_stmt = 'pass' | 'break' | 'continue' | 'return' [star_expressions]
//             | 'raise' [test ['from' test]] | ('global' | 'nonlocal') NAME (',' NAME)*
//             | 'del' star_targets | 'assert' test [',' test] | import_name | import_from
//             | expr_stmt
static Node *parse_simple_stmt(Parser *p) {
  Token *t = cur(p);
  if (t->kind != T_NAME || !is_keyword(t->text)) return parse_expr_stmt(p);
  const char *k = t->text;
  if (!strcmp(k, "pass") || !strcmp(k, "break") || !strcmp(k, "continue")) {
    next(p);
    return mk(p, k[0] == 'p' ? N_PASS : k[0] == 'b' ? N_BREAK : N_CONTINUE, t->span);
  }
  if (!strcmp(k, "return")) {
    next(p);
    Node *n = mk(p, N_RETURN, t->span);
    if (starts_expr(cur(p))) n->a = parse_star_exprs(p);
    n->span = since(p, t->span);
    return n;
  }
  if (!strcmp(k, "raise")) {
    next(p);
    Node *n = mk(p, N_RAISE, t->span);
    if (starts_expr(cur(p))) {
      n->a = parse_test(p);
      if (accept_kw(p, "from")) n->b = parse_test(p);
    }
    n->span = since(p, t->span);
    return n;
  }
  if (!strcmp(k, "global") || !strcmp(k, "nonlocal")) {
    next(p);
    Node *n = mk(p, N_GLOBAL, t->span);
    n->op = k[0] == 'n';
    do {
      Token *nm = expect_name(p, "a name");
      Node *x = mk(p, N_NAME, nm->span);
      x->name = nm->text;
      push(p, &n->list, x);
    } while (accept_op(p, ","));
    n->span = since(p, t->span);
    return n;
  }
  if (!strcmp(k, "del")) {
    next(p);
    Node *n = mk(p, N_DEL, t->span);
    parse_target_items(p, &n->list);
    for (int i = 0; i < n->list.len; i++) check_target(p, n->list.data[i], "delete", 1);
    n->span = since(p, t->span);
    return n;
  }
  if (!strcmp(k, "assert")) {
    next(p);
    Node *n = mk(p, N_ASSERT, t->span);
    n->a = parse_test(p);
    if (accept_op(p, ",")) n->b = parse_test(p);
    n->span = since(p, t->span);
    return n;
  }
  if (!strcmp(k, "import")) return parse_import(p);
  if (!strcmp(k, "from")) return parse_from(p);
  if (!strcmp(k, "yield")) {   /* a generator's (a @contextmanager's) statement: an error only where it runs */
    next(p);
    Node *n = mk(p, N_YIELD, t->span);
    if (accept_kw(p, "from")) n->op = 1, n->a = parse_test(p);
    else if (starts_expr(cur(p))) n->a = parse_star_exprs(p);
    n->span = since(p, t->span);
    return n;
  }
  if (!strcmp(k, "async") || !strcmp(k, "await")) perr(p, t->span, "'%s' is not supported", k);
  static const char *const compound[] = {"if", "elif", "else", "for", "while", "with", "try", "except",
                                         "finally", "def", "class", NULL};
  for (int i = 0; compound[i]; i++)
    if (!strcmp(k, compound[i]))
      perr(p, t->span, "'%s' cannot appear here: a compound statement must start on its own line", k);
  return parse_expr_stmt(p);
}

// simple_stmts = simple_stmt (';' simple_stmt)* [';'] NEWLINE
static void parse_simple_stmts(Parser *p, NodeVec *out) {
  for (;;) {
    push(p, out, parse_simple_stmt(p));
    if (!accept_op(p, ";")) break;
    if (cur(p)->kind == T_NEWLINE) break;
  }
  if (cur(p)->kind != T_NEWLINE) expected(p, "end of statement");
  next(p);
}

// if_stmt = 'if' named_expression ':' block ('elif' named_expression ':' block)* ['else' ':' block]
static Node *parse_if(Parser *p) {
  Token *kw = next(p);
  Node *top = mk(p, N_IF, kw->span);
  top->a = parse_named(p);
  expect_op(p, ":", "expected ':' after the if condition");
  parse_block(p, &top->body, "if");
  Node *tail = top; /* elif chains are built by a loop, not recursion */
  for (;;) {
    if (is_kw(cur(p), "elif")) {
      Token *k = next(p);
      Node *n = mk(p, N_IF, k->span);
      n->a = parse_named(p);
      expect_op(p, ":", "expected ':' after the elif condition");
      parse_block(p, &n->body, "elif");
      n->span = since(p, k->span);
      push(p, &tail->orelse, n);
      tail = n;
    } else if (accept_kw(p, "else")) {
      expect_op(p, ":", "expected ':' after 'else'");
      parse_block(p, &tail->orelse, "else");
      break;
    } else {
      break;
    }
  }
  top->span = since(p, kw->span);
  return top;
}

/* ['else' ':' block] after a loop */
static void parse_loop_else(Parser *p, Node *n) {
  if (accept_kw(p, "else")) {
    expect_op(p, ":", "expected ':' after 'else'");
    parse_block(p, &n->orelse, "else");
  }
}

// while_stmt = 'while' named_expression ':' block ['else' ':' block]
static Node *parse_while(Parser *p) {
  Token *kw = next(p);
  Node *n = mk(p, N_WHILE, kw->span);
  n->a = parse_named(p);
  expect_op(p, ":", "expected ':' after the while condition");
  parse_block(p, &n->body, "while");
  parse_loop_else(p, n);
  n->span = since(p, kw->span);
  return n;
}

// for_stmt = 'for' star_targets 'in' star_expressions ':' block ['else' ':' block]
static Node *parse_for(Parser *p) {
  Token *kw = next(p);
  Node *n = mk(p, N_FOR, kw->span);
  n->a = parse_targets(p);
  check_target(p, n->a, "for-loop", 0);
  if (!accept_kw(p, "in")) perr(p, err_here(p), "expected 'in' after the for-loop target");
  n->b = parse_star_exprs(p);
  expect_op(p, ":", "expected ':' after the for-loop iterable");
  parse_block(p, &n->body, "for");
  parse_loop_else(p, n);
  n->span = since(p, kw->span);
  return n;
}

// with_item = test ['as' star_target]
static Node *parse_with_item(Parser *p) {
  Token *st = cur(p);
  Node *it = mk(p, N_WITHITEM, st->span);
  it->a = parse_test(p);
  if (accept_kw(p, "as")) {
    Token *t = cur(p);
    it->b = is_op(t, "*") ? parse_targets(p) : parse_bitor(p);
    check_target(p, it->b, "'with'", 0);
  }
  it->span = since(p, st->span);
  return it;
}

// with_stmt = 'with' '(' with_item (',' with_item)* [','] ')' ':' block
//           | 'with' with_item (',' with_item)* ':' block
static Node *parse_with(Parser *p) {
  Token *kw = next(p);
  Node *n = mk(p, N_WITH, kw->span);
  int paren = 0;
  if (is_op(cur(p), "(")) {
    /* Parenthesized items when the matching ')' is directly followed by ':'
     * (tokens are balanced, the lexer checked). */
    int depth = 0, j = p->i;
    for (; j < p->n - 1; j++) {
      Token *t = &p->t[j];
      if (is_op(t, "(") || is_op(t, "[") || is_op(t, "{")) depth++;
      else if (is_op(t, ")") || is_op(t, "]") || is_op(t, "}")) {
        if (--depth == 0) break;
      }
    }
    paren = j + 1 < p->n && is_op(&p->t[j + 1], ":");
  }
  if (paren) {
    Token *open = next(p);
    do {
      if (is_op(cur(p), ")")) break;
      push(p, &n->list, parse_with_item(p));
    } while (accept_op(p, ","));
    close_bracket(p, open, ")", "',' or ')'");
    if (n->list.len == 0) perr(p, open->span, "expected at least one item in the 'with' statement");
  } else {
    do push(p, &n->list, parse_with_item(p));
    while (accept_op(p, ","));
  }
  expect_op(p, ":", "expected ':' after the 'with' items");
  parse_block(p, &n->body, "with");
  n->span = since(p, kw->span);
  return n;
}

// try_stmt = 'try' ':' block (except_clause+ ['else' ':' block] ['finally' ':' block]
//                              | 'finally' ':' block)
// except_clause = 'except' [test ['as' NAME]] ':' block
static Node *parse_try(Parser *p) {
  Token *kw = next(p);
  Node *n = mk(p, N_TRY, kw->span);
  expect_op(p, ":", "expected ':' after 'try'");
  parse_block(p, &n->body, "try");
  int bare_seen = 0, has_finally = 0;
  while (is_kw(cur(p), "except")) {
    Token *ek = next(p);
    if (bare_seen) perr(p, ek->span, "a bare 'except:' must be the last except clause");
    if (is_op(cur(p), "*")) perr(p, cur(p)->span, "'except*' is not supported");
    Node *h = mk(p, N_EXCEPT, ek->span);
    if (!is_op(cur(p), ":")) {
      h->a = parse_test(p);
      if (is_op(cur(p), ",")) perr(p, cur(p)->span, "multiple exception types must be parenthesized");
      if (accept_kw(p, "as")) h->name = expect_name(p, "a name after 'as'")->text;
    } else {
      bare_seen = 1;
    }
    expect_op(p, ":", "expected ':' after the except clause");
    parse_block(p, &h->body, "except");
    h->span = since(p, ek->span);
    push(p, &n->list, h);
  }
  if (is_kw(cur(p), "else")) {
    if (n->list.len == 0) perr(p, cur(p)->span, "'else' after 'try' needs an 'except' clause before it");
    next(p);
    expect_op(p, ":", "expected ':' after 'else'");
    parse_block(p, &n->orelse, "else");
  }
  if (accept_kw(p, "finally")) {
    expect_op(p, ":", "expected ':' after 'finally'");
    parse_block(p, &n->body2, "finally");
    has_finally = 1;
  }
  if (n->list.len == 0 && !has_finally) perr(p, err_here(p), "expected 'except' or 'finally' after the 'try' block");
  n->span = since(p, kw->span);
  return n;
}

// funcdef = 'def' NAME '(' [parameters] ')' ['->' test] ':' block
static Node *parse_funcdef(Parser *p) {
  Token *kw = next(p);
  Node *n = mk(p, N_FUNCDEF, kw->span);
  n->name = expect_name(p, "a function name after 'def'")->text;
  Token *open = expect_op(p, "(", "expected '(' after the function name");
  parse_params(p, &n->list, 0);
  close_bracket(p, open, ")", "',' or ')' in the parameter list");
  if (accept_op(p, "->")) n->c = parse_test(p);
  expect_op(p, ":", "expected ':' after the function signature");
  parse_block(p, &n->body, "def");
  n->span = since(p, kw->span);
  return n;
}

// classdef = 'class' NAME ['(' [arguments] ')'] ':' block
static Node *parse_classdef(Parser *p) {
  Token *kw = next(p);
  Node *n = mk(p, N_CLASSDEF, kw->span);
  n->name = expect_name(p, "a class name after 'class'")->text;
  if (is_op(cur(p), "(")) {
    Token *open = next(p);
    parse_args(p, n, open); /* bases land in list, keywords in list2 */
  }
  expect_op(p, ":", "expected ':' after the class name");
  parse_block(p, &n->body, "class");
  n->span = since(p, kw->span);
  return n;
}

// decorated = ('@' named_expression NEWLINE)+ (funcdef | classdef)
static Node *parse_decorated(Parser *p) {
  Span st = cur(p)->span;
  NodeVec decs = {0};
  while (accept_op(p, "@")) {
    push(p, &decs, parse_named(p));
    if (cur(p)->kind != T_NEWLINE) expected(p, "end of line after the decorator");
    next(p);
  }
  Node *n;
  if (is_kw(cur(p), "def")) n = parse_funcdef(p);
  else if (is_kw(cur(p), "class")) n = parse_classdef(p);
  else if (is_kw(cur(p), "async")) perr(p, cur(p)->span, "'async' is not supported");
  else expected(p, "'def' or 'class' after the decorator");
  n->decorators = decs;
  n->span = since(p, st);
  return n;
}

// statement = compound_stmt | simple_stmts
// compound_stmt = if_stmt | while_stmt | for_stmt | with_stmt | try_stmt | funcdef | classdef | decorated
static void parse_statement(Parser *p, NodeVec *out) {
  Token *t = cur(p);
  if (t->kind == T_INDENT) perr(p, t->span, "unexpected indent");
  if (is_op(t, "@")) {
    push(p, out, parse_decorated(p));
    return;
  }
  if (t->kind == T_NAME && is_keyword(t->text)) {
    const char *k = t->text;
    Node *n = NULL;
    if (is_op(peek(p, 1), "=")) perr(p, t->span, "'%s' is a keyword and cannot be used as a name", k);
    if (!strcmp(k, "if")) n = parse_if(p);
    else if (!strcmp(k, "while")) n = parse_while(p);
    else if (!strcmp(k, "for")) n = parse_for(p);
    else if (!strcmp(k, "with")) n = parse_with(p);
    else if (!strcmp(k, "try")) n = parse_try(p);
    else if (!strcmp(k, "def")) n = parse_funcdef(p);
    else if (!strcmp(k, "class")) n = parse_classdef(p);
    else if (!strcmp(k, "async")) perr(p, t->span, "'async' is not supported");
    else if (!strcmp(k, "elif")) perr(p, t->span, "'elif' without a matching 'if'");
    else if (!strcmp(k, "else")) perr(p, t->span, "'else' without a matching 'if', 'for', 'while' or 'try'");
    else if (!strcmp(k, "except") || !strcmp(k, "finally")) perr(p, t->span, "'%s' without a matching 'try'", k);
    if (n) {
      push(p, out, n);
      return;
    }
  }
  parse_simple_stmts(p, out);
}

// file = statement* EOF
static Node *parse_file(Parser *p) {
  Node *m = mk(p, N_MODULE, (Span){p->f, 1, 1, 1, 1});
  while (cur(p)->kind != T_EOF) {
    if (cur(p)->kind == T_DEDENT || cur(p)->kind == T_NEWLINE) {
      next(p); /* cannot come from the lexer at top level; be safe */
      continue;
    }
    parse_statement(p, &m->body);
  }
  m->span = since(p, m->span);
  return m;
}

/* ---- the depth of the finished tree ---------------------------------------------------------- */

static void check_depth(Parser *p, const Node *n, int d);

static void check_depth_vec(Parser *p, const NodeVec *v, int d) {
  for (int i = 0; i < v->len; i++) check_depth(p, v->data[i], d);
}

static void check_depth(Parser *p, const Node *n, int d) {
  if (!n) return;
  if (d > MAX_TREE_DEPTH) {
    if (n->kind < N_NAME)
      perr(p, n->span, "statements nested too deeply (more than %d levels; each 'elif' counts as one)", MAX_TREE_DEPTH);
    perr(p, n->span, "expression nested too deeply (more than %d levels)", MAX_TREE_DEPTH);
  }
  check_depth(p, n->a, d + 1);
  check_depth(p, n->b, d + 1);
  check_depth(p, n->c, d + 1);
  check_depth_vec(p, &n->list, d + 1);
  check_depth_vec(p, &n->list2, d + 1);
  check_depth_vec(p, &n->body, d + 1);
  check_depth_vec(p, &n->orelse, d + 1);
  check_depth_vec(p, &n->body2, d + 1);
  check_depth_vec(p, &n->decorators, d + 1);
}

Node *fe_parse(Arena *a, Diag *d, const SrcFile *f) {
  TokenVec toks = {0};
  if (fe_lex(a, d, f, &toks) != 0) return NULL;
  if (toks.len == 0 || toks.data[toks.len - 1].kind != T_EOF) BUG("lexer did not end with EOF");
  Parser *p = arena_alloc(a, sizeof *p); /* on the heap: nothing to be clobbered by longjmp */
  p->a = a;
  p->d = d;
  p->f = f;
  p->t = toks.data;
  p->n = toks.len;
  if (setjmp(p->jb)) return NULL;
  Node *m = parse_file(p);
  check_depth(p, m, 0);
  return m;
}
