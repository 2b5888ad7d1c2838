"""Named adversarial inputs: the one source of the test tensors of ``fp4lab verify``, ``fp4lab conformance`` and
the hypothesis strategies of ``fp4lab.testing`` (numpy only; importable without hypothesis).

``make_inputs(kind, shape, seed=None, fmt=None)`` returns a C-contiguous float32 array; the same (kind, shape,
seed, format) always gives the same bits. ``INPUT_KINDS`` maps every name to an ``InputKind`` (its generator's
docstring says what it targets). ``seed=None`` takes the kind's ``default_seed``, the seed its caller uses.

Families (``InputKind.family``), each kept with the exact arithmetic and random-draw order of the code it came
from, so the inputs of existing verify cases and conformance vectors did not move a bit:

``element``
    One element kind per array (``ELEMENT_KINDS``): grid levels, midpoints between levels (the round-to-nearest
    thresholds), both +-1 ulp, uniform values, +-1 ulp around powers of two, +0, -0, float32 subnormals, huge
    values, NaN, +-Inf. Standalone they sit at block scale 1 (the format's own unit); the strategy
    ``block_inputs`` mixes them per element around drawn block scales ``2^k`` through ``compose_elements``.
``conformance``
    The golden-vector cases of ``fp4lab.analysis.conformance`` (2-D, columns a multiple of 16 and at least 64:
    16-column groups are the blocks). ``gaussian_rows``, ``pow2_boundaries``, ``zero_blocks``,
    ``subnormal_blocks``, ``huge_values``, ``nan_blocks`` and ``inf_blocks`` are pieces of one random stream
    (``default_rng(seed)``, seed 7), drawn in one fixed order: each is the same array whichever others are made.
    ``grid_ties`` (seed 11) and ``tiny_tensor`` (seed 17) have their own streams.
``verify``
    The tensors of ``fp4lab verify`` (2-D): ``gaussian_logscale`` (its "random" cases), ``adversarial_rows``
    ("adversarial"), ``range_edge_tiny`` / ``range_edge_huge`` ("edges": tiny for an even seed, huge for an odd
    one; ``range_edge_input``).
``extra``
    ``nan_payloads``: NaNs of several payloads and both signs (no caller draws it yet); ``underflowing_quotients``:
    tiny elements beside huge ones, so that x / S underflows float32 (the directed roundings' test).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from fp4lab.errors import InputError

F32 = np.float32
F32_MAX = float(np.finfo(F32).max)
F32_TINY = float(np.finfo(F32).tiny)  # 2^-126
F32_SUB = float(np.finfo(F32).smallest_subnormal)  # 2^-149
FLT_MAX = F32_MAX

# float32 scalars every adversarial mix includes (hypothesis ``float32_arrays`` samples from them)
SPECIAL_F32 = [0.0, -0.0, F32_SUB, -F32_SUB, F32_TINY, -F32_TINY, F32_MAX, -F32_MAX, 1.0, -1.0]

# NaN bit patterns of ``nan_payloads``: quiet +-NaN (numpy, x86), all-ones payload (NVIDIA), signalling NaNs
NAN_PAYLOADS = (0x7FC00000, 0xFFC00000, 0x7FFFFFFF, 0xFFFFFFFF, 0x7F800001, 0xFF800001, 0x7FA00000, 0x7FC00001)

# Element kinds of ``compose_elements`` / the strategy ``block_inputs``; index 0 is what hypothesis shrinks towards.
ELEMENT_KINDS = ("level", "midpoint", "level_ulp", "midpoint_ulp", "uniform", "pow2_ulp", "zero", "neg_zero",
                 "subnormal", "huge", "nan", "inf")


@dataclass(frozen=True)
class InputKind:
    """One named input: ``make(shape, seed, fmt) -> float32 array``."""

    name: str
    family: str  # "element", "conformance", "verify" or "extra"
    make: Callable[[tuple[int, ...], int, Any], np.ndarray]
    needs_format: bool = False  # the generator reads the format's grid levels
    default_seed: int = 0
    two_d: bool = False  # shape must be (rows, cols)
    min_cols: int = 1
    col_multiple: int = 1

    @property
    def doc(self) -> str:
        return (self.make.__doc__ or "").strip()


INPUT_KINDS: dict[str, InputKind] = {}


def _register(name: str, family: str, **kw: Any) -> Callable:
    def deco(fn: Callable) -> Callable:
        INPUT_KINDS[name] = InputKind(name, family, fn, **kw)
        return fn
    return deco


def make_inputs(kind: str, shape: Any, seed: int | None = None, fmt: Any = None) -> np.ndarray:
    """float32 array of input kind ``kind`` (see ``INPUT_KINDS``), deterministic in (kind, shape, seed, fmt).
    ``fmt``: a format name, spec path or ``QuantFormat`` (required by kinds with ``needs_format``)."""
    if kind not in INPUT_KINDS:
        from fp4lab.errors import did_you_mean

        hint = did_you_mean(kind, INPUT_KINDS)
        raise InputError(f"make_inputs: unknown input kind {kind!r}; {hint or 'known: ' + ', '.join(INPUT_KINDS)}")
    spec = INPUT_KINDS[kind]
    shape = (int(shape),) if np.ndim(shape) == 0 else tuple(int(s) for s in shape)
    if any(s < 1 for s in shape) or not shape:
        raise InputError(f"make_inputs: input kind {kind!r} needs a shape of positive sides, got {shape}")
    if spec.two_d and (len(shape) != 2 or shape[1] < spec.min_cols or shape[1] % spec.col_multiple):
        cols = f"columns a multiple of {spec.col_multiple}, at least {spec.min_cols}" if spec.col_multiple > 1 \
            else "any columns"
        raise InputError(f"make_inputs: input kind {kind!r} needs a 2-D shape (rows, cols) with {cols}; got {shape}")
    if fmt is not None:
        from fp4lab.formats.registry import get_format

        fmt = get_format(fmt)
    elif spec.needs_format:
        raise InputError(f"make_inputs: input kind {kind!r} reads a format's grid levels; pass fmt=")
    x = spec.make(shape, spec.default_seed if seed is None else int(seed), fmt)
    return np.ascontiguousarray(x, dtype=F32)


# ---- element kinds -----------------------------------------------------------------------------------------------
def _ulp_step(v: np.ndarray, direction: np.ndarray) -> np.ndarray:
    return np.nextafter(v, np.where(direction > 0, np.float32(np.inf), np.float32(-np.inf))).astype(np.float32)


def compose_elements(grid_levels: np.ndarray, kinds: np.ndarray, pick: np.ndarray, unif: np.ndarray,
                     dirs: np.ndarray, P: np.ndarray) -> np.ndarray:
    """float32 values of each element kind (``kinds``: indices into ``ELEMENT_KINDS``) around block scales ``P``
    (float64, same shape): ``pick`` (integers 0 .. 2^20) chooses levels, midpoints and powers of two, ``unif``
    (float32 in [-1, 1]) the uniform values, ``dirs`` (+-1) ulp directions and signs."""
    lv = grid_levels.astype(np.float64)
    mids = (lv[:-1] + lv[1:]) / 2.0 if lv.size > 1 else lv
    with np.errstate(over="ignore", invalid="ignore", under="ignore"):
        level = np.float32(lv[pick % lv.size] * P)
        mid = np.float32(mids[pick % mids.size] * P)
        pow2 = np.float32(np.ldexp(1.0, (pick % 60) - 30) * P)
        amax = float(np.max(np.abs(lv)))
        table = {
            "level": level,
            "midpoint": mid,
            "level_ulp": _ulp_step(level, dirs),
            "midpoint_ulp": _ulp_step(mid, dirs),
            "uniform": np.float32(unif * amax * P),
            "pow2_ulp": _ulp_step(pow2, dirs) * np.where(pick % 2, -1, 1).astype(np.float32),
            "zero": np.zeros_like(P, dtype=np.float32),
            "neg_zero": np.full(P.shape, -0.0, np.float32),
            "subnormal": np.float32(np.where(dirs > 0, 1.0, -1.0) * (pick % 2**23 + 1) * F32_SUB),
            "huge": np.float32(np.where(dirs > 0, 1.0, -1.0) * F32_MAX / (1 << (pick % 8))),
            "nan": np.full(P.shape, np.nan, np.float32),
            "inf": np.float32(np.where(dirs > 0, np.inf, -np.inf)),
        }
    out = np.zeros(P.shape, np.float32)
    for i, name in enumerate(ELEMENT_KINDS):
        sel = kinds == i
        out[sel] = table[name][sel]
    return out


_UNIT_LEVELS = np.array([-1.0, 0.0, 1.0])  # levels for the element kinds that do not read a grid


def _element(name: str, doc: str, needs_format: bool) -> None:
    def make(shape: tuple[int, ...], seed: int, fmt: Any) -> np.ndarray:
        rng = np.random.default_rng(seed)
        pick = rng.integers(0, 2**20, shape, endpoint=True)
        unif = rng.uniform(-1, 1, shape).astype(F32)
        dirs = rng.choice(np.array([-1, 1], np.int8), shape)
        levels = fmt.element.levels if fmt is not None else _UNIT_LEVELS
        kinds = np.full(shape, ELEMENT_KINDS.index(name), np.int8)
        return compose_elements(levels, kinds, pick, unif, dirs, np.ones(shape))

    make.__doc__ = doc
    make.__name__ = f"element_{name}"
    INPUT_KINDS[name] = InputKind(name, "element", make, needs_format=needs_format)


for _name, _doc, _fmt in (
    ("level", "Grid levels of the format (exactly representable: the encoder must give their codes).", True),
    ("midpoint", ("Midpoints between adjacent grid levels: exact ties at the format's round-to-nearest thresholds "
                  "(rtna and rtnz disagree on every one)."), True),
    ("level_ulp", "Grid levels moved one float32 ulp up or down (the nearest values that are not levels).", True),
    ("midpoint_ulp", ("Midpoints moved one float32 ulp up or down: the closest non-ties on either side of a "
                      "rounding threshold."), True),
    ("uniform", "Uniform values in [-amax, amax] of the grid (ordinary in-range data).", True),
    ("pow2_ulp", "Powers of two 2^-30 .. 2^29 moved one ulp, either sign (scale-rule and exponent boundaries).",
     False),
    ("zero", "+0 everywhere (all-zero blocks: the zero-block scale policy).", False),
    ("neg_zero", "-0 (sign of zero must survive where the format keeps it).", False),
    ("subnormal", "float32 subnormals (k * 2^-149, k = 1 .. 2^20 + 1), either sign (FTZ / DAZ bugs).", False),
    ("huge", "+-FLT_MAX / 2^j, j = 0 .. 7 (scale overflow, amax near float32 max).", False),
    ("nan", "NaN, the quiet pattern 0x7FC00000 (NaN policies of blocks and elements).", False),
    ("inf", "+Inf and -Inf (Inf policies of blocks and elements).", False),
):
    _element(_name, _doc, _fmt)


# ---- conformance kinds ---------------------------------------------------------------------------------------------
_CONF: dict[str, Any] = {"two_d": True, "min_cols": 64, "col_multiple": 16}


@_register("grid_ties", "conformance", needs_format=True, default_seed=11, **_CONF)
def grid_ties(shape: tuple[int, int], seed: int, fmt: Any) -> np.ndarray:
    """Grid midpoints and levels times 2^k (k in [-3, 3] per row), each 16-column block's first element at the grid
    maximum times 2^k: exact ties for FP32 and power-of-two scales (the block scale is 2^k)."""
    lv = fmt.element.levels
    mids = np.concatenate([(lv[:-1] + lv[1:]) / 2.0, lv])
    rng = np.random.default_rng(seed)
    x = rng.choice(mids, shape) * 2.0 ** rng.integers(-3, 4, (shape[0], 1))
    x[:, ::16] = fmt.element.amax * 2.0 ** rng.integers(-3, 4, (shape[0], -(-shape[1] // 16)))
    return x


def _conformance_stream(shape: tuple[int, int], seed: int) -> dict[str, np.ndarray]:
    """The seven kinds drawn from one ``default_rng(seed)`` stream, in this order (conformance's, seed 7)."""
    rng = np.random.default_rng(seed)
    rows, cols = shape
    k = rng.integers(-20, 21, (rows, cols // 16)).repeat(16, axis=1)
    pow2 = np.ldexp(1.0, k).astype(F32)
    near = pow2 * rng.choice([1.0, 1.0 + 2**-23, 1.0 - 2**-24, 0.75, 1.5, 1.75 - 2**-22], shape)
    zeros = rng.standard_normal(shape)
    zeros[:, :32] = 0.0
    zeros[::2, 32:48] = -0.0
    zeros[:, 48:] = np.where(rng.random((rows, cols - 48)) < 0.5, 0.0, zeros[:, 48:])
    sub = rng.standard_normal(shape) * np.float64(2**-140)
    sub[:, :16] = rng.standard_normal((rows, 16))
    huge = rng.standard_normal(shape) * 1e37
    huge[:, ::7] = np.where(rng.random((rows, -(-cols // 7))) < 0.5, 3.4028235e38, -3.4028235e38)
    nan = rng.standard_normal(shape)
    nan[::3, 5] = np.nan
    inf = rng.standard_normal(shape)
    inf[::4, 20] = np.inf
    inf[1::4, 40] = -np.inf
    rand = rng.standard_normal(shape) * np.ldexp(1.0, rng.integers(-10, 11, (rows, 1)))
    return {"pow2_boundaries": near, "zero_blocks": zeros, "subnormal_blocks": sub, "huge_values": huge,
            "nan_blocks": nan, "inf_blocks": inf, "gaussian_rows": rand}


def _stream_kind(name: str, doc: str) -> None:
    def make(shape: tuple[int, int], seed: int, fmt: Any) -> np.ndarray:
        return _conformance_stream(shape, seed)[name]

    make.__doc__ = doc
    make.__name__ = name
    INPUT_KINDS[name] = InputKind(name, "conformance", make, default_seed=7, **_CONF)


for _name, _doc in (
    ("gaussian_rows", "N(0,1) times 2^k per row, k in [-10, 10] (ordinary data, a wide range of block scales)."),
    ("pow2_boundaries", ("Values at and one ulp around powers of two 2^k (k in [-20, 20] per 16-column block) and "
                         "at 0.75 / 1.5 / 1.75 x 2^k: the scale rules' floor / ceil / even / rceil boundaries.")),
    ("zero_blocks", ("+0 in columns 0-31 (all-zero blocks), -0 in every other row of columns 32-47, N(0,1) with "
                     "half its elements +0 in columns 48- (sparse blocks).")),
    ("subnormal_blocks", ("N(0,1) x 2^-140 (float32 subnormals and tiny normals) beside one N(0,1) block per row "
                          "(columns 0-15).")),
    ("huge_values", ("N(0,1) x 1e37 with +-3.4028235e38 (float32 max) in every 7th column: scale and element "
                     "overflow.")),
    ("nan_blocks", "N(0,1) with NaN (0x7FC00000) at column 5 of every third row."),
    ("inf_blocks", "N(0,1) with +Inf at column 20 of rows 0, 4, 8, ... and -Inf at column 40 of rows 1, 5, 9, ..."),
):
    _stream_kind(_name, _doc)


@_register("tiny_tensor", "conformance", default_seed=17, **_CONF)
def tiny_tensor(shape: tuple[int, int], seed: int, fmt: Any) -> np.ndarray:
    """A tensor whose amax lies below about 2^-117 (the two-level tensor-scale floor): 16-column blocks of N(0,1)
    x 2^k, k in [-150, -118], many float32-subnormal (some flush to zero in float32)."""
    r2 = np.random.default_rng(seed)
    return r2.standard_normal(shape) * np.exp2(r2.integers(-150, -117, (shape[0], shape[1] // 16))).repeat(16, 1)


# ---- verify kinds --------------------------------------------------------------------------------------------------
@_register("gaussian_logscale", "verify", two_d=True)
def gaussian_logscale(shape: tuple[int, int], seed: int, fmt: Any = None) -> np.ndarray:
    """N(0,1) times a log-uniform scale 2^u per row, u in [-20, 20] (``fp4lab verify``'s "random" cases)."""
    rows, cols = shape
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((rows, cols)) * np.exp2(rng.uniform(-20, 20, (rows, 1)))
    return x.astype(F32)


@_register("adversarial_rows", "verify", two_d=True)
def adversarial_rows(shape: tuple[int, int], seed: int, fmt: Any = None) -> np.ndarray:
    """Rows cycling through eight classes (row % 8): 0 ties on the dyadic grid k/8 x 2^j (|k| <= 96, j in [-4, 4]
    per row); 1 powers of two 2^-30 .. 2^29, either sign, 30 % moved one ulp up and 30 % one ulp down; 2 zeros
    (half the elements +0, half the rows all zero, 10 % -0); 3 subnormals (N(0,1) x 1e-39, 20 % the smallest
    subnormal 2^-149); 4 huge values uniform in +-3.4e38; 5 ``gaussian_logscale`` data with 0.3 % NaN, 0.3 % +Inf,
    0.3 % -Inf; 6 dyadic ties mixed with data x 1e-30; 7 plain ``gaussian_logscale`` (``fp4lab verify``'s
    "adversarial" cases)."""
    rows, cols = shape
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((rows, cols)) * np.exp2(rng.uniform(-20, 20, (rows, 1)))
    x = x.astype(F32)
    r = np.arange(rows)[:, None] % 8
    ties = (rng.integers(-96, 97, (rows, cols)) / 8.0 * np.exp2(rng.integers(-4, 5, (rows, 1)))).astype(F32)
    p2 = np.exp2(rng.integers(-30, 30, (rows, cols))).astype(F32) * rng.choice([-1, 1], (rows, cols)).astype(F32)
    p2 = np.where(rng.random((rows, cols)) < 0.3, np.nextafter(p2, F32(np.inf)), p2)
    p2 = np.where(rng.random((rows, cols)) < 0.3, np.nextafter(p2, F32(-np.inf)), p2).astype(F32)
    zeros = np.where(rng.random((rows, cols)) < 0.5, F32(0.0), x) * np.where(rng.random((rows, 1)) < 0.5, 0, 1)
    zeros = np.where(rng.random((rows, cols)) < 0.1, F32(-0.0), zeros).astype(F32)
    sub = (rng.standard_normal((rows, cols)) * 1e-39).astype(F32)
    sub = np.where(rng.random((rows, cols)) < 0.2, np.uint32(1).view(F32), sub).astype(F32)
    huge = (rng.uniform(-3.4e38, 3.4e38, (rows, cols))).astype(F32)
    special = x.copy()
    pick = rng.random((rows, cols))
    special[pick < 0.003] = np.nan
    special[(pick >= 0.003) & (pick < 0.006)] = np.inf
    special[(pick >= 0.006) & (pick < 0.009)] = -np.inf
    mixed = np.where(rng.random((rows, cols)) < 0.5, ties, x * F32(1e-30))
    choices = [ties, p2, zeros, sub, huge, special, mixed, x]
    out = np.select([r == i for i in range(8)], choices).astype(F32)
    return out


@_register("gaussian_sparse_nan", "verify", two_d=True)
def gaussian_sparse_nan(shape: tuple[int, int], seed: int, fmt: Any = None) -> np.ndarray:
    """N(0,1) with one NaN, at a random column, in every 16th row (row % 16 == 0): tiles that are plain but for a
    NaN, which the kernels' lean path takes when a format's blocks ignore NaN (``nan_policy = "ignore"``)."""
    rows, cols = shape
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((rows, cols)).astype(F32)
    hit = np.arange(0, rows, 16)
    x[hit, rng.integers(0, cols, hit.size)] = np.nan
    return x


def _range_edge(rows: int, cols: int, seed: int, high: bool) -> np.ndarray:
    rng = np.random.default_rng(seed)
    e = rng.integers(-32, 1, (rows, 1)) + rng.integers(-8, 1, (1, -(-cols // 32))).repeat(32, axis=1)[:, :cols]
    x = rng.standard_normal((rows, cols)) * np.exp2(e + (125.0 if high else -118.0))
    x = np.clip(x, -FLT_MAX, FLT_MAX)
    if high:
        x[:, ::7] = np.where(rng.random((rows, x[:, ::7].shape[1])) < 0.5, FLT_MAX, -FLT_MAX)
    return x.astype(F32)


@_register("range_edge_tiny", "verify", two_d=True)
def range_edge_tiny(shape: tuple[int, int], seed: int, fmt: Any = None) -> np.ndarray:
    """N(0,1) x 2^(e_row + e_group - 118) (e_row per row in [-32, 0], e_group per 32 columns in [-8, 0]): amax about
    2^-116, below the two-level tensor scale's floor; many blocks float32-subnormal; blocks along either axis mix
    magnitudes (``fp4lab verify``'s "edges" cases with an even seed)."""
    return _range_edge(*shape, seed, high=False)


@_register("range_edge_huge", "verify", two_d=True)
def range_edge_huge(shape: tuple[int, int], seed: int, fmt: Any = None) -> np.ndarray:
    """N(0,1) x 2^(e_row + e_group + 125), clipped to +-FLT_MAX, and +-FLT_MAX in every seventh column: amax at
    float32 max, never +-Inf (``fp4lab verify``'s "edges" cases with an odd seed)."""
    return _range_edge(*shape, seed, high=True)


def range_edge_input(rows: int, cols: int, seed: int) -> np.ndarray:
    """``fp4lab verify``'s "edges" tensor: ``range_edge_tiny`` for an even seed, ``range_edge_huge`` for an odd one."""
    return _range_edge(rows, cols, seed, high=bool(seed % 2))


# ---- extra kinds ---------------------------------------------------------------------------------------------------
@_register("nan_payloads", "extra")
def nan_payloads(shape: tuple[int, ...], seed: int, fmt: Any = None) -> np.ndarray:
    """N(0,1) with a quarter of the elements NaN, each one of ``NAN_PAYLOADS`` (quiet and signalling, both signs,
    payloads 0x7FC00000, 0xFFC00000, 0x7FFFFFFF, ...): NaN handling must not depend on the payload."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape).astype(F32)
    where = rng.random(shape) < 0.25
    pats = np.asarray(NAN_PAYLOADS, np.uint32)[rng.integers(0, len(NAN_PAYLOADS), shape)]
    return np.where(where, pats.view(F32), x)


@_register("underflowing_quotients", "extra")
def underflowing_quotients(shape: tuple[int, ...], seed: int, fmt: Any = None) -> np.ndarray:
    """Blocks whose quotients x / S underflow float32: every 16th element (column 0 of each 16) is +-3e38, the
    others are tiny, either sign, log-uniform in [2^-149, 2^-60] (S about 2^126, so x / S is below 2^-186): the
    directed roundings must round the exact quotient, not the zero it underflows to."""
    rng = np.random.default_rng(seed)
    mag = np.exp2(rng.uniform(-149, -60, shape)).astype(F32)
    x = np.where(rng.random(shape) < 0.5, -mag, mag)
    lead = np.zeros(shape, bool)
    lead[..., ::16] = True
    return np.where(lead, np.where(rng.random(shape) < 0.5, F32(-3e38), F32(3e38)), x).astype(F32)

__all__ = ["ELEMENT_KINDS", "INPUT_KINDS", "NAN_PAYLOADS", "SPECIAL_F32", "InputKind", "compose_elements",
           "make_inputs", "range_edge_input"]
