"""Stale-aggregation caches survive checkpoints (issue 11): ``run --resume`` reproduces the straight run bit for bit.

The caches of :class:`~hpcdgnn.strategies.stale.StaleHalo` decide which halo rows are
reused, so a resumed run that restarted them cold would send every row in its first
epoch and depart from the uninterrupted run from then on. Each combination below runs
E epochs straight (with a checkpoint at k) and ``--resume`` from the checkpoint at k to E,
under a real mpirun at P = 2, and compares every epoch's loss, gradient norm and whole ``stale`` record
exactly. The data are learnable (labels are the sign of a constant feature), so the
loss falls and the adaptive θ, which starts at 0 and grows with the loss decrease,
becomes large enough to reuse rows after the resume point: the tests check that reuse
happens there, or they could not fail.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from hpcdgnn.data.writer import RawSnapshot, write_dataset
from hpcdgnn.partition.workload import STRUCTURE_INPUTS, TIME_INPUTS, MLPWorkload
from hpcdgnn.profile.fit import fit_mlp
from hpcdgnn.train.checkpoint import latest_checkpoint
from tests.conftest import REPO, SMALL_N, SMALL_T, read_metrics, write_job

EPOCHS, RESUME_AT = 10, 6  # E and k
STRATEGIES = {"vertex": {"name": "vertex"}, "chunk": {"name": "chunk", "chunk_size": 8}}
# each strategy and each mode once; and link prediction, which scores rows where they live and fetches the
# destination rows it lacks through caches of their own (StaleFetch): they must survive the resume too
COMBOS = [("vertex", "static", "node_classification"), ("chunk", "adaptive", "node_classification"),
          ("vertex", "static", "link_prediction")]


def _learnable_snapshots(T: int, N: int, m: int, seed: int):
    """Sparse random edges (so Ã·X stays close to X), constant features, labels = sign of feature 0."""
    base = np.random.default_rng(seed)
    x = base.normal(size=(N, 2))
    labels = (x[:, 0] > 0).astype(np.int64)
    for t in range(T):
        rng = np.random.default_rng([seed, t])
        s, d = rng.integers(0, N, m), rng.integers(0, N, m)
        keep = s != d
        yield RawSnapshot(s[keep], d[keep], x=x, labels=labels)


@pytest.fixture(scope="module")
def stale_runs(launcher, tmp_path_factory):
    """``get(strategy, mode, task)`` runs a combination once for the module (the runs dominate the time).

    It returns the straight run's records, the resumed run's records, the resume's output and a copy
    of the k-epoch run made before the resume (for tests that resume it differently).
    """
    tmp = tmp_path_factory.mktemp("resume_state")
    data = tmp / "data"
    write_dataset(data, _learnable_snapshots(SMALL_T, SMALL_N, 12, 7), num_vertices=SMALL_N, num_classes=2,
                  shard_snapshots=3, feature_names=["a", "b"])
    done: dict[tuple[str, str], tuple] = {}

    def get(strategy: str, mode: str, task: str = "node_classification"):
        if (strategy, mode, task) in done:
            return done[strategy, mode, task]
        where = tmp / f"{strategy}-{mode}-{task}"
        where.mkdir()
        # adaptive θ = theta · D · tanh(norm / 2) stays small: its ceiling is needed for any reuse by epoch E
        stale = {"mode": mode, "theta": 1.0 if mode == "adaptive" else 0.5}
        # the straight run also writes a checkpoint at k (saving state changes nothing it computes); a copy
        # of it without the final checkpoint is the k-epoch run to resume: two launches, not three
        job = write_job(where / "job.yaml", data, task={"name": task},
                        train={"epochs": EPOCHS, "lr": 0.1}, strategy={**STRATEGIES[strategy], "stale": stale},
                        checkpoint={"every": RESUME_AT, "keep": 3})
        straight = where / "straight"
        proc = launcher.run(2, ["-m", "hpcdgnn", "run", str(job), "--output", str(straight)])
        assert proc.returncode == 0, proc.stderr
        part = Path(shutil.copytree(straight, where / "part"))
        shutil.rmtree(part / "checkpoints" / f"epoch-{EPOCHS:06d}")
        assert latest_checkpoint(part / "checkpoints").name == f"epoch-{RESUME_AT:06d}"
        at_k = shutil.copytree(part, where / "part-at-k")  # untouched by the resume, for other tests
        proc = launcher.run(2, ["-m", "hpcdgnn", "run", "--resume", str(part), "--set", f"train.epochs={EPOCHS}"])
        assert proc.returncode == 0, proc.stderr
        done[strategy, mode, task] = (read_metrics(straight), read_metrics(part), proc.stdout + proc.stderr,
                                      Path(at_k))
        return done[strategy, mode, task]

    return get


@pytest.mark.parametrize(("strategy", "mode", "task"), COMBOS, ids=[f"{s}-{m}-{t}" for s, m, t in COMBOS])
def test_resumed_stale_run_equals_straight_run(stale_runs, strategy, mode, task):
    """E epochs straight == k epochs, then --resume to E: loss, grad_norm and ``stale`` equal (==) every epoch."""
    straight, resumed, out, _ = stale_runs(strategy, mode, task)
    assert "resumed from" in out
    assert [r["epoch"] for r in straight] == [r["epoch"] for r in resumed] == list(range(1, EPOCHS + 1))
    # the straight run reuses rows after the resume point, so cold caches there would show
    assert any(r["stale"]["rows_reused"] > 0 for r in straight[RESUME_AT:]), [r["stale"] for r in straight]
    assert all(r["stale"]["mode"] == mode for r in straight)
    for a, b in zip(straight, resumed, strict=True):
        assert (a["epoch"], a["loss"], a["grad_norm"]) == (b["epoch"], b["loss"], b["grad_norm"])
        assert a["stale"] == b["stale"], f"epoch {a['epoch']}"
        # the resumed process's first epoch also redoes the run's one-time moves (chunk: Ã·X to the RNN owners)
        if a["epoch"] != RESUME_AT + 1:
            assert a["bytes_by_tag"] == b["bytes_by_tag"], f"epoch {a['epoch']}"


def test_resume_on_other_rank_count_is_refused(launcher, stale_runs, tmp_path):
    """The caches belong to the P = 2 partition: resuming on P = 3 stops with one line and exit 2."""
    _, _, _, at_k = stale_runs("vertex", "static")
    run = Path(shutil.copytree(at_k, tmp_path / "run"))
    before = (run / "metrics.jsonl").read_text()
    proc = launcher.run(3, ["-m", "hpcdgnn", "run", "--resume", str(run), "--set", f"train.epochs={EPOCHS}"],
                        timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if "hpcdgnn: error:" in line]
    assert len(errors) == 1, proc.stderr
    assert "re-partitioned" in errors[0] and "3 ranks" in errors[0], errors[0]
    assert "start a new run" in errors[0], errors[0]
    assert (run / "metrics.jsonl").read_text() == before  # nothing was trained or truncated


def _straight_and_resumed(launcher, job: Path, where: Path, epochs: int, at: int, resume_argv=None, between=None,
                          first=()):
    """``epochs`` straight at P = 2 with checkpoints every ``at`` (in one launch after the ``python -m hpcdgnn``
    command lines ``first``, each to finish normally); a copy cut back to ``at`` and resumed with ``resume_argv``
    (default ``-m hpcdgnn``) after ``between()``: (straight records, resumed records, output)."""
    straight = where / "straight"
    for proc in launcher.run_many(2, [*first, ["run", str(job), "--output", str(straight)]]):
        assert proc.returncode == 0, proc.stderr
    part = Path(shutil.copytree(straight, where / "part"))
    for ck in (part / "checkpoints").glob("epoch-*"):
        if int(ck.name.split("-")[1]) > at:
            shutil.rmtree(ck)
    if between is not None:
        between()
    proc = launcher.run(2, [*(resume_argv or ["-m", "hpcdgnn"]), "run", "--resume", str(part)])
    assert proc.returncode == 0, proc.stderr
    return read_metrics(straight), read_metrics(part), proc.stdout + proc.stderr


def _same_records(straight, resumed, at):
    assert [r["epoch"] for r in resumed] == [r["epoch"] for r in straight]
    for a, b in zip(straight, resumed, strict=True):
        assert (a["loss"], a["grad_norm"]) == (b["loss"], b["grad_norm"]), f"epoch {a['epoch']}"
        assert a.get("fusion") == b.get("fusion"), f"epoch {a['epoch']}"
        if a["epoch"] != at + 1:
            assert a["bytes_by_tag"] == b["bytes_by_tag"], f"epoch {a['epoch']}"


def test_resume_on_a_node_of_other_memory_keeps_the_fusion_groups(launcher, small_dataset, tmp_path):
    """``fusion_memory_mb: auto`` asks the node; a run requeued on a node with less memory per rank
    (``tests/mpi/node_shape.py --memory-mib``) regroups under the checkpoint's cap and continues as the
    straight run. The small cap alone groups otherwise, so the test could fail."""
    job = write_job(tmp_path / "job.yaml", small_dataset, train={"epochs": 4},
                    strategy={"name": "chunk", "chunk_size": 4, "fusion_memory_mb": "auto"},
                    checkpoint={"every": 2})
    shape = [str(REPO / "tests" / "mpi" / "node_shape.py"), "--memory-mib", "0.0005", "--"]
    small = tmp_path / "small"
    proc = launcher.run(2, [*shape, "run", str(job), "--output", str(small), "--set", "train.epochs=1"])
    assert proc.returncode == 0, proc.stderr
    straight, resumed, out = _straight_and_resumed(launcher, job, tmp_path, 4, 2, resume_argv=shape)
    assert read_metrics(small)[0]["fusion"]["groups"] != straight[0]["fusion"]["groups"], "the cap changes nothing"
    assert "fusion: regrouped under the checkpoint's cap" in out
    _same_records(straight, resumed, 2)


def _predictor(path: Path, sign: float) -> Path:
    """A tiny chunk-work predictor for cdgcn (hidden 6, float64); ``sign`` flips which chunks it calls costly."""
    rng = np.random.default_rng(5)
    xs, xt = rng.normal(size=(40, len(STRUCTURE_INPUTS))), rng.normal(size=(40, len(TIME_INPUTS)))
    s = fit_mlp(xs, np.exp(sign * xs[:, 0]) * 1e-4, STRUCTURE_INPUTS, width=8, steps=50)
    t = fit_mlp(xt, np.exp(sign * xt[:, 0]) * 1e-4, TIME_INPUTS, width=8, steps=50)
    meta = {"model": "cdgcn", "device": "cpu", "dtype": "float64", "features": [2], "hidden": [6], "window": 3}
    return MLPWorkload(s, t, meta).save(path)


def test_resume_keeps_the_plan_when_the_predictor_file_changed(launcher, small_dataset, tmp_path):
    """``workload: mlp`` cuts the plan from the predictor file's contents; on the same P a resumed run continues
    on the checkpoint's plan, not on a cut from the file as it is now."""
    pred = _predictor(tmp_path / "pred.pt", 1.0)
    other = _predictor(tmp_path / "other.pt", -1.0)
    job = write_job(tmp_path / "job.yaml", small_dataset, train={"epochs": 4},
                    strategy={"name": "chunk", "chunk_size": 4, "workload": "mlp", "predictor": str(pred)},
                    checkpoint={"every": 2})
    cut = tmp_path / "cut-by-other"
    # the run cut by the other predictor in the straight run's launch, before it
    first = [["run", str(job), "--output", str(cut), "--set", "train.epochs=1", f"strategy.predictor={other}"]]
    straight, resumed, _ = _straight_and_resumed(launcher, job, tmp_path, 4, 2,
                                                 between=lambda: shutil.copyfile(other, pred), first=first)
    assert (cut / "plan.json").read_text() != (tmp_path / "straight" / "plan.json").read_text(), "same cut"
    assert (tmp_path / "part" / "plan.json").read_text() == (tmp_path / "straight" / "plan.json").read_text()
    _same_records(straight, resumed, 2)
    # nor is the file read at all: a resume on a machine without it (the default path is per machine)
    part = Path(shutil.copytree(tmp_path / "straight", tmp_path / "gone"))
    shutil.rmtree(part / "checkpoints" / "epoch-000004")
    pred.unlink()
    proc = launcher.run(2, ["-m", "hpcdgnn", "run", "--resume", str(part)])
    assert proc.returncode == 0, proc.stderr
    _same_records(straight, read_metrics(part), 2)
