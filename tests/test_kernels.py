"""The kernel layer (kernels/): the partition `ctc compile --emit kernels` prints,
the memory plan over kernels (fused intermediates get no storage), the C it
gives, and fused against unfused (`--no-fuse`) results on the bench models."""
import os
import re

import numpy as np
import pytest

from ctc_testlib import BENCH, BENCH_TRAIN_STEP, CTC, build_ctc, compare, run, run_entry, st_read

CHAIN = """
import torch
import torch.nn as nn

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.b = nn.Parameter(torch.randn(16))

    def forward(self, x):
        y = x + self.b
        y = y * 2.0
        y = torch.exp(y)
        y = y - 1.0
        y = torch.tanh(y)
        return y
"""

SOFTMAX = """
import torch
import torch.nn as nn

class Net(nn.Module):
    def forward(self, x):
        return torch.softmax(x, dim=-1)
"""


@pytest.fixture(scope="module", autouse=True)
def _build():
    build_ctc()


def kernels_of(tmp_path, src, *opts, name="m.py"):
    """The `--emit kernels` text of src, split per func: {func: [kernel blocks]}."""
    p = tmp_path / name
    p.write_text(src)
    out = run([CTC, "compile", str(p), "--emit", "kernels", *opts]).stdout
    funcs = {}
    for block in re.split(r"^func ", out, flags=re.M)[1:]:
        fname = block.split(":", 1)[0]
        funcs[fname] = re.split(r"^  kernel \d+: ", block, flags=re.M)[1:]
    return funcs


def code_kernels(blocks):
    return [b for b in blocks if not b.startswith("view")]


def test_chain_of_five_is_one_kernel(tmp_path):
    ks = code_kernels(kernels_of(tmp_path, CHAIN, "--input", "x=f32[4,16]")["forward"])
    assert len(ks) == 1, ks
    k = ks[0]
    assert k.startswith("elementwise over f32[4,16]")
    assert re.search(r"inputs: %x\.\d+ %b\.\d+\n", k), k
    assert len(re.findall(r"^    outputs: %\S+\n", k, re.M)) == 1
    ops = re.findall(r"= (\w+)( \(local\))? : \S+ +; line (\d+)", k)
    assert [o[0] for o in ops] == ["add", "mul", "exp", "sub", "tanh"]
    assert [bool(o[1]) for o in ops] == [True] * 4 + [False]   # only the result is stored
    assert [int(o[2]) for o in ops] == [11, 12, 13, 14, 15]    # model lines


def test_chain_generated_code(tmp_path):
    """One loop nest, the intermediates are scalar locals with the model's names, no arena."""
    p = tmp_path / "m.py"
    p.write_text(CHAIN)
    c = tmp_path / "m.c"
    r = run([CTC, "compile", str(p), "--input", "x=f32[4,16]", "-o", str(c), "--stats"])
    body = c.read_text().split("int net_forward(")[1]
    assert body.count("for (int64_t") <= 2, body            # one nest (merged to one loop or two)
    assert "kernel 0: 5 elementwise ops fused over f32[4,16]" in body
    assert re.search(r"const float x_e = x\[.*\];\n *const float b_e = b\[.*\];\n *const float y = \(x_e \+ b_e\);",
                     body), body
    # only the stored result (and the parameter) are arena pointers
    assert len(re.findall(r"\*\)\(A \+ \d+\);", body)) == 2, body
    m = re.search(r"entry forward: (\d+) instructions, (\d+) with code; (\d+) kernels after fusion, "
                  r"activations (\d+) bytes", r.stderr)
    assert m and (int(m.group(2)), int(m.group(3)), int(m.group(4))) == (5, 1, 256), r.stderr
    r = run([CTC, "compile", str(p), "--input", "x=f32[4,16]", "-o", str(c), "--stats", "--no-fuse"])
    m = re.search(r"entry forward: \d+ instructions, (\d+) with code; (\d+) kernels \(--no-fuse\), "
                  r"activations (\d+) bytes", r.stderr)
    assert m and int(m.group(1)) == int(m.group(2)) == 5 and int(m.group(3)) > 256, r.stderr


def test_in_place(tmp_path):
    """A fused result takes over the bytes of an input that dies in its kernel (same
    shape and element size); an input still needed later is not overwritten."""
    src = """
import torch
import torch.nn as nn

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(16, 16))

    def forward(self, x):
        a = torch.matmul(x, self.w)
        b = torch.tanh(a) + 1.0
        c = torch.matmul(b, self.w)
        return torch.matmul(c * 2.0, self.w) + c
"""
    p = tmp_path / "m.py"
    p.write_text(src)
    c = tmp_path / "m.c"
    run([CTC, "compile", str(p), "--input", "x=f32[4,16]", "-o", str(c)])
    body = c.read_text().split("int net_forward(")[1]
    off = dict((m.group(1), int(m.group(2))) for m in re.finditer(r"float \*(?:restrict )?(\w+) = \(float \*\)\(A \+ (\d+)\);", body))
    assert off["b"] == off["a"], body                       # a dies in b's loop: b is written over it
    assert off["mul"] != off["c"], body                     # c is read again after c * 2.0
    for name in ("a", "b"):
        assert not re.search(r"\*restrict %s = " % name, body), body   # shared bytes: not restrict


def test_softmax_partition(tmp_path):
    """softmax is one row kernel of 3 loops per row: max | sub, exp, sum | div (5 loop nests unfused)."""
    fused = code_kernels(kernels_of(tmp_path, SOFTMAX, "--input", "x=f32[8,32]")["forward"])
    assert len(fused) == 1, fused
    assert fused[0].startswith("row over f32[8,32], rows of 32, 3 loops per row"), fused[0]
    ops = re.findall(r"= (\w+)( \(local\)| \(row array\))? : \S+  \[loop (\d)\]", fused[0])
    assert ops == [("reduce_max", " (local)", "0"), ("sub", " (local)", "1"), ("exp", " (row array)", "1"),
                   ("reduce_sum", " (local)", "1"), ("div", "", "2")], fused[0]
    unfused = code_kernels(kernels_of(tmp_path, SOFTMAX, "--input", "x=f32[8,32]", "--no-fuse")["forward"])
    assert len(unfused) == 5
    assert "(local)" not in "".join(unfused)


LAYERNORM = """
import torch
import torch.nn as nn
import torch.nn.functional as F

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln = nn.LayerNorm(32)

    def forward(self, x):
        return F.log_softmax(self.ln(x), dim=-1), x.mean(dim=-1)
"""


def test_layer_norm_log_softmax_mean_one_kernel(tmp_path):
    """Layer norm, then log_softmax, and a mean of the same rows: one kernel, 5 loops
    per row; only the two results touch memory (plus the view of the mean)."""
    ks = kernels_of(tmp_path, LAYERNORM, "--input", "x=f32[8,32]")["forward"]
    code = code_kernels(ks)
    assert len(code) == 1 and code[0].startswith("row over f32[8,32], rows of 32, 5 loops per row"), ks
    assert len(re.findall(r"^    %\S+ = \w+ : ", code[0], re.M)) == 2, code[0]   # stored: the two results
    p = tmp_path / "ln.py"
    p.write_text(LAYERNORM)
    c = tmp_path / "ln.c"
    run([CTC, "compile", str(p), "--input", "x=f32[8,32]", "-o", str(c)])
    body = c.read_text().split("int net_forward(")[1]
    # 5 loops over each row; each reduction's operands go to a per-row array, which
    # ctc_sum_f32 / ctc_max_f32 reduce in lanes (loops that vectorise, in a fixed order); the mean
    # of x reads its row in place, and its loop, which computes nothing else, is not written
    assert body.count("for (int64_t j = 0; j < 32; j++)") == 4, body
    lanes = re.findall(r"_acc = ctc_(sum|max)_f32\(\w+_in, 32\);", body)
    assert sorted(lanes) == ["max", "sum", "sum"], body
    assert len(re.findall(r"_acc = ctc_sum_f32\(&x\[i0 \* 32\], 32\);", body)) == 1, body   # x.mean is the
    # layer norm's mean (CSE)
    assert len(re.findall(r"\*\)\(A \+ \d+\);", body)) == 5, body   # weight, bias, 2 results, the view


def test_broadcast_row_and_shape_change(tmp_path):
    """Broadcast operands join; a reduction over the last axis pulls its prologue and
    the ops over the same rows into one row kernel; another reduction does not."""
    src = """
import torch
import torch.nn as nn

class Net(nn.Module):
    def forward(self, x, s):
        y = torch.relu(x * s)
        z = y.sum(dim=1, keepdim=True)
        return torch.softmax(x, dim=-1), y + 1.0, z * 2.0 + s, x.sum(dim=0)
"""
    ks = code_kernels(kernels_of(tmp_path, src, "--input", "x=f32[4,8]", "--input", "s=f32[4,1]")["forward"])
    assert [k.split("\n")[0] for k in ks] == ["row over f32[4,8], rows of 8, 3 loops per row", "op over f32[1,8]"], ks
    assert re.search(r"outputs: %softmax\.\d+ %add\.\d+ %add\.\d+\n", ks[0]), ks[0]
    assert re.search(r"= mul \(local\) : f32\[4,1\]  \[per row, before loop 1\]", ks[0]), ks[0]


def test_sgd_update_is_one_kernel_per_parameter(tmp_path):
    src = open(os.path.join(BENCH, "mlp.py")).read() + TRAIN
    ks = kernels_of(tmp_path, src, "--input", "x=f32[4,1,28,28]", "--input", "y=i64[4]")["train_step"]
    # momentum + step, one pass: its own loop, or the epilogue of the weight gradient's GEMM
    upd = [k for k in ks if re.match(r"(elementwise|gemm with epilogue) over f32\[512,784\]", k) and " = sub " in k]
    assert len(upd) == 1 and len(re.findall(r"^    %\S+ = (?!matmul)", upd[0], re.M)) == 4, upd


def test_sgd_update_written_in_place(tmp_path):
    """The optimizer step's loop stores the new parameter and momentum straight
    into their arena bytes: no activation copies and no write-back memcpy at
    the end of the entry (13 updates: 6 parameters, 6 momentum buffers, the
    step count). The trajectory tests (test_train, test_optim_more) check the values."""
    p = tmp_path / "m.py"
    p.write_text(open(os.path.join(BENCH, "mlp.py")).read() + TRAIN)
    run([CTC, "compile", str(p), "-o", str(tmp_path / "m.c"), "--input", "x=f32[4,1,28,28]", "--input", "y=i64[4]"])
    code = (tmp_path / "m.c").read_text()
    body = code[code.index("mlp_train_step("):]
    tail = body[body.index("/* parameter updates"):body.index("return CTC_OK")]
    assert "all 13 computed in place above */" in tail, tail
    # the step count's new value is declared as such; the parameters and momentum buffers are the update table's rows
    assert re.search(r"^  float \*\w+ = \(float \*\)\(A \+ \d+\);  /\* f32\[\] optimizer\.step's new value \*/", body, re.M)
    assert "memcpy(A +" not in tail, tail
    assert re.search(r"^  float \*sub_1 = \(float \*\)\(A \+ 0\);", body, re.M), "fc1.weight's new value at its offset"


TRAIN = BENCH_TRAIN_STEP

# (file, forward's input name, x, y): small batches keep the builds and runs fast
BENCH_CASES = [
    ("mlp.py", "x", lambda r: r.standard_normal((8, 1, 28, 28)).astype(np.float32), lambda r: r.integers(0, 10, 8)),
    ("lenet.py", "t", lambda r: r.standard_normal((4, 1, 28, 28)).astype(np.float32), lambda r: r.integers(0, 10, 4)),
    ("gpt.py", "idx", lambda r: r.integers(0, 256, (2, 128)), lambda r: r.integers(0, 256, (2, 128))),
]


def _spec(name, a):
    dt = "i64" if a.dtype == np.int64 else "f32"
    return f"{name}={dt}[{','.join(map(str, a.shape))}]"


@pytest.mark.parametrize("case", [pytest.param(c, marks=pytest.mark.slow) if c[0] == "gpt.py" else c
                                  for c in BENCH_CASES], ids=[c[0] for c in BENCH_CASES])
def test_fused_matches_unfused(tmp_path, case):
    """Forward and one SGD-momentum train step: fused and unfused programs agree
    (outputs, loss and the updated parameters) within 1e-6."""
    fname, xname, mkx, mky = case
    rng = np.random.default_rng(0)
    x, y = mkx(rng), mky(rng).astype(np.int64)
    src = tmp_path / fname
    src.write_text(open(os.path.join(BENCH, fname)).read() + TRAIN)
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", y)
    res = {}
    for mode in ("fused", "unfused"):
        exe = tmp_path / mode
        opts = ["--no-fuse"] if mode == "unfused" else []
        specs = ["--input", _spec("x", x), "--input", _spec("y", y)]
        if xname != "x":
            specs += ["--input", _spec(xname, x)]
        run([CTC, "build", str(src), "-o", str(exe), *specs, *opts], timeout=600)
        w = tmp_path / "w.safetensors"
        if mode == "fused":   # one set of random weights for both programs
            run([str(exe), "run", "forward", "--input", str(tmp_path / "x.npy"), "--output", str(tmp_path / "o.npy"),
                 "--save", str(w)])
        out, loss, saved = (tmp_path / f"{mode}_{n}" for n in ("out.npy", "loss.npy", "w.safetensors"))
        run([str(exe), "run", "forward", "--weights", str(w), "--input", str(tmp_path / "x.npy"), "--output", str(out)])
        run([str(exe), "run", "train_step", "--weights", str(w), "--input", str(tmp_path / "x.npy"),
             "--input", str(tmp_path / "y.npy"), "--output", str(loss), "--save", str(saved), "--save-training-state", "--repeat", "2"])
        res[mode] = (np.load(out), np.load(loss), st_read(str(saved)))
    (fo, fl, fw), (uo, ul, uw) = res["fused"], res["unfused"]
    np.testing.assert_allclose(fo, uo, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(fl, ul, rtol=1e-6, atol=1e-6)
    assert fw.keys() == uw.keys()
    for k in fw:
        np.testing.assert_allclose(fw[k], uw[k], rtol=1e-6, atol=1e-6, err_msg=k)


# Convolutions run over tiles of S images (ir_conv_slots), one GEMM per tile;
# the C target keeps a tile's columns under 1 MiB: batch 16 of 16x3x3 over 32x33
# outputs (608 KB of columns per image) runs one image a tile (tests/
# test_conv_batched.py has tiles of several); batch 1 and a 1x1 convolution (no
# columns) take the other paths.
CONV = """
import torch
import torch.nn.functional as F


def fwd(x, w, b):
    return F.conv2d(x, w, b, stride=(1, 2), padding=(1, 2), dilation=(1, 2))


def grads(x, w, b, p):
    y = F.conv2d(x, w, b, stride=(1, 2), padding=(1, 2), dilation=(1, 2))
    return torch.autograd.grad((y * p).sum(), (x, w, b))


def grads1(x, w1, p1):
    return torch.autograd.grad((F.conv2d(x, w1) * p1).sum(), (x, w1))
"""


@pytest.mark.parametrize("n", [16, 1])
def test_conv_chunks_match_torch(tmp_path, n):
    import torch
    import torch.nn.functional as F
    rng = np.random.default_rng(n)
    x = rng.standard_normal((n, 16, 32, 66)).astype(np.float32)
    w = rng.standard_normal((8, 16, 3, 3)).astype(np.float32)
    b = rng.standard_normal(8).astype(np.float32)
    w1 = rng.standard_normal((4, 16, 1, 1)).astype(np.float32)
    y = F.conv2d(torch.from_numpy(x), torch.from_numpy(w), torch.from_numpy(b), stride=(1, 2), padding=(1, 2),
                 dilation=(1, 2))
    p = rng.standard_normal(tuple(y.shape)).astype(np.float32)
    p1 = rng.standard_normal((n, 4, 32, 66)).astype(np.float32)
    src = tmp_path / "conv.py"
    src.write_text(CONV + f"""
example_inputs = {{
    "forward": (torch.zeros(1),),
    "fwd": (torch.zeros({n}, 16, 32, 66), torch.zeros(8, 16, 3, 3), torch.zeros(8)),
    "grads": (torch.zeros({n}, 16, 32, 66), torch.zeros(8, 16, 3, 3), torch.zeros(8), torch.zeros{tuple(y.shape)}),
    "grads1": (torch.zeros({n}, 16, 32, 66), torch.zeros(4, 16, 1, 1), torch.zeros({n}, 4, 32, 66)),
}}
""")
    exe = tmp_path / "net"
    run([CTC, "build", str(src), "-o", str(exe), "--entry", "fwd", "--entry", "grads", "--entry", "grads1"],
        timeout=600)
    c = (tmp_path / "net.c").read_text()
    if n > 1:
        assert "1 images' [144,1056]" in c and "for (int64_t n0 = 0; n0 < 16; n0 += 1)" in c, "no tiles"
        assert re.search(r"ctc_matmul_f32\(0, 1, n0 > 0, 8, 144, ns \* 1056,", c), "weight gradient: one GEMM per tile"
    tx, tw, tb, tw1 = (torch.from_numpy(a).requires_grad_() for a in (x, w, b, w1))
    (got,) = run_entry(tmp_path, exe, "fwd", [x, w, b], 1)
    compare("conv2d", got, y.numpy(), 1e-4, 1e-4)
    want = torch.autograd.grad((F.conv2d(tx, tw, tb, stride=(1, 2), padding=(1, 2), dilation=(1, 2))
                                * torch.from_numpy(p)).sum(), (tx, tw, tb))
    for name, g, wt in zip("xwb", run_entry(tmp_path, exe, "grads", [x, w, b, p], 3), want):
        compare(f"d/d{name}", g, wt.numpy(), 1e-3, 1e-3)
    want1 = torch.autograd.grad((F.conv2d(tx, tw1) * torch.from_numpy(p1)).sum(), (tx, tw1))
    for name, g, wt in zip(["x", "w1"], run_entry(tmp_path, exe, "grads1", [x, w1, p1], 2), want1):
        compare(f"1x1 d/d{name}", g, wt.numpy(), 1e-3, 1e-3)


POOL = """
import torch
import torch.nn.functional as F


def grads(x, p2, p3):
    y2 = F.max_pool2d(x, 2)
    y3 = F.max_pool2d(x, (2, 3), stride=3)
    return torch.autograd.grad((y2 * p2).sum() + (y3 * p3).sum(), (x,))
"""


def test_maxpool_grad_disjoint_windows(tmp_path):
    """max_pool2d gradients with windows that do not overlap (written once,
    branch-free; inputs no window reaches are 0), ties and NaN included."""
    import torch
    import torch.nn.functional as F
    rng = np.random.default_rng(3)
    x = rng.integers(-2, 3, (2, 3, 7, 11)).astype(np.float32)   # many ties
    x[0, 0, 0, 1] = np.nan
    x[1, 2, 3, 3] = np.nan
    x[1, 2, 4, 4] = np.nan
    p2 = rng.standard_normal((2, 3, 3, 5)).astype(np.float32)
    p3 = rng.standard_normal((2, 3, 2, 3)).astype(np.float32)
    p2[0, 1, 1, 1] = -0.0
    src = tmp_path / "pool.py"
    src.write_text(POOL + "\nexample_inputs = {'forward': (torch.zeros(1),), 'grads': (torch.zeros(2, 3, 7, 11), "
                   "torch.zeros(2, 3, 3, 5), torch.zeros(2, 3, 2, 3))}\n")
    exe = tmp_path / "net"
    run([CTC, "build", str(src), "-o", str(exe), "--entry", "grads"])
    assert "const int take = (v > mx) | (v != v);" in (tmp_path / "net.c").read_text()
    (got,) = run_entry(tmp_path, exe, "grads", [x, p2, p3], 1)
    tx = torch.from_numpy(x).requires_grad_()
    loss = (F.max_pool2d(tx, 2) * torch.from_numpy(p2)).sum() + \
        (F.max_pool2d(tx, (2, 3), stride=3) * torch.from_numpy(p3)).sum()
    (want,) = torch.autograd.grad(loss, (tx,))
    np.testing.assert_array_equal(np.signbit(got), np.signbit(want.numpy()))
    compare("d/dx", got, want.numpy(), 1e-6, 1e-6)


def test_attention_is_one_fused_call(tmp_path):
    """gpt: each block's attention is one call of the fused kernel (codegen_c/attn_c.c) that
    reads q, k and v in place from the fused c_attn output (row stride 768, k at column 256,
    v at 512; batch stride 128 * 768, head stride 64); gelu's tanh is ctc_tanh_f32 (no libm
    call); the fused loops carry omp simd; no cblas call outside ctc_matmul."""
    src = tmp_path / "gpt.py"
    src.write_text(open(os.path.join(BENCH, "gpt.py")).read() + TRAIN)
    c = tmp_path / "gpt.c"
    run([CTC, "compile", str(src), "-o", str(c), "--input", "idx=i64[2,128]", "--input", "x=i64[2,128]",
         "--input", "y=i64[2,128]"])
    code = c.read_text()
    call = (r"ctc_attention_f32\(h_0_attn_c_attn, 98304, 64, 768, h_0_attn_c_attn \+ 256, 98304, 64, 768, "
            r"h_0_attn_c_attn \+ 512, 98304, 64, 768, \w+, 4, \(?[\w *]+\)?, 128, 64, 1, 0, 0, 0, 0.125\);")
    assert re.search(call, code), call
    assert re.search(r"ctc_attention_bwd_f32\(h_0_attn_c_attn, 98304, 64, 768, ", code)
    # the forward entry: its body and its modules' functions (forward_h_0_attn_forward, ...)
    entry = code.index("int gpt_forward(")
    fwd = "".join(re.findall(r"^static void forward_\w+\(.*?^\}\n", code, re.M | re.S)) + \
        code[entry:code.index("\n}\n", entry)]
    views = re.findall(r"^  /\* gpt\.py:2[3-7]  (?:slice|permute)\(.*$", fwd, re.M)
    assert len(views) == 4 * 6, views   # per block: 3 slices and 3 head transposes
    assert all(v.endswith(": a strided view, no code (its readers index it in place) */") for v in views), views
    assert "ctc_tanh_f32(" in code and not re.search(r"\btanhf\(", code)
    assert code.count("CTC_OMP_SIMD\n") + code.count("CTC_OMP_FOR_SIMD\n") >= 20
    assert code.count("cblas_sgemm(") == 1   # inside ctc_matmul_block_f32 only


def test_gemm_paths_agree(tmp_path):
    """lenet with OpenBLAS (ctc_matmul: single-threaded OpenBLAS, large GEMMs
    split over the OpenMP threads, convolution images in parallel) and with the
    portable GEMM (--no-blas, with and without OpenMP): the same forward
    outputs, loss and updated weights."""
    fname, xname, mkx, mky = BENCH_CASES[1]
    rng = np.random.default_rng(1)
    x, y = mkx(rng), mky(rng).astype(np.int64)
    src = tmp_path / fname
    src.write_text(open(os.path.join(BENCH, fname)).read() + TRAIN)
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", y)
    specs = ["--input", _spec("x", x), "--input", _spec("y", y), "--input", _spec(xname, x)]
    res = {}
    w = tmp_path / "w.safetensors"
    for mode, opts in (("blas", []), ("portable", ["--no-blas"]), ("serial", ["--no-blas", "--no-openmp"])):
        exe = tmp_path / mode
        run([CTC, "build", str(src), "-o", str(exe), *specs, *opts], timeout=600)
        if mode == "blas":
            code = (tmp_path / "blas.c").read_text()
            # conv2's 4 images unfolded in parallel (image, channel) into one tile, then one GEMM over it
            assert re.search(r"CTC_OMP_FOR\n    for \(int64_t q = 0; q < ns \* 6; q\+\+\) .*\n.*\n      ctc_im2col_f32\(.*\n"
                             r"    \}\n    ctc_matmul_f32\(0, 0, 0, 12, ns \* 64, 150,", code), \
                "convolution images not unfolded in parallel into one GEMM"
            run([str(exe), "run", "forward", "--input", str(tmp_path / "x.npy"), "--output",
                 str(tmp_path / "o.npy"), "--save", str(w)])
        out, loss, saved = (tmp_path / f"{mode}_{n}" for n in ("out.npy", "loss.npy", "w.safetensors"))
        run([str(exe), "run", "forward", "--weights", str(w), "--input", str(tmp_path / "x.npy"), "--output", str(out)])
        run([str(exe), "run", "train_step", "--weights", str(w), "--input", str(tmp_path / "x.npy"),
             "--input", str(tmp_path / "y.npy"), "--output", str(loss), "--save", str(saved), "--save-training-state", "--repeat", "2"])
        res[mode] = (np.load(out), np.load(loss), st_read(str(saved)))
    bo, bl, bw = res["blas"]
    for mode in ("portable", "serial"):
        o, l, wt = res[mode]
        np.testing.assert_allclose(o, bo, rtol=1e-4, atol=1e-5, err_msg=mode)
        np.testing.assert_allclose(l, bl, rtol=1e-4, atol=1e-5, err_msg=mode)
        for k in bw:
            np.testing.assert_allclose(wt[k], bw[k], rtol=1e-3, atol=1e-5, err_msg=f"{mode} {k}")


PATTERN_BUFFERS = """
import torch
import torch.nn as nn

T = 6

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("causal", torch.tril(torch.ones(T, T)).view(1, 1, T, T))
        self.register_buffer("future", torch.triu(torch.full((T, T), float("-inf")), diagonal=1))
        self.register_buffer("band", torch.tril(torch.full((T, T), 3.0), diagonal=-2))
        self.register_buffer("pos", torch.arange(-3, 2 * T - 3, 2, dtype=torch.float32))
        self.register_buffer("idx", torch.arange(T))
        self.register_buffer("three", torch.full((T,), 3.0))
        self.register_buffer("table", torch.tensor([1.0, 4.0, 2.0, 8.0, 5.0, 7.0]))

    def forward(self, x):
        y = x * self.causal + self.band + self.pos.view(T, 1) + self.three + self.table
        y = torch.softmax(y + self.future, dim=-1)
        return y + self.idx.float()
"""


def test_pattern_buffers_filled_by_loops(tmp_path):
    """Compile-time buffers of a known pattern (tril/triu bands, arange, a
    constant) are filled by a loop in _init, not emitted as arrays; the values
    _init writes are PyTorch's (forward without --weights: buffers from _init)."""
    import torch
    from ctc_testlib import load_module
    p = tmp_path / "m.py"
    p.write_text(PATTERN_BUFFERS)
    run([CTC, "compile", str(p), "-o", str(tmp_path / "m.c"), "--input", "x=f32[2,1,6,6]"])
    code = (tmp_path / "m.c").read_text()
    assert code.count("static const float ctc_data_") == 1, "only the table is data"
    assert "lower-triangular data (tril) */\n  for (int64_t i = 0; i < 36; i++) ((float *)(A + 0))[i] = i % 6 <= i / 6 % 6 ? 1.0f : 0.0f;" in code
    assert "i % 6 <= i / 6 % 6 ? 0.0f : (-INFINITY);" in code                    # triu(-inf, 1): -inf outside tril(0)
    assert "i % 6 <= i / 6 % 6 - 2 ? 3.0f : 0.0f;" in code
    assert "arange data" in code and "constant data" in code
    exe = tmp_path / "net"
    run([CTC, "build", str(p), "-o", str(exe), "--input", "x=f32[2,1,6,6]"])
    x = np.random.default_rng(0).standard_normal((2, 1, 6, 6)).astype(np.float32)
    got, = run_entry(str(tmp_path), str(exe), "forward", [x], 1)
    want = load_module(str(p)).Net()(torch.from_numpy(x)).detach().numpy()
    compare("pattern buffers", got, want, 1e-6, 1e-6)


def test_stats_flops_and_arena_breakdown(tmp_path):
    """--stats: FLOPs per entry (GEMMs exactly 2*M*N*K) and the arena split into
    parameters, optimizer state and activations, the activations at the busiest
    kernel into gradients, saved activations, other and scratch."""
    p = tmp_path / "m.py"
    p.write_text(open(os.path.join(BENCH, "mlp.py")).read() + TRAIN)
    r = run([CTC, "compile", str(p), "-o", str(tmp_path / "m.c"), "--stats", "--input", "x=f32[4,1,28,28]",
             "--input", "y=i64[4]"])
    err = r.stderr
    gemm_fwd = 2 * 4 * (784 * 512 + 512 * 512 + 512 * 10)
    m = re.search(r"entry forward: ([0-9.]+) GFLOP \(GEMM and convolution ([0-9.]+), other ops", err)
    assert m and float(m.group(2)) == round(gemm_fwd * 1e-9, 3), err
    # train: forward + weight gradients (same FLOPs) + input gradients of fc2 and fc3 (fc1's input needs none)
    gemm_train = 2 * gemm_fwd + 2 * 4 * (512 * 512 + 512 * 10)
    m = re.search(r"entry train_step: ([0-9.]+) GFLOP \(GEMM and convolution ([0-9.]+),", err)
    assert m and float(m.group(2)) == round(gemm_train * 1e-9, 3), err
    params = 4 * (784 * 512 + 512 + 512 * 512 + 512 + 512 * 10 + 10)
    assert f"ctc: arena: parameters {params} bytes, buffers 0, optimizer state {params + 4}," in err, err
    m = re.search(r"entry train_step: activations (\d+) bytes; at its busiest kernel \(\d+\): gradients (\d+), saved "
                  r"activations (\d+), other (\d+), scratch (\d+), fragmentation (\d+)", err)
    assert m, err
    total, parts = int(m.group(1)), [int(g) for g in m.groups()[1:]]
    assert sum(parts) == total and parts[0] >= 4 * 784 * 512, err   # fc1.weight's gradient is live at the busiest


GELU_MLP = """
import torch
import torch.nn as nn
import torch.nn.functional as F

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(16, 64)
        self.proj = nn.Linear(64, 4)

    def forward(self, x):
        return self.proj(F.gelu(self.fc(x), approximate="tanh"))

model = Net()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
OPTS = [optimizer]

def train_step(x, y):
    optimizer.zero_grad()
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()
    return loss
"""


def test_gelu_rematerialised_in_backward(tmp_path):
    """Reverse mode recomputes GELU's cheap elementwise chain where backward reads it
    (autograd_ad/remat.c), and its tanh too where the tensor is small: every tanh of the step is
    a kernel-local value, the forward's and the derivative's, while GELU's output, a GEMM operand,
    is kept. From 65,536 elements recomputing a tanh costs more than storing it in the forward and
    loading it in the backward: the forward's GEMM epilogue stores it beside the GEMM's output and
    GELU's, and the backward reads it (one tanh in the step); the rest of the chain (the bias add,
    the cube, the scales) stays local on both sides. The step still matches PyTorch
    (test_fused_matches_unfused and the training tests check the values on the bench models)."""
    ks = kernels_of(tmp_path, GELU_MLP, "--input", "x=f32[8,16]", "--input", "y=i64[8]")["train_step"]
    tanh = [line for k in ks for line in k.splitlines() if re.search(r"= tanh", line)]
    assert all("(local)" in line for line in tanh), tanh
    # two: the forward's and the derivative's. GELU's output, proj's GEMM operand, is kept from
    # the forward for proj's weight gradient, not computed a third time in a pass of its own
    assert len(tanh) == 2, tanh
    ks = kernels_of(tmp_path, GELU_MLP, "--input", "x=f32[1024,16]", "--input", "y=i64[1024]")["train_step"]
    tanh = [line for k in ks for line in k.splitlines() if re.search(r"= tanh", line)]
    assert len(tanh) == 1 and "(local)" not in tanh[0], tanh
    fwd = next(k for k in ks if "= tanh" in k)
    stored = re.search(r"outputs: (.*)", fwd).group(1).split()
    assert [re.sub(r"\.\d+$", "", v) for v in stored] == ["%linear", "%tanh", "%gelu"], stored
    bwd = next(k for k in ks if re.search(r"inputs: .*%tanh\.", k))
    assert "%linear." in bwd and len(re.search(r"outputs: (.*)", bwd).group(1).split()) == 1, bwd
    # --no-remat: the forward's tanh is stored for backward, which reads it
    ks = kernels_of(tmp_path, GELU_MLP, "--input", "x=f32[8,16]", "--input", "y=i64[8]", "--no-remat")["train_step"]
    tanh = [line for k in ks for line in k.splitlines() if re.search(r"= tanh", line)]
    assert len(tanh) == 1 and "(local)" not in tanh[0], tanh
    from test_optim_more import train_paired
    src = GELU_MLP + ("\nexample_inputs = {'forward': (torch.randn(8, 16),), "
                      "'train_step': (torch.randn(8, 16), torch.randint(0, 4, (8,)))}\n")
    train_paired(tmp_path, src, "gelu_remat", steps=3,
                 make_batch=lambda r: (r.standard_normal((8, 16)), r.integers(0, 4, (8,))))
    # the stored tanh's step (1,024 rows) against PyTorch too
    big = GELU_MLP + ("\nexample_inputs = {'forward': (torch.randn(1024, 16),), "
                      "'train_step': (torch.randn(1024, 16), torch.randint(0, 4, (1024,)))}\n")
    (tmp_path / "big").mkdir()
    train_paired(tmp_path / "big", big, "gelu_remat_big", steps=3,
                 make_batch=lambda r: (r.standard_normal((1024, 16)), r.integers(0, 4, (1024,))))


def test_mask_hoisted_attention_one_row_kernel(tmp_path):
    """The causal mask's `mask == 0` (a buffer compared with a literal) is hoisted
    to the front of the entry (ir/hoist.c), so the scaled scores, the mask select
    and the softmax of each attention are one row kernel: the scaled scores are a
    local of that loop, never stored. (The unfused path, --no-fuse-attention: by default
    the chain is one fused attention call, tests/test_attention.py.)"""
    src = open(os.path.join(BENCH, "gpt.py")).read()
    ks = kernels_of(tmp_path, src, "--model", "GPT", "--input", "idx=i64[2,128]", "--no-fuse-attention")["forward"]
    rows = [k for k in ks if k.startswith("row over f32[2,4,128,128]")]
    assert len(rows) == 4, rows
    for k in rows:
        assert re.search(r"= mul \(local\) : f32\[2,4,128,128\]  \[loop 0\]    ; line 27", k), k
        assert re.search(r"= where \(row array\) : f32\[2,4,128,128\]  \[loop 0\]    ; line 28", k), k
    assert ks[1].startswith("elementwise over bool[1,1,128,128]"), ks[:3]   # the 4 masks' compares, first


SPLIT = """
import torch
import torch.nn as nn

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(6, 9)

    def forward(self, x):
        q, k, v = self.proj(x).split(3, dim=1)
        return (torch.tanh(q) * k + v.exp()).sum()

model = Net()

def grads(x):
    model.zero_grad()
    loss = model(x)
    loss.backward()
    return model.proj.weight.grad, model.proj.bias.grad   # no optimizer: both from the one sweep

example_inputs = {"forward": (torch.randn(5, 6),), "grads": (torch.randn(5, 6),)}
"""


def test_split_gradient_is_one_concat(tmp_path):
    """The gradient of a value split into pieces that are all used (q, k, v =
    proj(x).split(...)) is the concatenation of the pieces' gradients
    (ir/unslice.c), not a sum of zero-filled UNSLICEs; it matches PyTorch. Also
    `.grad` of two parameters after one backward() in a file without an
    optimizer (the second read used to find None)."""
    import torch
    from ctc_testlib import load_module, st_write
    p = tmp_path / "m.py"
    p.write_text(SPLIT)
    ir = run([CTC, "compile", str(p), "--entry", "grads", "--dump-after", "dce", "-o", str(tmp_path / "m.c")]).stderr
    body = ir[ir.index("func grads("):]
    assert "= concat" in body and "unslice" not in body, body
    exe = tmp_path / "net"
    run([CTC, "build", str(p), "--entry", "grads", "-o", str(exe)])
    mod = load_module(str(p), "split_grad")
    w = tmp_path / "w.safetensors"
    st_write(w, {k: v.detach().numpy() for k, v in mod.model.state_dict().items()})
    x = np.random.default_rng(1).standard_normal((5, 6)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    run([exe, "run", "grads", "--weights", w, "--input", tmp_path / "x.npy", "--output", tmp_path / "gw.npy",
         "--output", tmp_path / "gb.npy"])
    gw, gb = mod.grads(torch.from_numpy(x))
    compare("weight grad", np.load(tmp_path / "gw.npy"), gw.numpy(), 1e-5, 1e-6)
    compare("bias grad", np.load(tmp_path / "gb.npy"), gb.numpy(), 1e-5, 1e-6)


# GEMM epilogues (KN_GEMM): a bias + GELU, a residual that reads the GEMM's own
# operand (x + x W^T, square W: the epilogue's output must not be planned over x,
# which the other thread's GEMM block is still reading), a batch folded into the
# rows ([B, T, C] x W^T), an op whose operand does not tile the GEMM's blocks (a
# per-row scale: not an epilogue), and the SGD-momentum update of the last
# weight gradient in its GEMM's epilogue (written into the parameter's bytes).
# Forward and two train steps against PyTorch.
EPILOGUES = """
import torch
import torch.nn as nn
import torch.nn.functional as F


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(64, 96)
        self.sq = nn.Linear(96, 96, bias=False)
        self.out = nn.Linear(96, 10)

    def forward(self, x, s):
        h = F.gelu(self.fc(x), approximate="tanh")
        h = h + self.sq(h)
        h = torch.relu(self.out(h)) * s
        return h.mean(dim=1)


model = Net()
optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)


def train_step(x, s, y):
    optimizer.zero_grad()
    loss = F.mse_loss(model(x, s), y)
    loss.backward()
    optimizer.step()
    return loss


example_inputs = {"forward": (torch.randn(4, 40, 64), torch.randn(4, 40, 1)),
                  "train_step": (torch.randn(4, 40, 64), torch.randn(4, 40, 1), torch.randn(4, 10))}
"""


def test_gemm_epilogues(tmp_path):
    import torch
    from ctc_testlib import load_module, state_dict_np, st_write
    blocks = kernels_of(tmp_path, EPILOGUES)
    fwd = code_kernels(blocks["forward"])
    gemm = [k for k in fwd if k.startswith("gemm with epilogue")]
    assert len(gemm) == 3, fwd
    assert re.search(r"= matmul : f32\[4,40,96\].*\n.*= add \(local\).*\n.*= mul \(local\)", gemm[0]), gemm[0]
    assert " = add : f32[4,40,96]" in gemm[1] and "%h." in gemm[1], gemm[1]   # the residual, reading x
    assert " = relu : f32[4,40,10]" in gemm[2] and " = mul " not in gemm[2], gemm[2]   # s is per row: its own loop
    train = code_kernels(blocks["train_step"])
    upd = [k for k in train if k.startswith("gemm with epilogue over f32[96,64]") and " = sub " in k]
    assert len(upd) == 1, train   # fc.weight's gradient, the last one: its GEMM's epilogue is the update

    py = tmp_path / "m.py"
    py.write_text(EPILOGUES)
    exe = tmp_path / "net"
    run([CTC, "build", str(py), "-o", str(exe)])
    mod = load_module(str(py), "epilogues")
    torch.manual_seed(1)
    net = mod.Net()
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4, 40, 64)).astype(np.float32)
    s = rng.standard_normal((4, 40, 1)).astype(np.float32)
    y = rng.standard_normal((4, 10)).astype(np.float32)
    w = tmp_path / "w.safetensors"
    st_write(str(w), state_dict_np(net))
    for n, a in (("x", x), ("s", s), ("y", y)):
        np.save(tmp_path / f"{n}.npy", a)
    run([str(exe), "run", "forward", "--weights", str(w), "--input", str(tmp_path / "x.npy"),
         "--input", str(tmp_path / "s.npy"), "--output", str(tmp_path / "o.npy")])
    with torch.no_grad():
        want = net(torch.from_numpy(x), torch.from_numpy(s)).numpy()
    compare("forward", np.load(tmp_path / "o.npy"), want, 1e-4, 1e-5)
    saved = tmp_path / "after.safetensors"
    run([str(exe), "run", "train_step", "--weights", str(w), "--input", str(tmp_path / "x.npy"),
         "--input", str(tmp_path / "s.npy"), "--input", str(tmp_path / "y.npy"), "--output",
         str(tmp_path / "loss.npy"), "--save", str(saved), "--save-training-state", "--repeat", "2"])
    opt = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)
    for _ in range(2):
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(net(torch.from_numpy(x), torch.from_numpy(s)), torch.from_numpy(y))
        loss.backward()
        opt.step()
    compare("loss", np.load(tmp_path / "loss.npy"), loss.detach().numpy(), 1e-4, 1e-6)
    got = st_read(str(saved))
    for k, v in net.state_dict().items():
        compare(k, got[k], v.numpy(), 1e-4, 1e-6)


# A GEMM whose result has size-1 axes before its last, [B, 1, N]: a one-token step of a
# decoder (nanoGPT's and Whisper's forward at sequence length 1), a Linear after a global
# pool kept 4-D ([B, 1, 1, C], ConvNeXt's last stage on small images). The epilogue runs
# over the result as [M, N]; its operands of the result's shape once read the size-1 axis
# for the rows, so every row got the first one's values (the bias added twice to row 1).
ONE_TOKEN = """
import torch
import torch.nn as nn
import torch.nn.functional as F


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(32, 48)
        self.proj = nn.Linear(48, 16, bias=False)
        self.b = nn.Parameter(torch.randn(16))
        self.head = nn.Linear(16, 8)

    def forward(self, x, z):
        h = F.gelu(self.fc(x), approximate="tanh")          # [B, 1, 48]: bias and GELU epilogue
        h = torch.tanh(self.proj(h) * 2.0 + self.b)          # [B, 1, 16]
        g = torch.relu(self.head(z.mean(dim=(2, 3), keepdim=True).permute(0, 2, 3, 1)))   # [B, 1, 1, 8]
        return h.sum(dim=1) + g.reshape(g.shape[0], 8).sum(dim=1, keepdim=True)


model = Net()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)


def train_step(x, z, y):
    optimizer.zero_grad()
    loss = F.mse_loss(model(x, z), y)
    loss.backward()
    optimizer.step()
    return loss


example_inputs = {"forward": (torch.randn(5, 1, 32), torch.randn(5, 16, 3, 3)),
                  "train_step": (torch.randn(5, 1, 32), torch.randn(5, 16, 3, 3), torch.randn(5, 16))}
"""


def test_gemm_epilogue_size1_axes(tmp_path):
    import torch
    from ctc_testlib import load_module, state_dict_np, st_write, train_steps_match
    py = tmp_path / "m.py"
    py.write_text(ONE_TOKEN)
    exe = tmp_path / "net"
    run([CTC, "build", str(py), "-o", str(exe)])
    mod = load_module(str(py), "one_token")
    rng = np.random.default_rng(3)
    x, z, y = (rng.standard_normal(s).astype(np.float32) for s in [(5, 1, 32), (5, 16, 3, 3), (5, 16)])
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "z.npy", z)
    w = tmp_path / "w.safetensors"
    st_write(str(w), state_dict_np(mod.model))
    run([str(exe), "run", "forward", "--weights", str(w), "--input", str(tmp_path / "x.npy"),
         "--input", str(tmp_path / "z.npy"), "--output", str(tmp_path / "o.npy")])
    with torch.no_grad():
        want = mod.model(torch.from_numpy(x), torch.from_numpy(z)).numpy()
    compare("forward", np.load(tmp_path / "o.npy"), want, 1e-4, 1e-5)
    train_steps_match(str(tmp_path), str(exe), mod, str(w), [(x, z, y)], "one-token", 1e-4, 1e-6)


BN_EVAL = """\
import torch
import torch.nn as nn
import torch.nn.functional as F


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(8)

    def forward(self, x):
        return F.relu(self.bn(self.conv(x)))


model = Net()
model.eval()
example_inputs = {"forward": (torch.zeros(2, 3, 6, 6),)}
"""


def test_eval_batchnorm_is_one_pass(tmp_path):
    """Eval-mode BatchNorm and its relu after a convolution: one elementwise pass over the
    output. BatchNorm's weight and bias are read as [C,1,1] views; the hoist moves those
    reshapes to the front with the parameters' other invariant values (ir/hoist.c), so they
    no longer close the kernel between the normalisation's ops (which made it three passes).
    The values are checked against PyTorch by the layer tests (test_torchvision, test_layers)."""
    ks = code_kernels(kernels_of(tmp_path, BN_EVAL)["forward"])
    big = [k for k in ks if k.startswith("elementwise over f32[2,8,6,6]")]
    assert len(big) == 1, ks
    ops = [o for o in re.findall(r"= (\w+)(?: \(local\))? : f32\[2,8,6,6\]", big[0])]
    assert ops == ["sub", "mul", "mul", "add", "relu"], big[0]
