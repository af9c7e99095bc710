"""task.split: the exact step ranges ``split_steps`` cuts (docs/configuration.md: train / validation / test
fractions of the prediction steps, in time order; each boundary the *nearest* step to fraction × steps, at least
one training step), pinned by hand — a floor would lose a training step wherever the fraction's product has a
fractional part above one half."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from hpcdgnn.tasks import split_steps, task_class

SPLIT = (0.7, 0.15, 0.15)


@pytest.mark.parametrize(("n", "fractions", "train", "val", "test"), [
    (4, SPLIT, (0, 3), (3, 3), (3, 4)),                # 0.7·4 = 2.8 → 3;  0.85·4 = 3.4 → 3
    (8, SPLIT, (0, 6), (6, 7), (7, 8)),                # 5.6 → 6;  6.8 → 7
    (9, SPLIT, (0, 6), (6, 8), (8, 9)),                # 6.3 → 6;  7.65 → 8
    (11, SPLIT, (0, 8), (8, 9), (9, 11)),              # 7.7 → 8;  9.35 → 9
    (3, (0.8, 0.1, 0.1), (0, 2), (2, 3), (3, 3)),      # 2.4 → 2;  2.7 → 3
    (20, (0.6, 0.2, 0.2), (0, 12), (12, 16), (16, 20)),  # exact products
    (1, SPLIT, (0, 1), (1, 1), (1, 1)),                # 0.7 → 1 (and at least one training step)
    (2, (0.1, 0.1, 0.8), (0, 1), (1, 1), (1, 2)),      # 0.2 → 0, raised to one training step; 0.4 → 0 → 1
    (0, SPLIT, (0, 0), (0, 0), (0, 0)),
])
def test_split_steps_are_the_nearest_steps_to_the_fractions(n, fractions, train, val, test):
    assert split_steps(n, fractions) == [range(*train), range(*val), range(*test)]


def test_tasks_split_their_prediction_steps():
    """Link prediction splits steps 0..T-2, node classification 0..T-1 (T = 9: 8 and 9 steps)."""
    manifest, cfg = SimpleNamespace(num_snapshots=9), SimpleNamespace(split=SPLIT)
    assert task_class("link_prediction").steps(cfg, manifest) == [range(0, 6), range(6, 7), range(7, 8)]
    assert task_class("node_classification").steps(cfg, manifest) == [range(0, 6), range(6, 8), range(8, 9)]
