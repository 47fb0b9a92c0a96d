/* fuzz_frontend.c - libFuzzer harness: a model file (the input bytes) through the
 * lexer, the parser and lowering (the staging evaluator, AD when the file trains),
 * then DCE, the kernel schedule and the memory plan: everything `ctc check` and
 * `ctc compile` run before C emission. A user error must come back as a
 * diagnostic (lower_program returns NULL); a sanitizer report, a crash, a hang or
 * an internal error (BUG exits the process) is a finding.
 * Built by `ninja fuzz` (build/fuzz/fuzz_frontend); see tests/test_fuzz.py. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../frontend/frontend.h"
#include "../ir/ir.h"
#include "../kernels/kernels.h"
#include "../lowering/lowering.h"

static FILE *devnull; /* diagnostics go nowhere (the harness's only state) */

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  devnull = fopen("/dev/null", "w");
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size > 64 * 1024) return -1; /* model files are small; keeps the fuzzer on structure */
  Arena *a = arena_new();
  char *text = arena_alloc(a, size + 1); /* zeroed: NUL-terminated; NUL bytes inside stay, as src_read keeps them */
  memcpy(text, data, size);
  SrcFile *src = arena_alloc(a, sizeof *src);
  src->path = "fuzz.py";
  src->text = text;
  src->len = size;
  Diag d;
  diag_init(&d, devnull ? devnull : stderr);
  Node *mod = fe_parse(a, &d, src);
  if (mod) {
    LowerOptions opt;
    memset(&opt, 0, sizeof opt);
    Program *p = lower_program(a, &d, src, mod, &opt);
    if (p && !d.nerrors) {
      for (int i = 0; i < p->funcs.len; i++) ir_pass_dce(p, p->funcs.data[i]);
      PlanHints *hints = arena_alloc(a, sizeof *hints * (size_t)(p->funcs.len + 1));
      for (int i = 0; i < p->funcs.len; i++) hints[i] = kn_schedule(p, p->funcs.data[i], 1)->hints;
      MemPlan *plan = ir_plan_memory_hints(p, hints);
      if (!plan->error && ir_plan_check(p, plan, devnull ? devnull : stderr) < 0) BUG("invalid memory plan");
    }
  }
  arena_free(a);
  return 0;
}
