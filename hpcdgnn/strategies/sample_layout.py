"""One sample's computational graph as the model's :class:`~hpcdgnn.nn.layout.Layout` (R4; ReInc §3.4.2).

Layer inputs are X's rows or, with ``reuse: on`` (R3), rows read from the strategy's reuse cache.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import torch

from hpcdgnn.nn.conv.graph import LocalGraph
from hpcdgnn.nn.layout import Layout, StepGraph
from hpcdgnn.nn.models.encoder_decoder import DecoderInputs, input_gates_from_basis
from hpcdgnn.ops.sparse import NormalizedAdjacency
from hpcdgnn.partition.sequences import Sequence
from hpcdgnn.strategies.sampling import RowsStepGraph
from hpcdgnn.tasks.base import SampleEmbeddings

if TYPE_CHECKING:
    from hpcdgnn.strategies.sequences import SequencesStrategy

__all__ = ["SampleLayout", "own_columns"]


def own_columns(rows: np.ndarray, cols: np.ndarray, steps: int) -> np.ndarray:
    """The column of each output row's own vertex in a sampled block (:meth:`SampleGraphs.sampled_block`): its
    columns are the ``cols`` it reads (ascending, ⊇ ``rows``), each step's apart.

    Shapes:
        rows (n,), cols (C,) -> (steps·n,), step s's rows first at s·C + their place in cols."""
    return (np.arange(steps)[:, None] * cols.shape[0] + np.searchsorted(cols, rows)).reshape(-1)


class SampleLayout(Layout):
    """One sample: per layer its output rows and sampled aggregation over the window, as one (S, n, F) block."""

    #: the sample's vertices are scored at every step of the window (hybrid batches), not only the last
    every_step = False

    def __init__(self, s: SequencesStrategy, seq: Sequence, batch: np.ndarray, vertices: np.ndarray,
                 rng: np.random.Generator, *, epoch: int = 0, b: int = 0, train: bool = False) -> None:
        super().__init__(seq.start, seq.stop, s.num_layers)
        self.s, self.seq, self.batch = s, seq, batch
        self.epoch, self.b, self.train = epoch, b, train
        self.vertices = np.asarray(vertices, dtype=np.int64)
        L = s.num_layers
        #: graph-recurrent cells: the rows U of every layer and step
        self.cells: np.ndarray | None = None
        if s.cells:
            #: the snapshot each decoder step reads
            self.decoder = s.decoder_steps(epoch, seq, b, train) if s.decoder is not None else None
            self.cells = s.cell_rows(seq, self.vertices, rng, self.decoder, self.every_step)
            self.graphs = [s.rows_graph(t, self.cells) for t in range(seq.start, seq.stop)]
            return
        self.rows: list[np.ndarray] = [np.zeros(0, np.int64)] * L + [self.vertices]
        self.adj: list[NormalizedAdjacency | None] = [None] * L
        for li in reversed(range(L)):  # from the batch down to the input
            if li == 0 and s.reads_ax:
                break
            self.adj[li], self.rows[li] = s.sampled_block(seq.start, seq.stop, self.rows[li + 1], s.fanout[li], rng)

    def spatial(self, layer, li: int, h: torch.Tensor | None, tparams) -> torch.Tensor:
        """The layer's aggregation over its sampled block, then its transform."""
        S = self.stop - self.start
        steps = list(range(self.start, self.stop))
        if self.cells is not None:
            if h is None:
                h = torch.stack([self._cell_input(g, "encoder") for g in self.graphs])
            return layer.spatial_steps(h, steps, tparams)
        n = self.rows[li + 1].shape[0]
        if h is None and self.s.reads_ax:  # R3
            ax = torch.stack([self.s.input_rows(t, self.rows[1]) for t in steps]).to(self.s.ctx.device)
            return layer.spatial_steps(ax, steps, tparams)
        if h is None:
            idx = torch.from_numpy(self.rows[0])
            h = torch.stack([self.s.snapshot(t).x.index_select(0, idx) for t in range(self.start, self.stop)])
            h = h.to(self.s.ctx.device)
        own = own_columns(self.rows[li + 1], self.rows[li], S)  # for a layer that reads it (GAT)
        graph = LocalGraph(self.adj[li], own=torch.from_numpy(own).to(self.s.ctx.device))
        ax = layer.aggregate(graph, h.reshape(-1, h.shape[-1]))
        return layer.spatial_steps(ax.view(S, n, ax.shape[-1]), steps, tparams)

    def _cell_input(self, graph: RowsStepGraph, part: str) -> torch.Tensor:
        """The first cell's input over U: X_t's rows, or its cached basis (R3)."""
        if self.s.reads_basis:
            return self.s.input_basis(graph, part)
        return self.s.snapshot(graph.t).x.index_select(0, torch.from_numpy(self.cells)).to(self.s.ctx.device)

    def encode(self, layer, li: int, y: torch.Tensor, state):
        """The layer's time encoder; the first cell's from its input's basis when that came from the cache."""
        if li == 0 and self.cells is not None and self.s.reads_basis:
            return layer.scan(input_gates_from_basis(layer, y), self.graphs, state)
        return super().encode(layer, li, y, state)

    def step_graphs(self, li: int) -> list[StepGraph] | None:
        """The window's graphs among the rows U of the cells (every layer runs over the same rows)."""
        return self.graphs if self.cells is not None else None

    def decoder_inputs(self) -> DecoderInputs:
        """The encoder–decoder's inputs: G_t among U, and teacher-forced targets or snapshot inputs per step."""
        s, H, last = self.s, self.s.horizon, self.graphs[-1]
        teacher: list[torch.Tensor | None] = [None] * H
        if s.reads_snapshots:
            graphs = [None if u is None else last if u == self.seq.t else s.rows_graph(u, self.cells)
                      for u in self.decoder]
            snaps = [None if g is None else self._cell_input(g, "decoder") for g in graphs]
            return DecoderInputs(last, teacher, snaps, graphs, aggregated=s.reads_basis)
        draws = s.teacher_draws(self.epoch, self.seq, self.b, self.train)
        if any(draws):
            block = s.target_block(self.seq.t).index_select(0, torch.from_numpy(self.cells))
            for d in range(1, H):
                if draws[d]:
                    teacher[d] = block[:, d - 1 : d].to(s.ctx.device, s.ctx.dtype)
        return DecoderInputs(last, teacher)

    def output(self, h: torch.Tensor) -> SampleEmbeddings:
        """The last step's rows of the sample's vertices."""
        self.last = h
        rows = h[-1]
        if self.cells is not None:
            rows = rows.index_select(0, torch.from_numpy(np.searchsorted(self.cells, self.vertices)).to(rows.device))
        return SampleEmbeddings(self.seq.t, rows, self.vertices, self.batch)
