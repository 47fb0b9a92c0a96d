"""Shared helpers for ctc's pytest suite: build ctc, compile a model file with it,
run the generated program, and run the same file under PyTorch (the oracle).

The oracle is PyTorch itself (Debian's python3-torch), loaded from the model
file exactly as a user would run it."""
import contextlib
import fcntl
import importlib.util
import json
import os
import shutil
import struct
import subprocess

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# CTC_BIN runs the suite against another build of ctc, e.g. the sanitizer build:
# CTC_BIN=build/asan/ctc CTC_RUNTIME_DIR=$PWD/runtime_min ASAN_OPTIONS=detect_leaks=0 ./run_tests.sh
CTC = os.path.abspath(os.environ.get("CTC_BIN") or os.path.join(ROOT, "build", "ctc"))
# the bench models (../shared/bench/models; $CTC_BENCH_MODELS where the repository travels alone)
BENCH = os.environ.get("CTC_BENCH_MODELS") or os.path.normpath(os.path.join(ROOT, "..", "shared", "bench", "models"))
EXAMPLES = os.path.join(ROOT, "examples")

# What a user appends to a ../shared/bench model file to train it: the SGD-momentum
# cross-entropy step of ../shared/bench/torch_step.py (bench/bench.py writes the same).
BENCH_TRAIN_STEP = """

model = make_model()
optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)


def train_step(x, y):
    optimizer.zero_grad()
    logits = model(x)
    loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
    loss.backward()
    optimizer.step()
    return loss
"""

_DT = {np.dtype("float32"): "F32", np.dtype("float64"): "F64", np.dtype("int64"): "I64",
       np.dtype("int32"): "I32", np.dtype("bool"): "BOOL", np.dtype("uint8"): "U8", np.dtype("complex64"): "C64",
       np.dtype("float16"): "F16"}
_NP = {v: k for k, v in _DT.items()}


class BF16:
    """A bfloat16 array for st_write (NumPy has no bfloat16): its float32 values, which
    must be bfloat16 numbers (their low 16 bits zero), written as "BF16"."""

    def __init__(self, a):
        self.a = np.ascontiguousarray(np.asarray(a, np.float32))
        assert not (self.a.view(np.uint32) & 0xFFFF).any(), "not bfloat16 values"


def torch2_python(*modules):
    """The Python of PyTorch 2.x (CTC_TORCH2_PYTHON, else bench/.venv's) when it imports torch 2.x and
    `modules`, else None: the optional oracle's tests skip where it is missing or partial (a venv with
    torch from PyPI and no numpy)."""
    py = os.environ.get("CTC_TORCH2_PYTHON") or os.path.join(ROOT, "bench", ".venv", "bin", "python")
    if not os.path.exists(py):
        return None
    code = "import torch\n" + "".join(f"import {m}\n" for m in modules) + "assert int(torch.__version__.split('.')[0]) >= 2"
    try:
        ok = subprocess.run([py, "-c", code], capture_output=True, timeout=300).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        ok = False
    return py if ok else None


@contextlib.contextmanager
def build_lock():
    """Serialises builds in the repository's build/ folder: the suite runs in
    several pytest-xdist workers (run_tests.sh), and two ninja processes must not
    write the same outputs at once."""
    os.makedirs(os.path.join(ROOT, "build"), exist_ok=True)
    with open(os.path.join(ROOT, "build", ".tests.lock"), "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def ninja(*args):
    """`ninja -C ROOT ARGS` under build_lock(); the CompletedProcess."""
    with build_lock():
        return subprocess.run(["ninja", "-C", ROOT, *args], capture_output=True, text=True)


def build_ctc():
    """Build build/ctc with build.ninja (once per session and worker)."""
    r = ninja()
    if r.returncode != 0:
        raise RuntimeError("ninja failed:\n" + r.stdout + r.stderr)


def st_write(path, tensors):
    """Write a safetensors file from {name: np.ndarray} (in dict order)."""
    header, blobs, off = {}, [], 0
    for name, a in tensors.items():
        if isinstance(a, BF16):
            b = (a.a.view(np.uint32) >> 16).astype(np.uint16).tobytes()
            header[name] = {"dtype": "BF16", "shape": list(a.a.shape), "data_offsets": [off, off + len(b)]}
            blobs.append(b)
            off += len(b)
            continue
        a = np.asarray(a)
        b = np.ascontiguousarray(a).tobytes()  # (ascontiguousarray makes a 0-d array 1-d)
        header[name] = {"dtype": _DT[a.dtype], "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def st_dtypes(path):
    """The safetensors dtype of each tensor of a file ("F32", "BF16" ...), in file order."""
    data = open(path, "rb").read()
    (n,) = struct.unpack("<Q", data[:8])
    return {k: d["dtype"] for k, d in json.loads(data[8:8 + n]).items() if k != "__metadata__"}


def st_read(path):
    """Read a safetensors file into {name: np.ndarray}, in file order (a "BF16" tensor as
    its float32 values, exactly; st_dtypes tells them apart)."""
    data = open(path, "rb").read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    base = 8 + n
    out = {}
    for name, d in header.items():
        if name == "__metadata__":
            continue
        b, e = d["data_offsets"]
        if d["dtype"] == "BF16":
            u = np.frombuffer(data[base + b:base + e], dtype=np.uint16).astype(np.uint32) << 16
            out[name] = u.view(np.float32).reshape(d["shape"])
            continue
        out[name] = np.frombuffer(data[base + b:base + e], dtype=_NP[d["dtype"]]).reshape(d["shape"])
    return out


def load_module(path, name="user_model"):
    """Import a model file the way a user runs it under PyTorch."""
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def x86_has_fma():
    """An x86-64 host whose CPU has FMA (a -march=haswell build runs there)."""
    try:
        with open("/proc/cpuinfo") as f:
            return os.uname().machine == "x86_64" and any(l.startswith("flags") and " fma " in l + " " for l in f)
    except OSError:
        return False


# C: |got - want| in units of the last place of the float nearest want (want exact, in double);
# the sweeps of test_embedded.py and test_math_helpers.py measure the math functions with it
ULPS_C = r"""
static double ulps(float got, double want) {
  if (isnan(want)) return isnan(got) ? 0 : INFINITY;
  const float w = (float)want;
  if (isinf(w) || isinf(got)) return got == w ? 0 : INFINITY;
  if (isnan(got)) return INFINITY;
  const float aw = fabsf(w);
  const double u = aw < 1.17549435e-38f ? 1.40129846e-45 : aw == 3.40282347e38f ? 2.028240960365167e31
                                                          : (double)(nextafterf(aw, INFINITY) - aw);
  return fabs((double)got - want) / u;
}
"""


QEMU_A64 = ["qemu-aarch64", "-L", "/usr/aarch64-linux-gnu"]   # runs an aarch64 program (user mode)


def need_tools(*tools):
    """Skips the calling test where one of these programs (a cross compiler, QEMU) is missing."""
    import pytest
    for t in tools:
        if not shutil.which(t):
            pytest.skip(f"{t} is not installed (scripts/install-deps.sh installs the cross toolchains and QEMU)")


def need_aarch64():
    """Skips the calling test unless this is an x86-64 host with aarch64-linux-gnu-gcc and qemu-aarch64."""
    import pytest
    if os.uname().machine != "x86_64":
        pytest.skip("an x86-64 host")
    need_tools("aarch64-linux-gnu-gcc", "qemu-aarch64")


def run(args, cwd=None, timeout=300, check=True, env=None):
    r = subprocess.run([str(a) for a in args], capture_output=True, text=True, cwd=cwd, timeout=timeout, env=env)
    if check and r.returncode != 0:
        raise AssertionError(f"command failed ({r.returncode}): {' '.join(map(str, args))}\n{r.stdout}\n{r.stderr}")
    return r


def ctc_build(model_py, out, *opts):
    """`ctc build` a model file into the program `out`."""
    return run([CTC, "build", model_py, "-o", out, *opts])


def state_dict_np(model):
    return {k: v.detach().cpu().numpy() for k, v in model.state_dict().items()}


def compare(name, got, want, rtol, atol):
    """Assert closeness with a message giving the max abs and rel differences."""
    got = np.asarray(got, dtype=np.float64)
    want = np.asarray(want, dtype=np.float64)
    assert got.shape == want.shape, f"{name}: shape {got.shape} vs torch {want.shape}"
    diff = np.abs(got - want)
    ok = diff <= atol + rtol * np.abs(want)
    if not ok.all():
        i = np.unravel_index(np.argmax(diff - rtol * np.abs(want)), diff.shape)
        raise AssertionError(f"{name}: max abs diff {diff.max():.3g} at {i} (ctc {got[i]!r}, torch {want[i]!r}); "
                             f"{(~ok).sum()} of {ok.size} elements outside rtol={rtol} atol={atol}")
    return float(diff.max())


def run_forward(tmp, model_py, model, inputs, opts=(), exe_name="net"):
    """Build model_py with ctc, load the torch model's weights by state_dict
    name, run forward on inputs (list of np arrays), return the outputs."""
    exe = os.path.join(tmp, exe_name)
    ctc_build(model_py, exe, *opts)
    w = os.path.join(tmp, "weights.safetensors")
    st_write(w, state_dict_np(model))
    args = [exe, "infer", "--weights", w]
    for i, x in enumerate(inputs):
        p = os.path.join(tmp, f"in{i}.npy")
        np.save(p, x)
        args += ["--input", p]
    info = run([exe, "info"]).stdout
    nout = _count_outputs(info)
    outs = [os.path.join(tmp, f"out{i}.npy") for i in range(nout)]
    for o in outs:
        args += ["--output", o]
    run(args)
    return [np.load(o) for o in outs]


def run_entry(tmp, exe, entry, arrays, nout):
    """Run one entry of a built program on numpy inputs (`./net run ENTRY`, or
    `./net infer` for forward); returns its nout outputs as numpy arrays."""
    args = [exe, "run", entry] if entry != "forward" else [exe, "infer", "--random-weights"]
    for i, a in enumerate(arrays):
        p = os.path.join(tmp, f"{entry}_in{i}.npy")
        np.save(p, a)
        args += ["--input", p]
    outs = [os.path.join(tmp, f"{entry}_out{i}.npy") for i in range(nout)]
    for o in outs:
        args += ["--output", o]
    run(args)
    return [np.load(o) for o in outs]


def train_steps_match(tmp, exe, mod, w, batches, name, rtol=1e-3, atol=1e-5):
    """Runs `./exe run train_step` on each batch (a tuple of its input arrays: (x, y), ...) from
    the weights file w (the state carried through --save --save-training-state) and
    mod.train_step on the same batches under PyTorch: each step's loss, then every state_dict
    tensor, must agree."""
    import torch   # the oracle (imported here: the helpers above run without it)
    for step, batch in enumerate(batches):
        ins = []
        for i, a in enumerate(batch):
            np.save(os.path.join(tmp, f"t{i}.npy"), a)
            ins += ["--input", os.path.join(tmp, f"t{i}.npy")]
        nxt = os.path.join(tmp, f"w{step + 1}.safetensors")
        run([exe, "run", "train_step", "--weights", w] + ins + ["--output", os.path.join(tmp, "loss.npy"), "--save", nxt,
                                                                "--save-training-state"])
        lt = float(mod.train_step(*[torch.from_numpy(a) for a in batch]))
        compare(f"{name} loss at step {step}", float(np.load(os.path.join(tmp, "loss.npy"))), lt, 1e-4, 1e-6)
        w = nxt
    got = st_read(w)
    for k, v in mod.model.state_dict().items():
        compare(f"{name} {k} after {len(batches)} steps", got[k], v.numpy(), rtol, atol)


def _count_outputs(info):
    """Number of outputs of the first entry, from `./net info`
    ("entry forward: 1 input, 2 outputs")."""
    import re
    m = re.search(r"^entry \S+: \d+ inputs?, (\d+) outputs?", info, re.M)
    assert m, info
    return int(m.group(1))


# A small MLP file with a forward and an SGD-momentum train_step (example_inputs for
# both): the model the tool tests (profile, dot, embedding) build.
MLP_TRAIN_SRC = '''
import torch
import torch.nn as nn
import torch.nn.functional as F


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(20, 32)
        self.fc2 = nn.Linear(32, 4)

    def forward(self, x):
        h = torch.tanh(self.fc1(x))
        return self.fc2(h)


model = Net()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
example_inputs = {"forward": (torch.randn(8, 20),), "train_step": (torch.randn(8, 20), torch.zeros(8, dtype=torch.long))}


def train_step(x, y):
    optimizer.zero_grad()
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()
    return loss
'''
