r"""T-GCN (Zhao et al. 2019, Eq. 3-6; PyG Temporal's ``TGCN``): a GCN inside the GRU's gates.

.. math::
    U_t &= \sigma(\tilde A_t X_t W_{xu} + H_{t-1} W_{hu} + b_u) \\
    R_t &= \sigma(\tilde A_t X_t W_{xr} + H_{t-1} W_{hr} + b_r) \\
    C_t &= \tanh(\tilde A_t X_t W_{xc} + (R_t \odot H_{t-1}) W_{hc} + b_c) \\
    H_t &= U_t \odot H_{t-1} + (1 - U_t) \odot C_t,\qquad Z_t = H_t

with Ã_t of IBM Eq. 1. PyGT's GCN weight times its linear's left half is one matrix W_x here. Only X_t is
convolved, so the recurrence is vertex-local and runs under every strategy. Not DGC §7.1's ``tgcn``."""

from __future__ import annotations

import math

import torch
from torch import nn

from hpcdgnn.nn.models.base import DGNN, DynamicLayer, register_model

__all__ = ["TGCNCellLayer", "build_tgcn_cell"]


class TGCNCellLayer(DynamicLayer):
    """One T-GCN cell F -> F' (Zhao et al. 2019, Eq. 3-6); ``w_x`` (F, 3F'), ``w_h`` (F', 3F'), gates (u, r, c).

    Args:
        in_features: F, the width of X_t.
        out_features: F', the width of H_t.

    Shapes:
        spatial ``ax`` = Ã_t X_t (n, F) -> (n, 3F'); temporal (T, n, 3F') -> H (T, n, F'); state H (n, F') or None."""

    def __init__(self, in_features: int, out_features: int) -> None:
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        self.spatial_features = 3 * out_features
        H = out_features
        self.w_x = nn.Parameter(torch.empty(in_features, 3 * H))
        self.bias = nn.Parameter(torch.empty(3 * H))
        self.w_h = nn.Parameter(torch.empty(H, 3 * H))
        self.reset_parameters()

    def to_pygt(self) -> tuple[str, dict, dict[str, torch.Tensor]]:
        """PyG Temporal's ``TGCN`` with this cell's weights: (class name, constructor kwargs, state_dict).

        Gate g of PyGT's (z, r, h) = ours (u, r, c): ``conv_g.lin`` = ``w_x``'s block g transposed (bias zero),
        ``linear_g`` = [I ‖ block g of ``w_h``ᵀ] with the gate's bias. Equal outputs (1e-12 in float64) on any graph
        given edges without self-loops (PyG keeps an input self-loop's weight instead of adding 1)."""
        F, H = self.in_features, self.out_features
        out = {}
        eye = torch.eye(H, dtype=self.w_h.dtype, device=self.w_h.device)
        for g, n in enumerate("zrh"):
            out[f"conv_{n}.lin.weight"] = self.w_x[:, g * H : (g + 1) * H].T
            out[f"conv_{n}.bias"] = self.bias.new_zeros(H)
            out[f"linear_{n}.weight"] = torch.cat([eye, self.w_h[:, g * H : (g + 1) * H].T], dim=1)
            out[f"linear_{n}.bias"] = self.bias[g * H : (g + 1) * H]
        kwargs = {"in_channels": F, "out_channels": H, "improved": False, "cached": False, "add_self_loops": True}
        return "TGCN", kwargs, {k: v.detach().clone() for k, v in out.items()}

    def reset_parameters(self) -> None:
        """Glorot for the GCN part (PyG's GCNConv init), torch Linear's bounds for the state part and bias."""
        H = self.out_features
        a = math.sqrt(6.0 / (self.in_features + H))
        b = 1.0 / math.sqrt(2 * H)
        with torch.no_grad():
            self.w_x.uniform_(-a, a)
            self.w_h.uniform_(-b, b)
            self.bias.uniform_(-b, b)

    def spatial(self, ax: torch.Tensor, t: int, tparams) -> torch.Tensor:
        """The input's part of the three gates: Ã_t X_t W_x + b (one GEMM)."""
        return torch.addmm(self.bias, ax, self.w_x)

    def step(self, gx: torch.Tensor, h: torch.Tensor | None) -> torch.Tensor:
        """One step from the input's gate pre-activations ``gx`` (n, 3F') and H_{t-1} (None = zeros)."""
        H = self.out_features
        if h is None:
            return (1 - torch.sigmoid(gx[:, :H])) * torch.tanh(gx[:, 2 * H :])
        u, r = torch.sigmoid(torch.addmm(gx[:, : 2 * H], h, self.w_h[:, : 2 * H])).split(H, dim=-1)
        c = torch.tanh(torch.addmm(gx[:, 2 * H :], h * r, self.w_h[:, 2 * H :]))
        return u * h + (1 - u) * c

    def temporal(self, y: torch.Tensor, state=None):
        """The recurrence along each vertex's timeline: (T, n, 3F') -> ((T, n, F'), H_T)."""
        if y.shape[0] == 0 or y.shape[1] == 0:
            return y.new_zeros(y.shape[0], y.shape[1], self.out_features) + y.sum() * 0.0, state
        outs = []
        for gx in y.unbind(0):
            state = self.step(gx, state)
            outs.append(state)
        return torch.stack(outs), state

    def cell(self, ax: torch.Tensor, state=None):
        """Single-step API: Ã_t X_t (n, F) and H_{t-1} -> (H_t, H_t)."""
        h = self.step(self.spatial(ax, -1, None), state)
        return h, h


@register_model("tgcn_cell")
def build_tgcn_cell(in_features: int, hidden: int, layers: int) -> DGNN:
    """``layers`` stacked T-GCN cells (F -> H -> … -> H; :class:`TGCNCellLayer`).

    Args:
        in_features: F, the width of the input X_t.
        hidden: H, the width of every layer's output.
        layers: L, the number of layers.

    Shapes:
        X_t (N, F) of each snapshot -> Z_t (N, H)."""
    dims = [in_features] + [hidden] * layers
    return DGNN([TGCNCellLayer(dims[i], dims[i + 1]) for i in range(layers)])
