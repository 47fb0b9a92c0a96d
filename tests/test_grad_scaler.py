"""torch.autocast('cpu', dtype=torch.float16) and an enabled GradScaler on the C target
(docs/mixed-precision.md): f16 numerics on float32 storage (the round_f16 primitive) and
PyTorch's dynamic loss scaling, against PyTorch 2.x's CPU autocast and GradScaler.

PyTorch 1.13 (the suite's oracle) has no CPU float16 autocast and no CPU GradScaler, so the
comparisons run PyTorch 2.x from bench/.venv in a subprocess and are skipped where that
interpreter is absent; the rounding itself is checked against numpy and PyTorch 1.13."""
import json
import os
import re
import subprocess

import numpy as np
import pytest
import torch

from ctc_testlib import CTC, compare, run, st_read, st_write, torch2_python

TORCH2 = torch2_python("numpy")   # the oracle scripts read and write .npz files
needs_torch2 = pytest.mark.skipif(TORCH2 is None, reason="PyTorch 2.x with numpy (bench/.venv) is not installed")

HEAD = "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n\n"


def f16_ulp(x):
    """One float16 unit in the last place at each of x's magnitudes (2^-24 under 2^-14)."""
    x = np.maximum(np.abs(np.asarray(x, np.float64)), 2.0 ** -14)
    return 2.0 ** (np.floor(np.log2(x)) - 10)


def torch2(tmp_path, script, **arrays):
    """Run script under PyTorch 2.x with the arrays in inputs.npz; returns the npz it saves as out.npz
    and its printed JSON line."""
    np.savez(tmp_path / "inputs.npz", **arrays)
    p = tmp_path / "oracle.py"
    p.write_text(script)
    r = subprocess.run([TORCH2, str(p)], capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert r.returncode == 0, r.stderr
    return dict(np.load(tmp_path / "out.npz")), json.loads(r.stdout.strip().splitlines()[-1])


def test_round_f16_values(tmp_path):
    """x.half() / x.to(torch.float16): IEEE binary16 round to nearest even, overflow to inf from
    65520, subnormals, NaN kept, as numpy and PyTorch convert."""
    p = tmp_path / "conv.py"
    p.write_text(HEAD + "class Net(nn.Module):\n    def forward(self, x):\n"
                 "        return x.half().float(), x.to(torch.float16).float() * 1.0, x[0] * 0 + (x.to(torch.half).dtype == torch.float16)\n\n\n"
                 "model = Net()\nexample_inputs = {'forward': (torch.randn(96),)}\n")
    x = np.array([1 + 2 ** -11, 1 + 3 * 2 ** -11, 1 + 2 ** -11 + 2 ** -20, -(1 + 2 ** -11), 0.0, -0.0, 65504.0, 65519.99,
                  65520.0, -65520.0, 1e6, float("inf"), float("-inf"), float("nan"), 2 ** -14, 2 ** -14 - 2 ** -26,
                  2 ** -24, 2 ** -25, 2 ** -25 + 2 ** -40, 3 * 2 ** -25, 5 * 2 ** -25, -3 * 2 ** -25, 2 ** -26, 1e-30,
                  6.1e-5, 0.1, 1 / 3] + list(np.random.default_rng(0).standard_normal(69) * 30), np.float32)
    exe = tmp_path / "net"
    run([CTC, "build", p, "-o", exe])
    np.save(tmp_path / "x.npy", x)
    outs = [tmp_path / f"o{i}.npy" for i in range(3)]
    run([exe, "infer", "--input", tmp_path / "x.npy"] + sum([["--output", o] for o in outs], []))
    with np.errstate(over="ignore"):
        want = x.astype(np.float16).astype(np.float32)
    np.testing.assert_array_equal(np.load(outs[0]), want)
    np.testing.assert_array_equal(np.load(outs[1]), want)
    np.testing.assert_array_equal(torch.from_numpy(x).half().float().numpy(), want)   # PyTorch 1.13 agrees
    assert bool(np.load(outs[2]))


MLP = HEAD + '''
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(20, 64)
        self.fc2 = nn.Linear(64, 64)
        self.fc3 = nn.Linear(64, 10)

    def forward(self, x):
        with torch.autocast("cpu", dtype=torch.float16):
            h = F.gelu(self.fc1(x))
            h = torch.tanh(self.fc2(h)) * 0.353 + h - 0.1
            with torch.autocast("cpu", enabled=False):
                g = self.fc3(h.to(x.dtype))
            s = F.softmax(self.fc3(h) / 1.37, -1)
            return g + self.fc3(h), s.float(), (h.dtype == torch.float16) + x[0, 0] * 0, (0.7 / (h * h + 1)).float()


torch.manual_seed(0)
model = Net()
example_inputs = {"forward": (torch.randn(16, 20),)}
'''

MLP_ORACLE = '''import sys, json, numpy as np, torch
sys.path.insert(0, ".")
import mlp
x = torch.from_numpy(np.load("inputs.npz")["x"])
m = mlp.model
with torch.no_grad():
    out = [o.float().numpy() for o in m(x)]
    out[1] = np.concatenate([out[1], out[3]], 1)
    m64 = mlp.Net().double()
    m64.load_state_dict(m.state_dict())
    ref = [o.double().numpy() for o in m64(x.double())]
    ref[1] = np.concatenate([ref[1], ref[3]], 1)
np.savez("out.npz", o0=out[0], o1=out[1], r1=ref[1], **{k: v.numpy() for k, v in m.state_dict().items()})
print(json.dumps({"torch": torch.__version__}))
'''


@needs_torch2
def test_f16_mlp_forward(tmp_path):
    """Forward of an MLP in a float16 region (with a nested enabled=False): PyTorch 2.x's f16
    outputs within one f16 rounding, and no further from float64 than PyTorch's."""
    (tmp_path / "mlp.py").write_text(MLP)
    x = (np.random.default_rng(3).standard_normal((16, 20)) * 2).astype(np.float32)
    want, info = torch2(tmp_path, MLP_ORACLE, x=x)
    exe = tmp_path / "net"
    run([CTC, "build", tmp_path / "mlp.py", "-o", exe])
    st_write(tmp_path / "w.safetensors", {k: want[k] for k in want if k.startswith("fc")})
    np.save(tmp_path / "x.npy", x)
    outs = [tmp_path / f"o{i}.npy" for i in range(4)]
    run([exe, "infer", "--weights", tmp_path / "w.safetensors", "--input", tmp_path / "x.npy"] +
        sum([["--output", o] for o in outs], []))
    got = [np.load(o) for o in outs]
    got[1] = np.concatenate([got[1], got[3]], 1)   # softmax and 0.7 / (h * h + 1) (h.reciprocal() * 0.7 in PyTorch)
    d0 = np.abs(got[0].astype(np.float64) - want["o0"])
    assert (d0 <= 2 * f16_ulp(want["o0"])).all(), f"output 0 (f32 from f16 values): {d0.max():.3g}"
    d1 = np.abs(got[1].astype(np.float64) - want["o1"])
    dc, dt = np.abs(got[1] - want["r1"]).max(), np.abs(want["o1"] - want["r1"]).max()
    print(f"PyTorch {info['torch']}: f16 mlp output 0 max |ctc - torch| {d0.max():.3g}; softmax, 0.7 / h {d1.max():.3g} "
          f"({(d1 > 0).mean():.1%} differ); distance to float64 ctc {dc:.3g}, torch {dt:.3g}")
    assert (d1 <= f16_ulp(want["o1"])).all(), f"softmax: {d1.max():.3g} exceeds one f16 ulp"
    assert dc <= dt * 1.01 + 1e-12
    assert float(got[2]) == 1.0   # h.dtype == torch.float16


# PyTorch's AMP recipe with float16 autocast: scale, backward, unscale_, clip, step, update;
# a large init_scale overflows the f16 gradients of the first steps (skipped, scale halved),
# a tiny growth_interval grows it again, and one batch of huge inputs overflows the forward.
SCALER = HEAD + '''
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(12, 32)
        self.fc2 = nn.Linear(32, 5)

    def forward(self, x):
        return self.fc2(F.gelu(self.fc1(x)) * 0.7)


torch.manual_seed(0)
model = Net()
optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 22, growth_interval=3, backoff_factor=0.25)


def train_step(x, y):
    optimizer.zero_grad()
    with torch.autocast(device_type="cpu", dtype=torch.float16):
        loss = F.cross_entropy(model(x), y)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(optimizer)
    scaler.update()
    return loss


example_inputs = {"forward": (torch.randn(16, 12),),
                  "train_step": (torch.randn(16, 12), torch.zeros(16, dtype=torch.long))}
'''

SCALER_ORACLE = '''import sys, json, numpy as np, torch
sys.path.insert(0, ".")
import scaler_model as sm
d = np.load("inputs.npz")
init = {k: v.clone() for k, v in sm.model.state_dict().items()}
out, scales, losses = {}, [], []
for i in range(len(d["xs"])):
    losses.append(float(sm.train_step(torch.from_numpy(d["xs"][i]), torch.from_numpy(d["ys"][i]))))
    scales.append(sm.scaler.get_scale())
    for k, v in sm.model.state_dict().items():
        out[f"{i}/{k}"] = v.numpy().copy()
    st = sm.optimizer.state.get(next(sm.model.parameters()), {})
    out[f"{i}/step"] = np.float32(st.get("step", -1))
out.update({f"init/{k}": v.numpy() for k, v in init.items()})
np.savez("out.npz", **out)
print(json.dumps({"scales": scales, "losses": losses, "tracker": sm.scaler._growth_tracker.item(), "torch": torch.__version__}))
'''


@needs_torch2
def test_grad_scaler_f16_steps(tmp_path):
    (tmp_path / "scaler_model.py").write_text(SCALER)
    steps = 12
    rng = np.random.default_rng(5)
    xs = rng.standard_normal((steps, 16, 12)).astype(np.float32)
    xs[8] *= 1e5   # past float16's range: an inf in the forward, a NaN loss, a skipped step
    ys = rng.integers(0, 5, (steps, 16))
    want, info = torch2(tmp_path, SCALER_ORACLE, xs=xs, ys=ys)
    exe = tmp_path / "net"
    run([CTC, "build", tmp_path / "scaler_model.py", "-o", exe])
    keys = [k[5:] for k in want if k.startswith("init/")]
    w = tmp_path / "w0.safetensors"
    st_write(w, {k: want[f"init/{k}"] for k in keys})
    prev = {k: want[f"init/{k}"] for k in keys}
    scales, trackers, losses, skipped = [], [], [], []
    for s in range(steps):
        np.save(tmp_path / "x.npy", xs[s])
        np.save(tmp_path / "y.npy", ys[s])
        w_next = tmp_path / f"w{s + 1}.safetensors"
        run([exe, "run", "train_step", "--weights", w, "--input", tmp_path / "x.npy", "--input", tmp_path / "y.npy",
             "--output", tmp_path / "loss.npy", "--save", w_next, "--save-training-state"])
        losses.append(float(np.load(tmp_path / "loss.npy")))
        st = st_read(w_next)
        scales.append(float(st["scaler.scale"]))
        trackers.append(int(st["scaler._growth_tracker"]))
        same = all(np.array_equal(st[k], prev[k]) for k in keys)
        same_torch = all(np.array_equal(want[f"{s}/{k}"], (want[f"{s - 1}/{k}"] if s else want[f"init/{k}"]))
                         for k in keys)
        assert same == same_torch, f"step {s}: ctc {'skipped' if same else 'stepped'}, PyTorch did not"
        if same:
            skipped.append(s)
        for k in keys:
            compare(f"step {s} {k}", st[k], want[f"{s}/{k}"], 2e-3, 2e-5)
        prev = {k: st[k] for k in keys}
        w = w_next
    print(f"PyTorch {info['torch']}: scales ctc {scales}\n  torch {info['scales']}; skipped steps {skipped}; "
          f"final max |w ctc - w torch| "
          f"{max(np.abs(st[k] - want[f'{steps - 1}/{k}']).max() for k in keys):.3g}")
    assert scales == info["scales"]
    assert trackers[-1] == info["tracker"]
    assert 8 in skipped and 0 in skipped and len(skipped) < steps - 3
    assert float(st["optimizer.step"]) == float(want[f"{steps - 1}/step"])   # skipped steps do not count
    fin = [i for i, l in enumerate(info["losses"]) if np.isfinite(l)]
    np.testing.assert_allclose(np.array(losses)[fin], np.array(info["losses"])[fin], rtol=2e-3)
    assert not np.isfinite(losses[8])


BAD = [
    ("mixed_bf16_f16", "a = x.half()\n        return a + x.bfloat16()",
     "'+' on a mix of bfloat16 and float16 tensors is not supported by ctc"),
    ("f16_factory", "return x + torch.zeros(4, dtype=torch.float16)",
     "torch.float16 as a dtype of 'zeros' is not supported by ctc"),
    ("layer_norm_f16", "with torch.autocast('cpu', dtype=torch.float16):\n            h = self.fc(x)\n        "
                       "return self.ln(h)", "'LayerNorm' on a mix of float16 and float32 tensors is not supported"),
    ("growth_factor", "s = torch.amp.GradScaler('cpu', growth_factor=0.5)\n        return x",
     "The growth factor must be > 1.0."),
    # a method ctc does not compile: named as the scaler's (it said "'builtin function' object")
    ("set_growth_factor", "s = torch.amp.GradScaler('cpu', enabled=False)\n        s.set_growth_factor(3.0)\n"
                          "        return x", "'GradScaler' object has no attribute 'set_growth_factor'"),
    ("load_state_dict", "s = torch.amp.GradScaler('cpu', enabled=False)\n        s.load_state_dict({'scale': 4.0})\n"
                        "        return x", "GradScaler.load_state_dict(): ctc keeps the scaler's scale"),
]


@pytest.mark.parametrize("label,body,msg", BAD, ids=[b[0] for b in BAD])
def test_refusals(tmp_path, label, body, msg):
    src = HEAD + ("class Net(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
                  "        self.fc = nn.Linear(4, 4)\n        self.ln = nn.LayerNorm(4)\n\n"
                  f"    def forward(self, x):\n        {body}\n")
    p = tmp_path / "bad.py"
    p.write_text(src)
    r = subprocess.run([CTC, "check", str(p), "--input", "x=f32[2,4]"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 1, r.stderr
    m = re.search(rf"{re.escape(str(p))}:(\d+):\d+: error: ", r.stderr)
    assert m and 12 <= int(m.group(1)) < 13 + body.count("\n") + 1, r.stderr
    assert msg in r.stderr, r.stderr


def test_state_dict(tmp_path):
    """scaler.state_dict() in a training function: PyTorch's keys, its numbers, and the scale and
    growth tracker after the step (the state tensors); loading it back is a no-op; disabled, {}."""
    src = SCALER.replace("    scaler.update()\n    return loss\n", "    scaler.update()\n    sd = scaler.state_dict()\n"
                         "    scaler.load_state_dict(sd)\n    assert sorted(sd) == ['_growth_tracker', 'backoff_factor', "
                         "'growth_factor', 'growth_interval', 'scale']\n"
                         "    assert (sd['growth_factor'], sd['backoff_factor'], sd['growth_interval']) == (2.0, 0.25, 3)\n"
                         "    assert scaler.get_growth_interval() == 3 and scaler.get_backoff_factor() == 0.25\n"
                         "    assert torch.amp.GradScaler('cpu', enabled=False).state_dict() == {}\n"
                         "    return loss, sd['scale'], sd['_growth_tracker']\n")
    p = tmp_path / "m.py"
    p.write_text(src)
    exe = tmp_path / "net"
    run([CTC, "build", p, "-o", exe])
    rng = np.random.default_rng(0)
    w, scales = None, []
    for i in range(4):
        np.save(tmp_path / "x.npy", rng.standard_normal((16, 12)).astype(np.float32))
        np.save(tmp_path / "y.npy", rng.integers(0, 5, 16))
        nxt = tmp_path / f"w{i}.safetensors"
        args = [exe, "run", "train_step", "--input", tmp_path / "x.npy", "--input", tmp_path / "y.npy", "--output",
                tmp_path / "l.npy", "--output", tmp_path / "s.npy", "--output", tmp_path / "t.npy", "--save", nxt,
                "--save-training-state"]
        run(args + (["--weights", w] if w else []))
        st = st_read(nxt)
        assert float(np.load(tmp_path / "s.npy")) == float(st["scaler.scale"])
        assert int(np.load(tmp_path / "t.npy")) == int(st["scaler._growth_tracker"])
        scales.append(float(st["scaler.scale"]))
        w = nxt
    assert scales[0] == 2.0 ** 20 and len(set(scales)) > 1, scales   # the scale moved: the outputs followed it


def test_step_without_update_refused(tmp_path):
    """scaler.step() with no scaler.update() in the function: PyTorch raises at the next call."""
    p = tmp_path / "bad.py"
    p.write_text(SCALER.replace("    scaler.update()\n", ""))
    r = subprocess.run([CTC, "check", str(p)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 1, r.stderr
    assert re.search(rf"{re.escape(str(p))}:\d+:\d+: error: 'train_step' calls scaler.step\(\) or unscale_\(\) for "
                     r"'optimizer' but no scaler.update\(\) after it", r.stderr), r.stderr


GPT_ORACLE = '''import sys, json, numpy as np, torch
sys.path.insert(0, ".")
import gpt16
torch.manual_seed(0)
m = gpt16.Net()
with torch.no_grad():
    for q in m.parameters():
        q.add_(0.1 * torch.randn_like(q))
idx = torch.from_numpy(np.load("inputs.npz")["idx"])
with torch.no_grad():
    out = m(idx).float().numpy()
    m64 = gpt16.Net().double()
    m64.load_state_dict(m.state_dict())
    ref = m64.m(idx).numpy()
np.savez("out.npz", out=out, ref=ref, **{k: v.numpy() for k, v in m.state_dict().items()})
print(json.dumps({"torch": torch.__version__}))
'''


@needs_torch2
def test_f16_gpt_forward(tmp_path):
    """test_autocast.py's 2-block GPT in a float16 region (attention scores times a Python
    number, kept in f32 by PyTorch 2.x's f16 mul; masked_fill; softmax; GELU)."""
    from test_autocast import GPT_FORWARD
    (tmp_path / "gpt16.py").write_text(GPT_FORWARD.replace("dtype=torch.bfloat16", "dtype=torch.float16"))
    idx = np.random.default_rng(4).integers(0, 32, (4, 8))
    want, info = torch2(tmp_path, GPT_ORACLE, idx=idx)
    exe = tmp_path / "net"
    run([CTC, "build", tmp_path / "gpt16.py", "-o", exe])
    st_write(tmp_path / "w.safetensors", {k: want[k] for k in want if k.startswith("m.")})
    np.save(tmp_path / "idx.npy", idx)
    run([exe, "infer", "--weights", tmp_path / "w.safetensors", "--input", tmp_path / "idx.npy",
         "--output", tmp_path / "o.npy"])
    got = np.load(tmp_path / "o.npy").astype(np.float64)
    d = np.abs(got - want["out"])
    dc, dt = np.abs(got - want["ref"]).max(), np.abs(want["out"] - want["ref"]).max()
    print(f"PyTorch {info['torch']}: f16 gpt logits max |ctc - torch| {d.max():.3g} ({(d > 0).mean():.1%} differ); "
          f"distance to float64 ctc {dc:.3g}, torch {dt:.3g}")
    # under 2% of the logits differ (8 of 1024 today), by at most one f16 step of the largest logit
    # (a different last bit of an f16 operand upstream, carried through the head's GEMM: an absolute
    # error, large relative to the smallest logits), and ctc is as far from float64 as PyTorch is
    assert d.max() <= f16_ulp(np.abs(want["out"]).max()), f"{d.max():.3g} exceeds one f16 step of the largest logit"
    assert (d > 0).mean() < 0.02
    assert dc <= dt * 1.01 + 1e-12


def test_grad_scaler_rules_without_oracle(tmp_path):
    """Without PyTorch 2.x: torch.cuda.amp.GradScaler's spelling, SGD with momentum; a step is skipped
    (weights, momentum and the step count bitwise unchanged) exactly when the loss or a gradient is
    not finite, and the scale and tracker follow update()'s rule from the skips seen."""
    src = SCALER.replace('torch.amp.GradScaler("cpu", init_scale=2.0 ** 22, growth_interval=3, backoff_factor=0.25)',
                         "torch.cuda.amp.GradScaler(init_scale=2.0 ** 22, growth_factor=4.0, growth_interval=2)")
    src = src.replace("torch.optim.Adam(model.parameters(), lr=1e-2)",
                      "torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)")
    p = tmp_path / "sgd_scaler.py"
    p.write_text(src)
    exe = tmp_path / "net"
    run([CTC, "build", p, "-o", exe])
    rng = np.random.default_rng(7)
    w = tmp_path / "w0.safetensors"
    torch.manual_seed(0)
    st_write(w, {"fc1.weight": (torch.randn(32, 12) * 0.3).numpy(), "fc1.bias": np.zeros(32, np.float32),
                 "fc2.weight": (torch.randn(5, 32) * 0.2).numpy(), "fc2.bias": np.zeros(5, np.float32)})
    scale, tracker, prev, skips = 2.0 ** 22, 0, st_read(w), []
    for s in range(8):
        x = rng.standard_normal((16, 12)).astype(np.float32) * (1e5 if s == 5 else 1)
        np.save(tmp_path / "x.npy", x)
        np.save(tmp_path / "y.npy", rng.integers(0, 5, 16))
        w_next = tmp_path / f"w{s + 1}.safetensors"
        run([exe, "run", "train_step", "--weights", w, "--input", tmp_path / "x.npy", "--input", tmp_path / "y.npy",
             "--output", tmp_path / "loss.npy", "--save", w_next, "--save-training-state"])
        st = st_read(w_next)
        skipped = all(np.array_equal(st[k], prev[k]) for k in prev if not k.startswith("scaler."))
        if skipped:
            scale, tracker = scale * 0.5, 0
            skips.append(s)
        else:
            tracker += 1
            if tracker == 2:
                scale, tracker = scale * 4, 0
        assert float(st["scaler.scale"]) == scale and int(st["scaler._growth_tracker"]) == tracker, s
        assert np.isfinite(float(np.load(tmp_path / "loss.npy"))) or skipped
        prev, w = st, w_next
    print(f"skipped steps {skips}; final scale {scale}")
    assert 0 in skips and 5 in skips and len(skips) < 7
    assert float(st["optimizer.step"]) == 8 - len(skips)


GPT_SCALER = """
model = GPT()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 17, growth_interval=2)


def train_step(idx, targets):
    optimizer.zero_grad()
    with torch.autocast(device_type="cpu", dtype=torch.float16):
        logits = model(idx)
        loss = F.cross_entropy(logits.view(-1, V), targets.view(-1))
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    return loss


example_inputs = {"forward": (torch.zeros(4, T, dtype=torch.long),),
                  "train_step": (torch.zeros(4, T, dtype=torch.long), torch.zeros(4, T, dtype=torch.long))}
"""


@needs_torch2
def test_grad_scaler_f16_gpt(tmp_path):
    """test_autocast.py's GPT trained in float16 with a GradScaler whose growth (every 2 steps) overflows the f16
    gradients at 2**19: the same steps skipped (weights bitwise unchanged), the same
    scale trajectory, the weights close to PyTorch 2.x's."""
    from test_autocast import GPT
    (tmp_path / "scaler_model.py").write_text(GPT + "\ntorch.manual_seed(0)\n" + GPT_SCALER)
    steps = 8
    rng = np.random.default_rng(6)
    xs, ys = rng.integers(0, 32, (steps, 4, 8)), rng.integers(0, 32, (steps, 4, 8))
    want, info = torch2(tmp_path, SCALER_ORACLE, xs=xs, ys=ys)
    exe = tmp_path / "net"
    run([CTC, "build", tmp_path / "scaler_model.py", "-o", exe])
    keys = [k[5:] for k in want if k.startswith("init/")]
    w = tmp_path / "w0.safetensors"
    st_write(w, {k: want[f"init/{k}"] for k in keys})
    scales, skipped, dmax = [], [], 0.0
    for s in range(steps):
        np.save(tmp_path / "x.npy", xs[s])
        np.save(tmp_path / "y.npy", ys[s])
        w_next = tmp_path / f"w{s + 1}.safetensors"
        run([exe, "run", "train_step", "--weights", w, "--input", tmp_path / "x.npy", "--input", tmp_path / "y.npy",
             "--output", tmp_path / "loss.npy", "--save", w_next, "--save-training-state"])
        st, before = st_read(w_next), st_read(w)
        scales.append(float(st["scaler.scale"]))
        same = all(np.array_equal(st[k], before[k]) for k in keys if not k.endswith("mask"))
        prev_t = want[f"{s - 1}/head.weight"] if s else want["init/head.weight"]
        assert same == np.array_equal(want[f"{s}/head.weight"], prev_t), f"step {s}"
        if same:
            skipped.append(s)
        dmax = max(dmax, max(float(np.abs(st[k] - want[f"{s}/{k}"]).max()) for k in keys))
        w = w_next
    print(f"PyTorch {info['torch']}: gpt scales ctc {scales}\n  torch {info['scales']}; skipped {skipped}; "
          f"max |w ctc - w torch| over the steps {dmax:.3g}")
    assert scales == info["scales"] and 0 < len(skipped) < steps
    for k in keys:
        compare(f"after {steps} steps {k}", st[k], want[f"{steps - 1}/{k}"], 2e-3, 2e-4)
