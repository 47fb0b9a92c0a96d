/* fuzz_safetensors.c - libFuzzer harness for the safetensors reader
 * (ctc_st_parse, which ctc_st_read and ctc_model_load use): a malformed file
 * must be CTC_ERR_FORMAT (or NOMEM), never a read outside the buffer; every
 * tensor it accepts must lie inside the file. A file it accepts is loaded into
 * a small model description too (ctc_model_load's checks and copies). */
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
    {.name = "opt.m", .dtype = CTC_F32, .ndim = 1, .shape = {4}, .offset = 128},
};
static const ctc_model_desc desc = {.name = "fuzz", .model_size = 1, .arena_bytes = sizeof arena, .arena_align = 64,
                                    .nparams = 3, .params = params, .arena_of = arena_of, .noptional = 1};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  void *buf = malloc(size ? size : 1);
  if (!buf) return 0;
  memcpy(buf, data, size);
  ctc_safetensors st;
  ctc_error err;
  if (ctc_st_parse(&st, buf, size, &err) == CTC_OK) {
    for (int i = 0; i < st.ntensors; i++) {
      const ctc_tensor *t = &st.tensors[i];
      size_t bytes = ctc_tensor_bytes(t);
      if (bytes == SIZE_MAX || (const unsigned char *)t->data < (const unsigned char *)st.buf ||
          (size_t)((const unsigned char *)t->data - (const unsigned char *)st.buf) + bytes > st.size)
        abort(); /* an accepted tensor outside the file */
      volatile unsigned char sink = 0;
      for (size_t k = 0; k < bytes; k++) sink ^= ((const unsigned char *)t->data)[k];
      (void)sink;
    }
    ctc_st_free(&st);
    char path[64];
    char model = 0;
    if (fuzz_file(data, size, path) == 0) ctc_model_load(&desc, &model, path, &err);
  }
  return 0;
}
