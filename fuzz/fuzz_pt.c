/* fuzz_pt.c - libFuzzer harness for the PyTorch checkpoint reader (rt_pt.c:
 * the zip archive, the legacy format and the restricted unpickler behind
 * ctc_pt_parse, which ctc_weights_read, ctc_model_load and `ctc convert` use).
 * A malformed file must be an error (never a read outside the buffer, a
 * crash or an unbounded allocation); every tensor it accepts must lie inside
 * the returned buffer. Accepted files are loaded into a small model
 * description too, with and without a key (ctc_model_load's checks and
 * conversions), and written back out as a .pt (ctc_pt_write) and read again. */
#define _GNU_SOURCE /* memfd_create (fuzz_file.h) */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ctc_rt.h"
#include "fuzz_file.h"

static unsigned char arena[256] __attribute__((aligned(64)));
static void *arena_of(void *m) { (void)m; return arena; }
static const ctc_tensor params[] = {
    {.name = "w", .dtype = CTC_F32, .ndim = 2, .shape = {2, 3}, .offset = 0},
    {.name = "steps", .dtype = CTC_I64, .ndim = 0, .offset = 64},
    {.name = "opt.m", .dtype = CTC_F64, .ndim = 1, .shape = {4}, .offset = 128},
};
static const char *const names[] = {"w", "steps", "opt.m"};
static const ctc_model_desc desc = {.name = "fuzz", .model_size = 1, .arena_bytes = sizeof arena, .arena_align = 64,
                                    .nparams = 3, .params = params, .arena_of = arena_of, .noptional = 1};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  void *buf = malloc(size ? size : 1);
  if (!buf) return 0;
  memcpy(buf, data, size);
  ctc_safetensors st;
  ctc_error err;
  /* the last byte picks a key for half the runs ("model"), so nested dicts are reached both ways */
  const char *key = size && (data[size - 1] & 1) ? "model" : NULL;
  if (ctc_pt_parse(&st, buf, size, key, 3, names, &err) != CTC_OK) return 0;
  for (int i = 0; i < st.ntensors; i++) {
    const ctc_tensor *t = &st.tensors[i];
    size_t bytes = ctc_tensor_bytes(t);
    if (bytes == SIZE_MAX || !t->name ||
        (bytes && ((const unsigned char *)t->data < (const unsigned char *)st.buf ||
                   (size_t)((const unsigned char *)t->data - (const unsigned char *)st.buf) + bytes > st.size)))
      abort(); /* an accepted tensor outside its buffer */
    volatile unsigned char sink = 0;
    for (size_t k = 0; k < bytes; k++) sink ^= ((const unsigned char *)t->data)[k];
    (void)sink;
  }
  char path[64], out[64 + 40];
  const char *dir = getenv("CTC_FUZZ_DIR");   /* test_fuzz.py's working folder */
  snprintf(out, sizeof out, "%.40s/fuzz_pt_%d.pt", dir && *dir && strlen(dir) < 40 ? dir : "/tmp", (int)getpid());
  if (st.ntensors <= 64 && ctc_pt_write(out, st.ntensors, st.tensors, &err) == CTC_OK) {
    ctc_safetensors back;
    if (ctc_pt_read(&back, out, NULL, 0, NULL, &err) != CTC_OK || back.ntensors != st.ntensors) abort();
    for (int i = 0; i < st.ntensors; i++)
      if (strcmp(back.tensors[i].name, st.tensors[i].name) != 0 ||
          memcmp(back.tensors[i].data, st.tensors[i].data, ctc_tensor_bytes(&st.tensors[i])) != 0)
        abort(); /* the writer and the reader disagree */
    ctc_st_free(&back);
    remove(out);
  }
  ctc_st_free(&st);
  char model = 0;
  if (fuzz_file(data, size, path) == 0) {
    ctc_model_load(&desc, &model, path, &err);
    char spec[80];
    snprintf(spec, sizeof spec, "%s:model", path);
    ctc_model_load(&desc, &model, spec, &err);
  }
  return 0;
}
