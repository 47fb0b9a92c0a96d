"""Generated code hygiene: every model's C compiles clean under gcc and clang
with -std=c11 -Wall -Wextra -Werror -pedantic, with and without OpenBLAS and
OpenMP; output is deterministic; weights round-trip by state_dict name."""
import os
import shutil
import subprocess

import numpy as np
import pytest
import torch

from ctc_testlib import BENCH, CTC, EXAMPLES, ROOT, load_module, run, st_read, st_write, state_dict_np

MODELS = [
    (os.path.join(BENCH, "mlp.py"), ["--model", "MLP", "--input", "x=f32[64,1,28,28]"]),
    (os.path.join(BENCH, "lenet.py"), ["--model", "Network", "--input", "t=f32[64,1,28,28]"]),
    (os.path.join(BENCH, "gpt.py"), ["--model", "GPT", "--input", "idx=i64[2,16]"]),
    (os.path.join(EXAMPLES, "seed_cnn.py"), []),
    (os.path.join(EXAMPLES, "cifar_net.py"), []),
    (os.path.join(EXAMPLES, "mlp_sequential.py"), []),
    (os.path.join(EXAMPLES, "hessian_top_eigenvalue.py"), []),
]
RT = os.path.join(ROOT, "runtime_min")
FLAGS = ["-std=c11", "-Wall", "-Wextra", "-Werror", "-pedantic", "-c", "-I" + RT]


@pytest.mark.parametrize("path,opts", MODELS, ids=[os.path.basename(m[0]) for m in MODELS])
def test_generated_c_compiles_clean(tmp_path, path, opts):
    c = tmp_path / "model.c"
    run([CTC, "compile", path, "-o", c, *opts])
    variants = [[], ["-DCTC_HAVE_CBLAS"], ["-fopenmp", "-DCTC_HAVE_CBLAS", "-O2"]]
    for cc in ["gcc", "clang"]:
        if not shutil.which(cc):
            pytest.skip(f"{cc} not installed")
        for v in variants:
            if cc == "clang" and "-fopenmp" in v:
                continue  # clang's OpenMP runtime (libomp-dev) is not a dependency
            r = subprocess.run([cc, *FLAGS, *v, str(c), "-o", str(tmp_path / "m.o")], capture_output=True, text=True)
            assert r.returncode == 0, f"{cc} {' '.join(v)}:\n{r.stderr[:3000]}"


def test_output_is_deterministic(tmp_path):
    a = tmp_path / "a.c"
    path = os.path.join(EXAMPLES, "cifar_net.py")
    run([CTC, "compile", path, "-o", a])
    first = a.read_text() + (tmp_path / "a.h").read_text()
    run([CTC, "compile", path, "-o", a])
    assert first == a.read_text() + (tmp_path / "a.h").read_text()


def test_weights_round_trip_by_name(tmp_path):
    """Weights saved by PyTorch load by state_dict name; the program saves them
    back under the same names with identical values."""
    path = os.path.join(EXAMPLES, "cifar_net.py")
    mod = load_module(path)
    torch.manual_seed(0)
    sd = state_dict_np(mod.Net())
    exe = tmp_path / "net"
    run([CTC, "build", path, "-o", exe])
    w = tmp_path / "w.safetensors"
    st_write(w, sd)
    x = tmp_path / "x.npy"
    np.save(x, np.zeros((16, 3, 32, 32), np.float32))
    out = tmp_path / "saved.safetensors"
    run([exe, "run", "forward", "--weights", w, "--input", x, "--save", out])
    back = st_read(out)
    assert list(back) == list(sd)
    for k in sd:
        assert back[k].shape == sd[k].shape and np.array_equal(back[k], sd[k]), k
    # a wrong shape is reported by name
    bad = dict(sd)
    bad["fc1.weight"] = np.zeros((3, 3), np.float32)
    st_write(w, bad)
    r = run([exe, "run", "--weights", w, "--input", x], check=False)
    assert r.returncode == 1 and "fc1.weight" in r.stderr and "[120, 400]" in r.stderr, r.stderr


# ---- the lowering's registration tables (issue 15) --------------------------
import glob
import re

# A builtin's handler comes from its row (builtins.def, torch.def, layers.def,
# optim.def), never from its position: no BI_ id may be compared by order, and no
# loop may walk a range of ids (a row appended anywhere must work).
_BI = r"BI_(?!_COUNT\b)[A-Z][A-Z0-9_]*"
_RANGE = [
    re.compile(_BI + r"\s*(<=|>=|<(?!<)|>(?!>))"),          # BI_X < ..., BI_X >= ...
    re.compile(r"(?<![-<>])(<=|>=|<|>)\s*" + _BI),           # ... <= BI_X
    re.compile(r"=\s*" + _BI + r"\s*;[^;]*;"),               # for (i = BI_X; ...; ...)
]


def _strip_comments(src):
    src = re.sub(r"/\*.*?\*/", lambda m: "\n" * m.group(0).count("\n"), src, flags=re.S)
    return re.sub(r"//[^\n]*", "", src)


def _enum_range_uses(src):
    bad = []
    for no, line in enumerate(_strip_comments(src).split("\n"), 1):
        if any(p.search(line) for p in _RANGE):
            bad.append(f"{no}: {line.strip()}")
    return bad


LOWERING_DIRS = ["lowering", "python", "torchlib"]


def _lowering_sources():
    out = []
    for d in LOWERING_DIRS:
        for ext in ("c", "h", "def"):
            out += glob.glob(os.path.join(ROOT, d, f"*.{ext}"))
    return sorted(out)


def test_range_check_detector_detects():
    # the detector itself: each way of dispatching by position is caught
    for src in ["if (bi >= BI_F_RELU && bi <= BI_F_GELU) return f();",
                "for (int i = BI_C_MODULE; i < BI_C_OBJECT; i++) x();",
                "if (o->cls->bi < BI_S_STEPLR) continue;",
                "return BI_O_SGD <= bi;"]:
        assert _enum_range_uses(src), src
    for src in ["if (bi == BI_T_RELU || bi != BI_F_GELU) f();", "for (int i = 0; i < BI__COUNT; i++) g();",
                "/* bi >= BI_F_RELU */ x = 1u << 3;", "if (o->bi == BI_C_MODULE && n > 0) h();"]:
        assert not _enum_range_uses(src), src


def test_no_dispatch_by_enum_position():
    srcs = _lowering_sources()
    assert any(s.endswith("registry.c") for s in srcs)
    bad = []
    for path in srcs:
        with open(path) as f:
            bad += [f"{os.path.relpath(path, ROOT)}:{b}" for b in _enum_range_uses(f.read())]
    assert not bad, "builtins compared by their position in the tables:\n" + "\n".join(bad)


def test_build_ninja_is_generated_from_the_folders():
    """build.ninja is written by scripts/configure.py from the source folders; a
    stale one (a .c file added without re-running it) fails here."""
    r = subprocess.run(["python3", os.path.join(ROOT, "scripts", "configure.py"), "--check"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def _includes(path):
    with open(path) as f:
        return re.findall(r'^\s*#\s*include\s+"([^"]+)"', f.read(), flags=re.M)


def test_python_interpreter_includes_nothing_of_torch():
    # python/ knows nothing of torch: it reaches tensors, modules and the torch
    # namespaces only through the host-object protocol (HostOps in python/py.h);
    # torchlib/ includes python/'s public header, never the other way round
    files = sorted(glob.glob(os.path.join(ROOT, "python", "*.[ch]")) + glob.glob(os.path.join(ROOT, "python", "*.def")))
    assert any(f.endswith("py.h") for f in files)
    bad = [f"{os.path.relpath(f, ROOT)}: {inc}" for f in files for inc in _includes(f)
           if re.search(r"(^|/)(torchlib|ir|lowering|autograd_ad|codegen_c|kernels)/", inc) or inc.endswith("torch_int.h")]
    assert not bad, "python/ includes the torch side:\n" + "\n".join(bad)
    torch = sorted(glob.glob(os.path.join(ROOT, "torchlib", "*.[ch]")))
    assert torch and any("../python/py.h" in _includes(f) for f in torch)
    # python/ also names no torch type or function
    words = re.compile(r"\b(Tensor|ObjModule|Program|Func|ValId|t_[a-z_]+\(|ir_[a-z_]+\(|BI_[CTFOS]_[A-Z_0-9]+)\b")
    hits = []
    for f in files:
        with open(f) as fh:
            for no, line in enumerate(_strip_comments(fh.read()).split("\n"), 1):
                if words.search(line):
                    hits.append(f"{os.path.relpath(f, ROOT)}:{no}: {line.strip()}")
    assert not hits, "python/ uses torch names:\n" + "\n".join(hits)


def test_renderers_do_not_read_generated_code_back():
    """The C and CUDA renderers write code from the kernel IR and the op emitters through
    their tables (codegen_c/render_c.c's CgRenderOps): nothing in codegen_c/ or codegen_cuda/
    parses emitted loops back (no sscanf; no statement found in emitted lines, as --profile's
    rewrite of the OpenMP loops once did; no preprocessing of the text, as --freestanding's
    removal of the OpenMP/BLAS/x86 branches once did: kernels.c writes the helpers without
    them; the CUDA target finds no `for` statement in C text), and only the renderers write a
    kernel's OpenMP lines (the emitters ask cg_par_open, so --profile's per-thread regions are
    the renderer's option; kernels.c's helper text aside)."""
    bad = []
    for path in sorted(glob.glob(os.path.join(ROOT, "codegen_c", "*.[ch]")) +
                       glob.glob(os.path.join(ROOT, "codegen_cuda", "*.[ch]"))):
        with open(path) as f:
            src = _strip_comments(f.read())
        rel = os.path.relpath(path, ROOT)
        bad += [f"{rel}: sscanf" for _ in re.findall(r"\bsscanf\s*\(", src)]
        bad += [f"{rel}: {m}" for m in re.findall(r"\b(cg_stmt_last|cg_line_is|cg_prof_threads|cg_fs_preprocess|grid_stride)\s*\(", src)]
        if os.path.basename(path) not in ("render_c.c", "kernels.c"):
            bad += [f"{rel}: writes {m} itself" for m in re.findall(r'"\s*(CTC_OMP_(?:FOR\w*|PARALLEL)|CTC_PROF_\w+)\\n"', src)]
    assert not bad, "\n".join(bad)
