"""Convolutions over tiles of the batch (codegen_c/linalg_c.c emit_conv2d_tiled):
the column matrices of S images side by side, one GEMM per tile and group;
depthwise ones by direct loops; stride-1 same-size ones (and stride-2 ones whose output is half
the input's size: the forward over the input's phases, the input gradient phase by phase) as
implicit GEMMs on AVX-512 and
AVX2 (the tiles in the other branch; the AVX2 one is forced with -march=haswell). Forward and gradients against PyTorch on ragged
tiles (a batch that is not a multiple of S), 1x1, stride, padding, dilation,
groups, depthwise and transposed convolutions; and the same bits whatever the
number of threads."""
import os
import re

import numpy as np
import pytest

from ctc_testlib import CTC, ROOT, compare, run, run_entry

# (name, N, C, H, W, O, (KH, KW), stride, padding, dilation, groups, transposed, output_padding)
# The C target's tiles hold up to 1 MiB of columns (ir_conv_slots):
# ragged: 16x3x3 over 22x25 outputs, 144 rows of 550 floats a image: S = 3, tiles 3, 3, 1
# groups_ragged: 144 rows of 16x16 outputs: S = 7, tiles 7 and 3, each over 4 groups
CASES = [
    ("ragged", 7, 16, 24, 48, 16, (3, 3), (1, 2), (1, 2), (2, 1), 1, False, 0),
    ("pointwise", 3, 8, 5, 7, 6, (1, 1), 1, 0, 1, 1, False, 0),
    ("one_by_one_stride2", 5, 8, 9, 9, 12, (1, 1), 2, 0, 1, 1, False, 0),
    ("stride2_pad", 6, 5, 11, 11, 7, (3, 3), 2, 1, 1, 1, False, 0),
    ("dilation", 4, 4, 12, 10, 6, (3, 3), 1, 2, 2, 1, False, 0),
    # padding wider than the image's columns reach: output columns that read only padding
    # on both sides (im2col/col2im's in-row span [lo, hi) empty or one column), stride 3
    ("wide_pad", 3, 3, 5, 3, 4, (3, 5), (1, 3), (2, 4), 1, 1, False, 0),
    ("wide_pad_stride1", 2, 4, 4, 2, 5, (2, 5), 1, (1, 3), 1, 1, False, 0),
    ("small_tiles", 9, 32, 4, 4, 24, (3, 3), 1, 1, 1, 1, False, 0),
    ("groups", 5, 6, 10, 10, 8, (3, 3), 1, 1, 1, 2, False, 0),
    ("groups_ragged", 10, 16, 16, 16, 16, (3, 3), 1, 1, 1, 4, False, 0),
    ("depthwise", 4, 6, 10, 10, 12, (3, 3), 2, 1, 1, 6, False, 0),
    ("depthwise_dilated", 3, 5, 9, 11, 5, (5, 3), 1, (2, 1), (1, 2), 5, False, 0),
    ("transposed", 3, 6, 7, 7, 4, (3, 3), 2, 1, 1, 2, True, 1),
    ("transposed_depthwise", 2, 4, 6, 5, 4, (3, 3), 2, 1, 1, 4, True, 0),
    # at least 32 output channels: the weight gradient as dW^T = columns g^T (ir_conv_wgrad_t);
    # 63 rows of 26x50 outputs a image: S = 3, tiles 3 and 2, dW^T accumulated over them
    ("wide_ragged", 5, 7, 26, 50, 40, (3, 3), 1, 1, 1, 1, False, 0),
    # stride 2, 33 output channels (dW^T's last column panel has one), the whole batch one tile
    ("wide_stride2", 7, 5, 23, 19, 33, (3, 3), 2, 1, 1, 1, False, 0),
    # a 3-channel stem with 32 outputs: few weights, but its forward is im2col + GEMM (K = 27), not the
    # direct loops, and so is its weight gradient (dW^T = columns g^T, a whole panel of 32 columns)
    ("stem", 4, 3, 20, 18, 32, (3, 3), 1, 1, 1, 1, False, 0),
    # stride 1, outputs the size of the inputs, images of a multiple of 16 pixels: with AVX-512 or AVX2 the
    # forward and the input gradient are implicit GEMMs (ctc_conv_pix_f32; 12x12: vectors of 16
    # pixels straddle rows; a batch of 5: a last panel of 16 pixels; 63 = 7 * 9 taps, 13 rows)
    ("implicit_5x5", 5, 24, 12, 12, 40, (5, 5), 1, 2, 1, 1, False, 0),
    ("implicit_odd", 3, 7, 8, 8, 13, (3, 3), 1, 1, 1, 1, False, 0),
    # 3x3, stride 1, padding 1, even sizes, at least 16 channels in and out: with AVX-512 the forward
    # and the input gradient by Winograd's F(2x2, 3x3) (ctc_conv_wino_f32): rows of 5 tiles (runs that
    # start inside a vector of 16), 105 tiles (a last panel of 9); 200 and 190 channels (blocks of 32
    # tiles: 32 + 13; 16 rows of 12, the last of 10); rows of 18 tiles (runs of 16 and 2), one tile row
    ("wino_ragged", 3, 17, 14, 10, 20, (3, 3), 1, 1, 1, 1, False, 0),
    ("wino_blocks", 3, 200, 6, 10, 190, (3, 3), 1, 1, 1, 1, False, 0),
    ("wino_wide", 2, 16, 2, 36, 16, (3, 3), 1, 1, 1, 1, False, 0),
    # rows of 24 tiles, 4 image rows: on AVX2 three runs of 8 that fill their vectors, the first at the
    # image's left edge, one inside, the last at its right edge (plain loads but for the edge's masked
    # vector, ctc_wino_ld_avx2's fm 1, 0, 2), each tile row with its top or its bottom row in the padding
    ("wino_runs", 2, 16, 4, 48, 16, (3, 3), 1, 1, 1, 1, False, 0),
    # images 8 and 16 columns wide (and small_tiles' 4): with AVX-512 groups of 16 tiles over whole
    # tile rows of several images (ctc_wino_in_narrow_f32): 3 tile rows an image (a group's rows
    # cross images), 60 tiles (a last group of 12); one tile row an image, 40 tiles (a last of 8)
    ("wino_narrow8", 5, 16, 6, 8, 20, (3, 3), 1, 1, 1, 1, False, 0),
    ("wino_narrow16", 5, 24, 2, 16, 16, (3, 3), 1, 1, 1, 1, False, 0),
    # 16 and 18 channels: blocks of 480 tiles, 224 a thread of 2 (each thread's blocks its own),
    # 4 images of 12 x 11 tile rows: 528 tiles, the first thread's second block 80 tiles
    ("wino_threads", 4, 16, 24, 22, 18, (3, 3), 1, 1, 1, 1, False, 0),
    # 19 and 25 channels: on AVX2 the products' last 7 rows as tiles of 4 and 3 (ctc_wino_rows_avx2:
    # 6 + 6 + 6 + 4 + 3 forward, 6 + 6 + 4 + 3 for the input gradient)
    ("wino_tails", 3, 19, 6, 8, 25, (3, 3), 1, 1, 1, 1, False, 0),
    # Winograd's shape but 4 tiles (one 4x4 image): fewer than IR_CONV_WINO_MIN_TILES, the implicit GEMM
    ("few_tiles", 1, 32, 4, 4, 32, (3, 3), 1, 1, 1, 1, False, 0),
    # stride 2, even images, outputs half their size of a multiple of 16 pixels: with AVX-512 or AVX2
    # the forward is an implicit GEMM over the input's phases (ctc_pix_phases_f32, ctc_pix st 2):
    # 3x3 (4 phases, taps at -1 and 0; 8x12 outputs: vectors straddle rows); 1x1 (one phase);
    # 2x2 without padding (4 phases, taps at 0); 5x3 (dh -1..1, dw -1..0); 9 images of 288 rows:
    # tiles of 8 images and 1 (the scratch of 3 images' columns holds 8 images' phases)
    ("phases_3x3", 5, 12, 16, 24, 20, (3, 3), 2, 1, 1, 1, False, 0),
    ("phases_1x1", 3, 16, 8, 8, 24, (1, 1), 2, 0, 1, 1, False, 0),
    ("phases_2x2", 4, 6, 8, 16, 10, (2, 2), 2, 0, 1, 1, False, 0),
    ("phases_5x3", 3, 5, 16, 8, 9, (5, 3), 2, (2, 1), 1, 1, False, 0),
    ("phases_tiles", 9, 32, 32, 32, 64, (3, 3), 2, 1, 1, 1, False, 0),
]


def _call(case, x, w, b):
    name, N, C, H, W, O, k, s, p, d, g, tr, op = case
    if tr:
        return f"F.conv_transpose2d({x}, {w}, {b}, stride={s!r}, padding={p!r}, output_padding={op!r}, groups={g}, dilation={d!r})"
    return f"F.conv2d({x}, {w}, {b}, stride={s!r}, padding={p!r}, dilation={d!r}, groups={g})"


def _shapes(case):
    name, N, C, H, W, O, k, s, p, d, g, tr, op = case
    xs = (N, C, H, W)
    ws = (C, O // g) + k if tr else (O, C // g) + k
    return xs, ws, (O,)


def _torch(case, x, w, b, pgrad=None):
    import torch
    import torch.nn.functional as F
    name, N, C, H, W, O, k, s, p, d, g, tr, op = case
    tx, tw, tb = (torch.from_numpy(a).requires_grad_() for a in (x, w, b))
    y = eval(_call(case, "tx", "tw", "tb"), {"F": F, "tx": tx, "tw": tw, "tb": tb})
    if pgrad is None:
        return y.detach().numpy()
    return [t.numpy() for t in torch.autograd.grad((y * torch.from_numpy(pgrad)).sum(), (tx, tw, tb))]


def _conv_file(cases, ex):
    """A user file with fwd_NAME(x, w, b) and grads_NAME(x, w, b, p) for each case (ex: the
    example_inputs entries before theirs); returns its text, ctc's --entry options and each
    case's output shape."""
    import torch
    import torch.nn.functional as F
    src = ["import torch", "import torch.nn.functional as F", ""]
    entries, outs = [], {}
    for case in cases:
        n = case[0]
        xs, ws, bs = _shapes(case)
        with torch.no_grad():
            ys = tuple(eval(_call(case, "x", "w", "b"), {"F": F, "x": torch.zeros(xs), "w": torch.zeros(ws),
                                                          "b": torch.zeros(bs)}).shape)
        outs[n] = ys
        src += [f"def fwd_{n}(x, w, b):", f"    return {_call(case, 'x', 'w', 'b')}", "",
                f"def grads_{n}(x, w, b, p):", f"    y = {_call(case, 'x', 'w', 'b')}",
                "    return torch.autograd.grad((y * p).sum(), (x, w, b))", ""]
        z = f"torch.zeros{xs}, torch.zeros{ws}, torch.zeros{bs}"
        ex = ex + [f'    "fwd_{n}": ({z}),', f'    "grads_{n}": ({z}, torch.zeros{ys}),']
        entries += ["--entry", f"fwd_{n}", "--entry", f"grads_{n}"]
    return "\n".join(src + ["example_inputs = {"] + ex + ["}", ""]), entries, outs


@pytest.fixture(scope="module")
def net(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("convb")
    text, entries, outs = _conv_file(CASES, ['    "forward": (torch.zeros(1),),'])
    path = tmp / "convs.py"
    path.write_text(text)
    exe = tmp / "net"
    run([CTC, "build", str(path), "-o", str(exe), *entries], timeout=900)
    return tmp, exe, outs


def _data(case, ys, seed):
    rng = np.random.default_rng(seed)
    xs, ws, bs = _shapes(case)
    return [rng.standard_normal(s).astype(np.float32) for s in (xs, ws, bs, ys)]


def check_case(tmp, exe, outs, case, where=""):
    """A case's forward and gradients from the program exe against PyTorch (also test_conv_neon.py's)"""
    n = case[0]
    x, w, b, p = _data(case, outs[n], len(n))
    (y,) = run_entry(tmp, exe, f"fwd_{n}", [x, w, b], 1)
    compare(f"{n} forward{where}", y, _torch(case, x, w, b), 1e-4, 1e-4)
    got = run_entry(tmp, exe, f"grads_{n}", [x, w, b, p], 3)
    for what, g, want in zip(("x", "w", "b"), got, _torch(case, x, w, b, p)):
        compare(f"{n} d/d{what}{where}", g, want, 1e-3, 1e-3)


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_conv_matches_torch(net, case):
    check_case(*net, case)


def test_tiles_are_one_gemm(net):
    """The ragged batch runs in tiles of 3 images, each one GEMM over 3 * 550 columns
    (forward, input gradient, weight gradient: dW^T = columns g^T from 32 output channels on);
    depthwise convolutions are direct loops."""
    tmp, exe, outs = net
    c = (tmp / "net.c").read_text()
    assert "for (int64_t n0 = 0; n0 < 7; n0 += 3) {   /* tiles of 3 images */" in c
    assert "ctc_matmul_f32(0, 0, 0, 16, ns * 550, 144," in c
    assert "ctc_matmul_f32(1, 0, 0, 144, ns * 550, 16," in c
    assert "ctc_matmul_f32(0, 1, n0 > 0, 16, 144, ns * 550," in c   # 16 output channels: dW = g columns^T
    assert "for (int64_t n0 = 0; n0 < 5; n0 += 3) {   /* tiles of 3 images */" in c
    assert "ctc_matmul_f32(0, 1, n0 > 0, 63, 40, ns * 1300," in c   # 40: dW^T = columns g^T
    assert "ctc_matmul_f32(0, 0, 0, 32, ns * 360, 27," in c   # the stem: a GEMM
    assert "ctc_matmul_f32(0, 1, n0 > 0, 27, 32, ns * 360," in c   # its weight gradient: dW^T = columns g^T
    assert "for (int64_t n0 = 0; n0 < 10; n0 += 7) {   /* tiles of 7 images */" in c
    assert re.search(r"ctc_dwconv_f32\(", c) and re.search(r"ctc_dwconv_bwd_weight_f32\(", c)
    # implicit GEMMs where the compiler targets AVX-512, the tiles as the other branch
    assert "ctc_conv_pix_f32(w, &s, 40, 600, conv, p, p + 256 < 720 ? p + 256 : 720);" in c
    assert "ctc_flip_w_f32(w, 24, 40, 25, r, r + 16 < 24 ? r + 16 : 24, x_grad_col);" in c   # taps reversed
    assert "ctc_conv_pix_f32(x_grad_col, &s, 24, 1000, x_grad, p, p + 256 < 720 ? p + 256 : 720);" in c
    assert "ctc_conv_pix_f32(w, &s, 13, 63, conv, p, p + 256 < 192 ? p + 256 : 192);" in c
    # stride 2: the forward over the input's phases, tiles of 8 images where the columns took 3
    assert "ctc_pix_phases_f32(x + (n0 + q / 32) * 32768, 32, 32, 32, 2, 2, q % 32, conv_col + q / 32 * 32768);" in c
    assert "const ctc_pix s = {conv_col, 32, 16, 16, 3, 3, 1, 1, 2};" in c
    assert "ctc_conv_pix_f32(w, &s, 64, 288, conv + n0 * 16384, p, p + 256 < ns * 256 ? p + 256 : ns * 256);" in c
    assert "const ctc_pix s = {conv_col, 16, 4, 4, 1, 1, 0, 0, 2};" in c   # 1x1: one phase
    assert "ctc_pix_phases_f32(x + (n0 + q / 16) * 1024, 16, 8, 8, 1, 1, q % 16, conv_col + q / 16 * 256);" in c
    # and the input gradient phase by phase: 3x3's phase (1, 1) has 2 x 2 taps (kh 2 and 0 at g's
    # rows i and i + 1); 1x1's only phase (0, 0) (have = 1u: the other three are zeros)
    assert "ctc_phase_w_f32(w, 12, 20, 3, 3, 1, 1, 1, 1, 2, 2, 0, 0, r, r1, x_grad_col + 1200);" in c
    assert "ctc_pix_unphase_f32(ps + q / 16 * 256, 8, 8, 768, 1u, q % 16, x_grad + (n0 + q / 16) * 1024);" in c
    assert "ctc_pix_unphase_f32(ps + q / 12 * 1152, 16, 24, 5760, 15u, q % 12, x_grad + (n0 + q / 12) * 4608);" in c


IMPLICIT = [c for c in CASES if c[0].startswith("implicit") or c[0].startswith("phases")]
WINO = [c for c in CASES if c[0].startswith("wino") or c[0] == "small_tiles"]


@pytest.fixture(scope="module")
def net_avx2(net):
    """The same file built for AVX2 without AVX-512 (ctc build's compiler wrapped to add
    -march=haswell after its -march=native): the AVX2 implicit GEMMs (ctc_conv_pix_f32 over
    ctc_gemm_avx2_f32's tiles, 16-pixel panels) and Winograd convolutions (8-lane transforms,
    ctc_gemm_tile16_avx2's tiles)."""
    tmp, exe, outs = net
    if os.uname().machine != "x86_64" or "avx2" not in open("/proc/cpuinfo").read().split():
        pytest.skip("an x86-64 CPU with AVX2")
    cc = tmp / "cc_haswell"
    cc.write_text('#!/bin/sh\nexec cc "$@" -march=haswell\n')
    cc.chmod(0o755)
    entries = [a for c in IMPLICIT + WINO for a in ("--entry", f"fwd_{c[0]}", "--entry", f"grads_{c[0]}")]
    exe2 = tmp / "net_avx2"
    run([CTC, "build", str(tmp / "convs.py"), "-o", str(exe2), "--cc", str(cc), *entries], timeout=900)
    macros = run(["cc", "-std=c11", "-march=haswell", "-D_POSIX_C_SOURCE=200809L",
                  f"-I{os.path.join(ROOT, 'runtime_min')}", "-E", "-dM", tmp / "net.c"]).stdout
    assert "#define CTC_CONV_PIX_f32 1" in macros and "#define CTC_GEMM_AVX2_f32 1" in macros
    assert "#define CTC_CONV_WINO_f32 1" in macros and "#define CTC_GEMM_AVX512_f32 1" not in macros
    return tmp, exe2, outs


@pytest.mark.parametrize("case", IMPLICIT + WINO, ids=[c[0] for c in IMPLICIT + WINO])
def test_implicit_avx2_matches_torch(net_avx2, case, monkeypatch):
    """The AVX2 implicit GEMMs and Winograd convolutions: forward and all gradients against
    PyTorch, and the same bits with 1 and 2 threads."""
    tmp, exe, outs = net_avx2
    n = case[0]
    x, w, b, p = _data(case, outs[n], len(n))
    (y,) = run_entry(tmp, exe, f"fwd_{n}", [x, w, b], 1)
    compare(f"{n} forward (AVX2)", y, _torch(case, x, w, b), 1e-4, 1e-4)
    got = {}
    for threads in ("1", "2"):
        monkeypatch.setenv("OMP_NUM_THREADS", threads)
        got[threads] = run_entry(tmp, exe, f"grads_{n}", [x, w, b, p], 3)
    for what, g, want in zip(("x", "w", "b"), got["1"], _torch(case, x, w, b, p)):
        compare(f"{n} d/d{what} (AVX2)", g, want, 1e-3, 1e-3)
    for g1, g2 in zip(got["1"], got["2"]):
        assert g1.tobytes() == g2.tobytes(), f"{n}: 1 and 2 threads differ"


@pytest.mark.parametrize("march", ["native", "haswell", "x86-64"])
def test_compiles_clean(net, march):
    """The generated C with warnings as errors, the implicit GEMMs' branch (AVX-512: native where
    the CPU has it; AVX2: haswell) and the tiles' (x86-64) each compiled (none leaves a variable
    or a function unused)."""
    tmp, exe, outs = net
    if os.uname().machine != "x86_64":
        pytest.skip("an x86-64 host")
    run(["cc", "-std=c11", "-O1", f"-march={march}", "-fopenmp", "-Wall", "-Wextra", "-Werror",
         "-D_POSIX_C_SOURCE=200809L", f"-I{os.path.join(ROOT, 'runtime_min')}", "-c", tmp / "net.c", "-o",
         tmp / f"net_{march}.o"], timeout=600)


def test_thread_count_does_not_change_results(net):
    """The same bits at any thread count. Winograd's weight gradient splits its work three ways:
    2 to 4 threads take rows of the transforms of their own (3: one, one and two rows; 4: a row
    each), others split each block's steps (5)."""
    tmp, exe, outs = net
    res = {}
    phases = [c for c in CASES if c[0].startswith("phases")]
    for case in [CASES[0], CASES[7], CASES[8], CASES[10], CASES[14], CASES[15], CASES[16], CASES[17], CASES[18]] + WINO + phases:
        n = case[0]
        arrays = _data(case, outs[n], 3)
        counts = ("1", "2", "3", "4", "5") if case in WINO else ("1", "2")
        for threads in counts:
            args = [exe, "run", f"grads_{n}"]
            for i, a in enumerate(arrays):
                np.save(tmp / f"t_{n}_{i}.npy", a)
                args += ["--input", tmp / f"t_{n}_{i}.npy"]
            for i in range(3):
                args += ["--output", tmp / f"t_{n}_{threads}_out{i}.npy"]
            run(args, env={**os.environ, "OMP_NUM_THREADS": threads})
            res[threads] = [np.load(tmp / f"t_{n}_{threads}_out{i}.npy") for i in range(3)]
            for a, b in zip(res["1"], res[threads]):
                assert a.tobytes() == b.tobytes(), f"{n}: 1 and {threads} threads differ"


@pytest.mark.parametrize("case", [c for c in CASES if c[0].startswith("phases")],
                         ids=[c[0] for c in CASES if c[0].startswith("phases")])
def test_phases_forward_threads(net, case, monkeypatch):
    """A stride-2 forward over the input's phases: the same bits at 1, 2 and 3 threads (each output
    element one call's sum, whatever the split of the pixel blocks and of the phases' copies)."""
    tmp, exe, outs = net
    n = case[0]
    x, w, b, p = _data(case, outs[n], 5)
    got = []
    for threads in ("1", "2", "3"):
        monkeypatch.setenv("OMP_NUM_THREADS", threads)
        got.append(run_entry(tmp, exe, f"fwd_{n}", [x, w, b], 1)[0])
    assert got[0].tobytes() == got[1].tobytes() == got[2].tobytes(), n


DW_FIRST = """import torch
import torch.nn as nn
import torch.nn.functional as F


class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.dw = nn.Conv2d(4, 4, 3, padding=1, groups=4)
        self.fc = nn.Linear(4 * 8 * 8, 3)

    def forward(self, x):
        return self.fc(F.relu(self.dw(x)).flatten(1))


model = M()
opt = torch.optim.SGD(model.parameters(), lr=0.1)


def train_step(x, y):
    opt.zero_grad()
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    return loss


example_inputs = {"forward": (torch.randn(2, 4, 8, 8),),
                  "train_step": (torch.randn(2, 4, 8, 8), torch.zeros(2, dtype=torch.long))}
"""


def test_depthwise_first_layer_compiles_clean(tmp_path):
    """A depthwise convolution whose input needs no gradient (the first layer): the
    program uses the forward and weight-gradient kernels only, and the unused input-
    gradient helper must not break a -Werror build."""
    src = tmp_path / "dw.py"
    src.write_text(DW_FIRST)
    run([CTC, "compile", src, "-o", tmp_path / "dw.c"])
    rt = os.path.join(os.path.dirname(CTC), "..", "runtime_min")
    run(["cc", "-std=c11", "-O1", "-Wall", "-Wextra", "-Werror", "-D_POSIX_C_SOURCE=200809L", f"-I{rt}", "-c",
         tmp_path / "dw.c", "-o", tmp_path / "dw.o"])


def test_winograd_calls(net):
    """The 3x3 stride-1 convolutions with 16 or more channels (and their input gradients, w's taps
    reversed; their weight gradients: ctc_conv_wino_wgrad_f32) call ctc_conv_wino_f32 (AVX-512 or AVX2) in the #ifdef branch, in blocks of tiles sized by their
    channels (ir_conv_wino_block: 16384 / (K + M) floats, in 32s); the 5x5, the odd-channel and the
    strided ones do not, nor the one of 4 tiles (few_tiles); --no-winograd writes none."""
    tmp, exe, outs = net
    c = (tmp / "net.c").read_text()
    assert "ctc_conv_wino_f32(x, w, 0, 3, 200, 6, 10, 190, 32, conv_col, conv);" in c
    assert re.search(r"ctc_conv_wino_f32\(\w+, w, 1, 3, 190, 6, 10, 200, 32, x_grad_col, x_grad\);", c)
    assert "ctc_conv_wino_f32(x, w, 0, 3, 17, 14, 10, 20, 416, conv_col, conv);" in c
    assert "ctc_conv_wino_f32(x, w, 0, 2, 16, 2, 36, 16, 512, conv_col, conv);" in c
    assert "ctc_conv_wino_wgrad_f32(x, grad__null__1, 3, 200, 6, 10, 190, 32, w_grad_col, w_grad);" in c
    assert not re.search(r"ctc_conv_wino_(wgrad_)?f32\(\w+, \w+, (\d, )?1, 32, 4, 4, 32,", c)
    assert len(re.findall(r"ctc_conv_wino_f32\(", c)) == 2 * len(WINO)
    assert len(re.findall(r"ctc_conv_wino_wgrad_f32\(", c)) == len(WINO)
    off = tmp / "net_nowino.c"
    run([CTC, "compile", str(tmp / "convs.py"), "-o", str(off), "--no-winograd",
         *[a for k in WINO for a in ("--entry", f"fwd_{k[0]}", "--entry", f"grads_{k[0]}")]], timeout=600)
    assert "ctc_conv_wino_f32(" not in off.read_text()


def _avx512():
    return os.uname().machine == "x86_64" and "avx512f" in open("/proc/cpuinfo").read().split()


@pytest.mark.parametrize("isa", ["native", "avx2"])
@pytest.mark.parametrize("case", WINO, ids=[c[0] for c in WINO])
def test_winograd_error_against_float64(request, case, isa):
    """Winograd's transforms add and halve before the products are summed, so its results are a few
    roundings from the direct sums: forward, input and weight gradients, their largest error against a float64
    run (relative to the largest element) within twice PyTorch's float32 one; AVX-512 (native, where
    the CPU has it) and AVX2."""
    if isa == "native" and not _avx512():
        pytest.skip("native is AVX-512 here only on a CPU with it")
    import torch
    tmp, exe, outs = request.getfixturevalue("net" if isa == "native" else "net_avx2")
    n = case[0]
    x, w, b, p = _data(case, outs[n], len(n))
    (y,) = run_entry(tmp, exe, f"fwd_{n}", [x, w, b], 1)
    dx, dw = run_entry(tmp, exe, f"grads_{n}", [x, w, b, p], 3)[:2]
    want32 = [_torch(case, x, w, b)] + _torch(case, x, w, b, p)[:2]
    prev = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        x64, w64, b64, p64 = (a.astype(np.float64) for a in (x, w, b, p))
        want64 = [_torch(case, x64, w64, b64)] + _torch(case, x64, w64, b64, p64)[:2]
    finally:
        torch.set_default_dtype(prev)
    for what, got, t32, t64 in zip(("forward", "d/dx", "d/dw"), (y, dx, dw), want32, want64):
        scale = np.abs(t64).max()
        ours, theirs = np.abs(got - t64).max() / scale, np.abs(t32 - t64).max() / scale
        print(f"{n} {what}: ctc {ours:.3g}, torch {theirs:.3g} (relative to the largest element)")
        assert ours <= 2 * theirs + 1e-7, f"{n} {what}: {ours:.3g} against PyTorch's {theirs:.3g}"


BLOCK32_CC = r"""#!/usr/bin/env python3
# cc, after setting every Winograd call's block of tiles in the model's C to one panel (32)
import os, re, sys
args = sys.argv[1:]
for i, a in enumerate(args):
    if a.endswith(".c") and not os.path.basename(a).startswith("rt_"):
        src = open(a).read()
        def one_panel(m):
            xs = m.group(2).split(", ")
            xs[8 if m.group(1) == "ctc_conv_wino_f32" else 7] = "32"
            return m.group(1) + "(" + ", ".join(xs) + ");"
        src, n = re.subn(r"(ctc_conv_wino_f32|ctc_conv_wino_wgrad_f32)\(([^;]*)\);", one_panel, src)
        if n:   # (not a probe of the build's)
            args[i] = a[:-2] + "_block32.c"
            open(args[i], "w").write(src)
os.execvp("cc", ["cc"] + args + EXTRA)
"""


@pytest.mark.parametrize("isa", ["native", "haswell"])
def test_winograd_block_does_not_change_results(tmp_path, isa, monkeypatch):
    """The convolutions take blocks of at most the plan's tiles, as many as fill half of the core's L2
    cache (ctc_wino_fit: sysconf), so the block depends on the machine; every sum is made the same way
    at any block of whole panels. The Winograd cases built with the plan's blocks and with blocks
    of one panel (32 tiles: many blocks where the plan's fill one): the same bits, forward and
    gradients, 1 and 2 threads; AVX-512 (native, where the CPU has it) and AVX2."""
    if os.uname().machine != "x86_64" or "avx2" not in open("/proc/cpuinfo").read().split():
        pytest.skip("an x86-64 CPU with AVX2")
    if isa == "native" and not _avx512():
        pytest.skip("native is AVX-512 here only on a CPU with it (the haswell case covers AVX2)")
    extra = ["-march=haswell"] if isa == "haswell" else []
    text, entries, outs = _conv_file(WINO, [])
    (tmp_path / "wino.py").write_text(text)
    exes = {}
    for kind in ("plan", "block32"):
        cc = tmp_path / f"cc_{kind}"
        if kind == "plan":
            cc.write_text('#!/bin/sh\nexec cc "$@"' + "".join(f" {e}" for e in extra) + "\n")
        else:
            cc.write_text(BLOCK32_CC.replace("EXTRA", repr(extra)))
        cc.chmod(0o755)
        exes[kind] = tmp_path / f"net_{kind}"
        run([CTC, "build", str(tmp_path / "wino.py"), "-o", str(exes[kind]), "--cc", str(cc), *entries], timeout=900)
    assert (tmp_path / "net_block32_block32.c").exists()
    for case in WINO:
        n = case[0]
        x, w, b, p = _data(case, outs[n], len(n))
        got = {}
        for kind, exe in exes.items():
            for threads in ("1", "2"):
                monkeypatch.setenv("OMP_NUM_THREADS", threads)
                got[kind, threads] = run_entry(tmp_path, exe, f"fwd_{n}", [x, w, b], 1) + \
                    run_entry(tmp_path, exe, f"grads_{n}", [x, w, b, p], 3)
        for key, arrays in got.items():
            for what, a, ref in zip(("forward", "d/dx", "d/dw", "d/db"), arrays, got["plan", "1"]):
                assert a.tobytes() == ref.tobytes(), f"{n} {what}: {key} differs from the plan's blocks"
        compare(f"{n} d/dw", got["block32", "1"][2], _torch(case, x, w, b, p)[1], 1e-3, 1e-3)


SMALL_RESNET = """import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.down = None
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        h = F.relu(self.bn1(self.conv1(x)))
        h = self.bn2(self.conv2(h))
        return F.relu(h + (x if self.down is None else self.down(x)))


class SmallResNet(nn.Module):
    def __init__(self, classes=10):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16), nn.ReLU())
        self.stage1 = Block(16, 16, 1)
        self.stage2 = Block(16, 32, 2)
        self.head = nn.Linear(32, classes)

    def forward(self, x):
        x = self.stage2(self.stage1(self.stem(x)))
        return self.head(F.adaptive_avg_pool2d(x, 1).flatten(1))


torch.manual_seed(0)
model = SmallResNet()
optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=5e-4)


def train_step(x, y):
    optimizer.zero_grad()
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()
    return loss


example_inputs = {"forward": (torch.randn(8, 3, 16, 16),),
                  "train_step": (torch.randn(8, 3, 16, 16), torch.randint(0, 10, (8,)))}
"""


@pytest.mark.parametrize("wino", [True, False], ids=["winograd", "no_winograd"])
def test_small_resnet_trains_like_torch(tmp_path, wino):
    """A user's CIFAR-style ResNet (BatchNorm, a residual block and a strided one with a 1x1
    shortcut, SGD with momentum and weight decay): three training steps against PyTorch's, each
    loss and then every state_dict tensor (running statistics included), with its 16- and 32-channel
    3x3 convolutions and their gradients by Winograd (ctc_conv_wino_f32 and its weight gradient in the
    C; the AVX-512 or AVX2 branch where this CPU has one) and with --no-winograd."""
    from ctc_testlib import load_module, st_write, state_dict_np, train_steps_match
    path = tmp_path / "small_resnet.py"
    path.write_text(SMALL_RESNET)
    exe = tmp_path / "net"
    opts = [] if wino else ["--no-winograd"]
    run([CTC, "build", str(path), "-o", str(exe), *opts], timeout=600)
    c = (tmp_path / "net.c").read_text()
    if wino:   # stage1's two convolutions and stage2's second: forward (also the run-time batch's
        # inference entry), input and weight gradients
        assert len(re.findall(r"ctc_conv_wino_f32\([^;]*, 0, 8, 16, 16, 16, 16, 512, ", c)) == 2
        assert len(re.findall(r"ctc_conv_wino_f32\([^;]*, 0, \(batch\), 16, 16, 16, 16, 512, ", c)) == 2
        assert re.search(r"ctc_conv_wino_f32\([^;]*, 1, 8, 32, 8, 8, 32, 256, ", c)
        assert len(re.findall(r"ctc_conv_wino_wgrad_f32\(", c)) == 3
    else:
        assert "ctc_conv_wino" not in c
    mod = load_module(str(path), "small_resnet_" + ("w" if wino else "n"))
    w = tmp_path / "w0.safetensors"
    st_write(w, state_dict_np(mod.model))
    rng = np.random.default_rng(3)
    batches = [(rng.standard_normal((8, 3, 16, 16)).astype(np.float32), rng.integers(0, 10, 8).astype(np.int64))
               for _ in range(3)]
    train_steps_match(str(tmp_path), str(exe), mod, str(w), batches, "small resnet")
