"""Encoder–decoder (sequence-to-sequence) graph-RNNs: DCRNN's form (Li et al. 2018, §2.3), ReInc §2.1, Fig. 3.

``model.encoder_decoder: true`` with an integrated graph-RNN cell (``gconv_lstm``, ``gconv_gru``, ``dcrnn``,
``gcrn_m1``): ``model.layers`` cells form the encoder and as many the decoder (ReInc §5 uses 2 + 2)::

    encoder   (H^l_t, …) = cell^l_enc(H^{l-1}_t, G_t, state^l_{t-1}),   t = window's steps, H^{-1}_t = X_t
    decoder   s^l_0 = encoder's final state of layer l (after the window's last step t)
              x_0 = 0 (DCRNN's GO symbol),  for d = 0 … H-1:
                  D^l_d, s^l_{d+1} = cell^l_dec(D^{l-1}_d, G_t, s^l_d),   D^{-1}_d = x_d      (n, 1)
                  ŷ_d = D^{top}_d w + b                                                      (n, 1)
                  x_{d+1} = y_{t+d}  (the target ŷ_d forecasts: teacher forcing)  or  ŷ_d (own prediction)

H = ``task.horizon``; ŷ_d forecasts the regression target stored at snapshot t + d (the task's Ŷ_t[:, d]),
so the model's output is Ŷ_t itself, (n, H), and the task adds no head
(:meth:`~hpcdgnn.tasks.regression.Regression.predict_in_model`). The decoder's cells take one input
feature (a target value per vertex) and run on G_t, the last input step's graph for every decoder step:
the graph known when the forecast is made (DCRNN's graph is static; reading G_{t+d} would use future
structure). The layout decides teacher forcing (:class:`DecoderInputs`): during training each decoder
step d ≥ 1 reads the ground truth with probability ``model.teacher_forcing`` (one draw per sample and
step from the seed, epoch, sequence and node batch — never from P), else its own previous prediction;
a vertex whose ground truth is missing (NaN) reads its own prediction; evaluation always reads its own.

**Snapshot inputs** (``model.decoder_input: snapshots``, ReInc §2.1, §3.1): ReInc's decoder forecasts
future snapshots, so under teacher forcing its inputs are the ground-truth *snapshots* G_{t+d}, the very
snapshots later windows' encoders read — which is what makes ReInc's encoder ↔ decoder aggregation reuse
possible. In this form the layout hands the decoder, for step d, the snapshot it reads (:class:`DecoderInputs`
``snapshots``): X_t at d = 0 (the last observation, where DCRNN puts GO: known when the forecast is made, so
also at evaluation), and X_{t+d} at a teacher-forced step d ≥ 1; the step then convolves over that snapshot's
graph G_{t+d} (input and state), and its input filter is the *encoder's* first one (tied weights: a snapshot is
read as the encoder reads it), so the input's aggregation — the basis of X_{t+d} over G_{t+d}'s operator,
parameter-free — is the encoder's Agg^input_{t+d}, one value a reuse cache can share between the two
(:func:`input_gates_from_basis`; the layout may hand that basis instead of X: ``aggregated``). A step that is
not teacher-forced (and every step d ≥ 1 at evaluation) reads its own previous prediction on G_t, as in the
``targets`` form, through the decoder's own first filter (1 -> F'): no future snapshot, no future graph.
The decoder's parameters are the same in both forms.

Rows: the decoder runs over the layout's rows of the encoder's last step (the encoder's states are
rows of them); under ``sequences`` those rows include the decoder's receptive field too — over each step's
graph.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from hpcdgnn.nn.layout import Layout, StepGraph
from hpcdgnn.nn.models.base import DGNN, GraphRecurrentLayer, build_model

__all__ = ["DecoderInputs", "EncoderDecoder", "build_encoder_decoder", "input_gates_from_basis"]


@dataclass
class DecoderInputs:
    """What a layout gives the decoder of one forward pass.

    Attributes:
        graph: the step graph a decoder step convolves over (the encoder's last step's), unless it reads a
            snapshot.
        teacher: per decoder step d (length H): the (n, 1) ground truth y_{t+d-1} the step reads instead
            of the previous prediction (NaN where missing: that vertex reads its prediction), or None
            (d = 0, evaluation, no teacher forcing drawn for d, or the snapshot form).
        snapshots: the snapshot form (module docstring), per step d: the input rows of the snapshot the step
            reads — X (n, F), or with ``aggregated`` their basis over ``graphs[d]``'s operator (n, B·F) — or
            None (the step reads its own previous prediction on ``graph``); None in the ``targets`` form.
        graphs: with ``snapshots``: per step d, the graph of the snapshot it reads (None where it reads none).
        aggregated: ``snapshots`` hold the input's basis (read from a reuse cache), not X.
    """

    graph: StepGraph
    teacher: list[torch.Tensor | None]
    snapshots: list[torch.Tensor | None] | None = None
    graphs: list[StepGraph | None] | None = None
    aggregated: bool = False


def input_gates_from_basis(cell: GraphRecurrentLayer, basis: torch.Tensor, w_x: torch.Tensor | None = None):
    """The input's part of every gate, (…, B·F) -> (…, gates·F'), from the input's basis over the step's
    operator — what :meth:`GraphRecurrentLayer.input_gates` computes after its basis (the same GEMM with the
    bias folded in), for a caller that has the basis already (a reuse cache, ReInc §3.3.1). ``w_x``: the
    filter to read it with (default the cell's own)."""
    w = cell.w_x if w_x is None else w_x
    return torch.addmm(cell.bias, basis.reshape(-1, basis.shape[-1]), w).view(*basis.shape[:-1], -1)


class EncoderDecoder(DGNN):
    """Encoder cells (:attr:`layers`, run by :meth:`DGNN.run_layers` like any model's), decoder cells
    (:attr:`decoder`, first one 1 -> F'), and the projection ``proj`` F' -> 1 shared by the decoder steps:
    the module docstring's encoder and decoder equations (DCRNN §2.3; ReInc §2.1, Fig. 3).

    The layout must offer ``decoder_inputs() -> DecoderInputs`` (``sequences``' sample layouts do).

    Args:
        encoder: the encoder's graph-RNN cells, F -> F' -> … -> F'.
        decoder: as many decoder cells, 1 -> F' -> … -> F'.
        horizon: H, the decoder steps (``task.horizon``).

    Shapes:
        the layout's window X (T, n, F) -> output (1, n, H): Ŷ_t of the layout's rows, as the last "step"
        of the layout's output.
    """

    #: the output is the forecast Ŷ_t itself: the regression task adds no head (``Task.predict_in_model``)
    predicts_targets = True

    def __init__(self, encoder: list[GraphRecurrentLayer], decoder: list[GraphRecurrentLayer], horizon: int) -> None:
        nn.Module.__init__(self)  # DGNN.__init__ would reset before the decoder exists
        if len(encoder) != len(decoder) or not encoder:
            raise ValueError("the encoder and the decoder need the same number (>= 1) of layers")
        self.layers = nn.ModuleList(encoder)
        self.decoder = nn.ModuleList(decoder)
        self.horizon = horizon
        self.proj = nn.Linear(decoder[-1].out_features, 1)
        self.reset_parameters()

    @property
    def out_features(self) -> int:
        """H: the forecasts of one step (the model's output is Ŷ_t)."""
        return self.horizon

    def reset_parameters(self) -> None:
        """Reset the encoder's and the decoder's cells and the projection (torch Linear's init)."""
        for layer in (*self.layers, *self.decoder):
            layer.reset_parameters()
        self.proj.reset_parameters()

    def forward(self, layout: Layout):
        """Encode the layout's window, then decode H steps from the encoder's final states (module docstring)."""
        h = self.run_layers(layout)
        states = [rstate for _, rstate in layout.states]
        inputs = layout.decoder_inputs()
        if len(inputs.teacher) != self.horizon:
            raise ValueError(f"{len(inputs.teacher)} decoder inputs for a horizon of {self.horizon}")
        x = h.new_zeros(h.shape[1], 1)  # the GO symbol
        preds: list[torch.Tensor] = []
        for d in range(self.horizon):
            snap = None if inputs.snapshots is None else inputs.snapshots[d]
            graph = inputs.graph if snap is None else inputs.graphs[d]
            if d > 0:
                teach = inputs.teacher[d]
                x = preds[-1] if teach is None else torch.where(torch.isnan(teach), preds[-1], teach)
            for li, cell in enumerate(self.decoder):
                if li == 0 and snap is not None:  # a ground-truth snapshot, read with the encoder's filter
                    basis = snap if inputs.aggregated else cell.basis(cell.operator(graph, snap.dtype), snap)
                    gates = input_gates_from_basis(cell, basis, self.layers[0].w_x)
                    z, states[0] = cell.scan(gates.unsqueeze(0), [graph], states[0])
                    x = z[0]
                else:
                    x, states[li] = cell.cell(x, graph, states[li])
            preds.append(self.proj(x))
        return layout.output(torch.cat(preds, dim=1).unsqueeze(0))


def build_encoder_decoder(name: str, in_features: int, hidden: int, layers: int, window: int, order: int,
                          horizon: int) -> EncoderDecoder:
    """``layers`` encoder cells of model ``name`` (F -> F' -> … -> F') and ``layers`` decoder cells
    (1 -> F' -> … -> F'), built by the model's own builder; ``horizon`` decoder steps (:class:`EncoderDecoder`).

    Args:
        name: an integrated graph-RNN cell's model name (``gconv_lstm``, ``gconv_gru``, ``dcrnn``, ``gcrn_m1``).
        in_features: F, the width of X_t.
        hidden: F', the cells' width.
        layers: cells in the encoder, and in the decoder.
        window: the model's ``window`` argument, passed to its builder.
        order: K, the cells' Chebyshev order or diffusion terms.
        horizon: H, the decoder steps.

    Shapes:
        X (T, n, F) of a window -> Ŷ_t (1, n, H).
    """
    enc = build_model(name, in_features, hidden, layers, window, order)
    dec = build_model(name, 1, hidden, layers, window, order)
    if not all(isinstance(layer, GraphRecurrentLayer) for layer in (*enc.layers, *dec.layers)):
        raise ValueError(f"encoder_decoder: model {name!r} is not an integrated graph-RNN cell")
    return EncoderDecoder(list(enc.layers), list(dec.layers), horizon)
