"""``strategy.balance: measured``: the block plan re-cut once from measured per-rank compute (issue 13 item 3).

The fit (:func:`fit_eval_scale`) on known numbers; the re-cut plan on a real dataset; and under
``mpirun -np 2`` / ``-np 3`` a run whose re-cut is forced (``debug.measured_compute``) reproduces the
single-process losses, keeps the first plan beside the new one, and resumes bit for bit on the new plan.
"""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest

from hpcdgnn.config import load_job
from hpcdgnn.data.manifest import load_manifest
from hpcdgnn.partition.timeline import EVAL_SCALE_LIMIT, fit_eval_scale, plan_snapshots, rebalanced_plan
from tests.conftest import assert_same_run, read_metrics, write_job
from tests.train.test_exactness import _losses, _losses_many


def test_fit_recovers_the_eval_cost_ratio():
    train, evalw = np.array([10.0, 4.0, 0.0]), np.array([0.0, 3.0, 9.0])
    compute = 2.0 * train + 1.3 * evalw
    assert fit_eval_scale(train, evalw, compute) == pytest.approx(1.3 / 2.0)
    # P = 2, one rank training only: exactly determined
    assert fit_eval_scale(train[:2], evalw[:2], compute[:2]) == pytest.approx(0.65)


@pytest.mark.parametrize(("train", "evalw", "compute"), [
    ([10.0, 5.0], [2.0, 1.0], [1.0, 2.0]),   # the same mix on every rank: a and b cannot be told apart
    ([10.0, 5.0], [0.0, 0.0], [1.0, 2.0]),   # no evaluation work anywhere
    ([10.0], [3.0], [1.0]),                  # one rank
    ([10.0, 0.0], [0.0, 5.0], [1.0, -1.0]),  # a non-positive fit (a clock gone wrong)
    ([10.0, 0.0], [0.0, 5.0], [1.0, float("nan")]),
])
def test_fit_refuses_what_it_cannot_tell(train, evalw, compute):
    assert fit_eval_scale(np.array(train), np.array(evalw), np.array(compute)) is None


def _job(tmp_path, dataset, **strategy):
    return load_job(write_job(tmp_path / "job.yaml", dataset, model={"name": "tmgcn"},
                              strategy={"name": "snapshot", "layout": "block", "balance": "measured", **strategy}))


def test_rebalanced_plan_moves_the_cut_towards_the_measured_load(tmp_path, small_dataset):
    job = _job(tmp_path, small_dataset)
    manifest = load_manifest(small_dataset)
    plan = plan_snapshots(manifest, 2, job)
    assert plan.eval_scale == 1.0 and plan.snapshot_bounds is not None
    assert plan.snapshot_bounds[1] <= plan.horizon, "rank 1 must hold evaluation and training work here"
    # what the static model predicts: nothing to change
    from hpcdgnn.partition.timeline import snapshot_work
    work, owner = snapshot_work(manifest, job, plan.horizon), np.asarray(plan.snapshot_owner)
    assert rebalanced_plan(plan, manifest, job, [work[owner == r].sum() for r in range(2)], "block") is None
    # rank 1 (the evaluation snapshots) measured far slower: it gives snapshots to rank 0
    new = rebalanced_plan(plan, manifest, job, [1.0, 6.0], "block")
    assert new is not None and new.snapshot_bounds[1] > plan.snapshot_bounds[1]
    assert 1.0 < new.eval_scale <= EVAL_SCALE_LIMIT and new.kind == plan.kind
    # rank 1 measured faster: the other way
    back = rebalanced_plan(new, manifest, job, [6.0, 1.0], "block")
    assert back is not None and back.eval_scale < new.eval_scale and back.snapshot_bounds[1] < new.snapshot_bounds[1]
    # cyclic layouts and checkpoint blocks have no cut to move
    assert rebalanced_plan(plan, manifest, job, [1.0, 6.0], "cyclic") is None


@pytest.mark.parametrize(("model", "strategy", "says"), [
    ("tmgcn", {"layout": "cyclic"}, "and the layout is cyclic; set those"),
    ("cdgcn", {"layout": "auto"}, "and the layout is cyclic (layout: auto, for model cdgcn)"),
    ("tmgcn", {"layout": "block", "blocks": 2}, "and strategy.blocks: 2 fixes the cut"),
    ("tmgcn", {"layout": "block"}, None),
    ("tmgcn", {"layout": "auto"}, None),  # banded: auto is block
    ("cdgcn", {"name": "pss"}, None),
])
def test_measured_is_refused_where_there_is_no_cut_to_move(tmp_path, small_dataset, model, strategy, says):
    """A ``balance: measured`` that could move nothing (cyclic ownership, checkpoint blocks) is one line naming
    the key, not a run whose calibration epochs are flagged warm-up for nothing."""
    from hpcdgnn.errors import ConfigError
    from hpcdgnn.train.setup import check_model_strategy

    path = write_job(tmp_path / "job.yaml", small_dataset, model={"name": model},
                     strategy={"name": "snapshot", "balance": "measured", **strategy})
    job = load_job(path, [])
    if says is None:
        check_model_strategy(job, str(path), 2)
        return
    with pytest.raises(ConfigError, match="strategy.balance: measured re-cuts contiguous blocks") as err:
        check_model_strategy(job, str(path), 2)
    assert str(err.value).startswith(f"{path}: ") and says in str(err.value)


def test_the_planner_offers_no_blocked_variant_of_a_measured_snapshot(tmp_path, small_dataset):
    """``strategy: auto`` under memory pressure tries checkpoint blocks (``smaller``); with ``balance: measured``
    those would be refused by the check above after the pick, naming a key the user never set: the planner
    prices only the smaller variants the run's own check accepts."""
    from hpcdgnn.planner.predict import plan_job
    from hpcdgnn.planner.rates import MachineRates

    manifest = load_manifest(small_dataset)

    def blocks(balance: str) -> list[int]:
        job = _job(tmp_path, small_dataset, balance=balance)
        preds = plan_job(job, manifest, str(small_dataset), [2], MachineRates(), strategies=["snapshot"],
                         memory_per_rank=1.0)  # one byte: nothing fits, so every smaller variant is tried
        return [p.options["blocks"] for p in preds]

    assert blocks("work") == [1, manifest.num_snapshots]  # the last (smallest) blocked variant when none fits
    assert blocks("measured") == [1]


@pytest.mark.parametrize(("balance", "warmup", "epochs", "cut", "flagged"), [
    # the median of epochs 2-4 at least, however short the warm-up asked; the first epoch on the new plan is
    # warm-up too (its one-time exchanges)
    ("measured", 1, 5, 4, 5),
    ("measured", 0, 5, 4, 5),
    ("measured", 6, 9, 6, 7),  # a longer warm-up: after its last epoch, as asked
    ("measured", 1, 4, 0, 1),  # nothing left to run on a new plan: no re-cut, the warm-up as asked
    ("work", 1, 9, 0, 1),
])
def test_measured_cuts_after_three_epochs_past_the_first_and_counts_them_as_warmup(tmp_path, small_dataset, balance,
                                                                                   warmup, epochs, cut, flagged):
    from hpcdgnn.train.setup import calibration_epoch, warmup_epochs

    job = load_job(write_job(tmp_path / "job.yaml", small_dataset, model={"name": "tmgcn"},
                             strategy={"name": "snapshot", "layout": "block", "balance": balance},
                             train={"epochs": epochs, "warmup_epochs": warmup}))
    assert calibration_epoch(job) == cut and warmup_epochs(job) == flagged


def test_calibration_window_of_a_resumed_process(tmp_path, small_dataset):
    from hpcdgnn.train.setup import calibration_epochs, warmup_epochs

    job = load_job(write_job(tmp_path / "job.yaml", small_dataset, model={"name": "tmgcn"},
                             strategy={"name": "snapshot", "layout": "block", "balance": "measured"},
                             train={"epochs": 8, "warmup_epochs": 1}))
    assert calibration_epochs(job) == range(2, 5)
    assert calibration_epochs(job, 2) == range(4, 7) and warmup_epochs(job, 2) == 7  # its own first left out
    assert calibration_epochs(job, 3) == range(5, 8)  # the re-cut after epoch 7, before the last
    assert calibration_epochs(job, 4) == range(0)  # 4 + 4 leaves no epoch to train on a new plan
    # resumed after epoch 4 with epochs to spare: a plan not yet calibrated (a run that reached train.epochs
    # first) calibrates over the process's own epochs; a calibrated one, or a checkpoint that does not say, not
    longer = replace(job, train=replace(job.train, epochs=30))
    assert calibration_epochs(longer, 4) == range(6, 9) and warmup_epochs(longer, 4) == 9
    assert calibration_epochs(longer, 4, calibrated=True) == range(0) and warmup_epochs(longer, 4, True) == 1
    assert calibration_epochs(longer, 4, calibrated=None) == range(0)
    assert calibration_epochs(longer, 2, calibrated=None) == range(4, 7)  # before the fresh window's end


@pytest.mark.parametrize(("P", "strategy", "model", "forced"), [
    (2, "snapshot", "tmgcn", "[1.0,6.0]"),
    (3, "snapshot", "tmgcn", "[1.0,1.0,6.0]"),
    (2, "pss", "cdgcn", "[1.0,6.0]"),
])
def test_forced_recut_is_exact_and_kept(launcher, small_dataset, tmp_path, P, strategy, model, forced):
    extra = {"layout": "block"} if strategy == "snapshot" else {}
    job = write_job(tmp_path / "job.yaml", small_dataset, model={"name": model},
                    strategy={"name": strategy, "balance": "measured", **extra},
                    train={"epochs": 6, "warmup_epochs": 1})
    ref, _ = _losses(launcher, None, job, tmp_path / "plain")
    got, _ = _losses(launcher, P, job, tmp_path / "p", f"debug.measured_compute={forced}")
    np.testing.assert_allclose(got, ref, rtol=1e-6, err_msg=f"{strategy} {model} P={P}")
    first = json.loads((tmp_path / "p" / "plan.before-epoch-4.json").read_text())
    now = json.loads((tmp_path / "p" / "plan.json").read_text())
    assert now["snapshot_bounds"] != first["snapshot_bounds"] and now["eval_scale"] > first["eval_scale"] == 1.0
    # the epochs the cut was measured in are warm-up, and the first on the new plan (its one-time exchanges):
    # every steady epoch ran the new plan, past its set-up
    assert [r["warmup"] for r in read_metrics(tmp_path / "p")] == [True] * 5 + [False]
    assert now["kind"] == first["kind"] == ("pss" if strategy == "pss" else "snapshot")


def test_recut_setup_bytes_are_counted(launcher, small_dataset, tmp_path):
    """summary.json's setup transfer includes the re-cut's second setup: with ``transfer: base`` every snapshot
    moves once per setup whatever the plan, so a re-cut run reports exactly twice an uncut run's bytes."""
    job = write_job(tmp_path / "job.yaml", small_dataset, model={"name": "tmgcn"},
                    strategy={"name": "snapshot", "layout": "block", "balance": "measured", "transfer": "base"},
                    train={"epochs": 5, "warmup_epochs": 1})
    _losses_many(launcher, 2, [(job, tmp_path / "cut", ("debug.measured_compute=[1.0,6.0]",)),
                               (job, tmp_path / "uncut", ("strategy.balance=work",))])
    assert (tmp_path / "cut" / "plan.before-epoch-4.json").exists()
    cut, uncut = (json.loads((tmp_path / d / "summary.json").read_text())["transfer"]["setup_bytes"]
                  for d in ("cut", "uncut"))
    assert uncut > 0 and cut == 2 * uncut


def test_recut_survives_resume_bit_for_bit(launcher, small_dataset, tmp_path):
    """A run stopped after the re-cut resumes on the checkpoint's plan, not on a fresh static one."""
    job = write_job(tmp_path / "job.yaml", small_dataset, model={"name": "tmgcn"},
                    strategy={"name": "snapshot", "layout": "block", "balance": "measured"},
                    train={"epochs": 6, "warmup_epochs": 1}, checkpoint={"every": 1})
    force = "debug.measured_compute=[1.0,6.0]"
    # one launch for the straight run and the stopped one; the resume in a fresh process, as after a pre-emption
    procs = launcher.run_many(2, [
        ["run", str(job), "--output", str(tmp_path / "full"), "--set", force],
        ["run", str(job), "--output", str(tmp_path / "part"), "--set", force, "train.epochs=5"]])
    procs.append(launcher.run(2, ["-m", "hpcdgnn", "run", "--resume", str(tmp_path / "part"), "--set",
                                  "train.epochs=6"]))
    for proc in procs:
        assert proc.returncode == 0, proc.stdout + proc.stderr
    full = np.array([[r["loss"], r["grad_norm"]] for r in read_metrics(tmp_path / "full")])
    resumed = np.array([[r["loss"], r["grad_norm"]] for r in read_metrics(tmp_path / "part")])
    assert_same_run(resumed, full)
    assert (json.loads((tmp_path / "part" / "plan.json").read_text())["snapshot_bounds"]
            == json.loads((tmp_path / "full" / "plan.json").read_text())["snapshot_bounds"])


def test_a_run_resumed_before_the_recut_measures_three_epochs_after_its_first(launcher, small_dataset, tmp_path):
    """Stopped after epoch 2 (before the re-cut after epoch 4), the resumed process leaves out its own first
    epoch and measures three: it re-cuts after epoch 2 + 4 = 6, on the same losses as an uncut run."""
    job = write_job(tmp_path / "job.yaml", small_dataset, model={"name": "tmgcn"},
                    strategy={"name": "snapshot", "layout": "block", "balance": "measured"},
                    train={"epochs": 8, "warmup_epochs": 1}, checkpoint={"every": 1})
    force = "debug.measured_compute=[1.0,6.0]"
    plain, _ = _losses(launcher, None, job, tmp_path / "plain")
    _losses(launcher, 2, job, tmp_path / "part", force, "train.epochs=2")
    assert not (tmp_path / "part" / "plan.before-epoch-4.json").exists()
    proc = launcher.run(2, ["-m", "hpcdgnn", "run", "--resume", str(tmp_path / "part"), "--set", "train.epochs=8",
                            force])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (tmp_path / "part" / "plan.before-epoch-6.json").exists()
    assert not (tmp_path / "part" / "plan.before-epoch-4.json").exists()
    resumed = [r["loss"] for r in read_metrics(tmp_path / "part")]
    np.testing.assert_allclose(resumed, plain[:, 0], rtol=1e-6)


def test_a_run_extended_before_its_recut_still_recuts(launcher, small_dataset, tmp_path):
    """A run whose train.epochs ended before the calibration (4 epochs: nothing left to train on a new plan) and
    that is then extended re-cuts over the resumed process's own epochs (after 4 + 4); one that re-cut does not
    calibrate again when resumed (the checkpoint records it)."""
    job = write_job(tmp_path / "job.yaml", small_dataset, model={"name": "tmgcn"},
                    strategy={"name": "snapshot", "layout": "block", "balance": "measured"},
                    train={"epochs": 4, "warmup_epochs": 1})
    force = "debug.measured_compute=[1.0,6.0]"
    _losses(launcher, 2, job, tmp_path / "part", force)
    assert not list((tmp_path / "part").glob("plan.before-epoch-*.json"))
    for epochs in (9, 14):  # the second resume, after the re-cut, has room for another calibration
        proc = launcher.run(2, ["-m", "hpcdgnn", "run", "--resume", str(tmp_path / "part"), "--set",
                                f"train.epochs={epochs}", force])
        assert proc.returncode == 0, proc.stdout + proc.stderr
    assert sorted(p.name for p in (tmp_path / "part").glob("plan.before-epoch-*.json")) == [
        "plan.before-epoch-8.json"]
    # each process's first epoch is warm-up, and the second's epochs up to its re-cut and the one after (the third
    # calibrates none)
    assert [r["warmup"] for r in read_metrics(tmp_path / "part")] == [True] + [False] * 3 + [True] * 6 + [
        False] * 4


def test_wrong_number_of_forced_values_is_one_line(launcher, small_dataset, tmp_path):
    job = write_job(tmp_path / "job.yaml", small_dataset, model={"name": "tmgcn"},
                    strategy={"name": "snapshot", "layout": "block", "balance": "measured"},
                    train={"epochs": 5, "warmup_epochs": 1})
    proc = launcher.run(2, ["-m", "hpcdgnn", "run", str(job), "--output", str(tmp_path / "r"),
                            "--set", "debug.measured_compute=[1.0]"])
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "debug.measured_compute: 1 values for 2 ranks" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.parametrize(("model", "strategy", "in_place"), [
    ("tmgcn", {"layout": "auto"}, True),             # banded: blocks, time halo, the M-transform in place
    ("tmgcn", {"layout": "block"}, True),
    ("tmgcn", {"layout": "block", "time_halo": "off"}, False),  # redistributed: the RNN's horizon split
    ("tmgcn", {"layout": "cyclic"}, False),
    ("cdgcn", {"layout": "block"}, False),           # an RNN: past the horizon without autograd
])
def test_static_work_counts_the_in_place_encoders_backward_over_evaluation_rows(tmp_path, small_dataset, model,
                                                                                strategy, in_place):
    """Under a banded encoder in place the evaluation snapshots' elementwise passes run forward and backward
    (two passes, not one): the static plan then gives the rank of the evaluation snapshots less."""
    from hpcdgnn.partition.timeline import banded_in_place, snapshot_work
    from hpcdgnn.strategies.snapshot import SnapshotStrategy
    job = load_job(write_job(tmp_path / "job.yaml", small_dataset, model={"name": model},
                             strategy={"name": "snapshot", **strategy}))
    manifest = load_manifest(small_dataset)
    plan = plan_snapshots(manifest, 2, job)
    layout = SnapshotStrategy.resolved_layout(job)
    assert banded_in_place(job, layout) is in_place
    assert (layout == "block") is (strategy["layout"] == "block" or in_place)  # auto: blocks exactly when banded
    work = snapshot_work(manifest, job, plan.horizon, layout=layout)
    late = np.arange(manifest.num_snapshots) > plan.horizon
    H, L, N = job.model.hidden, job.model.layers, manifest.num_vertices
    extra = work - snapshot_work(manifest, job, plan.horizon, layout="cyclic")
    np.testing.assert_allclose(extra[late], (L * 5 * N * H) if in_place else 0.0)
    assert not extra[~late].any()  # training snapshots: three passes either way
