r"""Graph attention (Veličković et al. 2018), the structure encoder of DySAT (DGC §7.1).

.. math::
    e_{ij} = \mathrm{LeakyReLU}(a_{dst}^\top W h_i + a_{src}^\top W h_j),\quad
    \alpha_{ij} = \mathrm{softmax}_{j \in N(i) \cup \{i\}}(e_{ij}),\quad
    h'_i = \sum_j \alpha_{ij} W h_j

over Ã's pattern. Messages ``[W h_j, a_src·W h_j]`` are gathered once (F' + 1 values per halo row); the
softmax subtracts each row's maximum without gradient (stable and exact)."""

from __future__ import annotations

import torch
from torch import nn

from hpcdgnn.nn.conv.graph import LocalGraph

__all__ = ["GATConv"]


class GATConv(nn.Module):
    """One single-head GAT aggregation ``(n, F) -> (n, F')``, no activation (Veličković et al. 2018).

    Args:
        in_features: F, the width of h.
        out_features: F', the width of W h and of the output.
        negative_slope: the LeakyReLU's slope for negative scores.

    Shapes:
        ``graph`` n rows over n + halo columns, ``h`` (n, F) -> (n, F'); or, with ``graph.own``, n rows over the
        columns ``h`` (c, F) fills -> (n, F')."""

    def __init__(self, in_features: int, out_features: int, negative_slope: float = 0.2) -> None:
        super().__init__()
        self.lin = nn.Linear(in_features, out_features, bias=False)
        self.att_src = nn.Parameter(torch.empty(out_features))
        self.att_dst = nn.Parameter(torch.empty(out_features))
        self.negative_slope = negative_slope
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Glorot-like init of W and the attention vectors."""
        self.lin.reset_parameters()
        bound = (6.0 / (1 + self.att_src.shape[0])) ** 0.5
        nn.init.uniform_(self.att_src, -bound, bound)
        nn.init.uniform_(self.att_dst, -bound, bound)

    def forward(self, graph: LocalGraph, h: torch.Tensor) -> torch.Tensor:
        """Attention-weighted sum of the gathered messages of each row's neighbours."""
        m = self.lin(h)
        msg = graph.gather(torch.cat([m, (m * self.att_src).sum(-1, keepdim=True)], dim=-1))
        row, col = graph.edges()
        n = graph.num_rows
        own = m if graph.own is None else msg[graph.own, :-1]  # each row's own W h_i
        score = (own[:n] * self.att_dst).sum(-1)[row] + msg[col, -1]
        score = torch.nn.functional.leaky_relu(score, self.negative_slope)
        with torch.no_grad():
            top = score.new_full((n,), float("-inf")).scatter_reduce(0, row, score, "amax")
        w = torch.exp(score - top[row])
        alpha = w / w.new_zeros(n).index_add(0, row, w)[row]
        return m.new_zeros(n, m.shape[-1]).index_add(0, row, alpha.unsqueeze(-1) * msg[col, :-1])
