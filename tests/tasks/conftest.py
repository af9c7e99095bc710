"""Small on-disk datasets for the task heads, and the raw edges/labels they were written from."""

from __future__ import annotations

import numpy as np
import pytest

from hpcdgnn.data.manifest import load_manifest
from hpcdgnn.data.shard_reader import ShardReader
from tests.conftest import make_dataset, random_snapshots

T, N, M, SEED = 7, 23, 40, 1


def raw_pairs(t: int) -> set[tuple[int, int]]:
    """Distinct raw (src, dst) pairs of snapshot t, straight from the generator (no dataset code)."""
    snap = list(random_snapshots(T, N, M, SEED))[t]
    return set(zip(snap.src.tolist(), snap.dst.tolist(), strict=True))


def raw_labels(t: int) -> np.ndarray:
    """Node labels of snapshot t (-1 = none), straight from the generator."""
    return list(random_snapshots(T, N, M, SEED))[t].labels


class FakeComm:
    """Single-process stand-in: all-reduce over one rank returns the values; records the calls."""

    def __init__(self) -> None:
        self.calls: list[tuple[list[float], str | None]] = []

    def allreduce_array(self, values, tag=None):
        """Sum over the one rank: the values themselves, as float64."""
        self.calls.append((list(values), tag))
        return np.asarray(values, dtype=np.float64)


@pytest.fixture(scope="session")
def task_data(tmp_path_factory):
    """(root, manifest, reader) of a T = 7, N = 23 labelled dataset."""
    root = make_dataset(tmp_path_factory.mktemp("tasks") / "plain", T, N, M, seed=SEED)
    m = load_manifest(root)
    reader = ShardReader(root, m)
    yield root, m, reader
    reader.close()


@pytest.fixture(scope="session")
def smoothed_data(tmp_path_factory):
    """The same raw graph with edge-life 2 (A_t differs from the raw edges: targets stored apart)."""
    root = make_dataset(tmp_path_factory.mktemp("tasks") / "life2", T, N, M, seed=SEED, edge_life=2)
    m = load_manifest(root)
    reader = ShardReader(root, m)
    yield root, m, reader
    reader.close()
