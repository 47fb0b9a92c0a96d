"""ctc's GEMM microkernels (f32: AVX-512, AVX2+FMA, NEON; AVX-512 BF16) live once, as texts in
codegen_c/gemm_simd_c.c; scripts/gen_runtime.py writes them into runtime_min/ctc_gemm_simd.h,
which a hosted model.c includes instead of carrying ~440 lines of SIMD code, and a
--freestanding file (no runtime) still gets the NEON kernel written into it. The committed
header must be what the script writes from the current gemm_simd_c.c."""
import os
import re
import subprocess
import sys

from ctc_testlib import CTC, ROOT, run

GEN = os.path.join(ROOT, "scripts", "gen_runtime.py")
HEADER = os.path.join(ROOT, "runtime_min", "ctc_gemm_simd.h")

MLP = """\
import torch
import torch.nn as nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(40, 64)
        self.fc2 = nn.Linear(64, 10)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


model = Net()
example_inputs = {"forward": (torch.zeros(8, 40),)}
"""


def test_header_is_current(tmp_path):
    out = tmp_path / "ctc_gemm_simd.h"
    r = subprocess.run([sys.executable, GEN, "-o", str(out)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    with open(HEADER, encoding="utf-8") as f:
        assert f.read() == out.read_text(encoding="utf-8"), (
            "runtime_min/ctc_gemm_simd.h is stale (codegen_c/gemm_simd_c.c's GEMM texts changed): "
            "run `python3 scripts/gen_runtime.py` and commit the header")
    text = out.read_text()
    for fn in ("ctc_gemm_avx512_f32", "ctc_gemm_avx2_f32", "ctc_gemm_neon_f32"):
        assert re.search(rf"static (CTC_GEMM_UNUSED )?void {fn}\(", text), fn
    assert "$I" not in text


def test_check_names_the_command(tmp_path):
    stale = tmp_path / "stale.h"
    stale.write_text("/* old */\n")
    r = subprocess.run([sys.executable, GEN, "--check", "-o", str(stale)], capture_output=True, text=True)
    assert r.returncode == 1 and "python3 scripts/gen_runtime.py" in r.stderr
    with open(HEADER, encoding="utf-8") as f:
        stale.write_text(f.read())
    assert subprocess.run([sys.executable, GEN, "--check", "-o", str(stale)]).returncode == 0


def test_model_c_includes_it(tmp_path):
    src = tmp_path / "mlp.py"
    src.write_text(MLP)
    run([CTC, "compile", src, "-o", tmp_path / "net.c"])
    hosted = (tmp_path / "net.c").read_text()
    assert '#include "ctc_gemm_simd.h"' in hosted
    assert "static CTC_GEMM_UNUSED void ctc_gemm_avx2_f32(" not in hosted and "_mm512_" not in hosted   # not written out again
    assert "ctc_matmul_block_f32(" in hosted   # which calls the header's kernels
    run([CTC, "compile", src, "--freestanding", "-o", tmp_path / "fs.c"])
    fs = (tmp_path / "fs.c").read_text()
    assert "ctc_gemm_simd.h" not in fs and "static CTC_GEMM_UNUSED void ctc_gemm_neon_f32(" in fs
