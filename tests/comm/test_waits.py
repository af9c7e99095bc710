"""Waiting for the last rank (``comm_late``, :mod:`hpcdgnn.metrics.waits`; issue 13 item 6).

The part of a rank's exposed communication time spent before the last rank reached the exchange must
land on the ranks that waited, not on the straggler: for a blocking all-to-all, for a non-blocking one
waited for at once, and not for one whose wait began after everybody had posted, at P = 2 and 3. Records
the ranks cannot match (another tag, a missing exchange) give no figure rather than a wrong one, and so do
point-to-point tags. In a job, a
straggler injected with ``debug.delay_rank`` shows up as the others' ``comm_late``.
"""

from __future__ import annotations

import numpy as np
import pytest

from hpcdgnn.comm.exchange_log import ExchangeLog
from hpcdgnn.config.load import load_job
from hpcdgnn.errors import ConfigError
from hpcdgnn.metrics.waits import late_waits, tag_id
from tests.conftest import REPO, json_records, write_job
from tests.train.test_exactness import _losses

DELAY = 0.5


class _TwoRanks:
    """The all-reduces (max) of two ranks whose other one recorded ``peer`` on this rank's clock: the
    arithmetic of :func:`late_waits` alone (the MPI test below runs it between real ranks)."""

    size = 2

    def __init__(self, mine: list[tuple], peer: list[tuple]) -> None:
        self.mine, self.peer = mine, peer

    def allreduce_array(self, values, op: str, tag: str) -> np.ndarray:
        assert op == "max" and tag == "metrics"
        v, n = np.asarray(values, dtype=np.float64), len(self.peer)
        if len(v) == 2:
            return np.maximum(v, [n, -n])
        zero = self.mine[0][1] - v[0]  # the clock's zero the function took
        ids = np.array([tag_id(t) for t, _, _ in self.peer])
        return np.maximum(v, np.concatenate([[a - zero for _, a, _ in self.peer], ids, -ids]))


def test_late_is_the_blocked_time_before_the_last_arrival():
    """Blocked 10.0-11.0 in a blocking call the peer entered at 10.4: 0.4 s late, the other 0.6 s is the
    transfer; waits of a non-blocking exchange (10.1-10.2, 10.3-10.6) whose last post was at 10.5: 0.1 +
    0.2 s; arriving last: nothing."""
    mine = [("a", 10.0, [(10.0, 11.0)]), ("b", 10.05, [(10.1, 10.2), (10.3, 10.6)]), ("c", 12.0, [(12.0, 12.5)])]
    peer = [("a", 10.4, [(10.4, 11.0)]), ("b", 10.5, []), ("c", 11.0, [(11.0, 12.5)])]
    log = ExchangeLog.of(mine)
    assert list(log.records()) == mine
    late = late_waits(_TwoRanks(mine, peer), log)
    assert late == pytest.approx({"a": 0.4, "b": 0.3, "c": 0.0}, abs=1e-9)
    assert late_waits(_TwoRanks(mine, peer[:2]), log) is None  # the ranks recorded different exchanges
    assert late_waits(_TwoRanks(mine, [("x", *peer[0][1:]), *peer[1:]]), log) is None


@pytest.mark.parametrize("P", [2, 3])
def test_late_wait_is_the_waiting_ranks_not_the_stragglers(launcher, P):
    """tests/mpi/waits_check.py: one straggler per exchange, DELAY seconds late."""
    proc = launcher.run(P, [str(REPO / "tests" / "mpi" / "waits_check.py"), str(DELAY)], timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = {r["rank"]: r for r in json_records(proc.stdout)}
    assert sorted(out) == list(range(P))
    waited, spared = 0.8 * DELAY, 0.3 * DELAY  # sleeps on a loaded machine: a margin either way
    for me, r in out.items():
        late, exposed = r["late"], r["exposed"]
        assert set(late) == {"block", "posted", "hidden"}
        assert all(0 <= late[k] <= exposed[k] + 1e-6 for k in late), r
        # blocking, rank P-1 late: everybody else waited for it
        assert (late["block"] <= spared) if me == P - 1 else (late["block"] >= waited), r
        # posted late by rank 0, waited for at once by the others
        assert (late["posted"] <= spared) if me == 0 else (late["posted"] >= waited), r
        # posted late by rank 1; rank 0 computed past that before it waited
        assert (late["hidden"] <= spared) if me in (0, 1) else (late["hidden"] >= waited), r
        assert r["renamed"] is None and r["missing"] is None, r


@pytest.mark.parametrize(("model", "sections"), [
    ("tmgcn", {"strategy": {"name": "snapshot"}}),
    ("cdgcn", {"strategy": {"name": "snapshot", "overlap_chunks": 2},
               "comm": {"grad_buckets": 3}}),
])
def test_a_straggler_is_the_others_late_wait(launcher, small_dataset, tmp_path, model, sections):
    """P = 3, rank 1 sleeps 0.8 s after each forward pass: ranks 0 and 2 spend it waiting (``comm_late``),
    rank 1 does not; the per-tag figures add up to the total, and no rank's late time exceeds its
    exposed time. The delay is long against what 3 ranks on 2 shared cores lose to each other (a rank
    descheduled for ~0.1 s makes the others late by as much), so the bounds hold on a loaded machine."""
    delay = 0.8
    job = write_job(tmp_path / "job.yaml", small_dataset, model={"name": model}, train={"epochs": 2},
                    debug={"delay_rank": 1, "delay_seconds": delay}, **sections)
    _, recs = _losses(launcher, 3, job, tmp_path / "run")
    for r in recs:
        late, exposed = r["per_rank"]["comm_late"], r["per_rank"]["comm_exposed"]
        assert late[0] >= 0.8 * delay and late[2] >= 0.8 * delay and late[1] <= 0.3 * delay, late
        assert all(0 <= a <= b + 1e-6 for a, b in zip(late, exposed, strict=True))
        by_tag = r["comm_by_tag"]
        assert sum(v["late"] for v in by_tag.values()) == pytest.approx(r["time"]["comm_late"]["mean"], rel=1e-9)
        assert all(v["late"] <= v["late_max"] + 1e-12 and v["late"] <= v["exposed"] + 1e-6 for v in by_tag.values())


def test_point_to_point_tags_get_no_late_figure(launcher, small_dataset, tmp_path):
    """pss at P = 3: its pipeline's point-to-point waits have no single "last rank", so their tag gets no
    late figure (rather than a 0 that would pass them off as transfer); the gradient all-reduce keeps its
    own, and ``time.comm_late`` sums the tags that have one."""
    job = write_job(tmp_path / "job.yaml", small_dataset, model={"name": "evolvegcn_o"}, train={"epochs": 2},
                    strategy={"name": "pss"})
    _, recs = _losses(launcher, 3, job, tmp_path / "run")
    for r in recs:
        by_tag = r["comm_by_tag"]
        pipeline = [k for k in by_tag if k.startswith("pipeline")]
        assert pipeline and all("late" not in by_tag[k] for k in pipeline), by_tag
        assert "late" in by_tag["grad_allreduce"]
        known = sum(v["late"] for v in by_tag.values() if "late" in v)
        assert known == pytest.approx(r["time"]["comm_late"]["mean"], rel=1e-9, abs=1e-12)


def test_one_rank_waits_for_nobody(launcher, small_dataset, tmp_path):
    """P = 1: nothing to wait for, and the record says so (zeros, not a missing key)."""
    job = write_job(tmp_path / "job.yaml", small_dataset, train={"epochs": 1})
    _, recs = _losses(launcher, None, job, tmp_path / "run")
    assert recs[0]["time"]["comm_late"] == {"min": 0.0, "mean": 0.0, "max": 0.0}
    # nor any communication: its collectives' bookkeeping is compute (it read 6.7e-05 s of comm)
    assert recs[0]["time"]["comm"]["max"] == 0.0 and recs[0]["time"]["comm_exposed"]["max"] == 0.0
    assert all(v["seconds"] == 0.0 for v in recs[0]["comm_by_tag"].values()), recs[0]["comm_by_tag"]


@pytest.mark.parametrize(("key", "value", "says"), [
    ("delay_rank", -2, "delay_rank: must be >= -1"),
    ("delay_seconds", -0.5, "delay_seconds: must be >= 0"),
])
def test_straggler_settings_are_checked(small_dataset, tmp_path, key, value, says):
    """A straggler's rank and delay are checked when the job is read."""
    job = write_job(tmp_path / "job.yaml", small_dataset, debug={key: value})
    with pytest.raises(ConfigError, match=says):
        load_job(job)


def test_exchanges_are_kept_only_when_asked_and_compactly():
    """A communicator used without an epoch recorder (library callers, tools) keeps no records, so they
    cannot grow without end; kept records cost tens of bytes each, not a tuple and a list (about 264 B),
    and a later epoch's log takes no wait that belongs to an exchange posted in an earlier one."""
    from hpcdgnn.comm.communicator import CommStats

    stats = CommStats()
    stats.add("a", 8, 8, 0.1, every_rank=True)
    assert stats.posted("b", 8, 8, 0.0, every_rank=True) is None
    assert len(stats.exchanges) == 0 and not stats.unmatched
    stats.keep_exchanges = True
    for _ in range(1000):
        stats.add("a", 8, 8, 0.1, every_rank=True)
    entry = stats.posted("b", 8, 8, 0.0, every_rank=True)
    stats.add("p2p", 8, 8, 0.1)
    log, unmatched = stats.take_exchanges()
    assert len(log) == 1001 and unmatched == {"p2p"}
    assert log.nbytes() <= 32 * 1001
    stats.blocked("b", 0.5, entry)  # its wait, after the log was taken: lands in that log
    assert len(stats.exchanges) == 0
    assert [len(b) for _, _, b in log.records()][-2:] == [1, 1]


def test_the_epoch_ends_with_its_last_rank(launcher, small_dataset, tmp_path):
    """sequences at P = 3 evaluates the last windows on the rank that holds them, after the last training
    collective; that rank sleeping in each task call makes it the last by far. Every rank's epoch ends with it
    (the closing all-reduce's wait, ``comm_by_tag.epoch_end``, is the others' exposed and late time), so the
    printed epoch, the slowest rank's, is not shorter than the last rank's work."""
    delay = 0.3
    job = write_job(tmp_path / "job.yaml", small_dataset, model={"name": "tgcn_cell"}, train={"epochs": 2},
                    strategy={"name": "sequences", "window": 3}, debug={"delay_rank": 2, "delay_seconds": delay})
    _, recs = _losses(launcher, 3, job, tmp_path / "run")
    for r in recs:
        epochs = r["per_rank"]["epoch"]
        assert max(epochs) - min(epochs) < 0.5 * delay, epochs  # only the ranks' start skew between them
        assert r["slowest"]["epoch"] >= max(epochs) - 0.5 * delay, (r["slowest"], epochs)
        end = r["comm_by_tag"]["epoch_end"]
        # late: the wait in the closing barrier; the metric sums' transfer after it is exposed, not late
        assert end["late_max"] >= 0.8 * delay and end["late"] <= end["exposed"] == end["seconds"], end
        assert "epoch_end" not in r["bytes_by_tag"]  # the metrics' bytes are not training traffic
        exposed = np.array(r["per_rank"]["comm_exposed"])
        assert np.all(exposed <= np.array(r["per_rank"]["comm"]) + 1e-9)
        assert sum(v["late"] for v in r["comm_by_tag"].values()) == pytest.approx(r["time"]["comm_late"]["mean"],
                                                                                  rel=1e-9)
