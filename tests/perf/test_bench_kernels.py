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
    out = np.zeros(2, f32)
    # edge_mlp_forward takes 8 arguments: two more are dropped, not an error
    before.edge_mlp_forward(pu, pu, np.zeros(4, f32), np.ones(4, f32), f32(0.5), src, dst, out, "extra", True)
    np.testing.assert_allclose(out, (pu[src] + pu[dst]).sum(1) + 0.5, rtol=1e-6)
    with pytest.raises(SystemExit, match="no-such-revision"):
        bench.load_before("no-such-revision", tmp_path)
