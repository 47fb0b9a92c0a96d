/* fuzz_idx.c - libFuzzer harness for the data set loader of `train`
 * (ctc_dataset_load: IDX or .npy, plain or gzipped) and the batch gather that
 * converts samples (ctc_dataset_gather to f32 with u8 scaling, to i64 and to i32
 * with range checks, rows in and out of range). */
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
  if (ctc_dataset_load(path, &t, &err) != CTC_OK) return 0;
  if (t.ndim >= 1 && t.shape[0] > 0) {
    int64_t n = t.shape[0], per = ctc_tensor_numel(&t) / n;
    int64_t rows[3] = {0, n - 1, n / 2};
    int64_t m = n < 3 ? n : 3;
    if (per > 0 && per <= (1 << 20)) {
      void *dst = malloc((size_t)(per * m) * 8);
      ctc_data_xform xf = {1, 0.5, 2.0};
      if (dst) {
        ctc_dataset_gather(&t, rows, m, CTC_F32, &xf, dst, &err);
        ctc_dataset_gather(&t, rows, m, CTC_F64, NULL, dst, &err);
        ctc_dataset_gather(&t, rows, m, CTC_I64, NULL, dst, &err);
        ctc_dataset_gather(&t, rows, m, CTC_I32, NULL, dst, &err);
        ctc_dataset_gather(&t, rows, m, CTC_U8, NULL, dst, &err);
        int64_t bad[1] = {n};
        if (ctc_dataset_gather(&t, bad, 1, CTC_F32, NULL, dst, &err) == CTC_OK) abort(); /* row n is out of range */
        free(dst);
      }
    }
  }
  ctc_tensor_free(&t);
  return 0;
}
