"""``comm.progress``: a thread per rank moves the non-blocking exchanges (issue 13 item 6).

Who progresses an exchange must change nothing but the timing: the same losses, gradient norms and
bytes bit for bit as the training thread's own calls, at P = 2 and 3, for the chunked redistributions
with bucketed gradients (snapshot), for the halo's sends and the task's fetches (vertex), and for the time
halo, whose sending-only rank defers its completion (TM-GCN, snapshot). ``auto``
starts the thread only where each rank has a core to spare; the thread's MPI errors reach the training
thread instead of being lost.
"""

from __future__ import annotations

import json
import os
import threading
import time
from types import SimpleNamespace

import numpy as np
import pytest

from hpcdgnn.comm.communicator import CommStats, Communicator, Pending
from hpcdgnn.comm.progress import ProgressThread, spare_core
from hpcdgnn.config.load import load_job
from hpcdgnn.errors import ConfigError
from tests.conftest import REPO, assert_same_run, read_metrics, write_job
from tests.train.test_exactness import _losses


def _threads_on(run_dir) -> int:
    return json.loads((run_dir / "summary.json").read_text())["environment"]["progress_thread_ranks"]


@pytest.mark.parametrize(("model", "strategy"), [
    ("cdgcn", {"name": "snapshot", "overlap_chunks": 3}),
    ("tmgcn", {"name": "vertex", "stale": {"mode": "static", "theta": 0.5}}),
    ("tmgcn", {"name": "snapshot"}),  # the time halo: a rank that only sends defers its completion
])
def test_progress_thread_changes_nothing_but_who_moves_the_bytes(launcher, small_dataset, tmp_path, model, strategy):
    """``thread`` against ``calls`` at P = 2 and 3: the same losses, norms and bytes, every rank with a thread."""
    job = write_job(tmp_path / "job.yaml", small_dataset, model={"name": model},
                    train={"dtype": "float64", "epochs": 3}, strategy=strategy, comm={"grad_buckets": 3})
    for P in (2, 3):
        ref, recs_ref = _losses(launcher, P, job, tmp_path / f"calls{P}", "comm.progress=calls")
        got, recs = _losses(launcher, P, job, tmp_path / f"thread{P}", "comm.progress=thread")
        assert_same_run(got, ref)
        assert [r["bytes_by_tag"] for r in recs] == [r["bytes_by_tag"] for r in recs_ref]
        assert _threads_on(tmp_path / f"thread{P}") == P and _threads_on(tmp_path / f"calls{P}") == 0
        # the thread's exchanges are timed like the calls' ones: exposed within the time under way
        for r in recs:
            assert all(v["exposed"] <= v["seconds"] + 1e-6 for v in r["comm_by_tag"].values()), r["comm_by_tag"]


def test_auto_starts_threads_only_with_a_spare_core_per_rank(launcher, small_dataset, tmp_path):
    """The test launcher binds no rank, so each rank may run on this process's CPUs: two ranks of one
    thread each get a progress thread where those are at least 2 × (1 + 1)."""
    job = write_job(tmp_path / "job.yaml", small_dataset, train={"epochs": 1, "threads": 1},
                    strategy={"name": "snapshot", "overlap_chunks": 2}, comm={"progress": "auto"})
    proc = launcher.run(2, ["-m", "hpcdgnn", "run", str(job), "--output", str(tmp_path / "auto")])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    cpus = len(os.sched_getaffinity(0))
    assert _threads_on(tmp_path / "auto") == (2 if cpus >= 4 else 0)
    assert ("progress thread on 2/2 ranks" in proc.stdout + proc.stderr) == (cpus >= 4)


@pytest.mark.parametrize(("model", "strategy"), [
    ("cdgcn", {"name": "snapshot", "overlap_chunks": 3}),  # the chunks' posting schedule depends on the threads
])
def test_a_thread_on_some_ranks_only_changes_nothing(launcher, small_dataset, tmp_path, model, strategy):
    """``auto`` decides per node, so a job over nodes of two shapes has a thread on some ranks only
    (``tests/mpi/node_shape.py`` gives rank 1 of 3 a spare core): every rank must still post the same
    collectives in the same order (the chunks all at once, not one ahead), and give the same losses, norms
    and bytes as ``calls``."""
    job = write_job(tmp_path / "job.yaml", small_dataset, model={"name": model},
                    train={"dtype": "float64", "epochs": 3}, strategy=strategy,
                    comm={"grad_buckets": 3, "progress": "auto"})
    ref, recs_ref = _losses(launcher, 3, job, tmp_path / "calls", "comm.progress=calls")
    out = tmp_path / "mixed"
    proc = launcher.run(3, [str(REPO / "tests" / "mpi" / "node_shape.py"), "--spare-core-ranks", "1", "--", "run",
                            str(job),
                            "--output", str(out)])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "progress thread on 1/3 ranks (1 on a core of their own)" in proc.stdout + proc.stderr
    assert _threads_on(out) == 1
    recs = read_metrics(out)
    assert_same_run(np.array([[r["loss"], r["grad_norm"]] for r in recs]), ref)
    assert [r["bytes_by_tag"] for r in recs] == [r["bytes_by_tag"] for r in recs_ref]


@pytest.mark.parametrize(("model", "strategy"), [
    ("cdgcn", {"name": "snapshot", "overlap_chunks": 3}),
    ("tmgcn", {"name": "vertex", "stale": {"mode": "static", "theta": 0.5}}),  # halo sends open for long
])
def test_dedicated_threads_change_nothing(launcher, small_dataset, tmp_path, model, strategy):
    """Threads with a core of their own (``tests/mpi/node_shape.py`` gives every rank one) wait inside
    ``MPI_Waitsome`` instead of polling: at P = 2 and 3 the same losses, norms and bytes as ``calls``."""
    job = write_job(tmp_path / "job.yaml", small_dataset, model={"name": model},
                    train={"dtype": "float64", "epochs": 3}, strategy=strategy,
                    comm={"grad_buckets": 3, "progress": "auto"})
    for P in (2, 3):
        ref, recs_ref = _losses(launcher, P, job, tmp_path / f"calls{P}", "comm.progress=calls")
        out = tmp_path / f"dedicated{P}"
        proc = launcher.run(P, [str(REPO / "tests" / "mpi" / "node_shape.py"), "--spare-core-ranks",
                                ",".join(map(str, range(P))), "--", "run", str(job), "--output", str(out)])
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert _threads_on(out) == P
        assert json.loads((out / "summary.json").read_text())["environment"]["progress_thread_dedicated_ranks"] == P
        assert f"progress thread on {P}/{P} ranks ({P} on a core of their own)" in proc.stdout + proc.stderr
        recs = read_metrics(out)
        assert_same_run(np.array([[r["loss"], r["grad_norm"]] for r in recs]), ref)
        assert [r["bytes_by_tag"] for r in recs] == [r["bytes_by_tag"] for r in recs_ref]


def test_a_library_caller_s_failed_run_leaves_no_thread_inside_mpi(launcher, small_dataset, tmp_path):
    """run_training stops the progress thread on every way out, an exception included (tests/mpi/
    library_error_check.py: rank 0 raises in epoch 1 and catches it as a library caller; then aborts)."""
    job = write_job(tmp_path / "job.yaml", small_dataset, train={"epochs": 2},
                    strategy={"name": "snapshot", "overlap_chunks": 2}, comm={"progress": "thread"},
                    debug={"fail_rank": 0, "fail_epoch": 1})
    proc = launcher.run(2, [str(REPO / "tests" / "mpi" / "library_error_check.py"), str(job), str(tmp_path / "run")],
                        timeout=120)
    assert proc.returncode != 0  # the abort ends the job
    out = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert len(out) == 1 and out[0]["rank"] == 0 and "fault injected on rank 0" in out[0]["error"], proc.stdout
    assert out[0]["alive"] == [] and not out[0]["attached"]


def _stub_comm(affinities: list[list[int]]):
    node = SimpleNamespace(size=len(affinities), allgather_obj=lambda mine, tag: affinities)
    return SimpleNamespace(world=SimpleNamespace(node=lambda: node))


def test_spare_core_counts_the_node_and_the_rank(monkeypatch):
    """Enough CPUs on the node for every rank's threads plus one, and more than its threads for this rank."""
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3})
    assert spare_core(_stub_comm([[0, 1, 2, 3], [0, 1, 2, 3]]), threads=1)  # 4 CPUs for 2 × (1 + 1)
    assert not spare_core(_stub_comm([[0, 1, 2, 3], [0, 1, 2, 3]]), threads=2)  # 2 × 3 > 4
    assert not spare_core(_stub_comm([[0, 1, 2, 3]] * 3), threads=1)  # 3 ranks × 2 > 4
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0})
    # bound to one core each (mpirun's default for two ranks): the thread would share the computing core
    assert not spare_core(_stub_comm([[0], [8]] + [[c] for c in range(1, 7)]), threads=1)


class _Request:
    """Completes after ``polls`` tests, or raises on the first (``fail``); ``Wait`` completes it at once and
    records the calling thread."""

    def __init__(self, polls: int, fail: bool = False) -> None:
        self.polls, self.fail = polls, fail
        self.waited_by: threading.Thread | None = None
        #: Testsome blocks on ``gate`` (set ``entered`` first) while it is not None: a round held open
        self.gate: threading.Event | None = None
        self.entered = threading.Event()

    def Wait(self):
        self.waited_by, self.polls = threading.current_thread(), 0


class _Bell(_Request):
    """The receive of a message to oneself: complete once the message is sent (or was sent before)."""

    def __init__(self, channel) -> None:
        super().__init__(10**9)
        self.channel = channel

    def Wait(self):
        while not self.channel.take(self):
            time.sleep(1e-3)


class _SelfChannel:
    """A duplicate of ``MPI_COMM_SELF``: messages are counted, each completes one posted receive."""

    def __init__(self) -> None:
        self.sent, self.received, self.freed, self.heard_at = 0, 0, False, 0.0

    def Irecv(self, buf, source, tag):
        return _Bell(self)

    def Send(self, buf, dest, tag):
        self.sent += 1

    def take(self, bell) -> bool:
        if bell.polls > 0 and self.received < self.sent:
            self.received += 1
            self.heard_at = time.perf_counter()
            bell.polls = 0
        return bell.polls <= 0

    def Free(self):
        self.freed = True


class _MPI:
    THREAD_MULTIPLE = 3
    waits = 0  # Waitsome calls that returned
    channels: list[_SelfChannel] = []

    @staticmethod
    def Query_thread():
        return 3

    class COMM_SELF:
        @staticmethod
        def Dup():
            _MPI.channels.append(_SelfChannel())
            return _MPI.channels[-1]

    class Request:
        @staticmethod
        def Testsome(requests):
            for r in requests:
                if getattr(r, "gate", None) is not None:
                    r.entered.set()
                    assert r.gate.wait(5.0)
            if any(r.fail for r in requests):
                raise RuntimeError("MPI_ERR_TRUNCATE: message truncated")
            for r in requests:
                if isinstance(r, _Bell):
                    r.channel.take(r)
                else:
                    r.polls -= 1
            return [i for i, r in enumerate(requests) if r.polls <= 0]

        @staticmethod
        def Waitsome(requests):
            """Blocks until one completes (each round a test of every request, as the library's progress)."""
            while not (done := _MPI.Request.Testsome(requests)):
                time.sleep(1e-4)
            _MPI.waits += 1
            return done


def test_thread_completes_what_it_adopts_and_ends():
    """Exchanges complete in any order after their own-part copies ran; the thread ends when told."""
    t = ProgressThread.start(_MPI)
    ps = [Pending(_Request(polls), "x", None, ()) for polls in (1, 30, 5)]
    copied: list[int] = []
    t0 = time.perf_counter()
    for i, p in enumerate(ps):
        t.adopt(p, (lambda i=i: copied.append(i)) if i != 1 else None)
    for p in ps:
        assert p.completed.wait(5.0)
        assert t0 <= p.completed_at <= time.perf_counter()
    assert copied == [0, 2]
    assert ps[0].completed_at <= ps[2].completed_at <= ps[1].completed_at  # 1, 5 and 30 tests
    t.stop()
    assert not t._thread.is_alive()


def test_a_dedicated_thread_waits_inside_mpi_and_is_woken_for_new_exchanges():
    """With a core of its own the thread blocks in Waitsome on what it holds; an exchange handed over
    meanwhile, or a stop, ends that wait through a message to itself (else the newcomer would wait for the
    slowest exchange held). Nothing of the channel outlives the thread."""
    t = ProgressThread.start(_MPI, dedicated=True)
    channel = _MPI.channels[-1]
    slow = Pending(_Request(10**9), "slow", None, ())
    t.adopt(slow)
    _until(lambda: t._in_wait)  # the thread is waiting on the slow one
    waits = _MPI.waits
    copied: list[int] = []
    fast = Pending(_Request(1), "fast", None, ())
    t.adopt(fast, lambda: copied.append(1))
    assert fast.completed.wait(5.0) and copied == [1]  # woken, its own part copied, then completed
    assert not slow.completed.is_set() and channel.sent >= 1 and _MPI.waits > waits
    slow.request.polls = 0  # the slow one completes
    assert slow.completed.wait(5.0)
    t.stop()
    assert not t._thread.is_alive()
    assert channel.freed and channel.received == channel.sent  # every bell message received
    # a stop while the thread waits inside MPI: the bell ends the wait at once (the thread then polls what it
    # holds until it completes, 0.2 s later), not the exchange's completion
    t = ProgressThread.start(_MPI, dedicated=True)
    channel = _MPI.channels[-1]
    held = Pending(_Request(10**9), "held", None, ())
    t.adopt(held)
    _until(lambda: t._in_wait)
    threading.Timer(0.2, lambda: setattr(held.request, "polls", 0)).start()
    stopped = time.perf_counter()
    t.stop()  # it finishes what it holds (polling now), then ends
    assert held.completed.is_set() and not t._thread.is_alive() and channel.freed
    assert channel.sent == channel.received == 1 and channel.heard_at < stopped + 0.1


def _waiting(t: ProgressThread, pending: Pending) -> threading.Thread:
    """The training thread's wait for ``pending`` (:meth:`ProgressThread.await_exchange`), run in a thread of
    its own: a regression hangs that thread, not the suite (join it with a timeout)."""
    w = threading.Thread(target=t.await_exchange, args=(pending,), daemon=True)
    w.start()
    return w


def test_a_polling_thread_hands_back_the_exchange_the_training_thread_waits_for():
    """Polling, the thread moves bytes only between its sleeps: the waiting training thread takes the exchange
    back and waits inside MPI itself, and the thread tests it no more (two threads must not test one request)."""
    t = ProgressThread.start(_MPI)
    held = Pending(_Request(10**9), "held", None, ())
    t.adopt(held)
    _until(lambda: held.request.polls < 10**9 - 2)  # the thread is polling it
    w = _waiting(t, held)
    w.join(5.0)
    assert not w.is_alive() and held.completed.is_set() and held.request.waited_by is w
    polls = held.request.polls
    time.sleep(0.05)
    assert held.request.polls == polls  # handed back: no longer among the thread's tests
    # one the thread completed meanwhile needs no hand-back
    quick = Pending(_Request(1), "quick", None, ())
    t.adopt(quick)
    assert quick.completed.wait(5.0)
    t.await_exchange(quick)
    assert quick.request.waited_by is None
    t.stop()
    assert not t._thread.is_alive() and _MPI.channels[-1].freed


def test_an_exchange_adopted_during_a_round_is_handed_back_only_after_its_own_part_is_copied():
    """A claim on an exchange adopted while the thread's round is under way waits for the next round: there
    its own part is copied, and only then does the training thread wait on it; the thread never tests it."""
    t = ProgressThread.start(_MPI)
    other = Pending(_Request(10**9), "other", None, ())
    other.request.gate = threading.Event()
    t.adopt(other)
    assert other.request.entered.wait(5.0)  # the thread is inside a round, holding it open
    order: list[str] = []
    fresh = Pending(_Request(10**9), "fresh", None, ())
    fresh.request.Wait = lambda: order.append("wait")  # records, and leaves it to the claimant to complete
    t.adopt(fresh, lambda: order.append("copy"))
    w = _waiting(t, fresh)
    _until(lambda: t._claims)  # claimed while the round is open
    other.request.gate.set()
    w.join(5.0)
    assert not w.is_alive() and order == ["copy", "wait"] and fresh.completed.is_set()
    assert fresh.request.polls >= 10**9 - 1  # tested at most in the round that took it up, never after
    other.request.gate, other.request.polls = None, 0
    assert other.completed.wait(5.0)
    t.stop()
    assert not t._thread.is_alive()


def test_an_error_in_the_thread_releases_a_claim():
    """The thread's error during a round with a claim open: the claimant is released (its exchange completed,
    as every other the thread held) and the error reaches the training thread."""
    t = ProgressThread.start(_MPI)
    held = Pending(_Request(10**9), "held", None, ())
    held.request.gate = threading.Event()
    t.adopt(held)
    assert held.request.entered.wait(5.0)
    w = _waiting(t, held)
    _until(lambda: t._claims)
    held.request.fail = True  # this round raises
    held.request.gate.set()
    w.join(5.0)
    assert not w.is_alive() and held.completed.is_set() and held.request.waited_by is None
    with pytest.raises(RuntimeError, match="progress thread failed"):
        t.check()
    t.stop()
    assert not t._thread.is_alive()


def _until(condition, timeout: float = 5.0) -> None:
    deadline = time.perf_counter() + timeout
    while not condition():
        assert time.perf_counter() < deadline, "condition not reached"
        time.sleep(1e-3)


def test_an_error_in_the_thread_reaches_the_training_thread():
    """An MPI error in the thread releases every waiter and is raised by the training thread."""
    t = ProgressThread.start(_MPI)
    waiting = Pending(_Request(10**9), "x", None, ())
    t.adopt(waiting)
    t.adopt(Pending(_Request(1, fail=True), "y", None, ()))
    assert waiting.completed.wait(5.0)  # released, not left waiting for an exchange that cannot finish
    with pytest.raises(RuntimeError, match="progress thread failed.*MPI_ERR_TRUNCATE"):
        t.check()
    with pytest.raises(RuntimeError, match="progress thread failed"):
        t.adopt(Pending(_Request(1), "z", None, ()))
    t.stop()
    assert not t._thread.is_alive()
    # a failing own-part copy likewise, with the exchange it belongs to released
    t = ProgressThread.start(_MPI)
    p = Pending(_Request(10**9), "x", None, ())
    t.adopt(p, lambda: (_ for _ in ()).throw(ValueError("box out of range")))
    assert p.completed.wait(5.0)
    with pytest.raises(RuntimeError, match="box out of range"):
        t.check()
    t.stop()


def test_progress_mode_is_checked(small_dataset, tmp_path):
    """An unknown ``comm.progress`` is a config error naming the key."""
    job = write_job(tmp_path / "job.yaml", small_dataset, comm={"progress": "background"})
    with pytest.raises(ConfigError, match="comm.progress"):
        load_job(job)


@pytest.mark.parametrize(("P", "dedicated"), [(2, False), (3, False), (2, True), (3, True)])
def test_the_thread_moves_exchanges_of_splits_made_before_it(launcher, P, dedicated):
    """tests/mpi/progress_check.py: the gradient buckets post on a split made at setup, before the trainer
    starts the thread; their all-reduces must go to the thread too, and the own box arrive with the rest.
    An exchange posted while the thread waits on another that cannot complete yet is taken up at once
    (polling, or woken from its Waitsome when dedicated), not after the other completes (2 s later)."""
    proc = launcher.run(P, [str(REPO / "tests" / "mpi" / "progress_check.py"), *(["dedicated"] * dedicated)],
                        timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = {r["rank"]: r for r in (json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{"))}
    assert sorted(out) == list(range(P))
    for r in out.values():
        assert r["threads"] == P and r["adopted"] == [True, True] and r["boxes_ok"]
        assert r["sum"] == [P * (P + 1) / 2] * 4
        assert r["everywhere"] == [True, True, False]  # a thread on every rank, until it stopped
        assert r["dedicated"] == dedicated
        assert r["ab"] == [P] * 4
    assert out[0]["b_wait_s"] < 1.0, out[0]  # HOLD_S = 2: B was not held up by A


def test_out_of_order_completions_time_the_whole_interval():
    """The thread's completion times reach the stats in wait order, not completion order: the tag's time
    under way must still end at the latest completion (it used to end at the last one reported)."""
    st = CommStats()
    t0 = time.perf_counter()
    st.posted("x", 8, 8, t0)
    st.posted("x", 8, 8, t0)
    st.finished("x", t0 + 3.0)  # the first waited for completed last
    st.finished("x", t0 + 2.0)
    assert st.tags["x"].seconds == pytest.approx(3.0)
    st.posted("x", 8, 8, t0 + 10.0)  # a new interval starts afresh
    st.finished("x", t0 + 10.5)
    assert st.tags["x"].seconds == pytest.approx(3.5)


def test_the_training_thread_sees_the_error_in_a_test_or_a_wait():
    """An exchange the thread gave up on (its flag set by the error) is neither counted complete by
    ``test`` nor returned by ``wait``: both raise the thread's error."""
    comm = Communicator()  # one process: the thread is attached by hand
    comm.progress._thread = ProgressThread.start(_MPI)
    p = comm.exchange._adopted(Pending(_Request(1, fail=True), "x", None, ()))
    assert p.completed.wait(5.0)
    with pytest.raises(RuntimeError, match="MPI_ERR_TRUNCATE"):
        comm.exchange.test([p])
    assert not p.done
    with pytest.raises(RuntimeError, match="MPI_ERR_TRUNCATE"):
        comm.exchange.wait(p)
    comm.progress.stop()


def test_a_blocking_call_inside_an_open_interval_extends_it():
    """A blocking call under a tag with an exchange open lies inside that tag's interval, which therefore lasts
    at least until the call ended, even when the exchange is reported complete at an earlier time."""
    st = CommStats()
    t0 = time.perf_counter()
    st.posted("x", 8, 8, t0)
    time.sleep(0.02)
    blocking = time.perf_counter() - t0
    st.add("x", 4, 4, blocking)
    st.finished("x", t0 + 0.001)  # the exchange had completed long before the blocking call ended
    s = st.tags["x"]
    assert s.seconds >= blocking and s.exposed <= s.seconds + 1e-3


@pytest.mark.parametrize("everywhere", [True, False])
def test_inbound_chunks_go_one_ahead_only_where_every_rank_has_a_thread(everywhere):
    """The posting schedule of a pipeline's inbound chunks (``hpcdgnn.comm.autograd._Inbound``): with a
    progress thread on every rank, chunk k + 1 is posted right after the wait for chunk k (so the first chunk
    does not share the bandwidth with the rest); else all at once (bytes move only in MPI calls). Either way
    the order of posts is a function of the schedule alone, the same on every rank."""
    from hpcdgnn.comm.autograd import AHEAD, _Inbound

    events: list[str] = []

    class _Exchange:
        def wait(self, p):
            events.append(f"wait {p}")
            return p

    class _Comm:
        progress = SimpleNamespace(everywhere=everywhere)
        exchange = _Exchange()

    inbound = _Inbound(_Comm(), lambda k: events.append(f"post {k}") or k, 4)
    for k in range(4):
        assert inbound.take(k) == k
        assert inbound.after(k) == [q for q in range(k + 1, 4) if f"post {q}" in events]
    if everywhere:
        assert AHEAD == 1
        assert events == ["post 0", "wait 0", "post 1", "wait 1", "post 2", "wait 2", "post 3", "wait 3"]
    else:
        assert events == ["post 0", "post 1", "post 2", "post 3", "wait 0", "wait 1", "wait 2", "wait 3"]
