"""Plans that give ranks whole snapshots: S1 (IBM §4.2, Fig. 3) and PSS (DGC §2.1), with S2 blocks.

``strategy.layout``: ``cyclic`` or ``block`` (by count or by :func:`snapshot_work`,
``strategy.balance``); PSS is always ``block``, since its RNN state passes from rank p to p+1.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from hpcdgnn.config.schema import JobConfig
from hpcdgnn.data.manifest import Manifest
from hpcdgnn.errors import PlanError
from hpcdgnn.nn.models.base import time_mixing_layers
from hpcdgnn.partition.plan import PartitionPlan, build_snapshot_plan
from hpcdgnn.tasks import task_class

__all__ = ["banded_in_place", "fit_eval_scale", "plan_snapshots", "rebalanced_plan", "snapshot_work", "train_horizon"]

#: bound on the fitted correction of the evaluation snapshots' cost, as a factor of the static model's
EVAL_SCALE_LIMIT = 8.0


def train_horizon(manifest: Manifest, job: JobConfig) -> int:
    """The last snapshot whose embedding enters the training loss (the task's rule)."""
    return int(task_class(job.task.name).train_horizon(job.task, manifest))


def banded_in_place(job: JobConfig, layout: str) -> bool:
    """Whether every time-mixing layer is banded (``temporal_reach``) and runs in place with a time halo (block layout,
    no S2 blocks, ``time_halo: on``)."""
    opts = job.strategy
    if layout != "block" or getattr(opts, "blocks", 1) != 1 or getattr(opts, "time_halo", "on") != "on":
        return False
    mixing = time_mixing_layers(job.model)
    return bool(mixing) and all(ly.temporal_reach is not None for ly in mixing)


def snapshot_work(manifest: Manifest, job: JobConfig, horizon: int, eval_scale: float = 1.0,
                  layout: str | None = None) -> np.ndarray:
    """Estimated work of each snapshot, in memory-bound element operations.

    Per layer: aggregation ``(nnz_t + N) * F'`` plus ~5 elementwise passes over (N, F'), tripled
    (forward + backward) up to ``horizon``, plus :meth:`Task.snapshot_work`; past it forward
    only, except a banded encoder in place (:func:`banded_in_place`) runs two elementwise
    passes there. Evaluation work is multiplied by ``eval_scale``.
    """
    H, L = job.model.hidden, job.model.layers
    task = task_class(job.task.name)
    nnz = np.asarray(manifest.snapshot_nnz, dtype=np.float64)
    layout = layout if layout is not None else getattr(job.strategy, "layout", "block")
    in_place = banded_in_place(job, "block" if layout == "auto" else layout)
    train = np.arange(manifest.num_snapshots) <= horizon
    passes = np.where(train, 3.0, 1.0)
    elementwise = np.where(train, 3.0, 2.0 if in_place else 1.0)
    work = L * (nnz * passes + 5 * manifest.num_vertices * elementwise) * H + task.snapshot_work(job.task, manifest)
    work[horizon + 1 :] *= eval_scale
    return work


def plan_snapshots(manifest: Manifest, num_ranks: int, job: JobConfig, layout: str | None = None,
                   eval_scale: float = 1.0) -> PartitionPlan:
    """The plan of ``strategy: snapshot`` (or, with ``layout="block"``, of ``pss``), recording ``eval_scale``."""
    opts = job.strategy
    layout = layout or opts.layout
    nb = getattr(opts, "blocks", 1)
    horizon = train_horizon(manifest, job)
    if nb > manifest.num_snapshots:
        raise PlanError(f"strategy.blocks: {nb} blocks but the dataset has only T = {manifest.num_snapshots} snapshots")
    if nb > 1:
        return build_snapshot_plan(manifest, num_ranks, layout=layout, blocks=nb, horizon=horizon)
    if layout == "cyclic":
        return build_snapshot_plan(manifest, num_ranks, layout="cyclic", horizon=horizon)
    if opts.balance == "count":
        return build_snapshot_plan(manifest, num_ranks, horizon=horizon)
    work = snapshot_work(manifest, job, horizon, eval_scale, layout)
    return dataclasses.replace(build_snapshot_plan(manifest, num_ranks, work, horizon=horizon), eval_scale=eval_scale)


def fit_eval_scale(train_work: np.ndarray, eval_work: np.ndarray, compute: np.ndarray) -> float | None:
    """Cost of evaluation work relative to training work: ``b / a`` of the least-squares fit
    ``compute[r] ~ a * train_work[r] + b * eval_work[r]``, or None when the ranks' mixes are alike or the fit is not
    positive."""
    A = np.stack([np.asarray(train_work, np.float64), np.asarray(eval_work, np.float64)], axis=1)
    c = np.asarray(compute, dtype=np.float64)
    scale = np.abs(A).max(axis=0)
    if A.shape[0] < 2 or np.any(scale <= 0) or not np.all(np.isfinite(c)):
        return None
    An = A / scale  # columns of equal size: the rank test below is scale-free
    s = np.linalg.svd(An, compute_uv=False)
    if s[-1] <= 1e-3 * s[0]:  # (near) proportional columns: one mix on every rank
        return None
    (a, b), *_ = np.linalg.lstsq(An, c, rcond=None)
    a, b = a / scale[0], b / scale[1]
    if a <= 0 or b <= 0:
        return None
    return float(b / a)


def rebalanced_plan(plan: PartitionPlan, manifest: Manifest, job: JobConfig, compute: list[float],
                    layout: str) -> PartitionPlan | None:
    """``strategy.balance: measured``: the block plan re-cut with :func:`fit_eval_scale` (evaluation can cost more than
    its static one pass in three), or None when unchanged."""
    if layout != "block" or plan.block_bounds is not None or plan.snapshot_bounds is None:
        return None
    horizon = plan.horizon
    work = snapshot_work(manifest, job, horizon, plan.eval_scale, layout)
    owner = np.asarray(plan.snapshot_owner)
    late = np.arange(manifest.num_snapshots) > horizon
    train = np.array([work[(owner == r) & ~late].sum() for r in range(plan.num_ranks)])
    evalw = np.array([work[(owner == r) & late].sum() for r in range(plan.num_ranks)])
    rho = fit_eval_scale(train, evalw, np.asarray(compute))
    if rho is None:
        return None
    scale = float(np.clip(plan.eval_scale * rho, 1 / EVAL_SCALE_LIMIT, EVAL_SCALE_LIMIT))
    new = dataclasses.replace(plan_snapshots(manifest, plan.num_ranks, job, layout, scale), kind=plan.kind)
    return None if new.snapshot_owner == plan.snapshot_owner else new
