"""Models converted with model.bfloat16() / .half() / .to(dtype) (docs/mixed-precision.md):
every floating parameter and buffer holds bfloat16 (float16) numbers, every op computes in
float32 and rounds its result once, checkpoints keep BF16 / F16 tensors, and training rounds
gradients and updates as PyTorch does on such tensors.

Oracles: PyTorch 1.13 (always) and PyTorch 2.x from bench/.venv (where installed; its CPU
float16 matmul is the only float16 oracle, 1.13 has none). PyTorch 2.x computes every op
here in float32 and rounds once, so ctc must equal it bit for bit in forward. PyTorch 1.13
rounds a bf16 layer_norm's mean and rstd to bf16 and its bf16 GEMM backward rounds partial
sums, so against it the measure is one bf16 ulp in forward and, for weights after training,
distances: to PyTorch's bf16 run within PyTorch's own bf16-vs-f32 distance, and to a
float64 run no larger than PyTorch bf16's (times 1.25: the roundings fall differently)."""
import re
import subprocess

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from ctc_testlib import CTC, load_module, run, st_dtypes, st_read
from cuda_testlib import NVCC, RT, emulated, rt_objects, run_env  # noqa: F401 (rt_objects: a fixture)
from test_autocast import GPT, HEAD, bf16_ulp
from test_grad_scaler import needs_torch2, torch2

MLP = HEAD + '''
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(20, 48)
        self.ln = nn.LayerNorm(48)
        self.fc2 = nn.Linear(48, 7)
        self.register_buffer("scale", torch.arange(7) * 0.23 + 0.3)

    def forward(self, x):
        h = F.gelu(self.ln(self.fc1(x)))
        return (self.fc2(h) * self.scale).softmax(-1) + torch.tanh(h).mean(-1, keepdim=True)


model = Net().CAST
'''


def write(tmp, text, name="m.py", **subs):
    for k, v in subs.items():
        text = text.replace(k, v)
    p = tmp / name
    p.write_text(text)
    return p


def infer(tmp, exe, w, arrays, save=None):
    args = [exe, "infer", "--weights", w]
    for i, a in enumerate(arrays):
        np.save(tmp / f"in{i}.npy", a)
        args += ["--input", tmp / f"in{i}.npy"]
    args += ["--output", tmp / "out.npy"] + (["--save", save] if save else [])
    run(args)
    return np.load(tmp / "out.npy")


def one_rounding(sd, x):
    """The MLP as PyTorch 2.x computes a bf16 model (each op in float32, its result rounded
    to bf16 once), written with PyTorch 1.13's float32 ops."""
    r = lambda t: t.bfloat16().float()
    W = {k: v.float() for k, v in sd.items()}
    h = r(F.linear(r(torch.from_numpy(x)), W["fc1.weight"], W["fc1.bias"]))
    h = r(F.gelu(r(F.layer_norm(h, (48,), W["ln.weight"], W["ln.bias"]))))
    o = r(r(r(F.linear(h, W["fc2.weight"], W["fc2.bias"])) * W["scale"]).softmax(-1))
    return r(o + r(r(torch.tanh(h)).mean(-1, keepdim=True))).numpy()


def test_bfloat16_mlp_forward(tmp_path):
    """Linear, LayerNorm, GELU, a float buffer, softmax, tanh, mean of a .bfloat16() model, its
    input given as bf16[...] (float32 rounded on entry, as x.bfloat16()). Against PyTorch 1.13
    (which rounds a bf16 mean's sum and LayerNorm's statistics to bf16 first, where PyTorch 2.x
    does not): as far from its output as that is from a float64 run, and no farther from the
    float64 run than it (1.25x). Against each op rounded once, as PyTorch 2.x computes: every
    value within one bf16 ulp and at most 1% not equal (float32 GEMMs may sum in another
    order); test_bfloat16_and_float16_forward_equal_pytorch2 checks 2.x itself, bit for bit."""
    p = write(tmp_path, MLP, CAST="bfloat16()")
    run([CTC, "build", p, "-o", tmp_path / "net", "--input", "x=bf16[16,20]"])
    mod = load_module(p, "half_mlp")
    torch.save(mod.model.state_dict(), tmp_path / "w.pt")
    x = np.random.default_rng(0).standard_normal((16, 20)).astype(np.float32) * 2
    got = infer(tmp_path, tmp_path / "net", tmp_path / "w.pt", [x])
    with torch.no_grad():
        want = mod.model(torch.from_numpy(x).bfloat16()).float().numpy()
        m64 = mod.Net().double()
        m64.load_state_dict({k: v.double() for k, v in mod.model.state_dict().items()})
        ref = m64(torch.from_numpy(x).bfloat16().double()).numpy()
        once = one_rounding(mod.model.state_dict(), x)
    assert not (got.view(np.uint32) & 0xFFFF).any(), "the outputs are bf16 numbers"
    d_ctc, d_torch, d_pair = np.linalg.norm(got - ref), np.linalg.norm(want - ref), np.linalg.norm(got - want)
    assert d_ctc <= 1.25 * d_torch and d_pair <= 2 * d_torch, (d_ctc, d_torch, d_pair)
    assert np.all(np.abs(got - once) <= bf16_ulp(once)) and np.mean(got != once) <= 0.01, np.abs(got - once).max()


@needs_torch2
def test_bfloat16_and_float16_forward_equal_pytorch2(tmp_path):
    """PyTorch 2.x computes each op of a bf16 / f16 model in float32 and rounds once, as ctc
    does: the outputs are equal bit for bit, for .bfloat16(), .half() and .to(torch.float16)."""
    x = np.random.default_rng(1).standard_normal((16, 20)).astype(np.float32)
    for cast, spec in (("bfloat16()", "x=bf16[16,20]"), ("half()", "x=f16[16,20]"),
                       ("to(torch.float16)", "x=float16[16,20]")):
        p = write(tmp_path, MLP, CAST=cast)
        run([CTC, "build", p, "-o", tmp_path / "net", "--input", spec])
        script = (f"import sys, numpy as np, torch\nsys.path.insert(0, {str(tmp_path)!r})\nimport m\n"
                  "torch.manual_seed(3)\nmodel = m.Net().%s\ntorch.save(model.state_dict(), 'w.pt')\n"
                  "x = torch.from_numpy(np.load('inputs.npz')['x']).to(model.fc1.weight.dtype)\n"
                  "with torch.no_grad():\n    y = model(x).float().numpy()\n"
                  "np.savez('out.npz', y=y)\nprint('{}')\n") % cast
        out, _ = torch2(tmp_path, script, x=x)
        got = infer(tmp_path, tmp_path / "net", tmp_path / "w.pt", [x])
        assert np.array_equal(got, out["y"]), (cast, np.abs(got - out["y"]).max())


def test_gpt_forward_and_checkpoints(tmp_path):
    """The 2-block GPT of test_autocast (embeddings, a causal-mask buffer, attention with
    masked_fill(-inf), LayerNorm, GELU) as a .bfloat16() model: its logits as far from PyTorch
    1.13's as those are from a float64 run, and ctc's own distance to that run within 1.25x
    PyTorch's (1.13 rounds LayerNorm's mean and rstd to bf16; PyTorch 2.x, as ctc, does not:
    test_bfloat16_and_float16_forward_equal_pytorch2). --save writes the state_dict as PyTorch holds it, every tensor BF16
    (safetensors) / torch.bfloat16 (.pt), equal to the weights loaded, and PyTorch loads it
    strictly; a float32 checkpoint loads rounded, as PyTorch's load_state_dict copies it."""
    src = GPT + "\n\nmodel = GPT().bfloat16()\n"
    p = write(tmp_path, src, "gpt.py")
    run([CTC, "build", p, "-o", tmp_path / "net", "--input", "idx=i64[2,8]"])
    mod = load_module(p, "half_gpt")
    sd = mod.model.state_dict()
    torch.save(sd, tmp_path / "w.pt")
    idx = np.random.default_rng(2).integers(0, 32, (2, 8)).astype(np.int64)
    got = infer(tmp_path, tmp_path / "net", tmp_path / "w.pt", [idx], save=tmp_path / "s.safetensors")
    with torch.no_grad():
        want = mod.model(torch.from_numpy(idx)).float().numpy()
        m64 = mod.GPT().double()
        m64.load_state_dict({k: v.double() for k, v in sd.items()})
        ref = m64(torch.from_numpy(idx)).numpy()
    d_ctc, d_torch, d_pair = np.linalg.norm(got - ref), np.linalg.norm(want - ref), np.linalg.norm(got - want)
    assert d_ctc <= 1.25 * d_torch and d_pair <= 2 * d_torch, (d_ctc, d_torch, d_pair)
    dts, saved = st_dtypes(tmp_path / "s.safetensors"), st_read(tmp_path / "s.safetensors")
    assert list(saved) == list(sd) and set(dts.values()) == {"BF16"}, dts
    for k, v in sd.items():
        assert np.array_equal(saved[k], v.float().numpy()), k
    infer(tmp_path, tmp_path / "net", tmp_path / "w.pt", [idx], save=tmp_path / "s.pt")
    back = torch.load(tmp_path / "s.pt")
    assert all(v.dtype == torch.bfloat16 and torch.equal(v, sd[k]) for k, v in back.items())
    mod.GPT().bfloat16().load_state_dict(back, strict=True)
    # a float32 checkpoint: rounded into the bf16 model
    torch.manual_seed(5)
    f32 = mod.GPT()
    torch.save(f32.state_dict(), tmp_path / "f32.pt")
    got = infer(tmp_path, tmp_path / "net", tmp_path / "f32.pt", [idx], save=tmp_path / "r.safetensors")
    into = mod.GPT().bfloat16()
    into.load_state_dict(f32.state_dict())
    saved = st_read(tmp_path / "r.safetensors")
    for k, v in into.state_dict().items():
        assert np.array_equal(saved[k], v.float().numpy()), k
    with torch.no_grad():
        want = into(torch.from_numpy(idx)).float().numpy()
    assert np.linalg.norm(got - want) <= 2 ** -7 * np.linalg.norm(want)   # the weights above are exact


def test_initial_parameters_are_rounded(tmp_path):
    """Without a weights file the program's own initial parameters are bf16 numbers (its init
    rounds them, as .bfloat16() rounds PyTorch's): the output of a run equals a run on the
    parameters it saves."""
    p = write(tmp_path, MLP, CAST="bfloat16()")
    run([CTC, "build", p, "-o", tmp_path / "net", "--input", "x=bf16[4,20]"])
    x = np.ones((4, 20), np.float32)
    np.save(tmp_path / "x.npy", x)
    run([tmp_path / "net", "infer", "--random-weights", "--input", tmp_path / "x.npy", "--output",
         tmp_path / "a.npy", "--save", tmp_path / "init.safetensors"])
    w = st_read(tmp_path / "init.safetensors")
    assert not any((v.view(np.uint32) & 0xFFFF).any() for v in w.values())
    again = infer(tmp_path, tmp_path / "net", tmp_path / "init.safetensors", [x])
    assert np.array_equal(np.load(tmp_path / "a.npy"), again)


TRAIN = HEAD + '''
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(20, 32)
        self.fc2 = nn.Linear(32, 5)

    def forward(self, x):
        return self.fc2(F.relu(self.fc1(x)))


model = Net().bfloat16()
optimizer = OPT


def train_step(xb, yb):
    optimizer.zero_grad()
    loss = F.cross_entropy(model(xb.bfloat16()).float(), yb)
    loss.backward()
    optimizer.step()
    return loss
'''
OPTS = {"sgd": "torch.optim.SGD(model.parameters(), lr=0.1)",
        "sgd_wd": "torch.optim.SGD(model.parameters(), lr=0.05, weight_decay=1e-2)",
        "sgd_momentum": "torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=1e-3, nesterov=True)",
        "adamw": "torch.optim.AdamW(model.parameters(), lr=1e-2)"}


def torch_run(mod, sd, batches, dtype, opt_text):
    m = mod.Net().to(dtype)
    m.load_state_dict({k: v.to(dtype) for k, v in sd.items()})
    opt = eval(opt_text.replace("model.", "m."), {"torch": torch, "m": m})
    losses = []
    for x, y in batches:
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(m(torch.from_numpy(x).bfloat16().to(dtype)).float(),
                                                 torch.from_numpy(y))
        loss.backward()
        opt.step()
        losses.append(float(loss))
    return {k: v.double().numpy() for k, v in m.state_dict().items()}, losses


def ctc_steps(tmp, exe, w, batches):
    """`./net run train_step` on each (x, y) of batches from weights file w, the state carried
    by --save --save-training-state: the last file and the losses."""
    losses = []
    for i, (x, y) in enumerate(batches):
        np.save(tmp / "x.npy", x)
        np.save(tmp / "y.npy", y)
        nxt = tmp / f"w{i + 1}.safetensors"
        run([exe, "run", "train_step", "--weights", w, "--input", tmp / "x.npy", "--input", tmp / "y.npy",
             "--output", tmp / "l.npy", "--save", nxt, "--save-training-state"])
        losses.append(float(np.load(tmp / "l.npy").reshape(-1)[0]))
        w = nxt
    return w, losses


def dist(a, b):
    return float(np.sqrt(sum(np.sum((np.asarray(a[k], np.float64) - b[k]) ** 2) for k in b)))


@pytest.mark.parametrize("opt", ["sgd", "sgd_momentum"])
def test_bfloat16_training(tmp_path, opt):
    """Ten steps of a .bfloat16() MLP: gradients are bf16 (rounded where the parameter is), SGD
    runs PyTorch's in-place ops on bf16 tensors (test_optimizers_on_bfloat16_parameters);
    parameters and momentum buffers are saved as BF16. Held to PyTorch 1.13 by distance (its
    bf16 GEMM backward rounds partial sums): the first loss equal, the final weights within
    PyTorch's own bf16-vs-float32 distance of its bf16 run, and as close to a float64 run as
    PyTorch's bf16 run (within 1.25x). Not Adam here: from the first step it moves every weight
    by about lr whatever the gradient's size, so a near-zero gradient whose sign differs in the
    last bf16 bit moves a weight the other way, and the runs drift apart by chance."""
    p = write(tmp_path, TRAIN, OPT=OPTS[opt])
    exe = tmp_path / "net"
    run([CTC, "build", p, "-o", exe, "--input", "xb=f32[8,20]", "--input", "yb=i64[8]", "--input", "x=bf16[8,20]"])
    torch.manual_seed(0)
    mod = load_module(p, f"half_train_{opt}")
    sd = mod.model.state_dict()
    torch.save(sd, tmp_path / "w0.pt")
    rng = np.random.default_rng(0)
    batches = [(rng.standard_normal((8, 20)).astype(np.float32), rng.integers(0, 5, 8)) for _ in range(10)]
    w, losses = ctc_steps(tmp_path, exe, tmp_path / "w0.pt", batches)
    got = st_read(w)
    dts = st_dtypes(w)
    assert all(dts[k] == "BF16" for k in sd), dts
    state = [k for k in dts if k.startswith("optimizer.") and k != "optimizer.step"]
    assert state if opt != "sgd" else not state
    assert all(dts[k] == "BF16" for k in state), dts   # momentum buffers, Adam's moments: bf16 as PyTorch's
    bf, t_losses = torch_run(mod, sd, batches, torch.bfloat16, OPTS[opt])
    f32, _ = torch_run(mod, sd, batches, torch.float32, OPTS[opt])
    f64, _ = torch_run(mod, sd, batches, torch.float64, OPTS[opt])
    assert abs(losses[0] - t_losses[0]) <= 1e-6 * abs(t_losses[0])   # the same forward; f32 cross-entropy
    d_ctc, d_own = dist(got, bf), dist(f32, bf)
    assert d_ctc <= d_own, (d_ctc, d_own)
    assert dist(got, f64) <= 1.25 * dist(bf, f64), (dist(got, f64), dist(bf, f64))


CNN = HEAD + """
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(8)
        self.conv2 = nn.Conv2d(8, 16, 3, stride=2)
        self.emb = nn.Embedding(10, 16)
        self.fc = nn.Linear(16, 10)

    def forward(self, x, c):
        h = F.relu(self.bn1(self.conv1(x)))
        h = F.max_pool2d(F.relu(self.conv2(h)), 2)
        return self.fc(h.mean((2, 3)) + self.emb(c))


model = Net().bfloat16()
optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)


def train_step(xb, cb, yb):
    optimizer.zero_grad()
    loss = F.cross_entropy(model(xb.bfloat16(), cb).float(), yb)
    loss.backward()
    optimizer.step()
    return loss
"""


def test_bfloat16_cnn_training(tmp_path):
    """A .bfloat16() CNN (Conv2d, BatchNorm2d in training mode, max pooling, an Embedding) trained
    five SGD-momentum steps: weights, BatchNorm's running statistics and the momentum buffers are
    BF16 in the saved file (num_batches_tracked stays int64), the weights within PyTorch 1.13's own
    bf16-vs-float32 distance of its bf16 run and as close to a float64 run (1.25x)."""
    p = write(tmp_path, CNN)
    exe = tmp_path / "net"
    run([CTC, "build", p, "-o", exe, "--input", "xb=f32[4,3,12,12]", "--input", "cb=i64[4]", "--input", "yb=i64[4]",
         "--input", "x=bf16[4,3,12,12]", "--input", "c=i64[4]"])
    torch.manual_seed(0)
    mod = load_module(p, "half_cnn")
    sd = {k: v.clone() for k, v in mod.model.state_dict().items()}
    torch.save(sd, tmp_path / "w0.pt")
    rng = np.random.default_rng(0)
    batches = [(rng.standard_normal((4, 3, 12, 12)).astype(np.float32), rng.integers(0, 10, 4), rng.integers(0, 10, 4))
               for _ in range(5)]
    w = tmp_path / "w0.pt"
    for i, (x, c, y) in enumerate(batches):
        for n, a in (("x", x), ("c", c), ("y", y)):
            np.save(tmp_path / f"{n}.npy", a)
        run([exe, "run", "train_step", "--weights", w, "--input", tmp_path / "x.npy", "--input", tmp_path / "c.npy",
             "--input", tmp_path / "y.npy", "--save", tmp_path / f"w{i + 1}.safetensors", "--save-training-state"])
        w = tmp_path / f"w{i + 1}.safetensors"
    got, dts = st_read(w), st_dtypes(w)
    assert dts["bn1.num_batches_tracked"] == "I64" and int(got["bn1.num_batches_tracked"]) == 5
    assert all(d == "BF16" for k, d in dts.items() if k not in ("bn1.num_batches_tracked", "optimizer.step")), dts
    runs = {}
    for dt in (torch.bfloat16, torch.float32, torch.float64):
        m = mod.Net().to(dt)
        m.load_state_dict(sd)
        opt = torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9)
        for x, c, y in batches:
            opt.zero_grad()
            F.cross_entropy(m(torch.from_numpy(x).bfloat16().to(dt), torch.from_numpy(c)).float(),
                            torch.from_numpy(y)).backward()
            opt.step()
        runs[dt] = {k: v.double().numpy() for k, v in m.state_dict().items() if v.is_floating_point()}
    bf, f32, f64 = runs[torch.bfloat16], runs[torch.float32], runs[torch.float64]
    assert dist(got, bf) <= dist(f32, bf), (dist(got, bf), dist(f32, bf))
    assert dist(got, f64) <= 1.25 * dist(bf, f64), (dist(got, f64), dist(bf, f64))


OPT_EXACT = HEAD + """
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(256))
        self.v = nn.Parameter(torch.randn(4, 64) * 0.1)

    def forward(self, x):
        return (self.w * x.bfloat16()).float()


model = Net().bfloat16()
optimizer = OPT


def train_step(x, y):
    optimizer.zero_grad()
    loss = (model.w * x.bfloat16()).sum() + (model.v * y.bfloat16()).sum()
    loss.float().backward()
    optimizer.step()
    return loss.float()
"""
OPTS_EXACT = {
    "sgd": "torch.optim.SGD(model.parameters(), lr=0.1)",
    "sgd_nesterov": "torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=1e-2, nesterov=True)",
    "sgd_dampening": "torch.optim.SGD(model.parameters(), lr=0.03, momentum=0.8, dampening=0.3)",
    "adam": "torch.optim.Adam(model.parameters(), lr=1e-2, weight_decay=1e-2)",
    "adamw": "torch.optim.AdamW(model.parameters(), lr=3e-2, betas=(0.8, 0.99), weight_decay=0.1)",
    "adam_amsgrad": "torch.optim.Adam(model.parameters(), lr=1e-2, amsgrad=True)",
}


@pytest.mark.parametrize("opt", sorted(OPTS_EXACT))
def test_optimizers_on_bfloat16_parameters(tmp_path, opt):
    """The optimizer alone, on gradients both sides compute exactly (a loss linear in the bf16
    parameters: the gradient is the bf16 input): five steps give PyTorch 1.13's parameters and
    optimizer state bit for bit. PyTorch runs its single-tensor SGD and Adam(W) as in-place ops
    on the bf16 tensors, each computed in float32 and rounded once, a number multiplying or
    dividing one (lr, momentum, beta1 0.9 as 0.8984375, sqrt of the bias correction) rounded
    to bf16 first, addcmul's and addcdiv's value not; ctc stages the same ops."""
    p = write(tmp_path, OPT_EXACT, OPT=OPTS_EXACT[opt])
    exe = tmp_path / "net"
    run([CTC, "build", p, "-o", exe, "--input", "x=f32[256]", "--input", "y=f32[4,64]"])
    torch.manual_seed(1)
    mod = load_module(p, f"half_opt_{opt}")
    torch.save(mod.model.state_dict(), tmp_path / "w0.pt")
    rng = np.random.default_rng(3)
    batches = [(rng.standard_normal(256).astype(np.float32), (rng.standard_normal((4, 64)) * (i + 1)).astype(np.float32))
               for i in range(5)]
    w, _ = ctc_steps(tmp_path, exe, tmp_path / "w0.pt", batches)
    for x, y in batches:
        mod.train_step(torch.from_numpy(x), torch.from_numpy(y))
    got, dts = st_read(w), st_dtypes(w)
    names = dict(mod.model.named_parameters())
    for k, v in mod.model.state_dict().items():
        assert dts[k] == "BF16" and np.array_equal(got[k], v.float().numpy()), (k, np.abs(got[k] - v.float().numpy()).max())
        for sk, sv in mod.optimizer.state[names[k]].items():
            if sk == "step" or sv is None:
                continue
            key = f"optimizer.{k}.{sk}"
            assert dts[key] == "BF16" and np.array_equal(got[key], sv.float().numpy()), key


@needs_torch2
@pytest.mark.parametrize("opt", ["sgd_nesterov", "adamw"])
def test_optimizers_on_float16_parameters_pytorch2(tmp_path, opt):
    """As test_optimizers_on_bfloat16_parameters, for a .half() model against PyTorch 2.x (1.13
    has no CPU float16 arithmetic): its numbers of * and / stay float, its Adam updates exp_avg
    with lerp_; five steps bit for bit."""
    src = OPT_EXACT.replace(".bfloat16()", ".half()").replace("OPT", OPTS_EXACT[opt])
    p = write(tmp_path, src)
    exe = tmp_path / "net"
    run([CTC, "build", p, "-o", exe, "--input", "x=f32[256]", "--input", "y=f32[4,64]"])
    rng = np.random.default_rng(3)
    xs = rng.standard_normal((5, 256)).astype(np.float32)
    ys = (rng.standard_normal((5, 4, 64)) * np.arange(1, 6)[:, None, None]).astype(np.float32)
    script = (f"import sys, numpy as np, torch\nsys.path.insert(0, {str(tmp_path)!r})\ntorch.manual_seed(1)\n"
              "import m\ntorch.save(m.model.state_dict(), 'w0.pt')\nd = np.load('inputs.npz')\n"
              "for x, y in zip(d['xs'], d['ys']):\n    m.train_step(torch.from_numpy(x), torch.from_numpy(y))\n"
              "names = dict(m.model.named_parameters())\nres = {}\n"
              "for k, v in m.model.state_dict().items():\n    res[k] = v.float().numpy()\n"
              "    for sk, sv in m.optimizer.state[names[k]].items():\n"
              "        if sk != 'step' and sv is not None:\n            res[f'optimizer.{k}.{sk}'] = sv.float().numpy()\n"
              "np.savez('out.npz', **res)\nprint('{}')\n")
    out, _ = torch2(tmp_path, script, xs=xs, ys=ys)
    w, _ = ctc_steps(tmp_path, exe, tmp_path / "w0.pt", list(zip(xs, ys)))
    got, dts = st_read(w), st_dtypes(w)
    for k, v in out.items():
        assert dts[k] == "F16" and np.array_equal(got[k], v), (k, np.abs(got[k] - v).max())


@needs_torch2
def test_bfloat16_sgd_equals_pytorch2(tmp_path):
    """PyTorch 2.x's bf16 GEMM backward rounds once, as ctc: ten SGD steps with weight decay
    end within a tenth of PyTorch 2.x's own bf16-vs-float32 distance of its bf16 run (its
    vectorised add_ fuses a multiply-add where ctc rounds the product: a few elements differ
    by one bf16 step). Not with momentum: 2.x multiplies a bf16 buffer by a float momentum,
    1.13 (ctc's bf16 oracle) by the momentum rounded to bf16."""
    p = write(tmp_path, TRAIN, OPT=OPTS["sgd_wd"])
    exe = tmp_path / "net"
    run([CTC, "build", p, "-o", exe, "--input", "xb=f32[8,20]", "--input", "yb=i64[8]", "--input", "x=bf16[8,20]"])
    rng = np.random.default_rng(4)
    xs = rng.standard_normal((10, 8, 20)).astype(np.float32)
    ys = rng.integers(0, 5, (10, 8))
    script = (f"import sys, numpy as np, torch\nsys.path.insert(0, {str(tmp_path)!r})\nimport m\n"
              "torch.manual_seed(0)\nsd = m.Net().bfloat16().state_dict()\ntorch.save(sd, 'w0.pt')\nd = np.load('inputs.npz')\n"
              "res = {}\nfor dt in (torch.bfloat16, torch.float32):\n"
              "    net = m.Net().to(dt)\n    net.load_state_dict({k: v.to(dt) for k, v in sd.items()})\n"
              f"    opt = {OPTS['sgd_wd'].replace('model.', 'net.')}\n"
              "    for x, y in zip(d['xs'], d['ys']):\n        opt.zero_grad()\n"
              "        torch.nn.functional.cross_entropy(net(torch.from_numpy(x).bfloat16().to(dt)).float(), "
              "torch.from_numpy(y)).backward()\n        opt.step()\n"
              "    for k, v in net.state_dict().items():\n        res[f'{dt}.{k}'] = v.float().numpy()\n"
              "np.savez('out.npz', **res)\nprint('{}')\n")
    out, _ = torch2(tmp_path, script, xs=xs, ys=ys)
    w, _ = ctc_steps(tmp_path, exe, tmp_path / "w0.pt", list(zip(xs, ys)))
    got = st_read(w)
    keys = [k for k in got if not k.startswith("optimizer.")]
    bf = {k: out[f"torch.bfloat16.{k}"].astype(np.float64) for k in keys}
    f32 = {k: out[f"torch.float32.{k}"] for k in keys}
    assert dist(got, bf) <= 0.1 * dist(f32, bf), (dist(got, bf), dist(f32, bf))


SCALARS = HEAD + """
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(64))

    def forward(self, x):
        h = x * self.w
        return torch.stack([h * 0.9, h / 0.97, h + 1e-3, 0.37 - h, torch.lerp(h, x, 0.1), h.lerp(x, 0.7),
                            torch.addcmul(h, x, h, value=0.001), torch.addcdiv(h, x, self.w.abs() + 1, value=-0.0123),
                            h ** 2, torch.where(h > 0, h, 0.3)])


model = Net().bfloat16()
"""


def test_numbers_beside_bfloat16_tensors(tmp_path):
    """How PyTorch 1.13 treats a Python number beside a bf16 tensor (probed): *, /, +, - and **
    round it to bf16 first; lerp's weight and addcmul's / addcdiv's value stay float (ctc's
    autocast rounded those too, a silent difference). Each result rounded once: bit for bit."""
    p = write(tmp_path, SCALARS)
    run([CTC, "build", p, "-o", tmp_path / "net", "--input", "x=bf16[64]"])
    mod = load_module(p, "half_scalars")
    torch.save(mod.model.state_dict(), tmp_path / "w.pt")
    x = np.random.default_rng(7).standard_normal(64).astype(np.float32)
    got = infer(tmp_path, tmp_path / "net", tmp_path / "w.pt", [x])
    with torch.no_grad():
        want = mod.model(torch.from_numpy(x).bfloat16()).float().numpy()
    for i in range(len(want)):
        assert np.array_equal(got[i], want[i]), (i, np.flatnonzero(got[i] != want[i]))


@pytest.mark.parametrize("body,spec,message", [
    ("class M(Net):\n    def forward(self, x):\n        self.bfloat16()\n        return self.fc(x)\n\n\nmodel = M()\n",
     "f32", r"m\.py:\d+:\d+: error: module\.bfloat16\(\) inside compiled code is not supported"),
    ("model = Net().bfloat16()\n", "f32", r"m\.py:\d+:\d+: error: 'Linear' on a mix of bfloat16 and float32 tensors"),
    ("model = Net().to(torch.int64)\n", "f32",
     r"m\.py:\d+:\d+: error: nn\.Module\.to only accepts floating point dtypes, but got desired dtype=i64"),
    ("model = Net().half().bfloat16()\n", "f16", r"error: 'Linear' on a mix of bfloat16 and float16 tensors"),
    ("model = Net().bfloat16()\n", "(bf16[2,4],f32[2,4])", r"bad --input"),
])
def test_refusals(tmp_path, body, spec, message):
    src = HEAD + "class Net(nn.Module):\n    def __init__(self):\n        super().__init__()\n" \
        "        self.fc = nn.Linear(4, 3)\n\n    def forward(self, x):\n        return self.fc(x)\n\n\n" + body
    p = write(tmp_path, src)
    r = subprocess.run([CTC, "check", p, "--input", f"x={spec}[2,4]" if "(" not in spec else f"x={spec}"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and re.search(message, r.stderr), r.stderr


def test_to_float64_casts(tmp_path):
    """model.to(torch.float64) casts (ctc used to ignore a dtype given to .to()), as .double()
    does; model.to('cpu') keeps the dtype; model.bfloat16().float() is float32 again."""
    src = HEAD + "class Net(nn.Module):\n    def __init__(self):\n        super().__init__()\n" \
        "        self.fc = nn.Linear(4, 3)\n\n    def forward(self, x):\n        return self.fc(x)\n\n\nmodel = CAST\n"
    for cast, want in (("Net().to(torch.float64)", "f64[3,4]"), ("Net().to(dtype=torch.double)", "f64[3,4]"),
                       ("Net().to('cpu')", "f32[3,4]"), ("Net().bfloat16().float()", "f32[3,4]")):
        p = write(tmp_path, src, CAST=cast)
        spec = "x=f64[2,4]" if "64" in want else "x=f32[2,4]"
        r = run([CTC, "compile", p, "--emit", "ir", "--input", spec])
        assert f'param "fc.weight" : {want}' in r.stdout, (cast, r.stdout[:400])
        assert "round_bf16" not in r.stdout



def test_cuda_target(tmp_path, rt_objects):
    """--target cuda: the bf16 GPT's GEMMs read bf16 parameters and bf16 activations, so they
    run on tensor cores (cublasGemmEx, f32 accumulation); the .cu passes --validate and nvcc
    (sm_80, sm_90, warnings as errors), and the program, run under the emulation header, gives
    the C target's logits and saves BF16 parameters."""
    p = write(tmp_path, GPT + "\n\nmodel = GPT().bfloat16()\n", "gpt.py")
    run([CTC, "build", p, "-o", tmp_path / "net", "--input", "idx=i64[2,8]"])
    torch.manual_seed(0)
    mod = load_module(p, "half_gpt_cuda")
    torch.save(mod.model.state_dict(), tmp_path / "w.pt")
    idx = np.random.default_rng(2).integers(0, 32, (2, 8)).astype(np.int64)
    want = infer(tmp_path, tmp_path / "net", tmp_path / "w.pt", [idx])
    cu, exe = emulated(tmp_path, p, ["--input", "idx=i64[2,8]"], rt_objects)
    text = cu.read_text()
    assert len(re.findall(r"ctc_gemm_lp\(", text)) >= 12, "the GEMMs on tensor cores"
    run([CTC, "compile", p, "--target", "cuda", "--validate", "-o", tmp_path / "v.cu", "--input", "idx=i64[2,8]"])
    if NVCC:
        run([NVCC, "-c", "-gencode", "arch=compute_80,code=sm_80", "-gencode", "arch=compute_90,code=sm_90",
             "-Werror", "all-warnings", "-Xcompiler", "-Wall,-Wextra,-Werror", "-I", RT, cu, "-o", tmp_path / "m.o"],
            timeout=600)
    np.save(tmp_path / "idx.npy", idx)
    run_env([exe, "infer", "--weights", tmp_path / "w.pt", "--input", tmp_path / "idx.npy", "--output",
             tmp_path / "cu.npy", "--save", tmp_path / "cu.safetensors"])
    got = np.load(tmp_path / "cu.npy")
    assert np.all(np.abs(got - want) <= bf16_ulp(want)), np.abs(got - want).max()
    assert set(st_dtypes(tmp_path / "cu.safetensors").values()) == {"BF16"}


def test_storage_is_16_bit(tmp_path):
    """The parameters are stored as bf16 (the arena's parameter region is half the float32
    model's, up to alignment), `./net info` says so, --freestanding --embed-weights writes the
    checkpoint's bf16 bits as const uint16_t arrays, the Python module's state_dict() gives
    their values as float32 arrays and load_state_dict rounds float32 ones into them, and
    --quantize int8 of such a model is refused."""
    sizes = {}
    for cast in ("float()", "bfloat16()"):
        p = write(tmp_path, MLP, CAST=cast)
        run([CTC, "compile", p, "-o", tmp_path / "m.c", "--input", "x=bf16[4,20]" if "bf" in cast else "x=f32[4,20]"])
        ends = [int(o) + int(np.prod([int(d) for d in dims.split(",")])) * {"CTC_F32": 4, "CTC_BF16": 2}[dt]
                for dt, dims, o in re.findall(r'\{"[^"]+", (CTC_\w+), \d+, \{([\d, ]+)\}, (\d+), NULL',
                                              (tmp_path / "m.c").read_text())]
        sizes[cast] = max(ends)   # the end of the parameters in the arena
    assert sizes["bfloat16()"] <= sizes["float()"] // 2 + 64 * 5, sizes
    p = write(tmp_path, MLP, CAST="bfloat16()")
    run([CTC, "build", p, "-o", tmp_path / "net", "--input", "x=bf16[4,20]"])
    assert "fc1.weight bf16[48, 20] (bfloat16 values, saved as BF16)" in run([tmp_path / "net", "info"]).stdout
    torch.manual_seed(0)
    mod = load_module(p, "half_storage")
    sd = mod.model.state_dict()
    torch.save(sd, tmp_path / "w.pt")
    run([CTC, "compile", p, "--freestanding", "--embed-weights", tmp_path / "w.pt", "-o", tmp_path / "fs.c",
         "--input", "x=bf16[4,20]"])
    text = (tmp_path / "fs.c").read_text()
    arr = re.search(r"/\* fc1\.weight bf16\[48,20\] \*/\nstatic const uint16_t ctc_w_\d+\[960\] = \{([^}]*)\}", text)
    assert arr, text[:2000]
    bits = [int(h, 16) for h in re.findall(r"0x[0-9A-F]{4}", arr.group(1))]
    assert bits == sd["fc1.weight"].view(torch.int16).flatten().numpy().view(np.uint16).tolist()
    run(["gcc", "-std=c11", "-Wall", "-Wextra", "-Werror", "-c", tmp_path / "fs.c", "-o", tmp_path / "fs.o"])
    r = subprocess.run([CTC, "compile", p, "--quantize", "int8", "--calibrate", tmp_path / "x.npy", "--weights",
                        tmp_path / "w.pt", "-o", tmp_path / "q.c", "--input", "x=bf16[4,20]"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and "--quantize int8 of a model converted with .bfloat16()" in r.stderr, r.stderr
    run([CTC, "build", p, "--python", "-o", tmp_path / "hmod", "--input", "x=bf16[4,20]"])
    x = np.random.default_rng(0).standard_normal((4, 20)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    want = infer(tmp_path, tmp_path / "net", tmp_path / "w.pt", [x])
    f32 = mod.Net().state_dict()   # float32 values: rounded on load
    script = (f"import sys, numpy as np, torch\nsys.path.insert(0, {str(tmp_path)!r})\nimport hmod\n"
              f"m = hmod.Model()\nsd = torch.load({str(tmp_path / 'w.pt')!r})\n"
              "print(m.load_state_dict({k: v.float() for k, v in sd.items()}))\n"
              "got = m.state_dict()\nassert all(got[k].dtype == np.float32 and np.array_equal(got[k], v.float().numpy()) "
              "for k, v in sd.items())\n"
              f"np.save({str(tmp_path / 'py.npy')!r}, m(np.load({str(tmp_path / 'x.npy')!r})))\n"
              f"f32 = torch.load({str(tmp_path / 'f32.pt')!r})\nm.load_state_dict({{k: v.numpy() for k, v in f32.items()}})\n"
              "got = m.state_dict()\nassert all(np.array_equal(got[k], v.bfloat16().float().numpy()) for k, v in f32.items())\n")
    torch.save(f32, tmp_path / "f32.pt")
    r = subprocess.run(["/usr/bin/python3", "-c", script], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert np.array_equal(np.load(tmp_path / "py.npy"), want)


def test_decode_entry(tmp_path):
    """A bf16 GPT gets the KV-cache `decode` entry (the roundings of its attention scores are
    elementwise, so the new token's row rounds as forward's does): `./net sample`'s logits at
    every full window equal the forward entry's on that window, within one bf16 step of the
    largest logit (a one-row GEMM against a T-row one may sum in another order; they were
    equal when measured)."""
    p = write(tmp_path, GPT + "\n\nmodel = GPT().bfloat16()\n", "gpt.py")
    exe = tmp_path / "net"
    r = run([CTC, "build", p, "-o", exe, "--input", "idx=i64[1,8]"])
    assert "no KV-cache decode entry" not in r.stderr, r.stderr
    assert "entry decode" in run([exe, "info"]).stdout
    torch.manual_seed(3)
    mod = load_module(p, "half_decode")
    torch.save(mod.model.state_dict(), tmp_path / "w.pt")
    r = run([exe, "sample", "--weights", tmp_path / "w.pt", "--prompt-tokens", "5,7,11", "--tokens", "24", "--seed", "1",
             "--logits", tmp_path / "l.npy"])
    assert "KV cache" in r.stderr, r.stderr
    tokens = [int(t) for t in r.stdout.split()]
    got = np.load(tmp_path / "l.npy")
    for i in range(8, len(tokens)):
        fw = infer(tmp_path, exe, tmp_path / "w.pt", [np.array([tokens[i - 8:i]], np.int64)])[0, -1]
        assert np.abs(got[i - 3] - fw).max() <= 2 ** -8 * np.abs(fw).max(), (i, np.abs(got[i - 3] - fw).max())
