"""JODIE interaction CSVs -> bipartite snapshots (``hpcdgnn prepare --format jodie``).

Input (SPEC "Raw inputs"; Kumar et al., JODIE, KDD 2019, the wikipedia /
reddit / mooc / lastfm files): a header line
``user_id,item_id,timestamp,state_label,comma_separated_list_of_features``
followed by one interaction per line. Only the first four fields are read;
**the edge features are ignored** (discrete-time snapshots carry vertex
features only: the degree features of IBM §6.1). Plain, gzip, xz or bz2
(detected by magic bytes). ``state_label`` must be 0 or 1.

Vertices: users and items are distinct vertices even when their ids
coincide: users first (sorted by id, numerically when all are integers), then
items; ``vertices.h5`` stores ``"u:<id>"`` and ``"i:<id>"``. Edges go
user -> item (``--undirected`` adds item -> user).

Time slicing and event sorting are exactly those of the SNAP reader (see
:mod:`hpcdgnn.data.prepare.snap`): ``--snapshots`` / ``--window`` /
``--events-per-snapshot`` over the timestamp column, rows stably sorted by
time first.

Labels:

* ``--labels state``: label of user u in snapshot t = the maximum
  ``state_label`` over u's interactions in t (JODIE's state change, e.g. a
  wikipedia ban), -1 where u has none; items are always -1. Two classes.
* ``--labels next_activity`` works as for every format.

There is no weight column, so ``--weights given`` is an error.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np

from hpcdgnn.data.prepare._common import (
    PreparedInput,
    PrepareOptions,
    Slice,
    parse_numbers,
    read_input_text,
    remap_ids,
    slice_events,
)
from hpcdgnn.data.prepare.snap import slicing_kwargs
from hpcdgnn.data.writer import RawSnapshot
from hpcdgnn.errors import DataError

__all__ = ["read_jodie"]


def _parse(path: Path) -> tuple[list[str], list[str], np.ndarray, np.ndarray]:
    """Columns user, item (tokens), time and state label of a JODIE csv."""
    text = read_input_text(path)
    users: list[str] = []
    items: list[str] = []
    times: list[str] = []
    states: list[str] = []
    lines: list[int] = []
    header_seen = False
    for lineno, line in enumerate(text.splitlines(), 1):
        s = line.strip()
        if not s:
            continue
        if not header_seen:
            header_seen = True
            head = [h.strip().lower() for h in s.split(",", 4)[:4]]
            if len(head) < 4 or "user" not in head[0] or "item" not in head[1]:
                want = "user_id,item_id,timestamp,state_label,..."
                raise DataError(f"{path}:{lineno}: expected the JODIE header '{want}', got {s[:60]!r}")
            continue
        parts = s.split(",", 4)  # features (field 5 on) are never split: they are ignored
        if len(parts) < 4:
            raise DataError(
                f"{path}:{lineno}: expected at least 4 fields (user,item,timestamp,state_label), got {len(parts)}"
            )
        users.append(parts[0].strip())
        items.append(parts[1].strip())
        times.append(parts[2].strip())
        states.append(parts[3].strip())
        lines.append(lineno)
    if not lines:
        raise DataError(f"{path}: no interactions (empty file or header only)")
    time = parse_numbers(times, lines, path, "timestamp")
    state = parse_numbers(states, lines, path, "state_label")
    bad = (state != 0) & (state != 1)
    if bad.any():
        i = int(np.argmax(bad))
        raise DataError(f"{path}:{lines[i]}: state_label must be 0 or 1, got {states[i]!r}")
    return users, items, time, state.astype(np.int64)


def _snapshots(
    src: np.ndarray, dst: np.ndarray, state: np.ndarray | None, n: int, slices: list[Slice]
) -> Iterator[RawSnapshot]:
    for s in slices:
        labels = None
        if state is not None:
            labels = np.full(n, -1, dtype=np.int64)
            # max over the window's interactions; users with none stay -1, items are never touched.
            np.maximum.at(labels, src[s.lo : s.hi], state[s.lo : s.hi])
        yield RawSnapshot(src=src[s.lo : s.hi], dst=dst[s.lo : s.hi], labels=labels, time=s.time)


def read_jodie(path: Path, opts: PrepareOptions) -> PreparedInput:
    """Read a JODIE csv into a bipartite user/item snapshot stream (rules in the module docstring).

    Args:
        path: the input file.
        opts: prepare options; uses the slicing options, ``weights`` and ``labels``.

    Raises:
        DataError: bad input, or ``--weights given`` (JODIE has no weight column).
    """
    if opts.weights == "given":
        raise DataError(f"{path}: --weights given: JODIE files have no weight column; use ones or count")
    users, items, time, state = _parse(path)
    uidx, uids = remap_ids(users)
    iidx, iids = remap_ids(items)
    n_users = int(uids.shape[0])
    n = n_users + int(iids.shape[0])
    order = np.argsort(time, kind="stable")
    src, dst = uidx[order], (iidx + n_users)[order]
    time, state = time[order], state[order]
    slices = slice_events(time, path, **slicing_kwargs(opts))
    vertex_ids = np.array([f"u:{u}" for u in uids.tolist()] + [f"i:{i}" for i in iids.tolist()])
    with_state = opts.labels == "state"
    return PreparedInput(
        num_vertices=n,
        snapshots=_snapshots(src, dst, state if with_state else None, n, slices),
        vertex_ids=vertex_ids,
        num_classes=2 if with_state else 0,
        source={
            "events": int(src.shape[0]),
            "users": n_users,
            "items": int(iids.shape[0]),
            "time_min": float(time[0]),
            "time_max": float(time[-1]),
            "edge_features": "ignored",
        },
    )
