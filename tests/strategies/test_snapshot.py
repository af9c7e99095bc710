"""S1 end to end: bytes reported in metrics.jsonl equal IBM §4.2's volume for each redistribution."""

from __future__ import annotations

import json
import os
import socket

import pytest

from hpcdgnn.tasks.base import split_steps
from tests.comm.test_alltoall import expected_bytes
from tests.conftest import SMALL_N, SMALL_T, read_metrics, write_job


def plan_bytes(plan: dict, F: int, itemsize: int, last: int | None = None) -> int:
    """Volume of one redistribution from plan.json: sum over p != q of T_p * N_q * F * itemsize,
    counting only snapshots t <= ``last`` when given.
    """
    vb = plan["vertex_bounds"]
    P = len(vb) - 1
    owner = plan["snapshot_owner"] if last is None else plan["snapshot_owner"][: last + 1]
    tp = [owner.count(p) for p in range(P)]
    return sum(tp[p] * (vb[q + 1] - vb[q]) * F * itemsize for p in range(P) for q in range(P) if p != q)


@pytest.mark.parametrize(("model", "layout", "balance", "P"), [
    *[("tmgcn", layout, balance, P) for layout, balance in (("block", "count"), ("block", "work"), ("cyclic", "work"))
      for P in (2, 3)],
    ("cdgcn", "cyclic", "work", 3),  # its transform widens (F -> F + F'): its aggregation moves, F' wide
])
def test_reported_bytes_match_volume_formula(launcher, small_dataset, tmp_path, model, P, layout, balance):
    hidden = 5
    job = write_job(tmp_path / "job.yaml", small_dataset, model={"name": model, "hidden": hidden, "layers": 2},
                    train={"epochs": 2, "dtype": "float64"},
                    # the redistribution's volume: TM-GCN's banded encoder would read a time halo instead
                    strategy={"layout": layout, "balance": balance, "time_halo": "off"})
    proc = launcher.run(P, ["-m", "hpcdgnn", "run", str(job), "--output", str(tmp_path / "run")])
    assert proc.returncode == 0, proc.stderr
    rec = read_metrics(tmp_path / "run")[-1]
    plan = json.loads((tmp_path / "run" / "plan.json").read_text())
    one = plan_bytes(plan, hidden, 8)
    if balance == "count" or layout == "cyclic":  # T/P snapshots each: the volume np.array_split's sizes give
        assert one == expected_bytes(SMALL_T, SMALL_N, hidden, P, 8)
    # TM-GCN: per layer one snapshot->vertex and one vertex->snapshot exchange of width `hidden`, 2 layers
    # (CD-GCN the same: its second layer moves ÃH, `hidden` wide, not relu([ÃH ; ÃHW]), twice that);
    # backward repeats them with the counts swapped, for the snapshots up to the last training step only
    # (TM-GCN is causal: no gradient reaches later ones). Except the first layer's move to the vertex owners:
    # its input Ã·X is a constant, moved once (epoch 1, F wide) and kept, and the layer's transform runs there:
    # epoch 1's traffic under its own tag, in no later epoch
    assert rec["bytes_by_tag"]["redistribute.fwd"] == 3 * one and "redistribute.ax0.fwd" not in rec["bytes_by_tag"]
    first = read_metrics(tmp_path / "run")[0]
    assert first["bytes_by_tag"]["redistribute.fwd"] == 3 * one
    F = json.loads((small_dataset / "manifest.json").read_text())["num_features"]
    ax0 = first["bytes_by_tag"]["redistribute.ax0.fwd"]
    assert ax0 == plan_bytes(plan, F, 8) and "redistribute.ax0.bwd" not in first["bytes_by_tag"]
    assert first["bytes_sent"] == rec["bytes_sent"] + ax0
    last = split_steps(SMALL_T - 1, (0.7, 0.15, 0.15))[0].stop - 1  # the training horizon, from the split
    assert 0 < last < SMALL_T - 1
    assert rec["bytes_by_tag"]["redistribute.bwd"] == 3 * plan_bytes(plan, hidden, 8, last) < 3 * one
    assert first["bytes_by_tag"]["redistribute.bwd"] == rec["bytes_by_tag"]["redistribute.bwd"]
    # gradient all-reduce: every rank contributes one float64 buffer of all parameters
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert rec["bytes_by_tag"]["grad_allreduce"] == P * summary["parameters"]["count"] * 8
    assert rec["bytes_sent"] == sum(rec["bytes_by_tag"].values())
    t = rec["time"]
    assert t["epoch"]["min"] <= t["epoch"]["mean"] <= t["epoch"]["max"]
    assert summary["environment"]["num_ranks"] == P and len(summary["memory"]["peak_rss_bytes"]) == P
    # every rank ran on this host and on the CPU: counted per node and per device kind, not rank 0's alone
    env = summary["environment"]
    assert (env["num_nodes"], env["hosts"], env["devices"]) == (1, {socket.gethostname(): P}, {"cpu": P})
    # the CPUs the ranks of this node may run on: their affinities' union, within this machine's
    (cpus,) = env["host_cpus"].values()
    assert set(env["host_cpus"]) == {socket.gethostname()} and 1 <= cpus <= os.cpu_count()
