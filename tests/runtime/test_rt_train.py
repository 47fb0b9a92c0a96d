"""The driver's `train` command and the data set loader (rt_data.c), with the
fake model's training variant (FAKE_MODEL=train in fake_model.c: a softmax
classifier, batch 4, 4 features, 3 classes, whose step records the batches it
sees in the parameters seen_x / seen_y / nsteps, which --save writes out).

Covered: IDX / IDX.gz / .npy loading, u8 scaling and --normalize, file order
with --no-shuffle, the seeded permutation (the same as examples/train_torch.py
draws), drop-last, --limit, --batch checks, test accuracy with a padded last
batch, the CSV log, progress lines, malformed files (also under ASan+UBSan),
and a comparison with PyTorch through examples/train_torch.py."""
import gzip
import importlib.util
import os
import random
import re
import struct
import subprocess

import numpy as np
import pytest

import rt_testlib as lib

TRAIN = {"FAKE_MODEL": "train"}
B, C = 4, 3
INIT_W = (np.float32(0.1) * np.array([(i * 7) % 5 for i in range(12)], np.float32) - np.float32(0.2)).reshape(3, 4)
EPOCH_LINE = re.compile(r"^epoch (\d+): loss (\d+\.\d{4}), \d+ samples/s(, test accuracy (\d+\.\d\d)%)?$")


def train(exe, *args, env=None):
    return lib.run(exe, "train", *args, env={**TRAIN, **(env or {})})


def load_train_torch():
    spec = importlib.util.spec_from_file_location("train_torch", os.path.join(lib.REPO, "examples", "train_torch.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)  # imports numpy only; torch is imported in main()
    return mod


# ---- writing data sets ---------------------------------------------------------------

IDX_CODES = {np.dtype(np.uint8): 0x08, np.dtype(np.int8): 0x09, np.dtype(np.int16): 0x0B,
             np.dtype(np.int32): 0x0C, np.dtype(np.float32): 0x0D, np.dtype(np.float64): 0x0E}


def idx_bytes(arr):
    arr = np.asarray(arr)
    head = struct.pack(">I", IDX_CODES[arr.dtype] << 8 | arr.ndim) + struct.pack(">" + "I" * arr.ndim, *arr.shape)
    return head + arr.astype(arr.dtype.newbyteorder(">")).tobytes()


def write_idx(path, arr, gz=False):
    data = idx_bytes(arr)
    path.write_bytes(gzip.compress(data) if gz else data)
    return path


def images(n, seed=0):
    """u8 [n, 2, 2] images whose first pixel is the sample's index (n <= 256)."""
    x = np.random.default_rng(seed).integers(0, 256, (n, 2, 2), dtype=np.uint8)
    x[:, 0, 0] = np.arange(n) % 256
    return x


def labels(n, seed=0):
    return np.random.default_rng(seed + 100).integers(0, C, n).astype(np.uint8)


def dataset(tmp_path, n, gz=True, seed=0, name="train"):
    x, y = images(n, seed), labels(n, seed)
    ext = ".gz" if gz else ".idx"
    return x, y, write_idx(tmp_path / f"{name}-x{ext}", x, gz), write_idx(tmp_path / f"{name}-y{ext}", y, gz)


def scaled(x):
    return x.astype(np.float32) / np.float32(255)


def saved(path):
    return lib.st_read(path)[2]


def seen_indices(s, nsteps):
    """Sample indices of the batches the step recorded (first pixel * 255)."""
    return np.rint(s["seen_x"][:nsteps, :, 0] * 255).astype(int)


# ---- loading and conversion -------------------------------------------------------------


def test_idx_gz_u8_scaled_in_file_order(fake, tmp_path):
    """u8 IDX images become x / 255; --no-shuffle takes samples in order; the
    last partial batch (10 = 2 * 4 + 2) is dropped."""
    x, y, xp, yp = dataset(tmp_path, 10)
    r = train(fake, "--data", xp, "--labels", yp, "--epochs", 1, "--no-shuffle", "--save", tmp_path / "s.st")
    assert r.returncode == 0, r.stderr
    s = saved(tmp_path / "s.st")
    assert s["nsteps"] == 2
    assert np.array_equal(s["seen_x"][:2], scaled(x[:8]).reshape(2, 4, 4))
    assert np.array_equal(s["seen_y"][:2], y[:8].astype(np.int64).reshape(2, 4))
    assert not s["seen_x"][2:].any() and not s["seen_y"][2:].any()  # samples 8, 9 never used
    # the same data as plain IDX and as .npy (u8 and f32) gives the same run
    _, _, xp2, yp2 = dataset(tmp_path, 10, gz=False)
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "xf.npy", scaled(x).reshape(10, 1, 2, 2))  # float data: no scaling; the entry's sample shape
    np.save(tmp_path / "y.npy", y.astype(np.int32))
    for data, lab in ((xp2, yp2), (tmp_path / "x.npy", tmp_path / "y.npy"), (tmp_path / "xf.npy", yp)):
        r = train(fake, "--data", data, "--labels", lab, "--epochs", 1, "--no-shuffle", "--save", tmp_path / "t.st")
        assert r.returncode == 0, r.stderr
        assert (tmp_path / "t.st").read_bytes() == (tmp_path / "s.st").read_bytes(), data


def test_normalize_and_float_data(fake, tmp_path):
    x, _, xp, yp = dataset(tmp_path, 8)
    r = train(fake, "--data", xp, "--labels", yp, "--epochs", 1, "--no-shuffle", "--normalize", "0.2860,0.3530",
              "--save", tmp_path / "s.st")
    assert r.returncode == 0, r.stderr
    want = (scaled(x) - np.float32(0.2860)) / np.float32(0.3530)
    assert np.array_equal(saved(tmp_path / "s.st")["seen_x"][:2], want.reshape(2, 4, 4))
    # f64 data: converted to f32, normalized, not scaled; float labels that are integers are accepted
    xf = np.random.default_rng(3).standard_normal((8, 1, 2, 2))
    np.save(tmp_path / "xf.npy", xf)
    np.save(tmp_path / "yf.npy", np.array([0, 1, 2, 0, 1, 2, 0, 1], np.float32))
    r = train(fake, "--data", tmp_path / "xf.npy", "--labels", tmp_path / "yf.npy", "--epochs", 1, "--no-shuffle",
              "--normalize=-1,2", "--save", tmp_path / "s.st")
    assert r.returncode == 0, r.stderr
    s = saved(tmp_path / "s.st")
    want = (xf.astype(np.float32) - np.float32(-1)) / np.float32(2)
    assert np.array_equal(s["seen_x"][:2], want.reshape(2, 4, 4))
    assert s["seen_y"][:2].ravel().tolist() == [0, 1, 2, 0, 1, 2, 0, 1]


def test_idx_other_types(fake, tmp_path):
    """IDX i8/i16/i32/f32/f64 data (big-endian) converts like .npy data."""
    base = np.array([[1, -2, 3, -4], [5, 6, -7, 8], [9, 10, 11, -12], [-13, 14, 15, 16]])
    y = write_idx(tmp_path / "y.idx", np.array([0, 1, 2, 1], np.int32))
    for dt in (np.int8, np.int16, np.int32, np.float32, np.float64):
        xp = write_idx(tmp_path / f"x-{np.dtype(dt).name}.idx", base.astype(dt).reshape(4, 2, 2))
        r = train(fake, "--data", xp, "--labels", y, "--epochs", 1, "--no-shuffle", "--save", tmp_path / "s.st")
        assert r.returncode == 0, (dt, r.stderr)
        s = saved(tmp_path / "s.st")
        assert np.array_equal(s["seen_x"][0], base.astype(np.float32)), dt
        assert s["seen_y"][0].tolist() == [0, 1, 2, 1]


# ---- order, batches, limits --------------------------------------------------------------


def test_seeded_shuffle_matches_train_torch(fake, tmp_path):
    """Each epoch is a permutation drawn from (seed, epoch) - the one that
    examples/train_torch.py computes; the same seed repeats the run exactly."""
    tt = load_train_torch()
    _, _, xp, yp = dataset(tmp_path, 11)
    runs = {}
    for seed in (None, "0", "5"):
        out = tmp_path / f"s{seed}.st"
        r = train(fake, "--data", xp, "--labels", yp, "--epochs", 3, "--save", out, *(["--seed", seed] if seed else []))
        assert r.returncode == 0, r.stderr
        runs[seed] = out.read_bytes()
        s = saved(out)
        assert s["nsteps"] == 6  # 3 epochs of floor(11 / 4) = 2 batches
        seen = seen_indices(s, 6)
        for epoch in (1, 2, 3):
            want = tt.epoch_order(11, int(seed or 0), epoch)[:8]
            assert sorted(want) == sorted(set(want))
            assert seen[2 * (epoch - 1):2 * epoch].ravel().tolist() == want.tolist(), (seed, epoch)
    assert runs[None] == runs["0"] and runs["0"] != runs["5"]
    r = train(fake, "--data", xp, "--labels", yp, "--epochs", 3, "--seed", "5", "--save", tmp_path / "again.st")
    assert (tmp_path / "again.st").read_bytes() == runs["5"]
    assert tt.epoch_order(5, 0, 1, shuffle=False).tolist() == [0, 1, 2, 3, 4]


def test_no_shuffle_repeats_file_order_each_epoch(fake, tmp_path):
    _, _, xp, yp = dataset(tmp_path, 9)
    r = train(fake, "--data", xp, "--labels", yp, "--epochs", 3, "--no-shuffle", "--save", tmp_path / "s.st")
    assert r.returncode == 0, r.stderr
    assert seen_indices(saved(tmp_path / "s.st"), 6).ravel().tolist() == list(range(8)) * 3


def test_batch_size_checks_and_limit(fake, tmp_path):
    _, _, xp, yp = dataset(tmp_path, 20)
    r = train(fake, "--data", xp, "--labels", yp, "--epochs", 1, "--batch", 8)
    assert r.returncode == 1 and "--batch 8: the model was compiled for batches of 4" in r.stderr
    assert r.stdout == ""
    r = train(fake, "--data", xp, "--labels", yp, "--epochs", 2, "--batch", 4, "--limit", 9, "--no-shuffle",
              "--save", tmp_path / "s.st")
    assert r.returncode == 0, r.stderr
    s = saved(tmp_path / "s.st")
    assert s["nsteps"] == 4 and seen_indices(s, 4).max() == 7
    r = train(fake, "--data", xp, "--labels", yp, "--epochs", 1, "--limit", 3)
    assert r.returncode == 1 and "3 training samples are fewer than one batch of 4" in r.stderr


# ---- output: epoch lines, accuracy, log, progress ------------------------------------------


def logits(w, b, x):
    return x.reshape(len(x), -1).astype(np.float64) @ w.T.astype(np.float64) + b


def test_test_accuracy_with_padded_batch(fake, tmp_path):
    """7 test images = one full batch and one padded with zeros; only the 7
    real rows count."""
    _, _, xp, yp = dataset(tmp_path, 12)
    tx, _, txp, _ = dataset(tmp_path, 7, seed=9, name="test")
    for ty in (labels(7, 9), np.full(7, 2, np.uint8)):
        typ = write_idx(tmp_path / "test-labels.gz", ty, gz=True)
        r = train(fake, "--data", xp, "--labels", yp, "--test-data", txp, "--test-labels", typ, "--epochs", 2,
                  "--save", tmp_path / "s.st")
        assert r.returncode == 0, r.stderr
        lines = r.stdout.splitlines()
        assert len(lines) == 2 and all(EPOCH_LINE.match(line) for line in lines), r.stdout
        s = saved(tmp_path / "s.st")
        pred = logits(s["fc.weight"], s["fc.bias"], scaled(tx)).argmax(1)
        want = 100 * np.mean(pred == ty)
        assert EPOCH_LINE.match(lines[-1]).group(4) == f"{want:.2f}", (lines, pred, ty)
    bad = write_idx(tmp_path / "test-labels-2d.gz", np.zeros((7, 2), np.uint8), gz=True)
    r = train(fake, "--data", xp, "--labels", yp, "--test-data", txp, "--test-labels", bad, "--epochs", 1)
    assert r.returncode == 1 and ("data of shape [7, 2] has samples of shape [2], but test accuracy (one label per "
                                  "sample) takes samples of shape []") in r.stderr


def test_log_csv_and_epoch_loss(fake, tmp_path):
    x, y, xp, yp = dataset(tmp_path, 14)
    w = np.random.default_rng(2).standard_normal((3, 4)).astype(np.float32)
    b = np.array([0.1, -0.2, 0.3], np.float32)
    lib.st_write(tmp_path / "w.st", [("fc.weight", w), ("fc.bias", b), ("seen_x", np.zeros((16, 4, 4), np.float32)),
                                     ("seen_y", np.zeros((16, 4), np.int64)), ("nsteps", np.array(0, np.int64))])
    r = train(fake, "--weights", tmp_path / "w.st", "--data", xp, "--labels", yp, "--epochs", 2, "--no-shuffle",
              "--log", tmp_path / "loss.csv")
    assert r.returncode == 0, r.stderr
    rows = (tmp_path / "loss.csv").read_text().splitlines()
    assert rows[0] == "epoch,step,loss" and len(rows) == 1 + 2 * 3
    table = [row.split(",") for row in rows[1:]]
    assert [(int(e), int(s)) for e, s, _ in table] == [(e, s) for e in (1, 2) for s in (1, 2, 3)]
    losses = np.array([float(v) for _, _, v in table])
    # the first step starts from the given weights
    z = logits(w, b, scaled(x[:4]))
    lse = np.log(np.exp(z - z.max(1, keepdims=True)).sum(1)) + z.max(1)
    assert abs(losses[0] - np.mean(lse - z[np.arange(4), y[:4]])) < 1e-5
    epochs = [EPOCH_LINE.match(line) for line in r.stdout.splitlines()]
    for k, m in enumerate(epochs):
        assert m and abs(float(m.group(2)) - losses[3 * k:3 * k + 3].mean()) <= 5.1e-5


def test_progress_lines(fake, tmp_path):
    """Not a tty: about one progress line per 10% of an epoch, on stderr."""
    _, _, xp, yp = dataset(tmp_path, 200)
    r = train(fake, "--data", xp, "--labels", yp, "--epochs", 2)
    assert r.returncode == 0, r.stderr
    lines = r.stderr.splitlines()
    assert 16 <= len(lines) <= 20 and "\r" not in r.stderr, r.stderr
    assert re.match(r"^epoch 1/2  step 5/50  loss \d+\.\d{4}  \d+ samples/s  ETA \d+:\d\d$", lines[0]), lines[0]
    assert all(line.startswith("epoch ") for line in lines)
    assert len(r.stdout.splitlines()) == 2


# ---- errors ------------------------------------------------------------------------------


def test_usage_errors(fake, tmp_path):
    _, _, xp, yp = dataset(tmp_path, 8)
    cases = [
        ([], "train needs --data X and --labels Y"),
        (["--data", xp, "--labels", yp], "train needs --epochs E"),
        (["--data", xp, "--labels", yp, "--epochs", 0], "--epochs needs a positive integer"),
        (["--data", xp, "--labels", yp, "--epochs", 1, "--test-data", xp], "--test-data and --test-labels go together"),
        (["--data", xp, "--labels", yp, "--epochs", 1, "--frob"], "unknown option '--frob'"),
        (["--data", xp, "--labels", yp, "--epochs", 1, "--normalize", "0.5"], "--normalize needs MEAN,STD"),
        (["--data", xp, "--labels", yp, "--epochs", 1, "--normalize", "0.5,0"], "--normalize needs MEAN,STD"),
        (["--data", xp, "--labels", yp, "--epochs", 1, "--seed", "-1"], "--seed needs a non-negative integer"),
        (["--data", xp, "--labels", yp, "--epochs", 1, "--seed", "1", "--no-shuffle"], "--seed has no effect"),
        (["--data", xp, "--data", xp, "--labels", yp, "--epochs", 1], "option --data given twice"),
        (["--data", xp, "--labels", yp, "--epochs"], "option --epochs needs a value"),
        (["extra"], "unexpected argument 'extra'"),
    ]
    for args, msg in cases:
        r = train(fake, *args)
        assert r.returncode == 1 and msg in r.stderr, (args, r.stderr)
        assert "train --help" in r.stderr
    r = lib.run(fake, "train", "--data", xp, "--labels", yp, "--epochs", 1)  # the default fake: no TRAIN entry
    assert r.returncode == 1 and "model 'fake' has no training entry (entries: forward, bump, mix, fail)" in r.stderr
    r = train(fake, "--help")
    assert r.returncode == 0 and r.stdout.startswith(f"usage: {fake} train")
    for text in ("drop_last", "(this model: 4)", "--test-data", "--normalize", "--limit", "--log", "--seed"):
        assert text in r.stdout, text
    r = train(fake, "--data", xp, "--labels", yp, "--epochs", 1, "--weights", tmp_path / "none.st")
    assert r.returncode == 2 and "cannot open" in r.stderr


def test_io_errors_fail_before_training(fake, tmp_path):
    _, _, xp, yp = dataset(tmp_path, 8)
    r = train(fake, "--data", tmp_path / "missing.gz", "--labels", yp, "--epochs", 1)
    assert r.returncode == 2 and "missing.gz: cannot open" in r.stderr
    r = train(fake, "--data", tmp_path, "--labels", yp, "--epochs", 1)  # a directory
    assert r.returncode == 2 and ": error: " in r.stderr
    for opt in ("--save", "--log"):
        r = train(fake, "--data", xp, "--labels", yp, "--epochs", 1, opt, tmp_path / "no" / "dir" / "f")
        assert r.returncode == 2 and "cannot open for writing" in r.stderr and r.stdout == "", opt


def test_entry_failure_is_reported(fake, tmp_path):
    x = np.ones((8, 4), np.float32)
    x[5, 0] = -999  # the fake step fails on a batch that starts with -999
    x[4, 0] = -999
    np.save(tmp_path / "x.npy", x.reshape(8, 1, 2, 2))
    np.save(tmp_path / "y.npy", np.zeros(8, np.int64))
    r = train(fake, "--data", tmp_path / "x.npy", "--labels", tmp_path / "y.npy", "--epochs", 1, "--no-shuffle",
              "--save", tmp_path / "s.st")
    assert r.returncode == 1 and "entry 'train_step' failed at epoch 1, step 2" in r.stderr
    assert not (tmp_path / "s.st").exists()


def bad_data_cases():
    """(name, data file bytes, labels file bytes or None for good ones, message)."""
    good = idx_bytes(images(8))
    good_y = idx_bytes(labels(8))
    hdr = struct.pack(">IIII", 0x803, 8, 2, 2)
    npy = __import__("io").BytesIO()
    np.save(npy, images(8))
    return [
        ("empty", b"", None, "too short for a header"),
        ("short", b"\x00\x00\x08", None, "too short for a header"),
        ("bad_magic", b"\x12\x34" + good[2:], None, "not a .npy or IDX file (magic 0x12340803"),
        ("bad_type", b"\x00\x00\x07\x03" + good[4:], None, "not a .npy or IDX file (magic 0x00000703"),
        ("zero_dims", b"\x00\x00\x08\x00" + good[4:], None, "declares 0 dimensions"),
        ("many_dims", b"\x00\x00\x08\x09" + good[4:], None, "declares 9 dimensions"),
        ("trunc_header", hdr[:10], None, "truncated in the header"),
        ("trunc_data", good[:-5], None, "IDX file is truncated: u8 [8, 2, 2] needs 32 bytes of data, found 27"),
        ("trailing", good + b"\0", None, "1 unexpected bytes after the u8 [8, 2, 2] data"),
        ("huge_dims", struct.pack(">IIIII", 0x804, 2**32 - 1, 2**32 - 1, 2**32 - 1, 2**32 - 1), None, "is too large"),
        ("lying_dims", struct.pack(">IIII", 0x803, 2**31, 2, 2) + good[16:], None, "IDX file is truncated"),
        ("trunc_gz", gzip.compress(good)[:-12], None, "cannot decompress"),
        ("corrupt_gz", gzip.compress(good)[:12] + b"\xff" * 20, None, "cannot decompress"),
        ("gz_npy", gzip.compress(npy.getvalue()), None, "gzipped .npy files are not supported"),
        ("bad_npy", npy.getvalue()[:60], None, "header length 118 is larger than the rest of the file"),
        ("wrong_sample_size", idx_bytes(np.zeros((8, 3, 3), np.uint8)), None,
         "data of shape [8, 3, 3] has samples of shape [3, 3], but input 'x' of entry 'train_step' takes samples "
         "of shape [1, 2, 2]: the data must be [N, 1, 2, 2]"),
        # as many values per sample as the entry's, but in another shape: never reshaped
        ("flat_samples", idx_bytes(np.zeros((8, 4), np.uint8)), None, "has samples of shape [4], but input 'x'"),
        ("size1_last", idx_bytes(np.zeros((8, 2, 2, 1), np.uint8)), None, "has samples of shape [2, 2, 1], but"),
        ("count_mismatch", good, idx_bytes(labels(7)), "has 8 samples but"),
        ("labels_2d", good, idx_bytes(np.zeros((8, 2), np.uint8)),
         "has samples of shape [2], but input 'target' of entry 'train_step' takes samples of shape []"),
        ("label_range", good, idx_bytes(np.array([0, 1, 2, 3, 0, 1, 2, 0], np.uint8)),
         "label 3 of sample 3 is out of range: forward entry 'forward' has 3 classes (0 to 2)"),
        ("label_negative", good, idx_bytes(np.array([0, 1, 2, -1, 0, 1, 2, 0], np.int8)), "label -1 of sample 3"),
        ("label_fraction", good, idx_bytes(np.array([0, 1, 2, 1.5, 0, 1, 2, 0], np.float32)),
         "sample 3: value 1.5 is not an integer"),
        ("good", good, good_y, None),
    ]


def check_bad_data(exe, tmp_path, env=None):
    good_y = write_idx(tmp_path / "good-y.idx", labels(8))
    for name, data, lab, msg in bad_data_cases():
        xp = tmp_path / f"{name}.x"
        xp.write_bytes(data)
        yp = good_y
        if lab is not None:
            yp = tmp_path / f"{name}.y"
            yp.write_bytes(lab)
        r = train(exe, "--data", xp, "--labels", yp, "--epochs", 2, "--test-data", xp, "--test-labels", yp, env=env)
        assert "Sanitizer" not in r.stderr and "runtime error" not in r.stderr, (name, r.stderr)
        if msg is None:
            assert r.returncode == 0, (name, r.stderr)
        else:
            assert r.returncode == 1 and msg in r.stderr and r.stderr.startswith(f"{exe}: error: "), (name, r.stderr)
            assert r.stdout == ""


def test_malformed_data_files(fake, tmp_path):
    check_bad_data(fake, tmp_path)


def test_malformed_data_files_under_asan(fake_asan, tmp_path):
    exe, env = fake_asan
    check_bad_data(exe, tmp_path, env)
    # and a full valid run with every option
    _, _, xp, yp = dataset(tmp_path, 10)
    _, _, txp, typ = dataset(tmp_path, 5, gz=False, name="test")
    r = train(exe, "--data", xp, "--labels", yp, "--test-data", txp, "--test-labels", typ, "--epochs", 2,
              "--seed", 3, "--normalize", "0.5,0.5", "--limit", 9, "--log", tmp_path / "l.csv", "--save",
              tmp_path / "s.st", "--batch", 4, env=env)
    assert r.returncode == 0, r.stderr


def fuzz_idx_corpus(rng):
    good = idx_bytes(images(8))
    out = []
    for i in range(60):
        b = bytearray(good)
        for _ in range(rng.randint(1, 3)):
            op, pos = rng.randrange(4), rng.randrange(20) if rng.random() < 0.8 else rng.randrange(len(b) or 1)
            if op == 0 and b:
                b[min(pos, len(b) - 1)] = rng.choice([0, 1, 2, 3, 8, 9, 11, 12, 13, 14, 255])
            elif op == 1 and b:
                b[min(pos, len(b) - 1)] ^= 1 << rng.randrange(8)
            elif op == 2:
                del b[pos:pos + rng.randint(1, 4)]
            else:
                del b[rng.randrange(len(b) + 1):]
        blob = bytes(b)
        if i % 3 == 0:  # gzipped, sometimes with a damaged stream
            blob = gzip.compress(blob)
            if i % 2:
                blob = blob[:rng.randrange(len(blob))]
        out.append(blob)
    return out


@pytest.mark.parametrize("sanitized", [False, True])
def test_fuzz_idx(request, tmp_path, sanitized):
    """Mutated IDX files (plain and gzipped): exit 0, 1 or 2 with a message, never a crash."""
    if sanitized:
        exe, env = request.getfixturevalue("fake_asan")
    else:
        exe, env = request.getfixturevalue("fake"), None
    y = write_idx(tmp_path / "y.idx", labels(8))
    bad = []
    for i, blob in enumerate(fuzz_idx_corpus(random.Random(1234))):
        p = tmp_path / f"f{i:02d}.idx"
        p.write_bytes(blob)
        r = train(exe, "--data", p, "--labels", y, "--test-data", p, "--test-labels", y, "--epochs", 1, env=env)
        ok = r.returncode in (0, 1, 2) and (r.returncode == 0 or ": error: " in r.stderr)
        if not ok or "Sanitizer" in r.stderr or "runtime error" in r.stderr:
            bad.append(f"{p}: rc={r.returncode}\n{r.stderr[-1500:]}")
    assert not bad, bad[0]


# ---- against PyTorch ----------------------------------------------------------------------

TINY_MODEL = '''import torch
import torch.nn as nn


class Tiny(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 3)

    def forward(self, x):
        return self.fc(x.reshape(x.shape[0], -1))


example_inputs = (torch.randn(4, 1, 2, 2),)
'''


def test_same_run_as_train_torch(fake, tmp_path):
    """examples/train_torch.py with the fake's optimizer (SGD, lr 0.5, no
    momentum) and the same initial weights sees the same batches and ends
    with the same weights, losses and test accuracy."""
    if subprocess.run(["/usr/bin/python3", "-c", "import torch"], capture_output=True).returncode != 0:
        pytest.skip("PyTorch is not installed")
    (tmp_path / "tiny.py").write_text(TINY_MODEL)
    _, _, xp, yp = dataset(tmp_path, 30)
    _, _, txp, typ = dataset(tmp_path, 9, seed=4, name="test")
    script = os.path.join(lib.REPO, "examples", "train_torch.py")
    common = ["--data", xp, "--labels", yp, "--test-data", txp, "--test-labels", typ, "--epochs", 3,
              "--seed", 11, "--normalize", "0.5,0.3", "--log"]
    r = subprocess.run(["/usr/bin/python3", script, tmp_path / "tiny.py", "--write-init", tmp_path / "init.st",
                        "--lr", "0.5", "--momentum", "0", "--threads", "1", *map(str, common), tmp_path / "torch.csv",
                        "--save", tmp_path / "torch.st"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    torch_lines = [line for line in r.stdout.splitlines() if line.startswith("epoch")]
    init = saved(tmp_path / "init.st")
    assert list(init) == ["fc.weight", "fc.bias"]
    lib.st_write(tmp_path / "init_all.st", [*init.items(), ("seen_x", np.zeros((16, 4, 4), np.float32)),
                                            ("seen_y", np.zeros((16, 4), np.int64)), ("nsteps", np.array(0, np.int64))])
    r = train(fake, "--weights", tmp_path / "init_all.st", *common, tmp_path / "ctc.csv", "--save", tmp_path / "ctc.st")
    assert r.returncode == 0, r.stderr
    ctc_lines = r.stdout.splitlines()
    tl = np.loadtxt(tmp_path / "torch.csv", delimiter=",", skiprows=1)
    cl = np.loadtxt(tmp_path / "ctc.csv", delimiter=",", skiprows=1)
    assert tl.shape == cl.shape == (3 * 7, 3)
    np.testing.assert_allclose(cl, tl, rtol=1e-5, atol=1e-5)
    got, want = saved(tmp_path / "ctc.st"), saved(tmp_path / "torch.st")
    for k in ("fc.weight", "fc.bias"):
        np.testing.assert_allclose(got[k], want[k], rtol=1e-5, atol=1e-5)
    strip = lambda line: re.sub(r", \d+ samples/s", "", line)
    assert [strip(x) for x in ctc_lines] == [strip(x) for x in torch_lines]
