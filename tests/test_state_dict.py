"""Weights files go back into PyTorch (issue 28, item 2).

`--save` (of `./net train` and `./net run`), the C API's `<model>_save` and the
Python module's `save()` write exactly the model's `state_dict()`: the same keys in
the same order, a tied parameter under each of its names (nanoGPT's
`transformer.wte.weight = lm_head.weight`), persistent buffers (running_mean,
num_batches_tracked) included, non-persistent ones (a causal mask) left out. So
PyTorch's strict `model.load_state_dict(torch.load(p))` takes it. The training state
(optimizer moments and steps, the learning rate, the scheduler, the random stream)
goes only into checkpoints and into files written with `--save-training-state`.
`ctc check`, `--stats` and `./net info` count parameters as PyTorch does (a tied
tensor once), buffers and training state apart."""
import os
import re
import subprocess
import textwrap

import numpy as np
import pytest
import torch

from ctc_testlib import CTC, compare, load_module, run, st_read

GPT = """\
import math
import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, n_embd, n_head, block_size):
        super().__init__()
        self.ln_1 = nn.LayerNorm(n_embd)
        self.c_attn = nn.Linear(n_embd, 3 * n_embd, bias=False)   # a key bias has no gradient
        self.c_proj = nn.Linear(n_embd, n_embd)
        self.ln_2 = nn.LayerNorm(n_embd)
        self.fc = nn.Linear(n_embd, 4 * n_embd)
        self.proj = nn.Linear(4 * n_embd, n_embd)
        self.n_head = n_head
        mask = torch.tril(torch.ones(block_size, block_size)).view(1, 1, block_size, block_size)
        self.register_buffer("bias", mask, persistent=False)

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=2)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float('-inf'))
        y = (F.softmax(att, dim=-1) @ v).transpose(1, 2).contiguous().view(B, T, C)
        x = x + self.c_proj(y)
        return x + self.proj(F.gelu(self.fc(self.ln_2(x))))


class GPT(nn.Module):
    def __init__(self, vocab=32, n_embd=16, n_head=2, block_size=8, n_layer=2):
        super().__init__()
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(vocab, n_embd),
            wpe=nn.Embedding(block_size, n_embd),
            h=nn.ModuleList([Block(n_embd, n_head, block_size) for _ in range(n_layer)]),
            ln_f=nn.LayerNorm(n_embd),
        ))
        self.lm_head = nn.Linear(n_embd, vocab, bias=False)
        self.transformer.wte.weight = self.lm_head.weight   # weight tying, as nanoGPT

    def forward(self, idx):
        B, T = idx.size()
        pos = torch.arange(0, T, dtype=torch.long)
        x = self.transformer.wte(idx) + self.transformer.wpe(pos)
        for block in self.transformer.h:
            x = block(x)
        return self.lm_head(self.transformer.ln_f(x))


model = GPT()
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.1)


def train_step(x, y):
    optimizer.zero_grad()
    logits = model(x)
    loss = F.cross_entropy(logits.view(-1, logits.size(-1)), y.view(-1))
    loss.backward()
    optimizer.step()
    return loss


example_inputs = {"forward": (torch.randint(0, 32, (4, 8)),),
                  "train_step": (torch.randint(0, 32, (4, 8)), torch.randint(0, 32, (4, 8)))}
"""

CNN = """\
import torch
import torch.nn as nn
import torch.nn.functional as F


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(4)
        self.fc = nn.Linear(4 * 6 * 6, 3)

    def forward(self, x):
        return self.fc(torch.flatten(F.max_pool2d(F.relu(self.bn(self.conv(x))), 2), 1))


model = Net()
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)


def train_step(x, y):
    optimizer.zero_grad()
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()
    return loss


example_inputs = {"forward": (torch.randn(4, 1, 12, 12),),
                  "train_step": (torch.randn(4, 1, 12, 12), torch.randint(0, 3, (4,)))}
"""

MODELS = {"gpt": (GPT, "GPT"), "cnn": (CNN, "Net")}


def data(name):
    rng = np.random.default_rng(3)
    if name == "gpt":
        return rng.integers(0, 32, (8, 8)), rng.integers(0, 32, (8, 8))
    return rng.standard_normal((8, 1, 12, 12)).astype(np.float32), rng.integers(0, 3, 8)


@pytest.fixture(scope="module", params=sorted(MODELS))
def built(request, tmp_path_factory):
    """(name, folder, the model file as a module): the program ./net, the data x.npy/y.npy
    (two batches of 4), and init.pt, PyTorch's own initial state_dict."""
    name = request.param
    d = tmp_path_factory.mktemp(name)
    (d / "m.py").write_text(MODELS[name][0])
    r = run([CTC, "build", d / "m.py", "-o", d / "net", "--stats"])
    (d / "stats.txt").write_text(r.stderr)
    x, y = data(name)
    np.save(d / "x.npy", x)
    np.save(d / "y.npy", y)
    mod = load_module(d / "m.py", f"sd_{name}")
    torch.manual_seed(1)
    net = getattr(mod, MODELS[name][1])()
    torch.save(net.state_dict(), d / "init.pt")
    return name, d, mod


def train2(d, *extra):
    """Two training steps from PyTorch's initial weights (batch 4, data in order)."""
    run([d / "net", "train", "--data", d / "x.npy", "--labels", d / "y.npy", "--batch", "4", "--epochs", "1",
         "--no-shuffle", "--weights", d / "init.pt", *extra])


def pytorch_after_two_steps(name, d, mod):
    """The model file's own train_step, twice, from init.pt on the same batches."""
    mod.model.load_state_dict(torch.load(d / "init.pt"), strict=True)
    mod.optimizer.state.clear()
    x, y = data(name)
    for i in range(2):
        mod.train_step(torch.from_numpy(x[4 * i:4 * i + 4]), torch.from_numpy(y[4 * i:4 * i + 4]))
    return mod.model.state_dict()


def fresh(name, mod):
    return getattr(mod, MODELS[name][1])()


@pytest.mark.parametrize("ext", [".pt", ".safetensors"])
def test_saved_weights_load_strictly(built, tmp_path, ext):
    """`./net train --save` after two steps: the file's keys are the model's state_dict's
    in order (tied and buffers included, no training state), a strict load_state_dict
    takes it, and the values are PyTorch's after the same two steps."""
    name, d, mod = built
    out = tmp_path / f"w{ext}"
    train2(d, "--save", out)
    if ext == ".pt":
        sd = torch.load(out)
    else:
        sd = {k: torch.from_numpy(v.copy()) for k, v in st_read(out).items()}
    model = fresh(name, mod)
    assert list(sd) == list(model.state_dict())
    model.load_state_dict(sd, strict=True)
    want = pytorch_after_two_steps(name, d, mod)
    for k, v in model.state_dict().items():
        assert v.dtype == want[k].dtype, k
        compare(k, v.numpy(), want[k].numpy(), 1e-4, 1e-5)
    if name == "gpt":   # one tensor under both names
        assert torch.equal(sd["lm_head.weight"], sd["transformer.wte.weight"])
        assert not any(k.endswith(".bias") and v.dim() == 4 for k, v in sd.items())   # the mask is not persistent
    else:
        assert int(sd["bn.num_batches_tracked"]) == 2 and sd["bn.num_batches_tracked"].dtype == torch.int64


def test_training_state_is_opt_in_and_resumes(built, tmp_path):
    """--save-training-state appends the training state after the state_dict; training on
    from that file (--weights) ends where one uninterrupted run ends, bit for bit."""
    name, d, _ = built
    common = [d / "net", "train", "--data", d / "x.npy", "--labels", d / "y.npy", "--batch", "4", "--no-shuffle"]
    run(common + ["--epochs", "2", "--weights", d / "init.pt", "--save", tmp_path / "two.safetensors"])
    run(common + ["--epochs", "1", "--weights", d / "init.pt", "--save", tmp_path / "one.safetensors",
                  "--save-training-state"])
    one = st_read(tmp_path / "one.safetensors")
    keys = list(one)
    nsd = len(torch.load(d / "init.pt"))
    assert all(k.startswith("optimizer.") or k.startswith("scheduler") for k in keys[nsd:]), keys[nsd:]
    assert "optimizer.step" in keys or any(k.endswith(".step") for k in keys[nsd:])
    run(common + ["--epochs", "1", "--weights", tmp_path / "one.safetensors", "--save", tmp_path / "more.safetensors"])
    two, more = st_read(tmp_path / "two.safetensors"), st_read(tmp_path / "more.safetensors")
    assert list(two) == list(more)
    for k in two:
        assert np.array_equal(two[k], more[k]), k


def test_counts_are_pytorchs(built):
    """`ctc check`, `--stats` and `./net info`: parameters as sum(p.numel() for p in
    model.parameters()) (a tied tensor once), buffers and training state apart."""
    name, d, mod = built
    model = fresh(name, mod)
    n_par, t_par = sum(p.numel() for p in model.parameters()), len(list(model.parameters()))
    sd = model.state_dict()
    bufs = [b for k, b in model.named_buffers() if k in sd]   # the persistent ones
    n_buf, t_buf = sum(b.numel() for b in bufs), len(bufs)
    n_sd = sum(v.numel() for v in sd.values())
    r = run([CTC, "check", d / "m.py"])
    assert f"{len(sd)} tensors ({n_sd} values) in the state_dict" in r.stdout, r.stdout
    assert f"parameters {n_par} values in {t_par} tensors, buffers {n_buf} values in {t_buf} tensors" in r.stdout
    assert "training state " in r.stdout
    stats = (d / "stats.txt").read_text()
    assert f"ctc: m.py: {n_par} parameters in {t_par} tensors" in stats or \
        re.search(rf": {n_par} parameters in {t_par} tensors", stats), stats
    info = run([d / "net", "info"]).stdout
    assert f"parameters: {t_par} ({n_par} values)" in info, info
    assert f"buffers: {t_buf} ({n_buf} values)" in info, info
    assert f"state_dict: {len(sd)} keys" in info
    assert re.search(r"training state: \d+ \(\d+ values\)", info)


def test_convert_round_trips_strictly(built, tmp_path):
    """`ctc convert` keeps every key it reads (it is a format converter): PyTorch's own
    state_dict .pt -> safetensors -> .pt loads strictly with the same values; a ctc file
    with training state keeps it, and ctc's default file converts to a strict one."""
    name, d, mod = built
    run([CTC, "convert", d / "init.pt", "-o", tmp_path / "a.safetensors"])
    run([CTC, "convert", tmp_path / "a.safetensors", "-o", tmp_path / "b.pt"])
    want = torch.load(d / "init.pt")
    got = torch.load(tmp_path / "b.pt")
    assert list(got) == list(want)
    model = fresh(name, mod)
    model.load_state_dict(got, strict=True)
    for k, v in want.items():
        assert torch.equal(got[k], v), k
    train2(d, "--save", tmp_path / "ts.safetensors", "--save-training-state")
    run([CTC, "convert", tmp_path / "ts.safetensors", "-o", tmp_path / "ts.pt"])
    assert list(torch.load(tmp_path / "ts.pt")) == list(st_read(tmp_path / "ts.safetensors"))
    train2(d, "--save", tmp_path / "plain.safetensors")
    run([CTC, "convert", tmp_path / "plain.safetensors", "-o", tmp_path / "plain.pt"])
    fresh(name, mod).load_state_dict(torch.load(tmp_path / "plain.pt"), strict=True)


def test_run_save_and_python_module(built, tmp_path):
    """`./net run train_step --save` and the Python module's state_dict()/save() give the
    same state_dict (save(path, training_state=True) adds the training state)."""
    name, d, mod = built
    if name != "gpt":
        pytest.skip("one model is enough")
    x, y = data(name)
    np.save(tmp_path / "x.npy", x[:4])
    np.save(tmp_path / "y.npy", y[:4])
    run([d / "net", "run", "train_step", "--weights", d / "init.pt", "--input", tmp_path / "x.npy", "--input",
         tmp_path / "y.npy", "--save", tmp_path / "run.pt"])
    keys = list(fresh(name, mod).state_dict())
    assert list(torch.load(tmp_path / "run.pt")) == keys
    run([CTC, "build", d / "m.py", "--python", "-o", tmp_path / "gptmod"],)
    prog = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(tmp_path)!r})
        import numpy as np
        import gptmod
        m = gptmod.Model({str(d / "init.pt")!r})
        m.train_step(np.load("x.npy"), np.load("y.npy"))
        sd = m.state_dict()
        print(",".join(sd))
        assert sd["lm_head.weight"] is sd["transformer.wte.weight"]
        m.save("py.pt")
        m.save("py_ts.safetensors", training_state=True)
        np.save("wte.npy", sd["lm_head.weight"])
    """)
    r = subprocess.run(["/usr/bin/python3", "-c", prog], capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().split(",") == keys
    sd = torch.load(tmp_path / "py.pt")
    fresh(name, mod).load_state_dict(sd, strict=True)
    assert np.array_equal(sd["lm_head.weight"].numpy(), np.load(tmp_path / "wte.npy"))
    ts = list(st_read(tmp_path / "py_ts.safetensors"))
    assert ts[:len(keys)] == keys and any(k.startswith("optimizer.") for k in ts[len(keys):])
