from .resnet import ResNet, BasicBlock, Bottleneck, resnet18, resnet34, resnet50, resnet101, resnet152
from .vgg import VGG, vgg11, vgg11_bn, vgg13, vgg13_bn, vgg16, vgg16_bn, vgg19, vgg19_bn
from .mobilenetv2 import MobileNetV2, mobilenet_v2
from .mobilenetv3 import MobileNetV3, mobilenet_v3_small, mobilenet_v3_large
from .efficientnet import EfficientNet, efficientnet_b0, efficientnet_b1
from .squeezenet import SqueezeNet, squeezenet1_0, squeezenet1_1

# (ctc) a name this package lacks is a model ctc's torchvision does not have: calling it is a
# located error naming the builders above (python/eval.c's py_pylib_missing)
__ctc_model_builders__ = True
