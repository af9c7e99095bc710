"""Negative sampling for link prediction: uniform (u, v) pairs from a counter-based generator (splitmix64).

Step t's pairs of an epoch are a function of (seed, epoch, t) alone, so any rank draws any step, identically,
at any rank count (the exactness of every strategy rests on it). :func:`draw_negatives_joined` draws many steps
into one array; its reference is :func:`draw_negatives` step by step (``tests/ops/test_references.py``).
:func:`draw_negatives_on` computes the same pairs in torch on an accelerator (tested equal to the host's).
"""

from __future__ import annotations

import numpy as np
import torch

__all__ = ["draw_negatives", "draw_negatives_joined", "draw_negatives_on", "draw_negatives_steps",
           "negatives_key"]

#: splitmix64 (Steele, Lea & Flood 2014): the stream's increment and its finaliser's multipliers
_GAMMA, _MIX1, _MIX2 = 0x9E3779B97F4A7C15, 0xBF58476D1CE4E5B9, 0x94D049BB133111EB
_U64 = (1 << 64) - 1



def _mix64(z: int) -> int:
    """splitmix64's finaliser on a Python int (the key of a step's stream)."""
    z = ((z ^ (z >> 30)) * _MIX1) & _U64
    z = ((z ^ (z >> 27)) * _MIX2) & _U64
    return z ^ (z >> 31)


def negatives_key(seed: int, epoch: int, t: int) -> int:
    """The 64-bit key of step t's negatives in ``epoch``: a function of (seed, epoch, t) alone."""
    k = _mix64((seed + _GAMMA) & _U64)
    k = _mix64((k + epoch + _GAMMA) & _U64)
    return _mix64((k + t + _GAMMA) & _U64)


def _draws(key: int, count: int, num_vertices: int) -> np.ndarray:
    """The first ``count`` vertices ``⌊mix(key + (i+1)·γ) · N / 2^64⌋`` of stream ``key`` (exact for N < 2^32)."""
    z = np.uint64(key) + np.arange(1, count + 1, dtype=np.uint64) * np.uint64(_GAMMA)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(_MIX1)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(_MIX2)
    z ^= z >> np.uint64(31)
    n = np.uint64(num_vertices)
    high = (z >> np.uint64(32)) * n + (((z & np.uint64(0xFFFFFFFF)) * n) >> np.uint64(32))
    return (high >> np.uint64(32)).astype(np.int64)


def draw_negatives_steps(seed: int, epoch: int, steps: list[int], num_vertices: int,
                         counts: list[int]) -> list[np.ndarray]:
    """:func:`draw_negatives_joined`, step by step: step ``steps[j]``'s pairs as a (2, counts[j]) view."""
    pairs, bounds = draw_negatives_joined(seed, epoch, steps, num_vertices, counts)
    return [pairs[:, a:b] for a, b in zip(bounds[:-1], bounds[1:], strict=True)]


def _bounds(num_vertices: int, counts: list[int]) -> np.ndarray:
    """Each step's first pair in the joined array (and the total last), after checking the generator's N."""
    if not 1 <= num_vertices < 1 << 32:
        raise ValueError(f"draw_negatives: N = {num_vertices} vertices; the generator takes 1 <= N < 2^32")
    bounds = np.zeros(len(counts) + 1, dtype=np.int64)
    np.cumsum(counts, out=bounds[1:])
    return bounds


def draw_negatives_joined(seed: int, epoch: int, steps: list[int], num_vertices: int, counts: list[int],
                          offsets: list[int] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Step ``steps[j]``'s ``counts[j]`` uniform negative pairs of ``epoch``, sources sorted, as one
    (2, Σ counts) int64 array (vertices plus ``offsets[j]``) and its ``bounds``.

    Each step's splitmix64 stream is keyed by :func:`negatives_key`: any rank draws any step alone, identically.
    """
    bounds = _bounds(num_vertices, counts)
    keys = [negatives_key(seed, epoch, t) for t in steps]
    offsets = [0] * len(counts) if offsets is None else offsets
    out = np.empty((2, int(bounds[-1])), dtype=np.int64)
    for key, m, a, off in zip(keys, counts, bounds[:-1], offsets, strict=True):
        v = _draws(key, 2 * m, num_vertices)
        pairs = out[:, a : a + m]
        if 8 * m < num_vertices:  # few pairs: a sort, not an O(N) count (the same sorted sources)
            pairs[0] = np.sort(v[:m])
        else:
            pairs[0] = np.repeat(np.arange(num_vertices, dtype=np.int64), np.bincount(v[:m], minlength=num_vertices))
        pairs[1] = v[m:]
        pairs += off
    return out, bounds


def draw_negatives(seed: int, epoch: int, t: int, num_vertices: int, m: int) -> np.ndarray:
    """Step t's m negative pairs of ``epoch``, (2, m) ordered by source (:func:`draw_negatives_steps`)."""
    return draw_negatives_steps(seed, epoch, [t], num_vertices, [m])[0]


def _signed(x: int) -> int:
    """A 64-bit constant as torch's int64 holds its bits."""
    return x - (1 << 64) if x >= 1 << 63 else x


def _shr(z: torch.Tensor, k: int) -> torch.Tensor:
    """Logical right shift of int64 bits (torch's ``>>`` is arithmetic)."""
    return (z >> k) & ((1 << (64 - k)) - 1)


def draw_negatives_on(seed: int, epoch: int, steps: list[int], num_vertices: int, counts: list[int],
                      offsets: list[int], device: torch.device) -> tuple[torch.Tensor, torch.Tensor, np.ndarray]:
    """:func:`draw_negatives_joined` computed on ``device``: the same pairs, bit for bit, as (src, dst) int64
    tensors there, and ``bounds``.

    splitmix64 in int64 arithmetic, which wraps as uint64 does (two's complement); shifts masked to be logical.
    One small host-to-device copy per call (each step's key, count, first pair and offset) and no result-sized
    sync: a GPU draws the pairs without the host drawing or copying them.

    Shapes:
        src, dst: (Σ counts,); bounds: (len(steps) + 1,).
    """
    bounds = _bounds(num_vertices, counts)
    total = int(bounds[-1])
    if total == 0:
        empty = torch.zeros(0, dtype=torch.int64, device=device)
        return empty, empty.clone(), bounds
    per_step = torch.from_numpy(np.stack([
        np.asarray([_signed(negatives_key(seed, epoch, t)) for t in steps], dtype=np.int64),
        np.asarray(counts, dtype=np.int64), bounds[:-1], np.asarray(offsets, dtype=np.int64)])).to(device)
    keys, m, first, off = per_step.unbind(0)
    step = torch.repeat_interleave(torch.arange(len(counts), device=device), m, output_size=total)
    within = torch.arange(total, device=device) - first[step]
    n = num_vertices

    def vertices(counter: torch.Tensor) -> torch.Tensor:  # ⌊mix(key + counter·γ) · N / 2^64⌋ (:func:`_draws`)
        z = counter * _signed(_GAMMA) + keys[step]
        z = (z ^ _shr(z, 30)) * _signed(_MIX1)
        z = (z ^ _shr(z, 27)) * _signed(_MIX2)
        z = z ^ _shr(z, 31)
        return _shr(_shr(z, 32) * n + _shr((z & 0xFFFFFFFF) * n, 32), 32)

    # step j's stream: its first m_j draws are the sources (sorted), the next m_j the destinations
    src_key = torch.sort(step * n + vertices(within + 1)).values  # steps stay in order, each one's sources sorted
    src = src_key - step * n + off[step]
    dst = vertices(within + 1 + m[step]) + off[step]
    return src, dst, bounds
