"""Sizes a node cannot hold are one line before anything is built, and the bound behind it is a lower bound."""

from __future__ import annotations

import json
import re
import resource
import subprocess
import sys
from types import SimpleNamespace

import numpy as np
import pytest

from hpcdgnn.config import load_job
from hpcdgnn.data.manifest import load_manifest
from hpcdgnn.errors import ConfigError
from hpcdgnn.train.footprint import check_footprint, lower_bound
from tests.conftest import REPO, make_dataset, mpi_env, read_metrics, write_job


@pytest.fixture(scope="module")
def wide_dataset(tmp_path_factory):
    return make_dataset(tmp_path_factory.mktemp("wide") / "data", 7, 5000, 40)


@pytest.mark.parametrize(("model", "strategy", "ranks"), [
    ({"name": "cdgcn", "layers": 3}, "snapshot", None),
    ({"name": "tmgcn"}, "vertex", 2),
    ({"name": "gconv_gru", "order": 3}, "pss", 3),
    ({"name": "gconv_lstm", "order": 4, "layers": 1}, "snapshot", None),
    # K large against the widths: the bases dominate (counted over all T·N rows they were 1.4x the peak)
    ({"name": "dcrnn", "order": 20, "layers": 1}, "snapshot", None),
])
def test_the_bound_is_below_what_real_runs_hold(small_dataset, launcher, tmp_path, model, strategy, ranks):
    """A job that fits must never be refused: the bound's activations and parameters stay below the measured
    activation peak of every rank and the parameters with Adam's two moments. The measured peak is pinned from
    the other side by the planner's prediction, counted on its own micro-graphs (``planner.work``), and each
    rank's peak RSS lies where a Python process with torch does (bytes, not KiB)."""
    job = write_job(tmp_path / "job.yaml", small_dataset, model={"hidden": 6, **model}, strategy={"name": strategy},
                    train={"epochs": 1, "threads": 1, "dtype": "float64"})
    proc = launcher.run(ranks, ["-m", "hpcdgnn", "run", str(job), "--output", str(tmp_path / "run")])
    assert proc.returncode == 0, proc.stderr
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    bound = lower_bound(load_job(job), load_manifest(small_dataset), ranks or 1)
    assert 0 < bound["activations"][0] + bound.get("basis", (0,))[0] <= min(summary["memory"]["activation_peak_bytes"])
    assert ("basis" in bound) == (model["name"] in ("gconv_gru", "gconv_lstm", "dcrnn"))
    assert 0 < bound["parameters"][0] <= 3 * 8 * summary["parameters"]["count"]
    assert read_metrics(tmp_path / "run")[-1]["activation_peak_bytes"] >= bound["activations"][0]
    from hpcdgnn.planner.predict import plan_job
    from hpcdgnn.planner.rates import MachineRates

    pred = plan_job(load_job(job), load_manifest(small_dataset), str(small_dataset), [ranks or 1], MachineRates(),
                    strategies=[strategy])[0]
    measured = max(summary["memory"]["activation_peak_bytes"])
    assert 0.67 <= pred.memory_parts["activations"] / measured <= 1.5, (pred.memory_parts, summary["memory"])
    assert all(64 * 2**20 < b < 16 * 2**30 for b in summary["memory"]["peak_rss_bytes"]), summary["memory"]


@pytest.mark.parametrize(("override", "term"), [
    ("model.hidden=1000000", "parameters"),  # was killed (exit 137) building the model for the plan
    ("model.layers=100000", "activations"),  # was killed by the kernel mid set-up
    ("task.negatives=100000000000", "pairs"),  # was a numpy MemoryError traceback
    # one layer of a K-term cell (a trial's 2.4·10⁹ parameters were killed by the kernel): the K-term bases its
    # gates read over the rank's rows, larger than the bases' weights
    ("model.name=gconv_gru model.layers=1 model.order=100000000 strategy.name=pss", "basis"),
])
@pytest.mark.parametrize("ranks", [None, 2])
def test_a_size_the_node_cannot_hold_is_one_line_before_anything_is_built(wide_dataset, launcher, tmp_path,
                                                                           override, term, ranks):
    """The data are small (T = 7, N = 5000), so the bound needs absurd sizes here; on a real graph a digit too
    many does it."""
    job = write_job(tmp_path / "job.yaml", wide_dataset)
    proc = launcher.run(ranks, ["-m", "hpcdgnn", "run", str(job), "--output", str(tmp_path / "run"), "--set",
                                *override.split()], timeout=120)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    errors = [ln for ln in proc.stderr.splitlines() if "hpcdgnn: error:" in ln]
    assert len(errors) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert "this job needs at least" in errors[0] and f"({term} " in errors[0], errors[0]
    assert "its share of the node's memory" in errors[0], errors[0]
    # more ranks are advice where they shrink the term: not for the parameters every rank holds whole
    if term != "pairs":
        assert ("spread the job over more ranks" in errors[0]) is (term in ("activations", "basis")), errors[0]


#: an event stream's sizes as the event regime's footprint reads them
MANIFEST = SimpleNamespace(num_vertices=1000, edge_feature_dim=4, time_gap=1.0, eval_negatives=None)


def _tgn_job(dtype: str = "float32", negatives: int = 1, eval_negatives: int = 49, protocol: str = "per_event",
             **model):
    """A TGN job's sections as the footprint reads them (hidden 100, widths 100, batches of 600 events)."""
    from hpcdgnn.nn.models.tgn import TGNOptions
    from hpcdgnn.tasks.temporal_link_prediction import TemporalLinkPredictionOptions

    return SimpleNamespace(model=TGNOptions(**{"name": "tgn", "hidden": 100, **model}),
                           task=TemporalLinkPredictionOptions(negatives=negatives, eval_negatives=eval_negatives,
                                                              batch_events=600, train_protocol=protocol,
                                                              eval_protocol=protocol),
                           train=SimpleNamespace(dtype=dtype), strategy=SimpleNamespace(name="memory"))


def test_the_event_regime_bounds_its_batch():
    job = _tgn_job(neighbors=10**8)
    with pytest.raises(Exception, match=r"tgn batch .* set by task.eval_negatives, model.neighbors, task.batch_events"):
        check_footprint(job, MANIFEST, 1, 2**34, "job.yaml")  # evaluation's 49 negatives outweigh training's 1
    check_footprint(_tgn_job(), MANIFEST, 1, 2**34, "job.yaml")  # the default sizes pass
    # evaluation's roots read their neighbours' messages too: many negatives are refused, naming the key
    with pytest.raises(Exception, match=r"tgn batch .* set by task.eval_negatives, model.neighbors"):
        check_footprint(_tgn_job(eval_negatives=100_000), MANIFEST, 1, 2**34, "job.yaml")
    with pytest.raises(Exception, match=r"tgn batch .* set by task.negatives, model.neighbors") as err:
        check_footprint(_tgn_job(negatives=100_000), MANIFEST, 1, 2**34, "job.yaml")
    assert "more ranks" not in str(err.value)  # a batch slice is the keys' (strategy.minibatch), not P's
    # a TGB stream ranks against its fixed negatives (here 100,000 an event), whatever task.eval_negatives says
    tgb = SimpleNamespace(**{**vars(MANIFEST), "eval_negatives": {"val": 10**8, "test": 10**8},
                             "split": {"train": (0, 8000), "val": (8000, 9000), "test": (9000, 10_000)}})
    with pytest.raises(Exception, match=r"tgn batch .* set by model.neighbors, task.batch_events") as err:
        check_footprint(_tgn_job(), tgb, 1, 2**34, "job.yaml")
    assert "task.eval_negatives" not in str(err.value)


@pytest.mark.mpi  # python -m hpcdgnn run (P = 1)
def test_an_allocation_that_fails_anyway_is_one_line_naming_the_sizes(small_dataset, tmp_path):
    """Past the bound (which counts only what must exist at once), numpy's MemoryError and torch's allocator
    error end the run in one line, not a traceback: here under a 6 GiB address-space limit."""
    job = write_job(tmp_path / "job.yaml", small_dataset, task={"negatives": 5_000_000})

    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (6 * 2**30, 6 * 2**30))

    proc = subprocess.run([sys.executable, "-m", "hpcdgnn", "run", str(job), "--output", str(tmp_path / "run")],
                          capture_output=True, text=True, timeout=120, env=mpi_env(), cwd=REPO, preexec_fn=limit)
    assert proc.returncode == 2, proc.stdout + proc.stderr[-2000:]
    errors = [ln for ln in proc.stderr.splitlines() if "hpcdgnn: error:" in ln]
    assert len(errors) == 1 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert "out of memory (" in errors[0] and "task.negatives" in errors[0], errors[0]


def test_an_evaluation_slot_is_bounded_by_the_smaller_of_key_value_and_row_phi():
    """Evaluation's slots hold key and value (2H) on the per-slot path, the memory row and Φ (d + d_t) on the dense
    one: the bound counts the smaller, and names the widths that set it."""
    from hpcdgnn.regimes.events import footprint

    nbytes, keys = footprint(_tgn_job(memory_dim=20, time_dim=10), MANIFEST, 1)["tgn batch"]
    # each root's rows, and each scored pair's destination product (H)
    assert nbytes == 4 * 51 * 600 * (20 + 100 + 10 * (4 + 20 + 10) + 100)
    assert "model.memory_dim, model.time_dim" in keys
    job = _tgn_job(memory_dim=150, time_dim=150)  # now 2H = 200 < d + d_t = 300
    assert footprint(job, MANIFEST, 1)["tgn batch"][0] == 4 * 51 * 600 * (150 + 100 + 10 * (4 + 200) + 100)


def test_per_batch_protocols_embed_each_node_once_at_most():
    """Under ``per_batch`` a slice embeds each distinct node once: its roots are at most N (1,000 here, of the
    51 × 600 pairs scored), which the bound counts; the scored pairs still each hold a product row."""
    from hpcdgnn.regimes.events import footprint

    nbytes = footprint(_tgn_job(memory_dim=20, time_dim=10, protocol="per_batch"), MANIFEST, 1)["tgn batch"][0]
    assert nbytes == 4 * (1000 * (20 + 100 + 10 * (4 + 20 + 10)) + 51 * 600 * 100)
    assert nbytes < footprint(_tgn_job(memory_dim=20, time_dim=10), MANIFEST, 1)["tgn batch"][0] / 4
    # training's slice capped at N: its negatives and batch size no longer set the term, so the line does not
    # name them
    job = _tgn_job(negatives=100_000, eval_negatives=1, memory_dim=20, time_dim=10, protocol="per_batch")
    nbytes, keys = footprint(job, MANIFEST, 1)["tgn batch"]
    assert nbytes == 4 * 1000 * (20 + 100 + 10 * (4 + 200)) and keys == "model.neighbors, model.hidden"


@pytest.mark.parametrize(("static", "encoding", "dtype"), [("off", "fixed", "float32"), ("on", "learnable", "float64")])
def test_the_event_regime_counts_tgn_parameters_exactly(static, encoding, dtype):
    """The parameters term is TGN's and its link predictor's parameters (static table included) with Adam's two
    moments, and names TGN's widths, not a GCN's layers."""
    from hpcdgnn.nn.models.tgn import TGN
    from hpcdgnn.regimes.events import footprint
    from hpcdgnn.tasks.temporal_link_prediction import TemporalLinkPrediction, TemporalLinkPredictionOptions

    job = _tgn_job(dtype, hidden=12, memory_dim=7, time_dim=5, neighbors=3, static_memory=static,
                   time_encoding=encoding)
    net = TGN(MANIFEST.num_vertices, 4, 7, 5, 12, 2, static == "on", encoding == "learnable")
    head = TemporalLinkPrediction(TemporalLinkPredictionOptions(), MANIFEST, 12, 0)
    count = sum(p.numel() for mod in (net, head) for p in mod.parameters())
    nbytes, keys = footprint(job, MANIFEST, 1)["parameters"]
    assert nbytes == 3 * (8 if dtype == "float64" else 4) * count
    assert "model.memory_dim" in keys and "model.layers" not in keys
    assert ("model.static_memory" in keys) == (static == "on")


@pytest.mark.parametrize("layers", [1, 3])
def test_every_snapshot_model_s_parameters_are_counted_exactly(small_dataset, tmp_path, layers):
    """The parameters term counts the model the run builds (on the meta device; a deep stack from its first two
    layers), for every model, K-term cells at another order and as encoder–decoders, TM-GCN at another window."""
    from hpcdgnn.nn.models import available_models
    from hpcdgnn.regimes.timeline import build_model, model_parameters

    manifest = load_manifest(small_dataset)
    cases = [({"name": name}, {}) for name in available_models()]
    cases += [({"name": name, "order": 3, "encoder_decoder": True}, {"name": "regression"})
              for name in ("gconv_gru", "gconv_lstm", "gcrn_m1", "dcrnn")]
    cases.append(({"name": "tmgcn", "window": 5}, {}))
    for model, task in cases:
        job = load_job(write_job(tmp_path / "job.yaml", small_dataset, model={**model, "layers": layers},
                                 **({"task": task} if task else {})))
        counted = model_parameters(job, manifest)
        assert counted == sum(p.numel() for p in build_model(job, manifest).parameters()), model


def test_a_full_batch_epoch_holds_every_training_step_s_pairs(small_dataset, tmp_path):
    """A trial's ``task.negatives: 100000`` on CollegeMsg at P = 2 grew past 8 GB unrefused: the bound counted
    one step's pairs, but a full-batch epoch scores every training step's before its backward. Here 4 training
    steps of 3,000 edges: 19.2 GB of pair indices, 9.6 GB on the most loaded of 2 ranks at least — refused at
    8 GiB naming task.negatives; one step's alone (4.8 GB) passed. A sampled strategy's batches score a share."""
    from dataclasses import replace

    from hpcdgnn.errors import ConfigError

    m = load_manifest(small_dataset)
    m = replace(m, snapshot_edges=[3000] * m.num_snapshots)
    job = load_job(write_job(tmp_path / "job.yaml", small_dataset, task={"negatives": 100_000}))
    with pytest.raises(ConfigError, match=r"\(pairs 8\.9 GiB, set by task\.negatives\)"):
        check_footprint(job, m, 2, 8 * 2**30, "job.yaml")
    check_footprint(load_job(write_job(tmp_path / "ok.yaml", small_dataset)), m, 2, 8 * 2**30, "job.yaml")
    sampled = load_job(write_job(tmp_path / "s.yaml", small_dataset, task={"negatives": 100_000},
                                 strategy={"name": "sequences", "window": 2}))
    check_footprint(sampled, m, 2, 8 * 2**30, "job.yaml")  # one step's 4.8 GB: fits


def test_a_graph_rnn_cell_s_bases_are_counted(wide_dataset, tmp_path):
    """A trial's ``model.order: 3000`` (GConvGRU under pss, P = 2) passed the bound and grew past 8 GB: the bound
    left out the K-term bases the cell's gates read and keep for the backward — its input's (K·F a row) and each
    training step's of its state (2·K·hidden a GRU layer) — over the steps up to the training horizon (4 of 7
    here), whose tensors autograd keeps. Here 10,000 rows a rank of 2 layers hold 4.5 GiB of them at least:
    refused at 4 GiB naming model.order; order 3 fits."""
    from hpcdgnn.errors import ConfigError

    m = load_manifest(wide_dataset)
    job = load_job(write_job(tmp_path / "job.yaml", wide_dataset, model={"name": "gconv_gru", "order": 3000},
                             strategy={"name": "pss"}))
    with pytest.raises(ConfigError, match=r"\(basis 4\.5 GiB, set by model\.order, model\.hidden\)"):
        check_footprint(job, m, 2, 4 * 2**30, "job.yaml")
    check_footprint(load_job(write_job(tmp_path / "ok.yaml", wide_dataset, model={"name": "gconv_gru", "order": 3},
                                       strategy={"name": "pss"})), m, 2, 4 * 2**30, "job.yaml")


@pytest.mark.parametrize("memory_time", ["query", "event"])
def test_the_event_regime_counts_the_node_memory_a_group_shares(memory_time):
    """The node memory (N rows of d + mail values, N update times, N mail gaps under ``memory_time: event``) is
    one copy a memory group, shared by at most its i·j ranks; on a stream of 10^9 nodes it is the term a refusal
    names."""
    from hpcdgnn.regimes.events import footprint
    from hpcdgnn.strategies.node_memory import NodeMemory

    job = _tgn_job(memory_dim=20, memory_time=memory_time)
    rows = NodeMemory(None, 1000, 20, 2 * 20 + 4, np.float32, gaps=memory_time == "event").nbytes
    assert footprint(job, MANIFEST, 1)["node memory"] == (rows, "model.memory_dim (with the stream's N nodes)")
    job.strategy = SimpleNamespace(name="memory", minibatch=2, epoch=3, memory=2)
    assert footprint(job, MANIFEST, 12)["node memory"][0] == -(-rows // 6)
    huge = SimpleNamespace(**{**vars(MANIFEST), "num_vertices": 10**9})
    with pytest.raises(ConfigError, match=r"node memory .*, set by model.memory_dim \(with the stream's N nodes\)"):
        check_footprint(_tgn_job(memory_time=memory_time), huge, 1, 2**34, "job.yaml")


def test_a_peak_the_planner_predicts_beyond_the_node_is_refused_or_warned(wide_dataset, tmp_path, capsys):
    """The lower bound counts one tensor of a rank's rows; CD-GCN's every layer saves several (N = 50,000, T = 64:
    a bound of 175 MiB, a predicted and measured peak of 3.5 / 3.8 GiB), so a job between the two started, loaded
    and was killed by the kernel (exit 137, no line). The planner's peak now refuses a job above twice the
    rank's share and warns of one above it; a job within its share hears nothing."""
    from hpcdgnn.train.footprint import predicted_peak
    from hpcdgnn.train.setup import check_job

    job = load_job(write_job(tmp_path / "job.yaml", wide_dataset, model={"hidden": 32}))
    manifest = load_manifest(wide_dataset)
    peak = predicted_peak(job, manifest, 2, 2**40)["bytes"]
    bound = sum(b for b, _ in lower_bound(job, manifest, 2).values())
    assert 64 * bound > peak / 3 > bound, (bound, peak)  # between the bound and the peak: what this check is for
    capsys.readouterr()
    with pytest.raises(ConfigError) as e:
        check_job(job, "job.yaml", 2, peak / 3)
    assert str(e.value).startswith("job.yaml: the planner predicts a peak of ") and "at P = 2 (strategy snapshot" in \
        str(e.value), e.value
    # six ranks hold a third of the peak each, the parameters every rank holds whole add one
    assert re.search(r"the kernel would kill the run; spread over about [67] ranks it would fit, or lower model\.",
                     str(e.value)), e.value
    check_job(job, "job.yaml", 2, peak / 1.5)
    warned = capsys.readouterr().err
    assert warned.startswith("hpcdgnn: warning: job.yaml: the planner predicts a peak of ") and \
        "the kernel may kill the run (exit 137)" in warned and warned.count("\n") == 1, warned
    check_job(job, "job.yaml", 2, peak * 1.01)
    assert capsys.readouterr().err == ""


@pytest.mark.mpi
def test_a_run_whose_predicted_peak_a_node_cannot_hold_is_refused_at_three_ranks(wide_dataset, launcher, tmp_path):
    """The run's set-up (rank 0, against the smallest share of any rank: tests/mpi/small_node.py gives rank 2
    a third of the predicted peak) refuses in one line, exit 2, and leaves no run directory."""
    from hpcdgnn.train.footprint import predicted_peak

    path = write_job(tmp_path / "job.yaml", wide_dataset, model={"hidden": 32})
    peak = predicted_peak(load_job(path), load_manifest(wide_dataset), 3, 2**40)["bytes"]
    proc = launcher.run(3, ["tests/mpi/small_node.py", "2", str(peak / 3 / 2**20), "--", "run", str(path),
                            "--output", str(tmp_path / "r")], timeout=120)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    errors = [ln for ln in proc.stderr.splitlines() if "error:" in ln]
    assert len(errors) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert "the planner predicts a peak of" in errors[0] and "at P = 3" in errors[0], errors[0]
    assert not (tmp_path / "r").exists()


def test_a_chunk_plan_s_appearance_map_is_counted_on_every_rank(small_dataset, tmp_path):
    """Every rank of a ``chunk`` run holds the plan's appearance map whole (``strategy.lookup``), whatever P: at
    P = 64 on T·N = 7·10⁸ appearances it outweighs a rank's share of the activations. Refused in one line naming
    the map and the key that shrinks it (``lookup: active`` where the tables are asked for), without advice to
    spread the job (more ranks do not shrink it); a grid plan holds none."""
    from dataclasses import replace

    m = load_manifest(small_dataset)
    m = replace(m, num_vertices=10**8, snapshot_active=[10**6] * m.num_snapshots)

    def job(**strategy):
        return load_job(write_job(tmp_path / "job.yaml", small_dataset, model={"name": "tgcn"},
                                  strategy={"name": "chunk", **strategy}))

    table, auto = lower_bound(job(lookup="table"), m, 64), lower_bound(job(), m, 64)
    assert table["appearance map"][0] > 9 * 7 * 10**8 > table["activations"][0]
    assert table["appearance map"][1].startswith("strategy.lookup")
    assert auto["appearance map"][0] < table["appearance map"][0] / 2  # auto takes the active form here
    with pytest.raises(ConfigError, match=r"\(appearance map 6\.\d GiB, set by strategy\.lookup \(active holds "
                                          r"less\)\) and this rank has 4\.0 GiB .*; lower those$"):
        check_footprint(job(lookup="table"), m, 64, 4 * 2**30, "job.yaml")
    with pytest.raises(ConfigError, match=r"\(appearance map 2\.\d GiB, set by strategy\.name"):
        check_footprint(job(), m, 64, 2 * 2**30, "job.yaml")
    check_footprint(job(), m, 64, 4 * 2**30, "job.yaml")
    # numpy tables on the host: a GPU job checks them against the host's share, not the device's
    check_footprint(job(lookup="table"), m, 64, 4 * 2**30, "job.yaml", terms="device")
    with pytest.raises(ConfigError, match=r"\(appearance map "):
        check_footprint(job(lookup="table"), m, 64, 4 * 2**30, "job.yaml", terms="host")
    grid = load_job(write_job(tmp_path / "grid.yaml", small_dataset, model={"name": "tgcn"},
                              strategy={"name": "grid"}))
    assert "appearance map" not in lower_bound(grid, m, 64)


def test_lookup_active_on_mostly_active_appearances_is_refused_naming_lookup(small_dataset, tmp_path):
    """``strategy.lookup: active`` where most appearances are active holds ~3x the tables' bytes: a rank with room
    for the tables but not for that is refused naming ``strategy.lookup`` (the table holds less), not
    ``strategy.name`` (another strategy), and the same job with the tables passes."""
    from dataclasses import replace

    m = load_manifest(small_dataset)
    m = replace(m, num_vertices=10**8, snapshot_active=[10**8] * m.num_snapshots)  # T·N = 7·10⁸, all active

    def job(lookup):
        return load_job(write_job(tmp_path / "job.yaml", small_dataset, model={"name": "tgcn"},
                                  strategy={"name": "chunk", "lookup": lookup}))

    with pytest.raises(ConfigError, match=r"\(appearance map \d+\.\d GiB, set by strategy\.lookup \(table holds "
                                          r"less\)\)"):
        check_footprint(job("active"), m, 64, 8 * 2**30, "job.yaml")
    check_footprint(job("table"), m, 64, 8 * 2**30, "job.yaml")


def test_the_appearance_map_bound_of_smoothed_data_is_below_the_map_made(tmp_path, monkeypatch):
    """The manifest counts each snapshot's raw edges' endpoints; a smoothed A_t (``--edge-life``) keeps older
    edges too, so the plan has more active appearances than the footprint counts and ``lookup: auto`` may make
    the tables where those counts say the active form: the bound is then the smaller form's, never more than
    the map a rank holds (T = 6, N = 200, 29 % of appearances active raw, 60 % smoothed)."""
    from hpcdgnn.partition import appearances
    from hpcdgnn.partition.chunk_plan import plan_chunks

    monkeypatch.setattr(appearances, "TABLE_BYTES", 0)  # auto picks the smaller form at any size
    data = make_dataset(tmp_path / "d", 6, 200, 34, edge_life=3)
    m = load_manifest(data)
    assert m.smoothed and appearances.active_is_smaller(6, 200, sum(m.snapshot_active))
    job = load_job(write_job(tmp_path / "job.yaml", data, model={"name": "tgcn"}, strategy={"name": "chunk"}))
    held = plan_chunks(m, 2, job).chunks.appearances
    assert isinstance(held, appearances.DenseChunks)  # the plan's A_t say the tables
    bound, keys = lower_bound(job, m, 2)["appearance map"]
    assert bound <= held.nbytes(), (bound, held.nbytes())
    assert keys.startswith("strategy.name")
