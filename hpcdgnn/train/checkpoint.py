"""Training checkpoints: written atomically at epoch boundaries, read by ``run --resume RUNDIR``.

Layout (``checkpoint.dir``, default ``RUNDIR/checkpoints``)::

    epoch-000006/
      state.pt           rank 0: epoch, model, task head, optimizer, plan, resolved config
      rank-00000.pt ...  every rank: its torch / numpy / python RNG states and its strategy's state
      COMPLETE           written last: {"epoch", "num_ranks"} (JSON)

Every rank writes its files into ``epoch-XXXXXX.tmp/``; after a barrier rank 0
writes ``COMPLETE`` and renames the directory to ``epoch-XXXXXX`` (one atomic
rename on a POSIX file system), then deletes all but the newest ``keep``. A
job killed at any moment therefore leaves either the previous checkpoints or
the new one, never a half-written one; :func:`latest_checkpoint` ignores
``.tmp`` directories and any directory without ``COMPLETE``. The run directory
must be on a file system all ranks share (the usual scratch or home of a
cluster).

The parameters and Adam moments are the same on every rank (gradients are
all-reduced), so rank 0 saves them once. Resuming reloads them bit for bit,
so the continued run's losses and final parameters equal an uninterrupted
run's (the test compares them bitwise on CPU). Negative sampling is seeded by
``(seed, epoch, t)`` and needs no state; the RNG states are saved anyway so a
future stochastic component stays exact.
"""

from __future__ import annotations

import json
import os
import pickle
import random
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch

from hpcdgnn.errors import DataError

__all__ = ["CheckpointManager", "latest_checkpoint", "load_shared", "load_state", "restore_rng"]

_COMPLETE = "COMPLETE"


def _epoch_dir(root: Path, epoch: int) -> Path:
    return root / f"epoch-{epoch:06d}"


def _atomic_save(obj: Any, path: Path) -> None:
    tmp = path.with_name(path.name + ".part")
    with open(tmp, "wb") as f:
        torch.save(obj, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _rng_state() -> dict[str, Any]:
    return {"torch": torch.get_rng_state(), "numpy": np.random.get_state(), "python": random.getstate()}


def restore_rng(state: dict[str, Any]) -> None:
    """Set the process's torch, numpy and python RNG states."""
    torch.set_rng_state(state["torch"])
    np.random.set_state(state["numpy"])
    random.setstate(state["python"])


def _rank_file(rank: int) -> str:
    return f"rank-{rank:05d}.pt"


def latest_checkpoint(root: str | Path) -> Path | None:
    """The newest complete checkpoint directory under ``root``, or None."""
    root = Path(root)
    if not root.is_dir():
        return None
    done = [d for d in root.glob("epoch-*") if d.is_dir() and not d.name.endswith(".tmp") and (d / _COMPLETE).is_file()]
    return max(done, key=lambda d: d.name, default=None)


def load_shared(ckpt: Path) -> dict[str, Any]:
    """The shared state (``state.pt``: epoch, model, optimizer, plan, ...) of checkpoint ``ckpt`` alone, without
    a rank's state — which can be large (stale aggregation's caches: hundreds of MiB).

    Raises:
        DataError: an unreadable checkpoint (names the file).
    """
    try:
        return torch.load(ckpt / "state.pt", map_location="cpu", weights_only=False)
    except (OSError, ValueError, pickle.UnpicklingError, RuntimeError) as e:
        raise DataError(f"{ckpt}: cannot read checkpoint: {e}") from None


def load_state(ckpt: Path, rank: int, num_ranks: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """(shared state, this rank's state) of checkpoint directory ``ckpt``; the rank's state has
    ``rng`` (for :func:`restore_rng`) and ``strategy`` (for ``Strategy.load_state_dict``).

    A run resumed on a different number of ranks gives rank r the RNG state of
    rank ``r mod P_old`` and no strategy state (the plan changed with P).

    Raises:
        DataError: an unreadable checkpoint (names the file).
    """
    state = load_shared(ckpt)
    try:
        meta = json.loads((ckpt / _COMPLETE).read_text())
        old_p = int(meta["num_ranks"])
        mine = torch.load(ckpt / _rank_file(rank % old_p), map_location="cpu", weights_only=False)
        if old_p != num_ranks:
            mine["strategy"] = {}
    except (OSError, ValueError, KeyError, pickle.UnpicklingError, RuntimeError) as e:
        raise DataError(f"{ckpt}: cannot read checkpoint: {e}") from None
    return state, mine


class CheckpointManager:
    """Writes checkpoints of a run (every rank calls :meth:`save` at the same epoch boundary)."""

    def __init__(self, root: str | Path, keep: int, comm) -> None:
        self.root = Path(root)
        self.keep = keep
        self.comm = comm

    def save(self, epoch: int, shared: dict[str, Any], strategy_state: dict[str, Any] | None = None) -> Path:
        """Write the checkpoint of ``epoch``; ``shared`` (model, optimizer, ...) is written by rank 0,
        ``strategy_state`` by every rank.
        """
        final = _epoch_dir(self.root, epoch)
        tmp = final.with_name(final.name + ".tmp")
        if self.comm.rank == 0:
            shutil.rmtree(tmp, ignore_errors=True)  # left by a job killed while writing
            tmp.mkdir(parents=True)
        self.comm.barrier(tag="checkpoint")
        _atomic_save({"rng": _rng_state(), "strategy": strategy_state or {}}, tmp / _rank_file(self.comm.rank))
        if self.comm.rank == 0:
            _atomic_save(shared, tmp / "state.pt")
        self.comm.barrier(tag="checkpoint")
        if self.comm.rank == 0:
            (tmp / _COMPLETE).write_text(json.dumps({"epoch": epoch, "num_ranks": self.comm.size}) + "\n")
            if final.exists():  # the same epoch saved again (a resumed run that re-ran it)
                shutil.rmtree(final)
            os.replace(tmp, final)
            done = sorted(d for d in self.root.glob("epoch-*") if d.is_dir() and not d.name.endswith(".tmp"))
            for old in done[: max(0, len(done) - self.keep)]:
                shutil.rmtree(old, ignore_errors=True)
        self.comm.barrier(tag="checkpoint")
        return final
