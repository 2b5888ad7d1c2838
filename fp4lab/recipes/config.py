"""Training recipes as data: which format each GEMM operand uses, where the RHT applies, where SR applies.

A linear layer ``Y = X W^T`` (X: [M, K] tokens x inputs, W: [N, K]) runs three GEMMs (paper §3):

* FPROP ``Y = X W^T``   reduces over K: X and W blocked (and rotated) along K;
* DGRAD ``dX = dY W``   reduces over N: dY blocked along N, W along its axis 0 (N);
* WGRAD ``dW = dY^T X`` reduces over M: dY and X blocked along M (axis 0).

``rht`` lists the GEMMs whose two operands are rotated along the reduction axis with the same signs
(``rht_size``, ``rht_seed``); ``sr`` lists the operands quantized with stochastic rounding (the paper: dY only).
Recipes are TOML (or JSON) files; the built-ins live in ``fp4lab/recipes/builtin/<name>.toml``.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from fractions import Fraction
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator

from fp4lab.errors import SpecError, UnknownFormatError, UnknownRecipeError
from fp4lab.formats.base import SpecModel
from fp4lab.formats.quant_format import QuantFormat
from fp4lab.formats.registry import get_format, list_formats
from fp4lab.formats.spec_io import model_to_toml, read_spec_dict, validate_model
from fp4lab.registry import SpecRegistry

FP8_GEMM_DTYPES = ("fp8", "fp8-fast")

Gemm = Literal["fprop", "dgrad", "wgrad"]
Operand = Literal["x", "w", "dy"]


def fp8_disqualification(fmt: QuantFormat) -> str | None:
    """Why format ``fmt`` (a QuantFormat) cannot feed FP8 GEMMs exactly, or None when it qualifies."""
    if fmt.scale is None or fmt.scale.kind != "pow2":
        kind = "none" if fmt.scale is None else f"'{fmt.scale.name}'"
        return f"its block scale is {kind}, not a power of two (E8M0)"
    if fmt.tensor_scale != "none":
        return f"it has a tensor scale ('{fmt.tensor_scale}')"
    for v in fmt.element.values:
        if not math.isfinite(v):
            return "its element grid has non-finite values"
        if v and _significant_bits(float(v)) > 4:
            return f"its element value {float(v)!r} has more than 4 significant bits"
    return None


def _significant_bits(v: float) -> int:
    n = Fraction(abs(v)).numerator
    return (n // (n & -n)).bit_length()


class Recipe(SpecModel):
    """A 4-bit training recipe. ``format = None`` keeps operands in bf16 (the unquantized baseline)."""

    name: str = Field(min_length=1, description="Recipe name.")
    description: str = Field(default="", description="One line for people.")
    format: str | None = Field(default=None, description="Format (name or spec file) of every operand unless "
                               "overridden below; none: operands rounded to bf16, no quantization.")
    weight_format: str | None = Field(default=None, description="Format of W (e.g. a 16x16-tile format).")
    grad_format: str | None = Field(default=None, description="Format of dY.")
    rht: list[Gemm] = Field(default_factory=list, description="GEMMs whose two operands are rotated by the "
                            "Random Hadamard Transform along the reduction axis.")
    rht_size: Literal[16, 32, 64, 128, 256] = Field(default=16, description="RHT block size.")
    rht_seed: int = Field(default=0, ge=-2**63, lt=2**64, description="Philox seed of the RHT signs.")
    rht_signs: Literal["fixed", "per_layer"] = Field(
        default="fixed", description="RHT sign policy: 'fixed': every layer uses the signs of rht_seed; "
        "'per_layer': each layer's signs come from rht_seed combined with the layer's qualified name.")
    sr: list[Operand] = Field(default_factory=lambda: ["dy"],
                              description="Operands quantized with stochastic rounding.")
    sr_bits: Literal[4, 8, 16, 24] = Field(default=24, description="Random bits per element for stochastic "
                                           "rounding.")
    gemm_dtype: Literal["bf16", "fp32", "fp8", "fp8-fast"] = Field(
        default="bf16", description="dtype of the dequantized GEMM operands. 'bf16': each dequantized value "
        "rounded to bf16 (RTNE; exact when element x block-scale products are bf16 numbers, as for nvfp4 with "
        "its tensor scale folded into the GEMM output, mxfp4 and ufp4-e4m3; one extra rounding for FP32-scaled "
        "formats such as ufp4 and e2m1-b16-fp32) and bf16 tensor-core GEMMs with fp32 accumulation; 'fp32': the "
        "exact dequantized values and fp32 GEMMs (slow); 'fp8' / 'fp8-fast' (power-of-two-scaled formats only): "
        "the exact dequantized values as E4M3 times a power of two per row, FP8 tensor-core GEMMs with "
        "row-wise scales, accumulation promoted to fp32 by the GEMM kernel ('fp8') or kept in the tensor cores' "
        "accumulator ('fp8-fast'); rows that are not exactly E4M3 times a power of two take the bf16 path.")
    gemm_numerics: str | None = Field(
        default=None, min_length=1, description="'<hwspec name or file>:<kind>' of a block-scaled tensor-core kind "
        "(e.g. 'blackwell-sm100:tcgen05.mxf4nvf4'): the three GEMMs multiply the operands' codes and block scales "
        "as that kind does, bit for bit (fp4lab.recipes.hw_gemm); none: gemm_dtype GEMMs of the dequantized "
        "operands.")
    high_precision: list[Annotated[str, Field(min_length=1)]] = Field(
        default_factory=list, description="fnmatch-style patterns of qualified module names (as from "
        "model.named_modules(), e.g. 'lm_head', 'layers.0.*', '*.head') whose linear layers stay in high "
        "precision (not converted by quantize_model).")

    @field_validator("format", "weight_format", "grad_format")
    @classmethod
    def _known_format(cls, fmt: str | None) -> str | None:
        if fmt is not None:
            try:
                get_format(fmt)
            except UnknownFormatError as exc:
                raise ValueError(str(exc)) from None
        return fmt

    @model_validator(mode="after")
    def _needs_format(self) -> "Recipe":
        if self.format is None:
            given = [f for f in ("weight_format", "grad_format", "rht", "sr") if getattr(self, f)]
            if given:
                raise ValueError(f"format: required when {' and '.join(given)} {'is' if len(given) == 1 else 'are'}"
                                 " set (a recipe without a format is the bf16 baseline: sr = [], rht = [])")
        return self

    @model_validator(mode="after")
    def _rotations_fit_tiles(self) -> "Recipe":
        # a 2-D tile format blocks (and rotates) along the operand's last axis only
        along_m = {"x": "wgrad", "w": "dgrad", "dy": "wgrad"}
        for op, gemm in along_m.items():
            f = self.format_of(op)
            if f is not None and gemm in self.rht:
                fmt = get_format(f)
                if fmt.block is not None and fmt.block.is_2d:
                    raise ValueError(f"rht: {gemm} rotates operand {op} along its axis 0, but its format '{f}' uses "
                                     f"2-D tiles, which rotate along the last axis only")
        return self

    @model_validator(mode="after")
    def _fp8_formats_qualify(self) -> "Recipe":
        if self.gemm_dtype in FP8_GEMM_DTYPES:
            for op in ("x", "w", "dy"):
                f = self.format_of(op)
                why = "operands without a format are not 4-bit" if f is None else fp8_disqualification(get_format(f))
                if why:
                    raise ValueError(f"gemm_dtype: '{self.gemm_dtype}' needs power-of-two-scaled formats (E8M0 "
                                     f"block scales, elements of at most 4 significant bits); operand {op}"
                                     f"{'' if f is None else f' (format {f!r})'}: {why}")
        return self

    @model_validator(mode="after")
    def _kind_takes_operands(self) -> "Recipe":
        if self.gemm_numerics is not None:
            from fp4lab.recipes.hw_numerics import resolve_numerics

            resolve_numerics(self.gemm_numerics, {op: self.format_of(op) for op in ("x", "w", "dy")},
                             self.gemm_dtype)
        return self

    def format_of(self, operand: Operand) -> str | None:
        """Format name used to quantize ``operand`` (None: bf16)."""
        if operand == "w" and self.weight_format:
            return self.weight_format
        if operand == "dy" and self.grad_format:
            return self.grad_format
        return self.format


def load_recipe(path: str | Path) -> Recipe:
    """Validate a ``.toml``/``.json`` recipe file; any problem raises a one-line ``SpecError`` naming the file.
    A format, or the hwspec of ``gemm_numerics``, named by a relative spec-file path (not a registered name) is
    found from the recipe file's folder, wherever the caller runs, and stored as that absolute path."""
    data = read_spec_dict(path, "recipe")
    folder = Path(path).resolve().parent

    def from_folder(value: str, names: list[str]) -> str:
        if value in names or Path(value).is_absolute():
            return value
        if Path(value).suffix.lower() in (".toml", ".json") or (folder / value).is_file():
            return os.path.normpath(folder / value)  # folder is resolved: ".." steps up a real folder
        return value

    for key in ("format", "weight_format", "grad_format"):
        if isinstance(data.get(key), str):
            data[key] = from_folder(data[key], list_formats())
    numerics = data.get("gemm_numerics")
    if isinstance(numerics, str) and ":" in numerics:
        from fp4lab.hwspec.registry import list_hw

        hw, _, kind = numerics.rpartition(":")
        data["gemm_numerics"] = f"{from_folder(hw, list_hw())}:{kind}"
    return validate_model(Recipe, data, str(path))


# Display order of the built-ins; any other file in builtin/ follows, sorted by name.
RECIPES: SpecRegistry[Recipe] = SpecRegistry(
    Recipe, Path(__file__).parent / "builtin", load_recipe, kind="recipe", plural="recipes",
    display_first=("bf16", "e2m1-ref", "ufp4", "nvfp4", "mxfp4", "mxfp4-fp8"), unknown=UnknownRecipeError)
BUILTIN_NAMES: tuple[str, ...] = RECIPES.builtin_names
BUILTIN_RECIPES: Mapping[str, Recipe] = RECIPES.builtins  # built-in recipes by name, each loaded on first access


def list_recipes() -> list[str]:
    """Recipe names: the built-ins in their documented order, then registered recipes."""
    return RECIPES.names()


def register(recipe: Recipe, *, overwrite: bool = False) -> Recipe:
    """Add ``recipe`` to the registry under ``recipe.name``; built-in names cannot be replaced, nor (without
    ``overwrite``) a different recipe of the same name."""
    return RECIPES.register(recipe, overwrite=overwrite)


def get_recipe(recipe: str | Path | Recipe) -> Recipe:
    """A built-in or registered recipe by name, a recipe file by path, or ``recipe`` itself if it already is a
    ``Recipe``."""
    return RECIPES.get(recipe)


def load_recipe_text(text: str, where: str = "recipe text") -> Recipe:
    """The recipe written in TOML ``text`` (what ``recipe_to_toml`` writes); errors name ``where``."""
    import tomllib

    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise SpecError(f"{where}: not valid TOML: {exc}") from None
    return validate_model(Recipe, data, where)


def recipe_to_toml(recipe: Recipe) -> str:
    """TOML text that ``load_recipe`` turns back into an equal recipe."""
    return model_to_toml(recipe)
