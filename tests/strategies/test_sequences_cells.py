"""Graph-recurrent cells and the encoder–decoder under ``strategy: sequences`` (issue 14), float64.

* one process, no MPI: with full neighbourhoods (``fanouts: []``) one sample's outputs — the cells run over
  the rows :meth:`SequencesStrategy.cell_rows` derives, each step's whole-snapshot operator restricted to
  them — equal full-graph computation of the window restricted to the batch (1e-10), for every cell and for
  the encoder–decoder (teacher forcing 1 and 0), while those rows are fewer than N; sampled fanouts give a
  subset of those rows, the same for the same sample; DySAT's GAT over a batch's sampled block reads each
  output row's own column (a batch's rows equal those of a sample of every vertex);
* under ``mpirun -np 3``: gconv_gru (full neighbourhoods) and dcrnn (sampled) reproduce one rank's loss and
  gradient-norm trajectory (rtol 1e-9);
* the configuration errors of the encoder–decoder and the cells' error text (no MPI).
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from hpcdgnn.config.load import load_job
from hpcdgnn.data.manifest import load_manifest
from hpcdgnn.data.shard_reader import ShardReader
from hpcdgnn.data.writer import RawSnapshot, write_dataset
from hpcdgnn.errors import ConfigError
from hpcdgnn.nn.layout import Layout, StepGraph
from hpcdgnn.nn.models import DecoderInputs, build_encoder_decoder, build_model
from hpcdgnn.strategies.base import StrategyContext
from hpcdgnn.strategies.sequences import SampleLayout, SequencesStrategy
from hpcdgnn.tasks import build_task
from hpcdgnn.train.setup import check_model_strategy
from tests.conftest import write_job
from tests.train.test_exactness import _losses, _losses_many

T, N, F, M = 8, 61, 3, 45
CELLS = ["gconv_lstm", "gconv_gru", "dcrnn", "gcrn_m1"]


class _OneRank:
    """The communicator of a single process: all-reduce returns the values."""

    rank, size = 0, 1

    def allreduce_array(self, values, op="sum", tag=None):
        return np.asarray(values, dtype=np.float64)


def _snapshots(T: int, N: int, m: int, seed: int):
    """A sparse random directed graph (weights, features, targets with NaNs) per step."""
    for t in range(T):
        rng = np.random.default_rng([seed, t])
        s, d = rng.integers(0, N, m), rng.integers(0, N, m)
        keep = s != d
        y = rng.normal(size=N)
        y[rng.random(N) < 0.15] = np.nan
        yield RawSnapshot(s[keep], d[keep], weight=rng.random(keep.sum()) + 0.5, x=rng.normal(size=(N, F)), targets=y)


def signal_dataset(root, T: int, N: int, m: int, seed: int, shard: int = 3):
    """Write :func:`_snapshots` (weights, F features, signal targets) at ``root``; returns it."""
    write_dataset(root, _snapshots(T, N, m, seed), num_vertices=N, weights="given", targets="signal",
                  shard_snapshots=shard, feature_names=["a", "b", "c"])
    return root


@pytest.fixture(scope="module")
def sparse(tmp_path_factory):
    return signal_dataset(tmp_path_factory.mktemp("cells") / "d", T, N, M, 7, shard=4)


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    """T = 8, N = 23 (neither divisible by 3) with targets: the MPI runs."""
    return signal_dataset(tmp_path_factory.mktemp("cells-mpi") / "d", 8, 23, 30, 3)


def _setup(data, tmp_path, model: str, order: int, fanouts: list[int], encoder_decoder: bool = False,
           teacher: float = 0.5, window: int = 3, horizon: int = 3, decoder_input: str = "targets",
           cell: bool = True):
    """A one-process ``sequences`` strategy, its model (float64) and the regression task, set up (``cell``: a
    graph-recurrent cell's options)."""
    path = write_job(tmp_path / f"{model}.yaml", data,
                     model={"name": model, "hidden": 4, **({"order": order, "encoder_decoder": encoder_decoder,
                                                            "teacher_forcing": teacher, "decoder_input": decoder_input}
                                                           if cell else {})},
                     task={"name": "regression", "horizon": horizon},
                     strategy={"name": "sequences", "window": window, "batch_vertices": 7, "fanouts": fanouts})
    job = load_job(path, [])
    man = load_manifest(data)
    torch.manual_seed(0)
    if encoder_decoder:
        net = build_encoder_decoder(model, F, 4, 2, 3, order, horizon).double()
    else:
        net = build_model(model, F, 4, 2, 3, order).double()
    s = SequencesStrategy(StrategyContext(job, man, _OneRank(), torch.float64, str(data)))
    task = build_task(job.task, man, net.out_features, 0).double()
    if encoder_decoder:
        task.predict_in_model()
    with ShardReader(data, man) as reader:
        task.setup(reader, s.setup(SequencesStrategy.make_plan(man, 1, job), net, task, reader), _OneRank())
    return s, net, task


def _full(data, ts):
    """X_t (N, F) and A_t as step graphs, straight from the shards (none of the strategy's data)."""
    man = load_manifest(data)
    with ShardReader(data, man) as reader:
        snaps = [reader.read(t) for t in ts]
    xs = torch.stack([torch.from_numpy(np.ascontiguousarray(s.x)).double() for s in snaps])
    graphs = [StepGraph(t, torch.from_numpy(s.indptr), torch.from_numpy(s.indices), torch.from_numpy(s.weights))
              for t, s in zip(ts, snaps, strict=True)]
    return xs, graphs


class _FullLayout(Layout):
    """Every vertex at every step of the window, the whole graphs: full-graph computation."""

    def __init__(self, xs, graphs, teacher, num_layers):
        super().__init__(graphs[0].t, graphs[-1].t + 1, num_layers)
        self.xs, self.graphs, self.teacher = xs, graphs, teacher

    def spatial(self, layer, li, h, tparams):
        return self.xs if h is None else h

    def step_graphs(self, li):
        return self.graphs

    def decoder_inputs(self):
        return DecoderInputs(self.graphs[-1], self.teacher)

    def output(self, h):
        return h[-1]


@pytest.mark.parametrize(("model", "order"), [("gconv_lstm", 2), ("gconv_gru", 2), ("dcrnn", 2), ("gcrn_m1", 3)])
def test_full_neighbourhood_sample_equals_full_graph(sparse, tmp_path, monkeypatch, model, order):
    s, net, _ = _setup(sparse, tmp_path, model, order, [])
    seq = next(q for q in s.seqs if q.split == 0 and q.start > 0)
    batch = s.node_batches(1)[1]
    layout = SampleLayout(s, seq, batch, batch, s._rng(1, seq, 1, True), epoch=1, b=1, train=True)
    assert batch.shape[0] < layout.cells.shape[0] < N  # the restriction matters, and the closure is not all rows
    assert s.reads_basis  # full neighbourhoods, reuse on: layer 0 reads the whole snapshots' input bases
    got = net(layout).rows
    xs, graphs = _full(sparse, range(seq.start, seq.stop))
    ref = net(_FullLayout(xs, graphs, None, 2))[torch.from_numpy(batch)]
    torch.testing.assert_close(got, ref, rtol=0, atol=1e-10)
    s.reads_basis = False  # reuse off: the sample convolves X over its own rows; the closure alone is exact
    own = SampleLayout(s, seq, batch, batch, s._rng(1, seq, 1, True), epoch=1, b=1, train=True)
    torch.testing.assert_close(net(own).rows, ref, rtol=0, atol=1e-10)
    # not vacuous: one hop fewer in every expansion misses rows the batch depends on
    real = type(net.layers[0]).receptive_hops
    monkeypatch.setattr(type(net.layers[0]), "receptive_hops", lambda self: tuple(max(k - 1, 0) for k in real(self)))
    short = SampleLayout(s, seq, batch, batch, s._rng(1, seq, 1, True), epoch=1, b=1, train=True)
    assert (net(short).rows - ref).abs().max() > 1e-8
    monkeypatch.undo()
    # sampled fanouts: a subset of those rows, the same for the same sample
    s.fanout = [2, 1]
    a = s.cell_rows(seq, batch, s._rng(1, seq, 1, True))
    assert np.array_equal(a, s.cell_rows(seq, batch, s._rng(1, seq, 1, True)))
    assert np.all(np.isin(a, layout.cells)) and a.shape[0] < layout.cells.shape[0]


def test_dysat_sample_reads_each_rows_own_column(sparse, tmp_path, monkeypatch):
    """DySAT's GAT attends from each output row's own vertex (``LocalGraph.own``): over full neighbourhoods a
    batch of 7 vertices gets the rows the same model gives them in a sample of every vertex (1e-10), whose
    own columns are the identity; with each row's own column taken as its place among the columns (the
    batch's ascending columns are not the batch first), it does not."""
    import hpcdgnn.strategies.sample_layout as sample_layout

    s, net, _ = _setup(sparse, tmp_path, "dysat", 1, [], cell=False)
    seq = next(q for q in s.seqs if q.split == 0 and q.start > 0)
    batch = s.node_batches(1)[1]
    every = np.arange(N)
    ref = net(SampleLayout(s, seq, every, every, s._rng(1, seq, 1, True), epoch=1, b=1, train=True)).rows

    def sample():
        return net(SampleLayout(s, seq, batch, batch, s._rng(1, seq, 1, True), epoch=1, b=1, train=True)).rows

    assert batch.shape[0] < N and not np.array_equal(batch, np.arange(batch.shape[0]))
    torch.testing.assert_close(sample(), ref[torch.from_numpy(batch)], rtol=0, atol=1e-10)
    monkeypatch.setattr(sample_layout, "own_columns",
                        lambda rows, cols, steps: (np.arange(steps)[:, None] * cols.shape[0]
                                                   + np.arange(rows.shape[0])).reshape(-1))
    assert (sample() - ref[torch.from_numpy(batch)]).abs().max() > 1e-6


@pytest.mark.parametrize("teacher", [1.0, 0.0])
@pytest.mark.parametrize("model", ["gconv_gru", "gcrn_m1"])
def test_encoder_decoder_sample_equals_full_graph(sparse, tmp_path, model, teacher):
    """Window 2, horizon 4: the decoder's receptive field (its steps on G_t, its predictions fed back)
    reaches further than the encoder's; teacher forcing 1 (targets, NaN -> own prediction) and 0."""
    H = 4
    s, net, task = _setup(sparse, tmp_path, model, 2, [], encoder_decoder=True, teacher=teacher, window=2, horizon=H)
    seq = next(q for q in s.seqs if q.split == 0 and q.start > 0)
    batch = s.node_batches(1)[0]
    layout = SampleLayout(s, seq, batch, batch, s._rng(1, seq, 0, True), epoch=1, b=0, train=True)
    assert batch.shape[0] < layout.cells.shape[0] < N
    inputs = layout.decoder_inputs()
    assert [x is not None for x in inputs.teacher] == [False] + [teacher == 1.0] * (H - 1)
    got = net(layout).rows
    xs, graphs = _full(sparse, range(seq.start, seq.stop))
    block = task.target_block(seq.t)
    assert torch.isnan(block).any()  # some vertices read their own prediction even when teacher-forced
    full_teacher = [None] + [block[:, d - 1 : d] if teacher == 1.0 else None for d in range(1, H)]
    ref = net(_FullLayout(xs, graphs, full_teacher, 2))[torch.from_numpy(batch)]
    assert got.shape == (batch.shape[0], H)
    torch.testing.assert_close(got, ref, rtol=0, atol=1e-10)
    out = task(net(layout), 1)  # the task reads the forecasts as they are (no head)
    assert out.loss_sum.requires_grad and out.stats[2] > 0


def test_gconv_gru_and_dcrnn_p3_reproduce_one_rank(launcher, small, tmp_path):
    """T = 8, N = 23, node batches of 8 (the last one short): 3 ranks give one rank's trajectory; dcrnn
    with sampled fanouts (the draw depends on the sample, never on P)."""
    models = {"gconv_gru": {"fanouts": []}, "dcrnn": {"fanouts": [3, 2]}}
    jobs = {model: write_job(tmp_path / f"{model}.yaml", small, model={"name": model, "order": 2},
                             task={"name": "regression", "horizon": 2}, train={"epochs": 2},
                             strategy={"name": "sequences", "window": 3, "batch_vertices": 8, **extra})
            for model, extra in models.items()}
    refs = _losses_many(launcher, None, [(job, tmp_path / f"{m}-p1", ()) for m, job in jobs.items()])
    for ref, _ in refs:
        assert ref.shape == (2, 2) and np.all(np.isfinite(ref)) and ref[0, 0] != ref[-1, 0]
    gots = _losses_many(launcher, 3, [(job, tmp_path / f"{m}-p3", ()) for m, job in jobs.items()])
    for model, (ref, _), (got, recs) in zip(models, refs, gots, strict=True):
        np.testing.assert_allclose(got, ref, rtol=1e-9, err_msg=model)
        assert set(recs[-1]["bytes_by_tag"]) <= {"grad_allreduce", "batch"}


def test_encoder_decoder_p3_reproduces_one_rank(launcher, small, tmp_path):
    """gconv_lstm encoder–decoder (2 + 2 cells, horizon 2, teacher forcing 0.5: the draws depend on the
    sample, never on P), sampled fanouts: 3 ranks (N = 23, T = 8 not divisible) give one rank's trajectory."""
    job = write_job(tmp_path / "ed.yaml", small, model={"name": "gconv_lstm", "encoder_decoder": True},
                    task={"name": "regression", "horizon": 2}, train={"epochs": 2},
                    strategy={"name": "sequences", "window": 3, "batch_vertices": 8, "fanouts": [3, 2]})
    ref, recs1 = _losses(launcher, None, job, tmp_path / "p1")
    assert np.all(np.isfinite(ref)) and ref[0, 0] != ref[-1, 0]
    got, recs = _losses(launcher, 3, job, tmp_path / "p3")
    np.testing.assert_allclose(got, ref, rtol=1e-9)
    assert recs[-1]["val_mae"] == pytest.approx(recs1[-1]["val_mae"], rel=1e-9)
    # the planner's gradient bytes: the model's parameters only (it counted the regression head the run drops)
    proc = launcher.run(None, ["-m", "hpcdgnn", "plan", str(job), "--ranks", "3", "--strategies", "sequences",
                               "--json"])
    assert proc.returncode == 0, proc.stderr
    (pred,) = json.loads(proc.stdout)["predictions"]
    assert pred["bytes_by_tag"]["grad_allreduce"] == recs[-1]["bytes_by_tag"]["grad_allreduce"]


@pytest.mark.parametrize(("model", "sets", "needle"), [
    ({"name": "cdgcn", "encoder_decoder": True}, {},
     "model.encoder_decoder: not an option of model 'cdgcn'.*model dcrnn, gconv_gru, gconv_lstm, gcrn_m1 accept"),
    ({"name": "dcrnn", "teacher_forcing": 1.5}, {}, "model.teacher_forcing: 1.5 is not a probability"),
    ({"name": "dcrnn", "encoder_decoder": True}, {"task": {"name": "link_prediction"}},
     "forecasts task.name: regression"),
    ({"name": "dcrnn", "encoder_decoder": True}, {"strategy": {"name": "pss"}}, "strategy.name: sequences, not"),
    ({"name": "gconv_gru"}, {"strategy": {"name": "vertex"}},
     "use strategy.name: pss or sequences or hybrid at 2 ranks, or snapshot on 1 rank"),
])
def test_config_errors(small, tmp_path, model, sets, needle):
    sections = {"task": {"name": "regression"}, "strategy": {"name": "sequences"}}
    sections.update(sets)
    path = write_job(tmp_path / "job.yaml", small, model=model, **sections)
    with pytest.raises(ConfigError, match=needle):
        check_model_strategy(load_job(path, []), str(path), 2)


def test_sequences_accepts_the_cells(small, tmp_path):
    for model in CELLS:
        path = write_job(tmp_path / f"{model}.yaml", small, model={"name": model}, strategy={"name": "sequences"})
        check_model_strategy(load_job(path, []), str(path), 3)
