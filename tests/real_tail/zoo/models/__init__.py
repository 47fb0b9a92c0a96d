from .resnet import *
from .plain import *
