"""TGN-attn with a GRU node memory and DistTGL's static node memory (DistTGL §2.1, §3.1; SPEC M1).

For root occurrences (v_r, t_r) and their ``k`` most recent neighbours u_rj (events before t_r)::

    s'_w(t) = GRUCell([m_w ‖ Φ(t − τ_w)], s_w),   h_w(t) = s'_w(t) [+ S_w]       (memory updater, no BPTT)
    (memory_time: event)  s'_w = GRUCell([m_w ‖ Φ(τ_w − τ_w⁻)], s_w)          (τ_w⁻: w's event before τ_w)
    q_r  = W_q [h_{v_r} ‖ Φ(0)],   k_rj, v_rj = W_k, W_v [h_{u_rj} ‖ e_rj ‖ Φ(t_r − t_rj)]
    α_r  = softmax_j(LeakyReLU_0.2(q_r · k_rj))   per head, over real neighbours only
    z_r  = LayerNorm(ReLU(W_o [Σ_j α_rj v_rj ‖ h_{v_r}]))
    Φ(Δt) = cos((Δt/s)·w + b),  w = 10^{-linspace(0, 9, time_dim)},  b = 0 (TGAT's initialisation)

w and b stay fixed by default (GraphMixer §3.1's fixed encoder): trained, as in TGAT, their gradients carry
Δt, so on raw-second timestamps a rounding difference between two rank counts grows through training. s is
the stream's median gap between events by default, so Φ is the same whatever unit the timestamps count in.

The time term of the memory update is TGL's and DistTGL's (§2.1) by default, the time since the mail at each
read, t − τ_w; with ``memory_time: event`` it is TGN's own (Rossi et al. §3.1, PyG's ``TGNMemory``), the gap
between w's mail and its event before, fixed when the mail is written: s'_w then depends on the stored row
alone, so a pass without gradients (evaluation) can apply each mail once, when it is written, instead of at
every read of w (:class:`MemoryRows`' ``gap`` NaN: applied).

S is DistTGL §3.1's static memory. No dropout (runs on any number of ranks compare exactly)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

import numpy as np
import torch
from torch import nn

from hpcdgnn.config.schema import ModelConfig

if TYPE_CHECKING:
    from hpcdgnn.data.temporal_neighbors import NeighborBlock

__all__ = ["MemoryRows", "Occurrences", "TGN", "TGNInput", "TGNOptions", "TimeEncoding", "dense_min", "occurrences"]


@dataclass(frozen=True, kw_only=True)
class TGNOptions(ModelConfig):
    """``model: {name: tgn}`` options: TGN-attn's widths and DistTGL's static node memory (§2.1, §3.1)."""

    hidden: int = 16
    """Width of the embeddings z_v the attention layer outputs and the edge predictor scores (TGN's and PyG's
    ``embedding_dim``; a multiple of ``heads``). The default 16 is every model's, where ``memory_dim`` and
    ``time_dim`` are 100: TGN, PyG's TGN example and ``jobs/tgn.yaml`` use 100."""
    memory_dim: int = 100
    """Width of the node memory s_v (DistTGL §4.0.1 and TGN use 100)."""
    time_dim: int = 100
    """Width of the TGAT time encoding Φ(Δt) = cos(Δt·w + b)."""
    time_scale: float | Literal["auto"] = "auto"
    """s in Φ((Δt/s)): ``auto`` = the median positive gap between consecutive training events (the manifest's
    ``time_gap``; 1 for a directory prepared before it was recorded), so that Φ is the same in any time unit; a
    number = that many time units (1: Δt as stored, TGAT's and DistTGL's convention)."""
    time_encoding: Literal["fixed", "learnable"] = "fixed"
    """``fixed``: w = 10^{-linspace(0, 9, time_dim)}, b = 0 never trained (GraphMixer §3.1); ``learnable``: TGAT's
    trained w, b (DistTGL, TGL), whose gradients scale with Δt/s: well conditioned only while Δt/s stays small
    (e.g. days with ``time_scale: 1``); otherwise ``minibatch: i`` departs from one rank by rounding grown through
    training."""
    memory_time: Literal["query", "event"] = "query"
    """The memory update's time term: ``query``, Φ(t − τ_w) of the time since w's mail at each read (TGL,
    DistTGL §2.1); ``event``, Φ(τ_w − τ_w⁻) of the gap between w's mail and its event before (TGN §3.1, PyG's
    ``TGNMemory``), which evaluation applies once per mail instead of at every read (faster with many
    negatives)."""
    neighbors: int = 10
    """Most recent temporal neighbours the attention layer reads per node (DistTGL: 10)."""
    heads: int = 2
    """Attention heads (TGL's TGN-attn: 2); ``hidden`` must be a multiple of it."""
    static_memory: Literal["on", "off"] = "off"
    """DistTGL §3.1 static node memory: a learnable (N, memory_dim) table added to every node's dynamic memory."""
    static_pretrain_epochs: int = 1
    """With ``static_memory: on``: epochs pre-training the static table before training; 0 = co-trained."""

    def __post_init__(self) -> None:
        super().__post_init__()
        for key in ("memory_dim", "time_dim", "neighbors", "heads"):
            if getattr(self, key) < 1:
                raise ValueError(f"{key}: must be >= 1")
        if self.time_scale != "auto" and (isinstance(self.time_scale, bool) or not 0 < self.time_scale < math.inf):
            raise ValueError(f"time_scale: must be auto or a positive number, got {self.time_scale!r}")
        if self.hidden % self.heads:
            raise ValueError(f"hidden: {self.hidden} is not a multiple of heads: {self.heads}")
        if self.static_pretrain_epochs < 0:
            raise ValueError("static_pretrain_epochs: must be >= 0")


class TimeEncoding(nn.Module):
    """TGAT's Φ(Δt) = cos((Δt/s)·w + b) (TGL's ``TimeEncode``; DistTGL §2.1), w = 10^{-linspace(0, 9, dim)},
    b = 0 at the start; trained (TGAT) or fixed (GraphMixer §3.1).

    Args:
        dim: the encoding's width.
        learnable: train w and b; otherwise they are buffers (saved with the model, never updated).
        scale: s, the time unit Δt is counted in.

    Shapes:
        Δt (*) -> Φ (*, dim).
    """

    def __init__(self, dim: int, learnable: bool = True, scale: float = 1.0) -> None:
        super().__init__()
        self.scale = float(scale)
        if torch.empty(0).device.type == "meta":  # counted, not built (regimes.base.meta_build): no host array
            w = torch.empty(dim)
        else:
            w = torch.from_numpy(1.0 / 10 ** np.linspace(0, 9, dim, dtype=np.float64)).float()
        if learnable:
            self.w, self.b = nn.Parameter(w), nn.Parameter(torch.zeros(dim))
        else:
            self.register_buffer("w", w)
            self.register_buffer("b", torch.zeros(dim))

    def forward(self, dt: torch.Tensor) -> torch.Tensor:
        """The encoding cos((Δt/s)·w + b) of each Δt in ``dt``, shape ``dt.shape + (dim,)``."""
        x = torch.addcmul(self.b, (dt / self.scale).unsqueeze(-1), self.w)
        if x.device.type == "cpu" and not x.requires_grad and x.dtype == torch.float32 and torch.get_num_threads() == 1:
            # numpy's SIMD cosine, within an ulp of torch's: torch's (SLEEF) switches to a slow exact argument
            # reduction beyond |x| ≈ 4·10⁴, which the high frequencies of old neighbours reach on long streams;
            # numpy's fast reduction goes further. float32 only (numpy's float64 cosine is the slower one), one
            # thread only (numpy has no intra-op threads)
            np.cos(x.numpy(), out=x.numpy())
            return x
        return torch.cos(x)


@dataclass
class MemoryRows:
    """The memory of ``TGNInput.unique`` as read at the batch start: s (U, d), τ (U,) float64, mail (U, m), and
    under ``memory_time: event`` the mail's gap τ_w − τ_w⁻ (U,) float64, NaN where the mail is already applied
    to s (None under ``query``)."""

    mem: torch.Tensor
    mem_ts: np.ndarray
    mail: torch.Tensor
    gap: np.ndarray | None = None


@dataclass
class TGNInput:
    """One batch of root occurrences with their neighbourhoods (built by the strategy).

    Attributes:
        roots: (R,) node of each root occurrence.
        root_t: (R,) float64 query time of each.
        neighbors: their ``k`` most recent neighbours.
        neighbor_t: (R, k) float64 time of each neighbour's event.
        neighbor_feat: (R, k, D) edge features of those events.
        unique: (U,) ascending node ids whose memory ``memory`` holds (every root and real neighbour).
        memory: their memory rows; None with the dynamic memory off (static pre-training).
        occurrences: the forward's row plan, when built ahead.
    """

    roots: np.ndarray
    root_t: np.ndarray
    neighbors: NeighborBlock
    neighbor_t: np.ndarray
    neighbor_feat: torch.Tensor
    unique: np.ndarray
    memory: MemoryRows | None
    occurrences: Occurrences | None = None
    """:func:`occurrences` of this input when built ahead (e.g. in a prefetch thread); None: the forward builds it."""


@dataclass
class Occurrences:
    """Where :meth:`TGN.forward`'s rows come from: a function of a :class:`TGNInput`'s roots and neighbours alone
    (numpy), so that a strategy can build it off the critical path.

    The forward attends in two ways (the same equation, module docstring): a root with at least
    :func:`dense_min` real neighbours (``dense``) as one dense (k × ·) batch, its padded slots masked; the others
    (``part``) over their real slots alone. Which way depends on the root alone, so any slicing of a batch
    computes a root the same way.

    Attributes:
        dense: (F,) the roots attending as dense batches, ascending.
        part: (R − F,) the other roots, ascending.
        slots: (S,) flat slots r·k + j: the dense roots' k each (padded ones too), then the other roots' real ones.
        pad: (F·k,) the dense roots' padded slots, or None when there are none.
        dt: (S,) float64 t_r − t_rj of each (0 on a padded slot).
        part_root: (S − F·k,) the slots of ``part``: each one's root, as a row of ``part``.
        part_pos: (S − F·k,) and its place p·k + j among ``part``'s padded slots.
        part_empty: (R − F,) roots of ``part`` without a real neighbour.
        nodes, times: (O,) the distinct occurrences (node, time) whose state h is computed: one per distinct
            (node, time) under ``memory_time: query`` (the update depends on t; TGL deduplicates the same way);
            ``TGNInput.unique`` with times None under ``event`` (the update does not).
        rows: (O,) each occurrence's row in ``TGNInput.unique``; None: the identity (``event``).
        inv: (R + S,) the occurrence of each root, then of each slot of ``slots`` (a padded slot: its root's).
        part_read: (O_p,) ascending, the occurrences ``part``'s slots read, and ``part_inv`` (S − F·k,) each slot's
            row in it; None (a plan without ``dense``, or when they read every occurrence): every occurrence.
    """

    dense: np.ndarray
    part: np.ndarray
    slots: np.ndarray
    pad: np.ndarray | None
    dt: np.ndarray
    part_root: np.ndarray
    part_pos: np.ndarray
    part_empty: np.ndarray
    nodes: np.ndarray
    times: np.ndarray | None
    rows: np.ndarray | None
    inv: np.ndarray
    part_read: np.ndarray | None = None
    part_inv: np.ndarray | None = None


def dense_min(k: int) -> int:
    """The real neighbours, of ``k`` slots, from which a root attends as a dense batch: half of them. Below it the
    padded slots' passes cost more than the per-slot products they replace (perf/results/tgn-vs-pyg)."""
    return max(1, (k + 1) // 2)


def occurrences(inp: TGNInput, by_time: bool, dense: bool = False) -> Occurrences:
    """:class:`Occurrences` of ``inp``; ``by_time``: distinct (node, time) (``memory_time: query``), else nodes;
    ``dense``: the roots with at least :func:`dense_min` real neighbours attend as dense batches, and the other
    roots' keys and values are computed for the occurrences they read alone (evaluation's plan), else every root
    over its real slots (training's)."""
    nb = inp.neighbors
    R, k = nb.mask.shape
    is_dense = nb.mask.sum(1) >= dense_min(k) if dense else np.zeros(R, dtype=bool)
    dense_roots, part = np.flatnonzero(is_dense), np.flatnonzero(~is_dense)
    F = dense_roots.shape[0]
    part_mask = nb.mask[part]
    part_pos = np.flatnonzero(part_mask.reshape(-1))
    slots = np.concatenate([(dense_roots[:, None] * k + np.arange(k)).reshape(-1),
                            part[part_pos // k] * k + part_pos % k])
    real = nb.mask.reshape(-1)[slots]
    # a padded slot of a dense root reads its root's own occurrence (no new (node, time)) at Δt = 0: finite rows
    # that its zero weight leaves out of the sums
    occ_nodes = np.concatenate([inp.roots, np.where(real, nb.nodes.reshape(-1)[slots], inp.roots[slots // k])])
    slot_t = inp.root_t[slots // k]
    plan = dict(dense=dense_roots, part=part, slots=slots, pad=None if real.all() else ~real[: F * k],
                dt=np.where(real, slot_t - inp.neighbor_t.reshape(-1)[slots], 0.0), part_root=part_pos // k,
                part_pos=part_pos, part_empty=~part_mask.any(1))
    if not by_time:
        occ = Occurrences(**plan, nodes=inp.unique, times=None, rows=None, inv=np.searchsorted(inp.unique, occ_nodes))
    else:
        occ_t = np.concatenate([inp.root_t, slot_t])
        lex = np.lexsort((occ_t, occ_nodes))
        n_s, t_s = occ_nodes[lex], occ_t[lex]
        new = np.r_[True, (n_s[1:] != n_s[:-1]) | (t_s[1:] != t_s[:-1])] if lex.shape[0] else np.zeros(0, bool)
        inv = np.empty(lex.shape[0], dtype=np.int64)
        inv[lex] = np.cumsum(new) - 1
        nodes = n_s[new]
        occ = Occurrences(**plan, nodes=nodes, times=t_s[new], rows=np.searchsorted(inp.unique, nodes), inv=inv)
    if dense:
        # the part roots' memory share of keys and values for the occurrences their slots read: with the dense
        # roots' neighbours and the roots themselves left out, fewer than all
        read, read_inv = np.unique(occ.inv[R + F * k:], return_inverse=True)
        if read.shape[0] < occ.nodes.shape[0]:
            occ.part_read, occ.part_inv = read, read_inv
    return occ


class TGN(nn.Module):
    """TGN-attn (DistTGL §2.1, §3.1): the module docstring's memory update and attention layer.

    Args:
        num_vertices: N (rows of the static table).
        edge_dim: D, edge feature width.
        memory_dim: d, the width of s_w (``model.memory_dim``).
        time_dim: the width of Φ(Δt) (``model.time_dim``).
        hidden: the width of z_r (``model.hidden``), a multiple of ``heads``.
        heads: attention heads (``model.heads``).
        static_memory: add the static table S (N, d).
        time_learnable: train Φ's w and b (TGAT) rather than keep them fixed (GraphMixer).
        time_scale: s, the unit of Δt in Φ.
        event_time: ``memory_time: event``'s time term (the mail's gap) rather than the query's.

    Shapes:
        R roots with k neighbours (:class:`TGNInput`) -> z (R, hidden), s'_v(t_r) (R, d) or None."""

    def __init__(self, num_vertices: int, edge_dim: int, memory_dim: int, time_dim: int, hidden: int, heads: int,
                 static_memory: bool, time_learnable: bool = False, time_scale: float = 1.0,
                 event_time: bool = False) -> None:
        super().__init__()
        self.memory_dim, self.edge_dim, self.hidden, self.heads = memory_dim, edge_dim, hidden, heads
        self.event_time = bool(event_time)
        self.mail_dim = 2 * memory_dim + edge_dim
        self.out_features = hidden
        self.time = TimeEncoding(time_dim, time_learnable, time_scale)
        self.updater = nn.GRUCell(self.mail_dim + time_dim, memory_dim)
        self.static = nn.Parameter(torch.randn(num_vertices, memory_dim) * 0.1) if static_memory else None
        self.w_q = nn.Linear(memory_dim + time_dim, hidden)
        self.w_k = nn.Linear(memory_dim + edge_dim + time_dim, hidden)
        self.w_v = nn.Linear(memory_dim + edge_dim + time_dim, hidden)
        self.w_out = nn.Linear(hidden + memory_dim, hidden)
        self.norm = nn.LayerNorm(hidden)

    def forward(self, inp: TGNInput, *more) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Embeddings z (R, hidden) of the roots and their updated memories s'_v(t_r) (R, d), or None."""
        if more or isinstance(inp, torch.Tensor):  # PyG's TGN(x, ...) call
            from hpcdgnn.nn.models.base import refuse_tensors

            refuse_tensors(self, inp, more)
        nb = inp.neighbors
        R, k = nb.mask.shape
        if R == 0:  # an empty slice (a batch shorter than its ranks): nothing to embed, nothing to write
            z = self.w_out.weight.new_zeros(0, self.hidden)
            return z, None if inp.memory is None else z.new_zeros(0, self.memory_dim)
        occ = inp.occurrences if inp.occurrences is not None else self.plan(inp)
        h_u, s_u = self._node_states(occ, inp)
        dev = self.w_q.weight.device
        idx = torch.from_numpy(occ.inv).to(dev)
        # index_select rather than x[idx]: on CPU a third of the gather's time, and its backward an index_add
        # instead of an accumulating index_put (the same sums in the same order)
        s_new = None if s_u is None else s_u.index_select(0, idx[:R])
        # the dense roots, then the others: each part's roots, slots, Φ and edge features
        F, S = occ.dense.shape[0], occ.slots.shape[0]
        split = [F * k, S - F * k]
        slot_occ, phi = idx[R:].split(split), self.time(torch.from_numpy(occ.dt).to(dev, h_u.dtype)).split(split)
        e = [None, None]
        if self.edge_dim:
            feat = inp.neighbor_feat.reshape(R * k, -1)
            e = (feat if F == R else feat.index_select(0, torch.from_numpy(occ.slots).to(dev))).split(split)
        # each part's roots' states: [dense, part], or one entry when every root is in one part
        rows = [torch.from_numpy(r).to(dev) for r in (occ.dense, occ.part)] if 0 < F < R else [None]
        h_r = [h_u.index_select(0, idx[:R] if r is None else idx[:R].index_select(0, r)) for r in rows]
        z = []
        if F:
            pad = None if occ.pad is None else torch.from_numpy(occ.pad).to(dev).view(F, k, 1)
            # a padded slot's features may be anything (NaN): zeroed, as its weight is
            e_dense = e[0] if e[0] is None or pad is None else e[0].masked_fill(pad.view(F * k, 1), 0.0)
            agg = self._attend_dense(self._query(h_r[0]), h_u.index_select(0, slot_occ[0]), e_dense, phi[0], k, pad)
            z.append(self._output(agg, h_r[0]))
        if F < R:
            agg = self._attend_part(self._query(h_r[-1]), h_u, slot_occ[1], e[1], phi[1], occ, k)
            z.append(self._output(agg, h_r[-1]))
        if len(z) == 1:
            return z[0], s_new
        return z[0].new_empty(R, self.hidden).index_copy_(0, rows[0], z[0]).index_copy_(0, rows[1], z[1]), s_new

    def _query(self, h: torch.Tensor) -> torch.Tensor:
        """The query W_q [h ‖ Φ(0)] of roots with states ``h`` (R, d) -> (R, H); Φ(0) = cos(b) is one row for
        every root: its share once."""
        d = self.memory_dim
        w_h, w_phi = self.w_q.weight.split([d, self.w_q.weight.shape[1] - d], dim=1)
        return nn.functional.linear(h, w_h) + nn.functional.linear(self.time(h.new_zeros(1)), w_phi, self.w_q.bias)

    def _output(self, agg: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        """The embedding LayerNorm(ReLU(W_out [agg ‖ h])), without the concatenation: (R, H), (R, d) -> (R, H)."""
        w_agg, w_h = self.w_out.weight.split([self.hidden, self.memory_dim], dim=1)
        return self.norm(torch.relu_(torch.addmm(self.w_out.bias, agg, w_agg.t()).addmm_(h, w_h.t())))

    def _attend_dense(self, q: torch.Tensor, h: torch.Tensor, e: torch.Tensor | None, phi: torch.Tensor,
                      k: int, pad: torch.Tensor | None = None) -> torch.Tensor:
        """The attention's aggregate Σ_j α_rj v_rj of roots attending as dense batches of k slots, the padded ones
        (``pad``) with weight 0.

        Per head, q·(W_k x + b_k) = (W_kᵀ q)·x + q·b_k and Σ_j α_j (W_v x_j + b_v) = W_v (Σ_j α_j x_j) + b_v: the
        products with the weights once per root instead of once per slot (k× fewer multiply-adds), the slots'
        share (k × w_x)·(w_x × heads) batched products for each part x of width w_x (d, D, d_t), as GAT
        implementations reassociate aᵀ W x.

        Shapes:
            q (F, H), slot rows h (F·k, d), e (F·k, D) or None, phi (F·k, d_t), pad (F, k, 1) bool or None
            -> (F, H)."""
        heads, H = self.heads, self.hidden
        F, width = q.shape[0], H // heads
        x = [part.view(F, k, -1) for part in (h, e, phi) if part is not None]  # x_rj = [h_u ‖ e ‖ Φ], uncat
        sizes = [part.shape[2] for part in x]
        q = q.view(F, heads, width)
        w_k = self.w_k.weight.view(heads, width, -1).split(sizes, dim=2)
        w_v = self.w_v.weight.view(heads, width, -1).split(sizes, dim=2)
        logits = (q * self.w_k.bias.view(heads, width)).sum(-1).unsqueeze(1).repeat(1, k, 1)  # (F, k, heads)
        for part, w in zip(x, w_k, strict=True):
            logits.baddbmm_(part, torch.einsum("rhw,hwx->rhx", q, w).transpose(1, 2))
        logits = nn.functional.leaky_relu(logits, 0.2)
        if pad is not None:
            logits = logits.masked_fill(pad, float("-inf"))
        weights = torch.softmax(logits, dim=1).transpose(1, 2)  # (F, heads, k)
        agg = self.w_v.bias.view(heads, width)
        for part, w in zip(x, w_v, strict=True):
            agg = agg + torch.einsum("rhx,hwx->rhw", torch.bmm(weights, part), w)
        return agg.reshape(F, H)

    def _attend_part(self, q: torch.Tensor, h_u: torch.Tensor, slot_occ: torch.Tensor, e: torch.Tensor | None,
                     phi: torch.Tensor, occ: Occurrences, k: int) -> torch.Tensor:
        """The aggregate Σ_j α_rj v_rj of the roots not attending densely, over their real slots alone (a root
        without neighbours: 0); keys and values are W_{k,v} [h_u ‖ e ‖ Φ] = W^h h_u + W^{eΦ} [e ‖ Φ], the memory
        part once per distinct occurrence (a node at one time fills many slots; those ``occ.part_read`` when
        given), keys and values in one product.

        Shapes:
            q (P, H), h_u (O, d), slot_occ (S_p,) the occurrence of each real slot, e (S_p, D) or None,
            phi (S_p, d_t) -> (P, H)."""
        d, heads, H = self.memory_dim, self.heads, self.hidden
        P, S, width = q.shape[0], slot_occ.shape[0], H // heads
        dev = q.device
        w_kv, b_kv = torch.cat([self.w_k.weight, self.w_v.weight]), torch.cat([self.w_k.bias, self.w_v.bias])
        # split, not slices: a split's backward joins the pieces' gradients once, where each slice's backward
        # zero-fills a whole-width gradient and adds it to the others
        w_kv_h, w_kv_e, w_kv_phi = w_kv.split([d, self.edge_dim, w_kv.shape[1] - d - self.edge_dim], dim=1)
        # each part's product accumulated in place into the gathered memory part (one (S, 2H) buffer, no copy of
        # it into a new output, no [e ‖ Φ] concatenation): the slot-sized passes bound this layer's time
        if occ.part_read is None:
            kv = nn.functional.linear(h_u, w_kv_h, b_kv).index_select(0, slot_occ)
        else:
            read, read_inv = (torch.from_numpy(a).to(dev) for a in (occ.part_read, occ.part_inv))
            kv = nn.functional.linear(h_u.index_select(0, read), w_kv_h, b_kv).index_select(0, read_inv)
        if e is not None:
            kv.addmm_(e, w_kv_e.t())
        kv.addmm_(phi, w_kv_phi.t())
        k_real, v_real = kv.split(H, dim=1)
        # attention over the real slots only; padded slots are -inf logits, a root without neighbours all zeros
        slot_root, pos = torch.from_numpy(occ.part_root).to(dev), torch.from_numpy(occ.part_pos).to(dev)
        logits_real = nn.functional.leaky_relu(
            (q.view(P, heads, width).index_select(0, slot_root) * k_real.view(S, heads, width)).sum(-1), 0.2)
        logits = logits_real.new_full((P * k, heads), float("-inf")).index_copy(0, pos, logits_real)
        empty = torch.from_numpy(occ.part_empty).to(dev).view(P, 1, 1)
        alpha = torch.softmax(logits.view(P, k, heads).masked_fill(empty, 0.0), dim=1).view(P * k, heads).index_select(
            0, pos)
        return kv.new_zeros(P, heads, width).index_add(
            0, slot_root, alpha.unsqueeze(-1) * v_real.view(S, heads, width)).view(P, H)

    def plan(self, inp: TGNInput, dense: bool | None = None) -> Occurrences:
        """The forward's row plan of ``inp`` (:func:`occurrences`): per distinct (node, time) under ``memory_time:
        query`` (the update reads the query time), per node under ``event``; a strategy may build it ahead.

        ``dense``: attend roots with at least :func:`dense_min` real neighbours as dense batches (fewer
        multiply-adds a root, more operations a batch: for evaluation's large batches without gradients) and the
        others' keys and values for the occurrences they read alone; None: when gradients are off on
        the calling thread (grad mode is per thread: a plan built ahead in another thread passes ``dense``)."""
        return occurrences(inp, not self.event_time, not torch.is_grad_enabled() if dense is None else dense)

    def _node_states(self, occ: Occurrences, inp: TGNInput) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The state h of each occurrence (updated memory, plus static; or the static memory alone) and s' or None."""
        dev = self.w_q.weight.device
        static = None if self.static is None else self.static.index_select(0, torch.from_numpy(occ.nodes).to(dev))
        if inp.memory is None:
            if static is None:
                raise RuntimeError("TGN without dynamic memory needs static_memory")
            return static, None
        m = inp.memory
        if m.gap is None:
            if occ.times is None:
                raise RuntimeError("TGN under memory_time: event read a node memory without mail gaps")
            dt = torch.from_numpy(occ.times - m.mem_ts[occ.rows]).to(dev, m.mem.dtype)
            # one occurrence per row (every node at one time: PyG's per-batch protocol) is the identity: no
            # gathered copies of the GRU's (O, 3d) products, nor their backward's scatter into zeros
            rows = None if occ.rows.shape[0] == m.mem.shape[0] else torch.from_numpy(occ.rows).to(dev)
            s_new = self._gru(m.mail, m.mem, rows, self.time(dt))
        else:  # the time of each node's row alone: its update once per node, whatever the occurrences' times
            s_new = self.apply_mail(m.mail, m.mem, m.gap)
            if occ.rows is not None:
                s_new = s_new.index_select(0, torch.from_numpy(occ.rows).to(dev))
        return (s_new if static is None else s_new + static), s_new

    def apply_mail(self, mail: torch.Tensor, mem: torch.Tensor, gap: np.ndarray) -> torch.Tensor:
        """``memory_time: event``'s s' = GRUCell([m ‖ Φ(gap)], s) of every row; a row whose gap is NaN (its mail
        already applied) keeps s.

        Shapes:
            mail (U, mail_dim), mem (U, d), gap (U,) float64 -> (U, d)."""
        pending = ~np.isnan(gap)
        dev = mem.device
        if pending.all():
            return self._gru(mail, mem, None, self.time(torch.from_numpy(gap).to(dev, mem.dtype)))
        out = mem.clone()
        if pending.any():
            at = torch.from_numpy(np.flatnonzero(pending)).to(dev)
            out.index_copy_(0, at, self._gru(mail.index_select(0, at), mem.index_select(0, at), None,
                                             self.time(torch.from_numpy(gap[pending]).to(dev, mem.dtype))))
        return out

    def _gru(self, mail: torch.Tensor, mem: torch.Tensor, rows: torch.Tensor | None,
             phi: torch.Tensor) -> torch.Tensor:
        """``self.updater`` on [mail[rows] ‖ phi] and mem[rows] (rows None: every row once), the mail and memory
        products once per node."""
        g = self.updater
        m = mail.shape[1]
        w_mail, w_phi = g.weight_ih.split([m, g.weight_ih.shape[1] - m], dim=1)  # split: see forward

        def at(x: torch.Tensor) -> torch.Tensor:
            return x if rows is None else x.index_select(0, rows)

        gi_node = nn.functional.linear(mail, w_mail, g.bias_ih)
        gh = at(nn.functional.linear(mem, g.weight_hh, g.bias_hh))
        gi = at(gi_node).addmm_(phi, w_phi.t())  # in place in a fresh buffer: no (rows, 3d) copy (see forward)
        # PyTorch's GRUCell: r, z = σ(gi + gh) on the first 2d columns; n = tanh(i_n + r·h_n); (1 − z)·n + z·s
        d = mem.shape[1]
        (gi_rz, gi_n), (gh_rz, gh_n) = gi.split([2 * d, d], 1), gh.split([2 * d, d], 1)
        r, z = torch.sigmoid(gi_rz + gh_rz).chunk(2, 1)
        n = torch.tanh(torch.addcmul(gi_n, r, gh_n))
        return torch.addcmul(n, z, at(mem) - n)
