"""A call whose work rank 0 does for the whole MPI job, made by rank 0 alone or by every rank.

Writing a dataset (:mod:`hpcdgnn.data.adapters`' ``from_*``) or a run's export (:meth:`hpcdgnn.api.TrainedRun.
export`) needs no collective, and mpi4py scripts guard such a write with ``if rank == 0``; a script written as
SPMD makes the call on every rank instead. Both must work: rank 0 does the work without waiting for anyone and
tells every other rank, with non-blocking sends, that it started, then that it finished or failed; a rank that
makes the call waits for rank 0's word about the same call (its ``key``) and returns, or raises rank 0's error
as its own. A word is ``(key, None)`` on starting, ``(key, "")`` on success (or a short text of the result:
``rank_0_does``'s ``made``), ``(key, (error type, line))`` on a failure (``(error type, line, True)`` where rank 0
raises that error itself, :func:`said_by_rank_0`), ``(key, ("stopped", signal number))`` where a stop signal ended
rank 0's work (the others stop as it did, :class:`hpcdgnn.preemption.Stopped`): a few hundred bytes, which MPI
sends at once whether or not the other rank ever receives them.

Rank 0 never learns whether the others made the call, so a rank given other arguments than rank 0 cannot be
told at once (rank 0 alone with those arguments, and then all ranks with these, would read the same to it): it
waits ``HPCDGNN_START_TIMEOUT`` for its own, then names what rank 0 did meanwhile.
"""

from __future__ import annotations

import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from hpcdgnn.errors import ConfigError, DataError, HpcdgnnError

__all__ = ["Words", "await_rank_0", "job_world", "on_rank_0", "rank_0_does", "said_by_rank_0", "several_ranks"]

T = TypeVar("T")

#: rank 0's sends, kept until done (their buffers must live that long); never waited for: a rank that did not
#: make the call never receives them
_SENT: list[Any] = []

#: the first item of rank 0's word that a stop signal (Ctrl-C, scancel's SIGTERM, hpcdgnn-mpirun's SIGUSR1) ended
#: its work
_STOP = "stopped"


@dataclass(frozen=True)
class Words:
    """How the lines of a call name it and its work.

    Attributes:
        name: the call (``from_arrays``, ``export``), each line's start.
        doing: rank 0's work as ``rank 0 did not start {doing} {key}`` (``writing``).
        did: the same done, ``it {did} {key}`` (``wrote``).
        same: what every rank must give alike (``output``, ``arguments``).
        why: why rank 0 must make the call (``rank 0 writes the dataset``).
    """

    name: str
    doing: str
    did: str
    same: str
    why: str


def several_ranks() -> bool:
    """Whether this process is one of several MPI ranks: by the launcher's variables, or by the world of an MPI
    already started (a plain ``python`` leaves MPI alone)."""
    from hpcdgnn.comm.world import expected_world_size, world_rank_size

    launched = expected_world_size()
    return (launched is not None and launched[0] > 1) or ("mpi4py.MPI" in sys.modules and world_rank_size()[1] > 1)


def job_world(name: str) -> Any:
    """``MPI.COMM_WORLD`` for a call that :func:`several_ranks` says is one of several ranks, refused where it is
    not the world the launcher started: ``srun`` without a PMI the MPI library speaks starts P 1-rank worlds,
    each its own rank 0, and each would write the same output (``run`` refuses these alike, in
    :func:`hpcdgnn.train.collective.agree_start`).

    Raises:
        ConfigError: ``{name}: srun started P tasks but each is a 1-rank MPI world: …``, on every process alike.
    """
    from hpcdgnn.comm.world import check_world_size, init_mpi

    world = init_mpi().COMM_WORLD
    wrong = check_world_size(world.Get_size())
    if wrong:
        raise ConfigError(f"{name}: {wrong}")
    return world


def rank_0_does(world, tag: int, key: Any, work: Callable[[], T], words: Words,
                made: Callable[[T], str] | None = None) -> T:
    """Rank 0's part: ``work()``, told to every other rank of ``world`` on ``tag`` without waiting for them.

    Args:
        world: ``MPI.COMM_WORLD``.
        tag: the call's MPI tag (below 32767, the least ``MPI_TAG_UB``).
        key: what this call does (its output, its arguments), as the other ranks compare it.
        work: the call's work; an :class:`~hpcdgnn.errors.HpcdgnnError` it raises is every calling rank's.
        words: the call's lines.
        made: what the other ranks are told of the work's result on success (:func:`await_rank_0` hands it to
            their ``done``), a short text: a dataset's fingerprint, which they compare with the one they read.
    """

    def tell(word: Any) -> None:
        _SENT[:] = [r for r in _SENT if not r.Test()]
        _SENT.extend(world.isend((key, word), dest=r, tag=tag) for r in range(1, world.Get_size()))

    tell(None)
    try:
        result = work()
        said = made(result) if made is not None else ""
    except HpcdgnnError as e:
        tell((type(e), str(e), True))  # the same error, which rank 0 raises (and the command line prints) too
        raise
    except KeyboardInterrupt as e:
        # the job's stop, which the others share: told as an error, a rank that heard it before its own signal
        # printed rank 0's stop as an error line and exited 2, where the others exited with the signal's status
        tell((_STOP, getattr(e, "signum", signal.SIGINT)))
        raise
    except BaseException as e:  # a crash: the others must not wait for the work
        tell((DataError, f"{words.name}: rank 0 stopped {words.doing} {key}: {type(e).__name__}: {e}".rstrip(": ")))
        raise
    tell(said)
    return result


def await_rank_0(world, tag: int, key: Any, words: Words, done: Callable[[str], T]) -> T:
    """Another rank's part: rank 0's word about ``key`` on ``tag``, then ``done(made)`` (what this rank returns;
    ``made``: what :func:`rank_0_does` told of its result, ``""`` for nothing), or rank 0's error raised as this
    rank's.

    Waits at most ``HPCDGNN_START_TIMEOUT`` for rank 0 to start, then as long as its work takes; words about
    other keys (earlier calls rank 0 made alone) are skipped, and named if rank 0 never starts this one.

    A stop signal while waiting (mpirun, srun and hpcdgnn-mpirun's relay signal every rank) is held up to
    :data:`~hpcdgnn.comm.world.STOP_GRACE_S` for rank 0's word: leaving at once would have the launcher end rank 0
    while it removes what it was writing. On the command line (``prepare`` and ``generate``,
    :func:`~hpcdgnn.data.writer.stops_after_written`) the word decides this rank's outcome as it decides the job's
    and the signal is dropped: rank 0 done (its signal came once its dataset was in place: it ends as done) is this
    rank done, where its own signal's status would have been the job's and a job script would requeue a prepare that
    then refuses the existing output; rank 0 stopped is this rank stopped by rank 0's signal. From the Python API
    (``from_*``, ``export``) the signal then goes to this rank's handler, as it goes to rank 0's: dropped, a script
    whose handler sets a flag would stop on rank 0 alone and hang at its next collective. Without a word by then
    (rank 0 not signalled, or stuck), this rank's own signal goes to its handler (where that lets it go on, it
    waits on); a rank 0 that died ends the job by the launcher's abort.

    Raises:
        HpcdgnnError: rank 0's error; :class:`~hpcdgnn.errors.DataError` where rank 0 did not start within the
            timeout.
        hpcdgnn.preemption.Stopped: rank 0's signal, where one stopped its work (this rank's status then is
            rank 0's; a command line leaves the line to rank 0).
    """
    from hpcdgnn.comm.world import STOP_GRACE_S, start_timeout
    from hpcdgnn.data.writer import stops_end_as_done, stops_held

    timeout = start_timeout()
    wait = _Wait(timeout, time.monotonic() + timeout)
    decides = stops_end_as_done()  # rank 0's outcome is this rank's, not its own signal
    with stops_held() as came:
        try:
            word = _word_of_rank_0(world, tag, key, words, wait, lambda: bool(came), STOP_GRACE_S)
        except BaseException:
            if decides:
                came.clear()
            raise
        if word is not _UNHEARD and decides:
            came.clear()
    if word is _UNHEARD:  # this rank's signal, delivered on leaving the block, did not stop it
        word = _word_of_rank_0(world, tag, key, words, wait, lambda: False, STOP_GRACE_S)
    return done(word)


@dataclass
class _Wait:
    """What :func:`await_rank_0` has heard so far: the time it gives rank 0 to start (``HPCDGNN_START_TIMEOUT``) and
    its deadline, whether rank 0 started, the keys of rank 0's other calls meanwhile."""

    timeout_s: float
    deadline: float
    started: bool = False
    others: list[Any] = field(default_factory=list)


#: :func:`_word_of_rank_0`'s answer where this rank was stopped and rank 0 said nothing within the grace
_UNHEARD = object()


def _word_of_rank_0(world, tag: int, key: Any, words: Words, wait: _Wait, stopped: Callable[[], bool],
                    grace_s: float) -> Any:
    """Rank 0's word about ``key`` (:func:`await_rank_0`), or :data:`_UNHEARD` where none came within ``grace_s`` of
    ``stopped()`` turning true.

    Args:
        world: ``MPI.COMM_WORLD``.
        tag: the call's MPI tag.
        key: the call's key.
        words: the call's lines.
        wait: what was heard so far, updated.
        stopped: whether this rank got a stop signal.
        grace_s: how long a stopped rank waits for the word.

    Raises:
        HpcdgnnError: rank 0's error, or rank 0 did not start (:func:`await_rank_0`).
        hpcdgnn.preemption.Stopped: rank 0's stop.
    """
    give_up = None
    while True:
        while not world.Iprobe(source=0, tag=tag):
            now = time.monotonic()
            if not wait.started and now > wait.deadline:
                others = wait.others
                did = (f" (it {words.did} {', '.join(map(str, others[-2:]))}: if in this call, every rank must "
                       f"give the same {words.same})" if others else "")
                raise DataError(f"{words.name}: rank 0 did not start {words.doing} {key} within "
                                f"{wait.timeout_s:g} s (HPCDGNN_START_TIMEOUT){did}: under mpirun {words.why}, "
                                "so it must make the call too")
            if give_up is None and stopped():
                give_up = now + grace_s
            if give_up is not None and now > give_up:
                return _UNHEARD
            time.sleep(0.01)
        about, word = world.recv(source=0, tag=tag)
        if about != key:  # an earlier call of rank 0 alone, about another key
            if word is None and about not in wait.others:
                wait.others.append(about)
            continue
        if word is None:
            wait.started = True
            continue
        if isinstance(word, tuple) and word[0] == _STOP:
            from hpcdgnn.preemption import Stopped

            raise Stopped(word[1])
        if isinstance(word, tuple):
            kind, line, *same = word
            err = kind(line)
            err.said_by_rank_0 = bool(same)  # type: ignore[attr-defined]
            raise err
        return word


def on_rank_0(tag: int, key: Any, work: Callable[[], T], words: Words, done: Callable[[str], T],
              made: Callable[[T], str] | None = None) -> T:
    """``work()`` once for the job: in a process alone, itself; under mpirun rank 0 does it
    (:func:`rank_0_does`) and every other rank returns ``done(made)`` on its word (:func:`await_rank_0`).

    Args:
        tag: the MPI tag of rank 0's words.
        key: what this call does, as the other ranks compare it.
        words: the call's lines (``words.name`` names the job's world, :func:`job_world`).
        work: the call's work.
        done: what another rank returns once rank 0 is done, given ``made``'s text (``""`` without it).
        made: rank 0's short text of the work's result for the others (:func:`rank_0_does`): the adapters'
            dataset fingerprint.
    """
    if not several_ranks():
        return work()
    world = job_world(words.name)
    if world.Get_rank() == 0:
        return rank_0_does(world, tag, key, work, words, made)
    return await_rank_0(world, tag, key, words, done)


def said_by_rank_0(err: BaseException) -> bool:
    """Whether ``err`` is rank 0's own error as :func:`await_rank_0` raises it on another rank: rank 0 raises it
    too, so a command line prints it there alone (one line for the job, as ``run``'s collective errors), not once
    per rank. Not where rank 0 crashed or was stopped (its traceback or stop line does not say what the call was)."""
    return getattr(err, "said_by_rank_0", False) is True
