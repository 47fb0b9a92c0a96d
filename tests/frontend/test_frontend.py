"""Tests for the ctc frontend (support/ + frontend/): parse real model files,
check the AST dump for precedence and associativity, check diagnostics
exactly, and fuzz the lexer/parser under AddressSanitizer + UBSan.

The driver tests/frontend/parse_dump.c is compiled here into pytest's tmp dir:
    parse_dump [-q] FILE...   -> dump on stdout, diagnostics on stderr,
                                 exit 0 (all parsed) / 1 (errors reported)
Run:  /usr/bin/python3 -m pytest tests/frontend
"""
import glob
import os
import random
import shutil
import subprocess
import textwrap

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SOURCES = sorted(glob.glob(os.path.join(ROOT, "support", "*.c")) + glob.glob(os.path.join(ROOT, "frontend", "*.c")))
DRIVER = os.path.join(ROOT, "tests", "frontend", "parse_dump.c")
MODELS = sorted(glob.glob("/work/shared/bench/models/*.py"))
CFLAGS = ["-std=c11", "-O2", "-Wall", "-Wextra", "-Werror", "-Wno-unused-parameter",
          "-D_POSIX_C_SOURCE=200809L", "-D_DEFAULT_SOURCE"]
SAN_ENV = dict(os.environ,
               ASAN_OPTIONS="exitcode=97:detect_leaks=1:abort_on_error=0",
               UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:exitcode=98",
               LSAN_OPTIONS="exitcode=96")
SAN_MARKERS = ("AddressSanitizer", "LeakSanitizer", "runtime error:", "UndefinedBehaviorSanitizer")


def _cc():
    return os.environ.get("CC") or shutil.which("cc") or "gcc"


def _build(out, extra, cc=None):
    cmd = [cc or _cc()] + CFLAGS + extra + SOURCES + [DRIVER, "-lm", "-o", str(out)]
    r = subprocess.run(cmd, capture_output=True, text=True)
    assert r.returncode == 0, "build failed:\n" + " ".join(cmd) + "\n" + r.stderr
    return str(out)


@pytest.fixture(scope="session")
def parse_dump(tmp_path_factory):
    return _build(tmp_path_factory.mktemp("bin") / "parse_dump", [])


@pytest.fixture(scope="session")
def parse_dump_san(tmp_path_factory):
    return _build(tmp_path_factory.mktemp("bin_san") / "parse_dump_san",
                  ["-g", "-O1", "-fno-omit-frame-pointer", "-fsanitize=address,undefined",
                   "-fno-sanitize-recover=all"])


def run_src(exe, tmp_path, src, name="t.py", mode="w"):
    path = tmp_path / name
    if mode == "w":
        path.write_text(src)
    else:
        path.write_bytes(src)
    r = subprocess.run([exe, name], cwd=tmp_path, capture_output=True, timeout=10)
    return r.returncode, r.stdout.decode("utf-8", "replace"), r.stderr.decode("utf-8", "replace")


def dump_of(exe, tmp_path, src):
    rc, out, err = run_src(exe, tmp_path, src)
    assert rc == 0, err
    assert err == ""
    return out


# ---- the build itself -------------------------------------------------------------


@pytest.mark.parametrize("cc", ["gcc", "clang"])
def test_builds_warning_free(cc, tmp_path):
    if not shutil.which(cc):
        pytest.skip(cc + " not installed")
    for src in SOURCES:
        r = subprocess.run([cc] + CFLAGS + ["-c", src, "-o", str(tmp_path / "x.o")], capture_output=True, text=True)
        assert r.returncode == 0, src + ":\n" + r.stderr


# ---- real model files ---------------------------------------------------------------


@pytest.mark.parametrize("model", MODELS, ids=[os.path.basename(m) for m in MODELS])
def test_bench_models_parse(parse_dump, model):
    r = subprocess.run([parse_dump, model], capture_output=True, text=True, timeout=10)
    assert r.returncode == 0, r.stderr
    assert r.stderr == ""
    assert "(class " in r.stdout
    assert "(def forward (params self" in r.stdout


MNIST = '''\
from __future__ import print_function
import argparse
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from torchvision import datasets, transforms
from torch.optim.lr_scheduler import StepLR


class Net(nn.Module):
    def __init__(self):
        super(Net, self).__init__()
        self.conv1 = nn.Conv2d(1, 32, 3, 1)
        self.conv2 = nn.Conv2d(32, 64, 3, 1)
        self.dropout1 = nn.Dropout(0.25)
        self.dropout2 = nn.Dropout(0.5)
        self.fc1 = nn.Linear(9216, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        x = self.conv1(x)
        x = F.relu(x)
        x = self.conv2(x)
        x = F.relu(x)
        x = F.max_pool2d(x, 2)
        x = self.dropout1(x)
        x = torch.flatten(x, 1)
        x = self.fc1(x)
        x = F.relu(x)
        x = self.dropout2(x)
        x = self.fc2(x)
        output = F.log_softmax(x, dim=1)
        return output


def train(args, model, device, train_loader, optimizer, epoch):
    model.train()
    for batch_idx, (data, target) in enumerate(train_loader):
        data, target = data.to(device), target.to(device)
        optimizer.zero_grad()
        output = model(data)
        loss = F.nll_loss(output, target)
        loss.backward()
        optimizer.step()
        if batch_idx % args.log_interval == 0:
            print('Train Epoch: {} [{}/{} ({:.0f}%)]\\tLoss: {:.6f}'.format(
                epoch, batch_idx * len(data), len(train_loader.dataset),
                100. * batch_idx / len(train_loader), loss.item()))
            if args.dry_run:
                break


def test(model, device, test_loader):
    model.eval()
    test_loss = 0
    correct = 0
    with torch.no_grad():
        for data, target in test_loader:
            data, target = data.to(device), target.to(device)
            output = model(data)
            test_loss += F.nll_loss(output, target, reduction='sum').item()  # sum up batch loss
            pred = output.argmax(dim=1, keepdim=True)  # get the index of the max log-probability
            correct += pred.eq(target.view_as(pred)).sum().item()

    test_loss /= len(test_loader.dataset)

    print('\\nTest set: Average loss: {:.4f}, Accuracy: {}/{} ({:.0f}%)\\n'.format(
        test_loss, correct, len(test_loader.dataset),
        100. * correct / len(test_loader.dataset)))


def main():
    # Training settings
    parser = argparse.ArgumentParser(description='PyTorch MNIST Example')
    parser.add_argument('--batch-size', type=int, default=64, metavar='N',
                        help='input batch size for training (default: 64)')
    parser.add_argument('--lr', type=float, default=1.0, metavar='LR',
                        help='learning rate (default: 1.0)')
    parser.add_argument('--no-cuda', action='store_true', default=False,
                        help='disables CUDA training')
    args = parser.parse_args()
    use_cuda = not args.no_cuda and torch.cuda.is_available()

    torch.manual_seed(args.seed)

    device = torch.device("cuda" if use_cuda else "cpu")

    train_kwargs = {'batch_size': args.batch_size}
    test_kwargs = {'batch_size': args.test_batch_size}
    if use_cuda:
        cuda_kwargs = {'num_workers': 1,
                       'pin_memory': True,
                       'shuffle': True}
        train_kwargs.update(cuda_kwargs)
        test_kwargs.update(cuda_kwargs)

    transform=transforms.Compose([
        transforms.ToTensor(),
        transforms.Normalize((0.1307,), (0.3081,))
        ])
    dataset1 = datasets.MNIST('../data', train=True, download=True,
                       transform=transform)
    train_loader = torch.utils.data.DataLoader(dataset1,**train_kwargs)

    model = Net().to(device)
    optimizer = optim.Adadelta(model.parameters(), lr=args.lr)

    scheduler = StepLR(optimizer, step_size=1, gamma=args.gamma)
    for epoch in range(1, args.epochs + 1):
        train(args, model, device, train_loader, optimizer, epoch)
        test(model, device, test_loader)
        scheduler.step()

    if args.save_model:
        torch.save(model.state_dict(), "mnist_cnn.pt")


if __name__ == '__main__':
    main()
'''

LENET = '''\
import torch
import torch.nn as nn
import torch.nn.functional as F


class Net(nn.Module):

    def __init__(self):
        super(Net, self).__init__()
        # 1 input image channel, 6 output channels, 5x5 square convolution
        # kernel
        self.conv1 = nn.Conv2d(1, 6, 5)
        self.conv2 = nn.Conv2d(6, 16, 5)
        # an affine operation: y = Wx + b
        self.fc1 = nn.Linear(16 * 5 * 5, 120)  # 5*5 from image dimension
        self.fc2 = nn.Linear(120, 84)
        self.fc3 = nn.Linear(84, 10)

    def forward(self, x):
        # Max pooling over a (2, 2) window
        x = F.max_pool2d(F.relu(self.conv1(x)), (2, 2))
        # If the size is a square, you can specify with a single number
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = x.view(-1, self.num_flat_features(x))
        x = F.relu(self.fc1(x))
        x = F.relu(self.fc2(x))
        x = self.fc3(x)
        return x

    def num_flat_features(self, x):
        size = x.size()[1:]  # all dimensions except the batch dimension
        num_features = 1
        for s in size:
            num_features *= s
        return num_features


net = Net()
print(net)
'''

NANOGPT = '''\
"""
Full definition of a GPT Language Model, all of it in this single file.
"""

import math
import inspect
from dataclasses import dataclass

import torch
import torch.nn as nn
from torch.nn import functional as F

class LayerNorm(nn.Module):
    """ LayerNorm but with an optional bias. PyTorch doesn't support simply bias=False """

    def __init__(self, ndim, bias):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(ndim))
        self.bias = nn.Parameter(torch.zeros(ndim)) if bias else None

    def forward(self, input):
        return F.layer_norm(input, self.weight.shape, self.weight, self.bias, 1e-5)

class CausalSelfAttention(nn.Module):

    def __init__(self, config):
        super().__init__()
        assert config.n_embd % config.n_head == 0
        # key, query, value projections for all heads, but in a batch
        self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd, bias=config.bias)
        self.flash = hasattr(torch.nn.functional, 'scaled_dot_product_attention')
        if not self.flash:
            print("WARNING: using slow attention. Flash Attention requires PyTorch >= 2.0")
            # causal mask to ensure that attention is only applied to the left in the input sequence
            self.register_buffer("bias", torch.tril(torch.ones(config.block_size, config.block_size))
                                        .view(1, 1, config.block_size, config.block_size))

    def forward(self, x):
        B, T, C = x.size() # batch size, sequence length, embedding dimensionality (n_embd)

        q, k, v  = self.c_attn(x).split(self.n_embd, dim=2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) # (B, nh, T, hs)
        if self.flash:
            y = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=None, dropout_p=self.dropout if self.training else 0, is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
            att = att.masked_fill(self.bias[:,:,:T,:T] == 0, float('-inf'))
            att = F.softmax(att, dim=-1)
            y = att @ v # (B, nh, T, T) x (B, nh, T, hs) -> (B, nh, T, hs)
        y = y.transpose(1, 2).contiguous().view(B, T, C) # re-assemble all head outputs side by side
        return self.resid_dropout(self.c_proj(y))

class MLP(nn.Module):

    def __init__(self, config):
        super().__init__()
        self.c_fc    = nn.Linear(config.n_embd, 4 * config.n_embd, bias=config.bias)
        self.gelu    = nn.GELU()

    def forward(self, x):
        x = self.c_fc(x)
        return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))

@dataclass
class GPTConfig:
    block_size: int = 1024
    vocab_size: int = 50304 # GPT-2 vocab_size of 50257, padded up to nearest multiple of 64 for efficiency
    n_layer: int = 12
    dropout: float = 0.0
    bias: bool = True # True: bias in Linears and LayerNorms, like GPT-2. False: a bit better and faster

class GPT(nn.Module):

    def __init__(self, config):
        super().__init__()
        assert config.vocab_size is not None
        assert config.block_size is not None
        self.config = config

        self.transformer = nn.ModuleDict(dict(
            wte = nn.Embedding(config.vocab_size, config.n_embd),
            wpe = nn.Embedding(config.block_size, config.n_embd),
            drop = nn.Dropout(config.dropout),
            h = nn.ModuleList([Block(config) for _ in range(config.n_layer)]),
            ln_f = LayerNorm(config.n_embd, bias=config.bias),
        ))
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        self.transformer.wte.weight = self.lm_head.weight # https://paperswithcode.com/method/weight-tying

        # init all weights
        self.apply(self._init_weights)
        for pn, p in self.named_parameters():
            if pn.endswith('c_proj.weight'):
                torch.nn.init.normal_(p, mean=0.0, std=0.02/math.sqrt(2 * config.n_layer))

        print("number of parameters: %.2fM" % (self.get_num_params()/1e6,))

    def get_num_params(self, non_embedding=True):
        n_params = sum(p.numel() for p in self.parameters())
        if non_embedding:
            n_params -= self.transformer.wpe.weight.numel()
        return n_params

    def _init_weights(self, module):
        if isinstance(module, nn.Linear):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                torch.nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def forward(self, idx, targets=None):
        device = idx.device
        b, t = idx.size()
        assert t <= self.config.block_size, f"Cannot forward sequence of length {t}, block size is only {self.config.block_size}"
        pos = torch.arange(0, t, dtype=torch.long, device=device) # shape (t)

        tok_emb = self.transformer.wte(idx) # token embeddings of shape (b, t, n_embd)
        pos_emb = self.transformer.wpe(pos) # position embeddings of shape (t, n_embd)
        x = self.transformer.drop(tok_emb + pos_emb)
        for block in self.transformer.h:
            x = block(x)
        x = self.transformer.ln_f(x)

        if targets is not None:
            logits = self.lm_head(x)
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)
        else:
            logits = self.lm_head(x[:, [-1], :]) # note: using list [-1] to preserve the time dim
            loss = None

        return logits, loss

    @classmethod
    def from_pretrained(cls, model_type, override_args=None):
        assert model_type in {'gpt2', 'gpt2-medium', 'gpt2-large', 'gpt2-xl'}
        override_args = override_args or {} # default to empty dict
        assert all(k == 'dropout' for k in override_args)
        config_args = {
            'gpt2':         dict(n_layer=12, n_head=12, n_embd=768),  # 124M params
            'gpt2-medium':  dict(n_layer=24, n_head=16, n_embd=1024), # 350M params
        }[model_type]
        sd_keys = [k for k in sd_keys if not k.endswith('.attn.bias')] # discard this mask / buffer, not a param
        transposed = ['attn.c_attn.weight', 'attn.c_proj.weight', 'mlp.c_fc.weight', 'mlp.c_proj.weight']
        assert len(sd_keys_hf) == len(sd_keys), f"mismatched keys: {len(sd_keys_hf)} != {len(sd_keys)}"
        for k in sd_keys_hf:
            if any(k.endswith(w) for w in transposed):
                assert sd_hf[k].shape[::-1] == sd[k].shape
                with torch.no_grad():
                    sd[k].copy_(sd_hf[k].t())
        return model

    def configure_optimizers(self, weight_decay, learning_rate, betas, device_type):
        param_dict = {pn: p for pn, p in self.named_parameters()}
        param_dict = {pn: p for pn, p in param_dict.items() if p.requires_grad}
        decay_params = [p for n, p in param_dict.items() if p.dim() >= 2]
        optim_groups = [
            {'params': decay_params, 'weight_decay': weight_decay},
            {'params': nodecay_params, 'weight_decay': 0.0}
        ]
        fused_available = 'fused' in inspect.signature(torch.optim.AdamW).parameters
        use_fused = fused_available and device_type == 'cuda'
        extra_args = dict(fused=True) if use_fused else dict()
        optimizer = torch.optim.AdamW(optim_groups, lr=learning_rate, betas=betas, **extra_args)
        print(f"using fused AdamW: {use_fused}")
        return optimizer

    @torch.no_grad()
    def generate(self, idx, max_new_tokens, temperature=1.0, top_k=None):
        for _ in range(max_new_tokens):
            idx_cond = idx if idx.size(1) <= self.config.block_size else idx[:, -self.config.block_size:]
            logits, _ = self(idx_cond)
            logits = logits[:, -1, :] / temperature
            if top_k is not None:
                v, _ = torch.topk(logits, min(top_k, logits.size(-1)))
                logits[logits < v[:, [-1]]] = -float('Inf')
            probs = F.softmax(logits, dim=-1)
            idx_next = torch.multinomial(probs, num_samples=1)
            idx = torch.cat((idx, idx_next), dim=1)
        return idx
'''

MISC = '''\
# mingpt-style and assorted syntax
class Block(nn.Module):
    def __init__(self, config):
        super().__init__()
        m = self.mlp
        self.mlpf = lambda x: m.dropout(m.c_proj(m.act(m.c_fc(x)))) # MLP forward

async_ = 1
x = [i * 2 for i in range(10) if i % 2 if i > 3]
y = {k: v for k, v in zip(a, b)}
z = {i for i in s}
g = (t for t in u for w in t)
s = "a" 'b' """c
d""" r"\\d" b"\\x00"
f = f"{x!r:>10}" f'{y}'
if (n := len(a)) > 10: pass
w = x[..., 0] + x[:, None] + x[::-1] + x[1:2, ::3]
del x[0], y
global_var: int
t = 1,
(a, b), c = d
[a, *b] = c
for (i, j) in k: pass
with a, b as c, d as (e, f): pass
try:
    pass
except ValueError as e:
    raise RuntimeError("x") from e
except (A, B):
    pass
finally:
    pass
def f(a, b=1, /, c=2, *args, d, e=3, **kw) -> "T": return a if b else c
while x: x -= 1
else: pass
print(*a, sep="", **kw)
assert isinstance(x, (int, float)), f"bad {x}"
result = a if b else c if d else e
mask = ~a | b & c ^ d << 2 >> 1
q = not a in b and c is not d or e not in f
nonlocal_ = 0; x = 1; y = 2;
x = 0x_ff + 0o_17 + 0b_1 + 1_000 + 1e-3 + .5 + 3. + 1_000.5 + 1E+5 + 0.0 + 00
x = \\
    1
'''


@pytest.mark.parametrize("name,src", [("mnist", MNIST), ("lenet", LENET), ("nanogpt", NANOGPT), ("misc", MISC)])
def test_inline_samples_parse(parse_dump, tmp_path, name, src):
    out = dump_of(parse_dump, tmp_path, src)
    assert out.count("\n") >= 3


def test_lenet_dump_details(parse_dump, tmp_path):
    out = dump_of(parse_dump, tmp_path, LENET)
    assert "(assign size (subscript (call (attr x size)) (slice 1 nil nil)))" in out
    assert "(for s size (body (augassign *= num_features s)))" in out
    assert "(expr (call (attr (call super Net self) __init__)))" in out


def test_nanogpt_dump_details(parse_dump, tmp_path):
    out = dump_of(parse_dump, tmp_path, NANOGPT)
    assert "(call (attr self lm_head) (subscript x (tuple (slice nil nil nil) (list (unary - 1)) (slice nil nil nil))))" in out
    assert "(class GPTConfig (decorators dataclass) (annassign block_size int 1024)" in out
    assert ("(assign (attr self transformer) (call (attr nn ModuleDict) (call dict (kw wte (call (attr nn Embedding)"
            in out)
    assert ("(kw h (call (attr nn ModuleList) (listcomp (call Block config) (compfor _ (call range (attr config n_layer))))))"
            in out)
    assert ('(assert (compare t <= (attr (attr self config) block_size)) (fstr "Cannot forward sequence of length {t}, '
            'block size is only {self.config.block_size}"))') in out
    assert "(def generate (decorators (call (attr torch no_grad))) (params self idx max_new_tokens" in out
    assert "(subscript idx (tuple (slice nil nil nil) (slice (unary - (attr (attr self config) block_size)) nil nil)))" in out


@pytest.mark.parametrize("src,expected", [
    ("-2**2", "(expr (unary - (binop ** 2 2)))"),
    ("a - b - c", "(expr (binop - (binop - a b) c))"),
    ("2**3**2", "(expr (binop ** 2 (binop ** 3 2)))"),
    ("2**-1", "(expr (binop ** 2 (unary - 1)))"),
    ("a if b else c if d else e", "(expr (ifexp b a (ifexp d c e)))"),
    ("not a == b", "(expr (unary not (compare a == b)))"),
    ("a < b < c", "(expr (compare a < b < c))"),
    ("a is not b not in c", "(expr (compare a is not b not in c))"),
    ("x @ y * z", "(expr (binop * (binop @ x y) z))"),
    ("1 + 2 * 3", "(expr (binop + 1 (binop * 2 3)))"),
    ("(1 + 2) * 3", "(expr (binop * (binop + 1 2) 3))"),
    ("a or b and not c", "(expr (boolop or a (boolop and b (unary not c))))"),
    ("a | b ^ c & d << e + f", "(expr (binop | a (binop ^ b (binop & c (binop << d (binop + e f))))))"),
    ("-x.y[0](z)", "(expr (unary - (call (subscript (attr x y) 0) z)))"),
    ("lambda x, *a, k=1, **kw: x + 1",
     "(expr (lambda (params x *a (param k (default 1)) **kw) (binop + x 1)))"),
    ("lambda: 0", "(expr (lambda (params) 0))"),
    ("x[:, :, :T, :T]",
     "(expr (subscript x (tuple (slice nil nil nil) (slice nil nil nil) (slice nil T nil) (slice nil T nil))))"),
    ("x[..., 0]", "(expr (subscript x (tuple ... 0)))"),
    ("x[:, [-1], :]", "(expr (subscript x (tuple (slice nil nil nil) (list (unary - 1)) (slice nil nil nil))))"),
    ("x[1:]", "(expr (subscript x (slice 1 nil nil)))"),
    ("x[::2]", "(expr (subscript x (slice nil nil 2)))"),
    ("x[a:b:c]", "(expr (subscript x (slice a b c)))"),
    ("x[0,]", "(expr (subscript x (tuple 0)))"),
    ("f(x for x in y)", "(expr (call f (genexp x (compfor x y))))"),
    ("f(a, *b, c=1, **d)", "(expr (call f a (starred b) (kw c 1) (kw ** d)))"),
    ("a = b = c", "(assign a b c)"),
    ("a, b = b, a", "(assign (tuple a b) (tuple b a))"),
    ("(a, b) = [c, *d] = e", "(assign (tuple a b) (list c (starred d)) e)"),
    ("x: int = 3", "(annassign x int 3)"),
    ("x: int", "(annassign x int)"),
    ("x **= 2", "(augassign **= x 2)"),
    ("x = ()", "(assign x (tuple))"),
    ("x = (1,)", "(assign x (tuple 1))"),
    ("x = (1)", "(assign x 1)"),
    ("x = {}", "(assign x (dict))"),
    ("x = {1}", "(assign x (set 1))"),
    ("x = {'a': 1, **b}", '(assign x (dict ("a" 1) (** b)))'),
    ("x = [i for i in a for j in i if j if i]",
     "(assign x (listcomp i (compfor i a) (compfor j i (if j) (if i))))"),
    ("x = {k: v for k, v in d}", "(assign x (dictcomp k v (compfor (tuple k v) d)))"),
    ("'a' 'b' \"c\"", '(expr "abc")'),
    ("f'{x}' 'y{'", '(expr (fstr "{x}y{{"))'),
    ("'\\x41\\n\\t\\u00e9\\101\\\\'", '(expr "A\\n\\t\\xc3\\xa9A\\\\")'),
    ("r'\\n\\''", "(expr \"\\\\n\\\\'\")"),
    ("0x1F, 0o17, 0b101, 1_000, 0", "(expr (tuple 31 15 5 1000 0))"),
    ("1.0, 1e-3, .5, 3., 1_000.5, 1E+5", "(expr (tuple 1.0 0.001 0.5 3.0 1000.5 1e+05))"),
    ("9223372036854775807", "(expr 9223372036854775807)"),
    ("None, True, False, ...", "(expr (tuple None True False ...))"),
    ("if (n := 10) > 5: pass", "(if (compare (namedexpr n 10) > 5) (body (pass)))"),
    ("import a.b.c as d, e", "(import (as a.b.c d) e)"),
    ("from ..a.b import (x as y, z,)", "(from ..a.b (as x y) z)"),
    ("from . import x", "(from . x)"),
    ("from m import *", "(from m *)"),
    ("raise E from c", "(raise E (from c))"),
    ("del a[0], b.c", "(del (subscript a 0) (attr b c))"),
    ("global a, b", "(global a b)"),
    ("assert x, 'm'", '(assert x "m")'),
    ("return", "(return)"),
    ("x = 1; y = 2;", "(assign x 1)\n(assign y 2)"),
    ("if a:\n    x\nelif b:\n    y\nelse:\n    z",
     "(if a (body (expr x)) (else (if b (body (expr y)) (else (expr z)))))"),
    ("for i, (a, b) in z:\n    continue\nelse:\n    break",
     "(for (tuple i (tuple a b)) z (body (continue)) (else (break)))"),
    ("while x:\n    pass", "(while x (body (pass)))"),
    ("with a as b, c:\n    pass", "(with (withitem a b) (withitem c) (body (pass)))"),
    ("with (a as b, c as d):\n    pass", "(with (withitem a b) (withitem c d) (body (pass)))"),
    ("try:\n    pass\nexcept E as e:\n    pass\nexcept:\n    pass\nelse:\n    pass\nfinally:\n    pass",
     "(try (body (pass)) (except E (as e) (body (pass))) (except (body (pass))) (else (pass)) (finally (pass)))"),
    ("@a.b(1)\n@c\ndef f(x: int = 1, /, y=2, *, z, **k) -> T:\n    return x",
     "(def f (decorators (call (attr a b) 1) c) (params (param x (ann int) (default 1)) / (param y (default 2)) * z **k)"
     " (returns T) (return x))"),
    ("class A(B, C, metaclass=M):\n    '''doc'''\n    x = 1",
     '(class A (bases B C) (keywords (kw metaclass M)) (expr "doc") (assign x 1))'),
    ("class A:\n    pass", "(class A (pass))"),
    ("if x:\n\tif y:\n\t\tpass\n\tz\nw", "(if x (body (if y (body (pass))) (expr z)))\n(expr w)"),
    ("x = [1,\n  2]\\\n  + [3]  # c\n", "(assign x (binop + (list 1 2) (list 3)))"),
    ("x = '''a\nb'''", '(assign x "a\\nb")'),
    ("print(x)", "(expr (call print x))"),
    ("z = 1j + 2.5J * 1_0j", "(assign z (binop + 1.0j (binop * 2.5j 1e+01j)))"),
])
def test_dump_exact(parse_dump, tmp_path, src, expected):
    assert dump_of(parse_dump, tmp_path, src + "\n").rstrip("\n") == expected


def test_no_trailing_newline_and_crlf(parse_dump, tmp_path):
    assert dump_of(parse_dump, tmp_path, "if x:\n    y = 1").strip() == "(if x (body (assign y 1)))"
    rc, out, err = run_src(parse_dump, tmp_path, b"if x:\r\n    y = 1\r\n", mode="b")
    assert rc == 0 and out.strip() == "(if x (body (assign y 1)))", err
    rc, out, err = run_src(parse_dump, tmp_path, b"\xef\xbb\xbfx = 1\n", mode="b")
    assert rc == 0 and out.strip() == "(assign x 1)", err
    assert dump_of(parse_dump, tmp_path, "") == ""
    assert dump_of(parse_dump, tmp_path, "\n\n  # only a comment\n\t\n") == ""


# ---- diagnostics --------------------------------------------------------------------------

DIAGS = [
    # (source, first line of stderr, the source line shown, the caret line)
    ('x = "abc\n', 't.py:1:5: error: unterminated string literal', '  x = "abc', '      ^'),
    ("s = '''abc\n\nx = 1\n", "t.py:1:5: error: unterminated triple-quoted string literal", "  s = '''abc",
     "      ^~~"),
    ("if x:\n        y = 1\n    z = 2\n", "t.py:3:1: error: unindent does not match any outer indentation level",
     "      z = 2", "  ^~~~"),
    ("if x\n    pass\n", "t.py:1:5: error: expected ':' after the if condition", "  if x", "      ^"),
    ("for i in range(3)\n    pass\n", "t.py:1:18: error: expected ':' after the for-loop iterable",
     "  for i in range(3)", "                   ^"),
    ("x = foo(1, [2, 3)\n", "t.py:1:17: error: closing ')' does not match the opening '['",
     "  x = foo(1, [2, 3)", "                  ^"),
    ("x = (1,\n  2\n", "t.py:1:5: error: '(' was never closed", "  x = (1,", "      ^"),
    ("y = 1]\n", "t.py:1:6: error: unmatched ']'", "  y = 1]", "       ^"),
    ("def class(x):\n    pass\n", "t.py:1:5: error: 'class' is a keyword and cannot be used as a name",
     "  def class(x):", "      ^~~~~"),
    ("x.import = 1\n", "t.py:1:3: error: 'import' is a keyword and cannot be used as a name", "  x.import = 1",
     "    ^~~~~~"),
    ("x = 1 $ 2\n", "t.py:1:7: error: unexpected character '$'", "  x = 1 $ 2", "        ^"),
    ("a = b ? c\n", "t.py:1:7: error: unexpected character '?'", "  a = b ? c", "        ^"),
    (b"x = 1\ny = \x00\n", "t.py:2:5: error: NUL byte in source (is this a binary file?)", "  y = \\x00", "      ^~~~"),
    ("f(x) = 3\n", "t.py:1:1: error: invalid assignment target: a function call", "  f(x) = 3", "  ^~~~"),
    ("a + 1 = 3\n", "t.py:1:1: error: invalid assignment target: an operator expression", "  a + 1 = 3",
     "  ^~~~~"),
    ("x += y, z = 1\n", "t.py:1:11: error: expected end of statement, found '='", "  x += y, z = 1",
     "            ^"),
    ("for f() in x: pass\n", "t.py:1:5: error: invalid for-loop target: a function call", "  for f() in x: pass",
     "      ^~~"),
    ("x = " + "(" * 200 + "1" + ")" * 200 + "\n",
     "t.py:1:155: error: expression nested too deeply (the limit is 150 levels)", None, None),
    ("if x:\n\tpass\n        pass\n", "t.py:3:1: error: inconsistent use of tabs and spaces in indentation",
     "          pass", "  ^~~~~~~~"),
    ("x = 99999999999999999999\n",
     "t.py:1:5: error: integer literal is too large (it does not fit in a signed 64-bit integer)",
     "  x = 99999999999999999999", "      ^~~~~~~~~~~~~~~~~~~~"),
    ("def f():\nreturn 1\n", "t.py:2:1: error: expected an indented block after 'def'", "  return 1", "  ^~~~~~"),
    ("def f():\n", "t.py:1:9: error: expected an indented block after 'def'", "  def f():", "          ^"),
    ("x = (1 + )\n", "t.py:1:10: error: expected an expression, found ')'", "  x = (1 + )", "           ^"),
    ("x = 1 +\n", "t.py:1:8: error: expected an expression, found end of line", "  x = 1 +", "         ^"),
    ("x = 1\n  y = 2\n", "t.py:2:3: error: unexpected indent", "    y = 2", "    ^"),
    ("x = 0x1j\n", "t.py:1:5: error: invalid hexadecimal literal: only decimal numbers can be imaginary", "  x = 0x1j",
     "      ^~~~"),
    ("x = 012\n",
     "t.py:1:5: error: leading zeros in decimal integer literals are not permitted; use an 0o prefix for octal integers",
     "  x = 012", "      ^~~"),
    ("x = 0b102\n", "t.py:1:9: error: invalid digit '2' in binary literal", "  x = 0b102", "          ^"),
    ("\u00e9t\u00e9 = 1\n", "t.py:1:1: error: non-ASCII character outside a string or comment "
     "(non-ASCII identifiers are not supported)", "  \u00e9t\u00e9 = 1", "  ^"),
    ("x = 'a\\N{DASH}'\n", "t.py:1:7: error: \\N{...} escapes are not supported", "  x = 'a\\N{DASH}'",
     "        ^~"),
    ("def f(a=1, b):\n    pass\n", "t.py:1:12: error: parameter without a default follows a parameter with a default",
     "  def f(a=1, b):", "             ^"),
    ("f(a=1, 2)\n", "t.py:1:8: error: positional argument follows keyword argument", "  f(a=1, 2)", "         ^"),
    ("x = (a b)\n", "t.py:1:8: error: expected ',' or ')', found 'b'", "  x = (a b)", "         ^"),
    ("else:\n    pass\n", "t.py:1:1: error: 'else' without a matching 'if', 'for', 'while' or 'try'", "  else:",
     "  ^~~~"),
    ("x = a if b\n", "t.py:1:11: error: expected 'else' after the condition of an 'if' expression", "  x = a if b",
     "            ^"),
    ("x = \\ 1\n", "t.py:1:5: error: unexpected character after a line continuation character ('\\' must end the line)",
     "  x = \\ 1", "      ^"),
    ("\tx = \x01\n", "t.py:1:6: error: unexpected character '\\x01'", "          x = \\x01", "              ^~~~"),
    ("async def f(): pass\n", "t.py:1:1: error: 'async' is not supported", "  async def f(): pass", "  ^~~~~"),
    ("x = yield 1\n", "t.py:1:5: error: 'yield' is not supported", "  x = yield 1", "      ^~~~~"),
    (b"x = 'ok' + \"\xc3\xa9\x01\xe9\" + $\n", "t.py:1:21: error: unexpected character '$'",
     "  x = 'ok' + \"\u00e9\\x01\\xe9\" + $", "                           ^"),
]


@pytest.mark.parametrize("src,first,line,caret", DIAGS, ids=[str(i) for i in range(len(DIAGS))])
def test_diagnostics(parse_dump, tmp_path, src, first, line, caret):
    if isinstance(src, str):
        src = src.encode("utf-8")
    rc, out, err = run_src(parse_dump, tmp_path, src, mode="b")
    assert rc == 1, (rc, out, err)
    assert out == ""
    lines = err.split("\n")
    assert lines[0] == first, err
    if line is not None:
        assert lines[1] == line, err
        assert lines[2] == caret, err
    else:
        assert lines[2].strip().startswith("^"), err


def test_note_on_mismatched_bracket(parse_dump, tmp_path):
    rc, out, err = run_src(parse_dump, tmp_path, "x = foo(1,\n  [2, 3)\n")
    assert rc == 1
    assert err.splitlines() == [
        "t.py:2:8: error: closing ')' does not match the opening '['",
        "    [2, 3)",
        "         ^",
        "t.py:2:3: note: the '[' opened here",
        "    [2, 3)",
        "    ^",
    ]


def test_missing_close_has_note(parse_dump, tmp_path):
    rc, out, err = run_src(parse_dump, tmp_path, "f(a,\n  b c)\n")
    assert rc == 1
    assert err.splitlines() == [
        "t.py:2:5: error: expected ',' or ')' after a call argument, found 'c'",
        "    b c)",
        "      ^",
        "t.py:1:2: note: to match this '('",
        "  f(a,",
        "   ^",
    ]


def test_tabs_expanded_in_excerpt(parse_dump, tmp_path):
    rc, out, err = run_src(parse_dump, tmp_path, "if x:\n\ty = 1 $\n")
    assert rc == 1
    assert err.splitlines()[:3] == [
        "t.py:2:8: error: unexpected character '$'",
        "          y = 1 $",
        "                ^",
    ]


def test_long_line_is_windowed(parse_dump, tmp_path):
    rc, out, err = run_src(parse_dump, tmp_path, "x = " + "1 + " * 500 + "$\n")
    assert rc == 1
    lines = err.splitlines()
    assert lines[0] == "t.py:1:2005: error: unexpected character '$'"
    assert lines[1].startswith("  ...") and len(lines[1]) < 200
    assert lines[1][lines[2].index("^")] == "$"


def test_unreadable_file(parse_dump, tmp_path):
    r = subprocess.run([parse_dump, str(tmp_path / "missing.py")], capture_output=True, text=True)
    assert r.returncode == 2
    assert r.stderr.startswith("ctc: error: cannot read ")


# ---- robustness ---------------------------------------------------------------------------

PY_BITS = [b"(", b")", b"[", b"]", b"{", b"}", b":", b",", b".", b"...", b"\n", b"    ", b"\t", b" ", b"\\\n", b"\\",
           b"'", b'"', b"'''", b'"""', b"#", b"=", b"==", b"**", b"*", b"@", b"->", b":=", b"lambda", b"if", b"else",
           b"elif", b"for", b"in", b"not", b"is", b"def", b"class", b"return", b"x", b"self", b"0x", b"1e", b"1.5",
           b"_", b"f'", b"rb'", b"\x00", b"\xff", b"\xc3\xa9", b"\r", b"\r\n", b"\f", b";", b"from", b"import", b"as",
           b"try:", b"except", b"with", b"yield", b"-", b"~", b"9" * 25, b"\\x", b"\\u12", b"{x}", b"%", b"//="]


def _mutate(rng, data):
    data = bytearray(data)
    for _ in range(rng.randint(1, 6)):
        op = rng.randrange(6)
        pos = rng.randint(0, len(data))
        if op == 0 and data:  # delete a range
            del data[pos:pos + rng.randint(1, 20)]
        elif op == 1:  # insert python-ish bits
            data[pos:pos] = rng.choice(PY_BITS)
        elif op == 2:  # insert random bytes
            data[pos:pos] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 4)))
        elif op == 3 and data:  # duplicate a range
            end = min(len(data), pos + rng.randint(1, 200))
            data[pos:pos] = data[pos:end]
        elif op == 4 and data:  # flip a byte
            i = rng.randrange(len(data))
            data[i] = rng.randrange(256)
        elif op == 5:  # truncate
            del data[pos:]
    return bytes(data)


def _random_inputs():
    rng = random.Random(20240531)
    seeds = [open(m, "rb").read() for m in MODELS] + [s.encode() for s in (MNIST, LENET, NANOGPT, MISC)]
    cases = []
    for i in range(500):
        n = rng.randint(0, 400)
        if i % 2:
            cases.append(bytes(rng.randrange(256) for _ in range(n)))
        else:
            cases.append(b"".join(rng.choice(PY_BITS) for _ in range(n // 3)))
    for i in range(500):
        cases.append(_mutate(rng, rng.choice(seeds)))
    # pathological nesting and lengths
    N = 20000
    cases += [
        b"x = " + b"(" * N + b"1" + b")" * N, b"(" * N, b"[" * N + b"]" * N, b"x = " + b"-" * N + b"1",
        b"x = " + b"not " * N + b"a", b"x = " + b"lambda:" * N + b"1", b"x = " + b"a+" * N + b"a",
        b"x = " + b"a." * N + b"b", b"x = f" + b"()" * N, b"x = " + b"2**" * N + b"2",
        b"x = " + b"a if b else " * N + b"c", b"x = a" + b"[0]" * N, b"{" * N, b"x = " + b"~" * N + b"a",
        b"".join(b" " * i + b"if x:\n" for i in range(300)) + b" " * 300 + b"pass\n",
        b"if a:\n pass\n" + b"elif b:\n pass\n" * 3000,
        b"def f(" + b",".join(b"a%d" % i for i in range(N)) + b"): pass\n",
        b"f(" + b",".join(b"a%d=1" % i for i in range(N)) + b")\n",
        b"x = " + b"'a' f'{b}' " * N + b"\n", b"import " + b".".join([b"a"] * N) + b"\n",
        b"x = " + b"a < " * N + b"b\n", b"x = 1;" * N, b"[" + b"x for x in y " * N + b"]",
        b"x = '" + b"\\" * 9 + b"'", b"'\\", b"\\", b"'''", b"f'{", b"0x", b"1e", b"1_", b".", b"\xff" * 10,
    ]
    return cases


def _san_run(exe, files, cwd):
    return subprocess.run([exe, "-q"] + files, cwd=cwd, capture_output=True, env=SAN_ENV, timeout=5)


def _check_result(r, what):
    err = r.stderr.decode("utf-8", "replace")
    assert r.returncode in (0, 1), "%s: exit %d\n%s" % (what, r.returncode, err[-3000:])
    for m in SAN_MARKERS:
        assert m not in err, "%s: sanitizer report\n%s" % (what, err[-3000:])


def test_fuzz_under_sanitizers(parse_dump_san, tmp_path):
    cases = _random_inputs()
    names = []
    for i, data in enumerate(cases):
        name = "f%04d.py" % i
        (tmp_path / name).write_bytes(data)
        names.append(name)
    batch = 50
    for b in range(0, len(names), batch):
        files = names[b:b + batch]
        try:
            r = _san_run(parse_dump_san, files, tmp_path)
            ok = r.returncode in (0, 1) and not any(m in r.stderr.decode("utf-8", "replace") for m in SAN_MARKERS)
        except subprocess.TimeoutExpired:
            ok = False
        if not ok:  # find the guilty input
            for f in files:
                try:
                    r = _san_run(parse_dump_san, [f], tmp_path)
                except subprocess.TimeoutExpired:
                    pytest.fail("%s: timed out (input kept in %s)" % (f, tmp_path))
                _check_result(r, "%s (input kept in %s)" % (f, tmp_path))
            pytest.fail("batch %d failed but no single input does" % b)


def test_every_error_names_a_location(parse_dump, tmp_path):
    """Every failing fuzz input prints exactly one 'error:' line, located in t.py."""
    rng = random.Random(7)
    seeds = [LENET.encode(), NANOGPT.encode()]
    for i in range(60):
        data = _mutate(rng, rng.choice(seeds))
        rc, out, err = run_src(parse_dump, tmp_path, data, mode="b")
        assert rc in (0, 1)
        if rc == 1:
            errors = [l for l in err.splitlines() if ": error: " in l]
            assert len(errors) == 1, err
            assert errors[0].startswith("t.py:"), err
            # the excerpt is printable ASCII / UTF-8 only
            assert all(ch >= " " or ch == "\n" for ch in err), repr(err)
