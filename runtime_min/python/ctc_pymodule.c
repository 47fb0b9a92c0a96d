/* ctc_pymodule.c - `ctc build --python -o NAME`: a CPython extension module
 * around a generated model, generic over its descriptor (ctc_model_desc): the
 * same file serves every model; ctc compiles it with
 *   -DCTC_PY_MODULE=NAME      the module's name (PyInit_NAME)
 *   -DCTC_PY_DESC=net_desc    the generated model's descriptor
 * together with model.c and the runtime, into NAME<EXT_SUFFIX>.
 *
 *   import NAME
 *   m = NAME.Model("w.safetensors")   # or Model(): the model's own initialisation
 *   y = m.forward(x)                   # one method per entry, named after it
 *   loss = m.train_step(x, labels)     # updates the parameters in place
 *
 * Inputs are NumPy arrays (anything with the buffer protocol; other objects go
 * through numpy.asarray with the input's dtype). A C-contiguous, aligned array
 * of the input's dtype is read in place (its pointer goes to the entry); a
 * strided or misaligned one is copied first. A wrong dtype is a TypeError, a
 * wrong shape a ValueError, both naming the entry and the input. Outputs are new
 * arrays (numpy.empty) the entry writes into; one output is returned as it is,
 * several as a tuple, none as None. Entries with a batch chosen at run time take
 * it from the inputs' batch axis. The GIL is released while an entry runs; one
 * model runs one entry at a time (a second thread gets a RuntimeError). Only
 * Python's C API is used (NumPy is imported at run time, never compiled
 * against), and nothing of torch. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ctc_rt.h"

#if !defined(CTC_PY_MODULE) || !defined(CTC_PY_DESC)
#error "compile with -DCTC_PY_MODULE=NAME -DCTC_PY_DESC=PREFIX_desc (ctc build --python does)"
#endif
#define CTC_CAT2(a, b) a##b
#define CTC_CAT(a, b) CTC_CAT2(a, b)
#define CTC_STR2(a) #a
#define CTC_STR(a) CTC_STR2(a)
#define MODNAME CTC_STR(CTC_PY_MODULE)

extern const ctc_model_desc CTC_PY_DESC;
#define DESC (&CTC_PY_DESC)

/* Set once when the module is initialised, read-only afterwards. */
static PyObject *numpy_mod;   /* numpy */
static PyObject *ctc_exc;     /* NAME.Error (a RuntimeError) */
static PyObject *index_exc;   /* NAME.IndexError (NAME.Error and IndexError): an index out of range */

static const char *const np_names[CTC_DTYPE_COUNT] = {"float32", "float64", "int64", "int32", "bool", "uint8"};

/* ---- the model ---------------------------------------------------------------- */

typedef struct {
  PyObject_HEAD
  void *model;    /* DESC->model_size bytes: the generated <name>_t */
  void *arena;    /* DESC->arena_bytes, DESC->arena_align aligned */
  int busy;       /* an entry is running (the GIL is released meanwhile) */
  int fresh;      /* initialised by tp_new and not used yet (__init__ need not initialise again) */
} ModelObject;

static PyTypeObject *model_type;   /* created from model_spec at init */

/* Raises the Python exception for a runtime error code. */
static void raise_ctc(int code, const char *msg) {
  PyObject *exc = code == CTC_ERR_IO ? PyExc_OSError
                  : code == CTC_ERR_NOMEM ? PyExc_MemoryError
                  : code == CTC_ERR_MISSING || code == CTC_ERR_SHAPE || code == CTC_ERR_DTYPE || code == CTC_ERR_FORMAT
                      ? PyExc_ValueError
                      : ctc_exc;
  PyErr_SetString(exc, msg && *msg ? msg : ctc_strerror(code));
}

static void model_dealloc(ModelObject *self) {
  PyTypeObject *tp = Py_TYPE(self);
  free(self->arena);
  free(self->model);
  tp->tp_free((PyObject *)self);
  Py_DECREF(tp);
}

static PyObject *model_new(PyTypeObject *type, PyObject *args, PyObject *kw) {
  (void)args, (void)kw;
  ModelObject *self = (ModelObject *)type->tp_alloc(type, 0);
  if (!self) return NULL;
  size_t align = DESC->arena_align ? DESC->arena_align : 64;
  size_t bytes = (DESC->arena_bytes + align - 1) / align * align;
  self->model = calloc(1, DESC->model_size ? DESC->model_size : 1);
  self->arena = aligned_alloc(align, bytes ? bytes : align);
  if (!self->model || !self->arena) {
    Py_DECREF(self);
    return PyErr_Format(PyExc_MemoryError, "%s.Model: cannot allocate the model's arena (%zu bytes)", MODNAME, bytes);
  }
  int rc = DESC->init(self->model, self->arena, bytes);
  if (rc) {
    Py_DECREF(self);
    raise_ctc(rc, NULL);
    return NULL;
  }
  self->fresh = 1;
  return (PyObject *)self;
}

static int load_path(ModelObject *self, PyObject *path) {
  PyObject *b = NULL;
  if (!PyUnicode_FSConverter(path, &b)) return -1;
  ctc_error err = {0};
  int rc = ctc_model_load(DESC, self->model, PyBytes_AS_STRING(b), &err);
  Py_DECREF(b);
  if (rc) {
    raise_ctc(rc, err.msg);
    return -1;
  }
  return 0;
}

/* Model(weights=None): weights is a safetensors file or a PyTorch checkpoint ("ckpt.pt:KEY"). */
static int model_init(ModelObject *self, PyObject *args, PyObject *kw) {
  static char *kwlist[] = {"weights", NULL};
  PyObject *w = Py_None;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "|O:Model", kwlist, &w)) return -1;
  if (self->busy) {
    PyErr_SetString(PyExc_RuntimeError, "the model is running an entry in another thread");
    return -1;
  }
  int rc = self->fresh ? 0 : DESC->init(self->model, self->arena, DESC->arena_bytes);
  self->fresh = 0;
  if (rc) {
    raise_ctc(rc, NULL);
    return -1;
  }
  return w == Py_None ? 0 : load_path(self, w);
}

static PyObject *model_load(ModelObject *self, PyObject *path) {
  if (self->busy) return PyErr_Format(PyExc_RuntimeError, "the model is running an entry in another thread");
  self->fresh = 0;
  return load_path(self, path) < 0 ? NULL : Py_NewRef(Py_None);
}

/* save(path, training_state=False): the state_dict (safetensors, or torch.save's format for
 * .pt/.pth/.bin), with training_state also the optimizer, scheduler and random state. */
static PyObject *model_save(ModelObject *self, PyObject *args, PyObject *kw) {
  static char *kwlist[] = {"path", "training_state", NULL};
  PyObject *b = NULL;
  int training_state = 0;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "O&|p:save", kwlist, PyUnicode_FSConverter, &b, &training_state))
    return NULL;
  ctc_error err = {0};
  int rc = ctc_model_save_opts(DESC, self->model, PyBytes_AS_STRING(b),
                               training_state ? CTC_SAVE_TRAINING_STATE : CTC_SAVE_STATE_DICT, &err);
  Py_DECREF(b);
  if (rc) {
    raise_ctc(rc, err.msg);
    return NULL;
  }
  Py_RETURN_NONE;
}

/* A new array of tensor t's shape and dtype; *data gets its (C-contiguous) storage. */
static PyObject *new_array(const ctc_tensor *t, void **data) {
  PyObject *shape = PyTuple_New(t->ndim);
  if (!shape) return NULL;
  for (int d = 0; d < t->ndim; d++) PyTuple_SET_ITEM(shape, d, PyLong_FromLongLong(t->shape[d]));
  PyObject *arr = PyObject_CallMethod(numpy_mod, "empty", "Os", shape, np_names[t->dtype]);
  Py_DECREF(shape);
  if (!arr) return NULL;
  Py_buffer v;
  if (PyObject_GetBuffer(arr, &v, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0) {
    Py_DECREF(arr);
    return NULL;
  }
  *data = v.buf;   /* the array keeps its storage alive */
  PyBuffer_Release(&v);
  return arr;
}

/* state_dict(): {name: copy} with the keys of PyTorch's model.state_dict(), in its order:
 * parameters and persistent buffers, a tied parameter under each of its names (one array,
 * as PyTorch's entries share one tensor); no training state, which PyTorch keeps in the
 * optimizer. */
static PyObject *model_state_dict(ModelObject *self, PyObject *unused) {
  (void)unused;
  PyObject *d = PyDict_New();
  unsigned char *arena = DESC->arena_of(self->model);
  int nkeys = ctc_sd_count(DESC);
  for (int k = 0; d && k < nkeys; k++) {
    const char *name, *prev;
    int i = ctc_sd_key_at(DESC, k, &name), j = -1;
    if (i < 0 || i >= DESC->nparams) continue;
    for (int q = 0; q < k && j != i; q++) j = ctc_sd_key_at(DESC, q, &prev);
    PyObject *a = j == i ? PyDict_GetItemString(d, prev) : NULL;   /* tied: the array of its first name */
    if (a) {
      if (PyDict_SetItemString(d, name, a) < 0) Py_CLEAR(d);
      continue;
    }
    const ctc_tensor *p = &DESC->params[i];
    void *data;
    a = new_array(p, &data);
    if (!a || PyDict_SetItemString(d, name, a) < 0) {
      Py_XDECREF(a);
      Py_CLEAR(d);
      break;
    }
    memcpy(data, arena + p->offset, ctc_tensor_bytes(p));
    Py_DECREF(a);
  }
  return d;
}

static PyObject *model_repr(ModelObject *self) {
  (void)self;
  return PyUnicode_FromFormat("<%s.Model of %s: %d entries, %d tensors, arena %zu bytes>", MODNAME, DESC->source,
                              DESC->nentries, DESC->nparams, DESC->arena_bytes);
}

/* ---- entries ------------------------------------------------------------------ */

/* One argument of an entry call: the buffer the entry reads, and what holds it. */
typedef struct {
  Py_buffer view;
  int has_view;
  PyObject *obj;   /* our reference: the argument, or a converted copy */
} Arg;

static int fmt_dtype(const char *f, Py_ssize_t itemsize) {
  if (!f) return CTC_U8;   /* "B" */
  if (*f == '@' || *f == '=' || *f == '<') f++;
  else if (*f == '>' || *f == '!') return -1;   /* big-endian */
  if (!f[0] || f[1]) return -1;
  switch (*f) {
  case 'f': return itemsize == 4 ? CTC_F32 : -1;
  case 'd': return itemsize == 8 ? CTC_F64 : -1;
  case 'q': case 'l': return itemsize == 8 ? CTC_I64 : itemsize == 4 ? CTC_I32 : -1;
  case 'i': return itemsize == 4 ? CTC_I32 : -1;
  case '?': return CTC_BOOL;
  case 'B': return CTC_U8;
  default: return -1;
  }
}

static void shape_str(char *buf, size_t cap, int ndim, const Py_ssize_t *shape) {
  int64_t s[CTC_MAX_DIMS];
  for (int d = 0; d < ndim && d < CTC_MAX_DIMS; d++) s[d] = shape[d];
  if (ndim > CTC_MAX_DIMS) snprintf(buf, cap, "with %d dimensions", ndim);
  else ctc_format_shape(buf, cap, ndim, s);
}

/* Takes obj for input t of entry e: its buffer, in t's dtype (checked), C-contiguous and aligned. */
static int get_arg(const ctc_entry *e, const ctc_tensor *t, PyObject *obj, Arg *a) {
  Py_INCREF(obj);
  a->obj = obj;
  if (!PyObject_CheckBuffer(obj)) {   /* lists, scalars: numpy.asarray in the input's dtype */
    PyObject *c = PyObject_CallMethod(numpy_mod, "asarray", "Os", obj, np_names[t->dtype]);
    if (!c) return -1;
    Py_SETREF(a->obj, c);
  }
  for (int pass = 0; pass < 2; pass++) {
    if (PyObject_GetBuffer(a->obj, &a->view, PyBUF_RECORDS_RO) < 0) return -1;
    a->has_view = 1;
    int dt = fmt_dtype(a->view.format, a->view.itemsize);
    if (dt != (int)t->dtype) {
      PyErr_Format(PyExc_TypeError, "%s.%s: input '%s' has dtype %s, expected %s (numpy.%s)", MODNAME, e->name, t->name,
                   dt >= 0 ? np_names[dt] : a->view.format ? a->view.format : "B", np_names[t->dtype], np_names[t->dtype]);
      return -1;
    }
    if (PyBuffer_IsContiguous(&a->view, 'C') && (uintptr_t)a->view.buf % (uintptr_t)a->view.itemsize == 0) return 0;
    if (pass) break;
    /* strided or misaligned: an aligned C-contiguous copy */
    PyBuffer_Release(&a->view);
    a->has_view = 0;
    PyObject *c = PyObject_CallMethod(numpy_mod, "require", "OOs", a->obj, Py_None, "CA");
    if (!c) return -1;
    Py_SETREF(a->obj, c);
  }
  PyErr_Format(PyExc_ValueError, "%s.%s: input '%s' could not be made contiguous", MODNAME, e->name, t->name);
  return -1;
}

static int check_shape(const ctc_entry *e, const ctc_tensor *want, const Arg *a) {
  int same = a->view.ndim == want->ndim;
  for (int d = 0; same && d < want->ndim; d++) same = a->view.shape[d] == want->shape[d];
  if (same) return 0;
  char got[160], exp[160];
  shape_str(got, sizeof got, a->view.ndim, a->view.shape);
  ctc_format_shape(exp, sizeof exp, want->ndim, want->shape);
  PyErr_Format(PyExc_ValueError, "%s.%s: input '%s' has shape %s, expected %s", MODNAME, e->name, want->name, got, exp);
  return -1;
}

/* The run-time batch of a call of e: from the first input with a batch axis. */
static int batch_of(const ctc_entry *e, const Arg *args, int64_t *n) {
  *n = e->batch_max;
  if (e->batch_max <= 0) return 0;
  for (int i = 0; i < e->ninputs; i++) {
    const ctc_tensor *t = &e->inputs[i];
    int ax = t->batch_axis1 - 1;
    if (ax < 0 || args[i].view.ndim != t->ndim) continue;
    int64_t per = t->shape[ax] / e->batch_max, got = args[i].view.shape[ax];
    if (per <= 0 || got % per || got / per < 1 || got / per > e->batch_max) {
      PyErr_Format(PyExc_ValueError, "%s.%s: input '%s' has %lld along axis %d: expected a multiple of %lld, from %lld "
                   "to %lld (a batch from 1 to %lld)", MODNAME, e->name, t->name, (long long)got, ax, (long long)per,
                   (long long)per, (long long)(per * e->batch_max), (long long)e->batch_max);
      return -1;
    }
    *n = got / per;
    return 0;
  }
  return 0;
}

/* Runs entry e of the model with the Python arguments (inputs by position or by name). */
static PyObject *call_entry(ModelObject *self, const ctc_entry *e, PyObject *args, Py_ssize_t first, PyObject *kw) {
  Py_ssize_t npos = PyTuple_GET_SIZE(args) - first;
  if (npos > e->ninputs) {
    return PyErr_Format(PyExc_TypeError, "%s.%s() takes %d input%s, got %zd", MODNAME, e->name, e->ninputs,
                        e->ninputs == 1 ? "" : "s", npos);
  }
  int nin = e->ninputs, nout = e->noutputs;
  Arg *in = PyMem_Calloc((size_t)nin + 1, sizeof *in);
  const void **inp = PyMem_Calloc((size_t)nin + 1, sizeof *inp);
  void **outp = PyMem_Calloc((size_t)nout + 1, sizeof *outp);
  PyObject *result = NULL, *outs = PyTuple_New(nout);
  if (!in || !inp || !outp || !outs) {
    PyErr_NoMemory();
    goto done;
  }
  Py_ssize_t nkw = 0;
  for (int i = 0; i < nin; i++) {
    const ctc_tensor *t = &e->inputs[i];
    PyObject *o = i < npos ? PyTuple_GET_ITEM(args, first + i) : NULL;
    PyObject *k = kw ? PyDict_GetItemString(kw, t->name) : NULL;
    if (o && k) {
      PyErr_Format(PyExc_TypeError, "%s.%s() got input '%s' twice", MODNAME, e->name, t->name);
      goto done;
    }
    nkw += k != NULL;
    if (!o) o = k;
    if (!o) {
      PyErr_Format(PyExc_TypeError, "%s.%s() missing input '%s'", MODNAME, e->name, t->name);
      goto done;
    }
    if (get_arg(e, t, o, &in[i]) < 0) goto done;
  }
  if (kw && PyDict_GET_SIZE(kw) > nkw) {
    PyErr_Format(PyExc_TypeError, "%s.%s() got an unexpected keyword argument (its inputs are named by the model)",
                 MODNAME, e->name);
    goto done;
  }
  int64_t n;
  if (batch_of(e, in, &n) < 0) goto done;
  for (int i = 0; i < nin; i++) {
    ctc_tensor want = ctc_entry_tensor_at(e, &e->inputs[i], n);
    if (check_shape(e, &want, &in[i]) < 0) goto done;
    inp[i] = in[i].view.buf;
  }
  for (int j = 0; j < nout; j++) {
    ctc_tensor t = ctc_entry_tensor_at(e, &e->outputs[j], n);
    PyObject *a = new_array(&t, &outp[j]);
    if (!a) goto done;
    PyTuple_SET_ITEM(outs, j, a);
  }
  if (self->busy) {
    PyErr_Format(PyExc_RuntimeError, "%s.%s: the model is running an entry in another thread", MODNAME, e->name);
    goto done;
  }
  self->busy = 1;
  self->fresh = 0;
  int rc;
  Py_BEGIN_ALLOW_THREADS
  rc = ctc_entry_call(e, self->model, n, inp, outp);
  Py_END_ALLOW_THREADS
  self->busy = 0;
  if (rc) {
    const int report = (rc == CTC_ERR_ANOMALY || rc == CTC_ERR_INDEX) && DESC->error_of;
    const char *why = report ? DESC->error_of(self->model) : "";
    PyObject *exc = rc == CTC_ERR_SHAPE || rc == CTC_ERR_ARG ? PyExc_ValueError : rc == CTC_ERR_INDEX ? index_exc : ctc_exc;
    PyErr_Format(exc, "%s.%s: %s%s%s", MODNAME, e->name, ctc_strerror(rc), *why ? ": " : "", why);
    goto done;
  }
  if (nout == 1) result = Py_NewRef(PyTuple_GET_ITEM(outs, 0));
  else if (nout == 0) result = Py_NewRef(Py_None);
  else result = Py_NewRef(outs);
done:
  for (int i = 0; in && i < nin; i++) {
    if (in[i].has_view) PyBuffer_Release(&in[i].view);
    Py_XDECREF(in[i].obj);
  }
  PyMem_Free(in);
  PyMem_Free(inp);
  PyMem_Free(outp);
  Py_XDECREF(outs);
  return result;
}

/* Model.call(name, *inputs): any entry by name. */
static PyObject *model_call(ModelObject *self, PyObject *args, PyObject *kw) {
  if (PyTuple_GET_SIZE(args) < 1 || !PyUnicode_Check(PyTuple_GET_ITEM(args, 0)))
    return PyErr_Format(PyExc_TypeError, "%s.Model.call(name, *inputs): name must be a string", MODNAME);
  const char *name = PyUnicode_AsUTF8(PyTuple_GET_ITEM(args, 0));
  if (!name) return NULL;
  const ctc_entry *e = ctc_model_entry(DESC, name);
  if (!e) return PyErr_Format(PyExc_AttributeError, "%s.Model has no entry '%s'", MODNAME, name);
  return call_entry(self, e, args, 1, kw);
}

/* An entry as a method: a descriptor on the Model type whose bound form calls the entry. */
typedef struct {
  PyObject_HEAD
  int index;
  PyObject *doc;    /* "forward(x: float32[32, 1, 28, 28]) -> out: float32[32, 10]" */
  PyObject *name;
} EntryObject;

static void entry_dealloc(EntryObject *self) {
  Py_XDECREF(self->doc);
  Py_XDECREF(self->name);
  PyObject_Free(self);
}

static PyObject *entry_descr_get(PyObject *self, PyObject *obj, PyObject *type) {
  (void)type;
  if (!obj || obj == Py_None) return Py_NewRef(self);
  return PyMethod_New(self, obj);
}

static PyObject *entry_call(EntryObject *self, PyObject *args, PyObject *kw) {
  const ctc_entry *e = &DESC->entries[self->index];
  if (PyTuple_GET_SIZE(args) < 1 || !PyObject_TypeCheck(PyTuple_GET_ITEM(args, 0), model_type))
    return PyErr_Format(PyExc_TypeError, "%s.Model.%s needs a %s.Model", MODNAME, e->name, MODNAME);
  return call_entry((ModelObject *)PyTuple_GET_ITEM(args, 0), e, args, 1, kw);
}

static PyMemberDef entry_members[] = {
    {"__doc__", T_OBJECT, offsetof(EntryObject, doc), READONLY, NULL},
    {"__name__", T_OBJECT, offsetof(EntryObject, name), READONLY, NULL},
    {NULL, 0, 0, 0, NULL},
};

static PyTypeObject entry_type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = MODNAME ".entry",
    .tp_basicsize = sizeof(EntryObject),
    .tp_dealloc = (destructor)entry_dealloc,
    .tp_call = (ternaryfunc)entry_call,
    .tp_descr_get = entry_descr_get,
    .tp_members = entry_members,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "an entry of the compiled model, called as a method of Model",
};

static void tensor_doc(char *buf, size_t cap, const ctc_entry *e, const ctc_tensor *t) {
  char sh[160];
  ctc_format_shape(sh, sizeof sh, t->ndim, t->shape);
  snprintf(buf, cap, "%s: %s%s%s", t->name, np_names[t->dtype], sh, e->batch_max > 0 && t->batch_axis1 ? " (batch)" : "");
}

static PyObject *entry_new(int index) {
  const ctc_entry *e = &DESC->entries[index];
  EntryObject *o = PyObject_New(EntryObject, &entry_type);
  if (!o) return NULL;
  o->index = index;
  o->doc = o->name = NULL;
  size_t cap = 256 + 200 * (size_t)(e->ninputs + e->noutputs);
  char *s = PyMem_Malloc(cap), part[256];
  if (!s) {
    Py_DECREF(o);
    return PyErr_NoMemory();
  }
  size_t len = (size_t)snprintf(s, cap, "%s(", e->name);
  for (int i = 0; i < e->ninputs && len < cap; i++) {
    tensor_doc(part, sizeof part, e, &e->inputs[i]);
    len += (size_t)snprintf(s + len, cap - len, "%s%s", i ? ", " : "", part);
  }
  if (len < cap) len += (size_t)snprintf(s + len, cap - len, ") -> ");
  for (int j = 0; j < e->noutputs && len < cap; j++) {
    tensor_doc(part, sizeof part, e, &e->outputs[j]);
    len += (size_t)snprintf(s + len, cap - len, "%s%s", j ? ", " : "", part);
  }
  if (!e->noutputs && len < cap) snprintf(s + len, cap - len, "None");
  o->doc = PyUnicode_FromString(s);
  o->name = PyUnicode_FromString(e->name);
  PyMem_Free(s);
  if (!o->doc || !o->name) {
    Py_DECREF(o);
    return NULL;
  }
  return (PyObject *)o;
}

static PyMethodDef model_methods[] = {
    {"load", (PyCFunction)model_load, METH_O, "load(path): the parameters from a safetensors file or a PyTorch checkpoint"},
    {"save", (PyCFunction)(void (*)(void))model_save, METH_VARARGS | METH_KEYWORDS,
     "save(path, training_state=False): the state_dict as safetensors (a torch.save file for .pt/.pth/.bin), with "
     "training_state also the optimizer, scheduler and random state"},
    {"state_dict", (PyCFunction)model_state_dict, METH_NOARGS,
     "state_dict(): {name: numpy array} copies of the parameters and buffers, in PyTorch's order"},
    {"call", (PyCFunction)(void (*)(void))model_call, METH_VARARGS | METH_KEYWORDS,
     "call(name, *inputs): runs the entry `name` (also a method of its own name)"},
    {NULL, NULL, 0, NULL},
};

static PyType_Slot model_slots[] = {
    {Py_tp_new, model_new},
    {Py_tp_init, model_init},
    {Py_tp_dealloc, model_dealloc},
    {Py_tp_repr, model_repr},
    {Py_tp_methods, model_methods},
    {Py_tp_doc, "Model(weights=None): the compiled model with its own arena; weights: a safetensors file or a "
                "PyTorch checkpoint (by state_dict name). One method per entry (forward, train_step, ...)."},
    {0, NULL},
};

static PyType_Spec model_spec = {
    .name = MODNAME ".Model",
    .basicsize = sizeof(ModelObject),
    .flags = Py_TPFLAGS_DEFAULT,
    .slots = model_slots,
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, MODNAME,
    "A model compiled by ctc (the C it generated and its runtime): Model(weights).forward(x) ...", -1,
    NULL, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC CTC_CAT(PyInit_, CTC_PY_MODULE)(void) {
  if (PyType_Ready(&entry_type) < 0) return NULL;
  PyObject *m = PyModule_Create(&module_def);
  if (!m) return NULL;
  if (!numpy_mod && !(numpy_mod = PyImport_ImportModule("numpy"))) goto fail;
  if (!ctc_exc && !(ctc_exc = PyErr_NewException(MODNAME ".Error", PyExc_RuntimeError, NULL))) goto fail;
  if (PyModule_AddObjectRef(m, "Error", ctc_exc) < 0) goto fail;
  if (!index_exc) {
    PyObject *bases = PyTuple_Pack(2, ctc_exc, PyExc_IndexError);
    if (!bases) goto fail;
    index_exc = PyErr_NewException(MODNAME ".IndexError", bases, NULL);
    Py_DECREF(bases);
    if (!index_exc) goto fail;
  }
  if (PyModule_AddObjectRef(m, "IndexError", index_exc) < 0) goto fail;
  if (!model_type && !(model_type = (PyTypeObject *)PyType_FromSpec(&model_spec))) goto fail;
  PyObject *names = PyTuple_New(DESC->nentries);
  if (!names) goto fail;
  for (int i = 0; i < DESC->nentries; i++) {
    PyTuple_SET_ITEM(names, i, PyUnicode_FromString(DESC->entries[i].name));
    /* an entry named like a method (state_dict, call, ...) stays reachable through call() */
    if (PyObject_HasAttrString((PyObject *)model_type, DESC->entries[i].name)) continue;
    PyObject *ent = entry_new(i);
    if (!ent || PyObject_SetAttrString((PyObject *)model_type, DESC->entries[i].name, ent) < 0) {
      Py_XDECREF(ent);
      Py_DECREF(names);
      goto fail;
    }
    Py_DECREF(ent);
  }
  if (PyModule_AddObjectRef(m, "Model", (PyObject *)model_type) < 0 || PyModule_AddObject(m, "entries", names) < 0 ||
      PyModule_AddStringConstant(m, "source", DESC->source) < 0 ||
      PyModule_AddObject(m, "arena_bytes", PyLong_FromSize_t(DESC->arena_bytes)) < 0)
    goto fail;
  return m;
fail:
  Py_DECREF(m);
  return NULL;
}
