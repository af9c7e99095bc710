"""strategy: vertex (S6): exact against one process at P = 2 and 3, halo volume grows with P."""

from __future__ import annotations

import json

import numpy as np
import pytest

from hpcdgnn.errors import ConfigError
from hpcdgnn.partition.vertex import vertex_partition
from tests.conftest import SMALL_N, SMALL_T, make_dataset, write_job
from tests.train.test_exactness import MODELS, _losses


def test_vertex_partition_methods():
    assert vertex_partition("range", 10, 3).tolist() == [0, 0, 0, 0, 1, 1, 1, 2, 2, 2]
    h = vertex_partition("hash", 1000, 3)
    assert set(h.tolist()) == {0, 1, 2} and np.bincount(h).min() > 250  # spread, not blocks
    assert not np.array_equal(h, np.sort(h))
    try:
        import pymetis  # noqa: F401
    except ImportError:
        with pytest.raises(ConfigError, match="pymetis"):
            vertex_partition("metis", 10, 2, (np.array([0]), np.array([1])))


def _setup_bytes(run) -> int:
    return json.loads((run / "summary.json").read_text())["totals"]["setup_bytes_sent"]


# each model once and each partition once (the partition decides the halo, the model what crosses it;
# the full 3 x 3 grid cost 27 mpirun launches and found nothing the diagonal misses)
# the hash partition (halos from every rank) is vertex's case in the quick subset
@pytest.mark.parametrize(("model", "partition"), [
    pytest.param(m, p, marks=[pytest.mark.quick(strategy="vertex")] if p == "hash" else [])
    for m, p in zip(MODELS, ["range", "hash", "metis"], strict=True)])
def test_vertex_strategy_is_exact(launcher, small_dataset, tmp_path, model, partition):
    if partition == "metis":
        pytest.importorskip("pymetis")  # an optional dependency (tests/run.sh installs it)
    assert SMALL_T % 3 and SMALL_N % 3
    job = write_job(tmp_path / "job.yaml", small_dataset, model={"name": model},
                    strategy={"name": "vertex", "partition": partition})
    ref, _ = _losses(launcher, None, job, tmp_path / "plain")
    halo = []
    for P in (2, 3):
        got, recs = _losses(launcher, P, job, tmp_path / f"p{P}")
        np.testing.assert_allclose(got, ref, rtol=1e-6, err_msg=f"{model} {partition} P={P}")
        halo.append(recs[0]["bytes_by_tag"].get("halo.fwd", 0))
        # the set-up's reads of the halo's input rows (and its collectives) are in the summary, in no epoch
        assert _setup_bytes(tmp_path / f"p{P}") > 0
    assert _setup_bytes(tmp_path / "plain") == 0  # one process sends nothing
    assert 0 < halo[0] < halo[1]  # more ranks, more cut edges, more halo rows (IBM Table 2)


def test_metis_cuts_fewer_edges_than_hash():
    """On a graph of two dense communities METIS finds the cut a hash ignores."""
    pytest.importorskip("pymetis")
    rng = np.random.default_rng(0)
    a, b = rng.integers(0, 50, 400), rng.integers(0, 50, 400)  # edges inside the community 0..49
    src = np.concatenate([a, a + 50, [0]])  # the same pattern inside 50..99, and one bridge
    dst = np.concatenate([b, b + 50, [50]])
    cut = {}
    for method in ("metis", "hash"):
        part = vertex_partition(method, 100, 2, (src, dst))
        assert np.bincount(part, minlength=2).min() >= 45  # balanced
        cut[method] = int((part[src] != part[dst]).sum())
    assert cut["metis"] <= 2 < cut["hash"]


def test_vertex_strategy_more_ranks_than_vertices(launcher, tmp_path):
    data = make_dataset(tmp_path / "two", T=5, N=2, m=4)
    job = write_job(tmp_path / "job.yaml", data, model={"name": "cdgcn"}, task={"name": "node_classification"},
                    strategy={"name": "vertex"})
    ref, _ = _losses(launcher, None, job, tmp_path / "plain")
    got, _ = _losses(launcher, 3, job, tmp_path / "p3")
    np.testing.assert_allclose(got, ref, rtol=1e-6)
