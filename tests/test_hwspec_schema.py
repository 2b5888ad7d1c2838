"""``fp4lab schema --kind hwspec`` describes exactly what the hwspec loader accepts: every built-in spec validates,
and on specs around each file convenience (bare numbers, extends, inherits) and each range the schema and
:func:`fp4lab.hwspec.load_hw` agree."""

from __future__ import annotations

import contextlib
import io
import json
import tomllib

import pytest

from fp4lab.cli import main
from fp4lab.errors import SpecError
from fp4lab.hwspec import load_hw
from fp4lab.hwspec.registry import SPEC_DIR

jsonschema = pytest.importorskip("jsonschema")
BUILTINS = sorted(p.stem for p in SPEC_DIR.glob("*.toml"))


@pytest.fixture(scope="module")
def validator():
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert main(["schema", "--kind", "hwspec"]) == 0
    schema = json.loads(buf.getvalue())
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


@pytest.mark.parametrize("name", BUILTINS)
def test_every_builtin_hwspec_validates(validator, name):
    data = tomllib.loads((SPEC_DIR / f"{name}.toml").read_text())
    assert [e.message for e in validator.iter_errors(data)] == []
    load_hw(SPEC_DIR / f"{name}.toml")


HEAD = 'name = "t"\nvendor = "v"\narch = "a"\nprovenance = "assumed"\nsource = "test"\n'
KIND = ('[kinds.base]\ninstruction = "i"\nshape = "m16n8k16"\nk = 16\na_formats = ["bf16"]\nb_formats = ["bf16"]\n'
        'c_format = "f32"\naccumulation = { algorithm = "t_fdpa", fused_len = 16, frac_bits = 24, e_zero = -133 }\n'
        'output = { format = "f32", rounding = "rz", mantissa_bits = 23, nan_bits = 0x7FFFFFFF }\n')
AGREEMENT = {  # file text -> accepted by the loader (the schema must say the same)
    "bare numbers": (HEAD + KIND, True),
    "no kinds": (HEAD, True),
    "num table without source": (HEAD + KIND.replace("k = 16", 'k = { value = 16, provenance = "published" }'),
                                 True),
    "integral float": (HEAD + KIND.replace("k = 16", "k = 16.0"), True),
    "bare zero_sign": (HEAD + KIND.replace("0x7FFFFFFF }", '0x7FFFFFFF, zero_sign = "keep_underflow_sign" }'),
                       True),
    "partial kind with extends": (HEAD + KIND + '[kinds.child]\nextends = "base"\naccumulation = { fused_len = 8 }\n',
                                  True),
    "partial kind of an inheriting spec": (HEAD + 'inherits = "hopper-sm90"\n[kinds."wgmma.bf16"]\n'
                                           'peak_tflops = 1.0\n', True),
    "kind provenance and source": (HEAD + KIND + 'provenance = "measured"\nsource = "bench"\n', True),
    "missing vendor": (HEAD.replace('vendor = "v"\n', "") + KIND, False),
    "partial kind without extends": (HEAD + KIND + '[kinds.child]\naccumulation = { fused_len = 8 }\n', False),
    "accumulation missing frac_bits": (HEAD + KIND.replace("frac_bits = 24, ", ""), False),
    "t_fdpa without e_zero": (HEAD + KIND.replace(", e_zero = -133", ""), False),
    "st_fdpa without scales": (HEAD + KIND.replace('"t_fdpa"', '"st_fdpa"'), False),
    "num table without provenance": (HEAD + KIND.replace("k = 16", "k = { value = 16 }"), False),
    "fractional k": (HEAD + KIND.replace("k = 16", "k = 16.5"), False),
    "k of 0": (HEAD + KIND.replace("k = 16", "k = 0"), False),
    "frac_bits 51": (HEAD + KIND.replace("frac_bits = 24", "frac_bits = 51"), False),
    "boolean k": (HEAD + KIND.replace("k = 16", "k = true"), False),
    "string k": (HEAD + KIND.replace("k = 16", 'k = "16"'), False),
    # strict types, as for format files (fp4lab.formats.spec_io.validate_model): no quoted numbers, no 0/1 booleans
    "string value in a num table": (HEAD + KIND.replace("k = 16", 'k = { value = "16", provenance = "assumed" }'),
                                    False),
    "integer for a boolean": (HEAD + KIND + "tf32_truncate = 1\n", False),
    "string native block": (HEAD + KIND + '[[native]]\nelement = "e4m3"\nkind = "base"\nblock = "32"\n', False),
    "negative peak": (HEAD + KIND + "peak_tflops = -1.0\n", False),
    "infinite peak": (HEAD + KIND + "peak_tflops = inf\n", False),
    "unknown operand format": (HEAD + KIND.replace('a_formats = ["bf16"]', 'a_formats = ["bf17"]'), False),
    "unknown zero_sign": (HEAD + KIND.replace("0x7FFFFFFF }", '0x7FFFFFFF, zero_sign = "negative" }'), False),
    "unknown kind field": (HEAD + KIND + "peak = 1.0\n", False),
    "unknown top-level field": (HEAD + 'extends = "x"\n' + KIND, False),
    "inherits unknown spec": (HEAD + 'inherits = "no-such-gpu"\n', False),
    "bad provenance": (HEAD.replace('"assumed"', '"guessed"') + KIND, False),
}


@pytest.mark.parametrize("case", list(AGREEMENT))
def test_schema_and_loader_agree(validator, tmp_path, case):
    text, accepted = AGREEMENT[case]
    path = tmp_path / "hw.toml"
    path.write_text(text)
    try:
        load_hw(path)
        loaded = True
    except SpecError:
        loaded = False
    assert loaded is accepted
    assert validator.is_valid(tomllib.loads(text)) is accepted
