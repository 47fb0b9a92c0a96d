"""tanh in hosted and freestanding C: ctc_tanh_f32 (codegen_c/kernels.c), a polynomial without a
libm call so that loops over it vectorise. Its clamp, the choice between its two forms and NaN
are integer operations on the bits: written as float selects, GCC turned them back into a
conditional multiply and division, which "could trap" under ISO C's floating-point rules, and
kept every loop over tanh (GELU's tanh approximation in the gpt) scalar with -march=haswell,
7.6 ns an element against 1.55 now. Its values did not change (compared on all 2^32 floats when
it was rewritten); test_embedded.py sweeps its accuracy as --no-libm's tanhf."""
import re
import shutil
import subprocess

import pytest
import torch

from ctc_testlib import CTC, compare, load_module, run, run_forward

MODEL = """\
import torch
import torch.nn as nn
import torch.nn.functional as F


class Mlp(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(16, 64)

    def forward(self, x):
        return F.gelu(self.fc(x), approximate="tanh") + torch.tanh(x).sum(dim=1, keepdim=True)


model = Mlp()
example_inputs = {"forward": (torch.randn(8, 16),)}
"""


def _helper(tmp_path):
    (tmp_path / "mlp.py").write_text(MODEL)
    run([CTC, "compile", tmp_path / "mlp.py", "-o", tmp_path / "mlp.c"])
    c = (tmp_path / "mlp.c").read_text()
    # the function and the CTC_FMA_F32 macro before it (fused multiply-adds where the target has them)
    m = re.search(r"#ifndef CTC_FMA_F32\b.*?\n#endif\n#endif\nstatic inline float ctc_tanh_f32\(float x\) \{.*?\n\}\n", c, re.S)
    assert m, "no ctc_tanh_f32 in the generated file"
    return m.group(0)


def test_tanh_and_gelu_match_pytorch(tmp_path):
    _helper(tmp_path)
    mod = load_module(str(tmp_path / "mlp.py"), "tanh_mlp")
    x = torch.randn(8, 16) * 6   # both forms, and |x| past 9.1 where tanh is 1
    x[0, :4] = torch.tensor([0.0, -0.0, 9.5, -12.0])
    with torch.no_grad():
        want = mod.model(x).numpy()
    got = run_forward(str(tmp_path), str(tmp_path / "mlp.py"), mod.model, [x.numpy()])[0]
    compare("gelu(tanh) and tanh", got, want, 1e-5, 1e-6)


@pytest.mark.skipif(not shutil.which("gcc"), reason="GCC's vectoriser report")
@pytest.mark.parametrize("march", ["haswell", "x86-64-v4"])
def test_a_loop_over_tanh_vectorises(tmp_path, march):
    helper = _helper(tmp_path)
    src = tmp_path / "loop.c"
    src.write_text("#include <stdint.h>\n#include <string.h>\n" + helper +
                   "void th(const float *restrict a, float *restrict o, int n) {\n"
                   "  for (int i = 0; i < n; i++) o[i] = ctc_tanh_f32(a[i]);\n}\n")
    r = subprocess.run(["gcc", "-std=c11", "-O3", f"-march={march}", "-fopt-info-vec-optimized", "-c", str(src), "-o",
                        str(tmp_path / "loop.o")], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "loop vectorized" in r.stderr, r.stderr
