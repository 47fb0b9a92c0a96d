import torch
import torch.nn as nn
import torch.nn.functional as F

try:
    from apex.normalization import FusedLayerNorm as LayerNorm
except ImportError:
    LayerNorm = nn.LayerNorm

try:
    import flash_attn
    HAS_FLASH = True
except (ModuleNotFoundError, AttributeError) as e:
    HAS_FLASH = False
    why = str(e)
finally:
    done = 1

with open("input.txt", "r", encoding="utf-8") as f:
    text = f.read()
chars = sorted(list(set(text)))
vocab_size = len(chars)
stoi = {ch: i for i, ch in enumerate(chars)}
lines = open("input.txt").readlines()
n_lines = sum(1 for _ in open("input.txt"))
assert " " in set(text) and "Z" not in set(text)
it = iter(chars)
first = next(it)
second = next(it)
empty = next(iter([]), None)
table = {"a": 1}
try:
    v = table["b"]
except KeyError:
    v = 7
else:
    v = -1
try:
    raise ValueError(f"bad {vocab_size}")
except ValueError as err:
    msg = str(err)
try:
    x = [1][3]
except LookupError:
    x = 5


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(vocab_size, 8)
        self.ln = LayerNorm(8)
        self.k = v + x + len(lines) + n_lines + (0 if HAS_FLASH else 100) + len(msg)
        assert why == "No module named 'flash_attn'", why
        assert first == "\n" and second == " ", (first, second)
        assert empty is None and done == 1
        self.__setattr__("head", nn.Linear(8, vocab_size))
        self.__dict__["plain"] = 3.0

    def forward(self, idx):
        p = next(self.parameters())
        h = self.ln(self.emb(idx)) * self.k + p.sum() * 0 + self.plain
        return self.__getattr__("head")(h)
