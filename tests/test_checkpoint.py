"""`./net train` checkpoints and resume, signals and numerical faults (issue 12,
items 2 and 3), on one small compiled model whose state is everything a
checkpoint must carry: parameters, Adam's moments and step count, a StepLR
scheduler stepped after each epoch (its last_epoch and the learning rate are
state tensors), and dropout (the rng.offset state tensor).

The resumed run must end with parameters bit-identical (byte-for-byte equal
safetensors files) to an uninterrupted run's."""
import os
import signal
import subprocess
import time

import numpy as np
import pytest

from ctc_testlib import CTC, run, st_read, st_write

MODEL = """\
import torch
import torch.nn as nn
import torch.nn.functional as F


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(16, 32)
        self.drop = nn.Dropout(0.3)
        self.fc2 = nn.Linear(32, 4)

    def forward(self, x):
        return self.fc2(self.drop(F.relu(self.fc1(x))))


model = Net()
optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.5)


def train_step(x, y):
    optimizer.zero_grad()
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()
    return loss


example_inputs = {"forward": (torch.randn(8, 16),),
                  "train_step": (torch.randn(8, 16), torch.randint(0, 4, (8,)))}
"""
B, N = 8, 64          # 8 steps per epoch
CKPT = "checkpoint.safetensors"


@pytest.fixture(scope="module")
def net(tmp_path_factory):
    d = tmp_path_factory.mktemp("ckpt")
    (d / "m.py").write_text(MODEL)
    run([CTC, "build", d / "m.py", "-o", d / "net"])
    rng = np.random.default_rng(0)
    np.save(d / "x.npy", rng.standard_normal((N, 16)).astype(np.float32))
    np.save(d / "y.npy", rng.integers(0, 4, N))
    return d


LONG = 400  # epochs of the interrupted runs: about 0.5 s uninterrupted; the signal comes after about 0.02 s


@pytest.fixture(scope="module")
def long_ref(net, tmp_path_factory):
    """The parameters after an uninterrupted run of LONG epochs."""
    return reference(net, tmp_path_factory.mktemp("ref"), LONG)


def train(net, *args, check=True):
    return run([net / "net", "train", "--data", net / "x.npy", "--labels", net / "y.npy", *args], check=check)


def position(ckdir):
    """(epoch, steps done in it) of a checkpoint."""
    s = st_read(os.path.join(ckdir, CKPT))["ctc.train.state"]
    return int(s[1]), int(s[2])


def reference(net, tmp_path, epochs, *extra):
    out = tmp_path / "ref.safetensors"
    train(net, "--epochs", epochs, "--seed", "5", "--checkpoint", tmp_path / "ref_ck", "--checkpoint-every", "7",
          "--save", out, "--save-training-state", *extra)
    return out.read_bytes()


def start(net, tmp_path, epochs, ckdir):
    return subprocess.Popen([net / "net", "train", "--data", net / "x.npy", "--labels", net / "y.npy", "--epochs",
                             str(epochs), "--seed", "5", "--checkpoint", ckdir, "--checkpoint-every", "7"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def wait_for_checkpoint(proc, ckdir, extra_s=0.02):
    path = os.path.join(ckdir, CKPT)
    t0 = time.time()
    while not os.path.exists(path):
        assert proc.poll() is None, "train ended before writing a checkpoint:\n" + proc.stderr.read()
        assert time.time() - t0 < 60, "no checkpoint after 60 s"
        time.sleep(0.001)
    time.sleep(extra_s)


def resume(net, tmp_path, epochs, ckdir):
    out = tmp_path / "resumed.safetensors"
    r = train(net, "--epochs", epochs, "--resume", ckdir, "--checkpoint", ckdir, "--checkpoint-every", "7",
              "--save", out, "--save-training-state")
    return out.read_bytes(), r


def test_kill_and_resume_is_bit_identical(net, tmp_path, long_ref):
    """SIGKILL by pid once a checkpoint exists; resuming ends with the uninterrupted run's bytes."""
    epochs, ref = LONG, long_ref
    ck = tmp_path / "ck"
    proc = start(net, tmp_path, epochs, ck)
    wait_for_checkpoint(proc, ck)
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate()
    assert proc.returncode == -signal.SIGKILL, "train finished before the kill; the test needs a longer run"
    e, s = position(ck)
    assert (e - 1) * 8 + s < epochs * 8
    got, _ = resume(net, tmp_path, epochs, ck)
    assert got == ref, f"resumed from epoch {e}, step {s}: parameters differ from the uninterrupted run"
    assert os.listdir(ck) == [CKPT], "a temporary file of the killed run is left in the checkpoint folder"


@pytest.mark.parametrize("sig,status,word", [(signal.SIGINT, 130, "interrupted"), (signal.SIGTERM, 143, "terminated")])
def test_signal_writes_checkpoint_and_exits(net, tmp_path, long_ref, sig, status, word):
    epochs, ref = LONG, long_ref
    ck = tmp_path / "ck"
    proc = start(net, tmp_path, epochs, ck)
    wait_for_checkpoint(proc, ck)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == status, err
    e, s = position(ck)
    assert f"net: {word} at epoch {e}, step {s}: checkpoint written to {ck}/{CKPT} (continue with --resume {ck})" in err
    got, _ = resume(net, tmp_path, epochs, ck)
    assert got == ref


def test_signal_without_checkpoint_folder(net, tmp_path):
    """Without --checkpoint there is nothing to write: the step finishes, the log so far is
    kept, and the status still says why the run stopped."""
    log = tmp_path / "log.csv"
    proc = subprocess.Popen([net / "net", "train", "--data", net / "x.npy", "--labels", net / "y.npy", "--epochs",
                             "100000", "--log", log], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(0.3)  # set-up takes milliseconds; then the handlers are in place
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 143, err
    assert "(no --checkpoint DIR: nothing saved)" in err
    rows = log.read_text().splitlines()
    assert rows[0] == "epoch,step,loss" and len(rows) > 1


def test_resume_after_whole_epochs(net, tmp_path):
    """A run of 1 epoch, resumed to 3: the epoch lines and the scheduler continue as in one run of 3."""
    ref = reference(net, tmp_path, 3)
    full = train(net, "--epochs", "3", "--seed", "5").stdout
    ck = tmp_path / "ck"
    first = train(net, "--epochs", "1", "--seed", "5", "--checkpoint", ck).stdout
    assert position(ck) == (2, 0)
    got, r = resume(net, tmp_path, 3, ck)
    assert got == ref
    strip = lambda out: [line.split(",")[0] for line in out.splitlines()]  # "epoch k: loss L" without samples/s
    assert strip(first + r.stdout) == strip(full)
    # state tensors really are in the checkpoint (and were restored: the bytes above)
    names = st_read(ck / CKPT).keys()
    for n in ("rng.offset", "optimizer.step", "optimizer.lr", "scheduler.last_epoch", "ctc.train.loss_sum"):
        assert n in names


def test_resume_refuses_other_runs(net, tmp_path):
    ck = tmp_path / "ck"
    train(net, "--epochs", "1", "--seed", "5", "--checkpoint", ck)
    r = train(net, "--epochs", "2", "--resume", ck, "--seed", "6", check=False)
    assert r.returncode == 1 and f"{ck}/{CKPT}: the checkpoint's run used --seed 5, not 6" in r.stderr
    r = train(net, "--epochs", "2", "--resume", ck, "--limit", "32", check=False)
    assert r.returncode == 1 and "the checkpoint was written training on 64 samples in batches of 8" in r.stderr
    r = train(net, "--epochs", "2", "--resume", ck, "--no-shuffle", check=False)
    assert r.returncode == 1 and "--no-shuffle would change the order" in r.stderr
    r = train(net, "--epochs", "2", "--resume", ck, "--weights", ck / CKPT, check=False)
    assert r.returncode == 1 and "--weights and --resume exclude each other" in r.stderr
    r = train(net, "--epochs", "2", "--resume", tmp_path / "none", check=False)
    assert r.returncode == 2 and f"{tmp_path}/none/{CKPT}" in r.stderr
    w = tmp_path / "w"
    w.mkdir()
    st_write(w / CKPT, {k: v for k, v in st_read(ck / CKPT).items() if not k.startswith("ctc.")})
    r = train(net, "--epochs", "2", "--resume", w, check=False)
    assert r.returncode == 1 and "not a checkpoint of `train`" in r.stderr
    r = train(net, "--epochs", "2", "--checkpoint-every", "3", check=False)
    assert r.returncode == 1 and "--checkpoint-every needs --checkpoint DIR" in r.stderr
    r = train(net, "--epochs", "2", "--nan-policy", "ignore", check=False)
    assert r.returncode == 1 and "--nan-policy is stop or skip, not 'ignore'" in r.stderr


# ---- numerical faults ---------------------------------------------------------------------------

def poisoned(net, tmp_path, rows):
    """x.npy with inf in the given samples (their loss is nan)."""
    x = np.load(net / "x.npy")
    x[rows, 3] = np.inf
    p = tmp_path / "xbad.npy"
    np.save(p, x)
    return p


def test_nan_loss_stops_and_keeps_last_checkpoint(net, tmp_path):
    xbad = poisoned(net, tmp_path, [20])  # sample 20: step 3 in file order
    ck, out = tmp_path / "ck", tmp_path / "out.safetensors"
    r = run([net / "net", "train", "--data", xbad, "--labels", net / "y.npy", "--epochs", "2", "--no-shuffle",
             "--checkpoint", ck, "--checkpoint-every", "1", "--save", out, "--save-training-state", "--log", tmp_path / "log.csv"], check=False)
    assert r.returncode == 1, r.stderr
    assert (f"net: error: loss is nan at epoch 1, step 3 (step 3 of the run): training stopped (--nan-policy skip "
            f"would undo such steps and go on); the last checkpoint, {ck}/{CKPT} (epoch 1, 2 steps done), is kept"
            in r.stderr)
    assert position(ck) == (1, 2) and not out.exists()
    for k, v in st_read(ck / CKPT).items():
        assert np.isfinite(v).all(), k
    # the checkpoint is the one a clean run writes after step 2
    clean = tmp_path / "clean"
    run([net / "net", "train", "--data", net / "x.npy", "--labels", net / "y.npy", "--epochs", "1", "--no-shuffle",
         "--checkpoint", clean, "--checkpoint-every", "2"])
    run([net / "net", "train", "--data", net / "x.npy", "--labels", net / "y.npy", "--epochs", "1", "--no-shuffle",
         "--limit", "16", "--save", tmp_path / "two.safetensors", "--save-training-state"])
    two = st_read(tmp_path / "two.safetensors")
    mine = st_read(ck / CKPT)
    for k in two:
        if k != "scheduler.last_epoch" and k != "optimizer.lr":  # the clean 1-epoch run ran the scheduler
            assert mine[k].tobytes() == two[k].tobytes(), k
    assert (tmp_path / "log.csv").read_text().splitlines()[-1] == "1,3,nan"


def test_nan_loss_skip_undoes_the_step(net, tmp_path):
    """Skipping step 3 of an epoch in file order = training without step 3's batch (the
    update, Adam's step count and the dropout stream's position are all restored)."""
    xbad = poisoned(net, tmp_path, [17])  # step 3: samples 16..23
    skip = tmp_path / "skip.safetensors"
    r = run([net / "net", "train", "--data", xbad, "--labels", net / "y.npy", "--epochs", "1", "--no-shuffle",
             "--nan-policy", "skip", "--save", skip, "--save-training-state"])
    assert "net: warning: loss is nan at epoch 1, step 3 (step 3 of the run): update skipped" in r.stderr
    assert "(1 step skipped)" in r.stdout
    keep = np.r_[0:16, 24:N]
    np.save(tmp_path / "x7.npy", np.load(net / "x.npy")[keep])
    np.save(tmp_path / "y7.npy", np.load(net / "y.npy")[keep])
    want = tmp_path / "want.safetensors"
    run([net / "net", "train", "--data", tmp_path / "x7.npy", "--labels", tmp_path / "y7.npy", "--epochs", "1",
         "--no-shuffle", "--save", want, "--save-training-state"])
    assert skip.read_bytes() == want.read_bytes()


def test_nonfinite_parameter_is_never_checkpointed(net, tmp_path):
    """A finite loss whose update makes a parameter nan (here: nan in Adam's first moment
    of fc2.bias) is caught before the checkpoint: the previous one stays."""
    ck = tmp_path / "ck"
    train(net, "--epochs", "1", "--no-shuffle", "--checkpoint", ck)
    before = (ck / CKPT).read_bytes()
    w = {k: v.copy() for k, v in st_read(ck / CKPT).items() if not k.startswith("ctc.")}
    w["optimizer.fc2.bias.exp_avg"][1] = np.nan
    st_write(tmp_path / "w.safetensors", w)
    r = train(net, "--epochs", "1", "--no-shuffle", "--weights", tmp_path / "w.safetensors", "--checkpoint", ck,
              "--checkpoint-every", "1", check=False)
    assert r.returncode == 1
    assert ("parameter 'fc2.bias' has a non-finite value at index 1 after epoch 1, step 1: training stopped and no "
            "checkpoint written; no checkpoint had been written yet" in r.stderr)
    assert (ck / CKPT).read_bytes() == before


def test_bad_labels_and_dtypes_name_file_and_index(net, tmp_path):
    y = np.load(net / "y.npy")
    y[37] = 4
    np.save(tmp_path / "y4.npy", y)
    r = run([net / "net", "train", "--data", net / "x.npy", "--labels", tmp_path / "y4.npy", "--epochs", "1"],
            check=False)
    assert r.returncode == 1
    assert (f"{tmp_path}/y4.npy: label 4 of sample 37 is out of range: forward entry 'forward' has 4 classes "
            "(0 to 3)") in r.stderr
    yf = np.load(net / "y.npy").astype(np.float32)
    yf[11] = 1.5
    np.save(tmp_path / "yf.npy", yf)
    r = run([net / "net", "train", "--data", net / "x.npy", "--labels", tmp_path / "yf.npy", "--epochs", "1"],
            check=False)
    assert r.returncode == 1 and f"{tmp_path}/yf.npy: sample 11: value 1.5 is not an integer" in r.stderr
    np.save(tmp_path / "xc.npy", np.zeros((N, 16), np.complex64))
    r = run([net / "net", "train", "--data", tmp_path / "xc.npy", "--labels", net / "y.npy", "--epochs", "1"],
            check=False)
    assert r.returncode == 1 and f"{tmp_path}/xc.npy: unsupported dtype (descr '<c8')" in r.stderr


def test_buffer_with_inf_does_not_block_checkpoints(tmp_path):
    """Only tensors that were finite when training started are checked before a
    checkpoint: a buffer holding -inf (an attention mask) is legitimate."""
    src = MODEL.replace("        self.fc2 = nn.Linear(32, 4)\n",
                        "        self.fc2 = nn.Linear(32, 4)\n"
                        "        self.register_buffer(\"mask\", torch.tensor([0.0, 0.0, float(\"-inf\"), 0.0]))\n")
    src = src.replace("return self.fc2(self.drop(F.relu(self.fc1(x))))",
                      "return self.fc2(self.drop(F.relu(self.fc1(x)))) + self.mask")
    (tmp_path / "m.py").write_text(src)
    run([CTC, "build", tmp_path / "m.py", "-o", tmp_path / "net"])
    rng = np.random.default_rng(0)
    np.save(tmp_path / "x.npy", rng.standard_normal((N, 16)).astype(np.float32))
    np.save(tmp_path / "y.npy", rng.choice([0, 1, 3], N))
    ck = tmp_path / "ck"
    run([tmp_path / "net", "train", "--data", tmp_path / "x.npy", "--labels", tmp_path / "y.npy", "--epochs", "2",
         "--checkpoint", ck, "--checkpoint-every", "3"])
    assert position(ck) == (3, 0)
    assert st_read(ck / CKPT)["mask"][2] == -np.inf
