"""DGNN models, one per file, registered by their YAML names."""

from hpcdgnn.nn.models.base import (
    DGNN,
    DynamicLayer,
    GraphCellOptions,
    GraphModelOptions,
    GraphRecurrentLayer,
    available_models,
    build_from_options,
    build_model,
    meta_layers,
    model_options,
    needs_step_graphs,
    register_model,
    registered_options,
)
from hpcdgnn.nn.models.cdgcn import CDGCNLayer
from hpcdgnn.nn.models.dcrnn import DCRNNLayer
from hpcdgnn.nn.models.dysat import DySATLayer
from hpcdgnn.nn.models.encoder_decoder import DecoderInputs, EncoderDecoder, build_encoder_decoder
from hpcdgnn.nn.models.evolvegcn import EvolveGCNHLayer, EvolveGCNOLayer
from hpcdgnn.nn.models.gconv_gru import GConvGRULayer
from hpcdgnn.nn.models.gconv_lstm import GConvLSTMLayer
from hpcdgnn.nn.models.gcrn_m1 import GCRNM1Layer
from hpcdgnn.nn.models.mpnn_lstm import MPNNLSTMLayer
from hpcdgnn.nn.models.tgcn import TGCNLayer
from hpcdgnn.nn.models.tgcn_cell import TGCNCellLayer
from hpcdgnn.nn.models.tmgcn import TMGCNLayer, TMGCNOptions, m_transform

__all__ = [
    "CDGCNLayer",
    "DCRNNLayer",
    "DGNN",
    "DecoderInputs",
    "DySATLayer",
    "DynamicLayer",
    "EncoderDecoder",
    "EvolveGCNHLayer",
    "EvolveGCNOLayer",
    "GCRNM1Layer",
    "GConvGRULayer",
    "GConvLSTMLayer",
    "GraphCellOptions",
    "GraphModelOptions",
    "GraphRecurrentLayer",
    "MPNNLSTMLayer",
    "TGCNCellLayer",
    "TGCNLayer",
    "TMGCNLayer",
    "TMGCNOptions",
    "available_models",
    "build_encoder_decoder",
    "build_from_options",
    "build_model",
    "meta_layers",
    "m_transform",
    "model_options",
    "needs_step_graphs",
    "register_model",
    "registered_options",
]
