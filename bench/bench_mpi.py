"""Data-parallel training on this machine: 1 rank against 2 MPI ranks.

usage: /usr/bin/python3 bench/bench_mpi.py [--batch 64] [--hidden 1024] [--layers 3] [--iters 30]
                                           [--warmup 5] [--bucket-mb 25,4,1] [--rounds 3]

The model is an MLP (784 -> hidden x layers -> 10, ReLU) trained with SGD-momentum
on cross-entropy, built by ctc twice: plain, and with `--distributed mpi` for each
--bucket-mb. Every configuration runs `./net bench train_step` (random inputs,
--warmup calls then --iters timed ones; the median call) in a fresh process per
round; the rounds interleave the configurations (a change of the machine's load
moves them all alike), and the table gives the median over the rounds and, in
parentheses, the best round (the least disturbed by other processes):

  1 rank, B, 1 thread          the work of one rank alone
  1 rank, 2B, 2 threads        the same global batch on the whole machine, no MPI
  2 ranks x B, 1 thread each   (mpirun -np 2) per bucket size: overlap on (buckets
                               all-reduced while backward runs) and off
                               (CTC_MPI_OVERLAP=0: each bucket's all-reduce is
                               started and waited for at once, before the update);
                               "on" is the default (gradients of 256 KiB or more
                               all-reduced in place in the arena, the smaller
                               ones copied into one buffer per bucket), "copy"
                               packs every gradient into the bucket's buffer
                               (CTC_MPI_BUCKET=copy, DDP's flat buckets), "direct"
                               none (one all-reduce per gradient)

"in hooks" is the time rank 0 spends inside the start() and wait() hooks per
step (CTC_MPI_STATS: copies, starting the all-reduces, waiting for them); with
overlap off it is the whole all-reduce, so the fraction of the all-reduce
hidden behind backward is 1 - hooks(on) / hooks(off) for the same buckets.
"no progress thread" (CTC_MPI_PROGRESS=0): the all-reduces move on only
inside the hooks (Open MPI progresses non-blocking collectives only inside MPI
calls).
Nothing is asserted about speed."""
import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CTC = os.path.join(ROOT, "build", "ctc")
MPI = ["mpirun", "--oversubscribe", "--allow-run-as-root", "--bind-to", "none"]

MODEL = """
import torch
import torch.nn as nn
import torch.nn.functional as F


class MLP(nn.Module):
    def __init__(self, hidden, layers):
        super().__init__()
        dims = [784] + [hidden] * layers
        self.layers = nn.ModuleList([nn.Linear(a, b) for a, b in zip(dims, dims[1:])])
        self.head = nn.Linear(hidden, 10)

    def forward(self, x):
        for layer in self.layers:
            x = F.relu(layer(x))
        return self.head(x)


model = MLP({hidden}, {layers})
optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)


def train_step(x, y):
    optimizer.zero_grad()
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()
    return loss
"""

BENCH_RE = re.compile(r"median ([0-9.]+) ms, min ([0-9.]+) ms")
STATS_RE = re.compile(r"ctc mpi: \d+ ranks, (\d+) all-reduces, blocked [0-9.]+ ms in waits, ([0-9.]+) ms in start")


def build(d, name, batch, args, extra):
    src = os.path.join(d, f"{name}.py")
    with open(src, "w") as f:
        f.write(MODEL.format(hidden=args.hidden, layers=args.layers, batch=batch))
    exe = os.path.join(d, name)
    subprocess.run([CTC, "build", src, "-o", exe, "--entry", "train_step", "--input", f"x=f32[{batch},784]", "--input", f"y=i64[{batch}]", *extra],
                   check=True)
    with open(exe + ".c") as f:
        nb = f.read().count("->start(")
    return exe, nb


def bench_once(cmd, env, args):
    """One fresh run: ms per call (the median call); rank 0's (all-reduces, ms in hooks) or None."""
    r = subprocess.run(cmd + ["bench", "train_step", "--iters", str(args.iters), "--warmup", str(args.warmup),
                              "--int-max", "10"], capture_output=True, text=True, env={**os.environ, **env})
    if r.returncode:
        sys.exit(f"failed: {' '.join(cmd)}\n{r.stdout}{r.stderr}")
    m = STATS_RE.search(r.stderr)
    return float(BENCH_RE.search(r.stdout).group(1)), (int(m.group(1)), float(m.group(2))) if m else None


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--hidden", type=int, default=1024)
    ap.add_argument("--layers", type=int, default=3)
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--bucket-mb", default="25,4,1")
    args = ap.parse_args()
    if not shutil.which("mpirun") or not shutil.which("mpicc"):
        sys.exit("needs mpirun and mpicc (Debian: openmpi-bin, libopenmpi-dev)")
    d = tempfile.mkdtemp(prefix="ctc_bench_mpi_")
    B = args.batch
    one_t = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
    # (label, global batch, command, env, buckets, bucket size)
    configs = [("1 rank, 1 thread", B, [build(d, "one", B, args, [])[0]], one_t, 0, None),
               ("1 rank, 2 threads", 2 * B, [build(d, "two", 2 * B, args, [])[0]],
                {"OMP_NUM_THREADS": "2", "OPENBLAS_NUM_THREADS": "2"}, 0, None),
               ("1 rank, 2 threads, OMP_WAIT_POLICY=passive", 2 * B, [os.path.join(d, "two")],
                {"OMP_NUM_THREADS": "2", "OPENBLAS_NUM_THREADS": "2", "OMP_WAIT_POLICY": "passive"}, 0, None)]
    for mb in args.bucket_mb.split(","):
        exe, nb = build(d, f"dist{mb.replace('.', '_')}", B, args, ["--distributed", "mpi", "--bucket-mb", mb])
        for label, env in (("off", {"CTC_MPI_OVERLAP": "0"}), ("on, no progress thread", {"CTC_MPI_PROGRESS": "0"}),
                           ("on", {}), ("on, copy", {"CTC_MPI_BUCKET": "copy"}),
                           ("on, direct", {"CTC_MPI_BUCKET": "direct"})):
            env = {**one_t, "CTC_MPI_STATS": "1", **env}
            xs = [x for k in env for x in ("-x", k)]
            configs.append((f"2 ranks x 1 thread, --bucket-mb {mb}, overlap {label}", 2 * B,
                            MPI + xs + ["-np", "2", exe], env, nb, mb))
    # rounds interleave the configurations, so that a change of load moves them all alike
    runs = [[] for _ in configs]
    for _ in range(args.rounds):
        for i, (_, _, cmd, env, _, _) in enumerate(configs):
            runs[i].append(bench_once(cmd, env, args))
    nparam = 784 * args.hidden + args.hidden * args.hidden * (args.layers - 1) + args.hidden * args.layers + \
        10 * args.hidden + 10
    print(f"# MLP 784-{'-'.join([str(args.hidden)] * args.layers)}-10: {nparam} parameters "
          f"({nparam * 4 / 2**20:.1f} MiB of gradients); median of {args.rounds} interleaved rounds of "
          f"{args.iters} calls (after {args.warmup}); {os.cpu_count()} cores")
    print("| configuration | global batch | ms per global step (best round) | samples/s (best) | buckets "
          "| in hooks, ms/step (best) | all-reduce hidden (best) |")
    print("|---|---|---|---|---|---|---|")
    off = {}
    for (label, gb, _, _, nb, mb), rs in zip(configs, runs):
        ms, best = statistics.median(r[0] for r in rs), min(r[0] for r in rs)
        if not nb:
            print(f"| {label} | {gb} | {ms:.2f} ({best:.2f}) | {gb * 1e3 / ms:.0f} ({gb * 1e3 / best:.0f}) | - | - | - |")
            continue
        hooks = [r[1][1] / (r[1][0] / nb) for r in rs]   # ms in hooks per step
        hook, hbest = statistics.median(hooks), min(hooks)
        if label.endswith("overlap off"):
            off[mb] = (hook, hbest)
        hidden = "-" if label.endswith("overlap off") else \
            f"{100 * (1 - hook / off[mb][0]):.0f}% ({100 * (1 - hbest / off[mb][1]):.0f}%)"
        print(f"| {label} | {gb} | {ms:.2f} ({best:.2f}) | {gb * 1e3 / ms:.0f} ({gb * 1e3 / best:.0f}) | {nb} "
              f"| {hook:.2f} ({hbest:.2f}) | {hidden} |")
    shutil.rmtree(d, ignore_errors=True)

if __name__ == "__main__":
    main()
