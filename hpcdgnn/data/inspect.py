"""``hpcdgnn inspect DIR``: statistics and a full validation of a dataset directory.

Statistics: N, T, F, smoothing, nnz of A_t, raw edges and active vertices per snapshot,
node targets, the share of each class among the labelled vertices of each split (a class far below an even
share makes accuracy mostly the majority's: :func:`class_balance_note`), and the edge overlap
``|E_t ∩ E_{t+1}| / |E_{t+1}|`` of the trained adjacency: the share of A_{t+1}'s pattern
graph-difference transfer (IBM §3.2, S3) does not resend. Validation collects one ``file: problem`` line per
fault (h5py errors included, never raised): manifest, ``vertices.h5``, every shard's size, sha256, attributes
and groups, each snapshot's dtypes, shapes, CSR structure with strictly ascending edge keys
(S3's diffs rely on it), NaN/Inf, negative weights, labels, targets and counts. One
snapshot is in memory at a time.

Event-stream datasets get :func:`inspect_events`: counts, time range, split sizes,
distinct pairs, and the checks of :func:`~hpcdgnn.data.events.scan_event_shards` plus
``time_range``, split cuts that would separate simultaneous events, and fixed evaluation negatives (TGB's) as a
run reads them, with their sha256.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import h5py
import numpy as np

from hpcdgnn.data.events import (
    EVENTS_FORMAT,
    SPLIT_NAMES,
    EventManifest,
    load_event_manifest,
    manifest_format,
    read_eval_negatives,
    scan_event_shards,
)
from hpcdgnn.data.manifest import Manifest, ShardInfo, empty_snapshots, empty_snapshots_note, load_manifest
from hpcdgnn.data.shard_reader import snapshot_group_name
from hpcdgnn.data.snapshot import csr_rows
from hpcdgnn.data.writer import file_sha256, shard_file_problem
from hpcdgnn.errors import DataError
from hpcdgnn.indices import unique_ints
from hpcdgnn.progress import Progress

__all__ = ["add_inspect_arguments", "run_inspect", "inspect_dataset", "inspect_events", "class_counts", "class_balance",
           "class_balance_note"]

#: A class below this fraction of an even share (1 / C) of the labelled training vertices is warned of: 25 % of two
#: classes, where always answering the other class already scores 0.75 accuracy.
RARE_CLASS_SHARE = 0.5


class _Invalid(Exception):
    """One snapshot failed a check that makes its remaining checks meaningless."""


#: What h5py raises on a damaged file (HDF5 library errors surface as OSError, RuntimeError,
#: KeyError or ValueError, and a garbled datatype as TypeError): reported as "cannot read", never a traceback.
_H5_ERRORS = (OSError, RuntimeError, KeyError, ValueError, TypeError)


def _one_line(e: BaseException) -> str:
    """An exception's text on one line (HDF5 messages can span several)."""
    return " ".join(str(e).split()) or type(e).__name__


def _attr_int(f: h5py.File, name: str) -> int | None:
    """An integer root attribute of a shard, or None when absent or not a scalar integer."""
    v = f.attrs.get(name)
    if isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_)):
        return int(v)
    return None


def _summary(values: list[int]) -> dict[str, float] | None:
    if not values:
        return None
    a = np.asarray(values, dtype=np.float64)
    return {"min": int(a.min()), "median": float(np.median(a)), "max": int(a.max()), "total": int(a.sum())}


def class_counts(labels: np.ndarray | None, num_classes: int) -> np.ndarray:
    """Labelled vertices per class of one snapshot.

    Args:
        labels: the snapshot's labels (-1 = none, left out), or None (no labels: all counts 0).
        num_classes: C.

    Shapes:
        labels: (N,) int; returns (C,) int64.
    """
    if labels is None:
        return np.zeros(num_classes, dtype=np.int64)
    y = np.asarray(labels)
    return np.bincount(y[y >= 0], minlength=num_classes)[:num_classes].astype(np.int64)


def class_balance(counts: dict[int, np.ndarray], m: Manifest) -> dict[str, Any] | None:
    """The share of each class among the labelled vertices of each split that ``task: node_classification`` cuts
    with ``task.split``'s default: what a model that always answers the majority class scores there.

    Args:
        counts: :func:`class_counts` of each snapshot t read (a snapshot left out counts nothing).
        m: the dataset's manifest.

    Returns:
        None without labels (``num_classes`` 0); else ``{"split": [f_train, f_val, f_test], name: {"snapshots":
        [first, stop], "labelled": count, "fractions": [share of each class] or None when none is labelled}}``
        for each of train, val, test.
    """
    if m.num_classes < 1:
        return None
    # the run's own cut (windows of a signal start later); the import brings torch: labelled datasets only
    from hpcdgnn.tasks.node_classification import NodeClassification, NodeClassificationOptions

    options = NodeClassificationOptions()
    out: dict[str, Any] = {"split": list(options.split)}
    for name, steps in zip(("train", "val", "test"), NodeClassification.steps(options, m), strict=True):
        total = sum((counts[t] for t in steps if t in counts), np.zeros(m.num_classes, dtype=np.int64))
        n = int(total.sum())
        out[name] = {"snapshots": [steps.start, steps.stop], "labelled": n,
                     "fractions": [float(c) / n for c in total] if n else None}
    return out


def class_balance_note(balance: dict[str, Any] | None) -> str | None:
    """One line when a class holds under :data:`RARE_CLASS_SHARE` of an even share of the labelled training
    vertices, naming its share and the accuracy the majority class alone scores (an accuracy to beat, not 1/C);
    else None.

    Args:
        balance: :func:`class_balance`'s result.
    """
    train = (balance or {}).get("train") or {}
    shares = train.get("fractions")
    if not shares:
        return None
    rare = [c for c, f in enumerate(shares) if f < RARE_CLASS_SHARE / len(shares)]
    if not rare:
        return None
    a, b = train["snapshots"]
    top = int(np.argmax(shares))
    which = ", ".join(f"class {c} is {100 * shares[c]:.1f} %" for c in rare[:4]) + (", ..." if len(rare) > 4 else "")
    val = balance["val"]["fractions"]
    at_val = f" and {val[top]:.3f} on the validation snapshots" if val else ""
    split = "/".join(f"{f:g}" for f in balance["split"])
    return (f"{which} of the labelled vertices of the training snapshots ({a}-{b - 1} under task.split's default "
            f"{split}): always answering class {top} scores accuracy {shares[top]:.3f} there{at_val}, the "
            "accuracy to beat")


def _overlap(prev: np.ndarray, cur: np.ndarray) -> int:
    """|prev ∩ cur| for two strictly ascending key arrays.

    A stable sort of the two concatenated sorted runs is a linear merge
    (timsort), and since each array is duplicate-free every equal neighbour
    pair is one common key.
    """
    merged = np.sort(np.concatenate([prev, cur]), kind="stable")
    return int(np.count_nonzero(merged[1:] == merged[:-1]))


class _SnapshotChecker:
    """Checks one snapshot group against the manifest; collects problems."""

    def __init__(self, m: Manifest, problems: list[str]) -> None:
        self.m = m
        self.n = m.num_vertices
        self.problems = problems
        #: over the readable targets arrays: entries with a target, their sum, min and max
        self.target_count, self.target_sum = 0, 0.0
        self.target_min, self.target_max = np.inf, -np.inf
        #: :func:`class_counts` of each snapshot whose labels are valid
        self.class_counts: dict[int, np.ndarray] = {}

    def fail(self, where: str, msg: str) -> None:
        self.problems.append(f"{where}: {msg}")

    def dataset(self, g: h5py.Group, where: str, name: str, dtype: np.dtype, shape: tuple[int, ...]) -> np.ndarray:
        if name not in g:
            self.fail(where, f"dataset '{name}' missing")
            raise _Invalid
        ds = g[name]
        if not isinstance(ds, h5py.Dataset):
            self.fail(where, f"'{name}' is not a dataset")
            raise _Invalid
        if ds.dtype != dtype:
            self.fail(where, f"'{name}' has dtype {ds.dtype}, expected {dtype}")
            raise _Invalid
        if ds.shape != shape:
            self.fail(where, f"'{name}' has shape {ds.shape}, expected {shape}")
            raise _Invalid
        try:
            return ds[()]
        except _H5_ERRORS as e:
            self.fail(where, f"cannot read '{name}': {_one_line(e)}")
            raise _Invalid from None

    def csr_keys(self, g: h5py.Group, where: str, prefix: str) -> np.ndarray:
        """Validate one CSR pair; return its edge keys ``row * N + col``."""
        n = self.n
        indptr = self.dataset(g, where, prefix + "indptr", np.dtype(np.int64), (n + 1,))
        if indptr[0] != 0 or (np.diff(indptr) < 0).any():
            self.fail(where, f"'{prefix}indptr' does not start at 0 and increase monotonically")
            raise _Invalid
        if int(indptr[-1]) > n * n:
            self.fail(where, f"'{prefix}indptr' ends at {int(indptr[-1])} > N^2 = {n * n} edges")
            raise _Invalid
        nnz = int(indptr[-1])
        indices = self.dataset(g, where, prefix + "indices", np.dtype(self.m.index_dtype), (nnz,))
        if nnz:
            bad = np.flatnonzero((indices < 0) | (indices >= n))
            if bad.size:
                k = int(bad[0])
                row = int(np.searchsorted(indptr, k, side="right")) - 1
                self.fail(
                    where,
                    f"'{prefix}indices' has a vertex outside [0, {n}): column index {int(indices[k])} "
                    f"out of range at entry {k} (row {row}; {bad.size} of {nnz} entries out of range)",
                )
                raise _Invalid
        keys = csr_rows(indptr) * np.int64(n) + indices.astype(np.int64)
        if nnz > 1 and not (keys[1:] > keys[:-1]).all():
            self.fail(where, f"'{prefix}indices' not strictly ascending within rows (unsorted or duplicate edges)")
            raise _Invalid
        return keys

    def targets(self, g: h5py.Group, where: str) -> None:
        """The float node targets: float32/float64, shape (N,), finite or NaN; their statistics."""
        ds = g.get("targets")
        if not isinstance(ds, h5py.Dataset):
            self.fail(where, "dataset 'targets' missing" if ds is None else "'targets' is not a dataset")
            return
        if ds.dtype not in (np.dtype(np.float32), np.dtype(np.float64)):
            self.fail(where, f"'targets' has dtype {ds.dtype}, expected float64 (or float32)")
            return
        if ds.shape != (self.n,):
            self.fail(where, f"'targets' has shape {ds.shape}, expected ({self.n},)")
            return
        try:
            y = ds[()].astype(np.float64)
        except _H5_ERRORS as e:
            self.fail(where, f"cannot read 'targets': {_one_line(e)}")
            return
        if np.isinf(y).any():
            v = int(np.flatnonzero(np.isinf(y))[0])
            self.fail(where, f"'targets' contains Inf (first at vertex {v}: {y[v]}); NaN is the only 'no target' mark")
            return
        have = y[~np.isnan(y)]
        if have.size:
            self.target_count += int(have.size)
            self.target_sum += float(have.sum())
            self.target_min = min(self.target_min, float(have.min()))
            self.target_max = max(self.target_max, float(have.max()))

    def check(self, g: h5py.Group, where: str, t: int) -> tuple[np.ndarray, int, int]:
        """Validate snapshot ``t``; return (A_t keys, raw edges, active vertices)."""
        m, n = self.m, self.n
        keys = self.csr_keys(g, where, "")
        nnz = int(keys.shape[0])
        w = self.dataset(g, where, "weights", np.dtype(np.float32), (nnz,))
        if not np.isfinite(w).all():
            k = int(np.flatnonzero(~np.isfinite(w))[0])
            self.fail(where, f"'weights' contains NaN or Inf (first at edge {k}, row {int(keys[k]) // n}: {w[k]})")
        elif (w < 0).any():  # the GCN's D^-1/2 needs degrees >= 1 (prepare refuses negative --weights given)
            k = int(np.flatnonzero(w < 0)[0])
            self.fail(where, f"'weights' has a negative weight (first at edge {k}, row {int(keys[k]) // n}: {w[k]}); "
                             "edge weights must be >= 0")
        x = self.dataset(g, where, "x", np.dtype(np.float32), (n, m.num_features))
        if not np.isfinite(x).all():
            bad = np.argwhere(~np.isfinite(x))[0]
            self.fail(where, f"'x' contains NaN or Inf (first at vertex {bad[0]}, feature {bad[1]})")
        active = self.dataset(g, where, "active", np.dtype(np.uint8), (n,))
        if (active > 1).any():
            v = int(np.flatnonzero(active > 1)[0])
            self.fail(where, f"'active' is not 0/1 (first at vertex {v}: {int(active[v])})")
        if m.num_classes > 0:
            labels = self.dataset(g, where, "labels", np.dtype(np.int64), (n,))
            bad = np.flatnonzero((labels < -1) | (labels >= m.num_classes))
            if bad.size:
                v = int(bad[0])
                self.fail(where, f"'labels' outside -1..{m.num_classes - 1} (first at vertex {v}: {int(labels[v])})")
            else:
                self.class_counts[t] = class_counts(labels, m.num_classes)
        if m.has_targets:
            self.targets(g, where)
        raw = int(self.csr_keys(g, where, "target_").shape[0]) if m.smoothed else nnz
        n_active = int(np.count_nonzero(active))
        for name, got, want in (
            ("nnz", nnz, m.snapshot_nnz[t]),
            ("raw edges", raw, m.snapshot_edges[t]),
            ("active vertices", n_active, m.snapshot_active[t]),
        ):
            if got != want:
                self.fail(where, f"{name} {got} but manifest says {want}")
        return keys, raw, n_active


def _shard_snapshots(
    root: Path, m: Manifest, problems: list[str], checksums: bool, checker: _SnapshotChecker | None = None
) -> Iterator[tuple[int, Any]]:
    """Yield ``(t, result or None)`` for every snapshot, shard by shard, one snapshot in memory."""
    checker = checker or _SnapshotChecker(m, problems)
    progress = Progress(f"{root}: shards checked", len(m.shards))
    for info in progress.iterate(m.shards):
        path = root / "shards" / info.file
        ts = range(info.t_start, info.t_stop)
        if not path.is_file():
            problems.append(f"{path}: shard file missing (snapshots {info.t_start}..{info.t_stop - 1})")
            yield from ((t, None) for t in ts)
            continue
        problem = shard_file_problem(path, info, checksums)
        if problem:
            problems.append(problem)
        try:
            f = h5py.File(path, "r")
        except _H5_ERRORS as e:
            problems.append(f"{path}: cannot open as HDF5: {_one_line(e)}")
            yield from ((t, None) for t in ts)
            continue
        with f:
            try:
                _check_shard_root(f, path, info, m, problems)
            except _H5_ERRORS as e:
                problems.append(f"{path}: cannot read the root group: {_one_line(e)}")
                yield from ((t, None) for t in ts)
                continue
            for t in ts:
                name = snapshot_group_name(t)
                where = f"{path}: {name}"
                try:
                    g = f.get(name)
                except _H5_ERRORS as e:
                    problems.append(f"{where}: cannot read group: {_one_line(e)}")
                    yield t, None
                    continue
                if g is None:
                    problems.append(f"{path}: group '{name}' missing")
                    yield t, None
                    continue
                if not isinstance(g, h5py.Group):
                    problems.append(f"{where}: is not a group")
                    yield t, None
                    continue
                try:
                    res = checker.check(g, where, t)
                except _Invalid:
                    res = None
                except _H5_ERRORS as e:
                    problems.append(f"{where}: cannot read: {_one_line(e)}")
                    res = None
                yield t, res


def _check_shard_root(f: h5py.File, path: Path, info: ShardInfo, m: Manifest, problems: list[str]) -> None:
    """The shard's root attributes (t_start, t_stop, N) and its set of groups agree with the manifest."""
    t_start, t_stop = _attr_int(f, "t_start"), _attr_int(f, "t_stop")
    if (t_start, t_stop) != (info.t_start, info.t_stop):
        problems.append(
            f"{path}: attributes t_start/t_stop = {t_start}/{t_stop}, manifest says {info.t_start}/{info.t_stop}"
        )
    n = _attr_int(f, "num_vertices")
    if n != m.num_vertices:
        problems.append(f"{path}: attribute num_vertices = {n}, manifest says N = {m.num_vertices}")
    expected = {snapshot_group_name(t) for t in range(info.t_start, info.t_stop)}
    extra = sorted(set(f.keys()) - expected)
    if extra:
        problems.append(f"{path}: unexpected group(s) {', '.join(extra[:5])}" + (" ..." if len(extra) > 5 else ""))


def _check_vertices(root: Path, m: Any, problems: list[str]) -> None:
    path = root / "vertices.h5"
    if not path.is_file():
        problems.append(f"{path}: missing (original vertex ids)")
        return
    try:
        with h5py.File(path, "r") as f:
            ids = f.get("original_id")
            if not isinstance(ids, h5py.Dataset):
                problems.append(f"{path}: dataset 'original_id' missing")
            elif ids.shape != (m.num_vertices,):
                problems.append(f"{path}: 'original_id' has shape {ids.shape}, expected ({m.num_vertices},)")
    except _H5_ERRORS as e:
        problems.append(f"{path}: cannot open as HDF5: {_one_line(e)}")


def inspect_dataset(root: str | Path, *, checksums: bool = True) -> dict[str, Any]:
    """Compute statistics of a dataset directory and validate every file, one snapshot at a time.

    Args:
        root: the dataset directory.
        checksums: verify each shard's sha256 (reads every byte twice).

    Returns:
        A JSON-ready dict: ``num_vertices``, ``num_snapshots``, ``num_features``,
        ``feature_names``, ``directed``, ``num_classes``, ``index_dtype``, ``smoothing``,
        ``shards``, ``bytes``, ``nnz`` / ``edges`` / ``active`` (``{min, median, max, total}``
        or None; ``edges``: distinct (u, v) pairs per snapshot, both directions of an undirected edge),
        ``input_events`` (the input's events ``prepare`` or ``from_arrays`` read, None for generated data),
        ``targets``, ``target_values``
        (``{count, min, mean, max}`` or None), ``overlap`` (``{mean, min, max, pairs}`` or None),
        ``class_balance`` (:func:`class_balance`: each class's share of the labelled vertices per split, None
        without labels), ``class_note`` (:func:`class_balance_note`, or None), ``problems`` and ``valid``; an
        event-stream dataset gets :func:`inspect_events`'s dict.

    Raises:
        DataError: the manifest itself is missing or malformed (nothing else can be checked).
    """
    root = Path(root)
    if manifest_format(root) == EVENTS_FORMAT:
        return inspect_events(root, checksums=checksums)
    m = load_manifest(root)
    problems: list[str] = []
    _check_vertices(root, m, problems)
    nnz: list[int] = []
    edges: list[int] = []
    active: list[int] = []
    ratios: list[float] = []
    prev: np.ndarray | None = None
    checker = _SnapshotChecker(m, problems)
    for _, res in _shard_snapshots(root, m, problems, checksums, checker):
        if res is None:
            prev = None  # an unreadable snapshot breaks the consecutive pair on both sides
            continue
        keys, raw, n_active = res
        nnz.append(int(keys.shape[0]))
        edges.append(raw)
        active.append(n_active)
        if prev is not None and keys.shape[0] > 0:
            ratios.append(_overlap(prev, keys) / keys.shape[0])
        prev = keys
    overlap = None
    if ratios:
        r = np.asarray(ratios)
        overlap = {"mean": float(r.mean()), "min": float(r.min()), "max": float(r.max()), "pairs": len(ratios)}
    balance = class_balance(checker.class_counts, m)
    target_values = None
    if checker.target_count:
        c = checker.target_count
        target_values = {"count": c, "min": checker.target_min, "mean": checker.target_sum / c,
                         "max": checker.target_max}
    return {
        "root": str(root),
        "num_vertices": m.num_vertices,
        "num_snapshots": m.num_snapshots,
        "num_features": m.num_features,
        "feature_names": list(m.feature_names),
        "directed": m.directed,
        "num_classes": m.num_classes,
        "targets": m.targets,
        "target_values": target_values,
        "index_dtype": m.index_dtype,
        "smoothing": dict(m.smoothing),
        "shards": len(m.shards),
        "bytes": sum(s.bytes for s in m.shards),
        "checksums_verified": checksums,
        "nnz": _summary(nnz),
        "edges": _summary(edges),
        "input_events": (m.source or {}).get("events"),
        "active": _summary(active),
        "overlap": overlap,
        "empty_snapshots": empty_snapshots(m.snapshot_edges),
        "note": empty_snapshots_note(m.snapshot_edges),
        "class_balance": balance,
        "class_note": class_balance_note(balance),
        "problems": problems,
        "valid": not problems,
    }


def _scan_events(root: Path, m: EventManifest, problems: list[str], checksums: bool
                 ) -> tuple[float | None, float | None, dict[int, float], int | None]:
    """Read every shard once (problems appended): the first and last event times, the times on both sides of
    each split cut (by event index), and the distinct (src, dst) pairs (None when a shard could not be read)."""
    n = np.int64(m.num_vertices)
    wide = m.num_vertices > 3_037_000_499  # N^2 would overflow int64 keys
    pair_blocks: list[np.ndarray] = []
    complete = True
    first_t = last_t = None
    # the time at both sides of each split cut: equal ones mean the cut splits simultaneous events
    cuts = {i for name in SPLIT_NAMES for i in m.split[name]}
    probes = {c - 1 for c in cuts if c > 0} | {c for c in cuts if c < m.num_events}
    at: dict[int, float] = {}
    progress = Progress(f"{root}: shards checked", len(m.shards))
    for scan in progress.iterate(scan_event_shards(root, m, problems, checksums=checksums)):
        if scan.t is None:
            complete = False
            continue
        info = scan.info
        if info.e_start == 0:
            first_t = float(scan.t[0])
        if info.e_stop == m.num_events:
            last_t = float(scan.t[-1])
        for i in probes:
            if info.e_start <= i < info.e_stop:
                at[i] = float(scan.t[i - info.e_start])
        s64, d64 = scan.src.astype(np.int64), scan.dst.astype(np.int64)
        if wide:
            pair_blocks.append(np.unique(np.stack([s64, d64], axis=1), axis=0))
        else:
            pair_blocks.append(unique_ints(s64 * n + d64))
    distinct = None
    if complete and pair_blocks:
        if wide:
            distinct = int(np.unique(np.concatenate(pair_blocks), axis=0).shape[0])
        else:
            distinct = int(unique_ints(np.concatenate(pair_blocks)).shape[0])
    return first_t, last_t, at, distinct


def inspect_events(root: str | Path, *, checksums: bool = True) -> dict[str, Any]:
    """Statistics and a full validation of an event-stream dataset (checks in the module docstring).

    Returns:
        A JSON-ready dict: ``kind`` ("events"), ``root``, ``num_vertices``, ``num_events``,
        ``edge_feature_dim``, ``edge_feature_names``, ``bipartite``, ``num_sources``,
        ``time_range``, ``time_gap`` (the manifest's median gap between training events, TGN's time unit; None
        when not recorded), ``eval_negatives`` (``{origin, val, test}``: fixed negatives per split, or None),
        ``sorted_input``, ``split`` (``{name: {start, stop, events, t_first,
        t_last}}``), ``shards``, ``bytes``, ``checksums_verified``, ``events_per_shard``,
        ``distinct_pairs``, ``repeated_pair_fraction`` (1 - distinct / E), ``problems``, ``valid``.

    Raises:
        DataError: the manifest itself is missing or malformed.
    """
    root = Path(root)
    m = load_event_manifest(root)
    problems: list[str] = []
    _check_vertices(root, m, problems)
    first_t, last_t, at, distinct = _scan_events(root, m, problems, checksums)
    if m.eval_negatives is not None:  # what a run reads of TGB's fixed negatives, checked as it checks them
        try:
            read_eval_negatives(root, m)
            path = root / m.eval_negatives["file"]
            if checksums and file_sha256(path) != m.eval_negatives["sha256"]:
                problems.append(f"{path}: sha256 differs from the manifest (file modified or corrupt)")
        except DataError as e:
            problems.append(str(e))
    mpath = root / "manifest.json"
    lo, hi = m.time_range
    if first_t is not None and first_t != lo:
        problems.append(f"{mpath}: 'time_range' starts at {lo!r}, but the first event is at {first_t!r}")
    if last_t is not None and last_t != hi:
        problems.append(f"{mpath}: 'time_range' ends at {hi!r}, but the last event is at {last_t!r}")
    for name in SPLIT_NAMES[1:]:
        c = m.split[name][0]
        if 0 < c < m.num_events and c - 1 in at and c in at and at[c - 1] == at[c]:
            problems.append(
                f"{mpath}: 'split' cut at event {c} ({name} starts) falls between two events at time {at[c]!r}"
            )
    split = {}
    for name in SPLIT_NAMES:
        a, b = m.split[name]
        split[name] = {"start": a, "stop": b, "events": b - a, "t_first": at.get(a) if b > a else None,
                       "t_last": at.get(b - 1) if b > a else None}
    return {
        "kind": "events",
        "root": str(root),
        "num_vertices": m.num_vertices,
        "num_events": m.num_events,
        "edge_feature_dim": m.edge_feature_dim,
        "edge_feature_names": list(m.edge_feature_names),
        "bipartite": m.bipartite,
        "num_sources": m.num_sources,
        "time_range": [lo, hi],
        "time_gap": m.time_gap,
        "eval_negatives": None if m.eval_negatives is None else {
            "origin": m.eval_negatives["origin"], "val": m.eval_negatives["val"], "test": m.eval_negatives["test"]},
        "sorted_input": m.sorted_input,
        "split": split,
        "shards": len(m.shards),
        "bytes": sum(s.bytes for s in m.shards),
        "checksums_verified": checksums,
        "events_per_shard": _summary([s.num_events for s in m.shards]),
        "distinct_pairs": distinct,
        "repeated_pair_fraction": None if distinct is None else 1.0 - distinct / m.num_events,
        "problems": problems,
        "valid": not problems,
    }


def _validity_lines(r: dict[str, Any]) -> list[str]:
    """The report's closing ``valid`` line, then the first 20 problems (and how many more)."""
    if r["valid"]:
        return ["  valid     yes"]
    lines = [f"  valid     NO, {len(r['problems'])} problem(s):"]
    lines += [f"    {p}" for p in r["problems"][:20]]
    if len(r["problems"]) > 20:
        lines.append(f"    ... and {len(r['problems']) - 20} more")
    return lines


def _fmt_time(v: float | None) -> str:
    return "?" if v is None else f"{v:.10g}"


def format_events_report(r: dict[str, Any]) -> str:
    """Human-readable text of an :func:`inspect_events` result."""
    e = r["num_events"]
    names = r["edge_feature_names"]
    feat = ", ".join(names[:8]) + (f", ... ({len(names)} names)" if len(names) > 8 else "")
    graph = (f"bipartite: {r['num_sources']:,} sources, {r['num_vertices'] - r['num_sources']:,} destinations"
             if r["bipartite"] else "not bipartite")
    split = "  ".join(
        f"{k} {v['events']:,} ({100 * v['events'] / e:.1f}%, t {_fmt_time(v['t_first'])}..{_fmt_time(v['t_last'])})"
        for k, v in r["split"].items()
    )
    pairs = "n/a (a shard could not be read)"
    if r["distinct_pairs"] is not None:
        pairs = f"{r['distinct_pairs']:,} distinct (src, dst), repeated-pair fraction {r['repeated_pair_fraction']:.3f}"
    lines = [
        f"dataset   {r['root']}  (event stream, hpcdgnn-events)",
        f"  vertices N = {r['num_vertices']:,}   events E = {e:,}   edge features D = {r['edge_feature_dim']}"
        + (f" ({feat})" if names else ""),
        f"  {graph}; input {'in time order' if r['sorted_input'] else 'sorted by time (was out of order)'}",
        f"  time      {_fmt_time(r['time_range'][0])} .. {_fmt_time(r['time_range'][1])}; median gap between"
        f" training events {'not recorded' if r['time_gap'] is None else _fmt_time(r['time_gap'])}",
        f"  split     {split}",
        f"  shards    {r['shards']} files, {r['bytes'] / 2**20:,.1f} MiB"
        + ("" if r["checksums_verified"] else " (checksums not verified)")
        + f"; events per shard {_fmt_summary(r['events_per_shard'])}",
        f"  pairs     {pairs}",
    ]
    neg = r.get("eval_negatives")
    if neg:
        per = {k: neg[k] / r["split"][k]["events"] if r["split"][k]["events"] else 0.0 for k in ("val", "test")}
        lines.append(f"  negatives fixed ({neg['origin']}): val {neg['val']:,} ({per['val']:.1f} per event), "
                     f"test {neg['test']:,} ({per['test']:.1f} per event)")
    return "\n".join(lines + _validity_lines(r))


def _fmt_summary(s: dict[str, float] | None) -> str:
    if s is None:
        return "n/a"
    return f"min {s['min']:,}  median {s['median']:,.1f}  max {s['max']:,}  total {s['total']:,}"


def _fmt_targets(r: dict[str, Any]) -> str:
    """The node-target line: name, entries with a target, their range."""
    name, v = r.get("targets"), r.get("target_values")
    if name is None:
        return "none (no regression targets; see prepare --targets)"
    if v is None:
        return f"{name}: no entry has a target"
    cells = r["num_vertices"] * r["num_snapshots"]
    return (f"{name}: {v['count']:,} of {cells:,} (vertex, snapshot) entries, "
            f"min {v['min']:.4g}  mean {v['mean']:.4g}  max {v['max']:.4g}")


def _fmt_classes(balance: dict[str, Any]) -> str:
    """The class line: each class's share of the labelled vertices of the training snapshots."""
    train = balance["train"]
    a, b = train["snapshots"]
    where = (f"of the training snapshots {a}-{b - 1} (task.split's default "
             f"{'/'.join(f'{f:g}' for f in balance['split'])})")
    if not train["fractions"]:
        return f"no labelled vertex {where}"
    shares = train["fractions"]
    shown = ", ".join(f"{c} {100 * f:.1f} %" for c, f in enumerate(shares[:8])) + (", ..." if len(shares) > 8 else "")
    return f"{shown} of the {train['labelled']:,} labelled vertices {where}"


def format_report(r: dict[str, Any]) -> str:
    """Human-readable text of an :func:`inspect_dataset` result."""
    if r.get("kind") == "events":
        return format_events_report(r)
    sm = r["smoothing"]
    ov = r["overlap"]
    lines = [
        f"dataset   {r['root']}",
        f"  vertices N = {r['num_vertices']:,}   snapshots T = {r['num_snapshots']:,}   "
        f"features F = {r['num_features']} ({', '.join(r['feature_names'])})",
        f"  {'directed' if r['directed'] else 'undirected'}, classes {r['num_classes'] or 'none'}, "
        f"index {r['index_dtype']}, edge-life {sm.get('edge_life', 1)}, M-transform {sm.get('mtransform_window', 1)}",
        f"  shards    {r['shards']} files, {r['bytes'] / 2**20:,.1f} MiB"
        + ("" if r["checksums_verified"] else " (checksums not verified)"),
        f"  nnz(A_t)  {_fmt_summary(r['nnz'])}",
        f"  edges     {_fmt_summary(r['edges'])}  (distinct (u, v) per snapshot"
        + (f"; from {r['input_events']:,} input events)" if r.get("input_events") else ")"),
        f"  active    {_fmt_summary(r['active'])}",
        f"  targets   {_fmt_targets(r)}",
        *([f"  classes   {_fmt_classes(r['class_balance'])}"] if r.get("class_balance") else []),
        "  overlap   |E_t ∩ E_t+1| / |E_t+1|: "
        + (
            "n/a"
            if ov is None
            else f"mean {ov['mean']:.3f}  min {ov['min']:.3f}  max {ov['max']:.3f}  ({ov['pairs']} pairs)"
        ),
    ]
    lines += [f"  note      {r[k]}" for k in ("note", "class_note") if r.get(k)]
    return "\n".join(lines + _validity_lines(r))


def add_inspect_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the ``hpcdgnn inspect`` arguments to ``parser``."""
    parser.description = "Print statistics of a dataset directory and validate its manifest and shards."
    parser.add_argument("root", metavar="DIR", help="dataset directory written by 'hpcdgnn prepare' or 'generate'")
    parser.add_argument("--json", action="store_true", help="print the result as JSON instead of text")
    parser.add_argument("--no-checksums", action="store_true", help="skip the sha256 check of each shard (faster)")


def run_inspect(args: argparse.Namespace) -> int:
    """Run ``hpcdgnn inspect``: print the report; return 0 when the dataset is valid.

    Raises:
        DataError: the first validation problem (``file: problem``, with the count of the
            others); the report listing all of them is printed first.
    """
    r = inspect_dataset(args.root, checksums=not getattr(args, "no_checksums", False))
    print(json.dumps(r, indent=1) if getattr(args, "json", False) else format_report(r))
    if not r["valid"]:
        more = len(r["problems"]) - 1
        raise DataError(r["problems"][0] + (f" (and {more} more problem(s), listed above)" if more else ""))
    return 0
