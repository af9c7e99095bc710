"""TM-GCN: GCN followed by the parameter-free M-transform along time (IBM §5.3; Malik et al. 2021)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from hpcdgnn.nn.models.base import DGNN, DynamicLayer, GraphModelOptions, register_model

__all__ = ["TMGCNLayer", "TMGCNOptions", "build_tmgcn", "m_transform"]


class _MTransform(torch.autograd.Function):
    """Windowed mean along dim 0 over ``history`` then ``y``: w shifted adds in a fixed order (same bits per vertex)."""

    @staticmethod
    def forward(ctx, y, history, window, count):  # noqa: D102
        T, off = y.shape[0], history.shape[0]
        ctx.off, ctx.window, ctx.history_shape = off, window, history.shape
        ctx.save_for_backward(count)
        out = _first_terms(y, history, window)
        for k in range(2, window):
            lo = max(0, k - off)
            if lo >= T:
                break
            mid = min(k, T)
            if mid > lo:
                out[lo:mid] += history[off + lo - k : off + mid - k]
            if T > mid:
                out[mid:] += y[: T - k]
        out /= count
        return out

    @staticmethod
    def backward(ctx, grad):  # noqa: D102
        (count,) = ctx.saved_tensors
        T, off = grad.shape[0], ctx.off
        g = grad / count
        # y's gradient starts as g plus its k = 1 term in its own buffer: the shifted adds below read g
        gy = torch.empty_like(g)
        if ctx.window > 1 and T > 1:
            torch.add(g[: T - 1], g[1:], out=gy[: T - 1])
            gy[T - 1 :] = g[T - 1 :]
        else:
            gy.copy_(g)
        gh = g.new_zeros(ctx.history_shape) if ctx.needs_input_grad[1] else None
        for k in range(1, ctx.window):
            lo = max(0, k - off)
            if lo >= T:
                break
            mid = min(k, T)
            if mid > lo and gh is not None:
                gh[off + lo - k : off + mid - k] += g[lo:mid]
            if T > mid and k > 1:
                gy[: T - k] += g[mid:]
        return gy, gh, None, None


def _first_terms(y: torch.Tensor, history: torch.Tensor, window: int) -> torch.Tensor:
    """The M-transform's k = 0 and k = 1 terms as ``y + predecessor`` in one pass into a new buffer."""
    T, off = y.shape[0], history.shape[0]
    out = torch.empty_like(y)
    if window < 2 or T == 0:
        return out.copy_(y)
    lo = max(0, 1 - off)
    if lo:
        out[:1] = y[:1]
    else:
        torch.add(y[:1], history[off - 1 :], out=out[:1])
    torch.add(y[1:], y[: T - 1], out=out[1:])
    return out


def m_transform(y: torch.Tensor, window: int, history: torch.Tensor | None = None) -> torch.Tensor:
    """Y ×₁ M with M_tk = 1/min(w, t+1) for max(0, t-w+1) <= k <= t (IBM §5.3, 0-based t).

    Args:
        y: (T, n, F) sequence.
        window: w.
        history: (h, n, F) inputs just before ``y`` (h <= w-1), so a block of time
            continues a sequence (SPEC S2 passes the last w-1 activations).
    """
    T = y.shape[0]
    if history is None:
        history = y[:0]
    off = history.shape[0]
    pos = torch.arange(T, dtype=y.dtype, device=y.device) + off
    count = torch.clamp(pos + 1, max=window).view(T, *([1] * (y.dim() - 1)))
    return _MTransform.apply(y, history, window, count)


def window_tail(y: torch.Tensor, history: torch.Tensor | None, keep: int) -> torch.Tensor:
    """The last ``keep`` steps of ``history`` then ``y``, as a tensor of its own (a view would keep y alive)."""
    T = y.shape[0]
    if history is None or T >= keep:
        return y[max(0, T - keep) :].clone()
    return torch.cat([history[max(0, history.shape[0] - (keep - T)) :], y], dim=0)


class TMGCNLayer(DynamicLayer):
    r"""One TM-GCN layer: a GCN, then the M-transform along time (IBM §5.3).

    .. math::
        Y_t = \sigma(\tilde A_t X_t W + b),\qquad
        Z_t = \frac{1}{\min(w, t+1)} \sum_{k=\max(0, t-w+1)}^{t} Y_k   (IBM §5.3)

    Args:
        in_features: F, the width of X_t.
        out_features: F', the width of Y_t and Z_t.
        window: w, the M-transform's window.

    Shapes:
        spatial ``ax`` = Ã_t X_t (n, F) -> Y_t (n, F'); temporal (T, n, F') -> Z (T, n, F');
        state the last ``w-1`` inputs, (≤ w-1, n, F') (``temporal_reach = w - 1``)."""

    def __init__(self, in_features: int, out_features: int, window: int) -> None:
        super().__init__()
        self.in_features, self.out_features, self.window = in_features, out_features, window
        self.spatial_features = out_features
        self.temporal_reach = window - 1
        self.lin = nn.Linear(in_features, out_features)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Reset the GCN weight (the M-transform has no parameters)."""
        self.lin.reset_parameters()

    def spatial(self, ax: torch.Tensor, t: int, tparams: list[torch.Tensor] | None) -> torch.Tensor:
        """GCN (IBM Eq. 2)."""
        return torch.relu(self.lin(ax))

    def temporal(self, y: torch.Tensor, state: Any = None) -> tuple[torch.Tensor, Any]:
        """M-transform over the window; the state is the window's tail."""
        return m_transform(y, self.window, state), window_tail(y, state, self.window - 1)


@dataclass(frozen=True, kw_only=True)
class TMGCNOptions(GraphModelOptions):
    """``model: {name: tmgcn}`` options: the layers' M-transform window (IBM §5.3)."""

    window: int = 3
    """TM-GCN M-transform window w over layer outputs (IBM §5.3)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.window < 1:
            raise ValueError("window: must be >= 1")

    def model_args(self) -> dict[str, Any]:
        """``window``, w."""
        return {"window": self.window}


@register_model("tmgcn", options=TMGCNOptions)
def build_tmgcn(in_features: int, hidden: int, layers: int, window: int = 3) -> DGNN:
    """TM-GCN with ``layers`` GCN + M-transform pairs (:class:`TMGCNLayer`, IBM §5.3).

    Args:
        in_features: F, the width of the input X_t.
        hidden: H, the width of every layer's output.
        layers: L, the number of layers.
        window: w, the M-transform's window.

    Shapes:
        X_t (N, F) of each snapshot -> Z_t (N, H)."""
    dims = [in_features] + [hidden] * layers
    return DGNN([TMGCNLayer(dims[i], dims[i + 1], window) for i in range(layers)])
