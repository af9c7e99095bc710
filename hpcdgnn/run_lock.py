"""A run directory held by the process that trains it: rank 0's exclusive ``flock`` on ``RUNDIR/run.lock``.

Standard library only (no torch): the job scripts (``jobs/lib.sh``) ask whether a run trains in a directory
before they touch it, and ``hpcdgnn.train.checkpoint.hold_run`` takes the lock.
"""

from __future__ import annotations

import errno
import fcntl
import os
from collections.abc import Mapping
from pathlib import Path

from hpcdgnn.errors import env_seconds

__all__ = ["LOCK_FILE", "RUN_LOCK_WAIT_S", "release_runs", "run_alive", "run_lock_wait"]

#: the file a training run's rank 0 holds locked (``hpcdgnn.train.checkpoint.hold_run``)
LOCK_FILE = "run.lock"
#: run directories (resolved) whose ``run.lock`` this process holds locked, and the descriptor holding each
_HELD: dict[Path, int] = {}
#: what flock answers on a file system without locks (Lustre mounted without ``flock``, some NFS set-ups; EBADF:
#: NFS's emulation on a descriptor it cannot lock for writing)
_NO_LOCKS = (errno.ENOLCK, errno.ENOSYS, errno.EOPNOTSUPP, errno.EINVAL, errno.EBADF)


#: seconds ``hold_run`` waits for another holder to let go (``HPCDGNN_RUN_LOCK_WAIT``)
RUN_LOCK_WAIT_S = 120.0


def run_lock_wait(environ: Mapping[str, str] = os.environ) -> float:
    """``HPCDGNN_RUN_LOCK_WAIT`` in seconds (>= 0), else :data:`RUN_LOCK_WAIT_S`.

    Raises:
        ConfigError: a value that is not a number >= 0.
    """
    return env_seconds("HPCDGNN_RUN_LOCK_WAIT", RUN_LOCK_WAIT_S, zero_ok=True, environ=environ)


def _lock(path: Path) -> int | None:
    """An exclusive ``flock`` on ``path`` (made if absent; opened for writing, which NFS's emulation of flock by
    byte-range locks needs), without waiting: its descriptor; None where another holds it.

    Raises:
        OSError: the file system refuses the lock itself (:data:`_NO_LOCKS`, or another reason).
    """
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    except OSError:
        os.close(fd)
        raise
    return fd


def run_alive(run_dir: Path) -> bool | None:
    """Whether a process holds ``run_dir`` (``hold_run``) now: True, False, or None where it cannot be told
    (a file system without locks)."""
    path = Path(run_dir) / LOCK_FILE
    if Path(run_dir).resolve() in _HELD:
        return True
    if not path.is_file():
        return False
    try:
        fd = _lock(path)
    except OSError:
        return None
    if fd is None:
        return True
    os.close(fd)
    return False


def release_runs(run_dir: Path | None = None) -> None:
    """Let go of ``run_dir`` (default: every run directory) this process holds (``hold_run``)."""
    if run_dir is not None:
        fd = _HELD.pop(Path(run_dir).resolve(), None)
        if fd is not None:
            os.close(fd)
        return
    while _HELD:
        os.close(_HELD.popitem()[1])
