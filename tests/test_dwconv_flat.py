"""Stride-1 depthwise convolutions on the hosted C target (kernels.c's dwconv_flat_text, chosen
by linalg_c.c's dw_flat): bands of a zero-padded plane, each tap one loop over the band.

- Against PyTorch: forward, input and weight gradients of MobileNet's 3x3 on small planes, a
  channel multiplier of 2, 5x5, dilation, no padding, a 1x5 kernel, a plane wide enough for
  several bands, padding wider than the kernel's reach (its input gradient stays direct); and
  a 2x2 image under a 5x5 kernel (a padded plane 9 times the image) and strides 2, 3 and (2, 1),
  which stay direct.
- The forward and the input gradient are the direct kernels' sums in their order: a build whose
  flat calls are rewritten to the direct kernels (a wrapper cc) gives the same bits.
- The weight gradient adds in another order: its error against float64 is within PyTorch's.
- A tap in the padding is skipped, not multiplied by 0: an inf weight, or an inf in the input or
  the incoming gradient, gives PyTorch's infs and NaNs (the kernels fall back to the direct ones).
- float64 through the same kernels; 1 and 2 threads the same bytes."""
import re

import numpy as np
import pytest

from ctc_testlib import CTC, compare, run, run_entry
from test_conv_batched import _conv_file, _data, _torch

# (name, N, C, H, W, O, (KH, KW), stride, padding, dilation, groups, transposed, output_padding)
CASES = [
    ("dw7", 4, 24, 7, 7, 24, (3, 3), 1, 1, 1, 24, False, 0),
    ("dw14_mult2", 3, 6, 14, 14, 12, (3, 3), 1, 1, 1, 6, False, 0),
    ("dw5x5", 2, 8, 12, 10, 8, (5, 5), 1, 2, 1, 8, False, 0),
    ("dw_dilated", 3, 5, 11, 9, 5, (3, 3), 1, 2, 2, 5, False, 0),
    ("dw_valid", 2, 4, 9, 8, 4, (3, 3), 1, 0, 1, 4, False, 0),
    ("dw_1x5", 2, 3, 6, 13, 3, (1, 5), 1, (0, 2), 1, 3, False, 0),
    # 152 padded columns: forward bands of 24 rows (2 of them), the weight gradient's of 1 row
    ("dw_bands", 2, 3, 40, 150, 3, (3, 3), 1, 1, 1, 3, False, 0),
    # padding 3 around a 3x3 kernel: the input gradient's g would need padding -1 (direct)
    ("dw_wide_pad", 2, 4, 12, 10, 4, (3, 3), 1, 3, 1, 4, False, 0),
    # padding 4 under a 3x3 kernel: bands (of 23 rows forward, 1 for the weight gradient) that start
    # in the bottom padding, past the image's last row
    ("dw_pad_bands", 2, 2, 41, 150, 2, (3, 3), 1, 4, 1, 2, False, 0),
    # a 2x2 image under a 5x5 kernel with padding 2 (EfficientNet's last stages at 64x64): a padded
    # plane 9 times the image, the direct kernels (not flat)
    ("dw_tiny", 3, 6, 2, 2, 6, (5, 5), 1, 2, 1, 6, False, 0),
    # strides 2, 3 and (2, 1): the direct kernels (not flat)
    ("dw_s2", 3, 8, 14, 14, 8, (3, 3), 2, 1, 1, 8, False, 0),
    ("dw_s2_mult2", 2, 4, 9, 11, 8, (5, 3), 2, (2, 1), 1, 4, False, 0),
    ("dw_s3_dilated", 2, 5, 13, 10, 5, (3, 3), 3, 1, 2, 5, False, 0),
    ("dw_s21", 2, 3, 12, 9, 3, (3, 3), (2, 1), 1, 1, 3, False, 0),
]
DIRECT = ("dw_tiny", "dw_s2", "dw_s2_mult2", "dw_s3_dilated", "dw_s21")
NOT_FLAT = {("dw_wide_pad", "bwd_input"), ("dw_pad_bands", "bwd_input")} | {(n, op) for n in DIRECT for op in ("forward", "bwd_input", "bwd_weight")}

DIRECT_CC = r"""#!/usr/bin/env python3
# cc, after rewriting the model's calls of the flat depthwise kernels to the direct ones
import os, sys
args = sys.argv[1:]
MACRO = '''
#define CTC_DW_DIRECT(x, k, H, W, KH, KW, ph, pw, dh, dw, OH, OW, y) \\
  ctc_dwconv_f32(x, k, H, W, KH, KW, 1, 1, ph, pw, dh, dw, OH, OW, y)
#define CTC_DW_DIRECT_BWD_INPUT(g, k, M, H, W, KH, KW, ph, pw, dh, dw, OH, OW, dx) \\
  ctc_dwconv_bwd_input_f32(g, k, M, H, W, KH, KW, 1, 1, ph, pw, dh, dw, OH, OW, dx)
'''
for i, a in enumerate(args):
    if a.endswith(".c") and not os.path.basename(a).startswith("rt_"):
        src = open(a).read()
        if "  ctc_dwconv_flat_f32(" in src:   # (not a probe of the build's)
            src = src.replace("  ctc_dwconv_flat_f32(", "  CTC_DW_DIRECT(")
            src = src.replace("  ctc_dwconv_bwd_input_flat_f32(", "  CTC_DW_DIRECT_BWD_INPUT(")
            at = src.index("#define CTC_DW_BAND")
            args[i] = a[:-2] + "_direct.c"
            open(args[i], "w").write(src[:at] + MACRO + src[at:])
os.execvp("cc", ["cc"] + args)
"""


def _build(tmp, cases, cc=None):
    text, entries, outs = _conv_file(cases, [])
    path = tmp / "dw.py"
    path.write_text(text)
    exe = tmp / ("net_direct" if cc else "net")
    run([CTC, "build", str(path), "-o", str(exe), *entries, *(["--cc", str(cc)] if cc else [])], timeout=900)
    return exe, outs


@pytest.fixture(scope="module")
def net(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("dwflat")
    exe, outs = _build(tmp, CASES)
    return tmp, exe, outs


def _run(tmp, exe, case, outs):
    n = case[0]
    x, w, b, p = _data(case, outs[n], len(n))
    (y,) = run_entry(tmp, exe, f"fwd_{n}", [x, w, b], 1)
    return (x, w, b, p), [y] + run_entry(tmp, exe, f"grads_{n}", [x, w, b, p], 3)


def _torch64(case, x, w, b, p):
    import torch
    prev = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        a64 = [a.astype(np.float64) for a in (x, w, b, p)]
        return [_torch(case, *a64[:3])] + _torch(case, *a64)
    finally:
        torch.set_default_dtype(prev)


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_flat_matches_torch(net, case):
    """Forward and gradients against PyTorch in float32; each one's largest error against a
    float64 run (relative to the largest element) within twice PyTorch's float32 one."""
    tmp, exe, outs = net
    n = case[0]
    (x, w, b, p), got = _run(tmp, exe, case, outs)
    want32 = [_torch(case, x, w, b)] + _torch(case, x, w, b, p)
    want64 = _torch64(case, x, w, b, p)
    for what, g, t32, t64 in zip(("forward", "d/dx", "d/dw", "d/db"), got, want32, want64):
        compare(f"{n} {what}", g, t32, 1e-4, 1e-4)
        scale = np.abs(t64).max()
        ours, theirs = np.abs(g - t64).max() / scale, np.abs(t32 - t64).max() / scale
        assert ours <= 2 * theirs + 1e-7, f"{n} {what}: {ours:.3g} against PyTorch's {theirs:.3g}"


def test_flat_kernels_are_called(net):
    """Every stride-1 case's forward, input and weight gradient calls the flat kernels, but the
    input gradient whose padding exceeds the kernel's reach; the tiny and strided ones the direct kernels."""
    tmp, exe, outs = net
    entries = [a for c in CASES for a in ("--entry", f"fwd_{c[0]}", "--entry", f"grads_{c[0]}")]
    run([CTC, "compile", str(tmp / "dw.py"), "-o", str(tmp / "dw.c"), *entries])
    bodies = re.split(r"\n(?=int dw_\w+\()", (tmp / "dw.c").read_text())
    for case in CASES:
        n = case[0]
        fwd = next(b for b in bodies if b.startswith(f"int dw_fwd_{n}("))
        grads = next(b for b in bodies if b.startswith(f"int dw_grads_{n}("))
        for op, body, flat, direct in (("forward", fwd, "  ctc_dwconv_flat_f32(", "  ctc_dwconv_f32("),
                                       ("bwd_input", grads, "ctc_dwconv_bwd_input_flat_f32(", "ctc_dwconv_bwd_input_f32("),
                                       ("bwd_weight", grads, "ctc_dwconv_bwd_weight_flat_f32(", "ctc_dwconv_bwd_weight_f32(")):
            want = (n, op) not in NOT_FLAT
            assert (flat in body, direct in body) == (want, not want), (n, op)


def test_same_bits_as_direct_kernels(net, tmp_path):
    """The build whose flat forward and input-gradient calls run the direct kernels instead: the
    same bytes (the weight gradient, flat in both, likewise)."""
    tmp, exe, outs = net
    cc = tmp_path / "cc_direct"
    cc.write_text(DIRECT_CC)
    cc.chmod(0o755)
    direct, _ = _build(tmp_path, CASES, cc)
    assert (tmp_path / "net_direct_direct.c").exists()
    for case in CASES:
        _, flat = _run(tmp, exe, case, outs)
        _, ref = _run(tmp_path, direct, case, outs)
        for what, a, r in zip(("forward", "d/dx", "d/dw", "d/db"), flat, ref):
            assert a.tobytes() == r.tobytes(), f"{case[0]} {what}"


NONFINITE = """import torch
import torch.nn.functional as F

def grads(x, w, p):
    y = F.conv2d(x, w, stride=STRIDE, padding=1, groups=8)
    return [y] + list(torch.autograd.grad((y * p).sum(), (x, w)))

example_inputs = {"forward": (torch.zeros(1),),
                  "grads": (torch.zeros(2, 8, SIZE, SIZE), torch.zeros(8, 1, 3, 3), torch.zeros(2, 8, OUT, OUT))}
"""


@pytest.mark.parametrize("stride", [1, 2])
def test_padding_taps_are_skipped(tmp_path, stride):
    """inf in a kernel (channel 1), in an input's corner (channel 3) and in the incoming gradient's
    edge (channel 5): the outputs and gradients PyTorch gives, infs and NaNs where it has them and
    the finite values close; the other channels' results are those of finite data. Stride 1 (the
    flat kernels, 7x7 images) and 2 (the direct ones, 8x8)."""
    import torch
    size, out = (7, 7) if stride == 1 else (8, 4)
    (tmp_path / "nf.py").write_text(NONFINITE.replace("STRIDE", str(stride)).replace("SIZE", str(size))
                                    .replace("OUT", str(out)))
    exe = tmp_path / "nf"
    run([CTC, "build", str(tmp_path / "nf.py"), "-o", str(exe), "--entry", "grads"], timeout=600)
    rng = np.random.default_rng(3)
    x, w, p = (rng.standard_normal(s).astype(np.float32) for s in ((2, 8, size, size), (8, 1, 3, 3), (2, 8, out, out)))
    w[1, 0, 0, 2] = np.inf
    x[0, 3, 0, 0] = np.inf
    p[1, 5, out - 1, 3] = -np.inf
    got = run_entry(tmp_path, exe, "grads", [x, w, p], 3)
    tx, tw = torch.from_numpy(x).requires_grad_(), torch.from_numpy(w).requires_grad_()
    y = torch.nn.functional.conv2d(tx, tw, stride=stride, padding=1, groups=8)
    want = [y.detach().numpy()] + [t.numpy() for t in torch.autograd.grad((y * torch.from_numpy(p)).sum(), (tx, tw))]
    for what, g, t in zip(("forward", "d/dx", "d/dw"), got, want):
        assert np.array_equal(np.isnan(g), np.isnan(t)), f"{what}: NaNs where PyTorch has none, or none where it has"
        assert np.array_equal(np.isposinf(g), np.isposinf(t)) and np.array_equal(np.isneginf(g), np.isneginf(t)), what
        fin = np.isfinite(t)
        assert fin.sum() > 0.5 * t.size, what   # most values stay finite: only the taps in the image see the inf
        compare(what, g[fin], t[fin], 1e-4, 1e-4)


F64 = """import torch
import torch.nn.functional as F

def grads(x, w, p):
    y = F.conv2d(x, w, padding=1, groups=4)
    return [y] + list(torch.autograd.grad((y * p).sum(), (x, w)))

example_inputs = {"forward": (torch.zeros(1),),
                  "grads": (torch.zeros(2, 4, 9, 9, dtype=torch.float64), torch.zeros(8, 1, 3, 3, dtype=torch.float64),
                            torch.zeros(2, 8, 9, 9, dtype=torch.float64))}
"""


def test_float64_and_threads(tmp_path, monkeypatch):
    """float64 (a multiplier of 2) through the flat kernels: PyTorch's results within 1e-12; the
    float32 cases on 1 and 2 threads: the same bytes."""
    import torch
    (tmp_path / "f64.py").write_text(F64)
    exe = tmp_path / "f64"
    run([CTC, "build", str(tmp_path / "f64.py"), "-o", str(exe), "--entry", "grads"], timeout=600)
    src = run([CTC, "compile", str(tmp_path / "f64.py"), "-o", str(tmp_path / "f64.c"), "--entry", "grads"])
    assert src.returncode == 0 and "ctc_dwconv_bwd_weight_flat_f64(" in (tmp_path / "f64.c").read_text()
    rng = np.random.default_rng(5)
    x, w, p = (rng.standard_normal(s) for s in ((2, 4, 9, 9), (8, 1, 3, 3), (2, 8, 9, 9)))
    got = run_entry(tmp_path, exe, "grads", [x, w, p], 3)
    tx, tw = torch.from_numpy(x).requires_grad_(), torch.from_numpy(w).requires_grad_()
    y = torch.nn.functional.conv2d(tx, tw, padding=1, groups=4)
    want = [y.detach().numpy()] + [t.numpy() for t in torch.autograd.grad((y * torch.from_numpy(p)).sum(), (tx, tw))]
    for what, g, t in zip(("forward", "d/dx", "d/dw"), got, want):
        assert g.dtype == np.float64, what
        compare(what, g, t, 1e-12, 1e-12)
    tmp, exe32, outs = tmp_path, *_build(tmp_path, CASES[:3])
    for case in CASES[:3]:
        monkeypatch.setenv("OMP_NUM_THREADS", "1")
        _, one = _run(tmp, exe32, case, outs)
        monkeypatch.setenv("OMP_NUM_THREADS", "2")
        _, two = _run(tmp, exe32, case, outs)
        for what, a, b in zip(("forward", "d/dx", "d/dw", "d/db"), one, two):
            assert a.tobytes() == b.tobytes(), f"{case[0]} {what}"


SANITIZED = ("dw7", "dw14_mult2", "dw_bands", "dw_pad_bands", "dw_wide_pad")


def test_sanitized_build(net, tmp_path, monkeypatch):
    """The cases whose bands and paddings reach the buffers' edges, built with AddressSanitizer and
    UBSan (the bands' buffers live on the stack: a band that starts in the bottom padding once
    wrote before its buffer): forward and gradients run clean and give the plain build's bytes."""
    import subprocess
    probe = subprocess.run(["cc", "-fsanitize=address,undefined", "-x", "c", "-", "-o", "/dev/null"],
                           input="int main(void){return 0;}\n", capture_output=True, text=True)
    if probe.returncode != 0:
        pytest.skip("no ASan/UBSan here: " + probe.stderr[:200])
    tmp, exe, outs = net
    cases = [c for c in CASES if c[0] in SANITIZED]
    text, entries, _ = _conv_file(cases, [])
    (tmp_path / "dw.py").write_text(text)
    san = tmp_path / "net_san"
    run([CTC, "build", str(tmp_path / "dw.py"), "-o", str(san), *entries, "--cflags",
         "-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer"], timeout=900)
    monkeypatch.setenv("ASAN_OPTIONS", "detect_leaks=0")
    for case in cases:
        _, plain = _run(tmp, exe, case, outs)
        _, checked = _run(tmp_path, san, case, outs)
        for what, a, b in zip(("forward", "d/dx", "d/dw", "d/db"), plain, checked):
            assert a.tobytes() == b.tobytes(), f"{case[0]} {what}"
