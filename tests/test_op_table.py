"""ir/ops.def is the one place a primitive is defined (ARCHITECTURE.md, "How to
add a primitive"); ctc does not compile while a row lacks its VJP/JVP rule or
C emitter. These tests make a row without *tests* fail too:

- codegen: the codegen harness (tests/codegen/cg_harness.c, checked against
  numpy/PyTorch by tests/codegen/test_codegen.py) must emit every primitive;
  the generated C names each emitted instruction in a comment, which is read
  here;
- AD: every primitive must be differentiated by the AD tests in reverse and in
  forward mode: the primitives are read from the IR each sweep starts from
  (`ctc compile --dump-before ad_reverse --dump-before ad_forward`) for the
  model files of test_grad.py (CASES), test_forward_ad.py and SECOND_ORDER below
  (second-order sweeps, which differentiate the gradient primitives; checked
  against PyTorch here). Only instructions with a floating-point result count:
  the others are never differentiated.
"""
import os
import re

import numpy as np
import torch

from ctc_testlib import CTC, ROOT, compare, load_module, run, run_entry

OPS_DEF = os.path.join(ROOT, "ir", "ops.def")

# Rows with nothing to differentiate that the data cannot show: no operands
# (CONST, IOTA) are found from nargs, EW rows whose derivatives are all NODIFF
# (comparisons, floor) from their columns; the rest are listed with the reason.
NOT_DIFFERENTIATED = {
    "rand_uniform": "its only operand is an i64 offset",
    "argmax": "its result is an i64 index",
    "attention_bwd": "ir/attn.c makes it only in the first-order sweep of backward()/step(), which nothing "
                     "differentiates again (its rules are internal errors)",
}
# Rows with a VJP rule but no JVP rule: ir/attn.c makes them only after staging and before
# the first-order sweep of backward()/step(), where no forward sweep can follow.
REVERSE_ONLY = {
    "attention": "fused by ir/attn.c only where no forward sweep follows; test_attention.py's file has its VJP",
}


def split_top(text):
    """Comma-separated fields of text at parenthesis depth 0."""
    depth, fields, cur = 0, [], ""
    for ch in text:
        if ch == "," and depth == 0:
            fields.append(cur.strip())
            cur = ""
            continue
        depth += (ch == "(") - (ch == ")")
        cur += ch
    return fields + [cur.strip()]


def ops_table():
    """The rows of ops.def: name -> {id, form (OP or EW), nargs, derivs (EW rows: dA, dB)}."""
    text = re.sub(r"/\*.*?\*/", "", open(OPS_DEF).read(), flags=re.S)
    rows = {}
    for m in re.finditer(r"^(OP|EW)\(", text, re.M):
        depth, i = 1, m.end()
        while depth:
            depth += (text[i] == "(") - (text[i] == ")")
            i += 1
        fields = split_top(text[m.end():i - 1])
        name = fields[1].strip('"')
        assert name not in rows, f"ops.def: '{name}' twice"
        rows[name] = {"id": fields[0], "form": m.group(1), "nargs": int(fields[2])}
        if m.group(1) == "EW":
            assert len(fields) == 6, fields
            rows[name]["derivs"] = fields[4:]
    return rows


def test_ops_def_parses():
    rows = ops_table()
    # every row the C side sees (one IR_ enum constant per OP/EW line)
    n = sum(1 for line in open(OPS_DEF) if re.match(r"(OP|EW)\(", line))
    assert len(rows) == n and n > 40
    for name, r in rows.items():
        if r["form"] == "EW":
            assert r["nargs"] in (1, 2), name
            assert r["nargs"] == 2 or r["derivs"][1] == "NODIFF", f"{name}: unary with a dB column"


# ---- codegen coverage ------------------------------------------------------------

HARNESS_SRCS = ["support/arena.c", "support/source.c", "support/diag.c", "ir/builder.c", "ir/printer.c",
                "ir/verify.c", "ir/shape.c", "ir/elem.c", "ir/plan.c", "ir/plan_check.c", "ir/dce.c",
                "tests/codegen/cg_harness.c"]


def emitted_primitives(out_dir):
    """Primitive names of the instruction comments of every generated model.c."""
    names = set()
    for suite in os.listdir(out_dir):
        c = os.path.join(out_dir, suite, suite + ".c")
        if os.path.exists(c):
            names |= set(re.findall(r"/\* (?:\S+:\d+  )?([a-z_0-9]+)\(", open(c).read()))
    return names


def test_codegen_harness_emits_every_primitive(tmp_path):
    srcs = HARNESS_SRCS + [f"{d}/{f}" for d in ("codegen_c", "kernels") for f in sorted(os.listdir(os.path.join(ROOT, d)))
                           if f.endswith(".c")]
    exe = tmp_path / "cg_harness"
    run(["gcc", "-std=c11", "-O0", "-D_POSIX_C_SOURCE=200809L", "-D_DEFAULT_SOURCE"] +
        [os.path.join(ROOT, s) for s in srcs] + ["-lm", "-o", exe])
    run([exe, tmp_path / "out"])
    emitted = emitted_primitives(tmp_path / "out")
    assert "maxpool2d_jvp" in emitted and "add" in emitted   # the comments are read
    # CONST has no code of its own: it is written as a literal where it is used
    missing = sorted(set(ops_table()) - emitted - {"const"})
    assert not missing, ("primitives the codegen harness does not emit (add them to "
                         "tests/codegen/cg_harness.c with a reference in test_codegen.py): " + ", ".join(missing))


# ---- AD coverage -------------------------------------------------------------------

SECOND_ORDER = """\
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.autograd.forward_ad as fwAD
from torch.autograd.functional import hvp
try:
    from torch.func import jvp
except ImportError:
    from functorch import jvp


class Net(nn.Module):
    def forward(self, x):
        return x


IDX = torch.tensor([0, 2, 1, 3, 3, 4]).reshape(2, 3)
IDX2 = torch.tensor([0, 5, 5, 100, 3, 3, 125, 7]).reshape(2, 4)


def f(x, w, e):
    y = F.conv2d(x, w, stride=(2, 1), padding=1, dilation=(1, 2))
    s = (y * y).sum() * 0.1
    s = s + (F.max_pool2d(x, 3, stride=2, padding=1) ** 2).sum()
    s = s + (F.avg_pool2d(x, 2) ** 2).sum()
    s = s + (x[:, :, 1:4:2, ::3] ** 2).sum()
    s = s + (F.embedding(IDX, e, padding_idx=3) ** 2).sum() + (F.embedding(IDX, e) ** 3).sum()
    s = s + (torch.cos(x) * torch.sin(x) * x.detach()).sum()
    s = s + (F.pad(x, (1, 2, 2, 1), mode='reflect') ** 3).sum() + (F.pad(x, (0, 2, 1, 1), mode='replicate') ** 3).sum()
    s = s + (F.interpolate(x, scale_factor=2, mode='bilinear') ** 3).sum() + (F.interpolate(x, size=(9, 7)) ** 3).sum()
    # gather / scatter_add / cumsum: each other's VJPs, differentiated again
    s = s + (torch.gather(x.flatten(1), 1, IDX2) ** 2).sum() + (x.cumsum(2) ** 2).sum() * 0.01
    s = s + (torch.zeros(2, 9, dtype=x.dtype).scatter_add(1, IDX2 % 9, x.flatten(1)[:, 1:5]) ** 3).sum()
    # binary cross entropy: its d/dinput primitive (bce_grad) differentiated again
    s = s + F.binary_cross_entropy(torch.sigmoid(x), torch.sigmoid(x * 0.5), reduction='sum')
    return s


def double_backward(x, w, e, vx, vw, ve):
    gx, gw, ge = torch.autograd.grad(f(x, w, e), (x, w, e), create_graph=True)
    return torch.autograd.grad((gx * vx).sum() + (gw * vw).sum() + (ge * ve).sum(), (x, w, e))


def hessian_vector(x, w, e, vx, vw, ve):
    return hvp(f, (x, w, e), (vx, vw, ve))[1]


def pool_tangent(x, t):
    with fwAD.dual_level():
        y = F.max_pool2d(fwAD.make_dual(x, t), 2, stride=1)
        return fwAD.unpack_dual(y * y).tangent


def grad_of_tangent(x, t):
    return torch.autograd.grad((pool_tangent(x, t) ** 2).sum(), (x, t))


def pool_sq(x):
    return F.max_pool2d(x, 2, stride=1) ** 2


def tangent_of_tangent(x, t, u):
    def pool_sq_tangent(y):
        return jvp(pool_sq, (y,), (t,))[1]
    return jvp(pool_sq_tangent, (x,), (u,))[1]


X = torch.randn(2, 3, 7, 6).double()
W = torch.randn(4, 3, 3, 2).double()
E = torch.randn(5, 3).double()
example_inputs = {"forward": (X,), "double_backward": (X, W, E, X, W, E), "hessian_vector": (X, W, E, X, W, E),
                  "grad_of_tangent": (X, X), "tangent_of_tangent": (X, X, X)}
"""
SECOND_ENTRIES = ["double_backward", "hessian_vector", "grad_of_tangent", "tangent_of_tangent"]


def attention_file():
    """test_attention.py's model file (its `grads` entry's sweep differentiates `attention`)."""
    import test_attention as TA
    return TA.SRC.format(B=2, H=2, T=9, D=4, SCORES=TA.SCALES["mul"], MASK=TA.MASKS["tril"], DROP="att")


def ad_test_files():
    """(source, extra ctc options) of the AD tests' model files."""
    import test_forward_ad as TF
    import test_grad as TG
    env = {"torch": torch, "F": torch.nn.functional, "math": __import__("math")}
    shapes = []
    for k, (label, ins, expr) in enumerate(TG.CASES):   # as test_grad's fixture
        vals = {TG.parse(s)[0]: torch.from_numpy(v) for s, v in zip(ins, TG.inputs_for(ins, k))}
        shapes.append(tuple(eval(expr, env, vals).shape))
    n = len(TG.CASES)
    return [(TG.make_file(TG.CASES, shapes), sum([["--entry", f"l{k}", "--entry", f"g{k}"] for k in range(n)], [])),
            (TF.jvp_file(None), sum([["--entry", f"f{k}", "--entry", f"j{k}"] for k in range(n)], [])),
            (TF.FUNCTIONAL, []), (TF.TORCH_FUNC, []), (TF.DOUBLE, []), (attention_file(), []),
            (SECOND_ORDER, sum([["--entry", e] for e in SECOND_ENTRIES], []))]


def swept_primitives(tmp_path):
    """sweep ("ad_reverse", "ad_forward") -> primitives with a float result in the IR it starts from."""
    seen = {"ad_reverse": set(), "ad_forward": set()}
    for i, (src, opts) in enumerate(ad_test_files()):
        path = tmp_path / f"ad{i}.py"
        path.write_text(src)
        r = run([CTC, "compile", path, "--emit", "ir", "-o", tmp_path / f"ad{i}.ir",
                 "--dump-before", "ad_reverse", "--dump-before", "ad_forward", *opts])
        sweep = None
        for line in r.stderr.splitlines():
            m = re.match(r"; ---- IR of \S+ before (\S+) ----", line)
            if m:
                sweep = m.group(1)
                continue
            m = re.match(r"\s+%\S+ = ([a-z_0-9]+)\b.* : f(32|64)\[", line)
            if m and sweep in seen:
                seen[sweep].add(m.group(1))
    return seen


def test_every_primitive_is_differentiated_by_the_ad_tests(tmp_path):
    rows = ops_table()
    seen = swept_primitives(tmp_path)
    assert {"conv2d_bwd_input", "maxpool2d_jvp", "tanh"} <= seen["ad_reverse"]   # the dumps are read
    for name in NOT_DIFFERENTIATED:
        assert name in rows, f"NOT_DIFFERENTIATED names '{name}', which ops.def lacks"
    need = {name for name, r in rows.items()
            if r["nargs"] != 0 and name not in NOT_DIFFERENTIATED and r.get("derivs") != ["NODIFF", "NODIFF"]
            and not (r["nargs"] == 1 and r.get("derivs", [""])[0] == "NODIFF")}
    for sweep, rule in (("ad_reverse", "VJP"), ("ad_forward", "JVP")):
        missing = sorted(need - seen[sweep] - (set(REVERSE_ONLY) if sweep == "ad_forward" else set()))
        assert not missing, (f"primitives whose {rule} no AD test exercises (add a case to test_grad.CASES, "
                             f"or a second-order use to SECOND_ORDER here): " + ", ".join(missing))


# ---- the second-order rules against PyTorch ------------------------------------------------


def _run(exe, tmp, entry, arrays, nout):
    return run_entry(tmp, exe, entry, arrays, nout)


def test_second_order_rules_against_torch(tmp_path):
    """Reverse over reverse, forward over reverse, reverse over forward and forward
    over forward through conv2d, pools, slicing and embedding (the VJPs and JVPs
    of the gradient primitives), float64 against PyTorch."""
    path = tmp_path / "second.py"
    path.write_text(SECOND_ORDER)
    exe = tmp_path / "net"
    run([CTC, "build", path, "-o", exe] + sum([["--entry", e] for e in SECOND_ENTRIES], []))
    mod = load_module(str(path), "second_order_mod")
    rng = np.random.default_rng(5)
    x, w, e = rng.standard_normal((2, 3, 7, 6)), rng.standard_normal((4, 3, 3, 2)), rng.standard_normal((5, 3))
    vx, vw, ve = rng.standard_normal(x.shape), rng.standard_normal(w.shape), rng.standard_normal(e.shape)
    T = torch.from_numpy

    got = _run(exe, tmp_path, "double_backward", [x, w, e, vx, vw, ve], 3)
    xs = [T(a).requires_grad_() for a in (x, w, e)]
    want = mod.double_backward(*xs, T(vx), T(vw), T(ve))
    for name, g, t in zip("xwe", got, want):
        compare(f"double backward d{name}", g, t.detach().numpy(), 1e-6, 1e-9)

    got = _run(exe, tmp_path, "hessian_vector", [x, w, e, vx, vw, ve], 3)
    want = torch.autograd.functional.hvp(mod.f, (T(x), T(w), T(e)), (T(vx), T(vw), T(ve)))[1]
    for name, g, t in zip("xwe", got, want):
        compare(f"hvp d{name}", g, t.numpy(), 1e-6, 1e-9)

    got = _run(exe, tmp_path, "grad_of_tangent", [x, vx], 2)
    want = mod.grad_of_tangent(T(x).requires_grad_(), T(vx).requires_grad_())
    for name, g, t in zip(("x", "t"), got, want):
        compare(f"grad of a max_pool2d tangent d{name}", g, t.numpy(), 1e-6, 1e-9)

    # forward over forward (functorch's jvp nests; fwAD's dual levels do not)
    u = rng.standard_normal(x.shape)
    (got,) = _run(exe, tmp_path, "tangent_of_tangent", [x, vx, u], 1)
    want = mod.tangent_of_tangent(T(x), T(vx), T(u))
    compare("tangent of a max_pool2d tangent", got, want.numpy(), 1e-6, 1e-9)
