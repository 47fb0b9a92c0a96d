"""vmap's batch axis: per-sample gradients, batched jacobians and hessians, vmap
over convolution weights and embedding tables (shared or per-sample indices) inside a
differentiated function."""
import torch
import torch.nn.functional as F
from functorch import vmap, grad, jacrev, jacfwd, hessian


def loss(w, x, y):
    h = torch.tanh(F.linear(x, w))
    return F.smooth_l1_loss(h.log_softmax(-1), y)


def per_sample_grad(w, x, y):
    return vmap(grad(loss), in_dims=(None, 0, 0))(w, x, y)


def jac_rev_fwd(w, v):
    f = lambda u: torch.sigmoid(w @ u).cumsum(0)  # noqa: E731
    return jacrev(f)(v), jacfwd(f)(v)


def hess(v):
    return hessian(lambda u: (u.exp() * u.sum()).sum())(v)


def conv_weights_grad(k, img):
    f = lambda kk, im: vmap(lambda ki: F.max_pool2d(F.conv2d(im, ki, padding=1), 2))(kk).pow(2).sum()  # noqa: E731
    return grad(f, argnums=(0, 1))(k, img)


def table_grad(t, i):
    return grad(lambda tt: vmap(lambda ti: F.embedding(i, ti).sin(), in_dims=1, out_dims=2)(tt).sum())(t)


def tables_indices_grad(t, i):
    return grad(lambda tt: vmap(lambda ti, ii: F.embedding(ii, ti).sin())(tt, i).pow(2).sum())(t)


example_inputs = {"per_sample_grad": (torch.randn(4, 3), torch.randn(5, 3), torch.randn(5, 4)),
                  "jac_rev_fwd": (torch.randn(6, 3), torch.randn(3)), "hess": (torch.randn(4,),),
                  "conv_weights_grad": (torch.randn(2, 3, 1, 3, 3), torch.randn(2, 1, 6, 6)),
                  "table_grad": (torch.randn(7, 3, 2), torch.randint(0, 7, (4,))),
                  "tables_indices_grad": (torch.randn(3, 7, 2), torch.randint(0, 7, (3, 4)))}
