"""Sanitizer builds in the test run (issue 12 item 5), LeakSanitizer on:

- the ASan+UBSan ctc (build/asan/ctc, as test_fuzz_backend.py builds it) compiles
  the examples and the fuzz seeds, and rejects every case of test_diagnostics.py
  and test_limits.py with its diagnostic, without a sanitizer report or a leak
  (main frees its arena);
- one generated training program built with ASan+UBSan (model and runtime) runs
  info, infer, bench and train with checkpoints, the test set, the log, NaN
  skipping and resume, without a report or a leak, and its resumed run ends
  bit-identical to the uninterrupted one."""
import glob
import os
import re
import subprocess

import numpy as np
import pytest

import test_diagnostics
import test_limits
from ctc_testlib import ROOT, st_read
from test_checkpoint import MODEL as TRAIN_MODEL
from test_fuzz_backend import build_asan

ENV = {**os.environ,
       "ASAN_OPTIONS": "detect_leaks=1:exitcode=97:allocator_may_return_null=1",
       "UBSAN_OPTIONS": "print_stacktrace=1:halt_on_error=1:exitcode=98",
       "LSAN_OPTIONS": "exitcode=96",
       "CTC_NO_REEXEC": "1", "OMP_NUM_THREADS": "1"}
REPORT = re.compile(r"ERROR: AddressSanitizer|runtime error:|UndefinedBehaviorSanitizer|ERROR: LeakSanitizer|"
                    r"AddressSanitizer:DEADLYSIGNAL")
RT = os.path.join(ROOT, "runtime_min")
RT_SRC = ["rt_error.c", "rt_safetensors.c", "rt_npy.c", "rt_model.c", "rt_driver.c", "rt_train.c", "rt_gradcheck.c", "rt_data.c",
          "rt_pt.c", "rt_profile.c", "rt_text.c"]


@pytest.fixture(scope="module")
def asan_ctc():
    return build_asan()


def clean(r, what):
    assert not REPORT.search(r.stderr), f"{what}: sanitizer report:\n{r.stderr[-6000:]}"
    assert r.returncode not in (96, 97, 98), f"{what}: exit {r.returncode}\n{r.stderr[-4000:]}"


def test_ctc_compiles_examples_leak_free(asan_ctc, tmp_path):
    files = [os.path.join(ROOT, "examples", f) for f in ("cifar_net.py", "hessian_top_eigenvalue.py",
                                                         "mlp_sequential.py", "seed_cnn.py", "char_gpt.py")]
    files += sorted(glob.glob(os.path.join(ROOT, "tests", "fuzz_seeds", "*.py")))
    # the KV-cache derivation given up half-way (its own jump buffer and muted diagnostics)
    src = open(os.path.join(ROOT, "examples", "char_gpt.py")).read()
    (tmp_path / "nodecode.py").write_text(src.replace("float('-inf'))", "-1e9)"))
    files.append(str(tmp_path / "nodecode.py"))
    for p in files:
        r = subprocess.run([asan_ctc, "compile", p, "-o", tmp_path / "m.c"], capture_output=True, text=True, env=ENV,
                           timeout=120)
        clean(r, p)
        assert r.returncode == 0, f"{p}:\n{r.stderr[-3000:]}"


def test_training_loops_leak_free(asan_ctc, tmp_path):
    """The loop-body entries (loops.c): a driver evaluated statement by statement,
    one failing (its error silenced through a memory stream and a longjmp)."""
    import test_train_loop
    p = tmp_path / "drv.py"
    p.write_text(test_train_loop.DRIVER.replace("SCALE", "scale"))
    for args, rc in (([test_train_loop.FILE, "--input", "data=f32[4,1,12,12]"], 0), ([p, "--input", "x=f32[5,6]"], 1)):
        r = subprocess.run([asan_ctc, "check", *args], capture_output=True, text=True, env=ENV, timeout=120)
        clean(r, str(args[0]))
        assert r.returncode == rc, r.stderr[-3000:]


def test_ctc_diagnostics_leak_free(asan_ctc, tmp_path):
    cases = [(c[1], c[2], c[3]) for c in test_diagnostics.CASES]
    cases += [(src, (), want) for _, src, want in test_limits.CASES if want]
    for src, opts, want in cases:
        p = tmp_path / "bad.py"
        p.write_bytes(src if isinstance(src, bytes) else src.encode())
        r = subprocess.run([asan_ctc, "check", p, *opts], capture_output=True, text=True, env=ENV, timeout=120,
                           errors="replace")
        clean(r, want)
        assert r.returncode == 1 and want.split(": error: ")[-1] in r.stderr, (want, r.stderr[-3000:])


def test_training_program_under_asan_ubsan(asan_ctc, tmp_path):
    (tmp_path / "m.py").write_text(TRAIN_MODEL)
    r = subprocess.run([asan_ctc, "compile", tmp_path / "m.py", "-o", tmp_path / "net.c"], capture_output=True,
                       text=True, env=ENV, timeout=120)
    clean(r, "compile")
    exe = tmp_path / "net"
    cmd = ["cc", "-std=c11", "-O1", "-g", "-fno-omit-frame-pointer", "-fsanitize=address,undefined",
           "-fno-sanitize-recover=all", "-D_POSIX_C_SOURCE=200809L", "-DCTC_MAIN", f"-I{RT}", tmp_path / "net.c",
           *[os.path.join(RT, f) for f in RT_SRC], "-o", exe, "-lz", "-lm"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]
    rng = np.random.default_rng(0)
    x = rng.standard_normal((64, 16)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", rng.integers(0, 4, 64))
    x[9, 2] = np.nan
    np.save(tmp_path / "xnan.npy", x)
    np.save(tmp_path / "in.npy", x[:8])

    def net(*args, status=0):
        r = subprocess.run([exe, *map(str, args)], capture_output=True, text=True, env=ENV, timeout=300, cwd=tmp_path)
        clean(r, " ".join(map(str, args)))
        assert r.returncode == status, r.stderr[-3000:]
        return r

    data = ["--data", "x.npy", "--labels", "y.npy"]
    net("info")
    net("infer", "--random-weights", "--input", "in.npy", "--output", "out.npy")
    net("bench", "train_step", "--iters", "2", "--warmup", "1", "--int-max", "4")
    net("train", *data, "--epochs", "3", "--seed", "3", "--test-data", "x.npy", "--test-labels", "y.npy",
        "--log", "log.csv", "--save", "full.safetensors", "--save-training-state")
    net("train", *data, "--epochs", "1", "--seed", "3", "--checkpoint", "ck", "--checkpoint-every", "3")
    net("train", *data, "--epochs", "3", "--resume", "ck", "--checkpoint", "ck", "--save", "resumed.safetensors", "--save-training-state")
    assert (tmp_path / "full.safetensors").read_bytes() == (tmp_path / "resumed.safetensors").read_bytes()
    r = net("train", "--data", "xnan.npy", "--labels", "y.npy", "--epochs", "1", "--nan-policy", "skip")
    assert "update skipped" in r.stderr
    r = net("train", "--data", "xnan.npy", "--labels", "y.npy", "--epochs", "1", "--checkpoint", "ck2", status=1)
    assert "loss is nan at epoch 1" in r.stderr
    for k, v in st_read(tmp_path / "full.safetensors").items():
        assert np.isfinite(v).all(), k
