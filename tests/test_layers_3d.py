"""The volumetric layers (issue 30): Conv3d (groups, dilation, stride, padding='same'),
ConvTranspose3d (output_padding), MaxPool3d (dilation, padding), AvgPool3d
(count_include_pad=False), AdaptiveAvgPool3d (uneven bins), AdaptiveMaxPool3d and the F.
forms, in a small video classifier as such files are written: forward (eval) and three
SGD steps in training mode against PyTorch, then each op alone with its input gradient,
and the errors PyTorch gives for bad shapes."""
import numpy as np
import pytest
import torch

from ctc_testlib import CTC, compare, load_module, run, run_entry, run_forward, st_read, st_write, state_dict_np

CLIP = """import torch
import torch.nn as nn
import torch.nn.functional as F


class ClipNet(nn.Module):
    # a small video classifier: clips [N, 3, T, H, W]

    def __init__(self, classes=5):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv3d(3, 8, kernel_size=3, padding=1, bias=False), nn.BatchNorm3d(8),
                                  nn.ReLU(inplace=True), nn.MaxPool3d(kernel_size=(1, 2, 2)))
        self.block = nn.Conv3d(8, 8, kernel_size=(3, 3, 3), stride=(2, 1, 1), padding=(1, 2, 2), dilation=(1, 2, 2),
                               groups=2)
        self.pool = nn.AvgPool3d(2, stride=(1, 2, 2), padding=1, count_include_pad=False)
        self.up = nn.ConvTranspose3d(8, 4, 3, stride=2, padding=1, output_padding=1)
        self.head_pool = nn.AdaptiveAvgPool3d((1, 3, 3))
        self.same = nn.Conv3d(4, 4, (2, 3, 3), padding="same")
        self.w = nn.Parameter(torch.randn(4, 8, 1, 3, 3) * 0.1)
        self.fc = nn.Linear(4 * 9 + 4 * 6 + 4 * 8, classes)

    def forward(self, x):
        h = self.stem(x)                                  # [N, 8, T, H/2, W/2]
        h = F.relu(self.block(h))                         # depth T/2
        h = self.pool(h)
        a = self.head_pool(self.same(F.gelu(self.up(h))))
        b = F.conv3d(h, self.w, stride=1, padding=(0, 1, 1))   # [N, 4, 4, 3, 3]
        b = F.max_pool3d(b, kernel_size=2, stride=(2, 1, 1), padding=(1, 1, 0), dilation=(1, 1, 2))
        b = F.adaptive_max_pool3d(b, (3, 2, 1))
        c = F.avg_pool3d(F.conv_transpose3d(h, self.up.weight, groups=1), 2, ceil_mode=False)
        c = F.adaptive_avg_pool3d(c, (2, 2, 2))
        return self.fc(torch.cat([a.flatten(1), b.flatten(1), c.flatten(1)], 1))


model = ClipNet()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)


def train_step(x, y):
    optimizer.zero_grad()
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()
    return loss


example_inputs = {"forward": (torch.randn(2, 3, 6, 8, 8),),
                  "train_step": (torch.randn(2, 3, 6, 8, 8), torch.zeros(2, dtype=torch.long))}
"""


def test_video_net_forward_and_training_steps(tmp_path):
    path = tmp_path / "clip.py"
    path.write_text(CLIP)
    torch.manual_seed(0)
    mod = load_module(str(path), "clip3d")
    rng = np.random.default_rng(3)
    with torch.no_grad():
        bn = mod.model.stem[1]
        bn.running_mean.uniform_(-0.3, 0.3)
        bn.running_var.uniform_(0.5, 1.5)
    mod.model.eval()
    x = rng.standard_normal((2, 3, 6, 8, 8)).astype(np.float32)
    (got,) = run_forward(str(tmp_path), str(path), mod.model, [x])
    with torch.no_grad():
        compare("clip forward", got, mod.model(torch.from_numpy(x)).numpy(), 1e-4, 1e-5)
    mod.model.train()
    exe = tmp_path / "net"
    w = tmp_path / "w0.safetensors"
    st_write(w, state_dict_np(mod.model))
    for step in range(3):
        x = rng.standard_normal((2, 3, 6, 8, 8)).astype(np.float32)
        y = rng.integers(0, 5, size=2).astype(np.int64)
        np.save(tmp_path / "x.npy", x)
        np.save(tmp_path / "y.npy", y)
        nxt = tmp_path / f"w{step + 1}.safetensors"
        run([exe, "run", "train_step", "--weights", w, "--input", tmp_path / "x.npy", "--input", tmp_path / "y.npy",
             "--output", tmp_path / "loss.npy", "--save", nxt, "--save-training-state"])
        lt = float(mod.train_step(torch.from_numpy(x), torch.from_numpy(y)))
        compare(f"clip loss at step {step}", float(np.load(tmp_path / "loss.npy")), lt, 1e-4, 1e-6)
        w = nxt
    got = st_read(w)
    for k, v in mod.model.state_dict().items():
        if k.endswith("num_batches_tracked"):
            assert int(got[k]) == int(v) == 3, k
        else:
            compare(f"clip {k} after 3 steps", got[k], v.numpy(), 1e-3, 1e-5)


OPS = [
    ("F.max_pool3d(x, 3, stride=2, padding=1)", (2, 3, 7, 6, 5)),
    ("F.max_pool3d(x, (2, 3, 2), stride=(1, 2, 1), dilation=(2, 1, 1), ceil_mode=True)", (1, 2, 6, 7, 5)),
    ("F.avg_pool3d(x, (3, 2, 2), stride=(2, 2, 1), padding=(1, 1, 0))", (2, 3, 7, 6, 5)),
    ("F.avg_pool3d(x, 3, stride=2, padding=1, count_include_pad=False)", (2, 3, 7, 6, 5)),
    ("F.adaptive_avg_pool3d(x, (3, 4, 1))", (2, 3, 7, 6, 5)),
    ("F.adaptive_avg_pool3d(x, 1)", (2, 3, 7, 6, 5)),
    ("F.adaptive_max_pool3d(x, (7, 3, 5))", (2, 3, 7, 6, 5)),
    ("F.max_pool3d(x, 2)", (3, 6, 4, 4)),   # unbatched [C, D, H, W]
]


@pytest.fixture(scope="module")
def ops_net(tmp_path_factory):
    """One program with an entry per pool: op_k(x, ct) returns the input gradient of
    sum(pool(x) * ct) (and the forward value through it)."""
    tmp = tmp_path_factory.mktemp("pools3d")
    src = ["import torch", "import torch.nn.functional as F", ""]
    ex, entries, outs = [], [], []
    for k, (expr, shape) in enumerate(OPS):
        ys = tuple(eval(expr, {"F": torch.nn.functional, "x": torch.zeros(shape)}).shape)
        outs.append(ys)
        src += [f"def op_{k}(x, ct):", f"    y = {expr}", "    return y, torch.autograd.grad((y * ct).sum(), x)[0]", ""]
        ex.append(f'    "op_{k}": (torch.zeros{shape}, torch.zeros{ys}),')
        entries += ["--entry", f"op_{k}"]
    src += ["example_inputs = {"] + ex + ["}", ""]
    path = tmp / "pools.py"
    path.write_text("\n".join(src))
    exe = tmp / "pools"
    run([CTC, "build", path, "-o", exe, *entries], timeout=900)
    return tmp, exe, outs


@pytest.mark.parametrize("k", range(len(OPS)), ids=[o[0] for o in OPS])
def test_pool_ops_and_input_gradients(ops_net, k):
    """Each pool alone: its value and input gradient against PyTorch, on inputs with
    repeated values, so that a max pool's choice among equal maxima shows."""
    tmp, exe, outs = ops_net
    expr, shape = OPS[k]
    rng = np.random.default_rng(k)
    x = (np.round(rng.standard_normal(shape) * 2) / 2).astype(np.float32)
    ct = rng.standard_normal(outs[k]).astype(np.float32)
    y, gx = run_entry(tmp, exe, f"op_{k}", [x, ct], 2)
    tx = torch.from_numpy(x).requires_grad_(True)
    ty = eval(expr, {"F": torch.nn.functional, "x": tx})
    (want,) = torch.autograd.grad((ty * torch.from_numpy(ct)).sum(), tx)
    compare(expr, y, ty.detach().numpy(), 1e-5, 1e-6)
    compare(expr + " input gradient", gx, want.numpy(), 1e-4, 1e-5)


@pytest.mark.parametrize("body, msg", [
    ("F.max_pool3d(x, 2)", "max_pool3d expects a 4-D or 5-D input, got shape [2, 3, 8]"),
    ("self.conv(x.view(2, 3, 2, 2, 2))", "shape mismatch in conv3d: input [2, 3, 2, 2, 2] has 3 channels"),
    ("F.adaptive_max_pool3d(x.view(2, 3, 2, 2, 2), 3)", "adaptive_max_pool3d to 3 needs an output size dividing"),
])
def test_errors(tmp_path, body, msg):
    src = ("import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n\n\nclass M(nn.Module):\n"
           "    def __init__(self):\n        super().__init__()\n        self.conv = nn.Conv3d(4, 2, 3)\n\n"
           "    def forward(self, x):\n        return " + body + "\n")
    p = tmp_path / "m.py"
    p.write_text(src)
    r = run([CTC, "check", p, "--input", "x=f32[2,3,8]"], check=False)
    assert r.returncode == 1 and "m.py:12:" in r.stderr and msg in r.stderr, r.stderr
