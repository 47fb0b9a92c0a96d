"""Data-parallel training on MPI (issue 11): `ctc build --distributed mpi`, or a
model wrapped in DistributedDataParallel, run by `mpirun -np P ./net train`.

The oracle is one PyTorch process training on the global batch: the P ranks'
batches of each step side by side, the ranks' shards dealt from the driver's
epoch permutation as DistributedSampler deals them (padded to a multiple of P
by repeating its start; rank r takes positions r, r + P, ...)."""
import os
import re
import shutil
import subprocess
import sys
import time

import numpy as np
import pytest

from ctc_testlib import CTC, EXAMPLES, build_ctc, load_module, run, st_read, st_write

MPIRUN = shutil.which("mpirun")
pytestmark = pytest.mark.skipif(not MPIRUN or not shutil.which("mpicc"),
                                reason="mpirun/mpicc not installed (Debian: openmpi-bin, libopenmpi-dev)")
MPI = [MPIRUN or "mpirun", "--oversubscribe", "--allow-run-as-root"]

sys.path.insert(0, EXAMPLES)
from train_torch import epoch_order  # noqa: E402  (the driver's permutation)

B, N, D, H, C = 4, 22, 8, 16, 4   # per-rank batch, samples, features, hidden, classes

MODEL = """
import torch
import torch.nn as nn
import torch.nn.functional as F


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(8, 16)
        self.fc2 = nn.Linear(16, 16)
        self.fc3 = nn.Linear(16, 4)

    def forward(self, x):
        return self.fc3(torch.tanh(self.fc2(torch.relu(self.fc1(x)))))


example_inputs = (torch.randn(4, 8),)
model = Net()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)


def train_step(x, y):
    optimizer.zero_grad()
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()
    return loss
"""

# The same model, spelled as a DDP script: the wrapper is transparent and makes the build distributed.
DDP_MODEL = MODEL.replace("import torch.nn.functional as F\n", """import torch.nn.functional as F
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
""").replace("""model = Net()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)""", """dist.init_process_group(backend="gloo")
model = DDP(Net(), bucket_cap_mb=0.0005)
optimizer = torch.optim.SGD(model.module.parameters(), lr=0.1, momentum=0.9)""")

ENTRY = ["--entry", "train_step", "--input", f"x=f32[{B},{D}]", "--input", f"y=i64[{B}]"]


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    build_ctc()
    d = tmp_path_factory.mktemp("dist")
    (d / "mlp.py").write_text(MODEL)
    (d / "ddp.py").write_text(DDP_MODEL)
    # several buckets: 0.0005 MiB = 524 bytes, so most gradients are a bucket of their own
    run([CTC, "build", d / "mlp.py", "-o", d / "netd", "--distributed", "mpi", "--bucket-mb", "0.0005", *ENTRY])
    r = np.random.default_rng(0)
    np.save(d / "x.npy", r.standard_normal((N, D)).astype(np.float32))
    np.save(d / "y.npy", r.integers(0, C, N).astype(np.int64))
    init = {"fc1.weight": (H, D), "fc1.bias": (H,), "fc2.weight": (H, H), "fc2.bias": (H,),
            "fc3.weight": (C, H), "fc3.bias": (C,)}
    st_write(d / "init.safetensors", {k: (r.standard_normal(s) * 0.3).astype(np.float32) for k, s in init.items()})
    return d


def mpirun(work, np_, *args, env=None, timeout=120):
    cmd = [*MPI, *[x for k in (env or {}) for x in ("-x", k)], "-np", str(np_), *map(str, args)]
    return subprocess.run(cmd, capture_output=True, text=True, cwd=work, timeout=timeout,
                          env={**os.environ, "OMP_NUM_THREADS": "1", **(env or {})})


def reference(work, P, epochs, seed):
    """One PyTorch process on the global batches of a P-rank run: its parameters and momentum buffers."""
    import torch
    torch.set_num_threads(1)
    mod = load_module(str(work / "mlp.py"), "dist_ref")
    w = st_read(work / "init.safetensors")
    mod.model.load_state_dict({k: torch.tensor(np.array(v)) for k, v in w.items()})
    x, y = np.load(work / "x.npy"), np.load(work / "y.npy")
    per = -(-N // P)                       # DistributedSampler: ceil(N / P) per rank
    steps = per // B                       # each rank drops its last partial batch
    for e in range(1, epochs + 1):
        order = epoch_order(N, seed, e)
        padded = np.concatenate([order, order[:per * P - N]])
        shards = [padded[r::P] for r in range(P)]
        for s in range(steps):
            rows = np.concatenate([sh[s * B:(s + 1) * B] for sh in shards])
            mod.train_step(torch.tensor(x[rows]), torch.tensor(y[rows]))
    out = {k: v.detach().numpy() for k, v in mod.model.state_dict().items()}
    for p, name in zip(mod.model.parameters(), [n for n, _ in mod.model.named_parameters()]):
        out[f"optimizer.{name}.momentum_buffer"] = mod.optimizer.state[p]["momentum_buffer"].numpy()
    return out, steps


def check_same(got, want):
    for k, v in want.items():
        assert k in got, k
        np.testing.assert_allclose(got[k], v, rtol=1e-5, atol=1e-6, err_msg=k)


@pytest.mark.parametrize("P,env", [
    (2, {}), (3, {}),
    (2, {"CTC_MPI_INPLACE_KB": "0.3"}),                          # weights in place, biases packed
    (2, {"CTC_MPI_BUCKET": "direct", "CTC_MPI_PROGRESS": "0"}),  # every gradient in place, no progress thread
    (2, {"CTC_MPI_OVERLAP": "0"}),                               # every all-reduce at its wait
], ids=["np2", "np3-uneven", "np2-mixed", "np2-direct", "np2-no-overlap"])
def test_ranks_train_like_one_process_on_the_global_batch(work, P, env):
    """-np 2 (22 samples: 11 per rank, 2 steps of 4) and -np 3 (uneven: padded to 24, 8 per rank)."""
    out = work / f"p{P}.safetensors"
    r = mpirun(work, P, "./netd", "train", "--data", "x.npy", "--labels", "y.npy", "--epochs", 2, "--seed", 5,
               "--weights", "init.safetensors", "--save", out, "--save-training-state", "--log", f"log{P}.csv", env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    want, steps = reference(work, P, 2, 5)
    check_same(st_read(out), want)
    # rank 0 alone prints the epoch lines and writes the log: one row per global step
    assert len(re.findall(r"^epoch \d+: loss", r.stdout, re.M)) == 2, r.stdout
    assert len(open(work / f"log{P}.csv").read().strip().split("\n")) == 1 + 2 * steps


def test_one_rank_is_the_plain_program(work):
    """A distributed program under -np 1 trains exactly as the program built without --distributed,
    and only the distributed one links MPI."""
    run([CTC, "build", work / "mlp.py", "-o", work / "nets", *ENTRY])
    args = ["train", "--data", "x.npy", "--labels", "y.npy", "--epochs", 1, "--weights", "init.safetensors"]
    r = mpirun(work, 1, "./netd", *args, "--save", "d1.safetensors", "--save-training-state")
    assert r.returncode == 0, r.stderr
    run([work / "nets", *args, "--save", work / "s1.safetensors", "--save-training-state"], cwd=work)
    a, b = st_read(work / "d1.safetensors"), st_read(work / "s1.safetensors")
    assert all(np.array_equal(a[k], b[k]) for k in b)
    ldd = shutil.which("ldd")
    if ldd:
        assert "libmpi" in run([ldd, work / "netd"]).stdout
        assert "libmpi" not in run([ldd, work / "nets"]).stdout


def test_ddp_spelling(work):
    """DistributedDataParallel(model) (and model.module, init_process_group) compiles to the same
    distributed step as --distributed on the plain file; its bucket_cap_mb sets the buckets."""
    run([CTC, "build", work / "ddp.py", "-o", work / "netddp", *ENTRY])
    src = (work / "netddp.c").read_text()
    assert "ctc_comm_world()" in src and src.count("->start(") >= 3
    args = ["train", "--data", "x.npy", "--labels", "y.npy", "--epochs", 1, "--seed", 2, "--weights",
            "init.safetensors"]
    r1 = mpirun(work, 2, "./netddp", *args, "--save", "ddp.safetensors", "--save-training-state")
    r2 = mpirun(work, 2, "./netd", *args, "--save", "flag.safetensors", "--save-training-state")
    assert r1.returncode == 0 and r2.returncode == 0, r1.stderr + r2.stderr
    a, b = st_read(work / "ddp.safetensors"), st_read(work / "flag.safetensors")
    assert list(a) == list(b) and all(np.array_equal(a[k], b[k]) for k in b)
    # a plain build of the plain file has no hooks
    run([CTC, "compile", work / "mlp.py", "-o", work / "plain.c", *ENTRY])
    assert "ctc_comm" not in (work / "plain.c").read_text()


def test_a_rank_that_leaves_ends_the_others(work):
    """Rank 1 stops after one epoch; rank 0's next all-reduce times out (CTC_MPI_TIMEOUT) and
    ends the job with an error instead of hanging."""
    args = ["train", "--data", "x.npy", "--labels", "y.npy", "--epochs"]
    t0 = time.time()
    r = subprocess.run([*MPI, "-x", "CTC_MPI_TIMEOUT", "-np", "1", "./netd", *args, "4", ":", "-np", "1", "./netd",
                        *args, "1"], capture_output=True, text=True, cwd=work, timeout=90,
                       env={**os.environ, "CTC_MPI_TIMEOUT": "2", "OMP_NUM_THREADS": "1"})
    assert r.returncode != 0, r.stdout + r.stderr
    assert "did not complete within 2 s" in r.stderr, r.stderr
    assert time.time() - t0 < 60


def test_first_bucket_starts_before_the_last_gradient(work):
    """Overlap: the first bucket's all-reduce is started right after the kernel that makes its last
    gradient final, before the kernels computing the last gradient (fc1.weight's) run, and the
    runtime's trace shows it in flight while backward goes on."""
    src = (work / "netd.c").read_text()
    body = src[src.index("int net_train_step("):]
    first = body.index("->start(v_ctc_comm, m->arena, &ctc_bk_train_step[0]);")
    last_grad = body.index("-> fc1_weight_grad")
    assert first < last_grad
    nb = body.count("->start(")
    assert nb >= 3 and body.count("->wait(") == nb
    # every wait comes after all starts (the optimizer update follows backward)
    assert body.rindex("->start(") < body.index("->wait(")
    r = mpirun(work, 2, "./netd", "train", "--data", "x.npy", "--labels", "y.npy", "--epochs", 1,
               env={"CTC_MPI_TRACE": str(work / "trace")})
    assert r.returncode == 0, r.stderr
    ev = [line.split() for line in open(work / "trace.0")]
    step = ev[:next(i for i, e in enumerate(ev) if e[1] == "end" and e[2] == str(0)) + 1]   # the first step
    starts = [e for e in step if e[1] == "start"]
    assert [int(e[2]) for e in starts] == list(range(nb))
    t = {(e[1], e[2]): float(e[0]) for e in step}
    assert t[("start", "0")] < t[("start", str(nb - 1))] <= t[("wait", "0")]
    assert "fc1.weight" in starts[-1][3:]   # the last gradient backward computes is in the last bucket


ACCUM_MODEL = MODEL.replace('''def train_step(x, y):
    optimizer.zero_grad()
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()
    return loss''', '''def train_step(x, y):
    optimizer.zero_grad()
    total = 0
    for k in range(2):   # two micro-batches, accumulated, then clipped
        loss = F.cross_entropy(model(x[2 * k:2 * k + 2]), y[2 * k:2 * k + 2]) / 2
        loss.backward()
        total = total + loss
    torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
    optimizer.step()
    return total''')


def test_accumulation_and_clipping(work):
    """Two backward() per step (each sweep's gradients are averaged, as DDP does per backward) and
    clip_grad_norm_ of the accumulated, averaged gradients: the global micro-batches of one process."""
    import torch
    (work / "accum.py").write_text(ACCUM_MODEL)
    run([CTC, "build", work / "accum.py", "-o", work / "neta", "--distributed", "mpi", "--bucket-mb", "0.001", *ENTRY])
    P = 2
    r = mpirun(work, P, "./neta", "train", "--data", "x.npy", "--labels", "y.npy", "--epochs", 1, "--seed", 1,
               "--weights", "init.safetensors", "--save", "accum.safetensors", "--save-training-state")
    assert r.returncode == 0, r.stdout + r.stderr
    torch.set_num_threads(1)
    mod = load_module(str(work / "accum.py"), "dist_accum")
    w = st_read(work / "init.safetensors")
    mod.model.load_state_dict({k: torch.tensor(np.array(v)) for k, v in w.items()})
    x, y = np.load(work / "x.npy"), np.load(work / "y.npy")
    per = -(-N // P)
    order = epoch_order(N, 1, 1)
    shards = [np.concatenate([order, order[:per * P - N]])[r::P] for r in range(P)]
    F = torch.nn.functional
    for s in range(per // B):
        mod.optimizer.zero_grad()
        for k in range(2):
            rows = np.concatenate([sh[s * B + 2 * k:s * B + 2 * k + 2] for sh in shards])
            (F.cross_entropy(mod.model(torch.tensor(x[rows])), torch.tensor(y[rows])) / 2).backward()
        torch.nn.utils.clip_grad_norm_(mod.model.parameters(), 0.5)
        mod.optimizer.step()
    check_same(st_read(work / "accum.safetensors"), {k: v.detach().numpy() for k, v in mod.model.state_dict().items()})


def _cuda_home():
    for d in [os.environ.get("CUDA_HOME", ""), "/usr/local/cuda", "/usr"]:
        if d and os.path.exists(os.path.join(d, "include", "nccl.h")) and os.path.exists(
                os.path.join(d, "include", "cuda_runtime.h")):
            return d
    return None


@pytest.mark.skipif(not _cuda_home(), reason="no nccl.h and cuda_runtime.h (CUDA toolkit with NCCL)")
def test_nccl_communicator_compiles_and_links(tmp_path):
    """rt_nccl.c (the same ctc_comm with ncclAllReduce on the device arena, for the CUDA target) builds
    clean and links against NCCL and the CUDA runtime; it runs only where there are GPUs."""
    cuda = _cuda_home()
    rt = os.path.join(os.path.dirname(CTC), "..", "runtime_min")
    flags = ["-std=c11", "-Wall", "-Wextra", "-Werror", "-pedantic", "-I" + rt, "-I" + os.path.join(cuda, "include")]
    run(["mpicc", "-DCTC_NCCL", *flags, "-c", os.path.join(rt, "rt_nccl.c"), "-o", tmp_path / "nccl.o"])
    (tmp_path / "main.c").write_text('#include "ctc_rt.h"\nint main(void) { return ctc_comm_world() == 0; }\n')
    lib = next((p for p in (os.path.join(cuda, "lib64"), os.path.join(cuda, "lib")) if os.path.isdir(p)), cuda)
    run(["mpicc", *flags, tmp_path / "main.c", tmp_path / "nccl.o", "-L" + lib, "-lnccl", "-lcudart",
         "-o", tmp_path / "nccl_main"])
    # without CTC_NCCL the file is empty (a hand build of $RT/rt_*.c with cc)
    run(["cc", *flags, "-c", os.path.join(rt, "rt_nccl.c"), "-o", tmp_path / "empty.o"])


@pytest.mark.parametrize("line,opts,msg", [
    ("model = torch.nn.parallel.DistributedDataParallel(3)", [],
     "error: DistributedDataParallel() wraps an nn.Module, not 'int'"),
    ("model = DDP(Net(), bucket_cap_mb=-1)", [], "error: bucket_cap_mb must be a positive number of MiB, not -1"),
    ("model = Net()", ["--distributed", "gloo"], "ctc: error: unknown --distributed 'gloo' (expected mpi"),
    ("model = Net()", ["--bucket-mb", "0"], "ctc: error: --bucket-mb needs a positive number of MiB, not '0'"),
])
def test_diagnostics(work, line, opts, msg):
    src = DDP_MODEL.replace("model = DDP(Net(), bucket_cap_mb=0.0005)", line)
    assert line in src
    path = work / "bad.py"
    path.write_text(src)
    r = run([CTC, "check", path, *opts, *ENTRY], check=False)
    assert r.returncode == 1 and msg in r.stderr, r.stderr
    if not opts:
        assert re.search(r"bad\.py:\d+:\d+: error:", r.stderr), r.stderr
