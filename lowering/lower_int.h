/* lower_int.h - internals shared by the files of lowering/.
 *
 *   values.c    PV: the compile-time Python values, equality, printing
 *   eval.c      the evaluator: statements and expressions over PVs
 *   registry.c  the registration tables (builtins.def, torch.def, layers.def,
 *               optim.def): name lookup by namespace, calls through the rows
 *   builtins.c  handlers of builtins.def: Python builtins, math, value and nn.Module methods
 *   layers.c    nn layers: constructors (parameters, state_dict order) and forwards
 *   torchlib.c  torch.* / F.* / Tensor methods, nn.init, grad mode and stop-gradient
 *   tensor.c    tensor operations: shape inference and IR emission
 *   losses.c    loss functions and modules, lowered to primitives
 *   training.c  optimizers and their update rules, backward(), autograd.grad,
 *               staging of entries
 *   sched.c     LR schedulers: their rules, construction, step() and entries
 *   functional.c torch.autograd.functional, forward_ad and torch.func on ad_reverse/ad_forward
 *   lowering.c  the entry: run the module, pick the model, stage entries */
#ifndef CTC_LOWER_INT_H
#define CTC_LOWER_INT_H

#include <setjmp.h>
#include "lowering.h"

/* The registration table: every native function and builtin class the
 * evaluator knows is one row, in builtins.def (Python), torch.def (torch,
 * Tensor methods, F, nn.init, autograd ...), layers.def (nn classes) and
 * optim.def (optimizers, LR schedulers). BI_<ID> names a row; nothing depends
 * on the order of rows (no code compares BI_ ids except for equality). */
enum {
  BI_NONE_,
#define B(id, name, ns, handler, arg) BI_##id,
#define CLASS(id, name, ns, construct) BI_##id,
#define LAYER(id, name, construct, forward, fn, options) BI_##id,
#define OPTIM(id, name, defaults, rule) BI_##id,
#define SCHED(id, name, spec, init, rule) BI_##id,
#include "../python/builtins.def"
#include "../torchlib/torch.def"
#include "../torchlib/layers.def"
#include "../torchlib/optim.def"
#undef B
#undef CLASS
#undef LAYER
#undef OPTIM
#undef SCHED
  BI__COUNT
};

/* Namespaces a row is found in (BuiltinRow.ns). */
enum {
  NS_BUILTINS = 1u << 0,     /* Python builtins (range, len ...) */
  NS_MATH = 1u << 1,         /* math.* */
  NS_DATACLASSES = 1u << 2,  /* dataclasses.* */
  NS_LIST = 1u << 3,         /* methods of a list */
  NS_DICT = 1u << 4,         /* methods of a dict */
  NS_STR = 1u << 5,          /* methods of a str */
  NS_TORCH = 1u << 6,        /* torch.* */
  NS_TENSOR = 1u << 7,       /* Tensor methods (x.view ...) */
  NS_NN = 1u << 8,           /* torch.nn.* classes */
  NS_F = 1u << 9,            /* torch.nn.functional.* */
  NS_INIT = 1u << 10,        /* torch.nn.init.* */
  NS_UTILS = 1u << 11,       /* torch.nn.utils.* */
  NS_OPTIM = 1u << 12,       /* torch.optim.* */
  NS_LR_SCHEDULER = 1u << 13, /* torch.optim.lr_scheduler.* */
  NS_AUTOGRAD = 1u << 14,    /* torch.autograd.* */
  NS_AUTOGRAD_F = 1u << 15,  /* torch.autograd.functional.* */
  NS_FORWARD_AD = 1u << 16,  /* torch.autograd.forward_ad.* */
  NS_FUNC = 1u << 17,        /* torch.func.* (and functorch.*) */
  NS_MODULE = 1u << 18,      /* methods of every nn.Module object */
  NS_OPTIMIZER = 1u << 19,   /* methods of an optimizer object */
  NS_SCHEDULER = 1u << 20,   /* methods of an LR scheduler object */
};

typedef struct PV PV;
typedef struct L L;
typedef struct Args Args;
typedef struct OptStep OptStep;
/* A native function: fn is the PV_BUILTIN called (fn->bi its row, fn->self the bound
 * receiver, or NULL), or for a class row the class being constructed, or for a
 * layer's forward the module object called. */
typedef PV *BuiltinFn(L *L, PV *fn, Args *A);
typedef void OptRule(L *L, Span at, OptStep *s);
typedef double SchedInit(L *L, Span at, PV *sched, PV **a);
typedef struct SchedStep SchedStep;
typedef PV *SchedRule(L *L, Span at, SchedStep *st);
enum { BK_FN = 1, BK_CLASS, BK_LAYER, BK_OPTIM, BK_SCHED };
typedef struct BuiltinRow {
  const char *name;
  unsigned ns;           /* NS_* bits: where the name is found */
  int kind;              /* BK_* */
  BuiltinFn *call;       /* BK_FN: the function; classes: the constructor */
  BuiltinFn *forward;    /* BK_LAYER: calling an instance */
  unsigned methods;      /* classes: the namespace of their instances' builtin methods */
  int arg;               /* B: the handler's small argument; LAYER: the functional row it calls */
  const char *spec;      /* LAYER: constructor options; OPTIM: defaults; SCHED: constructor arguments */
  OptRule *opt_rule;     /* BK_OPTIM: the update of one parameter */
  SchedInit *sched_init; /* BK_SCHED: constructor checks, initial learning rate */
  SchedRule *sched_rule; /* BK_SCHED: the learning rate after n steps */
} BuiltinRow;
extern const BuiltinRow bi_rows[BI__COUNT];
extern const char *const bi_names[BI__COUNT];
/* The row named `name` in any namespace of `ns` (as a PV_BUILTIN bound to self, or
 * a PV_CLASS), or NULL. */
PV *bi_lookup(L *L, unsigned ns, const char *name, PV *self);
PV *bi_value(L *L, int bi, PV *self);          /* row bi as a value */
int bi_kind_of(const PV *obj);                 /* BK_* of an object's builtin class, 0 if none */

typedef struct Env Env;

typedef enum PVKind {
  PV_NONE, PV_BOOL, PV_INT, PV_FLOAT, PV_STR,
  PV_TUPLE,     /* immutable: items/n */
  PV_LIST,      /* mutable: items/n/cap */
  PV_DICT,      /* ordered: keys/items/n */
  PV_SLICE,     /* items[0..2]: start, stop, step (PV_NONE when absent) */
  PV_ELLIPSIS,
  PV_FUNC,      /* a def or lambda: node + closure env */
  PV_CLASS,     /* a user class (node != NULL) or a builtin class (bi != 0) */
  PV_OBJ,       /* an instance: of a user class or a builtin layer */
  PV_BOUND,     /* method bound to self: fn + self */
  PV_BUILTIN,   /* native function bi, optionally bound to self */
  PV_NS,        /* a namespace: torch, torch.nn, F, math, an unknown import */
  PV_TENSOR,    /* see Tensor below */
  PV_DTYPE,     /* torch.float32 ... */
} PVKind;

/* A parameter or buffer created at compile time (nn.Linear's weight ...). */
typedef struct Slot {
  Type type;
  int is_buffer;
  int init;              /* PINIT_* */
  double init_a, init_b;
  double *data;          /* PINIT_DATA values */
  int index;             /* Program.params index once the state_dict is built, else -1 */
  int frozen;            /* requires_grad = False: optimizers skip it */
  Span loc;
} Slot;

/* A tensor during evaluation: an IR value of the function being staged, a
 * parameter slot, or a compile-time constant (host data, in __init__). */
typedef struct Tensor {
  Type type;
  ValId v;               /* >= 0: IR value in L->fn */
  Slot *slot;            /* a parameter / buffer */
  double *data;          /* compile-time values (row-major), or NULL */
  int requires_grad;     /* nn.Parameter(...), requires_grad_() */
  int is_data;           /* x.data inside compiled code: a detached alias (no in-place) */
  int is_view;           /* a view (x.view, x[i], x.t(), x.detach() ...) of a staged tensor */
  int viewed;            /* some view of this tensor was taken */
} Tensor;

typedef struct ObjModule ObjModule;

struct PV {
  PVKind k;
  int64_t i;             /* INT, BOOL; BUILTIN: the NS_ bits its row was found under (0: made directly) */
  double f;              /* FLOAT */
  const char *s;         /* STR (NUL-terminated), names of FUNC/CLASS/NS/BUILTIN */
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
  int bi;                /* BUILTIN / builtin CLASS id (BI_*), 0 otherwise */
  ObjModule *mod;        /* OBJ that is an nn.Module */
  Env *attrs;            /* OBJ attributes */
  Tensor *t;             /* TENSOR */
  DType dt;              /* DTYPE */
  int grad_mode;         /* FUNC decorated with @torch.no_grad() etc.: NG_* + 1; 0 if none */
  int *hidx; int hcap;   /* DICT: hash index over keys (slot = item index + 1), once n grows */
  int owned;             /* STR made by `name += ...`, held by that name only and not read
                            since: the next `name += ...` may append in place (n = length,
                            cap = buffer size), which keeps a loop of `+=` linear */
};

/* Registration order of an nn.Module's state, as PyTorch keeps it. */
typedef enum { REG_PARAM, REG_BUFFER, REG_CHILD } RegKind;
typedef struct Reg { RegKind kind; const char *name; PV *val; } Reg;
struct ObjModule {
  Vec(Reg) regs;         /* in registration order */
  int training;          /* self.training */
  const char *path;      /* state_dict prefix ("layer1.0"), for naming values; NULL for the root */
};

/* A scope: names to values, ordered, with a parent (closure chain). */
struct Env {
  Vec(const char *) names;
  Vec(PV *) vals;
  Env *parent;
  int *hidx; int hcap;   /* hash index over names (slot = index + 1), once the scope grows */
};

/* The lowering context: one per compile, passed everywhere. */
struct L {
  Arena *a;
  Diag *d;
  const SrcFile *src;
  Program *prog;
  Func *fn;              /* function being staged, NULL at compile time */
  Env *globals;
  Env *builtins;
  jmp_buf *on_error;     /* where lower_error jumps */
  int depth;             /* call depth (bounded) */
  int64_t steps;         /* statements executed (bounded, no hangs) */
  /* call stack for notes */
  Span stack_span[64];
  const char *stack_name[64];
  int nstack;
  int grad_mode;         /* NG_*: torch.no_grad() / inference_mode() in force (grad_mode_set) */
  Env *env;              /* the current local scope */
  /* staging a training function (training.c) */
  Vec(ValId) pending;    /* losses passed to .backward() since the last zero_grad/step */
  Vec(ValId) pending_seed; /* their gradient arguments (-1: ones) */
  ValId *grad_acc;       /* per Program param: its accumulated .grad in L->fn, or -1 (training.c) */
  unsigned char *grad_flags; /* per Program param: GF_* (training.c) */
  int grad_n;            /* entries of grad_acc and grad_flags */
  int zeroed;            /* zero_grad() was called in this function (-1: only a step so far) */
  Span unzeroed_step;    /* that step() */
  int stepped;           /* optimizer.step() was called */
  ValId *param_cur;      /* per Program param: its current value in L->fn (after a step), or -1 */
  Vec(ValId) dual_primal;  /* forward_ad.make_dual: the dual tensors of the current dual_level */
  Vec(ValId) dual_tangent; /* and their tangents */
  int dual_depth;        /* open `with dual_level():` statements (at most 1) */
  PV *retval;            /* value of the last `return` */
  int staged_depth;      /* eval.c: executing a branch (or continuation) of a staged `if` */
  struct Cont *cont;     /* eval.c: the statements after the current block, while staging an
                            `if` on a run-time tensor (NULL outside such ifs and in calls) */
};

/* The handlers named by the tables (defined in the files of lowering/). */
#define B(id, name, ns, handler, arg) BuiltinFn handler;
#define CLASS(id, name, ns, construct) BuiltinFn construct;
#define LAYER(id, name, construct, forward, fn, options) BuiltinFn construct, forward;
#define OPTIM(id, name, defaults, rule) OptRule rule;
#define SCHED(id, name, spec, init, rule) SchedInit init; SchedRule rule;
#include "../python/builtins.def"
#include "../torchlib/torch.def"
#include "../torchlib/layers.def"
#include "../torchlib/optim.def"
#undef B
#undef CLASS
#undef LAYER
#undef OPTIM
#undef SCHED

/* One optimizer update (OptRule): the parameter p (its current value), its
 * gradient g (maximize already applied), its parameter group (a dict of options:
 * opt_hp/opt_hpb read them), the learning rate LR (a number or an f32 tensor),
 * the optimizer's step count before this step (f32 tensor), and the prefix of its
 * state tensors ("optimizer.fc1.weight"). The rule writes p and its state with
 * state_update. */
struct OptStep {
  PV *opt, *group, *LR, *p, *g, *tcount;
  const char *oname, *pre;
  Type t;
};
double opt_hp(L *L, Span at, PV *group, const char *name, double dflt);
int opt_hpb(L *L, Span at, PV *group, const char *name);
PV *opt_l2(L *L, Span at, OptStep *s);            /* g + weight_decay * p (L2 penalty) */
PV *opt_mom(L *L, Span at, PV *opt, const char *oname, double dflt); /* momentum/beta1, OneCycleLR may cycle it */
/* A default in the tables' spelling (N, F, T, 'str', (a;b), numbers) as a value. */
PV *spec_value(L *L, const char *d);

/* ---- errors ---- */
CTC_NORETURN void lower_error(L *L, Span at, const char *fmt, ...) CTC_PRINTF(3, 4);

/* ---- values.c ---- */
PV *pv_new(L *L, PVKind k);
PV *pv_none(L *L);
PV *pv_bool(L *L, int b);
PV *pv_int(L *L, int64_t i);
PV *pv_float(L *L, double f);
PV *pv_str(L *L, const char *s);
PV *pv_tuple(L *L, PV **items, int n);
PV *pv_list(L *L, PV **items, int n);
void pv_list_append(L *L, PV *list, PV *x);
PV *pv_dict(L *L);
PV *pv_dict_get(PV *d, PV *key);              /* NULL if absent; key known hashable (a str ...) */
PV *pv_dict_lookup(L *L, Span at, PV *d, PV *key); /* user key: TypeError if unhashable */
void pv_dict_set(L *L, Span at, PV *d, PV *key, PV *val);
PV *pv_tensor(L *L, Tensor *t);
PV *pv_builtin(L *L, int bi, const char *name, PV *self);
PV *pv_ns(L *L, const char *name);
PV *pv_dtype(L *L, DType dt);
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
int pv_is_module(const PV *v);               /* an nn.Module instance */
Env *env_new(L *L, Env *parent);
PV *env_get(Env *e, const char *name);       /* this scope only */
PV *env_lookup(Env *e, const char *name);    /* through parents */
void env_set(L *L, Env *e, const char *name, PV *v);

/* ---- eval.c ---- */
PV *eval_expr(L *L, Node *n);
/* Execute statements in env; returns EX_NORMAL, EX_RETURN (L->retval set), EX_BREAK, EX_CONTINUE. */
enum { EX_NORMAL, EX_RETURN, EX_BREAK, EX_CONTINUE };
int exec_block(L *L, Env *env, NodeVec *body);
/* Call any callable with positional and keyword arguments. */
PV *call_value(L *L, Span at, PV *fn, PV **args, int nargs, const char **kwnames, PV **kwvals, int nkw);
PV *getattr_value(L *L, Span at, PV *obj, const char *name);   /* errors if missing */
PV *getattr_opt(L *L, Span at, PV *obj, const char *name);     /* NULL if missing */
void setattr_value(L *L, Span at, PV *obj, const char *name, PV *val);
int truthy(L *L, Span at, PV *v);
int pv_less(L *L, Span at, PV *a, PV *b);   /* Python a < b on compile-time values */
/* Iterate a compile-time iterable: returns a fresh array of items in *out. */
int iter_items(L *L, Span at, PV *v, PV ***out);
/* An effect (backward, step, a state or in-place update, a list mutation) inside a
 * branch of an `if` on a run-time tensor, which runs both branches: a located error. */
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
/* registry.c: the table, namespaces and the calls through it */
void builtins_install(L *L, Env *builtins);
/* Attribute of a namespace (torch.xxx, nn.xxx, F.xxx, math.xxx); NULL if none. */
PV *ns_getattr(L *L, Span at, PV *ns, const char *name);
PV *call_builtin(L *L, PV *fn, Args *A);          /* bi_rows[fn->bi].call */
BuiltinFn optim_new, sched_new;                  /* training.c: the constructors of OPTIM and SCHED rows */
PV *class_construct(L *L, PV *cls, Args *A);      /* a builtin class called: its constructor */
PV *layer_call(L *L, PV *obj, Args *A);           /* a builtin layer object called: its forward */
/* Tensor methods and attributes (x.view, x.shape) */
PV *tensor_getattr(L *L, Span at, PV *t, const char *name);
void tensor_setattr(L *L, Span at, PV *t, const char *name, PV *val); /* p.requires_grad = False */
/* Grad mode (torchlib.c): sets L->grad_mode and the staged function's, which
 * ir_emit stamps on new instructions (Inst.nograd). A call of torch.no_grad(),
 * enable_grad(), inference_mode() or set_grad_enabled() returns a BI_T_GRAD_MODE
 * value: i = the mode it enters, n = the mode to restore on exit or -1. */
void grad_mode_set(L *L, int mode);
PV *t_detach(L *L, Span at, PV *x);               /* x.detach(): a DETACH view */

/* ---- layers.c ---- */
PV *module_new(L *L, PV *cls);                   /* a fresh nn.Module object */
void module_setattr(L *L, Span at, PV *obj, const char *name, PV *val);
void module_tree_check(L *L, Span at, PV *root);  /* depth <= 1000, paths charged */
Slot *slot_new(L *L, Span at, Type t, int init, double a, double b);
PV *param_tensor(L *L, Slot *s);

/* One LR scheduler step (SchedRule, sched.c): the learning rate after step n. */
struct SchedStep {
  PV *s;             /* the scheduler */
  PV *n;             /* its last_epoch after this step (f32 scalar tensor) */
  PV *lr;            /* the learning rate before this step (f32 scalar tensor) */
  PV *mask;          /* NULL, or a bool tensor: the step happens where it holds (state writes) */
  PV *reset;         /* NULL, or a bool tensor: where it holds this is PyTorch's step(0) */
  PV *metrics;       /* ReduceLROnPlateau.step(metrics) */
  int closed;        /* 1: PyTorch's closed form (NULL if none), 0: its recursive get_lr() from lr */
  const char *sname, *oname; /* prefixes of the scheduler's and the optimizer's state tensors */
};
/* training.c: the global name bound to v, or dflt */
const char *global_name(L *L, PV *v, const char *dflt);

/* ---- losses.c / training.c ---- */
/* After the entries are staged: an FK_SCHED entry for every scheduler whose
 * step() no entry called (PyTorch users step them once per epoch). */
void stage_scheduler_entries(L *L);
PV *tensor_backward(L *L, PV *t, Args *A);         /* loss.backward() */
/* optimizer/model.zero_grad(): clears the gradients of params (a list; NULL: all) */
void grads_zero(L *L, Span at, PV *params);
PV *param_grad(L *L, Span at, PV *t);              /* p.grad: the accumulated gradient, or None */
/* State tensors of a training entry (optimizer buffers, the RNG offset): found by
 * name or appended to the parameter table (is_state); state_update records the
 * value written back when the entry finishes (later uses in the entry see it). */
PV *state_tensor(L *L, Span at, const char *name, const Type *t, double init);
void state_update(L *L, Span at, PV *t, PV *v);
/* A parameter was appended to Program.params: extend L->param_cur to match. */
void param_table_grew(L *L);
/* lowering.c: the IR inputs of the entry being staged (L->fn), one per parameter of
 * def from `first` on, typed by --input NAME=... or the example tuple; parameters
 * with defaults and no shape end the list. entry: NULL for forward (messages). */
PV **entry_inputs(L *L, Node *def, int first, const char *entry, const LowerOptions *opt, PV *examples, int *n);
/* Stage a module-level function as an entry (train_step, ...). */
void stage_function(L *L, const char *name, PV *fn, const LowerOptions *opt, PV *examples);

/* ---- tensor.c ---- */
ValId t_val(L *L, Span at, PV *tensor);          /* the IR value of a tensor in L->fn */
PV *t_wrap(L *L, ValId v);                       /* IR value -> PV tensor */
Type t_type(PV *tensor);
void need_tensor_arg(L *L, Span at, PV *x, const char *op);   /* error unless x is a tensor */
PV *t_binary(L *L, Span at, int op, PV *a, PV *b);   /* frontend OpKind: OP_ADD ... */
PV *t_compare(L *L, Span at, int op, PV *a, PV *b);
PV *t_unary(L *L, Span at, Op op, PV *x);
PV *t_matmul(L *L, Span at, PV *a, PV *b);
PV *t_reshape(L *L, Span at, PV *x, const int64_t *dims, int n); /* one -1 allowed */
PV *t_permute(L *L, Span at, PV *x, const int64_t *perm, int n);
PV *t_transpose(L *L, Span at, PV *x, int64_t d0, int64_t d1);
PV *t_reduce(L *L, Span at, Op op, PV *x, const int64_t *dims, int ndims, int keepdim, int mean);
PV *t_softmax(L *L, Span at, PV *x, int64_t dim, int log);
PV *t_cast(L *L, Span at, PV *x, DType dt);
PV *t_slice(L *L, Span at, PV *x, int axis, int64_t start, int64_t stop, int64_t step);
PV *t_index(L *L, Span at, PV *x, PV *index);    /* x[...] */
PV *t_concat(L *L, Span at, PV **xs, int n, int64_t dim);
PV *t_conv2d(L *L, Span at, PV *x, PV *w, PV *b, const int64_t stride[2], const int64_t pad[2],
             const int64_t dil[2]);
PV *t_pool2d(L *L, Span at, Op op, PV *x, const int64_t k[2], const int64_t s[2],
             const int64_t p[2], const int64_t dil[2], int ceil_mode, int count_include_pad);
PV *t_linear(L *L, Span at, PV *x, PV *w, PV *b);
PV *t_layer_norm(L *L, Span at, PV *x, int nnorm, PV *w, PV *b, double eps);
PV *t_embedding(L *L, Span at, PV *w, PV *idx, PV *padding_idx); /* padding_idx: NULL or None for none */
PV *t_gelu(L *L, Span at, PV *x, int tanh_approx);
PV *t_adaptive_avg_pool2d(L *L, Span at, PV *x, PV *size);   /* torchlib.c */
PV *t_dropout(L *L, Span at, PV *x, double p, int training);
PV *t_where(L *L, Span at, PV *c, PV *a, PV *b);
PV *t_minmax(L *L, Span at, Op op, PV *a, PV *b);       /* IR_MAX / IR_MIN: NaN from either side */
PV *t_clamp(L *L, Span at, PV *x, PV *lo, PV *hi);      /* lo, hi: NULL, None, numbers or tensors */
/* In-place update (x.add_(...), inplace=True, x += ...): x takes r's value, so every
 * Python name bound to the same tensor sees it, as in PyTorch. Returns x. */
PV *t_inplace(L *L, Span at, PV *x, PV *r);
/* v (a tensor, or a list/tuple of them) is a view of base: PyTorch shares their
 * storage, ctc's IR has value semantics, so in-place updates of either one are
 * refused from here on (t_inplace) rather than silently not propagated. Returns v. */
PV *t_mark_view(L *L, PV *base, PV *v);
PV *t_scalar_like(L *L, Span at, double v, DType dt);
int64_t t_norm_dim(L *L, Span at, int64_t d, int ndim);  /* negative dims, range check */
/* A compile-time tensor factory (torch.zeros(...) in __init__, or a constant in forward). */
PV *t_const_tensor(L *L, Span at, Type t, double fill);
/* issue 15's ops (tensor.c): kind 'f' floor division, 't' truncation, '%'
 * remainder, 'm' fmod; logical kind '!' '&' '|' '^' */
PV *t_divmod(L *L, Span at, int kind, PV *a, PV *b);
PV *t_bitwise(L *L, Span at, Op op, PV *a, PV *b);     /* IR_BIT_AND / OR / XOR */
PV *t_float_binary(L *L, Span at, Op op, PV *a, PV *b); /* IR_ATAN2: integers promote to float32 */
PV *t_invert(L *L, Span at, PV *x);
PV *t_logical(L *L, Span at, int kind, PV *a, PV *b);
PV *t_rounding(L *L, Span at, Op op, PV *x);            /* IR_SIGN / ROUND / TRUNC / FLOOR: ints kept */
PV *t_round(L *L, Span at, PV *x, int64_t decimals);
PV *t_cumsum(L *L, Span at, PV *x, int64_t dim, PV *dtype);
PV *t_argmax(L *L, Span at, PV *x, PV *dim, int keepdim, int is_min);   /* dim NULL/None: flattened */
PV *t_max_dim(L *L, Span at, PV *x, PV *dim, int keepdim, int is_min); /* (values, indices) */
PV *t_amin(L *L, Span at, PV *x, const int64_t *dims, int ndims, int keepdim);
PV *t_gather(L *L, Span at, PV *x, int64_t dim, PV *index);
PV *t_scatter_add(L *L, Span at, PV *x, int64_t dim, PV *index, PV *src);
PV *t_index_select(L *L, Span at, PV *x, int64_t dim, PV *index);
PV *t_take_along_dim(L *L, Span at, PV *x, PV *index, PV *dim);
PV *t_tri(L *L, Span at, PV *x, int64_t k, int upper);
PV *t_repeat(L *L, Span at, PV *x, const int64_t *reps, int n);
PV *t_expand_to(L *L, Span at, PV *x, Type r);
PV *t_lerp(L *L, Span at, PV *a, PV *b, PV *w);
PV *t_addc(L *L, Span at, PV *x, PV *t1, PV *t2, PV *value, int div);
PV *t_logsumexp(L *L, Span at, PV *x, const int64_t *dims, int nd, int keepdim);
PV *t_var(L *L, Span at, PV *x, const int64_t *dims, int nd, double correction, int keepdim, int is_std);
PV *t_norm(L *L, Span at, PV *x, double p, const int64_t *dims, int nd, int keepdim);
PV *t_flip(L *L, Span at, PV *x, const int64_t *dims, int nd);
PV *t_roll(L *L, Span at, PV *x, const int64_t *shifts, int ns, const int64_t *dims, int nd);
PV *t_repeat_interleave(L *L, Span at, PV *x, int64_t r, PV *dim);
PV *t_take(L *L, Span at, PV *x, PV *index);
PV *t_index_add(L *L, Span at, PV *x, int64_t dim, PV *index, PV *src, PV *alpha);
PV *t_isclass(L *L, Span at, int kind, PV *x);   /* 'n' isnan, 'i' isinf, '+' isposinf, '-' isneginf, 'f' isfinite */
PV *t_nan_to_num(L *L, Span at, PV *x, PV *nan, PV *posinf, PV *neginf);
PV *t_anyall(L *L, Span at, PV *x, const int64_t *dims, int nd, int keepdim, int all);
PV *t_fmaxmin(L *L, Span at, PV *a, PV *b, int is_min);
PV *t_logaddexp(L *L, Span at, PV *a, PV *b, int base2);
PV *t_xlogy(L *L, Span at, PV *x, PV *y);
const char *shape_str(L *L, const Type *t);       /* "[64, 10]" */

#endif
