"""The other LR schedulers of torch.optim.lr_scheduler (issue 16): LambdaLR,
MultiplicativeLR, ConstantLR, PolynomialLR, CosineAnnealingWarmRestarts, CyclicLR,
SequentialLR, ChainedScheduler and ReduceLROnPlateau, against PyTorch 1.13.

Each file holds several cases written as users write them: one small model
(several heads), one optimizer and scheduler per head, a train_step that steps
each optimizer and then each scheduler (per-step schedules), or a scheduler
stepped once per epoch. The compiled program runs step by step (the weights,
optimizer and scheduler state round-tripping through safetensors, so the state
survives save/load) and the learning rate and parameters of every case are
compared with PyTorch's after every step. MAX_REL collects the largest relative
difference of the learning rate per scheduler (printed with -s)."""
import atexit
import re

import numpy as np
import torch

from ctc_testlib import CTC, compare, load_module, run, st_read, st_write, state_dict_np

HEADER = """\
import math
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.optim.lr_scheduler import (ChainedScheduler, ConstantLR, CosineAnnealingLR, CosineAnnealingWarmRestarts,
                                      CyclicLR, ExponentialLR, LambdaLR, LinearLR, MultiplicativeLR, MultiStepLR,
                                      PolynomialLR, ReduceLROnPlateau, SequentialLR, StepLR)


def warmup_cosine(epoch):
    if epoch < 4:
        return (epoch + 1) / 4
    return 0.5 * (1.0 + math.cos(math.pi * (epoch - 4) / 20))


def every_third(epoch):
    if epoch % 3 == 0:
        return 0.8
    return 1.0


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.heads = nn.ModuleList([nn.Linear(6, 3) for _ in range({n})])

    def forward(self, x):
        return self.heads[0](x)


model = Net()
"""

MAX_REL = {}


def _report():
    if MAX_REL:
        print("\nmax relative lr difference to PyTorch per scheduler:")
        for k in sorted(MAX_REL):
            print(f"  {k:32s} {MAX_REL[k]:.3g}")


atexit.register(_report)


def source(cases, per_step=True, extra=""):
    """cases: (label, optimizer ctor with {p} for the parameters, scheduler lines with {o} for
    the optimizer and {s} the scheduler's name). One head, optimizer o<i>, scheduler s<i> per case."""
    src = HEADER.format(n=len(cases))
    body = []
    for i, (_, opt, sched, *stepped) in enumerate(cases):
        src += f"o{i} = torch.optim.{opt.format(p=f'model.heads[{i}].parameters()')}\n"
        src += sched.format(o=f"o{i}", s=f"s{i}") + "\n"
        steps = "".join(f"    {n.format(s=f's{i}')}.step()\n" for n in (stepped[0] if stepped else ["{s}"]))
        body.append(f"    o{i}.zero_grad()\n    loss{i} = F.cross_entropy(model.heads[{i}](x), y)\n"
                    f"    loss{i}.backward()\n    o{i}.step()\n" + (steps if per_step else ""))
    src += "\n\ndef train_step(x, y):\n" + "".join(body)
    src += "    return " + " + ".join(f"loss{i}" for i in range(len(cases))) + "\n" + extra
    src += ("\n\nexample_inputs = {\"forward\": (torch.randn(4, 6),), "
            "\"train_step\": (torch.randn(4, 6), torch.randint(0, 3, (4,)))}\n")
    return src


def build(tmp_path, src, name):
    path = tmp_path / f"{name}.py"
    path.write_text(src)
    exe = tmp_path / name
    run([CTC, "build", path, "-o", exe])
    return path, exe, load_module(str(path), name)


def check_lr(label, got, want, k, rtol=1e-5, atol=1e-9):
    rel = abs(got - want) / max(abs(want), 1e-30)
    MAX_REL[label] = max(MAX_REL.get(label, 0.0), rel if abs(got - want) > atol else 0.0)
    assert abs(got - want) <= rtol * abs(want) + atol, f"{label} step {k}: lr {got} vs PyTorch {want}"


def drive(tmp_path, exe, mod, cases, steps, between=None, seed=0, rtol_p=1e-4):
    """train_step `steps` times in both; after each, every case's lr (and SGD
    momentum) and parameters are compared. between(k, w) runs after each step (epoch
    entries) and returns the weights file to continue from."""
    w = tmp_path / "w.safetensors"
    st_write(w, state_dict_np(mod.model))
    rng = np.random.default_rng(seed)
    for k in range(steps):
        x = rng.standard_normal((4, 6)).astype(np.float32)
        y = rng.integers(0, 3, 4).astype(np.int64)
        np.save(tmp_path / "x.npy", x)
        np.save(tmp_path / "y.npy", y)
        nxt = tmp_path / f"w{k}.safetensors"
        run([exe, "run", "train_step", "--weights", w, "--input", tmp_path / "x.npy", "--input", tmp_path / "y.npy",
             "--save", nxt, "--save-training-state"])
        w = nxt
        mod.train_step(torch.from_numpy(x), torch.from_numpy(y))
        if between:
            w = between(k, w)
        got = st_read(w)
        for i, (label, *_) in enumerate(cases):
            group = getattr(mod, f"o{i}").param_groups[0]
            check_lr(label, float(got[f"o{i}.lr"]), group["lr"], k + 1)
            if f"o{i}.momentum" in got:
                assert abs(float(got[f"o{i}.momentum"]) - group["momentum"]) < 1e-6, (label, k, group["momentum"])
            for pn, v in mod.model.heads[i].state_dict().items():
                compare(f"{label} step {k + 1}: heads.{i}.{pn}", got[f"heads.{i}.{pn}"], v.numpy(), rtol_p, 1e-5)
    return w


SGD = "SGD({p}, lr=0.1, momentum=0.9)"
ADAM = "Adam({p}, lr=0.05)"

SINGLE = [
    ("LambdaLR(lambda)", SGD, "{s} = LambdaLR({o}, lr_lambda=lambda epoch: 0.95 ** epoch)"),
    ("LambdaLR(def, if)", ADAM, "{s} = LambdaLR({o}, warmup_cosine)"),
    ("MultiplicativeLR(lambda)", SGD, "{s} = MultiplicativeLR({o}, lr_lambda=lambda epoch: 0.9)"),
    ("MultiplicativeLR(def, if)", ADAM, "{s} = MultiplicativeLR({o}, [every_third])"),
    ("ConstantLR", SGD, "{s} = ConstantLR({o}, factor=0.5, total_iters=4)"),
    ("ConstantLR(defaults)", ADAM, "{s} = ConstantLR({o})"),
    ("PolynomialLR", SGD, "{s} = PolynomialLR({o}, total_iters=10, power=2.0)"),
    ("PolynomialLR(defaults)", ADAM, "{s} = PolynomialLR({o})"),
    ("CosineAnnealingWarmRestarts", SGD, "{s} = CosineAnnealingWarmRestarts({o}, T_0=5)"),
    ("CosineAnnealingWarmRestarts(T_mult)", ADAM,
     "{s} = CosineAnnealingWarmRestarts({o}, T_0=3, T_mult=2, eta_min=0.01)"),
]

CYCLIC = [
    ("CyclicLR(triangular)", "SGD({p}, lr=0.1, momentum=0.9)",
     "{s} = CyclicLR({o}, base_lr=0.01, max_lr=0.1, step_size_up=4)"),
    ("CyclicLR(triangular2)", "SGD({p}, lr=0.1)",
     "{s} = CyclicLR({o}, 0.02, 0.2, step_size_up=3, step_size_down=5, mode='triangular2', cycle_momentum=False)"),
    ("CyclicLR(exp_range)", "SGD({p}, lr=0.1, momentum=0.5)",
     "{s} = CyclicLR({o}, 0.01, 0.1, step_size_up=2, mode='exp_range', gamma=0.9, base_momentum=0.7, "
     "max_momentum=0.95)"),
    ("CyclicLR(scale_fn cycle)", "Adam({p}, lr=0.1)",
     "{s} = CyclicLR({o}, 0.01, 0.1, step_size_up=3, scale_fn=lambda x: 1 / (2.0 ** (x - 1)), cycle_momentum=False)"),
    ("CyclicLR(scale_fn iterations)", "SGD({p}, lr=0.1, momentum=0.9, nesterov=True)",
     "{s} = CyclicLR({o}, 0.01, 0.1, step_size_up=5, scale_fn=lambda x: 0.97 ** x, scale_mode='iterations')"),
    ("SequentialLR(Linear, CyclicLR momentum)", "SGD({p}, lr=0.1, momentum=0.9)",
     "{s} = SequentialLR({o}, [LinearLR({o}, start_factor=0.5, total_iters=4),\n"
     "    CyclicLR({o}, 0.01, 0.1, step_size_up=3, mode='triangular2')], milestones=[5])"),
]

COMPOSED = [
    ("SequentialLR(Linear, Exponential)", SGD,
     "{s} = SequentialLR({o}, [LinearLR({o}, start_factor=0.1, total_iters=5), ExponentialLR({o}, gamma=0.9)], "
     "milestones=[5])"),
    ("SequentialLR(Constant, Cosine, Step)", ADAM,
     "_a = ConstantLR({o}, factor=0.5, total_iters=3)\n_b = CosineAnnealingLR({o}, T_max=10)\n"
     "_c = StepLR({o}, step_size=3, gamma=0.5)\n{s} = SequentialLR({o}, schedulers=[_a, _b, _c], milestones=[4, 12])"),
    ("SequentialLR(Lambda, Multiplicative)", SGD,
     "{s} = SequentialLR({o}, [LambdaLR({o}, warmup_cosine), MultiplicativeLR({o}, lambda e: 0.9)], milestones=[6])"),
    ("SequentialLR(WarmRestarts, Polynomial)", SGD,
     "{s} = SequentialLR({o}, [CosineAnnealingWarmRestarts({o}, T_0=4), PolynomialLR({o}, total_iters=8)], "
     "milestones=[9])"),
    ("ChainedScheduler(Constant, Exponential)", SGD,
     "{s} = ChainedScheduler([ConstantLR({o}, factor=0.5, total_iters=4), ExponentialLR({o}, gamma=0.9)])"),
    ("ChainedScheduler(Linear, Cosine, MultiStep)", ADAM,
     "{s} = ChainedScheduler([LinearLR({o}, start_factor=0.2, total_iters=6), CosineAnnealingLR({o}, T_max=8),\n"
     "    MultiStepLR({o}, milestones=[3, 7, 7], gamma=0.5)])"),
    ("two stepped by hand (Linear, Step)", ADAM,
     "_w{s} = LinearLR({o}, start_factor=0.5, total_iters=4)\n{s} = StepLR({o}, step_size=3, gamma=0.5)", ["_w{s}", "{s}"]),
    ("ChainedScheduler(Polynomial, Step, Multiplicative)", SGD,
     "{s} = ChainedScheduler([PolynomialLR({o}, total_iters=12, power=0.5), StepLR({o}, 4, 0.7),\n"
     "    MultiplicativeLR({o}, every_third)])"),
]


def test_single_schedulers(tmp_path):
    src = source(SINGLE)
    n = len(SINGLE)
    src = src.replace(" + loss9\n", " + loss9, s1.get_last_lr()[0]\n")
    path, exe, mod = build(tmp_path, src, "single")
    w = drive(tmp_path, exe, mod, SINGLE, 24)
    # scheduler.get_last_lr() in compiled code: the lr this step set, a 0-d tensor the entry returns
    run([exe, "run", "train_step", "--weights", w, "--input", tmp_path / "x.npy", "--input", tmp_path / "y.npy",
         "--output", tmp_path / "o0.npy", "--output", tmp_path / "o1.npy"])
    mod.train_step(torch.from_numpy(np.load(tmp_path / "x.npy")), torch.from_numpy(np.load(tmp_path / "y.npy")))
    assert n == 10 and abs(float(np.load(tmp_path / "o1.npy")) - mod.s1.get_last_lr()[0]) < 1e-8


def test_cyclic(tmp_path):
    path, exe, mod = build(tmp_path, source(CYCLIC), "cyclic")
    drive(tmp_path, exe, mod, CYCLIC, 22)


def test_sequential_and_chained(tmp_path):
    path, exe, mod = build(tmp_path, source(COMPOSED), "composed")
    drive(tmp_path, exe, mod, COMPOSED, 24)


PLATEAU = [
    ("ReduceLROnPlateau(min rel)", SGD, "{s} = ReduceLROnPlateau({o}, patience=2, factor=0.5)"),
    ("ReduceLROnPlateau(max, cooldown)", ADAM,
     "{s} = ReduceLROnPlateau({o}, mode='max', patience=1, factor=0.3, cooldown=2, threshold=0.01)"),
    ("ReduceLROnPlateau(abs, min_lr)", SGD,
     "{s} = ReduceLROnPlateau({o}, threshold_mode='abs', threshold=0.05, patience=1, cooldown=1, min_lr=0.02)"),
    ("ReduceLROnPlateau(max abs, eps)", ADAM,
     "{s} = ReduceLROnPlateau({o}, 'max', factor=0.9, patience=0, threshold=0.02, threshold_mode='abs', eps=0.004)"),
]
METRICS = [1.0, 0.9, 0.95, 0.92, 0.91, 0.85, 0.86, 0.87, 0.88, 0.80, 0.81, 0.81, 0.82, 0.7, 0.75, 0.76, 0.77,
           0.78, 0.6, 0.61, 0.62, 0.63, 0.64, 0.65, 0.66, 0.9, 0.5]


def test_reduce_lr_on_plateau(tmp_path):
    """scheduler.step(val_loss) once per epoch in a compiled function, on a loss
    sequence that improves, stalls (reductions), and improves within cooldowns;
    lr and the state (best, num_bad_epochs, cooldown_counter) as PyTorch's."""
    extra = "\n\ndef end_of_epoch(val_loss):\n" + "".join(f"    s{i}.step(val_loss)\n" for i in range(len(PLATEAU)))
    src = source(PLATEAU, per_step=False, extra=extra).replace(
        '"train_step":', '"end_of_epoch": (torch.tensor(1.0),), "train_step":')
    path, exe, mod = build(tmp_path, src, "plateau")

    def between(k, w):
        m = np.array(METRICS[k], dtype=np.float32)
        np.save(tmp_path / "m.npy", m)
        nxt = tmp_path / f"p{k}.safetensors"
        run([exe, "run", "end_of_epoch", "--weights", w, "--input", tmp_path / "m.npy", "--save", nxt, "--save-training-state"])
        mod.end_of_epoch(torch.from_numpy(m))
        got = st_read(nxt)
        for i in range(len(PLATEAU)):
            s = getattr(mod, f"s{i}")
            assert float(got[f"s{i}.best"]) == s.best, (i, k, got[f"s{i}.best"], s.best)
            assert float(got[f"s{i}.num_bad_epochs"]) == s.num_bad_epochs, (i, k)
            assert float(got[f"s{i}.cooldown_counter"]) == s.cooldown_counter, (i, k)
        return nxt
    drive(tmp_path, exe, mod, PLATEAU, len(METRICS), between)
    for i in range(len(PLATEAU)):  # every case reduced its lr at least twice
        o = getattr(mod, f"o{i}")
        assert o.param_groups[0]["lr"] < o.defaults["lr"] * 0.95 ** 2, (i, o.param_groups[0]["lr"])
    # eps stops case 3 at 0.05 * 0.9 ** 3, where one more reduction would change the lr by less than eps
    assert abs(mod.o3.param_groups[0]["lr"] - 0.05 * 0.9 ** 3) < 1e-12, mod.o3.param_groups[0]["lr"]


def test_epoch_entries_of_composed(tmp_path):
    """The same compositions stepped once per epoch outside the training function:
    ctc adds one entry <scheduler>_step per ChainedScheduler/SequentialLR (none for
    their members), run after each epoch as `./net train` does."""
    path, exe, mod = build(tmp_path, source(COMPOSED, per_step=False), "composed_epochs")
    info = run([exe, "info"]).stdout
    entries = set(re.findall(r"entry (\w+)", info))
    assert {f"s{i}_step" for i in range(len(COMPOSED))} <= entries and not any("_a_step" in e for e in entries), info

    def between(k, w):
        for i, (_, _, _, *stepped) in enumerate(COMPOSED):
            for name in stepped[0] if stepped else ["{s}"]:
                name = name.format(s=f"s{i}")
                nxt = tmp_path / f"e{k}_{name}.safetensors"
                run([exe, "run", f"{name}_step", "--weights", w, "--save", nxt, "--save-training-state"])
                getattr(mod, name).step()
                w = nxt
        return w
    drive(tmp_path, exe, mod, COMPOSED, 20, between)


PLATEAU_TRAIN = """\
import torch
import torch.nn as nn
import torch.nn.functional as F


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(6, 3)

    def forward(self, x):
        return self.fc(x)


model = Net()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, threshold=0.5, patience=1, cooldown=1, factor=0.5)


def train_step(x, y):
    optimizer.zero_grad()
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()
    return loss


example_inputs = {"forward": (torch.randn(8, 6),), "train_step": (torch.randn(8, 6), torch.randint(0, 3, (8,)))}
"""


def test_train_feeds_plateau_the_test_loss(tmp_path):
    """`./net train --test-data` passes ReduceLROnPlateau the mean cross-entropy on
    the test set after each epoch (printed as `test loss`): it equals PyTorch's
    F.cross_entropy of the saved model on the test set, and PyTorch's
    ReduceLROnPlateau fed those losses gives the saved lr and state, epoch by
    epoch (state saved and loaded between runs) and over several epochs in one run."""
    path, exe, mod = build(tmp_path, PLATEAU_TRAIN, "plateau_train")
    rng = np.random.default_rng(3)
    for name, n in (("x", 32), ("tx", 20)):
        np.save(tmp_path / f"{name}.npy", rng.standard_normal((n, 6)).astype(np.float32))
        np.save(tmp_path / f"{name[:-1]}y.npy" if name == "tx" else tmp_path / "y.npy",
                rng.integers(0, 3, n).astype(np.int64))
    tx, ty = torch.from_numpy(np.load(tmp_path / "tx.npy")), torch.from_numpy(np.load(tmp_path / "ty.npy"))
    common = [exe, "train", "--data", tmp_path / "x.npy", "--labels", tmp_path / "y.npy", "--test-data",
              tmp_path / "tx.npy", "--test-labels", tmp_path / "ty.npy"]
    r = run(common[:6] + ["--epochs", "1"], check=False)
    assert r.returncode == 1 and "needs the evaluation loss: pass --test-data and --test-labels" in r.stderr, r.stderr
    w, lrs = None, []
    for epoch, count in enumerate([1, 1, 1, 1, 3]):
        out = tmp_path / f"t{epoch}.safetensors"
        res = run(common + ["--epochs", str(count), "--save", out, "--save-training-state"] + (["--weights", w] if w else []))
        losses = [float(v) for v in re.findall(r"test loss (\d+\.\d+)", res.stdout)]
        assert len(losses) == count, res.stdout
        got = st_read(out)
        model = mod.Net()
        model.load_state_dict({k: torch.from_numpy(got[k].copy()) for k in model.state_dict()})
        want = F_ce(model, tx, ty)
        assert abs(losses[-1] - want) <= 1e-5 * want + 1e-6, (losses[-1], want)
        for loss in losses:
            mod.scheduler.step(loss)
        lrs.append(mod.optimizer.param_groups[0]["lr"])
        check_lr("ReduceLROnPlateau(./net train)", float(got["optimizer.lr"]), lrs[-1], epoch + 1)
        assert float(got["scheduler.num_bad_epochs"]) == mod.scheduler.num_bad_epochs
        assert float(got["scheduler.cooldown_counter"]) == mod.scheduler.cooldown_counter
        w = out
    assert lrs[-1] <= 0.1 * 0.5 ** 2, lrs


def F_ce(model, x, y):
    with torch.no_grad():
        return float(torch.nn.functional.cross_entropy(model(x).double(), y))


ERRORS = [
    ("CyclicLR(optimizer, 0.01, 0.1)", "Adam", "optimizer must support momentum with `cycle_momentum` option enabled"),
    ("CyclicLR(optimizer, 0.01, 0.1)", "RMSprop", "CyclicLR's cycle_momentum is supported with SGD"),
    ("CyclicLR(optimizer, 0.01, 0.1, mode='cosine')", "SGD", "mode is invalid and scale_fn is None"),
    ("SequentialLR(optimizer, [StepLR(optimizer, 2), ExponentialLR(optimizer, 0.9)], milestones=[2, 4])", "SGD",
     "expects number of schedulers provided to be one more than the number of milestone points"),
    ("SequentialLR(optimizer, [ChainedScheduler([StepLR(optimizer, 2)]), ExponentialLR(optimizer, 0.9)], [3])", "SGD",
     "SequentialLR cannot hold a ChainedScheduler"),
    ("ChainedScheduler([StepLR(optimizer, 2), ReduceLROnPlateau(optimizer)])", "SGD",
     "ChainedScheduler cannot hold ReduceLROnPlateau"),
    ("ChainedScheduler([StepLR(optimizer, 2), StepLR(other, 3)])", "SGD",
     "ChainedScheduler expects all schedulers to belong to the same optimizer"),
    ("LambdaLR(optimizer, [lambda e: 1.0, lambda e: 0.5])", "SGD", "Expected 1 lr_lambdas, but got 2"),
    ("ConstantLR(optimizer, factor=1.5)", "SGD", "Constant multiplicative factor expected to be between 0 and 1."),
    ("CosineAnnealingWarmRestarts(optimizer, T_0=0)", "SGD", "Expected positive integer T_0, but got 0"),
    ("CosineAnnealingWarmRestarts(optimizer, T_0=5, T_mult=1.5)", "SGD", "Expected integer T_mult >= 1, but got 1.5"),
    ("ReduceLROnPlateau(optimizer, factor=1.0)", "SGD", "Factor should be < 1.0."),
    ("ReduceLROnPlateau(optimizer, mode='lowest')", "SGD", "mode lowest is unknown!"),
    ("ReduceLROnPlateau(optimizer, threshold_mode='pct')", "SGD", "threshold mode pct is unknown!"),
]

ERR_SRC = """\
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.optim.lr_scheduler import *


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 2)

    def forward(self, x):
        return self.fc(x)


model = Net()
other = torch.optim.SGD(model.parameters(), lr=0.1)
optimizer = torch.optim.{opt}(model.parameters(), lr=0.1)
scheduler = {sched}


def train_step(x, y):
    optimizer.zero_grad()
    F.cross_entropy(model(x), y).backward()
    optimizer.step()
    {step}
"""


def test_errors(tmp_path):
    """Arguments PyTorch rejects, with its messages, and what ctc cannot compile:
    located errors at the constructor (or the step() call)."""
    cases = [(s, o, m, "scheduler.step()", 19) for s, o, m in ERRORS]
    cases += [("ReduceLROnPlateau(optimizer)", "SGD", "metrics", "scheduler.step()", 26),
              ("ChainedScheduler([StepLR(optimizer, 2)])", "SGD", "step() takes at most 0 arguments (1 given)",
               "scheduler.step(3)", 26)]
    for sched, opt, msg, step, line in cases:
        path = tmp_path / "e.py"
        path.write_text(ERR_SRC.format(opt=opt, sched=sched, step=step).replace(
            "from torch.optim.lr_scheduler import *", "from torch.optim.lr_scheduler import (ChainedScheduler, "
            "ConstantLR, CosineAnnealingWarmRestarts, CyclicLR, ExponentialLR, LambdaLR, ReduceLROnPlateau, "
            "SequentialLR, StepLR)"))
        r = run([CTC, "compile", path, "-o", tmp_path / "e.c", "--input", "x=f32[3,4]", "--input", "y=i64[3]"],
                check=False)
        assert r.returncode == 1 and f"e.py:{line}:" in r.stderr and msg in r.stderr, (sched, r.stderr)

