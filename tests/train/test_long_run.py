"""A long job's memory: nothing per epoch is kept in memory for the whole run (a helper's audit of 600-2000-epoch
runs: every rank grew 7-12 KiB an epoch at P = 2, the epoch records kept for summary.json — gigabytes for a
multi-day job of short epochs, more at large P, whose records hold per-rank lists)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest import REPO, mpi_env, read_metrics, write_job

pytestmark = pytest.mark.mpi  # trains in a singleton MPI process (python -c, hpcdgnn.comm)

_SCRIPT = """
import gc, json, sys
from hpcdgnn.comm.communicator import Communicator
from hpcdgnn.train import trainer

comm = Communicator()
held = []
real = trainer.EpochRecorder.end

def end(self, *a, **k):  # after each epoch: how many epoch records are still alive
    out = real(self, *a, **k)
    gc.collect()
    held.append(sum(1 for o in gc.get_objects() if isinstance(o, dict) and "comm_by_tag" in o))
    return out

trainer.EpochRecorder.end = end
res = trainer.run_training(sys.argv[1], [], sys.argv[2], comm)
gc.collect()
after = sum(1 for o in gc.get_objects() if isinstance(o, dict) and "comm_by_tag" in o)
print("RESULT " + json.dumps({"held": held, "after": after, "losses": res.losses, "metrics": len(res.metrics)}))
"""


def test_epoch_records_are_not_kept_in_memory(small_dataset, tmp_path):
    epochs = 12
    job = write_job(tmp_path / "job.yaml", small_dataset, train={"epochs": epochs})
    proc = subprocess.run([sys.executable, "-c", _SCRIPT, str(job), str(tmp_path / "run")], capture_output=True,
                          text=True, timeout=300, env=mpi_env(), cwd=REPO)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    got = json.loads(next(ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT "))[7:])
    # the epoch's own record (and the last one the totals keep for summary.json's final), not one per epoch
    assert max(got["held"]) <= 2, got["held"]
    assert got["after"] == 0 and len(got["losses"]) == epochs and got["metrics"] == epochs
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    recs = read_metrics(tmp_path / "run")
    assert summary["epochs"] == epochs and summary["final"] == recs[-1]
    assert summary["totals"]["bytes_sent"] == sum(r["bytes_sent"] for r in recs)
