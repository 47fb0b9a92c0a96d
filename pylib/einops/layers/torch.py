# ctc's einops.layers.torch: the Rearrange and Reduce layers (defined in einops/__init__.py,
# which imports torch: this module's own name is torch)
from einops import _Rearrange as Rearrange
from einops import _Reduce as Reduce
