"""Fused attention (ir/attn.c, codegen_c/attn_c.c): softmax(q k^T * scale + causal mask) v
staged the ways models write it becomes one `attention` instruction (and `attention_bwd` in a
training step's sweep), whose C kernel never forms the T x T matrix. Its forward and its
gradients are held to a float64 PyTorch reference at sizes that are not multiples of the
kernel's blocks (64 query rows, 256 keys), head dims 16 and 64 and odd ones, causal and not,
grouped-query heads, batch and heads above 1. Spellings it must not fuse (another additive mask, dropout on the probabilities in
training mode) stay unfused and still match PyTorch."""
import os
import re

import numpy as np
import pytest

from ctc_testlib import CTC, compare, load_module, run, st_write, x86_has_fma
from cuda_testlib import rt_objects  # noqa: F401 (a fixture)

torch = pytest.importorskip("torch")

# {B} {H} {T} {D}: sizes; {SCORES}: how the scores are scaled; {MASK}: how they are masked
SRC = """
import math
import torch
import torch.nn as nn
import torch.nn.functional as F

B, H, T, D = {B}, {H}, {T}, {D}


class Attn(nn.Module):
    def __init__(self):
        super().__init__()
        self.q = nn.Parameter(torch.randn(B, H, T, D))
        self.k = nn.Parameter(torch.randn(B, H, T, D))
        self.v = nn.Parameter(torch.randn(B, H, T, D))
        self.register_buffer("tril", torch.tril(torch.ones(T + 3, T + 3)).view(1, 1, T + 3, T + 3))
        self.register_buffer("upper", torch.full((1, 1, T, T), float("-inf")).triu(1))
        self.register_buffer("bias", torch.randn(1, 1, T, T))

    def forward(self, g):
        q, k, v = self.q, self.k, self.v
        att = {SCORES}
        att = {MASK}
        att = F.softmax(att, dim=-1)
        att = {DROP}
        y = att @ v
        return y, (y * g).sum()


model = Attn()


def grads(g):
    model.zero_grad()
    y, loss = model(g)
    loss.backward()
    return y, model.q.grad, model.k.grad, model.v.grad


G = torch.randn(B, H, T, D)
example_inputs = {{"forward": (G,), "grads": (G,)}}
"""

SCALES = {
    "mul": "(q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(D))",
    "div": "q @ k.transpose(-2, -1) / math.sqrt(D)",
    "q": "(q * D ** -0.5) @ k.transpose(-2, -1)",
    # grouped-query, as Llama: every other head of k, each used by two query heads
    "gqa": "q @ k[:, ::2].repeat_interleave(2, dim=1).transpose(-2, -1) / math.sqrt(D)",
}
MASKS = {
    "none": "att",
    "tril": "att.masked_fill(self.tril[:, :, :T, :T] == 0, float('-inf'))",   # nanoGPT
    "triu": "att + self.upper[:, :, :T, :T]",                                  # Llama
    "bias": "att + self.bias",                                                 # not causal: unfused
}

CASES = [  # B, H, T, D, scale, mask, dropout p
    (2, 3, 37, 16, "mul", "tril", 0),
    (2, 2, 70, 64, "div", "none", 0),
    (3, 2, 130, 64, "mul", "triu", 0),
    (2, 4, 5, 16, "q", "tril", 0),
    (1, 2, 1, 16, "div", "triu", 0),
    (2, 2, 19, 16, "mul", "bias", 0),
    # more keys than the kernel's key block (256): backward recomputes the scores per block;
    # odd head dims; T not a multiple of the query block (64)
    (1, 2, 300, 17, "div", "none", 0),
    (1, 1, 290, 33, "mul", "tril", 0),
    (2, 4, 67, 32, "gqa", "triu", 0),
    (1, 2, 9, 7, "gqa", "none", 0),
]


def build(tmp, b, h, t, d, scale, mask, p=0):
    src = tmp / "attn.py"
    drop = f"F.dropout(att, p={p}, training=self.training)" if p else "att"
    src.write_text(SRC.format(B=b, H=h, T=t, D=d, SCORES=SCALES[scale], MASK=MASKS[mask], DROP=drop))
    exe = tmp / "net"
    run([CTC, "build", src, "-o", exe])
    ir = run([CTC, "compile", src, "--emit", "ir"]).stdout
    return src, exe, ir


def entry_ir(ir, name):
    """The text of one entry's function in `--emit ir`."""
    m = re.search(r"^func %s\(.*?^}" % name, ir, re.S | re.M)
    assert m, ir[:2000]
    return m.group(0)


def reference(mod, g):
    """Output and gradients of <g, y> in float64, from the same parameters."""
    m = mod.Attn().double()
    m.load_state_dict({k: v.double() for k, v in mod.model.state_dict().items()})
    y, loss = m(torch.from_numpy(g).double())
    loss.backward()
    return [y.detach().numpy()] + [p.grad.numpy() for p in (m.q, m.k, m.v)]


@pytest.mark.parametrize("b,h,t,d,scale,mask,p", CASES, ids=lambda c: str(c))
def test_attention_forward_and_gradients_match_float64(tmp_path, b, h, t, d, scale, mask, p):
    src, exe, ir = build(tmp_path, b, h, t, d, scale, mask, p)
    fused = mask != "bias"
    fwd, gr = entry_ir(ir, "forward"), entry_ir(ir, "grads")
    assert (" attention[" in fwd) == fused and (" attention_bwd[" in gr) == fused, fwd
    if fused:   # no instruction makes a T x T value in either entry (the mask buffers are [..., T, T])
        tt = [l for l in (fwd + gr).splitlines() if f"{t},{t}]" in l and "= param " not in l]
        assert t <= d or not tt, tt
        assert " softmax" not in fwd and "exp " not in gr
    torch.manual_seed(0)
    mod = load_module(str(src), f"attn_{t}_{d}_{mask}")
    w = tmp_path / "w.safetensors"
    st_write(w, {k: v.detach().numpy() for k, v in mod.model.state_dict().items()})
    g = np.random.default_rng(1).standard_normal((b, h, t, d)).astype(np.float32)
    np.save(tmp_path / "g.npy", g)
    outs = [tmp_path / f"o{i}.npy" for i in range(4)]
    run([exe, "run", "grads", "--weights", w, "--input", tmp_path / "g.npy"] +
        [a for o in outs for a in ("--output", o)])
    run([exe, "run", "forward", "--weights", w, "--input", tmp_path / "g.npy", "--output", tmp_path / "f.npy",
         "--output", tmp_path / "fl.npy"])
    want = reference(mod, g)
    compare("forward y", np.load(tmp_path / "f.npy"), want[0], 1e-4, 1e-5)
    compare("grads y", np.load(outs[0]), want[0], 1e-4, 1e-5)
    for name, o, ref in zip(("dq", "dk", "dv"), outs[1:], want[1:]):
        compare(name, np.load(o), ref, 1e-3, 1e-4)


@pytest.mark.parametrize("value", [float("nan"), -float("nan"), float("inf")], ids=["nan", "-nan", "inf"])
def test_a_nan_or_infinite_score_reaches_its_rows(tmp_path, value):
    """The kernel's vectorised exp assumes finite scores; a row holding a NaN or an infinity
    (here from one element of k, seen by every query row: an infinite score is +inf or -inf
    by the sign of q's element) takes the exact path, so its output is NaN exactly where
    float64 PyTorch's is (never a silently finite row) and the finite rows match it."""
    src, exe, ir = build(tmp_path, 1, 2, 70, 16, "mul", "none")
    torch.manual_seed(0)
    mod = load_module(str(src), f"attn_bad_{np.signbit(value)}_{value}")
    sd = {k: v.detach().numpy().copy() for k, v in mod.model.state_dict().items()}
    sd["k"][0, 0, 5, 3] = value
    w = tmp_path / "w.safetensors"
    st_write(w, sd)
    mod.model.load_state_dict({k: torch.from_numpy(v) for k, v in sd.items()})
    g = np.zeros((1, 2, 70, 16), np.float32)
    np.save(tmp_path / "g.npy", g)
    run([exe, "run", "forward", "--weights", w, "--input", tmp_path / "g.npy", "--output", tmp_path / "f.npy",
         "--output", tmp_path / "fl.npy"])
    got, want = np.load(tmp_path / "f.npy"), reference(mod, g)[0]
    bad = np.isnan(want)
    assert bad[0, 0].any() and not bad[0, 1].any()
    assert (np.isnan(got) == bad).all(), np.argwhere(np.isnan(got) != bad)[:5]
    compare("the finite rows", np.where(bad, 0, got), np.where(bad, 0, want), 1e-4, 1e-5)


def test_dropout_on_the_probabilities_stays_unfused(tmp_path):
    """Dropout in training mode (the grads entry) keeps the unfused path; forward (eval mode,
    no dropout) is fused."""
    src, exe, ir = build(tmp_path, 2, 2, 20, 16, "mul", "tril", 0.25)
    assert " attention[" in entry_ir(ir, "forward")
    gr = entry_ir(ir, "grads")
    assert " attention" not in gr and "rand_uniform" in gr, gr


def test_generated_c_calls_the_microkernels(tmp_path):
    """The kernel IR's call node is what the C renderer prints; --emit kir shows it."""
    src, exe, ir = build(tmp_path, 2, 2, 40, 16, "mul", "tril")
    c = tmp_path / "attn.c"
    run([CTC, "compile", src, "-o", c])
    text = c.read_text()
    # each operand: its array, then strides over the batch, the heads and the rows
    arg = r"\w+, 1280, 640, 16, "
    # then n1, n0 n1, T, D, causal, divide, the bf16 roundings and bf16 operands (none here), the scale
    assert re.search(r"ctc_attention_f32\((%s){3}\w+, 2, 4, 40, 16, 1, 0, 0, 0, 0.25\);" % arg, text), text[-3000:]
    assert re.search(r"ctc_attention_bwd_f32\((%s){5}\w+, 2, 4, 40, 16, 1, 0, 0, 0, 0.25\);" % arg, text)
    kir = run([CTC, "compile", src, "--emit", "kir"]).stdout
    assert re.search(r"kernel \d+: call over f32\[2,2,40,16\]\n\s+%\S+ = call attention\(%", kir), kir[:3000]
    # --no-fuse (the unfused reference) keeps the unfused chain; the CUDA target fuses as C does
    assert " attention[" not in run([CTC, "compile", src, "--emit", "ir", "--no-fuse"]).stdout
    cu = run([CTC, "compile", src, "--emit", "ir", "--target", "cuda"]).stdout
    assert " attention[" in entry_ir(cu, "forward") and " attention_bwd[" in entry_ir(cu, "grads"), cu


EXPN_C = r"""
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
%s
int main(void) {
  long diff = 0, nan = 0, n = 0;
  /* every 31st float <= 0 (every one near -0, among the subnormals, and near -104), -inf, and NaNs
   * of both signs */
  for (uint64_t u = 0x80000000u, last = 0; !last; u += u < 0x80000100u || (u > 0xC2CFFF00u && u < 0xC2D00100u) ? 1 : 31) {
    last = u >= 0xFF800000u;
    const uint32_t b = last ? 0xFF800000u : (uint32_t)u;
    float x, y, z;
    memcpy(&x, &b, 4);
    y = ctc_exp_f32(x), z = ctc_attn_expn_f32(x);
    diff += memcmp(&y, &z, 4) != 0, n++;
  }
  const uint32_t nans[] = {0x7FC00000u, 0xFFC00000u, 0x7F800001u, 0xFFFFFFFFu, 0x7FFFFFFFu};
  for (int i = 0; i < 5; i++) {
    float x;
    memcpy(&x, &nans[i], 4);
    nan += !isnan(ctc_attn_expn_f32(x));
  }
  printf("%%ld %%ld %%ld\n", n, diff, nan);
  return 0;
}
"""


EXP_SRC = """
import torch
import torch.nn as nn


class Expo(nn.Module):
    def forward(self, x):
        return x.exp()


model = Expo()
example_inputs = {"forward": (torch.randn(8),)}
"""


def test_attention_exp_is_ctc_exp_f32_for_every_argument_it_gets(tmp_path):
    """Attention's exp (ctc_attn_expn_f32: its arguments are a score less the row's maximum or an
    old maximum less a new one, all <= 0) gives ctc_exp_f32's bits, built as `ctc build` builds (both the plain and the FMA
    build where the CPU has FMA), and a NaN for a NaN."""
    src, exe, ir = build(tmp_path, 1, 1, 40, 16, "mul", "tril")
    c = tmp_path / "attn.c"
    run([CTC, "compile", src, "-o", c])
    text = c.read_text()
    assert "ctc_exp_f32(" not in text   # (attention's exps alone: no unused ctc_exp_f32, which clang flags)
    exp_src = tmp_path / "expo.py"   # a file with the exp op, whose text has ctc_exp_f32
    exp_src.write_text(EXP_SRC)
    run([CTC, "compile", exp_src, "-o", tmp_path / "expo.c"])
    exp_text = (tmp_path / "expo.c").read_text()
    fma = re.search(r"#ifndef CTC_FMA_F32\b.*?\n#endif\n#endif\n", text, re.S)
    core = re.search(r"#ifndef CTC_EXPK_F32\b.*?\n#endif\n", text, re.S)
    fns = [re.search(r"static inline float %s\(float x\) \{.*?\n\}\n" % f, t, re.S)
           for f, t in (("ctc_exp_f32", exp_text), ("ctc_attn_expn_f32", text))]
    assert fma and core and all(fns), (text[:4000], exp_text[:4000])
    assert core.group(0) in exp_text   # the same core in both files
    (tmp_path / "expn.c").write_text(EXPN_C % (fma.group(0) + core.group(0) + fns[0].group(0) + fns[1].group(0)))
    for march in [[]] + ([["-march=haswell"]] if x86_has_fma() else []):
        run(["gcc", "-std=c11", "-O3", *march, "-fno-math-errno", "-fno-trapping-math", tmp_path / "expn.c", "-o",
             tmp_path / "expn", "-lm"])
        n, diff, nan = map(int, run([tmp_path / "expn"]).stdout.split())
        assert n > 60_000_000 and diff == 0 and nan == 0, (march, n, diff, nan)


CUDA_CASES = [c for c in CASES if c[5] != "bias" and c[2] < 200] + [
    (1, 2, 70, 16, "mul", "none", "nan"), (1, 2, 70, 16, "mul", "none", "-inf"),
    (1, 2, 45, 130, "div", "tril", 0),   # tiles of 16 rows (four of 32 x 131 floats are over 48 KiB)
    (2, 1, 21, 1, "mul", "triu", 0),     # head dim 1: a thread per row (the gradients keep 2 numbers per row)
]


@pytest.mark.parametrize("b,h,t,d,scale,mask,bad", CUDA_CASES, ids=lambda c: str(c))
def test_cuda_fused_forward_matches_float64(tmp_path, rt_objects, b, h, t, d, scale, mask, bad):
    """The CUDA target's fused attention (codegen_cuda/attn_cuda.c: forward a block per tile
    of query rows with the online softmax over tiles of keys in shared memory; backward each
    row's logsumexp and g . o, then dk and dv a block per tile of key rows, dq a block per tile
    of query rows; a thread per row where the tiles do not fit), emulated (a block's threads
    as fibers meeting at each __syncthreads), against float64 PyTorch: causal or not, scaled
    each way, grouped-query heads, odd sizes, rows not a multiple of the tile. A NaN in k
    makes NaN exactly the rows PyTorch's are, and a -inf score (one key of k, seen first by
    some rows) adds nothing."""
    from cuda_testlib import emulated, run_env
    src = tmp_path / "attn.py"
    src.write_text(SRC.format(B=b, H=h, T=t, D=d, SCORES=SCALES[scale], MASK=MASKS[mask], DROP="att"))
    cu, exe = emulated(tmp_path, str(src), [], rt_objects)
    code = cu.read_text()
    tq = 16 if d > 64 else 32
    calls = ["ctc_attention_tiles", "ctc_attention_bwd_lse", "ctc_attention_bwd_dkv", "ctc_attention_bwd_dq"]
    if d == 1:   # the forward in tiles, the gradients a thread per row
        assert f"ctc_attention_tiles<float, 32, 1, " in code
        assert "a call of attention_bwd, here a thread per key row: dk and dv" in code
        assert not any(f"{c}<" in code for c in calls[1:])
    else:
        for c in calls:
            assert f"{c}<float, {tq}, {d}, {'true' if mask != 'none' else 'false'}, " in code, c
        assert "a thread per" not in code
    torch.manual_seed(0)
    mod = load_module(str(src), f"attn_cuda_{t}_{d}_{mask}_{bad}")
    sd = {k: v.detach().numpy().copy() for k, v in mod.model.state_dict().items()}
    if bad == "nan":
        sd["k"][0, 0, 5, 3] = float("nan")
    elif bad == "-inf":   # key 0 of head 0: a score of -inf where q's element is negative, +inf (NaN row) where positive
        sd["k"][0, 0, 0, 3] = float("inf")
    mod.model.load_state_dict({k: torch.from_numpy(v) for k, v in sd.items()})
    w = tmp_path / "w.safetensors"
    st_write(w, sd)
    g = np.random.default_rng(1).standard_normal((b, h, t, d)).astype(np.float32)
    np.save(tmp_path / "g.npy", g)
    run_env([exe, "run", "forward", "--weights", w, "--input", tmp_path / "g.npy", "--output", tmp_path / "f.npy",
             "--output", tmp_path / "fl.npy"])
    got, want = np.load(tmp_path / "f.npy"), reference(mod, g)[0]
    nan = np.isnan(want)
    assert (np.isnan(got) == nan).all(), np.argwhere(np.isnan(got) != nan)[:5]
    if bad:   # -inf: the rows whose q[..., 3] is negative see a -inf score first, and stay finite
        assert nan.any() and not nan.all()
    compare("cuda forward y", np.where(nan, 0, got), np.where(nan, 0, want), 1e-4, 1e-5)
    if bad:
        return
    outs = [tmp_path / f"o{i}.npy" for i in range(4)]
    run_env([exe, "run", "grads", "--weights", w, "--input", tmp_path / "g.npy"] + [a for o in outs for a in ("--output", o)])
    for name, o, ref in zip(("y", "dq", "dk", "dv"), outs, reference(mod, g)):
        compare("cuda grads " + name, np.load(o), ref, 1e-3, 1e-4)


def test_cuda_fused_attention_in_float64(tmp_path, rt_objects):
    """A float64 model's attention on the CUDA target: the same tiles over doubles (16-row
    tiles for a head dim of 40), emulated, forward and gradients within 1e-12 of PyTorch's."""
    from cuda_testlib import emulated, run_env
    src = tmp_path / "attn64.py"
    text = SRC.format(B=2, H=2, T=29, D=40, SCORES=SCALES["mul"], MASK=MASKS["tril"], DROP="att")
    src.write_text(text.replace("torch.randn(B, H, T, D)", "torch.randn(B, H, T, D, dtype=torch.float64)"))
    cu, exe = emulated(tmp_path, str(src), [], rt_objects)
    assert "ctc_attention_bwd_dkv<double, 16, 40, true, false>(" in cu.read_text()
    torch.manual_seed(0)
    mod = load_module(str(src), "attn_cuda_f64")
    w = tmp_path / "w.safetensors"
    st_write(w, {k: v.detach().numpy() for k, v in mod.model.state_dict().items()})
    g = np.random.default_rng(1).standard_normal((2, 2, 29, 40))
    np.save(tmp_path / "g.npy", g)
    outs = [tmp_path / f"o{i}.npy" for i in range(4)]
    run_env([exe, "run", "grads", "--weights", w, "--input", tmp_path / "g.npy"] + [a for o in outs for a in ("--output", o)])
    for name, o, ref in zip(("y", "dq", "dk", "dv"), outs, reference(mod, g)):
        got = np.load(o)
        assert got.dtype == np.float64
        compare("cuda float64 " + name, got, ref, 1e-12, 1e-13)


SPLIT = """
import math
import torch
import torch.nn as nn
import torch.nn.functional as F

B, H, T, D = 2, 3, 45, 16


class Attn(nn.Module):
    def __init__(self):
        super().__init__()
        self.x = nn.Parameter(torch.randn(B, T, 3 * H * D))

    def forward(self, g):
        q, k, v = [t.view(B, T, H, D).transpose(1, 2) for t in self.x.split(H * D, dim=2)]
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(D))
        att = att.masked_fill(torch.ones(T, T).tril() == 0, float("-inf"))
        y = F.softmax(att, dim=-1) @ v
        return y, (y * g).sum()


model = Attn()


def grads(g):
    model.zero_grad()
    y, loss = model(g)
    loss.backward()
    return y, model.x.grad


example_inputs = {"forward": (torch.randn(B, H, T, D),), "grads": (torch.randn(B, H, T, D),)}
"""


def test_views_of_a_fused_projection_are_read_in_place(tmp_path):
    """q, k, v as head-transposed views of one [B, T, 3 H D] tensor (nanoGPT's c_attn split):
    the kernels read them through strides (no copies), forward and gradient as float64 PyTorch."""
    src = tmp_path / "split.py"
    src.write_text(SPLIT)
    exe = tmp_path / "net"
    run([CTC, "build", src, "-o", exe])
    kernels = run([CTC, "compile", src, "--emit", "kernels"]).stdout
    assert kernels.count("(strided") >= 3 and "attention_bwd" in kernels, kernels
    text = run([CTC, "compile", src, "-o", tmp_path / "split.c"]) and (tmp_path / "split.c").read_text()
    assert re.search(r"ctc_attention_f32\(\w+, 6480, 16, 144, \w+ \+ 48, 6480, 16, 144, \w+ \+ 96,", text)
    torch.manual_seed(0)
    mod = load_module(str(src), "attn_split")
    w = tmp_path / "w.safetensors"
    st_write(w, {k: v.detach().numpy() for k, v in mod.model.state_dict().items()})
    g = np.random.default_rng(2).standard_normal((2, 3, 45, 16)).astype(np.float32)
    np.save(tmp_path / "g.npy", g)
    run([exe, "run", "grads", "--weights", w, "--input", tmp_path / "g.npy", "--output", tmp_path / "y.npy",
         "--output", tmp_path / "dx.npy"])
    m = mod.Attn().double()
    m.load_state_dict({k: v.double() for k, v in mod.model.state_dict().items()})
    y, loss = m(torch.from_numpy(g).double())
    loss.backward()
    compare("y", np.load(tmp_path / "y.npy"), y.detach().numpy(), 1e-4, 1e-5)
    compare("dx", np.load(tmp_path / "dx.npy"), m.x.grad.numpy(), 1e-3, 1e-4)



MASKED_GPT = """
import math
import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, T=6, C=16):
        super().__init__()
        self.qkv = nn.Linear(C, 3 * C)
        self.register_buffer("bias", torch.tril(torch.ones(T, T)).view(1, 1, T, T))

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=2)
        q, k, v = (t.view(B, T, 2, C // 2).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(C // 2))
        att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
        y = F.softmax(att, dim=-1) @ v
        return y.transpose(1, 2).reshape(B, T, C)


model = Block()
example_inputs = {"forward": (torch.zeros(2, 6, 16),)}
"""


def test_a_weights_file_that_changes_a_fused_causal_mask_is_refused(tmp_path):
    """Fused attention judges the mask causal from the buffer's values when the model is
    compiled; a weights file whose mask differs (here: attending everywhere) would be
    silently ignored. ctc_model_load refuses it, naming the tensor, the element, the
    values and the model line; the same file with the model's own mask loads and matches
    PyTorch, and a build with --no-fuse-attention takes the other mask and matches
    PyTorch on it too."""
    src = tmp_path / "blk.py"
    src.write_text(MASKED_GPT)
    exe, plain = tmp_path / "net", tmp_path / "net_plain"
    run([CTC, "build", src, "-o", exe])
    run([CTC, "build", src, "-o", plain, "--no-fuse-attention"])
    assert " attention[" in entry_ir(run([CTC, "compile", src, "--emit", "ir"]).stdout, "forward")
    torch.manual_seed(0)
    mod = load_module(str(src), "masked_gpt_assumed")
    x = np.random.default_rng(2).standard_normal((2, 6, 16)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    sd = {k: v.detach().numpy().copy() for k, v in mod.model.state_dict().items()}
    good, bad = tmp_path / "good.safetensors", tmp_path / "bad.safetensors"
    st_write(good, sd)
    st_write(bad, dict(sd, bias=np.ones_like(sd["bias"])))
    run([exe, "infer", "--weights", good, "--input", tmp_path / "x.npy", "--output", tmp_path / "y.npy"])
    with torch.no_grad():
        want = mod.model(torch.from_numpy(x)).numpy()
    compare("causal", np.load(tmp_path / "y.npy"), want, 1e-4, 1e-5)
    r = run([exe, "infer", "--weights", bad, "--input", tmp_path / "x.npy", "--output", tmp_path / "z.npy"],
            check=False)
    assert r.returncode != 0 and not (tmp_path / "z.npy").exists(), r.stdout + r.stderr
    assert "'bias' has 1 at [0, 0, 0, 1] where the model has 0" in r.stderr, r.stderr
    assert "fused attention at blk.py:20 takes its values as a causal mask" in r.stderr, r.stderr
    # unfused, the file's mask is used as PyTorch uses it
    run([plain, "infer", "--weights", bad, "--input", tmp_path / "x.npy", "--output", tmp_path / "z.npy"])
    mod.model.bias.fill_(1.0)
    with torch.no_grad():
        want = mod.model(torch.from_numpy(x)).numpy()
    compare("all-ones mask, unfused", np.load(tmp_path / "z.npy"), want, 1e-4, 1e-5)



def test_the_decode_entry_keeps_its_mask_through_load_state_dict(tmp_path):
    """A token model's KV-cache decode entry relies on the mask it verified causal, even in a
    build without fused attention: the Python module's load_state_dict refuses a state_dict
    whose mask differs (PyTorch's RuntimeError, naming the element and the model line), and
    takes the model's own."""
    src = tmp_path / "lm.py"
    src.write_text(MASKED_GPT.replace('model = Block()\nexample_inputs = {"forward": (torch.zeros(2, 6, 16),)}', '''
class LM(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte = nn.Embedding(11, 16)
        self.blk = Block()
        self.head = nn.Linear(16, 11)

    def forward(self, idx):
        return self.head(self.blk(self.wte(idx)))


model = LM()
example_inputs = {"forward": (torch.zeros(1, 6, dtype=torch.long),)}'''))
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_CORETYPE"}
    env.update(CTC_NO_REEXEC="1", OMP_NUM_THREADS="1")
    r = run([CTC, "build", src, "--python", "--no-fuse-attention", "-o", tmp_path / "lmmod"], env=env)
    torch.manual_seed(0)
    mod = load_module(str(src), "masked_gpt_decode")
    sd = {k: v.detach().numpy() for k, v in mod.model.state_dict().items()}
    np.savez(tmp_path / "sd.npz", **sd)
    prog = f"""
import sys
sys.path.insert(0, {str(tmp_path)!r})
import numpy as np
import lmmod
m = lmmod.Model()
assert "decode" in lmmod.entries, lmmod.entries
sd = dict(np.load({str(tmp_path / "sd.npz")!r}))
m.load_state_dict(sd)
sd["blk.bias"] = np.ones_like(sd["blk.bias"])
try:
    m.load_state_dict(sd)
except RuntimeError as e:
    print("refused:", e)
"""
    out = run(["/usr/bin/python3", "-c", prog], env=env).stdout
    assert "refused:" in out and "'blk.bias' has 1 at [0, 0, 0, 1] where the model has 0" in out, out
    assert "the decode entry takes its values at lm.py:19 as a causal mask" in out, out


def test_cuda_fused_attention_nvcc_compiles_clean(tmp_path):
    """The CUDA target's attention kernels (the tiles' device functions) compile with nvcc
    (sm_80, sm_90, every warning an error) and pass --validate (NVRTC and libclang)."""
    from cuda_testlib import NVCC, RT
    if NVCC is None:
        pytest.skip("nvcc not found (the CUDA toolkit is not installed)")
    src = tmp_path / "attn.py"
    src.write_text(SRC.format(B=2, H=3, T=37, D=16, SCORES=SCALES["div"], MASK=MASKS["tril"], DROP="att"))
    cu = tmp_path / "m.cu"
    r = run([CTC, "compile", src, "--target", "cuda", "--validate", "-o", cu])
    assert "error" not in r.stderr and "ctc_attention_bwd_dkv<float, 32, 16, true, true>(" in cu.read_text()
    run([NVCC, "-c", "-gencode", "arch=compute_80,code=sm_80", "-gencode", "arch=compute_90,code=sm_90",
         "-Werror", "all-warnings", "-Xcompiler", "-Wall,-Wextra,-Werror", "-I", RT, cu, "-o", tmp_path / "m.o"],
        timeout=600)
