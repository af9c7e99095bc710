"""One copy of the node memory of a memory group: states, last-update times, mailboxes (DistTGL §3.3, SPEC M2).

A row per node: memory s_v, one mail [s_u ‖ s_v ‖ e] (most-recent COMB), and τ_v in float64 (Unix-second times
overflow float32's mantissa). τ starts at the stream's first time ``t0``, not 0, so the first Δt is not ≈ 1e9.
Under ``model.memory_time: event`` also the mail's gap τ_v − τ_v⁻ (0 before v's first event; NaN once the mail is
applied to s_v, which only evaluation does). With several ranks per group the rows live once per node in an MPI-3
shared window (``MPI.Win.Allocate_shared``); the strategy orders accesses with barriers, this class only moves
rows.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from hpcdgnn.comm.communicator import Communicator
from hpcdgnn.errors import ConfigError
from hpcdgnn.nn.models.tgn import MemoryRows

__all__ = ["NodeMemory"]

_CPU = torch.device("cpu")  # read()'s default device


class NodeMemory:
    """The memory copy of one group (``group`` None or size 1: private arrays); mail width 2d + D."""

    def __init__(self, group: Communicator | None, num_vertices: int, memory_dim: int, mail_dim: int,
                 dtype: np.dtype, t0: float = 0.0, gaps: bool = False) -> None:
        self.group, self.d, self.t0 = group, memory_dim, float(t0)
        shape = (num_vertices, memory_dim + mail_dim)
        self._windows: list[Any] = []
        self.gaps: np.ndarray | None = None
        if group is None or group.size == 1:
            self.values, self.times = np.zeros(shape, dtype=dtype), np.full(num_vertices, self.t0)
            self.gaps = np.zeros(num_vertices) if gaps else None
            self.leader = True
        else:
            try:
                self.values, wv = group.world.shared_array(shape, dtype, "strategy memory group")
                self.times, wt = group.world.shared_array((num_vertices,), np.float64, "strategy memory group")
                self._windows = [wv, wt]
                if gaps:
                    self.gaps, wg = group.world.shared_array((num_vertices,), np.float64, "strategy memory group")
                    self._windows.append(wg)
            except RuntimeError as e:
                raise ConfigError(f"rank {group.rank} of a memory group: {e}") from None
            self.leader = group.rank == 0
            self.reset()
            group.barrier(tag="setup")

    @staticmethod
    def size(num_vertices: int, memory_dim: int, mail_dim: int, itemsize: int, gaps: bool) -> int:
        """Bytes a memory of these sizes holds (:attr:`nbytes` before it is made: the footprint's and the
        planner's): N rows of d + mail values of ``itemsize``, N float64 times and, with ``gaps``, N float64 gaps."""
        return num_vertices * ((memory_dim + mail_dim) * itemsize + 8 * (2 if gaps else 1))

    @property
    def nbytes(self) -> int:
        """Bytes of the rows, their update times and (``memory_time: event``) their mails' gaps."""
        return int(self.values.nbytes + self.times.nbytes + (0 if self.gaps is None else self.gaps.nbytes))

    def reset(self) -> None:
        """Zero every row (and gap), τ = t0 (the group leader; the caller's next barrier publishes it)."""
        if self.leader:
            self.values[:] = 0
            self.times[:] = self.t0
            if self.gaps is not None:
                self.gaps[:] = 0.0

    def read(self, nodes: np.ndarray, device: torch.device = _CPU) -> MemoryRows:
        """Copies of the rows of ``nodes`` (ascending, unique), on ``device`` (times stay on the host)."""
        rows = self.values[nodes]
        t = torch.from_numpy(rows).to(device)
        return MemoryRows(mem=t[:, : self.d], mem_ts=self.times[nodes].copy(), mail=t[:, self.d :],
                          gap=None if self.gaps is None else self.gaps[nodes].copy())

    def write(self, nodes: np.ndarray, mem: np.ndarray, times: np.ndarray, mail: np.ndarray,
              apply: Callable | None = None) -> None:
        """Set the rows of ``nodes`` (unique) to memory ``mem``, update time ``times`` and mail ``mail``; with gaps
        kept, each mail's gap τ_new − τ_old. ``apply(mail, mem, gap) -> mem'`` (CPU tensors; evaluation under
        ``memory_time: event``) stores the rows with their mails already applied (gap NaN)."""
        if nodes.shape[0]:
            if self.gaps is not None:
                gap = times - self.times[nodes]
                if apply is not None:
                    mem = apply(torch.from_numpy(mail), torch.from_numpy(mem), gap).numpy()
                    gap = np.full(nodes.shape[0], np.nan)
                self.gaps[nodes] = gap
            self.values[nodes, : self.d] = mem
            self.values[nodes, self.d :] = mail
            self.times[nodes] = times

    def apply_pending(self, nodes: np.ndarray, apply: Callable, step: int = 65536) -> None:
        """Apply the pending mail of each of ``nodes`` (gap not NaN) to its memory, ``step`` rows per call of
        ``apply(mail, mem, gap) -> mem'`` (bounded temporaries at any N); τ and the mails stay."""
        nodes = nodes[~np.isnan(self.gaps[nodes])]
        for a in range(0, nodes.shape[0], step):
            rows = self.read(nodes[a : a + step])
            self.values[nodes[a : a + step], : self.d] = apply(rows.mail, rows.mem, rows.gap).numpy()
            self.gaps[nodes[a : a + step]] = np.nan

    def state(self, copy: bool = True) -> dict[str, np.ndarray]:
        """Every row, its time (and gap): copies, or with ``copy=False`` the arrays themselves — for a checkpoint
        serialised before the next write, which a copy of the node memory would only double."""
        out = {"values": self.values, "times": self.times}
        if self.gaps is not None:
            out["gaps"] = self.gaps
        return {k: a.copy() for k, a in out.items()} if copy else out

    def load(self, state: dict[str, np.ndarray]) -> None:
        """Set every row from :meth:`state`'s dict (the group leader writes; as :meth:`reset`)."""
        if ("gaps" in state) != (self.gaps is not None):
            raise ConfigError("model.memory_time: the saved node memory was written under "
                              f"{'event' if 'gaps' in state else 'query'}, this job sets "
                              f"{'event' if self.gaps is not None else 'query'}; keep the run's model")
        if self.leader:
            self.values[:] = state["values"]
            self.times[:] = state["times"]
            if self.gaps is not None:
                self.gaps[:] = state["gaps"]

    def close(self) -> None:
        """Free the shared-memory windows (none with private arrays)."""
        for w in self._windows:
            w.Free()
        self._windows = []
