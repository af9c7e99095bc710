"""Regression: a linear head on Z_t forecasts the float node targets of the next H snapshots (SPEC Family A).

Targets (NaN = none) are PyGT signals or ``--targets next_degree`` (ReInc §5, DynaHB §6); the
target at t is already the next value. ``Ŷ_t = Z_t W^T + b`` (N, H), ``Ŷ_t[v, h]`` forecasts
``y_{t+h}[v]`` (encoder–decoder: Ŷ_t = Z_t). Loss: squared errors summed, divided by the global
entry count (MSE). Metrics per split: MSE, RMSE, MAE (headline), MAPE over ``|y| > MAPE_EPS``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from hpcdgnn.config.schema import TaskConfig
from hpcdgnn.data.manifest import Manifest
from hpcdgnn.errors import ConfigError, DataError
from hpcdgnn.tasks.base import (
    SPLITS,
    SampleEmbeddings,
    Scored,
    ShardedEmbeddings,
    Task,
    TaskBatch,
    first_step,
    split_steps,
)

__all__ = ["Regression", "RegressionOptions", "MAPE_EPS", "num_steps"]


@dataclass(frozen=True, kw_only=True)
class RegressionOptions(TaskConfig):
    """``task: {name: regression}``: a linear head on Z_t forecasts the float node targets of H snapshots (MSE)."""

    name: str = "regression"
    """The task these options belong to."""
    horizon: int = 1
    """H, snapshots forecast per step: Z_t predicts the targets stored at t..t+H-1. The split cuts the steps t (as
    DCRNN's and PyG Temporal's sample splits do), so with H > 1 the last H-1 training steps forecast targets that
    the first validation steps forecast too."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self._at_least_one("horizon")


#: Targets with ``|y|`` at most this are left out of the MAPE (|e| / |y| is unbounded near 0).
MAPE_EPS = 1e-6

#: Float64 sums per split: squared error, absolute error, entries, absolute percentage error, MAPE entries.
_WIDTH = 5


def num_steps(cfg: RegressionOptions, manifest: Manifest) -> int:
    """Prediction steps t = 0..T-H (0 when the horizon exceeds T); a signal of windows splits those from
    :func:`~hpcdgnn.tasks.base.first_step` on (:func:`_ranges`)."""
    return max(manifest.num_snapshots - cfg.horizon + 1, 0)


def _ranges(cfg: RegressionOptions, manifest: Manifest) -> list[range]:
    """The train / val / test steps: t = first_step..T-H by ``task.split``'s fractions."""
    return split_steps(num_steps(cfg, manifest), cfg.split, first_step(manifest))


class Regression(Task):
    """Regression head and float targets (module docstring).

    Shapes:
        head ``Linear(F', H)``; per step, present entries of the (N, H) target block as ``v * H + h``.
    """

    metric = "mae"
    in_place = True
    options = RegressionOptions

    @staticmethod
    def check(cfg: RegressionOptions, manifest: Manifest) -> None:
        """The dataset carries float node targets, and H <= T."""
        if not manifest.has_targets:
            raise DataError(
                "task.name: regression needs float node targets, but the dataset has none; prepare it with "
                "--format pygt-json (keeps the signal) or --targets next_degree (snap, jodie)"
            )
        if cfg.horizon > manifest.num_snapshots:
            raise ConfigError(f"task.horizon: {cfg.horizon} exceeds the dataset's T = {manifest.num_snapshots} "
                              f"snapshots; choose at most {manifest.num_snapshots}")
        first = first_step(manifest)
        if num_steps(cfg, manifest) <= first:  # a signal of windows: forecasts from window 0's end on
            most = manifest.num_snapshots - first
            raise ConfigError(f"task.horizon: {cfg.horizon} runs past the last snapshot from every window's end (the "
                              f"dataset's {most} windows end at snapshots {first}..{manifest.num_snapshots - 1}); "
                              f"choose at most {most}")

    def __init__(self, cfg: RegressionOptions, manifest: Manifest, emb_features: int, seed: int) -> None:
        super().__init__()
        self.check(cfg, manifest)
        H = cfg.horizon
        self.manifest, self.horizon = manifest, H
        self.head = nn.Linear(emb_features, H)
        self.ranges = _ranges(cfg, manifest)
        #: step t -> (flat indices v * H + h of the present entries, their targets (float64))
        self.entries: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
        #: in place (:class:`RowShard`): the row range of each step's rows here
        self._rows: dict[int, tuple[int, int]] = {}
        self._train_count = 0.0
        #: a zero of the task's dtype and device, for a loss sum without head parameters
        self.register_buffer("_zero", torch.zeros(()), persistent=False)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Reset the linear head."""
        if isinstance(self.head, nn.Linear):
            self.head.reset_parameters()

    def predict_in_model(self) -> None:
        """Drop the head: the encoder–decoder's output already is Ŷ_t, (n, H)."""
        self.head = nn.Identity()

    def target_block(self, t: int) -> torch.Tensor:
        """The (N, H) float64 host targets of step t, [v, h] = y_{t+h}[v], NaN where missing (teacher inputs)."""
        idx, y = self.entries[t]
        out = torch.full((self.manifest.num_vertices * self.horizon,), float("nan"), dtype=torch.float64)
        out[idx.cpu()] = y.detach().cpu().to(torch.float64)
        return out.view(-1, self.horizon)

    def predict(self, z: torch.Tensor, src: torch.Tensor | None = None,
                dst: torch.Tensor | None = None) -> torch.Tensor:
        """Ŷ_t = head(Z_t): the (N, H) predicted targets of t .. t+H-1, in the dataset's units."""
        return self.head(z)

    @staticmethod
    def train_horizon(cfg: RegressionOptions, manifest: Manifest) -> int:
        """Last training step (its Z_t is the last embedding in the loss)."""
        return _ranges(cfg, manifest)[0].stop - 1

    @staticmethod
    def snapshot_work(cfg: RegressionOptions, manifest: Manifest) -> np.ndarray:
        """Head outputs per step (an upper bound: every entry present), x3 when training; 0 outside the split
        steps."""
        ranges = _ranges(cfg, manifest)
        per = manifest.num_vertices * cfg.horizon
        work = np.zeros(manifest.num_snapshots)
        for t in range(ranges[0].start, ranges[2].stop):
            work[t] = per * (3.0 if t in ranges[0] else 1.0)
        return work

    @staticmethod
    def vertex_work(cfg: RegressionOptions, manifest: Manifest, emb_features: int) -> np.ndarray:
        """The linear head on every vertex's embedding (F wide): :meth:`snapshot_work` × F."""
        return Regression.snapshot_work(cfg, manifest) * float(emb_features)

    @staticmethod
    def steps(cfg: RegressionOptions, manifest: Manifest) -> list[range]:
        """Steps t = 0..T-H (a signal of windows: from window 0's end on), split in time order."""
        return _ranges(cfg, manifest)

    def _sample_entries(self, t: int, batch: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        """Step t's present target entries of ``batch``: flat indices into its (len(batch), H) block, and values."""
        idx, y = self.entries[t]
        if batch.size == 0:
            return idx[:0].cpu(), y[:0]
        v, h = np.divmod(idx.cpu().numpy(), self.horizon)
        pos = np.searchsorted(batch, v)
        keep = (pos < batch.shape[0]) & (batch[np.minimum(pos, batch.shape[0] - 1)] == v)
        sel = torch.from_numpy(np.flatnonzero(keep))
        return torch.from_numpy(pos[keep] * self.horizon + h[keep]), y.index_select(0, sel.to(y.device))

    def sample_examples(self, t: int, batch: np.ndarray, epoch: int) -> float:
        """Present target entries of ``batch`` at a training step t."""
        if self._split_of(t) != 0 or t not in self.entries:
            return 0.0
        return float(self._sample_entries(t, batch)[0].shape[0])

    def _split_of(self, t: int) -> int:
        return next((i for i, r in enumerate(self.ranges) if t in r), -1)

    def setup(self, reader, scored: Scored, comm) -> None:
        """Read the targets of t..t+H-1 for every held step t (in place: my rows'); all-reduce the training entry
        count."""
        H = self.horizon
        cache: dict[int, np.ndarray] = {}
        local = 0.0
        shard = scored.rows
        if shard is not None:
            self._rows = shard.step_rows()
        for t in (shard.steps if shard is not None else scored.snapshots):
            if self._split_of(t) < 0:
                continue
            y = np.empty((self.manifest.num_vertices, H))
            for h in range(H):
                if t + h not in cache:
                    cache[t + h] = reader.read_targets(t + h)
                y[:, h] = cache[t + h]
            if shard is not None:  # my rows' targets only, in row order
                y = y[shard.vertices(t, self._rows[t])]
            flat = y.reshape(-1)
            idx = np.flatnonzero(~np.isnan(flat))
            self.entries[t] = (torch.from_numpy(idx), torch.from_numpy(flat[idx]))
            if t in self.ranges[0]:
                local += float(idx.shape[0])
        self._train_count = float(comm.allreduce_array([local], tag="setup")[0])

    def global_train_count(self) -> float:
        """Present (vertex, horizon) target entries over all training steps."""
        return self._train_count

    def forward(self, emb: dict[int, torch.Tensor] | ShardedEmbeddings | SampleEmbeddings, epoch: int) -> TaskBatch:
        """Squared-error sum over the train entries held here, error sums for all splits; in place nothing moves."""
        stats = np.zeros(_WIDTH * len(SPLITS))
        loss_sum = sum((p.sum() * 0.0 for p in self.head.parameters()), self._zero)
        if isinstance(emb, ShardedEmbeddings):
            loss_sum = loss_sum + emb.rows.sum() * 0.0
            emb = emb.by_step(self._rows)
        entries = self.entries
        if isinstance(emb, SampleEmbeddings):
            loss_sum = loss_sum + emb.rows.sum() * 0.0
            if emb.t in self.entries:
                entries = {emb.t: self._sample_entries(emb.t, emb.batch)}
            emb = {emb.t: emb.rows.index_select(0, emb.index(emb.batch).to(emb.rows.device))}
        for t, z in emb.items():
            s = self._split_of(t)
            if s < 0 or t not in entries or entries[t][0].shape[0] == 0:
                loss_sum = loss_sum + z.sum() * 0.0
                continue
            idx, y = entries[t]
            if idx.device != z.device or y.dtype != z.dtype:  # once: kept in the training device and dtype
                idx, y = idx.to(z.device), y.to(z.device, z.dtype)
                entries[t] = (idx, y)
            with torch.set_grad_enabled(s == 0 and torch.is_grad_enabled()):
                err = self.head(z).reshape(-1).index_select(0, idx) - y
                loss = (err * err).sum()
            loss_sum = loss_sum + (loss if s == 0 else z.sum() * 0.0)
            e = err.detach().to("cpu", torch.float64).numpy()
            yv = y.detach().to("cpu", torch.float64).numpy()
            big = np.abs(yv) > MAPE_EPS
            b = _WIDTH * s
            stats[b] += float(loss.detach())
            stats[b + 1] += float(np.abs(e).sum())
            stats[b + 2] += float(e.shape[0])
            stats[b + 3] += float((np.abs(e[big]) / np.abs(yv[big])).sum())
            stats[b + 4] += float(big.sum())
        return TaskBatch(loss_sum, stats)

    def metrics(self, stats: np.ndarray) -> dict[str, float]:
        """MSE (as ``loss``), RMSE, MAE and MAPE per split (NaN for an empty split)."""
        out: dict[str, float] = {}
        nan = float("nan")
        for s, name in enumerate(SPLITS):
            b = _WIDTH * s
            n, m = stats[b + 2], stats[b + 4]
            mse = float(stats[b] / n) if n else nan
            out[f"{name}_loss"] = mse
            out[f"{name}_mae"] = float(stats[b + 1] / n) if n else nan
            out[f"{name}_rmse"] = math.sqrt(mse) if n else nan
            out[f"{name}_mape"] = float(stats[b + 3] / m) if m else nan
        return out
