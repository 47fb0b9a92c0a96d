"""The runtime's 16-bit floats (rt_error.c): float32 -> bfloat16 / float16 rounding and
back, against PyTorch's conversions (NumPy's for float16), bit for bit, on every kind of
value: ties at both precisions, the float16 subnormals and their edges, the overflow edge
65504 / 65520, infinities, NaN, signed zeros, and random bit patterns."""
import os
import subprocess

import numpy as np
import torch

from rt_testlib import RT_DIR, compile_c

PROG = r"""
#include <stdio.h>
#include <string.h>
#include "ctc_rt.h"
int main(int argc, char **argv) {
  FILE *in = fopen(argv[1], "rb"), *out = fopen(argv[2], "wb");
  uint32_t u;
  (void)argc;
  while (fread(&u, 4, 1, in) == 1) {
    float x;
    memcpy(&x, &u, 4);
    uint16_t b = ctc_f32_to_bf16(x), h = ctc_f32_to_f16(x);
    float xb = ctc_bf16_to_f32(b), xh = ctc_f16_to_f32(h), rb = x, rh = x;
    ctc_float_copy(&rb, CTC_F32, &rb, CTC_F32, 1, CTC_LOW_BF16);   /* a .bfloat16() parameter loaded */
    ctc_float_copy(&rh, CTC_F32, &rh, CTC_F32, 1, CTC_LOW_F16);
    fwrite(&b, 2, 1, out), fwrite(&h, 2, 1, out);
    fwrite(&xb, 4, 1, out), fwrite(&xh, 4, 1, out), fwrite(&rb, 4, 1, out), fwrite(&rh, 4, 1, out);
  }
  fclose(in);
  return fclose(out) != 0;
}
"""


def values():
    rng = np.random.default_rng(0)
    specials = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, 65504, 65519.996, 65520, 65536, 1e30,
                         2.0 ** -14, 2.0 ** -24, 2.0 ** -25, 2.0 ** -25 * 1.0000001, 2.0 ** -26, 3 * 2.0 ** -25,
                         2.0 ** -14 - 2.0 ** -25, 1e-45, 3.4028235e38, -3.4028235e38], np.float32)
    # float16 ties and neighbours: k + 1/2 ulp, in the normal and subnormal ranges
    h = rng.integers(0, 0x7BFF, 20000).astype(np.uint16).view(np.float16).astype(np.float32)
    ulp = np.spacing(h.astype(np.float16)).astype(np.float32)
    ties16 = np.concatenate([h + ulp / 2, h - ulp / 2, np.nextafter(h + ulp / 2, np.float32(np.inf))])
    # bfloat16 ties: the low 16 bits exactly 0x8000, and one either side
    hi = rng.integers(0, 0x7F7F, 20000).astype(np.uint32) << 16
    ties_b = np.concatenate([hi | 0x8000, hi | 0x7FFF, hi | 0x8001, hi | 0x18000]).view(np.float32)
    rand = rng.integers(0, 2 ** 32, 200000, dtype=np.uint64).astype(np.uint32).view(np.float32)
    v = np.concatenate([specials, ties16, -ties16, ties_b, rand]).astype(np.float32)
    return v


def test_rounding_matches_pytorch(tmp_path):
    (tmp_path / "half.c").write_text(PROG)
    exe = compile_c(tmp_path / "half", [str(tmp_path / "half.c"), os.path.join(RT_DIR, "rt_error.c")])
    v = values()
    v.tofile(tmp_path / "in.bin")
    subprocess.run([exe, tmp_path / "in.bin", tmp_path / "out.bin"], check=True, timeout=60)
    rec = np.dtype([("b", "<u2"), ("h", "<u2"), ("xb", "<f4"), ("xh", "<f4"), ("rb", "<f4"), ("rh", "<f4")])
    got = np.fromfile(tmp_path / "out.bin", rec)
    assert len(got) == len(v)
    tv = torch.from_numpy(v)
    want_b = tv.bfloat16().view(torch.int16).numpy().view(np.uint16)
    with np.errstate(over="ignore"):
        want_h = v.astype(np.float16).view(np.uint16)
    nan = np.isnan(v)
    # bfloat16: PyTorch's bits exactly, and the float32 value back; a NaN is a NaN (PyTorch's
    # vectorised conversion writes 0xFFFF, its scalar one 0x7FC0, which ctc writes)
    assert np.array_equal(got["b"][~nan], want_b[~nan]), np.flatnonzero(got["b"][~nan] != want_b[~nan])[:10]
    assert (got["b"][nan] == 0x7FC0).all()
    assert np.array_equal(got["xb"], tv.bfloat16().float().numpy(), equal_nan=True)
    assert np.array_equal(got["rb"], got["xb"], equal_nan=True)
    # float16: NumPy's bits for every non-NaN (ties to even, subnormals, inf from 65520); NaN stays NaN
    assert np.array_equal(got["h"][~nan], want_h[~nan]), np.flatnonzero(got["h"][~nan] != want_h[~nan])[:10]
    assert np.isnan(got["xh"][nan]).all()
    assert np.array_equal(got["xh"], want_h.view(np.float16).astype(np.float32), equal_nan=True)
    assert np.array_equal(got["rh"], got["xh"], equal_nan=True)
    # and PyTorch's float16 conversion agrees with NumPy's on these
    assert np.array_equal(tv.half().view(torch.int16).numpy().view(np.uint16)[~nan], want_h[~nan])

