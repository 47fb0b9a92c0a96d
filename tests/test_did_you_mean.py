"""A misspelt layer or function (issue 28, item 8): the located error suggests the
registered name closest to it (case first, then an edit distance of at most a third of
the name, a swap of neighbours counting one), and suggests nothing when none is close."""
import pytest

from ctc_testlib import CTC, run

SRC = """import torch
import torch.nn as nn
import torch.nn.functional as F


class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = LAYER

    def forward(self, x):
        return CALL
"""


@pytest.mark.parametrize("layer, call, at, want", [
    ("nn.BatchNorm2D(3)", "self.layer(x)", "9:22", "'torch.nn.BatchNorm2D' is not supported by ctc (or does not exist); "
                                                   "did you mean 'torch.nn.BatchNorm2d'?"),
    ("nn.Conv2D(3, 3, 1)", "self.layer(x)", "9:22", "did you mean 'torch.nn.Conv2d'?"),
    ("nn.Identity()", "F.rleu(x)", "12:16", "'torch.nn.functional.rleu' is not supported by ctc (or does not exist); "
                                            "did you mean 'torch.nn.functional.relu'?"),
    ("nn.Identity()", "torch.sofmax(x, 1)", "12:16", "did you mean 'torch.softmax'?"),
])
def test_suggestion(tmp_path, layer, call, at, want):
    p = tmp_path / "m.py"
    p.write_text(SRC.replace("LAYER", layer).replace("CALL", call))
    r = run([CTC, "check", p, "--input", "x=f32[1,3,4,4]"], check=False)
    assert r.returncode == 1 and f"m.py:{at}: error: " in r.stderr and want in r.stderr, r.stderr


def test_no_suggestion_when_nothing_is_close(tmp_path):
    p = tmp_path / "m.py"
    p.write_text(SRC.replace("LAYER", "nn.Identity()").replace("CALL", "torch.qqqqqqq(x)"))
    r = run([CTC, "check", p, "--input", "x=f32[1,3,4,4]"], check=False)
    assert r.returncode == 1 and "'torch.qqqqqqq' is not supported by ctc (or does not exist)\n" in r.stderr, r.stderr
