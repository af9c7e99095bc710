"""``debug.profile_epoch``: one epoch under torch's profiler on every rank (hpcdgnn/metrics/op_profile.py)."""

from __future__ import annotations

import json
import shutil

import pytest

from hpcdgnn.train.checkpoint import latest_checkpoint
from tests.conftest import read_metrics, write_job


def test_a_profiled_epoch_writes_every_ranks_operators_and_changes_no_result(launcher, tmp_path, small_dataset):
    """P = 3 (T = 7, N = 23: neither divisible): each rank writes its operator table and records for epoch 2,
    the record of that epoch alone is flagged, the summary's steady median leaves it out, and the losses are
    those of the same job unprofiled."""
    runs, commands = {}, []
    for name, debug in (("plain", {}), ("profiled", {"profile_epoch": 2})):
        job = write_job(tmp_path / f"{name}.yaml", small_dataset, train={"epochs": 3, "warmup_epochs": 0},
                        debug=debug)
        runs[name] = tmp_path / name
        commands.append(["run", str(job), "--output", str(runs[name])])
    procs = dict(zip(runs, launcher.run_many(3, commands), strict=True))  # one launch, the plain run first
    for name in runs:
        assert procs[name].returncode == 0, procs[name].stderr
    out = runs["profiled"]
    assert "epoch 2 profiled" in procs["profiled"].stdout + procs["profiled"].stderr
    for rank in range(3):
        rec = json.loads((out / "profile" / f"rank{rank}.json").read_text())
        assert (rec["epoch"], rec["rank"]) == (2, rank)
        ops = rec["operators"]
        assert ops == sorted(ops, key=lambda o: o["self_cpu_s"], reverse=True)
        names = {o["name"] for o in ops}
        assert any(n.startswith("aten::") for n in names) and all(o["calls"] >= 1 for o in ops)
        assert (out / "profile" / f"rank{rank}.txt").read_text().startswith(f"epoch 2, rank {rank}\n")
    assert not (runs["plain"] / "profile").exists()
    recs = read_metrics(out)
    assert [r.get("profiled", False) for r in recs] == [False, True, False]
    assert [r["loss"] for r in recs] == [r["loss"] for r in read_metrics(runs["plain"])]
    steady = json.loads((out / "summary.json").read_text())["steady_epoch_seconds"]
    times = [r["slowest"]["epoch"] for r in recs]
    assert steady["median"] == pytest.approx((times[0] + times[2]) / 2)  # epochs 1 and 3 (no warm-up here)


def test_a_resume_that_re_runs_the_profiled_epoch_leaves_only_its_ranks_profiles(launcher, tmp_path, small_dataset):
    """Killed after profiling epoch 2 but before its checkpoint, resumed on fewer ranks (3, then 2): the
    re-run profiles epoch 2 again on ranks 0 and 1, and the third rank's file of the first attempt is gone."""
    job = write_job(tmp_path / "job.yaml", small_dataset, train={"epochs": 2}, checkpoint={"every": 1},
                    debug={"profile_epoch": 2})
    run = tmp_path / "run"
    proc = launcher.run(3, ["-m", "hpcdgnn", "run", str(job), "--output", str(run)])
    assert proc.returncode == 0, proc.stderr
    assert sorted(f.name for f in (run / "profile").iterdir()) == [f"rank{r}.{x}" for r in range(3)
                                                                   for x in ("json", "txt")]
    shutil.rmtree(latest_checkpoint(run / "checkpoints"))  # epoch 2's: as if killed before it was written
    proc = launcher.run(2, ["-m", "hpcdgnn", "run", "--resume", str(run)])
    assert proc.returncode == 0, proc.stderr
    assert sorted(f.name for f in (run / "profile").iterdir()) == [f"rank{r}.{x}" for r in range(2)
                                                                   for x in ("json", "txt")]
    assert [r.get("profiled", False) for r in read_metrics(run)] == [False, True]


def test_a_resume_past_the_profiled_epoch_says_that_it_profiles_nothing(launcher, tmp_path, small_dataset):
    """``--set debug.profile_epoch=1`` on a resume from epoch 2 names the epoch and the checkpoint in one line
    and makes no profile; a resume of a run that did profile that epoch says nothing of it."""
    job = write_job(tmp_path / "job.yaml", small_dataset, train={"epochs": 2}, checkpoint={"every": 1})
    run = tmp_path / "run"
    profiled = write_job(tmp_path / "profiled.yaml", small_dataset, train={"epochs": 2}, checkpoint={"every": 1},
                         debug={"profile_epoch": 1})
    # one launch: each of the two runs, then its resume (the commands run in order; the runs' directories differ)
    procs = launcher.run_many(2, [
        ["run", str(job), "--output", str(run)],
        ["run", "--resume", str(run), "--set", "train.epochs=3", "debug.profile_epoch=1"],
        ["run", str(profiled), "--output", str(tmp_path / "profiled")],
        ["run", "--resume", str(tmp_path / "profiled"), "--set", "train.epochs=3"]])
    assert procs[0].returncode == 0, procs[0].stderr
    proc = procs[1]
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout + proc.stderr
    assert "debug.profile_epoch: epoch 1 ran before the checkpoint this run resumes from (epoch 2)" in out
    assert out.count("debug.profile_epoch") == 1  # rank 0's line alone
    assert not (run / "profile").exists()

    run = tmp_path / "profiled"
    assert procs[2].returncode == 0, procs[2].stderr
    proc = procs[3]
    assert proc.returncode == 0, proc.stderr
    assert "debug.profile_epoch" not in proc.stdout + proc.stderr
    assert json.loads((run / "profile" / "rank0.json").read_text())["epoch"] == 1
