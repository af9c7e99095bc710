r"""GConvGRU: the GRU whose gates are Chebyshev graph convolutions (Seo et al. 2018's GCRN with a GRU).

As PyG Temporal's ``GConvGRU`` computes it, K = ``model.order``:

.. math::
    Z_t &= \sigma(W_{xz} \star_{\mathcal G_t} X_t + W_{hz} \star_{\mathcal G_t} H_{t-1} + b_z) \\
    R_t &= \sigma(W_{xr} \star_{\mathcal G_t} X_t + W_{hr} \star_{\mathcal G_t} H_{t-1} + b_r) \\
    \tilde H_t &= \tanh(W_{xh} \star_{\mathcal G_t} X_t + W_{hh} \star_{\mathcal G_t} (H_{t-1} \odot R_t) + b_h) \\
    H_t &= Z_t \odot H_{t-1} + (1 - Z_t) \odot \tilde H_t,\qquad Z_t^{out} = H_t

with W ⋆_G X = Σ_{k<K} T_k(L̂_t) X Θ_k (PyG's ``ChebConv``). X_t's basis feeds all three gates in one GEMM;
H_{t-1}'s feeds Z and R; the candidate needs the basis of H_{t-1} ⊙ R_t. State: H (N, F'), None = zeros."""

from __future__ import annotations

import torch
from torch import nn

from hpcdgnn.nn.conv.cheb import cheb_basis, scaled_laplacian
from hpcdgnn.nn.models.base import DGNN, GraphCellOptions, GraphRecurrentLayer, register_model
from hpcdgnn.nn.models.gconv_lstm import glorot_blocks
from hpcdgnn.nn.reuse_cache import count_shared

__all__ = ["GConvGRULayer", "build_gconv_gru"]


class GConvGRULayer(GraphRecurrentLayer):
    """One GConvGRU cell F -> F'; ``w_x`` gate order (z, r, h), ``w_hzr``, ``w_hh`` over B = :attr:`basis_size` terms.

    Args:
        in_features: F, the width of X_t.
        out_features: F', the width of H_t.
        order: K, the Chebyshev order (``model.order``).

    Shapes:
        temporal X (T, n, F) with the T step graphs -> H (T, n, F'); state H (n, F'), None = zeros."""

    gates = 3

    def __init__(self, in_features: int, out_features: int, order: int) -> None:
        super().__init__()
        if order < 1:
            raise ValueError("order: K must be >= 1")
        self.in_features, self.out_features, self.order = in_features, out_features, order
        self.spatial_features = in_features
        H, B = out_features, self.basis_size
        self.w_x = nn.Parameter(torch.empty(B * in_features, 3 * H))
        self.w_hzr = nn.Parameter(torch.empty(B * H, 2 * H))
        self.w_hh = nn.Parameter(torch.empty(B * H, H))
        self.bias = nn.Parameter(torch.empty(3 * H))
        self.reset_parameters()

    @property
    def basis_size(self) -> int:
        """Blocks of the basis: K (T_0 … T_{K-1})."""
        return self.order

    def to_pygt(self) -> tuple[str, dict, dict[str, torch.Tensor]]:
        """PyG Temporal's ``GConvGRU`` with this cell's weights: (class name, constructor kwargs, state_dict).

        Gate g of (z, r, h): ``conv_x_g.lins.k`` = rows k of ``w_x``'s block g, transposed; ``conv_h_{z,r}`` from
        ``w_hzr``, ``conv_h_h`` from ``w_hh``; the gate's bias on ``conv_x_g``. Equal outputs (1e-12 in float64)
        where every A_t is symmetric: PyG's ChebConv takes degrees on the sending side."""
        F, H, K = self.in_features, self.out_features, self.order
        out = {}
        for g, n in enumerate("zrh"):
            for k in range(K):
                out[f"conv_x_{n}.lins.{k}.weight"] = self.w_x[k * F : (k + 1) * F, g * H : (g + 1) * H].T
                wh = self.w_hzr[k * H : (k + 1) * H, g * H : (g + 1) * H] if g < 2 else self.w_hh[k * H : (k + 1) * H]
                out[f"conv_h_{n}.lins.{k}.weight"] = wh.T
            out[f"conv_x_{n}.bias"] = self.bias[g * H : (g + 1) * H]
            out[f"conv_h_{n}.bias"] = self.bias.new_zeros(H)
        kwargs = {"in_channels": F, "out_channels": H, "K": K, "normalization": "sym", "bias": True}
        return "GConvGRU", kwargs, {k: v.detach().clone() for k, v in out.items()}

    def reset_parameters(self) -> None:
        """Glorot filters (PyG's init of each convolution weight), zero bias."""
        H = self.out_features
        glorot_blocks(self.w_x, self.in_features, H)
        glorot_blocks(self.w_hzr, H, H)
        glorot_blocks(self.w_hh, H, H)
        nn.init.zeros_(self.bias)

    def build_operator(self, graph, dtype):
        """(L̂_t,): the scaled Laplacian of the step."""
        return (scaled_laplacian(graph.t, graph.indptr, graph.indices, graph.values, dtype),)

    def basis(self, op, x):
        """[T_0 x | … | T_{K-1} x]."""
        return cheb_basis(op[0], x, self.order)

    def receptive_hops(self):
        """(2(K - 1), 2(K - 1)): the candidate convolves H_{t-1} ⊙ R_t, and R_t convolves X_t and H_{t-1}."""
        k = self.order - 1
        return 2 * k, 2 * k

    def step(self, gx, op, state):
        """One GRU step: Z and R from one basis of H_{t-1}, the candidate from the basis of H_{t-1} ⊙ R_t."""
        H = self.out_features
        gzr, gh = gx[:, : 2 * H], gx[:, 2 * H :]
        if state is None:
            h = (1 - torch.sigmoid(gzr[:, :H])) * torch.tanh(gh)
            return h, h
        h = state
        z, r = torch.sigmoid(torch.addmm(gzr, self.basis(op, h), self.w_hzr)).split(H, dim=-1)
        cand = torch.tanh(torch.addmm(gh, self.basis(op, h * r), self.w_hh))
        # ReInc §3.3.2: the aggregation of H_{t-1} is read by Z and R, that of R_t ⊙ H_{t-1} by the candidate
        count_shared(self, op, 2)
        count_shared(self, op, 1, "gated")
        h = z * h + (1 - z) * cand
        return h, h


@register_model("gconv_gru", step_graphs=True, options=GraphCellOptions)
def build_gconv_gru(in_features: int, hidden: int, layers: int, order: int = 2) -> DGNN:
    """``layers`` stacked GConvGRU cells (F -> H -> … -> H; Seo et al. 2018, as PyG Temporal's ``GConvGRU``).

    Args:
        in_features: F, the width of the input X_t.
        hidden: H, the width of every layer's output.
        layers: L, the number of layers.
        order: K, the Chebyshev order.

    Shapes:
        X_t (N, F) of each snapshot -> Z_t (N, H)."""
    dims = [in_features] + [hidden] * layers
    return DGNN([GConvGRULayer(dims[i], dims[i + 1], order) for i in range(layers)])
