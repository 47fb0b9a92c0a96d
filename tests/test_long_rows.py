"""Reductions over long rows (codegen_c/render_c.c's c_row_loop): a row kernel whose reductions'
operands would pass KN_MAX_ROWBUF bytes (a float row over 2,048 elements with one reduction, over
1,024 with two) runs its row in chunks, each chunk's operands reduced by ctc_sum / ctc_max in 32
lanes and added on in order. Before, such rows summed in one accumulator, a 4-cycle chain per
element: softmax over [256, 4096] took 5.5 ms against PyTorch's 0.87, a row sum 18 times
PyTorch's. These are the rows of a language model's softmax and cross-entropy over its vocabulary,
and of LayerNorm and GroupNorm on wide layers.

The rows here (5,000 elements) end in a partial chunk whose length is not a multiple of 32."""
import re

import numpy as np
import torch

from ctc_testlib import CTC, compare, load_module, run, run_forward, st_write, state_dict_np, train_steps_match

N = 5000

FORWARD = f"""\
import torch
import torch.nn as nn
import torch.nn.functional as F


class Wide(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln = nn.LayerNorm({N})
        self.gn = nn.GroupNorm(2, 4)

    def forward(self, x):
        g = self.gn(x.view(3, 4, 50, 25)).reshape(3, {N})
        return torch.cat([F.softmax(x, dim=-1), F.log_softmax(x, dim=-1), self.ln(x), g,
                          torch.logsumexp(x, -1, keepdim=True), x.sum(-1, keepdim=True),
                          x.norm(dim=-1, keepdim=True), torch.amax(x, -1, keepdim=True),
                          (x > 0).sum(-1, keepdim=True).float()], dim=-1)


model = Wide()
example_inputs = {{"forward": (torch.randn(3, {N}),)}}
"""


def test_long_rows_match_pytorch(tmp_path):
    path = tmp_path / "wide.py"
    path.write_text(FORWARD)
    mod = load_module(str(path), "long_rows_wide")
    torch.manual_seed(0)
    with torch.no_grad():
        mod.model.ln.weight.uniform_(0.5, 1.5), mod.model.ln.bias.uniform_(-1, 1)
    x = torch.randn(3, N) * 3 + 1
    x[1, 4999] = 40.0   # the maximum in the last, partial chunk
    with torch.no_grad():
        want = mod.model(x).numpy()
    got = run_forward(str(tmp_path), str(path), mod.model, [x.numpy()])[0]
    # the sums accumulate in double (PyTorch's in float, in a tree): 1e-5 covers a float rounding of
    # each of the row's last operations and PyTorch's sums
    compare("softmax, log_softmax, LayerNorm, GroupNorm, logsumexp, sum, norm, amax, count", got, want, 1e-5, 1e-6)
    c = (tmp_path / "net.c").read_text()
    # GroupNorm's rows of 2,500 and the fused rows of 5,000 (softmax, LayerNorm, ... in one kernel:
    # the chunk shrinks with the number of reductions a loop has), chunks a multiple of 32
    chunks = re.findall(r"for \(int64_t j0 = 0; j0 < (\d+); j0 \+= (\d+)\) \{   /\* chunks of the row \*/", c)
    assert {"2500", "5000"} <= {n for n, _ in chunks}, chunks
    assert all(int(k) % 32 == 0 and int(k) < int(n) for n, k in chunks), chunks
    assert re.search(r"_acc \+= ctc_sum_f32\(\w+_in, jn\);", c)
    # softmax's and amax's maximum of x: its row read in place, chunk by chunk
    assert re.search(r"const float v = ctc_max_f32\(&x\[i0 \* 5000 \+ j0\], jn\); if \(v > \w+_acc \|\| isnan\(v\)\)",
                     c), c
    assert "for (int64_t j = 0; j < jn; j++)" in c   # the count (an integer sum), in order
    assert not re.search(r"double \w+_acc = 0;\n\s*for \(int64_t j = 0; j < \d+; j\+\+\) \{\n\s*\w+_acc \+=", c), \
        "a float row summed in one accumulator"


def test_a_nan_in_a_long_row(tmp_path):
    """A NaN anywhere in a row makes its softmax and maximum NaN (the chunks' maxima combine as the
    one-accumulator loop did)."""
    src = f"""\
import torch
import torch.nn as nn
import torch.nn.functional as F


class M(nn.Module):
    def forward(self, x):
        return torch.cat([F.softmax(x, dim=-1), torch.amax(x, -1, keepdim=True)], dim=-1)


model = M()
example_inputs = {{"forward": (torch.randn(4, {N}),)}}
"""
    path = tmp_path / "nanrow.py"
    path.write_text(src)
    mod = load_module(str(path), "long_rows_nan")
    x = torch.randn(4, N)
    x[0, 10] = float("nan")     # first chunk
    x[1, 4500] = float("nan")   # last, partial chunk
    x[2, 3000] = float("inf")
    with torch.no_grad():
        want = mod.model(x).numpy()
    got = run_forward(str(tmp_path), str(path), mod.model, [x.numpy()])[0]
    assert np.isnan(got[0]).all() and np.isnan(got[1]).all() and np.isnan(want[0]).all()
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    compare("softmax and amax with inf and NaN", np.nan_to_num(got), np.nan_to_num(want), 1e-5, 1e-6)


LM_HEAD = """\
import torch
import torch.nn as nn
import torch.nn.functional as F


class Head(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(3001, 24)
        self.ln = nn.LayerNorm(24)
        self.out = nn.Linear(24, 3001)

    def forward(self, idx):
        return self.out(self.ln(self.emb(idx)))


model = Head()
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
example_inputs = {"forward": (torch.zeros(4, 6, dtype=torch.long),),
                  "train_step": (torch.zeros(4, 6, dtype=torch.long), torch.zeros(4, 6, dtype=torch.long))}


def train_step(idx, y):
    optimizer.zero_grad()
    logits = model(idx)
    loss = F.cross_entropy(logits.view(-1, logits.size(-1)), y.view(-1))
    loss.backward()
    optimizer.step()
    return loss
"""


def test_a_vocabulary_wide_cross_entropy_trains_like_torch(tmp_path):
    """A language model's head over 3,001 tokens: the cross-entropy's log-softmax rows, forward
    and backward, chunked; three AdamW steps against PyTorch's."""
    path = tmp_path / "head.py"
    path.write_text(LM_HEAD)
    exe = tmp_path / "net"
    run([CTC, "build", str(path), "-o", str(exe)])
    assert "j0 += 2048) {   /* chunks of the row */" in (tmp_path / "net.c").read_text()
    mod = load_module(str(path), "long_rows_head")
    w = tmp_path / "w0.safetensors"
    st_write(w, state_dict_np(mod.model))
    rng = np.random.default_rng(5)
    batches = [(rng.integers(0, 3001, (4, 6)).astype(np.int64), rng.integers(0, 3001, (4, 6)).astype(np.int64))
               for _ in range(3)]
    train_steps_match(str(tmp_path), str(exe), mod, str(w), batches, "3,001-token head")
