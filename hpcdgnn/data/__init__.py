"""Datasets: the on-disk snapshot format, its reader and writer, and the input converters.

Two on-disk kinds: snapshot datasets (:mod:`hpcdgnn.data.manifest`, the default of
``prepare``) and event streams for continuous-time TGNNs (:mod:`hpcdgnn.data.events`,
``prepare --kind events``); :func:`dataset_kind` tells them apart.

``prepare`` (:mod:`hpcdgnn.data.prepare`), ``generate`` (:mod:`hpcdgnn.data.generate`)
and ``inspect`` (:mod:`hpcdgnn.data.inspect`) are the command-line entry points;
graph-difference encoding (SPEC S3) is in :mod:`hpcdgnn.data.graph_diff`.
"""

from hpcdgnn.data.events import (
    EVENTS_FORMAT,
    EventManifest,
    EventShardInfo,
    EventStream,
    dataset_kind,
    load_event_manifest,
    read_events,
    write_events,
)
from hpcdgnn.data.manifest import Manifest, ShardInfo, load_manifest, save_manifest
from hpcdgnn.data.shard_reader import ShardReader
from hpcdgnn.data.snapshot import Snapshot
from hpcdgnn.data.writer import RawSnapshot, write_dataset

__all__ = [
    "EVENTS_FORMAT",
    "EventManifest",
    "EventShardInfo",
    "EventStream",
    "Manifest",
    "RawSnapshot",
    "ShardInfo",
    "ShardReader",
    "Snapshot",
    "dataset_kind",
    "load_event_manifest",
    "read_events",
    "write_events",
    "load_manifest",
    "save_manifest",
    "write_dataset",
]

from hpcdgnn import submodules_on_use

#: ``hpcdgnn.data.<submodule>`` after ``import hpcdgnn`` alone (:func:`hpcdgnn.submodules_on_use`)
__getattr__ = submodules_on_use(__name__)
