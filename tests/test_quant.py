"""int8 post-training quantization: `ctc compile|build --quantize int8 --calibrate X.npy`
(compiler/quantize.c, codegen_c/quant_c.c).

The seed CNN (examples/seed_cnn.py) is trained briefly with PyTorch on a subset of
Fashion-MNIST (two epochs on 8,000 images: the default run stays fast), calibrated on 500
training images, and compiled freestanding with its int8 weights embedded. Checked:
  - accuracy on the whole Fashion-MNIST test set (10,000 images) of the host build of that
    int8 model.c against PyTorch's float model: within 1 point;
  - the same model.c under qemu-system-arm (Cortex-M4F, mps2-an386): logits bit-identical to
    the host build's (integer kernels; the only float operations are x / scale on entry and
    (q - zp) * scale on exit);
  - `ctc build --quantize int8` (hosted, batch 64): `./net infer` equals the freestanding build;
  - the int8 weights equal PyTorch's torch.quantize_per_channel with scales max|w| / 127;
  - flash and RAM (--stats, the header) of the int8 and float builds;
  - a model with the other kernels (padded convolution, add of two activations, relu) and float
    fallbacks (avg pooling, tanh) against PyTorch's float model;
  - refusals (located diagnostics, exit 1).
Skipped only without the data set or (the QEMU test) the cross toolchain."""
import gzip
import os
import re
import shutil
import struct

import numpy as np
import pytest

from ctc_testlib import CTC, EXAMPLES, ROOT, load_module, run, st_write, state_dict_np

torch = pytest.importorskip("torch")
F = torch.nn.functional

FM = "/usr/share/datasets/fashion-mnist/"
EMB = os.path.join(ROOT, "embedded", "cortex_m")
M4 = ["-mcpu=cortex-m4", "-mthumb", "-mfloat-abi=hard", "-mfpu=fpv4-sp-d16"]
STRICT = ["-std=c11", "-O2", "-Wall", "-Wextra", "-Werror", "-ffreestanding"]
SEED = os.path.join(EXAMPLES, "seed_cnn.py")

# The host program around a freestanding model: images from a raw f32 file, one forward per
# image; prints the argmax per image, or (with a third argument) the logits' bits.
ACC_C = r"""
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "net.h"
static _Alignas(64) unsigned char arena[NET_ARENA_BYTES];
int main(int argc, char **argv) {
  FILE *f = fopen(argv[1], "rb");
  const int n = atoi(argv[2]);
  float *x = malloc(sizeof(float) * 784 * (size_t)n);
  if (!f || !x || fread(x, sizeof(float) * 784, (size_t)n, f) != (size_t)n) return 1;
  net_t m;
  if (net_init(&m, arena, sizeof arena) != CTC_OK) return 2;
  for (int i = 0; i < n; i++) {
    float out[10];
    if (net_forward(&m, x + 784 * i, out) != CTC_OK) return 3;
    if (argc > 3) {
      printf("logits");
      for (int j = 0; j < 10; j++) { unsigned u; memcpy(&u, &out[j], 4); printf(" %08x", u); }
      printf("\n");
    } else {
      int b = 0;
      for (int j = 1; j < 10; j++) if (out[j] > out[b]) b = j;
      putchar('0' + b);
    }
  }
  return 0;
}
"""

# Bare-metal main for QEMU: the logits of NIMG images over semihosting, and SysTick ticks.
M4_MAIN_C = r"""
#include <stdint.h>
#include <string.h>
#include "net.h"
#include "images.h"
#include "semihost.h"
static _Alignas(64) unsigned char arena[NET_ARENA_BYTES];
int main(void) {
  net_t m;
  if (net_init(&m, arena, sizeof arena) != CTC_OK) return 2;
  for (int i = 0; i < NIMG; i++) {
    float out[10];
    sh_tick_start();
    if (net_forward(&m, images[i], out) != CTC_OK) return 3;
    const uint32_t t = sh_tick_elapsed();
    sh_puts("logits");
    for (int j = 0; j < 10; j++) {
      uint32_t u;
      memcpy(&u, &out[j], sizeof u);
      sh_puts(" ");
      sh_put_hex(u);
    }
    sh_puts("\nticks ");
    sh_put_dec(t);
    sh_puts("\n");
  }
  return 0;
}
"""


def idx(name, n=None):
    path = FM + name
    if not os.path.exists(path):
        pytest.skip(f"{path} missing (Debian's dataset-fashion-mnist)")
    with gzip.open(path, "rb") as f:
        magic = struct.unpack(">I", f.read(4))[0]
        if magic == 2051:
            count, rows, cols = struct.unpack(">III", f.read(12))
            count = n or count
            return np.frombuffer(f.read(count * 784), np.uint8).reshape(count, 1, 28, 28).astype(np.float32) / 255
        count = struct.unpack(">I", f.read(4))[0]
        return np.frombuffer(f.read(n or count), np.uint8).astype(np.int64)


def parse_logits(text):
    return np.array([[struct.unpack(">f", bytes.fromhex(h))[0] for h in line.split()[1:]]
                     for line in text.splitlines() if line.startswith("logits")], dtype=np.float32)


def stats_of(stderr):
    q = re.search(r"int8: flash (\d+) bytes.*RAM (\d+) bytes", stderr)
    f = re.search(r"float32 .*flash (\d+) bytes, RAM (\d+) bytes", stderr)
    assert q and f, stderr
    return int(q.group(1)), int(q.group(2)), int(f.group(1)), int(f.group(2))


@pytest.fixture(scope="module")
def seed(tmp_path_factory):
    """The seed CNN trained briefly in PyTorch; its int8 model.c (freestanding, batch 1) built
    for the host; PyTorch's float accuracy on the test set."""
    d = tmp_path_factory.mktemp("quant")
    X, Y = idx("train-images-idx3-ubyte.gz", 8000), idx("train-labels-idx1-ubyte.gz", 8000)
    T, L = idx("t10k-images-idx3-ubyte.gz"), idx("t10k-labels-idx1-ubyte.gz")
    torch.manual_seed(0)
    net = load_module(SEED, "seed_cnn_quant").Network()
    opt = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)
    Xt, Yt = torch.from_numpy(X), torch.from_numpy(Y)
    for _ in range(2):
        perm = torch.randperm(len(X))
        for i in range(0, len(X) - 63, 64):
            b = perm[i:i + 64]
            opt.zero_grad()
            F.cross_entropy(net(Xt[b]), Yt[b]).backward()
            opt.step()
    net.eval()
    with torch.no_grad():
        logits = net(torch.from_numpy(T)).numpy()
    float_acc = float((logits.argmax(1) == L).mean())
    st_write(str(d / "w.safetensors"), state_dict_np(net))
    np.save(d / "calib.npy", X[:500])
    T.tofile(d / "t10k.bin")
    r = run([CTC, "compile", SEED, "--entry", "forward", "--input", "t=f32[1,1,28,28]", "--name", "net", "--freestanding",
             "--embed-weights", d / "w.safetensors", "--quantize", "int8", "--calibrate", d / "calib.npy", "-o",
             d / "net.c", "--stats"])
    flash, ram, fflash, fram = stats_of(r.stderr)
    (d / "acc.c").write_text(ACC_C)
    run(["cc", *STRICT, "-c", d / "net.c", "-o", d / "net.o"])
    run(["cc", "-std=c11", "-O2", f"-I{d}", d / "acc.c", d / "net.o", "-o", d / "acc"])
    return {"dir": d, "net": net, "T": T, "L": L, "logits": logits, "float_acc": float_acc, "flash": flash,
            "ram": ram, "fflash": fflash, "fram": fram}


def test_int8_accuracy_fashion_mnist(seed):
    """The int8 build's accuracy on all 10,000 test images is within 1 point of float's."""
    d = seed["dir"]
    out = run([d / "acc", d / "t10k.bin", "10000"], timeout=300).stdout
    pred = np.array([int(c) for c in out])
    assert pred.shape == (10000,)
    acc = float((pred == seed["L"]).mean())
    agree = float((pred == seed["logits"].argmax(1)).mean())
    print(f"\nFashion-MNIST test set: float (PyTorch) {seed['float_acc']:.4f}, int8 (ctc) {acc:.4f}; "
          f"same prediction on {agree:.4f} of the images")
    assert seed["float_acc"] > 0.7   # the briefly trained model is a real classifier
    assert abs(acc - seed["float_acc"]) <= 0.01
    assert agree > 0.97


def test_footprint(seed):
    """--stats: the int8 weights take a quarter of the float ones (plus int32 biases, multipliers,
    shifts), the arena holds int8 activations; the header states both."""
    net = seed["net"]
    want = 0
    for m in (net.conv1, net.conv2, net.fc1, net.fc2, net.out):
        cout = m.weight.shape[0]
        want += m.weight.numel() + 4 * cout + 4 * cout + cout   # int8 w, int32 bias, int32 M0, uint8 r
    nparam = sum(p.numel() for p in net.parameters())
    assert seed["flash"] == want and seed["fflash"] == 4 * nparam
    # int8 activations: the largest live pair is conv1's output (6x24x24) and its pooled copy (6x12x12)
    # (the window buffers, 25 and 150 bytes, fit beside them)
    assert seed["ram"] == 6 * 24 * 24 + 6 * 12 * 12
    assert seed["ram"] * 4 <= seed["fram"]
    h = (seed["dir"] / "net.h").read_text()
    assert f"#define NET_ARENA_BYTES ((size_t){seed['ram']})" in h
    assert f"#define NET_WEIGHT_BYTES ((size_t){seed['flash']})" in h
    print(f"\nseed CNN: float flash {seed['fflash']} B, RAM {seed['fram']} B; int8 flash {seed['flash']} B, "
          f"RAM {seed['ram']} B")


def c_array(text, name):
    m = re.search(r"static const \w+ " + name + r"\[(\d+)\] = \{(.*?)\};", text, re.S)
    assert m, name
    return np.array([int(v) for v in m.group(2).replace("\n", " ").split(",") if v.strip()])


def test_scheme_matches_pytorch(seed):
    """Weights: PyTorch's quantize_per_channel (qint8, zero point 0, scale max|w| / 127);
    input: scale 1/255 and zero point -128 for data in [0, 1]; the scheme in the header."""
    c = (seed["dir"] / "net.c").read_text()
    h = (seed["dir"] / "net.h").read_text()
    names = re.findall(r"weights of '([\w.]+)'.*\n.*static const int8_t (ctc_qw_\d+)", c)
    assert [n for n, _ in names] == ["conv1.weight", "conv2.weight", "fc1.weight", "fc2.weight", "out.weight"]
    for pname, arr in names:
        w = dict(seed["net"].named_parameters())[pname].detach()
        w2 = w.reshape(w.shape[0], -1)
        scales = w2.abs().amax(1).double() / 127
        q = torch.quantize_per_channel(w2, scales, torch.zeros(w.shape[0], dtype=torch.long), 0, torch.qint8)
        got = c_array(c, arr)
        assert np.array_equal(got, q.int_repr().numpy().ravel()), pname
    assert re.search(r"#define NET_IN0_SCALE 0\.00392156\d*f", h) and "#define NET_IN0_ZERO_POINT -128" in h
    assert "MultiplyByQuantizedMultiplier" in h and "symmetric per output channel" in h
    for k in ("ctc_q_conv(", "ctc_q_dot(", "ctc_q_linear(", "ctc_q_maxpool(", "ctc_q_quantize(", "ctc_q_dequantize("):
        assert k in c, k
    assert "float" not in c.split("int net_forward")[1].split("ctc_q_quantize")[1].split("ctc_q_dequantize")[0]
    # freestanding: the allowed headers only (arm_acle.h, the compiler's, for SMLAD on cores with DSP)
    incs = set(re.findall(r'#include\s*[<"]([^>"]+)[>"]', c + h))
    assert incs <= {"net.h", "stddef.h", "stdint.h", "string.h", "arm_acle.h"}, incs
    for bad in ("stdio", "stdlib", "malloc", "FILE", "omp", "cblas", "math.h"):
        assert bad not in c and bad not in h, bad


def test_int8_cortex_m4_qemu(seed):
    """The int8 model.c on QEMU's Cortex-M4F gives the host build's logits bit for bit."""
    for t in ("arm-none-eabi-gcc", "qemu-system-arm"):
        if not shutil.which(t):
            pytest.skip(f"{t} is not installed (scripts/install-deps.sh installs the cross toolchains and QEMU)")
    d = seed["dir"]
    n = 4
    with open(d / "images.h", "w") as f:
        f.write(f"#define NIMG {n}\nstatic const float images[NIMG][784] = {{\n")
        for i in range(n):
            f.write("  {" + ", ".join(f"{v:.9e}f" for v in seed["T"][i].ravel()) + "},\n")
        f.write("};\n")
    (d / "m4_main.c").write_text(M4_MAIN_C)
    elf = d / "net.elf"
    run(["arm-none-eabi-gcc", *STRICT, *M4, f"-I{EMB}", f"-I{d}", "-nostartfiles", "-T", os.path.join(EMB, "mps2_an386.ld"),
         os.path.join(EMB, "startup.c"), os.path.join(EMB, "semihost.c"), d / "net.c", d / "m4_main.c", "-o", elf])
    syms = run(["arm-none-eabi-nm", "-S", elf]).stdout.split("\n")
    w = [line.split() for line in syms if re.search(r"\bctc_q[wbmr]_\d+$", line)]
    assert run(["arm-none-eabi-objdump", "-d", elf]).stdout.count("smlad") >= 2   # the DSP extension's dot product
    assert len(w) == 20 and all(int(s[0], 16) < 0x20000000 for s in w)   # in flash
    assert sum(int(s[1], 16) for s in w) == seed["flash"]
    r = run(["qemu-system-arm", "-machine", "mps2-an386", "-nographic", "-semihosting", "-icount", "shift=0",
             "-kernel", elf], timeout=120)
    out = r.stdout + r.stderr
    got = parse_logits(out)
    host = parse_logits(run([d / "acc", d / "t10k.bin", str(n), "bits"]).stdout)
    assert got.shape == (n, 10), out
    assert np.array_equal(got.view(np.uint32), host.view(np.uint32))
    # and close to PyTorch's float logits (a few output quantization steps)
    scale = float(re.search(r"#define NET_OUT0_SCALE ([0-9.e+-]+)f", (d / "net.h").read_text()).group(1))
    assert np.abs(got - seed["logits"][:n]).max() < 8 * scale
    ticks = [int(t) for t in re.findall(r"ticks (\d+)", out)]
    text = run(["arm-none-eabi-size", elf]).stdout
    print(f"\ncortex-m4 int8: {ticks[-1] * 40} instructions per inference (QEMU -icount), flash {seed['flash']} B of "
          f"weights, RAM arena {seed['ram']} B\n{text}")


def test_int8_aarch64_qemu_user(seed):
    """The same model.c for aarch64 (-ffreestanding -Werror) under qemu-aarch64: the host's bits."""
    for t in ("aarch64-linux-gnu-gcc", "qemu-aarch64"):
        if not shutil.which(t):
            pytest.skip(f"{t} is not installed (scripts/install-deps.sh installs the cross toolchains and QEMU)")
    d = seed["dir"]
    run(["aarch64-linux-gnu-gcc", *STRICT, "-c", d / "net.c", "-o", d / "net_a64.o"])
    run(["aarch64-linux-gnu-gcc", "-std=c11", "-O2", f"-I{d}", d / "acc.c", d / "net_a64.o", "-o", d / "acc_a64"])
    got = parse_logits(run(["qemu-aarch64", "-L", "/usr/aarch64-linux-gnu", d / "acc_a64", d / "t10k.bin", "64", "bits"],
                           timeout=120).stdout)
    host = parse_logits(run([d / "acc", d / "t10k.bin", "64", "bits"]).stdout)
    assert got.shape == (64, 10) and np.array_equal(got.view(np.uint32), host.view(np.uint32))


def test_hosted_build(seed, tmp_path):
    """`ctc build --quantize int8` makes a program (batch 64, weights in the file): `./net infer`
    gives the freestanding build's logits exactly (same calibration, same integer kernels)."""
    d = seed["dir"]
    exe = tmp_path / "net"
    r = run([CTC, "build", SEED, "--weights", d / "w.safetensors", "--quantize", "int8", "--calibrate",
             d / "calib.npy", "-o", exe, "--stats", "--no-openmp", "--no-blas"])
    flash, ram, _, _ = stats_of(r.stderr)
    assert flash == seed["flash"] and ram > seed["ram"]
    x = seed["T"][:64]
    np.save(tmp_path / "x.npy", x)
    run([exe, "infer", "--input", tmp_path / "x.npy", "--output", tmp_path / "y.npy"])
    y = np.load(tmp_path / "y.npy")
    host = parse_logits(run([d / "acc", d / "t10k.bin", "64", "bits"]).stdout)
    assert np.array_equal(y.view(np.uint32), host.view(np.uint32))
    info = run([exe, "info"]).stdout
    assert "parameters: 0" in info and "f32[64, 1, 28, 28]" in info


OTHER = """
import torch
import torch.nn as nn
import torch.nn.functional as F


class Other(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Conv2d(1, 4, 3, padding=1)
        self.b = nn.Conv2d(4, 4, 3, padding=1)
        self.fc = nn.Linear(4 * 7 * 7, 10)
        self.fc2 = nn.Linear(4, 10)

    def forward(self, x):
        h = F.relu(self.a(x))
        h = F.relu(self.b(h) + h)
        g = F.adaptive_avg_pool2d(h, 1).flatten(1)
        h = torch.tanh(F.avg_pool2d(h, 2, padding=1, count_include_pad=True))
        h = F.max_pool2d(h, 2)
        return self.fc(h.reshape(-1, 4 * 7 * 7)) + self.fc2(g)


model = Other()
example_inputs = (torch.randn(2, 1, 28, 28),)
"""


OTHER_MAIN_C = r"""
#include <stdio.h>
#include "net.h"
static _Alignas(64) unsigned char arena[OTHER_ARENA_BYTES];
int main(int argc, char **argv) {
  static float x[2 * 784], y[20];
  FILE *f = fopen(argv[1], "rb"), *g = fopen(argv[2], "wb");
  other_t m;
  if (argc < 3 || !f || !g || fread(x, sizeof x, 1, f) != 1) return 1;
  if (other_init(&m, arena, sizeof arena) != CTC_OK || other_forward(&m, x, y) != CTC_OK) return 2;
  return fwrite(y, sizeof y, 1, g) == 1 && fclose(g) == 0 ? 0 : 3;
}
"""


def test_other_kernels_and_float_fallback(tmp_path):
    """Padded convolutions (padding read as the zero point), the int8 add of two activations (one
    with a fused relu), int8 average pooling with padding, global average pooling (a sum and a scale,
    one int8 step), and an op without an int8 kernel (tanh) in float between a dequantize and a
    quantize: against PyTorch's float model, within a few output quantization steps."""
    (tmp_path / "other.py").write_text(OTHER)
    torch.manual_seed(1)
    net = load_module(str(tmp_path / "other.py"), "quant_other").model.eval()
    st_write(str(tmp_path / "w.safetensors"), state_dict_np(net))
    g = torch.Generator().manual_seed(2)
    calib = torch.rand(64, 1, 28, 28, generator=g)
    x = torch.rand(2, 1, 28, 28, generator=g)
    np.save(tmp_path / "calib.npy", calib.numpy())
    np.save(tmp_path / "x.npy", x.numpy())
    run([CTC, "compile", tmp_path / "other.py", "--freestanding", "--embed-weights", tmp_path / "w.safetensors",
         "--quantize", "int8", "--calibrate", tmp_path / "calib.npy", "-o", tmp_path / "net.c"])
    c = (tmp_path / "net.c").read_text()
    body = c.split("int other_forward")[1]
    for k in ("ctc_q_conv(", "ctc_q_add(", "ctc_q_avgpool(", "tanhf(", "ctc_q_dequantize(", "ctc_q_quantize(",
              "ctc_q_maxpool(", "ctc_q_linear(", "ctc_q_sum("):
        assert k in body, k
    assert "add+relu (int8)" in body and "mean (int8)" in body and body.count("ctc_q_add(") == 2
    assert body.count("ctc_q_dequantize(") == 2   # before tanh, and the output
    (tmp_path / "main.c").write_text(OTHER_MAIN_C)
    x.numpy().tofile(tmp_path / "x.bin")
    run(["cc", *STRICT, "-c", tmp_path / "net.c", "-o", tmp_path / "net.o"])
    run(["cc", "-std=c11", "-O2", f"-I{tmp_path}", tmp_path / "main.c", tmp_path / "net.o", "-o", tmp_path / "net", "-lm"])
    run([tmp_path / "net", tmp_path / "x.bin", tmp_path / "y.bin"])
    y = np.fromfile(tmp_path / "y.bin", dtype=np.float32).reshape(2, 10)
    with torch.no_grad():
        want = net(x).numpy()
    scale = float(re.search(r"#define OTHER_OUT0_SCALE ([0-9.e+-]+)f", (tmp_path / "net.h").read_text()).group(1))
    err = np.abs(y - want).max()
    print(f"\nmax |int8 - float| {err:.4g} (output scale {scale:.4g}, logits up to {np.abs(want).max():.3g})")
    assert err < 6 * scale


SHAPES = """
import torch
import torch.nn as nn
import torch.nn.functional as F


class Shapes(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Conv2d(1, 8, 3, stride=2, padding=1)
        self.g = nn.Conv2d(8, 8, 3, padding=2, dilation=2, groups=2)
        self.d = nn.Conv2d(8, 8, 3, stride=2, groups=8, bias=False)
        self.w = nn.Parameter(torch.randn(8 * 6 * 6, 16) * 0.05)
        self.b = nn.Parameter(torch.randn(16) * 0.1)
        self.out = nn.Linear(16, 10)

    def forward(self, x):
        h = F.relu(self.a(x))
        h = F.relu(self.g(h))
        h = self.d(h)
        h = F.relu(h.flatten(1) @ self.w + self.b)
        return self.out(h)


model = Shapes()
example_inputs = (torch.randn(2, 1, 28, 28),)
"""


def test_strides_groups_dilation_and_x_at_w(tmp_path):
    """Strided, grouped, dilated and depthwise int8 convolutions, and a linear layer written as
    x @ W with W[in, out] (per-channel scales along W's columns): against PyTorch's float model."""
    (tmp_path / "shapes.py").write_text(SHAPES)
    torch.manual_seed(5)
    net = load_module(str(tmp_path / "shapes.py"), "quant_shapes").model.eval()
    st_write(str(tmp_path / "w.safetensors"), state_dict_np(net))
    g = torch.Generator().manual_seed(6)
    calib, x = torch.rand(64, 1, 28, 28, generator=g), torch.rand(2, 1, 28, 28, generator=g)
    np.save(tmp_path / "calib.npy", calib.numpy())
    run([CTC, "compile", tmp_path / "shapes.py", "--freestanding", "--embed-weights", tmp_path / "w.safetensors",
         "--quantize", "int8", "--calibrate", tmp_path / "calib.npy", "--name", "other", "-o", tmp_path / "net.c"])
    body = (tmp_path / "net.c").read_text().split("int other_forward")[1]
    assert body.count("ctc_q_conv(") == 3 and body.count("ctc_q_linear(") == 2 and body.count("ctc_q_dequantize(") == 1
    (tmp_path / "main.c").write_text(OTHER_MAIN_C)
    x.numpy().tofile(tmp_path / "x.bin")
    run(["cc", *STRICT, "-c", tmp_path / "net.c", "-o", tmp_path / "net.o"])
    run(["cc", "-std=c11", "-O2", f"-I{tmp_path}", tmp_path / "main.c", tmp_path / "net.o", "-o", tmp_path / "net"])
    run([tmp_path / "net", tmp_path / "x.bin", tmp_path / "y.bin"])
    y = np.fromfile(tmp_path / "y.bin", dtype=np.float32).reshape(2, 10)
    with torch.no_grad():
        want = net(x).numpy()
    scale = float(re.search(r"#define OTHER_OUT0_SCALE ([0-9.e+-]+)f", (tmp_path / "net.h").read_text()).group(1))
    err = np.abs(y - want).max()
    print(f"\nstrides, groups, dilation, x @ W: max |int8 - float| {err:.4g} (output scale {scale:.4g}, logits up to "
          f"{np.abs(want).max():.3g})")
    assert err < 6 * scale


BN = """
import torch
import torch.nn as nn
import torch.nn.functional as F


class WithBN(nn.Module):
    def __init__(self):
        super().__init__()
        self.c = nn.Conv2d(1, 6, 5, bias=False)
        self.bn = nn.BatchNorm2d(6)
        self.fc = nn.Linear(6 * 12 * 12, 32)
        self.bn1 = nn.BatchNorm1d(32)
        self.out = nn.Linear(32, 10)

    def forward(self, x):
        h = F.max_pool2d(F.relu(self.bn(self.c(x))), 2)
        h = F.relu(self.bn1(self.fc(h.flatten(1))))
        return self.out(h)


model = WithBN()
example_inputs = (torch.randn(4, 1, 28, 28),)
"""


def test_batchnorm_folded(tmp_path):
    """Eval-mode BatchNorm after a conv2d or linear layer (a per-channel affine map of constants)
    folds into its int8 weights and bias: the whole model runs in int8, close to PyTorch's float."""
    (tmp_path / "bn.py").write_text(BN)
    torch.manual_seed(3)
    net = load_module(str(tmp_path / "bn.py"), "quant_bn").model.eval()
    with torch.no_grad():   # statistics and affine parameters that change the result
        for bn in (net.bn, net.bn1):
            bn.running_mean.uniform_(-0.3, 0.3)
            bn.running_var.uniform_(0.05, 0.5)
            bn.weight.uniform_(-1.5, 1.5)
            bn.bias.uniform_(-0.2, 0.2)
    st_write(str(tmp_path / "w.safetensors"), state_dict_np(net))
    g = torch.Generator().manual_seed(4)
    calib, x = torch.rand(128, 1, 28, 28, generator=g), torch.rand(4, 1, 28, 28, generator=g)
    np.save(tmp_path / "calib.npy", calib.numpy())
    run([CTC, "compile", tmp_path / "bn.py", "--freestanding", "--embed-weights", tmp_path / "w.safetensors",
         "--quantize", "int8", "--calibrate", tmp_path / "calib.npy", "--name", "other", "-o", tmp_path / "net.c"])
    c = (tmp_path / "net.c").read_text()
    body = c.split("int other_forward")[1]
    assert "conv2d+affine+relu (int8)" in body and "linear+affine+relu (int8)" in body
    assert body.count("ctc_q_dequantize(") == 1 and "for (long i" not in body   # no float step
    (tmp_path / "main.c").write_text(OTHER_MAIN_C.replace("2 * 784", "4 * 784").replace("y[20]", "y[40]"))
    x.numpy().tofile(tmp_path / "x.bin")
    run(["cc", *STRICT, "-c", tmp_path / "net.c", "-o", tmp_path / "net.o"])
    run(["cc", "-std=c11", "-O2", f"-I{tmp_path}", tmp_path / "main.c", tmp_path / "net.o", "-o", tmp_path / "net"])
    run([tmp_path / "net", tmp_path / "x.bin", tmp_path / "y.bin"])
    y = np.fromfile(tmp_path / "y.bin", dtype=np.float32).reshape(4, 10)
    with torch.no_grad():
        want = net(x).numpy()
    scale = float(re.search(r"#define OTHER_OUT0_SCALE ([0-9.e+-]+)f", (tmp_path / "net.h").read_text()).group(1))
    err = np.abs(y - want).max()
    print(f"\nBatchNorm folded: max |int8 - float| {err:.4g} (output scale {scale:.4g}, logits up to "
          f"{np.abs(want).max():.3g})")
    assert err < 6 * scale


BAD = """
import torch
import torch.nn as nn
import torch.nn.functional as F


class Bad(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 4)

    def forward(self, x):
        return F.log_softmax(self.fc(x), dim=1)


model = Bad()
example_inputs = (torch.randn(2, 8),)
"""


def test_refusals(tmp_path):
    (tmp_path / "bad.py").write_text(BAD)
    (tmp_path / "good.py").write_text(BAD.replace("F.log_softmax(self.fc(x), dim=1)", "F.relu(self.fc(x))"))
    torch.manual_seed(0)
    net = load_module(str(tmp_path / "bad.py"), "quant_bad").model
    st_write(str(tmp_path / "w.safetensors"), state_dict_np(net))
    np.save(tmp_path / "calib.npy", np.random.rand(16, 8).astype(np.float32))
    np.save(tmp_path / "wrong.npy", np.random.rand(16, 9).astype(np.float32))
    base = [CTC, "compile", tmp_path / "bad.py", "-o", tmp_path / "bad.c", "--quantize", "int8"]
    cases = [
        (["--calibrate", tmp_path / "calib.npy", "--weights", tmp_path / "w.safetensors"],
         r"bad\.py:13:\d+: error: --quantize int8: no int8 kernel or float fallback for op \w+"),
        (["--weights", tmp_path / "w.safetensors"], r"--quantize int8 needs --calibrate X\.npy"),
        (["--calibrate", tmp_path / "calib.npy"], r"--quantize int8 needs the trained weights"),
        (["--calibrate", tmp_path / "wrong.npy", "--weights", tmp_path / "w.safetensors"],
         r"--calibrate: .*wrong\.npy holds f32\[16, ?9\]; the model's input needs samples of shape \[S,8\]"),
        (["--calibrate", tmp_path / "calib.npy", "--weights", tmp_path / "w.safetensors", "--target", "cuda"],
         r"--target cuda is not supported with --quantize int8"),
    ]
    for i, (extra, msg) in enumerate(cases):
        r = run(base + extra if i == 0 else [*base[:2], tmp_path / "good.py", *base[3:]] + extra, check=False)
        assert r.returncode == 1 and re.search(msg, r.stderr), (extra, r.stderr)
    (tmp_path / "sq.py").write_text(BAD.replace("F.log_softmax(self.fc(x), dim=1)", "self.fc(x) * self.fc(x)"))
    r = run([CTC, "compile", tmp_path / "sq.py", "-o", tmp_path / "sq.c", "--quantize", "int8", "--calibrate",
             tmp_path / "calib.npy", "--weights", tmp_path / "w.safetensors"], check=False)
    assert r.returncode == 1 and re.search(r"sq\.py:13:\d+: error: --quantize int8: no int8 kernel for this elementwise "
                                           r"op of an activation: mul\n(.*\n)*.*note: an elementwise op with a per-channel "
                                           r"constant folds", r.stderr), r.stderr
    r = run([CTC, "compile", tmp_path / "bad.py", "-o", tmp_path / "bad.c", "--quantize", "int4"], check=False)
    assert r.returncode == 1 and "unknown --quantize 'int4' (expected int8)" in r.stderr
    r = run([CTC, "compile", tmp_path / "bad.py", "-o", tmp_path / "bad.c", "--calibrate", "x.npy"], check=False)
    assert r.returncode == 1 and "--calibrate goes with --quantize int8" in r.stderr
