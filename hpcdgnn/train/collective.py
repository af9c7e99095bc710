"""Agreeing on user errors across ranks, so a bad input ends every rank cleanly (no hang, no Abort).

Under :func:`agree` each rank catches its own :class:`HpcdgnnError`, the ranks all-gather who failed, and every
rank raises the same error (``collective``): rank 0 prints it once and all exit 2.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from hpcdgnn.comm.communicator import Communicator
from hpcdgnn.errors import HpcdgnnError

__all__ = ["agree", "agree_start", "collective_error", "root_then_bcast"]

R = TypeVar("R")


def collective_error(err: HpcdgnnError) -> HpcdgnnError:
    """Mark ``err`` as raised on every rank alike (rank 0 reports it; all exit 2 without Abort)."""
    err.collective = True  # type: ignore[attr-defined]
    return err


def _raise_collective(err_type: type[HpcdgnnError], msg: str) -> None:
    raise collective_error(err_type(msg))


def agree(comm: Communicator, fn: Callable[[], R]) -> R:
    """Run ``fn`` on every rank; if it raised a user error on any rank, raise it on all ranks."""
    result, failure = None, None
    try:
        result = fn()
    except HpcdgnnError as e:
        failure = (type(e), str(e))
    failures = comm.allgather_obj(failure, tag="setup")
    for rank, f in enumerate(failures):
        if f is not None:
            prefix = f"rank {rank}: " if comm.size > 1 and rank != 0 else ""
            _raise_collective(f[0], prefix + f[1])
    return result  # type: ignore[return-value]


def _check_environment() -> None:
    """Refuse a bad ``HPCDGNN_KERNELS``, ``HPCDGNN_KERNELS_SKIP``, ``HPCDGNN_BUCKET_BYTES``,
    ``HPCDGNN_START_TIMEOUT`` or ``HPCDGNN_SHM_LIMIT_MB`` (one line naming the variable)."""
    from hpcdgnn.comm.world import shm_limit_mib, start_timeout
    from hpcdgnn.ops import kernels
    from hpcdgnn.tasks.link_prediction import bucket_bytes

    kernels.mode()
    bucket_bytes()
    start_timeout()
    shm_limit_mib()


def agree_start(comm: Communicator) -> None:
    """What every SPMD command and API call checks first, as one error on every rank: a world of the size the
    launcher meant (srun without PMIx starts P separate 1-rank jobs), and the ``HPCDGNN_*`` variables a run reads
    (:func:`agree`: one line from rank 0, naming another rank whose environment alone is wrong, not one line per
    rank or an abort mid-set-up)."""
    from hpcdgnn.comm.world import check_world_size
    from hpcdgnn.errors import ConfigError

    wrong = check_world_size(comm.size)
    if wrong:
        raise collective_error(ConfigError(wrong))
    agree(comm, _check_environment)


def root_then_bcast(comm: Communicator, fn: Callable[[], R]) -> R:
    """Run ``fn`` on rank 0 only and broadcast its result — or its user error — to every rank."""
    payload: tuple[str, object] = ("ok", None)
    if comm.rank == 0:
        try:
            payload = ("ok", fn())
        except HpcdgnnError as e:
            payload = ("err", (type(e), str(e)))
    kind, value = comm.bcast_obj(payload, tag="setup")
    if kind == "err":
        _raise_collective(value[0], value[1])  # type: ignore[index]
    return value  # type: ignore[return-value]
