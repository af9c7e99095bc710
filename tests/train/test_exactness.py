"""hpcdgnn's ``loss_compare`` (STYLE G11): P ranks reproduce the single-process loss trajectory.

Every exact strategy × model must give the same per-epoch losses under
``mpirun -np 2`` and ``-np 3`` as a plain ``python -m hpcdgnn run``, to rtol
1e-6 in float64 and 1e-4 in float32, on a graph whose T and N neither 2 nor
3 divides.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.conftest import SMALL_N, SMALL_T, make_dataset, read_metrics, write_job

MODELS = ["cdgcn", "evolvegcn_o", "tmgcn"]
RTOL = {"float64": 1e-6, "float32": 1e-4}


def _losses(launcher, np_, job, out, *overrides):
    """Per-epoch [loss, gradient norm] pairs of a run (Adam hides a wrong gradient scale from the
    loss trajectory, so the norm of the summed gradient is compared too).
    """
    return _losses_many(launcher, np_, [(job, out, overrides)])[0]


def _losses_many(launcher, np_, runs):
    """:func:`_losses` of several runs ``(job, out, overrides)`` at one P, in one launch (``Launcher.run_many``)."""
    commands = [["run", str(job), "--output", str(out), *(["--set", *overrides] if overrides else [])]
                for job, out, overrides in runs]
    results = []
    for (job, out, _), proc in zip(runs, launcher.run_many(np_, commands), strict=True):
        assert proc.returncode == 0, f"P={np_} {job} failed:\n{proc.stdout}\n{proc.stderr}"
        recs = read_metrics(out)
        results.append((np.array([[r["loss"], r["grad_norm"]] for r in recs]), recs))
    return results


# every model in float64; float32 (a looser tolerance, the same code path) on one of them; CD-GCN in float64 is
# the snapshot strategy's case in the quick subset (`bash tests/run.sh --quick`)
@pytest.mark.parametrize(("model", "dtype"), [
    pytest.param(m, "float64", marks=[pytest.mark.quick(strategy="snapshot")] if m == "cdgcn" else [])
    for m in MODELS] + [("cdgcn", "float32")])
def test_losses_match_single_process(launcher, small_dataset, tmp_path, model, dtype):
    # the precondition that makes this test meaningful (heat's assertNotEqual(size % P, 0))
    assert SMALL_T % 2 and SMALL_T % 3 and SMALL_N % 2 and SMALL_N % 3
    job = write_job(tmp_path / "job.yaml", small_dataset, model={"name": model}, train={"dtype": dtype})
    ref, _ = _losses(launcher, None, job, tmp_path / "plain")
    assert len(ref) == 3 and np.all(np.isfinite(ref))
    assert not np.allclose(ref[0, 0], ref[-1, 0], rtol=RTOL[dtype]), "loss did not move: the comparison is vacuous"
    for P in (2, 3):
        got, recs = _losses(launcher, P, job, tmp_path / f"p{P}")
        np.testing.assert_allclose(got, ref, rtol=RTOL[dtype], err_msg=f"{model} {dtype} P={P}")
        if model != "evolvegcn_o":  # EvolveGCN-O moves no features (IBM §5.5); the others must
            # TM-GCN's banded M-transform reads a time halo instead (tests/strategies/test_time_halo.py)
            assert recs[0]["bytes_by_tag"]["time_halo.fwd" if model == "tmgcn" else "redistribute.fwd"] > 0


@pytest.mark.parametrize(("model", "dtype", "width"), [
    pytest.param("evolvegcn_o", "float64", None, id="evolvegcn_o"),
    pytest.param("cdgcn", "float64", None, id="cdgcn"),
    # float32: the weight LSTM's vectorised sigmoid / tanh passes
    pytest.param("evolvegcn_o", "float32", None, id="evolvegcn_o-float32"),
    # rows of one cache line (8 float64, 16 float32): the whole-row operations of hpcdgnn/ops/_simd.py
    pytest.param("evolvegcn_o", "float64", 8, id="evolvegcn_o-line"),
    pytest.param("cdgcn", "float32", 16, id="cdgcn-line-float32")])
def test_compiled_kernels_match_single_process(launcher, small_dataset, tmp_path, monkeypatch, model, dtype, width):
    """The compiled CPU loops (HPCDGNN_KERNELS=always: every call, where real graphs pass the size thresholds) —
    the decoder's one-pass training loss (where embeddings and decoder are one cache line wide, ``width``, with its
    whole-row operations) and EvolveGCN-O's weight LSTM — run (as summary.json's ``compiled_kernels`` says) and
    give the same trajectory at P = 2 and 3 as in one process, and the torch paths' one (the same model, to
    rounding)."""
    pytest.importorskip("numba")
    # the compiled loops serve CPU tensors: on a GPU machine too, this test trains on the CPU
    wide = {"hidden": width} if width else {}
    job = write_job(tmp_path / "job.yaml", small_dataset, model={"name": model, **wide},
                    train={"dtype": dtype, "device": "cpu"}, **({"task": {"decoder_hidden": width}} if width else {}))
    monkeypatch.setenv("HPCDGNN_KERNELS", "torch")
    torch_ref, _ = _losses(launcher, None, job, tmp_path / "torch")
    monkeypatch.setenv("HPCDGNN_KERNELS", "always")
    ref, _ = _losses(launcher, None, job, tmp_path / "plain")
    np.testing.assert_allclose(ref, torch_ref, rtol=1e-9 if dtype == "float64" else RTOL[dtype],
                               err_msg=f"{model} {dtype}: compiled vs torch, one process")
    ran = {m: json.loads((tmp_path / m / "summary.json").read_text())["compiled_kernels"] for m in ("torch", "plain")}
    assert ran["torch"] == {}, ran  # summary.json names the loops a run took: none with HPCDGNN_KERNELS=torch
    lstm = {"lstm_forward", "lstm_backward"} if model == "evolvegcn_o" else set()  # the weight LSTM
    assert set(ran["plain"]) == {"edge_bce_train", *lstm}, ran
    # the widths and float32 change the loops' arithmetic, not how ranks split the pairs: P = 3 (odd) suffices
    for P in (2, 3) if width is None and dtype == "float64" else (3,):
        got, _ = _losses(launcher, P, job, tmp_path / f"p{P}")
        np.testing.assert_allclose(got, ref, rtol=RTOL[dtype], err_msg=f"{model} {dtype} compiled P={P}")


def test_checkpoint_blocks_with_compiled_kernels_match_unblocked(launcher, small_dataset, tmp_path, monkeypatch):
    """S2 with the compiled decoder loop (HPCDGNN_KERNELS=always) and rows of one cache line (hidden 8, float64):
    nb = 3 at P = 1 and 2, nb = 2 at P = 3, give the unblocked one-process losses and gradient norms."""
    pytest.importorskip("numba")
    job = write_job(tmp_path / "job.yaml", small_dataset, model={"name": "tmgcn", "hidden": 8},
                    train={"dtype": "float64", "device": "cpu"}, task={"decoder_hidden": 8})
    monkeypatch.setenv("HPCDGNN_KERNELS", "always")
    ref, _ = _losses(launcher, None, job, tmp_path / "nb1")
    ran = json.loads((tmp_path / "nb1" / "summary.json").read_text())["compiled_kernels"]
    assert set(ran) == {"edge_bce_train"}, ran
    for nb, P in ((3, None), (3, 2), (2, 3)):
        out = tmp_path / f"nb{nb}-p{P}"
        got, _ = _losses(launcher, P, job, out, f"strategy.blocks={nb}")
        np.testing.assert_allclose(got, ref, rtol=1e-6, err_msg=f"compiled nb={nb} P={P}")
        ran = json.loads((out / "summary.json").read_text())["compiled_kernels"]
        assert set(ran) == {"edge_bce_train"}, (nb, P, ran)


@pytest.mark.parametrize("model", ["tmgcn"])
def test_destination_buckets_keep_the_trajectory(launcher, small_dataset, tmp_path, monkeypatch, model):
    """The decoder's pairs in destination buckets (HPCDGNN_BUCKET_BYTES small enough for several on this
    graph; the compiled decoder loop, HPCDGNN_KERNELS=always): the trajectory of the drawn order to rounding in
    one process, and the bucketed one at P = 2 (snapshot) and P = 3 (vertex: pairs scored by source, a subset
    of each step's pairs on each rank)."""
    pytest.importorskip("numba")
    job = write_job(tmp_path / "job.yaml", small_dataset, model={"name": model}, train={"device": "cpu"})
    monkeypatch.setenv("HPCDGNN_KERNELS", "always")
    monkeypatch.setenv("HPCDGNN_BUCKET_BYTES", "0")
    plain, _ = _losses(launcher, None, job, tmp_path / "plain")
    monkeypatch.setenv("HPCDGNN_BUCKET_BYTES", "1024")  # 4 rows of (pv, dpv) at hidden 16, float64: 6 buckets
    ref, _ = _losses(launcher, None, job, tmp_path / "buckets")
    np.testing.assert_allclose(ref, plain, rtol=1e-9)
    for P, strategy in ((2, "snapshot"), (3, "vertex")):
        got, _ = _losses(launcher, P, job, tmp_path / f"p{P}", f"strategy.name={strategy}")
        np.testing.assert_allclose(got, ref, rtol=RTOL["float64"], err_msg=f"{strategy} P={P}")


def test_more_ranks_than_snapshots_and_node_classification(launcher, tmp_path):
    """P = 3 > T = 2: idle ranks take part in every collective, forward and backward."""
    data = make_dataset(tmp_path / "tiny", T=2, N=11, m=20)
    jobs = {m: write_job(tmp_path / f"{m}.yaml", data, model={"name": m}, task={"name": "node_classification"})
            for m in MODELS}
    refs = _losses_many(launcher, None, [(job, tmp_path / f"{m}-plain", ()) for m, job in jobs.items()])
    gots = _losses_many(launcher, 3, [(job, tmp_path / f"{m}-p3", ()) for m, job in jobs.items()])
    for model, (ref, _), (got, _) in zip(MODELS, refs, gots, strict=True):
        np.testing.assert_allclose(got, ref, rtol=1e-6, err_msg=model)


def test_more_ranks_than_vertices(launcher, tmp_path):
    """P = 3 > N = 2 vertices: a rank owns no vertex row and still runs the LSTM's collectives."""
    data = make_dataset(tmp_path / "two", T=5, N=2, m=4)
    job = write_job(tmp_path / "job.yaml", data, task={"name": "node_classification"})
    ref, _ = _losses(launcher, None, job, tmp_path / "plain")
    got, _ = _losses(launcher, 3, job, tmp_path / "p3")
    np.testing.assert_allclose(got, ref, rtol=1e-6)


@pytest.mark.parametrize("balance", ["work"])  # count-balanced cuts differ only in the plan: tests/partition/
def test_block_layouts_are_exact(launcher, small_dataset, tmp_path, balance):
    """Contiguous snapshot blocks (IBM §4.2), work- or count-balanced, reproduce P = 1 too."""
    layout = f"block-{balance}"
    strategy = {"layout": "block", "balance": balance}
    models = ("cdgcn", "tmgcn")
    jobs = {m: write_job(tmp_path / f"{m}.yaml", small_dataset, model={"name": m}, strategy=strategy) for m in models}
    refs = _losses_many(launcher, None, [(job, tmp_path / f"{m}-plain", ()) for m, job in jobs.items()])
    for P in (2, 3):
        gots = _losses_many(launcher, P, [(job, tmp_path / f"{m}-p{P}", ()) for m, job in jobs.items()])
        for model, (ref, _), (got, _) in zip(models, refs, gots, strict=True):
            np.testing.assert_allclose(got, ref, rtol=1e-6, err_msg=f"{model} {layout} P={P}")


@pytest.mark.parametrize("model", MODELS)
def test_checkpoint_blocks_match_unblocked(launcher, small_dataset, tmp_path, model):
    """S2: nb in {2, 3, 5} blocks (none divides T = 7) give the nb = 1 losses and gradient norms,
    at P = 1 and at P = 3 (float64, rtol 1e-6).
    """
    job = write_job(tmp_path / "job.yaml", small_dataset, model={"name": model})
    ref, _ = _losses(launcher, None, job, tmp_path / "nb1")
    for P, nbs in ((None, (2,)), (3, (3, 5))):  # every nb once, P = 1 and P = 3 (the full grid: 7 runs a model)
        assert all(SMALL_T % nb for nb in nbs)
        gots = _losses_many(launcher, P, [(job, tmp_path / f"nb{nb}-p{P}", (f"strategy.blocks={nb}",)) for nb in nbs])
        for nb, (got, _) in zip(nbs, gots, strict=True):
            np.testing.assert_allclose(got, ref, rtol=1e-6, err_msg=f"{model} nb={nb} P={P}")
