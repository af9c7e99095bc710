"""EvolveGCN-O: an LSTM evolves the GCN weights over time (IBM §5.2; Pareja et al. 2020)."""

from __future__ import annotations

import math

import torch
from torch import nn

from hpcdgnn.nn.layout import relu_into
from hpcdgnn.nn.models.base import DGNN, DynamicLayer, StepParams, register_model
from hpcdgnn.ops.scan import self_fed_lstm

__all__ = ["EvolveGCNOLayer", "build_evolvegcn_o"]


class EvolveGCNOLayer(DynamicLayer):
    r"""One EvolveGCN-O layer: an LSTM evolves the GCN weight along time (IBM §5.2).

    .. math::
        (W_t, C_t) = \mathrm{LSTM}(W_{t-1}, (W_{t-1}, C_{t-1})),\qquad
        Y_t = \sigma(\tilde A_t X_t W_t)                 (IBM §5.2)

    The F rows of W are the LSTM's batch; W_0 is a parameter, C_0 = 0. The weights are recomputed every call
    (no autograd graph outlives its epoch) on every rank, so ``temporal_mixing = False`` (IBM §5.5).

    Args:
        in_features: F, the width of X_t (W_t is F x F').
        out_features: F', the width of Y_t.

    Shapes:
        spatial ``ax`` = Ã_t X_t (n, F) -> Y_t (n, F'); no temporal phase; weight state ``(W, C)``, each (F, F')."""

    temporal_mixing = False
    writes_out = True

    def __init__(self, in_features: int, out_features: int) -> None:
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        self.spatial_features = out_features
        self.w0 = nn.Parameter(torch.empty(in_features, out_features))
        self.cell = nn.LSTMCell(out_features, out_features)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Glorot-initialise W_0 and reset the LSTM cell."""
        bound = math.sqrt(6.0 / (self.in_features + self.out_features))
        with torch.no_grad():
            self.w0.uniform_(-bound, bound)
        self.cell.reset_parameters()

    def initial_time_state(self):
        """(W_0, C_0 = 0): the weight recurrence of a sequence that starts afresh (a ``sequences`` window)."""
        return self.w0, torch.zeros_like(self.w0)

    def time_params_block(self, start: int, stop: int, state=None):
        """W_t for start <= t < stop (W_t of snapshot t is the LSTM's (t+1)-th output) and the (W, C) state."""
        if state is None:
            if start != 0:
                raise ValueError("EvolveGCN-O: a block starting after t = 0 needs the carried (W, C) state")
            w, c = self.w0, torch.zeros_like(self.w0)
        else:
            w, c = state
        if stop <= start:
            return StepParams(start, w.new_empty(0, *w.shape)), (w, c)
        ws, (w, c) = self_fed_lstm(self.cell, w, c, stop - start)
        return StepParams(start, ws), (w, c)

    def spatial(self, ax: torch.Tensor, t: int, tparams) -> torch.Tensor:
        """GCN with the evolved weight W_t (``tparams[t]``, a list from 0 or a dict by step)."""
        return torch.relu(ax @ tparams[t])

    def spatial_steps(self, ax: torch.Tensor, steps: list[int], tparams,
                      out: torch.Tensor | None = None) -> torch.Tensor:
        """All steps' GCNs as one batched product (S, n, F) x (S, F, F'), into ``out`` when given."""
        ws = tparams.stack(steps) if isinstance(tparams, StepParams) else torch.stack([tparams[t] for t in steps])
        if out is None:
            return torch.bmm(ax, ws).relu_()  # in place: bmm's backward needs its inputs, not its output
        if torch.is_grad_enabled() and (ax.requires_grad or ws.requires_grad):
            return relu_into(torch.bmm(ax, ws), out)
        return torch.bmm(ax, ws, out=out).relu_()


@register_model("evolvegcn_o")
def build_evolvegcn_o(in_features: int, hidden: int, layers: int) -> DGNN:
    """EvolveGCN-O with ``layers`` evolving GCN layers (:class:`EvolveGCNOLayer`, IBM §5.2).

    Args:
        in_features: F, the width of the input X_t.
        hidden: H, the width of every layer's output.
        layers: L, the number of layers.

    Shapes:
        X_t (N, F) of each snapshot -> Z_t (N, H)."""
    dims = [in_features] + [hidden] * layers
    return DGNN([EvolveGCNOLayer(dims[i], dims[i + 1]) for i in range(layers)])
