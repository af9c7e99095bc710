"""TGN-attn pieces without MPI (issue 15): the most-recent-k sampler against a loop, leak-freedom of the model,
masked neighbours, AP and MRR by hand, the node memory and the strategy's write rule."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from hpcdgnn.data.temporal_neighbors import NeighborBlock, TemporalNeighbors
from hpcdgnn.errors import ConfigError
from hpcdgnn.nn.models.tgn import TGN, MemoryRows, TGNInput, TimeEncoding, dense_min
from hpcdgnn.strategies.memory import MemoryPlan, MemoryStrategy, _Work
from hpcdgnn.strategies.node_memory import NodeMemory
from hpcdgnn.tasks.base import SPLITS
from hpcdgnn.tasks.temporal_link_prediction import (
    EventEmbeddings,
    TemporalLinkPrediction,
    TemporalLinkPredictionOptions,
    average_precision,
)

N, D, MEM, TDIM, HID, HEADS, K = 14, 3, 6, 4, 8, 2, 4


def same(a: torch.Tensor, b: torch.Tensor, what=None) -> None:
    """Equal up to float64 rounding: the model's per-node products depend on which nodes share a batch
    (GEMM blocking), so a changed batch composition may move the last bits; a leak moves far more."""
    torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-13, msg=None if what is None else str(what))


def stream(seed: int, E: int = 160, active: int = 11):
    """E events over nodes 0..active-1 (nodes active..N-1 never occur), integer times with many repeats,
    some self-loops; times sorted."""
    rng = np.random.default_rng(seed)
    src = rng.integers(0, active, E)
    dst = rng.integers(0, active, E)
    loops = rng.random(E) < 0.1
    dst[loops] = src[loops]
    t = np.sort(rng.integers(0, E // 4, E)).astype(np.float64)
    efeat = rng.standard_normal((E, D))
    return src.astype(np.int64), dst.astype(np.int64), t, efeat


def brute_recent(src, dst, v, cut, k):
    """The k most recent (event, other end) of v among events 0..cut-1, oldest first; a self-loop twice."""
    hist = []
    for e in range(cut):
        if src[e] == v:
            hist.append((e, int(dst[e])))
        if dst[e] == v:
            hist.append((e, int(src[e])))
    return hist[-k:] if k else []


# -- 1. the sampler ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("k", [1, 3, 10, 60])
def test_recent_matches_a_loop(k):
    src, dst, t, _ = stream(0)
    nb_index = TemporalNeighbors(src, dst, N)
    rng = np.random.default_rng(1)
    nodes = np.r_[rng.integers(0, N, 200), np.arange(N)]  # includes nodes without any history
    # query times: event times (ties: the events at that time are excluded), between them, before and after all
    qt = np.r_[rng.choice(t, 100), rng.uniform(t[0] - 2, t[-1] + 2, 100 + N)]
    cut = np.searchsorted(t, qt, side="left")
    block = nb_index.recent(nodes, cut, k)
    assert block.nodes.shape == block.events.shape == block.mask.shape == (nodes.shape[0], k)
    for q in range(nodes.shape[0]):
        want = brute_recent(src, dst, nodes[q], cut[q], k)
        n = len(want)
        assert block.mask[q].tolist() == [True] * n + [False] * (k - n), q
        assert block.events[q, :n].tolist() == [e for e, _ in want], q
        assert block.nodes[q, :n].tolist() == [o for _, o in want], q
        assert np.all(block.nodes[q, n:] == 0) and np.all(block.events[q, n:] == 0)
        # strictly before the query time, and nothing more recent was left out
        assert np.all(t[block.events[q, :n]] < qt[q])
        full = brute_recent(src, dst, nodes[q], cut[q], 10**9)
        assert n == min(k, len(full))


def test_index_bytes_without_building_the_index():
    """``TemporalNeighbors.index_bytes`` (the planner's figure) is what a built index holds."""
    src, dst, _, _ = stream(2)
    assert TemporalNeighbors.index_bytes(src.shape[0], N) == TemporalNeighbors(src, dst, N).nbytes()


def test_recent_empty_stream_and_history():
    empty = TemporalNeighbors(np.zeros(0, np.int64), np.zeros(0, np.int64), 3)
    b = empty.recent(np.array([0, 2]), np.array([0, 0]), 2)
    assert not b.mask.any() and b.nodes.shape == (2, 2)
    src, dst, t, _ = stream(2)
    b = TemporalNeighbors(src, dst, N).recent(np.array([N - 1, 0]), np.array([len(t), 0]), 5)
    assert not b.mask.any()  # a node that never occurs; any node before the first event


# -- 2./3. the model -------------------------------------------------------------------------------------------


def model(static=False, seed=0):
    torch.manual_seed(seed)
    return TGN(N, D, MEM, TDIM, HID, HEADS, static).double()


def memory_rows(unique, seed=5, t_max=0.0):
    """A random memory (state, mail) and update times before every event (as read at a batch start)."""
    rng = np.random.default_rng(seed)
    vals = rng.standard_normal((N, MEM + 2 * MEM + D))
    times = t_max - rng.uniform(0, 5, N)
    v = torch.from_numpy(vals[unique])
    return MemoryRows(mem=v[:, :MEM], mem_ts=times[unique].copy(), mail=v[:, MEM:])


def build_input(src, dst, t, efeat, roots, root_t, k=K, memory=True):
    """What ``MemoryStrategy._work`` builds for given root occurrences (its lines after ``roots``/``root_t``),
    with a fixed random memory read at the batch start."""
    nbi = TemporalNeighbors(src, dst, N)
    nb = nbi.recent(roots, np.searchsorted(t, root_t, side="left"), k)
    unique = np.unique(np.concatenate([roots, nb.nodes[nb.mask]]))
    ef = torch.from_numpy(efeat)
    inp = TGNInput(roots, root_t, nb, t[nb.events], ef[torch.from_numpy(nb.events)], unique, None)
    if memory:
        inp.memory = memory_rows(unique)
    return inp


def strategy_like(src, dst, t, efeat, batch_events=20, seed=7):
    """A MemoryStrategy with just what ``_work`` and ``_write`` read (no MPI, no setup)."""
    s = object.__new__(MemoryStrategy)
    E = t.shape[0]
    s.plan = MemoryPlan("memory", 1, 1, 1, 1, batch_events, {"train": [0, E], "val": [E, E], "test": [E, E]})
    s.seed, s.k_neighbors, s.dst_range = seed, K, (0, N)
    s.src, s.dst, s.t = src, dst, t
    s.efeat = s.efeat_dev = torch.from_numpy(efeat)
    s.ctx = SimpleNamespace(device=torch.device("cpu"), job=SimpleNamespace(task=TemporalLinkPredictionOptions()))
    s.neighbors = TemporalNeighbors(src, dst, N)
    s.model = model(False)  # _work builds the model's row plan
    return s


def test_helper_mirrors_strategy_work():
    """The test's input builder gives what the strategy's ``_work`` builds for the same roots."""
    src, dst, t, efeat = stream(3)
    s = strategy_like(src, dst, t, efeat)
    w = s._work("train", 4, 1, 0, 0, 2, 3)  # batch 4 = events [80, 100), first half: [80, 90)
    mine = build_input(src, dst, t, efeat, w.inp.roots, w.inp.root_t, memory=False)
    for name in ("roots", "root_t", "neighbor_t", "unique"):
        np.testing.assert_array_equal(getattr(mine, name), getattr(w.inp, name), err_msg=name)
    for name in ("nodes", "events", "mask"):
        np.testing.assert_array_equal(getattr(mine.neighbors, name), getattr(w.inp.neighbors, name), err_msg=name)
    assert torch.equal(mine.neighbor_feat, w.inp.neighbor_feat)
    np.testing.assert_array_equal(w.events, np.arange(80, 90))
    assert w.inp.roots.shape[0] == 10 * (2 + 3)
    # the writes: each endpoint's last occurrence in event order (source before destination), nodes of the
    # batch's later slice [90, 100) left to it; own/other: the roots holding the two endpoints' s'
    later = set(np.r_[src[90:100], dst[90:100]].tolist())
    last = {}
    for i, e in enumerate(range(80, 90)):
        for side, v in ((0, src[e]), (1, dst[e])):
            last[int(v)] = (e, side * 10 + i, (1 - side) * 10 + i)
    want = sorted((v, *x) for v, x in last.items() if v not in later)
    assert want and len(want) < len(last)  # both kinds occur
    got = list(zip(w.writes.nodes.tolist(), w.writes.events.tolist(), w.writes.own.tolist(), w.writes.other.tolist(),
                   strict=True))
    assert got == want
    np.testing.assert_array_equal(w.writes.times, t[w.writes.events])
    # training's plan attends every root per slot; evaluation's attends roots with ≥ k/2 real neighbours densely
    real = w.inp.neighbors.mask.sum(1)
    assert (real >= dense_min(w.inp.neighbors.mask.shape[1])).any()
    assert w.inp.occurrences.dense.size == 0 and w.inp.occurrences.part_read is None
    s.plan = MemoryPlan("memory", 1, 1, 1, 1, 20, {"train": [0, 100], "val": [100, 160], "test": [160, 160]})
    s.fixed = None  # no dataset-fixed negatives: drawn from the seed
    v = s._work("val", 1, 1, 0, 0, 1, 3)
    mask = v.inp.neighbors.mask
    assert v.inp.occurrences.dense.size == (mask.sum(1) >= dense_min(mask.shape[1])).sum() > 0


def batch_roots(src, dst, t, lo, hi, negatives=2, seed=11):
    """Root occurrences of events [lo, hi) as ``_work`` orders them: sources, destinations, negatives."""
    ev = np.arange(lo, hi)
    neg = np.random.default_rng(seed).integers(0, N, (hi - lo, negatives))
    roots = np.concatenate([src[ev], dst[ev], neg.reshape(-1)])
    root_t = np.concatenate([t[ev], t[ev], np.repeat(t[ev], negatives)])
    return roots, root_t


@pytest.mark.parametrize("static", [False, True])
def test_no_event_at_or_after_the_query_time_reaches_an_embedding(static):
    """For a threshold time T, rewrite every event at or after T (features, endpoints, later times): every root
    queried at time <= T keeps its embedding and its updated memory (to rounding); and rows queried after T
    did see something (the test would catch nothing otherwise)."""
    src, dst, t, efeat = stream(4)
    net = model(static)
    lo, hi = 100, 130
    roots, root_t = batch_roots(src, dst, t, lo, hi)
    with torch.no_grad():
        z0, s0 = net(build_input(src, dst, t, efeat, roots, root_t))
    rng = np.random.default_rng(9)
    checked = 0
    for T in np.unique(root_t)[:-1]:
        late = t >= T
        s2, d2, t2, f2 = src.copy(), dst.copy(), t.copy(), efeat.copy()
        f2[late] = rng.standard_normal((late.sum(), D)) * 100
        s2[late] = rng.integers(0, N, late.sum())
        d2[late] = rng.integers(0, N, late.sum())
        t2[late] += rng.uniform(0, 0.5) * (t2[late] > T)  # later events even later; still sorted, still >= T
        with torch.no_grad():
            z1, s1 = net(build_input(s2, d2, t2, f2, roots, root_t))
        old = root_t <= T
        same(z1[old], z0[old], T)
        if s0 is not None:
            same(s1[old], s0[old], T)
        assert not torch.allclose(z1[~old], z0[~old])
        checked += int(old.sum())
    assert checked > 0


def test_an_earlier_neighbour_event_changes_the_embedding():
    """Changing the features (or an endpoint) of an event the root reads changes its embedding; changing an
    event outside its k most recent (but earlier) does not."""
    src, dst, t, efeat = stream(5)
    net = model()
    roots, root_t = batch_roots(src, dst, t, 120, 140)
    inp = build_input(src, dst, t, efeat, roots, root_t)
    with torch.no_grad():
        z0, _ = net(inp)
    row = int(np.flatnonzero(inp.neighbors.mask.all(1))[0])  # a root with k neighbours
    e = int(inp.neighbors.events[row, -1])  # its most recent one
    f2 = efeat.copy()
    f2[e] += 1.0
    with torch.no_grad():
        z1, _ = net(build_input(src, dst, t, f2, roots, root_t))
    assert not torch.allclose(z1[row], z0[row])
    # an earlier event of the same node that fell out of the k most recent
    v, cut = roots[row], np.searchsorted(t, root_t[row], side="left")
    hist = [ev for ev, _ in brute_recent(src, dst, v, cut, 10**9)]
    older = [ev for ev in hist[: -K] if ev not in set(inp.neighbors.events[row].tolist())]
    assert older
    f3 = efeat.copy()
    f3[older[-1]] += 1.0
    with torch.no_grad():
        z2, _ = net(build_input(src, dst, t, f3, roots, root_t))
    same(z2[row], z0[row])
    # the endpoint: the neighbour is now another node (with another memory)
    s2, d2 = src.copy(), dst.copy()
    other = int(inp.neighbors.nodes[row, -1])
    if s2[e] == v and d2[e] == other:
        d2[e] = (other + 1) % N if (other + 1) % N != v else (other + 2) % N
    else:
        s2[e] = (other + 1) % N if (other + 1) % N != v else (other + 2) % N
    with torch.no_grad():
        z3, _ = net(build_input(s2, d2, t, efeat, roots, root_t))
    assert not torch.allclose(z3[row], z0[row])


def test_masked_slots_are_ignored():
    """Garbage (NaN, huge, out-of-range ids) in every padding slot leaves z and s' unchanged."""
    src, dst, t, efeat = stream(6)
    net = model(static=True)
    roots, root_t = batch_roots(src, dst, t, 10, 40)
    inp = build_input(src, dst, t, efeat, roots, root_t, k=8)
    pad = ~inp.neighbors.mask
    assert pad.any() and inp.neighbors.mask.any()
    with torch.no_grad():
        z0, s0 = net(inp)
    nodes = inp.neighbors.nodes.copy()
    nodes[pad] = 10**6
    events = inp.neighbors.events.copy()
    events[pad] = -5
    feat = inp.neighbor_feat.clone()
    feat[torch.from_numpy(pad)] = float("nan")
    feat[torch.from_numpy(pad)][..., 0] = 1e30
    nt = inp.neighbor_t.copy()
    nt[pad] = np.nan
    bad = TGNInput(inp.roots, inp.root_t, NeighborBlock(nodes, events, inp.neighbors.mask), nt, feat, inp.unique,
                   inp.memory)
    with torch.no_grad():
        z1, s1 = net(bad)
    same(z1, z0)
    same(s1, s0)


@pytest.mark.parametrize("only_empty", [False, True])
def test_root_without_neighbours_is_finite_with_finite_gradients(only_empty):
    """A root with no history (alone in a batch, or beside roots with neighbours) gives a finite embedding,
    and a backward pass through it leaves no NaN / Inf in any parameter gradient."""
    src, dst, t, efeat = stream(7)
    net = model(static=True)
    lonely = np.array([N - 1, N - 2, 0])  # never occur; node 0 at a time before every event
    lonely_t = np.array([t[-1] + 1, t[50], t[0]])
    if only_empty:
        roots, root_t = lonely, lonely_t
    else:
        r, rt = batch_roots(src, dst, t, 100, 110)
        roots, root_t = np.r_[r, lonely], np.r_[rt, lonely_t]
    inp = build_input(src, dst, t, efeat, roots, root_t)
    empty = ~inp.neighbors.mask.any(1)
    assert empty[-3:].all() and (only_empty or not empty.all())
    z, s = net(inp)
    assert torch.isfinite(z).all() and torch.isfinite(s).all()
    (z.pow(2).sum() + z[-3:].sum() * 3.0).backward()
    for name, p in net.named_parameters():
        assert p.grad is not None, name
        assert torch.isfinite(p.grad).all(), name
    # the static rows of the lonely roots do receive a gradient (their embedding depends on them)
    assert net.static.grad[N - 1].abs().sum() > 0


def test_static_only_mode():
    """With the dynamic memory off (pre-training), h = S: finite output, no memory returned."""
    src, dst, t, efeat = stream(8)
    roots, root_t = batch_roots(src, dst, t, 50, 60)
    inp = build_input(src, dst, t, efeat, roots, root_t, memory=False)
    z, s = model(static=True)(inp)
    assert s is None and torch.isfinite(z).all()
    with pytest.raises(RuntimeError, match="static_memory"):
        model(static=False)(inp)


def test_memory_update_is_the_gru_cell():
    """``TGN._gru`` (mail and memory products once per node, gathered per occurrence) is ``nn.GRUCell`` on
    [mail ‖ Φ] and s, row by row."""
    net = model()
    g = torch.Generator().manual_seed(3)
    mail, mem = torch.randn(5, 2 * MEM + D, generator=g).double(), torch.randn(5, MEM, generator=g).double()
    rows = torch.tensor([0, 3, 3, 4, 1, 0])
    phi = torch.randn(rows.shape[0], TDIM, generator=g).double()
    same(net._gru(mail, mem, rows, phi), net.updater(torch.cat([mail[rows], phi], 1), mem[rows]))


def test_event_time_update_reads_the_mails_gap_not_the_query_time():
    """``memory_time: event``: s' = GRUCell([m ‖ Φ(gap)], s) whatever the occurrence's time (TGN §3.1, PyG), a
    row whose mail is applied (gap NaN) keeps its s; ``query`` (TGL) moves with the query time."""
    torch.manual_seed(0)
    net = TGN(N, D, MEM, TDIM, HID, HEADS, static_memory=False, event_time=True).double()
    src, dst, t, efeat = stream(4)
    roots = np.array([0, 1, 2, 1])
    inp = build_input(src, dst, t, efeat, roots, np.array([10.0, 10.0, 10.0, 25.0]))
    gap = np.random.default_rng(1).uniform(0, 3, inp.unique.shape[0])
    gap[np.searchsorted(inp.unique, 2)] = np.nan  # node 2's mail already applied
    inp.memory.gap = gap
    m = inp.memory
    rows = np.searchsorted(inp.unique, roots)
    _, s_new = net(inp)
    want = net.updater(torch.cat([m.mail, net.time(torch.from_numpy(np.nan_to_num(gap)))], 1), m.mem)
    for r, row in zip(range(4), rows, strict=True):
        same(s_new[r], m.mem[row] if roots[r] == 2 else want[row], roots[r])
    same(s_new[1], s_new[3])  # node 1 at times 10 and 25: one value
    net.event_time = False
    inp.memory.gap = None
    _, s_query = net(inp)
    assert not torch.allclose(s_query[1], s_query[3])


def reference_forward(net: TGN, inp: TGNInput) -> tuple[torch.Tensor, torch.Tensor]:
    """TGN-attn root by root, as the model docstring writes it (no shared products, no split weights):
    h = GRUCell([mail ‖ Φ(Δ)], s) (+ static), Δ = t_r − τ (``query``) or the mail's gap (``event``, NaN: s);
    per head α = softmax_j LeakyReLU(q·k_j), q = W_q [h_r ‖ Φ(0)], k_j, v_j = W_{k,v} [h_j ‖ e_j ‖ Φ(t_r − t_j)];
    z = LayerNorm(ReLU(W_out [Σ_j α_j v_j ‖ h_r]))."""
    m, nb = inp.memory, inp.neighbors
    heads, w = net.heads, net.hidden // net.heads

    def state(v: int, t: float) -> tuple[torch.Tensor, torch.Tensor]:
        row = int(np.searchsorted(inp.unique, v))
        if m.gap is not None and np.isnan(m.gap[row]):
            s = m.mem[row]
        else:
            dt = m.gap[row] if m.gap is not None else t - m.mem_ts[row]
            phi = net.time(torch.tensor([dt], dtype=torch.float64))[0]
            s = net.updater(torch.cat([m.mail[row], phi])[None], m.mem[row][None])[0]
        return (s if net.static is None else s + net.static[v]), s

    zs, ss = [], []
    for r, (v, t) in enumerate(zip(inp.roots.tolist(), inp.root_t.tolist(), strict=True)):
        h, s = state(v, t)
        q = net.w_q(torch.cat([h, net.time(torch.zeros(1, dtype=torch.float64))[0]])).view(heads, w)
        agg = torch.zeros(heads, w, dtype=torch.float64)
        slots = np.flatnonzero(nb.mask[r])
        if slots.size:
            kin = torch.stack([torch.cat([state(int(nb.nodes[r, j]), t)[0], inp.neighbor_feat[r, j],
                                          net.time(torch.tensor([t - inp.neighbor_t[r, j]], dtype=torch.float64))[0]])
                               for j in slots])
            k, val = net.w_k(kin).view(-1, heads, w), net.w_v(kin).view(-1, heads, w)
            alpha = torch.softmax(torch.nn.functional.leaky_relu((k * q).sum(-1), 0.2), dim=0)
            agg = (alpha.unsqueeze(-1) * val).sum(0)
        zs.append(net.norm(torch.relu(net.w_out(torch.cat([agg.reshape(-1), h])))))
        ss.append(s)
    return torch.stack(zs), torch.stack(ss)


@pytest.mark.parametrize("static", [False, True])
@pytest.mark.parametrize("event_time", [False, True])
@pytest.mark.parametrize("dense", [False, True])
def test_forward_is_the_equation_root_by_root(static, event_time, dense):
    """The forward's shared products (memory products once per node, keys and values in one buffer, W_out and
    W_{k,v} split by input part, empty roots; with ``dense``, the roots with at least half their slots real
    attending through W_kᵀ q and W_v Σ α x, padded slots masked, the others' keys and values for the
    occurrences they read alone) give :func:`reference_forward`'s z and s' to float64 rounding, with edge features,
    padded slots and roots without neighbours; and the link predictor's scores are
    out_fc(ReLU(src_fc z_u + dst_fc z_v)) pair by pair."""
    torch.manual_seed(1)
    net = TGN(N, D, MEM, TDIM, HID, HEADS, static, event_time=event_time).double()
    src, dst, t, efeat = stream(12)
    roots, root_t = batch_roots(src, dst, t, 60, 75, negatives=3)
    # the stream's first events' endpoints (few neighbours yet), and a node with no events (none)
    roots, root_t = np.r_[roots, src[1:12], dst[1:12], N - 1], np.r_[root_t, t[1:12], t[1:12], t[-1]]
    inp = build_input(src, dst, t, efeat, roots, root_t)
    real = inp.neighbors.mask.sum(1)
    assert {0, 1, K} <= set(real.tolist()) and ((real >= dense_min(K)) & (real < K)).any() and real[-1] == 0
    inp.neighbor_feat[torch.from_numpy(~inp.neighbors.mask)] = float("nan")  # a padded slot's may be anything
    if event_time:
        gap = np.random.default_rng(2).uniform(0, 3, inp.unique.shape[0])
        gap[::3] = np.nan  # mails already applied
        inp.memory.gap = gap
    inp.occurrences = net.plan(inp, dense=dense)
    assert inp.occurrences.dense.shape[0] == ((real >= dense_min(K)).sum() if dense else 0)
    if dense:  # dense roots with padded slots, and part roots that read fewer than all occurrences
        assert inp.occurrences.pad is not None and inp.occurrences.pad.any()
        assert inp.occurrences.part_read is not None
    with torch.no_grad():
        z, s_new = net(inp)
        z_ref, s_ref = reference_forward(net, inp)
    same(z, z_ref)
    same(s_new, s_ref)
    # the scores of n = 15 events with m = 3 negatives each, from rows [sources, destinations, negatives]
    task = TemporalLinkPrediction(TemporalLinkPredictionOptions(), SimpleNamespace(), HID, 0).double()
    n, m = 15, 3

    def pair(u: int, v: int) -> torch.Tensor:
        return task.out_fc(torch.relu(task.src_fc(z[u]) + task.dst_fc(z[v])))[0]

    with torch.no_grad():
        pos, neg = task.scores(EventEmbeddings(z[: n * (2 + m)], n, m))
        same(pos, torch.stack([pair(i, n + i) for i in range(n)]))
        same(neg, torch.stack([torch.stack([pair(i, 2 * n + i * m + j) for j in range(m)]) for i in range(n)]))


@pytest.mark.parametrize("static", [False, True])
def test_every_root_at_one_time_updates_each_row_once_without_gathers(static):
    """Roots all queried at one time (PyG's per-batch protocol, ``memory_time: query``): each node is one
    occurrence, in the order of ``unique`` (``rows`` the identity), so the GRU reads its rows without a gather;
    z, s' and the parameters' gradients are :func:`reference_forward`'s."""
    net = TGN(N, D, MEM, TDIM, HID, HEADS, static).double()
    src, dst, t, efeat = stream(13)
    roots, _ = batch_roots(src, dst, t, 60, 75, negatives=2)
    inp = build_input(src, dst, t, efeat, roots, np.full(roots.shape[0], t[75]))
    inp.occurrences = net.plan(inp)
    occ = inp.occurrences
    assert occ.rows.shape[0] == inp.unique.shape[0] < roots.shape[0] + inp.neighbors.mask.sum()
    np.testing.assert_array_equal(occ.rows, np.arange(inp.unique.shape[0]))
    z, s_new = net(inp)
    grads = torch.autograd.grad((z.sum() + s_new.sum()), list(net.parameters()), allow_unused=True)
    z_ref, s_ref = reference_forward(net, inp)
    ref = torch.autograd.grad((z_ref.sum() + s_ref.sum()), list(net.parameters()), allow_unused=True)
    same(z, z_ref)
    same(s_new, s_ref)
    for (name, _), g, r in zip(net.named_parameters(), grads, ref, strict=True):
        assert (g is None) == (r is None), name
        if g is not None:
            same(g, r, name)


@pytest.mark.parametrize("which", ["full", "dense_padded", "part", "mixed"])
def test_dense_attention_has_the_per_slot_values_and_gradients(which):
    """A plan with ``dense`` (evaluation's) gives the per-slot plan's z and every parameter's gradient to float64
    rounding, whether the roots have k real neighbours, at least :func:`dense_min` of them (dense with padded
    slots), fewer (per slot, keys and values for the occurrences read alone) or a mix; ``plan`` without ``dense``
    (the forward's when no plan is given) picks dense exactly when gradients are off."""
    torch.manual_seed(3)
    net = TGN(N, D, MEM, TDIM, HID, HEADS, False, time_learnable=True).double()
    src, dst, t, efeat = stream(13)
    roots, root_t = batch_roots(src, dst, t, 100, 130, negatives=2)
    roots, root_t = np.r_[roots, src[1:12], dst[1:12]], np.r_[root_t, t[1:12], t[1:12]]  # and few neighbours
    real = build_input(src, dst, t, efeat, roots, root_t).neighbors.mask.sum(1)
    kinds = {"full": real == K, "dense_padded": (real >= dense_min(K)) & (real < K), "part": real < dense_min(K)}
    assert all(kind.any() for kind in kinds.values()), {name: kind.sum() for name, kind in kinds.items()}
    keep = kinds.get(which, np.ones_like(real, dtype=bool))
    inp = build_input(src, dst, t, efeat, roots[keep], root_t[keep])
    inp.neighbor_feat[torch.from_numpy(~inp.neighbors.mask)] = float("nan")  # a padded slot's may be anything
    out = {}
    for dense in (False, True):
        inp.occurrences = net.plan(inp, dense=dense)
        net.zero_grad()
        z, _ = net(inp)
        (z * torch.linspace(-1, 1, z.numel(), dtype=z.dtype).view_as(z)).sum().backward()
        out[dense] = z.detach(), {n: p.grad.clone() for n, p in net.named_parameters() if p.grad is not None}
    same(out[True][0], out[False][0])
    assert out[True][1].keys() == out[False][1].keys() and "w_k.weight" in out[True][1]
    for name, grad in out[False][1].items():
        same(out[True][1][name], grad, name)
    inp.occurrences = None
    with torch.no_grad():
        assert net.plan(inp).dense.shape[0] == (real[keep] >= dense_min(K)).sum()
    assert net.plan(inp).dense.shape[0] == 0


def test_time_encoding_fixed_by_default_learnable_on_request():
    """Φ's w, b are buffers by default (GraphMixer's fixed encoder: saved, converted with the model, never given a
    gradient); ``time_learnable`` makes them TGAT's parameters, which the loss then moves. Both start equal."""
    fixed = TGN(N, D, MEM, TDIM, HID, HEADS, static_memory=False).double()
    learn = TGN(N, D, MEM, TDIM, HID, HEADS, static_memory=False, time_learnable=True).double()
    assert {"time.w", "time.b"} <= set(fixed.state_dict()) and fixed.time.w.dtype == torch.float64
    assert not any(n.startswith("time.") for n, _ in fixed.named_parameters())
    assert {n for n, _ in learn.named_parameters() if n.startswith("time.")} == {"time.w", "time.b"}
    torch.testing.assert_close(fixed.time.w, learn.time.w)
    dt = torch.tensor([0.0, 1.0, 3.0e6], dtype=torch.float64)
    torch.testing.assert_close(fixed.time(dt), torch.cos(dt[:, None] * fixed.time.w))
    learn.time(dt).sum().backward()
    assert learn.time.w.grad.abs().sum() > 0


@pytest.mark.parametrize("threads", [1, 2])
def test_time_encoding_float32_is_the_cosine_of_its_argument_to_an_ulp(threads):
    """Φ in float32 without gradients is numpy's cosine of its float32 argument (Δt/s)·w + b on one thread,
    torch's on more, both within float32's ε of the float64 cosine, also far beyond SLEEF's fast reduction (|x|
    up to ~10⁷); a learnable Φ with gradients keeps torch's cosine and its gradient."""
    enc = TGN(N, D, MEM, TDIM, HID, HEADS, static_memory=False, time_scale=3.0).time
    dt = torch.from_numpy(np.random.default_rng(0).uniform(0.0, 3.0e7, 4000)).float()
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        with torch.no_grad():
            phi = enc(dt)
    finally:
        torch.set_num_threads(before)
    arg = torch.addcmul(enc.b, (dt / 3.0).unsqueeze(-1), enc.w)
    assert phi.dtype == torch.float32 and phi.shape == (4000, TDIM) and arg.abs().max() > 1.0e6
    ulp = torch.finfo(torch.float32).eps
    torch.testing.assert_close(phi.double(), torch.cos(arg.double()), rtol=0, atol=ulp)
    torch.testing.assert_close(phi, torch.cos(arg), rtol=0, atol=ulp)
    if threads == 1:
        np.testing.assert_array_equal(phi.numpy(), np.cos(arg.numpy()))
    else:
        torch.testing.assert_close(phi, torch.cos(arg), rtol=0, atol=0)
    learn = TimeEncoding(TDIM, learnable=True, scale=3.0)
    out = learn(dt[:5])
    out.sum().backward()
    torch.testing.assert_close(out.detach(), torch.cos(arg[:5]), rtol=0, atol=0)
    assert learn.w.grad.abs().sum() > 0


# -- 4. AP and MRR -------------------------------------------------------------------------------------------


def ap_reference(scores, labels):
    """scikit-learn's average_precision_score written out: thresholds at each distinct score, highest first;
    at threshold s every score >= s is predicted positive; AP = Σ (R_n − R_{n−1}) P_n."""
    total_pos = labels.sum()
    ap, prev_r = 0.0, 0.0
    for thr in sorted(set(scores.tolist()), reverse=True):
        pred = scores >= thr
        tp = labels[pred].sum()
        p, r = tp / pred.sum(), tp / total_pos
        ap += (r - prev_r) * p
        prev_r = r
    return ap


@pytest.mark.parametrize("seed", range(6))
def test_average_precision_matches_the_definition(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(5, 200))
    scores = rng.integers(0, 12, n) / 4.0  # many ties
    if seed % 2:
        scores = scores + rng.standard_normal(n) * 1e-13  # ties closer than 1e-9 still tie
    labels = (rng.random(n) < 0.3).astype(np.int64)
    labels[0] = 1
    want = ap_reference(np.round(scores, 9), labels)
    assert average_precision(scores, labels) == pytest.approx(want, rel=1e-12, abs=1e-15)
    try:
        from sklearn.metrics import average_precision_score
    except ImportError:
        return
    assert average_precision(scores, labels) == pytest.approx(average_precision_score(labels, np.round(scores, 9)))


def test_average_precision_by_hand():
    # scores 0.9 (+), 0.8 (−), 0.8 (+), 0.1 (−): thresholds 0.9: P 1, R 1/2; 0.8: P 2/3, R 1; AP = 1/2 + 1/3
    assert average_precision(np.array([0.9, 0.8, 0.8, 0.1]), np.array([1, 0, 1, 0])) == pytest.approx(0.5 + 1 / 3)
    assert average_precision(np.array([0.3, 0.3]), np.array([1, 0])) == pytest.approx(0.5)
    assert average_precision(np.array([0.1, 0.9]), np.array([1, 0])) == pytest.approx(0.5)


def test_mrr_slot_ties_count_half():
    task = TemporalLinkPrediction(SimpleNamespace(negatives=1, eval_negatives=3), None, 4, 0)
    pos = np.array([0.5, 0.2, 0.9, 0.0])
    neg = np.array([[0.1, 0.5, 0.7],          # one above, one tie: rank 1 + (1 + 2) / 2
                    [0.3, 0.3, 0.2],          # two above, one tie: 1 + (2 + 3) / 2
                    [0.2, 0.1, 0.9 + 1e-12],  # a tie below 1e-9: 1 + (0 + 1) / 2
                    [0.1, 0.2, 0.3]])         # all above: 4
    want = 1 / 2.5 + 1 / 3.5 + 1 / 1.5 + 0.25
    for split in ("val", "test"):
        st = task.eval_stats(split, pos, neg, None)
        b = 2 + 4 * (SPLITS.index(split) - 1)
        assert st[b] == pytest.approx(want) and st[b + 1] == 4 and st[b + 2] == 0 and st[b + 3] == 0
        assert np.count_nonzero(st) == 2
        st = task.eval_stats(split, pos, neg, 0.75)
        assert st[b + 2] == 0.75 and st[b + 3] == 1
        m = task.metrics(st)
        assert m[f"{split}_mrr"] == pytest.approx(want / 4) and m[f"{split}_ap"] == 0.75


def test_a_diverged_model_s_scores_rank_nothing():
    """NaN scores compare false, so a NaN positive ranked first (MRR 1.0 of a diverged model, as a user saw): a
    slice with a score that is not finite makes the split's MRR NaN (null in the record), and AP NaN; a masked
    invalid slot (a TGB stream's padding) does not."""
    task = TemporalLinkPrediction(SimpleNamespace(negatives=1, eval_negatives=2), None, 4, 0)
    pos, neg = np.array([0.5, 0.2]), np.array([[0.1, 0.3], [0.4, 0.0]])
    for bad_pos, bad_neg in ((np.array([np.nan, 0.2]), neg), (pos, np.where(neg > 0.35, np.inf, neg))):
        st = task.eval_stats("val", bad_pos, bad_neg, average_precision(np.r_[bad_pos, bad_neg[:, 0]],
                                                                       np.array([1, 1, 0, 0])))
        m = task.metrics(st + task.eval_stats("val", pos, neg, 0.5))
        assert np.isnan(m["val_mrr"]) and np.isnan(m["val_ap"]), m
    valid = np.array([[True, True], [True, False]])
    st = task.eval_stats("val", pos, np.where(valid, neg, np.nan), None, valid)
    assert task.metrics(st)["val_mrr"] == pytest.approx((1 / 1 + 1 / 2) / 2)


# -- 5. the node memory and the write rule ---------------------------------------------------------------------


def test_node_memory_round_trip():
    nm = NodeMemory(None, N, MEM, 2 * MEM + D, np.float64)
    assert nm.leader and nm.nbytes == N * (3 * MEM + D) * 8 + N * 8
    r = nm.read(np.array([0, 3]))
    assert torch.count_nonzero(r.mem) == 0 and np.all(r.mem_ts == 0) and r.mail.shape == (2, 2 * MEM + D)
    rng = np.random.default_rng(0)
    nodes = np.array([1, 4, 9])
    mem, mail, times = rng.standard_normal((3, MEM)), rng.standard_normal((3, 2 * MEM + D)), np.array([1.5, 2., 3.])
    nm.write(nodes, mem, times, mail)
    r = nm.read(np.array([0, 1, 4, 9]))
    np.testing.assert_array_equal(r.mem.numpy()[1:], mem)
    np.testing.assert_array_equal(r.mail.numpy()[1:], mail)
    np.testing.assert_array_equal(r.mem_ts, [0, 1.5, 2, 3])
    assert torch.count_nonzero(r.mem[0]) == 0
    # a read is a copy: a later write does not change it
    before = r.mem.clone()
    nm.write(np.array([1]), np.ones((1, MEM)), np.array([7.0]), np.ones((1, 2 * MEM + D)))
    assert torch.equal(r.mem, before)
    state = nm.state()
    nm.write(nodes, mem * 0 + 5, times + 10, mail * 0 + 5)
    nm.load(state)
    r2 = nm.read(np.arange(N))
    np.testing.assert_array_equal(r2.mem.numpy()[4], mem[1])
    np.testing.assert_array_equal(r2.mem.numpy()[1], np.ones(MEM))
    assert r2.mem_ts[1] == 7.0 and r2.mem_ts[9] == 3.0
    held = nm.values.copy()
    state["values"][:] = -1  # the state is a copy too
    state["times"][:] = -1
    np.testing.assert_array_equal(nm.values, held)
    assert nm.read(np.array([4])).mem_ts[0] == 2.0
    nm.reset()
    assert not nm.values.any() and not nm.times.any()
    nm.write(np.zeros(0, np.int64), np.zeros((0, MEM)), np.zeros(0), np.zeros((0, 2 * MEM + D)))
    nm.close()


def test_node_memory_keeps_each_mails_gap_under_event_time():
    """With gaps (``memory_time: event``): 0 before a node's first mail, τ_new − τ_old on each write (NaN where the
    write applied the mail, then stored applied), saved, restored and reset with the rows; 8 bytes a node more."""
    nm = NodeMemory(None, N, MEM, 2 * MEM + D, np.float64, t0=1.0, gaps=True)
    assert nm.nbytes == N * (3 * MEM + D) * 8 + 2 * N * 8
    np.testing.assert_array_equal(nm.read(np.array([2])).gap, [0.0])
    row = np.ones((1, MEM)), np.ones((1, 2 * MEM + D))
    nm.write(np.array([2]), row[0], np.array([4.0]), row[1])
    nm.write(np.array([2]), row[0], np.array([6.5]), row[1])
    np.testing.assert_array_equal(nm.read(np.array([2, 3])).gap, [2.5, 0.0])
    state = nm.state()
    nm.write(np.array([2]), row[0], np.array([9.0]), row[1], apply=lambda mail, mem, gap: mem + 1)
    np.testing.assert_array_equal(nm.read(np.array([2])).mem.numpy(), row[0] + 1)
    assert np.isnan(nm.read(np.array([2])).gap[0])
    nm.load(state)
    np.testing.assert_array_equal(nm.read(np.array([2])).gap, [2.5])
    nm.reset()
    assert not nm.gaps.any() and NodeMemory(None, N, MEM, 2 * MEM + D, np.float64).read(np.array([0])).gap is None
    # a checkpoint of the other time term is refused in one line naming the key, both ways
    query = NodeMemory(None, N, MEM, 2 * MEM + D, np.float64)
    with pytest.raises(ConfigError, match=r"model.memory_time: .* written under query, this job sets event"):
        nm.load(query.state())
    with pytest.raises(ConfigError, match=r"model.memory_time: .* written under event, this job sets query"):
        query.load(state)


def test_write_keeps_each_nodes_last_occurrence_and_leaves_later_nodes():
    """``_write`` over a slice with repeated nodes and a self-loop: each node's row is its last occurrence in the
    order u0 v0 u1 v1 … (memory, mail [s_self ‖ s_other ‖ e], time); nodes in ``later`` and nodes outside the
    slice keep their rows."""
    src = np.array([0, 1, 2, 3, 3, 5, 1, 6, 2], dtype=np.int64)
    dst = np.array([1, 2, 0, 3, 4, 2, 0, 7, 5], dtype=np.int64)  # event 3 is a self-loop
    t = np.arange(9, dtype=np.float64) * 10
    efeat = np.arange(9 * D, dtype=np.float64).reshape(9, D) / 100
    s = strategy_like(src, dst, t, efeat)
    s.memory = NodeMemory(None, N, MEM, 2 * MEM + D, np.float64)
    sentinel = np.full((N, 3 * MEM + D), -7.0)
    s.memory.values[:] = sentinel
    s.memory.times[:] = -1
    ev = np.arange(1, 7)  # events 1..6 are this slice; 7, 8 belong to a later slice
    later = np.unique(np.r_[src[7:], dst[7:]])  # {2, 5, 6, 7}
    n, negs = ev.shape[0], 2
    s_new = torch.arange(n * (2 + negs), dtype=torch.float64).repeat_interleave(MEM).view(-1, MEM)  # row r = r
    work = _Work("train", 0, ev, s._writes(ev, np.r_[src[7:], dst[7:]], None), negs, None)
    s._write(work, s_new)
    # expected, by a loop over u0 v0 u1 v1 … (each node: its last occurrence)
    want = {}
    for i, e in enumerate(ev):
        for end, row, other in ((src[e], i, n + i), (dst[e], n + i, i)):
            want[int(end)] = (row, other, e)
    for v in range(N):
        vals, tv = s.memory.values[v], s.memory.times[v]
        if v in want and v not in later:
            row, other, e = want[v]
            np.testing.assert_array_equal(vals[:MEM], np.full(MEM, row), err_msg=str(v))
            np.testing.assert_array_equal(vals[MEM:], np.r_[np.full(MEM, row), np.full(MEM, other), efeat[e]])
            assert tv == t[e], v
        else:
            np.testing.assert_array_equal(vals, sentinel[v], err_msg=str(v))
            assert tv == -1, v
    # node 3 (self-loop at event 3, then source of event 4) takes event 4; node 0 (dst of event 6) event 6
    assert s.memory.times[3] == 40 and s.memory.times[0] == 60 and s.memory.times[1] == 60
    # nothing written for an empty slice
    none = np.zeros(0, np.int64)
    s._write(_Work("train", 0, none, s._writes(none, later, None), negs, None), s_new[:0])


@pytest.mark.parametrize("m", [2, 3])
def test_training_loss_averages_softplus_over_the_negatives(m):
    """The training loss of n events with m negatives each is Σ_i softplus(−pos_i) + Σ_i (1/m) Σ_j softplus(neg_ij)
    (the negatives' term AVERAGED per event, not summed), computed here in numpy from the task's own scores."""
    torch.manual_seed(4)
    task = TemporalLinkPrediction(TemporalLinkPredictionOptions(), SimpleNamespace(), HID, 0).double()
    n = 5
    z = torch.randn(n * (2 + m), HID, dtype=torch.float64) * 3
    with torch.no_grad():
        pos, neg = task.scores(EventEmbeddings(z.clone(), n, m))
        out = task(EventEmbeddings(z.clone(), n, m), 1)
    p, q = pos.numpy(), neg.numpy()
    assert q.shape == (n, m) and np.ptp(q) > 0.1  # the negatives differ: a sum would differ from the mean
    want = np.sum(np.log1p(np.exp(-p))) + np.sum(np.log1p(np.exp(q)).sum(1) / m)
    assert float(out.loss_sum) == pytest.approx(want, rel=1e-12)
    assert out.stats[0] == pytest.approx(want, rel=1e-12) and out.stats[1] == n


@pytest.mark.parametrize("dense", [False, True])
def test_forward_is_the_equation_with_a_nonzero_time_phase(dense):
    """With a non-zero phase b in Φ(Δt) = cos(Δt·w + b) (cos then no longer even), the forward still gives
    :func:`reference_forward`'s z and s': a neighbour's Δt is t_r − t_j, the root's time minus the neighbour's,
    never its negative."""
    torch.manual_seed(6)
    net = TGN(N, D, MEM, TDIM, HID, HEADS, False).double()
    with torch.no_grad():
        net.time.b.copy_(torch.linspace(0.3, 1.2, TDIM, dtype=torch.float64))
    src, dst, t, efeat = stream(12)
    roots, root_t = batch_roots(src, dst, t, 60, 75, negatives=3)
    inp = build_input(src, dst, t, efeat, roots, root_t)
    assert (inp.neighbors.mask.sum(1) > 0).any()
    inp.occurrences = net.plan(inp, dense=dense)
    with torch.no_grad():
        z, s_new = net(inp)
        z_ref, s_ref = reference_forward(net, inp)
    same(z, z_ref)
    same(s_new, s_ref)


def test_scores_rounding_apart_tie_on_either_side_of_a_decimal():
    """P ranks compute a score to rounding beside one rank's. Two scores 2e-13 apart tie whether or not a ninth
    decimal's half falls between them (rounding to 9 decimals split them there: AP 1 or 1/2 and an MRR rank of 1
    or 1.5 for the same pair, found as val_ap 5.5e-7 apart at P = 3 and 5 on soc-sign-bitcoinalpha's events)."""
    task = TemporalLinkPrediction(SimpleNamespace(negatives=1, eval_negatives=2), None, 4, 0)
    b = 2 + 4 * (SPLITS.index("val") - 1)
    for lo, hi in ((0.1234567884999, 0.1234567885001), (0.1234567885001, 0.1234567885003)):
        assert average_precision(np.array([hi, lo]), np.array([1, 0])) == 0.5, (lo, hi)
        assert average_precision(np.array([lo, hi]), np.array([1, 0])) == 0.5, (lo, hi)
        for pos, neg in ((lo, hi), (hi, lo)):  # the tied negative counts half: rank 1.5
            assert task.eval_stats("val", np.array([pos]), np.array([[neg, 0.0]]), None)[b] == 1 / 1.5, (pos, neg)
