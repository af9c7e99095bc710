"""A lower bound on the memory a job needs per rank, checked before anything is built.

A size typed one digit too long would otherwise end in an unexplained out-of-memory kill minutes into set-up.
:func:`check_footprint` refuses such a job in one line naming the dominant key. Every term (parameters with
Adam's moments, full-batch activations, link-prediction pairs, TGN batches, a chunk plan's appearance map) is a
*lower* bound, so a job that fits is never refused; it is compared with
:func:`~hpcdgnn.comm.device.memory_share`.
"""

from __future__ import annotations

import math
import sys

from hpcdgnn.errors import ConfigError

__all__ = ["HOST_RESIDENT", "check_footprint", "check_predicted_peak", "lower_bound", "out_of_memory_error",
           "predicted_peak", "size_keys"]

#: terms held in host memory whatever the device (the event regime's node memory: numpy arrays or an MPI window
#: whose rows each batch copies to the device; a chunk plan's appearance map, numpy lookup tables): a GPU job
#: checks them against the host's share
HOST_RESIDENT = frozenset({"node memory", "appearance map"})


def lower_bound(job, manifest, num_ranks: int) -> dict[str, tuple[int, str]]:
    """Per term: (bytes the rank needs at least, the keys that set it), from the job's regime."""
    from hpcdgnn.regimes import regime_of

    return regime_of("model", job.model.name).footprint(job, manifest, num_ranks)


def check_footprint(job, manifest, num_ranks: int, available: int, where: str, terms: str = "all") -> None:
    """Refuse (one line) a job whose lower bound exceeds ``available`` bytes for this rank.

    Args:
        job: the resolved job.
        manifest: its dataset's manifest.
        num_ranks: P.
        available: bytes this rank may use of the memory ``terms`` names.
        where: the job file, or None.
        terms: ``all`` (a CPU job: ``available`` is the host's share), ``device`` (a GPU's share: the terms not
            :data:`HOST_RESIDENT`) or ``host`` (a GPU job's host share: those terms only).

    Raises:
        ConfigError: names the bound, what the rank has, and the term that dominates with its keys.
    """
    def bound(ranks: int) -> dict[str, tuple[int, str]]:
        return {k: v for k, v in lower_bound(job, manifest, ranks).items()
                if terms == "all" or (k in HOST_RESIDENT) == (terms == "host")}

    try:
        parts = bound(num_ranks)
    except ConfigError as e:  # widths whose weights cannot even be counted (regimes.base.meta_build)
        raise ConfigError(f"{where}: {e}" if where else str(e)) from None
    if not parts:
        return
    need = sum(b for b, _ in parts.values())
    if need <= available:
        return
    name, (most, keys) = max(parts.items(), key=lambda kv: kv[1][0])
    # more ranks are advice only where they shrink the term (not the parameters every rank holds whole, nor a
    # batch whose split the job's own keys set)
    wider = bound(2 * num_ranks).get(name, (most, ""))[0]
    spread = " or spread the job over more ranks or nodes" if wider < most else ""
    raise ConfigError(
        f"{where}: this job needs at least {_size(need)} per rank ({name} {_size(most)}, set by {keys}) and this "
        f"rank has {_size(available)} (its share of the node's memory); lower those" + spread
    )


#: the lower bound's share of a rank's memory from which a full-batch job's peak is also predicted at set-up (the
#: planner's count of every layer's saved tensors costs seconds once a process, so not for every small job); the
#: prediction has been ~20x the lower bound (perf/results/planner)
PREDICT_FROM = 1 / 64

#: how far above a rank's memory a predicted peak refuses the job: the planner's peaks are within 30 % of the
#: measured ones (perf/results/planner), so a refused job needs at least 1.5x what the rank has; from 1x, a warning
REFUSE_ABOVE = 2.0


def predicted_peak(job, manifest, num_ranks: int, available: float) -> dict | None:
    """The planner's predicted peak of the job's strategy at P: ``{bytes, by_rank, parts, rates}`` (the most loaded
    rank's bytes, each rank's, the parts of the first, the rates' source), or None where it has no cost model."""
    from dataclasses import asdict

    from hpcdgnn.planner.predict import plan_job
    from hpcdgnn.planner.rates import load_rates
    from hpcdgnn.strategies import get_strategy

    cls = get_strategy(job.strategy.name)
    if not hasattr(cls, "cost") and not hasattr(cls, "predict"):
        return None
    rates = load_rates("cpu", job.train.dtype)
    preds = [p for p in plan_job(job, manifest, job.data.path, [num_ranks], rates, [job.strategy.name], available)
             if p.options == asdict(job.strategy)]
    if not preds or preds[0].memory_bytes != preds[0].memory_bytes:
        return None
    p = preds[0]
    return {"bytes": p.memory_bytes, "by_rank": list(p.memory_by_rank), "parts": dict(p.memory_parts),
            "rates": rates.source}


def check_predicted_peak(job, manifest, num_ranks: int, available: float, where: str | None) -> None:
    """Refuse (one line) a full-batch job whose predicted peak per rank passes :data:`REFUSE_ABOVE` × ``available``
    host bytes, and warn (stderr) of one above ``available``: the lower bound of :func:`check_footprint` counts one
    tensor of a rank's rows, the planner every layer's saved tensors, so a job between the two would start, load
    its data and be killed by the kernel's out-of-memory killer (exit 137, no line). Predicted only when the lower
    bound reaches :data:`PREDICT_FROM` of ``available``; the sampled strategies (whose price replays batches), a
    strategy whose plan is costly to make twice (``Strategy.costly_plan``: ``chunk``) and the event regime (whose
    lower bound holds its batch) are not predicted here.

    Raises:
        ConfigError: the predicted peak, what the rank has, the ranks it would fit on, the keys that size it.
    """
    from hpcdgnn.strategies import get_strategy

    cls = get_strategy(job.strategy.name)
    if not cls.full_batch or not hasattr(cls, "cost") or cls.costly_plan:
        return
    parts = lower_bound(job, manifest, num_ranks)
    if sum(b for b, _ in parts.values()) < available * PREDICT_FROM:
        return
    peak = predicted_peak(job, manifest, num_ranks, available)
    if peak is None or peak["bytes"] <= available:
        return
    need, fixed = peak["bytes"], peak["parts"].get("parameters", 0.0)
    keys = size_keys(parts)
    fits = (f"spread over about {math.ceil(num_ranks * (need - fixed) / (available - fixed))} ranks it would fit, "
            "or lower " if fixed < available else "lower ")
    what = (f"{where + ': ' if where else ''}the planner predicts a peak of {_size(need)} per rank at P = {num_ranks} "
            f"(strategy {job.strategy.name}; python -m hpcdgnn plan prints each strategy's) and this rank has "
            f"{_size(available)} (its share of the node's memory)")
    if need > REFUSE_ABOVE * available:
        raise ConfigError(f"{what}: the kernel would kill the run; {fits}{', '.join(keys) or 'its sizes'}")
    print(f"hpcdgnn: warning: {what}; its predictions are within 30 %, so the kernel may kill the run (exit 137): "
          f"{fits}{', '.join(keys) or 'its sizes'}", file=sys.stderr, flush=True)


def size_keys(parts: dict[str, tuple[int, str]]) -> list[str]:
    """The keys that set the footprint's terms, the largest term's first, each once."""
    ordered = sorted(parts.values(), key=lambda p: -p[0])
    return list(dict.fromkeys(k.strip() for _, ks in ordered for k in ks.split(",") if k.strip()))


def _size(nbytes: float) -> str:
    """GiB with a thousands separator, or below one GiB the unit that shows it (a 1 KiB budget is not 0.0 GiB)."""
    from hpcdgnn.data.writer import human_bytes

    return f"{nbytes / 2**30:,.1f} GiB" if nbytes >= 2**30 else human_bytes(nbytes)


def out_of_memory_error(job, manifest, num_ranks: int, detail: str) -> ConfigError:
    """The one line for an allocation larger than the rank has: the keys that size this job's terms (its
    regime's, e.g. ``model.neighbors`` and ``task.eval_negatives`` for TGN), most demanding first."""
    keys = size_keys(lower_bound(job, manifest, num_ranks))
    return ConfigError(f"out of memory ({detail}); the job needs more than this rank has: lower "
                       f"{', '.join(keys) or 'its sizes'}, or spread it over more ranks or nodes")

