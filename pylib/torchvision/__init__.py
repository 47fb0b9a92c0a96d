# ctc's torchvision: the model builders of torchvision.models, written for ctc in the
# Python that ctc compiles, with torchvision's module names (so state_dict keys, and
# checkpoints saved by PyTorch, match) and its initialisation. ctc reads this package
# when a model file imports torchvision; PyTorch runs the real one.
from . import models
from . import ops

__version__ = "0.14-ctc"
