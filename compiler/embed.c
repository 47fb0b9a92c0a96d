/* embed.c - the values of `--embed-weights` (see embed.h). */
#include "embed.h"

#include <string.h>

#include "../runtime_min/ctc_rt.h"

static ctc_dtype rt_dtype(DType t) {
  switch (t) {
  case DT_F32: return CTC_F32;
  case DT_F64: return CTC_F64;
  case DT_I64: return CTC_I64;
  case DT_I32: return CTC_I32;
  case DT_BOOL: return CTC_BOOL;
  case DT_BF16: return CTC_BF16;
  case DT_F16: return CTC_F16;
  default: return CTC_U8;
  }
}

static void put(unsigned char *out, DType dt, int64_t k, double f, int64_t i) {
  switch (dt) {
  case DT_F32: {
    float v = (float)f;
    memcpy(out + 4 * k, &v, 4);
    break;
  }
  case DT_F64: memcpy(out + 8 * k, &f, 8); break;
  case DT_BF16:
  case DT_F16: {   /* a .bfloat16() / .half() model's storage: f rounded to it */
    uint16_t h = dt == DT_BF16 ? ctc_f32_to_bf16((float)f) : ctc_f32_to_f16((float)f);
    memcpy(out + 2 * k, &h, 2);
    break;
  }
  case DT_I64: memcpy(out + 8 * k, &i, 8); break;
  case DT_I32: {
    int32_t v = (int32_t)i;
    memcpy(out + 4 * k, &v, 4);
    break;
  }
  default: out[k] = (unsigned char)i; break;
  }
}

/* A parameter missing from the file: its init values, or -1 if they are random. */
static int from_init(const Param *pr, unsigned char *out) {
  int64_t n = ir_numel(&pr->type);
  if (pr->init == PINIT_UNIFORM || pr->init == PINIT_NORMAL) return -1;
  for (int64_t k = 0; k < n; k++) {
    double v = pr->init == PINIT_CONST ? pr->init_a : pr->init == PINIT_DATA && pr->init_data ? pr->init_data[k] : 0;
    put(out, pr->type.dtype, k, v, (int64_t)v);
  }
  if (pr->init_zero_row1 > 0 && pr->type.ndim >= 1 && pr->init_zero_row1 <= pr->type.dims[0]) {
    int64_t row = n / pr->type.dims[0] * (int64_t)ir_dtype_size(pr->type.dtype);
    memset(out + (pr->init_zero_row1 - 1) * row, 0, (size_t)row);
  }
  return 0;
}

int ctc_embed_read(Arena *a, Diag *d, const Program *p, const char *spec, const void *const **out) {
  int np = p->params.len;
  const char **names = arena_alloc(a, sizeof *names * (size_t)(np + 1));
  for (int i = 0; i < np; i++) names[i] = p->params.data[i].name;
  ctc_safetensors st;
  ctc_error err = {0};
  int rc = ctc_weights_read(&st, spec, np, names, &err);
  if (rc) {
    diag_plain(d, "--embed-weights: %s", err.msg);
    return rc == CTC_ERR_IO || rc == CTC_ERR_NOMEM ? CTC_EXIT_IO : CTC_EXIT_USER;
  }
  const void **vals = arena_alloc(a, sizeof *vals * (size_t)(np + 1));
  int bad = 0;
  for (int i = 0; i < np && !bad; i++) {
    const Param *pr = &p->params.data[i];
    const Type *ty = &pr->type;
    int64_t n = ir_numel(ty);
    unsigned char *buf = arena_alloc(a, (size_t)(n * (int64_t)ir_dtype_size(ty->dtype)) + 1);
    vals[i] = buf;
    const ctc_tensor *t = ctc_st_find(&st, pr->name);
    for (int k = 0; !t && k < p->state_dict.len; k++)   /* a tied parameter under another of its names */
      if (p->state_dict.data[k].param == i) t = ctc_st_find(&st, p->state_dict.data[k].name);
    char want[256], got[256];
    ctc_format_shape(want, sizeof want, ty->ndim, ty->dims);
    if (!t) {   /* training state and non-persistent buffers are not in a state_dict */
      if ((pr->is_state || pr->not_persistent) && from_init(pr, buf) == 0) continue;
      diag_plain(d, "--embed-weights: %s has no tensor '%s' (%s%s)", spec, pr->name, ir_dtype_name(ty->dtype), want);
      bad = 1;
      break;
    }
    int same = t->ndim == ty->ndim;
    for (int k = 0; same && k < ty->ndim; k++) same = t->shape[k] == ty->dims[k];
    if (!same) {
      diag_plain(d, "--embed-weights: %s: tensor '%s' has shape %s, the model's is %s", spec, pr->name,
                 ctc_format_shape(got, sizeof got, t->ndim, t->shape), want);
      bad = 1;
      break;
    }
    int fl_param = ir_dtype_is_float(ty->dtype) || ir_dtype_is_low(ty->dtype), fl_file = ctc_dtype_is_float(t->dtype);
    if (fl_param && fl_file) {
      for (int64_t k = 0; k < n; k++) put(buf, ty->dtype, k, ctc_elem_f64(t->data, t->dtype, (size_t)k), 0);   /* put rounds it */
    } else if (ty->dtype == DT_I64 && (t->dtype == CTC_I32 || t->dtype == CTC_I64)) {
      for (int64_t k = 0; k < n; k++) {
        int64_t v;
        if (t->dtype == CTC_I32) {
          int32_t w;
          memcpy(&w, (const unsigned char *)t->data + 4 * k, 4);
          v = w;
        } else {
          memcpy(&v, (const unsigned char *)t->data + 8 * k, 8);
        }
        put(buf, ty->dtype, k, 0, v);
      }
    } else if (t->dtype == rt_dtype(ty->dtype)) {
      memcpy(buf, t->data, (size_t)(n * (int64_t)ir_dtype_size(ty->dtype)));
    } else {
      diag_plain(d, "--embed-weights: %s: tensor '%s' is %s, the model's is %s", spec, pr->name,
                 ctc_dtype_name(t->dtype), ir_dtype_name(ty->dtype));
      bad = 1;
    }
  }
  ctc_st_free(&st);
  if (bad) return CTC_EXIT_USER;
  *out = vals;
  return 0;
}
