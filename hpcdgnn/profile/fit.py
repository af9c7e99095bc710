"""Fitting DGC §6's workload MLPs to profiled chunk times, and Eq. 8's error measure (MAPE)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from hpcdgnn.partition.workload import EncoderMLP, build_mlp

__all__ = ["fit_mlp", "mape"]


def mape(predicted: np.ndarray, measured: np.ndarray) -> float:
    """DGC Eq. 8: mean of |predicted − measured| / measured."""
    predicted, measured = np.asarray(predicted, float), np.asarray(measured, float)
    return float(np.mean(np.abs(predicted - measured) / measured)) if measured.shape[0] else float("nan")


def fit_mlp(x: np.ndarray, seconds: np.ndarray, inputs: Sequence[str], width: int = 64, depth: int = 3,
            steps: int = 1500, seed: int = 0) -> EncoderMLP:
    """Fit a DGC §6 MLP (``depth`` hidden ReLU layers of ``width``) to log-seconds; deterministic for a seed.

    Squared error of log-time is a smooth relative error, like §6's MAPE. Full-batch Adam, lr 1e-2 → 1e-4.
    """
    x = np.asarray(x, float)
    y = np.log(np.asarray(seconds, float))
    x_mean, x_std = x.mean(0), x.std(0)
    x_std = np.where(x_std > 1e-12, x_std, 1.0)
    y_mean, y_std = float(y.mean()), float(y.std()) or 1.0
    xt = torch.from_numpy((x - x_mean) / x_std)
    yt = torch.from_numpy((y - y_mean) / y_std).view(-1, 1)
    with torch.random.fork_rng(devices=[]):  # the caller's RNG stream is not disturbed
        torch.manual_seed(seed)
        net = build_mlp([x.shape[1]] + [width] * depth + [1])
    opt = torch.optim.Adam(net.parameters(), lr=1e-2, weight_decay=1e-5)
    sched = torch.optim.lr_scheduler.ExponentialLR(opt, gamma=(1e-2) ** (1.0 / max(steps, 1)))
    for _ in range(steps):
        opt.zero_grad()
        loss = torch.mean((net(xt) - yt) ** 2)
        loss.backward()
        opt.step()
        sched.step()
    return EncoderMLP(net, x_mean, x_std, y_mean, y_std, inputs)

