"""A script that trains at module level (issue 30): the shape of the character-level
lecture scripts, with no train_step of its own: hyper-parameters, the text read with
open(), the vocabulary from sorted(list(set(text))), get_batch drawing torch.randint
offsets, estimate_loss under no_grad, a model whose forward returns (logits, loss),
then `for iter in range(max_iters):` at module level and a generate after it.

ctc never runs that loop at compile time: the loop body is the entry train_step(xb,
yb), estimate_loss's inner body the entry estimate_loss(X, Y), and the program's
`train` runs the loop on the text it read (or --text FILE with the same vocabulary),
`sample` the generate. Checked against PyTorch running the same file: forward and the
evaluation loss on one batch, three AdamW steps on fixed batches, the loss curve of
the whole loop, and sampled text drawn from the vocabulary."""
import math
import os
import re
import subprocess

import numpy as np
import pytest
import torch

from ctc_testlib import CTC, compare, ctc_build, run, st_read, st_write, state_dict_np

HEAD = '''
import torch
import torch.nn as nn
from torch.nn import functional as F

batch_size = 4
block_size = 8
max_iters = 120
eval_interval = 30
learning_rate = 5e-3
device = 'cuda' if torch.cuda.is_available() else 'cpu'
eval_iters = 8
n_embd = 16
n_head = 2
dropout = 0.0
torch.manual_seed(11)

with open('input.txt', 'r', encoding='utf-8') as f:
    text = f.read()

chars = sorted(list(set(text)))
vocab_size = len(chars)
stoi = {c: i for i, c in enumerate(chars)}
itos = {i: c for i, c in enumerate(chars)}
encode = lambda s: [stoi[c] for c in s]
decode = lambda toks: ''.join([itos[i] for i in toks])

data = torch.tensor(encode(text), dtype=torch.long)
n = int(0.9 * len(data))
train_data = data[:n]
val_data = data[n:]


def get_batch(split):
    source = train_data if split == 'train' else val_data
    ix = torch.randint(len(source) - block_size, (batch_size,))
    x = torch.stack([source[i:i + block_size] for i in ix])
    y = torch.stack([source[i + 1:i + block_size + 1] for i in ix])
    return x.to(device), y.to(device)


@torch.no_grad()
def estimate_loss():
    result = {}
    model.eval()
    for split in ['train', 'val']:
        losses = torch.zeros(eval_iters)
        for k in range(eval_iters):
            X, Y = get_batch(split)
            logits, loss = model(X, Y)
            losses[k] = loss.item()
        result[split] = losses.mean()
    model.train()
    return result


class AttentionHead(nn.Module):
    def __init__(self, size):
        super().__init__()
        self.key = nn.Linear(n_embd, size, bias=False)
        self.query = nn.Linear(n_embd, size, bias=False)
        self.value = nn.Linear(n_embd, size, bias=False)
        self.register_buffer('tril', torch.tril(torch.ones(block_size, block_size)))
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        B, T, C = x.shape
        k = self.key(x)
        q = self.query(x)
        w = q @ k.transpose(-2, -1) * k.shape[-1] ** -0.5
        w = w.masked_fill(self.tril[:T, :T] == 0, float('-inf'))
        w = self.dropout(F.softmax(w, dim=-1))
        return w @ self.value(x)


class TinyGPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok = nn.Embedding(vocab_size, n_embd)
        self.pos = nn.Embedding(block_size, n_embd)
        self.heads = nn.ModuleList([AttentionHead(n_embd // n_head) for _ in range(n_head)])
        self.ln1 = nn.LayerNorm(n_embd)
        self.mlp = nn.Sequential(nn.Linear(n_embd, 4 * n_embd), nn.ReLU(), nn.Linear(4 * n_embd, n_embd))
        self.ln2 = nn.LayerNorm(n_embd)
        self.head = nn.Linear(n_embd, vocab_size)

    def forward(self, idx, targets=None):
        B, T = idx.shape
        x = self.tok(idx) + self.pos(torch.arange(T, device=device))
        h = self.ln1(x)
        x = x + torch.cat([a(h) for a in self.heads], dim=-1)
        x = x + self.mlp(self.ln2(x))
        logits = self.head(x)
        if targets is None:
            loss = None
        else:
            B, T, C = logits.shape
            logits = logits.view(B * T, C)
            targets = targets.view(B * T)
            loss = F.cross_entropy(logits, targets)
        return logits, loss

    def generate(self, idx, max_new_tokens):
        for _ in range(max_new_tokens):
            logits, _ = self(idx[:, -block_size:])
            probs = F.softmax(logits[:, -1, :], dim=-1)
            idx = torch.cat((idx, torch.multinomial(probs, num_samples=1)), dim=1)
        return idx


model = TinyGPT()
m = model.to(device)
print(sum(p.numel() for p in m.parameters()), 'parameters')
optimizer = torch.optim.AdamW(model.parameters(), lr=learning_rate)
'''

LOOP = '''
for iter in range(max_iters):
    if iter % eval_interval == 0 or iter == max_iters - 1:
        losses = estimate_loss()
        print(f"step {iter}: train loss {losses['train']:.4f}, val loss {losses['val']:.4f}")
    xb, yb = get_batch('train')
    if iter % 50 == 0:
        print('iteration', iter)
    logits, loss = model(xb, yb)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
'''

TAIL = '''
context = torch.zeros((1, 1), dtype=torch.long, device=device)
print(decode(m.generate(context, max_new_tokens=60)[0].tolist()))
'''


def small_text():
    """A few hundred lines of made-up sentences from a small word list (seeded)."""
    rng = np.random.RandomState(5)
    words = "a the fox hen saw ran to hill river old little bright cold went sang over under".split()
    lines = [" ".join(rng.choice(words, rng.randint(3, 8))) + "." for _ in range(260)]
    return "\n".join(lines) + "\n"


STEP = re.compile(r"^step (\d+): train loss ([0-9.]+), val loss ([0-9.]+)$", re.M)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    d = tmp_path_factory.mktemp("script")
    (d / "input.txt").write_text(small_text())
    (d / "lm.py").write_text(HEAD + LOOP + TAIL)
    r = run([CTC, "check", d / "lm.py"])
    ctc_build(str(d / "lm.py"), str(d / "net"))
    return d, r.stdout


def torch_namespace(d, monkeypatch):
    """The script's code before its loop, run by PyTorch (the model, optimizer, get_batch ...)."""
    monkeypatch.chdir(d)
    ns = {}
    exec(compile(HEAD, str(d / "lm.py"), "exec"), ns)
    return ns


ENV = dict(os.environ, OMP_NUM_THREADS="1")


def test_check_lists_the_entries(built):
    d, out = built
    assert "entry train_step -> f32[]" in out and "entry estimate_loss -> f32[]" in out, out
    assert "entry forward -> f32[4,8," in out, out
    assert "after the module-level training loop: not compiled" in out, out
    line = HEAD.count("\n") + 7   # LOOP starts with an empty line
    assert f"note: line {line}: left out of train_step (a print of the training loop)" in out, out


def test_forward_and_eval_loss_match_torch(built, monkeypatch):
    d, _ = built
    ns = torch_namespace(d, monkeypatch)
    model = ns["model"]
    st_write(d / "w0.safetensors", state_dict_np(model))
    torch.manual_seed(3)
    X, Y = ns["get_batch"]("val")
    np.save(d / "x.npy", X.numpy())
    np.save(d / "y.npy", Y.numpy())
    run([d / "net", "infer", "--weights", d / "w0.safetensors", "--input", d / "x.npy", "--output",
         d / "logits.npy"], env=ENV)
    model.eval()
    with torch.no_grad():
        want_logits, _ = model(X)
        _, want_loss = model(X, Y)
    compare("logits", np.load(d / "logits.npy"), want_logits.numpy(), 1e-4, 1e-5)
    run([d / "net", "run", "estimate_loss", "--weights", d / "w0.safetensors", "--input", d / "x.npy", "--input",
         d / "y.npy", "--output", d / "loss.npy"], env=ENV)
    compare("estimate_loss", np.load(d / "loss.npy"), want_loss.numpy(), 1e-4, 1e-6)


def test_three_steps_on_fixed_batches_match_torch(built, monkeypatch):
    d, _ = built
    ns = torch_namespace(d, monkeypatch)
    model, opt = ns["model"], ns["optimizer"]
    w = d / "s0.safetensors"
    st_write(w, state_dict_np(model))
    model.train()
    torch.manual_seed(4)
    for k in range(3):
        xb, yb = ns["get_batch"]("train")
        np.save(d / "xb.npy", xb.numpy())
        np.save(d / "yb.npy", yb.numpy())
        nxt = d / f"s{k + 1}.safetensors"
        run([d / "net", "run", "train_step", "--weights", w, "--input", d / "xb.npy", "--input", d / "yb.npy",
             "--output", d / "l.npy", "--save", nxt, "--save-training-state"], env=ENV)
        _, loss = model(xb, yb)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        compare(f"loss of step {k}", np.load(d / "l.npy"), loss.detach().numpy(), 1e-4, 1e-6)
        w = nxt
    got = st_read(w)
    for name, want in state_dict_np(model).items():
        compare(f"{name} after 3 steps", got[name], want, 1e-3, 1e-5)


def parse_steps(out):
    return [(int(s), float(a), float(b)) for s, a, b in STEP.findall(out)]


def test_train_runs_the_loop_like_torch(built, monkeypatch):
    d, _ = built
    ns = torch_namespace(d, monkeypatch)
    st_write(d / "init.safetensors", state_dict_np(ns["model"]))
    # PyTorch runs the whole file (the loop and the generate after it)
    ref = subprocess.run(["/usr/bin/python3", d / "lm.py"], capture_output=True, text=True, cwd=d, env=ENV, timeout=600)
    assert ref.returncode == 0, ref.stderr
    want = parse_steps(ref.stdout)
    r = run([d / "net", "train", "--weights", d / "init.safetensors", "--save", d / "trained.safetensors"], env=ENV)
    got = parse_steps(r.stdout)
    # the loop's own schedule and print: every 30 steps and at the last one
    assert [s for s, _, _ in got] == [s for s, _, _ in want] == [0, 30, 60, 90, 119], (r.stdout, ref.stdout)
    # the same start (the same weights), then curves of the same shape (different random windows)
    assert abs(got[0][1] - want[0][1]) < 0.1 * want[0][1], (got, want)
    assert got[-1][1] < 0.75 * got[0][1] and got[-1][2] < 0.75 * got[0][2], got
    for (_, a, b), (_, c, e) in zip(got[1:], want[1:]):
        assert abs(math.log(a / c)) < 0.35 and abs(math.log(b / e)) < 0.35, (got, want)
    # the vocabulary written beside the weights: the script's sorted characters
    chars = sorted(set(small_text()))
    assert (d / "trained.vocab.txt").read_text() == "".join(chars)


def test_sample_prints_text_of_the_vocabulary(built):
    d, _ = built
    if not (d / "trained.safetensors").exists():
        pytest.skip("needs test_train_runs_the_loop_like_torch's weights")
    r = run([d / "net", "sample", "--weights", d / "trained.safetensors", "--seed", "2"], env=ENV)
    text = r.stdout[:-1]   # sample ends with a newline of its own
    # generate(context, max_new_tokens=60) from token 0 (the newline): 61 characters
    assert len(text) == 61 and text[0] == "\n", repr(text)
    assert set(text) <= set(small_text()), repr(text)
    assert "KV cache" in r.stderr   # the causal heads gave the decode entry


def test_train_on_a_text_given_at_run_time(built, tmp_path):
    d, _ = built
    other = tmp_path / "other.txt"
    other.write_text("the hen saw the old river.\nthe fox went over the hill.\n" * 20)
    r = run([d / "net", "train", "--text", other, "--steps", "5", "--eval-interval", "2", "--eval-iters", "2"],
            env=ENV)
    assert [s for s, _, _ in parse_steps(r.stdout)] == [0, 2, 4], r.stdout
    (tmp_path / "bad.txt").write_text("the fox saw a zebra.\n" * 20)
    r = run([d / "net", "train", "--text", tmp_path / "bad.txt", "--steps", "1"], check=False, env=ENV)
    assert r.returncode != 0
    assert "bad.txt: character 14 ('z', U+007A) is not in the vocabulary (the 22 characters of the text the script " \
        "read at compile time, its loop at lm.py:116)" in r.stderr, r.stderr


FIXED = "def fixed_batch(split):\n    return train_data[:8].view(1, 8), train_data[1:9].view(1, 8)\n\n"
STEP_BODY = "    logits, loss = model(xb, yb)\n    optimizer.zero_grad()\n    loss.backward()\n    optimizer.step()\n"


@pytest.mark.parametrize("loop,msg", [
    # a loop over something else than range(N)
    ("for it in [0, 1, 2]:\n    xb, yb = get_batch('train')\n" + STEP_BODY,
     "lm.py:{line}:1: error: a module-level training loop is compiled as the program's `train` when it is "
     "`for iter in range(max_iters):` (it never runs at compile time)"),
    # a batch function that draws no windows
    (FIXED + "for it in range(5):\n    xb, yb = fixed_batch('train')\n" + STEP_BODY,
     "lm.py:{line}:1: error: fixed_batch is compiled as the program's window sampler when it draws `ix = "
     "torch.randint(len(data) - block_size, (batch_size,))`"),
    # an evaluation `if` that is not every K steps
    ("for iter in range(5):\n    if iter > 2:\n        losses = estimate_loss()\n    xb, yb = get_batch('train')\n"
     + STEP_BODY, "lm.py:{next}:8: error: the training loop's evaluation runs every K steps"),
])
def test_loops_of_another_shape_are_refused(tmp_path, loop, msg):
    """Refused with a located error before anything of the loop runs."""
    (tmp_path / "input.txt").write_text(small_text())
    (tmp_path / "lm.py").write_text(HEAD + loop)
    line = HEAD.count("\n") + 1
    r = subprocess.run([CTC, "check", tmp_path / "lm.py"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 1, r.stdout + r.stderr
    assert msg.format(line=line, next=line + 1) in r.stderr, r.stderr


def test_other_module_level_loops_are_unchanged(tmp_path):
    """A module-level loop over a data loader ctc does not model (no get_batch-style
    batch) runs as before: no iterations, the model compiles for inference."""
    (tmp_path / "m.py").write_text(
        "import torch\nimport torch.nn as nn\nfrom torch.utils.data import DataLoader\n"
        "model = nn.Linear(4, 2)\nopt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "loader = DataLoader(list(range(10)), batch_size=2)\n"
        "for epoch in range(2):\n    for x, y in loader:\n        loss = ((model(x) - y) ** 2).mean()\n"
        "        opt.zero_grad()\n        loss.backward()\n        opt.step()\n")
    r = subprocess.run([CTC, "check", tmp_path / "m.py", "--input", "input=f32[3,4]"], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0 and "train_step" not in r.stdout, r.stdout + r.stderr


# ---- ./net sample follows the script's generate (script.c reads its body) ----------

GEN_DEFAULT = HEAD[HEAD.index("    def generate(self"):HEAD.index("\n\nmodel = TinyGPT()")]

GEN_GREEDY = '''    def generate(self, idx, max_new_tokens):
        for _ in range(max_new_tokens):
            idx_cond = idx[:, -block_size:]
            logits, _ = self(idx_cond)
            logits = logits[:, -1, :]
            idx_next = torch.argmax(logits, dim=-1, keepdim=True)
            idx = torch.cat((idx, idx_next), dim=1)
        return idx'''

GEN_NANOGPT = '''    @torch.no_grad()
    def generate(self, idx, max_new_tokens, temperature=1.0, top_k=None):
        """nanoGPT's model.py"""
        for _ in range(max_new_tokens):
            idx_cond = idx if idx.size(1) <= block_size else idx[:, -block_size:]
            logits, _ = self(idx_cond)
            logits = logits[:, -1, :] / temperature
            if top_k is not None:
                v, _ = torch.topk(logits, min(top_k, logits.size(-1)))
                logits[logits < v[:, [-1]]] = -float('Inf')
            probs = F.softmax(logits, dim=-1)
            idx_next = torch.multinomial(probs, num_samples=1)
            idx = torch.cat((idx, idx_next), dim=1)
        return idx'''

GEN_NO_CROP = GEN_DEFAULT.replace("self(idx[:, -block_size:])", "self(idx)")


def script_with(tmp, generate, call="m.generate(context, max_new_tokens=30)"):
    (tmp / "input.txt").write_text(small_text())
    src = HEAD.replace(GEN_DEFAULT, generate) + LOOP + TAIL.replace("m.generate(context, max_new_tokens=60)", call)
    (tmp / "lm.py").write_text(src)
    return src


@pytest.mark.parametrize("generate, call", [
    (GEN_GREEDY, "m.generate(context, max_new_tokens=30)"),
    (GEN_NANOGPT, "m.generate(context, max_new_tokens=30, top_k=1)"),
    (GEN_NANOGPT, "m.generate(context, 30, 1e-4)"),   # a temperature this low draws the most likely token
], ids=["argmax", "top_k_1", "temperature"])
def test_sample_runs_the_scripts_generate(tmp_path, monkeypatch, generate, call):
    """Deterministic generates (greedy, top-k 1, a near-zero temperature): `./net sample`
    prints the text PyTorch's generate gives from the same weights, past the window (30
    tokens, block_size 8). The built-in sampler (multinomial at temperature 1) would not."""
    src = script_with(tmp_path, generate, call)
    ctc_build(str(tmp_path / "lm.py"), str(tmp_path / "net"))
    monkeypatch.chdir(tmp_path)
    ns = {}
    exec(compile(src[:src.index(LOOP)], str(tmp_path / "lm.py"), "exec"), ns)
    model = ns["model"]
    st_write(tmp_path / "w.safetensors", state_dict_np(model))
    model.eval()
    ctx = torch.zeros((1, 1), dtype=torch.long)
    want = ns["decode"](eval(call.replace("m.generate", "model.generate"), {"model": model, "context": ctx})[0].tolist())
    r = run([tmp_path / "net", "sample", "--weights", tmp_path / "w.safetensors", "--seed", "7"], env=ENV)
    assert r.stdout[:-1] == want, (r.stdout, want)


def test_sample_without_crop_stops_at_the_window(tmp_path):
    """A generate that feeds forward the whole context: `sample` runs while the context
    fits forward's window and stops, naming generate, where the window would slide."""
    script_with(tmp_path, GEN_NO_CROP)
    ctc_build(str(tmp_path / "lm.py"), str(tmp_path / "net"))
    r = run([tmp_path / "net", "sample", "--tokens", "7"], env=ENV, check=False)
    assert r.returncode == 0 and len(r.stdout) == 9, r.stdout + r.stderr
    r = run([tmp_path / "net", "sample"], env=ENV, check=False)
    line = HEAD.index("    def generate(self")
    line = HEAD[:line].count("\n") + 1
    assert r.returncode != 0 and f"the script's generate (lm.py:{line}) runs forward on the whole context, never " \
        "cropped to block_size, and the compiled forward takes 8 tokens: the context has 9" in r.stderr, r.stderr


GEN_REFUSED = [
    (GEN_DEFAULT.replace("probs = F.softmax(logits[:, -1, :], dim=-1)",
                         "probs = F.softmax(logits[:, -1, :] - logits[:, -1, :].mean(), dim=-1)"),
     "probs = F.softmax", "this expression is none of those steps"),
    (GEN_DEFAULT.replace("self(idx[:, -block_size:])", "self(idx[:, -4:])"),
     "logits, _ = self", "this crops the context to 4 tokens, where forward's window (block_size) is 8"),
    (GEN_DEFAULT.replace("num_samples=1", "num_samples=2"), "idx = torch.cat",
     "this expression is none of those steps"),
    (GEN_DEFAULT.replace("            idx = torch.cat", "            print(idx)\n            idx = torch.cat"), "print(idx)",
     "this statement is none of those steps"),
    (GEN_NANOGPT.replace("torch.argmax", "x").replace("probs = F.softmax(logits, dim=-1)",
                                                       "probs = F.softmax(logits, dim=-1) / temperature"),
     "probs = F.softmax", "this expression is none of those steps"),
]


@pytest.mark.parametrize("generate, at, msg", GEN_REFUSED, ids=["shifted", "crop4", "two_samples", "print", "late_temp"])
def test_generate_of_other_logic_is_refused(tmp_path, generate, at, msg):
    """A generate whose logic the sampler does not implement is a located error at its line."""
    src = script_with(tmp_path, generate, "m.generate(context, max_new_tokens=30)")
    line = src[:src.index(at)].count("\n") + 1
    r = subprocess.run([CTC, "check", tmp_path / "lm.py"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 1, r.stdout + r.stderr
    assert f"lm.py:{line}:" in r.stderr and "`./net sample` runs generate as ctc's sampler" in r.stderr \
        and msg in r.stderr, r.stderr
