"""User-facing error types.

Every failure a user can cause (bad YAML, a missing shard, an impossible plan)
raises one of these. The CLI prints ``hpcdgnn: error: <message>`` on one line
and exits with code 2; the message itself names the file, key or rank, so no
traceback is needed. Anything else is a bug and takes the abort path in
``hpcdgnn.__main__`` (traceback with the rank, then ``MPI_Abort``).
"""

from __future__ import annotations

import reprlib
from pathlib import Path
from typing import Any

__all__ = ["HpcdgnnError", "ConfigError", "DataError", "PlanError", "CommFailure", "StalledError", "PeerLostError",
           "EXIT_USAGE", "EXIT_PREEMPTED", "EXIT_STALLED", "nearest_existing", "not_a_directory", "short_repr"]

# bounded in depth and length *while* it is built: a YAML alias bomb (9 nested levels of 9 aliases, 426 bytes)
# is billions of values deep, so cutting a full repr() afterwards never finishes
_REPR = reprlib.Repr()  # keyword arguments only from Python 3.12
_REPR.maxlevel, _REPR.maxlist, _REPR.maxtuple, _REPR.maxdict, _REPR.maxset = 3, 4, 4, 4, 4
_REPR.maxstring, _REPR.maxother, _REPR.maxlong = 60, 60, 40


def not_a_directory(path: str | Path) -> str:
    """Why the dataset directory ``path`` is none, for a message: a file (or another non-directory) is there, or
    nothing is."""
    return "is a file, not a dataset directory" if Path(path).exists() else "does not exist"


def nearest_existing(path: str | Path) -> Path:
    """``path`` or its nearest existing ancestor: where a directory to be made would be created."""
    there = Path(path)
    while not there.exists() and there != there.parent:
        there = there.parent
    return there


def short_repr(value: Any, limit: int = 60) -> str:
    """``repr`` of a user's value cut to one short line, for an error message."""
    r = _REPR.repr(value).replace("\n", " ")
    return r if len(r) <= limit else r[: limit - 3] + "..."

#: Exit status of every user error (config, data, plan): the shell convention
#: for "wrong usage", distinct from 1 (a crash) so job scripts can tell them apart.
EXIT_USAGE = 2

#: Exit status after a pre-emption signal (SIGTERM or SIGUSR1): every rank wrote its part of a
#: checkpoint at an epoch boundary and stopped; job scripts requeue and ``run --resume``.
#: 75 is sysexits' EX_TEMPFAIL ("try again later").
EXIT_PREEMPTED = 75

#: Exit status when the stall watchdog ends a job (``comm.stall_timeout_s``): some rank made no
#: progress for that long; the job's newest checkpoint is intact, so a script may resume it.
EXIT_STALLED = 3


class HpcdgnnError(Exception):
    """Base class: an error caused by the user's input, reported in one line."""

    #: the process's exit status when this ends a run
    exit_code = EXIT_USAGE


class ConfigError(HpcdgnnError):
    """The job YAML or a ``--set`` override is invalid (``file: key: problem; fix``)."""


class DataError(HpcdgnnError):
    """A dataset directory, manifest or shard is missing or malformed (names the file)."""


class PlanError(HpcdgnnError):
    """A partition plan cannot be built for this dataset and rank count."""


class CommFailure(Exception):
    """A collective that failed for want of a peer, reported in one line by the rank that met it, which then
    ends the job (``MPI_Abort``). Not an :class:`HpcdgnnError`: those the ranks agree on over MPI
    (:func:`hpcdgnn.train.collective.agree`), and a rank waiting on a lost peer must not wait in MPI again."""

    exit_code = 1


class StalledError(CommFailure):
    """A collective gave up waiting for a peer (``comm.timeout_s`` of gloo/nccl): lost, or slower than the
    timeout. Exit :data:`EXIT_STALLED`, as the watchdog's."""

    exit_code = EXIT_STALLED


class PeerLostError(CommFailure):
    """A gloo connection to a peer broke mid-collective: that rank ended (its own error says why), so this one
    reports the loss in one line, not a traceback of its own. Exit 1, as the crash it follows."""
