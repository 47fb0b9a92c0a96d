/* rt_model.c - loading and saving a generated model's parameters.
 *
 * A model's parameters live in its arena at desc->params[i].offset (the arena
 * is desc->arena_of(model)). Loading reads a safetensors file or a PyTorch
 * checkpoint (ctc_weights_read: told from the content; "ckpt.pt:KEY" names the
 * key holding the state_dict, else the dict whose names match the model's is
 * found), checks every
 * parameter first (present, exact shape, dtype) and only then copies, so a
 * failed load leaves the model untouched. Tensors in the file that the model
 * does not use are ignored. The last desc->noptional parameters (optimizer
 * state, which a file exported from PyTorch does not have) may be missing: they
 * keep their values; present ones are checked like the rest. Saving writes the
 * parameters in state_dict order, optional ones included. */
#include "ctc_rt.h"

#include <stdlib.h>
#include <string.h>

const ctc_entry *ctc_model_entry(const ctc_model_desc *desc, const char *name) {
  if (!desc || desc->nentries <= 0 || !desc->entries) return NULL;
  if (!name) return &desc->entries[0];
  for (int i = 0; i < desc->nentries; i++)
    if (desc->entries[i].name && strcmp(desc->entries[i].name, name) == 0) return &desc->entries[i];
  return NULL;
}

int ctc_entry_call(const ctc_entry *e, void *model, int64_t n, const void *const *inputs, void *const *outputs) {
  if (!e) return CTC_ERR_ARG;
  if (e->batch_max > 0 && e->call_n) return e->call_n(model, n, inputs, outputs);
  return e->call(model, inputs, outputs);
}

ctc_tensor ctc_entry_tensor_at(const ctc_entry *e, const ctc_tensor *t, int64_t n) {
  ctc_tensor r = *t;
  int ax = t->batch_axis1 - 1;
  if (e->batch_max > 0 && ax >= 0 && ax < t->ndim) r.shape[ax] = t->shape[ax] / e->batch_max * n;
  return r;
}

/* The parameter's place in the arena, checked against desc->arena_bytes. */
static int param_span(const ctc_model_desc *desc, const ctc_tensor *p, size_t *bytes, ctc_error *err) {
  *bytes = ctc_tensor_bytes(p);
  if (*bytes == SIZE_MAX || p->offset > desc->arena_bytes || *bytes > desc->arena_bytes - p->offset)
    return ctc_fail(err, CTC_ERR_ARENA, "parameter '%s' does not fit in the arena (%zu bytes at offset %zu)",
                    p->name, *bytes, p->offset);
  return CTC_OK;
}

/* Checks that file tensor f can be loaded into parameter p. */
static int check_param(const char *path, const ctc_tensor *p, const ctc_tensor *f, ctc_error *err) {
  char want[128], got[128];
  if (!f) return ctc_fail(err, CTC_ERR_MISSING, "%s: tensor '%s' is missing", path, p->name);
  /* Floating-point data converts to the parameter's floating dtype (F64 -> F32 rounds),
   * I32 data widens to I64. */
  int is_float_f = f->dtype == CTC_F32 || f->dtype == CTC_F64, is_float_p = p->dtype == CTC_F32 || p->dtype == CTC_F64;
  if (f->dtype != p->dtype && !(is_float_f && is_float_p) && !(p->dtype == CTC_I64 && f->dtype == CTC_I32))
    return ctc_fail(err, CTC_ERR_DTYPE, "%s: tensor '%s' has dtype %s, expected %s", path, p->name,
                    ctc_dtype_name(f->dtype), ctc_dtype_name(p->dtype));
  int same = f->ndim == p->ndim;
  for (int d = 0; same && d < p->ndim; d++) same = f->shape[d] == p->shape[d];
  if (!same)
    return ctc_fail(err, CTC_ERR_SHAPE, "%s: tensor '%s' has shape %s, expected %s", path, p->name,
                    ctc_format_shape(got, sizeof got, f->ndim, f->shape),
                    ctc_format_shape(want, sizeof want, p->ndim, p->shape));
  return CTC_OK;
}

/* Copies file data into the arena; the source may be unaligned, so memcpy. */
static void copy_param(unsigned char *dst, const ctc_tensor *p, const ctc_tensor *f, size_t bytes) {
  if (f->dtype == p->dtype) {
    memcpy(dst, f->data, bytes);
    return;
  }
  size_t n = bytes / ctc_dtype_size(p->dtype);
  const unsigned char *src = f->data;
  for (size_t i = 0; i < n; i++) {
    if (p->dtype == CTC_F32) {   /* F64 -> F32 */
      double v;
      memcpy(&v, src + i * sizeof v, sizeof v);
      float x = (float)v;
      memcpy(dst + i * sizeof x, &x, sizeof x);
    } else if (p->dtype == CTC_F64) {   /* F32 -> F64 */
      float v;
      memcpy(&v, src + i * sizeof v, sizeof v);
      double x = v;
      memcpy(dst + i * sizeof x, &x, sizeof x);
    } else {   /* I32 -> I64 */
      int32_t v;
      memcpy(&v, src + i * sizeof v, sizeof v);
      int64_t x = v;
      memcpy(dst + i * sizeof x, &x, sizeof x);
    }
  }
}

int ctc_model_load(const ctc_model_desc *desc, void *model, const char *path, ctc_error *err) {
  if (!desc || !model || !path) return ctc_fail(err, CTC_ERR_ARG, "ctc_model_load: NULL argument");
  unsigned char *arena = desc->arena_of ? desc->arena_of(model) : NULL;
  if (!arena && desc->nparams > 0) return ctc_fail(err, CTC_ERR_ARENA, "the model has no arena (not initialised?)");
  const char **names = malloc((size_t)(desc->nparams > 0 ? desc->nparams : 1) * sizeof *names);
  if (!names) return ctc_fail(err, CTC_ERR_NOMEM, "out of memory");
  for (int i = 0; i < desc->nparams; i++) names[i] = desc->params[i].name;
  ctc_safetensors st;
  int rc = ctc_weights_read(&st, path, desc->nparams, names, err);
  free(names);
  if (rc) return rc;
  size_t bytes;
  /* Parameters from index `first_optional` on may be missing from the file. */
  int first_optional = desc->noptional > 0 && desc->noptional <= desc->nparams ? desc->nparams - desc->noptional
                                                                                : desc->nparams;
  for (int i = 0; i < desc->nparams && rc == CTC_OK; i++) {
    const ctc_tensor *p = &desc->params[i], *f = ctc_st_find(&st, p->name);
    if ((rc = param_span(desc, p, &bytes, err))) break;
    if (f || i < first_optional) rc = check_param(path, p, f, err);
  }
  for (int i = 0; i < desc->nparams && rc == CTC_OK; i++) {
    const ctc_tensor *p = &desc->params[i], *f = ctc_st_find(&st, p->name);
    if (!f) continue;   /* an optional parameter the file lacks */
    bytes = ctc_tensor_bytes(p);
    copy_param(arena + p->offset, p, f, bytes);
  }
  ctc_st_free(&st);
  return rc;
}

int ctc_model_save(const ctc_model_desc *desc, const void *model, const char *path, ctc_error *err) {
  if (!desc || !model || !path) return ctc_fail(err, CTC_ERR_ARG, "ctc_model_save: NULL argument");
  unsigned char *arena = desc->arena_of ? desc->arena_of((void *)model) : NULL;
  if (!arena && desc->nparams > 0) return ctc_fail(err, CTC_ERR_ARENA, "the model has no arena (not initialised?)");
  if (desc->nparams <= 0) return ctc_st_write(path, 0, NULL, err);
  ctc_tensor *ts = malloc((size_t)desc->nparams * sizeof *ts);
  if (!ts) return ctc_fail(err, CTC_ERR_NOMEM, "out of memory");
  int rc = CTC_OK, n = 0;
  size_t bytes;
  for (int i = 0; i < desc->nparams && rc == CTC_OK; i++) {
    if (desc->params[i].name && !strncmp(desc->params[i].name, "ctc.kv.", 7)) continue;   /* decode's caches: scratch */
    ts[n] = desc->params[i];
    if ((rc = param_span(desc, &ts[n], &bytes, err)) == CTC_OK) ts[n].data = arena + ts[n].offset;
    n++;
  }
  if (rc == CTC_OK) rc = ctc_st_write(path, n, ts, err);
  free(ts);
  return rc;
}
