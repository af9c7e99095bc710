"""``prepare --format tgb``: a Temporal Graph Benchmark dataset directory read as TGB reads it (ids, times, split
by its time quantiles, the fixed validation and test negatives), and evaluation ranking each positive against
its own negatives with TGB's MRR (ties count half) — exact at P = 3, under both evaluation protocols."""

from __future__ import annotations

import json
import pickle

import numpy as np
import pytest

from hpcdgnn.data.events import load_event_manifest, read_eval_negatives, read_events
from hpcdgnn.tasks.temporal_link_prediction import TemporalLinkPrediction, TemporalLinkPredictionOptions
from tests.conftest import mpi_env, read_metrics, run_in_process, write_job

USERS, ITEMS, EVENTS = 7, 5, 60


def _wiki_like(root, negatives_of):
    """A tgbl-wiki directory in TGB's v2 layout: JODIE csv (user, item, float seconds, label, 3 features) and
    the ns pickles {(src, dst, t): negatives} in TGB's ids (items shifted past the users); ``negatives_of(i,
    dst)`` gives event i's list. Returns TGB's (src, dst, t) per event, in file (= time) order."""
    root.mkdir(parents=True)
    rng = np.random.default_rng(3)
    user, item = rng.integers(0, USERS, EVENTS), rng.integers(0, ITEMS, EVENTS)
    user[0], item[0] = USERS - 1, ITEMS - 1  # every id range used
    t = np.cumsum(rng.integers(1, 50, EVENTS)) + rng.random(EVENTS)  # distinct, fractional (TGB truncates)
    feat = rng.standard_normal((EVENTS, 3))
    lines = ["user_id,item_id,timestamp,state_label,comma_separated_list_of_features"]
    lines += [f"{u},{i},{float(s)!r},0,{','.join(repr(float(x)) for x in f)}"
              for u, i, s, f in zip(user, item, t, feat, strict=True)]
    (root / "tgbl-wiki_edgelist_v2.csv").write_text("\n".join(lines) + "\n")
    src, dst, ts = user, item + USERS, t.astype(np.int64)
    val_t, test_t = np.quantile(ts, [0.70, 0.85])  # TGB's generate_splits
    for split, mask in (("val", (ts > val_t) & (ts <= test_t)), ("test", ts > test_t)):
        table = {(np.int64(src[i]), np.int64(dst[i]), np.int64(ts[i])): np.asarray(negatives_of(i, dst[i]))
                 for i in np.flatnonzero(mask)}
        with open(root / f"tgbl-wiki_{split}_ns_v2.pkl", "wb") as f:
            pickle.dump(table, f)
    return src, dst, ts, feat


def _prepare(tmp_path, root, name="data"):
    proc = run_in_process(["prepare", str(root), "--format", "tgb", "--output", str(tmp_path / name)], mpi_env(),
                          tmp_path)
    return proc, tmp_path / name


def test_prepare_reads_ids_times_split_and_negatives_as_tgb(tmp_path):
    def negs(i, d):  # a varying count, never the positive itself
        return [v for v in range(USERS, USERS + ITEMS) if v != d][: 1 + i % 4]

    src, dst, ts, feat = _wiki_like(tmp_path / "tgbl_wiki", negs)
    proc, data = _prepare(tmp_path, tmp_path / "tgbl_wiki")
    assert proc.returncode == 0, proc.stderr
    assert "fixed evaluation negatives (tgb:tgbl-wiki)" in proc.stdout
    m = load_event_manifest(data)
    assert (m.num_vertices, m.num_sources, m.bipartite, m.num_events) == (USERS + ITEMS, USERS, True, EVENTS)
    ev = read_events(data, m)
    np.testing.assert_array_equal(ev.src, src)
    np.testing.assert_array_equal(ev.dst, dst)
    np.testing.assert_array_equal(ev.t, ts)
    np.testing.assert_allclose(ev.efeat, feat, rtol=1e-6)
    val_t, test_t = np.quantile(ts, [0.70, 0.85])
    assert m.split == {"train": (0, int((ts <= val_t).sum())), "val": (int((ts <= val_t).sum()),
                       int((ts <= test_t).sum())), "test": (int((ts <= test_t).sum()), EVENTS)}
    fixed = read_eval_negatives(data, m)
    for split in ("val", "test"):
        offsets, pool = fixed[split]
        lo, hi = m.split[split]
        for k, i in enumerate(range(lo, hi)):
            assert pool[offsets[k]:offsets[k + 1]].tolist() == negs(i, dst[i]), (split, i)
    report = json.loads(run_in_process(["inspect", str(data), "--json"], mpi_env(), tmp_path).stdout)
    assert report["eval_negatives"]["origin"] == "tgb:tgbl-wiki" and report["valid"]


def test_prepare_reads_a_weighted_tgb_file_with_first_seen_ids(tmp_path):
    root = tmp_path / "tgbl_coin"
    root.mkdir()
    rows = [(10, "0xa", "0xb", 2.0), (11, "0xb", "0xc", 0.0), (12, "0xa", "0xc", 8.0), (13, "0xd", "0xa", 1.0)] * 5
    rows = [(t + 10 * k, s, d, w) for k, (t, s, d, w) in enumerate(rows)]
    (root / "tgbl-coin_edgelist_v2.csv").write_text(
        "time,src,dst,weight\n" + "".join(f"{t},{s},{d},{w}\n" for t, s, d, w in rows))
    ids = {"0xa": 0, "0xb": 1, "0xc": 2, "0xd": 3}  # first seen, a row's source before its destination
    ts = np.array([r[0] for r in rows])
    val_t, test_t = np.quantile(ts, [0.70, 0.85])
    for split, keep in (("val", (ts > val_t) & (ts <= test_t)), ("test", ts > test_t)):
        table = {(ids[rows[i][1]], ids[rows[i][2]], rows[i][0]): np.array([0, 1]) for i in np.flatnonzero(keep)}
        with open(root / f"tgbl-coin_{split}_ns_v2.pkl", "wb") as f:
            pickle.dump(table, f)
    proc, data = _prepare(tmp_path, root)
    assert proc.returncode == 0, proc.stderr
    m = load_event_manifest(data)
    ev = read_events(data, m)
    assert (m.num_vertices, m.bipartite, m.edge_feature_names) == (4, False, ["log2_weight"])
    np.testing.assert_array_equal(ev.src, [ids[r[1]] for r in rows])
    np.testing.assert_array_equal(ev.dst, [ids[r[2]] for r in rows])
    np.testing.assert_allclose(ev.efeat[:, 0], [np.log2(1.0 if r[3] == 0 else r[3]) for r in rows])


def test_mrr_is_tgbs_formula_over_each_events_own_negatives():
    """rank = 1 + (#above + #at or above) / 2 over the real columns only (TGB's evaluator)."""
    rng = np.random.default_rng(0)
    pos = rng.integers(0, 4, 40).astype(float)  # integers: many ties
    neg = rng.integers(0, 4, (40, 6)).astype(float)
    valid = rng.random((40, 6)) < 0.7
    manifest = type("M", (), {"eval_negatives": {"origin": "tgb"}})()
    task = TemporalLinkPrediction(TemporalLinkPredictionOptions(), manifest, 4, 0)
    got = task.eval_stats("val", pos, neg, None, valid)
    want = sum(1.0 / (1 + 0.5 * ((n[v] > p).sum() + (n[v] >= p).sum()))
               for p, n, v in zip(pos, neg, valid, strict=True))
    assert got[2] == pytest.approx(want, rel=1e-12) and got[3] == 40


def test_ties_count_half_on_every_stream():
    """Without fixed negatives too: a scorer that gives every pair the same score ranks each positive in the
    middle of its m negatives (MRR 1 / (1 + m / 2)), not first (it read 1.0, a perfect score)."""
    task = TemporalLinkPrediction(TemporalLinkPredictionOptions(), type("M", (), {})(), 4, 0)
    m = 9
    got = task.eval_stats("val", np.zeros(5), np.zeros((5, m)), None)
    assert got[2] / got[3] == pytest.approx(1 / (1 + m / 2), rel=1e-12)
    # a positive strictly above every negative still ranks first, strictly below last
    got = task.eval_stats("val", np.array([1.0, -1.0]), np.zeros((2, m)), None)
    assert got[2] == pytest.approx(1.0 + 1 / (1 + m), rel=1e-12)


@pytest.mark.mpi
def test_a_positive_against_copies_of_itself_ranks_as_tgb_ranks_ties_at_any_p(tmp_path, launcher):
    """Event i's negatives are 1 + i % 3 copies of its own destination: every one ties, so TGB's MRR is
    mean(1 / (1 + (1 + i % 3) / 2)) whatever the model learned — under both evaluation protocols, at P = 1 and 3."""
    _, dst, _, _ = _wiki_like(tmp_path / "tgbl_wiki", lambda i, d: [d] * (1 + i % 3))
    proc, data = _prepare(tmp_path, tmp_path / "tgbl_wiki")
    assert proc.returncode == 0, proc.stderr
    m = load_event_manifest(data)
    want = {s: float(np.mean([1 / (1 + (1 + i % 3) / 2) for i in range(*m.split[s])])) for s in ("val", "test")}
    job = write_job(tmp_path / "job.yaml", data, train={"epochs": 1},
                    model={"name": "tgn", "hidden": 8, "heads": 2, "memory_dim": 8, "time_dim": 4, "neighbors": 3},
                    task={"name": "temporal_link_prediction", "batch_events": 7, "eval_negatives": 2},
                    strategy={"name": "memory"})

    def commands(p: int) -> list[list[str]]:
        return [["run", str(job), "--set", f"strategy.minibatch={p}", f"task.eval_protocol={proto}", "--output",
                 str(tmp_path / f"{proto}{p}")] for proto in ("per_event", "per_batch")]

    for args in commands(1):
        proc = run_in_process(args, mpi_env(), tmp_path)
        assert proc.returncode == 0, proc.stderr
    for proc in launcher.run_many(3, commands(3), cwd=tmp_path):
        assert proc.returncode == 0, proc.stderr
    for run in ("per_event1", "per_batch1", "per_event3", "per_batch3"):
        last = read_metrics(tmp_path / run)[-1]
        for s in ("val", "test"):
            assert last[f"{s}_mrr"] == pytest.approx(want[s], rel=1e-12), (run, s)


@pytest.mark.parametrize(("case", "words"), [
    ("no-negatives", "tgbl-wiki_val_ns_v2.pkl: missing"),
    ("code", "not TGB's negatives pickle (posix.system is not a numpy array or number)"),
    ("other-dataset", "no negatives for evaluation event"),
    ("flight", "tgbl-flight is not read yet"),
    ("empty", "no tgbl-NAME_edgelist"),
])
def test_bad_tgb_directories_are_one_line_and_write_nothing(tmp_path, case, words):
    root = tmp_path / "tgbl_wiki"
    if case == "empty":
        root.mkdir()
    elif case == "flight":
        root.mkdir()
        (root / "tgbl-flight_edgelist_v2.csv").write_text("day,src,dst,callsign,typecode\n1,a,b,c,d\n")
        for s in ("val", "test"):
            (root / f"tgbl-flight_{s}_ns_v2.pkl").write_bytes(pickle.dumps({}))
    else:
        _wiki_like(root, lambda i, d: [d])
        if case == "no-negatives":
            (root / "tgbl-wiki_val_ns_v2.pkl").unlink()
        elif case == "code":
            class Boom:
                def __reduce__(self):
                    import os

                    return os.system, ("echo pwned",)

            (root / "tgbl-wiki_val_ns_v2.pkl").write_bytes(pickle.dumps(Boom()))
        else:
            (root / "tgbl-wiki_val_ns_v2.pkl").write_bytes(pickle.dumps({(0, 1, 2): np.array([1])}))
    proc, data = _prepare(tmp_path, root)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and words in lines[0], proc.stderr
    assert "pwned" not in proc.stdout + proc.stderr
    assert not data.exists()


def test_prepare_tgb_refuses_an_option_it_would_not_use(tmp_path):
    """A snapshot or split option is refused in one line (TGB fixes them); ``--kind events`` is what TGB's
    streams are, so it may be said."""
    root = tmp_path / "tgbl_wiki"
    _wiki_like(root, lambda i, d: [d])
    for extra, flag in ((["--split", "0.5", "0.25", "0.25"], "--split"), (["--allow-large"], "--allow-large")):
        proc = run_in_process(["prepare", str(root), "--format", "tgb", "--output", str(tmp_path / "data"), *extra],
                              mpi_env(), tmp_path)
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode == 2 and len(lines) == 1 and f"{flag} does not apply to --format tgb" in lines[0], \
            proc.stderr
        assert not (tmp_path / "data").exists()
    proc = run_in_process(["prepare", str(root), "--format", "tgb", "--kind", "events", "--output",
                           str(tmp_path / "data")], mpi_env(), tmp_path)
    assert proc.returncode == 0, proc.stderr


def test_force_replaces_a_tgb_dataset_and_inspect_checks_its_negatives(tmp_path):
    """``--force`` refused a dataset ``prepare --format tgb`` had written ("not a dataset directory
    (eval_negatives.h5)"); ``inspect`` called a dataset valid whose fixed negatives a run refuses."""
    _wiki_like(tmp_path / "tgbl_wiki", lambda i, d: [d - 1 if d > USERS else d + 1])
    proc, data = _prepare(tmp_path, tmp_path / "tgbl_wiki")
    assert proc.returncode == 0, proc.stderr
    again = run_in_process(["prepare", str(tmp_path / "tgbl_wiki"), "--format", "tgb", "--output", str(data),
                            "--force"], mpi_env(), tmp_path)
    assert again.returncode == 0, again.stderr
    negatives = data / "eval_negatives.h5"
    import h5py

    with h5py.File(negatives, "r+") as f:  # same size, one negative out of range
        f["val/dst"][0] = USERS + ITEMS + 5
    report = json.loads(run_in_process(["inspect", str(data), "--json"], mpi_env(), tmp_path).stdout)
    assert not report["valid"] and any(str(negatives) in p for p in report["problems"]), report["problems"]
    negatives.write_bytes(negatives.read_bytes()[:100])
    report = json.loads(run_in_process(["inspect", str(data), "--json"], mpi_env(), tmp_path).stdout)
    assert any("100 bytes, manifest says" in p for p in report["problems"]), report["problems"]


def test_eval_negatives_beyond_the_candidates_refused_only_where_they_are_drawn(tmp_path):
    """A TGB stream ranks against its fixed negatives: ``task.eval_negatives`` above its candidate destinations
    was refused there although no negative is drawn; a stream without fixed negatives still refuses it."""
    from dataclasses import replace

    from hpcdgnn.errors import ConfigError

    _wiki_like(tmp_path / "tgbl_wiki", lambda i, d: [d - 1 if d > USERS else d + 1])
    proc, data = _prepare(tmp_path, tmp_path / "tgbl_wiki")
    assert proc.returncode == 0, proc.stderr
    m = load_event_manifest(data)
    TemporalLinkPrediction.check(TemporalLinkPredictionOptions(eval_negatives=ITEMS + 3), m)
    with pytest.raises(ConfigError, match="task.eval_negatives: 8 exceeds the stream's 5 candidate destinations"):
        TemporalLinkPrediction.check(TemporalLinkPredictionOptions(eval_negatives=ITEMS + 3),
                                     replace(m, eval_negatives=None))
    with pytest.raises(ConfigError, match="task.negatives: 6 exceeds"):
        TemporalLinkPrediction.check(TemporalLinkPredictionOptions(negatives=ITEMS + 1), m)


def _dataset(root) -> dict:
    """What a TGB dataset directory holds, beside where it was written from: the manifest's fields, the events
    and the fixed negatives."""
    from dataclasses import asdict

    m = load_event_manifest(root)
    ev, fixed = read_events(root, m), read_eval_negatives(root, m)
    fields = {k: v for k, v in asdict(m).items() if k not in ("created", "source", "shards", "eval_negatives")}
    arrays = {"src": ev.src, "dst": ev.dst, "t": ev.t, "efeat": ev.efeat,
              **{f"{s}/{i}": a for s in ("val", "test") for i, a in enumerate(fixed[s])}}
    return {"fields": fields, "source": {k: v for k, v in m.source.items() if k != "path"},
            "arrays": {k: np.asarray(v).tolist() for k, v in arrays.items()}}


def test_from_tgb_writes_what_prepare_writes_from_a_directory_or_tgb_s_dataset(tmp_path):
    """``prepare --format tgb`` had no Python adapter beside ``from_arrays``, ``from_temporal_data`` and
    ``from_signal``: a notebook with TGB's ``LinkPropPredDataset`` in hand had to shell out. ``from_tgb`` writes
    the same dataset from the directory or from the dataset object (its ``root``), with the options ``prepare``
    takes for tgb, refusals in one line naming its keyword arguments, and nothing written on a refusal."""
    from types import SimpleNamespace

    from hpcdgnn.data.adapters import from_tgb
    from hpcdgnn.errors import DataError

    root = tmp_path / "tgbl_wiki"
    _wiki_like(root, lambda i, d: [v for v in range(USERS, USERS + ITEMS) if v != d][: 1 + i % 4])
    proc, data = _prepare(tmp_path, root)
    assert proc.returncode == 0, proc.stderr
    m = from_tgb(root, tmp_path / "py")
    assert m.eval_negatives["origin"] == "tgb:tgbl-wiki" and m.num_events == EVENTS
    assert _dataset(tmp_path / "py") == _dataset(data)
    from_tgb(SimpleNamespace(root=str(root), name="tgbl-wiki"), tmp_path / "object")  # LinkPropPredDataset's root
    assert _dataset(tmp_path / "object") == _dataset(data)
    days = from_tgb(root, tmp_path / "days", time_unit=86400, shard_events=16)
    assert len(days.shards) == 4 and read_events(tmp_path / "days", days).t.max() < 1
    for call, words in [
        (lambda o: from_tgb(root, tmp_path / "py"), "choose another output or pass force=True"),
        (lambda o: from_tgb(5, o), "from_tgb: dataset: int 5 is not TGB's dataset directory (give its path, or "
                                   "TGB's LinkPropPredDataset)"),
        (lambda o: from_tgb(tmp_path / "nowhere", o), "nowhere: not a directory; give TGB's dataset directory"),
        (lambda o: from_tgb(root, o, shard_events=0), "from_tgb: shard_events: expected a whole number >= 1, got 0"),
        (lambda o: from_tgb(root, o, force="yes"), "from_tgb: force: expected True or False, got 'yes'"),
        (lambda o: from_tgb(root, o, time_unit=-1), f"{root}: time_unit must be a positive number (got -1)"),
    ]:
        with pytest.raises(DataError) as e:
            call(tmp_path / "refused")
        assert words in str(e.value) and "--" not in str(e.value) and "\n" not in str(e.value), e.value
        assert not (tmp_path / "refused").exists()
    assert from_tgb(root, tmp_path / "py", force=True).num_events == EVENTS


@pytest.mark.mpi
def test_from_tgb_on_rank_0_alone_or_on_every_rank_writes_once(tmp_path, launcher):
    """Under ``mpirun`` ``from_tgb`` is written once per job, as the other adapters are: on rank 0 alone (``if
    rank == 0``) without waiting for the others, or on every rank, each returning the manifest, rank 0's refusal
    every rank's."""
    root = tmp_path / "tgbl_wiki"
    _wiki_like(root, lambda i, d: [d])
    script = tmp_path / "script.py"
    script.write_text(
        "import os, sys\nfrom mpi4py import MPI\nfrom hpcdgnn.data.adapters import from_tgb\n"
        "from hpcdgnn.errors import DataError\n"
        "root, out = sys.argv[1], sys.argv[2]\n"
        "if MPI.COMM_WORLD.rank == 0:\n    from_tgb(root, out + '/alone')\n"
        "m = from_tgb(root, out + '/all')\n"
        "os.write(1, f'WROTE {m.num_events} {m.eval_negatives[\"origin\"]}\\n'.encode())\n"
        "try:\n    from_tgb(root, out + '/all')\n"
        "except DataError as e:\n    os.write(1, f'REFUSED {e}\\n'.encode())\n")
    proc = launcher.run(2, [str(script), str(root), str(tmp_path / "out")], timeout=120, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    assert proc.stdout.count(f"WROTE {EVENTS} tgb:tgbl-wiki") == 2, proc.stdout
    assert proc.stdout.count("REFUSED ") == 2 and proc.stdout.count("pass force=True") == 2, proc.stdout
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["all", "alone"]


def test_a_tgb_split_without_evaluation_events_is_told_without_advising_split(tmp_path, capsys):
    """Events at too few distinct times leave TGB's validation and test splits empty: ``prepare --format tgb``
    warned "give --split a larger share to val and test", an option it refuses (TGB fixes the split), and
    ``from_tgb`` said the same as "give split= …", an argument it does not take. Both now say why, without it."""
    import warnings

    from hpcdgnn.__main__ import main
    from hpcdgnn.data.adapters import from_tgb

    root = tmp_path / "tgbl_wiki"
    root.mkdir()
    (root / "tgbl-wiki_edgelist_v2.csv").write_text(
        "user_id,item_id,timestamp,state_label,f1\n" + "".join(f"{u % 3},{u % 4},100,0,0.5\n" for u in range(20)))
    for split in ("val", "test"):
        (root / f"tgbl-wiki_{split}_ns_v2.pkl").write_bytes(pickle.dumps({}))
    note = ("no val and no test events (split train=20 val=0 test=0, TGB's at its time quantiles 0.70 and 0.85; "
            "events at one time stay in one split): too few distinct times for TGB's evaluation")
    assert main(["prepare", str(root), "--format", "tgb", "--output", str(tmp_path / "cli")]) == 0
    assert capsys.readouterr().err == f"hpcdgnn prepare: warning: {tmp_path / 'cli'}: {note}\n"
    with warnings.catch_warnings(record=True) as told:
        warnings.simplefilter("always")
        from_tgb(root, tmp_path / "py")
    assert [(str(w.message), w.filename) for w in told] == [(f"{tmp_path / 'py'}: {note}", __file__)]
