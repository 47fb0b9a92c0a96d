"""Advanced indexing with several tensors (index_adv.c), as RL and classification code
writes it: q[torch.arange(B), actions], x[i, j], x[:, i, j], x[i, :, j] (the indices'
broadcast shape goes first when a slice separates them), None, ints and int lists
beside them; forward and the gradient (a scatter-add back) against PyTorch 1.13, a
DQN-style training step for 3 steps, out-of-range indices stopping the entry with the
op's model line, and the located refusals (a mask computed at run time, shapes that do
not broadcast, a known index out of range)."""
import textwrap

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from ctc_testlib import CTC, compare, load_module, run, run_entry, st_read, st_write, state_dict_np

MODEL = '''import torch
import torch.nn as nn
import torch.nn.functional as F


class QNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 3)

    def forward(self, s):
        return self.fc(s)


model = QNet()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)


def pick(q, a):
    return q[torch.arange(q.shape[0]), a]


def pair(x, i, j):
    return x[i, j]


def mid(x, i, j):
    return x[:, i, j]


def apart(x, i, j):
    return x[i, :, j]


def lead(x, i, j):
    return x[None, i, :, j]


def mixed(x, i, j):
    return x[i, 1, j].sum(-1) + x[1:, i, -1, j][0]


def lists(x):
    return x[[0, 2], [1, -1]] * x[[1], [0, 2]]


def grad_pair(x, i, j, p):
    return torch.autograd.grad((x[i, :, j] * p).sum(), x)[0]


def train_step(s, a, target):
    optimizer.zero_grad()
    q = model(s)
    loss = F.mse_loss(q[torch.arange(s.shape[0]), a], target)
    loss.backward()
    optimizer.step()
    return loss


example_inputs = {
    "forward": (torch.randn(6, 4),),
    "pick": (torch.randn(6, 5), torch.zeros(6, dtype=torch.long)),
    "pair": (torch.randn(4, 5, 3), torch.zeros(2, 3, dtype=torch.long), torch.zeros(3, dtype=torch.long)),
    "mid": (torch.randn(2, 4, 5, 3), torch.zeros(2, 1, dtype=torch.long), torch.zeros(3, dtype=torch.long)),
    "apart": (torch.randn(4, 5, 6), torch.zeros(3, dtype=torch.long), torch.zeros(3, dtype=torch.long)),
    "lead": (torch.randn(4, 5, 6), torch.zeros(2, 3, dtype=torch.long), torch.zeros(3, dtype=torch.long)),
    "mixed": (torch.randn(4, 4, 5, 5), torch.zeros(3, dtype=torch.long), torch.zeros(3, dtype=torch.long)),
    "lists": (torch.randn(3, 4),),
    "grad_pair": (torch.randn(4, 5, 6), torch.zeros(3, dtype=torch.long), torch.zeros(3, dtype=torch.long), torch.randn(3, 5)),
    "train_step": (torch.randn(6, 4), torch.zeros(6, dtype=torch.long), torch.randn(6)),
}
'''

ENTRIES = ["pick", "pair", "mid", "apart", "lead", "mixed", "lists", "grad_pair", "train_step"]
RNG = np.random.default_rng(11)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ixm")
    py = tmp / "multimodel.py"
    py.write_text(MODEL)
    run([CTC, "build", str(py), "-o", str(tmp / "net"), *[a for e in ENTRIES for a in ("--entry", e)]])
    return tmp, load_module(py, "multimodel")


def ints(hi, shape):
    """indices in [-hi, hi): negative ones count from the end"""
    return RNG.integers(-hi, hi, shape).astype(np.int64)


def f32(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


CASES = {   # entry: its inputs
    "pick": lambda: [f32(6, 5), RNG.integers(0, 5, 6).astype(np.int64)],
    "pair": lambda: [f32(4, 5, 3), ints(4, (2, 3)), ints(5, 3)],
    "mid": lambda: [f32(2, 4, 5, 3), ints(4, (2, 1)), ints(5, 3)],
    "apart": lambda: [f32(4, 5, 6), ints(4, 3), ints(6, 3)],
    "lead": lambda: [f32(4, 5, 6), ints(4, (2, 3)), ints(6, 3)],
    "mixed": lambda: [f32(4, 4, 5, 5), ints(4, 3), ints(5, 3)],
    "lists": lambda: [f32(3, 4)],
    "grad_pair": lambda: [f32(4, 5, 6), np.array([0, 3, 0], np.int64), np.array([1, -1, 1], np.int64), f32(3, 5)],
}


@pytest.mark.parametrize("entry", sorted(CASES))
def test_matches_pytorch(built, entry):
    tmp, mod = built
    arrays = CASES[entry]()
    got = run_entry(str(tmp), str(tmp / "net"), entry, arrays, 1)[0]
    want = getattr(mod, entry)(*[torch.from_numpy(a.copy()).requires_grad_(a.dtype == np.float32 and entry == "grad_pair")
                                for a in arrays])
    compare(entry, got, want.detach().numpy(), 1e-6, 1e-6)


def test_gradient_adds_repeated_indices(built):
    """grad_pair picks x[0, :, 1] twice: its gradient is the sum of both adjoints"""
    tmp, mod = built
    arrays = CASES["grad_pair"]()
    got = run_entry(str(tmp), str(tmp / "net"), "grad_pair", arrays, 1)[0]
    p = arrays[3]
    np.testing.assert_allclose(got[0, :, 1], p[0] + p[2], rtol=1e-6)
    assert np.count_nonzero(got) == 10


def test_dqn_training_steps(built):
    """q[torch.arange(B), actions] inside a training step: 3 SGD steps, losses and weights as PyTorch's"""
    tmp, mod = built
    torch.manual_seed(0)
    model = mod.QNet()
    w0 = tmp / "w0.safetensors"
    st_write(w0, state_dict_np(model))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    batches = [(f32(6, 4), RNG.integers(0, 3, 6).astype(np.int64), f32(6)) for _ in range(3)]
    want = []
    for s, a, t in batches:
        opt.zero_grad()
        q = model(torch.from_numpy(s))
        loss = F.mse_loss(q[torch.arange(6), torch.from_numpy(a)], torch.from_numpy(t))
        loss.backward()
        opt.step()
        want.append(loss.item())
    got = []
    w = w0
    for k, (s, a, t) in enumerate(batches):   # one step a run, the weights carried over
        for n, arr in enumerate((s, a, t)):
            np.save(tmp / f"ts{k}_{n}.npy", arr)
        out, w2 = tmp / f"loss{k}.npy", tmp / f"w{k + 1}.safetensors"
        run([str(tmp / "net"), "run", "train_step", "--weights", str(w), "--save", str(w2),
             *[x for n in range(3) for x in ("--input", str(tmp / f"ts{k}_{n}.npy"))], "--output", str(out)])
        got.append(float(np.load(out)))
        w = w2
    np.testing.assert_allclose(got, want, rtol=1e-5)
    for name, v in st_read(w).items():
        compare(name, v, model.state_dict()[name].numpy(), 1e-4, 1e-6)


@pytest.mark.parametrize("bad, dim", [(4, 0), (-5, 0)])
def test_out_of_range_stops_the_entry(built, bad, dim):
    """x[i, :, j] with an i outside [-4, 4): PyTorch raises, the entry stops naming the model line"""
    tmp, mod = built
    arrays = [f32(4, 5, 6), np.array([0, 1, bad], np.int64), np.array([0, 1, 2], np.int64)]
    with pytest.raises(IndexError):
        mod.apart(*[torch.from_numpy(a) for a in arrays])
    for k, a in enumerate(arrays):
        np.save(tmp / f"bad{k}.npy", a)
    r = run([str(tmp / "net"), "run", "apart", *[x for k in range(3) for x in ("--input", str(tmp / f"bad{k}.npy"))],
             "--output", str(tmp / "bad_out.npy")], check=False)
    assert r.returncode == 1, r
    assert f"out of range [0, 4) in 'index_for_dim_{dim}' (element 2)" in r.stderr, r.stderr
    assert "multimodel.py:32 " in r.stderr and "return x[i, :, j]" in r.stderr, r.stderr


def test_compile_time_values(tmp_path):
    """Module-level code: indexing and assigning through two index tensors computed at compile time"""
    src = textwrap.dedent('''
        import torch
        import torch.nn as nn

        table = torch.tensor([[0.0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11]])
        picked = table[torch.tensor([2, 0, -1]), [1, 3, 0]]
        table[[0, 1], torch.tensor([-1, 2])] = torch.tensor([100.0, 200.0])


        class Net(nn.Module):
            def forward(self, x):
                return x * picked + table[:, :3].sum(0)


        model = Net()
        example_inputs = {"forward": (torch.randn(3),)}
    ''')
    py = tmp_path / "ctmodel.py"
    py.write_text(src)
    run([CTC, "build", str(py), "-o", str(tmp_path / "net")])
    x = f32(3)
    np.save(tmp_path / "x.npy", x)
    run([str(tmp_path / "net"), "infer", "--random-weights", "--input", str(tmp_path / "x.npy"), "--output", str(tmp_path / "y.npy")])
    want = load_module(py, "ctmodel").model(torch.from_numpy(x))
    compare("forward", np.load(tmp_path / "y.npy"), want.numpy(), 1e-6, 1e-6)


REFUSED = [
    ("x[x > 0, i]", "multimodel2.py:7:16: error: indexing with a boolean mask computed at run time is not supported "
                    "by ctc: the result's shape would depend on the data"),
    ("x[i, torch.zeros(2, dtype=torch.long)]",
     "multimodel2.py:7:16: error: shape mismatch: indexing tensors could not be broadcast together with shapes [3], [2]"),
    ("x[i, torch.tensor([0, 7, 1])]", "multimodel2.py:7:16: error: index 7 is out of bounds for dimension 1 with size 5"),
    ("x[i, i.float()]", "multimodel2.py:7:16: error: tensors used as indices must be long, int or bool tensors, got f32"),
]


@pytest.mark.parametrize("expr, msg", REFUSED)
def test_refused_at_the_line(tmp_path, expr, msg):
    src = ("import torch\nimport torch.nn as nn\n\n\nclass Net(nn.Module):\n    def forward(self, x, i):\n"
           f"        return {expr}\n\n\nmodel = Net()\n"
           "example_inputs = {'forward': (torch.randn(4, 5), torch.zeros(3, dtype=torch.long))}\n")
    py = tmp_path / "multimodel2.py"
    py.write_text(src)
    r = run([CTC, "build", str(py), "-o", str(tmp_path / "net")], check=False)
    assert r.returncode != 0 and msg in r.stderr, r.stderr
