"""The sampler of the sequences strategy (R4; ReInc §3.4.2, §3.4.3): one sample's computational graph.

*Aggregating layers* (:meth:`SampleGraphs.sampled_block`): from the batch down, a layer's rows read their
neighbours in Ã_t — all, or ``fanouts[l]`` sampled without replacement, weighted |N(v)| / k (unbiased), plus
the self-loop — through one block-diagonal operator over the window.

*Graph-recurrent cells* (ReInc §2.1) convolve their state over each step's graph, so output row v of layer l
at step t reads the input at ``a`` hops and the state after t − 1 at ``b`` hops
(:meth:`~hpcdgnn.nn.models.base.GraphRecurrentLayer.receptive_hops`). :meth:`SampleGraphs.cell_rows` closes
these sets backwards from the scored rows into U; every layer runs over U with each step's whole-snapshot
operator restricted to U × U, so with full neighbourhoods the scored outputs are exact. Sampled fanouts keep
the ``k`` neighbours with the smallest hash of (sample, step, vertex, neighbour), P-invariant, and run on the
subgraph U induces (ClusterGCN's reading: a Chebyshev or diffusion basis has no unbiased scaled form).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from hpcdgnn.comm.stats import payload_bytes
from hpcdgnn.errors import ConfigError
from hpcdgnn.indices import setdiff_ints, union_ints, unique_ints
from hpcdgnn.nn.layout import StepGraph
from hpcdgnn.ops.sparse import NormalizedAdjacency, csr_tensor, gcn_norm
from hpcdgnn.partition.sequences import Sequence
from hpcdgnn.tasks.base import SampleEmbeddings

__all__ = ["HostSnapshot", "RowsStepGraph", "SampleGraphs", "graph_cells"]


@dataclass
class HostSnapshot:
    """Ã_t as float64 CSR and X_t on the host; for graph-recurrent cells also A_t as read and its step graph."""

    crow: np.ndarray
    col: np.ndarray
    val: np.ndarray
    x: torch.Tensor
    raw: tuple | None = None
    graph: StepGraph | None = None

    @property
    def nbytes(self) -> int:
        """Bytes held (arrays and tensors)."""
        return payload_bytes((self.crow, self.col, self.val, self.x, self.raw))

    @classmethod
    def normalised(cls, t: int, indptr: np.ndarray, indices: np.ndarray, weights: np.ndarray,
                   x: torch.Tensor | None, raw: tuple | None = None) -> HostSnapshot:
        """Snapshot t with Ã_t = D̃^-1/2 (A_t + I) D̃^-1/2 of the CSR A_t (:func:`~hpcdgnn.ops.sparse.gcn_norm`,
        float64), features ``x`` and ``raw`` (A_t as read, for graph-recurrent cells).

        Shapes:
            indptr (N + 1,), indices and weights (nnz,), x (N, F) or None."""
        a = gcn_norm(t, indptr, indices, weights, torch.float64).a
        return cls(a.crow_indices().numpy(), a.col_indices().numpy(), a.values().numpy(), x, raw)


def graph_cells(model, job) -> bool:
    """Whether every layer is a graph-recurrent cell (sampled over its receptive rows); ConfigError for a mix."""
    recurrent = [bool(getattr(layer, "graph_recurrent", False)) for layer in model.layers]
    if any(recurrent) and not all(recurrent):
        raise ConfigError(f"model.name: {job.model.name} mixes graph-recurrent cells with other layers, "
                          f"which strategy.name: {job.strategy.name} cannot sample; use pss")
    return all(recurrent)


def _expand(starts: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Positions ``starts[i] .. starts[i] + counts[i] - 1`` for every i, concatenated."""
    total = int(counts.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    offsets = np.repeat(starts - np.concatenate([[0], np.cumsum(counts)[:-1]]), counts)
    return np.arange(total, dtype=np.int64) + offsets


def _csr(r: np.ndarray, c: np.ndarray, v: torch.Tensor, shape: tuple[int, int]) -> torch.Tensor:
    """CSR of entries already ordered by row, then column."""
    crow = np.concatenate([[0], np.cumsum(np.bincount(r, minlength=shape[0]))])
    return csr_tensor(torch.from_numpy(crow), torch.from_numpy(np.ascontiguousarray(c)), v, shape)


def _submatrix(crow: np.ndarray, col: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Local (row, col, position) of a CSR matrix's entries among ``rows`` × ``rows`` (ascending), in CSR order."""
    counts = crow[rows + 1] - crow[rows]
    e = _expand(crow[rows], counts)
    c = col[e]
    pos = np.searchsorted(rows, c)
    keep = rows[np.minimum(pos, max(rows.shape[0] - 1, 0))] == c if rows.shape[0] else np.zeros(0, bool)
    r = np.repeat(np.arange(rows.shape[0], dtype=np.int64), counts)
    return r[keep], pos[keep].astype(np.int64), e[keep]


def _restrict(op: NormalizedAdjacency, rows: np.ndarray, device: torch.device) -> NormalizedAdjacency:
    """``op`` (a whole snapshot's operator) restricted to ``rows`` × ``rows``, with its transpose, on ``device``."""
    a = op.a
    r, c, e = _submatrix(a.crow_indices().numpy(), a.col_indices().numpy(), rows)
    v = a.values()[torch.from_numpy(e)]
    n = rows.shape[0]
    by_col = np.argsort(c, kind="stable")
    return NormalizedAdjacency(op.t, _csr(r, c, v, (n, n)).to(device),
                               _csr(c[by_col], r[by_col], v[torch.from_numpy(by_col)], (n, n)).to(device))


def _mix(salt: int, r: np.ndarray, c: np.ndarray) -> np.ndarray:
    """A 64-bit hash (splitmix64's finaliser) of (salt, r, c): the sampling key of neighbour c of vertex r."""
    z = (r.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)) ^ (c.astype(np.uint64) * np.uint64(0xC2B2AE3D27D4EB4F))
    z ^= np.uint64(salt)
    z ^= z >> np.uint64(30)
    z *= np.uint64(0xBF58476D1CE4E5B9)
    z ^= z >> np.uint64(27)
    z *= np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


@dataclass(eq=False)
class RowsStepGraph(StepGraph):
    """Snapshot t among one sample's ``rows``; cell operators are the ``whole`` snapshot's, restricted."""

    whole: StepGraph | None = None
    rows: np.ndarray | None = None
    device: torch.device | None = None

    def restrict(self, ops: tuple) -> tuple:
        """The whole snapshot's operators ``ops`` restricted to :attr:`rows`, on :attr:`device`."""
        return tuple(_restrict(op, self.rows, self.device) for op in ops)


class SampleGraphs:
    """Mixin: the computational graphs of a host strategy's samples.

    The host provides ``snapshot(t)`` (``crow``, ``col``, ``val``, ``x``, ``raw``, settable ``graph``), ``ctx``,
    ``N``, ``fanout`` (input layer first; 0 = all), ``encoder``, ``decoder``, ``horizon``, ``task``, ``_targets``,
    ``scored_step`` (a step the task scores).
    """

    def _zero_stats(self, model, task, epoch: int) -> np.ndarray:
        """Zero metric sums of the task's width (read once from an empty sample at ``scored_step``), for a rank
        without samples in a batch."""
        if getattr(self, "_stat_width", None) is None:
            rows = torch.zeros(0, model.out_features, dtype=self.ctx.dtype, device=self.ctx.device)
            none = np.zeros(0, np.int64)
            with torch.no_grad():
                empty = SampleEmbeddings(self.scored_step, rows, none, none)
                self._stat_width = int(task(empty, epoch).stats.shape[0])
        return np.zeros(self._stat_width)

    def whole_graph(self, t: int) -> StepGraph:
        """Snapshot t's whole graph A_t as a step graph, built once (cell operators are built on it)."""
        h = self.snapshot(t)
        if h.graph is None:
            indptr, indices, weights = (torch.from_numpy(np.ascontiguousarray(a)) for a in h.raw)
            h.graph = StepGraph(t, indptr, indices, weights)
        return h.graph

    def _pattern(self, layer, t: int) -> tuple[np.ndarray, np.ndarray]:
        """(crow, col) of the union of ``layer``'s operator patterns at step t (memoised)."""
        g = self.whole_graph(t)

        def build(_):
            keys = []
            for op in layer.operator(g, self.ctx.dtype):
                crow, col = op.a.crow_indices().numpy(), op.a.col_indices().numpy()
                n = crow.shape[0] - 1
                keys.append(np.repeat(np.arange(n, dtype=np.int64), np.diff(crow)) * n + col)
            keys = unique_ints(np.concatenate(keys))
            r, c = np.divmod(keys, self.N)
            return np.concatenate([[0], np.cumsum(np.bincount(r, minlength=self.N))]), c

        return g.operator(("pattern", type(layer).__name__), build)

    def _hop(self, layer, t: int, rows: np.ndarray, k: int, fanout: int, salt: int) -> np.ndarray:
        """``rows`` and their ``k``-hop neighbours at step t; ``fanout`` > 0 keeps the smallest :func:`_mix` keys."""
        if k == 0 or rows.shape[0] == 0:
            return rows
        crow, col = self._pattern(layer, t)
        out = frontier = rows
        for _ in range(k):
            counts = crow[frontier + 1] - crow[frontier]
            c = col[_expand(crow[frontier], counts)]
            if fanout > 0 and c.shape[0]:
                r = np.repeat(frontier, counts)
                other = c != r
                r, c = r[other], c[other]
                order = np.lexsort((_mix(salt + t * 0x9E37, r, c), r))
                _, first, per = np.unique(r, return_index=True, return_counts=True)
                rank = np.empty(r.shape[0], dtype=np.int64)
                rank[order] = np.arange(r.shape[0]) - np.repeat(first, per)
                c = c[rank < fanout]
            frontier = setdiff_ints(c, out)
            if frontier.shape[0] == 0:
                break
            out = union_ints(out, frontier)
        return out

    def cell_rows(self, seq: Sequence, vertices: np.ndarray, rng: np.random.Generator,
                  decoder: list[int | None] | None = None, every_step: bool = False) -> np.ndarray:
        """The rows U every graph-recurrent layer of a sample runs over: the closure of the scored ``vertices``.

        ``decoder``: the snapshot each decoder step reads (None: its own prediction, on G_t); ``every_step``:
        ``vertices`` are scored at every step of the window (hybrid batches), not only the last.
        """
        salt = int(rng.integers(0, 2**62))
        L, top = len(self.encoder), len(self.encoder) - 1
        steps = list(range(seq.start, seq.stop))
        empty = np.zeros(0, np.int64)
        fan = self.fanout

        def hop(layers, layer, which, t, rows):  # the rows layers[layer] reads of its input (0) or its state (1)
            return self._hop(layers[layer], t, rows, layers[layer].receptive_hops()[which], fan[layer], salt)

        need: list[np.ndarray] = [vertices]
        seed = [empty] * L
        if self.decoder is None:
            seed[top] = vertices
        else:
            reads = decoder or [None] * self.horizon
            graph = [seq.t if u is None else u for u in reads]
            dec, later = self.decoder, None  # ``later``: the rows of decoder step d + 1, per layer
            for d in reversed(range(self.horizon)):
                rows = [empty] * L
                for layer in reversed(range(L)):
                    r = vertices if layer == top else hop(dec, layer + 1, 0, graph[d], rows[layer + 1])
                    if later is not None:
                        r = union_ints(r, hop(dec, layer, 1, graph[d + 1], later[layer]))  # the state step d + 1 reads
                        if layer == top and reads[d + 1] is None:  # step d + 1 reads this step's prediction
                            r = union_ints(r, hop(dec, 0, 0, graph[d + 1], later[0]))
                    rows[layer] = r
                need += [*rows, hop(dec, 0, 0, graph[d], rows[0])]
                later = rows
            seed = [hop(dec, layer, 1, graph[0], later[layer]) for layer in range(L)]  # the encoder states step 0 reads
        later = None
        for e in reversed(range(len(steps))):
            rows = [empty] * L
            for layer in reversed(range(L)):
                r = seed[layer] if e == len(steps) - 1 or every_step else empty
                if layer < top:
                    r = union_ints(r, hop(self.encoder, layer + 1, 0, steps[e], rows[layer + 1]))
                if later is not None:
                    r = union_ints(r, hop(self.encoder, layer, 1, steps[e + 1], later[layer]))
                rows[layer] = r
            need += [*rows, hop(self.encoder, 0, 0, steps[e], rows[0])]
            later = rows
        return unique_ints(np.concatenate(need))

    def rows_graph(self, t: int, rows: np.ndarray) -> RowsStepGraph:
        """Snapshot t among ``rows`` (:class:`RowsStepGraph`)."""
        whole = self.whole_graph(t)
        r, c, e = _submatrix(whole.indptr.numpy(), whole.indices.numpy(), rows)
        indptr = np.concatenate([[0], np.cumsum(np.bincount(r, minlength=rows.shape[0]))])
        return RowsStepGraph(t, torch.from_numpy(indptr), torch.from_numpy(c),
                             whole.values[torch.from_numpy(e)], whole=whole, rows=rows, device=self.ctx.device)

    def target_block(self, t: int) -> torch.Tensor:
        """The regression targets (N, H) float64, NaN where missing: the decoder's teacher inputs (memoised)."""
        if t not in self._targets:
            self._targets[t] = self.task.target_block(t)
        return self._targets[t]

    def sampled_block(self, start: int, stop: int, rows: np.ndarray, k: int, rng: np.random.Generator):
        """One layer's block-diagonal aggregation over steps ``start..stop-1`` for ``rows`` (``k``: fanout).

        Returns (NormalizedAdjacency of shape (S·len(rows), S·len(cols)), cols ascending ⊇ rows).
        """
        S, n = stop - start, rows.shape[0]
        rs, cs, vs = [], [], []
        for i, t in enumerate(range(start, stop)):
            h = self.snapshot(t)
            starts, counts = h.crow[rows], h.crow[rows + 1] - h.crow[rows]
            e = _expand(starts, counts)
            r = np.repeat(np.arange(n, dtype=np.int64), counts)
            c, v = h.col[e], h.val[e].copy()
            if k > 0 and e.size:
                self_loop = c == rows[r]
                key = rng.random(e.size)
                key[self_loop] = -1.0  # the self-loop is always kept, first in its row
                order = np.argsort(r + 0.5 * (key + 1.0), kind="stable")
                first = np.concatenate([[0], np.cumsum(counts)[:-1]])
                rank = np.empty(e.size, dtype=np.int64)
                rank[order] = np.arange(e.size) - np.repeat(first, counts)
                keep = rank <= k
                degree = counts - 1  # neighbours besides the self-loop (gcn_norm adds one to every row)
                scale = degree / np.minimum(degree, k).clip(min=1)
                v = np.where(self_loop, v, v * scale[r])
                r, c, v = r[keep], c[keep], v[keep]
            rs.append(r + i * n)
            cs.append(c)
            vs.append(v)
        r, c, v = np.concatenate(rs), np.concatenate(cs), np.concatenate(vs)
        cols = union_ints(rows, c)
        step = np.repeat(np.arange(S, dtype=np.int64), [x.shape[0] for x in rs])
        c_local = step * cols.shape[0] + np.searchsorted(cols, c)
        shape = (S * n, S * cols.shape[0])
        # entries are in CSR order already: only the transpose needs a (stable) sort
        vt = torch.from_numpy(v).to(self.ctx.dtype)
        by_col = np.argsort(c_local, kind="stable")
        dev = self.ctx.device
        adj = NormalizedAdjacency(-1, _csr(r, c_local, vt, shape).to(dev),
                                  _csr(c_local[by_col], r[by_col], vt[torch.from_numpy(by_col)],
                                       (shape[1], shape[0])).to(dev))
        return adj, cols
