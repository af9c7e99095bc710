"""perf/device/'s prepared scripts: their plumbing, with a stand-in Python (no step does real work here)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _rehearsed(tmp_path: Path, out: Path, *parts: str) -> subprocess.CompletedProcess:
    """``bash perf/device/issue61.sh --rehearse PARTS`` with ``/bin/true`` for Python: every step, no work."""
    return subprocess.run(["bash", "perf/device/issue61.sh", "--rehearse", *parts], cwd=REPO, text=True,
                          capture_output=True, timeout=120,
                          env={"PATH": "/usr/bin:/bin", "OUT": str(out), "PYTHON": "/bin/true", "HOME": str(tmp_path)})


def test_issue61_writes_its_logs_into_an_out_that_does_not_exist_yet(tmp_path):
    """``OUT=DIR bash perf/device/issue61.sh --rehearse a`` with a DIR not made yet (the device tool's $OUT exists,
    a rehearsal's need not): every log failed to open, so no step ran and each said exit 1."""
    out = tmp_path / "not" / "yet"
    proc = _rehearsed(tmp_path, out, "a", "b")
    assert proc.returncode == 0, proc.stderr
    for part, steps in (("a", ["tests", "generate", "pygt-gen32k", "pygt-email64"]),
                        ("b", ["tgn-pyg-protocol", "tgn-defaults", "generate", "blocks-transfer"])):
        summary = (out / f"issue61-{part}.log").read_text()
        assert [line.split(":")[0].strip() for line in summary.splitlines() if line.startswith("   ")] == steps, summary
        assert all(" exit 0 after " in line for line in summary.splitlines() if line.startswith("   ")), summary
        assert all((out / f"issue61-{part}-{s}.log").is_file() for s in steps)


def test_issue61_records_the_machine_s_cores_not_omp_num_threads(tmp_path):
    """Its log's core count came from ``nproc``, which answers ``OMP_NUM_THREADS`` where set: the script sets 1 for
    its runs before it writes the log, so a 16-core host was recorded as 1 core."""
    proc = _rehearsed(tmp_path, tmp_path, "a")
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "issue61-a.log").read_text().splitlines()[1] == str(len(os.sched_getaffinity(0)))
