# ctc's einops: rearrange, repeat and reduce (and their layers, einops.layers.torch) written
# for ctc in the Python that ctc compiles, as reshape / permute / expand / reductions of the
# tensor. The pattern is read at compile time, so each call is a few tensor ops in the
# generated code. Covers what model files use: named axes, parenthesised compositions and
# decompositions with sizes given as keywords, `...`, unit axes (`1`, `()`), new axes in
# repeat and reductions (mean, sum, max, min, prod). ctc reads this package when a model file
# imports einops; PyTorch runs the real one.
import torch
from torch import nn

__version__ = "0.6-ctc"


def _groups(side, tag):
    # one side of a pattern as a list of groups of axis names ('...' an axis of its own); a number
    # other than 1 is an anonymous axis of that size, named "<size>#<tag><position>"
    out = []
    cur = None
    toks = side.replace("(", " ( ").replace(")", " ) ").split()
    for pos in range(len(toks)):
        tok = toks[pos]
        if tok.isdigit() and tok != "1":
            tok = "%s#%s%d" % (tok, tag, pos)
        if tok == "(":
            if cur is not None:
                raise ValueError("einops: nested parentheses in '%s'" % side)
            cur = []
        elif tok == ")":
            if cur is None:
                raise ValueError("einops: unbalanced parentheses in '%s'" % side)
            out.append(cur)
            cur = None
        elif tok == "1":
            if cur is None:
                out.append([])
        elif cur is not None:
            cur.append(tok)
        else:
            out.append([tok])
    if cur is not None:
        raise ValueError("einops: unbalanced parentheses in '%s'" % side)
    return out


def _names(groups, nell):
    # the elementary axes of a side, '...' spread into its nell axes
    out = []
    for g in groups:
        for a in g:
            if a == "...":
                out += ["...%d" % k for k in range(nell)]
            else:
                out.append(a)
    return out


def _plan(x, pattern, sizes):
    if "->" not in pattern:
        raise ValueError("einops: pattern '%s' has no '->'" % pattern)
    left, right = pattern.split("->")
    lg = _groups(left, "l")
    rg = _groups(right, "r")
    shape = list(x.shape)
    ell = 0
    for g in lg:
        if "..." in g and len(g) > 1:
            raise ValueError("einops: '...' inside parentheses on the left of '%s' is not supported" % pattern)
        if g == ["..."]:
            ell += 1
    nell = len(shape) - (len(lg) - ell)
    if ell > 1 or (ell == 0 and len(lg) != len(shape)) or nell < 0:
        raise ValueError("einops: pattern '%s' does not match a tensor of %d dimensions" % (pattern, len(shape)))
    known = dict(sizes)
    for g in lg + rg:
        for a in g:
            if "#" in a:
                known[a] = int(a.split("#")[0])
    dims = []
    i = 0
    for g in lg:
        if g == ["..."]:
            for k in range(nell):
                known["...%d" % k] = shape[i]
                dims.append(shape[i])
                i += 1
            continue
        unknown = [a for a in g if a not in known]
        if len(unknown) > 1:
            raise ValueError("einops: cannot infer the sizes of %s in '%s'" % (unknown, pattern))
        prod = 1
        for a in g:
            if a in known:
                prod *= known[a]
        if unknown:
            if prod == 0 or shape[i] % prod != 0:
                raise ValueError("einops: dimension %d of size %d cannot be split by %d" % (i, shape[i], prod))
            known[unknown[0]] = shape[i] // prod
        elif prod != shape[i]:
            raise ValueError("einops: dimension %d has size %d, the pattern gives %d" % (i, shape[i], prod))
        for a in g:
            dims.append(known[a])
        i += 1
    return lg, rg, nell, known, dims


def _compose(rg, nell, known):
    out = []
    for g in rg:
        p = 1
        for a in _names([g], nell):
            p *= known[a]
        out.append(p)
    return out


def _apply(x, pattern, reduction, sizes, allow_new):
    lg, rg, nell, known, dims = _plan(x, pattern, sizes)
    lnames = _names(lg, nell)
    rnames = _names(rg, nell)
    for a in rnames:
        if a not in lnames and (not allow_new or a not in known):
            raise ValueError("einops: axis '%s' on the right of '%s' is not on the left%s" %
                             (a, pattern, " and has no size" if allow_new else ""))
    x = x.reshape(tuple(dims))
    gone = [k for k in range(len(lnames)) if lnames[k] not in rnames]
    if gone:
        if reduction is None:
            raise ValueError("einops: axes %s of '%s' are not on the right" % ([lnames[k] for k in gone], pattern))
        if reduction == "mean":
            x = x.mean(dim=tuple(gone))
        elif reduction == "sum":
            x = x.sum(dim=tuple(gone))
        elif reduction == "max":
            x = x.amax(dim=tuple(gone))
        elif reduction == "min":
            x = x.amin(dim=tuple(gone))
        elif reduction == "prod":
            for k in reversed(gone):
                x = x.prod(dim=k)
        else:
            raise ValueError("einops: reduction '%s' is not supported" % reduction)
        lnames = [a for a in lnames if a in rnames]
    kept = [a for a in rnames if a in lnames]
    perm = [lnames.index(a) for a in kept]
    if perm != list(range(len(perm))):
        x = x.permute(tuple(perm))
    if len(kept) != len(rnames):   # repeat's new axes: size 1, then expanded
        x = x.reshape(tuple([known[a] if a in lnames else 1 for a in rnames]))
        x = x.expand(tuple([known[a] for a in rnames]))
    return x.reshape(tuple(_compose(rg, nell, known)))


def rearrange(tensor, pattern, **axes_lengths):
    return _apply(tensor, pattern, None, axes_lengths, False)


def repeat(tensor, pattern, **axes_lengths):
    return _apply(tensor, pattern, None, axes_lengths, True)


def reduce(tensor, pattern, reduction, **axes_lengths):
    return _apply(tensor, pattern, reduction, axes_lengths, False)


class _Rearrange(nn.Module):
    def __init__(self, pattern, **axes_lengths):
        super().__init__()
        self.pattern = pattern
        self.axes_lengths = axes_lengths

    def forward(self, x):
        return _apply(x, self.pattern, None, self.axes_lengths, False)


class _Reduce(nn.Module):
    def __init__(self, pattern, reduction, **axes_lengths):
        super().__init__()
        self.pattern = pattern
        self.reduction = reduction
        self.axes_lengths = axes_lengths

    def forward(self, x):
        return _apply(x, self.pattern, self.reduction, self.axes_lengths, False)
