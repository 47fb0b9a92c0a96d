"""`./net train` takes data whose samples have the training entry's sample shape,
as `./net run train_step` does: a small CIFAR-shaped CNN ([B, 3, 32, 32]) refuses
channels-last [N, 32, 32, 3], flat [N, 3072] and regrouped [N, 96, 32] images (the
same number of values per sample, other meanings) for --data and --test-data, naming
the file and both sample shapes; [N, 3, 32, 32] trains as PyTorch does. The one
conversion kept is missing size-1 axes: IDX images [N, 28, 28] (MNIST's layout, the
demo's Fashion-MNIST files) for a [B, 1, 28, 28] model, with u8/i32 labels."""
import gzip
import struct

import numpy as np
import pytest
import torch

from ctc_testlib import CTC, compare, load_module, run, st_read, st_write, state_dict_np

MODEL = """\
import torch
import torch.nn as nn
import torch.nn.functional as F

C, H = {c}, {h}


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(C, 4, 3, padding=1)
        self.fc = nn.Linear(4 * (H // 4) * (H // 4), 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv(x)), 4)
        return self.fc(x.flatten(1))


model = Net()
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)


def train_step(x, y):
    optimizer.zero_grad()
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()
    return loss


example_inputs = {{"forward": (torch.randn(B, C, H, H),),
                  "train_step": (torch.randn(B, C, H, H), torch.randint(0, 10, (B,)))}}
"""
B = 4


def build(d, c, h):
    src = d / f"cnn{c}x{h}.py"
    src.write_text(MODEL.replace("B, C, H, H", f"{B}, C, H, H").replace("(B,)", f"({B},)").format(c=c, h=h))
    exe = d / f"net{c}x{h}"
    run([CTC, "build", src, "-o", exe])
    torch.manual_seed(0)
    mod = load_module(str(src), f"cnn{c}x{h}")
    st_write(d / f"init{c}x{h}.safetensors", state_dict_np(mod.model))
    return exe, mod


@pytest.fixture(scope="module")
def cifar(tmp_path_factory):
    d = tmp_path_factory.mktemp("cifar")
    exe, mod = build(d, 3, 32)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((8, 3, 32, 32)).astype(np.float32)
    y = rng.integers(0, 10, 8).astype(np.int64)
    np.save(d / "x.npy", x)
    np.save(d / "y.npy", y)
    return d, exe, mod, x, y


BAD_LAYOUTS = [("channels_last", lambda x: x.transpose(0, 2, 3, 1), "[32, 32, 3]"),
               ("flat", lambda x: x.reshape(len(x), 3072), "[3072]"),
               ("regrouped", lambda x: x.reshape(len(x), 96, 32), "[96, 32]")]


@pytest.mark.parametrize("name,layout,shape", BAD_LAYOUTS, ids=[b[0] for b in BAD_LAYOUTS])
def test_other_layouts_are_refused(cifar, name, layout, shape):
    d, exe, _, x, _ = cifar
    bad = d / f"{name}.npy"
    np.save(bad, np.ascontiguousarray(layout(x)))
    full = "[8, " + shape[1:]
    want = (f"{bad}: data of shape {full} has samples of shape {shape}, but input 'x' of entry 'train_step' takes "
            "samples of shape [3, 32, 32]: the data must be [N, 3, 32, 32]")
    r = run([exe, "train", "--data", bad, "--labels", d / "y.npy", "--epochs", "1"], check=False)
    assert r.returncode == 1 and want in r.stderr and r.stdout == "", r.stdout + r.stderr
    # the test set against the entry that evaluates it (here the forward entry)
    r = run([exe, "train", "--data", d / "x.npy", "--labels", d / "y.npy", "--test-data", bad, "--test-labels",
             d / "y.npy", "--epochs", "1"], check=False)
    want = want.replace("entry 'train_step'", "entry 'forward'")
    assert r.returncode == 1 and want in r.stderr and r.stdout == "", r.stdout + r.stderr
    # as `run train_step` refuses a batch of them
    np.save(d / "batch.npy", np.ascontiguousarray(layout(x[:B])))
    np.save(d / "ybatch.npy", np.zeros(B, np.int64))
    r = run([exe, "run", "train_step", "--input", d / "batch.npy", "--input", d / "ybatch.npy"], check=False)
    assert r.returncode == 1 and "expected [4, 3, 32, 32]" in r.stderr, r.stderr


def test_labels_with_an_extra_axis_are_refused(cifar):
    d, exe, _, _, y = cifar
    np.save(d / "y2.npy", y[:, None])
    r = run([exe, "train", "--data", d / "x.npy", "--labels", d / "y2.npy", "--epochs", "1"], check=False)
    assert r.returncode == 1 and (f"{d}/y2.npy: data of shape [8, 1] has samples of shape [1], but input 'y' of entry "
                                  "'train_step' takes samples of shape []") in r.stderr, r.stderr


def test_entry_layout_trains_as_pytorch(cifar):
    """[N, 3, 32, 32] (with i32 labels, converted) trains: 2 steps in file order, the
    losses and parameters PyTorch's, and a test accuracy from the forward entry."""
    d, exe, mod, x, y = cifar
    np.save(d / "y32.npy", y.astype(np.int32))
    r = run([exe, "train", "--weights", d / "init3x32.safetensors", "--data", d / "x.npy", "--labels",
             d / "y32.npy", "--test-data", d / "x.npy", "--test-labels", d / "y.npy", "--epochs", "1", "--no-shuffle",
             "--log", d / "log.csv", "--save", d / "out.safetensors"])
    assert r.stdout.startswith("epoch 1: loss ") and "test accuracy" in r.stdout, r.stdout
    losses = [float(mod.train_step(torch.from_numpy(x[i:i + B]), torch.from_numpy(y[i:i + B]))) for i in (0, B)]
    log = np.loadtxt(d / "log.csv", delimiter=",", skiprows=1)
    compare("losses", log[:, 2], np.array(losses), 1e-4, 1e-6)
    got = st_read(d / "out.safetensors")
    for k, v in mod.model.state_dict().items():
        compare(k, got[k], v.numpy(), 1e-3, 1e-5)


def idx(arr):
    code = {np.dtype(np.uint8): 0x08, np.dtype(np.int32): 0x0C}[arr.dtype]
    head = struct.pack(">I", code << 8 | arr.ndim) + struct.pack(">" + "I" * arr.ndim, *arr.shape)
    return gzip.compress(head + arr.astype(arr.dtype.newbyteorder(">")).tobytes())


def test_idx_images_without_the_channel_axis(tmp_path):
    """MNIST-style IDX u8 images [N, 28, 28] train a [B, 1, 28, 28] model exactly as the
    same images as .npy [N, 1, 28, 28] float32 x / 255 do; [N, 28, 28, 1] is refused."""
    exe, _ = build(tmp_path, 1, 28)
    rng = np.random.default_rng(1)
    img = rng.integers(0, 256, (8, 28, 28)).astype(np.uint8)
    lab = rng.integers(0, 10, 8).astype(np.uint8)
    (tmp_path / "img.gz").write_bytes(idx(img))
    (tmp_path / "lab.gz").write_bytes(idx(lab))
    np.save(tmp_path / "img.npy", (img.astype(np.float32) / 255)[:, None])
    np.save(tmp_path / "lab.npy", lab.astype(np.int64))
    outs = []
    for data, labels in (("img.gz", "lab.gz"), ("img.npy", "lab.npy")):
        out = tmp_path / f"{data}.safetensors"
        run([exe, "train", "--weights", tmp_path / "init1x28.safetensors", "--data", tmp_path / data, "--labels",
             tmp_path / labels, "--test-data", tmp_path / data, "--test-labels", tmp_path / labels, "--epochs", "1",
             "--no-shuffle", "--save", out])
        outs.append(st_read(out))
    for k in outs[0]:
        assert np.array_equal(outs[0][k], outs[1][k]), k
    np.save(tmp_path / "last.npy", img[..., None])
    r = run([exe, "train", "--data", tmp_path / "last.npy", "--labels", tmp_path / "lab.gz", "--epochs", "1"],
            check=False)
    assert r.returncode == 1 and "has samples of shape [28, 28, 1], but input 'x'" in r.stderr, r.stderr
