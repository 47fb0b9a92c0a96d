"""The batch axis (autograd_ad/vmap.c, rules in ir/batch.def), against PyTorch 1.13:

- torch.func.vmap / functorch.vmap of tensor functions: in_dims (None and other
  axes), out_dims, tuple results, nested vmap, per-sample gradients
  vmap(grad(loss), in_dims=(None, ..., 0, 0)) of a linear model and of a small CNN
  (convolutions with batched weights become grouped ones), each against functorch
  and the per-sample gradients also against a loop of torch.autograd.grad over
  single samples;
- jacrev / jacfwd / hessian / autograd.functional.jacobian of tanh(W x), R^64 ->
  R^512, are one batched sweep: the generated C does not grow with the sizes
  (was one sweep per direction: 1.4 MB of C for R^8 -> R^512), values against
  torch.autograd.functional and functorch;
- what vmap cannot batch is refused at the op's line, naming it:
  random draws without randomness='same', no batched input;
- embedding with a table per sample (batched table and indices), forward and
  per-sample gradients."""
import os
import subprocess

import numpy as np
import pytest
import torch

from ctc_testlib import CTC, compare, load_module, run, run_entry, torch2_python

VMAP = """\
import torch
import torch.nn.functional as F
try:
    from torch.func import vmap, grad, jacrev
except ImportError:
    from functorch import vmap, grad, jacrev


def head(w, b, x):
    return torch.tanh(F.linear(x, w, b)).sum(-1, keepdim=True) * x.mean()


def e_rows(w, b, x):
    return vmap(head, in_dims=(None, None, 0))(w, b, x)


def e_cols(w, b, x):
    return vmap(head, in_dims=(None, None, 1), out_dims=1)(w, b, x)


def pair(x, y):
    return x * y.sum(), torch.softmax(x + y, dim=0)


def e_pair(x, y):
    return vmap(pair, in_dims=(0, None))(x, y)


def e_tuple_arg(a, b, z):
    return vmap(lambda p, w: p[0] * p[1].sum() + w, in_dims=((0, None), 1))((a, b), z)


def e_nested(x):
    return vmap(vmap(lambda v: v.exp() * v.sum() + v.cumsum(0)))(x)


def e_jac_of_vmap(x):
    return jacrev(lambda u: vmap(lambda v: torch.tanh(v * v.sum()))(u))(x)


def e_grad_of_vmap(x, w):
    return grad(lambda ww: vmap(lambda v: torch.sin(v @ ww).sum())(x).pow(2).sum())(w)


def loss(w, x, y):
    return F.cross_entropy(F.linear(x, w).unsqueeze(0), y.unsqueeze(0))


def e_per_sample(w, x, y):
    return vmap(grad(loss), in_dims=(None, 0, 0))(w, x, y)


def cnn_loss(w1, w2, x, y):
    h = F.max_pool2d(torch.relu(F.conv2d(x.unsqueeze(0), w1, padding=1)), 2)
    h = F.avg_pool2d(F.conv2d(h, w2, groups=2), 1)
    return F.cross_entropy(h.flatten(1), y.unsqueeze(0))


def e_cnn(w1, w2, x, y):
    return vmap(grad(cnn_loss, argnums=(0, 1)), in_dims=(None, None, 0, 0))(w1, w2, x, y)


def e_weights(w, x):
    return vmap(lambda wi: F.conv2d(x, wi, padding=1))(w)


def e_tables(w, i):
    return vmap(lambda wi: F.embedding(i, wi).tanh())(w)


def e_jac_table(w, i):
    return jacrev(lambda t: F.embedding(i, t).sin().sum(0))(w)


def e_table_pairs(w, i):
    return vmap(lambda wi, ii: F.embedding(ii, wi) * 2)(w, i)


def emb_loss(w, i, y):
    return (F.embedding(i, w, padding_idx=1).tanh() * y).sum()


def e_emb_tables_grad(w, i, y):
    return vmap(grad(emb_loss))(w, i, y)


def e_emb_per_sample(w, i, y):
    return vmap(grad(emb_loss), in_dims=(None, 0, 0))(w, i, y)


example_inputs = {"e_rows": (torch.randn(5, 3), torch.randn(5), torch.randn(4, 3)),
                  "e_cols": (torch.randn(5, 3), torch.randn(5), torch.randn(3, 4)),
                  "e_pair": (torch.randn(4, 3), torch.randn(3)),
                  "e_tuple_arg": (torch.randn(4, 3), torch.randn(3), torch.randn(3, 4)),
                  "e_jac_of_vmap": (torch.randn(3, 4),), "e_grad_of_vmap": (torch.randn(5, 3), torch.randn(3, 2)),
                  "e_nested": (torch.randn(2, 3, 4),),
                  "e_per_sample": (torch.randn(5, 3), torch.randn(6, 3), torch.randint(0, 5, (6,))),
                  "e_cnn": (torch.randn(4, 1, 3, 3), torch.randn(6, 2, 4, 4), torch.randn(5, 1, 8, 8),
                            torch.randint(0, 6, (5,))),
                  "e_weights": (torch.randn(3, 4, 2, 3, 3), torch.randn(2, 2, 6, 6)),
                  "e_tables": (torch.randn(3, 7, 4), torch.randint(0, 7, (2, 5))),
                  "e_jac_table": (torch.randn(7, 4), torch.randint(0, 7, (5,))),
                  "e_table_pairs": (torch.randn(3, 4, 2), torch.randint(0, 4, (3, 5))),
                  "e_emb_tables_grad": (torch.randn(4, 6, 3), torch.randint(0, 6, (4, 5)), torch.randn(4, 5, 3)),
                  "e_emb_per_sample": (torch.randn(6, 3), torch.randint(0, 6, (4, 5)), torch.randn(4, 5, 3))}
"""

ENTRIES = ["e_rows", "e_cols", "e_pair", "e_tuple_arg", "e_jac_of_vmap", "e_grad_of_vmap", "e_nested", "e_per_sample", "e_cnn", "e_weights", "e_tables", "e_jac_table", "e_table_pairs", "e_emb_tables_grad", "e_emb_per_sample"]


def have_functorch():
    try:
        from torch.func import vmap  # noqa: F401
        return True
    except ImportError:
        try:
            import functorch  # noqa: F401
            return True
        except ImportError:
            return False


@pytest.fixture(scope="module")
def vmap_program(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("vmap")
    path = tmp / "vm.py"
    path.write_text(VMAP)
    exe = tmp / "net"
    run([CTC, "build", path, "-o", exe] + sum([["--entry", e] for e in ENTRIES], []))
    if not have_functorch():
        pytest.skip("this PyTorch has neither torch.func nor functorch: compiled, not compared")
    return tmp, exe, load_module(str(path), "vmap_mod")


def check(tmp, exe, mod, entry, ins, rtol=1e-4, atol=1e-5):
    want = getattr(mod, entry)(*[torch.from_numpy(a) for a in ins])
    want = list(want) if isinstance(want, (tuple, list)) else [want]
    got = run_entry(tmp, exe, entry, ins, len(want))
    for i, (g, w) in enumerate(zip(got, want)):
        compare(f"{entry} output {i}", g, w.detach().numpy(), rtol, atol)
    return got


def test_vmap_in_dims_out_dims_tuples_nested_composed(vmap_program):
    tmp, exe, mod = vmap_program
    rng = np.random.default_rng(1)
    f32 = lambda *s: rng.standard_normal(s).astype(np.float32)  # noqa: E731
    w, b = f32(5, 3), f32(5)
    check(tmp, exe, mod, "e_rows", [w, b, f32(4, 3)])
    check(tmp, exe, mod, "e_cols", [w, b, f32(3, 4)])
    check(tmp, exe, mod, "e_pair", [f32(4, 3), f32(3)])
    check(tmp, exe, mod, "e_tuple_arg", [f32(4, 3), f32(3), f32(3, 4)])
    check(tmp, exe, mod, "e_nested", [f32(2, 3, 4)])
    # differentiating through vmap: reverse and forward sweeps over the batched code
    check(tmp, exe, mod, "e_jac_of_vmap", [f32(3, 4)])
    check(tmp, exe, mod, "e_grad_of_vmap", [f32(5, 3), f32(3, 2)], 1e-3, 1e-5)
    # a batched embedding table read at shared indices; the jacobian of a lookup
    # with respect to the table (embedding_bwd with a batched gradient)
    check(tmp, exe, mod, "e_tables", [f32(3, 7, 4), rng.integers(0, 7, (2, 5))])
    check(tmp, exe, mod, "e_jac_table", [f32(7, 4), rng.integers(0, 7, 5)])


def test_embedding_with_a_table_per_sample(vmap_program):
    """A batched table read at batched indices (a table per sample: one table of
    B*V rows), its gradient per sample with padding_idx (the padding row gets
    none), per-sample gradients of a shared table; an index out of range in one
    sample still stops the entry (it never reads another sample's table)."""
    tmp, exe, mod = vmap_program
    rng = np.random.default_rng(8)
    f32 = lambda *s: rng.standard_normal(s).astype(np.float32)  # noqa: E731
    i = rng.integers(0, 4, (3, 5))
    check(tmp, exe, mod, "e_table_pairs", [f32(3, 4, 2), i])
    i6 = rng.integers(0, 6, (4, 5))
    i6[0, 0] = 1   # the padding row is read
    check(tmp, exe, mod, "e_emb_tables_grad", [f32(4, 6, 3), i6, f32(4, 5, 3)], 1e-3, 1e-5)
    check(tmp, exe, mod, "e_emb_per_sample", [f32(6, 3), i6, f32(4, 5, 3)], 1e-3, 1e-5)
    i[1, 2] = 4   # sample 1 reads row 4 of its 4-row table: sample 2's row 0 if unchecked
    r = subprocess.run([exe, "run", "e_table_pairs", "--input", tmp / "e_table_pairs_in0.npy", "--input",
                        _save(tmp, "bad_index.npy", i)], capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and "out of range" in r.stderr, r.stderr


def _save(tmp, name, a):
    np.save(tmp / name, a)
    return tmp / name


def test_per_sample_gradients(vmap_program):
    """vmap(grad(loss), in_dims=(None, 0, 0)): against functorch, and against a
    loop over single samples with torch.autograd.grad (gradients: rtol 1e-3)."""
    tmp, exe, mod = vmap_program
    rng = np.random.default_rng(2)
    w = rng.standard_normal((5, 3)).astype(np.float32)
    x = rng.standard_normal((6, 3)).astype(np.float32)
    y = rng.integers(0, 5, 6)
    got = check(tmp, exe, mod, "e_per_sample", [w, x, y], 1e-3, 1e-5)[0]
    for i in range(6):
        tw = torch.from_numpy(w).requires_grad_()
        g, = torch.autograd.grad(mod.loss(tw, torch.from_numpy(x[i]), torch.tensor(y[i])), tw)
        compare(f"sample {i}", got[i], g.numpy(), 1e-3, 1e-5)


def test_per_sample_gradients_cnn(vmap_program):
    """Convolutions under vmap: batched images fold into N; a batched weight
    (per-sample weight gradients, vmap over filters) becomes B*G groups."""
    tmp, exe, mod = vmap_program
    rng = np.random.default_rng(3)
    w1 = rng.standard_normal((4, 1, 3, 3)).astype(np.float32)
    w2 = rng.standard_normal((6, 2, 4, 4)).astype(np.float32)
    x = rng.standard_normal((5, 1, 8, 8)).astype(np.float32)
    y = rng.integers(0, 6, 5)
    g1, g2 = check(tmp, exe, mod, "e_cnn", [w1, w2, x, y], 1e-3, 1e-5)
    for i in range(5):
        tw1, tw2 = torch.from_numpy(w1).requires_grad_(), torch.from_numpy(w2).requires_grad_()
        d1, d2 = torch.autograd.grad(mod.cnn_loss(tw1, tw2, torch.from_numpy(x[i]), torch.tensor(y[i])), (tw1, tw2))
        compare(f"sample {i} w1", g1[i], d1.numpy(), 1e-3, 1e-5)
        compare(f"sample {i} w2", g2[i], d2.numpy(), 1e-3, 1e-5)
    check(tmp, exe, mod, "e_weights", [rng.standard_normal((3, 4, 2, 3, 3)).astype(np.float32),
                                       rng.standard_normal((2, 2, 6, 6)).astype(np.float32)])


JAC = """\
import torch
from torch.autograd.functional import jacobian, hessian
try:
    from torch.func import jacrev, jacfwd, hessian as func_hessian
except ImportError:
    from functorch import jacrev, jacfwd, hessian as func_hessian


def g(W, x):
    return torch.tanh(W @ x)


def s(W, x):
    return torch.tanh(W @ x).pow(2).sum()


def e_jacrev(W, x):
    return jacrev(g, argnums=1)(W, x)


def e_jacfwd(W, x):
    return jacfwd(g, argnums=1)(W, x)


def e_hessian(W, x):
    return func_hessian(s, argnums=1)(W, x)


def e_jacobian(W, x):
    return jacobian(lambda v: g(W, v), x)


def e_af_hessian(W, x):
    return hessian(lambda v: s(W, v), x)


example_inputs = {{e: (torch.randn({m}, {n}), torch.randn({n})) for e in
                  ("e_jacrev", "e_jacfwd", "e_hessian", "e_jacobian", "e_af_hessian")}}
"""
JAC_ENTRIES = ["e_jacrev", "e_jacfwd", "e_hessian", "e_jacobian", "e_af_hessian"]


def test_jacobians_are_one_batched_sweep(tmp_path):
    """R^64 -> R^512 (and twice that): the C of each jacobian entry has the same
    size at both sizes (the sweep is batched over the basis, not unrolled)."""
    lines = {}
    for n, m in ((64, 512), (128, 1024)):
        path = tmp_path / f"jac{n}.py"
        path.write_text(JAC.format(n=n, m=m))
        for e in JAC_ENTRIES:
            out = tmp_path / f"jac{n}_{e}.c"
            r = subprocess.run([CTC, "compile", str(path), "-o", str(out), "--entry", e], capture_output=True,
                               text=True, timeout=60)
            assert r.returncode == 0, r.stderr
            lines[n, e] = len(out.read_text().splitlines())
    for e in JAC_ENTRIES:
        assert lines[64, e] < 2000, (e, lines[64, e])
        assert lines[128, e] <= lines[64, e] * 1.1, (e, lines[64, e], lines[128, e])
    path = tmp_path / "jac64.py"
    exe = tmp_path / "net"
    run([CTC, "build", path, "-o", exe] + sum([["--entry", e] for e in JAC_ENTRIES], []))
    rng = np.random.default_rng(4)
    W = (rng.standard_normal((512, 64)) / 8).astype(np.float32)
    x = rng.standard_normal(64).astype(np.float32)
    tW, tx = torch.from_numpy(W), torch.from_numpy(x)
    from torch.autograd import functional as AF
    J = AF.jacobian(lambda v: torch.tanh(tW @ v), tx)
    H = AF.hessian(lambda v: torch.tanh(tW @ v).pow(2).sum(), tx)
    for e, want in (("e_jacrev", J), ("e_jacfwd", J), ("e_jacobian", J), ("e_hessian", H), ("e_af_hessian", H)):
        got = run_entry(tmp_path, exe, e, [W, x], 1)[0]
        compare(e, got, want.numpy(), 1e-4, 1e-5)
    if have_functorch():
        mod = load_module(str(path), "jac_mod")
        for e in ("e_jacrev", "e_jacfwd", "e_hessian"):
            compare(e + " vs functorch", run_entry(tmp_path, exe, e, [W, x], 1)[0],
                    getattr(mod, e)(tW, tx).numpy(), 1e-4, 1e-5)


REFUSED = """\
import torch
import torch.nn.functional as F
try:
    from torch.func import vmap
except ImportError:
    from functorch import vmap


def e_table(w, i):
    return vmap(lambda wi, ii: F.embedding(ii, wi))(w, i)


def e_random(x):
    return vmap(lambda v: F.dropout(v, 0.5, training=True))(x)


def e_unbatched(x):
    return vmap(torch.sin, in_dims=None)(x)


example_inputs = {"e_table": (torch.randn(3, 4, 2), torch.randint(0, 4, (3, 5))), "e_random": (torch.randn(3, 4),),
                  "e_unbatched": (torch.randn(3),)}
"""


@pytest.mark.parametrize("entry,where,msg", [
    ("e_random", "m.py:14:27", "needs randomness='same'"),
    ("e_unbatched", "m.py:18:12", "no input is batched"),
])
def test_vmap_refuses_what_it_cannot_batch(tmp_path, entry, where, msg):
    path = tmp_path / "m.py"
    path.write_text(REFUSED)
    r = subprocess.run([CTC, "compile", str(path), "-o", str(tmp_path / "m.c"), "--entry", entry], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode != 0
    assert where in r.stderr and msg in r.stderr, r.stderr


DP_SGD = """\
import torch
import torch.nn.functional as F
try:
    from torch.func import vmap, grad
except ImportError:
    from functorch import vmap, grad

C = 1.0
SIGMA = 0.5
LR = 0.1


def loss(w1, b1, w2, x, y):
    h = torch.relu(F.linear(x, w1, b1))
    return F.cross_entropy(F.linear(h, w2).unsqueeze(0), y.unsqueeze(0))


def dp_step(w1, b1, w2, x, y, n1, nb, n2):
    g1, gb, g2 = vmap(grad(loss, argnums=(0, 1, 2)), in_dims=(None, None, None, 0, 0))(w1, b1, w2, x, y)
    norms = torch.sqrt(g1.flatten(1).pow(2).sum(1) + gb.pow(2).sum(1) + g2.flatten(1).pow(2).sum(1))
    scale = torch.clamp(C / (norms + 1e-6), max=1.0)
    B = x.shape[0]
    s1 = (g1 * scale.view(-1, 1, 1)).sum(0) + SIGMA * C * n1
    sb = (gb * scale.view(-1, 1)).sum(0) + SIGMA * C * nb
    s2 = (g2 * scale.view(-1, 1, 1)).sum(0) + SIGMA * C * n2
    return w1 - LR * s1 / B, b1 - LR * sb / B, w2 - LR * s2 / B


example_inputs = {"dp_step": (torch.randn(16, 8), torch.randn(16), torch.randn(4, 16), torch.randn(32, 8),
                              torch.randint(0, 4, (32,)), torch.randn(16, 8), torch.randn(16), torch.randn(4, 16))}
"""


def test_dp_sgd_step(tmp_path):
    """Issue 31's showcase: DP-SGD as Opacus users write it with torch.func
    (per-sample gradients, per-sample clipping to norm C, summed, Gaussian noise
    given as inputs from a seeded generator, an SGD step), one compiled function,
    5 steps against the same function run by PyTorch."""
    path = tmp_path / "dp.py"
    path.write_text(DP_SGD)
    exe = tmp_path / "net"
    run([CTC, "build", path, "-o", exe, "--entry", "dp_step"])
    if not have_functorch():
        pytest.skip("this PyTorch has neither torch.func nor functorch: compiled, not compared")
    mod = load_module(str(path), "dp_mod")
    rng = np.random.default_rng(5)
    shapes = [(16, 8), (16,), (4, 16)]
    p = [(rng.standard_normal(s) * 0.5).astype(np.float32) for s in shapes]
    tp = [torch.from_numpy(a.copy()) for a in p]
    gen = torch.Generator().manual_seed(0)
    for step in range(5):
        x = rng.standard_normal((32, 8)).astype(np.float32)
        y = rng.integers(0, 4, 32)
        noise = [torch.randn(s, generator=gen) for s in shapes]
        p = run_entry(tmp_path, exe, "dp_step", p + [x, y] + [n.numpy() for n in noise], 3)
        tp = list(mod.dp_step(*tp, torch.from_numpy(x), torch.from_numpy(y), *noise))
        for name, a, b in zip(("w1", "b1", "w2"), p, tp):
            compare(f"step {step} {name}", a, b.numpy(), 1e-4, 1e-5)


def test_every_primitive_has_a_batching_row():
    """ir/batch.def has one BATCH row per ops.def row (B_NONE says "refused"), in
    ops.def's order, so a new primitive is a decision about vmap, not a silent gap."""
    import re
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    ops = re.findall(r"^(?:OP|EW)\((\w+),", open(os.path.join(root, "ir", "ops.def")).read(), re.M)
    rows = re.findall(r"^BATCH\((\w+),", open(os.path.join(root, "ir", "batch.def")).read(), re.M)
    assert rows == ops, f"missing: {sorted(set(ops) - set(rows))}, unknown: {sorted(set(rows) - set(ops))}"


FALLBACK = """\
import torch
from torch.autograd.functional import jacobian


def e_deep(v):
    return jacobian(lambda u: u.reshape(1, 1, 1, 1, 1, 1, 1, 3).exp().reshape(3) * u, v)


example_inputs = {"e_deep": (torch.randn(3),)}
"""


def test_jacobian_unrolls_where_the_batch_axis_does_not_fit(tmp_path):
    """An 8-D intermediate leaves no room for the batch axis (IR_MAX_DIMS): the
    jacobian falls back to one sweep per direction, same values."""
    path = tmp_path / "deep.py"
    path.write_text(FALLBACK)
    exe = tmp_path / "net"
    run([CTC, "build", path, "-o", exe, "--entry", "e_deep"])
    mod = load_module(str(path), "deep_mod")
    x = np.array([0.5, -1.0, 2.0], np.float32)
    got = run_entry(tmp_path, exe, "e_deep", [x], 1)[0]
    compare("e_deep", got, mod.e_deep(torch.from_numpy(x)).numpy(), 1e-5, 1e-6)


TORCH2 = torch2_python("numpy")   # PyTorch 2.x of bench/.venv (optional; its scripts read .npy files)


@pytest.mark.skipif(TORCH2 is None, reason="no PyTorch 2.x with numpy in bench/.venv (optional)")
def test_per_sample_gradients_against_torch_func_2x(vmap_program):
    """Optional: the same per-sample gradients against torch.func of PyTorch 2.x."""
    tmp, exe, mod = vmap_program
    rng = np.random.default_rng(6)
    ins = {"e_per_sample": [rng.standard_normal((5, 3)).astype(np.float32), rng.standard_normal((6, 3)).astype(np.float32),
                            rng.integers(0, 5, 6)],
           "e_cnn": [rng.standard_normal((4, 1, 3, 3)).astype(np.float32),
                     rng.standard_normal((6, 2, 4, 4)).astype(np.float32),
                     rng.standard_normal((5, 1, 8, 8)).astype(np.float32), rng.integers(0, 6, 5)]}
    for e, arrays in ins.items():
        for i, a in enumerate(arrays):
            np.save(tmp / f"t2_{e}_{i}.npy", a)
        script = (f"import importlib.util, numpy as np, torch\n"
                  f"s = importlib.util.spec_from_file_location('m', {str(tmp / 'vm.py')!r}); m = importlib.util.module_from_spec(s)\n"
                  f"s.loader.exec_module(m)\n"
                  f"a = [torch.from_numpy(np.load({str(tmp)!r} + '/t2_{e}_%d.npy' % i)) for i in range({len(arrays)})]\n"
                  f"r = m.{e}(*a)\nr = r if isinstance(r, tuple) else (r,)\n"
                  f"for k, t in enumerate(r): np.save({str(tmp)!r} + '/t2_{e}_want%d.npy' % k, t.detach().numpy())\n")
        run([TORCH2, "-c", script])
        got = run_entry(tmp, exe, e, arrays, 2 if e == "e_cnn" else 1)
        for k, g in enumerate(got):
            compare(f"{e} output {k} vs torch 2.x", g, np.load(tmp / f"t2_{e}_want{k}.npy"), 1e-3, 1e-5)


BN_TRAIN = """\
import torch
import torch.nn as nn
try:
    from torch.func import vmap
except ImportError:
    from functorch import vmap


class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.bn = nn.BatchNorm1d(3)

    def forward(self, x):
        return vmap(self.bn)(x)


model = M()
opt = torch.optim.SGD(model.parameters(), lr=0.1)


def train_step(x, y):
    model.train()
    opt.zero_grad()
    loss = ((model(x) - y) ** 2).mean()
    loss.backward()
    opt.step()
    return loss


example_inputs = {"forward": (torch.randn(4, 2, 3),), "train_step": (torch.randn(4, 2, 3), torch.randn(4, 2, 3))}
"""


def test_vmap_refuses_state_updates_from_batched_values(tmp_path):
    """Batch norm's running statistics in training mode under vmap would keep one
    sample's statistics (PyTorch raises too): refused, naming the vmap call."""
    path = tmp_path / "bn.py"
    path.write_text(BN_TRAIN)
    r = subprocess.run([CTC, "compile", str(path), "-o", str(tmp_path / "bn.c")], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode != 0
    assert "bn.py:15:16: error: vmap cannot batch" in r.stderr and "state update" in r.stderr, r.stderr


def test_batched_code_passes_gradcheck(tmp_path):
    """The batched code is ordinary IR: `--dtype f64` builds of the vmap seed
    (per-sample gradients, batched jacobians and hessian, vmap over convolution
    weights and embedding tables, shared or per-sample indices, inside grad) pass
    `./net gradcheck` (central differences against both AD sweeps of each entry)."""
    exe = tmp_path / "net"
    run([CTC, "build", "--dtype", "f64", os.path.join(os.path.dirname(os.path.abspath(__file__)), "fuzz_seeds",
                                                         "vmap.py"), "-o", exe])
    r = run([exe, "gradcheck"])
    lines = [x for x in (r.stdout + r.stderr).splitlines() if x.startswith("gradcheck ")]
    assert len(lines) == 6 and all(": ok:" in x for x in lines), r.stdout + r.stderr


MULTI = """\
import torch
from torch.autograd.functional import jacobian, hessian


def f2(x, y):
    return torch.sin(x).unsqueeze(1) * y.exp() + (x * x).sum()


def s2(x, y):
    return (torch.sin(x).unsqueeze(1) * y.exp()).pow(2).sum()


def e_jac(x, y):
    return jacobian(f2, (x, y))


def e_jac_fwd(x, y):
    return jacobian(f2, (x, y), strategy="forward-mode", vectorize=True)


def e_hess(x, y):
    h = hessian(s2, (x, y))
    return h[0][0], h[0][1], h[1][0], h[1][1]


example_inputs = {e: (torch.randn(3), torch.randn(3, 2)) for e in ("e_jac", "e_jac_fwd", "e_hess")}
"""


def test_jacobians_and_hessians_of_several_inputs(tmp_path):
    """Tuples of inputs: one reverse sweep for all of them, one batched forward
    sweep per input; hessian blocks d2/dxi dxk, against torch.autograd.functional."""
    path = tmp_path / "multi.py"
    path.write_text(MULTI)
    exe = tmp_path / "net"
    run([CTC, "build", path, "-o", exe, "--entry", "e_jac", "--entry", "e_jac_fwd", "--entry", "e_hess"])
    mod = load_module(str(path), "multi_mod")
    rng = np.random.default_rng(7)
    x, y = rng.standard_normal(3).astype(np.float32), rng.standard_normal((3, 2)).astype(np.float32)
    for e in ("e_jac", "e_jac_fwd", "e_hess"):
        want = getattr(mod, e)(torch.from_numpy(x), torch.from_numpy(y))
        got = run_entry(tmp_path, exe, e, [x, y], len(want))
        for k, (g, w) in enumerate(zip(got, want)):
            compare(f"{e} output {k}", g, w.numpy(), 1e-4, 1e-5)


ESCAPE = """\
import torch
try:
    from torch.func import vmap
except ImportError:
    from functorch import vmap

acc = []


def e_escape(x):
    def f(v):
        acc.append(v * 2)   # one sample's value escapes the vmapped function
        return v.sin()
    y = vmap(f)(x)
    return y + acc[0].sum()


example_inputs = {"e_escape": (torch.randn(3, 4),)}
"""


def test_a_value_escaping_vmap_does_not_compile(tmp_path):
    """PyTorch refuses such a leak; ctc must not compile it into one sample's values:
    a located error at the use, or at the entry when it is returned as it is."""
    path = tmp_path / "esc.py"
    path.write_text(ESCAPE)
    r = subprocess.run([CTC, "compile", str(path), "-o", str(tmp_path / "esc.c"), "--entry", "e_escape"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and "esc.py:15:16: error: this uses a value computed inside a function given to vmap" \
        in r.stderr, r.stderr
    path.write_text(ESCAPE.replace("return y + acc[0].sum()", "return y, acc[0]"))
    r = subprocess.run([CTC, "compile", str(path), "-o", str(tmp_path / "esc.c"), "--entry", "e_escape"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and "esc.py:10:1: error: this uses a value computed inside" in r.stderr, r.stderr
