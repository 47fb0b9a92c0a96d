"""The f32 math helpers of hosted and freestanding C (codegen_c/kernels.c): ctc_tanh_f32,
ctc_erf_f32, ctc_log_f32 and ctc_log1p_f32, polynomials without a libm call so that loops over
them vectorise (glibc's are scalar calls, 3-20 ns an element). GELU is tanh or erf: the tanh form
in the gpt, the exact form (nn.GELU()'s default) in ViT- and BERT-style MLPs; softplus,
logsigmoid and mish are log1p(exp(x)).

Their clamps, the choice between their forms and NaN are integer operations on the bits: written
as float selects, GCC turned them back into a conditional multiply and division, which "could
trap" under ISO C's floating-point rules, and kept every loop over tanh scalar with
-march=haswell (7.6 ns an element against 1.55 then). test_embedded.py sweeps a sample of floats
in a --no-libm file (which has them too); the slow sweep here takes every float."""
import re
import shutil
import subprocess

import pytest
import torch

from ctc_testlib import CTC, ULPS_C, compare, load_module, run, run_forward, x86_has_fma

MODEL = """\
import torch
import torch.nn as nn
import torch.nn.functional as F


class Mlp(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(16, 64)
        self.act = nn.GELU()

    def forward(self, x):
        h = self.fc(x)
        return (F.gelu(h, approximate="tanh") + self.act(h) + torch.tanh(x).sum(dim=1, keepdim=True)
                + torch.erf(x).sum(dim=1, keepdim=True) + F.softplus(h) + F.mish(h)
                + torch.log(x.abs().clamp(min=1e-44)).sum(dim=1, keepdim=True) + torch.log1p(h.abs() - 0.5))


model = Mlp()
example_inputs = {"forward": (torch.randn(8, 16),)}
"""

HELPERS = ["ctc_tanh_f32", "ctc_erf_f32", "ctc_log_f32", "ctc_log1p_f32"]


def _helpers(tmp_path):
    """The generated file's CTC_FMA_F32 macro text and its two helpers, as compilable C."""
    (tmp_path / "mlp.py").write_text(MODEL)
    run([CTC, "compile", tmp_path / "mlp.py", "-o", tmp_path / "mlp.c"])
    c = (tmp_path / "mlp.c").read_text()
    m = re.search(r"#ifndef CTC_FMA_F32\b.*?\n#endif\n#endif\n", c, re.S)
    assert m, "no CTC_FMA_F32 in the generated file"
    text = m.group(0)
    core = re.search(r"#ifndef CTC_LOGK_F32\b.*?\n#endif\n", c, re.S)   # log's and log1p's polynomial
    assert core, "no ctc_logk_f32 in the generated file"
    text += core.group(0)
    for name in HELPERS:
        f = re.search(r"static inline (?:CTC_ALWAYS_INLINE )?float " + name + r"\(float x\) \{.*?\n\}\n", c, re.S)
        assert f, f"no {name} in the generated file"
        text += f.group(0)
    return text


def test_the_helpers_match_pytorch(tmp_path):
    _helpers(tmp_path)
    mod = load_module(str(tmp_path / "mlp.py"), "math_mlp")
    x = torch.randn(8, 16) * 6   # every form of each, |x| past 9.1 (tanh is 1) and 4 (erf is 1)
    x[0, :6] = torch.tensor([0.0, -0.0, 9.5, -12.0, 3.95, -0.75])
    x[1, :3] = torch.tensor([1e-40, 3e-39, 1e30])   # subnormal logs
    with torch.no_grad():
        want = mod.model(x).numpy()
    got = run_forward(str(tmp_path), str(tmp_path / "mlp.py"), mod.model, [x.numpy()])[0]
    compare("gelu (both forms), tanh, erf, softplus, mish, log and log1p", got, want, 1e-5, 1e-6)


@pytest.mark.skipif(not shutil.which("gcc"), reason="GCC's vectoriser report")
@pytest.mark.parametrize("march", ["haswell", "x86-64-v4"])
@pytest.mark.parametrize("name", HELPERS)
def test_a_loop_over_the_helper_vectorises(tmp_path, march, name):
    src = tmp_path / "loop.c"
    src.write_text("#include <stdint.h>\n#include <string.h>\n" + _helpers(tmp_path) +
                   "void th(const float *restrict a, float *restrict o, int n) {\n"
                   f"  for (int i = 0; i < n; i++) o[i] = {name}(a[i]);\n}}\n")
    r = subprocess.run(["gcc", "-std=c11", "-O3", f"-march={march}", "-fopt-info-vec-optimized", "-c", str(src), "-o",
                        str(tmp_path / "loop.o")], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "loop vectorized" in r.stderr, r.stderr


# Every float against glibc's double function, in ulps of the float nearest the exact value (as
# test_embedded.py's sweep measures them); the bounds docs/speed.md and docs/microcontrollers.md state.
SWEEP_BOUNDS = {"ctc_tanh_f32": 1.34, "ctc_erf_f32": 1.04, "ctc_log_f32": 0.84, "ctc_log1p_f32": 0.84}
SWEEP_C = r"""
#include <math.h>
#include <stdio.h>
""" + ULPS_C + r"""
int main(void) {
  double worst = 0;
  float wx = 0;
  long sign = 0;
  for (uint64_t u = 0; u < 0x100000000ull; u++) {
    const uint32_t b = (uint32_t)u;
    float x;
    memcpy(&x, &b, 4);
    const float g = FN(x);
#ifdef ODD   /* the negative half: -f(-x), bit for bit (tanh and erf are odd, and so is their rounding) */
    if (b >= 0x80000000u) {
      const float h = -FN(-x);
      sign += memcmp(&g, &h, 4) != 0;
      continue;
    }
#endif
    const double w = REF((double)x);
    const double e = ulps(g, w);
    sign += !isnan(g) && !isnan(w) && !signbit(g) != !signbit(w);   /* erf(-0) = tanh(-0) = log1p(-0) = -0 */
    if (!(e <= worst)) worst = e == e ? e : INFINITY, wx = x;
  }
  printf("%.4f %.9g %ld\n", worst, wx, sign);
  return 0;
}
"""


@pytest.mark.slow
@pytest.mark.parametrize("march", ["", "-march=haswell"])
@pytest.mark.parametrize("name", HELPERS)
def test_every_float(tmp_path, name, march):
    """All 2^32 floats, with and without FMA (a * b + c rounded once or twice); for tanh and erf the
    negative half as the positive one's negation, bit for bit (glibc's double reference is most of
    the time)."""
    if march and not x86_has_fma():
        pytest.skip("an x86-64 CPU with FMA")
    src = tmp_path / "sweep.c"
    ref = name[4:-4]   # ctc_tanh_f32: tanh
    odd = "#define ODD\n" if ref in ("tanh", "erf") else ""
    src.write_text("#include <stdint.h>\n#include <string.h>\n" + _helpers(tmp_path) +
                   f"#define FN {name}\n#define REF {ref}\n{odd}" + SWEEP_C)
    exe = tmp_path / "sweep"
    run(["gcc", "-std=c11", "-O2", *([march] if march else []), "-fno-builtin", "-w", src, "-o", exe, "-lm"])
    worst, x, sign = run([exe], timeout=600).stdout.split()
    assert int(sign) == 0, f"{name}: {sign} results with the wrong sign (or not odd)"
    assert float(worst) <= SWEEP_BOUNDS[name], f"{name}: {worst} ulp at x = {x} (bound {SWEEP_BOUNDS[name]})"
