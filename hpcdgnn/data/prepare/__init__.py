"""``hpcdgnn prepare``: raw dynamic-graph inputs -> a dataset directory of HDF5 snapshot shards.

SPEC "Data model": timestamped edge lists (:mod:`.snap`), JODIE csvs (:mod:`.jodie`) and
PyGT JSON signals (:mod:`.pygt_json`) are cut into snapshots by time window or event count,
with in/out degree features (IBM §6.1) and optional smoothing (IBM §5.4, SPEC S5).
:mod:`._estimate` refuses an output over 2 GiB or 10,000 files unless ``--allow-large``.
``--targets next_degree``/``next_log_degree`` derive regression targets from snapshot t+1's
edges; ``--kind events`` writes an event stream instead (:mod:`.event_stream`).

Example::

    python -m hpcdgnn prepare CollegeMsg.txt.gz --format snap --output inputs/uci --snapshots 20
    python -m hpcdgnn prepare CollegeMsg.txt.gz --format snap --kind events --output inputs/uci-events
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import sys
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from hpcdgnn.data.events import DEFAULT_SHARD_EVENTS, DEFAULT_SPLIT, EventManifest
from hpcdgnn.data.inspect import class_balance, class_balance_note, class_counts
from hpcdgnn.data.manifest import Manifest, empty_snapshots_note
from hpcdgnn.data.prepare._common import (
    DEFAULT_LAGS,
    DEFAULT_SNAPSHOTS,
    PreparedInput,
    PrepareOptions,
    parse_columns,
    whole,
    with_next_activity,
    with_next_degree,
)
from hpcdgnn.data.prepare._estimate import (
    MAX_OUTPUT_BYTES,
    MAX_OUTPUT_FILES,
    OutputEstimate,
    estimate_output,
    human_bytes,
)
from hpcdgnn.data.prepare.event_stream import (
    EVENT_ONLY_OPTIONS,
    EventOptions,
    option_flag,
    prepare_events,
)
from hpcdgnn.data.prepare.jodie import JODIE_COLUMN_KEYS, read_jodie
from hpcdgnn.data.prepare.pygt_json import read_pygt_json
from hpcdgnn.data.prepare.snap import SNAP_COLUMN_KEYS, read_snap
from hpcdgnn.data.writer import RawSnapshot, check_output, check_room, file_sha256, write_dataset
from hpcdgnn.errors import DataError

__all__ = [
    "add_prepare_arguments",
    "run_prepare",
    "prepare_dataset",
    "prepare_events",
    "KINDS",
    "PrepareOptions",
    "FORMATS",
    "LABELS",
    "TARGETS",
    "COLUMN_KEYS_BY_FORMAT",
    "MAX_OUTPUT_BYTES",
    "MAX_OUTPUT_FILES",
]

#: ``--format`` choices and their readers.
FORMATS = {"snap": read_snap, "jodie": read_jodie, "pygt-json": read_pygt_json}

#: ``--kind`` choices: the two on-disk dataset kinds.
KINDS = ("snapshots", "events")

#: ``--columns`` keys each format accepts (pygt-json files are JSON documents: no columns to map).
COLUMN_KEYS_BY_FORMAT = {"snap": SNAP_COLUMN_KEYS, "jodie": JODIE_COLUMN_KEYS}

#: ``--labels`` choices and the formats that support each.
LABELS = {
    "none": tuple(FORMATS),
    "next_activity": tuple(FORMATS),
    "state": ("jodie",),
    "target_bins": ("pygt-json",),
}


#: ``--targets`` choices and the formats that support each (pygt-json always stores its signal).
TARGETS = {
    "none": tuple(FORMATS),
    "next_degree": ("snap", "jodie"),
    "next_log_degree": ("snap", "jodie"),
}


def _check_options(path: Path, fmt: str, opts: PrepareOptions) -> None:
    """Cross-option rules that argparse cannot express; one-line DataError naming the input."""
    if fmt not in FORMATS:
        raise DataError(f"{path}: unknown format {fmt!r}; choose from {', '.join(FORMATS)}")
    if opts.labels not in LABELS:
        raise DataError(f"{path}: unknown --labels {opts.labels!r}; choose from {', '.join(LABELS)}")
    if fmt not in LABELS[opts.labels]:
        raise DataError(f"{path}: --labels {opts.labels} applies only to --format {' or '.join(LABELS[opts.labels])}")
    if opts.targets not in TARGETS:
        raise DataError(f"{path}: unknown --targets {opts.targets!r}; choose from {', '.join(TARGETS)}")
    if fmt not in TARGETS[opts.targets]:
        formats = " or ".join(TARGETS[opts.targets])
        why = " (pygt-json always stores its signal as the targets)" if fmt == "pygt-json" else ""
        raise DataError(f"{path}: --targets {opts.targets} applies only to --format {formats}{why}")
    if opts.weights not in ("ones", "count", "given"):
        raise DataError(f"{path}: unknown --weights {opts.weights!r}; choose from ones, count, given")
    slicing = [o for o in ("snapshots", "window", "events_per_snapshot") if getattr(opts, o) is not None]
    if len(slicing) > 1:
        raise DataError(f"{path}: give only one of --snapshots, --window, --events-per-snapshot (got {len(slicing)})")
    if opts.lags is not None and fmt != "pygt-json":
        raise DataError(f"{path}: --lags applies only to --format pygt-json")
    if opts.log_features and fmt == "pygt-json":  # it was ignored there, yet the manifest said log_features: true
        raise DataError(f"{path}: --log-features applies only to the degree features of --format snap or jodie "
                        "(pygt-json stores the file's own features as they are)")
    for name in ("edge_life", "mtransform", "shard_size"):  # the Python API passes them untyped: "2" or 2.5
        value = getattr(opts, name)
        if whole(value) is None:
            raise DataError(f"{path}: {option_flag(name)} must be a whole number (got {value!r})")
    if opts.edge_life < 1 or opts.mtransform < 1:
        raise DataError(f"{path}: --edge-life and --mtransform must be >= 1")
    if opts.edge_life > 1 and opts.mtransform > 1:
        raise DataError(f"{path}: choose one smoothing, --edge-life (EvolveGCN) or --mtransform (TM-GCN), not both")
    if opts.shard_size < 1:
        raise DataError(f"{path}: --shard-size must be >= 1")
    if opts.columns is not None:
        if fmt not in COLUMN_KEYS_BY_FORMAT:
            raise DataError(f"{path}: --columns applies only to --format {' or '.join(COLUMN_KEYS_BY_FORMAT)}")
        parse_columns(opts.columns, path, COLUMN_KEYS_BY_FORMAT[fmt], fmt)  # syntax errors before reading the input


def _trigger(fmt: str, opts: PrepareOptions, est: OutputEstimate, files_over: bool) -> str:
    """The option a too-large output comes from, as the user typed it (for the one-line error)."""
    T = est.num_snapshots
    if files_over and opts.shard_size < 8 and math.ceil(T / 8) + 2 <= MAX_OUTPUT_FILES:
        return f"--shard-size {opts.shard_size}"
    if opts.snapshots is not None:
        return f"--snapshots {opts.snapshots}"
    if opts.window is not None:
        return f"--window {opts.window:g} ({T} snapshots)"
    if opts.events_per_snapshot is not None:
        return f"--events-per-snapshot {opts.events_per_snapshot} ({T} snapshots)"
    if fmt == "pygt-json":
        return f"the input's {T} snapshots"
    return f"the default --snapshots {DEFAULT_SNAPSHOTS}"


def _check_size(path: Path, fmt: str, opts: PrepareOptions, est: OutputEstimate | None) -> None:
    """Refuse an output over the limits of :mod:`._estimate` unless ``--allow-large``, printing the estimate first."""
    if est is None or opts.allow_large:
        return
    bytes_over, files_over = est.bytes > MAX_OUTPUT_BYTES, est.files > MAX_OUTPUT_FILES
    if not (bytes_over or files_over):
        return
    print(f"hpcdgnn prepare: {path}: {est.describe()}", file=sys.stderr, flush=True)
    limit = " and ".join(
        [f"{human_bytes(MAX_OUTPUT_BYTES)}"] * bytes_over + [f"{MAX_OUTPUT_FILES:,} files"] * files_over
    )
    raise DataError(
        f"{path}: {_trigger(fmt, opts, est, files_over and not bytes_over)} would write about"
        f" {human_bytes(est.bytes)} in {est.files:,} files, over the limit of {limit}; use fewer snapshots"
        " (or a larger --shard-size), or pass --allow-large to write it anyway"
    )


def _derived_tasks(prepared: PreparedInput, opts: PrepareOptions) -> tuple[Iterable[RawSnapshot], int, str | None]:
    """The snapshots, class count and targets name after ``--labels next_activity`` and ``--targets next_*``."""
    snapshots = prepared.snapshots
    num_classes = prepared.num_classes
    if opts.labels == "next_activity":
        snapshots = with_next_activity(snapshots, prepared.num_vertices)
        num_classes = 2
    targets = prepared.targets
    if opts.targets in ("next_degree", "next_log_degree"):
        snapshots = with_next_degree(snapshots, prepared.num_vertices, log=opts.targets == "next_log_degree")
        targets = opts.targets
    return snapshots, num_classes, targets


def options_used(opts: PrepareOptions) -> dict[str, Any]:
    """The options a dataset records in its ``source``: all but ``force`` and ``allow_large``, which say how to
    write, not what."""
    return {k: v for k, v in dataclasses.asdict(opts).items() if k not in ("force", "allow_large")}


def _provenance(path: Path, fmt: str, opts: PrepareOptions, prepared: PreparedInput) -> dict[str, Any]:
    """The manifest's ``source``: the input file (path, size, sha256), the format and the options used."""
    return {
        "input": str(path.resolve()),
        "input_bytes": path.stat().st_size,
        "input_sha256": file_sha256(path),
        "format": fmt,
        "options": options_used(opts),
        **prepared.source,
    }


def check_option_names(where: Path, options: dict[str, Any]) -> None:
    """Refuse an option no kind of dataset has (a misspelt keyword of the Python calls), naming it."""
    known = {f.name for cls in (PrepareOptions, EventOptions) for f in dataclasses.fields(cls)}
    for name in options:
        if name not in known:
            from hpcdgnn.config.load import _did_you_mean

            raise DataError(f"{where}: {name}: unknown option; {_did_you_mean(name, sorted(known))}")


def prepare_dataset(
    input_path: str | Path, fmt: str, output: str | Path, *, kind: str = "snapshots", **options: Any
) -> Manifest | EventManifest:
    """Convert a raw input file into a dataset directory and return its manifest.

    Args:
        input_path: the raw file (plain, gzip, xz or bz2).
        fmt: ``"snap"``, ``"jodie"`` or ``"pygt-json"``.
        output: dataset directory to create.
        kind: ``"snapshots"`` or ``"events"`` (:func:`.event_stream.prepare_events`).
        **options: the fields of :class:`PrepareOptions` (or, for events, :class:`.event_stream.EventOptions`),
            as on the command line; the other kind's options only at their defaults.

    Raises:
        DataError: bad input or options (an unknown option too), naming the input file (and line); or an output
            estimated over the size limits without ``allow_large`` (nothing is written).
    """
    path = Path(input_path)
    if kind not in KINDS:
        raise DataError(f"{path}: unknown --kind {kind!r}; choose from {', '.join(KINDS)}")
    check_option_names(path, options)
    check_output(output, bool(options.get("force", False)), (path,))  # before reading: never the input
    if kind == "events":
        return prepare_events(path, fmt, output, **options)
    for name, default in EVENT_ONLY_OPTIONS.items():
        if options.pop(name, default) != default:
            raise DataError(f"{path}: {option_flag(name)} applies only to --kind events")
    opts = PrepareOptions(**options)
    _check_options(path, fmt, opts)
    prepared: PreparedInput = FORMATS[fmt](path, opts)
    return write_prepared(prepared, opts, output, path, fmt, _provenance(path, fmt, opts, prepared))


def _counted(snapshots: Iterable[RawSnapshot], num_classes: int, counts: dict[int, np.ndarray]
             ) -> Iterator[RawSnapshot]:
    """``snapshots`` as they stream to the writer, each one's :func:`~hpcdgnn.data.inspect.class_counts` kept in
    ``counts`` by its index t: the class balance without reading the labels back."""
    for t, snap in enumerate(snapshots):
        counts[t] = class_counts(snap.labels, num_classes)
        yield snap


def write_prepared(prepared: PreparedInput, opts: PrepareOptions, output: str | Path, where: Path, fmt: str,
                   source: dict[str, Any], warn: Callable[[str], None] | None = None) -> Manifest:
    """Write a parsed input (a file's, or arrays' from :mod:`hpcdgnn.data.adapters`) as a snapshot dataset:
    the derived labels and targets, the size estimate and its limits, then the shards; then warn when a class is
    rare among the labelled training vertices (:func:`~hpcdgnn.data.inspect.class_balance_note`: accuracy is then
    mostly the majority class's, e.g. ``--labels target_bins`` where most next targets are 0).

    Args:
        prepared: the parsed input.
        opts: the snapshot options.
        output: the dataset directory to write.
        where: the input, as messages name it.
        fmt: the ``--format`` (or the adapter's stand-in), for messages.
        source: the manifest's provenance.
        warn: how the adapters say what ``prepare`` prints as a warning on stderr (a Python ``UserWarning``).

    Raises:
        DataError: naming ``where``: an output over the size limits without ``allow_large``, no room for it.
    """
    nexts = [f"--labels {opts.labels}"] * (opts.labels == "next_activity") + [f"--targets {opts.targets}"] * (
        opts.targets in ("next_degree", "next_log_degree"))
    if nexts and len(prepared.snapshot_edges) == 1:  # the last snapshot has no next: one snapshot, nothing to learn
        raise DataError(f"{where}: with {' and '.join(nexts)}, snapshot t's values come from snapshot t+1's edges, "
                        "and this input makes 1 snapshot: every value would be none (-1, NaN); cut it into more "
                        "(--snapshots, --window or --events-per-snapshot)")
    snapshots, num_classes, targets = _derived_tasks(prepared, opts)
    estimate = estimate_output(
        prepared,
        num_features=len(prepared.feature_names or ["in_degree", "out_degree"]),
        num_classes=num_classes,
        targets=targets is not None,
        smoothing_window=max(opts.edge_life, opts.mtransform),
        shard_size=opts.shard_size,
    )
    _check_size(where, fmt, opts, estimate)
    if estimate is not None:
        check_room(output, estimate.bytes)
    counts: dict[int, np.ndarray] = {}
    manifest = write_dataset(
        output,
        _counted(snapshots, num_classes, counts) if num_classes else snapshots,
        num_vertices=prepared.num_vertices,
        directed=not opts.undirected,
        reverse=opts.reverse_edges,
        weights=opts.weights,
        edge_life=opts.edge_life,
        mtransform_window=opts.mtransform,
        log_features=opts.log_features,
        feature_names=prepared.feature_names,
        num_classes=num_classes,
        targets=targets,
        shard_snapshots=opts.shard_size,
        vertex_ids=prepared.vertex_ids,
        source=source,
        force=opts.force,
        expected_snapshots=len(prepared.snapshot_edges) if prepared.snapshot_edges is not None else None,
    )
    note = class_balance_note(class_balance(counts, manifest))
    if note and warn is not None:
        warn(note)
    elif note:
        print(f"hpcdgnn prepare: warning: {output}: {note}", file=sys.stderr, flush=True)
    return manifest


def _add_snapshot_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the ``--kind snapshots`` options: slicing, weights, smoothing, features, labels, targets, shards."""
    slicing = parser.add_mutually_exclusive_group()
    slicing.add_argument(
        "--snapshots",
        type=int,
        metavar="T",
        help=f"T equal time slices over [tmin, tmax] (default: {DEFAULT_SNAPSHOTS} when none of "
        "--snapshots/--window/--events-per-snapshot is given; not for pygt-json)",
    )
    slicing.add_argument(
        "--window",
        type=float,
        metavar="SECONDS",
        help="fixed-duration slices [tmin+kS, tmin+(k+1)S), in the input's time unit",
    )
    slicing.add_argument(
        "--events-per-snapshot", type=int, metavar="K", help="consecutive groups of K time-sorted events"
    )
    parser.add_argument(
        "--undirected", action="store_true", help="store every edge in both directions (default: directed)"
    )
    parser.add_argument(
        "--reverse-edges", action="store_true",
        help="store each edge (u, v) as (v, u): a vertex then sums its in-neighbours, as PyG's layers do "
             "(default: its out-neighbours, the papers' Ã·X)",
    )
    parser.add_argument(
        "--weights",
        choices=["ones", "count", "given"],
        default="ones",
        help="edge weight: 1 per distinct pair (default), number of events, or the file's weights (summed)",
    )
    parser.add_argument(
        "--edge-life", type=int, default=1, metavar="L", help="edge-life smoothing l (IBM §5.4; default 1 = off)"
    )
    parser.add_argument(
        "--mtransform", type=int, default=1, metavar="W", help="M-transform window w (IBM §5.4; default 1 = off)"
    )
    parser.add_argument("--log-features", action="store_true", help="log1p of the in/out-degree features")
    parser.add_argument(
        "--labels",
        choices=list(LABELS),
        default="none",
        help="node labels: next_activity (all formats), state (jodie), target_bins (pygt-json); default none",
    )
    parser.add_argument(
        "--targets",
        choices=list(TARGETS),
        default="none",
        help="float node targets for task regression (snap, jodie): next_degree = distinct neighbours of each "
        "vertex in the next snapshot (raw edges), next_log_degree = log1p of it; the last snapshot has none (NaN). "
        "pygt-json always stores its signal as the targets; default none",
    )
    parser.add_argument(
        "--lags",
        type=int,
        metavar="L",
        help=f"pygt-json signal datasets: lagged values per feature vector (default {DEFAULT_LAGS})",
    )
    parser.add_argument("--shard-size", type=int, default=8, metavar="S", help="snapshots per shard file (default 8)")


def _add_event_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the ``--kind events`` options: split, shard size, bipartite, time unit."""
    parser.add_argument(
        "--split",
        type=float,
        nargs=3,
        metavar=("TRAIN", "VAL", "TEST"),
        help="--kind events: chronological fractions of the events for train/val/test, cut so that equal "
        f"timestamps never straddle a cut (default {' '.join(f'{x:.2f}' for x in DEFAULT_SPLIT)})",
    )
    parser.add_argument(
        "--shard-events",
        type=int,
        metavar="K",
        help=f"--kind events: events per shard file (default {DEFAULT_SHARD_EVENTS:,})",
    )
    parser.add_argument(
        "--bipartite",
        action="store_true",
        help="--kind events, --format snap: sources and destinations are separate vertex sets "
        "(jodie is always bipartite: users then items)",
    )
    parser.add_argument(
        "--time-unit",
        type=float,
        metavar="U",
        help="--kind events: divide the timestamps by U (86400: seconds to days); TGN's default time encoding "
        "needs none (model.time_scale: auto counts the gaps in the median gap), TGAT's learnable one "
        "(model.time_encoding: learnable) small gaps",
    )


def add_prepare_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the ``hpcdgnn prepare`` arguments to ``parser`` (a subcommand parser)."""
    parser.description = (
        "Convert a raw dynamic graph (SNAP edge list, JODIE csv, PyG-Temporal json) into HDF5 snapshot shards,"
        " or (--kind events) into a time-sorted event stream for TGN; or a Temporal Graph Benchmark dataset"
        " directory (--format tgb) into an event stream with its fixed evaluation negatives."
    )
    parser.add_argument("input", metavar="INPUT", help="raw input file; plain, .gz, .xz or .bz2 (detected by content);"
                        " --format tgb: TGB's dataset directory")
    parser.add_argument("--format", required=True, choices=[*FORMATS, "tgb"],
                        help="input format; tgb: INPUT is a Temporal Graph Benchmark tgbl-* dataset directory, "
                        "prepared as events with TGB's split and fixed evaluation negatives")
    parser.add_argument("--output", required=True, metavar="DIR", help="dataset directory to create")
    parser.add_argument(
        "--kind",
        choices=list(KINDS),
        default=None,  # snapshots; None tells --format tgb that --kind snapshots was not asked for
        help="snapshots (default): HDF5 snapshot shards; events: time-sorted events with edge features in "
        "HDF5 shards (continuous-time TGNNs: model.name tgn; snap, jodie and tgb only)",
    )
    _add_snapshot_arguments(parser)
    parser.add_argument(
        "--columns",
        metavar="src=A,dst=B,time=C[,...]",
        help="which input columns hold what, by header name or 0-based index: keys src, dst, time (required), "
        "label (jodie), weight (snap); for csvs with other headers or column orders",
    )
    _add_event_arguments(parser)
    parser.add_argument("--force", action="store_true", help="replace a non-empty --output directory")
    parser.add_argument(
        "--allow-large",
        action="store_true",
        help=f"write even when the output is estimated above {human_bytes(MAX_OUTPUT_BYTES)} or "
        f"{MAX_OUTPUT_FILES:,} files (refused by default; --force does not lift this, since scripts pass "
        "--force just to rebuild)",
    )


def run_prepare(args: argparse.Namespace) -> int:
    """Run ``hpcdgnn prepare`` from parsed arguments; print a one-line summary and return 0.

    Under ``mpirun``/``srun`` (a job script's), rank 0 writes and the others wait for its word
    (:func:`hpcdgnn.data.adapters.once_per_job`): P ranks each writing ``--output`` raced, the losers exiting 2
    with "output exists" (or, with ``--force``, replacing the winner's dataset).
    """
    from hpcdgnn.comm.world import world_rank_size
    from hpcdgnn.data.adapters import once_per_job

    if args.format == "tgb":
        from hpcdgnn.data.prepare.tgb import prepare_tgb

        _check_tgb_options(args)
        m = once_per_job(prepare_tgb)(args.input, args.output, force=args.force, shard_events=args.shard_events,
                                       time_unit=args.time_unit)
    else:
        m = once_per_job(_prepare_from_args_output)(args, args.output)
    if world_rank_size()[0] != 0:  # rank 0 says what it wrote
        return 0
    if isinstance(m, EventManifest):
        sizes = " ".join(f"{k}={b - a}" for k, (a, b) in m.split.items())
        fixed = f" fixed evaluation negatives ({m.eval_negatives['origin']})" if m.eval_negatives else ""
        print(
            f"prepared {args.output}: N={m.num_vertices} E={m.num_events} D={m.edge_feature_dim} "
            f"bipartite={str(m.bipartite).lower()} {sizes} shards={len(m.shards)}{fixed}"
        )
    else:
        print(
            f"prepared {args.output}: N={m.num_vertices} T={m.num_snapshots} F={m.num_features} "
            f"edges={sum(m.snapshot_edges)} nnz={sum(m.snapshot_nnz)} shards={len(m.shards)}"
            # edges count distinct pairs per snapshot: a pair messaged k times in a snapshot is one edge
            + (f" (distinct (u, v) per snapshot, both ways for --undirected; from {m.source['events']} input events)"
               if (m.source or {}).get("events") else "")
        )
    note = dataset_note(m)
    if note:
        print(f"hpcdgnn prepare: warning: {args.output}: {note}", file=sys.stderr)
    return 0


def dataset_note(m: Manifest | EventManifest) -> str | None:
    """What a new dataset ``m`` may surprise its user with (``prepare`` warns, the adapters too): snapshots
    without edges, or an event stream's empty validation or test split; else None."""
    if not isinstance(m, EventManifest):
        return empty_snapshots_note(m.snapshot_edges)
    empty = [k for k in ("val", "test") if m.split[k][1] <= m.split[k][0]]
    if not empty:
        return None
    # events at one time stay in one split: a cut inside a run of ties moves forward past it
    sizes = " ".join(f"{k}={b - a}" for k, (a, b) in m.split.items())
    if (m.source or {}).get("format") == "tgb":  # TGB fixes the split: --split is refused there
        return (f"no {' and no '.join(empty)} events (split {sizes}, TGB's at its time quantiles 0.70 and 0.85; "
                "events at one time stay in one split): too few distinct times for TGB's evaluation")
    return (f"no {' and no '.join(empty)} events (split {sizes}; events at one time stay in one split): give "
            f"--split a larger share to {' and '.join(empty)}")


#: the options ``--format tgb`` takes beside its input and output (TGB fixes ids, split and features)
_TGB_OPTIONS = ("input", "format", "output", "force", "shard_events", "time_unit")


def _check_tgb_options(args: argparse.Namespace) -> None:
    """Refuse (one line) an option ``--format tgb`` would not use: every other one left at its default
    (``--kind events`` may be said: it is what TGB's streams are)."""
    fresh = argparse.ArgumentParser()
    add_prepare_arguments(fresh)
    # placeholders: only the defaults count (a path of the user's starting with '-' would not parse)
    defaults = vars(fresh.parse_args(["INPUT", "--format", "tgb", "--output", "OUTPUT"]))
    if args.kind == "snapshots":
        raise DataError(f"{args.input}: --kind snapshots does not apply to --format tgb: a TGB dataset is an event "
                        "stream with fixed evaluation negatives (drop --kind, or give --kind events)")
    given = [k for k, v in defaults.items() if k not in _TGB_OPTIONS and getattr(args, k, v) != v
             and not (k == "kind" and args.kind == "events")]
    if given:
        flag = "--" + given[0].replace("_", "-")
        raise DataError(f"{args.input}: {flag} does not apply to --format tgb (TGB's own ids, times, split and "
                        "features are kept; --shard-events and --time-unit do apply)")


def _prepare_from_args_output(args: argparse.Namespace, output: str):
    """:func:`_prepare_from_args` with the output named (what :func:`~hpcdgnn.data.adapters.once_per_job` keys on)."""
    return _prepare_from_args(args)


def _prepare_from_args(args: argparse.Namespace):
    """:func:`prepare_dataset` with the command line's options."""
    return prepare_dataset(
        args.input,
        args.format,
        args.output,
        kind=args.kind or "snapshots",
        split=args.split,
        shard_events=args.shard_events,
        bipartite=args.bipartite,
        time_unit=args.time_unit,
        snapshots=args.snapshots,
        window=args.window,
        events_per_snapshot=args.events_per_snapshot,
        undirected=args.undirected,
        reverse_edges=args.reverse_edges,
        weights=args.weights,
        edge_life=args.edge_life,
        mtransform=args.mtransform,
        log_features=args.log_features,
        labels=args.labels,
        targets=args.targets,
        shard_size=args.shard_size,
        lags=args.lags,
        force=args.force,
        columns=args.columns,
        allow_large=args.allow_large,
    )
