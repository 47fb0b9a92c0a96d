/* torch_int.h - internals shared by the files of torchlib/, the torch library
 * that hosts the Python interpreter (python/py.h): it registers the torch
 * namespaces from its tables and implements the host objects.
 *
 *   registry.c  the registration tables (torch.def, layers.def, optim.def): name
 *               lookup by namespace, calls through the rows
 *   host.c      the host-object protocol (HostOps) for the interpreter
 *   torchlib.c  torch.* / F.* / Tensor methods, nn.init, grad mode and stop-gradient
 *   tensor.c    tensor operations: shape inference and IR emission
 *   consteval.c tensor arithmetic on compile-time values outside compiled code
 *   complex.c   complex64 tensors (torch.polar, view_as_complex ...): float32
 *               storage with a trailing 2; every row, operator, index or attribute
 *               given one comes here, implemented or refused by name
 *   layers.c    nn layers: constructors (parameters, state_dict order) and forwards
 *   module.c    nn.Module methods (parameters(), state_dict(), train() ...)
 *   losses.c    loss functions and modules, lowered to primitives
 *   training.c  optimizers and their update rules, backward(), autograd.grad,
 *               staging of entries
 *   sched.c     LR schedulers: their rules, construction, step() and entries
 *   optim.c     the update rules of Adamax, NAdam, RAdam, ASGD, Rprop, SparseAdam;
 *               LBFGS and optimizer.step(closure)
 *   functional.c torch.autograd.functional, forward_ad and torch.func on ad_reverse/ad_forward
 *   func_state.c torch.func's functional_call and stack_module_state (a module's state swapped, stacked)
 *   lowering.c  the entry (lowering.h): run the module, pick the model, stage entries
 *   loops.c     the training loops people write: a `for ... in loader:` body as an entry */
#ifndef CTC_TORCH_INT_H
#define CTC_TORCH_INT_H

#include "../python/py.h"
#include "../lowering/lowering.h"

/* The registration tables: every torch function and class is one row, in
 * torch.def (torch, Tensor methods, F, nn.init, autograd ...), layers.def (nn
 * classes) and optim.def (optimizers, LR schedulers); Python's own are in
 * python/builtins.def. BI_<ID> names a row; nothing depends on the order of rows
 * (no code compares BI_ ids except for equality). */
enum {
  TBI__FIRST = PY_BI__COUNT - 1, /* torch's rows are numbered after Python's */
#define B(id, name, ns, handler, arg) BI_##id,
#define CLASS(id, name, ns, construct) BI_##id,
#define LAYER(id, name, construct, forward, fn, options) BI_##id,
#define OPTIM(id, name, defaults, rule) BI_##id,
#define SCHED(id, name, spec, init, rule) BI_##id,
#include "torch.def"
#include "layers.def"
#include "optim.def"
#undef B
#undef CLASS
#undef LAYER
#undef OPTIM
#undef SCHED
  BI__COUNT
};

/* Namespaces a row is found in (BuiltinRow.ns; Python's are in py.h). */
enum {
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
  NS_SPARSE = 1u << 21,      /* torch.sparse.* */
  NS_STATELESS = 1u << 22,   /* torch.nn.utils.stateless.* (functional_call in PyTorch 1.13) */
  NS_SCALER = 1u << 23,      /* methods of a torch.cuda.amp.GradScaler(enabled=False) (autocast.c) */
};

typedef struct OptStep OptStep;
typedef void OptRule(L *L, Span at, OptStep *s);
typedef double SchedInit(L *L, Span at, PV *sched, PV **a);
typedef struct SchedStep SchedStep;
typedef PV *SchedRule(L *L, Span at, SchedStep *st);
enum { BK_LAYER = BK_CLASS + 1, BK_OPTIM, BK_SCHED }; /* after py.h's BK_FN, BK_CLASS */
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

#define PV_TENSOR PV_HOST   /* torchlib's names for the host kinds */
#define PV_DTYPE PV_HOSTC

/* A parameter or buffer created at compile time (nn.Linear's weight ...). */
typedef struct Slot {
  Type type;
  int is_buffer;
  int not_persistent;    /* register_buffer(persistent=False): not in the state_dict */
  int init;              /* PINIT_* */
  double init_a, init_b;
  int init_trunc;        /* PINIT_NORMAL redrawn outside [init_lo, init_hi] (nn.init.trunc_normal_) */
  double init_lo, init_hi;
  double *data;          /* PINIT_DATA values */
  int index;             /* Program.params index once the state_dict is built, else -1 */
  int frozen;            /* requires_grad = False: optimizers skip it */
  int64_t zero_row1;     /* nn.Embedding(padding_idx): 1 + the row _init zeroes after the fill, as
                            PyTorch's reset_parameters does (0: none); an nn.init.* call clears it */
  int sparse_grad;       /* weight of nn.Embedding(sparse=True) / F.embedding(sparse=True): PyTorch's
                            gradient is sparse (SparseAdam takes it; clip_grad_norm_ does not scale it) */
  int cplx;              /* a complex64 buffer: type is its float32 storage, shape + [2] (complex.c) */
  int low;               /* LOW_BF16 / LOW_F16: a float32 tensor holding bfloat16 / float16 numbers, after
                            model.bfloat16() / .half() (module.c) or an optimizer's state of such a parameter */
  Span loc;
} Slot;
void slot_affine(L *L, Span at, Slot *s, double m, double c, const char *what);   /* torchlib.c */
/* a value assigned into an index: a number, or a tensor that broadcasts to the indexing result r (consteval.c) */
void setitem_shape_check(L *L, Span at, const PV *v, Type r);

/* A tensor during evaluation: an IR value of the function being staged, a
 * parameter slot, or a compile-time constant (host data, in __init__). */
typedef struct HostValue {
  Type type;
  ValId v;               /* >= 0: IR value in L->fn */
  Slot *slot;            /* a parameter / buffer */
  double *data;          /* compile-time values (row-major), or NULL */
  int requires_grad;     /* nn.Parameter(...), requires_grad_() */
  int is_data;           /* x.data inside compiled code: a detached alias (no in-place) */
  int is_view;           /* a view (x.view, x[i], x.t(), x.detach() ...) of a staged tensor */
  int viewed;            /* some view of this tensor was taken */
  struct PV **views;     /* those views (t_mark_view), for t_inplace's check that none is still bound */
  int nviews, cviews;
  int dec_mark, dec_layer; /* decode.c, staging `decode`: attention scores (their state) of a layer */
  int cplx;              /* complex64 (complex.c): type is the float32 storage, shape + [2] */
  int low;               /* LOW_BF16 / LOW_F16: a bfloat16 / float16 value in float32 storage (autocast.c):
                            its elements are bf16 / f16 numbers; 0: float32 */
} Tensor;

/* Registration order of an nn.Module's state, as PyTorch keeps it. */
typedef enum { REG_PARAM, REG_BUFFER, REG_CHILD } RegKind;
typedef struct Reg { RegKind kind; const char *name; PV *val; } Reg;
typedef struct HostObj ObjModule;
struct HostObj {
  Vec(Reg) regs;         /* in registration order */
  int training;          /* self.training */
  const char *path;      /* state_dict prefix ("layer1.0"), for naming values; NULL for the root */
  Span made;             /* a builtin layer: its constructor call (nn.Linear(...)), for notes */
  int ddp;               /* wrapped by DistributedDataParallel (distributed.c): `.module` is itself */
};
/* distributed.c: torch.nn.parallel (DistributedDataParallel), or NULL for other names */
PV *dist_ns_getattr(L *L, Span at, const char *m, const char *name);

/* an attribute cached while an entry is staged (host.c h_setattr), restored after it */
struct AttrUndo { PV *obj; const char *name; PV *old; };
void attr_cache_restore(L *L);

/* The torch library's part of the context (L->T). */
struct HostState {
  Program *prog;
  int f64;               /* --dtype f64 (LowerOptions.float_dtype): compile-time tensor arithmetic
                            keeps doubles instead of rounding f32 results (consteval.c, t_cast) */
  Func *fn;              /* function being staged, NULL at compile time */
  int grad_mode;         /* NG_*: torch.no_grad() / inference_mode() in force (grad_mode_set) */
  int autocast;          /* inside an enabled torch.autocast region: its LOW_ dtype (autocast.c), else 0 */
  int autocast_cuda;     /* that region is torch.autocast('cuda'): PyTorch's CUDA op lists (autocast.c) */
  int cuda;              /* compiling for --target cuda (LowerOptions.cuda_target) */
  PV *step_skip;         /* a bool 0-d tensor while GradScaler.step stages optimizer.step(): where it is
                            true, every state_update keeps the old value (the step is skipped) */
  /* staging a training function (training.c) */
  Vec(ValId) pending;    /* losses passed to .backward() since the last zero_grad/step */
  Vec(ValId) pending_seed; /* their gradient arguments (-1: ones) */
  ValId *grad_acc;       /* per Program param: its accumulated .grad in L->T->fn, or -1 (training.c) */
  unsigned char *grad_flags; /* per Program param: GF_* (training.c) */
  int grad_n;            /* entries of grad_acc and grad_flags */
  int zeroed;            /* zero_grad() was called in this function (-1: only a step so far) */
  Span unzeroed_step;    /* that step() */
  int stepped;           /* optimizer.step() was called */
  ValId *param_cur;      /* per Program param: its current value in L->T->fn (after a step), or -1 */
  ValId *low_read;       /* per Program param stored as bf16 / f16 (Param.low): its float value in low_read_fn,
                            the one cast of its storage there, or -1 (tensor.c's t_val) */
  int low_read_n;
  const Func *low_read_fn;
  Vec(ValId) dual_primal;  /* forward_ad.make_dual: the dual tensors of the current dual_level */
  Vec(ValId) dual_tangent; /* and their tangents */
  int dual_depth;        /* open `with dual_level():` statements (at most 1) */
  unsigned init_draws;   /* compile-time initialisations drawn so far (nn.init.orthogonal_'s seeds) */
  Vec(struct AttrUndo) attr_undo; /* self.x = tensor caches made while staging this entry */
  int forward_rng;       /* staging forward: random draws (randn_like ...) may add the rng.offset state */
  /* loops.c: the training loops people write */
  struct LoopState *loops; /* the functions whose loop body is an entry */
  struct Script *script;   /* script.c: a module-level training loop, or NULL */
  PV *model;             /* the model chosen (their `model` parameter when no call passes one) */
  PV *backward_loss;     /* the last tensor .backward() was called on in the entry being staged */
  const char *loop_entry; /* staging a loop body as this entry: .item() is an error */
  struct Decode *dec;    /* decode.c: probing forward, or staging `decode` (NULL otherwise) */
  int nstacks;           /* func_state.c: stack_module_state calls at module level so far (their
                            tensors are "ensemble.<name>", then "ensemble1.<name>" ...) */
};

/* ---- decode.c: the KV-cache entry `decode` derived from forward ----
 * The hooks run while L->T->dec is set, from the op handlers named; each returns
 * NULL where the op is an ordinary one. */
typedef struct Decode Decode;
void dec_probe_begin(L *L);                 /* before forward is staged: record its aranges and masks */
Decode *dec_probe_end(L *L);                /* after */
const char *dec_stage(L *L, Decode *d, PV *model, Span top);   /* last: NULL (staged or nothing to do) or why not */
PV *dec_iota(L *L, Span at, int64_t start, int64_t step, int64_t n, DType dt);   /* torch.arange */
PV *dec_matmul(L *L, Span at, PV *a, PV *b);                                     /* t_matmul */
PV *dec_masked_fill(L *L, Span at, PV *x, PV *mask, PV *value);                  /* Tensor.masked_fill */
PV *dec_softmax(L *L, Span at, PV *x, int64_t dim, int log);                     /* t_softmax */
PV *dec_binary(L *L, Span at, int op, PV *a, PV *b);                             /* t_binary */
PV *dec_attend(L *L, Span at, PV *q, PV *k, PV *v, double scale);                /* causal SDPA (nn_seq.c) */
void dec_check_read(L *L, Span at, const Tensor *t);                             /* t_val */
void dec_allow(L *L, int on);   /* autocast.c's rounding of attention scores keeps their mark (a bf16 model's) */
extern const HostOps torch_host;   /* host.c */
PV *layer_base_class(PV *cls);     /* host.c: the builtin layer a user class derives from, or NULL */

/* The handlers named by the tables. */
#define B(id, name, ns, handler, arg) BuiltinFn handler;
#define CLASS(id, name, ns, construct) BuiltinFn construct;
#define LAYER(id, name, construct, forward, fn, options) BuiltinFn construct, forward;
#define OPTIM(id, name, defaults, rule) OptRule rule;
#define SCHED(id, name, spec, init, rule) SchedInit init; SchedRule rule;
#include "torch.def"
#include "layers.def"
#include "optim.def"
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
PV *opt_state(L *L, Span at, OptStep *s, const char *name, double init); /* "<opt>.<param>.<name>", p's shape */
PV *sd_returned(L *L, PV *obj, PV *d);   /* sched.c: a scheduler's / GradScaler's state_dict() d, remembered */
int sd_is_own(PV *obj, PV *d);           /* ... so that load_state_dict(d) is a no-op (others are refused) */
PV *opt_mom(L *L, Span at, PV *opt, const char *oname, double dflt); /* momentum/beta1, OneCycleLR may cycle it */
PV *opt_as_dt(L *L, Span at, PV *x, DType dt);    /* a tensor cast to dt (numbers stay numbers) */
/* optim.c: optimizer.step(closure): the closure called with gradients enabled;
 * LBFGS's step, which re-evaluates it */
PV *optim_call_closure(L *L, Span at, PV *closure);
PV *lbfgs_step(L *L, PV *opt, PV *closure, Span at);
/* A default in the tables' spelling (N, F, T, 'str', (a;b), numbers) as a value. */
PV *spec_value(L *L, const char *d);

/* ---- values of the host (tensor.c, registry.c) ---- */
PV *pv_tensor(L *L, Tensor *t);
PV *pv_dtype(L *L, DType dt);
PV *pv_builtin(L *L, int bi, const char *name, PV *self);  /* torch's row bi as a PV_BUILTIN */
int pv_is_module(const PV *v);               /* an nn.Module instance */

/* registry.c: the table, namespaces and the calls through it */
void torch_tables_check(void);                    /* no name twice in one namespace */
/* Attribute of a namespace (torch.xxx, nn.xxx, F.xxx, math.xxx); NULL if none. */
PV *ns_getattr(L *L, Span at, PV *ns, const char *name);
const char *ns_suggest(L *L, PV *ns, const char *name);   /* HostOps.suggest: the closest registered name */
BuiltinFn optim_new, sched_new;                  /* training.c: the constructors of OPTIM and SCHED rows */
PV *class_construct(L *L, PV *cls, Args *A);      /* a builtin class called: its constructor */
PV *layer_call(L *L, PV *obj, Args *A);           /* a builtin layer object called: its forward */
/* Tensor methods and attributes (x.view, x.shape) */
PV *tensor_getattr(L *L, Span at, PV *t, const char *name);
PV *param_opaque(L *L, Span at, const char *expr);  /* a parameter's value read outside compiled code */
void tensor_setattr(L *L, Span at, PV *t, const char *name, PV *val); /* p.requires_grad = False */
/* Grad mode (torchlib.c): sets L->T->grad_mode and the staged function's, which
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
PV *module_clone(L *L, Span at, PV *m);           /* nn_seq.c: copy.deepcopy of a module tree (new slots) */

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
  int gi;            /* the parameter group whose learning rate this is (state advances at gi 0) */
  PV *epoch;         /* scheduler.step(epoch): the epoch given (n is it), else NULL */
};
/* sched.c: the state tensor holding parameter group gi's learning rate under an LR scheduler */
PV *sched_lr_state(L *L, Span at, PV *opt, int gi);
/* training.c: the global name bound to v, or dflt */
const char *global_name(L *L, PV *v, const char *dflt);

/* ---- losses.c / training.c ---- */
/* After the entries are staged: an FK_SCHED entry for every scheduler whose
 * step() no entry called (PyTorch users step them once per epoch). */
void stage_scheduler_entries(L *L);
PV *tensor_backward(L *L, PV *t, Args *A);         /* loss.backward() */
/* optimizer/model.zero_grad(): clears the gradients of params (a list; NULL: all) */
/* module.c: model.parameters() as a list (each parameter once). */
PV *module_parameters(L *L, Span at, PV *obj);
int module_container(const PV *obj);
void module_container_set(L *L, Span at, PV *obj, PV *key, PV *v);
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
/* Stage a module-level function as an entry (train_step, ...). loop: 0, or the
 * body of a training loop (1: its output is the loss backward() was called on)
 * or of an evaluation loop (2: it returns its sums, named outnames, FK_EVAL). */
void stage_function(L *L, const char *name, PV *fn, const LowerOptions *opt, PV *examples, int loop,
                    const char *const *outnames);
/* lowering.c: does the tree call backward(), step() or a differentiation API? */
int mentions_training(const Node *n);
/* loops.c: the functions whose `for ... in loader:` body is an entry (after the
 * module ran, before the model is chosen: a driver's model and optimizer are
 * published as module-level names); loop_stage stages one (0: def is none). */
typedef struct LoopState LoopState;
void loops_prepare(L *L, Node *module, const LowerOptions *opt);
int loop_is_entry(L *L, const Node *def);
int loop_stage(L *L, const Node *def, const char *name, const LowerOptions *opt, PV *examples, int named);
const Type *loop_forward_input(L *L, const LowerOptions *opt);
void loops_finish(L *L);
/* script.c: a script that trains at module level (`for iter in range(max_iters):`
 * at index `at` of the module's body, which never ran): script_prepare (after the
 * module's code before it ran, before the model is chosen) reads the loop, its
 * get_batch, estimate_loss and vocabulary, and gives forward its input;
 * script_stage (after the other entries) stages the loop body as `train_step` and
 * estimate_loss as `estimate_loss`, and sets Program.script. */
void script_prepare(L *L, Node *module, int at, const LowerOptions *opt);
void script_stage(L *L, const LowerOptions *opt);

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
PV *t_pool2d(L *L, Span at, Op op, PV *x, const int64_t k[2], const int64_t s[2],
             const int64_t p[2], const int64_t dil[2], int ceil_mode, int count_include_pad);
PV *t_linear(L *L, Span at, PV *x, PV *w, PV *b);
PV *t_layer_norm(L *L, Span at, PV *x, int nnorm, PV *w, PV *b, double eps);
PV *t_embedding(L *L, Span at, PV *w, PV *idx, PV *padding_idx); /* padding_idx: NULL or None for none */
PV *t_gelu(L *L, Span at, PV *x, int tanh_approx);
PV *t_adaptive_avg_pool2d(L *L, Span at, PV *x, PV *size);   /* torchlib.c */
PV *t_dropout(L *L, Span at, PV *x, double p, int training);
PV *dropout_nd(L *L, Span at, int nsp, PV *x, double p, int training); /* F.dropout1d/2d/3d */
PV *t_feature_dropout(L *L, Span at, PV *x, double p, int training, int feature); /* Dropout2d: per channel */
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
/* idx (int64) unchanged, read through a gather from arange(bound): the generated code checks
 * that every value lies in [0, bound) (a class or target index out of range stops the entry) */
PV *t_checked_index(L *L, Span at, PV *idx, int64_t bound, const char *what);
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

/* ---- autocast.c: torch.autocast('cpu', dtype=torch.bfloat16 | torch.float16) on float32 storage ---- */
#define DT_BF16_MARK (DT_COUNT + 1)   /* torch.bfloat16: a PV_DTYPE's dt with no IR dtype */
#define DT_F16_MARK (DT_COUNT + 2)    /* torch.float16 / torch.half: a PV_DTYPE's dt with no IR dtype */
enum { LOW_BF16 = 1, LOW_F16 = 2 };   /* Tensor.low, HostState.autocast */
typedef PV *AcBinaryFn(L *L, Span at, int op, PV *a, PV *b);   /* host.c's f32 operators */
int ac_wants(L *L, const PV *self, const Args *A, int bi, const PV *mod);  /* row bi's call needs autocast.c */
/* row bi called under the autocast policy: call(L, fn, A), or for a layer (mod) call(L, mod, A) */
PV *ac_call(L *L, int bi, PV *fn, Args *A, PV *mod, BuiltinFn *call);
PV *ac_binary(L *L, Span at, int op, PV *a, PV *b, AcBinaryFn *f);
PV *ac_view_result(L *L, PV *x, PV *r);           /* x[...], x.T of a bf16/f16 x: marked */
PV *ac_round(L *L, Span at, PV *x, int low);      /* x rounded to LOW_BF16 / LOW_F16 and marked */
void ac_round_data(double *v, int64_t n, int low);  /* compile-time values rounded to LOW_BF16 / LOW_F16 */
void gs_finish(L *L, Span at, const char *fname);  /* a training function's end: no scaler left mid-step */
/* training.c: each accumulated gradient of opt's parameters replaced by map(L, at, g, ctx) (GradScaler.unscale_) */
typedef PV *GradMapFn(L *L, Span at, PV *g, void *ctx);
void opt_grads_map(L *L, Span at, PV *opt, GradMapFn *map, void *ctx);

/* ---- complex.c: complex64 tensors (Tensor.cplx), rows of their own and every
 * row, operator, index or attribute given a complex operand ---- */
#define DT_COMPLEX64 DT_COUNT   /* torch.complex64 / torch.cfloat: a PV_DTYPE's dt with no IR dtype */
int cx_is(const PV *v);                           /* a complex tensor */
int cx_operands(const PV *self, const Args *A);   /* a complex tensor or dtype among them (one level of lists) */
PV *cx_call(L *L, PV *fn, Args *A);               /* row fn called with complex operands: done, or refused */
CTC_NORETURN void cx_refuse(L *L, Span at, const char *what);
PV *cx_binary(L *L, Span at, int op, PV *a, PV *b);
PV *cx_unary(L *L, Span at, int op, PV *c);
PV *cx_index(L *L, Span at, PV *c, PV *key);
PV *cx_getattr(L *L, Span at, PV *c, const char *name);
PV *cx_math(L *L, Span at, const char *f, PV *c); /* abs(c), len(c) */

/* ---- consteval.c: arithmetic on compile-time values outside compiled code
 * (module level, __init__); each returns NULL (or 0 / -1) where it does not apply ---- */
int ct_applies(L *L, PV *a, PV *b);               /* not staging, a and b (if any) numbers or tensors with values */
PV *ct_elem2(L *L, Span at, Op op, PV *a, PV *b, DType dt, DType rdt);
PV *ct_unary(L *L, Span at, Op op, PV *x, DType dt);
PV *ct_where(L *L, Span at, PV *c, PV *a, PV *b, DType dt);
PV *ct_cast(L *L, Span at, PV *x, DType dt);
PV *ct_permute(L *L, Span at, PV *x, const int64_t *perm, Type out);
PV *ct_slice(L *L, Span at, PV *x, int axis, int64_t start, int64_t step, Type out);
PV *ct_concat(L *L, Span at, PV **xs, int n, int64_t dim, Type out);
PV *ct_reduce(L *L, Span at, Op op, PV *x, const int *red, int mean, Type out);
PV *ct_matmul(L *L, Span at, PV *a, PV *b);
int ct_setitem(L *L, Span at, PV *x, PV *idx, PV *v);   /* 1: done */
int ct_iterate(L *L, Span at, PV *x, PV ***out);        /* -1: not a compile-time tensor */
PV *ct_view(PV *x, PV *r);                              /* r a compile-time view of x: no slice assignment into either */
PV *ct_number(L *L, Span at, PV *x);                    /* x.item(), float(x) */
PV *ct_tolist(L *L, Span at, PV *x);


/* ---- torchlib/nn_ops.c: convolution, padding, resampling, normalization and activation
 * layers (nsp: spatial dims, 1 or 2; the conv attributes have nsp values) ---- */
PV *t_convnd(L *L, Span at, int nsp, PV *x, PV *w, PV *b, const int64_t *stride, const int64_t *pad,
             const int64_t *dil, int64_t groups);
PV *t_conv_transpose(L *L, Span at, int nsp, PV *x, PV *w, PV *b, const int64_t *stride, const int64_t *pad,
                     const int64_t *out_pad, const int64_t *dil, int64_t groups);
/* nn_3d.c: the volumetric convolutions as 2-D ones over stacked depth slices */
PV *t_conv3d(L *L, Span at, PV *x, PV *w, PV *b, const int64_t *stride, const int64_t *pad, const int64_t *dil,
             int64_t groups);
PV *t_conv_transpose3d(L *L, Span at, PV *x, PV *w, PV *b, const int64_t *stride, const int64_t *pad,
                       const int64_t *out_pad, const int64_t *dil, int64_t groups);
/* nn_ops.c: a convolution's padding= (ints, 'valid', or 'same': stride 1, the odd one at the end via F.pad) */
PV *nn_conv_padding(L *L, Span at, int nsp, PV *x, PV *w, PV *padv, const int64_t *stride, const int64_t *dil,
                    int64_t *pad);
PV *t_spread(L *L, Span at, PV *x, int axis, int64_t stride);   /* zeros between elements along axis */
int typed_tensor_class(int bi, DType *dt);   /* torch.FloatTensor ...: 1 and its dtype */
PV *t_index_by_tensor(L *L, Span at, PV *x, int axis, PV *idx, int64_t *dims, int *nd);   /* index_adv.c */
PV *t_index_by_tensors(L *L, Span at, PV *x, const int *ax, PV **idx, int k, int front, int64_t *bdims, int *bnd);
PV *t_adaptive_avg_matrix(L *L, Span at, int64_t o, int64_t n, DType dt);   /* torchlib.c: [o, n] bin means */
/* nn_compose.c */
PV *t_embedding_bag(L *L, Span at, PV *w, PV *idx, PV *offsets, int mode, PV *psw, int last_offset, PV *padding_idx);
/* losses_pair.c */
PV *t_cosine_similarity(L *L, Span at, PV *x1, PV *x2, int64_t dim, double eps);
PV *t_pairwise_distance(L *L, Span at, PV *x1, PV *x2, double p, double eps, int keepdim);
PV *t_pad(L *L, Span at, PV *x, const int64_t *pads, int npads, int mode, double value); /* 0 constant 1 reflect 2 replicate 3 circular */
PV *t_interpolate(L *L, Span at, PV *x, PV *size, PV *scale, const char *mode, PV *align, PV *recompute);
PV *t_pixel_shuffle(L *L, Span at, PV *x, int64_t factor, int unshuffle);
PV *t_batch_norm(L *L, Span at, PV *x, PV *rm, PV *rv, PV *w, PV *b, int training, double momentum, double eps,
                 PV *num_batches_tracked);   /* momentum < 0: None */
PV *t_instance_norm(L *L, Span at, PV *x, PV *w, PV *b, double eps);
PV *t_group_norm(L *L, Span at, PV *x, int64_t groups, PV *w, PV *b, double eps);
PV *t_softplus(L *L, Span at, PV *x, double beta, double threshold);
PV *t_elu(L *L, Span at, PV *x, double alpha, double scale, double input_scale);
PV *t_hardtanh(L *L, Span at, PV *x, double lo, double hi);
PV *t_hardsigmoid(L *L, Span at, PV *x);
PV *t_hardswish(L *L, Span at, PV *x);
PV *t_mish(L *L, Span at, PV *x);
PV *t_softsign(L *L, Span at, PV *x);
PV *t_tanhshrink(L *L, Span at, PV *x);
PV *t_hardshrink(L *L, Span at, PV *x, double lambd);
PV *t_softshrink(L *L, Span at, PV *x, double lambd);
PV *t_logsigmoid(L *L, Span at, PV *x);
PV *t_threshold(L *L, Span at, PV *x, double threshold, double value);
PV *t_glu(L *L, Span at, PV *x, int64_t dim);
PV *t_prelu(L *L, Span at, PV *x, PV *w);

PV *t_random(L *L, Span at, Type t, int normal);
void forward_rng_enable(L *L);   /* staging forward: random draws may use the rng.offset state */   /* rand / randn in a training function (rng.offset) */
/* n ints from an int or a sequence of n (stride=2, padding=(1, 0)); None: dflt each */
void nn_ints(L *L, Span at, PV *v, int n, int64_t dflt, int64_t *out, const char *what);
int nn_pad_mode(L *L, Span at, PV *mode);          /* 'constant' 0, 'reflect' 1, 'replicate' 2, 'circular' 3 */
/* torch.nn.functional's forms (the handlers of their registration rows) */
PV *nnf_conv1d(L *L, PV *fn, Args *A);
PV *nnf_conv2d(L *L, PV *fn, Args *A);
PV *nnf_conv_transpose1d(L *L, PV *fn, Args *A);
PV *nnf_conv_transpose2d(L *L, PV *fn, Args *A);
PV *nnf_pad(L *L, PV *fn, Args *A);
PV *nnf_interpolate(L *L, PV *fn, Args *A);
PV *nnf_upsample_nearest(L *L, PV *fn, Args *A);
PV *nnf_upsample_bilinear(L *L, PV *fn, Args *A);
PV *nnf_pixel_shuffle(L *L, PV *fn, Args *A);
PV *nnf_pixel_unshuffle(L *L, PV *fn, Args *A);
PV *nnf_batch_norm(L *L, PV *fn, Args *A);
PV *nnf_instance_norm(L *L, PV *fn, Args *A);
PV *nnf_group_norm(L *L, PV *fn, Args *A);
PV *nnf_softplus(L *L, PV *fn, Args *A);
PV *nnf_elu(L *L, PV *fn, Args *A);
PV *nnf_selu(L *L, PV *fn, Args *A);
PV *nnf_celu(L *L, PV *fn, Args *A);
PV *nnf_hardtanh(L *L, PV *fn, Args *A);
PV *nnf_relu6(L *L, PV *fn, Args *A);
PV *nnf_hardsigmoid(L *L, PV *fn, Args *A);
PV *nnf_hardswish(L *L, PV *fn, Args *A);
PV *nnf_mish(L *L, PV *fn, Args *A);
PV *nnf_softsign(L *L, PV *fn, Args *A);
PV *nnf_tanhshrink(L *L, PV *fn, Args *A);
PV *nnf_logsigmoid(L *L, PV *fn, Args *A);
PV *nnf_hardshrink(L *L, PV *fn, Args *A);
PV *nnf_softshrink(L *L, PV *fn, Args *A);
PV *nnf_threshold(L *L, PV *fn, Args *A);
PV *nnf_glu(L *L, PV *fn, Args *A);
PV *nnf_prelu(L *L, PV *fn, Args *A);
PV *nnf_softmin(L *L, PV *fn, Args *A);
PV *nnf_rand_like(L *L, PV *fn, Args *A);
PV *nnf_randn_like(L *L, PV *fn, Args *A);
/* the module forms' constructors and forwards (layers.def rows) */
PV *nn_conv_new(L *L, PV *cls, Args *A);        /* Conv1d, Conv2d, ConvTranspose1d, ConvTranspose2d */
PV *nn_conv_forward(L *L, PV *o, Args *A);
PV *nn_pad_new(L *L, PV *cls, Args *A);         /* ZeroPad2d, Constant/Reflection/ReplicationPad1d-3d */
PV *nn_pad_forward(L *L, PV *o, Args *A);
PV *nn_prelu_new(L *L, PV *cls, Args *A);
PV *nn_prelu_forward(L *L, PV *o, Args *A);
PV *nn_norm_new(L *L, PV *cls, Args *A);        /* BatchNorm1d/2d, InstanceNorm1d/2d */
PV *nn_norm_forward(L *L, PV *o, Args *A);
PV *nn_groupnorm_new(L *L, PV *cls, Args *A);
PV *nn_groupnorm_forward(L *L, PV *o, Args *A);

#endif
