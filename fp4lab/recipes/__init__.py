"""4-bit training recipes (bf16, the paper's E2M1 reference, UFP4, NVFP4, MXFP4, MXFP4 on FP8 GEMMs): recipe data
(no torch needed) and drop-in PyTorch modules (``QuantLinear``, ``quantize_model``, ``layer_steps``, ...;
importing them imports torch)."""

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

# names whose modules import torch, imported on first use: name -> module of fp4lab.recipes
_TORCH_NAMES = {"QuantLinear": "linear", "fake_quantize": "linear", "quantize_model": "convert",
                "layer_steps": "convert", "set_layer_steps": "convert", "TokenShard": "shard",
                "set_token_shard": "shard"}

__all__ = ["BUILTIN_RECIPES", "QuantLinear", "Recipe", "TokenShard", "UnknownRecipeError", "fake_quantize",
           "get_recipe", "layer_steps", "list_recipes", "load_recipe", "quantize_model", "recipe_to_toml", "register",
           "set_layer_steps", "set_token_shard"]


def __getattr__(name: str) -> Any:
    if name in _TORCH_NAMES:
        import importlib

        return getattr(importlib.import_module(f"fp4lab.recipes.{_TORCH_NAMES[name]}"), name)
    raise AttributeError(f"module 'fp4lab.recipes' has no attribute '{name}'")
