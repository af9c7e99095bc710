"""Tests of :mod:`hpcdgnn.profile`, DGC §6's offline workload profiler."""
