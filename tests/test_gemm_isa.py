"""ctc's f32 GEMM microkernels, one per instruction set (issue 29, item 2).

Generated code carries three: AVX-512 (12x32 tiles), AVX2+FMA and NEON (6x16 tiles, the same
blocking; blocked summation of 32 k on AVX-512, 128 on AVX2 and NEON), picked at compile time from the target's macros
(__AVX512F__ > __AVX2__ && __FMA__ > __aarch64__ && __ARM_NEON > the portable ctc_gemm; NEON only
without OpenBLAS; AVX-512 and AVX2 with OpenBLAS too, which then keeps the slivers). Each
x86 one is forced here with -march (haswell: AVX2 without AVX-512; native: AVX-512 where the
CPU has it; x86-64: neither), the NEON one is cross-compiled for aarch64 and run under
qemu-aarch64 (skipped when the cross compiler or QEMU is missing).

- test_kernel_*: a C main includes the generated model.c and calls ctc_matmul_block_f32 on
  ragged shapes (M, N, K of 1, 5, 13, 31, 33, 257, ... : partial tiles, partial 16-column
  panels, K blocks of unequal length, every ta/tb, acc on and off, leading dimensions above
  the matrix), each against a float64 reference; it prints the kernel it was built with and
  the test requires the intended one. It also computes C in the row or column blocks that
  ctc_gemm_block gives 2 and 3 threads and requires the same bits as in one call, and from
  op(B)'s panels packed once before (a time loop's weight, kernels/prepack.c), whole and in two
  column blocks: the same bits as the GEMM that packs B itself.
- test_model_*: `ctc build --no-blas` (and with OpenBLAS, for AVX2; its compiler wrapped to append the -march) of a matmul entry with
  all four transposes and an MLP's training step (Linear forward with its bias/tanh epilogue,
  both backward GEMMs), against PyTorch; `cc -E -dM` of the same model.c with the same flags
  shows which kernel the program uses.
- test_gpt_aarch64: the bench GPT's forward as --freestanding C (which keeps the NEON kernel),
  built for aarch64 and run under qemu-aarch64, against the same C built for x86."""
import os
import re
import subprocess
import sys

import numpy as np
import pytest
import torch

from ctc_testlib import (CTC, ROOT, build_ctc, compare, load_module, need_tools, run, st_read, st_write,
                         state_dict_np)

RT = os.path.join(ROOT, "runtime_min")
RT_LIB = os.path.join(ROOT, "build", "libctc_rt.a")
GPT = os.path.join(os.path.dirname(ROOT), "shared", "bench", "models", "gpt.py")
QEMU = ["qemu-aarch64", "-L", "/usr/aarch64-linux-gnu"]

MM_MODEL = """
import torch

def mm(a, b):
    return a @ b

example_inputs = {"mm": (torch.ones(7, 9), torch.ones(9, 20))}
"""

HARNESS = r"""
#include "net.c"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static unsigned seed = 1u;
static float urand(void) { seed = seed * 1103515245u + 12345u; return (float)((seed >> 9) & 0xffff) / 65536.0f - 0.5f; }

/* One case: C = op(A) op(B) (+ C if acc) on an M x N block with leading dimensions pad above the
 * matrices, every element against a double sum; 1 if one is off. */
static int one(int ta, int tb, int acc, int M, int N, int K, int pad) {
  const int lda = (ta ? M : K) + pad, ldb = (tb ? K : N) + pad, ldc = N + pad;
  const size_t na = (size_t)(ta ? K : M) * lda + 1, nb = (size_t)(tb ? N : K) * ldb + 1, nc = (size_t)M * ldc + 1;
  float *a = malloc(sizeof(float) * na), *b = malloc(sizeof(float) * nb), *c = malloc(sizeof(float) * nc);
  float *c0 = malloc(sizeof(float) * nc);
  for (size_t i = 0; i < na; i++) a[i] = urand();
  for (size_t i = 0; i < nb; i++) b[i] = urand();
  for (size_t i = 0; i < nc; i++) c[i] = c0[i] = urand();
  ctc_matmul_block_f32(ta, tb, acc, K, a, lda, b, ldb, c, ldc, 0, M, 0, N);
  int bad = 0;
  for (int i = 0; i < M && !bad; i++)
    for (int j = 0; j < ldc && !bad; j++) {
      const float got = c[(size_t)i * ldc + j];
      if (j >= N) {   /* the padding is not written */
        bad = got != c0[(size_t)i * ldc + j];
        continue;
      }
      double want = acc ? c0[(size_t)i * ldc + j] : 0.0, size = fabs(want);
      for (int k = 0; k < K; k++) {
        const double t = (double)(ta ? a[(size_t)k * lda + i] : a[(size_t)i * lda + k]) *
                         (double)(tb ? b[(size_t)j * ldb + k] : b[(size_t)k * ldb + j]);
        want += t, size += fabs(t);
      }
      /* a float sum of K + 1 terms is within about (K + 1) 2^-24 of the sum of their sizes */
      bad = fabs((double)got - want) > 1e-6 + 1e-7 * (K + 1) * size;
      if (bad)
        printf("WRONG ta=%d tb=%d acc=%d M=%d N=%d K=%d pad=%d: C[%d,%d] = %.9g, want %.9g\n", ta, tb, acc, M, N, K,
               pad, i, j, got, want);
    }
#ifdef CTC_GEMM_PK_f32
  /* op(B) packed once (a time loop's weight, kernels/prepack.c), C computed from the panels whole
   * and in two column blocks (a thread's columns start at a multiple of 32): the bits of the GEMM
   * that packs B itself, where that is ctc's kernel */
  if (!bad && CTC_GEMM_OWN_f32(M, N)) {
    const int ldp = (N + 31) / 32 * 32;
    float *pk = aligned_alloc(64, sizeof(float) * ((size_t)K * ldp + 16)), *cp = malloc(sizeof(float) * nc);
    ctc_gemm_own_pack_f32(ta, tb, N, K, b, ldb, pk, ldp);
    for (int cut = 0; cut <= (N > 32) && !bad; cut++) {
      const int j1 = cut ? 32 : N;
      memcpy(cp, c0, sizeof(float) * nc);
      ctc_gemm_own_pk_f32(ta, tb, acc, M, j1, K, a, lda, NULL, ldb, pk, ldp, 0, cp, ldc);
      if (cut) ctc_gemm_own_pk_f32(ta, tb, acc, M, N - 32, K, a, lda, NULL, ldb, pk, ldp, 32, cp + 32, ldc);
      bad = memcmp(cp, c, sizeof(float) * nc) != 0;
      if (bad)
        printf("PACKED ta=%d tb=%d acc=%d M=%d N=%d K=%d pad=%d cut=%d: other bits than packing B in the call\n", ta, tb,
               acc, M, N, K, pad, cut);
    }
    free(pk), free(cp);
  }
#endif
  free(a), free(b), free(c), free(c0);
  return bad;
}

#ifndef CTC_HAVE_CBLAS   /* (with OpenBLAS, blocks of under 16 columns (AVX-512: 32) or 2-7 rows (AVX-512) are OpenBLAS's) */
/* C computed in the blocks ctc_gemm_block gives nt threads (rows when M >= N, else columns, cut at
 * multiples of 16 and 32, AVX2's columns at 16) has the bits of C computed in one call. */
static int split(int ta, int tb, int M, int N, int K, int nt) {
  const int lda = ta ? M : K, ldb = tb ? K : N;
  float *a = malloc(sizeof(float) * (size_t)M * K), *b = malloc(sizeof(float) * (size_t)K * N);
  float *c1 = malloc(sizeof(float) * (size_t)M * N), *c2 = malloc(sizeof(float) * (size_t)M * N);
  for (int i = 0; i < M * K; i++) a[i] = urand();
  for (int i = 0; i < K * N; i++) b[i] = urand();
  ctc_matmul_block_f32(ta, tb, 0, K, a, lda, b, ldb, c1, N, 0, M, 0, N);
  const int n = M >= N ? M : N;
  for (int t = 0; t < nt; t++) {
#ifdef CTC_GEMM_AVX2_f32
    const int qc = 16;
#else
    const int qc = 32;
#endif
    const int q = M >= N ? 16 : qc, p0 = n * t / nt / q * q, p1 = t == nt - 1 ? n : n * (t + 1) / nt / q * q;
    if (M >= N) ctc_matmul_block_f32(ta, tb, 0, K, a, lda, b, ldb, c2, N, p0, p1, 0, N);
    else ctc_matmul_block_f32(ta, tb, 0, K, a, lda, b, ldb, c2, N, 0, M, p0, p1);
  }
  const int bad = memcmp(c1, c2, sizeof(float) * (size_t)M * N) != 0;
  if (bad) printf("SPLIT ta=%d tb=%d M=%d N=%d K=%d threads=%d: other bits than one call\n", ta, tb, M, N, K, nt);
  free(a), free(b), free(c1), free(c2);
  return bad;
}
#endif

int main(void) {
#if defined(CTC_GEMM_AMX_BF16)   /* (tests/test_gemm_bf16.py's ctc_matmul_block_bf16) */
  printf(ctc_amx_granted() ? "kernel amx\n" : "kernel avx512bf16\n");
#elif defined(CTC_GEMM_AVX512BF16)
  printf("kernel avx512bf16\n");
#elif defined(CTC_GEMM_AVX512_f32)
  printf("kernel avx512\n");
#elif defined(CTC_GEMM_AVX2_f32)
  printf("kernel avx2\n");
#elif defined(CTC_GEMM_NEON_f32)
  printf("kernel neon\n");
#else
  printf("kernel none\n");   /* ctc_gemm_f32, or OpenBLAS with CTC_HAVE_CBLAS */
#endif
#ifdef FEW   /* under QEMU */
  static const int Ms[] = {1, 5, 7, 13, 33}, Ns[] = {1, 15, 16, 17, 33}, Ks[] = {0, 13, 31, 257, 530};
#else
  static const int Ms[] = {1, 2, 5, 6, 7, 13, 31, 33, 100, 257}, Ns[] = {1, 5, 15, 16, 17, 31, 33, 100},
                   Ks[] = {0, 1, 13, 31, 33, 257, 530};
#endif
  const int nm = (int)(sizeof Ms / sizeof *Ms), nn = (int)(sizeof Ns / sizeof *Ns), nk = (int)(sizeof Ks / sizeof *Ks);
  int cases = 0, wrong = 0;
  for (int t = 0; t < 4; t++)
    for (int mi = 0; mi < nm; mi++)
      for (int ni = 0; ni < nn; ni++)
        for (int ki = 0; ki < nk; ki++) {
          wrong += one(t >> 1, t & 1, (mi + ni + ki + t) % 2, Ms[mi], Ns[ni], Ks[ki], (mi + ki) % 3);
          cases++;
        }
#ifndef FEW   /* past an M block (384 rows) and two groups of op(B) panels packed together (64 columns); C's
                rows 1024 floats apart (ldc = N + pad: the AVX-512 tiles keep their sums off C) */
  static const int L[][4] = {{400, 150, 530, 0}, {390, 129, 33, 1}, {40, 1000, 530, 24}, {13, 1023, 70, 1}};
  for (int t = 0; t < 4; t++)
    for (int s = 0; s < 4; s++) wrong += one(t >> 1, t & 1, (s + t) % 2, L[s][0], L[s][1], L[s][2], L[s][3]), cases++;
#endif
#ifndef CTC_HAVE_CBLAS
  static const int S[][3] = {{257, 100, 530}, {33, 100, 257}, {100, 31, 1100}, {1, 300, 257}};
  for (int t = 0; t < 4; t++)
    for (int s = 0; s < 4; s++)
      for (int nt = 2; nt <= 3; nt++) wrong += split(t >> 1, t & 1, S[s][0], S[s][1], S[s][2], nt), cases++;
#endif
#ifdef CTC_GEMM_PK_f32
  printf("packed panels\n");
#endif
  printf("%d cases, %d wrong\n", cases, wrong);
  return wrong != 0;
}
"""

CFLAGS = ["-std=c11", "-O2", "-Wall", "-Wextra", "-Werror", "-D_POSIX_C_SOURCE=200809L"]


def cpu_has(flag):
    try:
        with open("/proc/cpuinfo") as f:
            return any(line.startswith("flags") and f" {flag} " in line + " " for line in f)
    except OSError:
        return False


def x86():
    return os.uname().machine == "x86_64"


def have_openblas(tmp):
    (tmp / "probe.c").write_text("#include <cblas.h>\nint main(void) { return 0; }\n")
    return subprocess.run(["cc", tmp / "probe.c", "-o", tmp / "probe", "-lopenblas"], capture_output=True).returncode == 0


# variant: (-march flags, the kernel it must pick, what the CPU needs to run it)
X86 = {"avx2": (["-march=haswell"], "avx2", "avx2"),
       "avx2-blas": (["-march=haswell"], "avx2", "avx2"),   # OpenBLAS: the slivers
       "avx512": (["-march=native"], "avx512", "avx512f"),
       "portable": (["-march=x86-64"], "none", None)}


@pytest.fixture(scope="module")
def mm_dir(tmp_path_factory):
    build_ctc()
    tmp = tmp_path_factory.mktemp("gemm_isa")
    (tmp / "mm.py").write_text(MM_MODEL)
    run([CTC, "compile", tmp / "mm.py", "--entry", "mm", "--name", "net", "-o", tmp / "net.c"])
    (tmp / "fs").mkdir()
    run([CTC, "compile", tmp / "mm.py", "--entry", "mm", "--name", "net", "--freestanding", "-o", tmp / "fs" / "net.c"])
    (tmp / "main.c").write_text(HARNESS)
    (tmp / "fs" / "main.c").write_text(HARNESS)
    return tmp


def check_output(out, kernel):
    assert f"kernel {kernel}\n" in out, out[-3000:]
    assert ("packed panels\n" in out) == (kernel != "none"), out[-3000:]   # each own kernel also from packed panels
    m = re.search(r"(\d+) cases, (\d+) wrong", out)
    assert m and int(m.group(1)) > 100 and m.group(2) == "0", out[-3000:]


@pytest.mark.parametrize("variant", sorted(X86))
def test_kernel_x86(mm_dir, variant):
    if not x86():
        pytest.skip("an x86-64 host")
    march, kernel, need = X86[variant]
    if need and not cpu_has(need):
        pytest.skip(f"the CPU has no {need}")
    tmp = mm_dir
    cmd = ["cc", *CFLAGS, *march, f"-I{RT}", f"-I{tmp}", tmp / "main.c", RT_LIB, "-o", tmp / variant]
    if variant.endswith("blas"):
        if not have_openblas(tmp):
            pytest.skip("OpenBLAS (cblas.h, -lopenblas) is not installed")
        cmd[1:1] = ["-DCTC_HAVE_CBLAS", "-fopenmp"]
        cmd.append("-lopenblas")
    run(cmd + ["-lz", "-lm"])
    r = run([tmp / variant], timeout=300, env=dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1"))
    check_output(r.stdout, kernel)


ERR_MAIN = r"""
#include "net.c"
#include <stdio.h>
#include <stdlib.h>

/* C = op(A) op(B) by ctc_matmul_block_f32 for ta tb M N K (argv), A, B, C written raw to argv[6..8] */
int main(int argc, char **argv) {
  if (argc != 9) return 2;
  const int ta = atoi(argv[1]), tb = atoi(argv[2]), M = atoi(argv[3]), N = atoi(argv[4]), K = atoi(argv[5]);
  float *a = malloc(sizeof(float) * (size_t)M * K), *b = malloc(sizeof(float) * (size_t)K * N);
  float *c = malloc(sizeof(float) * (size_t)M * N);
  unsigned s = 7u;
  for (size_t i = 0; i < (size_t)M * K; i++) s = s * 1103515245u + 12345u, a[i] = (float)((s >> 9) & 0xffff) / 65536.0f - 0.5f;
  for (size_t i = 0; i < (size_t)K * N; i++) s = s * 1103515245u + 12345u, b[i] = (float)((s >> 9) & 0xffff) / 65536.0f - 0.5f;
  ctc_matmul_block_f32(ta, tb, 0, K, a, ta ? M : K, b, tb ? K : N, c, N, 0, M, 0, N);
  const float *out[3] = {a, b, c};
  const size_t n[3] = {(size_t)M * K, (size_t)K * N, (size_t)M * N};
  for (int i = 0; i < 3; i++) {
    FILE *f = fopen(argv[6 + i], "wb");
    if (!f || fwrite(out[i], sizeof(float), n[i], f) != n[i] || fclose(f)) return 3;
  }
  return 0;
}
"""


def torch_matmul(tmp_path, a, b):
    """a @ b by PyTorch in a process of its own, OpenBLAS's kernels those bench/bench.py gives it on
    this CPU (bench.openblas_coretype; the environment's OPENBLAS_CORETYPE not inherited)"""
    sys.path.insert(0, os.path.join(ROOT, "bench"))
    try:
        import bench
    finally:
        sys.path.pop(0)
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_CORETYPE"}
    if bench.openblas_coretype():
        env["OPENBLAS_CORETYPE"] = bench.openblas_coretype()
    np.save(tmp_path / "ta.npy", np.ascontiguousarray(a))
    np.save(tmp_path / "tb.npy", np.ascontiguousarray(b))
    code = ("import sys, numpy as np, torch\n"
            "a, b = (torch.from_numpy(np.load(sys.argv[i])) for i in (1, 2))\n"
            "np.save(sys.argv[3], (a @ b).numpy())\n")
    subprocess.run([sys.executable, "-c", code, tmp_path / "ta.npy", tmp_path / "tb.npy", tmp_path / "tc.npy"],
                   env=env, check=True)
    return np.load(tmp_path / "tc.npy")


@pytest.mark.parametrize("variant", ["avx2", "avx512"])
def test_kernel_error_at_pytorch_or_below(mm_dir, tmp_path, variant):
    """Each own x86 kernel's rounding error against a float64 product, beside PyTorch's float32
    matmul of the same matrices: the tiles' blocked summation (partial sums of 128 k on AVX2, 32 on
    AVX-512, added to C) keeps it at or below PyTorch's. Measured error (root mean square of
    |C - C64| / sum |a b| over C): AVX2 0.75-0.79 of PyTorch's (OpenBLAS) on these shapes (0.50-0.65
    with partial sums of 32); a whole K block (up to 512) summed in registers gives 1.20 on the first
    shape and fails. PyTorch runs in a process of its own with OpenBLAS's kernels for this CPU
    (OPENBLAS_CORETYPE as the generated program and bench/bench.py set it): left to itself, Debian's
    OpenBLAS 0.3.21 does not know an Emerald Rapids (family 6, model 207) and runs its generic
    Prescott kernels, which sum K in short blocks: 6.09e-9 on the first shape there, against 1.24e-8
    for its SkylakeX kernels, 8.59e-9 for ctc's AVX2 kernel and 7.07e-9 for its AVX-512 one."""
    if not x86():
        pytest.skip("an x86-64 host")
    march, kernel, need_flag = X86[variant]
    if not cpu_has(need_flag):
        pytest.skip(f"the CPU has no {need_flag}")
    (tmp_path / "main.c").write_text(ERR_MAIN)
    exe = tmp_path / "err"
    run(["cc", *CFLAGS, *march, f"-I{RT}", f"-I{mm_dir}", tmp_path / "main.c", RT_LIB, "-lz", "-lm", "-o", exe])
    for ta, tb, M, N, K in ((0, 1, 96, 256, 3072), (0, 0, 128, 96, 768), (1, 0, 64, 160, 2048)):
        files = [tmp_path / f"{n}.bin" for n in "abc"]
        run([exe, str(ta), str(tb), str(M), str(N), str(K), *files])
        a = np.fromfile(files[0], np.float32).reshape((K, M) if ta else (M, K))
        b = np.fromfile(files[1], np.float32).reshape((N, K) if tb else (K, N))
        c = np.fromfile(files[2], np.float32).reshape(M, N)
        opa, opb = (a.T if ta else a), (b.T if tb else b)
        ref = opa.astype(np.float64) @ opb.astype(np.float64)
        scale = np.abs(opa.astype(np.float64)) @ np.abs(opb.astype(np.float64))
        torch_c = torch_matmul(tmp_path, opa, opb)
        ours = float(np.sqrt(np.mean(((c - ref) / scale) ** 2)))
        theirs = float(np.sqrt(np.mean(((torch_c - ref) / scale) ** 2)))
        print(f"\n{variant} ta={ta} tb={tb} {M}x{N}x{K}: error {ours:.3g}, PyTorch's {theirs:.3g} "
              f"({ours / theirs:.2f})")
        assert 0 < ours <= theirs, (ta, tb, M, N, K, ours, theirs)


def test_kernel_neon(mm_dir):
    """The --freestanding model.c keeps the NEON kernel (<arm_neon.h> is freestanding)."""
    need_tools("aarch64-linux-gnu-gcc", "qemu-aarch64")
    d = mm_dir / "fs"
    assert "CTC_GEMM_NEON_f32" in (d / "net.c").read_text()
    run(["aarch64-linux-gnu-gcc", *CFLAGS, "-DFEW", f"-I{d}", d / "main.c", "-lm", "-o", d / "neon"])
    check_output(run([*QEMU, d / "neon"], timeout=600).stdout, "neon")


MLP = """
import torch
import torch.nn as nn
import torch.nn.functional as F


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(33, 257)
        self.fc2 = nn.Linear(257, 31)

    def forward(self, x):
        return self.fc2(torch.tanh(self.fc1(x)))


model = Net()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)


def train_step(x, y):
    optimizer.zero_grad()
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()
    return loss


def mm(a, b, c, d):
    return a @ b, a @ c.t(), d.t() @ b, d.t() @ c.t()


example_inputs = {"train_step": (torch.randn(13, 33), torch.zeros(13, dtype=torch.long)),
                  "forward": (torch.randn(13, 33),),
                  "mm": (torch.randn(13, 100), torch.randn(100, 31), torch.randn(31, 100), torch.randn(100, 13))}
"""


@pytest.fixture(scope="module")
def mlp_dir(tmp_path_factory):
    build_ctc()
    tmp = tmp_path_factory.mktemp("gemm_isa_mlp")
    (tmp / "mlp.py").write_text(MLP)
    run([CTC, "compile", tmp / "mlp.py", "--entry", "mm", "--entry", "train_step", "-o", tmp / "net.c"])
    return tmp


@pytest.mark.parametrize("variant", ["avx2", "avx2-blas", "avx512", "portable"])
def test_model_x86(mlp_dir, tmp_path, variant):
    if not x86():
        pytest.skip("an x86-64 host")
    march, kernel, cpu = X86[variant]
    if cpu and not cpu_has(cpu):
        pytest.skip(f"the CPU has no {cpu}")
    cc = tmp_path / "cc"   # ctc build's flags, then the -march that wins over its -march=native
    cc.write_text('#!/bin/sh\nexec cc "$@" ' + " ".join(march) + "\n")
    cc.chmod(0o755)
    blas = variant.endswith("blas")   # ctc build's default where OpenBLAS is installed: it keeps the slivers
    if blas and not have_openblas(tmp_path):
        pytest.skip("OpenBLAS (cblas.h, -lopenblas) is not installed")
    macros = run([cc, "-std=c11", "-march=native", "-D_POSIX_C_SOURCE=200809L", f"-I{RT}", "-E", "-dM",
                  *(["-DCTC_HAVE_CBLAS"] if blas else []), mlp_dir / "net.c"]).stdout
    picked = sorted(set(re.findall(r"#define CTC_GEMM_(\w+)_f32 1", macros)) - {"X86", "PK"})
    assert picked == ([] if kernel == "none" else [kernel.upper()]), picked
    exe = tmp_path / "net"
    run([CTC, "build", mlp_dir / "mlp.py", "--entry", "mm", "--entry", "train_step", "-o", exe, "--cc", cc,
         *([] if blas else ["--no-blas"])])
    mod = load_module(str(mlp_dir / "mlp.py"), "gemm_isa_mlp_" + variant)
    rng = np.random.default_rng(3)
    arrs = [rng.standard_normal(s).astype(np.float32) for s in ((13, 100), (100, 31), (31, 100), (100, 13))]
    args = [exe, "run", "mm"]
    for i, a in enumerate(arrs):
        np.save(tmp_path / f"m{i}.npy", a)
        args += ["--input", tmp_path / f"m{i}.npy"]
    for i in range(4):
        args += ["--output", tmp_path / f"o{i}.npy"]
    run(args)
    want = mod.mm(*[torch.from_numpy(a) for a in arrs])
    for i in range(4):
        compare(f"{variant}: mm output {i}", np.load(tmp_path / f"o{i}.npy"), want[i].numpy(), 1e-4, 1e-5)
    # two SGD steps: Linear forward (bias, tanh epilogue), grad input (A B), grad weight (A^T B)
    w = tmp_path / "w0.safetensors"
    st_write(w, state_dict_np(mod.model))
    for step in range(2):
        x = rng.standard_normal((13, 33)).astype(np.float32)
        y = rng.integers(0, 31, 13).astype(np.int64)
        np.save(tmp_path / "x.npy", x)
        np.save(tmp_path / "y.npy", y)
        nxt = tmp_path / f"w{step + 1}.safetensors"
        run([exe, "run", "train_step", "--weights", w, "--input", tmp_path / "x.npy", "--input", tmp_path / "y.npy",
             "--output", tmp_path / "loss.npy", "--save", nxt])
        want = float(mod.train_step(torch.from_numpy(x), torch.from_numpy(y)))
        compare(f"{variant}: loss {step}", np.load(tmp_path / "loss.npy"), np.float32(want), 1e-5, 1e-6)
        w = nxt
    got = st_read(w)
    for k, v in mod.model.state_dict().items():
        compare(f"{variant}: {k} after 2 steps", got[k], v.numpy(), 1e-4, 1e-6)


GPT_MAIN = r"""
#include <stdio.h>
#include "net.h"

static _Alignas(64) unsigned char arena[NET_ARENA_BYTES];
static float logits[128 * 256];

int main(void) {
  int64_t idx[128];
  net_t m;
  for (int i = 0; i < 128; i++) idx[i] = (i * 37 + 11) % 256;
  if (net_init(&m, arena, sizeof arena) != CTC_OK || net_forward(&m, idx, logits) != CTC_OK) return 2;
  for (int i = 0; i < 128 * 256; i++) printf("%.9g\n", logits[i]);
  return 0;
}
"""


def test_gpt_aarch64(tmp_path):
    """The bench GPT (4 layers, 128 tokens, batch 1): the logits of the NEON build under QEMU
    against the x86 build of the same C (the portable GEMM). Only the GEMMs' summation order
    differs (blocks of 128 k in registers vs 8 partial sums): float32 sums of at most 1,024 terms
    through 4 layers, so logits of size ~1 agree to ~1e-6; measured 6e-7."""
    need_tools("aarch64-linux-gnu-gcc", "qemu-aarch64")
    if not os.path.exists(GPT):
        pytest.skip(f"{GPT} is missing")
    build_ctc()
    src = open(GPT).read() + ('\n\nmodel = make_model()\n'
                              'example_inputs = {"forward": (torch.zeros(1, BLOCK, dtype=torch.long),)}\n')
    (tmp_path / "gpt.py").write_text(src)
    run([CTC, "compile", tmp_path / "gpt.py", "--freestanding", "--name", "net", "-o", tmp_path / "net.c"])
    (tmp_path / "main.c").write_text(GPT_MAIN)
    outs = {}
    for arch, cc, pre in (("x86", "cc", []), ("a64", "aarch64-linux-gnu-gcc", QEMU)):
        run([cc, *CFLAGS, "-ffreestanding", "-c", tmp_path / "net.c", "-o", tmp_path / f"net_{arch}.o"])
        run([cc, *CFLAGS, f"-I{tmp_path}", tmp_path / "main.c", tmp_path / f"net_{arch}.o", "-lm",
             "-o", tmp_path / f"gpt_{arch}"])
        outs[arch] = np.array(run([*pre, tmp_path / f"gpt_{arch}"], timeout=600).stdout.split(), dtype=np.float64)
    assert outs["x86"].shape == (128 * 256,) and np.abs(outs["x86"]).max() > 0.1
    d = compare("gpt logits, aarch64 vs x86", outs["a64"], outs["x86"], 1e-4, 1e-5)
    print(f"\ngpt aarch64 (NEON GEMM) vs x86: max |diff| {d:.3g}")
