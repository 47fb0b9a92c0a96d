"""The training loop people write (pytorch/examples' mnist layout): the body of
`for batch_idx, (data, target) in enumerate(train_loader):` in
`train(args, model, device, train_loader, optimizer, epoch)` is the training
entry, the body of test()'s loop an evaluation entry whose sums `./net train`
adds up over the test set; the model, optimizer and scheduler are the ones
main() builds. Compared with PyTorch running the file's own train() and the same
sums (rtol 1e-4, float32); torchvision is stubbed on the PyTorch side only."""
import os
import re
import subprocess
import sys
import types
from unittest import mock

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from ctc_testlib import CTC, ROOT, compare, load_module, run, st_read, st_write, state_dict_np

FILE = os.path.join(ROOT, "tests", "user_files", "mnist_loop.py")
RTOL, ATOL = 1e-4, 1e-5
B = 4


def load_with_stubs(path):
    stubs = {n: mock.MagicMock(name=n) for n in ("torchvision", "torchvision.datasets", "torchvision.transforms")}
    with mock.patch.dict(sys.modules, stubs), mock.patch.object(sys, "argv", ["main.py"]):
        return load_module(path, "loop_user_file")


def ctc(*args):
    return subprocess.run([CTC, *map(str, args)], capture_output=True, text=True, timeout=120)


def data(n, seed):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((n, 1, 12, 12)).astype(np.float32), rng.integers(0, 10, n).astype(np.int64)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    d = tmp_path_factory.mktemp("loop")
    exe = d / "net"
    run([CTC, "build", FILE, "-o", exe, "--input", f"data=f32[{B},1,12,12]"])
    return d, exe


def test_check_lists_entries_and_notes():
    r = ctc("check", FILE, "--input", f"data=f32[{B},1,12,12]")
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert "entry forward -> f32[4,10]" in out   # forward's input from data's --input (model(data))
    assert "entry train -> f32[]" in out
    assert "entry test -> f32[], i64[]" in out
    assert "entry scheduler_step ->" in out      # StepLR, built in main() and stepped in its epoch loop
    assert "note: line 37 (if) runs on the host only; dropped from the compiled entry 'train'" in out
    for line in (56, 57, 58):
        assert f"note: line {line} (after the loop) runs on the host only; dropped from the compiled entry 'test'" in out


def test_train_matches_pytorch(built):
    """./net train for 2 epochs of 3 batches (--no-shuffle), the scheduler stepped
    after each epoch, test loss and accuracy from the evaluation entry on a test
    set whose last batch is partial; PyTorch runs the file's own train() on a
    DataLoader of the same batches, StepLR stepped in the epoch loop."""
    d, exe = built
    mod = load_with_stubs(FILE)
    torch.manual_seed(0)
    model = mod.SmallNet()
    st_write(d / "init.safetensors", state_dict_np(model))
    x, y = data(3 * B, 1)
    tx, ty = data(10, 2)   # 10 = 2 batches + 2 samples: padded with label -100
    for name, a in (("x", x), ("y", y), ("tx", tx), ("ty", ty)):
        np.save(d / f"{name}.npy", a)
    r = run([exe, "train", "--weights", d / "init.safetensors", "--data", d / "x.npy", "--labels", d / "y.npy",
             "--test-data", d / "tx.npy", "--test-labels", d / "ty.npy", "--epochs", 2, "--no-shuffle",
             "--save", d / "out.safetensors", "--save-training-state", "--log", d / "log.csv"])
    epochs = re.findall(r"^epoch (\d): loss ([0-9.]+), .*test accuracy ([0-9.]+)%, test loss ([0-9.]+)$", r.stdout, re.M)
    assert len(epochs) == 2, r.stdout

    optimizer = torch.optim.Adadelta(model.parameters(), lr=1.0)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.7)
    args = types.SimpleNamespace(log_interval=10, dry_run=False)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.from_numpy(x), torch.from_numpy(y)),
                                         batch_size=B)
    losses = []
    orig = F.nll_loss
    with mock.patch.object(mod.F, "nll_loss", lambda *a, **k: losses.append(orig(*a, **k)) or losses[-1]):
        for epoch in (1, 2):
            mod.train(args, model, "cpu", loader, optimizer, epoch)
            model.eval()
            with torch.no_grad():
                out = model(torch.from_numpy(tx))
                want_loss = orig(out, torch.from_numpy(ty), reduction="sum").item() / len(tx)
                want_acc = (out.argmax(1) == torch.from_numpy(ty)).sum().item() / len(tx)
            _, _, acc, tloss = epochs[epoch - 1]
            assert abs(float(tloss) - want_loss) <= 1e-4 * want_loss + 1e-6, (epoch, tloss, want_loss)
            assert abs(float(acc) - 100 * want_acc) < 0.006, (epoch, acc, want_acc)
            scheduler.step()
    got = st_read(d / "out.safetensors")
    for k, v in model.state_dict().items():
        compare(f"after 6 steps: {k}", got[k], v.numpy(), RTOL, ATOL)
    assert abs(float(got["optimizer.lr"]) - optimizer.param_groups[0]["lr"]) < 1e-7   # 0.7 ** 2
    log = np.loadtxt(d / "log.csv", delimiter=",", skiprows=1)
    compare("losses", log[:, 2], np.array([l.item() for l in losses]), RTOL, ATOL)


def test_eval_entry_matches_pytorch(built, tmp_path):
    """The evaluation entry on one batch: test()'s loss sum and correct count."""
    d, exe = built
    mod = load_with_stubs(FILE)
    torch.manual_seed(3)
    model = mod.SmallNet().eval()
    st_write(tmp_path / "w.safetensors", state_dict_np(model))
    x, y = data(B, 5)
    y[:2] = model(torch.from_numpy(x[:2])).argmax(1).numpy()   # some correct predictions
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", y)
    run([exe, "run", "test", "--weights", tmp_path / "w.safetensors", "--input", tmp_path / "x.npy",
         "--input", tmp_path / "y.npy", "--output", tmp_path / "l.npy", "--output", tmp_path / "c.npy"])
    with torch.no_grad():
        out = model(torch.from_numpy(x))
    compare("loss sum", np.load(tmp_path / "l.npy"), F.nll_loss(out, torch.from_numpy(y), reduction="sum").numpy(),
            RTOL, ATOL)
    c = np.load(tmp_path / "c.npy")
    assert c.dtype == np.int64 and int(c) == int((out.argmax(1) == torch.from_numpy(y)).sum()) >= 2


LOOP = """import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.tensorboard import SummaryWriter


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(6, 3)

    def forward(self, x):
        return self.fc(x)


model = Net()
criterion = nn.CrossEntropyLoss()
opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
writer = SummaryWriter()


def fit(model, loader, opt, epoch):
    total = 0
    losses = []
    for LOOPHEAD:
        opt.zero_grad()
        loss = criterion(model(x.cuda()), y.cuda())
        loss.backward()
        opt.step()
        BODY
    return total


for epoch in range(3):
    fit(model, [], opt, epoch)
"""


@pytest.mark.parametrize("head", ["i, (x, y) in enumerate(loader)", "x, y in loader"])
def test_module_level_driver(tmp_path, head):
    """A call fit(model, loader, opt, epoch) at module level (its loop already ran,
    over nothing), nn.CrossEntropyLoss gives the target's dtype, .cuda() is a no-op;
    one step matches PyTorch's."""
    p = tmp_path / "m.py"
    p.write_text(LOOP.replace("LOOPHEAD", head).replace("BODY", "total += loss.item()"))
    r = ctc("check", p, "--input", "x=f32[5,6]")
    assert r.returncode == 0, r.stderr
    assert "entry fit -> f32[]" in r.stdout
    assert "note: line 30 (a running total of .item()) runs on the host only; dropped from the compiled entry 'fit'" in r.stdout
    if not head.startswith("i,"):
        return   # one build is enough
    exe = tmp_path / "net"
    run([CTC, "build", p, "-o", exe, "--input", "x=f32[5,6]"])
    torch.manual_seed(0)
    model = torch.nn.Linear(6, 3)
    st_write(tmp_path / "w.safetensors", {"fc." + k: v for k, v in state_dict_np(model).items()})
    x, y = np.random.default_rng(0).standard_normal((5, 6)).astype(np.float32), np.array([0, 2, 1, 1, 0])
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", y)
    run([exe, "run", "fit", "--weights", tmp_path / "w.safetensors", "--input", tmp_path / "x.npy", "--input",
         tmp_path / "y.npy", "--save", tmp_path / "out.safetensors", "--save-training-state"])
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    opt.zero_grad()
    torch.nn.functional.cross_entropy(model(torch.from_numpy(x)), torch.from_numpy(y)).backward()
    opt.step()
    got = st_read(tmp_path / "out.safetensors")
    for k, v in model.state_dict().items():
        compare(k, got["fc." + k], v.detach().numpy(), RTOL, ATOL)


@pytest.mark.parametrize("body,what,line", [
    ("print('loss', loss.item())", "print", 30),
    ("losses.append(loss.item())", ".item()", 30),
    ("writer.add_scalar('loss', loss, epoch)", "a call of writer", 30),
    ("if epoch > 2:\n            break", "if", 30),
])
def test_notes(tmp_path, body, what, line):
    p = tmp_path / "m.py"
    p.write_text(LOOP.replace("LOOPHEAD", "x, y in loader").replace("BODY", body))
    r = ctc("check", p, "--input", "x=f32[5,6]")
    assert r.returncode == 0, r.stderr
    assert f"note: line {line} ({what}) runs on the host only; dropped from the compiled entry 'fit'" in r.stdout


@pytest.mark.parametrize("body,msg", [
    ("opt.param_groups[0]['lr'] = 0.1 * loss.item()",
     "30:43: error: '.item()' reads a tensor's value on the host, which the loop body compiled as entry 'fit' "
     "cannot do"),
    ("if i % 2 == 0:\n            opt.step()",
     "30:12: error: a condition in compiled code needs the batch index 'i' (a host value: the compiled loop body runs once per "
     "batch and does not get it)"),
    ("loss = loss * epoch",
     "30:16: error: '*' on a tensor needs the value of parameter 'epoch' of 'fit', which the call at line 35 passes "
     "from a loop variable of its driver (a host value the compiled entry does not get)"),
])
def test_host_values_in_the_loop_body(tmp_path, body, msg):
    p = tmp_path / "m.py"
    p.write_text(LOOP.replace("LOOPHEAD", "i, (x, y) in enumerate(loader)").replace("BODY", body))
    r = ctc("check", p, "--input", "x=f32[5,6]")
    assert r.returncode == 1, r.stdout
    assert f"{p}:{msg}" in r.stderr, r.stderr


EVAL = """import torch
import torch.nn as nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(6, 3)

    def forward(self, x):
        return self.fc(x)


model = Net()
criterion = nn.CrossEntropyLoss()


def evaluate(model, loader):
    model.eval()
    correct = 0
    total = 0
    loss_sum = 0.0
    with torch.no_grad():
        for inputs, labels in loader:
            outputs = model(inputs)
            loss_sum += criterion(outputs, labels).item() * inputs.size(0)
            _, predicted = torch.max(outputs, 1)
            total += labels.size(0)
            correct += (predicted == labels).sum().item()
    return loss_sum / total, correct / total
"""


def test_tutorial_style_evaluation(tmp_path):
    """`loss_sum += criterion(...).item() * inputs.size(0)` (the .item()s go, the
    sum stays a tensor), `total += labels.size(0)` (a number: not an output),
    `correct += (predicted == labels).sum().item()`; the labels' dtype from the
    criterion. The entry's sums on one batch match PyTorch's."""
    p = tmp_path / "m.py"
    p.write_text(EVAL)
    r = ctc("check", p, "--input", "inputs=f32[5,6]")
    assert r.returncode == 0, r.stderr
    assert "entry evaluate -> f32[], i64[]" in r.stdout
    assert "note: line 30 (after the loop) runs on the host only; dropped from the compiled entry 'evaluate'" in r.stdout
    exe = tmp_path / "net"
    run([CTC, "build", p, "-o", exe, "--input", "inputs=f32[5,6]"])
    torch.manual_seed(1)
    lin = torch.nn.Linear(6, 3)
    st_write(tmp_path / "w.safetensors", {"fc." + k: v for k, v in state_dict_np(lin).items()})
    x = np.random.default_rng(4).standard_normal((5, 6)).astype(np.float32)
    with torch.no_grad():
        out = lin(torch.from_numpy(x))
    y = out.argmax(1).numpy().copy()
    y[0] = (y[0] + 1) % 3   # 4 of 5 correct
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", y)
    run([exe, "run", "evaluate", "--weights", tmp_path / "w.safetensors", "--input", tmp_path / "x.npy", "--input",
         tmp_path / "y.npy", "--output", tmp_path / "l.npy", "--output", tmp_path / "c.npy"])
    want = F.cross_entropy(out, torch.from_numpy(y)).item() * 5
    compare("loss sum", np.load(tmp_path / "l.npy"), np.float32(want), RTOL, ATOL)
    assert int(np.load(tmp_path / "c.npy")) == 4


DRIVER = """import torch
import torch.nn as nn
import torch.nn.functional as F


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(6, 3)

    def forward(self, x):
        return self.fc(x)


def train(model, loader, optimizer, scale):
    for x, y in loader:
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x), y) * SCALE
        loss.backward()
        optimizer.step()


def main():
    cfg = load_config('cfg.yaml')
    scale = cfg.scale
    model = Net()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(3):
        train(model, None, optimizer, scale)


if __name__ == '__main__':
    main()
"""


@pytest.mark.parametrize("scale,ok", [("1.0", True), ("scale", False)])
def test_driver_statement_that_fails(tmp_path, scale, ok):
    """main()'s statements run at compile time as far as they can: one that fails
    (an undefined load_config) leaves its names opaque, an error only where the
    compiled entry needs them, naming the line and why."""
    p = tmp_path / "m.py"
    p.write_text(DRIVER.replace("SCALE", scale))
    r = ctc("check", p, "--input", "x=f32[5,6]")
    if ok:
        assert r.returncode == 0, r.stderr
        assert "entry train -> f32[]" in r.stdout and "2 tensors" in r.stdout
        assert "training state 1 values in 1 tensors" in r.stdout   # optimizer.step
        return
    assert r.returncode == 1
    assert (f"{p}:18:16: error: '*' on a tensor needs the value of 'cfg', which line 24 could not compute at compile "
            "time (name 'load_config' is not defined)") in r.stderr, r.stderr
    assert f"{p}:24:5: note: the opaque value 'cfg' was made here" in r.stderr


VAE = """import torch
import torch.nn as nn
import torch.nn.functional as F
from tqdm import tqdm


class VAE(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(784, 40)
        self.fc21 = nn.Linear(40, 8)
        self.fc22 = nn.Linear(40, 8)
        self.fc3 = nn.Linear(8, 40)
        self.fc4 = nn.Linear(40, 784)

    def encode(self, x):
        h1 = F.relu(self.fc1(x))
        return self.fc21(h1), self.fc22(h1)

    def reparameterize(self, mu, logvar):
        std = torch.exp(0.5 * logvar)
        eps = torch.zeros_like(std)
        return mu + eps * std

    def decode(self, z):
        return torch.sigmoid(self.fc4(F.relu(self.fc3(z))))

    def forward(self, x):
        mu, logvar = self.encode(x.view(-1, 784))
        z = self.reparameterize(mu, logvar)
        return self.decode(z), mu, logvar


model = VAE()
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)


def loss_function(recon_x, x, mu, logvar):
    BCE = F.binary_cross_entropy(recon_x, x.view(-1, 784), reduction='sum')
    KLD = -0.5 * torch.sum(1 + logvar - mu.pow(2) - logvar.exp())
    return BCE + KLD


def train(epoch, train_loader):
    model.train()
    train_loss = 0
    for batch_idx, (data, _) in enumerate(tqdm(train_loader)):
        optimizer.zero_grad()
        recon_batch, mu, logvar = model(data)
        loss = loss_function(recon_batch, data, mu, logvar)
        loss.backward()
        train_loss += loss.item()
        optimizer.step()
    print('====> Epoch: {} Average loss: {:.4f}'.format(epoch, train_loss / len(train_loader.dataset)))
"""


def test_unused_batch_variable_and_tqdm(tmp_path):
    """`for batch_idx, (data, _) in enumerate(tqdm(train_loader))` (vae's loop, with a
    progress bar): `_` is unused, so it is an i64[B] input the driver's --labels feed;
    forward's input from data's --input (model(data)); train(epoch, train_loader) with
    the module-level model and optimizer and no call site."""
    p = tmp_path / "vae.py"
    p.write_text(VAE)
    r = ctc("check", p, "--input", "data=f32[16,1,28,28]")
    assert r.returncode == 0, r.stderr
    assert "entry forward -> f32[16,784], f32[16,8], f32[16,8]" in r.stdout
    assert "entry train -> f32[]" in r.stdout
    assert "note: line 52 (a running total of .item()) runs on the host only" in r.stdout
    r = ctc("compile", p, "--input", "data=f32[16,1,28,28]", "--emit", "ir")
    assert "func train(%data.0: f32[16,1,28,28], %_.1: i64[16])" in r.stdout, r.stdout[:2000]


TUTORIAL = """import torch
import torch.nn as nn
import torch.optim as optim


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(6, 3)

    def forward(self, x):
        return self.fc(x)


net = Net()
criterion = nn.CrossEntropyLoss()
optimizer = optim.SGD(net.parameters(), lr=0.001, momentum=0.9)


def train(trainloader, epoch):
    running_loss = 0.0
    for i, data in enumerate(trainloader, 0):
        inputs, labels = data
        optimizer.zero_grad()
        outputs = net(inputs)
        loss = criterion(outputs, labels)
        loss.backward()
        optimizer.step()
        running_loss += loss.item()
        if i % 2000 == 1999:
            print(f'[{epoch + 1}, {i + 1:5d}] loss: {running_loss / 2000:.3f}')
            running_loss = 0.0
"""


def test_tutorial_loop():
    """The CIFAR tutorial's loop: `for i, data in enumerate(trainloader, 0): inputs,
    labels = data`, a module-level `net`, `running_loss += loss.item()` and an `if`
    that prints and resets it."""
    r = ctc("check", "/dev/stdin", "--input", "inputs=f32[4,6]") if False else None
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        p = os.path.join(d, "tut.py")
        open(p, "w").write(TUTORIAL)
        r = ctc("check", p, "--input", "inputs=f32[4,6]")
        assert r.returncode == 0, r.stderr
        assert "entry forward -> f32[4,3]" in r.stdout and "entry train -> f32[]" in r.stdout
        assert "note: line 29 (a running total of .item()) runs on the host only" in r.stdout
        assert "note: line 30 (if) runs on the host only; dropped from the compiled entry 'train'" in r.stdout
        r = ctc("compile", p, "--input", "inputs=f32[4,6]", "--emit", "ir")
        assert "func train(%inputs.0: f32[4,6], %labels.1: i64[4])" in r.stdout, r.stdout[:3000]


MAIN_BLOCK = """import torch
import torch.nn as nn
import torch.nn.functional as F


class Net(nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.fc1 = nn.Linear(6, hidden)
        self.fc2 = nn.Linear(hidden, 3)

    def forward(self, x):
        return self.fc2(F.relu(self.fc1(x)))


def train(model, loader, opt, sched):
    model.train()
    for x, y in loader:
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        sched.step()


if __name__ == "__main__":
    net = Net(8)
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.01, total_steps=100)
    for epoch in range(5):
        train(net, [], opt, sched)
"""


def test_main_block_driver(tmp_path):
    """The driver is an `if __name__ == "__main__":` block (never run by Python's
    rules at compile time): its model Net(8), optimizer and a OneCycleLR stepped per
    batch inside the loop body (so no scheduler_step entry)."""
    p = tmp_path / "m.py"
    p.write_text(MAIN_BLOCK)
    r = ctc("check", p, "--input", "x=f32[4,6]")
    assert r.returncode == 0, r.stderr
    assert "entry train -> f32[]" in r.stdout and "scheduler_step" not in r.stdout
    r = ctc("compile", p, "--input", "x=f32[4,6]", "--emit", "ir")
    assert '; param "fc1.weight" : f32[8,6]' in r.stdout and '; param "opt.step" : f32[]' in r.stdout, r.stdout[:2000]


# vae's layout: loops over module-level loaders in train(epoch) / test(epoch), a
# `if i == 0:` block of reconstruction pictures in test(), a test loop summing only a loss
VAE_GLOBAL = VAE.replace("from tqdm import tqdm\n", "from torchvision import datasets, transforms\n"
                                                      "from torchvision.utils import save_image\n").replace(
    "def train(epoch, train_loader):", "def train(epoch):").replace("enumerate(tqdm(train_loader))",
                                                                    "enumerate(train_loader)") + """

train_loader = torch.utils.data.DataLoader(datasets.MNIST('../data', train=True, download=True,
                                                          transform=transforms.ToTensor()), batch_size=4)
test_loader = torch.utils.data.DataLoader(datasets.MNIST('../data', train=False,
                                                         transform=transforms.ToTensor()), batch_size=4)


def test(epoch):
    model.eval()
    test_loss = 0
    with torch.no_grad():
        for i, (data, _) in enumerate(test_loader):
            recon_batch, mu, logvar = model(data)
            test_loss += loss_function(recon_batch, data, mu, logvar).item()
            if i == 0:
                n = min(data.size(0), 8)
                comparison = torch.cat([data[:n], recon_batch.view(4, 1, 28, 28)[:n]])
                save_image(comparison.cpu(), 'results/reconstruction_' + str(epoch) + '.png', nrow=n)
    test_loss /= len(test_loader.dataset)
    print('====> Test set loss: {:.4f}'.format(test_loss))


if __name__ == "__main__":
    for epoch in range(1, 3):
        train(epoch)
        test(epoch)
"""


def test_module_level_loaders_and_picture_block(tmp_path):
    """Loops over module-level DataLoaders (train(epoch), test(epoch)); test()'s
    `if i == 0:` block (assignments only it reads, save_image) is host-only; the
    evaluation entry sums only a loss, so `./net train` prints the test loss and
    no accuracy, over the full batches (padded samples would add to a loss that
    ignores no label); its value is PyTorch's."""
    p = tmp_path / "vae.py"
    p.write_text(VAE_GLOBAL)
    r = ctc("check", p, "--input", "data=f32[4,1,28,28]")
    assert r.returncode == 0, r.stderr
    assert "entry train -> f32[]" in r.stdout and "entry test -> f32[]" in r.stdout, r.stdout
    assert "note: line 71 (if) runs on the host only; dropped from the compiled entry 'test'" in r.stdout, r.stdout
    exe = tmp_path / "net"
    run([CTC, "build", p, "-o", exe, "--input", "data=f32[4,1,28,28]"])
    x = np.random.default_rng(0).random((10, 1, 28, 28)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", np.zeros(10, np.int64))
    out = run([exe, "train", "--data", tmp_path / "x.npy", "--labels", tmp_path / "y.npy", "--epochs", "1",
               "--test-data", tmp_path / "x.npy", "--test-labels", tmp_path / "y.npy", "--save",
               tmp_path / "w.safetensors"]).stdout
    m = re.search(r"^epoch 1: loss \S+, \d+ samples/s, test loss (\S+) \(test samples 8 of 10: the evaluation's B is "
                  r"4\)$", out, re.M)
    assert m and "accuracy" not in out, out
    stubs = {n: mock.MagicMock(name=n) for n in ("torchvision", "torchvision.datasets", "torchvision.transforms",
                                                  "torchvision.utils")}
    with mock.patch.dict(sys.modules, stubs), mock.patch.object(torch.utils.data, "DataLoader", mock.MagicMock()):
        mod = load_module(str(p), "vae_global")
    w = st_read(tmp_path / "w.safetensors")
    mod.model.load_state_dict({k: torch.from_numpy(v) for k, v in w.items() if k in mod.model.state_dict()})
    mod.model.eval()
    want = 0.0
    with torch.no_grad():
        for i in (0, 4):
            xb = torch.from_numpy(x[i:i + 4])
            recon, mu, logvar = mod.model(xb)
            want += mod.loss_function(recon, xb, mu, logvar).item()
    compare("test loss", float(m.group(1)), want / 8, 1e-4, 1e-4)
