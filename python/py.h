/* py.h - the Python interpreter of ctc (python/): compile-time Python values,
 * the evaluation of statements and expressions, Python's builtins, math and
 * the methods of str/list/dict. It knows nothing of torch: everything else
 * (tensors, dtypes, modules, optimizers, the torch namespaces) is a host
 * object it reaches through the host-object protocol (HostOps, L->host),
 * which the host library (torchlib/) installs. This header includes nothing
 * of torchlib/ or ir/ (tests/test_hygiene.py checks it).
 *
 *   values.c    PV: the values, equality, hashing, printing, scopes
 *   eval.c      the evaluator: statements, expressions, calls, classes, the
 *               staged `if` on run-time host values (both branches, then select)
 *   builtins.c  Python's natives (builtins.def): builtins, math, dataclasses,
 *               str/list/dict methods; argument binding for native functions */
#ifndef CTC_PY_H
#define CTC_PY_H

#include <setjmp.h>
#include "../frontend/frontend.h"

typedef struct PV PV;
typedef struct Env Env;
typedef struct L L;
typedef struct Args Args;

/* A native function: fn is the PV_BUILTIN called (fn->bi its row, fn->self the
 * bound receiver, or NULL), or for a class row the class being constructed. */
typedef PV *BuiltinFn(L *L, PV *fn, Args *A);

/* Python's natives: the rows of builtins.def, BI_<ID>. The host numbers its
 * rows after PY_BI__COUNT. No code depends on the order of rows. */
enum {
  BI_NONE_,
#define B(id, name, ns, handler, arg) BI_##id,
#define CLASS(id, name, ns, construct) BI_##id,
#include "builtins.def"
#undef B
#undef CLASS
  PY_BI__COUNT
};
/* Python's namespaces (PyRow.ns) */
enum {
  NS_BUILTINS = 1u << 0,     /* Python builtins (range, len ...) */
  NS_MATH = 1u << 1,         /* math.* */
  NS_DATACLASSES = 1u << 2,  /* dataclasses.* */
  NS_LIST = 1u << 3,         /* methods of a list */
  NS_DICT = 1u << 4,         /* methods of a dict */
  NS_STR = 1u << 5,          /* methods of a str */
  NS_NUMPY = 1u << 28,       /* numpy's functions of Python numbers (builtins.c's bi_numpy) */
  NS_FILE = 1u << 29,        /* methods of a file object from open() (read at compile time) */
  NS_ARGPARSE = 1u << 30,    /* argparse.* (argparse.c); high bits: the host numbers its own from 1u << 6 */
  NS_ARGPARSER = 1u << 31,   /* methods of an argparse.ArgumentParser (and of its groups) */
};
enum { BK_FN = 1, BK_CLASS };   /* row kinds (the host adds its own after BK_CLASS) */
typedef struct PyRow {
  const char *name;
  unsigned ns;           /* NS_* bits: where the name is found */
  int kind;              /* BK_FN or BK_CLASS */
  BuiltinFn *call;       /* the function; a class: its constructor */
  int arg;               /* the handler's small argument */
} PyRow;
extern const PyRow py_rows[PY_BI__COUNT];
PV *py_lookup(L *L, unsigned ns, const char *name, PV *self); /* Python's row `name` in ns, or NULL */
PV *py_builtin(L *L, int bi, PV *self);                       /* Python's row bi as a value */
void py_install_builtins(L *L, Env *builtins);
PV *py_module_attr(L *L, Span at, PV *ns, const char *name);  /* math.x, dataclasses.x; NULL if not Python's */

typedef enum PVKind {
  PV_NONE, PV_BOOL, PV_INT, PV_FLOAT, PV_STR,
  PV_TUPLE,     /* immutable: items/n */
  PV_LIST,      /* mutable: items/n/cap */
  PV_DICT,      /* ordered: keys/items/n */
  PV_SLICE,     /* items[0..2]: start, stop, step (PV_NONE when absent) */
  PV_ELLIPSIS,
  PV_FUNC,      /* a def or lambda: node + closure env */
  PV_CLASS,     /* a user class (node != NULL) or a native class (bi != 0: Python's or the host's) */
  PV_OBJ,       /* an instance: of a user class, or of a host class (mod: its host state) */
  PV_BOUND,     /* method bound to self: fn + self */
  PV_BUILTIN,   /* native function `call` (row bi), optionally bound to self */
  PV_NS,        /* a module: math, dataclasses, or one of the host's (torch ...) */
  PV_HOST,      /* a host value (t): a tensor */
  PV_HOSTC,     /* a host constant (dt): a dtype */
  PV_OPAQUE,    /* a value from a module ctc does not model (torchvision, numpy, os ...):
                   s its expression ("transforms.Compose(...)"), origin where it was made,
                   i 1 when `what` describes it (pv_opaque_described);
                   attributes, calls, operators and subclassing give opaque values; only
                   a use that needs its value (a tensor operation, an int argument ...) is
                   an error, naming the use and the origin */
  PV_COMPLEX,   /* a Python complex number: f the real part, fi the imaginary (1j, complex(a, b)) */
} PVKind;

struct HostValue;   /* defined by the host (torchlib: its tensors) */
struct HostObj;     /* defined by the host (torchlib: an nn.Module's registrations) */
struct HostState;   /* the host's part of the context */

struct PV {
  PVKind k;
  int64_t i;             /* INT, BOOL; FUNC: its method kind (FK_*); BUILTIN: the namespace bits its row was found under (0: made directly);
                            OPAQUE: 1 described (pv_opaque_described), 2 a model builder ctc's torchvision lacks (not callable) */
  double f;              /* FLOAT; COMPLEX: the real part */
  double fi;             /* COMPLEX: the imaginary part */
  const char *s;         /* STR (NUL-terminated), names of FUNC/CLASS/NS/BUILTIN; HOST/HOSTC: the kind's name */
  PV **items;            /* TUPLE, LIST, DICT values, SLICE parts */
  PV **keys;             /* DICT keys */
  int n, cap;
  Node *node;            /* FUNC: def/lambda node; CLASS: class node */
  Env *env;              /* FUNC closure; CLASS attribute env */
  PV **defaults;         /* FUNC: evaluated default per param (NULL if none) */
  PV *cls;               /* OBJ: its class; CLASS: first base (single inheritance chain);
                            FUNC: the class whose body defined it (for super()) */
  PV *self;              /* BOUND / BUILTIN: bound receiver */
  PV *fn;                /* BOUND: the function */
  int bi;                /* BUILTIN / native CLASS row id, 0 otherwise */
  BuiltinFn *call;       /* BUILTIN: its handler */
  struct HostObj *mod;   /* OBJ of a host class with host state (an nn.Module) */
  Env *attrs;            /* OBJ attributes */
  struct HostValue *t;   /* HOST */
  int dt;                /* HOSTC */
  int deco;              /* FUNC with a host decorator (HostOps.decorate): the host's state, 0 if none */
  int *hidx; int hcap;   /* DICT: hash index over keys (slot = item index + 1), once n grows */
  Span *origin;          /* OPAQUE: where the value was made */
  const char *what;      /* OPAQUE: its description for messages */
  int unknown_truth;     /* OPAQUE: a comparison with an opaque value (`cfg.get("type") is not None`),
                            `not` of one, or an operation on such a result: a bool Python knows and
                            ctc does not, so a branch or assert on it is an error (truthy()), never a guess */
  int owned;             /* STR made by `name += ...`, held by that name only and not read
                            since: the next `name += ...` may append in place (n = length,
                            cap = buffer size), which keeps a loop of `+=` linear */
};

/* A scope: names to values, ordered, with a parent (closure chain). */
struct Env {
  Vec(const char *) names;
  Vec(PV *) vals;
  Env *parent;
  int *hidx; int hcap;   /* hash index over names (slot = index + 1), once the scope grows */
};

/* The host-object protocol: the interpreter reaches every value it does not know
 * itself through L->host: host values (PV_HOST, PV_HOSTC), instances of host
 * classes (PV_OBJ with `mod` or whose class is a host row), host classes
 * (PV_CLASS with a host bi), and host modules (PV_NS other than Python's). */
typedef struct HostOps {
  PV *(*getattr)(L *L, Span at, PV *obj, const char *name);          /* NULL: no such attribute */
  int (*setattr)(L *L, Span at, PV *obj, const char *name, PV *val); /* 0: not a host object */
  PV *(*call)(L *L, Span at, PV *obj, Args *A);       /* an object with host state (mod) called */
  PV *(*binary)(L *L, Span at, int op, PV *a, PV *b);  /* OP_ADD ... OP_MATMUL, one operand a host value */
  PV *(*unary)(L *L, Span at, int op, PV *a);          /* OP_NEG, OP_POS, OP_INVERT */
  PV *(*compare)(L *L, Span at, int op, PV *a, PV *b);
  PV *(*index)(L *L, Span at, PV *obj, PV *idx);       /* obj[idx]; NULL: not subscriptable */
  int (*setitem)(L *L, Span at, PV *obj, PV *idx, PV *v); /* obj[idx] = v; 0: not supported */
  const char *(*suggest)(L *L, PV *ns, const char *name); /* the host name closest to a missing one
                                                             (nn.BatchNorm2D: "BatchNorm2d"), or NULL */
  int (*iterate)(L *L, Span at, PV *obj, PV ***out);   /* -1: not iterable */
  int (*truth)(L *L, Span at, PV *v);                  /* bool(v) */
  /* A value known only at run time (a staged tensor): an `if`, a conditional
   * expression or an assert on it runs both branches and selects with select(). */
  int (*runtime)(L *L, PV *v);
  int (*staging)(L *L);                                /* compiled code is being staged (forward, an entry) */
  void (*check_cond)(L *L, Span at, PV *c);            /* such a value as a condition: one element */
  PV *(*select)(L *L, Span at, PV *c, PV *a, PV *b);
  PV *(*inplace)(L *L, Span at, int op, PV *cur, PV *rhs); /* cur op= rhs updating cur; NULL: not in place */
  void (*name_value)(L *L, PV *v, const char *name);   /* v is bound to a Python name */
  PV *(*construct)(L *L, PV *cls, Args *A);            /* a host class called */
  PV *(*instance)(L *L, PV *cls);    /* a new object of a user class deriving from a host class, or NULL */
  int (*can_subclass)(const PV *base);
  /* super().__init__(...) / super().forward(...) of a user class deriving from the host
   * class `base` (class TransformerModel(nn.Transformer)), name "__init__" or "forward":
   * a callable that initialises self as base would / runs base's forward on self, or NULL */
  PV *(*base_init)(L *L, PV *base, PV *self, const char *name);
  int (*isinstance)(const PV *obj, const PV *cls);     /* -1: not the host's to say */
  int (*with_enter)(L *L, Span at, Node *item, PV *cm); /* `with cm:`: a token for with_exit */
  void (*with_exit)(L *L, int token);
  int (*decorate)(L *L, PV *dec, PV *fn);              /* a function decorator: 1 if taken (fn->deco) */
  int (*deco_enter)(L *L, PV *fn);                      /* calling a decorated fn: a token for deco_exit */
  void (*deco_exit)(L *L, int token);
  PV *(*math)(L *L, Span at, const char *fname, PV *x); /* math.fname(x), abs, len, int, float of a host value */
  const char *(*repr)(L *L, Span at, const PV *v);     /* (host values carry their kind's name in s) */
} HostOps;

/* The attribute that marks a module of ctc's own packages (pylib/), holding its dotted
 * name. Such a module stands for a real package of which ctc implements a part
 * (torchvision's models), so a name it lacks (torchvision.transforms, .datasets) is an
 * opaque value, as an import ctc does not model is: py_pylib_missing (eval.c) gives it,
 * NULL for any other value. */
#define PY_PYLIB_MARK "__ctc_pylib__"
PV *py_pylib_missing(L *L, Span at, PV *module, const char *name);
/* iter_items for a use whose result does not depend on the items' order (sorted, min, max,
 * sum, any, all, set): also a set's items, which other iterations refuse (their order is
 * CPython's hash order, random per run for strings). */
int iter_items_any_order(L *L, Span at, PV *v, PV ***out);
CTC_NORETURN void py_set_order_error(L *L, Span at);   /* a use of a set's (or list(set)'s) item order */

/* The context: one per compile, passed everywhere. */
struct L {
  const HostOps *host;   /* the host library */
  struct HostState *T;   /* the host's own state */
  Arena *a;
  Diag *d;
  const SrcFile *src;
  Env *globals;
  Env *builtins;
  jmp_buf *on_error;     /* where lower_error jumps */
  int depth;             /* call depth (bounded) */
  int64_t steps;         /* statements executed (bounded, no hangs) */
  /* call stack for notes */
  Span stack_span[64];
  const char *stack_name[64];
  Span stack_made[64];   /* a layer's frame: where the layer was created (file NULL: none) */
  Env *stack_env[64];    /* each frame's caller's scope (the host's check that no view of a tensor is bound) */
  int nstack;
  Env *env;              /* the current local scope */
  PV *retval;            /* value of the last `return` */
  int staged_depth;      /* eval.c: executing a branch (or continuation) of a staged `if` */
  PV *modules;            /* exec.c: the files imported from beside the compiled file, by path (a dict) */
  const char *script_args;  /* the compiled script's own command line (ctc --args '...'), for argparse */
  int set_any_order;     /* eval.c: the current iteration's result does not depend on order (sorted, min ...):
                            iterating a set is allowed (iter_items_any_order) */
  const char *pylib;     /* ctc's own Python packages (pylib/: torchvision), searched for an import after
                            the compiled file's folder; NULL: none */
  struct Cont *cont;     /* eval.c: the statements after the current block, while staging an
                            `if` on a run-time value (NULL outside such ifs and in calls) */
  struct TryFrame *tries;   /* exec.c: the enclosing `try` statements, innermost first */
  const char *exc_type;     /* a Python exception in flight (py_raise): its class name; NULL while a
                               ctc diagnostic unwinds (those are never caught) */
  const char *exc_msg;      /* its message (str(e)) */
  Span exc_at;              /* where it was raised */
  Span opaque_noted[16];    /* eval.c: the call sites of opaque functions on tensors already noted */
  int nopaque_noted;
};

/* The handlers named by builtins.def. */
#define B(id, name, ns, handler, arg) BuiltinFn handler;
#define CLASS(id, name, ns, construct) BuiltinFn construct;
#include "builtins.def"
#undef B
#undef CLASS

/* A method's kind (PV_FUNC.i): @staticmethod, @classmethod, @property. */
enum { FK_METHOD = 0, FK_STATIC = 1, FK_CLASSMETHOD = 2, FK_PROPERTY = 3 };

/* ---- errors ---- */
CTC_NORETURN void lower_error(L *L, Span at, const char *fmt, ...) CTC_PRINTF(3, 4);
/* Raise the Python exception `type` (KeyError, ImportError ...): an enclosing
 * `try` whose except clause matches it takes it (exec.c); otherwise it is
 * lower_error's diagnostic with the same message. */
CTC_NORETURN void py_raise(L *L, Span at, const char *type, const char *fmt, ...) CTC_PRINTF(4, 5);
int py_catchable(L *L, const char *type);   /* an enclosing try would catch `type` */

/* ---- values.c ---- */
PV *pv_new(L *L, PVKind k);
PV *pv_none(L *L);
PV *pv_bool(L *L, int b);
PV *pv_int(L *L, int64_t i);
PV *pv_complex(L *L, double re, double im);
PV *py_complex_binop(L *L, Span at, int op, PV *a, PV *b);   /* a or b complex, the other a number */
PV *pv_float(L *L, double f);
PV *pv_str(L *L, const char *s);
PV *pv_tuple(L *L, PV **items, int n);
PV *pv_list(L *L, PV **items, int n);
void pv_list_append(L *L, PV *list, PV *x);
PV *pv_dict(L *L);
PV *pv_dict_get(PV *d, PV *key);              /* NULL if absent; key known hashable (a str ...) */
PV *pv_dict_lookup(L *L, Span at, PV *d, PV *key); /* user key: TypeError if unhashable */
void pv_dict_set(L *L, Span at, PV *d, PV *key, PV *val);
PV *pv_dict_pop(L *L, Span at, PV *d, PV *key);   /* removes key, keeping the order of the others; NULL if absent */
PV *pv_native(L *L, BuiltinFn *call, int bi, const char *name, PV *self); /* a PV_BUILTIN */
PV *pv_ns(L *L, const char *name);
/* An opaque value (PV_OPAQUE) with expression text `expr`, made at `at`. */
PV *pv_opaque(L *L, Span at, const char *expr);
/* An opaque value standing for a value the compiled code does not get (a batch index,
 * a name a failed statement left unbound), described by `what` ("batch index 'i' (...)");
 * attributes, calls, operators and indexing of it give values with its description. */
PV *pv_opaque_described(L *L, Span at, const char *expr, const char *what);
PV *pv_opaque_from(L *L, Span at, const PV *src, const char *expr); /* derived from opaque src */
/* A use of an opaque value that needs its value: a located error naming the use and the origin. */
PV *pv_text_unknown(L *L, Span at, const PV *v, const char *how);  /* NULL: v's text is CPython's */
PV *pv_opaque_str(L *L, Span at, const PV *src, const char *how); /* str()/repr() of opaque src */
CTC_NORETURN void pv_opaque_error(L *L, Span at, const PV *v, const char *use);
int pv_is_host(const PV *v);                  /* a host value or constant */
const char *pv_kind_name(const PV *v);      /* "int", "Tensor", "Linear" ... for messages */
const char *pv_repr(L *L, Span at, const PV *v);   /* repr(v), as Python prints it ([[...]] for cycles) */
const char *pv_to_str(L *L, Span at, const PV *v); /* str(v) */
const char *pv_format(L *L, Span at, const PV *v, const char *spec); /* format(v, spec) */
int pv_equal(L *L, Span at, const PV *a, const PV *b); /* Python ==; RecursionError past depth 1000 */
int pv_is(const PV *a, const PV *b);                    /* Python `is` */
/* Python ints are unbounded; ctc keeps int64: exact when the result fits, otherwise a
 * located "integer too large for ctc". Float->int as int()/floor()/round() do it
 * (OverflowError for infinity, ValueError for NaN). */
int64_t ck_add(L *L, Span at, int64_t a, int64_t b);
int64_t ck_sub(L *L, Span at, int64_t a, int64_t b);
int64_t ck_mul(L *L, Span at, int64_t a, int64_t b);
int64_t ck_neg(L *L, Span at, int64_t a);
int64_t ck_pow(L *L, Span at, int64_t a, int64_t b);       /* b >= 0 */
int64_t ck_float_to_int(L *L, Span at, double f);         /* f already integral (or truncated) */
CTC_NORETURN void int_too_large(L *L, Span at);
/* Work done inside a builtin (items produced, bytes copied): counted against the
 * step limit, and the compile-time memory limit checked. */
void eval_charge(L *L, Span at, int64_t work);
/* A string being built (amortised growth in the arena, length bounded). */
typedef struct SB { char *p; size_t len, cap; } SB;
void sb_add(L *L, Span at, SB *b, const char *s, size_t n);
void sb_adds(L *L, Span at, SB *b, const char *s);
const char *sb_done(L *L, SB *b);
int pv_is_seq(const PV *v);                  /* tuple or list */
int pv_is_num(const PV *v);                  /* bool, int, float */
double pv_num(const PV *v);
int pv_class_is(const PV *cls, const PV *base); /* subclass test along the chain */
Env *env_new(L *L, Env *parent);
PV *env_get(Env *e, const char *name);       /* this scope only */
PV *env_lookup(Env *e, const char *name);    /* through parents */
void env_set(L *L, Env *e, const char *name, PV *v);

/* ---- eval.c ---- */
PV *eval_expr(L *L, Node *n);
/* Execute statements in env; returns EX_NORMAL, EX_RETURN (L->retval set), EX_BREAK, EX_CONTINUE. */
enum { EX_NORMAL, EX_RETURN, EX_BREAK, EX_CONTINUE };
int exec_block(L *L, Env *env, NodeVec *body);
/* A script that trains at module level: the index in a module's body of its first
 * `for` statement whose body calls a `backward()` method and a `step()` method
 * (`loss.backward()`, `optimizer.step()`) and takes its batch from a module-level
 * function (`xb, yb = get_batch('train')`), or -1. Module-level code runs up to it
 * and never runs it (nor what follows it): the host compiles it (torchlib/script.c).
 * Other loops run as any code does (one over a data loader ctc does not model runs
 * no iterations; a backward() outside a compiled function is an error). */
int py_module_training_loop(const NodeVec *body);
/* Call any callable with positional and keyword arguments. */
PV *call_value(L *L, Span at, PV *fn, PV **args, int nargs, const char **kwnames, PV **kwvals, int nkw);
PV *getattr_value(L *L, Span at, PV *obj, const char *name);   /* errors if missing */
PV *getattr_opt(L *L, Span at, PV *obj, const char *name);     /* NULL if missing */
void setattr_value(L *L, Span at, PV *obj, const char *name, PV *val);
int truthy(L *L, Span at, PV *v);
int pv_less(L *L, Span at, PV *a, PV *b);   /* Python a < b on compile-time values */
/* Iterate a compile-time iterable: returns a fresh array of items in *out. */
int iter_items(L *L, Span at, PV *v, PV ***out);
PV *py_obj_dict(L *L, PV *obj);                              /* obj.__dict__ */
void py_dict_store(L *L, Span at, PV *d, PV *k, PV *v);      /* d[k] = v (obj.__dict__ sets the attribute) */
/* An effect (backward, step, a state or in-place update, a list mutation) inside a
 * branch of an `if` on a run-time value, which runs both branches: a located error. */
void staged_effect_check(L *L, Span at, const char *what);

/* ---- builtins.c ---- */
/* Argument binding for native functions: positional or keyword by name.
 * spec: "x,dim=,keepdim=" (names; '=' marks optional). Fills out[] (NULL = absent). */
struct Args {
  Span at;
  PV **args; int nargs;
  const char **kwnames; PV **kwvals; int nkw;
  const char *fname;     /* for messages */
};
void bind_args(L *L, Args *A, const char *spec, PV **out);
int64_t arg_int(L *L, Span at, PV *v, const char *what);
double arg_num(L *L, Span at, PV *v, const char *what);
int arg_bool(L *L, Span at, PV *v, const char *what);
/* int or tuple/list of ints into out (n written); `count` = expected count (pairs for pools). */
int arg_ints(L *L, Span at, PV *v, int64_t *out, int max, const char *what);

#endif
