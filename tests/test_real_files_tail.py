"""The Python and torch long tail of files people actually have (issue 30),
each in the style the public files use, written in our own words
(tests/real_tail/): compiled unchanged, forward compared with PyTorch running
the same file, and K training steps compared where the file trains."""
import os
import subprocess

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from ctc_testlib import CTC, ROOT, compare, ctc_build, load_module, run, run_forward, st_read, st_write, state_dict_np

FILES = os.path.join(ROOT, "tests", "real_tail")
RTOL, ATOL = 1e-4, 1e-5


def forward_vs_torch(tmp_path, name, model, inputs, *opts):
    model.eval()
    with torch.no_grad():
        want = model(*[torch.from_numpy(x.copy()) for x in inputs])
    got = run_forward(str(tmp_path), os.path.join(FILES, name), model, inputs, opts)
    return compare(name, got[0], want.numpy(), RTOL, ATOL)


def train_vs_torch(tmp_path, name, model, opt, loss_of, batches, *opts):
    """K steps of the file's train_step (inputs batches[k]) against the same
    steps in PyTorch; the parameters after the last step must match."""
    exe = str(tmp_path / "train")
    ctc_build(os.path.join(FILES, name), exe, "--entry", "train_step", *opts)
    w = str(tmp_path / "w0.safetensors")
    st_write(w, state_dict_np(model))
    for k, batch in enumerate(batches):
        args = [exe, "run", "train_step", "--weights", w]
        for i, x in enumerate(batch):
            np.save(tmp_path / f"b{i}.npy", x)
            args += ["--input", str(tmp_path / f"b{i}.npy")]
        nxt = str(tmp_path / f"w{k + 1}.safetensors")
        run(args + ["--output", str(tmp_path / "loss.npy"), "--save", nxt, "--save-training-state"])
        w = nxt
        opt.zero_grad()
        loss = loss_of(*[torch.from_numpy(x) for x in batch])
        loss.backward()
        opt.step()
        compare(f"loss {k}", np.load(tmp_path / "loss.npy"), loss.detach().numpy(), 1e-5, 1e-4)
    got = st_read(w)
    for key, p in model.state_dict().items():
        compare(key, got[key], p.numpy(), 1e-3, 1e-5)


def randn(*shape, seed=1):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def tokens(*shape, hi, seed=2):
    return np.random.default_rng(seed).integers(0, hi, shape).astype(np.int64)


# ---- 1. register_buffer(..., persistent=False) ------------------------------

def test_nonpersistent_buffers_come_from_init(tmp_path):
    """Rotary tables and a causal mask registered with persistent=False are not in
    PyTorch's state_dict: the program runs on a PyTorch-saved state_dict (strict:
    every key it has, none more) and computes them itself."""
    mod = load_module(os.path.join(FILES, "nonpersistent.py"))
    torch.manual_seed(0)
    net = mod.Net()
    assert sorted(net.state_dict()) == ["fc.bias", "fc.weight", "rot.scale"]
    with torch.no_grad():
        net.rot.scale.uniform_(0.5, 1.5)
    forward_vs_torch(tmp_path, "nonpersistent.py", net, [randn(2, 6, 8)], "--model", "Net", "--input", "x=f32[2,6,8]")
    # the program saves exactly the state_dict's keys, and loads its own file back
    exe = str(tmp_path / "net")
    run([exe, "infer", "--weights", str(tmp_path / "weights.safetensors"), "--input", str(tmp_path / "in0.npy"),
         "--output", str(tmp_path / "o.npy"), "--save", str(tmp_path / "again.safetensors")])
    assert sorted(st_read(str(tmp_path / "again.safetensors"))) == sorted(net.state_dict())
    # a checkpoint torch.save wrote loads as --weights; the program's .pt loads strictly into PyTorch
    torch.save(net.state_dict(), tmp_path / "ckpt.pt")
    run([exe, "infer", "--weights", str(tmp_path / "ckpt.pt"), "--input", str(tmp_path / "in0.npy"),
         "--output", str(tmp_path / "o2.npy"), "--save", str(tmp_path / "back.pt")])
    assert (np.load(tmp_path / "o2.npy") == np.load(tmp_path / "o.npy")).all()
    fresh = mod.Net()
    fresh.load_state_dict(torch.load(tmp_path / "back.pt"), strict=True)
    for k, v in net.state_dict().items():
        assert torch.equal(fresh.state_dict()[k], v), k


def test_reassigned_nonpersistent_buffer_stays_out_of_state_dict(tmp_path):
    """`self.pos = ...` after register_buffer(persistent=False) keeps it non-persistent;
    len(self.state_dict()) at compile time counts what PyTorch counts."""
    mod = load_module(os.path.join(FILES, "nonpersistent.py"))
    torch.manual_seed(0)
    net = mod.Reset()
    assert net.n_keys == 2
    forward_vs_torch(tmp_path, "nonpersistent.py", net, [randn(2, 6, 8)], "--model", "Reset", "--input", "x=f32[2,6,8]")


def test_buffer_registered_as_none_then_set(tmp_path):
    """register_buffer("mask", None, persistent=False), assigned a tensor afterwards."""
    mod = load_module(os.path.join(FILES, "nonpersistent.py"))
    torch.manual_seed(0)
    net = mod.Late()
    assert sorted(net.state_dict()) == ["fc.bias", "fc.weight"]
    forward_vs_torch(tmp_path, "nonpersistent.py", net, [randn(2, 6, 8)], "--model", "Late", "--input", "x=f32[2,6,8]")


# ---- 2. ModuleList.append / insert / extend / +=, ModuleDict, ParameterList --

def test_decoder_built_with_append(tmp_path):
    """A Llama-style decoder whose blocks are appended in a loop (plus insert, +=,
    extend, ModuleDict item assignment and update, ParameterList.append): the
    state_dict names are PyTorch's, forward and 3 AdamW steps match."""
    path = os.path.join(FILES, "llama_append.py")
    mod = load_module(path)
    torch.manual_seed(0)
    model = mod.Decoder()
    opts = ["--input", "idx=i64[2,5]", "--input", "targets=i64[2,5]"]
    forward_vs_torch(tmp_path, "llama_append.py", model, [tokens(2, 5, hi=11)], "--input", "idx=i64[2,5]")
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)

    def loss_of(idx, targets):
        logits = model(idx)
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))

    batches = [(tokens(2, 5, hi=11, seed=k), tokens(2, 5, hi=11, seed=10 + k)) for k in range(3)]
    train_vs_torch(tmp_path, "llama_append.py", model, opt, loss_of, batches, *opts)


@pytest.mark.parametrize("src,msg", [
    ("self.fc = nn.Linear(2, 2)\n        self.fc.append(nn.Linear(2, 2))", "'Linear' object has no attribute 'append'"),
    ("self.l = nn.ModuleList()\n        self.l.append(3)", "ModuleList entries must be modules, got 'int'"),
    ("self.d = nn.ModuleDict()\n        self.d.append(nn.Linear(2, 2))", "'ModuleDict' object has no attribute 'append'"),
])
def test_container_mutation_mistakes(tmp_path, src, msg):
    p = tmp_path / "m.py"
    p.write_text("import torch\nimport torch.nn as nn\n\n\nclass M(nn.Module):\n    def __init__(self):\n"
                 "        super().__init__()\n        " + src + "\n\n    def forward(self, x):\n        return x\n")
    r = subprocess.run([CTC, "check", str(p), "--input", "x=f32[2]"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and msg in r.stderr, r.stderr


# ---- 3. star imports -------------------------------------------------------

@pytest.mark.parametrize("which", ["net", "other"])
def test_model_zoo_star_import(tmp_path, which, monkeypatch):
    """`from models import *` of a zoo package whose __init__ star-imports its
    sibling modules (`from .resnet import *`, which has an __all__; `from .plain
    import *`, which has none: its public names only)."""
    monkeypatch.syspath_prepend(os.path.join(FILES, "zoo"))
    for k in [k for k in list(__import__("sys").modules) if k == "models" or k.startswith("models.")]:
        monkeypatch.delitem(__import__("sys").modules, k)
    mod = load_module(os.path.join(FILES, "zoo", "main.py"))
    torch.manual_seed(0)
    model = getattr(mod, which)
    forward_vs_torch(tmp_path, "zoo/main.py", model, [randn(2, 3, 8, 8)], "--model", which, "--input", "x=f32[2,3,8,8]")


def test_star_import_leaves_private_names(tmp_path):
    (tmp_path / "lib.py").write_text("import torch.nn as nn\n\n\nclass _Hidden(nn.Linear):\n    pass\n\n\n"
                                     "class Shown(nn.Linear):\n    pass\n")
    (tmp_path / "m.py").write_text("from lib import *\nok = Shown(2, 2)\nbad = _Hidden(2, 2)\n")
    r = subprocess.run([CTC, "check", str(tmp_path / "m.py"), "--model", "ok", "--input", "x=f32[2]"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and "m.py:3:7: error: name '_Hidden' is not defined" in r.stderr, r.stderr


# ---- 4. torch.empty, torch.Tensor(n, m), Tensor.normal_/uniform_/zero_, unbind

def test_classic_allocation_and_unbind(tmp_path):
    """nn.Parameter(torch.Tensor(out, in)) + reset_parameters() with kaiming_uniform_,
    torch.empty(...) filled by nn.init / .zero_() / .normal_() / .data.uniform_(),
    torch.unbind and Tensor.unbind in forward: forward and 3 SGD steps match."""
    path = os.path.join(FILES, "classic_alloc.py")
    mod = load_module(path)
    torch.manual_seed(0)
    model = mod.Net()
    x, adj = randn(5, 6), np.abs(randn(5, 5, seed=3))
    opts = ["--model", "model", "--input", "x=f32[5,6]", "--input", "adj=f32[5,5]", "--input", "y=i64[5]"]
    forward_vs_torch(tmp_path, "classic_alloc.py", model, [x, adj], *opts)
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    batches = [(randn(5, 6, seed=k), adj, tokens(5, hi=3, seed=k)) for k in range(3)]
    train_vs_torch(tmp_path, "classic_alloc.py", model, opt, lambda a, b, y: F.cross_entropy(model(a, b), y),
                   batches, *opts)


def infer_initial(tmp_path, path, x):
    """Builds path for input x (x=f32[...]), runs infer on the program's own initial
    parameters: (the output, the state_dict it started from)."""
    exe = str(tmp_path / "m")
    ctc_build(str(path), exe, "--input", "x=f32[%s]" % ",".join(map(str, x.shape)))
    np.save(tmp_path / "x.npy", x)
    run([exe, "infer", "--random-weights", "--input", str(tmp_path / "x.npy"), "--output", str(tmp_path / "y.npy"),
         "--save", str(tmp_path / "init.safetensors")])
    return np.load(tmp_path / "y.npy"), st_read(str(tmp_path / "init.safetensors"))


def test_init_values_of_empty_filled_in_init(tmp_path):
    """What __init__ wrote is what the program starts from: zero_() and fill_() on
    torch.empty are exact; normal_(0, 0.02) draws values of that spread."""
    p = tmp_path / "m.py"
    p.write_text("import torch\nimport torch.nn as nn\n\n\nclass M(nn.Module):\n    def __init__(self):\n"
                 "        super().__init__()\n        self.a = nn.Parameter(torch.empty(4).zero_())\n"
                 "        self.b = nn.Parameter(torch.empty(4).fill_(2.5))\n"
                 "        self.c = nn.Parameter(torch.empty(400).normal_(0.0, 0.02))\n"
                 "        self.d = nn.Parameter(torch.Tensor([1, 2, 3, 4]))\n\n"
                 "    def forward(self, x):\n        return x * self.a + self.b + self.c[:4] + self.d\n")
    _, w = infer_initial(tmp_path, p, np.zeros(4, np.float32))
    assert (w["a"] == 0).all() and (w["b"] == 2.5).all() and w["d"].dtype == np.float32
    assert list(w["d"]) == [1, 2, 3, 4]
    assert 0.01 < w["c"].std() < 0.03 and abs(w["c"].mean()) < 0.01


def test_parameter_data_zero_and_fill_in_init(tmp_path):
    """An init_weights applied to every Linear (siamese_network's, HuggingFace's `_init_weights`):
    `m.bias.data.zero_()`, `m.weight.data.fill_(v)`, `.fill_(value=v)` and `torch.fill_(p.data, v)`
    on parameters in __init__ set how the program fills them (the method forms stopped with
    "zero_() missing required argument 'tensor'"); forward matches PyTorch."""
    p = tmp_path / "m.py"
    p.write_text("import torch\nimport torch.nn as nn\n\n\nclass M(nn.Module):\n    def __init__(self):\n"
                 "        super().__init__()\n        self.fc = nn.Linear(4, 3)\n        self.fc2 = nn.Linear(3, 2)\n"
                 "        self.apply(self.init_weights)\n        self.fc2.bias.data.fill_(value=-1.5)\n"
                 "        torch.fill_(self.fc2.weight.data, 2.0)\n\n"
                 "    def init_weights(self, m):\n        if isinstance(m, nn.Linear):\n"
                 "            m.weight.data.fill_(0.25)\n            m.bias.data.zero_()\n\n"
                 "    def forward(self, x):\n        return self.fc2(self.fc(x))\n")
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    y, w = infer_initial(tmp_path, p, x)
    mod = load_module(str(p))
    compare("forward", y, mod.M()(torch.from_numpy(x)).detach().numpy(), 1e-6, 1e-6)
    assert (w["fc.bias"] == 0).all() and (w["fc.weight"] == 0.25).all() and (w["fc2.bias"] == -1.5).all()


# ---- 5 and 6. next / iter / set / open, __setattr__ / __getattr__ / __dict__, try/except

def test_text_file_vocabulary_and_optional_imports(tmp_path, monkeypatch):
    """A character model in the tutorial style: the vocabulary from
    sorted(list(set(text))) of a text file read with open() at compile time
    (`with open(p, "r", encoding=...)`, readlines(), iterating the file), next(iter(...)),
    next(self.parameters()), self.__setattr__ / __getattr__ / __dict__, and try/except
    for optional dependencies (apex, flash_attn), a missing key, an index and a raise."""
    monkeypatch.chdir(os.path.join(FILES, "textfile"))   # PyTorch opens input.txt from the working directory
    mod = load_module(os.path.join(FILES, "textfile", "char_model.py"))
    torch.manual_seed(0)
    net = mod.Net()
    assert net.k == 122 and mod.vocab_size == 19
    forward_vs_torch(tmp_path, "textfile/char_model.py", net, [tokens(2, 4, hi=19)], "--input", "idx=i64[2,4]")


def ctc_check_src(tmp_path, src, *opts):
    p = tmp_path / "m.py"
    p.write_text("import torch\nimport torch.nn as nn\n" + src)
    return subprocess.run([CTC, "check", str(p), *opts], capture_output=True, text=True, timeout=60)


MODEL_K = "\n\nclass M(nn.Module):\n    def __init__(self):\n        super().__init__()\n        self.k = k\n\n" \
          "    def forward(self, x):\n        return x * self.k\n"


@pytest.mark.parametrize("body,k", [
    # the handler whose class matches, in order; a base class matches (LookupError, Exception)
    ("try:\n    k = {}['a']\nexcept IndexError:\n    k = 1\nexcept LookupError:\n    k = 2\n", 2),
    ("try:\n    k = 1 // 0\nexcept (ValueError, ZeroDivisionError) as e:\n    k = len(str(e))\n", 34),
    ("try:\n    import apex\n    k = 1\nexcept:\n    k = 3\n", 3),
    ("try:\n    k = 4\nexcept Exception:\n    k = 5\nelse:\n    k = k * 10\nfinally:\n    k = k + 1\n", 41),
    ("try:\n    try:\n        raise KeyError('x')\n    except KeyError:\n        raise\n    finally:\n        f = 2\n"
     "except KeyError:\n    k = 6 + f\n", 8),
    ("try:\n    try:\n        assert 1 == 2, 'no'\n    except ValueError:\n        k = 0\nexcept AssertionError:\n"
     "    k = 9\n", 9),
    ("def f():\n    try:\n        return [1, 2][5]\n    except IndexError:\n        return 11\n\n\nk = f()\n", 11),
    ("try:\n    from os import path\n    k = 12\nexcept ImportError:\n    k = 0\n", 12),
    ("try:\n    k = nn.Linear(2, 2).no_such_attr\nexcept AttributeError:\n    k = 13\n", 13),
    ("try:\n    from torch.nn import NotInThisTorch\n    k = 1\nexcept ImportError:\n    k = 14\n", 14),
])
def test_try_except_at_compile_time_matches_python(tmp_path, body, k):
    src = body + MODEL_K
    ns = {}
    exec("import torch\nimport torch.nn as nn\n" + src.replace("import apex", "import apex_not_installed_here"), ns)
    assert ns["M"]().k == k
    r = ctc_check_src(tmp_path, src, "--input", "x=f32[2]")
    assert r.returncode == 0, r.stderr
    y, _ = infer_initial(tmp_path, tmp_path / "m.py", np.ones(2, np.float32))
    assert list(y) == [k, k]


@pytest.mark.parametrize("body,k", [
    # a model zoo's config dict changed with keywords (configs[w].update(num_blocks=...)): it was
    # "update() got an unexpected keyword argument"
    ("cfg = {'a': 1}\ncfg.update(a=2, b=3)\ncfg.update({'b': 4}, c=5)\nk = cfg['a'] * 100 + cfg['b'] * 10 + cfg['c']\n",
     245),
    ("d = {}\nd.update(other=7)\nk = d['other']\n", 7),   # 'other' is a key: the positional is positional-only
])
def test_dict_update_with_keywords_matches_python(tmp_path, body, k):
    ns = {}
    exec("import torch\nimport torch.nn as nn\n" + body + MODEL_K, ns)
    assert ns["M"]().k == k
    (tmp_path / "m.py").write_text("import torch\nimport torch.nn as nn\n" + body + MODEL_K)
    y, _ = infer_initial(tmp_path, tmp_path / "m.py", np.ones(2, np.float32))
    assert list(y) == [k, k]


@pytest.mark.parametrize("body,msg", [
    # ctc's own diagnostics are not Python exceptions: no handler takes them
    ("try:\n    global g\nexcept:\n    pass\nk = 1\n", "'global' and 'nonlocal' are not supported by ctc"),
    # a Python exception no handler matches stops the compile with its own message
    ("try:\n    k = {}['a']\nexcept ValueError:\n    k = 1\n", "key 'a' not found in dict"),
    ("raise ValueError('bad config')\n", "exception raised at compile time: bad config"),
    ("k = open('missing.txt').read()\n", "No such file or directory: 'missing.txt'"),
    # a set's text is in CPython's hash order (random per run for str): no value to compile
    ("k = len(str(set('abca')))\n", "needs the text of a set"),
])
def test_what_try_does_not_swallow(tmp_path, body, msg):
    r = ctc_check_src(tmp_path, body + MODEL_K, "--input", "x=f32[2]")
    assert r.returncode == 1 and msg in r.stderr, r.stderr


# ---- 7. module state written in forward ---------------------------------------

def test_last_loss_attribute_written_in_forward(tmp_path):
    """forward stores `self.last_loss` (a plain attribute, None in __init__); the training
    function reads it back after calling the model: forward and 3 Adam steps match."""
    path = os.path.join(FILES, "last_loss.py")
    mod = load_module(path)
    torch.manual_seed(0)
    model = mod.Tiny()
    opts = ["--model", "model", "--input", "idx=i64[2,5]", "--input", "targets=i64[2,5]"]
    forward_vs_torch(tmp_path, "last_loss.py", model, [tokens(2, 5, hi=13)], *opts[:4])
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)

    def loss_of(idx, targets):
        model(idx, targets)
        return model.last_loss

    batches = [(tokens(2, 5, hi=13, seed=k), tokens(2, 5, hi=13, seed=20 + k)) for k in range(3)]
    train_vs_torch(tmp_path, "last_loss.py", model, opt, loss_of, batches, *opts)


def test_state_carried_between_calls_stays_an_error(tmp_path):
    """A tensor attribute from __init__ overwritten in forward would carry over to the
    next call in PyTorch; the program could not, so it is refused."""
    src = ("\n\nclass M(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
           "        self.h = torch.zeros(2)\n\n    def forward(self, x):\n        self.h = self.h + x\n"
           "        return self.h\n")
    r = ctc_check_src(tmp_path, src, "--input", "x=f32[2]")
    assert r.returncode == 1 and "assigning 'self.h' inside compiled code" in r.stderr, r.stderr


def test_parameter_scaled_or_shifted_in_init(tmp_path):
    """`self.head.weight.data.mul_(head_init_scale)` (ConvNeXt) and `add_` on parameters in
    __init__: the initial values become m p + c, so the fill does: a Linear's uniform(-k, k)
    weight scaled by 0.5 lies in [-k/2, k/2] and spreads as much; a normal_(0, 0.02) weight times
    -3 has std 0.06; a constant bias shifted is exact, a zero one times 7 stays zero."""
    p = tmp_path / "m.py"
    p.write_text("import torch\nimport torch.nn as nn\n\n\nclass M(nn.Module):\n    def __init__(self, s=0.5):\n"
                 "        super().__init__()\n        self.head = nn.Linear(400, 50)\n        self.head.weight.data.mul_(s)\n"
                 "        self.g = nn.Linear(400, 50)\n        nn.init.normal_(self.g.weight, 0.0, 0.02)\n"
                 "        self.g.weight.data.mul_(-3.0)\n        nn.init.constant_(self.g.bias, 1.5)\n"
                 "        self.g.bias.data.add_(2.0, alpha=0.25)\n        nn.init.zeros_(self.head.bias)\n"
                 "        self.head.bias.data.mul_(7)\n\n"
                 "    def forward(self, x):\n        return self.head(x) + self.g(x)\n")
    _, w = infer_initial(tmp_path, p, np.zeros((1, 400), np.float32))
    k = 1 / 400 ** 0.5
    hw = w["head.weight"]
    assert np.abs(hw).max() <= k / 2 and np.abs(hw).max() > 0.49 * k, np.abs(hw).max()
    assert abs(hw.std() - k / 2 / 3 ** 0.5) < 0.03 * k, hw.std()   # uniform(-k/2, k/2)'s std
    assert abs(w["g.weight"].std() - 0.06) < 0.003 and abs(w["g.weight"].mean()) < 0.002, w["g.weight"].std()
    assert (w["g.bias"] == 2.0).all() and (w["head.bias"] == 0).all()


MASKS = """
import torch
import torch.nn as nn


class M(nn.Module):
    def __init__(self, n=5):
        super().__init__()
        self.register_buffer("mask", torch.empty(n, n).fill_(float("-inf")).triu_(1), persistent=False)
        self.ln = nn.LayerNorm(5)

    def forward(self, x):                                    # x [2, 5, 5] float64 (the type() forms)
        h = self.ln(x.type(torch.float32)).type(x.dtype)     # Whisper's LayerNorm: float32 inside
        m = torch.ones(5, 5, dtype=torch.float64).tril_(-1)
        y = torch.softmax(h + self.mask, dim=-1) + m
        k = 2.0 if x.type() == 'torch.DoubleTensor' else 1.0
        return (y * k).type('torch.DoubleTensor'), x.type(torch.FloatTensor)
"""


def test_inplace_tri_and_tensor_type(tmp_path):
    """`torch.empty(n, n).fill_(-inf).triu_(1)` in __init__ and `.tril_(-1)` in forward (the
    in-place forms, Whisper's mask), and Tensor.type(dtype / 'torch.DoubleTensor' /
    torch.FloatTensor), whose no-argument form is the type's name: against PyTorch."""
    import torch
    p = tmp_path / "m.py"
    p.write_text(MASKS)
    mod = load_module(str(p), "masks")
    torch.manual_seed(0)
    net = mod.M()
    x = np.random.default_rng(0).standard_normal((2, 5, 5))
    got = run_forward(str(tmp_path), str(p), net, [x], opts=("--input", "x=f64[2,5,5]"))
    with torch.no_grad():
        want = net(torch.from_numpy(x))
    assert len(got) == 2 and got[0].dtype == np.float64 and got[1].dtype == np.float32
    compare("softmax + masks", got[0], want[0].numpy(), 1e-6, 1e-7)
    compare("x as float32", got[1], want[1].numpy(), 0, 0)


REGISTRY = """
import functools
from contextlib import contextmanager

import torch
import torch.nn as nn

_models = {}


def register_model(fn):
    _models[fn.__name__] = fn
    return fn


def register_class(cls):
    _models[cls.__name__] = cls
    return cls


def doubled(fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        return 2 * fn(*args, **kwargs)
    return wrapper


@contextmanager
def fast_path_off():   # defined, never called by the model (Whisper's)
    yield


@doubled
def width(n):
    return n + 1


@register_class
class Net(nn.Module):
    def __init__(self, dim=8):
        super().__init__()
        self.fc = nn.Linear(dim, width(1))

    def forward(self, x):
        return self.fc(x)


@register_model
def net_small(**kwargs):
    return Net(dim=6, **kwargs)


model = _models["net_small"]()
"""


def test_decorators_of_the_file_and_an_unused_generator(tmp_path):
    """A model registry (ConvNeXt's @register_model, a class decorator), a functools.wraps
    wrapper and a @contextmanager the model never calls (Whisper's): decorated as Python
    decorates, the model the registry returns built, forward against PyTorch."""
    import torch
    p = tmp_path / "m.py"
    p.write_text(REGISTRY)
    mod = load_module(str(p), "registry")
    assert list(mod.model.fc.weight.shape) == [4, 6]
    x = np.random.default_rng(0).standard_normal((3, 6)).astype(np.float32)
    got = run_forward(str(tmp_path), str(p), mod.model, [x], opts=("--input", "x=f32[3,6]"))
    with torch.no_grad():
        want = mod.model(torch.from_numpy(x)).numpy()
    compare("registry model", got[0], want, 1e-5, 1e-6)
    p.write_text(REGISTRY + "\n\nwith fast_path_off():\n    pass\n")
    r = run([CTC, "check", str(p), "--input", "x=f32[3,6]"], check=False)
    assert r.returncode == 1 and f"{p}:30:5: error: 'yield' is not supported by ctc" in r.stderr, r.stderr


NUMPY_CONSTS = """
import numpy as np
import torch
import torch.nn as nn


def sinusoids(length, channels, max_timescale=10000):
    log_timescale_increment = np.log(max_timescale) / (channels // 2 - 1)
    inv_timescales = torch.exp(-log_timescale_increment * torch.arange(channels // 2))
    scaled_time = torch.arange(length)[:, np.newaxis] * inv_timescales[np.newaxis, :]
    return torch.cat([torch.sin(scaled_time), torch.cos(scaled_time)], dim=1)


class Net(nn.Module):
    def __init__(self, n=6, d=8):
        super().__init__()
        self.register_buffer("pe", sinusoids(n, d))
        self.register_buffer("mask", torch.empty(n, n).fill_(-np.inf).triu_(1), persistent=False)
        self.scale = np.sqrt(d) * np.power(2.0, -1) + abs(np.floor(-np.pi))

    def forward(self, x):
        return torch.softmax((x + self.pe) @ (x + self.pe).transpose(-1, -2) / self.scale + self.mask, dim=-1)
"""


def test_numpy_scalars_in_init(tmp_path):
    """numpy on Python numbers in __init__ (Whisper's sinusoids: np.log, np.newaxis; its mask's
    -np.inf; np.sqrt, np.power, np.floor, np.pi): computed as numpy does, forward against
    PyTorch. numpy of anything else stays an opaque value."""
    import torch
    p = tmp_path / "m.py"
    p.write_text(NUMPY_CONSTS)
    mod = load_module(str(p), "np_consts")
    net = mod.Net()
    x = np.random.default_rng(0).standard_normal((2, 6, 8)).astype(np.float32)
    got = run_forward(str(tmp_path), str(p), net, [x], opts=("--input", "x=f32[2,6,8]"))
    with torch.no_grad():
        want = net(torch.from_numpy(x)).numpy()
    compare("numpy constants", got[0], want, 1e-5, 1e-6)


def test_absolute_import_inside_a_package(tmp_path):
    """minGPT used as a package: main.py does `from mingpt.model import GPT` and mingpt/model.py
    does `from mingpt.utils import CfgNode` (absolute, as Python resolves it from the main script's
    folder, sys.path[0]): once looked up beside mingpt/model.py only, an opaque 'mingpt' there."""
    import subprocess as sp
    import sys
    pkg = tmp_path / "tinygpt"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "utils.py").write_text("class Cfg:\n    def __init__(self, **kw):\n        self.__dict__.update(kw)\n")
    (pkg / "model.py").write_text("import torch.nn as nn\nfrom tinygpt.utils import Cfg\n\n\n"
                                  "class Net(nn.Module):\n    @staticmethod\n    def default():\n        return Cfg(n=4, m=3)\n\n"
                                  "    def __init__(self, cfg):\n        super().__init__()\n        self.fc = nn.Linear(cfg.n, cfg.m)\n\n"
                                  "    def forward(self, x):\n        return self.fc(x).tanh()\n")
    main = tmp_path / "main.py"
    main.write_text("import torch\nfrom tinygpt.model import Net\n\ntorch.manual_seed(0)\nmodel = Net(Net.default())\n"
                    "example_inputs = (torch.randn(2, 4),)\n")
    x = np.random.default_rng(0).standard_normal((2, 4)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    want = sp.run([sys.executable, "-c", "import sys, numpy as np, torch; sys.path.insert(0, '.'); import main; "
                   "np.save('want.npy', main.model(torch.from_numpy(np.load('x.npy'))).detach().numpy()); "
                   "torch.save(main.model.state_dict(), 'w.pt')"], cwd=tmp_path, capture_output=True, text=True)
    assert want.returncode == 0, want.stderr
    exe = tmp_path / "net"
    ctc_build(str(main), str(exe))
    run([exe, "infer", "--weights", tmp_path / "w.pt", "--input", tmp_path / "x.npy", "--output", tmp_path / "y.npy"])
    compare("package model", np.load(tmp_path / "y.npy"), np.load(tmp_path / "want.npy"), 1e-5, 1e-6)


SETITEM = """
import torch
import torch.nn as nn
import torch.nn.functional as F


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte = nn.Embedding(11, 4)
        self.fc = nn.Linear(4, 4)

    def forward(self, idx, x):                 # idx [2, 5] int64, x [2, 5, 4]
        idx = torch.roll(idx, 1, 1)
        idx[:, 0] = 10                         # makemore's MLP: the start token
        h = self.wte(idx) + x
        h = h.clone()
        h[:, 1:3] = self.fc(x[:, :2])          # a tensor broadcast into a slice
        h[0] = 0.5                             # a number into a row
        h[..., -1] = h[..., 0] * 2             # reading what it overwrites
        return h


model = Net()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)


def train_step(idx, x, y):
    optimizer.zero_grad()
    loss = F.mse_loss(model(idx, x), y)
    loss.backward()
    optimizer.step()
    return loss


_i, _x = torch.randint(0, 10, (2, 5)), torch.randn(2, 5, 4)
example_inputs = {"forward": (_i, _x), "train_step": (_i, _x, torch.randn(2, 5, 4))}
"""


def test_assigning_into_an_index_in_forward(tmp_path):
    """`idx[:, 0] = 10` (makemore), `h[:, 1:3] = tensor`, `h[0] = 0.5`, `h[..., -1] = h[..., 0] * 2`
    in forward: each an update of the whole tensor (where the index selects, the value), forward
    and an SGD step against PyTorch; an assignment into a tensor that has views is refused."""
    import torch
    from ctc_testlib import train_steps_match
    p = tmp_path / "m.py"
    p.write_text(SETITEM)
    mod = load_module(str(p), "setitem")
    rng = np.random.default_rng(0)
    idx = rng.integers(0, 10, (2, 5)).astype(np.int64)
    x = rng.standard_normal((2, 5, 4)).astype(np.float32)
    y = rng.standard_normal((2, 5, 4)).astype(np.float32)
    got = run_forward(str(tmp_path), str(p), mod.model, [idx, x])
    with torch.no_grad():
        want = mod.model(torch.from_numpy(idx), torch.from_numpy(x)).numpy()
    compare("forward", got[0], want, 1e-5, 1e-6)
    train_steps_match(str(tmp_path), str(tmp_path / "net"), mod, str(tmp_path / "weights.safetensors"), [(idx, x, y)],
                      "setitem", 1e-5, 1e-6)
    for bound in ("        row = h[0]\n        h[0] = 0.5",   # a view bound here, or in a caller of the update
                  "        row = h[0]\n        set_row(h)"):
        p.write_text(SETITEM.replace("        h[0] = 0.5", bound) + "\n\ndef set_row(h):\n    h[0] = 0.5\n")
        r = run([CTC, "check", str(p)], check=False)
        assert r.returncode == 1 and "in-place update of a tensor that has views" in r.stderr, r.stderr
