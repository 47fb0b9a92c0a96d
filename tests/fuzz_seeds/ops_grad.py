"""Gradients and tangents through many primitives: reverse mode (autograd.grad),
forward mode (jvp), and small jacobians / hessians."""
import torch
import torch.nn.functional as F
from torch.autograd.functional import jacobian, hessian, jvp, vjp


def mix(x, y):
    a = torch.exp(-x.abs()) * torch.sqrt(y * y + 1.0) + torch.log(x * x + 0.5)
    b = torch.where(x > y, torch.maximum(x, y), torch.minimum(x, 2 * y)).clamp(-1.5, 1.5)
    c = torch.cat([a, b[:, :2]], dim=1).reshape(2, 3, 3).permute(2, 0, 1)
    d = F.softmax(c, dim=-1).amax(dim=0) + F.log_softmax(x @ y.t(), dim=1).mean()
    e = F.max_pool2d(x.reshape(1, 1, 3, 4), 2, stride=1) + F.avg_pool2d(y.reshape(1, 1, 3, 4), (2, 2), stride=1)
    return d.sum() + (e * e).sum() + torch.tanh(x[1:, ::2]).pow(3).sum() + F.gelu(y).mean()


def grads(x, y):
    return torch.autograd.grad(mix(x, y), (x, y))


def tangents(x, y, tx, ty):
    return jvp(mix, (x, y), (tx, ty))


def cotangents(x, u):
    return vjp(lambda t: torch.sigmoid(t @ t.t()).sum(dim=1), x, u)


def small_jacobian(v):
    return jacobian(lambda t: torch.sin(t) * t.sum(), v)


def small_hessian(v):
    return hessian(lambda t: (t.exp() * t).sum() + (t[:2] * t[1:]).sum(), v)


example_inputs = {"grads": (torch.randn(3, 4), torch.randn(3, 4)),
                  "tangents": (torch.randn(3, 4), torch.randn(3, 4), torch.randn(3, 4), torch.randn(3, 4)),
                  "cotangents": (torch.randn(3, 4), torch.randn(3)),
                  "small_jacobian": (torch.randn(3),),
                  "small_hessian": (torch.randn(3),)}
