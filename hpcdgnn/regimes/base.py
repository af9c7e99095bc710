"""A training regime as one registered spec (STYLE G5, G13; torchtitan's ``TrainSpec``).

hpcdgnn trains in regimes that differ in what a batch is and what a dataset holds, not in the loop: the
snapshot timeline (full batch over partitioned snapshots, IBM and DGC; sampled sequences, ReInc) and the
event stream with a node memory (DistTGL). A :class:`RegimeSpec` names everything that belongs to one:

==================  ==========================================================================================
``data_kind``       the dataset kind it reads (``hpcdgnn.data.events.dataset_kind``: snapshots or events)
``models``          ``model.name`` -> its options class (the ``model:`` keys it takes), declared beside the model
``tasks``           the ``task.name`` s it trains
``strategies``      ``strategy.name`` -> its options class (``strategy:`` keys); the implementation registers
                    under the same name with :func:`hpcdgnn.strategies.register_strategy`
``load_manifest``   path -> the dataset's manifest
``build_model``     (job, manifest) -> the model module
``build_task``      (task config, manifest, embedding width, seed) -> the task head
``footprint``       (job, manifest, P) -> lower bounds of a rank's bytes per term (:mod:`hpcdgnn.train.footprint`)
``check``           (job, where, P) -> None: rules between model, task and strategy within the regime
==================  ==========================================================================================

``config/`` takes the options classes from here (:func:`options_class`) and ``train/`` builds through the
spec of the job's regime (:func:`job_regime`): neither compares a model, task or strategy name. A new regime
(DynaHB's hybrid batches join the snapshot timeline as a strategy; another data kind would be a new spec)
registers with :func:`register_regime`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from hpcdgnn.config.schema import JobConfig, ModelConfig, StrategyConfig
from hpcdgnn.errors import ConfigError, short_repr

__all__ = ["RegimeSpec", "register_regime", "regimes", "options_class", "regime_of", "names", "job_regime",
           "item_bytes", "parameter_bytes"]

Section = Literal["model", "task", "strategy"]


@dataclass(frozen=True)
class RegimeSpec:
    """One training regime (see the module docstring for the fields)."""

    name: str
    #: in messages: what a job of this regime is, e.g. "the event-stream regime (DistTGL)"
    title: str
    data_kind: str
    #: in messages: the datasets it reads, and the commands that make them
    data_title: str
    data_made_by: str
    models: Mapping[str, type[ModelConfig]]
    tasks: tuple[str, ...]
    strategies: Mapping[str, type[StrategyConfig]]
    load_manifest: Callable[[str], Any]
    build_model: Callable[[JobConfig, Any], Any]
    build_task: Callable[[Any, Any, int, int], Any]
    footprint: Callable[[JobConfig, Any, int], dict[str, tuple[int, str]]]
    check: Callable[[JobConfig, str | None, int], None]

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
    """The regime that registers ``section`` name ``name``.

    Raises:
        KeyError: unknown name (config validation has checked names before anything else asks).
    """
    for r in _REGIMES.values():
        if name in r.names(section):
            return r
    raise KeyError(f"{section}.name: unknown {short_repr(name)}; choose from {', '.join(names(section))}")


def options_class(section: Literal["model", "strategy"], name: str) -> type:
    """The options class of ``model.name`` or ``strategy.name`` ``name``.

    Raises:
        KeyError: unknown name; its text lists the registered ones.
    """
    r = regime_of(section, name)
    return (r.models if section == "model" else r.strategies)[name]


def job_regime(job: JobConfig, where: str | None) -> RegimeSpec:
    """The one regime of the job's model, task and strategy, after its own cross-checks (``spec.check``
    at the job's rank count is the caller's: :func:`hpcdgnn.train.setup.check_model_strategy`).

    Raises:
        ConfigError: the three come from different regimes: one line naming what the model's regime needs.
    """
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


def parameter_bytes(job: JobConfig, in_features: int, layers: int, k: int, head: int) -> tuple[int, str]:
    """A footprint term (:mod:`hpcdgnn.train.footprint`): parameters with Adam's two moments — the first layer
    F × hidden, each of the ``layers`` - 1 above it ``k`` hidden × hidden matrices, the task head's ``head``
    weights — and the keys that set them."""
    h = job.model.hidden
    weights = in_features * h + (layers - 1) * k * h * h + head
    return 3 * item_bytes(job) * weights, "model.hidden, model.layers, model.order, task.decoder_hidden"
