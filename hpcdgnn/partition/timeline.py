"""Plans that give ranks whole snapshots: S1 (IBM §4.2, Fig. 3) and PSS (DGC §2.1), with S2 blocks.

``strategy.layout`` (snapshot only): ``cyclic`` — snapshot t on rank t mod P — or
``block`` — contiguous blocks, balanced by count or by estimated work
(``strategy.balance``, :func:`snapshot_work`). PSS always uses contiguous blocks:
its RNN state travels from rank p to p+1 along time. With ``strategy.blocks: nb``
(S2) each block of time is split over the ranks on its own (block-cyclic, IBM Fig. 3b).
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

#: the measured correction of the evaluation snapshots' cost stays within this factor of the static model's
EVAL_SCALE_LIMIT = 8.0


def train_horizon(manifest: Manifest, job: JobConfig) -> int:
    """The last snapshot whose embedding enters the training loss (the task's rule)."""
    return int(task_class(job.task.name).train_horizon(job.task, manifest))


def banded_in_place(job: JobConfig, layout: str) -> bool:
    """Whether every time-mixing layer of the model is banded (``temporal_reach``, TM-GCN's M-transform)
    and runs on the owned snapshots with a time halo instead of the redistributions: contiguous blocks
    (``layout``), no checkpoint blocks, ``strategy.time_halo: on`` (``SnapshotStrategy._time_halo``)."""
    opts = job.strategy
    if layout != "block" or getattr(opts, "blocks", 1) != 1 or getattr(opts, "time_halo", "on") != "on":
        return False
    mixing = time_mixing_layers(job.model)
    return bool(mixing) and all(ly.temporal_reach is not None for ly in mixing)


def snapshot_work(manifest: Manifest, job: JobConfig, horizon: int, eval_scale: float = 1.0,
                  layout: str | None = None) -> np.ndarray:
    """Estimated work of each snapshot, in memory-bound element operations.

    The dense transforms are cheap BLAS calls next to them: per layer the sparse
    aggregation ``(nnz_t + N) * F'`` and about four elementwise passes over the
    (N, F') activations, three times that (forward and backward) up to the training
    horizon, plus the task's cost of scoring t (:meth:`Task.snapshot_work`). Past the
    horizon (evaluation only) the aggregation runs forward only, and so do the
    elementwise passes — except under a banded encoder in place (:func:`banded_in_place`,
    ``layout``: the plan's, default ``strategy.layout``), whose M-transform and the passes
    around it run over the whole block with autograd, evaluation rows included: two
    passes there. Why not cut that backward instead: the encoder split at the horizon
    (head with autograd, tail without, as the RNNs do) costs one more copy of the block's
    rows and is slower. The evaluation snapshots' total counts ``eval_scale`` times its
    estimate: 1 for the static model, fitted to measured times by :func:`fit_eval_scale`.
    """
    H, L = job.model.hidden, job.model.layers
    task = task_class(job.task.name)
    nnz = np.asarray(manifest.snapshot_nnz, dtype=np.float64)
    layout = layout if layout is not None else getattr(job.strategy, "layout", "block")
    in_place = banded_in_place(job, "block" if layout == "auto" else layout)
    # forward + backward up to the training horizon, forward only after it (but see the docstring)
    train = np.arange(manifest.num_snapshots) <= horizon
    passes = np.where(train, 3.0, 1.0)
    elementwise = np.where(train, 3.0, 2.0 if in_place else 1.0)
    work = L * (nnz * passes + 5 * manifest.num_vertices * elementwise) * H + task.snapshot_work(job.task, manifest)
    work[horizon + 1 :] *= eval_scale
    return work


def plan_snapshots(manifest: Manifest, num_ranks: int, job: JobConfig, layout: str | None = None,
                   eval_scale: float = 1.0) -> PartitionPlan:
    """The plan of ``strategy: snapshot`` (or, with ``layout="block"`` and ``kind``, of ``pss``).

    Args:
        manifest: the dataset.
        num_ranks: P.
        job: the job (``strategy.layout``, ``balance``, ``blocks`` where the strategy has them).
        layout: overrides ``strategy.layout`` (PSS: always ``block``).
        eval_scale: the evaluation snapshots' work factor (:func:`snapshot_work`), recorded in the plan.
    """
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
    """The cost of a unit of evaluation work relative to a unit of training work, from measured times.

    Least squares of ``compute[r] ~ a * train_work[r] + b * eval_work[r]`` over the ranks (the work each
    rank's snapshots have under the current model, before and after the training horizon); returns
    ``b / a``, or None when the ranks' mixes cannot tell the two apart (every rank the same mix, no
    evaluation work anywhere) or the fit is not positive. The caller clamps it (:data:`EVAL_SCALE_LIMIT`).
    """
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
    """``strategy.balance: measured``: the block plan re-cut with the evaluation work's cost fitted to the
    ranks' measured compute seconds of an epoch (:func:`fit_eval_scale`), or None when nothing changes
    (another layout, blocks, no fit, the same cut).

    Why this term: the static model counts a snapshot past the training horizon as one forward pass
    against three, and the task's scoring likewise, but evaluation work can cost more than that relative
    to training work, so the rank holding the evaluation snapshots is the slower one. One factor, fitted
    where ranks hold different mixes, corrects this for whatever model, task and machine the run has.
    """
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
