"""The host allocator a run reports (hpcdgnn/allocator.py): what the process has mapped — glibc's malloc, or
a library the job script preloads with ``LD_PRELOAD`` — and environment values checked before MPI starts."""

from __future__ import annotations

import subprocess
import sys

import pytest

from hpcdgnn import allocator
from tests.conftest import REPO, write_job

_MAPS = ("7f1c2a000000-7f1c2a0a0000 r-xp 00000000 08:01 1234 /usr/lib/x86_64-linux-gnu/libjemalloc.so.2\n"
         "7f1c2b000000-7f1c2b001000 rw-p 00000000 00:00 0 \n")


def test_describe_names_a_preloaded_malloc_else_glibc():
    """A malloc library in the process's maps is named; without one, glibc's (this test process preloads none)."""
    assert allocator.describe(_MAPS) == "libjemalloc.so.2 (preloaded)"
    assert allocator.describe(_MAPS.replace("jemalloc", "tcmalloc_minimal")) == "libtcmalloc_minimal.so.2 (preloaded)"
    assert allocator.describe("7f1c2b000000-7f1c2b001000 rw-p 00000000 00:00 0 \n") == "glibc malloc"
    out = subprocess.run([sys.executable, "-c", "from hpcdgnn import allocator; print(allocator.describe())"],
                         capture_output=True, text=True, cwd=REPO, check=True)
    assert out.stdout.strip() == "glibc malloc"


@pytest.mark.parametrize(("var", "value"), [("HPCDGNN_KERNELS", "fast"), ("HPCDGNN_BUCKET_BYTES", "half")])
def test_bad_kernels_value_stops_every_rank_before_mpi(launcher, small_dataset, tmp_path, monkeypatch, var, value):
    """HPCDGNN_KERNELS (and HPCDGNN_BUCKET_BYTES) are checked before MPI starts: one line
    (per rank that gets there before mpirun ends it), exit 2, no run directory (not an abort from the first
    rank to score pairs)."""
    job = write_job(tmp_path / "job.yaml", small_dataset)
    monkeypatch.setenv(var, value)
    proc = launcher.run(2, ["-m", "hpcdgnn", "run", str(job), "--output", str(tmp_path / "bad")], timeout=60)
    assert proc.returncode == 2, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("hpcdgnn: error:")]
    # one line per rank that got that far: once one rank exits 2, mpirun ends the others, and a rank still
    # importing torch (slow where it loads CUDA) is ended before it prints
    assert 1 <= len(lines) <= 2 and all(f"{var}='{value}'" in ln for ln in lines), proc.stderr
    assert not (tmp_path / "bad").exists()
