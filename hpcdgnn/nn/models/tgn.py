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

__all__ = ["MemoryRows", "Occurrences", "TGN", "TGNInput", "TGNOptions", "TimeEncoding", "occurrences"]


@dataclass(frozen=True, kw_only=True)
class TGNOptions(ModelConfig):
    """``model: {name: tgn}`` options: TGN-attn's widths and DistTGL's static node memory (§2.1, §3.1)."""

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
        if min(self.memory_dim, self.time_dim, self.neighbors, self.heads) < 1:
            raise ValueError("memory_dim, time_dim, neighbors, heads: must be >= 1")
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
        w = torch.from_numpy(1.0 / 10 ** np.linspace(0, 9, dim, dtype=np.float64)).float()
        if learnable:
            self.w, self.b = nn.Parameter(w), nn.Parameter(torch.zeros(dim))
        else:
            self.register_buffer("w", w)
            self.register_buffer("b", torch.zeros(dim))

    def forward(self, dt: torch.Tensor) -> torch.Tensor:
        """The encoding cos((Δt/s)·w + b) of each Δt in ``dt``, shape ``dt.shape + (dim,)``."""
        return torch.cos(torch.addcmul(self.b, (dt / self.scale).unsqueeze(-1), self.w))


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

    Attributes:
        real: (S,) flat slots r·k + j of the real neighbours.
        slot_root: (S,) each one's root r.
        dt: (S,) float64 t_r − t_rj.
        empty: (R,) roots without a real neighbour.
        nodes, times: (O,) the distinct occurrences (node, time) whose state h is computed: one per distinct
            (node, time) under ``memory_time: query`` (the update depends on t; TGL deduplicates the same way);
            ``TGNInput.unique`` with times None under ``event`` (the update does not).
        rows: (O,) each occurrence's row in ``TGNInput.unique``; None: the identity (``event``).
        inv: (R + S,) the occurrence of each root, then of each real slot.
    """

    real: np.ndarray
    slot_root: np.ndarray
    dt: np.ndarray
    empty: np.ndarray
    nodes: np.ndarray
    times: np.ndarray | None
    rows: np.ndarray | None
    inv: np.ndarray


def occurrences(inp: TGNInput, by_time: bool) -> Occurrences:
    """:class:`Occurrences` of ``inp``; ``by_time``: distinct (node, time) (``memory_time: query``), else nodes."""
    nb = inp.neighbors
    R, k = nb.mask.shape
    real = np.flatnonzero(nb.mask.reshape(-1))
    occ_nodes = np.concatenate([inp.roots, nb.nodes.reshape(-1)[real]])
    dt = (np.repeat(inp.root_t, k) - inp.neighbor_t.reshape(-1))[real]
    empty = ~nb.mask.any(1)
    if not by_time:
        return Occurrences(real, real // k, dt, empty, inp.unique, None, None, np.searchsorted(inp.unique, occ_nodes))
    occ_t = np.concatenate([inp.root_t, np.repeat(inp.root_t, k)[real]])
    order = np.lexsort((occ_t, occ_nodes))
    n_s, t_s = occ_nodes[order], occ_t[order]
    new = np.r_[True, (n_s[1:] != n_s[:-1]) | (t_s[1:] != t_s[:-1])] if order.shape[0] else np.zeros(0, bool)
    inv = np.empty(order.shape[0], dtype=np.int64)
    inv[order] = np.cumsum(new) - 1
    nodes = n_s[new]
    return Occurrences(real, real // k, dt, empty, nodes, t_s[new], np.searchsorted(inp.unique, nodes), inv)


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

    def forward(self, inp: TGNInput) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Embeddings z (R, hidden) of the roots and their updated memories s'_v(t_r) (R, d), or None."""
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
        h_root = h_u.index_select(0, idx[:R])
        s_new = None if s_u is None else s_u.index_select(0, idx[:R])
        d, H, heads = self.memory_dim, self.hidden, self.heads
        width = H // heads
        real_t = torch.from_numpy(occ.real).to(dev)
        S = occ.real.shape[0]
        # W_{k,v} [h_u ‖ e ‖ Φ] = W^h h_u + W^{eΦ} [e ‖ Φ]: the memory part once per distinct occurrence, not per
        # slot (a node at one time fills many slots), and keys and values in one product
        w_kv, b_kv = torch.cat([self.w_k.weight, self.w_v.weight]), torch.cat([self.w_k.bias, self.w_v.bias])
        dt = torch.from_numpy(occ.dt).to(dev, h_u.dtype)
        # split, not slices: a split's backward joins the pieces' gradients once, where each slice's backward
        # zero-fills a whole-width gradient and adds it to the others
        w_kv_h, w_kv_e, w_kv_phi = w_kv.split([d, self.edge_dim, w_kv.shape[1] - d - self.edge_dim], dim=1)
        # each part's product accumulated in place into the gathered memory part (one (S, 2H) buffer, no copy of
        # it into a new output, no [e ‖ Φ] concatenation): the slot-sized passes bound this layer's time
        kv = nn.functional.linear(h_u, w_kv_h, b_kv).index_select(0, idx[R:])
        if self.edge_dim:
            kv.addmm_(inp.neighbor_feat.reshape(R * k, -1).index_select(0, real_t), w_kv_e.t())
        kv.addmm_(self.time(dt), w_kv_phi.t())
        k_real, v_real = kv.split(H, dim=1)
        # Φ(0) = cos(b) is one row for every root: its share of the query once
        phi0 = self.time(h_u.new_zeros(1))
        w_q_h, w_q_phi = self.w_q.weight.split([d, self.w_q.weight.shape[1] - d], dim=1)
        q = nn.functional.linear(h_root, w_q_h) + nn.functional.linear(phi0, w_q_phi, self.w_q.bias)
        # attention over the real slots only; padded slots are -inf logits, a root without neighbours all zeros
        slot_root = torch.from_numpy(occ.slot_root).to(dev)
        logits_real = nn.functional.leaky_relu(
            (q.view(R, heads, width).index_select(0, slot_root) * k_real.view(S, heads, width)).sum(-1), 0.2)
        logits = logits_real.new_full((R * k, heads), float("-inf")).index_copy(0, real_t, logits_real)
        empty = torch.from_numpy(occ.empty).to(dev).view(R, 1, 1)
        alpha = torch.softmax(logits.view(R, k, heads).masked_fill(empty, 0.0), dim=1).view(R * k, heads).index_select(
            0, real_t)
        agg = kv.new_zeros(R, heads, width).index_add(
            0, slot_root, alpha.unsqueeze(-1) * v_real.view(S, heads, width)).view(R, H)
        w_out_agg, w_out_h = self.w_out.weight.split([H, d], dim=1)  # W_out [agg ‖ h] without the concatenation
        z = self.norm(torch.relu_(torch.addmm(self.w_out.bias, agg, w_out_agg.t()).addmm_(h_root, w_out_h.t())))
        return z, s_new

    def plan(self, inp: TGNInput) -> Occurrences:
        """The forward's row plan of ``inp`` (:func:`occurrences`): per distinct (node, time) under ``memory_time:
        query`` (the update reads the query time), per node under ``event``; a strategy may build it ahead."""
        return occurrences(inp, by_time=not self.event_time)

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
            s_new = self._gru(m.mail, m.mem, torch.from_numpy(occ.rows).to(dev), self.time(dt))
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
