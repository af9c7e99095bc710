"""Plans that give ranks whole snapshots: S1 (IBM §4.2, Fig. 3) and PSS (DGC §2.1), with S2 blocks.

``strategy.layout`` (snapshot only): ``cyclic`` — snapshot t on rank t mod P — or
``block`` — contiguous blocks, balanced by count or by estimated work
(``strategy.balance``, :func:`snapshot_work`). PSS always uses contiguous blocks:
its RNN state travels from rank p to p+1 along time. With ``strategy.blocks: nb``
(S2) each block of time is split over the ranks on its own (block-cyclic, IBM Fig. 3b).
"""

from __future__ import annotations

import numpy as np

from hpcdgnn.config.schema import JobConfig
from hpcdgnn.data.manifest import Manifest
from hpcdgnn.errors import PlanError
from hpcdgnn.partition.plan import PartitionPlan, build_snapshot_plan
from hpcdgnn.tasks import task_class

__all__ = ["plan_snapshots", "snapshot_work", "train_horizon"]


def train_horizon(manifest: Manifest, job: JobConfig) -> int:
    """The last snapshot whose embedding enters the training loss (the task's rule)."""
    return int(task_class(job.task.name).train_horizon(job.task, manifest))


def snapshot_work(manifest: Manifest, job: JobConfig, horizon: int) -> np.ndarray:
    """Estimated work of each snapshot, in memory-bound element operations.

    The dense transforms are cheap BLAS calls next to them: per layer the sparse
    aggregation ``(nnz_t + N) * F'`` and about four elementwise passes over the
    (N, F') activations, three times that (forward and backward) up to the training
    horizon, plus the task's cost of scoring t (:meth:`Task.snapshot_work`).
    """
    H, L = job.model.hidden, job.model.layers
    task = task_class(job.task.name)
    nnz = np.asarray(manifest.snapshot_nnz, dtype=np.float64)
    # forward + backward up to the training horizon, forward only after it
    passes = np.where(np.arange(manifest.num_snapshots) <= horizon, 3.0, 1.0)
    work = L * (nnz + 5 * manifest.num_vertices) * H * passes
    return work + task.snapshot_work(job.task, manifest)


def plan_snapshots(manifest: Manifest, num_ranks: int, job: JobConfig, layout: str | None = None) -> PartitionPlan:
    """The plan of ``strategy: snapshot`` (or, with ``layout="block"`` and ``kind``, of ``pss``).

    Args:
        manifest: the dataset.
        num_ranks: P.
        job: the job (``strategy.layout``, ``balance``, ``blocks`` where the strategy has them).
        layout: overrides ``strategy.layout`` (PSS: always ``block``).
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
    return build_snapshot_plan(manifest, num_ranks, snapshot_work(manifest, job, horizon), horizon=horizon)
