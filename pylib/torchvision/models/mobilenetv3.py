# MobileNetV3 ("Searching for MobileNetV3"): inverted residual blocks with optional
# squeeze-excitation (hard sigmoid gate) and hard swish, BatchNorm eps 0.001, momentum 0.01.
import torch
from torch import nn

from ..ops.misc import Conv2dNormActivation, SqueezeExcitation
from ._utils import check_weights, init_mobile, make_divisible


class InvertedResidualConfig:
    """One block: channels rounded to multiples of 8 after width_mult; activation "RE"
    (ReLU) or "HS" (hard swish)."""

    def __init__(self, input_channels, kernel, expanded_channels, out_channels, use_se, activation, stride,
                 dilation, width_mult):
        self.input_channels = self.adjust_channels(input_channels, width_mult)
        self.kernel = kernel
        self.expanded_channels = self.adjust_channels(expanded_channels, width_mult)
        self.out_channels = self.adjust_channels(out_channels, width_mult)
        self.use_se = use_se
        self.use_hs = activation == "HS"
        self.stride = stride
        self.dilation = dilation

    @staticmethod
    def adjust_channels(channels, width_mult):
        return make_divisible(channels * width_mult, 8)


class InvertedResidual(nn.Module):
    def __init__(self, cnf, norm_layer):
        super().__init__()
        if cnf.stride < 1 or cnf.stride > 2:
            raise ValueError("illegal stride value")
        self.use_res_connect = cnf.stride == 1 and cnf.input_channels == cnf.out_channels
        activation_layer = nn.Hardswish if cnf.use_hs else nn.ReLU
        layers = []
        if cnf.expanded_channels != cnf.input_channels:
            layers.append(Conv2dNormActivation(cnf.input_channels, cnf.expanded_channels, kernel_size=1,
                                               norm_layer=norm_layer, activation_layer=activation_layer,
                                               norm_eps=0.001, norm_momentum=0.01))
        stride = 1 if cnf.dilation > 1 else cnf.stride
        layers.append(Conv2dNormActivation(cnf.expanded_channels, cnf.expanded_channels, kernel_size=cnf.kernel,
                                           stride=stride, dilation=cnf.dilation, groups=cnf.expanded_channels,
                                           norm_layer=norm_layer, activation_layer=activation_layer,
                                           norm_eps=0.001, norm_momentum=0.01))
        if cnf.use_se:
            squeeze_channels = make_divisible(cnf.expanded_channels // 4, 8)
            layers.append(SqueezeExcitation(cnf.expanded_channels, squeeze_channels,
                                            scale_activation=nn.Hardsigmoid))
        layers.append(Conv2dNormActivation(cnf.expanded_channels, cnf.out_channels, kernel_size=1,
                                           norm_layer=norm_layer, activation_layer=None,
                                           norm_eps=0.001, norm_momentum=0.01))
        self.block = nn.Sequential(*layers)
        self.out_channels = cnf.out_channels
        self._is_cn = cnf.stride > 1

    def forward(self, x):
        result = self.block(x)
        if self.use_res_connect:
            result += x
        return result


class MobileNetV3(nn.Module):
    def __init__(self, inverted_residual_setting, last_channel, num_classes=1000, block=None, norm_layer=None,
                 dropout=0.2):
        super().__init__()
        if block is None:
            block = InvertedResidual
        if norm_layer is None:
            norm_layer = nn.BatchNorm2d
        layers = []
        first = inverted_residual_setting[0].input_channels
        layers.append(Conv2dNormActivation(3, first, kernel_size=3, stride=2, norm_layer=norm_layer,
                                           activation_layer=nn.Hardswish, norm_eps=0.001, norm_momentum=0.01))
        for cnf in inverted_residual_setting:
            layers.append(block(cnf, norm_layer))
        last_in = inverted_residual_setting[-1].out_channels
        last_out = 6 * last_in
        layers.append(Conv2dNormActivation(last_in, last_out, kernel_size=1, norm_layer=norm_layer,
                                           activation_layer=nn.Hardswish, norm_eps=0.001, norm_momentum=0.01))
        self.features = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Sequential(nn.Linear(last_out, last_channel), nn.Hardswish(inplace=True),
                                        nn.Dropout(p=dropout, inplace=True), nn.Linear(last_channel, num_classes))

        init_mobile(self, uniform_linear=False)

    def _forward_impl(self, x):
        x = self.features(x)
        x = self.avgpool(x)
        x = torch.flatten(x, 1)
        return self.classifier(x)

    def forward(self, x):
        return self._forward_impl(x)


def _mobilenet_v3_conf(arch, width_mult=1.0, reduced_tail=False, dilated=False):
    reduce_divider = 2 if reduced_tail else 1
    dilation = 2 if dilated else 1
    r = reduce_divider
    w = width_mult
    if arch == "mobilenet_v3_large":
        rows = [(16, 3, 16, 16, False, "RE", 1, 1), (16, 3, 64, 24, False, "RE", 2, 1),
                (24, 3, 72, 24, False, "RE", 1, 1), (24, 5, 72, 40, True, "RE", 2, 1),
                (40, 5, 120, 40, True, "RE", 1, 1), (40, 5, 120, 40, True, "RE", 1, 1),
                (40, 3, 240, 80, False, "HS", 2, 1), (80, 3, 200, 80, False, "HS", 1, 1),
                (80, 3, 184, 80, False, "HS", 1, 1), (80, 3, 184, 80, False, "HS", 1, 1),
                (80, 3, 480, 112, True, "HS", 1, 1), (112, 3, 672, 112, True, "HS", 1, 1),
                (112, 5, 672, 160 // r, True, "HS", 2, dilation),
                (160 // r, 5, 960 // r, 160 // r, True, "HS", 1, dilation),
                (160 // r, 5, 960 // r, 160 // r, True, "HS", 1, dilation)]
        last_channel = 1280 // r
    elif arch == "mobilenet_v3_small":
        rows = [(16, 3, 16, 16, True, "RE", 2, 1), (16, 3, 72, 24, False, "RE", 2, 1),
                (24, 3, 88, 24, False, "RE", 1, 1), (24, 5, 96, 40, True, "HS", 2, 1),
                (40, 5, 240, 40, True, "HS", 1, 1), (40, 5, 240, 40, True, "HS", 1, 1),
                (40, 5, 120, 48, True, "HS", 1, 1), (48, 5, 144, 48, True, "HS", 1, 1),
                (48, 5, 288 // r, 96 // r, True, "HS", 2, dilation),
                (96 // r, 5, 576 // r, 96 // r, True, "HS", 1, dilation),
                (96 // r, 5, 576 // r, 96 // r, True, "HS", 1, dilation)]
        last_channel = 1024 // r
    else:
        raise ValueError("Unsupported model type " + arch)
    setting = []
    for row in rows:
        i, k, e, o, se, act, s, d = row
        setting.append(InvertedResidualConfig(i, k, e, o, se, act, s, d, w))
    return setting, make_divisible(last_channel * w, 8)


def _mobilenet_v3(arch, weights, kwargs):
    check_weights(arch, weights, kwargs)
    width_mult = kwargs.pop("width_mult", 1.0)
    reduced_tail = kwargs.pop("reduced_tail", False)
    dilated = kwargs.pop("dilated", False)
    setting, last_channel = _mobilenet_v3_conf(arch, width_mult, reduced_tail, dilated)
    return MobileNetV3(setting, last_channel, **kwargs)


def mobilenet_v3_large(*, weights=None, **kwargs):
    return _mobilenet_v3("mobilenet_v3_large", weights, kwargs)


def mobilenet_v3_small(*, weights=None, **kwargs):
    return _mobilenet_v3("mobilenet_v3_small", weights, kwargs)
