"""The snapshot dataset manifest (``manifest.json``), read by rank 0 first.

Keys and the directory layout are specified in docs/data.md, "Snapshot datasets";
``targets`` (optional) names the float node target every shard stores per snapshot
(``signal``, ``log1p_next_y``, ``next_degree``, ``next_log_degree``; absent = none).
:func:`load_manifest` turns any fault into one :class:`~hpcdgnn.errors.DataError` line.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from hpcdgnn.atomic import atomic_write
from hpcdgnn.errors import DataError, not_a_directory, short_repr

__all__ = [
    "Manifest",
    "ShardInfo",
    "empty_snapshots",
    "empty_snapshots_note",
    "load_manifest",
    "manifest_sizes",
    "save_manifest",
    "MANIFEST_NAME",
    "FORMAT_NAME",
    "FORMAT_VERSION",
    "INDEX_DTYPES",
]

MANIFEST_NAME = "manifest.json"
FORMAT_NAME = "hpcdgnn-snapshots"
FORMAT_VERSION = 1

#: The other on-disk kind (:mod:`hpcdgnn.data.events`), named here only to refuse it in one line.
EVENTS_FORMAT_NAME = "hpcdgnn-events"


@dataclass(frozen=True)
class ShardInfo:
    """One shard file: a contiguous range of snapshots ``[t_start, t_stop)``."""

    file: str
    t_start: int
    t_stop: int
    bytes: int
    sha256: str


@dataclass(frozen=True)
class Manifest:
    """Typed view of ``manifest.json`` (keys in docs/data.md)."""

    num_vertices: int
    num_snapshots: int
    num_features: int
    feature_names: list[str]
    directed: bool
    num_classes: int
    index_dtype: str
    smoothing: dict[str, int]
    snapshot_nnz: list[int]
    snapshot_edges: list[int]
    snapshot_active: list[int]
    snapshot_time: list[list[float]] | None
    shards: list[ShardInfo]
    source: dict[str, Any] = field(default_factory=dict)
    targets: str | None = None
    format: str = FORMAT_NAME
    version: int = FORMAT_VERSION

    def shard_of(self, t: int) -> ShardInfo:
        """Return the shard that holds snapshot ``t``."""
        for s in self.shards:
            if s.t_start <= t < s.t_stop:
                return s
        raise DataError(f"manifest: no shard holds snapshot {t} (T = {self.num_snapshots})")

    @property
    def smoothed(self) -> bool:
        """Whether the trained adjacency differs from the raw edges (S5 applied)."""
        return self.smoothing.get("edge_life", 1) > 1 or self.smoothing.get("mtransform_window", 1) > 1

    @property
    def has_targets(self) -> bool:
        """Whether every snapshot stores a float node target array (``targets``)."""
        return self.targets is not None

    def to_json(self) -> dict[str, Any]:
        """Return the manifest as a JSON-ready dict."""
        return asdict(self)


_REQUIRED = [f for f in Manifest.__dataclass_fields__ if f not in ("source", "targets")]
_SHARD_INT_KEYS = [k for k in ShardInfo.__dataclass_fields__ if k not in ("file", "sha256")]
INDEX_DTYPES = ("int32", "int64")
_SHA256_HEX = re.compile(r"[0-9a-f]{64}")


def manifest_sizes(manifest: Any) -> dict[str, Any]:
    """A manifest's scalar figures (either kind's: N, T, F, classes, whether it has targets, …) — what a model and
    its task head are built from, without the arrays (a checkpoint and an exported model keep them)."""
    names = [n for n in dir(manifest) if not n.startswith("_")]
    return {n: getattr(manifest, n) for n in names if isinstance(getattr(manifest, n, None), bool | int | float | str)}


def _is_int(v: Any, lo: int = 0) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= lo


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


_short = short_repr  # events.py imports it from here


def read_manifest_json(root: str | Path) -> tuple[Path, Any]:
    """``(path of root/manifest.json, its parsed JSON)``, for either on-disk kind.

    Raises:
        DataError: the directory or ``manifest.json`` is missing, unreadable or not JSON.
    """
    path = Path(root) / MANIFEST_NAME
    if not Path(root).is_dir():
        raise DataError(f"{root}: dataset directory {not_a_directory(root)}")
    try:
        return path, json.loads(path.read_text())
    except FileNotFoundError:
        raise DataError(f"{path}: missing; is {root} a dataset written by 'hpcdgnn prepare'?") from None
    except (OSError, ValueError) as e:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        raise DataError(f"{path}: cannot parse: {' '.join(str(e).split())}") from None


def key_set_problem(raw: dict[str, Any], required: Iterable[str], known: Iterable[str]) -> str | None:
    """``missing key(s) ...`` or ``unknown key(s) ...`` of a manifest object (None when its keys are sound)."""
    missing = [k for k in required if k not in raw]
    if missing:
        return ("missing key " if len(missing) == 1 else "missing keys ") + ", ".join(f"'{k}'" for k in missing)
    unknown = sorted(set(raw) - set(known))
    if unknown:
        return ("unknown key " if len(unknown) == 1 else "unknown keys ") + ", ".join(f"'{k}'" for k in unknown)
    return None


def shard_entry_problem(entry: Any, index: int, int_keys: Sequence[str]) -> str | None:
    """The first problem of ``shards[index]`` (None when sound), as ``'shards'[i]...: problem``.

    ``file`` must be a plain name inside ``shards/`` (a manifest never points outside its directory).
    """
    keys = ("file", *int_keys, "sha256")
    where = f"'shards'[{index}]"
    if not isinstance(entry, dict):
        return f"{where} must be an object with keys {', '.join(keys)}, got {_short(entry)}"
    missing = [k for k in keys if k not in entry]
    extra = sorted(set(entry) - set(keys))
    if missing:
        return f"{where}: missing key(s) " + ", ".join(f"'{k}'" for k in missing)
    if extra:
        return f"{where}: unknown key(s) " + ", ".join(f"'{k}'" for k in extra)
    f = entry["file"]
    if not isinstance(f, str) or not f or f in (".", "..") or "/" in f or "\\" in f or "\0" in f:
        return f"{where}: 'file' must be a plain file name inside shards/, got {_short(f)}"
    for key in int_keys:
        if not _is_int(entry[key]):
            return f"{where} ({f}): '{key}' must be an integer >= 0, got {_short(entry[key])}"
    if not isinstance(entry["sha256"], str) or not _SHA256_HEX.fullmatch(entry["sha256"]):
        return f"{where} ({f}): 'sha256' must be 64 lowercase hex digits, got {_short(entry['sha256'])}"
    return None


def _schema_problem(raw: dict[str, Any]) -> str | None:
    """The first problem of a manifest's keys and value types (None when sound): one line, never a TypeError later."""
    if "format" not in raw:
        return f"missing key 'format' (is this an {FORMAT_NAME} manifest?)"
    if raw["format"] != FORMAT_NAME:
        return f"'format' is {_short(raw['format'])}, expected {FORMAT_NAME!r}: not a dataset manifest"
    if "version" in raw and (raw["version"] != FORMAT_VERSION or isinstance(raw["version"], bool)):
        return f"'version' {_short(raw['version'])} unsupported (this build reads {FORMAT_VERSION})"
    problem = key_set_problem(raw, _REQUIRED, Manifest.__dataclass_fields__)
    if problem:
        return problem
    for key, lo in (("num_vertices", 1), ("num_snapshots", 1), ("num_features", 0), ("num_classes", 0)):
        if not _is_int(raw[key], lo):
            return f"'{key}' must be an integer >= {lo}, got {_short(raw[key])}"
    if raw["num_classes"] == 1:
        return "'num_classes' is 1; expected 0 (no labels) or C >= 2"
    n, t = raw["num_vertices"], raw["num_snapshots"]
    if not isinstance(raw["directed"], bool):
        return f"'directed' must be true or false, got {_short(raw['directed'])}"
    names = raw["feature_names"]
    if not isinstance(names, list) or not all(isinstance(x, str) for x in names):
        return f"'feature_names' must be a list of strings, got {_short(names)}"
    if raw["index_dtype"] not in INDEX_DTYPES:
        return f"'index_dtype' must be one of {', '.join(INDEX_DTYPES)}, got {_short(raw['index_dtype'])}"
    if raw["index_dtype"] == "int32" and n > 2**31:
        return f"'index_dtype' int32 cannot hold vertex ids of N = {n}"
    sm = raw["smoothing"]
    if not isinstance(sm, dict) or not all(_is_int(v, 1) for v in sm.values()):
        return f"'smoothing' must map edge_life/mtransform_window to integers >= 1, got {_short(sm)}"
    bad = sorted(set(sm) - {"edge_life", "mtransform_window"})
    if bad:
        return f"'smoothing' has unknown key(s) {', '.join(map(repr, bad))}"
    for key in ("snapshot_nnz", "snapshot_edges", "snapshot_active"):
        v = raw[key]
        if not isinstance(v, list) or not all(_is_int(x) for x in v):
            return f"'{key}' must be a list of integers >= 0, got {_short(v)}"
        if len(v) != t:
            return f"'{key}' has {len(v)} entries, expected T = {t}"
    if any(a > n for a in raw["snapshot_active"]):
        return f"'snapshot_active' has a count above N = {n}"
    times = raw["snapshot_time"]
    if times is not None:
        if not isinstance(times, list) or not all(
            isinstance(w, list) and len(w) == 2 and all(_is_number(x) for x in w) for w in times
        ):
            return f"'snapshot_time' must be null or a list of [start, stop] numbers, got {_short(times)}"
        if len(times) != t:
            return f"'snapshot_time' has {len(times)} entries, expected T = {t}"
    tg = raw.get("targets")
    if tg is not None and (not isinstance(tg, str) or not tg):
        return f"'targets' must be null or the name of the stored node targets, got {_short(tg)}"
    if "source" in raw and not isinstance(raw["source"], dict):
        return f"'source' must be an object, got {_short(raw['source'])}"
    shards = raw["shards"]
    if not isinstance(shards, list) or not shards:
        return f"'shards' must be a non-empty list, got {_short(shards)}"
    for i, s in enumerate(shards):
        problem = shard_entry_problem(s, i, _SHARD_INT_KEYS)
        if problem:
            return problem
    files = [s["file"] for s in shards]
    if len(set(files)) != len(files):
        return "'shards' names a file twice"
    return None


def load_manifest(root: str | Path) -> Manifest:
    """Read and check ``root/manifest.json`` (keys, types, counts, shards); raise :class:`DataError` naming it."""
    path, raw = read_manifest_json(root)
    if not isinstance(raw, dict):
        raise DataError(f"{path}: not an {FORMAT_NAME} manifest (expected a JSON object)")
    if raw.get("format") == EVENTS_FORMAT_NAME:
        raise DataError(
            f"{root} is an event-stream dataset (format {EVENTS_FORMAT_NAME}, prepare --kind events):"
            " only model.name: tgn reads it"
        )
    problem = _schema_problem(raw)
    if problem:
        raise DataError(f"{path}: {problem}")
    raw["shards"] = [ShardInfo(**s) for s in raw["shards"]]
    m = Manifest(**raw)
    T = m.num_snapshots
    covered = 0
    for s in m.shards:
        if s.t_start != covered or s.t_stop <= s.t_start:
            raise DataError(f"{path}: shard {s.file} covers [{s.t_start}, {s.t_stop}), expected to start at {covered}")
        covered = s.t_stop
    if covered != T:
        raise DataError(f"{path}: shards cover {covered} snapshots, expected T = {T}")
    if len(m.feature_names) != m.num_features:
        raise DataError(f"{path}: 'feature_names' has {len(m.feature_names)} names, expected F = {m.num_features}")
    return m


def empty_snapshots(snapshot_edges: Sequence[int]) -> list[int]:
    """The snapshots without edges."""
    return [t for t, e in enumerate(snapshot_edges) if e == 0]


def empty_snapshots_note(snapshot_edges: Sequence[int]) -> str | None:
    """A note naming the snapshots without edges (a time split among them has no examples), or None."""
    empty = empty_snapshots(snapshot_edges)
    if not empty:
        return None
    runs, start = [], empty[0]
    for a, b in zip(empty, [*empty[1:], None], strict=True):
        if b != a + 1:
            runs.append(f"{start}" if start == a else f"{start}-{a}")
            start = b
    shown = ", ".join(runs[:6]) + (", ..." if len(runs) > 6 else "")
    return (f"{len(empty)} of {len(snapshot_edges)} snapshots have no edges (t = {shown}); a split that falls "
            "among them has no examples: cut by events instead (--events-per-snapshot) or use fewer, wider windows")


def save_manifest(root: str | Path, manifest: Manifest) -> Path:
    """Write ``root/manifest.json`` atomically and durably (:func:`write_manifest_json`)."""
    return write_manifest_json(root, manifest.to_json())


def write_manifest_json(root: str | Path, data: dict[str, Any]) -> Path:
    """Write ``data`` as ``root/manifest.json`` through :func:`~hpcdgnn.atomic.atomic_write`, for either kind.

    Synced before its rename and its directory after: the manifest is what makes a directory a dataset, and one
    renamed into place before its data reached the disk reads as empty after a node's crash. A failed write (a
    full disk) leaves no temporary behind and the old manifest as it was.

    Args:
        root: the dataset's directory (it exists).
        data: the manifest as a JSON-ready dict (:meth:`Manifest.to_json`, or an event stream's).

    Raises:
        OSError: the write failed (the caller names the dataset in its one line).
    """
    path = Path(root) / MANIFEST_NAME
    text = json.dumps(data, indent=1) + "\n"  # a value JSON cannot hold fails here, before any file is made
    with atomic_write(path) as f:
        f.write(text)
    return path
