"""The README's quickstart, run as a reader would: its model file and its shell block,
unchanged except for the path of ctc, in a fresh folder. The program trains, infers from
the saved weights at a batch below the planned one, and PyTorch loads the saved file with
a strict load_state_dict."""
import os
import re
import subprocess

import numpy as np
import pytest
import torch

from ctc_testlib import CTC, ROOT

DATA = "/usr/share/datasets/fashion-mnist"


def quickstart_blocks():
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        text = f.read()
    section = text.split("## Quickstart", 1)[1].split("\n## ", 1)[0]
    model = re.search(r"```python\n(.*?)```", section, flags=re.S).group(1)
    shell = re.search(r"```sh\n(.*?)```", section, flags=re.S).group(1)
    return model, shell


def test_quickstart_is_short():
    model, shell = quickstart_blocks()
    assert len(model.splitlines()) + len(shell.splitlines()) <= 40


@pytest.mark.skipif(not os.path.exists(DATA), reason="dataset-fashion-mnist is not installed")
def test_quickstart_runs_as_written(tmp_path):
    model, shell = quickstart_blocks()
    assert shell.startswith("build/ctc build model.py -o net")
    (tmp_path / "model.py").write_text(model)
    script = shell.replace("build/ctc ", CTC + " ", 1)
    r = subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=tmp_path, capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    acc = re.search(r"epoch 1: loss [\d.]+, .*test accuracy ([\d.]+)%", r.stdout + r.stderr)
    assert acc and float(acc.group(1)) > 80.0, r.stdout[-2000:]
    assert re.search(r"tensor\(\d\)", r.stdout), r.stdout[-500:]
    # the program's outputs at batch 8 (planned: 64) equal PyTorch's with the saved weights
    ns = {}
    exec(compile(model, "model.py", "exec"), ns)
    net = ns["model"]
    net.load_state_dict(torch.load(tmp_path / "weights.pt"), strict=True)
    x = torch.from_numpy(np.load(tmp_path / "x.npy"))
    with torch.no_grad():
        want = net.eval()(x).numpy()
    np.testing.assert_allclose(np.load(tmp_path / "y.npy"), want, rtol=1e-4, atol=1e-5)
