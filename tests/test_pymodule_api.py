"""The Python module (`ctc build --python`) as a PyTorch or NumPy user calls it: the
model is callable (`m(x)` runs forward), inputs convert as `./net run` converts them
(float64 for a float32 input, int32 for an int64 one), `load_state_dict` takes
PyTorch's state_dict (strict errors worded as PyTorch's), `state_dict()` has exactly
PyTorch's keys, a batch-64 build runs batch 1, outputs are NumPy arrays that
`np.asarray` and `torch.from_dlpack` share, and `set_num_threads` picks the threads.
Each script runs under Debian's python3 in a subprocess, as a user's would."""
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch

from ctc_testlib import CTC, MLP_TRAIN_SRC, compare, load_module, run

PY = "/usr/bin/python3"   # Debian's, with numpy and torch (the module is built for it)

# A tied weight (head.weight is emb.weight), a non-persistent buffer (scale), BatchNorm's
# buffers, and an example batch of 64: the forward entry takes any batch from 1 to 64.
TIED_SRC = '''
import torch
import torch.nn as nn
import torch.nn.functional as F


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(10, 8)
        self.norm = nn.BatchNorm1d(8)
        self.head = nn.Linear(8, 10, bias=False)
        self.head.weight = self.emb.weight
        self.register_buffer("scale", torch.full((8,), 0.5), persistent=False)

    def forward(self, idx):
        h = self.norm(self.emb(idx)) * self.scale
        return self.head(torch.tanh(h))


model = Net()
optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
example_inputs = {"forward": (torch.zeros(64, dtype=torch.long),),
                  "train_step": (torch.zeros(64, dtype=torch.long), torch.zeros(64, dtype=torch.long))}


def train_step(idx, y):
    optimizer.zero_grad()
    loss = F.cross_entropy(model(idx), y)
    loss.backward()
    optimizer.step()
    return loss
'''


def env():
    e = {k: v for k, v in os.environ.items() if k != "OPENBLAS_CORETYPE"}
    e.update(CTC_NO_REEXEC="1", OMP_NUM_THREADS="1", PYTHON=PY)
    return e


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """The MLP (forward, SGD train_step at batch 8) as mlpmod, the tied model as tiedmod."""
    tmp = tmp_path_factory.mktemp("pymod")
    for name, src in [("mlp", MLP_TRAIN_SRC), ("tied", TIED_SRC)]:
        py = tmp / f"{name}.py"
        py.write_text(src)
        r = subprocess.run([CTC, "build", str(py), "--python", "-o", str(tmp / f"{name}mod")], capture_output=True,
                           text=True, env=env())
        assert r.returncode == 0, r.stderr
    return tmp


def run_py(tmp, code):
    """code under Debian's python3 with the modules on sys.path; its stdout. The module
    itself must not import torch (checked before the script imports it)."""
    prog = "import sys\nsys.path.insert(0, %r)\n" % str(tmp) + textwrap.dedent(code)
    r = subprocess.run([PY, "-c", prog], capture_output=True, text=True, cwd=tmp, timeout=180, env=env())
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout


def torch_model(tmp, name, seed=0):
    mod = load_module(str(tmp / f"{name}.py"), f"pymod_api_{name}_{seed}")
    torch.manual_seed(seed)
    return mod


def test_call_with_float64_matches_pytorch(built):
    """m(x) runs forward (positionally or by input name) on NumPy's default float64, at a
    batch below the planned one, and equals PyTorch's output; a strided float64 array
    too; the module never imports torch."""
    tmp = built
    mod = torch_model(tmp, "mlp")
    net = mod.Net().eval()
    torch.save(net.state_dict(), tmp / "mlp_w.pt")
    x = np.random.default_rng(1).standard_normal((5, 20))   # float64
    np.save(tmp / "x64.npy", x)
    run_py(tmp, '''
        import numpy as np
        import mlpmod
        m = mlpmod.Model("mlp_w.pt")
        x = np.load("x64.npy")
        assert x.dtype == np.float64
        y = m(x)
        assert y.dtype == np.float32 and y.shape == (5, 4), (y.dtype, y.shape)
        assert np.array_equal(m(x=x), y) and np.array_equal(m.forward(x), y)
        assert np.array_equal(m(np.asfortranarray(x)), y)                 # strided: copied, converted
        assert np.array_equal(m(x.astype(np.float32)), y)                 # float32: read in place
        np.save("y_call.npy", y)
        assert "torch" not in sys.modules, "the module imported torch"
    ''')
    with torch.no_grad():
        want = net(torch.from_numpy(x).float()).numpy()
    compare("m(x) float64", np.load(tmp / "y_call.npy"), want, 1e-4, 1e-5)


def test_int32_labels_and_float64_data_train_like_pytorch(built):
    """train_step takes int32 labels and float64 data (as ./net does) and three SGD steps
    give PyTorch's losses and parameters."""
    tmp = built
    mod = torch_model(tmp, "mlp", seed=3)
    torch.save(mod.model.state_dict(), tmp / "mlp_w3.pt")
    rng = np.random.default_rng(4)
    x, y = rng.standard_normal((8, 20)), rng.integers(0, 4, 8).astype(np.int32)
    np.save(tmp / "tx.npy", x)
    np.save(tmp / "ty.npy", y)
    run_py(tmp, '''
        import numpy as np
        import mlpmod
        m = mlpmod.Model("mlp_w3.pt")
        x, y = np.load("tx.npy"), np.load("ty.npy")
        assert x.dtype == np.float64 and y.dtype == np.int32
        np.save("losses.npy", np.array([m.train_step(x, y) for _ in range(3)]))
        np.savez("after.npz", **m.state_dict())
    ''')
    want = [float(mod.train_step(torch.from_numpy(x).float(), torch.from_numpy(y).long())) for _ in range(3)]
    compare("losses", np.load(tmp / "losses.npy"), want, 1e-4, 1e-5)
    after = np.load(tmp / "after.npz")
    for k, v in mod.model.state_dict().items():
        compare(k, after[k], v.numpy(), 1e-4, 1e-5)


def test_load_state_dict_from_torch_tied_batch_one(built):
    """load_state_dict(torch_model.state_dict()) (torch tensors, a tied weight under both
    names) then m(idx) on batch 1 and 3 of a batch-64 build equals PyTorch's eval output;
    state_dict() has exactly PyTorch's keys (the tied one twice, the non-persistent buffer
    not) and goes back into PyTorch strictly; NumPy arrays load too. Outputs are NumPy
    arrays that torch.from_dlpack and np.asarray share, new at each call."""
    tmp = built
    mod = torch_model(tmp, "tied", seed=5)
    net = mod.Net()
    with torch.no_grad():   # BatchNorm statistics that are not the initial ones
        net.norm.running_mean.uniform_(-0.5, 0.5)
        net.norm.running_var.uniform_(0.5, 2.0)
        net.norm.num_batches_tracked.fill_(7)
    net.eval()
    idx = np.array([3, 1, 7])
    with torch.no_grad():
        want1, want3 = net(torch.from_numpy(idx[:1])).numpy(), net(torch.from_numpy(idx)).numpy()
    out = run_py(tmp, f'''
        import numpy as np
        import torch
        sys.path.insert(0, {os.path.dirname(os.path.abspath(__file__))!r})
        from ctc_testlib import load_module
        import tiedmod
        mod = load_module("tied.py", "tied_torch")
        torch.manual_seed(5)
        net = mod.Net()
        with torch.no_grad():
            net.norm.running_mean.uniform_(-0.5, 0.5)
            net.norm.running_var.uniform_(0.5, 2.0)
            net.norm.num_batches_tracked.fill_(7)
        m = tiedmod.Model()
        r = m.load_state_dict(net.state_dict())
        assert r.missing_keys == [] and r.unexpected_keys == [], r
        y1 = m(np.array([3]))
        y3 = m(np.array([3, 1, 7], np.int32))                 # int32 indices for an int64 input
        assert y1.shape == (1, 10) and y3.shape == (3, 10), (y1.shape, y3.shape)
        np.save("y1.npy", y1)
        np.save("y3.npy", y3)
        t = torch.from_dlpack(y3)                             # shares y3's memory
        assert t.shape == (3, 10) and t.dtype == torch.float32 and t.data_ptr() == y3.ctypes.data
        assert np.asarray(y3) is y3 and memoryview(y3).shape == (3, 10)
        keep = y3.copy()
        m(np.array([0, 0, 0]))                                # the next call: new outputs
        assert np.array_equal(y3, keep) and np.array_equal(t.numpy(), keep)
        sd = m.state_dict()
        print("keys", ",".join(sd))
        assert sd["head.weight"] is sd["emb.weight"]
        net2 = mod.Net()
        net2.load_state_dict({{k: torch.from_numpy(v) for k, v in sd.items()}}, strict=True)
        m2 = tiedmod.Model()
        m2.load_state_dict({{k: v.numpy() for k, v in net.state_dict().items()}})
        assert np.array_equal(m2(np.array([3, 1, 7])), y3)
    ''')
    keys = out.split("keys ")[1].split()[0].split(",")
    assert keys == list(net.state_dict()) and "scale" not in keys and "head.weight" in keys, keys
    compare("batch 1", np.load(tmp / "y1.npy"), want1, 1e-4, 1e-5)
    compare("batch 3", np.load(tmp / "y3.npy"), want3, 1e-4, 1e-5)


def test_load_state_dict_strict_errors_as_pytorch(built):
    """Missing and unexpected keys and a size mismatch: one error worded as PyTorch's
    (its torch.Size([..]) written [..]), nothing loaded; strict=False returns the same
    missing and unexpected keys as PyTorch and loads the rest (float16 values too); a
    path instead of a dict and an integer tensor for a float parameter are refused."""
    tmp = built
    mod = torch_model(tmp, "mlp", seed=6)
    net = mod.Net()
    bad = {k: v for k, v in net.state_dict().items() if k != "fc1.bias"}
    bad["fc2.weight"] = torch.zeros(3, 3)
    bad["extra.weight"] = torch.zeros(2)
    with pytest.raises(RuntimeError) as e:
        mod.Net().load_state_dict(bad)
    want = str(e.value).replace("for Net:", "for mlpmod.Model:").replace("torch.Size(", "").replace("])", "]")
    torch.save(bad, tmp / "bad.pt")
    partial = {k: v for k, v in net.state_dict().items() if k != "fc2.bias"}
    partial["extra"] = torch.ones(1)
    torch.save(partial, tmp / "partial.pt")
    r = mod.Net().load_state_dict(partial, strict=False)
    out = run_py(tmp, '''
        import numpy as np
        import torch
        import mlpmod
        m = mlpmod.Model()
        before = m.state_dict()
        try:
            m.load_state_dict(torch.load("bad.pt"))
        except RuntimeError as e:
            assert isinstance(e, mlpmod.Error)
            print("ERR<" + str(e) + ">")
        else:
            print("no error")
        assert all(np.array_equal(v, before[k]) for k, v in m.state_dict().items()), "a failed load changed the model"
        p = torch.load("partial.pt")
        r = m.load_state_dict(p, strict=False)
        print("MISSING", r.missing_keys, "UNEXPECTED", r.unexpected_keys)
        sd = m.state_dict()
        assert np.array_equal(sd["fc1.weight"], p["fc1.weight"].numpy())
        assert np.array_equal(sd["fc2.bias"], before["fc2.bias"])   # missing: kept
        half = {k: v.half() for k, v in p.items() if k != "extra"}   # float16 values: exact in float32
        m.load_state_dict(half, strict=False)
        assert np.array_equal(m.state_dict()["fc1.weight"], half["fc1.weight"].float().numpy())
        for args in [("w.safetensors",), ({"fc1.weight": np.zeros((32, 20), np.int64)},)]:
            try:
                m.load_state_dict(*args, strict=False)
            except (TypeError, RuntimeError) as e:
                print(type(e).__name__ + ": " + str(e))
    ''')
    got = out.split("ERR<")[1].split(">")[0]
    assert got == want, (got, want)
    assert f"MISSING {r.missing_keys} UNEXPECTED {r.unexpected_keys}" in out, out
    assert "TypeError: mlpmod.Model.load_state_dict: expected a dict of name -> array" in out, out
    assert ("dtype mismatch for fc1.weight: copying a param of dtype int64 from checkpoint, the dtype in current "
            "model is float32.") in out, out


def test_input_errors_name_what_is_expected_and_threads(built):
    """A dtype the CLI does not convert is a TypeError naming the input, the expected dtype
    and shape with its batch range; set_num_threads(n) sets the entries' threads (same
    outputs) and refuses n < 1."""
    tmp = built
    out = run_py(tmp, '''
        import numpy as np
        import mlpmod
        m = mlpmod.Model()
        x = np.random.default_rng(0).standard_normal((4, 20))
        y = m(x)
        def err(f):
            try:
                f()
            except Exception as e:
                print(type(e).__name__ + ": " + str(e))
            else:
                print("no error")
        err(lambda: m(x.astype(np.float16)))
        err(lambda: m.train_step(np.zeros((8, 20)), np.zeros(8, np.float64)))
        err(lambda: m(x, x))
        err(lambda: m.set_num_threads(0))
        m.set_num_threads(2)
        assert m.get_num_threads() == 2
        assert np.array_equal(m(x), y)
        m.set_num_threads(1)
        assert np.array_equal(m(x), y)
    ''')
    assert ("TypeError: mlpmod.forward: input 'x' has dtype float16, expected float32 (or float64, converted) of "
            "shape [8, 20] (a batch of 1 to 8 along axis 0)") in out, out
    assert "TypeError: mlpmod.train_step: input 'y' has dtype float64, expected int64 (or int32) of shape [8]" in out, out
    assert "TypeError: mlpmod.forward() takes 1 input, got 2" in out, out
    assert "ValueError: mlpmod.Model.set_num_threads(n): n must be from 1 to 4096, got 0" in out, out
