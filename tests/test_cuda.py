"""The CUDA target (`ctc compile --target cuda -o model.cu`), without a GPU.

- The generated .cu compiles with nvcc for sm_80 and sm_90 with every warning an
  error, host and device (skipped, with the reason, when nvcc is missing).
- Under runtime_min/cuda_emu/ctc_cuda_emu.h (CUDA on the CPU: kernels block by
  block, a block's threads fibers that meet at __syncthreads, cuBLAS as loops) the
  generated program,
  built with g++ around the runtime's driver, gives the C target's forward outputs,
  loss and updated parameters after one SGD-momentum step (rtol 1e-5) and
  PyTorch's (rtol 1e-4), for the bench MLP and LeNet and a tiny GPT (layer norm,
  softmax over a causal mask, tanh GELU, batched GEMMs over folded head views)."""
import os
import re

import numpy as np
import pytest
import torch

from ctc_testlib import BENCH, BENCH_TRAIN_STEP, CTC, compare, load_module, run, st_read, st_write, state_dict_np
from cuda_testlib import NVCC, RT, emulated, run_env, rt_objects  # noqa: F401 (a fixture)


def _gpt_tiny():
    src = open(os.path.join(BENCH, "gpt.py")).read()
    for a, b in [("VOCAB = 256", "VOCAB = 64"), ("BLOCK = 128", "BLOCK = 16"), ("N_LAYER = 4", "N_LAYER = 1"),
                 ("N_HEAD = 4", "N_HEAD = 2"), ("N_EMBD = 256", "N_EMBD = 32")]:
        assert a in src, a
        src = src.replace(a, b)
    return src


# The data-movement ops the CUDA target runs over GPU threads: pad (constant and reflect),
# bilinear upsample, gather (their kernel IR: a thread per element), cumsum, argmax (a
# thread per fiber along the axis), and in the train step their gradients (reflect's
# pad_bwd over its unpadded leading axes, gather's scatter-add a thread per fiber).
DATAOPS = """
import torch
import torch.nn as nn
import torch.nn.functional as F


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(3, 8, 8) * 0.5 + 1.0)
        self.fc = nn.Linear(3 * 20 * 20, 10)

    def forward(self, x):
        h = F.pad(F.pad(x * self.w, (1, 1, 1, 0), mode="reflect"), (0, 0, 1, 0))
        h = F.interpolate(h, scale_factor=2.0, mode="bilinear", align_corners=False)
        h = torch.cumsum(h, dim=-1) * 0.05
        logits = self.fc(h.reshape(h.shape[0], -1))
        k = torch.argmax(logits, dim=1, keepdim=True)
        return logits + torch.gather(logits, 1, k) * 0.5


def make_model():
    return Net()
"""

# Convolutions of every kind cuDNN and the im2col code must agree on: strided, padded,
# dilated, grouped, depthwise, 1x1, and transposed with output_padding.
CONVS = """
import torch
import torch.nn as nn
import torch.nn.functional as F


class Convs(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Conv2d(3, 8, 3, stride=2, padding=1)
        self.b = nn.Conv2d(8, 8, 3, padding=2, dilation=2, groups=2)
        self.c = nn.Conv2d(8, 8, 3, padding=1, groups=8, bias=False)
        self.d = nn.Conv2d(8, 4, 1)
        self.up = nn.ConvTranspose2d(4, 4, 3, stride=2, padding=1, output_padding=1)
        self.fc = nn.Linear(4 * 10 * 10, 10)

    def forward(self, x):
        x = F.relu(self.a(x))
        x = F.relu(self.b(x))
        x = self.d(self.c(x))
        x = torch.tanh(self.up(x))
        return self.fc(x.flatten(1))


def make_model():
    return Convs()
"""

# Sums and maxima of few results over many elements (a block of 256 threads per 8 results,
# ctc_part's partials added in order), whose gradient is another: g's gradient sums 160
# elements per result, as a bias's gradient sums a batch's rows.
REDUCE = """
import torch
import torch.nn as nn
import torch.nn.functional as F


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.g = nn.Parameter(torch.rand(3, 12) + 0.5)
        self.fc = nn.Linear(12, 10)

    def forward(self, x):
        h = torch.tanh(x * self.g[:, None, :])
        per_sample = h.sum(dim=2).mean(dim=1)
        m = h.amax(dim=(0, 2))
        return self.fc(per_sample) + m.sum() * 0.1


def make_model():
    return Net()
"""

# An embedding whose gradient runs a thread per column and slice of 3 vocabulary rows
# (5000 rows of 16), with repeated indices (added in index order) and a padding_idx.
EMBED = """
import torch
import torch.nn as nn
import torch.nn.functional as F


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(5000, 16, padding_idx=3)
        self.fc = nn.Linear(16, 10)

    def forward(self, x):
        return self.fc(self.emb(x).mean(dim=1))


def make_model():
    return Net()
"""

# BatchNorm in training (its statistics over N, H and W and their gradients) around a residual
# block, and in `run forward` its running statistics (inference).
BNORM = """
import torch
import torch.nn as nn
import torch.nn.functional as F


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(8)
        self.conv2 = nn.Conv2d(8, 8, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(8)
        self.fc = nn.Linear(8, 10)

    def forward(self, x):
        h = F.relu(self.bn1(self.conv1(x)))
        h = F.relu(self.bn2(self.conv2(h)) + h)
        return self.fc(F.adaptive_avg_pool2d(h, 1).flatten(1))


def make_model():
    return Net()
"""

# name -> (source, forward's input name, x, y)
MODELS = {
    "dataops": (lambda: DATAOPS, "x", lambda r: r.standard_normal((4, 3, 8, 8)).astype(np.float32),
                lambda r: r.integers(0, 10, 4)),
    "mlp": (lambda: open(os.path.join(BENCH, "mlp.py")).read(), "x",
            lambda r: r.standard_normal((8, 1, 28, 28)).astype(np.float32), lambda r: r.integers(0, 10, 8)),
    "lenet": (lambda: open(os.path.join(BENCH, "lenet.py")).read(), "t",
              lambda r: r.standard_normal((4, 1, 28, 28)).astype(np.float32), lambda r: r.integers(0, 10, 4)),
    "gpt_tiny": (_gpt_tiny, "idx", lambda r: r.integers(0, 64, (2, 16)), lambda r: r.integers(0, 64, (2, 16))),
    "convs": (lambda: CONVS, "x", lambda r: r.standard_normal((3, 3, 10, 10)).astype(np.float32),
              lambda r: r.integers(0, 10, 3)),
    "embed": (lambda: EMBED, "x", lambda r: np.where(r.random((8, 12)) < 0.2, 3, r.integers(0, 40, (8, 12)) * 125 + 1),
              lambda r: r.integers(0, 10, 8)),
    "reduce": (lambda: REDUCE, "x", lambda r: r.standard_normal((4, 3, 40, 12)).astype(np.float32),
               lambda r: r.integers(0, 10, 4)),
    "bnorm": (lambda: BNORM, "x", lambda r: r.standard_normal((4, 3, 10, 10)).astype(np.float32),
              lambda r: r.integers(0, 10, 4)),
}


def _spec(name, a):
    dt = "i64" if a.dtype == np.int64 else "f32"
    return f"{name}={dt}[{','.join(map(str, a.shape))}]"


def _write_model(tmp, name):
    src, xname, mkx, mky = MODELS[name]
    rng = np.random.default_rng(0)
    x, y = mkx(rng), mky(rng).astype(np.int64)
    path = tmp / f"{name}.py"
    path.write_text(src() + BENCH_TRAIN_STEP)
    specs = ["--input", _spec("x", x), "--input", _spec("y", y)]
    if xname != "x":
        specs += ["--input", _spec(xname, x)]
    return path, x, y, specs


def _forward_and_step(tmp, exe, tag, w, **env):
    """`run forward` and `run train_step` from the weights w on tmp's x.npy and y.npy: the
    output, the loss, the parameters after the step, and what the program printed."""
    out, loss, saved = (tmp / f"{tag}_{n}" for n in ("out.npy", "loss.npy", "w.safetensors"))
    r1 = run_env([exe, "run", "forward", "--weights", w, "--input", tmp / "x.npy", "--output", out], **env)
    r2 = run_env([exe, "run", "train_step", "--weights", w, "--input", tmp / "x.npy", "--input", tmp / "y.npy",
                  "--output", loss, "--save", saved, "--save-training-state"], **env)
    return np.load(out), np.load(loss), st_read(str(saved)), r1.stderr + r2.stderr


@pytest.mark.parametrize("name", sorted(MODELS))
def test_emulated_matches_c_target_and_torch(tmp_path, name, rt_objects):
    """Forward and one SGD-momentum train step: the emulated CUDA program against
    the C target (rtol 1e-5) and PyTorch (rtol 1e-4), from PyTorch's initial weights."""
    path, x, y, specs = _write_model(tmp_path, name)
    cu, emu = emulated(tmp_path, path, specs, rt_objects)
    code = cu.read_text()
    assert "__global__" in code and ("cublasSgemm" in code)
    if name == "dataops":   # the data-movement ops and their gradients on GPU threads, none on one thread
        serial = re.findall(r"one thread: .*\n(?:[^\n]*\n)*?    /\* dataops\.py:\d+  (\w+)\(", code)
        assert serial == [], serial
        for op in ("pad(", "upsample(", "cumsum(", "argmax(", "gather(", "pad_bwd(", "scatter_add("):
            assert re.search(r"grid-stride\) \*/\n[^\n]*\n(?:  [^\n]*\n)*?    /\* dataops\.py:\d+  " + re.escape(op), code), op
    if name == "embed":   # the vocabulary in slices of 3 rows, a thread per column and slice
        assert "ctc_v0 = ctc_i / 16 * 3;" in code and "/* padding_idx: no gradient */" in code
    if name == "reduce":   # the max over (0, 2) and g's gradient, a block per 8 results
        split = re.findall(r"/\* reduce\.py:\d+  (reduce_\w+)\(.*\n/\* a block of 256 threads per 8 results", code)
        assert "reduce_max" in split and "reduce_sum" in split, split
    cexe = tmp_path / "m_c"
    run([CTC, "build", path, "-o", cexe, *specs], timeout=600)
    mod = load_module(str(path), "cuda_" + name)
    w = tmp_path / "w.safetensors"
    st_write(w, state_dict_np(mod.model))
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", y)
    (go, gl, gw, _), (co, cl, cw, _) = (_forward_and_step(tmp_path, exe, tag, w) for tag, exe in (("cuda", emu), ("c", cexe)))
    compare(f"{name} forward vs C", go, co, 1e-5, 1e-6)
    compare(f"{name} loss vs C", gl, cl, 1e-5, 1e-6)
    assert gw.keys() == cw.keys()
    for k in cw:
        compare(f"{name} {k} after a step vs C", gw[k], cw[k], 1e-5, 1e-6)
    mod.model.eval()   # `run forward` is inference (BatchNorm's running statistics); the step trains
    with torch.no_grad():
        want = mod.model(torch.from_numpy(x)).numpy()
    mod.model.train()
    compare(f"{name} forward vs torch", go, want, 1e-4, 1e-5)
    loss_t = float(mod.train_step(torch.from_numpy(x), torch.from_numpy(y)))
    compare(f"{name} loss vs torch", gl, np.float32(loss_t), 1e-4, 1e-5)
    for k, v in mod.model.state_dict().items():
        compare(f"{name} {k} after a step vs torch", gw[k], v.numpy(), 1e-4, 1e-5)


@pytest.mark.skipif(NVCC is None, reason="nvcc not found (the CUDA toolkit is not installed)")
@pytest.mark.parametrize("name", ["lenet", "lenet+cudnn", "gpt_tiny", "dataops", "reduce", "embed"])
def test_nvcc_compiles_clean(tmp_path, name):
    """nvcc -c for sm_80 and sm_90: no warning, host (-Wall -Wextra) or device; lenet also
    with -DCTC_HAVE_CUDNN against the toolkit's cudnn.h (when it has one)."""
    dnn = []
    if name.endswith("+cudnn"):
        name = name[:-6]
        if not os.path.exists(os.path.join(os.path.dirname(os.path.dirname(NVCC)), "include", "cudnn.h")):
            pytest.skip("cudnn.h is not in the CUDA toolkit's include folder")
        dnn = ["-DCTC_HAVE_CUDNN"]
    path, _, _, specs = _write_model(tmp_path, name)
    cu = tmp_path / "m.cu"
    run([CTC, "compile", path, "--target", "cuda", "-o", cu, *specs])
    run([NVCC, "-c", *dnn, "-gencode", "arch=compute_80,code=sm_80", "-gencode", "arch=compute_90,code=sm_90",
         "-Werror", "all-warnings", "-Xcompiler", "-Wall,-Wextra,-Werror", "-I", RT, cu, "-o", tmp_path / "m.o"],
        timeout=600)


def test_every_device_call_is_checked(tmp_path):
    """Every CUDA and cuBLAS call of the generated host code is inside CTC_CUDA or
    CTC_CUBLAS (or a launch, which checks cudaGetLastError), except in _free."""
    path, _, _, specs = _write_model(tmp_path, "lenet")
    cu = tmp_path / "m.cu"
    run([CTC, "compile", path, "--target", "cuda", "-o", cu, *specs])
    code = cu.read_text()
    body = code[code.index("int network_init("):]
    free_fn = re.search(r"void network_free\(.*?\n}\n", body, re.S).group(0)
    body = body.replace(free_fn, "")
    for line in body.splitlines():
        if re.search(r"\b(cuda[A-Z]\w*|cublas[A-Z]\w*|ctc_gemm_\w+)\(", line) and "#define" not in line:
            assert re.search(r"CTC_(CUDA|CUBLAS)\(", line), line
    assert "CTC_LAUNCH(ctc_im2col_f32" in code and "CTC_LAUNCH(network_forward_k" in code
    # the kernels carry the model lines
    assert re.search(r"/\* lenet\.py:\d+  conv2d\(", code)


def test_tf32_only_when_asked(tmp_path):
    path, _, _, specs = _write_model(tmp_path, "mlp")
    for opts, want in (([], False), (["--tf32"], True)):
        cu = tmp_path / "m.cu"
        run([CTC, "compile", path, "--target", "cuda", "-o", cu, *specs, *opts])
        assert ("CUBLAS_TF32_TENSOR_OP_MATH" in cu.read_text()) == want


def test_cli(tmp_path):
    path, _, _, specs = _write_model(tmp_path, "mlp")
    r = run([CTC, "--help"], check=False)
    assert "--target c|cuda" in r.stdout + r.stderr
    r = run([CTC, "compile", path, "--emulate", "-o", tmp_path / "m.c", *specs], check=False)
    assert r.returncode == 1 and "--emulate goes with 'build --target cuda'" in r.stderr
    r = run([CTC, "compile", path, "--target", "metal", "-o", tmp_path / "m.c", *specs], check=False)
    assert r.returncode == 1 and "unknown --target 'metal'" in r.stderr
    run([CTC, "compile", path, "--target", "cuda", "-o", tmp_path / "net.cu", *specs])
    assert (tmp_path / "net.h").exists() and "cudaStream_t stream" in (tmp_path / "net.h").read_text()
    # C-target features the CUDA emitter does not have yet are refused, never silently dropped
    for opts, what in ((["--profile"], "--profile"), (["--anomaly"], "--anomaly")):
        r = run([CTC, "compile", path, "--target", "cuda", "-o", tmp_path / "x.cu", *specs, *opts], check=False)
        assert r.returncode == 1 and f"{what} is not supported with --target cuda yet" in r.stderr, r.stderr
    # --distributed nccl and DistributedDataParallel with --target cuda: tests/test_nccl.py


def test_build_emulate(tmp_path):
    """`ctc build --target cuda --emulate`: the driver program on the CPU, the C
    target's outputs."""
    path, x, y, specs = _write_model(tmp_path, "mlp")
    np.save(tmp_path / "x.npy", x)
    outs = {}
    for tag, opts in (("cuda", ["--target", "cuda", "--emulate"]), ("c", [])):
        exe = tmp_path / f"net_{tag}"
        run([CTC, "build", path, "-o", exe, *specs, *opts], timeout=600)
        run_env([exe, "run", "forward", "--input", tmp_path / "x.npy", "--output", tmp_path / f"{tag}.npy"])
        outs[tag] = np.load(tmp_path / f"{tag}.npy")
    assert (tmp_path / "net_cuda.cu").exists() and (tmp_path / "net_cuda.h").exists()
    compare("build --emulate vs C", outs["cuda"], outs["c"], 1e-5, 1e-6)




# Gradients of the resampling ops alone (no GEMM between them and the result): nearest and
# bilinear upsampling up and down, reflect and replicate padding over one, two and three axes,
# one whose leading axes are all of size 1, and average pooling with padding (its windows
# found from the position, no longer by a scan over every output row).
RESAMPLE_GRADS = """
import torch
import torch.nn as nn
import torch.nn.functional as F


class Net(nn.Module):
    def forward(self, x):
        return x


model = Net()


def g_up(x, p):
    y = (F.interpolate(x, scale_factor=2) + F.interpolate(x, size=(10, 12), mode="bilinear", align_corners=True)
         + F.interpolate(x, scale_factor=2, mode="bilinear"))
    return torch.autograd.grad((y * p).sum(), [x])[0]


def g_resize(x):
    y = (F.interpolate(x, scale_factor=1.5).pow(2).sum() + F.interpolate(x, size=(4, 7), mode="bilinear").pow(2).sum()
         + F.interpolate(x, scale_factor=(0.5, 2.5), mode="bilinear").pow(2).sum()
         + F.interpolate(x, size=(3, 17)).pow(2).sum())
    return torch.autograd.grad(y, [x])[0]


def g_pad(x):
    y = (F.pad(x, (1, 2, 2, 0), mode="reflect").pow(2).sum() + F.pad(x, (4, 3, 3, 4), mode="replicate").pow(3).sum()
         + F.pad(x.reshape(6, 5, 6), (2, 1), mode="replicate").pow(2).sum()
         + F.pad(x, (1, 1, 1, 1, 1, 1), mode="replicate").pow(2).sum()
         + F.pad(x[:1, :1], (1, 2, 2, 1), mode="reflect").pow(3).sum())
    return torch.autograd.grad(y, [x])[0]


def g_pool(x):
    y = (F.avg_pool2d(x, 2).pow(2).sum() + F.avg_pool2d(x, 3, stride=2, padding=1).pow(2).sum()
         + F.avg_pool2d(x, 3, stride=2, padding=1, count_include_pad=False).pow(2).sum())
    return torch.autograd.grad(y, [x])[0]


example_inputs = {"forward": (torch.zeros(1, 1),), "g_up": (torch.zeros(2, 2, 5, 6), torch.zeros(2, 2, 10, 12)),
                  "g_resize": (torch.zeros(2, 2, 5, 6),), "g_pad": (torch.zeros(2, 3, 5, 6),),
                  "g_pool": (torch.zeros(2, 3, 9, 11),)}
"""


def test_resample_gradients_on_threads_bit_for_bit(tmp_path, rt_objects):
    """The gradients of upsampling and of reflect/replicate padding on the GPU: a thread per
    element of dx (none runs on one thread, or one per image), each summing its terms in the
    order in which the C target's loops over g add them: the emulated program's gradients are
    the C target's bit for bit, and within float32 rounding of PyTorch's (float64)."""
    path = tmp_path / "resample.py"
    path.write_text(RESAMPLE_GRADS)
    rng = np.random.default_rng(3)
    ins = {"g_up": [(2, 2, 5, 6), (2, 2, 10, 12)], "g_resize": [(2, 2, 5, 6)], "g_pad": [(2, 3, 5, 6)],
           "g_pool": [(2, 3, 9, 11)]}
    arrays = {e: [rng.standard_normal(s).astype(np.float32) for s in shapes] for e, shapes in ins.items()}
    specs = []
    cu, emu = emulated(tmp_path, path, specs, rt_objects)
    code = cu.read_text()
    assert "one thread:" not in code
    for op in ("upsample_bwd(", "pad_bwd("):
        kernels = re.findall(r"static __global__ void \w+\(unsigned char \*A\) \{\n(?:  [^\n]*\n)*?    /\* resample\.py:\d+  "
                             + re.escape(op) + r".*\n(?:    [^\n]*\n)*?      for \(int64_t p = \(int64_t\)blockIdx\.x", code)
        assert kernels, op   # dx's elements over the grid
    cexe = tmp_path / "m_c"
    run([CTC, "build", path, "-o", cexe, *specs], timeout=600)
    mod = load_module(str(path), "cuda_resample")
    for e, arrs in arrays.items():
        got = {}
        for tag, exe in (("cuda", emu), ("c", cexe)):
            args = [exe, "run", e]
            for k, a in enumerate(arrs):
                np.save(tmp_path / f"{e}_{k}.npy", a)
                args += ["--input", tmp_path / f"{e}_{k}.npy"]
            run_env([*args, "--output", tmp_path / f"{e}_{tag}.npy"])
            got[tag] = np.load(tmp_path / f"{e}_{tag}.npy")
        assert got["cuda"].tobytes() == got["c"].tobytes(), e
        t = [torch.from_numpy(a.astype(np.float64)) for a in arrs]
        t[0].requires_grad_(True)
        want = getattr(mod, e)(*t).numpy()
        compare(f"{e} vs PyTorch (float64)", got["c"], want, 1e-5, 1e-5)


# argmax/argmin over a few long fibers (a language model's next token over its vocabulary).
ARGMAX_LONG = """
import torch
import torch.nn as nn


class Net(nn.Module):
    def forward(self, x):
        return x


model = Net()


def a1(x):
    return torch.argmax(x, dim=-1)


def a2(x):
    return torch.argmin(x, dim=0, keepdim=True)


def a3(x):
    return torch.argmax(x.reshape(2, 2, 1500), dim=2)


def a4(n):
    return torch.argmax(n, dim=1)


example_inputs = {"forward": (torch.zeros(1),), "a1": (torch.zeros(2, 3000),), "a2": (torch.zeros(3000, 3),),
                  "a3": (torch.zeros(2, 3000),), "a4": (torch.zeros(3, 2500, dtype=torch.int64),)}
"""


def test_argmax_of_few_long_fibers_in_blocks(tmp_path, rt_objects):
    """argmax/argmin of few fibers of thousands of elements: a block of threads per 8 fibers, 32
    threads scanning every 32nd element each and the first taking the best of their results
    (a NaN over numbers, the smaller index on a tie): the C target's indices exactly, with NaNs,
    ties, -0.0 against 0.0 and int64 values, and PyTorch's."""
    path = tmp_path / "argmax_long.py"
    path.write_text(ARGMAX_LONG)
    entries = ["--entry", "a1", "--entry", "a2", "--entry", "a3", "--entry", "a4"]
    cu, emu = emulated(tmp_path, path, entries, rt_objects)
    assert cu.read_text().count("/* a block of 256 threads per 8 fibers, 32 per fiber */") == 4
    cexe = tmp_path / "m_c"
    run([CTC, "build", path, "-o", cexe, *entries], timeout=600)
    rng = np.random.default_rng(0)

    def floats(shape):
        a = rng.standard_normal(shape).astype(np.float32)
        a[rng.random(shape) < 0.3] = 0.0
        a.flat[rng.integers(0, a.size, 20)] = -0.0
        return a
    cases = {"a1": floats((2, 3000)), "a2": floats((3000, 3)), "a3": floats((2, 3000)),
             "a4": rng.integers(-5, 6, size=(3, 2500)).astype(np.int64)}
    cases["a1"][0] = np.round(cases["a1"][0])   # many equal maxima: the first
    cases["a1"][1, [100, 2000, 2999]] = np.nan   # NaNs: the first
    cases["a2"][:, 1] = 0.0   # all equal
    cases["a2"][2500, 2] = np.nan
    mod = load_module(str(path), "cuda_argmax_long")
    for e, x in cases.items():
        np.save(tmp_path / f"{e}.npy", x)
        got = []
        for tag, exe in (("cuda", emu), ("c", cexe)):
            run_env([exe, "run", e, "--input", tmp_path / f"{e}.npy", "--output", tmp_path / f"{e}_{tag}.npy"])
            got.append(np.load(tmp_path / f"{e}_{tag}.npy"))
        assert np.array_equal(got[0], got[1]), e
        assert np.array_equal(got[1], getattr(mod, e)(torch.from_numpy(x)).numpy()), e


@pytest.mark.parametrize("name", ["convs", "lenet"])
def test_cudnn_convolutions_emulated(tmp_path, name, rt_objects):
    """Built with -DCTC_HAVE_CUDNN, every convolution (forward, backward data, backward filter;
    strided, padded, dilated, grouped, depthwise, 1x1, transposed with output_padding) runs
    cuDNN's calls (on runtime_min/cuda_emu/ctc_cudnn_emu.h, which traces them): forward, loss
    and the weights after a step match the C target (rtol 1e-5), and PyTorch (1e-4). With
    no algorithm fitting the scratch (CTC_EMU_CUDNN_WORKSPACE), the im2col branch gives the
    same results."""
    path, x, y, specs = _write_model(tmp_path, name)
    cu, emu = emulated(tmp_path, path, specs, rt_objects, defines=("-DCTC_HAVE_CUDNN",))
    nsites = len(re.findall(r"/\* cuDNN, (forward|backward data|backward filter) \*/", cu.read_text()))
    assert nsites >= (15 if name == "convs" else 7), nsites
    cexe = tmp_path / "m_c"
    run([CTC, "build", path, "-o", cexe, *specs], timeout=600)
    mod = load_module(str(path), "cudnn_" + name)
    w = tmp_path / "w.safetensors"
    st_write(w, state_dict_np(mod.model))
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", y)
    res = {}
    for tag, exe, env in (("cudnn", emu, {"CTC_EMU_CUDNN_TRACE": "1"}),
                          ("im2col", emu, {"CTC_EMU_CUDNN_WORKSPACE": str(1 << 40)}), ("c", cexe, {})):
        *res[tag], printed = _forward_and_step(tmp_path, exe, tag, w, **env)
        calls = re.findall(r"^cudnn: (forward|backward data|backward filter) ", printed, re.M)
        if tag == "cudnn":
            assert {"forward", "backward data", "backward filter"} <= set(calls) and len(calls) >= nsites, calls
        else:
            assert not calls
    co, cl, cw = res["c"]
    for tag in ("cudnn", "im2col"):
        go, gl, gw = res[tag]
        compare(f"{name} {tag} forward vs C", go, co, 1e-5, 1e-6)
        compare(f"{name} {tag} loss vs C", gl, cl, 1e-5, 1e-6)
        for k in cw:
            compare(f"{name} {tag} {k} after a step vs C", gw[k], cw[k], 1e-5, 1e-6)
    with torch.no_grad():
        want = mod.model(torch.from_numpy(x)).numpy()
    compare(f"{name} cudnn forward vs torch", res["cudnn"][0], want, 1e-4, 1e-5)
    mod.train_step(torch.from_numpy(x), torch.from_numpy(y))
    for k, v in mod.model.state_dict().items():
        compare(f"{name} cudnn {k} after a step vs torch", res["cudnn"][2][k], v.numpy(), 1e-4, 1e-5)


def test_train_keeps_parameters_on_the_device(tmp_path, rt_objects):
    """The parameters live on the device: the host-pointer entry copies only its inputs and
    outputs (through the page-locked m->pinned), a training step leaves the new parameters
    there, and the host copy comes back only when the runtime asks for it (net_params: the
    checkpoints, --nan-policy skip's copy before each step, --save). `./net train` over 3
    epochs of 2 steps, emulated, ends with the C target's weights, checkpoint included."""
    path, x, y, specs = _write_model(tmp_path, "mlp")
    cu, emu = emulated(tmp_path, path, specs, rt_objects)
    code = cu.read_text()
    host = code[code.index("int mlp_train_step(mlp_t *m, const float *x"):]
    host = host[:host.index("\n}\n")]
    assert "m->arena" not in host and "memcpy(m->pinned + " in host, host
    dev = code[code.index("int mlp_train_step_device("):]
    assert "m->host_stale = 1;" in dev[:dev.index("\n}\n")]
    assert "cudaMallocHost((void **)&m->pinned" in code and "cudaFreeHost(m->pinned)" in code
    cexe = tmp_path / "m_c"
    run([CTC, "build", path, "-o", cexe, *specs], timeout=600)
    rng = np.random.default_rng(3)
    n = 2 * x.shape[0]
    np.save(tmp_path / "X.npy", rng.standard_normal((n, *x.shape[1:])).astype(np.float32))
    np.save(tmp_path / "Y.npy", rng.integers(0, 10, n).astype(np.int64))
    res = {}
    for tag, exe in (("cuda", emu), ("c", cexe)):
        out = tmp_path / f"{tag}_w.safetensors"
        run_env([exe, "train", "--data", tmp_path / "X.npy", "--labels", tmp_path / "Y.npy", "--epochs", "3",
                 "--no-shuffle", "--nan-policy", "skip", "--checkpoint", tmp_path / f"{tag}_ck", "--save", out, "--save-training-state"])
        res[tag] = (st_read(str(out)), st_read(str(tmp_path / f"{tag}_ck" / "checkpoint.safetensors")))
    for i, what in enumerate(("--save", "checkpoint")):
        got, want = res["cuda"][i], res["c"][i]
        assert got.keys() == want.keys()
        for k in want:
            compare(f"{what} {k} after 6 steps vs C", got[k], want[k], 1e-5, 1e-6)


def test_build_emulate_cudnn_switch(tmp_path):
    """`ctc build --target cuda --emulate` compiles the cuDNN branches (+cudnn); CTC_CUDNN=0
    leaves them out, and the convolutions run as im2col + GEMM (no cuDNN call traced)."""
    path, x, y, specs = _write_model(tmp_path, "lenet")
    np.save(tmp_path / "x.npy", x)
    outs = {}
    for tag, env in (("on", {}), ("off", {"CTC_CUDNN": "0"})):
        exe = tmp_path / f"net_{tag}"
        r = run([CTC, "build", path, "--target", "cuda", "--emulate", "-o", exe, "--stats", *specs], timeout=600,
                env=dict(os.environ, **env))
        assert ("+cudnn" in r.stderr) == (tag == "on"), r.stderr
        r = run_env([exe, "run", "forward", "--input", tmp_path / "x.npy", "--output", tmp_path / f"{tag}.npy"],
                    CTC_EMU_CUDNN_TRACE="1")
        assert ("cudnn: forward" in r.stderr) == (tag == "on"), r.stderr
        outs[tag] = np.load(tmp_path / f"{tag}.npy")
    compare("lenet forward, cuDNN vs im2col", outs["on"], outs["off"], 1e-5, 1e-6)


@pytest.mark.skipif(NVCC is None, reason="nvcc not found (the CUDA toolkit is not installed)")
def test_build_with_nvcc(tmp_path):
    """`ctc build --target cuda` links a program with nvcc and cuBLAS. With a GPU it
    computes the C target's outputs; without one its first CUDA call fails with
    the generated file and line in the message and exit status 1."""
    path, x, y, specs = _write_model(tmp_path, "mlp")
    exe = tmp_path / "net"
    run([CTC, "build", path, "--target", "cuda", "-o", exe, *specs], timeout=600)
    np.save(tmp_path / "x.npy", x)
    r = run([exe, "run", "forward", "--input", tmp_path / "x.npy", "--output", tmp_path / "o.npy"], check=False)
    if r.returncode == 0:   # a GPU
        cexe = tmp_path / "net_c"
        run([CTC, "build", path, "-o", cexe, *specs], timeout=600)
        run([cexe, "run", "forward", "--input", tmp_path / "x.npy", "--output", tmp_path / "c.npy"])
        compare("GPU vs C", np.load(tmp_path / "o.npy"), np.load(tmp_path / "c.npy"), 1e-4, 1e-5)
    else:
        assert r.returncode == 1, r.stderr
        assert re.search(r"net\.cu:\d+: cudaMalloc\(", r.stderr), r.stderr
        assert "CUDA or cuBLAS call failed" in r.stderr, r.stderr
