"""NaN, infinities and signed zeros: every primitive (and the composites built
from them) gives PyTorch's special values, forward and gradients.

Inputs are .npy files holding nan, +inf, -inf, -0.0, 0.0 and ordinary values;
x[i, j] = V[i] and y[i, j] = V[j], so every binary op sees every pair. The
comparison demands NaN exactly where PyTorch has NaN, infinities of the same
sign where PyTorch has them, the sign of zero for the ops where PyTorch's is
well defined, and rtol 1e-4 / atol 1e-5 elsewhere (float32). Also: f32 code
calls the float versions of the math functions (expf, not exp)."""
import re

import numpy as np
import pytest
import torch

from ctc_testlib import CTC, compare, load_module, run, run_entry

V = np.array([np.nan, np.inf, -np.inf, -0.0, 0.0, 1.5, -2.0, 0.5, 3.0], dtype=np.float32)
N = len(V)
X = np.repeat(V[:, None], N, axis=1)
Y = np.repeat(V[None, :], N, axis=0)
# rows for softmax-like reductions: a NaN, all -inf, a +inf, a -inf among finite, finite
Z = np.array([[1.0, np.nan, 2.0, 0.5], [-np.inf] * 4, [1.0, np.inf, 2.0, 0.5], [-np.inf, 1.0, 2.0, 0.5],
              [0.25, -1.0, 2.0, 0.5]], dtype=np.float32)
# an image for pooling: NaNs in some windows, -inf in others
P = np.arange(36, dtype=np.float32).reshape(1, 1, 6, 6) % 7 - 3
P[0, 0, 0, 1] = np.nan
P[0, 0, 3, 3] = np.nan
P[0, 0, 3, 4] = np.nan
P[0, 0, 4:6, 0:2] = -np.inf
P[0, 0, 1, 5] = np.inf

HEAD = """\
import math
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.autograd.forward_ad as fwAD

nan = float('nan')
inf = float('inf')

"""

# (label, expression over x, y (f32[9,9]), z (f32[5,4]), p (f32[1,1,6,6]))
FORWARD = [
    ("relu", "F.relu(x)"), ("relu_t", "torch.relu(x)"), ("relu_inplace", "F.relu(x * 1, inplace=True)"),
    ("leaky_relu", "F.leaky_relu(x, 0.1)"), ("maximum", "torch.maximum(x, y)"), ("minimum", "torch.minimum(x, y)"),
    ("clamp", "x.clamp(-1, 1)"), ("clamp_min", "x.clamp(min=0)"), ("clamp_max", "torch.clamp(x, max=0.5)"),
    ("clamp_crossed", "x.clamp(2, 1)"), ("clamp_nan_min", "x.clamp(min=nan)"), ("clamp_nan_both", "x.clamp(nan, 1)"),
    ("clamp_inf", "x.clamp(-inf, inf)"), ("clamp_tensor", "x.clamp(min=y)"),
    ("where", "torch.where(x > y, x, y)"), ("masked_fill", "x.masked_fill(y > 0, -inf)"),
    ("exp", "torch.exp(x)"), ("exp_big", "torch.exp(x * 100)"), ("log", "torch.log(x)"), ("sqrt", "torch.sqrt(x)"),
    ("rsqrt", "torch.rsqrt(x)"), ("tanh", "torch.tanh(x)"), ("sigmoid", "torch.sigmoid(x)"),
    ("gelu", "F.gelu(x)"), ("gelu_tanh", "F.gelu(x, approximate='tanh')"), ("silu", "F.silu(x)"),
    ("abs", "x.abs()"), ("neg", "-x"), ("erf", "torch.erf(x)"), ("sin", "torch.sin(x)"), ("cos", "torch.cos(x)"),
    ("tan", "torch.tan(x)"),
    ("add", "x + y"), ("sub", "x - y"), ("mul", "x * y"), ("div", "x / y"), ("rdiv", "1 / x"),
    ("pow2", "x ** 2"), ("pow3", "x ** 3"), ("pow_half", "x ** 0.5"), ("pow_mhalf", "x ** -0.5"),
    ("pow_m1", "x ** -1"), ("pow_m2", "x ** -2"), ("pow_1_5", "x ** 1.5"), ("pow0", "x ** 0"),
    ("pow_xy", "torch.pow(x, y)"), ("rpow", "2 ** x"),
    ("eq", "(x == y).float()"), ("ne", "(x != y).float()"), ("lt", "(x < y).float()"), ("ge", "(x >= y).float()"),
    ("to_long", "x.long()"), ("to_int", "x.int()"), ("to_bool", "x.to(torch.bool).float()"),
    ("amax", "x.amax(dim=1)"), ("amax_y", "y.amax(dim=0)"), ("sum", "x.sum(dim=1)"), ("mean", "y.mean(dim=1)"),
    ("softmax", "F.softmax(z, dim=1)"), ("log_softmax", "F.log_softmax(z, dim=1)"),
    ("softmax0", "torch.softmax(z, dim=0)"),
    ("layer_norm", "F.layer_norm(z, (4,))"),
    ("max_pool", "F.max_pool2d(p, 2)"), ("max_pool_pad", "F.max_pool2d(p, 3, stride=2, padding=1)"),
    ("avg_pool", "F.avg_pool2d(p, 2)"),
    ("cross_entropy", "F.cross_entropy(z[2:], torch.tensor([1, 2, 0]), reduction='none')"),
    ("cross_entropy_ignore", "F.cross_entropy(z[3:], torch.tensor([0, 1]), ignore_index=0)"),
    ("mse", "F.mse_loss(x, y, reduction='none')"),
    ("smooth_l1", "F.smooth_l1_loss(x, y, reduction='none')"),
]
# ops whose sign of zero PyTorch defines (others, e.g. maximum(-0.0, 0.0), depend on its vectorisation)
SIGNED_ZERO = {"relu", "relu_t", "relu_inplace", "leaky_relu", "clamp", "clamp_min", "abs", "neg", "rsqrt", "sqrt",
               "pow_half", "pow_mhalf", "pow_m1", "rdiv", "pow3", "exp"}

# gradients: (label, expression over x, y (f32[9,9]), z, p), differentiated w.r.t. the listed inputs
GRADS = [
    ("relu", "F.relu(x)", "x"), ("leaky_relu", "F.leaky_relu(x, 0.1)", "x"), ("abs", "x.abs()", "x"),
    ("maximum", "torch.maximum(x, y)", "x, y"), ("minimum", "torch.minimum(x, y)", "x, y"),
    ("clamp", "x.clamp(-1, 1)", "x"), ("clamp_min", "x.clamp(min=0)", "x"), ("clamp_tensor", "x.clamp(min=y)", "x, y"),
    ("where", "torch.where(x > 0, x, y * 2)", "x, y"), ("amax", "x.amax(dim=1) + y.amax(dim=0)", "x, y"),
    ("pow_xy", "torch.pow(x, y)", "x, y"), ("pow0", "x ** 0", "x"),
    ("max_pool", "F.max_pool2d(p, 2)", "p"), ("max_pool_pad", "F.max_pool2d(p, 3, stride=2, padding=1)", "p"),
    ("cross_entropy", "F.cross_entropy(z[2:], torch.tensor([1, 2, 0]))", "z"),
    ("softmax", "F.log_softmax(z[3:], dim=1)", "z"),
]
# forward mode (torch.autograd.forward_ad): tangents of x and y are ones and tens
JVPS = [
    ("relu", "F.relu(x)"), ("maximum", "torch.maximum(x, y)"), ("minimum", "torch.minimum(x, y)"),
    ("clamp", "x.clamp(-1, 1)"), ("amax", "x.amax(dim=1)"), ("pow_xy", "torch.pow(x, y)"), ("abs", "x.abs()"),
]


def model_source():
    src = HEAD + "class Net(nn.Module):\n    def forward(self, x, y, z, p):\n"
    for k, (label, e) in enumerate(FORWARD):
        src += f"        r{k} = {e}  # {label}\n"
    src += "        return " + ", ".join(f"r{k}" for k in range(len(FORWARD))) + "\n\n\n"
    for k, (label, e, wrt) in enumerate(GRADS):
        src += (f"def g{k}(x, y, z, p):  # {label}\n    out = {e}\n"
                f"    return torch.autograd.grad((out * torch.ones_like(out)).sum(), ({wrt},))\n\n\n")
    for k, (label, e) in enumerate(JVPS):
        src += (f"def j{k}(x, y, tx, ty):  # {label}\n    with fwAD.dual_level():\n"
                f"        x = fwAD.make_dual(x, tx)\n        y = fwAD.make_dual(y, ty)\n"
                f"        return fwAD.unpack_dual({e}).tangent\n\n\n")
    ex = "(torch.zeros(9, 9), torch.zeros(9, 9), torch.zeros(5, 4), torch.zeros(1, 1, 6, 6))"
    src += "example_inputs = {\n    'forward': " + ex + ",\n"
    for k in range(len(GRADS)):
        src += f"    'g{k}': {ex},\n"
    for k in range(len(JVPS)):
        src += f"    'j{k}': (torch.zeros(9, 9), torch.zeros(9, 9), torch.zeros(9, 9), torch.zeros(9, 9)),\n"
    return src + "}\n"


def same(name, got, want, signed_zero=False):
    """Equal special values (NaN where torch has NaN, infinities of the same
    sign), rtol 1e-4 / atol 1e-5 elsewhere; integers exactly."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape, f"{name}: shape {got.shape} vs torch {want.shape}"
    if want.dtype.kind != "f":
        np.testing.assert_array_equal(got, want, err_msg=name)
        return
    got, want = got.astype(np.float64), want.astype(np.float64)
    bad = np.isnan(got) != np.isnan(want)
    assert not bad.any(), (f"{name}: NaN mismatch at {np.argwhere(bad)[:4].tolist()}: "
                           f"ctc {got[bad][:4]}, torch {want[bad][:4]}")
    wi = np.isinf(want)
    bad = (np.isinf(got) != wi) | (wi & (got != want))
    assert not bad.any(), (f"{name}: infinity mismatch at {np.argwhere(bad)[:4].tolist()}: "
                           f"ctc {got[bad][:4]}, torch {want[bad][:4]}")
    if signed_zero:
        z = want == 0
        bad = z & (np.signbit(got) != np.signbit(want))
        assert not bad.any(), f"{name}: sign of zero differs at {np.argwhere(bad)[:4].tolist()}"
    fin = np.isfinite(want)
    if fin.any():
        compare(name, got[fin], want[fin], 1e-4, 1e-5)


@pytest.fixture(scope="module")
def program(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("nan")
    path = tmp / "nan_model.py"
    path.write_text(model_source())
    exe = tmp / "net"
    entries = []
    for k in range(len(GRADS)):
        entries += ["--entry", f"g{k}"]
    for k in range(len(JVPS)):
        entries += ["--entry", f"j{k}"]
    run([CTC, "build", path, "-o", exe, "--model", "Net", *entries])
    return tmp, exe, path, load_module(str(path), "nan_model")




def test_forward_special_values(program):
    tmp, exe, path, mod = program
    ins = [X, Y, Z, P]
    got = run_entry(tmp, exe, "forward", ins, len(FORWARD))
    with torch.no_grad():
        want = mod.Net()(*[torch.from_numpy(a.copy()) for a in ins])
    errors = []
    for (label, _), g, w in zip(FORWARD, got, want):
        try:
            same(label, g, w.numpy(), label in SIGNED_ZERO)
        except AssertionError as e:
            errors.append(str(e))
    assert not errors, "\n".join(errors)


@pytest.mark.parametrize("k", range(len(GRADS)), ids=[g[0] for g in GRADS])
def test_gradient_special_values(program, k):
    tmp, exe, path, mod = program
    label, expr, wrt = GRADS[k]
    ins = [X, Y, Z, P]
    nout = len(wrt.split(","))
    got = run_entry(tmp, exe, f"g{k}", ins, nout)
    want = getattr(mod, f"g{k}")(*[torch.tensor(a, requires_grad=True) for a in ins])
    for g, w, n in zip(got, want, wrt.split(",")):
        same(f"{label} d/d{n.strip()}", g, w.numpy())


@pytest.mark.parametrize("k", range(len(JVPS)), ids=[j[0] for j in JVPS])
def test_jvp_special_values(program, k):
    tmp, exe, path, mod = program
    label, expr = JVPS[k]
    ins = [X, Y, np.ones_like(X), np.full_like(Y, 10.0)]
    got = run_entry(tmp, exe, f"j{k}", ins, 1)[0]
    want = getattr(mod, f"j{k}")(*[torch.from_numpy(a.copy()) for a in ins])
    same(f"{label} jvp", got, want.numpy())


def test_clamp_literal_out_of_range(tmp_path):
    """PyTorch: 'value cannot be converted to type int without overflow'; ctc
    says so at the line instead of emitting a literal that does not fit."""
    path = tmp_path / "m.py"
    path.write_text("import torch\nimport torch.nn as nn\n\n\nclass Net(nn.Module):\n    def forward(self, x):\n"
                    "        return x.clamp(9223372036854775807, 4294967296)\n\n\nmodel = Net()\n")
    r = run([CTC, "compile", path, "-o", tmp_path / "m.c", "--input", "x=i32[4]"], check=False)
    assert r.returncode == 1, r.stderr
    assert "m.py:7:16: error: value 9223372036854775807 cannot be converted to type int32 without overflow" in r.stderr


INT_SRC = """\
import torch
import torch.nn as nn


class Net(nn.Module):
    def forward(self, i, l):
        return (i.clamp(-2147483648, 2147483647), i + 2 ** 31, i * 2 ** 31, -i, i.abs(), i ** 3, l ** 5, i.sum(),
                l.clamp(max=3), torch.where(i > 0, i, 7))
"""


def test_integer_ops_wrap_like_pytorch(tmp_path):
    """int32/int64 arithmetic wraps as in PyTorch (no signed-overflow UB in the C)."""
    path = tmp_path / "ints.py"
    path.write_text(INT_SRC)
    exe = tmp_path / "net"
    run([CTC, "build", path, "-o", exe, "--input", "i=i32[6]", "--input", "l=i64[6]"])
    i = np.array([-2147483648, 2147483647, -3, 0, 1290, 7], dtype=np.int32)
    l = np.array([-(2 ** 62), 2 ** 40, -3, 0, 7919, 123456], dtype=np.int64)
    got = run_entry(tmp_path, exe, "forward", [i, l], 10)
    want = load_module(str(path), "ints_mod").Net()(torch.from_numpy(i), torch.from_numpy(l))
    for k, (g, w) in enumerate(zip(got, want)):
        np.testing.assert_array_equal(g, w.numpy(), err_msg=f"output {k}")


def test_f32_code_calls_float_math(tmp_path):
    """f32 code calls expf/logf/tanhf...; f64 code exp/log/tanh (the ops.def
    templates are written with the double names and renamed by dtype)."""
    src = ("import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n\n\nclass Net(nn.Module):\n"
           "    def forward(self, x):\n        return (torch.exp(x), torch.log(x), torch.sqrt(x), torch.tanh(x),\n"
           "                F.gelu(x), x.abs(), torch.sin(x), torch.cos(x), torch.pow(x, x), torch.sigmoid(x))\n")
    path = tmp_path / "m.py"
    path.write_text(src)
    fns = ["exp", "log", "sqrt", "tanh", "erf", "fabs", "sin", "cos", "pow"]
    for dt, suffix in (("f32", "f"), ("f64", "")):
        c = tmp_path / f"m_{dt}.c"
        run([CTC, "compile", path, "-o", c, "--input", f"x={dt}[8]"])
        body = re.sub(r"/\*.*?\*/", "", c.read_text(), flags=re.S)   # code only, not the comments
        for fn in fns:
            if fn in ("tanh", "exp", "erf", "log", "sin", "cos") and suffix:   # f32 tanh, exp, erf, log, sin and
                # cos are ctc_tanh_f32, ctc_exp_f32..., and sigmoid's exp ctc_exp_cr_f32 (no libm call: their
                # loops vectorise)
                assert re.search(rf"\bctc_{fn}_f32\(", body) and not re.search(rf"\b{fn}f?\(", body), fn
                continue
            assert re.search(rf"\b{fn}{suffix}\(", body), f"{dt}: no call of {fn}{suffix}"
            if suffix:
                assert not re.search(rf"\b{fn}\(", body), f"f32 code calls the double {fn}"
