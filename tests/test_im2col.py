"""The im2col kernel of generated C code, called directly on awkward geometries.

A model with one strided convolution (so that it runs as im2col + GEMM) is compiled,
and a small C main #includes the generated net.c and calls ctc_im2col_f64 (the same
text as the f32 one, instantiated per dtype) and ctc_im2col_f32 on geometries that hit
both of its paths: the flat shifted copy of stride-1 'same-width' convolutions (OW == W:
asymmetric kernels with OH != H, dilation, padding wider than the kernel reaches, an
image narrower than the padding, several channels) and the per-row loop (strides, OW !=
W). Every column is compared with a reference computed in the harness from the
definition (x[c][oh*sh - ph + kh*dh][ow*sw - pw + kw*dw], 0 in the padding), and the
columns' row stride ldc is wider than OH*OW with a sentinel in the gap that must stay.
The image is malloc'ed to its exact size; the sanitizer build catches reads outside it."""
import os
import subprocess

import pytest

from ctc_testlib import CTC, ROOT, build_ctc, run

RT = os.path.join(ROOT, "runtime_min")
RT_LIB = os.path.join(ROOT, "build", "libctc_rt.a")

MODEL = """
import torch
import torch.nn.functional as F

def conv(x, w):
    return F.conv2d(x, w, stride=2, padding=1)

example_inputs = {"conv": (torch.ones(2, 8, 10, 10), torch.ones(16, 8, 3, 3))}
"""

HARNESS = r"""
#include "net.c"
#include <stdio.h>
#include <stdlib.h>

#define SENTINEL -7777.0

/* one geometry, in f64 and f32: every column against the definition */
static int check(int C, int H, int W, int KH, int KW, int sh, int sw, int ph, int pw, int dh, int dw) {
  const int OH = (H + 2 * ph - dh * (KH - 1) - 1) / sh + 1, OW = (W + 2 * pw - dw * (KW - 1) - 1) / sw + 1;
  if (OH < 1 || OW < 1) return 0;
  const int rows = C * KH * KW, ldc = OH * OW + 3;
  double *x = malloc(sizeof(double) * (size_t)(C * H * W)), *col = malloc(sizeof(double) * (size_t)(rows * ldc));
  float *xf = malloc(sizeof(float) * (size_t)(C * H * W)), *colf = malloc(sizeof(float) * (size_t)(rows * ldc));
  for (int i = 0; i < C * H * W; i++) x[i] = 1 + i, xf[i] = (float)(1 + i);
  for (int i = 0; i < rows * ldc; i++) col[i] = colf[i] = (float)SENTINEL;
  ctc_im2col_f64(x, C, H, W, KH, KW, sh, sw, ph, pw, dh, dw, OH, OW, col, ldc);
  ctc_im2col_f32(xf, C, H, W, KH, KW, sh, sw, ph, pw, dh, dw, OH, OW, colf, ldc);
  int bad = 0;
  for (int c = 0; c < C; c++)
    for (int kh = 0; kh < KH; kh++)
      for (int kw = 0; kw < KW; kw++) {
        const int r = (c * KH + kh) * KW + kw;
        for (int q = 0; q < ldc && !bad; q++) {
          double want = SENTINEL;
          if (q < OH * OW) {
            const int oh = q / OW, ow = q % OW, ih = oh * sh - ph + kh * dh, iw = ow * sw - pw + kw * dw;
            want = ih >= 0 && ih < H && iw >= 0 && iw < W ? x[(c * H + ih) * W + iw] : 0;
          }
          const double got = col[r * ldc + q], gotf = colf[r * ldc + q];
          if (got != want || gotf != (float)want) {
            printf("MISMATCH C=%d H=%d W=%d K=%dx%d s=%d,%d p=%d,%d d=%d,%d row %d col %d: %g / %g want %g\n", C, H, W, KH,
                   KW, sh, sw, ph, pw, dh, dw, r, q, got, (double)gotf, want);
            bad = 1;
          }
        }
      }
  free(x), free(col), free(xf), free(colf);
  return bad;
}

int main(void) {
  /* C, H, W, KH, KW, sh, sw, ph, pw, dh, dw */
  static const int g[][11] = {
      {3, 7, 9, 3, 3, 1, 1, 1, 1, 1, 1},     /* 'same': the flat copy */
      {5, 6, 5, 2, 5, 1, 1, 0, 2, 1, 1},     /* OW == W, OH = H - 1 */
      {2, 5, 7, 3, 3, 1, 1, 3, 1, 1, 1},     /* rows that read only padding: OH = H + 4 */
      {3, 8, 6, 3, 3, 1, 1, 2, 2, 2, 2},     /* dilation 2, padding 2 */
      {2, 4, 2, 1, 5, 1, 1, 0, 2, 1, 1},     /* W = 2 under a 5-wide kernel: taps outside on both sides */
      {1, 3, 1, 3, 3, 1, 1, 1, 1, 1, 1},     /* one column */
      {2, 1, 6, 3, 3, 1, 1, 1, 1, 1, 1},     /* one row */
      {2, 4, 4, 5, 5, 1, 1, 2, 2, 1, 1},     /* the kernel wider than half the image */
      {1, 3, 3, 3, 1, 1, 1, 5, 0, 1, 1},     /* padding beyond the kernel's reach: all-zero rows */
      {3, 9, 9, 3, 3, 2, 2, 1, 1, 1, 1},     /* stride 2: the row loop */
      {3, 9, 8, 3, 3, 1, 2, 1, 1, 1, 1},     /* stride 1 over rows, 2 over columns */
      {3, 9, 8, 3, 3, 2, 1, 1, 1, 1, 1},     /* stride 2 over rows only */
      {2, 6, 7, 3, 2, 1, 1, 1, 1, 1, 1},     /* OW = W + 1: the row loop */
      {2, 11, 37, 3, 3, 2, 2, 1, 1, 1, 1},   /* stride 2, 19 outputs a row: the vectorised stride-2 loop */
      {3, 8, 40, 1, 3, 1, 2, 0, 2, 1, 1},    /* stride 2 over columns, padding 2: its span [lo, hi) */
  };
  int bad = 0, n = (int)(sizeof g / sizeof *g);
  for (int i = 0; i < n; i++)
    bad += check(g[i][0], g[i][1], g[i][2], g[i][3], g[i][4], g[i][5], g[i][6], g[i][7], g[i][8], g[i][9], g[i][10]);
  printf("%d geometries, %d wrong\n", n, bad);
  return bad != 0;
}
"""

@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    build_ctc()
    tmp = tmp_path_factory.mktemp("im2col")
    (tmp / "conv.py").write_text(MODEL + "\n\ndef conv64(x, w):\n    return F.conv2d(x, w, stride=2, padding=1)\n\n\n"
                                 "example_inputs['conv64'] = (torch.ones(2, 8, 10, 10, dtype=torch.float64), "
                                 "torch.ones(16, 8, 3, 3, dtype=torch.float64))\n")
    run([CTC, "compile", str(tmp / "conv.py"), "--entry", "conv", "--entry", "conv64", "--name", "net", "-o",
         str(tmp / "net.c")])
    (tmp / "main.c").write_text(HARNESS)
    return tmp


@pytest.mark.parametrize("variant", ["native", "sanitized"])
def test_im2col_geometries(generated, variant):
    tmp = generated
    cmd = ["cc", "-std=c11", "-O2", "-march=native", "-Wall", "-Wextra", "-Werror", "-D_POSIX_C_SOURCE=200809L",
           f"-I{RT}", f"-I{tmp}", str(tmp / "main.c"), RT_LIB, "-o", str(tmp / variant), "-lz", "-lm"]
    if variant == "sanitized":
        cmd[2:2] = ["-fsanitize=address,undefined", "-fno-sanitize-recover=all", "-g"]
    run(cmd)
    r = subprocess.run([str(tmp / variant)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert " 0 wrong" in r.stdout, r.stdout
