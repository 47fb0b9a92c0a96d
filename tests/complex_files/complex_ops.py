# Each complex operation ctc implements, as a function of two real tensors a, b
# of shape (3, 4, 2) that returns a real result; g_<name>(a, b) also returns the
# gradients of a fixed weighted sum of it with respect to a and b.
import torch


def f_polar(a, b):
    return torch.view_as_real(torch.polar(a.abs() + 0.5, b))


def f_complex(a, b):
    return torch.view_as_real(torch.complex(a, b))


def f_mul(a, b):
    return torch.view_as_real(torch.view_as_complex(a) * torch.view_as_complex(b))


def f_mul_real(a, b):
    c = torch.view_as_complex(a)
    return torch.view_as_real(c * b[..., 0] + b[..., 1] * c + c * 0.5 + 2 * c + torch.mul(c, b[:1, :, 0]))


def f_div(a, b):
    c, d = torch.view_as_complex(a), torch.view_as_complex(b + 3.0)
    return torch.view_as_real(c / d + c / (b[..., 0] + 3.0) + 1.5 / d + torch.div(c, 4.0))


def f_add_sub(a, b):
    c, d = torch.view_as_complex(a), torch.view_as_complex(b)
    return torch.view_as_real(c + d - b[..., 0] + 2.0 - (1 - c) + torch.add(c, d) - torch.sub(d, c) + (-c))


def f_parts(a, b):
    c = torch.view_as_complex(a) * torch.view_as_complex(b)
    return torch.stack([c.real * 2 + c.imag, torch.real(c), torch.imag(c)], -1)


def f_abs_angle(a, b):
    # every third number exactly 0 (PyTorch's gradients of abs and angle there are 0)
    keep = (torch.arange(12).view(3, 4, 1) % 3 != 0).float()
    c = torch.view_as_complex(a * keep) + torch.view_as_complex(b * keep)
    return torch.stack([c.abs(), torch.abs(c), torch.angle(c), c.angle(), abs(c)], -1)


def f_conj_exp(a, b):
    c = torch.view_as_complex(a) * 0.5
    d = c.conj() * torch.view_as_complex(b)
    e = torch.exp(c) + c.exp() + torch.conj(c).resolve_conj()
    return torch.cat([torch.view_as_real(d), torch.view_as_real(e)], -1)


def f_shapes(a, b):
    c = torch.view_as_complex(a)  # (3, 4)
    d = torch.view_as_complex(b)
    x = c.view(12)[2:7] * d.reshape(-1)[5:10]                  # (5,)
    y = c[..., 1:3] * d[None, :, 0].unsqueeze(-1)[0]            # (3, 2) * (3, 1)
    z = torch.reshape(c, (2, 6))[1] * c.unsqueeze(1)[1, 0, 2]   # (6,)
    w = c.view(3, 2, 2)[:, 1, :] * d[:, ::2]
    n = c.size(0) * c.size()[1] + c.dim() + c.numel() + c.shape[1] + c.ndim + len(c)
    assert c.is_complex() and torch.is_complex(d) and not a.is_complex()
    assert c.dtype == torch.complex64 and c.dtype == torch.cfloat and c.dtype != torch.float32
    return torch.cat([torch.view_as_real(x).flatten(), torch.view_as_real(y).flatten(),
                      torch.view_as_real(z).flatten(), torch.view_as_real(w).flatten()]) * n


def f_to_complex(a, b):
    c = a[..., 0].to(torch.complex64) * torch.view_as_complex(b)
    d = b[..., 1].to(torch.cfloat) + c.detach() * 0 + c.clone()
    return torch.view_as_real(d.contiguous().to(a.device))


def _grads(out, a, b):
    w = torch.cos(torch.arange(out.numel()).float() * 0.7).view(out.shape)
    ga, gb = torch.autograd.grad((out * w).sum(), (a, b))
    return out, ga, gb


def g_polar(a, b):
    a.requires_grad_()
    b.requires_grad_()
    return _grads(f_polar(a, b), a, b)


def g_complex(a, b):
    a.requires_grad_()
    b.requires_grad_()
    return _grads(f_complex(a, b), a, b)


def g_mul(a, b):
    a.requires_grad_()
    b.requires_grad_()
    return _grads(f_mul(a, b), a, b)


def g_mul_real(a, b):
    a.requires_grad_()
    b.requires_grad_()
    return _grads(f_mul_real(a, b), a, b)


def g_div(a, b):
    a.requires_grad_()
    b.requires_grad_()
    return _grads(f_div(a, b), a, b)


def g_add_sub(a, b):
    a.requires_grad_()
    b.requires_grad_()
    return _grads(f_add_sub(a, b), a, b)


def g_parts(a, b):
    a.requires_grad_()
    b.requires_grad_()
    return _grads(f_parts(a, b), a, b)


def g_abs_angle(a, b):
    a.requires_grad_()
    b.requires_grad_()
    return _grads(f_abs_angle(a, b), a, b)


def g_conj_exp(a, b):
    a.requires_grad_()
    b.requires_grad_()
    return _grads(f_conj_exp(a, b), a, b)


def g_shapes(a, b):
    a.requires_grad_()
    b.requires_grad_()
    return _grads(f_shapes(a, b), a, b)


def g_to_complex(a, b):
    a.requires_grad_()
    b.requires_grad_()
    return _grads(f_to_complex(a, b), a, b)
