#!/usr/bin/env python3
"""Writes runtime_min/ctc_gemm_simd.h, ctc's f32 GEMM microkernels for AVX-512, AVX2+FMA and
NEON, and its AVX-512 BF16 GEMM of floats holding bfloat16 values, from the texts
codegen_c/gemm_simd_c.c holds (conv_pix_text, gemm_avx512_text, gemm_avx512bf16_text,
gemm_avx2_head, gemm_avx2_conv_text, cg_gemm_neon_sel, cg_gemm_neon_head and cg_gemm_simd16_text, the last
instantiated for avx2 and neon, gemv_x86_text and gemm_own_text) and codegen_c/wino_c.c (cg_conv_wino_common_text, cg_conv_wino_text,
cg_conv_wino_avx2_text, cg_conv_wino_neon_text, cg_conv_wino_tile16_text instantiated for avx2 and
neon, cg_conv_wino_driver_text) and codegen_c/gemm_amx_c.c (cg_gemm_amx_bf16_text, the bf16 GEMM on AMX tiles) and
codegen_c/conv_bat_c.c (cg_conv_bat_bf16_text), both after the bf16 GEMM, so that
there is one copy of them: a hosted model.c that runs f32 GEMMs includes the header, a
--freestanding one gets the NEON kernel written into it by codegen_c/kernels.c.

    python3 scripts/gen_runtime.py            # rewrite runtime_min/ctc_gemm_simd.h
    python3 scripts/gen_runtime.py -o FILE    # write elsewhere
    python3 scripts/gen_runtime.py --check    # exit 1 if the header (or -o FILE) is stale (tests/test_gemm_header.py)

Python 3 standard library only."""
import argparse
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SRC = os.path.join("codegen_c", "gemm_simd_c.c")
WINO = os.path.join("codegen_c", "wino_c.c")
BAT = os.path.join("codegen_c", "conv_bat_c.c")
AMX = os.path.join("codegen_c", "gemm_amx_c.c")
OUT = os.path.join("runtime_min", "ctc_gemm_simd.h")
ESCAPES = {"n": "\n", "t": "\t", '"': '"', "\\": "\\", "'": "'"}


def c_string(src, name):
    """The value of `static const char NAME[] = "..." "...";` in src."""
    m = re.search(r"(?:static )?const char " + re.escape(name) + r"\[\] =\s*((?:\"(?:[^\"\\]|\\.)*\"\s*)+);", src)
    if not m:
        sys.exit(f"gen_runtime.py: {SRC} has no string {name}")
    out = []
    for lit in re.findall(r"\"((?:[^\"\\]|\\.)*)\"", m.group(1)):
        out.append(re.sub(r"\\(.)", lambda e: ESCAPES[e.group(1)], lit))
    return "".join(out)


def header():
    with open(os.path.join(ROOT, SRC), encoding="utf-8") as f:
        src = f.read()
    with open(os.path.join(ROOT, WINO), encoding="utf-8") as f:
        wino = f.read()
    with open(os.path.join(ROOT, BAT), encoding="utf-8") as f:
        bat = f.read()
    with open(os.path.join(ROOT, AMX), encoding="utf-8") as f:
        amx = f.read()
    simd16 = c_string(src, "cg_gemm_simd16_text")
    tile16 = c_string(wino, "cg_conv_wino_tile16_text")
    pix16 = c_string(src, "cg_conv_pix16_text")
    return ("/* ctc_gemm_simd.h - ctc's f32 GEMM microkernels: AVX-512 (ctc_gemm_avx512_f32), else\n"
            " * AVX2+FMA (ctc_gemm_avx2_f32), or NEON on aarch64 (ctc_gemm_neon_f32), as the compiler's\n"
            " * -march allows; the NEON one only without CTC_HAVE_CBLAS (its tiles, for Winograd, always).\n"
            " * A generated model.c\n"
            " * that runs f32 GEMMs includes it after its portable ctc_gemm_f32, and its\n"
            " * ctc_matmul_block_f32 calls the one that is in (CTC_GEMM_<ISA>_f32 says which).\n"
            " * With AVX-512 BF16, also the GEMM of floats holding bfloat16 values\n"
            " * (ctc_gemm_avx512bf16, CTC_GEMM_AVX512BF16), which ctc_matmul_block_bf16 calls, in a\n"
            " * model.c that defines CTC_WANT_GEMM_BF16 before including it, and with AMX the same GEMM on\n"
            " * its tiles (ctc_gemm_amx_bf16, CTC_GEMM_AMX_BF16). With AVX-512 or AVX2, the\n"
            " * stride-1 convolutions as implicit GEMMs (ctc_conv_pix_f32, CTC_CONV_PIX_f32); with AVX-512,\n"
            " * AVX2 or the NEON GEMM, the 3x3 ones by Winograd's F(2x2, 3x3) (ctc_conv_wino_f32,\n"
            " * CTC_CONV_WINO_f32); with AVX2 and FMA, the product of one row and a matrix (ctc_gemv_x86_f32,\n"
            " * CTC_GEMV_X86_f32).\n"
            " *\n"
            " * Written by scripts/gen_runtime.py from the texts of codegen_c/gemm_simd_c.c and wino_c.c (docs/speed.md\n"
            " * describes the kernels); do not edit. */\n"
            "#ifndef CTC_GEMM_SIMD_H\n#define CTC_GEMM_SIMD_H\n\n"
            "#include <stdint.h>\n#include <string.h>\n\n"
            + c_string(src, "cg_gemm_pack_at_text") + "\n"
            + c_string(src, "conv_pix_text") + "\n"
            + c_string(src, "gemm_avx512_text") + "\n"
            + c_string(wino, "cg_conv_wino_common_text") + c_string(wino, "cg_conv_wino_text") + "\n"
            + c_string(src, "gemm_avx512bf16_text") + c_string(amx, "cg_gemm_amx_bf16_text")
            + c_string(bat, "cg_conv_bat_bf16_text") + "\n"
            "#if defined(__AVX2__) && defined(__FMA__)\n#ifndef CTC_GEMM_AVX512_f32\n"
            + c_string(src, "gemm_avx2_head") + simd16.replace("$I", "avx2") + c_string(src, "gemm_avx2_conv_text")
            + pix16.replace("$I", "avx2")
            + c_string(wino, "cg_conv_wino_avx2_text") + tile16.replace("$I", "avx2") + "#endif\n#endif\n\n"
            + "#if defined(__aarch64__) && defined(__ARM_NEON)\n#ifndef CTC_HAVE_CBLAS\n"
            + c_string(src, "cg_gemm_neon_sel") + "#endif\n" + c_string(src, "cg_gemm_neon_head")
            + simd16.replace("$I", "neon") + c_string(src, "cg_gemv_neon_text") + c_string(src, "cg_conv_pix_neon_text")
            + pix16.replace("$I", "neon")
            + c_string(wino, "cg_conv_wino_neon_text") + tile16.replace("$I", "neon")
            + "#endif\n\n"
            + c_string(wino, "cg_conv_wino_driver_text")
            + "\n" + c_string(src, "gemv_x86_text") + "\n" + c_string(src, "gemm_own_text")
            + "\n#endif /* CTC_GEMM_SIMD_H */\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-o", "--output", default=os.path.join(ROOT, OUT))
    ap.add_argument("--check", action="store_true")
    a = ap.parse_args()
    text = header()
    if a.check:
        with open(a.output, encoding="utf-8") as f:
            if f.read() != text:
                sys.exit(f"{a.output} is stale: run python3 scripts/gen_runtime.py")
        return
    with open(a.output, "w", encoding="utf-8") as f:
        f.write(text)


if __name__ == "__main__":
    main()
