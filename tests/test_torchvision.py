"""torchvision.models as a backbone: ctc compiles `torchvision.models.resnet18(weights=None)`
and the other builders from its own package (pylib/torchvision, written for ctc with
torchvision's module names), so a file that uses one compiles unchanged and a state_dict
saved by PyTorch loads by name. The oracle is Debian's python3-torchvision (0.14, which
matches python3-torch 1.13): first our package itself under PyTorch against it (keys,
initial values drawn in the same order, outputs), then ctc's programs against PyTorch
running the real torchvision."""
import importlib.util
import os
import sys

import numpy as np
import pytest
import torch

from ctc_testlib import CTC, ROOT, compare, load_module, run, run_forward, st_read, st_write, state_dict_np

torchvision = pytest.importorskip("torchvision")
if not torchvision.__version__.startswith("0.14"):
    pytest.skip(f"torchvision {torchvision.__version__} does not match PyTorch 1.13 (0.14 does)", allow_module_level=True)

PYLIB = os.path.join(ROOT, "pylib", "torchvision")
BUILDERS = ["resnet18", "resnet34", "resnet50", "vgg11", "vgg16_bn", "mobilenet_v2", "mobilenet_v3_small",
            "mobilenet_v3_large", "efficientnet_b0", "efficientnet_b1", "squeezenet1_0", "squeezenet1_1"]


def ours():
    if "ctc_torchvision" not in sys.modules:
        spec = importlib.util.spec_from_file_location("ctc_torchvision", os.path.join(PYLIB, "__init__.py"),
                                                      submodule_search_locations=[PYLIB])
        mod = importlib.util.module_from_spec(spec)
        sys.modules["ctc_torchvision"] = mod
        spec.loader.exec_module(mod)
    return sys.modules["ctc_torchvision"]


@pytest.mark.parametrize("name", BUILDERS)
def test_package_is_torchvision(name):
    """Same state_dict keys and shapes, the same initial values from the same seed (so
    the initialisation draws in torchvision's order), bit-identical eval outputs."""
    torch.manual_seed(0)
    ref = getattr(torchvision.models, name)(weights=None, num_classes=10).eval()
    torch.manual_seed(0)
    mine = getattr(ours().models, name)(weights=None, num_classes=10).eval()
    a, b = ref.state_dict(), mine.state_dict()
    assert list(a) == list(b)
    for k in a:
        assert torch.equal(a[k], b[k]), k
    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        assert torch.equal(ref(x), mine(x))


BACKBONE = """import torch
import torch.nn as nn
import torchvision
from torchvision import transforms   # data code: opaque to ctc, as in any training script


class Net(nn.Module):
    def __init__(self, num_classes=10):
        super().__init__()
        self.backbone = BUILD
        HEAD

    def forward(self, x):
        return self.backbone(x)


model = Net()
optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)


def train_step(x, y):
    optimizer.zero_grad()
    loss = nn.functional.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()
    return loss


example_inputs = {"forward": (torch.randn(2, 3, SIZE, SIZE),),
                  "train_step": (torch.randn(4, 3, SIZE, SIZE), torch.zeros(4, dtype=torch.long))}
"""

# (builder call, head replacement, input size). resnet18 at 64x64: at 32x32 its last stage's images
# are 1x1, BatchNorm there normalises 4 values a channel (a batch of 4), and three training steps
# are chaotic: float64 runs whose initial weights differed by 1e-7 relative (float32's rounding)
# ended step 2 at losses from 5.68 to 6.35, so ctc's distance to float64 at that step (AVX-512:
# 0.30; with -march=haswell 0.002; PyTorch's float32 0.10) was a draw. At 64x64 (2x2 images, 16
# values) the same perturbations move it by 1e-5.
MODELS = {
    "resnet18": ("torchvision.models.resnet18(weights=None)",
                 "self.backbone.fc = nn.Linear(self.backbone.fc.in_features, num_classes)", 64),
    "resnet50": ("torchvision.models.resnet50(pretrained=False, num_classes=num_classes)", "", 32),
    "mobilenet_v2": ("torchvision.models.mobilenet_v2(weights=None, dropout=0.0)",
                     "self.backbone.classifier[1] = nn.Linear(self.backbone.last_channel, num_classes)", 32),
    "mobilenet_v3_small": ("torchvision.models.mobilenet_v3_small(weights=None, num_classes=num_classes, dropout=0.0)",
                           "", 32),
    "efficientnet_b0": ("torchvision.models.efficientnet_b0(weights=None, stochastic_depth_prob=0.0)",
                        "self.backbone.classifier = nn.Linear(1280, num_classes)", 64),
    "squeezenet1_1": ("torchvision.models.squeezenet1_1(weights=None, num_classes=num_classes, dropout=0.0)", "", 64),
    "vgg11": ("torchvision.models.vgg11(weights=None, num_classes=num_classes, dropout=0.0)", "", 32),
}


def model_file(tmp_path, name):
    build, head, size = MODELS[name]
    src = BACKBONE.replace("BUILD", build).replace("HEAD", head or "pass").replace("SIZE", str(size))
    path = tmp_path / f"{name}_backbone.py"
    path.write_text(src)
    return str(path), size


@pytest.mark.parametrize("name", [n if n in ("resnet18", "mobilenet_v3_small") else pytest.param(n, marks=pytest.mark.slow)
                                  for n in MODELS])
def test_backbone_forward(tmp_path, name):
    """Forward (eval: BatchNorm's running statistics) against PyTorch with the real
    torchvision, the weights moved by state_dict name."""
    path, size = model_file(tmp_path, name)
    torch.manual_seed(1)
    mod = load_module(path, f"tv_{name}")
    model = mod.model.eval()
    with torch.no_grad():   # running statistics that are not the initial 0 and 1
        for m in model.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.running_mean.uniform_(-0.2, 0.2)
                m.running_var.uniform_(0.5, 1.5)
    x = np.random.default_rng(2).standard_normal((2, 3, size, size)).astype(np.float32)
    (got,) = run_forward(str(tmp_path), path, model, [x])
    with torch.no_grad():
        want = model(torch.from_numpy(x)).numpy()
    compare(f"{name} forward", got, want, 1e-4, 1e-5)


def near_float64(what, got, t32, t64, rtol, factor=2):
    """ctc's float32 result against PyTorch's float32 and float64 runs of the same steps:
    within rtol of PyTorch's float32, or no further from float64 (root mean square) than
    factor times PyTorch's float32 distance (training a deep net with BatchNorm over a batch
    of 4 amplifies float32 rounding, and the largest element of a difference is noise: one
    tensor's was 4.4 times PyTorch's where the root mean squares were 1.8 times). Returns the squared distances summed (ctc's, PyTorch float32's) and float64's
    squared norm."""
    got, t32, t64 = (np.asarray(v, dtype=np.float64) for v in (got, t32, t64))
    rms = lambda d: float(np.sqrt(np.mean(np.square(d))))   # noqa: E731
    scale = max(rms(t64), 1e-30)
    sums = tuple(float(np.sum(np.square(d))) for d in (got - t64, t32 - t64, t64))
    if np.all(np.abs(got - t32) <= rtol * np.abs(t32) + 1e-6):
        return sums
    d_ctc, d_torch = rms(got - t64), rms(t32 - t64)
    assert d_ctc <= factor * d_torch + rtol * scale, \
        f"{what}: ctc is {d_ctc:.3g} from float64 (root mean square), PyTorch float32 {d_torch:.3g}"
    return sums


@pytest.mark.parametrize("name", ["resnet18", pytest.param("mobilenet_v3_small", marks=pytest.mark.slow),
                                  pytest.param("efficientnet_b0", marks=pytest.mark.slow), "squeezenet1_1"])
def test_backbone_training_steps(tmp_path, name):
    """Three SGD-momentum steps in training mode (BatchNorm's batch statistics and its
    running averages): losses, then every state_dict entry, against PyTorch in float32
    and float64 (near_float64)."""
    path, size = model_file(tmp_path, name)
    exe = tmp_path / "net"
    run([CTC, "build", path, "-o", exe])
    torch.manual_seed(3)
    mod = load_module(path, f"tv_train_{name}")
    m64 = load_module(path, f"tv_train64_{name}").model
    m64.load_state_dict(mod.model.state_dict())
    m64.double()
    opt64 = torch.optim.SGD(m64.parameters(), lr=0.05, momentum=0.9)
    w = tmp_path / "w0.safetensors"
    st_write(w, state_dict_np(mod.model))
    rng = np.random.default_rng(4)
    for step in range(3):
        x = rng.standard_normal((4, 3, size, size)).astype(np.float32)
        y = rng.integers(0, 10, size=4).astype(np.int64)
        np.save(tmp_path / "x.npy", x)
        np.save(tmp_path / "y.npy", y)
        nxt = tmp_path / f"w{step + 1}.safetensors"
        run([exe, "run", "train_step", "--weights", w, "--input", tmp_path / "x.npy", "--input", tmp_path / "y.npy",
             "--output", tmp_path / "loss.npy", "--save", nxt, "--save-training-state"])
        lt = float(mod.train_step(torch.from_numpy(x), torch.from_numpy(y)))
        opt64.zero_grad()
        l64 = torch.nn.functional.cross_entropy(m64(torch.from_numpy(x).double()), torch.from_numpy(y))
        l64.backward()
        opt64.step()
        near_float64(f"{name} loss at step {step}", float(np.load(tmp_path / "loss.npy")), lt, float(l64), 1e-4)
        w = nxt
    got = st_read(w)
    sd64 = m64.state_dict()
    sq = []   # each tensor's squared distances to float64 (ctc's, PyTorch float32's) and float64's norm
    for k, v in mod.model.state_dict().items():
        if k.endswith("num_batches_tracked"):
            assert int(got[k]) == int(v) == 3, k
        else:   # per tensor, 3 times PyTorch's distance (a wrong gradient is an error near 100%)
            sq.append(near_float64(f"{name} {k} after 3 steps", got[k], v.numpy(), sd64[k].numpy(), 1e-4, 3))
    c, t, n = (sum(x) for x in zip(*sq))   # all of the state: ctc within 1.5 times PyTorch's distance
    assert c <= 1.5 ** 2 * t + 1e-8 * n, \
        f"{name} after 3 steps: ctc's state {np.sqrt(c / n):.3g} from float64, PyTorch float32's {np.sqrt(t / n):.3g}"


def test_pretrained_weights_refused(tmp_path):
    """weights=... (a download in torchvision) is a located error pointing at --weights."""
    build = "torchvision.models.resnet18(weights='IMAGENET1K_V1')"
    path = tmp_path / "pre.py"
    path.write_text(BACKBONE.replace("BUILD", build).replace("HEAD", "pass").replace("SIZE", "32"))
    r = run([CTC, "check", path], check=False)
    assert r.returncode == 1, r.stderr
    assert "pre.py:10:25" in r.stderr and "does not download pretrained weights" in r.stderr, r.stderr


@pytest.mark.parametrize("build", ["torchvision.models.densenet121(num_classes=10)",
                                   "torchvision.models.shufflenet_v2_x1_0()"])
def test_missing_builder_is_an_error(tmp_path, build):
    """A builder ctc's torchvision lacks is a located error at its call that lists the
    builders it has. (It was an opaque value: `self.backbone = ...densenet121()` compiled
    without the backbone's parameters, and `model = ...shufflenet_v2_x1_0()` reported an
    empty optimizer.) A table of builders the script does not call still compiles."""
    path = tmp_path / "miss.py"
    path.write_text(BACKBONE.replace("BUILD", build).replace("HEAD", "pass").replace("SIZE", "32"))
    r = run([CTC, "check", path], check=False)
    assert r.returncode == 1, r.stderr
    name = build.split(".")[2].split("(")[0]
    assert "miss.py:10:25: error: cannot build a model with the torchvision model builder " \
           f"'{name}', which ctc's torchvision does not have (it has resnet18, " in r.stderr, r.stderr
    table = "{'r18': torchvision.models.resnet18, 'd121': torchvision.models.densenet121}['r18'](num_classes=10)"
    path.write_text(BACKBONE.replace("BUILD", table).replace("HEAD", "pass").replace("SIZE", "32"))
    run([CTC, "check", path])


def test_stochastic_depth_in_training(tmp_path):
    """torchvision.ops.stochastic_depth in training (EfficientNet's blocks; its default
    stochastic_depth_prob is 0.2): a row's sample, or the whole batch, kept with probability
    1 - p and scaled by 1 / (1 - p), PyTorch's value of that scale; the dropped fraction
    within 5 standard deviations of p. (It stopped on Tensor.bernoulli_.)"""
    path = tmp_path / "sd.py"
    path.write_text("import torch\nimport torchvision\n\n\n"
                    "def rows(x):\n    return torchvision.ops.stochastic_depth(x, 0.3, 'row', True) * 1.0\n\n\n"
                    "def batch(x):\n    return torchvision.ops.stochastic_depth(x, 0.3, 'batch', True) * 1.0\n\n\n"
                    "example_inputs = {'rows': (torch.ones(4000, 3, 2, 2),), 'batch': (torch.ones(4000, 3, 2, 2),)}\n")
    exe = tmp_path / "sd"
    run([CTC, "build", path, "-o", exe, "--entry", "rows", "--entry", "batch"])
    x = np.ones((4000, 3, 2, 2), np.float32)
    scale = float(torch.ones(1).div_(1.0 - 0.3))
    for entry in ("rows", "batch"):
        np.save(tmp_path / "x.npy", x)
        run([exe, "run", entry, "--input", tmp_path / "x.npy", "--output", tmp_path / "y.npy"])
        r = np.load(tmp_path / "y.npy").reshape(4000 if entry == "rows" else 1, -1)
        assert (r.min(1) == r.max(1)).all(), f"{entry}: a sample's values differ"
        assert set(np.unique(r)) <= {0.0, np.float32(scale)}, np.unique(r)
        if entry == "rows":
            dropped = float((r[:, 0] == 0).mean())
            assert abs(dropped - 0.3) <= 5 * np.sqrt(0.3 * 0.7 / 4000), dropped


ADAPTIVE = """import torch
import torch.nn as nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(2, 3, 3)
        self.pool = nn.AdaptiveAvgPool2d(@SIZE@)

    def forward(self, x):
        return self.pool(self.conv(x)).flatten(1)


model = Net()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)


def train_step(x, y):
    optimizer.zero_grad()
    loss = ((model(x) - y) ** 2).mean()
    loss.backward()
    optimizer.step()
    return loss


example_inputs = {"forward": (torch.randn(2, 2, @H@, @W@),), "train_step": (torch.randn(2, 2, @H@, @W@), torch.randn(2, @N@))}
"""


@pytest.mark.parametrize("size, hw", [("(7, 7)", (3, 3)), ("(3, 5)", (9, 8)), ("4", (7, 12))])
def test_adaptive_avg_pool_uneven_bins(tmp_path, size, hw):
    """AdaptiveAvgPool2d to sizes that do not divide the input (VGG's 7x7 head on a
    CIFAR image's 1x1 features repeats each input; 7 -> 3 overlaps bins): forward and a
    training step (its gradient) against PyTorch."""
    h, w = hw
    oh, ow = eval(size) if "(" in size else (int(size), int(size))
    src = (ADAPTIVE.replace("@SIZE@", size).replace("@H@", str(h + 2)).replace("@W@", str(w + 2))
           .replace("@N@", str(3 * oh * ow)))
    path = tmp_path / "ada.py"
    path.write_text(src)
    mod = load_module(str(path), f"ada_{h}_{w}")
    x = np.random.default_rng(5).standard_normal((2, 2, h + 2, w + 2)).astype(np.float32)
    (got,) = run_forward(str(tmp_path), str(path), mod.model, [x])
    with torch.no_grad():
        compare("adaptive pool forward", got, mod.model(torch.from_numpy(x)).numpy(), 1e-5, 1e-6)
    exe = tmp_path / "net"
    w0 = tmp_path / "w0.safetensors"
    st_write(w0, state_dict_np(mod.model))
    y = np.random.default_rng(6).standard_normal((2, 3 * oh * ow)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", y)
    run([exe, "run", "train_step", "--weights", w0, "--input", tmp_path / "x.npy", "--input", tmp_path / "y.npy",
         "--output", tmp_path / "loss.npy", "--save", tmp_path / "w1.safetensors"])
    mod.train_step(torch.from_numpy(x), torch.from_numpy(y))
    got = st_read(tmp_path / "w1.safetensors")
    for k, v in mod.model.state_dict().items():
        compare(f"{k} after a step", got[k], v.numpy(), 1e-4, 1e-6)
