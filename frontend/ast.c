/* ast.c - names of node kinds and operators, and the S-expression dump used by
 * `ctc compile --emit ast` and the tests.
 *
 * The dump is deterministic and prints no spans. A module prints one top-level
 * statement per line; everything else nests inline:
 *
 *   (class Net (bases (attr nn Module)) (def forward (params self x) (return (call f x))))
 *   (assign x (binop + 1 (binop * 2 3)))
 *
 * Forms (optional parts in brackets, `nil` for a missing slice part):
 *   (expr E) (assign T... V) (augassign += T V) (annassign T ANN [V]) (return [E])
 *   (if C (body S...) [(else S...)]) (for T I (body S...) [(else S...)])
 *   (while C (body S...) [(else S...)]) (with (withitem E [T])... (body S...))
 *   (pass) (break) (continue) (assert C [M]) (del T...) (raise [E] [(from C)])
 *   (global N...) (nonlocal N...) (try (body S...) (except [T] [(as N)] (body S...))...
 *   [(else S...)] [(finally S...)]) (import A...) (from [.]NAME A...) with A = NAME | (as NAME N)
 *   (def NAME [(decorators D...)] (params P...) [(returns T)] S...) with P = x | *args |
 *   **kw | * | / | (param x [(ann T)] [(default V)])
 *   (class NAME [(decorators D...)] [(bases B...)] [(keywords K...)] S...)
 *   names, ints, floats, "strings", (fstr "raw"), None True False ...
 *   (attr E name) (subscript E I) (slice LO HI STEP) (call F A... K...) (kw name V) (kw ** V) (starred V)
 *   (binop OP A B) (unary OP A) (boolop and|or A B) (compare A OP B OP C ...)
 *   (ifexp TEST BODY ORELSE) (lambda (params P...) E) (tuple E...) (list E...) (set E...)
 *   (dict (K V)... (** V)...) (listcomp E (compfor T I (if C)...)...) (genexp ...) (setcomp ...)
 *   (dictcomp K V (compfor ...)...) (namedexpr N V) */
#include "frontend.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const char *const kind_names[N_COUNT] = {
    [N_MODULE] = "module",       [N_EXPR_STMT] = "expr",       [N_ASSIGN] = "assign",
    [N_AUGASSIGN] = "augassign", [N_ANNASSIGN] = "annassign",  [N_RETURN] = "return",
    [N_IF] = "if",               [N_FOR] = "for",              [N_WHILE] = "while",
    [N_WITH] = "with",           [N_WITHITEM] = "withitem",    [N_PASS] = "pass",
    [N_BREAK] = "break",         [N_CONTINUE] = "continue",    [N_ASSERT] = "assert",
    [N_DEL] = "del",             [N_RAISE] = "raise",          [N_GLOBAL] = "global",
    [N_YIELD] = "yield",
    [N_TRY] = "try",             [N_EXCEPT] = "except",        [N_IMPORT] = "import",
    [N_IMPORTFROM] = "from",     [N_ALIAS] = "alias",          [N_FUNCDEF] = "def",
    [N_PARAM] = "param",         [N_CLASSDEF] = "class",       [N_NAME] = "name",
    [N_INT] = "int",             [N_FLOAT] = "float",          [N_IMAG] = "imag",          [N_STR] = "str",
    [N_FSTR] = "fstr",           [N_CONST] = "const",          [N_ATTR] = "attr",
    [N_SUBSCRIPT] = "subscript", [N_SLICE] = "slice",          [N_CALL] = "call",
    [N_KEYWORD] = "kw",          [N_STARRED] = "starred",      [N_BINOP] = "binop",
    [N_UNARY] = "unary",         [N_BOOLOP] = "boolop",        [N_COMPARE] = "compare",
    [N_IFEXP] = "ifexp",         [N_LAMBDA] = "lambda",        [N_TUPLE] = "tuple",
    [N_LIST] = "list",           [N_DICT] = "dict",            [N_SET] = "set",
    [N_LISTCOMP] = "listcomp",   [N_GENEXP] = "genexp",        [N_DICTCOMP] = "dictcomp",
    [N_SETCOMP] = "setcomp",     [N_COMPFOR] = "compfor",      [N_NAMEDEXPR] = "namedexpr",
};

const char *fe_node_kind_name(NodeKind k) {
  if ((int)k < 0 || k >= N_COUNT || !kind_names[k]) return "?";
  return kind_names[k];
}

const char *fe_op_spelling(int op) {
  switch (op) {
  case OP_ADD: return "+";
  case OP_SUB: return "-";
  case OP_MUL: return "*";
  case OP_DIV: return "/";
  case OP_FLOORDIV: return "//";
  case OP_MOD: return "%";
  case OP_POW: return "**";
  case OP_MATMUL: return "@";
  case OP_LSHIFT: return "<<";
  case OP_RSHIFT: return ">>";
  case OP_BITAND: return "&";
  case OP_BITOR: return "|";
  case OP_BITXOR: return "^";
  case OP_NEG: return "-";
  case OP_POS: return "+";
  case OP_INVERT: return "~";
  case OP_NOT: return "not";
  case OP_AND: return "and";
  case OP_OR: return "or";
  case OP_EQ: return "==";
  case OP_NE: return "!=";
  case OP_LT: return "<";
  case OP_LE: return "<=";
  case OP_GT: return ">";
  case OP_GE: return ">=";
  case OP_IS: return "is";
  case OP_ISNOT: return "is not";
  case OP_IN: return "in";
  case OP_NOTIN: return "not in";
  default: return "?";
  }
}

/* ---- the dump ------------------------------------------------------------------------ */

static void dump(FILE *o, const Node *n);

/* " E1 E2 ..." */
static void dump_items(FILE *o, const NodeVec *v) {
  for (int i = 0; i < v->len; i++) {
    fputc(' ', o);
    dump(o, v->data[i]);
  }
}

/* " (tag S...)", or nothing when v is empty and !always */
static void dump_tagged(FILE *o, const char *tag, const NodeVec *v, int always) {
  if (!v->len && !always) return;
  fprintf(o, " (%s", tag);
  dump_items(o, v);
  fputc(')', o);
}

static void dump_opt(FILE *o, const Node *n) {
  if (!n) return;
  fputc(' ', o);
  dump(o, n);
}

static void dump_string(FILE *o, const char *s, int64_t len) {
  fputc('"', o);
  for (int64_t i = 0; i < len; i++) {
    unsigned char c = (unsigned char)s[i];
    if (c == '"' || c == '\\') fprintf(o, "\\%c", c);
    else if (c == '\n') fputs("\\n", o);
    else if (c == '\t') fputs("\\t", o);
    else if (c == '\r') fputs("\\r", o);
    else if (c < 0x20 || c >= 0x7F) fprintf(o, "\\x%02x", c);
    else fputc(c, o);
  }
  fputc('"', o);
}

/* Shortest decimal form that reads back as the same double, with a '.' or 'e'. */
static void dump_float(FILE *o, double v) {
  if (isinf(v)) {
    fputs(v > 0 ? "inf" : "-inf", o);
    return;
  }
  if (isnan(v)) {
    fputs("nan", o);
    return;
  }
  char buf[64];
  for (int prec = 1; prec <= 17; prec++) {
    snprintf(buf, sizeof buf, "%.*g", prec, v);
    if (strtod(buf, NULL) == v) break;
  }
  if (!strpbrk(buf, ".en")) strcat(buf, ".0");
  fputs(buf, o);
}

static void dump_param(FILE *o, const Node *n) {
  const char *prefix = n->op == PARAM_VARARGS ? "*" : n->op == PARAM_KWARGS ? "**" : "";
  if (n->op == PARAM_SLASH) {
    fputc('/', o);
    return;
  }
  if (!n->b && !n->c) {
    fprintf(o, "%s%s", prefix, n->name ? n->name : "");
    return;
  }
  fprintf(o, "(param %s%s", prefix, n->name ? n->name : "");
  if (n->c) {
    fputs(" (ann ", o);
    dump(o, n->c);
    fputc(')', o);
  }
  if (n->b) {
    fputs(" (default ", o);
    dump(o, n->b);
    fputc(')', o);
  }
  fputc(')', o);
}

static void dump(FILE *o, const Node *n) {
  if (!n) {
    fputs("nil", o);
    return;
  }
  const char *name = fe_node_kind_name(n->kind);
  switch (n->kind) {
  case N_MODULE:
    fputs("(module", o);
    dump_items(o, &n->body);
    fputc(')', o);
    return;
  case N_NAME:
    fputs(n->name, o);
    return;
  case N_INT:
    fprintf(o, "%lld", (long long)n->ival);
    return;
  case N_FLOAT:
    dump_float(o, n->fval);
    return;
  case N_IMAG:
    dump_float(o, n->fval);
    fputc('j', o);
    return;
  case N_STR:
    dump_string(o, n->sval, n->ival);
    return;
  case N_FSTR:
    fputs("(fstr ", o);
    dump_string(o, n->sval, n->ival);
    fputc(')', o);
    return;
  case N_CONST: {
    static const char *const c[] = {"None", "True", "False", "..."};
    fputs(n->op >= 0 && n->op < 4 ? c[n->op] : "?", o);
    return;
  }
  case N_PARAM:
    dump_param(o, n);
    return;
  case N_ALIAS:
    if (n->name2) fprintf(o, "(as %s %s)", n->name, n->name2);
    else fputs(n->name, o);
    return;
  case N_PASS:
  case N_BREAK:
  case N_CONTINUE:
    fprintf(o, "(%s)", name);
    return;
  default:
    break;
  }

  fprintf(o, "(%s", n->kind == N_GLOBAL && n->op ? "nonlocal" : name);
  switch (n->kind) {
  case N_EXPR_STMT:
  case N_RETURN:
  case N_STARRED:
    dump_opt(o, n->a);
    break;
  case N_ASSIGN:
    dump_items(o, &n->list);
    dump_opt(o, n->a);
    break;
  case N_AUGASSIGN:
    fprintf(o, " %s=", fe_op_spelling(n->op));
    dump_opt(o, n->a);
    dump_opt(o, n->b);
    break;
  case N_ANNASSIGN:
    dump_opt(o, n->a);
    dump_opt(o, n->c);
    dump_opt(o, n->b);
    break;
  case N_IF:
  case N_WHILE:
    dump_opt(o, n->a);
    dump_tagged(o, "body", &n->body, 1);
    dump_tagged(o, "else", &n->orelse, 0);
    break;
  case N_FOR:
    dump_opt(o, n->a);
    dump_opt(o, n->b);
    dump_tagged(o, "body", &n->body, 1);
    dump_tagged(o, "else", &n->orelse, 0);
    break;
  case N_WITH:
    dump_items(o, &n->list);
    dump_tagged(o, "body", &n->body, 1);
    break;
  case N_WITHITEM:
    dump_opt(o, n->a);
    dump_opt(o, n->b);
    break;
  case N_ASSERT:
    dump_opt(o, n->a);
    dump_opt(o, n->b);
    break;
  case N_DEL:
  case N_GLOBAL:
  case N_TUPLE:
  case N_LIST:
  case N_SET:
    dump_items(o, &n->list);
    break;
  case N_YIELD:
    if (n->op) fputs(" from", o);
    dump_opt(o, n->a);
    break;
  case N_RAISE:
    dump_opt(o, n->a);
    if (n->b) {
      fputs(" (from ", o);
      dump(o, n->b);
      fputc(')', o);
    }
    break;
  case N_TRY:
    dump_tagged(o, "body", &n->body, 1);
    dump_items(o, &n->list);
    dump_tagged(o, "else", &n->orelse, 0);
    dump_tagged(o, "finally", &n->body2, 0);
    break;
  case N_EXCEPT:
    dump_opt(o, n->a);
    if (n->name) fprintf(o, " (as %s)", n->name);
    dump_tagged(o, "body", &n->body, 1);
    break;
  case N_IMPORT:
    dump_items(o, &n->list);
    break;
  case N_IMPORTFROM:
    fputc(' ', o);
    for (int64_t i = 0; i < n->ival; i++) fputc('.', o);
    if (n->name) fputs(n->name, o);
    dump_items(o, &n->list);
    break;
  case N_FUNCDEF:
    fprintf(o, " %s", n->name);
    dump_tagged(o, "decorators", &n->decorators, 0);
    dump_tagged(o, "params", &n->list, 1);
    if (n->c) {
      fputs(" (returns ", o);
      dump(o, n->c);
      fputc(')', o);
    }
    dump_items(o, &n->body);
    break;
  case N_CLASSDEF:
    fprintf(o, " %s", n->name);
    dump_tagged(o, "decorators", &n->decorators, 0);
    dump_tagged(o, "bases", &n->list, 0);
    dump_tagged(o, "keywords", &n->list2, 0);
    dump_items(o, &n->body);
    break;
  case N_ATTR:
    dump_opt(o, n->a);
    fprintf(o, " %s", n->name);
    break;
  case N_SUBSCRIPT:
    dump_opt(o, n->a);
    fputc(' ', o);
    dump(o, n->b);
    break;
  case N_SLICE:
    for (int i = 0; i < 3; i++) {
      fputc(' ', o);
      dump(o, i == 0 ? n->a : i == 1 ? n->b : n->c);
    }
    break;
  case N_CALL:
    dump_opt(o, n->a);
    dump_items(o, &n->list);
    dump_items(o, &n->list2);
    break;
  case N_KEYWORD:
    if (n->name) fprintf(o, " %s", n->name);
    else fputs(" **", o);
    dump_opt(o, n->a);
    break;
  case N_BINOP:
    fprintf(o, " %s", fe_op_spelling(n->op));
    dump_opt(o, n->a);
    dump_opt(o, n->b);
    break;
  case N_UNARY:
    fprintf(o, " %s", fe_op_spelling(n->op));
    dump_opt(o, n->a);
    break;
  case N_BOOLOP:
    fprintf(o, " %s", fe_op_spelling(n->op));
    dump_opt(o, n->a);
    dump_opt(o, n->b);
    break;
  case N_COMPARE:
    for (int i = 0; i < n->list.len; i++) {
      if (i > 0) fprintf(o, " %s", fe_op_spelling(n->cmpops[i - 1]));
      fputc(' ', o);
      dump(o, n->list.data[i]);
    }
    break;
  case N_IFEXP:
    dump_opt(o, n->a);
    dump_opt(o, n->b);
    dump_opt(o, n->c);
    break;
  case N_LAMBDA:
    dump_tagged(o, "params", &n->list, 1);
    dump_opt(o, n->a);
    break;
  case N_DICT:
    for (int i = 0; i < n->list.len; i++) {
      const Node *k = n->list.data[i], *v = i < n->list2.len ? n->list2.data[i] : NULL;
      if (k) {
        fputs(" (", o);
        dump(o, k);
        fputc(' ', o);
      } else {
        fputs(" (** ", o);
      }
      dump(o, v);
      fputc(')', o);
    }
    break;
  case N_LISTCOMP:
  case N_GENEXP:
  case N_SETCOMP:
    dump_opt(o, n->a);
    dump_items(o, &n->list);
    break;
  case N_DICTCOMP:
    dump_opt(o, n->a);
    dump_opt(o, n->b);
    dump_items(o, &n->list);
    break;
  case N_COMPFOR:
    dump_opt(o, n->a);
    dump_opt(o, n->b);
    for (int i = 0; i < n->list.len; i++) {
      fputs(" (if ", o);
      dump(o, n->list.data[i]);
      fputc(')', o);
    }
    break;
  case N_NAMEDEXPR:
    dump_opt(o, n->a);
    dump_opt(o, n->b);
    break;
  default:
    break;
  }
  fputc(')', o);
}

void fe_dump(FILE *out, const Node *n) {
  if (n && n->kind == N_MODULE) {
    for (int i = 0; i < n->body.len; i++) {
      dump(out, n->body.data[i]);
      fputc('\n', out);
    }
    return;
  }
  dump(out, n);
  fputc('\n', out);
}
