"""hwspec: every built-in spec loads and validates, every number carries provenance and source, inheritance marks
guesses as guesses, specs round-trip, bad files give one-line errors naming the file and field, and the CLI works."""

import json

import pytest

import fp4lab.hwspec as hwspec
from fp4lab.cli import main as cli_main
from fp4lab.errors import SpecError
from fp4lab.hwspec.registry import SPEC_DIR
from fp4lab.hwspec.schema import HWSpec

# every spec file of the package: a new file gets the provenance and round-trip tests without being listed here
SPEC_NAMES = sorted(p.stem for p in SPEC_DIR.glob("*.toml"))
# instruction kinds the emulator's tests and docs rely on, per spec (a spec may define more)
KNOWN_KINDS = {
    "hopper-sm90": {"mma.sync.f16", "mma.sync.bf16", "mma.sync.tf32", "wgmma.f16", "wgmma.bf16", "wgmma.tf32",
                    "wgmma.e4m3", "wgmma.e5m2"},
    "blackwell-sm100": {"tcgen05.f16", "tcgen05.tf32", "tcgen05.f8f6f4", "tcgen05.mxf8f6f4", "tcgen05.mxf4",
                        "tcgen05.mxf4nvf4"},
    "blackwell-sm120": {"mma.sync.mxf8f6f4", "mma.sync.mxf4", "mma.sync.mxf4nvf4"},
    "rubin": {"tcgen05.mxf4nvf4"},
    "cdna3-mi300": {"mfma.f16", "mfma.bf16", "mfma.fp8"},
    "cdna4-mi350": {"mfma_scale.f8f6f4"},
    "proposal-ufp4": {"bsmma.e1m2", "bsmma.int4"},
    "volta-sm70": {"mma.sync.f16", "mma.sync.f16.f16acc"},
    "turing-sm75": {"mma.sync.f16", "mma.sync.m8n8k4.f16"},
    "ampere-sm80": {"mma.sync.f16", "mma.sync.bf16", "mma.sync.tf32", "mma.sync.tf32.k4"},
    "ada-sm89": {"mma.sync.e4m3", "mma.sync.e4m3.k16", "mma.sync.e4m3.f16acc"},
}


def test_builtin_specs_and_kinds():
    assert set(KNOWN_KINDS) <= set(SPEC_NAMES)
    for name, kinds in KNOWN_KINDS.items():
        assert kinds <= set(hwspec.get_hw(name).kinds), name


@pytest.mark.parametrize("name", SPEC_NAMES)
def test_every_number_has_provenance_and_source(name):
    spec = hwspec.get_hw(name)
    for kind in spec.kinds.values():
        nums = kind.nums()
        assert {"k", "accumulation.fused_len", "accumulation.frac_bits", "output.mantissa_bits"} <= set(nums)
        for field, n in nums.items():
            assert n.provenance in ("measured", "published", "assumed", "unknown"), (name, kind.name, field)
            assert n.source.strip(), (name, kind.name, field)
    assert spec.native, name
    for c in spec.native:
        assert c.kind in spec.kinds


def test_rubin_inherits_blackwell_and_is_all_assumed():
    rubin, bw = hwspec.get_hw("rubin"), hwspec.get_hw("blackwell-sm100")
    assert rubin.inherits == "blackwell-sm100"
    assert set(rubin.kinds) == set(bw.kinds)
    assert set(rubin.provenance_counts()) == {"assumed"}
    k, kb = rubin.kind("tcgen05.mxf4nvf4"), bw.kind("tcgen05.mxf4nvf4")
    assert int(k.accumulation.frac_bits) == int(kb.accumulation.frac_bits) == 35
    assert "blackwell-sm100" in k.accumulation.frac_bits.source
    assert k.peak_tflops.value != kb.peak_tflops.value  # rubin overrides its own rate
    for name, kind in rubin.kinds.items():  # the kinds themselves too (hw show prints a provenance per kind)
        assert kind.provenance == "assumed", name
        assert kind.source.startswith("assumed: same as blackwell-sm100") or name == "tcgen05.mxf4nvf4", name


def test_cdna4_internals_are_flagged_unknown():
    k = hwspec.get_hw("cdna4-mi350").kind("mfma_scale.f8f6f4")
    for field in ("accumulation.frac_bits", "accumulation.fused_len", "accumulation.join_frac_bits"):
        assert k.nums()[field].provenance == "unknown"
    assert k.scales[0].block.provenance == "published"


def test_hopper_parameters_and_measured_provenance():
    h = hwspec.get_hw("hopper-sm90")
    fp8 = h.kind("wgmma.e4m3")
    assert (int(fp8.accumulation.frac_bits), int(fp8.output.mantissa_bits), fp8.output.rounding) == (13, 13, "rz")
    bf = h.kind("wgmma.bf16")
    assert (int(bf.accumulation.frac_bits), int(bf.accumulation.e_zero), int(bf.output.nan_bits)) == (25, -133,
                                                                                                       0x7FFFFFFF)
    assert bf.accumulation.frac_bits.provenance == "measured"
    assert h.kind("mma.sync.f16.f16acc").output.rounding == "rne"


@pytest.mark.parametrize("name", SPEC_NAMES)
def test_round_trip_through_plain_data(name):
    spec = hwspec.get_hw(name)
    again = HWSpec.model_validate(hwspec.spec_to_dict(spec))
    assert again == spec


def test_load_user_spec_file_with_extends_and_bare_numbers(tmp_path):
    p = tmp_path / "mine.toml"
    p.write_text('''
name = "mine"
vendor = "me"
arch = "x"
provenance = "assumed"
source = "what-if"
[kinds."m.bf16"]
instruction = "m"
shape = "k16"
k = 16
a_formats = ["bf16"]
b_formats = ["bf16"]
c_format = "f32"
accumulation = { algorithm = "t_fdpa", fused_len = 16, frac_bits = 30, e_zero = -133 }
output = { format = "f32", rounding = "rne", mantissa_bits = 23, nan_bits = 0x7FC00000 }
[kinds."m.f16"]
extends = "m.bf16"
a_formats = ["f16"]
b_formats = ["f16"]
''')
    spec = hwspec.get_hw(str(p))
    k = spec.kind("m.f16")
    assert int(k.accumulation.frac_bits) == 30 and k.accumulation.frac_bits.provenance == "assumed"
    assert k.accumulation.frac_bits.source == "what-if"
    import numpy as np

    d = hwspec.emulate_mma(np.ones((1, 16)), np.ones((16, 1)), None, hw=spec, kind="m.f16")
    assert d[0, 0] == 16.0


BAD = [
    ('name = "x"\nvendor = "v"\narch = "a"\nprovenance = "assumed"\n', "source"),
    ('name = "x"\nvendor = "v"\narch = "a"\nprovenance = "guessed"\nsource = "s"\n', "provenance"),
    ('name = "x"\nvendor = "v"\narch = "a"\nprovenance = "assumed"\nsource = "s"\n[kinds.k]\nextends = "nope"\n',
     "extends unknown kind"),
    ('name = "x"\nvendor = "v"\narch = "a"\nprovenance = "assumed"\nsource = "s"\n[kinds.k]\ninstruction = "i"\n'
     'shape = "s"\nk = 16\na_formats = ["fp7"]\nb_formats = ["bf16"]\nc_format = "f32"\n'
     'accumulation = { algorithm = "t_fdpa", fused_len = 16, frac_bits = 25, e_zero = -133 }\n'
     'output = { format = "f32", rounding = "rz", mantissa_bits = 23, nan_bits = 1 }\n', "a_formats"),
    ('name = "x"\nvendor = "v"\narch = "a"\nprovenance = "assumed"\nsource = "s"\n[kinds.k]\ninstruction = "i"\n'
     'shape = "s"\nk = 64\na_formats = ["e2m1"]\nb_formats = ["e2m1"]\nc_format = "f32"\n'
     'accumulation = { algorithm = "gst_fdpa", fused_len = 64, frac_bits = 35, e_zero = -139 }\n'
     'output = { format = "f32", rounding = "rz", mantissa_bits = 23, nan_bits = 1 }\n', "group"),
    ("name = \n", "not valid TOML"),
]


@pytest.mark.parametrize("text,needle", BAD)
def test_bad_spec_files_give_one_line_errors(tmp_path, text, needle):
    p = tmp_path / "bad.toml"
    p.write_text(text)
    with pytest.raises(SpecError) as e:
        hwspec.load_hw(p)
    msg = str(e.value)
    assert "\n" not in msg and str(p) in msg and needle in msg


def test_unknown_hw_lists_known():
    with pytest.raises(SpecError, match="hopper-sm90"):
        hwspec.get_hw("h100-typo")


def test_spec_files_are_the_registry():
    assert len(SPEC_NAMES) >= len(KNOWN_KINDS)
    assert SPEC_NAMES == hwspec.list_hw()[:len(SPEC_NAMES)]


def test_cli_hw_show_format_names_unnamed_grids_scales_and_tiles(capsys, tmp_path):
    """A spec file's unnamed grid and ExMy scale are named from their fields, a tile by both extents, and a format
    that no kind runs says so (no Python None in the text)."""
    spec = tmp_path / "t.toml"
    spec.write_text('name = "tile"\nblock = { shape = [8, 4] }\ntensor_scale = "amax"\n[scale_rule]\nmethod = "amax"\n'
                    '[element]\nkind = "float"\nexponent_bits = 1\nmantissa_bits = 2\nbias = 1\n'
                    '[scale]\nkind = "float"\nexponent_bits = 3\nmantissa_bits = 2\n')
    assert cli_main(["hw", "show", "proposal-ufp4", "--format", str(spec)]) == 0
    out = capsys.readouterr().out
    line = " ".join(out[out.index("format tile ("):].split())
    assert line.startswith("format tile (e1m2, ue3m2, block 8x4): not native, no kind runs it, no published rate.")
    assert "None" not in line and line.count("not native") == 1


def test_cli_hw_show_with_an_empty_format_is_an_error(capsys):
    assert cli_main(["hw", "show", "hopper-sm90", "--format", ""]) == 2  # not silently the spec alone
    assert "unknown format ''" in capsys.readouterr().err


def test_cli_hw_list_show_and_format_cost(capsys):
    assert cli_main(["hw", "list", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert {r["name"] for r in rows} >= set(SPEC_NAMES)
    assert cli_main(["hw", "show", "blackwell-sm100", "--json", "--format", "nvfp4"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["format_cost"]["native"] and out["format_cost"]["kind"] == "tcgen05.mxf4nvf4"
    assert cli_main(["hw", "show", "hopper-sm90", "--json", "--format", "ufp4"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert not out["format_cost"]["native"] and out["format_cost"]["kind"] == "wgmma.bf16"
    assert cli_main(["hw", "show", "proposal-ufp4", "--json", "--format", "ufp4"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert not out["format_cost"]["native"]  # ufp4 has FP32 block scales; the proposal's native UFP4 uses UE4M3
    assert cli_main(["hw", "show", "cdna4-mi350"]) == 0
    assert "unknown" in capsys.readouterr().out


def test_cli_verify_published_vectors(capsys):
    assert cli_main(["hw", "verify", "--gpu", "off", "--json"]) == 0
    res = json.loads(capsys.readouterr().out)["published_vectors"]
    assert len(res) == 6 and all(r["bit_exact"] == r["rows"] == 5000 for r in res)


def test_zero_sign_is_a_rule_with_provenance():
    """The sign of zero results is a spec field with provenance: +0 on NVIDIA (measured on the
    H200), a negative underflow's sign kept on CDNA3 (MMA-Sim's published model, not hardware-validated)."""
    for name in ("hopper-sm90", "blackwell-sm100", "ampere-sm80"):
        assert {k.output.zero_sign.value for k in hwspec.get_hw(name).kinds.values()} == {"positive"}
    for k in hwspec.get_hw("cdna3-mi300").kinds.values():
        assert k.output.zero_sign.value == "keep_underflow_sign" and k.output.zero_sign.provenance == "published"
        assert "output.zero_sign" in k.nums()


def test_specs_refuse_operand_combinations_no_instruction_has(tmp_path):
    base = """name = "x"
vendor = "v"
arch = "a"
provenance = "assumed"
source = "test"
[kinds."k"]
instruction = "i"
shape = "m16n8k16"
k = 16
a_formats = {a}
b_formats = {b}
c_format = "{c}"
{extra}
accumulation = {{ algorithm = "t_fdpa", fused_len = 16, frac_bits = 25, e_zero = -21 }}
output = {{ format = "{c}", rounding = "rne", mantissa_bits = 10, nan_bits = 0x7FFF }}
"""
    bad = {
        "bf16 operands with an f16 accumulator": dict(a='["bf16"]', b='["bf16"]', c="f16", extra=""),
        "ab_same_format needs": dict(a='["f16", "e4m3"]', b='["f16"]', c="f16", extra="ab_same_format = true"),
    }
    for needle, kw in bad.items():
        p = tmp_path / "x.toml"
        p.write_text(base.format(**kw))
        with pytest.raises(SpecError, match=needle):
            hwspec.load_hw(p)


def _fmt_file(tmp_path, name, body):
    p = tmp_path / f"{name}.toml"
    p.write_text(f'name = "{name}"\n' + body)
    return str(p)


def test_native_is_decided_from_values_not_names(tmp_path, capsys):
    """An exact E1M2 grid spelled out field by field with UE4M3 scales on 1x16 blocks is native on
    the proposal's bsmma.e1m2; a table grid called "e1m2" with other values is not; a UE5M3 scale is not."""
    from fp4lab.formats import get_format
    from fp4lab.hwspec.native import find_native

    spec = hwspec.get_hw("proposal-ufp4")
    scale = 'block = { shape = [16] }\nscale = "ue4m3"\n[scale_rule]\nmethod = "amax"\n'
    exact = _fmt_file(tmp_path, "myexact", 'element = { kind = "float", exponent_bits = 1, mantissa_bits = 2, '
                                           'bias = 1 }\n' + scale)
    vals = ", ".join(str(v) for v in [0, 0.25, 0.5, 0.75, 1, 1.25, 1.5, 2, -0.0, -0.25, -0.5, -0.75, -1, -1.25,
                                      -1.5, -2])
    fake = _fmt_file(tmp_path, "fake", f'element = {{ kind = "table", name = "e1m2", values = [{vals}] }}\n' + scale)
    assert find_native(spec, get_format(exact))[0].kind == "bsmma.e1m2"
    combo, why = find_native(spec, get_format(fake))
    assert combo is None and "no hardware operand format" in why
    ue5m3 = _fmt_file(tmp_path, "ue5m3", 'element = "e2m1"\nblock = { shape = [32] }\nscale = { kind = "float", '
                                         'name = "ue5m3", exponent_bits = 5, mantissa_bits = 3 }\n'
                                         '[scale_rule]\nmethod = "amax"\n')
    combo, why = find_native(hwspec.get_hw("blackwell-sm100"), get_format(ue5m3))
    assert combo is None and "ue8m0/32 scales on tcgen05.mxf4" in why  # UE5M3: an operand format no kind takes
    assert find_native(hwspec.get_hw("blackwell-sm100"), get_format("mxfp4"))[0].kind == "tcgen05.mxf4"
    assert cli_main(["hw", "show", "proposal-ufp4", "--json", "--format", exact]) == 0
    assert json.loads(capsys.readouterr().out)["format_cost"]["native"]
    assert cli_main(["hw", "show", "proposal-ufp4", "--json", "--format", fake]) == 0
    assert not json.loads(capsys.readouterr().out)["format_cost"]["native"]


def test_emulate_gemm_with_scales_the_hardware_lacks_explains(tmp_path):
    import numpy as np

    import fp4lab

    f = fp4lab.get_format(_fmt_file(tmp_path, "ue5m3b", 'element = "e2m1"\nblock = { shape = [32] }\nscale = '
                                    '{ kind = "float", name = "ue5m3", exponent_bits = 5, mantissa_bits = 3 }\n'
                                    '[scale_rule]\nmethod = "amax"\n'))
    q = fp4lab.quantize(np.random.default_rng(0).standard_normal((4, 64)).astype(np.float32), f)
    with pytest.raises(fp4lab.errors.Fp4labError, match="takes block scales .*ue8m0/32.*dequantize"):
        fp4lab.emulate_gemm(q, q, hw="blackwell-sm100", kind="tcgen05.mxf4nvf4")


def test_one_route_for_hw_show_and_emulate_gemm(capsys):
    """``native.route`` answers for ``hw show --format`` and ``emulate_gemm`` alike: INT4 / E1M2 grids are exact in
    Blackwell's wider mxf8f6f4 operands (not native, not a 16-bit fallback); an E2M1-only kind refuses their
    codes; FP32-scaled formats fall back with ``scale_mode='per_block'``, which ``emulate_gemm`` takes by default
    and also runs on tf32 kinds; a hwspec may name a UE5M3 scale."""
    import numpy as np

    import fp4lab
    from fp4lab.errors import InputError
    from fp4lab.formats import get_format
    from fp4lab.hwspec.native import route
    from fp4lab.hwspec.schema import ScaleOption

    bw = hwspec.get_hw("blackwell-sm100")
    for name, el in (("int4-b32-e8m0", ("e3m2", "e2m3")), ("ufp4-e8m0", ("e2m3",))):
        r = route(bw, get_format(name))
        assert (r.how, r.kind) == ("exact", "tcgen05.mxf8f6f4") and r.element in el, r
        assert cli_main(["hw", "show", "blackwell-sm100", "--json", "--format", name]) == 0
        cost = json.loads(capsys.readouterr().out)["format_cost"]
        assert cost["route"] == "exact" and cost["kind"] == r.kind and cost["peak_tflops"]["value"] > 2250
    assert route(bw, get_format("mxfp4")).how == "native"
    fb = route(bw, get_format("ufp4"))
    assert (fb.how, fb.scale_mode) == ("fallback", "per_block") and "per_block" in fb.note

    x = np.random.default_rng(0).standard_normal((32, 64)).astype(np.float32)
    q = fp4lab.quantize(x, "int4-b32-e8m0")
    d = fp4lab.emulate_gemm(q, q, hw=bw, kind="tcgen05.mxf8f6f4")
    deq = fp4lab.dequantize(q).astype(np.float64)
    assert np.allclose(d, deq @ deq.T, rtol=1e-5, atol=1e-5)
    for kind in ("tcgen05.mxf4", "tcgen05.mxf4nvf4"):
        with pytest.raises(InputError, match="not all values of any operand format"):
            fp4lab.emulate_gemm(q, q, hw=bw, kind=kind)
    u = fp4lab.quantize(x, "ufp4")
    with pytest.raises(InputError):
        fp4lab.emulate_gemm(u, u, hw=bw, kind=fb.kind, scale_mode="fold")
    deq = fp4lab.dequantize(u).astype(np.float64)
    for kind in (fb.kind, "tcgen05.tf32"):
        d = fp4lab.emulate_gemm(u, u, hw=bw, kind=kind)  # default: per_block for FP32 scales
        assert np.allclose(d, deq @ deq.T, rtol=1e-2, atol=1e-2)
    block = {"value": 16, "provenance": "assumed", "source": "test"}
    assert ScaleOption.model_validate({"format": "ue5m3", "block": block}).format == "ue5m3"
