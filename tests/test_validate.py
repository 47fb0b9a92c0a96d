"""`ctc compile|build --validate` (compiler/validate.c): the generated kernels through NVRTC
(sm_80, sm_90), the generated C and the CUDA host side through libclang, both loaded at run
time. A clean model validates (exit 0, no note); a diagnostic in a generated kernel or
function (made with the test-only hook $CTC_VALIDATE_INJECT=NAME, an unused variable at the
end of NAME's body) is an internal error (exit 3) naming the kernel and its line; a library
that cannot be loaded ($CTC_NVRTC / $CTC_LIBCLANG pointing nowhere) is a note, exit 0.
NVRTC is slow on big files: the CUDA cases use two small models."""
import os
import re
import subprocess

import pytest

from ctc_testlib import CTC, ROOT

EXAMPLES = ["cifar_net", "hessian_top_eigenvalue", "mlp_sequential", "seed_cnn"]
MLP = os.path.join(ROOT, "examples", "mlp_sequential.py")
CUDA_MODELS = [os.path.join(ROOT, "examples", "mlp_sequential.py"),
               os.path.join(ROOT, "tests", "fuzz_seeds", "transformer.py")]   # forward; train, grads, adamw
NOWHERE = "/nonexistent/ctc-validate-test.so"


def _validate(tmp_path, model, target, env=None, out=None, check_avail=True):
    out = out or str(tmp_path / ("m.cu" if target == "cuda" else "m.c"))
    r = _run(tmp_path, [CTC, "compile", model, "--target", target, "-o", out, "--validate"], env)
    if check_avail:
        m = re.search(r"ctc: note: --validate: (\w+) is unavailable[^\n]*", r.stderr)
        if m:
            pytest.skip(m.group(0))
    return r, out


def _run(cwd, args, env=None):
    e = dict(os.environ)
    e.pop("CTC_VALIDATE_INJECT", None)
    e.update(env or {})
    return subprocess.run([str(a) for a in args], capture_output=True, text=True, cwd=cwd, env=e, timeout=300)


def _funcs(text):
    """{name: (first line, last line)} of the top-level functions of a generated file."""
    out, lines = {}, text.split("\n")
    for i, l in enumerate(lines):
        m = re.match(r"^(?:static )?(?:__global__ |__host__ __device__ )?[\w ]*?\b(\w+)\(.*\) \{$", l)
        if m:
            j = i
            while lines[j] != "}":
                j += 1
            out[m.group(1)] = (i + 1, j + 1)
    return out


@pytest.mark.parametrize("name", EXAMPLES)
def test_c_examples_validate(tmp_path, name):
    r, out = _validate(tmp_path, os.path.join(ROOT, "examples", name + ".py"), "c")
    assert r.returncode == 0, r.stderr
    assert r.stderr == "", r.stderr
    assert os.path.exists(out)


@pytest.mark.parametrize("model", CUDA_MODELS, ids=lambda p: os.path.basename(p)[:-3])
def test_cuda_validate(tmp_path, model):
    r, out = _validate(tmp_path, model, "cuda")
    assert r.returncode == 0, r.stderr
    assert r.stderr == "", r.stderr
    assert "__global__" in open(out).read()


def test_broken_kernel_is_internal_error(tmp_path):
    r, out = _validate(tmp_path, MLP, "cuda")   # clean, and NVRTC and libclang are there
    assert r.returncode == 0, r.stderr
    text = open(out).read()
    kernels = re.findall(r"^static __global__ void (\w+)\(", text, re.M)
    assert len(kernels) >= 2
    k = kernels[1]
    first, last = _funcs(text)[k]
    r = _run(tmp_path, [CTC, "compile", MLP, "--target", "cuda", "-o", out, "--validate"],
             {"CTC_VALIDATE_INJECT": k})
    assert r.returncode == 3, r.stderr
    m = re.search(r"ctc: internal error: --validate: NVRTC \(sm_80\) rejects kernel '(\w+)' at \S*/m\.cu:(\d+): "
                  r"warning #177-D: variable \"ctc_validate_injected\"", r.stderr)
    assert m, r.stderr
    assert m.group(1) == k
    assert first <= int(m.group(2)) <= last, (first, m.group(2), last)
    assert "this is a bug in ctc" in r.stderr
    assert open(out).read() == text   # the hook changes what is validated, not the file


def test_broken_c_function_is_internal_error(tmp_path):
    r, out = _validate(tmp_path, MLP, "c")
    assert r.returncode == 0, r.stderr
    first, last = _funcs(open(out).read())["mlp_forward"]
    r = _run(tmp_path, [CTC, "compile", MLP, "-o", out, "--validate"], {"CTC_VALIDATE_INJECT": "mlp_forward"})
    assert r.returncode == 3, r.stderr
    m = re.search(r"ctc: internal error: --validate: libclang \(portable\) rejects function 'mlp_forward' "
                  r"at \S*/m\.c:(\d+):\d+: warning: unused variable 'ctc_validate_injected' \[-Wunused-variable\]",
                  r.stderr)
    assert m, r.stderr
    assert first <= int(m.group(1)) <= last


def test_cuda_host_side_without_nvrtc(tmp_path):
    """NVRTC missing: a note, and libclang still parses the host side (a broken host function is
    reported); with the host side clean the status is 0."""
    env = {"CTC_NVRTC": NOWHERE}
    r, out = _validate(tmp_path, MLP, "cuda", env, check_avail=False)
    assert r.returncode == 0, r.stderr
    assert re.fullmatch(r"ctc: note: --validate: NVRTC is unavailable \(\$CTC_NVRTC: [^\n]*\): the kernels were not "
                        r"compiled for sm_80 and sm_90\n", r.stderr), r.stderr
    assert os.path.exists(out)
    r = _run(tmp_path, [CTC, "compile", MLP, "--target", "cuda", "-o", out, "--validate"],
             dict(env, CTC_VALIDATE_INJECT="mlp_forward"))
    if "libclang is unavailable" in r.stderr:
        pytest.skip("libclang is unavailable")
    assert r.returncode == 3, r.stderr
    assert re.search(r"libclang rejects function 'mlp_forward' at \S*/m\.cu:\d+:\d+: warning", r.stderr), r.stderr


def test_libraries_missing_are_notes(tmp_path):
    env = {"CTC_NVRTC": NOWHERE, "CTC_LIBCLANG": NOWHERE, "CTC_VALIDATE_INJECT": "mlp_forward"}
    for target, out in (("c", "m.c"), ("cuda", "m.cu")):
        r = _run(tmp_path, [CTC, "compile", MLP, "--target", target, "-o", out, "--validate"], env)
        assert r.returncode == 0, r.stderr
        assert "internal error" not in r.stderr
        assert ("NVRTC is unavailable" in r.stderr) == (target == "cuda"), r.stderr
        assert "ctc: note: --validate: libclang is unavailable ($CTC_LIBCLANG: " in r.stderr, r.stderr
        assert (tmp_path / out).exists()


def test_build_validates_before_building(tmp_path):
    exe = tmp_path / "net"
    r = _run(tmp_path, [CTC, "build", MLP, "-o", exe, "--validate"], {"CTC_VALIDATE_INJECT": "mlp_forward"})
    if "libclang is unavailable" in r.stderr:
        pytest.skip("libclang is unavailable")
    assert r.returncode == 3, r.stderr
    assert "libclang (portable) rejects function 'mlp_forward'" in r.stderr
    assert not exe.exists()


@pytest.mark.parametrize("opts", [["check"], ["compile", "--emit", "ir"]], ids=["check", "emit-ir"])
def test_validate_needs_generated_code(tmp_path, opts):
    r = _run(tmp_path, [CTC, opts[0], MLP, *opts[1:], "--validate"])
    assert r.returncode == 1, r.stderr
    assert "--validate goes with 'compile' or 'build'" in r.stderr
