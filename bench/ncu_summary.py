"""Kernel time per kernel from Nsight Compute's CSV, largest first.

usage: ncu --clock-control none --metrics gpu__time_duration.sum --csv ./net bench train_step \\
           --iters 1 --warmup 0 > ncu.csv
       python3 bench/ncu_summary.py ncu.csv [--top 30]

Sums each launch's gpu__time_duration by kernel name (its parameter list dropped) and prints
the number of launches, the kernel time in all, and the kernels that took the most. Run by
scripts/gpu_check.sh with CTC_GPU_NCU=1."""
import argparse
import collections
import csv
import sys

SCALE = {"nsecond": 1e-6, "ns": 1e-6, "usecond": 1e-3, "us": 1e-3, "msecond": 1.0, "ms": 1.0, "second": 1e3, "s": 1e3}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("csv")
    ap.add_argument("--top", type=int, default=30)
    a = ap.parse_args()
    rows = list(csv.reader(open(a.csv, errors="replace")))
    head = next((i for i, r in enumerate(rows) if "Kernel Name" in r and "Metric Value" in r), None)
    if head is None:
        sys.exit(f"ncu_summary.py: {a.csv} has no 'Kernel Name' / 'Metric Value' header (ncu --csv output expected)")
    h = rows[head]
    kn, mu, mv, grid = h.index("Kernel Name"), h.index("Metric Unit"), h.index("Metric Value"), h.index("Grid Size")
    total, count, grids = collections.Counter(), collections.Counter(), {}
    for r in rows[head + 1:]:
        if len(r) <= mv:
            continue
        try:
            ms = float(r[mv].replace(",", "")) * SCALE.get(r[mu], 1e-6)
        except ValueError:
            continue
        name = r[kn].split("(")[0][:72]
        total[name] += ms
        count[name] += 1
        grids[name] = r[grid]
    print(f"{sum(count.values())} launches of {len(count)} kernels, {sum(total.values()):.3f} ms of kernel time")
    for name, ms in total.most_common(a.top):
        print(f"{ms:9.3f} ms {count[name]:5d}x  grid {grids[name]:>14}  {name}")


if __name__ == "__main__":
    main()
