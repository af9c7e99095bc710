"""S6 "PSS": whole snapshots per rank, contiguous in time, with the RNN state passed along (DGC §2.1).

Rank p owns snapshots ``[s_p, s_{p+1})`` (equal counts, or equal estimated
work with ``strategy.balance: work``). Each GCN runs where its snapshot is, as
in :mod:`hpcdgnn.strategies.snapshot`; but instead of moving the activations
to vertex owners, the RNN of each layer runs over the rank's own stretch of
time for all N vertices, starting from the state at ``s_p - 1`` that rank p-1
sends when it has finished its stretch — a pipeline along the timeline::

    rank p:  state <- recv(p-1);  Z[s_p:s_{p+1}], state = RNN(Y[s_p:s_{p+1}], state);  send(state, p+1)

and the backward pass sends the state's gradient back from p+1 to p. The
state is what checkpoint blocks carry between blocks (SPEC S2): the LSTM's
(h, c), TM-GCN's last w-1 window inputs; EvolveGCN-O's recurrence is over
weights, which every rank computes itself, so it passes nothing; DySAT's
attention reads every earlier step, so its state is the whole past input
(t x N x F'). Per layer one state (N x F' values for an RNN) crosses each rank
boundary, forward and backward
(counted under ``pipeline.fwd`` / ``pipeline.bwd``): little volume, but the
ranks wait for each other in turn — the serialisation that makes PSS scale
worse than snapshot partitioning with redistribution (S1) as P grows.

Sends are non-blocking and completed after the backward pass, so the order in
which the autograd engine reaches the pipeline's nodes cannot deadlock two
ranks; receives block, which is the dependency itself.
"""

from __future__ import annotations

import dataclasses

import torch
from torch.utils._pytree import tree_flatten, tree_unflatten, treespec_dumps, treespec_loads

from hpcdgnn.nn.layout import horizon_temporal
from hpcdgnn.nn.models.base import DGNN
from hpcdgnn.partition.plan import PartitionPlan
from hpcdgnn.partition.timeline import plan_snapshots
from hpcdgnn.strategies.base import Scored
from hpcdgnn.strategies.registry import register_strategy
from hpcdgnn.strategies.snapshot import SnapshotLayout, SnapshotStrategy

__all__ = ["PSSStrategy"]


class _RecvState(torch.autograd.Function):
    """Forward: the state's tensors from rank p-1. Backward: their gradients sent back to p-1."""

    @staticmethod
    def forward(ctx, anchor, pipe, tag, tensors):  # noqa: D102
        ctx.pipe, ctx.tag = pipe, tag
        return tuple(tensors)

    @staticmethod
    def backward(ctx, *grads):  # noqa: D102
        ctx.pipe.send(ctx.pipe.rank - 1, 2 * ctx.tag + 1, [g.detach() for g in grads], "pipeline.bwd")
        return None, None, None, None


class _SendState(torch.autograd.Function):
    """The backward half of a forward send: a zero that joins the backward roots, whose backward
    receives the gradients of the sent tensors from rank p+1.
    """

    @staticmethod
    def forward(ctx, pipe, tag, *tensors):  # noqa: D102
        ctx.pipe, ctx.tag = pipe, tag
        ctx.devices = [t.device for t in tensors]
        return tensors[0].new_zeros(())

    @staticmethod
    def backward(ctx, _):  # noqa: D102
        grads = ctx.pipe.comm.recv_obj(ctx.pipe.rank + 1, 2 * ctx.tag + 1, "pipeline.bwd")
        # they travel through host memory (``_Pipe.send``): back to the device of the tensors sent
        return (None, None, *(g.to(d) for g, d in zip(grads, ctx.devices, strict=True)))


class _Pipe:
    """The point-to-point side of the pipeline: non-blocking sends, completed once per step."""

    def __init__(self, comm) -> None:
        self.comm, self.rank = comm, comm.rank
        self.pending: list = []

    def send(self, dest: int, tag: int, tensors: list[torch.Tensor], name: str) -> None:
        host = [t.cpu() for t in tensors]
        self.pending.append(self.comm.isend_obj(host, dest, tag, name))

    def send_state(self, dest: int, tag: int, leaves: list, spec) -> None:
        # the structure travels as pytree's JSON: unpickling a TreeSpec warns (torch >= 2.9 deprecates LeafSpec)
        payload = ([t.detach().cpu() for t in leaves], treespec_dumps(spec)) if leaves else None
        self.pending.append(self.comm.isend_obj(payload, dest, tag, "pipeline.fwd"))

    def finish(self) -> None:
        self.comm.wait_all(self.pending, "pipeline.wait")
        self.pending = []


@register_strategy("pss")
class PSSStrategy(SnapshotStrategy):
    """Contiguous snapshots per rank; RNN state pipelined rank to rank (DGC §2.1 "PSS")."""

    @classmethod
    def make_plan(cls, manifest, num_ranks, job) -> PartitionPlan:
        """Contiguous blocks of time (by count or estimated work, ``strategy.balance``); no checkpoint
        blocks: the pipeline passes states across ranks, not across blocks."""
        return dataclasses.replace(plan_snapshots(manifest, num_ranks, job, layout="block"), kind="pss")

    @classmethod
    def plan_layout(cls, job) -> str:
        """Always contiguous blocks: the RNN state travels from rank p to p + 1."""
        return "block"

    def setup(self, plan: PartitionPlan, model: DGNN, task, reader) -> Scored:
        """As the snapshot strategy (read, transfer, normalise, precompute), plus the pipeline."""
        self._pipe = _Pipe(self.comm)
        return super().setup(plan, model, task, reader)

    @classmethod
    def step_graphs_at(cls, num_ranks: int) -> bool:
        """The RNN runs over this rank's own whole snapshots at any P: graph_recurrent layers can run."""
        return True

    def layout(self, b: int = 0, states: list | None = None) -> PSSLayout:
        """The whole timeline: owned snapshots, RNN over them with the state pipelined."""
        return PSSLayout(self, b, states)


class PSSLayout(SnapshotLayout):
    """As :class:`SnapshotLayout` for the GCN; the RNN runs where the snapshots are, fed by rank p-1."""

    redistributes = False

    def to_temporal(self, y: torch.Tensor, li: int) -> torch.Tensor:
        """No redistribution: the RNN runs over this rank's own stretch of time for all N vertices."""
        return y

    def to_spatial(self, z: torch.Tensor, li: int) -> torch.Tensor:
        """Already in place."""
        return z

    def encode(self, layer, li: int, y: torch.Tensor, rstate):
        """RNN over this rank's stretch of time, from the state rank p-1 reached; the end state to p+1."""
        pipe = self.s._pipe
        me, P = pipe.rank, pipe.comm.size
        if me > 0:
            received = pipe.comm.recv_obj(me - 1, 2 * li, "pipeline.fwd")
            if received:  # (tensors, structure) of the state rank p-1 reached
                spec_leaves, spec = received
                tensors = [t.to(y.device) for t in spec_leaves]
                if torch.is_grad_enabled():
                    anchor = torch.zeros((), requires_grad=True)  # makes the outputs require grad
                    tensors = list(_RecvState.apply(anchor, pipe, li, tensors))
                    # a zero root on the received state: its backward (the send back to p-1) runs even
                    # when nothing here uses the state (an idle last rank, P > T)
                    self.roots.append(sum(t.sum() for t in tensors) * 0.0)
                rstate = tree_unflatten(tensors, treespec_loads(spec))
            else:
                rstate = None
        if y.shape[0] and me == P - 1 and layer.temporal_reach is None:
            # the last rank sends nothing on: past the training horizon its RNN runs without autograd, as
            # the snapshot strategy's (the backward over the evaluation steps would propagate zeros). Not where
            # the end state goes on (each send's backward is paired with a receive), nor for banded
            # encoders, where the split cost more than it saved (SnapshotStrategy._encode_banded)
            rows = self.s._grad_rows(self.b)  # (owned snapshots up to the horizon, ...), None: all of them
            grad_steps = y.shape[0] if rows is None else rows[0]
            graphs = self.temporal_kwargs(layer, li).get("graphs")
            z, rstate = horizon_temporal(layer, y, rstate, grad_steps, graphs)
        elif y.shape[0]:
            z, rstate = layer.temporal(y, rstate, **self.temporal_kwargs(layer, li))
        else:  # no snapshot here (P > T): the state passes through unchanged
            z = y
        if me < P - 1:
            leaves, spec = tree_flatten(rstate)
            leaves = [x for x in leaves if x is not None]
            pipe.send_state(me + 1, 2 * li, leaves, spec)
            if leaves and torch.is_grad_enabled():
                # the send's backward half: receives the gradient of this state from rank p+1
                self.roots.append(_SendState.apply(pipe, li, *leaves))
        return z, rstate

    def finish(self) -> None:
        """Complete every pending pipeline send (after the backward pass)."""
        self.s._pipe.finish()
