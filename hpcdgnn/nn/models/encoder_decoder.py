"""Encoder–decoder (sequence-to-sequence) graph-RNNs: DCRNN's form (Li et al. 2018, §2.3), ReInc §2.1, Fig. 3.

::

    encoder   (H^l_t, …) = cell^l_enc(H^{l-1}_t, G_t, state^l_{t-1}),   H^{-1}_t = X_t
    decoder   s^l_0 = encoder's final state of layer l;  x_0 = 0 (GO);  for d = 0 … H-1:
                  D^l_d, s^l_{d+1} = cell^l_dec(D^{l-1}_d, G_t, s^l_d),   D^{-1}_d = x_d      (n, 1)
                  ŷ_d = D^{top}_d w + b;   x_{d+1} = y_{t+d} (teacher forcing) or ŷ_d

H = ``task.horizon``; the output is Ŷ_t (n, H), so the task adds no head. Decoder steps run on G_t, the
graph known at forecast time. With ``decoder_input: snapshots`` (ReInc §2.1, §3.1) a teacher-forced step
reads snapshot X_{t+d} on G_{t+d} through the encoder's first filter, so its input aggregation is the
encoder's Agg^input_{t+d}, shareable through a reuse cache."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from hpcdgnn.nn.layout import Layout, StepGraph
from hpcdgnn.nn.models.base import DGNN, GraphRecurrentLayer, build_model, refuse_tensors

__all__ = ["DecoderInputs", "EncoderDecoder", "build_encoder_decoder", "input_gates_from_basis"]


@dataclass
class DecoderInputs:
    """What a layout gives the decoder of one forward pass.

    Attributes:
        graph: the step graph a decoder step convolves over (the encoder's last step's), unless it reads a snapshot.
        teacher: per decoder step d: the (n, 1) ground truth y_{t+d-1} it reads (NaN: own prediction), or None.
        snapshots: snapshot form, per step d: X (n, F) or its basis (n, B·F) of the snapshot read, or None.
        graphs: with ``snapshots``: per step d, the graph of the snapshot it reads (None where it reads none).
        aggregated: ``snapshots`` hold the input's basis (read from a reuse cache), not X."""

    graph: StepGraph
    teacher: list[torch.Tensor | None]
    snapshots: list[torch.Tensor | None] | None = None
    graphs: list[StepGraph | None] | None = None
    aggregated: bool = False


def input_gates_from_basis(cell: GraphRecurrentLayer, basis: torch.Tensor, w_x: torch.Tensor | None = None):
    """The input's part of every gate, (…, B·F) -> (…, gates·F'), from a basis already at hand (ReInc §3.3.1)."""
    w = cell.w_x if w_x is None else w_x
    return torch.addmm(cell.bias, basis.reshape(-1, basis.shape[-1]), w).view(*basis.shape[:-1], -1)


class EncoderDecoder(DGNN):
    """Encoder cells, decoder cells (first one 1 -> F') and the shared projection F' -> 1 (DCRNN §2.3; ReInc §2.1).

    The layout must offer ``decoder_inputs() -> DecoderInputs``.

    Args:
        encoder: the encoder's graph-RNN cells, F -> F' -> … -> F'.
        decoder: as many decoder cells, 1 -> F' -> … -> F'.
        horizon: H, the decoder steps (``task.horizon``).

    Shapes:
        the layout's window X (T, n, F) -> output (1, n, H): Ŷ_t of the layout's rows."""

    #: the output is the forecast Ŷ_t itself: the task adds no head
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

    def forward(self, layout: Layout, *more):
        """Encode the layout's window, then decode H steps from the encoder's final states (module docstring)."""
        refuse_tensors(self, layout, more)
        h = self.run_layers(layout)
        states = [rstate for _, rstate in layout.states]
        inputs = layout.decoder_inputs()
        if len(inputs.teacher) != self.horizon:
            raise ValueError(f"{len(inputs.teacher)} decoder inputs for a horizon of {self.horizon}")
        x = h.new_zeros(h.shape[1], 1)
        preds: list[torch.Tensor] = []
        for d in range(self.horizon):
            snap = None if inputs.snapshots is None else inputs.snapshots[d]
            graph = inputs.graph if snap is None else inputs.graphs[d]
            if d > 0:
                teach = inputs.teacher[d]
                x = preds[-1] if teach is None else torch.where(torch.isnan(teach), preds[-1], teach)
            for li, cell in enumerate(self.decoder):
                if li == 0 and snap is not None:
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
    """``layers`` encoder and ``layers`` decoder cells of model ``name``, built by its own builder.

    Args:
        name: an integrated graph-RNN cell's model name (``gconv_lstm``, ``gconv_gru``, ``dcrnn``, ``gcrn_m1``).
        in_features: F, the width of X_t.
        hidden: F', the cells' width.
        layers: cells in the encoder, and in the decoder.
        window: the model's ``window`` argument, passed to its builder.
        order: K, the cells' Chebyshev order or diffusion terms.
        horizon: H, the decoder steps.

    Shapes:
        X (T, n, F) of a window -> Ŷ_t (1, n, H)."""
    enc = build_model(name, in_features, hidden, layers, window, order)
    dec = build_model(name, 1, hidden, layers, window, order)
    if not all(isinstance(layer, GraphRecurrentLayer) for layer in (*enc.layers, *dec.layers)):
        raise ValueError(f"encoder_decoder: model {name!r} is not an integrated graph-RNN cell")
    return EncoderDecoder(list(enc.layers), list(dec.layers), horizon)
