"""NCCL data-parallel training of the CUDA target on real GPUs (issue 11, item 3), skipped
with the reason where there is no GPU, no MPI launcher or no NCCL. `ctc build --target cuda
--distributed nccl`: one rank trains exactly as the program built without --distributed
(the hooks are no-ops for one rank), and with two or more GPUs `mpirun -np 2` (one rank per
GPU) trains to the parameters of one PyTorch process on the global batches (rtol 1e-4: the
GPU's reduction orders). Written without a GPU at hand; tests/test_nccl.py checks the same
entries emulated on the CPU with the MPI communicator."""
import shutil
import subprocess

import numpy as np
import pytest

from ctc_testlib import CTC, compare, run, st_read, st_write
from test_distributed import C, D, ENTRY, H, MODEL, MPIRUN, N, mpirun, reference
from test_nccl import _nccl_missing


def _ngpu():
    smi = shutil.which("nvidia-smi")
    if not smi:
        return 0
    r = subprocess.run([smi, "-L"], capture_output=True, text=True)
    return r.stdout.count("GPU ") if r.returncode == 0 else 0


NGPU = _ngpu()
REASON = "no GPU (nvidia-smi lists none)" if not NGPU else _nccl_missing()
pytestmark = pytest.mark.skipif(REASON is not None, reason=REASON or "")


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    d = tmp_path_factory.mktemp("nccl_gpu")
    (d / "mlp.py").write_text(MODEL)
    r = np.random.default_rng(0)   # test_distributed.py's data and initial weights
    np.save(d / "x.npy", r.standard_normal((N, D)).astype(np.float32))
    np.save(d / "y.npy", r.integers(0, C, N).astype(np.int64))
    init = {"fc1.weight": (H, D), "fc1.bias": (H,), "fc2.weight": (H, H), "fc2.bias": (H,),
            "fc3.weight": (C, H), "fc3.bias": (C,)}
    st_write(d / "init.safetensors", {k: (r.standard_normal(s) * 0.3).astype(np.float32) for k, s in init.items()})
    run([CTC, "build", d / "mlp.py", "--target", "cuda", "--distributed", "nccl", "--bucket-mb", "0.0005",
         "-o", d / "netn", *ENTRY], timeout=900)
    return d


TRAIN = ["train", "--data", "x.npy", "--labels", "y.npy", "--epochs", "2", "--seed", "5", "--weights",
         "init.safetensors"]


def test_one_rank_trains_like_the_plain_cuda_program(work):
    run([CTC, "build", work / "mlp.py", "--target", "cuda", "-o", work / "netp", *ENTRY], timeout=900)
    run([work / "netn", *TRAIN, "--save", "n1.safetensors"], cwd=work)
    run([work / "netp", *TRAIN, "--save", "p1.safetensors"], cwd=work)
    a, b = st_read(work / "n1.safetensors"), st_read(work / "p1.safetensors")
    assert list(a) == list(b)
    for k in b:
        compare(f"{k}: one NCCL rank vs the plain CUDA program", a[k], b[k], 1e-6, 1e-7)


@pytest.mark.skipif(NGPU < 2 or not MPIRUN, reason="needs 2 GPUs and mpirun (one rank per GPU)")
def test_two_ranks_train_like_one_process_on_the_global_batch(work):
    r = mpirun(work, 2, "./netn", *TRAIN, "--save", "n2.safetensors", timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    want, _ = reference(work, 2, 2, 5)
    got = st_read(work / "n2.safetensors")
    for k, v in want.items():
        compare(f"{k}: 2 NCCL ranks vs one PyTorch process", got[k], v, 1e-4, 1e-5)
