"""The GEMM of operands that hold bfloat16 values (issue 31: AVX-512 BF16 dot products on the C
target; docs/mixed-precision.md).

A GEMM or convolution whose two operands both hold bf16 values (autocast's roundings, the
weights of a .bfloat16() model: kernels/gemm.c's kn_low_operands) calls ctc_matmul_bf16 /
ctc_matmul_block_bf16. Where the compiler targets AMX (-march=native on Sapphire Rapids and later)
and Linux grants the tiles that is ctc_gemm_amx_bf16 (TDPBF16PS: 16x32 by 32x16 tiles of bf16 into
16x16 of floats); else where it targets AVX-512 BF16 (-march=native on Zen 4/5, Cooper Lake)
ctc_gemm_avx512bf16 (vdpbf16ps: pairs of bf16 products added to float sums); elsewhere the f32
GEMM, which computes the same exact products.

- test_kernel_*: test_gemm_isa.py's C main includes a generated model.c and calls
  ctc_matmul_block_bf16 on ragged shapes (odd K, K past a block, partial 12-row tiles and
  32-column panels, every ta/tb, acc on and off, leading dimensions above the matrix) of bf16
  values, each element against a float64 sum, the padding untouched; C computed in the blocks
  ctc_gemm_block gives 2 and 3 threads has the bits of one call. Built with -march=native (the AMX kernel
  where the CPU has it, else the AVX-512 BF16 one where it has that), -march=native without AMX (where
  the CPU has AMX: the AVX-512 BF16 kernel),
  -march=skylake-avx512 (AVX-512 without BF16: the f32 kernel) and -march=x86-64 (portable).
- test_calls: which calls the generated code makes: bf16 for autocast's linear layers and
  convolutions (forward and both backward GEMMs) and for a .bfloat16() model, f32 for a
  float32 model and for GEMMs whose operand is not a bf16 value; stride-1 convolutions whose
  output is the size of their input as implicit GEMMs (ctc_conv_pix_bf16 for the forward and
  input gradient, ctc_conv_wgrad_bf16), with the unfolded tiles as the other branch.
- test_cnn_*: an autocast CNN (12x12 images: 16-pixel vectors that straddle rows; a 3x3 and
  a 5x5 convolution written as implicit GEMMs, a strided one and a 1x1 one as GEMMs) built
  with both kernels (the implicit GEMMs only with AVX-512 BF16), its forward and training step against
  PyTorch 1.13's CPU autocast: within one bf16 rounding of it, and ctc's distance to a float64
  run no larger than PyTorch's."""
import os
import re

import numpy as np
import pytest
import torch

from ctc_testlib import CTC, ROOT, build_ctc, load_module, run, st_read, st_write, state_dict_np
from test_autocast import bf16_ulp
from test_gemm_isa import HARNESS as F32_HARNESS
from test_gemm_isa import cpu_has, x86

RT = os.path.join(ROOT, "runtime_min")
RT_LIB = os.path.join(ROOT, "build", "libctc_rt.a")
CFLAGS = ["-std=c11", "-O2", "-Wall", "-Wextra", "-Werror", "-D_POSIX_C_SOURCE=200809L"]

MM_MODEL = """
import torch


def mm(a, b):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        return (a @ b).float()


example_inputs = {"mm": (torch.ones(7, 9), torch.ones(9, 20))}
"""

# test_gemm_isa.py's harness (ragged shapes against a float64 sum, the padding untouched, the
# same bits in 2 and 3 threads' blocks) on ctc_matmul_block_bf16, its operands bf16 values.
URAND_F32 = ("static float urand(void) { seed = seed * 1103515245u + 12345u; "
             "return (float)((seed >> 9) & 0xffff) / 65536.0f - 0.5f; }")
URAND_BF16 = """/* a bf16 value (at most 8 significant bits) in [-16, 16) */
static float urand(void) {
  seed = seed * 1103515245u + 12345u;
  return (float)((int)((seed >> 12) & 0xff) - 128) / 64.0f * (float)(1 << ((seed >> 20) & 3));
}"""
assert URAND_F32 in F32_HARNESS and F32_HARNESS.count("ctc_matmul_block_f32(") == 4
HARNESS = F32_HARNESS.replace(URAND_F32, URAND_BF16).replace("ctc_matmul_block_f32(", "ctc_matmul_block_bf16(")

# variant: (-march, the kernel it must pick, the CPU flag it needs)
VARIANTS = {"native": ("-march=native", "amx" if cpu_has("amx_bf16") else "avx512bf16", "avx512_bf16"),
            "noamx": ("-march=native -mno-amx-tile -mno-amx-bf16 -mno-amx-int8", "avx512bf16", "amx_bf16"),
            "avx512": ("-march=skylake-avx512", "avx512", "avx512f"),
            "portable": ("-march=x86-64", "none", None)}


@pytest.fixture(scope="module")
def mm_dir(tmp_path_factory):
    build_ctc()
    tmp = tmp_path_factory.mktemp("gemm_bf16")
    (tmp / "mm.py").write_text(MM_MODEL)
    run([CTC, "compile", tmp / "mm.py", "--entry", "mm", "--name", "net", "-o", tmp / "net.c"])
    (tmp / "main.c").write_text(HARNESS)
    return tmp


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_kernel(mm_dir, variant):
    if not x86():
        pytest.skip("an x86-64 host")
    march, kernel, need = VARIANTS[variant]
    if need and not cpu_has(need):
        pytest.skip(f"the CPU has no {need}")
    exe = mm_dir / variant
    run(["cc", *CFLAGS, *march.split(), f"-I{RT}", f"-I{mm_dir}", mm_dir / "main.c", RT_LIB, "-o", exe, "-lz", "-lm"])
    out = run([exe], timeout=300).stdout
    assert f"kernel {kernel}\n" in out, out[-3000:]
    m = re.search(r"(\d+) cases, (\d+) wrong", out)
    assert m and int(m.group(1)) > 1000 and m.group(2) == "0", out[-3000:]


HEAD = "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n\n"
# a model file's autocast steps over its class Net (SGD with momentum)
STEPS = """

model = Net()
optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)


def infer(images):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        return model(images).float()


def train_step(images, labels):
    optimizer.zero_grad()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = F.cross_entropy(model(images), labels)
    loss.backward()
    optimizer.step()
    return loss
"""

CNN = HEAD + """
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 24, 3, padding=1)
        self.conv_mid = nn.Conv2d(24, 40, 5, padding=2, bias=False)
        self.conv2 = nn.Conv2d(40, 40, 3, stride=2, padding=1)
        self.point = nn.Conv2d(40, 40, 1)
        self.fc = nn.Linear(40 * 6 * 6, 10)

    def forward(self, x):
        h = F.relu(self.conv1(x))
        h = F.relu(self.conv_mid(h))
        h = F.relu(self.conv2(h))
        h = h + self.point(h)
        return self.fc(h.flatten(1))
""" + STEPS + """

def plain(a, b, c):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        lo = a @ b
    return lo.float() @ c, a @ b


example_inputs = {"forward": (torch.randn(5, 3, 12, 12),),
                  "infer": (torch.randn(5, 3, 12, 12),),
                  "train_step": (torch.randn(5, 3, 12, 12), torch.zeros(5, dtype=torch.long)),
                  "plain": (torch.randn(5, 40), torch.randn(40, 33), torch.randn(33, 7))}
"""

BF16_MODEL = HEAD + """
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(40, 64)
        self.fc2 = nn.Linear(64, 8)

    def forward(self, x):
        return self.fc2(torch.tanh(self.fc1(x)))


model = Net().bfloat16()
example_inputs = {"forward": (torch.randn(4, 40).bfloat16(),)}
"""


def gemm_calls(path):
    """How many bf16 GEMM, f32 GEMM and implicit-GEMM convolution calls the entries of a generated
    model.c make (the implicit ones' #else branches' GEMMs included)."""
    text = path.read_text()
    code = text[text.index("int net_init("):]
    pats = (r"\bctc_matmul(?:_block)?_bf16\(", r"\bctc_matmul(?:_block)?_f32\(", r"\bctc_conv_(?:pix|wgrad)_bf16\(")
    return tuple(len(re.findall(p, code)) for p in pats)


def test_calls(tmp_path):
    build_ctc()
    (tmp_path / "cnn.py").write_text(CNN)
    counts = {}
    for entry in ("forward", "infer", "train_step", "plain"):   # (forward is always in)
        run([CTC, "compile", tmp_path / "cnn.py", "--name", "net", "--entry", entry, "-o", tmp_path / f"{entry}.c"])
        counts[entry] = gemm_calls(tmp_path / f"{entry}.c")
    print(counts)
    # forward, float32: f32 GEMMs (conv1, conv_mid and conv2 unfolded, the 1x1 convolution, fc)
    assert counts["forward"] == (0, 5, 0)
    # forward under autocast: the same GEMMs in bf16 (conv1's and conv_mid's in the branch without
    # AVX-512 BF16), and conv1, conv_mid (stride 1, same size) as implicit GEMMs
    assert counts["infer"] == (5, 5, 2)
    # training under autocast: also the backward GEMMs (gradients are rounded to bf16, as PyTorch's
    # are); conv_mid's input gradient and both weight gradients of conv1 and conv_mid implicit
    assert counts["train_step"] == (14, 5, 2 + 3)
    # plain: a @ b inside the region in bf16; lo.float() @ c (c is not a bf16 value) and a @ b outside in f32
    assert counts["plain"] == (1, 5 + 2, 0)
    (tmp_path / "m.py").write_text(BF16_MODEL)
    run([CTC, "compile", tmp_path / "m.py", "--name", "net", "--input", "x=bf16[4,40]", "-o", tmp_path / "m.c"])
    assert gemm_calls(tmp_path / "m.c") == (2, 0, 0)
    # each branch compiles with warnings as errors: AVX-512 BF16 (where the CPU has it), AVX-512
    # without it, AVX2 (nothing left unused in any)
    for march, need in (("native", "avx512_bf16"), ("skylake-avx512", None), ("haswell", None)):
        if x86() and (need is None or cpu_has(need)):
            run(["cc", *CFLAGS, f"-march={march}", "-fopenmp", f"-I{RT}", "-c", tmp_path / "train_step.c", "-o",
                 tmp_path / f"t_{march}.o"], timeout=600)


def build_variant(tmp_path, src, march):
    cc = tmp_path / "cc"   # ctc build's flags, then the -march that wins over its -march=native
    cc.write_text('#!/bin/sh\nexec cc "$@" ' + march + "\n")
    cc.chmod(0o755)
    exe = tmp_path / "net"
    run([CTC, "build", src, "--entry", "infer", "--entry", "train_step", "-o", exe, "--cc", cc])
    return exe


def dist(a, b):
    """The 2-norm of a - b over b's tensors (a may hold training state too)."""
    return float(np.sqrt(sum(((np.asarray(a[k], np.float64) - np.asarray(b[k], np.float64)) ** 2).sum() for k in b)))


def build_cnn(tmp_path, text, variant, modname):
    """The model file `text` as tmp_path/cnn.py built for VARIANTS[variant] (skipped where the CPU lacks
    it), the module loaded (its weights made at import under seed 0) and its weights saved as
    w0.safetensors: (the program, the module, its state_dict)"""
    march, _, need = VARIANTS[variant]
    if not x86() or not cpu_has(need):
        pytest.skip(f"an x86-64 CPU with {need}")
    build_ctc()
    src = tmp_path / "cnn.py"
    src.write_text(text)
    exe = build_variant(tmp_path, src, march)
    torch.manual_seed(0)
    mod = load_module(str(src), modname)
    m = mod.model   # (infer calls it)
    w0 = {k: v.clone() for k, v in m.state_dict().items()}
    st_write(tmp_path / "w0.safetensors", state_dict_np(m))
    return exe, mod, w0


def infer_check(tmp_path, exe, mod, w0, x, ulps, label):
    """exe's infer on x (weights w0.safetensors) within `ulps` bf16 roundings of PyTorch's autocast
    (mod.infer) element by element, and no further from a float64 run of mod.Net than PyTorch's (x 1.25)"""
    np.save(tmp_path / "x.npy", x.numpy())
    run([exe, "run", "infer", "--weights", tmp_path / "w0.safetensors", "--input", tmp_path / "x.npy",
         "--output", tmp_path / "y.npy"])
    got = np.load(tmp_path / "y.npy").astype(np.float64)
    with torch.no_grad():
        want = mod.infer(x).double().numpy()
        m64 = mod.Net().double()
        m64.load_state_dict(w0)
        ref = m64(x.double()).numpy()
    d = np.abs(got - want)
    dc, dt = np.abs(got - ref).max(), np.abs(want - ref).max()
    print(f"{label} forward: max |ctc - torch| {d.max():.3g} ({(d / bf16_ulp(want)).max():.3g} bf16 ulps); "
          f"to float64: ctc {dc:.3g}, torch {dt:.3g}")
    assert (d <= ulps * bf16_ulp(want)).all(), f"{label}: max |ctc - torch| {d.max():.3g} exceeds {ulps} bf16 ulp(s)"
    assert dc <= dt * 1.25 + 1e-12


def train_check(tmp_path, exe, net_cls, w0, batches, label):
    """Three SGD-momentum steps of exe's train_step (1 and 2 threads: the same bits, each output element
    one thread's, in one order) against PyTorch's autocast run of net_cls from the weights w0: the
    weights' distance to PyTorch's bf16 run within PyTorch's own bf16-vs-f32 distance, and ctc's
    distance to float64 within 1.25x PyTorch bf16's."""
    def torch_run(autocast, dtype=torch.float32):
        net = net_cls().to(dtype)
        net.load_state_dict(w0)
        opt = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)
        for xb, yb in batches:
            opt.zero_grad()
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
                loss = torch.nn.functional.cross_entropy(net(torch.from_numpy(xb).to(dtype)), torch.from_numpy(yb))
            loss.backward()
            opt.step()
        return {k: v.double().numpy() for k, v in net.state_dict().items()}

    def ctc_run(threads):
        w = tmp_path / "w0.safetensors"
        for i, (xb, yb) in enumerate(batches):
            np.save(tmp_path / "xb.npy", xb)
            np.save(tmp_path / "yb.npy", yb)
            nxt = tmp_path / f"w{i + 1}_{threads}.safetensors"
            run([exe, "--threads", str(threads), "run", "train_step", "--weights", w, "--input", tmp_path / "xb.npy",
                 "--input", tmp_path / "yb.npy", "--save", nxt, "--save-training-state"])
            w = nxt
        return st_read(w)

    ctc = ctc_run(1)
    two = ctc_run(2)
    for k in ctc:
        np.testing.assert_array_equal(two[k], ctc[k], err_msg=f"{label}: {k} differs at 2 threads")
    bf, f32 = torch_run(True), torch_run(False)
    f64 = torch_run(False, torch.float64)
    d_ct, d_own = dist(ctc, bf), dist(bf, f32)
    d_c64, d_t64 = dist(ctc, f64), dist(bf, f64)
    print(f"{label} train: ctc-torch bf16 {d_ct:.3g}, torch's own bf16-f32 {d_own:.3g}; "
          f"to float64: ctc {d_c64:.3g}, torch bf16 {d_t64:.3g}")
    assert d_ct <= d_own
    assert d_c64 <= 1.25 * d_t64


@pytest.mark.parametrize("variant", ["native", "avx512"])
def test_cnn(tmp_path, variant):
    """Forward outputs within one bf16 rounding of PyTorch's autocast, no further from float64;
    three SGD-momentum steps: the weights' distance to PyTorch's bf16 run within PyTorch's own
    bf16-vs-f32 distance, and ctc's distance to float64 within 1.25x PyTorch bf16's; the same
    bits with 1 and 2 threads. A batch of 5 (720 pixels: a last panel of 16)."""
    exe, mod, w0 = build_cnn(tmp_path, CNN, variant, "gemm_bf16_cnn_" + variant)
    infer_check(tmp_path, exe, mod, w0, torch.randn(5, 3, 12, 12), 1, variant)

    rng = np.random.default_rng(1)
    batches = [(rng.standard_normal((5, 3, 12, 12)).astype(np.float32), rng.integers(0, 10, 5)) for _ in range(3)]
    train_check(tmp_path, exe, mod.Net, w0, batches, variant)
