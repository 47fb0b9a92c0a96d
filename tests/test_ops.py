"""Per-op forward tests: each group is a small model file whose forward returns
one output per op; ctc's output for each is compared with PyTorch running the
same file. Tolerance rtol 1e-4 / atol 1e-5 (float32; see test_models.py).

Groups keep the number of C builds small; a failure names the op."""
import os
import textwrap

import numpy as np
import pytest
import torch

from ctc_testlib import compare, load_module, run_forward

HEADER = """\
import math
import torch
import torch.nn as nn
import torch.nn.functional as F
"""

# group -> (__init__ lines, [(label, expression)], [forward parameters as NAME=dtype[dims]])
GROUPS = {
    "unary": ("", [
        ("F.relu", "F.relu(x)"), ("torch.relu", "torch.relu(x)"), ("x.relu", "x.relu()"),
        ("leaky_relu", "F.leaky_relu(x, 0.2)"), ("leaky_default", "F.leaky_relu(x)"),
        ("tanh", "torch.tanh(x)"), ("sigmoid", "torch.sigmoid(x)"), ("F.sigmoid", "F.sigmoid(x)"),
        ("gelu", "F.gelu(x)"), ("gelu_tanh", "F.gelu(x, approximate='tanh')"), ("silu", "F.silu(x)"),
        ("exp", "x.exp()"), ("log", "torch.log(x.abs() + 1)"), ("sqrt", "torch.sqrt(x.abs())"),
        ("abs", "x.abs()"), ("pow3", "torch.pow(x, 3)"), ("pow_op", "x ** 2"), ("neg", "-x"),
        ("rsqrt", "torch.rsqrt(x.abs() + 0.5)"), ("hand_gelu",
         "0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))"),
    ], ["x=f32[4,33]"]),
    "modules": ("""\
        self.relu = nn.ReLU()
        self.leaky = nn.LeakyReLU(0.2, inplace=True)
        self.tanh = nn.Tanh()
        self.sig = nn.Sigmoid()
        self.gelu = nn.GELU()
        self.gelu_t = nn.GELU(approximate='tanh')
        self.silu = nn.SiLU()
        self.ident = nn.Identity()
        self.drop = nn.Dropout(0.5)
        self.soft = nn.Softmax(dim=1)
        self.logsoft = nn.LogSoftmax(dim=-1)
        self.flat = nn.Flatten()
        self.flat0 = nn.Flatten(0)
""", [
        ("ReLU", "self.relu(x)"), ("LeakyReLU", "self.leaky(x)"), ("Tanh", "self.tanh(x)"),
        ("Sigmoid", "self.sig(x)"), ("GELU", "self.gelu(x)"), ("GELU_tanh", "self.gelu_t(x)"),
        ("SiLU", "self.silu(x)"), ("Identity", "self.ident(x)"), ("Dropout_eval", "self.drop(x)"),
        ("Softmax", "self.soft(x)"), ("LogSoftmax", "self.logsoft(x)"), ("Flatten", "self.flat(x)"),
        ("Flatten0", "self.flat0(x)"),
    ], ["x=f32[3,5,4]"]),
    "inplace": ("""\
        self.relu = nn.ReLU(inplace=True)
        self.leaky = nn.LeakyReLU(0.2, inplace=True)
""", [
        ("relu_inplace_then_reuse", "self.relu(x * 1) + x"), ("leaky_inplace_alias", "self.leaky(y) - y"),
        ("F.relu_inplace", "F.relu(z, inplace=True) * z"), ("add_", "w.add_(1.5) * w"), ("mul_", "w.mul_(2)"),
    ], ["x=f32[3,5]", "y=f32[3,5]", "z=f32[3,5]", "w=f32[3,5]"]),
    "binary": ("", [
        ("add", "x + y"), ("sub_scalar", "x - 2"), ("rmul", "3 * x"), ("div", "x / (y.abs() + 1)"),
        ("rdiv", "1 / (x.abs() + 1)"), ("rsub", "2.5 - x"), ("bcast_row", "x * b"), ("bcast_col", "x + c"),
        ("bcast_both", "c * b"), ("torch_add_alpha", "torch.add(x, y, alpha=2)"), ("mul_method", "x.mul(y)"),
        ("maximum", "torch.maximum(x, y)"), ("minimum", "torch.minimum(x, y)"), ("clamp", "x.clamp(-0.5, 0.5)"),
        ("where", "torch.where(x > y, x, y * 2)"), ("masked_fill", "x.masked_fill(y > 0, float('-inf')).exp()"),
        ("compare_float", "(x >= 0).float()"),
    ], ["x=f32[6,7]", "y=f32[6,7]", "b=f32[7]", "c=f32[6,1]"]),
    "reduce": ("", [
        ("sum_dim", "x.sum(1)"), ("sum_all", "x.sum()"), ("sum_keep", "torch.sum(x, dim=-1, keepdim=True)"),
        ("mean_dims", "x.mean(dim=(0, 2))"), ("mean_keep", "x.mean(1, keepdim=True)"), ("amax", "x.amax(dim=2)"),
        ("amax_keep", "torch.amax(x, dim=(1, 2), keepdim=True)"), ("softmax", "F.softmax(x, dim=-1)"),
        ("softmax0", "F.softmax(x, dim=0)"), ("log_softmax", "F.log_softmax(x, dim=1)"),
        ("t_softmax", "x.softmax(dim=1)"), ("torch_log_softmax", "torch.log_softmax(x, dim=2)"),
    ], ["x=f32[3,4,5]"]),
    "shape": ("", [
        ("view", "x.view(-1, 20)"), ("reshape", "x.reshape(6, 20)"), ("flatten", "torch.flatten(x, 1)"),
        ("x.flatten", "x.flatten()"), ("squeeze", "x[:, :1].squeeze(1)"), ("squeeze_all", "x[:1].squeeze()"),
        ("unsqueeze", "x.unsqueeze(1)"), ("unsqueeze_neg", "x.unsqueeze(-1)"),
        ("transpose", "x.transpose(1, 2)"), ("permute", "x.permute(2, 0, 3, 1)"), ("permute_tuple", "x.permute((3, 2, 1, 0))"), ("contiguous", "x.transpose(0, 3).contiguous()"),
        ("t", "x[0, 0].t()"), ("slice", "x[:, 1:3]"), ("slice_step", "x[:, :, ::2, 1:]"),
        ("ellipsis", "x[..., 0]"), ("none", "x[:, None]"), ("int_index", "x[1]"), ("neg_index", "x[:, -1]"),
        ("list_index", "x[:, [-1], :]"), ("cat", "torch.cat([x, x * 2], dim=1)"),
        ("stack", "torch.stack([x, -x], dim=0)"), ("split", "x.split(2, dim=2)[1]"),
        ("chunk", "x.chunk(2, dim=3)[0]"), ("expand", "x[:, :1].expand(2, 3, 4, 5)"),
        ("size_arith", "x.view(x.size(0), -1)"), ("shape_attr", "x.reshape(x.shape[0] * x.shape[1], -1)"),
    ], ["x=f32[2,3,4,5]"]),
    "matmul": ("""\
        self.lin = nn.Linear(5, 3)
        self.lin_nb = nn.Linear(5, 4, bias=False)
""", [
        ("mm", "x @ w"), ("batched", "y @ w"), ("bmm4", "z @ z.transpose(-2, -1)"), ("matmul_fn", "torch.matmul(x, w)"),
        ("vec_mat", "x[0] @ w"), ("mat_vec", "w.t() @ x[1]"), ("linear", "self.lin(x)"), ("linear3d", "self.lin(y)"),
        ("linear_nobias", "self.lin_nb(x)"), ("F.linear", "F.linear(x, self.lin.weight, self.lin.bias)"),
    ], ["x=f32[4,5]", "w=f32[5,6]", "y=f32[2,4,5]", "z=f32[2,3,4,5]"]),
    "conv": ("""\
        self.c1 = nn.Conv2d(3, 4, 3)
        self.c2 = nn.Conv2d(3, 2, kernel_size=(3, 2), stride=2, padding=1, bias=False)
        self.c3 = nn.Conv2d(3, 5, 3, stride=(1, 2), padding=(2, 1), dilation=2)
""", [
        ("conv", "self.c1(x)"), ("conv_stride_pad", "self.c2(x)"), ("conv_dil", "self.c3(x)"),
        ("F.conv2d", "F.conv2d(x, self.c1.weight, self.c1.bias, stride=1, padding=1)"),
    ], ["x=f32[2,3,11,9]"]),
    "pool": ("""\
        self.mp = nn.MaxPool2d(2)
        self.mp3 = nn.MaxPool2d(3, stride=2, padding=1)
        self.ap = nn.AvgPool2d(2, 2)
        self.aap = nn.AdaptiveAvgPool2d((1, 1))
        self.aap2 = nn.AdaptiveAvgPool2d(2)
        self.mp_all = nn.MaxPool2d(3, 2, 1, 2, False, True)
        self.ap_all = nn.AvgPool2d(3, stride=2, padding=1, count_include_pad=False)
""", [
        ("MaxPool2d", "self.mp(x)"), ("MaxPool_pad", "self.mp3(x)"), ("max_pool2d_tuple", "F.max_pool2d(x, (2, 2))"),
        ("max_pool2d_int", "F.max_pool2d(x, 3)"), ("max_pool2d_ceil", "F.max_pool2d(x, 3, 2, ceil_mode=True)"),
        ("max_pool2d_dil", "F.max_pool2d(x, 2, stride=1, dilation=2)"),
        ("AvgPool2d", "self.ap(x)"), ("avg_pool2d_pad", "F.avg_pool2d(x, 3, stride=2, padding=1)"),
        ("avg_pool2d_nopad", "F.avg_pool2d(x, 3, stride=2, padding=1, count_include_pad=False)"),
        ("adaptive1", "self.aap(x)"), ("adaptive_fn", "F.adaptive_avg_pool2d(x, 1)"), ("adaptive2", "self.aap2(x)"),
        ("MaxPool2d_options", "self.mp_all(x)"), ("AvgPool2d_options", "self.ap_all(x)"),
        ("pool_attrs", "x * (self.mp_all.dilation + self.mp_all.padding + int(self.ap_all.count_include_pad))"),
    ], ["x=f32[2,3,8,10]"]),
    "norm_embed": ("""\
        self.ln = nn.LayerNorm(6)
        self.ln2 = nn.LayerNorm([4, 6], eps=1e-3)
        self.emb = nn.Embedding(10, 6)
""", [
        ("LayerNorm", "self.ln(x)"), ("LayerNorm2", "self.ln2(x)"),
        ("F.layer_norm", "F.layer_norm(x, (6,), self.ln.weight, self.ln.bias, 1e-5)"),
        ("F.layer_norm_noaffine", "F.layer_norm(x, (6,))"),
        ("Embedding", "self.emb(i)"), ("F.embedding", "F.embedding(i, self.emb.weight)"),
        ("emb_plus_pos", "self.emb(i) + self.emb(torch.arange(0, 5, dtype=torch.long))"),
    ], ["x=f32[3,4,6]", "i=i64[2,5]"]),
}

def model_source(init, exprs, specs):
    names = [s.split("=")[0] for s in specs]
    body = "\n".join(f"        r{k} = {e}  # {label}" for k, (label, e) in enumerate(exprs))
    ret = ", ".join(f"r{k}" for k in range(len(exprs)))
    init_block = textwrap.indent(textwrap.dedent(init), "        ") if init else ""
    ex = []
    for s in specs:
        dt, dims = s.split("=")[1].split("[")
        dims = dims.rstrip("]")
        ex.append(f"torch.randint(0, 5, ({dims},))" if dt == "i64" else f"torch.randn({dims})")
    return (HEADER + "\n\nclass Net(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
            + init_block + "\n    def forward(self, " + ", ".join(names) + "):\n" + body
            + f"\n        return {ret}\n\n\nexample_inputs = ({', '.join(ex)},)\n"), names


def make_input(spec, seed):
    rng = np.random.default_rng(seed)
    dt, dims = spec.split("=")[1].split("[")
    shape = tuple(int(d) for d in dims.rstrip("]").split(","))
    if dt == "i64":
        return rng.integers(0, 5, size=shape).astype(np.int64)
    return rng.standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize("group", sorted(GROUPS))
def test_op_group(tmp_path, group):
    init, exprs, specs = GROUPS[group]
    src, _ = model_source(init, exprs, specs)
    path = tmp_path / f"ops_{group}.py"
    path.write_text(src)
    mod = load_module(str(path), f"ops_{group}")
    torch.manual_seed(0)
    model = mod.Net()
    model.eval()
    inputs = [make_input(s, 10 + k) for k, s in enumerate(specs)]
    with torch.no_grad():
        want = model(*[torch.from_numpy(x.copy()) for x in inputs])
    got = run_forward(str(tmp_path), str(path), model, inputs)
    assert len(got) == len(want)
    for (label, _), g, w in zip(exprs, got, want):
        compare(f"{group}/{label}", g, w.numpy(), 1e-4, 1e-5)
