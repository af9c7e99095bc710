"""perf/bench_kernels.py's baseline: another revision's compiled-kernel module loaded beside this tree's, and a
kernel that revision defines with fewer trailing arguments called without them. No timing is asserted."""

from __future__ import annotations

import numpy as np
import pytest

from tests.conftest import REPO, perf_script

pytest.importorskip("numba")


def _bench():
    return perf_script("bench_kernels")


def test_before_module_is_the_revisions_and_takes_fewer_arguments(tmp_path):
    if not (REPO / ".git").exists():
        pytest.skip("not a git checkout")
    bench = _bench()
    before = bench.load_before("HEAD", tmp_path)
    assert before.module.__file__ == str(tmp_path / "_kernels_before.py")
    import subprocess

    head = subprocess.run(["git", "show", f"HEAD:{bench.MODULE}"], cwd=REPO, capture_output=True, text=True).stdout
    assert (tmp_path / "_kernels_before.py").read_text() == head
    f32 = np.float32
    pu = np.arange(12, dtype=f32).reshape(3, 4) / 10
    src, dst = np.array([0, 2]), np.array([1, 1])
    out, dpu, dpv, dw2 = np.zeros(2, f32), np.zeros_like(pu), np.zeros_like(pu), np.zeros(4)
    # edge_bce_train takes 13 arguments: two more are dropped, not an error
    before.edge_bce_train(pu, pu, np.zeros(4, f32), np.ones(4, f32), f32(0.5), src, dst, np.ones(2, f32), out, dpu,
                          dpv, dw2, True, "extra", True)
    np.testing.assert_allclose(out, (pu[src] + pu[dst]).sum(1) + 0.5, rtol=1e-6)
    with pytest.raises(SystemExit, match="no-such-revision"):
        bench.load_before("no-such-revision", tmp_path)


def test_bench_rnn_rows_prints_a_row_per_size_and_block_count():
    """perf/bench_rnn_rows.py on a tiny shape: one line per (rows, K), ratios against torch's module whole."""
    import subprocess
    import sys

    from tests.conftest import REPO

    cmd = [sys.executable, str(REPO / "perf" / "bench_rnn_rows.py"), "--steps", "3", "--features", "4", "--hidden",
           "2", "--rows", "10", "--chunks", "1", "3", "--repeat", "1"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    rows = [ln.split() for ln in out.stdout.splitlines() if ln.strip().startswith("10 ")]
    assert [(r[0], r[1], r[2]) for r in rows] == [("10", "1", "10"), ("10", "3", "4")], out.stdout
    assert rows[0][5] == "1.00"  # torch's module whole is the reference


def test_micro_timing_one_stalled_call_does_not_make_the_figure_and_sides_alternate():
    """--micro at --repeat 1 (:func:`time_calls`, on a stand-in clock): the compiling first call and the first call
    after the other side's compilation are untimed; a sample is the median of K calls, so a single stalled call
    (a scheduler slice on a shared machine, 15x an LSTM call) does not make the side's figure;
    the sides alternate call by call; every call gets fresh arguments, written before the clock starts."""
    bench = _bench()
    now = [0.0]
    order: list[str] = []
    made: list[tuple] = []
    calls_of = {"before": 0, "now": 0}

    def kernel(name, stall_at):
        def call(a, marker):
            calls_of[name] += 1
            order.append(name)
            assert a.flags.writeable and marker is made[-1][1]  # the arguments fresh() just made
            now[0] += 100.0 if calls_of[name] == 1 else 30.0 if calls_of[name] == stall_at else 1.0
        return call

    def fresh():
        made.append((np.arange(3.0), object()))
        return made[-1]

    res = bench.time_calls({"before": kernel("before", 3), "now": kernel("now", 99)}, fresh, 1, sample_s=5.0,
                           clock=lambda: now[0])
    assert res["before"][0] == res["now"][0] == 1.0  # the stall of before's first timed call is not the figure
    assert res["now"][2] == 5  # K = sample_s / the second untimed call's time
    assert order == ["before", "now"] * (2 + 5)
    assert res["now"][1] is made[-1] and res["before"][1] is made[-2]  # the last call's arguments, to compare
    np.testing.assert_array_equal(made[-1][0], np.arange(3.0))  # touching its pages changed no value
    import gc

    assert gc.isenabled()
