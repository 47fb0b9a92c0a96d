"""Fuzzing that reaches the back end: staging, reverse and forward AD, memory
planning and codegen, with ctc built under AddressSanitizer + UBSan
(build/asan/ctc and build/asan/libctc_rt.a, from build.ninja by asan_ninja()).

Seeds (tests/fuzz_seeds/*.py) are small, valid model files with their input
shapes (example_inputs): each must compile (exit 0) before it is mutated, and
its generated program, built with the sanitizers, must run every entry on random
inputs without a report. Mutants change the seeds at the byte, token and AST
level (literals, op and optimizer names, operators, arguments, statements, dims,
input shapes, suffixes such as `.t()`) so that many of them still stage,
differentiate and plan; each is compiled with the sanitized ctc:

    good: exit 0, or exit 1 with a located `file:line:col: error:` diagnostic;
    bad:  a sanitizer report, a signal, exit 2/3, an internal error, a timeout.

A sample of the mutants that compile is built (-Werror) and run under the
sanitizers too, with the arena poisoned around each instruction except for its
own tensors (guard_arena), so an access past a tensor inside the one arena is a
report as well. The default run is deterministic and bounded (well under a minute
on 2 cores; CTC_FUZZ_MUTANTS, CTC_FUZZ_RUNS and CTC_FUZZ_SEED change it). A longer
campaign: `/usr/bin/python3 tests/test_fuzz_backend.py --mutants 60 --seed 100
--minutes 15 --out DIR` (saves every bad mutant and its output in DIR; `--diff`
also compares each program run with PyTorch on the same inputs and weights)."""
import ast
import os
import random
import re
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from ctc_testlib import ROOT, build_lock  # noqa: E402

SEED_DIR = os.path.join(HERE, "fuzz_seeds")
ASAN_CTC = os.path.join(ROOT, "build", "asan", "ctc")
ASAN_RT = os.path.join(ROOT, "build", "asan", "libctc_rt.a")
RT_DIR = os.path.join(ROOT, "runtime_min")
# Generated code compiles without warnings (as test_hygiene checks for the examples).
SAN_CFLAGS = ["-std=c11", "-O0", "-g", "-fno-omit-frame-pointer", "-fsanitize=address,undefined",
              "-fno-sanitize-recover=all", "-Wall", "-Wextra", "-Werror", "-D_POSIX_C_SOURCE=200809L", "-DCTC_MAIN"]
# Distinct exit codes for the sanitizers (1 is ctc's user-error status). The
# compiler's arenas are never freed (the process exits): no leak checking.
SAN_ENV = {**os.environ,
           "ASAN_OPTIONS": "detect_leaks=0:exitcode=97:hard_rss_limit_mb=3072:allocator_may_return_null=1",
           "UBSAN_OPTIONS": "print_stacktrace=1:halt_on_error=1:exitcode=98",
           "CTC_NO_REEXEC": "1", "OMP_NUM_THREADS": "1"}
SAN_REPORT = re.compile(r"ERROR: AddressSanitizer|runtime error:|UndefinedBehaviorSanitizer|"
                        r"ERROR: LeakSanitizer|AddressSanitizer:DEADLYSIGNAL")
LOCATED = re.compile(r"^\S+:\d+:\d+: error: ", re.M)
COMPILE_TIMEOUT = 30
MAX_RUN_ARENA = 256 << 20  # programs with a larger arena are compiled but not run
RUN_TIMEOUT = 60

# Defaults of the test run: mutants per seed, exit-0 mutants per seed built and run.
MUTANTS_PER_SEED = int(os.environ.get("CTC_FUZZ_MUTANTS", "24"))
RUNS_PER_SEED = int(os.environ.get("CTC_FUZZ_RUNS", "1"))
DIFF = os.environ.get("CTC_FUZZ_DIFF", "1") != "0"   # compare the programs run with PyTorch
FUZZ_SEED = int(os.environ.get("CTC_FUZZ_SEED", "14"))


def seed_files():
    return sorted(os.path.join(SEED_DIR, f) for f in os.listdir(SEED_DIR) if f.endswith(".py"))


# ---- building the sanitized ctc and runtime ----------------------------------------------

def asan_ninja():
    """build/asan/build.ninja, made from build.ninja (so the two never disagree on
    the sources): the same rules with -O1 and ASan+UBSan (no -Werror: other
    optimisation levels warn differently), every output under build/asan/."""
    text = open(os.path.join(ROOT, "build.ninja")).read()
    flags = " -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=undefined"
    text = re.sub(r"^cflags = (.*)$", lambda m: "cflags = " + re.sub(r"-O\d", "-O1", m.group(1)).replace(
        " -Werror", "") + flags, text, count=1, flags=re.M)
    text = re.sub(r"^ldflags = (.*)$", lambda m: "ldflags = -fsanitize=address,undefined " + m.group(1), text,
                  count=1, flags=re.M)
    text = re.sub(r"(?<![\w/.-])build/", "build/asan/", text)
    text = "# generated from build.ninja by tests/test_fuzz_backend.py: ASan+UBSan build of ctc and its runtime\n" \
        "builddir = build/asan\n" + text
    path = os.path.join(ROOT, "build", "asan", "build.ninja")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    if not os.path.exists(path) or open(path).read() != text:
        with open(path + ".tmp", "w") as f:
            f.write(text)
        os.replace(path + ".tmp", path)
    return path


def build_asan():
    """ninja -f build/asan/build.ninja: build/asan/ctc and build/asan/libctc_rt.a
    (run ctc with ASAN_OPTIONS=detect_leaks=0: its arenas are never freed, by
    design, so LeakSanitizer would report every chunk)."""
    with build_lock():
        r = subprocess.run(["ninja", "-C", ROOT, "-f", asan_ninja()], capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError("ninja -f build/asan/build.ninja failed:\n" + r.stdout + r.stderr)
    return ASAN_CTC


# ---- running ctc and generated programs ----------------------------------------------------

def compile_c(src_path, c_path):
    """Compile a model file with the sanitized ctc: (verdict, rc, output) with verdict
    'ok' (exit 0), 'diag' (exit 1 with a located diagnostic) or 'bad: why'."""
    try:
        r = subprocess.run([ASAN_CTC, "compile", src_path, "-o", c_path], capture_output=True, text=True,
                           env=SAN_ENV, timeout=COMPILE_TIMEOUT, errors="replace")
    except subprocess.TimeoutExpired:
        return f"bad: timeout ({COMPILE_TIMEOUT} s)", None, ""
    out = r.stderr + r.stdout
    return classify(r.returncode, out), r.returncode, out


def classify(rc, out):
    if SAN_REPORT.search(out):
        return "bad: sanitizer report"
    if rc == 0:
        return "ok"
    if rc == 1:
        return "diag" if LOCATED.search(out) else "bad: exit 1 without a located diagnostic"
    if rc < 0:
        return f"bad: signal {-rc}"
    if "internal error" in out:
        return f"bad: internal error (exit {rc})"
    return f"bad: exit {rc}"


_DT_BYTES = {"f32": 4, "f64": 8, "i64": 8, "i32": 4, "bool": 1}
_DECL = re.compile(r"^  (?:const )?(?:unsigned )?\w+ \*(?:restrict )?(\w+) = \((?:const )?(?:unsigned )?\w+ \*\)\(A \+ (\d+)\);"
                   r"  /\* (\w+)\[([\d,]*)\]( column scratch of (\w+))?")
_INST = re.compile(r"^  /\* (?:\S+:\d+  )?\w+\(")
_KERNEL = re.compile(r"^  /\* kernel \d+: ")
# an optimizer's update table (codegen_c/foreach_c.c): a row's element count, its arrays' arena offsets
_TAB_ROW = re.compile(r"^    \{(\d+), ([\d, ]+)\},\s+/\* \S+ (\w+)\[")
_TAB_INST = re.compile(r"^    /\* (?:\S+:\d+  )?\w+\(")


def _inst_names(line):
    """The operand and result names of an instruction comment
    `/* f.py:3  op(a, b^T, 0.5f) attrs -> r f32[2,3] */`."""
    k = line.index("(")
    depth, j = 0, k
    for j in range(k, len(line)):
        depth += {"(": 1, ")": -1}.get(line[j], 0)
        if depth == 0:
            break
    # an operand read in place through a folded view is `view (in root)`: the view's pointer
    # is declared with its root's storage
    args = [re.sub(r" \(in \w+\)$", "", a.strip()).removesuffix("^T") for a in line[k + 1:j].split(",")]
    m = re.search(r" -> (\w+) ", line[j:])
    roots = re.findall(r"\(in (\w+)\)", line[k + 1:j])   # GEMM operands read in place from a strided view's root
    return [a for a in args if re.fullmatch(r"[A-Za-z_]\w*", a)] + roots + ([m.group(1)] if m else [])


def guard_arena(c_text):
    """Instrument generated C so that ASan sees accesses between the tensors of
    the one arena: before each instruction (or fused kernel: all of its ops) the
    whole arena is poisoned except the operands, results and scratch; it is unpoisoned again
    before the outputs and parameter updates are written. (Without this, an
    access past a tensor that stays inside the arena goes unnoticed.)"""
    m = re.search(r"\b(\w+_ARENA_BYTES)\b", c_text)
    if not m:
        return c_text
    size = m.group(1)
    out, decls, scratch, in_entry = [], {}, {}, False
    group = None   # a fused kernel: [index in out of its guard line, names of all its ops]
    table = None   # an update table's loop: [index in out of its guard line, its rows' regions, its kernel's names]

    def close_group():
        nonlocal group
        if group is not None:
            at, names = group
            names += [scratch[n] for n in names if n in scratch]
            allow = "".join(f" ctc_fz_allow(A + {decls[n][0]}, {decls[n][1]});" for n in dict.fromkeys(names)
                            if n in decls)
            out[at] = f"  ctc_fz_poison(A, {size});{allow}"
            group = None

    for line in c_text.splitlines():
        if group is not None and not _INST.match(line):
            close_group()
        if line.startswith("  unsigned char *A = m->arena;"):
            in_entry, decls, scratch = True, {}, {}
        elif line == "}":
            in_entry = False
        elif in_entry:
            d = _DECL.match(line)
            if d:
                dims = [int(x) for x in d.group(4).split(",") if x]
                n = _DT_BYTES[d.group(3)]
                for x in dims:
                    n *= x
                decls[d.group(1)] = (int(d.group(2)), n)
                if d.group(6):
                    scratch[d.group(6)] = d.group(1)
            elif _TAB_ROW.match(line):   # every row's arrays: the loop runs the kernel on each in turn
                t = _TAB_ROW.match(line)
                n = int(t.group(1)) * _DT_BYTES[t.group(3)]
                table = table or [None, [], []]
                table[1] += [(int(off), n) for off in t.group(2).split(",")]
            elif table is not None and table[0] is None and line.startswith("  for (int p = 0; "):
                table[0] = len(out)
                out.append("")
            elif table is not None and _TAB_INST.match(line):
                table[2] += _inst_names("  " + line.lstrip())
            elif table is not None and table[0] is not None and line == "  }":
                names = table[2] + [scratch[n] for n in table[2] if n in scratch]
                allow = "".join(f" ctc_fz_allow(A + {off}, {n});" for off, n in table[1])
                allow += "".join(f" ctc_fz_allow(A + {decls[n][0]}, {decls[n][1]});" for n in dict.fromkeys(names)
                                 if n in decls)
                out[table[0]] = f"  ctc_fz_poison(A, {size});{allow}"
                table = None
            elif _KERNEL.match(line):   # one guard for the whole kernel: all its ops' tensors
                group = [len(out), []]
                out.append("")
            elif _INST.match(line) and group is not None:
                group[1] += _inst_names(line)
            elif _INST.match(line):
                names = _inst_names(line)
                names += [scratch[n] for n in names if n in scratch]
                allow = "".join(f" ctc_fz_allow(A + {decls[n][0]}, {decls[n][1]});" for n in names if n in decls)
                out.append(f"  ctc_fz_poison(A, {size});{allow}")
            elif line == "  /* outputs */" or line.startswith("  /* parameter updates (every read above saw the old values)") \
                    or line.startswith("  return "):
                out.append(f"  ctc_fz_allow(A, {size});")
        out.append(line)
    head = ("#include <sanitizer/asan_interface.h>\n"
            "static void ctc_fz_poison(void *p, unsigned long n) { __asan_poison_memory_region(p, n); }\n"
            "static void ctc_fz_allow(void *p, unsigned long n) { __asan_unpoison_memory_region(p, n); }\n")
    return head + "\n".join(out) + "\n"


def build_program(c_path, exe):
    """The generated C (with guard_arena) and the runtime, with ASan+UBSan
    (portable GEMM, no OpenMP)."""
    cc = os.environ.get("CC") or "cc"
    guarded = c_path[:-2] + ".guarded.c"
    with open(c_path) as f, open(guarded, "w") as g:
        g.write(guard_arena(f.read()))
    r = subprocess.run([cc, *SAN_CFLAGS, f"-I{RT_DIR}", f"-I{os.path.dirname(os.path.abspath(c_path))}", guarded,
                        ASAN_RT, "-lz", "-lm", "-o", exe], capture_output=True, text=True, timeout=300)
    return r.returncode, r.stdout + r.stderr


_NP_DTYPE = {"f32": "float32", "f64": "float64", "i64": "int64", "i32": "int32", "bool": "bool"}


def parse_info(text):
    """`./net info` → [(entry, [(name, dtype, shape)], n_outputs)]."""
    entries = []
    for line in text.splitlines():
        m = re.match(r"entry (\S+): \d+ inputs?, (\d+) outputs?", line)
        if m:
            entries.append((m.group(1), [], int(m.group(2))))
            continue
        m = re.match(r"\s+input\s+(\S+) (\w+)\[([\d, ]*)\]", line)
        if m and entries:
            shape = tuple(int(d) for d in m.group(3).split(",") if d.strip())
            entries[-1][1].append((m.group(1), m.group(2), shape))
    return entries


INDEX_ERROR = re.compile(r"error: entry '[^']+': index -?\d+ is out of range \[0, \d+\) in '")


def run_program(exe, workdir, rng_seed):
    """Run every entry of a sanitized program twice on random inputs (and save the
    weights): None if all went well, else what went wrong."""
    import numpy as np
    r = subprocess.run([exe, "info"], capture_output=True, text=True, env=SAN_ENV, timeout=RUN_TIMEOUT)
    if r.returncode != 0 or SAN_REPORT.search(r.stderr):
        return f"info: exit {r.returncode}\n{r.stdout}{r.stderr}"
    m = re.search(r"^arena: (\d+) bytes", r.stdout, re.M)
    if m and int(m.group(1)) > MAX_RUN_ARENA:
        return None  # compiled fine; too large to run here
    entries = parse_info(r.stdout)
    if not entries:
        return "info lists no entry:\n" + r.stdout
    rng = np.random.default_rng(rng_seed)
    for entry, inputs, nout in entries:
        args = [exe, "run", entry, "--repeat", "2", "--save", os.path.join(workdir, "w.safetensors"), "--save-training-state"]
        for k, (name, dt, shape) in enumerate(inputs):
            if dt in ("f32", "f64"):
                a = rng.standard_normal(shape).astype(_NP_DTYPE[dt])
            elif dt == "bool":
                a = rng.integers(0, 2, shape).astype(bool)
            else:  # labels, token ids: in and out of range (ctc checks indices, or compares)
                a = rng.integers(-1, 12, shape).astype(_NP_DTYPE[dt])
            p = os.path.join(workdir, f"{entry}.in{k}.npy")
            np.save(p, a)
            args += ["--input", p]
        for k in range(nout):
            args += ["--output", os.path.join(workdir, f"{entry}.out{k}.npy")]
        try:
            r = subprocess.run(args, capture_output=True, text=True, env=SAN_ENV, timeout=RUN_TIMEOUT)
        except subprocess.TimeoutExpired:
            return f"run {entry}: timeout ({RUN_TIMEOUT} s)"
        if r.returncode == 1 and INDEX_ERROR.search(r.stderr) and not SAN_REPORT.search(r.stderr):
            continue   # an index out of range stops the entry with its report, as PyTorch raises
        if r.returncode != 0 or SAN_REPORT.search(r.stderr):
            return f"run {entry}: exit {r.returncode}\n{r.stderr[-4000:]}"
    return None


# ---- differential check against PyTorch (opt-in: --diff) ------------------------------------

# Runs a model file's entries under PyTorch: argv = file, JSON [{name, inputs, dir}];
# per entry a fresh module (torch.manual_seed(0)) whose state_dict goes to dir/w0 (the
# program's weights), the outputs flattened to dir/tK.npy, the state_dict after the
# call to dir/w1; prints one JSON line per entry: the output count or the error.
TORCH_SIDE = r"""
import json, sys, numpy as np, torch
sys.path.insert(0, %(here)r)
from ctc_testlib import load_module, st_write, state_dict_np


def flatten(o, out):
    if isinstance(o, (tuple, list)):
        for e in o:
            flatten(e, out)
    elif isinstance(o, torch.Tensor):
        out.append(o.detach().numpy())
    elif isinstance(o, (int, float)):
        out.append(np.array(o))
    return out


for k, e in enumerate(json.loads(sys.argv[2])):
    try:
        torch.manual_seed(0)
        mod = load_module(sys.argv[1], "mutant%%d" %% k)
        model = getattr(mod, "model", None)
        if not isinstance(model, torch.nn.Module):
            mods = [v for v in vars(mod).values() if isinstance(v, torch.nn.Module)]
            model = mods[0] if len(mods) == 1 else None
        if model is not None:
            st_write(e["dir"] + "/w0.safetensors", state_dict_np(model))
        xs = [torch.from_numpy(np.load(p)) for p in e["inputs"]]
        if e["name"] == "forward":
            model.eval()
            with torch.no_grad():
                out = model(*xs)
        else:
            xs = [x.requires_grad_(True) if x.is_floating_point() else x for x in xs]
            out = getattr(mod, e["name"])(*xs)
        flat = flatten(out, [])
        for j, a in enumerate(flat):
            np.save(e["dir"] + "/t%%d.npy" %% j, a)
        if model is not None:
            st_write(e["dir"] + "/w1.safetensors", state_dict_np(model))
        print(json.dumps({"n": len(flat)}), flush=True)
    except Exception as exc:
        print(json.dumps({"error": ("%%s: %%s" %% (type(exc).__name__, exc))[:200]}), flush=True)
"""


def _close(got, want):
    """Where got and want differ beyond rtol 2e-3 / atol 2e-4 (NaN equal to NaN)."""
    import numpy as np
    with np.errstate(invalid="ignore", over="ignore"):
        return ~np.isclose(got, want, rtol=2e-3, atol=2e-4, equal_nan=True)


def diff_against_torch(src, c_path, exe, workdir, rng_seed):
    """Run each entry of the program and of PyTorch on the same inputs and initial
    weights, and compare the outputs and the parameters after the call; returns
    (mismatches, skipped, compared): two lists of strings and the number of entries
    compared."""
    import json
    import numpy as np
    from ctc_testlib import st_read
    info = subprocess.run([exe, "info"], capture_output=True, text=True, env=SAN_ENV, timeout=RUN_TIMEOUT).stdout
    uses_rng = "rand_uniform(" in open(c_path).read()
    rng = np.random.default_rng(rng_seed)
    entries = []
    text = open(src).read()
    for entry, inputs, nout in parse_info(info):
        if entry in ("decode", "prefill") and f"def {entry}(" not in text:
            continue   # the KV-cache entries ctc derives from forward (test_text.py compares them)
        d = os.path.join(workdir, "diff_" + entry)
        os.makedirs(d, exist_ok=True)
        paths = []
        for k, (name, dt, shape) in enumerate(inputs):
            a = (rng.standard_normal(shape).astype(_NP_DTYPE[dt]) if dt in ("f32", "f64")
                 else rng.integers(0, 2, shape).astype(_NP_DTYPE[dt]))
            paths.append(os.path.join(d, f"in{k}.npy"))
            np.save(paths[-1], a)
        entries.append({"name": entry, "inputs": paths, "dir": d, "nout": nout})
    bad, skipped, compared = [], [], 0
    try:
        r = subprocess.run(["/usr/bin/python3", "-c", TORCH_SIDE % {"here": HERE}, src, json.dumps(entries)],
                           capture_output=True, text=True, timeout=180)
        results = [json.loads(line) for line in r.stdout.splitlines() if line.startswith("{")]
    except subprocess.TimeoutExpired:
        return [], ["torch timeout"], 0
    for e, res in zip(entries, results):
        entry, d, nout = e["name"], e["dir"], e["nout"]
        if "error" in res:
            skipped.append(f"{entry}: torch rejects it: {res['error']}")
            continue
        if uses_rng and entry != "forward":
            skipped.append(f"{entry}: random (dropout) in training mode")
            continue
        args = [exe, "run", entry, "--save", os.path.join(d, "w1c.safetensors")]
        if os.path.exists(os.path.join(d, "w0.safetensors")):
            args += ["--weights", os.path.join(d, "w0.safetensors")]
        for p in e["inputs"]:
            args += ["--input", p]
        for k in range(nout):
            args += ["--output", os.path.join(d, f"c{k}.npy")]
        rc = subprocess.run(args, capture_output=True, text=True, env=SAN_ENV, timeout=RUN_TIMEOUT)
        if rc.returncode != 0:
            bad.append(f"{entry}: ctc program exit {rc.returncode}: {rc.stderr[-300:]}")
            continue
        compared += 1
        if res["n"] != nout:
            bad.append(f"{entry}: {nout} outputs from ctc, {res['n']} from torch")
            continue
        pairs = [(f"output {k}", np.load(os.path.join(d, f"c{k}.npy")), np.load(os.path.join(d, f"t{k}.npy")))
                 for k in range(nout)]
        if os.path.exists(os.path.join(d, "w1.safetensors")):
            wc, wt = st_read(os.path.join(d, "w1c.safetensors")), st_read(os.path.join(d, "w1.safetensors"))
            pairs += [(f"parameter {n} after the call", wc[n], wt[n]) for n in wt if n in wc]
        for what, got, want in pairs:
            got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
            if got.shape != want.shape and got.size == want.size == 1:
                got = got.reshape(want.shape)
            if got.shape != want.shape:
                bad.append(f"{entry} {what}: shape {got.shape} vs torch {want.shape}")
                continue
            off = _close(got, want)
            if off.any():
                i = tuple(int(j) for j in np.argwhere(off)[0])
                bad.append(f"{entry} {what}: {int(off.sum())} of {off.size} differ, e.g. at {i}: "
                           f"ctc {got[i]!r} torch {want[i]!r}")
    return bad, skipped, compared


def build_and_run(c_path, workdir, rng_seed):
    exe = os.path.join(workdir, "net")
    rc, out = build_program(c_path, exe)
    if rc != 0:
        return f"the C compiler failed on the generated code:\n{out[-4000:]}"
    return run_program(exe, workdir, rng_seed)


# ---- mutations -----------------------------------------------------------------------------

INTS = [0, 1, -1, 2, 3, 7, 64, 2**31, 2**62]
SMALL_INTS = [0, 1, -1, 2, 3, 4, 5, 7]
FLOATS = ["0.0", "1.0", "-1.0", "0.5", "1e-8", "1e8", "2.0", "-0.5", "3.0"]
WILD_FLOATS = ["float('nan')", "float('inf')", "-float('inf')", "1e308", "1e-320"]
GROUPS = [
    ["relu", "tanh", "sigmoid", "gelu", "silu", "exp", "abs", "erf", "sin", "cos", "sqrt", "rsqrt", "log",
     "neg", "floor"],
    ["sum", "mean", "amax"],
    ["softmax", "log_softmax"],
    ["ReLU", "Tanh", "Sigmoid", "GELU", "SiLU", "Identity", "LeakyReLU"],
    ["max_pool2d", "avg_pool2d"], ["MaxPool2d", "AvgPool2d"],
    ["SGD", "Adam", "AdamW", "RMSprop", "Adagrad", "Adadelta"],
    ["mse_loss", "l1_loss", "smooth_l1_loss", "binary_cross_entropy_with_logits"],
    ["cross_entropy", "nll_loss"],
    ["maximum", "minimum"],
    ["view", "reshape"],
    ["squeeze", "unsqueeze"],
    ["cat", "stack"],
    ["jvp", "vjp", "hvp", "vhp"],
    ["train", "eval"],
    ["randn", "ones", "zeros", "rand"],
    ["MSELoss", "L1Loss", "SmoothL1Loss"],
    ["StepLR", "ExponentialLR", "CosineAnnealingLR"],
]
GROUP_OF = {name: g for g in GROUPS for name in g}
BINOPS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.MatMult: "@", ast.Pow: "**"}
BINOP_CHOICES = ["+", "-", "*", "/", "@", "+", "-", "*", "**"]
CMPOPS = {ast.Gt: ">", ast.Lt: "<", ast.Eq: "==", ast.NotEq: "!=", ast.GtE: ">=", ast.LtE: "<="}
SUFFIXES = [".t()", ".transpose(0, 1)", "[..., :1]", ".detach()", ".contiguous()", ".unsqueeze(0)",
            ".squeeze()", ".sum(0)", ".mean(-1, keepdim=True)", ".reshape(-1)", ".flatten()", ".float()",
            ".double()", ".abs()", ".exp()", " * 2", "[1:]", ".clamp(min=0)", ".transpose(-2, -1)",
            ".sum(dim=-1, keepdim=True)", ".detach()", ".relu()", "[0]", "[:, None]", ".amax(-1)",
            ".softmax(-1)", " + 1", " / 3", "[..., ::2]", ".tanh()"]
DIMS = ["0", "1", "-1", "2", "-2", "3", "(0, 1)", "(-1,)", "(1, 2)"]
KWARGS = ["keepdim=True", "bias=False", "inplace=True", "padding=1", "stride=2", "approximate='tanh'",
          "reduction='sum'", "reduction='none'", "label_smoothing=0.2", "dim=0", "dim=-1", "momentum=0.9",
          "nesterov=True", "weight_decay=0.1", "amsgrad=True", "betas=(0.8, 0.9)", "centered=True",
          "alpha=0.5", "dampening=0.5", "rho=0.8", "lr_decay=0.01", "eps=1e-3", "lr=0.0", "lr=1.0",
          "create_graph=True", "retain_graph=True", "ignore_index=1", "beta=2.0", "negative_slope=0.3",
          "dilation=2", "kernel_size=1", "elementwise_affine=False", "padding_idx=0", "gamma=0.1"]
OPTIMIZERS = {"SGD", "Adam", "AdamW", "RMSprop", "Adagrad", "Adadelta"}
OPTIM_KWARGS = ["momentum=0.9", "nesterov=True", "weight_decay=0.1", "amsgrad=True", "betas=(0.8, 0.9)",
                "centered=True", "alpha=0.5", "dampening=0.5", "rho=0.8", "lr_decay=0.01", "eps=1e-3",
                "maximize=True", "initial_accumulator_value=0.1"]


class Source:
    """A model file's text and its Python AST (with positions)."""

    def __init__(self, text):
        self.text = text
        self.tree = ast.parse(text)
        self.starts = [0]
        for line in text.splitlines(keepends=True):
            self.starts.append(self.starts[-1] + len(line))
        self.parent = {}
        self.in_func = set()
        for node in ast.walk(self.tree):
            for ch in ast.iter_child_nodes(node):
                self.parent[ch] = node
        for fn in ast.walk(self.tree):
            if isinstance(fn, (ast.FunctionDef, ast.With)):
                for n in ast.walk(fn):
                    self.in_func.add(n)
        self.nodes = list(ast.walk(self.tree))

    def span(self, node):
        return (self.starts[node.lineno - 1] + node.col_offset,
                self.starts[node.end_lineno - 1] + node.end_col_offset)

    def seg(self, node):
        a, b = self.span(node)
        return self.text[a:b]

    def replace(self, edits):
        """Apply [(start, end, new_text)] (non-overlapping)."""
        t = self.text
        for a, b, new in sorted(edits, reverse=True):
            t = t[:a] + new + t[b:]
        return t


def _int_consts(s):
    return [n for n in s.nodes if isinstance(n, ast.Constant) and type(n.value) is int]


def m_int_literal(s, rng, wild):
    cands = _int_consts(s)
    if not cands:
        return None
    n = rng.choice(cands)
    pool = INTS if wild else SMALL_INTS
    v = rng.choice([x for x in pool if x != n.value] or pool)
    a, b = s.span(n)
    return s.replace([(a, b, str(v))])


def m_float_literal(s, rng, wild):
    cands = [n for n in s.nodes if isinstance(n, ast.Constant) and type(n.value) is float]
    if not cands:
        return None
    n = rng.choice(cands)
    v = rng.choice(FLOATS + (WILD_FLOATS if wild else []))
    a, b = s.span(n)
    return s.replace([(a, b, v)])


def m_name_swap(s, rng, wild):
    cands = [n for n in s.nodes if (isinstance(n, ast.Attribute) and n.attr in GROUP_OF)
             or (isinstance(n, ast.Name) and n.id in GROUP_OF)]
    if not cands:
        return None
    n = rng.choice(cands)
    old = n.attr if isinstance(n, ast.Attribute) else n.id
    new = rng.choice([x for x in GROUP_OF[old] if x != old])
    a, b = s.span(n)
    return s.replace([(b - len(old), b, new)])


def _op_between(s, left, right, ops):
    """Offsets of the operator text between two operands."""
    a = s.span(left)[1]
    b = s.span(right)[0]
    gap = s.text[a:b]
    for op in sorted(ops, key=len, reverse=True):
        k = gap.find(op)
        if k >= 0:
            return a + k, a + k + len(op)
    return None


def m_binop_swap(s, rng, wild):
    cands = [n for n in s.nodes if (isinstance(n, ast.BinOp) and type(n.op) in BINOPS)
             or (isinstance(n, ast.Compare) and len(n.ops) == 1 and type(n.ops[0]) in CMPOPS)
             or (isinstance(n, ast.AugAssign) and type(n.op) in BINOPS)]
    if not cands:
        return None
    n = rng.choice(cands)
    if isinstance(n, ast.Compare):
        old, new = CMPOPS[type(n.ops[0])], rng.choice(list(CMPOPS.values()))
        where = _op_between(s, n.left, n.comparators[0], [old])
    elif isinstance(n, ast.AugAssign):
        old = BINOPS[type(n.op)] + "="
        new = rng.choice(BINOP_CHOICES) + "="
        where = _op_between(s, n.target, n.value, [old])
    else:
        old, new = BINOPS[type(n.op)], rng.choice(BINOP_CHOICES)
        where = _op_between(s, n.left, n.right, [old])
    if not where or new == old:
        return None
    return s.replace([(where[0], where[1], new)])


def _calls(s):
    return [n for n in s.nodes if isinstance(n, ast.Call)]


def m_swap_args(s, rng, wild):
    cands = [n for n in _calls(s) if len(n.args) + len(n.keywords) >= 2]
    if not cands:
        return None
    n = rng.choice(cands)
    exprs = list(n.args) + [k.value for k in n.keywords]
    x, y = rng.sample(exprs, 2)
    (a1, b1), (a2, b2) = s.span(x), s.span(y)
    if a1 > a2:
        (a1, b1), (a2, b2), x, y = (a2, b2), (a1, b1), y, x
    if b1 > a2:
        return None
    return s.replace([(a1, b1, s.seg(y)), (a2, b2, s.seg(x))])


def m_drop_arg(s, rng, wild):
    cands = [n for n in _calls(s) if n.args or n.keywords]
    if not cands:
        return None
    n = rng.choice(cands)
    items = list(n.args) + list(n.keywords)
    k = rng.randrange(len(items))
    a, b = s.span(items[k])
    if k + 1 < len(items):  # up to the next argument (drops the comma after)
        b = s.span(items[k + 1])[0]
    elif k > 0:  # from the end of the previous one (drops the comma before)
        a = s.span(items[k - 1])[1]
    return s.replace([(a, b, "")])


def _simple_stmts(s):
    return [n for n in s.nodes if n in s.in_func and isinstance(n, (ast.Assign, ast.AugAssign, ast.Expr, ast.Return))
            and n.lineno == n.end_lineno and not (isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant))]


def m_stmt_dup_del(s, rng, wild):
    cands = _simple_stmts(s)
    if not cands:
        return None
    n = rng.choice(cands)
    line_a, line_b = s.starts[n.lineno - 1], s.starts[n.lineno]
    line = s.text[line_a:line_b]
    if rng.random() < 0.5 or isinstance(n, ast.Return):
        return s.replace([(line_b, line_b, line)])  # duplicate
    a, b = s.span(n)
    return s.replace([(a, b, "pass")])  # delete


def _exprs_in_funcs(s):
    out = []
    for n in s.nodes:
        if n not in s.in_func or not isinstance(n, (ast.Name, ast.Call, ast.Subscript, ast.BinOp, ast.Attribute)):
            continue
        if isinstance(getattr(n, "ctx", None), (ast.Store, ast.Del)):
            continue
        p = s.parent.get(n)
        if isinstance(p, ast.Call) and p.func is n:
            continue
        if isinstance(p, ast.Attribute) and isinstance(n, ast.Name) and n.id == "self":
            continue
        if isinstance(n, ast.Name) and n.id in ("self", "torch", "F", "nn", "fwAD", "math", "model", "optimizer"):
            continue
        out.append(n)
    return out


def m_suffix(s, rng, wild):
    cands = _exprs_in_funcs(s)
    if not cands:
        return None
    n = rng.choice(cands)
    a, b = s.span(n)
    return s.replace([(a, b, f"({s.seg(n)}){rng.choice(SUFFIXES)}")])


def m_dim(s, rng, wild):
    cands = [k for n in _calls(s) for k in n.keywords if k.arg in ("dim", "keepdim", "start_dim")]
    if not cands:
        return None
    k = rng.choice(cands)
    new = rng.choice(["True", "False"]) if k.arg == "keepdim" else rng.choice(DIMS)
    a, b = s.span(k.value)
    return s.replace([(a, b, new)])


def _example_shape_calls(s):
    out = []
    for n in s.nodes:
        if isinstance(n, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "example_inputs" for t in n.targets):
            for c in ast.walk(n):
                if isinstance(c, ast.Call) and isinstance(c.func, ast.Attribute) and c.func.attr in (
                        "randn", "randint", "ones", "zeros", "rand"):
                    out.append(c)
    return out


def m_shape(s, rng, wild):
    calls = _example_shape_calls(s)
    if not calls:
        return None
    c = rng.choice(calls)
    dims = c.args[2].elts if c.func.attr == "randint" and len(c.args) > 2 and isinstance(c.args[2], ast.Tuple) \
        else c.args
    dims = [d for d in dims if isinstance(d, ast.Constant) and type(d.value) is int]
    if not dims:
        return None
    d = rng.choice(dims)
    a, b = s.span(d)
    r = rng.random()
    if r < 0.6:
        v = rng.choice([x for x in [1, 2, 3, 5, 8, 0] if x != d.value])
        return s.replace([(a, b, str(v))])
    if r < 0.8:  # one more dim
        return s.replace([(a, a, f"{rng.choice([1, 2, 3])}, ")])
    k = dims.index(d)  # one dim fewer
    if len(dims) < 2:
        return None
    if k + 1 < len(dims):
        b = s.span(dims[k + 1])[0]
    else:
        a = s.span(dims[k - 1])[1]
    return s.replace([(a, b, "")])


def m_optimizer(s, rng, wild):
    calls = [c for c in _calls(s) if isinstance(c.func, ast.Attribute) and c.func.attr in OPTIMIZERS]
    if not calls:
        return None
    c = rng.choice(calls)
    r = rng.random()
    if r < 0.3:
        a, b = s.span(c.func)
        return s.replace([(b - len(c.func.attr), b, rng.choice(sorted(OPTIMIZERS - {c.func.attr})))])
    if r < 0.6 and c.keywords:
        k = rng.choice(c.keywords)
        a, b = s.span(k.value)
        v = rng.choice(["0.0", "1.0", "0.9", "0.5", "True", "False", "(0.5, 0.5)", "1e-8", "-0.1", "10.0"])
        return s.replace([(a, b, v)])
    end = s.span(c)[1] - 1  # before ')'
    return s.replace([(end, end, ", " + rng.choice(OPTIM_KWARGS))])


def m_add_kwarg(s, rng, wild):
    calls = [c for c in _calls(s) if not any(isinstance(a, ast.Starred) for a in c.args)]
    if not calls:
        return None
    c = rng.choice(calls)
    have = {k.arg for k in c.keywords}
    kw = rng.choice(KWARGS)
    if kw.split("=")[0] in have:
        return None
    end = s.span(c)[1] - 1
    sep = ", " if (c.args or c.keywords) else ""
    return s.replace([(end, end, sep + kw)])


def m_bytes(s, rng, wild):
    """Byte level (lexer, parser, diagnostics): replace, delete or insert characters."""
    data = list(s.text)
    for _ in range(rng.randrange(1, 4)):
        k = rng.randrange(len(data))
        op = rng.randrange(3)
        if op == 0:
            data[k] = rng.choice("()[]{}:,.=+-*@ \n\t#'\"\\0123456789abcxyz")
        elif op == 1:
            del data[k:k + rng.randrange(1, 20)]
        else:
            data[k:k] = rng.choice("()[]{}:,.=+-*@ \n\t#'\"\\0123456789abcxyz")
    return "".join(data)


# (operator, weight): the weights favour mutations that keep a program compiling.
MUTATORS = [(m_name_swap, 5), (m_int_literal, 3), (m_float_literal, 2), (m_binop_swap, 3), (m_swap_args, 1),
            (m_drop_arg, 2), (m_stmt_dup_del, 3), (m_suffix, 4), (m_dim, 2), (m_shape, 3), (m_optimizer, 2),
            (m_add_kwarg, 2), (m_bytes, 1)]


def mutate(text, rng, wild=True):
    """One to three mutations of text; (new_text, [operator names])."""
    ops, fns, weights = [], [f for f, _ in MUTATORS], [w for _, w in MUTATORS]
    count = 1 if rng.random() < 0.7 else rng.choice([2, 3])
    for _ in range(count):
        try:
            s = Source(text)
        except SyntaxError:
            break
        for _attempt in range(20):
            fn = rng.choices(fns, weights)[0]
            new = fn(s, rng, wild)
            if new is not None and new != text:
                text = new
                ops.append(fn.__name__[2:])
                break
    return text, ops


# ---- the campaign ------------------------------------------------------------------------

def mutants_for(seed_path, n, rng_seed, wild=True):
    """n distinct mutants of one seed file, deterministic in rng_seed."""
    text = open(seed_path).read()
    rng = random.Random(f"{rng_seed}:{os.path.basename(seed_path)}")
    out, seen = [], {text}
    for _ in range(n * 10):
        if len(out) == n:
            break
        new, ops = mutate(text, rng, wild)
        if new not in seen:
            seen.add(new)
            out.append((new, ops))
    return out


def campaign(workdir, n_per_seed, runs_per_seed, rng_seed, wild=True, jobs=2, log=None, seeds=None, diff=False):
    """Mutate every seed, compile each mutant with the sanitized ctc, build and run a
    sample of those that compile (with diff, also compare them with PyTorch).
    Returns (stats, failures); failures are (what, mutant_path, output)."""
    seeds = seeds or seed_files()
    work = []
    for sp in seeds:
        base = os.path.splitext(os.path.basename(sp))[0]
        for k, (text, ops) in enumerate(mutants_for(sp, n_per_seed, rng_seed, wild)):
            path = os.path.join(workdir, f"{base}_m{k:04d}.py")
            with open(path, "w") as f:
                f.write(text)
            work.append((base, path, ops))

    def one(item):
        base, path, ops = item
        verdict, rc, out = compile_c(path, path[:-3] + ".c")
        return base, path, ops, verdict, out

    stats = {"mutants": 0, "ok": 0, "diag": 0, "bad": 0, "run": 0, "compared": 0, "diff_skipped": 0,
             "by_op": {}}
    failures, ran = [], {}
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        results = list(pool.map(one, work))
    to_run = []
    for base, path, ops, verdict, out in results:
        stats["mutants"] += 1
        kind = verdict.split(":")[0]
        stats[kind] += 1
        for op in ops:
            d = stats["by_op"].setdefault(op, {"ok": 0, "diag": 0, "bad": 0})
            d[kind] += 1
        if kind == "bad":
            failures.append((f"compile: {verdict} [{', '.join(ops)}]", path, out))
        elif kind == "ok" and ran.get(base, 0) < runs_per_seed:
            ran[base] = ran.get(base, 0) + 1
            to_run.append(path)
        if log:
            log(f"{verdict:<12} {os.path.basename(path)} [{', '.join(ops)}]")

    def run_one(path):
        d = path[:-3] + ".run"
        os.makedirs(d, exist_ok=True)
        err = build_and_run(path[:-3] + ".c", d, 1)
        mism, skipped, compared = [], [], 0
        if diff and not err and os.path.exists(os.path.join(d, "net")):
            mism, skipped, compared = diff_against_torch(path, path[:-3] + ".c", os.path.join(d, "net"), d, 2)
        return path, err, mism, skipped, compared

    with ThreadPoolExecutor(max_workers=jobs) as pool:
        for path, err, mism, skipped, compared in pool.map(run_one, to_run):
            stats["run"] += 1
            if err:
                failures.append(("run: " + err.splitlines()[0], path, err))
            stats["compared"] += compared
            stats["diff_skipped"] += len(skipped)
            if mism:
                failures.append(("differs from PyTorch: " + mism[0], path, "\n".join(mism + skipped)))
            if log:
                log(f"{'run ok' if not err else 'RUN BAD':<12} {os.path.basename(path)} {mism} {skipped}")
    return stats, failures


def format_stats(stats):
    n = max(stats["mutants"], 1)
    lines = [f"{stats['mutants']} mutants: {stats['ok']} compiled (exit 0, {100 * stats['ok'] / n:.0f}%), "
             f"{stats['diag']} diagnosed (exit 1), {stats['bad']} bad; {stats['run']} built and run under "
             f"the sanitizers" + (f"; {stats['compared']} of their entries compared with PyTorch "
                                  f"({stats['diff_skipped']} not comparable)" if stats["compared"] else "")]
    for op, d in sorted(stats["by_op"].items()):
        lines.append(f"  {op:<14} ok {d['ok']:>4}  diag {d['diag']:>4}  bad {d['bad']:>3}")
    return "\n".join(lines)


def format_failure(what, path, out):
    return f"--- {what}: {path}\n{open(path).read()}\n--- output:\n{out[-3000:]}"


# ---- the tests -----------------------------------------------------------------------------

@pytest.fixture(scope="session")
def asan_ctc():
    """build/asan/ctc and its runtime (ninja: nothing to do when up to date);
    skips where the sanitizers do not work."""
    probe = subprocess.run(["cc", "-fsanitize=address,undefined", "-x", "c", "-", "-o", os.devnull],
                           input="int main(void){return 0;}\n", capture_output=True, text=True)
    if probe.returncode != 0:
        pytest.skip("no ASan/UBSan here: " + probe.stderr[:200])
    return build_asan()


@pytest.mark.slow
def test_asan_build_is_build_ninja_with_sanitizers(asan_ctc):
    """The sanitized build compiles every object build.ninja does, with the sanitizers."""
    text = open(asan_ninja()).read()
    plain = re.findall(r"^build build/(\S+\.o): cc (\S+)$", open(os.path.join(ROOT, "build.ninja")).read(), re.M)
    assert plain and re.findall(r"^build build/asan/(\S+\.o): cc (\S+)$", text, re.M) == plain
    assert re.search(r"^cflags = .*-fsanitize=address,undefined", text, re.M)
    assert os.path.exists(ASAN_CTC) and os.path.exists(ASAN_RT)


def test_classify():
    assert classify(0, "") == "ok"
    assert classify(1, "m.py:3:5: error: bad\n  x\n  ^\n") == "diag"
    assert classify(1, "ctc: error: something\n").startswith("bad")
    assert classify(3, "ctc: internal error at x.c:1").startswith("bad: internal")
    assert classify(-11, "").startswith("bad: signal")
    assert classify(0, "x.c:1:2: runtime error: signed integer overflow").startswith("bad")
    assert classify(1, "m.py:3:5: error: x\n==1==ERROR: AddressSanitizer: heap-buffer-overflow").startswith("bad")

@pytest.mark.slow
def test_arena_guard_catches_an_access_past_a_tensor(asan_ctc, tmp_path):
    """guard_arena makes an out-of-tensor access inside the arena a report: the
    generated MLP with one loop bound made one too large."""
    c = str(tmp_path / "model.c")
    verdict, rc, out = compile_c(os.path.join(SEED_DIR, "mlp.py"), c)
    assert verdict == "ok", out
    text = open(c).read()
    fwd = text.index("_forward(")
    # an elementwise loop, or the epilogue loop of a GEMM with its bias (each thread's block
    # of columns: one more makes the last row's store land past the tensor)
    loop = re.compile(r"(for \(int64_t i = 0; i < )(\d+)(; i\+\+\) \{\n\s+const float \w+ = \w+\[i\];)")
    epi = re.compile(r"(for \(int64_t j = c0; j < )(c1)(; j\+\+\) \{\n\s+const float \w+ = \w+\[j\];)")
    m = loop.search(text, fwd)
    if m:
        text = text[:m.start(2)] + str(int(m.group(2)) + 1) + text[m.end(2):]
    else:
        m = epi.search(text, fwd)
        assert m, "no elementwise or epilogue loop in the generated forward"
        text = text[:m.start(2)] + "c1 + 1" + text[m.end(2):]
    with open(c, "w") as f:   # the overrun stays inside the arena: only the guard can see it
        f.write(text)
    h = c[:-2] + ".h"
    ht = open(h).read()
    ht = re.sub(r"(#define \w+_ARENA_BYTES \D*)(\d+)", lambda d: d.group(1) + str(int(d.group(2)) + 4096), ht)
    with open(h, "w") as f:
        f.write(ht)
    err = build_and_run(c, str(tmp_path), 0)
    assert err and "use-after-poison" in err, err


LINEAR_F64 = """\
import torch
import torch.nn as nn
import torch.nn.functional as F


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(6, 4)

    def forward(self, x):
        return self.fc(x.double())


model = Net()


def grads(x, w):
    return torch.autograd.grad(F.linear(x.double(), w).sum(), (x, w))


example_inputs = {"forward": (torch.randn(3, 6),), "grads": (torch.randn(3, 6), torch.randn(4, 6))}
"""


@pytest.mark.slow
def test_linear_of_a_double_input(asan_ctc, tmp_path):
    """Found by the fuzz: a linear layer on an f64 input (x is cast to the weight's
    dtype) declared an f64 result for an f32 GEMM (wrong code in forward, an
    internal error in its VJP)."""
    import numpy as np
    from ctc_testlib import st_write
    src = tmp_path / "lin.py"
    src.write_text(LINEAR_F64)
    c = str(tmp_path / "lin.c")
    verdict, rc, out = compile_c(str(src), c)
    assert verdict == "ok", out
    assert build_and_run(c, str(tmp_path), 0) is None
    exe = str(tmp_path / "net")
    info = subprocess.run([exe, "info"], capture_output=True, text=True, env=SAN_ENV).stdout
    assert "output out f32[3, 4]" in info, info
    rng = np.random.default_rng(0)
    x, w, b = (rng.standard_normal(s).astype(np.float32) for s in ((3, 6), (4, 6), (4,)))
    st_write(tmp_path / "w.safetensors", {"fc.weight": w, "fc.bias": b})
    np.save(tmp_path / "x.npy", x)
    r = subprocess.run([exe, "run", "--weights", tmp_path / "w.safetensors", "--input", tmp_path / "x.npy",
                        "--output", tmp_path / "y.npy"], capture_output=True, text=True, env=SAN_ENV)
    assert r.returncode == 0, r.stderr
    np.testing.assert_allclose(np.load(tmp_path / "y.npy"), x @ w.T + b, rtol=1e-5, atol=1e-6)


def test_mutators_are_deterministic_and_change_the_source():
    seed = seed_files()[0]
    a = mutants_for(seed, 12, 5)
    assert a == mutants_for(seed, 12, 5)
    text = open(seed).read()
    assert len({m for m, _ in a}) == 12 and all(m != text for m, _ in a)
    ops = {op for _, o in mutants_for(seed, 80, 6) for op in o}
    assert {"name_swap", "int_literal", "suffix", "binop_swap", "drop_arg", "shape"} <= ops, ops

@pytest.mark.slow
@pytest.mark.parametrize("seed", [os.path.basename(p) for p in seed_files()])
def test_seed_compiles_and_runs_clean(asan_ctc, tmp_path, seed):
    """Each seed compiles with exit 0 under the sanitizers, its program, built with
    them, runs every entry on random inputs without a report, and its entries agree
    with PyTorch (outputs, and parameters after a training step)."""
    src = os.path.join(SEED_DIR, seed)
    c = str(tmp_path / "model.c")
    verdict, rc, out = compile_c(src, c)
    assert verdict == "ok", f"seed {seed} does not compile cleanly: {verdict}\n{out[-3000:]}"
    err = build_and_run(c, str(tmp_path), 0)
    assert err is None, f"seed {seed}: {err}"
    if DIFF:
        bad, skipped, compared = diff_against_torch(src, c, str(tmp_path / "net"), str(tmp_path), 1)
        assert not bad and compared >= 1, (bad, skipped)
        assert not [s for s in skipped if "torch" in s], skipped

@pytest.mark.slow
def test_mutants_never_crash_and_mostly_reach_codegen(asan_ctc, tmp_path):
    """Mutants of every seed: never a sanitizer report, signal, exit 2/3 or timeout;
    a good share compiles through staging, AD, planning and codegen (exit 0), and
    a sample of those runs clean under the sanitizers and agrees with PyTorch
    where PyTorch runs the mutant too."""
    t0 = time.time()
    stats, failures = campaign(str(tmp_path), MUTANTS_PER_SEED, RUNS_PER_SEED, FUZZ_SEED, diff=DIFF)
    print(format_stats(stats), f"\n({time.time() - t0:.0f} s)")
    if failures:
        pytest.fail(f"{len(failures)} bad mutants:\n" + "\n\n".join(format_failure(*f) for f in failures[:5]),
                    pytrace=False)
    assert stats["ok"] >= 0.3 * stats["mutants"], "mutants mostly die before codegen:\n" + format_stats(stats)
    assert stats["run"] >= len(seed_files()) * min(RUNS_PER_SEED, 1) // 2
    assert not DIFF or stats["compared"] >= stats["run"] // 2, format_stats(stats)


# ---- the long campaign (a script) ----------------------------------------------------------

def main(argv):
    import argparse
    import shutil
    import tempfile
    ap = argparse.ArgumentParser(description="Back-end fuzz campaign with the ASan+UBSan ctc.")
    ap.add_argument("--mutants", type=int, default=200, help="mutants per seed and round")
    ap.add_argument("--runs", type=int, default=5, help="exit-0 mutants per seed and round built and run")
    ap.add_argument("--seed", type=int, default=1, help="first random seed (one round per seed)")
    ap.add_argument("--minutes", type=float, default=0, help="keep going with seed+1, seed+2, ... this long")
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--out", help="folder for bad mutants and their output")
    ap.add_argument("--diff", action="store_true", help="compare the programs run with PyTorch")
    ap.add_argument("--build", action="store_true", help="only build build/asan/ctc and its runtime")
    ap.add_argument("-v", action="store_true", help="one line per mutant")
    args = ap.parse_args(argv)
    build_asan()
    if args.build:
        return 0
    t0, rng_seed, total_bad = time.time(), args.seed, 0
    while True:
        work = tempfile.mkdtemp(prefix="ctc_fuzz_")
        stats, failures = campaign(work, args.mutants, args.runs, rng_seed, jobs=args.jobs,
                                   log=print if args.v else None, diff=args.diff)
        print(f"round seed={rng_seed} ({time.time() - t0:.0f} s so far)\n{format_stats(stats)}", flush=True)
        for what, path, out in failures:
            total_bad += 1
            print(f"BAD {what}: {path}", flush=True)
            if args.out:
                os.makedirs(args.out, exist_ok=True)
                dst = os.path.join(args.out, f"s{rng_seed}_{os.path.basename(path)}")
                shutil.copy(path, dst)
                with open(dst[:-3] + ".log", "w") as f:
                    f.write(f"{what}\n{out}")
        shutil.rmtree(work, ignore_errors=True)
        rng_seed += 1
        if time.time() - t0 >= args.minutes * 60:
            break
    print(f"done: {time.time() - t0:.0f} s, {total_bad} bad mutants")
    return 1 if total_bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
