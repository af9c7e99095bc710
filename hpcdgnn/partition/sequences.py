"""R1's plan (ReInc §3.4.1): sliding-window sequences, P consecutive blocks of them, one per rank.

A sequence is a window of L = ``strategy.window`` snapshots, every ``stride``, whose last
step is a prediction step; a rank holds its block plus the L - 1 snapshots after it, so
every sequence is local. The blocks balance work, not counts: a training sequence weighs
:data:`TRAIN_WEIGHT` evaluation ones (forward and backward against a forward), since the
validation and test sequences come last and equal counts left the last ranks without training
work. Mini-batches are :mod:`hpcdgnn.strategies.sequences`'.
"""

from __future__ import annotations

from dataclasses import dataclass

from hpcdgnn.errors import ConfigError
from hpcdgnn.partition.plan import PartitionPlan, balanced_bounds, weighted_bounds
from hpcdgnn.tasks import task_class

__all__ = ["TRAIN_WEIGHT", "Sequence", "decoder_reach", "plan_sequences", "sequences_of"]

#: a training sequence's work in evaluation sequences: its forward and a backward of about twice that (the
#: planner's count)
TRAIN_WEIGHT = 3


@dataclass(frozen=True)
class Sequence:
    """Window ``[start, start + L)``; the task scores its last step ``t``, which lies in ``split``."""

    index: int
    start: int
    stop: int
    split: int

    @property
    def t(self) -> int:
        """The scored step."""
        return self.stop - 1


def sequences_of(manifest, job) -> list[Sequence]:
    """Every window whose last step is a prediction step of the task (in time order)."""
    o = job.strategy
    ranges = task_class(job.task.name).steps(job.task, manifest)
    out: list[Sequence] = []
    for start in range(0, manifest.num_snapshots - o.window + 1, o.stride):
        t = start + o.window - 1
        split = next((i for i, r in enumerate(ranges) if t in r), -1)
        if split >= 0:
            out.append(Sequence(len(out), start, t + 1, split))
    return out


def decoder_reach(job) -> int:
    """Snapshots past a window's end its sample reads: H - 1 with ``model.decoder_input: snapshots``, else 0."""
    m = job.model
    snapshots = getattr(m, "encoder_decoder", False) and m.decoder_input == "snapshots"  # cells' options only
    return job.task.horizon - 1 if snapshots else 0


def plan_sequences(manifest, num_ranks: int, job) -> PartitionPlan:
    """R1's plan, after checking window, fanouts and that a training sequence exists (ConfigError otherwise)."""
    o, T, N, P = job.strategy, manifest.num_snapshots, manifest.num_vertices, num_ranks
    if o.window > T:
        raise ConfigError(f"strategy.window: {o.window} snapshots, but the dataset has only T = {T}; "
                          f"choose a window of at most {T}")
    if o.fanouts and len(o.fanouts) != job.model.layers:
        raise ConfigError(f"strategy.fanouts: {len(o.fanouts)} values for model.layers: {job.model.layers}; "
                          "give one per layer (nearest the batch first), or [] for full neighbourhoods")
    seqs = sequences_of(manifest, job)
    if not any(s.split == 0 for s in seqs):
        # which steps train is the task's (its split, and a forecast's horizon): say so with the window
        train = task_class(job.task.name).steps(job.task, manifest)[0]
        steps = f"steps {train.start}..{train.stop - 1}" if len(train) else "none"
        horizon = getattr(job.task, "horizon", None)
        by = f"task.split and task.horizon: {horizon}" if horizon is not None else "task.split"
        raise ConfigError(f"strategy.window: {o.window} with stride {o.stride} leaves no sequence whose last "
                          f"step is a training step (the training steps, set by {by}: {steps} of T = {T}); "
                          "shorten the window, widen task.split" + (" or lower task.horizon" if horizon else ""))
    reach = decoder_reach(job)
    sb = weighted_bounds([TRAIN_WEIGHT if s.split == 0 else 1 for s in seqs], P)
    lo = [seqs[sb[p]].start if sb[p] < len(seqs) else T for p in range(P)]
    lo[0] = 0
    own = [*lo, T]
    owner = [p for p in range(P) for _ in range(own[p + 1] - own[p])]
    ranks = []
    for p in range(P):
        mine = seqs[sb[p] : sb[p + 1]]
        # the snapshot form's decoder reads up to t + H - 1 <= T - 1 (regression steps end at T - H)
        reads = (mine[0].start, mine[-1].stop + reach) if mine else (own[p], own[p])
        ranks.append({"sequences": [sb[p], sb[p + 1]], "snapshots": own[p + 1] - own[p],
                      "window_snapshots": list(reads), "train_sequences": sum(s.split == 0 for s in mine)})
    return PartitionPlan(kind="sequences", num_ranks=P, num_snapshots=T, num_vertices=N, snapshot_owner=owner,
                         snapshot_bounds=own, vertex_bounds=balanced_bounds(N, P), ranks=ranks)
