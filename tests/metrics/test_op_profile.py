"""``debug.profile_epoch``: one epoch under torch's profiler on every rank (hpcdgnn/metrics/op_profile.py)."""

from __future__ import annotations

import json

import pytest

from tests.conftest import read_metrics, write_job


def test_a_profiled_epoch_writes_every_ranks_operators_and_changes_no_result(launcher, tmp_path, small_dataset):
    """P = 3 (T = 7, N = 23: neither divisible): each rank writes its operator table and records for epoch 2,
    the record of that epoch alone is flagged, the summary's steady median leaves it out, and the losses are
    those of the same job unprofiled."""
    runs = {}
    for name, debug in (("plain", {}), ("profiled", {"profile_epoch": 2})):
        job = write_job(tmp_path / f"{name}.yaml", small_dataset, train={"epochs": 3, "warmup_epochs": 0},
                        debug=debug)
        runs[name] = tmp_path / name
        proc = launcher.run(3, ["-m", "hpcdgnn", "run", str(job), "--output", str(runs[name])])
        assert proc.returncode == 0, proc.stderr
    out = runs["profiled"]
    assert "epoch 2 profiled" in proc.stdout + proc.stderr
    for rank in range(3):
        rec = json.loads((out / "profile" / f"rank{rank}.json").read_text())
        assert (rec["epoch"], rec["rank"]) == (2, rank)
        ops = rec["operators"]
        assert ops == sorted(ops, key=lambda o: o["self_cpu_s"], reverse=True)
        names = {o["name"] for o in ops}
        assert any(n.startswith("aten::") for n in names) and all(o["calls"] >= 1 for o in ops)
        assert (out / "profile" / f"rank{rank}.txt").read_text().startswith(f"epoch 2, rank {rank}\n")
    assert not (runs["plain"] / "profile").exists()
    recs = read_metrics(out)
    assert [r.get("profiled", False) for r in recs] == [False, True, False]
    assert [r["loss"] for r in recs] == [r["loss"] for r in read_metrics(runs["plain"])]
    steady = json.loads((out / "summary.json").read_text())["steady_epoch_seconds"]
    times = [r["slowest"]["epoch"] for r in recs]
    assert steady["median"] == pytest.approx((times[0] + times[2]) / 2)  # epochs 1 and 3 (no warm-up here)
