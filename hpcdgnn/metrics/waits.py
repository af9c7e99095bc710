"""Waiting for the last rank: the part of the exposed communication time that no overlap can hide.

No rank completes a collective before the last one enters, so blocked time splits into **late**
(before the last arrival: imbalance or jitter; MPI tools' "late sender") and ``exposed - late`` (the
transfer, which overlap can hide). Arrivals are host times on entering MPI; times are relative to
leaving a preceding all-reduce, so no synchronised clocks are needed. Point-to-point and group
exchanges have no single last rank and get no late figure.
"""

from __future__ import annotations

import time
import zlib

import numpy as np

from hpcdgnn.comm.exchange_log import ExchangeLog

__all__ = ["last_arrivals", "late_waits", "tag_id"]


def tag_id(tag: str) -> float:
    """A tag as a number the ranks can compare in an all-reduce (crc32: exact in float64)."""
    return float(zlib.crc32(tag.encode()))


def last_arrivals(comm, exchanges: ExchangeLog) -> np.ndarray | None:
    """Each exchange's last arrival over the ranks, on this rank's clock; collective over ``comm``. None on every
    rank unless all ranks recorded the same collectives in the same order (no figure beats a wrong one)."""
    n = len(exchanges)
    if comm.size == 1:
        return exchanges.arrivals
    most, fewest = comm.allreduce_array([n, -n], op="max", tag="metrics")
    zero = time.perf_counter()  # the clocks' common zero (module docstring)
    if most != -fewest:
        return None
    if n == 0:
        return np.zeros(0)
    ids = np.array([tag_id(tag) for tag in exchanges.names])[exchanges.codes]
    top = comm.allreduce_array(np.concatenate([exchanges.arrivals - zero, ids, -ids]), op="max", tag="metrics")
    if not np.array_equal(top[n:2 * n], -top[2 * n:]):
        return None
    return top[:n] + zero


def late_waits(comm, exchanges: ExchangeLog) -> dict[str, float] | None:
    """Per tag, the seconds this rank was blocked in ``exchanges`` before the last rank arrived there
    (:func:`last_arrivals`, collective); None where the ranks' records do not match."""
    last = last_arrivals(comm, exchanges)
    return None if last is None else exchanges.late(last)
