"""perf/bench_checkpoint.py: its file case writes ``--file`` and deletes it afterwards, so a path that exists (a
user's file) is refused in one line, exit 2, and left as it was."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import REPO


def test_an_existing_file_is_refused_and_kept(tmp_path):
    kept = tmp_path / "model.pt"
    kept.write_bytes(b"a user's checkpoint")
    proc = subprocess.run([sys.executable, "perf/bench_checkpoint.py", "--nodes", "100", "--memory-dim", "4",
                           "--edge-dim", "1", "--file", str(kept)], capture_output=True, text=True, cwd=REPO,
                          timeout=120)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "--file" in proc.stderr and str(kept) in proc.stderr
    assert kept.read_bytes() == b"a user's checkpoint"
