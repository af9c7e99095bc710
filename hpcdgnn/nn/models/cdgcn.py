"""CD-GCN: skip-concatenated GCN + LSTM (IBM §5.1; Manessi et al. 2020)."""

from __future__ import annotations

import torch
from torch import nn

from hpcdgnn.nn.models.base import DGNN, DynamicLayer, register_model

__all__ = ["CDGCNLayer", "build_cdgcn"]


class CDGCNLayer(DynamicLayer):
    r"""One CD-GCN layer: a skip-concatenated GCN, then an LSTM along each vertex's timeline (IBM §5.1).

    .. math::
        Y_0 = \tilde A_t X_t,\quad Y_1 = Y_0 W,\quad Y_t = \sigma(Y_0 \circ Y_1),\quad
        (h_t, c_t) = \mathrm{LSTM}(Y_t, (h_{t-1}, c_{t-1})),\quad Z_t = h_t

    where ∘ is concatenation.

    Args:
        in_features: F, the width of X_t.
        out_features: F', the width of Z_t (the GCN weight W is F x F').

    Shapes:
        spatial Ã_t X_t (n, F) -> Y_t (n, F + F'); temporal (T, n, F + F') -> Z (T, n, F'); state (h, c)."""

    def __init__(self, in_features: int, out_features: int) -> None:
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        self.spatial_features = in_features + out_features
        self.lin = nn.Linear(in_features, out_features)
        self.lstm = nn.LSTM(self.spatial_features, out_features)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Reset the GCN weight and the LSTM."""
        self.lin.reset_parameters()
        self.lstm.reset_parameters()

    def spatial(self, ax: torch.Tensor, t: int, tparams: list[torch.Tensor] | None) -> torch.Tensor:
        """Skip-concatenated GCN (IBM §5.1)."""
        return torch.relu(torch.cat([ax, self.lin(ax)], dim=-1))

    def rnn(self) -> nn.RNNBase | None:
        """The LSTM (the time encoder)."""
        return self.lstm


@register_model("cdgcn")
def build_cdgcn(in_features: int, hidden: int, layers: int) -> DGNN:
    """CD-GCN extended to ``layers`` GCN-LSTM pairs as IBM §5.1 does for two (:class:`CDGCNLayer`).

    Args:
        in_features: F, the width of the input X_t.
        hidden: H, the width of every layer's output.
        layers: L, the number of layers.

    Shapes:
        X_t (N, F) of each snapshot -> Z_t (N, H)."""
    dims = [in_features] + [hidden] * layers
    return DGNN([CDGCNLayer(dims[i], dims[i + 1]) for i in range(layers)])
