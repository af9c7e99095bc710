"""ReInc's reuse beyond overlapping windows (issue 14, ReInc §3.1–3.3), float64.

* the decoder's snapshot form (``model.decoder_input: snapshots``): one sample equals full-graph computation
  (teacher forcing 1 and 0; with the input bases from the reuse cache and without); under ``mpirun`` reuse on
  equals reuse off at P = 1 and P = 3, P = 3 equals P = 1 (T = 8, N = 23), and the ``reuse`` record shows
  hits by the encoder on entries the decoder made and the other way round, and the cells' local level
  (K − 1 hits per state aggregation); a bad value is one line, exit 2;
* R2 from the cache: a miss of Ã_t·X_t filled by Eq. 2 from a cached Agg_{t−1} equals from scratch (1e-10),
  and in a run with a small LRU cache such fills happen and change no loss;
* an evaluation pass a pre-emption stops leaves the cache as training left it (what the checkpoint of the
  trained epoch holds, from which the resume evaluates again).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from hpcdgnn.config.load import load_job
from hpcdgnn.data.manifest import load_manifest
from hpcdgnn.data.shard_reader import ShardReader
from hpcdgnn.nn.models import DecoderInputs, build_model
from hpcdgnn.strategies.base import StrategyContext
from hpcdgnn.strategies.sequences import SampleLayout, SequencesStrategy
from hpcdgnn.tasks import build_task
from tests.conftest import make_dataset, write_job
from tests.strategies.test_sequences import exits_2_with_one_line
from tests.strategies.test_sequences_cells import _full, _FullLayout, _OneRank, _setup, small, sparse  # noqa: F401
from tests.train.test_exactness import _losses, _losses_many

H = 3


class _SnapshotLayout(_FullLayout):
    """Full-graph computation of a window and the decoder's snapshot form: step d reads snapshot ``reads[d]``
    (X and the whole graph) or, where None, its prediction on the window's last graph."""

    def __init__(self, xs, graphs, window, reads):
        super().__init__(xs[:window], graphs[:window], [None] * H, 2)
        first = graphs[0].t
        self.snaps = [None if u is None else xs[u - first] for u in reads]
        self.snap_graphs = [None if u is None else graphs[u - first] for u in reads]

    def decoder_inputs(self):
        return DecoderInputs(self.graphs[-1], self.teacher, self.snaps, self.snap_graphs)


@pytest.mark.parametrize("teacher", [1.0, 0.0])
@pytest.mark.parametrize("model", ["gconv_lstm", "gcrn_m1"])
def test_snapshot_form_sample_equals_full_graph(sparse, tmp_path, model, teacher):  # noqa: F811
    """Window 2, horizon 3: teacher-forced steps convolve over G_{t+1}, G_{t+2}, whose receptive fields the
    sample's rows must close over too; the cache's bases and the sample's own give the full-graph forecasts."""
    s, net, _ = _setup(sparse, tmp_path, model, 2, [], encoder_decoder=True, teacher=teacher, window=2,
                       horizon=H, decoder_input="snapshots")
    assert s.reads_snapshots and s.reads_basis
    seq = next(q for q in s.seqs if q.split == 0 and q.start > 0)
    batch = s.node_batches(1)[0]
    xs, graphs = _full(sparse, range(seq.start, seq.t + H))
    for reuse in (True, False):
        s.reads_basis = reuse
        layout = SampleLayout(s, seq, batch, batch, s._rng(1, seq, 0, True), epoch=1, b=0, train=True)
        assert layout.decoder == [seq.t] + [seq.t + d if teacher else None for d in range(1, H)]
        assert batch.shape[0] < layout.cells.shape[0] < xs.shape[1]
        got = net(layout).rows
        ref = net(_SnapshotLayout(xs, graphs, 2, layout.decoder))[torch.from_numpy(batch)]
        torch.testing.assert_close(got, ref, rtol=0, atol=1e-10)
    # not vacuous: the targets form forecasts something else from the same encoder
    s.reads_snapshots = False
    other = SampleLayout(s, seq, batch, batch, s._rng(1, seq, 0, True), epoch=1, b=0, train=True)
    assert (net(other).rows - ref).abs().max() > 1e-6


def _decoder_job(tmp_path, data, **model):
    return write_job(tmp_path / "ed.yaml", data,
                     model={"name": "gconv_lstm", "encoder_decoder": True, "decoder_input": "snapshots",
                            "teacher_forcing": 0.7, **model},
                     task={"name": "regression", "horizon": 2}, train={"epochs": 2},
                     strategy={"name": "sequences", "window": 3, "batch_vertices": 8, "fanouts": []})


def test_snapshot_form_reuse_changes_nothing_and_p3_reproduces_one_rank(launcher, small, tmp_path):  # noqa: F811
    """gconv_lstm 2 + 2 cells, horizon 2, teacher forcing 0.7, full neighbourhoods, T = 8, N = 23 (neither
    divisible by 3): reuse off = reuse on at P = 1 and at P = 3, and P = 3 = P = 1. The records show what was
    shared: the encoder hits bases the decoder made (snapshot t + 1 read by a teacher-forced step before a
    later window's encoder reads it) and the decoder hits the encoder's (X_t at step 0); every LSTM state
    aggregation is read by its 4 gates (3 local hits per miss); the plan foresaw every read."""
    job = _decoder_job(tmp_path, small)
    off1, _ = _losses(launcher, None, job, tmp_path / "off1", "strategy.reuse=off")
    on1, recs1 = _losses(launcher, None, job, tmp_path / "on1")
    assert np.all(np.isfinite(on1)) and on1[0, 0] != on1[-1, 0]
    np.testing.assert_allclose(on1, off1, rtol=1e-12)
    (on3, recs3), (off3, _) = _losses_many(launcher, 3, [(job, tmp_path / "on3", ()),
                                                         (job, tmp_path / "off3", ("strategy.reuse=off",))])
    np.testing.assert_allclose(on3, on1, rtol=1e-9)
    np.testing.assert_allclose(off3, on3, rtol=1e-12)
    assert recs3[-1]["val_mae"] == pytest.approx(recs1[-1]["val_mae"], rel=1e-9)
    assert set(recs3[-1]["bytes_by_tag"]) <= {"grad_allreduce", "batch"}
    for recs in (recs1, recs3):
        r = recs[0]["reuse"]
        assert r["cached"] == "input bases" and r["unplanned"] == 0, r
        assert r["decoder_to_encoder_hits"] > 0 and r["encoder_to_decoder_hits"] > 0, r
        assert r["local_misses"] > 0 and r["local_hits"] == 3 * r["local_misses"], r
        assert r["hits"] > 0 and r["hit_rate"] > 0.5
    # the targets form reads no snapshot in the decoder: nothing crosses between the parts
    tgt, recs = _losses(launcher, None, job, tmp_path / "targets", "model.decoder_input=targets")
    r = recs[0]["reuse"]
    assert r["decoder_to_encoder_hits"] == r["encoder_to_decoder_hits"] == 0 and r["hits"] > 0
    assert not np.allclose(tgt, on1, rtol=1e-6)


@pytest.mark.parametrize(("override", "needle"), [
    ("model.decoder_input=frames", "model.decoder_input: 'frames'"),
    ("model.encoder_decoder=false", "model.decoder_input: snapshots is an option of the decoder"),
])
def test_bad_decoder_input_exits_2_at_p3(launcher, small, tmp_path, override, needle):  # noqa: F811
    exits_2_with_one_line(launcher, _decoder_job(tmp_path, small), override, needle)


# -- R2 from the cache (ReInc §3.3.1) ---------------------------------------------------------------------

SEQ = {"name": "sequences", "window": 3, "batch_vertices": 8, "fanouts": [3, 0], "incremental_threshold": 10.0}


@pytest.fixture(scope="module")
def smooth(tmp_path_factory):
    """T = 7, N = 23 with edge-life smoothing (consecutive snapshots share most of their edges)."""
    return make_dataset(tmp_path_factory.mktemp("smooth") / "d", 7, 23, 40, edge_life=4)


def _lru_strategy(data, tmp_path, **strategy):
    """A one-process ``sequences`` strategy (:data:`SEQ` under LRU, and ``strategy``) with a CD-GCN and link
    prediction in float64, set up."""
    job = load_job(write_job(tmp_path / "job.yaml", data, strategy={**SEQ, "cache_policy": "lru", **strategy}), [])
    man = load_manifest(data)
    torch.manual_seed(0)
    net = build_model("cdgcn", man.num_features, 6, 2, 3).double()
    s = SequencesStrategy(StrategyContext(job, man, _OneRank(), torch.float64, str(data)))
    task = build_task(job.task, man, net.out_features, 0).double()
    with ShardReader(data, man) as reader:
        task.setup(reader, s.setup(SequencesStrategy.make_plan(man, 1, job), net, task, reader), _OneRank())
    return s, net, task


def test_miss_filled_incrementally_from_the_cached_previous_snapshot(smooth, tmp_path):
    """One process: with Agg_{t-1} in the cache, a miss of Ã_t·X_t is filled by Eq. 2 from it and equals
    Ã_t·X_t from scratch (1e-10); without it, from scratch; both counted."""
    s, _, _ = _lru_strategy(smooth, tmp_path)
    assert s.reads_ax and s._r2 is not None
    s.cache.invalidate("global")
    rows = np.array([0, 4, 9, 22])
    for t in (3, 5):
        s.cache.offer(s._input_key(t - 1), s._aggregate_input(t - 1))
        got = s.input_rows(t, rows)
        torch.testing.assert_close(got, s._aggregate_input(t, rows), rtol=1e-10, atol=1e-12)
        torch.testing.assert_close(s.cache.peek(s._input_key(t)), s._aggregate_input(t), rtol=1e-10, atol=1e-12)
    assert s._fills == {"incremental": 2, "scratch": 0}
    s.cache.invalidate("global")
    s.input_rows(2, rows)  # Agg_1 not held: from scratch
    assert s._fills == {"incremental": 2, "scratch": 1}


def test_a_stopped_evaluation_pass_leaves_the_cache_as_training_left_it(smooth, tmp_path):
    """One process, a two-entry LRU cache (every round evicts): ``evaluate`` stopped before its third round keeps
    the entries, their order and the place in the planned reads that epoch 1's training left — the state a
    checkpoint of the trained epoch holds and its resume evaluates from; run to its end, the pass moves them."""
    s, net, task = _lru_strategy(smooth, tmp_path, cache_mb=2 * 23 * 2 * 8 / 2**20 + 1e-9)  # N x F x 8 bytes, twice
    assert s.resumes_evaluation(1)
    for batch in s.batches(1):
        s.step(net, task, batch, 1.0)

    def state():
        st = s.cache.state_dict()
        return st["clock"], [(k, id(v)) for k, v, _ in st["entries"]]

    trained = state()
    asked = []
    s.evaluate(net, task, 1, stop=lambda r: asked.append(r) or r == 2)
    assert asked == [0, 1, 2] and state() == trained
    s.evaluate(net, task, 1)
    assert state()[0] > trained[0] and state()[1] != trained[1]


def test_incremental_fills_change_nothing(launcher, smooth, tmp_path):
    """A cache of two Ã_t·X_t under LRU (a window of 3 cycles through it): misses whose previous snapshot is
    held are filled by Eq. 2; the losses are reuse off's."""
    job = write_job(tmp_path / "job.yaml", smooth, model={"name": "cdgcn"}, strategy=SEQ, train={"epochs": 2})
    off, _ = _losses(launcher, None, job, tmp_path / "off", "strategy.reuse=off")
    two = f"strategy.cache_mb={2 * 23 * 2 * 8 / 2**20 + 1e-9:.9f}"  # N x F x 8 bytes, twice
    on, recs = _losses(launcher, None, job, tmp_path / "on", two, "strategy.cache_policy=lru")
    np.testing.assert_allclose(on, off, rtol=1e-12)
    r = recs[-1]["reuse"]
    assert r["misses"] > 0 and r["filled_incrementally"] > 0 and r["unplanned"] == 0, r
