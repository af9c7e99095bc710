"""PyTorch Geometric Temporal dataset JSONs -> snapshots (``hpcdgnn prepare --format pygt-json``).

The files the PyGT loaders download (Rozemberczki et al., CIKM 2021), recognised by their
top-level keys; the file defines the snapshots, so slicing options are an error here.

* **twitter_tennis**: T snapshots with features ``X`` (degree, transitivity), target
  ``log(1 + y_{t+1})`` (``log1p_next_y``); the last snapshot's target is NaN, where PyGT
  clamps ``t + 1`` to ``T - 1``.
* Lagged signals S (T_total × N), ``--lags L`` (default 4): snapshot k stands for step
  ``t = k + L``, features ``S[t-L] .. S[t-1]`` (``lag_L .. lag_1``), target ``S[t]``
  (``signal``): PyGT's ``features[k]`` / ``targets[k]``. chickenpox: S = FX;
  pedalme_london: S = X; montevideo_bus (node-link) and england_covid: S = y z-scored
  per node, ``(S - mean) / (std + 1e-10)``; england_covid's snapshot k uses day k's
  graph, as PyGT pairs ``edge_index[k]`` with ``features[k]``.

``--labels target_bins``: 1 where the next-step target is strictly above the snapshot's
median, else 0 (-1 without a target).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from hpcdgnn.data.prepare._common import (
    DEFAULT_LAGS,
    PreparedInput,
    PrepareOptions,
    check_given_weights,
    concat_snapshots,
    read_input_text,
    shorten,
    stored_edges_per_slice,
)
from hpcdgnn.data.writer import RawSnapshot, as_float32, first_not_finite
from hpcdgnn.errors import DataError

__all__ = ["read_pygt_json", "detect_layout", "LAYOUTS"]

#: Layout names, in the order :func:`detect_layout` tries them.
LAYOUTS = ("montevideo_bus", "england_covid", "twitter_tennis", "chickenpox", "pedalme_london")

#: Added to the per-node standard deviation before dividing, as the PyGT loaders do.
_ZSCORE_EPS = 1e-10


def detect_layout(data: Any) -> str | None:
    """Name of the PyGT layout of a parsed JSON document, or None when unknown."""
    if not isinstance(data, dict):
        return None
    if "nodes" in data and "links" in data:
        return "montevideo_bus"
    if "edge_mapping" in data and "y" in data:
        return "england_covid"
    if "time_periods" in data and "0" in data:
        return "twitter_tennis"
    if "edges" in data and "FX" in data:
        return "chickenpox"
    if "edges" in data and "X" in data:
        return "pedalme_london"
    return None


def _array(path: Path, key: str, value: Any, dtype: type, ndim: int, empty: bool = False) -> np.ndarray:
    """``value`` as an ``ndim``-dimensional array, or a DataError naming the key (``empty``: ``[]`` allowed).

    Integer ids must be whole numbers, and JSON booleans are refused (numpy would read them as 1 and 0).
    """
    if _holds_bool(value):
        raise DataError(f"{path}: key {key!r}: true/false where numbers are expected")
    try:
        arr = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError, OverflowError):
        raise DataError(f"{path}: key {key!r}: not a rectangular numeric array") from None
    if arr.ndim != ndim and not (empty and arr.size == 0):
        raise DataError(f"{path}: key {key!r}: expected {ndim} dimensions, got shape {arr.shape}")
    if not np.isfinite(arr).all():
        raise DataError(f"{path}: key {key!r}: contains NaN or infinite values")
    if np.dtype(dtype).kind == "i":
        bad = (arr != np.floor(arr)) | (np.abs(arr) >= 2.0**62)
        if bad.any():
            raise DataError(f"{path}: key {key!r}: {float(arr[bad].flat[0]):g} is not a vertex id (a whole number)")
    if np.dtype(dtype) == np.float32:
        _check_float32(path, key, arr)  # before the cast, which would warn
    return arr.astype(dtype)


def _check_float32(path: Path, key: str, arr: np.ndarray) -> None:
    """Refuse values past float32, the dtype of stored features: they would be stored as inf."""
    bad = first_not_finite(as_float32(arr))
    if bad is not None:
        raise DataError(f"{path}: key {key!r}: {float(arr[bad]):g} is beyond the range of float32")


def _id_map(node_ids: Any) -> bool:
    """Whether ``node_ids`` maps each name to a distinct integer id 0..N-1 (JSON may mix in "1" or 1.5)."""
    return isinstance(node_ids, dict) and all(type(v) is int for v in node_ids.values()) \
        and sorted(node_ids.values()) == list(range(len(node_ids)))


def _holds_bool(value: Any) -> bool:
    """Whether a parsed JSON value (nested lists) holds a boolean anywhere (iterative: no recursion limit)."""
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, bool):
            return True
        if isinstance(v, list):
            stack.extend(v)
    return False


def _edges(path: Path, key: str, value: Any, n: int) -> tuple[np.ndarray, np.ndarray]:
    """``[[src, dst], ...]`` as two int64 arrays checked against ``[0, n)``."""
    e = _array(path, key, value, np.int64, 2, empty=True)
    if e.size == 0:
        e = e.reshape(0, 2)  # an empty list (a snapshot without edges) has shape (0,)
    if e.shape[1] != 2:
        raise DataError(f"{path}: key {key!r}: expected [src, dst] pairs")
    if e.size and (e.min() < 0 or e.max() >= n):
        raise DataError(f"{path}: key {key!r}: vertex id outside [0, {n})")
    return e[:, 0].copy(), e[:, 1].copy()


def _get(path: Path, data: dict[str, Any], *keys: str) -> Any:
    cur: Any = data
    for i, k in enumerate(keys):
        if not isinstance(cur, dict) or k not in cur:
            raise DataError(f"{path}: missing key {'.'.join(keys[: i + 1])!r}")
        cur = cur[k]
    return cur


def _bins(target: np.ndarray) -> np.ndarray:
    """1 where the target is strictly above the median over vertices, else 0."""
    return (target > np.median(target)).astype(np.int64)


def _zscore(signal: np.ndarray) -> np.ndarray:
    """Per-node z-score over time, as PyGT's montevideo_bus and england_covid loaders."""
    return (signal - signal.mean(axis=0)) / (signal.std(axis=0) + _ZSCORE_EPS)


def _signal_snapshots(
    signal: np.ndarray,
    lags: int,
    edges: list[tuple[np.ndarray, np.ndarray, np.ndarray | None]],
    with_bins: bool,
) -> Iterator[RawSnapshot]:
    """Lagged-signal snapshots; ``edges`` has one entry (static graph) or one per snapshot."""
    for k in range(signal.shape[0] - lags):
        t = k + lags
        src, dst, w = edges[k] if len(edges) > 1 else edges[0]
        x = np.ascontiguousarray(signal[t - lags : t].T, dtype=np.float32)
        labels = _bins(signal[t]) if with_bins else None
        yield RawSnapshot(src=src, dst=dst, weight=w, x=x, labels=labels, time=(float(t), float(t + 1)),
                          targets=np.array(signal[t], dtype=np.float64))


def _signal_layout(path: Path, data: dict[str, Any], layout: str, lags: int
                   ) -> tuple[np.ndarray, list[tuple[np.ndarray, np.ndarray, np.ndarray | None]], np.ndarray]:
    """A signal layout's (T, N) signal, its edges (one (src, dst, weights) or one per snapshot) and vertex ids."""
    dynamic: list[tuple[np.ndarray, np.ndarray, np.ndarray | None]] = []
    if layout == "chickenpox":
        signal = _array(path, "FX", data["FX"], np.float64, 2)
        _check_float32(path, "FX", signal)
        n = signal.shape[1]
        src, dst = _edges(path, "edges", data["edges"], n)
        dynamic.append((src, dst, None))
        node_ids = _get(path, data, "node_ids") if "node_ids" in data else None
        vertex_ids = np.arange(n)
        if _id_map(node_ids) and len(node_ids) == n:
            vertex_ids = np.array(sorted(node_ids, key=node_ids.get))
    elif layout == "pedalme_london":
        signal = _array(path, "X", data["X"], np.float64, 2)
        _check_float32(path, "X", signal)
        n = signal.shape[1]
        src, dst = _edges(path, "edges", data["edges"], n)
        w = _array(path, "weights", data["weights"], np.float64, 1) if "weights" in data else None
        if w is not None and w.shape != src.shape:
            raise DataError(f"{path}: key 'weights': {w.shape[0]} weights for {src.shape[0]} edges")
        dynamic.append((src, dst, w))
        vertex_ids = np.arange(n)
    elif layout == "montevideo_bus":
        nodes = _get(path, data, "nodes")
        try:
            stops = [int(node["bus_stop"]) for node in nodes]
            series = [node["X"]["y"] if isinstance(node.get("X"), dict) else node["y"] for node in nodes]
            links = [(lk["source"], lk["target"], lk["weight"]) for lk in _get(path, data, "links")]
        except (KeyError, TypeError, ValueError) as e:
            raise DataError(f"{path}: malformed node-link entry (missing or bad {e})") from None
        index = {s: i for i, s in enumerate(stops)}
        if len(index) != len(stops):
            raise DataError(f"{path}: key 'nodes': duplicate bus_stop ids")
        y = _array(path, "nodes[].X.y", series, np.float64, 2)
        _check_float32(path, "nodes[].X.y", y)
        signal = _zscore(y.T)
        n = signal.shape[1]
        try:
            src = np.array([index[s] for s, _, _ in links], dtype=np.int64)
            dst = np.array([index[d] for _, d, _ in links], dtype=np.int64)
        except (KeyError, TypeError):  # TypeError: a list or dict endpoint, which no dict key can be
            bad = next(v for lk in links for v in lk[:2] if not isinstance(v, int | float | str) or v not in index)
            raise DataError(f"{path}: key 'links': endpoint {shorten(json.dumps(bad))} is not a bus_stop of 'nodes'"
                            ) from None
        w = _array(path, "links[].weight", [lw for _, _, lw in links], np.float64, 1)
        dynamic.append((src, dst, w))
        vertex_ids = np.array(stops, dtype=np.int64)
    else:  # england_covid
        y = _array(path, "y", data["y"], np.float64, 2)
        _check_float32(path, "y", y)
        periods = data.get("time_periods", y.shape[0])
        if periods != y.shape[0]:  # PyG Temporal's loader counts time_periods: the file contradicts itself
            raise DataError(f"{path}: key 'time_periods' is {shorten(json.dumps(periods))}, but 'y' holds "
                            f"{y.shape[0]} days")
        signal = _zscore(y)
        n = signal.shape[1]
        index = _get(path, data, "edge_mapping", "edge_index")
        weight = _get(path, data, "edge_mapping", "edge_weight")
        for k in range(signal.shape[0] - lags):
            key = str(k)
            if key not in index or key not in weight:
                raise DataError(
                    f"{path}: missing key 'edge_mapping.edge_index.{key}' or 'edge_mapping.edge_weight.{key}'"
                )
            src, dst = _edges(path, f"edge_mapping.edge_index.{key}", index[key], n)
            w = _array(path, f"edge_mapping.edge_weight.{key}", weight[key], np.float64, 1)
            if w.shape != src.shape:
                raise DataError(
                    f"{path}: key 'edge_mapping.edge_weight.{key}': {w.shape[0]} weights for {src.shape[0]} edges"
                )
            dynamic.append((src, dst, w))
        vertex_ids = np.arange(n)
    return signal, dynamic, vertex_ids


def _read_signal(path: Path, data: dict[str, Any], layout: str, opts: PrepareOptions) -> PreparedInput:
    lags = DEFAULT_LAGS if opts.lags is None else int(opts.lags)
    if lags < 1:
        raise DataError(f"{path}: --lags must be >= 1 (got {lags})")
    signal, dynamic, vertex_ids = _signal_layout(path, data, layout, lags)
    n = signal.shape[1]
    if n == 0:  # the writer would name its output
        raise DataError(f"{path}: the signal has no vertices (shape {signal.shape})")
    if signal.shape[0] <= lags:
        raise DataError(f"{path}: {signal.shape[0]} time steps leave no snapshot with --lags {lags}")
    has_weights = dynamic[0][2] is not None
    _check_weights(path, opts, has_weights, [w for _, _, w in dynamic if w is not None])
    T = signal.shape[0] - lags
    counts = _counts([dynamic[k][:2] if len(dynamic) > 1 else dynamic[0][:2] for k in range(T)], n, opts)
    return PreparedInput(
        num_vertices=n,
        snapshots=_signal_snapshots(signal, lags, dynamic, opts.labels == "target_bins"),
        vertex_ids=vertex_ids,
        feature_names=[f"lag_{lags - j}" for j in range(lags)],
        num_classes=2 if opts.labels == "target_bins" else 0,
        targets="signal",
        has_weights=has_weights,
        source={
            "layout": layout,
            "lags": lags,
            "time_steps": int(signal.shape[0]),
            "zscored": layout in ("montevideo_bus", "england_covid"),
        },
        **counts,
    )


def _twitter_snapshots(path: Path, data: dict[str, Any], T: int, n: int, with_bins: bool) -> Iterator[RawSnapshot]:
    for t in range(T):
        snap = _get(path, data, str(t))
        src, dst = _edges(path, f"{t}.edges", _get(path, snap, "edges"), n)
        w = _array(path, f"{t}.weights", _get(path, snap, "weights"), np.float64, 1)
        x = _array(path, f"{t}.X", _get(path, snap, "X"), np.float32, 2)
        if x.shape != (n, 2):
            raise DataError(f"{path}: key '{t}.X': shape {x.shape}, expected ({n}, 2)")
        labels = None
        if t + 1 < T:
            y = _array(path, f"{t + 1}.y", _get(path, data, str(t + 1), "y"), np.float64, 1)
            if y.shape != (n,):
                raise DataError(f"{path}: key '{t + 1}.y': shape {y.shape}, expected ({n},)")
            if (y <= -1).any():
                raise DataError(f"{path}: key '{t + 1}.y': a value <= -1 has no log(1 + y)")
            target = np.log(1.0 + y)  # PyGT's targets[t], computed as PyGT does: np.log(1.0 + y_{t+1})
            if with_bins:
                labels = _bins(target)  # log1p is monotone: the same bins as y
        else:
            target = np.full(n, np.nan)  # no next snapshot (PyGT clamps to y_{T-1}; see the module docstring)
            if with_bins:
                labels = np.full(n, -1, dtype=np.int64)
        yield RawSnapshot(src=src, dst=dst, weight=w, x=x, labels=labels, time=(float(t), float(t + 1)),
                          targets=target)


def _read_twitter(path: Path, data: dict[str, Any], opts: PrepareOptions) -> PreparedInput:
    if opts.lags is not None:
        raise DataError(f"{path}: --lags applies to lagged-signal datasets, not twitter_tennis (features are given)")
    T = _get(path, data, "time_periods")
    if isinstance(T, float) and T.is_integer():
        T = int(T)
    if type(T) is not int:  # int() would read 2.7 as 2 and fail on "abc", null or [3]
        raise DataError(f"{path}: key 'time_periods' is {shorten(json.dumps(T))}, not a whole number of snapshots")
    node_ids = _get(path, data, "node_ids")
    if not _id_map(node_ids) or not node_ids:
        raise DataError(f"{path}: key 'node_ids' must map each name to a distinct id 0..N-1")
    n = len(node_ids)
    if T < 1:
        raise DataError(f"{path}: key 'time_periods' is {T}; no snapshots")
    if opts.weights == "given":
        # Weights are checked up front so a bad value fails before anything is written.
        _check_weights(
            path,
            opts,
            True,
            [_array(path, f"{t}.weights", _get(path, data, str(t), "weights"), np.float64, 1) for t in range(T)],
        )
    edges = [_edges(path, f"{t}.edges", _get(path, data, str(t), "edges"), n) for t in range(T)]
    for t, (src, _) in enumerate(edges):  # before anything is written: the writer would name its output
        w = _get(path, data, str(t), "weights")
        if isinstance(w, list) and len(w) != src.shape[0]:
            raise DataError(f"{path}: key '{t}.weights': {len(w)} weights for {src.shape[0]} edges")
    counts = _counts(edges, n, opts)
    return PreparedInput(
        num_vertices=n,
        snapshots=_twitter_snapshots(path, data, T, n, opts.labels == "target_bins"),
        vertex_ids=np.array(sorted(node_ids, key=node_ids.get)),
        feature_names=["degree", "transitivity"],
        num_classes=2 if opts.labels == "target_bins" else 0,
        targets="log1p_next_y",
        has_weights=True,
        source={"layout": "twitter_tennis", "time_steps": T},
        **counts,
    )


def _counts(parts: list[tuple[np.ndarray, np.ndarray]], n: int, opts: PrepareOptions) -> dict[str, list[int]]:
    """``snapshot_edges`` / ``snapshot_nnz`` of the snapshots' edge lists, for the size estimate."""
    src, dst, slices = concat_snapshots(parts)
    edges, nnz = stored_edges_per_slice(src, dst, n, slices, opts.undirected, max(opts.edge_life, opts.mtransform))
    return {"snapshot_edges": edges, "snapshot_nnz": nnz}


def _check_weights(path: Path, opts: PrepareOptions, has_weights: bool, weights: list[np.ndarray]) -> None:
    if opts.weights != "given":
        return
    if not has_weights:
        raise DataError(f"{path}: --weights given: this dataset has no edge weights; use ones or count")
    check_given_weights(path, weights)


def read_pygt_json(path: Path, opts: PrepareOptions) -> PreparedInput:
    """Read a PyGT dataset JSON (layouts and conventions in the module docstring).

    Args:
        path: the JSON file (plain or compressed).
        opts: prepare options; uses ``weights``, ``labels`` and ``lags``.

    Raises:
        DataError: invalid JSON, an unknown layout, a missing key, or an option that does not apply.
    """
    if any(v is not None for v in (opts.snapshots, opts.window, opts.events_per_snapshot)):
        options = "--snapshots/--window/--events-per-snapshot"
        raise DataError(f"{path}: {options} do not apply to pygt-json (the file defines the snapshots)")
    try:
        data = json.loads(read_input_text(path))
    except json.JSONDecodeError as e:
        raise DataError(f"{path}:{e.lineno}: invalid JSON: {e.msg}") from None
    except RecursionError:
        raise DataError(f"{path}: JSON nested too deeply to read (no PyGT layout nests more than a few levels)"
                        ) from None
    layout = detect_layout(data)
    if layout is None:
        keys = ", ".join(sorted(data)[:8]) if isinstance(data, dict) else type(data).__name__
        raise DataError(f"{path}: not a known PyGT dataset layout (top-level keys: {keys})")
    if layout == "twitter_tennis":
        return _read_twitter(path, data, opts)
    return _read_signal(path, data, layout, opts)
