"""Golden vectors for every built-in format, rounding mode and edge case, and a library-agreement table.

``write_vectors(out_dir)`` writes, per built-in format, ``<format>.npz`` (``numpy.savez_compressed``) with keys

* ``<case>__input``                     float32 input bits as uint32, shape ``CASE_SHAPE`` (16 x 64, blocks along
  the last axis; 2-D tile formats use 16 x 16 tiles);
* ``<case>__<rounding>__codes``         uint8 element codes (unpacked, one per input element);
* ``<case>__<rounding>__scale_codes``   stored block-scale codes (uint8, or uint32 bits for FP32 scales);
* ``<case>__<rounding>__tensor_scale``  float32 bits as uint32 ``[1]`` (``[0]`` if the format has none);
* ``<case>__<rounding>__dequantized``   ``fp4lab.dequantize`` output, float32 bits as uint32;

for ``rounding`` in ``ROUNDINGS`` (``sr`` uses ``seed = SR_SEED``; see docs/numerics.md for the random bits), plus
``index.json`` (formats with their full specs and their file's SHA-256, cases with descriptions, conventions) and
``library_agreement.json`` / ``.md`` (``agreement_table``). Each case's input is a named kind of
``fp4lab.testing.inputs`` (``CASES``) built
from a fixed seed, so the files are reproducible; stored float32 arrays are their ``fp4lab.testing.bits``
patterns (payload-exact).

The agreement table compares fp4lab's codes and scale codes bit for bit with external libraries *live* where they
are installed (ml_dtypes casts, torchao ``to_mx`` and ``nvfp4_quantize``), case by case; TransformerEngine and
microxcaling are not installed here, so their rows restate those libraries' semantics as docs/numerics.md ("What
other libraries do") records them from their source, and are marked ``documented``, not measured.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Callable

import numpy as np

import fp4lab
from fp4lab.errors import OutputError
from fp4lab.formats.grids import ROUNDING_MODES
from fp4lab.formats.registry import BUILTIN_NAMES
from fp4lab.interop.common import quiet_import_logs
from fp4lab.testing.bits import bit_patterns, mismatches
from fp4lab.testing.inputs import make_inputs

CASE_SHAPE: tuple[int, int] = (16, 64)
ROUNDINGS: tuple[str, ...] = ROUNDING_MODES  # every mode fp4lab.quantize accepts
SR_SEED = 1234
F32 = np.float32


# case -> (input kind of fp4lab.testing.inputs, description stored in index.json); tests/test_testing_inputs.py pins
# the bits of every case's input.
CASES: dict[str, tuple[str, str]] = {
    "random": ("gaussian_rows", "N(0,1) times 2^k per row, k in [-10, 10]"),
    "ties": ("grid_ties", ("grid midpoints and levels times 2^k, block amax at the grid maximum times 2^k (exact "
                           "ties for FP32 and power-of-two scales)")),
    "pow2": ("pow2_boundaries", ("values at and one ulp around powers of two and at 0.75/1.5/1.75 x 2^k "
                                 "(scale-rule boundaries)")),
    "zeros": ("zero_blocks", "+0, -0, all-zero blocks and sparse blocks"),
    "subnormal": ("subnormal_blocks", "float32 subnormal blocks beside normal blocks"),
    "huge": ("huge_values", "magnitudes up to float32 max"),
    "tiny": ("tiny_tensor", ("a tensor whose amax lies below about 2^-117 (two-level tensor-scale floor), "
                             "blocks N(0,1) x 2^k, k in [-150, -118], many float32-subnormal")),
    "nan": ("nan_blocks", "NaN elements in some blocks"),
    "inf": ("inf_blocks", "+Inf and -Inf elements in some blocks"),
}


def _cases(fmt: Any) -> dict[str, tuple[str, np.ndarray]]:
    """{case: (description, float32 input of shape ``CASE_SHAPE``)} for one format, in ``CASES`` order."""
    return {case: (text, make_inputs(kind, CASE_SHAPE, fmt=fmt)) for case, (kind, text) in CASES.items()}


def _bits(a: Any) -> np.ndarray:
    """float arrays as their float32 bit patterns (``bit_patterns``: payload-exact), integer codes as they are."""
    a = np.asarray(a)
    return bit_patterns(a.astype(F32)) if a.dtype.kind == "f" else a


def vectors_for(name: Any) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """(npz arrays, case descriptions) for one format (name, spec path or QuantFormat)."""
    fmt = fp4lab.get_format(name)
    arrays: dict[str, np.ndarray] = {}
    desc: dict[str, str] = {}
    for case, (text, x) in _cases(fmt).items():
        x = np.asarray(x, F32)
        desc[case] = text
        arrays[f"{case}__input"] = _bits(x)
        for mode in ROUNDINGS:
            qt = fp4lab.quantize(x, fmt, rounding=mode, seed=SR_SEED)
            key = f"{case}__{mode}__"
            arrays[key + "codes"] = np.asarray(qt.codes, np.uint8)
            arrays[key + "scale_codes"] = np.asarray(qt.scale_codes)
            ts = [] if qt.tensor_scale is None else [qt.tensor_scale]
            arrays[key + "tensor_scale"] = _bits(np.asarray(ts, F32))
            arrays[key + "dequantized"] = _bits(fp4lab.dequantize(qt))
    return arrays, desc


# ---- external libraries -------------------------------------------------------------------------------------------
def _ml_dtypes_cast(dtype_name: str) -> Callable[[np.ndarray], tuple[np.ndarray, None]] | None:
    try:
        import ml_dtypes
    except ImportError:
        return None
    dt = getattr(ml_dtypes, dtype_name)
    if dtype_name == "int4":
        return lambda x: (x.astype(dt).astype(np.int8).view(np.uint8) & np.uint8(0xF), None)
    return lambda x: (x.astype(dt).view(np.uint8), None)


def _torchao_mx(mode: str) -> Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]] | None:
    try:
        import torch

        with quiet_import_logs():
            from torchao.prototype.mx_formats.config import ScaleCalculationMode
            from torchao.prototype.mx_formats.mx_tensor import to_mx
    except ImportError:
        return None
    from fp4lab.emulator.pack import unpack_nibbles

    def run(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        s, d = to_mx(torch.from_numpy(x), torch.float4_e2m1fn_x2, 32, getattr(ScaleCalculationMode, mode))
        return unpack_nibbles(d.view(torch.uint8).numpy()), s.view(torch.uint8).numpy()
    return run


def _torchao_nvfp4() -> Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]] | None:
    try:
        import torch

        with quiet_import_logs():
            from torchao.prototype.mx_formats.nvfp4_tensor import nvfp4_quantize, per_tensor_amax_to_scale
    except ImportError:
        return None
    from fp4lab.emulator.pack import unpack_nibbles

    def run(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        t = torch.from_numpy(x)
        s, d = nvfp4_quantize(t, 16, per_tensor_amax_to_scale(t.abs().max()))
        return unpack_nibbles(d.view(torch.uint8).numpy()), s.view(torch.uint8).numpy()
    return run


# (format, rounding, library label, runner factory, what to expect)
LIVE_CHECKS: tuple[tuple[str, str, str, Callable[[], Any], str], ...] = (
    ("e2m1", "rtne", "ml_dtypes float4_e2m1fn cast", lambda: _ml_dtypes_cast("float4_e2m1fn"),
     "RTNE, saturating, NaN -> -0 (fp4lab's e2m1 uses nan_element = neg_zero to match)"),
    ("int4", "rtz", "ml_dtypes int4 cast", lambda: _ml_dtypes_cast("int4"),
     "ml_dtypes truncates toward zero like rtz but does not saturate out-of-range values, and may produce -8"),
    ("mxfp4", "rtne", "torchao 0.18 to_mx FLOOR", lambda: _torchao_mx("FLOOR"),
     "torchao writes an arbitrary finite code for NaN and has its own Inf-block policy"),
    ("mxfp4-ceil", "rtne", "torchao 0.18 to_mx CEIL", lambda: _torchao_mx("CEIL"), "as FLOOR"),
    ("mxfp4-even", "rtne", "torchao 0.18 to_mx EVEN", lambda: _torchao_mx("EVEN"), "as FLOOR"),
    ("mxfp4-rceil", "rtne", "torchao 0.18 to_mx RCEIL", lambda: _torchao_mx("RCEIL"),
     "as FLOOR; torchao 0.18's eager RCEIL uses float32 log2 (off by one just above 6*2^k, docs/numerics.md D7)"),
    ("nvfp4-torchao", "rtne", "torchao 0.18 nvfp4_quantize", _torchao_nvfp4,
     "specials differ (NaN/Inf blocks)"),
    ("nvfp4", "rtne", "torchao 0.18 nvfp4_quantize", _torchao_nvfp4,
     "expected to differ where block scales fall below 2^-6: torchao clamps, nvfp4 keeps subnormal/zero scales"),
)

DOCUMENTED: tuple[tuple[str, str, str], ...] = (
    ("nvfp4-te", "TransformerEngine custom_recipes/reference_nvfp4.py",
     "built to follow TE's encode-scale arithmetic and +0 for exact zeros (format spec `matches`); not measured here"),
    ("nvfp4", "TransformerEngine custom_recipes/reference_nvfp4.py",
     "same subnormal/zero E4M3 block scales as TE, but TE multiplies by g_enc = 448*6/amax where fp4lab divides by "
     "the tensor scale: last-bit scale differences are possible; not measured"),
    ("mxfp4", "microxcaling (round='nearest', its default)",
     "FLOOR via float32 log2 (differs when amax is just below 2^k) and ties away from zero: agrees only with "
     "rounding='rtna' on blocks away from powers of two (docs/numerics.md L5); not measured"),
    ("mxfp4", "microxcaling (round='even')", "RTNE elements; same float32-log2 FLOOR caveat; not measured"),
    ("mxfp4-rceil", "TransformerEngine MXFP8-style RCEIL (cvt.rp.satfinite.ue8m0)",
     "same rule on finite blocks; TE saturates an Inf amax to 0xFE; not measured"),
)


def agreement_table(progress: Callable[[str], None] | None = None,
                    formats: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """Rows ``{format, rounding, library, status, note, cases}``: ``status`` is ``agrees`` (bit for bit on every case),
    ``partial``, ``differs``, ``not installed`` or ``documented``; ``cases`` maps case -> ``"match"`` or the number
    of mismatching element codes / scale codes, or ``"error: ..."``. ``formats`` (``{name: QuantFormat}``, as
    ``write_vectors`` resolves them) keeps the rows of the built-ins among them (a spec file that reuses a
    built-in's name but not its numerics gets none; its description may differ); None: every row."""
    def numerics(fmt: Any) -> dict[str, Any]:  # what decides the bits: not the prose fields
        return fmt.model_dump(exclude={"description", "matches", "references"})

    def wanted(name: str) -> bool:
        return formats is None or (name in formats and numerics(formats[name]) == numerics(fp4lab.get_format(name)))

    rows: list[dict[str, Any]] = []
    for name, mode, label, factory, note in LIVE_CHECKS:
        if not wanted(name):
            continue
        runner = factory()
        if runner is None:
            rows.append({"format": name, "rounding": mode, "library": label, "status": "not installed",
                         "note": note, "cases": {}})
            continue
        fmt = fp4lab.get_format(name)
        cases: dict[str, Any] = {}
        for case, (_, x) in _cases(fmt).items():
            x = np.asarray(x, F32)
            qt = fp4lab.quantize(x, fmt, rounding=mode)
            try:
                codes, scodes = runner(x)
            except Exception as exc:  # a library rejecting an input is a finding, not a crash
                cases[case] = f"error: {type(exc).__name__}"
                continue
            bad = mismatches(codes, np.asarray(qt.codes))
            bad_s = 0 if scodes is None else mismatches(scodes.reshape(np.shape(qt.scale_codes)), qt.scale_codes)
            cases[case] = "match" if bad == bad_s == 0 else f"{bad} codes, {bad_s} scales differ"
        n_ok = sum(v == "match" for v in cases.values())
        status = "agrees" if n_ok == len(cases) else ("partial" if n_ok else "differs")
        rows.append({"format": name, "rounding": mode, "library": label, "status": status, "note": note,
                     "cases": cases})
        if progress is not None:
            progress(f"{name} vs {label}")
    for name, label, note in DOCUMENTED:
        if wanted(name):
            rows.append({"format": name, "rounding": "rtne", "library": label, "status": "documented",
                         "note": note, "cases": {}})
    return rows


def agreement_markdown(rows: list[dict[str, Any]]) -> str:
    """The agreement table as Markdown."""
    lines = ["| fp4lab format | rounding | library | status | per case (measured) | note |",
             "|---|---|---|---|---|---|"]
    for r in rows:
        detail = ", ".join(f"{c}: {v}" for c, v in r["cases"].items()) or "—"
        lines.append(f"| {r['format']} | {r['rounding']} | {r['library']} | {r['status']} | {detail} | {r['note']} |")
    return "\n".join(lines) + "\n"


STAGING_PREFIX = ".conformance-"  # staging folders inside the output folder: ``.conformance-XXXX.tmp``
STAGING_MARK = ".fp4lab-conformance-staging"  # written first into every staging folder: only those are removed
OWNED = ("index.json", "library_agreement.json", "library_agreement.md")


def _is_staging(p: Path) -> bool:
    """True for a staging folder of a conformance run: a real folder named ``.conformance-*.tmp`` holding the mark
    and nothing but files a run writes (``*.npz``, ``OWNED``), so that a user's folder of that name is never
    taken for one."""
    if not (p.name.startswith(STAGING_PREFIX) and p.name.endswith(".tmp")) or p.is_symlink() or not p.is_dir():
        return False
    names = {c.name for c in p.iterdir()}
    return STAGING_MARK in names and all(n == STAGING_MARK or n in OWNED or n.endswith(".npz") for n in names)


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _resolve_formats(formats: tuple[Any, ...]) -> dict[str, Any]:
    """``{file stem: QuantFormat}``: output names come from the formats' own ``name`` (a spec path never names a
    file), checked to be plain file names; two different formats with one name are refused."""
    out: dict[str, Any] = {}
    for f in formats:
        fmt = fp4lab.get_format(f)
        name = fmt.name
        if Path(name).name != name or name in (".", "..") or not name[0].isalnum():
            raise OutputError(f"conformance: format name {name!r} cannot name a file")
        if name in out and out[name] != fmt:
            raise OutputError(f"conformance: two different formats are named '{name}'; each writes {name}.npz")
        out[name] = fmt
    return out


def _check_out_dir(out_dir: str | os.PathLike, overwrite: bool) -> Path:
    """``out_dir`` as a Path if conformance may write there, else ``OutputError``."""
    if not os.fspath(out_dir).strip():
        raise OutputError("conformance: the output folder is empty; name one with --out DIR")
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise OutputError(f"conformance: {out} exists and is not a folder")
    if out.is_dir() and not overwrite:
        leftovers = [p for p in out.iterdir() if not _is_staging(p)]
        if leftovers:
            raise OutputError(f"conformance: output folder {out} exists and is not empty; pass --overwrite to "
                              "replace the conformance files in it (other files are kept)")
    return out


def _commit(stage: Path, out: Path, files: list[str]) -> None:
    """Move the staged files into ``out``: first the old index goes (a folder without index.json is incomplete),
    then the outputs an earlier run listed that this run does not write (only a listed ``.npz`` whose SHA-256 is
    the one that run recorded: a hand-written index deletes nothing), then the new files, index.json last."""
    index = out / "index.json"
    stale = set(OWNED)
    if index.is_file():
        try:
            listed = json.loads(index.read_text(encoding="utf-8")).get("formats", {})
            stale |= {v["file"] for v in listed.values() if isinstance(v, dict) and isinstance(v.get("file"), str)
                      and Path(v["file"]).name == v["file"] and v["file"].endswith(".npz")
                      and (out / v["file"]).is_file() and not (out / v["file"]).is_symlink()
                      and v.get("sha256") == _sha256(out / v["file"])}
        except (ValueError, OSError, AttributeError):
            pass
    index.unlink(missing_ok=True)
    for name in sorted(stale - set(files)):
        (out / name).unlink(missing_ok=True)
    for name in files:
        if name != "index.json":
            os.replace(stage / name, out / name)
    os.replace(stage / "index.json", index)


def write_vectors(out_dir: str | Path, formats: tuple[Any, ...] = BUILTIN_NAMES,
                  progress: Callable[[str], None] | None = None, *, overwrite: bool = False) -> dict[str, Any]:
    """Write the golden vectors, ``index.json`` and the agreement table to ``out_dir``; returns the index.

    Files go only into ``out_dir``, named after the formats' ``name``s. A folder that exists and holds anything
    is refused (``OutputError``) unless ``overwrite``. Everything is written into a staging folder inside
    ``out_dir`` first and moved into place at the end (``index.json`` last), so an interrupted run leaves the old
    files; stale staging folders of killed runs are removed (only folders that are certainly staging folders:
    ``_is_staging``)."""
    out = _check_out_dir(out_dir, overwrite)
    fmts = _resolve_formats(tuple(formats))
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OutputError(f"conformance: cannot create the output folder {out}: {exc.strerror or exc}") from None
    for old in out.glob(f"{STAGING_PREFIX}*.tmp"):
        if _is_staging(old):
            shutil.rmtree(old, ignore_errors=True)
    stage = Path(tempfile.mkdtemp(prefix=STAGING_PREFIX, suffix=".tmp", dir=out))
    (stage / STAGING_MARK).write_text("a staging folder of fp4lab conformance; safe to delete\n")
    try:
        index: dict[str, Any] = {
            "schema": "fp4lab.conformance/1", "fp4lab_version": fp4lab.__version__, "case_shape": list(CASE_SHAPE),
            "axis": -1, "roundings": list(ROUNDINGS), "sr_seed": SR_SEED,
            "conventions": "float32 arrays are stored as their uint32 bit patterns; codes unpacked (one per "
                           "element); key layout <case>__input and "
                           "<case>__<rounding>__{codes,scale_codes,tensor_scale,dequantized}",
            "formats": {}, "cases": {},
        }
        files: list[str] = []
        for name, fmt in fmts.items():
            arrays, desc = vectors_for(fmt)
            np.savez_compressed(stage / f"{name}.npz", **arrays)
            files.append(f"{name}.npz")
            index["formats"][name] = {"file": f"{name}.npz", "sha256": _sha256(stage / f"{name}.npz"),
                                      "spec": fmt.model_dump(mode="json")}
            index["cases"] = desc
            if progress is not None:
                progress(name)
        rows = agreement_table(progress, fmts)
        (stage / "library_agreement.json").write_text(json.dumps(rows, indent=1))
        (stage / "library_agreement.md").write_text(agreement_markdown(rows))
        (stage / "index.json").write_text(json.dumps(index, indent=1))
        _commit(stage, out, files + list(OWNED))
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    return index
