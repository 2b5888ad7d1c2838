"""4-bit training recipes (bf16, the paper's E2M1 reference, UFP4, NVFP4, MXFP4, MXFP4 on FP8 GEMMs): recipe data
(no torch needed) and drop-in PyTorch modules (``QuantLinear``, ``quantize_model``; importing them imports
torch)."""

from typing import Any

from fp4lab.errors import UnknownRecipeError
from fp4lab.recipes.config import (
    BUILTIN_RECIPES,
    Recipe,
    get_recipe,
    list_recipes,
    load_recipe,
    recipe_to_toml,
    register,
)

_TORCH_NAMES = ("QuantLinear", "TokenShard", "fake_quantize", "quantize_model", "set_token_shard")

__all__ = ["BUILTIN_RECIPES", "QuantLinear", "Recipe", "TokenShard", "UnknownRecipeError", "fake_quantize",
           "get_recipe", "list_recipes", "load_recipe", "quantize_model", "recipe_to_toml", "register",
           "set_token_shard"]


def __getattr__(name: str) -> Any:
    if name in _TORCH_NAMES:
        from fp4lab.recipes import linear

        return getattr(linear, name)
    raise AttributeError(f"module 'fp4lab.recipes' has no attribute '{name}'")
