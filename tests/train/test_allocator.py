"""The host allocator of ``python -m hpcdgnn run`` (hpcdgnn/allocator.py): jemalloc preloaded by a restart
before MPI starts, where the machine has it; ``HPCDGNN_MALLOC`` chooses; a bad value is a one-line error on
every rank, exit 2, no hang."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from hpcdgnn import allocator
from hpcdgnn.errors import ConfigError
from tests.conftest import REPO, write_job

JEMALLOC = allocator.find_jemalloc()
needs_jemalloc = pytest.mark.skipif(JEMALLOC is None, reason="no libjemalloc.so.2 on this machine "
                                    "(Debian/Ubuntu: apt-get install libjemalloc2)")


def test_choice(monkeypatch, tmp_path):
    monkeypatch.delenv("HPCDGNN_MALLOC_ACTIVE", raising=False)
    monkeypatch.setenv("HPCDGNN_MALLOC", "system")
    assert allocator._choice() is None
    allocator.reexec()  # nothing to do: returns
    monkeypatch.setenv("HPCDGNN_MALLOC", str(tmp_path / "missing.so"))
    with pytest.raises(ConfigError, match="HPCDGNN_MALLOC=.*missing.so.*no such file"):
        allocator._choice()
    lib = tmp_path / "libmy.so"
    lib.write_bytes(b"")
    monkeypatch.setenv("HPCDGNN_MALLOC", str(lib))
    assert allocator._choice() == str(lib)
    monkeypatch.setenv("HPCDGNN_MALLOC", "auto")
    assert allocator._choice() == JEMALLOC
    monkeypatch.setenv("HPCDGNN_MALLOC_ACTIVE", str(lib))  # the restarted process: never restarts again
    allocator.reexec()
    assert allocator.describe() == "libmy.so (HPCDGNN_MALLOC=auto)"
    # never restarted (a script that embeds hpcdgnn): the banner says so, and where jemalloc is, if anywhere
    monkeypatch.delenv("HPCDGNN_MALLOC_ACTIVE")
    assert allocator.describe() == (f"system malloc (HPCDGNN_MALLOC=auto, {JEMALLOC} not preloaded)" if JEMALLOC
                                    else "system malloc (HPCDGNN_MALLOC=auto, no jemalloc found)")
    monkeypatch.setenv("HPCDGNN_MALLOC", "system")
    assert allocator.describe() == "system malloc (HPCDGNN_MALLOC=system)"


@needs_jemalloc
def test_restart_preloads_jemalloc():
    """The restarted interpreter has the library mapped, and its MALLOC_CONF unless the user set one."""
    code = ("import os; from hpcdgnn import allocator; allocator.reexec(); "
            "print('mapped' if 'jemalloc' in open('/proc/self/maps').read() else 'absent', os.environ['MALLOC_CONF'])")
    env = {k: v for k, v in os.environ.items() if k not in ("HPCDGNN_MALLOC_ACTIVE", "MALLOC_CONF", "LD_PRELOAD")}
    env["HPCDGNN_MALLOC"] = "auto"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=REPO, check=True)
    assert out.stdout.split() == ["mapped", allocator._CONF]
    env["MALLOC_CONF"] = "narenas:1"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=REPO, check=True)
    assert out.stdout.split() == ["mapped", "narenas:1"]


@needs_jemalloc
def test_run_under_mpi_with_jemalloc_and_a_bad_value(launcher, small_dataset, tmp_path, monkeypatch):
    """P = 3 ranks each restart with jemalloc and train; the banner says so. A missing library: a rank says so
    in one line, exit 2 (before MPI starts, so no rank waits for another)."""
    job = write_job(tmp_path / "job.yaml", small_dataset)
    monkeypatch.setenv("HPCDGNN_MALLOC", "auto")
    proc = launcher.run(3, ["-m", "hpcdgnn", "run", str(job), "--output", str(tmp_path / "run")])
    assert proc.returncode == 0, proc.stderr
    assert "host allocator: libjemalloc.so.2 (HPCDGNN_MALLOC=auto)" in proc.stdout + proc.stderr
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["environment"]["host_allocator"] == "libjemalloc.so.2 (HPCDGNN_MALLOC=auto)"
    monkeypatch.setenv("HPCDGNN_MALLOC", str(tmp_path / "nowhere.so"))
    proc = launcher.run(2, ["-m", "hpcdgnn", "run", str(job), "--output", str(tmp_path / "bad")], timeout=60)
    assert proc.returncode == 2
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("hpcdgnn: error:")]
    # a line from each rank that got that far (mpirun ends the others once one exits 2; seen here under load)
    assert 1 <= len(lines) <= 2 and all("HPCDGNN_MALLOC=" in ln and "no such file" in ln for ln in lines)
    assert not (tmp_path / "bad").exists()


@pytest.mark.parametrize(("var", "value"), [("HPCDGNN_KERNELS", "fast"), ("HPCDGNN_BUCKET_BYTES", "half")])
def test_bad_kernels_value_stops_every_rank_before_mpi(launcher, small_dataset, tmp_path, monkeypatch, var, value):
    """HPCDGNN_KERNELS (and HPCDGNN_BUCKET_BYTES) are checked with HPCDGNN_MALLOC, before MPI starts: one line
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
