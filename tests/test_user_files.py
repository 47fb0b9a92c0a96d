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
    ("--data x --epochs 3", "10:8: error: argparse: unrecognized argument --epochs"),
    ("--data x --act gelu", "10:8: error: argparse: argument act: invalid choice: 'gelu'"),
    ("--data x --hidden many", "10:8: error: argparse: argument hidden: invalid int value: 'many'"),
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
