/* frontend.h - lexer, parser and AST for the Python subset ctc reads.
 *
 *   SrcFile --fe_lex--> Token[] --fe_parse--> Node (N_MODULE)
 *
 * Every node lives in the compile arena and carries the Span of the source text
 * it came from. The parser reports the first syntax error through the Diag and
 * returns NULL; it never crashes or hangs on any byte sequence (nesting depth is
 * bounded, embedded NUL bytes and bad UTF-8 are diagnosed). */
#ifndef CTC_FRONTEND_H
#define CTC_FRONTEND_H

#include "../support/support.h"

/* ---- lexer.c ---------------------------------------------------------- */

typedef enum TokKind {
  T_EOF,
  T_NEWLINE,   /* end of a logical line */
  T_INDENT,    /* indentation increased */
  T_DEDENT,    /* indentation decreased (one per level) */
  T_NAME,      /* identifier or keyword: keywords are told apart by text */
  T_INT,       /* 12, 0x1f, 0o7, 0b1, 1_000 */
  T_FLOAT,     /* 1.0, 1e-3, .5, 3. */
  T_IMAG,      /* 1j, 2.5J, 1e3j: fval the imaginary part */
  T_STRING,    /* '..', "..", '''..''', """..""", with r/b prefixes; text = decoded value */
  T_FSTRING,   /* f"..": text = raw contents between the quotes (not evaluated) */
  T_OP,        /* operator or delimiter: text is its spelling ("**=", "(", "->") */
} TokKind;

typedef struct Token {
  TokKind kind;
  Span span;
  const char *text;  /* NUL-terminated; for T_STRING the decoded value */
  size_t len;        /* length of text (strings may hold NULs after \x00 escapes) */
  int64_t ival;      /* T_INT value (overflow is a diagnostic) */
  double fval;       /* T_FLOAT value */
} Token;

typedef Vec(Token) TokenVec;

/* Tokenise the whole file. Returns 0 and fills *out, or reports through d and
 * returns -1. Implicit line joining inside ()[]{}, backslash continuation,
 * comments, blank lines, tabs (to multiples of 8) and inconsistent dedent are handled. */
int fe_lex(Arena *a, Diag *d, const SrcFile *f, TokenVec *out);

/* ---- ast -------------------------------------------------------------- */

typedef enum NodeKind {
  /* module */
  N_MODULE,      /* body */
  /* statements */
  N_EXPR_STMT,   /* a: expression */
  N_ASSIGN,      /* targets = value: list = targets (a = b = v has 2), a = value */
  N_AUGASSIGN,   /* a op= b: a target, b value, op = binary operator (OP_ADD ...) */
  N_ANNASSIGN,   /* a: c = b   (b may be NULL): a target, c annotation, b value */
  N_RETURN,      /* return a   (a may be NULL) */
  N_IF,          /* if a: body  else: orelse   (elif is a nested N_IF in orelse) */
  N_FOR,         /* for a in b: body  else: orelse */
  N_WHILE,       /* while a: body  else: orelse */
  N_WITH,        /* with list(items: N_WITHITEM): body */
  N_WITHITEM,    /* a [as b] */
  N_PASS, N_BREAK, N_CONTINUE,
  N_ASSERT,      /* assert a, b   (b may be NULL) */
  N_DEL,         /* del list */
  N_RAISE,       /* raise a [from b] (both may be NULL) */
  N_YIELD,       /* yield [a] / yield from a (op 1): a generator's statement, refused where it runs */
  N_GLOBAL,      /* global/nonlocal names: list of N_NAME; op = 0 global, 1 nonlocal */
  N_TRY,         /* try: body  list(handlers: N_EXCEPT)  else: orelse  finally: body2 */
  N_EXCEPT,      /* except a [as name]: body */
  N_IMPORT,      /* import list(N_ALIAS) */
  N_IMPORTFROM,  /* from name import list(N_ALIAS); ival = leading dots (name NULL in `from . import x`) */
  N_ALIAS,       /* name [as name2]; name may be dotted "torch.nn"; name "*" for star */
  N_FUNCDEF,     /* def name(list: N_PARAM) -> c: body; decorators */
  N_PARAM,       /* name [: c] [= b]; op = PARAM_* kind */
  N_CLASSDEF,    /* class name(list: bases, list2: N_KEYWORD): body; decorators */
  /* expressions */
  N_NAME,        /* name */
  N_INT,         /* ival */
  N_FLOAT,       /* fval */
  N_IMAG,        /* fval j: an imaginary literal (1j, 2.5J) */
  N_STR,         /* sval (len in ival); adjacent literals are concatenated */
  N_FSTR,        /* sval = raw f-string contents (not evaluated by the parser) */
  N_CONST,       /* op = CONST_NONE | CONST_TRUE | CONST_FALSE | CONST_ELLIPSIS */
  N_ATTR,        /* a.name */
  N_SUBSCRIPT,   /* a[b]; b is an N_TUPLE when there are commas: x[:, 0] */
  N_SLICE,       /* a:b:c inside a subscript; each part may be NULL */
  N_CALL,        /* a(list: args, list2: N_KEYWORD) */
  N_KEYWORD,     /* name=a; name NULL for **a */
  N_STARRED,     /* *a (in calls, displays, assignment targets) */
  N_BINOP,       /* a op b */
  N_UNARY,       /* op a: OP_NEG, OP_POS, OP_INVERT, OP_NOT */
  N_BOOLOP,      /* a and b / a or b: op = OP_AND | OP_OR; chains nest to the left */
  N_COMPARE,     /* a op b, chained: list = operands (n+1), ops in cmpops (n) */
  N_IFEXP,       /* b if a else c: a test, b body, c orelse */
  N_LAMBDA,      /* lambda list(N_PARAM): a */
  N_TUPLE,       /* list */
  N_LIST,        /* list */
  N_DICT,        /* keys list, values list2 (key NULL for **m) */
  N_SET,         /* list */
  N_LISTCOMP,    /* [a for ...]: a elt, list = N_COMPFOR */
  N_GENEXP,      /* (a for ...) */
  N_DICTCOMP,    /* {a: b for ...} */
  N_SETCOMP,     /* {a for ...} */
  N_COMPFOR,     /* for a in b if list(conds) */
  N_NAMEDEXPR,   /* a := b */
  N_COUNT
} NodeKind;

typedef enum OpKind {
  OP_NONE,
  /* binary */
  OP_ADD, OP_SUB, OP_MUL, OP_DIV, OP_FLOORDIV, OP_MOD, OP_POW, OP_MATMUL,
  OP_LSHIFT, OP_RSHIFT, OP_BITAND, OP_BITOR, OP_BITXOR,
  /* unary */
  OP_NEG, OP_POS, OP_INVERT, OP_NOT,
  /* boolean */
  OP_AND, OP_OR,
  /* comparison */
  OP_EQ, OP_NE, OP_LT, OP_LE, OP_GT, OP_GE, OP_IS, OP_ISNOT, OP_IN, OP_NOTIN,
} OpKind;

enum { CONST_NONE, CONST_TRUE, CONST_FALSE, CONST_ELLIPSIS };
/* N_PARAM kinds: plain, *args, **kwargs; a bare `*` marker is PARAM_VARARGS with name NULL,
 * a `/` marker is PARAM_SLASH (name NULL). */
enum { PARAM_PLAIN, PARAM_VARARGS, PARAM_KWARGS, PARAM_SLASH };

typedef struct Node Node;
typedef Vec(Node *) NodeVec;

struct Node {
  NodeKind kind;
  Span span;          /* the whole construct */
  Node *a, *b, *c;    /* operands, see NodeKind */
  NodeVec list;       /* elements / args / targets / params / bases */
  NodeVec list2;      /* keywords / dict values */
  NodeVec body;       /* statement bodies */
  NodeVec orelse;     /* else branches */
  NodeVec body2;      /* finally */
  NodeVec decorators; /* @expr list on def/class */
  OpKind *cmpops;     /* N_COMPARE: list.len - 1 operators */
  const char *name;   /* identifiers, attribute names, def/class names */
  const char *name2;  /* `as` names */
  const char *sval;   /* string contents */
  int64_t ival;       /* ints, string length, dots in relative import */
  double fval;        /* floats */
  int op;             /* OpKind / CONST_* / PARAM_* */
};

/* ---- parser.c --------------------------------------------------------- */

/* Parse a whole file. Returns the N_MODULE node, or NULL after reporting the
 * first error through d. Lexes internally. */
Node *fe_parse(Arena *a, Diag *d, const SrcFile *f);

/* ---- ast.c ------------------------------------------------------------ */

const char *fe_node_kind_name(NodeKind k);  /* "N_CALL" -> "call" */
const char *fe_op_spelling(int op);          /* OP_ADD -> "+" */
/* S-expression dump, one statement per line, for `ctc compile --emit ast` and tests:
 *   (def forward (params self x) (return (call (attr F relu) x)))
 * Deterministic; spans are not printed. */
void fe_dump(FILE *out, const Node *n);

#endif
