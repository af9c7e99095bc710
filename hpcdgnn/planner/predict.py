"""Predict every applicable strategy of a job at each rank count, and pick one (``hpcdgnn plan``, ``strategy: auto``).

Rank 0 only; nothing trains. For each strategy of the job's regime that has a cost model (``cost`` beside its
``make_plan``), the planner makes the plan the run would make, asks the strategy for its per-rank work and
traffic and prices it (:func:`~hpcdgnn.planner.cost.price`). ``snapshot`` also comes with the fewest checkpoint
blocks (IBM §3.1) that fit the memory budget when one block does not (``Strategy.smaller``), and ``grid``
with every Ps × Pv factorisation of P the job leaves open (``Strategy.variants``). The pick is the fastest
predicted epoch among those that fit; a sampled strategy only when named (:func:`_pickable`).
"""

from __future__ import annotations

from dataclasses import asdict, replace

from hpcdgnn.errors import ConfigError
from hpcdgnn.planner.cost import GraphStats, HeadCost, Prediction, price
from hpcdgnn.planner.rates import MachineRates
from hpcdgnn.planner.work import model_work

__all__ = ["MAX_RANKS", "auto_inputs", "candidates", "check_ranks", "choose", "parameter_count", "plan_job",
           "resolve_auto"]

#: the most ranks ``plan`` and ``check`` price: more than any machine runs (a plan holds every rank's part, so
#: its time and memory grow with P: ~1 ms a rank)
MAX_RANKS = 1 << 20


def check_ranks(ranks: list[int], option: str) -> None:
    """Refuse (one line, ConfigError) a rank count below 1 or above :data:`MAX_RANKS`; ``option`` names it."""
    for p in ranks:
        if p < 1:
            raise ConfigError(f"{option}: {p}; a job runs on at least 1 rank")
        if p > MAX_RANKS:
            raise ConfigError(f"{option}: {p} is more than {MAX_RANKS:,} ranks, more than any machine runs (a plan "
                              "holds every rank's part)")


def candidates(job) -> list[str]:
    """The strategies of the job's regime that train (not ``auto``, which picks one of them), in order."""
    from hpcdgnn.regimes import regime_of
    from hpcdgnn.strategies import get_strategy

    return [s for s in regime_of("model", job.model.name).strategies if not get_strategy(s).picks_another]


def parameter_count(job, manifest) -> int:
    """Trainable parameters of the model and the task head (what the gradient all-reduce moves), built on meta."""
    from hpcdgnn.regimes import regime_of
    from hpcdgnn.regimes.base import meta_build

    regime = regime_of("model", job.model.name)
    with meta_build(job):
        model = regime.build_model(job, manifest)
        task = regime.task_of(job, manifest, model)
    return sum(p.numel() for m in (model, task) for p in m.parameters() if p.requires_grad)


def _options(job, name: str, given: dict | None = None):
    """``name``'s options: the job's own when it names ``name``, else ``given[name]``, else the defaults."""
    from hpcdgnn.regimes import regime_of

    if job.strategy.name == name:
        return job.strategy
    if given and name in given:
        return given[name]
    return regime_of("model", job.model.name).strategies[name](name=name)


def plan_job(job, manifest, data_root: str, ranks: list[int], rates: MachineRates,
             strategies: list[str] | None = None, memory_per_rank: float | None = None,
             given: dict[str, dict] | None = None) -> list[Prediction]:
    """Predictions for every strategy (and checkpoint-block variant) and rank count; the pick per P marked.

    Args:
        job: the typed job.
        manifest: its dataset's manifest.
        data_root: the dataset directory (the vertex halo counts read its snapshots' structure once).
        ranks: the rank counts P.
        rates: the machine's rates.
        strategies: the names to consider (default: all of the regime's).
        memory_per_rank: bytes each rank may use, or None.
        given: typed options for strategies the job does not name (``strategy: {name: auto, options: ...}``).

    Raises:
        ConfigError: an unknown strategy name, or P < 1 (one line).
    """
    from hpcdgnn.regimes import regime_of
    from hpcdgnn.strategies import get_strategy
    from hpcdgnn.tasks import task_class

    known = candidates(job)
    names = strategies or known
    unknown = [s for s in names if s not in known]
    if unknown:
        raise ConfigError(f"plan --strategies: unknown {', '.join(unknown)}; choose from {', '.join(known)}")
    check_ranks(ranks, "plan --ranks")
    task_class(job.task.name).check(job.task, manifest)  # what the data cannot serve, before any plan blames one
    regime = regime_of("model", job.model.name)
    graph = GraphStats(manifest, data_root)
    params = parameter_count(job, manifest)  # first: on meta, it refuses widths too large to build at all
    # a snapshot model's counted work; a strategy that prices itself (``predict``: the event regime) needs none
    work = None if all(hasattr(get_strategy(s), "predict") for s in names) else model_work(
        job.model, manifest.num_features, job.train.dtype)
    out: list[Prediction] = []
    steps = manifest.num_vertices * getattr(manifest, "num_snapshots", 0)
    for P in ranks:
        for name in names:
            cls = get_strategy(name)
            opts = _options(job, name, given)
            variant = replace(job, strategy=opts)
            if not hasattr(cls, "cost") and not hasattr(cls, "predict"):
                out.append(_unpriced(name, opts, P, "no cost model yet"))
                continue
            if strategies is None and not cls.full_batch and hasattr(cls, "cost") and steps > SAMPLED_PRICE_LIMIT:
                out.append(_unpriced(name, opts, P, f"not priced unless named (--strategies {name}): a sampled "
                                     f"strategy's price reads and samples every snapshot's structure, at N·T = "
                                     f"{steps:,} more than measured"))
                continue
            why = _refusal(regime, variant, P, manifest)
            if why:
                out.append(_unpriced(name, opts, P, why))
                continue
            variants = cls.variants(opts, P, manifest)
            for each in variants:
                job_v = replace(job, strategy=each)
                why = _refusal(regime, job_v, P, manifest) if each is not opts else None  # opts: checked above
                try:  # the plan refuses options that cannot work at this P (one line), as the run would
                    pred = None if why else _priced(cls, job_v, manifest, graph, P, work, params, rates,
                                                    memory_per_rank)
                except ConfigError as e:
                    why = _does_not_apply(e)
                if why:
                    out.append(_unpriced(name, each, P, why))
                    continue
                if len(variants) > 1 and each is variants[0]:  # the others need their options set to train
                    pred.notes.append(f"what strategy: {{name: {name}}} {AS_WRITTEN}")
                out.append(pred)
                # a smaller variant the run's check would refuse (``balance: measured`` with blocks) is never
                # offered: the pick would then fail at set-up, naming a key the user did not set
                tries = [] if pred.fits else [
                    less for less in cls.smaller(each, manifest)
                    if not _refusal(regime, replace(job, strategy=less), P, manifest)]
                for i, less in enumerate(tries):  # the first that fits, or the last (the smallest) when none does
                    lp = _priced(cls, replace(job, strategy=less), manifest, graph, P, work, params, rates,
                                 memory_per_rank)
                    if lp.fits or i == len(tries) - 1:
                        out.append(lp)
                        break
        choose(_pickable([p for p in out if p.num_ranks == P], named=strategies is not None))
    return out


#: what a prediction priced at default machine rates says (the table's header says it once instead)
DEFAULT_RATES_NOTE = "default machine rates (python -m hpcdgnn calibrate measures them)"

#: the end of the note on the variant a job trains when it leaves the variants open (``Strategy.variants``)
AS_WRITTEN = "trains as written"

#: vertex-steps N·T above which an unnamed sampled strategy (never the unnamed pick: :func:`_pickable`) is not
#: priced: its counted samples are built over bounded subsets of their targets (``samples.COUNTED_ROOT_STEPS``),
#: but its price still reads and normalises every snapshot's structure, as far as measured (perf/results/planner)
SAMPLED_PRICE_LIMIT = 1 << 26

#: what a sampled strategy's prediction says when the planner did not consider it for the pick
SAMPLED_NOTE = "sampled: picked only when named (--strategies, strategy.candidates)"


def _pickable(predictions: list[Prediction], named: bool) -> list[Prediction]:
    """What the pick is among: every prediction when the strategies were named; else the full-batch ones (all
    of them in a regime without any, the event regime). A sampled strategy (``sequences``, ``hybrid``) trains
    another trajectory than the full batch (its windows, batches and, for ``hybrid``, averaging), so it is a
    choice of the user's, not of the planner's: priced, shown, and picked only when named — also when no
    full-batch strategy fits (then nothing is picked, and the refusal says what would fit)."""
    from hpcdgnn.strategies import get_strategy

    if named:
        return predictions
    full = [p for p in predictions if get_strategy(p.strategy).full_batch]
    if not full:
        return predictions
    for p in predictions:
        if not get_strategy(p.strategy).full_batch and p.epoch_s == p.epoch_s:
            p.notes.append(SAMPLED_NOTE)
    return full


def _refusal(regime, job, P: int, manifest) -> str | None:
    """Why the run's own checks (``regime.check``, with the strategy's ``check_job``; the strategy's
    ``check_data`` on the dataset's sizes) refuse ``job`` at P, as a prediction's note; None when they do not."""
    from hpcdgnn.strategies import get_strategy

    try:
        regime.check(job, None, P)
        get_strategy(job.strategy.name).check_data(job, manifest, None)
    except ConfigError as e:
        return _does_not_apply(e)
    return None


def _does_not_apply(e: ConfigError) -> str:
    """A refusal as a prediction's note (the check ran without a file name: ``None: `` left out)."""
    return f"does not apply: {str(e).removeprefix('None: ')}"


def _priced(cls, job, manifest, graph, P, work, params, rates, memory_per_rank) -> Prediction:
    plan = cls.make_plan(manifest, P, job)
    if hasattr(cls, "predict"):
        pred = cls.predict(plan, job, manifest, graph, params, rates, memory_per_rank)
        if rates.source == "defaults":
            pred.notes.append(DEFAULT_RATES_NOTE)
        return pred
    ranks = cls.cost(plan, job, manifest, graph, work)
    head = HeadCost.of(job, manifest, work.out_features, work.itemsize)
    pred = price(job.strategy.name, asdict(job.strategy), ranks, work, params, rates, job.model.hidden,
                 memory_per_rank, head)
    pred.notes.extend(cls.unpriced(job))
    if rates.source == "defaults":
        pred.notes.append(DEFAULT_RATES_NOTE)
    return pred


def _unpriced(name: str, opts, P: int, why: str) -> Prediction:
    nan = float("nan")
    return Prediction(strategy=name, options=asdict(opts), num_ranks=P, memory_bytes=nan, memory_by_rank=[],
                      memory_parts={}, bytes_per_epoch=nan, bytes_by_tag={}, balance=nan, compute_s=nan,
                      comm_s=nan, epoch_s=nan, notes=[why], fits=False)


def choose(predictions: list[Prediction]) -> Prediction | None:
    """Mark and return the fastest predicted epoch among the priced predictions that fit; None if none fits."""
    fit = [p for p in predictions if p.fits and p.epoch_s == p.epoch_s]
    if not fit:
        return None
    best = min(fit, key=lambda p: (p.epoch_s, p.memory_bytes))
    best.picked = True
    return best


def auto_inputs(job, where: str) -> tuple[list[str] | None, dict, float | None]:
    """``strategy: {name: auto}``'s candidates (None: all), typed ``options`` by strategy, and budget (or None).

    Raises:
        ConfigError: an unknown strategy, a wrong option or a bad size (one line naming ``where`` and the key).
    """
    from hpcdgnn.config.load import build_options
    from hpcdgnn.planner.command import parse_size

    opts, known = job.strategy, candidates(job)
    for key, names in (("candidates", opts.candidates), ("options", opts.options)):
        for name in names:
            if name not in known:
                raise ConfigError(f"{where}: strategy.{key}: {name} is not a strategy of this job; choose from "
                                  f"{', '.join(known)}")
    given = {name: build_options("strategy", name, raw, f"strategy.options.{name}", where)
             for name, raw in opts.options.items()}
    budget = parse_size(opts.memory_per_rank, f"{where}: strategy.memory_per_rank") if opts.memory_per_rank else None
    return list(opts.candidates) or None, given, budget


def resolve_auto(job, manifest, num_ranks: int, where: str, default_budget: float, device: str = "cpu"):
    """``strategy: {name: auto}`` → the job with the planner's pick at ``num_ranks`` (rank 0, before the plan).

    Returns:
        (the job with the picked strategy's typed options, every prediction, the picked one, the strategies
        whose ``options`` went unused, the memory budget per rank the pick was made for: the job's
        ``strategy.memory_per_rank``, else ``default_budget``).

    Raises:
        ConfigError: an unknown strategy in ``candidates`` or ``options``, a wrong option, a bad
        ``memory_per_rank``, or no strategy that fits (one line, as ``hpcdgnn plan`` says it).
    """
    from hpcdgnn.config.load import build_options
    from hpcdgnn.planner.command import nothing_fits
    from hpcdgnn.planner.rates import load_rates
    from hpcdgnn.strategies import get_strategy

    names, given, budget = auto_inputs(job, where)
    # only what it may pick is priced: a sampled strategy is counted sample by sample on rank 0 while the other
    # ranks wait, for a pick it may not make unless named
    names = names or [s for s in candidates(job) if get_strategy(s).full_batch] or None
    budget = default_budget if budget is None else budget
    preds = plan_job(job, manifest, job.data.path, [num_ranks], load_rates(device, job.train.dtype), names,
                     budget, given)
    pick = next((p for p in preds if p.picked), None)
    if pick is None:
        raise ConfigError(f"{where}: strategy: auto: "
                          + nothing_fits(preds, num_ranks, budget, job, manifest).removeprefix("plan: "))
    chosen = build_options("strategy", pick.strategy, {k: v for k, v in pick.options.items() if k != "name"},
                           "strategy", where)
    return replace(job, strategy=chosen), preds, pick, [n for n in given if n != pick.strategy], budget
