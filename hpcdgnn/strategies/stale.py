"""Adaptive stale aggregation of halo rows (DGC §5.2, SPEC D3): send a row only if it moved enough.

The owner of a halo row resends it only if its L2 move since the last send to that rank is ≥ θ_r; the receiver
reuses its cached copy otherwise (a constant of the step: approximate; θ = 0 is exact). With D_r the largest
move of any halo row (global max) and norm = (l_1 − l_{r−1}) / l_1:

* ``static``:   θ_r = theta · D_r
* ``adaptive``: θ_r = theta · D_r · tanh(norm / 2)  = theta · D_r · (2σ(norm) − 1)

DGC's Eq. 6 prints θ_r = D_r / (1 + exp(norm)), which *shrinks* as the loss falls, against the text's intent (θ
small while unstable, growing as training settles); we implement the text: 0 at the first epoch, growing with
the loss decrease, 0 for a rising loss. Caches are per-rank strategy state, so resuming on another P is refused.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from hpcdgnn.comm.autograd import all_to_all_rows
from hpcdgnn.errors import ConfigError
from hpcdgnn.strategies.row_exchange import (
    ask_owners,
    decode_positions,
    encode_positions,
    exchange_positions,
    fresh_bytes,
)

__all__ = ["adaptive_factor", "decode_positions", "encode_positions", "exchange_positions", "fresh_bytes",
           "StaleFetch", "StaleHalo"]


def _ways(rows: torch.Tensor) -> int:
    """How many times a halo row's bytes cross the network per epoch (value, and gradient if any)."""
    return 2 if rows.requires_grad else 1


def adaptive_factor(first_loss: float | None, last_loss: float | None) -> float:
    """tanh(norm / 2) with norm = (l_1 - l) / l_1, clipped at 0."""
    if first_loss is None or last_loss is None or not first_loss > 0:
        return 0.0
    norm = (first_loss - last_loss) / first_loss
    return max(0.0, math.tanh(norm / 2.0))


class StaleHalo:
    """The stale-aware halo exchange, one cache per layer; ``send_rows`` / ``recv_rows``: per-rank counts."""

    def __init__(self, comm, send_rows: list[int], recv_rows: list[int], mode: str, theta: float) -> None:
        self.comm, self.mode, self.theta = comm, mode, theta
        self.send_rows, self.recv_rows = list(send_rows), list(recv_rows)
        self._send_bounds = np.r_[0, np.cumsum(self.send_rows, dtype=np.int64)]
        self._recv_bounds = np.r_[0, np.cumsum(self.recv_rows, dtype=np.int64)]
        self._sent: dict[int, torch.Tensor] = {}  # layer -> last values sent (rows in send order)
        self._got: dict[int, torch.Tensor] = {}  # layer -> last values received (rows in recv order)
        self.first_loss: float | None = None
        self.last_loss: float | None = None
        self._epoch_stats = np.zeros(3)  # rows sent, rows reused, bytes saved (this rank)
        self.theta_now = 0.0
        self.d_now = 0.0
        #: the stale fetch of the task's rows, when the task scores in place
        self.fetch: StaleFetch | None = None

    @classmethod
    def for_halo(cls, comm, halo, cfg) -> StaleHalo | None:
        """The stale exchange over ``halo``'s rows for ``strategy.stale`` ``cfg``; None when off."""
        return None if cfg.mode == "off" else cls(comm, halo.send_rows, halo.recv_rows, cfg.mode, cfg.theta)

    def threshold(self, d: float) -> float:
        """θ_r for the largest move ``d``."""
        if self.mode == "static":
            return self.theta * d
        return self.theta * d * adaptive_factor(self.first_loss, self.last_loss)

    def exchange(self, layer: int, send: torch.Tensor) -> torch.Tensor:
        """The halo rows for this rank, fresh where the owner sent them, cached elsewhere."""
        comm, P = self.comm, self.comm.size
        width = send.shape[-1]
        cache = self._sent.get(layer)
        with torch.no_grad():
            if cache is None:
                fresh = torch.ones(send.shape[0], dtype=torch.bool)
                d = 0.0
            else:
                move = (send.detach().cpu() - cache).norm(dim=1)
                local_max = float(move.max()) if move.numel() else 0.0
                d = float(comm.allreduce_array([local_max], "max", tag="stale")[0])
                theta = self.threshold(d)
                # >=: with θ = 0 every row goes (exact); a reused row would also drop its gradient
                fresh = move >= theta
                self.theta_now, self.d_now = theta, d
            flags, sb, rb = fresh.numpy(), self._send_bounds, self._recv_bounds
            positions = [np.flatnonzero(flags[sb[q] : sb[q + 1]]) for q in range(P)]
            got_counts, named = exchange_positions(comm, positions, self.send_rows, self.recv_rows, "stale.index")
            counts = [p.shape[0] for p in positions]
            pos = torch.from_numpy(np.concatenate([g + rb[q] for q, g in enumerate(named)]))
            if cache is None:
                self._sent[layer] = send.detach().cpu().clone()
            else:
                cache[fresh] = send.detach().cpu()[fresh]
        values = all_to_all_rows(send[fresh.to(send.device)], comm, counts, got_counts, tag="halo",
                                 reuse=f"stale{layer}.halo")
        got = self._got.get(layer)
        if got is None:
            got = torch.zeros(sum(self.recv_rows), width, dtype=send.dtype)
            self._got[layer] = got
        with torch.no_grad():
            got[pos] = values.detach().cpu()
        halo = got.to(send.device).clone().index_put((pos.to(send.device),), values)
        skipped = int((~fresh).sum())
        self._epoch_stats += [int(fresh.sum()), skipped, skipped * width * send.element_size() * _ways(send)]
        return halo

    def end_epoch(self, train_loss: float) -> dict:
        """Record the epoch's loss (for the next θ) and report totals over ranks."""
        if self.first_loss is None:
            self.first_loss = train_loss
        self.last_loss = train_loss
        sent, reused, saved = self.comm.allreduce_array(self._epoch_stats, tag="metrics")
        self._epoch_stats = np.zeros(3)
        return {"stale": {"mode": self.mode, "theta": self.theta_now, "max_move": self.d_now,
                          "rows_sent": int(sent), "rows_reused": int(reused), "bytes_saved": int(saved)}}

    def state_dict(self) -> dict:
        """Caches, losses, θ_r, D_r and counters — all a resumed run needs to match — and the partition's counts."""
        return {
            "num_ranks": self.comm.size,
            "send_rows": list(self.send_rows),
            "recv_rows": list(self.recv_rows),
            "sent": {layer: t.clone() for layer, t in self._sent.items()},
            "got": {layer: t.clone() for layer, t in self._got.items()},
            "first_loss": self.first_loss,
            "last_loss": self.last_loss,
            "theta_now": float(self.theta_now),
            "d_now": float(self.d_now),
            "epoch_stats": torch.from_numpy(self._epoch_stats.copy()),
            **({"fetch": self.fetch.state_dict()} if self.fetch is not None else {}),
        }

    def load_state_dict(self, state: dict | None) -> None:
        """Restore :meth:`state_dict`.

        Raises:
            ConfigError: no state, or state for another partition (the same on every rank).
        """
        P = self.comm.size
        if not state:
            raise ConfigError(
                f"--resume: strategy.stale.mode: {self.mode}: the checkpoint holds no stale-aggregation caches "
                f"for this run on {P} ranks (it was written on a different number of ranks, or without stale), "
                "and the caches cannot be re-partitioned; resume with the number of ranks the run was started with "
                "(num_ranks in the checkpoint's COMPLETE file), or start a new run without --resume"
            )
        if state["num_ranks"] != P:
            raise ConfigError(
                f"--resume: strategy.stale.mode: {self.mode}: the checkpoint's stale-aggregation caches were "
                f"written on {state['num_ranks']} ranks and cannot be re-partitioned to {P}; resume with "
                f"{state['num_ranks']} ranks, or start a new run without --resume"
            )
        if list(state["send_rows"]) != self.send_rows or list(state["recv_rows"]) != self.recv_rows:
            raise ConfigError(
                f"--resume: strategy.stale.mode: {self.mode}: the checkpoint's stale-aggregation caches are for "
                "other halo rows than this run's (was the dataset at data.path changed?); resume on the original data, "
                "or start a new run without --resume"
            )
        if self.fetch is not None:  # first: it may refuse the checkpoint before anything is loaded
            self.fetch.load_state_dict(state.get("fetch"))
        self._sent = {int(layer): t.detach().cpu().clone() for layer, t in state["sent"].items()}
        self._got = {int(layer): t.detach().cpu().clone() for layer, t in state["got"].items()}
        self.first_loss, self.last_loss = state["first_loss"], state["last_loss"]
        self.theta_now, self.d_now = float(state["theta_now"]), float(state["d_now"])
        self._epoch_stats = state["epoch_stats"].numpy().astype(np.float64).copy()


class StaleFetch:
    """Stale reuse (DGC §5.2's rule) of the rows a task fetches, whose set changes every epoch.

    Caches are keyed by row, per asking rank on the owner and per owner on the asker (up to 2·T·N·F values
    per rank); the owner resends a row only if it moved ≥ θ_r (:meth:`StaleHalo.threshold`).
    """

    def __init__(self, halo: StaleHalo, row_counts: list[int]) -> None:
        self.halo, self.comm, self.row_counts = halo, halo.comm, list(row_counts)
        self._sent: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}  # asking rank -> (values, sent flag)
        self._got: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}  # owner -> (values, held flag)

    def _table(self, store: dict, rank: int, rows: int, width: int, dtype) -> tuple[torch.Tensor, torch.Tensor]:
        if rank not in store:
            store[rank] = (torch.zeros(rows, width, dtype=dtype), torch.zeros(rows, dtype=torch.bool))
        return store[rank]

    def fetch(self, h: torch.Tensor, keys: np.ndarray, owner_of, local_of, tag: str = "task") -> torch.Tensor:
        """:func:`~hpcdgnn.strategies.halo.fetch_rows` with stale reuse: rows (len(keys), F) of ``keys``."""
        comm, P = self.comm, self.comm.size
        if P == 1:
            return h[:0]
        width, dtype = h.shape[1], h.dtype
        req = ask_owners(comm, keys, owner_of, local_of, self.row_counts, tag)
        counts, got, asked = req.counts, req.got, req.asked
        # owner: which asked rows moved enough since the asker last got them
        bounds = np.r_[0, np.cumsum(got)]
        current = h.detach().index_select(0, asked.to(h.device)).cpu()
        held = torch.zeros(asked.shape[0], dtype=torch.bool)
        move = torch.zeros(asked.shape[0], dtype=current.dtype)
        for q in range(P):
            a, b = int(bounds[q]), int(bounds[q + 1])
            if a == b or q == comm.rank:
                continue
            values, flag = self._table(self._sent, q, h.shape[0], width, current.dtype)
            rows = asked[a:b]
            held[a:b] = flag[rows]
            move[a:b] = (current[a:b] - values[rows]).norm(dim=1)
        local_max = float(move[held].max()) if bool(held.any()) else 0.0
        d = float(comm.allreduce_array([local_max], "max", tag="stale")[0])
        theta = self.halo.threshold(d)
        fresh = ~held | (move >= theta)
        for q in range(P):
            a, b = int(bounds[q]), int(bounds[q + 1])
            if a == b or q == comm.rank:
                continue
            values, flag = self._sent[q]
            sel = fresh[a:b]
            rows = asked[a:b][sel]
            values[rows] = current[a:b][sel]
            flag[rows] = True
        # which asked rows come: one bit each, packed per asker
        packed = [np.packbits(fresh[int(bounds[q]) : int(bounds[q + 1])].numpy()) for q in range(P)]
        raw = comm.exchange.alltoallv(torch.from_numpy(np.concatenate(packed)).view(-1, 1), [(g + 7) // 8 for g in got],
                             [(c + 7) // 8 for c in counts], tag=f"{tag}.index").view(-1).numpy()
        offs = np.r_[0, np.cumsum([(c + 7) // 8 for c in counts])]
        mask = torch.from_numpy(np.concatenate(
            [np.unpackbits(raw[offs[q] : offs[q + 1]], count=counts[q]) for q in range(P)]).astype(np.bool_))
        send_counts = [int(fresh[int(bounds[q]) : int(bounds[q + 1])].sum()) for q in range(P)]
        recv_bounds = np.r_[0, np.cumsum(counts)]
        recv_counts = [int(mask[int(recv_bounds[q]) : int(recv_bounds[q + 1])].sum()) for q in range(P)]
        values = all_to_all_rows(h.index_select(0, asked[fresh].to(h.device)), comm, send_counts, recv_counts,
                                 tag=tag)
        # receiver: fresh rows from the message, the others from my copies; keep the fresh ones
        mine_local = torch.from_numpy(req.local.astype(np.int64))
        cached = torch.zeros(keys.shape[0], width, dtype=dtype)
        for q in range(P):
            a, b = int(recv_bounds[q]), int(recv_bounds[q + 1])
            if a == b:
                continue
            table, flag = self._table(self._got, q, self.row_counts[q], width, dtype)
            m = mask[a:b]
            rows = mine_local[a:b]
            cached[a:b][~m] = table[rows[~m]]
            fresh_rows = values.detach().cpu()[int(mask[:a].sum()) : int(mask[:b].sum())]
            table[rows[m]] = fresh_rows
            flag[rows[m]] = True
        sorted_rows = cached.to(h.device).index_put((torch.nonzero(mask).view(-1).to(h.device),), values)
        reused = int((~fresh).sum())
        self.halo._epoch_stats += [int(fresh.sum()), reused, reused * width * h.element_size() * _ways(h)]
        self.halo.theta_now, self.halo.d_now = theta, max(self.halo.d_now, d)
        return req.in_key_order(sorted_rows)

    def state_dict(self) -> dict:
        """Copies of the caches of both sides, and the row counts they were built for."""
        return {"sent": {q: (v.clone(), f.clone()) for q, (v, f) in self._sent.items()},
                "got": {q: (v.clone(), f.clone()) for q, (v, f) in self._got.items()},
                "row_counts": list(self.row_counts)}

    def load_state_dict(self, state: dict | None) -> None:
        """Restore the caches from :meth:`state_dict` (nothing when ``state`` is empty).

        Raises:
            ConfigError: the caches were built for other row counts per rank (every rank raises alike).
        """
        if not state:
            return
        if list(state["row_counts"]) != self.row_counts:
            raise ConfigError(
                f"--resume: strategy.stale.mode: {self.halo.mode}: the checkpoint's caches of fetched rows are "
                f"for vertex rows per rank {list(state['row_counts'])}, this run has {self.row_counts} (was the "
                "dataset at data.path or the partition changed?); resume on the original data and settings, or "
                "start a new run without --resume"
            )
        self._sent = {int(q): (v.clone(), f.clone()) for q, (v, f) in state["sent"].items()}
        self._got = {int(q): (v.clone(), f.clone()) for q, (v, f) in state["got"].items()}
