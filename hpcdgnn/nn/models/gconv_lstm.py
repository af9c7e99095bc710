r"""GConvLSTM: GCRN model 2 (Seo et al. 2018), the LSTM whose gates are Chebyshev graph convolutions.

As PyG Temporal's ``GConvLSTM`` computes it, K = ``model.order``:

.. math::
    i_t &= \sigma(W_{xi} \star_t X_t + W_{hi} \star_t H_{t-1} + w_{ci} \odot C_{t-1} + b_i) \\
    f_t &= \sigma(W_{xf} \star_t X_t + W_{hf} \star_t H_{t-1} + w_{cf} \odot C_{t-1} + b_f) \\
    C_t &= f_t \odot C_{t-1} + i_t \odot \tanh(W_{xc} \star_t X_t + W_{hc} \star_t H_{t-1} + b_c) \\
    o_t &= \sigma(W_{xo} \star_t X_t + W_{ho} \star_t H_{t-1} + w_{co} \odot C_t + b_o) \\
    H_t &= o_t \odot \tanh(C_t),\qquad Z_t = H_t

where W ⋆_t X = Σ_{k<K} T_k(L̂_t) X Θ_k over G_t is PyG's ``ChebConv`` (:mod:`hpcdgnn.nn.conv.cheb`). The basis of
X_t is computed once for all steps and that of H_{t-1} once per step, each feeding all four gates through
one GEMM; PyGT's three biases per gate are one (their sum). State: (H, C), each (N, F'), None = zeros."""

from __future__ import annotations

import math

import torch
from torch import nn

from hpcdgnn.nn.conv.cheb import cheb_basis, scaled_laplacian
from hpcdgnn.nn.models.base import DGNN, GraphCellOptions, GraphRecurrentLayer, register_model
from hpcdgnn.nn.reuse_cache import count_shared

__all__ = ["GConvLSTMLayer", "build_gconv_lstm"]


def glorot_blocks(w: torch.Tensor, fan_in: int, fan_out: int) -> None:
    """Glorot-uniform with the fans of one filter block (F -> F'), as PyG initialises each ChebConv weight."""
    a = math.sqrt(6.0 / (fan_in + fan_out))
    with torch.no_grad():
        w.uniform_(-a, a)


class GConvLSTMLayer(GraphRecurrentLayer):
    """One GConvLSTM cell F -> F' with Chebyshev order K; ``w_x``, ``w_h`` gate order (i, f, c, o), peepholes ``w_c``.

    Args:
        in_features: F, the width of X_t.
        out_features: F', the width of H_t and C_t.
        order: K, the Chebyshev order (``model.order``).

    Shapes:
        temporal X (T, n, F) with the T step graphs -> H (T, n, F'); state (H, C), each (n, F'), None = zeros."""

    gates = 4

    def __init__(self, in_features: int, out_features: int, order: int) -> None:
        super().__init__()
        if order < 1:
            raise ValueError("order: the Chebyshev order K must be >= 1")
        self.in_features, self.out_features, self.order = in_features, out_features, order
        self.spatial_features = in_features
        H = out_features
        self.w_x = nn.Parameter(torch.empty(order * in_features, 4 * H))
        self.w_h = nn.Parameter(torch.empty(order * H, 4 * H))
        self.bias = nn.Parameter(torch.empty(4 * H))
        self.w_c = nn.Parameter(torch.empty(3, H))
        self.reset_parameters()

    def to_pygt(self) -> tuple[str, dict, dict[str, torch.Tensor]]:
        """PyG Temporal's ``GConvLSTM`` with this cell's weights: (class name, constructor kwargs, state_dict).

        Gate g of (i, f, c, o): ``conv_x_g.lins.k`` = rows k of ``w_x``'s block g, transposed (likewise ``w_h``);
        the gate's bias in ``b_g`` (the convolutions' own biases zero); peepholes ``w_c_{i,f,o}``. Equal outputs
        (1e-12 in float64) where every A_t is symmetric: PyG's ChebConv takes degrees on the sending side."""
        F, H, K = self.in_features, self.out_features, self.order
        out = {}
        for g, n in enumerate("ifco"):
            for k in range(K):
                out[f"conv_x_{n}.lins.{k}.weight"] = self.w_x[k * F : (k + 1) * F, g * H : (g + 1) * H].T
                out[f"conv_h_{n}.lins.{k}.weight"] = self.w_h[k * H : (k + 1) * H, g * H : (g + 1) * H].T
            out[f"conv_x_{n}.bias"] = out[f"conv_h_{n}.bias"] = self.bias.new_zeros(H)
            out[f"b_{n}"] = self.bias[g * H : (g + 1) * H].reshape(1, H)
        for j, n in enumerate("ifo"):
            out[f"w_c_{n}"] = self.w_c[j : j + 1]
        kwargs = {"in_channels": F, "out_channels": H, "K": K, "normalization": "sym", "bias": True}
        return "GConvLSTM", kwargs, {k: v.detach().clone() for k, v in out.items()}

    def reset_parameters(self) -> None:
        """Glorot filters and peepholes (PyGT's init), zero bias."""
        H = self.out_features
        glorot_blocks(self.w_x, self.in_features, H)
        glorot_blocks(self.w_h, H, H)
        glorot_blocks(self.w_c, 1, H)
        nn.init.zeros_(self.bias)

    def build_operator(self, graph, dtype):
        """(L̂_t,): the scaled Laplacian of the step."""
        return (scaled_laplacian(graph.t, graph.indptr, graph.indices, graph.values, dtype),)

    def basis(self, op, x):
        """[T_0 x | … | T_{K-1} x]."""
        return cheb_basis(op[0], x, self.order)

    def receptive_hops(self):
        """(K - 1, K - 1): T_{K-1}(L̂_t) reaches K - 1 hops of X_t and of H_{t-1}; C_{t-1} is read in place."""
        return self.order - 1, self.order - 1

    def step(self, gx, op, state):
        """One LSTM step with peepholes; the basis of H_{t-1} is computed once for the four gates."""
        H = self.out_features
        if state is None:  # H = C = 0: no hidden-state term (adding exact zeros changes nothing)
            g, c = gx, gx.new_zeros(gx.shape[0], H)
        else:
            h, c = state
            g = torch.addmm(gx, self.basis(op, h), self.w_h)
            count_shared(self, op, self.gates)
        gi, gf, gc, go = g.split(H, dim=-1)
        i = torch.sigmoid(gi + self.w_c[0] * c)
        f = torch.sigmoid(gf + self.w_c[1] * c)
        c = f * c + i * torch.tanh(gc)
        o = torch.sigmoid(go + self.w_c[2] * c)
        h = o * torch.tanh(c)
        return h, (h, c)


@register_model("gconv_lstm", step_graphs=True, options=GraphCellOptions)
def build_gconv_lstm(in_features: int, hidden: int, layers: int, order: int = 2) -> DGNN:
    """``layers`` stacked GConvLSTM cells (F -> H -> … -> H; Seo et al. 2018, GCRN model 2).

    Args:
        in_features: F, the width of the input X_t.
        hidden: H, the width of every layer's output.
        layers: L, the number of layers.
        order: K, the Chebyshev order.

    Shapes:
        X_t (N, F) of each snapshot -> Z_t (N, H)."""
    dims = [in_features] + [hidden] * layers
    return DGNN([GConvLSTMLayer(dims[i], dims[i + 1], order) for i in range(layers)])
