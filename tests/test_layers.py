"""The layers of real model files (issue 9 item 5, issue 15 item 4) against PyTorch
running the same file:

- module and functional forms in one model file (grouped, depthwise and 1-D
  convolutions, reflect padding_mode, transposed convolutions, padding layers,
  Upsample / interpolate, PixelShuffle, BatchNorm1d/2d in eval mode with
  running statistics, InstanceNorm2d, GroupNorm, PReLU and the activations),
  forward in float32 (rtol 1e-4);
- gradients at the kinks (the values at exactly a threshold), float64: the VJP
  against torch.autograd and the JVP against PyTorch's forward AD (rtol 1e-6);
- training steps through BatchNorm: batch statistics, running_mean /
  running_var (unbiased) / num_batches_tracked updated as buffers (momentum and
  momentum=None), parameters after SGD steps;
- located errors for what ctc refuses;
- torch.rand/randn(_like) in a training function (statistics, and the step that
  uses the draws);
- model files in the style of pytorch/examples (super_resolution, fast_neural_style's
  TransformerNet, a DCGAN trained two steps with two Adam optimizers).
The VJP and JVP of every layer with random inputs are in test_grad.CASES (and so
test_forward_ad.py)."""
import numpy as np
import pytest
import torch

from ctc_testlib import CTC, compare, load_module, run, run_entry, run_forward, st_read, st_write, state_dict_np

MODEL = """\
import torch
import torch.nn as nn
import torch.nn.functional as F


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv_g = nn.Conv2d(4, 6, 3, padding=1, groups=2)
        self.conv_dw = nn.Conv2d(4, 8, (3, 2), stride=2, padding=1, groups=4, bias=False)
        self.conv_refl = nn.Conv2d(4, 4, 3, padding=1, padding_mode='reflect')
        self.conv_repl = nn.Conv2d(4, 2, 3, padding=(2, 1), padding_mode='replicate', dilation=2)
        self.conv1d = nn.Conv1d(4, 6, 3, stride=2, padding=1, groups=2)
        self.convt = nn.ConvTranspose2d(4, 6, 3, stride=2, padding=1, output_padding=1, groups=2)
        self.convt1 = nn.ConvTranspose1d(4, 2, 4, stride=2)
        self.zpad = nn.ZeroPad2d((1, 2, 0, 1))
        self.cpad = nn.ConstantPad1d((2, 1), 0.5)
        self.rpad = nn.ReflectionPad2d(2)
        self.rpad1 = nn.ReflectionPad1d((1, 2))
        self.reppad = nn.ReplicationPad2d((1, 0, 2, 1))
        self.up = nn.Upsample(scale_factor=2, mode='nearest')
        self.upb = nn.Upsample(size=(9, 11), mode='bilinear', align_corners=True)
        self.upn = nn.UpsamplingNearest2d(scale_factor=3)
        self.upbl = nn.UpsamplingBilinear2d(size=(8, 8))
        self.ps = nn.PixelShuffle(2)
        self.pu = nn.PixelUnshuffle(2)
        self.bn2 = nn.BatchNorm2d(4)
        self.bn1 = nn.BatchNorm1d(6, affine=False)
        self.inorm = nn.InstanceNorm2d(4, affine=True)
        self.inorm_plain = nn.InstanceNorm2d(4)
        self.gn = nn.GroupNorm(2, 4)
        self.bn_nostats = nn.BatchNorm2d(4, track_running_stats=False)
        self.inorm1 = nn.InstanceNorm1d(4, affine=True)
        self.conv_same = nn.Conv2d(4, 4, (2, 3), padding='same', dilation=(1, 2))
        self.conv_circ = nn.Conv1d(4, 4, 3, padding=2, padding_mode='circular')
        self.uplin = nn.Upsample(scale_factor=2.5, mode='linear')
        self.cpad2 = nn.ConstantPad2d((0, 1, 2, 3), -2.0)
        self.reppad1 = nn.ReplicationPad1d(3)
        self.prelu = nn.PReLU(4)
        self.prelu1 = nn.PReLU()
        self.acts = nn.ModuleList([
            nn.Softplus(), nn.Softplus(beta=2, threshold=1), nn.ELU(), nn.ELU(0.5), nn.SELU(), nn.CELU(1.5),
            nn.Hardtanh(), nn.Hardtanh(-0.5, 1.0), nn.ReLU6(), nn.Hardsigmoid(), nn.Hardswish(), nn.Mish(),
            nn.Softsign(), nn.Tanhshrink(), nn.Hardshrink(), nn.Hardshrink(0.3), nn.Softshrink(0.3),
            nn.LogSigmoid(), nn.Threshold(0.1, 20.0)])
        self.softmin = nn.Softmin(dim=1)
        self.glu = nn.GLU(dim=1)

    def forward(self, x, s):   # x [2, 4, 6, 4], s [2, 4, 7]
        out = [self.conv_g(x), self.conv_dw(x), self.conv_refl(x), self.conv_repl(x), self.conv1d(s),
               self.convt(x), self.convt1(s), self.zpad(x), self.cpad(s), self.rpad(x), self.rpad1(s),
               self.reppad(x), self.up(x), self.upb(x), self.upn(x), self.upbl(x), self.ps(x), self.pu(x),
               self.bn2(x), self.bn1(self.conv1d(s)), self.inorm(x), self.inorm_plain(x), self.gn(x),
               self.prelu(x), self.prelu1(s), self.softmin(x), self.glu(x), self.bn_nostats(x), self.inorm1(s),
               self.conv_same(x), self.conv_circ(s), self.uplin(s), self.cpad2(x), self.reppad1(s)]
        y = x * 3
        for act in self.acts:
            out.append(act(y))
        # functional forms
        w = self.conv_g.weight
        out += [F.conv2d(x, w, None, 1, 1, 1, 2), F.conv1d(s, self.conv1d.weight, stride=2, padding=1, groups=2),
                F.conv_transpose2d(x, self.convt.weight, self.convt.bias, stride=2, padding=1, output_padding=1,
                                   groups=2),
                F.conv_transpose1d(s, self.convt1.weight, stride=2),
                F.pad(x, (1, 2)), F.pad(x, (1, 1, 2, 0), mode='reflect'), F.pad(x, [0, 2, 1, 1], 'replicate'),
                F.pad(x, (2, 1, 1, 2), mode='circular'), F.pad(x, (-1, 2, 1, -2), value=-1.0),
                F.pad(s, (1, 1, 0, 0, 1, 0)),
                F.interpolate(x, scale_factor=1.5), F.interpolate(x, size=(4, 7), mode='bilinear'),
                F.interpolate(x, scale_factor=(0.5, 2.5), mode='bilinear', align_corners=False),
                F.interpolate(x, scale_factor=1.7, mode='bilinear', recompute_scale_factor=True),
                F.interpolate(s, scale_factor=2), F.interpolate(s, size=10, mode='linear', align_corners=True),
                F.pixel_shuffle(x, 2), F.pixel_unshuffle(x, 2),
                F.batch_norm(x, self.bn2.running_mean, self.bn2.running_var, self.bn2.weight, self.bn2.bias),
                F.instance_norm(x), F.group_norm(x, 4), F.group_norm(x, 2, self.gn.weight, self.gn.bias, eps=1e-3),
                F.softplus(y, 0.5, 2.0), F.elu(y, 2.0), F.selu(y), F.celu(y, 0.7), F.hardtanh(y, -1.5, 2.0),
                F.relu6(y), F.hardsigmoid(y), F.hardswish(y), F.mish(y), F.softsign(y), F.tanhshrink(y),
                F.hardshrink(y, 1.0), F.softshrink(y), F.logsigmoid(y), F.threshold(y, -0.5, 3.0),
                F.glu(s, 1), F.glu(x, -1), F.prelu(x, self.prelu.weight), F.softmin(x, -1), F.softmin(s, dim=0)]
        return tuple(out)


example_inputs = (torch.randn(2, 4, 6, 4), torch.randn(2, 4, 7))
"""


def _torch_model(path):
    mod = load_module(str(path), "layers_model")
    torch.manual_seed(0)
    m = mod.Net()
    g = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for name, b in m.named_buffers():   # running statistics that are not the initial 0 and 1
            if name.endswith("running_mean"):
                b.copy_(torch.randn(b.shape, generator=g) * 0.3)
            elif name.endswith("running_var"):
                b.copy_(torch.rand(b.shape, generator=g) + 0.5)
            elif name.endswith("num_batches_tracked"):
                b.fill_(7)
        for name, p in m.named_parameters():   # affine parameters that are not the initial 1 and 0
            if "bn" in name or "norm" in name or "gn" in name or "prelu" in name:
                p.copy_(torch.randn(p.shape, generator=g) * 0.5 + (1 if name.endswith("weight") else 0))
    return m.eval()


def test_layers_forward_match_pytorch(tmp_path):
    path = tmp_path / "layers.py"
    path.write_text(MODEL)
    m = _torch_model(path)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 4, 6, 4)).astype(np.float32)
    s = rng.standard_normal((2, 4, 7)).astype(np.float32)
    got = run_forward(str(tmp_path), str(path), m, [x, s])
    with torch.no_grad():
        want = m(torch.from_numpy(x), torch.from_numpy(s))
    assert len(got) == len(want) > 80
    for k, (g, w) in enumerate(zip(got, want)):
        compare(f"output {k}", g, w.numpy(), 1e-4, 1e-5)
    # the state_dict: buffers included (num_batches_tracked is int64), in PyTorch's order
    info = run([tmp_path / "net", "info"]).stdout
    for name, v in m.state_dict().items():
        assert name in info, name


# ---- gradients at the kinks -------------------------------------------------------------

KINKS = """\
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.autograd.forward_ad as fwAD


class Net(nn.Module):
    def forward(self, x):
        return x


def acts(x):
    return [F.softplus(x, 2.0, 1.0), F.elu(x), F.selu(x), F.celu(x, 0.5), F.hardtanh(x, -0.5, 1.0), F.relu6(x),
            F.hardsigmoid(x), F.hardswish(x), F.hardshrink(x, 0.3), F.softshrink(x, 0.3), F.threshold(x, 0.1, 20.0),
            F.logsigmoid(x), F.mish(x), F.softsign(x), F.tanhshrink(x), F.leaky_relu(x, 0.2), F.relu(x)]


def rows(x):   # activation k on row k of x
    fs = acts(x)
    return torch.stack([fs[k][k] for k in range(len(fs))])


def vjps(x, p):
    return torch.autograd.grad((rows(x) * p).sum(), x)[0]


def jvps(x, t):
    with fwAD.dual_level():
        return fwAD.unpack_dual(rows(fwAD.make_dual(x, t))).tangent


def prelu_grads(x, w, p):
    return torch.autograd.grad((F.prelu(x, w) * p).sum(), (x, w))


def prelu_jvp(x, w, tx, tw):
    with fwAD.dual_level():
        return fwAD.unpack_dual(F.prelu(fwAD.make_dual(x, tx), fwAD.make_dual(w, tw))).tangent


X = torch.tensor([-3.0, -1.0, -0.5, -0.3, 0.0, 0.1, 0.3, 0.5, 1.0, 3.0, 6.0, 2.5, -7.0, 30.0, -30.0, 100.0] * 17,
                 dtype=torch.float64).reshape(17, 16)
XP = torch.tensor([-1.0, 0.0, 2.0, 0.0, 0.5, -0.25], dtype=torch.float64).reshape(2, 3, 1)
WP = torch.tensor([0.25, -0.5, 2.0], dtype=torch.float64)
example_inputs = {"forward": (X,), "vjps": (X, X), "jvps": (X, X), "prelu_grads": (XP, WP, XP),
                  "prelu_jvp": (XP, WP, XP, WP)}
"""
NACTS = 17


def test_gradients_at_the_kinks(tmp_path):
    path = tmp_path / "kinks.py"
    path.write_text(KINKS)
    exe = tmp_path / "net"
    run([CTC, "build", path, "-o", exe] + sum([["--entry", e] for e in ("vjps", "jvps", "prelu_grads", "prelu_jvp")],
                                              []))
    mod = load_module(str(path), "kinks_mod")
    x = mod.X.numpy()
    p = np.random.default_rng(1).standard_normal(x.shape)
    (got,) = run_entry(str(tmp_path), exe, "vjps", [x, p], 1)
    want = mod.vjps(torch.from_numpy(x).requires_grad_(), torch.from_numpy(p))
    for k in range(NACTS):
        compare(f"VJP of activation {k} at the kinks", got[k], want[k].numpy(), 1e-6, 1e-12)
    (got,) = run_entry(str(tmp_path), exe, "jvps", [x, p], 1)
    want = mod.jvps(torch.from_numpy(x), torch.from_numpy(p))
    for k in range(NACTS):
        compare(f"JVP of activation {k} at the kinks", got[k], want[k].numpy(), 1e-6, 1e-12)
    xp, wp = mod.XP.numpy(), mod.WP.numpy()
    pp = np.random.default_rng(2).standard_normal(xp.shape)
    got = run_entry(str(tmp_path), exe, "prelu_grads", [xp, wp, pp], 2)
    want = mod.prelu_grads(torch.from_numpy(xp).requires_grad_(), torch.from_numpy(wp).requires_grad_(),
                           torch.from_numpy(pp))
    for name, g, w in zip("xw", got, want):
        compare(f"prelu d{name} at 0", g, w.numpy(), 1e-6, 1e-12)
    tw = np.random.default_rng(3).standard_normal(wp.shape)
    (got,) = run_entry(str(tmp_path), exe, "prelu_jvp", [xp, wp, pp, tw], 1)
    want = mod.prelu_jvp(*(torch.from_numpy(a) for a in (xp, wp, pp, tw))).numpy()
    # PyTorch 1.13's prelu is not self-consistent at x == 0: its backward takes the
    # w * x side (dx = w g, checked above) but its forward AD the x side (tx). ctc's
    # JVP is the transpose of its VJP there: w * tx.
    zero = xp == 0
    assert zero.sum() == 2
    compare("prelu JVP", got[~zero], want[~zero], 1e-6, 1e-12)
    compare("prelu JVP at 0", got[zero], (np.broadcast_to(wp.reshape(1, 3, 1), xp.shape) * pp)[zero], 1e-12, 1e-15)


# ---- BatchNorm in training steps ------------------------------------------------------------

TRAIN = """\
import torch
import torch.nn as nn
import torch.nn.functional as F


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4, momentum={momentum})
        self.fc = nn.Linear(4 * 5 * 5, 6)
        self.bn1 = nn.BatchNorm1d(6)
        self.out = nn.Linear(6, 2)

    def forward(self, x):
        h = F.relu(self.bn(self.conv(x)))
        return self.out(F.elu(self.bn1(self.fc(h.flatten(1)))))


model = Net()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)


def train_step(x, y):
    optimizer.zero_grad()
    loss = F.mse_loss(model(x), y)
    loss.backward()
    optimizer.step()
    return loss


example_inputs = {{"forward": (torch.randn(4, 3, 5, 5),), "train_step": (torch.randn(4, 3, 5, 5), torch.randn(4, 2))}}
"""


@pytest.mark.parametrize("momentum", ["0.1", "None"])
def test_batchnorm_training_steps(tmp_path, momentum):
    path = tmp_path / "bn_train.py"
    path.write_text(TRAIN.format(momentum=momentum))
    exe = tmp_path / "net"
    run([CTC, "build", path, "-o", exe])
    mod = load_module(str(path), "bn_train_" + momentum)
    w = tmp_path / "w0.safetensors"
    st_write(w, state_dict_np(mod.model))
    rng = np.random.default_rng(4)
    for step in range(3):
        x = rng.standard_normal((4, 3, 5, 5)).astype(np.float32)
        y = rng.standard_normal((4, 2)).astype(np.float32)
        np.save(tmp_path / "x.npy", x)
        np.save(tmp_path / "y.npy", y)
        nxt = tmp_path / f"w{step + 1}.safetensors"
        run([exe, "run", "train_step", "--weights", w, "--input", tmp_path / "x.npy", "--input", tmp_path / "y.npy",
             "--output", tmp_path / "loss.npy", "--save", nxt, "--save-training-state"])
        lt = float(mod.train_step(torch.from_numpy(x), torch.from_numpy(y)))
        compare(f"loss at step {step}", float(np.load(tmp_path / "loss.npy")), lt, 1e-4, 1e-6)
        w = nxt
    got = st_read(w)
    for k, v in mod.model.state_dict().items():
        if k.endswith("num_batches_tracked"):
            assert got[k].dtype == np.int64 and int(got[k]) == int(v) == 3, (k, got[k], v)
        else:
            compare(f"{k} after 3 steps", got[k], v.numpy(), 1e-4, 1e-5)
    # eval mode (forward) uses the running statistics the steps left
    mod.model.eval()
    x = rng.standard_normal((4, 3, 5, 5)).astype(np.float32)
    np.save(tmp_path / "xe.npy", x)
    run([exe, "infer", "--weights", w, "--input", tmp_path / "xe.npy", "--output", tmp_path / "ye.npy"])
    with torch.no_grad():
        compare("eval forward", np.load(tmp_path / "ye.npy"), mod.model(torch.from_numpy(x)).numpy(), 1e-4, 1e-5)


# ---- refusals -----------------------------------------------------------------------

ERR_HEAD = "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n\n\nclass Net(nn.Module):\n"


@pytest.mark.parametrize("body,shape,msg", [
    ("    def forward(self, x):\n        return F.pad(x, (3, 0), mode='reflect')\n", "f32[1,2,3]",
     "8:16: error: pad: reflect padding (3, 0) must be smaller than the input dimension 2 of size 3"),
    ("    def forward(self, x):\n        return F.conv2d(x, torch.ones(3, 3, 1, 1), groups=2)\n", "f32[1,6,3,3]",
     "8:16: error: conv2d: out_channels (3) must be divisible by groups (2)"),
    ("    def __init__(self):\n        super().__init__()\n        self.c = nn.Conv2d(4, 6, 3, groups=4)\n\n"
     "    def forward(self, x):\n        return self.c(x)\n", "f32[1,4,5,5]",
     "9:18: error: out_channels must be divisible by groups"),
    ("    def forward(self, x):\n        return F.interpolate(x, scale_factor=2, mode='bicubic')\n", "f32[1,2,3,3]",
     "8:16: error: interpolate: mode 'bicubic' is not supported by ctc (nearest, linear, bilinear are)"),
    ("    def forward(self, x):\n        return F.pixel_shuffle(x, 2)\n", "f32[1,6,3,3]",
     "8:16: error: pixel_shuffle expects its input's channel dimension (6) to be divisible by the square of "
     "upscale_factor (4)"),
])
def test_refusals(tmp_path, body, shape, msg):
    path = tmp_path / "bad.py"
    path.write_text(ERR_HEAD + body)
    r = run([CTC, "build", path, "-o", tmp_path / "net", "--input", f"x={shape}"], check=False)
    assert r.returncode == 1, r.stdout + r.stderr
    assert msg in r.stderr, r.stderr


# ---- random tensors in a training function ------------------------------------------------

RANDOM = """\
import torch
import torch.nn as nn
import torch.nn.functional as F


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        return self.fc(x)


model = Net()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)


def train_step(x):
    optimizer.zero_grad()
    h = model(x)
    eps = torch.randn_like(h)
    u = torch.rand_like(h)
    z = torch.randn(200, 100)
    loss = ((h + eps * 0.5) ** 2).mean()
    loss.backward()
    optimizer.step()
    return loss, eps, u, z, torch.rand(50, 40, dtype=torch.float64)


example_inputs = {"forward": (torch.randn(8, 4),), "train_step": (torch.randn(8, 4),)}
"""


def test_random_tensors_in_training_steps(tmp_path):
    path = tmp_path / "rand.py"
    path.write_text(RANDOM)
    exe = tmp_path / "net"
    run([CTC, "build", path, "-o", exe])
    mod = load_module(str(path), "rand_mod")
    w = tmp_path / "w0.safetensors"
    st_write(w, state_dict_np(mod.model))
    x = np.random.default_rng(5).standard_normal((8, 4)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    draws = []
    for step in range(2):
        nxt = tmp_path / f"w{step + 1}.safetensors"
        outs = [tmp_path / f"o{k}.npy" for k in range(5)]
        run([exe, "run", "train_step", "--weights", w, "--input", tmp_path / "x.npy", "--save", nxt, "--save-training-state"] +
            sum([["--output", o] for o in outs], []))
        loss, eps, u, z, ud = [np.load(o) for o in outs]
        assert ud.dtype == np.float64 and u.dtype == np.float32
        assert 0 <= u.min() and u.max() < 1 and 0 <= ud.min() and ud.max() < 1
        assert abs(z.mean()) < 0.02 and abs(z.std() - 1) < 0.02, (z.mean(), z.std())
        assert abs(ud.mean() - 0.5) < 0.02 and abs(ud.std() - 12 ** -0.5) < 0.02
        # the loss and the update used these draws: PyTorch's step with the same eps
        with torch.no_grad():
            sd = st_read(w)
            mod.model.load_state_dict({k: torch.from_numpy(v.copy()) for k, v in sd.items() if k in
                                       mod.model.state_dict()})
        h = mod.model(torch.from_numpy(x))
        want = ((h + torch.from_numpy(eps) * 0.5) ** 2).mean()
        compare(f"loss at step {step}", float(loss), float(want), 1e-5, 1e-6)
        draws.append(z)
        w = nxt
    assert not np.allclose(draws[0], draws[1])   # the stream moved on
    assert "rng.offset" in run([exe, "info"]).stdout


def test_random_tensors_in_forward_draw(tmp_path):
    """forward draws from the rng.offset stream too (a VAE's reparameterize); the
    statistics are checked in test_user_files.py"""
    path = tmp_path / "m.py"
    path.write_text(ERR_HEAD + "    def forward(self, x):\n        return x + torch.randn_like(x)\n")
    run([CTC, "build", path, "-o", tmp_path / "net", "--input", "x=f32[2,3]"])
    assert "rng.offset" in run([tmp_path / "net", "info"]).stdout


# ---- model files in the style of pytorch/examples (written for these tests) ------------------

DCGAN = """\
import torch
import torch.nn as nn
import torch.nn.functional as F

nz, ngf, ndf, nc = 8, 4, 4, 3


class Generator(nn.Module):
    def __init__(self):
        super(Generator, self).__init__()
        self.main = nn.Sequential(
            nn.ConvTranspose2d(nz, ngf * 4, 4, 1, 0, bias=False),
            nn.BatchNorm2d(ngf * 4),
            nn.ReLU(True),
            nn.ConvTranspose2d(ngf * 4, ngf * 2, 4, 2, 1, bias=False),
            nn.BatchNorm2d(ngf * 2),
            nn.ReLU(True),
            nn.ConvTranspose2d(ngf * 2, nc, 4, 2, 1, bias=False),
            nn.Tanh()
        )

    def forward(self, input):
        return self.main(input)


class Discriminator(nn.Module):
    def __init__(self):
        super(Discriminator, self).__init__()
        self.main = nn.Sequential(
            nn.Conv2d(nc, ndf, 4, 2, 1, bias=False),
            nn.LeakyReLU(0.2, inplace=True),
            nn.Conv2d(ndf, ndf * 2, 4, 2, 1, bias=False),
            nn.BatchNorm2d(ndf * 2),
            nn.LeakyReLU(0.2, inplace=True),
            nn.Conv2d(ndf * 2, 1, 4, 1, 0, bias=False),
            nn.Sigmoid()
        )

    def forward(self, input):
        return self.main(input).view(-1, 1).squeeze(1)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.netG = Generator()
        self.netD = Discriminator()

    def forward(self, noise):
        return self.netD(self.netG(noise))


model = Net()
criterion = nn.BCELoss()
optimizerD = torch.optim.Adam(model.netD.parameters(), lr=0.01, betas=(0.5, 0.999))
optimizerG = torch.optim.Adam(model.netG.parameters(), lr=0.01, betas=(0.5, 0.999))


def train_step(real, noise):
    model.netD.zero_grad()
    label = torch.full((real.size(0),), 1.0)
    errD_real = criterion(model.netD(real), label)
    errD_real.backward()
    fake = model.netG(noise)
    errD_fake = criterion(model.netD(fake.detach()), label * 0.0)
    errD_fake.backward()
    optimizerD.step()
    model.netG.zero_grad()
    errG = criterion(model.netD(fake), label)
    errG.backward()
    optimizerG.step()
    return errD_real + errD_fake, errG


example_inputs = {"forward": (torch.randn(4, nz, 1, 1),),
                  "train_step": (torch.randn(4, nc, 16, 16), torch.randn(4, nz, 1, 1))}
"""

SUPER_RES = """\
import torch
import torch.nn as nn
import torch.nn.init as init


class Net(nn.Module):
    def __init__(self, upscale_factor=3):
        super(Net, self).__init__()
        self.relu = nn.ReLU()
        self.conv1 = nn.Conv2d(1, 16, (5, 5), (1, 1), (2, 2))
        self.conv2 = nn.Conv2d(16, 16, (3, 3), (1, 1), (1, 1))
        self.conv3 = nn.Conv2d(16, 8, (3, 3), (1, 1), (1, 1))
        self.conv4 = nn.Conv2d(8, upscale_factor ** 2, (3, 3), (1, 1), (1, 1))
        self.pixel_shuffle = nn.PixelShuffle(upscale_factor)

    def forward(self, x):
        x = self.relu(self.conv1(x))
        x = self.relu(self.conv2(x))
        x = self.relu(self.conv3(x))
        x = self.pixel_shuffle(self.conv4(x))
        return x


example_inputs = (torch.randn(2, 1, 7, 6),)
"""

STYLE = """\
import torch


class TransformerNet(torch.nn.Module):
    def __init__(self):
        super(TransformerNet, self).__init__()
        self.conv1 = ConvLayer(3, 8, kernel_size=9, stride=1)
        self.in1 = torch.nn.InstanceNorm2d(8, affine=True)
        self.conv2 = ConvLayer(8, 16, kernel_size=3, stride=2)
        self.in2 = torch.nn.InstanceNorm2d(16, affine=True)
        self.res1 = ResidualBlock(16)
        self.deconv1 = UpsampleConvLayer(16, 8, kernel_size=3, stride=1, upsample=2)
        self.in4 = torch.nn.InstanceNorm2d(8, affine=True)
        self.deconv3 = ConvLayer(8, 3, kernel_size=9, stride=1)
        self.relu = torch.nn.ReLU()

    def forward(self, X):
        y = self.relu(self.in1(self.conv1(X)))
        y = self.relu(self.in2(self.conv2(y)))
        y = self.res1(y)
        y = self.relu(self.in4(self.deconv1(y)))
        y = self.deconv3(y)
        return y


class ConvLayer(torch.nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, stride):
        super(ConvLayer, self).__init__()
        reflection_padding = kernel_size // 2
        self.reflection_pad = torch.nn.ReflectionPad2d(reflection_padding)
        self.conv2d = torch.nn.Conv2d(in_channels, out_channels, kernel_size, stride)

    def forward(self, x):
        out = self.reflection_pad(x)
        out = self.conv2d(out)
        return out


class ResidualBlock(torch.nn.Module):
    def __init__(self, channels):
        super(ResidualBlock, self).__init__()
        self.conv1 = ConvLayer(channels, channels, kernel_size=3, stride=1)
        self.in1 = torch.nn.InstanceNorm2d(channels, affine=True)
        self.conv2 = ConvLayer(channels, channels, kernel_size=3, stride=1)
        self.in2 = torch.nn.InstanceNorm2d(channels, affine=True)
        self.relu = torch.nn.ReLU()

    def forward(self, x):
        residual = x
        out = self.relu(self.in1(self.conv1(x)))
        out = self.in2(self.conv2(out))
        out = out + residual
        return out


class UpsampleConvLayer(torch.nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, stride, upsample=None):
        super(UpsampleConvLayer, self).__init__()
        self.upsample = upsample
        reflection_padding = kernel_size // 2
        self.reflection_pad = torch.nn.ReflectionPad2d(reflection_padding)
        self.conv2d = torch.nn.Conv2d(in_channels, out_channels, kernel_size, stride)

    def forward(self, x):
        x_in = x
        if self.upsample:
            x_in = torch.nn.functional.interpolate(x_in, mode='nearest', scale_factor=self.upsample)
        out = self.reflection_pad(x_in)
        out = self.conv2d(out)
        return out


example_inputs = (torch.randn(1, 3, 12, 10),)
"""


@pytest.mark.parametrize("name,src,cls,shapes", [
    ("super_resolution", SUPER_RES, "Net", [(2, 1, 7, 6)]),
    ("fast_neural_style", STYLE, "TransformerNet", [(1, 3, 12, 10)]),
])
def test_example_style_models_forward(tmp_path, name, src, cls, shapes):
    path = tmp_path / f"{name}.py"
    path.write_text(src)
    mod = load_module(str(path), name)
    torch.manual_seed(0)
    m = getattr(mod, cls)()
    with torch.no_grad():
        for p_name, p in m.named_parameters():   # affine InstanceNorm parameters away from 1 and 0
            if ".in" in "." + p_name:
                p.copy_(torch.randn(p.shape) * 0.3 + (1 if p_name.endswith("weight") else 0))
    m.eval()
    rng = np.random.default_rng(6)
    xs = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    got = run_forward(str(tmp_path), str(path), m, xs, opts=("--model", cls))
    with torch.no_grad():
        want = m(*[torch.from_numpy(x) for x in xs])
    compare(f"{name} forward", got[0], want.numpy(), 1e-4, 1e-5)


def test_dcgan_training_steps(tmp_path):
    path = tmp_path / "dcgan.py"
    path.write_text(DCGAN)
    exe = tmp_path / "net"
    run([CTC, "build", path, "-o", exe])
    mod = load_module(str(path), "dcgan_mod")
    w = tmp_path / "w0.safetensors"
    st_write(w, state_dict_np(mod.model))
    rng = np.random.default_rng(7)
    for step in range(2):
        real = np.tanh(rng.standard_normal((4, 3, 16, 16))).astype(np.float32)
        noise = rng.standard_normal((4, 8, 1, 1)).astype(np.float32)
        np.save(tmp_path / "r.npy", real)
        np.save(tmp_path / "n.npy", noise)
        nxt = tmp_path / f"w{step + 1}.safetensors"
        run([exe, "run", "train_step", "--weights", w, "--input", tmp_path / "r.npy", "--input", tmp_path / "n.npy",
             "--output", tmp_path / "ld.npy", "--output", tmp_path / "lg.npy", "--save", nxt, "--save-training-state"])
        ld, lg = mod.train_step(torch.from_numpy(real), torch.from_numpy(noise))
        compare(f"errD at step {step}", float(np.load(tmp_path / "ld.npy")), float(ld), 1e-4, 1e-5)
        compare(f"errG at step {step}", float(np.load(tmp_path / "lg.npy")), float(lg), 1e-4, 1e-5)
        w = nxt
    got = st_read(w)
    for k, v in mod.model.state_dict().items():
        compare(f"{k} after 2 steps", got[k], v.numpy(), 1e-3, 1e-5)


SMALL_TAILS = """
import torch
import torch.nn as nn
import torch.nn.functional as F

class Tails(nn.Module):
    def forward(self, x):
        return F.softplus(x), F.logsigmoid(-x), F.mish(x), F.softplus(x, beta=2.0)

model = Tails()
example_inputs = (torch.tensor([-30.0, -20.0, -17.0, -9.0, 1e-6, 0.5]),)
"""


def test_activation_tails_relative_accuracy(tmp_path):
    """softplus / logsigmoid / mish of large negative inputs are ~exp(x), far below
    atol: they are compared by relative error alone (log1p, not log(1 + e))."""
    path = tmp_path / "tails.py"
    path.write_text(SMALL_TAILS)
    mod = load_module(str(path), "tails_mod")
    x = mod.example_inputs[0].numpy()
    outs = run_forward(str(tmp_path), str(path), mod.model, [x])
    for got, want in zip(outs, mod.model(mod.example_inputs[0])):
        np.testing.assert_allclose(got, want.numpy(), rtol=1e-5, atol=0)


def test_embedding_padding_row_zero_at_init(tmp_path):
    """nn.Embedding(padding_idx=p): _init zeroes row p after the normal fill, as
    PyTorch's reset_parameters does (negative p counts from the end); a later
    nn.init.* call on the weight refills that row too."""
    src = tmp_path / "m.py"
    src.write_text('''import torch
import torch.nn as nn

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(10, 4, padding_idx=2)
        self.neg = nn.Embedding(6, 3, padding_idx=-1)
        self.re = nn.Embedding(5, 2, padding_idx=0)
        nn.init.normal_(self.re.weight)

    def forward(self, i):
        return self.emb(i).sum() + self.neg(i % 6).sum() + self.re(i % 5).sum()
''')
    exe = tmp_path / "net"
    run([CTC, "build", src, "-o", exe, "--input", "i=i64[3]"])
    np.save(tmp_path / "i.npy", np.array([1, 2, 3], np.int64))
    run([exe, "run", "forward", "--input", tmp_path / "i.npy", "--output", tmp_path / "o.npy",
         "--save", tmp_path / "w.safetensors"])
    w = st_read(tmp_path / "w.safetensors")
    rows = lambda a: [bool(np.all(r == 0)) for r in a]
    assert rows(w["emb.weight"]) == [k == 2 for k in range(10)], w["emb.weight"]
    assert rows(w["neg.weight"]) == [k == 5 for k in range(6)], w["neg.weight"]
    assert not any(rows(w["re.weight"])), w["re.weight"]   # normal_ after construction: PyTorch's row 0 is not zero
