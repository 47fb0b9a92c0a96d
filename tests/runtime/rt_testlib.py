"""Helpers for the runtime tests: building the fake model, a hand-written
safetensors reader/writer (the safetensors package is not required), and
running the fake program."""
import json
import os
import shutil
import struct
import subprocess

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
RT_DIR = os.path.join(REPO, "runtime_min")
RT_SOURCES = [os.path.join(RT_DIR, f) for f in
              ("rt_error.c", "rt_safetensors.c", "rt_npy.c", "rt_model.c", "rt_driver.c", "rt_train.c", "rt_gradcheck.c",
                        "rt_data.c", "rt_pt.c", "rt_profile.c", "rt_text.c")]
LIB = os.path.join(REPO, "build", "libctc_rt.a")
FAKE_SRC = os.path.join(HERE, "fake_model.c")
CC = os.environ.get("CC", "cc")
# The flags build.ninja uses for ctc's own code.
CFLAGS = ["-std=c11", "-O2", "-Wall", "-Wextra", "-Werror", "-Wno-unused-parameter",
          "-D_POSIX_C_SOURCE=200809L", "-D_DEFAULT_SOURCE"]

# ---- building -----------------------------------------------------------------


def lib_is_fresh():
    """build/libctc_rt.a exists and is newer than every runtime source."""
    if not os.path.exists(LIB):
        return False
    newest = max(os.path.getmtime(p) for p in RT_SOURCES + [os.path.join(RT_DIR, h) for h in ("ctc_rt.h", "rt_driver_int.h")])
    return os.path.getmtime(LIB) >= newest


def compile_c(out, sources, extra=()):
    cmd = [CC, *CFLAGS, *extra, "-I", RT_DIR, *sources, "-o", str(out), "-lz", "-lm"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    assert r.returncode == 0, f"compile failed: {' '.join(cmd)}\n{r.stderr}"
    return str(out)


def build_fake(outdir, extra=(), use_lib=True):
    """Compiles fake_model.c against build/libctc_rt.a (when up to date) or the
    runtime sources, into outdir."""
    out = os.path.join(str(outdir), "fake")
    if use_lib and lib_is_fresh() and not extra:
        return compile_c(out, [FAKE_SRC, LIB])
    return compile_c(out, [FAKE_SRC, *RT_SOURCES], extra)


# ---- safetensors by hand ----------------------------------------------------------

ST_DTYPES = {np.dtype(np.float32): "F32", np.dtype(np.float64): "F64", np.dtype(np.int64): "I64",
             np.dtype(np.int32): "I32", np.dtype(np.bool_): "BOOL", np.dtype(np.uint8): "U8"}
ST_NP = {v: k for k, v in ST_DTYPES.items()}


def st_header(tensors):
    """The header dict and data bytes for [(name, array), ...]."""
    header, data = {}, b""
    for name, arr in tensors:
        arr = np.asarray(arr)  # (ascontiguousarray would make 0-d arrays 1-d)
        raw = arr.astype(arr.dtype.newbyteorder("<")).tobytes()
        header[name] = {"dtype": ST_DTYPES[arr.dtype], "shape": list(arr.shape),
                        "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    return header, data


def st_pack(header_text, data=b"", pad=True, length=None):
    """Assembles a file from header text (str or bytes) and data."""
    h = header_text.encode() if isinstance(header_text, str) else header_text
    if pad:
        h += b" " * (-len(h) % 8)
    n = len(h) if length is None else length
    return struct.pack("<Q", n) + h + data


def st_bytes(tensors, metadata=None):
    header, data = st_header(tensors)
    if metadata is not None:
        header = {"__metadata__": metadata, **header}
    return st_pack(json.dumps(header), data)


def st_write(path, tensors, metadata=None):
    with open(path, "wb") as f:
        f.write(st_bytes(tensors, metadata))


def st_read(path):
    """Returns (header_len, ordered list of names, {name: array}), checking the layout."""
    with open(path, "rb") as f:
        buf = f.read()
    (n,) = struct.unpack("<Q", buf[:8])
    header = json.loads(buf[8:8 + n].decode("utf-8"))
    data = buf[8 + n:]
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        b, e = info["data_offsets"]
        arr = np.frombuffer(data[b:e], dtype=ST_NP[info["dtype"]]).reshape(info["shape"])
        out[name] = arr.copy()
    return n, [k for k in header if k != "__metadata__"], out


# ---- running ------------------------------------------------------------------------


def run(exe, *args, cwd=None, env=None, timeout=30):
    e = dict(os.environ)
    e.setdefault("CTC_NO_REEXEC", "1")
    if env:
        e.update(env)
    return subprocess.run([exe, *map(str, args)], capture_output=True, text=True, cwd=cwd, env=e,
                          timeout=timeout)


def have(cmd):
    return shutil.which(cmd) is not None


# The fake model's parameters as initialised by fake_init.
INIT_W = np.array([[0.25 * (i + 1) - 0.125 * j for j in range(4)] for i in range(3)], np.float32)
INIT_B = np.arange(3, dtype=np.float32)
INIT_STEPS = np.int64(7)


def random_weights(seed=0):
    rng = np.random.default_rng(seed)
    return [("fc.weight", rng.standard_normal((3, 4)).astype(np.float32)),
            ("fc.bias", rng.standard_normal(3).astype(np.float32)),
            ("steps", np.array(3, dtype=np.int64))]
