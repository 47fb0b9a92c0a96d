# What the model builders share: the weights argument (ctc downloads nothing) and the
# channel rounding of the mobile networks.


def check_weights(name, weights, kwargs):
    """weights=None (or the old pretrained=False) builds the network with random
    initial values; pretrained weights are a file for --weights."""
    pretrained = kwargs.pop("pretrained", False)
    kwargs.pop("progress", None)
    if weights is not None or pretrained:
        raise ValueError(name + ": ctc does not download pretrained weights; build with weights=None and pass "
                         "the checkpoint to the program with --weights (a state_dict saved by PyTorch loads by name)")


def make_divisible(v, divisor, min_value=None):
    """The nearest multiple of divisor to v, at least min_value (divisor by default),
    and not below 90% of v."""
    if min_value is None:
        min_value = divisor
    new_v = max(min_value, int(v + divisor / 2) // divisor * divisor)
    if new_v < 0.9 * v:
        new_v += divisor
    return new_v
