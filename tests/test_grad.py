"""Reverse-mode AD: every primitive's VJP against torch.autograd (float64, so
the comparison is tight: rtol 1e-6) and against a central finite difference of
ctc's own compiled loss along a random direction; whole-model parameter
gradients against PyTorch (float32, rtol 1e-3 / atol 1e-5: gradients sum over
the batch, so summation order moves them more than forward values).

Each case is compiled as two entries of one file: g<k>(x.., p) returns
torch.autograd.grad((f(x..) * p).sum(), inputs) and l<k>(x.., p) returns the
loss itself. The random probe p makes every output element's adjoint
different, so transposed or shifted gradients cannot pass."""
import os
import textwrap

import numpy as np
import pytest
import torch

from ctc_testlib import CTC, EXAMPLES, compare, load_module, run, run_entry, st_write, state_dict_np

HEAD = "import math\nimport torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n\n\n" \
       "class Net(nn.Module):\n    def forward(self, x):\n        return x\n\n\n"

# (label, inputs as name=shape (f64; 'i:' prefix for int64 indices), expression)
CASES = [
    ("neg_exp_log", ["x=3,4"], "torch.log(torch.exp(-x) + 2.0)"),
    ("sqrt_rsqrt", ["x=3,4"], "torch.sqrt(x * x + 1.0) + torch.rsqrt(x * x + 0.5)"),
    ("tanh_sigmoid", ["x=3,4"], "torch.tanh(x) * torch.sigmoid(x)"),
    ("abs_relu", ["x=3,4"], "x.abs() * 2 + F.relu(x)"),
    ("erf_gelu", ["x=3,4"], "F.gelu(x) + F.gelu(x, approximate='tanh')"),
    ("silu_leaky", ["x=3,4"], "F.silu(x) + F.leaky_relu(x, 0.1)"),
    ("pow", ["x=3,4"], "torch.pow(x.abs() + 0.5, 2.5) + x ** 3"),
    ("pow_tensor_exp", ["x=3,4", "y=3,4"], "torch.pow(x.abs() + 0.5, y)"),
    ("add_sub_bcast", ["x=3,4", "y=4"], "x + y - 2 * y"),
    ("mul_div_bcast", ["x=3,4", "y=3,1"], "x * y / (y * y + 1)"),
    ("where_max_min", ["x=3,4", "y=3,4"], "torch.maximum(x, y) + torch.minimum(x, 2 * y) + torch.where(x > 0, x, y)"),
    ("clamp", ["x=3,4"], "x.clamp(-0.5, 0.5)"),
    ("sum_mean", ["x=2,3,4"], "x.sum(1) + x.mean(dim=(1,), keepdim=False) * 3"),
    ("amax", ["x=2,3,4"], "x.amax(dim=-1)"),
    ("softmax", ["x=3,5"], "F.softmax(x, dim=1) + F.log_softmax(x, dim=0)"),
    ("reshape_permute", ["x=2,3,4"], "x.reshape(6, 4).t().reshape(2, 2, 6).permute(2, 0, 1)"),
    ("slice_index", ["x=4,6"], "x[1:3, ::2] * x[:2, 3:]"),
    ("expand_cat", ["x=2,1,3"], "torch.cat([x.expand(2, 4, 3), x * 2], dim=1)"),
    ("matmul", ["x=3,4", "y=4,5"], "x @ y"),
    ("matmul_batched", ["x=2,3,4", "y=4,5"], "x @ y"),
    ("matmul_bcast4d", ["x=2,3,4,5", "y=3,5,2"], "x @ y"),
    ("matmul_t", ["x=3,4", "y=5,4"], "x @ y.t()"),
    ("linear", ["x=2,3,4", "w=5,4", "b=5"], "F.linear(x, w, b)"),
    ("conv2d", ["x=2,3,7,6", "w=4,3,3,2"], "F.conv2d(x, w, stride=(2, 1), padding=1, dilation=(1, 2))"),
    ("max_pool", ["x=2,2,6,7"], "F.max_pool2d(x, 3, stride=2, padding=1)"),
    ("avg_pool", ["x=2,2,6,6"], "F.avg_pool2d(x, 2) + F.adaptive_avg_pool2d(x, 1)"),
    ("layer_norm", ["x=3,8", "w=8", "b=8"], "F.layer_norm(x, (8,), w, b, 1e-5)"),
    ("embedding", ["i:i=3,4", "w=6,5"], "F.embedding(i, w)"),
    ("losses", ["x=4,5", "y=4,5"], "F.mse_loss(x, y) + F.l1_loss(x, y) + F.smooth_l1_loss(x, y, beta=0.5) + "
                                   "F.binary_cross_entropy_with_logits(x, torch.sigmoid(y))"),
    ("bce", ["x=4,5", "y=4,5"], "F.binary_cross_entropy(torch.sigmoid(x), torch.sigmoid(y), reduction='sum')"),
    ("conv_groups", ["x=2,4,7,6", "w=6,2,3,3", "v=4,1,3,2"],
     "F.conv2d(x, w, padding=1, groups=2)[:, :4, ::2, ::2] + F.conv2d(x, v, stride=2, padding=(1, 0), groups=4)"),
    ("conv1d", ["x=2,4,9", "w=6,2,3"], "F.conv1d(x, w, stride=2, padding=1, dilation=2, groups=2)"),
    ("conv_transpose", ["x=2,4,4,3", "w=4,3,3,2", "b=6"],
     "F.conv_transpose2d(x, w, b, stride=2, padding=1, output_padding=1, groups=2)"),
    ("pad", ["x=2,3,5,6"], "F.pad(x, (1, 2, 2, 0), mode='reflect') + F.pad(x, (1, 2, 2, 0), mode='replicate') * 2 + "
                           "F.pad(x, (1, 2, 2, 0), value=0.5) + F.pad(x, (1, 2, 2, 0), mode='circular')"),
    ("interpolate", ["x=2,2,5,6"], "F.interpolate(x, scale_factor=2) + F.interpolate(x, size=(10, 12), mode='bilinear', "
                                   "align_corners=True) + F.interpolate(x, scale_factor=2, mode='bilinear')"),
    ("activations", ["x=3,7"], "F.softplus(x, 2, 1) + F.elu(x) + F.selu(x) + F.celu(x, 0.5) + F.hardtanh(x, -0.5, 0.5)"
                               " + F.relu6(x * 4) + F.hardsigmoid(x * 4) + F.hardswish(x * 4) + F.mish(x) + "
                               "F.softsign(x) + F.tanhshrink(x) + F.hardshrink(x) + F.softshrink(x) + F.logsigmoid(x)"
                               " + F.threshold(x, 0.1, -1.0)"),
    ("glu_prelu_softmin", ["x=2,4,3", "w=4"], "F.glu(x, 1) * F.prelu(x, w)[:, :2] + F.softmin(x, 1)[:, 2:]"),
    ("norms", ["x=3,4,5,2", "w=4", "b=4"], "F.batch_norm(x, None, None, w, b, training=True) + "
                                           "F.instance_norm(x, weight=w, bias=b) + F.group_norm(x, 2, w, b)"),
    ("pixel_shuffle", ["x=2,8,3,2"], "F.pixel_shuffle(x, 2) * F.pixel_shuffle(F.pixel_unshuffle(F.pixel_shuffle(x, 2), 2) ** 2, 2)"),
]
# issue 15's ops (ops.def's last block, and composites lowered to primitives)
CASES += [
    ("log_exp_more", ["x=3,4"], "torch.log1p(x.abs()) + torch.expm1(x) + torch.log2(x.abs() + 1) + "
                                "(x.abs() + 1).log10() + torch.exp2(x)"),
    ("trig_more", ["x=3,4"], "torch.atan(x) + torch.asin(torch.tanh(x)) + (0.9 * torch.tanh(x)).acos() + "
                             "torch.sinh(x) + x.cosh()"),
    ("hyperbolic_more", ["x=3,4"], "torch.tan(torch.tanh(x)) + torch.asinh(x) + torch.acosh(x.abs() + 1.5) + "
                                   "torch.atanh(0.9 * torch.tanh(x)) + torch.erfc(x)"),
    ("atan2", ["x=3,4", "y=3,4"], "torch.atan2(x, y) + x.atan2(y.abs() + 1) + torch.copysign(x, y) * x"),
    ("remainder_fmod", ["x=3,4", "y=3,4"], "torch.remainder(3 * x, y) + torch.fmod(3 * x, y) + x % 0.7 + "
                                           "x.fmod(-0.4)"),
    ("round_sign_frac", ["x=3,4"], "torch.round(x * 3) * x + torch.sign(x) * x + torch.trunc(2 * x) * x + "
                                   "x.frac() + torch.reciprocal(x.abs() + 1)"),
    ("cumsum", ["x=3,4"], "torch.cumsum(x, dim=1) * x.cumsum(0)"),
    ("gather_scatter", ["i:i=3,4", "x=3,6", "y=3,4"], "torch.gather(x, 1, i) * y + torch.scatter_add(x, 1, i, y * y)"
                                                      "[:, :4]"),
    ("index_select_take", ["i:i=5", "x=4,6"], "torch.index_select(x, 1, i) * torch.take_along_dim(x, i[:4, None], 1)"),
    ("max_min_dim", ["x=3,5"], "x.max(dim=1)[0] * 2 + torch.min(x, 0, keepdim=True)[0].sum() + x.amin(1)"),
    ("logsumexp_var_norm", ["x=3,5"], "torch.logsumexp(x, dim=1) + x.var(dim=1) + torch.std(x, 1) + x.norm(dim=1) + "
                                      "torch.norm(x, p=1, dim=1) + torch.norm(x, float('inf'), dim=1)"),
    ("lerp_addc", ["x=3,4", "y=3,4", "w=3,4"], "torch.lerp(x, y, w) + torch.lerp(x, y, 0.7) + "
                                               "torch.addcmul(x, y, w, value=0.5) + torch.addcdiv(x, y, w.abs() + 1)"),
    ("addmm_family", ["x=3,4", "y=4,5", "v=4"], "torch.addmm(x @ y, x, y, beta=0.5, alpha=2)[:, :4] + "
                                                "torch.addr(x, x[:, 0], v) + torch.outer(x[0], v).t()[:3]"),
    # round_bf16 (autocast's bf16 values): its gradient is PyTorch's, the cotangent rounded to bf16
    ("round_bf16", ["x=3,4"], "x.bfloat16().float() * x + x.to(torch.bfloat16) * 2"),
    # round_f16 (float16 autocast): the cotangent rounded to float16
    ("round_f16", ["x=3,4"], "x.half().float() * x * 3000 + x.to(torch.float16) * 2"),
    ("clamp_tril_repeat", ["x=3,4"], "torch.clamp_min(x, -0.5) * x.clamp_max(0.5) + torch.tril(x, 1) + "
                                     "x.triu(-1) + x.repeat(1, 2)[:, 3:7] + x.diff(prepend=x[:, :1]) + "
                                     "torch.diagonal(x, 1).sum() * torch.trace(x)"),
]


# Cases whose derivative is PyTorch's convention rather than the function's: a rounding to
# bf16 passes the (rounded) cotangent through, where the step function's derivative is 0, so
# no finite difference can agree with it.
STRAIGHT_THROUGH = {"round_bf16", "round_f16"}


def parse(spec):
    name, dims = spec.split("=")
    is_int = name.startswith("i:")
    return name[2:] if is_int else name, tuple(int(d) for d in dims.split(",")), is_int


def make_file(cases, out_shapes):
    src = HEAD
    for k, (label, ins, expr) in enumerate(cases):
        names = [parse(s)[0] for s in ins]
        floats = [parse(s)[0] for s in ins if not parse(s)[2]]
        args = ", ".join(names + ["p"])
        src += f"def l{k}({args}):  # {label}\n    return ({expr} * p).sum()\n\n\n"
        src += (f"def g{k}({args}):\n    return torch.autograd.grad(({expr} * p).sum(), "
                f"({', '.join(floats)},))\n\n\n")
    src += "example_inputs = {\n    'forward': (torch.randn(2, 2),),\n"
    for k, (label, ins, expr) in enumerate(cases):
        ex = []
        for s in ins:
            n, shape, is_int = parse(s)
            ex.append(f"torch.randint(0, 6, {shape})" if is_int else f"torch.randn({shape}).double()")
        ex.append(f"torch.randn({tuple(out_shapes[k])}).double()")
        for fn in ("l", "g"):
            src += f"    '{fn}{k}': ({', '.join(ex)},),\n"
    return src + "}\n"


def inputs_for(ins, seed):
    rng = np.random.default_rng(seed)
    out = []
    for s in ins:
        n, shape, is_int = parse(s)
        out.append(rng.integers(0, 6, size=shape).astype(np.int64) if is_int else rng.standard_normal(shape))
    return out


@pytest.fixture(scope="module")
def grad_program(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("grad")
    # output shapes from torch
    shapes = []
    env = {"torch": torch, "F": torch.nn.functional, "math": __import__("math")}
    for k, (label, ins, expr) in enumerate(CASES):
        vals = {parse(s)[0]: torch.from_numpy(v) for s, v in zip(ins, inputs_for(ins, k))}
        shapes.append(tuple(eval(expr, env, vals).shape))
    path = tmp / "grads.py"
    path.write_text(make_file(CASES, shapes))
    exe = tmp / "net"
    entries = []
    for k in range(len(CASES)):
        entries += ["--entry", f"l{k}", "--entry", f"g{k}"]
    run([CTC, "build", path, "-o", exe, *entries])
    return tmp, exe, path, shapes




@pytest.mark.parametrize("k", range(len(CASES)), ids=[c[0] for c in CASES])
def test_vjp(grad_program, k):
    tmp, exe, path, shapes = grad_program
    label, ins, expr = CASES[k]
    xs = inputs_for(ins, k)
    probe = np.random.default_rng(100 + k).standard_normal(shapes[k])
    floats = [i for i, s in enumerate(ins) if not parse(s)[2]]
    got = run_entry(tmp, exe, f"g{k}", xs + [probe], len(floats))
    # oracle 1: torch.autograd in float64
    mod = load_module(str(path), "grads_mod")
    tx = [torch.tensor(x, requires_grad=not parse(s)[2]) for s, x in zip(ins, xs)]
    want = torch.autograd.grad(getattr(mod, f"l{k}")(*tx, torch.from_numpy(probe)), [tx[i] for i in floats])
    for j, (g, w) in enumerate(zip(got, want)):
        compare(f"{label} d/d{parse(ins[floats[j]])[0]}", g, w.numpy(), 1e-6, 1e-9)
    # oracle 2: central difference of ctc's own compiled loss along a random direction
    if label in STRAIGHT_THROUGH:
        return
    rng = np.random.default_rng(200 + k)
    dirs = [rng.standard_normal(xs[i].shape) for i in floats]
    h = 1e-6
    plus, minus = list(xs), list(xs)
    for d, i in zip(dirs, floats):
        plus[i] = xs[i] + h * d
        minus[i] = xs[i] - h * d
    lp = run_entry(tmp, exe, f"l{k}", plus + [probe], 1)[0]
    lm = run_entry(tmp, exe, f"l{k}", minus + [probe], 1)[0]
    fd = (float(lp) - float(lm)) / (2 * h)
    an = sum(float((g * d).sum()) for g, d in zip(got, dirs))
    assert abs(fd - an) <= 1e-5 * max(1.0, abs(an)), f"{label}: finite difference {fd} vs analytic {an}"


MODELS = [
    ("seed_cnn", os.path.join(EXAMPLES, "seed_cnn.py"), "Network", "t", (16, 1, 28, 28), 10),
    ("cifar_net", os.path.join(EXAMPLES, "cifar_net.py"), "Net", "x", (8, 3, 32, 32), 10),
    ("mlp_sequential", os.path.join(EXAMPLES, "mlp_sequential.py"), "MLP", "x", (8, 1, 28, 28), 10),
]


def model_grad_source(path, cls, nll):
    loss = "F.nll_loss(model(x), y)" if nll else "F.cross_entropy(model(x), y)"
    return open(path).read() + textwrap.dedent(f"""
        import torch.nn.functional as F

        model = {cls}()
        model.eval()  # deterministic (Dropout off) so PyTorch and ctc compute the same function


        def grads(x, y):
            loss = {loss}
            return torch.autograd.grad(loss, list(model.parameters()))
        """)


@pytest.mark.parametrize("label,path,cls,arg,shape,classes", MODELS, ids=[m[0] for m in MODELS])
def test_model_gradients(tmp_path, label, path, cls, arg, shape, classes):
    nll = label == "mlp_sequential"   # its output is already log_softmax
    src = tmp_path / f"{label}_grads.py"
    src.write_text(model_grad_source(path, cls, nll))
    exe = tmp_path / "net"
    run([CTC, "build", src, "-o", exe, "--model", cls, "--input", f"{arg}=f32[{','.join(map(str, shape))}]",
         "--input", f"x=f32[{','.join(map(str, shape))}]", "--input", f"y=i64[{shape[0]}]", "--entry", "grads"])
    mod = load_module(str(src), label + "_grads")
    torch.manual_seed(0)
    model = getattr(mod, cls)()
    model.eval()
    w = tmp_path / "w.safetensors"
    st_write(w, state_dict_np(model))
    rng = np.random.default_rng(5)
    x = rng.standard_normal(shape).astype(np.float32)
    y = rng.integers(0, classes, size=shape[0]).astype(np.int64)
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", y)
    names = list(dict(model.named_parameters()))
    outs = [tmp_path / f"g{i}.npy" for i in range(len(names))]
    args = [exe, "run", "grads", "--weights", w, "--input", tmp_path / "x.npy", "--input", tmp_path / "y.npy"]
    for o in outs:
        args += ["--output", o]
    run(args)
    out = model(torch.from_numpy(x))
    loss = torch.nn.functional.nll_loss(out, torch.from_numpy(y)) if nll else \
        torch.nn.functional.cross_entropy(out, torch.from_numpy(y))
    want = torch.autograd.grad(loss, list(model.parameters()))
    for n, o, wg in zip(names, outs, want):
        d = compare(f"{label} grad {n}", np.load(o), wg.numpy(), 1e-3, 1e-5)
        print(f"{label}: d loss / d {n} max abs diff {d:.2e}")
