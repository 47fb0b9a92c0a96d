"""The compile-time evaluator on hostile but small inputs (issue 14, "no crashes,
never silent wrong"): cyclic values, non-tensor operands, hangs, time and memory
blow-ups, internal errors and 64-bit integer limits. Legal programs must compute what
Python computes (checked by compile-time asserts that run under both Python and
ctc); the rest must stop with a located diagnostic (exit 1), quickly (every run has
a subprocess timeout). The fuzz reproducers of ../shared/fuzz live on here."""
import subprocess
import sys

import numpy as np
import pytest

from ctc_testlib import CTC, compare, load_module, run_forward

TIMEOUT = 20  # seconds for one ctc run; Python does each of these in well under one

# A trivial model so that a file of module-level computations has something to compile.
MODEL = "\nimport torch.nn as nn\n\nclass Net(nn.Module):\n    def forward(self, x):\n        return x\n"
OPTS = ("--input", "x=f32[2]")


def ctc_check(tmp_path, src, *opts):
    p = tmp_path / "m.py"
    p.write_text(src)
    r = subprocess.run([CTC, "check", str(p), *opts], capture_output=True, text=True, timeout=TIMEOUT)
    return r, str(p)


# ---- legal programs: ctc computes what Python computes ------------------------------

AGREE = {
    "no_fixed_argument_limits": """
def f(*a, **k):
    return len(a) + len(k)
assert f(*list(range(300)), **{f'k{i}': i for i in range(70)}) == 370
z = list(zip(*[[i, i + 1] for i in range(20)]))
assert len(z) == 2 and z[1][19] == 20
""",
    "repr_cycles": """
x = []
x.append(x)
assert str(x) == '[[...]]'
assert repr([1, x]) == '[1, [[...]]]'
d = {}
d['a'] = d
assert repr(d) == "{'a': {...}}"
t = ([],)
t[0].append(t)
assert repr(t) == '([(...)],)'
assert x == x and [x] == [x] and x in [x]
y = x
y.append(1)
assert len(x) == 2 and str(x) == '[[...], 1]'
""",
    "repr_values": """
assert str(['a', 1, 2.5, None, True, (1,), (), {}, {'k': [1]}]) == "['a', 1, 2.5, None, True, (1,), (), {}, {'k': [1]}]"
assert repr("it's") == '"it\\'s"' and repr('a\\nb') == "'a\\\\nb'"
assert str(0.1) == '0.1' and str(1e16) == '1e+16' and repr(1e15) == '1000000000000000.0'
assert str(1.5e-07) == '1.5e-07' and str(-0.0) == '-0.0' and str(123.0) == '123.0' and str(1/3) == '0.3333333333333333'
assert str(float('inf')) == 'inf' and str(float('nan')) == 'nan'
assert '{} {}'.format('a', [1, 'b']) == "a [1, 'b']"
""",
    "equality_and_dicts": """
assert {'a': 1, 'b': [2]} == {'b': [2], 'a': 1} and {'a': 1} != {'a': 2}
assert {1: 'x'}[1.0] == 'x' and {(1, 2): 3}[(1, 2)] == 3
nan = float('nan')
assert nan != nan and [nan] == [nan]
assert 2**53 + 1 != float(2**53) and 2**53 == float(2**53)
d = {i: i * i for i in range(100000)}
assert len(d) == 100000 and d[99999] == 99999 * 99999 and 5 in d and -1 not in d
assert sorted(['b', 'a', 'c']) == ['a', 'b', 'c'] and sorted([3, 1.5, 2]) == [1.5, 2, 3]
assert sorted([(2, 'a'), (1, 'b'), (1, 'a')]) == [(1, 'a'), (1, 'b'), (2, 'a')]
""",
    "int_arithmetic": """
import math
assert 1 ** (2**62) == 1 and (-1) ** (2**62 + 1) == -1 and 0 ** (2**62) == 0
assert 3 ** 39 == 4052555153018976267 and 2 ** 62 == 4611686018427387904
assert 7 // -2 == -4 and -7 % 3 == 2 and 7 % -3 == -2 and -9223372036854775807 // -1 == 9223372036854775807
assert 7.5 // 2 == 3.0 and -7.5 % 2 == 0.5 and 2 ** -1 == 0.5
assert 1 << 62 == 4611686018427387904 and -1 << 63 == -9223372036854775807 - 1 and -5 >> 100 == -1
assert abs(-2**62) == 2**62 and -(-9223372036854775807) == 9223372036854775807
assert round(2.5) == 2 and round(3.5) == 4 and round(-0.5) == 0 and round(2.675, 2) == 2.67
assert round(1250, -2) == 1200 and round(1350, -2) == 1400 and round(17, 1) == 17
assert math.floor(-2.5) == -3 and math.ceil(2.1) == 3 and math.floor(2**62 + 1) == 2**62 + 1
assert math.isqrt(10**18) == 10**9 and math.isqrt(9223372036854775807) == 3037000499 and math.isqrt(15) == 3
assert int(-2.9) == -2 and int(' 42 ') == 42 and int(True) == 1
assert sum(range(100000)) == 4999950000 and math.prod([2**31, 2**31]) == 2**62
assert list(enumerate(['a', 'b'], 2**62)) == [(2**62, 'a'), (2**62 + 1, 'b')]
assert list(range(9223372036854775806, 9223372036854775807)) == [9223372036854775806]
assert list(range(10, 0, -3)) == [10, 7, 4, 1] and len(range(0, 2**62, 2**61)) == 2
assert [1, 2, 3][::2**62] == [1] and [1, 2, 3][::-2**62] == [3] and 'abc'[::-1] == 'cba'
assert [1, 2, 3, 4][-2**62:2**62] == [1, 2, 3, 4] and 'abcdef'[1:5:2] == 'bd'
""",
    "strings_linear": """
s = 'a'.join(['b'] * 100000)
assert len(s) == 199999 and s[:5] == 'babab'
t = ''
for i in range(200000):
    t += 'x'
assert len(t) == 200000
a = ''
a += 'x'
b = a
a += 'y'
assert b == 'x' and a == 'xy'
lst = ['p']
u = lst[0]
u += 'q'
assert lst == ['p'] and u == 'pq'
class C:
    s = ''
    s += 'a'
v = C.s
v += 'b'
assert C.s == 'a' and v == 'ab'
assert 'ab' * 3 == 'ababab' and [1, 2] * 2 == [1, 2, 1, 2] and 3 * (1,) == (1, 1, 1) and [0] * -1 == []
assert len('xy' * 1000000) == 2000000
""",
    # f-strings were not interpolated at all (f"l{i}" stayed "l{i}": a ModuleDict
    # built with f-string keys silently kept one layer)
    "fstrings": r"""
x = [1, "a"]
y = 2.5
n = 1234567
d = {'k': 3}
assert f"{x} {y} {y!r} {3}" == "[1, 'a'] 2.5 2.5 3", f"{x}"
assert f"{y:.3f}|{y:8.2f}|{n:,}|{n:_}|{n:>10}|{n:<10}|{n:^11}|{n:010d}|{-n:+d}|{n:x}|{n:#x}|{n:b}|{n:o}" == "2.500|    2.50|1,234,567|1_234_567|   1234567|1234567   |  1234567  |0001234567|-1234567|12d687|0x12d687|100101101011010000111|4553207"
assert f"{'s':>4}|{'s':*^5}|{'abc':.2}|{d['k']}|{x!r}|{'q'!r}|{y=}|{n=:,}|{{}}|{1.0/3:.4}|{2.0:.3}|{1e20:g}|{0.5:%}|{0.25:.1%}|{-0.0}|{True}|{True:>5}|{1e-5:e}|{3:.2f}" == "   s|**s**|ab|3|[1, 'a']|'q'|y=2.5|n=1,234,567|{}|0.3333|2.0|1e+20|50.000000%|25.0%|-0.0|True|    1|1.000000e-05|3.00", f"{y=}"
w = 7
assert f"{y:{w}.{2}f}" == "   2.50"
assert f"a\tb\\{w != 3}" == "a\tb\\True"
assert f'''{w
}''' == "7"
assert "{} {:.2f} {!r} {:>4}|{name:*<4}".format("a", 2.0, "b", 7, name="n") == "a 2.00 'b'    7|n***"
assert "{0}{1}{0}".format(1, 2) == "121"
import torch.nn as nn
md = nn.ModuleDict({f"l{i}": nn.Linear(2, 2) for i in range(3)})
assert len(list(md.parameters())) == 6 and f"{len(md)} layers" == "3 layers"
""",
    "identity_of_builtins": """
import torch
import torch.nn as nn
import torch.nn.functional as F
m = nn.Linear(2, 2)
assert type(m) == nn.Linear and type(m) is nn.Linear and nn.ReLU != nn.Linear
assert F.relu is F.relu and torch.float32 is torch.float32 and None is None
assert {nn.Linear: 1}[nn.Linear] == 1
""",
    "sequential_100000": """
import torch.nn as nn
seq = nn.Sequential(*[nn.ReLU()] * 100000)
assert len(seq) == 100000
assert len(list(seq.children())) == 1 and len(list(seq.modules())) == 2
big = nn.Sequential(*[nn.Linear(2, 2) for _ in range(2000)])
assert len(list(big.parameters())) == 4000
""",
}


@pytest.mark.parametrize("name", sorted(AGREE))
def test_agrees_with_python(tmp_path, name):
    src = AGREE[name] + MODEL
    p = tmp_path / "m.py"
    p.write_text(src)
    # the expectations hold in Python ...
    r = subprocess.run([sys.executable, str(p)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    # ... and in ctc (a failing compile-time assert is exit 1 with its line)
    r, _ = ctc_check(tmp_path, src, *OPTS)
    assert r.returncode == 0, r.stderr


def test_compile_time_values_reach_forward(tmp_path):
    """Values computed by the evaluator (repr of a cycle, checked int arithmetic,
    a big dict) used in forward match PyTorch running the same file."""
    src = """import math
import torch
import torch.nn as nn

x = []
x.append(x)
K = len(str(x)) + len(repr({'a': [1.5, 'b']}))   # 7 + 17
P = 1 ** (2**62) + (-7) // 2 + round(2.5) + math.isqrt(99)  # 1 - 4 + 2 + 9
D = {i: i % 7 for i in range(5000)}
S = sum(D[i] for i in range(0, 5000, 1000))


class Net(nn.Module):
    def forward(self, x):
        return x * K + P - S
"""
    p = tmp_path / "m.py"
    p.write_text(src)
    mod = load_module(str(p))
    inp = np.arange(4, dtype=np.float32)
    want = mod.Net()(torch_tensor(inp)).numpy()
    got = run_forward(str(tmp_path), str(p), mod.Net(), [inp], opts=("--input", "x=f32[4]"))[0]
    compare("forward", got, want, 0, 0)


def test_huge_counts_and_steps_in_forward(tmp_path):
    """chunk/split counts and slice bounds/steps near 2**62 (overflowed int64 before)
    give PyTorch's pieces."""
    src = """import torch
import torch.nn as nn


class Net(nn.Module):
    def forward(self, x):
        a = x.chunk(2**62)
        b = x.split(2**62)
        c = x[::2**62]
        d = x[1:2**62]
        e = x[-2**62:2**62:2**61]
        return a[1] * 10 + a[3] + b[0].sum() + c.sum() * 100 + d.sum() * 1000 + e * 7 + x.chunk(2**40)[2]
"""
    p = tmp_path / "m.py"
    p.write_text(src)
    mod = load_module(str(p))
    inp = np.array([1.5, 2.0, -3.0, 4.25], dtype=np.float32)
    want = mod.Net()(torch_tensor(inp)).numpy()
    got = run_forward(str(tmp_path), str(p), mod.Net(), [inp], opts=("--input", "x=f32[4]"))[0]
    compare("forward", got, want, 0, 0)


def torch_tensor(a):
    import torch
    return torch.from_numpy(a)


# ---- the rest: a located diagnostic, exit 1, quickly ---------------------------------

# (label, source, options, expected "line:col: error: message")
DIAG = [
    # class 2: cycles
    ("eq_cycle", "a = []\na.append(a)\nb = []\nb.append(b)\nc = a == b\n", (),
     "5:5: error: maximum recursion depth exceeded in comparison (RecursionError)"),
    ("lt_cycle", "a = []\na.append(a)\nb = []\nb.append(b)\nc = a < b\n", (),
     "5:5: error: maximum recursion depth exceeded in comparison (RecursionError)"),
    ("repr_deep", "x = []\nfor i in range(5000):\n    x = [x]\ny = str(x)\n", (),
     "4:5: error: maximum recursion depth exceeded while getting the repr of an object (RecursionError)"),
    ("unhashable", "d = {}\nd[[1]] = 2\n", (), "2:3: error: unhashable type: 'list'"),
    ("unhashable_in", "d = {1: 2}\nok = {} in d\n", (), "2:6: error: unhashable type: 'dict'"),
    ("module_cycle", "import torch\nimport torch.nn as nn\n\nclass N(nn.Module):\n    def forward(self, x):\n"
     "        return x\n\nmodel = N()\nmodel.me = model\nexample_inputs = (torch.randn(2),)\n", (),
     "9:1: error: assigning this module to 'me' makes the module contain itself"),
    ("module_cycle_indirect", "import torch.nn as nn\na = nn.Sequential()\nb = nn.Sequential(a)\n"
     "a.add_module('b', b)\n", (), "4:1: error: assigning this module to 'b' makes the module contain itself"),
    ("module_paths_explode", "import torch.nn as nn\nm = nn.Linear(2, 2)\nfor i in range(40):\n"
     "    m = nn.Sequential(m, m)\n", (), "4:9: error: compile-time evaluation did not finish after 20000000 steps"),
    ("module_nesting_deep", "import torch.nn as nn\nm = nn.ReLU()\nfor i in range(3000):\n    m = nn.Sequential(m)\n",
     (), "4:9: error: nn.Module nesting is deeper than 1000 levels"),
    ("module_deep_top_down", "import torch.nn as nn\n\n\nclass Net(nn.Module):\n    def __init__(self):\n"
     "        super().__init__()\n        cur = self\n        for i in range(200000):\n"
     "            nxt = nn.Sequential()\n            cur.add_module('c', nxt)\n            cur = nxt\n\n"
     "    def forward(self, x):\n        return x\n", ("--input", "x=f32[2]"),
     "1:1: error: nn.Module nesting is deeper than 1000 levels"),
    ("module_deep_parameters", "import torch.nn as nn\nroot = nn.Sequential()\ncur = root\nfor i in range(5000):\n"
     "    nxt = nn.Sequential()\n    cur.add_module('c', nxt)\n    cur = nxt\np = list(root.parameters())\n", (),
     "8:10: error: nn.Module nesting is deeper than 1000 levels"),
    # class 3: NULL dereferences
    ("setattr_builtin_class", "import torch.nn as nn\nnn.Linear.x = 1\n", (),
     "2:1: error: cannot set attribute 'x' on the builtin class 'Linear'"),
    ("setattr_builtin_class_fn", "import torch.nn as nn\nsetattr(nn.ReLU, 'y', 2)\n", (),
     "2:1: error: cannot set attribute 'y' on the builtin class 'ReLU'"),
    ("cat_non_tensor", "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n\n"
     "class Net(nn.Module):\n    def forward(self, x):\n        return torch.cat([1, x], 0)\n\nmodel = Net()\n",
     ("--input", "x=f32[2]"), "7:16: error: torch.cat: expected a sequence of tensors, but item 0 is 'int'"),
    ("cat_single_non_tensor", "import torch\nimport torch.nn as nn\n\nclass Net(nn.Module):\n"
     "    def forward(self, x):\n        return x + torch.cat([1], 0)\n", ("--input", "x=f32[2]"),
     "6:20: error: torch.cat: expected a sequence of tensors, but item 0 is 'int'"),
    ("linear_int_weight", "import torch.nn as nn\nimport torch.nn.functional as F\n\nclass Net(nn.Module):\n"
     "    def forward(self, x):\n        return F.linear(x, 3)\n", ("--input", "x=f32[2]"),
     "6:16: error: weight must be a tensor, got 'int'"),
    ("linear_bad_bias", "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n\nclass Net(nn.Module):\n"
     "    def forward(self, x):\n        return F.linear(x, torch.ones(3, 2), 'b')\n", ("--input", "x=f32[2]"),
     "7:16: error: linear bias: expected a tensor, got 'str'"),
    ("conv_bad_bias", "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n\nclass Net(nn.Module):\n"
     "    def forward(self, x):\n        return F.conv2d(x, torch.ones(1, 1, 1, 1), 2.0)\n", ("--input", "x=f32[1,1,2,2]"),
     "7:16: error: convolution bias: expected a tensor, got 'float'"),
    ("matmul_int", "import torch.nn as nn\n\nclass Net(nn.Module):\n    def forward(self, x):\n        return 2 @ x\n",
     ("--input", "x=f32[2]"), "5:16: error: '@' needs two tensors"),
    ("softmax_list", "import torch\nimport torch.nn as nn\n\nclass Net(nn.Module):\n"
     "    def forward(self, x):\n        return x + torch.softmax([1.0], 0)\n", ("--input", "x=f32[2]"),
     "6:20: error: input must be a tensor, got 'list'"),
    # class 5: hangs
    ("pow_huge", "x = 2 ** (2**62)\n", (), "1:5: error: integer too large for ctc"),
    ("repeat_huge", "x = [0] * 10**12\n", (), "1:5: error: compile-time evaluation did not finish after 20000000 steps"),
    ("range_huge", "x = len(range(10**12))\n", (),
     "1:9: error: range() of 1000000000000 items is too long to unroll at compile time"),
    ("str_repeat_huge", "x = 'ab' * 10**9\n", (), "1:5: error: string too long for compile time (more than 256 MiB)"),
    ("empty_str_repeat", "x = '' * 10**18\ny = x + 1\n", (), "2:5: error: unsupported operand types for +: 'str' and 'int'"),
    ("sorted_huge", "x = [0] * 9000000\ny = sorted(x)\nz = sorted(y)\n", (),
     "2:5: error: compile-time evaluation did not finish after 20000000 steps"),
    ("hash_dag", "t = ()\nfor i in range(60):\n    t = (t, t)\nd = {t: 1}\n", (),
     "4:6: error: compile-time evaluation did not finish after 20000000 steps"),
    ("eq_dag", "t = ()\nu = ()\nfor i in range(60):\n    t = (t, t)\n    u = (u, u)\nc = t == u\n", (),
     "6:5: error: compile-time evaluation did not finish after 20000000 steps"),
    ("repr_dag", "t = ()\nfor i in range(60):\n    t = (t, t)\ns = str(t)\n", (),
     "4:5: error: compile-time evaluation did not finish after 20000000 steps"),
    ("eq_big_in_loop", "a = [0] * 5000000\nb = [0] * 5000000\nfor i in range(100):\n    c = a == b\n", (),
     "4:9: error: compile-time evaluation did not finish after 20000000 steps"),
    # class 6: time and memory
    ("loop_memory", "while True:\n    x = [1] * 10\n", (),
     "2:9: error: compile-time evaluation did not finish after 20000000 steps"),
    ("loop_memory_tensors", "import torch\nwhile True:\n    x = torch.ones(1 << 22)\n", (),
     "2:1: error: compile-time values use more than 2048 MiB"),
    # class 7: internal errors
    ("randint_negative", "import torch\nx = torch.randint(0, 5, (-1,))\n", (),
     "2:5: error: Trying to create tensor with negative dimension -1: [-1]"),
    ("full_negative", "import torch\nx = torch.full((2, -3), 1.0)\n", (),
     "2:5: error: Trying to create tensor with negative dimension -3: [2, -3]"),
    ("eye_negative", "import torch\nx = torch.eye(-1)\n", (), "2:5: error: n must be greater or equal to 0, got -1"),
    ("randint_empty_range", "import torch\nx = torch.randint(5, 0, (2,))\n", (),
     "2:5: error: random_ expects 'from' to be less than 'to', but got from=5 >= to=0"),
    ("randint_huge_range", "import torch\nx = torch.randint(-9223372036854775807, 9223372036854775807, (2,))\n", (),
     "2:5: error: integer too large for ctc"),
    # class 8: Python ints in 64 bits
    ("round_huge", "x = round(1e300)\n", (), "1:5: error: integer too large for ctc"),
    ("ceil_inf", "import math\nx = math.ceil(float(\"inf\"))\n", (),
     "2:5: error: cannot convert float infinity to integer (OverflowError)"),
    ("floor_ninf", "import math\nx = math.floor(-math.inf)\n", (),
     "2:5: error: cannot convert float infinity to integer (OverflowError)"),
    ("int_nan", "x = int(float('nan'))\n", (), "1:5: error: cannot convert float NaN to integer (ValueError)"),
    ("int_huge_float", "x = int(1e19)\n", (), "1:5: error: integer too large for ctc"),
    ("int_huge_str", "x = int('99999999999999999999')\n", (), "1:5: error: integer too large for ctc"),
    ("prod_overflow", "import math\nx = math.prod([2**40, 2**40])\n", (), "2:5: error: integer too large for ctc"),
    ("sum_overflow", "x = sum([2**62, 2**62])\n", (), "1:5: error: integer too large for ctc"),
    ("enumerate_overflow", "x = list(enumerate([1, 2], 9223372036854775807))\n", (),
     "1:10: error: integer too large for ctc"),
    ("add_overflow", "x = 9223372036854775807\nx += 1\n", (), "2:1: error: integer too large for ctc"),
    ("neg_overflow", "x = -9223372036854775807 - 1\ny = -x\n", (), "2:5: error: integer too large for ctc"),
    ("abs_overflow", "x = abs(-9223372036854775807 - 1)\n", (), "1:5: error: integer too large for ctc"),
    ("floordiv_overflow", "x = (-9223372036854775807 - 1) // -1\n", (), "1:6: error: integer too large for ctc"),
    ("shift_overflow", "x = 3 << 62\n", (), "1:5: error: integer too large for ctc"),
    ("negative_shift", "x = 1 << -1\n", (), "1:5: error: negative shift count"),
    ("pow_zero_negative", "x = 0 ** -1\n", (), "1:5: error: 0.0 cannot be raised to a negative power (ZeroDivisionError)"),
    ("exp_overflow", "import math\nx = math.exp(1000)\n", (), "2:5: error: math range error (OverflowError)"),
    ("float_pow_overflow", "x = 10.0 ** 400\n", (), "1:5: error: (34, 'Numerical result out of range') (OverflowError)"),
    ("join_non_str", "x = ','.join(['a', 1])\n", (), "1:5: error: sequence item 1: expected str instance, int found"),
]


@pytest.mark.parametrize("label,src,opts,want", DIAG, ids=[c[0] for c in DIAG])
def test_diagnosed(tmp_path, label, src, opts, want):
    r, path = ctc_check(tmp_path, src, *opts)
    assert r.returncode == 1, (r.returncode, r.stderr)
    assert f"{path}:{want}" in r.stderr, r.stderr


# endless or memory-hungry under Python
SKIP_PY = ("loop_memory", "str_repeat_huge", "repeat_huge", "pow_huge", "hash_dag", "eq_dag", "repr_dag")


@pytest.mark.parametrize("label,src,opts,want", [c for c in DIAG if not c[2] and "import torch" not in c[1]
                                                   and c[0] not in SKIP_PY],
                         ids=[c[0] for c in DIAG if not c[2] and "import torch" not in c[1]
                              and c[0] not in SKIP_PY])
def test_python_rejects_too(tmp_path, label, src, opts, want):
    """The diagnosed plain-Python programs fail under Python too, or need ints beyond
    64 bits (which Python has and ctc reports as a limit), or more than ctc's limits."""
    p = tmp_path / "m.py"
    p.write_text(src)
    try:
        r = subprocess.run([sys.executable, str(p)], capture_output=True, text=True, timeout=5)
    except subprocess.TimeoutExpired:
        return  # a computation beyond ctc's documented compile-time limits
    if r.returncode == 0:
        assert "too large for ctc" in want or "did not finish" in want or "too long" in want or \
            "more than" in want, label
