"""The documented limits (docs/reliability.md), each hit once: a located
diagnostic from ctc (exit 1), or a runtime error naming the file (exit 1 or 2),
never a crash. Limits already exercised elsewhere: expression nesting
(tests/frontend), arena size and size overflow in the IR (test_sizes.py), tensor
rank and byte sizes that overflow in .npy / safetensors / IDX files
(tests/runtime/test_rt_npy.py, test_rt_safetensors.py, test_rt_train.py), nn.Module
nesting and compile-time memory (test_robustness.py)."""
import gzip
import os
import resource
import sys

import numpy as np
import pytest

from ctc_testlib import CTC, run

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "runtime"))
import rt_testlib  # noqa: E402

MODEL = """import torch
import torch.nn as nn


class Net(nn.Module):
    def forward(self, x):
        return {expr}


model = Net()
example_inputs = (torch.randn(2),)
"""


def blocks():
    src = "def f(x):\n" + "".join("    " * (i + 1) + "if x:\n" for i in range(101)) + "    " * 102 + "pass\n"
    return src


CASES = [
    ("indentation", blocks(), "t.py:102:405: error: too many levels of indentation (the limit is 100)"),
    ("tree_depth", "x = 1" + " + 1" * 1001 + "\n", "t.py:1:5: error: expression nested too deeply (more than 1000 levels)"),
    ("recursion", "def f(n):\n    return f(n - 1) if n else 0\n\n\nx = f(100)\n",
     "t.py:2:12: error: compile-time recursion is too deep (more than 60 calls)"),
    ("rank_reshape", MODEL.format(expr="x.reshape(1, 1, 1, 1, 1, 1, 1, 1, 2)"), "t.py:7:16: error: too many dimensions"),
    ("rank_factory", MODEL.format(expr="x + torch.zeros(1, 1, 1, 1, 1, 1, 1, 1, 2)"),
     "t.py:7:20: error: too many dimensions"),
    ("rank_8_is_fine", MODEL.format(expr="x.reshape(1, 1, 1, 1, 1, 1, 1, 2)"), None),
    ("source_size", "#" * (4 << 20) + "\n", "t.py:1:1: error: source file is too large (4194305 bytes; the limit is 4 MiB)"),
]


@pytest.mark.parametrize("name,src,want", CASES, ids=[c[0] for c in CASES])
def test_compiler_limit(tmp_path, name, src, want):
    p = tmp_path / "t.py"
    p.write_text(src)
    r = run([CTC, "check", "t.py"], cwd=tmp_path, check=False)
    if want is None:
        assert r.returncode == 0, r.stderr
    else:
        assert r.returncode == 1 and r.stderr.startswith(want), r.stderr[:2000]


def test_data_file_larger_than_memory(tmp_path):
    """A data set is read whole: one that does not fit in memory (here a 512 MiB gzip
    bomb under a 256 MiB address-space limit) is an out-of-memory error naming the
    file (exit 2), not a crash."""
    exe = rt_testlib.build_fake(tmp_path)
    bomb = tmp_path / "x.idx.gz"
    head = bytes([0, 0, 8, 3]) + (1 << 20).to_bytes(4, "big") + (16).to_bytes(4, "big") + (32).to_bytes(4, "big")
    with gzip.open(bomb, "wb", compresslevel=1) as f:
        f.write(head)
        zeros = bytes(1 << 24)
        for _ in range(32):
            f.write(zeros)
    np.save(tmp_path / "y.npy", np.zeros(1 << 20, np.int64))

    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (256 << 20, 256 << 20))

    import subprocess
    r = subprocess.run([exe, "train", "--data", bomb, "--labels", tmp_path / "y.npy", "--epochs", "1"],
                       capture_output=True, text=True, env={**os.environ, "FAKE_MODEL": "train"}, preexec_fn=limit,
                       timeout=120)
    assert r.returncode == 2, r.stderr
    assert f"{bomb}: out of memory decompressing" in r.stderr, r.stderr
