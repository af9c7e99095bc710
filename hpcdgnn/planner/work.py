"""What one row, one step and one edge of a model cost, counted on a tiny graph in this process.

The planner needs, for any registered model, the dense work, the sparse work, the number of framework calls
and the bytes autograd saves, per row and per step of the spatial (GCN) and temporal (RNN) phases. They are
*counted*, not timed: the model runs forward and backward over whole random snapshots at four sizes (S, n)
under a dispatch mode that adds up ``torch.utils.flop_counter``'s FLOPs of every dense op, nnz × width of every
sparse product, and one per op, while :class:`~hpcdgnn.metrics.memory.SavedTensorMeter` measures the saved
bytes. The sizes separate the per-row, per-step and fixed terms: ``c(S, n) = a·S·n + b·S + d``, and for saved
bytes the per-vertex term a fused RNN keeps whatever S: ``a·S·n + c·n``. Machine
rates (:mod:`hpcdgnn.planner.rates`) turn them into seconds. The counts are kept per layer as well: a sampled
strategy runs each layer on rows of its own (a mini-batch's layer l outputs the rows layer l + 1 reads).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, fields
from functools import lru_cache

import numpy as np
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves
from torch.utils.flop_counter import flop_registry

from hpcdgnn.metrics.memory import SavedTensorMeter
from hpcdgnn.nn.conv.graph import LocalGraph
from hpcdgnn.nn.layout import Layout, StepGraph
from hpcdgnn.ops.sparse import NormalizedAdjacency, csr_transpose, gcn_norm, stacked_gcn_norm

__all__ = ["ModelWork", "PhaseWork", "counted", "model_work", "planning_threads"]

#: the phases a strategy places on different rows
PHASES = ("spatial", "temporal")
#: what is counted: dense FLOPs, framework calls, sparse nnz × width, fused-RNN FLOPs
KINDS = ("flops", "ops", "sparse", "rnn")


@dataclass(frozen=True)
class PhaseWork:
    """One phase's counts, forward and backward: per row, per step, per edge (nnz of Ã_t)."""

    flops_per_row: float
    flops_per_step: float
    sparse_per_nnz: float
    """nnz × width units per stored entry of Ã_t (every product with Ã_t or its transpose)."""
    ops_per_step: float
    ops_fixed: float
    saved_per_row: float
    """Bytes autograd keeps per row until the backward."""
    rnn_flops_per_row: float = 0.0
    """FLOPs of torch's fused RNN layers (priced at the measured RNN rate, not the GEMM rate)."""
    saved_per_vertex: float = 0.0
    """Bytes autograd keeps per vertex whatever the number of steps (a fused RNN's per-sequence states and
    workspace): with :attr:`saved_per_row`, ``a·S·n + c·n`` for n vertices over S steps."""

    def saved(self, rows: float, vertices: float) -> float:
        """Bytes autograd keeps for ``rows`` (step, vertex) rows of ``vertices`` vertices."""
        return self.saved_per_row * rows + self.saved_per_vertex * vertices

    def flops(self, rows: float, steps: float) -> float:
        """Dense FLOPs (but fused RNN layers') of ``rows`` rows over ``steps`` steps."""
        return self.flops_per_row * rows + self.flops_per_step * steps

    def ops(self, steps: float) -> float:
        """Framework calls over ``steps`` steps."""
        return self.ops_per_step * steps + self.ops_fixed


@dataclass(frozen=True)
class ModelWork:
    """Per-phase work of a model at the job's widths and dtype, and its parameter count."""

    spatial: PhaseWork
    temporal: PhaseWork
    parameters: int
    itemsize: int
    state_per_row: tuple[float, ...] = ()
    """Per layer: values of the time encoder's final state per vertex row (what ``pss`` passes on)."""
    layers: tuple[tuple[PhaseWork, PhaseWork], ...] = ()
    """Per layer: its (spatial, temporal) share of :attr:`spatial` and :attr:`temporal`."""
    forward_share: dict[str, float] | None = None
    """Per counted kind (``flops``, ``ops``, ``sparse``, ``rnn``): the forward's share of forward + backward
    (what a pass without gradients, such as evaluation, costs)."""
    out_features: int = 0
    """Width of the model's output Z_t (what the task head reads)."""
    transposes: bool = False
    """Whether its backward reads Ãᵀ (an aggregation Ã·H whose H carries a gradient), which a checkpoint block
    builds anew each epoch."""


class _Count(TorchDispatchMode):
    """Counts dense FLOPs (``torch.utils.flop_counter``'s formulas, for ops on strided tensors only: its
    ``mm`` formula would price a sparse product as dense), sparse work (nnz × width) and framework calls into the
    bucket :attr:`phase` names: (phase, layer) in the forward's phases, ``forward`` between them, ``backward``
    after."""

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        # TorchDispatchMode's opt-out (its docstring's): else its __init_subclass__ wraps __torch_dispatch__ in
        # torch._disable_dynamo, whose first call imports torch._dynamo (in every plan and check) for a
        # mode that never runs under torch.compile
        return False

    def __init__(self) -> None:
        super().__init__()
        self.phase: str | tuple[str, int] = "backward"  # outside the forward's phases
        #: kind (``flops``, ``ops``, ``sparse``, ``rnn``) -> bucket -> count
        self.counts: dict[str, dict] = {k: defaultdict(float) for k in KINDS}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        c = self.counts
        c["ops"][self.phase] += 1
        name = func.__name__.split(".")[0]
        tensors = [a for a in args if isinstance(a, torch.Tensor)]
        sparse = [a for a in tensors if a.layout != torch.strided]
        out = func(*args, **kwargs)
        if name in ("mkldnn_rnn_layer", "mkldnn_rnn_layer_backward"):  # oneDNN's fused RNN: no formula there
            x, w_ih, w_hh = args[0], args[1], args[2]
            steps_rows = x.numel() // x.shape[-1]
            # 2 FLOPs per multiply-add of both products; the backward computes two such products per weight
            c["rnn"][self.phase] += (2 if name.endswith("backward") else 1) * 2 * steps_rows * (
                w_ih.numel() + w_hh.numel())
        elif sparse:
            dense = [a for a in tensors if a.layout == torch.strided and a.dim() == 2]
            if dense and name in ("mm", "addmm", "_sparse_mm", "_sparse_addmm", "_sparse_csr_mm", "sparse_mm"):
                nnz = sparse[0]._nnz() if sparse[0].layout == torch.sparse_coo else sparse[0].values().numel()
                c["sparse"][self.phase] += nnz * dense[0].shape[-1]
        elif func._overloadpacket in flop_registry:
            c["flops"][self.phase] += flop_registry[func._overloadpacket](*args, **kwargs, out_val=out)
        return out


class _Micro(Layout):
    """Whole random snapshots on one process; the forward's FLOPs, calls, sparse work and saved bytes by phase."""

    def __init__(self, graphs, xs: torch.Tensor, count: _Count, meter: SavedTensorMeter, num_layers: int,
                 adj: list | None = None) -> None:
        super().__init__(0, xs.shape[0], num_layers)
        self.graphs, self.xs, self.count, self.meter = graphs, xs, count, meter
        self.adj = adj or [gcn_norm(g.t, g.indptr, g.indices, g.values.double(), xs.dtype) for g in graphs]
        #: the first layer's Ã·X, a constant every full-batch strategy computes once (SPEC S4)
        self.ax0 = torch.stack([LocalGraph(a).propagate(x) for a, x in zip(self.adj, xs, strict=True)])
        #: (phase, layer) -> bytes autograd saved
        self.saved: dict[tuple[str, int], float] = defaultdict(float)
        self.state: dict[int, float] = {}
        #: the pools' communicator: this process only (the planner runs on rank 0 alone under ``strategy: auto``)
        self.own = None

    def _phase(self, phase: str, li: int, fn):
        if self.meter is None:  # timed, not counted
            return fn()
        self.count.phase = (phase, li)
        before = self.meter.current
        out = fn()
        self.saved[(phase, li)] += self.meter.current - before
        self.count.phase = "forward"  # the forward's work outside the phases (EvolveGCN's weight RNN, pools)
        return out

    def spatial(self, layer, li, h, tparams):
        def run():
            if h is None and layer.precomputable:
                ax = self.ax0
            else:
                hs = self.xs.unbind(0) if h is None else h.unbind(0)
                ax = torch.stack([layer.aggregate(LocalGraph(a), x) for a, x in zip(self.adj, hs, strict=True)])
            return layer.spatial_steps(ax, list(range(self.start, self.stop)), tparams)
        return self._phase("spatial", li, run)

    def encode(self, layer, li, y, state):
        z, state = self._phase("temporal", li,
                               lambda: layer.temporal(y, state, **self.temporal_kwargs(layer, li)))
        if self.meter is None:
            return z, state
        leaves = [x for x in tree_leaves(state) if isinstance(x, torch.Tensor)]
        self.state[li] = sum(x.numel() for x in leaves) / max(1, y.shape[1])
        return z, state

    def step_graphs(self, li):
        return self.graphs

    def pool_input(self, li, h):
        from hpcdgnn.comm.communicator import alone

        x = self.xs if h is None else h
        n = x.shape[1]
        if self.own is None:
            self.own = alone()
        return x.reshape(-1, x.shape[-1]), np.arange(x.shape[0] * n, dtype=np.int64), n, self.own

    def output(self, h):
        self.last = h
        return dict(enumerate(h.unbind(0)))


def _graphs(S: int, n: int, degree: int, seed: int) -> list[StepGraph]:
    rng = np.random.default_rng(seed)
    out = []
    for t in range(S):
        cols = np.sort(rng.integers(0, n, (n, degree)), axis=1).reshape(-1)
        indptr = np.arange(0, n * degree + 1, degree, dtype=np.int64)
        out.append(StepGraph(t, torch.from_numpy(indptr), torch.from_numpy(cols.astype(np.int64)),
                             torch.ones(cols.shape[0], dtype=torch.float32)))
    return out


@dataclass(frozen=True)
class _Counts:
    """One forward + backward's raw counts (:func:`_count`): per kind and bucket, the bytes saved per (phase,
    layer), nnz per step, the state per row per layer."""

    counts: dict[str, dict]
    saved: dict[tuple[str, int], float]
    nnz: float
    state: dict[int, float]


def _count(model, S: int, n: int, in_features: int, dtype: torch.dtype, degree: int) -> _Counts:
    """Count one forward + backward over S snapshots of n vertices."""
    torch.manual_seed(0)
    graphs = _graphs(S, n, degree, seed=S * 7919 + n)
    count, meter = _Count(), SavedTensorMeter()
    layout = _Micro(graphs, torch.randn(S, n, in_features, dtype=dtype), count, meter, len(model.layers))
    with count, meter:
        count.phase = "forward"
        emb = model(layout)
        loss = sum(z.sum() for z in emb.values())
        count.phase = "backward"
        loss.backward()
    return _Counts({k: dict(v) for k, v in count.counts.items()}, dict(layout.saved),
                   sum(a.a.values().numel() for a in layout.adj) / S, dict(layout.state))


def _run(raw: _Counts, num_layers: int):
    """:func:`_count`'s counts per phase, and per (phase, layer), as the tuple (flops, calls, sparse, saved, rnn);
    nnz per step; the state per row; the forward's share per kind.

    The backward's FLOPs, calls and sparse work are shared out in the forward's proportions."""
    keys = [(ph, li) for ph in PHASES for li in range(num_layers)]
    counts = {k: defaultdict(float, raw.counts.get(k, {})) for k in KINDS}
    out: dict = {}
    share = {}
    for k in KINDS:
        bucket = counts[k]
        forward = sum(bucket[key] for key in keys) + bucket["forward"]
        share[k] = forward / (forward + bucket["backward"]) if forward + bucket["backward"] else 1.0
    for key in keys:
        split = {}
        for k in KINDS:
            bucket = counts[k]
            forward = sum(bucket[x] for x in keys)
            # the work outside the phases (backward, and forward between phases) is shared out in the phases'
            # proportions; with no phase work of this kind it goes to the first layer's spatial phase
            first = float(key == ("spatial", 0))
            rest = bucket["backward"] + bucket["forward"]
            split[k] = bucket[key] + rest * (bucket[key] / forward if forward else first)
        out[key] = (split["flops"], split["ops"], split["sparse"], raw.saved.get(key, 0.0), split["rnn"])
    for ph in PHASES:
        out[ph] = tuple(sum(out[(p, li)][i] for p, li in keys if p == ph) for i in range(5))
    return out, raw.nnz, raw.state, share


#: a cell's basis order K above the second of these is counted at both and extrapolated: every count is linear
#: in K (each term adds one step of the basis recursion and one block of every gate's weights and GEMMs), and
#: counting a large K op by op takes minutes (perf/results/planner/)
_COUNTED_ORDERS = (3, 4)


def _extrapolated(a, b, t: float):
    """Return a + t·(b − a) through :class:`_Counts` and its dicts (a key one lacks counts 0 there)."""
    if isinstance(a, _Counts):
        return _Counts(*(_extrapolated(getattr(a, f.name), getattr(b, f.name), t) for f in fields(a)))
    if isinstance(a, dict):
        return {k: _extrapolated(a.get(k, 0.0), b.get(k, 0.0), t) for k in {**a, **b}}
    return a + t * (b - a)


@lru_cache(maxsize=64)
def _model_work_cached(name: str, options: tuple, in_features: int, dtype_name: str, degree: int) -> ModelWork:
    from dataclasses import replace

    from hpcdgnn.nn.models import build_from_options, model_options

    opts = model_options(name)(**dict(options))
    dtype = getattr(torch, dtype_name)
    K, (k0, k1) = getattr(opts, "order", None), _COUNTED_ORDERS
    counted = [opts] if K is None or K <= k1 else [replace(opts, order=k0), replace(opts, order=k1)]
    models = [build_from_options(o, in_features).to(dtype) for o in counted]
    model = models[-1]
    S1, S2, n1, n2 = 2, 4, 32, 64

    def at_k(values: list):  # the job's K: counted, or extrapolated from k0 and k1
        return values[0] if len(values) == 1 else _extrapolated(*values, (K - k0) / (k1 - k0))

    runs = {}
    for S, n in ((S1, n1), (S1, n2), (S2, n1), (S2, n2)):
        raw = []
        for m in models:
            m.zero_grad(set_to_none=True)
            raw.append(_count(m, S, n, in_features, dtype, degree))
        runs[(S, n)] = _run(at_k(raw), len(model.layers))
    nnz1, nnz2 = runs[(S1, n1)][1], runs[(S1, n2)][1]

    def fit(key) -> PhaseWork:
        (f11, o11, s11, v11, r11), (f12, _, s12, v12, r12), (_, o21, _, v21, _), (_, _, _, v22, _) = (
            runs[k][0][key] for k in ((S1, n1), (S1, n2), (S2, n1), (S2, n2)))
        per_row = max(0.0, (f12 - f11) / (S1 * (n2 - n1)))
        per_step = max(0.0, (f11 - per_row * S1 * n1) / S1)
        sparse = max(0.0, (s12 - s11) / (S1 * (nnz2 - nnz1)))
        ops_step = max(0.0, (o21 - o11) / (S2 - S1))
        # saved bytes a·S·n + c·n (+ terms without n): the slope in n at two S separates a from c
        saved_row = max(0.0, ((v22 - v21) - (v12 - v11)) / ((S2 - S1) * (n2 - n1)))
        saved_vertex = max(0.0, (v12 - v11) / (n2 - n1) - saved_row * S1)
        return PhaseWork(per_row, per_step, sparse, ops_step, max(0.0, o11 - ops_step * S1), saved_row,
                         max(0.0, (r12 - r11) / (S1 * (n2 - n1))), saved_vertex)

    params = round(at_k([sum(p.numel() for p in m.parameters()) for m in models]))
    transposes = _reads_transpose(model, in_features, dtype, degree)
    state, share = runs[(S1, n1)][2], runs[(S1, n2)][3]
    L = len(model.layers)
    return ModelWork(fit("spatial"), fit("temporal"), params, torch.empty(0, dtype=dtype).element_size(),
                     tuple(state.get(li, 0.0) for li in range(L)),
                     tuple((fit(("spatial", li)), fit(("temporal", li))) for li in range(L)), share,
                     getattr(model, "out_features", opts.hidden), transposes)


def _reads_transpose(model, in_features: int, dtype: torch.dtype, degree: int) -> bool:
    """Whether ``model``'s backward builds Ãᵀ: a forward and backward over operators made without it."""
    graphs = _graphs(2, 8, degree, seed=0)
    adj = [NormalizedAdjacency(g.t, gcn_norm(g.t, g.indptr, g.indices, g.values.double(), dtype).a) for g in graphs]
    layout = _Micro(graphs, torch.randn(2, 8, in_features, dtype=dtype), _Count(), None, len(model.layers), adj)
    emb = model(layout)
    sum(z.sum() for z in emb.values()).backward()
    model.zero_grad(set_to_none=True)
    return any(a.has_transpose for a in adj)


def planning_threads() -> None:
    """One torch thread for ``plan`` and ``check`` unless ``OMP_NUM_THREADS`` names others: their torch work is
    tiny counted graphs and samples, whose ops more threads only slow down — each op's threads spin waiting
    for each other, on a login node shared with other users most of all."""
    import os

    if "OMP_NUM_THREADS" not in os.environ:
        torch.set_num_threads(1)


def best_seconds(fn, repeats: int = 5) -> float:
    """The fastest of ``repeats`` timed calls of ``fn()`` after one untimed (warm-up) call, in wall seconds."""
    import time

    fn()
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def counted(fn) -> tuple[float, float]:
    """(dense FLOPs, framework calls) of ``fn()`` and any backward it runs, counted as the model's are: what
    a sampled strategy's task head and optimizer step cost per sample and per step."""
    count = _Count()
    with count:
        fn()
    return sum(count.counts["flops"].values()), sum(count.counts["ops"].values())


def model_work(model_config, in_features: int, dtype: str, degree: int = 4) -> ModelWork:
    """The :class:`ModelWork` of the job's ``model:`` section on ``in_features`` inputs (cached per process).

    Args:
        model_config: the job's typed ``model:`` options.
        in_features: F, the dataset's feature width.
        dtype: ``train.dtype``.
        degree: neighbours per vertex of the counting graphs (the counts are per edge, so it only sets scale).
    """
    from dataclasses import asdict

    options = tuple(sorted((k, tuple(v) if isinstance(v, list) else v) for k, v in asdict(model_config).items()))
    return _model_work_cached(model_config.name, options, in_features, dtype, degree)


def seconds_per_call(name: str = "cdgcn", repeats: int = 5) -> float:
    """Wall seconds per counted framework call of a tiny model's forward and backward (``calibrate``).

    On a tiny graph the arithmetic is nothing: what an op costs there (dispatch, autograd, the Python around
    it) is what every op of a small real graph pays, in the units :class:`PhaseWork` counts."""
    from hpcdgnn.nn.models import build_from_options, model_options

    model = build_from_options(model_options(name)(name=name, hidden=4), 2).to(torch.float32)
    graphs = _graphs(2, 8, 2, seed=0)
    xs = torch.randn(2, 8, 2)
    adj = [gcn_norm(g.t, g.indptr, g.indices, g.values.double(), xs.dtype) for g in graphs]

    def once(count: _Count | None):
        layout = _Micro(graphs, xs, count or _Count(), SavedTensorMeter() if count else None, len(model.layers), adj)
        if count is not None:
            with count:
                emb = model(layout)
                sum(z.sum() for z in emb.values()).backward()
        else:
            emb = model(layout)
            sum(z.sum() for z in emb.values()).backward()

    count = _Count()
    once(count)
    calls = sum(count.counts["ops"].values())
    return best_seconds(lambda: once(None), repeats) / max(calls, 1.0)


def seconds_per_pair(repeats: int = 5) -> tuple[float, float, float]:
    """Wall seconds per scored pair of the link-prediction head, forward and backward with its evaluation
    splits (``calibrate``'s ``pair_seconds``, ``drawn_pair_seconds``, ``placed_pair_seconds``).

    Whole snapshots: :meth:`LinkPrediction.forward` on a (T, N, F) block, per pair. In place, the time is
    ``drawn·M + placed·M/P`` for M pairs of all steps (every rank draws all of them and keeps those whose
    source row it holds): measured as rank 0 of P = 2 and 4 with a row fetch that finds owners and rows, as
    ``fetch_rows`` does, without sending. Widths 4: the decoder's multiply-adds are priced apart (FLOPs).
    """
    from types import SimpleNamespace

    from hpcdgnn.tasks.base import Embeddings, RowShard, ShardedEmbeddings
    from hpcdgnn.tasks.link_prediction import LinkPrediction, LinkPredictionOptions

    N, T, E, F = 4096, 8, 16384, 4
    rng = np.random.default_rng(0)
    task = LinkPrediction(LinkPredictionOptions(decoder_hidden=F), SimpleNamespace(
        num_vertices=N, num_snapshots=T, snapshot_edges=[E] * T), F, 0)
    for t in range(T - 1):
        task.targets[t] = (torch.from_numpy(rng.integers(0, N, E)), torch.from_numpy(rng.integers(0, N, E)))
    M = (T - 1) * E * 2

    def best(emb) -> float:
        def once():
            scored = task.forward(emb(), 1)
            scored.loss_sum.backward()
            _ = scored.stats  # the evaluation splits are scored when read
        return best_seconds(once, repeats)

    z = torch.randn(T, N, F, requires_grad=True)
    whole = best(lambda: Embeddings.of_block(z, list(range(T)))) / M
    placed = {}
    for P in (2, 4):
        n = N // P
        keys = (np.arange(T)[:, None] * N + np.arange(n)[None, :]).reshape(-1)

        def owner(k, n=n, P=P):
            return np.minimum(k % N // n, P - 1)

        def local(k, n=n):
            return k // N * n + k % N

        def fetch(k):
            owner(k), local(k)
            return torch.zeros(k.shape[0], F)

        task.shard, task.by_source, task._steps = RowShard(keys, N, 0, owner, local, list(range(T)), P), True, \
            sorted(task.targets)
        task._fixed.clear()
        rows = torch.randn(T * n, F, requires_grad=True)
        placed[P] = best(lambda rows=rows, fetch=fetch: ShardedEmbeddings(task.shard, rows, fetch)) / M
    kept = max(0.0, (placed[2] - placed[4]) * 4)  # t/M = drawn + kept/P at P = 2 and 4
    return whole, max(0.0, placed[2] - kept / 2), kept


@lru_cache(maxsize=None)
def rebuild_calls() -> tuple[float, float, float]:
    """Framework calls of normalising snapshots again, counted as the model's are: (per
    :func:`~hpcdgnn.ops.sparse.stacked_gcn_norm` call, per snapshot it normalises, per
    :func:`~hpcdgnn.ops.sparse.csr_transpose`) — what a checkpoint block's reload adds to its entries' work."""
    graphs = _graphs(2, 8, 2, seed=0)
    one = counted(lambda: stacked_gcn_norm(graphs[:1], [0], torch.float32))[1]
    two = counted(lambda: stacked_gcn_norm(graphs, [0, 1], torch.float32))[1]
    a = stacked_gcn_norm(graphs, [0, 1], torch.float32).a
    return 2.0 * one - two, two - one, counted(lambda: csr_transpose(a))[1]


def seconds_per_rebuilt_entry(op_seconds: float, device: torch.device | None = None,
                              dtype: torch.dtype = torch.float32, repeats: int = 5) -> tuple[float, float]:
    """Wall seconds per stored entry of Ã_t normalised and per entry transposed (``calibrate``'s
    ``norm_seconds`` and ``transpose_seconds``) on ``device``: four random snapshots of 2¹⁴ vertices, degree 8,
    their framework calls (:func:`rebuild_calls`, at ``op_seconds`` each) taken off."""
    S, dev = 4, device or torch.device("cpu")
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    graphs = [StepGraph(g.t, g.indptr.to(dev), g.indices.to(dev), g.values.to(dev))
              for g in _graphs(S, 1 << 14, 8, seed=1)]
    per_call, per_snapshot, per_transpose = rebuild_calls()
    adj = stacked_gcn_norm(graphs, list(range(S)), dtype).a
    entries = adj.values().numel()
    norm = best_seconds(lambda: (stacked_gcn_norm(graphs, list(range(S)), dtype), sync()), repeats)
    transpose = best_seconds(lambda: (csr_transpose(adj), sync()), repeats)
    return (max(norm - (per_call + S * per_snapshot) * op_seconds, 0.0) / entries,
            max(transpose - per_transpose * op_seconds, 0.0) / entries)
