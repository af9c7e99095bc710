"""The event-stream regime (SPEC family C): TGN-attn with GRU and static node memory (DistTGL §2.1, §3.1, M1)
for temporal link prediction, under ``memory`` parallelism (§3.2–3.3, M2)."""

from __future__ import annotations

from hpcdgnn.config.schema import JobConfig, MemoryOptions
from hpcdgnn.data.events import load_event_manifest
from hpcdgnn.errors import ConfigError
from hpcdgnn.nn.models.tgn import TGN, TGNOptions
from hpcdgnn.regimes.base import RegimeSpec, counted_parameters, item_bytes, parameter_bytes, register_regime
from hpcdgnn.tasks import build_task, task_class
from hpcdgnn.tasks.temporal_link_prediction import TemporalLinkPrediction

__all__ = ["EVENTS"]


def build_model(job: JobConfig, manifest) -> TGN:
    """TGN over the stream's N nodes and D edge features, Δt in the stream's own unit (``model.time_scale``)."""
    m = job.model
    scale = (getattr(manifest, "time_gap", None) or 1.0) if m.time_scale == "auto" else m.time_scale
    return TGN(manifest.num_vertices, manifest.edge_feature_dim, m.memory_dim, m.time_dim, m.hidden, m.heads,
               m.static_memory == "on", m.time_encoding == "learnable", scale, m.memory_time == "event")


def footprint(job: JobConfig, manifest, num_ranks: int) -> dict[str, tuple[int, str]]:
    """Lower bounds of a rank's bytes: parameters (TGN's and its link predictor's, counted exactly, with Adam's
    moments), and one batch slice's roots — (2 + negatives) per event of its ⌈batch_events / minibatch⌉ in
    training, (2 + eval_negatives) per event of its ⌈batch_events / (minibatch · epoch)⌉ in evaluation (a TGB
    stream's fixed negatives: their mean count), at most
    N under a ``per_batch`` protocol (each node once) — each holding its memory and embedding and, for each of
    its ``neighbors`` slots, the edge's features and the attention's key and value (counted for every slot,
    filled or padded: an estimate where neighbourhoods are sparse; evaluation's dense batches hold the slot's
    memory row and Φ instead of key and value, whichever is less), and evaluation's scored pairs their
    destination's product row; and the node memory (:class:`~hpcdgnn.strategies.node_memory.NodeMemory`: N rows of
    d + mail values, N times, N mails' gaps under ``memory_time: event``), one copy a memory group shared by at
    most its i·j ranks."""
    m, task, s = job.model, job.task, job.strategy
    b, n = task.batch_events, manifest.num_vertices
    i, j = getattr(s, "minibatch", 1), getattr(s, "epoch", 1)
    D = getattr(manifest, "edge_feature_dim", 0)
    per_root = m.memory_dim + m.hidden + m.neighbors * (D + 2 * m.hidden)
    per_eval_root = m.memory_dim + m.hidden + m.neighbors * (D + min(2 * m.hidden, m.memory_dim + m.time_dim))
    train_roots = (2 + task.negatives) * -(-b // i)
    ranked = TemporalLinkPrediction.ranked_negatives(task, manifest)
    pairs = int((2 + ranked) * -(-b // (i * j)))
    eval_roots = min(pairs, n) if task.eval_protocol == "per_batch" else pairs
    train = (min(train_roots, n) if task.train_protocol == "per_batch" else train_roots) * per_root
    evaluation = eval_roots * per_eval_root + pairs * m.hidden
    if train >= evaluation:  # capped at N, a per_batch slice no longer grows with its negatives or events
        keys = ("model.neighbors, model.hidden" if task.train_protocol == "per_batch" and train_roots > n else
                "task.negatives, model.neighbors, task.batch_events, model.hidden")
    else:
        drawn = "task.eval_negatives, " if manifest.eval_negatives is None else ""  # TGB's are the dataset's
        keys = f"{drawn}model.neighbors, task.batch_events, model.hidden, model.memory_dim, model.time_dim"
    weights = counted_parameters(job, lambda: build_model(job, manifest),
                                 lambda: build_task(job.task, manifest, m.hidden, 0))
    widths = "model.memory_dim, model.hidden, model.time_dim" + (", model.static_memory" * (m.static_memory == "on"))
    from hpcdgnn.strategies.node_memory import NodeMemory  # the strategies register against the regimes

    rows = NodeMemory.size(n, m.memory_dim, 2 * m.memory_dim + D, item_bytes(job), m.memory_time == "event")
    return {"parameters": parameter_bytes(job, weights, widths),
            "tgn batch": (item_bytes(job) * max(train, evaluation), keys),
            "node memory": (-(-rows // (i * j)), "model.memory_dim (with the stream's N nodes)")}


def check(job: JobConfig, where: str | None, num_ranks: int) -> None:
    """An event stream's split is the dataset's, fixed at ``prepare --kind events``: ``task.split`` is refused,
    whatever its value (given in the file or by ``--set``; the task's default None is none given)."""
    if job.task.split is not None:
        raise ConfigError(f"{where}: task.split: an event stream's split is the dataset's (prepare --kind events "
                          "--split; from Python the adapters' split=, from_temporal_data(data, output, split=(0.7, "
                          "0.15, 0.15))); remove task.split")


EVENTS = register_regime(RegimeSpec(
    name="events",
    title="the event-stream regime (DistTGL)",
    data_kind="events",
    data_title="an event-stream dataset",
    data_made_by="prepare --kind events",
    models={"tgn": TGNOptions},
    tasks={"temporal_link_prediction": task_class("temporal_link_prediction").options},
    strategies={"memory": MemoryOptions},
    load_manifest=load_event_manifest,
    build_model=build_model,
    build_task=build_task,
    footprint=footprint,
    check=check,
    empty_split="the stream's {split} split holds no events (see 'python -m hpcdgnn inspect'; events at one "
                "time stay in one split): prepare it again with a larger {split} share of --split",
))
