"""The CUDA target (`ctc compile --target cuda -o model.cu`), without a GPU.

- The generated .cu compiles with nvcc for sm_80 and sm_90 with every warning an
  error, host and device (skipped, with the reason, when nvcc is missing).
- Under runtime_min/cuda_emu/ctc_cuda_emu.h (CUDA on the CPU: kernels block by
  block, a block's threads an OpenMP team, cuBLAS as loops) the generated program,
  built with g++ around the runtime's driver, gives the C target's forward outputs,
  loss and updated parameters after one SGD-momentum step (rtol 1e-5) and
  PyTorch's (rtol 1e-4), for the bench MLP and LeNet and a tiny GPT (layer norm,
  softmax over a causal mask, tanh GELU, batched GEMMs over folded head views)."""
import os
import re
import shutil
import subprocess

import numpy as np
import pytest
import torch

from ctc_testlib import BENCH, BENCH_TRAIN_STEP, CTC, ROOT, compare, load_module, run, st_read, st_write, state_dict_np

RT = os.path.join(ROOT, "runtime_min")
NVCC = shutil.which("nvcc") or ("/usr/local/cuda/bin/nvcc" if os.path.exists("/usr/local/cuda/bin/nvcc") else None)


def _gpt_tiny():
    src = open(os.path.join(BENCH, "gpt.py")).read()
    for a, b in [("VOCAB = 256", "VOCAB = 64"), ("BLOCK = 128", "BLOCK = 16"), ("N_LAYER = 4", "N_LAYER = 1"),
                 ("N_HEAD = 4", "N_HEAD = 2"), ("N_EMBD = 256", "N_EMBD = 32")]:
        assert a in src, a
        src = src.replace(a, b)
    return src


# name -> (source, forward's input name, x, y)
MODELS = {
    "mlp": (lambda: open(os.path.join(BENCH, "mlp.py")).read(), "x",
            lambda r: r.standard_normal((8, 1, 28, 28)).astype(np.float32), lambda r: r.integers(0, 10, 8)),
    "lenet": (lambda: open(os.path.join(BENCH, "lenet.py")).read(), "t",
              lambda r: r.standard_normal((4, 1, 28, 28)).astype(np.float32), lambda r: r.integers(0, 10, 4)),
    "gpt_tiny": (_gpt_tiny, "idx", lambda r: r.integers(0, 64, (2, 16)), lambda r: r.integers(0, 64, (2, 16))),
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


@pytest.fixture(scope="module")
def rt_objects(tmp_path_factory):
    """The runtime compiled once as C objects (the generated .cu links against them)."""
    d = tmp_path_factory.mktemp("rt")
    objs = []
    for f in sorted(os.listdir(RT)):
        if f.startswith("rt_") and f.endswith(".c"):
            o = d / (f[:-2] + ".o")
            run(["gcc", "-std=c11", "-O1", "-c", os.path.join(RT, f), "-I", RT, "-o", o])
            objs.append(str(o))
    return objs


def _emulated(tmp, path, specs, rt_objects, stem="m"):
    """`ctc compile --target cuda`, then g++ with the emulation header: the program."""
    cu = tmp / f"{stem}.cu"
    run([CTC, "compile", path, "--target", "cuda", "-o", cu, *specs])
    obj, exe = tmp / f"{stem}_emu.o", tmp / f"{stem}_emu"
    run(["g++", "-x", "c++", "-std=c++17", "-O1", "-fopenmp", "-Wall", "-Wextra", "-Werror", "-DCTC_CUDA_EMULATE",
         "-DCTC_MAIN", "-I", RT, "-I", os.path.join(RT, "cuda_emu"), "-c", cu, "-o", obj], timeout=600)
    run(["g++", "-fopenmp", obj, *rt_objects, "-lz", "-lm", "-o", exe])
    return cu, exe


def _env():
    env = dict(os.environ)
    env["OMP_WAIT_POLICY"] = "passive"   # teams of up to 256 threads on a few cores
    return env


def _run(args):
    r = subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=300, env=_env())
    assert r.returncode == 0, f"{' '.join(map(str, args))}\n{r.stdout}\n{r.stderr}"


@pytest.mark.parametrize("name", sorted(MODELS))
def test_emulated_matches_c_target_and_torch(tmp_path, name, rt_objects):
    """Forward and one SGD-momentum train step: the emulated CUDA program against
    the C target (rtol 1e-5) and PyTorch (rtol 1e-4), from PyTorch's initial weights."""
    path, x, y, specs = _write_model(tmp_path, name)
    cu, emu = _emulated(tmp_path, path, specs, rt_objects)
    code = cu.read_text()
    assert "__global__" in code and ("cublasSgemm" in code)
    cexe = tmp_path / "m_c"
    run([CTC, "build", path, "-o", cexe, *specs], timeout=600)
    mod = load_module(str(path), "cuda_" + name)
    w = tmp_path / "w.safetensors"
    st_write(w, state_dict_np(mod.model))
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", y)
    res = {}
    for tag, exe in (("cuda", emu), ("c", cexe)):
        out, loss, saved = (tmp_path / f"{tag}_{n}" for n in ("out.npy", "loss.npy", "w.safetensors"))
        _run([exe, "run", "forward", "--weights", w, "--input", tmp_path / "x.npy", "--output", out])
        _run([exe, "run", "train_step", "--weights", w, "--input", tmp_path / "x.npy", "--input", tmp_path / "y.npy",
              "--output", loss, "--save", saved])
        res[tag] = (np.load(out), np.load(loss), st_read(str(saved)))
    (go, gl, gw), (co, cl, cw) = res["cuda"], res["c"]
    compare(f"{name} forward vs C", go, co, 1e-5, 1e-6)
    compare(f"{name} loss vs C", gl, cl, 1e-5, 1e-6)
    assert gw.keys() == cw.keys()
    for k in cw:
        compare(f"{name} {k} after a step vs C", gw[k], cw[k], 1e-5, 1e-6)
    with torch.no_grad():
        want = mod.model(torch.from_numpy(x)).numpy()
    compare(f"{name} forward vs torch", go, want, 1e-4, 1e-5)
    loss_t = float(mod.train_step(torch.from_numpy(x), torch.from_numpy(y)))
    compare(f"{name} loss vs torch", gl, np.float32(loss_t), 1e-4, 1e-5)
    for k, v in mod.model.state_dict().items():
        compare(f"{name} {k} after a step vs torch", gw[k], v.numpy(), 1e-4, 1e-5)


@pytest.mark.skipif(NVCC is None, reason="nvcc not found (the CUDA toolkit is not installed)")
@pytest.mark.parametrize("name", ["lenet", "gpt_tiny"])
def test_nvcc_compiles_clean(tmp_path, name):
    """nvcc -c for sm_80 and sm_90: no warning, host (-Wall -Wextra) or device."""
    path, _, _, specs = _write_model(tmp_path, name)
    cu = tmp_path / "m.cu"
    run([CTC, "compile", path, "--target", "cuda", "-o", cu, *specs])
    run([NVCC, "-c", "-gencode", "arch=compute_80,code=sm_80", "-gencode", "arch=compute_90,code=sm_90",
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
    r = run([CTC, "build", path, "--target", "cuda", "-o", tmp_path / "net", *specs], check=False)
    assert r.returncode == 1 and "not implemented yet" in r.stderr
    r = run([CTC, "compile", path, "--target", "metal", "-o", tmp_path / "m.c", *specs], check=False)
    assert r.returncode == 1 and "unknown --target 'metal'" in r.stderr
    run([CTC, "compile", path, "--target", "cuda", "-o", tmp_path / "net.cu", *specs])
    assert (tmp_path / "net.h").exists() and "cudaStream_t stream" in (tmp_path / "net.h").read_text()


def test_unsupported_is_a_clean_error(tmp_path):
    """A construct the CUDA target lacks (a grouped convolution) is a plain error
    naming the model line, exit 1, no output files."""
    p = tmp_path / "g.py"
    p.write_text("import torch\nimport torch.nn as nn\n\n\nclass G(nn.Module):\n    def __init__(self):\n"
                 "        super().__init__()\n        self.c = nn.Conv2d(4, 4, 3, groups=2)\n\n"
                 "    def forward(self, x):\n        return self.c(x)\n")
    r = run([CTC, "compile", p, "--target", "cuda", "-o", tmp_path / "g.cu", "--input", "x=f32[1,4,8,8]"], check=False)
    assert r.returncode == 1, r.stderr
    assert "g.py:11" in r.stderr and "not supported yet" in r.stderr, r.stderr
    assert not (tmp_path / "g.cu").exists()


EXAMPLES = ["cifar_net", "hessian_top_eigenvalue", "mlp_sequential", "seed_cnn"]


def _entries(info):
    """[(entry, [(dtype, shape)...], noutputs)] from `./net info`."""
    out = []
    for block in re.split(r"^(?=entry )", info, flags=re.M):
        m = re.match(r"entry (\S+): \d+ inputs?, (\d+) outputs?", block)
        if not m:
            continue
        ins = [(d, [int(s) for s in shp.split(",") if s.strip()])
               for d, shp in re.findall(r"^  input\s+\S+ (\w+)\[([^\]]*)\]", block, re.M)]
        out.append((m.group(1), ins, int(m.group(2))))
    return out


@pytest.mark.parametrize("name", EXAMPLES)
def test_examples_emulated_match_c_target(tmp_path, name, rt_objects):
    """Every entry of the examples (forward, a train step, an hvp), from the
    programs' own initial weights on random inputs: emulated CUDA = C target."""
    path = os.path.join(ROOT, "examples", f"{name}.py")
    _, emu = _emulated(tmp_path, path, [], rt_objects)
    cexe = tmp_path / "m_c"
    run([CTC, "build", path, "-o", cexe], timeout=600)
    info = run([cexe, "info"]).stdout
    rng = np.random.default_rng(1)
    entries = _entries(info)
    assert entries, info
    for entry, ins, nout in entries:
        args = []
        for k, (dt, shape) in enumerate(ins):
            a = rng.standard_normal(shape).astype(np.float32) if dt == "f32" else rng.integers(0, 2, shape)
            p = tmp_path / f"{entry}_in{k}.npy"
            np.save(p, a)
            args += ["--input", p]
        got = {}
        for tag, exe in (("cuda", emu), ("c", cexe)):
            outs = [tmp_path / f"{tag}_{entry}_out{k}.npy" for k in range(nout)]
            _run([exe, "run", entry, *args, *[x for o in outs for x in ("--output", o)]])
            got[tag] = [np.load(o) for o in outs]
        for k in range(nout):
            compare(f"{name} {entry} output {k} vs C", got["cuda"][k], got["c"][k], 1e-5, 1e-5)
