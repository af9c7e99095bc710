"""The sampler of the sequences strategy (R4; ReInc §3.4.2, §3.4.3): one sample's computational graph.

A sample (one window × one node batch, :mod:`hpcdgnn.strategies.sequences`) runs every layer, in every step of
its window, over the rows the layer above reads. :class:`SampleGraphs` works those rows out from a host
strategy's snapshots and builds the operators among them — a mixin, whose host's attributes it lists;
:class:`RowsStepGraph` is one step's graph among a sample's rows; the module-level helpers cut CSR matrices
(:func:`_submatrix`, :func:`_restrict`) and key the neighbour draws (:func:`_mix`).

**Layers with a spatial aggregation** (:meth:`SampleGraphs.sampled_block`): from the batch down, a layer's rows
read their neighbours in Ã_t of each step — all of them, or ``fanouts[l]`` (nearest the batch first) sampled
without replacement per vertex and step, weighted |N(v)| / k so the aggregation stays unbiased; the self-loop
always — through one block-diagonal operator over the window; the vertices read are the rows of the layer below.

**Graph-recurrent cells** (``gconv_lstm``, ``gconv_gru``, ``dcrnn``, ``gcrn_m1``; ReInc §2.1). Their time
encoder convolves the state over each step's graph, so the rows a sample needs grow with the window:
output row v of layer l at step t reads, through one step's operator (L̂_t, or P_f and P_b; its hops are
the union of their patterns), the input (layer l - 1's output, or X_t) at ``a`` hops and layer l's state
after t - 1 at ``b`` hops — (a, b) = :meth:`~hpcdgnn.nn.models.base.GraphRecurrentLayer.receptive_hops`:
(K-1, K-1) for GConvLSTM, (2(K-1), 2(K-1)) for GConvGRU and DCRNN (the candidate convolves R_t ⊙ H_{t-1}
and R_t is itself a convolution), (K-1, 0) for GCRN-M1. :meth:`SampleGraphs.cell_rows` works these
sets out backwards from the scored rows — R^l_t for every layer l and step t of the window, starting
from the batch's ``sample_vertices`` at the last step of the top layer (or, with the encoder–decoder,
at every decoder step of the top layer, the decoder's own state, the rows whose prediction the next
decoder step reads as input, and the encoder states the decoder starts from — each decoder step's hops
over the graph it runs on: G_t, or G_{t+d} where it reads snapshot t + d), with R^{l-1}_t ⊇ a-hops
of R^l_t and R^l_{t-1} ⊇ b-hops of R^l_t over G_t — and takes their union U (with X's reads at layer 0).
Every layer then runs over U at every step, with each step's operator built once on the *whole*
snapshot and restricted to U × U (:class:`RowsStepGraph`: the degrees stay the whole graph's). A row
of R^l_t reads only rows of R^{l-1}_t and R^l_{t-1}, whose whole rows of the operator lie in U, so with
full neighbourhoods (``fanouts: []``) the batch's outputs equal full-graph computation of the window
exactly (tested to 1e-10); rows of U outside the R sets are computed too, inexactly, and never read by
those that matter. The closure spans up to L·b + a hops per layer over an L-step window, so with
large windows on large graphs U approaches N — the price of the recurrence's receptive field.

*Sampled fanouts for cells*: ``fanouts[l]`` (nearest the batch first, as for the GCN layers) caps, per
vertex, step and hop of the expansions layer l causes (its state's and its input's), how many of the
vertex's neighbours in that step's operator join the rows: the ``k`` with the smallest keys of a hash
of (sample, step, vertex, neighbour) — so a vertex expanded twice in a step keeps the same neighbours,
and the draw depends on the seed, epoch, sequence and node batch only (P-invariant). The cells then
run over the subgraph U induces, with the whole graph's operator entries among U (a neighbour outside
U is dropped, nothing is reweighted: the induced-subgraph reading of ClusterGCN / GraphSAINT, not
GraphSAGE's scaled mean, which a Chebyshev or diffusion basis has no unbiased form of).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from hpcdgnn.nn.conv.gcn import NormalizedAdjacency, csr_tensor
from hpcdgnn.nn.layout import StepGraph
from hpcdgnn.partition.sequences import Sequence

__all__ = ["RowsStepGraph", "SampleGraphs"]


def _expand(starts: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Positions ``starts[i] .. starts[i] + counts[i] - 1`` for every i, concatenated."""
    total = int(counts.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    offsets = np.repeat(starts - np.concatenate([[0], np.cumsum(counts)[:-1]]), counts)
    return np.arange(total, dtype=np.int64) + offsets


def _csr(r: np.ndarray, c: np.ndarray, v: torch.Tensor, shape: tuple[int, int]) -> torch.Tensor:
    """CSR of entries already ordered by row, then column (:func:`~hpcdgnn.nn.conv.gcn.csr_tensor`: int32
    indices where they fit, as every other operator of Ã)."""
    crow = np.concatenate([[0], np.cumsum(np.bincount(r, minlength=shape[0]))])
    return csr_tensor(torch.from_numpy(crow), torch.from_numpy(np.ascontiguousarray(c)), v, shape)


def _submatrix(crow: np.ndarray, col: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The entries of a CSR matrix among ``rows`` × ``rows`` (ascending): local row and column of each, in CSR
    order (columns stay ascending through the monotone map), and its position among the matrix's entries."""
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
    """Snapshot t's graph among one sample's rows ``rows`` (ascending): ``indptr``/``indices``/``values`` are
    A_t's entries among them; a graph-recurrent cell's operator here is the ``whole`` snapshot's (built once
    there, whole-graph degrees) restricted to ``rows`` × ``rows`` (:meth:`restrict`,
    :meth:`GraphRecurrentLayer.operator <hpcdgnn.nn.models.base.GraphRecurrentLayer.operator>`), so a row
    whose neighbourhood lies in ``rows`` gets exactly its row of the full operator."""

    whole: StepGraph | None = None
    rows: np.ndarray | None = None
    device: torch.device | None = None

    def restrict(self, ops: tuple) -> tuple:
        """The whole snapshot's operators ``ops`` restricted to :attr:`rows`, on :attr:`device`."""
        return tuple(_restrict(op, self.rows, self.device) for op in ops)


class SampleGraphs:
    """The computational graphs of a host strategy's samples (a mixin; module docstring): per layer the rows and
    sampled aggregation (:meth:`sampled_block`), or for graph-recurrent cells the rows U of their receptive field
    (:meth:`cell_rows`) and each step's graph among them (:meth:`rows_graph`).

    The host provides:

    * ``snapshot(t)``: snapshot t on the host, with ``crow``, ``col``, ``val`` (Ã_t as CSR, float64), ``x`` (X_t),
      ``raw`` (A_t as read: indptr, indices, weights; for graph-recurrent cells) and ``graph`` (settable, None
      until :meth:`whole_graph` stores the whole-snapshot step graph there);
    * ``ctx``: the strategy context (``dtype``, ``device``); ``N``: the number of vertices;
    * ``fanout``: per layer, input layer first, the neighbours sampled per vertex (0: all of them);
    * ``encoder``, ``decoder`` (None without the encoder–decoder) and ``horizon``: the model's layers and H;
    * ``task`` and ``_targets`` (a dict, empty at setup), for :meth:`target_block`.
    """

    # -- computational graphs of graph-recurrent cells ---------------------------------------------
    def whole_graph(self, t: int) -> StepGraph:
        """Snapshot t's whole graph A_t as a step graph (on the host), built once per held or fetched snapshot:
        the operators of the cells are built on it once and restricted to each sample's rows."""
        h = self.snapshot(t)
        if h.graph is None:
            indptr, indices, weights = (torch.from_numpy(np.ascontiguousarray(a)) for a in h.raw)
            h.graph = StepGraph(t, indptr, indices, weights)
        return h.graph

    def _pattern(self, layer, t: int) -> tuple[np.ndarray, np.ndarray]:
        """(crow, col) of the union of the patterns of ``layer``'s whole-snapshot operators at step t: the
        hops of the cell's convolutions (memoised on the whole graph)."""
        g = self.whole_graph(t)

        def build(_):
            keys = []
            for op in layer.operator(g, self.ctx.dtype):
                crow, col = op.a.crow_indices().numpy(), op.a.col_indices().numpy()
                n = crow.shape[0] - 1
                keys.append(np.repeat(np.arange(n, dtype=np.int64), np.diff(crow)) * n + col)
            keys = np.unique(np.concatenate(keys))
            r, c = np.divmod(keys, self.N)
            return np.concatenate([[0], np.cumsum(np.bincount(r, minlength=self.N))]), c

        return g.operator(("pattern", type(layer).__name__), build)

    def _hop(self, layer, t: int, rows: np.ndarray, k: int, fanout: int, salt: int) -> np.ndarray:
        """``rows`` and their neighbours up to ``k`` hops over ``layer``'s operator at step t (ascending); with
        ``fanout`` > 0 each vertex adds at most that many neighbours: those with the smallest :func:`_mix` keys."""
        if k == 0 or rows.shape[0] == 0:
            return rows
        crow, col = self._pattern(layer, t)
        out = frontier = rows
        for _ in range(k):
            counts = crow[frontier + 1] - crow[frontier]
            c = col[_expand(crow[frontier], counts)]
            if fanout > 0 and c.shape[0]:
                r = np.repeat(frontier, counts)
                other = c != r  # the vertex itself is in already
                r, c = r[other], c[other]
                order = np.lexsort((_mix(salt + t * 0x9E37, r, c), r))  # by vertex (ascending), then key
                _, first, per = np.unique(r, return_index=True, return_counts=True)
                rank = np.empty(r.shape[0], dtype=np.int64)
                rank[order] = np.arange(r.shape[0]) - np.repeat(first, per)
                c = c[rank < fanout]
            frontier = np.setdiff1d(c, out)
            if frontier.shape[0] == 0:
                break
            out = np.union1d(out, frontier)
        return out

    def cell_rows(self, seq: Sequence, vertices: np.ndarray, rng: np.random.Generator,
                  decoder: list[int | None] | None = None) -> np.ndarray:
        """The rows U every graph-recurrent layer of a sample runs over (module docstring, *Graph-recurrent
        cells*): the union over layers and steps — the window's, then with the encoder–decoder the decoder's
        H steps — of the rows whose outputs the scored ``vertices`` depend on, and of layer 0's reads.
        ``decoder``: the snapshot each decoder step reads
        (:meth:`~hpcdgnn.strategies.sequences.SequencesStrategy.decoder_steps`; None: its own prediction), whose
        graph the step convolves over (G_t where it reads none); default: none read."""
        salt = int(rng.integers(0, 2**62))
        L, top = len(self.encoder), len(self.encoder) - 1
        steps = list(range(seq.start, seq.stop))
        empty = np.zeros(0, np.int64)
        fan = self.fanout

        def hop(layers, layer, which, t, rows):  # the rows layers[layer] reads of its input (0) or its state (1)
            return self._hop(layers[layer], t, rows, layers[layer].receptive_hops()[which], fan[layer], salt)

        need: list[np.ndarray] = [vertices]
        seed = [empty] * L  # rows each encoder layer must get right at the window's last step
        if self.decoder is None:
            seed[top] = vertices
        else:
            reads = decoder or [None] * self.horizon
            graph = [seq.t if u is None else u for u in reads]  # the snapshot whose graph step d runs on
            dec, later = self.decoder, None  # ``later``: the rows of decoder step d + 1, per layer
            for d in reversed(range(self.horizon)):
                rows = [empty] * L
                for layer in reversed(range(L)):
                    r = vertices if layer == top else hop(dec, layer + 1, 0, graph[d], rows[layer + 1])
                    if later is not None:
                        r = np.union1d(r, hop(dec, layer, 1, graph[d + 1], later[layer]))  # the state step d + 1 reads
                        if layer == top and reads[d + 1] is None:  # step d + 1 reads this step's prediction
                            r = np.union1d(r, hop(dec, 0, 0, graph[d + 1], later[0]))
                    rows[layer] = r
                need += [*rows, hop(dec, 0, 0, graph[d], rows[0])]  # layer 0's reads of step d's input
                later = rows
            seed = [hop(dec, layer, 1, graph[0], later[layer]) for layer in range(L)]  # the encoder states step 0 reads
        later = None
        for e in reversed(range(len(steps))):
            rows = [empty] * L
            for layer in reversed(range(L)):
                r = seed[layer] if e == len(steps) - 1 else empty
                if layer < top:
                    r = np.union1d(r, hop(self.encoder, layer + 1, 0, steps[e], rows[layer + 1]))
                if later is not None:
                    r = np.union1d(r, hop(self.encoder, layer, 1, steps[e + 1], later[layer]))
                rows[layer] = r
            need += [*rows, hop(self.encoder, 0, 0, steps[e], rows[0])]  # X_t's rows layer 0 reads
            later = rows
        return np.unique(np.concatenate(need))

    def rows_graph(self, t: int, rows: np.ndarray) -> RowsStepGraph:
        """Snapshot t among ``rows`` (:class:`RowsStepGraph`)."""
        whole = self.whole_graph(t)
        r, c, e = _submatrix(whole.indptr.numpy(), whole.indices.numpy(), rows)
        indptr = np.concatenate([[0], np.cumsum(np.bincount(r, minlength=rows.shape[0]))])
        return RowsStepGraph(t, torch.from_numpy(indptr), torch.from_numpy(c),
                             whole.values[torch.from_numpy(e)], whole=whole, rows=rows, device=self.ctx.device)

    def target_block(self, t: int) -> torch.Tensor:
        """The regression targets Ŷ_t forecasts, (N, H) float64 on the host (NaN where missing): the decoder's
        teacher inputs (:meth:`~hpcdgnn.tasks.regression.Regression.target_block`), kept per step."""
        if t not in self._targets:
            self._targets[t] = self.task.target_block(t)
        return self._targets[t]

    # -- computational graphs ---------------------------------------------------------------------
    def sampled_block(self, start: int, stop: int, rows: np.ndarray, k: int, rng: np.random.Generator):
        """One layer's aggregation over steps ``start..stop-1`` for output vertices ``rows`` (ascending):
        block-diagonal over steps, each block Ã_t's rows of ``rows`` (all entries, or the self-loop plus
        ``k`` neighbours sampled without replacement, weighted deg / k); and the vertices it reads.

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
                order = np.argsort(r + 0.5 * (key + 1.0), kind="stable")  # by row, then key (self-loop first)
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
        cols = np.union1d(rows, c)
        step = np.repeat(np.arange(S, dtype=np.int64), [x.shape[0] for x in rs])
        c_local = step * cols.shape[0] + np.searchsorted(cols, c)
        shape = (S * n, S * cols.shape[0])
        # the entries are in CSR order already (rows ascending; a row's columns ascend, as in Ã_t and
        # through the monotone map to positions in ``cols``): only the transpose needs a (stable) sort
        vt = torch.from_numpy(v).to(self.ctx.dtype)
        by_col = np.argsort(c_local, kind="stable")
        dev = self.ctx.device
        adj = NormalizedAdjacency(-1, _csr(r, c_local, vt, shape).to(dev),
                                  _csr(c_local[by_col], r[by_col], vt[torch.from_numpy(by_col)],
                                       (shape[1], shape[0])).to(dev))
        return adj, cols
