/* convert.c - `ctc convert IN -o OUT` (see convert.h). The reading, checking
 * and writing are the runtime's (ctc_weights_read, ctc_st_write,
 * ctc_pt_write): generated programs and ctc share one restricted unpickler.
 * Tensors keep their names and values; a PyTorch file's float16/bfloat16
 * tensors become float32 (exactly), its views (tied weights, strides) become
 * contiguous copies, and only the tensors of the chosen dict are kept. */
#include "convert.h"

#include <string.h>

#include "../runtime_min/ctc_rt.h"

static int ends_with(const char *s, const char *suffix) {
  size_t n = strlen(s), k = strlen(suffix);
  return n >= k && strcmp(s + n - k, suffix) == 0;
}

static int exit_of(int code) { return code == CTC_ERR_IO || code == CTC_ERR_NOMEM ? CTC_EXIT_IO : CTC_EXIT_USER; }

int ctc_convert(Diag *d, const char *in, const char *out) {
  int to_pt = ends_with(out, ".pt") || ends_with(out, ".pth") || ends_with(out, ".bin");
  if (!to_pt && !ends_with(out, ".safetensors")) {
    diag_plain(d, "convert: cannot tell the output format from '%s' (expected a .safetensors, .pt or .pth name)", out);
    return CTC_EXIT_USER;
  }
  ctc_safetensors st;
  ctc_error err = {0};
  int rc = ctc_weights_read(&st, in, 0, NULL, &err);
  if (rc) {
    diag_plain(d, "convert: %s", err.msg);
    return exit_of(rc);
  }
  rc = to_pt ? ctc_pt_write(out, st.ntensors, st.tensors, &err) : ctc_st_write(out, st.ntensors, st.tensors, &err);
  ctc_st_free(&st);
  if (rc) {
    diag_plain(d, "convert: %s", err.msg);
    return exit_of(rc);
  }
  return 0;
}
