"""The dataset manifest: what a dataset directory holds, read by rank 0 first.

A dataset directory (written by ``prepare`` or ``generate``)::

    DIR/
      manifest.json          # this schema (below)
      vertices.h5            # /original_id: the user's vertex id for each of 0..N-1
      shards/
        shard-00000.h5       # snapshots [t_start, t_stop), one group per snapshot
        shard-00001.h5
        ...

``manifest.json`` keys (``FORMAT_VERSION`` 1)::

    format            "hpcdgnn-snapshots"
    version           1
    num_vertices      N
    num_snapshots     T
    num_features      F
    feature_names     [F names], e.g. ["in_degree", "out_degree"]
    directed          bool
    num_classes       C >= 2 when shards carry node labels, else 0
    index_dtype       "int32" | "int64"   (CSR column indices)
    smoothing         {"edge_life": l, "mtransform_window": w}   (IBM §5.4, SPEC S5)
    snapshot_nnz      [T] nonzeros of the adjacency trained on (after smoothing)
    snapshot_edges    [T] raw edges of each snapshot (link-prediction targets)
    snapshot_active   [T] vertices with at least one raw edge
    snapshot_time     [T] [start, stop) of each window in the source's time unit, or null
    shards            [{"file", "t_start", "t_stop", "bytes", "sha256"}]
    source            free-form provenance (input path, format, options)

The shard layout is documented in :mod:`hpcdgnn.data.shard_reader`.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from hpcdgnn.errors import DataError

__all__ = ["Manifest", "ShardInfo", "load_manifest", "save_manifest", "MANIFEST_NAME", "FORMAT_NAME", "FORMAT_VERSION"]

MANIFEST_NAME = "manifest.json"
FORMAT_NAME = "hpcdgnn-snapshots"
FORMAT_VERSION = 1


@dataclass(frozen=True)
class ShardInfo:
    """One shard file: a contiguous range of snapshots ``[t_start, t_stop)``."""

    file: str
    t_start: int
    t_stop: int
    bytes: int
    sha256: str


@dataclass(frozen=True)
class Manifest:
    """Typed view of ``manifest.json`` (see the module docstring for the keys)."""

    num_vertices: int
    num_snapshots: int
    num_features: int
    feature_names: list[str]
    directed: bool
    num_classes: int
    index_dtype: str
    smoothing: dict[str, int]
    snapshot_nnz: list[int]
    snapshot_edges: list[int]
    snapshot_active: list[int]
    snapshot_time: list[list[float]] | None
    shards: list[ShardInfo]
    source: dict[str, Any] = field(default_factory=dict)
    format: str = FORMAT_NAME
    version: int = FORMAT_VERSION

    def shard_of(self, t: int) -> ShardInfo:
        """Return the shard that holds snapshot ``t``."""
        for s in self.shards:
            if s.t_start <= t < s.t_stop:
                return s
        raise DataError(f"manifest: no shard holds snapshot {t} (T = {self.num_snapshots})")

    @property
    def smoothed(self) -> bool:
        """Whether the trained adjacency differs from the raw edges (S5 applied)."""
        return self.smoothing.get("edge_life", 1) > 1 or self.smoothing.get("mtransform_window", 1) > 1

    def to_json(self) -> dict[str, Any]:
        """Return the manifest as a JSON-ready dict."""
        return asdict(self)


_REQUIRED = [f for f in Manifest.__dataclass_fields__ if f not in ("source", "format", "version")]


def load_manifest(root: str | Path) -> Manifest:
    """Read and check ``root/manifest.json``; raise :class:`DataError` naming the file."""
    path = Path(root) / MANIFEST_NAME
    if not Path(root).is_dir():
        raise DataError(f"{root}: dataset directory does not exist")
    try:
        raw = json.loads(path.read_text())
    except FileNotFoundError:
        raise DataError(f"{path}: missing; is {root} a dataset written by 'hpcdgnn prepare'?") from None
    except (OSError, ValueError) as e:
        raise DataError(f"{path}: cannot parse: {e}") from None
    if not isinstance(raw, dict) or raw.get("format") != FORMAT_NAME:
        raise DataError(f"{path}: not an {FORMAT_NAME} manifest (key 'format')")
    if raw.get("version") != FORMAT_VERSION:
        raise DataError(f"{path}: version {raw.get('version')!r} unsupported (this build reads {FORMAT_VERSION})")
    missing = [k for k in _REQUIRED if k not in raw]
    if missing:
        raise DataError(f"{path}: missing key(s) {', '.join(missing)}")
    unknown = sorted(set(raw) - set(Manifest.__dataclass_fields__))
    if unknown:
        raise DataError(f"{path}: unknown key(s) {', '.join(unknown)}")
    try:
        raw["shards"] = [ShardInfo(**s) for s in raw["shards"]]
    except TypeError as e:
        raise DataError(f"{path}: bad entry in 'shards': {e}") from None
    m = Manifest(**raw)
    T = m.num_snapshots
    for key in ("snapshot_nnz", "snapshot_edges", "snapshot_active"):
        if len(getattr(m, key)) != T:
            raise DataError(f"{path}: '{key}' has {len(getattr(m, key))} entries, expected T = {T}")
    covered = 0
    for s in m.shards:
        if s.t_start != covered or s.t_stop <= s.t_start:
            raise DataError(f"{path}: shard {s.file} covers [{s.t_start}, {s.t_stop}), expected to start at {covered}")
        covered = s.t_stop
    if covered != T:
        raise DataError(f"{path}: shards cover {covered} snapshots, expected T = {T}")
    if len(m.feature_names) != m.num_features:
        raise DataError(f"{path}: 'feature_names' has {len(m.feature_names)} names, expected F = {m.num_features}")
    return m


def save_manifest(root: str | Path, manifest: Manifest) -> Path:
    """Write ``root/manifest.json`` atomically (temporary file, then rename)."""
    path = Path(root) / MANIFEST_NAME
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(manifest.to_json(), indent=1) + "\n")
    tmp.replace(path)
    return path
