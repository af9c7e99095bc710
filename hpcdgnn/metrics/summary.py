"""``summary.json``: what a finished (or pre-empted) run reports for scripts and plots.

Final metrics, whole-run totals (a resume's earlier epochs included), the steady epoch time, per-rank memory
and the environment; every rank joins one gather of its memory figures, rank 0 writes the file.
"""

from __future__ import annotations

import platform
import resource
import socket
from array import array
from collections import Counter

import numpy as np
import torch

from hpcdgnn.api import job_record
from hpcdgnn.comm.device import cpu_affinity
from hpcdgnn.metrics.epoch import run_gpu_peak
from hpcdgnn.metrics.results import iter_epoch_records
from hpcdgnn.metrics.timers import TIME_SPLIT
from hpcdgnn.ops import kernels

__all__ = ["RunTotals", "device_name", "write_summary"]


def device_name(device: torch.device) -> str:
    """``cpu``, or the GPU's name (``environment.device``)."""
    return str(device) if device.type == "cpu" else torch.cuda.get_device_name(device)


def _memory(comm, run, activation_peak: float) -> np.ndarray:
    """Per-rank figures (collective): RSS, engine, activations, host payloads, GPU (the run's peak, every epoch's:
    :func:`~hpcdgnn.metrics.epoch.run_gpu_peak`), setup transfer — and the bytes
    this rank sent under set-up tags (the set-up's collectives and halo reads; no epoch counts them) and in the
    pre-training phase's training exchanges (nor do they)."""
    device, usage = run.device, run.strategy.usage()
    gpu_max = run_gpu_peak(device) if device.type == "cuda" else 0.0  # the whole run's, not the last epoch's
    return comm.gather_array(
        [
            resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024.0,
            usage.engine_bytes,
            activation_peak,
            usage.host_bytes,
            gpu_max,
            float(run.setup_transfer),
            float(sum(s.bytes_sent for tag, s in comm.stats.tags.items() if tag.startswith("setup"))),
            float(run.pretrain_bytes_sent),
        ]
    )


def _environment(comm, run, placed: list[tuple[str, str, int]]) -> dict:
    """The environment from ``placed`` (per rank: host, device name, CPU mask): ranks per host and device kind,
    and each host's CPUs (the union of its ranks' affinities)."""
    import mpi4py

    from hpcdgnn.allocator import describe as describe_allocator

    job, device = run.job, run.device
    hosts = dict(Counter(h for h, _, _ in placed))
    masks: dict[str, int] = {}
    for h, _, mask in placed:
        masks[h] = masks.get(h, 0) | mask
    return {
        "num_ranks": comm.size,
        "threads_per_rank": run.threads,
        "device": device_name(device),
        "comm_backend": job.comm.backend,
        "dtype": job.train.dtype,
        "mpi_library": comm.world.library_version(),
        "mpi4py": mpi4py.__version__,
        "torch": torch.__version__,
        "python": platform.python_version(),
        "host": placed[0][0],
        "num_nodes": len(hosts),
        "hosts": hosts,
        "host_cpus": {h: m.bit_count() for h, m in masks.items()},
        "devices": dict(Counter(d for _, d, _ in placed)),
        "host_allocator": describe_allocator(),  # rank 0's: every rank has the same environment
    }


class RunTotals:
    """What ``summary.json`` needs of the run's epochs, as running sums (records are not kept in memory)."""

    #: the slowest rank's split summed over epochs: load + compute + comm_exposed = epoch
    KEYS = (*TIME_SPLIT, "comm_exposed", "comm_late")

    def __init__(self, num_ranks: int) -> None:
        #: the run's rank count now: only its epochs make the steady epoch time (a resume on another P ran the
        #: earlier ones on other counts; they stay in the totals, and are counted apart)
        self.num_ranks, self.other_ranks = num_ranks, 0
        self.epochs, self.bytes_sent, self.transfer_bytes = 0, 0, 0
        self.seconds = dict.fromkeys(self.KEYS, 0.0)
        self._missing: set[str] = set()  # keys some epoch lacks
        # the slowest rank's epoch seconds: steady, warm-up (fallback) and profiled (last resort), as C doubles;
        # an epoch a resume continued within timed only its batches after the resume's: in none
        self.steady, self.warm, self.profiled = array("d"), array("d"), array("d")
        self.final: dict | None = None

    def add(self, r: dict) -> None:
        """Count one epoch record."""
        self.epochs += 1
        self.bytes_sent += int(r["bytes_sent"])
        self.transfer_bytes += int(r["transfer_bytes"])
        for k in self.KEYS:
            v = r["slowest"].get(k)
            if v is None:
                self._missing.add(k)
            else:
                self.seconds[k] += float(v)
        self.final = r
        if len(r["per_rank"]["epoch"]) != self.num_ranks:
            self.other_ranks += 1
            return
        if r.get("resumed_after_batches"):
            return
        series = self.profiled if r.get("profiled") else self.warm if r["warmup"] else self.steady
        series.append(float(r["slowest"]["epoch"]))

    def add_file(self, path) -> None:
        """Count the records of a ``metrics.jsonl``, line by line."""
        for r in iter_epoch_records(path):
            self.add(r)

    def seconds_summed(self) -> dict[str, float]:
        """The summed split, without the keys some epoch lacks."""
        return {k: v for k, v in self.seconds.items() if k not in self._missing}

    def steady_seconds(self) -> dict[str, float | str | None]:
        """Median and mean of the slowest rank's epoch time over steady epochs of the run's rank count, never an
        epoch a resume continued within (None for none), and ``over``: which epochs. With no steady epoch, the last
        warm-up epoch (the first, slowest, says least of the epochs to come; as ``perf/scaling.py`` reads a run),
        else the profiled ones."""
        times, over = ((self.steady, "steady") if self.steady else (self.warm[-1:], "last warm-up") if self.warm
                       else (self.profiled, "profiled") if self.profiled else ([], None))
        return {"median": float(np.median(times)) if times else None,
                "mean": float(np.mean(times)) if times else None, "over": over}


def write_summary(comm, rd, run, totals: RunTotals, activation_peak: float, preempted: bool,
                  status: str | None = None) -> None:
    """Gather the memory figures (every rank) and write ``summary.json`` (rank 0); ``totals``: the whole run's."""
    mem = _memory(comm, run, activation_peak)
    mask = sum(1 << c for c in cpu_affinity())
    placed = comm.allgather_obj((socket.gethostname(), device_name(run.device), mask), tag="metrics")
    if rd is None:
        return
    epoch_bytes = totals.transfer_bytes
    rd.save_summary(
        {
            "job": job_record(run.job_path),
            "status": status or ("preempted" if preempted else "completed"),
            "resumed_from_epoch": run.start_epoch,
            # a resume within the next epoch: after how many of its batches
            **({"resumed_from_batch": run.start_batch} if run.start_batch else {}),
            "final": totals.final,
            "epochs": totals.epochs,
            # run on another rank count before a resume on this one: in the totals, not the steady epoch time
            "epochs_on_other_rank_counts": totals.other_ranks,
            "totals": {
                "seconds": totals.seconds_summed(),
                "bytes_sent": totals.bytes_sent,
                "setup_bytes_sent": int(mem[:, 6].sum()),
                "setup_seconds": run.setup_seconds,
                "pretrain_seconds": run.pretrain_seconds,
                "pretrain_bytes_sent": int(mem[:, 7].sum()),
            },
            "transfer": {
                "mode": getattr(run.job.strategy, "transfer", None),  # strategies with S3 only
                "setup_bytes": int(mem[:, 5].sum()),
                "epoch_bytes": epoch_bytes,
            },
            "transfer_bytes": int(mem[:, 5].sum()) + epoch_bytes,
            # the slowest rank's, as the totals and perf/scaling.py's epoch_s
            "steady_epoch_seconds": totals.steady_seconds(),
            "memory": {
                "peak_rss_bytes": [int(v) for v in mem[:, 0]],
                "engine_bytes": [int(v) for v in mem[:, 1]],
                "activation_peak_bytes": [int(v) for v in mem[:, 2]],
                "engine_peak_bytes": [int(v) for v in mem[:, 1] + mem[:, 2]],
                "host_payload_bytes": [int(v) for v in mem[:, 3]],
                **({"gpu_max_allocated_bytes": [int(v) for v in mem[:, 4]]} if run.device.type == "cuda" else {}),
            },
            "parameters": {"count": sum(p.numel() for p in run.params), "initial_checksum": run.initial_checksum,
                           **({"resumed_checksum": run.checksum} if run.resumed else {})},
            "compiled_kernels": kernels.calls(),  # rank 0's calls of each numba loop (none: the torch paths)
            "environment": _environment(comm, run, placed),
        }
    )
