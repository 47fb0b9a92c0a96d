/* values.c - compile-time Python values (PV) and scopes (Env). */
#include <math.h>
#include <string.h>
#include "lower_int.h"

PV *pv_new(L *L, PVKind k) {
  PV *v = arena_alloc(L->a, sizeof *v);
  v->k = k;
  return v;
}
PV *pv_none(L *L) { return pv_new(L, PV_NONE); }
PV *pv_bool(L *L, int b) {
  PV *v = pv_new(L, PV_BOOL);
  v->i = b != 0;
  return v;
}
PV *pv_int(L *L, int64_t i) {
  PV *v = pv_new(L, PV_INT);
  v->i = i;
  return v;
}
PV *pv_float(L *L, double f) {
  PV *v = pv_new(L, PV_FLOAT);
  v->f = f;
  return v;
}
PV *pv_str(L *L, const char *s) {
  PV *v = pv_new(L, PV_STR);
  v->s = arena_strdup(L->a, s);
  return v;
}
static PV *pv_seq(L *L, PVKind k, PV **items, int n) {
  PV *v = pv_new(L, k);
  v->cap = n < 4 ? 4 : n;
  v->items = arena_alloc(L->a, sizeof(PV *) * (size_t)v->cap);
  if (n) memcpy(v->items, items, sizeof(PV *) * (size_t)n);
  v->n = n;
  return v;
}
PV *pv_tuple(L *L, PV **items, int n) { return pv_seq(L, PV_TUPLE, items, n); }
PV *pv_list(L *L, PV **items, int n) { return pv_seq(L, PV_LIST, items, n); }
void pv_list_append(L *L, PV *list, PV *x) {
  if (list->n == list->cap) {
    int nc = list->cap ? list->cap * 2 : 4;
    PV **ni = arena_alloc(L->a, sizeof(PV *) * (size_t)nc);
    if (list->n) memcpy(ni, list->items, sizeof(PV *) * (size_t)list->n);
    list->items = ni;
    list->cap = nc;
  }
  list->items[list->n++] = x;
}
PV *pv_dict(L *L) { return pv_new(L, PV_DICT); }
PV *pv_dict_get(PV *d, PV *key) {
  for (int i = 0; i < d->n; i++)
    if (pv_equal(d->keys[i], key)) return d->items[i];
  return NULL;
}
void pv_dict_set(L *L, PV *d, PV *key, PV *val) {
  for (int i = 0; i < d->n; i++)
    if (pv_equal(d->keys[i], key)) {
      d->items[i] = val;
      return;
    }
  if (d->n == d->cap) {
    int nc = d->cap ? d->cap * 2 : 4;
    PV **ni = arena_alloc(L->a, sizeof(PV *) * (size_t)nc);
    PV **nk = arena_alloc(L->a, sizeof(PV *) * (size_t)nc);
    if (d->n) {
      memcpy(ni, d->items, sizeof(PV *) * (size_t)d->n);
      memcpy(nk, d->keys, sizeof(PV *) * (size_t)d->n);
    }
    d->items = ni;
    d->keys = nk;
    d->cap = nc;
  }
  d->keys[d->n] = key;
  d->items[d->n] = val;
  d->n++;
}
PV *pv_tensor(L *L, Tensor *t) {
  PV *v = pv_new(L, PV_TENSOR);
  v->t = t;
  return v;
}
PV *pv_builtin(L *L, int bi, const char *name, PV *self) {
  PV *v = pv_new(L, PV_BUILTIN);
  v->bi = bi;
  v->s = name;
  v->self = self;
  return v;
}
PV *pv_ns(L *L, const char *name) {
  PV *v = pv_new(L, PV_NS);
  v->s = arena_strdup(L->a, name);
  return v;
}
PV *pv_dtype(L *L, DType dt) {
  PV *v = pv_new(L, PV_DTYPE);
  v->dt = dt;
  return v;
}

const char *pv_kind_name(const PV *v) {
  switch (v->k) {
  case PV_NONE: return "None";
  case PV_BOOL: return "bool";
  case PV_INT: return "int";
  case PV_FLOAT: return "float";
  case PV_STR: return "str";
  case PV_TUPLE: return "tuple";
  case PV_LIST: return "list";
  case PV_DICT: return "dict";
  case PV_SLICE: return "slice";
  case PV_ELLIPSIS: return "ellipsis";
  case PV_FUNC: return "function";
  case PV_CLASS: return "class";
  case PV_OBJ: return v->cls && v->cls->s ? v->cls->s : "object";
  case PV_BOUND: return "method";
  case PV_BUILTIN: return "builtin function";
  case PV_NS: return "module";
  case PV_TENSOR: return "Tensor";
  case PV_DTYPE: return "torch.dtype";
  }
  return "?";
}

const char *pv_repr(L *L, const PV *v) {
  switch (v->k) {
  case PV_NONE: return "None";
  case PV_BOOL: return v->i ? "True" : "False";
  case PV_INT: return arena_printf(L->a, "%lld", (long long)v->i);
  case PV_FLOAT: {
    if (isinf(v->f)) return v->f > 0 ? "inf" : "-inf";
    const char *s = arena_printf(L->a, "%.17g", v->f);
    return strpbrk(s, ".en") ? s : arena_printf(L->a, "%s.0", s);
  }
  case PV_STR: return v->s;
  case PV_TUPLE:
  case PV_LIST: {
    const char *s = v->k == PV_TUPLE ? "(" : "[";
    for (int i = 0; i < v->n; i++) s = arena_printf(L->a, "%s%s%s", s, i ? ", " : "", pv_repr(L, v->items[i]));
    if (v->k == PV_TUPLE && v->n == 1) s = arena_printf(L->a, "%s,", s);
    return arena_printf(L->a, "%s%s", s, v->k == PV_TUPLE ? ")" : "]");
  }
  case PV_TENSOR: return arena_printf(L->a, "Tensor(%s)", shape_str(L, &v->t->type));
  case PV_DTYPE: return arena_printf(L->a, "torch.%s", ir_dtype_name(v->dt));
  case PV_FUNC:
  case PV_CLASS:
  case PV_NS:
  case PV_BUILTIN: return arena_printf(L->a, "<%s %s>", pv_kind_name(v), v->s ? v->s : "?");
  default: return arena_printf(L->a, "<%s>", pv_kind_name(v));
  }
}

int pv_is_seq(const PV *v) { return v->k == PV_TUPLE || v->k == PV_LIST; }
int pv_is_num(const PV *v) { return v->k == PV_BOOL || v->k == PV_INT || v->k == PV_FLOAT; }
double pv_num(const PV *v) { return v->k == PV_FLOAT ? v->f : (double)v->i; }

int pv_equal(const PV *a, const PV *b) {
  if (a == b) return 1;
  if (pv_is_num(a) && pv_is_num(b)) {
    if (a->k != PV_FLOAT && b->k != PV_FLOAT) return a->i == b->i;
    return pv_num(a) == pv_num(b);
  }
  if (a->k != b->k) return 0;
  switch (a->k) {
  case PV_NONE:
  case PV_ELLIPSIS: return 1;
  case PV_STR: return strcmp(a->s, b->s) == 0;
  case PV_TUPLE:
  case PV_LIST:
    if (a->n != b->n) return 0;
    for (int i = 0; i < a->n; i++)
      if (!pv_equal(a->items[i], b->items[i])) return 0;
    return 1;
  case PV_DTYPE: return a->dt == b->dt;
  case PV_BUILTIN: return a->bi == b->bi && a->self == b->self;
  case PV_NS: return strcmp(a->s, b->s) == 0;
  default: return 0;
  }
}

int pv_class_is(const PV *cls, const PV *base) {
  for (const PV *c = cls; c; c = c->cls) {
    if (c == base) return 1;
    if (c->bi && base->bi && c->bi == base->bi) return 1;
  }
  return 0;
}

int pv_is_module(const PV *v) { return v->k == PV_OBJ && v->mod != NULL; }

Env *env_new(L *L, Env *parent) {
  Env *e = arena_alloc(L->a, sizeof *e);
  e->parent = parent;
  return e;
}
PV *env_get(Env *e, const char *name) {
  for (int i = e->names.len - 1; i >= 0; i--)
    if (strcmp(e->names.data[i], name) == 0) return e->vals.data[i];
  return NULL;
}
PV *env_lookup(Env *e, const char *name) {
  for (; e; e = e->parent) {
    PV *v = env_get(e, name);
    if (v) return v;
  }
  return NULL;
}
void env_set(L *L, Env *e, const char *name, PV *v) {
  for (int i = 0; i < e->names.len; i++)
    if (strcmp(e->names.data[i], name) == 0) {
      e->vals.data[i] = v;
      return;
    }
  vec_push(L->a, &e->names, arena_strdup(L->a, name));
  vec_push(L->a, &e->vals, v);
}
