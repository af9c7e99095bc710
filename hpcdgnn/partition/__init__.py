"""Partition plans computed on rank 0 and consumed by strategies."""

from hpcdgnn.partition.plan import PartitionPlan, balanced_bounds, build_snapshot_plan, weighted_bounds

__all__ = ["PartitionPlan", "balanced_bounds", "build_snapshot_plan", "weighted_bounds"]
