"""manifest.json, what makes a directory a dataset: written durably, and a failed write leaves no temporary."""

from __future__ import annotations

import json
import subprocess
import sys

from hpcdgnn.data.manifest import MANIFEST_NAME, write_manifest_json
from tests.synced import SyncLog


def test_the_manifest_is_synced_before_its_rename_and_its_directory_after(tmp_path, monkeypatch):
    """A manifest renamed into place before its data reached the disk reads as empty after a node's crash."""
    log = SyncLog(monkeypatch)
    path = write_manifest_json(tmp_path, {"format": "hpcdgnn-snapshots", "version": 1})
    assert json.loads(path.read_text()) == {"format": "hpcdgnn-snapshots", "version": 1}
    assert log.durable(tmp_path / MANIFEST_NAME) == ""


def test_a_write_that_fails_part_way_leaves_the_old_manifest_and_no_temporary(tmp_path):
    """The fixed ``manifest.json.tmp`` stayed behind after a write that failed part way (here at the process's file
    size limit, ``ulimit -f``, as a full disk would)."""
    (tmp_path / MANIFEST_NAME).write_text('{"version": 1}\n')
    script = ("import pathlib, resource, sys\n"
              "from hpcdgnn.data.manifest import write_manifest_json\n"
              "resource.setrlimit(resource.RLIMIT_FSIZE, (4096, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))\n"
              "try:\n"
              "    write_manifest_json(pathlib.Path(sys.argv[1]), {'snapshot_nnz': list(range(10000))})\n"
              "except OSError as e:\n"
              "    print(e.strerror)\n")
    out = subprocess.run([sys.executable, "-c", script, str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "File too large", out.stderr
    assert (tmp_path / MANIFEST_NAME).read_text() == '{"version": 1}\n'
    assert sorted(p.name for p in tmp_path.iterdir()) == [MANIFEST_NAME]
