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
