"""einops in model files (lucidrains' vit-pytorch and most of its repositories, the files
people copy): ctc's own einops (pylib/einops) turns rearrange / repeat / reduce and the
Rearrange / Reduce layers into reshape, permute, expand and reductions. Each pattern is
checked against the tensor ops it stands for, written out under PyTorch (einops itself is
not a Debian package, so the oracle is those ops), and a ViT written the way such files
are (in our own words) against PyTorch running the same file with pylib's einops."""
import importlib.util
import os
import sys

import numpy as np
import torch

from ctc_testlib import CTC, ROOT, compare, load_module, run, run_forward

PATTERNS = """
import torch
import torch.nn as nn
from einops import rearrange, reduce, repeat
from einops.layers.torch import Rearrange, Reduce


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.patches = nn.Sequential(Rearrange('b c (h p1) (w p2) -> b (h w) (p1 p2 c)', p1=2, p2=2), nn.Identity())
        self.pool = Reduce('b n d -> b d', 'mean')
        self.cls = nn.Parameter(torch.randn(1, 1, 12))

    def forward(self, x, t):                 # x [2, 3, 4, 6], t [2, 5, 12]
        p = self.patches(x)                                    # [2, 6, 12]
        heads = rearrange(t, 'b n (h d) -> b h n d', h=4)      # [2, 4, 5, 3]
        back = rearrange(heads, 'b h n d -> b n (h d)')
        cls = repeat(self.cls, '1 1 d -> b 1 d', b=t.shape[0])
        flat = rearrange(x, 'b ... -> b (...)')
        mx = reduce(x, 'b c (h 2) (w 2) -> b c h w', 'max')
        sm = reduce(t, 'b n d -> b () d', 'sum')
        tr = rearrange(x, 'b c h w -> w h c b')
        rp = repeat(t[0, 0], 'd -> n d', n=3)
        return p, heads, back, cls, self.pool(t), flat, mx, sm, tr, rp
"""


def test_patterns_against_the_ops_they_stand_for(tmp_path):
    path = tmp_path / "patterns.py"
    path.write_text(PATTERNS)
    r = run([CTC, "build", path, "-o", tmp_path / "net", "--input", "x=f32[2,3,4,6]", "--input", "t=f32[2,5,12]"])
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 3, 4, 6)).astype(np.float32)
    t = rng.standard_normal((2, 5, 12)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "t.npy", t)
    outs = [tmp_path / f"o{i}.npy" for i in range(10)]
    run([tmp_path / "net", "infer", "--random-weights", "--save", tmp_path / "w.safetensors", "--input", tmp_path / "x.npy",
         "--input", tmp_path / "t.npy"] + [a for o in outs for a in ("--output", o)])
    from ctc_testlib import st_read
    cls = torch.from_numpy(st_read(str(tmp_path / "w.safetensors"))["cls"].copy())
    X, T = torch.from_numpy(x), torch.from_numpy(t)
    want = [X.reshape(2, 3, 2, 2, 3, 2).permute(0, 2, 4, 3, 5, 1).reshape(2, 6, 12),
            T.reshape(2, 5, 4, 3).permute(0, 2, 1, 3),
            T,
            cls.expand(2, 1, 12),
            T.mean(1),
            X.reshape(2, 72),
            X.reshape(2, 3, 2, 2, 3, 2).amax((3, 5)),
            T.sum(1, keepdim=True),
            X.permute(3, 2, 1, 0),
            T[0, 0].expand(3, 12)]
    assert r.returncode == 0
    for i, (o, w) in enumerate(zip(outs, want)):
        compare(f"pattern {i}", np.load(o), w.numpy(), 1e-6, 1e-6)


VIT = """
import torch
import torch.nn as nn
import torch.nn.functional as F
from einops import rearrange, repeat
from einops.layers.torch import Rearrange


def pair(t):
    return t if isinstance(t, tuple) else (t, t)


class FeedForward(nn.Module):
    def __init__(self, dim, hidden):
        super().__init__()
        self.net = nn.Sequential(nn.LayerNorm(dim), nn.Linear(dim, hidden), nn.GELU(), nn.Linear(hidden, dim))

    def forward(self, x):
        return self.net(x)


class Attention(nn.Module):
    def __init__(self, dim, heads=4, dim_head=8):
        super().__init__()
        inner = dim_head * heads
        self.heads = heads
        self.scale = dim_head ** -0.5
        self.norm = nn.LayerNorm(dim)
        self.to_qkv = nn.Linear(dim, inner * 3, bias=False)
        self.to_out = nn.Linear(inner, dim)

    def forward(self, x):
        x = self.norm(x)
        q, k, v = map(lambda t: rearrange(t, 'b n (h d) -> b h n d', h=self.heads), self.to_qkv(x).chunk(3, dim=-1))
        attn = (torch.matmul(q, k.transpose(-1, -2)) * self.scale).softmax(dim=-1)
        out = rearrange(torch.matmul(attn, v), 'b h n d -> b n (h d)')
        return self.to_out(out)


class ViT(nn.Module):
    def __init__(self, image_size=8, patch_size=4, num_classes=5, dim=16, depth=2, heads=4, mlp_dim=32, channels=3):
        super().__init__()
        ih, iw = pair(image_size)
        ph, pw = pair(patch_size)
        num_patches = (ih // ph) * (iw // pw)
        self.to_patch_embedding = nn.Sequential(
            Rearrange('b c (h p1) (w p2) -> b (h w) (p1 p2 c)', p1=ph, p2=pw),
            nn.LayerNorm(ph * pw * channels), nn.Linear(ph * pw * channels, dim), nn.LayerNorm(dim))
        self.pos_embedding = nn.Parameter(torch.randn(1, num_patches + 1, dim))
        self.cls_token = nn.Parameter(torch.randn(1, 1, dim))
        self.layers = nn.ModuleList([nn.ModuleList([Attention(dim, heads), FeedForward(dim, mlp_dim)]) for _ in range(depth)])
        self.mlp_head = nn.Linear(dim, num_classes)

    def forward(self, img):
        x = self.to_patch_embedding(img)
        b, n, _ = x.shape
        cls_tokens = repeat(self.cls_token, '1 1 d -> b 1 d', b=b)
        x = torch.cat((cls_tokens, x), dim=1) + self.pos_embedding[:, :(n + 1)]
        for attn, ff in self.layers:
            x = attn(x) + x
            x = ff(x) + x
        return self.mlp_head(x.mean(dim=1))


model = ViT()
example_inputs = (torch.randn(2, 3, 8, 8),)
"""


def test_vit_in_the_vit_pytorch_style(tmp_path):
    path = tmp_path / "vit.py"
    path.write_text(VIT)
    spec = importlib.util.spec_from_file_location("einops", os.path.join(ROOT, "pylib", "einops", "__init__.py"),
                                                  submodule_search_locations=[os.path.join(ROOT, "pylib", "einops")])
    saved = {k: sys.modules.get(k) for k in ("einops", "einops.layers", "einops.layers.torch")}
    try:   # PyTorch runs the file with pylib's einops (whose patterns the test above checks)
        ein = importlib.util.module_from_spec(spec)
        sys.modules["einops"] = ein
        spec.loader.exec_module(ein)
        mod = load_module(str(path), "vit_style")
    finally:
        for k, v in saved.items():
            if v is None:
                sys.modules.pop(k, None)
            else:
                sys.modules[k] = v
    torch.manual_seed(0)
    net = mod.ViT()
    net.eval()
    x = np.random.default_rng(1).standard_normal((2, 3, 8, 8)).astype(np.float32)
    got = run_forward(str(tmp_path), str(path), net, [x])
    with torch.no_grad():
        want = net(torch.from_numpy(x)).numpy()
    compare("vit", got[0], want, 1e-4, 1e-5)


def test_a_pattern_that_does_not_fit_is_a_located_error(tmp_path):
    """A pattern whose axes do not divide the tensor: exit 1, the error in pylib's einops with a
    note at the model's call (file:line:col), no crash."""
    path = tmp_path / "bad.py"
    path.write_text("import torch\nimport torch.nn as nn\nfrom einops import rearrange\n\n\nclass Net(nn.Module):\n"
                    "    def forward(self, x):\n        return rearrange(x, 'b (h d) -> b h d', h=4)\n")
    r = run([CTC, "check", path, "--input", "x=f32[2,6]"], check=False)
    assert r.returncode == 1, r.stderr
    assert "einops: dimension 1 of size 6 cannot be split by 4" in r.stderr, r.stderr
    assert f"{path}:8:16: note: in 'rearrange' called here" in r.stderr, r.stderr
