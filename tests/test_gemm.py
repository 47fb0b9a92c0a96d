"""The f32 GEMM in generated code, called directly on awkward shapes (issue 7, item 2).

A model with one matmul is compiled, and a small C main #includes the generated
net.c and calls its ctc_matmul_block_f32 (the function every f32 matmul, linear
and convolution of the generated code goes through) on shapes that hit every
branch of ctc's AVX-512 GEMM: both transposes, accumulation, rows that do not
fill a 12-row tile (nor, over 128 k, its two 6-row halves), columns that do not fill 32 (masked stores, zero-padded
packing), K not a multiple of 16 and K over one 512 block, leading dimensions
larger than the matrix, and sub-blocks (r0, c0 > 0) as the threads call it.
Each result is compared with a float64 reference in the same program.

Built three ways: -march=native without BLAS (the AVX-512 GEMM for every shape
on a CPU that has AVX-512F), -march=native with OpenBLAS (the AVX-512 GEMM for
blocks of at least 8 rows and 32 columns, OpenBLAS for slivers) and plain
-O2 (the portable GEMM). The program prints which GEMM it was built with, and on
a CPU with AVX-512F the test requires the AVX-512 one, so it cannot pass
without exercising it."""
import os
import subprocess

import pytest

from ctc_testlib import CTC, ROOT, build_ctc, run

RT = os.path.join(ROOT, "runtime_min")
RT_LIB = os.path.join(ROOT, "build", "libctc_rt.a")

MODEL = """
import torch

def mm(a, b):
    return a @ b

example_inputs = {"mm": (torch.ones(40, 24), torch.ones(24, 36))}
"""

HARNESS = r"""
#include "net.c"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

static float frand(unsigned *s) { *s = *s * 1664525u + 1013904223u; return (float)(*s >> 8) / 16777216.0f - 0.5f; }

/* C[r0:r1, c0:c1] of op(A) op(B) (+ C0 if acc) against a double reference; the rest of C untouched. */
static int check(int ta, int tb, int acc, int M, int N, int K, int pad, int r0, int r1, int c0, int c1) {
  const int lda = (ta ? M : K) + pad, ldb = (tb ? K : N) + pad, ldc = N + pad;
  const int arows = ta ? K : M, brows = tb ? N : K;
  float *a = malloc(sizeof(float) * (size_t)(arows * lda + 1)), *b = malloc(sizeof(float) * (size_t)(brows * ldb + 1));
  float *c = malloc(sizeof(float) * (size_t)(M * ldc + 1)), *c0v = malloc(sizeof(float) * (size_t)(M * ldc + 1));
  unsigned s = 12345u + (unsigned)(M * 7 + N * 13 + K * 17 + ta * 3 + tb * 5 + acc);
  for (int i = 0; i < arows * lda; i++) a[i] = frand(&s);
  for (int i = 0; i < brows * ldb; i++) b[i] = frand(&s);
  for (int i = 0; i < M * ldc; i++) c[i] = c0v[i] = frand(&s);
  ctc_matmul_block_f32(ta, tb, acc, K, a, lda, b, ldb, c, ldc, r0, r1, c0, c1);
  int bad = 0;
  for (int i = 0; i < M && !bad; i++)
    for (int j = 0; j < N + pad && !bad; j++) {
      const float got = c[i * ldc + j];
      if (i < r0 || i >= r1 || j < c0 || j >= c1) {   /* outside the block, or padding */
        if (got != c0v[i * ldc + j]) bad = 1;
        continue;
      }
      double want = acc ? c0v[i * ldc + j] : 0, mag = fabs(want);
      for (int k = 0; k < K; k++) {
        const double p = (double)(ta ? a[k * lda + i] : a[i * lda + k]) * (tb ? b[j * ldb + k] : b[k * ldb + j]);
        want += p, mag += fabs(p);
      }
      /* float32 sums of K products: error at most about K * 2^-24 * sum |terms| */
      if (fabs(got - want) > 1e-6 + 4e-7 * (K + 1) * mag) bad = 1;
      if (bad)
        printf("MISMATCH ta=%d tb=%d acc=%d M=%d N=%d K=%d pad=%d block=[%d,%d)x[%d,%d) C[%d,%d]=%.9g want %.9g\n",
               ta, tb, acc, M, N, K, pad, r0, r1, c0, c1, i, j, got, want);
    }
  free(a), free(b), free(c), free(c0v);
  return bad;
}

int main(void) {
#ifdef CTC_GEMM_AVX512_f32
  printf("gemm: avx512\n");
#else
  printf("gemm: other\n");
#endif
  static const int Ms[] = {1, 5, 7, 11, 12, 13, 40, 200}, Ns[] = {1, 17, 31, 32, 33, 100}, Ks[] = {0, 1, 15, 16, 17, 100, 512, 530, 1100};
  int cases = 0, bad = 0;
  for (int ta = 0; ta < 2; ta++)
    for (int tb = 0; tb < 2; tb++)
      for (unsigned mi = 0; mi < sizeof Ms / sizeof *Ms; mi++)
        for (unsigned ni = 0; ni < sizeof Ns / sizeof *Ns; ni++)
          for (unsigned ki = 0; ki < sizeof Ks / sizeof *Ks; ki++) {
            const int M = Ms[mi], N = Ns[ni], K = Ks[ki], acc = (int)((mi + ni + ki) % 2), pad = (int)(ki % 3);
            bad += check(ta, tb, acc, M, N, K, pad, 0, M, 0, N), cases++;
            if (M > 4 && N > 4)   /* an inner block, as one thread's share */
              bad += check(ta, tb, !acc, M, N, K, pad, M / 4, M - 1, N / 3, N - 2), cases++;
          }
  /* past an M block (384 rows) and two groups of op(B) panels packed together (128 columns) */
  static const int L[][3] = {{400, 300, 530}, {390, 257, 33}};
  for (int ta = 0; ta < 2; ta++)
    for (int tb = 0; tb < 2; tb++)
      for (int s = 0; s < 2; s++) {
        bad += check(ta, tb, s, L[s][0], L[s][1], L[s][2], s, 0, L[s][0], 0, L[s][1]), cases++;
        bad += check(ta, tb, !s, L[s][0], L[s][1], L[s][2], s, 5, L[s][0] - 3, 7, L[s][1] - 2), cases++;
      }
  printf("%d cases, %d wrong\n", cases, bad);
  return bad != 0;
}
"""


def have_avx512f():
    try:
        with open("/proc/cpuinfo") as f:
            return any(line.startswith("flags") and " avx512f " in line + " " for line in f)
    except OSError:
        return False


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    build_ctc()
    tmp = tmp_path_factory.mktemp("gemm")
    (tmp / "mm.py").write_text(MODEL)
    run([CTC, "compile", str(tmp / "mm.py"), "--entry", "mm", "--name", "net", "-o", str(tmp / "net.c")])
    (tmp / "main.c").write_text(HARNESS)
    return tmp


def have_openblas(tmp):
    probe = tmp / "probe.c"
    probe.write_text("#include <cblas.h>\nint main(void) { return 0; }\n")
    return subprocess.run(["cc", str(probe), "-o", str(tmp / "probe"), "-lopenblas"], capture_output=True).returncode == 0


@pytest.mark.parametrize("variant", ["native", "native-blas", "portable"])
def test_gemm_shapes(generated, variant):
    tmp = generated
    cmd = ["cc", "-std=c11", "-O2", "-Wall", "-Wextra", "-Werror", "-D_POSIX_C_SOURCE=200809L", f"-I{RT}",
           f"-I{tmp}", str(tmp / "main.c"), RT_LIB, "-o", str(tmp / variant)]
    if variant != "portable":
        cmd[2:2] = ["-march=native"]
    if variant == "native-blas":
        if not have_openblas(tmp):
            pytest.skip("OpenBLAS (cblas.h, -lopenblas) is not installed")
        cmd[2:2] = ["-DCTC_HAVE_CBLAS", "-fopenmp"]
        cmd.append("-lopenblas")
    cmd += ["-lz", "-lm"]
    run(cmd)
    r = subprocess.run([str(tmp / variant)], capture_output=True, text=True, timeout=300,
                       env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr
    assert " 0 wrong" in r.stdout, r.stdout
    want = "avx512" if variant != "portable" and have_avx512f() else "other"
    assert f"gemm: {want}" in r.stdout, r.stdout
