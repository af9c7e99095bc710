"""DySAT as DGC §7.1 trains it (Sankar et al. 2020): per block a GAT layer and a temporal self-attention layer.

Temporal attention is causal (step t attends to 0..t) and reads *all* earlier steps (DGC §7.2), so the
state carried by checkpoint blocks (S2) and PSS is the whole past input. Positions use fixed sinusoidal
codes of the absolute step (the same under every partition of time) instead of DySAT's learned table."""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn

from hpcdgnn.nn.conv.gat import GATConv
from hpcdgnn.nn.conv.graph import LocalGraph
from hpcdgnn.nn.models.base import DGNN, DynamicLayer, register_model

__all__ = ["DySATLayer", "build_dysat", "positional_encoding"]


def positional_encoding(positions: torch.Tensor, width: int) -> torch.Tensor:
    """Sinusoidal codes (Vaswani et al. 2017) of integer positions: (T,) -> (T, width)."""
    i = torch.arange(0, width, 2, dtype=torch.float64, device=positions.device)
    angle = positions.to(torch.float64).unsqueeze(-1) / torch.pow(10000.0, i / width)
    code = torch.zeros(positions.shape[0], width, dtype=torch.float64, device=positions.device)
    code[:, 0::2] = torch.sin(angle)
    code[:, 1::2] = torch.cos(angle[:, : width // 2])
    return code


class DySATLayer(DynamicLayer):
    """One DySAT block (DGC §7.1; Sankar et al. 2020): structural, then causal temporal self-attention.

    ::

        Y_t = ELU(GAT_t(X_t) + b),   Z_t = FF(A_t),   FF(a) = relu(W_ff a + b_ff) + a,
        A_t = Σ_{k≤t} softmax_k((Y_t + p_t) W_q · (Y_k + p_k) W_k / √F') (Y_k + p_k) W_v

    with p_t the sinusoidal code of step t (:func:`positional_encoding`).

    Args:
        in_features: F, the width of X_t.
        out_features: F', the width of Y_t and Z_t.

    Shapes:
        aggregate + spatial (n, F) -> (n, F'); temporal (T, n, F') -> (T, n, F');
        state: the inputs of all earlier steps, (t0, n, F'), or None."""

    precomputable = False  # the aggregation has parameters: X_t, not Ã_t·X_t, is the constant

    def __init__(self, in_features: int, out_features: int) -> None:
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        self.spatial_features = out_features
        self.gat = GATConv(in_features, out_features)
        self.bias = nn.Parameter(torch.zeros(out_features))
        self.q = nn.Linear(out_features, out_features, bias=False)
        self.k = nn.Linear(out_features, out_features, bias=False)
        self.v = nn.Linear(out_features, out_features, bias=False)
        self.ff = nn.Linear(out_features, out_features)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Reset the GAT, the attention projections and the feed-forward layer."""
        self.gat.reset_parameters()
        nn.init.zeros_(self.bias)
        for m in (self.q, self.k, self.v, self.ff):
            m.reset_parameters()

    def aggregate(self, graph: LocalGraph, h: torch.Tensor) -> torch.Tensor:
        """Structural attention over each row's neighbours (GAT)."""
        return self.gat(graph, h)

    def spatial(self, ax: torch.Tensor, t: int, tparams: list[torch.Tensor] | None) -> torch.Tensor:
        """ELU of the attended sum plus bias (DySAT's structural layer)."""
        return torch.nn.functional.elu(ax + self.bias)

    def temporal(self, y: torch.Tensor, state: Any = None) -> tuple[torch.Tensor, Any]:
        """Causal scaled dot-product attention over each vertex's steps so far."""
        T = y.shape[0]
        full = y if state is None or state.shape[0] == 0 else torch.cat([state, y], dim=0)
        past = full.shape[0] - T
        pos = positional_encoding(torch.arange(full.shape[0], device=y.device), y.shape[-1]).to(y.dtype)
        inp = (full + pos.unsqueeze(1)).transpose(0, 1)
        q, k, v = self.q(inp[:, past:]), self.k(inp), self.v(inp)
        score = q @ k.transpose(1, 2) / math.sqrt(y.shape[-1])
        future = torch.arange(full.shape[0], device=y.device) > (torch.arange(T, device=y.device) + past)[:, None]
        att = torch.softmax(score.masked_fill(future, float("-inf")), dim=-1) @ v
        out = torch.relu(self.ff(att)) + att
        return out.transpose(0, 1), full


@register_model("dysat")
def build_dysat(in_features: int, hidden: int, layers: int) -> DGNN:
    """``layers`` DySAT blocks (:class:`DySATLayer`; DGC §7.1).

    Args:
        in_features: F, the width of the input X_t.
        hidden: H, the width of every layer's output.
        layers: L, the number of layers.

    Shapes:
        X_t (N, F) of each snapshot -> Z_t (N, H)."""
    dims = [in_features] + [hidden] * layers
    return DGNN([DySATLayer(dims[i], dims[i + 1]) for i in range(layers)])
