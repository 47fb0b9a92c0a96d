"""Sizes that do not fit, and zero-size tensors (issue 14, fuzz classes 1 and 4).

Every product of dims, strides and byte sizes in ctc is checked (ir_mul /
ir_prod in ir/ir.h); a tensor type is checked where it enters the IR
(ir_type_problem: at most CTC_MAX_ARENA_BYTES = 2**40 bytes, every dim > 0), and
the memory plan stops at the parameter or op that takes the arena past 2**40
bytes. Each case must exit 1 with the exact located diagnostic: never a crash,
an internal error, or a program with a wrapped (tiny) arena."""
import subprocess

import pytest

from ctc_testlib import CTC

HEAD = "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n\n"


def fwd(body, init=""):
    """A model whose forward is `body`: its first statement is on line 7, or
    on line 9 + (lines of `init`) with an __init__ (whose lines start at 8)."""
    src = HEAD + "class Net(nn.Module):\n"
    if init:
        src += "    def __init__(self):\n        super().__init__()\n" + init + "\n"
    src += "    def forward(self, x):\n" + body + "\n\nmodel = Net()\n"
    return src


def ret(expr):
    return fwd("        return " + expr)


def compile_(tmp_path, src, *opts):
    p = tmp_path / "m.py"
    p.write_text(src)
    r = subprocess.run([CTC, "compile", str(p), "-o", str(tmp_path / "m.c"), *opts],
                       capture_output=True, text=True, timeout=30)
    return r, str(p)


TOO_BIG = "is too large ({} bytes; ctc's limit is 2**40 bytes)"

CASES = [
    # --- the fuzz reproducers of class 1 (../shared/fuzz, must-diagnose) ---
    ("01_param_numel_wrap",
     fwd("        return x + self.p[2**40]", "        self.p = nn.Parameter(torch.zeros(2**62, 4))"),
     ("--input", "x=f32[4]"),
     "8:31: error: tensor of shape [4611686018427387904, 4] " + TOO_BIG.format("7.38e+19")),
    ("02_expand_wrap", ret("F.relu(x.expand(2**62, 4)).sum()"), ("--input", "x=f32[4]"),
     "7:23: error: tensor of shape [4611686018427387904, 4] " + TOO_BIG.format("7.38e+19")),
    ("04_view_sigfpe", ret("x.view(-1, 2**62, 4)"), ("--input", "x=f32[4]"),
     "7:16: error: shape '[-1, 4611686018427387904, 4]' is invalid for input of shape [4] (4 elements)"),
    ("24_arange_huge", ret("x + torch.arange(9223372036854775807)"), ("--input", "x=f32[4]"),
     "7:20: error: torch.arange with 9.223e+18 elements is too large for ctc"),
    ("27_conv_fanin_overflow", "import torch.nn as nn\nc = nn.Conv2d(2**62, 4, 3)\n", (),
     "2:5: error: tensor of shape [4, 4611686018427387904, 3, 3] " + TOO_BIG.format("6.64e+20")),
    ("30_linear_bytes_overflow",
     fwd("        return self.fc(x)", "        self.fc = nn.Linear(4, 10**18)"), ("--input", "x=f32[1,4]"),
     "8:19: error: tensor of shape [1000000000000000000, 4] " + TOO_BIG.format("1.6e+19")),
    # --- more members of the class ---
    ("view_neg1_overflow", ret("x.view(2**62, 2**62, -1)"), ("--input", "x=f32[3,4]"),
     "7:16: error: shape '[4611686018427387904, 4611686018427387904, -1]' is invalid for input of shape [3, 4] "
     "(12 elements)"),
    ("reshape_overflow", ret("x.reshape(2**32, 2**32, 2**32)"), ("--input", "x=f32[3,4]"),
     "7:16: error: shape '[4294967296, 4294967296, 4294967296]' is invalid for input of shape [3, 4] (12 elements)"),
    ("linear_fan_in", fwd("        return self.fc(x)", "        self.fc = nn.Linear(2**62, 3)"),
     ("--input", "x=f32[1,4]"),
     "8:19: error: tensor of shape [3, 4611686018427387904] " + TOO_BIG.format("5.53e+19")),
    ("conv_padding_overflow", fwd("        return self.conv(x)", "        self.conv = nn.Conv2d(1, 1, 3, padding=2**62)"),
     ("--input", "x=f32[1,1,8,8]"),
     "10:16: error: conv2d: padding or dilation is too large (4611686018427387904, 1)"),
    ("conv_output_too_large", fwd("        return self.conv(x)", "        self.conv = nn.Conv2d(1, 1, 3, padding=2**19)"),
     ("--input", "x=f32[1,1,8,8]"),
     "10:16: error: tensor of shape [1, 1, 1048582, 1048582] " + TOO_BIG.format("4398096842896")),
    ("pool_padding_overflow", ret("F.max_pool2d(x, 2, padding=2**62)"), ("--input", "x=f32[1,1,4,4]"),
     "7:16: error: pooling: padding should be at most half the kernel size"),
    ("pool_dilation_overflow", ret("F.max_pool2d(x, 3, dilation=2**62)"), ("--input", "x=f32[1,1,4,4]"),
     "7:16: error: pooling: kernel size or dilation is too large (3, 4611686018427387904)"),
    ("pool_huge_kernel", ret("F.max_pool2d(x, 2**62, padding=2**61)"), ("--input", "x=f32[1,1,5,5]"),
     "7:16: error: pooling: kernel 4611686018427387904x4611686018427387904 is too large (more than 2**40 window "
     "reads)"),
    ("matmul_batch_too_large", ret("x.expand(2**20, 1, 4, 4) @ x.expand(1, 2**20, 4, 4)"),
     ("--input", "x=f32[4,4]"),
     "7:16: error: tensor of shape [1048576, 1048576, 4, 4] " + TOO_BIG.format("70368744177664")),
    ("cat_too_large", ret("torch.cat([x.expand(2**36, 4), x.expand(2**36, 4)])"), ("--input", "x=f32[4]"),
     "7:16: error: tensor of shape [137438953472, 4] " + TOO_BIG.format("2199023255552")),
    ("factory_too_large", ret("x + torch.ones(2**31, 2**31, 2**31)"), ("--input", "x=f32[4]"),
     "7:20: error: tensor of shape [2147483648, 2147483648, 2147483648] " + TOO_BIG.format("3.96e+28")),
    ("arange_nan", ret("x + torch.arange(float('nan'))"), ("--input", "x=f32[4]"),
     "7:20: error: torch.arange: unsupported range 0 -> nan"),
    ("arange_float_huge", ret("x + torch.arange(1e300)"), ("--input", "x=f32[4]"),
     "7:20: error: torch.arange with 1e+300 elements is too large for ctc"),
    ("arange_int64_range", ret("x[0] + torch.arange(9e18, 1e19, 1e17)"), ("--input", "x=f32[4]"),
     "7:23: error: torch.arange: values beyond the int64 range are not supported by ctc (start 9e+18, step 1e+17, "
     "10 elements)"),
    ("negative_size", ret("x + x.new_zeros(-1)"), ("--input", "x=f32[4]"),
     "7:20: error: Trying to create tensor with negative dimension -1: [-1]"),
    ("input_too_large", ret("x[0]"), ("--input", "x=f32[1048576,1048576,2]"),
     "6:5: error: input 'x': tensor of shape [1048576, 1048576, 2] " + TOO_BIG.format("8796093022208")),
    # --- the arena limit: at the parameter, or the op, that goes past 2**40 bytes ---
    ("arena_params",
     fwd("        return self.c(self.b(self.a(x)))",
         "        self.a = nn.Linear(2**19, 2**18)\n        self.b = nn.Linear(2**18, 2**19)\n"
         "        self.c = nn.Linear(2**19, 2**18)"),
     ("--input", "x=f32[1,524288]"),
     "9:18: error: the model needs at least 1099512676352 bytes of memory here, more than ctc's limit of "
     "1099511627776 bytes (2**40)"),
    ("arena_activations", fwd("        y = x.expand(2**18, 2**20)\n        z = torch.relu(y)\n        return z.sum()"),
     ("--input", "x=f32[1]"),
     "8:13: error: the model needs at least 2199023255552 bytes of memory here, more than ctc's limit of "
     "1099511627776 bytes (2**40)"),
    # --- class 4: adaptive pooling to size 0 divided by zero ---
    ("adaptive_pool_0", ret("F.adaptive_avg_pool2d(x, 0)"), ("--input", "x=f32[1,1,4,4]"),
     "7:16: error: zero-size tensors are not supported by ctc: adaptive_avg_pool2d to 0x0 gives shape [1, 1, 0, 0]"),
    ("adaptive_pool_1x0", fwd("        return self.pool(x)", "        self.pool = nn.AdaptiveAvgPool2d((1, 0))"),
     ("--input", "x=f32[1,1,4,4]"),
     "10:16: error: zero-size tensors are not supported by ctc: adaptive_avg_pool2d to 1x0 gives shape [1, 1, 1, 0]"),
    # --- zero-size tensors: PyTorch allows them, ctc says so at the line ---
    ("eye_0", ret("x + torch.eye(0).sum()"), ("--input", "x=f32[4]"),
     "7:20: error: zero-size tensors are not supported by ctc: shape [0, 0]"),
    ("new_ones_2x0", ret("x.new_ones((2, 0))"), ("--input", "x=f32[4]"),
     "7:16: error: zero-size tensors are not supported by ctc: shape [2, 0]"),
    ("expand_0", ret("x.expand(0, 4)"), ("--input", "x=f32[4]"),
     "7:16: error: zero-size tensors are not supported by ctc: shape [0, 4]"),
    ("zeros_0x3", ret("x + torch.zeros(0, 3)"), ("--input", "x=f32[3]"),
     "7:20: error: zero-size tensors are not supported by ctc: shape [0, 3]"),
    ("slice_2_2", ret("x[:, 2:2]"), ("--input", "x=f32[3,4]"),
     "7:16: error: zero-size tensors are not supported by ctc: this slice of a tensor of shape [3, 4] is empty "
     "(shape [3, 0])"),
    ("slice_past_end", ret("x[5:]"), ("--input", "x=f32[3,4]"),
     "7:16: error: zero-size tensors are not supported by ctc: this slice of a tensor of shape [3, 4] is empty "
     "(shape [0, 4])"),
    ("slice_huge_start", ret("x[2**62:]"), ("--input", "x=f32[3,4]"),
     "7:16: error: zero-size tensors are not supported by ctc: this slice of a tensor of shape [3, 4] is empty "
     "(shape [0, 4])"),
    ("slice_negative_empty", ret("x[-10:-8]"), ("--input", "x=f32[3,4]"),
     "7:16: error: zero-size tensors are not supported by ctc: this slice of a tensor of shape [3, 4] is empty "
     "(shape [0, 4])"),
    ("cat_with_empty", ret("torch.cat([x, x[3:]])"), ("--input", "x=f32[3,4]"),
     "7:30: error: zero-size tensors are not supported by ctc: this slice of a tensor of shape [3, 4] is empty "
     "(shape [0, 4])"),
    ("view_0", ret("x.view(-1, 0)"), ("--input", "x=f32[3,4]"),
     "7:16: error: shape '[-1, 0]' is invalid for input of shape [3, 4] (12 elements)"),
    ("arange_empty", ret("x + torch.arange(5, 2)"), ("--input", "x=f32[4]"),
     "7:20: error: zero-size tensors are not supported by ctc: this arange is empty (shape [0])"),
    ("matmul_with_empty", ret("x @ x.new_ones((4, 0))"), ("--input", "x=f32[3,4]"),
     "7:20: error: zero-size tensors are not supported by ctc: shape [4, 0]"),
]


@pytest.mark.parametrize("label,src,opts,want", CASES, ids=[c[0] for c in CASES])
def test_size_diagnostic(tmp_path, label, src, opts, want):
    r, path = compile_(tmp_path, src, *opts)
    assert r.returncode == 1, (r.returncode, r.stderr)
    first = r.stderr.splitlines()[0]
    assert first == f"{path}:{want}", r.stderr
    assert "internal error" not in r.stderr


def test_strided_slice_huge_step_is_one_element(tmp_path):
    """x[::2**62] keeps the first row: the element count of a slice is computed
    without overflow for any step."""
    r, _ = compile_(tmp_path, ret("x[::2**62]"), "--input", "x=f32[3,4]", "--emit", "ir")
    assert r.returncode == 0, r.stderr
    ir = (tmp_path / "m.c").read_text()
    assert "slice[0,1,0,1] %x.0 : f32[1,4]" in ir, ir   # step 1: no stride*step overflow in codegen
    r, _ = compile_(tmp_path, ret("x[::2**62]"), "--input", "x=f32[3,4]")
    assert r.returncode == 0, r.stderr


def test_arena_limit_is_not_off_by_one(tmp_path):
    """A tensor of exactly 2**40 bytes is accepted (it fills the arena
    exactly); one row more is not."""
    r, _ = compile_(tmp_path, ret("x.expand(2**18, 2**20)"), "--input", "x=f32[1]")
    assert r.returncode == 0, r.stderr
    r, path = compile_(tmp_path, ret("x.expand(2**18 + 1, 2**20)"), "--input", "x=f32[1]")
    assert r.returncode == 1, r.stderr
    assert r.stderr.splitlines()[0] == (f"{path}:7:16: error: tensor of shape [262145, 1048576] "
                                        + TOO_BIG.format("1099515822080")), r.stderr


def test_pool_ceil_mode_huge_stride(tmp_path):
    """ceil_mode output sizes are computed without overflow: a stride of
    2**63-1 gives one window (PyTorch itself rejects it: integer out of range)."""
    r, _ = compile_(tmp_path, ret("F.max_pool2d(x, 2, stride=9223372036854775807, ceil_mode=True)"),
                    "--input", "x=f32[1,1,5,5]", "--emit", "ir")
    assert r.returncode == 0, r.stderr
    assert ": f32[1,1,1,1]" in (tmp_path / "m.c").read_text()


def test_check_reports_the_arena_limit(tmp_path):
    """`ctc check` plans memory too, so it rejects what `compile` would."""
    p = tmp_path / "m.py"
    p.write_text(fwd("        y = x.expand(2**18, 2**20)\n        z = torch.relu(y)\n        return z.sum()"))
    r = subprocess.run([CTC, "check", str(p), "--input", "x=f32[1]"], capture_output=True, text=True, timeout=30)
    assert r.returncode == 1, r.stderr
    assert r.stderr.splitlines()[0] == (f"{p}:8:13: error: the model needs at least 2199023255552 bytes of memory "
                                        "here, more than ctc's limit of 1099511627776 bytes (2**40)"), r.stderr
