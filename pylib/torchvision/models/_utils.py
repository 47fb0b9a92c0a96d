# What the model builders share: the weights argument (ctc downloads nothing), the
# channel rounding and the initialisation of the mobile networks.
import math

from torch import nn


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


def init_mobile(model, uniform_linear):
    """The mobile networks' initialisation, in torchvision's module order: convolutions
    kaiming-normal (fan_out), norms 1 and 0, Linear weights N(0, 0.01), or uniform in
    +-1/sqrt(out_features) (EfficientNet), biases 0."""
    for m in model.modules():
        if isinstance(m, nn.Conv2d):
            nn.init.kaiming_normal_(m.weight, mode="fan_out")
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, (nn.BatchNorm2d, nn.GroupNorm)):
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Linear):
            if uniform_linear:
                init_range = 1.0 / math.sqrt(m.out_features)
                nn.init.uniform_(m.weight, -init_range, init_range)
            else:
                nn.init.normal_(m.weight, 0, 0.01)
            nn.init.zeros_(m.bias)
