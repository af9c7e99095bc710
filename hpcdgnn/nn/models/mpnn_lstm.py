"""MPNN-LSTM as DGC §7.1 trains it (Panagopoulos et al. 2021): concatenated GCN outputs into a 2-layer LSTM.

GCN layer i outputs ``[H_1 … H_i]`` but aggregates only the newest block, so a halo carries F' per layer.
No batch norm or dropout: both would make results depend on how rows are batched."""

from __future__ import annotations

import torch
from torch import nn

from hpcdgnn.nn.conv.graph import LocalGraph
from hpcdgnn.nn.models.base import DGNN, DynamicLayer, register_model

__all__ = ["MPNNLSTMLayer", "build_mpnn_lstm"]


class MPNNLSTMLayer(DynamicLayer):
    """GCN layer ``index`` (0-based) of MPNN-LSTM; the last one also runs the LSTM (DGC §7.1).

    ::

        H_1 = relu(Ã_t X_t W_1 + b_1),   H_{i+1} = relu(Ã_t H_i W_{i+1} + b_{i+1}),
        layer i outputs [H_1 … H_{i+1}];   the last: Z_t = LSTM([H_1 … H_L]_t) (``lstm_layers`` deep)

    Args:
        in_features: F, the width of X_t (read by layer 0 only).
        hidden: F', the width of each H_i and of Z_t.
        index: i, this layer's position (0-based).
        last: whether this is the last GCN layer, which runs the LSTM.
        lstm_layers: the LSTM's depth (DGC: 2).

    Shapes:
        input (n, index·F' or F) -> spatial (n, (index+1)·F'); last temporal (T, n, layers·F') -> (T, n, F')."""

    def __init__(self, in_features: int, hidden: int, index: int, last: bool, lstm_layers: int = 2) -> None:
        super().__init__()
        self.index, self.hidden = index, hidden
        self.in_features = in_features if index == 0 else index * hidden
        self.spatial_features = (index + 1) * hidden
        self.out_features = hidden if last else self.spatial_features
        self.temporal_mixing = last
        self.lin = nn.Linear(in_features if index == 0 else hidden, hidden)
        self.lstm = nn.LSTM(self.spatial_features, hidden, num_layers=lstm_layers) if last else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Reset the GCN weight and the LSTM."""
        self.lin.reset_parameters()
        if self.lstm is not None:
            self.lstm.reset_parameters()

    def aggregate(self, graph: LocalGraph, h: torch.Tensor) -> torch.Tensor:
        """``[Ã·H_i , H_1 … H_i]`` for input ``[H_1 … H_i]``: only the newest block needs the neighbours."""
        if self.index == 0:
            return super().aggregate(graph, h)
        return torch.cat([graph.propagate(h[:, -self.hidden :]), h], dim=-1)

    def spatial(self, ax: torch.Tensor, t: int, tparams: list[torch.Tensor] | None) -> torch.Tensor:
        """``[H_1 … H_i, relu(Ã H_i W + b)]``: the concatenation of all GCN outputs so far."""
        if self.index == 0:
            return torch.relu(self.lin(ax))
        return torch.cat([ax[:, self.hidden :], torch.relu(self.lin(ax[:, : self.hidden]))], dim=-1)

    def rnn(self) -> nn.RNNBase | None:
        """The 2-layer LSTM after the last layer (the time encoder); None below it (identity along time)."""
        return self.lstm


@register_model("mpnn_lstm")
def build_mpnn_lstm(in_features: int, hidden: int, layers: int) -> DGNN:
    """``layers`` GCN layers (DGC §7.1: 2), outputs concatenated, then a 2-layer LSTM.

    Args:
        in_features: F, the width of the input X_t.
        hidden: H, the width of each GCN output and of Z_t.
        layers: L, the number of GCN layers.

    Shapes:
        X_t (N, F) of each snapshot -> Z_t (N, H)."""
    return DGNN([MPNNLSTMLayer(in_features, hidden, i, last=i == layers - 1) for i in range(layers)])
