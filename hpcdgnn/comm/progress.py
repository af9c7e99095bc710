"""A thread that moves this rank's non-blocking exchanges while the training thread computes (IBM §6.5).

Open MPI (and MPICH without ``MPIR_CVAR_ASYNC_PROGRESS``) moves a non-blocking collective's data only inside
MPI calls, so with the training thread as the only caller the copy runs on the computing core.
:class:`ProgressThread` drives every exchange posted through the communicator until it completes:

- **dedicated** (a spare core, :func:`spare_core`): it waits inside ``MPI_Waitsome``, GIL released; a message
  to itself on a duplicate of ``MPI_COMM_SELF`` (the *bell*) ends the wait for new work or stop. Polling would
  be too slow: Open MPI packs strided (derived-datatype) boxes fragment by fragment, one call each.
- **polling** (no spare core): ``MPI_Testsome`` with ``POLL_S`` sleeps; a training thread that must wait takes
  the exchange back and waits inside MPI itself (:meth:`ProgressThread.await_exchange`).

``comm.progress: auto`` starts it only where every rank has a spare core; it needs ``MPI_THREAD_MULTIPLE``.
Results are bit for bit those without it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from hpcdgnn.comm.device import cpu_affinity, node_cpu_sets

__all__ = ["Progress", "ProgressThread", "spare_core"]

POLL_S = 50e-6
"""Sleep between ``Testsome`` rounds that completed nothing (frees the GIL and the core)."""


def spare_core(comm: Any, threads: int) -> bool:
    """Whether every rank of this node has a core for a progress thread beside ``threads`` (collective)."""
    sets = node_cpu_sets(comm)
    union = set().union(*map(set, sets))
    return len(cpu_affinity()) > threads and len(union) >= len(sets) * (threads + 1)


class Progress:
    """Which thread moves a communicator's non-blocking exchanges (``comm.progress``).

    One per root communicator ``comm``, shared by its splits, so their exchanges go to the same thread.
    """

    def __init__(self, comm: Any) -> None:
        self._owner = comm
        self._thread: ProgressThread | None = None
        self._ranks = self._dedicated = 0

    def start(self, mode: str, threads: int) -> int:
        """Start a progress thread per ``mode`` (thread, auto, calls); collective; returns how many ranks run one."""
        comm = self._owner
        if comm.size == 1 or mode == "calls":  # the same on every rank (the job's): nothing to agree on
            self._ranks = self._dedicated = 0
            return 0
        spare = spare_core(comm, threads)
        if mode == "thread" or spare:
            self._thread = self._thread or ProgressThread.start(comm._MPI, dedicated=spare)
        mine = [float(self._thread is not None), float(self._thread is not None and self._thread.dedicated)]
        self._ranks, self._dedicated = map(int, comm.allreduce_array(mine, tag="setup"))
        return self._ranks

    @property
    def ranks(self) -> int:
        """How many ranks run a progress thread."""
        return self._ranks

    @property
    def dedicated(self) -> int:
        """How many of those threads have a core of their own."""
        return self._dedicated

    @property
    def everywhere(self) -> bool:
        """Whether every rank runs a progress thread: the same on every rank, so posting may depend on it."""
        return self._thread is not None and self._ranks == self._owner.size

    @property
    def thread(self) -> ProgressThread | None:
        """The progress thread moving the exchanges, or None."""
        return self._thread

    def stop(self) -> None:
        """End the progress thread, if any, after its exchanges complete (every rank calls it)."""
        if self._thread is not None:
            self._thread.stop()
            self._thread = None


class ProgressThread:
    """Completes the exchanges handed to it with ``adopt``.

    An adopted request is tested by this thread only, until handed back (:meth:`await_exchange`); an MPI
    error raised here is re-raised by the training thread at its next test, wait or post (:meth:`check`).
    """

    def __init__(self, MPI: Any, dedicated: bool = False) -> None:
        self._MPI = MPI
        self.dedicated = dedicated
        self._cv = threading.Condition()
        self._new: list[tuple[Any, Callable[[], None] | None]] = []
        self._claims: list[Any] = []  # exchanges the waiting training thread takes back (await_exchange); under _cv
        self._stopping = False
        self.error: BaseException | None = None
        #: dedicated: the channel to itself whose message ends the thread's Waitsome
        self._bell = MPI.COMM_SELF.Dup() if dedicated else None
        #: polling: a channel nothing is sent on, probed to run the progress engine (:meth:`drive`)
        self._poke = None if dedicated else MPI.COMM_SELF.Dup()
        self._ding, self._heard = bytearray(1), bytearray(1)
        self._in_wait = False  # the thread is in (or entering) Waitsome; under _cv
        self._rung = False  # a bell message is on its way and not yet received; under _cv
        self._thread = threading.Thread(target=self._run, name="hpcdgnn-mpi-progress", daemon=True)
        self._thread.start()

    @classmethod
    def start(cls, MPI: Any, dedicated: bool = False) -> ProgressThread | None:
        """A running thread, or ``None`` without ``MPI_THREAD_MULTIPLE``; ``dedicated``: wait, else poll."""
        if MPI.Query_thread() < MPI.THREAD_MULTIPLE:
            return None
        return cls(MPI, dedicated)

    def adopt(self, pending: Any, local: Callable[[], None] | None = None) -> None:
        """Hand a just-posted exchange to the thread, with the copy of this rank's own part (``local``)."""
        pending.completed, pending.holder = threading.Event(), self
        with self._cv:  # the error is set under this lock before the thread releases what it holds
            self.check()  # after an error the thread has ended: nothing would complete this one
            self._new.append((pending, local))
            self._wake()

    def _wake(self) -> None:
        """Under ``_cv``: get the thread's attention, in its condition wait or in its Waitsome."""
        self._cv.notify()
        if self._in_wait and not self._rung:
            # MPICH returns only once the thread's receive is posted, which it does without this lock
            self._bell.Send(self._ding, 0, 0)
            self._rung = True  # only once sent: after a failed send a later wake must try again

    def await_exchange(self, pending: Any) -> None:
        """Block the training thread until ``pending`` has completed.

        Polling, the training thread claims the request back and waits inside MPI itself (a request is only
        ever tested by one thread); dedicated, it sleeps on the completion flag.
        """
        done = pending.completed
        if self.dedicated:
            done.wait()
            return
        if pending.released is None:
            with self._cv:
                if done.is_set():
                    return
                pending.released = threading.Event()
                self._claims.append(pending)
                self._cv.notify()
        pending.released.wait()
        if not done.is_set():  # handed back, not completed (nor failed: then the thread completes it)
            pending.request.Wait()
            pending.completed_at = time.perf_counter()
            done.set()

    def drive(self) -> None:
        """One round of the progress engine from the training thread (polling): a probe, touching no request."""
        if self._poke is not None:
            self._poke.Iprobe(0, 0)

    def check(self) -> None:
        """Re-raise, in the calling thread, an MPI error the progress thread met."""
        if self.error is not None:
            raise RuntimeError(f"MPI progress thread failed: {self.error!r}") from self.error

    def stop(self) -> None:
        """Let the thread finish its exchanges, then end it (a few seconds at most: a dead peer may never)."""
        with self._cv:
            self._stopping = True
            self._wake()
        self._thread.join(timeout=5.0)
        if self._poke is not None:  # the training thread's alone: free whatever the thread is doing
            poke, self._poke = self._poke, None
            try:
                poke.Free()
            except Exception:  # noqa: BLE001 — must not replace the error that ended the run
                pass

    def _run(self) -> None:
        Request = self._MPI.Request
        waiting: list[Any] = []
        bell = None
        while True:
            with self._cv:
                while not self._new and not waiting and not self._claims and not self._stopping:
                    self._cv.wait()
                if not self._new and not waiting and not self._claims:
                    break
                new, self._new = self._new, []
                # stopping: poll, never wait in MPI, so the daemon thread can be frozen at exit
                stopping = self._stopping
                wait = self.dedicated and not stopping and not new
                if wait:
                    self._in_wait = True
            waiting += [p for p, _ in new]
            try:
                if stopping and bell is not None:  # no receive left posted should the thread outlive stop's join
                    self._settle_bell(bell)
                    bell = None
                for _, local in new:  # the own part first, while the peers' parts travel
                    if local is not None:
                        local()
                if wait:
                    if bell is None:
                        bell = self._bell.Irecv(self._heard, 0, 0)
                    done = Request.Waitsome([p.request for p in waiting] + [bell])
                    with self._cv:
                        self._in_wait = False
                    if done is not None and len(waiting) in done:  # the bell: new work, or stop
                        bell = None
                        with self._cv:
                            self._rung = False
                        done = [i for i in done if i != len(waiting)]
                else:
                    done = Request.Testsome([p.request for p in waiting])
                if done is None:
                    done = range(len(waiting))
            except BaseException as e:  # noqa: BLE001 — handed to the training thread, which raises it
                with self._cv:  # before any later adopt can pass its check (see adopt)
                    self.error = e
                    self._in_wait = False
                done = range(len(waiting))
            t = time.perf_counter()
            finished = set(done)
            for i in finished:
                waiting[i].completed_at = t
                waiting[i].completed.set()
            waiting = [p for i, p in enumerate(waiting) if i not in finished]
            if self.error is not None:
                with self._cv:
                    for p, _ in self._new:
                        p.completed_at = t
                        p.completed.set()
                    self._new = []
                    for p in self._claims:
                        p.released.set()
                    self._claims = []
                break
            with self._cv:
                if not self._claims and not self._new and not finished and not new and not wait:
                    self._cv.wait(POLL_S)  # not time.sleep: a claim (or new work) ends it at once
                # claims on exchanges adopted during this round wait: their own-box copy has not run
                unseen = {id(p) for p, _ in self._new}
                claims = [p for p in self._claims if id(p) not in unseen]
                self._claims = [p for p in self._claims if id(p) in unseen]
            if claims:
                taken = {id(p) for p in claims}
                waiting = [p for p in waiting if id(p) not in taken]
                for p in claims:
                    p.released.set()
        self._close_bell(bell)

    def _settle_bell(self, bell: Any) -> None:
        """Complete the posted bell receive ``bell``: with the message on its way, or one sent now."""
        with self._cv:
            if not self._rung:
                self._bell.Send(self._ding, 0, 0)
                self._rung = True
        bell.Wait()
        with self._cv:
            self._rung = False

    def _close_bell(self, bell: Any) -> None:
        """Settle a posted bell receive, then free the channel: nothing of it outlives the thread."""
        if self._bell is None:
            return
        try:
            if bell is not None:
                self._settle_bell(bell)
            self._bell.Free()
        except BaseException as e:  # noqa: BLE001
            with self._cv:
                self.error = self.error or e
