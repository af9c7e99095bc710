"""The layer contract every DGNN model follows, and the model registry (IBM §2.2).

A layer is a GCN per snapshot (*spatial*, snapshot-local) followed by an RNN per vertex along time
(*temporal*, vertex-local); strategies move rows between the two layouts, so models never see ranks.
Recurrent state is explicit (STYLE G7) so a block of time can be re-run from boundary data (SPEC S2).
Integrated graph-RNN cells (ReInc §2.1) set ``graph_recurrent`` and get each step's graph
(:meth:`~hpcdgnn.nn.layout.Layout.step_graphs`); :class:`GraphRecurrentLayer` is their frame."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Literal

import torch
from torch import nn

from hpcdgnn.config.schema import ModelConfig
from hpcdgnn.nn.conv.graph import LocalGraph
from hpcdgnn.nn.layout import Layout, joined

__all__ = ["DynamicLayer", "DGNN", "GraphCellOptions", "GraphModelOptions", "GraphRecurrentLayer", "StepParams",
           "register_model", "build_model", "build_from_options", "available_models", "meta_layers",
           "model_options", "needs_step_graphs", "registered_options", "run_rnn"]


@dataclass(frozen=True, kw_only=True)
class GraphModelOptions(ModelConfig):
    """``model:`` options of a snapshot-timeline DGNN: ``layers`` GCN–RNN pairs (IBM Fig. 1b) of width ``hidden``."""

    layers: int = 2
    """Number of GCN-RNN layer pairs (IBM Fig. 1b uses 2)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.layers < 1:
            raise ValueError("layers: must be >= 1")

    def model_args(self) -> dict[str, Any]:
        """The builder's keyword arguments beyond (in_features, hidden, layers) (:func:`build_model`)."""
        return {}


@dataclass(frozen=True, kw_only=True)
class GraphCellOptions(GraphModelOptions):
    """``model:`` options of a graph-RNN cell with a K-term basis (ReInc §2.1: gconv_lstm, gconv_gru, dcrnn,
    gcrn_m1) and its sequence-to-sequence form."""

    order: int = 2
    """K: Chebyshev order (T_0 … T_{K-1}) of gconv_lstm, gconv_gru, gcrn_m1; terms per direction (K - 1
    diffusion steps) of dcrnn; PyG Temporal's K."""
    encoder_decoder: bool = False
    """Sequence-to-sequence form (ReInc §2.1, DCRNN): ``layers`` encoder and ``layers`` decoder cells
    forecasting ``task.horizon`` targets one step at a time (``task: regression``, ``strategy: sequences``)."""
    teacher_forcing: float = 0.5
    """encoder_decoder: probability that a training decoder step reads the previous step's ground truth instead
    of its own prediction (never at evaluation)."""
    decoder_input: Literal["targets", "snapshots"] = "targets"
    """encoder_decoder: the ground truth a decoder step reads. ``targets``: the previous step's regression target
    on the window's last graph; ``snapshots`` (ReInc §2.1, §3.1): the forecast snapshot X_{t+d} on its own graph,
    through the encoder's first filter (its aggregation shared with ``strategy.reuse``'s cache); step 0 reads X_t.
    Steps without teacher forcing read their own prediction on G_t in both forms."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.order < 1:
            raise ValueError("order: must be >= 1")
        if not 0.0 <= self.teacher_forcing <= 1.0:
            raise ValueError(f"teacher_forcing: {self.teacher_forcing} is not a probability; choose in [0, 1]")
        if self.decoder_input != "targets" and not self.encoder_decoder:
            raise ValueError(f"decoder_input: {self.decoder_input} is an option of the decoder; set "
                             "encoder_decoder: true, or leave decoder_input at targets")

    def model_args(self) -> dict[str, Any]:
        """``order``, K."""
        return {"order": self.order}


def run_rnn(rnn: nn.RNNBase, y: torch.Tensor, state: Any, out_features: int) -> tuple[torch.Tensor, Any]:
    """``rnn(y, state)`` over (T, n, F), also for n = 0 (torch rejects it), staying connected to ``y``'s backward."""
    if y.shape[1] == 0:
        return y.new_zeros(y.shape[0], 0, out_features) + y.sum() * 0.0, state
    # torch's own RNN: one oneDNN node per layer on the CPU, at least as fast as ops/scan.py's scan
    return rnn(y, state)


class StepParams(Mapping):
    """Per-step parameters ``{t: W_t}`` kept as one (S, ...) tensor, so :meth:`stack` returns a view."""

    def __init__(self, start: int, stacked: torch.Tensor) -> None:
        self.start, self.stacked = start, stacked

    def __getitem__(self, t: int) -> torch.Tensor:
        if not self.start <= t < self.start + self.stacked.shape[0]:
            raise KeyError(t)
        return self.stacked[t - self.start]

    def __iter__(self) -> Iterator[int]:
        return iter(range(self.start, self.start + self.stacked.shape[0]))

    def __len__(self) -> int:
        return self.stacked.shape[0]

    def stack(self, steps: list[int]) -> torch.Tensor:
        """(len(steps), ...) parameters of ``steps``: a slice when they are consecutive."""
        i = [t - self.start for t in steps]
        if i and i == list(range(i[0], i[0] + len(i))) and i[0] >= 0 and i[-1] < len(self):
            return self.stacked[i[0] : i[-1] + 1]
        return torch.stack([self[t] for t in steps]) if steps else self.stacked[:0]


#: where a trained model's outputs on tensors come from (the models run over a strategy's placed rows)
_ON_TENSORS = ("a run's Z_t come from TrainedRun.embed() (`python -m hpcdgnn embed RUNDIR`), its predictions from "
               "predict(), and export(model=FILE, to='pygt') (`export RUNDIR --to pygt`) writes PyG Temporal modules "
               "called on (x, edge_index, edge_weight)")


def refuse_tensors(module: nn.Module, given: Any, more: tuple) -> None:
    """A PyG-style call ``model(x, edge_index, ...)`` of a model that runs over a strategy's placed rows: one
    TypeError line saying where a run's outputs come from, not Python's 'takes 2 positional arguments' (or an
    AttributeError deeper in) for the extra tensors."""
    if more or isinstance(given, torch.Tensor):
        raise TypeError(f"{type(module).__name__}.forward takes a strategy's input, not tensors: {_ON_TENSORS}")



class DynamicLayer(nn.Module):
    """One GCN-RNN pair (IBM §2.2).

    Attributes:
        in_features: width of the layer input X_t.
        spatial_features: width of ``spatial``'s output (the data redistributed).
        out_features: width of the layer output Z_t.
        temporal_mixing: whether ``temporal`` mixes time steps of a vertex (forces the redistribution, IBM §4.2).
        causal: whether output t depends only on inputs 0..t.
        precomputable: whether the first layer's aggregation Ã_t·X_t is a constant (SPEC S4); False with attention.
        graph_recurrent: whether the time encoder convolves over each step's graph (takes ``graphs=``).
        temporal_reach: None, or r when output t reads only inputs t - r .. t of the same vertex (TM-GCN, r = w - 1).
        writes_out: whether :meth:`spatial_steps` takes ``out=``, an (S, n, spatial) buffer to write into.
        pool_rows: k > 0 when the per-step parameters read every step's top-k summary of the layer input over
            all ranks (EvolveGCN-H, :meth:`pool_scores`, :meth:`~hpcdgnn.nn.layout.Layout.pool`); 0: they do not."""

    in_features: int
    spatial_features: int
    out_features: int
    temporal_mixing: bool = True
    causal: bool = True
    precomputable: bool = True
    graph_recurrent: bool = False
    temporal_reach: int | None = None
    writes_out: bool = False
    pool_rows: int = 0

    def forward(self, *args: Any, **kwargs: Any) -> None:
        """Not a call on tensors: :class:`DGNN` runs a layer's parts (``aggregate``, ``spatial``, ``temporal``) over
        the rows a strategy placed."""
        raise TypeError(f"{type(self).__name__} is run by its DGNN over a strategy's rows, not called on tensors: "
                        f"{_ON_TENSORS}")

    def aggregate(self, graph: LocalGraph, h: torch.Tensor) -> torch.Tensor:
        """Neighbourhood aggregation of rows ``h`` (n, in) -> ``ax``; default Ã·[h ; halo] (IBM Eq. 2, §5.5)."""
        return graph.propagate(h)

    def moves_spatial(self) -> bool:
        """Whether :meth:`spatial` may run after the redistribution, on the moved ``in_features``-wide aggregation."""
        return type(self).aggregate is DynamicLayer.aggregate and not self.graph_recurrent

    def rnn(self) -> nn.RNNBase | None:
        """The torch GRU/LSTM that is this layer's time encoder, if it is one (else None)."""
        return None

    def packed_temporal(self, x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        """Time encoder over packed lanes (steps, lanes, spatial), reset where ``mask`` is 0 (DGC §5.1.2, Eq. 4–5)."""
        from hpcdgnn.nn.temporal_fusion import fused_rnn

        rnn = self.rnn()
        if rnn is None:
            raise NotImplementedError(f"{type(self).__name__} has no torch RNN time encoder")
        return fused_rnn(rnn, x, mask)

    def time_params(self, num_steps: int) -> list[torch.Tensor] | None:
        """Per-time-step parameters for steps 0..num_steps-1 (EvolveGCN's W_t), else None."""
        params, _ = self.time_params_block(0, num_steps, None)
        return None if params is None else [params[t] for t in range(num_steps)]

    def time_params_block(self, start: int, stop: int, state: Any = None, pooled: torch.Tensor | None = None
                          ) -> tuple[dict[int, torch.Tensor] | None, Any]:
        """Per-step parameters ``{t: W_t}`` for ``start <= t < stop`` and the state after ``stop - 1``.

        ``state`` is the state after step ``start - 1`` (None when ``start == 0``), as for blocks of time (SPEC S2);
        ``pooled``: the steps' (stop - start, :attr:`pool_rows`, in_features) summaries when ``pool_rows`` > 0."""
        return None, None

    def pool_scores(self, x: torch.Tensor) -> torch.Tensor:
        """The score of each row of the layer input that :attr:`pool_rows` ranks by, (n, in) -> (n,)."""
        raise NotImplementedError(f"{type(self).__name__} pools nothing (pool_rows = 0)")

    def initial_time_state(self) -> Any:
        """The per-step parameters' state before a sequence's first step (EvolveGCN-O: (W_0, 0)), or None."""
        return None

    def spatial(self, ax: torch.Tensor, t: int, tparams: list[torch.Tensor] | None) -> torch.Tensor:
        """Snapshot t's rows given their aggregation ``ax`` (:meth:`aggregate`) -> (rows, spatial_features)."""
        raise NotImplementedError

    def spatial_steps(self, ax: torch.Tensor, steps: list[int], tparams) -> torch.Tensor:
        """(S, n, F) aggregations of ``steps`` -> (S, n, spatial): one GEMM over all S·n rows (snapshot-parallel)."""
        S, n = ax.shape[0], ax.shape[1]
        if tparams is None:
            y = self.spatial(ax.reshape(S * n, ax.shape[-1]), -1, None)
            return y.reshape(S, n, y.shape[-1])  # the width named: n may be 0 (a rank without vertex rows)
        return torch.stack([self.spatial(ax[i], t, tparams) for i, t in enumerate(steps)])

    def temporal(self, y: torch.Tensor, state: Any = None) -> tuple[torch.Tensor, Any]:
        """RNN along time for a set of vertices: (T, n, spatial) -> ((T, n, out), final state).

        Default: :meth:`rnn` per vertex, or the identity; ``graph_recurrent`` layers also take ``graphs=``."""
        rnn = self.rnn()
        return (y, state) if rnn is None else run_rnn(rnn, y, state, self.out_features)


class DGNN(nn.Module):
    """A stack of :class:`DynamicLayer` s; the output of layer l is the input of layer l+1."""

    def __init__(self, layers: list[DynamicLayer]) -> None:
        super().__init__()
        self.layers = nn.ModuleList(layers)
        self.reset_parameters()

    @property
    def out_features(self) -> int:
        """Embedding width F'."""
        return self.layers[-1].out_features

    def reset_parameters(self) -> None:
        """Reset every layer (each layer resets all its submodules)."""
        for layer in self.layers:
            layer.reset_parameters()

    def forward(self, layout: Layout, *more: Any) -> dict[int, torch.Tensor]:
        """The layer loop (IBM §2.2, Fig. 1b) over the rows a strategy placed: ``{t: Z_t}`` for the task."""
        refuse_tensors(self, layout, more)
        return layout.output(self.run_layers(layout))

    def run_layers(self, layout: Layout) -> torch.Tensor:
        """:meth:`forward` without the final :meth:`Layout.output`: the last layer's rows (for an encoder–decoder)."""
        h: torch.Tensor | None = None
        for li, layer in enumerate(self.layers):
            tstate, rstate = layout.states[li]
            pooled = layout.pool(layer, li, h) if layer.pool_rows else None
            if pooled is None:
                tparams, tstate = layer.time_params_block(layout.start, layout.stop, tstate)
            else:
                tparams, tstate = layer.time_params_block(layout.start, layout.stop, tstate, pooled)
            y = layout.spatial(layer, li, h, tparams)
            if not y.requires_grad:  # nothing here trains (no rows, or past the horizon): join h's backward
                y = joined(y, h)
            if pooled is not None:  # a rank with no rows still runs the pool's backward collective
                y = joined(y, pooled)
            if layer.temporal_mixing:
                z, rstate = layout.encode(layer, li, layout.to_temporal(y, li), rstate)
                y = layout.to_spatial(z, li)
            layout.states[li] = (tstate, rstate)
            h = y
        return h


class GraphRecurrentLayer(DynamicLayer):
    """An integrated graph-RNN cell: graph convolutions of X_t and of the state inside the gates (ReInc §2.1).

    The spatial phase is the identity; :meth:`temporal` builds each step's operator once, computes the input's
    part of every gate for all S steps at once (snapshot-parallel) and runs :meth:`step` along time. Subclasses
    set ``gates`` and implement :meth:`build_operator`, :meth:`basis`, :meth:`step` and :meth:`receptive_hops`."""

    graph_recurrent = True
    precomputable = False
    # gate pre-activations computed from the input
    gates: int = 1

    def aggregate(self, graph: LocalGraph, h: torch.Tensor) -> torch.Tensor:
        """No aggregation in the spatial phase: the convolutions run in :meth:`temporal`."""
        return h

    def spatial(self, ax: torch.Tensor, t: int, tparams) -> torch.Tensor:
        """The identity (the input goes to the time encoder as it is)."""
        return ax

    def spatial_steps(self, ax: torch.Tensor, steps: list[int], tparams) -> torch.Tensor:
        """The identity."""
        return ax

    def build_operator(self, graph, dtype: torch.dtype) -> tuple:
        """The step's operator(s) as a tuple of :class:`~hpcdgnn.ops.sparse.NormalizedAdjacency`."""
        raise NotImplementedError

    def basis(self, op: tuple, x: torch.Tensor) -> torch.Tensor:
        """The (n, basis·F) aggregation of x (n, F) over ``op`` that every gate's filter reads."""
        raise NotImplementedError

    def step(self, gx: torch.Tensor, op: tuple, state: Any) -> tuple[torch.Tensor, Any]:
        """One step of the recurrence from the input's gate pre-activations ``gx`` (n, gates·F')."""
        raise NotImplementedError

    def receptive_hops(self) -> tuple[int, int]:
        """(input, state): hops of a step's operator that output row v at step t reads of X_t and of the state."""
        raise NotImplementedError

    def operator(self, graph, dtype: torch.dtype) -> tuple:
        """The step's operator, memoised; a subset step graph restricts the whole snapshot's."""
        key = (type(self).__name__, dtype)
        whole = getattr(graph, "whole", None)
        if whole is not None:
            return graph.operator(key, lambda g: g.restrict(self.operator(whole, dtype)))
        return graph.operator(key, lambda g: self.build_operator(g, dtype))

    def stacked_operator(self, graphs: list, dtype: torch.dtype) -> tuple:
        """diag(op_1, …, op_S) of the steps' operators (memoised on the first step graph)."""
        from hpcdgnn.ops.sparse import block_diagonal

        ops = [self.operator(g, dtype) for g in graphs]
        if len(ops) == 1:
            return ops[0]
        key = (type(self).__name__, dtype, "diag", tuple(id(g) for g in graphs))
        return graphs[0].operator(key, lambda _: tuple(block_diagonal([o[i] for o in ops])
                                                       for i in range(len(ops[0]))))

    def input_gates(self, x: torch.Tensor, graphs: list) -> torch.Tensor:
        """The input's part of every gate of every step, (S, n, F) -> (S, n, gates·F'): one basis, one GEMM."""
        S, n, f = x.shape
        op = self.stacked_operator(graphs, x.dtype)
        b = self.basis(op, x.reshape(S * n, f))
        return torch.addmm(self.bias, b, self.w_x).view(S, n, -1)

    def scan(self, gx: torch.Tensor, graphs: list, state: Any) -> tuple[torch.Tensor, Any]:
        """:meth:`step` along the block: (S, n, gates·F') -> (S, n, F')."""
        outs = []
        for g, gxt in zip(graphs, gx.unbind(0), strict=True):
            h, state = self.step(gxt, self.operator(g, gx.dtype), state)
            outs.append(h)
        return torch.stack(outs), state

    def temporal(self, y: torch.Tensor, state: Any = None, graphs: list | None = None) -> tuple[torch.Tensor, Any]:
        """The cell along the block: (S, n, F) with the S steps' graphs -> ((S, n, F'), final state)."""
        if graphs is None:
            raise RuntimeError(f"{type(self).__name__} convolves its state over each step's graph: temporal() "
                               "needs graphs= (Layout.step_graphs)")
        if len(graphs) != y.shape[0]:
            raise ValueError(f"{len(graphs)} step graphs for {y.shape[0]} steps")
        if y.shape[0] == 0:
            return y.new_zeros(0, y.shape[1], self.out_features) + y.sum() * 0.0, state
        return self.scan(self.input_gates(y, list(graphs)), list(graphs), state)

    def cell(self, x: torch.Tensor, graph, state: Any = None) -> tuple[torch.Tensor, Any]:
        """One step: x_t (n, F), the graph of t and the state after t-1 -> (h_t (n, F'), state after t)."""
        z, state = self.temporal(x.unsqueeze(0), state, graphs=[graph])
        return z[0], state


_MODELS: dict[str, Callable[..., DGNN]] = {}
_OPTIONS: dict[str, type[GraphModelOptions]] = {}
_STEP_GRAPHS: set[str] = set()


def _ours(fn: Callable[..., Any]) -> bool:
    """Whether builder ``fn`` is one of hpcdgnn's own (a user's comes from their script or notebook)."""
    return (getattr(fn, "__module__", None) or "").startswith("hpcdgnn.")


def register_model(name: str, *, step_graphs: bool = False, options: type[GraphModelOptions] = GraphModelOptions
                   ) -> Callable[[Callable[..., DGNN]], Callable[..., DGNN]]:
    """Register a builder ``fn(in_features, hidden, layers, **options.model_args()) -> DGNN`` under ``name``, the
    job's ``model.name`` (the snapshot-timeline regime's).

    A script's or notebook's own model may be registered at any time before the call that trains or loads it
    (:func:`hpcdgnn.train`, :func:`hpcdgnn.load_run`), in every process that makes that call (every rank under
    MPI). Registering one of the caller's own names again replaces it (a notebook cell run again); one of
    hpcdgnn's names, or another regime's (``tgn``), is refused in one line (ValueError).

    Args:
        name: the ``model.name`` it is chosen by.
        step_graphs: its time encoder convolves over each step's graph (``graph_recurrent`` layers).
        options: its ``model:`` options class (``model_args()`` are the builder's keywords).
    """

    def deco(fn: Callable[..., DGNN]) -> Callable[..., DGNN]:
        if name in _MODELS and (_ours(_MODELS[name]) or _ours(fn)):
            raise ValueError(f"model {name!r} registered twice" if _ours(fn) else
                             f"register_model: {name!r} is one of hpcdgnn's models; register yours under another name")
        if not _ours(fn):
            from hpcdgnn.regimes import names

            if name not in _MODELS and name in names("model"):
                raise ValueError(f"register_model: {name!r} is one of hpcdgnn's models (of another regime); "
                                 "register yours under another name")
        _MODELS[name] = fn
        _OPTIONS[name] = options
        _STEP_GRAPHS.discard(name)
        if step_graphs:
            _STEP_GRAPHS.add(name)
        return fn

    return deco


class _Registered(Mapping[str, type[GraphModelOptions]]):
    """``model.name`` -> options class of every registered model as registered now: the timeline regime's
    ``models``, so that a model registered after ``hpcdgnn.regimes`` was imported (after a first
    :func:`hpcdgnn.train`) is a known ``model.name`` too (a copy taken at import left it unknown)."""

    def __getitem__(self, name: str) -> type[GraphModelOptions]:
        return _OPTIONS[name]

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(_OPTIONS))

    def __len__(self) -> int:
        return len(_OPTIONS)


def registered_options() -> Mapping[str, type[GraphModelOptions]]:
    """Every registered model's options class by name, a live view (:class:`_Registered`)."""
    return _Registered()


def meta_layers(m, in_features: int = 1) -> list[DynamicLayer]:
    """The layers of model config ``m`` on ``in_features`` inputs, built on the meta device (no memory), to read
    their attributes and widths."""
    with torch.device("meta"):
        return list(build_from_options(m, in_features).layers)


def time_mixing_layers(m) -> list[DynamicLayer]:
    """The layers of model config ``m`` whose time encoder mixes steps (:func:`meta_layers`)."""
    return [ly for ly in meta_layers(m) if ly.temporal_mixing]


def needs_step_graphs(name: str) -> bool:
    """Whether model ``name``'s time encoder convolves over each step's graph (``graph_recurrent`` layers)."""
    return name in _STEP_GRAPHS


def available_models() -> list[str]:
    """Registered model names."""
    return sorted(_MODELS)


def model_options(name: str) -> type[GraphModelOptions]:
    """The ``model:`` options class of registered model ``name``."""
    return _OPTIONS[name]


def build_model(name: str, in_features: int, hidden: int, layers: int, window: int = 3, order: int = 2) -> DGNN:
    """Build a registered model (names as in YAML ``model.name``)."""
    if name not in _MODELS:
        raise KeyError(f"unknown model {name!r}; choose from {', '.join(available_models())}")
    fn = _MODELS[name]
    takes = inspect.signature(fn).parameters
    kw = {k: v for k, v in (("window", window), ("order", order)) if k in takes}
    return fn(in_features=in_features, hidden=hidden, layers=layers, **kw)


def build_from_options(m: GraphModelOptions, in_features: int) -> DGNN:
    """The model a job's ``model:`` section describes, on ``in_features`` input features."""
    return build_model(m.name, in_features, m.hidden, m.layers, **m.model_args())
