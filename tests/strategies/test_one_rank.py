"""At P = 1 every strategy does the snapshot strategy's arithmetic (issue 13): the same loss and gradient-norm
trajectory, so none may pay for machinery with nothing to do (halo exchanges, index all-to-alls, per-snapshot
loops) or train what the snapshot strategy leaves out (the time encoder past the training horizon).

All runs share one process (one MPI start, one torch import): ``run_training`` per strategy and model.
"""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from tests.conftest import REPO, mpi_env, write_job

pytestmark = pytest.mark.mpi  # each test trains in a singleton MPI process (python -c, hpcdgnn.comm)

MODELS = ["cdgcn", "tmgcn", "evolvegcn_o", "dysat"]

_SCRIPT = """
import json, sys
from hpcdgnn.comm.communicator import Communicator
from hpcdgnn.train.trainer import run_training
comm = Communicator()
out = {}
for job, run_dir in json.loads(sys.argv[1]):
    res = run_training(job, [], run_dir, comm)
    out[job] = [[r["loss"], r["grad_norm"]] for r in res.metrics]
print("RESULT " + json.dumps(out))
"""


def test_every_strategy_matches_snapshot_at_one_rank(small_dataset, tmp_path):
    from hpcdgnn.strategies.registry import available_strategies, get_strategy

    # the full-batch strategies: mini-batch ones (sequences) train a different sequence of steps
    strategies = [s for s in available_strategies() if get_strategy(s).full_batch]
    assert {"snapshot", "vertex", "chunk", "pss"} <= set(strategies)
    jobs = {}
    for model in MODELS:
        for s in strategies:
            extra = {"chunk_size": 20} if s == "chunk" else {}
            job = write_job(tmp_path / f"{model}-{s}.yaml", small_dataset, model={"name": model},
                            strategy={"name": s, **extra}, train={"epochs": 3})
            jobs[(model, s)] = (str(job), str(tmp_path / f"run-{model}-{s}"))
    proc = subprocess.run([sys.executable, "-c", _SCRIPT, json.dumps(list(jobs.values()))], capture_output=True,
                          text=True, env=mpi_env(), cwd=REPO, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    got = json.loads(next(line for line in proc.stdout.splitlines() if line.startswith("RESULT "))[7:])
    for model in MODELS:
        ref = np.array(got[jobs[(model, "snapshot")][0]])
        assert ref.shape == (3, 2) and not np.allclose(ref[0, 0], ref[-1, 0], rtol=1e-9), model
        for s in strategies:
            np.testing.assert_allclose(np.array(got[jobs[(model, s)][0]]), ref, rtol=1e-9, err_msg=f"{model} {s}")


_SPLIT_SCRIPT = """
import json, sys
from hpcdgnn.comm.communicator import Communicator
from hpcdgnn.strategies.halo import HaloStrategy
from hpcdgnn.train.trainer import run_training
comm = Communicator()
calls, split = [], HaloStrategy._aggregate_phases
def spy(self, li, h, head):
    calls.append(li)
    return split(self, li, h, head)
HaloStrategy._aggregate_phases = spy
out = {}
for job, run_dir, on in json.loads(sys.argv[1]):
    if not on:  # the unsplit path: every layer aggregated whole, with autograd over all steps
        HaloStrategy.splits_aggregation = lambda self, layer, li: False
    del calls[:]
    res = run_training(job, [], run_dir, comm)
    out[run_dir] = [[[r["loss"], r["grad_norm"]] for r in res.metrics], sorted(set(calls))]
print("RESULT " + json.dumps(out))
"""


@pytest.mark.parametrize("model", ["evolvegcn_o", "tmgcn"])
def test_halo_layouts_split_at_the_horizon_exactly(small_dataset, tmp_path, model):
    """The vertex and chunk layouts run the steps after the training horizon without autograd (Ã split at
    the horizon row, HaloLayout._phases): the split runs, and the losses and gradient norms equal the whole
    aggregation's."""
    runs = []
    for s in ("vertex", "chunk"):
        job = write_job(tmp_path / f"{s}.yaml", small_dataset, model={"name": model},
                        strategy={"name": s, **({"chunk_size": 20} if s == "chunk" else {})}, train={"epochs": 3})
        runs += [(str(job), str(tmp_path / f"{s}-{on}"), on) for on in (True, False)]
    runs.sort(key=lambda r: not r[2])  # the split runs first: the script turns it off for good
    proc = subprocess.run([sys.executable, "-c", _SPLIT_SCRIPT, json.dumps(runs)], capture_output=True,
                          text=True, env=mpi_env(), cwd=REPO, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    got = json.loads(next(line for line in proc.stdout.splitlines() if line.startswith("RESULT "))[7:])
    for s in ("vertex", "chunk"):
        (split, layers), (whole, none) = got[str(tmp_path / f"{s}-True")], got[str(tmp_path / f"{s}-False")]
        # layer 1 splits everywhere; layer 0's constant Ã·X too, unless chunk moves it to the RNN owners (TM-GCN)
        assert 1 in layers and none == [], (s, layers, none)
        np.testing.assert_allclose(np.array(split), np.array(whole), rtol=1e-12, err_msg=s)
