"""4-bit training recipes (bf16, the paper's E2M1 reference, UFP4, NVFP4, MXFP4) as drop-in PyTorch modules."""

from fp4lab.recipes.config import BUILTIN_RECIPES, Recipe, get_recipe
from fp4lab.recipes.linear import QuantLinear, fake_quantize, quantize_model

__all__ = ["BUILTIN_RECIPES", "QuantLinear", "Recipe", "fake_quantize", "get_recipe", "quantize_model"]
