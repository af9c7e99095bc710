"""Graph convolution building blocks."""

from hpcdgnn.nn.conv.gcn import NormalizedAdjacency, gcn_norm, spmm

__all__ = ["NormalizedAdjacency", "gcn_norm", "spmm"]
