"""Graph convolution building blocks."""

from hpcdgnn.nn.conv.gat import GATConv
from hpcdgnn.nn.conv.graph import LocalGraph
from hpcdgnn.ops.sparse import NormalizedAdjacency, gcn_norm, spmm

__all__ = ["GATConv", "LocalGraph", "NormalizedAdjacency", "gcn_norm", "spmm"]
