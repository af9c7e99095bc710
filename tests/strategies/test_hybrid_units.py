"""``strategy: hybrid``'s pure pieces by hand (no MPI): DynaHB's DQN reward (Eq. 3) and ε floor, the reservoir's
reuse probability (Eq. 4), a window's start (Def. 3: in [0, T_train − N_S]), one expected pass's steps, the
``reward_time: work`` load (Def. 2 × N_S / T) and an asynchronous averaging round (Alg. 2 l. 14–15: the mean)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from hpcdgnn.config.schema import AdjusterConfig
from hpcdgnn.partition.plan import balanced_bounds
from hpcdgnn.strategies.adjuster import BatchAdjuster
from hpcdgnn.strategies.hybrid import HybridBatches, HybridStrategy
from hpcdgnn.strategies.reservoir import BatchReservoir

# ---- H3: the DQN adjuster (DynaHB Eq. 3, ε-greedy)


def test_dqn_reward_is_eq3_time_term_plus_loss_reduction_term():
    adj = BatchAdjuster(AdjusterConfig(kind="dqn"), 4, 0, seed=3)
    adj.observe(10.0, 2.0)  # the first observation only records (loss, time)
    assert len(adj.replay) == 0
    adj.observe(8.0, 1.5)
    # Δ_c = 2, Δ_l = 0: R = (2 − 1.5) / 2 + clip((2 − 0) / 2) = 0.25 + 1; s = 2 / 10
    s_l, _, r, s = adj.replay[-1]
    assert (s_l, s) == (0.0, pytest.approx(0.2, abs=1e-15))
    assert r == pytest.approx(1.25, abs=1e-12)
    adj.observe(6.5, 1.2)
    # Δ_c = 1.5, Δ_l = 2: R = (1.5 − 1.2) / 1.5 + (1.5 − 2) / 1.5 = 0.2 − 1/3; s = 1.5 / 8
    s_l, _, r, s = adj.replay[-1]
    assert s_l == pytest.approx(0.2, abs=1e-15) and s == pytest.approx(1.5 / 8, abs=1e-15)
    assert r == pytest.approx(0.2 - 1 / 3, abs=1e-12)
    adj.observe(6.5, 2.4)
    # Δ_c = 0 (below 1e-12): the loss term is 0; the time term clips at −1
    assert adj.replay[-1][2] == pytest.approx(-1.0, abs=1e-12)


def test_dqn_epsilon_decays_per_decision_to_its_floor():
    adj = BatchAdjuster(AdjusterConfig(kind="dqn", epsilon=1.0, epsilon_decay=0.5, epsilon_min=0.1), 3, 0, seed=0)
    adj.observe(5.0, 1.0)  # no decision yet
    assert adj.epsilon == 1.0
    seen = []
    for k in range(8):
        adj.observe(5.0 - 0.1 * (k + 1), 1.0)
        seen.append(adj.epsilon)
    assert seen == pytest.approx([0.5, 0.25, 0.125, 0.1, 0.1, 0.1, 0.1, 0.1], abs=1e-15)
    assert adj.decisions == 8


# ---- H4: the reservoir (Eq. 4)


def test_reservoir_reuse_probability_is_stored_over_cap():
    cfg = SimpleNamespace(max_mb=1.0, threads=0)
    rsv = BatchReservoir(cfg, [4, 1], lambda a, serial: SimpleNamespace(serial=serial, nbytes=8))
    assert rsv.p(0) == 0.0 and rsv.p(1) == 0.0
    got = []
    for _ in range(5):  # the fifth finds the store full
        rsv.fill(0)
        got.append(rsv.p(0))
    assert got == [0.25, 0.5, 0.75, 1.0, 1.0]
    assert len(rsv.stores[0]) == 4 and rsv.serials == [4, 0]
    rsv.fill(1)
    assert rsv.p(1) == 1.0


def test_a_stored_batch_counts_its_graphs_and_operators_not_only_its_row_ids():
    """``max_mb`` and the record's ``reservoir.bytes`` count what a stored batch holds: a graph-recurrent
    cell's step graphs among its rows (GConvLSTM, DCRNN, ...) and a sampled GCN layer's Ã blocks (and their
    transposes once built), besides the row ids — before, a batch counted as its row ids and targets alone."""
    from hpcdgnn.ops.sparse import NormalizedAdjacency, csr_nbytes, gcn_norm
    from hpcdgnn.strategies.reservoir import Stored
    from hpcdgnn.strategies.sampling import RowsStepGraph

    def arrays(*xs):
        return sum(x.numel() * x.element_size() if isinstance(x, torch.Tensor) else x.nbytes for x in xs)

    rows, targets = np.array([0, 4, 7]), np.array([4, 7])
    indptr, indices = torch.tensor([0, 2, 3, 3]), torch.tensor([1, 2, 0])
    values = torch.ones(3, dtype=torch.float64)
    steps = [RowsStepGraph(t, indptr, indices, values, rows=rows) for t in range(2)]
    cells = SimpleNamespace(cells=rows, graphs=steps)
    graph_bytes = 2 * arrays(indptr, indices, values)
    assert Stored(0, None, targets, cells).nbytes == arrays(rows, targets) + graph_bytes
    # an operator memoised on a step graph (a restricted Ã, a CSR tensor) is held by the batch too
    adj = gcn_norm(0, indptr, indices, values, torch.float64)
    steps[0].ops["gcn"] = (adj.a, None)
    assert Stored(0, None, targets, cells).nbytes == arrays(rows, targets) + graph_bytes + csr_nbytes(adj.a)
    # sampled GCN layers: per layer its rows and its Ã block; Ãᵀ counts once the backward built it
    lazy = NormalizedAdjacency(0, adj.a)  # Ãᵀ built on first use, as a sampled block's
    gcn = SimpleNamespace(rows=[rows, targets], adj=[lazy, None])
    assert Stored(0, None, targets, gcn).nbytes == arrays(rows, targets, targets) + csr_nbytes(adj.a)
    lazy.transposed()
    assert Stored(0, None, targets, gcn).nbytes == arrays(rows, targets, targets) + 2 * csr_nbytes(adj.a)


def test_generator_threads_are_at_most_one_per_action():
    """``reservoir.threads`` beyond the actions: thread i builds actions i, i + threads, ..., so a thread past
    the last action owns none; it is not started (before, each such thread polled every 10 ms for nothing)."""
    import threading

    cfg = SimpleNamespace(max_mb=1.0, threads=5)
    go = threading.Event()  # the builds wait: the threads are counted while they run

    def build(a, serial):
        go.wait(10)
        return SimpleNamespace(serial=serial, nbytes=8)

    rsv = BatchReservoir(cfg, [1, 1], build)
    rsv.start()
    try:
        names = [t.name for t in threading.enumerate() if t.name.startswith("hpcdgnn-reservoir")]
        assert sorted(names) == ["hpcdgnn-reservoir-0", "hpcdgnn-reservoir-1"]
    finally:
        go.set()
        rsv.close()


def test_a_generator_thread_ends_once_its_stores_are_full():
    """Stores and their bytes only grow, so a store without room keeps none: a thread whose stores were full
    polled every 10 ms for the rest of the run; it ends now. Each build's seconds are counted under the lock."""
    import threading
    import time

    for cfg, caps, stored in ((SimpleNamespace(max_mb=1.0, threads=2), [2, 3, 1], [2, 3, 1]),
                              (SimpleNamespace(max_mb=40 / 2**20, threads=1), [5, 5], None)):  # by bytes
        rsv = BatchReservoir(cfg, caps, lambda a, serial: SimpleNamespace(serial=serial, nbytes=16))
        rsv.start()
        threads = list(rsv._threads)
        deadline = time.monotonic() + 10
        while any(t.is_alive() for t in threads) and time.monotonic() < deadline:
            time.sleep(0.01)
        try:
            assert not any(t.is_alive() for t in threads), [t.name for t in threading.enumerate()]
            if stored is not None:
                assert [len(s) for s in rsv.stores] == stored
            else:  # 40 bytes: room while below, so three of 16 bytes
                assert rsv.nbytes == 48 and sum(len(s) for s in rsv.stores) == 3
            assert rsv.seconds > 0
        finally:
            rsv.close()


# ---- H2: windows and steps


class _Batches(HybridBatches):
    """:class:`HybridBatches` over hand-set attributes (what :func:`hybrid_of` would give)."""

    def __init__(self, N, T, train_stop, actions, kind="fixed", start=0, steps=0, groups=1):
        self.N, self.T, self.train_stop, self.actions = N, T, train_stop, actions
        self.opts = SimpleNamespace(steps_per_epoch=steps, adjuster=SimpleNamespace(kind=kind, reward_time="work"),
                                    start_action=lambda: start)
        self.strata = balanced_bounds(N, groups)
        self.load_order = np.arange(N, dtype=np.int64)[::-1].copy()
        self.ctx = SimpleNamespace(job=SimpleNamespace(train=SimpleNamespace(seed=5)))


def test_window_starts_cover_exactly_0_to_t_train_minus_n_s():
    b = _Batches(N=12, T=10, train_stop=6, actions=[(0.3, 0.5)], groups=2)
    n_s, n_v = b.sizes(0)
    assert (n_s, n_v) == (3, 6)
    starts = set()
    for i in range(400):
        start, targets = b._draw(np.random.default_rng([1, i]), 0)
        starts.add(start)
        assert targets.shape == (6,) and np.all(np.diff(targets) > 0)
        # 3 from each stratum of the load order (12, 11, .., 1, 0 reversed: strata {6..11} and {0..5})
        assert np.sum(targets >= 6) == 3
    assert starts == {0, 1, 2, 3}  # every window inside steps 0..5, every one reachable
    drawn = {b.draw(e, i, 0)[0] for e in range(3) for i in range(60)}
    assert drawn == {0, 1, 2, 3}


def test_steps_per_epoch_is_the_ceiling_of_one_expected_pass():
    # N_S = round(0.25 · 8) = 2, N_V = round(0.3 · 10) = 3: 10 · 5 / 6 = 8.33 -> 9
    assert _Batches(N=10, T=8, train_stop=5, actions=[(0.25, 0.3)]).steps_per_epoch() == 9
    # random over (2, 3) and (2, 5): mean 8; 50 / 8 = 6.25 -> 7
    b = _Batches(N=10, T=8, train_stop=5, actions=[(0.25, 0.3), (0.25, 0.5)], kind="random")
    assert b.steps_per_epoch() == 7
    # fixed at action 1 only: 50 / 10 = 5 exactly
    assert _Batches(N=10, T=8, train_stop=5, actions=[(0.25, 0.3), (0.25, 0.5)], start=1).steps_per_epoch() == 5
    assert _Batches(N=10, T=8, train_stop=5, actions=[(0.25, 0.3)], steps=4).steps_per_epoch() == 4


def test_work_reward_is_targets_loads_times_n_s_over_t():
    s = object.__new__(HybridStrategy)
    vars(s).update(vars(_Batches(N=10, T=8, train_stop=5, actions=[(0.25, 0.3), (0.5, 0.3)])))
    s.loads = np.arange(1.0, 11.0)
    mine = np.array([1, 3, 8])
    # loads 2 + 4 + 9 = 15; N_S = 2 and 4 of T = 8
    assert s._work(0, mine) == pytest.approx(15 * 2 / 8, abs=1e-12)
    assert s._work(1, mine) == pytest.approx(15 * 4 / 8, abs=1e-12)
    s.opts.adjuster.reward_time = "measured"
    assert s._work(0, mine) == 0.0


# ---- H5: one asynchronous averaging round


class _Comm:
    """Rank 0 of P = 3: the all-reduce adds the other replicas' flat vectors."""

    def __init__(self, others):
        self.size = 3
        self.others = others
        self.exchange = SimpleNamespace(ibarrier=lambda tag: SimpleNamespace(done=True), wait=lambda req: None)

    def allreduce_(self, flat, op, tag):
        assert op == "sum"
        for o in self.others:
            flat += o


def _replica(seed):
    g = torch.Generator().manual_seed(seed)
    params = [torch.randn(3, 2, generator=g, dtype=torch.float64), torch.randn(4, generator=g, dtype=torch.float64)]
    state = {i: {"exp_avg": torch.randn(p.shape, generator=g, dtype=torch.float64),
                 "exp_avg_sq": torch.rand(p.shape, generator=g, dtype=torch.float64)} for i, p in enumerate(params)}
    return SimpleNamespace(params=params, state=state)


def _flat(opt, finished):
    ts = [*opt.params, *(opt.state[i][k] for i in range(len(opt.params)) for k in ("exp_avg", "exp_avg_sq"))]
    return torch.cat([*(t.reshape(-1) for t in ts), torch.tensor([float(finished)], dtype=torch.float64)])


def test_an_averaging_round_leaves_the_mean_of_the_replicas():
    opts = [_replica(s) for s in (1, 2, 3)]
    before = [[t.clone() for t in (*o.params, *(o.state[i][k] for i in range(2) for k in ("exp_avg", "exp_avg_sq")))]
              for o in opts]
    s = object.__new__(HybridStrategy)
    s.opts = SimpleNamespace(adjuster=SimpleNamespace(kind="fixed"))
    s.comm = _Comm([_flat(opts[1], True), _flat(opts[2], False)])
    s._optimizer, s._pending, s._rounds = opts[0], None, 0
    assert s._round(finished=True) == 2  # ranks 0 and 1 have finished
    after = [*opts[0].params, *(opts[0].state[i][k] for i in range(2) for k in ("exp_avg", "exp_avg_sq"))]
    for j, t in enumerate(after):
        mean = (before[0][j] + before[1][j] + before[2][j]) / 3
        torch.testing.assert_close(t, mean, rtol=0, atol=1e-14)
    assert s._rounds == 1 and s._pending is None

