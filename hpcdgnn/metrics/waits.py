"""Waiting for the last rank: the part of the exposed communication time that no overlap can hide.

Most exchanges of a training step are collectives of all ranks (an all-to-all, an all-reduce): no rank
can complete one before the last rank has entered it. So a rank's exposed time in such an exchange
(blocked inside MPI) has two parts:

* **late** — blocked before the last rank arrived (entered the blocking call, or posted the non-blocking
  exchange): waiting for a slower rank, whose cause is load imbalance or jitter, not the network. Hiding
  communication behind computation (``strategy.overlap_chunks``, ``comm.grad_buckets``,
  ``comm.progress``) cannot shorten it; balancing the ranks' work can.
* the rest, ``exposed - late`` — blocked after every rank had arrived: the transfer and the protocol,
  which is what overlap can hide.

This is the "late sender" wait state of MPI performance tools (Scalasca, Score-P). Each rank records its
arrival at each exchange — when it entered MPI, after its own staging and copies, which count as exposed
but never as late — and the intervals it was blocked in it (:class:`hpcdgnn.comm.exchange_log.
ExchangeLog`); at the end of the epoch, :func:`late_waits` finds each exchange's last arrival with
one all-reduce (max) of the arrival times and counts, per tag, the blocked time before it. Point-to-point
and group exchanges (pss's pipeline, DistTGL's groups, the sequences strategy's fetches) are not recorded:
whom they wait for is not one "last rank", so their tags get no late figure (``metrics/epoch.py``).
On a GPU the arrival is the host's: a rank whose kernels are still running enters MPI only after its
staging copy has waited for them, so GPU-side imbalance shows as late for the others, as it should.

Clocks: each rank's times are taken relative to the moment it leaves an all-reduce just before
(every rank leaves it within about one message latency of the others: microseconds on a node), so
ranks on different nodes need no synchronised clocks. A rank descheduled at that moment (more ranks
than cores) shifts its own figures by the delay.
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
    """Each exchange's last arrival over the ranks, on this rank's clock (``perf_counter``).

    Collective over ``comm`` (two all-reduces of ``metrics``). ``exchanges``: this rank's records since
    the epoch began (:meth:`~hpcdgnn.comm.communicator.CommStats.take_exchanges`), the same collectives
    in the same order on every rank. Returns None on every rank where any rank recorded a different
    number of exchanges or another tag at the same position: then the exchanges cannot be matched, and
    no figure is better than a wrong one.
    """
    n = len(exchanges)
    if comm.size == 1:  # nobody to wait for: everybody arrived on arrival
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
