from .misc import Conv2dNormActivation, SqueezeExcitation
from .stochastic_depth import StochasticDepth, stochastic_depth
