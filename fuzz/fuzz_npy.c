/* fuzz_npy.c - libFuzzer harness for the .npy reader (ctc_npy_read): malformed
 * headers (the Python-literal dict, shapes, descr), lying sizes and truncation
 * must be errors; an accepted array's bytes must all be readable. */
#define _GNU_SOURCE /* memfd_create (fuzz_file.h) */
#include <stdint.h>
#include <stdlib.h>

#include "ctc_rt.h"
#include "fuzz_file.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char path[64];
  if (fuzz_file(data, size, path) != 0) return 0;
  ctc_tensor t;
  ctc_error err;
  if (ctc_npy_read(path, &t, &err) == CTC_OK) {
    size_t bytes = ctc_tensor_bytes(&t);
    if (bytes == SIZE_MAX) abort();
    volatile unsigned char sink = 0;
    for (size_t k = 0; k < bytes; k++) sink ^= ((const unsigned char *)t.data)[k];
    (void)sink;
    ctc_tensor_free(&t);
  }
  return 0;
}
