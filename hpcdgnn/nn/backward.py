"""``torch.autograd.backward`` for roots whose gradients hpcdgnn built itself, without the compiler's import.

torch's Python gradient check imports sympy (a large share of start-up); :func:`run_backward` checks only
shapes (the engine would broadcast silently) and calls the C++ engine, else falls back to torch's."""

from __future__ import annotations

from collections.abc import Sequence

import torch

__all__ = ["run_backward"]

_ENGINE = getattr(getattr(torch.autograd, "graph", None), "_engine_run_backward", None)


def run_backward(roots: Sequence[torch.Tensor], grads: Sequence[torch.Tensor]) -> None:
    """Accumulate into the leaves' ``.grad`` the backward pass of ``roots`` seeded with ``grads`` (one each)."""
    for i, (r, g) in enumerate(zip(roots, grads, strict=True)):
        if r.shape != g.shape:
            raise RuntimeError(f"run_backward: gradient {i} has shape {tuple(g.shape)}, its root {tuple(r.shape)}")
    if _ENGINE is None:
        torch.autograd.backward(list(roots), list(grads))
        return
    _ENGINE(tuple(roots), tuple(grads), False, False, (), allow_unreachable=True, accumulate_grad=True)
