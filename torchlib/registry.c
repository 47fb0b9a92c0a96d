/* registry.c - the registration table (builtins.def, torch.def, layers.def,
 * optim.def) as one array indexed by BI_ id; lookup of a name in a namespace
 * (torch.X, F.X, nn.X, x.X on a tensor ...) by the rows' NS_ bits, and calls
 * through the rows' handlers. Nothing here depends on the order of the rows. */
#include <ctype.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "torch_int.h"

const BuiltinRow bi_rows[BI__COUNT] = {
#define B(id, nm, ns_, handler, a) [BI_##id] = {nm, ns_, BK_FN, handler, NULL, 0, a, NULL, NULL, NULL, NULL},
#define CLASS(id, nm, ns_, construct) [BI_##id] = {nm, ns_, BK_CLASS, construct, NULL, 0, 0, NULL, NULL, NULL, NULL},
#define LAYER(id, nm, construct, fwd, fn, options) \
  [BI_##id] = {nm, NS_NN, BK_LAYER, construct, fwd, NS_MODULE, BI_##fn, options, NULL, NULL, NULL},
#define OPTIM(id, nm, defaults, rule) \
  [BI_##id] = {nm, NS_OPTIM, BK_OPTIM, optim_new, NULL, NS_OPTIMIZER, 0, defaults, rule, NULL, NULL},
#define SCHED(id, nm, spec_, init, rule) \
  [BI_##id] = {nm, NS_LR_SCHEDULER, BK_SCHED, sched_new, NULL, NS_SCHEDULER, 0, spec_, NULL, init, rule},
#define BI_0 BI_NONE_
#include "torch.def"
#include "layers.def"
#include "optim.def"
#undef B
#undef CLASS
#undef LAYER
#undef OPTIM
#undef SCHED
};

const char *const bi_names[BI__COUNT] = {
#define B(id, nm, ns_, handler, a) [BI_##id] = nm,
#define CLASS(id, nm, ns_, construct) [BI_##id] = nm,
#define LAYER(id, nm, construct, fwd, fn, options) [BI_##id] = nm,
#define OPTIM(id, nm, defaults, rule) [BI_##id] = nm,
#define SCHED(id, nm, spec_, init, rule) [BI_##id] = nm,
#include "torch.def"
#include "layers.def"
#include "optim.def"
#undef B
#undef CLASS
#undef LAYER
#undef OPTIM
#undef SCHED
};

/* Every torch row is called through here: a complex tensor or dtype among its
 * operands goes to complex.c, which implements the rows that take one and refuses
 * the others by name (no handler sees a complex tensor as its real storage). */
static PV *raw_call(L *L, PV *fn, Args *A) { return bi_rows[fn->bi].call(L, fn, A); }
static PV *row_call(L *L, PV *fn, Args *A) {
  if (cx_operands(fn->self, A)) return cx_call(L, fn, A);
  if (ac_wants(L, fn->self, A, fn->bi, NULL)) return ac_call(L, fn->bi, fn, A, NULL, raw_call);   /* autocast.c */
  return raw_call(L, fn, A);
}

PV *pv_builtin(L *L, int bi, const char *name, PV *self) { return pv_native(L, row_call, bi, name, self); }

PV *bi_value(L *L, int bi, PV *self) {
  const BuiltinRow *r = &bi_rows[bi];
  if (r->kind == BK_FN) return pv_builtin(L, bi, r->name, self);
  PV *c = pv_new(L, PV_CLASS);
  c->bi = bi;
  c->s = r->name;
  return c;
}

PV *bi_lookup(L *L, unsigned ns, const char *name, PV *self) {
  for (int i = 0; i < BI__COUNT; i++)
    if ((bi_rows[i].ns & ns) && strcmp(bi_rows[i].name, name) == 0) {
      PV *v = bi_value(L, i, self);
      if (v->k == PV_BUILTIN) v->i = bi_rows[i].ns & ns; /* the spelling it was found as */
      return v;
    }
  return NULL;
}

int bi_kind_of(const PV *obj) {
  return obj && obj->k == PV_OBJ && obj->cls && obj->cls->bi ? bi_rows[obj->cls->bi].kind : 0;
}

/* ---- namespaces --------------------------------------------------------- */

static const struct { const char *path; unsigned ns; } namespaces[] = {
    {"torch", NS_TORCH},
    {"torch.nn", NS_NN},
    {"torch.nn.functional", NS_F},
    {"torch.nn.init", NS_INIT},
    {"torch.nn.utils", NS_UTILS},
    {"torch.optim", NS_OPTIM},
    {"torch.optim.lr_scheduler", NS_LR_SCHEDULER},
    {"torch.autograd", NS_AUTOGRAD},
    {"torch.autograd.functional", NS_AUTOGRAD_F},
    {"torch.autograd.forward_ad", NS_FORWARD_AD},
    {"torch.func", NS_FUNC},
    {"functorch", NS_FUNC},
    {"torch.sparse", NS_SPARSE},
    {"torch.nn.utils.stateless", NS_STATELESS},
};

static int ns_index(const char *path) {
  for (size_t i = 0; i < sizeof namespaces / sizeof namespaces[0]; i++)
    if (strcmp(namespaces[i].path, path) == 0) return (int)i;
  return -1;
}

/* Edit distance of a and b ignoring case (insertions, deletions, substitutions and swaps of
 * neighbours: "rleu" is 1 from "relu"); cap + 1 when beyond cap. */
static int name_distance(const char *a, const char *b, int cap) {
  int la = (int)strlen(a), lb = (int)strlen(b);
  if (la > 63 || lb > 63 || abs(la - lb) > cap) return cap + 1;
  int d[64][64];
  for (int i = 0; i <= la; i++) d[i][0] = i;
  for (int j = 0; j <= lb; j++) d[0][j] = j;
  for (int i = 1; i <= la; i++)
    for (int j = 1; j <= lb; j++) {
      const int ca = tolower((unsigned char)a[i - 1]), cb = tolower((unsigned char)b[j - 1]);
      int v = d[i - 1][j - 1] + (ca != cb);
      if (d[i - 1][j] + 1 < v) v = d[i - 1][j] + 1;
      if (d[i][j - 1] + 1 < v) v = d[i][j - 1] + 1;
      if (i > 1 && j > 1 && ca == tolower((unsigned char)b[j - 2]) && tolower((unsigned char)a[i - 2]) == cb &&
          d[i - 2][j - 2] + 1 < v)
        v = d[i - 2][j - 2] + 1;
      d[i][j] = v;
    }
  return d[la][lb] > cap ? cap + 1 : d[la][lb];
}

const char *ns_suggest(L *L, PV *ns, const char *name) {
  int k = ns && ns->k == PV_NS ? ns_index(ns->s) : -1;
  if (k < 0) return NULL;
  const int cap = (int)strlen(name) / 3 > 1 ? (int)strlen(name) / 3 : 1;
  const char *best = NULL;
  int bd = cap + 1;
  for (int i = 1; i < BI__COUNT; i++) {
    if (!bi_rows[i].name || !(bi_rows[i].ns & namespaces[k].ns)) continue;
    int d = name_distance(name, bi_rows[i].name, cap);
    if (d < bd || (d == bd && best && strcmp(bi_rows[i].name, best) < 0)) bd = d, best = bi_rows[i].name;
  }
  return best ? arena_printf(L->a, "%s.%s", ns->s, best) : NULL;
}

static int dtype_by_name(const char *n, DType *dt) {
  static const struct { const char *n; DType d; } t[] = {
      {"float32", DT_F32}, {"float", DT_F32}, {"float64", DT_F64}, {"double", DT_F64},
      {"int64", DT_I64},   {"long", DT_I64},  {"int32", DT_I32},   {"int", DT_I32},
      {"bool", DT_BOOL},   {"complex64", DT_COMPLEX64}, {"cfloat", DT_COMPLEX64}};
  for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
    if (strcmp(t[i].n, n) == 0) {
      *dt = t[i].d;
      return 1;
    }
  return 0;
}

/* torch.cuda.is_available(), device_count(), is_bf16_supported(): ctc compiles for the CPU */
static PV *cuda_none(L *L, PV *fn, Args *A) {
  (void)A;
  return strcmp(fn->s, "device_count") ? pv_bool(L, 0) : pv_int(L, 0);
}

PV *ns_getattr(L *L, Span at, PV *ns, const char *name) {
  const char *m = ns->s;
  DType dt;
  PV *dv = dist_ns_getattr(L, at, m, name);
  if (dv) return dv;
  /* torch.nn.parameter.Parameter, torch.nn.modules.module.Module, torch.nn.modules.conv.Conv2d:
   * the names of torch.nn, as PyTorch re-exports them */
  if (strcmp(m, "torch.nn") == 0 && (strcmp(name, "modules") == 0 || strcmp(name, "parameter") == 0))
    return pv_ns(L, arena_printf(L->a, "torch.nn.%s", name));
  if (strcmp(m, "torch.nn.parameter") == 0 || strncmp(m, "torch.nn.modules", 16) == 0) {
    if (strcmp(m, "torch.nn.modules") == 0 && name[0] >= 'a' && name[0] <= 'z')
      return pv_ns(L, arena_printf(L->a, "%s.%s", m, name));   /* torch.nn.modules.module, .conv ... */
    return bi_lookup(L, NS_NN, name, NULL);
  }
  if (strcmp(m, "torch") == 0 && (strcmp(name, "cuda") == 0 || strcmp(name, "accelerator") == 0 || strcmp(name, "mps") == 0))
    return pv_ns(L, arena_printf(L->a, "torch.%s", name));
  if (strcmp(m, "torch.backends") == 0 && (strcmp(name, "mps") == 0 || strcmp(name, "cuda") == 0))
    return pv_ns(L, arena_printf(L->a, "torch.backends.%s", name));
  if (strcmp(m, "torch") == 0 && (strcmp(name, "device") == 0 || strcmp(name, "save") == 0 || strcmp(name, "load") == 0))
    return pv_opaque(L, at, arena_printf(L->a, "torch.%s", name)); /* a device; files are not read or written at compile time */
  if ((strcmp(m, "torch.cuda") == 0 || strcmp(m, "torch.accelerator") == 0 || strcmp(m, "torch.mps") == 0 ||
       strcmp(m, "torch.backends.mps") == 0 || strcmp(m, "torch.backends.cuda") == 0) &&
      (strcmp(name, "is_available") == 0 || strcmp(name, "device_count") == 0 ||
                                       strcmp(name, "is_bf16_supported") == 0))
    return pv_native(L, cuda_none, 0, name, NULL);
  /* torch.autocast's other spellings (autocast.c): torch.amp, torch.cpu.amp, torch.cuda.amp */
  if ((strcmp(m, "torch") == 0 || strcmp(m, "torch.cpu") == 0 || strcmp(m, "torch.cuda") == 0) && strcmp(name, "amp") == 0)
    return pv_ns(L, arena_printf(L->a, "%s.amp", m));
  if (strcmp(m, "torch") == 0 && strcmp(name, "cpu") == 0) return pv_ns(L, "torch.cpu");
  if ((strcmp(m, "torch.amp") == 0 || strcmp(m, "torch.cpu.amp") == 0 || strcmp(m, "torch.cuda.amp") == 0) &&
      strcmp(name, "autocast") == 0)
    return pv_builtin(L, BI_T_AUTOCAST, "autocast", pv_ns(L, m));
  if ((strcmp(m, "torch.cuda.amp") == 0 || strcmp(m, "torch.amp") == 0 || strcmp(m, "torch.cpu.amp") == 0) &&
      strcmp(name, "GradScaler") == 0)
    return pv_builtin(L, BI_T_GRADSCALER, "GradScaler", pv_ns(L, m));   /* autocast.c */
  if (strcmp(m, "torch") == 0 && strcmp(name, "bfloat16") == 0) return pv_dtype(L, DT_BF16_MARK);
  if (strcmp(m, "torch") == 0 && (strcmp(name, "float16") == 0 || strcmp(name, "half") == 0))
    return pv_dtype(L, DT_F16_MARK);
  if (strcmp(m, "torch") == 0) {
    if (dtype_by_name(name, &dt)) return pv_dtype(L, dt);
    if (strcmp(name, "Tensor") == 0) return bi_value(L, BI_T_TENSOR_CLASS, NULL);
    static const struct { const char *name; int bi; } typed[] = {
        {"FloatTensor", BI_T_FLOATTENSOR}, {"DoubleTensor", BI_T_DOUBLETENSOR}, {"LongTensor", BI_T_LONGTENSOR},
        {"IntTensor", BI_T_INTTENSOR}, {"BoolTensor", BI_T_BOOLTENSOR}};
    for (size_t i = 0; i < sizeof typed / sizeof typed[0]; i++)
      if (strcmp(name, typed[i].name) == 0) return bi_value(L, typed[i].bi, NULL);
  }
  if (strcmp(m, "torch") == 0 && (strcmp(name, "utils") == 0 || strcmp(name, "distributed") == 0 ||
                                  strcmp(name, "multiprocessing") == 0 || strcmp(name, "backends") == 0))
    return pv_ns(L, arena_printf(L->a, "torch.%s", name)); /* torch.utils.data.DataLoader ...: opaque below */
  if (strcmp(m, "torch.nn.utils") == 0 && strcmp(name, "clip_grad") == 0) return pv_ns(L, "torch.nn.utils");
  if (strcmp(m, "copy") == 0 && strcmp(name, "deepcopy") == 0) return bi_value(L, BI_CP_DEEPCOPY, NULL);
  int k = ns_index(m);
  if (k >= 0) {
    const char *sub = arena_printf(L->a, "%s.%s", m, name);
    if (ns_index(sub) >= 0) return pv_ns(L, sub);
    return bi_lookup(L, namespaces[k].ns, name, NULL);
  }
  /* An import ctc knows nothing about (torchvision, numpy, sys, ...): an opaque
   * module, so files that import it still compile as long as compiled code
   * does not use it. */
  return pv_opaque(L, at, arena_printf(L->a, "%s%s%s", m, m[0] ? "." : "", name));
}

/* A name found twice in one namespace would make a row unreachable. */
void torch_tables_check(void) {
  for (int i = PY_BI__COUNT; i < BI__COUNT; i++) {
    if (!bi_rows[i].name || !bi_rows[i].call) BUG("builtin row %d has no name or handler", i);
    for (int j = i + 1; j < BI__COUNT; j++)
      if ((bi_rows[i].ns & bi_rows[j].ns) && strcmp(bi_rows[i].name, bi_rows[j].name) == 0)
        BUG("builtin '%s' registered twice in one namespace", bi_rows[i].name);
  }
}

/* ---- calls --------------------------------------------------------------- */

PV *class_construct(L *L, PV *cls, Args *A) {
  if (cx_operands(NULL, A)) cx_refuse(L, A->at, arena_printf(L->a, "%s(...)", cls->s));
  PV *o = bi_rows[cls->bi].call(L, cls, A);
  if (o && o->k == PV_OBJ && o->mod && !o->mod->made.file) o->mod->made = A->at;   /* notes of errors in its forward */
  return o;
}

PV *layer_call(L *L, PV *obj, Args *A) {
  BuiltinFn *f = bi_rows[obj->cls->bi].forward;
  if (!f) lower_error(L, A->at, "calling nn.%s is not supported by ctc yet", obj->cls->s);
  if (cx_operands(NULL, A)) cx_refuse(L, A->at, arena_printf(L->a, "nn.%s", obj->cls->s));
  if (ac_wants(L, NULL, A, obj->cls->bi, obj)) return ac_call(L, obj->cls->bi, NULL, A, obj, f);   /* autocast.c */
  return f(L, obj, A);
}

PV *spec_value(L *L, const char *d) {
  if (!strcmp(d, "N")) return pv_none(L);
  if (!strcmp(d, "F") || !strcmp(d, "T")) return pv_bool(L, d[0] == 'T');
  if (d[0] == '\'') {
    const char *e = strchr(d + 1, '\'');
    return pv_str(L, arena_strndup(L->a, d + 1, e ? (size_t)(e - d - 1) : strlen(d + 1)));
  }
  if (d[0] == '(') {
    PV *it[2] = {pv_float(L, strtod(d + 1, NULL)), pv_float(L, strtod(strchr(d, ';') + 1, NULL))};
    return pv_tuple(L, it, 2);
  }
  if (!strpbrk(d, ".e")) return pv_int(L, strtoll(d, NULL, 10));
  return pv_float(L, strtod(d, NULL));
}
