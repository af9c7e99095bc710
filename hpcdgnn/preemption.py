"""Pre-emption signals: SIGTERM, SIGUSR1 or SIGINT ask a run to stop at the next epoch boundary (or, in an
epoch of mini-batches, between two of them: ``hpcdgnn.train.loop.BatchStop``).

The handler only records the signal; the ranks agree on stopping through the per-epoch all-gather, checkpoint
and exit with ``EXIT_PREEMPTED``. :func:`hold` blocks the signals from the first line of ``main`` until
:func:`install`, so an early warning is not lost. The one-process commands (prepare, generate, …) stop at the
first SIGTERM or SIGINT instead (:func:`stop`, :func:`check_stop`).
"""

from __future__ import annotations

import contextlib
import os
import signal
import stat
from collections.abc import Iterator

__all__ = ["EXIT_SIGNALLED_AGAIN", "RELAYED_NAME_VAR", "RELAYED_VAR", "RELAYS", "STOP_SIGNALS", "PreemptionFlag",
           "Stopped", "check_stop", "describe_signal", "forget_stop", "hold", "install", "relayed", "requested",
           "requested_while_waiting", "reset", "signal_name", "stop", "waiting"]

#: the signals that stop a run, a one-process command (prepare, generate, embed, predict) and a dataset's write:
#: SIGTERM (``scancel``), Ctrl-C's SIGINT, SIGUSR1 (a scheduler's early warning, hpcdgnn-mpirun's relay of either)
STOP_SIGNALS = (signal.SIGTERM, signal.SIGUSR1, signal.SIGINT)

#: what hpcdgnn-mpirun puts in the environment of the job it launches: the path of a file of its own (on Linux one
#: without a name, ``/proc/PID/fd/N``, gone with the launcher) into which it writes the signal (SIGTERM, SIGINT) it
#: passes on to the ranks as SIGUSR1 (its mpirun would end them on either), so that the run names what was sent,
#: not the relay's SIGUSR1 (:meth:`PreemptionFlag.describe`). Readable where the launcher runs (rank 0's node, with
#: mpirun's default placement); elsewhere the run says SIGUSR1.
RELAYED_VAR = "HPCDGNN_MPIRUN_RELAYED"
#: beside :data:`RELAYED_VAR` where that is a ``/proc/PID/fd/N``: what ``readlink`` of it shows for the relay's own
#: file, a name made for this launch (``/memfd:hpcdgnn-mpirun-signal-<random> (deleted)``, a job script's
#: ``/tmp/hpcdgnn-job-<random> (deleted)``). On another node PID is another process, or none: a link that shows
#: anything else is not read (:func:`relayed`)
RELAYED_NAME_VAR = "HPCDGNN_MPIRUN_RELAYED_NAME"


#: a second SIGINT / SIGTERM stops a command-line run at once with the shell's code for the signal, 128 + n (130,
#: 143): no checkpoint (the newest one stays), and not a crash's 1 — unless the run had stopped cleanly already
#: (:meth:`PreemptionFlag.settle`): then 75, as the clean stop it is
EXIT_SIGNALLED_AGAIN = {signal.SIGINT: 128 + signal.SIGINT, signal.SIGTERM: 128 + signal.SIGTERM}
#: :data:`hpcdgnn.errors.EXIT_PREEMPTED` (not imported: this module loads before anything heavy)
_EXIT_PREEMPTED = 75


class Stopped(KeyboardInterrupt):
    """SIGTERM, SIGINT or SIGUSR1 (hpcdgnn-mpirun's relay of either) during a one-process command (prepare,
    generate, …): unwinds like Ctrl-C, so that what the command was writing is removed on the way out (the writers'
    ``except BaseException``). Under mpirun also a rank's when rank 0's work for the job stopped so
    (:mod:`hpcdgnn.rank_zero`)."""

    #: the error of the step this stop was held back for, where that step failed (the dataset's rename into place,
    #: :func:`hpcdgnn.data.writer.replace_dir`): the stop decides the exit, and its line names that error
    failure: BaseException | None = None

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


#: the signal :func:`stop` received, if any (one-process commands only)
_STOPPED: list[int] = []


def stop(signum: int, frame: object) -> None:
    """The one-process commands' handler: record the signal and unwind. An exception raised in some C contexts
    (an import registering an ABC, say) is lost, so the long loops call :func:`check_stop` too."""
    _STOPPED.append(signum)
    raise Stopped(signum)


def check_stop() -> None:
    """Raise :class:`Stopped` again if :func:`stop` recorded a signal (a safe point in a long loop)."""
    if _STOPPED:
        raise Stopped(_STOPPED[0])


def forget_stop() -> None:
    """Forget a recorded stop signal: a caller of ``main`` in-process (the tests) goes on."""
    _STOPPED.clear()


class PreemptionFlag:
    """Records the first pre-emption signal received.

    Args:
        at_once: a second SIGINT or SIGTERM ends the process at once (the command line); else (a library caller)
            a second SIGINT raises ``KeyboardInterrupt`` and a second SIGTERM is only recorded.
    """

    def __init__(self, at_once: bool = False) -> None:
        self.raised = False
        self.name = ""
        self.at_once = at_once
        #: the first signal came inside a :func:`waiting` block: it was taken as a stop now, not at an epoch's end
        self.while_waiting = False
        #: the run has stopped cleanly (:meth:`settle`): a second signal abandons nothing
        self.settled = False

    def settle(self) -> None:
        """The stop this flag asked for is done: its checkpoint and summary.json (status ``preempted``) are
        written, and the process only exits. A second SIGINT/SIGTERM from now on still ends it at once, but with
        the clean stop's 75: a job requeued on 75 resumes from that checkpoint, and nothing was abandoned (130/143
        said the epoch's checkpoint was, and a wrapper that requeues on 75 left the run stopped)."""
        self.settled = True

    def handle(self, signum: int, frame: object) -> None:
        """Signal handler: remember, do nothing else (it may interrupt anything) — but a second SIGINT/SIGTERM."""
        # a repeat of SIGINT/SIGTERM only: SIGUSR1 (a scheduler's early warning, hpcdgnn-mpirun's relay) followed by
        # the scheduler's SIGTERM must still checkpoint
        again = self.name in ("SIGINT", "SIGTERM") and signum in EXIT_SIGNALLED_AGAIN
        if again and self.at_once and self.settled:
            with contextlib.suppress(OSError):
                os.write(2, f"hpcdgnn: {signal.Signals(signum).name} again: the run had stopped with its checkpoint "
                            f"and summary.json written: exit {_EXIT_PREEMPTED}\n".encode())
            os._exit(_EXIT_PREEMPTED)
        if again and self.at_once:
            code = EXIT_SIGNALLED_AGAIN[signal.Signals(signum)]
            os.write(2, f"hpcdgnn: {signal.Signals(signum).name} again: stopped at once, no checkpoint of this epoch "
                        f"(the newest one, if any, stays: resume from it with --resume RUNDIR), exit {code}\n"
                        .encode())
            os._exit(code)  # not sys.exit: the handler may have interrupted a collective or a write
        if again and signum == signal.SIGINT:
            signal.default_int_handler(signum, frame)  # Ctrl-C again: stop now (KeyboardInterrupt)
        if not self.raised:
            self.while_waiting = bool(_WAITING)
            if not self.at_once and signum == signal.SIGINT:
                _acknowledge()
        self.raised = True
        self.name = signal.Signals(signum).name

    def describe(self) -> str:
        """The signal as a run's lines name it: ``SIGTERM, passed on by hpcdgnn-mpirun as SIGUSR1`` (or ``by the
        job script``) where one relayed it (:func:`relayed`), else its name (``""`` before any)."""
        return describe_signal(self.name)


def describe_signal(name: str) -> str:
    """Signal ``name`` (``SIGTERM``) as the lines name it: a SIGUSR1 that a relay passed on is named as what was sent
    (``SIGTERM, passed on by hpcdgnn-mpirun as SIGUSR1``; :func:`relayed`)."""
    sent = relayed() if name == "SIGUSR1" else None
    return f"{sent[0]}, passed on by {RELAYS[sent[1]]} as SIGUSR1" if sent else name


#: who passed a SIGTERM/SIGINT on as SIGUSR1, by the word after the signal's name in the file :data:`RELAYED_VAR`
#: names: none for hpcdgnn-mpirun, ``job-script`` for a job script of jobs/ (jobs/lib.sh, which passes that file on
#: to its launcher; hpcdgnn-mpirun copies what it says into its own)
RELAYS = {"": "hpcdgnn-mpirun", "job-script": "the job script"}


def relayed(path: str | None = None, link: str | None = None) -> tuple[str, str] | None:
    """The signal a relay received and passed on to this job as SIGUSR1 and who it was (:data:`RELAYS`' key), from
    the file ``path`` (default: the one :data:`RELAYED_VAR` names): ``("SIGTERM", "")`` for hpcdgnn-mpirun's, or
    None: none relayed so, no relay, or its file unreadable here, or not the relay's.

    Args:
        path: the file; a ``/proc/PID/fd/N`` is read only where ``readlink`` shows ``link``.
        link: the relay's own file as ``readlink`` shows it (default: :data:`RELAYED_NAME_VAR`, with ``path``'s
            default).
    """
    if path is None:
        path, link = os.environ.get(RELAYED_VAR), os.environ.get(RELAYED_NAME_VAR)
    if not path:
        return None
    by_pid = path.startswith("/proc/")
    try:
        # /proc/PID/fd/N on another node than the relay's names another process's file, or none: its link's text
        # (which the kernel makes without asking the file's file system) must be the relay's own name for this
        # launch before anything of the file is touched — a stat or open of an unrelated file on a hung NFS mount
        # would block this rank in its stop, a FIFO or terminal would wait or become its terminal
        if by_pid and (not link or os.readlink(path) != link):
            return None
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return None
            if by_pid and os.readlink(f"/proc/self/fd/{fd}") != link:  # PID ended and came back between the looks
                return None
            text = os.read(fd, 32).decode("ascii")
        finally:
            os.close(fd)
    except (OSError, ValueError):
        return None
    name, _, by = text.strip().partition(" ")
    return (name, by) if name in ("SIGTERM", "SIGINT") and by in RELAYS else None


#: what this process waits for, innermost last, in a block of :func:`waiting`
_WAITING: list[str] = []


@contextlib.contextmanager
def waiting(what: str) -> Iterator[None]:
    """A wait for ``what`` (another job's ``run.lock``) that a stop signal ends at once, nothing changed (the block
    checks :func:`requested`): a library caller's first interrupt in it is acknowledged so, not as a stop at
    the next epoch boundary with a checkpoint, which would never be written."""
    _WAITING.append(what)
    try:
        yield
    finally:
        _WAITING.pop()


def _acknowledge() -> None:
    """Say at once, on rank 0, what a library caller's first interrupt (a notebook's) does.

    The stop itself may come only at the end of a long full-batch epoch. Python runs the handler between two
    bytecodes: a write to a stream the main thread was writing may be refused, and is then left out."""
    import sys

    from hpcdgnn.comm.world import world_rank_size

    if world_rank_size()[0] != 0:
        return
    try:
        sys.stderr.write(f"hpcdgnn: interrupted: stopping now, while waiting for {_WAITING[-1]}; nothing was "
                         "changed\n" if _WAITING else
                         "hpcdgnn: interrupted: stopping at the next epoch boundary (or between two batches) with "
                         "a checkpoint; interrupt again to stop at once, without one\n")
        sys.stderr.flush()
    except (RuntimeError, OSError, ValueError):
        pass


_FLAG: PreemptionFlag | None = None
#: the handlers :func:`install` replaced, for :func:`reset`
_PREVIOUS: dict[signal.Signals, object] = {}


def install(at_once: bool = False) -> PreemptionFlag:
    """Install the SIGTERM/SIGUSR1/SIGINT handlers once per process; return the flag (``at_once``: see
    :class:`PreemptionFlag`; the first caller decides)."""
    global _FLAG
    if _FLAG is None:
        _FLAG = PreemptionFlag(at_once)
        try:
            for sig in STOP_SIGNALS:
                previous = signal.getsignal(sig)
                signal.signal(sig, _FLAG.handle)
                _PREVIOUS[sig] = previous  # only once replaced: reset() puts back what it replaced
        except ValueError:  # not the main thread: leave signals alone
            return _FLAG
        signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)  # what :func:`hold` kept back is delivered now
    return _FLAG


def signal_name() -> str:
    """The first pre-emption signal this process received as a run's lines name it (:meth:`PreemptionFlag.describe`;
    ``""`` before any or before :func:`install`)."""
    return _FLAG.describe() if _FLAG is not None else ""


def requested() -> bool:
    """Whether this process has received a pre-emption signal (False before :func:`install`)."""
    return _FLAG is not None and _FLAG.raised


def requested_while_waiting() -> bool:
    """Whether this process's first pre-emption signal came inside a :func:`waiting` block: a stop now, as a library
    caller's interrupt was acknowledged there, even where the wait ended as the signal came."""
    return _FLAG is not None and _FLAG.raised and _FLAG.while_waiting


def reset() -> None:
    """Put back the handlers :func:`install` replaced and forget the flag: a process that trains again (a library
    caller, the tests' in-process runs) gets a fresh one."""
    global _FLAG
    try:
        for sig, handler in _PREVIOUS.items():
            signal.signal(sig, handler)
    except ValueError:  # not the main thread (install() then replaced nothing either)
        pass
    finally:
        _PREVIOUS.clear()
        _FLAG = None


def hold() -> None:
    """Block the pre-emption signals until :func:`install`; one sent meanwhile stays pending, even across exec."""
    signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
