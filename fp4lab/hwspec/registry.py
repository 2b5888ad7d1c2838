"""Loading hwspec TOML files, and the registry of accelerator specs (``fp4lab.registry.SpecRegistry``; the
built-ins are the files of ``fp4lab/hwspec/specs``).

Loader conveniences (all resolved before validation, so the model always holds full :class:`Num` records):

* a bare number (or a bare ``zero_sign`` string) in a kind takes that kind's ``provenance``/``source`` (which
  default to the spec's);
* ``extends = "other-kind"`` inside a kind starts from that kind of the same file and deep-merges the rest;
* ``inherits = "parent-spec"`` at the top starts from the parent spec's kinds and native combos; when the child's
  ``provenance`` is "assumed" or "unknown", every inherited kind and number takes that provenance and a source
  naming the parent (a guess stays marked as a guess).
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from fp4lab.errors import SpecError, one_line
from fp4lab.formats.spec_io import looks_like, read_spec_dict, validate_model
from fp4lab.hwspec.schema import HWSpec
from fp4lab.registry import SpecRegistry

SPEC_DIR = Path(__file__).parent / "specs"
_NUM_KEYS = {"k", "peak_tflops", "fused_len", "frac_bits", "e_zero", "group", "join_frac_bits",
             "mantissa_bits", "nan_bits", "block"}
_RULE_KEYS = {"zero_sign"}  # string-valued model choices that carry provenance like numbers (schema.Rule)
_WEAK = ("assumed", "unknown")


def _merge(base: dict, over: dict) -> dict:
    out = copy.deepcopy(base)
    for key, v in over.items():
        if isinstance(v, dict) and isinstance(out.get(key), dict) and not _is_num(out[key]):
            out[key] = _merge(out[key], v)
        else:
            out[key] = copy.deepcopy(v)
    return out


def _is_num(d: Any) -> bool:
    return isinstance(d, dict) and "value" in d and "provenance" in d


def _expand_nums(node: Any, prov: str, src: str, key: str | None = None) -> Any:
    """Turn bare numbers under numeric keys into {value, provenance, source}."""
    if isinstance(node, dict):
        if _is_num(node):
            return {"source": src, **node} if "source" not in node else node
        return {k: _expand_nums(v, prov, src, k) for k, v in node.items()}
    if isinstance(node, list):
        return [_expand_nums(v, prov, src, key) for v in node]
    if key in _NUM_KEYS and isinstance(node, (int, float)) and not isinstance(node, bool):
        return {"value": node, "provenance": prov, "source": src}
    if key in _RULE_KEYS and isinstance(node, str):
        return {"value": node, "provenance": prov, "source": src}
    return node


def _weaken(node: Any, prov: str, parent: str) -> Any:
    if _is_num(node):
        return {**node, "provenance": prov, "source": f"{prov}: same as {parent} ({node['source']})"}
    if isinstance(node, dict):
        return {k: _weaken(v, prov, parent) for k, v in node.items()}
    if isinstance(node, list):
        return [_weaken(v, prov, parent) for v in node]
    return node


def _resolve(raw: dict, where: str, seen: tuple[str, ...] = ()) -> dict:
    """Resolve extends/inherits and expand numbers; returns a dict ready for HWSpec validation."""
    for req in ("name", "provenance", "source"):
        if req not in raw:
            raise SpecError(f"{where}: missing top-level field {req!r}{looks_like(raw, set(HWSpec.model_fields))}")
        if not isinstance(raw[req], str):
            raise SpecError(f"{where}: field {req}: must be a string, got {type(raw[req]).__name__}")
    kinds_raw = raw.get("kinds", {})
    if not isinstance(kinds_raw, dict):
        raise SpecError(f"{where}: field kinds: must be a table of kinds, got {type(kinds_raw).__name__}")
    for name, kd in kinds_raw.items():
        if not isinstance(kd, dict):
            raise SpecError(f"{where}: field kinds.{name}: must be a table, got {type(kd).__name__}")
        if "extends" in kd and not isinstance(kd["extends"], str):
            raise SpecError(f"{where}: field kinds.{name}.extends: must be a kind name (a string)")
        for key in ("provenance", "source"):
            if key in kd and not isinstance(kd[key], str):
                raise SpecError(f"{where}: field kinds.{name}.{key}: must be a string")
    merged_raw: dict[str, dict] = {}
    pending = dict(kinds_raw)
    while pending:  # resolve 'extends' on the raw tables, in dependency order
        progressed = False
        for name, kd in list(pending.items()):
            base = kd.get("extends")
            if base is not None and base not in merged_raw:
                if base not in kinds_raw:
                    raise SpecError(f"{where}: kind {name!r} extends unknown kind {base!r}")
                continue
            body = {k: v for k, v in kd.items() if k != "extends"}
            merged_raw[name] = _merge(merged_raw[base], body) if base else body
            del pending[name]
            progressed = True
        if not progressed:
            raise SpecError(f"{where}: 'extends' cycle among kinds {sorted(pending)}")
    kinds: dict[str, dict] = {}
    for name, kd in merged_raw.items():
        prov, src = kd.get("provenance", raw["provenance"]), kd.get("source", raw["source"])
        kinds[name] = _expand_nums({**kd, "name": name, "provenance": prov, "source": src}, prov, src)
    out = {k: v for k, v in raw.items() if k != "kinds"}
    parent = raw.get("inherits")
    if parent is not None:
        if not isinstance(parent, str):
            raise SpecError(f"{where}: field inherits: must be the name of a built-in spec (a string)")
        if parent in seen:
            raise SpecError(f"{where}: 'inherits' cycle through {parent!r}")
        praw = _resolve(_read_raw(_builtin_path(parent, where)), parent, seen + (raw["name"],))
        pk = praw["kinds"]
        if raw["provenance"] in _WEAK:  # the kinds' own provenance too: `hw show` prints it per kind
            prov = raw["provenance"]
            pk = {n: {**_weaken(kd, prov, parent), "provenance": prov,
                      "source": f"{prov}: same as {parent} ({kd['source']})"} for n, kd in pk.items()}
        kinds = {**pk, **{n: _merge(pk.get(n, {}), kd) for n, kd in kinds.items()}}
        out.setdefault("native", praw.get("native", []))
    out["kinds"] = kinds
    return out


def _read_raw(path: Path) -> dict:
    """The table of an hwspec file (TOML, or JSON by its suffix), read as the formats' spec files are."""
    return read_spec_dict(path, "hwspec")


def _builtin_path(name: str, where: str) -> Path:
    """The file of built-in spec ``name``: only a name from ``specs/``, never a path (no '/', no '..')."""
    if name not in HW.builtin_names:
        raise SpecError(f"{where}: inherits unknown built-in spec {one_line(name, 80)!r}; built-ins: "
                        f"{', '.join(HW.builtin_names)}")
    return SPEC_DIR / f"{name}.toml"


def load_hw(path: str | Path) -> HWSpec:
    """Validate an hwspec TOML file (or its JSON form: ``.json``) and return the spec (not registered; see
    :func:`register_hw`). Reading and validation are the formats' (``fp4lab.formats.spec_io``): strict types,
    every error a sentence on one line naming the file."""
    path = Path(path)
    try:
        data = _resolve(_read_raw(path), str(path))
    except SpecError:
        raise
    except RecursionError:
        raise SpecError(f"{path}: nested too deeply") from None
    except (ArithmeticError, TypeError, AttributeError, LookupError, ValueError) as exc:  # a check that broke
        raise SpecError(f"{path}: invalid hwspec ({type(exc).__name__}: {one_line(str(exc))})") from None
    return validate_model(HWSpec, data, str(path))


HW: SpecRegistry[HWSpec] = SpecRegistry(HWSpec, SPEC_DIR, load_hw, kind="hw", plural="hw specs")


def register_hw(spec: HWSpec, *, overwrite: bool = False) -> HWSpec:
    """Add ``spec`` to the registry under its name; built-in names cannot be replaced, nor (without
    ``overwrite``) a different spec of the same name."""
    return HW.register(spec, overwrite=overwrite)


def list_hw() -> list[str]:
    """Names of all specs: built-ins first (sorted), then registered ones in the order they were registered."""
    return HW.names()


def get_hw(name: str | Path | HWSpec) -> HWSpec:
    """A spec by registry name or spec-file path (a spec object is returned as is)."""
    return HW.get(name)


def spec_to_dict(spec: HWSpec) -> dict:
    """The fully expanded spec as plain data (every number with provenance); loads back with the same model."""
    return spec.model_dump(mode="json", exclude_none=True)
