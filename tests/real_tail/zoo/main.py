import torch
from models import *

net = resnet_tiny()
other = PlainNet()
