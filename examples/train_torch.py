"""Train a model file with PyTorch exactly the way a ctc-built program's `train`
command does, to compare the two (loss per epoch, speed, test accuracy).

    /usr/bin/python3 examples/train_torch.py MODEL.py [--model CLASS]
        --data X --labels Y [--test-data X --test-labels Y]
        [--batch 64] [--epochs 1] [--lr 0.01] [--momentum 0.9] [--no-shuffle] [--seed 0]
        [--normalize MEAN,STD] [--limit N] [--init-weights W.safetensors]
        [--write-init W.safetensors] [--save OUT.safetensors] [--log loss.csv] [--threads N]

Same rules as the driver (runtime_min/rt_driver.c, rt_data.c):
  - data: .npy, or IDX files (the MNIST container, gzipped or not); u8 data
    becomes x / 255 in float32 (torchvision's ToTensor), then (x - MEAN) / STD
    with --normalize (transforms.Normalize); samples must have the model's
    input sample shape (from the file's `example_inputs`, or --sample-shape),
    only its size-1 axes may be missing (IDX [N, 28, 28] for [1, 28, 28]);
  - --limit N keeps the first N samples of every data set;
  - each epoch takes floor(N / B) batches (drop_last); the sample order is the
    driver's: file order with --no-shuffle, otherwise the same splitmix64 +
    Fisher-Yates permutation of (seed, epoch), so both sides see the same
    batches in the same order;
  - SGD with momentum on F.cross_entropy; test accuracy is the argmax of the
    model's logits in eval mode.
Output: `epoch 1: loss 0.5123, 4321 samples/s, test accuracy 84.21%` per epoch.

--write-init W writes the freshly initialised parameters (state_dict names;
the model is built after torch.manual_seed(--seed)) so that a ctc program can
start from them: `./net train --weights W ...`. Without --data it stops there.
--init-weights W loads such a file (tensors the model lacks, like a ctc
program's optimizer state, are ignored)."""
import argparse
import gzip
import importlib.util
import inspect
import json
import os
import struct
import sys
import time

import numpy as np

# ---- data: the same rules as runtime_min/rt_data.c ------------------------------

IDX_TYPES = {0x08: ">u1", 0x09: ">i1", 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}


def load_dataset(path):
    """A .npy or IDX (optionally gzipped) file as a numpy array."""
    with open(path, "rb") as f:
        gz = f.read(2) == b"\x1f\x8b"
    with (gzip.open(path, "rb") if gz else open(path, "rb")) as f:
        data = f.read()
    if data[:6] == b"\x93NUMPY":
        if gz:
            sys.exit(f"{path}: gzipped .npy files are not supported; decompress it first")
        return np.load(path, allow_pickle=False)
    if len(data) < 4 or data[0] or data[1] or data[2] not in IDX_TYPES or not 1 <= data[3] <= 8:
        sys.exit(f"{path}: not a .npy or IDX file")
    ndim, dt = data[3], np.dtype(IDX_TYPES[data[2]])
    if len(data) < 4 + 4 * ndim:
        sys.exit(f"{path}: IDX file is truncated in the header")
    dims = struct.unpack(">" + "I" * ndim, data[4:4 + 4 * ndim])
    want = int(np.prod(dims, dtype=np.int64)) * dt.itemsize
    if len(data) - 4 - 4 * ndim != want:
        sys.exit(f"{path}: IDX data has {len(data) - 4 - 4 * ndim} bytes, expected {want}")
    return np.frombuffer(data, dtype=dt, offset=4 + 4 * ndim).reshape(dims).astype(dt.newbyteorder("="))


def to_float(a, normalize):
    """As the driver converts samples for a float32 input (in float32 arithmetic)."""
    x = a.astype(np.float32) / np.float32(255) if a.dtype == np.uint8 else a.astype(np.float32)
    if normalize:
        x = (x - np.float32(normalize[0])) / np.float32(normalize[1])
    return x


def sample_shape_fits(have, want):
    """rt_train.c's rule: `have` is `want` with some of its size-1 axes missing."""
    i = 0
    for w in want:
        if i < len(have) and have[i] == w:
            i += 1
        elif w != 1:
            return False
    return i == len(have)


def load_pair(data_path, labels_path, sample_shape, normalize, limit):
    x, y = load_dataset(data_path), load_dataset(labels_path)
    if limit:
        x, y = x[:limit], y[:limit]
    if len(x) != len(y):
        sys.exit(f"{data_path} has {len(x)} samples but {labels_path} has {len(y)} labels")
    if sample_shape and not sample_shape_fits(x.shape[1:], sample_shape):
        sys.exit(f"{data_path}: samples of shape {list(x.shape[1:])} do not fit the model's input {list(sample_shape)}")
    x = to_float(x, normalize)
    if sample_shape:
        x = x.reshape((len(x), *sample_shape))
    return np.ascontiguousarray(x), y.reshape(len(y)).astype(np.int64)


# ---- the driver's shuffling (rt_driver.c: splitmix64, rand_below, epoch_order) ----

MASK = (1 << 64) - 1


def epoch_order(n, seed, epoch, shuffle=True):
    """The sample order of epoch `epoch` (1-based), as the ctc driver draws it."""
    order = list(range(n))
    if not shuffle:
        return np.array(order, dtype=np.int64)
    s = (seed ^ (epoch * 0xD1B54A32D192ED03)) & MASK
    for i in range(n - 1, 0, -1):
        m = i + 1
        reject_below = (1 << 64) % m
        while True:
            s = (s + 0x9E3779B97F4A7C15) & MASK
            z = s
            z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
            z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
            z ^= z >> 31
            if z >= reject_below:
                break
        j = z % m
        order[i], order[j] = order[j], order[i]
    return np.array(order, dtype=np.int64)


# ---- safetensors by hand ------------------------------------------------------------

ST_DTYPES = {"float32": "F32", "float64": "F64", "int64": "I64", "int32": "I32", "bool": "BOOL", "uint8": "U8"}
ST_NP = {"F32": np.float32, "F64": np.float64, "I64": np.int64, "I32": np.int32, "BOOL": np.bool_, "U8": np.uint8}


def write_safetensors(path, tensors):
    header, blobs, off = {}, [], 0
    for name, t in tensors.items():
        a = np.ascontiguousarray(t.detach().cpu().numpy())
        if a.dtype.name not in ST_DTYPES:
            sys.exit(f"{name}: dtype {a.dtype} cannot be written")
        b = a.astype(a.dtype.newbyteorder("<")).tobytes()
        header[name] = {"dtype": ST_DTYPES[a.dtype.name], "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def read_safetensors(path):
    with open(path, "rb") as f:
        buf = f.read()
    (n,) = struct.unpack("<Q", buf[:8])
    header = json.loads(buf[8:8 + n])
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        b, e = info["data_offsets"]
        dt = np.dtype(ST_NP[info["dtype"]]).newbyteorder("<")
        out[name] = np.frombuffer(buf[8 + n + b:8 + n + e], dtype=dt).reshape(info["shape"]).astype(dt.newbyteorder("="))
    return out


# ---- the model ------------------------------------------------------------------------


def load_model(path, name, seed):
    """(module, model): --model CLASS or instance, else a module-level `model`, else
    the only nn.Module subclass defined in the file; built after manual_seed(seed)."""
    import torch
    import torch.nn as nn
    torch.manual_seed(seed)
    spec = importlib.util.spec_from_file_location(os.path.splitext(os.path.basename(path))[0], path)
    mod = importlib.util.module_from_spec(spec)
    sys.path.insert(0, os.path.dirname(os.path.abspath(path)))
    spec.loader.exec_module(mod)
    torch.manual_seed(seed)  # the same weights whatever the file's top level drew
    if name:
        obj = getattr(mod, name, None)
        if obj is None:
            sys.exit(f"{path}: no '{name}'")
    elif isinstance(getattr(mod, "model", None), nn.Module):
        obj = type(mod.model)
    else:
        classes = [c for c in vars(mod).values()
                   if inspect.isclass(c) and issubclass(c, nn.Module) and c.__module__ == mod.__name__]
        if len(classes) != 1:
            sys.exit(f"{path}: {len(classes)} nn.Module classes; choose one with --model")
        obj = classes[0]
    model = obj() if inspect.isclass(obj) else obj
    return mod, model


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model_file")
    ap.add_argument("--model", help="nn.Module class or instance in the file")
    ap.add_argument("--data")
    ap.add_argument("--labels")
    ap.add_argument("--test-data")
    ap.add_argument("--test-labels")
    ap.add_argument("--batch", type=int, help="default: the batch of the file's example_inputs, else 64")
    ap.add_argument("--sample-shape", help="e.g. 1,28,28 (default: from example_inputs)")
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--lr", type=float, default=0.01)
    ap.add_argument("--momentum", type=float, default=0.9)
    ap.add_argument("--no-shuffle", action="store_true")
    ap.add_argument("--seed", type=int, default=0, help="initial weights and the shuffling order")
    ap.add_argument("--normalize", help="MEAN,STD")
    ap.add_argument("--limit", type=int, default=0)
    ap.add_argument("--init-weights")
    ap.add_argument("--write-init")
    ap.add_argument("--save")
    ap.add_argument("--log", help="CSV epoch,step,loss (one row per step)")
    ap.add_argument("--threads", type=int)
    args = ap.parse_args()

    import torch
    import torch.nn.functional as F
    if args.threads:
        torch.set_num_threads(args.threads)
    mod, model = load_model(args.model_file, args.model, args.seed)
    if args.init_weights:
        have = read_safetensors(args.init_weights)
        sd = model.state_dict()
        missing = [k for k in sd if k not in have]
        if missing:
            sys.exit(f"{args.init_weights}: tensor '{missing[0]}' is missing")
        model.load_state_dict({k: torch.from_numpy(have[k].copy()) for k in sd})
    if args.write_init:
        write_safetensors(args.write_init, model.state_dict())
        print(f"wrote the initial weights to {args.write_init}")
    if not args.data:
        if not args.write_init:
            ap.error("--data and --labels are required")
        return
    if not args.labels or bool(args.test_data) != bool(args.test_labels):
        ap.error("--data needs --labels, --test-data needs --test-labels")

    example = getattr(mod, "example_inputs", None)  # (x,) or {"forward": (x,), ...}
    if isinstance(example, dict):
        example = example.get("forward")
    example = example[0] if isinstance(example, (tuple, list)) and example else None
    if args.sample_shape:
        sample_shape = tuple(int(v) for v in args.sample_shape.split(","))
    else:
        sample_shape = tuple(example.shape[1:]) if example is not None else None
    batch = args.batch or (example.shape[0] if example is not None else 64)
    normalize = tuple(float(v) for v in args.normalize.split(",")) if args.normalize else None

    x, y = load_pair(args.data, args.labels, sample_shape, normalize, args.limit)
    if args.test_data:
        tx, ty = load_pair(args.test_data, args.test_labels, sample_shape, normalize, args.limit)
        tx, ty = torch.from_numpy(tx), torch.from_numpy(ty)
    steps = len(x) // batch  # drop_last
    if steps == 0:
        sys.exit(f"{args.data}: {len(x)} training samples are fewer than one batch of {batch}")
    X, Y = torch.from_numpy(x), torch.from_numpy(y)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum)
    log = open(args.log, "w") if args.log else None
    if log:
        log.write("epoch,step,loss\n")
    for epoch in range(1, args.epochs + 1):
        order = torch.from_numpy(epoch_order(len(x), args.seed, epoch, not args.no_shuffle))
        model.train()
        total, t0 = 0.0, time.perf_counter()
        for s in range(steps):
            idx = order[s * batch:(s + 1) * batch]
            opt.zero_grad()
            loss = F.cross_entropy(model(X[idx]), Y[idx])
            loss.backward()
            opt.step()
            v = loss.item()
            total += v
            if log:
                log.write(f"{epoch},{s + 1},{v:.9g}\n")
            if (s + 1) * 10 // steps != s * 10 // steps and s + 1 < steps:
                print(f"epoch {epoch}/{args.epochs}  step {s + 1}/{steps}  loss {total / (s + 1):.4f}", file=sys.stderr)
        secs = time.perf_counter() - t0
        line = f"epoch {epoch}: loss {total / steps:.4f}, {steps * batch / secs:.0f} samples/s"
        if args.test_data:
            model.eval()
            correct = 0
            with torch.no_grad():
                for i in range(0, len(tx), batch):
                    correct += int((model(tx[i:i + batch]).argmax(dim=1) == ty[i:i + batch]).sum())
            line += f", test accuracy {100 * correct / len(tx):.2f}%"
        print(line, flush=True)
    if log:
        log.close()
    if args.save:
        write_safetensors(args.save, model.state_dict())


if __name__ == "__main__":
    main()
