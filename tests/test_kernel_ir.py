"""The kernel IR (kernels/kir.h): the fused elementwise and row kernels as loops,
loads, stores, expressions and accumulations, which `ctc compile --emit kir`
prints and which the C renderer (codegen_c/render_c.c) and the CUDA renderer
(codegen_cuda/emit_cuda.c) both print, each its own way."""
import re

import pytest

from ctc_testlib import CTC, build_ctc, run

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


# Data-movement ops that are not kernel IR yet: their loops are the C emitter's, the
# parallel one opened through the target's renderer (cg_par_for in render_c.c).
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


def op_loops(code, op):
    """The lines of the op's code (from its model-line comment to the end of its parallel
    loop), dedented, the loop's header apart: (header, body)."""
    lines = code.splitlines()
    at = next(k for k, l in enumerate(lines) if re.match(r"\s*/\* m\.py:\d+  " + re.escape(op), l))
    head = next(k for k in range(at, len(lines)) if re.match(r"\s*for \(int64_t \w+ = ", lines[k]))
    ind = len(lines[head]) - len(lines[head].lstrip())
    end = next(k for k in range(head + 1, len(lines)) if lines[k] == " " * ind + "}")
    return lines[head].strip(), [l[ind:] for l in lines[head + 1:end]]


def test_data_ops_parallel_loop_is_the_renderers(tmp_path):
    """cumsum and argmax (C loops, not kernel IR yet) rendered for C and for CUDA: the same
    loops, except the parallel one: C's `for` (OpenMP when large enough, with --profile a
    region reporting each thread's share), CUDA's grid-stride loop."""
    opts = ["--input", "x=f32[2,3,8,8]", "--input", "i=i64[2,3,20,2]"]
    compile_to(tmp_path, DATAOPS, "m.c", *opts)
    compile_to(tmp_path, DATAOPS, "m.cu", *opts, "--target", "cuda")
    c, cu = (tmp_path / "m.c").read_text(), (tmp_path / "m.cu").read_text()
    for op, var, n in [("cumsum(", "o", 120), ("argmax(", "o", 2)]:
        (ch, cb), (uh, ub) = op_loops(c, op), op_loops(cu, op)
        # (C's trip count may be the run-time batch's: `(batch)`, `(60 * batch)`)
        assert re.fullmatch(rf"for \(int64_t {var} = 0; {var} < ({n}|\((\d+ \* )?batch\)); {var}\+\+\) \{{", ch), (op, ch)
        assert uh == (f"for (int64_t {var} = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; {var} < {n}; "
                      f"{var} += (int64_t)blockDim.x * gridDim.x) {{"), (op, uh)
        assert cb == ub and cb, (op, cb, ub)
    # large enough for threads: OpenMP on the same loop; --profile, a region written as such
    opts = ["--input", "x=f32[256,3,8,8]", "--input", "i=i64[256,3,20,2]"]
    compile_to(tmp_path, DATAOPS, "big.c", *opts)
    compile_to(tmp_path, DATAOPS, "prof.c", *opts, "--profile")
    big, prof = (tmp_path / "big.c").read_text(), (tmp_path / "prof.c").read_text()
    assert re.search(r"^  CTC_OMP_FOR\n  for \(int64_t o = 0; o < (15360|\(60 \* batch\)); o\+\+\) \{\n    for \(int64_t i = 0; i < 1;", big, re.M)
    assert re.search(r"^    CTC_PROF_PARALLEL\n    \{\n      const double ctc_thread_t0 = ctc_prof_now\(\);\n"
                     r"      CTC_PROF_FOR\n      for \(int64_t o = 0; o < (15360|\(60 \* batch\)); o\+\+\) \{\n(.*\n)*?      \}\n"
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
