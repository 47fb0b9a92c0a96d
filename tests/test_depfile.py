"""ctc as a build step: `-MD` / `--depfile FILE` write a make rule naming the model file and
the local modules it imported (so make, ninja and CMake rebuild when any changes), the CMake
helper cmake/CtcModel.cmake, and byte-identical output for the same inputs wherever the
files are (no folder of the input in generated files)."""
import os
import shutil
import subprocess
import time

import pytest

from ctc_testlib import CTC, ROOT

HELPER = """import torch.nn as nn
from .act import make_act


class Block(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.fc = nn.Linear(n, n)
        self.act = make_act()

    def forward(self, x):
        return self.act(self.fc(x))
"""
ACT = """import torch.nn as nn


def make_act():
    return nn.Tanh()
"""
MODEL = """import torch
import torch.nn as nn
import torch.nn.functional as F
from layers.block import Block
import util


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.b = Block(util.WIDTH)
        self.out = nn.Linear(util.WIDTH, 4)

    def forward(self, x):
        return self.out(self.b(x))


model = Net()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)


def train_step(x, y):
    optimizer.zero_grad()
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()
    return loss


example_inputs = {"forward": (torch.randn(8, 16),),
                  "train_step": (torch.randn(8, 16), torch.randint(0, 4, (8,)))}
"""
FILES = {"model.py": MODEL, "util.py": "WIDTH = 16\n", "layers/__init__.py": "",
         "layers/block.py": HELPER, "layers/act.py": ACT}


def write_tree(root):
    for rel, text in FILES.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return root


def ctc(*args, cwd):
    r = subprocess.run([CTC, *map(str, args)], cwd=cwd, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return r


def rule(path):
    """(targets, prerequisites) of a one-rule depfile."""
    text = path.read_text().replace("\\\n", " ")
    assert text.endswith("\n") and text.count("\n") == 1, text
    head, deps = text.split(":", 1)
    return head.split(), deps.split()


IMPORTED = ["model.py", "layers/block.py", "layers/act.py", "util.py"]


def test_md_lists_the_model_and_its_local_imports(tmp_path):
    write_tree(tmp_path)
    ctc("compile", "model.py", "-o", "net.c", "-MD", cwd=tmp_path)
    targets, deps = rule(tmp_path / "net.d")   # gcc's name: the output's extension replaced by .d
    assert targets == ["net.c", "net.h"]
    assert deps[0] == "model.py" and sorted(deps) == sorted(IMPORTED)
    # from another folder: the paths as given, so the rule holds from where make runs
    (tmp_path / "out").mkdir()
    ctc("compile", tmp_path / "model.py", "-o", tmp_path / "out" / "m.c", "--depfile", tmp_path / "m.dep",
        cwd=tmp_path.parent)
    targets, deps = rule(tmp_path / "m.dep")
    assert targets == [str(tmp_path / "out" / "m.c"), str(tmp_path / "out" / "m.h")]
    assert sorted(deps) == sorted(str(tmp_path / p) for p in IMPORTED)


def test_depfile_of_build_and_of_emit(tmp_path):
    write_tree(tmp_path)
    ctc("build", "model.py", "-o", "net", "-MD", cwd=tmp_path)
    targets, deps = rule(tmp_path / "net.d")
    assert targets == ["net", "net.c", "net.h"] and deps[0] == "model.py" and "layers/act.py" in deps
    ctc("compile", "model.py", "--emit", "ir", "-o", "net.ir", "--depfile", "ir.d", cwd=tmp_path)
    assert rule(tmp_path / "ir.d")[0] == ["net.ir"]


def test_depfile_escapes_spaces(tmp_path):
    d = write_tree(tmp_path / "my models")
    ctc("compile", "my models/model.py", "-o", "m.c", "-MD", cwd=tmp_path)
    text = (tmp_path / "m.d").read_text()
    assert "my\\ models/model.py" in text and "my\\ models/layers/act.py" in text
    assert d.exists()


def test_md_needs_an_output(tmp_path):
    write_tree(tmp_path)
    r = subprocess.run([CTC, "check", "model.py", "-MD"], cwd=tmp_path, capture_output=True, text=True)
    assert r.returncode == 1 and "-MD goes with 'compile' or 'build' and -o" in r.stderr
    r = subprocess.run([CTC, "compile", "model.py", "--emit", "ast", "-o", "t.ast", "--depfile", "t.d"], cwd=tmp_path,
                       capture_output=True, text=True)
    assert r.returncode == 1 and "--depfile does not go with --emit ast" in r.stderr and not (tmp_path / "t.d").exists()


def touch_later(path):
    """Touch path: an mtime after everything built so far (make and ninja compare nanoseconds)."""
    time.sleep(0.05)
    os.utime(path)


@pytest.mark.skipif(not shutil.which("make"), reason="make is not installed")
def test_make_rebuilds_when_an_imported_module_changes(tmp_path):
    write_tree(tmp_path)
    (tmp_path / "Makefile").write_text(
        "net.c: model.py\n\t%s compile model.py -o net.c -MD\n\techo built >> log\n-include net.d\n" % CTC)
    make = lambda: subprocess.run(["make", "-s"], cwd=tmp_path, capture_output=True, text=True, check=True)
    make()
    make()
    assert (tmp_path / "log").read_text().count("built") == 1   # up to date
    touch_later(tmp_path / "layers" / "act.py")                 # imported by an imported module
    make()
    assert (tmp_path / "log").read_text().count("built") == 2


@pytest.mark.skipif(not shutil.which("ninja"), reason="ninja is not installed")
def test_ninja_rebuilds_when_an_imported_module_changes(tmp_path):
    write_tree(tmp_path)
    (tmp_path / "build.ninja").write_text(
        "rule ctc\n  command = %s compile $in -o $out --depfile $out.d\n  depfile = $out.d\n  deps = gcc\n"
        "build net.c | net.h: ctc model.py\n" % CTC)
    ninja = lambda: subprocess.run(["ninja"], cwd=tmp_path, capture_output=True, text=True, check=True).stdout
    assert "ctc compile model.py" in ninja()
    assert "no work to do" in ninja()
    touch_later(tmp_path / "util.py")
    assert "no work to do" not in ninja()
    assert "no work to do" in ninja()


MAIN_C = r"""#include <stdio.h>
#include <stdlib.h>
#include "mlp.h"

int main(void) {
  mlp_t m;
  size_t n = (mlp_arena_bytes() + 63) / 64 * 64;
  if (mlp_init(&m, aligned_alloc(64, n), n)) return 1;
  float x[8 * 16], y[8 * 4];
  for (int i = 0; i < 8 * 16; i++) x[i] = 0.01f * (float)i;
  int rc = mlp_forward(&m, x, y);
  printf("forward %d\n", rc);
  return rc;
}
"""


@pytest.mark.skipif(not shutil.which("cmake") or not shutil.which("make"), reason="cmake or make is not installed")
def test_cmake_helper_builds_and_rebuilds(tmp_path):
    src = write_tree(tmp_path / "src")
    (src / "main.c").write_text(MAIN_C)
    (src / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.20)\nproject(app C)\n"
        "list(APPEND CMAKE_MODULE_PATH \"%s\")\ninclude(CtcModel)\n"
        "ctc_add_model(mlp model.py ENTRY train_step ARGS --input x=f32[8,16])\n"
        "add_executable(app main.c)\ntarget_link_libraries(app PRIVATE mlp)\n" % os.path.join(ROOT, "cmake"))
    bld = tmp_path / "bld"
    run = lambda *a: subprocess.run(list(a), cwd=tmp_path, capture_output=True, text=True)
    r = run("cmake", "-S", "src", "-B", "bld", "-G", "Unix Makefiles", "-DCTC_EXECUTABLE=" + CTC)
    assert r.returncode == 0, r.stdout + r.stderr
    build = lambda: run("cmake", "--build", "bld")
    r = build()
    assert r.returncode == 0 and "ctc: compiling model.py" in r.stdout, r.stdout + r.stderr
    assert "mlp_train_step" in (bld / "mlp.h").read_text()
    assert subprocess.run([bld / "app"], capture_output=True, text=True).stdout == "forward 0\n"
    r = build()
    assert "ctc: compiling" not in r.stdout
    touch_later(src / "layers" / "block.py")
    r = build()
    assert r.returncode == 0 and "ctc: compiling model.py" in r.stdout, r.stdout + r.stderr


def outputs(folder):
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file() and not p.name.endswith(".py")}


@pytest.mark.parametrize("opts", [[], ["--target", "cuda"], ["--freestanding", "--entry", "forward"],
                                  ["--emit", "ir"], ["--emit", "kernels"], ["--emit", "dot"]],
                         ids=["c", "cuda", "freestanding", "ir", "kernels", "dot"])
def test_same_inputs_give_the_same_bytes_in_any_folder(tmp_path, opts):
    """The same files compiled from two folders (copies), by relative path from the model's
    folder, from its parent, and by absolute path: every output is identical."""
    a = write_tree(tmp_path / "a")
    b = write_tree(tmp_path / "elsewhere" / "deeper" / "b")
    ext = ".cu" if "cuda" in opts else ".c" if not opts or opts[0] != "--emit" else ".txt"
    ctc("compile", "model.py", "-o", "out" + ext, *opts, cwd=a)
    ctc("compile", "deeper/b/model.py", "-o", "deeper/b/out" + ext, *opts, cwd=tmp_path / "elsewhere")
    absdir = tmp_path / "abs"
    absdir.mkdir()
    ctc("compile", a / "model.py", "-o", absdir / ("out" + ext), *opts, cwd="/")
    ref = outputs(a)
    assert ref and ref == outputs(b) and ref == outputs(absdir)
    for name, data in ref.items():
        assert str(tmp_path).encode() not in data and b"/elsewhere" not in data, name
