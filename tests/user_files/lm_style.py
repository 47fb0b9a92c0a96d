"""Language models in the style of the word-language-model example: a recurrent
model whose forward takes and returns its hidden state (an LSTM's is a tuple),
and a model deriving from nn.Transformer that replaces its decoder, caches its
causal mask on self in forward, and adds a sinusoidal table built in __init__."""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class RecurrentLM(nn.Module):
    def __init__(self, kind, vocab, emb, hid, layers, dropout=0.3):
        super(RecurrentLM, self).__init__()
        self.vocab = vocab
        self.drop = nn.Dropout(dropout)
        self.embed = nn.Embedding(vocab, emb)
        self.rnn = getattr(nn, kind)(emb, hid, layers, dropout=dropout)
        self.out = nn.Linear(hid, vocab)

    def forward(self, tokens, hidden):
        y, hidden = self.rnn(self.drop(self.embed(tokens)), hidden)
        return F.log_softmax(self.out(self.drop(y)).view(-1, self.vocab), dim=1), hidden


class Sinusoid(nn.Module):
    def __init__(self, d, dropout=0.1, max_len=64):
        super(Sinusoid, self).__init__()
        self.dropout = nn.Dropout(p=dropout)
        pe = torch.zeros(max_len, d)
        position = torch.arange(0, max_len, dtype=torch.float).unsqueeze(1)
        div = torch.exp(torch.arange(0, d, 2).float() * (-math.log(10000.0) / d))
        pe[:, 0::2] = torch.sin(position * div)
        pe[:, 1::2] = torch.cos(position * div)
        self.register_buffer('pe', pe.unsqueeze(0).transpose(0, 1))

    def forward(self, x):
        return self.dropout(x + self.pe[:x.size(0), :])


class AttentionLM(nn.Transformer):
    def __init__(self, vocab, d, heads, ff, layers, dropout=0.3):
        super(AttentionLM, self).__init__(d_model=d, nhead=heads, dim_feedforward=ff, num_encoder_layers=layers,
                                          num_decoder_layers=1)
        self.src_mask = None
        self.pos = Sinusoid(d, dropout)
        self.embed = nn.Embedding(vocab, d)
        self.d = d
        self.decoder = nn.Linear(d, vocab)

    def forward(self, src):
        if self.src_mask is None or self.src_mask.size(0) != len(src):
            self.src_mask = torch.log(torch.tril(torch.ones(len(src), len(src))))
        x = self.pos(self.embed(src) * math.sqrt(self.d))
        return F.log_softmax(self.decoder(self.encoder(x, mask=self.src_mask)), dim=-1)


class Seq2Seq(nn.Module):
    """nn.Transformer itself, encoder and decoder."""

    def __init__(self):
        super().__init__()
        self.t = nn.Transformer(d_model=16, nhead=2, num_encoder_layers=1, num_decoder_layers=2, dim_feedforward=24,
                                dropout=0.0, norm_first=True)

    def forward(self, src, tgt):
        return self.t(src, tgt, tgt_mask=torch.triu(torch.full((5, 5), float('-inf')), diagonal=1))
