"""One snapshot of a discrete-time dynamic graph as read from a shard (SPEC data model)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["Snapshot", "csr_rows"]


def csr_rows(indptr: np.ndarray) -> np.ndarray:
    """Row index of every nonzero of a CSR matrix, expanded from its ``indptr`` (int64)."""
    return np.repeat(np.arange(indptr.shape[0] - 1, dtype=np.int64), np.diff(indptr))


@dataclass
class Snapshot:
    """Snapshot ``t``: adjacency A_t (CSR, rows = source vertex), features X_t, activity, labels, targets.

    Shapes:
        ``indptr`` (N+1,), ``indices``/``weights`` (nnz,), ``x`` (N, F), ``active`` (N,) bool;
        ``labels`` (N,) int64, -1 = none; ``targets`` (N,) float64, NaN = none (or None).
    """

    t: int
    indptr: np.ndarray
    indices: np.ndarray
    weights: np.ndarray
    x: np.ndarray
    active: np.ndarray
    labels: np.ndarray | None = None
    targets: np.ndarray | None = None

    @property
    def num_vertices(self) -> int:
        """N, the size of the vertex universe."""
        return int(self.indptr.shape[0] - 1)

    @property
    def nnz(self) -> int:
        """Nonzeros of A_t."""
        return int(self.indices.shape[0])

    def rows(self) -> np.ndarray:
        """Row (source) index of every nonzero, expanded from ``indptr``."""
        return csr_rows(self.indptr)
