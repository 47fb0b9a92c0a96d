"""The pass instrumentation: --dump-before / --dump-after print the IR around
every AD sweep and pass (AD runs inside staging, so this is the only way to see
the IR before it), the IR is verified after each, and the memory-plan checker
(ir/plan_check.c) runs on every compile."""
from ctc_testlib import CTC, run

SRC = """\
import torch


def g(x):
    y = torch.tanh(x) * x
    return torch.autograd.grad(y.sum(), x)[0]


example_inputs = {"g": (torch.randn(4, 3),)}
"""


def test_dump_before_and_after_ad(tmp_path):
    p = tmp_path / "m.py"
    p.write_text(SRC)
    r = run([CTC, "compile", p, "-o", tmp_path / "m.c", "--entry", "g", "--dump-before", "ad_reverse",
             "--dump-after", "ad_reverse", "--dump-after", "dce", "--dump-after", "lower"])
    err = r.stderr
    before = err.index("; ---- IR of g before ad_reverse ----")
    after = err.index("; ---- IR of g after ad_reverse ----")
    lower = err.index("; ---- IR of g after lower ----")
    dce = err.index("; ---- IR of g after dce ----")
    assert before < after < lower < dce
    # before the sweep there is no gradient code; after it there is
    assert "x_grad" not in err[before:after] and "x_grad" in err[after:lower]
    assert " tanh " in err[before:after]


def test_dump_all(tmp_path):
    p = tmp_path / "m.py"
    p.write_text(SRC)
    err = run([CTC, "compile", p, "-o", tmp_path / "m.c", "--entry", "g", "--dump-after", "all"]).stderr
    for what in ("after ad_reverse", "after lower", "after dce"):
        assert f"; ---- IR of g {what} ----" in err


def test_unknown_pass_is_an_error(tmp_path):
    p = tmp_path / "m.py"
    p.write_text(SRC)
    r = run([CTC, "compile", p, "-o", tmp_path / "m.c", "--dump-after", "fusion"], check=False)
    assert r.returncode == 1
    assert "unknown pass 'fusion' for --dump-after (expected ad_reverse, ad_forward, unslice, dce, hoist, lower or all)" in r.stderr
