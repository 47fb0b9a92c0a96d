"""LR schedulers on parameter groups with their own learning rates, per-group
arguments (a list of lr_lambdas, base_lr/max_lr lists), scheduler.step(epoch)
with an explicit epoch, Python builtins and math of the epoch inside lambdas,
and state_dict()/load_state_dict()/get_last_lr() in training code, against
PyTorch 1.13 (issue 16).

Every case is one head of a small model with two parameter groups (weight,
bias) of different learning rates, one optimizer and one scheduler. The
program runs step by step (weights and all state round-tripping through
safetensors); after every step each group's learning rate (the state tensor
"<optimizer>.lr" for group 0, "<optimizer>.lr.<i>" for group i) and every
parameter are compared with PyTorch's. MAX_REL in test_sched_more collects
the largest relative lr difference per case (printed with -s)."""
import numpy as np
import torch

from ctc_testlib import CTC, compare, load_module, run, st_read, st_write, state_dict_np
from test_sched_more import MAX_REL, check_lr

HEADER = """\
import math
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.optim.lr_scheduler import (ChainedScheduler, ConstantLR, CosineAnnealingLR, CosineAnnealingWarmRestarts,
                                      CyclicLR, ExponentialLR, LambdaLR, LinearLR, MultiplicativeLR, MultiStepLR,
                                      OneCycleLR, PolynomialLR, SequentialLR, StepLR)


def warmup_cosine(epoch):
    # builtins and math on the epoch (a run-time value in compiled code)
    warm = min(1.0, float(epoch + 1) / 4)
    return warm * 0.5 * (1.0 + math.cos(math.pi * min(epoch, 20) / 20))


def floor_decay(epoch):
    return max(0.2, 1.0 - abs(epoch - 2) / 10) * math.exp(-0.01 * epoch) + math.sqrt(float(epoch)) / 100


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.heads = nn.ModuleList([nn.Linear(6, 3) for _ in range({n})])

    def forward(self, x):
        return self.heads[0](x)


model = Net()
"""


def groups(i, opt):
    h = f"model.heads[{i}]"
    return opt.format(g=f"[{{'params': [{h}.weight]}}, {{'params': [{h}.bias], 'lr': 0.02}}]")


CASES = [
    ("LambdaLR([lambda, def])", "SGD({g}, lr=0.1, momentum=0.9)",
     "{s} = LambdaLR({o}, lr_lambda=[lambda e: 0.9 ** e, warmup_cosine])"),
    ("LambdaLR(builtins of the epoch)", "Adam({g}, lr=0.05)", "{s} = LambdaLR({o}, floor_decay)"),
    ("MultiplicativeLR([lambda, lambda])", "SGD({g}, lr=0.1)",
     "{s} = MultiplicativeLR({o}, [lambda e: 0.95, lambda e: 0.8 if e % 3 == 0 else 1.0])"),
    ("StepLR(two lrs)", "SGD({g}, lr=0.1)", "{s} = StepLR({o}, step_size=3, gamma=0.5)"),
    ("CosineAnnealingWarmRestarts(two lrs)", "Adam({g}, lr=0.05)",
     "{s} = CosineAnnealingWarmRestarts({o}, T_0=3, T_mult=2, eta_min=0.001)"),
    ("CyclicLR(base_lr, max_lr lists)", "SGD({g}, lr=0.1, momentum=0.9)",
     "{s} = CyclicLR({o}, base_lr=[0.01, 0.002], max_lr=[0.1, 0.05], step_size_up=3, mode='triangular2')"),
    ("OneCycleLR(max_lr list)", "SGD({g}, lr=0.1, momentum=0.9)",
     "{s} = OneCycleLR({o}, max_lr=[0.2, 0.05], total_steps=30)"),
    ("ChainedScheduler(two lrs)", "SGD({g}, lr=0.1)",
     "{s} = ChainedScheduler([ConstantLR({o}, factor=0.5, total_iters=4), ExponentialLR({o}, gamma=0.9)])"),
    ("SequentialLR(two lrs)", "Adam({g}, lr=0.05)",
     "{s} = SequentialLR({o}, [LinearLR({o}, start_factor=0.2, total_iters=4), LambdaLR({o}, [warmup_cosine, "
     "lambda e: 0.9 ** e])], milestones=[5])"),
]


def source(cases, step_line="    {s}.step()\n", inputs=2, extra=""):
    src = HEADER.format(n=len(cases))
    body = []
    for i, (_, opt, sched) in enumerate(cases):
        src += f"o{i} = torch.optim.{groups(i, opt)}\n" + sched.format(o=f"o{i}", s=f"s{i}") + "\n"
        body.append(f"    o{i}.zero_grad()\n    loss{i} = F.cross_entropy(model.heads[{i}](x), y)\n"
                    f"    loss{i}.backward()\n    o{i}.step()\n" + step_line.format(s=f"s{i}"))
    args = "x, y" + (", epoch" if inputs == 3 else "")
    src += f"\n\ndef train_step({args}):\n" + "".join(body) + extra
    src += "    return " + " + ".join(f"loss{i}" for i in range(len(cases))) + "\n"
    ex = '"train_step": (torch.randn(4, 6), torch.randint(0, 3, (4,))' + (", torch.tensor(0))" if inputs == 3 else ")")
    src += f'\n\nexample_inputs = {{"forward": (torch.randn(4, 6),), {ex}}}\n'
    return src


def drive(tmp_path, src, name, cases, epochs):
    """One train_step per entry of `epochs` (None: no epoch input), compared with PyTorch after each."""
    path = tmp_path / f"{name}.py"
    path.write_text(src)
    exe = tmp_path / name
    run([CTC, "build", path, "-o", exe])
    mod = load_module(str(path), name)
    w = tmp_path / "w.safetensors"
    st_write(w, state_dict_np(mod.model))
    rng = np.random.default_rng(0)
    for k, ep in enumerate(epochs):
        x = rng.standard_normal((4, 6)).astype(np.float32)
        y = rng.integers(0, 3, 4).astype(np.int64)
        np.save(tmp_path / "x.npy", x)
        np.save(tmp_path / "y.npy", y)
        args = [exe, "run", "train_step", "--weights", w, "--input", tmp_path / "x.npy", "--input", tmp_path / "y.npy"]
        if ep is not None:
            np.save(tmp_path / "e.npy", np.array(ep, dtype=np.int64))
            args += ["--input", tmp_path / "e.npy"]
        nxt = tmp_path / f"w{k}.safetensors"
        run(args + ["--save", nxt, "--save-training-state"])
        w = nxt
        if ep is None:
            mod.train_step(torch.from_numpy(x), torch.from_numpy(y))
        else:
            mod.train_step(torch.from_numpy(x), torch.from_numpy(y), ep)
        got = st_read(w)
        for i, (label, *_) in enumerate(cases):
            for gi, group in enumerate(getattr(mod, f"o{i}").param_groups):
                key = f"o{i}.lr" + (f".{gi}" if gi else "")
                check_lr(f"{label} group {gi}", float(got[key]), group["lr"], k + 1)
            if f"o{i}.momentum" in got:
                assert abs(float(got[f"o{i}.momentum"]) - group["momentum"]) < 1e-6, (label, k, group["momentum"])
            for pn, v in mod.model.heads[i].state_dict().items():
                compare(f"{label} step {k + 1}: heads.{i}.{pn}", got[f"heads.{i}.{pn}"], v.numpy(), 1e-4, 1e-5)
    return mod, w


def test_per_group_schedules(tmp_path):
    """Each group follows its own learning rate: base_lrs from the groups' lrs,
    lr_lambda lists, CyclicLR's and OneCycleLR's per-group bounds, compositions;
    the lambdas use min/max/float/abs/math of the epoch, staged on its counter."""
    drive(tmp_path, source(CASES), "groups", CASES, [None] * 22)


EPOCH_CASES = [
    ("StepLR.step(epoch)", "SGD({g}, lr=0.1)", "{s} = StepLR({o}, step_size=3, gamma=0.5)"),
    ("CosineAnnealingLR.step(epoch)", "SGD({g}, lr=0.1, momentum=0.9)", "{s} = CosineAnnealingLR({o}, T_max=6)"),
    ("MultiplicativeLR.step(epoch)", "SGD({g}, lr=0.1)", "{s} = MultiplicativeLR({o}, lambda e: 0.9)"),
    ("LambdaLR.step(epoch)", "Adam({g}, lr=0.05)", "{s} = LambdaLR({o}, [warmup_cosine, lambda e: 1 / (e + 1)])"),
    ("CosineAnnealingWarmRestarts.step(epoch)", "SGD({g}, lr=0.1)",
     "{s} = CosineAnnealingWarmRestarts({o}, T_0=2, T_mult=2, eta_min=0.001)"),
    ("CosineAnnealingWarmRestarts(T_mult 1).step(epoch)", "SGD({g}, lr=0.1)",
     "{s} = CosineAnnealingWarmRestarts({o}, T_0=4)"),
    ("ExponentialLR + MultiStepLR .step(epoch)", "SGD({g}, lr=0.1)",
     "{s} = ExponentialLR({o}, gamma=0.9)\n_m{s} = MultiStepLR({o}, milestones=[2, 5], gamma=0.5)"),
    ("CyclicLR.step(epoch)", "SGD({g}, lr=0.1, momentum=0.9)",
     "{s} = CyclicLR({o}, base_lr=0.01, max_lr=[0.1, 0.2], step_size_up=2)"),
]


def test_step_with_epoch(tmp_path):
    """scheduler.step(epoch) (deprecated in PyTorch 1.13, still supported) with
    the epoch a run-time input: last_epoch = epoch, then the closed form where
    the scheduler has one (_get_closed_form_lr, also with two schedulers on one
    optimizer), get_lr() otherwise (MultiplicativeLR multiplies the current lr),
    CosineAnnealingWarmRestarts' own T_cur/T_i from the epoch. Epochs repeat,
    go back and jump, as code that passes its own counter may do."""
    src = source(EPOCH_CASES, step_line="    {s}.step(epoch)\n", inputs=3)
    src = src.replace("    s6.step(epoch)\n", "    s6.step(epoch)\n    _ms6.step(epoch)\n")
    drive(tmp_path, src, "epochs", EPOCH_CASES, [1, 2, 3, 3, 4, 7, 2, 5, 6, 8, 9, 13, 14, 0, 1, 10])


STATE_SRC = """\
import torch
import torch.nn as nn
import torch.nn.functional as F

model = nn.Linear(6, 3)
optimizer = torch.optim.SGD([{'params': [model.weight]}, {'params': [model.bias], 'lr': 0.02}], lr=0.1)
scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.5)
INITIAL = scheduler.get_last_lr()
SD0 = scheduler.state_dict()
scheduler.load_state_dict(SD0)


def train_step(x, y):
    optimizer.zero_grad()
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()
    scheduler.step()
    sd = scheduler.state_dict()
    scheduler.load_state_dict(sd)
    lrs = scheduler.get_last_lr()
    return loss, lrs[0], lrs[1], sd["_last_lr"][1], sd["last_epoch"]


example_inputs = {"forward": (torch.randn(4, 6),), "train_step": (torch.randn(4, 6), torch.randint(0, 3, (4,)))}
"""


def test_state_dict_and_get_last_lr(tmp_path):
    """get_last_lr() (per group) and state_dict()'s last_epoch/_last_lr in a
    compiled function are the values after this step; load_state_dict() of the
    scheduler's own state_dict() is a no-op (the state is saved with the weights);
    any other dict is refused."""
    path = tmp_path / "sd.py"
    path.write_text(STATE_SRC)
    exe = tmp_path / "sd"
    run([CTC, "build", path, "-o", exe])
    mod = load_module(str(path), "sd")
    assert mod.INITIAL == [0.1, 0.02]
    w = tmp_path / "w.safetensors"
    st_write(w, state_dict_np(mod.model))
    rng = np.random.default_rng(1)
    for k in range(5):
        x, y = rng.standard_normal((4, 6)).astype(np.float32), rng.integers(0, 3, 4).astype(np.int64)
        np.save(tmp_path / "x.npy", x)
        np.save(tmp_path / "y.npy", y)
        outs = [tmp_path / f"o{j}.npy" for j in range(5)]
        args = [exe, "run", "train_step", "--weights", w, "--input", tmp_path / "x.npy", "--input", tmp_path / "y.npy",
                "--save", tmp_path / f"w{k}.safetensors", "--save-training-state"]
        for o in outs:
            args += ["--output", o]
        run(args)
        w = tmp_path / f"w{k}.safetensors"
        want = mod.train_step(torch.from_numpy(x), torch.from_numpy(y))
        got = [float(np.load(o)) for o in outs]
        assert abs(got[0] - float(want[0])) < 1e-5 * abs(float(want[0])) + 1e-6
        for g, v in zip(got[1:], want[1:]):
            assert abs(g - float(v)) <= 1e-7 * abs(float(v)), (k, got, want)
    bad = STATE_SRC.replace("scheduler.load_state_dict(sd)", "scheduler.load_state_dict({'last_epoch': 3})")
    path.write_text(bad)
    r = run([CTC, "check", path], check=False)
    assert r.returncode == 1 and "sd.py:20:" in r.stderr and "only the dict its own state_dict() returned" in r.stderr, \
        r.stderr
