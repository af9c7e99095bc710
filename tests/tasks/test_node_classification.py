"""Node classification (IBM §2.2): labels, the global loss denominator, cross-entropy sums, work model."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from hpcdgnn.data.manifest import load_manifest
from hpcdgnn.data.writer import write_dataset
from hpcdgnn.errors import DataError
from hpcdgnn.tasks import build_task, split_steps
from hpcdgnn.tasks.base import Scored
from hpcdgnn.tasks.node_classification import NodeClassification, NodeClassificationOptions
from tests.conftest import random_snapshots, write_job
from tests.tasks.conftest import FakeComm, N, T, raw_labels

CFG = NodeClassificationOptions(split=(0.5, 0.25, 0.25))


def make_task(manifest, emb=4, torch_seed=0) -> NodeClassification:
    """A float64 NodeClassification head drawn from a fixed torch seed."""
    torch.manual_seed(torch_seed)
    return NodeClassification(CFG, manifest, emb, seed=0).double()


def _emb(seed=3, dim=4):
    g = torch.Generator().manual_seed(seed)
    return {t: (2 * torch.randn(N, dim, dtype=torch.float64, generator=g)).requires_grad_(True) for t in range(T)}


def test_build_task_and_split(task_data):
    """build_task makes the head; all T snapshots are split by time."""
    _, m, _ = task_data
    task = build_task(CFG, m, 4, seed=0)
    assert isinstance(task, NodeClassification)
    assert task.ranges == split_steps(T, CFG.split)  # node classification scores all T snapshots
    assert tuple(task.head.weight.shape) == (m.num_classes, 4)


def test_setup_reads_labels_and_all_reduces_train_count(task_data):
    """Labels equal the generator's; the train count is one all-reduce of the local count."""
    _, m, reader = task_data
    comm = FakeComm()
    task = make_task(m)
    task.setup(reader, Scored(snapshots=tuple(list(range(T)))), comm)
    for t in range(T):
        assert np.array_equal(task.labels[t].numpy(), raw_labels(t))
    expected = sum(int((raw_labels(t) >= 0).sum()) for t in task.ranges[0])
    assert task.global_train_count() == expected
    assert comm.calls == [([float(expected)], "setup")]  # one all-reduce of the local count


def test_train_count_is_sum_of_per_rank_counts(task_data):
    """Per-rank local counts add up to the one-rank count."""
    _, m, reader = task_data
    locals_ = []
    for snaps in ([0, 1, 2], [3], [4, 5, 6]):
        comm = FakeComm()
        make_task(m).setup(reader, Scored(snapshots=tuple(snaps)), comm)
        locals_.append(comm.calls[0][0][0])
    full = make_task(m)
    full.setup(reader, Scored(snapshots=tuple(list(range(T)))), FakeComm())
    assert sum(locals_) == full.global_train_count()


def _reference(task: NodeClassification, emb):
    """Per-split cross-entropy sums, labelled counts and correct counts, in numpy."""
    w = task.head.weight.detach().numpy()
    b = task.head.bias.detach().numpy()
    loss, count, correct = np.zeros(3), np.zeros(3), np.zeros(3)
    for t, z in emb.items():
        s = next(i for i, r in enumerate(task.ranges) if t in r)
        y = raw_labels(t)
        mask = y >= 0
        logits = z.detach().numpy()[mask] @ w.T + b
        logp = logits - np.logaddexp.reduce(logits, axis=1, keepdims=True)
        loss[s] += -logp[np.arange(mask.sum()), y[mask]].sum()
        count[s] += mask.sum()
        correct[s] += (logits.argmax(1) == y[mask]).sum()
    return loss, count, correct


def test_forward_matches_independent_cross_entropy(task_data):
    """Loss, counts and accuracy equal a numpy cross-entropy; every Z_t gets a gradient."""
    _, m, reader = task_data
    task = make_task(m)
    task.setup(reader, Scored(snapshots=tuple(list(range(T)))), FakeComm())
    assert all(len(r) > 0 for r in task.ranges)  # precondition: every split has snapshots
    emb = _emb()
    batch = task(emb, epoch=0)
    loss, count, correct = _reference(task, emb)
    assert float(batch.loss_sum) == pytest.approx(loss[0], rel=1e-12)
    assert task.global_train_count() == count[0]
    np.testing.assert_allclose(batch.stats[0::3], loss, rtol=1e-12)
    assert np.array_equal(batch.stats[1::3], count) and np.array_equal(batch.stats[2::3], correct)
    met = task.metrics(batch.stats)
    for s, name in enumerate(("train", "val", "test")):
        assert met[f"{name}_loss"] == pytest.approx(loss[s] / count[s], rel=1e-12)
        assert met[f"{name}_acc"] == correct[s] / count[s]
    # Task.forward contract: the loss reaches every embedding (zero gradient outside train)
    batch.loss_sum.backward()
    for t, z in emb.items():
        assert z.grad is not None
        assert (float(z.grad.abs().sum()) > 0) == (t in task.ranges[0])


def test_metrics_nan_for_empty_split(task_data):
    """Empty splits give NaN metrics."""
    _, m, _ = task_data
    met = make_task(m).metrics(np.zeros(9))
    assert all(np.isnan(v) for v in met.values())


def test_snapshot_work_is_three_times_larger_on_train_steps(task_data):
    """Work is constant per snapshot and 3x on train snapshots."""
    _, m, _ = task_data
    work = NodeClassification.snapshot_work(CFG, m)
    train = split_steps(T, CFG.split)[0]
    assert work.shape == (T,)
    other = [t for t in range(T) if t not in train]
    assert len(set(work[other])) == 1 and work[other[0]] > 0
    assert np.all(work[list(train)] == 3 * work[other[0]])


def test_dataset_without_labels_is_a_data_error(tmp_path):
    """A dataset without labels is refused with a DataError that says so."""
    root = tmp_path / "nolabels"
    write_dataset(root, random_snapshots(3, 5, 6, 0, labels=False), num_vertices=5)
    m = load_manifest(root)
    assert m.num_classes == 0
    with pytest.raises(DataError, match="labels"):
        NodeClassification(CFG, m, 4, seed=0)


def test_a_dataset_without_labels_is_refused_before_the_run_naming_the_job(launcher, tmp_path):
    """node_classification on a dataset without labels: one line naming the job file (or the --set that asked) and
    both ways to make labels (``prepare --labels``, the Python adapters'), exit 2, no run directory left. The head
    refused it only when built, in a line naming neither the file nor the Python adapters."""
    data = tmp_path / "plain"
    write_dataset(data, random_snapshots(5, 11, 20, 1, labels=False), num_vertices=11, shard_snapshots=3)
    for job, extra in ((write_job(tmp_path / "nc.yaml", data, task={"name": "node_classification"}), []),
                       (write_job(tmp_path / "lp.yaml", data), ["--set", "task.name=node_classification"])):
        proc = launcher.run(None, ["-m", "hpcdgnn", "run", str(job), "--output", str(tmp_path / "r"), *extra])
        lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
        assert proc.returncode == 2 and len(lines) == 1, proc.stderr
        who = "--set task.name" if extra else f"{job}: task.name"
        assert f"{who}: node_classification needs labels, but the dataset has none" in lines[0], lines[0]
        assert "--labels (e.g. next_activity)" in lines[0] and "from_signal(..., labels=True)" in lines[0], lines[0]
        assert not (tmp_path / "r").exists()
