"""Pre-emption signals: SIGTERM, SIGUSR1 or SIGINT ask a run to stop at the next epoch boundary.

The handler only records the signal; the ranks agree on stopping through the per-epoch all-gather, checkpoint
and exit with ``EXIT_PREEMPTED``. :func:`hold` blocks the signals from the first line of ``main`` until
:func:`install`, so an early warning is not lost.
"""

from __future__ import annotations

import signal

__all__ = ["PreemptionFlag", "hold", "install", "reset"]

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
#: the handlers :func:`install` replaced, for :func:`reset`
_PREVIOUS: dict[signal.Signals, object] = {}


def install() -> PreemptionFlag:
    """Install the SIGTERM/SIGUSR1/SIGINT handlers once per process; return the flag."""
    global _FLAG
    if _FLAG is None:
        _FLAG = PreemptionFlag()
        try:
            for sig in _SIGNALS:
                _PREVIOUS[sig] = signal.getsignal(sig)
                signal.signal(sig, _FLAG.handle)
        except ValueError:  # not the main thread: leave signals alone
            return _FLAG
        signal.pthread_sigmask(signal.SIG_UNBLOCK, _SIGNALS)  # what :func:`hold` kept back is delivered now
    return _FLAG


def reset() -> None:
    """Put back the handlers :func:`install` replaced and forget the flag: a process that trains again (a library
    caller, the tests' in-process runs) gets a fresh one."""
    global _FLAG
    for sig, handler in _PREVIOUS.items():
        signal.signal(sig, handler)
    _PREVIOUS.clear()
    _FLAG = None


def hold() -> None:
    """Block the pre-emption signals until :func:`install`; one sent meanwhile stays pending, even across exec."""
    signal.pthread_sigmask(signal.SIG_BLOCK, _SIGNALS)
