"""ctc build with a C compiler that has no zlib (a cross compiler's sysroot often has none): the
runtime is built with -DCTC_NO_ZLIB (compiler/build.c's probe), reads stored checkpoint records
and uncompressed files, and refuses deflated records and gzipped data with a message that says
why. On x86 the same runtime is forced with --cflags -DCTC_NO_ZLIB (its CRC-32 without zlib
against PyTorch's checkpoints both ways); `--cc aarch64-linux-gnu-gcc` builds the whole program for
aarch64 (a cross compiler: no -march=native) (run under qemu-aarch64, skipped without the cross compiler or QEMU),
whose training step gives the x86 build's loss."""
import gzip
import os

import numpy as np
import pytest

from ctc_testlib import CTC, QEMU_A64, ROOT, compare, need_aarch64, run

MODEL = """
import torch
import torch.nn as nn
import torch.nn.functional as F


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 16, 3, padding=1)
        self.bn = nn.BatchNorm2d(16)
        self.conv2 = nn.Conv2d(16, 16, 3, padding=1)
        self.fc = nn.Linear(16, 10)

    def forward(self, x):
        x = F.relu(self.bn(self.conv(x)))
        x = F.relu(self.conv2(x))
        return self.fc(F.adaptive_avg_pool2d(x, 1).flatten(1))


model = Net()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)


def train_step(x, y):
    optimizer.zero_grad()
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()
    return loss


example_inputs = {"forward": (torch.zeros(8, 1, 16, 16),),
                  "train_step": (torch.zeros(8, 1, 16, 16), torch.zeros(8, dtype=torch.long))}
"""


def _idx(path, arr, gz):
    """arr as an IDX file (u8), gzipped or not"""
    head = bytes([0, 0, 8, arr.ndim]) + b"".join(int(d).to_bytes(4, "big") for d in arr.shape)
    data = head + arr.astype(np.uint8).tobytes()
    with (gzip.open if gz else open)(path, "wb") as f:
        f.write(data)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("cross")
    (d / "net.py").write_text(MODEL)
    rng = np.random.default_rng(0)
    np.save(d / "x.npy", rng.standard_normal((8, 1, 16, 16)).astype(np.float32))
    np.save(d / "y.npy", (np.arange(8) * 7 % 10).astype(np.int64))
    images, labels = rng.integers(0, 256, (32, 16, 16)), rng.integers(0, 10, 32)
    for gz in (0, 1):
        _idx(d / f"images{'.gz' if gz else ''}", images, gz)
        _idx(d / f"labels{'.gz' if gz else ''}", labels, gz)
    return d


def test_runtime_without_zlib(model_dir):
    """-DCTC_NO_ZLIB on x86: a PyTorch checkpoint loads (its stored records' CRC-32 computed without
    zlib), the program's --save OUT.pt loads into PyTorch with the same tensors, uncompressed IDX files
    train, gzipped ones are refused with the reason."""
    import torch
    d = model_dir
    run([CTC, "build", d / "net.py", "-o", d / "net_nz", "--cflags", "-DCTC_NO_ZLIB"], timeout=600)
    ns = {}
    exec(MODEL, ns)
    torch.save(ns["model"].state_dict(), d / "w.pt")
    run([d / "net_nz", "run", "train_step", "--weights", d / "w.pt", "--input", d / "x.npy", "--input", d / "y.npy",
         "--output", d / "loss.npy", "--save", d / "out.pt"])
    ns["train_step"](torch.from_numpy(np.load(d / "x.npy")), torch.from_numpy(np.load(d / "y.npy")))
    got = torch.load(d / "out.pt")
    for k, v in ns["model"].state_dict().items():
        compare(f"{k} after a step, saved without zlib", got[k].numpy(), v.numpy(), 1e-4, 1e-5)
    r = run([d / "net_nz", "train", "--data", d / "images", "--labels", d / "labels", "--epochs", "1"])
    assert "epoch 1" in r.stdout + r.stderr
    r = run([d / "net_nz", "train", "--data", d / "images.gz", "--labels", d / "labels.gz", "--epochs", "1"],
            check=False)
    assert r.returncode != 0 and "built without zlib" in r.stderr and "images.gz" in r.stderr, r.stderr


def test_aarch64_program(model_dir):
    """The whole program cross-built for aarch64 by ctc build (no zlib in the cross sysroot: the probe
    leaves -lz out; no -march=native for another architecture's compiler): `./net run train_step` under
    qemu-aarch64 gives PyTorch's loss from the same weights, and the x86 build's."""
    import torch
    need_aarch64()
    d = model_dir
    ns = {}
    exec(MODEL, ns)
    torch.save(ns["model"].state_dict(), d / "w0.pt")
    want = ns["train_step"](torch.from_numpy(np.load(d / "x.npy")), torch.from_numpy(np.load(d / "y.npy"))).item()
    r = run([CTC, "build", d / "net.py", "-o", d / "net_a64", "--cc", "aarch64-linux-gnu-gcc", "-v"], timeout=900)
    # (a cross compiler: no -march=native, which it would refuse)
    assert "-DCTC_NO_ZLIB" in r.stderr and " -lz" not in r.stderr and "-march=native" not in r.stderr, r.stderr[-2000:]
    run([CTC, "build", d / "net.py", "-o", d / "net_x86"], timeout=600)
    losses = {}
    for arch, pre in (("x86", []), ("a64", QEMU_A64)):
        run([*pre, d / f"net_{arch}", "run", "train_step", "--weights", d / "w0.pt", "--input", d / "x.npy",
             "--input", d / "y.npy", "--output", d / f"loss_{arch}.npy"], timeout=600)
        losses[arch] = np.load(d / f"loss_{arch}.npy")
    compare("aarch64 loss vs PyTorch", losses["a64"], np.float32(want), 1e-4, 1e-6)
    compare("aarch64 loss vs x86", losses["a64"], losses["x86"], 1e-5, 1e-6)


def test_gpt_aarch64_program(tmp_path):
    """The bench GPT (4 layers, 128 tokens, batch 1) as a whole program cross-built for aarch64 (the NEON
    GEMM, OpenMP at 2 threads, the fused attention): `./net infer` under qemu-aarch64 against PyTorch's
    logits (rtol 1e-4) and the x86 build's, within float32 rounding (ctc's sums are made in one order on every ISA, the GEMMs' tiles
    and the row sums' lanes alike: on an AVX2 machine they came out the same bits)."""
    import torch
    need_aarch64()
    gpt = os.path.join(os.path.dirname(ROOT), "shared", "bench", "models", "gpt.py")
    if not os.path.exists(gpt):
        pytest.skip(f"{gpt} is missing")
    src = open(gpt).read() + ('\n\nmodel = make_model()\n'
                              'example_inputs = {"forward": (torch.zeros(1, BLOCK, dtype=torch.long),)}\n')
    (tmp_path / "gpt.py").write_text(src)
    np.save(tmp_path / "idx.npy", ((np.arange(128) * 37 + 11) % 256).astype(np.int64).reshape(1, 128))
    torch.manual_seed(0)
    ns = {}
    exec(src, ns)
    torch.save(ns["model"].state_dict(), tmp_path / "w.pt")
    logits = {}
    for arch, cc, pre in (("x86", [], []), ("a64", ["--cc", "aarch64-linux-gnu-gcc"],
                                            QEMU_A64)):
        run([CTC, "build", tmp_path / "gpt.py", "-o", tmp_path / f"gpt_{arch}", *cc], timeout=900)
        run([*pre, tmp_path / f"gpt_{arch}", "infer", "--weights", tmp_path / "w.pt", "--input", tmp_path / "idx.npy",
             "--output", tmp_path / f"logits_{arch}.npy"], timeout=600, env=dict(os.environ, OMP_NUM_THREADS="2"))
        logits[arch] = np.load(tmp_path / f"logits_{arch}.npy")
    assert logits["x86"].shape == (1, 128, 256) and np.abs(logits["x86"]).max() > 0.1
    with torch.no_grad():
        want = ns["model"](torch.from_numpy(np.load(tmp_path / "idx.npy"))).numpy()
    compare("gpt logits, aarch64 program vs PyTorch", logits["a64"], want, 1e-4, 1e-5)
    d = compare("gpt logits, aarch64 program vs x86", logits["a64"], logits["x86"], 1e-4, 1e-5)
    print(f"\ngpt aarch64 program vs x86: max |diff| {d:.3g}")
