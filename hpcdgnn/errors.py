"""User-facing error types: printed as one ``hpcdgnn: error: <message>`` line, exit 2.

Anything else is a bug and takes the abort path in ``hpcdgnn.__main__`` (traceback with the rank, ``MPI_Abort``).
"""

from __future__ import annotations

import os
import reprlib
from pathlib import Path
from typing import Any

__all__ = ["HpcdgnnError", "ConfigError", "DataError", "PlanError", "StoppedError", "SetUpStopped", "CommFailure",
           "StalledError", "PeerLostError", "EXIT_USAGE", "EXIT_PREEMPTED", "EXIT_STALLED", "cannot_create",
           "nearest_existing", "not_a_directory", "env_seconds", "out_of_memory", "short_repr"]

# bounded *while* built: a YAML alias bomb's full repr() would never finish
_REPR = reprlib.Repr()  # keyword arguments only from Python 3.12
_REPR.maxlevel, _REPR.maxlist, _REPR.maxtuple, _REPR.maxdict, _REPR.maxset = 3, 4, 4, 4, 4
_REPR.maxstring, _REPR.maxother, _REPR.maxlong = 60, 60, 40


def not_a_directory(path: str | Path) -> str:
    """Why ``path`` is no dataset directory: something else is there, or nothing is."""
    return "is a file, not a dataset directory" if Path(path).exists() else "does not exist"


def nearest_existing(path: str | Path) -> Path:
    """``path`` or its nearest existing ancestor: where a directory to be made would be created."""
    there = Path(path)
    while not there.exists() and there != there.parent:
        there = there.parent
    return there


def cannot_create(path: str | Path) -> str | None:
    """Why a directory at ``path`` cannot be made (its nearest existing ancestor is a file, or not writable),
    else None."""
    there = nearest_existing(path)
    if not there.is_dir():
        return f"{there} is a file, not a directory"
    return None if os.access(there, os.W_OK | os.X_OK) else f"{there} is not writable"


def _umask() -> int:
    """The process's umask, read without changing it where Linux (4.7+) shows it in ``/proc/self/status``.

    Setting it to read it back (``os.umask``, the only portable way) changes it for every thread a moment: a file
    the prefetch or a writer thread creates then gets the wrong mode. That way is left for systems without the line.
    """
    try:
        with open("/proc/self/status", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    umask = os.umask(0o022)
    os.umask(umask)
    return umask


def umask_mode(path: str | Path) -> None:
    """Give ``path``, made by mkdtemp or mkstemp (0700 / 0600), the mode a plain mkdir or open would (0777 / 0666
    less the umask): what a user writes is readable by whom the umask lets read it (a group sharing a file system)."""
    path = Path(path)
    path.chmod((0o777 if path.is_dir() else 0o666) & ~_umask())


def out_of_memory(e: BaseException) -> str | None:
    """What an allocation that failed said (numpy's MemoryError, torch's CPU or CUDA allocator), else None."""
    text = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    if isinstance(e, MemoryError) or type(e).__name__ == "OutOfMemoryError" or "can't allocate memory" in text:
        return text[:200]
    return None


def short_repr(value: Any, limit: int = 60) -> str:
    """``repr`` of a user's value cut to one short line, for an error message."""
    r = _REPR.repr(value).replace("\n", " ")
    return r if len(r) <= limit else r[: limit - 3] + "..."

#: Exit status of every user error: "wrong usage", distinct from 1 (a crash).
EXIT_USAGE = 2

#: Exit status after a pre-emption checkpoint: sysexits' EX_TEMPFAIL ("try again later").
EXIT_PREEMPTED = 75

#: Exit status when the stall watchdog ends a job; the newest checkpoint is intact.
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


class StoppedError(HpcdgnnError):
    """A stop signal (SIGTERM, SIGINT, SIGUSR1) came before a run could start, while it waited: nothing was changed;
    exit :data:`EXIT_PREEMPTED` (the job scripts requeue it, as a pre-empted run)."""

    exit_code = EXIT_PREEMPTED


class SetUpStopped(StoppedError):
    """A stop signal ended a new run's set-up where it could not go on to the set-up's end (a wait for its run
    directory's lock), what it had made undone: no error, its message is the run's own pre-emption line
    (``pre-empted (SIGTERM) during the set-up, before any epoch, …``), printed as the run's lines are; exit
    :data:`EXIT_PREEMPTED`."""


class CommFailure(Exception):
    """A collective failed for want of a peer: one line, then ``MPI_Abort`` (never agreed on over MPI)."""

    exit_code = 1


class StalledError(CommFailure):
    """A gloo/nccl collective gave up waiting for a peer (``comm.timeout_s``); exit :data:`EXIT_STALLED`."""

    exit_code = EXIT_STALLED


class PeerLostError(CommFailure):
    """A gloo connection broke mid-collective: the peer ended; one line, exit 1."""


def env_seconds(name: str, default: float, zero_ok: bool = False, environ: Any = None, unit: str = "seconds",
                default_text: str | None = None) -> float:
    """The environment variable ``name`` as a finite number of ``unit`` (> 0, or >= 0 with ``zero_ok``), else
    ``default`` (described as ``default_text`` in the error where its number would not say what it means).

    Raises:
        ConfigError: a value that is not such a number (one line naming the variable).
    """
    value = (os.environ if environ is None else environ).get(name)
    if value is None:
        return default
    try:
        seconds = float(value)
    except ValueError:
        seconds = float("nan")
    if not (0 <= seconds if zero_ok else 0 < seconds) or seconds == float("inf") or seconds != seconds:
        raise ConfigError(f"environment {name}={value!r}: {unit} {'>=' if zero_ok else '>'} 0 "
                          f"(default {default_text or format(default, 'g')})")
    return seconds
