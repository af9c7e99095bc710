"""Job configuration: one frozen dataclass per YAML section (SPEC "YAML selects everything").

Every field has a type, a default and a docstring line; ``load_job`` fills the
dataclasses strictly (unknown keys and wrong types are errors, nothing is
coerced). Cross-field rules live in ``__post_init__`` and raise ``ValueError``
whose text ``load_job`` prefixes with ``file: section.key:``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

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
    "MemoryOptions",
    "RENAMED_KEYS",
    "CommConfig",
    "OutputConfig",
    "CheckpointConfig",
    "DebugConfig",
    "StaleConfig",
    "JobConfig",
]


#: ``train.threads`` at most: more than any node's cores (torch crashed creating 100,000 threads).
MAX_THREADS = 1024

#: Adam's (β1, β2), torch's defaults, which jobs do not set (:class:`hpcdgnn.optim.Adam`). Its first step moves
#: a parameter by lr / (1 - β1), a scalar converted to the parameters' dtype (a float32 overflow there was a
#: RuntimeError inside ``optimizer.step``): ``train.lr`` is bounded by it.
ADAM_BETAS = (0.9, 0.999)
_FLOAT_MAX = {"float32": 3.4028234663852886e38, "float64": 1.7976931348623157e308}


@dataclass(frozen=True, kw_only=True)
class DataConfig:
    """``data:`` the dataset directory written by ``prepare`` or ``generate``."""

    path: str = ""
    """Dataset directory (relative paths are relative to the working directory)."""
    validate: Literal["checksum", "structure"] = "checksum"
    """Checks rank 0 runs on the dataset before training (``python -m hpcdgnn validate`` runs the
    same): ``checksum`` also hashes every shard against the manifest's sha256; ``structure``
    checks manifest, shapes, dtypes, index ranges and NaN/Inf but skips the hashes (large datasets)."""


@dataclass(frozen=True, kw_only=True)
class ModelConfig:
    """``model:`` the DGNN architecture; ``name`` picks the model, and each model has its own typed options
    (a subclass declared beside the model, named by its regime: :func:`hpcdgnn.regimes.options_class`). An
    option of another model is a config error, never silently ignored."""

    name: str = "cdgcn"
    """Registered model: the snapshot-timeline models ``cdgcn`` (IBM §5.1), ``evolvegcn_o`` (§5.2), ``tmgcn``
    (§5.3), ``tgcn``, ``mpnn_lstm``, ``dysat`` (DGC §7.1) and the integrated graph-RNN cells ``gconv_lstm``,
    ``gconv_gru``, ``tgcn_cell``, ``dcrnn``, ``gcrn_m1`` (ReInc §2.1); the event-stream model ``tgn`` (DistTGL
    §2.1, §3.1)."""
    hidden: int = 16
    """Feature width F' of every layer's output (IBM §6.1 uses 6)."""

    def __post_init__(self) -> None:
        if self.hidden < 1:
            raise ValueError("hidden: must be >= 1")


@dataclass(frozen=True, kw_only=True)
class TaskConfig:
    """``task:`` what the embeddings are trained for, split by time."""

    name: Literal["link_prediction", "node_classification", "regression", "temporal_link_prediction"] = \
        "link_prediction"
    """Link prediction (embeddings of t score edges of t+1), node classification, or regression
    (Z_t forecasts the float node targets of snapshots t..t+horizon-1; MSE loss), or temporal link prediction
    on an event stream (model tgn: each event's destination against ``negatives`` random ones in training,
    MRR against ``eval_negatives`` and AP on validation and test, as TGL reports them)."""
    split: tuple[float, float, float] = (0.7, 0.15, 0.15)
    """Train / validation / test fractions of the prediction steps, in time order."""
    negatives: int = 1
    """Negative pairs per positive edge (link prediction), drawn from the seed."""
    decoder_hidden: int = 16
    """Hidden width of the edge decoder MLP on [z_u, z_v] (link prediction)."""
    horizon: int = 1
    """H, snapshots forecast per step (regression): Z_t predicts the targets stored at t..t+H-1."""
    batch_events: int = 600
    """temporal_link_prediction: events per global mini-batch, in time order (TGL's and DistTGL's 600)."""
    eval_negatives: int = 49
    """temporal_link_prediction: negative destinations ranked against each positive for the MRR (from the
    destination side of a bipartite graph), fixed by ``train.seed`` so every epoch ranks the same ones."""

    def __post_init__(self) -> None:
        if len(self.split) != 3 or any(f < 0 for f in self.split) or abs(sum(self.split) - 1.0) > 1e-9:
            raise ValueError("split: three non-negative fractions summing to 1, e.g. [0.7, 0.15, 0.15]")
        if self.split[0] <= 0:
            raise ValueError("split: the train fraction must be > 0")
        if self.negatives < 1:
            raise ValueError("negatives: must be >= 1")
        if self.decoder_hidden < 1:
            raise ValueError("decoder_hidden: must be >= 1")
        if self.horizon < 1:
            raise ValueError("horizon: must be >= 1")
        if self.batch_events < 1:
            raise ValueError("batch_events: must be >= 1")
        if self.eval_negatives < 1:
            raise ValueError("eval_negatives: must be >= 1")


@dataclass(frozen=True, kw_only=True)
class TrainConfig:
    """``train:`` the optimisation loop."""

    epochs: int = 10
    """Passes over the training data: one full-batch step each for the full-batch strategies (IBM §2.2),
    one step per mini-batch for mini-batch strategies."""
    lr: float = 0.01
    """Adam learning rate."""
    seed: int = 0
    """Seed of parameter initialisation and negative sampling (same on every rank)."""
    dtype: Literal["float32", "float64"] = "float32"
    """Floating-point type of features, parameters and activations."""
    threads: int = 0
    """Torch threads per rank; 0 = the cores the rank is bound to, else (unbound) the node's cores divided
    by the ranks on it."""
    warmup_epochs: int = 1
    """Epochs flagged ``warmup`` in metrics.jsonl so benchmarks can leave them out."""
    device: Literal["auto", "cpu", "cuda"] = "auto"
    """Compute device: ``auto`` = the GPU of this rank's local rank when CUDA is available, else CPU."""
    reuse_memory: bool = True
    """Keep freed host memory in the process (glibc mallopt) so each epoch's large tensors reuse
    pages instead of faulting in fresh ones; the resident size stays at its peak. Under jemalloc
    (``HPCDGNN_MALLOC``, :mod:`hpcdgnn.allocator`: the default where installed) its ``MALLOC_CONF``
    does this, and for blocks above 1 GiB, which mallopt's C int cannot cover."""

    def __post_init__(self) -> None:
        if self.epochs < 1:
            raise ValueError("epochs: must be >= 1")
        if not self.lr > 0:
            raise ValueError("lr: must be > 0")
        if self.lr / (1 - ADAM_BETAS[0]) > _FLOAT_MAX[self.dtype]:  # 1e38 crashed in Adam's first step
            most = _FLOAT_MAX[self.dtype] * (1 - ADAM_BETAS[0])
            raise ValueError(f"lr: must be at most {most!r} in {self.dtype} "
                             f"(Adam's first step is lr / (1 - {ADAM_BETAS[0]}))")
        if not 0 <= self.threads <= MAX_THREADS:  # torch crashed creating 100,000 threads
            raise ValueError(f"threads: must be in [0, {MAX_THREADS}] (torch threads of one rank; 0 = automatic)")
        if self.warmup_epochs < 0:
            raise ValueError("warmup_epochs: must be >= 0")


@dataclass(frozen=True, kw_only=True)
class StaleConfig:
    """``strategy.stale:`` (vertex, chunk) adaptive stale aggregation of remote embeddings (DGC §5.2, SPEC D3).

    An approximation.

    A rank sends a halo row again only if it moved more than θ_r (L2) from the value it last sent;
    the receiver reuses its cached copy otherwise (no gradient flows through a reused row).
    θ_r = ``theta`` · D_r with ``static``, and ``theta`` · D_r · tanh(norm(l_{r-1}) / 2) with
    ``adaptive``, where D_r is the largest such move in epoch r and norm(l) = (l_1 - l) / l_1 the
    relative loss decrease: θ starts at 0 and grows as the loss falls, which is what DGC's text asks
    for (its Eq. 6 as printed would shrink θ instead; see hpcdgnn/strategies/stale.py).
    """

    mode: Literal["off", "static", "adaptive"] = "off"
    """``off``: exact halo exchange; ``static``: θ = theta·D; ``adaptive``: θ grows as the loss falls."""
    theta: float = 0.5
    """Fraction of D_r (the largest move in the epoch): the static threshold, or the adaptive one's ceiling."""

    def __post_init__(self) -> None:
        if not 0 <= self.theta <= 1:
            raise ValueError("theta: must be in [0, 1] (a fraction of the largest embedding move D_r)")


@dataclass(frozen=True, kw_only=True)
class StrategyConfig:
    """``strategy:`` how work and data are partitioned over ranks; ``name`` picks the strategy and each
    strategy has its own typed options (the subclasses below, named by its regime:
    :func:`hpcdgnn.regimes.options_class`). An option of another strategy is a config error, never silently
    ignored."""

    name: str = "snapshot"
    """Registered strategy: ``snapshot`` (IBM §4.2, S1), ``pss`` (DGC §2.1), ``vertex`` (S6), ``chunk`` (D1),
    ``sequences`` (ReInc §3.4, R1/R4), ``memory`` (DistTGL §3.2, M2; event streams)."""


@dataclass(frozen=True, kw_only=True)
class SnapshotOptions(StrategyConfig):
    """``strategy: {name: snapshot}``: whole snapshots per rank, redistributed to vertex ranges for the
    RNN (IBM §4.2, SPEC S1), with checkpoint blocks (S2) and graph-difference transfer (S3)."""

    layout: Literal["auto", "cyclic", "block"] = "auto"
    """Snapshot t on rank t mod P: every rank gets the same mix of training and evaluation snapshots,
    so each phase between two exchanges is balanced (measured faster than blocks); or contiguous
    blocks as in IBM §4.2. ``auto``: blocks when every time-mixing layer is banded and ``time_halo``
    can replace its redistributions (TM-GCN without checkpoint blocks), else cyclic."""
    balance: Literal["count", "work", "measured"] = "work"
    """With ``layout: block``: blocks of equal count (IBM's T/P), of equal estimated work, or ``measured``:
    equal estimated work, then re-cut once after epoch C = max(``train.warmup_epochs``, 4) with the
    evaluation snapshots' cost fitted to the ranks' measured compute times (each rank's median over epochs
    2..C; epochs up to C count as warm-up, so the steady ones all run the final plan; no re-cut in a run
    of C epochs or fewer; a run resumed at epoch R < C re-cuts after max(C, R + 4), from epochs R + 2 on;
    the new plan in ``plan.json``, the first kept as ``plan.before-epoch-C.json``; results as exact as
    any plan)."""
    blocks: int = 1
    """Gradient-checkpoint blocks nb (IBM §3.1, SPEC S2): keep only block-boundary state and re-run
    each block's forward during the backward pass; 1 = no checkpointing."""
    transfer: Literal["base", "graph_difference"] = "graph_difference"
    """How snapshots move from host to device memory (IBM §3.2, SPEC S3): ``base`` sends each one as
    (index, value) pairs (COO, int64 indices, IBM's baseline); ``graph_difference`` sends the first
    snapshot of each block as CSR and each next one as its difference from the previous."""
    overlap_chunks: int = 1
    """Hide the redistributions behind the time encoder (IBM §6.5): cut each rank's vertex range into
    this many chunks, post their non-blocking exchanges (all at once; with a progress thread on every rank,
    ``comm.progress``, each one chunk ahead of the wait) and encode chunk k while chunks k+1.. travel, its
    output sent back at once (backward likewise; a first layer whose constant Ã·X already lives on the
    vertex owners only sends back); 1 = one blocking exchange each way. Same results (rows of distinct
    vertices never mix in the RNN); off at P = 1."""
    time_halo: Literal["on", "off"] = "on"
    """Banded time encoders (TM-GCN's M-transform over w steps) stay on the owned snapshots: each rank
    receives only the w - 1 snapshots before each of its runs of consecutive snapshots that it does not
    own, instead of the two redistributions (exact; with ``layout: block`` about (w-1)/T of their bytes).
    Off: IBM §4.2's redistribution, as for every other encoder. Not with ``blocks`` > 1."""

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
    """Contiguous blocks of equal count, of equal estimated work, or re-cut once after the warm-up epochs
    from measured compute times (``measured``, as for ``snapshot``)."""
    transfer: Literal["base", "graph_difference"] = "graph_difference"
    """Host-to-device snapshot transfer (SPEC S3), as for ``snapshot``."""


@dataclass(frozen=True, kw_only=True)
class VertexOptions(StrategyConfig):
    """``strategy: {name: vertex}``: vertex sets for the whole timeline, halo exchange per GCN (IBM §4.1, S6)."""

    name: str = "vertex"
    partition: Literal["range", "hash", "metis"] = "range"
    """Vertices split into contiguous id ranges, by a hash of the id, or by METIS on the union of all
    snapshots (the optional ``pymetis`` package)."""
    stale: StaleConfig = field(default_factory=StaleConfig)
    """Stale aggregation of halo rows (DGC §5.2, SPEC D3)."""


@dataclass(frozen=True, kw_only=True)
class ChunkOptions(StrategyConfig):
    """``strategy: {name: chunk}``: vertex appearances partitioned by DGC's chunks (§4, SPEC D1), fusion (D2)."""

    name: str = "chunk"
    chunk_size: int = 4096
    """Largest chunk, in vertex appearances (DGC §4.1's size cap)."""
    sequences: Literal["all", "active"] = "all"
    """What a vertex's time encoder runs over. ``all``: every snapshot, as the
    other strategies (exact against them); ``active``: only the snapshots where the vertex has an edge
    (DGC's temporal sequences, §5.1.2: a chunk holds only active appearances), the state carried over
    the gaps; inactive appearances output zeros. A different model, so compare it with itself at P = 1.
    Needs a model whose time encoder is a GRU or LSTM (tgcn, cdgcn, mpnn_lstm)."""
    fusion: Literal["off", "on"] = "on"
    """Chunk fusion (DGC §5.1). Spatial: a rank's chunks that read each other's
    rows are aggregated together, in groups of at most ``fusion_memory_mb``; ``off`` aggregates chunk by
    chunk (DGC's "one by one"). Temporal, with ``sequences: active``: sequences are packed end to end
    with the state masked at their boundaries (Eq. 4–5); ``off`` pads each to the longest. Outputs are
    identical either way."""
    fusion_memory_mb: float | Literal["auto"] = "auto"
    """Estimated memory cap of one fused group (rows in and out at the widest layer, plus its entries of Ã).
    ``auto``: DGC's cap, the memory of the rank's device (§5.1.1: fuse until "close to GPU memory limit"),
    i.e. its GPU's memory shared among the ranks that use that GPU, or on the CPU the node's RAM (the
    job's cgroup limit when lower) shared among the node's ranks."""
    workload: Literal["count", "mlp"] = "count"
    """Chunk workload g_a of the assignment (DGC §4.2, Alg. 1): ``count`` =
    appearances + spatial edges; ``mlp`` = DGC §6's two MLPs (structure + time encoder seconds)
    profiled on this machine by ``python -m hpcdgnn profile``."""
    predictor: str | None = None
    """``workload: mlp``: the predictor file; null = this machine's default
    (``$HPCDGNN_CACHE`` or ``~/.cache/hpcdgnn``, ``workload-<cpu or gpu>-<model>-<device>-<dtype>.pt``)."""
    stale: StaleConfig = field(default_factory=StaleConfig)
    """Stale aggregation of halo rows (DGC §5.2, SPEC D3), as for ``vertex``."""

    def __post_init__(self) -> None:
        if self.chunk_size < 1:
            raise ValueError("chunk_size: must be >= 1")
        if self.fusion_memory_mb != "auto" and not self.fusion_memory_mb > 0:
            raise ValueError("fusion_memory_mb: must be > 0")
        if self.predictor is not None and self.workload != "mlp":
            raise ValueError("predictor: is read only with workload: mlp; remove it or set workload: mlp")


@dataclass(frozen=True, kw_only=True)
class SequencesOptions(StrategyConfig):
    """``strategy: {name: sequences}``: sample-based data-parallel training (ReInc §3.4, SPEC R1, R4): sliding
    windows of ``window`` snapshots × mini-batches of ``batch_vertices`` vertices with their sampled k-hop
    computational graphs; each rank owns consecutive windows and a model replica; gradients summed."""

    name: str = "sequences"
    window: int = 4
    """L, the snapshots of one sequence (sliding window); its last step is the one the task scores."""
    stride: int = 1
    """Snapshots between the starts of consecutive sequences."""
    batch_vertices: int = 0
    """Vertices per node batch (link prediction: the pairs' sources), drawn without replacement from a
    permutation seeded by (train.seed, epoch); 0 = all N in one batch."""
    fanouts: tuple[int, ...] = ()
    """Neighbours sampled per vertex and step, one number per model layer, nearest the batch first (PyG's
    ``num_neighbors`` order: ``[25, 10]`` samples 25 per batch vertex, then 10 per 1-hop vertex); 0 in a slot
    = all of them; ``[]`` = full neighbourhoods (exact k-hop computational graphs)."""
    placement: Literal["overlap", "fetch"] = "overlap"
    """R1 (§3.4.1): each rank reads its consecutive block of snapshots plus the window - 1 after it
    (``overlap``: no input traffic), or only its block, pulling the others from their owners once per
    epoch (``fetch``, counted under ``placement.fetch``)."""
    order: Literal["seq_first", "node_first"] = "seq_first"
    """R4 (§3.4.3): all sequences for a node batch before the next batch (``seq_first``, ReInc's), or all
    node batches of a sequence before the next sequence (``node_first``, as static GNNs iterate)."""
    batch_samples: int = 0
    """Samples (sequence × node batch) per optimizer step, over all ranks, taken in ``order``; 0 = the
    number of training sequences (with ``seq_first``: one node batch over every training sequence, each
    rank running its own — ReInc's lockstep). Depends on neither P nor the placement."""
    incremental: Literal["on", "off"] = "on"
    """R2 (§3.2, Eq. 2): when the first layer aggregates a constant (Ã_t·X_t, SPEC S4) over full
    neighbourhoods (its fanout 0, or ``fanouts: []``), each rank computes it once for the snapshots it
    holds — ``on``: each from the previous one, Agg_t = Agg_{t-1} − F·G⁻_t + F·G⁺_t, recomputing only the
    rows whose entries changed (:mod:`hpcdgnn.nn.conv.incremental`); ``off``: every snapshot from scratch.
    Same values either way; samples then read their rows instead of aggregating X."""
    incremental_threshold: float = 0.5
    """With ``incremental: on``: a snapshot whose changed entries exceed this fraction of its entries is
    aggregated from scratch instead (the fraction of rows recomputed is in metrics.jsonl)."""

    reuse: Literal["on", "off"] = "on"
    """R3 (ReInc §3.1, §3.3): samples read the first layer's Ã_t·X_t — over full neighbourhoods a value of
    snapshot t alone — from a reuse cache (:mod:`hpcdgnn.nn.reuse_cache`) shared by overlapping windows,
    node batches, splits and epochs, filled at setup by R2 and bounded by ``cache_mb``; ``off``: every
    sample aggregates its own first layer. The same losses either way (up to rounding); metrics.jsonl
    ``reuse`` reports the cache per epoch. Sampled first layers and hidden layers have nothing to share
    between samples (:mod:`hpcdgnn.strategies.sequences` says why)."""
    cache_mb: float = 256.0
    """With ``reuse: on``: the cache's bound, MiB per rank (the global level; the local level is a counter
    and holds nothing); a value it does not hold is recomputed from scratch when read. It must hold at
    least one snapshot's Ã_t·X_t (N × F values) or input basis (N × K·F for Chebyshev cells) when samples
    read it; less is a one-line error."""
    cache_policy: Literal["priority", "lru"] = "priority"
    """With ``reuse: on``: evict by ReInc's Eq. 3 priority F/S − I (F: this rank's reads of the value left in
    this epoch and the next, I: reads of other values before its next one, S: its size in snapshot
    aggregations; it expires when F = 0), or least recently used (``lru``, for comparison)."""

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


@dataclass(frozen=True, kw_only=True)
class MemoryOptions(StrategyConfig):
    """``strategy: {name: memory}``: DistTGL's mini-batch × epoch × memory parallelism i×j×k = P over an event
    stream with a node memory (§3.2–3.3, SPEC M2). Ranks r = a + i·(b + j·c): mini-batch slice a, epoch
    trainer b, memory copy c; the i·j ranks of a memory copy share one node memory (an MPI-3 shared window
    on their node) and must run on one node."""

    name: str = "memory"
    minibatch: int = 1
    """i: ranks splitting each global batch chronologically (exact: reproduces one rank with the same batch)."""
    epoch: int = 1
    """j: trainers working on the same positive batch with j different negative sets on j consecutive
    iterations, only the first writing the memory (§3.2.2; an approximation)."""
    memory: int = 1
    """k: independent node-memory copies, each walking the time segments of the training events in order
    from a different segment (§3.2.3; an approximation); only weights are synchronised."""
    prefetch: Literal["on", "off"] = "on"
    """Sample the next mini-batch's neighbours and negatives on a background thread while this one trains."""

    def __post_init__(self) -> None:
        if min(self.minibatch, self.epoch, self.memory) < 1:
            raise ValueError("minibatch, epoch, memory: must be >= 1 (i·j·k must equal the number of ranks)")


#: Keys that moved in hpcdgnn 0.2: old dotted key -> new one (a job with the old key is told where it went).
RENAMED_KEYS: dict[str, str] = {
    "train.blocks": "strategy.blocks",
    "train.transfer": "strategy.transfer",
    "stale": "strategy.stale",
}


@dataclass(frozen=True, kw_only=True)
class CommConfig:
    """``comm:`` the communication backend."""

    backend: Literal["mpi", "nccl", "gloo"] = "mpi"
    """Collective library: ``mpi`` (mpi4py; CUDA-aware when the MPI library says so, else staged
    through pinned host buffers) or ``nccl`` / ``gloo`` through ``torch.distributed``, initialised
    from MPI. Setup and metrics always go through MPI."""
    timeout_s: float = 600.0
    """Timeout of ``torch.distributed`` collectives (nccl, gloo): a lost peer ends the job, not hangs it."""
    grad_buckets: int = 1
    """The gradient all-reduce cut into this many buckets (about equal bytes, last layers first), each
    started with a non-blocking all-reduce during the backward pass as soon as its gradients are
    complete (:mod:`hpcdgnn.comm.buckets`; IBM §6.5). 1 = one all-reduce after the backward pass. Over
    ``gloo``/``nccl`` or with CUDA parameters the single all-reduce runs whatever this says."""
    progress: Literal["calls", "thread", "auto"] = "calls"
    """Who moves the non-blocking exchanges (``strategy.overlap_chunks`` > 1, ``grad_buckets`` > 1, the halo's
    sends) while the rank computes (:mod:`hpcdgnn.comm.progress`): ``calls`` — the training thread, inside its
    MPI calls (Open MPI's only progress: the copy then runs on the computing core); ``thread`` — a progress
    thread per rank, so the copy runs on another core (with a core of its own it waits inside MPI, else it
    polls); ``auto`` — ``thread`` where each rank of the node has a core to spare beside its ``train.threads``
    (else ``calls``). Results are the same either way. ``calls`` is the default until whole epochs, not only
    their exposed time, are measured faster with the thread."""
    stall_timeout_s: float = 600.0
    """Stall watchdog (:mod:`hpcdgnn.comm.watchdog`): a rank that completes no communicator call for
    this long (stopped, hung, or computing longer than that between two collectives) ends the job
    with exit 3, naming the rank and the collective; 0 = off. Active from the first epoch."""

    def __post_init__(self) -> None:
        if not self.timeout_s > 0:
            raise ValueError("timeout_s: must be > 0")
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

    def __post_init__(self) -> None:
        if self.log_every < 1:
            raise ValueError("log_every: must be >= 1")


@dataclass(frozen=True, kw_only=True)
class CheckpointConfig:
    """``checkpoint:`` periodic training checkpoints, for restart and pre-emption."""

    every: int = 0
    """Write a checkpoint every this many epochs (0 = by wall time only, see ``every_minutes``)."""
    every_minutes: float = 30.0
    """Also write one when this many minutes of wall time have passed since the last (or since the
    start), at the next epoch boundary; 0 = off. With both 0: only on pre-emption and at the end."""
    dir: str = ""
    """Directory of checkpoint files; empty = ``RUNDIR/checkpoints``."""
    keep: int = 2
    """How many of the newest checkpoints to keep (older ones are deleted after a new one lands)."""

    def __post_init__(self) -> None:
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
    """Per-rank compute seconds that ``strategy.balance: measured`` takes instead of the measured ones
    (one per rank), so a test can force a re-cut; empty = measure."""
    delay_rank: int = -1
    """Rank that sleeps ``delay_seconds`` at each call of the task (after the forward pass, before the loss
    and backward): a straggler, so a test can check whom the wait accounting blames (``comm_late``); -1 = none."""
    delay_seconds: float = 0.0
    """The straggler's sleep per task call, seconds."""
    trace_exchanges: bool = False
    """Each rank appends, per epoch, its collectives of all ranks (tag, arrival, seconds blocked, of them
    late) to ``trace/exchanges.rank<r>.jsonl`` in the run directory (:mod:`hpcdgnn.metrics.epoch`)."""
    profile_epoch: int = 0
    """That epoch runs under torch's profiler on every rank, each writing its operators' time to
    ``profile/rank<r>.txt`` and ``.json`` in the run directory (:mod:`hpcdgnn.metrics.op_profile`); 0 = none.
    Its wall time includes the profiler's overhead: flagged ``profiled``, out of the steady median."""

    def __post_init__(self) -> None:
        if self.fail_rank < -1:
            raise ValueError("fail_rank: must be >= -1 (-1 = no fault)")
        if self.fail_epoch < 1:
            raise ValueError("fail_epoch: must be >= 1")
        if self.delay_rank < -1:
            raise ValueError("delay_rank: must be >= -1 (-1 = no straggler)")
        if not self.delay_seconds >= 0:
            raise ValueError("delay_seconds: must be >= 0")
        if self.profile_epoch < 0:
            raise ValueError("profile_epoch: must be >= 0 (0 = no profile)")


def _default_options(section: str) -> ModelConfig | StrategyConfig:
    """The ``model:`` or ``strategy:`` section a job without one gets: the options of the default name (the
    regimes name the classes, and they import the models: hence here, not at import)."""
    from hpcdgnn.regimes import options_class

    default = {"model": ModelConfig, "strategy": StrategyConfig}[section]
    return options_class(section, default.name)()


@dataclass(frozen=True, kw_only=True)
class JobConfig:
    """The whole job YAML."""

    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=lambda: _default_options("model"))
    task: TaskConfig = field(default_factory=TaskConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    strategy: StrategyConfig = field(default_factory=lambda: _default_options("strategy"))
    comm: CommConfig = field(default_factory=CommConfig)
    output: OutputConfig = field(default_factory=OutputConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    debug: DebugConfig = field(default_factory=DebugConfig)

    def __post_init__(self) -> None:
        if self.debug.profile_epoch > self.train.epochs:
            raise ValueError(f"debug.profile_epoch: epoch {self.debug.profile_epoch} never runs "
                             f"(train.epochs is {self.train.epochs})")
