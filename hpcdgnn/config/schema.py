"""Job configuration: one frozen dataclass per YAML section (SPEC "YAML selects everything").

Each field's docstring is its line in docs/configuration.md (:mod:`hpcdgnn.config.reference`); cross-field
rules raise ``ValueError`` in ``__post_init__``, which ``load_job`` prefixes with ``file: section.key:``.
"""

from __future__ import annotations

import os
from contextvars import ContextVar
from dataclasses import dataclass, field, fields
from typing import ClassVar, Literal

__all__ = [
    "DataConfig",
    "ModelConfig",
    "TaskConfig",
    "TrainConfig",
    "StrategyConfig",
    "SnapshotOptions",
    "PSSOptions",
    "VertexOptions",
    "ChunkOptions",
    "SequencesOptions",
    "AutoOptions",
    "GridOptions",
    "MemoryOptions",
    "RENAMED_KEYS",
    "CommConfig",
    "OutputConfig",
    "CheckpointConfig",
    "DebugConfig",
    "StaleConfig",
    "JobConfig",
]


#: ``train.threads`` and ``strategy.reservoir.threads`` at most: more than any node's cores (neither torch nor
#: Python can start ~10^5 threads).
MAX_THREADS = 1024

#: Adam's (β1, β2), torch's defaults. Its first step moves a parameter by lr / (1 - β1) in the
#: parameters' dtype, so ``train.lr`` is bounded by it (else a RuntimeError in ``optimizer.step``).
ADAM_BETAS = (0.9, 0.999)
_FLOAT_MAX = {"float32": 3.4028234663852886e38, "float64": 1.7976931348623157e308}

#: A duration in seconds at most (~31 years): torch.distributed's clocks and ``time.sleep`` count int64
#: nanoseconds, so a larger ``comm.timeout_s`` made timedelta or the TCP store overflow (a traceback, or a
#: connection that timed out at once) and a larger ``debug.delay_seconds`` made the sleep raise OverflowError.
MAX_SECONDS = 1e9


def _home(section: object, *names: str) -> None:
    """``~`` and ``~user`` at the start of the path options ``names`` of a frozen ``section``, as the home
    directory: a job file (or ``--set``) is read by no shell, and the run would otherwise look for, or make, a
    directory named ``~`` in the working directory (the Python API's path arguments expand it too)."""
    for name in names:
        object.__setattr__(section, name, os.path.expanduser(getattr(section, name)))


@dataclass(frozen=True, kw_only=True)
class DataConfig:
    """``data:`` the dataset directory written by ``prepare`` or ``generate``."""

    path: str = ""
    """Dataset directory (relative paths are relative to the working directory; ``~`` is the home directory)."""
    validate: Literal["checksum", "structure"] = "checksum"
    """Rank 0's check before training: ``checksum`` also hashes every shard (sha256); ``structure`` skips that."""

    def __post_init__(self) -> None:
        _home(self, "path")


@dataclass(frozen=True, kw_only=True)
class ModelConfig:
    """``model:`` the DGNN architecture; ``name`` picks the model, whose typed options are declared beside it
    (:func:`hpcdgnn.regimes.options_class`). An option of another model is an error."""

    name: str = "cdgcn"
    """Registered model: ``cdgcn``, ``evolvegcn_o``, ``evolvegcn_h``, ``tmgcn`` (IBM §5), ``tgcn``, ``mpnn_lstm``,
    ``dysat`` (DGC §7.1); ``gconv_lstm``, ``gconv_gru``, ``tgcn_cell``, ``dcrnn``, ``gcrn_m1`` (ReInc §2.1); ``tgn``
    (DistTGL)."""
    hidden: int = 16
    """Feature width F' of every layer's output (IBM §6.1 uses 6)."""

    def __post_init__(self) -> None:
        if self.hidden < 1:
            raise ValueError("hidden: must be >= 1")


@dataclass(frozen=True, kw_only=True)
class TaskConfig:
    """``task:`` what the embeddings are trained for, split by time; ``name`` picks the task, whose typed options
    are declared beside it (:func:`hpcdgnn.regimes.options_class`). An option of another task is an error."""

    name: str = "link_prediction"
    """Registered task: ``link_prediction`` (Z_t scores edges of t+1), ``node_classification``, ``regression`` (Z_t
    forecasts the targets of t..t+horizon-1; MSE), ``temporal_link_prediction`` on an event stream (tgn; MRR and
    AP, as TGL). Left out under a model of the event regime (tgn): ``temporal_link_prediction``."""
    split: tuple[float, float, float] = (0.7, 0.15, 0.15)
    """Train / validation / test fractions of the prediction steps, in time order."""
    #: options whose value comes from the dataset, not the job (an event stream's split is the one ``prepare``
    #: cut): such a task declares them with the default None, "not given", so that a value the job gives, any
    #: value, is told from none and refused (the regime's check); the resolved job leaves them out while None,
    #: so that ``config.resolved.yaml`` shows no value the run did not use
    fixed_by_data: ClassVar[tuple[str, ...]] = ()

    def _at_least_one(self, *names: str) -> None:
        """ValueError ``NAME: must be >= 1`` for the first of the options ``names`` below 1."""
        for name in names:
            if getattr(self, name) < 1:
                raise ValueError(f"{name}: must be >= 1")

    def __post_init__(self) -> None:
        if self.split is None:  # a task whose data fixes the split (fixed_by_data) and a job that gave none
            return
        if len(self.split) != 3 or any(f < 0 for f in self.split) or abs(sum(self.split) - 1.0) > 1e-9:
            raise ValueError("split: three non-negative fractions summing to 1, e.g. [0.7, 0.15, 0.15]")
        if self.split[0] <= 0:
            raise ValueError("split: the train fraction must be > 0")


@dataclass(frozen=True, kw_only=True)
class TrainConfig:
    """``train:`` the optimisation loop."""

    epochs: int = 10
    """Passes over the training data: one step each (full-batch, IBM §2.2), or one per mini-batch."""
    lr: float = 0.01
    """Adam learning rate."""
    seed: int = 0
    """Seed of parameter initialisation and negative sampling (same on every rank)."""
    dtype: Literal["float32", "float64"] = "float32"
    """Floating-point type of features, parameters and activations."""
    threads: int = 0
    """Torch threads per rank; 0 = ``OMP_NUM_THREADS`` where set, else the cores the rank is bound to, or
    (unbound) the node's cores / its ranks, at most ``SLURM_CPUS_PER_TASK``."""
    warmup_epochs: int = 1
    """Epochs flagged ``warmup`` in metrics.jsonl so benchmarks can leave them out."""
    device: Literal["auto", "cpu", "cuda"] = "auto"
    """Compute device: ``auto`` = the GPU of this rank's local rank when CUDA is available, else CPU."""
    reuse_memory: bool = True
    """Keep freed host memory in the process (glibc ``mallopt``) so epochs reuse pages; the resident size stays at
    its peak."""

    def __post_init__(self) -> None:
        if self.epochs < 1:
            raise ValueError("epochs: must be >= 1")
        if self.seed < 0:  # numpy's generators take none
            raise ValueError("seed: must be >= 0")
        if not self.lr > 0:
            raise ValueError("lr: must be > 0")
        if self.lr / (1 - ADAM_BETAS[0]) > _FLOAT_MAX[self.dtype]:
            most = _FLOAT_MAX[self.dtype] * (1 - ADAM_BETAS[0])
            raise ValueError(f"lr: must be at most {most!r} in {self.dtype} "
                             f"(Adam's first step is lr / (1 - {ADAM_BETAS[0]}))")
        if not 0 <= self.threads <= MAX_THREADS:
            raise ValueError(f"threads: must be in [0, {MAX_THREADS}] (torch threads of one rank; 0 = automatic)")
        if self.warmup_epochs < 0:
            raise ValueError("warmup_epochs: must be >= 0")


@dataclass(frozen=True, kw_only=True)
class StaleConfig:
    """``strategy.stale:`` (vertex, chunk, grid) adaptive stale aggregation of halo rows (DGC §5.2, SPEC D3);
    approximate.

    A row is resent only if it moved more than θ_r (L2) since last sent. θ_r = ``theta`` · D_r
    (``static``) or ``theta`` · D_r · tanh(norm(l_{r-1}) / 2) (``adaptive``; D_r: largest move in epoch
    r; norm(l) = (l_1 - l) / l_1): θ grows as the loss falls, as DGC's text asks (Eq. 6 as printed
    would shrink it; :mod:`hpcdgnn.strategies.stale`).
    """

    mode: Literal["off", "static", "adaptive"] = "off"
    """``off``: exact halo exchange; ``static``: θ = theta·D; ``adaptive``: θ grows as the loss falls."""
    theta: float = 0.5
    """Fraction of D_r (the largest move in the epoch): the static threshold, or the adaptive one's ceiling."""

    def __post_init__(self) -> None:
        if not 0 <= self.theta <= 1:
            raise ValueError("theta: must be in [0, 1] (a fraction of the largest embedding move D_r)")
        _only_with(self, ("theta",), self.mode != "off", "mode: static or adaptive")


@dataclass(frozen=True, kw_only=True)
class StrategyConfig:
    """``strategy:`` how work and data are partitioned over ranks; ``name`` picks the strategy, whose typed
    options are the subclasses below. An option of another strategy is an error."""

    name: str = "snapshot"
    """Registered strategy: ``snapshot`` (IBM §4.2, S1), ``pss`` (DGC §2.1), ``vertex`` (S6), ``chunk`` (D1),
    ``sequences`` (ReInc §3.4, R1/R4), ``hybrid`` (DynaHB §4–5, H1–H5), ``memory`` (DistTGL §3.2, M2; event
    streams), ``grid`` (snapshot × vertex ranks, IBM §6.5's future work); ``auto``: the planner picks one of the
    full-batch ones at start (``python -m hpcdgnn plan``). Left out under a model of the event regime (tgn):
    ``memory``."""


@dataclass(frozen=True, kw_only=True)
class SnapshotOptions(StrategyConfig):
    """``strategy: {name: snapshot}``: whole snapshots per rank, redistributed to vertex ranges (IBM §4.2, S1)."""

    layout: Literal["auto", "cyclic", "block"] = "auto"
    """``cyclic``: snapshot t on rank t mod P (each phase balanced); ``block``: contiguous (IBM §4.2); ``auto``:
    block where ``time_halo`` applies (TM-GCN without ``blocks``), else cyclic."""
    balance: Literal["count", "work", "measured"] = "work"
    """With ``layout: block``: equal count (IBM's T/P), equal estimated work, or ``measured`` (work, then re-cut
    once after the warm-up from per-rank compute times; docs/how-it-works.md; refused with cyclic ownership or
    ``blocks`` > 1, which have no cut to move)."""
    blocks: int = 1
    """Gradient-checkpoint blocks nb (IBM §3.1, S2): re-run each block's forward in the backward; 1 = off."""
    transfer: Literal["base", "graph_difference"] = "graph_difference"
    """Host-to-device transfer (IBM §3.2, S3): ``base`` (COO pairs) or ``graph_difference`` (CSR, then diffs)."""
    overlap_chunks: int = 1
    """IBM §6.5: hide the redistributions behind the time encoder in this many non-blocking chunks; 1 = blocking."""
    time_halo: Literal["on", "off"] = "on"
    """Banded time encoders (TM-GCN) receive the w - 1 snapshots before each owned run instead of two
    redistributions (exact); ``off``: IBM §4.2's redistribution. Not with ``blocks`` > 1."""

    def __post_init__(self) -> None:
        if self.blocks < 1:
            raise ValueError("blocks: must be >= 1 (1 = no gradient checkpointing)")
        if self.overlap_chunks < 1:
            raise ValueError("overlap_chunks: must be >= 1 (1 = no overlap)")


@dataclass(frozen=True, kw_only=True)
class PSSOptions(StrategyConfig):
    """``strategy: {name: pss}``: contiguous snapshots per rank, the RNN state pipelined rank to rank (DGC §2.1)."""

    name: str = "pss"
    balance: Literal["count", "work", "measured"] = "work"
    """Contiguous blocks of equal count, equal estimated work, or ``measured`` (as for ``snapshot``)."""
    transfer: Literal["base", "graph_difference"] = "graph_difference"
    """Host-to-device snapshot transfer (SPEC S3), as for ``snapshot``."""


@dataclass(frozen=True, kw_only=True)
class VertexOptions(StrategyConfig):
    """``strategy: {name: vertex}``: vertex sets for the whole timeline, halo exchange per GCN (IBM §4.1, S6)."""

    name: str = "vertex"
    partition: Literal["range", "hash", "metis"] = "range"
    """Vertex split: contiguous id ranges, a hash of the id, or METIS on the union of all snapshots (``pymetis``)."""
    stale: StaleConfig = field(default_factory=StaleConfig)
    """Stale aggregation of halo rows (DGC §5.2, SPEC D3)."""


@dataclass(frozen=True, kw_only=True)
class ChunkOptions(StrategyConfig):
    """``strategy: {name: chunk}``: vertex appearances partitioned by DGC's chunks (§4, SPEC D1), fusion (D2)."""

    name: str = "chunk"
    chunk_size: int | Literal["auto"] = "auto"
    """Largest chunk, in vertex appearances (DGC §4.1's size cap); ``auto``: min(4096, ⌈A / 4P⌉) for A active
    appearances, so that Alg. 1 can balance P ranks."""
    sequences: Literal["all", "active"] = "all"
    """Time encoder over ``all`` snapshots (exact against other strategies) or only ``active`` ones (DGC §5.1.2; a
    different model, GRU/LSTM encoders only)."""
    fusion: Literal["off", "on"] = "on"
    """Chunk fusion (DGC §5.1): spatial groups under ``fusion_memory_mb``, masked sequence packing (Eq. 4–5); exact."""
    fusion_memory_mb: float | Literal["auto"] = "auto"
    """Cap (MiB) of a fused group's estimated memory; ``auto``: the rank's share of device or node memory (§5.1.1)."""
    workload: Literal["count", "mlp"] = "count"
    """Chunk workload g_a (DGC §4.2, Alg. 1): ``count`` (appearances + edges) or ``mlp`` (§6, ``hpcdgnn profile``)."""
    predictor: str | None = None
    """``workload: mlp``: the predictor file; null = this machine's in ``$HPCDGNN_CACHE`` or ``~/.cache/hpcdgnn``."""
    stale: StaleConfig = field(default_factory=StaleConfig)
    """Stale aggregation of halo rows (DGC §5.2, SPEC D3), as for ``vertex``."""
    lookup: Literal["auto", "table", "active"] = "auto"
    """How every rank finds each appearance's rank and row there (the halo and in-place scoring ask for any):
    ``table``, (T, N) tables, ~10 bytes per appearance on every rank; ``active``, the active appearances only, ~34
    bytes per active one plus 0.19 per appearance, each lookup a rank query and two binary searches instead of an
    index (perf/results/chunk-map); ``auto``: ``table`` up to 64 MiB a rank, beyond it the smaller."""

    def __post_init__(self) -> None:
        if self.chunk_size != "auto" and self.chunk_size < 1:
            raise ValueError("chunk_size: must be >= 1 or auto")
        if self.fusion_memory_mb != "auto" and not self.fusion_memory_mb > 0:
            raise ValueError("fusion_memory_mb: must be > 0")
        _only_with(self, ("fusion_memory_mb",), self.fusion == "on", "fusion: on")
        if self.predictor is not None and self.workload != "mlp":
            raise ValueError("predictor: is read only with workload: mlp; remove it or set workload: mlp")


@dataclass(frozen=True, kw_only=True)
class SequencesOptions(StrategyConfig):
    """``strategy: {name: sequences}``: sample-based data parallelism (ReInc §3.4, SPEC R1, R4): windows of ``window``
    snapshots × batches of ``batch_vertices`` vertices with sampled k-hop graphs; gradients summed."""

    name: str = "sequences"
    window: int = 4
    """L, the snapshots of one sequence (sliding window); its last step is the one the task scores."""
    stride: int = 1
    """Snapshots between the starts of consecutive sequences."""
    batch_vertices: int = 0
    """Vertices per node batch (link prediction: sources), drawn by a (train.seed, epoch) permutation; 0 = all N."""
    fanouts: tuple[int, ...] = ()
    """Neighbours sampled per layer, nearest the batch first (PyG's ``num_neighbors``); 0 = all; ``[]`` = exact."""
    placement: Literal["overlap", "fetch"] = "overlap"
    """R1 (§3.4.1): hold own block + window - 1 snapshots (``overlap``) or ``fetch`` the rest once per epoch."""
    order: Literal["seq_first", "node_first"] = "seq_first"
    """R4 (§3.4.3): ``seq_first`` (a node batch's sequences first, ReInc's) or ``node_first``."""
    batch_samples: int = 0
    """Samples (sequence × node batch) per optimizer step over all ranks, independent of P; 0 = training sequences."""
    incremental: Literal["on", "off"] = "on"
    """R2 (§3.2, Eq. 2): the reuse cache's first-layer Ã_t·X_t updated from t-1's on changed rows (``on``) or from
    scratch; exact. With ``reuse: on`` and a full input layer (``fanouts`` [] or ending in 0) only."""
    incremental_threshold: float = 0.5
    """With ``incremental: on``: above this fraction of changed entries a snapshot is aggregated from scratch."""

    reuse: Literal["on", "off"] = "on"
    """R3 (§3.1, §3.3): samples read the first layer's Ã_t·X_t from a shared reuse cache (``on``). Same losses.
    The cache serves a full input layer: with the last entry of ``fanouts`` above 0 it holds nothing, and
    ``cache_mb``, ``cache_policy`` and ``incremental_threshold`` are refused."""
    cache_mb: float = 256.0
    """With ``reuse: on``: cache bound, MiB per rank; at least one snapshot's Ã_t·X_t (N × F; N × K·F Chebyshev)."""
    cache_policy: Literal["priority", "lru"] = "priority"
    """With ``reuse: on``: evict by ReInc's Eq. 3 priority F/S − I (expiring at F = 0), or ``lru`` for comparison."""

    def __post_init__(self) -> None:
        if self.window < 1:
            raise ValueError("window: must be >= 1")
        if not self.cache_mb >= 0:
            raise ValueError("cache_mb: must be >= 0 (MiB per rank)")
        if self.stride < 1:
            raise ValueError("stride: must be >= 1")
        if self.batch_vertices < 0:
            raise ValueError("batch_vertices: must be >= 0 (0 = all vertices)")
        if any(f < 0 for f in self.fanouts):
            raise ValueError("fanouts: must be >= 0 (0 = every neighbour)")
        if self.batch_samples < 0:
            raise ValueError("batch_samples: must be >= 0 (0 = the number of training sequences)")
        if not self.incremental_threshold >= 0:
            raise ValueError("incremental_threshold: must be >= 0 (a fraction of a snapshot's entries)")
        if self.fanouts and self.fanouts[-1]:
            # R2 and R3 serve layer 0's Ã_t·X_t over full neighbourhoods (sequences.sampling_of's reads_ax): with
            # the input layer sampled (fanouts' last entry: nearest the batch first) no sample reads the cache.
            # ``incremental`` and ``reuse`` themselves stay free: a technique switched off is what an A/B by --set
            # flips, and off where it cannot act is still true
            for name in _set_away(self, ("cache_mb", "cache_policy", "incremental_threshold")):
                raise ValueError(f"{name}: does nothing with fanouts {list(self.fanouts)}: the reuse cache and the "
                                 "incremental aggregation (R2, R3) serve the input layer over all its neighbours, and "
                                 f"the last entry samples {self.fanouts[-1]} there; remove it, or end fanouts with 0")
        _only_with(self, ("cache_mb", "cache_policy"), self.reuse == "on", "reuse: on")
        _only_with(self, ("incremental_threshold",), self.incremental == "on", "incremental: on")


@dataclass(frozen=True, kw_only=True)
class AdjusterConfig:
    """``strategy.adjuster:`` how the hybrid batch size (N_S, N_V) is chosen (DynaHB §5.1, SPEC H3)."""

    kind: Literal["dqn", "fixed", "random"] = "dqn"
    """``dqn``: learned online from loss reduction and step time (Defs. 4–6); ``fixed``: always ``start``;
    ``random``: drawn uniformly per batch from (train.seed, epoch, batch)."""
    start: tuple[float, float] | None = None
    """(snapshot fraction, vertex fraction), one of the action space; null = the paper's 20 % × 5 % where it is
    one, else the middle action."""
    reward_time: Literal["measured", "work"] = "measured"
    """``dqn``: the reward's time, the slowest rank's seconds (the paper's) or the batch's load (reproducible;
    under ``averaging.mode: async`` with ``averaging.every_steps``, as rounds by ``every_s`` fall at other steps
    from run to run)."""
    gamma: float = 0.99
    """``dqn``: discount γ, in [0, 1)."""
    epsilon: float = 1.0
    """``dqn``: initial probability of a random action."""
    epsilon_decay: float = 0.95
    """``dqn``: ε's factor per decision, in (0, 1]."""
    epsilon_min: float = 0.1
    """``dqn``: ε's floor, at most ``epsilon``."""
    lr: float = 0.005
    """``dqn``: the network's Adam learning rate."""

    def __post_init__(self) -> None:
        if not 0 <= self.gamma < 1:
            raise ValueError("gamma: must be in [0, 1)")
        if not 0 < self.epsilon_decay <= 1:
            raise ValueError("epsilon_decay: must be in (0, 1]")
        if not 0 <= self.epsilon <= 1:
            raise ValueError(f"epsilon: {self.epsilon} must be in [0, 1]")
        if not 0 <= self.epsilon_min <= self.epsilon:
            raise ValueError(f"epsilon_min: {self.epsilon_min} must be in [0, epsilon = {self.epsilon}]")
        if not self.lr > 0:
            raise ValueError("lr: must be > 0")
        _only_with(self, ("reward_time", "gamma", "epsilon", "epsilon_decay", "epsilon_min", "lr"),
                   self.kind == "dqn", "kind: dqn")


@dataclass(frozen=True, kw_only=True)
class ReservoirConfig:
    """``strategy.reservoir:`` built hybrid batches kept for reuse (DynaHB §5.2, Alg. 3, Eq. 4; SPEC H4)."""

    mode: Literal["off", "on"] = "off"
    """``on``: reuse a stored batch with Eq. 4's probability, else a snapshot or a fresh batch (node tasks)."""
    threads: int = 0
    """Generator threads filling the stores beside training; 0 = one batch a step, inline (deterministic)."""
    max_mb: float = 256.0
    """Bytes a rank may store, MiB; at least one batch (a rank may pass it by one batch). Under ``averaging: allreduce``
    with ``threads: 0`` the stores stop growing on every rank once one rank reaches it, so ranks keep agreeing;
    where it binds, P ranks do not reproduce one process (the cap is per rank)."""
    max_batch_mb: float = 64.0
    """A batch not reused is a snapshot batch (every vertex × N_S snapshots) where one is at most this many MiB."""

    def __post_init__(self) -> None:
        if not 0 <= self.threads <= MAX_THREADS:  # beyond, Python cannot start them (a traceback in epoch 1)
            raise ValueError(f"threads: must be in [0, {MAX_THREADS}] (generator threads of one rank; 0 = inline)")
        if not self.max_mb > 0:
            raise ValueError("max_mb: must be > 0 (MiB per rank)")
        if not self.max_batch_mb >= 0:
            raise ValueError("max_batch_mb: must be >= 0 (MiB; 0 = never a snapshot batch)")
        _only_with(self, ("threads", "max_mb", "max_batch_mb"), self.mode == "on", "mode: on")


@dataclass(frozen=True, kw_only=True)
class AveragingConfig:
    """``strategy.averaging:`` how replicas combine (DynaHB Alg. 2 l. 14–15, SPEC H5)."""

    mode: Literal["allreduce", "async"] = "allreduce"
    """``allreduce``: gradients summed every step (exact); ``async``: local Adam steps on local examples, the
    parameters and both Adam moments averaged in rounds (approximate; one model at every epoch's end)."""
    every_s: float = 1.0
    """``async``: T_mu, seconds of local steps before a rank asks for a round (it goes ahead once all have asked)."""
    every_steps: int = 0
    """``async``: a round after every this many steps instead of ``every_s`` (deterministic); 0 = by time."""

    def __post_init__(self) -> None:
        if not self.every_s > 0:
            raise ValueError("every_s: must be > 0 (seconds between averaging rounds)")
        if self.every_steps < 0:
            raise ValueError("every_steps: must be >= 0 (0 = rounds by every_s)")
        _only_with(self, ("every_s", "every_steps"), self.mode == "async", "mode: async")


#: set while a run's own ``config.resolved.yaml`` is read: what an older hpcdgnn accepted stays readable
#: (resume, embed, predict, load_run), though a new job with it is refused
READING_RESOLVED: ContextVar[bool] = ContextVar("READING_RESOLVED", default=False)


def _only_with(cfg, names: tuple[str, ...], applies: bool, when: str) -> None:
    """Refuse a key of ``cfg`` set away from its default where it would be ignored (the config is strict: an
    option that changes nothing is an error, not a silent no-op) — not in a run's resolved config
    (:data:`READING_RESOLVED`)."""
    if applies:
        return
    for name in _set_away(cfg, names):
        raise ValueError(f"{name}: applies only with {when}, which this section does not set; remove it or set {when}")


def _set_away(cfg, names: tuple[str, ...]) -> list[str]:
    """The keys of ``names`` that ``cfg`` sets away from their defaults: a key given its default value is not told
    from one left out, so an idle-option refusal never refuses a default; none in a run's resolved config
    (:data:`READING_RESOLVED`), which writes out every key."""
    if READING_RESOLVED.get():
        return []
    default = {f.name: f.default for f in fields(cfg)}
    return [name for name in names if getattr(cfg, name) != default[name]]


@dataclass(frozen=True, kw_only=True)
class GridOptions(StrategyConfig):
    """``strategy: {name: grid}``: a snapshot × vertex grid of Ps · Pv = P ranks (IBM §6.5's future work): the
    snapshots split over Ps groups as under ``snapshot``, each snapshot's rows over the Pv ranks of its group
    with a halo exchange as under ``vertex``; every vertex's timeline on one rank of its column for the RNN."""

    name: str = "grid"
    snapshot_ranks: int = 0
    """Ps, the snapshot groups; 0: P / ``vertex_ranks``, or with both 0 the largest divisor of P not above T."""
    vertex_ranks: int = 0
    """Pv, the ranks splitting each snapshot's rows; 0: P / ``snapshot_ranks``."""
    layout: Literal["cyclic", "block"] = "cyclic"
    """Snapshots over the groups: t on group t mod Ps, or contiguous runs."""
    stale: StaleConfig = field(default_factory=StaleConfig)
    """Stale aggregation of the halo rows within a group (DGC §5.2, SPEC D3), as for ``vertex``."""

    def __post_init__(self) -> None:
        if self.snapshot_ranks < 0 or self.vertex_ranks < 0:
            raise ValueError("snapshot_ranks, vertex_ranks: must be >= 0 (0 = derived from P)")


@dataclass(frozen=True, kw_only=True)
class AutoOptions(StrategyConfig):
    """``strategy: {name: auto}``: at start rank 0 runs the planner (``python -m hpcdgnn plan``) at the job's P
    and trains with the fastest predicted strategy that fits the memory budget; the run's first lines and
    ``plan.json`` give its choice and predicted figures, ``config.resolved.yaml`` the strategy it trained with."""

    name: str = "auto"
    candidates: tuple[str, ...] = ()
    """Strategies it may pick (default: the regime's full-batch ones; a sampled one, ``sequences`` or ``hybrid``,
    trains another trajectory and is picked only when listed here)."""
    memory_per_rank: str = ""
    """Each rank's budget, e.g. ``16GiB``; empty: the rank's share of the node's memory (of the GPU's on ``cuda``)."""
    options: dict[str, dict] = field(default_factory=dict)
    """Options of the strategies it may pick, by name (``{snapshot: {blocks: 2}}``); those of a strategy it did
    not pick are reported as unused."""


@dataclass(frozen=True, kw_only=True)
class HybridOptions(StrategyConfig):
    """``strategy: {name: hybrid}``: DynaHB's hybrid batches (§4–5, SPEC H1–H5): N_S consecutive snapshots ×
    N_V target vertices per step, vertices dealt by load (Alg. 1), each rank training the targets it owns
    over the rows it read once; gradients summed every step, or models averaged in rounds (``averaging``)."""

    name: str = "hybrid"
    partition: Literal["load_aware", "hash", "range", "metis"] = "load_aware"
    """Vertex split (H1): DynaHB's Alg. 1 (loads sorted, dealt round-robin), or those of ``vertex``."""
    groups: int = 4
    """N_bg, load-ordered groups per rank; each batch draws N_V/N_bg targets from each (§4.2)."""
    closure: Literal["receptive", "lhop"] = "receptive"
    """Rows a rank reads once (H1): ``receptive``, every row its targets' outputs read (exact); ``lhop``, the
    paper's L hops (graph-recurrent cells then run on the induced subgraph, approximate)."""
    max_cache_mb: float = 0.0
    """Refuse a rank whose read rows (its vertices and their closure) exceed this many MiB; 0 = no limit."""
    snapshot_fractions: tuple[float, ...] = (0.1, 0.2, 0.3)
    """N_S choices as fractions of T (the action space's snapshot sizes; clipped to the training steps)."""
    vertex_fractions: tuple[float, ...] = (0.01, 0.05, 0.1, 0.2)
    """N_V choices as fractions of N (the action space's vertex sizes)."""
    steps_per_epoch: int = 0
    """Optimizer steps per epoch; 0 = one expected pass over the training examples (N·T_train / (N_S·N_V))."""
    adjuster: AdjusterConfig = field(default_factory=AdjusterConfig)
    """How the batch size is chosen (H3)."""
    reservoir: ReservoirConfig = field(default_factory=ReservoirConfig)
    """Built batches kept for reuse (H4)."""
    averaging: AveragingConfig = field(default_factory=AveragingConfig)
    """How replicas combine (H5)."""

    def __post_init__(self) -> None:
        for key in ("snapshot_fractions", "vertex_fractions"):
            values = getattr(self, key)
            if not values:
                raise ValueError(f"{key}: must list at least one fraction")
            bad = [f for f in values if not 0 < f <= 1]
            if bad:
                raise ValueError(f"{key}: {bad[0]!r} is not a fraction in (0, 1]")
        if self.groups < 1:
            raise ValueError("groups: must be >= 1")
        if self.steps_per_epoch < 0:
            raise ValueError("steps_per_epoch: must be >= 0 (0 = one expected pass)")
        if not self.max_cache_mb >= 0:
            raise ValueError("max_cache_mb: must be >= 0 (0 = no limit)")
        start = self.adjuster.start
        if start is not None and (start[0] not in self.snapshot_fractions or start[1] not in self.vertex_fractions):
            raise ValueError(f"adjuster.start: {list(start)} is not an action: pick a snapshot fraction of "
                             f"{list(self.snapshot_fractions)} and a vertex fraction of {list(self.vertex_fractions)}")

    def actions(self) -> list[tuple[float, float]]:
        """The action space SS × VS (DynaHB Def. 5), snapshot fraction major."""
        return [(s, v) for s in self.snapshot_fractions for v in self.vertex_fractions]

    def start_action(self) -> int:
        """Index of the first action: ``adjuster.start``, else 20 % × 5 % (§6.1) if listed, else the middle one."""
        acts = self.actions()
        want = self.adjuster.start or (0.2, 0.05)
        return acts.index(tuple(want)) if tuple(want) in acts else len(acts) // 2


@dataclass(frozen=True, kw_only=True)
class MemoryOptions(StrategyConfig):
    """``strategy: {name: memory}``: DistTGL's i×j×k = P mini-batch × epoch × memory parallelism (§3.2–3.3, SPEC M2).
    Rank r = a + i·(b + j·c); the i·j ranks of memory copy c share one node memory on one node (MPI-3 window)."""

    name: str = "memory"
    minibatch: int = 1
    """i: ranks splitting each global batch chronologically (exact: reproduces one rank with the same batch)."""
    epoch: int = 1
    """j: trainers on one positive batch with different negatives, consecutive iterations (§3.2.2; approximate)."""
    memory: int = 1
    """k: node-memory copies, each from its own time segment (§3.2.3; approximate); weights synchronised."""
    prefetch: Literal["on", "off"] = "on"
    """Build the next batch's neighbours, negatives, row plan and memory writes on a background thread while this
    one trains or is evaluated (one batch's input more in memory; ``off`` builds each in turn)."""

    def __post_init__(self) -> None:
        for key in ("minibatch", "epoch", "memory"):
            if getattr(self, key) < 1:
                raise ValueError(f"{key}: must be >= 1 (i·j·k must equal the number of ranks)")


#: Keys renamed in hpcdgnn 0.2: old dotted key -> new one (a job with the old key is told where it went).
RENAMED_KEYS: dict[str, str] = {
    "train.blocks": "strategy.blocks",
    "train.transfer": "strategy.transfer",
    "stale": "strategy.stale",
}


@dataclass(frozen=True, kw_only=True)
class CommConfig:
    """``comm:`` the communication backend."""

    backend: Literal["mpi", "nccl", "gloo"] = "mpi"
    """``mpi`` (mpi4py; CUDA-aware or staged through pinned buffers), or ``nccl`` / ``gloo`` (``torch.distributed``)."""
    timeout_s: float = 600.0
    """Timeout of ``torch.distributed`` collectives (nccl, gloo): a lost peer ends the job, not hangs it."""
    grad_buckets: int = 1
    """Gradient all-reduce buckets started during the backward (IBM §6.5; MPI, host parameters); 1 = one after it."""
    stall_timeout_s: float = 600.0
    """Seconds with no completed communicator call before the watchdog ends the job (exit 3); 0 = off."""

    def __post_init__(self) -> None:
        if not 0 < self.timeout_s <= MAX_SECONDS:
            raise ValueError(f"timeout_s: must be > 0 and at most {MAX_SECONDS:g} seconds")
        if self.stall_timeout_s < 0:
            raise ValueError("stall_timeout_s: must be >= 0 (0 = no watchdog)")
        if self.grad_buckets < 1:
            raise ValueError("grad_buckets: must be >= 1 (1 = one all-reduce after the backward pass)")


@dataclass(frozen=True, kw_only=True)
class OutputConfig:
    """``output:`` where results go."""

    dir: str = "runs"
    """Parent of run directories; each run gets ``<dir>/<job>-<timestamp>`` unless ``--output`` names one."""
    log_every: int = 1
    """Print the epoch line every this many epochs (metrics.jsonl always gets every epoch)."""
    progress_seconds: float = 30.0
    """An epoch of mini-batches (``sequences``, ``hybrid``, ``memory``) says how many batches it has trained, on
    stderr (rank 0): in a batch log a plain line every this many seconds (an epoch shorter than this prints
    nothing), on a terminal a bar from half a second on; 0 = never. (``prepare``, ``generate`` and the shard
    check: ``$HPCDGNN_PROGRESS_SECONDS``.)"""
    tensorboard: str = ""
    """Rank 0 also writes each epoch's numbers as TensorBoard scalars into this directory, as ``python -m hpcdgnn
    export RUNDIR --tensorboard DIR`` would (step = epoch; needs the tensorboard package); empty = off. A new run
    refuses a directory holding another run's curves (event files with scalars); a resumed run appends its epochs
    in a new event file."""

    def __post_init__(self) -> None:
        _home(self, "dir", "tensorboard")
        if self.log_every < 1:
            raise ValueError("log_every: must be >= 1")
        if self.progress_seconds < 0:
            raise ValueError("progress_seconds: must be >= 0 (0 = never)")


@dataclass(frozen=True, kw_only=True)
class CheckpointConfig:
    """``checkpoint:`` periodic training checkpoints, for restart and pre-emption."""

    every: int = 0
    """Write a checkpoint every this many epochs (0 = by wall time only, see ``every_minutes``)."""
    every_minutes: float = 30.0
    """Also checkpoint at the next epoch boundary once this many wall-clock minutes have passed; 0 = off
    (with ``every`` 0 too: only on pre-emption and at the end)."""
    dir: str = ""
    """Directory of checkpoint files; empty = ``RUNDIR/checkpoints``. A new run needs it new or empty (or holding
    only the claim of a run that has ended), and claims it: ``run_id`` there names the run and its directory."""
    keep: int = 2
    """How many of the newest checkpoints to keep (older ones are deleted after a new one lands)."""

    def __post_init__(self) -> None:
        _home(self, "dir")
        if self.every < 0:
            raise ValueError("every: must be >= 0 (0 = by wall time only)")
        if self.every_minutes < 0:
            raise ValueError("every_minutes: must be >= 0 (0 = no wall-time checkpoints)")
        if self.keep < 1:
            raise ValueError("keep: must be >= 1")


@dataclass(frozen=True, kw_only=True)
class DebugConfig:
    """``debug:`` fault injection, for testing that a failure on one rank ends the whole job."""

    fail_rank: int = -1
    """Rank that raises an exception mid-epoch (after the forward pass, before backward); -1 = none."""
    fail_epoch: int = 1
    """Epoch in which ``fail_rank`` raises."""
    measured_compute: tuple[float, ...] = ()
    """Per-rank compute seconds the ``balance: measured`` re-cut uses instead of timing (to force one: the re-cut
    fits evaluation's cost against training's from them, so the values must differ between ranks with more and
    less evaluation work; docs/how-it-works.md)."""
    delay_rank: int = -1
    """Rank that sleeps ``delay_seconds`` per task call (before loss and backward): a straggler; -1 = none."""
    delay_seconds: float = 0.0
    """The straggler's sleep per task call, seconds."""
    trace_exchanges: bool = False
    """Each rank appends its collectives per epoch to ``trace/exchanges.rank<r>.jsonl`` in the run directory."""
    profile_epoch: int = 0
    """Epoch run under torch's profiler (``profile/rank<r>.txt``, ``.json``; flagged ``profiled``); 0 = none."""

    def __post_init__(self) -> None:
        if self.fail_rank < -1:
            raise ValueError("fail_rank: must be >= -1 (-1 = no fault)")
        if self.fail_epoch < 1:
            raise ValueError("fail_epoch: must be >= 1")
        if self.delay_rank < -1:
            raise ValueError("delay_rank: must be >= -1 (-1 = no straggler)")
        if not 0 <= self.delay_seconds <= MAX_SECONDS:
            raise ValueError(f"delay_seconds: must be >= 0 and at most {MAX_SECONDS:g} seconds")
        if self.profile_epoch < 0:
            raise ValueError("profile_epoch: must be >= 0 (0 = no profile)")


def _default_options(section: str) -> ModelConfig | TaskConfig | StrategyConfig:
    """The ``model:``, ``task:`` or ``strategy:`` section a job without one gets (imported late: the regimes import
    the models and tasks)."""
    from hpcdgnn.regimes import options_class

    default = {"model": ModelConfig, "task": TaskConfig, "strategy": StrategyConfig}[section]
    return options_class(section, default.name)()


@dataclass(frozen=True, kw_only=True)
class JobConfig:
    """The whole job YAML."""

    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=lambda: _default_options("model"))
    task: TaskConfig = field(default_factory=lambda: _default_options("task"))
    train: TrainConfig = field(default_factory=TrainConfig)
    strategy: StrategyConfig = field(default_factory=lambda: _default_options("strategy"))
    comm: CommConfig = field(default_factory=CommConfig)
    output: OutputConfig = field(default_factory=OutputConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    debug: DebugConfig = field(default_factory=DebugConfig)

    def __post_init__(self) -> None:
        for key in ("profile_epoch", "fail_epoch"):
            epoch = getattr(self.debug, key)
            if epoch > self.train.epochs and (key != "fail_epoch" or self.debug.fail_rank >= 0):
                raise ValueError(f"debug.{key}: epoch {epoch} never runs (train.epochs is {self.train.epochs})")
