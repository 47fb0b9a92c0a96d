"""The convolution cases of test_conv_batched.py whose paths have NEON kernels (the implicit GEMM over
16-pixel panels, ctc_conv_pix_f32; stride 2 over the input's phases, and its input gradient phase by
phase; Winograd's F(2x2, 3x3); and, for comparison, the tiles of im2col and the NEON GEMM), built for
aarch64 (`ctc build --cc aarch64-linux-gnu-gcc`) and run under qemu-aarch64 (`./net run`, at 2 threads):
forward and gradients against PyTorch with test_conv_batched's tolerances. Skipped without
aarch64-linux-gnu-gcc or qemu-aarch64 (scripts/install-deps.sh installs both)."""
import os

import pytest

from ctc_testlib import CTC, QEMU_A64, ROOT, need_aarch64, run
from test_conv_batched import CASES, _conv_file, check_case

RT = os.path.join(ROOT, "runtime_min")
NAMES = ["implicit_5x5", "implicit_odd", "phases_3x3", "phases_1x1", "phases_2x2", "phases_5x3", "wino_ragged",
         "wino_tails", "wino_narrow8", "small_tiles", "ragged", "stride2_pad"]
SEL = [c for c in CASES if c[0] in NAMES]


@pytest.fixture(scope="module")
def neon(tmp_path_factory):
    """the cases' program cross-built by ctc build, and a script that runs it under QEMU"""
    need_aarch64()
    tmp = tmp_path_factory.mktemp("conv_neon")
    text, entries, outs = _conv_file(SEL, ['    "forward": (torch.zeros(1),),'])
    (tmp / "net.py").write_text(text)
    run([CTC, "build", tmp / "net.py", "-o", tmp / "net_a64", "--cc", "aarch64-linux-gnu-gcc", *entries], timeout=900)
    macros = run(["aarch64-linux-gnu-gcc", "-std=c11", "-D_POSIX_C_SOURCE=200809L", f"-I{RT}", "-E", "-dM",
                  tmp / "net_a64.c"]).stdout
    assert all(f"CTC_{k}_f32" in macros for k in ("CONV_PIX", "CONV_WINO", "GEMM_NEON"))
    exe = tmp / "net"
    exe.write_text(f'#!/bin/sh\nOMP_NUM_THREADS=2 exec {" ".join(QEMU_A64)} {tmp / "net_a64"} "$@"\n')
    exe.chmod(0o755)
    return tmp, exe, outs


@pytest.mark.parametrize("case", SEL, ids=[c[0] for c in SEL])
def test_conv_neon_matches_torch(neon, case):
    check_case(*neon, case, " (aarch64)")
