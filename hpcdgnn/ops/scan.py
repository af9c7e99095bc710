"""LSTM and GRU over a whole sequence as one autograd node, with the input projection hoisted.

For recurrences torch has no fused kernel for (EvolveGCN-O's self-fed ``LSTMCell``, DGC's masked packed
lanes, DGC Eq. 4–5): the input projection of all T steps is one batched GEMM and the recurrence one
:class:`torch.autograd.Function` with hand-written BPTT. Gates follow torch's order and layout and use the
module's own parameters, so outputs equal ``nn.LSTM`` / ``nn.GRU`` to rounding and checkpoints are unchanged."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from hpcdgnn.ops import kernels

__all__ = ["lstm_scan", "gru_scan", "run_torch_rnn", "self_fed_lstm", "supports"]


def _project_into(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``W x_t + b`` of all steps as one batched GEMM, feature-major: (T, B, I) -> a new (T, G, B)."""
    T, B, _ = x.shape
    return torch.baddbmm(b.unsqueeze(1).expand(T, -1, B), w.expand(T, -1, -1), x.transpose(1, 2))


def _input_grads(dgx: torch.Tensor, x: torch.Tensor, w_ih: torch.Tensor, need_x: bool):
    """Adjoint of :func:`_project_into`: dX (T, B, I), dW_ih, db from the pre-activation gradient (T, G, B)."""
    T = dgx.shape[0]
    dx = torch.bmm(dgx.transpose(1, 2), w_ih.expand(T, -1, -1)) if need_x else None
    return dx, torch.bmm(dgx, x).sum(0), dgx.sum((0, 2))


class _LSTMLayer(torch.autograd.Function):
    """LSTM layer over x (T, B, I), feature-major so each gate is a contiguous (H, B) block; ``x`` None: no input."""

    @staticmethod
    def forward(ctx, x, w_ih, b, h0, c0, w_hh, mask, steps):  # noqa: D102
        H, B = h0.shape
        if x is None:
            gates = b.unsqueeze(1).expand(steps, -1, B).clone()
        else:
            gates = _project_into(x, w_ih, b)
        T = gates.shape[0]
        # small B, long T: one compiled pass instead of ~7 kernels a step
        ctx.compiled = kernels.lstm_available(gates)
        steps_of = kernels.lstm_forward if ctx.compiled else _LSTMLayer._steps
        hs, cs, hin, cin, tc = steps_of(gates, w_hh, h0, c0, mask)
        ctx.save_for_backward(x, w_ih, gates, hin, cin, tc, w_hh, mask)
        return hs[1:], hs[T].clone(), cs[T].clone()

    @staticmethod
    def _steps(gates, w_hh, h0, c0, mask):
        """The recurrence in torch (as ``kernels.lstm_forward``): returns hs, cs (T+1, H, B), hin, cin, tc."""
        T, G, B = gates.shape
        H = G // 4
        # output t at hs[t+1]; the state entering step t at hs[t] (times the reset mask at hin[t])
        hs, cs = gates.new_empty(T + 1, H, B), gates.new_empty(T + 1, H, B)
        hin, cin = (hs, cs) if mask is None else (gates.new_empty(T, H, B), gates.new_empty(T, H, B))
        tc = gates.new_empty(T, H, B)
        hs[0].copy_(h0)
        cs[0].copy_(c0)
        for t in range(T):
            if mask is not None:
                torch.mul(hs[t], mask[t], out=hin[t])
                torch.mul(cs[t], mask[t], out=cin[t])
            g = gates[t].addmm_(w_hh, hin[t])
            g[: 2 * H].sigmoid_()
            g[2 * H : 3 * H].tanh_()
            g[3 * H :].sigmoid_()
            c = torch.addcmul(g[H : 2 * H] * cin[t], g[:H], g[2 * H : 3 * H], out=cs[t + 1])
            torch.mul(g[3 * H :], torch.tanh(c, out=tc[t]), out=hs[t + 1])
        return hs, cs, hin[:T], cin[:T], tc

    @staticmethod
    def backward(ctx, dy, dhT, dcT):  # noqa: D102
        x, w_ih, gates, hin, cin, tc, w_hh, mask = ctx.saved_tensors
        T, G, B = gates.shape
        H = G // 4
        dy = dy.contiguous()
        if ctx.compiled:
            dgates, dh, dc = kernels.lstm_backward(gates, cin, tc, w_hh, mask, dy, dhT, dcT)
            return _LSTMLayer._weight_grads(ctx, dgates, hin, x, w_ih, dh, dc)
        i, f, g, o = gates[:, :H], gates[:, H : 2 * H], gates[:, 2 * H : 3 * H], gates[:, 3 * H :]
        # step-independent factors for all steps at once: σ' = s - s², tanh' = 1 - g²
        dc_dh = torch.addcmul(o, o, tc * tc, value=-1)
        k = torch.empty_like(gates)
        torch.addcmul(i, i, i, value=-1, out=k[:, :H]).mul_(g)
        torch.addcmul(f, f, f, value=-1, out=k[:, H : 2 * H]).mul_(cin)
        torch.addcmul(i, i, g * g, value=-1, out=k[:, 2 * H : 3 * H])
        torch.addcmul(o, o, o, value=-1, out=k[:, 3 * H :]).mul_(tc)
        dgates = k  # overwritten step by step, after that step's factors are read
        dh = dy[T - 1] + dhT
        dc = dcT.clone()
        for t in reversed(range(T)):
            if t < T - 1:
                dh = dh.add_(dy[t])
            dc = dc.addcmul_(dh, dc_dh[t])
            d = dgates[t]
            d[3 * H :].mul_(dh)
            d[: 3 * H].view(3, H, B).mul_(dc)
            dc = dc.mul_(f[t])
            dh = torch.mm(w_hh.t(), d)
            if mask is not None:
                dh, dc = dh.mul_(mask[t]), dc.mul_(mask[t])
        return _LSTMLayer._weight_grads(ctx, dgates, hin, x, w_ih, dh, dc)

    @staticmethod
    def _weight_grads(ctx, dgates, hin, x, w_ih, dh, dc):
        """The weights' gradients for all steps at once from dgates (T, 4H, B), and the initial state's (dh, dc)."""
        dw_hh = torch.bmm(dgates, hin.transpose(1, 2)).sum(0)
        if x is None:
            dx, dw_ih, db = None, None, dgates.sum((0, 2))
        else:
            dx, dw_ih, db = _input_grads(dgates, x, w_ih, ctx.needs_input_grad[0])
        return dx, dw_ih, db, dh, dc, dw_hh, None, None


class _GRULayer(torch.autograd.Function):
    """One GRU layer over x (T, B, I), feature-major as :class:`_LSTMLayer`."""

    @staticmethod
    def forward(ctx, x, w_ih, b_ih, h0, w_hh, b_hh, mask):  # noqa: D102
        xp = _project_into(x, w_ih, b_ih)
        T, G, B = xp.shape
        H = G // 3
        ghn = xp.new_empty(T, H, B)
        hs = xp.new_empty(T + 1, H, B)
        hin = hs if mask is None else xp.new_empty(T, H, B)
        hs[0].copy_(h0)
        bias = b_hh.unsqueeze(1)
        for t in range(T):
            if mask is not None:
                torch.mul(hs[t], mask[t], out=hin[t])
            h = hin[t]
            gh = torch.addmm(bias, w_hh, h)
            a = xp[t, : 2 * H].add_(gh[: 2 * H]).sigmoid_()
            ghn[t].copy_(gh[2 * H :])
            n = xp[t, 2 * H :].addcmul_(a[:H], ghn[t]).tanh_()
            torch.addcmul(n, a[H:], h - n, out=hs[t + 1])
        ctx.save_for_backward(x, w_ih, xp, ghn, hin[:T], w_hh, mask)
        return hs[1:], hs[T].clone()

    @staticmethod
    def backward(ctx, dy, dhT):  # noqa: D102
        x, w_ih, act, ghn, hin, w_hh, mask = ctx.saved_tensors
        T, G, B = act.shape
        H = G // 3
        dy = dy.contiguous()
        r, z, n = act[:, :H], act[:, H : 2 * H], act[:, 2 * H :]
        # step-independent factors for all steps at once: σ'(r) ghn, σ'(z) (h - n), (1 - z) tanh'(n)
        kr = torch.addcmul(r, r, r, value=-1).mul_(ghn)
        kz = torch.addcmul(z, z, z, value=-1).mul_(hin - n)
        kn = torch.addcmul(1 - z, 1 - z, n * n, value=-1)
        dgx = act.new_empty(T, 3 * H, B)
        dgh = act.new_empty(T, 3 * H, B)
        dh = dy[T - 1] + dhT
        for t in reversed(range(T)):
            if t < T - 1:
                dh = dh.add_(dy[t])
            gx, gh = dgx[t], dgh[t]
            dn = torch.mul(dh, kn[t], out=gx[2 * H :])
            torch.mul(dn, kr[t], out=gx[:H])
            torch.mul(dh, kz[t], out=gx[H : 2 * H])
            gh[: 2 * H].copy_(gx[: 2 * H])
            torch.mul(dn, r[t], out=gh[2 * H :])
            dh = torch.addmm(dh * z[t], w_hh.t(), gh)
            if mask is not None:
                dh = dh.mul_(mask[t])
        dw_hh = torch.bmm(dgh, hin.transpose(1, 2)).sum(0)
        dx, dw_ih, db_ih = _input_grads(dgx, x, w_ih, ctx.needs_input_grad[0])
        return dx, dw_ih, db_ih, dh, dw_hh, dgh.sum((0, 2)), None


def _feature_major_mask(mask: torch.Tensor | None, x: torch.Tensor) -> torch.Tensor | None:
    return None if mask is None else mask.to(x).unsqueeze(1)


def lstm_scan(x, h0, c0, w_ih, w_hh, b_ih, b_hh, mask=None):
    """One LSTM layer over ``x`` (T, B, I) from (h0, c0) (B, H): returns y (T, B, H), h_T, c_T."""
    y, h, c = _LSTMLayer.apply(x, w_ih, b_ih + b_hh, h0.t(), c0.t(), w_hh, _feature_major_mask(mask, x), None)
    return y.transpose(1, 2).contiguous(), h.t(), c.t()


def gru_scan(x, h0, w_ih, w_hh, b_ih, b_hh, mask=None):
    """One GRU layer over ``x`` (T, B, I) from h0 (B, H): returns y (T, B, H), h_T."""
    y, h = _GRULayer.apply(x, w_ih, b_ih, h0.t(), w_hh, b_hh, _feature_major_mask(mask, x))
    return y.transpose(1, 2).contiguous(), h.t()


def supports(rnn: nn.Module) -> bool:
    """Whether :func:`run_torch_rnn` can run ``rnn``: a plain unidirectional, time-major torch LSTM/GRU."""
    return (isinstance(rnn, (nn.LSTM, nn.GRU)) and rnn.bias and not rnn.bidirectional and not rnn.batch_first
            and not rnn.dropout and not getattr(rnn, "proj_size", 0))


def run_torch_rnn(rnn: nn.LSTM | nn.GRU, x: torch.Tensor, state: Any = None,
                  mask: torch.Tensor | None = None) -> tuple[torch.Tensor, Any]:
    """``rnn(x, state)`` with :func:`lstm_scan` / :func:`gru_scan`, torch's state format; ``mask`` (T, B) resets it."""
    T, B, _ = x.shape
    if T == 0 or B == 0:
        return rnn(x, state)  # nothing to scan (torch rejects B = 0: callers handle it, see run_rnn)
    H, L = rnn.hidden_size, rnn.num_layers
    lstm = isinstance(rnn, nn.LSTM)
    if state is None:
        zero = x.new_zeros(L, B, H)
        state = (zero, zero) if lstm else zero
    hs, cs = [], []
    for k in range(L):
        w = [getattr(rnn, f"{n}_l{k}") for n in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")]
        if lstm:
            x, h, c = lstm_scan(x, state[0][k], state[1][k], *w, mask=mask)
            cs.append(c)
        else:
            x, h = gru_scan(x, state[k], *w, mask=mask)
        hs.append(h)
    if lstm:
        return x, (torch.stack(hs), torch.stack(cs))
    return x, torch.stack(hs)


#: largest self-fed scan step (multiply-adds) that runs on the host when its tensors are on a GPU
HOST_SCAN_MAX_MACS = 1 << 18


def self_fed_lstm(cell: nn.LSTMCell, w: torch.Tensor, c: torch.Tensor, steps: int):
    """``steps`` steps of ``(w, c) = cell(w, (w, c))`` (EvolveGCN-O, IBM §5.2): gates ``w (W_ih + W_hh)ᵀ + b``.

    Returns the (steps, F, H) outputs and the final (w, c). A small scan on a GPU runs on the host (launches,
    not arithmetic, dominate), with autograd through ``Tensor.to``."""
    b, wt = cell.bias_ih + cell.bias_hh, cell.weight_ih + cell.weight_hh
    dev = w.device
    host = dev.type != "cpu" and w.shape[0] * wt.shape[0] * wt.shape[1] <= HOST_SCAN_MAX_MACS
    if host:
        b, w, c, wt = (x.cpu() for x in (b, w, c, wt))
    y, h, c = _LSTMLayer.apply(None, None, b, w.t(), c.t(), wt, None, steps)
    y, h, c = y.transpose(1, 2), h.t(), c.t()
    if host:
        y, h, c = (x.to(dev) for x in (y, h, c))
    return y, (h, c)
