"""The convolution cases of test_conv_batched.py whose paths have NEON kernels (the implicit GEMM over
16-pixel panels, ctc_conv_pix_f32; stride 2 over the input's phases, and its input gradient phase by
phase; Winograd's F(2x2, 3x3); and, for comparison, the tiles of im2col and the NEON GEMM), built for
aarch64 and run under qemu-aarch64: forward and gradients against PyTorch with test_conv_batched's
tolerances. The model's entries alone, called by a small main written here (the runtime's file
formats need zlib, which the aarch64 cross toolchain lacks), inputs and outputs as raw float32 files.
Skipped without aarch64-linux-gnu-gcc or qemu-aarch64 (scripts/install-deps.sh installs both)."""
import math
import os
import shutil

import numpy as np
import pytest

from ctc_testlib import CTC, ROOT, compare, run
from test_conv_batched import CASES, _conv_file, _data, _torch

RT = os.path.join(ROOT, "runtime_min")
QEMU = ["qemu-aarch64", "-L", "/usr/aarch64-linux-gnu"]
NAMES = ["implicit_5x5", "implicit_odd", "phases_3x3", "phases_1x1", "phases_2x2", "phases_5x3", "wino_ragged",
         "wino_tails", "wino_narrow8", "small_tiles", "ragged", "stride2_pad"]
SEL = [c for c in CASES if c[0] in NAMES]

MAIN_HEAD = r"""
#include "net.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* the runtime's file functions, which these entries never call */
int ctc_model_load(const ctc_model_desc *desc, void *model, const char *path, ctc_error *err) {
  (void)desc, (void)model, (void)path, (void)err;
  return CTC_ERR_IO;
}
int ctc_model_save(const ctc_model_desc *desc, const void *model, const char *path, ctc_error *err) {
  (void)desc, (void)model, (void)path, (void)err;
  return CTC_ERR_IO;
}
static float *load(const char *path, size_t n) {
  FILE *f = fopen(path, "rb");
  float *a = malloc(sizeof(float) * n);
  if (!f || !a || fread(a, sizeof(float), n, f) != n) exit(3);
  fclose(f);
  return a;
}
static void save(const char *path, const float *a, size_t n) {
  FILE *f = fopen(path, "wb");
  if (!f || fwrite(a, sizeof(float), n, f) != n) exit(4);
  fclose(f);
}
int main(int argc, char **argv) {
  net_t m;
  void *arena = aligned_alloc(64, (NET_ARENA_BYTES + 63) / 64 * 64);
  if (argc < 2 || !arena || net_init(&m, arena, NET_ARENA_BYTES) != CTC_OK) return 2;
  int rc = -1;
"""


def _main(outs):
    """main.c: `net ENTRY IN... OUT...` for each case's fwd_ and grads_ entries"""
    from test_conv_batched import _shapes
    src = [MAIN_HEAD]
    for case in SEL:
        n = case[0]
        xs, ws, bs = (math.prod(s) for s in _shapes(case))
        ys = math.prod(outs[n])
        src.append(f"""  if (!strcmp(argv[1], "fwd_{n}") && argc == 6) {{
    float *y = malloc(sizeof(float) * {ys});
    rc = net_fwd_{n}(&m, load(argv[2], {xs}), load(argv[3], {ws}), load(argv[4], {bs}), y);
    save(argv[5], y, {ys});
  }}
  if (!strcmp(argv[1], "grads_{n}") && argc == 9) {{
    float *dx = malloc(sizeof(float) * {xs}), *dw = malloc(sizeof(float) * {ws}), *db = malloc(sizeof(float) * {bs});
    rc = net_grads_{n}(&m, load(argv[2], {xs}), load(argv[3], {ws}), load(argv[4], {bs}), load(argv[5], {ys}), dx, dw, db);
    save(argv[6], dx, {xs}), save(argv[7], dw, {ws}), save(argv[8], db, {bs});
  }}
""")
    src.append("  return rc == CTC_OK ? 0 : 1;\n}\n")
    return "".join(src)


@pytest.fixture(scope="module")
def neon(tmp_path_factory):
    if os.uname().machine != "x86_64":
        pytest.skip("an x86-64 host")
    for t in ("aarch64-linux-gnu-gcc", "qemu-aarch64"):
        if not shutil.which(t):
            pytest.skip(f"{t} is not installed (scripts/install-deps.sh installs the cross toolchains and QEMU)")
    tmp = tmp_path_factory.mktemp("conv_neon")
    text, entries, outs = _conv_file(SEL, ['    "forward": (torch.zeros(1),),'])
    (tmp / "net.py").write_text(text)
    run([CTC, "compile", tmp / "net.py", "-o", tmp / "net.c", *entries], timeout=600)
    (tmp / "main.c").write_text(_main(outs))
    flags = ["-std=c11", "-O2", "-fno-math-errno", "-fno-trapping-math", "-D_POSIX_C_SOURCE=200809L", "-fopenmp",
             "-Wall", "-Wextra", "-Werror", f"-I{RT}", f"-I{tmp}"]
    macros = run(["aarch64-linux-gnu-gcc", *flags, "-E", "-dM", tmp / "net.c"]).stdout
    assert all(f"CTC_{k}_f32" in macros for k in ("CONV_PIX", "CONV_WINO", "GEMM_NEON"))
    run(["aarch64-linux-gnu-gcc", *flags, tmp / "main.c", tmp / "net.c", os.path.join(RT, "rt_error.c"), "-o",
         tmp / "net", "-lm"], timeout=600)
    return tmp, outs


def _run(tmp, entry, arrays, shapes):
    ins = []
    for i, a in enumerate(arrays):
        ins.append(tmp / f"{entry}_in{i}.bin")
        a.astype(np.float32).tofile(ins[-1])
    outs = [tmp / f"{entry}_out{i}.bin" for i in range(len(shapes))]
    run([*QEMU, tmp / "net", entry, *ins, *outs], timeout=600, env=dict(os.environ, OMP_NUM_THREADS="2"))
    return [np.fromfile(o, dtype=np.float32).reshape(s) for o, s in zip(outs, shapes)]


@pytest.mark.parametrize("case", SEL, ids=[c[0] for c in SEL])
def test_conv_neon_matches_torch(neon, case):
    tmp, outs = neon
    n = case[0]
    x, w, b, p = _data(case, outs[n], len(n))
    (y,) = _run(tmp, f"fwd_{n}", [x, w, b], [outs[n]])
    compare(f"{n} forward (aarch64)", y, _torch(case, x, w, b), 1e-4, 1e-4)
    got = _run(tmp, f"grads_{n}", [x, w, b, p], [x.shape, w.shape, b.shape])
    for what, g, want in zip(("x", "w", "b"), got, _torch(case, x, w, b, p)):
        compare(f"{n} d/d{what} (aarch64)", g, want, 1e-3, 1e-3)
