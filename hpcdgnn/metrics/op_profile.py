"""One epoch under torch's profiler on every rank (``debug.profile_epoch``): where compute time goes, by operator.

The profiler only observes, so results are unchanged; its overhead flags the epoch ``profiled``
(out of ``summary.json``'s steady median). Each rank writes ``RUNDIR/profile/rank<r>.txt`` (torch's
table, top rows by self CPU time) and ``rank<r>.json`` (every operator's name, calls, self/total
seconds). MPI inside an autograd function counts in its row (``Redistribute``...); between operators
(the gradient all-reduce) in none: ``comm_by_tag`` has those.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path

import torch

__all__ = ["PROFILE_DIR", "profiled", "write_profile"]

PROFILE_DIR = "profile"
"""The run directory's folder of the profile files."""

_TABLE_ROWS = 40


@contextlib.contextmanager
def profiled(on: bool, device: torch.device) -> Iterator[object | None]:
    """Run the block under torch's profiler when ``on`` (CPU, and CUDA on a GPU); yields the profiler, or None."""
    if not on:
        yield None
        return
    if device.type == "cuda":
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            yield prof
        return
    # CPU: torch's own event recorder; kineto's first start can cost more than a small epoch
    with torch.autograd.profiler.profile(use_kineto=False) as prof:
        yield prof


def write_profile(prof, run_dir: Path, rank: int, epoch: int) -> Path:
    """Write ``prof``'s operator table and records (module docstring) for this rank; returns the text file."""
    out = Path(run_dir) / PROFILE_DIR
    out.mkdir(parents=True, exist_ok=True)
    averages = prof.key_averages()
    device = any(getattr(e, "self_device_time_total", 0) for e in averages)
    rows = []
    for e in sorted(averages, key=lambda e: e.self_cpu_time_total, reverse=True):
        row = {"name": e.key, "calls": int(e.count), "self_cpu_s": e.self_cpu_time_total / 1e6,
               "cpu_total_s": e.cpu_time_total / 1e6}
        if device:
            row["self_device_s"] = e.self_device_time_total / 1e6
        rows.append(row)
    (out / f"rank{rank}.json").write_text(json.dumps({"epoch": epoch, "rank": rank, "operators": rows}, indent=1)
                                          + "\n")
    text = out / f"rank{rank}.txt"
    text.write_text(f"epoch {epoch}, rank {rank}\n"
                    + averages.table(sort_by="self_cpu_time_total", row_limit=_TABLE_ROWS) + "\n")
    return text
