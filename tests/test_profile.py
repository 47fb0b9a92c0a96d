"""The profiler: `ctc build --profile`, then `./net run|bench|train --profile trace.json`.

The trace must be valid Chrome trace JSON with one event per kernel call (the
generated code has one ctc_prof_record per kernel) plus one per entry call,
attributed to model lines and to forward, backward and optimizer code; the table
lists model lines; a program built without --profile carries no timing code."""
import json
import os
import re
import subprocess

import numpy as np

from ctc_testlib import CTC, run, MLP_TRAIN_SRC

MODEL = MLP_TRAIN_SRC


def build(tmp, *opts):
    py = os.path.join(tmp, "prof_model.py")
    with open(py, "w") as f:
        f.write(MODEL)
    exe = os.path.join(tmp, "net" + ("_p" if opts else ""))
    run([CTC, "build", py, "-o", exe, *opts])
    return exe


def records(c_text, entry):
    """The kernels timed in one entry of the generated C: its ctc_prof_record calls."""
    return len(re.findall(r"ctc_prof_record\(m->prof, &ctc_prof_%s\[(\d+)\]" % entry, c_text))


def test_trace_and_table(tmp_path):
    tmp = str(tmp_path)
    exe = build(tmp, "--profile")
    c_text = open(exe + ".c").read()
    n_fwd, n_train = records(c_text, "forward") - 1, records(c_text, "train_step") - 1   # minus the entry's own
    assert n_fwd >= 2 and n_train > n_fwd, (n_fwd, n_train)   # fc1 + tanh, fc2 + bias: GEMMs with epilogues
    rng = np.random.default_rng(0)
    np.save(os.path.join(tmp, "x.npy"), rng.standard_normal((8, 20)).astype(np.float32))
    np.save(os.path.join(tmp, "y.npy"), rng.integers(0, 4, 8))
    trace = os.path.join(tmp, "t.json")
    r = run([exe, "run", "train_step", "--input", os.path.join(tmp, "x.npy"), "--input", os.path.join(tmp, "y.npy"),
             "--repeat", "3", "--profile", trace])
    d = json.load(open(trace))
    ev = [e for e in d["traceEvents"] if e.get("ph") == "X"]
    kern = [e for e in ev if e["cat"] != "entry" and e["tid"] == 1]   # the kernels' track (threads: tid 2, 3, ...)
    assert len(kern) == 3 * n_train, (len(kern), n_train)
    assert len([e for e in ev if e["cat"] == "entry"]) == 3
    assert {e["cat"] for e in kern} == {"forward", "backward", "optimizer"}
    for e in ev:
        assert e["dur"] >= 0 and e["ts"] >= 0 and e["args"]["entry"] == "train_step"
    lines = {e["args"]["line"] for e in kern}
    assert "prof_model.py:14" in lines and "prof_model.py:27" in lines, lines   # fc1 + tanh; optimizer.step()
    mm = [e for e in kern if e["name"] == "matmul"]
    assert mm and all(e["args"]["flops"] > 0 for e in mm)
    # the table: a header, rows with model lines and phases, the totals
    out = r.stdout
    assert "Name (ops)" in out and "Model line" in out and "GFLOP/s" in out, out
    assert re.search(r"^matmul\s+prof_model\.py:\d+\s+(forward|backward)\s+\d+", out, re.M), out
    assert "Kernels total:" in out and "trace: " + trace in out

    # bench and train take --profile too
    r = run([exe, "bench", "forward", "--iters", "4", "--warmup", "2", "--profile", trace])
    d = json.load(open(trace))
    assert len([e for e in d["traceEvents"] if e.get("ph") == "X" and e["cat"] != "entry" and e["tid"] == 1]) == 4 * n_fwd
    np.save(os.path.join(tmp, "xs.npy"), rng.standard_normal((24, 20)).astype(np.float32))
    np.save(os.path.join(tmp, "ys.npy"), rng.integers(0, 4, 24))
    r = run([exe, "train", "--data", os.path.join(tmp, "xs.npy"), "--labels", os.path.join(tmp, "ys.npy"),
             "--epochs", "2", "--profile", trace])
    d = json.load(open(trace))
    assert len([e for e in d["traceEvents"] if e.get("ph") == "X" and e["cat"] == "entry"]) == 6   # 2 epochs x 3


def test_no_timing_code_without_profile(tmp_path):
    tmp = str(tmp_path)
    exe = build(tmp)
    assert "ctc_prof" not in open(exe + ".c").read() and "ctc_profile" not in open(exe + ".h").read()
    np.save(os.path.join(tmp, "x.npy"), np.zeros((8, 20), np.float32))
    r = run([exe, "infer", "--random-weights", "--input", os.path.join(tmp, "x.npy"), "--profile", os.path.join(tmp, "t.json")],
            check=False)
    assert r.returncode == 1 and "build it with `ctc build --profile`" in r.stderr, r.stderr
    # the same outputs with and without the timing code
    exe_p = build(tmp, "--profile")
    np.save(os.path.join(tmp, "x.npy"), np.random.default_rng(1).standard_normal((8, 20)).astype(np.float32))
    outs = []
    for e in (exe, exe_p):
        o = os.path.join(tmp, os.path.basename(e) + ".npy")
        run([e, "infer", "--random-weights", "--input", os.path.join(tmp, "x.npy"), "--output", o])
        outs.append(np.load(o))
    assert np.array_equal(outs[0], outs[1])


WIDE = MODEL.replace("nn.Linear(20, 32)", "nn.Linear(20, 512)").replace("nn.Linear(32, 4)", "nn.Linear(512, 4)") \
    .replace("torch.randn(8, 20)", "torch.randn(256, 20)").replace("torch.zeros(8,", "torch.zeros(256,")


def test_threads(tmp_path):
    """Kernels whose loops run on OpenMP threads record each thread's share: one event
    per thread and call on the thread's own track, inside the kernel's own event, and
    the table's second part gives the busiest and idlest thread."""
    tmp = str(tmp_path)
    py = os.path.join(tmp, "wide.py")
    with open(py, "w") as f:
        f.write(WIDE)
    exe = os.path.join(tmp, "net")
    run([CTC, "build", py, "-o", exe, "--profile"])
    c_text = open(exe + ".c").read()
    assert "CTC_PROF_PARALLEL" in c_text and "ctc_prof_thread(m->prof, &ctc_prof_forward[" in c_text
    trace = os.path.join(tmp, "t.json")
    env = dict(os.environ, OMP_NUM_THREADS="2")
    r = subprocess.run([exe, "bench", "forward", "--iters", "3", "--warmup", "1", "--profile", trace], env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    ev = [e for e in json.load(open(trace))["traceEvents"] if e.get("ph") == "X"]
    kern = [e for e in ev if e["tid"] == 1 and e["cat"] != "entry"]
    thr = [e for e in ev if e["tid"] >= 2]
    assert {e["args"]["thread"] for e in thr} == {0, 1}, thr[:4]
    assert {e["tid"] for e in thr} == {2, 3}
    for t in thr:   # within a call of the same kernel (1 us of rounding)
        assert any(k["name"] == t["name"] and k["args"]["line"] == t["args"]["line"] and
                   k["ts"] - 1 <= t["ts"] and t["ts"] + t["dur"] <= k["ts"] + k["dur"] + 1 for k in kern), t
    assert "Parallel kernels: busy ms per OpenMP thread" in r.stdout and "Imbalance" in r.stdout, r.stdout
    assert re.search(r"^gemm: matmul\+add\+tanh\s+wide\.py:14\s+forward\s+[0-9.]+\s+[0-9.]+\s+[0-9.]+x$", r.stdout, re.M), r.stdout
