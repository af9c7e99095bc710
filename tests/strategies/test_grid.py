"""strategy: grid (IBM §6.5's future work): snapshot groups × vertex ranges, exact against one process."""

from __future__ import annotations

import numpy as np
import pytest

from tests.conftest import write_job
from tests.train.test_exactness import _losses


# 1 x Pv is vertex partitioning (halo, no RNN move), Ps x 1 snapshot partitioning (RNN moves, no halo);
# 2 x 3 on 6 ranks (oversubscribed) has both; T = 7 and N = 23 divide by none of the sides
@pytest.mark.parametrize(("P", "Ps", "Pv"), [(2, 1, 2), (2, 2, 1), (3, 3, 1), (3, 1, 3),
                                        pytest.param(6, 2, 3, marks=pytest.mark.quick(strategy="grid"))],
                         ids=["1x2", "2x1", "3x1", "1x3", "2x3"])
def test_grid_is_exact(launcher, small_dataset, tmp_path, P, Ps, Pv):
    job = write_job(tmp_path / "job.yaml", small_dataset,
                    strategy={"name": "grid", "snapshot_ranks": Ps, "vertex_ranks": Pv})
    # one process: the 1 x 1 grid
    ref, _ = _losses(launcher, None, job, tmp_path / "plain", "strategy.snapshot_ranks=0", "strategy.vertex_ranks=0")
    got, recs = _losses(launcher, P, job, tmp_path / f"p{P}")
    np.testing.assert_allclose(got, ref, rtol=1e-6, err_msg=f"grid {Ps}x{Pv}")
    sent = recs[0]["bytes_by_tag"]
    assert (sent.get("halo.fwd", 0) > 0) == (Pv > 1), sent
    assert (sent.get("rnn.fwd", 0) > 0) == (Ps > 1), sent


def test_grid_sides_must_multiply_to_the_ranks(launcher, small_dataset, tmp_path):
    job = write_job(tmp_path / "job.yaml", small_dataset,
                    strategy={"name": "grid", "snapshot_ranks": 2, "vertex_ranks": 2})
    proc = launcher.run(3, ["-m", "hpcdgnn", "run", str(job), "--output", str(tmp_path / "out")])
    lines = [ln.replace("\0", "") for ln in proc.stderr.splitlines() if ln.strip() and "hpcdgnn: error" in ln]
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert "strategy.snapshot_ranks: 2 × strategy.vertex_ranks 2 = 4, but the job has P = 3" in lines[0]


@pytest.mark.mpi
def test_grid_with_its_sides_open_names_the_shape_it_trains(launcher, small_dataset, tmp_path):
    """Sides 0: the run derives Ps × Pv from P (the largest Ps <= T dividing P) and its first line says which
    (`plan` marks the same one), so that a user learns it before reading plan.json."""
    job = write_job(tmp_path / "job.yaml", small_dataset, strategy={"name": "grid"}, train={"epochs": 1})
    proc = launcher.run(2, ["-m", "hpcdgnn", "run", str(job), "--output", str(tmp_path / "out")])
    assert proc.returncode == 0, proc.stderr
    assert "strategy grid 2x1 (snapshot_ranks x vertex_ranks), P=2" in proc.stdout.splitlines()[0]
