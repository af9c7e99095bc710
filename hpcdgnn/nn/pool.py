"""EvolveGCN-H's summary of a layer input: the k best-scored rows of every snapshot, over the rows of all ranks.

The pick is global (Pareja et al. 2020, §3.3, "summarize"): a strategy that splits a snapshot's rows over ranks
(``vertex``, ``chunk``) must not pool per rank. Each rank sends its k best candidates per step (score, vertex
id) in one all-reduce of a zero-filled table, every rank picks the same k from the union, and the owners'
rows arrive in a second, differentiable all-reduce whose backward hands each owner the gradient every rank's
loss puts on its rows. Both sums add one value to zeros per entry, so they are exact.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from hpcdgnn.comm.autograd import allreduce_sum
from hpcdgnn.nn.layout import joined

__all__ = ["topk_pool", "topk_pool_reference"]


def _best(step: np.ndarray, score: np.ndarray, vertex: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Per step, the (at most) k best entries by score, then the lower vertex id: (entry indices, slot in step)."""
    order = np.lexsort((vertex, -score, step))
    s = step[order]
    slot = np.arange(s.shape[0]) - np.searchsorted(s, s, side="left")
    keep = slot < k
    return order[keep], slot[keep]


def topk_pool(x: torch.Tensor, keys: np.ndarray, num_vertices: int, start: int, stop: int, k: int,
              score: Callable[[torch.Tensor], torch.Tensor], comm, tag: str = "pool") -> torch.Tensor:
    r"""Every step's summary Z_t of the rows of X_t spread over the ranks (EvolveGCN §3.3, ``summarize``).

    .. math::
        y_t = X_t\,p / \lVert p\rVert,\qquad i_t = \mathrm{top}_k(y_t),\qquad
        Z_t = [X_t \circ \tanh(y_t)]_{i_t}

    Ties go to the lower vertex id, so the pick does not depend on which rank holds a row. A step with fewer
    than k rows repeats its last pick (as EvolveGCN's ``pad_with_last_val``).

    Args:
        x: this rank's rows of the layer input (each (t, v) held by one rank).
        keys: ``t * num_vertices + v`` of each row of ``x``, with start <= t < stop.
        num_vertices: N.
        start: the first step summarised.
        stop: one past the last step summarised.
        k: rows per summary.
        score: the layer's ``y = score(x)``.
        comm: the communicator the rows are spread over.
        tag: traffic tag prefix (``<tag>.index``, ``<tag>.fwd`` / ``.bwd``).

    Shapes:
        x (m, F), keys (m,) -> Z (stop - start, k, F), the same on every rank.
    """
    S, F, P, me = stop - start, x.shape[-1], comm.size, comm.rank
    y = score(x) if x.shape[0] else x.new_zeros(0)
    keys = np.asarray(keys, dtype=np.int64)
    step, vertex = keys // num_vertices - start, keys % num_vertices
    mine, slot = _best(step, y.detach().double().cpu().numpy(), vertex, k)
    # (rank, step, slot) -> (score, vertex id, occupied): a zero-filled table summed is an all-gather
    table = torch.zeros(P, S, k, 3, dtype=torch.float64)
    if mine.size:
        table[me, step[mine], slot] = torch.stack([y.detach().double().cpu()[mine],
                                                   torch.from_numpy(vertex[mine]).double(),
                                                   torch.ones(mine.size, dtype=torch.float64)], 1)
    comm.allreduce_(table, "sum", tag=f"{tag}.index")
    p_, s_, j_ = (a.numpy() for a in torch.nonzero(table[..., 2] > 0, as_tuple=True))
    cand = table[p_, s_, j_].numpy()
    best, out_slot = _best(s_, cand[:, 0], cand[:, 1].astype(np.int64), k)
    dest = s_[best] * k + out_slot
    src = [(p_[i], j_[i]) for i in best]
    # a step short of k rows repeats its last pick
    counts = np.bincount(s_[best], minlength=S)
    pad_dest, pad_src = [], []
    for s in np.flatnonzero((counts > 0) & (counts < k)):
        last = best[np.flatnonzero(s_[best] == s)[-1]]
        pad_dest += [s * k + j for j in range(counts[s], k)]
        pad_src += [(p_[last], j_[last])] * (k - counts[s])
    dest = np.concatenate([dest, np.asarray(pad_dest, dtype=np.int64)])
    src += pad_src
    local = np.full((S, k), -1, dtype=np.int64)
    local[step[mine], slot] = mine
    ours = [i for i, (p, _) in enumerate(src) if p == me]
    rows = torch.as_tensor([local[dest[i] // k, src[i][1]] for i in ours], dtype=torch.int64, device=x.device)
    at = torch.as_tensor(dest[ours], dtype=torch.int64, device=x.device)
    picked = x.index_select(0, rows) * torch.tanh(y.index_select(0, rows)).unsqueeze(1)
    z = x.new_zeros(S * k, F).index_copy(0, at, picked)
    # joined to x: a rank whose rows were not picked still runs this sum's backward after x's consumers
    z = allreduce_sum(joined(z, x), comm, tag=tag)
    return z.view(S, k, F)


def topk_pool_reference(x: torch.Tensor, k: int, score: Callable[[torch.Tensor], torch.Tensor]) -> torch.Tensor:
    """One snapshot's Z_t from all its rows (N, F) in one process, with ``torch.topk`` (ties: any order)."""
    y = score(x)
    idx = torch.topk(y, min(k, x.shape[0])).indices
    if idx.shape[0] < k:
        idx = torch.cat([idx, idx[-1:].expand(k - idx.shape[0])])
    return x[idx] * torch.tanh(y[idx]).unsqueeze(1)
