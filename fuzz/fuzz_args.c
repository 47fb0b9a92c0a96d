/* fuzz_args.c - libFuzzer harness for the driver's command line (ctc_main: run,
 * infer, info, bench, train and their options) on the runtime tests' fake models
 * (tests/runtime/fake_model.c). The input is the argument list, one argument per
 * line; a first line "T" selects the training model. The harness works in a
 * fresh temporary folder ($CTC_FUZZ_DIR if set) holding small valid files (x.npy, y.npy, in.npy,
 * w.safetensors, tw.safetensors) so that options can reach the data paths.
 * Counts of more than 3 digits are refused (a legal `--epochs 100000000` is a
 * long run, not a finding). Run with -close_fd_mask=3 (usage text on every
 * input). */
#include <ctype.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define main fake_model_main
#include "../tests/runtime/fake_model.c"
#undef main

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  /* $CTC_FUZZ_DIR (tests/test_fuzz.py gives a folder it removes), else a new one in /tmp */
  char dir[] = "/tmp/ctc_fuzz_args.XXXXXX";
  const char *given = getenv("CTC_FUZZ_DIR");
  if (given ? chdir(given) != 0 : !mkdtemp(dir) || chdir(dir) != 0) abort();
  float x[8 * 4], in[2 * 4];
  int64_t y[8];
  for (int i = 0; i < 32; i++) x[i] = (float)(i % 7) * 0.25f - 0.5f;
  for (int i = 0; i < 8; i++) y[i] = i % 3, in[i] = (float)i;
  ctc_tensor tx = {.name = "x", .dtype = CTC_F32, .ndim = 4, .shape = {8, 1, 2, 2}, .data = x};
  ctc_tensor ty = {.name = "y", .dtype = CTC_I64, .ndim = 1, .shape = {8}, .data = y};
  ctc_tensor ti = {.name = "x", .dtype = CTC_F32, .ndim = 2, .shape = {2, 4}, .data = in};
  if (ctc_npy_write("x.npy", &tx, NULL) || ctc_npy_write("y.npy", &ty, NULL) || ctc_npy_write("in.npy", &ti, NULL))
    abort();
  /* weights of both models, as their own init makes them */
  static unsigned char a1[256] __attribute__((aligned(64))), a2[T_ARENA] __attribute__((aligned(64)));
  fake_t m1;
  faket_t m2;
  if (fake_init(&m1, a1, sizeof a1) || faket_init(&m2, a2, sizeof a2)) abort();
  if (ctc_model_save(&desc, &m1, "w.safetensors", NULL) || ctc_model_save(&train_desc, &m2, "tw.safetensors", NULL))
    abort();
  return 0;
}

/* A decimal count of more than 3 digits (alone or after '='). */
static int too_long_count(const char *s) {
  const char *eq = strchr(s, '=');
  if (eq) s = eq + 1;
  size_t n = 0;
  while (isdigit((unsigned char)s[n])) n++;
  return n > 3 && s[n] == '\0';
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size > 4096) return -1;
  char *text = malloc(size + 1);
  char **argv = malloc((size + 3) * sizeof *argv);
  if (!text || !argv) abort();
  memcpy(text, data, size);
  text[size] = '\0';
  int argc = 0;
  argv[argc++] = "net";
  for (char *p = text, *nl; p; p = nl ? nl + 1 : NULL) {
    nl = strchr(p, '\n');
    if (nl) *nl = '\0';
    argv[argc++] = p;
  }
  argv[argc] = NULL;
  int train = argc > 1 && !strcmp(argv[1], "T");
  int ok = 1;
  for (int i = 1; i < argc; i++) ok &= !too_long_count(argv[i]);
  if (ok) {
    if (train) argv[1] = "net";
    ctc_main(argc - train, argv + train, train ? &train_desc : &desc);
  }
  free(argv);
  free(text);
  return ok ? 0 : -1;
}
