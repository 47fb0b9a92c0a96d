"""Autocast's saved activations stored as bf16 / f16 (ir/lowstore.c, docs/mixed-precision.md).

A training step under autocast (or of a .bfloat16() / .half() model) keeps the rounded values
that backward reads as 16-bit copies; backward reads them through casts back to float32. The
values are the same numbers, so every test here builds the file twice, with and without
`--no-low-store`, and requires the same bits after several training steps, and a smaller
arena. (How close the training is to PyTorch is test_autocast.py's, test_grad_scaler.py's and
test_half_model.py's: they run with the copies, the default.)"""
import re

import numpy as np
import pytest
import torch

from ctc_testlib import CTC, load_module, run, st_read, st_write
from test_autocast import GPT, GPT_TRAIN, HEAD, first_loss_ok
from test_grad_scaler import GPT_SCALER
from test_half_model import TRAIN as HALF_TRAIN

GPT_EXAMPLE = '\nexample_inputs = {"forward": (torch.zeros(4, T, dtype=torch.long),), "train_step": ' \
              '(torch.zeros(4, T, dtype=torch.long), torch.zeros(4, T, dtype=torch.long))}\n'

# the training step of the files below: forward and loss under autocast, as PyTorch's AMP recipe
AUTOCAST_STEP = '''

def train_step(x, y):
    optimizer.zero_grad()
    with torch.autocast(device_type="cpu", dtype=torch.bfloat16):
        loss = F.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()
    return loss
'''

# A user's CIFAR-style block under autocast: convolutions, BatchNorm of their bf16 outputs, a
# residual add, AdamW
CNN = HEAD + '''
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 16, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(16)
        self.conv2 = nn.Conv2d(16, 16, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(16)
        self.fc = nn.Linear(16, 10)

    def forward(self, x):
        h = F.relu(self.bn1(self.conv1(x)))
        h = F.relu(self.bn2(self.conv2(h)) + h)
        return self.fc(F.adaptive_avg_pool2d(h, 1).flatten(1))


model = Net()
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)

''' + AUTOCAST_STEP + '''

example_inputs = {"forward": (torch.zeros(8, 3, 16, 16),),
                  "train_step": (torch.zeros(8, 3, 16, 16), torch.zeros(8, dtype=torch.long))}
'''

rng = np.random.default_rng(3)
CASES = {   # the file, its name, and (x, y) batches for 4 steps
    "gpt_bf16": (GPT_TRAIN + GPT_EXAMPLE, "gpt",
                 [(rng.integers(0, 32, (4, 8)), rng.integers(0, 32, (4, 8))) for _ in range(4)]),
    "gpt_f16_scaler": (GPT + "\ntorch.manual_seed(0)\n" + GPT_SCALER, "gpt",
                       [(rng.integers(0, 32, (4, 8)), rng.integers(0, 32, (4, 8))) for _ in range(4)]),
    "cnn_bf16": (CNN, "cnn",
                 [(rng.standard_normal((8, 3, 16, 16)).astype(np.float32), rng.integers(0, 10, 8)) for _ in range(4)]),
    "bfloat16_model": (HALF_TRAIN.replace("OPT", "torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)") +
                       '\nexample_inputs = {"forward": (torch.zeros(64, 20).bfloat16(),), '
                       '"train_step": (torch.zeros(64, 20), torch.zeros(64, dtype=torch.long))}\n', "half",
                       [(rng.standard_normal((64, 20)).astype(np.float32), rng.integers(0, 5, 64)) for _ in range(4)]),
}


def arena(exe):
    return int(re.search(r"arena: (\d+) bytes", run([exe, "info"]).stdout).group(1))


def steps(tmp, exe, batches, tag):
    """`./net run train_step` over the batches, the training state carried by --save-training-state:
    each step's saved tensors and loss."""
    out, w = [], None
    for i, (x, y) in enumerate(batches):
        np.save(tmp / "x.npy", x)
        np.save(tmp / "y.npy", y)
        nxt = tmp / f"{tag}{i}.safetensors"
        run([exe, "run", "train_step", *(["--weights", w] if w else []), "--input", tmp / "x.npy", "--input",
             tmp / "y.npy", "--output", tmp / "l.npy", "--save", nxt, "--save-training-state"])
        out.append((st_read(nxt), np.load(tmp / "l.npy")))
        w = nxt
    return out


@pytest.mark.parametrize("case,target", [(c, "c") for c in sorted(CASES)] + [("gpt_bf16", "cuda")])
def test_same_bits_as_float32_storage(tmp_path, case, target):
    """Four training steps with the 16-bit copies and without (--no-low-store): the same losses
    and the same bits in every parameter and optimizer state after each step (and the GradScaler's
    scale and skipped steps, which follow from them); the copies make the arena smaller. The CUDA
    target's too, under the emulation header (no GPU here)."""
    src, name, batches = CASES[case]
    p = tmp_path / f"{name}.py"
    p.write_text(src)
    exes = {}
    cuda = ["--target", "cuda", "--emulate"] if target == "cuda" else []
    for tag, opts in (("low", []), ("f32", ["--no-low-store"])):
        exes[tag] = tmp_path / f"net_{tag}"
        run([CTC, "build", p, "-o", exes[tag], "--entry", "train_step", *cuda, *opts], timeout=600)
    got = {tag: steps(tmp_path, exe, batches, tag) for tag, exe in exes.items()}
    for s, ((a, la), (b, lb)) in enumerate(zip(got["low"], got["f32"])):
        assert la.tobytes() == lb.tobytes(), f"step {s}: loss {la} != {lb}"
        assert a.keys() == b.keys()
        for k in a:
            assert a[k].tobytes() == b[k].tobytes(), f"step {s}: {k} differs"
    low, f32 = arena(exes["low"]), arena(exes["f32"])
    print(f"{case}: arena {f32} bytes with float32 copies, {low} with 16-bit ones")
    assert low < f32
    if target == "c":
        c = (tmp_path / "net_low.c").read_text()
        dt = "f16" if case == "gpt_f16_scaler" else "bf16"
        assert re.search(rf"uint16_t \*(restrict )?\w+ = \(uint16_t \*\)\(A \+ \d+\);  /\* {dt}\[", c), \
            "no activation stored as 16-bit"


MLP = HEAD + '''
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(64, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        return self.fc2(F.gelu(self.fc1(x)))


model = Net()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)

''' + AUTOCAST_STEP + '''

example_inputs = {"forward": (torch.zeros(32, 64),), "train_step": (torch.zeros(32, 64), torch.zeros(32, dtype=torch.long))}
'''


def train_ir(tmp_path, *opts):
    p = tmp_path / "mlp.py"
    p.write_text(MLP)
    return run([CTC, "compile", p, "--entry", "train_step", "--emit", "ir", *opts]).stdout


def test_what_is_stored(tmp_path):
    """The MLP's train step: fc1's rounded output (gelu's input), the rounded input x and gelu's
    rounded output (the GEMMs' operands for the weight gradients) and fc2's rounded weight (for
    the input gradient) and fc2's rounded logits (log_softmax's backward) get bf16 copies;
    backward reads casts of them. Without the copies reverse mode recomputes fc1's rounding from
    the float32 GEMM output (rematerialisation, autograd_ad/remat.c), which would keep 4 bytes an
    element; with them it reads the stored 2-byte copy. --target cuda makes the same copies."""
    ir = train_ir(tmp_path)
    copies = re.findall(r"%(\S+) = cast %(\S+) : bf16\[([\d,]+)\]", ir)
    assert sorted(s for _, _, s in copies) == ["10,128", "32,10", "32,128", "32,128", "32,64"], copies
    for name, _, _ in copies:
        assert re.search(rf"= cast %{re.escape(name)} : f32\[", ir), f"backward reads no cast of {name}"
    bwd = ir[ir.index("grad."):]
    assert "matmul" in bwd and not re.search(r"round_bf16 %add\.", bwd), "backward recomputes fc1's rounding"
    plain = train_ir(tmp_path, "--no-low-store")
    assert ": bf16[" not in plain
    assert re.search(r"round_bf16 %add\.\d+ : f32\[32,128\]", plain[plain.index("grad."):])
    assert sorted(re.findall(r"= cast %\S+ : bf16\[([\d,]+)\]", train_ir(tmp_path, "--target", "cuda"))) == \
        sorted(s for _, _, s in copies)


def test_pass_can_be_dumped(tmp_path):
    p = tmp_path / "mlp.py"
    p.write_text(MLP)
    err = run([CTC, "compile", p, "--entry", "train_step", "-o", tmp_path / "m.c", "--dump-after", "low_store"]).stderr
    assert "; ---- IR of train_step after low_store ----" in err and ": bf16[" in err


def test_batch_chosen_at_run_time(tmp_path):
    """A batch chosen at run time stages the entry at sizes from --max up and requires the same
    code at each: what gets a copy does not depend on a value's size (15 x 64 elements and 16 x
    64 are copied alike), and the program's losses at a smaller batch equal the fixed-size
    build's at that batch."""
    p = tmp_path / "mlp.py"
    p.write_text(MLP)
    run([CTC, "build", p, "-o", tmp_path / "var", "--entry", "train_step", "--input", "x=f32[N,64]", "--input",
         "y=i64[N]", "--max", "N=15"])
    run([CTC, "build", p, "-o", tmp_path / "fixed", "--entry", "train_step", "--input", "x=f32[9,64]", "--input",
         "y=i64[9]"])
    r = np.random.default_rng(0)
    batches = [(r.standard_normal((9, 64)).astype(np.float32), r.integers(0, 10, 9)) for _ in range(2)]
    a, b = steps(tmp_path, tmp_path / "var", batches, "v"), steps(tmp_path, tmp_path / "fixed", batches, "f")
    for (wa, la), (wb, lb) in zip(a, b):
        assert la.tobytes() == lb.tobytes() and all(wa[k].tobytes() == wb[k].tobytes() for k in wa)


WIDE = HEAD + '''
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(256, 512)
        self.fc2 = nn.Linear(512, 256)

    def forward(self, x):
        return self.fc2(F.relu(self.fc1(x)))


model = Net().bfloat16()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)


def train_step(x, y):
    optimizer.zero_grad()
    loss = F.mse_loss(model(x.bfloat16()).float(), y)
    loss.backward()
    optimizer.step()
    return loss


example_inputs = {"forward": (torch.zeros(4, 256).bfloat16(),), "train_step": (torch.zeros(4, 256), torch.zeros(4, 256))}
'''


def test_bfloat16_model_keeps_no_float32_weights(tmp_path):
    """A .bfloat16() model's GEMMs read float32 copies of its weights, one cast per entry.
    Backward (dx = g W) and the optimizer (W - lr * update) read casts of the bf16 parameters of
    their own instead of the forward's copies, which lived to the end of the step: with a batch
    of 4, those copies (1 MiB for these 262,144 weights) were most of the arena. Same bits."""
    p = tmp_path / "wide.py"
    p.write_text(WIDE)
    exes = {}
    for tag, opts in (("low", []), ("f32", ["--no-low-store"])):
        exes[tag] = tmp_path / f"net_{tag}"
        run([CTC, "build", p, "-o", exes[tag], "--entry", "train_step", *opts])
    r = np.random.default_rng(4)
    batches = [(r.standard_normal((4, 256)).astype(np.float32), r.standard_normal((4, 256)).astype(np.float32))
               for _ in range(3)]
    a, b = steps(tmp_path, exes["low"], batches, "l"), steps(tmp_path, exes["f32"], batches, "f")
    for (wa, la), (wb, lb) in zip(a, b):
        assert la.tobytes() == lb.tobytes() and all(wa[k].tobytes() == wb[k].tobytes() for k in wa)
    weights_f32 = (256 * 512 * 2) * 4
    saved = {}
    for tag, opts in (("low", []), ("f32", ["--no-low-store"])):
        err = run([CTC, "compile", p, "--entry", "train_step", "-o", tmp_path / "s.c", "--stats", *opts]).stderr
        saved[tag] = int(re.search(r"entry train_step: activations \d+ bytes; .*saved activations (\d+)", err).group(1))
    print(f"arena {arena(exes['f32'])} -> {arena(exes['low'])} bytes; saved activations at the busiest kernel "
          f"{saved['f32']} -> {saved['low']}")
    assert saved["f32"] >= weights_f32 and saved["low"] == 0
    assert arena(exes["low"]) < arena(exes["f32"])
    ir = run([CTC, "compile", p, "--entry", "train_step", "--emit", "ir"]).stdout
    ir = ir[ir.index("func train_step"):]
    # fc2's weight: read as float32 three times (forward, backward, the update), each a cast of the parameter
    param = re.search(r"%(\S+) = param \"fc2\.weight\" : bf16", ir).group(1)
    assert len(re.findall(rf"= cast %{re.escape(param)} : f32\[256,512\]", ir)) == 3


def test_forward_only_entries_unchanged(tmp_path):
    """An entry without backward (inference under autocast) gets no copies: its rounded values
    live only as long as forward reads them."""
    p = tmp_path / "mlp.py"
    p.write_text(MLP + '''

def infer(x):
    with torch.autocast(device_type="cpu", dtype=torch.bfloat16):
        return model(x)
''')
    ir = run([CTC, "compile", p, "--entry", "infer", "--input", "x=f32[32,64]", "--emit", "ir"]).stdout
    assert "round_bf16" in ir and ": bf16[" not in ir


def test_matches_pytorch_after_the_copies(tmp_path):
    """The CNN's first step with the copies against PyTorch 1.13's autocast: the loss (a forward)
    within float32 rounding of PyTorch's, and the updated weights no further from PyTorch's bf16
    step than PyTorch's bf16 step is from its f32 one."""
    p = tmp_path / "cnn.py"
    p.write_text(CNN)
    exe = tmp_path / "net"
    run([CTC, "build", p, "-o", exe, "--entry", "train_step"])
    mod = load_module(p, "low_store_cnn")
    torch.manual_seed(0)
    init = {k: v.clone() for k, v in mod.Net().state_dict().items()}
    st_write(tmp_path / "w.safetensors", {k: v.numpy() for k, v in init.items()})
    x, y = CASES["cnn_bf16"][2][0]
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", y)
    run([exe, "run", "train_step", "--weights", tmp_path / "w.safetensors", "--input", tmp_path / "x.npy", "--input",
         tmp_path / "y.npy", "--output", tmp_path / "l.npy", "--save", tmp_path / "s.safetensors"])
    got, loss = st_read(tmp_path / "s.safetensors"), float(np.load(tmp_path / "l.npy"))

    def torch_step(autocast):
        m = mod.Net()
        m.load_state_dict(init)
        opt = torch.optim.AdamW(m.parameters(), lr=1e-2)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            l = F_ce(m(torch.from_numpy(x)), torch.from_numpy(y))
        l.backward()
        opt.step()
        return {k: v.double().numpy() for k, v in m.state_dict().items()}, float(l)
    F_ce = torch.nn.functional.cross_entropy
    bf, loss_bf = torch_step(True)
    f32, loss32 = torch_step(False)
    # PyTorch 1.13's bf16 kernels round differently on its AVX2 dispatch (first_loss_ok, the f32
    # loss standing for the float64 one; an AVX2-only Zen 3: 1.4e-4 apart)
    assert first_loss_ok(loss, loss_bf, loss32), (loss, loss_bf, loss32)
    keys = [k for k in bf if "num_batches" not in k]
    d = np.sqrt(sum(((got[k] - bf[k]) ** 2).sum() for k in keys))
    d_ref = np.sqrt(sum(((bf[k] - f32[k]) ** 2).sum() for k in keys))
    print(f"after one AdamW step: |ctc - torch bf16| {d:.3g}, |torch bf16 - torch f32| {d_ref:.3g}")
    assert d <= d_ref
