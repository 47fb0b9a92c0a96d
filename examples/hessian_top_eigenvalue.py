"""Top eigenvalue of the Hessian of a classifier's loss, by power iteration on
Hessian-vector products that ctc compiles (forward-over-reverse AD in C).

The model: softmax regression on Fashion-MNIST images, loss(W, b) =
cross_entropy(X W + b, y); its Hessian with respect to the 7,850 parameters is
never formed — each power-iteration step calls the compiled `hvp_fn` entry.
The file is an ordinary PyTorch file: run it to compare with PyTorch

    /usr/bin/python3 examples/hessian_top_eigenvalue.py [--iters 30]

It builds the model with ctc, runs power iteration with the generated
program and with torch.autograd.functional.hvp from the same start vector,
and prints both eigenvalue estimates."""
import torch
import torch.nn.functional as F
from torch.autograd.functional import hvp

N, D, C = 512, 784, 10


def loss_fn(W, b, X, y):
    return F.cross_entropy(X @ W + b, y)


def hvp_fn(W, b, VW, Vb, X, y):
    """(H [VW; Vb]) for the Hessian of loss_fn in (W, b)."""
    _, (hw, hb) = hvp(lambda W_, b_: loss_fn(W_, b_, X, y), (W, b), (VW, Vb))
    return hw, hb


example_inputs = {
    "hvp_fn": (torch.zeros(D, C), torch.zeros(C), torch.randn(D, C), torch.randn(C), torch.randn(N, D),
               torch.randint(0, C, (N,))),
}


def _main():
    import argparse
    import gzip
    import os
    import subprocess
    import tempfile
    import time

    import numpy as np

    ap = argparse.ArgumentParser()
    ap.add_argument("--iters", type=int, default=30)
    a = ap.parse_args()
    here = os.path.dirname(os.path.abspath(__file__))
    ctc = os.path.join(here, "..", "build", "ctc")
    data = os.environ.get("FASHION_MNIST_DIR", "/usr/share/datasets/fashion-mnist")

    def idx(name):
        raw = gzip.open(os.path.join(data, name)).read()
        nd = raw[3]
        dims = [int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(nd)]
        return np.frombuffer(raw, np.uint8, offset=4 + 4 * nd).reshape(dims)

    X = (idx("train-images-idx3-ubyte.gz")[:N].reshape(N, D) / 255.0).astype(np.float32)
    y = idx("train-labels-idx1-ubyte.gz")[:N].astype(np.int64)
    rng = np.random.default_rng(0)
    W = (0.01 * rng.standard_normal((D, C))).astype(np.float32)
    b = np.zeros(C, np.float32)
    v0 = [rng.standard_normal((D, C)).astype(np.float32), rng.standard_normal(C).astype(np.float32)]

    with tempfile.TemporaryDirectory() as d:
        exe = os.path.join(d, "hvp")
        subprocess.run([ctc, "build", os.path.abspath(__file__), "-o", exe], check=True)
        fixed = {"W": W, "b": b, "X": X, "y": y}
        for k, arr in fixed.items():
            np.save(os.path.join(d, k + ".npy"), arr)

        def hvp_c(v):
            np.save(os.path.join(d, "VW.npy"), v[0])
            np.save(os.path.join(d, "Vb.npy"), v[1])
            args = [exe, "run", "hvp_fn"]
            for k in ("W", "b", "VW", "Vb", "X", "y"):
                args += ["--input", f"{k}={os.path.join(d, k + '.npy')}"]
            args += ["--output", os.path.join(d, "hw.npy"), "--output", os.path.join(d, "hb.npy")]
            subprocess.run(args, check=True)
            return [np.load(os.path.join(d, "hw.npy")), np.load(os.path.join(d, "hb.npy"))]

        def hvp_torch(v):
            tW, tb, tX, ty = map(torch.from_numpy, (W, b, X, y))
            _, (hw, hb) = hvp(lambda W_, b_: loss_fn(W_, b_, tX, ty), (tW, tb), tuple(map(torch.from_numpy, v)))
            return [hw.numpy(), hb.numpy()]

        for label, fn in (("generated C", hvp_c), ("PyTorch", hvp_torch)):
            v = [x.copy() for x in v0]
            t0 = time.time()
            lam = 0.0
            for _ in range(a.iters):
                norm = np.sqrt(sum(float((x * x).sum()) for x in v))
                v = [x / norm for x in v]
                hv = fn(v)
                lam = sum(float((h * x).sum()) for h, x in zip(hv, v))  # Rayleigh quotient
                v = hv
            print(f"{label:12} top Hessian eigenvalue after {a.iters} iterations: {lam:.6f}  ({time.time() - t0:.2f} s)")


if __name__ == "__main__":
    _main()
