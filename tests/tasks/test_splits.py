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


def test_a_signal_of_windows_splits_its_windows_not_the_steps_before_window_0_ends(tmp_path):
    """METR-LA-style windows (L = 4 steps, targets the next H = 3 values, 18 windows) are stored as the 21 steps of
    their series; window k ends at step k + 3. The split covered steps 0..18, the 3 before window 0 ends among the
    training steps (with H > 1 scored on the targets after them: forecasts no window of the signal makes) and
    every boundary 3 windows early; it cuts the 16 windows whose H values the series holds (steps 3..18) by the
    fractions, as PyG Temporal's temporal_signal_split cuts its samples, and the steps before are no split's.
    Node classification of windows (labels=True) likewise: the 18 window ends, steps 3..20."""
    import warnings

    from hpcdgnn.data.adapters import from_signal
    from tests.data.test_adapters import _windowed

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # the note of what was stored
        m = from_signal(_windowed(), tmp_path / "win")
        sig = _windowed()
        labelled = from_signal(SimpleNamespace(**{**vars(sig), "targets": [(y[:, 0] > 0).astype(int)
                                                                           for y in sig.targets]}),
                               tmp_path / "labels", labels=True)
    assert (m.num_snapshots, m.source["windows"]["windows"]) == (21, 18)
    cfg = task_class("regression").options(horizon=3, split=SPLIT)
    ranges = task_class("regression").steps(cfg, m)
    assert ranges == [range(3, 14), range(14, 17), range(17, 19)]  # 16 windows: 11.2 -> 11, 13.6 -> 14
    assert [range(r.start - 3, r.stop - 3) for r in ranges] == split_steps(18 - 3 + 1, SPLIT)
    assert task_class("regression").train_horizon(cfg, m) == 13
    work = task_class("regression").snapshot_work(cfg, m)
    assert (work[:3] == 0).all() and (work[3:14] == 3 * work[14]).all() and (work[14:19] == work[14]).all()
    assert work[14] > 0 and (work[19:] == 0).all()
    nc = task_class("node_classification").options(split=SPLIT)
    assert task_class("node_classification").steps(nc, labelled) == [range(3, 16), range(16, 18), range(18, 21)]
