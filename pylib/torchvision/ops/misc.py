# The building blocks torchvision.ops.misc gives its models.
import torch
from torch import nn


class Conv2dNormActivation(nn.Sequential):
    """Conv2d, then a norm layer and an activation (each left out when None): a
    Sequential, so its parts are named 0, 1, 2 as in torchvision."""

    def __init__(self, in_channels, out_channels, kernel_size=3, stride=1, padding=None, groups=1,
                 norm_layer=nn.BatchNorm2d, activation_layer=nn.ReLU, dilation=1, inplace=True, bias=None,
                 norm_eps=None, norm_momentum=None):
        if padding is None:
            padding = (kernel_size - 1) // 2 * dilation
        if bias is None:
            bias = norm_layer is None
        layers = [nn.Conv2d(in_channels, out_channels, kernel_size, stride, padding, dilation=dilation,
                            groups=groups, bias=bias)]
        if norm_layer is not None:
            if norm_eps is None:
                layers.append(norm_layer(out_channels))
            else:
                layers.append(norm_layer(out_channels, eps=norm_eps, momentum=norm_momentum))
        if activation_layer is not None:
            if inplace is None:
                layers.append(activation_layer())
            else:
                layers.append(activation_layer(inplace=inplace))
        super().__init__(*layers)
        self.out_channels = out_channels


class SqueezeExcitation(nn.Module):
    """Squeeze-and-excitation: the channels scaled by a gate computed from their means."""

    def __init__(self, input_channels, squeeze_channels, activation=nn.ReLU, scale_activation=nn.Sigmoid):
        super().__init__()
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc1 = nn.Conv2d(input_channels, squeeze_channels, 1)
        self.fc2 = nn.Conv2d(squeeze_channels, input_channels, 1)
        self.activation = activation()
        self.scale_activation = scale_activation()

    def _scale(self, x):
        s = self.avgpool(x)
        s = self.fc1(s)
        s = self.activation(s)
        s = self.fc2(s)
        return self.scale_activation(s)

    def forward(self, x):
        return self._scale(x) * x
