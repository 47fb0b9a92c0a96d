"""Embedded deployment: `ctc compile --freestanding --embed-weights` (codegen_c/freestanding_c.c).

The seed CNN (examples/seed_cnn.py) with random-init weights saved from PyTorch is compiled
freestanding with its weights as const arrays, built with `-Wall -Wextra -Werror -ffreestanding`
for a Cortex-M4F (arm-none-eabi-gcc, embedded/cortex_m: startup, linker script, semihosting)
and run under qemu-system-arm's mps2-an386 on Fashion-MNIST test images embedded as a C array;
its logits come back over semihosting as the bits of each float and are compared with PyTorch.
The same model.c is built for aarch64-linux-gnu and run under qemu-aarch64. `--no-libm`'s math
functions are swept against glibc on the host, and what cannot be freestanding is refused.

Tolerance (rtol 1e-4, atol 1e-6): the logits are O(0.1) and each is a sum of a few hundred f32
products; the generated code sums in another order than PyTorch's convolution and GEMM
kernels, which moves results by a few ulp of the partial sums (observed: below 1e-7).
Skipped (with the reason) only where a cross compiler or QEMU is not installed
(scripts/install-deps.sh installs them)."""
import gzip
import os
import re
import struct
import subprocess

import numpy as np
import pytest

from ctc_testlib import (CTC, EXAMPLES, ROOT, ULPS_C, compare, load_module, need_tools, run, st_write, state_dict_np,
                         x86_has_fma)

torch = pytest.importorskip("torch")

EMB = os.path.join(ROOT, "embedded", "cortex_m")
FMNIST = "/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz"
M4 = ["-mcpu=cortex-m4", "-mthumb", "-mfloat-abi=hard", "-mfpu=fpv4-sp-d16"]
STRICT = ["-std=c11", "-O2", "-Wall", "-Wextra", "-Werror", "-ffreestanding"]
NIMG = 4

MAIN_C = r"""
#include <stdint.h>
#include <string.h>
#include "net.h"
#include "images.h"
#ifdef SEMIHOST
#include "semihost.h"
#define put_str sh_puts
#define put_hex sh_put_hex
#else
#include <stdio.h>
static void put_str(const char *s) { fputs(s, stdout); }
static void put_hex(uint32_t v) { printf("%08x", (unsigned)v); }
#endif

static _Alignas(64) unsigned char arena[NET_ARENA_BYTES];

int main(void) {
  net_t m;
  if (net_init(&m, arena, sizeof arena) != CTC_OK) return 2;
  for (int i = 0; i < NIMG; i++) {
    float out[10];
#ifdef SEMIHOST
    sh_tick_start();
#endif
    if (net_forward(&m, images[i], out) != CTC_OK) return 3;
#ifdef SEMIHOST
    const uint32_t t = sh_tick_elapsed();
#endif
    put_str("logits");
    for (int j = 0; j < 10; j++) {
      uint32_t u;
      memcpy(&u, &out[j], sizeof u);
      put_str(" ");
      put_hex(u);
    }
    put_str("\n");
#ifdef SEMIHOST
    put_str("ticks ");
    sh_put_dec(t);
    put_str("\n");
#endif
  }
  return 0;
}
"""


def fashion_images(n):
    if not os.path.exists(FMNIST):
        pytest.skip(f"{FMNIST} missing (Debian's dataset-fashion-mnist)")
    with gzip.open(FMNIST, "rb") as f:
        magic, count, rows, cols = struct.unpack(">IIII", f.read(16))
        assert magic == 2051 and rows == cols == 28
        data = np.frombuffer(f.read(n * 784), dtype=np.uint8)
    return (data.reshape(n, 1, 28, 28).astype(np.float32) / 255.0)


def parse_logits(text):
    rows = [[struct.unpack(">f", bytes.fromhex(h))[0] for h in line.split()[1:]]
            for line in text.splitlines() if line.startswith("logits")]
    return np.array(rows, dtype=np.float32)


@pytest.fixture(scope="module")
def seed(tmp_path_factory):
    """The seed CNN compiled freestanding with embedded random-init weights; PyTorch's logits."""
    d = tmp_path_factory.mktemp("embedded")
    torch.manual_seed(0)
    net = load_module(os.path.join(EXAMPLES, "seed_cnn.py"), "seed_cnn_embedded").Network().eval()
    w = d / "w.safetensors"
    st_write(str(w), state_dict_np(net))
    images = fashion_images(NIMG)
    with torch.no_grad():
        want = np.stack([net(torch.from_numpy(images[i:i + 1]))[0].numpy() for i in range(NIMG)])
    r = run([CTC, "compile", os.path.join(EXAMPLES, "seed_cnn.py"), "--entry", "forward", "--input",
             "t=f32[1,1,28,28]", "--name", "net", "--freestanding", "--embed-weights", w, "-o", d / "net.c",
             "--stats"])
    m = re.search(r"freestanding: flash (\d+) bytes of weights.*RAM (\d+) bytes", r.stderr)
    assert m, r.stderr
    flash, ram = int(m.group(1)), int(m.group(2))
    nparam = sum(p.numel() for p in net.parameters())
    assert flash == 4 * nparam
    with open(d / "images.h", "w") as f:
        f.write(f"#define NIMG {NIMG}\nstatic const float images[NIMG][784] = {{\n")
        for i in range(NIMG):
            f.write("  {" + ", ".join(f"{v:.9e}f" for v in images[i].ravel()) + "},\n")
        f.write("};\n")
    (d / "main.c").write_text(MAIN_C)
    return {"dir": d, "want": want, "flash": flash, "ram": ram, "w": w}


def test_freestanding_text(seed):
    """The files include nothing but the allowed headers and hold no runtime, I/O, OpenMP or BLAS."""
    c = (seed["dir"] / "net.c").read_text()
    h = (seed["dir"] / "net.h").read_text()
    incs = set(re.findall(r'#include\s*[<"]([^>"]+)[>"]', c + h))
    # (arm_neon.h: the aarch64 GEMM's, under __aarch64__ && __ARM_NEON; a freestanding header)
    assert incs <= {"net.h", "stddef.h", "stdint.h", "string.h", "math.h", "arm_neon.h"}, incs
    for bad in ("stdio", "stdlib", "malloc", "FILE", "fopen", "omp ", "omp.h", "_OPENMP", "cblas", "_Pragma", "ctc_model"):
        assert bad not in c and bad not in h, bad
    assert "static const float ctc_w_0[150]" in c   # conv1.weight: 6*1*5*5, in flash
    assert f"#define NET_ARENA_BYTES ((size_t){seed['ram']})" in h
    # status codes: the values of ctc_rt.h's enum
    rt = open(os.path.join(ROOT, "runtime_min", "ctc_rt.h")).read()
    body = re.search(r"typedef enum ctc_status \{(.*?)\} ctc_status;", rt, re.S).group(1)
    names = re.findall(r"^\s*(CTC_[A-Z_]+)", body, re.M)
    for name, val in re.findall(r"(CTC_[A-Z_]+) = (\d+)", h):
        assert names.index(name) == int(val), name


def test_cortex_m4_qemu(seed):
    need_tools("arm-none-eabi-gcc", "qemu-system-arm")
    d = seed["dir"]
    elf = d / "net.elf"
    run(["arm-none-eabi-gcc", *STRICT, *M4, "-DSEMIHOST", f"-I{EMB}", f"-I{d}", "-nostartfiles", "-T",
         os.path.join(EMB, "mps2_an386.ld"), os.path.join(EMB, "startup.c"), os.path.join(EMB, "semihost.c"),
         d / "net.c", d / "main.c", "-o", elf])
    # the weights are in flash (below 0x20000000), the arena is the RAM's .bss
    syms = run(["arm-none-eabi-nm", "-S", elf]).stdout.split("\n")
    w = [line.split() for line in syms if re.search(r"\bctc_w_\d+$", line)]
    assert len(w) == 10 and all(int(s[0], 16) < 0x20000000 for s in w), w
    assert sum(int(s[1], 16) for s in w) == seed["flash"]
    arena = [line.split() for line in syms if line.endswith(" arena")]
    assert arena and int(arena[0][0], 16) >= 0x20000000 and int(arena[0][1], 16) == seed["ram"]
    r = run(["qemu-system-arm", "-machine", "mps2-an386", "-nographic", "-semihosting", "-icount", "shift=0",
             "-kernel", elf], timeout=120)
    out = r.stdout + r.stderr   # semihosting writes to stderr when stdout is not a terminal
    got = parse_logits(out)
    assert got.shape == (NIMG, 10), out
    diff = compare("cortex-m4 logits", got, seed["want"], rtol=1e-4, atol=1e-6)
    ticks = [int(t) for t in re.findall(r"ticks (\d+)", out)]
    # SysTick counts the 25 MHz core clock; under -icount shift=0 one instruction is 1 ns: 40 per tick
    print(f"\ncortex-m4: {ticks[-1] * 40} instructions per inference (QEMU -icount), "
          f"flash {seed['flash']} B of weights, RAM arena {seed['ram']} B; max |diff| {diff:.3g}")
    size = run(["arm-none-eabi-size", elf]).stdout
    print(size)


def test_aarch64_qemu_user(seed):
    need_tools("aarch64-linux-gnu-gcc", "qemu-aarch64")
    d = seed["dir"]
    run(["aarch64-linux-gnu-gcc", *STRICT, "-c", d / "net.c", "-o", d / "net_a64.o"])
    run(["aarch64-linux-gnu-gcc", "-std=c11", "-O2", f"-I{d}", d / "main.c", d / "net_a64.o", "-o", d / "net_a64"])
    r = run(["qemu-aarch64", "-L", "/usr/aarch64-linux-gnu", d / "net_a64"], timeout=120)
    got = parse_logits(r.stdout)
    assert got.shape == (NIMG, 10), r.stdout
    compare("aarch64 logits", got, seed["want"], rtol=1e-4, atol=1e-6)


MATH_MODEL = """
import torch
import torch.nn as nn


class MathNet(nn.Module):
    def forward(self, x):
        a = torch.exp(x) + torch.log(torch.abs(x) + 1) + torch.sqrt(torch.abs(x))
        b = torch.sigmoid(x) + torch.tanh(x) + torch.erf(x) + torch.expm1(x) + torch.log1p(torch.abs(x))
        b = b + torch.nn.functional.gelu(x)   # erf's GELU, as a transformer's MLP has it
        c = torch.floor(x) + torch.trunc(x) + torch.round(x) + torch.copysign(x, -x)
        return a, b, c


model = MathNet()
example_inputs = {"forward": (torch.randn(4, 8),)}
"""

# The functions --no-libm brings and their largest error in ulps against the exactly rounded
# value (glibc's double function), on the sweep below; docs/microcontrollers.md states the same bounds.
MATH_BOUNDS = {"ctc_m_fabsf": 0, "ctc_m_truncf": 0, "ctc_m_floorf": 0, "ctc_m_nearbyintf": 0,
               "ctc_m_copysignf": 0, "ctc_m_expf": 1.0, "ctc_exp_f32": 1.0, "ctc_tanh_f32": 1.5,
               "ctc_m_logf": 1.0, "ctc_log1p_f32": 1.0, "ctc_m_expm1f": 2.5, "ctc_m_sqrtf": 0.5, "ctc_erf_f32": 1.0}

SWEEP_C = r"""
#include "mnet.c"
#undef fabsf
#undef copysignf
#undef truncf
#undef floorf
#undef nearbyintf
#undef expf
#undef logf
#undef expm1f
#undef sqrtf
#undef INFINITY
#undef NAN
#undef isnan
#undef isinf
#undef isfinite
#undef signbit
#include <math.h>
#include <stdio.h>

static float fl(uint32_t u) { float x; memcpy(&x, &u, 4); return x; }

""" + ULPS_C + r"""
static double neg_copysign(double x) { return copysign(x, -x); }
static float c_copysign(float x) { return ctc_m_copysignf(x, -x); }

int main(void) {
  static const struct { const char *name; float (*f)(float); double (*ref)(double); } fns[] = {
      {"ctc_m_fabsf", ctc_m_fabsf, fabs}, {"ctc_m_truncf", ctc_m_truncf, trunc},
      {"ctc_m_floorf", ctc_m_floorf, floor}, {"ctc_m_nearbyintf", ctc_m_nearbyintf, nearbyint},
      {"ctc_m_copysignf", c_copysign, neg_copysign}, {"ctc_m_expf", ctc_m_expf, exp},
      {"ctc_exp_f32", ctc_exp_f32, exp}, {"ctc_tanh_f32", ctc_tanh_f32, tanh}, {"ctc_m_logf", ctc_m_logf, log},
      {"ctc_log1p_f32", ctc_log1p_f32, log1p}, {"ctc_m_expm1f", ctc_m_expm1f, expm1},
      {"ctc_m_sqrtf", ctc_m_sqrtf, sqrt}, {"ctc_erf_f32", ctc_erf_f32, erf}};
  static const float special[] = {0.0f, -0.0f, 1.0f, -1.0f, 0.5f, -0.5f, 1.5f, 2.5f, -2.5f, 88.7f, 88.8f, -104.0f,
                                  -87.0f, 3.92f, 4.0f, 1e-30f, 1.4e-45f, -1.4e-45f, 1.17549435e-38f, 8388608.5f,
                                  8388607.5f, 3.4e38f, -3.4e38f, -0.999999940f, 1e-7f, -1e-7f};
  const int nsp = (int)(sizeof special / sizeof special[0]);
  for (size_t k = 0; k < sizeof fns / sizeof fns[0]; k++) {
    double worst = 0;
    float wx = 0;
    /* every 16381st bit pattern; every 2049th of [-10, 10]; special values, +-inf, NaN */
    for (int pass = 0; pass < 3; pass++) {
      const uint64_t hi = pass == 0 ? 0x100000000ull : pass == 1 ? 0x41200000ull : (uint64_t)nsp + 3;
      const uint64_t st = pass == 0 ? 16381 : pass == 1 ? 2049 : 1;
      for (uint64_t u = 0; u < hi; u += st)
        for (int sgn = 0; sgn < (pass == 1 ? 2 : 1); sgn++) {
          const float x = pass == 2 ? ((int)u < nsp ? special[u] : u == hi - 3 ? INFINITY : u == hi - 2 ? -INFINITY : NAN)
                                    : fl((uint32_t)u | (sgn ? 0x80000000u : 0));
          const double e = ulps(fns[k].f(x), fns[k].ref((double)x));
          if (!(e <= worst)) worst = e == e ? e : INFINITY, wx = x;
        }
    }
    printf("%s %.4f %.9g\n", fns[k].name, worst, wx);
  }
  return 0;
}
"""


@pytest.fixture(scope="module")
def mathnet(tmp_path_factory):
    d = tmp_path_factory.mktemp("nolibm")
    (d / "mathmodel.py").write_text(MATH_MODEL)
    run([CTC, "compile", d / "mathmodel.py", "--freestanding", "--no-libm", "--name", "mnet", "-o", d / "mnet.c"])
    return d


# "": no FMA instruction (a * b + c rounds twice); haswell: tanh's polynomials as fused multiply-adds
# (CTC_FMA_F32), as a model built with -march=native on an AVX2 or AVX-512 CPU computes them
@pytest.mark.parametrize("march", ["", "-march=haswell"])
def test_no_libm_sweep(mathnet, march):
    """ctc's math functions against glibc on a sweep of every 16381st float, [-10, 10] more densely and
    the special values (signed zeros, subnormals, infinities, NaN, rounding ties)."""
    if march and not x86_has_fma():
        pytest.skip("an x86-64 CPU with FMA")
    d = mathnet
    h = (d / "mnet.h").read_text()
    assert "ctc's own" in h and "expm1f" in h
    (d / "sweep.c").write_text(SWEEP_C)
    exe = d / ("sweep" + march.replace("-march=", "_"))
    run(["gcc", "-std=c11", "-O2", *([march] if march else []), "-fno-builtin", "-w", f"-I{d}", d / "sweep.c", "-o",
         exe, "-lm"])
    out = run([exe], timeout=120).stdout
    seen = {}
    for line in out.splitlines():
        name, err, x = line.split()
        seen[name] = float(err)
        assert float(err) <= MATH_BOUNDS[name], f"{name}: {err} ulp at x = {x} (bound {MATH_BOUNDS[name]})"
    assert set(seen) == set(MATH_BOUNDS)


def test_no_libm_links_without_libm(mathnet):
    """The --no-libm file compiles for the Cortex-M4 with -Werror and calls nothing but memcpy/memset:
    no libm, and no soft double helper of libgcc (__aeabi_dadd, __aeabi_f2d, ...): every math
    function, erf's polynomials included, is float-only."""
    need_tools("arm-none-eabi-gcc")
    d = mathnet
    run(["arm-none-eabi-gcc", *STRICT, *M4, "-c", d / "mnet.c", "-o", d / "mnet.o"])
    undef = {line.split()[-1] for line in run(["arm-none-eabi-nm", "-u", d / "mnet.o"]).stdout.splitlines()}
    assert undef <= {"memcpy", "memset"}, undef


def test_no_libm_values(mathnet):
    """The --no-libm model's outputs match PyTorch (host build of the same file)."""
    d = mathnet
    x = np.linspace(-3.0, 3.0, 32, dtype=np.float32).reshape(4, 8)
    x[0, 0] = 2.5   # a rounding tie
    main = r"""
#include <stdio.h>
#include "mnet.h"
static _Alignas(64) unsigned char arena[MNET_ARENA_BYTES];
int main(void) {
  static const float x[32] = {%s};
  float a[32], b[32], c[32];
  mnet_t m;
  if (mnet_init(&m, arena, sizeof arena) || mnet_forward(&m, x, a, b, c)) return 1;
  for (int i = 0; i < 32; i++) printf("%%.9g %%.9g %%.9g\n", a[i], b[i], c[i]);
  return 0;
}
""" % ", ".join(f"{v:.9e}f" for v in x.ravel())
    (d / "main.c").write_text(main)
    run(["gcc", "-std=c11", "-O2", "-Wall", "-Wextra", "-Werror", f"-I{d}", d / "main.c", d / "mnet.c", "-o",
         d / "mnet"])
    got = np.array([[float(v) for v in line.split()] for line in run([d / "mnet"]).stdout.splitlines()])
    mod = {}
    exec(MATH_MODEL, mod)
    with torch.no_grad():
        want = [t.numpy().ravel() for t in mod["model"](torch.from_numpy(x))]
    for k, name in enumerate("abc"):
        compare(f"output {name}", got[:, k], want[k], rtol=1e-5, atol=1e-6)


def test_refusals(seed, tmp_path):
    """What cannot be freestanding is an error (exit 1) naming the reason, not wrong code."""
    seed_py = os.path.join(EXAMPLES, "seed_cnn.py")
    base = ["--input", "t=f32[1,1,28,28]", "-o", tmp_path / "x.c"]

    def refused(args, text):
        r = run([CTC, *args], check=False)
        assert r.returncode == 1 and text in r.stderr, (args, r.returncode, r.stderr)

    # the training step updates parameters that --embed-weights makes const
    refused(["compile", seed_py, "--freestanding", "--embed-weights", seed["w"], *base], "train_step")
    refused(["compile", seed_py, "--entry", "forward", "--freestanding", "--profile", *base], "--profile")
    refused(["build", seed_py, "--freestanding", "-o", tmp_path / "x"], "goes with 'compile'")
    refused(["compile", seed_py, "--embed-weights", seed["w"], *base], "goes with --freestanding")
    # weights that do not fit the model
    bad = tmp_path / "bad.safetensors"
    st_write(str(bad), {"conv1.weight": np.zeros((6, 1, 3, 3), np.float32)})
    refused(["compile", seed_py, "--entry", "forward", "--freestanding", "--embed-weights", bad, *base],
            "has shape [6, 1, 3, 3]")
    st_write(str(bad), {"conv1.weight": np.zeros((6, 1, 5, 5), np.float32)})
    refused(["compile", seed_py, "--entry", "forward", "--freestanding", "--embed-weights", bad, *base],
            "has no tensor 'conv1.bias'")
    # a math function ctc does not implement
    sin_py = tmp_path / "sin.py"
    sin_py.write_text(MATH_MODEL.replace("torch.exp(x)", "torch.sin(x)"))
    refused(["compile", sin_py, "--freestanding", "--no-libm", "-o", tmp_path / "s.c"], "'sinf'")
    # with libm it is fine, and the header names the functions
    run([CTC, "compile", sin_py, "--freestanding", "-o", tmp_path / "s.c"])
    assert "sinf" in (tmp_path / "s.h").read_text()


BN_MODEL = """
import torch
import torch.nn as nn


class BnNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3)
        self.bn = nn.BatchNorm2d(4)
        self.fc = nn.Linear(4 * 6 * 6, 5)

    def forward(self, x):
        x = torch.relu(self.bn(self.conv(x)))
        return torch.sigmoid(self.fc(x.reshape(x.shape[0], -1)))


model = BnNet().eval()
example_inputs = {"forward": (torch.randn(2, 1, 8, 8),)}
"""


@pytest.mark.parametrize("libm", [True, False])
def test_buffers_from_checkpoint(tmp_path, libm):
    """Weights from a torch.save checkpoint: buffers (BatchNorm's running statistics) in flash,
    the int64 counter no entry reads left out (an unused const array would break -Werror), and
    sqrtf/expf from libm or --no-libm; the host build of the same file matches PyTorch."""
    (tmp_path / "bn.py").write_text(BN_MODEL)
    mod = load_module(str(tmp_path / "bn.py"), "bn_embedded")
    net = mod.model
    torch.manual_seed(1)
    with torch.no_grad():
        for p in net.parameters():
            p.uniform_(-0.5, 0.5)
        net.bn.running_mean.uniform_(-0.5, 0.5)
        net.bn.running_var.uniform_(0.5, 2.0)
    torch.save({"model": net.state_dict(), "step": 3}, tmp_path / "ckpt.pt")
    r = run([CTC, "compile", tmp_path / "bn.py", "--freestanding", "--name", "bn", "--embed-weights",
             f"{tmp_path / 'ckpt.pt'}:model", "-o", tmp_path / "bn.c", "--stats"] + ([] if libm else ["--no-libm"]))
    nbytes = sum(v.numel() * 4 for k, v in net.state_dict().items() if k != "bn.num_batches_tracked")
    assert f"flash {nbytes} bytes" in r.stderr, r.stderr
    c = (tmp_path / "bn.c").read_text()
    assert "bn.num_batches_tracked i64[]: no entry reads it" in c
    assert ("#include <math.h>   /* libm: sqrtf expf */" in c) == libm
    assert ("#define expf ctc_m_expf" in c and "#define sqrtf ctc_m_sqrtf" in c) == (not libm)
    x = torch.randn(2, 1, 8, 8)
    main = r"""
#include <stdio.h>
#include "bn.h"
static _Alignas(64) unsigned char arena[BN_ARENA_BYTES];
int main(void) {
  static const float x[128] = {%s};
  float y[10];
  bn_t m;
  if (bn_init(&m, arena, sizeof arena) || bn_forward(&m, x, y)) return 1;
  for (int i = 0; i < 10; i++) printf("%%.9g\n", y[i]);
  return 0;
}
""" % ", ".join(f"{v:.9e}f" for v in x.numpy().ravel())
    (tmp_path / "main.c").write_text(main)
    run(["gcc", *STRICT, f"-I{tmp_path}", tmp_path / "main.c", tmp_path / "bn.c", "-o", tmp_path / "bn"]
        + (["-lm"] if libm else []))
    got = [float(v) for v in run([tmp_path / "bn"]).stdout.split()]
    with torch.no_grad():
        want = net(x).numpy().ravel()
    compare("bn logits", np.array(got), want, rtol=1e-5, atol=1e-6)


# An MNIST-style CNN whose forward sums (BatchNorm in eval, average pooling, a mean, layer
# norm, log_softmax): such sums used to accumulate in double, which a Cortex-M4's
# single-precision FPU emulates in software (__aeabi_dadd, __aeabi_f2d, __aeabi_d2f).
FLOAT_ONLY_NET = """
import torch
import torch.nn as nn
import torch.nn.functional as F


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 8, 3)
        self.bn = nn.BatchNorm2d(8)
        self.conv2 = nn.Conv2d(8, 8, 3, padding=1)
        self.fc = nn.Linear(8 * 7 * 7, 10)
        self.norm = nn.LayerNorm(10)

    def forward(self, x):
        h = F.relu(self.bn(self.conv1(x)))
        h = F.avg_pool2d(self.conv2(h), 2, padding=1, count_include_pad=False)
        h = F.max_pool2d(h, 2)
        h = h - h.mean(dim=(2, 3), keepdim=True)
        return F.log_softmax(self.norm(self.fc(torch.flatten(h, 1))), dim=1)
"""

FLOAT_ONLY_MAIN = r"""
#include <stdio.h>
#include "fo.h"
static _Alignas(64) unsigned char arena[FO_ARENA_BYTES];
int main(void) {
  fo_t m;
  float x[2 * 28 * 28], y[2 * 10];
  for (int i = 0; i < 2 * 28 * 28; i++) x[i] = (float)((i * 37) % 101) / 101.0f;
  if (fo_init(&m, arena, sizeof arena) != CTC_OK || fo_forward(&m, x, y) != CTC_OK) return 1;
  for (int i = 0; i < 20; i++) printf("%.9g\n", y[i]);
  return 0;
}
"""


def test_freestanding_is_float_only(tmp_path):
    """Freestanding f32 code does no double arithmetic: cross-compiled for the Cortex-M4 it
    calls only memcpy/memset and the libm functions its header lists (and libgcc's 64-bit
    integer helpers), none of the soft double helpers; on the host it matches PyTorch."""
    need_tools("arm-none-eabi-gcc")
    (tmp_path / "fo_model.py").write_text(FLOAT_ONLY_NET)
    torch.manual_seed(0)
    net = load_module(str(tmp_path / "fo_model.py"), "fo_model").Net().eval()
    with torch.no_grad():   # running statistics that are not the identity
        net.bn.running_mean.uniform_(-0.5, 0.5)
        net.bn.running_var.uniform_(0.5, 2.0)
    st_write(str(tmp_path / "w.safetensors"), state_dict_np(net))
    run([CTC, "compile", tmp_path / "fo_model.py", "--input", "x=f32[2,1,28,28]", "--name", "fo", "--freestanding",
         "--embed-weights", tmp_path / "w.safetensors", "-o", tmp_path / "fo.c"])
    run(["arm-none-eabi-gcc", *STRICT, *M4, "-c", tmp_path / "fo.c", "-o", tmp_path / "fo.o"])
    undef = {line.split()[-1] for line in run(["arm-none-eabi-nm", "-u", tmp_path / "fo.o"]).stdout.splitlines()}
    listed = set(re.search(r"and the math functions: ([^(]*)\(libm\)", (tmp_path / "fo.h").read_text()).group(1).split())
    int64_helpers = {"__aeabi_f2lz", "__aeabi_f2ulz", "__aeabi_ldivmod", "__aeabi_uldivmod", "__aeabi_lmul"}
    assert undef <= {"memcpy", "memset"} | listed | int64_helpers, undef - {"memcpy", "memset"} - listed
    # the same file on the host, against PyTorch (float sums: float32 tolerance)
    (tmp_path / "main.c").write_text(FLOAT_ONLY_MAIN)
    run(["gcc", "-std=c11", "-O2", "-Wall", "-Wextra", "-Werror", f"-I{tmp_path}", tmp_path / "fo.c",
         tmp_path / "main.c", "-lm", "-o", tmp_path / "fo"])
    got = np.array([float(v) for v in run([tmp_path / "fo"]).stdout.split()], np.float32).reshape(2, 10)
    x = (np.arange(2 * 28 * 28) * 37 % 101).astype(np.float32) / np.float32(101.0)
    with torch.no_grad():
        want = net(torch.from_numpy(x.reshape(2, 1, 28, 28))).numpy()
    compare("freestanding float-only forward", got, want, rtol=1e-4, atol=1e-5)
