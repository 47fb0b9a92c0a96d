"""Forward tests of issue 15's ops (ops.def's last block and the composites
lowered to primitives) in the style of test_ops.py: each group is a model file
whose forward returns one output per spelling, run by PyTorch and by ctc and
compared (float32 rtol 1e-4 / atol 1e-5; integer and bool outputs exactly,
same dtype). Their VJPs and JVPs are test_grad.CASES entries (float64 against
torch.autograd and forward AD, plus finite differences), which
test_forward_ad.py and test_op_table.py reuse. test_edge_values runs 0, -0,
halves, NaN and infinities through the rounding, division and arg-reduction
ops."""
import re

import numpy as np
import pytest
import torch

from ctc_testlib import load_module, run_forward
from test_ops import model_source

# group -> (__init__ lines, [(label, expression)], [forward parameters as NAME=dtype[dims]])
GROUPS = {
    "unary_more": ("", [
        ("log1p", "torch.log1p(x.abs())"), ("x.log1p", "(x.abs() + 0.5).log1p()"), ("expm1", "torch.expm1(x)"),
        ("x.expm1", "x.expm1()"), ("log2", "torch.log2(x.abs() + 0.1)"), ("log10", "x.abs().log10()"),
        ("exp2", "torch.exp2(x)"), ("x.exp2", "x.exp2()"), ("sign", "torch.sign(x)"), ("x.sign", "x.sign()"),
        ("sgn", "torch.sgn(x)"), ("reciprocal", "torch.reciprocal(x)"), ("x.reciprocal", "x.reciprocal()"),
        ("atan", "torch.atan(x)"), ("arctan", "torch.arctan(x)"), ("asin", "torch.asin(x * 0.3)"),
        ("acos", "(x * 0.3).acos()"), ("arcsin", "torch.arcsin(x * 0.3)"), ("arccos", "torch.arccos(x * 0.3)"),
        ("sinh", "torch.sinh(x)"), ("cosh", "x.cosh()"), ("round", "torch.round(x * 2)"),
        ("round_dec", "torch.round(x, decimals=2)"), ("round_neg_dec", "(x * 100).round(decimals=-1)"),
        ("trunc", "torch.trunc(x * 3)"), ("fix", "torch.fix(x * 3)"), ("frac", "torch.frac(x * 3)"),
        ("floor", "torch.floor(x * 3)"), ("ceil", "x.mul(3).ceil()"),
        ("clamp_min", "torch.clamp_min(x, -0.5)"), ("clamp_max", "x.clamp_max(0.5)"),
        ("int_reciprocal", "torch.reciprocal(i + 1)"), ("int_sign", "torch.sign(i - 2)"),
        ("int_round", "torch.round(i)"), ("int_exp2", "torch.exp2(i)"),
        ("tan", "torch.tan(x)"), ("asinh", "x.asinh()"), ("arcsinh", "torch.arcsinh(x)"),
        ("acosh", "torch.acosh(x.abs() + 1)"), ("atanh", "torch.atanh(x * 0.3)"), ("erfc", "torch.erfc(x)"),
        ("deg2rad", "torch.deg2rad(x)"), ("rad2deg", "x.rad2deg()"), ("positive", "torch.positive(x)"),
        ("isnan", "torch.isnan(x.log())"), ("isinf", "(x / 0).isinf()"), ("isposinf", "torch.isposinf(x / 0)"),
        ("isneginf", "torch.isneginf(x / 0)"), ("isfinite", "torch.isfinite(x.log())"),
        ("nan_to_num", "torch.nan_to_num(x.log() / x.abs().floor())"),
        ("nan_to_num_args", "(x / 0).nan_to_num(nan=1.0, posinf=2.0, neginf=-2.0)"),
    ], ["x=f32[4,9]", "i=i64[4,9]"]),
    "binary_more": ("", [
        ("atan2", "torch.atan2(x, y)"), ("copysign", "torch.copysign(x, y)"), ("copysign_s", "x.copysign(-1.0)"), ("arctan2", "torch.arctan2(x, y)"), ("x.atan2", "x.atan2(y)"),
        ("remainder", "torch.remainder(x, y)"), ("mod", "x % y"), ("mod_scalar", "x % 0.75"),
        ("rmod", "2.5 % (y.abs() + 0.5)"), ("x.remainder", "x.remainder(-1.5)"), ("fmod", "torch.fmod(x, y)"),
        ("x.fmod", "x.fmod(0.7)"), ("floor_divide", "torch.floor_divide(x, y)"), ("floordiv", "x // y"),
        ("floordiv_scalar", "x // 0.3"), ("div_floor", "torch.div(x, y, rounding_mode='floor')"),
        ("div_trunc", "x.div(y, rounding_mode='trunc')"), ("div_none", "torch.div(x, y, rounding_mode=None)"),
        ("lerp", "torch.lerp(x, y, 0.3)"), ("lerp_big", "x.lerp(y, 0.75)"), ("lerp_tensor", "torch.lerp(x, y, w)"),
        ("addcmul", "torch.addcmul(x, y, w)"), ("addcmul_value", "x.addcmul(y, w, value=-0.5)"),
        ("addcdiv", "torch.addcdiv(x, y, w.abs() + 1, value=2)"), ("where_scalars", "torch.where(x > y, 1.0, 0.0)"),
        ("where_scalar_other", "torch.where(x > 0, x, 0.5)"), ("where_scalar_self", "torch.where(x > 0, -1.0, y)"),
        ("true_divide", "torch.true_divide(x, y)"), ("rsub", "torch.rsub(x, y, alpha=2)"),
        ("xlogy", "torch.xlogy(x.abs().floor(), y.abs())"), ("hypot", "torch.hypot(x, y)"),
        ("logaddexp", "torch.logaddexp(x, y)"), ("logaddexp2", "x.logaddexp2(y)"),
        ("heaviside", "torch.heaviside(x.round(), y)"), ("fmax", "torch.fmax(x, y.log())"),
        ("fmin", "x.fmin(y.log())"), ("float_power", "torch.float_power(x.abs(), 1.5)"),
        ("float_power_t", "x.abs().float_power(w)"),
    ], ["x=f32[5,6]", "y=f32[5,6]", "w=f32[6]"]),
    "int_bool": ("", [
        ("and", "i & j"), ("or", "i | j"), ("xor", "i ^ j"), ("not", "~i"), ("and_scalar", "i & 3"),
        ("bitwise_and", "torch.bitwise_and(i, j)"), ("bitwise_or", "i.bitwise_or(j)"),
        ("bitwise_xor", "torch.bitwise_xor(i, j)"), ("bitwise_not", "torch.bitwise_not(i)"),
        ("lshift", "(i - 2) << j"), ("rshift", "(i - 2) >> j"), ("lshift_scalar", "i << 62"),
        ("bitwise_left_shift", "torch.bitwise_left_shift(i, 3)"), ("bitwise_right_shift", "i.bitwise_right_shift(j)"),
        ("bool_shift", "(x > 0) << 1"),
        ("bool_and", "(x > 0) & (y > 0)"), ("bool_or", "(x > 0) | (y > 0)"), ("bool_xor", "(x > 0) ^ (y > 0)"),
        ("bool_not", "~(x > 0)"), ("logical_not", "torch.logical_not(x)"), ("logical_and", "torch.logical_and(x > 0, i)"),
        ("logical_or", "x.logical_or(y > 0)"), ("logical_xor", "torch.logical_xor(i, j)"),
        ("int_mod", "(i - 2) % (j + 1)"), ("int_floordiv", "(i - 2) // (j + 1)"),
        ("int_remainder_neg", "torch.remainder(i - 2, -(j + 1))"), ("int_fmod", "torch.fmod(i - 2, j + 1)"),
        ("int_div_trunc", "torch.div(i - 3, j + 1, rounding_mode='trunc')"),
        ("int_div_floor", "torch.div(i - 3, 2, rounding_mode='floor')"), ("int_true_div", "(i - 2) / (j + 1)"),
    ], ["x=f32[4,5]", "y=f32[4,5]", "i=i64[4,5]", "j=i64[4,5]"]),
    "reduce_more": ("", [
        ("cumsum", "torch.cumsum(x, dim=1)"), ("x.cumsum", "x.cumsum(0)"), ("cumsum_neg", "x.cumsum(dim=-1)"),
        ("cumsum_int", "torch.cumsum(i, 2)"), ("cumsum_dtype", "x.cumsum(1, dtype=torch.float64)"),
        ("logsumexp", "torch.logsumexp(x, dim=1)"), ("logsumexp_keep", "x.logsumexp((0, 2), keepdim=True)"),
        ("var", "torch.var(x, dim=1)"), ("var_all", "x.var()"), ("var_biased", "x.var(2, unbiased=False)"),
        ("var_correction", "torch.var(x, dim=(0, 1), correction=0, keepdim=True)"), ("std", "torch.std(x, 1)"),
        ("std_all", "x.std()"), ("std_keep", "x.std(dim=2, keepdim=True, unbiased=False)"),
        ("norm", "torch.norm(x)"), ("norm_dim", "x.norm(dim=1)"), ("norm_p1", "torch.norm(x, p=1, dim=2)"),
        ("norm_inf", "x.norm(float('inf'), dim=(1, 2))"), ("norm_ninf", "torch.norm(x, p=-math.inf, dim=0)"),
        ("norm_fro", "torch.norm(x, p='fro', dim=(1, 2), keepdim=True)"), ("norm_p3", "x.norm(3, dim=1)"),
        ("norm_p0", "torch.norm(x, 0)"),
        ("max_dim", "torch.max(x, 1)[0]"), ("max_dim_idx", "torch.max(x, 1)[1]"), ("max_keep", "x.max(dim=2, keepdim=True)[0]"),
        ("min_dim", "torch.min(x, dim=0)[0]"), ("min_dim_idx", "x.min(0)[1]"), ("max_values", "x.max(-1).values * 2"), ("min_indices", "torch.min(x, dim=2).indices"),
        ("max_all", "torch.max(x)"), ("min_all", "x.min()"), ("max_binary", "torch.max(x, x * 0.5)"),
        ("argmax", "torch.argmax(x, dim=1)"), ("argmax_all", "x.argmax()"), ("argmax_keep", "x.argmax(2, keepdim=True)"),
        ("argmin", "torch.argmin(x, 0)"), ("argmin_all", "torch.argmin(x)"), ("argmax_int", "i.argmax(1)"),
        ("argmax_ties", "torch.argmax(i, dim=2)"), ("max_int_dim", "i.max(1)[0]"),
        ("count_nonzero", "torch.count_nonzero(i, dim=1)"), ("all", "torch.all(i, 1)"), ("any", "(x > 1).any()"),
        ("all_keep", "x.all(dim=2, keepdim=True)"), ("std_mean", "torch.std_mean(x, 1)[0]"),
        ("std_mean_m", "torch.std_mean(x, 1)[1]"), ("var_mean", "torch.var_mean(x, dim=(0, 2), unbiased=False)[0]"),
        ("aminmax", "torch.aminmax(x, dim=1)[0]"), ("aminmax_max", "x.aminmax().max"),
        ("nansum", "torch.nansum(x.log())"), ("nanmean", "x.log().nanmean(dim=1)"),
        ("amin", "torch.amin(x, dim=1)"), ("amin_keep", "x.amin((0, 2), keepdim=True)"), ("amin_int", "i.amin(2)"),
    ], ["x=f32[3,4,5]", "i=i64[3,4,5]"]),
    # sums over runs of the reduced axes (kernels.c's ctc_sum_runs: the lanes go on across runs of 30,
    # 7, 2 and 64 elements, tails of 6 and 7 and none)
    "reduce_runs": ("", [
        ("sum_02", "x.sum((0, 2))"), ("mean_02_keep", "x.mean(dim=(0, 2), keepdim=True)"),
        ("sum_024", "y.sum((0, 2, 4))"), ("sum_013", "y.sum((0, 1, 3))"), ("sum_short", "w.sum((0, 2))"),
        ("bn_mean", "z.mean((0, 2, 3))"), ("bn_var", "z.var((0, 2, 3), unbiased=False)"),
        ("bn_var_keep", "torch.var(z, dim=(0, 2, 3), keepdim=True)"),
    ], ["x=f32[3,4,30]", "y=f32[2,3,4,5,7]", "w=f32[5,3,2]", "z=f32[4,3,8,8]"]),
    # reductions over leading axes, the last kept (emit_reduce's chunks of 64 columns in registers;
    # where 64 does not divide the row the last chunk ends at its end, over part of the one before:
    # 100, 65 and 130 columns)
    "reduce_columns": ("", [
        ("sum_0_100", "x.sum(0)"), ("amax_0_100", "x.amax(0)"), ("mean_01_65", "y.mean((0, 1))"),
        ("amin_1_65", "y.amin(1)"), ("sum_0_64", "w.sum(0)"), ("sum_0_33", "v.sum(0)"), ("sum_0_32", "x[:, :32].sum(0)"),
        ("sum_0_i64", "k.sum(0)"), ("sum_0_f64", "x.double().sum(0)"), ("sum_0_130", "u.sum(0)"),
        ("mean_0_130", "u.mean(0, keepdim=True)"),
    ], ["x=f32[40,100]", "y=f32[3,20,65]", "w=f32[50,64]", "v=f32[7,33]", "k=i64[9,70]", "u=f32[9,130]"]),
    "index": ("", [
        ("gather", "torch.gather(x, 1, k)"), ("x.gather", "x.gather(0, k[:3])"), ("gather_dim", "torch.gather(x, dim=1, index=k[:, :2])"),
        ("scatter_add", "torch.scatter_add(x, 1, k, y)"), ("x.scatter_add", "x.scatter_add(0, k[:3], y)"),
        ("scatter_add_", "x.clone().scatter_add_(1, k, y)"),
        ("index_select", "torch.index_select(x, 1, s)"), ("x.index_select", "x.index_select(0, s[:2])"),
        ("take_along_dim", "torch.take_along_dim(x, k, dim=1)"), ("take_along_dim_flat", "torch.take_along_dim(x, s)"),
        ("take_along_dim_bcast", "x.take_along_dim(k[:1], 0)"),
        ("take_argmax", "torch.take_along_dim(x, x.argmax(1, keepdim=True), dim=1)"),
        ("one_hot", "F.one_hot(s, 4)"), ("one_hot_2d", "F.one_hot(k, num_classes=5)"),
        ("take", "torch.take(x, k - 2)"), ("index_add", "x.index_add(1, s, y[:, :3])"),
        ("index_add_alpha", "torch.index_add(x, 0, s, y[:3], alpha=2)"),
        ("flip", "torch.flip(x, (0, 1))"), ("x.flip", "x.flip(1)"), ("fliplr", "torch.fliplr(x)"),
        ("flipud", "x.flipud()"), ("roll", "torch.roll(x, 2, 1)"), ("roll_flat", "x.roll(-3)"),
        ("roll_dims", "torch.roll(x, shifts=(1, -2), dims=(0, 1))"),
        ("repeat_interleave", "x.repeat_interleave(2, dim=0)"), ("repeat_interleave_flat", "torch.repeat_interleave(x, 3)"),
    ], ["x=f32[4,5]", "y=f32[4,5]", "k=i64[4,5]", "s=i64[3]"]),
    "shape_more": ("", [
        ("tril", "torch.tril(x)"), ("triu", "x.triu()"), ("tril_k", "x.tril(1)"), ("triu_k", "torch.triu(x, diagonal=-1)"),
        ("tril_batched", "torch.tril(z, -1)"), ("repeat", "x.repeat(2, 3)"), ("repeat_more", "x.repeat(2, 1, 1)"),
        ("repeat_tuple", "z.repeat((1, 2, 1))"), ("expand_as", "w.expand_as(x)"), ("view_as", "z.view_as(z).sum(0)"),
        ("reshape_as", "x.reshape_as(w.expand(4, 4))"), ("mT", "z.mT"), ("mT_matmul", "z @ z.mT"),
        ("diff", "torch.diff(x)"), ("diff_n", "x.diff(n=2, dim=0)"), ("diff_pre", "torch.diff(w, prepend=w[:1], append=w)"),
        ("diff_bool", "torch.diff(x > 0, dim=0)"), ("diagonal", "torch.diagonal(x)"), ("diagonal_k", "x.diagonal(1)"),
        ("diagonal_neg", "torch.diagonal(z[0], offset=-1)"), ("diagonal_swap", "x.diagonal(0, 1, 0)"),
        ("diag", "torch.diag(z[1], 2)"), ("trace", "torch.trace(z[0])"), ("trace_m", "x.trace()"),
    ], ["x=f32[4,4]", "w=f32[4]", "z=f32[2,3,4]"]),
    "linalg_more": ("", [
        ("dot", "torch.dot(v, w)"), ("vdot", "v.vdot(w)"), ("inner", "torch.inner(m, b)"), ("inner_vec", "v.inner(w)"),
        ("outer", "torch.outer(v, u)"), ("ger", "v.ger(u)"), ("mv", "torch.mv(m, u)"),
        ("addmm", "torch.addmm(c, m, n)"), ("addmm_scaled", "c.addmm(m, n, beta=0.5, alpha=2)"),
        ("addmm_bcast", "torch.addmm(u2, m, n)"), ("addmm_beta0", "torch.addmm(c.log(), m, n, beta=0)"),
        ("addmv", "torch.addmv(v, m, u, alpha=-1)"), ("addr", "torch.addr(c, v, u, beta=2)"),
        ("baddbmm", "torch.baddbmm(z, y, y.mT)"), ("addbmm", "torch.addbmm(c2, y, y.mT, alpha=0.5)"),
    ], ["v=f32[4]", "w=f32[4]", "u=f32[5]", "u2=f32[5]", "m=f32[4,5]", "n=f32[5,5]", "b=f32[3,5]", "c=f32[4,5]",
        "c2=f32[3,3]", "y=f32[2,3,4]", "z=f32[2,3,3]"]),
}


@pytest.mark.parametrize("group", sorted(GROUPS))
def test_op_group(tmp_path, group):
    init, exprs, specs = GROUPS[group]
    src, _ = model_source(init, exprs, specs)
    path = tmp_path / f"ops_{group}.py"
    path.write_text(src)
    mod = load_module(str(path), f"ops_more_{group}")
    model = mod.Net()
    model.eval()
    rng = np.random.default_rng(11)
    inputs = []
    for s in specs:
        dt, dims = s.split("=")[1].split("[")
        shape = tuple(int(d) for d in dims.rstrip("]").split(","))
        inputs.append(rng.integers(0, 4, shape).astype(np.int64) if dt == "i64"
                      else rng.standard_normal(shape).astype(np.float32))
    with torch.no_grad():
        want = model(*[torch.from_numpy(x.copy()) for x in inputs])
    got = run_forward(str(tmp_path), str(path), model, inputs)
    assert len(got) == len(want)
    for (label, _), g, w in zip(exprs, got, want):
        w = w.numpy()
        assert g.dtype == w.dtype and g.shape == w.shape, (f"{group}/{label}", g.dtype, w.dtype, g.shape, w.shape)
        if w.dtype.kind == "f":
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5, equal_nan=True, err_msg=f"{group}/{label}")
        else:
            np.testing.assert_array_equal(g, w, err_msg=f"{group}/{label}")


EDGE_SRC = """\
import torch
import torch.nn as nn


class Net(nn.Module):
    def forward(self, x, y, i, j):
        return (torch.sign(x), torch.round(x), torch.trunc(x), torch.remainder(x, y), x % y, torch.fmod(x, y),
                x // y, torch.div(x, y, rounding_mode='trunc'), torch.atan2(x, y), torch.argmax(x, 1),
                torch.argmin(x, 0), torch.max(x, 1)[0], torch.max(x, 1)[1], torch.min(x, 0)[1], torch.cumsum(x, 1),
                torch.logsumexp(x, 1), x.amin(1), i % j, i // j, torch.fmod(i, j), torch.expm1(x), torch.log1p(x))


example_inputs = (torch.randn(6, 11), torch.randn(6, 11), torch.randint(0, 5, (6, 11)), torch.randint(1, 5, (6, 11)))
"""


def test_edge_values(tmp_path):
    """0, -0, x.5 ties, NaN and +-inf (in x and as divisors), integer operands
    of both signs: PyTorch's values, NaN equal to NaN."""
    special = np.array([0.0, -0.0, 0.5, -0.5, 1.5, -2.5, 2.5, np.nan, np.inf, -np.inf, 3.0], np.float32)
    x = np.stack([np.roll(special, k) for k in range(6)]).astype(np.float32)
    y = np.stack([np.roll(special[::-1], 2 * k) for k in range(6)]).astype(np.float32)
    i = (np.arange(66).reshape(6, 11) % 13 - 6).astype(np.int64)
    j = np.where(np.arange(66).reshape(6, 11) % 2 == 0, 1, -1) * (np.arange(66).reshape(6, 11) % 4 + 1)
    j = j.astype(np.int64)
    path = tmp_path / "edges.py"
    path.write_text(EDGE_SRC)
    mod = load_module(str(path), "ops_more_edges")
    model = mod.Net()
    with torch.no_grad():
        want = model(*[torch.from_numpy(a.copy()) for a in (x, y, i, j)])
    got = run_forward(str(tmp_path), str(path), model, [x, y, i, j])
    assert len(got) == len(want)
    for k, (g, w) in enumerate(zip(got, want)):
        w = w.numpy()
        assert g.dtype == w.dtype and g.shape == w.shape, (k, g.dtype, w.dtype)
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6, equal_nan=True, err_msg=f"output {k}")


POW_SRC = """\
import torch
import torch.nn as nn


class Net(nn.Module):
    def forward(self, x, d):
        return (x ** 3, x ** -1, x ** -2, torch.pow(x, 3), x.pow(-2), d ** 3, d ** -2)


example_inputs = (torch.randn(64, 33), torch.randn(64, 33, dtype=torch.float64))
"""


def test_small_integer_powers_are_pytorchs(tmp_path):
    """PyTorch computes x ** 3, x ** -1 and x ** -2 of float and double tensors as x * x * x,
    1 / x and 1 / (x * x), not pow (whose correctly rounded result differs in about a quarter
    of the elements): ctc's values are the same bits, and the C calls no pow for them. (minGPT's
    and nanoGPT's hand-written GELU has torch.pow(x, 3.0): powf made the bench gpt's train step
    with it 422 ms against 231.)"""
    x = (np.random.default_rng(7).standard_normal((64, 33)) * 5).astype(np.float32)
    x[0, :6] = [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-20]
    path = tmp_path / "pows.py"
    path.write_text(POW_SRC)
    mod = load_module(str(path), "ops_more_pows")
    with torch.no_grad():
        want = mod.Net()(torch.from_numpy(x), torch.from_numpy(x.astype(np.float64)))
    got = run_forward(str(tmp_path), str(path), mod.Net(), [x, x.astype(np.float64)])
    for k, (g, w) in enumerate(zip(got, want)):
        np.testing.assert_array_equal(g, w.numpy(), err_msg=f"output {k}")
    assert not re.search(r"\bpowf?\(", (tmp_path / "net.c").read_text())


REFUSED = [
    ("x & y", "not implemented for floating-point tensors"),
    ("~x", "not implemented for floating-point tensors"),
    ("i // 0", "ZeroDivisionError: integer division by zero"),
    ("i % 0", "ZeroDivisionError: integer modulo by zero"),
    ("(x > 0) % (y > 0)", "not implemented for 'Bool'"),
    ("torch.div(x, y, rounding_mode='round')", "rounding_mode to be one of None, 'trunc', or 'floor'"),
    ("torch.norm(x, p='nuc')", "p='nuc' is not supported"),
    ("torch.gather(x, 1, y)", "must be an integer tensor"),
    ("torch.gather(x, 1, i[:, :, None])", "must have the same number of dimensions"),
    ("x.scatter_add(0, i, i)", "self.dtype to be equal to src.dtype"),
    ("torch.index_select(x, 0, i)", "must be 0-D or 1-D"),
    ("torch.argmax(x > 0)", "not implemented for 'Bool'"),
    ("torch.var(i)", "only supports floating-point"),
    ("x.repeat(2)", "can not be smaller than the number of dimensions"),
    ("torch.flip(x, (0, 0))", "appears multiple times"),
    ("torch.tril(x[0])", "at least 2 dimensions"),
    ("torch.cumsum(x, 2)", "out of range"),
]


@pytest.mark.parametrize("expr,msg", REFUSED, ids=[r[0] for r in REFUSED])
def test_refused(tmp_path, expr, msg):
    """Misuse gives PyTorch's error as a located diagnostic (exit 1), never a crash."""
    import re
    import subprocess
    from ctc_testlib import CTC
    path = tmp_path / "bad.py"
    path.write_text("import torch\n\n\ndef f(x, y, i):\n    return " + expr + "\n\n\n"
                    "example_inputs = {'f': (torch.zeros(3, 4), torch.zeros(3, 4), torch.zeros(3, 4, dtype=torch.int64))}\n")
    r = subprocess.run([CTC, "check", path, "--entry", "f"], capture_output=True, text=True, timeout=30)
    assert r.returncode == 1 and re.search(r"bad.py:5:\d+: error: ", r.stderr), (r.returncode, r.stderr)
    assert msg in r.stderr, r.stderr
