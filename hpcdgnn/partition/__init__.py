"""Partition plans computed on rank 0 and consumed by strategies."""

from hpcdgnn.partition.plan import PartitionPlan, balanced_bounds, build_snapshot_plan, weighted_bounds

__all__ = ["PartitionPlan", "balanced_bounds", "build_snapshot_plan", "weighted_bounds"]

from hpcdgnn import submodules_on_use  # noqa: E402

#: ``hpcdgnn.partition.<submodule>`` after ``import hpcdgnn`` alone (:func:`hpcdgnn.submodules_on_use`)
__getattr__ = submodules_on_use(__name__)
