"""Pre-emption signals: SIGTERM, SIGUSR1 or SIGINT ask a run to stop at the next epoch boundary.

Schedulers warn a job before killing it (SLURM ``--signal=B:USR1@120``, LSF
``-wa USR1``, or SIGTERM). The handler only records the signal; the trainer's
ranks agree on stopping through the per-epoch all-gather, write a checkpoint
and exit with ``EXIT_PREEMPTED`` (75). :func:`install` is called first thing in
``python -m hpcdgnn run``, before torch is imported, so a warning that arrives
during start-up is not lost (without a handler, SIGUSR1 kills the process). Before it, from the
first line of ``main`` and across the allocator's re-exec (:func:`hpcdgnn.allocator.reexec`, which
resets handlers but keeps the signal mask and pending signals), :func:`hold` blocks them, so one that
arrives then waits and is handled once :func:`install` unblocks it.
A second SIGINT (Ctrl-C twice) interrupts at once, as Python does by default.

Open MPI 5's ``mpirun`` (prterun) does not forward SIGTERM or SIGINT as such:
it signals the ranks and then exits 1 at once, silencing their output, even
though they go on to write a complete checkpoint. ``jobs/*.sh`` and the
job scripts and ``hpcdgnn-mpirun`` (:mod:`hpcdgnn.launch`) turn SIGTERM/SIGINT into SIGUSR1
to ``mpirun``, which it forwards.
"""

from __future__ import annotations

import signal

__all__ = ["PreemptionFlag", "hold", "install"]

_SIGNALS = (signal.SIGTERM, signal.SIGUSR1, signal.SIGINT)


class PreemptionFlag:
    """Records the first pre-emption signal received."""

    def __init__(self) -> None:
        self.raised = False
        self.name = ""

    def handle(self, signum: int, frame: object) -> None:
        """Signal handler: remember, do nothing else (it may interrupt anything)."""
        if signum == signal.SIGINT and self.name == "SIGINT":
            signal.default_int_handler(signum, frame)  # Ctrl-C again: stop now (KeyboardInterrupt)
        self.raised = True
        self.name = signal.Signals(signum).name


_FLAG: PreemptionFlag | None = None


def install() -> PreemptionFlag:
    """Install the SIGTERM/SIGUSR1/SIGINT handlers once per process; return the flag."""
    global _FLAG
    if _FLAG is None:
        _FLAG = PreemptionFlag()
        try:
            for sig in _SIGNALS:
                signal.signal(sig, _FLAG.handle)
        except ValueError:  # not the main thread (an embedding application): leave signals alone
            return _FLAG
        signal.pthread_sigmask(signal.SIG_UNBLOCK, _SIGNALS)  # what :func:`hold` kept back is delivered now
    return _FLAG


def hold() -> None:
    """Block the pre-emption signals until :func:`install` (the start of ``python -m hpcdgnn run``, which
    may re-exec itself before it can install handlers): a signal sent meanwhile stays pending, through an
    exec too, instead of killing the process."""
    signal.pthread_sigmask(signal.SIG_BLOCK, _SIGNALS)
