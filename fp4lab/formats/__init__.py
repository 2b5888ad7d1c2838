"""Format registry: element grids, scale formats, scale rules, block layouts and complete ``QuantFormat`` specs."""

from fp4lab.formats.grids import (
    DETERMINISTIC_MODES,
    DIRECTED_MODES,
    ROUNDING_MODES,
    THRESHOLD_MODES,
    ElementGrid,
    FloatGrid,
    IntGrid,
    TableGrid,
)
from fp4lab.formats.quant_format import NAMED_GRIDS, NAMED_SCALES, QuantFormat
from fp4lab.formats.registry import BUILTIN_NAMES, get_format, list_formats, load_format, register
from fp4lab.formats.rules import BlockLayout, ScaleRule
from fp4lab.formats.scales import ScaleFormat
from fp4lab.formats.spec_io import model_to_toml

__all__ = [
    "BUILTIN_NAMES", "DETERMINISTIC_MODES", "DIRECTED_MODES", "NAMED_GRIDS", "NAMED_SCALES", "ROUNDING_MODES",
    "THRESHOLD_MODES", "BlockLayout",
    "ElementGrid", "FloatGrid", "IntGrid", "QuantFormat", "ScaleFormat", "ScaleRule", "TableGrid", "get_format",
    "list_formats", "load_format", "model_to_toml", "register",
]
