"""The main demo: train the seed CNN (examples/seed_cnn.py) on Fashion-MNIST with
the C that ctc generates, and the same way with PyTorch, side by side.

1. `ctc build examples/seed_cnn.py` -> a standalone program whose train_step
   entry is forward + backward + SGD(momentum) in one C function;
2. both sides start from the same initial weights (safetensors, state_dict names);
3. `./seed_cnn train` runs 2 epochs (batch 64, lr 0.01, momentum 0.9, the same
   shuffled batches) on the 60,000 training images, printing the test accuracy;
4. examples/train_torch.py trains the same file the same way in PyTorch;
5. prints both test accuracies and both training throughputs, and draws both
   loss curves on the same axes (build/demo/loss_curves.png, with matplotlib:
   examples/plot_losses.py).

Data: Debian's dataset-fashion-mnist (/usr/share/datasets/fashion-mnist).
Run through ./demo.sh, which installs what is missing and builds ctc first.
Options: --epochs N (default 2), --limit N (use the first N images), --seed S."""
import argparse
import os
import re
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
DATA = os.environ.get("FASHION_MNIST_DIR", "/usr/share/datasets/fashion-mnist")
OUT = os.path.join(ROOT, "build", "demo")
CTC = os.path.join(ROOT, "build", "ctc")
MODEL = os.path.join(HERE, "seed_cnn.py")


def run(cmd, **kw):
    print("$ " + " ".join(cmd), flush=True)
    r = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, **kw)
    sys.stdout.write(r.stdout)
    if r.returncode != 0:
        sys.exit(f"command failed with exit status {r.returncode}")
    return r.stdout


def last_epoch(text):
    m = re.findall(r"epoch (\d+): loss ([0-9.]+), (\d+) samples/s, test accuracy ([0-9.]+)%", text)
    if not m:
        sys.exit("no epoch line in the output")
    e, loss, sps, acc = m[-1]
    return float(loss), int(sps), float(acc)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--limit", type=int, default=0)
    ap.add_argument("--seed", type=int, default=0, help="initial weights and batch order (both sides)")
    a = ap.parse_args()
    os.makedirs(OUT, exist_ok=True)
    data = ["--data", f"{DATA}/train-images-idx3-ubyte.gz", "--labels", f"{DATA}/train-labels-idx1-ubyte.gz",
            "--test-data", f"{DATA}/t10k-images-idx3-ubyte.gz", "--test-labels", f"{DATA}/t10k-labels-idx1-ubyte.gz",
            "--batch", "64", "--epochs", str(a.epochs), "--seed", str(a.seed)]
    if a.limit:
        data += ["--limit", str(a.limit)]
    exe = os.path.join(OUT, "seed_cnn")
    t0 = time.time()
    run([CTC, "build", MODEL, "-o", exe, "--stats"])
    print(f"ctc: compiled and built {exe} in {time.time() - t0:.2f} s\n")
    init = os.path.join(OUT, "init.safetensors")
    torch_py = [sys.executable, os.path.join(HERE, "train_torch.py"), MODEL]
    run(torch_py + ["--write-init", init, "--seed", str(a.seed)])
    print("\n== generated C ==")
    c_out = run([exe, "train", "--weights", init, *data, "--save", os.path.join(OUT, "trained.safetensors"),
                 "--log", os.path.join(OUT, "loss_c.csv")],
                env=dict(os.environ, OMP_NUM_THREADS="2"))
    print("\n== PyTorch ==")
    t_out = run(torch_py + ["--init-weights", init, *data, "--lr", "0.01", "--momentum", "0.9", "--threads", "2",
                            "--log", os.path.join(OUT, "loss_torch.csv")])
    lc, sc, ac = last_epoch(c_out)
    lt, st, at = last_epoch(t_out)
    print(f"\nafter {a.epochs} epochs (SGD lr 0.01 momentum 0.9, batch 64, same initial weights and batches):")
    print(f"  test accuracy  generated C {ac:.2f}%   PyTorch {at:.2f}%   (difference {ac - at:+.2f} points)")
    print(f"  training speed generated C {sc} samples/s   PyTorch {st} samples/s   (ratio {sc / st:.2f}x)")
    print(f"  last epoch loss generated C {lc:.4f}   PyTorch {lt:.4f}")
    png = os.path.join(OUT, "loss_curves.png")
    try:
        sys.path.insert(0, HERE)
        from plot_losses import plot
        plot([os.path.join(OUT, "loss_c.csv"), os.path.join(OUT, "loss_torch.csv")], ["generated C", "PyTorch"], png,
             title=f"seed CNN, Fashion-MNIST, {a.epochs} epochs (SGD 0.01, momentum 0.9, batch 64)")
        print(f"  loss curves of both: {png}")
    except ImportError as e:   # matplotlib (Debian: python3-matplotlib; demo.sh installs it)
        print(f"  (no loss curve picture: {e})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
