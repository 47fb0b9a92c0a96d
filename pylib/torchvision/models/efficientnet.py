# EfficientNet ("Rethinking Model Scaling for Convolutional Neural Networks"), B0 and B1:
# MBConv blocks (expansion, depthwise, squeeze-excitation, projection; SiLU) with
# stochastic depth growing linearly over the blocks.
import math
import torch
from torch import nn

from ..ops.misc import Conv2dNormActivation, SqueezeExcitation
from ..ops.stochastic_depth import StochasticDepth
from ._utils import check_weights, init_mobile, make_divisible


class MBConvConfig:
    def __init__(self, expand_ratio, kernel, stride, input_channels, out_channels, num_layers, width_mult,
                 depth_mult):
        self.expand_ratio = expand_ratio
        self.kernel = kernel
        self.stride = stride
        self.input_channels = make_divisible(input_channels * width_mult, 8)
        self.out_channels = make_divisible(out_channels * width_mult, 8)
        self.num_layers = int(math.ceil(num_layers * depth_mult))


class MBConv(nn.Module):
    def __init__(self, expand_ratio, kernel, stride, input_channels, out_channels, stochastic_depth_prob,
                 norm_layer):
        super().__init__()
        if stride < 1 or stride > 2:
            raise ValueError("illegal stride value")
        self.use_res_connect = stride == 1 and input_channels == out_channels
        layers = []
        expanded = make_divisible(input_channels * expand_ratio, 8)
        if expanded != input_channels:
            layers.append(Conv2dNormActivation(input_channels, expanded, kernel_size=1, norm_layer=norm_layer,
                                               activation_layer=nn.SiLU))
        layers.append(Conv2dNormActivation(expanded, expanded, kernel_size=kernel, stride=stride, groups=expanded,
                                           norm_layer=norm_layer, activation_layer=nn.SiLU))
        squeeze_channels = max(1, input_channels // 4)
        layers.append(SqueezeExcitation(expanded, squeeze_channels, activation=nn.SiLU))
        layers.append(Conv2dNormActivation(expanded, out_channels, kernel_size=1, norm_layer=norm_layer,
                                           activation_layer=None))
        self.block = nn.Sequential(*layers)
        self.stochastic_depth = StochasticDepth(stochastic_depth_prob, "row")
        self.out_channels = out_channels

    def forward(self, x):
        result = self.block(x)
        if self.use_res_connect:
            result = self.stochastic_depth(result)
            result += x
        return result


class EfficientNet(nn.Module):
    def __init__(self, inverted_residual_setting, dropout, stochastic_depth_prob=0.2, num_classes=1000,
                 norm_layer=None, last_channel=None):
        super().__init__()
        if norm_layer is None:
            norm_layer = nn.BatchNorm2d
        layers = []
        first = inverted_residual_setting[0].input_channels
        layers.append(Conv2dNormActivation(3, first, kernel_size=3, stride=2, norm_layer=norm_layer,
                                           activation_layer=nn.SiLU))
        total_stage_blocks = 0
        for cnf in inverted_residual_setting:
            total_stage_blocks += cnf.num_layers
        stage_block_id = 0
        for cnf in inverted_residual_setting:
            stage = []
            for _ in range(cnf.num_layers):
                input_channels = cnf.input_channels
                stride = cnf.stride
                if len(stage) > 0:   # the blocks after a stage's first keep its width and resolution
                    input_channels = cnf.out_channels
                    stride = 1
                sd_prob = stochastic_depth_prob * float(stage_block_id) / total_stage_blocks
                stage.append(MBConv(cnf.expand_ratio, cnf.kernel, stride, input_channels, cnf.out_channels, sd_prob,
                                    norm_layer))
                stage_block_id += 1
            layers.append(nn.Sequential(*stage))
        last_in = inverted_residual_setting[-1].out_channels
        last_out = last_channel if last_channel is not None else 4 * last_in
        layers.append(Conv2dNormActivation(last_in, last_out, kernel_size=1, norm_layer=norm_layer,
                                           activation_layer=nn.SiLU))
        self.features = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Sequential(nn.Dropout(p=dropout, inplace=True), nn.Linear(last_out, num_classes))

        init_mobile(self, uniform_linear=True)

    def _forward_impl(self, x):
        x = self.features(x)
        x = self.avgpool(x)
        x = torch.flatten(x, 1)
        return self.classifier(x)

    def forward(self, x):
        return self._forward_impl(x)


def _efficientnet(name, width_mult, depth_mult, dropout, weights, kwargs):
    check_weights(name, weights, kwargs)
    rows = [(1, 3, 1, 32, 16, 1), (6, 3, 2, 16, 24, 2), (6, 5, 2, 24, 40, 2), (6, 3, 2, 40, 80, 3),
            (6, 5, 1, 80, 112, 3), (6, 5, 2, 112, 192, 4), (6, 3, 1, 192, 320, 1)]
    setting = []
    for e, k, s, i, o, n in rows:
        setting.append(MBConvConfig(e, k, s, i, o, n, width_mult, depth_mult))
    dropout = kwargs.pop("dropout", dropout)
    return EfficientNet(setting, dropout, **kwargs)


def efficientnet_b0(*, weights=None, **kwargs):
    return _efficientnet("efficientnet_b0", 1.0, 1.0, 0.2, weights, kwargs)


def efficientnet_b1(*, weights=None, **kwargs):
    return _efficientnet("efficientnet_b1", 1.0, 1.1, 0.2, weights, kwargs)
