"""Helpers of the CUDA target's tests: the runtime as C objects, a generated .cu
built as C++ against the emulation header (runtime_min/cuda_emu), and running
its program."""
import os
import shutil
import subprocess

import pytest

from ctc_testlib import CTC, ROOT, run

RT = os.path.join(ROOT, "runtime_min")
NVCC = shutil.which("nvcc") or ("/usr/local/cuda/bin/nvcc" if os.path.exists("/usr/local/cuda/bin/nvcc") else None)


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


def emulated(tmp, path, specs, rt_objects, stem="m", opt="-O1", defines=()):
    """`ctc compile --target cuda`, then g++ with the emulation header: the program.
    defines: more -D flags (-DCTC_HAVE_CUDNN: the cuDNN calls, on ctc_cudnn_emu.h)."""
    cu = tmp / f"{stem}.cu"
    run([CTC, "compile", path, "--target", "cuda", "-o", cu, *specs])
    obj, exe = tmp / f"{stem}_emu.o", tmp / f"{stem}_emu"
    run(["g++", "-x", "c++", "-std=c++17", opt, "-fopenmp", "-Wall", "-Wextra", "-Werror", "-DCTC_CUDA_EMULATE", *defines,
         "-DCTC_MAIN", "-I", RT, "-I", os.path.join(RT, "cuda_emu"), "-c", cu, "-o", obj], timeout=600)
    run(["g++", "-fopenmp", obj, *rt_objects, "-lz", "-lm", "-o", exe])
    return cu, exe


def _env():
    env = dict(os.environ)
    env["OMP_WAIT_POLICY"] = "passive"   # teams of up to 256 threads on a few cores
    return env


def run_env(args, **extra):
    """Runs an emulated program (OMP_WAIT_POLICY=passive, and the variables in extra)."""
    r = subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=300, env=dict(_env(), **extra))
    assert r.returncode == 0, f"{' '.join(map(str, args))}\n{r.stdout}\n{r.stderr}"
    return r
