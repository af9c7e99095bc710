"""S3 transfer modes and the gloo backend under mpirun: same losses, counted bytes (issue 3)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from hpcdgnn.data.manifest import load_manifest
from hpcdgnn.tasks import task_class
from hpcdgnn.tasks.link_prediction import LinkPredictionOptions
from tests.conftest import assert_same_run, write_job
from tests.train.test_exactness import _losses_many


@pytest.mark.parametrize("np_", [None, 3])
def test_base_and_graph_difference_give_identical_losses(launcher, small_dataset, tmp_path, np_):
    """Both wire formats rebuild the same snapshots bit for bit, so the runs are bit-identical (to rounding on a
    GPU: ``assert_same_run``)."""
    job = write_job(tmp_path / "job.yaml", small_dataset, model={"name": "tmgcn"}, strategy={"blocks": 3})
    (base, _), (gd, _) = _losses_many(launcher, np_, [
        (job, tmp_path / "base", ("strategy.transfer=base",)),
        (job, tmp_path / "gd", ("strategy.transfer=graph_difference",))])
    assert_same_run(gd, base)


def test_transfer_bytes_counted(launcher, small_dataset, tmp_path):
    """With blocks, every epoch reloads each block (twice when it is re-run for the gradient, except the
    last such block, whose forward in pass 1 already has autograd); the base bytes equal
    (16 + itemsize) * nnz per loaded snapshot, computed here from the manifest.
    """
    m = load_manifest(small_dataset)
    job = write_job(tmp_path / "job.yaml", small_dataset, model={"name": "cdgcn"}, strategy={"blocks": 3})
    # one launch: the base, graph-difference and block-less runs
    (_, recs), (_, gd), (_, flat) = _losses_many(launcher, 2, [
        (job, tmp_path / "base", ("strategy.transfer=base",)),
        (job, tmp_path / "gd", ("strategy.transfer=graph_difference",)),
        (job, tmp_path / "flat", ("strategy.blocks=1",))])
    bounds = json.loads((tmp_path / "base" / "plan.json").read_text())["block_bounds"]
    assert len(bounds) == 4
    # blocks that start after the last training step are not re-run (causal models, see SnapshotStrategy)
    horizon = task_class("link_prediction").train_horizon(LinkPredictionOptions(), m)
    value_size = 4  # shards store float32 edge weights
    last_grad = max(b for b in range(len(bounds) - 1) if bounds[b] <= horizon)
    per_epoch = 0
    for b in range(len(bounds) - 1):
        loads = 1 + (b < last_grad)
        per_epoch += loads * sum((16 + value_size) * m.snapshot_nnz[t] for t in range(bounds[b], bounds[b + 1]))
    assert all(r["transfer_bytes"] == per_epoch for r in recs), ([r["transfer_bytes"] for r in recs], per_epoch)
    assert 0 < gd[0]["transfer_bytes"] < per_epoch
    summary = json.loads((tmp_path / "gd" / "summary.json").read_text())
    assert summary["transfer"]["epoch_bytes"] == sum(r["transfer_bytes"] for r in gd)
    assert summary["transfer"]["setup_bytes"] > 0
    # without blocks the snapshots stay on the device: only the setup moves them
    assert all(r["transfer_bytes"] == 0 for r in flat)
    # the reloads are the epoch's load time, on every rank; nothing is loaded in an epoch without blocks
    assert all(r["time"]["load"]["min"] > 0 for r in [*recs, *gd]), [r["time"]["load"] for r in recs]
    assert all(r["time"]["load"]["max"] == 0 for r in flat), [r["time"]["load"] for r in flat]


def test_gloo_backend_matches_mpi(launcher, small_dataset, tmp_path):
    """comm.backend gloo (torch.distributed initialised from MPI) gives the MPI run's losses and bytes."""
    job = write_job(tmp_path / "job.yaml", small_dataset, model={"name": "tmgcn"})
    # one launch: the MPI run, then the gloo one (the only torch.distributed group the ranks make)
    (mpi, mrecs), (gloo, grecs) = _losses_many(launcher, 2, [(job, tmp_path / "mpi", ()),
                                                            (job, tmp_path / "gloo", ("comm.backend=gloo",))])
    np.testing.assert_allclose(gloo, mpi, rtol=1e-12)
    assert [r["bytes_sent"] for r in grecs] == [r["bytes_sent"] for r in mrecs]
    assert json.loads((tmp_path / "gloo" / "summary.json").read_text())["environment"]["comm_backend"] == "gloo"


def test_nccl_without_gpu_is_a_config_error(launcher, small_dataset, tmp_path):
    """Nccl on a rank with no GPU: one line naming the key, exit 2, no hang."""
    job = write_job(tmp_path / "job.yaml", small_dataset, comm={"backend": "nccl"}, train={"device": "cpu"})
    proc = launcher.run(2, ["-m", "hpcdgnn", "run", str(job)], timeout=60)
    assert proc.returncode == 2
    assert "comm.backend: nccl needs a GPU" in proc.stderr and proc.stderr.count("hpcdgnn: error:") == 1
