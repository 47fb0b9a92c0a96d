"""The pass instrumentation: --dump-before / --dump-after print the IR around
every AD sweep and pass (AD runs inside staging, so this is the only way to see
the IR before it), the IR is verified after each, and the memory-plan checker
(ir/plan_check.c) runs on every compile."""
import re

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
    assert "unknown pass 'fusion' for --dump-after (expected ad_reverse, ad_forward, unslice, unbroadcast, linsum, regroup, rowsplit, cse, dce, hoist, low_store, lower or all)" in r.stderr


LN = """\
import torch
import torch.nn.functional as F


def g(x, w):
    y = F.layer_norm(x, (8,), w)
    return torch.autograd.grad((y * y).sum(), (x, w))


example_inputs = {"g": (torch.randn(4, 8), torch.randn(8))}
"""


def test_unbroadcast(tmp_path):
    """Layer norm's backward spreads per-row adjoints with BROADCAST; after the
    unbroadcast pass and DCE the elementwise ops read the [4, 1] values in place
    and no BROADCAST is left (the gradients themselves are test_grad's)."""
    p = tmp_path / "m.py"
    p.write_text(LN)
    err = run([CTC, "compile", p, "-o", tmp_path / "m.c", "--entry", "g", "--dump-before", "unbroadcast",
               "--dump-after", "dce"]).stderr
    before = err[err.index("before unbroadcast"):err.index("after dce")]
    after = err[err.index("after dce"):]
    assert " = broadcast " in before and " = broadcast " not in after, before


CSE = """\
import torch


def g(x, w):
    a = torch.exp(x * 2.0) + 1.0
    b = torch.exp(x * 2.0) * 3.0     # the same exp: computed once after cse
    c = (x @ w).sum(dim=1, keepdim=True)
    d = torch.exp(x * 2.0) - c       # the same again, but past a GEMM: kept
    return a + b + d


example_inputs = {"g": (torch.randn(4, 8), torch.randn(8, 8))}
"""


def test_cse(tmp_path):
    """An instruction identical to one shortly before it, with no GEMM between, reads
    that one; past the GEMM (another kernel) the copy stays, so nothing is stored
    just to be read back. The values are test_ops'/test_grad's concern; here the IR."""
    p = tmp_path / "m.py"
    p.write_text(CSE)
    err = run([CTC, "compile", p, "-o", tmp_path / "m.c", "--entry", "g", "--dump-before", "cse",
               "--dump-after", "cse"]).stderr
    before = err[err.index("before cse"):err.index("after cse")]
    after = err[err.index("after cse"):]
    assert before.count(" = exp ") == 3 and after.count(" = exp ") == 2, after
    assert before.count(" = mul ") - after.count(" = mul ") == 1, after   # one x * 2.0 merged too


SCALAR_CSE = """\
import torch


def g(x, w, s):
    k = torch.exp(s * 0.5)             # a one-element value
    a = torch.exp(x * 2.0) * k
    c = (a @ w) @ w                    # two GEMMs: a barrier for tensor copies
    d = torch.exp(x * 2.0) + c         # kept: a copy of a [4,8] tensor past GEMMs
    return d * torch.exp(s * 0.5)      # merged: a scalar costs a word to keep alive


example_inputs = {"g": (torch.randn(4, 8), torch.randn(8, 8), torch.randn(()))}
"""


def test_cse_merges_one_element_values_at_any_distance(tmp_path):
    """A scalar's copy merges across GEMMs (an optimizer's bias corrections are computed
    once per step, not once per parameter); a tensor's copy there still stays."""
    p = tmp_path / "m.py"
    p.write_text(SCALAR_CSE)
    err = run([CTC, "compile", p, "-o", tmp_path / "m.c", "--entry", "g", "--dump-before", "cse",
               "--dump-after", "cse"]).stderr
    before = err[err.index("before cse"):err.index("after cse")]
    after = err[err.index("after cse"):]
    assert before.count(" = exp ") == 4 and after.count(" = exp ") == 3, after


def test_adam_bias_correction_is_computed_once(tmp_path):
    src = """\
import torch
import torch.nn as nn
import torch.nn.functional as F

model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 3))
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)


def train_step(x, y):
    optimizer.zero_grad()
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()
    return loss


example_inputs = {"forward": (torch.randn(4, 8),),
                  "train_step": (torch.randn(4, 8), torch.zeros(4, dtype=torch.long))}
"""
    p = tmp_path / "m.py"
    p.write_text(src)
    run([CTC, "compile", p, "-o", tmp_path / "m.c"])
    c = (tmp_path / "m.c").read_text()
    assert c.count("= pow(0.9, ") == 1 and c.count("= pow(0.999, ") == 1, c.count("= pow(0.9, ")


NAMED = """\
import torch
import torch.nn as nn
import torch.nn.functional as F


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(8, 16)
        self.fc2 = nn.Linear(16, 3)

    def forward(self, x):
        hidden = torch.tanh(self.fc1(x))
        return self.fc2(hidden)


model = Net()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)


def train_step(x, y):
    optimizer.zero_grad()
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()
    return loss


example_inputs = {"forward": (torch.randn(4, 8),), "train_step": (torch.randn(4, 8), torch.zeros(4, dtype=torch.long))}
"""


def test_gradient_buffers_are_named_after_their_values(tmp_path):
    """The whole gradient of a forward value is named grad_<its name> in the generated code (the
    backward reads like llm.c's: the GEMM into fc2 gives grad_hidden), parameters' gradients
    <parameter>_grad; partial sums and derivative factors on the way to x's gradient are
    grad_<x>_term, grad_<x>_term_1, ...: no gradient is a bare number."""
    p = tmp_path / "m.py"
    p.write_text(NAMED)
    run([CTC, "compile", p, "-o", tmp_path / "m.c"])
    c = (tmp_path / "m.c").read_text()
    body = c[c.index("int net_train_step("):]
    m = re.search(r"matmul\(grad_\w+, fc2_weight\) -> (\w+) f32\[4,16\]", body)
    assert m and m.group(1).startswith("grad_hidden"), m and m.group(0)
    assert re.search(r"-> grad_fc1\w* f32\[4,16\]", body), "tanh's input gradient"
    assert "-> fc2_weight_grad f32[3,16]" in body and "-> fc1_bias_grad f32[16]" in body
    # tanh's derivative 1 - tanh^2 is two terms of fc1's gradient, then the whole of it
    assert re.search(r"mul\(hidden(?:_\d+)?, hidden(?:_\d+)?\) -> grad_fc1_term f32\[4,16\]", body), body
    assert re.search(r"sub\(1\.0f, grad_fc1_term\) -> grad_fc1_term_1 f32\[4,16\]", body)
    assert re.search(r"mul\(grad_hidden\w*, grad_fc1_term_1\) -> grad_fc1 f32\[4,16\]", body)
    assert "-> grad_fc2_bias_term f32[1,3]" in body   # the bias's row sum, before its reshape
    assert not re.findall(r"\bgrad_\d+\b", body), sorted(set(re.findall(r"\bgrad_\d+\b", body)))
    named = set(re.findall(r"float \*grad_([a-z]\w*) = ", body))   # each names a value of the entry
    assert len(named) >= 3, named
    for name in named:
        of = re.sub(r"_term(_\d+)?$", "", name)   # a term of of's gradient
        assert re.search(rf"(?<!grad_)\b{of}\b", body), name
