"""perf/scaling.py ``run --job``: a user's job file as every run's base (the sweep's P, strategy, epochs and
threads on top), checked on the job files the sweep would write; no run is launched."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.conftest import perf_script


def _planned(monkeypatch, tmp_path, *argv: str) -> list[dict]:
    """The jobs ``scaling.py run ARGV`` would run (its sweep replaced by the plan of it)."""
    scaling = perf_script("scaling")
    planned: list = []

    def plan_only(args):
        planned.extend(scaling._plan_sweep(args, Path(args.out)))
        return [], []

    monkeypatch.setattr(scaling, "run_sweep", plan_only)
    scaling.main(["run", "--out", str(tmp_path / "sweep"), *argv])
    return [yaml.safe_load(e["text"].split("\n", 1)[1]) for e in planned]


def test_a_job_file_is_every_run_s_base(monkeypatch, tmp_path):
    """The trial's user had to restate a job as --model and --set pairs: ``--job`` takes it whole. Its task,
    strategy options, model keys and data path stay; the sweep sets epochs (the job's own unless --epochs) and
    pins threads; another strategy named by --strategy starts from its own defaults, not the job's keys."""
    data = tmp_path / "mine"
    data.mkdir()
    (data / "manifest.json").write_text(json.dumps({}))
    job = tmp_path / "job.yaml"
    job.write_text(yaml.safe_dump({
        "data": {"path": str(data)}, "model": {"name": "tgcn_cell", "hidden": 32},
        "task": {"name": "regression", "horizon": 2},
        "strategy": {"name": "hybrid", "vertex_fractions": [0.5], "groups": 2},
        "train": {"epochs": 6, "lr": 0.003}}))
    jobs = _planned(monkeypatch, tmp_path, "--ranks", "1", "2", "--job", str(job), "--baseline")
    assert len(jobs) == 2
    for j in jobs:
        assert j["data"] == {"path": str(data.resolve()), "validate": "structure"}
        assert j["model"] == {"name": "tgcn_cell", "hidden": 32} and j["task"] == {"name": "regression", "horizon": 2}
        assert j["strategy"] == {"name": "hybrid", "vertex_fractions": [0.5], "groups": 2}
        assert j["train"] == {"epochs": 6, "lr": 0.003, "threads": 1}
    other = _planned(monkeypatch, tmp_path / "b", "--ranks", "1", "--job", str(job), "--strategy", "snapshot",
                     "--epochs", "3", "--hidden", "8", "--baseline")
    assert other[0]["strategy"] == {"name": "snapshot"} and other[0]["train"]["epochs"] == 3
    assert other[0]["model"] == {"name": "tgcn_cell", "hidden": 8} and other[0]["task"]["horizon"] == 2
    # another model: the job's width is its own model's, not the named one's
    named = _planned(monkeypatch, tmp_path / "c", "--ranks", "1", "--job", str(job), "--model", "evolvegcn_o",
                     "--baseline")
    assert named[0]["model"] == {"name": "evolvegcn_o"}, named[0]["model"]


def test_a_job_s_sections_without_a_name_are_hpcdgnn_s_defaults_kept_whole(monkeypatch, tmp_path):
    """A job that names no model or strategy runs hpcdgnn's defaults (cdgcn, snapshot); the sweep gave its
    own generated-graph default (tmgcn) and dropped the sections' keys (layers, blocks) as another model's. An
    empty section (``task:``), which hpcdgnn takes as its defaults, is a job file too."""
    from hpcdgnn.config.schema import ModelConfig, StrategyConfig, TrainConfig

    data = tmp_path / "mine"
    data.mkdir()
    (data / "manifest.json").write_text("{}")
    job = tmp_path / "job.yaml"
    job.write_text(f"data: {{path: {data}}}\nmodel: {{hidden: 64, layers: 3}}\nstrategy: {{blocks: 2}}\ntask:\n")
    jobs = _planned(monkeypatch, tmp_path, "--ranks", "1", "--job", str(job), "--baseline")
    assert jobs[0]["model"] == {"name": ModelConfig.name, "hidden": 64, "layers": 3}
    assert jobs[0]["strategy"] == {"name": StrategyConfig.name, "blocks": 2}
    assert jobs[0]["task"] == {} and jobs[0]["train"] == {"epochs": TrainConfig.epochs, "threads": 1}


def test_without_a_job_the_sweep_writes_the_jobs_it_wrote_before(monkeypatch, tmp_path):
    """An earlier sweep's job files must read as the same settings (a re-run continues it only then)."""
    data = tmp_path / "g"
    data.mkdir()
    (data / "manifest.json").write_text("{}")
    jobs = _planned(monkeypatch, tmp_path, "--ranks", "1", "--data", str(data), "--baseline")
    assert jobs == [{"data": {"path": str(data.resolve()), "validate": "structure"},
                     "model": {"name": "tmgcn", "hidden": 16}, "strategy": {"name": "snapshot"},
                     "train": {"epochs": 4, "threads": 1}}]


@pytest.mark.parametrize("text, said", [("data: [1, 2\n", "--job "), ("- a\n- b\n", "not a job file")])
def test_a_job_that_is_no_job_file_is_refused_in_one_line(monkeypatch, tmp_path, capsys, text, said):
    job = tmp_path / "job.yaml"
    job.write_text(text)
    with pytest.raises(SystemExit) as e:
        _planned(monkeypatch, tmp_path, "--ranks", "1", "--job", str(job))
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.count("\n") == 1 and said in err and str(job) in err, err
