"""'nvfp4-te' against TransformerEngine's NVFP4 reference semantics.

TransformerEngine is not installable here, so its reference quantizer (custom_recipes/reference_nvfp4.py,
1x16 tiles, no RHT, no 4over6) is restated below as a few torch operations in the order that file performs them:
encode scale g = 2688 / amax, block scale e4m3(min(amax_b * (g * fp32(1/6)), FLT_MAX) clamped to 448), element
multiplier min(1 / (S * (1/g)), FLT_MAX), clamp to +-6 and its threshold table (exact -0 and NaN give code 0).
"""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import fp4lab  # noqa: E402
from fp4lab.testing.bits import same_bits  # noqa: E402

FLT_MAX = torch.finfo(torch.float32).max
# (lower, upper, lower_closed, upper_closed) bins of codes 0..7 on |x|, from TE's table
_POS_BINS = [(0.0, 0.25, True, True), (0.25, 0.75, False, False), (0.75, 1.25, True, True),
             (1.25, 1.75, False, False), (1.75, 2.5, True, True), (2.5, 3.5, False, False),
             (3.5, 5.0, True, True), (5.0, 6.0, False, True)]


def _te_fp4_codes(v: torch.Tensor) -> torch.Tensor:
    codes = torch.zeros_like(v, dtype=torch.uint8)
    for code, (lo, hi, lo_closed, hi_closed) in enumerate(_POS_BINS):
        pos_lo = v >= lo if lo_closed else v > lo
        pos_hi = v <= hi if hi_closed else v < hi
        codes[pos_lo & pos_hi] = code
        neg_lo = v <= -lo if lo_closed else v < -lo
        neg_hi = v >= -hi if hi_closed else v > -hi
        mask = neg_lo & neg_hi & (v < 0)  # exact -0.0 stays code 0
        codes[mask] = code + 8
    return codes


def te_nvfp4(x: torch.Tensor):
    amax = x.abs().max().to(torch.float32)
    g = torch.minimum(torch.tensor(448.0 * 6.0) / amax, torch.tensor(FLT_MAX))
    if g == 0:
        g = torch.tensor(1.0)
    g_dec = 1.0 / g
    blocks = x.view(x.shape[0], -1, 16)
    vec_max = blocks.abs().amax(dim=-1, keepdim=True)
    s = torch.minimum(vec_max * (g * torch.reciprocal(torch.tensor(6.0))), torch.tensor(FLT_MAX))
    s8 = torch.clamp(s, -448.0, 448.0).to(torch.float8_e4m3fn)
    enc = torch.minimum(1.0 / (s8.to(torch.float32) * g_dec), torch.tensor(FLT_MAX))
    scaled = torch.clamp(blocks * enc, -6.0, 6.0).reshape(x.shape)
    return _te_fp4_codes(scaled), s8.view(torch.uint8).squeeze(-1), g_dec


@pytest.mark.parametrize("row_scales", [(1.0, 1.0), (1.0, 1e-3), (1.0, 3e-5), (200.0, 1e-2)])
def test_nvfp4_te_matches_transformer_engine_semantics(row_scales):
    rng = np.random.default_rng(7)
    x = rng.standard_normal((64, 256)).astype(np.float32)
    x[: 32] *= row_scales[0]
    x[32:] *= row_scales[1]
    x[5, 17] = 0.0
    x[6, 3] = -0.0
    x[7, :16] = 0.0  # an all-zero block
    codes, scodes, g_dec = te_nvfp4(torch.from_numpy(x))
    qt = fp4lab.quantize(x, "nvfp4-te")
    assert np.array_equal(qt.codes, codes.numpy())
    assert np.array_equal(qt.scale_codes, scodes.numpy())
    assert same_bits(np.float32(qt.tensor_scale), np.float32(g_dec.item()))


def test_non_finite_and_all_zero_tensors_differ_from_transformer_engine():
    """docs/numerics.md L7. One Inf or NaN: TE's amax is non-finite, so every block changes (Inf: 2688 / amax = 0,
    reset to g = 1; NaN: every block scale NaN); fp4lab's tensor amax is over the finite values, so only the block
    holding the Inf / NaN changes. All-zero tensor: TE's tensor scale is 1 / FLT_MAX, fp4lab's 1.0 (D9); the codes
    and block scales are equal (zeros)."""
    x = np.random.default_rng(0).standard_normal((4, 64)).astype(np.float32)
    clean = fp4lab.quantize(x, "nvfp4-te")
    for bad in (np.inf, np.nan):
        y = x.copy()
        y[0, 0] = bad
        codes, scodes, g_dec = te_nvfp4(torch.from_numpy(y))
        qt = fp4lab.quantize(y, "nvfp4-te")
        keep = np.ones(qt.codes.shape, bool)
        keep[0, :16] = False  # the block holding the Inf / NaN
        assert np.array_equal(qt.codes[keep], clean.codes[keep])
        assert np.array_equal(qt.scale_codes.reshape(-1)[1:], clean.scale_codes.reshape(-1)[1:])
        assert qt.tensor_scale == clean.tensor_scale
        if np.isnan(bad):
            assert torch.isnan(scodes.view(torch.float8_e4m3fn).float()).all() and np.isnan(g_dec.item())
        else:
            assert g_dec.item() == 1.0
            assert np.all(scodes.numpy().reshape(-1)[1:] != qt.scale_codes.reshape(-1)[1:])
    z = np.zeros((4, 64), np.float32)
    codes, scodes, g_dec = te_nvfp4(torch.from_numpy(z))
    qt = fp4lab.quantize(z, "nvfp4-te")
    assert np.array_equal(qt.codes, codes.numpy()) and np.array_equal(qt.scale_codes, scodes.numpy())
    assert qt.tensor_scale == 1.0
    assert np.float32(g_dec.item()) == np.float32(1.0) / np.finfo(np.float32).max
