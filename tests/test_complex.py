"""Complex numbers as rotary embeddings use them (issue 30): torch.polar,
view_as_complex, view_as_real, complex products and the rest of complex.c,
each against PyTorch; a Llama-style decoder (tests/complex_files/llama_rope.py,
in the style of Meta's llama model.py) forward and AdamW steps against PyTorch;
complex buffers from __init__ and from a PyTorch checkpoint; and every use ctc
does not implement refused by name, never computed on the real storage."""
import copy
import os
import subprocess

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from ctc_testlib import CTC, ROOT, compare, ctc_build, load_module, run, run_forward, st_read, st_write, state_dict_np

FILES = os.path.join(ROOT, "tests", "complex_files")
RTOL, ATOL = 1e-4, 1e-5


def tokens(*shape, hi, seed=2):
    return np.random.default_rng(seed).integers(0, hi, shape).astype(np.int64)


def randn(*shape, seed=1):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def forward_vs_torch(tmp_path, path, model, inputs, *opts):
    model.eval()
    with torch.no_grad():
        want = model(*[torch.from_numpy(x.copy()) for x in inputs])
    got = run_forward(str(tmp_path), path, model, inputs, opts)
    return compare(os.path.basename(path), got[0], want.numpy(), RTOL, ATOL)


def test_llama_rope_forward_and_training(tmp_path):
    """Meta-style decoder: freqs_cis a plain complex attribute set in __init__,
    reassigned with .to(h.device) and sliced [start_pos : start_pos + seqlen] in
    forward; forward and 3 AdamW steps (gradients through view_as_complex, the
    complex product and view_as_real into wq/wk) match PyTorch."""
    path = os.path.join(FILES, "llama_rope.py")
    mod = load_module(path)
    torch.manual_seed(0)
    model = mod.Transformer()
    diff = forward_vs_torch(tmp_path, path, model, [tokens(2, 7, hi=37)], "--input", "tokens=i64[2,7]")
    print("forward max abs diff", diff)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    exe = str(tmp_path / "train")
    ctc_build(path, exe, "--entry", "train_step", "--input", "tokens=i64[2,7]", "--input", "targets=i64[2,7]")
    w = str(tmp_path / "w0.safetensors")
    st_write(w, state_dict_np(model))
    for k in range(3):
        batch = (tokens(2, 7, hi=37, seed=k), tokens(2, 7, hi=37, seed=10 + k))
        args = [exe, "run", "train_step", "--weights", w]
        for i, x in enumerate(batch):
            np.save(tmp_path / f"b{i}.npy", x)
            args += ["--input", str(tmp_path / f"b{i}.npy")]
        nxt = str(tmp_path / f"w{k + 1}.safetensors")
        run(args + ["--output", str(tmp_path / "loss.npy"), "--save", nxt, "--save-training-state"])
        w = nxt
        logits = model(torch.from_numpy(batch[0]))
        loss = F.cross_entropy(logits.view(-1, logits.size(-1)), torch.from_numpy(batch[1]).view(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        compare(f"loss {k}", np.load(tmp_path / "loss.npy"), loss.detach().numpy(), 1e-5, 1e-4)
    got = st_read(w)
    worst = max(compare(key, got[key], p.numpy(), 1e-3, 1e-5) for key, p in model.state_dict().items())
    print("parameters after 3 steps: max abs diff", worst)


OPS = ["polar", "complex", "mul", "mul_real", "div", "add_sub", "parts", "abs_angle", "conj_exp", "shapes",
       "to_complex"]


@pytest.fixture(scope="module")
def ops_program(tmp_path_factory):
    d = tmp_path_factory.mktemp("ops")
    exe = str(d / "ops")
    entries = [a for n in OPS for a in ("--entry", "g_" + n)]
    ctc_build(os.path.join(FILES, "complex_ops.py"), exe, *entries, "--input", "a=f32[3,4,2]", "--input", "b=f32[3,4,2]")
    return d, exe, load_module(os.path.join(FILES, "complex_ops.py"), "complex_ops")


@pytest.mark.parametrize("name", OPS)
def test_complex_op_and_gradients(ops_program, name):
    """Each operation's value (rtol 1e-4) and the gradients of a weighted sum of it
    with respect to both real inputs (rtol 1e-3), against PyTorch's complex autograd."""
    d, exe, mod = ops_program
    a, b = randn(3, 4, 2, seed=3), randn(3, 4, 2, seed=4)
    np.save(d / "a.npy", a)
    np.save(d / "b.npy", b)
    outs = [str(d / f"{name}_{k}.npy") for k in range(3)]
    run([exe, "run", "g_" + name, "--input", str(d / "a.npy"), "--input", str(d / "b.npy"),
         *[x for o in outs for x in ("--output", o)]])
    want = getattr(mod, "g_" + name)(torch.from_numpy(a.copy()), torch.from_numpy(b.copy()))
    compare(name, np.load(outs[0]), want[0].detach().numpy(), RTOL, ATOL)
    compare(name + " grad a", np.load(outs[1]), want[1].numpy(), 1e-3, 1e-5)
    compare(name + " grad b", np.load(outs[2]), want[2].numpy(), 1e-3, 1e-5)


def test_llama_rope_nonpersistent_buffer(tmp_path):
    """The derivatives' variant: the complex table a register_buffer(persistent=False)
    from __init__ (not in the state_dict, not asked of the weights file)."""
    path = os.path.join(FILES, "llama_rope.py")
    mod = load_module(path)
    torch.manual_seed(1)
    model = mod.BufferedTransformer()
    assert "rope" not in model.state_dict()
    forward_vs_torch(tmp_path, path, model, [tokens(2, 9, hi=37)], "--model", "BufferedTransformer",
                     "--input", "tokens=i64[2,9]")


def test_complex_buffer_loads_from_pytorch_checkpoint(tmp_path):
    """A persistent complex64 buffer is a state_dict entry: torch.save's
    ComplexFloatStorage loads as its float32 parts (changed after __init__ here,
    so the values come from the file), a non-persistent one from __init__."""
    path = os.path.join(FILES, "rope_buffer.py")
    mod = load_module(path)
    torch.manual_seed(0)
    net = mod.Rotary()
    with torch.no_grad():
        net.table.mul_(torch.polar(torch.ones(()), torch.tensor(0.3)))
    assert net.state_dict()["table"].dtype == torch.complex64 and "spare" not in net.state_dict()
    torch.save(net.state_dict(), tmp_path / "ckpt.pt")
    exe = str(tmp_path / "net")
    ctc_build(path, exe, "--model", "Rotary", "--input", "x=f32[2,5,16]")
    x = randn(2, 5, 16)
    np.save(tmp_path / "x.npy", x)
    run([exe, "infer", "--weights", str(tmp_path / "ckpt.pt"), "--input", str(tmp_path / "x.npy"),
         "--output", str(tmp_path / "y.npy")])
    with torch.no_grad():
        want = net(torch.from_numpy(x)).numpy()
    compare("rope_buffer", np.load(tmp_path / "y.npy"), want, RTOL, ATOL)
    # the table of __init__ (not the file's) gives other values: the file's were used
    fresh = copy.deepcopy(net)
    with torch.no_grad():
        fresh.table.copy_(mod.rope_table(8, 6))
        assert not np.allclose(np.load(tmp_path / "y.npy"), fresh(torch.from_numpy(x)).numpy(), atol=1e-3)


REFUSE_SRC = '''import torch
import torch.nn as nn
import torch.nn.functional as F


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3, 3)

    def forward(self, x):
        c = torch.view_as_complex(x)
        {line}
'''


@pytest.mark.parametrize("line,msg", [
    ("return torch.view_as_real(c).sum() + c.sum()", "13:46: error: Tensor.sum on complex tensors is not supported"),
    ("return torch.sum(c)", "13:16: error: torch.sum on complex tensors"),
    ("return torch.view_as_real(c @ c)", "'@' on complex tensors"),
    ("return x if c == c else x", "'==' on complex tensors"),
    ("return c", "a complex tensor is not supported here by ctc (as an output"),
    ("return F.relu(c)", "torch.nn.functional.relu on complex tensors"),
    ("return self.fc(c)", "nn.Linear on complex tensors"),
    ("return torch.zeros(3, dtype=torch.complex64)", "torch.zeros on complex tensors"),
    ("return c.float()", "Tensor.float on complex tensors"),
    ("return torch.view_as_real(c * x[..., 0].double())", "is complex128 in PyTorch, which ctc does not support"),
    ("c[0] = 1", "assigning into an index on complex tensors"),
    ("return torch.view_as_real(c ** 2)", "'**' on complex tensors"),
    ("return torch.view_as_real(torch.view_as_complex(x[..., :1]))", "must have a last dimension of size 2"),
    ("return torch.view_as_real(torch.cat([c, c]))", "torch.cat on complex tensors"),
    ("c += 1", "'+=' (an in-place update) on complex tensors"),
    ("return nn.Parameter(c)", "Parameter(...) on complex tensors"),
    ("return torch.view_as_real(torch.polar(x, x.double()))", "torch.polar: expected float32 abs and angle"),
    ("return torch.view_as_real(torch.polar(x.long(), x))", "torch.polar: expected float32 abs and angle"),
])
def test_complex_uses_not_implemented_are_refused(tmp_path, line, msg):
    """Anything complex ctc does not implement stops the compile at its line,
    naming the function; nothing is computed on the real storage instead."""
    p = tmp_path / "m.py"
    p.write_text(REFUSE_SRC.format(line=line))
    r = subprocess.run([CTC, "build", str(p), "-o", str(tmp_path / "net"), "--input", "x=f32[4,3,2]"],
                       capture_output=True, text=True)
    assert r.returncode == 1, r.stdout + r.stderr
    assert msg in r.stderr, r.stderr
    assert "m.py:1" in r.stderr


def test_convert_reads_complex_checkpoint_entries(tmp_path):
    """`ctc convert` of a torch.save file with a complex64 tensor (a view of a
    larger one, so strides and offset apply): read as its float32 parts, written
    back as complex64 ("C64")."""
    table = torch.polar(torch.ones(5, 6), torch.randn(5, 6))[1:, ::2]
    torch.save({"table": table, "w": torch.randn(3)}, tmp_path / "c.pt")
    run([CTC, "convert", str(tmp_path / "c.pt"), "-o", str(tmp_path / "c.safetensors")])
    got = st_read(str(tmp_path / "c.safetensors"))
    assert got["table"].shape == (4, 3) and got["table"].dtype == np.complex64
    assert (got["table"] == table.numpy()).all()


DTYPE_SRC = '''import torch
import torch.nn as nn


def rope(n, d):
    return torch.polar(torch.ones(n, d), torch.outer(torch.arange(n).float(), torch.ones(d)))


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("table", rope(4, 3), persistent=False)
        self.table = rope(4, 3) * 2
        self.double()

    def forward(self, x):
        assert x.dtype == torch.float64 and x.dtype != torch.float32
        assert self.table.dtype == torch.complex64 and self.table.is_complex()
        return x * torch.view_as_real(self.table).double()
'''


def test_dtype_comparisons_and_complex_buffers_through_module_methods(tmp_path):
    """x.dtype == torch.float32 compares dtypes (it was an error); a complex buffer
    reassigned stays complex, and module.double() leaves it complex64, as PyTorch does."""
    p = tmp_path / "m.py"
    p.write_text(DTYPE_SRC)
    mod = load_module(str(p), "dtype_src")
    net = mod.Net()
    x = np.random.default_rng(0).standard_normal((4, 3, 2))
    got = run_forward(str(tmp_path), str(p), net, [x], ("--input", "x=f64[4,3,2]"))
    compare("dtype_src", got[0], net(torch.from_numpy(x)).numpy(), 1e-12, 1e-12)


def test_scaled_rope_table_built_by_a_loop_in_init(tmp_path):
    """Llama 3's table: `if` on 0-d compile-time tensors and torch.tensor of a list of
    them in __init__ (both errors before); all three branches are taken."""
    path = os.path.join(FILES, "scaled_rope.py")
    mod = load_module(path)
    freqs = 1.0 / (500000.0 ** (torch.arange(0, 16, 2).float() / 16))
    waves = 2 * np.pi / freqs.numpy()
    assert (waves < 16).any() and (waves > 64).any() and ((waves >= 16) & (waves <= 64)).any()
    torch.manual_seed(0)
    forward_vs_torch(tmp_path, path, mod.Net(), [randn(2, 5, 16)], "--input", "x=f32[2,5,16]")


@pytest.mark.parametrize("ext", [".pt", ".safetensors"])
def test_saved_complex_buffer_loads_strictly_in_pytorch(tmp_path, ext):
    """`--save` writes a persistent complex64 buffer as complex64 (ComplexFloatStorage in .pt,
    "C64" in safetensors) of its logical shape: PyTorch's strict load_state_dict takes the
    file back, values equal; and the program reads its own file again."""
    path = os.path.join(FILES, "rope_buffer.py")
    mod = load_module(path)
    torch.manual_seed(0)
    net = mod.Rotary()
    with torch.no_grad():
        net.table.mul_(torch.polar(torch.ones(()), torch.tensor(0.7)))
    torch.save(net.state_dict(), tmp_path / "ckpt.pt")
    exe = str(tmp_path / "net")
    ctc_build(path, exe, "--model", "Rotary", "--input", "x=f32[2,5,16]")
    np.save(tmp_path / "x.npy", randn(2, 5, 16))
    out = tmp_path / ("saved" + ext)
    run([exe, "run", "forward", "--weights", tmp_path / "ckpt.pt", "--input", tmp_path / "x.npy", "--output",
         tmp_path / "y0.npy", "--save", out])
    if ext == ".pt":
        sd = torch.load(out)
    else:
        data = open(out, "rb").read()
        n = int.from_bytes(data[:8], "little")
        header = __import__("json").loads(data[8:8 + n])
        assert header["table"]["dtype"] == "C64" and header["table"]["shape"] == [6, 4], header["table"]
        sd = {k: torch.from_numpy(v.copy()) for k, v in st_read(str(out)).items()}
    assert sd["table"].dtype == torch.complex64 and tuple(sd["table"].shape) == (6, 4)
    back = mod.Rotary()
    back.load_state_dict(sd, strict=True)
    for k, v in net.state_dict().items():
        assert torch.equal(back.state_dict()[k], v), k
    # the program's own file loads back as its weights: the same output
    run([exe, "run", "forward", "--weights", out, "--input", tmp_path / "x.npy", "--output", tmp_path / "y1.npy"])
    assert np.array_equal(np.load(tmp_path / "y0.npy"), np.load(tmp_path / "y1.npy"))


def test_complex_file_tensor_into_a_real_parameter_is_refused(tmp_path):
    """A complex64 entry where the model has a float32 parameter: an error naming it (as PyTorch's load)."""
    path = os.path.join(FILES, "rope_buffer.py")
    mod = load_module(path)
    net = mod.Rotary()
    sd = net.state_dict()
    sd["proj.bias"] = torch.view_as_complex(torch.zeros(16, 2))
    torch.save(sd, tmp_path / "bad.pt")
    exe = str(tmp_path / "net")
    ctc_build(path, exe, "--model", "Rotary", "--input", "x=f32[2,5,16]")
    np.save(tmp_path / "x.npy", randn(2, 5, 16))
    r = run([exe, "infer", "--weights", tmp_path / "bad.pt", "--input", tmp_path / "x.npy"], check=False)
    assert r.returncode != 0 and "tensor 'proj.bias' is complex64, expected f32" in r.stderr, r.stderr
