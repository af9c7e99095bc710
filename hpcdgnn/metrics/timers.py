"""Per-epoch time split into load / compute / communication (time inside MPI calls of training tags,
:class:`~hpcdgnn.comm.CommStats`; compute is the rest) and its reduction over ranks."""

from __future__ import annotations

import numpy as np

__all__ = ["NON_TRAIN_TAGS", "WAIT_TAGS", "is_train_tag", "is_wait_tag", "summarize_over_ranks", "union_seconds"]

#: Communicator tags that are not training traffic; every other tag counts, so new strategies need no registration.
NON_TRAIN_TAGS = ("setup", "metrics", "barrier", "checkpoint", "control")
#: Of those, the agreements inside an epoch's passes (pre-emption's ``control.stop``): their bytes are no
#: training traffic, but their seconds are the epoch's communication — where a rank waits for a slower one
#: (under ``memory: k > 1`` the groups that do not evaluate wait there for the one that does)
WAIT_TAGS = ("control",)


def is_train_tag(tag: str) -> bool:
    """Whether a communicator tag is training traffic (see :data:`NON_TRAIN_TAGS`)."""
    return not tag.startswith(NON_TRAIN_TAGS)


def is_wait_tag(tag: str) -> bool:
    """Whether a tag's seconds count as the epoch's communication though its bytes are not traffic
    (:data:`WAIT_TAGS`)."""
    return tag.startswith(WAIT_TAGS)


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
    """Min/mean/max of each column of (P, 4) [epoch, load, compute, comm] seconds, and the split of the rank
    with the most load + compute (epoch times end in a collective, so the largest names a rank by chance)."""
    out = {f: {"min": float(per_rank[:, i].min()), "mean": float(per_rank[:, i].mean()),
               "max": float(per_rank[:, i].max())} for i, f in enumerate(TIME_SPLIT)}
    slow = int((per_rank[:, 1] + per_rank[:, 2]).argmax())
    out["slowest_rank"] = slow
    out["slowest"] = {f: float(per_rank[slow, i]) for i, f in enumerate(TIME_SPLIT)}
    return out
