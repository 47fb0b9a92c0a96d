"""Stop-gradient semantics against PyTorch: detach(), .data, torch.no_grad()
(context and decorator), set_grad_enabled (context and call), enable_grad,
inference_mode, requires_grad_(); in reverse mode (torch.autograd.grad),
forward mode (forward_ad, functorch.jvp: PyTorch's forward AD ignores no_grad)
and torch.autograd.functional.hvp (double backward: no_grad holds); plus
embedding's padding_idx gradient, torch.cat of 100 tensors under both AD
modes, and training steps whose loss uses a detached target (DQN) or a frozen
teacher (distillation).

The function cases run in float64, so values are compared at rtol 1e-9: they
differ from PyTorch only by summation order. A forward-mode tangent that
PyTorch reports as None (no tangent) is zero in ctc. The training cases are
float32 parameters after 5 SGD-with-momentum steps (rtol 1e-4)."""
import numpy as np
import pytest
import torch

from ctc_testlib import CTC, compare, load_module, run, run_entry, st_read, st_write, state_dict_np

FUNCS = '''\
import torch
import torch.nn.functional as F
import torch.autograd.forward_ad as fwAD
try:
    import functorch
except ImportError:  # PyTorch 2.x: torch.func
    import torch.func as functorch


def g_detach(x):
    return torch.autograd.grad((x.detach() * x).sum(), x)[0]


def g_detach_function(x):
    return torch.autograd.grad((torch.detach(x) * x.sin()).sum(), x)[0]


def g_data(x):
    return torch.autograd.grad((x.data * x * x).sum(), x)[0]


def g_no_grad(x):
    with torch.no_grad():
        c = 3 * x
    return torch.autograd.grad((c * x).sum(), x)[0]


@torch.no_grad()
def scaled(x):
    return torch.tanh(x) * 3


def g_no_grad_decorator(x):
    return torch.autograd.grad((scaled(x) * x).sum(), x)[0]


def g_set_grad_enabled(x):
    with torch.set_grad_enabled(False):
        c = x.exp()
    d = x * 2
    return torch.autograd.grad((c * d).sum(), x)[0]


def g_set_grad_enabled_call(x):
    torch.set_grad_enabled(False)
    c = x * x
    torch.set_grad_enabled(True)
    return torch.autograd.grad((c * x).sum(), x)[0]


def g_enable_grad_inside(x):
    with torch.no_grad():
        a = x * 5
        with torch.enable_grad():
            b = x * 7
    return torch.autograd.grad((a * x + b * x).sum(), x)[0]


def g_inference_mode(x):
    with torch.inference_mode():
        c = x * 3
    return torch.autograd.grad((c + x * x).sum(), x)[0]


def g_requires_grad_leaf(x):
    y = x.detach()
    y.requires_grad_()
    gx, gy = torch.autograd.grad((y * x.cos()).sum(), (x, y))
    return gx, gy


def j_no_grad(x, t):
    with fwAD.dual_level():
        d = fwAD.make_dual(x, t)
        with torch.no_grad():
            y = d * d
        return fwAD.unpack_dual(y).tangent


def j_detach(x, t):
    with fwAD.dual_level():
        d = fwAD.make_dual(x, t)
        y = d.detach() * d
        return fwAD.unpack_dual(y).tangent


def j_inference_mode(x, t):
    with fwAD.dual_level():
        d = fwAD.make_dual(x, t)
        with torch.inference_mode():
            y = d * 4
        return fwAD.unpack_dual(y + d).tangent


def loss_no_grad(x):
    with torch.no_grad():
        c = 3 * x
    return (c * x * x).sum()


def loss_detach(x):
    return (x.detach() * x * x).sum()


def h_no_grad(x, v):
    return torch.autograd.functional.hvp(loss_no_grad, x, v)[1]


def h_detach(x, v):
    return torch.autograd.functional.hvp(loss_detach, x, v)[1]


def fj_no_grad(x, v):
    return functorch.jvp(loss_no_grad, (x,), (v,))[1]


def fjg_no_grad(x, v):
    return functorch.jvp(functorch.grad(loss_no_grad), (x,), (v,))[1]


def g_embedding_padding(idx, w, p):
    return torch.autograd.grad((F.embedding(idx, w, padding_idx=2) * p).sum(), w)[0]


def g_embedding_padding_neg(idx, w, p):
    return torch.autograd.grad((F.embedding(idx, w, padding_idx=-1) * p).sum(), w)[0]


def j_embedding_padding(idx, w, t):
    with fwAD.dual_level():
        d = fwAD.make_dual(w, t)
        return fwAD.unpack_dual(F.embedding(idx, d, padding_idx=2)).tangent


def g_cat100(x, p):
    xs = [x * (i + 1) for i in range(100)]
    return torch.autograd.grad((torch.cat(xs, 0) * p).sum(), x)[0]


def j_cat100(x, t):
    with fwAD.dual_level():
        d = fwAD.make_dual(x, t)
        return fwAD.unpack_dual(torch.stack([d * i for i in range(100)], 0).sum(0)).tangent


example_inputs = {
    "g_embedding_padding": (torch.tensor([0, 2, 1, 2, 5, 2, 3, 0]).view(2, 4), torch.randn(6, 3).double(),
                            torch.randn(2, 4, 3).double()),
    "g_embedding_padding_neg": (torch.tensor([0, 5, 1, 2, 5, 2, 3, 0]).view(2, 4), torch.randn(6, 3).double(),
                                torch.randn(2, 4, 3).double()),
    "j_embedding_padding": (torch.tensor([0, 2, 1, 2, 5, 2, 3, 0]).view(2, 4), torch.randn(6, 3).double(),
                            torch.randn(6, 3).double()),
    "g_cat100": (torch.randn(2, 3).double(), torch.randn(200, 3).double()),
    "j_cat100": (torch.randn(2, 3).double(), torch.randn(2, 3).double()),
{rest}}
'''

ENTRIES = [l.split("(")[0][4:] for l in FUNCS.splitlines()
           if l.startswith("def ") and l[4:].startswith(("g_", "j_", "h_", "fj"))]
# the remaining entries take x (and a tangent or direction v) of shape [3, 4]
FUNCS = FUNCS.replace("{rest}", "".join(
    f"    '{e}': (torch.randn(3, 4).double(),{' torch.randn(3, 4).double(),' if e.startswith(('j_', 'h_', 'fj')) else ''}),\n"
    for e in ENTRIES if e not in ("g_embedding_padding", "g_embedding_padding_neg", "j_embedding_padding",
                                  "g_cat100", "j_cat100")))


@pytest.fixture(scope="module")
def program(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("stopgrad")
    path = tmp / "stopgrad.py"
    path.write_text(FUNCS)
    exe = tmp / "net"
    args = []
    for e in ENTRIES:
        args += ["--entry", e]
    run([CTC, "build", path, "-o", exe, *args])
    return tmp, exe, load_module(str(path), "stopgrad_funcs")


def test_ir_shows_stop_gradient(tmp_path):
    p = tmp_path / "m.py"
    p.write_text(FUNCS)
    r = run([CTC, "compile", p, "--emit", "ir", "-o", tmp_path / "m.ir", "--entry", "g_detach",
             "--entry", "g_no_grad", "--entry", "g_inference_mode", "--dump-after", "lower"])
    ir = (tmp_path / "m.ir").read_text()
    # the staged IR has the detach; after AD the cse pass reads its operand instead
    assert " = detach %x" in r.stderr and " = detach " not in ir
    assert "no_grad" in ir and "inference_mode" in ir


@pytest.mark.parametrize("entry", ENTRIES)
def test_matches_pytorch(program, entry):
    tmp, exe, mod = program
    torch.manual_seed(ENTRIES.index(entry))
    ex = mod.example_inputs[entry]
    arrays = [t.numpy() for t in ex]
    targs = [torch.from_numpy(a.copy()) for a in arrays]
    if entry.startswith("g_"):  # differentiated inputs: the float ones
        targs = [t.requires_grad_() if t.dtype.is_floating_point else t for t in targs]
    want = getattr(mod, entry)(*targs)
    want = list(want) if isinstance(want, tuple) else [want]
    want = [np.zeros_like(arrays[-1]) if w is None else w.detach().numpy() for w in want]
    for i, (g, w) in enumerate(zip(run_entry(tmp, exe, entry, arrays, len(want)), want)):
        compare(f"{entry}[{i}]", g, w, 1e-9, 1e-12)


TRAIN = '''\
import torch
import torch.nn as nn
import torch.nn.functional as F


class QNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(6, 16)
        self.fc2 = nn.Linear(16, 4)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


class Distill(nn.Module):
    def __init__(self):
        super().__init__()
        self.student = QNet()
        self.teacher = QNet()
        self.teacher.requires_grad_(False)

    def forward(self, x):
        return self.student(x)


{body}
'''

DQN = '''\
model = QNet()
optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)


def update(s, a, r, s2):
    optimizer.zero_grad()
    q = (model(s) * a).sum(1)
    with torch.no_grad():
        target = r + 0.9 * model(s2).amax(1)
    loss = F.mse_loss(q, target)
    loss.backward()
    optimizer.step()
    return loss


example_inputs = {"forward": (torch.randn(8, 6),),
                  "update": (torch.randn(8, 6), torch.randn(8, 4), torch.randn(8), torch.randn(8, 6))}
'''

DQN_DETACH = DQN.replace("""    with torch.no_grad():
        target = r + 0.9 * model(s2).amax(1)""", """    target = (r + 0.9 * model(s2).amax(1)).detach()""")

DISTILL = '''\
model = Distill()
optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)


def update(x, a, r, s2):
    optimizer.zero_grad()
    loss = F.mse_loss(model.student(x), model.teacher(x).detach()) + (model.teacher(s2) * a).sum() * r.sum()
    loss.backward()
    optimizer.step()
    return loss


example_inputs = {"forward": (torch.randn(8, 6),),
                  "update": (torch.randn(8, 6), torch.randn(8, 4), torch.randn(8), torch.randn(8, 6))}
'''


UNUSED = '''\
class TwoHeads(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = QNet()
        self.spare = nn.Linear(4, 4)

    def forward(self, x):
        return self.body(x)


model = TwoHeads()
optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=0.1)


def update(x, a, r, s2):
    optimizer.zero_grad()
    loss = F.mse_loss((model(x) * a).sum(1), r)
    loss.backward()
    optimizer.step()
    return loss


example_inputs = {"forward": (torch.randn(8, 6),),
                  "update": (torch.randn(8, 6), torch.randn(8, 4), torch.randn(8), torch.randn(8, 6))}
'''


@pytest.mark.parametrize("name,body", [("dqn_no_grad", DQN), ("dqn_detach", DQN_DETACH), ("distill_frozen", DISTILL),
                                       ("unused_params", UNUSED)],
                         ids=["dqn_no_grad", "dqn_detach", "distill_frozen", "unused_params"])
def test_training_with_stopped_gradients(tmp_path, name, body):
    path = tmp_path / f"{name}.py"
    path.write_text(TRAIN.format(body=body))
    exe = tmp_path / "net"
    run([CTC, "build", path, "-o", exe])
    mod = load_module(str(path), name)
    w = tmp_path / "w0.safetensors"
    st_write(w, state_dict_np(mod.model))
    rng = np.random.default_rng(3)
    for step in range(5):
        arrays = [rng.standard_normal(s).astype(np.float32) for s in [(8, 6), (8, 4), (8,), (8, 6)]]
        args = [exe, "run", "update", "--weights", w]
        for i, a in enumerate(arrays):
            np.save(tmp_path / f"in{i}.npy", a)
            args += ["--input", tmp_path / f"in{i}.npy"]
        w = tmp_path / f"w{step + 1}.safetensors"
        run(args + ["--output", tmp_path / "loss.npy", "--save", w, "--save-training-state"])
        want = float(mod.update(*[torch.from_numpy(a) for a in arrays]))
        compare(f"{name}: loss at step {step}", np.load(tmp_path / "loss.npy"), np.array(want, np.float32), 1e-4, 1e-6)
    got = st_read(w)
    for k, v in mod.model.state_dict().items():
        compare(f"{name}: {k} after 5 steps", got[k], v.numpy(), 1e-4, 1e-6)
    if name == "distill_frozen":  # the frozen teacher is untouched and has no optimizer state
        assert not any(k.startswith("optimizer.teacher") for k in got)
    if name == "unused_params":  # no .grad (None), so PyTorch's step skips it: no decay, no state
        assert not any(k.startswith("optimizer.spare") for k in got)


BAD = [
    ("with torch.no_grad:\n        y = x * 2\n    return y", "'no_grad' needs to be called: 'with torch.no_grad():'"),
    ("y = x * 1\n    y.data.add_(1)\n    return y", "in-place update through '.data' inside compiled code is not supported"),
    ("x.data = x * 2\n    return x", "setting '.data' of a tensor is not supported by ctc"),
    ("y = x * 1\n    y[0:2].add_(5)\n    return y", "in-place update of a view"),
    ("y = x * 1\n    z = y.view(1, 3)\n    y.mul_(2)\n    return z", "in-place update of a tensor that has views"),
    ("y = x.detach()\n    y.add_(1)\n    return y", "in-place update of a view"),
    ("import torch.autograd.forward_ad as fw\n    with fw.dual_level():\n        with fw.dual_level():\n"
     "            return fw.unpack_dual(fw.make_dual(x, x)).tangent", "nested forward_ad.dual_level() is not supported"),
]


@pytest.mark.parametrize("body,msg", BAD, ids=["no_grad_uncalled", "data_inplace", "data_assign", "view_inplace", "viewed_inplace", "detach_inplace", "nested_dual_level"])
def test_misuse_is_diagnosed(tmp_path, body, msg):
    p = tmp_path / "bad.py"
    p.write_text(f"import torch\n\n\ndef f(x):\n    {body}\n\n\nexample_inputs = {{'f': (torch.randn(3),)}}\n")
    r = run([CTC, "compile", p, "-o", tmp_path / "bad.c", "--entry", "f"], check=False)
    assert r.returncode == 1, r.stderr
    assert "bad.py:" in r.stderr and "error:" in r.stderr and msg in r.stderr, r.stderr
