"""Bad data under mpirun -np 3: every rank exits non-zero quickly and the message names the file."""

from __future__ import annotations

import shutil
import time

import pytest

from tests.conftest import write_job


@pytest.mark.parametrize("fault", ["missing", "truncated", "no_manifest"])
def test_bad_shard_ends_every_rank(launcher, tmp_path, small_dataset, fault):
    data = tmp_path / "ds"
    shutil.copytree(small_dataset, data)
    shard = data / "shards" / "shard-00001.h5"  # snapshots 3..5: owned by rank 1 at P = 3
    if fault == "missing":
        shard.unlink()
        named = str(shard)
    elif fault == "truncated":
        size = shard.stat().st_size
        with open(shard, "r+b") as f:
            f.truncate(size // 2)
        named = str(shard)
    else:
        (data / "manifest.json").unlink()
        named = str(data / "manifest.json")
    job = write_job(tmp_path / "job.yaml", data)
    t0 = time.monotonic()
    proc = launcher.run(3, ["-m", "hpcdgnn", "run", str(job)], timeout=60)
    elapsed = time.monotonic() - t0
    assert proc.returncode != 0
    assert elapsed < 30, f"took {elapsed:.1f}s"
    assert named in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr


def test_exception_on_one_rank_aborts_job(launcher, tmp_path):
    """A crash (not a user error) on one rank prints 'rank R/P:' with the traceback and ends the job."""
    script = tmp_path / "crash.py"
    script.write_text(
        "import sys\n"
        "from hpcdgnn.__main__ import _install_abort_hook\n"
        "from hpcdgnn.comm import Communicator\n"
        "c = Communicator(); _install_abort_hook(c)\n"
        "if c.rank == 1:\n"
        "    raise RuntimeError('injected fault')\n"
        "c.barrier()  # ranks 0 and 2 would wait here forever without the abort\n"
    )
    t0 = time.monotonic()
    proc = launcher.run(3, [str(script)], timeout=60)
    assert proc.returncode != 0
    assert time.monotonic() - t0 < 30
    assert "rank 1/3:" in proc.stderr and "injected fault" in proc.stderr
