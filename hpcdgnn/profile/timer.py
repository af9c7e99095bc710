"""DGC §6's labels: one chunk's structure- and time-encoder seconds, timed the way ``strategy: chunk`` runs them.

Labels mean something only if they time the work training does: Ã rows with halo columns
(layer 0's ``Ã·X`` precomputed, SPEC S4), ``layer.spatial`` per snapshot, the RNN over
padded sequences, forward and backward.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

import numpy as np
import torch

from hpcdgnn.nn.conv.graph import LocalGraph
from hpcdgnn.nn.layout import RowLayout
from hpcdgnn.partition.chunks import SuperGraph
from hpcdgnn.partition.workload import layer_shape
from hpcdgnn.profile.chunks import Topology

__all__ = ["ChunkTimer", "detached_time_params"]


class ChunkTimer:
    """Times one chunk's structure and time encoders as the chunk strategy runs them (forward + backward).

    After one warm-up, the best of ``repeats`` counts: the others are a shared machine's noise.
    """

    def __init__(self, g: SuperGraph, device: str = "cpu", dtype: torch.dtype = torch.float32, repeats: int = 3,
                 topo: Topology | None = None) -> None:
        self.g, self.device, self.dtype, self.repeats = g, torch.device(device), dtype, max(1, repeats)
        self.topo = topo or Topology.of(g)
        self.dinv = 1.0 / np.sqrt(1.0 + self.topo.deg)
        self._cuda = self.device.type == "cuda"

    def _best(self, fn: Callable[[], None]) -> float:
        fn()
        best = math.inf
        for _ in range(self.repeats):
            if self._cuda:
                torch.cuda.synchronize(self.device)
            t0 = time.perf_counter()
            fn()
            if self._cuda:
                torch.cuda.synchronize(self.device)
            best = min(best, time.perf_counter() - t0)
        return best

    def adjacency(self, nodes: np.ndarray):
        """The chunk's normalised Ã rows (n × (n + halo)) and transpose, columns: the chunk, then its halo."""
        from hpcdgnn.ops.sparse import NormalizedAdjacency, sorted_csr

        n = nodes.shape[0]
        pos, nb = self.topo.rows(nodes)
        at = np.clip(np.searchsorted(nodes, nb), 0, n - 1)
        inside = nodes[at] == nb
        halo, hinv = np.unique(nb[~inside], return_inverse=True)
        col = np.where(inside, at, 0)
        col[~inside] = n + hinv
        rows = np.concatenate([pos, np.arange(n)])
        cols = np.concatenate([col, np.arange(n)])
        gl = np.concatenate([nodes[pos], nodes])
        gc = np.concatenate([nb, nodes])
        vals = self.dinv[gl] * self.dinv[gc]  # IBM Eq. 1's D^-1/2 (A + I) D^-1/2 within the snapshot
        dev = self.device
        r, c = torch.from_numpy(rows).to(dev), torch.from_numpy(cols).to(dev)
        v = torch.from_numpy(vals).to(dev, self.dtype)
        shape = (n, n + halo.shape[0])
        return NormalizedAdjacency(0, sorted_csr(r, c, v, shape), sorted_csr(c, r, v, (shape[1], shape[0])))

    def structure(self, nodes: np.ndarray, layer, aggregate: bool, tparams=None) -> float:
        """Best seconds of one layer's structure encoder on ``nodes``; ``aggregate`` False for a precomputed layer 0."""
        n = nodes.shape[0]
        t_of = self.g.time[nodes]
        cut = np.flatnonzero(np.diff(t_of)) + 1
        bounds = np.concatenate([[0], cut, [n]]).tolist()
        times = t_of[np.asarray(bounds[:-1], dtype=np.int64)].tolist()
        gen = torch.Generator().manual_seed(n)
        h = torch.randn(n, layer.in_features, generator=gen, dtype=self.dtype).to(self.device)
        agg: Callable[[torch.Tensor], torch.Tensor] | None = None
        if aggregate:
            adj = self.adjacency(nodes)
            # the halo's rows stand in as copies of own rows: same gather size, no communication timed
            src = torch.randint(0, n, (adj.a.shape[1] - n,), generator=gen).to(self.device)

            def gather(m: torch.Tensor) -> torch.Tensor:
                return torch.cat([m, m.index_select(0, src)])

            graph = LocalGraph(adj, gather)
            agg = lambda x: layer.aggregate(graph, x)  # noqa: E731
            h.requires_grad_(True)  # a later layer's input is an activation: its gradient is work too

        # the chunk strategy's own spatial stage (RowLayout, as DGNN.forward calls it) over this chunk's rows
        layout = RowLayout(0, int(t_of.max()) + 1, 1,
                           [(t, b - a) for a, b, t in zip(bounds[:-1], bounds[1:], times, strict=True)],
                           lambda _layer, _li, x: agg(x) if agg is not None else x)

        def run() -> None:
            y = layout.spatial(layer, 0, h, tparams)
            y.backward(torch.ones_like(y))

        return self._best(run)

    def temporal(self, nodes: np.ndarray, layer) -> float:
        """Best seconds of one layer's time encoder over the chunk's vertex sequences (padded batch)."""
        _, length = np.unique(self.g.vertex[nodes], return_counts=True)
        gen = torch.Generator().manual_seed(int(nodes.shape[0]))
        y = torch.randn(int(length.max()), length.shape[0], layer.spatial_features, generator=gen, dtype=self.dtype)
        y = y.to(self.device).requires_grad_(True)

        def run() -> None:
            z, _ = layer.temporal(y, None)
            z.backward(torch.ones_like(z))

        return self._best(run)

    def model(self, nodes: np.ndarray, model, tparams: list) -> tuple[float, float]:
        """(structure, time) seconds of the chunk summed over every layer of ``model`` (the bench's ground truth)."""
        s = sum(self.structure(nodes, ly, layer_shape(ly, i).spmm, tparams[i])
                for i, ly in enumerate(model.layers))
        t = sum(self.temporal(nodes, ly) for ly in model.layers if ly.temporal_mixing)
        return float(s), float(t)


def detached_time_params(model, T: int) -> list:
    """Every layer's per-step parameters for steps 0..T-1 (EvolveGCN's W_t) as fresh leaves.

    Evolving them is the layer's work, not a chunk's; as leaves they still take dY/dW_t.
    """
    out = []
    with torch.no_grad():
        for ly in model.layers:
            # a pooling layer's summaries are data, not the chunk's work: zeros time the same GRU
            pooled = (next(ly.parameters()).new_zeros(T, ly.pool_rows, ly.in_features),) if ly.pool_rows else ()
            p, _ = ly.time_params_block(0, T, None, *pooled)
            out.append(None if p is None else {t: w.detach().requires_grad_(True) for t, w in p.items()})
    return out

