"""Per-epoch time split into load / compute / communication and its reduction over ranks.

Communication seconds come from the :class:`~hpcdgnn.comm.CommStats` of the
training tags (time inside MPI calls, including waiting for peers); load is
what the strategy reports for reading or moving input; compute is the rest
of the epoch's wall time on that rank. Barrier time is its own tag and the
trainer uses no barrier inside an epoch.
"""

from __future__ import annotations

import numpy as np

__all__ = ["NON_TRAIN_TAGS", "is_train_tag", "summarize_over_ranks", "union_seconds"]

#: Communicator tags that are not training traffic: set-up, metrics, barriers and checkpoints.
#: Every other tag (a strategy's redistributions, halos, pipeline passes; the gradient all-reduce)
#: counts in ``bytes_sent`` and the ``comm`` seconds, so a new strategy needs no registration here.
NON_TRAIN_TAGS = ("setup", "metrics", "barrier", "checkpoint")


def is_train_tag(tag: str) -> bool:
    """Whether a communicator tag is training traffic (see :data:`NON_TRAIN_TAGS`)."""
    return not tag.startswith(NON_TRAIN_TAGS)


def union_seconds(spans: list[tuple[float, float]]) -> float:
    """Seconds covered by at least one of the intervals ``(start, end)``: overlapping ones count once."""
    total, reach = 0.0, float("-inf")
    for a, b in sorted(spans):
        if b > reach:
            total += b - max(a, reach)
            reach = b
    return total

#: The columns of the per-epoch time split, in the order ranks gather them.
TIME_SPLIT = ("epoch", "load", "compute", "comm")


def summarize_over_ranks(per_rank: np.ndarray) -> dict:
    """From a (P, 4) array of [epoch, load, compute, comm] seconds: min/mean/max of each and the
    slowest rank's own split: the rank that worked longest (load + compute), which the others waited for.

    Not the rank with the largest epoch time: an epoch ends in a collective on every rank, so their epoch
    times differ by microseconds and the largest would name a rank by chance — often one that spent most of
    the epoch waiting for the others, whose split then reads as communication-bound.
    """
    out = {f: {"min": float(per_rank[:, i].min()), "mean": float(per_rank[:, i].mean()),
               "max": float(per_rank[:, i].max())} for i, f in enumerate(TIME_SPLIT)}
    slow = int((per_rank[:, 1] + per_rank[:, 2]).argmax())
    out["slowest_rank"] = slow
    out["slowest"] = {f: float(per_rank[slow, i]) for i, f in enumerate(TIME_SPLIT)}
    return out
