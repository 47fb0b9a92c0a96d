"""Text data and generation (issue 17 items 2 and 3): `./net train --text / --tokens`
builds nanoGPT's (x, y) windows from a seeded stream, which this file draws the same
way, so PyTorch running the same windows gives the same losses; `./net sample`
decodes with the KV-cache entries ctc derives from the unchanged forward."""
import os
import re
import subprocess

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from ctc_testlib import EXAMPLES, compare, ctc_build, load_module, st_read, st_write, state_dict_np

CHAR_GPT = os.path.join(EXAMPLES, "char_gpt.py")
SMALL = "GPTConfig(block_size=16, vocab_size=48, n_layer=2, n_head=2, n_embd=32)"
M64 = (1 << 64) - 1


def small_model_file(path, batch=4):
    src = open(CHAR_GPT).read()
    src = src.replace("config = GPTConfig()", f"config = {SMALL}").replace("BATCH = 32", f"BATCH = {batch}")
    path.write_text(src)
    return str(path)


# ---- the driver's windows (rt_text.c, rt_driver.c: splitmix64, rand_below) ----

def splitmix64(s):
    s = (s + 0x9E3779B97F4A7C15) & M64
    z = s
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return s, z ^ (z >> 31)


def rand_below(s, m):
    reject = ((1 << 64) - m) % m
    while True:
        s, r = splitmix64(s)
        if r >= reject:
            return s, r % m


def windows(data, T, B, seed, g):
    """The batch of training step g (0-based): offsets uniform in [0, len - T)."""
    s = (seed ^ (((g + 1) * 0xD1B54A32D192ED03) & M64)) & M64
    xs, ys = [], []
    for _ in range(B):
        s, off = rand_below(s, len(data) - T)
        xs.append(data[off:off + T])
        ys.append(data[off + 1:off + 1 + T])
    return torch.tensor(np.array(xs), dtype=torch.long), torch.tensor(np.array(ys), dtype=torch.long)


TEXT = ("It was the best of times, it was the worst of times, it was the age of wisdom, "
        "it was the age of foolishness, it was the epoch of belief - naïve, über-fast; "
        "it was the season of Light, it was the season of Darkness.\n") * 3


@pytest.fixture(scope="module")
def char_exe(tmp_path_factory):
    d = tmp_path_factory.mktemp("chargpt")
    exe = str(d / "gpt")
    ctc_build(small_model_file(d / "m.py"), exe)
    return exe, str(d / "m.py")


def fresh_model(path, seed=0):
    """The file's own model and optimizer, initialised from the seed."""
    torch.manual_seed(seed)
    mod = load_module(path, f"chargpt_{seed}")
    return mod, mod.model


FORTUNES = "/usr/share/games/fortunes"


@pytest.mark.slow
@pytest.mark.skipif(not os.path.isdir(FORTUNES), reason="Debian's fortunes-min is not installed")
def test_char_gpt_learns_fortunes(tmp_path):
    """examples/char_gpt.py as docs/language-models.md runs it: trained by the generated program on
    the English text of Debian's fortunes-min, its validation loss (the last 10%) falls
    below 2.0 nats per character; then it samples text in the file's characters."""
    text = "".join(open(os.path.join(FORTUNES, f), encoding="utf-8").read() for f in ("fortunes", "literature", "riddles"))
    (tmp_path / "fortunes.txt").write_text(text, encoding="utf-8")
    exe = str(tmp_path / "gpt")
    ctc_build(CHAR_GPT, exe)
    r = subprocess.run([exe, "train", "--text", tmp_path / "fortunes.txt", "--steps", "1500", "--eval-interval", "250",
                        "--val-fraction", "0.1", "--save", tmp_path / "gpt.safetensors", "--save-training-state"], capture_output=True,
                       text=True, timeout=1800)
    assert r.returncode == 0, r.stderr
    val = [float(v) for v in re.findall(r"val loss ([\d.]+)", r.stdout)]
    assert len(val) == 6 and val[-1] < 2.0 and val[-1] < val[0] - 0.3, r.stdout
    r = sample(exe, tmp_path / "gpt.safetensors", "--prompt", "The ", "--tokens", "200", "--temperature", "0.8",
               "--top-k", "20")
    out = r.stdout[:-1]
    assert out.startswith("The ") and len(out) == 204 and set(out) <= set(text), out


def torch_losses(mod, model, data, steps, seed, B, T):
    """The file's train_step (AdamW, nanoGPT's learning-rate schedule from the step) on the driver's windows."""
    return [mod.train_step(*windows(data, T, B, seed, g), torch.tensor(g)).item() for g in range(steps)]


def read_log(path):
    rows = open(path).read().split("\n")[1:]
    return [float(r.split(",")[2]) for r in rows if r]


def test_train_text_matches_torch(char_exe, tmp_path):
    """--text: the vocabulary is the sorted set of the file's characters (UTF-8 code
    points), written beside --save; the losses of 6 steps equal PyTorch's on the same
    windows; --val-fraction holds out the tail and prints a validation loss."""
    exe, path = char_exe
    (tmp_path / "t.txt").write_text(TEXT, encoding="utf-8")
    mod, model = fresh_model(path)
    st_write(tmp_path / "init.safetensors", state_dict_np(model))
    r = subprocess.run([exe, "train", "--text", tmp_path / "t.txt", "--block", "16", "--steps", "6",
                        "--eval-interval", "3", "--eval-iters", "2", "--val-fraction", "0.1", "--seed", "7",
                        "--weights", tmp_path / "init.safetensors", "--log", tmp_path / "log.csv",
                        "--save", tmp_path / "out.safetensors", "--save-training-state"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    vocab = sorted(set(TEXT))
    assert (tmp_path / "out.vocab.txt").read_text(encoding="utf-8") == "".join(vocab)
    stoi = {c: i for i, c in enumerate(vocab)}
    data = np.array([stoi[c] for c in TEXT], dtype=np.int64)
    n = int(0.9 * len(data))
    want = torch_losses(mod, model, data[:n], 6, 7, 4, 16)
    compare("losses", read_log(tmp_path / "log.csv"), want, rtol=1e-4, atol=1e-5)
    lines = re.findall(r"step (\d+): train loss ([\d.]+), val loss ([\d.]+)", r.stdout)
    assert [int(l[0]) for l in lines] == [3, 6], r.stdout
    # the validation loss: the forward entry's cross-entropy on windows of the held-out
    # tail (batch k drawn from ~seed and k, as a training step's from seed and step)
    model.eval()
    vl = []
    with torch.no_grad():
        for k in range(2):
            x, y = windows(data[n:], 16, 4, (~7) & M64, k)
            vl.append(F.cross_entropy(model(x).view(-1, 48), y.view(-1)).item())
    assert abs(float(lines[-1][2]) - np.mean(vl)) < 1e-3, (lines, vl)


def test_train_tokens_bin(char_exe, tmp_path):
    """--tokens: nanoGPT's train.bin (uint16 ids), the same windows and losses."""
    exe, path = char_exe
    data = np.random.default_rng(3).integers(0, 48, size=400).astype(np.uint16)
    data.tofile(tmp_path / "train.bin")
    mod, model = fresh_model(path, seed=1)
    st_write(tmp_path / "init.safetensors", state_dict_np(model))
    r = subprocess.run([exe, "train", "--tokens", tmp_path / "train.bin", "--steps", "4", "--seed", "3",
                        "--weights", tmp_path / "init.safetensors", "--log", tmp_path / "log.csv"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    want = torch_losses(mod, model, data.astype(np.int64), 4, 3, 4, 16)
    compare("losses", read_log(tmp_path / "log.csv"), want, rtol=1e-4, atol=1e-5)


def test_text_errors(char_exe, tmp_path):
    exe, _ = char_exe
    (tmp_path / "t.txt").write_text("".join(chr(0x100 + i) for i in range(60)) * 2, encoding="utf-8")
    (tmp_path / "bad.txt").write_bytes(b"abc\xff\xfedef" * 10)
    (tmp_path / "odd.bin").write_bytes(b"\x01\x00\x02")
    cases = [(["--text", tmp_path / "t.txt", "--steps", "1"], "60 distinct characters, but the model's vocabulary"),
             (["--text", tmp_path / "bad.txt", "--steps", "1"], "byte 3 (0xff) is not valid UTF-8"),
             (["--tokens", tmp_path / "odd.bin", "--steps", "1"], "not a whole number of uint16 tokens"),
             (["--text", tmp_path / "t.txt", "--steps", "1", "--block", "8"], "compiled for windows of 16 tokens"),
             (["--text", tmp_path / "t.txt"], "needs --steps N"),
             (["--text", tmp_path / "t.txt", "--steps", "1", "--epochs", "2"], "--epochs does not go with --text"),
             (["--text", tmp_path / "t.txt", "--steps", "1", "--val-fraction", "1.5"], "--val-fraction needs")]
    for args, msg in cases:
        r = subprocess.run([exe, "train", *args], capture_output=True, text=True, timeout=60)
        assert r.returncode == 1 and msg in r.stderr, (args, r.stderr)


# ---- generation: the decode entry and `./net sample` ----

def sample(exe, weights, *args, timeout=120):
    r = subprocess.run([exe, "sample", "--weights", weights, *map(str, args)], capture_output=True, text=True,
                       timeout=timeout)
    assert r.returncode == 0, r.stderr
    return r


def torch_window_logits(model, tokens, n_prompt, block):
    """The logits nanoGPT's generate uses at each step: the last position of the last
    `block` tokens."""
    out = []
    with torch.no_grad():
        for i in range(n_prompt, len(tokens)):
            cond = torch.tensor(tokens[max(0, i - block):i])[None]
            out.append(model(cond)[0, -1].numpy())
    return np.array(out)


def weights_of(model, path):
    st_write(path, state_dict_np(model))
    return str(path)


def test_decode_logits_equal_forward(char_exe, tmp_path):
    """`decode` (one token at position pos, per-layer K/V caches in the arena) gives the
    logits of forward at every position, through the window sliding past block_size
    (16) twice; the cache entries are not saved with the weights."""
    exe, path = char_exe
    info = subprocess.run([exe, "info"], capture_output=True, text=True).stdout
    assert "entry decode" in info and "entry prefill" in info, info
    mod, model = fresh_model(path, seed=2)
    with torch.no_grad():   # larger weights than the init's, so that the logits differ between tokens
        for p in model.parameters():
            p.mul_(8.0 if p.dim() > 1 else 1.0)
    model.eval()
    w = weights_of(model, tmp_path / "w.safetensors")
    r = sample(exe, w, "--prompt-tokens", "5,7,11", "--tokens", "40", "--seed", "3", "--logits", tmp_path / "l.npy")
    assert "KV cache" in r.stderr
    tokens = [int(t) for t in r.stdout.split()]
    assert len(tokens) == 43 and len(set(tokens)) > 5, tokens
    got = np.load(tmp_path / "l.npy")
    compare("decode logits", got, torch_window_logits(model, tokens, 3, 16), rtol=1e-4, atol=1e-4)
    np.save(tmp_path / "i.npy", np.zeros((4, 16), np.int64))
    r = subprocess.run([exe, "run", "forward", "--weights", w, "--input", "idx=" + str(tmp_path / "i.npy"),
                        "--save", tmp_path / "s.safetensors"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert not [k for k in st_read(tmp_path / "s.safetensors") if k.startswith("ctc.kv.")]


def test_greedy_equals_generate(char_exe, tmp_path):
    """--top-k 1 gives token for token what the file's own generate gives in PyTorch,
    for 150 tokens (the window of 16 slides); with a vocabulary, text in and out."""
    exe, path = char_exe
    mod, model = fresh_model(path, seed=4)
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(6.0 if p.dim() > 1 else 1.0)
    model.eval()
    w = weights_of(model, tmp_path / "w.safetensors")
    vocab = sorted(set(TEXT))
    (tmp_path / "w.vocab.txt").write_text("".join(vocab), encoding="utf-8")
    prompt = "it was "
    idx = torch.tensor([[vocab.index(c) for c in prompt]])
    want = model.generate(idx, 150, top_k=1)[0].tolist()
    if max(want) >= len(vocab):
        pytest.skip("the random model chose a token outside the text's vocabulary")
    r = sample(exe, w, "--prompt", prompt, "--tokens", "150", "--top-k", "1")
    assert r.stdout == "".join(vocab[i] for i in want) + "\n"
    # a nanoGPT-shaped checkpoint saved by PyTorch loads directly (the vocabulary beside it)
    torch.save({"model": model.state_dict(), "optimizer": mod.optimizer.state_dict(), "iter_num": 5},
               tmp_path / "ckpt.pt")
    (tmp_path / "ckpt.vocab.txt").write_text("".join(vocab), encoding="utf-8")
    r2 = sample(exe, tmp_path / "ckpt.pt", "--prompt", prompt, "--tokens", "150", "--top-k", "1")
    assert r2.stdout == r.stdout


SDPA_ATTN = """        y = F.scaled_dot_product_attention(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=True)
"""


def test_decode_from_sdpa_is_causal(tmp_path):
    """F.scaled_dot_product_attention(is_causal=True) (nanoGPT's flash path): the same
    decode entry; its logits equal PyTorch's masked attention on the same weights."""
    src = open(small_model_file(tmp_path / "m.py")).read()
    start = src.index("        att = (q @ k.transpose(-2, -1))")
    end = src.index("        y = y.transpose(1, 2)")
    (tmp_path / "s.py").write_text(src[:start] + SDPA_ATTN + src[end:])
    exe = str(tmp_path / "s")
    ctc_build(str(tmp_path / "s.py"), exe)
    mod, model = fresh_model(str(tmp_path / "m.py"), seed=5)
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(8.0 if p.dim() > 1 else 1.0)
    model.eval()
    w = weights_of(model, tmp_path / "w.safetensors")
    r = sample(exe, w, "--prompt-tokens", "1", "--tokens", "30", "--seed", "9", "--logits", tmp_path / "l.npy")
    assert "KV cache" in r.stderr
    tokens = [int(t) for t in r.stdout.split()]
    compare("decode logits", np.load(tmp_path / "l.npy"), torch_window_logits(model, tokens, 1, 16), rtol=1e-4,
            atol=1e-4)


def test_unrecognised_attention_reruns_the_window(tmp_path):
    """Attention masked with -1e9 instead of -inf is not recognised as causal: ctc says
    so, builds no decode entry, and `sample` re-runs the window with a note; its greedy
    tokens still equal generate's."""
    src = open(small_model_file(tmp_path / "m.py")).read().replace("float('-inf'))", "-1e9)")
    (tmp_path / "n.py").write_text(src)
    exe = str(tmp_path / "n")
    r = ctc_build(str(tmp_path / "n.py"), exe)
    assert "no KV-cache decode entry" in r.stderr and "masked_fill" in r.stderr, r.stderr
    assert "entry decode" not in subprocess.run([exe, "info"], capture_output=True, text=True).stdout
    mod, model = fresh_model(str(tmp_path / "n.py"), seed=6)
    model.eval()
    w = weights_of(model, tmp_path / "w.safetensors")
    r = sample(exe, w, "--prompt-tokens", "3,4", "--tokens", "40", "--top-k", "1")
    assert "re-running the window" in r.stderr
    want = model.generate(torch.tensor([[3, 4]]), 40, top_k=1)[0].tolist()
    assert [int(t) for t in r.stdout.split()] == want


def test_sample_temperature_top_k(char_exe, tmp_path):
    """Temperature and top-k as nanoGPT's generate applies them, then one draw of the
    driver's counter-based stream: this file redoes the draws from the logits and gets
    the same tokens; the same seed gives the same text, another seed another."""
    exe, path = char_exe
    mod, model = fresh_model(path, seed=7)
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(4.0 if p.dim() > 1 else 1.0)
    w = weights_of(model, tmp_path / "w.safetensors")
    args = ["--prompt-tokens", "2", "--tokens", "30", "--temperature", "0.7", "--top-k", "5", "--seed", "11"]
    r = sample(exe, w, *args, "--logits", tmp_path / "l.npy")
    tokens = [int(t) for t in r.stdout.split()][1:]
    logits = np.load(tmp_path / "l.npy").astype(np.float64)
    for i, l in enumerate(logits):
        l = l / 0.7
        kth = np.sort(l)[::-1][4]
        l[l < kth] = -np.inf
        p = np.exp(l - l.max())
        s = (11 ^ (((i + 1) * 0xD1B54A32D192ED03) & M64)) & M64
        _, z = splitmix64(s)
        u = (z >> 11) * 2.0 ** -53 * p.sum()
        c, pick = 0.0, None
        for v in range(len(p)):
            c += p[v]
            if u < c and p[v] > 0:
                pick = v
                break
        assert tokens[i] == pick, (i, tokens[i], pick)
    assert sample(exe, w, *args).stdout == r.stdout
    assert sample(exe, w, *args[:-1], "12").stdout != r.stdout


def test_text_resume(char_exe, tmp_path):
    """--checkpoint / --resume with text data: 10 steps, then resumed to 20, gives the
    parameters of 20 steps in one run (the windows depend on the seed and the step)."""
    exe, _ = char_exe
    (tmp_path / "t.txt").write_text(TEXT, encoding="utf-8")
    common = ["--text", tmp_path / "t.txt", "--eval-interval", "5"]
    for args in (["--steps", "10", "--seed", "3", "--checkpoint", tmp_path / "ck"],
                 ["--steps", "20", "--resume", tmp_path / "ck", "--save", tmp_path / "b.safetensors", "--save-training-state"],
                 ["--steps", "20", "--seed", "3", "--save", tmp_path / "c.safetensors", "--save-training-state"]):
        r = subprocess.run([exe, "train", *common, *args], capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
    assert (tmp_path / "ck" / "checkpoint.vocab.txt").exists()
    assert (tmp_path / "b.safetensors").read_bytes() == (tmp_path / "c.safetensors").read_bytes()


@pytest.mark.skipif(not os.environ.get("CTC_NANOGPT_MODEL"), reason="set CTC_NANOGPT_MODEL to nanoGPT's model.py")
def test_nanogpt_model_py_greedy(tmp_path):
    """nanoGPT's own model.py, unchanged (its path in CTC_NANOGPT_MODEL; not part of
    this repository): random init, a small config; greedy decoding gives the tokens of
    its generate for 200 tokens, past block_size (ctc takes its flash path,
    scaled_dot_product_attention(is_causal=True); PyTorch 1.13 its masked one)."""
    src = tmp_path / "model.py"
    src.write_text(open(os.environ["CTC_NANOGPT_MODEL"]).read())
    cfg = "GPTConfig(block_size=32, vocab_size=50, n_layer=2, n_head=2, n_embd=32, dropout=0.0)"
    exe = str(tmp_path / "ng")
    ctc_build(str(src), exe, "--model", f"GPT({cfg})", "--input", "idx=i64[1,32]")
    mod = load_module(str(src), "nanogpt_model")
    torch.manual_seed(0)
    model = eval(f"GPT({cfg})", vars(mod))
    model.eval()
    w = weights_of(model, tmp_path / "w.safetensors")
    want = model.generate(torch.tensor([[1, 2, 3]]), 200, top_k=1)[0].tolist()
    r = sample(exe, w, "--prompt-tokens", "1,2,3", "--tokens", "200", "--top-k", "1")
    assert [int(t) for t in r.stdout.split()] == want
