"""``strategy: hybrid`` (DynaHB §4–5, SPEC H1–H5), float64.

* Alg. 1's loads by hand, the round-robin deal, the load order the same for every P and partition (no MPI);
* the anchor: one batch of every snapshot × every vertex reproduces ``snapshot`` (T-GCN cell, EvolveGCN-O) and
  ``pss`` (DCRNN) at P = 1 and P = 3;
* P-invariance: random actions over fractional batches give P = 3 the losses of P = 1 (1e-9), on a sparse graph
  where each rank reads fewer than N rows (replication < P), for node regression and link prediction; so do the
  DQN with the work reward and the inline reservoir, and both resume bit for bit;
* asynchronous averaging: P = 1 equals all-reduce, rounds by count are deterministic, every epoch ends with one
  model; a fault on one rank ends the job;
* bad input: config errors, the plan's refusals, one line and exit 2 at P = 3.
"""

from __future__ import annotations

import re
import shutil
import signal
import time
from pathlib import Path

import numpy as np
import pytest

from hpcdgnn.config.load import load_job
from hpcdgnn.data.manifest import load_manifest
from hpcdgnn.errors import EXIT_STALLED, ConfigError
from hpcdgnn.partition.load_aware import plan_hybrid, vertex_loads
from hpcdgnn.strategies.hybrid import HybridStrategy
from tests.conftest import SharedRuns, read_metrics, write_job
from tests.strategies.test_sequences import exits_2_with_one_line
from tests.strategies.test_sequences_cells import (
    signal_dataset,
    small,  # noqa: F401 (a fixture)
)
from tests.train.test_exactness import _losses, _losses_many

#: one batch of the whole training timeline × every vertex: full-batch training
ANCHOR = ["strategy.name=hybrid", "strategy.snapshot_fractions=[1.0]", "strategy.vertex_fractions=[1.0]",
          "strategy.adjuster.kind=fixed", "strategy.steps_per_epoch=1", "strategy.closure=receptive"]
#: fractional batches, an action drawn per batch
RANDOM = ["strategy.name=hybrid", "strategy.snapshot_fractions=[0.3,0.6]", "strategy.vertex_fractions=[0.3,0.5]",
          "strategy.groups=2", "strategy.adjuster.kind=random"]


def overridden(base: list[str], *items: str) -> list[str]:
    """``base``'s ``--set`` items with ``items`` in place of those of the same keys (``--set`` refuses a key given
    twice), then the rest of ``items``."""
    keys = {item.partition("=")[0] for item in items}
    return [b for b in base if b.partition("=")[0] not in keys] + list(items)


@pytest.fixture(scope="module")
def dense(small):  # noqa: F811 (the imported fixture)
    """T = 8, N = 23 with signal targets (test_sequences_cells's)."""
    return small


@pytest.fixture(scope="module")
def sparse(tmp_path_factory):
    """T = 8, N = 61, 12 edges a snapshot: a rank's closure is a part of the graph."""
    return signal_dataset(tmp_path_factory.mktemp("hybrid") / "sparse", 8, 61, 12, 7)


def _four_epochs(tmp_path, data):
    """A T-GCN regression job of 4 epochs, checkpointed at 2 and 4 (for resuming at 2)."""
    return write_job(tmp_path / "job.yaml", data, model={"name": "tgcn_cell", "hidden": 4},
                     task={"name": "regression", "horizon": 1}, train={"epochs": 4}, checkpoint={"every": 2, "keep": 3})


def _job(tmp_path, data, model: str = "tgcn_cell", task: str = "regression"):
    return write_job(tmp_path / "job.yaml", data, model={"name": model, "hidden": 4},
                     task={"name": task, **({"horizon": 1} if task == "regression" else {})})


def _bound_job(tmp_path, data, model: str):
    """3 epochs, checkpointed every epoch: test_ranks_agree_when_the_reservoirs_max_mb_binds_and_resume_bit_for_bit."""
    return write_job(tmp_path / "job.yaml", data, model={"name": model, "hidden": 4},
                     task={"name": "regression", "horizon": 1}, train={"epochs": 3}, checkpoint={"every": 1, "keep": 3})


#: the runs at P = 3 that the tests compare or read (no test's claim is about their processes), in one launch
#: (:class:`~tests.conftest.SharedRuns`); those compared for repeating across processes, or expected to fail, run
#: in launches of their own
SHARED = [
    ("test_one_full_batch_reproduces_snapshot_at_p1_and_p3", 3, "dense", lambda d, tmp: (_job(tmp, d), ANCHOR)),
    *[("test_one_full_batch_reproduces_full_batch_models_at_p3", 3, "dense",
       lambda d, tmp, m=m: (_job(tmp, d, m), ANCHOR)) for m in ("evolvegcn_o", "dcrnn")],
    *[("test_random_batches_are_p_invariant_over_partial_closures", 3, "sparse",
       lambda d, tmp, m=m, t=t: (_job(tmp, d, m, t), RANDOM))
      for m, t in (("tgcn_cell", "regression"), ("dcrnn", "regression"), ("cdgcn", "link_prediction"),
                   ("dysat", "regression"))],
    *[("test_dqn_and_inline_reservoir_are_p_invariant_and_resume_bit_for_bit", 3, "sparse",
       lambda d, tmp, o=o: (_four_epochs(tmp, d), [*RESERVOIR, *o])) for o in ([], ["strategy.reservoir.threads=2"])],
    *[("test_ranks_agree_when_the_reservoirs_max_mb_binds_and_resume_bit_for_bit", 3, "sparse",
       lambda d, tmp, m=m, o=o: (_bound_job(tmp, d, m), overridden(RESERVOIR, *o)))
      for m, more, max_mb in (("tgcn_cell", [], 0.003), ("gconv_lstm", ["strategy.vertex_fractions=[0.1,0.2]"], 0.0066))
      for o in (more, [*more, f"strategy.reservoir.max_mb={max_mb}"])],
    ("test_check_refuses_a_closure_over_max_cache_mb_as_the_run_does", 3, "sparse",
     lambda d, tmp: (_job(tmp, d), ["strategy.name=hybrid", "strategy.vertex_fractions=[0.5]", "train.epochs=1"])),
    *[("test_lhop_closure_reads_fewer_rows_and_departs_a_little", 3, "sparse",
       lambda d, tmp, o=o: (_job(tmp, d, "dcrnn"), [*RANDOM, *o])) for o in ([], ["strategy.closure=lhop"])],
]


@pytest.fixture(scope="module")
def shared(request, launcher, tmp_path_factory) -> SharedRuns:
    """:data:`SHARED`'s runs."""
    return SharedRuns(request, launcher, tmp_path_factory.mktemp("shared"), SHARED)


def _read(shared, P: int, job, *overrides: str):
    """(each epoch's [loss, gradient norm], the records) of ``shared``'s run of ``job`` at ``P``."""
    recs = read_metrics(shared(P, job, *overrides))
    return np.array([[r["loss"], r["grad_norm"]] for r in recs]), recs


def test_loads_count_walks_of_alg1():
    # path 0 <- 1 <- 2 (row v aggregates its CSR columns): W_1 = A·1, W_2 = A·W_1
    path = (np.array([0, 1]), np.array([1, 2]))
    # L = 2: load = 3·W_0 + 2·W_1 + W_2 per snapshot; W_0 = 1, W_1 = (1, 1, 0), W_2 = (1, 0, 0)
    np.testing.assert_array_equal(vertex_loads([path], 3, 2), [3 + 2 + 1, 3 + 2, 3])
    np.testing.assert_array_equal(vertex_loads([path, path], 3, 2), 2 * vertex_loads([path], 3, 2))
    # a directed triangle: every vertex has one walk of each length (Def. 2's sets would differ on denser cycles)
    tri = (np.array([0, 1, 2]), np.array([1, 2, 0]))
    np.testing.assert_array_equal(vertex_loads([tri], 3, 2), [6, 6, 6])


def test_plan_deals_by_load_and_its_order_does_not_depend_on_p(sparse, tmp_path):
    man = load_manifest(sparse)
    job = load_job(_job(tmp_path, sparse), ["strategy.name=hybrid", "strategy.groups=3"])
    plans = {P: plan_hybrid(man, P, job) for P in (1, 2, 3)}
    order = plans[1].load_order
    assert all(p.load_order == order for p in plans.values())
    with_load = plans[3]
    for p in range(3):
        mine = with_load.vertices_of(p)
        assert mine == order[p::3]  # Alg. 1 l. 11: dealt round-robin in descending load, kept in load order
        assert sum(with_load.ranks[p]["groups"]) == len(mine) == with_load.ranks[p]["vertices"]
    loads = [r["load"] for r in with_load.ranks]
    assert max(loads) / min(loads) < 1.2
    for method in ("hash", "range", "metis"):  # the vertex strategy's splits; the load order stays the same
        other = plan_hybrid(man, 3, load_job(_job(tmp_path, sparse), ["strategy.name=hybrid",
                                                                       f"strategy.partition={method}"]))
        assert sorted(v for p in range(3) for v in other.vertices_of(p)) == list(range(61)), method
        assert other.load_order == order


@pytest.mark.quick(strategy="hybrid")
def test_one_full_batch_reproduces_snapshot_at_p1_and_p3(launcher, dense, shared, tmp_path):
    job = _job(tmp_path, dense)
    ref, _ = _losses(launcher, None, job, tmp_path / "snapshot")
    assert ref[0, 0] != ref[-1, 0]
    one, _ = _losses(launcher, None, job, tmp_path / "h1", *ANCHOR)
    three, recs = _read(shared, 3, job, *ANCHOR)
    np.testing.assert_allclose(one, ref, rtol=1e-9)
    np.testing.assert_allclose(three, ref, rtol=1e-9)
    assert recs[0]["hybrid"]["steps"] == 1 and recs[0]["hybrid"]["actions"] == {"1x1": 1}


@pytest.mark.parametrize(("model", "reference"), [("evolvegcn_o", "snapshot"), ("dcrnn", "pss")])
def test_one_full_batch_reproduces_full_batch_models_at_p3(launcher, dense, shared, tmp_path, model, reference):
    job = _job(tmp_path, dense, model)
    ref, _ = _losses(launcher, None, job, tmp_path / reference, f"strategy.name={reference}")
    got, _ = _read(shared, 3, job, *ANCHOR)
    np.testing.assert_allclose(got, ref, rtol=1e-9, err_msg=model)


@pytest.mark.parametrize(("model", "task"), [("tgcn_cell", "regression"), ("dcrnn", "regression"),
                                             ("cdgcn", "link_prediction"), ("dysat", "regression")])
def test_random_batches_are_p_invariant_over_partial_closures(launcher, sparse, shared, tmp_path, model, task):
    job = _job(tmp_path, sparse, model, task)
    one, recs1 = _losses(launcher, None, job, tmp_path / "p1", *RANDOM)
    three, recs = _read(shared, 3, job, *RANDOM)
    np.testing.assert_allclose(three, one, rtol=1e-9)
    h = recs[0]["hybrid"]
    assert len(h["actions"]) > 1 and h["steps"] == sum(h["actions"].values())  # random: several actions ran
    assert [r["hybrid"]["actions"] for r in recs] == [r["hybrid"]["actions"] for r in recs1]
    if task == "regression":  # link prediction's negatives may be any vertex: every rank reads every row
        assert 1 < h["replication"] < 3, h  # each rank reads part of the graph, not all of it
    else:
        assert h["replication"] == 3


@pytest.mark.parametrize(("override", "error"), [
    ("strategy.vertex_fractions=[1.5]", "vertex_fractions: 1.5 is not a fraction in (0, 1]"),
    ("strategy.snapshot_fractions=[]", "snapshot_fractions: must list at least one fraction"),
    ("strategy.adjuster.start=[0.5,0.5]", "adjuster.start: [0.5, 0.5] is not an action"),
    ("strategy.adjuster.gamma=1.0", "gamma: must be in [0, 1)"),
    ("strategy.adjuster.epsilon_decay=0", "epsilon_decay: must be in (0, 1]"),
    ("strategy.adjuster.epsilon_min=0.5 strategy.adjuster.epsilon=0.2",
     "epsilon_min: 0.5 must be in [0, epsilon = 0.2]"),
    ("strategy.adjuster.epsilon=1.5", "strategy.adjuster.epsilon: 1.5 must be in [0, 1]"),
    ("strategy.adjuster.lr=0", "lr: must be > 0"),
    ("strategy.averaging.every_s=0", "every_s: must be > 0"),
    ("strategy.averaging.every_steps=-1", "every_steps: must be >= 0"),
    ("strategy.reservoir.threads=-1", "threads: must be in [0, 1024]"),
    # 10^5 generator threads: "RuntimeError: can't start new thread", a traceback in the first epoch
    ("strategy.reservoir.mode=on strategy.reservoir.threads=100000", "reservoir.threads: must be in [0, 1024]"),
    # a key its section's mode would ignore is refused (strict config), not accepted to change nothing
    ("strategy.adjuster.kind=random strategy.adjuster.gamma=0.5", "gamma: applies only with kind: dqn"),
    ("strategy.adjuster.kind=fixed strategy.adjuster.epsilon=0.5", "epsilon: applies only with kind: dqn"),
    ("strategy.reservoir.threads=2", "threads: applies only with mode: on"),
    ("strategy.averaging.every_steps=4", "every_steps: applies only with mode: async"),
])
def test_bad_options_are_config_errors(dense, tmp_path, override, error):
    with pytest.raises(ConfigError, match=re.escape(error)):
        load_job(_job(tmp_path, dense), ["strategy.name=hybrid", *override.split()])


@pytest.mark.parametrize(("override", "error"), [
    ("strategy.vertex_fractions=[0.5] strategy.reservoir.mode=on task=link_prediction",
     "strategy.reservoir.mode: on stores batches for the node tasks"),
    ("strategy.vertex_fractions=[0.5] strategy.averaging.mode=async strategy.averaging.every_s=30 "
     "comm.stall_timeout_s=30", "strategy.averaging.every_s: 30 s is not below comm.stall_timeout_s"),
])
def test_the_plan_refuses(dense, tmp_path, override, error):
    """Rank 0's plan refuses these (``run`` then prints the one line on rank 0 and every rank exits 2)."""
    task = next((w.partition("=")[2] for w in override.split() if w.startswith("task=")), "regression")
    overrides = [w for w in override.split() if not w.startswith("task=")]  # the job's task, not a --set
    job = load_job(_job(tmp_path, dense, task=task), ["strategy.name=hybrid", *overrides])
    with pytest.raises(ConfigError, match=re.escape(error)):
        HybridStrategy.make_plan(load_manifest(dense), 3, job)


def test_more_load_groups_than_vertices_are_refused_by_run_check_and_plan(launcher, dense, tmp_path):
    """N_bg > N would leave groups empty: run and check refuse it in one line (no run directory), and the plan
    marks hybrid as not applying instead of pricing it."""
    import json

    job, out = _job(tmp_path, dense), tmp_path / "out"  # N = 23
    says = "strategy.groups: 24 load groups, but the dataset has N = 23 vertices; choose at most 23"
    for command in (["run", str(job), "--output", str(out)], ["check", str(job), "--ranks", "3"]):
        proc = launcher.run(None, ["-m", "hpcdgnn", *command, "--set", "strategy.name=hybrid", "strategy.groups=24"])
        lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
        assert proc.returncode == 2 and len(lines) == 1 and says in lines[0], proc.stderr
    assert not out.exists()
    proc = launcher.run(None, ["-m", "hpcdgnn", "plan", str(job), "--ranks", "3", "--json", "--strategies", "hybrid",
                               "--set", "strategy.name=hybrid", "strategy.groups=24"])
    [pred] = json.loads(proc.stdout)["predictions"]
    assert pred["epoch_s"] is None and pred["notes"] == [f"does not apply: {says}"], pred


def test_batches_smaller_than_p_times_groups_run_p_invariant_with_a_warning(launcher, sparse, tmp_path):
    """N_V = 3 targets in 2 groups at P = 3: some ranks own no target in a batch and wait (counted per rank in
    the record's ``idle_steps``); the trajectory is P = 1's, and rank 0 says so once (the defaults, 1 % of N in
    4 groups, meet this on graphs under ~1,200 vertices)."""
    job = _job(tmp_path, sparse)
    tiny = ["strategy.name=hybrid", "strategy.snapshot_fractions=[0.3]", "strategy.vertex_fractions=[0.05]",
            "strategy.groups=2", "strategy.adjuster.kind=fixed", "strategy.adjuster.start=[0.3,0.05]"]
    one, _ = _losses(launcher, None, job, tmp_path / "p1", *tiny)
    proc = launcher.run(3, ["-m", "hpcdgnn", "run", str(job), "--output", str(tmp_path / "p3"), "--set", *tiny])
    assert proc.returncode == 0, proc.stderr
    recs = read_metrics(tmp_path / "p3")
    three = np.array([[r["loss"], r["grad_norm"]] for r in recs])
    np.testing.assert_allclose(three, one, rtol=1e-9)
    idle, steps = [r["hybrid"]["idle_steps"] for r in recs], [r["hybrid"]["steps"] for r in recs]
    assert all(len(i) == 3 and max(i) <= s for i, s in zip(idle, steps, strict=True)), (idle, steps)
    assert sum(map(sum, idle)) > 0, idle  # some batch did leave a rank without a target
    assert all(r["hybrid"]["idle_steps"] == [0] for r in read_metrics(tmp_path / "p1"))
    warned = [line for line in proc.stdout.splitlines() if "fewer than P × groups" in line]
    assert warned == ["[rank 0] warning: strategy.vertex_fractions: the smallest batch in use draws N_V = 3 of "
                      "N = 61 targets, fewer than P × groups = 3 × 2: in its batches a rank may own no target and "
                      "wait (the trajectory is unchanged); raise the fraction or lower strategy.groups"], proc.stdout


def test_an_epoch_without_training_examples_is_not_a_diverged_run(launcher, sparse, tmp_path):
    """One target vertex in one batch an epoch: link prediction's batch may hold no positive pair, so the epoch's
    loss is 0 / 0. That was reported as divergence (exit 2, status ``diverged``, "lower train.lr"): the run now
    goes on, the epoch's loss is null in metrics.jsonl, and rank 0 warns once."""
    import json

    job = _job(tmp_path, sparse, model="tgcn_cell", task="link_prediction")
    tiny = ["strategy.name=hybrid", "strategy.snapshot_fractions=[0.2]", "strategy.vertex_fractions=[0.01]",
            "strategy.steps_per_epoch=1", "strategy.adjuster.kind=fixed", "train.epochs=6"]
    proc = launcher.run(None, ["-m", "hpcdgnn", "run", str(job), "--output", str(tmp_path / "run"), "--set", *tiny])
    assert proc.returncode == 0, proc.stderr
    losses = [r["loss"] for r in read_metrics(tmp_path / "run")]
    assert len(losses) == 6 and None in losses and any(x is not None for x in losses), losses
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["status"] == "completed"
    assert proc.stdout.count("batches held no training examples") == 1, proc.stdout


@pytest.mark.parametrize(("override", "needle"), [
    ("strategy.vertex_fractions=[0.5] strategy.max_cache_mb=0.001", "strategy.max_cache_mb: rank 0's closure holds"),
    ("strategy.vertex_fractions=[0.5] strategy.reservoir.mode=on strategy.reservoir.max_mb=0.0001",
     "strategy.reservoir.max_mb: 0.0001 MiB holds no batch"),
    ("model.name=dcrnn model.encoder_decoder=true", "model.encoder_decoder: true forecasts"),
])
def test_bad_input_exits_2_at_p3(launcher, dense, tmp_path, override, needle):
    exits_2_with_one_line(launcher, _job(tmp_path, dense), f"strategy.name=hybrid {override}", needle)


def test_a_reservoir_holding_no_batch_is_refused_at_set_up_leaving_no_run_directory(launcher, dense, tmp_path):
    """``reservoir.max_mb`` below one batch was refused at the first epoch's first batch, after the run directory
    and its files were made: the refusal left an ``--output`` directory without a checkpoint. The strategy's
    set-up refuses it now, where a refused new run removes what it made."""
    job, out = _job(tmp_path, dense), tmp_path / "fresh" / "run"
    sets = ["strategy.name=hybrid", "strategy.vertex_fractions=[0.5]", "strategy.reservoir.mode=on",
            "strategy.reservoir.max_mb=0.0001"]
    proc = launcher.run(2, ["-m", "hpcdgnn", "run", str(job), "--output", str(out), "--set", *sets], timeout=60)
    lines = [ln for ln in proc.stderr.splitlines() if "hpcdgnn: error:" in ln]
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert "strategy.reservoir.max_mb: 0.0001 MiB holds no batch" in lines[0], lines
    assert not (tmp_path / "fresh").exists(), sorted(p.name for p in (tmp_path / "fresh").rglob("*"))


@pytest.mark.parametrize("model", ["gconv_lstm", "cdgcn"])
def test_check_refuses_the_reservoir_the_run_would(launcher, dense, tmp_path, capsys, model):
    """``python -m hpcdgnn check`` passed a ``reservoir.max_mb`` holding no batch, which the run's set-up refuses
    (:meth:`HybridStrategy._first_stored`); it now builds each rank's part of that batch as the set-up does and
    gives the run's line, bytes included: a graph-recurrent cell's step graphs hold the weights as read, which
    the planner's all-ones float64 structure would over-count. A bound that holds every part passes."""
    from hpcdgnn.__main__ import main

    job = _job(tmp_path, dense, model)
    sets = ["strategy.name=hybrid", "strategy.vertex_fractions=[0.5]", "strategy.reservoir.mode=on",
            "strategy.reservoir.max_mb=0.0001"]
    proc = launcher.run(3, ["-m", "hpcdgnn", "run", str(job), "--output", str(tmp_path / "run"), "--set", *sets],
                        timeout=60)
    ran = [ln for ln in proc.stderr.splitlines() if "hpcdgnn: error:" in ln]
    assert proc.returncode == 2 and len(ran) == 1, proc.stderr
    said = ran[0][ran[0].index("strategy.reservoir.max_mb: 0.0001 MiB holds no batch (one is "):]
    code = main(["check", str(job), "--ranks", "3", "--set", *sets])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and said in err, (said, err)
    code = main(["check", str(job), "--ranks", "3", "--set", *sets[:-1], "strategy.reservoir.max_mb=1"])
    assert code == 0, capsys.readouterr().err


#: a learned batch size with a reproducible reward, over fractional batches
DQN = [*RANDOM[:-1], "strategy.adjuster.kind=dqn", "strategy.adjuster.reward_time=work"]
#: rounds by count: deterministic
ASYNC = ["strategy.averaging.mode=async", "strategy.averaging.every_steps=2"]


def test_async_averaging(launcher, sparse, tmp_path):
    """H5: at P = 1 ``async`` is ``allreduce`` bit for bit; at P = 3 rounds by count are deterministic, every
    epoch ends with one model on every rank, and the losses depart from P = 1's (local steps between rounds);
    rounds by time end the same way."""
    job = _job(tmp_path, sparse)
    sync, _ = _losses(launcher, None, job, tmp_path / "sync", *RANDOM)
    one, _ = _losses(launcher, None, job, tmp_path / "a1", *RANDOM, *ASYNC)
    np.testing.assert_array_equal(one, sync)
    # the two runs compared for determinism in launches of their own (fresh processes: another hash seed, other
    # addresses); the second shares its launch with the rounds-by-time run
    timed_over = (*RANDOM, "strategy.averaging.mode=async", "strategy.averaging.every_s=0.001")
    runs = [_losses(launcher, 3, job, tmp_path / "a3-1", *RANDOM, *ASYNC)]
    second, (timed, recs) = _losses_many(launcher, 3, [(job, tmp_path / "a3-2", (*RANDOM, *ASYNC)),
                                                       (job, tmp_path / "timed", timed_over)])
    runs.append(second)
    np.testing.assert_array_equal(runs[0][0], runs[1][0])
    assert all(r["hybrid"]["replicas_equal"] and r["hybrid"]["rounds"] >= 2 for r in runs[0][1])
    assert "averaging" in runs[0][1][0]["bytes_by_tag"] and "grad_allreduce" not in runs[0][1][0]["bytes_by_tag"]
    assert not np.allclose(runs[0][0][:, 0], one[:, 0], rtol=1e-9)  # an approximation: it must differ
    assert np.all(np.isfinite(timed)) and all(r["hybrid"]["replicas_equal"] for r in recs)


@pytest.mark.parametrize("where", ["every_steps=1", "every_s=0.001"])
def test_a_fault_under_async_averaging_ends_the_job(launcher, sparse, tmp_path, where):
    """``debug.fail_rank: 1`` while the others step, test the barrier or wait in a round: the job ends non-zero
    within 60 s with rank 1's traceback."""
    job = write_job(tmp_path / "job.yaml", sparse, model={"name": "tgcn_cell", "hidden": 4},
                    task={"name": "regression", "horizon": 1}, debug={"fail_rank": 1, "fail_epoch": 2})
    t0 = time.monotonic()
    proc = launcher.run(3, ["-m", "hpcdgnn", "run", str(job), "--output", str(tmp_path / "run"), "--set", *RANDOM,
                            "strategy.averaging.mode=async", f"strategy.averaging.{where}"], timeout=90)
    assert proc.returncode != 0 and time.monotonic() - t0 < 60
    assert "rank 1/3:" in proc.stderr and "fault injected on rank 1 in epoch 2" in proc.stderr, proc.stderr


def test_a_stopped_rank_under_async_averaging_gets_the_watchdogs_exit(launcher, sparse, tmp_path):
    """A rank that stops (``debug.delay_rank``) while the others wait for a round: exit 3, one line naming the
    averaging barrier."""
    job = write_job(tmp_path / "job.yaml", sparse, model={"name": "tgcn_cell", "hidden": 4},
                    task={"name": "regression", "horizon": 1}, comm={"stall_timeout_s": 2},
                    debug={"delay_rank": 1, "delay_seconds": 6})
    proc = launcher.run(3, ["-m", "hpcdgnn", "run", str(job), "--output", str(tmp_path / "run"), "--set", *RANDOM,
                            *ASYNC], timeout=90)
    # Hydra (MPICH) reports the status it collects first after MPI_Abort: the code, or the stopped rank's SIGKILL
    hydra = () if launcher.open_mpi else (signal.SIGKILL,)
    assert proc.returncode in (EXIT_STALLED, *hydra), proc.stderr[-2000:]
    line = next(ln for ln in proc.stderr.splitlines() if "hpcdgnn: error:" in ln)
    assert "stalled: rank 1" in line and "averaging.barrier" in line, line


#: stored batches reused by Eq. 4's probability, filled inline
RESERVOIR = [*DQN, "strategy.reservoir.mode=on"]


def test_a_run_in_this_process_leaves_no_generator_thread_behind(launcher, sparse, tmp_path):
    """``hpcdgnn.train`` in a notebook: the reservoir's generator threads end with the run (they stayed, polling,
    one pair more per call)."""
    import threading

    job = _four_epochs(tmp_path, sparse)
    for k in range(2):
        proc = launcher.run(None, ["-m", "hpcdgnn", "run", str(job), "--output", str(tmp_path / f"r{k}"), "--set",
                                   *RESERVOIR, "strategy.reservoir.threads=2", "train.epochs=1"])
        assert proc.returncode == 0, proc.stderr
        assert not [t.name for t in threading.enumerate() if t.name.startswith("hpcdgnn-reservoir")]
    # nor embed, whose set-up starts them again
    from tests.conftest import mpi_env, run_in_process

    proc = run_in_process(["embed", str(tmp_path / "r0"), "--output", str(tmp_path / "z.npz")], mpi_env(), tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert not [t.name for t in threading.enumerate() if t.name.startswith("hpcdgnn-reservoir")]


def test_dqn_and_inline_reservoir_are_p_invariant_and_resume_bit_for_bit(launcher, sparse, shared, tmp_path):
    """H3 + H4: every rank runs the same DQN on all-reduced inputs (``reward_time: work``), and with
    ``threads: 0`` the stores fill alike on every rank, so P = 3 takes P = 1's actions and batches; a run resumed
    at epoch 2 continues as the straight one (network, replay, ε and RNG are in the checkpoint; the stores are
    rebuilt from their serials); generator threads train as well."""
    job = _four_epochs(tmp_path, sparse)
    one, recs1 = _losses(launcher, None, job, tmp_path / "p1", *RESERVOIR)
    three, recs = _read(shared, 3, job, *RESERVOIR)
    threaded, recs_t = _read(shared, 3, job, *RESERVOIR, "strategy.reservoir.threads=2")
    np.testing.assert_allclose(three, one, rtol=1e-9)
    actions = [r["hybrid"]["actions"] for r in recs1]
    assert actions == [r["hybrid"]["actions"] for r in recs]
    assert len({a for epoch in actions for a in epoch}) > 1 and recs1[-1]["hybrid"]["epsilon"] < 1
    rsv = recs[-1]["hybrid"]["reservoir"]
    assert rsv["reused"] > 0 and rsv["bytes"] > 0 and 0 < rsv["p"] <= 1
    part = Path(shutil.copytree(shared(3, job, *RESERVOIR), tmp_path / "part"))
    shutil.rmtree(part / "checkpoints" / "epoch-000004")
    proc = launcher.run(3, ["-m", "hpcdgnn", "run", "--resume", str(part)])
    assert proc.returncode == 0, proc.stderr
    resumed = read_metrics(part)
    assert [(r["loss"], r["grad_norm"], r["hybrid"]["actions"]) for r in resumed] == \
        [(r["loss"], r["grad_norm"], r["hybrid"]["actions"]) for r in recs]
    # on another rank count too: the adjuster and the stores are the same on every rank, and come back
    other = Path(shutil.copytree(part, tmp_path / "other"))
    shutil.rmtree(other / "checkpoints" / "epoch-000004")
    proc = launcher.run(None, ["-m", "hpcdgnn", "run", "--resume", str(other)])
    assert proc.returncode == 0, proc.stderr
    moved = read_metrics(other)
    np.testing.assert_allclose([[r["loss"], r["grad_norm"]] for r in moved],
                               [[r["loss"], r["grad_norm"]] for r in recs], rtol=1e-9)
    assert [r["hybrid"]["actions"] for r in moved] == [r["hybrid"]["actions"] for r in recs]
    # the generators' seconds are each epoch's (they fill the stores early, then idle)
    assert np.all(np.isfinite(threaded)) and sum(r["hybrid"]["reservoir"]["generator_seconds"] for r in recs_t) > 0


@pytest.mark.parametrize(("model", "max_mb", "more"), [("tgcn_cell", 0.003, []),
                                                      ("gconv_lstm", 0.0066, ["strategy.vertex_fractions=[0.1,0.2]"])])
def test_ranks_agree_when_the_reservoirs_max_mb_binds_and_resume_bit_for_bit(launcher, sparse, shared, tmp_path,
                                                                             model, max_mb, more):
    """``max_mb`` caps a rank's bytes, which depend on the targets it owns: each rank stopped storing when its own
    bytes reached the cap, so at P = 3 one rank held 4 batches and the others 3 (``stored`` per rank), their p
    differed, and at one step a rank reused a stored batch while another trained a fresh one (their gradients
    summed halves of different batches). "Reached" is agreed now: every rank stores as many batches, and a run
    resumed at epoch 1 continues as the straight one — with GConvLSTM too, whose stored batches hold their
    operators once trained: there the cap binds in epoch 2 on those bytes, which the batches rebuilt at the
    resume do not hold until they train (counted as built, the resumed stores grew one batch more)."""
    job = _bound_job(tmp_path, sparse, model)
    # a stored batch here is ~1-2 KiB on a rank: the cap binds after a few, on one rank before the others
    bound = overridden(RESERVOIR, *more, f"strategy.reservoir.max_mb={max_mb}")
    free, recs_f = _read(shared, 3, job, *overridden(RESERVOIR, *more))
    _, recs = _read(shared, 3, job, *bound)
    stored = [r["hybrid"]["reservoir"]["stored"] for r in recs]
    assert all(len(set(s)) == 1 for s in stored), stored
    assert stored[-1][0] < recs_f[-1]["hybrid"]["reservoir"]["stored"][0], (stored, recs_f[-1])  # it binds
    part = Path(shutil.copytree(shared(3, job, *bound), tmp_path / "part"))
    for epoch in (2, 3):
        shutil.rmtree(part / "checkpoints" / f"epoch-{epoch:06d}")
    proc = launcher.run(3, ["-m", "hpcdgnn", "run", "--resume", str(part)])
    assert proc.returncode == 0, proc.stderr
    assert [(r["loss"], r["grad_norm"], r["hybrid"]["reservoir"]["stored"]) for r in read_metrics(part)] == \
        [(r["loss"], r["grad_norm"], r["hybrid"]["reservoir"]["stored"]) for r in recs]
    assert np.all(np.isfinite(free))


@pytest.mark.parametrize("model", ["gconv_lstm", "dcrnn"])
def test_the_reservoirs_bytes_are_what_its_stores_hold_after_training(launcher, sparse, tmp_path, monkeypatch,
                                                                      model):
    """A graph-recurrent cell memoises its operators on a stored batch's step graphs the first time the batch
    trains; its bytes were counted as built, so ``max_mb`` capped and ``reservoir.bytes`` reported a fraction of
    what the stores held. At each epoch's record (in this process) they are the stores' :func:`layout_bytes` as
    the stores are then."""
    from hpcdgnn.strategies.reservoir import layout_bytes

    seen = []
    report = HybridStrategy._reservoir_report

    def checked(self):
        out = report(self)
        held = sum(layout_bytes(b.layout) + b.targets.nbytes for store in self.reservoir.stores for b in store)
        seen.append((out["reservoir"]["bytes"], held, out["reservoir"]["reused"]))
        return out

    monkeypatch.setattr(HybridStrategy, "_reservoir_report", checked)
    job = write_job(tmp_path / "job.yaml", sparse, model={"name": model, "hidden": 4},
                    task={"name": "regression", "horizon": 1}, train={"epochs": 2})
    proc = launcher.run(None, ["-m", "hpcdgnn", "run", str(job), "--output", str(tmp_path / "run"), "--set",
                               *RESERVOIR])
    assert proc.returncode == 0, proc.stderr
    assert len(seen) == 2 and all(reused > 0 for *_, reused in seen), seen  # stored batches did train
    assert [counted for counted, *_ in seen] == [held for _, held, _ in seen], seen


def test_lhop_closure_reads_fewer_rows_and_departs_a_little(launcher, sparse, shared, tmp_path):
    """``closure: lhop`` (the paper's L hops) runs DCRNN's cells on the subgraph those rows induce: fewer rows read
    than the exact receptive closure, and losses near, not equal to, the exact ones."""
    job = _job(tmp_path, sparse, "dcrnn")
    exact, recs = _read(shared, 3, job, *RANDOM)
    near, recs_l = _read(shared, 3, job, *RANDOM, "strategy.closure=lhop")
    assert recs_l[0]["hybrid"]["replication"] < recs[0]["hybrid"]["replication"]
    assert not np.allclose(near[:, 0], exact[:, 0], rtol=1e-9)
    np.testing.assert_allclose(near[:, 0], exact[:, 0], rtol=0.2)


def test_a_generator_threads_exception_is_raised_in_the_training_thread():
    """H4: a reservoir thread that fails hands its exception to the training thread's next ``check`` (which the
    crash path then turns into rank R's traceback and the job's end), and ``close`` stops the threads."""
    from hpcdgnn.config.schema import ReservoirConfig
    from hpcdgnn.strategies.reservoir import BatchReservoir

    def build(action, serial):
        raise ValueError(f"cannot build batch {serial} of action {action}")

    rsv = BatchReservoir(ReservoirConfig(mode="on", threads=1), [4], build)
    rsv.start()
    deadline = time.monotonic() + 10
    while rsv.error is None and time.monotonic() < deadline:
        time.sleep(0.01)
    with pytest.raises(RuntimeError, match="reservoir generator thread failed: ValueError"):
        rsv.check()
    threads = list(rsv._threads)
    rsv.close()
    assert threads and not any(t.is_alive() for t in threads)


def test_check_refuses_a_closure_over_max_cache_mb_as_the_run_does(launcher, sparse, shared, tmp_path):
    """``strategy.max_cache_mb`` was tested only once the set-up had read each rank's closure: ``check`` said "a
    run would start" for a job the run then refused. It reads the closures as the set-up does: below the largest
    rank's closure both refuse, naming that rank and its MiB; above it both go on."""
    import json

    from tests.conftest import mpi_env, run_in_process

    job = _job(tmp_path, sparse)
    hybrid = ["strategy.name=hybrid", "strategy.vertex_fractions=[0.5]", "train.epochs=1"]
    held = read_metrics(shared(3, job, *hybrid))[-1]["hybrid"]["cache_bytes"]
    top = int(np.argmax(held))
    assert len(set(held)) > 1, held  # ranks' closures differ: the check must find the right one
    limits = ((held[top] / 2**20 * 1.001, False), (held[top] / 2**20 * 0.999, True))
    # both runs in one launch, the refused one last (every rank leaves its set-up with the one line and exit 2)
    runs = launcher.run_many(3, [["run", str(job), "--output", str(tmp_path / f"r{refused}"), "--set", *hybrid,
                                  f"strategy.max_cache_mb={limit}"] for limit, refused in limits])
    for (limit, refused), run in zip(limits, runs, strict=True):
        sets = [*hybrid, f"strategy.max_cache_mb={limit}"]
        check = run_in_process(["check", str(job), "--ranks", "3", "--json", "--set", *sets], mpi_env(), tmp_path)
        if refused:
            said = f"strategy.max_cache_mb: rank {top}'s closure holds {held[top] / 2**20:.4g} MiB"
            assert check.returncode == 2 and said in check.stderr, check.stderr
            assert run.returncode == 2 and said in run.stderr, run.stderr
        else:
            assert check.returncode == 0, check.stderr
            assert json.loads(check.stdout)["num_ranks"] == 3
            assert run.returncode == 0, run.stderr
