"""Pooling a row of windows at a time (codegen_c/emit_ops.c's tap_rows): max and average
pooling, forward and gradient, where windows reach outside the image (padding, ceil mode,
a kernel wider than the image) or overlap, against PyTorch 1.13 in float32.

The hosted C target scans each tap of the windows over a whole row of outputs, the loop
bounds clipped to the image, instead of checking every tap of every window. What must not
change is which element a window takes: max pooling keeps the first maximum of a window
in its (kh, kw) order, or its last NaN, and its gradient goes there. So the inputs are
small integers (ties in most windows), with -inf and NaN at places, and the max forward
and gradient must equal PyTorch's bit for bit (both add a window's g into dx in the
windows' order). Average pooling's sums run in double here and in float in PyTorch:
within 2e-6 relative (a 9-term float sum's rounding), NaN where PyTorch has NaN."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from ctc_testlib import CTC, run, run_entry

# (label, input shape, pooling of x)
CASES = [
    ("max_3s2p1_stem", (2, 3, 13, 12), "F.max_pool2d(x, 3, stride=2, padding=1)"),
    ("max_3s1p1", (1, 2, 7, 9), "F.max_pool2d(x, 3, stride=1, padding=1)"),
    ("max_3s2_ceil", (1, 2, 8, 11), "F.max_pool2d(x, 3, stride=2, ceil_mode=True)"),
    ("max_dil2_p1", (1, 2, 9, 10), "F.max_pool2d(x, 3, stride=1, padding=1, dilation=2)"),
    ("max_rect", (2, 2, 6, 9), "F.max_pool2d(x, (2, 3), stride=(1, 2), padding=(1, 0))"),
    ("max_5p2_tiny", (1, 3, 3, 2), "F.max_pool2d(x, 5, stride=1, padding=2)"),
    ("max_3s3p1_ceil", (1, 2, 10, 7), "F.max_pool2d(x, 3, stride=3, padding=1, ceil_mode=True)"),
    ("avg_3s1p1", (2, 2, 7, 8), "F.avg_pool2d(x, 3, stride=1, padding=1)"),
    ("avg_3s1p1_nopad", (2, 2, 7, 8), "F.avg_pool2d(x, 3, stride=1, padding=1, count_include_pad=False)"),
    ("avg_3s2p1_nopad", (1, 3, 9, 12), "F.avg_pool2d(x, 3, stride=2, padding=1, count_include_pad=False)"),
    ("avg_rect", (1, 2, 8, 5), "F.avg_pool2d(x, (3, 2), stride=(2, 1), padding=(1, 1))"),
    ("avg_5p2_tiny", (1, 2, 3, 2), "F.avg_pool2d(x, 5, stride=1, padding=2)"),
]

HEAD = "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n\n\n" \
       "class Net(nn.Module):\n    def forward(self, x):\n        return x\n\n\n"


def inputs(k, shape, is_max):
    """Small integers (ties), for max pooling with -inf and NaN at a few places."""
    rng = np.random.default_rng(k)
    x = rng.integers(-3, 4, size=shape).astype(np.float32)
    if is_max:
        flat = x.reshape(-1)
        pick = rng.choice(flat.size, size=max(2, flat.size // 12), replace=False)
        flat[pick[: len(pick) // 2]] = -np.inf
        flat[pick[len(pick) // 2:]] = np.nan
    else:
        x += rng.standard_normal(shape).astype(np.float32) * 0.25
    return x


@pytest.fixture(scope="module")
def pools(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("pool_rows")
    shapes, src, ex = [], HEAD, []
    for k, (label, shape, expr) in enumerate(CASES):
        y = eval(expr, {"F": F}, {"x": torch.zeros(shape)})
        shapes.append(tuple(y.shape))
        src += f"def y{k}(x):  # {label}\n    return {expr}\n\n\n"
        src += f"def g{k}(x, p):\n    return torch.autograd.grad(({expr} * p).sum(), (x,))\n\n\n"
        ex.append(f"    'y{k}': (torch.randn{shape},),\n    'g{k}': (torch.randn{shape}, torch.randn{tuple(y.shape)}),\n")
    src += "example_inputs = {\n    'forward': (torch.randn(2, 2),),\n" + "".join(ex) + "}\n"
    path = tmp / "pools.py"
    path.write_text(src)
    exe = tmp / "net"
    entries = [a for k in range(len(CASES)) for a in ("--entry", f"y{k}", "--entry", f"g{k}")]
    run([CTC, "build", path, "-o", exe, *entries])
    run([CTC, "compile", path, "-o", tmp / "pools.c", *entries])
    return tmp, exe, shapes, (tmp / "pools.c").read_text()


def test_rows_are_scanned_tap_by_tap(pools):
    """The hosted C target writes the row scans for every case here: no window's tap is
    checked against the image's columns one by one."""
    code = pools[3]
    assert code.count("/* iw = ow") >= len(CASES), "padded pools not scanned a row at a time"
    assert "if (iw < 0 ||" not in code


@pytest.mark.parametrize("k", range(len(CASES)), ids=[c[0] for c in CASES])
def test_pool_rows_match_torch(pools, k):
    tmp, exe, shapes, _ = pools
    label, shape, expr = CASES[k]
    is_max = label.startswith("max")
    x = inputs(k, shape, is_max)
    p = np.random.default_rng(50 + k).integers(-4, 5, size=shapes[k]).astype(np.float32)   # g: exact sums
    y = run_entry(tmp, exe, f"y{k}", [x], 1)[0]
    dx = run_entry(tmp, exe, f"g{k}", [x, p], 1)[0]
    tx = torch.tensor(x, requires_grad=True)
    ty = eval(expr, {"F": F}, {"x": tx})
    (tdx,) = torch.autograd.grad((ty * torch.from_numpy(p)).sum(), (tx,))
    ty, tdx = ty.detach().numpy(), tdx.numpy()
    assert y.shape == ty.shape and dx.shape == tdx.shape
    if is_max:
        assert np.array_equal(y, ty, equal_nan=True), f"{label}: max differs at {np.argwhere(~((y == ty) | (np.isnan(y) & np.isnan(ty))))[:5]}"
        assert np.array_equal(dx, tdx), f"{label}: gradient differs at {np.argwhere(dx != tdx)[:5]}"
    else:
        np.testing.assert_allclose(y, ty, rtol=2e-6, atol=1e-7, err_msg=label)
        np.testing.assert_allclose(dx, tdx, rtol=2e-6, atol=1e-7, err_msg=label)


def test_pool_rows_threads_agree(pools, tmp_path):
    """Two threads take images (planes) apart: the same bytes as one thread."""
    tmp, exe, shapes, _ = pools
    k = 0
    x = inputs(k, (2, 3, 13, 12), True)
    p = np.random.default_rng(7).standard_normal(shapes[k]).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "p.npy", p)
    outs = []
    for t in (1, 2):
        o = tmp_path / f"dx{t}.npy"
        run([exe, "run", f"g{k}", "--input", tmp_path / "x.npy", "--input", tmp_path / "p.npy", "--output", o,
             "--threads", str(t)])
        outs.append(np.load(o))
    assert outs[0].tobytes() == outs[1].tobytes()
