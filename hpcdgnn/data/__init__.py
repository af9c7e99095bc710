"""Datasets: the on-disk snapshot format, its reader and writer, and the input converters.

``prepare`` (:mod:`hpcdgnn.data.prepare`), ``generate`` (:mod:`hpcdgnn.data.generate`)
and ``inspect`` (:mod:`hpcdgnn.data.inspect`) are the command-line entry points;
graph-difference encoding (SPEC S3) is in :mod:`hpcdgnn.data.graph_diff`.
"""

from hpcdgnn.data.manifest import Manifest, ShardInfo, load_manifest, save_manifest
from hpcdgnn.data.shard_reader import ShardReader
from hpcdgnn.data.snapshot import Snapshot
from hpcdgnn.data.writer import RawSnapshot, write_dataset

__all__ = [
    "Manifest",
    "RawSnapshot",
    "ShardInfo",
    "ShardReader",
    "Snapshot",
    "load_manifest",
    "save_manifest",
    "write_dataset",
]
