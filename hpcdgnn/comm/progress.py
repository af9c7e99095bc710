"""A thread that moves this rank's non-blocking exchanges while the training thread computes (IBM §6.5).

Open MPI (and MPICH without ``MPIR_CVAR_ASYNC_PROGRESS``) moves the data of a non-blocking
collective only inside MPI calls: with the shared-memory transport the receiving rank copies
the bytes itself, in whichever of its MPI calls finds them ready. With the training thread as
the only caller, the copy runs in its ``Test``/``Wait`` calls between chunks — on the core that
computes, so ``strategy.overlap_chunks`` hides the waiting for peers but not the copy.

:class:`ProgressThread` takes that work off the training thread: every exchange posted through
:class:`~hpcdgnn.comm.communicator.Communicator` (``exchange.ialltoall_boxes``, ``iallreduce_``) is handed
to it, and it drives them until each completes. How depends on whether it has a core of its own
(``dedicated``, :func:`spare_core`):

- **dedicated**: it waits inside ``MPI_Waitsome`` on the exchanges in flight (the GIL released), so
  the library progresses them at its full rate, as a C progress thread would; a message this process
  sends itself on a duplicate of ``MPI_COMM_SELF`` (the *bell*) ends that wait when another exchange is
  handed over or the thread is stopped. It spins its core while an exchange is open and sleeps on a
  condition variable while none is. Why not poll: the exchanges move strided boxes (MPI derived
  datatypes), which Open MPI's shared-memory transport packs fragment by fragment, each needing a call
  into the library on both sides; polled, a chunk's box takes several times as long as a wait inside MPI
  (``perf/bench_progress.py``), so in a pipeline the thread falls behind the chunks and they queue up.
- **not dedicated** (``comm.progress: thread`` on a node without a spare core): it calls
  ``MPI_Testsome`` and sleeps ``POLL_S`` between rounds that completed nothing, so it neither holds the
  GIL nor a core while the training thread computes.

With a dedicated thread, the training thread's test of an adopted exchange reads a flag; its wait blocks on
an event, and only that wait is exposed time. Where the thread polls, the training thread does not sleep
through a wait: it takes the exchange back and waits inside MPI itself (:meth:`ProgressThread.await_exchange`),
and its tests between chunks give the library a round of progress (:meth:`ProgressThread.drive`), so that the
chunks nothing hides — the pipeline's first in, its last out — move at a wait's rate, not at the poll's.
The thread also makes the exchange's local part, the copy
of the rank's own box (a strided torch copy that the training thread would otherwise make at the post: at P = 2 as
many bytes as the transfer).

It pays only where each rank has a core to spare for it — otherwise the copy still competes
with the computation, now from another thread — so ``comm.progress: auto`` starts it only when
this node's cores cover ``ranks on the node × (train threads + 1)`` and this rank's affinity
leaves it one (:func:`spare_core`). It needs ``MPI_THREAD_MULTIPLE`` (mpi4py asks for it by
default); without it the exchanges stay on the training thread. It never changes what is
exchanged, only which thread moves it: results are bit for bit those without it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from hpcdgnn.comm.device import cpu_affinity, node_cpu_sets

__all__ = ["Progress", "ProgressThread", "spare_core"]

POLL_S = 50e-6
"""Sleep between ``Testsome`` rounds that completed nothing: the GIL and the core are free meanwhile. Short
enough that exchanges posted before a compute phase complete during it, long enough that the poll does not
slow a dispatch-bound training thread while an exchange stays open (a deferred halo send can, for much of
an epoch)."""


def spare_core(comm: Any, threads: int) -> bool:
    """Whether every rank of this node can give a progress thread a core of its own beside ``threads``
    compute threads: the union of the node's ranks' CPU affinities holds ``ranks × (threads + 1)``
    CPUs and this rank may run on more than ``threads``. A collective over the node's ranks.
    """
    sets = node_cpu_sets(comm)
    union = set().union(*map(set, sets))
    return len(cpu_affinity()) > threads and len(union) >= len(sets) * (threads + 1)


class Progress:
    """Which thread moves a communicator's non-blocking exchanges (``comm.progress``): the switch
    (:meth:`start`, :meth:`stop`), what the ranks agreed (:attr:`ranks`, :attr:`dedicated`,
    :attr:`everywhere`) and the thread itself (:attr:`thread`).

    One per root communicator, shared by its splits, so an exchange posted on a split (the gradient
    buckets') goes to the same thread. Apart from the collectives because it is set up once per run and
    only changes who moves the bytes, never what is exchanged.

    Args:
        comm: the root communicator (:class:`~hpcdgnn.comm.communicator.Communicator`), whose collectives
            :meth:`start` makes.
    """

    def __init__(self, comm: Any) -> None:
        self._owner = comm
        self._thread: ProgressThread | None = None  # None: the exchanges move inside the calls that test them
        self._ranks = self._dedicated = 0  # agreed in start

    def start(self, mode: str, threads: int) -> int:
        """``comm.progress``: hand this rank's non-blocking exchanges to a progress thread — ``thread``
        always, ``auto`` where the node has a spare core per rank beside ``threads`` (where it does, the
        thread is ``dedicated``), ``calls`` never; none on one rank or without ``MPI_THREAD_MULTIPLE``.
        Collective over the root communicator; returns (and keeps as :attr:`ranks`) how many ranks run one."""
        comm = self._owner
        if comm.size == 1 or mode == "calls":  # the same on every rank (the job's): nothing to agree on
            self._ranks = self._dedicated = 0
            return 0
        spare = spare_core(comm, threads)  # a collective on every rank (the mode is the job's)
        if mode == "thread" or spare:
            # with a core of its own the thread waits inside MPI, at the library's full rate; else it polls
            self._thread = self._thread or ProgressThread.start(comm._MPI, dedicated=spare)
        mine = [float(self._thread is not None), float(self._thread is not None and self._thread.dedicated)]
        self._ranks, self._dedicated = map(int, comm.allreduce_array(mine, tag="setup"))
        return self._ranks

    @property
    def ranks(self) -> int:
        """How many ranks run a progress thread (agreed in :meth:`start`)."""
        return self._ranks

    @property
    def dedicated(self) -> int:
        """How many of :attr:`ranks`' threads have a core of their own (wait inside MPI)."""
        return self._dedicated

    @property
    def everywhere(self) -> bool:
        """Whether every rank's exchanges are moved by a progress thread, from :meth:`start` until
        :meth:`stop` (which every rank calls): the same answer on every rank, so code may post
        differently on it (each rank must post the same collectives in the same order)."""
        return self._thread is not None and self._ranks == self._owner.size

    @property
    def thread(self) -> ProgressThread | None:
        """The progress thread moving the exchanges, or None."""
        return self._thread

    def stop(self) -> None:
        """End the progress thread, if any (its exchanges completed first); later exchanges progress in calls.
        Every rank calls it (the end of a run, :meth:`~hpcdgnn.comm.communicator.Communicator.close`)."""
        if self._thread is not None:
            self._thread.stop()
            self._thread = None


class ProgressThread:
    """Completes the exchanges handed to it with ``adopt`` (see the module docstring).

    The training thread touches an adopted exchange's MPI request again only once this thread has handed it
    back (:meth:`await_exchange`, polling): until then this thread tests it, and where it completes it, records
    ``completed_at`` (``perf_counter``) and sets ``completed``; an MPI error raised here
    is kept and re-raised by the training thread at its next test, wait or post (:meth:`check`, through
    the exchange's ``holder``, which stays valid after the thread is stopped).
    """

    def __init__(self, MPI: Any, dedicated: bool = False) -> None:
        self._MPI = MPI
        self.dedicated = dedicated
        self._cv = threading.Condition()
        self._new: list[tuple[Any, Callable[[], None] | None]] = []  # adopted, not yet seen by the thread
        self._claims: list[Any] = []  # exchanges the waiting training thread takes back (await_exchange); under _cv
        self._stopping = False
        self.error: BaseException | None = None
        #: dedicated: this process's channel to itself, whose message ends the thread's Waitsome
        self._bell = MPI.COMM_SELF.Dup() if dedicated else None
        #: polling: a channel nothing is ever sent on, whose probe runs the library's progress engine for the
        #: training thread between its chunks (:meth:`drive`)
        self._poke = None if dedicated else MPI.COMM_SELF.Dup()
        self._ding, self._heard = bytearray(1), bytearray(1)
        self._in_wait = False  # the thread is in (or entering) Waitsome; under _cv
        self._rung = False  # a bell message is on its way and not yet received; under _cv
        self._thread = threading.Thread(target=self._run, name="hpcdgnn-mpi-progress", daemon=True)
        self._thread.start()

    @classmethod
    def start(cls, MPI: Any, dedicated: bool = False) -> ProgressThread | None:
        """A running thread, or ``None`` where the MPI library gives no ``MPI_THREAD_MULTIPLE``.
        ``dedicated``: it has a core of its own (it waits inside MPI; else it polls)."""
        if MPI.Query_thread() < MPI.THREAD_MULTIPLE:
            return None
        return cls(MPI, dedicated)

    def adopt(self, pending: Any, local: Callable[[], None] | None = None) -> None:
        """Hand a just-posted exchange (``Pending`` with a live request) to the thread, with the copy of
        this rank's own part (``local``, run by the thread before it tests the request), if any."""
        pending.completed, pending.holder = threading.Event(), self
        with self._cv:  # the error is set under this lock before the thread releases what it holds
            self.check()  # after an error the thread has ended: nothing would complete this one
            self._new.append((pending, local))
            self._wake()

    def _wake(self) -> None:
        """Under ``_cv``: get the thread's attention, in its condition wait or in its Waitsome."""
        self._cv.notify()
        if self._in_wait and not self._rung:
            # to itself, for the thread's Waitsome: Open MPI buffers it at once; MPICH returns when the thread's
            # receive is posted, which the thread does without this lock
            self._bell.Send(self._ding, 0, 0)
            self._rung = True  # only once sent: after a failed send a later wake must try again

    def await_exchange(self, pending: Any) -> None:
        """Block the training thread until ``pending`` (adopted here) has completed.

        Polling, the thread moves bytes only between its sleeps, at a fraction of the rate of a wait inside
        MPI (``perf/bench_progress.py``), and a chunk the training thread waits for is exposed time (the
        pipeline's first chunk in, its last out).
        So the waiting training thread takes the exchange back and waits inside MPI itself: it asks, the thread
        drops the request from its tests at its next round (after the exchange's own-box copy, should that not
        have run yet) and says so, and the training thread calls ``Wait`` — the request is only ever tested by
        one thread at a time. Dedicated, the thread already waits inside MPI at full rate; the training thread
        sleeps on the flag."""
        done = pending.completed
        if self.dedicated:
            done.wait()
            return
        if pending.released is None:  # (a second wait, after the first raised, finds it handed back already)
            with self._cv:
                if done.is_set():
                    return
                pending.released = threading.Event()
                self._claims.append(pending)
                self._cv.notify()  # out of its sleep between rounds
        pending.released.wait()
        if not done.is_set():  # handed back, not completed (nor failed: then the thread completes it)
            pending.request.Wait()
            pending.completed_at = time.perf_counter()
            done.set()

    def drive(self) -> None:
        """One round of the library's progress engine from the training thread, between its chunks (polling
        only: it moves what arrived since the thread's last round, as ``comm.progress: calls``' test would): a
        probe on a channel nothing is sent on, which progresses every posted exchange without touching their
        requests (those stay the thread's)."""
        if self._poke is not None:
            self._poke.Iprobe(0, 0)

    def check(self) -> None:
        """Re-raise, in the calling thread, an MPI error the progress thread met."""
        if self.error is not None:
            raise RuntimeError(f"MPI progress thread failed: {self.error!r}") from self.error

    def stop(self) -> None:
        """Let the thread finish the exchanges it holds, then end it (a few seconds at most: at
        exit after an error a peer may never complete an exchange, and the job is ending anyway)."""
        with self._cv:
            self._stopping = True
            self._wake()
        self._thread.join(timeout=5.0)
        if self._poke is not None:  # the training thread's alone: free whatever the thread is doing
            poke, self._poke = self._poke, None
            try:
                poke.Free()
            except Exception:  # noqa: BLE001 — a local handle at the end of the thread's life: nothing to lose,
                pass  # and an error here (MPI already failing) must not replace the one that ended the run

    def _run(self) -> None:
        Request = self._MPI.Request
        waiting: list[Any] = []  # the thread's own: exchanges whose request is still live
        bell = None  # dedicated: the posted receive of the bell's next message
        while True:
            with self._cv:
                while not self._new and not waiting and not self._claims and not self._stopping:
                    self._cv.wait()
                if not self._new and not waiting and not self._claims:  # stopping, and nothing left
                    break
                new, self._new = self._new, []
                # stopping: poll what is left, never wait inside MPI, so that the thread (a daemon) can be
                # frozen at interpreter exit should a dead peer leave an exchange open
                stopping = self._stopping
                wait = self.dedicated and not stopping and not new
                if wait:
                    self._in_wait = True
            waiting += [p for p, _ in new]
            try:
                if stopping and bell is not None:  # no receive left posted should the thread outlive stop's join
                    self._settle_bell(bell)
                    bell = None
                for _, local in new:  # the own part first: the peers' parts are on their way meanwhile
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
                if done is None:  # MPI_UNDEFINED: no active request left among them
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
                with self._cv:  # nothing more will complete: release every waiter
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
                # a claim on an exchange adopted since this round began waits for the next: its own-box copy
                # has not run, and the request would join the tests after the training thread had freed it
                unseen = {id(p) for p, _ in self._new}
                claims = [p for p in self._claims if id(p) not in unseen]
                self._claims = [p for p in self._claims if id(p) in unseen]
            if claims:  # hand them back (their own-box copies have run)
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
