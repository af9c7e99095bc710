"""``strategy: {name: auto}``: the planner picks the strategy a job trains with, on rank 0 at start (issue 59).

Not a way to train: :meth:`AutoStrategy.resolve` replaces the job's strategy section with the planner's pick
at the job's P (:func:`hpcdgnn.planner.predict.resolve_auto`) before any plan is made, logs the choice with its
predicted figures, and hands them to ``plan.json``; the run then trains with the picked strategy, which is also
what ``config.resolved.yaml`` records. A resumed run keeps it, whether resumed from the run directory alone or
with the same job file (its ``auto`` request then must be the one ``plan.json``'s ``planner.request`` records).
"""

from __future__ import annotations

from typing import Any, ClassVar

from hpcdgnn.strategies.base import Strategy
from hpcdgnn.strategies.registry import register_strategy

__all__ = ["AutoStrategy"]


@register_strategy("auto")
class AutoStrategy(Strategy):
    """The strategy the planner predicts fastest among those that fit the memory budget."""

    picks_another: ClassVar[bool] = True

    @classmethod
    def resolve(cls, job, where: str, num_ranks: int, budget: float, device: str) -> tuple[Any, dict | None]:
        """The job with the planner's pick, and what ``plan.json`` records of the choice (rank 0)."""
        from hpcdgnn.metrics.log import get_logger
        from hpcdgnn.planner.command import label, size_text
        from hpcdgnn.planner.predict import resolve_auto
        from hpcdgnn.regimes import regime_of

        manifest = regime_of("model", job.model.name).load_manifest(job.data.path)
        chosen, preds, pick, unused, budget = resolve_auto(job, manifest, num_ranks, where, budget, device)
        log = get_logger()
        log.info(f"strategy: auto picked {label(pick)} at P = {num_ranks}: predicted epoch {pick.epoch_s:.4g} s "
                 f"(compute {pick.compute_s:.4g} s, communication {pick.comm_s:.4g} s), "
                 f"{size_text(pick.bytes_per_epoch)} sent per epoch, {size_text(pick.memory_bytes)} per rank of "
                 f"{size_text(budget)}, λ {pick.balance:.2f}")
        others = sorted((p for p in preds if not p.picked and p.epoch_s == p.epoch_s), key=lambda p: p.epoch_s)
        if others:
            log.info("strategy: auto also predicted " + ", ".join(
                f"{label(p)} {p.epoch_s:.4g} s{'' if p.fits else ' (does not fit)'}" for p in others))
        for name in unused:
            log.info(f"strategy.options.{name}: not used (auto picked {pick.strategy})")
        from hpcdgnn.config import job_to_dict

        # the request as the job gave it: a resume with the same job file keeps the pick (train.setup)
        return chosen, {"picked": pick.strategy, "options": pick.options, "memory_per_rank": budget,
                        "request": job_to_dict(job)["strategy"], "predictions": [p.to_json() for p in preds]}
