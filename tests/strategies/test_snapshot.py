"""S1 end to end: bytes reported in metrics.jsonl equal IBM §4.2's volume for each redistribution."""

from __future__ import annotations

import json

import pytest

from tests.comm.test_alltoall import expected_bytes
from tests.conftest import SMALL_N, SMALL_T, read_metrics, write_job


@pytest.mark.parametrize("P", [2, 3])
def test_reported_bytes_match_volume_formula(launcher, small_dataset, tmp_path, P):
    hidden = 5
    job = write_job(tmp_path / "job.yaml", small_dataset, model={"name": "tmgcn", "hidden": hidden, "layers": 2},
                    train={"epochs": 2, "dtype": "float64"})
    proc = launcher.run(P, ["-m", "hpcdgnn", "run", str(job), "--output", str(tmp_path / "run")])
    assert proc.returncode == 0, proc.stderr
    rec = read_metrics(tmp_path / "run")[-1]
    one = expected_bytes(SMALL_T, SMALL_N, hidden, P, 8)
    # TM-GCN: per layer one snapshot->vertex and one vertex->snapshot exchange of width `hidden`, 2 layers;
    # backward repeats them with the counts swapped (the reverse exchange moves the same bytes)
    assert rec["bytes_by_tag"]["redistribute.fwd"] == 4 * one
    assert rec["bytes_by_tag"]["redistribute.bwd"] == 4 * one
    # gradient all-reduce: every rank contributes one float64 buffer of all parameters
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert rec["bytes_by_tag"]["grad_allreduce"] == P * summary["parameters"]["count"] * 8
    assert rec["bytes_sent"] == sum(rec["bytes_by_tag"].values())
    t = rec["time"]
    assert t["epoch"]["min"] <= t["epoch"]["mean"] <= t["epoch"]["max"]
    assert summary["environment"]["num_ranks"] == P and len(summary["memory"]["peak_rss_bytes"]) == P
