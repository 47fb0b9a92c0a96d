"""`ctc build` compiles ctc's runtime once per compiler, flag set and runtime version
into a cache folder and links the cached objects afterwards (compiler/build.h)."""
import os
import re
import shutil

import numpy as np

from ctc_testlib import CTC, ROOT, run

MODEL = """
import torch
import torch.nn as nn

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(6, 3)

    def forward(self, x):
        return torch.relu(self.fc(x))

model = Net()
example_inputs = {"forward": (torch.ones(2, 6),)}
"""


def _build(tmp, exe, env, *opts):
    r = run([CTC, "build", tmp / "m.py", "-o", tmp / exe, "--stats", *opts], timeout=600, env=env)
    m = re.search(r"the runtime's objects (.*)", r.stderr)
    assert m, r.stderr
    return m.group(1)


def test_runtime_objects_cached(tmp_path):
    (tmp_path / "m.py").write_text(MODEL)
    cache = tmp_path / "cache"
    env = dict(os.environ, CTC_CACHE_DIR=str(cache))
    first = _build(tmp_path, "a", env)
    assert first.startswith("compiled into the cache"), first
    (key,) = os.listdir(cache)
    assert re.fullmatch(r"rt-[0-9a-f]{16}", key) and "rt_driver.o" in os.listdir(cache / key)
    stamp = os.stat(cache / key / "rt_driver.o").st_mtime_ns
    assert _build(tmp_path, "b", env) == f"from the cache ({cache / key})"
    assert os.stat(cache / key / "rt_driver.o").st_mtime_ns == stamp
    # other flags: another set of objects
    assert _build(tmp_path, "c", env, "--no-openmp").startswith("compiled into the cache")
    assert len(os.listdir(cache)) == 2
    # an edited runtime is another key: never stale objects
    rt = tmp_path / "rt"
    shutil.copytree(os.path.join(ROOT, "runtime_min"), rt)
    with open(rt / "rt_error.c", "a") as f:
        f.write("\n/* edited */\n")
    assert _build(tmp_path, "d", dict(env, CTC_RUNTIME_DIR=str(rt))).startswith("compiled into the cache")
    assert len(os.listdir(cache)) == 3
    # no cache: an empty CTC_CACHE_DIR, or a folder that cannot be made
    assert _build(tmp_path, "e", dict(env, CTC_CACHE_DIR="")) == "compiled with it (no cache)"
    (tmp_path / "file").write_text("")
    assert _build(tmp_path, "f", dict(env, CTC_CACHE_DIR=str(tmp_path / "file" / "sub"))) == "compiled with it (no cache)"
    # the programs all compute the same thing
    x = np.random.default_rng(0).standard_normal((2, 6)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    outs = []
    for exe in "abcdef":
        run([tmp_path / exe, "run", "forward", "--input", tmp_path / "x.npy", "--output", tmp_path / f"{exe}.npy"])
        outs.append(np.load(tmp_path / f"{exe}.npy"))
    for o in outs[1:]:
        np.testing.assert_array_equal(o, outs[0])
    assert not [n for n in os.listdir(cache) if ".tmp" in n]   # no half-written folders left
