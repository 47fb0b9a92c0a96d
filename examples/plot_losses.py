"""Loss curves of training runs on the same axes, from the CSV files that
`./net train --log` and examples/train_torch.py --log write (epoch,step,loss).

    python3 examples/plot_losses.py build/demo/loss_c.csv build/demo/loss_torch.csv \\
        --label "generated C" --label PyTorch -o losses.png

Each run is drawn twice: every step (thin, faint) and a moving average over
--window steps. Needs matplotlib (Debian: python3-matplotlib); the demo calls
plot() after both runs."""
import argparse
import csv
import sys


def read_log(path):
    """The losses of a log in step order, with the step count of each epoch."""
    losses = []
    with open(path) as f:
        for row in csv.DictReader(f):
            losses.append(float(row["loss"]))
    return losses


def moving_average(v, w):
    out, s = [], 0.0
    for i, x in enumerate(v):
        s += x
        if i >= w:
            s -= v[i - w]
        out.append(s / min(i + 1, w))
    return out


def plot(paths, labels, out, title="training loss", window=50):
    import matplotlib
    matplotlib.use("Agg")   # no display needed
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4), dpi=100)
    colors = ["tab:blue", "tab:orange", "tab:green", "tab:red"]
    for i, (p, label) in enumerate(zip(paths, labels)):
        v = read_log(p)
        c = colors[i % len(colors)]
        steps = range(1, len(v) + 1)
        ax.plot(steps, v, color=c, alpha=0.2, linewidth=0.6)
        ax.plot(steps, moving_average(v, window), color=c, linewidth=1.8,
                linestyle="-" if i == 0 else "--", label=f"{label} (mean of {window} steps)")
    ax.set_xlabel("training step")
    ax.set_ylabel("loss")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(out)
    plt.close(fig)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("logs", nargs="+", help="CSV files: epoch,step,loss")
    ap.add_argument("--label", action="append", help="one per log (default: the file names)")
    ap.add_argument("--title", default="training loss")
    ap.add_argument("--window", type=int, default=50)
    ap.add_argument("-o", "--output", required=True, help="the PNG to write")
    a = ap.parse_args()
    labels = a.label or a.logs
    if len(labels) != len(a.logs):
        sys.exit("give one --label per log")
    plot(a.logs, labels, a.output, a.title, a.window)
    print(f"wrote {a.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
