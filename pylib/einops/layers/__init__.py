# ctc's einops.layers (see einops/__init__.py)
