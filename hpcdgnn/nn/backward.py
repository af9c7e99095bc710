"""``torch.autograd.backward`` for roots whose gradients hpcdgnn built itself, without the compiler's import.

``torch.autograd.backward(roots, grads)`` checks each given gradient in Python first (``_make_grads``),
and that check imports ``torch.fx.experimental.symbolic_shapes`` and with it sympy, a large share of every
rank's start-up, paid by every strategy's first backward. The gradients passed here are made by hpcdgnn of its roots'
shape (ones, zeros, received chunks), so :func:`run_backward` checks only that each has its root's shape (the engine
alone would sum a gradient that broadcasts to it, e.g. (2, 3) onto (3,), where torch refuses it) and hands them to the
C++ engine directly, as ``torch.autograd.backward`` does after its check; the engine casts another dtype. Where a
torch lacks the engine entry point it falls back to ``torch.autograd.backward``: the same arithmetic either way.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

__all__ = ["run_backward"]

_ENGINE = getattr(getattr(torch.autograd, "graph", None), "_engine_run_backward", None)


def run_backward(roots: Sequence[torch.Tensor], grads: Sequence[torch.Tensor]) -> None:
    """Accumulate into the leaves' ``.grad`` the backward pass of ``roots`` seeded with ``grads`` (one each)."""
    for i, (r, g) in enumerate(zip(roots, grads, strict=True)):  # one gradient per root
        if r.shape != g.shape:
            raise RuntimeError(f"run_backward: gradient {i} has shape {tuple(g.shape)}, its root {tuple(r.shape)}")
    if _ENGINE is None:
        torch.autograd.backward(list(roots), list(grads))
        return
    _ENGINE(tuple(roots), tuple(grads), False, False, (), allow_unreachable=True, accumulate_grad=True)
