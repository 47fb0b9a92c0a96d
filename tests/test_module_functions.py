"""The C target writes each user module's call as a function of the entry, named after
the entry, the module's path and the phase (net_train_step calls
train_step_blocks_0_forward, which calls train_step_blocks_0_attn_forward, ...), nested
as the modules are; their kernels and values are the same as when written inline, so
the numbers are PyTorch's."""
import json
import re

import numpy as np
import torch

from ctc_testlib import CTC, compare, load_module, run, run_forward, st_write, state_dict_np, train_steps_match

MODEL = '''
import torch
import torch.nn as nn
import torch.nn.functional as F


class Attn(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)

    def forward(self, x):
        q, k, v = self.qkv(x).split(x.shape[-1], dim=-1)
        w = torch.softmax(q @ k.transpose(-2, -1) / 4.0, dim=-1)
        return self.proj(w @ v)


class Block(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.norm = nn.LayerNorm(d)
        self.attn = Attn(d)
        self.ff = nn.Linear(d, d)

    def forward(self, x):
        x = x + self.attn(self.norm(x))
        return x + torch.tanh(self.ff(x))


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(12, 16)
        self.blocks = nn.ModuleList([Block(16) for _ in range(2)])
        self.head = nn.Linear(16, 12)

    def forward(self, idx):
        x = self.emb(idx)
        for b in self.blocks:
            x = b(x)
        return self.head(x)


torch.manual_seed(0)
model = Net()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
example_inputs = {"forward": (torch.zeros(2, 5, dtype=torch.long),),
                  "train_step": (torch.zeros(2, 5, dtype=torch.long), torch.zeros(2, 5, dtype=torch.long))}


def train_step(idx, y):
    optimizer.zero_grad()
    loss = F.cross_entropy(model(idx).reshape(-1, 12), y.reshape(-1))
    loss.backward()
    optimizer.step()
    return loss
'''


def functions(code):
    """{name: body} of the file's static functions that are not ctc_ helpers."""
    return {m.group(2): m.group(3) for m in
            re.finditer(r"^static (void|int) ((?!ctc_)\w+)\(net_t \*m[^)]*\) \{\n(.*?)^\}\n", code, re.M | re.S)}


def test_module_calls_are_functions_called_in_order(tmp_path):
    p = tmp_path / "model.py"
    p.write_text(MODEL)
    c = tmp_path / "net.c"
    run([CTC, "compile", str(p), "-o", str(c)])
    code = c.read_text()
    fns = functions(code)
    fwd = ["train_step_blocks_%d_forward" % i for i in range(2)]
    attn = ["train_step_blocks_%d_attn_forward" % i for i in range(2)]
    bwd = ["train_step_blocks_%d_backward" % i for i in range(2)]
    for name in fwd + attn + bwd + ["forward_blocks_0_forward", "forward_blocks_0_attn_forward"]:
        assert name in fns, sorted(fns)
    # each defined before its caller, with the module and phase in its comment
    assert code.index("/* blocks.0.attn (Attn): forward of entry train_step */\nstatic void train_step_blocks_0_attn_forward(") \
        < code.index("static void train_step_blocks_0_forward(")
    # the block calls its attention; the entry calls the blocks forward in order, then backward in reverse
    assert "  train_step_blocks_0_attn_forward(m);\n" in fns["train_step_blocks_0_forward"]
    entry = code.split("int net_train_step(")[1].split("\n}\n")[0]
    calls = re.findall(r"^  (train_step_\w+)\(m\);$", entry, re.M)
    assert calls[:2] == fwd and [c for c in calls if c.endswith("_backward")][-2:] == bwd[::-1], calls
    # a function declares what it uses, read from the arena: the attention's weights are not the entry's
    assert "blocks_0_attn_qkv_weight = " in fns["train_step_blocks_0_attn_forward"]
    assert "blocks_0_attn_qkv_weight = " not in entry
    # --emit kernels names each kernel's module
    ks = run([CTC, "compile", str(p), "--emit", "kernels"]).stdout
    assert re.search(r"^  kernel \d+: gemm with epilogue over f32\[2,5,48\], in blocks\.0\.attn$", ks, re.M), ks
    assert re.search(r"^  kernel \d+: row over f32\[2,5,16\], rows of 16, 3 loops per row, in blocks\.1$", ks, re.M), ks
    # the generated file stays warning-free
    exe = tmp_path / "net"
    run([CTC, "build", str(p), "-o", str(exe), "--cflags=-Wall", "--cflags=-Wextra", "--cflags=-Werror"])


def test_module_functions_compute_what_pytorch_does(tmp_path):
    p = tmp_path / "model.py"
    p.write_text(MODEL)
    mod = load_module(str(p))
    idx = np.random.default_rng(1).integers(0, 12, size=(2, 5)).astype(np.int64)
    (got,) = run_forward(str(tmp_path), str(p), mod.model, [idx])
    with torch.no_grad():
        want = mod.model(torch.from_numpy(idx)).numpy()
    compare("logits", got, want, rtol=1e-4, atol=1e-5)


def test_an_index_check_inside_a_module_function_stops_the_entry(tmp_path):
    """The embedding's index check sits in a module's function: the function returns the
    status, and its caller returns it on."""
    src = MODEL.replace("self.emb = nn.Embedding(12, 16)\n", "self.emb = nn.Embedding(12, 16)\n        self.pre = Pre()\n") \
               .replace("x = self.emb(idx)", "x = self.pre(self.emb, idx)") \
               .replace("class Block(nn.Module):", "class Pre(nn.Module):\n    def forward(self, emb, idx):\n"
                        "        return emb(idx) * 2.0\n\n\nclass Block(nn.Module):")
    p = tmp_path / "model.py"
    p.write_text(src)
    c = tmp_path / "net.c"
    run([CTC, "compile", str(p), "-o", str(c)])
    fns = functions(c.read_text())
    assert re.search(r"^static int forward_pre_forward\(", c.read_text(), re.M), sorted(fns)
    assert re.search(r"const int ctc_rc = forward_pre_forward\(m, (batch, )?idx\);\n    if \(ctc_rc\) return ctc_rc;",
                     c.read_text()), c.read_text()
    exe = tmp_path / "net"
    run([CTC, "build", str(p), "-o", str(exe)])
    bad = tmp_path / "bad.npy"
    np.save(bad, np.array([[1, 2, 3, 12, 0], [0, 0, 0, 0, 0]], dtype=np.int64))
    r = run([exe, "infer", "--random-weights", "--input", bad, "--output", tmp_path / "o.npy"], check=False)
    assert r.returncode != 0 and "index 12 is out of range [0, 12) in 'idx' (element 3) read by embedding" in r.stderr, \
        r.stderr


def test_profile_sums_kernels_by_module(tmp_path):
    """--profile writes every kernel inline, each site naming its module: the table's last part
    gives each module call's kernel time, with the modules inside it, parents first; the trace's
    events carry the module."""
    p = tmp_path / "model.py"
    p.write_text(MODEL)
    exe = tmp_path / "net"
    run([CTC, "build", str(p), "-o", str(exe), "--profile", "--cflags=-Wall", "--cflags=-Wextra", "--cflags=-Werror"])
    c = tmp_path / "prof.c"
    run([CTC, "compile", str(p), "-o", str(c), "--profile"])
    assert not functions(c.read_text())   # every kernel a site of the entry itself
    trace = tmp_path / "t.json"
    out = run([exe, "bench", "train_step", "--iters", "2", "--warmup", "1", "--profile", trace]).stdout
    table = out[out.index("Modules: "):]
    rows = re.findall(r"^( *)(blocks\.\d(?:\.attn)?) +train_step +(forward|backward) +([\d.]+) +([\d.]+) ", table, re.M)
    got = [(len(ind), mod, ph) for ind, mod, ph, _, _ in rows]
    assert got == [(0, "blocks.0", "forward"), (2, "blocks.0.attn", "forward"),
                   (0, "blocks.1", "forward"), (2, "blocks.1.attn", "forward"),
                   (0, "blocks.1", "backward"), (2, "blocks.1.attn", "backward"),
                   (0, "blocks.0", "backward"), (2, "blocks.0.attn", "backward")], table
    for i in range(0, len(rows), 2):   # a block's total holds its attention's
        total, own = float(rows[i][3]), float(rows[i][4])
        assert total >= own and abs(total - own - float(rows[i + 1][3])) < 1e-3 + 1e-6 * total, table
    events = json.loads(trace.read_text())["traceEvents"]
    assert {e["args"].get("module") for e in events if e.get("ph") == "X"} >= {"blocks.0.attn", "blocks.1"}


CELL = '''
import torch
import torch.nn as nn
import torch.nn.functional as F


class Cell(nn.Module):
    def __init__(self, n, h):
        super().__init__()
        self.ih = nn.Linear(n, h)
        self.hh = nn.Linear(h, h)

    def forward(self, x, h):
        return torch.tanh(self.ih(x) + self.hh(h))


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.cell = Cell(6, 16)
        self.out = nn.Linear(16, 3)

    def forward(self, x):                   # x [T, B, 6]
        h = torch.zeros(x.shape[1], 16)
        for t in range(x.shape[0]):
            h = self.cell(x[t], h)
        return self.out(h)


torch.manual_seed(0)
model = Net()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
example_inputs = {"forward": (torch.zeros(12, 4, 6),),
                  "train_step": (torch.zeros(12, 4, 6), torch.zeros(4, dtype=torch.long))}


def train_step(x, y):
    optimizer.zero_grad()
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()
    return loss
'''


def test_a_cell_called_every_step_is_one_function_holding_the_time_loop(tmp_path):
    """A user cell called in a Python loop over time: the steps' kernels are one C loop
    (kernels/reroll.c), and the loop lies whole inside the cell's function; forward and
    three training steps match PyTorch."""
    p = tmp_path / "cell.py"
    p.write_text(CELL)
    c = tmp_path / "cell.c"
    run([CTC, "compile", str(p), "-o", str(c)])
    fns = functions(c.read_text())
    for name in ("train_step_cell_forward", "train_step_cell_backward"):
        assert name in fns and re.search(r"^  for \(int64_t t = 0; t < \d+; t\+\+\) \{", fns[name], re.M), sorted(fns)
    mod = load_module(str(p))
    exe = tmp_path / "net"
    run([CTC, "build", str(p), "-o", str(exe), "--cflags=-Wall", "--cflags=-Wextra", "--cflags=-Werror"])
    rng = np.random.default_rng(0)
    w = tmp_path / "w0.safetensors"
    st_write(w, state_dict_np(mod.model))
    batches = [(rng.standard_normal((12, 4, 6)).astype(np.float32), rng.integers(0, 3, 4).astype(np.int64))
               for _ in range(3)]
    train_steps_match(str(tmp_path), exe, mod, w, batches, "cell")
