"""Data-parallel training for the CUDA target (issue 11, item 3): `ctc build --target cuda
--distributed nccl`, or a DistributedDataParallel file built with --target cuda.

The CUDA entries get the C target's bucket plan and start/wait hooks (codegen_c/dist_c.c)
on the device arena; the communicator is runtime_min/rt_nccl.c (ncclAllReduce on its own
stream, ordered against the entry's stream by events). Here (no GPU): the hooks sit between
the same instructions as in the C target's entry, the bucket tables are the C target's,
the .cu compiles with nvcc -Werror, `build` links MPI and NCCL, and the error cases; and,
end to end, the generated CUDA entries emulated on the CPU (runtime_min/cuda_emu) with the
MPI communicator in rt_nccl.c's place (the emulated device arena is host memory) train under
`mpirun -np 2` to the parameters of one PyTorch process on the global batch. On a GPU the
programs run in tests/gpu/test_nccl_gpu.py."""
import os
import re
import shutil
import subprocess

import pytest

from ctc_testlib import CTC, build_ctc, run, st_read, st_write
from cuda_testlib import NVCC, RT
from test_distributed import ACCUM_MODEL, B, C, D, DDP_MODEL, ENTRY, H, MODEL, MPIRUN, N, mpirun, reference


def _cuda_home():
    for d in [os.environ.get("CUDA_HOME", ""), "/usr/local/cuda", os.path.dirname(os.path.dirname(NVCC or "/x/y"))]:
        if d and os.path.exists(os.path.join(d, "include", "cuda_runtime.h")):
            return d
    return None


def _nccl_missing():
    """Why a distributed CUDA program cannot be built here, or None."""
    if NVCC is None:
        return "nvcc not found (the CUDA toolkit is not installed)"
    if not shutil.which(os.environ.get("MPICC") or "mpicc"):
        return "mpicc not found (Debian: libopenmpi-dev)"
    cuda = _cuda_home() or "/usr/local/cuda"
    incs = [os.path.join(cuda, "include"), "/usr/include", "/usr/local/include"]
    if not any(os.path.exists(os.path.join(d, "nccl.h")) for d in incs):
        return "nccl.h not found (the CUDA toolkit's NCCL, or Debian's libnccl-dev)"
    libs = [os.path.join(cuda, "lib64"), os.path.join(cuda, "lib"), "/usr/lib/x86_64-linux-gnu", "/usr/lib"]
    if not any(os.path.exists(os.path.join(d, "libnccl.so")) for d in libs):
        return "libnccl.so not found (the CUDA toolkit's NCCL, or Debian's libnccl-dev)"
    return None


def _gpu():
    smi = shutil.which("nvidia-smi")
    if not smi:
        return False
    r = subprocess.run([smi, "-L"], capture_output=True, text=True)
    return r.returncode == 0 and "GPU" in r.stdout


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    build_ctc()
    d = tmp_path_factory.mktemp("nccl")
    (d / "mlp.py").write_text(MODEL)
    (d / "ddp.py").write_text(DDP_MODEL)
    (d / "accum.py").write_text(ACCUM_MODEL)
    return d


@pytest.mark.skipif(not MPIRUN or not shutil.which("mpicc") or not shutil.which("mpicxx"),
                    reason="mpirun/mpicc/mpicxx not installed (Debian: openmpi-bin, libopenmpi-dev)")
def test_emulated_cuda_entries_train_like_one_process(work):
    """The hooks of the CUDA entries, run: the .cu of `--target cuda --distributed nccl` as C++
    against the emulation header, linked with rt_mpi.c instead of rt_nccl.c (what `ctc build`
    refuses with --emulate, NCCL needing GPUs; by hand here: the emulated device arena is host
    memory, which MPI can all-reduce). Two ranks, four buckets, two epochs: the parameters and
    momentum buffers of one PyTorch process on the global batches."""
    import numpy as np
    cu = work / "emu_n.cu"
    run([CTC, "compile", work / "mlp.py", "--target", "cuda", "--distributed", "nccl", "--bucket-mb", "0.0005",
         "-o", cu, *ENTRY])
    assert cu.read_text().count("->start(") >= 3
    objs = [work / "emu_n.o"]
    run(["mpicxx", "-x", "c++", "-std=c++17", "-O1", "-fopenmp", "-Wall", "-Wextra", "-Werror", "-DCTC_CUDA_EMULATE",
         "-DCTC_MAIN", "-I", RT, "-I", os.path.join(RT, "cuda_emu"), "-c", cu, "-o", objs[0]], timeout=600)
    for f in sorted(os.listdir(RT)):
        if f.startswith("rt_") and f.endswith(".c") and f != "rt_nccl.c":
            objs.append(work / f"emu_{f[:-2]}.o")
            run(["mpicc", "-std=c11", "-O1", "-DCTC_MPI", "-D_POSIX_C_SOURCE=200809L", "-I", RT, "-c",
                 os.path.join(RT, f), "-o", objs[-1]])
    run(["mpicxx", "-fopenmp", *objs, "-lz", "-lm", "-o", work / "net_emu"])
    r = np.random.default_rng(0)   # the data and initial weights of test_distributed.py
    np.save(work / "x.npy", r.standard_normal((N, D)).astype(np.float32))
    np.save(work / "y.npy", r.integers(0, C, N).astype(np.int64))
    init = {"fc1.weight": (H, D), "fc1.bias": (H,), "fc2.weight": (H, H), "fc2.bias": (H,),
            "fc3.weight": (C, H), "fc3.bias": (C,)}
    st_write(work / "init.safetensors", {k: (r.standard_normal(s) * 0.3).astype(np.float32) for k, s in init.items()})
    res = mpirun(work, 2, "./net_emu", "train", "--data", "x.npy", "--labels", "y.npy", "--epochs", 2, "--seed", 5,
                 "--weights", "init.safetensors", "--save", "emu.safetensors", "--save-training-state", env={"OMP_WAIT_POLICY": "passive"},
                 timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    want, steps = reference(work, 2, 2, 5)
    assert steps == (-(-N // 2)) // B == 2
    got = st_read(work / "emu.safetensors")
    for k, v in want.items():
        np.testing.assert_allclose(got[k], v, rtol=1e-5, atol=1e-6, err_msg=k)


def _body(src, head):
    """The text of the function starting at `head` (up to its closing brace)."""
    b = src[src.index(head):]
    return b[:b.index("\n}\n") + 3]


def _sequence(body):
    """The entry's model-line comments (one per instruction, in schedule order) and its
    hooks, the arena argument written as ARENA."""
    out = []
    for line in body.splitlines():
        line = line.strip()
        m = re.match(r"/\* (\S+\.py:\d+  .*) \*/$", line)
        if m:
            out.append(m.group(1))
        elif "->start(" in line or "->wait(" in line:
            out.append(re.sub(r"\bm->(dev|arena)\b", "ARENA", line))
    return out


def _tables(src):
    """The bucket tables: the static arrays and the ctc_bucket rows (without their comment)."""
    return re.findall(r"^static const (?:int64_t ctc_bk_\w+\[\] = \{[^}]*\};|ctc_bucket ctc_bk_\w+\[\] = \{.*?\n\};)$",
                      src, re.M | re.S)


@pytest.mark.parametrize("model,mb", [("mlp.py", "0.0005"), ("accum.py", "0.001")])
def test_cuda_entry_has_the_c_targets_buckets_and_hooks(work, model, mb):
    """The same bucket plan as the C target for the same model (tables equal, offsets
    included: the same memory plan), and every start/wait between the same two instructions
    as in the C target's entry; the hooks pass the device arena, and the communicator gets
    the entry's stream before the first hook."""
    cu, c = work / f"{model[:-3]}_n.cu", work / f"{model[:-3]}_m.c"
    run([CTC, "compile", work / model, "--target", "cuda", "--distributed", "nccl", "--bucket-mb", mb, "-o", cu, *ENTRY])
    run([CTC, "compile", work / model, "--distributed", "mpi", "--bucket-mb", mb, "-o", c, *ENTRY])
    cu_src, c_src = cu.read_text(), c.read_text()
    assert _tables(cu_src) and _tables(cu_src) == _tables(c_src)
    dev = _body(cu_src, "int net_train_step_device(")
    seq_cu, seq_c = _sequence(dev), _sequence(_body(c_src, "int net_train_step("))
    nb = sum("->start(" in s for s in seq_c)
    assert nb >= 3 and sum("->wait(" in s for s in seq_c) == nb
    assert seq_cu == seq_c
    assert dev.count(", m->dev, &ctc_bk_train_step[") == 2 * nb
    assert not re.search(r"->(start|wait)\([^;]*m->arena", dev)   # the host copy is only uploaded when stale
    comm = dev.index("ctc_comm_world()")
    assert comm < dev.index("->stream = (void *)m->stream;") < dev.index("->start(")
    # the host-pointer entry (the driver's) only wraps the device entry: no hooks of its own
    assert "ctc_comm" not in _body(cu_src, "int net_train_step(net_t *m")
    # init picks the rank's GPU before its cudaMalloc
    init = _body(cu_src, "int net_init(")
    assert init.index("ctc_comm_world()") < init.index("cudaMalloc(")


def test_hooks_after_the_producer_and_before_the_first_reader(work):
    """In the device entry: bucket 3 (fc1.weight, the last gradient backward makes) starts
    right after the GEMM that computes fc1_weight_grad, bucket 0 starts before that GEMM, and
    each wait comes right before the first launch that reads one of its gradients (the
    update), no other kernel between."""
    cu = work / "mlp_n.cu"
    if not cu.exists():
        run([CTC, "compile", work / "mlp.py", "--target", "cuda", "--distributed", "nccl", "--bucket-mb", "0.0005",
             "-o", cu, *ENTRY])
    dev = _body(cu.read_text(), "int net_train_step_device(")
    lines = [x.strip() for x in dev.splitlines()]
    code = [i for i, x in enumerate(lines) if x.startswith(("CTC_LAUNCH(", "CTC_CUBLAS(", "CTC_CUDA("))]
    gemm = next(i for i in code if "fc1_weight_grad" in lines[i] and "ctc_gemm_f32" in lines[i])
    start3 = lines.index("v_ctc_comm->start(v_ctc_comm, m->dev, &ctc_bk_train_step[3]);  /* bucket 3: its gradients "
                         "are final: all-reduce them while backward goes on */")
    assert gemm < start3 and not [i for i in code if gemm < i < start3]
    start0 = next(i for i, x in enumerate(lines) if "->start(" in x and "[0]" in x)
    assert start0 < gemm
    for b, grad in ((3, "fc1_weight_grad"), (2, "fc1_bias_grad")):
        wait = next(i for i, x in enumerate(lines) if "->wait(" in x and f"[{b}]" in x)
        reader = next(i for i in code if i > start3 and any(
            re.search(rf"\(.*\b{grad}\b.*\) ->", c) for c in _comments_above(lines, i)))
        assert wait < reader and not [i for i in code if wait < i < reader], (b, lines[wait:reader + 1])


def _comments_above(lines, i):
    """The comment lines right above line i (a launch's model-line comments)."""
    j = i
    while j > 0 and lines[j - 1].startswith("/*"):
        j -= 1
    return lines[j:i]


@pytest.mark.skipif(NVCC is None, reason="nvcc not found (the CUDA toolkit is not installed)")
def test_ddp_file_compiles_with_nvcc(work):
    """A DistributedDataParallel file with --target cuda (no flag) gets the hooks, and the .cu
    compiles with nvcc -c for sm_80 and sm_90 with every warning an error (no GPU needed)."""
    cu = work / "ddp_n.cu"
    run([CTC, "compile", work / "ddp.py", "--target", "cuda", "-o", cu, *ENTRY])
    src = cu.read_text()
    assert src.count("->start(") >= 3 and "ctc_comm_world()" in src
    run([NVCC, "-c", "-gencode", "arch=compute_80,code=sm_80", "-gencode", "arch=compute_90,code=sm_90",
         "-Werror", "all-warnings", "-Xcompiler", "-Wall,-Wextra,-Werror", "-I", RT, cu, "-o", work / "ddp_n.o"],
        timeout=600)
    # --validate (NVRTC for the kernels, libclang for the host side with the emulation header) accepts it
    r = run([CTC, "compile", work / "ddp.py", "--target", "cuda", "--validate", "-o", work / "ddp_v.cu", *ENTRY])
    assert "internal error" not in r.stderr, r.stderr
    # a plain CUDA build of the plain file has no hooks
    run([CTC, "compile", work / "mlp.py", "--target", "cuda", "-o", work / "plain.cu", *ENTRY])
    assert "ctc_comm" not in (work / "plain.cu").read_text()


@pytest.mark.skipif(_nccl_missing() is not None, reason=_nccl_missing() or "")
def test_build_links_mpi_and_nccl(work):
    """`ctc build --target cuda --distributed nccl` links a program with nvcc, MPI and NCCL.
    Without a GPU, `train` reaches rt_nccl.c's communicator (it picks the rank's GPU before the
    model's arena is allocated) and ends with its error, exit status 1; with one, a single rank
    trains (tests/gpu/test_nccl_gpu.py compares it)."""
    exe = work / "netn"
    r = run([CTC, "build", work / "mlp.py", "--target", "cuda", "--distributed", "nccl", "-o", exe, "--stats", *ENTRY],
            timeout=600)
    assert "+mpi +nccl" in r.stderr, r.stderr
    ldd = shutil.which("ldd")
    if ldd:
        libs = run([ldd, exe]).stdout
        assert "libnccl" in libs and "libmpi" in libs, libs
    import numpy as np
    rng = np.random.default_rng(0)
    np.save(work / "x.npy", rng.standard_normal((8, 8)).astype(np.float32))
    np.save(work / "y.npy", rng.integers(0, 4, 8).astype(np.int64))
    r = subprocess.run([str(exe), "train", "--data", "x.npy", "--labels", "y.npy", "--epochs", "1"], cwd=work,
                       capture_output=True, text=True, timeout=120)
    if not _gpu():
        assert r.returncode == 1, r.stdout + r.stderr
        assert re.search(r"ctc: error: rank 0 of 1: cudaGetDeviceCount: ", r.stderr), r.stderr
    else:
        assert r.returncode == 0, r.stdout + r.stderr


def test_build_command_line(work):
    """What `build` gives nvcc, with stand-ins for nvcc (records its arguments) and an MPICH-style
    mpicc (no --showme: -show prints the whole command): -DCTC_NCCL, rt_nccl.c, -lnccl and MPI's
    flags, -Wl, options as -Xlinker and the rest as -Xcompiler; a plain CUDA build has none of
    them; a missing MPI wrapper is an error naming it."""
    nvcc, mpicc, log = work / "fake_nvcc", work / "fake_mpicc", work / "nvcc_args"
    nvcc.write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" > {log}\n')
    mpicc.write_text('#!/bin/sh\ncase "$1" in -show) echo "gcc -I/opt/mpich/include -DMPICH_X=1 -L/opt/mpich/lib '
                     '-Wl,-rpath,/opt/mpich/lib -lmpi -pthread";; *) exit 1;; esac\n')
    nvcc.chmod(0o755)
    mpicc.chmod(0o755)
    env = {**os.environ, "NVCC": str(nvcc), "MPICC": str(mpicc)}

    def build(*opts):
        return subprocess.run([CTC, "build", work / "mlp.py", "--target", "cuda", "-o", work / "fake", *opts, *ENTRY],
                              capture_output=True, text=True, env=env, timeout=120)
    r = build("--distributed", "nccl")
    assert r.returncode == 0, r.stderr
    args = log.read_text().split("\n")
    for a in ["-DCTC_NCCL", "-I/opt/mpich/include", "-DMPICH_X=1", "-L/opt/mpich/lib", "-lmpi", "-lnccl", "-lcublas"]:
        assert a in args, (a, args)
    assert args[args.index("-rpath,/opt/mpich/lib") - 1] == "-Xlinker"
    assert args[args.index("-pthread") - 1] == "-Xcompiler"
    assert "gcc" not in args and any(a.endswith("/rt_nccl.c") for a in args)
    r = build()
    assert r.returncode == 0, r.stderr
    args = log.read_text().split("\n")
    assert "-DCTC_NCCL" not in args and "-lnccl" not in args and not any(a.endswith("/rt_nccl.c") for a in args)
    env["MPICC"] = str(work / "no_such_mpicc")
    r = build("--distributed", "nccl")
    assert r.returncode != 0 and "cannot ask '" in r.stderr and "no_such_mpicc' for MPI's compile and link flags" \
        in r.stderr, r.stderr


@pytest.mark.parametrize("model,opts,msg", [
    ("mlp.py", ["--target", "cuda", "--distributed", "mpi"],
     "ctc: error: --distributed mpi is for the C target: with --target cuda the gradients are all-reduced on the GPUs "
     "with NCCL (--distributed nccl"),
    ("mlp.py", ["--target", "cuda", "--emulate", "--distributed", "nccl"],
     "ctc: error: --emulate cannot run --distributed nccl: NCCL needs GPUs"),
    ("ddp.py", ["--target", "cuda", "--emulate"],
     "--emulate cannot run DistributedDataParallel (--target cuda all-reduces with NCCL, which needs GPUs)"),
    ("mlp.py", ["--distributed", "nccl"], "ctc: error: --distributed nccl goes with --target cuda"),
    ("mlp.py", ["--target", "cuda", "--distributed", "gloo"],
     "ctc: error: unknown --distributed 'gloo' (expected mpi, or nccl with --target cuda)"),
])
def test_errors(work, model, opts, msg):
    out = work / "bad"
    r = run([CTC, "build", work / model, "-o", out, *opts, *ENTRY], check=False)
    assert r.returncode == 1 and msg in r.stderr, r.stderr
    assert not out.exists()
