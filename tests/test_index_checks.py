"""Indices out of range at run time: embedding, index_select, gather, scatter_add,
cross_entropy / nll_loss targets (but ignore_index) and one_hot stop the entry with
CTC_ERR_INDEX and a report naming the value, the bound, the element and the op's model
line, as PyTorch 1.13 raises (negative indices included: none of these ops wraps them).
Checked through every front end: ./net run / infer / train, the C API (the status and
net_desc.error_of), the Python module (NAME.IndexError) and the CUDA target (emulated)."""
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from ctc_testlib import CTC, EXAMPLES, ROOT, run

MODEL = '''
import torch
import torch.nn as nn
import torch.nn.functional as F


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(10, 3)

    def forward(self, idx):
        return self.emb(idx)


model = Net()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)


def isel(x, idx):
    return torch.index_select(x, 1, idx)


def gath(x, idx):
    return torch.gather(x, 1, idx)


def scat(x, idx, src):
    return x.scatter_add(1, idx, src)


def ce(logits, y):
    return F.cross_entropy(logits, y)


def nll(logp, y):
    return F.nll_loss(logp, y, reduction="sum")


def hot(y):
    return F.one_hot(y, 10)


def train_step(idx, y):
    optimizer.zero_grad()
    loss = F.cross_entropy(model(idx).sum(dim=1, keepdim=True) * torch.ones(1, 4), y)
    loss.backward()
    optimizer.step()
    return loss


example_inputs = {
    "forward": (torch.zeros(6, dtype=torch.long),),
    "isel": (torch.randn(4, 10), torch.zeros(5, dtype=torch.long)),
    "gath": (torch.randn(4, 10), torch.zeros(4, 2, dtype=torch.long)),
    "scat": (torch.randn(4, 10), torch.zeros(4, 2, dtype=torch.long), torch.randn(4, 2)),
    "ce": (torch.randn(6, 10), torch.zeros(6, dtype=torch.long)),
    "nll": (torch.randn(6, 10), torch.zeros(6, dtype=torch.long)),
    "hot": (torch.zeros(6, dtype=torch.long),),
    "train_step": (torch.zeros(6, dtype=torch.long), torch.zeros(6, dtype=torch.long)),
}
'''

LINES = {   # each entry's op, as the report quotes its model line
    "forward": "return self.emb(idx)", "isel": "return torch.index_select(x, 1, idx)",
    "gath": "return torch.gather(x, 1, idx)", "scat": "return x.scatter_add(1, idx, src)",
    "ce": "return F.cross_entropy(logits, y)", "nll": 'return F.nll_loss(logp, y, reduction="sum")',
    "hot": "return F.one_hot(y, 10)",
}
OPS = {"forward": "embedding", "isel": "gather", "gath": "gather", "scat": "scatter_add", "ce": "gather",
       "nll": "gather", "hot": "gather"}

ENTRIES = [a for e in ["isel", "gath", "scat", "ce", "nll", "hot", "train_step"] for a in ("--entry", e)]
RNG = np.random.default_rng(5)


def inputs(entry, bad=None, at=3):
    """The entry's inputs with valid indices, or with `bad` at element `at` of the index."""
    x = RNG.standard_normal((4, 10)).astype(np.float32)
    ix = {"forward": RNG.integers(0, 10, 6), "isel": RNG.integers(0, 10, 5), "gath": RNG.integers(0, 10, (4, 2)),
          "scat": RNG.integers(0, 10, (4, 2)), "ce": RNG.integers(0, 10, 6), "nll": RNG.integers(0, 10, 6),
          "hot": RNG.integers(0, 10, 6)}[entry].astype(np.int64)
    if bad is not None:
        ix.reshape(-1)[at] = bad
    return {"forward": [ix], "isel": [x, ix], "gath": [x, ix], "scat": [x, ix, RNG.standard_normal((4, 2)).astype(np.float32)],
            "ce": [RNG.standard_normal((6, 10)).astype(np.float32), ix],
            "nll": [np.log(np.full((6, 10), 0.1, np.float32)), ix], "hot": [ix]}[entry]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ix")
    py = tmp / "ixmodel.py"
    py.write_text(MODEL)
    run([CTC, "build", str(py), "-o", str(tmp / "net"), *ENTRIES])
    return tmp


def run_net(tmp, entry, arrays, check=True):
    args = [str(tmp / "net"), "run", entry]
    for k, a in enumerate(arrays):
        p = tmp / f"{entry}_in{k}.npy"
        np.save(p, a)
        args += ["--input", str(p)]
    out = tmp / f"{entry}_out.npy"
    r = run(args + ["--output", str(out)], check=check)
    return r, (np.load(out) if r.returncode == 0 else None)


def torch_ref(entry, arrays):
    t = [torch.from_numpy(a) for a in arrays]
    if entry == "isel":
        return torch.index_select(t[0], 1, t[1])
    if entry == "gath":
        return torch.gather(t[0], 1, t[1])
    if entry == "scat":
        return t[0].scatter_add(1, t[1], t[2])
    if entry == "ce":
        return F.cross_entropy(t[0], t[1])
    if entry == "nll":
        return F.nll_loss(t[0], t[1], reduction="sum")
    if entry == "hot":
        return F.one_hot(t[0], 10)
    raise AssertionError(entry)


@pytest.mark.parametrize("entry", ["isel", "gath", "scat", "ce", "nll", "hot"])
def test_valid_indices_match_pytorch(built, entry):
    arrays = inputs(entry)
    _, got = run_net(built, entry, arrays)
    np.testing.assert_allclose(got, torch_ref(entry, arrays).numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("entry", sorted(LINES))
@pytest.mark.parametrize("bad", [10, -1])
def test_out_of_range_stops_the_entry(built, entry, bad):
    arrays = inputs(entry, bad)
    with pytest.raises((IndexError, RuntimeError)):   # PyTorch refuses it too
        if entry == "forward":
            F.embedding(torch.from_numpy(arrays[0]), torch.zeros(10, 3))
        else:
            torch_ref(entry, arrays)
    r, _ = run_net(built, entry, arrays, check=False)
    assert r.returncode == 1, r
    assert f"index {bad} is out of range [0, 10) in '" in r.stderr and "' (element 3) read by " + OPS[entry] in r.stderr, \
        r.stderr
    assert f"ixmodel.py:" in r.stderr and LINES[entry] in r.stderr, r.stderr


def test_ignore_index_is_not_checked(built):
    """cross_entropy's default ignore_index (-100) is allowed and ignored, as in PyTorch."""
    arrays = inputs("ce")
    arrays[1][[1, 4]] = -100
    _, got = run_net(built, "ce", arrays)
    np.testing.assert_allclose(got, torch_ref("ce", arrays).numpy(), rtol=1e-5)


def test_generated_check_is_one_pass_before_the_kernel(built):
    """One branch-free pass over the index, before the op; an arange index (the flip of
    nothing here) needs none, and a training step checks its labels once."""
    c = (built / "net.c").read_text()
    assert "(uint64_t)" in c and "ctc_bad |=" in c and "return ctc_index_fail(" in c
    assert "clamped" not in c


def test_cli_infer_and_train(built, tmp_path):
    """./net infer (the embedding) and ./net train (labels in range for the driver's own
    check, token indices not) report the same way; the weights file is not written."""
    idx = inputs("forward", 12, at=0)[0]
    np.save(tmp_path / "idx.npy", idx)
    r = run([str(built / "net"), "infer", "--random-weights", "--input", str(tmp_path / "idx.npy")], check=False)
    assert r.returncode == 1 and "index 12 is out of range [0, 10) in 'idx' (element 0) read by embedding" in r.stderr, \
        r.stderr
    np.save(tmp_path / "d.npy", np.concatenate([idx, idx]))
    np.save(tmp_path / "l.npy", np.zeros(12, np.int64))
    r = run([str(built / "net"), "train", "--data", str(tmp_path / "d.npy"), "--labels", str(tmp_path / "l.npy"),
             "--epochs", "1", "--no-shuffle", "--save", str(tmp_path / "w.safetensors")],
            check=False)
    assert r.returncode != 0 and "at epoch 1, step 1" in r.stderr and "index 12 is out of range [0, 10)" in r.stderr, \
        r.stderr
    assert not (tmp_path / "w.safetensors").exists()


def test_seed_cnn_bad_labels(tmp_path):
    """The seed CNN's train_step with every label 10: PyTorch raises, so does ./net run."""
    exe = tmp_path / "cnn"
    run([CTC, "build", os.path.join(EXAMPLES, "seed_cnn.py"), "-o", str(exe)])
    np.save(tmp_path / "x.npy", RNG.standard_normal((64, 1, 28, 28)).astype(np.float32))
    np.save(tmp_path / "y.npy", np.full(64, 10, np.int64))
    r = run([str(exe), "run", "train_step", "--input", str(tmp_path / "x.npy"), "--input", str(tmp_path / "y.npy"),
             "--output", str(tmp_path / "loss.npy")], check=False)
    assert r.returncode == 1 and not (tmp_path / "loss.npy").exists(), r
    assert ("entry 'train_step': index 10 is out of range [0, 10) in 'target' (element 0) read by gather at "
            "seed_cnn.py:38 (forward of entry 'train_step'): loss = F.cross_entropy(model(images), labels)") in r.stderr, \
        r.stderr


def test_c_api(built, tmp_path):
    """The C API: the entry returns CTC_ERR_INDEX, net_desc.error_of(&m) says why."""
    drv = tmp_path / "drv.c"
    drv.write_text(textwrap.dedent('''\
        #include <stdio.h>
        #include <stdlib.h>
        #include "net.h"
        int main(void) {
          static net_t m;
          void *arena = aligned_alloc(64, (NET_ARENA_BYTES + 63) / 64 * 64);
          if (net_init(&m, arena, NET_ARENA_BYTES) != CTC_OK) return 2;
          int64_t idx[6] = {0, 1, 2, 3, 4, 5};
          float out[18];
          int rc = net_forward(&m, idx, out);
          printf("%d\\n", rc);
          idx[5] = 99;
          rc = net_forward(&m, idx, out);
          printf("%d %d %s\\n%s\\n", rc, rc == CTC_ERR_INDEX, ctc_strerror(rc), net_desc.error_of(&m));
          free(arena);
          return 0;
        }
        '''))
    exe = tmp_path / "drv"
    rt = os.path.join(ROOT, "runtime_min")
    run(["gcc", "-std=c11", "-O1", "-I", str(built), "-I", rt, str(drv), str(built / "net.c"),
         os.path.join(ROOT, "build", "libctc_rt.a"), "-lz", "-lm", "-fopenmp", "-o", str(exe)])
    out = run([str(exe)]).stdout.splitlines()
    assert out[0] == "0" and out[1].startswith("11 1 an index is out of range"), out
    assert "index 99 is out of range [0, 10) in 'idx' (element 5) read by embedding at ixmodel.py:" in out[2], out


def test_python_module(tmp_path):
    py = tmp_path / "ixmodel.py"
    py.write_text(MODEL)
    r = subprocess.run([CTC, "build", str(py), "--python", "-o", str(tmp_path / "ixmod"), *ENTRIES], capture_output=True,
                       text=True, env=dict(os.environ, PYTHON="/usr/bin/python3"))
    assert r.returncode == 0, r.stderr
    prog = textwrap.dedent('''
        import sys
        sys.path.insert(0, %r)
        import numpy as np
        import ixmod
        m = ixmod.Model()
        print(m.hot(np.array([0, 1, 2, 3, 4, 9])).sum())
        for exc in (IndexError, ixmod.Error, ixmod.IndexError):
            try:
                m.ce(np.zeros((6, 10), np.float32), np.array([0, 1, 2, 3, 4, 10]))
            except exc as e:
                print(type(e).__name__, e)
    ''' % str(tmp_path))
    r = subprocess.run(["/usr/bin/python3", "-c", prog], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == "6" and len(lines) == 4, lines
    for line in lines[1:]:
        assert line.startswith("IndexError ixmod.ce: an index is out of range: index 10 is out of range [0, 10) in '") \
            and "(element 5) read by gather at ixmodel.py:" in line and "return F.cross_entropy(logits, y)" in line, line


def test_cuda_emulated(built, tmp_path):
    """The CUDA target (emulated on the CPU): the same report, from the index copied back."""
    if subprocess.run(["which", "g++"], capture_output=True).returncode:
        pytest.skip("no g++")
    exe = tmp_path / "netcu"
    run([CTC, "build", str(built / "ixmodel.py"), "--target", "cuda", "--emulate", "-o", str(exe), *ENTRIES], timeout=900)
    for entry, bad in (("forward", 10), ("scat", -1), ("ce", 11)):
        arrays = inputs(entry, bad)
        args = [str(exe), "run", entry]
        for k, a in enumerate(arrays):
            np.save(tmp_path / f"{entry}{k}.npy", a)
            args += ["--input", str(tmp_path / f"{entry}{k}.npy")]
        r = run(args, check=False)
        assert r.returncode == 1 and f"index {bad} is out of range [0, 10) in '" in r.stderr and \
            "(element 3) read by " + OPS[entry] in r.stderr and LINES[entry] in r.stderr, r.stderr
    arrays = inputs("gath")
    for k, a in enumerate(arrays):
        np.save(tmp_path / f"g{k}.npy", a)
    run([str(exe), "run", "gath", "--input", str(tmp_path / "g0.npy"), "--input", str(tmp_path / "g1.npy"),
         "--output", str(tmp_path / "g.npy")])
    np.testing.assert_allclose(np.load(tmp_path / "g.npy"), torch_ref("gath", arrays).numpy(), rtol=1e-6)


def test_freestanding_returns_the_status(tmp_path):
    """--freestanding has no runtime for the report: the entry returns CTC_ERR_INDEX (11)."""
    py = tmp_path / "ixmodel.py"
    py.write_text(MODEL)
    run([CTC, "compile", str(py), "--freestanding", "--entry", "gath", "--entry", "hot", "-o", str(tmp_path / "fs.c")])
    drv = tmp_path / "main.c"
    drv.write_text(textwrap.dedent('''\
        #include <stdio.h>
        #include "fs.h"
        static _Alignas(64) unsigned char arena[NET_ARENA_BYTES];
        int main(void) {
          net_t m;
          if (net_init(&m, arena, sizeof arena) != CTC_OK) return 2;
          float x[40] = {0}, out[8];
          int64_t idx[8] = {0, 1, 2, 3, 4, 5, 6, 9}, hot[60];
          printf("%d", net_gath(&m, x, idx, out));
          idx[6] = 10;
          printf(" %d", net_gath(&m, x, idx, out));
          idx[6] = -3;
          printf(" %d %d\\n", net_hot(&m, idx + 2, hot), CTC_ERR_INDEX);
          return 0;
        }
        '''))
    run(["gcc", "-std=c11", "-Wall", "-Wextra", "-Werror", "-pedantic", "-I", str(tmp_path), str(drv),
         str(tmp_path / "fs.c"), "-lm", "-o", str(tmp_path / "fs")])
    assert run([str(tmp_path / "fs")]).stdout.split() == ["0", "11", "11", "11"]
