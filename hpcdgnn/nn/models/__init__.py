"""DGNN models, one per file, registered by their YAML names."""

from hpcdgnn.nn.models.base import DGNN, DynamicLayer, available_models, build_model, register_model
from hpcdgnn.nn.models.cdgcn import CDGCNLayer
from hpcdgnn.nn.models.dysat import DySATLayer
from hpcdgnn.nn.models.evolvegcn import EvolveGCNOLayer
from hpcdgnn.nn.models.mpnn_lstm import MPNNLSTMLayer
from hpcdgnn.nn.models.tgcn import TGCNLayer
from hpcdgnn.nn.models.tmgcn import TMGCNLayer, m_transform

__all__ = [
    "CDGCNLayer",
    "DGNN",
    "DySATLayer",
    "DynamicLayer",
    "EvolveGCNOLayer",
    "MPNNLSTMLayer",
    "TGCNLayer",
    "TMGCNLayer",
    "available_models",
    "build_model",
    "m_transform",
    "register_model",
]
