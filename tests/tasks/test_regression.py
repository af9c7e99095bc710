"""Regression (issue 14 item 4): horizon-H targets, MSE sums, metrics by hand, exactness at P = 3, bad input.

The unit tests call the task directly on a tiny dataset written here, and check
every stat against a numpy computation of the documented formulas; the MPI tests
run ``python -m hpcdgnn run`` on a cut of the real chickenpox file.
"""

from __future__ import annotations

import gzip
import json
import subprocess
import time

import numpy as np
import pytest
import torch

from hpcdgnn.data.manifest import load_manifest
from hpcdgnn.data.prepare import prepare_dataset
from hpcdgnn.data.shard_reader import ShardReader
from hpcdgnn.data.writer import RawSnapshot, write_dataset
from hpcdgnn.errors import ConfigError, DataError
from hpcdgnn.tasks import build_task, split_steps, task_class
from hpcdgnn.tasks.base import Scored
from hpcdgnn.tasks.regression import MAPE_EPS, Regression, RegressionOptions
from tests.conftest import SHARED_DATA, make_dataset, write_job
from tests.tasks.conftest import FakeComm
from tests.train.test_exactness import _losses, _losses_many

T, N, F, H = 6, 7, 3, 2
CFG = RegressionOptions(split=(0.5, 0.25, 0.25), horizon=H)


def _raw_targets() -> np.ndarray:
    """(T, N) targets with NaNs and a few values inside MAPE_EPS of 0."""
    rng = np.random.default_rng(5)
    y = rng.normal(size=(T, N))
    y[rng.random((T, N)) < 0.2] = np.nan
    y[1, 2] = 0.0
    y[3, 4] = MAPE_EPS / 2
    y[T - 1] = np.nan  # as next_degree's last snapshot
    return y


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """(manifest, reader) of a T = 6, N = 7 dataset carrying _raw_targets()."""
    root = tmp_path_factory.mktemp("regression") / "d"
    y = _raw_targets()
    snaps = (RawSnapshot(np.array([t % N, 1]), np.array([2, (t + 3) % N]), targets=y[t]) for t in range(T))
    write_dataset(root, snaps, num_vertices=N, targets="test", shard_snapshots=4)
    m = load_manifest(root)
    with ShardReader(root, m) as reader:
        yield m, reader


def _task(m) -> Regression:
    torch.manual_seed(0)
    return Regression(CFG, m, F, seed=0).double()


def _emb(seed: int = 3) -> dict[int, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {t: torch.randn(N, F, dtype=torch.float64, generator=g).requires_grad_(True) for t in range(T)}


def _by_hand(task: Regression, emb) -> np.ndarray:
    """[sq, abs, n, ape, n_ape] per split from the documented formulas, in numpy."""
    w, b = task.head.weight.detach().numpy(), task.head.bias.detach().numpy()
    y = _raw_targets()
    out = np.zeros((3, 5))
    for t, z in emb.items():
        if t > T - H:
            continue  # not a step: its targets would run past T - 1
        s = next(i for i, r in enumerate(task.ranges) if t in r)
        pred = z.detach().numpy() @ w.T + b  # (N, H)
        yy = np.stack([y[t + h] for h in range(H)], axis=1)
        mask = ~np.isnan(yy)
        e = (pred - yy)[mask]
        big = np.abs(yy[mask]) > MAPE_EPS
        out[s] += [(e**2).sum(), np.abs(e).sum(), mask.sum(), (np.abs(e[big]) / np.abs(yy[mask][big])).sum(), big.sum()]
    return out


def test_steps_split_and_static_cost(data):
    """Steps t = 0..T-H split by time; the train horizon and work follow them; build_task finds the class."""
    m, _ = data
    assert isinstance(build_task(CFG, m, F, seed=0), Regression) and task_class("regression") is Regression
    task = _task(m)
    assert task.ranges == split_steps(T - H + 1, CFG.split) == [range(0, 2), range(2, 4), range(4, 5)]
    assert tuple(task.head.weight.shape) == (H, F)
    assert Regression.train_horizon(CFG, m) == 1
    assert Regression.snapshot_work(CFG, m).tolist() == [3 * N * H, 3 * N * H, N * H, N * H, N * H, 0.0]


def test_loss_stats_and_metrics_by_hand(data):
    """Stats equal the numpy sums; the loss is the train squared-error sum; metrics are their ratios."""
    m, reader = data
    task, comm = _task(m), FakeComm()
    task.setup(reader, Scored(snapshots=tuple(list(range(T)))), comm)
    ref = _by_hand(task, _emb())
    assert task.global_train_count() == ref[0, 2] and comm.calls == [([ref[0, 2]], "setup")]
    emb = _emb()
    out = task(emb, epoch=1)
    np.testing.assert_allclose(out.stats.reshape(3, 5), ref, rtol=1e-12)
    assert float(out.loss_sum.detach()) == pytest.approx(ref[0, 0], rel=1e-12)
    assert ref[:, 4].sum() < ref[:, 2].sum()  # the near-zero targets really were left out of the MAPE
    got = task.metrics(out.stats)
    for s, name in enumerate(("train", "val", "test")):
        sq, ab, n, ape, na = ref[s]
        assert got[f"{name}_loss"] == pytest.approx(sq / n, rel=1e-12)
        assert got[f"{name}_rmse"] == pytest.approx(np.sqrt(sq / n), rel=1e-12)
        assert got[f"{name}_mae"] == pytest.approx(ab / n, rel=1e-12)
        assert got[f"{name}_mape"] == pytest.approx(ape / na, rel=1e-12)
    # the backward reaches every embedding (collectives need it) but only train steps get a gradient
    out.loss_sum.backward()
    for t, z in emb.items():
        assert z.grad is not None
        assert bool(z.grad.abs().sum() > 0) == (t in task.ranges[0]), t


def test_ranks_sum_to_one_rank(data):
    """Steps scored on three 'ranks' give the one-rank stats and train count when summed."""
    m, reader = data
    full = _task(m)
    full.setup(reader, Scored(snapshots=tuple(list(range(T)))), FakeComm())
    emb = _emb()
    ref = full(emb, 1).stats
    parts, counts = [], []
    for snaps in ([0, 3], [1, 5], [2, 4]):
        task, comm = _task(m), FakeComm()
        task.setup(reader, Scored(snapshots=tuple(snaps)), comm)
        counts.append(comm.calls[0][0][0])
        parts.append(task({t: emb[t] for t in snaps}, 1).stats)
    np.testing.assert_allclose(sum(parts), ref, rtol=1e-12)
    assert sum(counts) == full.global_train_count()


def test_refusals(data, tmp_path):
    """No targets in the dataset, or a horizon beyond T: one line naming the key."""
    m, _ = data
    plain = load_manifest(make_dataset(tmp_path / "plain", T=3, N=5, m=6))
    with pytest.raises(DataError, match=r"^task\.name: regression needs float node targets.*--targets next_degree"):
        Regression(CFG, plain, F, seed=0)
    with pytest.raises(ConfigError, match=r"^task\.horizon: 7 exceeds the dataset's T = 6"):
        Regression(RegressionOptions(horizon=7), m, F, seed=0)
    with pytest.raises(ValueError, match="horizon: must be >= 1"):
        RegressionOptions(horizon=0)


# --------------------------------------------------------------------------- under mpirun

CP_WEEKS = 33  # 33 weeks of chickenpox, lags 4: T = 29 snapshots, N = 20 (neither divisible by 3)


@pytest.fixture(scope="module")
def chickenpox(tmp_path_factory):
    """The first CP_WEEKS weeks of the real chickenpox file, prepared as pygt-json."""
    path = SHARED_DATA / "chickenpox.json.gz"
    if not path.is_file():
        pytest.skip(f"{path} not present")
    d = json.load(gzip.open(path))
    d["FX"] = d["FX"][:CP_WEEKS]
    tmp = tmp_path_factory.mktemp("cp")
    (tmp / "cp.json").write_text(json.dumps(d))
    m = prepare_dataset(tmp / "cp.json", "pygt-json", tmp / "data", shard_size=4)
    assert m.num_snapshots % 3 and m.num_vertices % 3 and m.targets == "signal"
    return tmp / "data"


def test_p3_reproduces_p1_snapshot_and_vertex(launcher, chickenpox, tmp_path):
    """float64, horizon 2: the loss and gradient-norm trajectories of P = 3 equal P = 1 (rtol 1e-9)."""
    job = write_job(tmp_path / "job.yaml", chickenpox, task={"name": "regression", "horizon": 2})
    ref, recs = _losses(launcher, None, job, tmp_path / "p1")
    assert len(ref) == 3 and np.all(np.isfinite(ref)) and ref[0, 0] != ref[-1, 0]
    assert {"val_mae", "test_rmse", "train_mape"} <= set(recs[0])
    strategies = ("snapshot", "vertex")
    gots = _losses_many(launcher, 3, [(job, tmp_path / f"p3-{s}", (f"strategy.name={s}",)) for s in strategies])
    for strategy, (got, recs3) in zip(strategies, gots, strict=True):
        np.testing.assert_allclose(got, ref, rtol=1e-9, err_msg=strategy)
        assert recs3[-1]["val_mae"] == pytest.approx(recs[-1]["val_mae"], rel=1e-9)


def test_p3_dataset_without_targets_exits_2(launcher, tmp_path):
    """task regression on a dataset without targets at P = 3: exit 2, one line naming task.name, no hang."""
    data = make_dataset(tmp_path / "plain", T=7, N=23, m=40)
    job = write_job(tmp_path / "job.yaml", data, task={"name": "regression"})
    t0 = time.monotonic()
    try:
        proc = launcher.run(3, ["-m", "hpcdgnn", "run", str(job)], timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail("P = 3 run on a dataset without targets hung")
    assert proc.returncode == 2, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if "hpcdgnn: error:" in ln]
    assert len(lines) == 1, proc.stderr
    assert "task.name: regression needs float node targets" in lines[0] and "Traceback" not in proc.stderr
    assert f"{job}: task.name" in lines[0]  # the file that asked for it
    assert time.monotonic() - t0 < 60
    # asked for by a --set: the line names the --set
    job = write_job(tmp_path / "lp.yaml", data)
    proc = launcher.run(None, ["-m", "hpcdgnn", "run", str(job), "--set", "task.name=regression"])
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert "--set task.name: regression needs float node targets" in lines[0], lines[0]
