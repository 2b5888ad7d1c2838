"""Published Khattak-Mikaitis tensor-core features (fp4lab/hwspec/data/km_features.toml: V100, A100/A30, Ada/L40S,
H100/H200, B200) against fp4lab's models. Each feature is measured by a probe dot product run through emulate_mma
(fp4lab.hwspec.features), not read from the spec; the probes are checked to follow mutated model parameters."""

from functools import cache

import pytest

from fp4lab.errors import InputError, SpecError
from fp4lab.hwspec import get_hw
from fp4lab.hwspec.features import FEATURES, Probe, load_published, measure
from fp4lab.hwspec.schema import Num

DATA = load_published()
ENTRIES = DATA["entries"]
CASES = [(e, f) for e in ENTRIES for f in e["features"]]


def _id(e: dict) -> str:
    return f"{e['gpu'].split(',')[0].replace(' ', '')}-{e['input']}-{e['output']}-{e['source']}"


@cache
def _measured(hw, kind: str, fmt: str) -> dict:
    return measure(hw, kind, fmt)


def test_published_file_is_well_formed():
    assert len(ENTRIES) >= 25 and {"km-models", "km-models-2026", "km-hpec"} <= set(DATA["sources"])
    for s in DATA["sources"].values():
        assert s["title"] and s["authors"] and s["year"] and s["url"].startswith("https://") and s["arxiv"]
    for e in ENTRIES:
        kind = get_hw(e["hw"]).kind(e["kind"])
        assert e["input"] in kind.a_formats and e["output"] == kind.output.format, e
        assert e["where"] and e["features"], e
        assert set(e.get("fp4lab_differs", {})) <= set(e["features"]), e
    gpus = {e["gpu"] for e in ENTRIES}
    assert {"V100", "A100", "A30", "H100", "H200", "B200"} <= gpus


@pytest.mark.parametrize("entry,feature", CASES, ids=[f"{_id(e)}-{f}" for e, f in CASES])
def test_published_feature_reproduced(entry, feature):
    """fp4lab's model shows the published value, or the documented fp4lab value where the entry says it differs."""
    got = _measured(entry["hw"], entry["kind"], entry["input"])[feature]
    want = entry.get("fp4lab_differs", {}).get(feature, entry["features"][feature])
    assert got == want, f"{entry['gpu']} {entry['input']}->{entry['output']} {feature}: fp4lab {got!r}, want {want!r}"


def test_documented_disagreements():
    """Every recorded disagreement is real (the published value differs) and explained."""
    marked = [e for e in ENTRIES if "fp4lab_differs" in e]
    assert [(e["gpu"], e["input"]) for e in marked] == [("H200", "e4m3")]
    for e in marked:
        assert e["note"]
        for f, v in e["fp4lab_differs"].items():
            assert e["features"][f] != v


@pytest.mark.parametrize("entry", ENTRIES, ids=[_id(e) for e in ENTRIES])
def test_probes_agree_with_spec_fields(entry):
    """The measured block size, alignment width and rounding are the kind's fused_len, frac_bits - 23 and
    output.rounding (the probes read behaviour; this ties them to the spec's own parameters)."""
    kind = get_hw(entry["hw"]).kind(entry["kind"])
    got = _measured(entry["hw"], entry["kind"], entry["input"])
    assert got["fused_size"] == int(kind.accumulation.fused_len)
    assert got["extra_alignment_bits"] == int(kind.accumulation.frac_bits) - 23
    assert got["rounding"] == kind.output.rounding


def _mutant(hw: str, kind_name: str, acc: dict | None = None, out: dict | None = None):
    spec = get_hw(hw)
    k = spec.kind(kind_name)
    num = {f: Num(value=v, provenance="assumed", source="mutation test") for f, v in (acc or {}).items()}
    k = k.model_copy(update={"accumulation": k.accumulation.model_copy(update=num),
                             "output": k.output.model_copy(update=out or {})})
    return spec.model_copy(update={"kinds": {**spec.kinds, kind_name: k}})


@pytest.mark.parametrize("hw,kind,acc,out,want", [
    ("volta-sm70", "mma.sync.f16", {"fused_len": 2}, None, {"fused_size": 2, "carry_bits": 1}),
    ("ampere-sm80", "mma.sync.f16", {"fused_len": 16}, None, {"fused_size": 16, "carry_bits": 4}),
    ("ampere-sm80", "mma.sync.f16", {"frac_bits": 23}, None, {"extra_alignment_bits": 0}),
    ("ampere-sm80", "mma.sync.f16", {"frac_bits": 25}, None, {"extra_alignment_bits": 2}),
    ("ampere-sm80", "mma.sync.f16.f16acc", {"frac_bits": 22}, None, {"extra_alignment_bits": -1}),
    ("ampere-sm80", "mma.sync.f16", None, {"rounding": "rne"}, {"rounding": "rne", "inter_block_rounding": "rne"}),
    ("volta-sm70", "mma.sync.f16.f16acc", None, {"rounding": "rz"}, {"rounding": "rz", "inter_block_rounding": "rz"}),
    ("hopper-sm90", "wgmma.e4m3", {"frac_bits": 25}, {"mantissa_bits": 23}, {"extra_alignment_bits": 2}),
])
def test_probes_follow_mutated_models(hw, kind, acc, out, want):
    """A model with one parameter changed is measured with the changed value: the probes test behaviour."""
    fmt = get_hw(hw).kind(kind).a_formats[0]
    got = measure(_mutant(hw, kind, acc, out), kind, fmt, tuple(want))
    assert got == want


def test_probe_errors_are_fp4lab_errors(tmp_path):
    with pytest.raises(InputError, match="does not take 'e4m3'"):
        Probe("ampere-sm80", "mma.sync.f16", "e4m3")
    with pytest.raises(InputError, match="block-scaled"):
        Probe("blackwell-sm100", "tcgen05.mxf4")
    with pytest.raises(InputError, match="unknown features"):
        measure("volta-sm70", "mma.sync.f16", None, ("fma",))
    bad = tmp_path / "bad.toml"
    bad.write_text('[sources.x]\ntitle = "t"\n[[entries]]\ngpu = "V100"\nsource = "y"\n')
    with pytest.raises(SpecError, match="unknown source 'y'"):
        load_published(bad)
    assert set(FEATURES) >= {f for e in ENTRIES for f in e["features"]}
