"""The integrated graph-RNN cells under the full-batch strategies (issue 14 item 2), float64.

* one rank, one process (one torch import for all runs): ``snapshot`` with checkpoint blocks 1 and 3
  (state carried across blocks, step graphs reloaded per block) and ``pss`` give the same loss and
  gradient-norm trajectory for every new model; ``tgcn_cell`` (a GCN in the gates of a vertex-local
  recurrence) also under ``vertex`` and ``chunk``;
* ``pss`` under ``mpirun -np 3`` (the state pipelined through whole-snapshot ranks) reproduces them for
  gconv_lstm and tgcn_cell, and ``vertex`` under ``-np 2`` reproduces tgcn_cell's;
* a model that needs step graphs under ``vertex`` at -np 2 is refused in one line (exit 2).
"""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np

from tests.conftest import REPO, mpi_env, write_job
from tests.train.test_exactness import _losses_many

GRAPH = ["gconv_lstm", "gconv_gru", "dcrnn", "gcrn_m1"]

_SCRIPT = """
import json, sys
from hpcdgnn.comm.communicator import Communicator
from hpcdgnn.train.trainer import run_training
comm = Communicator()
out = {}
for job, run_dir, sets in json.loads(sys.argv[1]):
    res = run_training(job, sets, run_dir, comm)
    out[run_dir] = [[r["loss"], r["grad_norm"]] for r in res.metrics]
print("RESULT " + json.dumps(out))
"""


def _job(tmp_path, data, model, **strategy):
    name = "-".join([model, *(f"{k}{v}" for k, v in strategy.items())])
    order = {"order": 3 if model == "dcrnn" else 2} if model in GRAPH else {}  # tgcn_cell has no K
    return str(write_job(tmp_path / f"{name}.yaml", data, model={"name": model, **order},
                         strategy=strategy, train={"epochs": 3})), str(tmp_path / f"run-{name}")


def test_graph_rnn_models_one_rank_and_pipelined(launcher, small_dataset, tmp_path):
    runs = {}
    for model in [*GRAPH, "tgcn_cell"]:
        runs[(model, "ref")] = _job(tmp_path, small_dataset, model, name="snapshot")
        runs[(model, "blocks")] = _job(tmp_path, small_dataset, model, name="snapshot", blocks=3)
        runs[(model, "pss")] = _job(tmp_path, small_dataset, model, name="pss")
    runs[("tgcn_cell", "vertex")] = _job(tmp_path, small_dataset, "tgcn_cell", name="vertex")
    runs[("tgcn_cell", "chunk")] = _job(tmp_path, small_dataset, "tgcn_cell", name="chunk", chunk_size=20)
    proc = subprocess.run([sys.executable, "-c", _SCRIPT, json.dumps([[j, r, []] for j, r in runs.values()])],
                          capture_output=True, text=True, env=mpi_env(), cwd=REPO, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    got = json.loads(next(line for line in proc.stdout.splitlines() if line.startswith("RESULT "))[7:])
    got = {key: np.array(got[run]) for key, (_, run) in runs.items()}
    for (model, kind), val in got.items():
        ref = got[(model, "ref")]
        assert ref.shape == (3, 2) and np.all(np.isfinite(ref)) and not np.allclose(ref[0, 0], ref[-1, 0], rtol=1e-9)
        np.testing.assert_allclose(val, ref, rtol=1e-9, err_msg=f"{model} {kind}")
    # the state pipelined through 3 ranks of whole snapshots (T = 7: 3, 2, 2), and tgcn_cell on vertex ranges
    for P, cases in ((3, [("gconv_lstm", "pss"), ("tgcn_cell", "pss")]), (2, [("tgcn_cell", "vertex")])):
        vals = _losses_many(launcher, P, [(runs[(m, s)][0], tmp_path / f"{m}-{s}-p{P}", ()) for m, s in cases])
        for (model, strategy), (val, _) in zip(cases, vals, strict=True):
            np.testing.assert_allclose(val, got[(model, "ref")], rtol=1e-9, err_msg=f"{model} {strategy} P={P}")


def test_step_graph_models_refused_where_the_time_encoder_sees_vertex_ranges(launcher, small_dataset, tmp_path):
    job = write_job(tmp_path / "job.yaml", small_dataset, model={"name": "gconv_gru"}, strategy={"name": "vertex"})
    proc = launcher.run(2, ["-m", "hpcdgnn", "run", str(job), "--output", str(tmp_path / "run")])
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("hpcdgnn: error:")]
    assert len(lines) == 1, proc.stderr
    assert "model.name: gconv_gru" in lines[0] and "strategy.name: vertex" in lines[0] and "pss" in lines[0]
    assert not (tmp_path / "run").exists()
