"""Forward-mode AD and its compositions with reverse mode, against PyTorch.

- every primitive's JVP (the expressions of test_grad.CASES) through
  torch.autograd.forward_ad (make_dual / unpack_dual) in float64 against
  PyTorch's forward_ad (rtol 1e-6) and a central finite difference;
- jvp, vjp, hvp, vhp, jacobian (both strategies) and hessian of an MLP loss and
  of a tanh network (float32 parameters: rtol 1e-3) against
  torch.autograd.functional; hvp against finite differences of gradients;
  forward-mode jacobian equal to reverse-mode;
- torch.func spellings (grad, grad_and_value, vjp, jvp, jacrev, jacfwd, hessian,
  jvp of grad as hvp): compiled always, compared where PyTorch has torch.func or
  functorch."""
import importlib

import numpy as np
import pytest
import torch

import ctc_testlib
from ctc_testlib import CTC, compare, load_module, run, st_write, state_dict_np
from test_grad import CASES, HEAD, STRAIGHT_THROUGH, inputs_for, parse


def jvp_file(out_shapes):
    src = HEAD + "import torch.autograd.forward_ad as fwAD\n\n\n"
    for k, (label, ins, expr) in enumerate(CASES):
        names = [parse(s)[0] for s in ins]
        floats = [parse(s)[0] for s in ins if not parse(s)[2]]
        tans = [f"t_{n}" for n in floats]
        src += f"def f{k}({', '.join(names)}):  # {label}\n    return {expr}\n\n\n"
        src += f"def j{k}({', '.join(names + tans)}):\n    with fwAD.dual_level():\n"
        call = []
        for n in names:
            if n in floats:
                src += f"        d_{n} = fwAD.make_dual({n}, t_{n})\n"
                call.append(f"d_{n}")
            else:
                call.append(n)
        src += f"        return fwAD.unpack_dual(f{k}({', '.join(call)})).tangent\n\n\n"
    src += "example_inputs = {\n    'forward': (torch.randn(2, 2),),\n"
    for k, (label, ins, expr) in enumerate(CASES):
        ex, tx = [], []
        for s in ins:
            n, shape, is_int = parse(s)
            ex.append(f"torch.randint(0, 6, {shape})" if is_int else f"torch.randn({shape}).double()")
            if not is_int:
                tx.append(f"torch.randn({shape}).double()")
        src += f"    'f{k}': ({', '.join(ex)},),\n    'j{k}': ({', '.join(ex + tx)},),\n"
    return src + "}\n"


@pytest.fixture(scope="module")
def jvp_program(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("jvp")
    path = tmp / "jvps.py"
    path.write_text(jvp_file(None))
    exe = tmp / "net"
    entries = []
    for k in range(len(CASES)):
        entries += ["--entry", f"f{k}", "--entry", f"j{k}"]
    run([CTC, "build", path, "-o", exe, *entries])
    return tmp, exe, path


def run_entry(tmp, exe, entry, arrays):
    return ctc_testlib.run_entry(tmp, exe, entry, arrays, 1)[0]


@pytest.mark.parametrize("k", range(len(CASES)), ids=[c[0] for c in CASES])
def test_jvp_rule(jvp_program, k):
    tmp, exe, path = jvp_program
    label, ins, expr = CASES[k]
    xs = inputs_for(ins, k)
    floats = [i for i, s in enumerate(ins) if not parse(s)[2]]
    rng = np.random.default_rng(300 + k)
    ts = [rng.standard_normal(xs[i].shape) for i in floats]
    got = run_entry(tmp, exe, f"j{k}", xs + ts)
    mod = load_module(str(path), "jvps_mod")
    import torch.autograd.forward_ad as fwAD
    with fwAD.dual_level():
        args = [torch.from_numpy(x) for x in xs]
        for j, i in enumerate(floats):
            args[i] = fwAD.make_dual(args[i], torch.from_numpy(ts[j]))
        want = fwAD.unpack_dual(getattr(mod, f"f{k}")(*args)).tangent
    compare(f"{label} jvp", got, want.numpy(), 1e-6, 1e-9)
    if label in STRAIGHT_THROUGH:
        return
    h = 1e-6
    plus, minus = list(xs), list(xs)
    for j, i in enumerate(floats):
        plus[i] = xs[i] + h * ts[j]
        minus[i] = xs[i] - h * ts[j]
    fd = (run_entry(tmp, exe, f"f{k}", plus) - run_entry(tmp, exe, f"f{k}", minus)) / (2 * h)
    compare(f"{label} jvp vs finite difference", got, fd, 1e-5, 1e-6)


FUNCTIONAL = """\
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.autograd.functional import jvp, vjp, hvp, vhp, jacobian, hessian


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(5, 8)
        self.fc2 = nn.Linear(8, 3)

    def forward(self, x):
        return self.fc2(torch.tanh(self.fc1(x)))


model = MLP()
target = torch.tensor([0, 2, 1, 1])


def mlp_loss(x):
    return F.cross_entropy(model(x), target)


def tanh_net(x):
    return torch.tanh(x @ x.t()).sum(dim=1)


def e_jvp(x, v):
    return jvp(mlp_loss, x, v)


def e_vjp(x, u):
    return vjp(tanh_net, x, u)


def e_hvp(x, v):
    return hvp(mlp_loss, x, v)


def e_vhp(x, v):
    return vhp(mlp_loss, x, v)


def e_jac_rev(x):
    return jacobian(tanh_net, x)


def e_jac_fwd(x):
    return jacobian(tanh_net, x, strategy="forward-mode", vectorize=True)


def e_hessian(x):
    return hessian(mlp_loss, x)


def e_grad(x):
    return torch.autograd.grad(mlp_loss(x), x)


X = torch.randn(4, 5)
example_inputs = {"forward": (X,), "e_jvp": (X, X), "e_vjp": (X, torch.randn(4)), "e_hvp": (X, X), "e_vhp": (X, X),
                  "e_jac_rev": (X,), "e_jac_fwd": (X,), "e_hessian": (X,), "e_grad": (X,)}
"""


@pytest.fixture(scope="module")
def functional_program(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("functional")
    path = tmp / "functional.py"
    path.write_text(FUNCTIONAL)
    exe = tmp / "net"
    run([CTC, "build", path, "-o", exe])
    mod = load_module(str(path), "functional_mod")
    w = tmp / "w.safetensors"
    st_write(w, state_dict_np(mod.model))
    return tmp, exe, mod, w


def run_named(tmp, exe, w, entry, arrays, nout):
    args = [exe, "run", entry, "--weights", w]
    for i, a in enumerate(arrays):
        np.save(tmp / f"{entry}{i}.npy", a)
        args += ["--input", tmp / f"{entry}{i}.npy"]
    outs = [tmp / f"{entry}_o{i}.npy" for i in range(nout)]
    for o in outs:
        args += ["--output", o]
    run(args)
    return [np.load(o) for o in outs]


def test_functional_api(functional_program):
    tmp, exe, mod, w = functional_program
    from torch.autograd import functional as AF
    rng = np.random.default_rng(7)
    x = rng.standard_normal((4, 5)).astype(np.float32)
    v = rng.standard_normal((4, 5)).astype(np.float32)
    u = rng.standard_normal(4).astype(np.float32)
    tx, tv, tu = map(torch.from_numpy, (x, v, u))
    cases = [
        ("e_jvp", [x, v], AF.jvp(mod.mlp_loss, tx, tv)),
        ("e_vjp", [x, u], AF.vjp(mod.tanh_net, tx, tu)),
        ("e_hvp", [x, v], AF.hvp(mod.mlp_loss, tx, tv)),
        ("e_vhp", [x, v], AF.vhp(mod.mlp_loss, tx, tv)),
        ("e_jac_rev", [x], (AF.jacobian(mod.tanh_net, tx),)),
        ("e_jac_fwd", [x], (AF.jacobian(mod.tanh_net, tx, strategy="forward-mode", vectorize=True),)),
        ("e_hessian", [x], (AF.hessian(mod.mlp_loss, tx),)),
    ]
    for entry, ins, want in cases:
        got = run_named(tmp, exe, w, entry, ins, len(want))
        for i, (g, wt) in enumerate(zip(got, want)):
            compare(f"{entry} output {i}", g, wt.detach().numpy(), 1e-3, 1e-5)
    # forward-mode and reverse-mode jacobians agree
    jr = run_named(tmp, exe, w, "e_jac_rev", [x], 1)[0]
    jf = run_named(tmp, exe, w, "e_jac_fwd", [x], 1)[0]
    compare("forward vs reverse jacobian", jf, jr, 1e-5, 1e-6)


def test_hvp_matches_finite_differences_of_gradients(functional_program):
    tmp, exe, mod, w = functional_program
    rng = np.random.default_rng(8)
    x = rng.standard_normal((4, 5)).astype(np.float64)
    v = rng.standard_normal((4, 5)).astype(np.float64)
    hv = run_named(tmp, exe, w, "e_hvp", [x.astype(np.float32), v.astype(np.float32)], 2)[1]
    h = 1e-2  # float32 gradients: a larger step, tolerance to match
    gp = run_named(tmp, exe, w, "e_grad", [(x + h * v).astype(np.float32)], 1)[0].astype(np.float64)
    gm = run_named(tmp, exe, w, "e_grad", [(x - h * v).astype(np.float32)], 1)[0].astype(np.float64)
    compare("hvp vs (grad(x+hv) - grad(x-hv)) / 2h", hv, (gp - gm) / (2 * h), 2e-2, 2e-4)


TORCH_FUNC = """\
import torch
try:
    from torch.func import grad, grad_and_value, vjp, jvp, jacrev, jacfwd, hessian
except ImportError:
    from functorch import grad, grad_and_value, vjp, jvp, jacrev, jacfwd, hessian
import torch.nn as nn


class Net(nn.Module):
    def forward(self, x):
        return x


def f(x):
    return (torch.sin(x) * x).sum()


def g(x):
    return torch.tanh(x) * 2.0


def e_grad(x):
    return grad(f)(x)


def e_grad_and_value(x):
    return grad_and_value(f)(x)


def e_vjp(x, u):
    out, fn = vjp(g, x)
    return fn(u)[0]


def e_jvp(x, v):
    return jvp(g, (x,), (v,))


def e_jacrev(x):
    return jacrev(g)(x)


def e_jacfwd(x):
    return jacfwd(g)(x)


def e_hessian(x):
    return hessian(f)(x)


def e_hvp(x, v):
    return jvp(grad(f), (x,), (v,))[1]


X = torch.randn(5).double()
example_inputs = {"forward": (X,), "e_grad": (X,), "e_grad_and_value": (X,), "e_vjp": (X, X), "e_jvp": (X, X),
                  "e_jacrev": (X,), "e_jacfwd": (X,), "e_hessian": (X,), "e_hvp": (X, X)}
"""


def test_torch_func_spellings(tmp_path):
    path = tmp_path / "tf.py"
    path.write_text(TORCH_FUNC)
    exe = tmp_path / "net"
    run([CTC, "build", path, "-o", exe])  # compile-checked always
    have = importlib.util.find_spec("functorch") is not None
    try:
        importlib.import_module("torch.func")
        have = True
    except ImportError:
        pass
    if not have:
        pytest.skip("this PyTorch has neither torch.func nor functorch: compiled, not compared")
    mod = load_module(str(path), "tf_mod")
    rng = np.random.default_rng(9)
    x, v = rng.standard_normal(5), rng.standard_normal(5)
    tx, tv = torch.from_numpy(x), torch.from_numpy(v)
    cases = [("e_grad", [x], (mod.e_grad(tx),)), ("e_grad_and_value", [x], mod.e_grad_and_value(tx)),
             ("e_vjp", [x, v], (mod.e_vjp(tx, tv),)), ("e_jvp", [x, v], mod.e_jvp(tx, tv)),
             ("e_jacrev", [x], (mod.e_jacrev(tx),)), ("e_jacfwd", [x], (mod.e_jacfwd(tx),)),
             ("e_hessian", [x], (mod.e_hessian(tx),)), ("e_hvp", [x, v], (mod.e_hvp(tx, tv),))]
    for entry, ins, want in cases:
        args = [exe, "run", entry]
        for i, a in enumerate(ins):
            np.save(tmp_path / f"{entry}{i}.npy", a)
            args += ["--input", tmp_path / f"{entry}{i}.npy"]
        outs = [tmp_path / f"{entry}_o{i}.npy" for i in range(len(want))]
        for o in outs:
            args += ["--output", o]
        run(args)
        for o, wt in zip(outs, want):
            compare(entry, np.load(o), wt.detach().numpy(), 1e-6, 1e-9)


@pytest.mark.slow
def test_hessian_eigenvalue_example():
    """examples/hessian_top_eigenvalue.py: power iteration on compiled hvp on real
    Fashion-MNIST data agrees with the same iteration on PyTorch's hvp."""
    import os
    import re
    import subprocess
    import sys
    from ctc_testlib import EXAMPLES
    if not os.path.isdir("/usr/share/datasets/fashion-mnist"):
        pytest.skip("dataset-fashion-mnist is not installed")
    r = subprocess.run([sys.executable, os.path.join(EXAMPLES, "hessian_top_eigenvalue.py"), "--iters", "8"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    vals = [float(v) for v in re.findall(r"eigenvalue after 8 iterations: ([0-9.]+)", r.stdout)]
    assert len(vals) == 2 and abs(vals[0] - vals[1]) <= 1e-4 * vals[1], r.stdout


DOUBLE = """\
import torch


def f(x):
    return (torch.tanh(x) ** 3).sum() + (x @ x.t()).exp().sum() * 0.01


def double_backward(x, v):
    (g,) = torch.autograd.grad(f(x), x, create_graph=True)
    return torch.autograd.grad((g * v).sum(), x)


example_inputs = {"double_backward": (torch.randn(3, 4).double(), torch.randn(3, 4).double())}
"""


def test_double_backward(tmp_path):
    """torch.autograd.grad(..., create_graph=True) then grad again: reverse over
    reverse gives H v, compared with PyTorch in float64."""
    path = tmp_path / "db.py"
    path.write_text(DOUBLE)
    exe = tmp_path / "net"
    run([CTC, "build", path, "-o", exe])
    rng = np.random.default_rng(11)
    x, v = rng.standard_normal((3, 4)), rng.standard_normal((3, 4))
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "v.npy", v)
    run([exe, "run", "double_backward", "--input", tmp_path / "x.npy", "--input", tmp_path / "v.npy",
         "--output", tmp_path / "hv.npy"])
    mod = load_module(str(path), "double_mod")
    tx = torch.tensor(x, requires_grad=True)
    want = mod.double_backward(tx, torch.from_numpy(v))[0]
    compare("double backward", np.load(tmp_path / "hv.npy"), want.detach().numpy(), 1e-6, 1e-9)
