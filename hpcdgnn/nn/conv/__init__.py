"""Graph convolution building blocks."""

from hpcdgnn.nn.conv.gat import GATConv
from hpcdgnn.nn.conv.gcn import NormalizedAdjacency, gcn_norm, spmm
from hpcdgnn.nn.conv.graph import LocalGraph

__all__ = ["GATConv", "LocalGraph", "NormalizedAdjacency", "gcn_norm", "spmm"]
