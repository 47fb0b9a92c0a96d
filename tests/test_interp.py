"""The reference evaluator (ir/elem.c, ir/interp.c) against PyTorch and against
the generated code.

One statement per op: compile-time folding of module-level tensor code runs the
same ops.def templates that the C emitter prints. Each expression below is
computed three ways on the same special values (NaN, +-inf, +-0, ordinary
numbers, every pair for binary ops): by PyTorch, by ctc at compile time (a
module-level constant, folded by the evaluator), and by the generated code at
run time (the same expression on forward's inputs). Folded and run-time values
must equal PyTorch's special values exactly and its finite values within
rtol 1e-4 (float32; integer results exactly), and the folded value must equal
the run-time one (NaN where it has NaN)."""
import pathlib

import re

import numpy as np
import pytest
import torch

from ctc_testlib import CTC, load_module, run, run_entry
from test_nan import same

V = [float("nan"), float("inf"), -float("inf"), -0.0, 0.0, 1.5, -2.0, 0.5, 3.0, -0.75]
N = len(V)
XF = [a for a in V for _ in V]   # every pair: x[i * N + j] = V[i], y[...] = V[j]
YF = [b for _ in V for b in V]
IV = [-7, -3, -1, 0, 1, 2, 5, 13, 40, -46341]
XI = [a for a in IV for _ in IV]
YI = [b for _ in IV for b in IV]

# (label, expression over x, y (float32 pairs) and i, j (int64 pairs))
EXPRS = [
    ("relu", "torch.relu(x)"), ("relu_F", "F.relu(x)"), ("neg", "-x"), ("abs", "x.abs()"),
    ("exp", "torch.exp(x)"), ("log", "torch.log(x)"), ("sqrt", "torch.sqrt(x)"), ("rsqrt", "torch.rsqrt(x)"),
    ("tanh", "torch.tanh(x)"), ("sigmoid", "torch.sigmoid(x)"), ("erf", "torch.erf(x)"), ("erfc", "torch.erfc(x)"),
    ("sin", "torch.sin(x)"), ("cos", "torch.cos(x)"), ("floor", "torch.floor(x)"), ("sign", "torch.sign(x)"),
    ("round", "torch.round(x * 1.25)"), ("round_bf16", "(x * 1.01).bfloat16().float()"), ("round_f16", "(x * 1.01).half().float()"), ("trunc", "torch.trunc(x)"), ("log1p", "torch.log1p(x)"),
    ("expm1", "torch.expm1(x)"), ("atan", "torch.atan(x)"), ("sinh", "torch.sinh(x)"),
    ("add", "x + y"), ("sub", "x - y"), ("mul", "x * y"), ("div", "x / y"), ("pow", "torch.pow(x, y)"),
    ("maximum", "torch.maximum(x, y)"), ("minimum", "torch.minimum(x, y)"), ("atan2", "torch.atan2(x, y)"),
    ("remainder", "torch.remainder(x, y)"), ("fmod", "torch.fmod(x, y)"), ("floordiv", "torch.floor_divide(x, y)"),
    ("copysign", "torch.copysign(x, y)"),
    ("eq", "x == y"), ("ne", "x != y"), ("lt", "x < y"), ("le", "x <= y"), ("gt", "x > y"), ("ge", "x >= y"),
    ("where", "torch.where(x > y, x, y)"), ("to_long", "x.long()"), ("to_int", "x.int()"), ("to_bool", "x.to(torch.bool)"),
    ("sum", "x.reshape(10, 10).sum(dim=1)"), ("amax", "x.reshape(10, 10).amax(dim=0)"),
    ("mean", "y.reshape(10, 10).mean(dim=1)"), ("matmul", "x[20:30].reshape(2, 5) @ y[50:60].reshape(5, 2)"),
    ("i_add", "i + j"), ("i_sub", "i - j"), ("i_mul", "i * j"), ("i_neg", "-i"), ("i_abs", "i.abs()"),
    ("i_rem", "torch.remainder(i, torch.where(j == 0, 3, j))"), ("i_floordiv", "torch.div(i, torch.where(j == 0, 3, j), rounding_mode='floor')"),
    ("i_fmod", "torch.fmod(i, torch.where(j == 0, 3, j))"), ("i_trunc_div", "torch.div(i, torch.where(j == 0, 3, j), rounding_mode='trunc')"),
    ("i_and", "i & j"), ("i_or", "i | j"), ("i_xor", "i ^ j"), ("i_shl", "i << (j.abs() % 8)"), ("i_shr", "i >> (j.abs() % 8)"),
    ("i_not", "~i"), ("i_max", "torch.maximum(i, j)"), ("i_lt", "i < j"), ("i_float", "i.float() / 4"), ("i_narrow", "(i * 100000).int()"), ("i_to_bool", "i.to(torch.bool)"),
    ("i_pow", "torch.pow(i, j.abs() % 4)"), ("i_pow32", "torch.pow(i.int(), (j.abs() % 40).int())"),
]


def source():
    s = ("import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n\n"
         "nan = float('nan')\ninf = float('inf')\n"
         f"X = torch.tensor({XF!r})\nY = torch.tensor({YF!r})\n"
         f"I = torch.tensor({XI!r})\nJ = torch.tensor({YI!r})\n\n\n"
         "def folded(x, y, i, j):\n    return (\n")
    for _, e in EXPRS:
        s += f"        {e},\n"
    s += "    )\n\n\n"
    s += "FOLDED = folded(X, Y, I, J)\n\n\n"
    s += ("class Net(nn.Module):\n    def forward(self, x, y, i, j):\n"
          "        return folded(x, y, i, j) + FOLDED\n")
    return s


@pytest.fixture(scope="module")
def program(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("interp")
    path = tmp / "interp_model.py"
    path.write_text(source())
    exe = tmp / "net"
    run([CTC, "build", path, "-o", exe, "--model", "Net",
         "--input", f"x=f32[{N * N}]", "--input", f"y=f32[{N * N}]",
         "--input", f"i=i64[{len(XI)}]", "--input", f"j=i64[{len(YI)}]"])
    return tmp, exe, load_module(str(path), "interp_model")


def test_folded_and_compiled_equal_pytorch(program):
    tmp, exe, mod = program
    ins = [np.array(XF, np.float32), np.array(YF, np.float32), np.array(XI, np.int64), np.array(YI, np.int64)]
    got = run_entry(tmp, exe, "forward", ins, 2 * len(EXPRS))
    want = mod.folded(*[torch.from_numpy(a) for a in ins])
    errors = []
    for k, (label, _) in enumerate(EXPRS):
        run_time, folded, w = got[k], got[len(EXPRS) + k], want[k].numpy()
        for name, g in (("run time", run_time), ("folded", folded)):
            try:
                same(f"{label} ({name})", g.astype(w.dtype) if w.dtype == bool else g, w)
            except AssertionError as e:
                errors.append(str(e))
        if w.dtype.kind == "f":
            f, r = folded.astype(np.float64), run_time.astype(np.float64)
            if (np.isnan(f) != np.isnan(r)).any():
                errors.append(f"{label}: folded and run-time NaNs differ")
    assert not errors, "\n".join(errors)


def test_folded_relu_keeps_nan(tmp_path):
    """Issue 27's reproducer: a module-level relu of a NaN stays NaN."""
    path = tmp_path / "m.py"
    path.write_text("import torch\nimport torch.nn as nn\n\n"
                    "C = torch.relu(torch.tensor([float('nan'), -1., 2.]))\n\n\n"
                    "class Net(nn.Module):\n    def forward(self, x):\n        return x + C\n")
    exe = tmp_path / "net"
    run([CTC, "build", path, "-o", exe, "--input", "x=f32[3]"])
    out = run_entry(tmp_path, exe, "forward", [np.zeros(3, np.float32)], 1)[0]
    assert np.isnan(out[0]) and out[1] == 0 and out[2] == 2, out


def test_remainder_floordiv_stated_once(tmp_path):
    """Python's % and // are stated once, as C expressions in ir/elem.c's helper table: the
    generated file's ctc_remainder_<dt>/ctc_floordiv_<dt> are those expressions (and what
    they call), and the evaluator computes the same text; kernels.c holds no second copy."""
    root = pathlib.Path(CTC).resolve().parent.parent
    kernels = (root / "codegen_c" / "kernels.c").read_text()
    assert "fmod" not in kernels and "ctc_remainder_$S" not in kernels and "ctc_floordiv_$S" not in kernels
    assert "h_remainder" not in (root / "ir" / "elem.c").read_text()
    p = tmp_path / "m.py"
    p.write_text("import torch\n\n\ndef f(x, y, i, j):\n    return x % y, x // y, i % j, i // j\n\n\n"
                 "example_inputs = {'f': (torch.randn(4), torch.randn(4), torch.arange(4), torch.arange(4) + 1)}\n")
    run([CTC, "compile", p, "-o", tmp_path / "m.c", "--entry", "f"])
    c = (tmp_path / "m.c").read_text()
    assert "static float ctc_remainder_f32(float a, float b) { return ctc_remfix_f32(fmodf(a, b), b); }" in c
    assert ("static int64_t ctc_floordiv_i64(int64_t a, int64_t b) { return (b == 0 ? 0 : b == -1 ? "
            "(int64_t)(0u - (uint64_t)a) : ctc_floordivm_i64(a, b, a % b)); }") in c


def test_integer_pow_wraps_at_run_time_and_is_never_rounded_at_compile_time(tmp_path):
    """Integer pow is one helper (ir/elem.c's ctc_ipow, by squaring, wrapping modulo 2**64 as
    PyTorch's): the compiled code matches PyTorch on exponents up to 69. A compile-time value
    is held as a double, so an i64 result beyond 2**53 that a double cannot hold exactly
    (here 3**39) is refused at its line, not rounded (it was folded to the nearest double, 11 off)."""
    path = tmp_path / "p.py"
    path.write_text("import torch\nimport torch.nn as nn\n\n\n"
                    "class Net(nn.Module):\n    def forward(self, i, j):\n        return torch.pow(i, j)\n")
    exe = tmp_path / "net"
    run([CTC, "build", path, "-o", exe, "--input", "i=i64[64]", "--input", "j=i64[64]"])
    rng = np.random.default_rng(4)
    i = rng.integers(-50, 50, 64).astype(np.int64)
    j = rng.integers(0, 70, 64).astype(np.int64)
    got = run_entry(tmp_path, exe, "forward", [i, j], 1)[0]
    np.testing.assert_array_equal(got, torch.pow(torch.from_numpy(i), torch.from_numpy(j)).numpy())
    path.write_text("import torch\nimport torch.nn as nn\n\nBIG = torch.pow(torch.tensor([3, 2]), torch.tensor([39, 40]))\n\n\n"
                    "class Net(nn.Module):\n    def forward(self, i):\n        return i + BIG\n")
    r = run([CTC, "build", path, "-o", exe, "--input", "i=i64[2]"], check=False)
    assert r.returncode == 1 and "p.py:4:7: error: ctc cannot compute 'pow' on i64 values at compile time" in r.stderr, \
        r.stderr


@pytest.mark.parametrize("expr", ["torch.tensor([2**60 + 1, 5])", "torch.tensor(-(2**53) - 1)",
                                  "torch.tensor([[1, 2], [3, 9007199254740993]])"])
def test_int64_tensor_literals_beyond_2_53_are_refused_not_rounded(tmp_path, expr):
    """A compile-time tensor holds its values as doubles: torch.tensor([2**60 + 1]) was stored
    as 2**60 and the program computed with it silently. It is refused at its line, as integer
    scalars of operations already are; floats of the same size keep PyTorch's rounding."""
    path = tmp_path / "b.py"
    path.write_text(f"import torch\nimport torch.nn as nn\n\nBIG = {expr}\nF = torch.tensor([2.0**60 + 1])\n\n\n"
                    "class Net(nn.Module):\n    def forward(self, i):\n        return i + BIG.sum() + F\n")
    r = run([CTC, "compile", path, "-o", tmp_path / "b.c", "--input", "i=i64[1]"], check=False)
    assert r.returncode == 1 and re.search(r"b\.py:4:7: error: torch\.tensor\(\): the integer -?\d+ is too large for "
                                           r"ctc \(int64 constants are exact only up to 2\*\*53\)", r.stderr), r.stderr
