"""Embedding a compiled model: `ctc build --shared` (a .so and its header, used
from C++: examples/cpp_infer) and `ctc build --python` (a CPython extension
module, NumPy in and out). Both must give what `./net infer` gives, and the
Python module's entries what PyTorch computes on the same file."""
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch

from ctc_testlib import CTC, EXAMPLES, ROOT, compare, load_module, run, st_write, state_dict_np, MLP_TRAIN_SRC

PY = "/usr/bin/python3"   # Debian's, with numpy (the module is built for it)

MODEL = MLP_TRAIN_SRC


def write_model(tmp, name="embed_model.py"):
    py = os.path.join(tmp, name)
    with open(py, "w") as f:
        f.write(MODEL)
    return py


# ---- C++ through the shared library --------------------------------------------------

def test_cpp_example_matches_net_infer(tmp_path):
    """examples/cpp_infer/build.sh builds libmlp.so (ctc build --shared) and infer.cpp
    (g++ -Wall -Wextra -Werror) against it; its output equals `./net infer` built from
    the same file, and PyTorch's."""
    tmp = str(tmp_path)
    out = os.path.join(tmp, "cpp")
    run([os.path.join(EXAMPLES, "cpp_infer", "build.sh"), out])
    assert os.path.exists(os.path.join(out, "libmlp.h")) and os.path.exists(os.path.join(out, "libmlp.so"))
    path = os.path.join(EXAMPLES, "mlp_sequential.py")
    mod = load_module(path)
    torch.manual_seed(0)
    model = mod.MLP().eval()
    w = os.path.join(tmp, "w.safetensors")
    st_write(w, state_dict_np(model))
    x = np.random.default_rng(0).standard_normal((32, 1, 28, 28)).astype(np.float32)
    xp = os.path.join(tmp, "x.npy")
    np.save(xp, x)
    env = same_blas_env()
    r = subprocess.run([os.path.join(out, "infer"), w, xp, os.path.join(tmp, "y_cpp.npy")], cwd=tmp, env=env,
                       capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout.startswith("row 0: class "), r.stdout + r.stderr
    exe = os.path.join(tmp, "net")
    run([CTC, "build", path, "-o", exe])
    r = subprocess.run([exe, "infer", "--weights", w, "--input", xp, "--output", os.path.join(tmp, "y_net.npy")],
                       env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    y_cpp, y_net = np.load(os.path.join(tmp, "y_cpp.npy")), np.load(os.path.join(tmp, "y_net.npy"))
    assert y_cpp.shape == (32, 10) and np.array_equal(y_cpp, y_net)
    with torch.no_grad():
        compare("cpp infer", y_cpp, model(torch.from_numpy(x)).numpy(), 1e-4, 1e-5)
    # errors are reported, not crashed on: a wrong input shape, a weights file of another model
    np.save(xp, x[:3])
    r = run([os.path.join(out, "infer"), w, xp], check=False)
    assert r.returncode == 1 and "expected f32[32, 1, 28, 28], got f32[3, 1, 28, 28]" in r.stderr, r.stderr
    st_write(w, {"net.1.weight": np.zeros((3, 3), np.float32)})
    r = run([os.path.join(out, "infer"), w, xp], check=False)
    assert r.returncode == 1 and "net.1.weight" in r.stderr, r.stderr


# (the plain header is compiled by the C++ example above)
@pytest.mark.parametrize("opts", [["--profile", "--anomaly"], ["--input", "x=f32[N,20]", "--input", "y=i64[N]",
                                                               "--max", "N=16"]],
                         ids=["profile_anomaly", "runtime_batch"])
def test_header_is_clean_cpp(tmp_path, opts):
    """The generated header (a training model: forward and train_step) compiles as C++
    with -Wall -Wextra -Werror -pedantic, and its declarations link against the .so."""
    tmp = str(tmp_path)
    py = write_model(tmp)
    lib = os.path.join(tmp, "libnet.so")
    run([CTC, "build", py, "--shared", "-o", lib, *opts])
    assert os.path.exists(os.path.join(tmp, "libnet.h")) and not os.path.exists(lib + ".h")
    call = ("net_forward(&m, 8, x.data(), y.data())" if "--max" in opts else "net_forward(&m, x.data(), y.data())")
    cpp = os.path.join(tmp, "use.cpp")
    with open(cpp, "w") as f:
        f.write(textwrap.dedent(f'''\
            #include <cstdio>
            #include <cstdlib>
            #include <vector>
            #include "libnet.h"
            int main() {{
              net_t m{{}};
              void *arena = std::aligned_alloc(64, (NET_ARENA_BYTES + 63) / 64 * 64);
              if (net_init(&m, arena, NET_ARENA_BYTES) != CTC_OK) return 1;
              std::vector<float> x(8 * 20, 0.5f), y(8 * 4);
              int rc = {call};
              std::printf("%d %s %d %.6f\\n", rc, net_desc.entries[1].name, net_desc.nentries, y[0]);
              std::free(arena);
              return rc;
            }}
            '''))
    exe = os.path.join(tmp, "use")
    run(["g++", "-std=c++17", "-Wall", "-Wextra", "-Werror", "-pedantic", "-I" + tmp,
         "-I" + os.path.join(ROOT, "runtime_min"), cpp, "-L" + tmp, "-lnet", "-Wl,-rpath," + tmp, "-o", exe])
    out = run([exe]).stdout.split()
    assert out[:3] == ["0", "train_step", "2"], out


# ---- the Python module -----------------------------------------------------------------

def build_module(tmp, name, *opts):
    py = write_model(tmp)
    run([CTC, "build", py, "--python", "-o", os.path.join(tmp, name), *opts],)
    return py


def same_blas_env():
    """One environment for ./net and a program or module linking the model: ./net picks
    OPENBLAS_CORETYPE from the CPU and re-executes itself (docs/program.md, OpenBLAS), a library
    takes what the environment says; without both, they run the same OpenBLAS kernels."""
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_CORETYPE"}
    env.update(CTC_NO_REEXEC="1", OMP_NUM_THREADS="1")
    return env


def run_py(tmp, code):
    """Runs code under Debian's python3 in tmp (where the module is), without torch."""
    prog = "import sys\nsys.path.insert(0, %r)\n" % tmp + textwrap.dedent(code) + \
           "\nassert 'torch' not in sys.modules, 'the module imported torch'\n"
    r = subprocess.run([PY, "-c", prog], capture_output=True, text=True, cwd=tmp, timeout=120, env=same_blas_env())
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout


def test_python_module_matches_pytorch(tmp_path):
    """m = net.Model(w); m.forward(x); m.train_step(x, y): forward and three SGD-momentum
    steps (losses and the parameters after them) equal PyTorch's on the same file."""
    tmp = str(tmp_path)
    env_py = dict(os.environ, PYTHON=PY)
    py = write_model(tmp)
    r = subprocess.run([CTC, "build", py, "--python", "-o", os.path.join(tmp, "netmod")], capture_output=True,
                       text=True, env=env_py)
    assert r.returncode == 0, r.stderr
    mods = [f for f in os.listdir(tmp) if f.startswith("netmod.") and f.endswith(".so")]
    assert len(mods) == 1 and mods[0] != "netmod.so", os.listdir(tmp)   # the interpreter's EXT_SUFFIX
    mod = load_module(py, "embed_model_torch")
    torch.manual_seed(0)
    net = mod.Net()
    w = os.path.join(tmp, "w.safetensors")
    st_write(w, state_dict_np(net))
    rng = np.random.default_rng(1)
    x = rng.standard_normal((8, 20)).astype(np.float32)
    y = rng.integers(0, 4, 8)
    np.save(os.path.join(tmp, "x.npy"), x)
    np.save(os.path.join(tmp, "y.npy"), y)
    run_py(tmp, '''
        import numpy as np
        import netmod
        assert netmod.entries == ("forward", "train_step"), netmod.entries
        m = netmod.Model("w.safetensors")
        x, y = np.load("x.npy"), np.load("y.npy")
        np.save("out.npy", m.forward(x))
        np.save("out_f.npy", m.forward(np.asfortranarray(x)))    # strided: copied, same result
        np.save("out_kw.npy", m.call("forward", x=x))
        losses = [m.train_step(x, y) for _ in range(3)]
        assert all(l.shape == () and l.dtype == np.float32 for l in losses)
        np.save("losses.npy", np.array(losses))
        sd = m.state_dict()
        assert list(sd) == ["fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"], list(sd)
        np.savez("sd.npz", **sd)
        m.save("after.safetensors", training_state=True)
        m2 = netmod.Model()
        m2.load("after.safetensors")                             # optimizer state included
        assert np.array_equal(m2.forward(x), m.forward(x))
    ''')
    out = np.load(os.path.join(tmp, "out.npy"))
    assert np.array_equal(out, np.load(os.path.join(tmp, "out_f.npy")))
    assert np.array_equal(out, np.load(os.path.join(tmp, "out_kw.npy")))
    with torch.no_grad():
        compare("forward", out, net(torch.from_numpy(x)).numpy(), 1e-4, 1e-5)
    exe = os.path.join(tmp, "net")   # the same file as a program: the same numbers
    run([CTC, "build", py, "-o", exe])
    r = subprocess.run([exe, "infer", "--weights", w, "--input", os.path.join(tmp, "x.npy"), "--output",
                        os.path.join(tmp, "out_net.npy")], capture_output=True, text=True, env=same_blas_env())
    assert r.returncode == 0, r.stderr
    assert np.array_equal(out, np.load(os.path.join(tmp, "out_net.npy")))
    # PyTorch: the file's own train_step on the same weights
    mod.model.load_state_dict(net.state_dict())
    want = [float(mod.train_step(torch.from_numpy(x), torch.from_numpy(y))) for _ in range(3)]
    compare("losses", np.load(os.path.join(tmp, "losses.npy")), want, 1e-4, 1e-5)
    sd = np.load(os.path.join(tmp, "sd.npz"))
    for k, v in mod.model.state_dict().items():
        compare(k, sd[k], v.detach().numpy(), 1e-4, 1e-5)


def test_python_module_errors_and_runtime_batch(tmp_path):
    """Wrong dtypes and shapes raise TypeError / ValueError naming the entry and the
    input (float64 and int32 convert, as ./net converts them); a bad weights file raises
    with the runtime's message; a batch chosen at run time is taken from the inputs."""
    tmp = str(tmp_path)
    py = write_model(tmp)
    r = subprocess.run([CTC, "build", py, "--python", "-o", os.path.join(tmp, "bmod.so"), "--input", "x=f32[N,20]",
                        "--input", "y=i64[N]", "--max", "N=16"], capture_output=True, text=True,
                       env=dict(os.environ, PYTHON=PY))
    assert r.returncode == 0, r.stderr
    assert os.path.exists(os.path.join(tmp, "bmod.so")) and os.path.exists(os.path.join(tmp, "bmod.h"))
    mod = load_module(py, "embed_model_torch2")
    torch.manual_seed(0)
    net = mod.Net()
    st_write(os.path.join(tmp, "w.safetensors"), state_dict_np(net))
    x = np.random.default_rng(2).standard_normal((5, 20)).astype(np.float32)
    np.save(os.path.join(tmp, "x.npy"), x)
    out = run_py(tmp, '''
        import numpy as np
        import bmod
        m = bmod.Model("w.safetensors")
        x = np.load("x.npy")
        np.save("out5.npy", m.forward(x))
        print(m.forward.__doc__)
        def err(f):
            try:
                f()
            except Exception as e:
                print(type(e).__name__ + ": " + str(e))
            else:
                print("no error")
        err(lambda: m.forward(x.astype(np.float16)))
        err(lambda: m.forward(x[:, :10]))
        err(lambda: m.forward(np.zeros((17, 20), np.float32)))
        err(lambda: m.train_step(x, np.zeros(5, np.float32)))
        assert np.array_equal(m.forward(x.astype(np.float64)), np.load("out5.npy"))
        err(lambda: m.forward())
        err(lambda: bmod.Model("missing.safetensors"))
        np.save("bad.npy", x)
        err(lambda: m.load("x.npy"))
    ''')
    assert "forward(x: float32[16, 20] (batch)) -> out: float32[16, 4] (batch)" in out, out
    assert "TypeError: bmod.forward: input 'x' has dtype float16, expected float32" in out, out
    assert "ValueError: bmod.forward: input 'x' has shape [5, 10], expected [5, 20]" in out, out
    assert "ValueError: bmod.forward: input 'x' has 17 along axis 0" in out, out
    assert "TypeError: bmod.train_step: input 'y' has dtype float32, expected int64" in out, out
    assert "TypeError: bmod.forward() missing input 'x'" in out, out
    assert "OSError: missing.safetensors" in out, out
    assert "ValueError: x.npy" in out, out
    with torch.no_grad():
        compare("forward batch 5", np.load(os.path.join(tmp, "out5.npy")), net(torch.from_numpy(x)).numpy(), 1e-4, 1e-5)


def test_library_options_are_checked(tmp_path):
    py = write_model(str(tmp_path))
    for args, msg in [(["compile", py, "--shared", "-o", "x.c"], "--shared goes with 'build'"),
                      (["build", py, "--shared", "--python", "-o", "x"], "--shared and --python"),
                      (["build", py, "--python", "-o", str(tmp_path / "1bad")], "is not a Python identifier"),
                      (["build", py, "--python", "--target", "cuda", "-o", "x"], "--python is not supported with --target cuda")]:
        r = run([CTC, *args], check=False)
        assert r.returncode == 1 and msg in r.stderr, (args, r.stderr)


def test_python_module_source_compiles_clean(tmp_path):
    """runtime_min/python/ctc_pymodule.c under gcc and clang with -Wall -Wextra -Werror
    (not -pedantic: PyType_Slot stores functions in void *, as the C API wants)."""
    import sysconfig
    inc = sysconfig.get_paths()["include"]
    if not os.path.exists(os.path.join(inc, "Python.h")):
        pytest.skip("no Python headers (python3-dev)")
    for cc in ["gcc", "clang"]:
        run([cc, "-std=c11", "-D_POSIX_C_SOURCE=200809L", "-Wall", "-Wextra", "-Werror", "-fPIC", "-c", "-I" + inc,
             "-I" + os.path.join(ROOT, "runtime_min"), "-DCTC_PY_MODULE=m", "-DCTC_PY_DESC=net_desc",
             os.path.join(ROOT, "runtime_min", "python", "ctc_pymodule.c"), "-o", str(tmp_path / f"{cc}.o")])


def test_python_module_anomaly(tmp_path):
    """A module built with --anomaly raises NAME.Error with the anomaly report (the op,
    and for backward code the forward line it differentiates)."""
    import test_anomaly as ta
    tmp = str(tmp_path)
    py = os.path.join(tmp, "anom.py")
    with open(py, "w") as f:
        f.write(ta.MODEL.format(fn="sqrt"))
    r = subprocess.run([CTC, "build", py, "--python", "--anomaly", "-o", os.path.join(tmp, "anmod")],
                       capture_output=True, text=True, env=dict(os.environ, PYTHON=PY))
    assert r.returncode == 0, r.stderr
    ta.weights(tmp)
    np.save(os.path.join(tmp, "x.npy"), ta.X_ZERO)
    out = run_py(tmp, '''
        import numpy as np
        import anmod
        m = anmod.Model("w.safetensors")
        try:
            m.train_step(np.load("x.npy"), np.zeros(2, np.float32))
        except anmod.Error as e:
            print(e)
    ''')
    assert "anmod.train_step: a kernel produced NaN or Inf" in out and \
        "in the backward pass of entry 'train_step', differentiating anom.py:14: r = torch.sqrt(h)" in out, out


def test_c_api_error_message_has_the_detail(tmp_path):
    """The C API's message getter (net_error, ctc_model_error): a failed load names the
    file and the missing tensor, or the tensor and both shapes, as ./net prints them; an
    entry's batch out of range and a too small arena say so; a load that succeeds clears
    it. Per handle: a second model keeps its own message."""
    tmp = str(tmp_path)
    py = write_model(tmp)
    run([CTC, "build", py, "--shared", "-o", os.path.join(tmp, "libnet.so")])
    st_write(os.path.join(tmp, "nobias.safetensors"),
             {"fc1.weight": np.zeros((32, 20), np.float32), "fc2.weight": np.zeros((4, 32), np.float32),
              "fc2.bias": np.zeros(4, np.float32)})
    st_write(os.path.join(tmp, "shape.safetensors"),
             {"fc1.weight": np.zeros((3, 3), np.float32), "fc1.bias": np.zeros(32, np.float32),
              "fc2.weight": np.zeros((4, 32), np.float32), "fc2.bias": np.zeros(4, np.float32)})
    st_write(os.path.join(tmp, "good.safetensors"),
             {"fc1.weight": np.zeros((32, 20), np.float32), "fc1.bias": np.zeros(32, np.float32),
              "fc2.weight": np.zeros((4, 32), np.float32), "fc2.bias": np.zeros(4, np.float32)})
    src = os.path.join(tmp, "use.c")
    with open(src, "w") as f:
        f.write(textwrap.dedent(r"""
            #include <stdio.h>
            #include <stdlib.h>
            #include "libnet.h"
            int main(void) {
              net_t m = {0}, other = {0};
              void *arena = aligned_alloc(64, (NET_ARENA_BYTES + 63) / 64 * 64);
              void *arena2 = aligned_alloc(64, (NET_ARENA_BYTES + 63) / 64 * 64);
              printf("init %d <%s>\n", net_init(&m, arena, 100), net_error(&m));
              if (net_init(&m, arena, NET_ARENA_BYTES) || net_init(&other, arena2, NET_ARENA_BYTES)) return 1;
              printf("missing %d <%s>\n", net_load(&m, "nobias.safetensors"), net_error(&m));
              printf("other %d <%s>\n", net_load(&other, "shape.safetensors"), ctc_model_error(&net_desc, &other));
              printf("kept <%s>\n", ctc_model_error(&net_desc, &m));
              static float x[8 * 20], y[8 * 4];
              printf("batch %d <%s>\n", net_forward_batch(&m, 100, x, y), net_error(&m));
              printf("good %d <%s>\n", net_load(&m, "good.safetensors"), net_error(&m));
              printf("save %d <%s>\n", net_save(&m, "no/such/dir/w.safetensors"), net_error(&m));
              free(arena);
              free(arena2);
              return 0;
            }
            """))
    exe = os.path.join(tmp, "use")
    run(["cc", "-std=c11", "-Wall", "-Wextra", "-Werror", "-I" + tmp, "-I" + os.path.join(ROOT, "runtime_min"), src,
         "-L" + tmp, "-lnet", "-Wl,-rpath," + tmp, "-o", exe])
    out = run([exe], cwd=tmp).stdout
    assert "init 6 <net_init: the arena (100 bytes) must have %d bytes, 64-byte aligned>" % \
        int(open(os.path.join(tmp, "libnet.h")).read().split("NET_ARENA_BYTES ((size_t)")[1].split(")")[0]) in out, out
    assert "missing 3 <nobias.safetensors: tensor 'fc1.bias' is missing>" in out, out
    assert "other 4 <shape.safetensors: tensor 'fc1.weight' has shape [3, 3], expected [32, 20]>" in out, out
    assert "kept <nobias.safetensors: tensor 'fc1.bias' is missing>" in out, out
    assert "batch 4 <entry 'forward': batch 100 is outside 1..8>" in out, out
    assert "good 0 <>" in out, out
    assert "save 1 <no/such/dir/w.safetensors: cannot open for writing" in out, out
