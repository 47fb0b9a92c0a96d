"""Every file reader of the runtime and of `ctc convert` (issue 27 items 11 and
12): given /dev/zero, a fifo, a directory, a truncated file or a header that
promises more than the file holds, it stops at once with a message naming the
file and what is wrong and a non-zero exit, never reading until memory runs
out (each run has a timeout and a 2 GB address-space limit). A tensor name with
a NUL byte is refused naming the file and the name, escaped."""
import gzip
import json
import os
import struct
import subprocess

import numpy as np
import pytest
import torch

from ctc_testlib import CTC, ctc_build, st_write

LIMIT_KB = 2_000_000   # ulimit -v: no reader may allocate gigabytes
TIMEOUT = 20

MLP = """import torch
import torch.nn as nn
import torch.nn.functional as F

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 3)

    def forward(self, x):
        return self.fc(x)

model = Net()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)

def train_step(x, y):
    optimizer.zero_grad()
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()
    return loss
"""

# The smallest model that trains on text: token windows x, y i64[2, 4].
LM = """import torch
import torch.nn as nn
import torch.nn.functional as F

class LM(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(8, 8)

    def forward(self, x):
        return self.emb(x)

model = LM()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)

def train_step(x, y):
    optimizer.zero_grad()
    logits = model(x)
    loss = F.cross_entropy(logits.reshape(-1, 8), y.reshape(-1))
    loss.backward()
    optimizer.step()
    return loss
"""


@pytest.fixture(scope="module")
def exes(tmp_path_factory):
    d = tmp_path_factory.mktemp("bounded")
    (d / "mlp.py").write_text(MLP)
    (d / "lm.py").write_text(LM)
    ctc_build(str(d / "mlp.py"), str(d / "mlp"), "--input", "x=f32[2,4]", "--input", "y=i64[2]")
    ctc_build(str(d / "lm.py"), str(d / "lm"), "--input", "x=i64[2,4]", "--input", "y=i64[2,4]")
    return {"mlp": str(d / "mlp"), "lm": str(d / "lm")}


def limited(args):
    """args under `ulimit -v` and a timeout: the CompletedProcess."""
    cmd = "ulimit -v %d; exec \"$@\"" % LIMIT_KB
    return subprocess.run(["bash", "-c", cmd, "limited", *[str(a) for a in args]], capture_output=True, text=True,
                          timeout=TIMEOUT)


def refused(args, *msgs):
    r = limited(args)
    assert r.returncode != 0, r.stdout + r.stderr
    for m in msgs:
        assert m in r.stderr, r.stderr
    return r


# ---- files that are not files ---------------------------------------------------------

NOT_FILES = {
    "dev_zero": (lambda t: "/dev/zero", "/dev/zero: is a character device"),
    "directory": (lambda t: str(t), ": is a directory"),
    "fifo": (lambda t: (os.mkfifo(t / "fifo"), str(t / "fifo"))[1], "fifo: is a fifo (pipe)"),
}

# (program, its arguments with {} for the file)
READERS = {
    "infer_input_npy": ("mlp", ["infer", "--random-weights", "--input", "{}"]),
    "infer_weights": ("mlp", ["infer", "--weights", "{}", "--input", "{x}"]),
    "train_data": ("mlp", ["train", "--data", "{}", "--labels", "{y}", "--epochs", "1"]),
    "train_labels": ("mlp", ["train", "--data", "{x}", "--labels", "{}", "--epochs", "1"]),
    "train_text": ("lm", ["train", "--text", "{}", "--steps", "1"]),
    "train_tokens": ("lm", ["train", "--tokens", "{}", "--steps", "1"]),
    "convert": ("ctc", ["convert", "{}", "-o", "{out}"]),
}


def command(exes, tmp_path, reader, path):
    prog, args = READERS[reader]
    np.save(tmp_path / "x.npy", np.ones((2, 4), np.float32))
    np.save(tmp_path / "y.npy", np.zeros(2, np.int64))
    sub = {"x": tmp_path / "x.npy", "y": tmp_path / "y.npy", "out": tmp_path / "out.safetensors"}
    args = [str(path) if a == "{}" else str(sub[a[1:-1]]) if a.startswith("{") else a for a in args]
    return [CTC if prog == "ctc" else exes[prog], *args]


@pytest.mark.parametrize("kind", NOT_FILES)
@pytest.mark.parametrize("reader", READERS)
def test_not_a_regular_file(exes, tmp_path, reader, kind):
    make, msg = NOT_FILES[kind]
    d = tmp_path / "d"
    d.mkdir()
    refused(command(exes, tmp_path, reader, make(d)), msg, "regular files only")


# ---- truncated files and headers that promise too much ----------------------------------

def npy_promising(path, shape):
    np.save(path, np.zeros(2, np.float32))
    b = path.read_bytes()
    path.write_bytes(b.replace(b"'shape': (2,)", ("'shape': (%s)" % shape).encode().ljust(13)))


def idx(shape, data, code=0x08):
    return bytes([0, 0, code, len(shape)]) + b"".join(struct.pack(">I", s) for s in shape) + data


def st_header(header, data=b""):
    h = json.dumps(header).encode()
    return struct.pack("<Q", len(h)) + h + data


BAD_FILES = {
    "npy_truncated": (lambda p: p.write_bytes(open_npy(p)[:-3]), "infer_input_npy",
                      "file is truncated: f32 [2, 4] needs 32 bytes of data, found 29"),
    "npy_promise": (lambda p: npy_promising(p, "1000000000000,"), "infer_input_npy",
                    "needs 4000000000000 bytes of data"),
    "idx_truncated": (lambda p: p.write_bytes(idx([10, 4], bytes(7))), "train_data",
                      "IDX file is truncated"),
    "idx_promise": (lambda p: p.write_bytes(idx([60000, 60000], bytes(16))), "train_data",
                    "IDX file is truncated: u8 [60000, 60000] needs 3600000000 bytes of data, found 16"),
    "idx_gz_promise": (lambda p: p.write_bytes(gzip.compress(idx([60000, 60000], bytes(4096)))), "train_data",
                       "its header promises [60000, 60000] data (3600000000 bytes), more than a gzipped file of"),
    "idx_gz_truncated": (lambda p: p.write_bytes(gzip.compress(idx([60, 60], bytes(4096)))[:-20]), "train_data",
                         "cannot decompress"),
    "st_truncated": (lambda p: (st_write(p, {"fc.weight": np.ones((3, 4), np.float32)}),
                                p.write_bytes(p.read_bytes()[:-5])), "convert", "truncated"),
    "st_header_promise": (lambda p: p.write_bytes(struct.pack("<Q", 1 << 40) + b"{}"), "convert",
                          "header length 1099511627776 is larger than the rest of the file (2 bytes)"),
    "st_offsets_promise": (lambda p: p.write_bytes(st_header({"w": {"dtype": "F32", "shape": [1 << 30],
                                                                 "data_offsets": [0, 1 << 32]}}, bytes(8))),
                           "convert", "tensor 'w': data_offsets end 4294967296 is beyond the end of the data (8 bytes)"),
    "pt_truncated": (lambda p: (torch.save({"w": torch.ones(100)}, p), p.write_bytes(p.read_bytes()[:200])),
                     "convert", "truncated"),
    "pt_legacy_promise": (lambda p: legacy_promising(p), "convert", "truncated"),
    "tokens_odd": (lambda p: p.write_bytes(bytes(9)), "train_tokens", "9 bytes is not a whole number of uint16"),
}


def open_npy(p):
    np.save(p, np.ones((2, 4), np.float32))
    return p.read_bytes()


def legacy_promising(p):
    """A legacy (pre-zip) checkpoint whose storage says it holds 2^40 floats."""
    torch.save({"w": torch.ones(2)}, p, _use_new_zipfile_serialization=False)
    b = p.read_bytes()
    rec = struct.pack("<q", 2) + struct.pack("<2f", 1, 1)
    assert b.count(rec) == 1
    p.write_bytes(b.replace(rec, struct.pack("<q", 1 << 40) + struct.pack("<2f", 1, 1)))


@pytest.mark.parametrize("case", BAD_FILES)
def test_truncated_or_overpromising(exes, tmp_path, case):
    make, reader, msg = BAD_FILES[case]
    name = {"convert": "in.pt" if case.startswith("pt") else "in.safetensors",
            "infer_input_npy": "in.npy"}.get(reader, "in.bin")
    p = tmp_path / name
    make(p)
    r = refused(command(exes, tmp_path, reader, p), msg)
    assert str(p) in r.stderr or name in r.stderr


# ---- names with a NUL byte ------------------------------------------------------------

def nul_checkpoints(tmp_path):
    zip_pt, legacy_pt, st = tmp_path / "nul.pt", tmp_path / "nul_legacy.pt", tmp_path / "nul.safetensors"
    sd = {"a\x00b": torch.ones(2), "c": torch.zeros(1)}
    torch.save(sd, zip_pt)
    torch.save(sd, legacy_pt, _use_new_zipfile_serialization=False)
    try:
        from safetensors.torch import save_file
        save_file(sd, str(st))
    except ImportError:   # the header as the safetensors library writes it (JSON's \u0000)
        st.write_bytes(st_header({"a\x00b": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                                  "c": {"dtype": "F32", "shape": [1], "data_offsets": [8, 12]}}, bytes(12)))
    assert b"a\\u0000b" in st.read_bytes() or b"a\x00b" in st.read_bytes()
    return [zip_pt, legacy_pt, st]


@pytest.mark.parametrize("out", ["o.safetensors", "o.pt"])
def test_nul_in_tensor_name_is_refused(tmp_path, out):
    for src in nul_checkpoints(tmp_path):
        r = subprocess.run([CTC, "convert", src, "-o", tmp_path / out], capture_output=True, text=True,
                           timeout=TIMEOUT)
        assert r.returncode == 1, r.stderr
        assert f"{src}: tensor name 'a\\x00b' contains a NUL byte" in r.stderr, r.stderr
        assert not (tmp_path / out).exists()


def test_nul_in_tensor_name_refused_by_program(exes, tmp_path):
    src = nul_checkpoints(tmp_path)[0]
    np.save(tmp_path / "x.npy", np.ones((2, 4), np.float32))
    r = limited([exes["mlp"], "infer", "--weights", src, "--input", tmp_path / "x.npy"])
    assert r.returncode != 0 and "tensor name 'a\\x00b' contains a NUL byte" in r.stderr, r.stderr
