"""Command line: ``python -m hpcdgnn run|prepare|generate|inspect|validate|profile|plan|calibrate|check|export|report|
embed|predict``.

``run`` is the SPMD entry point (``mpirun -np P python -m hpcdgnn run job.yaml``). An exception on any rank
prints ``rank R/P: <traceback>`` and calls ``MPI_Abort``, so no rank waits forever in a collective; user errors
print one line and exit 2; a pre-empted run checkpoints and exits 75 (``EXIT_PREEMPTED``).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import socket
import sys
import threading
import traceback

from hpcdgnn.errors import (
    EXIT_PREEMPTED,
    EXIT_USAGE,
    CommFailure,
    ConfigError,
    HpcdgnnError,
    SetUpStopped,
    StalledError,
    out_of_memory,
)
from hpcdgnn.preemption import STOP_SIGNALS

__all__ = ["main"]

#: a command whose reader closed the pipe (``inspect --json | head``) exits as a process killed by SIGPIPE would
EXIT_BROKEN_PIPE = 128 + signal.SIGPIPE


def _install_abort_hook(comm) -> None:
    """Any uncaught exception on this rank ends the whole MPI job (after printing it with the rank).

    Not one that C code reports and goes on from (``PyErr_Print`` while Python code still runs: Cython's
    ``__dealloc__`` errors, such as h5py's failed flush of a file being dropped after a full disk): that is
    printed as Python prints an ignored exception, and the rank goes on as it would alone. An uncaught exception
    reaches the hook once no Python frame is left, or from a runner's ``except`` block that handles it."""

    def hook(exc_type, exc, tb):
        text = "".join(traceback.format_exception(exc_type, exc, tb))
        # called from inside running code, which is not handling this exception itself (coverage's runner and
        # other wrappers report an uncaught one from their except block, then exit): C code ignored it
        if sys._getframe().f_back is not None and sys.exc_info()[1] is not exc:
            sys.stderr.write(f"rank {comm.rank}/{comm.size}: exception ignored: {text}")
            sys.stderr.flush()
            return
        sys.stderr.write(f"rank {comm.rank}/{comm.size}: {text}")
        sys.stderr.flush()
        sys.stdout.flush()
        comm.abort(1)

    sys.excepthook = hook


def _env_switches() -> list[str]:
    """The kernel switch that changes a run's arithmetic as ``VAR=value`` (its meaning, not spelling), compared
    across ranks: mpirun passes a variable to other nodes only with ``-x``."""
    from hpcdgnn.ops import kernels

    mode = kernels.mode() if kernels.expected() else "torch"  # a node without numba takes the torch path
    return [f"HPCDGNN_KERNELS={mode}"] if mode != "numba" else []


def _interrupt(signum, frame) -> None:
    """Unwind the main thread like Ctrl-C, the signal kept for the stop's line: embed and predict on one rank, or
    on several once the stop's watch ended (:meth:`_JobStop.finish`). Recorded too (:func:`preemption.stop`): an
    exception raised inside a weakref callback or a ``__del__`` is printed and dropped, and the pass would go on
    to exit 0; the writes' safe points and the command's end raise it again (:func:`preemption.check_stop`)."""
    from hpcdgnn import preemption

    preemption.stop(signum, frame)


#: the commands that run on every rank of an MPI job, with signal handling of their own (:func:`_spmd`)
_SPMD_COMMANDS = ("run", "embed", "predict")
#: the signals that stop embed and predict once started, and their exit status then, whichever it was
#: (:func:`_spmd_body`): SIGUSR1 is hpcdgnn-mpirun's form of a first SIGTERM or SIGINT
_PASS_STOPS, EXIT_PASS_STOPPED = STOP_SIGNALS, 130


#: where launchers tell each process its rank before MPI starts: Open MPI, PMIx, Hydra (PMI), MVAPICH, srun, jsrun
_RANK_VARIABLES = ("OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "MV2_COMM_WORLD_RANK", "SLURM_PROCID",
                   "JSM_NAMESPACE_RANK")


def _speaks_for_job() -> bool:
    """Whether this process prints a line that every rank of an MPI job would print alike: not a rank other than 0.
    A stop signal's line: a launcher (mpirun, srun, hpcdgnn-mpirun's relay) signals every rank, and each printed
    the same line; rank 0's stands for the job, and a rank signalled alone still exits with the status, which the
    launcher reports. The parser's usage, help and errors: every rank parses the same command line. The rank is
    MPI's once it started, else the launcher's variable (read where no import is under way: a signal handler's
    call)."""
    MPI = sys.modules.get("mpi4py.MPI")
    if MPI is not None and MPI.Is_initialized() and not MPI.Is_finalized():
        return MPI.COMM_WORLD.Get_rank() == 0
    rank = next((os.environ[v] for v in _RANK_VARIABLES if os.environ.get(v, "").isdigit()), "0")
    return int(rank) == 0


def _first_of_another_program() -> int | None:
    """This process's rank where it is the first rank of another program than rank 0's in an MPMD launch
    (``mpirun -np 1 A : -np 2 B``), else None. Open MPI tells every process each program's rank count
    (``OMPI_APP_CTX_NUM_PROCS``, ranks numbered program by program); other launchers say nothing, and then rank 0
    alone speaks for the job."""
    counts = os.environ.get("OMPI_APP_CTX_NUM_PROCS", "").split()
    rank = os.environ.get("OMPI_COMM_WORLD_RANK", "")
    if len(counts) < 2 or not rank.isdigit() or not all(c.isdigit() for c in counts):
        return None
    firsts = {sum(int(c) for c in counts[:k]) for k in range(1, len(counts))}
    return int(rank) if int(rank) in firsts else None


def _stop_status(signum: int) -> int:
    """A one-process command's exit status when a signal stopped it: the shell's 128 + n, but 130 for SIGUSR1,
    which hpcdgnn-mpirun passes to the ranks for a first Ctrl-C or SIGTERM (the ranks cannot tell which: 130 as
    embed and predict say then); a scheduler's early warning too, where stopping cleanly beats its kill later."""
    return EXIT_PASS_STOPPED if signum == signal.SIGUSR1 else 128 + signum


def _stop_while_starting(command: str, signals: tuple[int, ...] = _PASS_STOPS,
                         code: int | None = None) -> dict[int, object]:
    """Make a stop signal that comes while a command that has no handlers yet (prepare, generate, …, embed,
    predict) is starting — its parser imports torch and h5py, seconds on a cold file cache — print one line and
    exit, instead of ending it without a word (SIGTERM) or with a traceback (Ctrl-C); under mpirun rank 0 alone
    prints it (:func:`_speaks_for_job`), every rank exits. Nothing is written
    before the command's own handlers are in, so the handler exits at once (``os._exit``): an exception raised in
    the middle of an import could be swallowed by C code, or leave a half-imported module behind. A signal the
    process was started ignoring (``cmd &`` in a script) stays ignored. ``run`` holds its signals instead
    (:func:`hpcdgnn.preemption.hold`): a first one asks it for a checkpoint, not to stop.

    Args:
        command: the command line's first word, named in the line when it is one (a word of letters).
        signals: those that stop the command.
        code: the exit status; None: :func:`_stop_status`'s for the signal.

    Returns:
        The handlers replaced, per signal, for ``main`` to put back when it is done.
    """
    prefix = f"hpcdgnn: {command}: " if command.isalpha() else "hpcdgnn: "
    says = _speaks_for_job()  # now: MPI has not started, and the handler may run in the middle of an import

    def handler(signum, frame) -> None:
        if says:
            with contextlib.suppress(OSError):  # stderr closed: the exit status still says it
                os.write(2, f"{prefix}stopped by {signal.Signals(signum).name} while starting; nothing was written\n"
                         .encode())
        os._exit(_stop_status(signum) if code is None else code)

    return _on_stop_signals(handler, signals)


def _on_stop_signals(handler, signals: tuple[int, ...] = (signal.SIGTERM, signal.SIGINT)) -> dict[int, object]:
    """``handler`` for ``signals``, but where the process was started ignoring one (``cmd &`` in a script: it stays
    ignored) or ``main`` runs in another thread than the main one (Python's own handling stays).

    Returns:
        The handlers replaced, per signal.
    """
    replaced = {}
    for sig in signals:
        try:
            if signal.getsignal(sig) is not signal.SIG_IGN:
                replaced[sig] = signal.signal(sig, handler)
        except ValueError:
            break
    return replaced


#: the MPI tag (on ``COMM_WORLD``) of the ranks' words about a stop of embed or predict (:class:`_JobStop`); beside
#: :mod:`hpcdgnn.rank_zero`'s tags of the commands rank 0 runs for the job
_STOP_TAG = 0x4AE1
#: how long a stopped rank waits to hear from every other rank before it ends the job with ``MPI_Abort``: a rank
#: whose thread cannot run (its main thread in C code that holds the GIL; one whose command finished told so)
_STOP_GRACE_S = 10.0


class _JobStop:
    """A stop signal to any rank of an embed or predict job, after its communicator exists: one line for the job,
    every rank's exit status 130, nothing left at ``--output`` — or, where rank 0 had already put the complete
    output in place, that file kept, the line saying so, and every rank's exit status 0 (the command's work is
    done: a job script goes on to use the file, which a second embed would refuse to overwrite).

    Every rank got the signal (mpirun, srun and hpcdgnn-mpirun's relay signal them all) or not (``kill`` of one
    rank's process). A signalled rank may be inside a collective that a peer left, where a Python handler never
    runs: each printed its own line and aborted, or hung. So the handlers here do nothing, and a thread of each rank
    acts: it sees the signal on :func:`signal.set_wakeup_fd`'s pipe, which the C handler writes into even while
    the main thread waits in MPI; removes what embed was writing (:func:`hpcdgnn.embed.stop_writing`, which also
    says whether the output was in place already); tells every other rank on :data:`_STOP_TAG`
    ``("stop", signal, own, written)``; and a rank told before its own signal came (or never signalled) stops too,
    as told. A rank whose command ended first (:meth:`finish`) told every other rank ``("finished", written)``
    then, and counts as told: it will not answer. Once every rank has told, the lowest rank that was signalled
    itself (rank 0 where it was) prints the line and tells the others ``("done", written)``. Output removed: each
    leaves with ``os._exit(130)`` — its main thread may be in a collective that never completes, so neither a
    return nor ``MPI_Finalize`` is possible. Output in place: the stop took nothing from rank 0's main thread,
    which goes on, so every collective left completes; the stop is called off and each rank goes on to its
    ordinary exit (one leaving without ``MPI_Finalize`` would make the launcher kill the others). Where a rank is
    not heard within :data:`_STOP_GRACE_S` the line is printed as far as known and ``MPI_Abort(130)`` ends the job
    (not where the output is in place: the stop is called off); where that rank is rank 0, which could not remove
    its temporary file, the speaking rank removes it if it sees it, or the line says where it may remain
    (:func:`hpcdgnn.embed.left_by_rank_0`; rank 0 tells its node ``("node", name)`` when the watch starts, and
    its temporary's inode ``("making", inode)`` once the file exists: only that file is removed). Needs
    ``MPI_THREAD_MULTIPLE`` (:meth:`start` returns None without it: the main thread's interrupt and abort then).
    """

    def __init__(self, command: str, world) -> None:
        self.command, self.world = command, world
        self.rank, self.size = world.Get_rank(), world.Get_size()
        self.lock = threading.Lock()
        #: stopping: the thread ends the process (or calls the stop off); finished: the command's own end came
        #: first; written: the output was in place when the stop came, and the stop is called off
        self.stopping = self.finished = self.written = False
        self.node = socket.gethostname()
        self.read_fd, self.write_fd = os.pipe()
        os.set_blocking(self.write_fd, False)  # the C handler must never block on a full pipe
        self.saved_fd = signal.set_wakeup_fd(self.write_fd, warn_on_full_buffer=False)
        self.replaced = _on_stop_signals(lambda *_: None, _PASS_STOPS)
        if self.rank == 0:  # told from the main thread as the file is made: no later write can come before it
            from mpi4py import MPI

            from hpcdgnn import embed

            embed.MAKING[:] = [lambda inode: MPI.Request.Waitall(self._send(("making", inode)))]
        self.thread = threading.Thread(target=self._watch, name="hpcdgnn-stop", daemon=True)
        self.thread.start()

    @classmethod
    def start(cls, command: str) -> _JobStop | None:
        """The watch for ``command`` (embed, predict) on this rank; None where MPI gives no
        ``MPI_THREAD_MULTIPLE`` or ``main`` runs in another thread than the main one."""
        from hpcdgnn.comm.world import init_mpi

        MPI = init_mpi()
        if MPI.Query_thread() < MPI.THREAD_MULTIPLE or threading.current_thread() is not threading.main_thread():
            return None
        return cls(command, MPI.COMM_WORLD)

    def finish(self, done: bool = False) -> None:
        """The command's own end, on every way out: end the watch, once it told the other ranks (a stop that comes
        to them now must not wait for this rank). A stop already under way ends the process instead (:meth:`wait`),
        unless it found the output in place.

        Args:
            done: the command completed (rank 0 wrote its output): a stop signal from now on changes nothing, the
                process goes on to exit 0; else it interrupts the main thread, as where one process runs the
                command.
        """
        with self.lock:
            if not self.stopping:
                self.finished = True
        if not self.finished:
            self.wait()
        self.thread.join()
        if self.rank == 0:
            sys.modules["hpcdgnn.embed"].MAKING.clear()
        signal.set_wakeup_fd(self.saved_fd)
        _on_stop_signals((lambda *_: None) if done or self.written else _interrupt, tuple(self.replaced))
        os.close(self.read_fd)
        os.close(self.write_fd)

    def wait(self) -> None:
        """The main thread, where a stop is under way (its work stopped, or failed since a peer left): the thread
        ends the process; this returns only where the stop found the output in place and was called off."""
        self.thread.join()
        if not self.written:
            os._exit(EXIT_PASS_STOPPED)  # not reached: the thread exits or aborts

    def _send(self, word: tuple, ranks=None) -> list:
        """``word`` sent to ``ranks`` (default: every other rank), its requests."""
        ranks = [r for r in range(self.size) if r != self.rank] if ranks is None else ranks
        return [self.world.isend(word, dest=r, tag=_STOP_TAG) for r in ranks]

    def _watch(self) -> None:
        try:
            self._watch_stops()
        except BaseException:  # a broken watch must not leave the job waiting: it ends as a crash does
            sys.stderr.write(f"rank {self.rank}/{self.size}: {traceback.format_exc()}")
            sys.stderr.flush()
            self.world.Abort(1)

    def _watch_stops(self) -> None:
        import select
        import time

        from mpi4py import MPI

        embed = sys.modules.get("hpcdgnn.embed")
        # rank 0's node: where a stop's speaker may see rank 0's files (a rank 0 that never answers a stop)
        node0 = self.node if self.rank == 0 else ""
        if self.rank == 0:
            MPI.Request.Waitall(self._send(("node", self.node)))
        heard: dict[int, tuple[int, bool]] = {}  # rank -> (signal, signalled itself), of the ranks stopping
        finished: set[int] = set()  # the ranks whose command ended first: they will not answer
        written: str | None = None  # the output rank 0 had put in place, as a rank's word says
        # rank 0's temporary as it told it (its inode): a speaker removes that file only, never one of another
        # embed to the same --output that rank 0 had not yet refused
        making: int | None = None
        done, mine, sent, deadline = False, None, [], 0.0
        status = MPI.Status()
        while True:
            if mine is None and self.finished:  # the command's own end: the others must not wait for this rank
                placed = embed.written() if embed is not None else None
                MPI.Request.Waitall(self._send(("finished", None if placed is None else str(placed))))
                return
            # once stopping, the ranks must leave together: the first process to exit without MPI_Finalize makes
            # the launcher kill the others, whose exit status is then its signal's, not 130
            ready, _, _ = select.select([self.read_fd], [], [], 0.02 if mine is None else 0.0002)
            signums = [b for b in os.read(self.read_fd, 64) if b in _PASS_STOPS] if ready else []
            while self.world.Iprobe(source=MPI.ANY_SOURCE, tag=_STOP_TAG, status=status):
                source = status.Get_source()
                word = self.world.recv(source=source, tag=_STOP_TAG)
                if word[0] in ("node", "making"):
                    node0, making = (word[1], making) if word[0] == "node" else (node0, word[1])
                    continue
                if word[0] == "done":
                    done = True
                elif word[0] == "finished":
                    finished.add(source)
                else:
                    heard[source] = (word[1], word[2])
                written = written or word[-1]
            if mine is None and (signums or heard):
                with self.lock:
                    if self.finished:  # the work is done: the top of the loop tells the others
                        continue
                    self.stopping = True
                # first what this rank was writing goes: no rank exits before every rank told its stop
                placed = embed.stop_writing() if embed is not None else None
                written = written or (None if placed is None else str(placed))
                mine = (signums[0], True) if signums else (next(iter(heard.values()))[0], False)
                sent = self._send(("stop", *mine, written))
                deadline = time.monotonic() + _STOP_GRACE_S
            if mine is None:
                continue
            everyone = {**heard, self.rank: mine}
            own = sorted(r for r, (_, itself) in everyone.items() if itself)
            if done:  # the line is out and every rank stopped
                return self._leave(sent, written)
            if len(everyone) + len(finished - set(everyone)) == self.size:
                if own[0] == self.rank:
                    self._say(mine[0], written)
                    peers = [r for r in heard if r != self.rank]
                    return self._leave(sent + self._send(("done", written), peers), written)
            elif time.monotonic() > deadline:
                if own and own[0] == self.rank:
                    left = None
                    if embed is not None and 0 not in everyone and 0 not in finished:  # its temporary is still there
                        placed, left = embed.left_by_rank_0(None if node0 == self.node else node0, making)
                        written = written or (None if placed is None else str(placed))
                    self._say(mine[0], written, left)
                    # the line is out: the others follow this word — a stop called off where rank 0 had put the
                    # file in place meanwhile, else their exit; a rank whose thread runs late (the abort's SIGTERM
                    # wakes it) leaves without another line
                    MPI.Request.Waitall(self._send(("done", written)))
                elif own and time.monotonic() < deadline + _STOP_GRACE_S / 5:
                    continue  # the speaker's word is coming, and may call the stop off
                if written is not None:  # every main thread can complete: no rank is left waiting
                    return self._leave(sent, written)
                self.world.Abort(EXIT_PASS_STOPPED)

    def _leave(self, sent: list, written: str | None) -> None:
        """The end of a stop on this rank, once its words are sent: the process exits (130), or where the output was
        in place the stop is called off and the main thread goes on (:meth:`wait` returns)."""
        from mpi4py import MPI

        MPI.Request.Waitall(sent)
        if written is None:
            os._exit(EXIT_PASS_STOPPED)
        with self.lock:
            self.stopping, self.written = False, True

    def _say(self, signum: int, written: str | None = None, left: str | None = None) -> None:
        with contextlib.suppress(OSError):  # stderr closed: the exit status still says it
            os.write(2, f"{_stop_line(self.command, signum, written, left)}\n".encode())


def _stop_line(command: str, signum: int, written: str | None = None, left: str | None = None) -> str:
    """The line of a stop of embed or predict, for the job: nothing is left at ``--output``, or the signal came once
    ``written`` (that output) was complete, which stays. A relay's SIGUSR1 (hpcdgnn-mpirun's, a job script's) is
    named as what was sent, as run's lines name it.

    Args:
        command: embed or predict.
        signum: the signal.
        written: the output rank 0 had put in place before the stop, or None.
        left: what may remain instead of nothing (a temporary file out of this rank's sight), or None.
    """
    from hpcdgnn.preemption import describe_signal

    name = describe_signal(signal.Signals(signum).name)
    if written is not None:
        return f"hpcdgnn: {command}: {name} came after {written} was written; the file is complete"
    return f"hpcdgnn: {command}: stopped by {name}; {left or 'nothing it was writing is left'}"


def _spmd(command: list[str], body, preemptible: bool = True) -> int:
    """:func:`_spmd_body`; called in-process (not as the process's command), the signal handlers it sets are put
    back on return: the caller goes on, and its later children would inherit what it leaves."""
    from hpcdgnn import preemption

    signals = (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1)
    saved = {sig: signal.getsignal(sig) for sig in signals}
    try:
        return _spmd_body(command, body, preemptible)
    finally:
        if not _AS_COMMAND:
            preemption.reset()
            with contextlib.suppress(ValueError, TypeError):  # not the main thread; a handler set outside Python
                for sig, handler in saved.items():
                    signal.signal(sig, handler)


def _spmd_body(command: list[str], body, preemptible: bool = True) -> int:
    """Run ``body(comm)`` on every rank of the MPI job (``run``, ``embed``, ``predict``): its exit status.

    An error every rank meets is one line from rank 0; one a rank meets alone is its line with the rank, then
    ``MPI_Abort`` (the others may wait in a collective); a crash prints ``rank R/P: <traceback>`` and aborts.
    ``preemptible`` (``run``): a first SIGTERM/SIGINT asks for a checkpoint, a second stops at once; otherwise
    (``embed``, ``predict``) the first stops: what was being written is removed, exit 130 — on several ranks of
    a command line through :class:`_JobStop` (one line for the job, every rank 130); where the output was in
    place already it stays, the line says so, exit 0.
    """
    from hpcdgnn import preemption

    if preemptible:
        # before the heavy imports: a scheduler's early warning must not kill us; a second signal stops at once
        stop = preemption.install(at_once=True)
    else:
        stop = preemption.PreemptionFlag()
        # as the process's command, main's starting handler (one line, exit) stays until a communicator exists
        # (below): nothing is written before, and an interrupt raised inside MPI's start-up would end in a traceback
        if not _AS_COMMAND:
            _on_stop_signals(_interrupt, _PASS_STOPS)  # SIGUSR1: a scheduler's early warning, too
    from hpcdgnn.comm import Communicator
    from hpcdgnn.comm.world import START_TIMEOUT_S, abort_world, start_timeout, world_rank_size

    try:  # a bad value is refused once the ranks can agree on it (one line, not one per rank)
        timeout = start_timeout()
    except ConfigError:
        timeout = START_TIMEOUT_S
    try:  # no hang when a rank runs another MPI program (MPMD)
        comm = Communicator.start(timeout, stop=lambda: stop.raised)
    except StalledError as e:  # this rank alone, before a communicator exists
        rank, size = world_rank_size()
        return _rank_error(rank, size, abort_world, str(e),
                           EXIT_PREEMPTED if stop.raised else e.exit_code)
    except BaseException:  # Ctrl-C twice while waiting: the others are waiting too
        traceback.print_exc()
        sys.stderr.flush()
        abort_world(1)
        raise
    if comm.size > 1:
        _install_abort_hook(comm)
    watch = None
    if not preemptible and _AS_COMMAND:
        # several ranks: a thread of each stops the job together (one line, exit 130 on every rank); alone the
        # interrupt unwinds this process, removing what it was writing
        watch = _JobStop.start(command[0]) if comm.size > 1 else None
        if watch is None:
            _on_stop_signals(_interrupt, _PASS_STOPS)
    try:
        from hpcdgnn.comm.world import check_same_command
        from hpcdgnn.train.collective import agree_start, collective_error

        code = None
        try:
            agree_start(comm)
            if comm.size > 1:
                differ = check_same_command(comm, _env_switches() + command)
                if differ:
                    raise collective_error(ConfigError(differ))
            code = body(comm)
            preemption.check_stop()  # a stop whose exception was dropped after the pass's last safe point
        except BaseException:
            if watch is not None and watch.stopping:  # the stop's thread ends the process, with its one line
                watch.wait()
            raise
        finally:  # every way out: the thread must not probe MPI while the interpreter finalises it
            if watch is not None:
                watch.finish(done=code is not None)
        # the work is done: a scheduler's early warning (or hpcdgnn-mpirun's relay of a SIGTERM) from now on must
        # not end the process with SIGUSR1's default action once the interpreter's shutdown puts it back (a
        # completed run's job exited 138); SIG_IGN outlives that shutdown. Only where the process is the command
        # (an in-process caller of main goes on, and its later children would inherit the ignore)
        if _AS_COMMAND:
            signal.signal(signal.SIGUSR1, signal.SIG_IGN)
        comm.close()
        return code
    except KeyboardInterrupt as e:
        if preemptible:
            raise
        # one process, an in-process caller or an MPI without MPI_THREAD_MULTIPLE (else _JobStop ends it): the
        # line _JobStop prints for a job; a rank the signal did not reach is ended by the abort. The unwinding
        # removed what was being written, but not a file already renamed into place: complete, it stays, and one
        # process has done its work
        preemption.forget_stop()  # an in-process caller goes on
        embed = sys.modules.get("hpcdgnn.embed")
        placed = embed.written() if embed is not None else None
        line = _stop_line(command[0], getattr(e, "signum", 0) or signal.SIGINT, placed and str(placed))
        print(f"[rank {comm.rank}] {line}" if comm.size > 1 else line, file=sys.stderr, flush=True)
        if comm.size > 1:
            comm.abort(EXIT_PASS_STOPPED)
        return EXIT_PASS_STOPPED if placed is None else 0
    except (HpcdgnnError, CommFailure) as e:
        if getattr(e, "collective", False):
            if comm.rank == 0 and isinstance(e, SetUpStopped):  # no error: the run's pre-emption line, as the others
                print(e, flush=True)
            elif comm.rank == 0:
                print(f"hpcdgnn: error: {e}", file=sys.stderr)
            return e.exit_code
        # raised on this rank alone: the others may be waiting in a collective
        return _rank_error(comm.rank, comm.size, comm.abort, str(e), e.exit_code)
    except (MemoryError, RuntimeError) as e:
        # one allocation larger than the node during the set-up (in training run_training names the job's keys)
        detail = out_of_memory(e)
        if detail is None:
            raise
        return _rank_error(comm.rank, comm.size, comm.abort,
                           f"out of memory ({detail}) during the set-up; the job needs more than this rank has: "
                           "lower its sizes (model.hidden, task.negatives; TGN: model.neighbors, task.eval_negatives, "
                           "task.batch_events), or spread it over more ranks or nodes")


def _cmd_run(args: argparse.Namespace) -> int:
    from hpcdgnn.train import run_training
    from hpcdgnn.train.collective import collective_error

    def body(comm) -> int:
        if not args.job and not args.resume:
            raise collective_error(ConfigError("run: give a job YAML, or --resume RUNDIR"))
        if args.resume and args.output:
            raise collective_error(
                ConfigError("run: --output and --resume exclude each other (a resumed run stays in its directory)")
            )
        result = run_training(args.job, args.set or [], args.output, comm, resume=args.resume)
        return EXIT_PREEMPTED if result.preempted else 0

    return _spmd(["run", *([args.job] if args.job else []), *(["--set", *args.set] if args.set else []),
                  *(["--output", args.output] if args.output else []),
                  *(["--resume", args.resume] if args.resume else [])], body)


def _cmd_embed(args: argparse.Namespace) -> int:
    """Write a trained run's Z_t (issue 60); under mpirun the strategy's own distributed forward."""
    from hpcdgnn.embed import forget_written, run_embed

    forget_written()  # a stop in the start-up names no file an earlier call in this process wrote
    return _spmd(["embed", args.rundir, args.output, args.split, *(args.set or [])], lambda comm: run_embed(args, comm),
                 preemptible=False)


def _cmd_predict(args: argparse.Namespace) -> int:
    """Score pairs or predict node targets with a trained run (issue 60)."""
    from hpcdgnn.embed import forget_written, run_predict

    forget_written()  # a stop in the start-up names no file an earlier call in this process wrote
    return _spmd(["predict", args.rundir, args.output, args.pairs or "", args.split, *(args.set or [])],
                 lambda comm: run_predict(args, comm), preemptible=False)


def _rank_error(rank: int, size: int, abort, message: str, code: int = EXIT_USAGE) -> int:
    """An error this rank met alone: one line with the rank, then ``abort(code)`` (others may wait in MPI)."""
    prefix = f"[rank {rank}] " if size > 1 else ""
    print(f"{prefix}hpcdgnn: error: {message}", file=sys.stderr, flush=True)
    if size > 1:
        abort(code)
    return code


_EXIT_CODES = """exit codes:
  0   done
  1   a crash: the failing rank prints 'rank R/P: <traceback>', MPI_Abort ends every rank
  2   a user error (YAML, --set, data, plan) or a diverged run (its loss not finite): one line 'hpcdgnn: error: ...'
  3   stalled: a rank made no progress for comm.stall_timeout_s, or a gloo collective waited longer than
      comm.timeout_s, or a rank did not start hpcdgnn within $HPCDGNN_START_TIMEOUT s after MPI_Init
      (default 600; another MPI program in an MPMD launch) (named in the error line)
  75  pre-empted (SIGTERM/SIGUSR1/SIGINT): checkpoint written, continue with --resume RUNDIR
      (a new run stopped during its set-up has none: run it again with another --output; a resume
      stopped while it waits for another job's run.lock changes nothing; a signal during the last
      epoch that the epoch outlives completes the run: 0)
  130 / 143  a SIGINT / SIGTERM after a first SIGINT or SIGTERM: stopped at once, no checkpoint of that epoch
      (the newest one stays); after a SIGUSR1 (a scheduler's warning) a SIGTERM still checkpoints (75);
      once the run stopped cleanly (checkpoint and summary.json written) a second signal gives 75;
      the other commands (prepare, generate, ...) stop at the first, prepare and generate leaving nothing
      (130 for a SIGUSR1: hpcdgnn-mpirun's relay of a first SIGINT or SIGTERM);
      embed and predict stop at the first of SIGINT/SIGTERM/SIGUSR1 with 130, leaving nothing; one that comes
      after --output was written in full leaves it and exits 0, its line saying so"""


def _cmd_plan(args: argparse.Namespace) -> int:
    """Predict every strategy of a job before it is queued (issue 59); under mpirun rank 0 prints it."""
    from hpcdgnn.planner.command import run_plan

    return _on_rank_0("plan", _PRINT_CLI_TAG, args, lambda: run_plan(args), writes=False)


def _cmd_calibrate(args: argparse.Namespace) -> int:
    """Measure the machine rates the planner uses. Every rank measures (under mpirun the collectives need them
    all), but rank 0 checks the options for the job first: a bad one was one line per rank."""
    from hpcdgnn.planner.command import check_calibrate_arguments, run_calibrate

    _on_rank_0("calibrate", _CALIBRATE_CLI_TAG, args, lambda: check_calibrate_arguments(args) or 0, writes=False)
    return run_calibrate(args)


def _cmd_profile(args: argparse.Namespace) -> int:
    """Profile chunk encoder times on this machine and save DGC's workload MLPs (§4.2, §6). Under mpirun rank 0
    alone: every rank timed its chunks while the others loaded the same cores, printed its own fit and replaced
    the one predictor file; a run reads the file of rank 0's kind of machine."""
    from hpcdgnn.profile.command import run_profile

    return _on_rank_0("profile", _PROFILE_CLI_TAG, args, lambda: run_profile(args))


#: the MPI tags of rank 0's word to the other ranks about a command it runs for the whole job (:func:`_on_rank_0`):
#: export, report and profile write files; inspect, validate, plan and check print a report
_EXPORT_CLI_TAG, _REPORT_CLI_TAG, _PROFILE_CLI_TAG, _PRINT_CLI_TAG = 0x4ADC, 0x4ADD, 0x4ADE, 0x4ADF
#: and about calibrate's options, which rank 0 checks for every rank before they all measure (:func:`_cmd_calibrate`)
_CALIBRATE_CLI_TAG = 0x4AE0


def _on_rank_0(name: str, tag: int, args: argparse.Namespace, work, writes: bool = True) -> int:
    """``work()``'s exit status, run by rank 0 alone where the command was launched on several MPI ranks (a job
    script's ``srun`` runs every command on every rank): else each rank would write the same files, all but the
    first refused ("exists", exit 2) or racing it, or print the same report, once per rank. The others wait for
    rank 0's word (:mod:`hpcdgnn.rank_zero`), print nothing and return rank 0's exit status, or raise its error as
    theirs (which ``main`` leaves to rank 0 to print: one line for the job, every rank exit 2).

    Args:
        name: the command, each line's start.
        tag: the MPI tag of rank 0's words (one per kind of command).
        args: the parsed command line, which every rank must have alike (the key rank 0's words name).
        work: the command's work on rank 0 (or alone): its exit status.
        writes: the command writes files (export, report, profile); else it prints (inspect, plan, ...), which
            the lines of a rank that waited in vain for rank 0 say.
    """
    from hpcdgnn.data.writer import stops_after_written
    from hpcdgnn.rank_zero import Words, on_rank_0

    key = f"{name} " + " ".join(f"{k}={v!r}" for k, v in sorted(vars(args).items()) if k != "func")
    words = (Words(name, "writing", "wrote", "arguments", f"rank 0 writes {name}'s files") if writes else
             Words(name, "running", "ran", "arguments", f"rank 0 prints {name}'s report"))
    # the command line's outcome is rank 0's: a waiting rank's stop signal that rank 0's word answers within the
    # grace ends as rank 0 did (its own signal would give the job 143 beside rank 0's 0), as under prepare
    with stops_after_written():
        # rank 0's exit status told: a command may return 2 without raising
        return on_rank_0(tag, key, work, words, lambda made: int(made or 0), made=lambda code: str(int(code)))


def _printed_once(name: str, run):
    """A command that reads and prints (inspect, validate, check), ``run(args)``, as rank 0's alone under mpirun
    (:func:`_on_rank_0`): a job script's ``srun`` runs it on every rank, which would print it once each."""
    return lambda args: _on_rank_0(name, _PRINT_CLI_TAG, args, lambda: run(args), writes=False)


def _cmd_export(args: argparse.Namespace) -> int:
    """Export a run's records and model (issue 60); imports torch only for --tensorboard and --model-only."""
    from hpcdgnn.metrics.export import run_export

    return _on_rank_0("export", _EXPORT_CLI_TAG, args, lambda: run_export(args))


def _cmd_report(args: argparse.Namespace) -> int:
    """Learning curves and time split of runs (issue 60)."""
    from hpcdgnn.metrics.report import run_report

    return _on_rank_0("report", _REPORT_CLI_TAG, args, lambda: run_report(args))


class _Parser(argparse.ArgumentParser):
    """argparse's parser, whose usage, help and errors rank 0 alone prints under mpirun (:func:`_speaks_for_job`):
    a job script's ``srun`` runs the command on every rank, which would print them once each. Every rank exits
    with the parser's status (2 for an error). In an MPMD launch the first rank of each other program prints its
    own too, with its rank (:func:`_first_of_another_program`): its command line is not rank 0's, whose parse may
    have passed, and no other rank knows what it was given. Its subcommands' parsers are of this class too
    (argparse makes them as the parent's). An error is one line, pointing at ``--help``: argparse's usage block
    before it (as long as the command's options) would bury the line that says what was wrong in a job's log."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} ({self.prog} --help lists the options)\n")

    def _print_message(self, message: str, file=None) -> None:
        if _speaks_for_job():
            super()._print_message(message, file)
        elif message and (rank := _first_of_another_program()) is not None:
            super()._print_message(f"[rank {rank}] {message}", file)


def _parser() -> argparse.ArgumentParser:
    from hpcdgnn.data.generate import add_generate_arguments, run_generate
    from hpcdgnn.data.inspect import add_inspect_arguments, run_inspect
    from hpcdgnn.data.prepare import add_prepare_arguments, run_prepare
    from hpcdgnn.data.validate import add_validate_arguments, run_validate

    p = _Parser(
        prog="python -m hpcdgnn", formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Distributed training of dynamic graph neural networks over MPI.\n"
        "Every rank runs the same command: mpirun -np P python -m hpcdgnn run job.yaml\n"
        "(on one machine: hpcdgnn-mpirun -np P ..., mpirun with what the machine needs)",
        epilog=_EXIT_CODES + "\nSee docs/configuration.md for the YAML keys and docs/data.md for the data format.")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    r = sub.add_parser(
        "run", help="train a job (under mpirun for P > 1)", formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Train the job of a YAML file on every rank of the MPI job (P = 1 without mpirun).\n"
        "Rank 0 prints one line per epoch; results go to the run directory (metrics.jsonl, summary.json).\n"
        "  python -m hpcdgnn run jobs/local.yaml --set train.epochs=5\n"
        "  mpirun -np 4 python -m hpcdgnn run job.yaml --output runs/p4\n"
        "  python -m hpcdgnn run --resume runs/p4 --set train.epochs=100",
        epilog=_EXIT_CODES)
    r.add_argument("job", nargs="?", help="job YAML (optional with --resume: the run's saved config is used)")
    r.add_argument("--resume", metavar="RUNDIR",
                   help="continue the run in RUNDIR from its newest checkpoint (exit 75 = pre-empted, resume again)")
    r.add_argument("--output", help="run directory (must be new or empty); default <output.dir>/<job>-<time>")
    r.add_argument("--set", action="extend", nargs="+", metavar="KEY=VALUE",
                   help="override YAML keys, e.g. --set train.epochs=2 model.hidden=32")
    r.set_defaults(func=_cmd_run)

    pr = sub.add_parser("prepare", help="turn a timestamped edge list (SNAP, JODIE, TGB) or a PyG Temporal JSON "
                        "into HDF5 snapshot shards or an event stream")
    add_prepare_arguments(pr)
    pr.set_defaults(func=run_prepare)

    g = sub.add_parser("generate", help="write IBM §6.3 random weak-scaling graphs as shards")
    add_generate_arguments(g)
    g.set_defaults(func=run_generate)

    i = sub.add_parser("inspect", help="print a dataset's statistics and validate its shards")
    add_inspect_arguments(i)
    i.set_defaults(func=_printed_once("inspect", run_inspect))

    v = sub.add_parser("validate", help="check a dataset directory (also done when a run starts)")
    add_validate_arguments(v)
    v.set_defaults(func=_printed_once("validate", run_validate))

    # options here: hpcdgnn.profile.command imports torch, which every subcommand would pay for
    pf = sub.add_parser("profile", help="time chunk encoders here and fit the workload predictor (DGC §4.2, §6)",
                        description="Time the structure- and time-encoder work of random chunks on this machine "
                        "and fit DGC's two workload MLPs (§4.2, §6); jobs use them with strategy.workload: mlp.")
    pf.add_argument("--model", default="cdgcn", help="model, as YAML model.name (default cdgcn)")
    pf.add_argument("--features", type=int, nargs="+", default=[2], metavar="F",
                    help="input feature widths to profile: the dataset's num_features (default 2)")
    pf.add_argument("--hidden", type=int, nargs="+", default=[16], metavar="H",
                    help="hidden widths to profile, model.hidden (default 16); several values cover a range")
    pf.add_argument("--window", type=int, default=3, help="TM-GCN window, model.window (default 3)")
    pf.add_argument("--samples", type=int, default=600, help="random chunks to time (default 600; 20%% held out)")
    pf.add_argument("--max-size", type=int, default=4096,
                    help="largest random chunk in appearances (default 4096, the largest strategy.chunk_size: auto "
                    "takes)")
    pf.add_argument("--data", metavar="DIR", help="draw the chunks from this dataset instead of a generated graph")
    pf.add_argument("--vertices", type=int, default=2048, help="generated graph: N (default 2048)")
    pf.add_argument("--snapshots", type=int, default=32, help="generated graph: T (default 32)")
    pf.add_argument("--density", type=float, default=3.0, help="generated graph: edges per vertex per snapshot")
    pf.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto", help="device to time on")
    pf.add_argument("--dtype", choices=["float32", "float64"], default="float32", help="as train.dtype")
    pf.add_argument("--threads", type=int, default=1, help="torch threads: one rank's share of the cores (default 1)")
    pf.add_argument("--repeats", type=int, default=3, help="timed repeats per encoder, the best counts (default 3)")
    pf.add_argument("--seed", type=int, default=0, help="seed of the chunks, widths and split (default 0)")
    pf.add_argument("--fit-steps", type=int, default=1500, help="Adam steps per MLP (default 1500)")
    pf.add_argument("--out", "--output", dest="out", metavar="PATH",
                    help="predictor file (default: the per-machine cache path)")
    pf.set_defaults(func=_cmd_profile)

    from hpcdgnn.planner.command import add_calibrate_arguments, add_plan_arguments

    pl = sub.add_parser("plan", help="predict memory, traffic, balance and epoch time of every strategy",
                        description="Predict, without training, each strategy's per-rank peak memory, bytes per "
                        "epoch, balance λ and epoch time at every P, and mark the one strategy: auto would pick.\n"
                        "  python -m hpcdgnn plan job.yaml --ranks 8 16 32 128 --memory-per-rank 16GiB",
                        formatter_class=argparse.RawDescriptionHelpFormatter)
    add_plan_arguments(pl)
    pl.set_defaults(func=_cmd_plan)
    ca = sub.add_parser("calibrate", help="measure this machine's rates for the planner (under mpirun: collectives)",
                        description="Time dense and sparse products per width, one framework call, and under "
                        "mpirun -np P the all-reduce and all-to-all; merge them into this machine's rates file.")
    add_calibrate_arguments(ca)
    ca.set_defaults(func=_cmd_calibrate)

    from hpcdgnn.config.check import add_check_arguments, run_check

    ck = sub.add_parser("check", help="a dry run: the resolved job, its plan and memory per rank, or the run's error",
                        description="Check a job for P ranks as a run's set-up would, without training: print the "
                        "configuration with every default filled in, the plan's per-rank table and the memory per "
                        "rank; a job a run would refuse gets that run's one-line error (exit 2).\n"
                        "  python -m hpcdgnn check job.yaml --ranks 128 --memory-per-rank 16GiB\n"
                        "  python -m hpcdgnn check --schema > hpcdgnn-job.schema.json   (for editors)",
                        formatter_class=argparse.RawDescriptionHelpFormatter)
    add_check_arguments(ck)
    ck.set_defaults(func=_printed_once("check", run_check))

    ex = sub.add_parser("export", help="a run's epoch records as CSV or TensorBoard scalars; its model as a plain file",
                        description="Write what a run made in the formats other tools read:\n"
                        "  python -m hpcdgnn export RUNDIR --csv metrics.csv --tensorboard tb/\n"
                        "  python -m hpcdgnn export RUNDIR --model-only model.pt [--to pygt]",
                        formatter_class=argparse.RawDescriptionHelpFormatter)
    ex.add_argument("rundir", help="a run directory")
    ex.add_argument("--csv", metavar="FILE", help="the epoch records, one CSV row each (nested keys dotted)")
    ex.add_argument("--tensorboard", metavar="DIR", help="the epoch records as TensorBoard scalars (step = epoch)")
    ex.add_argument("--model-only", metavar="FILE",
                    help="the trained model and task head: state_dicts and what builds them (no trainer needed)")
    ex.add_argument("--to", choices=["hpcdgnn", "pygt"], default="hpcdgnn",
                    help="--model-only's form: hpcdgnn's modules (default), or PyG Temporal's cells with the same "
                    "weights (gconv_gru, gconv_lstm, tgcn_cell)")
    ex.set_defaults(func=_cmd_export)

    from hpcdgnn.embed import add_embed_arguments, add_predict_arguments

    em = sub.add_parser("embed", help="write a trained run's node embeddings Z_t (HDF5 or npz)",
                        description="Compute Z_t with the run's newest checkpoint (under mpirun: its strategy's "
                        "distributed forward on P ranks) and write them, with the metrics of that pass.\n"
                        "  python -m hpcdgnn embed RUNDIR --split test --output z.h5",
                        formatter_class=argparse.RawDescriptionHelpFormatter)
    add_embed_arguments(em)
    em.set_defaults(func=_cmd_embed)
    pd = sub.add_parser("predict", help="score (u, v, t) pairs, or predict node targets, with a trained run",
                        description="Link prediction: the probability that each (u, v) of --pairs is an edge of "
                        "snapshot t+1 given Z_t (CSV u,v,t,score). Node tasks: the head's output per vertex and "
                        "step of --split (the layout of embed's file).\n"
                        "  python -m hpcdgnn predict RUNDIR --pairs pairs.csv --output scores.csv\n"
                        "  python -m hpcdgnn predict RUNDIR --split test --output y.h5",
                        formatter_class=argparse.RawDescriptionHelpFormatter)
    add_predict_arguments(pd)
    pd.set_defaults(func=_cmd_predict)

    rp = sub.add_parser("report", help="learning curves and the per-epoch time split of runs (PNG)",
                        description="Draw curves.png (loss, validation and test metrics per epoch, one line per run) "
                        "and time_split.png (the slowest rank's load / compute / exposed communication per epoch) "
                        "into --out. Scaling plots over P: perf/scaling.py.")
    rp.add_argument("rundirs", nargs="+", metavar="RUNDIR", help="run directories")
    rp.add_argument("--out", "--output", dest="out", help="PNG directory (default: one run's RUNDIR/report/)")
    rp.set_defaults(func=_cmd_report)
    return p


#: whether :func:`main` runs as the process's command (``python -m hpcdgnn``), not called in-process
_AS_COMMAND = False


def main(argv: list[str] | None = None) -> int:
    """Parse the command line and run the subcommand; returns the exit status."""
    import warnings

    from hpcdgnn.ops import ignore_csr_notice

    with warnings.catch_warnings():  # hpcdgnn's filter for the command alone: main(argv)'s caller keeps its own
        ignore_csr_notice()
        return _main(argv)


def _main(argv: list[str] | None) -> int:
    """:func:`main`."""
    global _AS_COMMAND
    _AS_COMMAND = argv is None
    command = (sys.argv[1:2] or [""])[0] if argv is None else None
    starting: dict[int, object] = {}
    if command == "run":  # a stop signal before the handlers waits for them
        from hpcdgnn import preemption

        preemption.hold()
    elif command in ("embed", "predict"):  # before MPI starts: under mpirun each rank stops, rank 0 says so
        _stop_while_starting(command, _PASS_STOPS, EXIT_PASS_STOPPED)  # _spmd_body's handlers replace it
    elif command is not None and command not in _SPMD_COMMANDS:
        starting = _stop_while_starting(command)  # before the parser's imports
    args = _parser().parse_args(argv)
    if args.command in _SPMD_COMMANDS:
        return args.func(args)
    from hpcdgnn import preemption

    # SIGTERM (scancel, kill) would end the process where it stands, its half-written output left behind, and so
    # would SIGUSR1 (hpcdgnn-mpirun's relay of a Ctrl-C); what is put back at the end is what was there before the
    # starting handler
    before = {sig: starting.get(sig, h) for sig, h in _on_stop_signals(preemption.stop, _PASS_STOPS).items()}
    writes = args.command in ("prepare", "generate")
    try:
        if writes:  # a stop once the dataset is in place: done, and said so (not the Python API's delivery)
            from hpcdgnn.data.writer import stops_after_written

            late_stops = stops_after_written()
        else:
            late_stops = contextlib.nullcontext([])
        with late_stops as late:
            code = args.func(args)
        sys.stdout.flush()  # a reader that left is found here, not in the interpreter's exit
        if late and _speaks_for_job():
            name = preemption.describe_signal(signal.Signals(late[0][0]).name)
            print(f"hpcdgnn: {args.command}: {name} came after {late[0][1]} was written; the dataset is complete",
                  file=sys.stderr)
        return code
    except KeyboardInterrupt as e:
        # stopping now: a further signal must not raise in here (a rank told of rank 0's stop before its own
        # signal came, hpcdgnn.rank_zero, would print a traceback)
        _on_stop_signals(lambda *_: None, _PASS_STOPS)
        n = getattr(e, "signum", signal.SIGINT)
        # the dataset writers remove their hidden directory on the way out; the other commands write in place
        kept = "; nothing it was writing is left" if writes else ""
        if kept:
            from hpcdgnn.data.writer import remove_unfinished_datasets

            remove_unfinished_datasets()
            # a stop held while the dataset was renamed into place, delivered as the rename failed: the stop decides
            # the status, and the rename's line (where the earlier dataset is) completes this one
            failure = getattr(e, "failure", None)
            if failure is not None:
                kept = f"; {failure}"
        if _speaks_for_job():
            print(f"hpcdgnn: {args.command}: stopped by {signal.Signals(n).name}{kept}", file=sys.stderr)
        return _stop_status(n)
    except HpcdgnnError as e:
        from hpcdgnn.rank_zero import said_by_rank_0

        # rank 0's refusal under mpirun (prepare, export, ...), or one every rank raised alike (calibrate's
        # agreement): rank 0 prints it, once
        if not said_by_rank_0(e) and (_speaks_for_job() or not getattr(e, "collective", False)):
            print(f"hpcdgnn: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    except BrokenPipeError:  # `inspect --json | head`: the reader left; stop as a shell tool does, quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # nothing left to flush at exit
        return EXIT_BROKEN_PIPE
    except (MemoryError, RuntimeError) as e:  # e.g. generate --vertices 10**12: numpy's MemoryError
        detail = out_of_memory(e)
        if detail is None:
            raise
        print(f"hpcdgnn: error: {args.command}: out of memory ({detail}); {_ask_for_less(args)}", file=sys.stderr)
        return EXIT_USAGE
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)
        preemption.forget_stop()


def _ask_for_less(args: argparse.Namespace) -> str:
    """What to lower after an out-of-memory error: a job command's (``check``, ``plan``) size keys, largest term
    first, as a run's line names them; else the sizes in general."""
    job_path = getattr(args, "job", None)
    if isinstance(job_path, str):
        try:
            from hpcdgnn.config import load_job
            from hpcdgnn.regimes import regime_of
            from hpcdgnn.train.footprint import lower_bound, size_keys

            job = load_job(job_path, getattr(args, "set", None) or [])
            ranks = getattr(args, "ranks", 1)
            P = max(ranks) if isinstance(ranks, list) else ranks or 1
            keys = size_keys(lower_bound(job, regime_of("model", job.model.name).load_manifest(job.data.path), P))
            if keys:
                return f"lower {', '.join(keys)}"
        except Exception:  # noqa: BLE001 -- already failing: the general advice then
            pass
    return "ask for less (sizes, --snapshots)"


if __name__ == "__main__":
    sys.exit(main())
