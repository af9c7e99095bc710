"""PSS: whole snapshots per rank, contiguous in time, with the RNN state passed along (DGC §2.1).

Each GCN runs where its snapshot is; the RNN of each layer runs over the rank's own stretch of time for all N
vertices, from the state rank p−1 reached — a pipeline along the timeline::

    rank p:  state <- recv(p-1);  Z[s_p:s_{p+1}], state = RNN(Y[s_p:s_{p+1}], state);  send(state, p+1)

The backward sends the state's gradient from p+1 to p (``pipeline.fwd`` / ``pipeline.bwd``). Little volume, but
ranks wait in turn, which is why PSS scales worse than S1. Sends are non-blocking and completed after the
backward, so the order in which autograd reaches the pipeline's nodes cannot deadlock two ranks.
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
    """The backward half of a send: a zero root whose backward receives the gradients from rank p+1."""

    @staticmethod
    def forward(ctx, pipe, tag, *tensors):  # noqa: D102
        ctx.pipe, ctx.tag = pipe, tag
        ctx.devices = [t.device for t in tensors]
        return tensors[0].new_zeros(())

    @staticmethod
    def backward(ctx, _):  # noqa: D102
        grads = ctx.pipe.comm.recv_obj(ctx.pipe.rank + 1, 2 * ctx.tag + 1, "pipeline.bwd")
        # they travel through host memory: back to the device of the tensors sent
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
        """Contiguous blocks of time (by count or estimated work); no checkpoint blocks."""
        return dataclasses.replace(plan_snapshots(manifest, num_ranks, job, layout="block"), kind="pss")

    @classmethod
    def plan_layout(cls, job) -> str:
        """Always contiguous blocks: the RNN state travels from rank p to p + 1."""
        return "block"

    def setup(self, plan: PartitionPlan, model: DGNN, task, reader) -> Scored:
        """As the snapshot strategy, plus the pipeline."""
        self._pipe = _Pipe(self.comm)
        return super().setup(plan, model, task, reader)

    @classmethod
    def cost(cls, plan: PartitionPlan, job, manifest, graph, work) -> list:
        """The planner's per-rank work and traffic: the GCN as under ``snapshot`` without redistribution; each
        time-mixing layer's final state (``work.state_per_row`` values per vertex) to the next rank and its
        gradient back; the time encoders run one rank after another."""
        from hpcdgnn.planner.cost import add
        from hpcdgnn.strategies.snapshot import snapshot_cost

        ranks = snapshot_cost(plan, job, manifest, graph, redistributes=False)
        item = work.itemsize
        state = sum(work.state_per_row) * plan.num_vertices * item
        for p, r in enumerate(ranks):
            r.serial_temporal = True
            if state and p < plan.num_ranks - 1:
                add(r.sent, "pipeline.fwd", state)
                add(ranks[p + 1].sent, "pipeline.bwd", state)
                add(r.calls, "p2p", 2 * sum(1 for s in work.state_per_row if s))
        return ranks

    @classmethod
    def step_graphs_at(cls, num_ranks: int) -> bool:
        """The RNN runs over this rank's own whole snapshots at any P."""
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
            if received:
                spec_leaves, spec = received
                tensors = [t.to(y.device) for t in spec_leaves]
                if torch.is_grad_enabled():
                    anchor = torch.zeros((), requires_grad=True)  # makes the outputs require grad
                    tensors = list(_RecvState.apply(anchor, pipe, li, tensors))
                    # a zero root: the send back to p-1 runs even when nothing here uses the state
                    self.roots.append(sum(t.sum() for t in tensors) * 0.0)
                rstate = tree_unflatten(tensors, treespec_loads(spec))
            else:
                rstate = None
        if y.shape[0] and me == P - 1 and layer.temporal_reach is None:
            # only the last rank splits at the horizon: elsewhere each send's backward pairs with a receive
            rows = self.s._grad_rows(self.b)
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
                self.roots.append(_SendState.apply(pipe, li, *leaves))
        return z, rstate

    def finish(self) -> None:
        """Complete every pending pipeline send (after the backward pass)."""
        self.s._pipe.finish()
