"""sigmoid's exp in hosted C code: ctc_exp_cr_f32, computed in double without a libm call so
that loops over it vectorise, and as accurate as glibc's expf (which sigmoid called before).

The helper is taken from a generated file and swept in C against exp((double)x) rounded to
float, the correctly rounded value up to double exp's own 0.5 ulp of a double. The helper's
relative error is below 1e-14 (a degree-11 Taylor polynomial on |r| <= ln 2 / 2), so it differs
only where exp(x) lies within 1e-14 of a float midpoint: once in 1.2e9 floats on a sweep of
every 7th bit pattern, against 48,804 times for glibc's expf. The bound below (2 differences
in 3.4e7 floats, 0 expected) fails for any error near an ulp: the old f32 polynomial differs on
0.4% of the floats. The special values are exact: the overflow and underflow thresholds,
subnormal results, the infinities, NaN."""
import re
import shutil
import subprocess

import pytest
import torch

from ctc_testlib import CTC, compare, load_module, run, run_forward, x86_has_fma

MODEL = """\
import torch
import torch.nn as nn
import torch.nn.functional as F


class Gate(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(16, 32)

    def forward(self, x):
        h = self.fc(x)
        return F.silu(h) * torch.sigmoid(-h)


model = Gate()
example_inputs = {"forward": (torch.randn(8, 16),)}
"""

SWEEP = r"""
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
%s
int main(void) {
  long n = 0, diff = 0;
  for (uint64_t u = 0; u < 0x100000000ull; u += 127) {
    float x;
    const uint32_t b = (uint32_t)u;
    memcpy(&x, &b, 4);
    if (x != x) continue;
    const float got = ctc_exp_cr_f32(x), want = (float)exp((double)x);
    n++;
    if (memcmp(&got, &want, 4)) diff++;
  }
  static const float sp[] = {0.0f, -0.0f, 1.0f, -1.0f, 88.7f, 88.72283f, 88.7229f, 89.0f, 1e30f, -1e30f, -87.3f,
                             -103.0f, -103.97f, -104.0f, -110.0f, 1e-30f, -1e-30f, 1.4e-45f, INFINITY, -INFINITY};
  for (unsigned k = 0; k < sizeof sp / sizeof *sp; k++) {
    const float got = ctc_exp_cr_f32(sp[k]), want = (float)exp((double)sp[k]);
    if (memcmp(&got, &want, 4)) printf("special %%a: %%a, want %%a\n", sp[k], got, want);
  }
  if (!isnan(ctc_exp_cr_f32(NAN)) || !isnan(ctc_exp_cr_f32(-NAN))) printf("NaN not kept\n");
  printf("swept %%ld differ %%ld\n", n, diff);
  return 0;
}
"""


def _helper(tmp_path):
    (tmp_path / "gate.py").write_text(MODEL)
    run([CTC, "compile", tmp_path / "gate.py", "-o", tmp_path / "gate.c"])
    c = (tmp_path / "gate.c").read_text()
    # the function and the CTC_FMA_F64 macro before it (fused multiply-adds where the target has them)
    m = re.search(r"#ifndef CTC_FMA_F32\b.*?\n#endif\n#endif\n.*?static inline float ctc_exp_cr_f32\(float x\) \{.*?\n\}\n",
                  c, re.S)
    assert m, "no ctc_exp_cr_f32 in the generated file"
    return c, m.group(0)


def test_sigmoid_calls_the_vectorisable_exp_and_matches_pytorch(tmp_path):
    c, _ = _helper(tmp_path)
    body = re.sub(r"/\*.*?\*/", "", c[c.index("int gate_forward("):], flags=re.S)
    assert "ctc_exp_cr_f32(-" in body and not re.search(r"\bexpf\(", body)
    mod = load_module(str(tmp_path / "gate.py"), "gate_mod")
    x = torch.randn(8, 16) * 4
    got = run_forward(tmp_path, tmp_path / "gate.py", mod.model, [x.numpy()])
    with torch.no_grad():
        want = mod.model(x)
    # the linear layer's sums differ in order from PyTorch's: float32 rounding, not exp
    compare("silu(h) * sigmoid(-h)", got[0], want.numpy(), 1e-5, 1e-7)


# "": no FMA instruction; haswell: the reduction and polynomial as fused multiply-adds (CTC_FMA_F64),
# as a model built with -march=native on an AVX2 or AVX-512 CPU computes them
@pytest.mark.parametrize("march", ["", "-march=haswell"])
def test_exp_cr_is_libm_accurate(tmp_path, march):
    if march and not x86_has_fma():
        pytest.skip("an x86-64 CPU with FMA")
    _, helper = _helper(tmp_path)
    src = tmp_path / "sweep.c"
    src.write_text(SWEEP % helper)
    cc = shutil.which("cc") or shutil.which("gcc")
    run([cc, "-std=c11", "-O2", *([march] if march else []), "-Wall", "-Wextra", "-Werror", src, "-o",
         tmp_path / "sweep", "-lm"])
    out = run([tmp_path / "sweep"]).stdout
    assert "special" not in out and "NaN" not in out, out
    m = re.search(r"swept (\d+) differ (\d+)", out)
    assert int(m.group(1)) > 30_000_000 and int(m.group(2)) <= 2, out


@pytest.mark.skipif(not shutil.which("gcc"), reason="GCC's vectoriser report")
def test_a_loop_over_exp_cr_vectorises(tmp_path):
    """The reason for the helper: GCC vectorises a loop over it (a select in a loop that converts
    float to double would keep it from doing so), at -O3 and without -ffast-math."""
    _, helper = _helper(tmp_path)
    src = tmp_path / "loop.c"
    src.write_text("#include <stdint.h>\n#include <string.h>\n" + helper +
                   "void sig(const float *restrict a, float *restrict o, int n) {\n"
                   "  for (int i = 0; i < n; i++) o[i] = 1.0f / (1.0f + ctc_exp_cr_f32(-a[i]));\n}\n")
    r = subprocess.run(["gcc", "-std=c11", "-O3", "-march=haswell", "-fopt-info-vec-optimized", "-c", str(src), "-o",
                        str(tmp_path / "loop.o")], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "loop vectorized" in r.stderr, r.stderr
