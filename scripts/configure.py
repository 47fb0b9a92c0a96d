#!/usr/bin/env python3
"""scripts/configure.py - writes build.ninja from the source folders.

Every .c file of a compiler folder is an object of build/ctc, every .c file of
runtime_min/ one of build/libctc_rt.a, every fuzz/fuzz_*.c a libFuzzer harness
of `ninja fuzz`: adding a source file needs no build edit, only a re-run
(`scripts/configure.py`; ninja re-runs it by itself when this script changes,
and tests/test_hygiene.py fails while build.ninja is stale). The lists are
written once per variant from the same folders, so the plain build, the fuzzing
build and the sanitizer build (tests/test_fuzz_backend.py derives it from
build.ninja) never disagree.

    scripts/configure.py            write build.ninja
    scripts/configure.py --check    exit 1 if build.ninja differs from what it would write
"""
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# The compiler's folders, in the order data flows through them (compiler/ last: main).
COMPILER = ["support", "frontend", "ir", "python", "torchlib", "autograd_ad", "kernels", "codegen_c", "codegen_cuda", "compiler"]
# What the frontend harness links: the compiler up to the kernel layer (no C emitter, no main).
FRONTEND_HARNESS = ["support", "frontend", "ir", "python", "torchlib", "autograd_ad", "kernels"]
RUNTIME = "runtime_min"
# The runtime files ctc itself links: `ctc convert` (compiler/convert.c) uses the
# runtime's safetensors and PyTorch checkpoint code (one copy of each reader).
COMPILER_RUNTIME = ["rt_error", "rt_safetensors", "rt_pt", "rt_npy"]

# Runtime files only distributed programs link (`ctc build --distributed mpi` compiles them
# with mpicc): not in build/libctc_rt.a, so nothing else needs MPI's headers or links MPI.
RUNTIME_DIST = ["runtime_min/rt_mpi.c", "runtime_min/rt_nccl.c"]
# The runtime files each data-reading harness links, beside rt_error.c.
HARNESS_RUNTIME = {
    "fuzz_safetensors": ["rt_safetensors", "rt_model", "rt_pt"],
    "fuzz_pt": ["rt_safetensors", "rt_model", "rt_pt"],
    "fuzz_npy": ["rt_npy"],
    "fuzz_idx": ["rt_npy", "rt_data"],
    "fuzz_args": None,  # the whole runtime: the driver's argument parsing
}

HEAD = """\
# build.ninja - written by scripts/configure.py from the source folders; do not
# edit: add a .c file to its folder and re-run the script.
# `ninja` builds build/ctc and build/libctc_rt.a; `ninja fuzz` the libFuzzer harnesses.
# Warnings are errors in ctc's own code.

cc = cc
cflags = -std=c11 -O2 -g -Wall -Wextra -Werror -Wno-unused-parameter -D_POSIX_C_SOURCE=200809L -D_DEFAULT_SOURCE
ldflags = -lz -lm

rule cc
  command = $cc $cflags -MMD -MF $out.d -c $in -o $out
  depfile = $out.d
  deps = gcc
  description = CC $out

rule link
  command = $cc $in -o $out $ldflags
  description = LINK $out

rule ar
  command = rm -f $out && ar rcs $out $in
  description = AR $out

rule configure
  command = python3 scripts/configure.py
  generator = 1
  description = CONFIGURE build.ninja

build build.ninja: configure scripts/configure.py
"""

FUZZ_HEAD = """
# ---- fuzzing: `ninja fuzz` (not built by default) ---------------------------
# libFuzzer harnesses (fuzz/*.c) with ASan+UBSan, built with clang; each object
# of ctc and the runtime is compiled again with the fuzzing instrumentation.
# tests/test_fuzz.py runs every harness for a few seconds.
fuzzcc = clang
fuzzflags = -std=c11 -g -O1 -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined $
  -fno-omit-frame-pointer -D_POSIX_C_SOURCE=200809L -D_DEFAULT_SOURCE -Iruntime_min

rule fuzzcc
  command = $fuzzcc $fuzzflags -MMD -MF $out.d -c $in -o $out
  depfile = $out.d
  deps = gcc
  description = FUZZCC $out

rule fuzzlink
  command = $fuzzcc -fsanitize=fuzzer,address,undefined $in -o $out -lz -lm
  description = FUZZLINK $out
"""


def sources(folder):
    """The .c files of folder (relative to ROOT), sorted: the build is deterministic."""
    return sorted(f"{folder}/{f}" for f in os.listdir(os.path.join(ROOT, folder)) if f.endswith(".c"))


def obj(prefix, src):
    return f"{prefix}/{src[:-2]}.o"


def wrap(head, items):
    """`head item item ...` wrapped at ~110 columns with ninja's `$` continuation."""
    lines, cur = [], head
    for it in items:
        if len(cur) + 1 + len(it) > 110:
            lines.append(cur + " $")
            cur = "  " + it
        else:
            cur += " " + it
    return "\n".join(lines + [cur])


def generate():
    out = [HEAD]
    compiler = [s for d in COMPILER for s in sources(d)]
    runtime = [s for s in sources(RUNTIME) if s not in RUNTIME_DIST]
    out.append("# ---- the compiler ---------------------------------------------------------")
    out += [f"build {obj('build', s)}: cc {s}" for s in compiler]
    out.append("")
    out.append(wrap("build build/ctc: link", [obj("build", s) for s in compiler] +
                    [obj("build", f"{RUNTIME}/{n}.c") for n in COMPILER_RUNTIME]))
    out.append("")
    out.append("# ---- the runtime ----------------------------------------------------------")
    out += [f"build {obj('build', s)}: cc {s}" for s in runtime]
    out.append("")
    out.append(wrap("build build/libctc_rt.a: ar", [obj("build", s) for s in runtime]))
    out.append("")
    out.append("default build/ctc build/libctc_rt.a")

    out.append(FUZZ_HEAD)
    front = [s for d in FRONTEND_HARNESS for s in sources(d)]
    harnesses = sorted(f[:-2] for f in os.listdir(os.path.join(ROOT, "fuzz"))
                       if f.startswith("fuzz_") and f.endswith(".c"))
    out += [f"build {obj('build/fuzz', s)}: fuzzcc {s}" for s in front + runtime]
    out += [f"build build/fuzz/{h}.o: fuzzcc fuzz/{h}.c" for h in harnesses]
    out.append("")
    for h in harnesses:
        if h == "fuzz_frontend":
            deps = [obj("build/fuzz", s) for s in front]
        else:
            names = HARNESS_RUNTIME.get(h)
            rt = runtime if names is None else [f"{RUNTIME}/rt_error.c"] + [f"{RUNTIME}/{n}.c" for n in names]
            deps = [obj("build/fuzz", s) for s in rt]
        out.append(wrap(f"build build/fuzz/{h}: fuzzlink build/fuzz/{h}.o", deps))
    out.append("")
    out.append(wrap("build fuzz: phony", [f"build/fuzz/{h}" for h in harnesses]))
    return "\n".join(out) + "\n"


def main():
    text = generate()
    path = os.path.join(ROOT, "build.ninja")
    old = open(path).read() if os.path.exists(path) else None
    if "--check" in sys.argv[1:]:
        if old != text:
            sys.stderr.write("build.ninja is stale: run scripts/configure.py\n")
            return 1
        return 0
    # always (re)written, even when unchanged: ninja runs this as build.ninja's
    # generator and needs build.ninja newer than the script afterwards (a fresh
    # clone can check the script out after build.ninja)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
