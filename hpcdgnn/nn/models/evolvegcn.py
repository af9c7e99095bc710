"""EvolveGCN-O and -H: an RNN evolves the GCN weights over time (IBM §5.2; Pareja et al. 2020, §3.2–3.3)."""

from __future__ import annotations

import math

import torch
from torch import nn

from hpcdgnn.nn.layout import relu_into
from hpcdgnn.nn.models.base import DGNN, DynamicLayer, StepParams, register_model
from hpcdgnn.ops.scan import self_fed_lstm

__all__ = ["EvolveGCNHLayer", "EvolveGCNOLayer", "build_evolvegcn_h", "build_evolvegcn_o"]


class _EvolvingGCN(DynamicLayer):
    """A GCN whose weight W_t is per step: Y_t = σ(Ã_t X_t W_t) (IBM §5.2); subclasses evolve W_t."""

    temporal_mixing = False
    writes_out = True

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


class EvolveGCNOLayer(_EvolvingGCN):
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


class EvolveGCNHLayer(_EvolvingGCN):
    r"""One EvolveGCN-H layer: a GRU evolves the GCN weight, fed each step's top-k summary of the layer input.

    .. math::
        y_t = H_t p / \lVert p\rVert,\quad Z_t = [H_t \circ \tanh(y_t)]_{\mathrm{top}_k(y_t)},\quad
        W_t^\top = \mathrm{GRU}(Z_t, W_{t-1}^\top),\quad Y_t = \sigma(\tilde A_t H_t W_t)
        \qquad \text{(EvolveGCN §3.3; IBM §5.2)}

    k = F' (the columns of W_t: the EvolveGCN paper's ``summarize(H_t, #col(W))``), so the k summary rows are
    the GRU's batch and W_t's F rows its features; the top-k runs over every vertex of the snapshot, held by
    any rank (:func:`~hpcdgnn.nn.pool.topk_pool`). The GRU is torch's (reset gate after the hidden product,
    per-feature biases), not the paper's matrix GRU with (F, F') biases. Every vertex is a candidate at every
    step (the paper masks vertices absent from G_t); ties go to the lower vertex id. W_0 is a parameter.

    Args:
        in_features: F, the width of H_t (W_t is F x F').
        out_features: F', the width of Y_t and the summary's row count k.

    Shapes:
        spatial ``ax`` = Ã_t H_t (n, F) -> Y_t (n, F'); summaries (S, F', F) -> W_t (S, F, F'); state W_t^T (F', F)."""

    precomputable = False  # the summary reads H_t itself, not Ã_t·H_t

    def __init__(self, in_features: int, out_features: int) -> None:
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        self.spatial_features = out_features
        self.pool_rows = out_features
        self.w0 = nn.Parameter(torch.empty(in_features, out_features))
        self.scorer = nn.Parameter(torch.empty(in_features))
        self.gru = nn.GRU(in_features, in_features)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Glorot-initialise W_0, draw p uniform in ±1/√F (EvolveGCN's TopK), reset the GRU."""
        bound = math.sqrt(6.0 / (self.in_features + self.out_features))
        with torch.no_grad():
            self.w0.uniform_(-bound, bound)
            self.scorer.uniform_(-1.0 / math.sqrt(self.in_features), 1.0 / math.sqrt(self.in_features))
        self.gru.reset_parameters()

    def pool_scores(self, x: torch.Tensor) -> torch.Tensor:
        """Scores y = H p / ||p||, (n, F) -> (n,)."""
        return (x @ self.scorer) / self.scorer.norm()

    def initial_time_state(self):
        """W_0ᵀ: the weight recurrence of a sequence that starts afresh."""
        return self.w0.t()

    def time_params_block(self, start: int, stop: int, state=None, pooled: torch.Tensor | None = None):
        """W_t for start <= t < stop from the steps' summaries ``pooled`` (stop - start, F', F), and W_{stop-1}ᵀ."""
        if state is None:
            if start != 0:
                raise ValueError("EvolveGCN-H: a block starting after t = 0 needs the carried W state")
            state = self.w0.t()
        if stop <= start:
            return StepParams(start, state.new_empty(0, *state.t().shape)), state
        if pooled is None or pooled.shape[0] != stop - start:
            raise ValueError(f"EvolveGCN-H: W_t of steps {start}..{stop - 1} need their {stop - start} summaries")
        # the summaries are known before the recurrence starts: one torch GRU over all steps
        out, last = self.gru(pooled, state.unsqueeze(0).contiguous())
        return StepParams(start, out.transpose(1, 2)), last[0]


@register_model("evolvegcn_h")
def build_evolvegcn_h(in_features: int, hidden: int, layers: int) -> DGNN:
    """EvolveGCN-H with ``layers`` evolving GCN layers (:class:`EvolveGCNHLayer`, EvolveGCN §3.3).

    Args:
        in_features: F, the width of the input X_t.
        hidden: H, the width of every layer's output (and each layer's summary rows k).
        layers: L, the number of layers.

    Shapes:
        X_t (N, F) of each snapshot -> Z_t (N, H)."""
    dims = [in_features] + [hidden] * layers
    return DGNN([EvolveGCNHLayer(dims[i], dims[i + 1]) for i in range(layers)])
