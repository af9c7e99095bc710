"""A training regime as one registered spec (STYLE G5, G13; torchtitan's ``TrainSpec``).

Regimes differ in what a batch is and what a dataset holds, not in the loop: the snapshot
timeline (IBM, DGC, ReInc) and the event stream with a node memory (DistTGL). ``config/`` takes
options classes from here (:func:`options_class`) and ``train/`` builds through
:func:`job_regime`'s spec, so neither compares model, task or strategy names.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, fields
from typing import Any, Literal

from hpcdgnn.config.schema import JobConfig, ModelConfig, StrategyConfig, TaskConfig
from hpcdgnn.errors import ConfigError, short_repr

__all__ = ["RegimeSpec", "register_regime", "regimes", "options_class", "regime_of", "names", "job_regime",
           "counted_parameters", "meta_build", "item_bytes", "parameter_bytes"]

Section = Literal["model", "task", "strategy"]


@dataclass(frozen=True)
class RegimeSpec:
    """One training regime.

    Attributes:
        data_kind: the dataset kind it reads (``snapshots`` or ``events``).
        models: ``model.name`` -> its options class, declared beside the model.
        strategies: ``strategy.name`` -> its options class (code: :func:`hpcdgnn.strategies.register_strategy`).
        footprint: (job, manifest, P) -> lower bounds of a rank's bytes (:mod:`hpcdgnn.train.footprint`).
        check: (job, where, P) -> None: rules between model, task and strategy.
    """

    name: str
    #: in messages: what a job of this regime is, e.g. "the event-stream regime (DistTGL)"
    title: str
    data_kind: str
    #: in messages: the datasets it reads, and the commands that make them
    data_title: str
    data_made_by: str
    models: Mapping[str, type[ModelConfig]]
    tasks: Mapping[str, type[TaskConfig]]
    strategies: Mapping[str, type[StrategyConfig]]
    load_manifest: Callable[[str], Any]
    build_model: Callable[[JobConfig, Any], Any]
    build_task: Callable[[Any, Any, int, int], Any]
    footprint: Callable[[JobConfig, Any, int], dict[str, tuple[int, str]]]
    check: Callable[[JobConfig, str | None, int], None]
    #: in the warning that the validation or test split is empty: why it can be, and what to change ({split}:
    #: the split's name)
    empty_split: str = ""

    def task_of(self, job: JobConfig, manifest: Any, model: Any) -> Any:
        """The job's task head over ``model``'s outputs, as a run trains it: a sequence-to-sequence model
        (``predicts_targets``) already outputs Ŷ, so its task keeps no head of its own."""
        task = self.build_task(job.task, manifest, getattr(model, "out_features", job.model.hidden), job.train.seed)
        if getattr(model, "predicts_targets", False):
            task.predict_in_model()
        return task

    def names(self, section: Section) -> tuple[str, ...]:
        """The names this regime registers for ``model``, ``task`` or ``strategy``."""
        return tuple({"model": self.models, "task": self.tasks, "strategy": self.strategies}[section])


_REGIMES: dict[str, RegimeSpec] = {}


def register_regime(spec: RegimeSpec) -> RegimeSpec:
    """Register ``spec``; a regime name, or a model, task or strategy name another regime has, is refused."""
    if spec.name in _REGIMES:
        raise ValueError(f"regime {spec.name!r} registered twice")
    for section in ("model", "task", "strategy"):
        for other in _REGIMES.values():
            both = set(spec.names(section)) & set(other.names(section))
            if both:
                raise ValueError(f"{section} {sorted(both)} in two regimes ({other.name}, {spec.name})")
    _REGIMES[spec.name] = spec
    return spec


def regimes() -> list[RegimeSpec]:
    """Every registered regime, in registration order."""
    return list(_REGIMES.values())


def names(section: Section) -> list[str]:
    """Every registered ``model``, ``task`` or ``strategy`` name, sorted."""
    return sorted(n for r in _REGIMES.values() for n in r.names(section))


def regime_of(section: Section, name: str) -> RegimeSpec:
    """The regime that registers ``section`` name ``name``; KeyError for an unknown one."""
    for r in _REGIMES.values():
        if name in r.names(section):
            return r
    raise KeyError(f"{section}.name: unknown {short_repr(name)}; choose from {', '.join(names(section))}")


def options_class(section: Section, name: str) -> type:
    """The options class of ``model.name``, ``task.name`` or ``strategy.name`` ``name``; KeyError listing the known
    ones."""
    r = regime_of(section, name)
    return {"model": r.models, "task": r.tasks, "strategy": r.strategies}[section][name]


def job_regime(job: JobConfig, where: str | None) -> RegimeSpec:
    """The regime of the job's model, task and strategy; ConfigError naming what the model's regime needs."""
    chosen = {"model": job.model.name, "task": job.task.name, "strategy": job.strategy.name}
    regime = regime_of("model", chosen["model"])
    wrong = [s for s in ("task", "strategy") if chosen[s] not in regime.names(s)]
    if wrong:
        need = " and ".join(f"{s}.name: {' or '.join(regime.names(s))}" for s in wrong)  # type: ignore[arg-type]
        got = ", ".join(f"{s}.name: {chosen[s]}" for s in wrong)
        raise ConfigError(f"{where}: model.name: {chosen['model']} needs {need}, not {got} ({regime.title})")
    return regime


def item_bytes(job: JobConfig) -> int:
    """Bytes of one value of ``train.dtype``."""
    return 8 if job.train.dtype == "float64" else 4


def parameter_bytes(job: JobConfig, weights: int, keys: str) -> tuple[int, str]:
    """Footprint term: ``weights`` parameters with Adam's two moments, and the keys that set them."""
    return 3 * item_bytes(job) * weights, keys


def counted_parameters(job: JobConfig, *build: Callable[[], Any]) -> int:
    """The parameters of the modules each ``build`` makes for ``job``, made on the meta device
    (:func:`meta_build`): exact for any model and option, without memory or initialisation (a job too large for
    the node is refused before it is built)."""
    with meta_build(job):
        return sum(p.numel() for make in build for p in make().parameters())


@contextmanager
def meta_build(job: JobConfig) -> Iterator[None]:
    """The meta device, to build ``job``'s model and task head without memory; a width so large (~1e9) that a
    weight's byte count overflows even there is a ConfigError naming the largest width key of ``model`` and
    ``task`` (``task.decoder_hidden`` too), not torch's RuntimeError."""
    import torch

    try:
        with torch.device("meta"):
            yield
    except (RuntimeError, TypeError) as e:  # TypeError: a size past int64 itself ("Overflow when unpacking long")
        if "overflow" not in str(e).lower():
            raise
        key, value = max(((f"{section}.{f.name}", getattr(cfg, f.name))
                          for section, cfg in (("model", job.model), ("task", job.task)) for f in fields(cfg)
                          if type(getattr(cfg, f.name)) is int), key=lambda kv: kv[1])
        raise ConfigError(f"{key}: {value} makes a weight of more than 2^63 bytes; lower it") from None
