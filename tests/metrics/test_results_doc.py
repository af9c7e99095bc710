"""What docs/results.md says the recorded metrics mean, against the code that computes them: which negatives link
prediction's and TGN's metrics score, the event AP as a mean over global batches, MAPE as a fraction, ``grad_norm``
as the last batch's, the memory strategy's *load*. No MPI: under a second."""

from __future__ import annotations

import re
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from hpcdgnn.ops.negatives import draw_negatives
from hpcdgnn.tasks.regression import Regression
from hpcdgnn.tasks.temporal_link_prediction import (
    TemporalLinkPrediction,
    TemporalLinkPredictionOptions,
    average_precision,
)
from hpcdgnn.train.loop import train_batches
from tests.conftest import REPO

RESULTS = " ".join((REPO / "docs" / "results.md").read_text().split())  # one line: phrases may wrap


def _says(*phrases: str) -> None:
    for phrase in phrases:
        assert phrase in RESULTS, f"docs/results.md does not say {phrase!r}"


def test_link_prediction_negatives_are_uniform_pairs_drawn_afresh_each_epoch():
    """Negatives of a step: uniform over all N² pairs (u = v among them), another draw every epoch."""
    N, m = 5, 4000
    first, second = draw_negatives(0, 1, 3, N, m), draw_negatives(0, 2, 3, N, m)
    assert not np.array_equal(first, second)
    assert (first[0] == first[1]).any()
    counts = np.bincount(first[0] * N + first[1], minlength=N * N)
    assert counts.min() > 0.5 * m / N**2 and counts.max() < 1.5 * m / N**2
    _says("drawn uniformly from all N² (u, v) pairs, afresh every epoch for every split",
          "the validation and test negatives change from epoch to epoch",
          "a negative may be an edge of t+1 or have u = v")


def test_event_ap_is_the_mean_of_the_global_batches_aps():
    """Two evaluation batches: the split's AP is the mean of theirs, not the AP over all their pairs."""
    task = TemporalLinkPrediction(TemporalLinkPredictionOptions(eval_negatives=1), None, 4, 0)
    batches = [(np.array([0.9, 0.1]), np.array([[0.5], [0.2]])), (np.array([0.3, 0.8]), np.array([[0.95], [0.4]]))]
    stats = sum(task.eval_stats("val", pos, neg, average_precision(np.r_[pos, neg[:, 0]], np.r_[1.0, 1.0, 0.0, 0.0]))
                for pos, neg in batches)
    each = [average_precision(np.r_[p, n[:, 0]], np.r_[1.0, 1.0, 0.0, 0.0]) for p, n in batches]
    whole = average_precision(np.concatenate([np.r_[p, n[:, 0]] for p, n in batches]), np.tile([1.0, 1, 0, 0], 2))
    ap = task.metrics(stats)["val_ap"]
    assert ap == pytest.approx(np.mean(each)) and ap != pytest.approx(whole)
    _says("one AP per global batch, averaged over the split's batches", "not one AP over the split's pairs")


def test_mape_is_a_fraction():
    """An error of 1 on a target of 2 is a MAPE of 0.5."""
    stats = np.zeros(15)
    stats[:5] = [1.0, 1.0, 1.0, 0.5, 1.0]  # training split: squared, absolute error, entries, |e|/|y|, entries
    assert Regression.metrics(None, stats)["train_mape"] == 0.5
    _says("`_mape` is a fraction (0.09 = 9 %) over the targets with |y| > 1e-6")


def test_grad_norm_is_the_last_batch_s():
    """Two batches of different gradients: the norm returned (the record's ``grad_norm``) is the second's."""
    w = torch.nn.Parameter(torch.zeros(2, dtype=torch.float64))
    grads = [torch.tensor([3.0, 4.0], dtype=torch.float64), torch.tensor([1.0, 0.0], dtype=torch.float64)]

    class Strategy:
        def step(self, model, task, batch, scale):
            (w * grads[batch.index]).sum().backward()
            return np.zeros(1)

        def sync_gradients(self, params):
            pass

    batches = [SimpleNamespace(index=i, examples=None) for i in range(2)]
    _, norm = train_batches(Strategy(), None, None, [w], torch.optim.SGD([w], lr=0.1), batches, 1.0)
    assert norm == 1.0
    _says("`grad_norm` is ‖∇‖₂ of the last training batch's summed gradient")


def test_the_memory_strategy_s_load_is_said():
    """TGN's load is the batches' inputs and the node memory's reads and writes, data resident or not."""
    text = (REPO / "hpcdgnn" / "strategies" / "memory.py").read_text()
    assert len(re.findall(r"self\.load_seconds \+=", text)) >= 2  # the batch's input and memory read; the write
    _says("under `memory` (TGN) also each training batch's input made ready",
          "the node memory's reads and writes, so not zero there")


def test_the_scaling_csv_s_memory_and_split_are_said():
    """perf/scaling.py's peak memory is summary.json's engine_peak_bytes (not RSS); comm_s is the time under way,
    comm_exposed_s the part that adds up to the epoch."""
    text = (REPO / "perf" / "scaling.py").read_text()
    assert '"engine_peak_bytes": max(summary["memory"]["engine_peak_bytes"])' in text
    assert '"comm_s": mean("comm")' in text and '"comm_exposed_s": mean("comm_exposed"' in text
    _says("peak memory (`engine_peak_bytes`: the largest rank's resident inputs plus activation peak",
          "`comm_exposed_s`, the blocked part, is what adds up with the other two to the epoch")


def test_the_memory_record_s_train_events_are_said():
    """Under ``strategy.epoch: j`` every trainer of a batch counts its events: j × the stream's."""
    text = (REPO / "hpcdgnn" / "strategies" / "memory.py").read_text()
    assert "self._train_events += work.events.shape[0]" in text  # each trainer, its own slice
    assert '"train_events": int(events[0])' in text and "allreduce_array([self._train_events" in text
    _says("`train_events` — the events trained on, summed over trainers: `strategy.epoch` j trains each event j times")


def test_host_payload_of_chunk_and_grid_is_their_lookup(tmp_path, small_dataset, monkeypatch):
    """``host_payload_bytes``: 0 under ``vertex``, but ``chunk`` and ``grid`` hold the lookup naming any row's rank
    (the appearance map, the grid's O(T + N) cells) — results.md said all three hold none."""
    import hpcdgnn
    from tests.conftest import write_job

    monkeypatch.chdir(tmp_path)
    held = {}
    for name in ("vertex", "chunk", "grid"):
        job = write_job(tmp_path / f"{name}.yaml", small_dataset, strategy={"name": name}, train={"epochs": 1})
        held[name] = hpcdgnn.train(job, output=f"r-{name}").summary["memory"]["host_payload_bytes"]
    assert held["vertex"] == [0] and held["chunk"][0] > 0 and held["grid"][0] > 0
    _says("`vertex` holds none: 0", "`chunk`'s appearance map, which every rank holds whole",
          "`grid`'s O(T + N) lookup")
