"""Pre-emption signals: SIGTERM, SIGUSR1 or SIGINT ask a run to stop at the next epoch boundary.

Schedulers warn a job before killing it (SLURM ``--signal=B:USR1@120``, LSF
``-wa USR1``, or SIGTERM). The handler only records the signal; the trainer's
ranks agree on stopping through the per-epoch all-gather, write a checkpoint
and exit with ``EXIT_PREEMPTED`` (75). :func:`install` is called first thing in
``python -m hpcdgnn run``, before torch is imported, so a warning that arrives
during start-up is not lost (without a handler, SIGUSR1 kills the process).
A second SIGINT (Ctrl-C twice) interrupts at once, as Python does by default.

Open MPI 5's ``mpirun`` (prterun) does not forward SIGTERM or SIGINT as such:
it signals the ranks and then exits 1 at once, silencing their output, even
though they go on to write a complete checkpoint. ``jobs/*.sh`` and the
job scripts and ``hpcdgnn-mpirun`` (:mod:`hpcdgnn.launch`) turn SIGTERM/SIGINT into SIGUSR1
to ``mpirun``, which it forwards.
"""

from __future__ import annotations

import signal

__all__ = ["PreemptionFlag", "install"]


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
        for sig in (signal.SIGTERM, signal.SIGUSR1, signal.SIGINT):
            try:
                signal.signal(sig, _FLAG.handle)
            except ValueError:  # not the main thread (an embedding application): leave signals alone
                pass
    return _FLAG
