"""Data-parallel training on this machine: 1 rank against 2 MPI ranks.

usage: /usr/bin/python3 bench/bench_mpi.py [--batch 64] [--hidden 1024] [--layers 3] [--iters 30]
                                           [--warmup 5] [--bucket-mb 25,4,1] [--rounds 3]

The model is an MLP (784 -> hidden x layers -> 10, ReLU) trained with SGD-momentum
on cross-entropy, built by ctc twice: plain, and with `--distributed mpi` for each
--bucket-mb. Every configuration runs `./net bench train_step` (random inputs,
--warmup calls then --iters timed ones; the median call) in a fresh process per
round, and the table gives the median over the rounds:

  1 rank, B, 1 thread          the work of one rank alone
  1 rank, 2B, 2 threads        the same global batch on the whole machine, no MPI
  2 ranks x B, 1 thread each   (mpirun -np 2) per bucket size: overlap on (buckets
                               all-reduced while backward runs) and off
                               (CTC_MPI_OVERLAP=0: each bucket's all-reduce is
                               started and waited for at once, before the update)
                               and the direct mode (CTC_MPI_BUCKET=direct: one
                               all-reduce per gradient on the arena, no copies)

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


def bench(cmd, env, args):
    """Median ms per call over the rounds; rank 0's blocked ms per step (or None)."""
    meds, blocked = [], []
    for _ in range(args.rounds):
        r = subprocess.run(cmd + ["bench", "train_step", "--iters", str(args.iters), "--warmup", str(args.warmup),
                                  "--int-max", "10"], capture_output=True, text=True, env={**os.environ, **env})
        if r.returncode:
            sys.exit(f"failed: {' '.join(cmd)}\n{r.stdout}{r.stderr}")
        meds.append(float(BENCH_RE.search(r.stdout).group(1)))
        m = STATS_RE.search(r.stderr)
        if m:
            blocked.append((int(m.group(1)), float(m.group(2))))
    return statistics.median(meds), blocked


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
    one, _ = build(d, "one", B, args, [])
    two, _ = build(d, "two", 2 * B, args, [])
    calls = args.iters + args.warmup
    nparam = 784 * args.hidden + args.hidden * args.hidden * (args.layers - 1) + args.hidden * args.layers + \
        10 * args.hidden + 10
    print(f"# MLP 784-{'-'.join([str(args.hidden)] * args.layers)}-10: {nparam} parameters "
          f"({nparam * 4 / 2**20:.1f} MiB of gradients); median of {args.rounds} rounds of {args.iters} calls "
          f"(after {args.warmup}); {os.cpu_count()} cores")
    print("| configuration | global batch | ms per global step | samples/s | buckets | in hooks, ms/step "
          "| all-reduce hidden |")
    print("|---|---|---|---|---|---|---|")
    one_t = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
    ms, _ = bench([one], one_t, args)
    print(f"| 1 rank, 1 thread | {B} | {ms:.2f} | {B * 1e3 / ms:.0f} | - | - | - |")
    ms, _ = bench([two], {"OMP_NUM_THREADS": "2", "OPENBLAS_NUM_THREADS": "2"}, args)
    print(f"| 1 rank, 2 threads | {2 * B} | {ms:.2f} | {2 * B * 1e3 / ms:.0f} | - | - | - |")
    for mb in args.bucket_mb.split(","):
        exe, nb = build(d, f"dist{mb.replace('.', '_')}", B, args, ["--distributed", "mpi", "--bucket-mb", mb])
        blocked = {}
        for label, env in (("off", {"CTC_MPI_OVERLAP": "0"}), ("on, no progress thread", {"CTC_MPI_PROGRESS": "0"}),
                           ("on", {}), ("on, direct", {"CTC_MPI_BUCKET": "direct"})):
            env = {**one_t, "CTC_MPI_STATS": "1", **env}
            xs = [x for k in env for x in ("-x", k)]
            ms, st = bench(MPI + xs + ["-np", "2", exe], env, args)
            per_step = statistics.median(b / (n / nb) for n, b in st) if st and nb else float("nan")
            blocked[label] = per_step
            hidden = "-" if label == "off" else f"{100 * (1 - per_step / blocked['off']):.0f}%"
            print(f"| 2 ranks x 1 thread, --bucket-mb {mb}, overlap {label} | {2 * B} | {ms:.2f} | "
                  f"{2 * B * 1e3 / ms:.0f} | {nb} | {per_step:.2f} | {hidden} |")
    assert calls > 0
    shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
