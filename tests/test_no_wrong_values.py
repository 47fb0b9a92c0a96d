"""Values that must equal PyTorch's exactly where PyTorch's semantics are easy
to miss (issue 27): no-op conversions return the tensor itself (so an in-place
update through the result reaches the original), the gradients of losses at
the edges of their domains, and compile-time str()/repr() of values."""
import re
import subprocess

import numpy as np
import pytest
import torch

from ctc_testlib import CTC, compare, load_module, run_entry, run_forward

ALIAS_SRC = '''
import torch
import torch.nn as nn

y0 = torch.ones(3)
# PyTorch returns self for a conversion that changes nothing, a new tensor otherwise
SAME = [y0.float() is y0, y0.to(torch.float32) is y0, y0.type_as(y0) is y0, y0.contiguous() is y0,
        y0.cpu() is y0, y0.to("cpu") is y0, y0.to(y0) is y0, y0.to(dtype=torch.float32) is y0,
        y0.double() is y0, y0.to(torch.float32, copy=True) is y0, y0.long() is y0]


class Net(nn.Module):
    def forward(self, x):
        y = x * 1
        y.float().mul_(2)
        y.to(torch.float32).add_(1)
        y.type_as(x).mul_(3)
        y.contiguous().add_(10)
        y.to("cpu").mul_(2)
        y.cpu().add_(1)
        y.to(x).mul_(2)
        y.to(dtype=torch.float32).add_(-0.5)
        d = y.double()
        d.mul_(100)          # a new float64 tensor: y unchanged
        c = y.to(torch.float32, copy=True)
        c.mul_(1000)         # copy=True: a new tensor
        n = y.long()
        n.add_(7)
        flags = sum(2.0 ** i for i, s in enumerate(SAME) if s)
        return y + flags, d, n


example_inputs = (torch.zeros(3),)
'''


def test_noop_conversions_alias(tmp_path):
    path = tmp_path / "model.py"
    path.write_text(ALIAS_SRC)
    mod = load_module(str(path))
    x = np.array([1.0, -2.0, 3.5], np.float32)
    want = [t.detach().numpy() for t in mod.Net()(torch.from_numpy(x))]
    got = run_forward(str(tmp_path), str(path), mod.Net(), [x])
    assert len(got) == 3
    for g, w in zip(got, want):
        assert g.dtype == w.dtype
        compare("alias", g, w, 1e-6, 0)


# ---- compile-time text: CPython's, or a located error ------------------------

# Module-level expressions whose text ctc computes at compile time; the forward
# returns their characters (as indices into ALPHA) so CPython's text is the oracle.
TEXT_EXPRS = [
    "str(math.fabs(-2.0))", "repr(math.fabs(-2.5))", "f'{math.fabs(-0.0)}'", "str(len(str(math.fabs(-2.0))))",
    "str(math.trunc(-2.7))", "str(math.trunc(7))", "repr(math.log2(8.0))", "repr(math.log10(1e-3))",
    "repr(math.log1p(1e-10))", "repr(math.expm1(1e-10))", "repr(math.tan(0.5))", "repr(math.atan(2.0))",
    "repr(math.asin(0.25))", "repr(math.acos(-0.75))", "repr(math.sinh(1.5))", "repr(math.cosh(1.5))",
    "repr(math.asinh(3.0))", "repr(math.acosh(3.0))", "repr(math.atanh(0.5))", "repr(math.erf(0.5))",
    "repr(math.erfc(2.5))", "repr(math.degrees(1.0))", "repr(math.radians(90.0))", "str(math.isnan(math.nan))",
    "str(math.isinf(-math.inf))", "str(math.isfinite(1e308))", "repr(math.atan2(1.0, -2.0))",
    "repr(math.copysign(3.0, -0.0))", "repr(math.fmod(-7.5, 2.0))", "repr(math.fmod(3.0, math.inf))",
    "str(math.gcd(12, -18))", "str(math.gcd())", "str(math.factorial(20))", "repr(math.tau)",
    "'%s' % math.fabs(-1.5)", "'{}'.format(math.cosh(1.0))", "f'{math.sinh(1.0):.3f}'",
    "str(torch.float64)", "repr(torch.int32)", "f'{torch.bool}'", "str([torch.float32, (1, 2.5, None)])",
    "repr(np.pi)", "f'{np.e}'",   # numpy's constants are Python floats
]
ALPHA = "".join(chr(c) for c in range(32, 127))


def test_compile_time_text_is_cpythons(tmp_path):
    src = ("import math\nimport numpy as np\nimport torch\nimport torch.nn as nn\n\n"
           f"ALPHA = {ALPHA!r}\nTEXTS = [{', '.join(TEXT_EXPRS)}]\n"
           "CODES = [ALPHA.find(c) for c in '|'.join(TEXTS)]\n\n\n"
           "class Net(nn.Module):\n    def forward(self, x):\n"
           "        return x + torch.tensor(CODES, dtype=torch.float32)\n\n\n"
           "example_inputs = (torch.zeros(1),)\n")
    path = tmp_path / "model.py"
    path.write_text(src)
    mod = load_module(str(path))
    want = "|".join(mod.TEXTS)
    got = run_forward(str(tmp_path), str(path), mod.Net(), [np.zeros(1, np.float32)])[0]
    text = "".join(ALPHA[int(c)] if 0 <= c < len(ALPHA) else "?" for c in got)
    assert text == want


# Text that ctc cannot know (an opaque value: numpy's arrays and scalar types are not
# modelled; its constants, Python floats, are) is refused where it is used, with a located
# error; a print() of it (dropped) still compiles.
REFUSED_TEXT = [
    ("len(str(np.float32(2.0)))", "str()"),
    ("len(repr(np.float32(2.0)))", "repr()"),
    ("len(f'{np.float32(2.0)}')", "f-string"),
    ("len('%s' % np.float32(2.0))", "numpy.float32"),
    ("len('{}'.format(np.float32(2.0)))", "str.format"),
    ("len(str([np.float32(2.0)]))", "its text"),
    ("len(np.zeros(3))", "len("),
    ("len(str(len))", "text of a builtin function"),
    ("len(repr(math))", "text of a module"),
    ("len(f'{torch.ones(2)}')", "text of a"),
    ("len(str(nn.Linear(2, 3)))", "text of a"),
    ("len(str([len]))", "text of a builtin function"),
    ("math.gamma(2.0)", "math.gamma is not supported"),
    ("math.log2(0.0)", "math domain error"),
    ("math.fmod(1.0, 0.0)", "math domain error"),
    ("math.cosh(1000.0)", "math range error"),
    ("math.factorial(-1)", "not defined for negative values"),
]


def _check(tmp_path, value_expr, extra=""):
    src = ("import math\nimport numpy as np\nimport torch\nimport torch.nn as nn\n\n"
           f"{extra}N = {value_expr}\n\n\n"
           "class Net(nn.Module):\n    def forward(self, x):\n        return x * N\n\n\n"
           "example_inputs = (torch.zeros(1),)\n")
    path = tmp_path / "model.py"
    path.write_text(src)
    return subprocess.run([CTC, "check", str(path)], capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("expr,msg", REFUSED_TEXT, ids=[e for e, _ in REFUSED_TEXT])
def test_unknown_text_is_refused(tmp_path, expr, msg):
    r = _check(tmp_path, expr)
    assert r.returncode == 1, r.stdout + r.stderr
    assert re.search(r"model\.py:\d+:\d+: error: ", r.stderr), r.stderr
    assert msg in r.stderr, r.stderr


def test_printing_unknown_text_compiles(tmp_path):
    r = _check(tmp_path, "3.0", "v = np.float32(np.pi)\nprint(f'{v}', str(v), repr(v), '%s' % v, '{}'.format(v))\n")
    assert r.returncode == 0, r.stderr


# ---- losses at the edges of their domains --------------------------------------

# (loss, input, target): PyTorch 1.13's value and gradients with respect to both,
# where its backward formulas differ from the derivative of the clamped forward
# (binary_cross_entropy: d/dtarget = -logit(input), +-inf at 0 and 1; d/dinput =
# (input - target) / max(input (1 - input), 1e-12)) or sit on a kink (logits at 0:
# sigmoid(0) - target; l1 / smooth_l1 at input == target).
LOSS_EDGES = [
    ("binary_cross_entropy", [0, 0, 1, 1, 0.5, 1e-13, 0, 1e-40, 0.3, 1 - 2 ** -24],
     [0, 1, 0, 1, 0.3, 0, 0.5, 1, 1, 0.25]),
    ("binary_cross_entropy_with_logits", [0, 0, -0.0, 3, -100, 100, -100, 100, 2, 1e-30],
     [0, 1, 0, 1, 0.3, 0, 0.5, 1, 1, 0.75]),
    ("l1_loss", [0, 1, 2, -1, 3], [0, 1, 2.5, -1, -3]),
    ("smooth_l1_loss", [0, 0.5, 1, -1, 3], [0, 0, 1.5, -1, 2]),
    ("mse_loss", [0, 1e-30, 2, -1, 3], [0, 0, 2.5, -1, 3]),
]


@pytest.mark.parametrize("reduction", ["sum", "mean", "none"])
@pytest.mark.parametrize("loss,xs,ys", LOSS_EDGES, ids=[c[0] for c in LOSS_EDGES])
def test_loss_gradients_at_edges(tmp_path, loss, xs, ys, reduction):
    src = ("import torch\nimport torch.nn.functional as F\n\n\n"
           "def grads(x, y, g):\n"
           f"    out = F.{loss}(x, y, reduction={reduction!r})\n"
           "    return (out,) + torch.autograd.grad(out, (x, y), g)\n\n\n"
           f"example_inputs = {{'grads': (torch.zeros({len(xs)}), torch.zeros({len(xs)}), "
           f"torch.zeros({'()' if reduction != 'none' else len(xs)}))}}\n")
    path = tmp_path / "model.py"
    path.write_text(src)
    mod = load_module(str(path))
    x, y = np.array(xs, np.float32), np.array(ys, np.float32)
    g = np.array(1.5, np.float32) if reduction != "none" else np.linspace(-1, 2, len(xs)).astype(np.float32)
    tx, ty = torch.from_numpy(x).requires_grad_(), torch.from_numpy(y).requires_grad_()
    want = [t.detach().numpy() for t in mod.grads(tx, ty, torch.from_numpy(g))]
    exe = tmp_path / "net"
    subprocess.run([CTC, "build", str(path), "-o", str(exe), "--entry", "grads"], check=True, capture_output=True)
    got = run_entry(str(tmp_path), str(exe), "grads", [x, y, g], 3)
    for name, a, b in zip(("value", "d/dinput", "d/dtarget"), got, want):
        assert a.shape == b.shape, name
        same = (a == b) | (np.isnan(a) & np.isnan(b))   # infinities equal, nan equals nan
        with np.errstate(invalid="ignore"):
            close = np.isfinite(a) & np.isfinite(b) & (np.abs(a - b) <= 1e-5 + 1e-4 * np.abs(b))
        assert (same | close).all(), f"{loss} {name}: ctc {a}, torch {b}"


# ---- sgn, sign, abs: derivatives at 0 -----------------------------------------

def test_sign_family_gradients_at_zero(tmp_path):
    """sgn and sign are piecewise constant (derivative 0, at 0 too); abs's derivative
    at 0 is PyTorch's sgn(0) = 0. Checked in reverse and forward mode against
    PyTorch (whose sgn VJP the OpInfo sweep cannot use, see test_opinfo.TORCH_VJP_ZERO)."""
    src = ("import torch\nimport torch.autograd.forward_ad as fwAD\n\n\n"
           "def vjp(a, g):\n"
           "    return torch.autograd.grad(torch.sgn(a) * 2 + torch.sign(a) * 3 + a.abs() * 5 + abs(a) * 7, (a,), g)\n\n\n"
           "def jvp(a, t):\n    with fwAD.dual_level():\n        d = fwAD.make_dual(a, t)\n"
           "        return fwAD.unpack_dual(torch.sgn(d) * 2 + torch.sign(d) * 3 + torch.abs(d) * 5).tangent\n\n\n"
           "example_inputs = {'vjp': (torch.zeros(6), torch.zeros(6)), 'jvp': (torch.zeros(6), torch.zeros(6))}\n")
    path = tmp_path / "model.py"
    path.write_text(src)
    mod = load_module(str(path))
    a = np.array([0.0, -0.0, 1.5, -2.0, np.nan, 1e-40], np.float32)
    g = np.array([3.0, 4.0, 5.0, 6.0, 7.0, 8.0], np.float32)
    exe = tmp_path / "net"
    subprocess.run([CTC, "build", str(path), "-o", str(exe), "--entry", "vjp", "--entry", "jvp"], check=True,
                   capture_output=True)
    for entry in ("vjp", "jvp"):
        want = getattr(mod, entry)(torch.from_numpy(a).requires_grad_(entry == "vjp"), torch.from_numpy(g))
        want = (want[0] if entry == "vjp" else want).detach().numpy()
        got = run_entry(str(tmp_path), str(exe), entry, [a, g], 1)[0]
        np.testing.assert_array_equal(got, want)
