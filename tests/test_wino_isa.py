"""Winograd's F(2x2, 3x3) convolutions of the runtime's header (runtime_min/ctc_gemm_simd.h, from
codegen_c/wino_c.c) on each instruction set, outside any model: a harness calls ctc_conv_wino_f32
(the forward, and the input gradient with w's taps reversed) and ctc_conv_wino_wgrad_f32 on ragged
shapes inside an OpenMP region, as a model.c does, and compares them with float64 direct sums. It
is built for AVX2 (-march=haswell, where the CPU has AVX2), AVX-512 (-march=native, where it has
it) and NEON (aarch64, run under qemu-aarch64; skipped without the cross compiler or QEMU), the
latter also with CTC_HAVE_CBLAS (OpenBLAS then runs the other GEMMs, and the header keeps the NEON
tiles for Winograd's products, with no warning for the GEMM it does not call), and run at 1, 2 and
3 threads. The AVX2 and NEON helpers make each sum the same way (the transforms'
operations in the same order, ctc_gemm_tile16's 6x16 tiles over panels of 16 tiles), so their
results are the same bits, whatever the thread count."""
import os
import shutil

import pytest

from ctc_testlib import QEMU_A64, ROOT, need_aarch64, run

RT = os.path.join(ROOT, "runtime_min")
CFLAGS = ["-std=c11", "-O2", "-fno-math-errno", "-fno-trapping-math", "-D_POSIX_C_SOURCE=200809L", "-fopenmp",
          "-Wall", "-Wextra", "-Werror"]
X86_UNUSED = ["-Wno-unused-function"]   # (the x86 header's GEMV, which the harness does not call)

# (N, K, H, W, M, B): images, input channels, height, width, output channels, the plan's tiles a block
SHAPES = [
    # rows of 5 tiles: runs that start inside a vector; K = 17 (the weight transform's last lanes);
    # 20 rows of products: tiles of 6, 6, 4 and 4 rows
    (2, 17, 14, 10, 20, 416),
    # blocks of 32 tiles (the plan's smallest), 200 and 190 channels (the last tile 4 rows after 30 of 6)
    (3, 200, 6, 10, 190, 32),
    # one tile row an image, rows of 18 tiles (NEON: runs of 4, 4, 4, 4 and 2; AVX2: 8, 8, 2)
    (2, 16, 2, 36, 16, 512),
    # rows of 24 tiles, 4 image rows: runs at the left edge, inside (NEON's plain loads) and the right edge
    (2, 16, 4, 48, 16, 256),
    # images 8 and 4 columns wide (AVX2's groups of whole tile rows; NEON: one run of 4 or 2 a row)
    (5, 16, 6, 8, 20, 256),
    (9, 32, 4, 4, 24, 256),
    # 19 and 25 channels: the products' last 7 rows as tiles of 4 and 3
    (2, 19, 6, 8, 25, 256),
    # 528 tiles in blocks of 480: with 2 or 3 threads each thread's blocks its own
    (4, 16, 24, 22, 18, 480),
    # one tile, 3 channels in and 5 out
    (1, 3, 2, 2, 5, 32),
]

# float64 direct sums against the convolutions' float32 results: the largest error relative to the
# largest element. Measured 0.8e-7 to 3.2e-7 on these shapes (Winograd's transforms add a few roundings
# to each product's operands; PyTorch's own float32 convolutions of such shapes are 1e-7 to 3e-7 off):
# 1e-6 is three times that, and a wrong lane, tap or tile is off by the size of an element.
TOL = 1e-6

HARNESS = r"""#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
static __attribute__((unused)) void ctc_gemm_f32(int ta, int tb, int acc, int64_t M, int64_t N, int64_t K,
                                                const float *a, int64_t lda, const float *b, int64_t ldb, float *c,
                                                int64_t ldc) {
  (void)ta, (void)tb, (void)acc, (void)M, (void)N, (void)K, (void)a, (void)lda, (void)b, (void)ldb, (void)c, (void)ldc;
  abort();
}
#include "ctc_gemm_simd.h"
#ifndef CTC_CONV_WINO_f32
int main(void) { puts("no winograd"); return 3; }
#else
static uint64_t fnv(uint64_t h, const float *p, int64_t n) {
  const unsigned char *b = (const unsigned char *)p;
  for (int64_t i = 0; i < 4 * n; i++) h = (h ^ b[i]) * 1099511628211ull;
  return h;
}
static float rnd(uint64_t *s) {
  *s = *s * 6364136223846793005ull + 1442695040888963407ull;
  return (float)((*s >> 40) & 0xffffff) / 16777216.0f - 0.5f;
}
static double err(const float *got, const double *want, int64_t n) {
  double mx = 0, e = 0;
  for (int64_t i = 0; i < n; i++) mx = fmax(mx, fabs(want[i]));
  for (int64_t i = 0; i < n; i++) e = fmax(e, fabs(got[i] - want[i]));
  return e / (mx > 0 ? mx : 1);
}
int main(int argc, char **argv) {
  if (argc < 7) return 2;
  const int64_t N = atoll(argv[1]), K = atoll(argv[2]), H = atoll(argv[3]), W = atoll(argv[4]), M = atoll(argv[5]),
                B = atoll(argv[6]);
  const int64_t xs = N * K * H * W, ys = N * M * H * W, ws = M * K * 9;
  float *x = malloc(4 * xs), *g = malloc(4 * ys), *w = malloc(4 * ws), *y = malloc(4 * ys), *dx = malloc(4 * xs),
        *dw = malloc(4 * ws);
  double *ry = calloc(ys, 8), *rdx = calloc(xs, 8), *rdw = calloc(ws, 8);
  const int64_t C = K > M ? K : M, ss = 16 * M * K + 16 * (C * 2 * (B + 32) + 2 * CTC_WINO_PAD) + 64;
  float *s = aligned_alloc(64, (size_t)(4 * ((ss + 15) / 16 * 16)));
  uint64_t sd = 12345;
  for (int64_t i = 0; i < xs; i++) x[i] = rnd(&sd);
  for (int64_t i = 0; i < ys; i++) g[i] = rnd(&sd);
  for (int64_t i = 0; i < ws; i++) w[i] = rnd(&sd);
#pragma omp parallel
  ctc_conv_wino_f32(x, w, 0, N, K, H, W, M, B, s, y);
#pragma omp parallel
  ctc_conv_wino_f32(g, w, 1, N, M, H, W, K, B, s, dx);
#pragma omp parallel
  ctc_conv_wino_wgrad_f32(x, g, N, K, H, W, M, B, s, dw);
  for (int64_t n = 0; n < N; n++)
    for (int64_t m = 0; m < M; m++)
      for (int64_t k = 0; k < K; k++)
        for (int64_t a = 0; a < 3; a++)
          for (int64_t b = 0; b < 3; b++) {
            const double wv = w[(m * K + k) * 9 + 3 * a + b];
            for (int64_t i = 0; i < H; i++) {
              const int64_t ii = i + a - 1;
              if (ii < 0 || ii >= H) continue;
              for (int64_t j = 0; j < W; j++) {
                const int64_t jj = j + b - 1;
                if (jj < 0 || jj >= W) continue;
                const double xv = x[((n * K + k) * H + ii) * W + jj], gv = g[((n * M + m) * H + i) * W + j];
                ry[((n * M + m) * H + i) * W + j] += xv * wv;
                rdx[((n * K + k) * H + ii) * W + jj] += gv * wv;
                rdw[(m * K + k) * 9 + 3 * a + b] += gv * xv;
              }
            }
          }
  uint64_t h = 14695981039346656037ull;
  h = fnv(fnv(fnv(h, y, ys), dx, xs), dw, ws);
  printf("forward %.3g d/dx %.3g d/dw %.3g bits %016llx\n", err(y, ry, ys), err(dx, rdx, xs), err(dw, rdw, ws),
         (unsigned long long)h);
  return 0;
}
#endif
"""


def _cpu_flags():
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def _builds(tmp):
    """(name, command prefix to run, binary) for each instruction set this machine can run"""
    src = tmp / "wref.c"
    src.write_text(HARNESS)
    out, flags, x86 = [], _cpu_flags(), os.uname().machine == "x86_64"
    if x86 and "avx2" in flags and "fma" in flags:
        out.append(("avx2", ["cc", "-march=haswell", *X86_UNUSED], []))
    if x86 and "avx512f" in flags:
        out.append(("avx512", ["cc", "-march=native", *X86_UNUSED], []))
    if shutil.which("aarch64-linux-gnu-gcc") and shutil.which("qemu-aarch64"):
        out.append(("neon", ["aarch64-linux-gnu-gcc"], QEMU_A64))
        out.append(("neon_blas", ["aarch64-linux-gnu-gcc", "-DCTC_HAVE_CBLAS"], QEMU_A64))
    built = []
    for name, cc, pre in out:
        exe = tmp / f"wref_{name}"
        run([*cc, *CFLAGS, f"-I{RT}", src, "-o", exe, "-lm"], timeout=300)
        built.append((name, pre, exe))
    return built


@pytest.fixture(scope="module")
def harnesses(tmp_path_factory):
    return _builds(tmp_path_factory.mktemp("wino_isa"))


@pytest.mark.parametrize("shape", SHAPES, ids=["x".join(map(str, s)) for s in SHAPES])
def test_winograd_against_float64(harnesses, shape):
    """Each instruction set's forward, input and weight gradients within TOL of float64, the same bits
    at 1, 2 and 3 threads; AVX2's and NEON's (with and without CTC_HAVE_CBLAS) the same bits."""
    if not harnesses:
        pytest.skip("no instruction set with Winograd's helpers runs here (AVX2, AVX-512, or aarch64 under QEMU_A64)")
    bits = {}
    for name, pre, exe in harnesses:
        for threads in (1, 2, 3):
            r = run([*pre, exe, *map(str, shape)], timeout=600, env=dict(os.environ, OMP_NUM_THREADS=str(threads)))
            words = r.stdout.split()
            assert words[0] == "forward", r.stdout
            errs = {words[0]: float(words[1]), words[2]: float(words[3]), words[4]: float(words[5])}
            print(f"{name} {threads} threads: {r.stdout.strip()}")
            for what, e in errs.items():
                assert e <= TOL, f"{name}, {threads} threads, {what}: {e:.3g} from float64 (tolerance {TOL})"
            bits.setdefault(name, set()).add(words[-1])
    for name, b in bits.items():
        assert len(b) == 1, f"{name}: the results depend on the thread count"
    if "neon" in bits:
        assert bits["neon_blas"] == bits["neon"], "NEON with and without CTC_HAVE_CBLAS made some sum differently"
    if "avx2" in bits and "neon" in bits:
        assert bits["avx2"] == bits["neon"], "AVX2 and NEON made some sum differently"


RESNET = """
import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.skip = nn.Sequential()
        if stride != 1 or cin != cout:
            self.skip = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        h = F.relu(self.bn1(self.conv1(x)))
        return F.relu(self.bn2(self.conv2(h)) + self.skip(x))


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 16, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(16)
        self.blocks = nn.Sequential(Block(16, 16, 1), Block(16, 32, 2))
        self.head = nn.Linear(32, 10)

    def forward(self, x):
        x = self.blocks(F.relu(self.bn(self.stem(x))))
        return self.head(F.adaptive_avg_pool2d(x, 1).flatten(1))


model = Net()
optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)


def train_step(x, y):
    optimizer.zero_grad()
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()
    return loss


example_inputs = {"forward": (torch.zeros(8, 3, 16, 16),),
                  "train_step": (torch.zeros(8, 3, 16, 16), torch.zeros(8, dtype=torch.long))}
"""

CBLAS_DECLS = """
enum CBLAS_ORDER { CblasRowMajor = 101, CblasColMajor = 102 };
enum CBLAS_TRANSPOSE { CblasNoTrans = 111, CblasTrans = 112 };
void cblas_sgemm(enum CBLAS_ORDER, enum CBLAS_TRANSPOSE, enum CBLAS_TRANSPOSE, int, int, int, float, const float *, int,
                 const float *, int, float, float *, int);
int openblas_get_num_threads(void);
void openblas_set_num_threads(int);
"""


def test_resnet_train_aarch64(tmp_path):
    """A small ResNet trained for five steps by the whole program cross-built for aarch64 (`ctc build --cc
    aarch64-linux-gnu-gcc`: its 3x3 convolutions by Winograd on the NEON helpers; the stem, the strided
    and 1x1 ones as implicit GEMMs on NEON's tiles; the NEON GEMM; OpenMP at 2 threads) under qemu-aarch64,
    against the x86 build: the same weights after `./net train` within float32 rounding (the elementwise
    loops' vectors are 4 lanes there, 8 or 16 here; on AVX2 they came out the same bits). Its model.c
    also compiles clean for aarch64 with OpenBLAS (its declarations: there is no aarch64 OpenBLAS here),
    Winograd then on the NEON tiles and the other GEMMs OpenBLAS's."""
    from ctc_testlib import CTC, compare, st_read
    import numpy as np
    need_aarch64()
    (tmp_path / "net.py").write_text(RESNET)
    rng = np.random.default_rng(0)
    np.save(tmp_path / "x.npy", rng.standard_normal((40, 3, 16, 16)).astype(np.float32))
    np.save(tmp_path / "y.npy", (np.arange(40) * 7 % 10).astype(np.int64))
    weights = {}
    for arch, cc, pre in (("x86", [], []), ("a64", ["--cc", "aarch64-linux-gnu-gcc"], QEMU_A64)):
        run([CTC, "build", tmp_path / "net.py", "-o", tmp_path / f"net_{arch}", *cc], timeout=900)
        run([*pre, tmp_path / f"net_{arch}", "train", "--data", tmp_path / "x.npy", "--labels", tmp_path / "y.npy",
             "--epochs", "1", "--no-shuffle", "--save", tmp_path / f"w_{arch}.safetensors"], timeout=600,
            env=dict(os.environ, OMP_NUM_THREADS="2"))
        weights[arch] = st_read(tmp_path / f"w_{arch}.safetensors")
    assert "ctc_conv_wino_f32(" in (tmp_path / "net_a64.c").read_text()
    for k, v in weights["x86"].items():
        compare(f"{k} after 5 steps, aarch64 vs x86", weights["a64"][k], v, 1e-4, 1e-6)
    flags = [*CFLAGS, "-O3", f"-I{RT}", f"-I{tmp_path}"]
    macros = run(["aarch64-linux-gnu-gcc", *flags, "-E", "-dM", tmp_path / "net_a64.c"]).stdout
    assert "CTC_CONV_WINO_f32" in macros and "CTC_CONV_PIX_f32" in macros and "CTC_GEMM_NEON_f32" in macros
    (tmp_path / "blas").mkdir()
    (tmp_path / "blas" / "cblas.h").write_text(CBLAS_DECLS)
    blas = [*flags, "-DCTC_HAVE_CBLAS", f"-I{tmp_path / 'blas'}"]
    macros = run(["aarch64-linux-gnu-gcc", *blas, "-E", "-dM", tmp_path / "net_a64.c"]).stdout
    assert "CTC_CONV_WINO_f32" in macros and "CTC_CONV_PIX_f32" in macros and "CTC_GEMM_NEON_f32" not in macros
    run(["aarch64-linux-gnu-gcc", *blas, "-c", tmp_path / "net_a64.c", "-o", tmp_path / "net_blas.o"], timeout=600)
