r"""GCRN model 1 (Seo et al. 2018, Eq. 7): a Chebyshev graph convolution of X_t stacked under an LSTM.

.. math::
    X^{G}_t = \sum_{k<K} T_k(\hat L_t) X_t \Theta_k + b,\qquad
    (H_t, C_t) = \mathrm{LSTM}(X^{G}_t, (H_{t-1}, C_{t-1})),\qquad Z_t = H_t

K = ``model.order``; the LSTM is torch's, per vertex. L̂_t is not the spatial phase's Ã, so the layer
takes the step graphs like the integrated cells. State: torch's (h, c), each (1, N, F')."""

from __future__ import annotations

import torch
from torch import nn

from hpcdgnn.nn.conv.cheb import cheb_basis, scaled_laplacian
from hpcdgnn.nn.models.base import DGNN, GraphCellOptions, GraphRecurrentLayer, register_model, run_rnn
from hpcdgnn.nn.models.gconv_lstm import glorot_blocks

__all__ = ["GCRNM1Layer", "build_gcrn_m1"]


class GCRNM1Layer(GraphRecurrentLayer):
    """ChebConv F -> F' (``w_x`` (K·F, F'), ``bias``) then ``nn.LSTM(F', F')`` (Seo et al. 2018, Eq. 7).

    Args:
        in_features: F, the width of X_t.
        out_features: F', the width of X^G_t and H_t.
        order: K, the Chebyshev order (``model.order``).

    Shapes:
        temporal X (T, n, F) with the T step graphs -> H (T, n, F'); state torch's (h, c), each (1, n, F')."""

    gates = 1

    def __init__(self, in_features: int, out_features: int, order: int) -> None:
        super().__init__()
        if order < 1:
            raise ValueError("order: the Chebyshev order K must be >= 1")
        self.in_features, self.out_features, self.order = in_features, out_features, order
        self.spatial_features = in_features
        self.w_x = nn.Parameter(torch.empty(order * in_features, out_features))
        self.bias = nn.Parameter(torch.empty(out_features))
        self.lstm = nn.LSTM(out_features, out_features)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Glorot filter, zero bias (PyG's ChebConv init), torch's LSTM init."""
        glorot_blocks(self.w_x, self.in_features, self.out_features)
        nn.init.zeros_(self.bias)
        self.lstm.reset_parameters()

    def build_operator(self, graph, dtype):
        """(L̂_t,): the scaled Laplacian of the step."""
        return (scaled_laplacian(graph.t, graph.indptr, graph.indices, graph.values, dtype),)

    def basis(self, op, x):
        """[T_0 x | … | T_{K-1} x]."""
        return cheb_basis(op[0], x, self.order)

    def receptive_hops(self):
        """(K - 1, 0): only X_t is convolved; the LSTM reads each vertex's own state."""
        return self.order - 1, 0

    def scan(self, gx, graphs, state):
        """The LSTM over the convolved inputs of the block (one torch module call)."""
        return run_rnn(self.lstm, gx, state, self.out_features)


@register_model("gcrn_m1", step_graphs=True, options=GraphCellOptions)
def build_gcrn_m1(in_features: int, hidden: int, layers: int, order: int = 2) -> DGNN:
    """``layers`` stacked (ChebConv, LSTM) pairs (F -> H -> … -> H; GCRN model 1, Seo et al. 2018).

    Args:
        in_features: F, the width of the input X_t.
        hidden: H, the width of every layer's output.
        layers: L, the number of layers.
        order: K, the Chebyshev order.

    Shapes:
        X_t (N, F) of each snapshot -> Z_t (N, H)."""
    dims = [in_features] + [hidden] * layers
    return DGNN([GCRNM1Layer(dims[i], dims[i + 1], order) for i in range(layers)])
