"""Files written the way PyTorch users write them (tests/user_files/, in the
styles of pytorch/examples and nanoGPT, in our own words), compiled unchanged:
argparse at module level or in main(), unmodelled imports (torchvision, os,
random, inspect) as opaque values, `if __name__ == '__main__'` never run,
several nn.Module instances chosen with --model, a --model expression, and
training drivers that are not entries. Forward is compared with PyTorch
running the same file (rtol 1e-4; torchvision is stubbed on the PyTorch side
only, where the file's data loaders are never iterated, as under ctc)."""
import os
import subprocess
import sys
import types
from unittest import mock

import numpy as np
import pytest
import torch

from ctc_testlib import CTC, ROOT, compare, load_module, run_forward

FILES = os.path.join(ROOT, "tests", "user_files")
RTOL, ATOL = 1e-4, 1e-5


def load_with_stubs(path, argv):
    """Import the file under PyTorch with sys.argv = argv and torchvision stubbed
    (not installed here; its loaders iterate nothing, like ctc's opaque values)."""
    stubs = {}
    for name in ("torchvision", "torchvision.datasets", "torchvision.transforms", "torchvision.utils"):
        stubs[name] = mock.MagicMock(name=name)
    with mock.patch.dict(sys.modules, stubs), mock.patch.object(sys, "argv", argv):
        return load_module(path)


def check_forward(tmp_path, path, model, inputs, opts):
    model.eval()
    with torch.no_grad():
        want = model(*[torch.from_numpy(x.copy()) for x in inputs])
    got = run_forward(str(tmp_path), path, model, inputs, opts)
    d = compare(os.path.basename(path), got[0], want.numpy(), RTOL, ATOL)
    print(f"{os.path.basename(path)}: max abs diff vs torch {d:.3g}")


def ctc_check(path, *opts):
    return subprocess.run([CTC, "check", path, *opts], capture_output=True, text=True, timeout=60)


def randn(*shape, seed=1):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def test_mnist_main_unchanged(tmp_path):
    """argparse inside main(), torchvision imports, train(args, model, device, ...)
    and test(...) that are not entries without --input data=..., `if __name__ ==
    '__main__': main()`."""
    path = os.path.join(FILES, "mnist_main.py")
    r = ctc_check(path, "--input", "x=f32[3,1,28,28]")
    assert r.returncode == 0, r.stderr
    assert "entry forward -> f32[3,10]" in r.stdout
    assert ("skipped train (line 30): the shape of its batch 'data' is unknown (its loop body is compiled as an "
            "entry with --input data=f32[...])") in r.stdout
    assert "8 tensors (75338 values)" in r.stdout   # no optimizer state in an inference build
    mod = load_with_stubs(path, ["main.py"])
    torch.manual_seed(0)
    check_forward(tmp_path, path, mod.Net(), [randn(3, 1, 28, 28)], ["--input", "x=f32[3,1,28,28]"])


@pytest.mark.parametrize("which,shape", [("netG", (2, 6, 1, 1)), ("netD", (2, 3, 16, 16))])
def test_dcgan_script_module_level(tmp_path, which, shape):
    """Module-level argparse (values from --args), torchvision data, two
    module-level instances (chosen with --model NAME), a training loop over the
    loader at module level (no iterations at compile time)."""
    path = os.path.join(FILES, "dcgan_script.py")
    args = "--nz 6 --ngf 3 --ndf 5 --outf " + str(tmp_path)   # the script saves netG_epoch_*.pth there
    mod = load_with_stubs(path, ["dcgan.py"] + args.split())
    model = getattr(mod, which)
    check_forward(tmp_path, path, model, [randn(*shape)],
                  ["--model", which, "--args", args, "--input", "input=f32[%s]" % ",".join(map(str, shape))])


def test_dcgan_needs_model_choice():
    r = ctc_check(os.path.join(FILES, "dcgan_script.py"))
    assert r.returncode == 1
    assert ("error: the file makes several nn.Module instances at module level (netG, netD); "
            "choose one with --model NAME") in r.stderr


def test_gpt_model_expression(tmp_path):
    """--model 'GPT(GPTConfig(...))'; @property, @staticmethod, @classmethod,
    @torch.no_grad() methods; from_pretrained / configure_optimizers / generate
    never evaluated (they import transformers and use inspect)."""
    path = os.path.join(FILES, "gpt_model.py")
    expr = "GPT(GPTConfig(n_layer=2, n_head=2, n_embd=32, vocab_size=64, block_size=16, dropout=0.1))"
    mod = load_module(path)
    torch.manual_seed(0)
    model = eval(expr, vars(mod))
    idx = np.random.default_rng(3).integers(0, 64, size=(2, 16)).astype(np.int64)
    check_forward(tmp_path, path, model, [idx], ["--model", expr, "--input", "idx=i64[2,16]"])


def write(tmp_path, src, name="m.py"):
    p = tmp_path / name
    p.write_text(src)
    return str(p)


ARGP = """import argparse
import torch
import torch.nn as nn
parser = argparse.ArgumentParser(description='t')
parser.add_argument('--hidden', type=int, default=16)
parser.add_argument('--scale', type=float, default=2.0)
parser.add_argument('--no-bias', action='store_true', default=False)
parser.add_argument('--data', required=True, help='where the data is')
parser.add_argument('--act', default='relu', choices=['relu', 'tanh'])
args = parser.parse_args()


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, args.hidden, bias=not args.no_bias)
        self.act = nn.ReLU() if args.act == 'relu' else nn.Tanh()

    def forward(self, x):
        return self.act(self.fc(x)) * args.scale


if __name__ == '__main__':
    raise SystemExit('never runs under ctc')
"""


def test_argparse_values_and_defaults(tmp_path):
    p = write(tmp_path, ARGP)
    r = ctc_check(p, "--input", "x=f32[2,4]", "--args", "--data d --hidden=8 --no-bias --act tanh --scale 0.5")
    assert r.returncode == 0, r.stderr
    assert "1 tensors (32 values)" in r.stdout and "entry forward -> f32[2,8]" in r.stdout
    r = ctc_check(p, "--input", "x=f32[2,4]", "--args", "--data 'a b'")
    assert r.returncode == 0, r.stderr
    assert "2 tensors (80 values)" in r.stdout and "entry forward -> f32[2,16]" in r.stdout
    sys_argv = ["m.py", "--data", "d", "--hidden=8", "--act", "tanh", "--scale", "0.5"]
    with mock.patch.object(sys, "argv", sys_argv):
        mod = load_module(p)
    check_forward(tmp_path, p, mod.Net(), [randn(2, 4)],
                  ["--input", "x=f32[2,4]", "--args", " ".join(sys_argv[1:])])


@pytest.mark.parametrize("args,msg", [
    ("", "10:8: error: argparse: the following arguments are required: --data"),
    ("--data x --epochs 3", "10:8: error: argparse: unrecognized arguments: --epochs 3"),
    ("--data x --act gelu", "10:8: error: argparse: argument --act: invalid choice: 'gelu' (choose from 'relu', 'tanh')"),
    ("--data x --hidden many", "10:8: error: argparse: argument --hidden: invalid int value: 'many'"),
])
def test_argparse_errors(tmp_path, args, msg):
    r = ctc_check(write(tmp_path, ARGP), "--input", "x=f32[2,4]", "--args", args)
    assert r.returncode == 1
    assert msg in r.stderr, r.stderr


OPAQUE = """import torch
import torch.nn as nn
import torchvision.transforms as T
import numpy as np
import matplotlib
matplotlib.use('Agg')
import matplotlib.pyplot as plt
from torch.utils.data import Dataset, DataLoader

norm = T.Normalize((0.5,), (0.5,))
width = np.int64(4)
plt.figure(figsize=(3, 3))


class Pairs(Dataset):
    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n


loader = DataLoader(Pairs(10), batch_size=2)
for xb in loader:
    raise SystemExit('a loader is never iterated at compile time')


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        return USE
"""


@pytest.mark.parametrize("use,opts,msg", [
    ("self.fc(x)", (), None),
    ("norm(self.fc(x))", (), "34:16: error: calling it on a tensor needs the opaque value "
     "'torchvision.transforms.Normalize(...)' (made at line 10 from 'torchvision', which ctc does not model)"),
    ("self.fc(x) * width", (), "34:16: error: '*' on a tensor needs the opaque value 'numpy.int64(...)' "
     "(made at line 11 from 'numpy', which ctc does not model)"),
    ("self.fc(x).view(2, width)", (), "needs the opaque value 'numpy.int64(...)' (made at line 11"),
    ("self.fc(x) if norm else x", (), "34:30: error: a condition in compiled code needs the opaque value "
     "'torchvision.transforms.Normalize(...)' (made at line 10"),
    ("[self.fc(x) for _ in loader][0]", (), "error: iterating in compiled code needs the opaque value "
     "'torch.utils.data.DataLoader(...)' (made at line 23"),
])
def test_opaque_values(tmp_path, use, opts, msg):
    r = ctc_check(write(tmp_path, OPAQUE.replace("USE", use)), "--input", "x=f32[2,4]", *opts)
    if msg is None:
        assert r.returncode == 0, r.stderr
        return
    assert r.returncode == 1, r.stdout
    assert msg in r.stderr, r.stderr
    assert "note: the opaque value" in r.stderr
    assert "internal error" not in r.stderr


def test_opaque_in_construction(tmp_path):
    src = OPAQUE.replace("nn.Linear(4, 4)", "nn.Linear(width, 4)").replace("USE", "self.fc(x)")
    r = ctc_check(write(tmp_path, src), "--input", "x=f32[2,4]")
    assert r.returncode == 1
    assert "31:19: error: in_features needs the opaque value 'numpy.int64(...)' (made at line 11" in r.stderr


METHODS = """import torch
import torch.nn as nn


class Net(nn.Module):
    scale = 3.0

    def __init__(self, n):
        super().__init__()
        self.fc = nn.Linear(n, n)

    @classmethod
    def small(cls):
        return cls(4)

    @staticmethod
    def double(t):
        return t * 2

    @property
    def factor(self):
        return self.scale + 1

    def configure_optimizers(self):
        return undefined_thing(self.parameters())

    @torch.no_grad()
    def generate(self, x):
        return this_is_never_evaluated(x)

    def forward(self, x):
        return self.double(self.fc(x)) * self.factor + Net.double(x)


model = Net.small()
"""


def test_method_decorators(tmp_path):
    p = write(tmp_path, METHODS)
    mod = load_module(p)
    check_forward(tmp_path, p, mod.model, [randn(2, 4)], ["--input", "x=f32[2,4]"])


def test_local_imports(tmp_path):
    """A few-line driver builds the model from files beside it: `from model import
    GPT, GPTConfig`, a package with __init__.py, a relative import inside it."""
    import shutil
    shutil.copy(os.path.join(FILES, "gpt_model.py"), tmp_path / "model.py")
    (tmp_path / "cfg").mkdir()
    (tmp_path / "cfg" / "__init__.py").write_text("LAYERS = 2\n")
    (tmp_path / "cfg" / "sizes.py").write_text("from . import LAYERS\n\ndef config(GPTConfig):\n"
                                               "    return GPTConfig(n_layer=LAYERS, n_head=2, n_embd=16, "
                                               "vocab_size=32, block_size=8)\n")
    drv = write(tmp_path, "import torch\nfrom model import GPT, GPTConfig\nimport cfg.sizes\n\n"
                          "model = GPT(cfg.sizes.config(GPTConfig))\n", name="driver.py")
    mod = load_module(os.path.join(FILES, "gpt_model.py"))
    torch.manual_seed(0)
    model = mod.GPT(mod.GPTConfig(n_layer=2, n_head=2, n_embd=16, vocab_size=32, block_size=8))
    idx = np.random.default_rng(4).integers(0, 32, size=(2, 8)).astype(np.int64)
    check_forward(tmp_path, drv, model, [idx], ["--input", "idx=i64[2,8]"])
    r = ctc_check(write(tmp_path, "from model import Nope\n", name="bad.py"))
    assert r.returncode == 1 and "bad.py:1:19: error: cannot import name 'Nope' from 'model'" in r.stderr


def test_bare_sequential_example_inputs(tmp_path):
    """model = nn.Sequential(...) with its input shape from example_inputs."""
    src = ("import torch\nimport torch.nn as nn\n\nmodel = nn.Sequential(nn.Flatten(), nn.Linear(784, 32), nn.ReLU(),\n"
           "                      nn.Linear(32, 10), nn.LogSoftmax(dim=1))\n"
           "example_inputs = (torch.randn(5, 1, 28, 28),)\n")
    p = write(tmp_path, src)
    mod = load_module(p)
    check_forward(tmp_path, p, mod.model, [randn(5, 1, 28, 28)], [])
    r = ctc_check(write(tmp_path, src.replace("example_inputs", "shapes"), name="noshape.py"))
    assert r.returncode == 1
    assert "error: a bare nn.Sequential model takes one input: give its shape with --input" in r.stderr


SCRIPT_PY = """import torch
a = '%s/x_%d.pth' % ('out', 3)
b = '[%d/%d] Loss: %.4f %5s|%-4d|%+.2e %%' % (1, 2, 0.123456, 'ab', 7, 12345.0)
assert a == 'out/x_3.pth', a
assert b == '[1/2] Loss: 0.1235    ab|7   |+1.23e+04 %', b
assert '%r' % ('q',) == "'q'" and 'n=%05.1f' % 3.14159 == 'n=003.1'
assert 'AbC'.lower() == 'abc' and 'AbC'.upper() == 'ABC' and 'BatchNorm2d'.find('Norm') == 5
assert '  a b \\n'.strip() == 'a b' and 'xxaxx'.strip('x') == 'a'
assert ' a  b c '.split() == ['a', 'b', 'c'] and 'a,b,,c'.split(',') == ['a', 'b', '', 'c']
assert 'a b c'.split(None, 1) == ['a', 'b c'] and 'aXbXc'.replace('X', '--') == 'a--b--c'


def f(x):
    return x
"""


def test_script_python(tmp_path):
    """'%' formatting and the str methods scripts use, checked by compile-time asserts
    (the same file runs under Python first, so the expectations are Python's)."""
    p = write(tmp_path, SCRIPT_PY)
    subprocess.run([sys.executable, p], check=True)
    r = ctc_check(p, "--entry", "f", "--input", "x=f32[2]")
    assert r.returncode == 0, r.stderr


# ---- issue 9, the files' remaining constructs (in the styles of the example
# files: module-level tensors, a VAE's sampling, orthogonal init and channel
# dropout, language models with tuple states and an nn.Transformer subclass) ----

def test_module_level_tensor_arithmetic(tmp_path):
    """Compile-time arithmetic at module level and in __init__ (W * 1.5 - 2,
    x.t() ** k, torch.cat, .size(), .item(), float(t), slice assignment into a
    zeros table, unsqueeze/transpose), used as constants by forward and by the
    construction; a module-level loop over itertools.count() runs no iterations
    and the names it sets are opaque (printing them is fine)."""
    path = os.path.join(FILES, "poly_consts.py")
    mod = load_module(path)
    model = mod.Fit()
    check_forward(tmp_path, path, model, [randn(5)], ["--input", "x=f32[5]"])
    assert model.fc.in_features == 3


def test_module_level_tensor_errors(tmp_path):
    src = ("import torch\nimport torch.nn as nn\nfrom itertools import count\nW = torch.ones(3, 2)\n"
           "for i in count():\n    z = i\nUSE\n\nclass M(nn.Module):\n    def forward(self, x):\n        return x * z\n")
    for use, msg in [("W[:, 0] = torch.ones(2)", "7:1: error: shape mismatch: value tensor of shape [2] cannot be "
                      "broadcast to indexing result of shape [3]"),
                     ("q = (W @ torch.ones(3, 1))", "7:6: error: mat1 and mat2 shapes cannot be multiplied (3x2 and 3x1)"),
                     ("q = W.item()", "7:5: error: a Tensor with 6 elements cannot be converted to Scalar"),
                     ("row = W[1]; row[0] = 5.0", "7:13: error: assigning into a compile-time tensor that is a view "
                      "of another"),
                     ("q = nn.Linear(2, 2).weight.view(-1)\nz = q", "12:16: error: '*' on a tensor needs the value "
                      "'<parameter>.view(...)' computed from the value '<parameter>.view' of a parameter read at line 7 "
                      "outside compiled code"),
                     ("", "11:16: error: '*' on a tensor needs the value of 'z', which the loop at line 5 over the "
                          "opaque value 'itertools.count(...)' would set")]:
        r = ctc_check(write(tmp_path, src.replace("USE", use)), "--input", "x=f32[2]")
        assert r.returncode == 1 and msg in r.stderr, r.stderr
        assert "internal error" not in r.stderr


@pytest.mark.parametrize("before, body, use, at", [
    ("n = 0", "    n += 1", "nn.Linear(4, 2 + n)", "value of 'n', which the loop at line 5 over the opaque value "
     "'numpy.arange(...)' would set"),
    ("sizes = [4]", "    sizes.append(int(v))", "nn.Linear(4, sizes[-1])", "value of 'sizes', which the loop at line 5 "
     "over the opaque value 'numpy.arange(...)' would change"),
    ("cfg = {'out': 3}", "    cfg['out'] = 7", "nn.Linear(4, cfg['out'])", "value of 'cfg', which the loop at line 5 "
     "over the opaque value 'numpy.arange(...)' would change"),
    ("k = 2", "    try:\n        pass\n    except ValueError:\n        k = 9", "nn.Linear(4, k)",
     "value of 'k', which the loop at line 5"),
])
def test_opaque_loop_changes_bound_names(tmp_path, before, body, use, at):
    """A module-level loop over an opaque value (a NumPy array here) runs no iterations at
    compile time, so a name bound before it that the loop would rebind, and a list or dict
    the loop would change in place, are unknown after it: using one in the model is a
    located error naming the loop (it was the value from before the loop, silently: a
    Linear with PyTorch's 5 outputs built with 2)."""
    src = ("import torch\nimport torch.nn as nn\nimport numpy as np\n" + before + "\nfor v in np.arange(3):\n" +
           body + "\n\nclass M(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
           "        self.fc = " + use + "\n\n    def forward(self, x):\n        return self.fc(x)\n")
    r = ctc_check(write(tmp_path, src), "--input", "x=f32[2,4]")
    assert r.returncode == 1 and at in r.stderr, r.stderr
    assert "internal error" not in r.stderr


@pytest.mark.parametrize("cond, at", [
    ("t is not None", "14:37"), ("not (t is None)", "14:37"), ("'type' in cfg", "14:37"),
    ("isinstance(cfg, dict)", "14:37"), ("(t is None) ^ (p is None)", "14:37"), ("cfg == {}", "14:37"),
])
def test_opaque_comparisons_are_not_guessed(tmp_path, cond, at):
    """A comparison with an opaque value (a config from json, which ctc does not model)
    has an answer only Python knows: a condition on it is a located error, where ctc
    used to answer `is not None` with True (Python: False here) and build a Linear with
    the other width. Plain script code around it (assert, print) still runs."""
    src = ("import json\nimport torch\nimport torch.nn as nn\n"
           "cfg = json.loads('{\"type\": null, \"params\": 3}')\n"
           "t = cfg.get('type')\np = cfg.get('params')\nflag = " + cond + "\nprint(flag)\n\n\n"
           "class M(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
           "        self.fc = nn.Linear(2, 2 if flag else 3)\n\n    def forward(self, x):\n        return self.fc(x)\n")
    r = ctc_check(write(tmp_path, src), "--input", "x=f32[1,2]")
    assert r.returncode == 1, r.stderr
    assert f"m.py:{at}: error: a condition at compile time (Python's answer is not known to ctc" in r.stderr, r.stderr
    assert "m.py:7:" in r.stderr and "note: the opaque value" in r.stderr, r.stderr


@pytest.mark.parametrize("vocab, ok", [
    ("sorted(list(set(text)))", True), ("sorted(set(text))", True), ("list(set(text))", False),
    ("[c for c in set(text)]", False), ("list(set(text))[:]", False),
])
def test_set_order_is_not_invented(tmp_path, vocab, ok):
    """CPython iterates a set of strings in hash order, random on each run; ctc would give
    insertion order. A vocabulary built from it in order would silently differ from the
    one a checkpoint was trained with: every order-dependent use of a set (or of list(set))
    is a located error naming sorted(), and order-blind uses (sorted, len, in, max) work."""
    src = ("import torch\nimport torch.nn as nn\ntext = 'hello world'\nchars = " + vocab + "\n"
           "stoi = {c: i for i, c in enumerate(chars)}\n\n\nclass M(nn.Module):\n    def __init__(self):\n"
           "        super().__init__()\n        self.emb = nn.Embedding(len(stoi), 3 + stoi['w'])\n\n"
           "    def forward(self, x):\n        return self.emb(x)\n")
    r = ctc_check(write(tmp_path, src), "--input", "x=i64[2]")
    if ok:
        assert r.returncode == 0, r.stderr
    else:
        assert r.returncode == 1 and "m.py:" in r.stderr and "CPython's hash order" in r.stderr and \
            "sorted(list(set(text)))" in r.stderr, r.stderr


def test_vae_reparameterize_in_forward(tmp_path):
    """torch.randn_like in the inference entry: with logvar forced to -60 (std
    1e-13) the output is the deterministic decode(mu) and matches PyTorch; mu and
    logvar always do."""
    path = os.path.join(FILES, "vae_style.py")
    mod = load_module(path)
    torch.manual_seed(0)
    model = mod.VAE()
    with torch.no_grad():
        model.logvar.weight.zero_()
        model.logvar.bias.fill_(-60.0)
    x = np.random.default_rng(5).random((4, 48)).astype(np.float32)
    with torch.no_grad():
        want = model(torch.from_numpy(x))
    got = run_forward(str(tmp_path), path, model, [x], ["--input", "x=f32[4,48]"])
    for g, w, name in zip(got, want, ("recon", "mu", "logvar")):
        compare(name, g, w.numpy(), RTOL, ATOL)


def test_random_draws_in_forward_statistics(tmp_path):
    """randn_like / rand_like / torch.randn in forward: N(mu, std^2) and U[0, 1)
    draws from the rng.offset stream (equal to PyTorch in distribution), the
    offset advanced by each call (saved with --save), fresh draws next call."""
    path = os.path.join(FILES, "vae_style.py")
    exe = str(tmp_path / "net")
    from ctc_testlib import ctc_build, run, st_read
    ctc_build(path, exe, "--model", "Noise", "--input", "mu=f32[100,200]", "--input", "logvar=f32[100,200]")
    mu = np.full((100, 200), 3.0, np.float32)
    lv = np.full((100, 200), np.log(4.0), np.float32)   # std 2
    np.save(tmp_path / "mu.npy", mu)
    np.save(tmp_path / "lv.npy", lv)
    outs, w = [], None
    for k in range(2):
        args = [exe, "infer", "--input", str(tmp_path / "mu.npy"), "--input", str(tmp_path / "lv.npy"),
                "--save", str(tmp_path / f"s{k}.safetensors"), "--save-training-state"]
        args += ["--weights", w] if w else ["--random-weights"]
        args += ["--output", str(tmp_path / f"n{k}.npy"), "--output", str(tmp_path / f"u{k}.npy"),
                 "--output", str(tmp_path / f"r{k}.npy")]
        run(args)
        w = str(tmp_path / f"s{k}.safetensors")
        outs.append([np.load(tmp_path / f"{c}{k}.npy") for c in "nur"])
    n, u, _ = outs[0]
    assert abs(n.mean() - 3.0) < 5 * 2 / np.sqrt(n.size) and abs(n.std() - 2.0) < 0.03
    assert u.min() >= 0 and u.max() < 1 and abs(u.mean() - 0.5) < 5 * np.sqrt(1 / 12 / u.size)
    assert not np.array_equal(outs[0][0], outs[1][0]) and not np.array_equal(outs[0][2], outs[1][2])
    assert int(st_read(w)["rng.offset"]) > int(st_read(str(tmp_path / "s0.safetensors"))["rng.offset"]) > 0


def test_orthogonal_init_and_dropout2d(tmp_path):
    """nn.init.orthogonal_ (rows or columns orthonormal, times calculate_gain) in
    the compiled model's own initialisation; the forward with PyTorch's weights;
    F.dropout2d / nn.Dropout2d zero whole channels, scale the rest by 1/(1-p)."""
    path = os.path.join(FILES, "sr_style.py")
    from ctc_testlib import ctc_build, run, st_read
    exe = str(tmp_path / "net")
    ctc_build(path, exe, "--entry", "drop2d", "--entry", "train_step")
    x = np.ones((50, 40, 3, 3), np.float32)
    np.save(tmp_path / "x.npy", x)
    run([exe, "run", "drop2d", "--input", str(tmp_path / "x.npy"), "--output", str(tmp_path / "y.npy"),
         "--save", str(tmp_path / "init.safetensors"), "--save-training-state"])
    y = np.load(tmp_path / "y.npy").reshape(50, 40, 9)
    per_channel = y.min(axis=2) == y.max(axis=2)
    assert per_channel.all(), "a channel was partly dropped"
    dropped = float((y[:, :, 0] == 0).mean())
    assert abs(dropped - 0.4) < 5 * np.sqrt(0.4 * 0.6 / 2000), dropped
    assert np.allclose(y[y != 0], 1 / 0.6, rtol=1e-6)
    st = st_read(str(tmp_path / "init.safetensors"))
    for name, gain in [("conv1.weight", np.sqrt(2.0)), ("conv2.weight", np.sqrt(2 / 1.04)), ("conv3.weight", 1.0)]:
        wm = st[name].reshape(st[name].shape[0], -1).astype(np.float64) / gain
        g = wm @ wm.T if wm.shape[0] <= wm.shape[1] else wm.T @ wm
        assert np.allclose(g, np.eye(g.shape[0]), atol=1e-5), name
    mod = load_module(path)
    torch.manual_seed(0)
    check_forward(tmp_path, path, mod.Upscale(2), [randn(2, 1, 8, 8)], [])


TRUNC = """import torch
import torch.nn as nn


class ViTish(nn.Module):
    def __init__(self):
        super().__init__()
        self.pos = nn.Parameter(torch.zeros(1, 16, 8))
        self.tight = nn.Linear(128, 256)
        self.skew = nn.Linear(128, 256, bias=False)
        self.reset = nn.Linear(8, 8, bias=False)
        nn.init.trunc_normal_(self.pos, std=0.02)   # timm: bounds [-2, 2] are 100 std away
        nn.init.trunc_normal_(self.tight.weight, mean=0.1, std=0.5, a=0.1 - 1.0, b=0.1 + 1.0)
        nn.init.trunc_normal_(self.skew.weight, std=1.0, a=-1.0, b=3.0)
        nn.init.trunc_normal_(self.reset.weight, std=0.1, a=-0.1, b=0.1)
        nn.init.normal_(self.reset.weight, std=0.1)   # a later normal_ is not truncated

    def forward(self, x):
        return self.tight(x) + self.skew(x)


model = ViTish()
example_inputs = (torch.randn(2, 128),)
"""


def test_trunc_normal_init(tmp_path):
    """nn.init.trunc_normal_ in the compiled model's own initialisation (pytorch/examples'
    Llama 2 cuts its output layer at 3 std; timm's ViTs call it with std=0.02): every value
    inside [a, b], mean and std those of the truncated normal (the normal's within [mean - 2 std,
    mean + 2 std]: std 0.8796 of the normal's); bounds past 9 std cut nothing and are normal_'s
    fill (ctc's draws stay within 8.6 std); a later normal_ is untruncated; bounds that keep under
    a tenth of the draws are refused."""
    from ctc_testlib import ctc_build, run, st_read
    p = tmp_path / "vit.py"
    p.write_text(TRUNC)
    exe = str(tmp_path / "net")
    ctc_build(str(p), exe)
    c = run([CTC, "compile", str(p), "-o", str(tmp_path / "net.c")]) and (tmp_path / "net.c").read_text()
    assert c.count("ctc_fill_trunc_normal_f32((float *)") == 2 and c.count("ctc_fill_normal_f32((float *)") == 2, c
    np.save(tmp_path / "x.npy", np.zeros((2, 128), np.float32))
    run([exe, "infer", "--random-weights", "--input", str(tmp_path / "x.npy"), "--save", str(tmp_path / "w.safetensors")])
    st = st_read(str(tmp_path / "w.safetensors"))
    w = st["tight.weight"].astype(np.float64).ravel()
    assert w.min() >= np.float32(-0.9) and w.max() <= np.float32(1.1), (w.min(), w.max())
    assert abs(w.mean() - 0.1) < 5 * 0.5 * 0.8796 / np.sqrt(w.size), w.mean()
    assert abs(w.std() / 0.5 - 0.8796) < 0.02, w.std()
    k = st["skew.weight"].astype(np.float64).ravel()   # [-1, 3]: mean (phi(-1) - phi(3)) / 0.84 = 0.2828
    assert k.min() >= -1.0 and k.max() <= 3.0 and k.max() > 2.5 and abs(k.mean() - 0.2828) < 5 * 0.8 / np.sqrt(k.size)
    pos = st["pos"].astype(np.float64)
    assert 0.015 < pos.std() < 0.025 and abs(pos).max() < 0.02 * 8.6
    assert abs(st["reset.weight"]).max() > 0.1   # 64 normal(0, 0.1) draws: one past 1 std (all within: 3e-11)
    bad = TRUNC.replace("std=1.0, a=-1.0, b=3.0", "std=1.0, a=2.5, b=3.0")
    p.write_text(bad)
    r = run([CTC, "check", str(p)], check=False)
    assert r.returncode == 1
    assert "vit.py:14:9: error: nn.init.trunc_normal_: the bounds [2.5, 3] keep 0.00486 of the normal(0, 1) draws; ctc " \
           "draws a value again until it is inside, and needs them to keep at least a tenth" in r.stderr, r.stderr


def test_dropout2d_derivatives(tmp_path):
    """Dropout2d's derivatives: with the mask fixed (p=0 or eval) VJP and JVP are
    the identity's; in training the gradient is the same per-channel mask times
    1/(1-p) (the output over the input, elementwise)."""
    src = ("import torch\nimport torch.nn.functional as F\n\ndef g(x):\n    y = F.dropout2d(x, 0.5)\n"
           "    (dx,) = torch.autograd.grad((y * y).sum(), x)\n    return y, dx\n\n"
           "def j(x, t):\n    return torch.func.jvp(lambda u: F.dropout2d(u, 0.5), (x,), (t,))\n")
    d = str(tmp_path)
    p = os.path.join(d, "g.py")
    open(p, "w").write(src)
    from ctc_testlib import ctc_build, run
    exe = os.path.join(d, "net")
    ctc_build(p, exe, "--entry", "g", "--entry", "j", "--input", "x=f32[8,16,2,2]", "--input", "t=f32[8,16,2,2]")
    x = randn(8, 16, 2, 2, seed=7)
    np.save(os.path.join(d, "x.npy"), x)
    run([exe, "run", "g", "--input", os.path.join(d, "x.npy"), "--output", os.path.join(d, "y.npy"),
         "--output", os.path.join(d, "dx.npy")])
    y, dx = np.load(os.path.join(d, "y.npy")), np.load(os.path.join(d, "dx.npy"))
    mask = (y != 0).astype(np.float32) * 2.0
    np.testing.assert_allclose(y, x * mask, rtol=1e-6)
    np.testing.assert_allclose(dx, 2 * y * mask, rtol=1e-5)   # d/dx (m x)^2 = 2 m^2 x = 2 y m
    t = randn(8, 16, 2, 2, seed=8)
    np.save(os.path.join(d, "t.npy"), t)
    run([exe, "run", "j", "--input", os.path.join(d, "x.npy"), "--input", os.path.join(d, "t.npy"),
         "--output", os.path.join(d, "jy.npy"), "--output", os.path.join(d, "jt.npy")])
    jy, jt = np.load(os.path.join(d, "jy.npy")), np.load(os.path.join(d, "jt.npy"))
    m2 = (jy != 0).astype(np.float32) * 2.0   # the tangent goes through the primal's mask
    assert 0 < (m2 == 0).mean() < 1 and (m2.reshape(8, 16, 4).std(axis=2) == 0).all()
    np.testing.assert_allclose(jy, x * m2, rtol=1e-6)
    np.testing.assert_allclose(jt, t * m2, rtol=1e-6)


@pytest.mark.parametrize("kind", ["LSTM", "GRU"])
def test_recurrent_lm_tuple_state(tmp_path, kind):
    """forward(tokens, hidden) -> (log_probs, hidden): an LSTM's (h, c) tuple as an
    input (--input hidden=(f32[...],f32[...])) and as nested outputs."""
    path = os.path.join(FILES, "lm_style.py")
    mod = load_module(path)
    expr = f"RecurrentLM('{kind}', 30, 8, 12, 2)"
    torch.manual_seed(0)
    model = eval(expr, vars(mod)).eval()
    rng = np.random.default_rng(2)
    tok = rng.integers(0, 30, (5, 2)).astype(np.int64)
    hs = [randn(2, 2, 12, seed=s) for s in ((3, 4) if kind == "LSTM" else (3,))]
    spec = "(f32[2,2,12],f32[2,2,12])" if kind == "LSTM" else "f32[2,2,12]"
    with torch.no_grad():
        h = tuple(torch.from_numpy(a) for a in hs)
        out, hn = model(torch.from_numpy(tok), h if kind == "LSTM" else h[0])
    want = [out] + (list(hn) if kind == "LSTM" else [hn])
    got = run_forward(str(tmp_path), path, model, [tok] + hs, ["--model", expr, "--input", "tokens=i64[5,2]",
                                                              "--input", "hidden=" + spec])
    assert len(got) == len(want)
    for g, w in zip(got, want):
        compare(kind, g, w.numpy(), RTOL, ATOL)


@pytest.mark.slow
def test_transformer_subclass_and_seq2seq(tmp_path):
    """class AttentionLM(nn.Transformer): super().__init__ builds encoder and decoder,
    the subclass replaces decoder, caches its causal mask on self in forward;
    nn.Transformer's own forward (encoder and decoder, norm_first) in Seq2Seq."""
    path = os.path.join(FILES, "lm_style.py")
    mod = load_module(path)
    torch.manual_seed(0)
    model = mod.AttentionLM(30, 8, 2, 12, 2)
    tok = np.random.default_rng(6).integers(0, 30, (5, 2)).astype(np.int64)
    check_forward(tmp_path, path, model, [tok], ["--model", "AttentionLM(30, 8, 2, 12, 2)", "--input", "src=i64[5,2]"])
    torch.manual_seed(0)
    s2s = mod.Seq2Seq()
    (tmp_path / "b").mkdir()
    check_forward(tmp_path / "b", path, s2s, [randn(6, 2, 16, seed=8), randn(5, 2, 16, seed=9)],
                  ["--model", "Seq2Seq", "--input", "src=f32[6,2,16]", "--input", "tgt=f32[5,2,16]"])


def test_vae_training_steps(tmp_path):
    """K Adam steps of the VAE's loss (BCE + KL) match PyTorch: with the log-variance
    head at -60 the drawn eps only moves values by ~1e-13, so both sides are
    deterministic although their random streams differ."""
    from ctc_testlib import ctc_build, run, st_read, st_write, state_dict_np
    path = os.path.join(FILES, "vae_style.py")
    mod = load_module(path)
    torch.manual_seed(0)
    model = mod.VAE()
    with torch.no_grad():
        model.logvar.weight.zero_()
        model.logvar.bias.fill_(-60.0)
    exe = str(tmp_path / "net")
    ctc_build(path, exe, "--entry", "train_step", "--input", "data=f32[4,48]", "--input", "x=f32[4,48]")
    w = str(tmp_path / "w0.safetensors")
    st_write(w, state_dict_np(model))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    rng = np.random.default_rng(11)
    for k in range(3):
        x = rng.random((4, 48)).astype(np.float32)
        np.save(tmp_path / "x.npy", x)
        nxt = str(tmp_path / f"w{k + 1}.safetensors")
        run([exe, "run", "train_step", "--weights", w, "--input", str(tmp_path / "x.npy"), "--output",
             str(tmp_path / "loss.npy"), "--save", nxt, "--save-training-state"])
        w = nxt
        opt.zero_grad()
        recon, mu, logvar = model(torch.from_numpy(x))
        loss = mod.loss_function(recon, torch.from_numpy(x), mu, logvar)
        loss.backward()
        opt.step()
        compare(f"loss {k}", np.load(tmp_path / "loss.npy"), loss.detach().numpy(), 1e-5, 1e-3)
    got = st_read(w)
    for name, p in model.state_dict().items():
        compare(name, got[name], p.numpy(), 1e-4, 1e-6)


SUBCLASS = """import torch
import torch.nn as nn


class Scaled(nn.Linear):
    def __init__(self, n, m, scale):
        super().__init__(n, m)
        self.scale = scale

    def forward(self, x):
        return super().forward(x) * self.scale


class Plain(nn.Linear):
    pass


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = Scaled(4, 6, 0.5)
        self.b = Plain(6, 3, bias=False)
        self.norm = nn.LayerNorm(3)

    def forward(self, x):
        return self.norm(self.b(self.a(x)))


model = Net()
"""


def test_subclass_of_builtin_layer(tmp_path):
    """A class deriving from a builtin layer: super().__init__(...) builds its
    parameters, super().forward(x) and an inherited forward run the layer's; a
    subclass without __init__ takes the layer's arguments."""
    p = write(tmp_path, SUBCLASS)
    mod = load_module(p)
    assert [n for n, _ in mod.model.state_dict().items()] == ["a.weight", "a.bias", "b.weight", "norm.weight", "norm.bias"]
    check_forward(tmp_path, p, mod.model, [randn(2, 4)], ["--input", "x=f32[2,4]"])


SINE = """import torch
import torch.nn as nn


class Seq(nn.Module):
    def __init__(self):
        super().__init__()
        self.cell = nn.LSTMCell(1, 8)
        self.linear = nn.Linear(8, 1)

    def forward(self, input):
        outputs = []
        h = torch.zeros(input.size(0), 8, dtype=torch.double)
        c = torch.zeros(input.size(0), 8, dtype=torch.double)
        for input_t in input.split(1, dim=1):
            h, c = self.cell(input_t, (h, c))
            outputs += [self.linear(h)]
        return torch.cat(outputs, dim=1)


model = Seq()
model.double()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)


def train_step(x, y):
    optimizer.zero_grad()
    loss = nn.MSELoss()(model(x), y)
    loss.backward()
    optimizer.step()
    return loss


example_inputs = {"forward": (torch.randn(3, 6).double(),),
                  "train_step": (torch.randn(3, 6).double(), torch.randn(3, 6).double())}
"""


def test_double_model_inline_loss_training(tmp_path):
    """model.double() (time_sequence_prediction's seq.double()) makes the parameters
    float64; a loss module made inside the training function; K SGD steps match."""
    from ctc_testlib import ctc_build, run, st_read, st_write, state_dict_np
    p = write(tmp_path, SINE)
    mod = load_module(p)
    torch.manual_seed(0)
    model = mod.Seq().double()
    assert model.linear.weight.dtype == torch.float64
    exe = str(tmp_path / "net")
    ctc_build(p, exe)
    w = str(tmp_path / "w0.safetensors")
    st_write(w, state_dict_np(model))
    assert st_read(w)["linear.weight"].dtype == np.float64
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    rng = np.random.default_rng(1)
    for k in range(3):
        x, y = rng.standard_normal((3, 6)), rng.standard_normal((3, 6))
        np.save(tmp_path / "x.npy", x)
        np.save(tmp_path / "y.npy", y)
        nxt = str(tmp_path / f"w{k + 1}.safetensors")
        run([exe, "run", "train_step", "--weights", w, "--input", str(tmp_path / "x.npy"), "--input",
             str(tmp_path / "y.npy"), "--output", str(tmp_path / "loss.npy"), "--save", nxt, "--save-training-state"])
        w = nxt
        opt.zero_grad()
        loss = torch.nn.MSELoss()(model(torch.from_numpy(x)), torch.from_numpy(y))
        loss.backward()
        opt.step()
        compare(f"loss {k}", np.load(tmp_path / "loss.npy"), loss.detach().numpy(), 1e-8, 1e-12)
    got = st_read(w)
    for name, t in model.state_dict().items():
        assert got[name].dtype == np.float64
        compare(name, got[name], t.numpy(), 1e-8, 1e-10)
