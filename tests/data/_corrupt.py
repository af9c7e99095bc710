"""Helpers shared by the corrupted-dataset tests of both on-disk kinds (snapshots and event streams)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hpcdgnn.data.writer import file_sha256


def reseal(root: Path, file: str, load: Callable[[Path], Any], save: Callable[[Path, Any], Any]) -> None:
    """Rewrite the manifest's bytes/sha256 of shard ``file`` to match its edited contents.

    ``load``/``save`` are the kind's manifest functions (``load_manifest``/``save_manifest``
    or ``load_event_manifest``/``save_event_manifest``). Resealing leaves the content checks,
    not the checksum, to name an edited shard's fault.
    """
    m = load(root)
    path = root / "shards" / file
    shards = [
        dataclasses.replace(s, bytes=path.stat().st_size, sha256=file_sha256(path)) if s.file == file else s
        for s in m.shards
    ]
    save(root, dataclasses.replace(m, shards=shards))
