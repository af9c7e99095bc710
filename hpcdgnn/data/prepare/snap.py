"""SNAP-style timestamped edge lists -> snapshots (``hpcdgnn prepare --format snap``).

Input (SPEC "Raw inputs"): one event per line, ``src dst time`` or
``src dst weight time``, separated by whitespace and/or commas (so SNAP's
``.txt`` and ``.csv`` files, e.g. ``soc-sign-bitcoinalpha.csv``, both work).
Blank lines and lines starting with ``#`` (SNAP) or ``%`` (Network Repository
``.edges``) are skipped. The file may be plain, gzip, xz or bz2; compression
is detected from the magic bytes, not the suffix. Every data line must have the
column count of the first one (3 or 4). An unparseable token, a wrong column
count or a file without events raises :class:`~hpcdgnn.errors.DataError`
naming ``file:line``.

Vertices: ids are arbitrary tokens. They are remapped to ``0..N-1`` in sorted
order of the original id, numerically when every id is an integer (SNAP's
usual case; bitcoin-alpha's ids 1..7604 with gaps become 0..3782) and
lexicographically otherwise. N counts only ids that occur. The original ids
are stored in ``vertices.h5`` (``/original_id``).

Weights: a 4-column file's weight column is parsed (and must be finite) but is
only used with ``--weights given``; with ``--weights ones`` (default, IBM
Eq. 1's unweighted graph) or ``count`` (events per pair) it is ignored. Given
weights must be non-negative, because the GCN's symmetric normalisation
``D^{-1/2} A D^{-1/2}`` needs non-negative degrees: bitcoin-alpha's ratings
(-10..10) are therefore rejected with ``given``; use ``ones`` or ``count``.
``--weights given`` on a 3-column file is an error.

Time slicing (rows are first stably sorted by time: email-Eu-core has
inversions and bitcoin-alpha is unsorted). Let ``tmin``/``tmax`` be the
smallest/largest time:

* ``--snapshots T`` (default T = 32): event with time ``t`` goes to slice
  ``min(T - 1, floor((t - tmin) * T / (tmax - tmin)))``. With integer
  timestamps this is computed exactly in integer arithmetic
  (``(t - tmin) * T // (tmax - tmin)``); with fractional timestamps in float64
  as ``floor(((t - tmin) * T) / (tmax - tmin))``. Slice k covers
  ``[tmin + k*span/T, tmin + (k+1)*span/T)`` except that the last one also
  includes ``tmax``. Empty slices are kept as empty snapshots, so snapshot k
  always means the same time range. If all events share one time, only T = 1
  is accepted.
* ``--window S``: slice ``floor((t - tmin) / S)`` (exact integer division
  when times and S are integers), covering ``[tmin + k*S, tmin + (k+1)*S)``;
  T = ``floor((tmax - tmin) / S) + 1``, at most 100,000.
* ``--events-per-snapshot K``: consecutive groups of K events of the sorted
  stream (the last group may be shorter); its time is the closed range
  ``[first, last]`` of its events' times.

Within a snapshot, repeated (src, dst) events collapse into one edge (the
writer's dedupe), self-loops are kept as given, and the snapshot records its
``time = (start, stop)`` in the input's unit.

Labels: ``--labels next_activity`` (vertex v at t is 1 iff v has a raw edge in
snapshot t+1; the last snapshot is unlabelled, -1) is added by the caller,
:func:`hpcdgnn.data.prepare.prepare_dataset`.

The whole edge list is parsed into memory (3-4 arrays of E numbers); the
snapshots are then yielded one at a time.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np

from hpcdgnn.data.prepare._common import (
    DEFAULT_SNAPSHOTS,
    PreparedInput,
    PrepareOptions,
    Slice,
    parse_numbers,
    read_input_text,
    remap_ids,
    slice_events,
)
from hpcdgnn.data.writer import RawSnapshot
from hpcdgnn.errors import DataError

__all__ = ["read_snap", "parse_edge_list", "EdgeList"]


class EdgeList:
    """Parsed events, stably sorted by time, with vertices remapped to 0..N-1.

    Attributes:
        src, dst: (E,) int64 vertex indices.
        time: (E,) int64 when every timestamp is an integer, else float64.
        weight: (E,) float64 of the weight column, or None for 3 columns.
        vertex_ids: (N,) original ids (int64 or str), ``vertex_ids[i]`` is vertex i.
    """

    def __init__(
        self, src: np.ndarray, dst: np.ndarray, time: np.ndarray, weight: np.ndarray | None, vertex_ids: np.ndarray
    ) -> None:
        order = np.argsort(time, kind="stable")
        self.src, self.dst, self.time = src[order], dst[order], time[order]
        self.weight = None if weight is None else weight[order]
        self.vertex_ids = vertex_ids

    @property
    def num_vertices(self) -> int:
        """N, the number of distinct ids."""
        return int(self.vertex_ids.shape[0])


def parse_edge_list(path: Path) -> EdgeList:
    """Parse a SNAP edge list (see the module docstring for the accepted syntax).

    Args:
        path: plain, gzip, xz or bz2 file.

    Raises:
        DataError: ``path:line: problem`` for the first bad line, or ``path: no events``.
    """
    text = read_input_text(path)
    cols: list[list[str]] | None = None
    lines: list[int] = []
    first_line = 0
    for lineno, line in enumerate(text.splitlines(), 1):
        s = line.strip()
        if not s or s[0] in "#%":
            continue
        parts = s.replace(",", " ").split()
        if cols is None:
            if len(parts) not in (3, 4):
                raise DataError(f"{path}:{lineno}: expected 3 or 4 columns (src dst [weight] time), got {len(parts)}")
            cols = [[] for _ in parts]
            first_line = lineno
        elif len(parts) != len(cols):
            raise DataError(f"{path}:{lineno}: expected {len(cols)} columns like line {first_line}, got {len(parts)}")
        for c, p in zip(cols, parts, strict=True):
            c.append(p)
        lines.append(lineno)
    if cols is None:
        raise DataError(f"{path}: no events (empty file or only comments)")
    time = parse_numbers(cols[-1], lines, path, "time")
    weight = parse_numbers(cols[2], lines, path, "weight").astype(np.float64) if len(cols) == 4 else None
    index, vertex_ids = remap_ids(cols[0] + cols[1])
    e = len(lines)
    return EdgeList(index[:e], index[e:], time, weight, vertex_ids)


def _snapshots(edges: EdgeList, slices: list[Slice]) -> Iterator[RawSnapshot]:
    for s in slices:
        w = None if edges.weight is None else edges.weight[s.lo : s.hi]
        yield RawSnapshot(src=edges.src[s.lo : s.hi], dst=edges.dst[s.lo : s.hi], weight=w, time=s.time)


def read_snap(path: Path, opts: PrepareOptions) -> PreparedInput:
    """Read a SNAP edge list and slice it into snapshots (rules in the module docstring).

    Args:
        path: the input file.
        opts: prepare options; uses the slicing options and ``weights``.

    Returns:
        The vertex universe and a lazy snapshot stream.

    Raises:
        DataError: bad input, or ``--weights given`` without a usable weight column.
    """
    edges = parse_edge_list(path)
    if opts.weights == "given":
        if edges.weight is None:
            raise DataError(f"{path}: --weights given needs a weight column (src dst weight time); this file has 3")
        if (edges.weight < 0).any():
            raise DataError(
                f"{path}: --weights given: negative weights (min {edges.weight.min():g}) cannot be GCN-normalised;"
                " use --weights ones or count"
            )
    slices = slice_events(edges.time, path, **slicing_kwargs(opts))
    return PreparedInput(
        num_vertices=edges.num_vertices,
        snapshots=_snapshots(edges, slices),
        vertex_ids=edges.vertex_ids,
        has_weights=edges.weight is not None,
        source={"events": int(edges.src.shape[0]), "time_min": float(edges.time[0]), "time_max": float(edges.time[-1])},
    )


def slicing_kwargs(opts: PrepareOptions) -> dict[str, float | int | None]:
    """The slicing options of ``opts``, defaulting to ``snapshots = 32`` when none is given."""
    kw = {"snapshots": opts.snapshots, "window": opts.window, "events_per_snapshot": opts.events_per_snapshot}
    if all(v is None for v in kw.values()):
        kw["snapshots"] = DEFAULT_SNAPSHOTS
    return kw
