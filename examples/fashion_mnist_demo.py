"""The main demo: the seed CNN (examples/seed_cnn.py) on real Fashion-MNIST data.

1. trains the model for one epoch in PyTorch (SGD, lr 0.01, momentum 0.9, batch 64);
2. saves the weights as safetensors, by state_dict name;
3. compiles the same model file to C with `ctc build` (batch = the whole test set);
4. runs the generated program on the 10,000 test images;
5. prints both test accuracies, the largest logit difference and both timings.

Data: Debian's dataset-fashion-mnist (/usr/share/datasets/fashion-mnist).
Run through ./demo.sh, which installs what is missing and builds ctc first."""
import gzip
import json
import os
import struct
import subprocess
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
DATA = os.environ.get("FASHION_MNIST_DIR", "/usr/share/datasets/fashion-mnist")
OUT = os.path.join(ROOT, "build", "demo")
CTC = os.path.join(ROOT, "build", "ctc")


def read_idx(path):
    """Read a gzipped IDX file (the MNIST container format) into a numpy array."""
    with gzip.open(path, "rb") as f:
        data = f.read()
    magic, = struct.unpack(">I", data[:4])
    ndim = magic & 0xFF
    dims = struct.unpack(">" + "I" * ndim, data[4:4 + 4 * ndim])
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def save_safetensors(path, tensors):
    header, blobs, off = {}, [], 0
    for name, t in tensors.items():
        b = np.ascontiguousarray(t.detach().numpy().astype(np.float32)).tobytes()
        header[name] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def main():
    os.makedirs(OUT, exist_ok=True)
    torch.set_num_threads(2)
    torch.manual_seed(0)
    norm = lambda a: ((a.astype(np.float32) / 255.0) - 0.2860) / 0.3530
    xtr = norm(read_idx(os.path.join(DATA, "train-images-idx3-ubyte.gz")))[:, None]
    ytr = read_idx(os.path.join(DATA, "train-labels-idx1-ubyte.gz")).astype(np.int64)
    xte = norm(read_idx(os.path.join(DATA, "t10k-images-idx3-ubyte.gz")))[:, None]
    yte = read_idx(os.path.join(DATA, "t10k-labels-idx1-ubyte.gz")).astype(np.int64)
    print(f"Fashion-MNIST: {len(xtr)} training and {len(xte)} test images from {DATA}")

    sys.path.insert(0, HERE)
    import seed_cnn
    model = seed_cnn.Network()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    t0 = time.time()
    model.train()
    perm = torch.randperm(len(xtr))
    X, Y = torch.from_numpy(xtr), torch.from_numpy(ytr)
    for i in range(0, len(xtr), 64):
        idx = perm[i:i + 64]
        opt.zero_grad()
        loss = F.cross_entropy(model(X[idx]), Y[idx])
        loss.backward()
        opt.step()
    print(f"PyTorch: trained 1 epoch in {time.time() - t0:.1f} s (last loss {loss.item():.3f})")
    weights = os.path.join(OUT, "seed_cnn.safetensors")
    save_safetensors(weights, model.state_dict())

    n = len(xte)
    exe = os.path.join(OUT, "seed_cnn")
    t0 = time.time()
    subprocess.run([CTC, "build", os.path.join(HERE, "seed_cnn.py"), "-o", exe, "--input", f"t=f32[{n},1,28,28]",
                    "--stats"], check=True)
    print(f"ctc: compiled and built {exe} in {time.time() - t0:.2f} s")
    np.save(os.path.join(OUT, "test_images.npy"), xte)
    logits_path = os.path.join(OUT, "logits.npy")
    t0 = time.time()
    subprocess.run([exe, "infer", "--weights", weights, "--input", os.path.join(OUT, "test_images.npy"),
                    "--output", logits_path], check=True)
    t_c = time.time() - t0
    got = np.load(logits_path)

    model.eval()
    with torch.no_grad():
        t0 = time.time()
        want = model(torch.from_numpy(xte)).numpy()
        t_torch = time.time() - t0
    acc_c = (got.argmax(1) == yte).mean() * 100
    acc_t = (want.argmax(1) == yte).mean() * 100
    diff = np.abs(got - want).max()
    print(f"test accuracy: generated C {acc_c:.2f}%   PyTorch {acc_t:.2f}%")
    print(f"max |logit difference| vs PyTorch: {diff:.2e}")
    print(f"inference on {n} images: generated C {t_c * 1e3:.0f} ms (whole process, incl. loading)   "
          f"PyTorch {t_torch * 1e3:.0f} ms (forward only)")
    if not np.allclose(got, want, rtol=1e-4, atol=1e-4):
        print("MISMATCH between generated C and PyTorch", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
