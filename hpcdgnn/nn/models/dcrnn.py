r"""DCRNN's cell (Li et al. 2018, Eq. 2-3): the GRU whose gates are bidirectional diffusion convolutions.

.. math::
    R_t &= \sigma(\Theta_r \star_{\mathcal G_t} [X_t, H_{t-1}] + b_r) \\
    U_t &= \sigma(\Theta_u \star_{\mathcal G_t} [X_t, H_{t-1}] + b_u) \\
    C_t &= \tanh(\Theta_c \star_{\mathcal G_t} [X_t, R_t \odot H_{t-1}] + b_c) \\
    H_t &= U_t \odot H_{t-1} + (1 - U_t) \odot C_t

with Θ ⋆_G x = Σ_{k<K} (P_f^k x Θ_{f,k} + P_b^k x Θ_{b,k}), P_f = D_O^{-1} A_t, P_b = D_I^{-1} A_tᵀ, K =
``model.order`` (:mod:`hpcdgnn.nn.conv.diffusion`), on :class:`GConvGRULayer`'s recurrence. State: H (N, F')."""

from __future__ import annotations

from hpcdgnn.nn.conv.diffusion import diffusion_basis, transitions
from hpcdgnn.nn.models.base import DGNN, GraphCellOptions, register_model
from hpcdgnn.nn.models.gconv_gru import GConvGRULayer

__all__ = ["DCRNNLayer", "build_dcrnn"]


class DCRNNLayer(GConvGRULayer):
    """One DCRNN cell F -> F' with K terms per diffusion direction (basis of 2K - 1 blocks; Li et al. 2018).

    Args:
        in_features: F, the width of X_t.
        out_features: F', the width of H_t.
        order: K, the diffusion terms per direction (``model.order``).

    Shapes:
        temporal X (T, n, F) with the T step graphs -> H (T, n, F'); state H (n, F'), None = zeros."""

    @property
    def basis_size(self) -> int:
        """Blocks of the basis: x, then K - 1 powers of each transition."""
        return 2 * self.order - 1

    def build_operator(self, graph, dtype):
        """(P_f, P_b) of the step."""
        return transitions(graph.t, graph.indptr, graph.indices, graph.values, dtype)

    def basis(self, op, x):
        """[x | P_f x | … | P_f^{K-1} x | P_b x | … | P_b^{K-1} x]."""
        return diffusion_basis(op, x, self.order)


@register_model("dcrnn", step_graphs=True, options=GraphCellOptions)
def build_dcrnn(in_features: int, hidden: int, layers: int, order: int = 2) -> DGNN:
    """``layers`` stacked DCRNN cells (F -> H -> … -> H): DCRNN's encoder (Li et al. 2018, §2.3).

    Args:
        in_features: F, the width of the input X_t.
        hidden: H, the width of every layer's output.
        layers: L, the number of layers.
        order: K, the diffusion terms per direction.

    Shapes:
        X_t (N, F) of each snapshot -> Z_t (N, H)."""
    dims = [in_features] + [hidden] * layers
    return DGNN([DCRNNLayer(dims[i], dims[i + 1], order) for i in range(layers)])
