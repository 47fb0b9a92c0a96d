"""The f32 math helpers of hosted and freestanding C (codegen_c/kernels.c): ctc_tanh_f32,
ctc_erf_f32, ctc_log_f32 and ctc_log1p_f32, polynomials without a libm call so that loops over
them vectorise (glibc's are scalar calls, 3-20 ns an element), and hosted C's ctc_sin_f32 and
ctc_cos_f32 and ctc_tan_f32 (an exact reduction of every float in double), ctc_atan_f32 and
ctc_atan2_f32 (FreeBSD's double atan), ctc_log2_f32 and ctc_log10_f32 (its double log). GELU is tanh or erf: the tanh form
in the gpt, the exact form (nn.GELU()'s default) in ViT- and BERT-style MLPs; softplus,
logsigmoid and mish are log1p(exp(x)); sin and cos are NeRF's and SIREN's.

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
                + torch.log(x.abs().clamp(min=1e-44)).sum(dim=1, keepdim=True) + torch.log1p(h.abs() - 0.5)
                + torch.sin(h) + torch.cos(x * 1000).sum(dim=1, keepdim=True) + torch.tan(h * 0.1)
                + torch.atan(h * 3) + torch.atan2(h, h[:, :1] - 0.5)
                + torch.log2(x.abs().clamp(min=1e-44)).sum(dim=1, keepdim=True) + torch.log10(h.abs() + 1e-3)
                + torch.expm1(torch.tanh(h * 0.1) * 5) + torch.sinh(torch.tanh(h * 0.1) * 6)
                + torch.cosh(torch.tanh(x) * 5).sum(dim=1, keepdim=True) + torch.exp2(torch.tanh(h * 0.1) * 30)
                + torch.asin(torch.tanh(h * 0.3)) + torch.acos(torch.tanh(x * 2)).sum(dim=1, keepdim=True))


model = Mlp()
example_inputs = {"forward": (torch.randn(8, 16),)}
"""

HELPERS = ["ctc_tanh_f32", "ctc_erf_f32", "ctc_log_f32", "ctc_log1p_f32", "ctc_sin_f32", "ctc_cos_f32",
           "ctc_tan_f32", "ctc_atan_f32", "ctc_log2_f32", "ctc_log10_f32", "ctc_expm1_f32", "ctc_sinh_f32", "ctc_cosh_f32",
           "ctc_exp2_f32", "ctc_asin_f32", "ctc_acos_f32"]


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
    core = re.search(r"static inline CTC_ALWAYS_INLINE float ctc_sincos_f32\(float x, uint32_t c\) \{.*?\n\}\n", c, re.S)
    assert core, "no ctc_sincos_f32 in the generated file"   # sin's and cos's
    text += core.group(0)
    for core in ("double ctc_sel_f64", "double ctc_atan_pos_f64", "float ctc_logb_f32", "double ctc_exp_f64k"):
        # atan's, atan2's, log2's and log10's; expm1's, sinh's, cosh's and exp2's
        f = re.search(r"static inline CTC_ALWAYS_INLINE " + core + r"\(.*?\n\}\n", c, re.S)
        assert f, f"no {core} in the generated file"
        text += f.group(0)
    for name in HELPERS + ["ctc_atan2_f32"]:
        f = re.search(r"static inline (?:CTC_ALWAYS_INLINE )?float " + name +
                      r"\((?:float y, )?float x\) \{(?: return [^\n]*\}\n|.*?\n\}\n)", c, re.S)
        assert f, f"no {name} in the generated file"
        text += f.group(0)
    return text


def test_the_helpers_match_pytorch(tmp_path):
    _helpers(tmp_path)
    mod = load_module(str(tmp_path / "mlp.py"), "math_mlp")
    x = torch.randn(8, 16) * 6   # every form of each, |x| past 9.1 (tanh is 1) and 4 (erf is 1)
    x[0, :6] = torch.tensor([0.0, -0.0, 9.5, -12.0, 3.95, -0.75])
    x[1, :3] = torch.tensor([1e-40, 3e-39, 1e30])   # subnormal logs
    x[2, :4] = torch.tensor([3e35, -1.5e20, 8e6, 355.0])   # cos(1000 x): reductions of huge arguments
    with torch.no_grad():
        want = mod.model(x).numpy()
    got = run_forward(str(tmp_path), str(tmp_path / "mlp.py"), mod.model, [x.numpy()])[0]
    compare("gelu (both forms), tanh, erf, softplus, mish, log, log1p, sin, cos, tan, atan, atan2, log2, log10, expm1, "
            "sinh, cosh, exp2, asin and acos", got, want, 1e-5, 1e-6)


@pytest.mark.skipif(not shutil.which("gcc"), reason="GCC's vectoriser report")
@pytest.mark.parametrize("march", ["haswell", "x86-64-v4"])
@pytest.mark.parametrize("name", HELPERS)
def test_a_loop_over_the_helper_vectorises(tmp_path, march, name):
    # -fno-math-errno as `ctc build` compiles (asin's and acos's sqrt: otherwise a call that may set errno)
    src = tmp_path / "loop.c"
    src.write_text("#include <math.h>\n#include <stdint.h>\n#include <string.h>\n" + _helpers(tmp_path) +
                   "void th(const float *restrict a, float *restrict o, int n) {\n"
                   f"  for (int i = 0; i < n; i++) o[i] = {name}(a[i]);\n}}\n")
    r = subprocess.run(["gcc", "-std=c11", "-O3", f"-march={march}", "-fno-math-errno", "-fopt-info-vec-optimized", "-c", str(src), "-o",
                        str(tmp_path / "loop.o")], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "loop vectorized" in r.stderr, r.stderr


@pytest.mark.skipif(not shutil.which("gcc"), reason="GCC's vectoriser report")
@pytest.mark.parametrize("march", ["haswell", "x86-64-v4"])
def test_a_loop_over_atan2_vectorises(tmp_path, march):
    src = tmp_path / "loop.c"
    src.write_text("#include <math.h>\n#include <stdint.h>\n#include <string.h>\n" + _helpers(tmp_path) +
                   "void th(const float *restrict a, const float *restrict b, float *restrict o, int n) {\n"
                   "  for (int i = 0; i < n; i++) o[i] = ctc_atan2_f32(a[i], b[i]);\n}\n")
    r = subprocess.run(["gcc", "-std=c11", "-O3", f"-march={march}", "-fno-math-errno", "-fopt-info-vec-optimized", "-c", str(src), "-o",
                        str(tmp_path / "loop.o")], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "loop vectorized" in r.stderr, r.stderr


ATAN2_C = r"""
#include <math.h>
#include <stdio.h>
""" + ULPS_C + r"""
int main(void) {
  static const float sp[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, 1.0f, -1.0f, 1e-40f, -3e38f, 0.5f};
  double worst = 0;
  long sign = 0;
  uint64_t s = 88172645463325252ull;
  for (long k = 0; k < 4000000; k++) {   /* the special values' pairs, then random bits */
    s ^= s << 13, s ^= s >> 7, s ^= s << 17;
    const uint32_t a = (uint32_t)s, b = (uint32_t)(s >> 32);
    float y, x;
    memcpy(&y, &a, 4), memcpy(&x, &b, 4);
    if (k < 100) y = sp[k % 10], x = sp[k / 10];
    else if (k % 3 == 0) x = y * (float)((s >> 20) % 1000) / 977.0f;   /* nearby magnitudes */
    const float g = ctc_atan2_f32(y, x);
    const double w = atan2((double)y, (double)x), e = ulps(g, w);
    sign += !isnan(g) && !isnan(w) && !signbit(g) != !signbit(w);
    sign += isnan(g) != isnan(w);
    if (!(e <= worst)) worst = e == e ? e : INFINITY;
  }
  printf("%.4f %ld\n", worst, sign);
  return 0;
}
"""


@pytest.mark.parametrize("march", ["", "-march=haswell"])
def test_atan2_pairs(tmp_path, march):
    """atan2 on 4 million pairs (the zeros', infinities' and NaN's, random bits, and y / x near 1)
    against glibc's double atan2: C's values at the zeros and infinities, within 0.501 ulp."""
    if march and not x86_has_fma():
        pytest.skip("an x86-64 CPU with FMA")
    src = tmp_path / "pairs.c"
    src.write_text("#include <math.h>\n#include <stdint.h>\n#include <string.h>\n" + _helpers(tmp_path) + ATAN2_C)
    exe = tmp_path / "pairs"
    run(["gcc", "-std=c11", "-O2", *([march] if march else []), "-fno-builtin", "-w", src, "-o", exe, "-lm"])
    worst, sign = run([exe]).stdout.split()
    assert int(sign) == 0 and float(worst) <= 0.501, (worst, sign)


# Every float against glibc's double function, in ulps of the float nearest the exact value (as
# test_embedded.py's sweep measures them); the bounds docs/speed.md and docs/microcontrollers.md state.
SWEEP_BOUNDS = {"ctc_tanh_f32": 1.34, "ctc_erf_f32": 1.04, "ctc_log_f32": 0.84, "ctc_log1p_f32": 0.84,
                "ctc_sin_f32": 0.502, "ctc_cos_f32": 0.502, "ctc_tan_f32": 0.502, "ctc_atan_f32": 0.501,
                "ctc_log2_f32": 0.501, "ctc_log10_f32": 0.501, "ctc_expm1_f32": 0.501, "ctc_sinh_f32": 0.501,
                "ctc_cosh_f32": 0.501, "ctc_exp2_f32": 0.501, "ctc_asin_f32": 0.501, "ctc_acos_f32": 0.501}
# The helpers on ctc_exp_f64k (e^t in double, its polynomial's error below 1e-14, one rounding): every
# third float (all exponents, every residue of the low bits' patterns but a third)
# and asin and acos on ctc_atan_pos_f64 (atan's, swept on every float)
SWEEP_STEP = {"ctc_expm1_f32": 3, "ctc_sinh_f32": 3, "ctc_cosh_f32": 3, "ctc_exp2_f32": 3, "ctc_asin_f32": 3,
              "ctc_acos_f32": 3}
SWEEP_C = r"""
#include <math.h>
#include <stdio.h>
""" + ULPS_C + r"""
void fn_plain(const float *x, float *y, long n);
void fn_fma(const float *x, float *y, long n);
#define NV (1 + HAVE_FMA)
#define NB 4096   /* floats a batch: each build's helper over a batch in one call (its loop vectorised) */
static float xs[NB], xn[NB], ys[2][NB], yn[2][NB];
int main(void) {
  void (*const fn[2])(const float *, float *, long) = {fn_plain, fn_fma};
  double worst[2] = {0.5, 0.5};
  float wx[2] = {0, 0};
  long sign[2] = {0, 0};
  for (uint64_t u0 = 0; u0 < 0x100000000ull; u0 += (uint64_t)NB * STEP) {
    long n = 0;
    for (uint64_t u = u0; u < u0 + (uint64_t)NB * STEP && u < 0x100000000ull; u += STEP, n++) {
      const uint32_t b = (uint32_t)u;
      memcpy(&xs[n], &b, 4);
      xn[n] = -xs[n];
    }
    for (int v = 0; v < NV; v++) {
      fn[v](xs, ys[v], n);
#if defined ODD || defined EVEN
      if (u0 + (uint64_t)NB * STEP > 0x80000000u) fn[v](xn, yn[v], n);
#endif
    }
    for (long i = 0; i < n; i++) {
      const float x = xs[i];
      uint32_t b;
      memcpy(&b, &x, 4);
#if defined ODD || defined EVEN
      if (b >= 0x80000000u) {   /* the negative half: -f(-x) (ODD: tanh, erf, sin, tan and atan are odd, and
                                   so is their rounding) or f(-x) (EVEN: cos), bit for bit */
        for (int v = 0; v < NV; v++) {
          const float g = ys[v][i];
#ifdef ODD
          const float h = -yn[v][i];
#else
          const float h = yn[v][i];
#endif
          sign[v] += memcmp(&g, &h, 4) != 0 && !(isnan(g) && isnan(h));   /* sin(-inf) and sin(inf): NaN */
        }
        continue;
      }
#endif
      const double w = REF((double)x);   /* once for both builds */
      const float wf = (float)w;
      for (int v = 0; v < NV; v++) {
        const float g = ys[v][i];
        if (g == wf && g != 0) continue;   /* rounded to nearest: at most 0.5 ulp (worst starts there) */
        const double e = ulps(g, w);
        sign[v] += !isnan(g) && !isnan(w) && !signbit(g) != !signbit(w);   /* erf(-0) = tanh(-0) = log1p(-0) = -0 */
        if (!(e <= worst[v])) worst[v] = e == e ? e : INFINITY, wx[v] = x;
      }
    }
  }
  for (int v = 0; v < NV; v++) printf("%.4f %.9g %ld\n", worst[v], wx[v], sign[v]);
  return 0;
}
"""


# The sweeps are split over two files (this one and test_math_sweeps.py) so that the suite's two
# workers share them (--dist loadfile gives a file to one worker): alone they were 65 of the 89
# minutes of CTC_TESTS=all on an AVX2-only Zen 3 (2026-12-01); with the helpers called on batches
# of 4,096 floats (every_float), the two files take 25.5 CPU minutes there (16.5 on 2 workers).
SWEEP_HERE = ["ctc_sin_f32", "ctc_tan_f32", "ctc_cos_f32", "ctc_atan_f32", "ctc_asin_f32", "ctc_acos_f32"]
SWEEP_OTHERS = [h for h in HELPERS if h not in SWEEP_HERE]


@pytest.mark.slow
@pytest.mark.parametrize("name", SWEEP_HERE)
def test_every_float(tmp_path, name):
    every_float(tmp_path, name)


def every_float(tmp_path, name):
    """All 2^32 floats, with and without FMA (a * b + c rounded once or twice: the helper built
    plainly and with -march=haswell, two files of one program, so that the reference is computed
    once); for tanh, erf, sin, tan and atan the negative half as the positive one's negation, for cos
    as the positive one, bit for bit. Each build's helper runs in a loop over 4,096 floats a call,
    vectorised as in the generated code's loops (called a float at a time, the two helpers were 90%
    of a sweep's time and the reference 1%)."""
    fma = x86_has_fma()
    ref = name[4:-4]   # ctc_tanh_f32: tanh
    odd = "#define ODD\n" if ref in ("tanh", "erf", "sin", "tan", "atan", "sinh", "asin") else \
        "#define EVEN\n" if ref in ("cos", "cosh") else ""
    helpers = "#include <math.h>\n#include <stdint.h>\n#include <string.h>\n" + _helpers(tmp_path)
    builds = [("plain", [])] + ([("fma", ["-march=haswell"])] if fma else [])
    objs = []
    for variant, march in builds:
        (tmp_path / f"{variant}.c").write_text(   # a loop over the helper, as the generated code's loops call it
            helpers + f"void fn_{variant}(const float *x, float *y, long n) {{\n"
            f"  for (long i = 0; i < n; i++) y[i] = {name}(x[i]);\n}}\n")
        objs.append(tmp_path / f"{variant}.o")
        run(["gcc", "-std=c11", "-O3", *march, "-w", "-c", tmp_path / f"{variant}.c", "-o", objs[-1]])   # as ctc build
    if not fma:   # the program still links a fn_fma (never called)
        (tmp_path / "fma.c").write_text("void fn_fma(const float *x, float *y, long n) { (void)x, (void)y, (void)n; }\n")
        objs.append(tmp_path / "fma.o")
        run(["gcc", "-std=c11", "-O2", "-c", tmp_path / "fma.c", "-o", objs[-1]])
    src = tmp_path / "sweep.c"
    src.write_text(f"#include <math.h>\n#include <stdint.h>\n#include <string.h>\n#define HAVE_FMA {int(fma)}\n#define REF {ref}\n"
                   f"#define STEP {SWEEP_STEP.get(name, 1)}\n{odd}" + SWEEP_C)
    exe = tmp_path / "sweep"
    run(["gcc", "-std=c11", "-O2", "-w", src, *objs, "-o", exe, "-lm"])
    lines = run([exe], timeout=900).stdout.splitlines()
    assert len(lines) == len(builds)
    for (variant, _), line in zip(builds, lines):
        worst, x, sign = line.split()
        assert int(sign) == 0, f"{name} ({variant}): {sign} results with the wrong sign (or not odd)"
        assert float(worst) <= SWEEP_BOUNDS[name], \
            f"{name} ({variant}): {worst} ulp at x = {x} (bound {SWEEP_BOUNDS[name]})"
