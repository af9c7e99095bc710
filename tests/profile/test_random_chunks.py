"""The profiler's random chunks (``hpcdgnn.profile.chunks``): seeded, capped, small to large."""

from __future__ import annotations

import numpy as np

from hpcdgnn.partition.chunks import build_supergraph
from hpcdgnn.profile.chunks import random_chunks


def test_random_chunks_are_seeded_and_capped():
    """Profiling chunks depend only on the seed and span small to large sizes."""
    rng = np.random.default_rng(4)
    snaps = [(rng.integers(0, 60, 150), rng.integers(0, 60, 150)) for _ in range(8)]
    g = build_supergraph(snaps, 60, 1.0, 1.0)
    a = random_chunks(g, 30, 100, np.random.default_rng(9))
    b = random_chunks(g, 30, 100, np.random.default_rng(9))
    assert len(a) == 30 and all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))
    assert all(1 <= c.shape[0] <= 100 and np.all(np.diff(c) > 0) for c in a)
    sizes = [c.shape[0] for c in a]
    assert min(sizes) < 10 and max(sizes) > 40  # log-uniform sizes: small and large chunks alike
