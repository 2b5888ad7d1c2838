"""``fp4lab.QuantizeOptions``: the one options record of quantize that every backend takes.

Its defaults are ``fp4lab.quantize``'s, it is frozen, it refuses what ``fp4lab.quantize`` refuses with the same
one-line ``InputError``, and ``quantize_reference(x, fmt, QuantizeOptions(...))`` gives the bits of
``fp4lab.quantize(x, fmt, ...)`` (integer bit patterns of codes, scale codes, scales and the tensor scale).
"""

from __future__ import annotations

import dataclasses
import inspect
import subprocess
import sys

import numpy as np
import pytest

import fp4lab
from fp4lab import InputError, QuantizeOptions
from fp4lab.emulator.quantize import quantize_emulated
from fp4lab.kernels.verify import make_input
from fp4lab.numerics.ref_quantize import quantize_reference
from fp4lab.testing.bits import bit_patterns, same_bits

F32 = np.float32
FIELDS = ("rounding", "seed", "axis", "rht", "rht_seed", "sr_bits")


def test_exported_from_the_package():
    assert "QuantizeOptions" in fp4lab.__all__
    from fp4lab.numerics.options import QuantizeOptions as home

    assert fp4lab.QuantizeOptions is home


def test_defaults_are_those_of_fp4lab_quantize():
    opts = QuantizeOptions()
    assert tuple(f.name for f in dataclasses.fields(QuantizeOptions)) == FIELDS
    assert dataclasses.astuple(opts) == (None, 0, -1, None, 0, 24)
    params = inspect.signature(fp4lab.quantize).parameters
    assert {name: getattr(opts, name) for name in FIELDS} == {name: params[name].default for name in FIELDS}


def test_frozen_hashable_and_plain_ints():
    opts = QuantizeOptions("sr", 7, 0, 16, 3, 8)
    with pytest.raises(dataclasses.FrozenInstanceError):
        opts.seed = 8
    assert opts == QuantizeOptions(rounding="sr", seed=7, axis=0, rht=16, rht_seed=3, sr_bits=8)
    assert len({opts, QuantizeOptions("sr", 7, 0, 16, 3, 8), QuantizeOptions()}) == 2
    numpy_ints = QuantizeOptions("sr", np.uint64(7), np.int64(0), np.int32(16), np.int16(3), np.int64(8))
    assert numpy_ints == opts
    assert all(type(getattr(numpy_ints, f)) is int for f in FIELDS[1:])


BAD = [
    dict(rounding=3), dict(rounding="nearest"), dict(seed=1.5), dict(seed=2**64), dict(seed=True),
    dict(axis=1.0), dict(axis=None), dict(rht=0), dict(rht=True), dict(rht=17.0), dict(rht_seed=None),
    dict(rht_seed=-(2**63) - 1), dict(sr_bits=None), dict(sr_bits=7), dict(sr_bits=24.0),
]


@pytest.mark.parametrize("bad", BAD, ids=lambda d: "-".join(f"{k}={v!r}" for k, v in d.items()))
def test_bad_values_give_the_one_line_error_of_quantize(bad):
    x = np.ones((2, 32), F32)
    with pytest.raises(InputError) as from_record:
        QuantizeOptions(**bad)
    with pytest.raises(InputError) as from_quantize:
        fp4lab.quantize(x, "nvfp4", **bad)
    msg = str(from_record.value)
    assert msg == str(from_quantize.value)
    assert "\n" not in msg and msg.startswith("quantize: ") and next(iter(bad)) in msg, msg


def test_fp4lab_quantize_takes_the_record_as_options():
    """README's ``opts = fp4lab.QuantizeOptions(...)`` goes into ``fp4lab.quantize(x, fmt, options=opts)`` with the
    bits of the same arguments; the record and the arguments together, or the record in rounding's place, are one
    clear line each."""
    x = make_input("random", 32, 64, seed=2)
    opts = QuantizeOptions(rounding="sr", seed=7, rht=16, sr_bits=8)
    got = fp4lab.quantize(x, "nvfp4", options=opts)
    want = fp4lab.quantize(x, "nvfp4", rounding="sr", seed=7, rht=16, sr_bits=8)
    assert same_bits(got.codes, want.codes) and same_bits(got.scale_codes, want.scale_codes)
    assert (got.rounding, got.seed, got.rht) == ("sr", 7, 16)
    with pytest.raises(InputError, match="not both"):
        fp4lab.quantize(x, "nvfp4", seed=3, options=opts)
    with pytest.raises(InputError, match=r"goes in as options=\.\.\., not in place of rounding"):
        fp4lab.quantize(x, "nvfp4", opts)
    with pytest.raises(InputError, match="options must be a QuantizeOptions, got dict"):
        fp4lab.quantize(x, "nvfp4", options={"rounding": "sr"})


def test_backends_take_only_the_record():
    x = np.ones((2, 32), F32)
    fmt = fp4lab.get_format("nvfp4")
    for backend in (quantize_reference, quantize_emulated):
        with pytest.raises(InputError, match="options must be a QuantizeOptions") as err:
            backend(x, fmt, "sr")
        assert "\n" not in str(err.value)


CASES = [
    dict(),
    dict(rounding="sr", seed=11),
    dict(rht=16, rht_seed=5),
    dict(rounding="sr", seed=-3, axis=0, rht=32, rht_seed=2, sr_bits=8),
    dict(rounding="rtz", axis=0),
]


@pytest.mark.parametrize("name", ["nvfp4", "mxfp4", "ufp4", "int4-b32-e8m0"])
@pytest.mark.parametrize("kw", CASES, ids=lambda d: "-".join(f"{k}={v}" for k, v in d.items()) or "defaults")
def test_reference_with_the_record_equals_fp4lab_quantize(name, kw):
    fmt = fp4lab.get_format(name)
    x = make_input("adversarial", 64, 128, seed=4)
    with np.errstate(all="ignore"):
        want = fp4lab.quantize(x, fmt, **kw)
        got = quantize_reference(x, fmt, QuantizeOptions(**kw))
    for field in ("codes", "scale_codes", "scales"):
        a, b = getattr(got, field), getattr(want, field)
        assert a.dtype == b.dtype and a.shape == b.shape, (field, a.dtype, b.dtype)
        assert same_bits(a, b), (name, kw, field)
    assert (got.tensor_scale is None) == (want.tensor_scale is None)
    if want.tensor_scale is not None:
        assert bit_patterns(F32(got.tensor_scale)) == bit_patterns(F32(want.tensor_scale))
    assert (got.axis, got.rounding, got.seed, got.rht, got.rht_seed) == \
        (want.axis, want.rounding, want.seed, want.rht, want.rht_seed)


def test_import_fp4lab_stays_light():
    # the record lives in a module without numba, so exporting it does not load the emulator's kernels
    code = "import sys, fp4lab; fp4lab.QuantizeOptions(); print('numba' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"
