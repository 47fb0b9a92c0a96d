"""What a user hands the C compiler and the generated program: `ctc build --cc` as a
command with arguments (make's CC), -O<n>, --cflags and --verbose; `./net --threads N`
and the C API's ctc_set_num_threads (compiler/build.c, runtime_min/rt_driver.c)."""
import os
import re
import stat
import subprocess

import numpy as np

from ctc_testlib import CTC, MLP_TRAIN_SRC, run

SRC = MLP_TRAIN_SRC


def _model(tmp):
    (tmp / "m.py").write_text(SRC)
    return tmp / "m.py"


def _env(tmp):
    return dict(os.environ, CTC_CACHE_DIR=str(tmp / "cache"))


def _logging_cc(tmp):
    """A compiler that appends its arguments to tmp/cc.log (one line a call), then runs cc."""
    cc = tmp / "logcc"
    cc.write_text(f'#!/bin/sh\necho "$@" >> "{tmp}/cc.log"\nexec cc "$@"\n')
    cc.chmod(cc.stat().st_mode | stat.S_IXUSR)
    return cc


def test_cc_with_arguments_builds_and_its_O_level_counts(tmp_path):
    m = _model(tmp_path)
    cc = _logging_cc(tmp_path)
    r = run([CTC, "build", m, "-o", tmp_path / "net", "--cc", f"{cc} -O1", "--verbose"], env=_env(tmp_path))
    cmd = [l for l in r.stderr.splitlines() if l.startswith(f"ctc: {cc} ")]
    assert len(cmd) == 1, r.stderr
    words = cmd[0].split()
    # the command's own -O1 replaces ctc's -O3 (it would otherwise come later and win)
    assert "-O1" in words and "-O3" not in words, cmd[0]
    calls = (tmp_path / "cc.log").read_text().splitlines()
    assert calls and all("-O1" in c.split() and "-O3" not in c.split() for c in calls if " -c " in f" {c} "), calls
    out = run([tmp_path / "net", "info"]).stdout
    assert "entry forward" in out


def test_O_and_cflags_reach_the_compiler_after_ctc_flags(tmp_path):
    m = _model(tmp_path)
    cc = _logging_cc(tmp_path)
    run([CTC, "build", m, "-o", tmp_path / "net", "--cc", cc, "-O1", "--cflags", "-DCTC_TEST_FOO=1 -g",
         "--cflags=-march=haswell"], env=_env(tmp_path))
    calls = [c.split() for c in (tmp_path / "cc.log").read_text().splitlines() if "-DCTC_TEST_FOO=1" in c.split()]
    assert calls, (tmp_path / "cc.log").read_text()
    for w in calls:
        assert "-O1" in w and "-O3" not in w and "-g" in w, w
        assert w.index("-march=haswell") > w.index("-march=native"), w   # the user's -march comes last: it wins
    # every runtime object and the final link were compiled with them
    assert sum(" -c " in " ".join(w) for w in calls) >= 5


def test_cflags_are_compiled_in_and_change_the_cache_key(tmp_path):
    """A --cflags -include of a header with #error fails the build: the flags reach every
    compile, and the runtime objects cached without them are not reused."""
    m = _model(tmp_path)
    env = _env(tmp_path)
    run([CTC, "build", m, "-o", tmp_path / "a"], env=env)   # fills the cache
    (tmp_path / "boom.h").write_text('#error "ctc-test: the --cflags reached the compiler"\n')
    r = run([CTC, "build", m, "-o", tmp_path / "b", "--cflags", f"-include {tmp_path / 'boom.h'}"], env=env, check=False)
    assert r.returncode == 2, r.stderr
    assert "ctc-test: the --cflags reached the compiler" in r.stderr
    assert re.search(r"error: the C compiler 'cc' failed \(exit 1\) building", r.stderr), r.stderr
    # a define that the compiler sees: a second key in the cache
    run([CTC, "build", m, "-o", tmp_path / "c", "--cflags", "-DCTC_TEST_KEY=1"], env=env)
    assert len([d for d in os.listdir(tmp_path / "cache") if d.startswith("rt-")]) == 2


def test_missing_compiler_is_named(tmp_path):
    m = _model(tmp_path)
    r = run([CTC, "build", m, "-o", tmp_path / "net", "--cc", "no-such-cc-ctc -O1"], env=_env(tmp_path), check=False)
    assert r.returncode == 2
    assert "C compiler 'no-such-cc-ctc' not found (--cc is 'no-such-cc-ctc -O1')" in r.stderr, r.stderr
    r = run([CTC, "build", m, "-o", tmp_path / "net"], env=dict(_env(tmp_path), CC="/nowhere/cc"), check=False)
    assert r.returncode == 2 and "C compiler '/nowhere/cc' not found ($CC is '/nowhere/cc')" in r.stderr, r.stderr
    assert not (tmp_path / "net").exists()


def test_compiler_options_go_with_build(tmp_path):
    m = _model(tmp_path)
    for opt in (["-O1"], ["--cflags", "-g"]):
        r = run([CTC, "compile", m, "-o", tmp_path / "m.c", *opt], check=False)
        assert r.returncode == 1 and "goes with 'build'" in r.stderr, r.stderr
    r = run([CTC, "--help"])
    for word in ("--cflags 'FLAGS'", "-O0|-O1|-O2|-O3|-Os", "--verbose", "split on blanks"):
        assert word in r.stdout


def test_threads_give_the_same_results(tmp_path):
    """forward and a training step at 1, 2 and 3 threads: the same bits (GEMMs large
    enough to be split over the threads)."""
    src = SRC.replace("nn.Linear(20, 32)", "nn.Linear(200, 320)").replace("nn.Linear(32, 4)", "nn.Linear(320, 40)")
    src = src.replace("torch.randn(8, 20)", "torch.randn(64, 200)").replace("torch.zeros(8,", "torch.zeros(64,")
    (tmp_path / "m.py").write_text(src)
    run([CTC, "build", tmp_path / "m.py", "-o", tmp_path / "net"], env=_env(tmp_path))
    rng = np.random.default_rng(0)
    np.save(tmp_path / "x.npy", rng.standard_normal((64, 200)).astype(np.float32))
    np.save(tmp_path / "y.npy", rng.integers(0, 40, 64).astype(np.int64))
    outs = {}
    for n in (1, 2, 3):
        fo, lo, w = (tmp_path / f"{k}{n}.npy" for k in ("f", "l", "w"))
        # before the command and after it, both spellings
        run([tmp_path / "net", "--threads", str(n), "infer", "--random-weights", "--input", tmp_path / "x.npy",
             "--output", fo])
        run([tmp_path / "net", "run", "train_step", f"--threads={n}", "--input", tmp_path / "x.npy", "--input",
             tmp_path / "y.npy", "--output", lo, "--repeat", "3", "--save", tmp_path / f"w{n}.safetensors"])
        outs[n] = (np.load(fo), np.load(lo), (tmp_path / f"w{n}.safetensors").read_bytes())
    for n in (2, 3):
        assert np.array_equal(outs[n][0], outs[1][0]) and np.array_equal(outs[n][1], outs[1][1])
        assert outs[n][2] == outs[1][2]


def test_threads_option_errors_and_help(tmp_path):
    m = _model(tmp_path)
    run([CTC, "build", m, "-o", tmp_path / "net"], env=_env(tmp_path))
    for bad in (["--threads", "0"], ["--threads=x"], ["infer", "--threads"]):
        r = run([tmp_path / "net", *bad], check=False)
        assert r.returncode == 1 and "--threads" in r.stderr, (bad, r.stderr)
    assert "--threads N" in run([tmp_path / "net", "--help"]).stdout
    r = run([tmp_path / "net", "bench", "--threads", "2", "--iters", "2", "--warmup", "0"])
    assert r.stdout.startswith("bench forward: median")


C_MAIN = r"""
#include <stdio.h>
#include "ctc_rt.h"
int main(void) {
  if (ctc_set_num_threads(0) != CTC_ERR_ARG) return 1;
  if (ctc_set_num_threads(3) != CTC_OK) return 2;
  printf("%d\n", ctc_get_num_threads());
  if (ctc_set_num_threads(1) != CTC_OK) return 3;
  printf("%d\n", ctc_get_num_threads());
  return 0;
}
"""


def test_c_api_sets_the_thread_count(tmp_path):
    from ctc_testlib import ROOT
    m = _model(tmp_path)
    run([CTC, "build", m, "--shared", "-o", tmp_path / "libnet.so"], env=_env(tmp_path))
    (tmp_path / "main.c").write_text(C_MAIN)
    rt = os.path.join(ROOT, "runtime_min")
    run(["cc", "-std=c11", tmp_path / "main.c", f"-I{rt}", f"-L{tmp_path}", "-lnet", f"-Wl,-rpath,{tmp_path}",
         "-o", tmp_path / "main"])
    assert run([tmp_path / "main"]).stdout.split() == ["3", "1"]


def test_openblas_starts_no_thread_pool_of_its_own(tmp_path):
    """A program with OpenMP and OpenBLAS runs its GEMMs on its own threads: it re-executes
    itself with OPENBLAS_NUM_THREADS=1, so OpenBLAS's constructor starts no pool of threads
    spinning beside the OpenMP ones (they slowed a short 2-thread run, issue 29), even when
    the environment asks for more. With --threads 1 the process has one thread."""
    import subprocess
    import time
    m = _model(tmp_path)
    r = run([CTC, "build", m, "-o", tmp_path / "net", "--stats"], env=_env(tmp_path))
    if "+openblas" not in r.stderr:
        import pytest
        pytest.skip("no OpenBLAS")
    p = subprocess.Popen([tmp_path / "net", "bench", "--threads", "1", "--iters", "100000000", "--warmup", "0"],
                         env=dict(os.environ, OPENBLAS_NUM_THREADS="4"), stdout=subprocess.DEVNULL)
    try:
        env, deadline = {}, time.time() + 60
        while time.time() < deadline and env.get("CTC_NO_REEXEC") != "1":
            time.sleep(0.05)
            raw = open(f"/proc/{p.pid}/environ", "rb").read().split(b"\0")
            env = dict(kv.decode().split("=", 1) for kv in raw if b"=" in kv)
        assert env.get("CTC_NO_REEXEC") == "1" and env.get("OPENBLAS_NUM_THREADS") == "1", env
        time.sleep(0.3)   # OpenBLAS's constructor has run
        assert len(os.listdir(f"/proc/{p.pid}/task")) == 1
    finally:
        p.kill()
        p.wait()


def test_a_long_compile_says_what_it_is_doing(tmp_path):
    """Issue 28: a build that takes more than a few seconds shows what it is doing (the
    generated file, its size, the compiler and the advice to use -O1); $CTC_PROGRESS sets
    after how many seconds (5 on a terminal, silent otherwise: here 0, so at once)."""
    m = _model(tmp_path)
    slow = tmp_path / "slowcc"
    slow.write_text("#!/bin/sh\nsleep 0.3\nexec cc \"$@\"\n")
    slow.chmod(slow.stat().st_mode | stat.S_IXUSR)
    env = dict(_env(tmp_path), CTC_PROGRESS="0")
    r = run([CTC, "build", m, "-o", tmp_path / "net", "--cc", str(slow)], env=env)
    notes = [l for l in r.stderr.splitlines() if l.startswith("ctc build: compiling ")]
    assert len(notes) == 1, r.stderr
    assert re.search(r"net\.c \(\d+ lines\) with '.*slowcc'; a large unrolled model compiles faster with -O1",
                     notes[0]), notes[0]
    quiet = run([CTC, "build", m, "-o", tmp_path / "net2", "--cc", str(slow)], env=_env(tmp_path))
    assert "ctc build:" not in quiet.stderr   # not a terminal, no $CTC_PROGRESS: nothing


def test_loops_over_sqrt_vectorise(tmp_path):
    """ctc build compiles with -fno-math-errno: nothing reads errno, and with it every sqrtf is a
    branch to libm for negative inputs, so Adam's update (sqrt of its second moment) and the
    norms stayed scalar. A user's --cflags=-fmath-errno comes later and wins."""
    m = _model(tmp_path)
    cc = _logging_cc(tmp_path)
    run([CTC, "build", m, "-o", tmp_path / "net", "--cc", cc], env=_env(tmp_path))
    calls = [c.split() for c in (tmp_path / "cc.log").read_text().splitlines()]
    compiles = [w for w in calls if "-std=c11" in w]   # not the OpenBLAS probe
    assert compiles and all("-fno-math-errno" in w for w in compiles), calls
    src = tmp_path / "loop.c"
    src.write_text("#include <math.h>\nvoid f(const float *restrict v, float *restrict o, int n) {\n"
                   "  for (int i = 0; i < n; i++) o[i] = o[i] / (sqrtf(v[i]) + 1e-8f);\n}\n")
    for errno_flag, vectorised in (("-fno-math-errno", True), ("-fmath-errno", False)):
        r = subprocess.run(["cc", "-std=c11", "-O3", "-march=x86-64-v3", errno_flag, "-fopt-info-vec-optimized", "-c",
                            str(src), "-o", str(tmp_path / "loop.o")], capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        assert ("loop vectorized" in r.stderr) == vectorised, (errno_flag, r.stderr)


RESIDUAL_SRC = '''
import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(8, 8, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(8)

    def forward(self, x):
        return F.relu(self.bn(self.conv(x)) + x)


model = Block()
opt = torch.optim.SGD(model.parameters(), lr=0.1)


def train_step(x):
    opt.zero_grad()
    loss = model(x).square().mean()
    loss.backward()
    opt.step()
    return loss


example_inputs = {"forward": (torch.randn(16, 8, 32, 32),), "train_step": (torch.randn(16, 8, 32, 32),)}
'''


def test_parallel_elementwise_loops_vectorise_on_avx2(tmp_path):
    """Every parallel elementwise loop of a residual block's training step vectorises with the
    flags the generated file's header names, on AVX2 without AVX-512 (x86-64-v3). The relu
    backward of the residual sum, where(x <= 0, 0, a + b), did not: GCC sank the add into the
    select's branch and, floating-point adds being allowed to trap, would not if-convert it, so
    each element was a mispredicted branch (20 ms of a 520 ms ResNet-18 step). ctc build adds
    -fno-trapping-math; without it the same loop stays scalar."""
    (tmp_path / "m.py").write_text(RESIDUAL_SRC)
    run([CTC, "compile", tmp_path / "m.py", "-o", tmp_path / "m.c"])
    c = (tmp_path / "m.c").read_text()
    header = re.search(r"\*   cc (.*) -DCTC_MAIN", c).group(1).split()
    assert "-fno-trapping-math" in header and "-fno-math-errno" in header, header
    lines = c.splitlines()
    selects = []   # 1-based line ranges of the vectorisable loops whose body selects with a where
    for i, l in enumerate(lines):
        if l.strip() in ("CTC_OMP_SIMD", "CTC_OMP_FOR_SIMD"):
            indent = len(l) - len(l.lstrip())
            end = i + 2
            if lines[i + 1].endswith("{"):
                end = next(j for j in range(i + 2, len(lines)) if lines[j] == " " * indent + "}")
            if any(re.search(r"= \(mask\w* \? ", b) for b in lines[i + 1:end]):
                selects.append((i + 2, end + 1))   # GCC names a loop by a line of its body
    assert selects, "no loop with a where: the model no longer has the relu backward"
    for flags, all_vectorised in ((header, True), ([f for f in header if f != "-fno-trapping-math"], False)):
        flags = [f for f in flags if not f.startswith("-march")] + ["-march=x86-64-v3", "-fopenmp"]
        r = subprocess.run(["cc", *flags, "-I", os.path.join(os.path.dirname(CTC), "..", "runtime_min"), "-c",
                            str(tmp_path / "m.c"), "-o", str(tmp_path / "m.o"), "-fopt-info-vec-optimized"],
                           capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        vectorised = {int(m.group(1)) for m in re.finditer(r"m\.c:(\d+):\d+: optimized: loop vectorized", r.stderr)}
        if all_vectorised:
            assert not [a for a, b in selects if not any(a <= n <= b for n in vectorised)], (flags, r.stderr)
        else:
            assert [a for a, b in selects if not any(a <= n <= b for n in vectorised)], flags
