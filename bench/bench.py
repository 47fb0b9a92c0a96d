"""ctc's generated program against tuned PyTorch on the bench models, in one run.

usage: /usr/bin/python3 bench/bench.py [--models mlp,lenet,gpt,resnet,llama] [--modes forward,train]
                                       [--rounds 3] [--iters 20] [--warmup 3] [--threads 2]
                                       [--cflags '-march=haswell'] [--avx2] [--dtype bf16]

--dtype bf16 runs both sides under CPU autocast (torch.autocast("cpu", dtype=torch.bfloat16)
around the forward, and around the forward and the loss in the training step, as users
write it; f32 master weights and optimizer), in the file ctc compiles as in PyTorch's step.
--cflags passes flags to `ctc build` (the C compiler); --avx2 is the AVX2 machine on an
AVX-512 one: --cflags=-march=haswell (ctc's AVX-512 GEMM is compiled out, OpenBLAS's runs)
and OPENBLAS_CORETYPE=Haswell for ctc, PyTorch and the sgemm probe; for PyTorch
ATEN_CPU_CAPABILITY=avx2, ONEDNN_MAX_CPU_ISA=AVX2 (its convolutions) and
MKL_ENABLE_INSTRUCTIONS=AVX2 (torch 2.x's GEMMs). The header prints the machine's sgemm rate: OpenBLAS's cblas_sgemm at
1024x1024x1024 with --threads threads (best of 5), to hold the GEMM-bound rows against, and with
more than one thread a cache line's round trip between the first two CPUs (one core complex or two).

For each model of ../shared/bench/models (make_model(), make_inputs()) it writes
the file a user would write around it: `model`, an SGD-momentum `optimizer`, a
`train_step(x, y)` doing the cross-entropy step of ../shared/bench/torch_step.py,
and `example_inputs`; builds it with `ctc build` (and times `ctc compile` of the
same file: best wall and CPU time of 3); then, in --rounds rounds that alternate the two,
times

  ctc:   `./net bench ENTRY --iters K --warmup W --int-max C` (random inputs;
         integers in [0, C), C = the classes of the forward output, which is also
         the vocabulary for gpt), with OMP_NUM_THREADS = --threads and `--threads`
         (OPENBLAS_CORETYPE as for torch below; the program sets OPENBLAS_NUM_THREADS=1 itself; libgomp's
         default wait policy);
  torch: Debian's PyTorch (/usr/bin/python3) eager, **tuned**: OMP_WAIT_POLICY=passive,
         OPENBLAS_CORETYPE from the CPU's flags (AVX-512 -> SkylakeX, AVX2+FMA ->
         Haswell, as the generated driver chooses it), torch.set_num_threads(--threads);
         forward under no_grad, train = zero_grad, forward, cross_entropy, backward,
         step, on make_inputs(); W warm-up calls then K timed calls, in a fresh
         process per round (like ./net bench);
  torch.compile: the same in bench/.venv/bin/python (or --venv-python) when a torch 2.x with
         torch.compile imports there (`python3 -m venv bench/.venv` and pip install
         torch); the column is left out otherwise.

It prints a Markdown table: median ms per call (median over the rounds of each
round's median) and the fastest call, torch/ctc ratios of the medians and of the
minima (the minima move less when other processes load the machine), the peak RSS of each process (getrusage
ru_maxrss: the largest over the rounds), and ctc's compile time. With more than one thread, the
round trip is measured again before and after each side's run, and the last column gives each side's
largest (ctc / torch / torch.compile): a VM's vCPUs can move between core complexes within minutes,
and a row whose sides ran in different placements is marked (one side's round trip over twice
another's) and compares different machines. On Linux, the share of the machine's CPU time the
host took (steal, /proc/stat) while each side ran is counted too; where some side's reached 1% a
column gives it (ctc / torch / torch.compile), and a row where one side's was over 5% is marked: its
times include waits for a vCPU the hypervisor gave to someone else (a 2-thread run's parallel
regions each wait for the missing thread). A marked row is measured again, up to --remeasure
times (2 unless given): the table keeps its first measurement without a mark (else its last) and a
note under it names the rows measured again. Nothing is asserted about speed.

--gemm-rate also builds each model with `ctc build --profile`, runs each entry once more with
`--profile` (not timed with the rest) and prints a second table: the share of the kernels' time that
ctc's GEMM kernels take (matmuls, with or without an epilogue; not convolutions or attention) and
their GFLOP/s, against the sgemm probe: how near the GEMM-bound steps run to the machine's BLAS."""
import argparse
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
CTC = os.path.join(ROOT, "build", "ctc")
# the bench models (../shared/bench/models; $CTC_BENCH_MODELS where the repository travels alone)
MODELS_DIR = os.environ.get("CTC_BENCH_MODELS") or os.path.normpath(os.path.join(ROOT, "..", "shared", "bench", "models"))
SYSTEM_PYTHON = "/usr/bin/python3"
VENV_PYTHON = os.path.join(HERE, ".venv", "bin", "python")

# What a user appends to the bench model file to train it (the step of torch_step.py).
WRAPPER = """

# ---- added by bench/bench.py: the training step a user would write ----
model = make_model()
optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)


def train_step(x, y):
    optimizer.zero_grad()
    logits = model(x)
    loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
    loss.backward()
    optimizer.step()
    return loss


_x, _y = make_inputs()
example_inputs = {"forward": (_x,), "train_step": (_x, _y)}
"""

# The same step under CPU autocast (--dtype bf16): the forward entry is `infer`.
WRAPPER_BF16 = """

# ---- added by bench/bench.py: the bf16 autocast steps a user would write ----
model = make_model()
optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)


def infer(x):
    with torch.no_grad():
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return model(x)


def train_step(x, y):
    optimizer.zero_grad()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logits = model(x)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
    loss.backward()
    optimizer.step()
    return loss


_x, _y = make_inputs()
example_inputs = {"forward": (_x,), "infer": (_x,), "train_step": (_x, _y)}
"""

ENTRY = {"forward": "forward", "train": "train_step"}
ENTRY_BF16 = {"forward": "infer", "train": "train_step"}
BENCH_LINE = re.compile(r"^bench \S+: median ([0-9.]+) ms, min ([0-9.]+) ms per call .*peak RSS ([0-9.]+) MiB$", re.M)


def openblas_coretype():
    """OPENBLAS_CORETYPE for this CPU, chosen as runtime_min/rt_driver.c does."""
    flags = set()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    flags = set(line.split(":", 1)[1].split())
                    break
    except OSError:
        return None
    if {"avx512f", "avx512dq", "avx512bw", "avx512vl"} <= flags:
        return "SkylakeX"
    if {"avx2", "fma"} <= flags:
        return "Haswell"
    return None


def bench_coretype(avx2):
    """The OPENBLAS_CORETYPE of every process the bench runs: Haswell with --avx2, else the CPU's
    choice, whatever the environment says. (A machine here had OPENBLAS_CORETYPE=Haswell in its
    environment: PyTorch's GEMMs then ran OpenBLAS's AVX2 kernels on an AVX-512 CPU, 130 GFLOP/s
    at 1024^3 on one core instead of 244, and its gpt train step took 225 ms instead of 152.)"""
    return "Haswell" if avx2 else openblas_coretype()


def torch_env(threads, avx2=False):
    env = dict(os.environ, OMP_WAIT_POLICY=os.environ.get("OMP_WAIT_POLICY", "passive"),
               OMP_NUM_THREADS=str(threads))
    env.pop("OPENBLAS_CORETYPE", None)
    core = bench_coretype(avx2)
    if core:
        env["OPENBLAS_CORETYPE"] = core
    if avx2:
        # ATEN_CPU_CAPABILITY caps ATen's own kernels and torch.compile's generated C++ only:
        # oneDNN (PyTorch's convolutions) and MKL (torch 2.x's GEMMs) pick their kernels from
        # cpuid, and on an AVX-512 machine ran jit:avx512_core convolutions and AVX-512 sgemm
        # (1024^3 on one core: 107 GFLOP/s, 63 with the cap) under --avx2 before these were set.
        env["ATEN_CPU_CAPABILITY"] = "avx2"
        env["ONEDNN_MAX_CPU_ISA"] = env["DNNL_MAX_CPU_ISA"] = "AVX2"
        env["MKL_ENABLE_INSTRUCTIONS"] = "AVX2"
    return env


SGEMM_PROBE = r"""
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
int main(void) {
  const int n = 1024;
  float *a = malloc(sizeof(float) * n * n), *b = malloc(sizeof(float) * n * n), *c = malloc(sizeof(float) * n * n);
  for (int i = 0; i < n * n; i++) a[i] = (float)(i % 7) * 0.25f, b[i] = (float)(i % 5) * 0.5f, c[i] = 0;
  double best = 1e30;
  for (int k = 0; k < 6; k++) {
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.f, a, n, b, n, 0.f, c, n);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double s = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
    if (k > 0 && s < best) best = s;   /* the first call warms up */
  }
  printf("%.1f\n", 2.0 * n * n * n / best * 1e-9);
  return c[0] != c[0];   /* NaN: something is wrong */
}
"""


def build_probe(d, name, text, libs):
    """A C probe's program: `text` written to d/name.c and built with libs; None when it cannot be built."""
    src, exe = os.path.join(d, name + ".c"), os.path.join(d, name)
    with open(src, "w") as f:
        f.write(text)
    if subprocess.run(["cc", "-O2", "-std=gnu11", src, "-o", exe, *libs], capture_output=True).returncode != 0:
        return None
    return exe


def run_probe(d, name, text, libs, args=(), env=None, timeout=300, exe=None):
    """A C probe's one number: the probe built (build_probe; or exe, built before) and run with args;
    None when it cannot be built, fails, prints nothing or outlasts timeout seconds."""
    exe = exe or build_probe(d, name, text, libs)
    if not exe:
        return None
    try:
        r = subprocess.run([exe, *args], capture_output=True, text=True, env=env, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None
    return float(r.stdout) if r.returncode == 0 and r.stdout.strip() else None


def sgemm_rate(d, threads, avx2):
    """OpenBLAS's sgemm GFLOP/s at 1024^3 on `threads` threads (None when it cannot be built)."""
    env = dict(os.environ, OPENBLAS_NUM_THREADS=str(threads), OMP_NUM_THREADS=str(threads))
    env.pop("OPENBLAS_CORETYPE", None)
    core = bench_coretype(avx2)
    if core:
        env["OPENBLAS_CORETYPE"] = core
    return run_probe(d, "sgemm_probe", SGEMM_PROBE, ["-lopenblas"], env=env)


# Two threads pinned to CPUs argv[1] and argv[2] pass a cache line back and forth: the round
# trip's nanoseconds (best of 5 runs of 200,000). On one core complex it is tens of ns; across
# two (or two sockets) hundreds, and a kernel whose threads read what the others wrote slows
# down there: a Zen 4 VM's 2 vCPUs measured 51-67 ns and, in another hour, 320-330 ns.
PINGPONG_PROBE = r"""
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
static _Alignas(64) _Atomic long flag;
static int cpu[2];
static int pin(int c) {
  cpu_set_t s;
  CPU_ZERO(&s);
  CPU_SET(c, &s);
  return pthread_setaffinity_np(pthread_self(), sizeof s, &s);
}
enum { N = 200000 };
static void *other(void *p) {
  (void)p;
  if (pin(cpu[1]) != 0) exit(2);
  for (long r = 0; r < 5; r++)
    for (long i = 2 * N * r + 1; i < 2 * N * (r + 1); i += 2) {
      while (atomic_load(&flag) != i) {}
      atomic_store(&flag, i + 1);
    }
  return NULL;
}
int main(int argc, char **argv) {
  if (argc != 3) return 2;
  cpu[0] = atoi(argv[1]), cpu[1] = atoi(argv[2]);
  pthread_t t;
  if (pin(cpu[0]) != 0 || pthread_create(&t, NULL, other, NULL) != 0) return 2;
  double best = 1e30;
  for (long r = 0; r < 5; r++) {
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (long i = 2 * N * r; i < 2 * N * (r + 1); i += 2) {
      atomic_store(&flag, i + 1);
      while (atomic_load(&flag) != i + 2) {}
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    const double ns = ((double)(t1.tv_sec - t0.tv_sec) * 1e9 + (double)(t1.tv_nsec - t0.tv_nsec)) / N;
    if (ns < best) best = ns;
  }
  pthread_join(t, NULL);
  printf("%.0f\n", best);
  return 0;
}
"""


def core_round_trip(d, exe=None):
    """(cpu a, cpu b, ns): a cache line's round trip between the first two CPUs this process may
    run on, or None (one CPU, or the probe cannot be built or pinned); exe: the probe built before."""
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        return None
    # (two CPUs that are not really two spin for long: 60 s at most)
    ns = run_probe(d, "pingpong_probe", PINGPONG_PROBE, ["-lpthread"], [str(cpus[0]), str(cpus[1])], timeout=60,
                   exe=exe)
    return (cpus[0], cpus[1], ns) if ns else None


def cpu_jiffies():
    """(steal, total) of all CPUs from /proc/stat, in clock ticks since boot; None where there is none."""
    try:
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:9]]   # user nice system idle iowait irq softirq steal
    except (OSError, ValueError):
        return None
    return (v[7], sum(v)) if len(v) == 8 else None


def stolen(fn, acc):
    """fn(), adding the steal and total ticks over its run to acc ([steal, total]; nothing without /proc/stat)."""
    t0 = cpu_jiffies()
    r = fn()
    t1 = cpu_jiffies()
    if t0 and t1:
        acc[0] += t1[0] - t0[0]
        acc[1] += t1[1] - t0[1]
    return r


STEAL_MARK = 5.0   # % of the CPU time the host took while a side ran, over which its row is marked


# ---- the torch worker (run in its own process) -------------------------------------------


def torch_worker(a):
    """Times one model and mode in this process; prints one JSON line."""
    import importlib.util

    import torch
    import torch.nn.functional as F

    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    spec = importlib.util.spec_from_file_location("bench_model", os.path.join(MODELS_DIR, a.model + ".py"))
    m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m)
    model = m.make_model()
    x, y = m.make_inputs()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    fwd = model
    if a.compiled:
        fwd = torch.compile(model)

    import contextlib
    amp = (lambda: torch.autocast("cpu", dtype=torch.bfloat16)) if a.dtype == "bf16" else contextlib.nullcontext

    def step():
        opt.zero_grad()
        with amp():
            logits = fwd(x)
            loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
        loss.backward()
        opt.step()
        return loss

    if a.mode == "forward":
        def call():
            with torch.no_grad():
                with amp():
                    fwd(x)
    else:
        call = step
    for _ in range(a.warmup):
        call()
    ms = []
    for _ in range(a.iters):
        t = time.perf_counter()
        call()
        ms.append((time.perf_counter() - t) * 1e3)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    print(json.dumps({"median": statistics.median(ms), "min": min(ms), "rss": rss, "version": torch.__version__}))


def run_torch(python, model, mode, a, compiled=False):
    cmd = [python, os.path.abspath(__file__), "--torch-worker", model, mode, "--iters", str(a.iters),
           "--warmup", str(a.warmup), "--threads", str(a.threads), "--dtype", a.dtype]
    if compiled:
        cmd.append("--compiled")
    r = subprocess.run(cmd, capture_output=True, text=True, env=torch_env(a.threads, a.avx2), timeout=1800)
    if r.returncode != 0:
        raise RuntimeError(f"torch worker failed: {' '.join(cmd)}\n{r.stderr[-2000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def have_torch_compile(python):
    """The venv's torch version when it is 2.x and has torch.compile, else None (and why)."""
    if not os.path.exists(python):
        return None, f"no {python}"
    r = subprocess.run([python, "-c", "import torch; assert hasattr(torch, 'compile'); print(torch.__version__)"],
                       capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        last = (r.stderr.strip().splitlines() or ["?"])[-1]
        return None, f"torch in {python} does not import: {last}"
    return r.stdout.strip(), None


# ---- ctc ------------------------------------------------------------------------------


def build_ctc():
    r = subprocess.run(["ninja", "-C", ROOT], capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError("ninja failed:\n" + r.stdout + r.stderr)


def prepare(model, d, cflags, dtype="f32", profile=False):
    """Writes the user file, builds ./net (and with profile a `--profile` build beside it, ./net_prof),
    times `ctc compile`; returns (exe, compile ms, classes)."""
    with open(os.path.join(MODELS_DIR, model + ".py")) as f:
        src = f.read()
    path = os.path.join(d, model + ".py")
    with open(path, "w") as f:
        f.write(src + (WRAPPER_BF16 if dtype == "bf16" else WRAPPER))
    exe = os.path.join(d, model)
    entries = ["--entry", "infer", "--entry", "train_step"] if dtype == "bf16" else []
    for out, extra in [(exe, [])] + ([(exe + "_prof", ["--profile"])] if profile else []):
        r = subprocess.run([CTC, "build", path, "-o", out] + extra + entries + [f"--cflags={c}" for c in cflags],
                           capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError(f"ctc build {' '.join(extra)} {path} failed:\n{r.stderr}")
    times, cpu = [], []
    for _ in range(3):
        t, ru = time.perf_counter(), resource.getrusage(resource.RUSAGE_CHILDREN)
        r = subprocess.run([CTC, "compile", path, "-o", os.path.join(d, model + "_c.c")] + entries, capture_output=True,
                           text=True)
        times.append((time.perf_counter() - t) * 1e3)
        ru2 = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu.append((ru2.ru_utime + ru2.ru_stime - ru.ru_utime - ru.ru_stime) * 1e3)
        if r.returncode != 0:
            raise RuntimeError(f"ctc compile {path} failed:\n{r.stderr}")
    info = subprocess.run([exe, "info"], capture_output=True, text=True, check=True).stdout
    m = re.search(r"entry forward:.*?\n(?:  input .*\n)*  output \S+ \w+\[([0-9, ]+)\]", info)
    classes = int(m.group(1).split(",")[-1]) if m else 2
    return exe, (min(times), min(cpu)), classes


def ctc_bench(exe, mode, classes, a, extra=()):
    """Runs `./net bench ENTRY ...` (with extra arguments) as the table times it; its CompletedProcess."""
    env = dict(os.environ, OMP_NUM_THREADS=str(a.threads))   # (the program sets OPENBLAS_NUM_THREADS=1 itself)
    env.pop("OPENBLAS_CORETYPE", None)   # the same OpenBLAS kernels as PyTorch's (its slivers)
    core = bench_coretype(a.avx2)
    if core:
        env["OPENBLAS_CORETYPE"] = core
    if a.ctc_wait_policy:
        env["OMP_WAIT_POLICY"] = a.ctc_wait_policy
    entry = (ENTRY_BF16 if a.dtype == "bf16" else ENTRY)[mode]
    cmd = [exe, "bench", entry, "--iters", str(a.iters), "--warmup", str(a.warmup), "--int-max", str(classes),
           "--threads", str(a.threads), *extra]
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=1800)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({r.returncode}):\n{r.stdout}{r.stderr}")
    return r


def run_ctc(exe, mode, classes, a):
    r = ctc_bench(exe, mode, classes, a)
    m = BENCH_LINE.search(r.stdout)
    if not m:
        raise RuntimeError(f"{exe} bench printed no timing:\n{r.stdout}{r.stderr}")
    return {"median": float(m.group(1)), "min": float(m.group(2)), "rss": float(m.group(3))}


def gemm_summary(trace):
    """The GEMM kernels of a `--profile` trace (a dict as json.load reads it): (their share of the
    kernels' time, their GFLOP/s, calls), or None without any. Kernel events are the complete ('X')
    events of thread 1; a GEMM kernel is one named `matmul` or `gemm: ...` (a matmul and its
    epilogue), whose args hold its flops."""
    total = gemm = flops = 0.0
    calls = 0
    for e in trace.get("traceEvents", []):
        if e.get("ph") != "X" or e.get("tid") != 1:
            continue
        total += e["dur"]
        if e["name"] == "matmul" or e["name"].startswith("gemm:"):
            gemm += e["dur"]
            flops += float(e.get("args", {}).get("flops", 0))
            calls += 1
    if not calls or gemm <= 0:
        return None
    return gemm / total, flops / gemm / 1e3, calls   # (dur in microseconds)


def run_ctc_profile(exe, mode, classes, a, d):
    """One `./net bench ENTRY --profile` run of the --profile build: gemm_summary of its trace."""
    trace = os.path.join(d, "trace.json")
    ctc_bench(exe, mode, classes, a, ("--profile", trace))
    with open(trace) as f:
        return gemm_summary(json.load(f))


# ---- the table -------------------------------------------------------------------------


def summarize(rounds):
    return {"median": statistics.median(r["median"] for r in rounds), "min": min(r["min"] for r in rounds),
            "rss": max(r["rss"] for r in rounds)}


def parser():
    """The options of this script (bench/bench_lm.py takes its defaults for the runs it shares)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="mlp,lenet,gpt,resnet,llama")
    ap.add_argument("--modes", default="forward,train")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--no-compile-column", action="store_true", help="skip torch.compile even if available")
    ap.add_argument("--cflags", action="append", default=[],
                    help="flags for ctc build's C compiler (repeatable), e.g. --cflags=-march=haswell")
    ap.add_argument("--avx2", action="store_true",
                    help="the AVX2 path on an AVX-512 machine: --cflags=-march=haswell, OPENBLAS_CORETYPE=Haswell, "
                         "ATEN_CPU_CAPABILITY=avx2, ONEDNN_MAX_CPU_ISA=AVX2, MKL_ENABLE_INSTRUCTIONS=AVX2 for torch")
    ap.add_argument("--ctc-wait-policy", choices=["passive", "active"],
                    help="OMP_WAIT_POLICY for ctc's program (default: libgomp's, spin then sleep; PyTorch always "
                         "gets passive). On a loaded machine use passive: the default made the resnet train step "
                         "at 2 threads 14.5 s instead of 0.8 s")
    ap.add_argument("--dtype", choices=["f32", "bf16"], default="f32",
                    help="bf16: forward and train step under CPU autocast to bfloat16 on both sides")
    ap.add_argument("--remeasure", type=int, default=2, metavar="N",
                    help="measure a row again, up to N more times, while it would be marked (* or !: its sides ran in "
                         "different placements, or the host took over 5%% of the CPU time); the table keeps the first "
                         "measurement without a mark, else the last, and says which rows were measured again")
    ap.add_argument("--gemm-rate", action="store_true",
                    help="also run a --profile build of each model once per entry and print its GEMM kernels' share "
                         "of the kernel time and their GFLOP/s against the sgemm probe")
    ap.add_argument("--venv-python", default=VENV_PYTHON,
                    help="the Python of the torch 2.x for the torch.compile column (default bench/.venv/bin/python)")
    ap.add_argument("--torch-worker", nargs=2, metavar=("MODEL", "MODE"), help=argparse.SUPPRESS)
    ap.add_argument("--compiled", action="store_true", help=argparse.SUPPRESS)
    return ap


def main():
    ap = parser()
    a = ap.parse_args()
    if a.torch_worker:
        a.model, a.mode = a.torch_worker
        return torch_worker(a)
    models = [m for m in a.models.split(",") if m]
    modes = [m for m in a.modes.split(",") if m]
    for m in modes:
        if m not in ENTRY:
            ap.error(f"unknown mode '{m}' (forward, train)")
    for m in models:
        if not os.path.exists(os.path.join(MODELS_DIR, m + ".py")):
            ap.error(f"no model {m}.py in {MODELS_DIR}")

    if a.avx2 and not any("-march=" in c for c in a.cflags):
        a.cflags.append("-march=haswell")
    build_ctc()
    tc_version, why = (None, "--no-compile-column") if a.no_compile_column else have_torch_compile(a.venv_python)
    env = torch_env(a.threads, a.avx2)
    core_from = "--avx2" if a.avx2 else "the CPU's choice"
    if os.environ.get("OPENBLAS_CORETYPE", env.get("OPENBLAS_CORETYPE")) != env.get("OPENBLAS_CORETYPE"):
        core_from += f", not the environment's {os.environ['OPENBLAS_CORETYPE']}"
    print(f"# {a.rounds} rounds x {a.iters} calls (after {a.warmup} warm-up), {a.threads} threads; torch tuned: "
          f"OMP_WAIT_POLICY={env['OMP_WAIT_POLICY']} OPENBLAS_CORETYPE={env.get('OPENBLAS_CORETYPE', '(unset)')} "
          f"({core_from}); "
          f"torch.compile: {tc_version or 'skipped (' + why + ')'}"
          + (f"; ctc build --cflags '{' '.join(a.cflags)}'" if a.cflags else "")
          + (f"; ctc OMP_WAIT_POLICY={a.ctc_wait_policy}" if a.ctc_wait_policy else "")
          + ("; both under CPU autocast to bfloat16" if a.dtype == "bf16" else ""), flush=True)
    rows = []
    with tempfile.TemporaryDirectory(prefix="ctc_bench_") as d:
        rate = sgemm_rate(d, a.threads, a.avx2)
        print(f"# sgemm rate (OpenBLAS cblas_sgemm 1024^3, {a.threads} threads, best of 5): "
              + (f"{rate:.1f} GFLOP/s" if rate else "unavailable (no OpenBLAS to link)"), flush=True)
        probe = build_probe(d, "pingpong_probe", PINGPONG_PROBE, ["-lpthread"]) if a.threads > 1 else None
        trip = core_round_trip(d, probe) if probe else None

        def trip_now(trips, *sides):   # the placement between two runs: its round trip, for the sides of both
            if trip:
                t = core_round_trip(d, probe)
                for side in sides:
                    trips[side].append(t[2] if t else None)

        if trip:
            print(f"# a cache line's round trip between CPUs {trip[0]} and {trip[1]}: {trip[2]:.0f} ns (tens: one core "
                  f"complex; hundreds: two, where {a.threads}-thread times depend on the placement)", flush=True)

        def measure(model, mode, exe, classes, compiles):
            """One measurement of a row: its summaries (without "compile" where torch.compile is off or failed)."""
            res = {"ctc": [], "torch": [], "compile": []}
            trips = {"ctc": [], "torch": [], "compile": []}
            steal = {k: [0, 0] for k in res}   # (steal, total) ticks while each side ran
            for _ in range(a.rounds):
                trip_now(trips, "ctc")
                res["ctc"].append(stolen(lambda: run_ctc(exe, mode, classes, a), steal["ctc"]))
                trip_now(trips, "ctc", "torch")
                res["torch"].append(stolen(lambda: run_torch(SYSTEM_PYTHON, model, mode, a), steal["torch"]))
                trip_now(trips, "torch", *(["compile"] if compiles else []))
                if compiles:
                    try:
                        res["compile"].append(stolen(lambda: run_torch(a.venv_python, model, mode, a, compiled=True),
                                                     steal["compile"]))
                        trip_now(trips, "compile")
                    except RuntimeError as e:  # no C++ toolchain for inductor, or an inductor bug
                        print(f"# torch.compile failed on {model} {mode} (its cells say so): {str(e)[-300:]}",
                              file=sys.stderr)
                        compiles, res["compile"] = False, []
            s = {k: summarize(v) for k, v in res.items() if v}
            s["torch_version"] = res["torch"][0].get("version", "?")
            if trips["ctc"] and all(t is not None for v in trips.values() for t in v):
                s["trip"] = {k: max(v) for k, v in trips.items() if v and k in s}   # (before and after each run)
            if steal["ctc"][1]:   # each side's share of the ticks, in %
                s["steal"] = {k: 100.0 * v[0] / v[1] for k, v in steal.items() if k in s and v[1]}
            return s

        for model in models:
            exe, compile_ms, classes = prepare(model, d, a.cflags, a.dtype, a.gemm_rate)
            for mode in modes:
                compiles = bool(tc_version)   # (False once torch.compile failed on this row)

                def once():
                    nonlocal compiles
                    s = measure(model, mode, exe, classes, compiles)
                    compiles = "compile" in s
                    return s

                s = measure_unmarked(once, a.remeasure, f"{model} {mode}")
                if a.gemm_rate:
                    s["gemm"] = run_ctc_profile(exe + "_prof", mode, classes, a, d)
                rows.append((model, mode, compile_ms, s))
                print(f"# {model} {mode}: torch {s['torch']['median']:.3f} ms, ctc {s['ctc']['median']:.3f} ms",
                      file=sys.stderr, flush=True)
    print_table(rows, tc_version if any("compile" in r[3] for r in rows) else None)
    if a.gemm_rate:
        print()
        print_gemm_table(rows, rate, a.threads)
    return 0


def measure_unmarked(measure, remeasure, label):
    """measure() (a row's summaries) again while row_marks() finds a mark, at most remeasure more times;
    the first summaries without a mark, else the last, with "measured": how many measurements."""
    for n in range(1 + max(remeasure, 0)):
        s = measure()
        marks = row_marks(s)
        if not marks:
            break
        print(f"# {label}: marked {' '.join(marks)} (measurement {n + 1})", file=sys.stderr, flush=True)
    s["measured"] = n + 1
    return s


def placement_moved(trips):
    """Whether one side's round trip was over twice another's (the sides ran in different placements)."""
    return max(trips) > 2 * min(trips)


def host_stole(steals):
    """Whether the host took over STEAL_MARK % of the CPU time while some side ran."""
    return max(steals) > STEAL_MARK


def row_marks(s):
    """The marks of a row's summaries s: "*" (its sides ran in different placements), "!" (the host
    took the CPUs while a side ran); [] for a row measured cleanly."""
    return [m for m, key, odd in (("*", "trip", placement_moved), ("!", "steal", host_stole))
            if s.get(key) and odd(list(s[key].values()))]


def side_cell(per_side, fmt, is_odd, mark):
    """A row's cell of one value per side (ctc / torch / torch.compile), marked where is_odd(values);
    ("-", False) without them."""
    if not per_side:
        return "-", False
    vals = [per_side[k] for k in ("ctc", "torch", "compile") if k in per_side]
    odd = is_odd(vals)
    return " / ".join(fmt.format(v) for v in vals) + (" " + mark if odd else ""), odd


def print_table(rows, tc_version):
    """The Markdown table of rows (model, mode, ctc compile ms, summaries); a torch.compile column when
    tc_version is set, "failed" in the rows where torch.compile failed."""
    tv = rows[0][3]["torch_version"] if rows else "?"
    head = ["workload", f"torch {tv} tuned ms", "ctc ms", "torch/ctc"]
    if tc_version:
        head += [f"torch.compile {tc_version} ms", "compile/ctc"]
    head += ["torch/ctc of mins", "torch peak RSS", "ctc peak RSS", "ctc compile (wall / CPU)"]
    trips = any("trip" in r[3] for r in rows)
    sides = "(ctc / torch" + (" / compile)" if tc_version else ")")
    if trips:
        head.append("round trip ns " + sides)
    steals = any(v >= 1.0 for r in rows for v in r[3].get("steal", {}).values())
    if steals:
        head.append("host steal % " + sides)
    mixed = stole = False
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for model, mode, compile_ms, s in rows:
        t, c = s["torch"], s["ctc"]
        cells = [f"{model} {mode}", f"{t['median']:.2f} (min {t['min']:.2f})", f"{c['median']:.2f} (min {c['min']:.2f})",
                 f"{t['median'] / c['median']:.2f}"]
        if tc_version and "compile" in s:
            k = s["compile"]
            cells += [f"{k['median']:.2f} (min {k['min']:.2f})", f"{k['median'] / c['median']:.2f}"]
        elif tc_version:
            cells += ["failed", "-"]
        cells += [f"{t['min'] / c['min']:.2f}", f"{t['rss']:.0f} MiB", f"{c['rss']:.0f} MiB",
                  f"{compile_ms[0]:.0f} / {compile_ms[1]:.0f} ms"]
        if trips:
            cell, odd = side_cell(s.get("trip"), "{:.0f}", placement_moved, "*")
            cells.append(cell)
            mixed |= odd
        if steals:
            cell, odd = side_cell(s.get("steal"), "{:.1f}", host_stole, "!")
            cells.append(cell)
            stole |= odd
        print("| " + " | ".join(cells) + " |")
    again = [f"{model} {mode} {s['measured']} times" for model, mode, _, s in rows if s.get("measured", 1) > 1]
    if mixed or stole or again:
        print()
    if mixed:
        print("(*: that row's sides ran in different placements, one's round trip over twice another's: its "
              "ratios compare different machines; run it again)")
    if stole:
        print(f"(!: the host took over {STEAL_MARK:.0f}% of the machine's CPU time while a side of that row ran: its "
              "times include waits for a vCPU; run it again)")
    if again:   # (--remeasure: the row's earlier measurements were marked; the table has its first unmarked one)
        print(f"(measured again while marked: {', '.join(again)}; each row shows its first measurement without a "
              "mark, or its last)")


def print_gemm_table(rows, rate, threads):
    """--gemm-rate's table: each row's GEMM kernels (gemm_summary of its --profile run) against the
    sgemm probe's rate (None: no OpenBLAS to probe)."""
    print(f"| workload | GEMM kernels' share of kernel time | their GFLOP/s ({threads} thread{'s' if threads > 1 else ''}) "
          "| of the sgemm probe |")
    print("|---|---|---|---|")
    for model, mode, _, s in rows:
        g = s.get("gemm")
        if not g:
            print(f"| {model} {mode} | no GEMM kernel | - | - |")
            continue
        share, gflops, calls = g
        of = f"{100 * gflops / rate:.0f}%" if rate else "-"
        print(f"| {model} {mode} | {100 * share:.0f}% ({calls} calls) | {gflops:.1f} | {of} |")


if __name__ == "__main__":
    sys.exit(main())
