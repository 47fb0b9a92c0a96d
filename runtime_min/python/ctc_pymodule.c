/* ctc_pymodule.c - `ctc build --python -o NAME`: a CPython extension module
 * around a generated model, generic over its descriptor (ctc_model_desc): the
 * same file serves every model; ctc compiles it with
 *   -DCTC_PY_MODULE=NAME      the module's name (PyInit_NAME)
 *   -DCTC_PY_DESC=net_desc    the generated model's descriptor
 * together with model.c and the runtime, into NAME<EXT_SUFFIX>.
 *
 *   import NAME
 *   m = NAME.Model("w.safetensors")   # or Model(): the model's own initialisation
 *   y = m(x)                           # the forward entry, as m.forward(x); inputs also by name
 *   loss = m.train_step(x, labels)     # one method per entry, named after it
 *   m.load_state_dict(torch_model.state_dict()); sd = m.state_dict()
 *
 * Inputs are NumPy arrays, torch tensors (through numpy.asarray: their memory) or
 * anything with the buffer protocol, __array_interface__ or __dlpack__; lists and
 * scalars go through numpy.asarray with the input's dtype. A C-contiguous, aligned
 * array of the input's dtype is read in place (its pointer goes to the entry); a
 * strided or misaligned one is copied first. As `./net run` does, float64 data is
 * converted for a float32 input (float32 for a float64 one), int32 for an int64
 * input (int64 for an int32 one, each value checked). Another dtype is a TypeError
 * naming the input and what it expects, a wrong shape a ValueError naming both.
 * Outputs are new NumPy arrays the entry writes into (each call its own: they stay
 * valid, and the caller's, after later calls); NumPy arrays have the buffer protocol,
 * __array_interface__ and __dlpack__, so np.asarray(y), torch.from_numpy(y) and
 * torch.from_dlpack(y) share their memory. One output is returned as it is, several
 * as a tuple, none as None. An entry with a batch chosen at run time (the forward
 * entry of every build but --fixed-batch ones) takes it from the inputs' batch axis,
 * and its outputs have that batch. Errors of the runtime raise with the model's
 * message (ctc_model_error: the file, the tensor, both shapes). The GIL is released
 * while an entry runs; one model runs one entry at a time (a second thread gets a
 * RuntimeError); set_num_threads(n) sets the OpenMP threads of this model's entries.
 * Only Python's C API is used (NumPy is imported at run time, never compiled
 * against), and nothing of torch. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ctc_rt.h"

#ifdef _OPENMP
#include <omp.h>
#endif

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
static PyObject *incompat_type;   /* NAME.IncompatibleKeys(missing_keys, unexpected_keys), as PyTorch's */

static int is_low(int dt) { return dt == CTC_BF16 || dt == CTC_F16; }   /* a .bfloat16() / .half() model's storage */
static const char *const np_names[CTC_DTYPE_COUNT] = {"float32", "float64", "int64", "int32", "bool", "uint8",
                                                         "bfloat16", "float16"};

/* ---- the model ---------------------------------------------------------------- */

typedef struct {
  PyObject_HEAD
  void *model;    /* DESC->model_size bytes: the generated <name>_t */
  void *arena;    /* DESC->arena_bytes, DESC->arena_align aligned */
  int busy;       /* an entry is running (the GIL is released meanwhile) */
  int fresh;      /* initialised by tp_new and not used yet (__init__ need not initialise again) */
  int threads;    /* set_num_threads: OpenMP threads of this model's entries (0: the process's setting) */
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
  self->arena = ctc_arena_alloc(align, bytes);
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
  /* a .bfloat16() / .half() model's parameters as float32 arrays (NumPy has no bfloat16): exact */
  PyObject *arr = PyObject_CallMethod(numpy_mod, "empty", "Os", shape, is_low(t->dtype) ? "float32" : np_names[t->dtype]);
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
    if (is_low(p->dtype)) ctc_float_copy(data, CTC_F32, arena + p->offset, p->dtype, (size_t)ctc_tensor_numel(p), 0);
    else memcpy(data, arena + p->offset, ctc_tensor_bytes(p));
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

/* The CLI's conversions (./net run, rt_driver.c's convert_input): float64 data for a float32
 * input, float32 for a float64 one, int32 for an int64 one, int64 for an int32 one. */
static int convertible(int from, int to) {
  return (from == CTC_F64 && to == CTC_F32) || (from == CTC_F32 && to == CTC_F64) ||
         (from == CTC_I32 && to == CTC_I64) || (from == CTC_I64 && to == CTC_I32);
}

/* n values of dtype `from` at src as dtype `to` at dst (convertible, or the same dtype);
 * -1 with *bad the index of an int64 value that does not fit an int32. */
static int convert_values(void *dst, int to, const void *src, int from, Py_ssize_t n, Py_ssize_t *bad) {
  if (is_low(to)) {   /* into a .bfloat16() / .half() model's storage: rounded, as PyTorch's copy_ */
    ctc_float_copy(dst, (ctc_dtype)to, src, (ctc_dtype)from, (size_t)n, 0);
    return 0;
  }
  if (from == to) {
    memcpy(dst, src, (size_t)n * ctc_dtype_size((ctc_dtype)to));
    return 0;
  }
  for (Py_ssize_t i = 0; i < n; i++) {
    if (to == CTC_F32) ((float *)dst)[i] = (float)((const double *)src)[i];
    else if (to == CTC_F64) ((double *)dst)[i] = ((const float *)src)[i];
    else if (to == CTC_I64) ((int64_t *)dst)[i] = ((const int32_t *)src)[i];
    else {
      int64_t v = ((const int64_t *)src)[i];
      if (v < INT32_MIN || v > INT32_MAX) {
        *bad = i;
        return -1;
      }
      ((int32_t *)dst)[i] = (int32_t)v;
    }
  }
  return 0;
}

/* obj as an object with the buffer protocol (a new reference): itself when it has one;
 * arrays of other libraries through numpy.asarray (a torch tensor: its memory, its dtype)
 * or numpy.from_dlpack; lists and scalars through numpy.asarray(obj, dtype) (dtype NULL:
 * NumPy's choice). */
static PyObject *as_buffer_object(PyObject *obj, const char *dtype) {
  if (PyObject_CheckBuffer(obj)) return Py_NewRef(obj);
  if (PyObject_HasAttrString(obj, "__array__") || PyObject_HasAttrString(obj, "__array_interface__"))
    return PyObject_CallMethod(numpy_mod, "asarray", "O", obj);
  if (PyObject_HasAttrString(obj, "__dlpack__")) return PyObject_CallMethod(numpy_mod, "from_dlpack", "O", obj);
  return dtype ? PyObject_CallMethod(numpy_mod, "asarray", "Os", obj, dtype)
               : PyObject_CallMethod(numpy_mod, "asarray", "O", obj);
}

/* The dtype of a buffer as NumPy names it ("float16", "complex64"), for messages. */
static void dtype_name(char *buf, size_t cap, PyObject *obj, const Py_buffer *v) {
  int dt = fmt_dtype(v->format, v->itemsize);
  PyObject *d = dt >= 0 ? NULL : PyObject_GetAttrString(obj, "dtype"), *str = d ? PyObject_Str(d) : NULL;
  const char *u = str ? PyUnicode_AsUTF8(str) : NULL;
  if (!u) PyErr_Clear();
  snprintf(buf, cap, "%s", dt >= 0 ? np_names[dt] : u ? u : v->format ? v->format : "B");
  Py_XDECREF(str);
  Py_XDECREF(d);
}

/* A C-contiguous, aligned buffer of a->obj in a->view (numpy.require copies a strided or
 * misaligned one); its dtype in *dt (-1: none of ctc's). */
static int get_contiguous(Arg *a, int *dt) {
  for (int pass = 0; pass < 2; pass++) {
    if (PyObject_GetBuffer(a->obj, &a->view, PyBUF_RECORDS_RO) < 0) return -1;
    a->has_view = 1;
    *dt = fmt_dtype(a->view.format, a->view.itemsize);
    if (PyBuffer_IsContiguous(&a->view, 'C') && (uintptr_t)a->view.buf % (uintptr_t)a->view.itemsize == 0) return 0;
    PyBuffer_Release(&a->view);
    a->has_view = 0;
    if (pass) break;
    PyObject *c = PyObject_CallMethod(numpy_mod, "require", "OOs", a->obj, Py_None, "CA");
    if (!c) return -1;
    Py_SETREF(a->obj, c);
  }
  PyErr_SetString(PyExc_ValueError, "the array could not be made C-contiguous");
  return -1;
}

/* a->view's values as dtype `to` (convertible from its dtype `from`): a new array in a->obj. */
static int convert_arg(Arg *a, int from, int to, Py_ssize_t *bad, long long *badval) {
  PyObject *shape = PyTuple_New(a->view.ndim);
  if (!shape) return -1;
  for (int d = 0; d < a->view.ndim; d++) PyTuple_SET_ITEM(shape, d, PyLong_FromSsize_t(a->view.shape[d]));
  PyObject *c = PyObject_CallMethod(numpy_mod, "empty", "Os", shape, np_names[to]);
  Py_DECREF(shape);
  if (!c) return -1;
  Py_buffer v;
  if (PyObject_GetBuffer(c, &v, PyBUF_RECORDS) < 0) {
    Py_DECREF(c);
    return -1;
  }
  int rc = convert_values(v.buf, to, a->view.buf, from, a->view.len / a->view.itemsize, bad);
  if (rc) *badval = ((const int64_t *)a->view.buf)[*bad];
  PyBuffer_Release(&a->view);
  a->view = v;
  Py_SETREF(a->obj, c);
  return rc;
}

/* "float32 (or float64, converted) of shape [16, 20] (a batch of 1 to 16 along axis 0)" */
static void expected_str(char *buf, size_t cap, const ctc_entry *e, const ctc_tensor *t) {
  char sh[160], batch[96] = "";
  ctc_format_shape(sh, sizeof sh, t->ndim, t->shape);
  if (e->batch_max > 0 && t->batch_axis1)
    snprintf(batch, sizeof batch, " (a batch of 1 to %lld along axis %d)", (long long)e->batch_max, t->batch_axis1 - 1);
  const char *also = t->dtype == CTC_F32 ? " (or float64, converted)" : t->dtype == CTC_F64 ? " (or float32)"
                     : t->dtype == CTC_I64 ? " (or int32)" : t->dtype == CTC_I32 ? " (or int64, each value checked)" : "";
  snprintf(buf, cap, "%s%s of shape %s%s", np_names[t->dtype], also, sh, batch);
}

/* Takes obj for input t of entry e: its buffer, in t's dtype (converted where the CLI
 * converts), C-contiguous and aligned. */
static int get_arg(const ctc_entry *e, const ctc_tensor *t, PyObject *obj, Arg *a) {
  a->obj = as_buffer_object(obj, np_names[t->dtype]);
  if (!a->obj) return -1;
  int dt;
  if (get_contiguous(a, &dt) < 0) {
    if (PyErr_ExceptionMatches(PyExc_ValueError)) {
      PyErr_Clear();
      PyErr_Format(PyExc_ValueError, "%s.%s: input '%s' could not be made contiguous", MODNAME, e->name, t->name);
    }
    return -1;
  }
  if (dt == (int)t->dtype) return 0;   /* read in place */
  if (!convertible(dt, t->dtype)) {
    char got[64], want[400];
    dtype_name(got, sizeof got, a->obj, &a->view);
    expected_str(want, sizeof want, e, t);
    PyErr_Format(PyExc_TypeError, "%s.%s: input '%s' has dtype %s, expected %s", MODNAME, e->name, t->name, got, want);
    return -1;
  }
  Py_ssize_t bad = 0;
  long long badval = 0;
  if (convert_arg(a, dt, t->dtype, &bad, &badval) == 0) return 0;
  if (!PyErr_Occurred())
    PyErr_Format(PyExc_ValueError, "%s.%s: input '%s' (int32) gets int64 value %lld at index %zd, which does not fit",
                 MODNAME, e->name, t->name, badval, bad);
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
  int rc, threads = self->threads;
  Py_BEGIN_ALLOW_THREADS
#ifdef _OPENMP
  const int before = omp_get_max_threads();   /* this thread's setting, restored after the entry */
  if (threads > 0) omp_set_num_threads(threads);
#endif
  rc = ctc_entry_call(e, self->model, n, inp, outp);
#ifdef _OPENMP
  if (threads > 0) omp_set_num_threads(before);
#endif
  Py_END_ALLOW_THREADS
  (void)threads;
  self->busy = 0;
  if (rc) {
    /* the model's message (an index out of range, a NaN with --anomaly, ...): the checks above
     * leave the entry no other failure, and a report is only read for the codes that make one */
    const int report = rc == CTC_ERR_ANOMALY || rc == CTC_ERR_INDEX || rc == CTC_ERR_SHAPE || rc == CTC_ERR_ARG;
    const char *why = report ? ctc_model_error(DESC, self->model) : "";
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

/* m(x, ...): the forward entry ("forward", else the first entry of its kind), as m.forward(x, ...). */
static PyObject *model_tp_call(ModelObject *self, PyObject *args, PyObject *kw) {
  const ctc_entry *e = ctc_model_entry(DESC, "forward");
  for (int i = 0; (!e || e->kind != CTC_ENTRY_FORWARD) && i < DESC->nentries; i++)
    if (DESC->entries[i].kind == CTC_ENTRY_FORWARD) e = &DESC->entries[i];
  if (!e || (e->kind != CTC_ENTRY_FORWARD && strcmp(e->name, "forward")))
    return PyErr_Format(PyExc_TypeError, "%s.Model has no forward entry to call: call an entry by name (%s.entries)",
                        MODNAME, MODNAME);
  return call_entry(self, e, args, 0, kw);
}

/* set_num_threads(n): the OpenMP threads this model's entries run on (the calling thread's
 * setting is restored after each entry, so other models keep theirs). */
static PyObject *model_set_num_threads(ModelObject *self, PyObject *arg) {
  long n = PyLong_AsLong(arg);
  if (n == -1 && PyErr_Occurred()) return NULL;
  if (n < 1 || n > 4096) return PyErr_Format(PyExc_ValueError, "%s.Model.set_num_threads(n): n must be from 1 to 4096, got %ld",
                                             MODNAME, n);
  self->threads = (int)n;
  Py_RETURN_NONE;
}

/* get_num_threads(): what set_num_threads set, else the process's OpenMP setting (1 without OpenMP). */
static PyObject *model_get_num_threads(ModelObject *self, PyObject *unused) {
  (void)unused;
  int n = self->threads;
#ifdef _OPENMP
  if (n <= 0) n = omp_get_max_threads();
#endif
  return PyLong_FromLong(n > 0 ? n : 1);
}

/* One value of a state_dict given to load_state_dict: its contiguous buffer, or why it cannot load. */
typedef struct {
  Arg a;
  int dt;   /* its dtype (CTC_*), -1: none of ctc's */
} SdValue;

static int is_float(int dt) { return dt == CTC_F32 || dt == CTC_F64 || is_low(dt); }
static int is_int(int dt) { return dt == CTC_I32 || dt == CTC_I64; }

/* The shape of a buffer as "[3, 3]". */
static void view_shape(char *buf, size_t cap, const Py_buffer *v) {
  shape_str(buf, cap, v->ndim, v->shape);
}

/* load_state_dict(state_dict, strict=True), as PyTorch's: every key of the model's state_dict()
 * must be there and no other (strict), each value of the parameter's shape; a float converts
 * to the parameter's float dtype, an integer to its integer dtype. The errors are PyTorch's
 * (Missing key(s), Unexpected key(s), size mismatch), all of them in one RuntimeError, and
 * nothing is loaded then. Returns IncompatibleKeys(missing_keys, unexpected_keys). */
static PyObject *model_load_state_dict(ModelObject *self, PyObject *args, PyObject *kw) {
  static char *kwlist[] = {"state_dict", "strict", NULL};
  PyObject *sd;
  int strict = 1;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "O|p:load_state_dict", kwlist, &sd, &strict)) return NULL;
  if (!PyMapping_Check(sd) || PyUnicode_Check(sd))
    return PyErr_Format(PyExc_TypeError, "%s.Model.load_state_dict: expected a dict of name -> array (a state_dict), "
                        "got %s (m.load(path) reads a file)", MODNAME, Py_TYPE(sd)->tp_name);
  if (self->busy) return PyErr_Format(PyExc_RuntimeError, "the model is running an entry in another thread");
  int nkeys = ctc_sd_count(DESC);
  SdValue *vals = PyMem_Calloc((size_t)nkeys + 1, sizeof *vals);
  PyObject *missing = PyList_New(0), *unexpected = PyList_New(0), *errors = PyList_New(0), *names = PySet_New(NULL);
  PyObject *keys = NULL, *result = NULL;
  if (!vals || !missing || !unexpected || !errors || !names) {
    if (!vals) PyErr_NoMemory();
    goto done;
  }
  for (int k = 0; k < nkeys; k++) {
    const char *name;
    int i = ctc_sd_key_at(DESC, k, &name);
    if (i < 0 || i >= DESC->nparams) continue;
    const ctc_tensor *p = &DESC->params[i];
    PyObject *key = PyUnicode_FromString(name);
    if (!key || PySet_Add(names, key) < 0) {
      Py_XDECREF(key);
      goto done;
    }
    PyObject *v = PyObject_GetItem(sd, key);
    if (!v) {
      Py_DECREF(key);
      if (!PyErr_ExceptionMatches(PyExc_KeyError)) goto done;
      PyErr_Clear();
      PyObject *m = PyUnicode_FromString(name);
      int bad = !m || PyList_Append(missing, m) < 0;
      Py_XDECREF(m);
      if (bad) goto done;
      continue;
    }
    Py_DECREF(key);
    SdValue *sv = &vals[k];
    sv->a.obj = as_buffer_object(v, NULL);
    Py_DECREF(v);
    if (!sv->a.obj || get_contiguous(&sv->a, &sv->dt) < 0) goto done;
    if (sv->dt < 0 && is_float(p->dtype) && sv->a.view.itemsize == 2 && sv->a.view.format &&
        strchr(sv->a.view.format, 'e')) {   /* float16 (a half model's state_dict): exact in float32 */
      PyBuffer_Release(&sv->a.view);
      sv->a.has_view = 0;
      PyObject *c = PyObject_CallMethod(numpy_mod, "asarray", "Os", sv->a.obj, is_low(p->dtype) ? "float32" : np_names[p->dtype]);
      if (!c) goto done;
      Py_SETREF(sv->a.obj, c);
      if (get_contiguous(&sv->a, &sv->dt) < 0) goto done;
    }
    char got[160], want[160], msg[512];
    int ok_dtype = sv->dt == (int)p->dtype || (is_float(sv->dt) && is_float(p->dtype)) ||
                   (is_int(sv->dt) && is_int(p->dtype));
    int same = sv->a.view.ndim == p->ndim;
    for (int d = 0; same && d < p->ndim; d++) same = sv->a.view.shape[d] == p->shape[d];
    msg[0] = 0;
    if (!same) {
      view_shape(got, sizeof got, &sv->a.view);
      ctc_format_shape(want, sizeof want, p->ndim, p->shape);
      snprintf(msg, sizeof msg, "size mismatch for %s: copying a param with shape %s from checkpoint, the shape in "
               "current model is %s.", name, got, want);
    } else if (!ok_dtype) {
      dtype_name(got, sizeof got, sv->a.obj, &sv->a.view);
      snprintf(msg, sizeof msg, "dtype mismatch for %s: copying a param of dtype %s from checkpoint, the dtype in "
               "current model is %s.", name, got, np_names[p->dtype]);
    } else if (sv->dt == CTC_I64 && p->dtype == CTC_I32) {   /* each value must fit */
      const int64_t *q = sv->a.view.buf;
      for (Py_ssize_t j = 0; !msg[0] && j < sv->a.view.len / 8; j++)
        if (q[j] < INT32_MIN || q[j] > INT32_MAX)
          snprintf(msg, sizeof msg, "value out of range for %s: %lld at index %zd does not fit the model's int32.",
                   name, (long long)q[j], j);
    }
    if (!msg[0] && sv->dt >= 0) {   /* a tensor whose values the compiled code relies on keeps them */
      ctc_tensor f = *p;
      f.dtype = (ctc_dtype)sv->dt;
      f.data = sv->a.view.buf;
      ctc_error e;
      if (ctc_check_assumed(DESC, self->model, i, &f, "state_dict", &e)) snprintf(msg, sizeof msg, "%s", e.msg);
    }
    if (msg[0]) {
      PyObject *m = PyUnicode_FromString(msg);
      if (!m || PyList_Append(errors, m) < 0) {
        Py_XDECREF(m);
        goto done;
      }
      Py_DECREF(m);
    }
  }
  if (!(keys = PyMapping_Keys(sd))) goto done;
  for (Py_ssize_t j = 0; j < PyList_GET_SIZE(keys); j++) {
    PyObject *key = PyList_GET_ITEM(keys, j);
    int has = PyUnicode_Check(key) ? PySet_Contains(names, key) : 0;
    if (has < 0) goto done;
    if (!has && PyList_Append(unexpected, key) < 0) goto done;
  }
  /* PyTorch's message: the missing and unexpected keys first (strict), then the rest */
  for (int pass = 0; strict && pass < 2; pass++) {
    PyObject *list = pass ? missing : unexpected;   /* each inserted at the front: missing first */
    if (!PyList_GET_SIZE(list)) continue;
    PyObject *quoted = PyList_New(0), *sep = PyUnicode_FromString(", "), *joined = NULL, *m = NULL;
    for (Py_ssize_t j = 0; quoted && j < PyList_GET_SIZE(list); j++) {
      PyObject *q = PyUnicode_FromFormat("\"%S\"", PyList_GET_ITEM(list, j));
      if (!q || PyList_Append(quoted, q) < 0) Py_CLEAR(quoted);
      Py_XDECREF(q);
    }
    if (quoted && sep) joined = PyUnicode_Join(sep, quoted);
    if (joined) m = PyUnicode_FromFormat("%s key(s) in state_dict: %U. ", pass ? "Missing" : "Unexpected", joined);
    int bad = !m || PyList_Insert(errors, 0, m) < 0;
    Py_XDECREF(m);
    Py_XDECREF(joined);
    Py_XDECREF(sep);
    Py_XDECREF(quoted);
    if (bad) goto done;
  }
  if (PyList_GET_SIZE(errors)) {
    PyObject *sep = PyUnicode_FromString("\n\t"), *joined = sep ? PyUnicode_Join(sep, errors) : NULL;
    if (joined) PyErr_Format(ctc_exc, "Error(s) in loading state_dict for %s.Model:\n\t%U", MODNAME, joined);
    Py_XDECREF(joined);
    Py_XDECREF(sep);
    goto done;
  }
  /* every value checked: copy (a tied parameter takes its keys in order, the last one stays, as in PyTorch) */
  unsigned char *arena = DESC->arena_of(self->model);
  for (int k = 0; k < nkeys; k++) {
    const char *name;
    int i = ctc_sd_key_at(DESC, k, &name);
    SdValue *sv = &vals[k];
    if (i < 0 || i >= DESC->nparams || !sv->a.has_view) continue;
    const ctc_tensor *p = &DESC->params[i];
    Py_ssize_t bad = 0;   /* same dtype, float <-> float or int <-> int, the values checked above */
    convert_values(arena + p->offset, p->dtype, sv->a.view.buf, sv->dt, sv->a.view.len / sv->a.view.itemsize, &bad);
  }
  self->fresh = 0;
  result = PyObject_CallFunctionObjArgs(incompat_type, missing, unexpected, NULL);
done:
  for (int k = 0; vals && k < nkeys; k++) {
    if (vals[k].a.has_view) PyBuffer_Release(&vals[k].a.view);
    Py_XDECREF(vals[k].a.obj);
  }
  PyMem_Free(vals);
  Py_XDECREF(missing);
  Py_XDECREF(unexpected);
  Py_XDECREF(errors);
  Py_XDECREF(names);
  Py_XDECREF(keys);
  return result;
}

static PyMethodDef model_methods[] = {
    {"load", (PyCFunction)model_load, METH_O, "load(path): the parameters from a safetensors file or a PyTorch checkpoint"},
    {"save", (PyCFunction)(void (*)(void))model_save, METH_VARARGS | METH_KEYWORDS,
     "save(path, training_state=False): the state_dict as safetensors (a torch.save file for .pt/.pth/.bin), with "
     "training_state also the optimizer, scheduler and random state"},
    {"state_dict", (PyCFunction)model_state_dict, METH_NOARGS,
     "state_dict(): {name: numpy array} copies of the parameters and persistent buffers under PyTorch's keys, in its "
     "order (a tied parameter under each of its names; no training state)"},
    {"load_state_dict", (PyCFunction)(void (*)(void))model_load_state_dict, METH_VARARGS | METH_KEYWORDS,
     "load_state_dict(state_dict, strict=True): the parameters and buffers from a dict of arrays (NumPy arrays, torch "
     "tensors, anything with the buffer protocol, __array_interface__ or __dlpack__), as PyTorch's: strict wants "
     "exactly the keys of state_dict(); every error in one RuntimeError (NAME.Error), nothing loaded then; returns "
     "IncompatibleKeys(missing_keys, unexpected_keys)"},
    {"set_num_threads", (PyCFunction)model_set_num_threads, METH_O,
     "set_num_threads(n): the OpenMP threads this model's entries run on (no effect in a build without OpenMP)"},
    {"get_num_threads", (PyCFunction)model_get_num_threads, METH_NOARGS,
     "get_num_threads(): the threads this model's entries run on"},
    {"call", (PyCFunction)(void (*)(void))model_call, METH_VARARGS | METH_KEYWORDS,
     "call(name, *inputs): runs the entry `name` (also a method of its own name)"},
    {NULL, NULL, 0, NULL},
};

static PyType_Slot model_slots[] = {
    {Py_tp_new, model_new},
    {Py_tp_init, model_init},
    {Py_tp_dealloc, model_dealloc},
    {Py_tp_repr, model_repr},
    {Py_tp_call, model_tp_call},
    {Py_tp_methods, model_methods},
    {Py_tp_doc, "Model(weights=None): the compiled model with its own arena; weights: a safetensors file or a "
                "PyTorch checkpoint (by state_dict name). One method per entry (forward, train_step, ...); m(x) "
                "calls forward."},
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
  if (!incompat_type) {   /* PyTorch's _IncompatibleKeys: a named tuple */
    PyObject *coll = PyImport_ImportModule("collections");
    PyObject *nt = coll ? PyObject_GetAttrString(coll, "namedtuple") : NULL, *a = Py_BuildValue("s[ss]", "IncompatibleKeys",
                                                                                               "missing_keys", "unexpected_keys");
    PyObject *kw = Py_BuildValue("{ss}", "module", MODNAME);
    incompat_type = nt && a && kw ? PyObject_Call(nt, a, kw) : NULL;
    Py_XDECREF(kw);
    Py_XDECREF(a);
    Py_XDECREF(nt);
    Py_XDECREF(coll);
    if (!incompat_type) goto fail;
  }
  if (PyModule_AddObjectRef(m, "IncompatibleKeys", incompat_type) < 0) goto fail;
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
