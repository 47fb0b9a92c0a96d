"""An optimizer's update of each parameter as one loop over a table (issue 28 item 5):
optimizer.step() stages the same elementwise update once per parameter; the generated C
writes the run of identical per-parameter kernels as one `for` over a static table of the
parameters' arrays (arena offsets) and element counts, as PyTorch's foreach optimizers
(kernels/foreach.c decides it on the kernels and the memory plan, codegen_c/foreach_c.c
writes it). Training still matches PyTorch 1.13 (float32: rtol 1e-3 after the steps), and
bit for bit the same program written kernel by kernel (a --profile build, which keeps every
kernel as its own timed site, runs the same schedule and arithmetic)."""
import re

import numpy as np
import pytest
import torch

from ctc_testlib import CTC, compare, load_module, run, st_read, st_write, state_dict_np

MODEL = """\
import torch
import torch.nn as nn
import torch.nn.functional as F


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(11, 6)
        self.fc1 = nn.Linear(6, 24)
        self.norm = nn.LayerNorm(24)
        self.fc2 = nn.Linear(24, 24)
        self.head = nn.Linear(24, 5)

    def forward(self, x):
        h = self.norm(torch.tanh(self.fc1(self.emb(x))))
        return self.head(F.relu(self.fc2(h)) + h).mean(1)


model = Net()
optimizer = OPTIMIZER


def train_step(x, y):
    optimizer.zero_grad()
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()
    return loss


example_inputs = {"forward": (torch.zeros(4, 7, dtype=torch.long),),
                  "train_step": (torch.zeros(4, 7, dtype=torch.long), torch.zeros(4, dtype=torch.long))}
"""

OPTIMIZERS = {
    "adam": "torch.optim.Adam(model.parameters(), lr=1e-2)",
    "adamw": "torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.1)",
    "sgd_momentum": "torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=1e-3)",
    "rmsprop": "torch.optim.RMSprop(model.parameters(), lr=1e-2)",
}


def _steps(exe, tmp_path, w, batches, tag):
    for step, (x, y) in enumerate(batches):
        np.save(tmp_path / "x.npy", x)
        np.save(tmp_path / "y.npy", y)
        nxt = tmp_path / f"{tag}{step + 1}.safetensors"
        run([exe, "run", "train_step", "--weights", w, "--input", tmp_path / "x.npy", "--input", tmp_path / "y.npy",
             "--output", tmp_path / f"{tag}_loss{step}.npy", "--save", nxt, "--save-training-state"])
        w = nxt
    return st_read(w)


@pytest.mark.parametrize("opt", sorted(OPTIMIZERS))
def test_update_table(tmp_path, opt):
    src = MODEL.replace("OPTIMIZER", OPTIMIZERS[opt])
    path = tmp_path / "net.py"
    path.write_text(src)
    run([CTC, "compile", path, "-o", tmp_path / "gen.c"])
    c_text = (tmp_path / "gen.c").read_text()
    body = c_text[c_text.index("int net_train_step("):]
    # one table loop over the parameters' updates, no kernel per parameter after it
    tables = re.findall(r"static const struct \{ int64_t n; size_t ([\w, ]+); \} (\w+)\[(\d+)\] = \{\n(.*?)\n  \};",
                        body, re.S)
    assert len(tables) == 1, tables
    fields, name, count, rows = tables[0]
    rows = rows.split("\n")
    assert len(rows) == int(count) and int(count) >= 8, rows   # 10 parameters; a GEMM may take the last one's
    assert "param" in fields.split(", ") and "grad" in fields.split(", "), fields
    for pname in ("fc1.weight", "norm.bias", "fc2.bias"):
        assert any(r.endswith(f"/* {pname} " + r.split("/* " + pname + " ")[-1]) for r in rows if pname in r), pname
    after = body[body.index(f"{name}[{count}] = {{"):body.index("/* outputs */")]
    assert len(re.findall(r"/\* kernel \d+:", after)) == 1, "the table's loop runs one kernel's code"
    assert f"for (int64_t i = 0; i < {name}[p].n; i++)" in after
    # the optimizer state starts as zeros: one memset for the run of its tensors
    init = c_text[c_text.index("int net_init("):]
    init = init[:init.index("return CTC_OK;")]
    assert re.search(r"/\* \d+ tensors, optimizer\..* \.\. optimizer\..*: zeros \*/", init), init
    assert init.count("memset(") <= 2, init

    # training: PyTorch 1.13 within tolerance, the kernel-by-kernel build bit for bit
    exe, ref = tmp_path / "net", tmp_path / "net_prof"
    run([CTC, "build", path, "-o", exe])
    run([CTC, "build", path, "--profile", "-o", ref])
    torch.manual_seed(0)   # the model's initial weights: the same every run
    mod = load_module(str(path), "foreach_" + opt)
    w0 = tmp_path / "w0.safetensors"
    st_write(w0, state_dict_np(mod.model))
    rng = np.random.default_rng(3)
    batches = [(rng.integers(0, 11, (4, 7)).astype(np.int64), rng.integers(0, 5, (4,)).astype(np.int64))
               for _ in range(3)]
    got = _steps(exe, tmp_path, w0, batches, "w")
    want_bits = _steps(ref, tmp_path, w0, batches, "r")
    for step, (x, y) in enumerate(batches):
        lt = float(mod.train_step(torch.from_numpy(x), torch.from_numpy(y)))
        compare(f"{opt} loss at step {step}", float(np.load(tmp_path / f"w_loss{step}.npy")), lt, 1e-4, 1e-6)
    for k, v in mod.model.state_dict().items():
        compare(f"{opt} {k} after 3 steps", got[k], v.numpy(), 1e-3, 1e-5)
    assert sorted(got) == sorted(want_bits)
    for k in got:
        assert got[k].tobytes() == want_bits[k].tobytes(), f"{opt} {k}: the table loop changed the bits"
