"""Bad input: every rejected model file gets a located diagnostic
(path:line:col: error: ...), a source line and caret, exit status 1, and never
a crash. Exact messages live here."""
import subprocess

import pytest

from ctc_testlib import CTC

HEAD = "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n\n"


def check(tmp_path, src, *opts, name="bad.py"):
    p = tmp_path / name
    p.write_bytes(src if isinstance(src, bytes) else src.encode())
    r = subprocess.run([CTC, "check", str(p), *opts], capture_output=True, text=True, timeout=30)
    return r, str(p)


CASES = [
    # (label, source, options, expected "line:col: error: message" fragment)
    ("setitem_runtime_index", HEAD + "class Net(nn.Module):\n    def forward(self, x, i):\n        x[i] = 0.0\n        return x\n",
     ("--input", "x=f32[3]", "--input", "i=i64[1]"),
     "7:9: error: assigning into a tensor through an index computed at run time is not supported"),
    ("tensor_type_arg", HEAD + "class Net(nn.Module):\n    def forward(self, x):\n        return x.type(3)\n",
     ("--input", "x=f32[3]"), "7:16: error: Tensor.type() takes a dtype or a tensor type name"),
    ("meshgrid_2d", HEAD + "class Net(nn.Module):\n    def forward(self, x):\n        return torch.meshgrid(x, x)[0]\n",
     ("--input", "x=f32[2,2]"), "7:16: error: torch.meshgrid: Expected 0D or 1D tensor in the tensor list"),
    ("einsum_diagonal", HEAD + "class Net(nn.Module):\n    def forward(self, x):\n        return torch.einsum('ii->i', x)\n",
     ("--input", "x=f32[3,3]"), "7:16: error: einsum(): subscript 'i' repeated in one operand (a diagonal) is not supported"),
    ("einsum_operands", HEAD + "class Net(nn.Module):\n    def forward(self, x):\n        return torch.einsum('ij,jk->ik', x)\n",
     ("--input", "x=f32[3,3]"), "7:16: error: einsum(): fewer operands were provided than specified in the equation"),
    ("einsum_sizes", HEAD + "class Net(nn.Module):\n    def forward(self, x, y):\n        return torch.einsum('ij,jk->ik', x, y)\n",
     ("--input", "x=f32[3,4]", "--input", "y=f32[5,2]"), "7:16: error: einsum(): the summed subscript has sizes 4 and 5"),
    ("syntax", HEAD + "class Net(nn.Module)\n    pass\n", (), "5:21: error: expected ':'"),
    ("shape_mismatch", HEAD + "class Net(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
     "        self.fc = nn.Linear(10, 5)\n\n    def forward(self, x):\n        return self.fc(x)\n",
     ("--input", "x=f32[3,12]"), "11:16: error: shape mismatch in linear layer: input [3, 12], weight [5, 10]"),
    ("matmul_shapes", HEAD + "class Net(nn.Module):\n    def forward(self, x, y):\n        return x @ y\n",
     ("--input", "x=f32[2,3]", "--input", "y=f32[4,5]"),
     "7:16: error: shape mismatch in matmul: [2, 3] @ [4, 5] (inner dimensions 3 and 4 differ)"),
    ("broadcast", HEAD + "class Net(nn.Module):\n    def forward(self, x, y):\n        return x + y\n",
     ("--input", "x=f32[2,3]", "--input", "y=f32[4]"),
     "7:16: error: shape mismatch in '+': [2, 3] and [4] cannot be broadcast together"),
    ("item_in_if", HEAD + "class Net(nn.Module):\n    def forward(self, x):\n        if x.sum().item() > 0:\n"
     "            return x\n        return -x\n", ("--input", "x=f32[4]"),
     "7:12: error: '.item()' reads a tensor's value on the host"),
    # (an `if` on a one-element tensor with pure branches compiles to torch.where: see
    # test_train_groups.py; a `while` cannot)
    ("tensor_while", HEAD + "class Net(nn.Module):\n    def forward(self, x):\n        while x.sum() > 0:\n"
     "            x = x - 1\n        return x\n", ("--input", "x=f32[4]"),
     "7:15: error: the truth value of a tensor depends on run-time data"),
    ("tensor_if_effect", HEAD + "class Net(nn.Module):\n    def forward(self, x):\n        if x.sum() > 0:\n"
     "            print(x)\n        return -x\n", ("--input", "x=f32[4]"),
     "8:13: error: this statement depends on an `if` whose condition is a run-time tensor"),
    ("undefined_name", HEAD + "class Net(nn.Module):\n    def forward(self, x):\n        return x + y\n",
     ("--input", "x=f32[4]"), "7:20: error: name 'y' is not defined"),
    ("unknown_layer", HEAD + "class Net(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
     "        self.rnn = nn.Bilinear(2, 2, 2)\n", (), "8:20: error: 'torch.nn.Bilinear' is not supported by ctc"),
    ("no_input_shape", HEAD + "class Net(nn.Module):\n    def forward(self, x):\n        return x\n", (),
     "6:23: error: the shape of input 'x' is unknown"),
    ("reshape", HEAD + "class Net(nn.Module):\n    def forward(self, x):\n        return x.view(5, -1)\n",
     ("--input", "x=f32[4,3]"), "7:16: error: shape '[5, -1]' is invalid for input of shape [4, 3] (12 elements)"),
    ("side_effect", HEAD + "class Net(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
     "        self.n = 0\n\n    def forward(self, x):\n        self.n = 1\n        return x\n",
     ("--input", "x=f32[4]"), "11:9: error: assigning 'self.n' inside compiled code"),
    ("assert", HEAD + "N = 3\nassert N % 2 == 0, f'N must be even'\n", (),
     "6:1: error: assertion failed at compile time: N must be even"),
    ("several_models", HEAD + "class A(nn.Module):\n    pass\n\nclass B(nn.Module):\n    pass\n", (),
     "1:1: error: the file defines several nn.Module classes (A, B); choose one with --model NAME"),
    ("trunc_normal_bounds", HEAD + "class Net(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
     "        self.fc = nn.Linear(2, 2)\n        nn.init.trunc_normal_(self.fc.weight, std=0.1, a=1.0, b=-1.0)\n", (),
     "9:9: error: nn.init.trunc_normal_ needs std > 0 and a < b (got std 0.1, a 1, b -1)"),
    # (pytorch/examples' mnist_forward_forward: Net(dims) built in main())
    ("model_needs_args", HEAD + "class Net(nn.Module):\n    def __init__(self, dims, act=None):\n"
     "        super().__init__()\n", (),
     "5:1: error: ctc builds the model as Net(), and Net's __init__ needs dims: give them with --model 'Net(...)' "
     "(an expression in the file's names), or make the instance at module level (model = Net(...))"),
    ("helper_call_note", HEAD + "class Net(nn.Module):\n    def block(self, x):\n        return x @ x\n\n"
     "    def forward(self, x):\n        return self.block(x)\n", ("--input", "x=f32[2,3]"),
     "7:16: error: shape mismatch in matmul"),
]


TRAIN_HEAD = HEAD + ("class Net(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
                     "        self.fc = nn.Linear(4, 3)\n\n    def forward(self, x):\n        return self.fc(x)\n\n\n"
                     "model = Net()\noptimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n")
TRAIN_IN = ("--input", "x=f32[2,4]", "--input", "y=i64[2]")
# line numbers below: TRAIN_HEAD ends on line 15
CASES += [
    ("step_without_zero_grad", TRAIN_HEAD + "\n\ndef train_step(x, y):\n    loss = F.cross_entropy(model(x), y)\n"
     "    loss.backward()\n    optimizer.step()\n    return loss\n", TRAIN_IN,
     "21:5: error: optimizer.step() without an optimizer.zero_grad() before or after it"),
    ("backward_without_step", TRAIN_HEAD + "\n\ndef train_step(x, y):\n    optimizer.zero_grad()\n"
     "    loss = F.cross_entropy(model(x), y)\n    loss.backward()\n    return loss\n", TRAIN_IN,
     "18:1: error: 'train_step' calls backward() but no optimizer.step() uses the gradients"),
    ("backward_non_scalar", TRAIN_HEAD + "\n\ndef train_step(x, y):\n    optimizer.zero_grad()\n"
     "    model(x).backward()\n    optimizer.step()\n    return model(x).sum()\n", TRAIN_IN,
     "20:5: error: backward() without a gradient needs a scalar, but the tensor has shape [2, 3]"),
    ("loss_shapes", TRAIN_HEAD + "\n\ndef train_step(x, y):\n    optimizer.zero_grad()\n"
     "    loss = F.mse_loss(model(x), x)\n    loss.backward()\n    optimizer.step()\n    return loss\n", TRAIN_IN,
     "20:12: error: mse_loss: input [2, 3] and target [2, 4] must have the same shape"),
    ("unknown_entry", TRAIN_HEAD, ("--entry", "nope", "--input", "x=f32[2,4]"), "1:1: error: --entry nope: no module-level function of that name"),
    ("scheduler_arg", TRAIN_HEAD + "sched = torch.optim.lr_scheduler.StepLR(optimizer, step_size=0)\n", (),
     "16:9: error: step_size must be positive"),
    ("hvp_non_scalar", HEAD + "from torch.autograd.functional import hvp\n\n\ndef g(x):\n    return x * 2\n\n\n"
     "def h(x, v):\n    return hvp(g, x, v)\n", ("--input", "x=f32[3]", "--input", "v=f32[3]"),
     "13:12: error: hvp needs a function with a scalar output, but it returns shape [3]"),
    ("jvp_tangent_shape", HEAD + "from torch.autograd.functional import jvp\n\n\ndef g(x):\n    return x.sum()\n\n\n"
     "def h(x, v):\n    return jvp(g, x, v)\n", ("--input", "x=f32[3]", "--input", "v=f32[4]"),
     "13:12: error: v 0 has shape [4], expected [3]"),
]


@pytest.mark.parametrize("label,src,opts,want", CASES, ids=[c[0] for c in CASES])
def test_diagnostic(tmp_path, label, src, opts, want):
    r, path = check(tmp_path, src, *opts)
    assert r.returncode == 1, r.stderr
    assert f"{path}:{want}" in r.stderr, r.stderr
    lines = r.stderr.splitlines()
    assert any(set(l.strip()) <= set("^~") and "^" in l for l in lines), "no caret line:\n" + r.stderr


def test_note_points_at_the_call(tmp_path):
    src = next(c[1] for c in CASES if c[0] == "helper_call_note")
    r, path = check(tmp_path, src, "--input", "x=f32[2,3]")
    assert f"{path}:10:16: note: in 'block' called here" in r.stderr, r.stderr


def test_emit_to_stdout_with_dash(tmp_path):
    """`-o -` is standard output for --emit ast/ir/kernels (it once wrote a file named '-')."""
    src = "import torch\nimport torch.nn as nn\n\n\nclass Net(nn.Module):\n    def forward(self, x):\n        return x * 2\n"
    p = tmp_path / "m.py"
    p.write_text(src)
    for emit, want in (("ast", "(def forward"), ("ir", "func forward"), ("kernels", "func forward")):
        r = subprocess.run([CTC, "compile", str(p), "--input", "x=f32[2]", "--emit", emit, "-o", "-"], capture_output=True,
                           text=True, timeout=30, cwd=tmp_path)
        assert r.returncode == 0 and want in r.stdout, (emit, r.stdout[:300], r.stderr)
    assert not (tmp_path / "-").exists()


def test_opaque_init_on_a_parameter_is_noted(tmp_path):
    """An init function from a module ctc does not model (timm's trunc_normal_, as ViT and ConvNeXt
    files call it), applied to every Linear from one line: the file compiles, and one note per call
    site says the call does nothing (the parameter keeps PyTorch's default initialisation), where it
    once passed silently."""
    src = ("import torch\nfrom torch import nn\nfrom timm.models.layers import trunc_normal_\n\n\n"
           "class Net(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
           "        self.a = nn.Linear(8, 8)\n        self.b = nn.Linear(8, 4)\n        self.apply(self._init)\n\n"
           "    def _init(self, m):\n        if isinstance(m, nn.Linear):\n            trunc_normal_(m.weight, std=.02)\n\n"
           "    def forward(self, x):\n        return self.b(self.a(x))\n\n\nexample_inputs = (torch.randn(2, 8),)\n")
    r, path = check(tmp_path, src)
    assert r.returncode == 0, r.stderr
    notes = [l for l in r.stderr.splitlines() if ": note: " in l]
    assert len(notes) == 1 and notes[0].startswith(f"{path}:15:13: note: this call of the opaque value "
                                                   "'timm.models.layers.trunc_normal_'"), r.stderr
    assert "does nothing here" in notes[0], notes


def test_bad_command_lines(tmp_path):
    for args, msg in [(["frobnicate", "x.py"], "unknown command 'frobnicate'"),
                      (["compile", "x.py", "--input", "x=f32[2,,3]"], "bad --input"),
                      (["compile", "x.py", "--target", "fpga", "-o", "a.c"], "unknown --target 'fpga'"),
                      (["compile", "x.py", "--bogus"], "unknown option '--bogus'"),
                      (["compile", "x.py", "--bogus=1"], "unknown option '--bogus'"),
                      (["compile", "x.py", "--stats=yes", "-o", "a.c"], "option '--stats' takes no value (got '--stats=yes')"),
                      (["compile", "x.py", "--target=fpga", "-o", "a.c"], "unknown --target 'fpga'"),
                      (["compile", "x.py"], "'compile' needs -o OUT.c")]:
        r = subprocess.run([CTC, *args], capture_output=True, text=True, timeout=30)
        assert r.returncode == 1 and msg in r.stderr, (args, r.stderr)
    r = subprocess.run([CTC, "check", str(tmp_path / "missing.py")], capture_output=True, text=True)
    assert r.returncode == 2 and "cannot read" in r.stderr
    r = subprocess.run([CTC, "--help"], capture_output=True, text=True)
    assert r.returncode == 0 and "usage: ctc" in r.stdout


def test_options_take_their_value_after_an_equals_sign(tmp_path):
    # --name=value as --name value (GNU's long options): the same output, byte for byte
    p = tmp_path / "m.py"
    p.write_text("import torch\nimport torch.nn as nn\nimport argparse\n"
                 "ap = argparse.ArgumentParser()\nap.add_argument('--width', type=int, default=4)\n"
                 "args = ap.parse_args()\n\n\nclass Net(nn.Module):\n    def __init__(self):\n"
                 "        super().__init__()\n        self.fc = nn.Linear(3, args.width)\n\n"
                 "    def forward(self, x):\n        return self.fc(x)\n")
    outs = []
    for form in (["--args", "--width 6", "--input", "x=f32[2,3]", "--emit", "ir"],
                 ["--args=--width 6", "--input=x=f32[2,3]", "--emit=ir"]):
        r = subprocess.run([CTC, "compile", str(p), *form, "-o", "-"], capture_output=True, text=True, timeout=30)
        assert r.returncode == 0, r.stderr
        outs.append(r.stdout)
    assert outs[0] == outs[1] and "f32[6,3]" in outs[0], outs


# The fuzz run (valid seeds with their input shapes, mutated at the byte, token and AST
# level, compiled by an ASan+UBSan ctc) lives in test_fuzz_backend.py.


def test_error_in_a_layer_names_its_path_and_where_it_was_made(tmp_path):
    """A shape error inside nn.Sequential (issue 28, item 8): the notes name the layer by
    its module path as named_modules() does (stem.2) with its class, and point at the
    nn.Linear(...) that made it, then at the Sequential around it."""
    src = ("import torch\nimport torch.nn as nn\n\n\nclass M(nn.Module):\n    def __init__(self):\n"
           "        super().__init__()\n        self.stem = nn.Sequential(\n            nn.Linear(64, 32),\n"
           "            nn.ReLU(),\n            nn.Linear(100, 10),\n        )\n\n    def forward(self, x):\n"
           "        return self.stem(x)\n")
    p = tmp_path / "m.py"
    p.write_text(src)
    r = subprocess.run([CTC, "check", str(p), "--input", "x=f32[2,64]"], capture_output=True, text=True)
    assert r.returncode == 1
    lines = [l for l in r.stderr.splitlines() if ": error: " in l or ": note: " in l]
    assert lines[0].endswith("m.py:15:16: error: shape mismatch in linear layer: input [2, 32], weight [10, 100] "
                             "(expects last input dimension 100)"), r.stderr
    assert lines[1].endswith("m.py:15:16: note: in 'stem.2 (Linear)' called here"), r.stderr
    assert lines[2].endswith("m.py:11:13: note: created here"), r.stderr
    assert lines[3].endswith("m.py:15:16: note: in 'stem (Sequential)' called here"), r.stderr
    assert lines[4].endswith("m.py:8:21: note: created here"), r.stderr
