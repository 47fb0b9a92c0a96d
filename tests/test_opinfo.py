"""PyTorch's own operator database as an oracle (the way out-of-tree backends
test themselves): the samples of PyTorch 1.13's OpInfo table
(torch.testing._internal.common_methods_invocations.op_db) run through ctc.

For every OpInfo, a few samples (float32, and int64 / bool where the op takes
them) are written as module-level functions in PyTorch's spellings:
`torch.NAME(...)`, `x.NAME(...)` (method variant), `F.NAME(...)` for
nn.functional ops, `x + y` / `-x` (operator variant), `2 + x` for the reflected
operators, `x[...]` for __getitem__, `x.T`, and the in-place variant as
`r = x.clone(); r.NAME_(...); return r`. Sample tensors
(the input, tensor args, the items of a tensor list) become the function's
parameters; other arguments are written as Python literals; samples with
arguments that have no literal spelling are not used.

Each case is first checked alone (`ctc check --entry cK`). ctc must either
accept it or refuse it with a located diagnostic (exit 1, `file:line:col:
error:`); any other exit status, a signal or a hang fails the test. The
accepted cases are built together into one program and run on the sample's
values; the outputs must equal PyTorch's on the same file (float32: rtol 1e-4,
atol 1e-5; integer and bool outputs exactly; nan equals nan; same dtype and
shape). For accepted cases with floating-point outputs, the VJP
(torch.autograd.grad with a random grad_output) and the JVP (forward_ad
make_dual / unpack_dual with random tangents) are compiled too, in float64, and
compared with PyTorch's autograd and forward AD (rtol 1e-6, atol 1e-9);
cases PyTorch itself cannot differentiate are left out. Random ops are left
out (ctc's generator differs by design), and so are samples with empty tensors.
KNOWN_BUGS lists wrong values being fixed elsewhere: reported, not failing.

The default run takes a fixed deterministic subset of the samples; the
`slow` test runs more samples per op. `/usr/bin/python3 tests/test_opinfo.py
[--full]` runs the sweep outside pytest and prints the summary (ops tried,
accepted, passing forward / VJP / JVP) and the list of problems."""
import itertools
import math
import operator
import os
import re
import subprocess
import sys
import tempfile
import textwrap
import threading
import zlib
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "opinfo"))  # the expecttest stand-in
from ctc_testlib import CTC, load_module  # noqa: E402

HEAD = ("import math\nimport torch\nimport torch.nn.functional as F\n"
        "import torch.autograd.forward_ad as fwAD\n\n\n")

# Ops whose values are random draws: ctc's generator differs from PyTorch's by design.
RANDOM_OPS = {"bernoulli", "normal", "multinomial", "uniform", "cauchy", "exponential", "geometric",
              "log_normal", "rand_like", "randn_like", "randint_like", "randint", "nn.functional.rrelu",
              "nn.functional.dropout", "nn.functional.dropout2d", "nn.functional.dropout3d",
              "nn.functional.alpha_dropout", "nn.functional.feature_alpha_dropout", "empty", "empty_like",
              "new_empty", "new_empty_strided", "empty_strided", "svd_lowrank", "pca_lowrank"}

# Ops whose PyTorch 1.13 VJP is no oracle: in a long-running process sgn's backward on
# real tensors returns uninitialised memory (nan, 1.0, 8.99, denormals: whatever the
# allocator hands back). sgn is piecewise constant and PyTorch's rule gives 0 at 0 too,
# so its exact VJP on real tensors is zero everywhere: that is what ctc must give.
TORCH_VJP_ZERO = {"sgn"}

# Reflected operators: OpInfo name -> Python operator (spelled `arg OP x`).
RMAGIC = {"__radd__": "+", "__rsub__": "-", "__rmul__": "*", "__rdiv__": "/", "__rpow__": "**",
          "__rmatmul__": "@", "__rmod__": "%", "__rand__": "&", "__ror__": "|", "__rxor__": "^"}

# Operator spellings of OpInfo.operator_variant: binary `x OP y`, unary `OP x`.
BINOPS = {operator.add: "+", operator.sub: "-", operator.mul: "*", operator.truediv: "/", operator.pow: "**",
          operator.matmul: "@", operator.mod: "%", operator.and_: "&", operator.or_: "|", operator.xor: "^",
          operator.lshift: "<<", operator.rshift: ">>", operator.eq: "==", operator.ne: "!=", operator.lt: "<",
          operator.le: "<=", operator.gt: ">", operator.ge: ">="}
UNOPS = {operator.neg: "-", operator.invert: "~", abs: "abs"}

NP_OK = {torch.float32, torch.float64, torch.int64, torch.int32, torch.bool}
DIAG = re.compile(r"^\S+:\d+:\d+: error: ", re.M)
FWD_TOL = (1e-4, 1e-5)
MAX_ENTRIES = 250  # ctc accepts at most 256 --entry options
AD_TOL = (1e-6, 1e-9)

# Wrong values already known and being fixed elsewhere: (label prefix, expression).
# Reported in the summary instead of failing; remove an entry once its fix lands.
KNOWN_BUGS = set()   # none today (embedding's padding_idx gradient was the last one)

# Samples per (op, dtype), as index ranges: the default subset, the rest of the
# full sweep (the slow test: disjoint, so a run of both does each case once), and both.
SUBSET = {torch.float32: (0, 2), torch.int64: (0, 1), torch.bool: (0, 1)}
REST = {torch.float32: (2, 6), torch.int64: (1, 2), torch.bool: (1, 2)}
FULL = {torch.float32: (0, 6), torch.int64: (0, 2), torch.bool: (0, 2)}


class Unusable(Exception):
    """A sample argument without a Python literal spelling."""


def _dtype_name(d):
    return "torch." + str(d).split(".")[1]


class _Writer:
    """Turns one sample into source text, collecting tensors as parameters."""

    def __init__(self):
        self.names, self.arrays = [], []

    def tensor(self, t):
        if t.dtype not in NP_OK or t.numel() == 0 or t.is_complex() or t.layout != torch.strided:
            raise Unusable("tensor")
        name = f"a{len(self.names)}"
        self.names.append(name)
        self.arrays.append(t.detach().contiguous().clone().numpy())
        return name

    def lit(self, v):
        if isinstance(v, torch.Tensor):
            return self.tensor(v)
        if v is None or isinstance(v, (bool, int, str)):
            return repr(v)
        if isinstance(v, float):
            if math.isnan(v):
                return "math.nan"
            if math.isinf(v):
                return "math.inf" if v > 0 else "-math.inf"
            return repr(v)
        if isinstance(v, torch.dtype):
            if v.is_complex or v in (torch.bfloat16, torch.float16) or "q" in str(v).split(".")[1][:1]:
                raise Unusable("dtype")
            return _dtype_name(v)
        if isinstance(v, (tuple, list, torch.Size)):
            items = [self.lit(x) for x in v]
            if isinstance(v, list):
                return "[" + ", ".join(items) + "]"
            return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"
        raise Unusable(type(v).__name__)

    def index(self, v):
        """A subscript: slices, None, ..., ints, tensors, lists."""
        if isinstance(v, tuple):
            return ", ".join(self.index(x) for x in v) + ("," if len(v) == 1 else "")
        if isinstance(v, slice):
            parts = ["" if p is None else self.lit(p) for p in (v.start, v.stop, v.step)]
            return ":".join(parts[:2]) + (":" + parts[2] if parts[2] else "")
        if v is Ellipsis:
            return "..."
        return self.lit(v)


def _spellings(op):
    """(kind, callee) pairs: how PyTorch users write this op."""
    out = []
    name = op.name
    if name in RMAGIC:
        return [("operator", RMAGIC[name])]
    if op.operator_variant is operator.getitem:
        return [("getitem", None)]
    # OpInfos whose op is a wrapper: the sample's input is the weight for embedding;
    # dropout wraps F.dropout to seed the generator; T and mT are attributes
    if name == "nn.functional.embedding":
        return [("swap01", "F.embedding")]
    if name in ("nn.functional.dropout", "nn.functional.dropout2d"):
        return [("function", "F." + name.split(".")[-1])]
    if name in ("T", "mT", "H", "mH"):
        return [("attr", name)]
    if name.startswith("nn.functional."):
        short = name[len("nn.functional."):]
        if getattr(torch.nn.functional, short, None) is op.op:
            out.append(("function", "F." + short))
        return out
    obj = torch
    for part in name.split("."):
        obj = getattr(obj, part, None)
    if obj is not None and obj is op.op and not name.startswith("_"):
        out.append(("function", "torch." + name))
    if op.method_variant is not None and "." not in name and not name.startswith("_"):
        out.append(("method", name))
    if op.operator_variant in BINOPS:
        out.append(("binop", BINOPS[op.operator_variant]))
    if op.operator_variant in UNOPS:
        out.append(("unop", UNOPS[op.operator_variant]))
    if op.inplace_variant is not None and "." not in name and not name.startswith("_"):
        out.append(("inplace", op.inplace_variant.__name__))
    return out


class Case:
    def __init__(self, key, label, op_id, dtype, names, arrays, expr):
        self.key, self.label, self.op_id, self.dtype = key, label, op_id, dtype
        self.names, self.arrays = names, arrays
        # expr: an expression, or (statements, expression) for in-place spellings
        self.pre, self.expr = expr if isinstance(expr, tuple) else ("", expr)
        self.floats = [i for i, a in enumerate(arrays) if a.dtype.kind == "f"]
        self.want = None       # PyTorch's forward outputs (list of np arrays)
        self.status = None     # accepted / refused / bad
        self.grad = self.jvp = None  # derived cases (Case-like dicts)

    def src(self):
        return f"def {self.key}({', '.join(self.names)}):  # {self.label}\n{self.pre}    return {self.expr}\n\n\n"


def _sample_expr(kind, callee, sample, w):
    inp = sample.input
    if isinstance(inp, torch.Tensor):
        x = w.tensor(inp)
    elif isinstance(inp, (list, tuple)) and inp and all(isinstance(t, torch.Tensor) for t in inp):
        if kind != "function":
            raise Unusable("a list input needs the function form")
        x = w.lit(list(inp))
    else:
        raise Unusable("input")
    kwargs = [f"{k}={w.lit(v)}" for k, v in sample.kwargs.items()]
    if kind == "attr":
        if sample.args or sample.kwargs:
            raise Unusable("attribute form")
        return f"{x}.{callee}"
    if kind == "swap01":
        if not sample.args:
            raise Unusable("swap form")
        first = w.lit(sample.args[0])
        rest = [w.lit(a) for a in sample.args[1:]] + [f"{k}={w.lit(v)}" for k, v in sample.kwargs.items()]
        return f"{callee}({', '.join([first, x] + rest)})"
    if kind == "getitem":
        if len(sample.args) != 1 or kwargs:
            raise Unusable("getitem form")
        return f"{x}[{w.index(sample.args[0])}]"
    args = [w.lit(a) for a in sample.args]
    if kind in ("operator", "binop", "unop") and kwargs:
        raise Unusable("operator form")
    if kind == "operator" and len(args) == 1:
        return f"{args[0]} {callee} {x}"
    if kind == "binop" and len(args) == 1:
        return f"{x} {callee} {args[0]}"
    if kind == "unop" and not args:
        return f"{callee}({x})" if callee == "abs" else f"{callee}{x}"
    if kind in ("operator", "binop", "unop"):
        raise Unusable("operator form")
    if kind == "inplace":
        return (f"    r = {x}.clone()\n    r.{callee}({', '.join(args + kwargs)})\n", "r")
    if kind == "method":
        return f"{x}.{callee}({', '.join(args + kwargs)})"
    return f"{callee}({', '.join([x] + args + kwargs)})"


def _random_sample(op, sample):
    if op.name not in RANDOM_OPS:
        return False
    # dropout is deterministic when not training or with p == 0
    if op.name.startswith("nn.functional.") and "dropout" in op.name:
        return sample.kwargs.get("training", True) and sample.kwargs.get("p", 0.5) != 0
    return True


def collect_cases(per_dtype):
    """Every usable (op, spelling, sample) as a Case; deterministic."""
    import warnings
    from torch.testing._internal.common_methods_invocations import op_db
    cases, tried = [], set()
    for op in op_db:
        op_id = op.name + ("." + op.variant_test_name if op.variant_test_name else "")
        spellings = _spellings(op)
        if not spellings:
            continue
        tried.add(op_id)
        for dtype, (lo, hi) in per_dtype.items():
            try:
                if not op.supports_dtype(dtype, "cpu"):
                    continue
                torch.manual_seed(zlib.crc32(f"{op_id}/{dtype}".encode()))
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    samples = list(itertools.islice(op.sample_inputs("cpu", dtype, requires_grad=False), hi))
            except Exception:
                continue
            for si, s in enumerate(samples):
                if si < lo or _random_sample(op, s):
                    continue
                for kind, callee in spellings:
                    w = _Writer()
                    try:
                        expr = _sample_expr(kind, callee, s, w)
                    except Unusable:
                        continue
                    key = f"c{len(cases)}"
                    label = f"{op_id} {kind} {str(dtype)[6:]} #{si}"
                    cases.append(Case(key, label, op_id, dtype, w.names, w.arrays, expr))
    return cases, tried


# ---- PyTorch side ----------------------------------------------------------

def _outs(r):
    """PyTorch result -> list of np arrays, or None when it is not tensors of numpy's dtypes."""
    if isinstance(r, torch.Tensor):
        r = [r]
    if not (isinstance(r, (tuple, list)) and r and all(isinstance(t, torch.Tensor) for t in r)):
        return None
    if any(t.dtype not in NP_OK or t.layout != torch.strided for t in r):
        return None
    return [t.detach().numpy() for t in r]


def _torch_eval(src, key, args):
    ns = {}
    exec(compile(HEAD + src, f"<{key}>", "exec"), ns)
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return ns[key](*args)


def torch_forward(c):
    try:
        r = _torch_eval(c.src(), c.key, [torch.from_numpy(a.copy()) for a in c.arrays])
    except Exception:
        return None
    outs = _outs(r)
    if outs is None or any(o.size == 0 or o.dtype not in (np.float32, np.float64, np.int64, np.int32, np.bool_)
                           for o in outs):
        return None
    return [o.copy() for o in outs]


def _ad_arrays(c):
    """float64 copies of the inputs (ints/bools unchanged)."""
    return [a.astype(np.float64) if a.dtype.kind == "f" else a for a in c.arrays]


def make_ad_cases(c):
    """The VJP and JVP cases of an accepted float case, if PyTorch can compute them."""
    if not c.floats or not all(o.dtype.kind == "f" for o in c.want):
        return None, None
    rng = np.random.default_rng(zlib.crc32(c.label.encode()))
    xs = _ad_arrays(c)
    fl = [c.names[i] for i in c.floats]
    nout = len(c.want)
    # VJP
    gnames = [f"g{i}" for i in range(nout)]
    gk = "g" + c.key[1:]
    gsrc = (f"def {gk}({', '.join(c.names + gnames)}):  # {c.label} vjp\n{c.pre}    out = {c.expr}\n"
            f"    return torch.autograd.grad(out, ({', '.join(fl)},), "
            f"{gnames[0] if nout == 1 else '(' + ', '.join(gnames) + ',)'})\n\n\n")
    vjp = None
    try:
        txs = [torch.from_numpy(a.copy()) for a in xs]
        for i in c.floats:
            txs[i].requires_grad_(True)
        probe = _torch_eval(c.src(), c.key, [t for t in txs])
        pouts = [probe] if isinstance(probe, torch.Tensor) else list(probe)
        gs = [rng.standard_normal(tuple(p.shape)) if p.dtype == torch.float64 else
              rng.standard_normal(tuple(p.shape)).astype(np.float32) for p in pouts]
        r = _torch_eval(gsrc, gk, txs + [torch.from_numpy(g) for g in gs])
        want = _outs(r)
        if c.op_id in TORCH_VJP_ZERO:
            want = [np.zeros_like(xs[i]) for i in c.floats]
        if want is not None:
            vjp = dict(key=gk, src=gsrc, arrays=xs + gs, want=[w.copy() for w in want], label=c.label + " vjp")
    except Exception:
        pass
    # JVP
    tnames = [f"t{i}" for i in range(len(c.floats))]
    jk = "j" + c.key[1:]
    body = "".join(f"        {n} = fwAD.make_dual({n}, {t})\n" for n, t in zip(fl, tnames))
    if nout == 1:
        ret = "fwAD.unpack_dual(out).tangent"
    else:
        ret = ", ".join(f"fwAD.unpack_dual(out[{i}]).tangent" for i in range(nout))
    jsrc = (f"def {jk}({', '.join(c.names + tnames)}):  # {c.label} jvp\n"
            f"    with fwAD.dual_level():\n{body}{textwrap.indent(c.pre, '    ')}        out = {c.expr}\n"
            f"        return {ret}\n\n\n")
    jvp = None
    try:
        ts = [rng.standard_normal(xs[i].shape) for i in c.floats]
        r = _torch_eval(jsrc, jk, [torch.from_numpy(a.copy()) for a in xs + ts])
        want = _outs(r)
        if want is not None:
            jvp = dict(key=jk, src=jsrc, arrays=xs + ts, want=[w.copy() for w in want], label=c.label + " jvp")
    except Exception:
        pass
    return vjp, jvp


# ---- ctc side --------------------------------------------------------------

def _np_dtype_src(a):
    return {"f": {4: "torch.float32", 8: "torch.float64"}, "i": {8: "torch.int64", 4: "torch.int32"},
            "b": {1: "torch.bool"}}[a.dtype.kind][a.dtype.itemsize]


def _example(key, arrays):
    return f"    {key!r}: ({''.join(f'torch.zeros({tuple(a.shape)}, dtype={_np_dtype_src(a)}), ' for a in arrays)}),\n"


def file_text(items):
    """items: (key, src, arrays)"""
    return (HEAD + "".join(s for _, s, _ in items) + "example_inputs = {\n" +
            "".join(_example(k, a) for k, _, a in items) + "}\n")


def ctc_check(tmp, key, src, arrays):
    """'accepted', 'refused' or a problem description."""
    path = os.path.join(tmp, f"chk_{key}.py")
    with open(path, "w") as f:
        f.write(file_text([(key, src, arrays)]))
    try:
        r = subprocess.run([CTC, "check", path, "--entry", key], capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        return "ctc check hung (60 s)"
    if r.returncode == 0:
        return "accepted"
    if r.returncode == 1 and DIAG.search(r.stderr):
        return "refused"
    return f"ctc check exit {r.returncode}: {(r.stderr or r.stdout).strip()[-600:]}"


RT = os.path.join(os.path.dirname(HERE), "runtime_min")
_runtime_libs = {}
_runtime_lock = threading.Lock()


def _runtime_lib(tmp):
    """The runtime compiled once per sweep (an archive in tmp)."""
    with _runtime_lock:
        return _runtime_lib_locked(tmp)


def _runtime_lib_locked(tmp):
    if tmp not in _runtime_libs:
        objs = []
        for src in sorted(f for f in os.listdir(RT) if f.endswith(".c")):
            o = os.path.join(tmp, "rt_" + src[:-2] + ".o")
            subprocess.run(["cc", "-std=c11", "-O1", "-D_POSIX_C_SOURCE=200809L", "-I", RT, "-c",
                            os.path.join(RT, src), "-o", o], check=True, capture_output=True)
            objs.append(o)
        lib = os.path.join(tmp, "libctc_rt_opinfo.a")
        subprocess.run(["ar", "rcs", lib] + objs, check=True, capture_output=True)
        _runtime_libs[tmp] = lib
    return _runtime_libs[tmp]


def ctc_build(tmp, name, items):
    """`ctc compile`, then the C compiler at -O0 (the sweep checks values, not
    speed: ctc build's -O3 -march=native takes ten times longer on these files
    of hundreds of entries, and ISO C mode computes the same values at any level)."""
    path = os.path.join(tmp, f"{name}.py")
    with open(path, "w") as f:
        f.write(file_text(items))
    exe = os.path.join(tmp, name)
    entries = [x for k, _, _ in items for x in ("--entry", k)]
    r = subprocess.run([CTC, "compile", path, "-o", exe + ".c", *entries], capture_output=True, text=True, timeout=900)
    if r.returncode != 0:
        return exe, r
    r = subprocess.run(["cc", "-std=c11", "-O0", "-D_POSIX_C_SOURCE=200809L", "-DCTC_MAIN", "-I", RT, exe + ".c",
                        _runtime_lib(tmp), "-lz", "-lm", "-o", exe], capture_output=True, text=True, timeout=900)
    return exe, r


def ctc_run(tmp, exe, key, arrays, nout):
    args = [exe, "run", key]
    for i, a in enumerate(arrays):
        p = os.path.join(tmp, f"{key}_in{i}.npy")
        np.save(p, a)
        args += ["--input", p]
    outs = [os.path.join(tmp, f"{key}_out{i}.npy") for i in range(nout)]
    for o in outs:
        args += ["--output", o]
    env = dict(os.environ, CTC_NO_REEXEC="1", OMP_NUM_THREADS="1")
    try:
        r = subprocess.run(args, capture_output=True, text=True, timeout=60, env=env)
    except subprocess.TimeoutExpired:
        return "run hung (60 s)"
    if r.returncode != 0:
        return f"run exit {r.returncode}: {(r.stderr or r.stdout).strip()[-400:]}"
    return [np.load(o) for o in outs]


def mismatch(got, want, rtol, atol):
    """None when equal, else a description."""
    if len(got) != len(want):
        return f"{len(got)} outputs, torch {len(want)}"
    for i, (g, w) in enumerate(zip(got, want)):
        if g.shape != w.shape:
            return f"output {i}: shape {g.shape}, torch {w.shape}"
        if g.dtype != w.dtype:
            return f"output {i}: dtype {g.dtype}, torch {w.dtype}"
        if w.dtype.kind != "f":
            if not np.array_equal(g, w):
                k = np.argmax(g != w)
                return f"output {i}: {int((g != w).sum())} of {w.size} differ (e.g. ctc {g.flat[k]!r}, torch {w.flat[k]!r})"
            continue
        g64, w64 = g.astype(np.float64), w.astype(np.float64)
        same = (g64 == w64) | (np.isnan(g64) & np.isnan(w64))
        with np.errstate(invalid="ignore"):
            close = np.abs(g64 - w64) <= atol + rtol * np.abs(w64)
        ok = same | close
        if not ok.all():
            k = int(np.argmax(~ok.ravel()))
            return (f"output {i}: {int((~ok).sum())} of {w.size} outside rtol={rtol} atol={atol} "
                    f"(e.g. ctc {g.flat[k]!r}, torch {w.flat[k]!r})")
    return None


def _nouts(info):
    return {m.group(1): int(m.group(2)) for m in re.finditer(r"^entry (\S+): \d+ inputs?, (\d+) outputs?", info, re.M)}


def sweep(per_dtype, tmp, jobs=2, log=None):
    """Run the whole pipeline; returns (summary dict, problems list)."""
    say = log or (lambda *_: None)
    cases, tried = collect_cases(per_dtype)
    for c in cases:
        c.want = torch_forward(c)
    cases = [c for c in cases if c.want is not None]
    say(f"{len(cases)} cases PyTorch can run, from {len(tried)} ops")
    problems = []
    with ThreadPoolExecutor(jobs) as ex:
        st = list(ex.map(lambda c: ctc_check(tmp, c.key, c.src(), c.arrays), cases))
    for c, s in zip(cases, st):
        c.status = s
        if s not in ("accepted", "refused"):
            problems.append(f"{c.label}: {s}\n    {c.pre.strip()}{'; ' if c.pre else ''}{c.expr}")
    acc = [c for c in cases if c.status == "accepted"]
    # derived AD cases, checked alone too
    ad = []
    for c in acc:
        c.grad, c.jvp = make_ad_cases(c)
        for d, kind in ((c.grad, "grad"), (c.jvp, "jvp")):
            if d:
                d["case"], d["kind"] = c, kind
                ad.append(d)
    with ThreadPoolExecutor(jobs) as ex:
        st = list(ex.map(lambda d: ctc_check(tmp, d["key"], d["src"], d["arrays"]), ad))
    for d, s in zip(ad, st):
        d["status"] = s
        if s not in ("accepted", "refused"):
            problems.append(f"{d['label']}: {s}\n    {d['case'].expr}")
    say(f"{len(acc)} forward cases accepted; {sum(d['status'] == 'accepted' for d in ad)} of {len(ad)} AD cases")
    # programs of at most MAX_ENTRIES entries, built in parallel
    items = [dict(key=c.key, src=c.src(), arrays=c.arrays, want=c.want, label=c.label, case=c, kind="fwd")
             for c in acc] + [d for d in ad if d["status"] == "accepted"]
    nprog = max(jobs, -(-len(items) // MAX_ENTRIES))
    halves = [items[i::nprog] for i in range(nprog)]
    results = {}

    def build_and_run(hi):
        part = halves[hi]
        if not part:
            return
        exe, r = ctc_build(tmp, f"prog{hi}", [(d["key"], d["src"], d["arrays"]) for d in part])
        if r.returncode != 0:
            # find the culprits one by one (only on failure)
            for d in part:
                e2, r2 = ctc_build(tmp, f"one_{d['key']}", [(d["key"], d["src"], d["arrays"])])
                if r2.returncode != 0:
                    results[d["key"]] = f"ctc build exit {r2.returncode}: {(r2.stderr or r2.stdout).strip()[-600:]}"
            return
        nouts = _nouts(subprocess.run([exe, "info"], capture_output=True, text=True,
                                      env=dict(os.environ, CTC_NO_REEXEC="1")).stdout)
        for d in part:
            got = ctc_run(tmp, exe, d["key"], d["arrays"], nouts.get(d["key"], len(d["want"])))
            if isinstance(got, str):
                results[d["key"]] = got
                continue
            tol = FWD_TOL if d["kind"] == "fwd" else AD_TOL
            results[d["key"]] = mismatch(got, d["want"], *tol) or "ok"

    with ThreadPoolExecutor(jobs) as ex:
        list(ex.map(build_and_run, range(len(halves))))
    passing = {"fwd": set(), "grad": set(), "jvp": set()}
    accepted_ops = set()
    for c in acc:
        accepted_ops.add(c.op_id)
    known, known_ops = [], set()
    for d in items:
        res = results.get(d["key"], "not run (its program failed to build)")
        c = d["case"]
        is_known = any(c.label.startswith(lb) and d["kind"] == k and c.expr == e for lb, k, e in KNOWN_BUGS)
        if res == "ok":
            passing[d["kind"]].add(c.op_id)
            if is_known:
                known.append(f"known bug fixed (remove it from KNOWN_BUGS): {d['label']}: {c.expr}")
        elif is_known:
            known_ops.add(c.op_id)
            known.append(f"known bug: {d['label']}: {res}\n    {c.pre.strip()}{'; ' if c.pre else ''}{c.expr}")
        else:
            problems.append(f"{d['label']}: {res}\n    {c.pre.strip()}{'; ' if c.pre else ''}{c.expr}")
    # an op passes only when none of its cases failed
    failed_ops = {p.split(" ")[0] for p in problems} | known_ops
    summary = dict(ops_tried=len(tried), cases=len(cases), cases_accepted=len(acc),
                   ops_accepted=len(accepted_ops),
                   ops_forward=len(passing["fwd"] - failed_ops),
                   ops_vjp=len(passing["grad"] - failed_ops),
                   ops_jvp=len(passing["jvp"] - failed_ops),
                   ad_cases=len(ad), ad_accepted=sum(d["status"] == "accepted" for d in ad),
                   accepted=sorted(accepted_ops), known=known)
    return summary, problems


def summary_line(s):
    return (f"OpInfo: {s['ops_tried']} ops tried ({s['cases']} cases), {s['ops_accepted']} accepted by ctc "
            f"({s['cases_accepted']} cases), passing: forward {s['ops_forward']} ops, VJP {s['ops_vjp']} ops, "
            f"JVP {s['ops_jvp']} ops ({s['ad_accepted']} of {s['ad_cases']} AD cases accepted)")


def _run(per_dtype, tmp_path, floor):
    s, problems = sweep(per_dtype, str(tmp_path))
    print("\n" + "\n".join(s["known"]) + "\n" + summary_line(s))
    assert not problems, f"{len(problems)} problems:\n" + "\n".join(problems) + "\n" + summary_line(s)
    # a sweep that quietly tests less (a broken generator, ctc refusing more) fails too
    got = (s["ops_forward"], s["ops_vjp"], s["ops_jvp"])
    assert all(g >= f for g, f in zip(got, floor)), f"fewer ops pass than {floor}: " + summary_line(s)


def test_opinfo_subset(tmp_path):
    _run(SUBSET, tmp_path, (205, 165, 165))


@pytest.mark.slow
def test_opinfo_rest(tmp_path):
    _run(REST, tmp_path, (170, 125, 125))


if __name__ == "__main__":
    import time
    t0 = time.time()
    with tempfile.TemporaryDirectory() as tmp:
        s, problems = sweep(FULL if "--full" in sys.argv else SUBSET, tmp, log=print)
    print("\n".join(problems + s["known"]))
    print("accepted:", " ".join(s["accepted"]))
    print(summary_line(s))
    print(f"{len(problems)} problems, {time.time() - t0:.0f} s")


# ---- regressions for what the sweep found, in forms it does not write --------

FIXES = HEAD + '''\
def clone_then_inplace(x):
    y = x.clone()
    y.add_(1.0)
    return x + y


def where_method(x, c, y):
    return x.where(c, y) + torch.where(c, x, y)


def new_zeros_dtype(x):
    return x.new_ones((2, 3), dtype=torch.int64) + x.new_zeros(3, dtype=torch.int64)


def torch_spellings(x, m):
    return torch.t(x) + torch.square(x).t() + torch.masked_fill(x, m, 2.0).t() + torch.detach(x).t()


def int_sums(i, b):
    return torch.add(i, 2, alpha=3).sum() + b.sum() + b.square().sum()


example_inputs = {
    'clone_then_inplace': (torch.zeros(4),),
    'where_method': (torch.zeros(2, 3), torch.zeros(2, 3, dtype=torch.bool), torch.zeros(2, 3)),
    'new_zeros_dtype': (torch.zeros(2, 3),),
    'torch_spellings': (torch.zeros(3, 3), torch.zeros(3, 3, dtype=torch.bool)),
    'int_sums': (torch.zeros(5, dtype=torch.int64), torch.zeros(5, dtype=torch.bool)),
}
'''


def test_fixes_found_by_the_sweep(tmp_path):
    path = tmp_path / "fixes.py"
    path.write_text(FIXES)
    mod = load_module(str(path), "opinfo_fixes")
    rng = np.random.default_rng(7)
    ins = {"clone_then_inplace": [rng.standard_normal(4).astype(np.float32)],
           "where_method": [rng.standard_normal((2, 3)).astype(np.float32), rng.random((2, 3)) > 0.5,
                            rng.standard_normal((2, 3)).astype(np.float32)],
           "new_zeros_dtype": [rng.standard_normal((2, 3)).astype(np.float32)],
           "torch_spellings": [rng.standard_normal((3, 3)).astype(np.float32), rng.random((3, 3)) > 0.5],
           "int_sums": [rng.integers(-5, 5, 5), rng.random(5) > 0.5]}
    exe = tmp_path / "fixes"
    entries = [x for k in ins for x in ("--entry", k)]
    r = subprocess.run([CTC, "build", path, "-o", exe, "--no-blas", "--no-openmp", *entries],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    for k, arrays in ins.items():
        got = ctc_run(str(tmp_path), str(exe), k, arrays, 1)
        assert not isinstance(got, str), got
        want = _outs(getattr(mod, k)(*[torch.from_numpy(a) for a in arrays]))
        assert mismatch(got, want, *FWD_TOL) is None, (k, mismatch(got, want, *FWD_TOL))


@pytest.mark.parametrize("expr", ["torch.view(x, 4)", "torch.size(x)", "torch.exp(x, out=x)",
                                  "x.relu(1)", "torch.sin(x, 2)"])
def test_refused_spellings(tmp_path, expr):
    """Names that exist only as Tensor methods, and arguments ctc would ignore:
    a located diagnostic, never a crash."""
    path = tmp_path / "bad.py"
    path.write_text(HEAD + f"def f(x):\n    return {expr}\n\n\nexample_inputs = {{'f': (torch.zeros(4),)}}\n")
    r = subprocess.run([CTC, "check", path, "--entry", "f"], capture_output=True, text=True, timeout=30)
    assert r.returncode == 1 and DIAG.search(r.stderr), (r.returncode, r.stderr)
