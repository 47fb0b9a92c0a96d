"""Layers and losses staged as compositions of primitives (issue 30): F.unfold/fold,
lp_pool1d/2d, embedding_bag (2-D bags, 1-D bags cut at offsets, sum/mean/max,
per_sample_weights, padding_idx, include_last_offset), F.normalize, cosine_similarity,
pairwise_distance, and the pair losses (cosine_embedding, triplet_margin, margin_ranking,
hinge_embedding, soft_margin, huber, kl_div, poisson_nll). Each alone: its value and the
gradients of every float input against PyTorch; then models that use the module forms
(a metric-learning encoder, a bag-of-words classifier, a patch model with Unfold/Fold and
LPPool2d), trained three steps against PyTorch; and the errors for bad shapes."""
import numpy as np
import pytest
import torch

from ctc_testlib import CTC, compare, load_module, run, run_entry, st_read, st_write, state_dict_np

# (expression, inputs: name -> (shape, kind)); kinds: f float (differentiated), p positive
# float (differentiated), i<N> int64 in [0, N), s sign targets in {-1, 1}, c constant float
OPS = [
    ("F.unfold(x, (2, 3), dilation=(1, 2), padding=1, stride=(2, 1))", {"x": ((2, 3, 7, 8), "f")}),
    ("F.unfold(x, 3)", {"x": ((3, 6, 5), "f")}),
    ("F.fold(x, (6, 7), (2, 3), dilation=(2, 1), padding=(1, 0), stride=(1, 2))", {"x": ((2, 12, 18), "f")}),
    ("F.fold(F.unfold(x, 2, stride=1), (5, 5), 2)", {"x": ((1, 2, 5, 5), "f")}),
    ("F.lp_pool2d(x, 2, (2, 3), stride=(2, 1))", {"x": ((2, 3, 6, 7), "f")}),
    ("F.lp_pool2d(x, 3.0, 2)", {"x": ((3, 6, 6), "p")}),
    ("F.lp_pool1d(x, 2, 3, stride=2)", {"x": ((2, 4, 9), "f")}),
    ("F.embedding_bag(i, w, mode='sum')", {"i": ((4, 5), "i9"), "w": ((9, 6), "f")}),
    ("F.embedding_bag(i, w, padding_idx=2)", {"i": ((4, 5), "i4"), "w": ((4, 6), "f")}),
    ("F.embedding_bag(i, w, o, mode='sum', per_sample_weights=ps)",
     {"i": ((11,), "i9"), "w": ((9, 6), "f"), "o": ((4,), "off11"), "ps": ((11,), "f")}),
    ("F.embedding_bag(i, w, o, mode='mean', padding_idx=0)",
     {"i": ((11,), "i5"), "w": ((5, 6), "f"), "o": ((4,), "off11")}),
    ("F.embedding_bag(i, w, o, mode='max', include_last_offset=True)",
     {"i": ((11,), "i9"), "w": ((9, 6), "f"), "o": ((5,), "off11last")}),
    ("F.normalize(x)", {"x": ((4, 6), "f")}),
    ("F.normalize(x, p=1.0, dim=-1, eps=0.5)", {"x": ((3, 4, 5), "f")}),
    ("F.cosine_similarity(a, b)", {"a": ((5, 6), "f"), "b": ((5, 6), "f")}),
    ("F.cosine_similarity(a, b, dim=-1, eps=1e-3)", {"a": ((3, 1, 6), "f"), "b": ((4, 6), "f")}),
    ("torch.cosine_similarity(a, b * 1e-5, dim=0)", {"a": ((6, 3), "f"), "b": ((6, 3), "f")}),
    ("F.pairwise_distance(a, b)", {"a": ((5, 6), "f"), "b": ((5, 6), "f")}),
    ("F.pairwise_distance(a, b, p=1.0, keepdim=True)", {"a": ((5, 6), "f"), "b": ((1, 6), "f")}),
    ("F.cosine_embedding_loss(a, b, y, margin=0.2)", {"a": ((6, 5), "f"), "b": ((6, 5), "f"), "y": ((6,), "s")}),
    ("F.cosine_embedding_loss(a, b, y, reduction='none')", {"a": ((6, 5), "f"), "b": ((6, 5), "f"), "y": ((6,), "s")}),
    ("F.triplet_margin_loss(a, p, n)", {"a": ((6, 5), "f"), "p": ((6, 5), "f"), "n": ((6, 5), "f")}),
    ("F.triplet_margin_loss(a, p, n, margin=2.0, p=1, swap=True, reduction='sum')",
     {"a": ((6, 5), "f"), "p": ((6, 5), "f"), "n": ((6, 5), "f")}),
    ("F.margin_ranking_loss(a, b, y, margin=0.3)", {"a": ((7,), "f"), "b": ((7,), "f"), "y": ((7,), "s")}),
    ("F.hinge_embedding_loss(x, y, margin=0.5)", {"x": ((4, 5), "f"), "y": ((4, 5), "s")}),
    ("F.soft_margin_loss(x, y)", {"x": ((4, 5), "f"), "y": ((4, 5), "s")}),
    ("F.huber_loss(x, t, delta=0.7)", {"x": ((4, 5), "f"), "t": ((4, 5), "c")}),
    ("F.kl_div(F.log_softmax(x, 1), t, reduction='batchmean')", {"x": ((4, 5), "f"), "t": ((4, 5), "prob")}),
    ("F.kl_div(x, t, reduction='sum', log_target=True)", {"x": ((4, 5), "f"), "t": ((4, 5), "f")}),
    ("F.poisson_nll_loss(x, t)", {"x": ((4, 5), "f"), "t": ((4, 5), "count")}),
    ("F.poisson_nll_loss(x, t, log_input=False, full=True)", {"x": ((4, 5), "p"), "t": ((4, 5), "count")}),
]


def _data(inputs, rng):
    out = []
    for name, (shape, kind) in inputs.items():
        if kind in ("f", "c"):
            v = rng.standard_normal(shape).astype(np.float32)
        elif kind == "p":
            v = rng.uniform(0.2, 2.0, shape).astype(np.float32)
        elif kind == "prob":
            v = rng.random(shape).astype(np.float32)
            v /= v.sum(axis=-1, keepdims=True)
        elif kind == "count":
            v = rng.integers(0, 5, shape).astype(np.float32)
        elif kind == "s":
            v = np.where(rng.random(shape) < 0.5, -1.0, 1.0).astype(np.float32)
        elif kind.startswith("off"):
            n = int(kind[3:].replace("last", ""))
            cuts = np.sort(rng.choice(np.arange(1, n), shape[0] - 1 - kind.endswith("last"), replace=False))
            v = np.concatenate([[0], cuts, [n] if kind.endswith("last") else []]).astype(np.int64)
            if shape[0] >= 3 and not kind.endswith("last"):
                v[2] = v[1]   # an empty bag
        else:
            v = rng.integers(0, int(kind[1:]), shape).astype(np.int64)
        out.append(v)
    return out


def _diff(inputs):
    return [n for n, (_, k) in inputs.items() if k in ("f", "p")]


@pytest.fixture(scope="module")
def ops_net(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("compose")
    src = ["import torch", "import torch.nn.functional as F", ""]
    ex, entries, outs = [], [], []
    for k, (expr, inputs) in enumerate(OPS):
        env = {"F": torch.nn.functional, "torch": torch}
        for v, n in zip(_data(inputs, np.random.default_rng(0)), inputs):
            env[n] = torch.from_numpy(v)
        ys = tuple(eval(expr, env).shape)
        outs.append(ys)
        names = ", ".join(inputs)
        src += [f"def op_{k}({names}, ct):", f"    y = {expr}",
                f"    return (y,) + tuple(torch.autograd.grad((y * ct).sum(), [{', '.join(_diff(inputs))}]))", ""]
        zs = ", ".join(f"torch.zeros({s}{', dtype=torch.long' if kd[0] in 'io' else ''})"
                       for s, kd in inputs.values())
        ex.append(f'    "op_{k}": ({zs}, torch.zeros({ys})),')
        entries += ["--entry", f"op_{k}"]
    src += ["example_inputs = {"] + ex + ["}", ""]
    path = tmp / "ops.py"
    path.write_text("\n".join(src))
    exe = tmp / "ops"
    run([CTC, "build", path, "-o", exe, *entries], timeout=900)
    return tmp, exe, outs


@pytest.mark.parametrize("k", range(len(OPS)), ids=[o[0] for o in OPS])
def test_value_and_gradients(ops_net, k):
    tmp, exe, outs = ops_net
    expr, inputs = OPS[k]
    rng = np.random.default_rng(100 + k)
    data = _data(inputs, rng)
    ct = rng.standard_normal(outs[k]).astype(np.float32)
    diff = _diff(inputs)
    got = run_entry(tmp, exe, f"op_{k}", data + [ct], 1 + len(diff))
    env = {"F": torch.nn.functional, "torch": torch}
    for v, n in zip(data, inputs):
        env[n] = torch.from_numpy(v).requires_grad_(n in diff)
    y = eval(expr, env)
    want = torch.autograd.grad((y * torch.from_numpy(ct)).sum(), [env[n] for n in diff])
    compare(expr, got[0], y.detach().numpy(), 1e-4, 1e-5)
    for n, g, w in zip(diff, got[1:], want):
        compare(f"{expr} d/d{n}", g, w.numpy(), 1e-3, 1e-5)


METRIC = """import torch
import torch.nn as nn
import torch.nn.functional as F


class Encoder(nn.Module):
    def __init__(self, dim=8):
        super().__init__()
        self.unfold = nn.Unfold(kernel_size=2, stride=2)
        self.fold = nn.Fold(output_size=(6, 6), kernel_size=2, stride=2)
        self.mix = nn.Linear(3 * 4, 3 * 4)
        self.pool = nn.LPPool2d(2, kernel_size=3)
        self.proj = nn.Linear(3 * 4, dim)

    def forward(self, x):                            # x [N, 3, 6, 6]
        p = self.unfold(x).transpose(1, 2)           # [N, 9, 12] patches
        x = x + self.fold(torch.tanh(self.mix(p)).transpose(1, 2))
        return F.normalize(self.proj(self.pool(x).flatten(1)), dim=1)


model = Encoder()
optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
triplet = nn.TripletMarginLoss(margin=0.5)
cosine = nn.CosineEmbeddingLoss(margin=0.1)
similarity = nn.CosineSimilarity(dim=1)
distance = nn.PairwiseDistance(p=2)


def train_step(anchor, positive, negative, same):
    optimizer.zero_grad()
    a, p, n = model(anchor), model(positive), model(negative)
    loss = triplet(a, p, n) + cosine(a, n, same) + 0.1 * (1 - similarity(a, p)).mean() + 0.01 * distance(p, n).mean()
    loss.backward()
    optimizer.step()
    return loss


example_inputs = {"forward": (torch.randn(4, 3, 6, 6),),
                  "train_step": (torch.randn(4, 3, 6, 6), torch.randn(4, 3, 6, 6), torch.randn(4, 3, 6, 6),
                                 torch.ones(4))}
"""

BAGS = """import torch
import torch.nn as nn
import torch.nn.functional as F


class BagClassifier(nn.Module):
    def __init__(self, vocab=20, dim=6, classes=3):
        super().__init__()
        self.bag = nn.EmbeddingBag(vocab, dim, mode="mean", padding_idx=0)
        self.sum_bag = nn.EmbeddingBag(vocab, dim, mode="sum")
        self.fc = nn.Linear(2 * dim, classes)

    def forward(self, tokens, offsets):
        flat = tokens.flatten()
        return self.fc(torch.cat([self.bag(tokens), self.sum_bag(flat, offsets)], 1))


model = BagClassifier()
optimizer = torch.optim.SGD(model.parameters(), lr=0.5, momentum=0.9)
kl = nn.KLDivLoss(reduction="batchmean")
huber = nn.HuberLoss(delta=0.5)


def train_step(tokens, offsets, target):
    optimizer.zero_grad()
    logits = model(tokens, offsets)
    loss = kl(F.log_softmax(logits, dim=1), target) + huber(logits.softmax(1), target)
    loss.backward()
    optimizer.step()
    return loss


example_inputs = {"forward": (torch.zeros(4, 5, dtype=torch.long), torch.tensor([0, 5, 10, 15])),
                  "train_step": (torch.zeros(4, 5, dtype=torch.long), torch.tensor([0, 5, 10, 15]),
                                 torch.full((4, 3), 1 / 3))}
"""


def _batch(name, rng):
    if name == "metric":
        x = [rng.standard_normal((4, 3, 6, 6)).astype(np.float32) for _ in range(3)]
        return x + [np.where(rng.random(4) < 0.5, -1.0, 1.0).astype(np.float32)]
    tokens = rng.integers(0, 20, (4, 5)).astype(np.int64)
    offsets = np.array([0, 3, 3, 12], dtype=np.int64)
    target = rng.random((4, 3)).astype(np.float32)
    return [tokens, offsets, target / target.sum(1, keepdims=True)]


@pytest.mark.parametrize("name, src", [("metric", METRIC), ("bags", BAGS)])
def test_models_train_like_pytorch(tmp_path, name, src):
    path = tmp_path / f"{name}.py"
    path.write_text(src)
    torch.manual_seed(0)
    mod = load_module(str(path), f"compose_{name}")
    run([CTC, "build", path, "-o", tmp_path / "net"])
    rng = np.random.default_rng(5)
    w = tmp_path / "w0.safetensors"
    st_write(w, state_dict_np(mod.model))
    for step in range(3):
        data = _batch(name, rng)
        args = [tmp_path / "net", "run", "train_step", "--weights", w]
        for i, d in enumerate(data):
            np.save(tmp_path / f"in{i}.npy", d)
            args += ["--input", tmp_path / f"in{i}.npy"]
        nxt = tmp_path / f"w{step + 1}.safetensors"
        run(args + ["--output", tmp_path / "loss.npy", "--save", nxt, "--save-training-state"])
        lt = float(mod.train_step(*[torch.from_numpy(d) for d in data]))
        compare(f"{name} loss at step {step}", float(np.load(tmp_path / "loss.npy")), lt, 1e-4, 1e-6)
        w = nxt
    got = st_read(w)
    for k, v in mod.model.state_dict().items():
        compare(f"{name} {k} after 3 steps", got[k], v.numpy(), 1e-3, 1e-5)


@pytest.mark.parametrize("body, msg", [
    ("F.unfold(x, 9)", "unfold: given spatial size (4, 4), kernel_size=(9, 9)"),
    ("F.fold(x.flatten(2), (4, 4), 3)", "fold: expected the size of dimension 1 of the input (2) to be divisible"),
    ("F.cosine_embedding_loss(x, x, x)", "0D or 1D target tensor expected, multi-target not supported"),
    ("F.triplet_margin_loss(x[0], x, x)", "anchor 3D, positive 4D, and negative 4D inputs"),
    ("F.embedding_bag(x, x)", "embedding_bag: weight has to be a 2-D tensor, got [2, 2, 4, 4]"),
    ("F.kl_div(x, x, reduction='avg')", "avg is not a valid value for reduction"),
])
def test_errors(tmp_path, body, msg):
    src = ("import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n\n\nclass M(nn.Module):\n"
           "    def __init__(self):\n        super().__init__()\n\n"
           "    def forward(self, x):\n        return " + body + "\n")
    p = tmp_path / "m.py"
    p.write_text(src)
    r = run([CTC, "check", p, "--input", "x=f32[2,2,4,4]"], check=False)
    assert r.returncode == 1 and "m.py:11:" in r.stderr and msg in r.stderr, r.stderr
