"""Generated code allocates nothing after init (issue 7, item 3).

A small C main (HARNESS below) is linked against the generated model.c. It
replaces malloc, calloc, realloc, free, aligned_alloc, posix_memalign and
memalign for the whole process (a definition in the executable interposes on
glibc's for every library, OpenBLAS and libgomp included) with counting
wrappers around glibc's __libc_* functions. It calls <name>_init, then arms the
counter and calls every entry N times on valid inputs, and prints how many
allocator calls it saw. Built twice:

- plain (no BLAS, no OpenMP): the counter is armed right after init, so even
  a lazy first-call allocation in the generated code is caught;
- as `ctc build` builds it (OpenBLAS, OpenMP; when OpenBLAS is installed): one
  warm-up call per entry first (OpenBLAS and libgomp set up their buffers and
  threads on first use), then the steady state must not allocate either.

The canary test inserts a malloc/free into the generated forward entry and
checks that the harness sees it, so the proof can fail."""
import os
import re
import shutil
import subprocess

import pytest

from ctc_testlib import BENCH, BENCH_TRAIN_STEP, CTC, build_ctc

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RT = os.path.join(ROOT, "runtime_min")
RT_LIB = os.path.join(ROOT, "build", "libctc_rt.a")  # built by build_ctc (ninja)

HARNESS = r"""
#define _GNU_SOURCE
#include "ctc_rt.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void __libc_free(void *);
extern void *__libc_memalign(size_t, size_t);

static int armed;
/* counts[0][k]: calls from the executable's own code (generated model, runtime,
 * this harness: the return address lies in [__executable_start, etext));
 * counts[1][k]: calls from shared libraries (OpenBLAS, libgomp, libc). */
static long counts[2][7];
enum { MALLOC, CALLOC, REALLOC, FREE, ALIGNED_ALLOC, POSIX_MEMALIGN, MEMALIGN };
static const char *const names[7] = {"malloc", "calloc", "realloc", "free", "aligned_alloc",
                                     "posix_memalign", "memalign"};
extern char __executable_start, etext;
#define COUNT(k)                                                                                    \
  do {                                                                                              \
    if (__atomic_load_n(&armed, __ATOMIC_RELAXED)) {                                                \
      char *ra_ = __builtin_return_address(0);                                                      \
      int lib_ = !(ra_ >= &__executable_start && ra_ < &etext);                                     \
      __atomic_fetch_add(&counts[lib_][k], 1, __ATOMIC_RELAXED);                                    \
    }                                                                                               \
  } while (0)

void *malloc(size_t n) { COUNT(MALLOC); return __libc_malloc(n); }
void *calloc(size_t a, size_t b) { COUNT(CALLOC); return __libc_calloc(a, b); }
void *realloc(void *p, size_t n) { COUNT(REALLOC); return __libc_realloc(p, n); }
void free(void *p) { if (p) COUNT(FREE); __libc_free(p); }
void *aligned_alloc(size_t al, size_t n) { COUNT(ALIGNED_ALLOC); return __libc_memalign(al, n); }
void *memalign(size_t al, size_t n) { COUNT(MEMALIGN); return __libc_memalign(al, n); }
int posix_memalign(void **p, size_t al, size_t n) {
  COUNT(POSIX_MEMALIGN);
  *p = __libc_memalign(al, n);
  return *p ? 0 : 12;
}

extern const ctc_model_desc DESC;

static void *buffer(const ctc_tensor *t, int fill) {
  size_t bytes = ctc_tensor_bytes(t), n = (size_t)ctc_tensor_numel(t);
  unsigned char *p = __libc_memalign(64, bytes + 64);
  memset(p, 0, bytes + 64);
  for (size_t i = 0; fill && i < n; i++) {
    switch (t->dtype) {
    case CTC_F32: ((float *)p)[i] = (float)((i * 37) % 17) / 17.0f - 0.5f; break;
    case CTC_F64: ((double *)p)[i] = (double)((i * 37) % 17) / 17.0 - 0.5; break;
    case CTC_I64: ((int64_t *)p)[i] = (int64_t)(i % 2); break; /* valid labels and indices */
    case CTC_I32: ((int32_t *)p)[i] = (int32_t)(i % 2); break;
    default: p[i] = (unsigned char)(i % 2); break;
    }
  }
  return p;
}

int main(int argc, char **argv) {
  int calls = argc > 1 ? atoi(argv[1]) : 3, warm = argc > 2 ? atoi(argv[2]) : 0;
  void *model = __libc_calloc(1, DESC.model_size);
  size_t bytes = (DESC.arena_bytes + 63) / 64 * 64;
  void *arena = __libc_memalign(64, bytes);
  memset(arena, 0, bytes);
  int rc = DESC.init(model, arena, bytes);
  if (rc) { printf("init failed: %d\n", rc); return 2; }
  void **in[16], **out[16];
  for (int e = 0; e < DESC.nentries && e < 16; e++) {
    const ctc_entry *en = &DESC.entries[e];
    in[e] = __libc_calloc((size_t)en->ninputs + 1, sizeof(void *));
    out[e] = __libc_calloc((size_t)en->noutputs + 1, sizeof(void *));
    for (int i = 0; i < en->ninputs; i++) in[e][i] = buffer(&en->inputs[i], 1);
    for (int i = 0; i < en->noutputs; i++) out[e][i] = buffer(&en->outputs[i], 0);
  }
  for (int k = 0; k < warm; k++)
    for (int e = 0; e < DESC.nentries && e < 16; e++)
      DESC.entries[e].call(model, (const void *const *)in[e], (void *const *)out[e]);
  long total[2] = {0, 0};
  for (int e = 0; e < DESC.nentries && e < 16; e++) {
    const ctc_entry *en = &DESC.entries[e];
    memset(counts, 0, sizeof counts);
    __atomic_store_n(&armed, 1, __ATOMIC_SEQ_CST);
    for (int k = 0; k < calls && rc == 0; k++) rc = en->call(model, (const void *const *)in[e], (void *const *)out[e]);
    __atomic_store_n(&armed, 0, __ATOMIC_SEQ_CST);
    if (rc) { printf("entry %s failed: %d\n", en->name, rc); return 2; }
    for (int w = 0; w < 2; w++) {
      printf("entry %s: %d calls, %s:", en->name, calls, w ? "libraries" : "program");
      for (int k = 0; k < 7; k++) { printf(" %s %ld", names[k], counts[w][k]); total[w] += counts[w][k]; }
      printf("\n");
    }
  }
  printf("total program %ld libraries %ld\n", total[0], total[1]);
  return 0;
}
"""

TRAIN_WRAPPER = BENCH_TRAIN_STEP + """

_x, _y = make_inputs()
example_inputs = {"forward": (_x,), "train_step": (_x, _y)}
"""


def have_openblas(tmp):
    src = tmp / "probe.c"
    src.write_text("#include <cblas.h>\nint main(void){float a=1,b=1,c=0;"
                   "cblas_sgemm(CblasRowMajor,CblasNoTrans,CblasNoTrans,1,1,1,1,&a,1,&b,1,0,&c,1);return c!=1;}\n")
    r = subprocess.run(["cc", str(src), "-o", str(tmp / "probe"), "-lopenblas"], capture_output=True)
    return r.returncode == 0


def build_harness(tmp, model_c, blas, tag):
    harness = tmp / "noalloc_main.c"
    harness.write_text(HARNESS)
    exe = tmp / f"noalloc_{tag}"
    cmd = ["cc", "-std=c11", "-O2", "-D_POSIX_C_SOURCE=200809L", "-DDESC=net_desc", f"-I{RT}", f"-I{tmp}",
           str(model_c), str(harness), RT_LIB, "-o", str(exe)]
    if blas:
        cmd[3:3] = ["-march=native", "-DCTC_HAVE_CBLAS", "-fopenmp"]
        cmd.append("-lopenblas")
    cmd += ["-lz", "-lm"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    assert r.returncode == 0, " ".join(cmd) + "\n" + r.stderr
    return exe


def counts(exe, calls, warm, env=None):
    """(allocator calls from the program's code, from shared libraries, the report)."""
    env = dict(os.environ, OMP_WAIT_POLICY="passive", **(env or {}))
    r = subprocess.run([str(exe), str(calls), str(warm)], capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    m = re.search(r"^total program (\d+) libraries (\d+)$", r.stdout, re.M)
    assert m, r.stdout
    return int(m.group(1)), int(m.group(2)), r.stdout


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    """model.c for the bench MLP and LeNet wrapped with an SGD-momentum train_step."""
    build_ctc()
    out = {}
    for name in ("mlp", "lenet"):
        tmp = tmp_path_factory.mktemp(f"noalloc_{name}")
        src = tmp / f"{name}.py"
        with open(os.path.join(BENCH, f"{name}.py")) as f:
            src.write_text(f.read() + TRAIN_WRAPPER)
        r = subprocess.run([CTC, "compile", str(src), "-o", str(tmp / "model.c"), "--name", "net"],
                           capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        out[name] = tmp
    return out


@pytest.mark.parametrize("name", ["mlp", "lenet"])
def test_entries_allocate_nothing_after_init(generated, name):
    tmp = generated[name]
    exe = build_harness(tmp, tmp / "model.c", blas=False, tag="plain")
    prog, libs, text = counts(exe, calls=3, warm=0)
    assert "entry forward: 3 calls, program:" in text and "entry train_step: 3 calls, program:" in text, text
    assert prog == 0 and libs == 0, text


@pytest.mark.parametrize("name", ["mlp", "lenet"])
def test_entries_allocate_nothing_with_openblas_and_openmp(generated, name):
    """Built as `ctc build` builds it. The program's code never allocates. With
    OPENBLAS_NUM_THREADS=1 nothing allocates at all; with threaded OpenBLAS,
    Debian's OpenBLAS 0.3.21 itself mallocs and frees a 512 KiB job array inside
    every GEMM it splits over threads (level3_thread.c), which is counted apart."""
    tmp = generated[name]
    if not have_openblas(tmp):
        pytest.skip("OpenBLAS (cblas.h, -lopenblas) is not installed")
    exe = build_harness(tmp, tmp / "model.c", blas=True, tag="blas")
    prog, libs, text = counts(exe, calls=3, warm=1)
    assert prog == 0, text
    prog, libs, text = counts(exe, calls=3, warm=1, env={"OPENBLAS_NUM_THREADS": "1"})
    assert prog == 0 and libs == 0, text


def test_canary_malloc_in_generated_entry_is_counted(generated, tmp_path):
    """The same harness on model.c with a malloc/free inserted into the forward
    entry's body reports it: the proof above can fail."""
    src = (generated["mlp"] / "model.c").read_text()
    m = re.search(r"^int net_forward\(net_t \*m[^)]*\) \{$", src, re.M)
    assert m, "the generated forward entry's definition was not found"
    canary = "\n  { void *volatile canary_ = malloc(16); free(canary_); }"
    bad = "#include <stdlib.h>\n" + src[:m.end()] + canary + src[m.end():]
    shutil.copy(generated["mlp"] / "model.h", tmp_path / "model.h")
    (tmp_path / "model.c").write_text(bad)
    exe = build_harness(tmp_path, tmp_path / "model.c", blas=False, tag="canary")
    prog, libs, text = counts(exe, calls=3, warm=0)
    assert "entry forward: 3 calls, program: malloc 3 calloc 0 realloc 0 free 3" in text, text
    assert "entry train_step: 3 calls, program: malloc 0 calloc 0 realloc 0 free 0" in text, text
    assert prog == 6 and libs == 0, text
