"""The kernel IR (kernels/kir.h): the fused elementwise and row kernels as loops,
loads, stores, expressions and accumulations, which `ctc compile --emit kir`
prints and which the C renderer (codegen_c/render_c.c) and the CUDA renderer
(codegen_cuda/emit_cuda.c) both print, each its own way."""
import os
import re
import shutil
import subprocess

import numpy as np
import pytest
import torch

from ctc_testlib import CTC, build_ctc, compare, load_module, run, run_forward, st_write, state_dict_np
from cuda_testlib import NVCC, RT, emulated, run_env, rt_objects  # noqa: F401 (a fixture)

SRC = """
import torch
import torch.nn as nn

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.b = nn.Parameter(torch.randn(8))

    def forward(self, x):
        y = torch.tanh(x * 2.0 + self.b)
        return torch.softmax(y, dim=-1), y + 1.0
"""

BIG = """
import torch
import torch.nn as nn

class Net(nn.Module):
    def forward(self, x, z):
        return torch.exp(x) * 3.0 + 1.0, torch.softmax(z, dim=-1)
"""


@pytest.fixture(scope="module", autouse=True)
def _build():
    build_ctc()


def compile_to(tmp_path, src, out, *opts):
    p = tmp_path / "m.py"
    p.write_text(src)
    return run([CTC, "compile", str(p), "-o", str(tmp_path / out), *opts])


def test_emit_kir_shows_loops_loads_stores_and_accumulations(tmp_path):
    p = tmp_path / "m.py"
    p.write_text(SRC)
    out = run([CTC, "compile", str(p), "--input", "x=f32[4,8]", "--emit", "kir"]).stdout
    assert out.startswith("func forward\n"), out
    # one row kernel: the rows in parallel, per row a loop per reduction's operand
    assert re.search(r"^  kernel \d+: row over f32\[4,8\]\n    loop rows over i0<4 parallel\n", out, re.M), out
    assert len(re.findall(r"^      loop row over i1<8$", out, re.M)) == 3, out
    assert re.search(r"let %y\.\d+ = tanh\(%add\.\d+\)", out), out
    assert re.search(r"let %add\.\d+ = add\(%mul\.\d+, load %b\.\d+\[i1\]\)", out), out   # b broadcast over rows
    assert re.search(r"let %mul\.\d+ = mul\(load %x\.\d+\[i0\*8 \+ i1\], 2\)", out), out
    assert re.search(r"acc %max\.\d+ = init reduce_max", out) and re.search(r"acc %sum\.\d+ <- %exp\.\d+", out), out
    assert re.search(r"let %sub\.\d+ = sub\(rowbuf\(%y\.\d+\), %max\.\d+\)", out), out   # y kept per row
    assert re.search(r"store %softmax\.\d+\[i0\*8 \+ i1\] = %softmax\.\d+", out), out


def test_emit_kir_elementwise_kernel(tmp_path):
    p = tmp_path / "m.py"
    p.write_text(BIG)
    out = run([CTC, "compile", str(p), "--input", "x=f32[64,1024]", "--input", "z=f32[32,1024]",
               "--emit", "kir"]).stdout
    m = re.search(r"kernel \d+: elementwise over f32\[64,1024\]\n(( {4}.*\n)+)", out)
    assert m, out
    body = m.group(1)
    assert body.startswith("    loop space over i0<64 i1<1024 parallel vector\n"), body
    # inputs loaded first, then the ops; the result stored directly
    lines = [l.strip() for l in body.splitlines()[1:]]
    assert [l.split(" ")[0] for l in lines] == ["let", "let", "let", "store"], lines
    assert re.match(r"store %add\.\d+\[i0\*1024 \+ i1\] = add\(%mul\.\d+, 1\)", lines[-1]), lines


def test_emit_kernels_still_shows_the_schedule(tmp_path):
    p = tmp_path / "m.py"
    p.write_text(SRC)
    out = run([CTC, "compile", str(p), "--input", "x=f32[4,8]", "--emit", "kernels"]).stdout
    assert re.search(r"^  kernel \d+: row over f32\[4,8\], rows of 8, 3 loops per row$", out, re.M), out
    assert "loop rows" not in out


def test_unknown_emit_names_kir(tmp_path):
    p = tmp_path / "m.py"
    p.write_text(SRC)
    r = run([CTC, "compile", str(p), "--input", "x=f32[4,8]", "--emit", "loops"], check=False)
    assert r.returncode != 0 and "kir" in r.stderr, r.stderr


def locals_of(text):
    """The kernels' `const T name = expr;` lines that read no memory, nor an accumulator: the
    expressions both renderers print the same from the kernel IR (loads, stores and the
    reductions' last steps are each target's)."""
    text = text[text.index("/* kernel "):]   # after the helpers (ctc_exp_f32 ...)
    return sorted(set(l.strip() for l in text.splitlines()
                      if re.match(r"\s+const (float|double) \w+ = [^\[]*;$", l) and "_acc;" not in l))


def test_c_and_cuda_render_the_same_kernel(tmp_path):
    compile_to(tmp_path, SRC, "m.c", "--input", "x=f32[4,8]")
    compile_to(tmp_path, SRC, "m.cu", "--input", "x=f32[4,8]", "--target", "cuda")
    c, cu = (tmp_path / "m.c").read_text(), (tmp_path / "m.cu").read_text()
    ce, cue = locals_of(c), locals_of(cu)
    assert any("ctc_tanh_f32(" in l for l in ce), ce
    assert any(re.search(r"= ctc_exp_f32\(sub\w*\);", l) for l in ce), ce
    assert ce and ce == cue, (ce, cue)
    # the loops are each target's: C's row loops and j, CUDA's block per row and its threads
    assert re.search(r"for \(int64_t i0 = 0; i0 < (4|\(batch\)); i0\+\+\) \{", c) and "for (int64_t j = 0; j < 8; j++) {" in c
    assert "for (int64_t ctc_row = blockIdx.x; ctc_row < 4; ctc_row += gridDim.x) {" in cu
    assert "for (int64_t ctc_j = threadIdx.x, ctc_k = 0; ctc_j < 8; ctc_j += blockDim.x, ctc_k++) {" in cu
    # a per-row array: a row in C, this thread's elements on the GPU; the reductions' trees
    assert re.search(r"float y\w*_row\[8\];", c) and re.search(r"float y\w*_row\[1\] = \{0\};", cu)
    assert re.search(r"__shared__ float max\w*_sh\[32\];", cu) and re.search(r"__shared__ double sum\w*_sh\[32\];", cu)
    # loads: the same element through each target's indices
    assert "const float mul = (x[i0 * 8 + j] * 2.0f);" in c
    assert "const float mul = (x[ctc_row * 8 + ctc_j] * 2.0f);" in cu


def test_profile_regions_come_from_the_renderer(tmp_path):
    """--profile: the kernel IR's parallel loops are written as regions whose
    threads report their shares (a renderer option), no marker is left behind."""
    opts = ["--input", "x=f32[64,1024]", "--input", "z=f32[32,1024]"]
    compile_to(tmp_path, BIG, "p.c", *opts, "--profile")
    compile_to(tmp_path, BIG, "m.c", *opts)
    prof, plain = (tmp_path / "p.c").read_text(), (tmp_path / "m.c").read_text()
    assert re.search(r"^  CTC_OMP_FOR_SIMD\n  for \(int64_t i = 0; i < (65536|\(1024 \* batch\)); i\+\+\) \{", plain, re.M), plain
    m = re.search(r"^    CTC_PROF_PARALLEL\n    \{\n      const double ctc_thread_t0 = ctc_prof_now\(\);\n"
                  r"      CTC_PROF_FOR_SIMD\n      for \(int64_t i = 0; i < (65536|\(1024 \* batch\)); i\+\+\) \{\n(.*?\n)"
                  r"      \}\n      ctc_prof_thread\(m->prof, &ctc_prof_forward\[\d\], ctc_prof_thread_num\(\), ctc_thread_t0\);\n"
                  r"    \}\n", prof, re.M | re.S)
    assert m, prof
    # the row kernel (32 rows of 1024): its row loop likewise
    assert re.search(r"CTC_PROF_PARALLEL\n    \{\n.*\n      CTC_PROF_FOR\n      for \(int64_t i0 = 0; i0 < 32; i0\+\+\) \{", prof)
    assert not re.search(r"^\s*CTC_OMP_FOR", prof, re.M)


# Data-movement ops as kernel IR (kernels/kir_ops.c): pad, upsample and gather a thread per
# result element, cumsum and argmax a thread per fiber along their axis.
DATAOPS = """
import torch
import torch.nn as nn
import torch.nn.functional as F

class Net(nn.Module):
    def forward(self, x, i):
        h = F.pad(F.pad(x, (1, 1, 1, 0), mode="reflect"), (0, 0, 1, 0))
        h = F.interpolate(h, scale_factor=2.0, mode="bilinear", align_corners=False)
        h = torch.cumsum(h, dim=-1)
        return h, torch.argmax(h, dim=1), torch.gather(h, 3, i)
"""


def serial_loop(code, op, var):
    """The body of the op's first serial loop `for (int64_t var = ...) {`, dedented."""
    lines = code.splitlines()
    at = next(k for k, l in enumerate(lines) if re.match(r"\s*/\* m\.py:\d+  " + re.escape(op), l))
    head = next(k for k in range(at, len(lines)) if re.match(rf"\s*for \(int64_t {var} = ", lines[k]))
    ind = len(lines[head]) - len(lines[head].lstrip())
    end = next(k for k in range(head + 1, len(lines)) if lines[k] == " " * ind + "}")
    return lines[head].strip(), [l[ind:] for l in lines[head + 1:end]]


def test_scan_and_argmax_kernel_ir_rendered_by_both_targets(tmp_path):
    """cumsum and argmax are kernel IR: a parallel loop over the fibers along the axis and a
    serial loop along it, carrying variables (a running sum in double; the extreme so far
    and its index). C writes the fibers as loops (OpenMP when large enough, with --profile a
    region reporting each thread's share), CUDA as a thread per fiber; the serial loop's
    body is the same text in both, up to the loop variables. An argmax along an axis that is
    not the last is, for C (and `--emit kir`), the last axis's fibers as lanes inside the
    serial loop (its order keys' maximum so far and its position per lane); CUDA keeps a
    thread per fiber."""
    opts = ["--input", "x=f32[2,3,8,8]", "--input", "i=i64[2,3,20,2]"]
    p = tmp_path / "m.py"
    p.write_text(DATAOPS)
    kir = run([CTC, "compile", str(p), *opts, "--emit", "kir"]).stdout
    assert re.search(r"^  kernel \d+: cumsum over f32\[2,3,20,20\]\n    loop space over i0<2 i1<3 i2<20 parallel\n"
                     r"      var \$acc \(sum\) = 0\n      loop serial over i3<20\n"
                     r"        \$acc = \(\$acc \+ load %h\w*\.\d+\[i0\*1200 \+ i1\*400 \+ i2\*20 \+ i3\]\)\n"
                     r"        store %h\w*\.\d+\[i0\*1200 \+ i1\*400 \+ i2\*20 \+ i3\] = f32\(\$acc\)\n", kir, re.M), kir
    # argmax along axis 1: the fibers are the other axes, the serial loop runs along axis 1, the
    # last axis's fibers (one tile of 20) its lanes
    assert re.search(r"^  kernel \d+: argmax over f32\[2,20,1,3,20\]\n    loop space over i0<2 i1<20 i2<1 parallel\n"
                     r"      var \$top\[20\] = 0\n      var \$at\[20\] = 0\n      loop serial over i3<3\n"
                     r"        loop lanes over i4<20 vector\n"
                     r"          var \$key = key\(load %h\w*\.\d+\[i0\*1200 \+ i1\*20 \+ i2\*20 \+ i3\*400 \+ i4\]\)\n"
                     r"          var \$take = \(\(i3 == 0\) \|\| \(\$key > \$top\)\)\n", kir, re.M), kir
    compile_to(tmp_path, DATAOPS, "m.c", *opts)
    compile_to(tmp_path, DATAOPS, "m.cu", *opts, "--target", "cuda")
    c, cu = (tmp_path / "m.c").read_text(), (tmp_path / "m.cu").read_text()
    # cumsum: the 120 fibers one C loop (contiguous), 120 CUDA threads
    ch, cb = serial_loop(c, "cumsum(", "k")
    uh, ub = serial_loop(cu, "cumsum(", "ctc_k")
    assert ch == "for (int64_t k = 0; k < 20; k++) {" and uh == "for (int64_t ctc_k = 0; ctc_k < 20; ctc_k++) {", (ch, uh)
    assert re.search(r"for \(int64_t i = 0; i < (120|\(60 \* batch\)); i\+\+\) \{\n\s+double acc\w* = 0;\n\s+for \(int64_t k", c), c
    assert re.search(r"/\* its kernel IR: a thread per fiber along axis 3 \(grid-stride\) \*/\n.*\n.*\n.*\n.*cumsum\(h\w*\).*\n"
                     r"\s+for \(int64_t ctc_i = \(int64_t\)blockIdx\.x \* blockDim\.x \+ threadIdx\.x; ctc_i < 120;", cu), cu
    assert [re.sub(r"\bi\b", "ctc_i", re.sub(r"\bk\b", "ctc_k", l)) for l in cb] == ub and len(cb) == 2, (cb, ub)
    assert re.fullmatch(r"  acc\w* = acc\w* \+ h\w*\[ctc_i \* 20 \+ ctc_k\];", ub[0]), ub
    # argmax along axis 1: C's fibers i0 < 2, i1 < 20, the lanes j < 20 inside the serial loop;
    # CUDA's a thread per fiber from ctc_i
    ch, cb = serial_loop(c, "argmax(", "k")
    uh, ub = serial_loop(cu, "argmax(", "ctc_k")
    assert ch == "for (int64_t k = 0; k < 3; k++) {", ch
    assert cb[0] == "  CTC_OMP_SIMD" and cb[1] == "  for (int64_t j = 0; j < 20; j++) {", cb
    assert re.fullmatch(r"    int32_t key\w* = ctc_key_f32\(h\w*\[i0 \* 1200 \+ i1 \* 20 \+ k \* 400 \+ j\], 1\);", cb[2]), cb
    assert re.fullmatch(r"  float v\w* = h\w*\[\(ctc_i / 400\) \* 1200 \+ \(ctc_i / 20 % 20\) \* 20 \+ \(ctc_i % 20\)"
                        r" \+ ctc_k \* 400\];", ub[0]), ub
    assert "  if (ctc_k == 0 || (v" in ub[1] and "&& !isnan(mx" in ub[1], ub
    # large enough for threads: OpenMP on the fibers' loop; --profile, a region written as such
    opts = ["--input", "x=f32[256,3,8,8]", "--input", "i=i64[256,3,20,2]"]
    compile_to(tmp_path, DATAOPS, "big.c", *opts)
    compile_to(tmp_path, DATAOPS, "prof.c", *opts, "--profile")
    big, prof = (tmp_path / "big.c").read_text(), (tmp_path / "prof.c").read_text()
    assert re.search(r"^  CTC_OMP_FOR\n  for \(int64_t i = 0; i < (15360|\(60 \* batch\)); i\+\+\) \{\n    double acc", big, re.M)
    assert re.search(r"^    CTC_PROF_PARALLEL\n    \{\n      const double ctc_thread_t0 = ctc_prof_now\(\);\n"
                     r"      CTC_PROF_FOR\n      for \(int64_t i = 0; i < (15360|\(60 \* batch\)); i\+\+\) \{\n(.*\n)*?      \}\n"
                     r"      ctc_prof_thread\(m->prof, &ctc_prof_forward\[\d+\], ctc_prof_thread_num\(\), ctc_thread_t0\);",
                     prof, re.M)
    assert not re.search(r"^\s*CTC_OMP_FOR", prof, re.M)


def store_of(code, op):
    """The store statement of the op's kernel (the first `y[...] = ...;` after its comment)."""
    at = re.search(r"/\* m\.py:\d+  " + re.escape(op), code).end()
    return re.compile(r"^\s*(\w+\[[^\n]*\] = [^\n]*);$", re.M).search(code, at).group(1)


def test_data_movement_kernel_ir_rendered_by_both_targets(tmp_path):
    """pad, bilinear upsample and gather are kernel IR (`--emit kir`: one parallel loop over
    the result, a load at a computed offset): C renders it as a loop per axis, CUDA as a
    thread per element, and the load is the same expression of the axes in both."""
    opts = ["--input", "x=f32[2,3,8,8]", "--input", "i=i64[2,3,20,2]"]
    p = tmp_path / "m.py"
    p.write_text(DATAOPS)
    kir = run([CTC, "compile", str(p), *opts, "--emit", "kir"]).stdout
    assert re.search(r"^  kernel \d+: pad over f32\[2,3,9,10\]\n    loop space over i0<2 i1<3 i2<9 i3<10 parallel\n"
                     r"      store %pad\.\d+\[i0\*270 \+ i1\*90 \+ i2\*10 \+ i3\] = load %x\.\d+\[.*select\(\(i2 < 1\)", kir, re.M), kir
    assert re.search(r"^  kernel \d+: upsample over f32\[2,3,20,20\]\n    table uh0 i64\[20\]\n", kir, re.M), kir
    assert re.search(r"^  kernel \d+: gather over f32\[2,3,20,2\]\n    loop space over i0<2 i1<3 i2<20 i3<2 parallel\n", kir, re.M), kir
    compile_to(tmp_path, DATAOPS, "m.c", *opts)
    compile_to(tmp_path, DATAOPS, "m.cu", *opts, "--target", "cuda")
    c, cu = (tmp_path / "m.c").read_text(), (tmp_path / "m.cu").read_text()
    for op, dims in [("pad(x) reflect", (2, 3, 9, 10)), ("pad(pad) constant", (2, 3, 10, 10)),
                     ("upsample(", (2, 3, 20, 20)), ("gather(", (2, 3, 20, 2))]:
        n = 1
        for d in dims:
            n *= d
        cs, us = store_of(c, op), store_of(cu, op)
        # C: a loop per axis (none parallel at this size); CUDA: a thread per element
        lines = c[re.search(r"/\* m\.py:\d+  " + re.escape(op), c).end():].splitlines()[1:]
        loops = [l.strip() for l in lines[:60] if l.strip().startswith("for (")]
        assert [re.match(r"for \(int64_t (i\d) = 0; ", l).group(1) for l in loops[:4]] == ["i0", "i1", "i2", "i3"], (op, loops)
        assert re.search(rf"for \(int64_t ctc_i = \(int64_t\)blockIdx\.x \* blockDim\.x \+ threadIdx\.x; ctc_i < {n};", cu), op
        assert us.split(" = ")[0].endswith("[ctc_i]"), (op, us)
        # the value stored: C's expression of i0..i3 is CUDA's of ctc_i's coordinates
        inner = [dims[1] * dims[2] * dims[3], dims[2] * dims[3], dims[3], 1]
        axis = [f"(ctc_i / {inner[0]})", f"(ctc_i / {inner[1]} % {dims[1]})", f"(ctc_i / {inner[2]} % {dims[2]})",
                f"(ctc_i % {dims[3]})"]
        rhs = re.sub(r"\bi([0-3])\b", lambda m: axis[int(m.group(1))], cs.split(" = ", 1)[1])
        rhs = re.sub(r"\b(uh0|uw0|uh1|uw1|lh0|lh1|lw0|lw1)_\d+\b", r"\1", rhs)   # the tables' names in the file
        assert rhs == re.sub(r"\b(uh0|uw0|uh1|uw1|lh0|lh1|lw0|lw1)_\d+\b", r"\1", us.split(" = ", 1)[1]), (op, rhs, us)


# Scans, arg-reductions and scatters along an axis (a thread per fiber): floats and integers,
# forward and reversed (the VJP of a cumsum), NaNs and ties for argmax/argmin, a scatter-add
# whose src covers only some fibers, into a base broadcast along the batch, and 1-D operands
# (a single fiber).
ALONG = """
import torch
import torch.nn as nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.b = nn.Parameter(torch.randn(7, 5))

    def forward(self, x, n, i, s):
        y = torch.cumsum(x, dim=1)
        r = torch.flip(torch.cumsum(torch.flip(x, [2]), dim=2), [2])
        z = torch.cumsum(n, dim=0)
        a = torch.argmax(x, dim=2)
        b = torch.argmin(x, dim=0, keepdim=True)
        c = torch.argmax(n, dim=1)
        e = self.b.expand(4, 7, 5).scatter_add(1, i, s)
        return y, r, z, a, b, c, e, x.argmax(), torch.cumsum(s.reshape(-1), 0)   # no fiber axes: one fiber
"""


def along_inputs():
    rng = np.random.default_rng(5)
    x = rng.standard_normal((4, 6, 5)).astype(np.float32)
    x[1, 2, 3] = x[2, :, 1] = np.nan              # a NaN wins over numbers, the first NaN over later ones
    x[3, 4, :] = 1.5                              # ties: the first index
    n = rng.integers(-3, 4, (6, 3)).astype(np.int64)
    n[:, 1] = 2                                   # ties among integers
    i = rng.integers(0, 7, (4, 3, 2)).astype(np.int64)
    s = rng.standard_normal((4, 3, 2)).astype(np.float32)
    return [x, n, i, s]


def same(name, got, want):
    """Integers equal; floats close (rtol 1e-5), NaN where PyTorch has NaN."""
    assert got.dtype == want.dtype and got.shape == want.shape, (name, got.dtype, want.dtype, got.shape, want.shape)
    if got.dtype == np.int64:
        assert (got == want).all(), (name, got, want)
        return
    nan = np.isnan(want)
    assert (np.isnan(got) == nan).all(), (name, got, want)
    compare(name, got[~nan], want[~nan], 1e-5, 1e-6)


ALONG_SPECS = ["--input", "x=f32[4,6,5]", "--input", "n=i64[6,3]", "--input", "i=i64[4,3,2]", "--input", "s=f32[4,3,2]"]


def test_along_an_axis_values_match_torch(tmp_path):
    """The C target's cumsum, argmax/argmin and scatter_add (kernel IR) against PyTorch."""
    p = tmp_path / "along.py"
    p.write_text(ALONG)
    torch.manual_seed(0)
    mod = load_module(str(p), "kir_along_c")
    model = mod.Net()
    with torch.no_grad():
        want = [t.numpy() for t in model(*map(torch.from_numpy, along_inputs()))]
    got = run_forward(str(tmp_path), str(p), model, along_inputs(), ALONG_SPECS)
    assert len(got) == len(want) == 9
    for k, (g, w) in enumerate(zip(got, want)):
        same(f"output {k}", g, w)


# A cumsum along an axis that is not the last: on CPU targets the last axis's fibers run as
# vector lanes inside the serial loop (tiles of up to 64, the running sums an array), so that
# each step reads consecutive elements; each fiber's sum in the same order as PyTorch's.
LANES = """
import torch
import torch.nn as nn


class Net(nn.Module):
    def forward(self, x):
        n = (x * 4).long()
        return (torch.cumsum(x, 0), torch.cumsum(x, dim=1), x.double().cumsum(1), torch.cumsum(n, 0),
                torch.flip(torch.cumsum(torch.flip(x, [0]), 0), [0]), torch.cumsum(x, 2))
"""


def test_cumsum_along_a_leading_axis_runs_lanes(tmp_path):
    """cumsum along axes 0 and 1 of [8, 33, 130] (130's lanes: tiles of 26), reversed, in float,
    double and int64: PyTorch's values bit for bit (float sums in double, in the same order); the C
    loop over the lanes is inside the serial one, the last axis's cumsum is a thread per fiber as
    before, and `--emit kir` shows the lanes; the CUDA target keeps a thread per fiber."""
    p = tmp_path / "m.py"
    p.write_text(LANES)
    spec = ["--input", "x=f32[8,33,130]"]
    kir = run([CTC, "compile", str(p), *spec, "--emit", "kir"]).stdout
    assert re.search(r"^    loop space over i0<33 i1<5 parallel\n      var \$acc\[26\] \(sum\) = 0\n"
                     r"      loop serial over i2<8\n        loop lanes over i3<26 vector\n", kir, re.M), kir
    run([CTC, "compile", str(p), *spec, "-o", tmp_path / "m.c"])
    c = (tmp_path / "m.c").read_text()
    lanes = re.findall(r"for \(int64_t k = (?:0|7|32); k (?:<|>=) (?:8|33|0); k(?:\+\+|--)\) \{\n\s+CTC_OMP_SIMD\n"
                       r"\s+for \(int64_t j = 0; j < 26; j\+\+\) \{\n\s+acc\w*\[j\] = acc\w*\[j\] \+ ", c)
    assert len(lanes) == 5, c
    assert re.search(r"for \(int64_t k = 0; k < 130; k\+\+\) \{\n\s+acc\w* = acc\w* \+ ", c), c
    run([CTC, "compile", str(p), *spec, "--target", "cuda", "-o", tmp_path / "m.cu"])
    assert "[j]" not in (tmp_path / "m.cu").read_text()
    model = load_module(str(p), "kir_lanes").Net()
    x = np.random.default_rng(3).standard_normal((8, 33, 130)).astype(np.float32)
    with torch.no_grad():
        want = [t.numpy() for t in model(torch.from_numpy(x))]
    got = run_forward(str(tmp_path), str(p), model, [x], spec)
    assert len(got) == len(want) == 6
    for k, (g, w) in enumerate(zip(got, want)):
        assert g.dtype == w.dtype and g.shape == w.shape and np.array_equal(g, w), (k, g.dtype, w.dtype)


# argmax and argmin along the last axis on CPU targets: two loops along the row over an integer
# order key of each element (the key's extreme, then its first position), which vectorise.
ROWMAX = """
import torch
import torch.nn as nn


class Net(nn.Module):
    def forward(self, x, d, n):
        v, i = x.max(-1)
        return (v, i, x.argmin(dim=1), torch.min(x, 1)[1], d.argmax(-1), d.argmin(-1), n.argmax(1), n.argmin(1),
                x.argmax())
"""


def same_bits_as_torch(tmp_path, p, name, ins, spec, nout):
    """The program's forward outputs on ins equal PyTorch's, dtype, shape and bits (NaN where NaN)."""
    model = load_module(str(p), name).Net()
    want = [t.numpy() for t in model(*map(torch.from_numpy, ins))]
    got = run_forward(str(tmp_path), str(p), model, ins, spec)
    assert len(got) == len(want) == nout
    for k, (g, w) in enumerate(zip(got, want)):
        assert g.dtype == w.dtype and g.shape == w.shape, (k, g.dtype, w.dtype, g.shape, w.shape)
        assert np.array_equal(g, w, equal_nan=g.dtype.kind == "f"), (k, g, w)

def test_argmax_along_the_last_axis_vectorises(tmp_path):
    """Rows with a NaN (of either sign), several NaNs, -0 and +0 tied, infinities, all equal, and
    random rows of 1,000: PyTorch's indices and values, float, double and int64; the C's loops
    over the rows are integer reductions GCC vectorises."""
    p = tmp_path / "m.py"
    p.write_text(ROWMAX)
    spec = ["--input", "x=f32[8,1000]", "--input", "d=f64[8,1000]", "--input", "n=i64[8,1000]"]
    run([CTC, "compile", str(p), *spec, "-o", tmp_path / "m.c"])
    c = (tmp_path / "m.c").read_text()
    assert "ctc_key_f32(" in c and "ctc_key_f64(" in c, c
    if shutil.which("gcc"):
        r = subprocess.run(["gcc", "-std=c11", "-O3", "-march=haswell", "-fno-trapping-math", "-fopenmp",
                            f"-I{os.path.join(os.path.dirname(CTC), '..', 'runtime_min')}", "-fopt-info-vec-optimized",
                            "-c", str(tmp_path / "m.c"), "-o", str(tmp_path / "m.o")], capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        lines = c.splitlines()
        vec = {int(m.group(1)) for m in re.finditer(r"m\.c:(\d+):\d+: optimized: loop vectorized", r.stderr)}
        rows = [k + 1 for k, l in enumerate(lines) if re.match(r"\s+for \(int64_t k = 0; k < 1000; k\+\+\)", l)]
        assert len(rows) >= 12 and set(rows) <= vec, (rows, sorted(vec), r.stderr)   # 2 loops a row argmax
    rng = np.random.default_rng(7)
    x = rng.standard_normal((8, 1000)).astype(np.float32)
    x[0, 17] = np.nan
    x[1, [5, 900]] = np.nan
    x[1, 3] = np.inf
    x[2] = 0.0
    x[2, ::3] = -0.0
    x[3, [10, 20]] = np.inf
    x[3, [30, 40]] = -np.inf
    x[4] = 2.5
    x[5, 999] = -np.float32(np.nan)   # a NaN with the sign bit set
    x[6, 0] = -np.inf
    d = x.astype(np.float64) * 3
    n = rng.integers(-5, 6, (8, 1000)).astype(np.int64)
    same_bits_as_torch(tmp_path, p, "kir_rowmax", [x, d, n], spec, 9)


# ... and along an axis that is not the last (a segmentation's argmax over the classes): the last
# axis's fibers as lanes inside the serial loop, each lane's best key and position.
CHANMAX = """
import torch
import torch.nn as nn


class Net(nn.Module):
    def forward(self, x, d, n):
        return (x.argmax(dim=1), x.argmin(1, keepdim=True), torch.max(x, 0)[1], d.argmax(2), n.argmin(1),
                x.max(dim=1)[0])
"""


def test_argmax_along_a_leading_axis_runs_lanes(tmp_path):
    """[3, 6, 5, 10] along axes 1, 0 and 2 with NaNs of either sign (the first wins), ties (the first),
    -0 against +0 and infinities, float, double and int64: PyTorch's indices; the C's lanes."""
    p = tmp_path / "m.py"
    p.write_text(CHANMAX)
    spec = ["--input", "x=f32[3,6,5,10]", "--input", "d=f64[3,6,5,10]", "--input", "n=i64[3,6,10]"]
    kir = run([CTC, "compile", str(p), *spec, "--emit", "kir"]).stdout
    assert re.search(r"^  kernel \d+: argmax over f32\[3,5,1,6,10\]\n    loop space over i0<3 i1<5 i2<1 parallel\n"
                     r"      var \$top\[10\] = 0\n      var \$at\[10\] = 0\n      loop serial over i3<6\n"
                     r"        loop lanes over i4<10 vector\n", kir, re.M), kir
    rng = np.random.default_rng(11)
    x = rng.standard_normal((3, 6, 5, 10)).astype(np.float32)
    x[0, 2, 1, 3] = np.nan
    x[0, 4, 1, 3] = -np.float32(np.nan)
    x[1, :, 2, 4] = 0.0
    x[1, 1::2, 2, 4] = -0.0
    x[2, 3, 0, :] = np.inf
    x[2, 5, 0, :5] = np.inf
    x[2, :, 4, 7] = -np.inf
    x[:, :, 3, 9] = 1.25
    d = x.astype(np.float64) * 2
    d[1, 2, :, 6] = np.nan
    n = rng.integers(-2, 3, (3, 6, 10)).astype(np.int64)
    same_bits_as_torch(tmp_path, p, "kir_chanmax", [x, d, n], spec, 6)


def test_along_an_axis_emulated_cuda_matches_torch(tmp_path, rt_objects):
    """The same kernels for CUDA, a thread per fiber (none on one thread), run under the
    emulation header (runtime_min/cuda_emu): PyTorch's values."""
    p = tmp_path / "along.py"
    p.write_text(ALONG)
    cu, exe = emulated(tmp_path, str(p), ALONG_SPECS, rt_objects)
    code = cu.read_text()
    assert "one thread:" not in code, code
    assert len(re.findall(r"/\* its kernel IR: a thread per fiber along axis \d \(grid-stride\) \*/", code)) == 9, code
    torch.manual_seed(0)
    model = load_module(str(p), "kir_along_cuda").Net()
    ins = along_inputs()
    with torch.no_grad():
        want = [t.numpy() for t in model(*map(torch.from_numpy, ins))]
    w = tmp_path / "w.safetensors"
    st_write(w, state_dict_np(model))
    args = [exe, "run", "forward", "--weights", w]
    for k, a in enumerate(ins):
        np.save(tmp_path / f"in{k}.npy", a)
        args += ["--input", tmp_path / f"in{k}.npy"]
    for k in range(len(want)):
        args += ["--output", tmp_path / f"out{k}.npy"]
    run_env(args)
    for k, wt in enumerate(want):
        same(f"output {k}", np.load(tmp_path / f"out{k}.npy"), wt)


@pytest.mark.skipif(NVCC is None, reason="nvcc not found (the CUDA toolkit is not installed)")
def test_along_an_axis_nvcc_compiles_clean(tmp_path):
    """The kernels' .cu through nvcc for sm_80, every warning an error, host and device."""
    p = tmp_path / "along.py"
    p.write_text(ALONG)
    cu = tmp_path / "m.cu"
    run([CTC, "compile", str(p), "--target", "cuda", "-o", cu, *ALONG_SPECS])
    run([NVCC, "-c", "-gencode", "arch=compute_80,code=sm_80", "-Werror", "all-warnings",
         "-Xcompiler", "-Wall,-Wextra,-Werror", "-I", RT, cu, "-o", tmp_path / "m.o"], timeout=600)


# A convolution, a GEMM with an epilogue, a column sum and a scan, large enough for threads.
THREADED = """
import torch
import torch.nn as nn
import torch.nn.functional as F


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.fc = nn.Linear(512, 256)

    def forward(self, x):
        h = F.relu(self.conv(x))
        z = torch.tanh(self.fc(h.flatten(1)))
        return z.sum(0), torch.cumsum(z, dim=1)
"""


def entry_body(code):
    return code[code.index("int net_forward(net_t *m"):]


def test_profile_regions_of_every_parallel_loop_are_the_renderers(tmp_path):
    """--profile: every parallel loop of the entry, the kernel IR's and those the convolution,
    GEMM and reduction emitters write (opened through cg_par_open), is a region reporting each
    thread's share, written by the C renderer; the plain build has OpenMP's line at each of
    them, and the GEMM epilogue's block every thread runs is a region without `omp for`."""
    opts = ["--input", "x=f32[64,3,8,8]"]
    compile_to(tmp_path, THREADED, "plain.c", *opts)
    compile_to(tmp_path, THREADED, "prof.c", *opts, "--profile")
    plain, prof = entry_body((tmp_path / "plain.c").read_text()), entry_body((tmp_path / "prof.c").read_text())
    omp = re.findall(r"^ *(CTC_OMP_FOR|CTC_OMP_FOR_SIMD|CTC_OMP_PARALLEL)$", plain, re.M)
    assert len(omp) >= 4 and {"CTC_OMP_FOR", "CTC_OMP_PARALLEL"} <= set(omp), omp
    assert len(re.findall(r"^ *CTC_PROF_PARALLEL$", prof, re.M)) == len(omp), prof
    assert len(re.findall(r"ctc_prof_thread\(m->prof, &ctc_prof_forward\[\d+\], ctc_prof_thread_num\(\), ctc_thread_t0\);", prof)) == len(omp)
    assert not re.search(r"^ *(CTC_OMP_FOR|CTC_OMP_FOR_SIMD|CTC_OMP_PARALLEL)$", prof, re.M), prof
    # the im2col loop over (image, channel), and the GEMM epilogue's region
    assert re.search(r"CTC_PROF_PARALLEL\n +\{\n +const double ctc_thread_t0 = ctc_prof_now\(\);\n +CTC_PROF_FOR\n"
                     r" +for \(int64_t q = 0; q < ns \* 3; q\+\+\) \{   /\* \(image s, channel ci\) \*/\n", prof), prof
    assert re.search(r"CTC_PROF_PARALLEL\n +\{\n +const double ctc_thread_t0 = ctc_prof_now\(\);\n +\{\n"
                     r" +int64_t r0, r1, c0, c1;", prof), prof
    for name in ("plain.c", "prof.c"):
        run(["gcc", "-std=c11", "-fopenmp", "-Wall", "-Wextra", "-Werror", "-fsyntax-only", "-I", RT, tmp_path / name])


def test_scatter_add_kernel_ir(tmp_path):
    """scatter_add: a thread per fiber of the result along the axis, which first copies the
    base's fiber, then, where src has that fiber, adds src's elements at their indices in
    order (a store at a computed offset)."""
    p = tmp_path / "along.py"
    p.write_text(ALONG)
    kir = run([CTC, "compile", str(p), *ALONG_SPECS, "--emit", "kir"]).stdout
    assert re.search(r"^  kernel \d+: scatter_add over f32\[4,5,7\]\n    loop space over i0<4 i1<5 parallel\n"
                     r"      loop serial over i2<7\n        store %e\.\d+\[i0\*35 \+ i1 \+ i2\*5\] = load %\w+\.\d+\[i0\*35 \+ i1 \+ i2\*5\]\n"
                     r"      if \(i1 < 2\)\n        loop serial over i2<3\n"
                     r"          var \$ix = load %i\.\d+\[i0\*6 \+ i1 \+ i2\*2\]\n"
                     r"          store %e\.\d+\[\(\(\(i0 \* 35\) \+ i1\) \+ \(\$ix \* 5\)\)\] = \(load %e\.\d+\[", kir, re.M), kir
    compile_to(tmp_path, ALONG, "m.c", *ALONG_SPECS)
    compile_to(tmp_path, ALONG, "m.cu", *ALONG_SPECS, "--target", "cuda")
    c, cu = (tmp_path / "m.c").read_text(), (tmp_path / "m.cu").read_text()
    # C: the fibers' loops i0, i1 (the if reads i1 itself: not merged); CUDA: ctc_i's coordinates
    assert re.search(r"if \(i1 < 2\) \{\n +for \(int64_t k = 0; k < 3; k\+\+\) \{\n +int64_t ix\w* = i\w*\[i0 \* 6 \+ i1 \+ k \* 2\];\n"
                     r" +e\[i0 \* 35 \+ i1 \+ ix\w* \* 5\] = e\[i0 \* 35 \+ i1 \+ ix\w* \* 5\] \+ s\w*\[i0 \* 6 \+ i1 \+ k \* 2\];", c), c
    assert re.search(r"if \(\(ctc_i % 5\) < 2\) \{\n +for \(int64_t ctc_k = 0; ctc_k < 3; ctc_k\+\+\) \{\n"
                     r" +int64_t ix\w* = i\w*\[\(ctc_i / 5\) \* 6 \+ \(ctc_i % 5\) \+ ctc_k \* 2\];", cu), cu


# GEMMs of every batch layout: a projection (the batch in the rows), heads read in place from
# the fused projection's slices (folded views, K transposed), a transposed operand and a
# weight broadcast over the leading batch axis; ragged sizes (5, 7, 3).
GEMMS = """
import torch
import torch.nn as nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv = nn.Linear(12, 36)
        self.w = nn.Parameter(torch.randn(3, 5, 7))

    def forward(self, x, a, b):
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(12, dim=2)
        q = q.view(B, T, 3, 4).transpose(1, 2)
        k = k.view(B, T, 3, 4).transpose(1, 2)
        v = v.view(B, T, 3, 4).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * 0.5
        y = torch.softmax(att, dim=-1) @ v
        return y, a.transpose(-2, -1) @ b, torch.matmul(a, self.w)
"""
GEMM_SPECS = ["--input", "x=f32[2,5,12]", "--input", "a=f32[2,3,4,5]", "--input", "b=f32[2,3,4,6]",
              "--no-fuse-attention"]


def gemm_inputs():
    rng = np.random.default_rng(8)
    return [rng.standard_normal(s).astype(np.float32) for s in ((2, 5, 12), (2, 3, 4, 5), (2, 3, 4, 6))]


def test_gemm_calls_rendered_by_both_targets(tmp_path, rt_objects):
    """A GEMM is a microkernel call of the kernel IR (kernels/gemm.c, `--emit kir`: BLAS's
    transposes, M, N, K, leading dimensions and the batch's strides); the C target writes it as
    ctc_matmul calls, the CUDA target as cuBLAS calls with the same transposes, sizes and
    leading dimensions (the batch in the rows, or as strided batches). Both give PyTorch's
    values."""
    p = tmp_path / "m.py"
    p.write_text(GEMMS)
    kir = run([CTC, "compile", str(p), *GEMM_SPECS, "--emit", "kir"]).stdout
    calls = re.findall(r"= call gemm\(.*?; ta (\d), tb (\d), M (\d+), N (\d+), K (\d+), lda (\d+), ldb (\d+)"
                       r"(?:; batch strides ((?:\[[\d,]+\] ?){3}))?(; folded)?\)", kir)
    assert len(calls) == 5, kir
    assert any(c[-1] for c in calls) and any("] [0," in c[-2] for c in calls), calls   # folded; a broadcast weight
    compile_to(tmp_path, GEMMS, "m.c", *GEMM_SPECS)
    compile_to(tmp_path, GEMMS, "m.cu", *GEMM_SPECS, "--target", "cuda")
    c, cu = (tmp_path / "m.c").read_text(), (tmp_path / "m.cu").read_text()
    cc = re.findall(r"ctc_matmul_f32\((\d), (\d), 0, (\d+), (\d+), (\d+), [^,]+, (\d+), [^,]+, (\d+), [^,]+, \d+\);", c)
    # the projection and its bias: each thread's block of the GEMM, then the epilogue on it
    cb = re.findall(r"ctc_matmul_block_f32\((\d), (\d), 0, (\d+), [^,]+, (\d+), [^,]+, (\d+), [^,]+, \d+, r0", c)
    uc = re.findall(r"ctc_gemm_f32\(ctc_blas, (\d), (\d), (\d+), (\d+), (\d+), [^,]+, (\d+), \d+, [^,]+, (\d+), \d+, 0,", cu)
    # each call: the same transposes, K and leading dimensions (and N); M is the call's, or
    # times the batch where a target runs the batch in the rows
    key = lambda t: (t[0], t[1], t[4], t[5], t[6])   # noqa: E731
    assert len(cc) == 4 and len(cb) == 1, (cc, cb)
    assert sorted(map(key, cc + [(b[0], b[1], "", "", b[2], b[3], b[4]) for b in cb])) == sorted(map(key, calls)), (calls, cc, cb)
    assert sorted(map(key, uc)) == sorted(map(key, calls)), (calls, uc)
    for got in (cc, uc):
        for t in got:
            assert any(key(t) == key(k) and t[3] == k[3] and int(t[2]) % int(k[2]) == 0 for k in calls), (t, calls)
    torch.manual_seed(0)
    model = load_module(str(p), "kir_gemms").Net()
    with torch.no_grad():
        want = [t.numpy() for t in model(*map(torch.from_numpy, gemm_inputs()))]
    got = run_forward(str(tmp_path), str(p), model, gemm_inputs(), GEMM_SPECS)
    for k, (g, w) in enumerate(zip(got, want)):
        compare(f"C output {k}", g, w, 1e-5, 1e-6)
    _, exe = emulated(tmp_path, str(p), GEMM_SPECS, rt_objects)
    w = tmp_path / "w.safetensors"
    st_write(w, state_dict_np(model))
    args = [exe, "run", "forward", "--weights", w]
    for k, a in enumerate(gemm_inputs()):
        np.save(tmp_path / f"g{k}.npy", a)
        args += ["--input", tmp_path / f"g{k}.npy"]
    args += sum((["--output", tmp_path / f"o{k}.npy"] for k in range(3)), [])
    run_env(args)
    for k, wt in enumerate(want):
        compare(f"CUDA output {k}", np.load(tmp_path / f"o{k}.npy"), wt, 1e-5, 1e-6)


# A strided, padded, dilated convolution and a grouped one, trained: forward, and both
# gradients of each (the first layer's input gradient is not needed).
CONVS = """
import torch
import torch.nn as nn
import torch.nn.functional as F


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Conv2d(4, 6, 3, stride=2, padding=2, dilation=2)
        self.b = nn.Conv2d(6, 6, (3, 2), padding=(1, 0), groups=3)

    def forward(self, x):
        return self.b(torch.relu(self.a(x)))


model = Net()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)


def train_step(x, y):
    optimizer.zero_grad()
    loss = F.mse_loss(model(x), y)
    loss.backward()
    optimizer.step()
    return loss
"""


def test_conv_calls_rendered_by_both_targets(tmp_path):
    """A convolution is a microkernel call of the kernel IR (kernels/conv.c, `--emit kir`, forward and
    train_step: its
    operands, shapes, stride, padding, dilation and groups); the C target's im2col and the
    CUDA target's im2col kernels take that geometry."""
    p = tmp_path / "m.py"
    p.write_text(CONVS)
    specs = ["--input", "x=f32[2,4,11,9]", "--input", "y=f32[2,6,6,4]"]
    kir = run([CTC, "compile", str(p), *specs, "--emit", "kir"]).stdout
    geo = re.findall(r"= call (conv2d\w*)\(%\w+\.\d+, %\w+\.\d+; x \[(\d+),(\d+),(\d+),(\d+)\], w \[(\d+),(\d+),(\d+),(\d+)\], "
                     r"y \[\d+,\d+,(\d+),(\d+)\], stride (\d+)x(\d+), padding (\d+)x(\d+), dilation (\d+)x(\d+), groups (\d+)\)", kir)
    ops = sorted(g[0] for g in geo)
    assert ops.count("conv2d") == 4 and ops.count("conv2d_bwd_weight") == 2 and ops.count("conv2d_bwd_input") == 1, kir
    a = [g for g in geo if g[17] == "1"][0]
    b = [g for g in geo if g[17] == "3"][0]
    assert a[1:] == ("2", "4", "11", "9", "6", "4", "3", "3", "6", "5", "2", "2", "2", "2", "2", "2", "1"), a
    assert b[1:] == ("2", "6", "6", "5", "6", "2", "3", "2", "6", "4", "1", "1", "1", "0", "1", "1", "3"), b
    compile_to(tmp_path, CONVS, "m.c", *specs)
    compile_to(tmp_path, CONVS, "m.cu", *specs, "--target", "cuda")
    c, cu = (tmp_path / "m.c").read_text(), (tmp_path / "m.cu").read_text()
    for g in (a, b):   # H, W, KH, KW, stride, padding, dilation, OH, OW as each target passes them
        tail = ", ".join([g[3], g[4], g[7], g[8], g[11], g[12], g[13], g[14], g[15], g[16], g[9], g[10]])
        assert re.search(r"ctc_im2col_f32\([^;]*, \d+, " + tail + r", ", c), (tail, c)
        assert re.search(r"ctc_im2col_f32, [^;]*, \d+, " + tail + r", ", cu), (tail, cu)
