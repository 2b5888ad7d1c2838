"""The numpy twins of the kernels' bit-arithmetic encoders (``numerics.fbits.fbits_det``, ``fbits_sr``) against the
reference encoder on a dense sample of fp32 values, and the guard that keeps the built-in float grids on that
path (a twin that stopped matching would silently send them to the slower threshold tables)."""

from __future__ import annotations

import numpy as np
import pytest

import fp4lab
from fp4lab.formats.grids import FloatGrid
from fp4lab.formats.quant_format import NAMED_GRIDS
from fp4lab.kernels.params import element_params
from fp4lab.numerics.fbits import fbits_det, fbits_sr
from fp4lab.numerics.ref_encode import encode_elements

F32 = np.float32
POLICY = dict(nan_policy="zero", overflow="saturate", signed_zero="keep")


def _dense(vmax: float, thresholds: np.ndarray, stride: int = 1009) -> np.ndarray:
    """Every ``stride``-th fp32 bit pattern in [0, 2 * vmax], plus each threshold and level with 4 fp32 neighbours
    on either side, both signs."""
    top = int(np.array(2 * vmax, F32).view(np.uint32))
    grid = np.arange(0, top, stride, dtype=np.uint32).view(F32)
    pts = [np.abs(thresholds.astype(F32))]
    for direction in (np.inf, 0.0):
        v = pts[0]
        for _ in range(4):
            v = np.nextafter(v, F32(direction)).astype(F32)
            pts.append(v)
    mags = np.concatenate([grid, *pts, [F32(0.0), F32(1e-45), F32(vmax)]]).astype(F32)
    return np.concatenate([mags, -mags]).astype(F32)


@pytest.mark.parametrize("element", ["e2m1", "e1m2", "e3m0", "e3m2", "e2m3"])
def test_fbits_twins_match_the_reference_encoder(element):
    g = FloatGrid(**{k: v for k, v in NAMED_GRIDS[element].items() if k != "kind"})
    m, emin = g.mantissa_bits, 1 - g.exponent_bias
    cmax = (1 << (g.bits - 1)) - 1
    vmax = float(g.levels[-1])
    t = _dense(vmax, np.concatenate([g.thresholds("rtne"), g.levels]))
    sign = np.where(np.signbit(t), 1 << (g.bits - 1), 0)
    want = encode_elements(t, g, "rtne", **POLICY).astype(np.int64)
    assert np.array_equal(fbits_det(t, m, emin, cmax) | sign, want)
    rng = np.random.default_rng(1)
    for r in (np.zeros(t.size), np.full(t.size, (1 << 24) - 1), rng.integers(0, 1 << 24, t.size)):
        r = r.astype(np.int64)
        want = encode_elements(t, g, "sr", r.astype(np.uint32), **POLICY).astype(np.int64)
        assert np.array_equal(fbits_sr(t, r, m, emin, cmax) | sign, want)


@pytest.mark.parametrize("element", ["e2m1", "e1m2", "e3m2", "e2m3"])
@pytest.mark.parametrize("bits", [4, 8, 16, 24])
def test_sr_twin_matches_the_reference_at_every_width(element, bits):
    """``fbits_sr`` gives the reference's codes for the comparands of w-bit draws, on the dense sample and on
    negatives below half the finest step u that lie within 2^-25 u of each draw's v * u, ties included (there
    the reference's p = fl(1 - |t| / u) rounds)."""
    g = FloatGrid(**{k: v for k, v in NAMED_GRIDS[element].items() if k != "kind"})
    m, emin = g.mantissa_bits, 1 - g.exponent_bias
    cmax = (1 << (g.bits - 1)) - 1
    u = 2.0 ** (emin - m)
    rng = np.random.default_rng(bits)
    dense = _dense(float(g.levels[-1]), np.concatenate([g.thresholds("rtne"), g.levels]), stride=4001)
    r_edge = rng.integers(0, 1 << bits, 40000)
    v = ((1 << bits) - 1 - r_edge) / 2.0**bits
    edge = (-(v + rng.choice([-1.0, -0.5, 0.5, 1.0, 1.5], r_edge.size) * 2.0**-25) * u).astype(F32)
    keep = np.abs(edge) < u / 2
    t = np.concatenate([dense, edge[keep]]).astype(F32)
    sign = np.where(np.signbit(t), 1 << (g.bits - 1), 0)
    for r in (np.zeros(dense.size, np.int64), np.full(dense.size, (1 << bits) - 1),
              rng.integers(0, 1 << bits, dense.size)):
        r = np.concatenate([r, r_edge[keep]])
        comparand = ((r << (24 - bits)) | ((1 << (24 - bits)) - 1)).astype(np.uint32)
        want = encode_elements(t, g, "sr", comparand, **POLICY).astype(np.int64)
        assert np.array_equal(fbits_sr(t, comparand, m, emin, cmax) | sign, want)


@pytest.mark.parametrize("name", ["mxfp4", "nvfp4", "ufp4", "nvfp4-te", "ufp4-e4m3", "e2m1", "e1m2"])
def test_builtin_float_grids_take_the_bit_arithmetic_path(name):
    fmt = fp4lab.get_format(name)
    for mode in ("rtne", "sr"):
        assert element_params(fmt, mode).cx.FBITS, f"{name} {mode} fell back to threshold tables"


def test_fast_division_needs_grid_levels_of_at_least_2_to_the_minus_16():
    """The fake-quant kernel's column passes divide by the block's reciprocal only on grids where every scaled
    element below 2^-42 codes as a zero of its sign (ElementParams.fast_division): the built-in 4-bit grids, not
    a grid whose smallest level is 2^-19."""
    for name in ("ufp4", "e2m1-b16-fp32", "int4-b16-fp32", "nf4-b64-fp32"):
        for mode in ("rtne", "sr", "rtp"):
            assert element_params(fp4lab.get_format(name), mode).fast_division, (name, mode)
    tiny = fp4lab.get_format("ufp4").model_copy(update={"element": FloatGrid(exponent_bits=3, mantissa_bits=0,
                                                                            bias=20)})
    levels = element_params(tiny, "rtne").levels
    assert np.abs(levels[levels != 0]).min() == 2.0 ** -19
    assert not element_params(tiny, "rtne").fast_division
