"""Packed results of a study slice: what a slice's runs produced, in two small files, so that a machine that is
gone after the slice (and its run folders with it) hands back everything the summary needs.

``pack_slice(runs, dest, info)`` writes, into a new folder ``dest`` (an existing pack is never overwritten):

* ``runs.jsonl``: one JSON object per run of the slice that has a ``config.json``: ``label``, ``size``,
  ``recipe`` (the run's label), ``seed``, ``repeat``, ``status`` (done, diverged, partial, failed), ``config``,
  ``identity`` (with ``code_version`` and ``corpus_fingerprint``), ``params``, ``corpus``, ``done`` (done.json or
  null), ``rows`` (every ``metrics.csv`` row) and ``alpha`` (the last diagnostic step's ``alpha.csv`` rows);
* ``slice.json``: ``info`` (the command, times, device) with each run's status.

A pack kept for good may be gzip-compressed (``runs.jsonl.gz``, ``slice.json.gz``: ``gzip -n``; the study's
packs in docs/results are). ``load_packs(root)`` reads every ``runs.jsonl`` and ``runs.jsonl.gz`` under
``root``, and ``slice_device(runs_file)`` the GPU that the ``slice.json`` beside one names; ``finished(records)``
gives the finished runs among records, refusing a run finished twice; ``done_runs(records, runs)`` gives the
finished runs of a plan found there, refusing besides packs of another code version and packs whose settings
differ from the plan (a rerun never replaces a finished run silently).
"""

from __future__ import annotations

import gzip
import json
import zlib
from pathlib import Path
from typing import Any, Callable, Iterable

from fp4lab.errors import InputError, OutputError
from fp4lab.study.config import RUNTIME_FIELDS
from fp4lab.study.logs import finite_json, last_step_rows, read_csv, write_text
from fp4lab.study.runfolder import code_version
from fp4lab.study.train import run_status

RUNS = "runs.jsonl"
RUNS_GZ = RUNS + ".gz"
SLICE = "slice.json"
MAX_PACK_BYTES = 1 << 28  # a compressed pack unpacks to at most this (a slice's is about 0.3 MB)
KEYS = ("label", "size", "recipe", "seed", "repeat", "status", "config", "identity", "rows")


def _json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, RecursionError, OSError) as exc:
        raise InputError(f"pack: {path} is not readable JSON ({str(exc).splitlines()[0][:100]})") from None


def _pack_text(path: Path) -> str:
    """The text of a pack file, plain or gzip-compressed (at most ``MAX_PACK_BYTES`` unpacked)."""
    try:
        if path.name.endswith(".gz"):
            with gzip.open(path) as f:
                data = f.read(MAX_PACK_BYTES + 1)
            if len(data) > MAX_PACK_BYTES:
                raise InputError(f"pack: {path} unpacks to more than {MAX_PACK_BYTES >> 20} MiB; not a pack")
        else:
            data = path.read_bytes()
        return data.decode("utf-8")
    except (OSError, EOFError, zlib.error, UnicodeDecodeError) as exc:
        raise InputError(f"pack: cannot read {path} ({type(exc).__name__})") from None


def slice_device(runs_file: str) -> str:
    """The ``device`` that the ``slice.json`` (or ``slice.json.gz``) beside a pack's runs file names; "" if there
    is none, or it names none."""
    folder = Path(runs_file).parent
    for path in (folder / SLICE, folder / (SLICE + ".gz")):
        if path.is_file():
            text = _pack_text(path)
            try:
                info = json.loads(text)
            except (ValueError, RecursionError):
                raise InputError(f"pack: {path} is not readable JSON") from None
            return str(info.get("device") or "") if isinstance(info, dict) else ""
    return ""


def record(run: Any, status: str) -> dict[str, Any] | None:
    """The packed record of a planned run (``driver.Run``), or None if it never started."""
    folder = Path(run.cfg.out)
    if not (folder / "config.json").is_file():
        return None
    meta = _json(folder / "config.json")
    done = _json(folder / "done.json") if (folder / "done.json").is_file() else None
    return {"label": run.label, "size": run.size, "recipe": run.recipe, "seed": run.seed, "repeat": run.repeat,
            "status": status, "config": meta.get("config"), "identity": meta.get("identity"),
            "params": meta.get("params"), "corpus": meta.get("corpus"), "done": done,
            "rows": read_csv(folder / "metrics.csv", drop_incomplete=True),
            "alpha": last_step_rows(read_csv(folder / "alpha.csv", drop_incomplete=True))}


def pack_slice(runs: Iterable[tuple[Any, str]], dest: str | Path, info: dict[str, Any]) -> list[Path]:
    """Write ``RUNS`` and ``SLICE`` for ``(run, status)`` pairs into the new folder ``dest``; returns the paths."""
    out = Path(dest)
    for name in (RUNS, SLICE):
        if (out / name).exists() or (out / name).is_symlink():
            raise OutputError(f"pack: {out / name} exists; a pack is written once (give a new folder)")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OutputError(f"pack: cannot create {out}: {exc.strerror}") from None
    records, statuses = [], {}
    for run, status in runs:
        statuses[run.label] = status
        rec = record(run, status)
        if rec is not None:
            records.append(rec)
    text = "".join(json.dumps(finite_json(r), separators=(",", ":"), allow_nan=False) + "\n" for r in records)
    paths = [write_text(out / RUNS, text),
             write_text(out / SLICE, json.dumps({**info, "code_version": code_version(), "runs": statuses},
                                                indent=1) + "\n")]
    return paths


def load_packs(root: str | Path) -> list[tuple[str, dict[str, Any]]]:
    """(``<file>:<line>``, record) of every packed run under ``root`` (a folder, or one ``runs.jsonl`` or
    ``runs.jsonl.gz``)."""
    base = Path(root)
    files = [base] if base.is_file() else sorted([*base.rglob(RUNS), *base.rglob(RUNS_GZ)]) if base.is_dir() else []
    if not base.exists():
        raise InputError(f"pack: {base} does not exist")
    out = []
    for path in files:
        for n, line in enumerate(_pack_text(path).splitlines(), 1):
            where = f"{path}:{n}"
            try:
                rec = json.loads(line)
            except (ValueError, RecursionError):
                raise InputError(f"pack: {where} is not a JSON record") from None
            if not isinstance(rec, dict) or any(k not in rec for k in KEYS) or not isinstance(rec["identity"], dict) \
                    or not isinstance(rec["config"], dict) or not isinstance(rec["rows"], list):
                raise InputError(f"pack: {where} is not a packed run (needs {', '.join(KEYS)})")
            out.append((where, rec))
    return out


def version_of(rec: dict[str, Any]) -> str:
    """The code version a record's run was trained with ("unknown" for runs older than the field)."""
    return str(rec["identity"].get("code_version", "unknown"))


def finished(records: list[tuple[str, dict[str, Any]]]) -> dict[str, tuple[str, dict[str, Any]]]:
    """{label: (where, record)} of the finished (``done``) records; InputError for a run finished in two records
    (a rerun never replaces a finished run silently)."""
    found: dict[str, tuple[str, dict[str, Any]]] = {}
    for where, rec in records:
        if rec["status"] != "done":
            continue
        if rec["label"] in found:
            raise InputError(f"pack: {rec['label']} is finished in both {found[rec['label']][0]} and {where}; "
                             "remove one")
        found[rec["label"]] = (where, rec)
    return found


def done_runs(records: list[tuple[str, dict[str, Any]]], runs: list[Any],
              fingerprint: Callable[[Any], str] | None = None) -> dict[str, dict[str, Any]]:
    """{label: record} of the plan's ``runs`` that packs hold as done; InputError for a finished run packed twice,
    a pack of another code version than this one, a packed run whose settings differ from the plan's, or (with
    ``fingerprint``: a run's configuration -> the fingerprint of its corpus here) one trained on another corpus."""
    planned = {r.label: r for r in runs}
    here = code_version()
    found = finished(records)
    for where, rec in found.values():
        if version_of(rec) != here:
            raise InputError(f"pack: {where} holds {rec['label']} of code version {version_of(rec)}; this code is "
                             f"{here}: one study, one code version (start a new results folder)")
        run = planned.get(rec["label"])
        if run is None:
            continue
        want = {k: v for k, v in json.loads(json.dumps(run.cfg.to_dict())).items() if k not in RUNTIME_FIELDS}
        for key, value in want.items():
            if rec["config"].get(key) != value:
                raise InputError(f"pack: {where} holds {rec['label']} with {key} = {rec['config'].get(key)!r}, "
                                 f"the plan has {value!r}")
        if fingerprint is not None and rec["identity"].get("corpus_fingerprint") != fingerprint(run.cfg):
            raise InputError(f"pack: {where} holds {rec['label']} trained on corpus "
                             f"{rec['identity'].get('corpus_fingerprint')}; here it is {fingerprint(run.cfg)}")
    return {label: rec for label, (_, rec) in found.items() if label in planned
            and run_status(planned[label].cfg.out) == "missing"}
