"""A lower bound on the memory a job needs per rank, checked against what the rank has before anything is built.

A size typed one digit too long (``model.hidden: 160000``, ``task.negatives: 1000000``) would otherwise end in
the kernel's out-of-memory kill — exit 137 and no line saying why — minutes into the set-up, or in a numpy
traceback. :func:`check_footprint` refuses such a job in one line naming the key whose term dominates.

Every term is a *lower* bound of what the run must hold at once, so a job that fits is never refused:

- ``parameters``: the weights of ``model.layers`` layers — the first at least ``F × hidden``, each above it at
  least one ``hidden × hidden`` matrix per Chebyshev/diffusion term (``model.order`` for the graph-RNN cells)
  — and the link decoder's ``2·hidden × decoder_hidden``; with Adam's two moments, three copies.
- ``activations`` (full-batch strategies: snapshot, pss, vertex, chunk): the last layer's output for the
  rank's share of the T × N rows (T·N / P, whichever way they are split, over ``strategy.blocks`` checkpoint
  blocks: IBM §3.1 keeps one block's), and for the training split's share of them (rows past the training
  horizon run without autograd) the outputs of the layers below and, for the cells, their K − 1 further basis
  terms.
- ``pairs`` (link prediction): one step's scored pairs, the largest snapshot's edges × (1 + negatives), as
  two int64 indices each (a step's pairs exist at once in every path).
- ``tgn``: one batch's embeddings, (2 + negatives) · batch_events of width hidden, each reading ``neighbors``
  messages of width ``memory_dim``; the evaluation's ``eval_negatives`` likewise.

The bound is compared with :func:`~hpcdgnn.comm.device.memory_share` (the node's RAM or the job's cgroup
limit, or the GPU's memory, divided among the node's ranks).
"""

from __future__ import annotations

from hpcdgnn.errors import ConfigError

__all__ = ["check_footprint", "lower_bound"]


def lower_bound(job, manifest, num_ranks: int) -> dict[str, tuple[int, str]]:
    """Per term: (bytes the rank needs at least, the keys that set it), from the job's regime."""
    from hpcdgnn.regimes import regime_of

    return regime_of("model", job.model.name).footprint(job, manifest, num_ranks)


def check_footprint(job, manifest, num_ranks: int, available: int, where: str) -> None:
    """Refuse (one line) a job whose lower bound exceeds ``available`` bytes for this rank.

    Raises:
        ConfigError: names the bound, what the rank has, and the term that dominates with its keys.
    """
    parts = lower_bound(job, manifest, num_ranks)
    need = sum(b for b, _ in parts.values())
    if need <= available:
        return
    name, (most, keys) = max(parts.items(), key=lambda kv: kv[1][0])
    raise ConfigError(
        f"{where}: this job needs at least {need / 2**30:,.1f} GiB per rank ({name} {most / 2**30:,.1f} GiB, set "
        f"by {keys}) and this rank has {available / 2**30:,.1f} GiB (its share of the node's memory); lower those "
        "or spread the job over more ranks or nodes"
    )
