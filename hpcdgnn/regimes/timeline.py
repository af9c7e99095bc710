"""The snapshot-timeline regime: T snapshots over one vertex universe (SPEC families A and B): full batch
(``snapshot``, ``pss``, ``vertex``, ``chunk``, ``grid``), sampled sequences (``sequences``, ReInc §3) and hybrid batches
(``hybrid``, DynaHB §4–5); ``auto`` has the planner pick one of them at start (:mod:`hpcdgnn.planner`)."""

from __future__ import annotations

from hpcdgnn.config.schema import (
    AutoOptions,
    ChunkOptions,
    GridOptions,
    HybridOptions,
    JobConfig,
    PSSOptions,
    SequencesOptions,
    SnapshotOptions,
    VertexOptions,
)
from hpcdgnn.data.manifest import load_manifest
from hpcdgnn.errors import ConfigError
from hpcdgnn.nn.models import (
    GraphCellOptions,
    build_encoder_decoder,
    build_from_options,
    meta_layers,
    needs_step_graphs,
    registered_options,
)
from hpcdgnn.regimes.base import (
    RegimeSpec,
    counted_parameters,
    item_bytes,
    meta_build,
    parameter_bytes,
    register_regime,
)
from hpcdgnn.tasks import build_task, task_class

__all__ = ["TIMELINE"]

#: the strategy and task an encoder–decoder forecasts under (sampled windows, regression targets)
_FORECAST = {"strategy": "sequences", "task": "regression"}


def build_model(job: JobConfig, manifest):
    """The DGNN on F input features; an encoder–decoder cell forecasts ``task.horizon`` values itself (no task head)."""
    m = job.model
    if isinstance(m, GraphCellOptions) and m.encoder_decoder:
        return build_encoder_decoder(m.name, manifest.num_features, m.hidden, m.layers, 3, m.order, job.task.horizon)
    return build_from_options(m, manifest.num_features)


def model_parameters(job: JobConfig, manifest) -> int:
    """The parameters of :func:`build_model`'s model, counted on the meta device; of L > 2 layers (F -> H, then
    L - 1 alike H -> H, in the encoder and the decoder alike) from its first two, so a deep stack is not built."""
    from dataclasses import replace

    def count(layers: int) -> int:
        return counted_parameters(job, lambda: build_model(replace(job, model=replace(job.model, layers=layers)),
                                                           manifest))

    L = job.model.layers
    if L <= 2:
        return count(L)
    one, two = count(1), count(2)
    return one + (L - 1) * (two - one)


def footprint(job: JobConfig, manifest, num_ranks: int) -> dict[str, tuple[int, str]]:
    """Lower bounds of a rank's bytes (:mod:`hpcdgnn.train.footprint`): parameters, full-batch activations of
    T·N/P rows (one checkpoint block's, IBM §3.1) and the graph-RNN cells' bases over its training steps, and
    one step's task examples."""
    from dataclasses import replace

    from hpcdgnn.strategies import get_strategy

    m, task = job.model, job.task
    k = getattr(m, "order", 1)  # the K basis terms of a Chebyshev or diffusion cell's layers, else 1
    head, pairs, epoch_pairs = task_class(task.name).footprint(task, manifest, m.hidden)
    order = ", model.order" if hasattr(m, "order") else ""
    keys = f"model.hidden, model.layers{order}, task.decoder_hidden"
    parts = {"parameters": parameter_bytes(job, model_parameters(job, manifest) + head, keys)}
    if get_strategy(job.strategy.name).full_batch:
        T, N = manifest.num_snapshots, manifest.num_vertices
        share = num_ranks * max(1, getattr(job.strategy, "blocks", 1))
        # autograd keeps the steps up to the training horizon (a causal model's later steps run without it), at
        # most a share split[0] of the T steps counted here; layers 2..L are alike: two are built
        layers = meta_layers(replace(m, layers=min(m.layers, 2)), manifest.num_features)
        steps = task.split[0] * T
        if all(ly.causal for ly in layers):
            steps = min(steps, task_class(task.name).train_horizon(task, manifest) + 1)
        rows, kept = T * N // share, steps * N / share
        activations = rows * m.hidden + kept * (m.layers - 1) * k * m.hidden
        parts["activations"] = (int(item_bytes(job) * activations), f"model.hidden, model.layers{order}")
        # a graph-RNN cell's gates read bases (GraphRecurrentLayer), kept for the backward: its input's, one
        # tensor as wide as w_x has rows (K blocks of F_in; 2K - 1 for diffusion), and each step's of its state
        # after the first, one per w_h* (GRU: H_{t-1} and H_{t-1} ⊙ R_t), as wide as its rows. The deeper
        # layers' input bases are the activations' K·hidden.
        if needs_step_graphs(m.name):
            state = [sum(p.shape[0] for name, p in ly.named_parameters() if name.startswith("w_h")) for ly in layers]
            basis = (kept * layers[0].w_x.shape[0]
                     + max(0.0, steps - 1) * N / share * (state[0] + (m.layers - 1) * state[-1]))
            parts["basis"] = (int(item_bytes(job) * basis), "model.order, model.hidden")
        # every training step's examples are alive until the epoch's backward: the most loaded rank holds at
        # least their average share (whole snapshots, or in place its rows' share of each)
        pairs = max(pairs, epoch_pairs // num_ranks) if pairs else 0
    if pairs:
        parts["pairs"] = (pairs, "task.negatives")
    return {**parts, **get_strategy(job.strategy.name).footprint(job, manifest, num_ranks)}


def check(job: JobConfig, where: str | None, num_ranks: int) -> None:
    """Refuse the encoder–decoder outside ``regression`` under ``sequences``, a pooling model (EvolveGCN-H) under a
    sampled strategy, and a graph-convolving time encoder under a strategy that cannot give it each step's graph
    at this rank count (``Strategy.step_graphs_at``)."""
    from hpcdgnn.strategies import get_strategy

    m, s = job.model, job.strategy.name
    get_strategy(s).check_job(job, num_ranks, where)
    if isinstance(m, GraphCellOptions) and m.encoder_decoder and \
            (job.task.name != _FORECAST["task"] or s != _FORECAST["strategy"]):
        raise ConfigError(f"{where}: model.encoder_decoder: true forecasts task.name: regression from windows of "
                          f"strategy.name: sequences, not {job.task.name} under {s}; set those, or "
                          "encoder_decoder: false")
    # only a sampled strategy builds the layers here (building many on meta is slow, and a full-batch job's
    # footprint bounds them first); a width whose weight overflows a byte count (1e9 hidden) is one line
    pools = False
    if not get_strategy(s).full_batch:
        try:
            with meta_build(job):
                pools = any(ly.pool_rows for ly in meta_layers(m))
        except ConfigError as e:
            raise ConfigError(f"{where}: {e}" if where else str(e)) from None
    if pools:
        full = [n for n in TIMELINE.strategies if get_strategy(n).full_batch]  # every one pools over all ranks
        raise ConfigError(f"{where}: model.name: {m.name} pools the top-k of every vertex of each snapshot, which "
                          f"strategy.name: {s} samples; use a full-batch strategy ({', '.join(full[:-1])} or "
                          f"{full[-1]})")
    if not needs_step_graphs(m.name):
        return
    def can(name: str) -> bool:
        return getattr(get_strategy(name), "step_graphs_at", lambda _: False)(num_ranks)

    if not can(s):
        ranks = f"{num_ranks} rank{'s' if num_ranks != 1 else ''}"
        raise ConfigError(
            f"{where}: model.name: {m.name} convolves its recurrent state over each snapshot's graph, which "
            f"strategy.name: {s} cannot give its time encoder at {ranks}; use strategy.name: "
            f"{' or '.join(n for n in TIMELINE.strategies if can(n))} at {ranks}"
            + (", or snapshot on 1 rank" if num_ranks > 1 else "")
        )


TIMELINE = register_regime(RegimeSpec(
    name="timeline",
    title="the snapshot-timeline regime (IBM, DGC, ReInc)",
    data_kind="snapshots",
    data_title="a snapshot dataset",
    data_made_by="prepare, generate",
    models=registered_options(),  # live: a model a script registers later is known too
    tasks={name: task_class(name).options for name in ("link_prediction", "node_classification", "regression")},
    strategies={"snapshot": SnapshotOptions, "pss": PSSOptions, "vertex": VertexOptions, "chunk": ChunkOptions,
                "grid": GridOptions, "sequences": SequencesOptions, "hybrid": HybridOptions, "auto": AutoOptions},
    load_manifest=load_manifest,
    build_model=build_model,
    build_task=build_task,
    footprint=footprint,
    check=check,
    empty_split="task.split's {split} snapshots hold no examples (too few snapshots, or empty ones: see "
                "'python -m hpcdgnn inspect'); widen it or cut the data by events",
))
