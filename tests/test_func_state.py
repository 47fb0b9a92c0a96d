"""torch.func over a module's state (torchlib/func_state.c, functional.c's pytrees):

- functional_call(model, (params, buffers), args) inside vmap(grad(...)): the
  per-sample-gradients recipe of the torch.func docs, a dict of gradients out,
  against a loop of torch.autograd.grad over single samples (PyTorch 1.13) and
  against torch.func of PyTorch 2.x (bench/.venv, optional);
- torch.nn.utils.stateless.functional_call (1.13's spelling) with kwargs and a
  dict that leaves names out (the module's own tensors are used for them);
- has_aux=True for grad, grad_and_value, jacrev and jacfwd, also under vmap;
- stack_module_state + a deepcopied template + vmap: the model-ensembling
  tutorial, minibatch shared (in_dims=(0, 0, None)) and one per model (0, 0, 0),
  against a loop over the models; its C does not grow with the number of models;
- what stays refused is refused at the call's line, naming what is wrong."""
import os
import re
import subprocess

import numpy as np
import pytest
import torch

from ctc_testlib import CTC, compare, load_module, run, st_write, torch2_python

TORCH2 = torch2_python("numpy")   # PyTorch 2.x of bench/.venv (optional; its scripts read .npy files)

NET = """\
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.utils import stateless
try:
    from torch.func import functional_call, vmap, grad, grad_and_value, jacrev, jacfwd
except ImportError:   # PyTorch 1.13
    from torch.nn.utils.stateless import functional_call
    from functorch import vmap, grad, grad_and_value, jacrev, jacfwd


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(6, 8)
        self.bn = nn.BatchNorm1d(8)
        self.fc2 = nn.Linear(8, 3)

    def forward(self, x, scale=1.0):
        return self.fc2(torch.relu(self.bn(self.fc1(x)))) * scale


model = Net()
model.eval()
params = {k: v.detach() for k, v in model.named_parameters()}
buffers = {k: v.detach() for k, v in model.named_buffers()}


def compute_loss(params, buffers, sample, target):
    out = functional_call(model, (params, buffers), (sample.unsqueeze(0),))
    return F.cross_entropy(out, target.unsqueeze(0))


def per_sample(data, targets):
    return vmap(grad(compute_loss), in_dims=(None, None, 0, 0))(params, buffers, data, targets)


def e_kwargs(x, w):
    return stateless.functional_call(model, {"fc2.weight": w}, (x,), {"scale": 2.0})


def loss_aux(p, x, y):
    out = functional_call(model, p, (x,))
    return F.cross_entropy(out, y), (out, out.sum())


def e_aux(x, y):
    g, (out, s) = grad(loss_aux, has_aux=True)(params, x, y)
    (g2, (v, aux)) = grad_and_value(loss_aux, has_aux=True)(params, x, y)
    return g["fc1.weight"], g["bn.bias"], out, s, g2["fc2.bias"], v, aux[1]


def sample_loss(p, x, y):
    out = functional_call(model, p, (x.unsqueeze(0),))
    return F.cross_entropy(out, y.unsqueeze(0)), out.squeeze(0)


def e_vmap_aux(x, y):
    g, out = vmap(grad(sample_loss, has_aux=True), in_dims=(None, 0, 0))(params, x, y)
    gx = vmap(grad(lambda xx, p, yy: sample_loss(p, xx, yy)[0]), in_dims=(0, None, 0))(
        x, {"fc2.bias": params["fc2.bias"]}, y)
    return g["fc2.weight"], g["bn.weight"], out, gx


def e_jac_aux(x):
    jr, ar = jacrev(lambda u: (torch.tanh(u) * u.sum(), u.exp()), has_aux=True)(x)
    jf, af = jacfwd(lambda u: (torch.sin(u).cumsum(0), {"s": u * 3}), has_aux=True)(x)
    return jr, ar, jf, af["s"]


example_inputs = {"forward": (torch.randn(2, 6),), "per_sample": (torch.randn(5, 6), torch.randint(0, 3, (5,))),
                  "e_kwargs": (torch.randn(4, 6), torch.randn(3, 8)),
                  "e_aux": (torch.randn(4, 6), torch.randint(0, 3, (4,))), "e_jac_aux": (torch.randn(5),),
                  "e_vmap_aux": (torch.randn(4, 6), torch.randint(0, 3, (4,)))}
"""
NET_ENTRIES = ["per_sample", "e_kwargs", "e_aux", "e_jac_aux", "e_vmap_aux"]


def run_with_weights(tmp, exe, entry, weights, arrays, nout):
    args = [exe, "run", entry, "--weights", weights]
    for i, a in enumerate(arrays):
        np.save(os.path.join(tmp, f"{entry}_in{i}.npy"), a)
        args += ["--input", os.path.join(tmp, f"{entry}_in{i}.npy")]
    outs = [os.path.join(tmp, f"{entry}_out{i}.npy") for i in range(nout)]
    for o in outs:
        args += ["--output", o]
    run(args)
    return [np.load(o) for o in outs]


def torch2(tmp, script):
    """Run script under PyTorch 2.x (its prints are the caller's)."""
    path = os.path.join(tmp, "t2.py")
    with open(path, "w") as f:
        f.write(script)
    return run([TORCH2, path]).stdout


@pytest.fixture(scope="module")
def net(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("fc")
    path = tmp / "net.py"
    path.write_text(NET)
    exe = tmp / "net"
    run([CTC, "build", path, "-o", exe] + sum([["--entry", e] for e in NET_ENTRIES], []))
    mod = load_module(str(path), "fc_net")
    torch.manual_seed(0)
    mod.model.load_state_dict({k: torch.randn(v.shape) * 0.5 if v.is_floating_point() else v
                               for k, v in mod.model.state_dict().items()})
    mod.model.bn.running_var.abs_().add_(0.5)
    sd = {k: v.numpy() for k, v in mod.model.state_dict().items()}
    weights = str(tmp / "w.safetensors")
    st_write(weights, sd)
    np.savez(tmp / "w.npz", **sd)   # for PyTorch 2.x (bench/.venv has no safetensors)
    return tmp, exe, mod, weights


def test_per_sample_gradients_with_functional_call(net):
    """The torch.func recipe: a dict of per-sample gradients, one per parameter
    (BatchNorm's buffers passed as the second dict), against autograd per sample."""
    tmp, exe, mod, weights = net
    rng = np.random.default_rng(1)
    x = rng.standard_normal((5, 6)).astype(np.float32)
    y = rng.integers(0, 3, 5)
    names = [k for k, _ in mod.model.named_parameters()]
    got = run_with_weights(tmp, exe, "per_sample", weights, [x, y], len(names))
    for i in range(5):
        out = mod.model(torch.from_numpy(x[i:i + 1]))
        gs = torch.autograd.grad(torch.nn.functional.cross_entropy(out, torch.tensor(y[i:i + 1])),
                                 list(mod.model.parameters()))
        for k, g, want in zip(names, got, gs):
            compare(f"sample {i} {k}", g[i], want.numpy(), 1e-3, 1e-5)


def test_stateless_kwargs_missing_keys_and_aux(net):
    """stateless.functional_call with kwargs and only fc2.weight given (the other
    tensors are the module's own); has_aux for grad, grad_and_value, jacrev,
    jacfwd, against functorch / PyTorch 1.13."""
    tmp, exe, mod, weights = net
    rng = np.random.default_rng(2)
    x, w = rng.standard_normal((4, 6)).astype(np.float32), rng.standard_normal((3, 8)).astype(np.float32)
    got = run_with_weights(tmp, exe, "e_kwargs", weights, [x, w], 1)[0]
    compare("e_kwargs", got, mod.e_kwargs(torch.from_numpy(x), torch.from_numpy(w)).detach().numpy(), 1e-4, 1e-5)
    y = rng.integers(0, 3, 4)
    mod.params = {k: v.detach() for k, v in mod.model.named_parameters()}   # the loaded weights
    want = mod.e_aux(torch.from_numpy(x), torch.from_numpy(y))
    got = run_with_weights(tmp, exe, "e_aux", weights, [x, y], len(want))
    for k, (g, wt) in enumerate(zip(got, want)):
        compare(f"e_aux output {k}", g, wt.detach().numpy(), 1e-3 if k in (0, 1, 4) else 1e-4, 1e-5)
    want = mod.e_vmap_aux(torch.from_numpy(x), torch.from_numpy(y))   # has_aux under vmap
    got = run_with_weights(tmp, exe, "e_vmap_aux", weights, [x, y], len(want))
    for k, (g, wt) in enumerate(zip(got, want)):
        compare(f"e_vmap_aux output {k}", g, wt.detach().numpy(), 1e-3, 1e-5)
    v = rng.standard_normal(5).astype(np.float32)
    want = mod.e_jac_aux(torch.from_numpy(v))
    got = run_with_weights(tmp, exe, "e_jac_aux", weights, [v], 4)
    for k, (g, wt) in enumerate(zip(got, want)):
        compare(f"e_jac_aux output {k}", g, wt.numpy(), 1e-4, 1e-5)


@pytest.mark.skipif(TORCH2 is None, reason="no PyTorch 2.x with numpy in bench/.venv (optional)")
def test_per_sample_gradients_against_torch_func_2x(net):
    tmp, exe, mod, weights = net
    rng = np.random.default_rng(3)
    x = rng.standard_normal((5, 6)).astype(np.float32)
    y = rng.integers(0, 3, 5)
    np.save(tmp / "x.npy", x)
    np.save(tmp / "y.npy", y)
    torch2(str(tmp), f"""
import importlib.util, numpy as np, torch
s = importlib.util.spec_from_file_location("m", {str(tmp / 'net.py')!r}); m = importlib.util.module_from_spec(s)
s.loader.exec_module(m)
w = np.load({str(tmp / 'w.npz')!r})
m.model.load_state_dict({{k: torch.from_numpy(w[k]) for k in w.files}})
m.params = {{k: v.detach() for k, v in m.model.named_parameters()}}
m.buffers = {{k: v.detach() for k, v in m.model.named_buffers()}}
r = m.per_sample(torch.from_numpy(np.load({str(tmp / 'x.npy')!r})), torch.from_numpy(np.load({str(tmp / 'y.npy')!r})))
for i, (k, v) in enumerate(r.items()):
    np.save({str(tmp)!r} + "/t2_%d.npy" % i, v.numpy())
""")
    got = run_with_weights(tmp, exe, "per_sample", weights, [x, y], 6)
    for i, g in enumerate(got):
        compare(f"per_sample output {i} vs torch 2.x", g, np.load(tmp / f"t2_{i}.npy"), 1e-3, 1e-5)


ENSEMBLE = """\
import copy
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.func import functional_call, stack_module_state, vmap


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(12, 16)
        self.fc2 = nn.Linear(16, 4)
        self.register_buffer("shift", torch.arange(4.0) * 0.1)

    def forward(self, x):
        return self.fc2(F.relu(self.fc1(x.flatten(1)))) + self.shift


models = [MLP() for _ in range({n})]
params, buffers = stack_module_state(models)
base = copy.deepcopy(models[0]).to('meta')


def fmodel(params, buffers, x):
    return functional_call(base, (params, buffers), (x,))


def same_minibatch(x):
    return vmap(fmodel, in_dims=(0, 0, None))(params, buffers, x)


def own_minibatches(xs):
    return vmap(fmodel)(params, buffers, xs)


example_inputs = {{"forward": (torch.randn(3, 3, 4),), "same_minibatch": (torch.randn(7, 3, 4),),
                  "own_minibatches": (torch.randn({n}, 7, 3, 4),)}}
"""


def ensemble_models(n, seed):
    """n PyTorch 1.13 MLPs like ENSEMBLE's, with their weights as ctc loads them
    ("ensemble.<name>": the stacks; the template's own names: model 0's)."""
    torch.manual_seed(seed)
    ms = []
    for _ in range(n):
        m = torch.nn.Sequential(torch.nn.Flatten(1), torch.nn.Linear(12, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
        ms.append(m)
    shift = torch.arange(4.0) * 0.1
    names = {"fc1.weight": "1.weight", "fc1.bias": "1.bias", "fc2.weight": "3.weight", "fc2.bias": "3.bias"}
    w = {}
    for k, v in names.items():
        w["ensemble." + k] = torch.stack([m.state_dict()[v] for m in ms]).numpy()
        w[k] = ms[0].state_dict()[v].numpy()
    w["ensemble.shift"] = torch.stack([shift] * n).numpy()
    w["shift"] = shift.numpy()
    return ms, shift, w


def test_model_ensembling(tmp_path):
    """The ensembling tutorial: 5 models stacked, one minibatch for all and one per
    model, against a loop over the models (PyTorch 1.13)."""
    path = tmp_path / "ens.py"
    path.write_text(ENSEMBLE.format(n=5))
    exe = tmp_path / "net"
    run([CTC, "build", path, "-o", exe, "--entry", "same_minibatch", "--entry", "own_minibatches"])
    ms, shift, w = ensemble_models(5, 0)
    weights = str(tmp_path / "w.safetensors")
    st_write(weights, w)
    np.savez(tmp_path / "w.npz", **w)
    rng = np.random.default_rng(4)
    x = rng.standard_normal((7, 3, 4)).astype(np.float32)
    xs = rng.standard_normal((5, 7, 3, 4)).astype(np.float32)
    got = run_with_weights(tmp_path, exe, "same_minibatch", weights, [x], 1)[0]
    got2 = run_with_weights(tmp_path, exe, "own_minibatches", weights, [xs], 1)[0]
    with torch.no_grad():
        for i, m in enumerate(ms):
            compare(f"model {i}, shared minibatch", got[i], (m(torch.from_numpy(x)) + shift).numpy(), 1e-4, 1e-5)
            compare(f"model {i}, own minibatch", got2[i], (m(torch.from_numpy(xs[i])) + shift).numpy(), 1e-4, 1e-5)
    if TORCH2:   # the same file under torch.func of PyTorch 2.x
        np.save(tmp_path / "x.npy", x)
        np.save(tmp_path / "xs.npy", xs)
        torch2(str(tmp_path), f"""
import importlib.util, numpy as np, torch
s = importlib.util.spec_from_file_location("m", {str(path)!r}); m = importlib.util.module_from_spec(s)
s.loader.exec_module(m)
w = np.load({str(tmp_path / 'w.npz')!r})
for k in m.params: m.params[k] = torch.from_numpy(w["ensemble." + k])
for k in m.buffers: m.buffers[k] = torch.from_numpy(w["ensemble." + k])
x, xs = (torch.from_numpy(np.load({str(tmp_path)!r} + f)) for f in ("/x.npy", "/xs.npy"))
np.save({str(tmp_path / 't2a.npy')!r}, m.same_minibatch(x).detach().numpy())
np.save({str(tmp_path / 't2b.npy')!r}, m.own_minibatches(xs).detach().numpy())
""")
        compare("same_minibatch vs torch 2.x", got, np.load(tmp_path / "t2a.npy"), 1e-4, 1e-5)
        compare("own_minibatches vs torch 2.x", got2, np.load(tmp_path / "t2b.npy"), 1e-4, 1e-5)


def test_ensemble_code_does_not_grow_with_models(tmp_path):
    """5 or 100 models: the same batched code (the stacks are one tensor each)."""
    lines = {}
    for n in (5, 100):
        path = tmp_path / f"ens{n}.py"
        path.write_text(ENSEMBLE.format(n=n))
        out = tmp_path / f"ens{n}.c"
        run([CTC, "compile", path, "-o", out, "--entry", "same_minibatch", "--entry", "own_minibatches"])
        # the code, without the constants' data (a stacked constant has a row per model)
        code = re.sub(r"static const \w+ ctc_data_\d+\[\d+\] = \{.*?\};", "", out.read_text(), flags=re.S)
        lines[n] = len(code.splitlines())
    assert lines[100] <= lines[5] * 1.05, lines


REFUSED = """\
import torch
import torch.nn as nn
from torch.func import functional_call, stack_module_state, grad

model = nn.Sequential(nn.Linear(3, 2), nn.Tanh(), nn.Linear(2, 1))
p = {k: v.detach() for k, v in model.named_parameters()}
pair = [nn.Linear(3, 2), nn.Linear(3, 3)]


def e_typo(x):
    return functional_call(model, {"0.wieght": p["0.weight"]}, (x,))


def e_strict(x):
    return functional_call(model, {"0.weight": p["0.weight"]}, (x,), strict=True)


def e_twice(x):
    return functional_call(model, ({"0.bias": p["0.bias"]}, {"0.bias": p["0.bias"]}), (x,))


def e_aux(x):
    return grad(lambda u: u.sum(), has_aux=True)(x)


def e_mixed(x):
    ps, bs = stack_module_state(pair)
    return ps["weight"]


example_inputs = {e: (torch.randn(4, 3),) for e in ("forward", "e_typo", "e_strict", "e_twice", "e_aux", "e_mixed")}
"""


@pytest.mark.parametrize("entry,where,msg", [
    ("e_typo", "m.py:11:12", "functional_call: the module has no parameter or buffer named '0.wieght'"),
    ("e_strict", "m.py:15:12", "functional_call(strict=True): no tensor given for '0.bias'"),
    ("e_twice", "m.py:19:12", "functional_call: '0.bias' appears in several dicts"),
    ("e_aux", "m.py:23:12", "has_aux=True: the function must return a pair (output, aux), got 'Tensor'"),
    ("e_mixed", "m.py:27:14", "stack_module_state: 'weight' of model 1 has shape [3, 3], model 0's [2, 3]"),
])
def test_refused_at_the_call(tmp_path, entry, where, msg):
    path = tmp_path / "m.py"
    path.write_text(REFUSED)
    r = subprocess.run([CTC, "compile", str(path), "-o", str(tmp_path / "m.c"), "--entry", entry],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode != 0
    assert where in r.stderr and msg in r.stderr, r.stderr


TIED = """\
import torch
import torch.nn as nn
from torch.func import functional_call


class LM(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(10, 4)
        self.head = nn.Linear(4, 10, bias=False)
        self.head.weight = self.emb.weight

    def forward(self, i):
        return self.head(self.emb(i))


model = LM()


def e_tied(i, w):
    return functional_call(model, {"emb.weight": w}, (i,))


def e_untied(i, w):
    return functional_call(model, {"emb.weight": w}, (i,), tie_weights=False)


example_inputs = {"forward": (torch.randint(0, 10, (3,)),), "e_tied": (torch.randint(0, 10, (3,)), torch.randn(10, 4)),
                  "e_untied": (torch.randint(0, 10, (3,)), torch.randn(10, 4))}
"""


def test_tied_weights(tmp_path):
    """A head tied to the embedding: giving emb.weight replaces both (tie_weights,
    PyTorch 2.x's default), or the embedding alone with tie_weights=False."""
    path = tmp_path / "tie.py"
    path.write_text(TIED)
    exe = tmp_path / "net"
    run([CTC, "build", path, "-o", exe, "--entry", "e_tied", "--entry", "e_untied"])
    rng = np.random.default_rng(5)
    own = rng.standard_normal((10, 4)).astype(np.float32)
    weights = str(tmp_path / "w.safetensors")
    st_write(weights, {"emb.weight": own, "head.weight": own})
    i, w = rng.integers(0, 10, 3), rng.standard_normal((10, 4)).astype(np.float32)
    got = run_with_weights(tmp_path, exe, "e_tied", weights, [i, w], 1)[0]
    compare("tied", got, w[i] @ w.T, 1e-4, 1e-5)
    got = run_with_weights(tmp_path, exe, "e_untied", weights, [i, w], 1)[0]
    compare("untied", got, w[i] @ own.T, 1e-4, 1e-5)
