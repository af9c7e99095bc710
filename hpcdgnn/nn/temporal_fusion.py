"""Temporal fusion (DGC §5.1.2): concatenate short sequences instead of padding, mask the state (Eq. 4–5).

Sequences are packed end to end into lanes (first-fit decreasing, DGC Fig. 9c) and the state is
multiplied by a mask at each sequence start::

    u_C1 = σ(W_u · h_B2 · M_{B2,C1} + W_u · x_C1 + b_u),   M = 1 within a sequence, 0 across   (Eq. 5)

so every sequence's outputs equal those of running it alone. Used with ``strategy.sequences: active``."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from hpcdgnn.ops.scan import run_torch_rnn, supports

__all__ = ["Packing", "pack_sequences", "pad_sequences", "fused_rnn", "fused_gru", "unpack"]


@dataclass
class Packing:
    """Where each sequence sits: lane and first step; the lanes' length and count."""

    lane: np.ndarray
    start: np.ndarray
    lengths: np.ndarray
    steps: int
    lanes: int

    def reset_mask(self) -> torch.Tensor | None:
        """(steps, lanes) M of Eq. 5: 0 where a sequence starts (its state must not come in), else 1.

        None for padded lanes (every sequence starts at step 0, where the state is zero anyway)."""
        if not self.start.any():
            return None
        m = torch.ones(self.steps, self.lanes)
        m[torch.from_numpy(self.start), torch.from_numpy(self.lane)] = 0.0
        return m

    def index(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(step, lane) of every element, sequences one after another, each in time order."""
        seq = np.repeat(np.arange(self.lengths.shape[0]), self.lengths)
        within = np.arange(seq.shape[0]) - np.repeat(np.cumsum(self.lengths) - self.lengths, self.lengths)
        return torch.from_numpy(self.start[seq] + within), torch.from_numpy(self.lane[seq])


def pack_sequences(lengths: np.ndarray) -> Packing:
    """First-fit decreasing: each sequence goes to the first lane with room, lanes as long as the longest."""
    lengths = np.asarray(lengths, dtype=np.int64)
    steps = int(lengths.max(initial=0))
    lane = np.zeros(lengths.shape[0], dtype=np.int64)
    start = np.zeros(lengths.shape[0], dtype=np.int64)
    used: list[int] = []
    for i in np.argsort(-lengths, kind="stable"):
        k = next((j for j, u in enumerate(used) if u + lengths[i] <= steps), len(used))
        if k == len(used):
            used.append(0)
        lane[i], start[i] = k, used[k]
        used[k] += int(lengths[i])
    return Packing(lane, start, lengths, steps, len(used))


def pad_sequences(lengths: np.ndarray) -> Packing:
    """The unfused batch (DGC Fig. 9b): one lane per sequence, padded to the longest."""
    lengths = np.asarray(lengths, dtype=np.int64)
    n = lengths.shape[0]
    return Packing(np.arange(n), np.zeros(n, dtype=np.int64), lengths, int(lengths.max(initial=0)), n)


def fused_rnn(rnn: nn.RNNBase, x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """A torch GRU or LSTM over packed lanes ``x`` (steps, lanes, F), the state times ``mask`` before each step.

    ``mask`` None (padded lanes) calls the module itself: the hand-written masked scan gains nothing there
    (perf/results/kernels/README.md)."""
    if not supports(rnn):
        raise TypeError("fused_rnn: a unidirectional, time-major torch GRU or LSTM with biases, no dropout or "
                        "projection")
    if x.shape[0] == 0 or x.shape[1] == 0:
        return x.new_zeros(x.shape[0], x.shape[1], rnn.hidden_size) + x.sum() * 0.0
    if mask is None:
        return rnn(x)[0]
    return run_torch_rnn(rnn, x, None, mask)[0]


def fused_gru(gru: nn.GRU, x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """:func:`fused_rnn` for a GRU (DGC Fig. 10's example)."""
    return fused_rnn(gru, x, mask)


def unpack(packing: Packing, y: torch.Tensor) -> list[torch.Tensor]:
    """Packed outputs (steps, lanes, F) -> one (length, F) tensor per sequence."""
    step, lane = packing.index()
    flat = y[step, lane]
    return list(flat.split(packing.lengths.tolist()))
