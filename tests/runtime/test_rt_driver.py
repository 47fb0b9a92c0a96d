"""The command-line driver (ctc_main) around the fake model: run/infer, weights,
inputs and outputs, --save, info, --help, exit codes and messages."""
import os
import re
import subprocess

import numpy as np
import pytest

import rt_testlib as lib
from rt_testlib import run


def x_input(tmp_path, seed=1, dtype=np.float32, shape=(2, 4), name="x.npy"):
    x = np.random.default_rng(seed).standard_normal(shape).astype(dtype)
    p = tmp_path / name
    np.save(p, x)
    return x, p


def test_forward_matches_numpy(fake, tmp_path):
    weights = lib.random_weights()
    lib.st_write(tmp_path / "w.st", weights)
    x, xp = x_input(tmp_path)
    r = run(fake, "run", "forward", "--weights", tmp_path / "w.st", "--input", xp, "--output", tmp_path / "y.npy")
    assert r.returncode == 0, r.stderr
    assert r.stdout == "" and r.stderr == ""  # silent on success
    w, b = weights[0][1], weights[1][1]
    y = np.load(tmp_path / "y.npy")
    assert y.dtype == np.float32 and y.shape == (2, 3)
    np.testing.assert_allclose(y, x @ w.T + b, rtol=1e-6, atol=1e-6)


def test_forward_without_weights_uses_init(fake, tmp_path):
    x, xp = x_input(tmp_path)
    r = run(fake, "run", "--input", xp, "--output", tmp_path / "y.npy")  # default entry
    assert r.returncode == 0, r.stderr
    np.testing.assert_allclose(np.load(tmp_path / "y.npy"), x @ lib.INIT_W.T + lib.INIT_B, rtol=1e-6, atol=1e-6)


def test_infer_is_run_forward(fake, tmp_path):
    lib.st_write(tmp_path / "w.st", lib.random_weights(3))
    _, xp = x_input(tmp_path)
    for cmd, out in ((["run", "forward"], "a.npy"), (["infer"], "b.npy")):
        r = run(fake, *cmd, "--weights", tmp_path / "w.st", "--input", xp, "--output", tmp_path / out)
        assert r.returncode == 0, r.stderr
    assert np.array_equal(np.load(tmp_path / "a.npy"), np.load(tmp_path / "b.npy"))
    r = run(fake, "infer", "mix", "--input", xp)  # infer takes no entry name
    assert r.returncode == 1 and "unexpected argument 'mix'" in r.stderr


def test_infer_without_weights_is_refused(fake, tmp_path):
    """infer on a model with parameters and no --weights would answer with the untrained
    initial parameters: an error naming both ways out, nothing written."""
    _, xp = x_input(tmp_path)
    r = run(fake, "infer", "--input", xp, "--output", tmp_path / "y.npy")
    assert r.returncode == 1, r.stdout + r.stderr
    assert "--weights FILE" in r.stderr and "--random-weights" in r.stderr
    assert r.stdout == "" and not (tmp_path / "y.npy").exists()
    r = run(fake, "infer", "--weights", tmp_path / "w.st", "--random-weights", "--input", xp)
    assert r.returncode == 1 and "exclude each other" in r.stderr
    r = run(fake, "run", "--random-weights", "--input", xp)   # run keeps its initial parameters without asking
    assert r.returncode == 1 and "--random-weights is an option of infer" in r.stderr
    help_text = run(fake, "--help").stdout
    assert "--random-weights" in help_text and "summary" in help_text


def test_infer_random_weights_runs_on_init(fake, tmp_path):
    x, xp = x_input(tmp_path)
    r = run(fake, "infer", "--random-weights", "--input", xp, "--output", tmp_path / "y.npy")
    assert r.returncode == 0, r.stderr
    assert r.stdout == "" and r.stderr == ""   # an --output: silent
    np.testing.assert_allclose(np.load(tmp_path / "y.npy"), x @ lib.INIT_W.T + lib.INIT_B, rtol=1e-6, atol=1e-6)


def test_infer_without_output_prints_a_summary(fake, tmp_path):
    """No --output: one line per output with name, dtype, shape, min/max/mean, its first
    values and, for an [N, C] float output, the argmax of the rows."""
    weights = lib.random_weights(4)
    lib.st_write(tmp_path / "w.st", weights)
    x, xp = x_input(tmp_path, seed=9)
    y = x @ weights[0][1].T + weights[1][1]
    r = run(fake, "infer", "--weights", tmp_path / "w.st", "--input", xp)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert len(lines) == 3, r.stdout
    head = re.fullmatch(r"output 'y' f32\[2, 3\]: min (\S+), max (\S+), mean (\S+)", lines[0])
    assert head, lines[0]
    np.testing.assert_allclose([float(v) for v in head.groups()], [y.min(), y.max(), y.mean()], rtol=1e-5)
    assert lines[1].startswith("  first values: ")
    np.testing.assert_allclose([float(v) for v in lines[1].split(":")[1].split()], y.ravel(), rtol=1e-5)
    assert lines[2] == "  argmax of rows 0 to 1: " + " ".join(str(int(k)) for k in y.argmax(1))


def test_option_equals_syntax_and_f64_weights(fake, tmp_path):
    """--opt=value works; F64 weights are accepted (converted) for f32 params."""
    weights = [(n, a.astype(np.float64) if a.dtype == np.float32 else a) for n, a in lib.random_weights(5)]
    lib.st_write(tmp_path / "w.st", weights)
    x, xp = x_input(tmp_path)
    r = run(fake, "run", f"--weights={tmp_path / 'w.st'}", f"--input={xp}", f"--output={tmp_path / 'y.npy'}")
    assert r.returncode == 0, r.stderr
    w, b = weights[0][1].astype(np.float32), weights[1][1].astype(np.float32)
    np.testing.assert_allclose(np.load(tmp_path / "y.npy"), x @ w.T + b, rtol=1e-6, atol=1e-6)


def mix_inputs(tmp_path):
    vals = {"a": np.array([True, False, True, False]),
            "u": np.array([1, 2, 250, 0], np.uint8),
            "d": np.array([1.5, -2.25]),
            "n": np.array([1, -2, 2**30], np.int32),
            "m": np.array([2**40, -5], np.int64)}
    paths = {}
    for k, v in vals.items():
        paths[k] = tmp_path / f"{k}.npy"
        np.save(paths[k], v)
    return vals, paths


def check_mix_outputs(tmp_path, vals, names=("o", "e", "k", "q", "z")):
    want = {"o": (vals["a"] + vals["u"]).astype(np.uint8), "e": 2 * vals["d"].astype(np.float64),
            "k": 2 * vals["n"].astype(np.int64), "q": (vals["m"] + 1).astype(np.int32),
            "z": ~vals["a"].astype(bool)}
    for k in names:
        got = np.load(tmp_path / f"out_{k}.npy")
        assert got.dtype == want[k].dtype and np.array_equal(got, want[k]), k


def test_all_dtypes_in_and_out(fake, tmp_path):
    vals, p = mix_inputs(tmp_path)
    outs = [x for k in "oekqz" for x in ("--output", tmp_path / f"out_{k}.npy")]
    r = run(fake, "run", "mix", *[x for k in "audnm" for x in ("--input", p[k])], *outs)
    assert r.returncode == 0, r.stderr
    check_mix_outputs(tmp_path, vals)


def test_named_inputs_and_outputs(fake, tmp_path):
    vals, p = mix_inputs(tmp_path)
    # named bindings in any order; plain paths fill the remaining slots in order
    r = run(fake, "run", "mix", "--input", f"m={p['m']}", "--input", f"d={p['d']}", "--input", p["a"],
            "--input", p["u"], "--input", p["n"],
            "--output", f"z={tmp_path / 'out_z.npy'}", "--output", tmp_path / "out_o.npy")
    assert r.returncode == 0, r.stderr
    check_mix_outputs(tmp_path, vals, names=("o", "z"))
    assert not (tmp_path / "out_e.npy").exists()  # outputs without a path are not written
    r = run(fake, "run", "mix", *[x for k in "audnm" for x in ("--input", p[k])], "--input", f"a={p['a']}")
    assert r.returncode == 1 and "has 5 inputs (a, u, d, n, m), got 6 --input" in r.stderr
    r = run(fake, "run", "mix", *[x for k in "aud" for x in ("--input", f"{k}={p[k]}")], "--input", f"a={p['a']}",
            "--input", p["n"])
    assert r.returncode == 1 and "input 'a' is given twice" in r.stderr


def test_int_and_float_conversions(fake, tmp_path):
    vals, p = mix_inputs(tmp_path)
    np.save(p["n"], vals["n"].astype(np.int64))  # i64 data for the i32 input
    np.save(p["m"], np.array([7, -5], np.int32))  # i32 data for the i64 input
    vals["m"] = np.array([7, -5], np.int64)
    np.save(p["d"], vals["d"].astype(np.float64))
    args = [x for k in "audnm" for x in ("--input", p[k])]
    r = run(fake, "run", "mix", *args, *[x for k in "oekqz" for x in ("--output", tmp_path / f"out_{k}.npy")])
    assert r.returncode == 0, r.stderr
    check_mix_outputs(tmp_path, vals)
    np.save(p["n"], np.array([1, 2**31, 3], np.int64))  # does not fit in i32
    r = run(fake, "run", "mix", *args)
    assert r.returncode == 1 and "input 'n'" in r.stderr and "2147483648" in r.stderr


def test_f64_input_converted_to_f32(fake, tmp_path):
    x, xp = x_input(tmp_path, dtype=np.float64)
    r = run(fake, "run", "--input", xp, "--output", tmp_path / "y.npy")
    assert r.returncode == 0, r.stderr
    want = x.astype(np.float32) @ lib.INIT_W.T + lib.INIT_B
    np.testing.assert_allclose(np.load(tmp_path / "y.npy"), want, rtol=1e-6, atol=1e-6)


def test_wrong_input_dtype(fake, tmp_path):
    _, xp = x_input(tmp_path, dtype=np.int64)
    r = run(fake, "run", "--input", xp)
    assert r.returncode == 1
    assert f"{fake}: error: {xp}: input 'x' has dtype i64, expected f32" in r.stderr


def test_wrong_input_shape(fake, tmp_path):
    _, xp = x_input(tmp_path, shape=(4, 2))
    r = run(fake, "run", "forward", "--input", xp, "--output", tmp_path / "y.npy")
    assert r.returncode == 1
    assert "input 'x' has shape [4, 2], expected [2, 4]" in r.stderr
    assert r.stderr.startswith(f"{fake}: error: ")
    assert not (tmp_path / "y.npy").exists()
    _, xp = x_input(tmp_path, shape=(8,))
    r = run(fake, "run", "--input", xp)
    assert r.returncode == 1 and "has shape [8], expected [2, 4]" in r.stderr


def test_input_and_output_counts(fake, tmp_path):
    _, xp = x_input(tmp_path)
    r = run(fake, "run")
    assert r.returncode == 1 and "input 'x' is not given" in r.stderr
    r = run(fake, "run", "--input", xp, "--input", xp)
    assert r.returncode == 1 and "entry 'forward' has 1 input (x), got 2 --input" in r.stderr
    r = run(fake, "run", "--input", xp, "--output", tmp_path / "a.npy", "--output", tmp_path / "b.npy")
    assert r.returncode == 1 and "has 1 output (y), got 2 --output" in r.stderr
    r = run(fake, "run", "--input", xp)  # no --output: computed, nothing written
    assert r.returncode == 0 and r.stderr == ""


def test_weights_errors(fake, tmp_path):
    _, xp = x_input(tmp_path)
    w = dict(lib.random_weights())
    cases = [
        ([("fc.weight", w["fc.weight"]), ("steps", w["steps"])], "tensor 'fc.bias' is missing"),
        ([("fc.weight", w["fc.weight"].T.copy()), ("fc.bias", w["fc.bias"]), ("steps", w["steps"])],
         "tensor 'fc.weight' has shape [4, 3], expected [3, 4]"),
        ([("fc.weight", w["fc.weight"]), ("fc.bias", w["fc.bias"].astype(np.int32)), ("steps", w["steps"])],
         "tensor 'fc.bias' has dtype i32, expected f32"),
        ([("fc.weight", w["fc.weight"]), ("fc.bias", w["fc.bias"]), ("steps", w["steps"].astype(np.float64))],
         "tensor 'steps' has dtype f64, expected i64"),
    ]
    for i, (tensors, msg) in enumerate(cases):
        path = tmp_path / f"w{i}.st"
        lib.st_write(path, tensors)
        r = run(fake, "run", "--weights", path, "--input", xp)
        assert r.returncode == 1, (msg, r.stderr)
        assert f"{path}: {msg}" in r.stderr, r.stderr
    # extra tensors are ignored, metadata is skipped
    lib.st_write(tmp_path / "extra.st", [*w.items(), ("other", np.zeros((5, 5), np.float32))],
                 metadata={"format": "pt"})
    assert run(fake, "run", "--weights", tmp_path / "extra.st", "--input", xp).returncode == 0
    r = run(fake, "run", "--weights", tmp_path / "nope.st", "--input", xp)
    assert r.returncode == 2 and "nope.st: cannot open" in r.stderr


def test_io_errors_exit_2(fake, tmp_path):
    _, xp = x_input(tmp_path)
    r = run(fake, "run", "--input", tmp_path / "missing.npy")
    assert r.returncode == 2 and "missing.npy: cannot open" in r.stderr
    r = run(fake, "run", "--input", xp, "--output", tmp_path / "no" / "dir" / "y.npy")
    assert r.returncode == 2 and "cannot open for writing" in r.stderr
    r = run(fake, "run", "--input", tmp_path)  # a directory
    assert r.returncode == 2 and "is a directory" in r.stderr


def test_save_roundtrip(fake, tmp_path):
    """bump changes the bias and the step counter; --save writes them; the
    saved file loads back and is read correctly by a Python reader."""
    w = lib.random_weights(7)
    lib.st_write(tmp_path / "w.st", w)
    delta = np.array([0.5, -1.0, 2.0], np.float32)
    np.save(tmp_path / "delta.npy", delta)
    np.save(tmp_path / "scale.npy", np.array(3.0, np.float32))  # 0-d input
    r = run(fake, "run", "bump", "--weights", tmp_path / "w.st", "--input", tmp_path / "delta.npy",
            "--input", tmp_path / "scale.npy", "--save", tmp_path / "saved.st")
    assert r.returncode == 0, r.stderr
    hlen, names, got = lib.st_read(tmp_path / "saved.st")
    assert hlen % 8 == 0 and names == ["fc.weight", "fc.bias", "steps"]
    assert np.array_equal(got["fc.weight"], w[0][1])
    assert np.array_equal(got["fc.bias"], w[1][1] * np.float32(3.0) + delta)
    assert got["steps"].shape == () and got["steps"] == 4 and got["steps"].dtype == np.int64
    # data is contiguous, in order
    raw = (tmp_path / "saved.st").read_bytes()[8 + hlen:]
    assert raw == b"".join(got[n].tobytes() for n in names)
    # load the saved file back (C writer -> C reader) and save again: identical bytes
    x, xp = x_input(tmp_path)
    r = run(fake, "run", "--weights", tmp_path / "saved.st", "--input", xp, "--output", tmp_path / "y.npy",
            "--save", tmp_path / "again.st")
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "again.st").read_bytes() == (tmp_path / "saved.st").read_bytes()
    np.testing.assert_allclose(np.load(tmp_path / "y.npy"), x @ got["fc.weight"].T + got["fc.bias"],
                               rtol=1e-6, atol=1e-6)
    r = run(fake, "run", "forward", "--input", xp, "--save", tmp_path / "no" / "such" / "dir.st")
    assert r.returncode == 2


def test_save_without_weights_gives_init_values(fake, tmp_path):
    r = run(fake, "run", "fail", "--save", tmp_path / "s.st")
    assert r.returncode == 1 and "entry 'fail' failed" in r.stderr
    assert not (tmp_path / "s.st").exists()
    _, xp = x_input(tmp_path)
    assert run(fake, "run", "--input", xp, "--save", tmp_path / "s.st").returncode == 0
    _, _, got = lib.st_read(tmp_path / "s.st")
    assert np.array_equal(got["fc.weight"], lib.INIT_W) and got["steps"] == lib.INIT_STEPS


def test_repeat_and_verbose(fake, tmp_path):
    _, xp = x_input(tmp_path)
    r = run(fake, "run", "--input", xp, "--repeat", "5")
    assert r.returncode == 0 and r.stdout == ""
    assert "forward: median" in r.stderr and "over 5 calls" in r.stderr
    r = run(fake, "run", "--input", xp, "--verbose", "--weights", tmp_path / "none.st")
    assert r.returncode == 2
    lib.st_write(tmp_path / "w.st", lib.random_weights())
    r = run(fake, "run", "--input", xp, "-v", "--weights", tmp_path / "w.st", "--output", tmp_path / "y.npy")
    assert r.returncode == 0
    for what in ("init", "load weights", "read inputs", "forward: median", "write outputs"):
        assert what in r.stderr
    for bad in ("0", "-3", "x", ""):
        r = run(fake, "run", "--input", xp, "--repeat", bad)
        assert r.returncode == 1 and "--repeat needs a positive integer" in r.stderr


def test_info(fake):
    r = run(fake, "info")
    assert r.returncode == 0 and r.stderr == ""
    out = r.stdout
    for line in ("model: fake", "source: fake_model.py", "arena: 192 bytes", "entry forward: 1 input, 1 output",
                 "  input  x f32[2, 4]", "  output y f32[2, 3]", "  input  scale f32[]", "  output z bool[4]",
                 "  input  n i32[3]", "  fc.weight f32[3, 4]", "  fc.bias f32[3]", "  steps i64[]",
                 "parameters: 3 (16 values)"):
        assert line in out, line
    r = run(fake, "info", "extra")
    assert r.returncode == 1 and "unexpected argument" in r.stderr


def test_help_and_usage_errors(fake):
    for args in (["--help"], ["-h"], ["help"], ["run", "--help"], ["info", "--help"]):
        r = run(fake, *args)
        assert r.returncode == 0 and r.stdout.startswith(f"usage: {fake} COMMAND"), args
        for opt in ("--weights", "--input NAME=X.npy", "--output", "--save", "--repeat", "--verbose",
                    "exit status", "entries: forward bump mix fail"):
            assert opt in r.stdout, opt
    r = run(fake)
    assert r.returncode == 1 and "usage:" in r.stderr
    r = run(fake, "frobnicate")
    assert r.returncode == 1 and "unknown command 'frobnicate'" in r.stderr
    r = run(fake, "--frobnicate")
    assert r.returncode == 1 and "unknown option '--frobnicate'" in r.stderr
    r = run(fake, "run", "--frobnicate", "1")
    assert r.returncode == 1 and "unknown option '--frobnicate'" in r.stderr
    r = run(fake, "run", "nosuch")
    assert r.returncode == 1 and "unknown entry 'nosuch' (entries: forward, bump, mix, fail)" in r.stderr
    r = run(fake, "run", "--input")
    assert r.returncode == 1 and "option --input needs a value" in r.stderr
    r = run(fake, "run", "--weights", "a", "--weights", "b")
    assert r.returncode == 1 and "given twice" in r.stderr


def cpu_flags():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


@pytest.mark.skipif(os.uname().machine != "x86_64", reason="cpuid detection is x86-64 only")
def test_blas_setup_reexec(tmp_path):
    """With -DCTC_HAVE_CBLAS the program re-executes itself once with
    OPENBLAS_CORETYPE chosen from cpuid; a user's setting wins."""
    exe = lib.build_fake(tmp_path, extra=["-DCTC_HAVE_CBLAS"])
    env = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_CORETYPE", "CTC_NO_REEXEC")}
    r = subprocess.run([exe, "info"], capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr
    flags = cpu_flags()
    if {"avx512f", "avx512vl", "avx512bw", "avx512dq"} <= flags:
        assert "openblas coretype: SkylakeX" in r.stdout
    elif {"avx2", "fma"} <= flags:
        assert "openblas coretype: Haswell" in r.stdout
    else:
        assert "openblas coretype: (chosen by OpenBLAS)" in r.stdout
    r = subprocess.run([exe, "info"], capture_output=True, text=True, env={**env, "OPENBLAS_CORETYPE": "Zen"})
    assert "openblas coretype: Zen" in r.stdout
    r = subprocess.run([exe, "info"], capture_output=True, text=True, env={**env, "CTC_NO_REEXEC": "1"})
    assert "openblas coretype: (chosen by OpenBLAS)" in r.stdout


@pytest.mark.parametrize("cc", ["gcc", "clang"])
def test_runtime_compiles_clean(tmp_path, cc):
    """The runtime builds warning-free with build.ninja's flags plus -pedantic,
    with and without -DCTC_HAVE_CBLAS."""
    if not lib.have(cc):
        pytest.skip(f"{cc} not installed")
    for extra in ([], ["-DCTC_HAVE_CBLAS"]):
        cmd = [cc, *lib.CFLAGS, "-pedantic", *extra, "-c", *lib.RT_SOURCES]
        r = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path)
        assert r.returncode == 0 and r.stderr == "", r.stderr
