"""Stall watchdog: a rank that makes no progress for ``comm.stall_timeout_s`` ends the job.

MPI has no timeout, so one stopped rank leaves all others waiting forever. One daemon thread per rank, on its
own duplicate communicator so its messages never match training collectives: ranks > 0 send rank 0 heartbeats
(completed calls, current tag, seconds without progress) and rank 0 answers. Whoever sees a rank silent or
without progress for ``timeout`` prints one line naming it and calls ``MPI_Abort`` (``EXIT_STALLED``).
Ranks merely waiting in a collective are named only when no rank is silent, computing without progress for most
of the timeout (the straggler they wait for), or stopped (missed two beats): then all wait (a mismatched
collective). Only durations cross the wire: node clocks need not agree.
Needs ``MPI_THREAD_MULTIPLE``.
"""

from __future__ import annotations

import sys
import threading
import time
from typing import Any

from hpcdgnn.errors import EXIT_STALLED

__all__ = ["Watchdog"]

_BEAT, _BYE = 1, 2  # message tags on the watchdog's own communicator


def _state(stats) -> dict[str, Any]:
    """This rank's progress as durations (seconds), safe to compare across nodes."""
    now = time.monotonic()
    return {"completed": stats.completed, "current": stats.current,
            "in_call": now - stats.entered if stats.current else 0.0, "idle": now - stats.progressed}


def _describe(rank: int, st: dict[str, Any], silent: float | None) -> str:
    where = f"in collective '{st['current']}'" if st["current"] else "computing, after its last collective"
    heard = f", not heard from for {silent:.1f} s" if silent is not None else ""
    return f"rank {rank} ({where}, no progress for {st['idle']:.1f} s{heard}, {st['completed']} calls done)"


def _culprits(states: dict[int, tuple[float, dict[str, Any]]], timeout: float, missed: float) -> list[int]:
    """The ranks to name, from each rank's (seconds since its last beat, progress as of now); none while no rank
    is stalled (no progress, or not heard from, for ``timeout``). In order: ranks silent past the timeout; ranks
    computing without progress for ``timeout - missed`` (a straggler left the last collective with the ranks now
    waiting for it, a moment after them: those pass the timeout first); ranks not heard from for ``missed``
    seconds (two beats: a stopped process, on which a rank waiting in a collective can pass the timeout before
    its silence does); else every stalled rank (all wait: a mismatched collective)."""
    stalled = sorted(r for r, (age, st) in states.items() if st["idle"] > timeout or age > timeout)
    if not stalled:
        return []
    silent = [r for r in stalled if states[r][0] > timeout]
    computing = sorted(r for r, (_, st) in states.items() if not st["current"] and st["idle"] > timeout - missed)
    stopped = sorted(r for r, (age, _) in states.items() if age > missed)
    return silent or computing or stopped or stalled


class Watchdog:
    """One rank's watchdog thread; :meth:`start` and :meth:`stop` are collective."""

    def __init__(self, comm, timeout: float, log=None) -> None:
        self.comm, self.timeout = comm, float(timeout)
        self.interval = max(0.2, min(self.timeout / 4, 30.0))
        self.missed = 2 * self.interval  # two beats missed: the process itself is not running
        self.poll = min(0.1, self.interval / 4)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._wcomm: Any = None
        self._log = log

    @classmethod
    def start(cls, comm, timeout: float, log=None) -> Watchdog | None:
        """Start the watchdog on every rank (collective); ``None`` when off (P = 1, timeout 0, no threads)."""
        if comm.size == 1 or timeout <= 0:
            return None
        MPI = comm._MPI
        if MPI.Query_thread() < MPI.THREAD_MULTIPLE:
            if comm.rank == 0 and log is not None:
                log.info("stall watchdog off: the MPI library gives no MPI_THREAD_MULTIPLE")
            return None
        dog = cls(comm, timeout, log)
        dog._wcomm = comm._comm.Dup()
        dog._thread = threading.Thread(target=dog._run, name="hpcdgnn-watchdog", daemon=True)
        dog._thread.start()
        return dog

    def stop(self) -> None:
        """End the thread on every rank (collective): the workers say goodbye, rank 0 waits for all."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self._wcomm.Free()

    def _run(self) -> None:
        try:
            self._serve() if self.comm.rank == 0 else self._beat()
        except Exception as e:  # a watchdog bug must not pass silently, nor hang the job
            sys.stderr.write(f"rank {self.comm.rank}/{self.comm.size}: watchdog failed: {e!r}\n")
            sys.stderr.flush()
            self.comm.abort(1)

    def _abort(self, message: str) -> None:
        sys.stdout.flush()
        sys.stderr.write(f"[rank {self.comm.rank}] hpcdgnn: error: stalled: {message}; ending the job "
                         f"(comm.stall_timeout_s = {self.timeout:g}; raise it if a rank is only slow)\n")
        sys.stderr.flush()
        self.comm.abort(EXIT_STALLED)

    def _beat(self) -> None:
        """Ranks > 0: a heartbeat every interval, each answered by rank 0 before the next."""
        w, last_reply = self._wcomm, time.monotonic()
        while True:
            w.send(_state(self.comm.stats), dest=0, tag=_BEAT)
            req = w.irecv(source=0, tag=_BEAT)
            tick = time.monotonic()
            while True:
                done, reply = req.test()
                if done:
                    break
                now = time.monotonic()
                if now - tick > max(1.0, self.timeout / 2):  # this process itself froze: rank 0 judges
                    last_reply = now
                tick = now
                silent = now - last_reply
                if silent > self.timeout:
                    self._abort(_describe(0, {"completed": "?", "current": "", "idle": silent}, silent)
                                .replace("computing, after its last collective", "not answering"))
                time.sleep(self.poll)
            last_reply = time.monotonic()
            if self._stop.wait(self.interval):
                w.send(None, dest=0, tag=_BYE)
                return
            if time.monotonic() - last_reply > self.interval + max(1.0, self.timeout / 2):
                # this process froze while it waited (SIGSTOP, swapped out): rank 0 judges it, and a rank woken
                # only to be torn down must not then blame rank 0 for the silence of its own freeze
                last_reply = time.monotonic()

    def _serve(self) -> None:
        """Rank 0: answer heartbeats, watch everyone's progress, leave once every rank said goodbye."""
        w, size = self._wcomm, self.comm.size
        start = time.monotonic()
        heard = {r: (start, {"completed": 0, "current": "", "in_call": 0.0, "idle": 0.0}) for r in range(1, size)}
        gone: set[int] = set()
        status = self.comm._MPI.Status()
        while not (self._stop.is_set() and len(gone) == size - 1):
            while w.iprobe(source=self.comm._MPI.ANY_SOURCE, tag=self.comm._MPI.ANY_TAG, status=status):
                src, tag = status.Get_source(), status.Get_tag()
                msg = w.recv(source=src, tag=tag)
                if tag == _BYE:
                    gone.add(src)
                else:
                    heard[src] = (time.monotonic(), msg)
                    w.send(_state(self.comm.stats), dest=src, tag=_BEAT)
            if not self._stop.is_set():
                self._check(heard, gone)
            time.sleep(self.poll)

    def _check(self, heard: dict[int, tuple[float, dict]], gone: set[int]) -> None:
        """Abort when some rank made no progress for the timeout (rank 0 judges, from the latest beats)."""
        now = time.monotonic()
        states = {0: (0.0, _state(self.comm.stats))}
        for r, (t, st) in heard.items():
            if r not in gone:
                age = now - t
                states[r] = (age, dict(st, idle=st["idle"] + age, in_call=st["in_call"] + age if st["current"] else 0))
        culprits = _culprits(states, self.timeout, self.missed)
        if not culprits:
            return
        # Two missed beats already say the process itself is not running (stopped, swapped out), which the
        # user needs to tell from a rank that is only slow; its idle time can pass the timeout before its silence.
        text = "; ".join(_describe(r, states[r][1], states[r][0] if states[r][0] > self.missed else None)
                         for r in culprits)
        waiting = sorted({st["current"] for r, (_, st) in states.items() if r not in culprits and st["current"]})
        if waiting:
            text += f"; the other ranks wait in {', '.join(repr(c) for c in waiting)}"
        self._abort(text)
