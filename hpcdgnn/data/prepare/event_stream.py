"""``hpcdgnn prepare --kind events``: raw interaction files -> an event-stream dataset.

Writes :mod:`hpcdgnn.data.events` datasets from the snapshot kind's inputs and parsers:

* ``--format snap``: ``src dst time`` events; a weight column is kept as the edge feature
  ``"weight"`` (any sign: a feature, not a GCN weight). ``--bipartite`` makes sources
  ``0..S-1`` and destinations ``S..N-1`` separate vertex sets (``"s:<id>"``/``"d:<id>"``).
* ``--format jodie``: users then items, feature columns kept (:mod:`.jodie`).
* ``--format pygt-json`` holds snapshots, not events: refused.

Out-of-order input is sorted stably by time with one warning line. Snapshot-shaping
options are refused, and there is no size guard: the size is linear in the input.
"""

from __future__ import annotations

import dataclasses
import math
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from hpcdgnn.data.events import (
    DEFAULT_SHARD_EVENTS,
    DEFAULT_SPLIT,
    EventManifest,
    check_split_fractions,
    write_events,
)
from hpcdgnn.data.prepare._common import PrepareOptions, parse_columns, remap_ids
from hpcdgnn.data.prepare._estimate import MAX_OUTPUT_FILES
from hpcdgnn.data.prepare.jodie import JODIE_COLUMN_KEYS, parse_jodie_events
from hpcdgnn.data.prepare.snap import SNAP_COLUMN_KEYS, parse_edge_list
from hpcdgnn.data.writer import as_float32, file_sha256
from hpcdgnn.errors import DataError

__all__ = [
    "EventOptions",
    "ParsedEvents",
    "prepare_events",
    "EVENT_FORMATS",
    "EVENT_ONLY_OPTIONS",
    "SNAPSHOT_ONLY_OPTIONS",
    "option_flag",
]


@dataclass(frozen=True, kw_only=True)
class EventOptions:
    """Options of ``prepare --kind events`` (one field per CLI flag)."""

    split: tuple[float, float, float] | None = None
    """--split TRAIN VAL TEST: chronological fractions of the events (None: 0.70 0.15 0.15)."""
    shard_events: int | None = None
    """--shard-events K: events per shard file (None: 1,000,000)."""
    bipartite: bool = False
    """--bipartite (snap): sources and destinations are separate vertex sets."""
    time_unit: float | None = None
    """--time-unit U: timestamps are divided by U (e.g. 86400: seconds to days; None: kept).

    TGAT's learnable time encoding cos(Δt·w + b) (``model.time_encoding: learnable``) has trainable w whose
    gradients scale with Δt: raw seconds (Δt ~ 1e7) make such a run sensitive to rounding (SPEC M1); the default
    fixed encoding counts Δt in the manifest's ``time_gap`` (``model.time_scale: auto``) and needs no unit.
    """
    columns: str | None = None
    """--columns: as for snapshots (snap, jodie)."""
    force: bool = False
    """--force: replace a non-empty output directory."""
    allow_large: bool = False
    """--allow-large: write more shard files than the limit of :mod:`._estimate` (``--shard-events`` too small)."""


#: ``--kind events`` options (and their defaults) that ``--kind snapshots`` refuses.
EVENT_ONLY_OPTIONS = {"split": None, "shard_events": None, "bipartite": False, "time_unit": None}

#: Snapshot options (and their defaults) that ``--kind events`` refuses: every field of
#: :class:`PrepareOptions` except the shared ``columns``, ``force`` and ``allow_large``.
SNAPSHOT_ONLY_OPTIONS = {
    f.name: f.default for f in dataclasses.fields(PrepareOptions) if f.name not in ("columns", "force", "allow_large")
}


def option_flag(name: str) -> str:
    """The command-line spelling of an option field: ``events_per_snapshot`` -> ``--events-per-snapshot``."""
    return "--" + name.replace("_", "-")


@dataclass
class ParsedEvents:
    """A parsed input, sorted stably by time, ids remapped (see the module docstring)."""

    src: np.ndarray
    dst: np.ndarray
    time: np.ndarray
    efeat: np.ndarray | None
    feature_names: list[str]
    vertex_ids: np.ndarray
    bipartite: bool
    num_sources: int
    inversions: int
    source: dict[str, Any] = field(default_factory=dict)

    @property
    def num_vertices(self) -> int:
        """N, the number of vertex ids (both sides when bipartite)."""
        return int(self.vertex_ids.shape[0])


def _read_snap(path: Path, opts: EventOptions) -> ParsedEvents:
    columns = None if opts.columns is None else parse_columns(opts.columns, path, SNAP_COLUMN_KEYS, "snap")
    edges = parse_edge_list(path, columns)  # stably sorted by time, ids remapped jointly
    src, dst, ids = edges.src, edges.dst, edges.vertex_ids
    num_sources = int(ids.shape[0])
    source: dict[str, Any] = {}
    if opts.bipartite:
        # joint ids are in sorted original-id order, so np.unique of each side keeps it
        s_used, s_new = np.unique(src, return_inverse=True)
        d_used, d_new = np.unique(dst, return_inverse=True)
        num_sources = int(s_used.shape[0])
        src, dst = s_new.reshape(-1).astype(np.int64), d_new.reshape(-1).astype(np.int64) + num_sources
        ids = np.array([f"s:{v}" for v in ids[s_used].tolist()] + [f"d:{v}" for v in ids[d_used].tolist()])
        source.update(sources=num_sources, destinations=int(d_used.shape[0]))
    if columns is not None:
        source["columns"] = columns
    efeat = None if edges.weight is None else as_float32(edges.weight).reshape(-1, 1)
    return ParsedEvents(
        src=src,
        dst=dst,
        time=edges.time,
        efeat=efeat,
        feature_names=[] if efeat is None else ["weight"],
        vertex_ids=ids,
        bipartite=opts.bipartite,
        num_sources=num_sources,
        inversions=edges.inversions,
        source=source,
    )


def _read_jodie(path: Path, opts: EventOptions) -> ParsedEvents:
    columns = None if opts.columns is None else parse_columns(opts.columns, path, JODIE_COLUMN_KEYS, "jodie")
    users, items, time, feats, fnames, names = parse_jodie_events(path, columns)
    uidx, uids = remap_ids(users)
    iidx, iids = remap_ids(items)
    n_users = int(uids.shape[0])
    inversions = int(np.count_nonzero(time[1:] < time[:-1]))
    # in time order already (JODIE's and TGL's files are): the arrays as read, no permuted copy of the features
    order = np.argsort(time, kind="stable") if inversions else slice(None)
    vertex_ids = np.array([f"u:{u}" for u in uids.tolist()] + [f"i:{i}" for i in iids.tolist()])
    return ParsedEvents(
        src=uidx[order],
        dst=(iidx + n_users)[order],
        time=time[order],
        efeat=None if feats is None else feats[order],
        feature_names=fnames,
        vertex_ids=vertex_ids,
        bipartite=True,
        num_sources=n_users,
        inversions=inversions,
        source={"users": n_users, "items": int(iids.shape[0]), "columns": names},
    )


#: ``--format`` choices of ``--kind events`` and their readers.
EVENT_FORMATS = {"snap": _read_snap, "jodie": _read_jodie}


def check_shard_events_and_time_unit(path: str | Path, shard_events: Any, time_unit: Any) -> None:
    """Refuse (one line naming ``path``) a ``--shard-events`` that is not an integer >= 1 or a ``--time-unit`` that
    is not a positive finite number; None is either's default. Every event format's (tgb's too)."""
    if shard_events is not None and (not isinstance(shard_events, int) or isinstance(shard_events, bool)
                                     or shard_events < 1):
        raise DataError(f"{path}: --shard-events must be an integer >= 1 (got {shard_events!r})")
    if time_unit is not None and (isinstance(time_unit, bool) or not isinstance(time_unit, (int, float))
                                  or not math.isfinite(time_unit) or time_unit <= 0):
        raise DataError(f"{path}: --time-unit must be a positive number (got {time_unit!r})")


def _check(path: Path, fmt: str, options: dict[str, Any]) -> EventOptions:
    """Refuse snapshot-only options and bad values before the input is read; one-line DataError."""
    if fmt == "pygt-json":
        raise DataError(
            f"{path}: --kind events needs timestamped interactions (--format snap or jodie);"
            " pygt-json files hold snapshots already (use --kind snapshots)"
        )
    if fmt not in EVENT_FORMATS:
        raise DataError(f"{path}: unknown format {fmt!r} for --kind events; choose from {', '.join(EVENT_FORMATS)}")
    for name, default in SNAPSHOT_ONLY_OPTIONS.items():
        if name in options and options[name] != default:
            raise DataError(
                f"{path}: {option_flag(name)} applies only to --kind snapshots; an event dataset keeps every event"
                " as it is (drop the option, or use --kind snapshots)"
            )
    rest = {k: v for k, v in options.items() if k not in SNAPSHOT_ONLY_OPTIONS}
    opts = EventOptions(**rest)  # TypeError for an unknown keyword, as PrepareOptions
    if opts.split is not None:
        check_split_fractions(opts.split, str(path))
    check_shard_events_and_time_unit(path, opts.shard_events, opts.time_unit)
    # --bipartite with jodie changes nothing: JODIE's users and items are bipartite anyway
    if opts.columns is not None:
        keys = SNAP_COLUMN_KEYS if fmt == "snap" else JODIE_COLUMN_KEYS
        parse_columns(opts.columns, path, keys, fmt)  # syntax errors before reading the input
    return opts


def prepare_events(input_path: str | Path, fmt: str, output: str | Path, **options: Any) -> EventManifest:
    """Convert a raw input file into an event dataset directory and return its manifest.

    Args:
        input_path: the raw file (plain, gzip, xz or bz2).
        fmt: ``"snap"`` or ``"jodie"``.
        output: dataset directory to create.
        **options: :class:`EventOptions` fields; a :class:`~hpcdgnn.data.prepare._common.PrepareOptions`
            field is accepted only at its default (so ``prepare_dataset``'s callers may pass all).

    Raises:
        DataError: bad input or options, one line naming the input file and the option.
        TypeError: an unknown keyword in ``options``.
    """
    path = Path(input_path)
    opts = _check(path, fmt, options)
    parsed = EVENT_FORMATS[fmt](path, opts)
    provenance = {"input": str(path.resolve()), "input_bytes": path.stat().st_size, "input_sha256": file_sha256(path),
                  "format": fmt}
    return write_parsed(parsed, opts, output, path, provenance)


def _float_times(t: np.ndarray, unit: float | None, where: Path) -> np.ndarray:
    """The events' times in ``unit`` as the float64 the dataset stores; integers past 2^53 (nanosecond clocks)
    divided by an integral unit exactly (quotient, then remainder), so that no two distinct times merge.

    Raises:
        DataError: naming ``where``: distinct integer times that float64 would merge (no unit, or one too fine);
            a unit so fine that the times overflow float64.
    """
    unit = unit or 1.0
    with np.errstate(over="ignore", invalid="ignore"):  # an overflow is refused below, in one line
        if t.dtype.kind not in "iu":
            out = t.astype(np.float64) / unit
        else:
            exact = float(unit).is_integer() and unit <= np.iinfo(t.dtype).max  # divmod by it in the integers
            whole = np.divmod(t, t.dtype.type(unit))[0] if exact else t  # the integer part float64 must hold
            out = whole.astype(np.float64)
            if exact:
                out += (t - whole * t.dtype.type(unit)).astype(np.float64) / unit
            else:
                out /= unit
    if unit != 1.0 and np.isfinite(t).all() and not np.isfinite(out).all():
        raise DataError(f"{where}: --time-unit {unit:g} takes the times past float64's range (the largest, "
                        f"{float(np.abs(t).max()):.4g}, becomes {float(np.abs(out).max()):g}); give a coarser unit")
    if t.dtype.kind not in "iu":
        return out
    # sorted by time: distinct values are the non-zero steps
    merged = int(np.count_nonzero(np.diff(t))) - int(np.count_nonzero(np.diff(out)))
    if merged > 0:
        per = "" if unit == 1.0 else f" in units of {unit:g}"
        raise DataError(f"{where}: {merged} distinct times would merge as float64 (they reach "
                        f"{float(np.abs(out).max()):.4g}{per}; float64 tells apart ~16 significant digits of a time, "
                        "in any --time-unit): count them from an origin of your own (subtract the first time)")
    big = whole[(whole > 2**53) | (whole < -(2**53))]  # not np.abs: it wraps at -2^63
    past = (t > 2**53) | (t < -(2**53))
    if not big.size and past.any():
        # an integral unit brought the integer part under 2^53, but float64 keeps ~16 digits of the whole time
        # whatever its unit: the remainder is rounded to the spacing of the floats near the time
        err = float(np.spacing(np.abs(out[past])).max()) / 2 * unit
        print(f"hpcdgnn prepare: warning: {where}: times reach {max(abs(float(t.min())), abs(float(t.max()))):.4g}, "
              f"past 2^53 of the input's units: stored rounded to float64 in units of {unit:g} (by up to {err:.3g} "
              "of the input's units, their gaps too); count them from an origin of your own (subtract the first "
              "time) to keep them", file=sys.stderr, flush=True)
    if big.size:  # distinct still, but their integer part rounded: their gaps move
        # in the input's units; wrap-around of the integer difference gives its sign
        rounded = big.astype(np.float64)
        fits = rounded < float(np.iinfo(t.dtype).max)  # the largest values round up to 2^63 (2^64): no cast back
        err = int(np.abs((big[fits] - rounded[fits].astype(t.dtype)).astype(np.int64)).max(initial=0))
        if not fits.all():  # all of them round to that one float: the farthest is the smallest
            err = max(err, int(rounded[~fits].max()) - int(big[~fits].min()))
        err = err * (int(unit) if exact else 1)
        reach = max(abs(float(t.min())), abs(float(t.max())))
        print(f"hpcdgnn prepare: warning: {where}: times reach {reach:.4g}, past 2^53"
              f"{' in units of ' + format(unit, 'g') if exact and unit != 1.0 else ''}: stored rounded to float64 "
              f"(by up to {err:g} of the input's units, their gaps too); count them from an origin of your own "
              "(subtract the first time) to keep them", file=sys.stderr, flush=True)
    return out


def write_parsed(parsed: ParsedEvents, opts: EventOptions, output: str | Path, where: Path,
                 provenance: dict[str, Any], warn: Callable[[str], None] | None = None) -> EventManifest:
    """Write parsed events (a file's, or arrays' from :mod:`hpcdgnn.data.adapters`) as an event dataset.

    ``warn``: how the adapters say what ``prepare`` prints as a warning on stderr (a Python ``UserWarning``).

    Raises:
        DataError: naming ``where``: an edge feature that does not fit in float32.
    """
    if parsed.inversions:
        text = (f"{parsed.inversions} adjacent time inversion(s) in the input; events sorted stably by time "
                "(manifest: sorted_input false)")
        if warn is not None:
            warn(text)
        else:
            print(f"hpcdgnn prepare: warning: {where}: {text}", file=sys.stderr, flush=True)
    if parsed.efeat is not None and not np.isfinite(parsed.efeat).all():
        k, j = (int(x) for x in np.argwhere(~np.isfinite(parsed.efeat))[0])
        raise DataError(
            f"{where}: edge feature {parsed.feature_names[j]!r} of event {k} (in time order) does not fit in float32"
        )
    times = _float_times(parsed.time, opts.time_unit, where)
    split = DEFAULT_SPLIT if opts.split is None else tuple(opts.split)
    shard_events = DEFAULT_SHARD_EVENTS if opts.shard_events is None else opts.shard_events
    e = int(parsed.time.shape[0])
    files = -(-e // shard_events) + 2  # the shards, vertices.h5, manifest.json
    if files > MAX_OUTPUT_FILES and not opts.allow_large:  # parallel file systems slow down on many small files
        raise DataError(f"{where}: --shard-events {shard_events} would write {files:,} files for {e:,} events, over "
                        f"the limit of {MAX_OUTPUT_FILES:,}; use a larger --shard-events (default "
                        f"{DEFAULT_SHARD_EVENTS:,}), or pass --allow-large to write them anyway")
    source = {
        **provenance,
        "kind": "events",
        "options": {
            "split": list(split),
            "shard_events": shard_events,
            "bipartite": parsed.bipartite,
            "columns": opts.columns,
            "time_unit": opts.time_unit,
        },
        "events": e,
        "time_dtype": str(parsed.time.dtype),
        "inversions": parsed.inversions,
        **parsed.source,
    }
    return write_events(
        output,
        parsed.src,
        parsed.dst,
        times,
        parsed.efeat,
        num_vertices=parsed.num_vertices,
        bipartite=parsed.bipartite,
        num_sources=parsed.num_sources if parsed.bipartite else parsed.num_vertices,
        feature_names=parsed.feature_names,
        original_ids=parsed.vertex_ids,
        split=split,
        shard_events=shard_events,
        source=source,
        force=opts.force,
        sorted_input=parsed.inversions == 0,
    )
