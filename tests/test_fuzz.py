"""Continuous fuzzing (issue 12 item 4): the libFuzzer harnesses of fuzz/ (built
by `ninja fuzz` with clang, ASan and UBSan) each run for a few seconds from seed
corpora made of examples/, tests/fuzz_seeds/ and valid files written here; then
every input under tests/fuzz_regress/<harness>/ (the crashes found so far,
minimised) is replayed by the harness. Skipped, saying why, when clang's
libFuzzer is not installed (Debian: libclang-rt-14-dev, which clang-14 pulls in).

    CTC_FUZZ_SECONDS=600 /usr/bin/python3 -m pytest tests/test_fuzz.py -k frontend

runs a longer campaign; a finding is written to the test's tmp folder (the path is
in the failure message): minimise it (`build/fuzz/fuzz_X -minimize_crash=1 FILE`),
fix the cause and add it to tests/fuzz_regress/<harness>/."""
import glob
import gzip
import os
import shutil
import struct
import subprocess

import numpy as np
import pytest

from ctc_testlib import ROOT, ninja, st_write

SECONDS = int(os.environ.get("CTC_FUZZ_SECONDS", "3"))
HARNESSES = ["frontend", "safetensors", "npy", "idx", "args", "pt"]
REGRESS = os.path.join(ROOT, "tests", "fuzz_regress")
CORPUS = os.path.join(ROOT, "tests", "fuzz_corpus")  # hand-written seeds (args)


@pytest.fixture(scope="module")
def fuzz_bin():
    if not shutil.which("clang"):
        pytest.skip("clang is not installed: no libFuzzer harnesses")
    probe = subprocess.run(["clang", "-print-file-name=libclang_rt.fuzzer-x86_64.a"], capture_output=True, text=True)
    if not os.path.isabs(probe.stdout.strip()) or not os.path.exists(probe.stdout.strip()):
        pytest.skip("clang's libFuzzer runtime (libclang_rt.fuzzer, Debian package libclang-rt-14-dev) is missing")
    r = ninja("fuzz")
    assert r.returncode == 0, "ninja fuzz failed:\n" + r.stdout[-4000:] + r.stderr[-4000:]
    return os.path.join(ROOT, "build", "fuzz")


def npy_v(arr, version):
    """A .npy file of format version 1, 2 or 3 (numpy writes 1 unless it must)."""
    import io
    b = io.BytesIO()
    np.lib.format.write_array(b, arr, version=(version, 0))
    return b.getvalue()


def idx_bytes(arr):
    codes = {np.dtype(np.uint8): 0x08, np.dtype(np.int8): 0x09, np.dtype(np.int16): 0x0B, np.dtype(np.int32): 0x0C,
             np.dtype(np.float32): 0x0D, np.dtype(np.float64): 0x0E}
    head = struct.pack(">I", codes[arr.dtype] << 8 | arr.ndim) + struct.pack(">" + "I" * arr.ndim, *arr.shape)
    return head + arr.astype(arr.dtype.newbyteorder(">")).tobytes()


def seeds(name, d):
    """Writes the seed corpus of harness `name` into folder d."""
    rng = np.random.default_rng(0)
    arrays = [np.arange(6, dtype=np.float32).reshape(2, 3), np.float64(2.5), np.array([1, -2, 3], np.int64),
              np.array([[True, False]]), np.arange(8, dtype=np.uint8).reshape(2, 2, 2), np.array([7], np.int32),
              rng.standard_normal((3, 1, 2)).astype(np.float32), np.asfortranarray(np.ones((2, 2), np.float32))]
    if name == "frontend":
        for p in glob.glob(os.path.join(ROOT, "examples", "*.py")) + glob.glob(os.path.join(ROOT, "tests", "fuzz_seeds", "*.py")):
            if os.path.basename(p) != "train_torch.py" and os.path.getsize(p) <= 64 * 1024:
                shutil.copy(p, d)
    elif name == "safetensors":
        st_write(os.path.join(d, "model.st"), {"w": np.ones((2, 3), np.float32), "steps": np.array(3, np.int64),
                                               "opt.m": np.zeros(4, np.float32)})
        st_write(os.path.join(d, "mixed.st"), {f"t{i}": a for i, a in enumerate(arrays) if a.ndim})
        st_write(os.path.join(d, "empty.st"), {})
    elif name == "npy":
        for i, a in enumerate(arrays):
            for v in (1, 2, 3):
                with open(os.path.join(d, f"a{i}_v{v}.npy"), "wb") as f:
                    f.write(npy_v(np.asarray(a), v))
    elif name == "idx":
        for i, a in enumerate([np.arange(24, dtype=np.uint8).reshape(2, 3, 4), np.array([1, 0, 2], np.uint8),
                               np.array([[1.5, -2]], np.float32), np.array([3, -4], np.int16),
                               np.array([9], np.int32), np.array([[0.25]], np.float64), np.array([-1, 1], np.int8)]):
            with open(os.path.join(d, f"i{i}.idx"), "wb") as f:
                f.write(idx_bytes(a))
            with open(os.path.join(d, f"i{i}.idx.gz"), "wb") as f:
                f.write(gzip.compress(idx_bytes(a)))
        with open(os.path.join(d, "x.npy"), "wb") as f:
            f.write(npy_v(np.arange(8, dtype=np.float32).reshape(4, 2), 1))
    elif name == "pt":   # torch.save files: zip and legacy, nested, views, half precision
        import torch
        torch.manual_seed(0)
        w = torch.randn(2, 3)
        sd = {"w": w, "steps": torch.tensor(3), "opt.m": torch.randn(4, dtype=torch.float64)}
        torch.save(sd, os.path.join(d, "sd.pt"))
        torch.save(sd, os.path.join(d, "legacy.pt"), _use_new_zipfile_serialization=False)
        torch.save({"model": sd, "iter_num": 5, "config": {"lr": 0.1, "name": "x", "b": (True, None)}},
                   os.path.join(d, "nested.pt"), _use_new_zipfile_serialization=False)
        torch.save({"w": torch.randn(3, 2).half().t(), "tied": w, "steps": torch.tensor(3, dtype=torch.int8),
                    "opt.m": torch.randn(8).bfloat16()[::2]}, os.path.join(d, "views.pt"),
                   _use_new_zipfile_serialization=False)
    src = os.path.join(CORPUS, name)
    for p in glob.glob(os.path.join(src, "*")):
        shutil.copy(p, d)


@pytest.mark.slow
@pytest.mark.parametrize("name", HARNESSES)
def test_fuzz_harness(fuzz_bin, tmp_path, name):
    exe = os.path.join(fuzz_bin, f"fuzz_{name}")
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    seeds(name, str(corpus))
    art = str(tmp_path) + "/"
    timeout, rss = (60, 4096) if name == "frontend" else (10, 2048)
    cmd = [exe, f"-max_total_time={SECONDS}", f"-timeout={timeout}", f"-rss_limit_mb={rss}", "-close_fd_mask=3",
           f"-artifact_prefix={art}", "-print_final_stats=1", str(corpus)]
    if name == "frontend":
        # ctc's own compile-time limits (20 million evaluation steps, 2 GiB of values) take
        # longer and more memory under the sanitizers than libFuzzer's defaults allow
        cmd.insert(1, "-dict=" + os.path.join(ROOT, "fuzz", "python.dict"))
    work = tmp_path / "work"  # fuzz_args's working folder
    work.mkdir()
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=SECONDS + 120, errors="replace",
                       env={**os.environ, "CTC_FUZZ_DIR": str(work)})
    found = sorted(p for p in os.listdir(tmp_path) if p.split("-")[0] in ("crash", "leak", "timeout", "oom"))
    assert r.returncode == 0 and not found, (f"fuzz_{name} found a problem ({', '.join(found) or 'exit ' + str(r.returncode)}"
                                            f" in {tmp_path}):\n" + r.stderr[-6000:])
    runs = [line for line in r.stderr.splitlines() if line.startswith("stat::number_of_executed_units")]
    assert runs and int(runs[0].split(":")[-1]) > 0, r.stderr[-3000:]


@pytest.mark.parametrize("name", HARNESSES)
def test_fuzz_regressions(fuzz_bin, tmp_path, name):
    """Every crash found so far, replayed through its harness (libFuzzer runs the files once)."""
    files = sorted(glob.glob(os.path.join(REGRESS, name, "*")))
    if not files:
        pytest.skip(f"no regression inputs for fuzz_{name} yet")
    limits = ["-timeout=60", "-rss_limit_mb=4096"] if name == "frontend" else []
    r = subprocess.run([os.path.join(fuzz_bin, f"fuzz_{name}"), "-close_fd_mask=3", *limits, *files], capture_output=True,
                       text=True, timeout=300, errors="replace", env={**os.environ, "CTC_FUZZ_DIR": str(tmp_path)})
    assert r.returncode == 0, r.stderr[-6000:]
