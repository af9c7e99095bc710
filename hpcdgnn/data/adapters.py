"""Datasets from Python: arrays, PyG's ``TemporalData``, PyTorch Geometric Temporal's signals, TGB's datasets.

Each writes what ``python -m hpcdgnn prepare`` writes (the same writer, the same options), so every strategy
reads it; none imports PyG, PyG Temporal or TGB (their objects are read by their attributes), so none is a
dependency. Vertex ids are taken as given, 0..N-1 (``prepare`` remaps a file's ids; arrays are assumed to be
numbered already, as PyG's are).

* :func:`from_arrays` — timestamped interactions ``(src, dst, t)`` → snapshots (cut by ``snapshots``,
  ``window`` or ``events_per_snapshot``, as ``prepare``) or, with ``kind="events"``, an event stream.
* :func:`from_temporal_data` — PyG's ``TemporalData`` (``src``, ``dst``, ``t``, ``msg``), or a dict of them, → an
  event stream.
* :func:`from_tgb` — a Temporal Graph Benchmark ``tgbl-*`` directory (or TGB's ``LinkPropPredDataset``) → an
  event stream with TGB's fixed evaluation negatives, as ``prepare --format tgb``.
* :func:`from_signal` — PyG Temporal's ``StaticGraphTemporalSignal`` / ``DynamicGraphTemporalSignal`` /
  ``DynamicGraphStaticSignal`` (``edge_index`` / ``edge_indices``, ``edge_weight`` / ``edge_weights``,
  ``features`` / ``feature``, ``targets``) → one snapshot per signal step with its node features and regression
  targets (or class labels); sliding windows as features (METR-LA's (N, F, L)) → one per step of their series.

Under ``mpirun -np P python script.py`` (P > 1) rank 0 writes the dataset from its own arguments: a script may
call the adapter on every rank, as it calls ``hpcdgnn.train`` (the other ranks wait for rank 0 and return its
manifest, or raise its error), or on rank 0 alone (:func:`once_per_job`).
"""

from __future__ import annotations

import contextvars
import dataclasses
import functools
import numbers
import os
import re
import sys
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from hpcdgnn.data.events import EventManifest
from hpcdgnn.data.manifest import Manifest
from hpcdgnn.errors import DataError

__all__ = ["WrittenEventManifest", "WrittenManifest", "from_arrays", "from_signal", "from_temporal_data", "from_tgb"]


def _numpy(value: Any, name: str, where: str) -> np.ndarray:
    """A torch tensor, list or array as a numpy array.

    A floating tensor of a dtype numpy lacks (``bfloat16``, a mixed-precision model's, the ``float8`` ones) is read
    as float32, which holds each of its values exactly: ``Tensor.numpy()`` raises a ``TypeError`` on it.
    """
    if hasattr(value, "detach"):
        value = value.detach().cpu()
        try:
            value = value.numpy()
        except TypeError:
            if not value.is_floating_point():
                raise DataError(f"{where}: {name}: torch dtype {value.dtype} has no numpy equivalent; convert it "
                                "(e.g. .long() for ids, .double() for times)") from None
            value = value.float().numpy()
    try:
        return np.asarray(value)
    except (TypeError, ValueError) as e:
        raise DataError(f"{where}: {name}: not an array ({e})") from None


def _seconds(a: np.ndarray, name: str, where: str) -> np.ndarray:
    """Datetimes (numpy ``datetime64``, pandas' times as numpy gives them) as seconds since 1970-01-01: int64
    where every one is a whole second, else float64 (a float keeps ~16 digits: microseconds of today's dates)."""
    if np.isnat(a).any():
        raise DataError(f"{where}: {name}: NaT at {int(np.argmax(np.isnat(a)))} is not a time")
    whole = a.astype("datetime64[s]")
    if (whole == a).all():
        return whole.astype(np.int64)
    return (a - np.datetime64(0, "s")) / np.timedelta64(1, "s")


def _int64(a: np.ndarray, name: str, where: str) -> np.ndarray:
    """Integers as int64; a uint64 value past int64 would wrap to a negative one, so it is refused."""
    if a.dtype.kind == "u" and a.size and int(a.max()) > np.iinfo(np.int64).max:
        raise DataError(f"{where}: {name}: {int(a.max())} (at {int(np.argmax(a))}) is beyond int64")
    return a.astype(np.int64)


def _whole(value: Any, name: str, where: str) -> int:
    """A count given as an integer (:func:`~hpcdgnn.data.prepare._common.whole`) of at least 1."""
    from hpcdgnn.data.prepare._common import whole

    v = whole(value)
    if v is None:
        raise DataError(f"{where}: {name}: expected a whole number >= 1, got {value!r}")
    if v < 1:
        raise DataError(f"{where}: {name}: expected a whole number >= 1, got {v}")
    return v


def _output(value: Any, where: str) -> Path:
    """The dataset directory given as a path (str or ``os.PathLike``), ``~`` the home directory (as in
    :func:`hpcdgnn.train`'s paths: ``"~/data/mine"`` made ``./~/data/mine``); another type (None, a number) is
    one line, not pathlib's ``TypeError`` from inside the writer."""
    if isinstance(value, (str, os.PathLike)):
        return Path(value).expanduser()
    raise DataError(f"{where}: output: {type(value).__name__} {value!r} is not a path (give a str or os.PathLike)")


def _flag(value: Any, name: str, where: str) -> bool:
    """A yes/no option given as a bool (numpy's too, stored as Python's): ``bool("no")`` is True, so a string or
    a number would silently turn it on."""
    if not isinstance(value, (bool, np.bool_)):
        raise DataError(f"{where}: {name}: expected True or False, got {value!r}")
    return bool(value)


def _checked_options(options: dict[str, Any], where: str) -> dict[str, Any]:
    """``options`` with the types the command line's parser would have enforced: flags as bools, counts as whole
    numbers >= 1 (``int()`` in the slicer read ``snapshots=2.5`` as 2 and "5" as 5), the window as a number;
    what else a value must be is checked where ``prepare`` checks it.

    Raises:
        DataError: naming the option: a flag that is not a bool, a count that is not a whole number >= 1, a
            window that is not a number.
    """
    from hpcdgnn.data.prepare import PrepareOptions
    from hpcdgnn.data.prepare.event_stream import EventOptions

    flags = {f.name for cls in (PrepareOptions, EventOptions) for f in dataclasses.fields(cls)
             if isinstance(f.default, bool)}
    checked = dict(options)
    for name, value in options.items():
        if name in flags:
            checked[name] = _flag(value, name, where)
        elif name in ("snapshots", "events_per_snapshot", "shard_size", "edge_life", "mtransform", "shard_events") \
                and value is not None:
            checked[name] = _whole(value, name, where)
        elif name == "window" and value is not None and (isinstance(value, (bool, np.bool_))
                                                         or not isinstance(value, numbers.Real)):
            raise DataError(f"{where}: window: expected a number of time units, got {value!r}")
    return checked


def _keywords(text: str) -> str:
    """``text``, a message of the code ``prepare`` shares with the adapters, in the adapters' keyword arguments:
    ``--snapshots 5`` -> ``snapshots=5``, ``--allow-large`` -> ``allow_large=True``, ``--weights given`` ->
    ``weights='given'``, a flag named alone -> ``events_per_snapshot=``, a flag a sentence is about (``--lags must
    be``) -> ``lags must be``, ``--output`` -> ``output``. Flags the adapters do not take (``--format``) are left
    as they are."""
    from hpcdgnn.data.prepare import KINDS, LABELS, TARGETS, PrepareOptions
    from hpcdgnn.data.prepare.event_stream import EventOptions

    defaults = {f.name: f.default for cls in (PrepareOptions, EventOptions) for f in dataclasses.fields(cls)}
    defaults["kind"] = KINDS[0]
    words = {*KINDS, *LABELS, *TARGETS, "ones", "count", "given"}  # the values of the string options
    verbs = {"must", "is", "applies", "do", "does", "needs", "takes", "cannot"}  # after a flag a sentence is about

    def keyword(m: re.Match) -> str:
        name, after = m.group(1).replace("-", "_"), m.group(2) or ""
        value = after.strip()
        if name == "output":
            return "output" + after
        if name not in defaults:
            return m.group(0)
        if isinstance(defaults[name], bool):
            return f"{name}=True{after}"
        if value and (value[0] in "'+-." or value[0].isdigit()):  # a number or a quoted value, as given
            return f"{name}={value}"
        if value in words:
            return f"{name}={value!r}"
        if value in verbs:
            return f"{name}{after}"
        return f"{name}={after}"

    return re.sub(r"(?<![\w-])--([a-z][a-z-]*)( (?:'[^']*'|[-+.]?\d[\w.+-]*|[a-z_]+))?", keyword, text)


def _in_python_words(function):
    """``function`` raising the shared code's one-line errors in Python's words (:func:`_keywords`): its users
    call it from Python, where ``--allow-large`` or ``--force`` is no option they can pass."""

    @functools.wraps(function)
    def wrapper(*args, **kwargs):
        try:
            return function(*args, **kwargs)
        except DataError as e:
            raise DataError(_keywords(str(e))) from None

    return wrapper


#: inside an adapter already written once per job (from_temporal_data calls from_arrays): no second round
_WRITING = contextvars.ContextVar("hpcdgnn_adapters_writing", default=False)
#: the MPI tag of rank 0's word to the other ranks (below 32767, the least MPI_TAG_UB)
_TAG = 0x4ADA


def _words(name: str) -> Any:
    """The lines of :func:`once_per_job`'s adapter ``name`` (:class:`hpcdgnn.rank_zero.Words`)."""
    from hpcdgnn.rank_zero import Words

    return Words(name, "writing", "wrote", "output", "rank 0 writes the dataset")


def _load_written(output: str) -> Any:
    """The manifest rank 0 wrote in ``output`` (either kind)."""
    from hpcdgnn.data.events import dataset_kind, load_event_manifest
    from hpcdgnn.data.manifest import load_manifest

    return load_event_manifest(output) if dataset_kind(output) == "events" else load_manifest(output)


def once_per_job(function):
    """``function`` run by rank 0 alone when several MPI ranks call it: P ranks writing one ``output`` would race
    (one finds the directory another is writing, or replaces it under ``force=True``).

    Rank 0 writes and tells every other rank, without waiting for them (:func:`hpcdgnn.rank_zero.on_rank_0`), so
    a script that calls the adapter on rank 0 alone (``if rank == 0``) works as before; a rank that calls it
    waits for rank 0's word about the same ``output`` (at most ``HPCDGNN_START_TIMEOUT`` for rank 0 to start, then
    as long as the writing takes) and returns the manifest read back (:func:`_read_back`), or raises rank 0's
    error as its own.
    """

    @functools.wraps(function)
    def wrapper(*args, **kwargs):
        import inspect

        from hpcdgnn.rank_zero import on_rank_0

        if _WRITING.get():  # from_temporal_data's from_arrays: written once per job by the outer call already
            return function(*args, **kwargs)
        try:
            output = inspect.signature(function).bind(*args, **kwargs).arguments["output"]
            key = os.path.abspath(_output(output, function.__name__))
        except (TypeError, KeyError, DataError, OSError):  # the call itself is wrong: every rank says so alike
            return function(*args, **kwargs)

        def write():
            token = _WRITING.set(True)
            try:
                return function(*args, **kwargs)
            finally:
                _WRITING.reset(token)

        name = function.__name__
        return _located(on_rank_0(_TAG, key, write, _words(name), lambda written: _read_back(key, name, written),
                                  made=lambda _: _fingerprint(key)), key)

    return wrapper


class _Located:
    """A dataset's manifest that is also the path of its directory (``os.PathLike``): what an adapter returns,
    so that it goes where a path goes — ``hpcdgnn.train({"data": {"path": m}, ...})``, ``overrides={"data.path":
    m}``, ``Path(m)``, ``open(Path(m) / "manifest.json")`` — as the string given as ``output`` would. It is the
    manifest otherwise: an instance of its class (:class:`~hpcdgnn.data.manifest.Manifest` or
    :class:`~hpcdgnn.data.events.EventManifest`), equal to the same manifest read back by ``load_manifest``."""

    #: the manifest class this one extends
    _MANIFEST: type

    @property
    def path(self) -> Path | None:
        """The dataset's directory, absolute (None for a copy made by ``dataclasses.replace``: no longer the
        manifest written there)."""
        return self.__dict__.get("_written_to")

    def __fspath__(self) -> str:
        if self.path is None:
            raise TypeError(f"{type(self).__name__}: a changed copy of a written manifest is no dataset's path")
        return str(self.path)

    def __str__(self) -> str:
        # the path, as a pathlib.Path's str, so that f"data.path={m}" (a --set, a line naming the dataset) names it
        return repr(self) if self.path is None else str(self.path)

    def __eq__(self, other: Any) -> bool:
        # the dataclass's __eq__ compares classes exactly: a manifest read back (the plain class) was never equal
        if not isinstance(other, self._MANIFEST):
            return NotImplemented
        return all(getattr(self, f.name) == getattr(other, f.name) for f in dataclasses.fields(self._MANIFEST))

    __hash__ = None  # as the dataclass's: a manifest holds lists


class WrittenManifest(_Located, Manifest):
    """A snapshot dataset's :class:`~hpcdgnn.data.manifest.Manifest`, also its directory's path
    (:class:`_Located`)."""

    _MANIFEST = Manifest


class WrittenEventManifest(_Located, EventManifest):
    """An event dataset's :class:`~hpcdgnn.data.events.EventManifest`, also its directory's path
    (:class:`_Located`)."""

    _MANIFEST = EventManifest


def _located(manifest: Manifest | EventManifest, output: str) -> WrittenManifest | WrittenEventManifest:
    """``manifest`` as the path of ``output`` too (:class:`_Located`), its fields the same objects."""
    kind = WrittenEventManifest if isinstance(manifest, EventManifest) else WrittenManifest
    located = object.__new__(kind)
    located.__dict__.update(manifest.__dict__)  # a frozen dataclass's fields: set as its own __init__ sets them
    located.__dict__["_written_to"] = Path(output)
    return located


def _fingerprint(output: str) -> str:
    """The sha256 of ``output``'s ``manifest.json`` (it records every shard's sha256): what rank 0 wrote, as the
    other ranks compare it with what they read there."""
    import hashlib

    return hashlib.sha256((Path(output) / "manifest.json").read_bytes()).hexdigest()


def _read_back(key: str, name: str, written: str):
    """Another rank's part of :func:`once_per_job` once rank 0 has written ``key``: the manifest there, checked
    against rank 0's fingerprint of it (``written``; ``""``: none to check).

    Raises:
        DataError: this rank cannot read ``key``, or reads another dataset there than rank 0 wrote.
    """
    from hpcdgnn.comm.world import world_rank_size

    rank = world_rank_size()[0]
    where = "output must be on a filesystem every rank reads"
    try:
        m = _load_written(key)
        seen = _fingerprint(key)
    except (DataError, OSError) as e:  # rank 0 wrote it where this rank does not see it (a node-local directory)
        raise DataError(f"{name}: rank 0 wrote {key}, which rank {rank} cannot read ({e}): under "
                        f"mpirun rank 0 writes the dataset, so {where}") from None
    if written and seen != written:  # a node-local directory of the same name, holding an older dataset
        raise DataError(f"{name}: rank 0 wrote {key}, but rank {rank} reads another dataset there "
                        f"(its manifest.json differs: a node-local directory holding an older one): under mpirun "
                        f"rank 0 writes the dataset, so {where}")
    return m


def _sparse_ids(src: np.ndarray, dst: np.ndarray, n: int) -> str:
    """What to say where ids numbered as given (N = the largest + 1) are far sparser than the vertices they name
    (N above 16 × the distinct ones), else an empty string; :data:`_DENSE` says what to do."""
    distinct = np.unique(np.concatenate([src, dst])).shape[0]
    return f"vertex ids reach {n - 1:,} for {distinct:,} distinct vertices" if n > 16 * distinct else ""


_DENSE = "number them densely, e.g. ids = np.unique(np.r_[src, dst], return_inverse=True)[1]"


def _floats(value: Any, name: str, where: str) -> np.ndarray:
    """Numbers as float64: strings and objects are refused (numpy would parse "1.5" and fail on "a")."""
    a = _numpy(value, name, where)
    if a.dtype.kind not in "biuf":
        raise DataError(f"{where}: {name}: expected numbers, got dtype {a.dtype}")
    return a.astype(np.float64)


def _finite(a: np.ndarray, stored: np.ndarray, name: str, where: str) -> None:
    """Refuse what ``stored`` (``a`` as the dataset keeps it) holds as NaN or inf, naming the entry: only
    ``validate`` would notice it after the write."""
    from hpcdgnn.data.writer import first_not_finite

    k = first_not_finite(stored)
    if k is not None:
        v = float(a[k])
        why = "is not a finite number" if not np.isfinite(v) else f"does not fit in {stored.dtype}"
        raise DataError(f"{where}: {name}: {v:g} at {k if len(k) > 1 else k[0]} {why}")


def _ids(value: Any, name: str, where: str, num_vertices: int | None) -> np.ndarray:
    """Vertex ids as int64, refusing any other dtype: floats too, where pandas leaves integer ids after a NaN.

    Floats are not cast here: a float32 holds integers exactly only up to 2**24, so ids read as floats may already
    have been rounded; the caller casts, told how, or is shown the first id that is no whole number.
    """
    a = _numpy(value, name, where)
    if a.ndim != 1 or (a.size and a.dtype.kind not in "iu"):
        raise DataError(f"{where}: {name}: expected a 1-D array of integer vertex ids, got shape {a.shape} "
                        f"dtype {a.dtype}{_float_ids(a) if a.ndim == 1 else ''}")
    a = _int64(a, name, where)
    if a.size and a.min() < 0:
        raise DataError(f"{where}: {name}: negative vertex id {int(a.min())} (at {int(np.argmin(a))})")
    if num_vertices is not None and a.size and a.max() >= num_vertices:
        raise DataError(f"{where}: {name}: vertex id {int(a.max())} (at {int(np.argmax(a))}) is beyond "
                        f"num_vertices {num_vertices} (ids are 0 .. N-1)")
    return a


def _float_ids(a: np.ndarray) -> str:
    """What to add to the refusal of float ids ``a`` (1-D): how to cast them where each is a whole number, else the
    first that is not; nothing for another dtype."""
    if a.dtype.kind != "f" or not a.size:
        return ""
    with np.errstate(invalid="ignore"):
        bad = ~np.isfinite(a) | (a != np.floor(a))
    if bad.any():
        k = int(np.argmax(bad))
        return f" ({a[k]:g} at {k} is no whole number)"
    return " (every value is a whole number: cast them, e.g. .astype(np.int64) for numpy or pandas, .long() for torch)"


def _edges(src, dst, t, where: str, num_vertices: int | None) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """Checked (src, dst, t) and N."""
    if num_vertices is not None:
        num_vertices = _whole(num_vertices, "num_vertices", where)
    s, d = _ids(src, "src", where, num_vertices), _ids(dst, "dst", where, num_vertices)
    times = _numpy(t, "t", where)
    if not (s.shape == d.shape == times.shape):
        raise DataError(f"{where}: src, dst and t differ in length ({s.shape[0]}, {d.shape[0]}, "
                        f"{times.reshape(-1).shape[0]}); one entry per interaction")
    if s.size == 0:
        raise DataError(f"{where}: no interactions")
    if times.dtype.kind == "M":
        times = _seconds(times, "t", where)
    if times.dtype.kind not in "iuf":
        raise DataError(f"{where}: t: expected numbers or datetime64, got dtype {times.dtype}" + (
            " (time-zone aware pandas times: .dt.tz_convert(None) first)" if times.dtype.kind == "O" else ""))
    if times.dtype.kind == "f" and not np.isfinite(times).all():
        k = int(np.argwhere(~np.isfinite(times))[0][0])
        raise DataError(f"{where}: t: {times[k]} at {k} is not a finite time")
    if times.min() < 0:
        raise DataError(f"{where}: t: negative time {times.min()} (at {int(np.argmin(times))}); times count from 0 "
                        "or an epoch")
    times = _int64(times, "t", where) if times.dtype.kind in "iu" else times.astype(np.float64)
    n = num_vertices if num_vertices is not None else int(max(s.max(), d.max())) + 1
    return s, d, times, n


@once_per_job
@_in_python_words
def from_arrays(src, dst, t, output: str | Path, *, kind: str = "snapshots", num_vertices: int | None = None,
                weight=None, edge_features=None, feature_names: list[str] | None = None, **options: Any):
    """Write timestamped interactions as a dataset, as ``prepare`` would from a file holding them.

    Args:
        src: (E,) integer source vertex ids in 0 .. N-1 (numpy, torch or lists).
        dst: (E,) integer destination vertex ids, likewise.
        t: (E,) non-negative times (any order: sorted stably, as ``prepare`` does); ``datetime64`` (pandas'
            times) as seconds since 1970-01-01.
        output: the dataset directory (new or empty; ``force=True`` replaces one).
        kind: ``"snapshots"`` or ``"events"``.
        num_vertices: N (default: the largest id + 1).
        weight: (E,) edge weights (snapshots, with ``weights="given"``: without it they are refused, not dropped).
        edge_features: (E, D) per-event features (events).
        feature_names: the D features' names (events).
        **options: ``prepare``'s options of that kind: ``snapshots``, ``window``, ``events_per_snapshot``,
            ``undirected``, ``weights``, ``labels``, ``targets``, ``shard_size``... (snapshots);
            ``split``, ``shard_events``, ``time_unit`` (events).

    Returns:
        The dataset's manifest, also the path of ``output`` (:class:`WrittenManifest`, or
        :class:`WrittenEventManifest` for events): ``data.path`` of a job takes it.

    Raises:
        DataError: one line naming the array and the entry: ids beyond N or negative, negative or non-finite
            times, lengths that differ, values past int64, non-numeric or non-finite weights or edge features,
            negative given weights, ``weight`` without ``weights="given"``; an unknown option or one of the other
            kind, a flag that is not a bool, a ``snapshots`` or ``events_per_snapshot`` that is not a whole
            number >= 1; an output over ``prepare``'s size limits without ``allow_large=True`` (refused before
            anything as large as N is allocated). Messages name the keyword arguments (``snapshots=5``), not
            ``prepare``'s flags. Nothing is written.
    """
    from hpcdgnn.data.prepare import (
        KINDS,
        PrepareOptions,
        _check_options,
        check_option_names,
        options_used,
        write_prepared,
    )
    from hpcdgnn.data.prepare._common import PreparedInput, check_given_weights, slice_events
    from hpcdgnn.data.prepare.event_stream import EVENT_ONLY_OPTIONS, ParsedEvents, _check, option_flag, write_parsed
    from hpcdgnn.data.prepare.snap import EdgeList, _snapshots, slicing_kwargs, snapshot_counts
    from hpcdgnn.data.writer import as_float32, check_output

    where = Path("from_arrays")
    output = _output(output, str(where))
    if kind not in KINDS:
        raise DataError(f"{where}: unknown kind {kind!r}; choose from {', '.join(KINDS)}")
    check_option_names(where, options)
    options = _checked_options(options, str(where))
    s, d, times, n = _edges(src, dst, t, str(where), num_vertices)
    w = None if weight is None else _floats(weight, "weight", str(where))
    if w is not None and w.shape != s.shape:
        raise DataError(f"{where}: weight: shape {w.shape}, expected ({s.shape[0]},): one weight per interaction")
    if w is not None:
        _finite(w, w, "weight", str(where))
    check_output(output, options.get("force", False), ())
    provenance = {"input": "arrays (hpcdgnn.data.adapters)", "format": "arrays"}
    if kind == "events":
        if options.get("columns") is not None:
            raise DataError(f"{where}: columns: arrays have no columns to map")
        opts = _check(where, "snap", options)
        if w is not None:
            raise DataError(f"{where}: weight: an event stream keeps per-event values as edge_features")
        sparse = _sparse_ids(s, d, n)
        if n > 2**20 and sparse:  # before np.arange(N): ids ~1e13 raised MemoryError here
            raise DataError(f"{where}: {sparse}: an event stream's vertices are 0 .. N-1 (the node memory holds N "
                            f"rows); {_DENSE}")
        num_sources = n
        if opts.bipartite:  # sources 0..S-1, destinations S..N-1 (PyG's JODIE TemporalData numbers them so)
            num_sources = int(s.max()) + 1
            if d.min() < num_sources:
                raise DataError(f"{where}: bipartite: destination id {int(d.min())} (at {int(np.argmin(d))}) is "
                                f"below the sources' 0 .. {num_sources - 1}; number sources first, then "
                                "destinations")
        order = np.argsort(times, kind="stable")
        feats = None
        if edge_features is not None:
            raw = _floats(edge_features, "edge_features", str(where))
            feats = as_float32(raw)
            _finite(raw, feats, "edge_features", str(where))
            feats = feats.reshape(-1, 1) if feats.ndim == 1 else feats
            if feats.ndim != 2 or feats.shape[0] != s.shape[0]:
                raise DataError(f"{where}: edge_features: shape {feats.shape}, expected ({s.shape[0]}, D)")
            feats = feats[order]
        names = list(feature_names) if feature_names is not None else \
            [f"f{i}" for i in range(0 if feats is None else feats.shape[1])]
        if feats is not None and len(names) != feats.shape[1]:
            raise DataError(f"{where}: feature_names: {len(names)} names for {feats.shape[1]} edge features")
        parsed = ParsedEvents(src=s[order], dst=d[order], time=times[order], efeat=feats, feature_names=names,
                              vertex_ids=np.arange(n), bipartite=opts.bipartite, num_sources=num_sources,
                              inversions=int(np.count_nonzero(times[1:] < times[:-1])))
        return _noted(write_parsed(parsed, opts, output, where, provenance,
                                   warn=lambda text: _warn(f"{output}: {text}")), output)
    for name, default in EVENT_ONLY_OPTIONS.items():
        if options.pop(name, default) != default:
            raise DataError(f"{where}: {option_flag(name).lstrip('-').replace('-', '_')} applies only to "
                            "kind='events'")
    if edge_features is not None:
        raise DataError(f"{where}: edge_features: snapshots carry node features, not per-event ones "
                        "(kind='events' keeps them)")
    opts = PrepareOptions(**options)
    _check_options(where, "snap", opts)
    if opts.weights == "given" and w is None:
        raise DataError(f"{where}: weights='given' needs weight=")
    if w is not None and opts.weights != "given":  # the writer would store weights=, not these
        raise DataError(f"{where}: weight= is given, but weights={opts.weights!r} stores "
                        f"{'1' if opts.weights == 'ones' else 'the event count'} per edge instead; pass "
                        "weights='given' to store them (or leave weight= out)")
    if opts.weights == "given":
        check_given_weights(where, [w], "weight", "use weights='ones' or 'count'")
    # ids as given make N the largest id + 1 (1e13 for sparse ids): the writer makes 0 .. N-1 (vertex_ids None)
    # only once the size check has passed; the edge list's (N,) ids are a stand-in without memory
    edges = EdgeList(s, d, times, w, np.broadcast_to(np.int64(0), (n,)))
    slices = slice_events(edges.time, where, **slicing_kwargs(opts))
    prepared = PreparedInput(
        num_vertices=n, snapshots=_snapshots(edges, slices), vertex_ids=None,
        has_weights=w is not None, source={"events": int(s.shape[0]), "time_min": float(edges.time[0]),
                                           "time_max": float(edges.time[-1])},
        **snapshot_counts(edges.src, edges.dst, n, slices, opts))
    try:
        manifest = write_prepared(prepared, opts, output, where, "snap",
                                  {**provenance, **prepared.source, "options": options_used(opts)},
                                  warn=lambda text: _warn(f"{output}: {text}"))
    except DataError as e:
        sparse = _sparse_ids(s, d, n)
        if sparse:  # fewer snapshots or allow_large would not help: every snapshot holds N rows
            raise DataError(f"{e}; the {sparse}: {_DENSE}") from None
        raise
    return _noted(manifest, output)


@once_per_job
def from_temporal_data(data, output: str | Path, *, bipartite: bool | None = None, **options: Any):
    """PyG's ``TemporalData`` (``src``, ``dst``, ``t``, optional ``msg``) as an event stream.

    Args:
        data: a ``torch_geometric.data.TemporalData`` (or anything with those attributes), or a mapping with those
            keys (``TemporalData.to_dict()``, ``{"src": ..., "dst": ..., "t": ..., "msg": ...}``); ``y``, a
            TemporalData's per-event labels, is accepted and not stored (an event stream has none), as from a
            TemporalData.
        output: the dataset directory.
        bipartite: sources and destinations are separate sets (negatives are drawn from the destinations);
            default: when every destination id is above every source id, as in PyG's JODIE datasets.
        **options: ``split``, ``shard_events``, ``time_unit``, ``force``; ``num_vertices`` (default
            ``data.num_nodes``).

    Returns:
        The event dataset's manifest, also the path of ``output`` (:class:`WrittenEventManifest`).

    Raises:
        DataError: as :func:`from_arrays`, or the data lacks ``src``, ``dst`` or ``t``; a mapping with a key of
            none of those (a misspelt ``"dest"`` would otherwise be dropped); an unknown option, naming the ones
            this function takes (PyG's ``val_ratio``/``test_ratio``: ``split``).
    """
    where = "from_temporal_data"
    _output(output, where)
    if isinstance(data, Mapping):
        data = _temporal_mapping(data, where)
    elif callable(getattr(data, "keys", None)):  # a TemporalData: what it holds beyond an event stream is said
        extra = [k for k in data.keys() if k not in _TEMPORAL_KEYS]
        if extra:
            _warn(f"{output}: data.{', data.'.join(map(str, extra))} not stored: an event stream holds src, dst, t and "
                  "msg (the events' features)")
    for key in ("src", "dst", "t"):
        if getattr(data, key, None) is None:
            raise DataError(f"{where}: the data has no {key!r} (a TemporalData has src, dst, t, msg)")
    msg = getattr(data, "msg", None)
    if msg is not None and len(getattr(msg, "shape", ())) == 2 and msg.shape[1] == 0:  # a list has no shape
        msg = None  # a 1-D msg is one feature, as from_arrays takes 1-D edge_features
    _known_options(where, options, _TEMPORAL_OPTIONS)
    if options.pop("kind", "events") != "events":  # from_arrays' own argument: passed on, it would be given twice
        raise DataError(f"{where}: kind: a TemporalData is an event stream, written as kind='events'; for snapshots "
                        "call from_arrays(data.src, data.dst, data.t, output, snapshots=...)")
    of_data = "num_vertices" not in options  # N is data.num_nodes (the messages say so)
    n = options.pop("num_vertices", getattr(data, "num_nodes", None))
    if bipartite is None:
        src, dst = _numpy(data.src, "src", "from_temporal_data"), _numpy(data.dst, "dst", "from_temporal_data")
        bipartite = bool(src.size and dst.min() > src.max())
    try:
        return from_arrays(data.src, data.dst, data.t, output, kind="events", num_vertices=n, edge_features=msg,
                           bipartite=bipartite, **options)
    except DataError as e:  # from_arrays' words as the caller's: this function, data's msg and num_nodes
        text = re.sub(r"^from_arrays: ", f"{where}: ", str(e))
        text = re.sub(r"(?<![\w.])edge_features(?!\w)", "msg", text)
        text = text.replace("or use kind='snapshots'", "or for snapshots from_arrays(..., snapshots=...)")
        if of_data and n is not None:
            text = re.sub(r"(?<![\w.])num_vertices (\d+)", r"num_vertices \1 (data.num_nodes)", text)
        raise DataError(text) from None


#: a TemporalData's stored attributes: the keys a mapping given for one may have
_TEMPORAL_KEYS = ("src", "dst", "t", "msg", "y")

#: the keyword options :func:`from_temporal_data` takes (``bipartite`` is its own argument): an event stream's
#: (``columns`` is a file's; ``kind``, taken as ``"events"`` alone, is no choice to offer)
_TEMPORAL_OPTIONS = ("allow_large", "bipartite", "force", "num_vertices", "shard_events", "split", "time_unit")

#: other libraries' names for the split's fractions (PyG's ``TemporalData.train_val_test_split``)
_SPLIT_NAMES = ("train_ratio", "val_ratio", "test_ratio")


def _known_options(where: str, options: dict[str, Any], takes: tuple[str, ...]) -> None:
    """Refuse an option no kind of dataset has, offering only the options the adapter ``where`` takes (``prepare``'s
    full list names snapshot options an event stream refuses); a snapshot option is left to the writer's check,
    which says it applies to snapshots only.

    Args:
        where: the adapter, as messages name it.
        options: its keyword options.
        takes: the options it takes.

    Raises:
        DataError: naming the option; for PyG's ``val_ratio``/``test_ratio`` the ``split`` that gives them.
    """
    from hpcdgnn.data.prepare import PrepareOptions
    from hpcdgnn.data.prepare.event_stream import EventOptions

    known = {f.name for cls in (PrepareOptions, EventOptions) for f in dataclasses.fields(cls)} | {*takes, "kind"}
    for name in options:
        if name in _SPLIT_NAMES:
            raise DataError(f"{where}: {name}: unknown option; the fractions are one argument, "
                            "split=(train, val, test) in time order, e.g. split=(0.70, 0.15, 0.15) for PyG's "
                            "val_ratio=0.15, test_ratio=0.15")
        if name not in known:
            from hpcdgnn.config.load import _did_you_mean

            raise DataError(f"{where}: {name}: unknown option; {_did_you_mean(name, list(takes))}")


def _temporal_mapping(data: Mapping, where: str) -> Any:
    """A mapping given as a TemporalData (its ``to_dict()``) as an object with those attributes.

    Raises:
        DataError: naming the keys a TemporalData has not, with the likely one for a single misspelt key.
    """
    from types import SimpleNamespace

    from hpcdgnn.config.load import _did_you_mean

    unknown = [k for k in data if k not in _TEMPORAL_KEYS]
    if len(unknown) == 1:
        raise DataError(f"{where}: data[{unknown[0]!r}]: unknown key; "
                        f"{_did_you_mean(str(unknown[0]), list(_TEMPORAL_KEYS))}")
    if unknown:
        raise DataError(f"{where}: data: unknown keys {', '.join(map(repr, unknown))}; a TemporalData's are "
                        f"{', '.join(_TEMPORAL_KEYS)}")
    missing = [k for k in ("src", "dst", "t") if data.get(k) is None]
    if missing:
        raise DataError(f"{where}: data has no {missing[0]!r} key (a TemporalData's mapping has src, dst, t and "
                        "optionally msg)")
    return SimpleNamespace(**{k: data.get(k) for k in _TEMPORAL_KEYS})


#: the attributes of PyG Temporal's three signal classes that :func:`from_signal` reads: the keys a mapping may have
_SIGNAL_KEYS = ("edge_index", "edge_weight", "edge_indices", "edge_weights", "features", "feature", "targets")


def _signal_mapping(signal: Mapping, where: str) -> Any:
    """A mapping given as a PyG Temporal signal (its attributes as keys) as an object with those attributes.

    Raises:
        DataError: naming a key no signal has (with the likely one for a misspelling), or one of ``edge_index`` and
            ``edge_indices`` both or neither given.
    """
    from types import SimpleNamespace

    from hpcdgnn.config.load import _did_you_mean

    for k in signal:
        if k not in _SIGNAL_KEYS:
            raise DataError(f"{where}: signal[{k!r}]: unknown key; {_did_you_mean(str(k), list(_SIGNAL_KEYS))}")
    graphs = [k for k in ("edge_index", "edge_indices") if k in signal]
    if len(graphs) != 1:
        raise DataError(f"{where}: signal: give 'edge_index' (one graph for every step) or 'edge_indices' (one per "
                        f"step){', not both' if graphs else ''}")
    # no weights: as the signal classes hold them (None, or one None per step)
    unweighted = {"edge_weight": None} if graphs[0] == "edge_index" else {
        "edge_weights": [None] * len(signal["edge_indices"])}
    return SimpleNamespace(**{**unweighted, **signal})


@once_per_job
@_in_python_words
def from_signal(signal, output: str | Path, *, labels: bool = False, force: bool = False, shard_size: int = 8,
                reverse_edges: bool = False):
    """A PyG Temporal signal as snapshots: step k's graph, its node features as X and its targets.

    Edge ``(edge_index[0][e], edge_index[1][e])`` becomes entry (u, v) of A_k, which the models aggregate as
    Ã·X (u sums v's features) where PyG's layers sum at v: on a directed graph ``reverse_edges=True`` trains PyG
    Temporal's model (docs/data.md, "Edge direction").

    Args:
        signal: a ``StaticGraphTemporalSignal`` (``edge_index``, ``edge_weight``) or a
            ``DynamicGraphTemporalSignal`` (``edge_indices``, ``edge_weights``), with ``features`` and ``targets``
            (one (N, F) and one (N,) array per step); or a ``DynamicGraphStaticSignal``, whose one ``feature``
            (N, F) is every step's. Lags as features (chickenpox, WikiMath, Windmill*: (N, lags), the target the
            next value) are stored as they are: ``task.horizon: 1`` is the signal's task. Windows as features
            (METR-LA, PEMS-BAY: ``features[k]`` (N, F, L), window k of a series, ``targets[k]`` (N, H) or
            (N, C, H), the H values after it) are stored as the series they were cut from (T + L - 1 steps), the
            target at each step the value after it (channel 0's): a ``UserWarning`` and the manifest's
            ``source["windows"]`` say so, and which ``task.horizon`` and ``strategy.window`` give the signal's
            task; each step takes the graph of the window it ends.
        output: the dataset directory.
        labels: the targets are integer classes (node classification), not regression targets; a class rare among
            the training snapshots' labelled vertices is told in a ``UserWarning``, as ``prepare`` warns of it.
        force: replace a non-empty ``output``.
        shard_size: snapshots per shard file.
        reverse_edges: store each edge as (v, u), so that a vertex sums its in-neighbours, as PyG's layers do.

    Returns:
        The dataset's manifest, also the path of ``output`` (:class:`WrittenManifest`).

    Raises:
        DataError: steps that disagree in N or F, features that are not (N, F) or (N, F, L), targets of another
            length, edges beyond N, non-numeric or non-finite features (or past float32), negative edge weights,
            edge weights at some steps but not at others; windows that are not the one before them one step on
            (cut from no one series), or their targets not the one before one step on; with ``labels``, targets
            that are not integers -1 .. C-1 with 2 <= C <= N * steps; ``labels``, ``force`` or ``reverse_edges``
            not a bool. Nothing written.
    """
    from hpcdgnn.data.inspect import class_balance, class_balance_note
    from hpcdgnn.data.prepare import _counted
    from hpcdgnn.data.prepare._common import check_given_weights
    from hpcdgnn.data.writer import RawSnapshot, check_output, write_dataset

    where = "from_signal"
    output = _output(output, where)
    if isinstance(signal, Mapping):  # read by attribute, a dict had "no features" whatever it held
        signal = _signal_mapping(signal, where)
    shard_size = _whole(shard_size, "shard_size", where)
    labels, force, reverse_edges = (_flag(v, k, where) for k, v in (("labels", labels), ("force", force),
                                                                   ("reverse_edges", reverse_edges)))
    # list(): a list of steps or one stacked (T, N, F) array alike (``or []`` would ask an array for its truth)
    features, targets = ([] if v is None else list(v) for v in (getattr(signal, "features", None),
                                                                getattr(signal, "targets", None)))
    if not features and getattr(signal, "feature", None) is not None:  # DynamicGraphStaticSignal: one X throughout
        steps = getattr(signal, "edge_indices", None)
        features = [signal.feature] * len(targets if steps is None else steps)
    if not features:
        raise DataError(f"{where}: the signal has no features (a PyG Temporal signal has features and targets)")
    if targets and len(targets) != len(features):
        raise DataError(f"{where}: {len(features)} feature steps but {len(targets)} target steps")
    dynamic = hasattr(signal, "edge_indices")
    edge_index = signal.edge_indices if dynamic else [signal.edge_index] * len(features)
    edge_weight = (signal.edge_weights if dynamic else [signal.edge_weight] * len(features))
    if len(edge_index) != len(features):
        raise DataError(f"{where}: {len(edge_index)} edge sets for {len(features)} steps")
    weights_name = "edge_weights" if dynamic else "edge_weight"
    if len(edge_weight) != len(features):
        raise DataError(f"{where}: {weights_name}: {len(edge_weight)} weight sets for {len(features)} steps")
    given = [w is not None for w in edge_weight]
    if any(given) and not all(given):  # one dataset stores given weights or ones, not some of each
        raise DataError(f"{where}: {weights_name}[{given.index(False)}] is None but {weights_name}"
                        f"[{given.index(True)}] holds weights: give every step's edge weights or none")
    xs, window = _feature_steps(features, where)
    n, f = xs[0].shape
    unwound: dict[str, Any] = {}
    if window is None:
        ys = [_floats(y, f"targets[{k}]", where).reshape(-1) for k, y in enumerate(targets)]
        for k, y in enumerate(ys):
            if y.shape[0] != n:
                raise DataError(f"{where}: targets[{k}] has {y.shape[0]} values for N = {n} vertices")
    else:
        ys, unwound = _window_targets(targets, xs, window, labels, where)
    for s, y in enumerate([] if labels else ys):  # the writer, after the fact, named the output and a snapshot
        inf = np.isinf(y)
        if inf.any():
            i = int(np.argmax(inf))
            k = s if window is None else s - window + 1  # the window ending at step s
            raise DataError(f"{where}: targets[{k}]: {y[i]:g} at {i} is not a target (NaN marks none; inf is refused)")
    num_classes = _num_classes(ys, n, where) if labels and targets else 0
    check_output(output, force, ())

    def snapshots():
        for s, x in enumerate(xs):
            # step s of an unwound series: the graph of the window ending there (window 0's before it ends)
            k = s if window is None else max(s - window + 1, 0)
            ei = _numpy(edge_index[k], f"edge_index[{k}]", where)
            if ei.ndim != 2 or ei.shape[0] != 2:
                raise DataError(f"{where}: edge_index[{k}]: shape {ei.shape}, expected (2, E)")
            src, dst = _ids(ei[0], f"edge_index[{k}][0]", where, n), _ids(ei[1], f"edge_index[{k}][1]", where, n)
            w = None if edge_weight[k] is None else _floats(edge_weight[k], f"edge_weight[{k}]", where)
            if w is not None and w.shape != src.shape:
                raise DataError(f"{where}: {weights_name}[{k}]: shape {w.shape}, expected ({src.shape[0]},): one "
                                f"weight per edge of edge_index[{k}]")
            if w is not None:  # stored as given weights: GCN-normalised, as prepare's --weights given
                _finite(w, w, f"edge_weight[{k}]", where)
                check_given_weights(where, [w], f"edge_weight[{k}]", "a signal's edge weights are given weights")
            y = None
            lab = None
            if targets:
                y = ys[s]
                if labels:
                    lab, y = y.astype(np.int64), None
            yield RawSnapshot(src=src, dst=dst, weight=w, x=x, labels=lab, targets=y, time=(float(s), float(s + 1)))

    has_w = all(given)
    counts: dict[int, np.ndarray] = {}
    # no note of snapshots without edges: a signal's steps are its own (prepare's advice, other windows, is no
    # option here); a rare class is noted, as prepare notes it
    manifest = write_dataset(output, _counted(snapshots(), num_classes, counts) if num_classes else snapshots(),
                             num_vertices=n, weights="given" if has_w else "ones",
                             feature_names=[f"x{i}" for i in range(f)], num_classes=num_classes,
                             targets="signal" if targets and not labels else None, shard_snapshots=shard_size,
                             source={"input": f"{type(signal).__name__} (hpcdgnn.data.adapters)",
                                     "format": "signal", "options": {"reverse_edges": bool(reverse_edges)},
                                     **({"windows": unwound} if unwound else {})},
                             force=force, reverse=reverse_edges)
    if unwound:  # once written: a refused signal is told its error alone
        _warn(_unwound_note(unwound, len(xs)))
    note = class_balance_note(class_balance(counts, manifest)) if num_classes else None
    if note:
        _warn(f"{output}: {note}")
    return manifest


@once_per_job
@_in_python_words
def from_tgb(dataset, output: str | Path, *, force: bool = False, shard_events: int | None = None,
             time_unit: float | None = None):
    """A Temporal Graph Benchmark link-prediction dataset (``tgbl-*``) as an event stream with its fixed evaluation
    negatives: what ``prepare DIR --format tgb`` writes (:mod:`hpcdgnn.data.prepare.tgb`; Huang et al., NeurIPS
    2023): TGB's ids and edge features, its times as integers, its split at the time quantiles 0.70 and 0.85,
    and each validation and test event's negatives from its pickles.

    Args:
        dataset: TGB's dataset directory as TGB downloads it (``<root>/tgbl_wiki``, holding
            ``tgbl-wiki_edgelist_v2.csv``, ``tgbl-wiki_val_ns_v2.pkl`` and ``tgbl-wiki_test_ns_v2.pkl``), or
            TGB's ``LinkPropPredDataset`` (anything whose ``root`` names that directory; TGB is not imported).
        output: the dataset directory (new or empty; ``force=True`` replaces one).
        force: replace a non-empty ``output``.
        shard_events: events per shard file (default 1,000,000).
        time_unit: divide the times by it (86400: seconds to days), after the negatives were looked up by TGB's
            integer times.

    Returns:
        The event dataset's manifest (``eval_negatives`` set), also the path of ``output``
        (:class:`WrittenEventManifest`).

    Raises:
        DataError: one line naming the file, or the argument: no TGB directory (or a ``dataset`` that is
            neither a path nor has a ``root``), a tgbl dataset not read yet, a row or a pickle that is not
            TGB's, negatives missing for an evaluation event; ``force`` not a bool, ``shard_events`` not a whole
            number >= 1, ``time_unit`` not a positive number; a non-empty ``output`` without ``force=True``.
            Nothing is written.
    """
    from hpcdgnn.data.prepare.tgb import prepare_tgb
    from hpcdgnn.data.writer import check_output

    where = "from_tgb"
    output = _output(output, where)
    # LinkPropPredDataset.root is <root>/tgbl_NAME (a path's own .root is "/", so a path is taken as it is)
    root = dataset if isinstance(dataset, (str, os.PathLike)) else getattr(dataset, "root", dataset)
    if not isinstance(root, (str, os.PathLike)):
        raise DataError(f"{where}: dataset: {type(dataset).__name__} {dataset!r:.60} is not TGB's dataset directory "
                        "(give its path, or TGB's LinkPropPredDataset)")
    root = os.path.expanduser(root)  # ~ as in output
    options = _checked_options({"force": force, "shard_events": shard_events}, where)
    check_output(output, options["force"], (root,))  # before reading TGB's files, which may be large
    return _noted(prepare_tgb(root, output, time_unit=time_unit, **options), output)


def _feature_steps(features: list, where: str) -> tuple[list[np.ndarray], int | None]:
    """Each step's features as float32 (N, F), and L where the steps are windows of L steps (else None).

    A step of shape (N, F, L) is the window of L steps a sample sees (PyG Temporal's METR-LA and PEMS-BAY:
    ``X[:, :, k : k + L]``). Consecutive windows overlap by L - 1 steps, so the series they were cut from is
    returned, T + L - 1 steps: window 0's L steps, then each later window's last. Only that new step is kept of
    each window: METR-LA's windows hold the series 12 times over.

    Raises:
        DataError: naming ``features[k]``: non-numeric or non-finite values (or past float32), a step that is not
            (N, F) or (N, F, L), a step of another shape than step 0's, a window that is not the one before it
            one step on (independent windows).
    """
    from hpcdgnn.data.writer import as_float32

    xs: list[np.ndarray] = []
    window: int | None = None
    before = None
    for k, x in enumerate(features):
        raw = _floats(x, f"features[{k}]", where)
        x = as_float32(raw)
        _finite(raw, x, f"features[{k}]", where)
        if k == 0:
            first = x.shape
            if x.ndim == 3 and x.shape[2] >= 1:
                window = x.shape[2]
            elif x.ndim != 2:
                raise DataError(f"{where}: features[0] has shape {x.shape}, expected (N, F): one row of features per "
                                "vertex (one feature as an (N, 1) array), or (N, F, L): windows of L steps")
        if x.shape != first:
            every = "window must have the same N, F and L" if window else "step must have the same N and F"
            raise DataError(f"{where}: features[{k}] has shape {x.shape}; step 0's is {first} (every {every})")
        if window is None:
            xs.append(x)
            continue
        if before is not None and not np.array_equal(before[:, :, 1:], x[:, :, :-1]):
            raise DataError(f"{where}: features[{k}] is not features[{k - 1}] one step on (features[{k - 1}][:, :, 1:] "
                            f"!= features[{k}][:, :, :-1]), so these (N, F, L) windows are not cut from one series: "
                            "pass the series, one (N, F) array per step, or each window as (N, F*L) features "
                            "(x.reshape(N, -1))")
        xs.extend(x[:, :, j].copy() for j in range(0 if before is None else window - 1, window))
        before = x
    return xs, window


def _window_targets(targets: list, xs: list[np.ndarray], window: int, labels: bool,
                    where: str) -> tuple[list[np.ndarray], dict[str, Any]]:
    """The targets of windowed features (:func:`_feature_steps`) per step of their series, and what was found.

    PyG Temporal's ``targets[k]`` are the H values after window k (METR-LA: ``X[:, 0, k + L : k + L + H]``,
    (N, H); PEMS-BAY every channel's, (N, C, H); one value: (N,)). A dataset's target at step t is the value after
    t (:mod:`hpcdgnn.tasks.regression`), so step t = k + L - 1, where window k ends, stores targets[k]'s first
    value (channel 0's), and ``task.horizon`` H reads the rest from the steps after it: the same values, as the
    windows overlap. The L - 1 steps before window 0 ends have none (NaN; -1 with ``labels``), as no sample of the
    signal ends there.

    Returns:
        The (N,) targets of the T + L - 1 steps (none without ``targets``), and the manifest's ``windows`` record:
        ``window`` L, ``horizon`` H, ``windows`` T, ``target_channels`` C, ``targets_are_channel`` (the feature
        channel whose next values the targets are, checked at every step where the series has it, else None).

    Raises:
        DataError: naming ``targets[k]``: non-numeric, a shape that is not (N,), (N, H) or (N, C, H), another
            shape than targets[0]'s, targets that are not targets[k - 1] one step on (H values that are not a
            series' next ones).
    """
    n = xs[0].shape[0]
    ys: list[np.ndarray] = [np.full(n, -1.0 if labels else np.nan) for _ in range(window - 1)]
    record: dict[str, Any] = {"window": window, "horizon": 0, "windows": len(xs) - window + 1,
                              "target_channels": 0, "targets_are_channel": None}
    before, first = None, None
    for k, y in enumerate(targets):
        y = _floats(y, f"targets[{k}]", where)
        y = y[:, None] if y.ndim == 1 else y
        if k == 0:
            first = y.shape
            if y.ndim not in (2, 3) or y.shape[0] != n or 0 in y.shape:
                raise DataError(f"{where}: targets[0] has shape {y.shape}, expected (N,), (N, H) or (N, C, H) "
                                f"for N = {n} vertices: the next H values of each vertex after features[0]'s window")
        if y.shape != first:
            raise DataError(f"{where}: targets[{k}] has shape {y.shape}; targets[0]'s is {first}")
        if before is not None and not np.array_equal(before[..., 1:], y[..., :-1], equal_nan=True):
            raise DataError(f"{where}: targets[{k}] is not targets[{k - 1}] one step on (targets[{k - 1}][..., 1:] "
                            f"!= targets[{k}][..., :-1]), so they are not the next H values of a series: give one "
                            "(N,) target per window, e.g. [y[:, 0] for y in targets]")
        ys.append(y.reshape(n, -1)[:, 0].copy())  # (N, C, H): channel 0's first
        before = y
    if not targets:
        return [], record
    record.update(horizon=first[-1], target_channels=first[1] if len(first) == 3 else 1)
    if len(xs) > window:  # y_t against X_{t+1} wherever both exist (from the second window on)
        after = np.stack(xs[window:])
        told = np.stack(ys[window - 1:-1]).astype(np.float32)
        record["targets_are_channel"] = next((c for c in range(after.shape[2])
                                              if np.array_equal(after[:, :, c], told)), None)
    return ys, record


def _unwound_note(r: dict[str, Any], steps: int) -> str:
    """What :func:`from_signal` tells of windowed features: what it stored, and the settings of the signal's task."""
    L, H = r["window"], r["horizon"]
    note = (f"from_signal: features are windows of L = {L} steps sliding by one: stored as the {steps} steps of the "
            f"series they were cut from (snapshot k + {L - 1} is window k's last step)")
    if not H:
        return note
    channel = r["targets_are_channel"]
    of = ("" if r["target_channels"] == 1 else
          f"; targets hold {r['target_channels']} channels, of which channel 0's are stored")
    what = (f"features' channel {channel}" if channel is not None else
            "no feature channel's (scaled otherwise?), stored as given" if r["windows"] > 1 else "not checked")
    none = f"; none at the first {L - 1}" if L > 1 else ""
    past = f" (the last {H - 1} windows' targets run past the last snapshot: unscored)" if H > 1 else ""
    return (f"{note}, each with the value after it as target ({what}{none}){of}. The signal's task, {L} steps -> "
            f"the next {H}: task.horizon: {H}{past}, strategy: {{name: sequences, window: {L}}} for exactly {L} "
            "steps of input")


def _noted(manifest, output):
    """``manifest``, after a Python warning of what ``prepare`` warns of (:func:`~hpcdgnn.data.prepare.
    dataset_note`), in the adapters' words."""
    from hpcdgnn.data.prepare import dataset_note

    note = dataset_note(manifest)
    if note:
        # prepare's flags as the adapters' keyword arguments: --events-per-snapshot -> events_per_snapshot=
        _warn(f"{output}: {_keywords(note)}")
    return manifest


def _warn(text: str) -> None:
    """A ``UserWarning`` at the caller's line: the first frame outside this module and :mod:`hpcdgnn.rank_zero`. A
    fixed ``stacklevel`` pointed into this file when one adapter calls another (from_temporal_data -> from_arrays)
    or rank 0 writes under MPI (:func:`once_per_job`)."""
    import hpcdgnn.rank_zero

    ours = (__file__, hpcdgnn.rank_zero.__file__)
    frame, level = sys._getframe(0), 1
    while frame is not None and frame.f_code.co_filename in ours:
        frame, level = frame.f_back, level + 1
    warnings.warn(text, UserWarning, stacklevel=level)


def _num_classes(ys: list[np.ndarray], n: int, where: str) -> int:
    """C for class-label targets (integers -1 .. C-1, -1 = none), refusing what casting to int64 would store
    wrong: a fraction truncated, NaN, a label below -1, fewer than 2 classes, or more classes than the
    vertices of all steps could show (a stray value, e.g. 1e9, would size C after it)."""
    for k, y in enumerate(ys):
        bad = ~np.isfinite(y) | (y != np.round(y)) | (y < -1)
        if bad.any():
            i = int(np.argmax(bad))
            raise DataError(f"{where}: targets[{k}]: {y[i]:g} at {i} is not a class label (labels=True takes "
                            "integers 0 .. C-1, and -1 for none)")
    top = max(float(y.max(initial=-1)) for y in ys)
    if top < 1:
        raise DataError(f"{where}: targets: labels=True needs at least 2 classes; the largest label is {top:g}")
    if top + 1 > n * len(ys):
        k = next(k for k, y in enumerate(ys) if y.size and y.max() == top)
        raise DataError(f"{where}: targets[{k}]: label {top:g} at {int(np.argmax(ys[k]))} makes {top + 1:g} classes, "
                        f"more than the {n * len(ys)} vertex-steps could hold; labels are 0 .. C-1")
    return int(top) + 1
