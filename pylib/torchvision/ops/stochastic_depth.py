# Stochastic depth ("Deep Networks with Stochastic Depth"): in training, each sample's
# residual branch (mode "row") or the whole batch's (mode "batch") is dropped with
# probability p and the kept ones scaled by 1 / (1 - p); the identity in eval.
import torch
import torch.nn.functional as F
from torch import nn


def stochastic_depth(x, p, mode, training=True):
    if p < 0.0 or p > 1.0:
        raise ValueError("drop probability has to be between 0 and 1, but got " + str(p))
    if mode != "batch" and mode != "row":
        raise ValueError("mode has to be either 'batch' or 'row', but got " + str(mode))
    if not training or p == 0.0:
        return x
    keep = 1.0 - p
    if mode == "row":
        size = [x.shape[0]] + [1] * (x.ndim - 1)
    else:
        size = [1] * x.ndim
    # torchvision draws bernoulli(keep) and divides by keep: dropout of ones is that noise, the
    # same distribution (ctc compiles it as dropout's random stream; run by PyTorch, this file
    # draws other random numbers than torchvision's bernoulli_)
    noise = F.dropout(torch.ones(size, dtype=x.dtype, device=x.device), p, True)
    return x * noise


class StochasticDepth(nn.Module):
    def __init__(self, p, mode):
        super().__init__()
        self.p = p
        self.mode = mode

    def forward(self, x):
        return stochastic_depth(x, self.p, self.mode, self.training)
