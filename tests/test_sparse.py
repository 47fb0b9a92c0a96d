"""Graph networks as people write them (issue 30): a Kipf-style GCN whose layers
allocate their weights with torch.FloatTensor(n, m) and import Parameter and Module
from torch.nn.parameter / torch.nn.modules.module, multiply by a sparse adjacency with
torch.spmm, and train on the labelled nodes picked with a LongTensor; sparse tensors
built with torch.sparse_coo_tensor (duplicates summed) at compile time and from values
computed in the function (gradients into the values); the legacy typed constructors.
ctc stores sparse matrices dense: the values are PyTorch's."""
import numpy as np
import pytest
import torch

from ctc_testlib import CTC, compare, load_module, run, run_entry, st_read, st_write, state_dict_np

GCN = """import math

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.modules.module import Module
from torch.nn.parameter import Parameter


class GraphConv(Module):
    def __init__(self, fin, fout, bias=True):
        super(GraphConv, self).__init__()
        self.weight = Parameter(torch.FloatTensor(fin, fout))
        if bias:
            self.bias = Parameter(torch.FloatTensor(fout))
        else:
            self.register_parameter('bias', None)
        self.reset_parameters()

    def reset_parameters(self):
        bound = 1. / math.sqrt(self.weight.size(1))
        self.weight.data.uniform_(-bound, bound)
        if self.bias is not None:
            self.bias.data.uniform_(-bound, bound)

    def forward(self, x, adj):
        out = torch.spmm(adj, torch.mm(x, self.weight))
        return out + self.bias if self.bias is not None else out


class GCN(nn.Module):
    def __init__(self, nfeat, nhid, nclass, dropout):
        super(GCN, self).__init__()
        self.gc1 = GraphConv(nfeat, nhid)
        self.gc2 = GraphConv(nhid, nclass, bias=False)
        self.dropout = dropout

    def forward(self, x, adj):
        x = F.relu(self.gc1(x, adj))
        x = F.dropout(x, self.dropout, training=self.training)
        return F.log_softmax(torch.sparse.mm(adj, self.gc2.weight.new_zeros(1, 1).sum() + x @ self.gc2.weight), dim=1)


model = GCN(nfeat=12, nhid=8, nclass=3, dropout=0.0)
optimizer = torch.optim.Adam(model.parameters(), lr=0.01, weight_decay=5e-4)
idx_train = torch.LongTensor(range(6))


def train_step(features, adj, labels):
    model.train()
    optimizer.zero_grad()
    output = model(features, adj)
    loss = F.nll_loss(output[idx_train], labels[idx_train])
    loss.backward()
    optimizer.step()
    return loss


example_inputs = {"forward": (torch.randn(10, 12), torch.eye(10).to_sparse()),
                  "train_step": (torch.randn(10, 12), torch.eye(10).to_sparse(), torch.zeros(10, dtype=torch.long))}
"""


def _graph(rng):
    a = (rng.random((10, 10)) < 0.3).astype(np.float32)
    a = np.maximum(a, a.T) + np.eye(10, dtype=np.float32)
    a /= a.sum(1, keepdims=True)
    return rng.standard_normal((10, 12)).astype(np.float32), a, rng.integers(0, 3, 10).astype(np.int64)


def test_gcn_forward_and_training(tmp_path):
    path = tmp_path / "gcn.py"
    path.write_text(GCN)
    torch.manual_seed(0)
    mod = load_module(str(path), "gcn_sparse")
    run([CTC, "build", path, "-o", tmp_path / "net"])
    rng = np.random.default_rng(0)
    w = tmp_path / "w0.safetensors"
    st_write(w, state_dict_np(mod.model))
    x, adj, y = _graph(rng)
    mod.model.eval()
    (got,) = run_entry(tmp_path, tmp_path / "net", "forward", [x, adj], 1) if False else [None]
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "adj.npy", adj)
    run([tmp_path / "net", "infer", "--weights", w, "--input", tmp_path / "x.npy", "--input", tmp_path / "adj.npy",
         "--output", tmp_path / "out.npy"])
    with torch.no_grad():
        want = mod.model(torch.from_numpy(x), torch.from_numpy(adj).to_sparse())
    compare("gcn forward", np.load(tmp_path / "out.npy"), want.numpy(), 1e-4, 1e-5)
    for step in range(3):
        x, adj, y = _graph(rng)
        args = [tmp_path / "net", "run", "train_step", "--weights", w]
        for i, d in enumerate((x, adj, y)):
            np.save(tmp_path / f"in{i}.npy", d)
            args += ["--input", tmp_path / f"in{i}.npy"]
        nxt = tmp_path / f"w{step + 1}.safetensors"
        run(args + ["--output", tmp_path / "loss.npy", "--save", nxt, "--save-training-state"])
        lt = float(mod.train_step(torch.from_numpy(x), torch.from_numpy(adj).to_sparse(), torch.from_numpy(y)))
        compare(f"gcn loss at step {step}", float(np.load(tmp_path / "loss.npy")), lt, 1e-4, 1e-6)
        w = nxt
    got = st_read(w)
    for k, v in mod.model.state_dict().items():
        compare(f"gcn {k} after 3 steps", got[k], v.numpy(), 1e-3, 1e-5)


COO = """import torch

A = torch.sparse_coo_tensor(torch.tensor([[0, 1, 1, 2, 0], [2, 0, 0, 1, 2]]), torch.tensor([1.0, 2.0, 3.0, 4.0, 0.5]),
                            (3, 3))
B = torch.sparse.FloatTensor(torch.LongTensor([[0, 2], [1, 1]]), torch.FloatTensor([2.5, -1.0]), torch.Size([3, 2]))


def consts(x):
    return torch.spmm(A, x), torch.sparse.mm(A, B.to_dense())


def built(idx, vals, x):
    S = torch.sparse_coo_tensor(idx, vals * 2, (4, 3))
    y = torch.spmm(S, x)
    gv, gx = torch.autograd.grad((y * y).sum(), [vals, x])
    return y, gv, gx


def typed(n):
    a = torch.FloatTensor(2, 3).zero_() + n
    b = torch.LongTensor([3, 4])
    c = torch.DoubleTensor([1.5])
    assert isinstance(a, torch.FloatTensor) and isinstance(b, torch.LongTensor) and not isinstance(a, torch.LongTensor)
    return a, b * 2, c


example_inputs = {"consts": (torch.zeros(3, 4),), "built": (torch.zeros(2, 5, dtype=torch.long), torch.zeros(5),
                                                             torch.zeros(3, 2)),
                  "typed": (torch.zeros(()),)}
"""


def test_coo_tensors_and_typed_constructors(tmp_path):
    path = tmp_path / "coo.py"
    path.write_text(COO)
    mod = load_module(str(path), "coo_sparse")
    exe = tmp_path / "coo"
    run([CTC, "build", path, "-o", exe, "--entry", "consts", "--entry", "built", "--entry", "typed"])
    rng = np.random.default_rng(1)
    x = rng.standard_normal((3, 4)).astype(np.float32)
    got = run_entry(tmp_path, exe, "consts", [x], 2)
    for g, w in zip(got, mod.consts(torch.from_numpy(x))):
        compare("consts", g, w.numpy(), 1e-5, 1e-6)
    idx = np.array([[0, 3, 3, 1, 2], [2, 0, 0, 1, 2]], dtype=np.int64)   # a duplicate (3, 0)
    vals = rng.standard_normal(5).astype(np.float32)
    x2 = rng.standard_normal((3, 2)).astype(np.float32)
    got = run_entry(tmp_path, exe, "built", [idx, vals, x2], 3)
    # PyTorch 1.13 has no gradient of spmm into a sparse tensor's values: the same
    # product with the dense matrix (duplicates summed) is the reference
    ti = torch.from_numpy(idx)
    tv, tx = torch.from_numpy(vals).requires_grad_(), torch.from_numpy(x2).requires_grad_()
    dense = torch.zeros(4, 3).index_put((ti[0], ti[1]), tv * 2, accumulate=True)
    y = dense @ tx
    gv, gx = torch.autograd.grad((y * y).sum(), [tv, tx])
    with torch.no_grad():
        compare("sparse value", y, torch.spmm(torch.sparse_coo_tensor(ti, tv * 2, (4, 3)), tx).numpy(), 1e-6, 1e-6)
    for name, g, w in zip(("y", "d/dvals", "d/dx"), got, (y, gv, gx)):
        compare("built " + name, g, w.detach().numpy(), 1e-5, 1e-6)
    got = run_entry(tmp_path, exe, "typed", [np.array(1.5, dtype=np.float32)], 3)
    for g, w in zip(got, mod.typed(torch.tensor(1.5))):
        assert g.dtype == w.numpy().dtype
        compare("typed", g, w.numpy(), 0, 0)


def test_coo_index_out_of_range_stops(tmp_path):
    path = tmp_path / "coo.py"
    path.write_text(COO)
    exe = tmp_path / "coo"
    run([CTC, "build", path, "-o", exe, "--entry", "built"])
    np.save(tmp_path / "i.npy", np.array([[0, 4, 0, 0, 0], [0, 0, 0, 0, 0]], dtype=np.int64))
    np.save(tmp_path / "v.npy", np.ones(5, dtype=np.float32))
    np.save(tmp_path / "x.npy", np.ones((3, 2), dtype=np.float32))
    r = run([exe, "run", "built", "--input", tmp_path / "i.npy", "--input", tmp_path / "v.npy", "--input",
             tmp_path / "x.npy", "--output", tmp_path / "a.npy", "--output", tmp_path / "b.npy", "--output",
             tmp_path / "c.npy"], check=False)
    assert r.returncode != 0 and "index 4 is out of range [0, 4)" in r.stderr and "sparse_coo_tensor" in r.stderr, r.stderr


INDEX = """import torch

KEEP = torch.tensor([True, False, True, True, False])
PICK = torch.tensor([[0, -1], [2, 2]])
TABLE = torch.arange(12.).view(4, 3)


def pick(x, i):
    rows = x[i]                      # [k, 5] from a run-time index (negative counts from the end)
    cols = x[:, PICK]                # [6, 2, 2]
    kept = x[1:3, KEEP]              # a constant mask: [2, 3]
    return rows, cols, kept * 2, TABLE[torch.tensor([3, 0])] + x.sum()


example_inputs = {"pick": (torch.zeros(6, 5), torch.zeros(3, dtype=torch.long))}
"""


def test_indexing_with_one_tensor(tmp_path):
    path = tmp_path / "idx.py"
    path.write_text(INDEX)
    mod = load_module(str(path), "idx_tensor")
    exe = tmp_path / "idx"
    run([CTC, "build", path, "-o", exe, "--entry", "pick"])
    x = np.random.default_rng(2).standard_normal((6, 5)).astype(np.float32)
    i = np.array([4, -6, 0], dtype=np.int64)
    got = run_entry(tmp_path, exe, "pick", [x, i], 4)
    for g, w in zip(got, mod.pick(torch.from_numpy(x), torch.from_numpy(i))):
        compare("indexing", g, w.numpy(), 1e-6, 1e-6)


@pytest.mark.parametrize("body, msg", [
    ("x[x > 0]", "indexing with a boolean mask computed at run time is not supported by ctc"),
    ("x[i, torch.zeros(3, dtype=torch.long)]",   # several index tensors: theirs must broadcast (test_index_multi.py)
     "shape mismatch: indexing tensors could not be broadcast together with shapes [2], [3]"),
    ("x[x]", "tensors used as indices must be long, int or bool tensors, got f32"),
])
def test_indexing_errors(tmp_path, body, msg):
    p = tmp_path / "m.py"
    p.write_text("import torch\n\n\ndef f(x, i):\n    return " + body + "\n\n\n"
                 "example_inputs = {'f': (torch.zeros(4, 4), torch.zeros(2, dtype=torch.long))}\n")
    r = run([CTC, "check", p, "--entry", "f"], check=False)
    assert r.returncode == 1 and "m.py:5:" in r.stderr and msg in r.stderr, r.stderr
