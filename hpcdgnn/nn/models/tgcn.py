"""T-GCN as DGC §7.1 trains it: GCN layers (structure encoder), then a 1-layer GRU (time encoder).

Unlike Zhao et al. 2019 (:mod:`hpcdgnn.nn.models.tgcn_cell`) the convolutions precede the GRU, so the
recurrence stays per vertex. ``model.layers`` counts the GCN layers."""

from __future__ import annotations

import torch
from torch import nn

from hpcdgnn.nn.models.base import DGNN, DynamicLayer, register_model

__all__ = ["TGCNLayer", "build_tgcn"]


class TGCNLayer(DynamicLayer):
    """One GCN layer ``Y_t = relu(Ã_t X_t W + b)``, then ``Z_t = GRU(Y_t, h_{t-1})`` when ``recurrent`` (DGC §7.1).

    Args:
        in_features: F, the width of X_t.
        out_features: F', the width of Y_t and Z_t.
        recurrent: whether the GRU follows (the last layer).

    Shapes:
        spatial ``ax`` = Ã_t X_t (n, F) -> Y_t (n, F'); temporal (T, n, F') -> Z (T, n, F'); state ``h`` (1, n, F')."""

    def __init__(self, in_features: int, out_features: int, recurrent: bool) -> None:
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        self.spatial_features = out_features
        self.temporal_mixing = recurrent
        self.lin = nn.Linear(in_features, out_features)
        self.gru = nn.GRU(out_features, out_features) if recurrent else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Reset the GCN weight and the GRU."""
        self.lin.reset_parameters()
        if self.gru is not None:
            self.gru.reset_parameters()

    def spatial(self, ax: torch.Tensor, t: int, tparams: list[torch.Tensor] | None) -> torch.Tensor:
        """GCN (Kipf & Welling; IBM Eq. 2)."""
        return torch.relu(self.lin(ax))

    def rnn(self) -> nn.RNNBase | None:
        """The GRU after the last layer (the time encoder); None below it (identity along time)."""
        return self.gru


@register_model("tgcn")
def build_tgcn(in_features: int, hidden: int, layers: int) -> DGNN:
    """``layers`` GCN layers, the last followed by a GRU (:class:`TGCNLayer`; DGC §7.1 uses 2).

    Args:
        in_features: F, the width of the input X_t.
        hidden: H, the width of every layer's output.
        layers: L, the number of layers.

    Shapes:
        X_t (N, F) of each snapshot -> Z_t (N, H)."""
    dims = [in_features] + [hidden] * layers
    return DGNN([TGCNLayer(dims[i], dims[i + 1], recurrent=i == layers - 1) for i in range(layers)])
