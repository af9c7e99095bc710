"""Bad data under mpirun -np 3: every rank exits non-zero quickly and the message names the file."""

from __future__ import annotations

import json
import shutil
import time

import numpy as np
import pytest

from tests.conftest import read_metrics, write_job


@pytest.mark.parametrize("fault", ["missing", "truncated", "no_manifest"])
def test_bad_shard_ends_every_rank(launcher, tmp_path, small_dataset, fault):
    data = tmp_path / "ds"
    shutil.copytree(small_dataset, data)
    shard = data / "shards" / "shard-00001.h5"  # snapshots 3..5: owned by rank 1 at P = 3
    if fault == "missing":
        shard.unlink()
        named = str(shard)
    elif fault == "truncated":
        size = shard.stat().st_size
        with open(shard, "r+b") as f:
            f.truncate(size // 2)
        named = str(shard)
    else:
        (data / "manifest.json").unlink()
        named = str(data / "manifest.json")
    job = write_job(tmp_path / "job.yaml", data)
    t0 = time.monotonic()
    proc = launcher.run(3, ["-m", "hpcdgnn", "run", str(job)], timeout=60)
    elapsed = time.monotonic() - t0
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-2000:])  # a user's error, not a crash's 1
    assert elapsed < 30, f"took {elapsed:.1f}s"
    errors = [line for line in proc.stderr.splitlines() if "hpcdgnn: error:" in line]
    assert len(errors) == 1 and named in errors[0], proc.stderr
    assert "Traceback" not in proc.stderr


def test_exception_on_one_rank_aborts_job(launcher, tmp_path):
    """A crash (not a user error) on one rank prints 'rank R/P:' with the traceback and ends the job."""
    script = tmp_path / "crash.py"
    script.write_text(
        "import sys\n"
        "from hpcdgnn.__main__ import _install_abort_hook\n"
        "from hpcdgnn.comm import Communicator\n"
        "c = Communicator(); _install_abort_hook(c)\n"
        "if c.rank == 1:\n"
        "    raise RuntimeError('injected fault')\n"
        "c.barrier()  # ranks 0 and 2 would wait here forever without the abort\n"
    )
    t0 = time.monotonic()
    proc = launcher.run(3, [str(script)], timeout=60)
    assert proc.returncode != 0
    assert time.monotonic() - t0 < 30
    assert "rank 1/3:" in proc.stderr and "injected fault" in proc.stderr


@pytest.mark.parametrize(("dtype", "advice"), [("float32", "lower train.lr or use train.dtype: float64 ("),
                                                ("float64", "lower train.lr (")])
def test_the_diverged_line_advises_float64_to_a_float32_run_only(tmp_path, dtype, advice):
    """The line's fix: a lower learning rate, and float64 only where the run was not in float64 already."""
    from types import SimpleNamespace

    from hpcdgnn.train.trainer import _diverged

    run = SimpleNamespace(run_dir=tmp_path, job=SimpleNamespace(train=SimpleNamespace(dtype=dtype)))
    line = str(_diverged(run, SimpleNamespace(root=tmp_path / "checkpoints"), 3, float("nan")))
    assert f"epoch 3: the training loss is nan: training diverged; {advice}" in line, line


def test_a_diverged_run_stops_with_one_line_and_keeps_its_last_finite_checkpoint(launcher, small_dataset, tmp_path):
    """A training loss that is no longer finite (here train.lr = 1e30) stops every rank: one line, exit 2,
    summary status ``diverged``, no checkpoint of that epoch, so the newest one (kept) is finite."""
    job = write_job(tmp_path / "job.yaml", small_dataset, train={"epochs": 6, "lr": 1e30, "dtype": "float32"},
                    checkpoint={"every": 1, "keep": 2})
    run = tmp_path / "run"
    proc = launcher.run(2, ["-m", "hpcdgnn", "run", str(job), "--output", str(run)], timeout=120)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    errors = [line for line in proc.stderr.splitlines() if "hpcdgnn: error:" in line]
    assert len(errors) == 1 and "Traceback" not in proc.stderr, proc.stderr
    records = read_metrics(run)
    bad = records[-1]
    # metrics.jsonl writes a NaN as null (JSON has no NaN)
    assert bad["train_loss"] is None and all(np.isfinite(r["train_loss"]) for r in records[:-1]), records
    # a NaN model's scores are no ranking: its AUC and accuracy are null too (they read 0.5 and a class's share),
    # in the record and in the summary's final metrics
    assert all(bad[f"{s}_{m}"] is None for s in ("val", "test") for m in ("auc", "acc")), bad
    final = json.loads((run / "summary.json").read_text())["final"]
    assert final["val_auc"] is None and final["test_auc"] is None, final
    assert f"epoch {bad['epoch']}: the training loss is nan: training diverged" in errors[0], errors[0]
    assert json.loads((run / "summary.json").read_text())["status"] == "diverged"
    kept = sorted(p.name for p in (run / "checkpoints").iterdir())
    assert kept == [f"epoch-{e:06d}" for e in range(max(1, bad["epoch"] - 2), bad["epoch"])], kept
    assert (f"newest checkpoint, before it: epoch-{bad['epoch'] - 1:06d}" in errors[0]) == (bad["epoch"] > 1)


def test_a_run_that_diverged_in_the_epoch_a_stop_came_is_not_a_clean_stop(small_dataset, tmp_path, monkeypatch):
    """A SIGTERM during the epoch in which the loss became NaN (here lr = 1e30: epoch 2): the run ends diverged
    (exit 2, no checkpoint of that epoch), yet the trainer settled the stop flag as after a clean stop, so a
    second SIGTERM while the process ended (MPI's finalize waits for every rank) exited 75, "stopped with its
    checkpoint and summary.json written": the job was requeued into a run a job script does not resume. Only a
    clean stop settles the flag."""
    import signal

    import hpcdgnn
    from hpcdgnn import preemption
    from hpcdgnn.errors import ConfigError
    from hpcdgnn.train import trainer

    job = write_job(tmp_path / "job.yaml", small_dataset, train={"epochs": 6, "lr": 1e30, "dtype": "float32"},
                    checkpoint={"every": 1})
    original, settled = trainer.train_epoch, []

    def signalled(run, task, epoch, *args, **kwargs):
        if epoch == 2:  # the diverging one
            preemption._FLAG.handle(signal.SIGTERM, None)
        return original(run, task, epoch, *args, **kwargs)

    monkeypatch.setattr(trainer, "train_epoch", signalled)
    monkeypatch.setattr(preemption.PreemptionFlag, "settle", lambda self: settled.append(True))
    with pytest.raises(ConfigError, match="epoch 2: the training loss is nan: training diverged"):
        hpcdgnn.train(job, output=tmp_path / "run")
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["status"] == "diverged"
    assert not settled
