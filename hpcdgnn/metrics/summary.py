"""``summary.json``: what a finished (or pre-empted) run reports for scripts and plots.

Final metrics, time and byte totals of the whole run (a resumed one's earlier epochs included, read
from ``metrics.jsonl``), the steady epoch time (median and mean of the slowest rank over non-warm-up
epochs), S3 transfer bytes, per-rank memory (peak RSS, device-held inputs, activation peak, host
payloads, GPU peak) and the environment (ranks, threads, device, backend, library versions, host).
Every rank joins one gather of its memory figures; rank 0 writes the file.
"""

from __future__ import annotations

import platform
import resource
import socket

import numpy as np
import torch

from hpcdgnn.metrics.timers import TIME_SPLIT
from hpcdgnn.nn import kernels

__all__ = ["device_name", "write_summary"]


def device_name(device: torch.device) -> str:
    """``cpu``, or the GPU's name: summary.json's ``environment.device`` (benchmarks compare sides by it)."""
    return str(device) if device.type == "cpu" else torch.cuda.get_device_name(device)


def _memory(comm, run, activation_peak: float) -> np.ndarray:
    """Per-rank memory figures (collective): RSS, engine, activations, host payloads, GPU, setup transfer."""
    device = run.device
    gpu_max = float(torch.cuda.max_memory_allocated(device)) if device.type == "cuda" else 0.0
    return comm.gather_array(
        [
            resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024.0,
            run.strategy.engine_bytes(),
            activation_peak,
            run.strategy.host_bytes(),
            gpu_max,
            float(run.setup_transfer),
        ]
    )


def _environment(comm, run) -> dict:
    import mpi4py

    from hpcdgnn.allocator import describe as describe_allocator

    job, device = run.job, run.device
    return {
        "num_ranks": comm.size,
        "threads_per_rank": run.threads,
        "progress_thread_ranks": comm.progress_ranks,  # comm.progress: ranks whose exchanges a thread moved
        "progress_thread_dedicated_ranks": comm.progress_dedicated,  # of them, threads with a core of their own
        "device": device_name(device),
        "comm_backend": job.comm.backend,
        "dtype": job.train.dtype,
        "mpi_library": comm.library_version(),
        "mpi4py": mpi4py.__version__,
        "torch": torch.__version__,
        "python": platform.python_version(),
        "host": socket.gethostname(),
        "host_allocator": describe_allocator(),  # rank 0's; every rank starts with the same environment
    }


def _seconds(records: list[dict]) -> dict[str, float]:
    """The slowest rank's split summed over the epochs — ``epoch``, ``load``, ``compute``, ``comm`` and, where every
    epoch has them, ``comm_exposed`` (load + compute + comm_exposed = epoch) and ``comm_late``."""
    keys = (*TIME_SPLIT, "comm_exposed", "comm_late")
    return {k: float(sum(r["slowest"][k] for r in records)) for k in keys
            if all(r["slowest"].get(k) is not None for r in records)}


def write_summary(comm, rd, run, records: list[dict], activation_peak: float, preempted: bool,
                  status: str | None = None) -> None:
    """Gather the memory figures (every rank) and write ``summary.json`` (rank 0, ``rd`` not None).

    ``records``: every epoch of the run, those before a resume included (``metrics.jsonl``'s), so that the
    totals and the steady epoch time are the whole run's, not the last attempt's."""
    mem = _memory(comm, run, activation_peak)
    if rd is None:
        return
    steady = [r for r in records if not r["warmup"]] or records
    epoch_bytes = int(sum(r["transfer_bytes"] for r in records))
    rd.save_summary(
        {
            "job": str(run.job_path),
            "status": status or ("preempted" if preempted else "completed"),
            "resumed_from_epoch": run.start_epoch,
            "final": records[-1] if records else None,
            "epochs": len(records),
            "totals": {
                "seconds": _seconds(records),
                "bytes_sent": int(sum(r["bytes_sent"] for r in records)),
                "setup_seconds": run.setup_seconds,
            },
            "transfer": {
                "mode": getattr(run.job.strategy, "transfer", None),  # strategies with S3 only
                "setup_bytes": int(mem[:, 5].sum()),
                "epoch_bytes": epoch_bytes,
            },
            "transfer_bytes": int(mem[:, 5].sum()) + epoch_bytes,
            "steady_epoch_seconds": {
                # the slowest rank's, as the totals and perf/scaling.py's epoch_s (its own wall time: within the
                # epoch's last local work of the largest, time.epoch.max)
                "median": float(np.median([r["slowest"]["epoch"] for r in steady])) if steady else None,
                "mean": float(np.mean([r["slowest"]["epoch"] for r in steady])) if steady else None,
            },
            "memory": {
                "peak_rss_bytes": [int(v) for v in mem[:, 0]],
                "engine_bytes": [int(v) for v in mem[:, 1]],
                "activation_peak_bytes": [int(v) for v in mem[:, 2]],
                "engine_peak_bytes": [int(v) for v in mem[:, 1] + mem[:, 2]],
                "host_payload_bytes": [int(v) for v in mem[:, 3]],
                **({"gpu_max_allocated_bytes": [int(v) for v in mem[:, 4]]} if run.device.type == "cuda" else {}),
            },
            "parameters": {"count": sum(p.numel() for p in run.params), "initial_checksum": run.initial_checksum,
                           **({"resumed_checksum": run.checksum} if run.start_epoch else {})},
            "compiled_kernels": kernels.calls(),  # rank 0's calls of each numba loop (none: the torch paths)
            "environment": _environment(comm, run),
        }
    )
