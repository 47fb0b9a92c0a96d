"""`./net train` feeds a training entry's third input, the iteration number (as
nanoGPT's `train_step(X, Y, iter_num)` with `get_lr(iter_num)` set on the
param groups by hand): the steps taken before this one, from 0, over all epochs,
and on after a resume. Checked against PyTorch running the same file's
train_step with the same batches and iteration numbers."""
import numpy as np
import torch

from ctc_testlib import CTC, compare, load_module, run, st_read, st_write, state_dict_np

MODEL = '''
import math
import torch
import torch.nn as nn
import torch.nn.functional as F

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(6, 16)
        self.fc2 = nn.Linear(16, 3)

    def forward(self, x):
        return self.fc2(torch.tanh(self.fc1(x)))

model = Net()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
warmup, total, base_lr, min_lr = 3, 10, 0.2, 0.01

def get_lr(it):
    if it < warmup:
        return base_lr * (it + 1) / warmup
    if it > total:
        return min_lr
    ratio = (it - warmup) / (total - warmup)
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (base_lr - min_lr)

def train_step(x, y, it):
    for g in optimizer.param_groups:
        g['lr'] = get_lr(it)
    optimizer.zero_grad()
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()
    return loss

example_inputs = {"forward": (torch.randn(4, 6),),
                  "train_step": (torch.randn(4, 6), torch.randint(0, 3, (4,)), torch.tensor(0))}
'''


def torch_steps(mod, x, y, batch, epochs, w0):
    with torch.no_grad():
        for k, v in w0.items():
            mod.model.state_dict()[k].copy_(torch.from_numpy(v))
    it = 0
    for _ in range(epochs):
        for s in range(len(x) // batch):
            sl = slice(s * batch, (s + 1) * batch)
            mod.train_step(torch.from_numpy(x[sl]), torch.from_numpy(y[sl]), torch.tensor(it))
            it += 1
    return {k: v.detach().numpy() for k, v in mod.model.state_dict().items()}


def test_train_passes_the_iteration(tmp_path):
    path = tmp_path / "it_model.py"
    path.write_text(MODEL)
    exe = tmp_path / "net"
    run([CTC, "build", path, "-o", exe])
    assert "iteration number" in run([exe, "train", "--help"]).stdout
    mod = load_module(str(path), "it_model")
    rng = np.random.default_rng(0)
    x = rng.standard_normal((22, 6)).astype(np.float32)
    y = rng.integers(0, 3, 22).astype(np.int64)
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", y)
    w0 = {k: v.copy() for k, v in state_dict_np(mod.model).items()}
    st_write(tmp_path / "w0.safetensors", w0)
    common = ["--data", tmp_path / "x.npy", "--labels", tmp_path / "y.npy", "--weights", tmp_path / "w0.safetensors",
              "--no-shuffle"]
    # 5 steps per epoch, 3 epochs: iterations 0..14 cross the warmup and the cosine and pass `total`
    run([exe, "train", *common, "--epochs", "3", "--save", tmp_path / "out.safetensors", "--save-training-state"])
    got = st_read(tmp_path / "out.safetensors")
    want = torch_steps(mod, x, y, 4, 3, w0)
    for k, v in want.items():
        compare(k, got[k], v, 1e-4, 1e-5)
    # a run checkpointed after epoch 1 and resumed counts on from 5
    ck = tmp_path / "ck"
    run([exe, "train", *common, "--epochs", "1", "--checkpoint", ck])
    run([exe, "train", *common[:4], "--no-shuffle", "--epochs", "3", "--resume", ck,
         "--save", tmp_path / "resumed.safetensors", "--save-training-state"])
    res = st_read(tmp_path / "resumed.safetensors")
    for k in want:
        assert np.array_equal(res[k], got[k]), k
