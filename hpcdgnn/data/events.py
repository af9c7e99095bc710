"""Event-stream datasets (``prepare --kind events``): time-sorted interactions in HDF5 shards.

The on-disk kind for continuous-time memory-based TGNNs (SPEC M1; DistTGL §2.1): every
input event is kept, in time order, with its edge features. Layout, manifest keys, the
stable time sort and the chronological split (cuts moved so equal timestamps never
straddle two splits) are specified in docs/data.md, "Event-stream datasets"::

    DIR/manifest.json, DIR/vertices.h5, DIR/shards/events-00000.h5 ...
    shard: src, dst int32|int64 (n,); t float64 (n,); efeat float32 (n, D) when D > 0
    DIR/eval_negatives.h5 (optional): val/offsets, val/dst, test/offsets, test/dst -- each evaluation event's
        fixed negative destinations (the Temporal Graph Benchmark's), event i's in dst[offsets[i]:offsets[i+1]]
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import h5py
import numpy as np

from hpcdgnn import indices, preemption
from hpcdgnn.data.manifest import (
    EVENTS_FORMAT_NAME,
    FORMAT_NAME,
    _is_int,
    _is_number,
    _short,
    key_set_problem,
    read_manifest_json,
    shard_entry_problem,
    write_manifest_json,
)
from hpcdgnn.data.writer import (
    EVAL_NEGATIVES_FILE,
    disk_full,
    file_sha256,
    named_on_failure,
    prepare_output_dir,
    removed_on_error,
    replace_dir,
    shard_file_problem,
    write_vertex_ids,
)
from hpcdgnn.errors import DataError

__all__ = [
    "EVENTS_FORMAT",
    "EVENTS_VERSION",
    "DEFAULT_SHARD_EVENTS",
    "DEFAULT_SPLIT",
    "SPLIT_NAMES",
    "EventShardInfo",
    "EventManifest",
    "EventStream",
    "dataset_kind",
    "manifest_format",
    "load_event_manifest",
    "save_event_manifest",
    "read_events",
    "read_events_per_node",
    "read_eval_negatives",
    "write_events",
    "split_ranges",
    "median_time_gap",
    "check_split_fractions",
    "scan_event_shards",
    "event_shard_name",
]

EVENTS_FORMAT = EVENTS_FORMAT_NAME  # "hpcdgnn-events"
EVENTS_VERSION = 1

#: Events per shard file when ``--shard-events`` is not given.
DEFAULT_SHARD_EVENTS = 1_000_000

#: ``--split`` when not given: train, val, test fractions of the events.
DEFAULT_SPLIT = (0.70, 0.15, 0.15)

SPLIT_NAMES = ("train", "val", "test")

#: What h5py raises on a damaged file (reported as a problem, never a traceback).
_H5_ERRORS = (OSError, RuntimeError, KeyError, ValueError, TypeError)


def event_shard_name(k: int) -> str:
    """File name of shard ``k`` under ``shards/``."""
    return f"events-{k:05d}.h5"


@dataclass(frozen=True)
class EventShardInfo:
    """One shard file: the events ``[e_start, e_stop)`` of the stream."""

    file: str
    e_start: int
    e_stop: int
    bytes: int
    sha256: str

    @property
    def num_events(self) -> int:
        """Events in this shard."""
        return self.e_stop - self.e_start


@dataclass(frozen=True)
class EventManifest:
    """Typed view of an event dataset's ``manifest.json`` (keys in the module docstring)."""

    num_vertices: int
    num_events: int
    bipartite: bool
    num_sources: int
    edge_feature_dim: int
    edge_feature_names: list[str]
    time_range: tuple[float, float]
    split: dict[str, tuple[int, int]]
    shards: list[EventShardInfo]
    sorted_input: bool
    source: dict[str, Any] = field(default_factory=dict)
    time_gap: float | None = None
    """The median positive gap between consecutive training events (:func:`median_time_gap`), the time unit of
    TGN's ``model.time_scale: auto``; None in directories written before it was recorded."""
    eval_negatives: dict[str, Any] | None = None
    """Fixed evaluation negatives (``eval_negatives.h5``): ``{"file", "bytes", "sha256", "origin", "val", "test"}``
    with the negatives' total per split; None: evaluation draws them (``task.eval_negatives``)."""
    format: str = EVENTS_FORMAT
    version: int = EVENTS_VERSION

    @property
    def destinations(self) -> tuple[int, int]:
        """[lo, hi): the nodes an event's destination, and so a negative, is drawn from (the items of a bipartite
        stream, every node otherwise)."""
        return (self.num_sources, self.num_vertices) if self.bipartite else (0, self.num_vertices)

    @property
    def index_dtype(self) -> np.dtype:
        """The dtype of the shards' ``src``/``dst``: int32 when N < 2^31, else int64."""
        return indices.index_dtype(self.num_vertices)

    def shards_overlapping(self, start: int, stop: int) -> list[EventShardInfo]:
        """The shards holding at least one event of ``[start, stop)``, in order."""
        if stop <= start:
            return []
        return [s for s in self.shards if s.e_start < stop and s.e_stop > start]

    def to_json(self) -> dict[str, Any]:
        """The manifest as a JSON-ready dict, keys in the documented order."""
        return {
            "format": self.format,
            "version": self.version,
            "num_vertices": self.num_vertices,
            "num_events": self.num_events,
            "bipartite": self.bipartite,
            "num_sources": self.num_sources,
            "edge_feature_dim": self.edge_feature_dim,
            "edge_feature_names": list(self.edge_feature_names),
            "time_range": [float(self.time_range[0]), float(self.time_range[1])],
            "split": {k: [int(self.split[k][0]), int(self.split[k][1])] for k in SPLIT_NAMES},
            "shards": [
                {"file": s.file, "e_start": s.e_start, "e_stop": s.e_stop, "bytes": s.bytes, "sha256": s.sha256}
                for s in self.shards
            ],
            "sorted_input": self.sorted_input,
            "source": dict(self.source),
            **({} if self.time_gap is None else {"time_gap": float(self.time_gap)}),
            **({} if self.eval_negatives is None else {"eval_negatives": dict(self.eval_negatives)}),
        }


@dataclass
class EventStream:
    """Events ``[start, start + len)`` of a dataset, as :func:`read_events` returns them.

    Shapes:
        ``src``, ``dst``: (E',) int64; ``t``: (E',) float64 non-decreasing; ``efeat``: (E', D) float32.
    """

    src: np.ndarray
    dst: np.ndarray
    t: np.ndarray
    efeat: np.ndarray
    start: int

    def __len__(self) -> int:
        return int(self.t.shape[0])

    @property
    def stop(self) -> int:
        """One past the last event's index in the whole stream."""
        return self.start + len(self)


# --------------------------------------------------------------------------- manifest


_SHARD_INT_KEYS = ("e_start", "e_stop", "bytes")
_REQUIRED = (
    "format",
    "version",
    "num_vertices",
    "num_events",
    "bipartite",
    "num_sources",
    "edge_feature_dim",
    "edge_feature_names",
    "time_range",
    "split",
    "shards",
    "sorted_input",
)
_KNOWN = (*_REQUIRED, "source", "time_gap", "eval_negatives")


def _read_raw(root: str | Path) -> tuple[Path, Any]:
    """``(path of manifest.json, its parsed JSON)``; the same one-line errors as ``load_manifest``."""
    return read_manifest_json(Path(root))


def manifest_format(root: str | Path) -> str | None:
    """The ``format`` of ``root/manifest.json``, or None when it cannot be read (never raises)."""
    try:
        _, raw = _read_raw(root)
    except DataError:
        return None
    fmt = raw.get("format") if isinstance(raw, dict) else None
    return fmt if isinstance(fmt, str) else None


def dataset_kind(root: str | Path) -> str:
    """``"snapshots"`` or ``"events"``: which kind of dataset ``root`` holds (its manifest's ``format``).

    Raises:
        DataError: the manifest is missing, unparseable, or of neither format.
    """
    path, raw = _read_raw(root)
    if not isinstance(raw, dict):
        raise DataError(f"{path}: not a dataset manifest (expected a JSON object)")
    if "format" not in raw:
        raise DataError(f"{path}: missing key 'format' (expected {FORMAT_NAME!r} or {EVENTS_FORMAT!r})")
    fmt = raw["format"]
    if fmt == FORMAT_NAME:
        return "snapshots"
    if fmt == EVENTS_FORMAT:
        return "events"
    raise DataError(
        f"{path}: 'format' is {_short(fmt)}, expected {FORMAT_NAME!r} (snapshots) or {EVENTS_FORMAT!r} (events)"
    )


def _schema_problem(raw: dict[str, Any]) -> str | None:
    """The first problem of an event manifest's keys and types, as ``key: problem`` (None when sound)."""
    if "format" not in raw:
        return f"missing key 'format' (is this an {EVENTS_FORMAT} manifest?)"
    if raw["format"] == FORMAT_NAME:
        return f"'format' is {FORMAT_NAME!r}: a snapshot dataset, not an event stream (prepare --kind events)"
    if raw["format"] != EVENTS_FORMAT:
        return f"'format' is {_short(raw['format'])}, expected {EVENTS_FORMAT!r}: not an event dataset manifest"
    problem = key_set_problem(raw, _REQUIRED, _KNOWN)
    if problem:
        return problem
    if raw["version"] != EVENTS_VERSION or isinstance(raw["version"], bool):
        return f"'version' {_short(raw['version'])} unsupported (this build reads {EVENTS_VERSION})"
    for key, lo in (("num_vertices", 1), ("num_events", 1), ("edge_feature_dim", 0), ("num_sources", 1)):
        if not _is_int(raw[key], lo):
            return f"'{key}' must be an integer >= {lo}, got {_short(raw[key])}"
    n, e = raw["num_vertices"], raw["num_events"]
    for key in ("bipartite", "sorted_input"):
        if not isinstance(raw[key], bool):
            return f"'{key}' must be true or false, got {_short(raw[key])}"
    s = raw["num_sources"]
    if raw["bipartite"] and not s < n:
        return f"'num_sources' is {s}, but a bipartite graph needs 1 <= num_sources < N = {n}"
    if not raw["bipartite"] and s != n:
        return f"'num_sources' is {s}, expected N = {n} (bipartite is false)"
    names = raw["edge_feature_names"]
    if not isinstance(names, list) or not all(isinstance(x, str) for x in names):
        return f"'edge_feature_names' must be a list of strings, got {_short(names)}"
    if len(names) != raw["edge_feature_dim"]:
        return f"'edge_feature_names' has {len(names)} names, expected edge_feature_dim = {raw['edge_feature_dim']}"
    tr = raw["time_range"]
    if not (isinstance(tr, list) and len(tr) == 2 and all(_is_number(x) for x in tr)) or tr[0] > tr[1]:
        return f"'time_range' must be [t_min, t_max], two finite numbers with t_min <= t_max, got {_short(tr)}"
    sp = raw["split"]
    if not isinstance(sp, dict) or sorted(sp) != sorted(SPLIT_NAMES):
        return f"'split' must be an object with keys train, val, test, got {_short(sp)}"
    for k in SPLIT_NAMES:
        r = sp[k]
        if not (isinstance(r, list) and len(r) == 2 and all(_is_int(x) for x in r)):
            return f"'split'.{k} must be [start, stop], two integers >= 0, got {_short(r)}"
    (a0, a), (b0, b), (c0, c) = (sp[k] for k in SPLIT_NAMES)
    if not (a0 == 0 and a == b0 and b == c0 and c == e and a <= b <= e):
        return (
            f"'split' must be train [0, a], val [a, b], test [b, E] with 0 <= a <= b <= E = {e},"
            f" got {_short(sp)}"
        )
    if "time_gap" in raw and not (_is_number(raw["time_gap"]) and raw["time_gap"] > 0):
        return f"'time_gap' must be a positive number, got {_short(raw['time_gap'])}"
    neg = raw.get("eval_negatives")
    if neg is not None and not (isinstance(neg, dict) and isinstance(neg.get("file"), str)
                                and isinstance(neg.get("sha256"), str) and isinstance(neg.get("origin"), str)
                                and all(_is_int(neg.get(k)) for k in ("bytes", "val", "test"))):
        return (f"'eval_negatives' must be {{file, bytes, sha256, origin, val, test}} (integers: bytes and the "
                f"per-split totals), got {_short(neg)}")
    if "source" in raw and not isinstance(raw["source"], dict):
        return f"'source' must be an object, got {_short(raw['source'])}"
    shards = raw["shards"]
    if not isinstance(shards, list) or not shards:
        return f"'shards' must be a non-empty list, got {_short(shards)}"
    covered = 0
    for i, sh in enumerate(shards):
        problem = shard_entry_problem(sh, i, _SHARD_INT_KEYS)
        if problem:
            return problem
        where, f = f"'shards'[{i}]", sh["file"]
        if sh["e_start"] != covered or sh["e_stop"] <= sh["e_start"]:
            return f"{where} ({f}) covers events [{sh['e_start']}, {sh['e_stop']}), expected to start at {covered}"
        covered = sh["e_stop"]
    if covered != e:
        return f"'shards' cover {covered} events, expected num_events = {e}"
    files = [sh["file"] for sh in shards]
    if len(set(files)) != len(files):
        return "'shards' names a file twice"
    return None


def load_event_manifest(root: str | Path) -> EventManifest:
    """Read and check ``root/manifest.json`` of an event dataset; raise :class:`DataError` naming the file."""
    path, raw = _read_raw(root)
    if not isinstance(raw, dict):
        raise DataError(f"{path}: not an {EVENTS_FORMAT} manifest (expected a JSON object)")
    problem = _schema_problem(raw)
    if problem:
        raise DataError(f"{path}: {problem}")
    return EventManifest(
        num_vertices=raw["num_vertices"],
        num_events=raw["num_events"],
        bipartite=raw["bipartite"],
        num_sources=raw["num_sources"],
        edge_feature_dim=raw["edge_feature_dim"],
        edge_feature_names=list(raw["edge_feature_names"]),
        time_range=(float(raw["time_range"][0]), float(raw["time_range"][1])),
        split={k: (int(raw["split"][k][0]), int(raw["split"][k][1])) for k in SPLIT_NAMES},
        shards=[EventShardInfo(**sh) for sh in raw["shards"]],
        sorted_input=raw["sorted_input"],
        source=dict(raw.get("source", {})),
        time_gap=None if raw.get("time_gap") is None else float(raw["time_gap"]),
        eval_negatives=raw.get("eval_negatives"),
        format=raw["format"],
        version=raw["version"],
    )


def save_event_manifest(root: str | Path, manifest: EventManifest) -> Path:
    """Write ``root/manifest.json`` atomically and durably (:func:`write_manifest_json`: a synced temporary renamed
    into place, then ``root`` synced), as :func:`~hpcdgnn.data.manifest.save_manifest` does a snapshot dataset's."""
    return write_manifest_json(root, manifest.to_json())


# --------------------------------------------------------------------------- split


def check_split_fractions(fractions: Sequence[float], where: str) -> tuple[float, float, float]:
    """``fractions`` as three floats: non-negative, finite, summing to 1 (within 1e-6), train > 0.

    Raises:
        DataError: ``where: --split ...`` naming what is wrong.
    """
    try:
        f = tuple(float(x) for x in fractions)
    except (TypeError, ValueError):
        f = ()
    if len(f) != 3 or not all(math.isfinite(x) and x >= 0 for x in f) or abs(sum(f) - 1.0) > 1e-6 or f[0] <= 0:
        raise DataError(
            f"{where}: --split needs three non-negative fractions train val test summing to 1 with train > 0,"
            f" e.g. 0.70 0.15 0.15; got {_short(list(fractions) if isinstance(fractions, Sequence) else fractions)}"
        )
    return f  # type: ignore[return-value]


def _forward(t: np.ndarray, c: int) -> int:
    """Move cut ``c`` forward past the events simultaneous with event ``c - 1``."""
    if 0 < c < t.shape[0] and t[c] == t[c - 1]:
        return int(np.searchsorted(t, t[c - 1], side="right"))
    return c


def split_ranges(t: np.ndarray, fractions: Sequence[float] = DEFAULT_SPLIT) -> dict[str, tuple[int, int]]:
    """Chronological train / val / test event ranges of the time-sorted ``t`` (rules in docs/data.md)."""
    f = check_split_fractions(fractions, "split")
    e = int(t.shape[0])
    a = int(round(f[0] * e))
    b = int(round((f[0] + f[1]) * e))
    a = max(1, min(a, e)) if e > 0 else 0
    b = max(a, min(b, e))
    a = _forward(t, a)
    b = max(_forward(t, b), a)
    return {"train": (0, a), "val": (a, b), "test": (b, e)}


# --------------------------------------------------------------------------- shard checks


def _array_problems(
    m: EventManifest, offset: int, src: np.ndarray, dst: np.ndarray, t: np.ndarray, efeat: np.ndarray | None,
    prev_t: float | None,
) -> list[str]:
    """Problems of the events ``offset, offset + 1, ...`` given as arrays: ids, time order, NaN/Inf."""
    problems = []
    n, s = m.num_vertices, m.num_sources
    for name, ids, lo, hi in (
        ("src", src, 0, s if m.bipartite else n),
        ("dst", dst, s if m.bipartite else 0, n),
    ):
        if ids.size:
            bad = np.flatnonzero((ids < lo) | (ids >= hi))
            if bad.size:
                k = int(bad[0])
                why = f" (bipartite, num_sources = {s})" if m.bipartite else ""
                problems.append(
                    f"'{name}' has a vertex id outside [{lo}, {hi}){why}: {int(ids[k])} at event {offset + k}"
                    f" ({bad.size} of {ids.size} out of range)"
                )
    if t.size:
        finite = np.isfinite(t)
        if not finite.all():
            k = int(np.flatnonzero(~finite)[0])
            problems.append(f"'t' contains NaN or Inf (first at event {offset + k}: {t[k]})")
        else:
            down = np.flatnonzero(t[1:] < t[:-1])
            if down.size:
                k = int(down[0])
                problems.append(
                    f"'t' decreases at event {offset + k + 1} ({float(t[k])!r} -> {float(t[k + 1])!r};"
                    f" {down.size} decrease(s)); events must be sorted by time"
                )
            elif prev_t is not None and t[0] < prev_t:
                problems.append(
                    f"'t' starts at {float(t[0])!r} (event {offset}),"
                    f" before the previous shard's last event at {prev_t!r}"
                )
    if efeat is not None and efeat.size:
        finite = np.isfinite(efeat)
        if not finite.all():
            k, j = (int(x) for x in np.argwhere(~finite)[0])
            problems.append(f"'efeat' contains NaN or Inf (first at event {offset + k}, feature {j}: {efeat[k, j]})")
    return problems


class _Invalid(Exception):
    """A shard's structure is wrong: its contents cannot be checked."""


def _dataset(f: h5py.File, name: str, dtype: np.dtype, shape: tuple[int, ...], problems: list[str]) -> h5py.Dataset:
    ds = f.get(name)
    if ds is None:
        problems.append(f"dataset '{name}' missing")
        raise _Invalid
    if not isinstance(ds, h5py.Dataset):
        problems.append(f"'{name}' is not a dataset")
        raise _Invalid
    if ds.dtype != dtype:
        problems.append(f"'{name}' has dtype {ds.dtype}, expected {dtype}")
        raise _Invalid
    if ds.shape != shape:
        problems.append(f"'{name}' has shape {ds.shape}, expected {shape}")
        raise _Invalid
    return ds


def _shard_datasets(f: h5py.File, m: EventManifest, info: EventShardInfo, problems: list[str]) -> dict[str, Any]:
    """The shard's datasets after the structure checks (names, dtypes, shapes); raises _Invalid."""
    n = info.num_events
    d = m.edge_feature_dim
    out = {
        "src": _dataset(f, "src", m.index_dtype, (n,), problems),
        "dst": _dataset(f, "dst", m.index_dtype, (n,), problems),
        "t": _dataset(f, "t", np.dtype(np.float64), (n,), problems),
        "efeat": _dataset(f, "efeat", np.dtype(np.float32), (n, d), problems) if d > 0 else None,
    }
    expected = {"src", "dst", "t"} | ({"efeat"} if d > 0 else set())
    extra = sorted(set(f.keys()) - expected)
    if extra:
        why = " (edge_feature_dim is 0)" if "efeat" in extra else ""
        problems.append(f"unexpected dataset(s) {', '.join(extra[:5])}{why}")
        raise _Invalid
    return out


def _one_line(e: BaseException) -> str:
    return " ".join(str(e).split()) or type(e).__name__


def _read_slice(
    path: Path, m: EventManifest, info: EventShardInfo, lo: int, hi: int, prev_t: float | None
) -> tuple[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None] | None, list[str]]:
    """Events ``[lo, hi)`` (shard-local) of one shard and the problems found reading them."""
    problems: list[str] = []
    try:
        f = h5py.File(path, "r")
    except FileNotFoundError:
        return None, [f"shard file missing (events {info.e_start}..{info.e_stop - 1})"]
    except _H5_ERRORS as e:
        return None, [f"cannot open as HDF5: {_one_line(e)}"]
    try:
        with f:
            ds = _shard_datasets(f, m, info, problems)
            src, dst, t = ds["src"][lo:hi], ds["dst"][lo:hi], ds["t"][lo:hi]
            efeat = None if ds["efeat"] is None else ds["efeat"][lo:hi]
    except _Invalid:
        return None, problems
    except _H5_ERRORS as e:
        return None, [f"cannot read: {_one_line(e)}"]
    problems += _array_problems(m, info.e_start + lo, src, dst, t, efeat, prev_t)
    return (src, dst, t, efeat), problems


def read_events(
    root: str | Path, manifest: EventManifest | None = None, start: int = 0, stop: int | None = None
) -> EventStream:
    """Read events ``[start, stop)`` (default: all), opening only the shards that hold them.

    Raises:
        DataError: a range outside ``[0, E]``, or a missing or corrupt shard, naming the file.
    """
    root = Path(root)
    m = load_event_manifest(root) if manifest is None else manifest
    e = m.num_events
    stop = e if stop is None else int(stop)
    start = int(start)
    if not 0 <= start <= stop <= e:
        raise DataError(f"{root}: read_events: range [{start}, {stop}) is not within [0, {e}] events")
    parts = []
    prev_t: float | None = None
    for info in m.shards_overlapping(start, stop):
        path = root / "shards" / info.file
        problem = shard_file_problem(path, info, checksums=False) if path.is_file() else None
        if problem:
            raise DataError(problem)
        lo, hi = max(start, info.e_start) - info.e_start, min(stop, info.e_stop) - info.e_start
        arrays, problems = _read_slice(path, m, info, lo, hi, prev_t)
        if problems:
            raise DataError(f"{path}: {problems[0]}")
        parts.append(arrays)
        prev_t = float(arrays[2][-1])
    d = m.edge_feature_dim
    if not parts:
        return EventStream(
            np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.float64), np.zeros((0, d), np.float32), start
        )
    src = np.concatenate([p[0] for p in parts]).astype(np.int64, copy=False)
    dst = np.concatenate([p[1] for p in parts]).astype(np.int64, copy=False)
    t = np.concatenate([p[2] for p in parts])
    if d > 0:
        efeat = np.concatenate([p[3] for p in parts])
    else:
        efeat = np.zeros((t.shape[0], 0), np.float32)
    return EventStream(src=src, dst=dst, t=t, efeat=efeat, start=start)


@dataclass
class ShardScan:
    """One shard as :func:`scan_event_shards` saw it: its arrays (None when unreadable)."""

    info: EventShardInfo
    path: Path
    src: np.ndarray | None = None
    dst: np.ndarray | None = None
    t: np.ndarray | None = None


def scan_event_shards(
    root: str | Path, m: EventManifest, problems: list[str], *, checksums: bool = True
) -> Iterator[ShardScan]:
    """Check every shard (size, sha256 unless ``checksums`` is False, structure, contents), one in memory.

    Appends ``SHARD: problem`` lines to ``problems``; yields one :class:`ShardScan` per shard.
    """
    root = Path(root)
    prev_t: float | None = None
    for info in m.shards:
        path = root / "shards" / info.file
        scan = ShardScan(info, path)
        if not path.is_file():
            problems.append(f"{path}: shard file missing (events {info.e_start}..{info.e_stop - 1})")
            prev_t = None
            yield scan
            continue
        problem = shard_file_problem(path, info, checksums)
        if problem:
            problems.append(problem)
        arrays, found = _read_slice(path, m, info, 0, info.num_events, prev_t)
        problems.extend(f"{path}: {p}" for p in found)
        if arrays is None:
            prev_t = None
        else:
            scan.src, scan.dst, scan.t = arrays[0], arrays[1], arrays[2]
            prev_t = float(scan.t[-1]) if scan.t.size else prev_t
        yield scan


# --------------------------------------------------------------------------- writer


def read_events_per_node(comm: Any, root: str | Path,
                         manifest: EventManifest | None = None) -> tuple[EventStream, list]:
    """:func:`read_events` once per node (``comm.world.share_per_node``), mapped by every rank of the node.

    Collective over ``comm``; a reader's :class:`DataError` is raised on every rank of its node.
    Returns the stream (ids and times read-only) and the windows, to keep as long as the arrays.
    """

    def produce() -> dict[str, np.ndarray]:
        ev = read_events(root, manifest)
        return {k: getattr(ev, k) for k in ("src", "dst", "t", "efeat")}

    arrays, windows = comm.world.share_per_node(produce, "event stream")
    for name in ("src", "dst", "t"):  # a write would change every rank's stream: make it an error
        arrays[name].flags.writeable = False  # (efeat stays writeable: torch.from_numpy warns on read-only)
    return EventStream(**arrays, start=0), windows


def _checked_events(
    root: Path,
    n: int,
    src: np.ndarray,
    dst: np.ndarray,
    t: np.ndarray,
    efeat: np.ndarray | None,
    feature_names: Sequence[str] | None,
    *,
    bipartite: bool,
    num_sources: int | None,
    shard_events: int,
    original_ids: np.ndarray | None,
    sorted_input: bool,
) -> tuple[EventManifest, np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]:
    """Checked arrays and options of :func:`write_events`: a draft manifest, ``src``, ``dst``, ``t``, features."""
    src = np.asarray(src)
    dst = np.asarray(dst)
    t = np.asarray(t, dtype=np.float64)
    e = int(t.shape[0])
    names = [str(x) for x in (feature_names or [])]
    d = len(names)
    if n < 1:
        raise DataError(f"{root}: num_vertices must be >= 1 (got {n})")
    if e < 1:
        raise DataError(f"{root}: no events")
    if t.ndim != 1 or src.shape != (e,) or dst.shape != (e,):
        raise DataError(f"{root}: src, dst and t must be 1-D of equal length (got {src.shape}, {dst.shape}, {t.shape})")
    if src.dtype.kind not in "iu" or dst.dtype.kind not in "iu":
        raise DataError(f"{root}: src and dst must be integer vertex ids (got {src.dtype}, {dst.dtype})")
    if efeat is None:
        if d:
            raise DataError(f"{root}: {d} feature names but no edge features")
        feats = None
    else:
        feats = np.asarray(efeat, dtype=np.float32)
        if feats.ndim == 1 and d == 1:
            feats = feats.reshape(-1, 1)
        if feats.shape != (e, d):
            raise DataError(f"{root}: edge features of shape {feats.shape}, expected ({e}, {d}) for {d} names")
        if d == 0:
            feats = None
    s = n if num_sources is None else int(num_sources)
    if bipartite and not 1 <= s < n:
        raise DataError(f"{root}: bipartite needs 1 <= num_sources < N = {n} (got {s})")
    if not bipartite and s != n:
        raise DataError(f"{root}: num_sources is {s}, but a non-bipartite dataset has num_sources = N = {n}")
    if not _is_int(shard_events, 1):
        raise DataError(f"{root}: --shard-events must be >= 1 (got {shard_events})")
    if original_ids is not None and np.asarray(original_ids).shape != (n,):
        raise DataError(f"{root}: {np.asarray(original_ids).shape} original ids, expected ({n},)")
    draft = EventManifest(n, e, bool(bipartite), s, d, names, (0.0, 0.0), {}, [], bool(sorted_input))
    problems = _array_problems(draft, 0, src, dst, t, feats, None)
    if problems:
        raise DataError(f"{root}: {problems[0]}")
    return draft, src, dst, t, feats


def median_time_gap(t: np.ndarray) -> float | None:
    """The median of the positive gaps t_{e+1} − t_e between consecutive events (None when every event is
    simultaneous): the stream's own time unit, so that Δt / gap reads the same whatever unit the file counts in.

    Shapes:
        t (E,) non-decreasing -> a float."""
    gaps = np.diff(np.asarray(t, dtype=np.float64))
    gaps = gaps[gaps > 0]
    return float(np.median(gaps)) if gaps.shape[0] else None


def _checked_split(
    root: Path, split: Mapping[str, Sequence[int]] | Sequence[float], t: np.ndarray, e: int
) -> dict[str, tuple[int, int]]:
    """The train/val/test event ranges: ``split``'s, checked to tile ``[0, e)``, or cut from its fractions."""
    if isinstance(split, Mapping):
        ranges = {k: (int(split[k][0]), int(split[k][1])) for k in SPLIT_NAMES if k in split}
        (a0, a), (b0, b), (c0, c) = (ranges.get(k, (-1, -1)) for k in SPLIT_NAMES)
        if len(ranges) != 3 or not (a0 == 0 and a == b0 and b == c0 and c == e and 0 <= a <= b <= e):
            raise DataError(f"{root}: split must be train [0, a], val [a, b], test [b, {e}], got {dict(split)}")
        return ranges
    return split_ranges(t, check_split_fractions(split, str(root)))


def _write_event_shards(
    tmp: Path,
    src: np.ndarray,
    dst: np.ndarray,
    t: np.ndarray,
    feats: np.ndarray | None,
    index_dtype: np.dtype,
    shard_events: int,
) -> list[EventShardInfo]:
    """Write the events into ``tmp/shards/`` as files of ``shard_events`` events each; return their entries."""
    shards = []
    e = int(t.shape[0])
    for k, lo in enumerate(range(0, e, shard_events)):
        preemption.check_stop()  # a safe point for a stop signal whose exception was lost
        hi = min(lo + shard_events, e)
        name = event_shard_name(k)
        path = tmp / "shards" / name
        with h5py.File(path, "w") as f:
            f.create_dataset("src", data=src[lo:hi].astype(index_dtype))
            f.create_dataset("dst", data=dst[lo:hi].astype(index_dtype))
            f.create_dataset("t", data=t[lo:hi])
            if feats is not None:
                f.create_dataset("efeat", data=feats[lo:hi])
        shards.append(EventShardInfo(name, lo, hi, path.stat().st_size, file_sha256(path)))
    return shards


def write_events(
    output: str | Path,
    src: np.ndarray,
    dst: np.ndarray,
    t: np.ndarray,
    efeat: np.ndarray | None,
    *,
    num_vertices: int,
    bipartite: bool,
    num_sources: int | None,
    feature_names: Sequence[str] | None,
    original_ids: np.ndarray | None,
    split: Mapping[str, Sequence[int]] | Sequence[float] = DEFAULT_SPLIT,
    shard_events: int = DEFAULT_SHARD_EVENTS,
    source: dict[str, Any] | None = None,
    force: bool = False,
    sorted_input: bool = True,
    eval_negatives: Mapping[str, tuple[np.ndarray, np.ndarray]] | None = None,
    negatives_origin: str = "",
) -> EventManifest:
    """Write an event dataset directory from time-sorted events (the caller sorts); return its manifest.

    Args:
        output: the directory to create (must not exist or be empty, unless ``force``).
        src: (E,) source ids in ``[0, N)``; bipartite: ``< num_sources``.
        dst: (E,) destination ids; bipartite: ``>= num_sources``.
        t: (E,) finite, non-decreasing times.
        efeat: (E, D) edge features, or None when ``feature_names`` is empty.
        num_vertices: N.
        bipartite: whether sources and destinations are disjoint id ranges.
        num_sources: bipartite: S with 1 <= S < N; otherwise N (None = N).
        feature_names: the D edge feature names.
        original_ids: the input's id of each vertex (None: 0..N-1).
        split: ``{"train": (0, a), "val": (a, b), "test": (b, E)}`` or three fractions.
        shard_events: events per shard file.
        source: provenance recorded in the manifest.
        force: replace a non-empty ``output``.
        sorted_input: whether the raw input is time-ordered (recorded in the manifest).
        eval_negatives: ``{"val": (offsets, dst), "test": (offsets, dst)}``: the fixed negative destinations of
            each validation and test event, in split order (offsets (E_split + 1,), dst ids in ``[0, N)``).
        negatives_origin: where they come from (e.g. ``tgb:tgbl-wiki``), recorded in the manifest.

    Raises:
        DataError: inconsistent arrays or options, or a non-empty ``output`` without ``force``.
    """
    root = Path(output)
    n = int(num_vertices)
    draft, src, dst, t, feats = _checked_events(
        root, n, src, dst, t, efeat, feature_names, bipartite=bipartite, num_sources=num_sources,
        shard_events=shard_events, original_ids=original_ids, sorted_input=sorted_input)
    e, d = draft.num_events, draft.edge_feature_dim
    ranges = _checked_split(root, split, t, e)
    index_dtype = draft.index_dtype
    shard_events = int(shard_events)
    ids_bytes = 8 * n if original_ids is None else int(np.asarray(original_ids).nbytes)
    with removed_on_error():
        tmp = prepare_output_dir(root, force, e * (2 * np.dtype(index_dtype).itemsize + 8 + 4 * d) + ids_bytes)
        try:
            shards = _write_event_shards(tmp, src, dst, t, feats, index_dtype, shard_events)
            write_vertex_ids(tmp, original_ids, n)
            negatives = None if eval_negatives is None else _write_eval_negatives(
                root, tmp, eval_negatives, ranges, n, index_dtype, negatives_origin)
            manifest = replace(draft, time_range=(float(t[0]), float(t[-1])), split=ranges, shards=shards,
                               source=dict(source or {}), time_gap=median_time_gap(t[: ranges["train"][1]]),
                               eval_negatives=negatives)
            with named_on_failure(root):
                save_event_manifest(tmp, manifest)
            replace_dir(tmp, root, force)
            return manifest
        except BaseException as exc:  # the directory: removed_on_error's
            full = disk_full(root, exc)
            if full is not None:
                raise full from None
            raise


def _negatives_problem(offsets: np.ndarray, dst: np.ndarray, events: int, n: int) -> str | None:
    """What is wrong with one split's (offsets, dst), or None."""
    if offsets.ndim != 1 or offsets.shape[0] != events + 1:
        return f"offsets has shape {offsets.shape}, expected ({events + 1},) for the split's {events} events"
    if offsets[0] != 0 or np.any(np.diff(offsets) < 0) or offsets[-1] != dst.shape[0]:
        return "offsets must rise from 0 to len(dst)"
    if dst.shape[0] and (dst.min() < 0 or dst.max() >= n):
        return f"a negative destination lies outside 0 .. {n - 1}"
    return None


def _write_eval_negatives(root: Path, tmp: Path, negatives: Mapping[str, tuple[np.ndarray, np.ndarray]],
                          ranges: dict[str, tuple[int, int]], n: int, index_dtype: np.dtype,
                          origin: str) -> dict[str, Any]:
    """Write ``eval_negatives.h5`` into ``tmp``; its manifest entry."""
    path = tmp / EVAL_NEGATIVES_FILE
    totals = {}
    with h5py.File(path, "w") as f:
        for split in ("val", "test"):
            offsets, dst = (np.asarray(x, dtype=np.int64) for x in negatives[split])
            problem = _negatives_problem(offsets, dst, ranges[split][1] - ranges[split][0], n)
            if problem:
                raise DataError(f"{root}: eval_negatives {split}: {problem}")
            f.create_dataset(f"{split}/offsets", data=offsets)
            f.create_dataset(f"{split}/dst", data=dst.astype(index_dtype))
            totals[split] = int(dst.shape[0])
    return {"file": EVAL_NEGATIVES_FILE, "bytes": path.stat().st_size, "sha256": file_sha256(path),
            "origin": origin, **totals}


def read_eval_negatives(root: str | Path, manifest: EventManifest) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """The fixed ``{"val": (offsets, dst), "test": (offsets, dst)}`` of an event dataset (offsets int64, dst in
    the stream's index dtype).

    Raises:
        DataError: the file is missing, of another size than the manifest says, or inconsistent (names it).
    """
    entry = manifest.eval_negatives
    path = Path(root) / entry["file"]
    if not path.is_file() or path.stat().st_size != entry["bytes"]:
        found = "missing" if not path.is_file() else f"{path.stat().st_size} bytes, manifest says {entry['bytes']}"
        raise DataError(f"{path}: the dataset's fixed evaluation negatives are {found}; prepare the dataset again")
    out = {}
    try:
        with h5py.File(path, "r") as f:
            for split in ("val", "test"):
                offsets, dst = f[f"{split}/offsets"][()].astype(np.int64), f[f"{split}/dst"][()]
                lo, hi = manifest.split[split]
                problem = _negatives_problem(offsets, dst, hi - lo, manifest.num_vertices)
                if problem:
                    raise DataError(f"{path}: {split}: {problem}")
                out[split] = (offsets, dst)
    except (OSError, KeyError) as e:
        raise DataError(f"{path}: unreadable ({_one_line(e)}); prepare the dataset again") from None
    return out
