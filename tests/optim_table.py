"""The closing table of issue 16: for each of torch.optim's 13 optimizers and 14
LR schedulers, the maximum relative difference between ctc's compiled program
and PyTorch 1.13 over 20 steps (LBFGS: 10, see test_optim_more.test_lbfgs).

    /usr/bin/python3 tests/optim_table.py      (about two minutes)

Optimizers: one network per optimizer in one program (test_optim_more's
harness: the weights and optimizer state round-trip through safetensors every
step); the difference is over every parameter and every optimizer state tensor
PyTorch keeps under the same name, after every step, elementwise
|ctc - torch| / max(|torch|, 1e-3) ("elementwise") and per tensor
max |ctc - torch| / max |torch| ("tensor"). float32 unless noted.
Schedulers: one head, optimizer and scheduler per scheduler in one program
(test_sched_more's harness), stepped after every optimizer step; the
difference is |lr_ctc - lr_torch| / lr_torch of the learning rate after
every step (0 where they differ by less than 1e-9), and the parameters' differences
as above (elementwise and per tensor), and the parameters' elementwise difference as above."""
import os
import sys
import tempfile
from pathlib import Path

import warnings

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_optim_more as om  # noqa: E402
import test_sched_more as sm  # noqa: E402
from ctc_testlib import CTC, load_module, run, st_read, st_write, state_dict_np  # noqa: E402

OPTIMIZERS = [
    ("SGD", "SGD(P, lr=0.05, momentum=0.9, dampening=0.1, weight_decay=0.01)", ("momentum_buffer",)),
    ("SGD nesterov", "SGD(P, lr=0.05, momentum=0.9, nesterov=True, maximize=True)", ("momentum_buffer",)),
    ("Adam", "Adam(P, lr=0.01, amsgrad=True, weight_decay=0.01)", ("exp_avg", "exp_avg_sq", "max_exp_avg_sq")),
    ("AdamW", "AdamW(P, lr=0.01, weight_decay=0.1)", ("exp_avg", "exp_avg_sq")),
    ("RMSprop", "RMSprop(P, lr=0.01, momentum=0.5, centered=True)", ("square_avg", "momentum_buffer", "grad_avg")),
    ("Adagrad", "Adagrad(P, lr=0.05, lr_decay=0.01, initial_accumulator_value=0.1)", ("sum",)),
    ("Adadelta", "Adadelta(P, lr=1.0, rho=0.8, weight_decay=0.01)", ("square_avg", "acc_delta")),
    ("Adamax", "Adamax(P, lr=0.02, weight_decay=0.05)", om.STATE["Adamax"]),
    ("NAdam", "NAdam(P, lr=0.02, momentum_decay=0.02)", om.STATE["NAdam"]),
    ("RAdam", "RAdam(P, lr=0.01)", om.STATE["RAdam"]),
    ("ASGD", "ASGD(P, lr=0.1, lambd=0.01, alpha=0.5, t0=4)", om.STATE["ASGD"]),
    ("Rprop", "Rprop(P, lr=0.05, etas=(0.3, 1.5), step_sizes=(1e-3, 0.2))", om.STATE["Rprop"]),
]

SCHEDULERS = [
    ("StepLR", "SGD({p}, lr=0.1, momentum=0.9)", "{s} = StepLR({o}, step_size=3, gamma=0.5)"),
    ("MultiStepLR", "SGD({p}, lr=0.1)", "{s} = MultiStepLR({o}, milestones=[2, 5, 6], gamma=0.3)"),
    ("ConstantLR", "Adam({p}, lr=0.05)", "{s} = ConstantLR({o}, factor=0.5, total_iters=4)"),
    ("LinearLR", "SGD({p}, lr=0.1)", "{s} = LinearLR({o}, start_factor=0.25, total_iters=6)"),
    ("ExponentialLR", "SGD({p}, lr=0.1)", "{s} = ExponentialLR({o}, gamma=0.9)"),
    ("PolynomialLR", "SGD({p}, lr=0.1)", "{s} = PolynomialLR({o}, total_iters=10, power=2.0)"),
    ("CosineAnnealingLR", "SGD({p}, lr=0.1)", "{s} = CosineAnnealingLR({o}, T_max=8, eta_min=0.001)"),
    ("CosineAnnealingWarmRestarts", "Adam({p}, lr=0.05)",
     "{s} = CosineAnnealingWarmRestarts({o}, T_0=3, T_mult=2, eta_min=0.01)"),
    ("LambdaLR", "Adam({p}, lr=0.05)", "{s} = LambdaLR({o}, warmup_cosine)"),
    ("MultiplicativeLR", "SGD({p}, lr=0.1)", "{s} = MultiplicativeLR({o}, every_third)"),
    ("CyclicLR", "SGD({p}, lr=0.1, momentum=0.9)",
     "{s} = CyclicLR({o}, 0.01, 0.1, step_size_up=3, mode='exp_range', gamma=0.95)"),
    ("OneCycleLR", "SGD({p}, lr=0.1, momentum=0.9)", "{s} = torch.optim.lr_scheduler.OneCycleLR({o}, max_lr=0.5, total_steps=25)"),
    ("SequentialLR", "SGD({p}, lr=0.1)",
     "{s} = SequentialLR({o}, [LinearLR({o}, start_factor=0.1, total_iters=5), ExponentialLR({o}, gamma=0.9)], "
     "milestones=[5])"),
    ("ChainedScheduler", "Adam({p}, lr=0.05)",
     "{s} = ChainedScheduler([LinearLR({o}, start_factor=0.2, total_iters=6), CosineAnnealingLR({o}, T_max=8)])"),
    ("ReduceLROnPlateau", "SGD({p}, lr=0.1)", "{s} = ReduceLROnPlateau({o}, patience=1, factor=0.5, threshold=0.05)"),
]


def per_case(tmp, src, name, ncases, steps, state, step_fn=None, make_batch=None):
    """train_step `steps` times in the program and in PyTorch; per case i (network
    nets.i, optimizer opt<i>), the max relative differences (elementwise, tensor)."""
    path = tmp / f"{name}.py"
    path.write_text(src)
    exe = tmp / name
    run([CTC, "build", path, "-o", exe])
    torch.manual_seed(0)
    mod = load_module(str(path), name)
    w = tmp / "w.safetensors"
    st_write(w, state_dict_np(mod.model))
    rng = np.random.default_rng(0)
    params = dict(mod.model.named_parameters())
    dt = next(iter(params.values())).detach().numpy().dtype
    worst = np.zeros((ncases, 2))
    for k in range(steps):
        x, y = make_batch(rng) if make_batch else (rng.standard_normal((4, 6)), rng.integers(0, 3, (4,)))
        np.save(tmp / "x.npy", x.astype(dt) if x.dtype.kind == "f" else x)
        np.save(tmp / "y.npy", y.astype(np.int64))
        nxt = tmp / f"w{k}.safetensors"
        run([exe, "run", "train_step", "--weights", w, "--input", tmp / "x.npy", "--input", tmp / "y.npy",
             "--save", nxt, "--save-training-state"])
        w = nxt
        mod.train_step(torch.from_numpy(np.load(tmp / "x.npy")), torch.from_numpy(np.load(tmp / "y.npy")))
        got = st_read(w)
        for pn, v in mod.model.state_dict().items():
            i = int(pn.split(".")[1]) if pn.startswith("nets.") and ncases > 1 else 0
            worst[i] = np.maximum(worst[i], om.relmax(got[pn], v.numpy()))
        for oi, opt in enumerate(mod.OPTS):
            for pn, p in params.items():
                st = opt.state.get(p, {})
                for key in state[oi] or ():
                    if key not in st or torch.is_tensor(st[key]) and st[key].numel() == 0:
                        continue
                    gk = f"opt{oi}.{pn}.{key}"
                    pairs = [(gk, st[key])]
                    if isinstance(st[key], list):
                        nslots = sum(1 for g in got if g.startswith(gk + "."))
                        pairs = [(f"{gk}.{nslots - len(st[key]) + j}", v) for j, v in enumerate(st[key])]
                    for gk, v in pairs:
                        wv = v.detach().numpy() if torch.is_tensor(v) else np.asarray(v, np.float64)
                        worst[oi] = np.maximum(worst[oi], om.relmax(got[gk], wv))
        if step_fn:
            step_fn(k, got)
    return worst


def optimizers(tmp):
    rows = []
    src = om.source([c for _, c, _ in OPTIMIZERS])
    worst = per_case(tmp, src, "opts", len(OPTIMIZERS), 20, [s for *_, s in OPTIMIZERS])
    rows += [(n, w) for (n, *_), w in zip(OPTIMIZERS, worst)]
    sparse = om.SPARSE.format(groups="list(model.emb.parameters()) + list(model.emb2.parameters()), lr=0.05",
                              clip="pass").replace("OPTS = [opt0, opt1]", "OPTS = [opt0]")

    def batch(rng):
        return rng.integers(0, int(rng.choice([3, 7])), (2, 4, 3)), rng.integers(0, 3, (2, 4))
    rows.append(("SparseAdam", per_case(tmp, sparse, "sparse", 1, 20, [om.STATE["SparseAdam"]], make_batch=batch)[0]))
    for label, dtype, cases, head in (("LBFGS (float64)", "float64", om.LBFGS_CASES[:2], None),
                                      ("LBFGS strong_wolfe (float64)", "float64", om.WOLFE_CASES[:1], om.WOLFE_HEAD)):
        src = om.source(cases, dtype=dtype, step=om.CLOSURE_STEP, head=head)
        if head:   # the unrolled line search: a -O0 build (see test_lbfgs_strong_wolfe)
            cc = tmp / "cc-O0"
            cc.write_text('#!/bin/sh\nexec cc "$@" -O0\n')
            cc.chmod(0o755)
        worst = per_case_lbfgs(tmp, src, len(cases), head is not None)
        rows.append((label, worst.max(axis=0)))
    return rows


def per_case_lbfgs(tmp, src, n, wolfe):
    if not wolfe:
        return per_case(tmp, src, "lbfgs", n, 10, [om.STATE["LBFGS"]] * n)
    # as per_case, with the -O0 compiler for the build
    real_run = run

    def run_o0(args, **kw):
        if args[:2] == [CTC, "build"]:
            args = list(args) + ["--cc", tmp / "cc-O0"]
        return real_run(args, **kw)
    globals()["run"] = run_o0
    try:
        return per_case(tmp, src, "lbfgs_wolfe", n, 10, [om.STATE["LBFGS"]] * n)
    finally:
        globals()["run"] = real_run


def schedulers(tmp):
    cases = [(n, o, s) for n, o, s in SCHEDULERS]
    src = sm.source(cases)
    i = len(cases) - 1   # ReduceLROnPlateau: stepped with the loss as its metric
    src = src.replace(f"    s{i}.step()\n", f"    s{i}.step(loss{i})\n")
    path, exe, mod = sm.build(tmp, src, "scheds")
    lr = np.zeros(len(cases))
    par = np.zeros((len(cases), 2))
    w = tmp / "sw.safetensors"
    st_write(w, state_dict_np(mod.model))
    rng = np.random.default_rng(0)
    for k in range(20):
        x = rng.standard_normal((4, 6)).astype(np.float32)
        y = rng.integers(0, 3, 4).astype(np.int64)
        np.save(tmp / "x.npy", x)
        np.save(tmp / "y.npy", y)
        nxt = tmp / f"sw{k}.safetensors"
        run([exe, "run", "train_step", "--weights", w, "--input", tmp / "x.npy", "--input", tmp / "y.npy",
             "--save", nxt, "--save-training-state"])
        w = nxt
        mod.train_step(torch.from_numpy(x), torch.from_numpy(y))
        got = st_read(w)
        for c in range(len(cases)):
            want = getattr(mod, f"o{c}").param_groups[0]["lr"]
            d = abs(float(got[f"o{c}.lr"]) - want)   # (PolynomialLR reaches 0: below 1e-9 counts as equal)
            lr[c] = max(lr[c], d / abs(want) if d > 1e-9 else 0.0)
            for pn, v in mod.model.heads[c].state_dict().items():
                par[c] = np.maximum(par[c], om.relmax(got[f"heads.{c}.{pn}"], v.numpy()))
    return [(n, lr[c], par[c]) for c, (n, *_) in enumerate(cases)]


def main():
    warnings.simplefilter("ignore")   # SequentialLR's own step(0) at a milestone warns in PyTorch 1.13
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        print(f"{'optimizer':34s} {'elementwise':>12s} {'tensor':>10s}   (20 steps; LBFGS 10)")
        for n, w in optimizers(tmp):
            print(f"{n:34s} {w[0]:12.2e} {w[1]:10.2e}")
        print(f"\n{'scheduler':34s} {'lr':>12s} {'params elementwise':>19s} {'tensor':>10s}   (20 steps)")
        for n, a, b in schedulers(tmp):
            print(f"{n:34s} {a:12.2e} {b[0]:19.2e} {b[1]:10.2e}")


if __name__ == "__main__":
    main()
