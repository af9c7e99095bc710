"""The regime registry: every model, task and strategy in exactly one regime; options by name; no name checks."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from hpcdgnn.config import load_job
from hpcdgnn.errors import ConfigError
from hpcdgnn.nn.models import available_models
from hpcdgnn.regimes import RegimeSpec, job_regime, names, options_class, regime_of, regimes, register_regime
from hpcdgnn.strategies import available_strategies
from hpcdgnn.tasks import task_class
from hpcdgnn.train.setup import check_model_strategy, load_dataset_manifest
from tests.conftest import write_job

PACKAGE = Path(__file__).resolve().parents[2] / "hpcdgnn"


def test_every_registered_name_is_in_exactly_one_regime():
    assert sorted(names("strategy")) == available_strategies()
    assert set(available_models()) | {"tgn"} == set(names("model"))
    for task in names("task"):
        task_class(task)  # every regime task has an implementation
    for section in ("model", "task", "strategy"):
        every = [n for r in regimes() for n in r.names(section)]
        assert len(every) == len(set(every)), section


def test_a_second_regime_cannot_claim_a_name():
    timeline = regime_of("strategy", "snapshot")
    clash = RegimeSpec(**{**timeline.__dict__, "name": "other"})
    with pytest.raises(ValueError, match="in two regimes"):
        register_regime(clash)
    with pytest.raises(ValueError, match="registered twice"):
        register_regime(timeline)


def test_options_live_with_their_model(tmp_path, small_dataset):
    """No TGN key on a GCN, no M-transform window on CD-GCN; the message says who takes the key."""
    assert "memory_dim" in {f for f in options_class("model", "tgn").__dataclass_fields__}
    assert "memory_dim" not in options_class("model", "cdgcn").__dataclass_fields__
    cases = [({"name": "cdgcn", "memory_dim": 8},
              "model.memory_dim: not an option of model 'cdgcn'.*model tgn accepts"),
             ({"name": "cdgcn", "window": 2}, "model.window: not an option of model 'cdgcn'.*model tmgcn accepts"),
             ({"name": "tgn", "layers": 3}, "model.layers: not an option of model 'tgn'"),
             ({"name": "gcn"}, "model.name: unknown 'gcn'; choose from cdgcn, ")]
    for model, needle in cases:
        with pytest.raises(ConfigError, match=needle):
            load_job(write_job(tmp_path / "job.yaml", small_dataset, model=model), [])
    job = load_job(write_job(tmp_path / "job.yaml", small_dataset, model={"name": "tmgcn", "window": 2}), [])
    assert job.model.window == 2 and job.model.model_args() == {"window": 2}


@pytest.mark.parametrize(("sections", "needle"), [
    ({"model": {"name": "tgn"}, "strategy": {"name": "snapshot"}},
     "model.name: tgn needs task.name: temporal_link_prediction and strategy.name: memory, not task.name: "
     r"link_prediction, strategy.name: snapshot \(the event-stream"),
    ({"strategy": {"name": "memory"}}, "model.name: cdgcn needs strategy.name: snapshot or pss or vertex or chunk or "
                                       r"grid or sequences or hybrid or auto, not strategy.name: memory \(the "
                                       "snapshot-timeline regime"),
    ({"task": {"name": "temporal_link_prediction"}}, "model.name: cdgcn needs task.name: link_prediction or"),
])
def test_a_job_mixing_regimes_is_one_line(tmp_path, small_dataset, sections, needle):
    job = load_job(write_job(tmp_path / "job.yaml", small_dataset, **sections), [])
    with pytest.raises(ConfigError, match=needle):
        check_model_strategy(job, "job.yaml", 2)


def test_names_a_job_leaves_out_are_its_model_s_regime_s():
    """``model: {name: tgn}`` alone was refused twice in a row ("needs strategy.name: memory, not snapshot", then
    "needs task.name: temporal_link_prediction"), names the user never gave: a left-out ``task.name`` or
    ``strategy.name`` is now the model's regime's; a given one is kept (and refused if of another regime)."""
    from hpcdgnn.config.load import load_job_dict

    def names(raw, *overrides):
        job = load_job_dict({"data": {"path": "d"}, **raw}, "job.yaml", list(overrides), check_paths=False)
        return job.task.name, job.strategy.name

    assert names({"model": {"name": "tgn"}}) == ("temporal_link_prediction", "memory")
    assert names({}, "model.name=tgn") == ("temporal_link_prediction", "memory")
    assert names({"model": {"name": "tgn"}, "task": {"negatives": 2}, "strategy": {"minibatch": 1}}) == (
        "temporal_link_prediction", "memory")
    assert names({"model": {"name": "tgn"}, "strategy": {"name": "snapshot"}}) == (
        "temporal_link_prediction", "snapshot")
    assert names({}) == names({"model": {"name": "tmgcn"}}) == ("link_prediction", "snapshot")
    assert names({"model": {"name": "cdgcn"}, "strategy": {"name": "memory"}}) == ("link_prediction", "memory")


def test_the_regime_reads_its_own_kind_of_data(tmp_path, small_dataset):
    job = load_job(write_job(tmp_path / "job.yaml", small_dataset, model={"name": "tgn"},
                             task={"name": "temporal_link_prediction"}, strategy={"name": "memory"}), [])
    assert job_regime(job, "job.yaml").data_kind == "events"
    with pytest.raises(ConfigError, match="is a snapshot dataset, but model.name: tgn reads an event-stream dataset"):
        load_dataset_manifest(job, "job.yaml")


def _name_comparisons(path: Path, registered: set[str]) -> list[str]:
    """``x == "name"``, ``x != "name"``, ``x in ("name", …)`` and ``_LIST = ("name", …)`` with a registered
    model, task or strategy name, in one module."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        consts: list = []
        if isinstance(node, ast.Compare):
            for side in (node.left, *node.comparators):
                elts = side.elts if isinstance(side, (ast.Tuple, ast.List, ast.Set)) else [side]
                consts += [e.value for e in elts if isinstance(e, ast.Constant)]
        elif isinstance(node, ast.Assign) and isinstance(node.value, (ast.Tuple, ast.List, ast.Set)):
            consts += [e.value for e in node.value.elts if isinstance(e, ast.Constant)]
        hits = [c for c in consts if isinstance(c, str) and c in registered]
        if hits:
            found.append(f"{path}:{node.lineno}: {hits}")
    return found


def _option_values() -> set[str]:
    """Every ``Literal`` value of the config schema's options (``auto``, ``on``, ``off``, …)."""
    import dataclasses
    import typing

    from hpcdgnn.config import schema

    values: set[str] = set()
    classes = [c for c in vars(schema).values() if dataclasses.is_dataclass(c)]
    classes += [options_class(s, n) for s in ("model", "task", "strategy") for n in names(s)]
    for cls in classes:
        for tp in typing.get_type_hints(cls).values():
            for arg in (tp, *typing.get_args(tp)):
                if typing.get_origin(arg) is typing.Literal:
                    values |= {v for v in typing.get_args(arg) if isinstance(v, str)}
    return values


def test_train_and_config_never_compare_a_registered_name(tmp_path):
    """Regimes join by contract: train/ and config/ ask the regime specs, strategies and tasks, and never
    test which model, task or strategy a job names (the registries themselves may). A name that is also an
    option's value (``strategy: auto`` and ``train.device: auto``) cannot be told apart here and is left out."""
    registered = (set(names("model")) | set(names("task")) | set(names("strategy"))) - _option_values()
    assert "auto" not in registered and "snapshot" in registered
    found = [hit for sub in ("train", "config") for path in sorted((PACKAGE / sub).rglob("*.py"))
             for hit in _name_comparisons(path, registered)]
    assert found == []
    # the check itself finds such a comparison
    probe = tmp_path / "probe.py"
    probe.write_text('def f(job):\n    return job.model.name == "tgn" or job.strategy.name in ("pss", "x")\n')
    assert len(_name_comparisons(probe, registered)) == 2


def test_a_run_resolved_by_an_older_hpcdgnn_still_loads(tmp_path, small_dataset):
    """Its config.resolved.yaml listed every model's keys at their defaults; a job file may not."""
    old = {"name": "cdgcn", "hidden": 6, "layers": 2, "window": 3, "order": 2, "memory_dim": 100, "heads": 2}
    path = write_job(tmp_path / "config.resolved.yaml", small_dataset, model=old)
    job = load_job(path, [], resolved=True)
    assert (job.model.name, job.model.hidden, job.model.layers) == ("cdgcn", 6, 2)
    with pytest.raises(ConfigError, match="model.heads: not an option of model 'cdgcn'"):
        load_job(path, [])


def test_every_regime_says_how_to_fill_an_empty_validation_split():
    """The run's empty-validation warning gives the regime's remedy: task.split for snapshots; for an event
    stream, whose split is fixed at prepare, prepare's --split (task.split is refused there)."""
    hints = {r.data_kind: r.empty_split for r in regimes()}
    assert "task.split" in hints["snapshots"] and "prepare" in hints["events"] and "--split" in hints["events"]
    assert "task.split" not in hints["events"]
