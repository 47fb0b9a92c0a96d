"""The sequence layers (issue 9 item 5) against PyTorch running the same file:
nn.RNN / LSTM / GRU (layers, bias, batch_first, bidirectional, initial states,
unbatched input), their Cell forms, and model files in the styles of
pytorch/examples' word_language_model, time_sequence_prediction and mnist_rnn
(written in our own words): forward in float32 with the weights transferred by
state_dict name (rtol 1e-4), and parameters after training steps (rtol 1e-3)."""
import numpy as np
import pytest
import torch

from ctc_testlib import CTC, compare, load_module, run, run_forward, st_read, st_write, state_dict_np

RECURRENT = """\
import torch
import torch.nn as nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(4, 5, num_layers=2, batch_first=True, bidirectional=True)
        self.gru = nn.GRU(4, 3, 2)
        self.rnn = nn.RNN(4, 3, nonlinearity='relu', bias=False)
        self.rnn_bi = nn.RNN(4, 2, 1, True, False, 0.0, True, nonlinearity='tanh')
        self.lstm1 = nn.LSTM(input_size=4, hidden_size=3)
        self.lc = nn.LSTMCell(4, 3)
        self.gc = nn.GRUCell(4, 3, bias=False)
        self.rc = nn.RNNCell(4, 3, nonlinearity='relu')
        self.rc_t = nn.RNNCell(4, 3)

    def forward(self, x, h0, c0):   # x [2, 5, 4] (batch first), h0 / c0 [4, 2, 5]
        out, (hn, cn) = self.lstm(x, (h0, c0))
        xs = x.transpose(0, 1)      # [5, 2, 4]
        og, hg = self.gru(xs)
        og2, hg2 = self.gru(xs, hg)
        orr, hr = self.rnn(xs)
        ob, hb = self.rnn_bi(xs)
        ou, (hu, cu) = self.lstm1(x[0])   # unbatched [5, 4]
        h = torch.zeros(2, 3)
        c = torch.zeros(2, 3)
        g = None
        r = torch.ones(2, 3)
        rt = None
        cells = []
        for t in range(5):
            h, c = self.lc(xs[t], (h, c))
            g = self.gc(xs[t], g)
            r = self.rc(xs[t], r)
            rt = self.rc_t(xs[t], rt)
            cells += [h, c, g, r, rt]
        hv = self.rc(x[0, 0])
        return (out, hn, cn, og, hg, og2, hg2, orr, hr, ob, hb, ou, hu, cu, hv) + tuple(cells)


example_inputs = (torch.randn(2, 5, 4), torch.randn(4, 2, 5), torch.randn(4, 2, 5))
"""


def _fwd_check(tmp_path, src, name, inputs, opts=(), seed=0):
    path = tmp_path / f"{name}.py"
    path.write_text(src)
    mod = load_module(str(path), name)
    torch.manual_seed(seed)
    m = mod.Net() if not opts else eval(opts[1], vars(mod))
    m.eval()
    got = run_forward(str(tmp_path), str(path), m, inputs, opts=opts)
    with torch.no_grad():
        want = m(*[torch.from_numpy(x) for x in inputs])
    want = want if isinstance(want, tuple) else (want,)
    flat = []
    for w in want:
        flat += list(w) if isinstance(w, tuple) else [w]
    assert len(got) == len(flat)
    worst = 0.0
    for k, (g, w) in enumerate(zip(got, flat)):
        worst = max(worst, compare(f"{name} output {k}", g, w.numpy(), 1e-4, 1e-5))
    info = run([tmp_path / "net", "info"]).stdout
    for k in m.state_dict():
        assert k in info, k
    return worst


def test_recurrent_layers_forward(tmp_path):
    rng = np.random.default_rng(0)
    xs = [rng.standard_normal(s).astype(np.float32) for s in [(2, 5, 4), (4, 2, 5), (4, 2, 5)]]
    _fwd_check(tmp_path, RECURRENT, "recurrent", xs)


# A `.double()` model's recurrent and attention layers compute in float64, as PyTorch's do: they
# once cast their input, zero states and float masks to float32 (pytorch/examples'
# time_sequence_prediction trains `Sequence().double()`; its outputs were 2e-8 off, float32's
# rounding, where float64's is 1e-16).
FLOAT64 = """\
import torch
import torch.nn as nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.lc = nn.LSTMCell(4, 6)
        self.gc = nn.GRUCell(4, 6)
        self.rc = nn.RNNCell(4, 6, nonlinearity='relu')
        self.lstm = nn.LSTM(4, 5, num_layers=2, bidirectional=True)
        self.gru = nn.GRU(4, 3, batch_first=True)
        self.mha = nn.MultiheadAttention(4, 2)
        self.enc = nn.TransformerEncoderLayer(4, 2, dim_feedforward=8, dropout=0.0)

    def forward(self, x, m):   # x [5, 3, 4] float64, m [5, 5] a float mask
        h, c = self.lc(x[0])
        outs = [h, c, self.gc(x[0]), self.rc(x[0], h)]
        for t in range(1, 5):
            h, c = self.lc(x[t], (h, c))
        o, (hn, cn) = self.lstm(x)
        og, hg = self.gru(x.transpose(0, 1))
        a, w = self.mha(x, x, x, attn_mask=m)
        return tuple(outs) + (h, c, o, hn, cn, og, hg, a, w, self.enc(x, src_mask=m))


model = Net().double()
example_inputs = (torch.randn(5, 3, 4, dtype=torch.float64), torch.randn(5, 5, dtype=torch.float64))
"""


def test_float64_layers_compute_in_float64(tmp_path):
    path = tmp_path / "f64.py"
    path.write_text(FLOAT64)
    mod = load_module(str(path), "f64")
    rng = np.random.default_rng(1)
    xs = [rng.standard_normal((5, 3, 4)), rng.standard_normal((5, 5))]
    got = run_forward(str(tmp_path), str(path), mod.model, xs)
    with torch.no_grad():
        want = mod.model(*[torch.from_numpy(x) for x in xs])
    assert len(got) == len(want)
    for k, (g, w) in enumerate(zip(got, want)):
        assert g.dtype == np.float64, (k, g.dtype)
        compare(f"float64 output {k}", g, w.numpy(), 1e-11, 1e-13)


WORD_LM = """\
import torch
import torch.nn as nn
import torch.nn.functional as F


class RNNModel(nn.Module):
    \"\"\"encoder -> recurrent stack -> decoder, as a word-level language model\"\"\"

    def __init__(self, rnn_type='{kind}', ntoken=17, ninp=6, nhid=5, nlayers=2, dropout=0.0, tie_weights=False):
        super(RNNModel, self).__init__()
        self.ntoken = ntoken
        self.drop = nn.Dropout(dropout)
        self.encoder = nn.Embedding(ntoken, ninp)
        if rnn_type in ['LSTM', 'GRU']:
            self.rnn = getattr(nn, rnn_type)(ninp, nhid, nlayers, dropout=dropout)
        else:
            nonlinearity = {{'RNN_TANH': 'tanh', 'RNN_RELU': 'relu'}}[rnn_type]
            self.rnn = nn.RNN(ninp, nhid, nlayers, nonlinearity=nonlinearity, dropout=dropout)
        self.decoder = nn.Linear(nhid, ntoken)
        self.rnn_type = rnn_type
        self.nhid = nhid
        self.nlayers = nlayers
        initrange = 0.1
        nn.init.uniform_(self.encoder.weight, -initrange, initrange)
        nn.init.zeros_(self.decoder.bias)
        nn.init.uniform_(self.decoder.weight, -initrange, initrange)

    def forward(self, input, h0, c0):
        emb = self.drop(self.encoder(input))
        hidden = (h0, c0) if self.rnn_type == 'LSTM' else h0
        output, hidden = self.rnn(emb, hidden)
        output = self.drop(output)
        decoded = self.decoder(output)
        decoded = decoded.view(-1, self.ntoken)
        return F.log_softmax(decoded, dim=1)


model = RNNModel()
criterion = nn.NLLLoss()
optimizer = torch.optim.{opt}(model.parameters(), lr={lr})


def train_step(data, targets, h0, c0):
    model.zero_grad()
    output = model(data, h0, c0)
    loss = criterion(output, targets)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 0.25)
    optimizer.step()
    return loss


example_inputs = {{"forward": (torch.zeros(6, 3, dtype=torch.long), torch.zeros(2, 3, 5), torch.zeros(2, 3, 5)),
                  "train_step": (torch.zeros(6, 3, dtype=torch.long), torch.zeros(18, dtype=torch.long),
                                 torch.zeros(2, 3, 5), torch.zeros(2, 3, 5))}}
"""


@pytest.mark.parametrize("kind,opt,lr", [("LSTM", "SGD", "20.0"), ("GRU", "Adam", "0.01"), ("RNN_RELU", "SGD", "5.0")])
def test_word_language_model_style(tmp_path, kind, opt, lr):
    src = WORD_LM.format(kind=kind, opt=opt, lr=lr)
    path = tmp_path / "wlm.py"
    path.write_text(src)
    exe = tmp_path / "net"
    run([CTC, "build", path, "-o", exe])
    mod = load_module(str(path), "wlm_" + kind)
    rng = np.random.default_rng(1)
    w = tmp_path / "w0.safetensors"
    st_write(w, state_dict_np(mod.model))
    # forward (eval)
    data = rng.integers(0, 17, (6, 3)).astype(np.int64)
    h0 = (rng.standard_normal((2, 3, 5)) * 0.5).astype(np.float32)
    c0 = (rng.standard_normal((2, 3, 5)) * 0.5).astype(np.float32)
    for i, a in enumerate([data, h0, c0]):
        np.save(tmp_path / f"f{i}.npy", a)
    run([exe, "infer", "--weights", w, "--input", tmp_path / "f0.npy", "--input", tmp_path / "f1.npy",
         "--input", tmp_path / "f2.npy", "--output", tmp_path / "fo.npy"])
    mod.model.eval()
    with torch.no_grad():
        want = mod.model(torch.from_numpy(data), torch.from_numpy(h0), torch.from_numpy(c0))
    compare(f"{kind} forward", np.load(tmp_path / "fo.npy"), want.numpy(), 1e-4, 1e-5)
    mod.model.train()
    for step in range(3):
        data = rng.integers(0, 17, (6, 3)).astype(np.int64)
        targets = rng.integers(0, 17, (18,)).astype(np.int64)
        for i, a in enumerate([data, targets, h0, c0]):
            np.save(tmp_path / f"t{i}.npy", a)
        nxt = tmp_path / f"w{step + 1}.safetensors"
        run([exe, "run", "train_step", "--weights", w] + sum([["--input", tmp_path / f"t{i}.npy"] for i in range(4)], [])
            + ["--output", tmp_path / "loss.npy", "--save", nxt, "--save-training-state"])
        lt = float(mod.train_step(torch.from_numpy(data), torch.from_numpy(targets), torch.from_numpy(h0),
                                  torch.from_numpy(c0)))
        compare(f"{kind} loss at step {step}", float(np.load(tmp_path / "loss.npy")), lt, 1e-4, 1e-6)
        w = nxt
    got = st_read(w)
    for k, v in mod.model.state_dict().items():
        compare(f"{kind} {k} after 3 steps", got[k], v.numpy(), 1e-3, 1e-5)


TIME_SEQ = """\
import torch
import torch.nn as nn


class Sequence(nn.Module):
    \"\"\"two stacked LSTM cells unrolled over a sine wave, then predicting the future\"\"\"

    def __init__(self):
        super(Sequence, self).__init__()
        self.lstm1 = nn.LSTMCell(1, 7)
        self.lstm2 = nn.LSTMCell(7, 7)
        self.linear = nn.Linear(7, 1)

    def forward(self, input, future=2):
        outputs = []
        h_t = torch.zeros(input.size(0), 7)
        c_t = torch.zeros(input.size(0), 7)
        h_t2 = torch.zeros(input.size(0), 7)
        c_t2 = torch.zeros(input.size(0), 7)
        for input_t in input.split(1, dim=1):
            h_t, c_t = self.lstm1(input_t, (h_t, c_t))
            h_t2, c_t2 = self.lstm2(h_t, (h_t2, c_t2))
            output = self.linear(h_t2)
            outputs += [output]
        for i in range(future):
            h_t, c_t = self.lstm1(output, (h_t, c_t))
            h_t2, c_t2 = self.lstm2(h_t, (h_t2, c_t2))
            output = self.linear(h_t2)
            outputs += [output]
        outputs = torch.cat(outputs, dim=1)
        return outputs


model = Sequence()
criterion = nn.MSELoss()
optimizer = torch.optim.Adam(model.parameters(), lr=0.05)


def train_step(input, target):
    optimizer.zero_grad()
    out = model(input)
    loss = criterion(out[:, :-2], target)
    loss.backward()
    optimizer.step()
    return loss


example_inputs = {"forward": (torch.zeros(3, 8),), "train_step": (torch.zeros(3, 8), torch.zeros(3, 8))}
"""


@pytest.mark.slow
def test_time_sequence_prediction_style(tmp_path):
    path = tmp_path / "tsp.py"
    path.write_text(TIME_SEQ)
    exe = tmp_path / "net"
    run([CTC, "build", path, "-o", exe])
    mod = load_module(str(path), "tsp")
    w = tmp_path / "w0.safetensors"
    st_write(w, state_dict_np(mod.model))
    t = np.arange(9)[None, :] + np.arange(3)[:, None] * 2.0
    wave = np.sin(t / 3.0).astype(np.float32)
    x, y = wave[:, :-1].copy(), wave[:, 1:].copy()
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", y)
    run([exe, "infer", "--weights", w, "--input", tmp_path / "x.npy", "--output", tmp_path / "o.npy"])
    with torch.no_grad():
        want = mod.model(torch.from_numpy(x))
    compare("sequence forward", np.load(tmp_path / "o.npy"), want.numpy(), 1e-4, 1e-5)
    for step in range(3):
        nxt = tmp_path / f"w{step + 1}.safetensors"
        run([exe, "run", "train_step", "--weights", w, "--input", tmp_path / "x.npy", "--input", tmp_path / "y.npy",
             "--output", tmp_path / "loss.npy", "--save", nxt, "--save-training-state"])
        lt = float(mod.train_step(torch.from_numpy(x), torch.from_numpy(y)))
        compare(f"loss at step {step}", float(np.load(tmp_path / "loss.npy")), lt, 1e-4, 1e-6)
        w = nxt
    got = st_read(w)
    for k, v in mod.model.state_dict().items():
        compare(f"{k} after 3 steps", got[k], v.numpy(), 1e-3, 1e-5)


ATTENTION = """\
import torch
import torch.nn as nn
import torch.nn.functional as F


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.mha = nn.MultiheadAttention(8, 2)
        self.mha_bf = nn.MultiheadAttention(8, 4, batch_first=True, bias=False)
        self.mha_kv = nn.MultiheadAttention(8, 2, kdim=5, vdim=3)
        self.enc_layer = nn.TransformerEncoderLayer(8, 2, dim_feedforward=16, dropout=0.1)
        self.enc_gelu = nn.TransformerEncoderLayer(d_model=8, nhead=4, dim_feedforward=12, activation='gelu',
                                                   batch_first=True, norm_first=True, layer_norm_eps=1e-6)
        self.enc_fn = nn.TransformerEncoderLayer(8, 2, 10, 0.0, F.gelu)
        layer = nn.TransformerEncoderLayer(8, 2, 16, 0.2)
        self.encoder = nn.TransformerEncoder(layer, 2, norm=nn.LayerNorm(8))

    def forward(self, x, k, v, bmask, kpm):   # x [5, 2, 8], k [4, 2, 5], v [4, 2, 3], bmask [5, 5], kpm [2, 5]
        causal = torch.triu(torch.full((5, 5), float('-inf')), diagonal=1)
        a, w = self.mha(x, x, x)
        a2, w2 = self.mha(x, x, x, attn_mask=causal, average_attn_weights=False)
        a3, w3 = self.mha(x, x, x, attn_mask=bmask, key_padding_mask=kpm)
        a4, _ = self.mha(x, x, x, need_weights=False, key_padding_mask=kpm.float() * -2.0)
        xb = x.transpose(0, 1)
        b1, wb = self.mha_bf(xb, xb, xb)
        c1, wc = self.mha_kv(x, k, v)
        u1, wu = self.mha(x[:, 0], x[:, 0], x[:, 0])
        e1 = self.enc_layer(x)
        e2 = self.enc_layer(x, src_mask=causal)
        e3 = self.enc_gelu(xb, src_key_padding_mask=kpm)
        e4 = self.enc_fn(x, bmask)
        e5 = self.encoder(x, mask=causal)
        m3 = x.permute(1, 0, 2)[:, :, :5]             # a 3-D float mask [N * heads, L, S]
        a5, w5 = self.mha(x, x, x, attn_mask=torch.cat([m3, m3 * -2.0], 0), key_padding_mask=kpm)
        return a, w, a2, w2, a3, w3, a4, b1, wb, c1, wc, u1, wu, e1, e2, e3, e4, e5, a5, w5


example_inputs = (torch.randn(5, 2, 8), torch.randn(4, 2, 5), torch.randn(4, 2, 3), torch.zeros(5, 5, dtype=torch.bool),
                  torch.zeros(2, 5, dtype=torch.bool))
"""


def test_attention_layers_forward(tmp_path):
    rng = np.random.default_rng(2)
    xs = [rng.standard_normal(s).astype(np.float32) for s in [(5, 2, 8), (4, 2, 5), (4, 2, 3)]]
    bmask = np.zeros((5, 5), bool)
    bmask[0, 3] = bmask[2, 1] = bmask[4, 4] = True
    kpm = np.zeros((2, 5), bool)
    kpm[0, 4] = kpm[1, 0] = kpm[1, 2] = True
    path = tmp_path / "attn.py"
    path.write_text(ATTENTION)
    mod = load_module(str(path), "attn")
    torch.manual_seed(0)
    m = mod.Net()
    with torch.no_grad():   # biases and norms away from their initial 0 / 1
        for name, p in m.named_parameters():
            if "bias" in name or "norm" in name:
                p.add_(torch.randn(p.shape) * 0.3)
    m.eval()
    inputs = xs + [bmask, kpm]
    got = run_forward(str(tmp_path), str(path), m, inputs)
    # with gradients enabled: PyTorch 1.13's inference fast path (taken under no_grad) fails on
    # bias=False and returns zeros for padded positions; the reference is the documented math
    want = m(*[torch.from_numpy(a) for a in inputs])
    assert len(got) == len(want)
    for k, (g, w) in enumerate(zip(got, want)):
        compare(f"attention output {k}", g, w.detach().numpy(), 1e-4, 1e-5)
    info = run([tmp_path / "net", "info"]).stdout
    for k in m.state_dict():
        assert k in info, k
    assert "encoder.layers.1.self_attn.in_proj_weight" in m.state_dict()


TRANSFORMER_LM = """\
import math
import torch
import torch.nn as nn
import torch.nn.functional as F


class PositionalEncoding(nn.Module):
    def __init__(self, d_model, dropout=0.1, max_len=50):
        super(PositionalEncoding, self).__init__()
        self.dropout = nn.Dropout(p=dropout)
        self.d_model = d_model

    def forward(self, x):   # the sinusoids, even features sin and odd ones cos, computed here
        position = torch.arange(0, x.size(0), dtype=torch.float).unsqueeze(1)
        div_term = torch.exp(torch.arange(0, self.d_model, 2).float() * (-math.log(10000.0) / self.d_model))
        pe = torch.stack([torch.sin(position * div_term), torch.cos(position * div_term)], dim=2)
        x = x + pe.view(x.size(0), 1, self.d_model)
        return self.dropout(x)


class TransformerModel(nn.Module):
    \"\"\"embedding + positional encoding -> transformer encoder with a causal mask -> decoder\"\"\"

    def __init__(self, ntoken=13, ninp=8, nhead=2, nhid=16, nlayers=2, dropout=0.0):
        super(TransformerModel, self).__init__()
        self.model_type = 'Transformer'
        self.pos_encoder = PositionalEncoding(ninp, dropout)
        encoder_layers = nn.TransformerEncoderLayer(ninp, nhead, nhid, dropout)
        self.transformer_encoder = nn.TransformerEncoder(encoder_layers, nlayers)
        self.encoder = nn.Embedding(ntoken, ninp)
        self.ninp = ninp
        self.decoder = nn.Linear(ninp, ntoken)
        initrange = 0.1
        nn.init.uniform_(self.encoder.weight, -initrange, initrange)
        nn.init.zeros_(self.decoder.bias)
        nn.init.uniform_(self.decoder.weight, -initrange, initrange)

    def _generate_square_subsequent_mask(self, sz):
        return torch.log(torch.tril(torch.ones(sz, sz)))

    def forward(self, src):
        mask = self._generate_square_subsequent_mask(src.size(0))
        src = self.encoder(src) * math.sqrt(self.ninp)
        src = self.pos_encoder(src)
        output = self.transformer_encoder(src, mask)
        output = self.decoder(output)
        return F.log_softmax(output, dim=-1)


model = TransformerModel()
# (not Adam: the key bias's exact gradient is 0 (softmax ignores a per-row constant), and Adam
# would normalise the rounding noise of both implementations into steps of size lr)
optimizer = torch.optim.SGD(model.parameters(), lr=0.5, momentum=0.9)


def train_step(data, targets):
    optimizer.zero_grad()
    output = model(data)
    loss = F.nll_loss(output.view(-1, 13), targets)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
    optimizer.step()
    return loss


example_inputs = {"forward": (torch.zeros(7, 2, dtype=torch.long),),
                  "train_step": (torch.zeros(7, 2, dtype=torch.long), torch.zeros(14, dtype=torch.long))}
"""

MNIST_RNN = """\
import torch
import torch.nn as nn
import torch.nn.functional as F


class Net(nn.Module):
    \"\"\"rows of the image as a sequence through an LSTM, the last output classified\"\"\"

    def __init__(self):
        super(Net, self).__init__()
        self.rnn = nn.LSTM(input_size=6, hidden_size=10, batch_first=True)
        self.batchnorm = nn.BatchNorm1d(10)
        self.dropout1 = nn.Dropout(0.0)
        self.fc1 = nn.Linear(10, 8)
        self.fc2 = nn.Linear(8, 4)

    def forward(self, input):
        input = input.reshape(-1, 6, 6)
        output, hidden = self.rnn(input)
        output = output[:, -1, :]
        output = self.batchnorm(output)
        output = self.dropout1(output)
        output = self.fc1(output)
        output = F.relu(output)
        output = self.fc2(output)
        return F.log_softmax(output, dim=1)


model = Net()
optimizer = torch.optim.Adadelta(model.parameters(), lr=1.0)


def train_step(data, target):
    optimizer.zero_grad()
    output = model(data)
    loss = F.nll_loss(output, target)
    loss.backward()
    optimizer.step()
    return loss


example_inputs = {"forward": (torch.zeros(4, 1, 6, 6),),
                  "train_step": (torch.zeros(4, 1, 6, 6), torch.zeros(4, dtype=torch.long))}
"""


def _train_check(tmp_path, src, name, fwd_inputs, batches):
    path = tmp_path / f"{name}.py"
    path.write_text(src)
    exe = tmp_path / "net"
    run([CTC, "build", path, "-o", exe])
    mod = load_module(str(path), name)
    w = tmp_path / "w0.safetensors"
    st_write(w, state_dict_np(mod.model))
    for i, a in enumerate(fwd_inputs):
        np.save(tmp_path / f"f{i}.npy", a)
    run([exe, "infer", "--weights", w] + sum([["--input", tmp_path / f"f{i}.npy"] for i in range(len(fwd_inputs))], [])
        + ["--output", tmp_path / "fo.npy"])
    mod.model.eval()
    want = mod.model(*[torch.from_numpy(a) for a in fwd_inputs]).detach()   # (grad enabled: no fast path)
    worst = compare(f"{name} forward", np.load(tmp_path / "fo.npy"), want.numpy(), 1e-4, 1e-5)
    mod.model.train()
    for step, batch in enumerate(batches):
        for i, a in enumerate(batch):
            np.save(tmp_path / f"t{i}.npy", a)
        nxt = tmp_path / f"w{step + 1}.safetensors"
        run([exe, "run", "train_step", "--weights", w] + sum([["--input", tmp_path / f"t{i}.npy"]
                                                              for i in range(len(batch))], [])
            + ["--output", tmp_path / "loss.npy", "--save", nxt, "--save-training-state"])
        lt = float(mod.train_step(*[torch.from_numpy(a) for a in batch]))
        compare(f"{name} loss at step {step}", float(np.load(tmp_path / "loss.npy")), lt, 1e-4, 1e-6)
        w = nxt
    got = st_read(w)
    for k, v in mod.model.state_dict().items():
        if k.endswith("num_batches_tracked"):
            assert int(got[k]) == int(v)
        else:
            compare(f"{name} {k} after {len(batches)} steps", got[k], v.numpy(), 1e-3, 1e-5)
    return worst


def test_transformer_language_model_style(tmp_path):
    rng = np.random.default_rng(3)
    batches = [(rng.integers(0, 13, (7, 2)).astype(np.int64), rng.integers(0, 13, (14,)).astype(np.int64))
               for _ in range(3)]
    _train_check(tmp_path, TRANSFORMER_LM, "tlm", [rng.integers(0, 13, (7, 2)).astype(np.int64)], batches)


def test_mnist_rnn_style(tmp_path):
    rng = np.random.default_rng(5)
    batches = [(rng.standard_normal((4, 1, 6, 6)).astype(np.float32), rng.integers(0, 4, (4,)).astype(np.int64))
               for _ in range(3)]
    _train_check(tmp_path, MNIST_RNN, "mnist_rnn", [rng.standard_normal((4, 1, 6, 6)).astype(np.float32)], batches)


SDPA = """\
import torch
import torch.nn as nn
import torch.nn.functional as F


class Net(nn.Module):
  def forward(self, q, k, v, m, bm):   # q [2, 3, 4, 6], k [2, 3, 5, 6], v [2, 3, 5, 2], m [4, 5], bm [4, 5] bool
    return (F.scaled_dot_product_attention(q, k, v), F.scaled_dot_product_attention(q, k, v, attn_mask=m),
            F.scaled_dot_product_attention(q, k, v, bm), F.scaled_dot_product_attention(q, k[:, :, :4], v[:, :, :4],
                                                                                      is_causal=True),
            F.scaled_dot_product_attention(q[0], k[0], v[0], scale=0.5))


example_inputs = (torch.randn(2, 3, 4, 6), torch.randn(2, 3, 5, 6), torch.randn(2, 3, 5, 2), torch.randn(4, 5),
                  torch.ones(4, 5, dtype=torch.bool))
"""


def test_scaled_dot_product_attention(tmp_path):
    # PyTorch 1.13 has no F.scaled_dot_product_attention: the reference is PyTorch 2's definition
    rng = np.random.default_rng(8)
    q, k, v = [rng.standard_normal(s).astype(np.float32) for s in [(2, 3, 4, 6), (2, 3, 5, 6), (2, 3, 5, 2)]]
    m = rng.standard_normal((4, 5)).astype(np.float32)
    bm = rng.random((4, 5)) > 0.3
    bm[:, 0] = True
    path = tmp_path / "sdpa.py"
    path.write_text(SDPA)
    exe = tmp_path / "net"
    run([CTC, "build", path, "-o", exe])
    from ctc_testlib import run_entry
    got = run_entry(str(tmp_path), str(exe), "forward", [q, k, v, m, bm], 5)

    def ref(q, k, v, add=None, scale=None):
        q, k, v = map(torch.from_numpy, (q, k, v))
        s = q @ k.transpose(-2, -1) * (scale if scale else 1 / np.sqrt(q.shape[-1]))
        if add is not None:
            s = s + torch.from_numpy(add)
        return (torch.softmax(s, -1) @ v).numpy()

    causal = np.where(np.tril(np.ones((4, 4))) > 0, 0.0, -np.inf).astype(np.float32)
    want = [ref(q, k, v), ref(q, k, v, m), ref(q, k, v, np.where(bm, 0.0, -np.inf).astype(np.float32)),
            ref(q, k[:, :, :4], v[:, :, :4], causal), ref(q[0], k[0], v[0], scale=0.5)]
    for i, (g, w) in enumerate(zip(got, want)):
        compare(f"sdpa {i}", g, w, 1e-4, 1e-5)


GRADS = """\
import torch
import torch.nn as nn
import torch.autograd.forward_ad as fwAD


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(3, 4, num_layers=2, batch_first=True, bidirectional=True)
        self.gru = nn.GRU(8, 3)
        self.cell = nn.RNNCell(3, 3)

    def forward(self, x):   # [2, 4, 3]
        y, _ = self.lstm(x)
        z, h = self.gru(y.transpose(0, 1))
        return z.transpose(0, 1) + self.cell(x[:, 0], h[0]).unsqueeze(1)


model = Net()


def vjp(x, p):
    return torch.autograd.grad((model(x) * p).sum(), x)[0]


def jvp(x, t):
    with fwAD.dual_level():
        return fwAD.unpack_dual(model(fwAD.make_dual(x, t))).tangent


example_inputs = {"forward": (torch.randn(2, 4, 3),), "vjp": (torch.randn(2, 4, 3), torch.randn(2, 4, 3)),
                  "jvp": (torch.randn(2, 4, 3), torch.randn(2, 4, 3))}
"""


@pytest.mark.slow
def test_recurrent_vjp_and_jvp(tmp_path):
    path = tmp_path / "grads.py"
    path.write_text(GRADS)
    exe = tmp_path / "net"
    run([CTC, "build", path, "-o", exe])
    mod = load_module(str(path), "seq_grads")
    w = tmp_path / "w.safetensors"
    st_write(w, state_dict_np(mod.model))
    rng = np.random.default_rng(9)
    x, p, t = [rng.standard_normal((2, 4, 3)).astype(np.float32) for _ in range(3)]
    for i, a in enumerate([x, p, t]):
        np.save(tmp_path / f"g{i}.npy", a)
    for entry, second in [("vjp", 1), ("jvp", 2)]:
        run([exe, "run", entry, "--weights", w, "--input", tmp_path / "g0.npy", "--input", tmp_path / f"g{second}.npy",
             "--output", tmp_path / f"{entry}.npy"])
    xt = torch.from_numpy(x).requires_grad_()
    want_vjp = mod.vjp(xt, torch.from_numpy(p)).numpy()
    want_jvp = mod.jvp(torch.from_numpy(x), torch.from_numpy(t)).detach().numpy()
    compare("VJP through LSTM/GRU/RNNCell", np.load(tmp_path / "vjp.npy"), want_vjp, 1e-4, 1e-5)
    compare("JVP through LSTM/GRU/RNNCell", np.load(tmp_path / "jvp.npy"), want_jvp, 1e-4, 1e-5)




def test_dropout_between_layers(tmp_path):
    """dropout= acts between the layers in training mode only: eval matches PyTorch, and the
    training step's loss differs from the eval loss (the draws of ctc's RNG, not PyTorch's)."""
    src = WORD_LM.format(kind="LSTM", opt="SGD", lr="0.1").replace("dropout=0.0", "dropout=0.5")
    src = src.replace("self.drop = nn.Dropout(dropout)", "self.drop = nn.Identity()")
    path = tmp_path / "drop.py"
    path.write_text(src)
    exe = tmp_path / "net"
    run([CTC, "build", path, "-o", exe])
    torch.manual_seed(0)
    mod = load_module(str(path), "seq_drop")
    with torch.no_grad():   # a decoder large enough that the dropped units move the loss clearly
        mod.model.decoder.weight.mul_(30.0)
    w = tmp_path / "w.safetensors"
    st_write(w, state_dict_np(mod.model))
    rng = np.random.default_rng(10)
    data = rng.integers(0, 17, (6, 3)).astype(np.int64)
    targets = rng.integers(0, 17, (18,)).astype(np.int64)
    h0, c0 = [rng.standard_normal((2, 3, 5)).astype(np.float32) for _ in range(2)]
    for i, a in enumerate([data, h0, c0, targets]):
        np.save(tmp_path / f"d{i}.npy", a)
    ins = sum([["--input", tmp_path / f"d{i}.npy"] for i in range(3)], [])
    run([exe, "infer", "--weights", w] + ins + ["--output", tmp_path / "e.npy"])
    mod.model.eval()
    with torch.no_grad():
        want = mod.model(*map(torch.from_numpy, (data, h0, c0)))
        eval_loss = float(torch.nn.functional.nll_loss(want, torch.from_numpy(targets)))
    compare("eval forward with dropout=0.5", np.load(tmp_path / "e.npy"), want.numpy(), 1e-4, 1e-5)
    tins = sum([["--input", tmp_path / f"d{i}.npy"] for i in (0, 3, 1, 2)], [])
    run([exe, "run", "train_step", "--weights", w] + tins + ["--output", tmp_path / "l.npy", "--save", tmp_path / "w1.st", "--save-training-state"])
    loss = float(np.load(tmp_path / "l.npy"))
    assert np.isfinite(loss) and abs(loss - eval_loss) > 1e-2, (loss, eval_loss)


ERR_HEAD = "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n\n\nclass Net(nn.Module):\n"


def _init(line):
    return "    def __init__(self):\n        super().__init__()\n        self.m = " + line + "\n\n"


@pytest.mark.parametrize("body,shape,msg", [
    (_init("nn.LSTM(3, 4, proj_size=2)") + "    def forward(self, x):\n        return self.m(x)[0]\n", "f32[2,1,3]",
     "9:18: error: nn.LSTM proj_size is not supported by ctc"),
    (_init("nn.GRU(3, 4)") + "    def forward(self, x):\n        return self.m(x)[0]\n", "f32[2,1,5]",
     "12:16: error: input.size(-1) must be equal to input_size. Expected 3, got 5"),
    (_init("nn.LSTM(3, 4, 2)") + "    def forward(self, x):\n        return self.m(x, (x[0], x[0]))[0]\n",
     "f32[2,1,3]", "12:16: error: Expected hidden[0] size (2, 1, 4), got [1, 3]"),
    (_init("nn.RNN(3, 4, nonlinearity='gelu')") + "    def forward(self, x):\n        return self.m(x)[0]\n",
     "f32[2,1,3]", "9:18: error: Unknown nonlinearity 'gelu'. Select from 'tanh' or 'relu'."),
    (_init("nn.MultiheadAttention(6, 4)") + "    def forward(self, x):\n        return self.m(x, x, x)[0]\n",
     "f32[2,1,6]", "9:18: error: embed_dim must be divisible by num_heads"),
    (_init("nn.MultiheadAttention(4, 2)") + "    def forward(self, x):\n        return self.m(x, x, x, attn_mask=x[0])[0]\n",
     "f32[2,1,4]", "12:16: error: The shape of the 2D attn_mask is [1, 4], but should be (2, 2)."),
    (_init("nn.TransformerEncoderLayer(4, 2, activation='tanh')") + "    def forward(self, x):\n        return self.m(x)\n",
     "f32[2,1,4]", "9:18: error: activation should be relu/gelu, not tanh"),
])
def test_refusals(tmp_path, body, shape, msg):
    path = tmp_path / "bad.py"
    path.write_text(ERR_HEAD + body)
    r = run([CTC, "build", path, "-o", tmp_path / "net", "--input", f"x={shape}"], check=False)
    assert r.returncode == 1, r.stdout + r.stderr
    assert msg in r.stderr, r.stderr
