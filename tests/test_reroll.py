"""Time loops stay loops (issue 28 item 5): a recurrence that staging unrolls (nn.GRU,
nn.LSTM, nn.RNN, a cell called in `for t in range(T)`) and its backward through time are
written as C loops over one step's code (kernels/reroll.c finds the repeated steps, the
memory plan lays their values out at one stride, kernels/reroll.c's kn_reroll_loops decides
the loops on the kernels and the plan, codegen_c/emit_c.c writes them).
The generated C stays small and builds quickly; forward and training steps still match
PyTorch (float32: rtol 1e-4 forward, 1e-3 after training steps)."""
import re
import time

import numpy as np
import pytest
import torch

from ctc_testlib import CTC, compare, load_module, run, st_read, st_write, state_dict_np, train_steps_match
from cuda_testlib import rt_objects  # noqa: F401 (a fixture)

CHAR_GRU = """\
import torch
import torch.nn as nn
import torch.nn.functional as F


class CharGRU(nn.Module):
    def __init__(self, vocab=65, emb=32, hidden=128, layers=2):
        super().__init__()
        self.emb = nn.Embedding(vocab, emb)
        self.gru = nn.GRU(emb, hidden, layers, batch_first=True)
        self.head = nn.Linear(hidden, vocab)

    def forward(self, x):
        h, _ = self.gru(self.emb(x))
        return self.head(h)


model = CharGRU()
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)


def train_step(x, y):
    optimizer.zero_grad()
    logits = model(x)
    loss = F.cross_entropy(logits.reshape(-1, 65), y.reshape(-1))
    loss.backward()
    optimizer.step()
    return loss


example_inputs = {"forward": (torch.zeros(16, 32, dtype=torch.long),),
                  "train_step": (torch.zeros(16, 32, dtype=torch.long), torch.zeros(16, 32, dtype=torch.long))}
"""

# a hand-written cell looped in forward, and the layers' other recurrences
CELLS = """\
import torch
import torch.nn as nn
import torch.nn.functional as F


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.cell = nn.LSTMCell(6, 12)
        self.lstm = nn.LSTM(6, 10, 2)
        self.rnn = nn.RNN(6, 8, nonlinearity='relu')
        self.wx = nn.Linear(6, 12)
        self.wh = nn.Linear(12, 12, bias=False)
        self.out = nn.Linear(12 + 12 + 10 + 8, 5)

    def forward(self, x):                       # x [T, B, 6]
        B = x.shape[1]
        h = torch.zeros(B, 12)
        c = torch.zeros(B, 12)
        g = torch.zeros(B, 12)
        for t in range(x.shape[0]):
            h, c = self.cell(x[t], (h, c))
            g = torch.tanh(self.wx(x[t]) + self.wh(g))
        o, _ = self.lstm(x)
        r, _ = self.rnn(x)
        return self.out(torch.cat([h, g, o[-1], r[-1]], dim=1))


model = Net()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)


def train_step(x, y):
    optimizer.zero_grad()
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()
    return loss


example_inputs = {"forward": (torch.zeros(20, 4, 6),),
                  "train_step": (torch.zeros(20, 4, 6), torch.zeros(4, dtype=torch.long))}
"""


def _check(tmp_path, src, name, x_fwd, batches, steps=2, batch3=False):
    """Builds src, checks forward and `steps` training steps against PyTorch; returns
    the generated C text and the build's seconds."""
    path = tmp_path / f"{name}.py"
    path.write_text(src)
    exe = tmp_path / "net"
    t0 = time.time()
    run([CTC, "build", path, "-o", exe])
    build_s = time.time() - t0
    run([CTC, "compile", path, "-o", tmp_path / "gen.c"])
    c_text = (tmp_path / "gen.c").read_text()
    mod = load_module(str(path), "reroll_" + name)
    w = tmp_path / "w0.safetensors"
    st_write(w, state_dict_np(mod.model))
    np.save(tmp_path / "x.npy", x_fwd)
    run([exe, "infer", "--weights", w, "--input", tmp_path / "x.npy", "--output", tmp_path / "o.npy"])
    mod.model.eval()
    with torch.no_grad():
        want = mod.model(torch.from_numpy(x_fwd))
    compare(f"{name} forward", np.load(tmp_path / "o.npy"), want.numpy(), 1e-4, 1e-5)
    if batch3:   # the loops' offsets at a smaller batch (the forward entry takes 1..N)
        np.save(tmp_path / "x3.npy", x_fwd[:3])
        run([exe, "infer", "--weights", w, "--input", tmp_path / "x3.npy", "--output", tmp_path / "o3.npy"])
        with torch.no_grad():
            want3 = mod.model(torch.from_numpy(x_fwd[:3]))
        compare(f"{name} forward at batch 3", np.load(tmp_path / "o3.npy"), want3.numpy(), 1e-4, 1e-5)
    mod.model.train()
    train_steps_match(str(tmp_path), exe, mod, w, batches[:steps], name)
    return c_text, build_s


def test_char_gru_is_a_loop(tmp_path):
    rng = np.random.default_rng(0)
    x = rng.integers(0, 65, (16, 32)).astype(np.int64)
    batches = [(rng.integers(0, 65, (16, 32)).astype(np.int64), rng.integers(0, 65, (16, 32)).astype(np.int64))
               for _ in range(2)]
    c_text, build_s = _check(tmp_path, CHAR_GRU, "chargru", x, batches, batch3=True)
    lines = c_text.count("\n")
    loops = re.findall(r"/\* for t in range\((\d+)\): chargru\.py:14", c_text)
    print(f"\n2-layer GRU over 32 steps: {lines} lines of C, {len(loops)} loops {loops}, "
          f"ctc build {build_s:.1f} s (under load)")
    # both layers' forward, in forward and in the training step, and both layers' backward
    assert len(loops) >= 6, loops
    # the backward sweeps too run every step in their loop (kn_reroll_pad): the first step's sums
    # start from zeros written before the loop, the last computes the initial state's dead gradient
    assert all(int(n) >= 31 for n in loops), loops
    assert loops.count("32") >= 6, loops
    assert re.search(r"broadcast\(0\.0f\) -> \w+ f32\[384,128\] \*/", c_text), "the weight gradient's sum starts at zero"
    # the zero initial state is read from memory like every later step's state: the first
    # forward step is in the loop (every forward loop runs all 32 steps)
    assert loops.count("32") >= 4, loops
    # the gate slices (chunks of the gate projections) are read in place; only the one the
    # backward reads again is copied (so that the slice, not its whole root, stays alive)
    body = c_text[c_text.index("chargru_train_step("):]
    fwd_steps = [m.start() for m in re.finditer(r"/\* for t in range\(32\): chargru\.py:14", body)]
    step = body[fwd_steps[0]:body.index("\n  }\n", fwd_steps[0])]
    copies = re.findall(r"/\* chargru\.py:14  slice\(.*\*/", step)
    assert len(copies) >= 6 and sum("a strided view, no code" not in v for v in copies) <= 1, copies
    # the input projection's gradient is one concatenation of the steps' pieces, not a
    # zero-filled array added to at every step (quadratic in the sequence length)
    assert "unslice(" not in c_text
    assert re.search(r"/\* parts [01]\.\.31: \[[01], 32\) of axis 0", body), "the pieces' concatenation as one loop"
    # unrolled: 29,494 lines; 4,284 with the text-matched loops of the last session; 3,749 with
    # the loops on the kernels and the plan; 3,541 with the per-step slices of one array as one
    # comment (-124) and equal-shaped concatenations as one loop nest (-84); 3,436 with Adam's
    # bias corrections computed once (-137) and sigmoid's exp as a helper (+32); 2,996 with the
    # GEMM microkernels in the runtime's header (runtime_min/ctc_gemm_simd.h, -442; 3,001 with
    # the row kernels' per-row loads and the bit-level tanh); 2,533 with the backward's first
    # and last step of each layer in its loop (the first has no incoming recurrent gradient and
    # starts the weight gradients' sums, the last drops the dead gradient of the initial state;
    # kn_reroll_pad pads both to the loop's step); 2,023 with the optimizer's update of the 11
    # parameters as one loop over a table (kernels/foreach.c, -510); 1,989 with the in-place
    # parameter updates counted in one comment, not listed (their declarations name them);
    # 1,992 with the GEMMs' operands kept from the forward, not recomputed (autograd_ad/remat.c);
    # 1,995 with ctc_sum's 32 lanes in 4 rows of 8 (codegen_c/kernels.c); 2,053 with the
    # recurrent weights packed once before each loop (kernels/prepack.c: 3 lines a loop, +38 of
    # helpers); 2,069 with ctc_tanh_f32's polynomials as fused multiply-adds (its CTC_FMA_F32
    # macro and one multiply-add a line, +16); 2,088 with ctc_exp_f32's and sigmoid's
    # ctc_exp_cr_f32's the same way (+19); 2,082 with both macros in one text (-6); 2,112 with the
    # CTC_ALWAYS_INLINE macro (+5) and the cross-entropy's log as the vectorisable ctc_log_f32 (+25);
    # 2,125 with its split and special values as helpers of their own, shared with log2 and log10 (+13);
    # 2,132 with a GEMM of one row of C reading B as it lies (ctc_matmul_block_f32, +7); 2,138 by
    # 2026-12-03; 2,142 with NEON's one-row branch (ctc_gemv_neon_f32, +4).
    assert lines < 2150, lines


def _steps_bits(exe, tmp_path, w, batches, tag, threads):
    """Two training steps from the weights w, then the forward: the files' bytes."""
    out = []
    for step, (x, y) in enumerate(batches):
        np.save(tmp_path / "x.npy", x)
        np.save(tmp_path / "y.npy", y)
        nxt = tmp_path / f"{tag}{step + 1}.safetensors"
        run([exe, "--threads", threads, "run", "train_step", "--weights", w, "--input", tmp_path / "x.npy", "--input",
             tmp_path / "y.npy", "--output", tmp_path / f"{tag}_loss.npy", "--save", nxt, "--save-training-state"])
        out.append(np.load(tmp_path / f"{tag}_loss.npy").tobytes())
        w = nxt
    run([exe, "--threads", threads, "run", "forward", "--weights", w, "--input", tmp_path / "x.npy", "--output",
         tmp_path / f"{tag}_out.npy"])
    out.append(np.load(tmp_path / f"{tag}_out.npy").tobytes())
    return out, {k: v.tobytes() for k, v in st_read(w).items()}


@pytest.mark.parametrize("isa", ["native", "haswell"])
def test_recurrent_weights_packed_once(tmp_path, isa):
    """A GEMM of every step whose op(B) is a weight (the recurrent weight, forward and backward)
    reads its panels packed once before the loop (kernels/prepack.c, ctc_gemm_pack_f32 into the
    arena above the activations) instead of packing the weight at every step: the same sums in
    the same order, so the program computes the bits of the --profile build (no loops, each GEMM
    packing its own B), at 1 and 2 threads, with AVX-512 and AVX2 (-march=haswell)."""
    if isa == "haswell" and not re.search(r"\bavx2\b", open("/proc/cpuinfo").read()):
        pytest.skip("the CPU has no AVX2")
    path = tmp_path / "chargru.py"
    path.write_text(CHAR_GRU)
    run([CTC, "compile", path, "-o", tmp_path / "gen.c"])
    c_text = (tmp_path / "gen.c").read_text()
    body = c_text[c_text.index("int chargru_train_step("):]
    # before each of the four loops whose step multiplies by a layer's recurrent weight: its pack
    packs = re.findall(r"  ctc_gemm_pack_f32\((\d), (\d), (\d+), (\d+), (gru_weight_hh_l[01]), \d+, (\w+), (\d+)\);\n"
                       r"  for \(int64_t t = 0; t < 32; t\+\+\)", body)
    assert sorted((p[1], p[4]) for p in packs) == [("0", "gru_weight_hh_l0"), ("0", "gru_weight_hh_l1"),
                                                   ("1", "gru_weight_hh_l0"), ("1", "gru_weight_hh_l1")], packs
    for ta, tb, n, k, w, name, ldp in packs:
        assert (n, k) == (("384", "128") if tb == "1" else ("128", "384")) and int(ldp) == (int(n) + 31) // 32 * 32
        loop = body[body.index(f", {name}, {ldp});\n  for (int64_t t"):]
        loop = loop[:loop.index("\n  }\n")]
        assert re.search(rf"ctc_matmul(_block)?_pk_f32\({ta}, {tb}, 0, .*, {w}, \d+, {name}, {ldp}, ", loop), loop[:3000]
    r = run([CTC, "compile", path, "-o", tmp_path / "x.c", "--stats"])
    assert re.search(r"entry train_step: .*activations \d+ bytes and 196608 of a time loop's packed weights", r.stderr)
    flags = [] if isa == "native" else ["--cflags=-march=haswell"]
    exe, ref = tmp_path / "net", tmp_path / "net_prof"
    run([CTC, "build", path, "-o", exe, *flags])
    run([CTC, "build", path, "--profile", "-o", ref, *flags])
    torch.manual_seed(0)
    mod = load_module(str(path), "reroll_packed_" + isa)
    w0 = tmp_path / "w0.safetensors"
    st_write(w0, state_dict_np(mod.model))
    rng = np.random.default_rng(5)
    batches = [(rng.integers(0, 65, (16, 32)).astype(np.int64), rng.integers(0, 65, (16, 32)).astype(np.int64))
               for _ in range(2)]
    for threads in ("1", "2"):
        got = _steps_bits(exe, tmp_path, w0, batches, "p" + threads, threads)
        want = _steps_bits(ref, tmp_path, w0, batches, "r" + threads, threads)
        assert got[0] == want[0], f"{isa}, {threads} threads: the losses or the forward differ from the --profile build"
        assert sorted(got[1]) == sorted(want[1])
        for k in got[1]:
            assert got[1][k] == want[1][k], f"{isa}, {threads} threads: {k} differs from the --profile build's"


def test_cells_and_layers(tmp_path):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((20, 4, 6)).astype(np.float32)
    batches = [(rng.standard_normal((20, 4, 6)).astype(np.float32), rng.integers(0, 5, (4,)).astype(np.int64))
               for _ in range(2)]
    c_text, build_s = _check(tmp_path, CELLS, "cells", x, batches)
    loops = re.findall(r"/\* for t in range\((\d+)\)", c_text)
    print(f"\ncells and layers over 20 steps: {c_text.count(chr(10))} lines of C, {len(loops)} loops, "
          f"ctc build {build_s:.1f} s (under load)")
    assert len(loops) >= 4, loops
    # nn.LSTM's and nn.RNN's backward sweeps: the first step joins the loop (its sums start at
    # zero); the last stays unrolled (it reads the zero initial state where the loop recomputes
    # the step before's h), so 19 of the 20 steps
    bwd = [(m.group(2), int(m.group(1))) for m in re.finditer(r"/\* for t in range\((\d+)\): cells\.py:(\d+)", c_text)
           if "grad" in c_text[m.end():m.end() + 600] and m.group(2) in ("24", "25")]
    assert len(bwd) == 3 and all(n >= 19 for _, n in bwd), bwd


# one block with shared weights applied in a Python loop (not a recurrence over time): its
# backward also adds a carried gradient and sums the weights' gradients over the steps
SHARED_BLOCK = """\
import torch
import torch.nn as nn
import torch.nn.functional as F


class Deep(nn.Module):
    def __init__(self):
        super().__init__()
        self.inp = nn.Linear(10, 24)
        self.block = nn.Linear(24, 24)
        self.out = nn.Linear(24, 3)

    def forward(self, x):
        h = self.inp(x)
        for _ in range(12):
            h = h + torch.tanh(self.block(h))
        return self.out(h)


model = Deep()
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)


def train_step(x, y):
    optimizer.zero_grad()
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()
    return loss


example_inputs = {"forward": (torch.zeros(8, 10),), "train_step": (torch.zeros(8, 10), torch.zeros(8, dtype=torch.long))}
"""


def test_shared_block_backward_loop(tmp_path):
    """The backward's first step (no carried gradient yet, the sums' first terms) is padded
    with zeros into the loop, and the values stay PyTorch's."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((8, 10)).astype(np.float32)
    batches = [(rng.standard_normal((8, 10)).astype(np.float32), rng.integers(0, 3, (8,)).astype(np.int64))
               for _ in range(2)]
    c_text, _ = _check(tmp_path, SHARED_BLOCK, "shared", x, batches)
    body = c_text[c_text.index("deep_train_step("):]
    bwd = [int(n) for n, _ in re.findall(r"/\* for t in range\((\d+)\): shared\.py:16, a step of (\d+) kernels", body)]
    # the last step writes the final sums, which the optimizer's update reads in the same kernel
    assert bwd and max(bwd) >= 11, bwd
    assert re.search(r"broadcast\(0\.0f\) -> \w+ f32\[24,24\] \*/", body), "the weight gradient's sum starts at zero"


def test_activations_stay_small(tmp_path):
    """Reading slices in place (a folded view keeps its root alive) and one block per family
    must not grow the training step's activations: no more than the unrolled program's
    5.65 MB (the text-matched loops took 6.19 MB, the per-step zero-filled gradient of the
    input projection among them)."""
    path = tmp_path / "chargru.py"
    path.write_text(CHAR_GRU)
    r = run([CTC, "compile", path, "-o", tmp_path / "x.c", "--stats"])
    m = re.search(r"entry train_step: activations (\d+) bytes", r.stderr)
    assert m, r.stderr
    print(f"\ntrain_step activations: {int(m.group(1)) / 1e6:.2f} MB")
    assert int(m.group(1)) < 5_650_000, m.group(1)


SMALL_GRU = CHAR_GRU.replace("vocab=65, emb=32, hidden=128, layers=2", "vocab=11, emb=6, hidden=8, layers=2") \
    .replace("reshape(-1, 65)", "reshape(-1, 11)").replace("zeros(16, 32", "zeros(3, 9")


def test_cuda_target_shares_the_layout(tmp_path, rt_objects):
    """--target cuda plans with the same families but writes every step (emulated here):
    its forward and training step equal the C target's loops."""
    from cuda_testlib import emulated, run_env
    path = tmp_path / "small_gru.py"
    path.write_text(SMALL_GRU)
    specs = ["--input", "x=i64[3,9]", "--input", "y=i64[3,9]"]
    cu, emu = emulated(tmp_path, path, specs, rt_objects)
    assert "for t in range(" not in cu.read_text()
    cexe = tmp_path / "m_c"
    run([CTC, "build", path, "-o", cexe, *specs])
    run([CTC, "compile", path, "-o", tmp_path / "m.c", *specs])
    assert "for t in range(" in (tmp_path / "m.c").read_text()
    mod = load_module(str(path), "reroll_small_gru")
    w = tmp_path / "w.safetensors"
    st_write(w, state_dict_np(mod.model))
    rng = np.random.default_rng(2)
    np.save(tmp_path / "x.npy", rng.integers(0, 11, (3, 9)).astype(np.int64))
    np.save(tmp_path / "y.npy", rng.integers(0, 11, (3, 9)).astype(np.int64))
    got = {}
    for tag, exe in (("cuda", emu), ("c", cexe)):
        run_env([exe, "run", "forward", "--weights", w, "--input", tmp_path / "x.npy", "--output", tmp_path / f"{tag}.npy"])
        run_env([exe, "run", "train_step", "--weights", w, "--input", tmp_path / "x.npy", "--input", tmp_path / "y.npy",
                 "--output", tmp_path / f"{tag}_loss.npy", "--save", tmp_path / f"{tag}.safetensors"])
        got[tag] = (np.load(tmp_path / f"{tag}.npy"), np.load(tmp_path / f"{tag}_loss.npy"),
                    st_read(tmp_path / f"{tag}.safetensors"))
    compare("forward, cuda vs C", got["cuda"][0], got["c"][0], 1e-5, 1e-6)
    compare("loss, cuda vs C", got["cuda"][1], got["c"][1], 1e-5, 1e-6)
    for k, v in got["c"][2].items():
        compare(f"{k} after a step, cuda vs C", got["cuda"][2][k], v, 1e-5, 1e-6)


def test_per_step_slices_are_one_comment(tmp_path):
    """The backward's per-step slices of the output gradient (views read in place, no code) are
    one comment naming the first and last step and the views' names, not one comment per step."""
    path = tmp_path / "chargru.py"
    path.write_text(CHAR_GRU)
    run([CTC, "compile", path, "-o", tmp_path / "g.c"])
    c_text = (tmp_path / "g.c").read_text()
    runs = re.findall(r"/\* chargru\.py:14  slice\((\w+)\) start:step 0\.\.31:1 0:1 0:1 -> (\w+)\.\.(\w+) "
                      r"f32\[1,16,128\] each: 32 strided views \(their readers index them in place\), no code \*/", c_text)
    assert len(runs) == 2, runs   # one per layer
    for root, _, _ in runs:   # no comment of a single step's slice of that array is left
        assert not re.search(rf"slice\({root}\) start:step \d+:1 0:1 0:1 -> ", c_text), root


CAT3 = """\
import torch
import torch.nn as nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(6, 5)
        self.b = nn.Linear(6, 5)

    def forward(self, x):                       # x [4, 3, 6]
        p, q = self.a(x), self.b(x)
        y = torch.cat([torch.tanh(p), q * 2, p - q], dim=1)      # equal parts on a middle axis
        z = torch.cat([torch.relu(p), torch.tanh(q[:, :2])], dim=1)   # unequal parts
        return torch.cat([y, z], dim=1).sum(dim=2, keepdim=True) + y[:, :1, :1]


model = Net()
example_inputs = {"forward": (torch.zeros(4, 3, 6),)}
"""


def test_concat_of_equal_parts_is_one_nest(tmp_path):
    """A concatenation whose parts share one shape is one loop nest with a store per part (part k
    at k part-widths along the axis); unequal parts keep a nest each. Values as PyTorch's."""
    path = tmp_path / "cat3.py"
    path.write_text(CAT3)
    run([CTC, "compile", path, "-o", tmp_path / "g.c"])
    c_text = (tmp_path / "g.c").read_text()
    assert "/* parts 0..2: [3 k, 3 (k + 1)) of axis 1 for part k, in one loop nest */" in c_text, c_text
    assert "/* part 1: [3, 5) of axis 1 */" in c_text   # z's parts differ
    exe = tmp_path / "net"
    run([CTC, "build", path, "-o", exe])
    mod = load_module(str(path), "reroll_cat3")
    w = tmp_path / "w.safetensors"
    st_write(w, state_dict_np(mod.model))
    x = np.random.default_rng(3).standard_normal((4, 3, 6)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    run([exe, "infer", "--weights", w, "--input", tmp_path / "x.npy", "--output", tmp_path / "o.npy"])
    with torch.no_grad():
        want = mod.model(torch.from_numpy(x))
    compare("cat3 forward", np.load(tmp_path / "o.npy"), want.numpy(), 1e-4, 1e-5)
