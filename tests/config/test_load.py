"""Strict config loading: unknown keys, wrong types and bad values are one-line errors naming file and key."""

from __future__ import annotations

import time

import pytest

from hpcdgnn.config import job_to_dict, load_job
from hpcdgnn.errors import ConfigError
from tests.conftest import write_job


def _job(tmp_path, small_dataset, text: str):
    p = tmp_path / "job.yaml"
    p.write_text(f"data: {{path: {small_dataset}}}\n" + text)
    return p


def test_defaults_and_overrides(tmp_path, small_dataset):
    p = _job(tmp_path, small_dataset, "train: {epochs: 4}\n")
    job = load_job(p, ["train.lr=0.5", "model.name=tmgcn", "task.split=[0.5, 0.25, 0.25]"])
    assert job.train.epochs == 4 and job.train.lr == 0.5 and job.model.name == "tmgcn"
    assert job.task.split == (0.5, 0.25, 0.25)
    d = job_to_dict(job)
    assert d["train"]["epochs"] == 4 and d["strategy"]["name"] == "snapshot" and d["task"]["split"] == [0.5, 0.25, 0.25]


@pytest.mark.parametrize(
    ("text", "overrides", "needles"),
    [
        ("train: {epochz: 3}\n", [], ["train.epochz", "unknown key", "did you mean 'epochs'"]),
        ("trian: {epochs: 3}\n", [], ["trian", "did you mean 'train'"]),
        ("train: {epochs: '3'}\n", [], ["train.epochs", "expected an integer"]),
        ("train: {epochs: 2.5}\n", [], ["train.epochs", "expected an integer"]),
        ("train: {dtype: float16}\n", [], ["train.dtype", "float32, float64"]),
        ("model: {name: gcn}\n", [], ["model.name", "cdgcn"]),
        ("train: {epochs: 0}\n", [], ["train.epochs", ">= 1"]),
        ("strategy: {name: pss-ts2}\n", [], ["strategy.name", "choose from", "snapshot"]),
        ("", ["train.epochs=x"], ["train.epochs", "expected an integer"]),
        ("", ["train.nope=1"], ["train.nope", "unknown key"]),
        ("", ["novalue"], ["--set novalue", "KEY=VALUE"]),
        ("task: {split: [0.5, 0.5]}\n", [], ["task.split"]),
    ],
)
def test_errors_name_file_and_key(tmp_path, small_dataset, text, overrides, needles):
    p = _job(tmp_path, small_dataset, text)
    with pytest.raises(ConfigError) as e:
        load_job(p, overrides)
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(str(p))
    for n in needles:
        assert n in msg, (n, msg)


def test_missing_dataset_directory(tmp_path):
    p = tmp_path / "job.yaml"
    p.write_text("data: {path: /nonexistent/ds}\n")
    with pytest.raises(ConfigError, match=r"job.yaml: data.path: dataset directory '/nonexistent/ds' does not exist"):
        load_job(p)


def _one_error_line(proc, needles):
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout
    lines = [ln for ln in proc.stderr.splitlines() if "hpcdgnn: error:" in ln]
    assert len(lines) == 1, proc.stderr  # reported once, by rank 0
    for n in needles:
        assert n in lines[0], (n, lines[0])


@pytest.mark.parametrize(
    ("section", "needles"),
    [
        ({"train": {"epochz": 3}}, ["job.yaml", "train.epochz", "did you mean 'epochs'"]),
        ({"train": {"epochs": "three"}}, ["job.yaml", "train.epochs", "expected an integer"]),
        ({"data": {"path": "/no/such/dataset"}}, ["job.yaml", "data.path", "/no/such/dataset"]),
    ],
)
def test_config_errors_under_mpirun(launcher, tmp_path, small_dataset, section, needles):
    job = write_job(tmp_path / "job.yaml", small_dataset, **section)
    t0 = time.monotonic()
    proc = launcher.run(2, ["-m", "hpcdgnn", "run", str(job)], timeout=60)
    assert time.monotonic() - t0 < 60
    _one_error_line(proc, needles)


def test_yaml_off_is_the_word_off(tmp_path):
    """YAML 1.1 reads a bare `off` as false; a choice list that offers "off" gets the word back."""
    from hpcdgnn.config import load_job

    (tmp_path / "data").mkdir()
    job = tmp_path / "job.yaml"
    job.write_text(f"data: {{path: {tmp_path / 'data'}}}\nstale: {{mode: off}}\n")
    assert load_job(job).stale.mode == "off"
    assert load_job(job, ["stale.mode=static", "strategy.name=vertex"]).stale.mode == "static"


def test_blocks_need_a_strategy_that_implements_them(tmp_path):
    """train.blocks > 1 with a strategy that has no checkpoint blocks is refused at load, naming the key."""
    import pytest

    from hpcdgnn.config import load_job
    from hpcdgnn.errors import ConfigError

    (tmp_path / "data").mkdir()
    job = tmp_path / "job.yaml"
    job.write_text(f"data: {{path: {tmp_path / 'data'}}}\ntrain: {{blocks: 2}}\n")
    assert load_job(job).train.blocks == 2  # snapshot implements them
    for name in ("pss", "vertex", "chunk"):
        with pytest.raises(ConfigError, match=r"train.blocks: .* implemented for strategy snapshot only"):
            load_job(job, [f"strategy.name={name}"])


# a technique a strategy would silently not apply is a config error instead, naming the key
STRATEGY_TECHNIQUES = [
    ("stale: {mode: adaptive}", "stale.mode: adaptive is implemented for strategy chunk, vertex only",
     ["vertex", "chunk"]),
    ("strategy: {workload: mlp}", "strategy.workload: mlp is used by strategy chunk only", ["chunk"]),
    ("strategy: {sequences: active}", "strategy.sequences: active is implemented for strategy chunk only",
     ["chunk"]),
]


@pytest.mark.parametrize(("section", "message", "accepting"), STRATEGY_TECHNIQUES)
def test_a_technique_needs_a_strategy_that_applies_it(tmp_path, section, message, accepting):
    (tmp_path / "data").mkdir()
    job = tmp_path / "job.yaml"
    job.write_text(f"data: {{path: {tmp_path / 'data'}}}\nmodel: {{name: tgcn}}\n{section}\n")
    with pytest.raises(ConfigError, match=message):
        load_job(job)
    for name in accepting:
        load_job(job, [f"strategy.name={name}"])


def test_active_sequences_need_an_rnn(tmp_path):
    """strategy.sequences: active with a time encoder that is not a GRU or LSTM is refused."""
    (tmp_path / "data").mkdir()
    job = tmp_path / "job.yaml"
    job.write_text(f"data: {{path: {tmp_path / 'data'}}}\nstrategy: {{name: chunk, sequences: active}}\n")
    with pytest.raises(ConfigError, match="needs a model whose time encoder is a GRU or LSTM.*'tmgcn'"):
        load_job(job, ["model.name=tmgcn"])
    assert load_job(job, ["model.name=tgcn"]).strategy.sequences == "active"
