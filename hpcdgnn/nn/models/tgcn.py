"""T-GCN as DGC §7.1 trains it: a stack of GCN layers (the structure encoder) and a GRU (the time encoder).

DGC §7.1: "T-GCN utilizes ... 2-layer GCN as the structure encoder, and a 1-layer
GRU model as the temporal encoder" (Zhao et al. 2019 put graph convolutions
inside the GRU's gates; DGC's, and this, variant applies them before it, so the
recurrence stays per vertex and every exact strategy applies). ``model.layers``
counts the GCN layers; the GRU follows the last one.
"""

from __future__ import annotations

import torch
from torch import nn

from hpcdgnn.nn.models.base import DGNN, DynamicLayer, register_model

__all__ = ["TGCNLayer", "build_tgcn"]


class TGCNLayer(DynamicLayer):
    """One GCN layer ``Y_t = relu(Ã_t X_t W + b)``, followed by a GRU along time when ``recurrent``:
    ``h_t = GRU(Y_t, h_{t-1})``, ``Z_t = h_t`` (DGC §7.1); else ``Z_t = Y_t``.

    Args:
        in_features: F, the width of X_t.
        out_features: F', the width of Y_t and Z_t.
        recurrent: whether the GRU follows (the last layer).

    Shapes:
        spatial ``ax`` = Ã_t X_t (n, F) -> Y_t (n, F'); temporal (T, n, F') -> Z (T, n, F');
        state the GRU's ``h`` (1, n, F'); none without the GRU.
    """

    def __init__(self, in_features: int, out_features: int, recurrent: bool) -> None:
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        self.spatial_features = out_features
        self.temporal_mixing = recurrent  # only the last layer moves data to vertex owners
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
        X_t (N, F) of each snapshot -> Z_t = Z^(L)_t (N, H), Z^(l) = TGCNLayer(Z^(l-1)), Z^(0) = X
        (:meth:`~hpcdgnn.nn.models.base.DGNN.forward`'s ``{t: Z_t}``; n rows where a strategy holds n).
    """
    dims = [in_features] + [hidden] * layers
    return DGNN([TGCNLayer(dims[i], dims[i + 1], recurrent=i == layers - 1) for i in range(layers)])
