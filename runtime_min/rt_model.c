/* rt_model.c - loading and saving a generated model's parameters.
 *
 * A model's tensors live in its arena at desc->params[i].offset (the arena
 * is desc->arena_of(model)); desc->kinds says what each is (parameter, buffer,
 * training state, local) and desc->state_dict lists the model's state_dict()
 * keys in PyTorch's order, a tied parameter under each of its names.
 *
 * Loading reads a safetensors file or a PyTorch checkpoint (ctc_weights_read:
 * told from the content; "ckpt.pt:KEY" names the key holding the state_dict,
 * else the dict whose names match the model's is found), checks every tensor
 * first (present, exact shape, dtype) and only then copies, so a failed load
 * leaves the model untouched. Tensors in the file that the model does not use
 * are ignored. Parameters and buffers must be there (a tied one under any of its
 * names); training state, which a file exported from PyTorch does not have, and
 * non-persistent buffers keep their values when missing and are checked like
 * the rest when present.
 *
 * Saving writes exactly the state_dict, in its order (a tied tensor's data under
 * each name: safetensors has no shared tensors), so that PyTorch's strict
 * load_state_dict takes the file; CTC_SAVE_TRAINING_STATE appends the training
 * state. The format follows the name: .pt/.pth/.bin a torch.save file, else
 * safetensors.
 *
 * ctc_set_num_threads: OpenMP's thread count for the entries, OpenBLAS single-threaded. */
#include "ctc_rt.h"

#include <stdlib.h>
#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#endif
#if defined(CTC_HAVE_CBLAS) && defined(_OPENMP)
void openblas_set_num_threads(int n);   /* cblas.h's, declared here: the runtime does not include it */
#endif

const ctc_entry *ctc_model_entry(const ctc_model_desc *desc, const char *name) {
  if (!desc || desc->nentries <= 0 || !desc->entries) return NULL;
  if (!name) return &desc->entries[0];
  for (int i = 0; i < desc->nentries; i++)
    if (desc->entries[i].name && strcmp(desc->entries[i].name, name) == 0) return &desc->entries[i];
  return NULL;
}

int ctc_set_num_threads(int n) {
  if (n < 1) return CTC_ERR_ARG;
#ifdef _OPENMP
  omp_set_num_threads(n);
#endif
#if defined(CTC_HAVE_CBLAS) && defined(_OPENMP)
  openblas_set_num_threads(1);   /* as ctc_blas_threads_* in the generated code: ctc owns the threads */
#endif
  return CTC_OK;
}

int ctc_get_num_threads(void) {
#ifdef _OPENMP
  return omp_get_max_threads();
#else
  return 1;
#endif
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

const char *ctc_model_error(const ctc_model_desc *desc, const void *model) {
  const char *msg = desc && model && desc->error_of ? desc->error_of((void *)model) : NULL;
  return msg ? msg : "";
}

int ctc_param_kind(const ctc_model_desc *desc, int i) {
  if (desc->kinds) return desc->kinds[i] < CTC_KIND_COUNT ? desc->kinds[i] : CTC_KIND_LOCAL;
  if (i < desc->nparams - desc->noptional) return CTC_KIND_PARAMETER;   /* a descriptor without kinds */
  return desc->params[i].name && !strncmp(desc->params[i].name, "ctc.", 4) ? CTC_KIND_LOCAL : CTC_KIND_TRAINING;
}

int ctc_sd_count(const ctc_model_desc *desc) {
  if (desc->state_dict) return desc->nstate_dict;
  int n = 0;
  for (int i = 0; i < desc->nparams; i++) n += ctc_param_kind(desc, i) <= CTC_KIND_BUFFER;
  return n;
}

int ctc_sd_key_at(const ctc_model_desc *desc, int k, const char **name) {
  if (desc->state_dict) {
    *name = desc->state_dict[k].name;
    return desc->state_dict[k].param;
  }
  for (int i = 0; i < desc->nparams; i++)   /* the k-th parameter or buffer */
    if (ctc_param_kind(desc, i) <= CTC_KIND_BUFFER && k-- == 0) {
      *name = desc->params[i].name;
      return i;
    }
  *name = NULL;
  return -1;
}

void ctc_model_count(const ctc_model_desc *desc, ctc_model_counts *c) {
  memset(c, 0, sizeof *c);
  for (int i = 0; i < desc->nparams; i++) {
    int k = ctc_param_kind(desc, i);
    int64_t n = ctc_tensor_numel(&desc->params[i]);
    if (n > 0 && c->values[k] <= INT64_MAX - n) c->values[k] += n;
    c->tensors[k]++;
  }
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
  /* Floating-point data converts to the parameter's floating dtype (F64 -> F32 rounds; BF16 and
   * F16 widen exactly), I32 data widens to I64. */
  int is_float_f = ctc_dtype_is_float(f->dtype), is_float_p = ctc_dtype_is_float(p->dtype);
  if (f->dtype != p->dtype && !(is_float_f && is_float_p) && !(p->dtype == CTC_I64 && f->dtype == CTC_I32))
    return ctc_fail(err, CTC_ERR_DTYPE, "%s: tensor '%s' has dtype %s, expected %s", path, p->name,
                    ctc_dtype_name(f->dtype), ctc_dtype_name(p->dtype));
  if (f->complex64 && !p->complex64)   /* PyTorch's strict load refuses it too; float32 parts load into complex */
    return ctc_fail(err, CTC_ERR_DTYPE, "%s: tensor '%s' is complex64, expected %s", path, p->name,
                    ctc_dtype_name(p->dtype));
  int same = f->ndim == p->ndim;
  for (int d = 0; same && d < p->ndim; d++) same = f->shape[d] == p->shape[d];
  if (!same)
    return ctc_fail(err, CTC_ERR_SHAPE, "%s: tensor '%s' has shape %s, expected %s", path, p->name,
                    ctc_format_shape(got, sizeof got, f->ndim, f->shape),
                    ctc_format_shape(want, sizeof want, p->ndim, p->shape));
  return CTC_OK;
}

/* Copies file data into the arena; the source may be unaligned, so memcpy. A parameter of a
 * .bfloat16() / .half() model (p->low) takes a wider file's values rounded, as PyTorch's
 * load_state_dict copies them into its bfloat16 / float16 tensors. */
static void copy_param(unsigned char *dst, const ctc_tensor *p, const ctc_tensor *f, size_t bytes) {
  size_t n = bytes / ctc_dtype_size(p->dtype);
  if (ctc_dtype_is_float(f->dtype)) {   /* into bf16 / f16 storage: rounded by the conversion */
    int exact = p->low == CTC_LOW_BF16 ? f->dtype == CTC_BF16 : p->low == CTC_LOW_F16 ? f->dtype == CTC_F16 : 0;
    if (f->dtype == p->dtype) memcpy(dst, f->data, bytes);
    else ctc_float_copy(dst, p->dtype, f->data, f->dtype, n, exact ? 0 : p->low);
    return;
  }
  if (f->dtype == p->dtype) {
    memcpy(dst, f->data, bytes);
    return;
  }
  const unsigned char *src = f->data;
  for (size_t i = 0; i < n; i++) {   /* I32 -> I64 */
    int32_t v;
    memcpy(&v, src + i * sizeof v, sizeof v);
    int64_t x = v;
    memcpy(dst + i * sizeof x, &x, sizeof x);
  }
}

int ctc_check_assumed(const ctc_model_desc *desc, const void *model, int i, const ctc_tensor *f, const char *from,
                      ctc_error *err) {
  if (!desc->assumed || i < 0 || i >= desc->nparams || !desc->assumed[i]) return CTC_OK;
  const ctc_tensor *p = &desc->params[i];
  const unsigned char *arena = desc->arena_of ? desc->arena_of((void *)model) : NULL;
  if (!arena) return ctc_fail(err, CTC_ERR_ARENA, "the model has no arena (not initialised?)");
  int64_t n = ctc_tensor_numel(p);
  for (int64_t k = 0; k < n; k++) {
    double now = ctc_elem_f64(arena + p->offset, p->dtype, (size_t)k), got = ctc_elem_f64(f->data, f->dtype, (size_t)k);
    if (p->dtype != CTC_F64 && ctc_dtype_is_float(p->dtype)) {   /* as the model stores it (an F64 file rounds) */
      float g = (float)got;
      int low = p->dtype == CTC_BF16 ? CTC_LOW_BF16 : p->dtype == CTC_F16 ? CTC_LOW_F16 : p->low;
      if (low) ctc_float_copy(&g, CTC_F32, &g, CTC_F32, 1, low);
      got = g;
    }
    if (got == now || (got != got && now != now)) continue;
    char at[160];
    int64_t idx[8], r = k;
    for (int d = p->ndim - 1; d >= 0 && d < 8; d--) idx[d] = r % p->shape[d], r /= p->shape[d];
    ctc_format_shape(at, sizeof at, p->ndim < 8 ? p->ndim : 8, idx);
    return ctc_fail(err, CTC_ERR_VALUE, "%s: tensor '%s' has %g at %s where the model has %g, but %s: this build "
                    "is only right for the values it was compiled with", from, p->name, got, at, now, desc->assumed[i]);
  }
  return CTC_OK;
}

/* Params entry i's tensor in the file: under its own name, else under another
 * state_dict key of it (a tied parameter in a file that keeps one of its names). */
static const ctc_tensor *find_param(const ctc_model_desc *desc, const ctc_safetensors *st, int i) {
  const ctc_tensor *f = ctc_st_find(st, desc->params[i].name);
  const char *name;
  for (int k = 0; !f && desc->state_dict && k < desc->nstate_dict; k++)
    if (ctc_sd_key_at(desc, k, &name) == i) f = ctc_st_find(st, name);
  return f;
}

int ctc_model_load(const ctc_model_desc *desc, void *model, const char *path, ctc_error *err) {
  if (!desc || !model || !path) return ctc_fail(err, CTC_ERR_ARG, "ctc_model_load: NULL argument");
  unsigned char *arena = desc->arena_of ? desc->arena_of(model) : NULL;
  if (!arena && desc->nparams > 0) return ctc_fail(err, CTC_ERR_ARENA, "the model has no arena (not initialised?)");
  int nkeys = desc->state_dict ? desc->nstate_dict : 0, nnames = desc->nparams + nkeys;
  const char **names = malloc((size_t)(nnames > 0 ? nnames : 1) * sizeof *names);
  if (!names) return ctc_fail(err, CTC_ERR_NOMEM, "out of memory");
  for (int i = 0; i < desc->nparams; i++) names[i] = desc->params[i].name;
  for (int k = 0; k < nkeys; k++) ctc_sd_key_at(desc, k, &names[desc->nparams + k]);
  ctc_safetensors st;
  int rc = ctc_weights_read(&st, path, nnames, names, err);
  free(names);
  if (rc) return rc;
  size_t bytes;
  for (int i = 0; i < desc->nparams && rc == CTC_OK; i++) {
    const ctc_tensor *p = &desc->params[i], *f = find_param(desc, &st, i);
    if ((rc = param_span(desc, p, &bytes, err))) break;
    if (f || ctc_param_kind(desc, i) <= CTC_KIND_BUFFER) rc = check_param(path, p, f, err);
    if (f && rc == CTC_OK) rc = ctc_check_assumed(desc, model, i, f, path, err);
  }
  for (int i = 0; i < desc->nparams && rc == CTC_OK; i++) {
    const ctc_tensor *p = &desc->params[i], *f = find_param(desc, &st, i);
    if (!f) continue;   /* training state or a non-persistent buffer the file lacks */
    bytes = ctc_tensor_bytes(p);
    copy_param(arena + p->offset, p, f, bytes);
  }
  ctc_st_free(&st);
  return rc;
}

static int ends_with(const char *s, const char *suffix) {
  size_t n = strlen(s), k = strlen(suffix);
  return n >= k && !strcmp(s + n - k, suffix);
}

int ctc_model_save_opts(const ctc_model_desc *desc, const void *model, const char *path, int what, ctc_error *err) {
  if (!desc || !model || !path) return ctc_fail(err, CTC_ERR_ARG, "ctc_model_save: NULL argument");
  unsigned char *arena = desc->arena_of ? desc->arena_of((void *)model) : NULL;
  if (!arena && desc->nparams > 0) return ctc_fail(err, CTC_ERR_ARENA, "the model has no arena (not initialised?)");
  int to_pt = ends_with(path, ".pt") || ends_with(path, ".pth") || ends_with(path, ".bin");
  int nkeys = ctc_sd_count(desc), cap = nkeys + desc->nparams;
  ctc_tensor *ts = malloc((size_t)(cap > 0 ? cap : 1) * sizeof *ts);
  if (!ts) return ctc_fail(err, CTC_ERR_NOMEM, "out of memory");
  int rc = CTC_OK, n = 0;
  size_t bytes;
  for (int k = 0; k < nkeys + desc->nparams && rc == CTC_OK; k++) {
    const char *name = NULL;
    int i = k < nkeys ? ctc_sd_key_at(desc, k, &name) : k - nkeys;
    if (k >= nkeys && (!(what & CTC_SAVE_TRAINING_STATE) || ctc_param_kind(desc, i) != CTC_KIND_TRAINING)) continue;
    if (i < 0 || i >= desc->nparams) {
      rc = ctc_fail(err, CTC_ERR_ARG, "state_dict key %d names no tensor of the model", k);
      break;
    }
    ts[n] = desc->params[i];
    if (name) ts[n].name = name;
    if ((rc = param_span(desc, &ts[n], &bytes, err)) == CTC_OK) ts[n].data = arena + ts[n].offset;
    n++;
  }
  if (rc == CTC_OK) rc = to_pt ? ctc_pt_write(path, n, ts, err) : ctc_st_write(path, n, ts, err);
  free(ts);
  return rc;
}

int ctc_model_save(const ctc_model_desc *desc, const void *model, const char *path, ctc_error *err) {
  return ctc_model_save_opts(desc, model, path, CTC_SAVE_STATE_DICT, err);
}
