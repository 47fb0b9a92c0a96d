"""binary_cross_entropy's value and first and second derivatives (torch.autograd.grad
with create_graph) against PyTorch 1.13 (issue 27), float32 and float64. BCE is an
ops.def row (BCE, with BCE_GRAD for its d/dinput), so at and near the 1e-12 clamp its
derivatives are PyTorch's rules (FunctionsManual.cpp): d/dinput of d/dinput = g gO
(x^2 - 2xy + y) / ((x + 1e-12)^2 (1 - x + 1e-12)^2), d/dtarget of d/dinput = -g gO /
max(x (1 - x), 1e-12), d/dinput of d/dtarget = logit's derivative, -g gO / (x (1 - x))
(-inf at 0 and 1), d/dtarget of d/dtarget = 0. (Before the rows, ctc composed BCE from
primitives and gave 0, 0, 0 and -inf there.) In float32, targets of 1 with inputs near 1
are left out: PyTorch's x^2 - 2xy + y cancels to 0 there (x = 1 - 2^-20: 0, the
derivative is 1), a rounding of its formula's, not a rule; float64 has them.
"""
import numpy as np
import pytest
import torch

from ctc_testlib import CTC, load_module, run, run_entry

SRC = """import torch
import torch.nn.functional as F


def h(x, y):
    v = F.binary_cross_entropy(x, y, reduction='none')
    l = F.binary_cross_entropy(x, y, reduction='sum')
    gx, gy = torch.autograd.grad(l, (x, y), create_graph=True)
    hxx, hxy = torch.autograd.grad(gx.sum(), (x, y), create_graph=True)
    hyx, hyy = torch.autograd.grad(gy.sum(), (x, y), create_graph=True, allow_unused=True)
    hyy = torch.zeros_like(y) if hyy is None else hyy
    return v, gx, gy, hxx, hxy, hyx, hyy


example_inputs = {"h": (torch.zeros({n}, dtype={dt}), torch.zeros({n}, dtype={dt}))}
"""

INSIDE = [1e-7, 0.3, 0.5, 0.9, 1 - 2 ** -20, 0.999]
EDGES = [0.0, 1.0, 1e-13, 5e-13, 2e-12, 1e-10]


def second_order(tmp_path, xs, ys=(0.3, 0.7, 0.3, 0.0, 0.5, 0.2), dtype=np.float32):
    path = tmp_path / "model.py"
    path.write_text(SRC.replace("{n}", str(len(xs))).replace("{dt}", "torch." + np.dtype(dtype).name))
    mod = load_module(str(path))
    x, y = np.array(xs, dtype), np.array(ys, dtype)
    want = [t.detach().numpy() for t in mod.h(torch.from_numpy(x).requires_grad_(), torch.from_numpy(y).requires_grad_())]
    run([CTC, "build", path, "-o", tmp_path / "net", "--entry", "h"])
    got = run_entry(str(tmp_path), str(tmp_path / "net"), "h", [x, y], 7)
    bad = []
    for name, a, b in zip(("value", "gx", "gy", "hxx", "hxy", "hyx", "hyy"), got, want):
        same = (a == b) | (np.isnan(a) & np.isnan(b))
        with np.errstate(invalid="ignore"):
            close = np.isfinite(a) & np.isfinite(b) & (np.abs(a - b) <= 1e-6 + 1e-3 * np.abs(b))
        if not (same | close).all():
            bad.append(f"{name}: ctc {a}, torch {b}")
    return bad


def test_bce_second_derivatives_inside(tmp_path):
    assert not second_order(tmp_path, INSIDE)


def test_bce_second_derivatives_at_the_clamp(tmp_path):
    assert not second_order(tmp_path, EDGES)


def test_bce_second_derivatives_float64_grid(tmp_path):
    """Every pair of inputs at and around the clamp and targets 0, 0.3 and 1, in float64."""
    grid = [(x, y) for x in (0.0, 1e-13, 5e-13, 2e-12, 0.3, 1 - 1e-13, 1.0) for y in (0.0, 0.3, 1.0)]
    assert not second_order(tmp_path, [x for x, _ in grid], [y for _, y in grid], np.float64)
